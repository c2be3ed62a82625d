/*
 * signetd_getpid: getpid(2) answered from memory inside signetd.
 *
 * Why: glibc (since 2.25) makes a system call for every getpid(), and
 * issuing one certificate calls it six times, all for fork detection:
 * OpenSSL 3's DRBG asks on every generate (the serial number's bytes, the
 * key unmasking SoftHSM2 does in C_SignInit, the ECDSA nonce in C_Sign),
 * and SoftHSM2 asks itself on C_SignInit and C_Sign. On a virtual machine
 * a system call is not cheap: 1.3-1.6 us on the 2-vCPU host of
 * perf/README.md (its section 13 has the count and the A/B), some 8 us of
 * the ~0.2 ms of CPU a certificate costs.
 *
 * Defined in the executable, this getpid interposes on libc's for every
 * shared object signetd loads, the PKCS#11 module included: the dynamic
 * linker looks in the executable first, and the link puts the symbol in
 * the dynamic symbol table (--export-dynamic-symbol, CMakeLists.txt;
 * without it the symbol stays local and every library binds libc's).
 * glibc's own internal calls do not come here.
 *
 * Why it stays right across fork(): the pid is kept on a page mapped with
 * MADV_WIPEONFORK (Linux 4.14), which a child gets zero-filled, so the
 * child's first getpid() makes the system call and keeps its own pid. That
 * is what the fork detection above needs: a DRBG that fails to notice a fork
 * hands parent and child the same random bytes, and an ECDSA nonce used
 * twice gives the key away. (Not an atfork handler: handlers run in the
 * order they were registered, and p11-kit's own child handler calls
 * getpid().) Threads share the pid. A vfork child shares memory and would
 * see the parent's pid, but may only exec or _exit. When the page cannot be
 * had or the kernel refuses MADV_WIPEONFORK, every call is the system call,
 * as without this file. signetd itself never forks; the PKCS#11 module or
 * p11-kit may (a "remote:" module starts a process).
 *
 * The page is set up by a constructor, before main; a call made earlier
 * (another library's constructor) takes the system call.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The page holding the cached pid (0: not known: a fresh page, or a
 * child's wiped copy); NULL until the constructor set it. The pointer is
 * atomic too, in case a library's constructor started a thread. */
static _Atomic pid_t *_Atomic slot;

__attribute__((constructor)) static void getpid_slot_init(void)
{
	size_t len = (size_t)sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return;
	if (madvise(p, len, MADV_WIPEONFORK) != 0) {
		munmap(p, len);
		return;
	}
	atomic_store_explicit(&slot, (_Atomic pid_t *)p, memory_order_release);
}

/* Default visibility: the build hides symbols unless told. */
__attribute__((visibility("default"))) pid_t getpid(void)
{
	_Atomic pid_t *s = atomic_load_explicit(&slot, memory_order_acquire);
	if (!s)
		return (pid_t)syscall(SYS_getpid);
	/* Relaxed: every thread that stores here stores the same value. */
	pid_t pid = atomic_load_explicit(s, memory_order_relaxed);
	if (pid == 0) {
		pid = (pid_t)syscall(SYS_getpid);
		atomic_store_explicit(s, pid, memory_order_relaxed);
	}
	return pid;
}
