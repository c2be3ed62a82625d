/*
 * crash_shim: an LD_PRELOAD object that kills its process with SIGKILL at
 * the Nth file-system step, so that a test can interrupt `signetctl init`
 * (or signetd --init-dir) at every step deterministically and look at what
 * the interruption left (tests/init/test_init_crash.py drives it).
 *
 * A step is a call that changes what is on disk: mkdir, rename, unlink,
 * rmdir, fsync, ftruncate, an open that may create (O_CREAT), and a write
 * to anything but stdin, stdout and stderr (a log line is no step). Reads,
 * locks and stats are not steps: killing before them leaves the same disk
 * as killing before the next step. The kill comes *before* the Nth step
 * is made, so N = 1, 2, ... sees every state between two steps once.
 *
 * Environment:
 *   SG_CRASH_AT=N        kill before the Nth step (unset or 0: never)
 *   SG_CRASH_AFTER=N     kill right after the Nth step
 *   SG_CRASH_TRACE=PATH  append one line per step, "N op path-or-fd", to
 *                        PATH (the driver learns how many steps there are
 *                        and which ones are SoftHSM2's token store)
 *
 * Only the calls a program or a library makes through the dynamic linker
 * are seen: SoftHSM2's (it calls open/write/fsync itself) and signet's;
 * glibc's internal calls (fwrite's write) are not, and signet's file code
 * uses the system calls directly. Test code only: not thread-safe beyond
 * an atomic counter, which is all the two programs need before their
 * threads start (init runs before signetd starts any).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_long steps;

/* Steps are the program's, counted from the shim's own constructor on. A
 * sanitizer runtime starts earlier (ASan from .preinit_array, before any
 * constructor and before libc's environment is set) and may make steps of
 * its own there: ASan with log_path creates the report folder's parents
 * with mkdir. Counting those would shift every step number by a step no
 * trace line records (getenv is not usable yet). */
static atomic_bool started;

__attribute__((constructor)) static void shim_start(void)
{
	atomic_store(&started, true);
}

/* The build hides symbols by default; these must interpose libc's. */
#define SHIM __attribute__((visibility("default")))

/* The next definition of a libc function (the real one). */
#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

/* Reads the settings on every step: cheap next to the step itself, and no
 * constructor ordering to get wrong. The trace is written with raw system
 * calls, which the shim does not see. */
static long step(const char *op, const char *path, int fd)
{
	if (!atomic_load(&started))
		return 0;
	long n = atomic_fetch_add(&steps, 1) + 1;
	const char *trace = getenv("SG_CRASH_TRACE");
	if (trace && *trace) {
		char target[4096] = "?";
		if (path) {
			snprintf(target, sizeof(target), "%s", path);
		} else {
			char link[64];
			snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
			ssize_t k = readlink(link, target, sizeof(target) - 1);
			target[k > 0 ? k : 1] = 0;
		}
		char line[4200];
		int len = snprintf(line, sizeof(line), "%ld %s %s\n", n, op, target);
		long t = syscall(SYS_openat, AT_FDCWD, trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (t >= 0 && len > 0) {
			(void)!syscall(SYS_write, (int)t, line, (size_t)len);
			syscall(SYS_close, (int)t);
		}
	}
	const char *at = getenv("SG_CRASH_AT");
	if (at && atol(at) == n)
		kill(getpid(), SIGKILL);
	return n;
}

/* After the Nth step was made: SG_CRASH_AFTER=N (the state between a
 * step and the next, where the next is no step: a truncate's write). */
static void after(long n)
{
	const char *at = getenv("SG_CRASH_AFTER");
	if (n > 0 && at && atol(at) == n)
		kill(getpid(), SIGKILL);
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
}

SHIM int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	long n = (flags & O_CREAT) ? step("open", path, -1) : 0;
	int r = REAL("open", int (*)(const char *, int, ...))(path, flags, m);
	after(n);
	return r;
}

SHIM int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	long n = (flags & O_CREAT) ? step("open", path, -1) : 0;
	int r = REAL("open64", int (*)(const char *, int, ...))(path, flags, m);
	after(n);
	return r;
}

SHIM int openat(int dir, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	long n = (flags & O_CREAT) ? step("open", path, -1) : 0;
	int r = REAL("openat", int (*)(int, const char *, int, ...))(dir, path, flags, m);
	after(n);
	return r;
}

SHIM int creat(const char *path, mode_t m)
{
	long n = step("open", path, -1);
	int r = REAL("creat", int (*)(const char *, mode_t))(path, m);
	after(n);
	return r;
}

SHIM ssize_t write(int fd, const void *buf, size_t len)
{
	long n = fd > 2 ? step("write", NULL, fd) : 0;
	ssize_t r = REAL("write", ssize_t(*)(int, const void *, size_t))(fd, buf, len);
	after(n);
	return r;
}

SHIM int fsync(int fd)
{
	long n = step("fsync", NULL, fd);
	int r = REAL("fsync", int (*)(int))(fd);
	after(n);
	return r;
}

SHIM int fdatasync(int fd)
{
	long n = step("fsync", NULL, fd);
	int r = REAL("fdatasync", int (*)(int))(fd);
	after(n);
	return r;
}

SHIM int ftruncate(int fd, off_t len)
{
	long n = step("ftruncate", NULL, fd);
	int r = REAL("ftruncate", int (*)(int, off_t))(fd, len);
	after(n);
	return r;
}

SHIM int mkdir(const char *path, mode_t m)
{
	long n = step("mkdir", path, -1);
	int r = REAL("mkdir", int (*)(const char *, mode_t))(path, m);
	after(n);
	return r;
}

SHIM int rename(const char *from, const char *to)
{
	long n = step("rename", to, -1);
	int r = REAL("rename", int (*)(const char *, const char *))(from, to);
	after(n);
	return r;
}

SHIM int renameat(int fd1, const char *from, int fd2, const char *to)
{
	long n = step("rename", to, -1);
	int r = REAL("renameat", int (*)(int, const char *, int, const char *))(fd1, from, fd2, to);
	after(n);
	return r;
}

SHIM int unlink(const char *path)
{
	long n = step("unlink", path, -1);
	int r = REAL("unlink", int (*)(const char *))(path);
	after(n);
	return r;
}

SHIM int unlinkat(int dir, const char *path, int flags)
{
	long n = step("unlink", path, -1);
	int r = REAL("unlinkat", int (*)(int, const char *, int))(dir, path, flags);
	after(n);
	return r;
}

SHIM int rmdir(const char *path)
{
	long n = step("rmdir", path, -1);
	int r = REAL("rmdir", int (*)(const char *))(path);
	after(n);
	return r;
}

/* glibc's remove() calls unlink and rmdir internally, unseen. */
SHIM int remove(const char *path)
{
	long n = step("remove", path, -1);
	int r = REAL("remove", int (*)(const char *))(path);
	after(n);
	return r;
}
