/*
 * Tests for daemon/signetd_getpid.c, signetd's getpid() from memory: it
 * answers what the kernel answers, in every thread, and in a child after
 * fork() (and the child's child) its own pid, not the parent's; shared
 * objects resolve getpid to it; and OpenSSL's DRBG, whose fork detection
 * asks getpid(), still gives parent and child different bytes after a fork
 * (the failure that matters: the same random bytes on both sides of a fork
 * would be the same ECDSA nonce twice).
 */
#define _GNU_SOURCE
#include "sg_test.h"

#include <dlfcn.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t kernel_pid(void)
{
	return (pid_t)syscall(SYS_getpid);
}

static void t_matches_kernel(void)
{
	for (int i = 0; i < 3; i++)
		SG_CHECK(getpid() == kernel_pid());
}

static void *thread_pid(void *arg)
{
	*(pid_t *)arg = getpid();
	return NULL;
}

static void t_threads(void)
{
	pthread_t th[4];
	pid_t got[4] = {0};
	for (int i = 0; i < 4; i++)
		SG_CHECK(pthread_create(&th[i], NULL, thread_pid, &got[i]) == 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		SG_CHECK(got[i] == kernel_pid());
	}
}

/* Shared objects (libcrypto, a PKCS#11 module) find this getpid first. */
static void t_interposed(void)
{
	void *first = dlsym(RTLD_DEFAULT, "getpid");
	void *libc = dlsym(RTLD_NEXT, "getpid");
	SG_CHECK(first == (void *)getpid);
	SG_CHECK(libc != NULL && libc != first);
}

/* In the child: 0 when getpid() is the child's own pid, in the child and
 * in a grandchild; the failed check's number otherwise. */
static int child_checks(pid_t parent)
{
	if (getpid() != kernel_pid() || getpid() == parent)
		return 1;
	pid_t me = getpid();
	pid_t g = fork();
	if (g < 0)
		return 2;
	if (g == 0)
		_exit(getpid() == kernel_pid() && getpid() != me ? 0 : 3);
	int st = 0;
	if (waitpid(g, &st, 0) != g || !WIFEXITED(st))
		return 4;
	if (WEXITSTATUS(st) != 0)
		return WEXITSTATUS(st);
	return getpid() == me ? 0 : 5;
}

static void t_fork(void)
{
	pid_t parent = getpid(); /* cached before the fork */
	pid_t c = fork();
	SG_CHECK(c >= 0);
	if (c == 0)
		_exit(child_checks(parent));
	int st = 0;
	SG_CHECK(waitpid(c, &st, 0) == c);
	SG_CHECK(WIFEXITED(st));
	SG_CHECK(WEXITSTATUS(st) == 0);
	if (WEXITSTATUS(st) != 0)
		fprintf(stderr, "  child check %d failed\n", WEXITSTATUS(st));
	SG_CHECK(getpid() == parent && parent == kernel_pid());
}

/* The DRBG's state is copied into the child; only its fork detection
 * (getpid) makes the child reseed. Both draw right after the fork. */
static void t_drbg_after_fork(void)
{
	uint8_t warm[16], mine[32], theirs[32];
	SG_CHECK(RAND_bytes(warm, sizeof(warm)) == 1);
	SG_CHECK(RAND_priv_bytes(warm, sizeof(warm)) == 1);
	for (int priv = 0; priv < 2; priv++) {
		int fds[2];
		SG_CHECK(pipe(fds) == 0);
		pid_t c = fork();
		SG_CHECK(c >= 0);
		if (c == 0) {
			uint8_t b[32];
			int ok = (priv ? RAND_priv_bytes(b, sizeof(b)) : RAND_bytes(b, sizeof(b))) == 1;
			_exit(ok && write(fds[1], b, sizeof(b)) == (ssize_t)sizeof(b) ? 0 : 1);
		}
		close(fds[1]);
		SG_CHECK((priv ? RAND_priv_bytes(mine, sizeof(mine)) : RAND_bytes(mine, sizeof(mine))) == 1);
		SG_CHECK(read(fds[0], theirs, sizeof(theirs)) == (ssize_t)sizeof(theirs));
		close(fds[0]);
		int st = 0;
		SG_CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
		SG_CHECK(memcmp(mine, theirs, sizeof(mine)) != 0);
	}
}

SG_TEST_MAIN(SG_TEST(t_matches_kernel), SG_TEST(t_threads), SG_TEST(t_interposed), SG_TEST(t_fork),
             SG_TEST(t_drbg_after_fork))
