/*
 * fshim: an LD_PRELOAD library for test_agent.py that makes one file
 * system call of signet-agent slow or failing on demand, so that the
 * agent's writers can be made to overlap where they would otherwise
 * overlap by chance (the files of one service account written, removed
 * and swept from two threads).
 *
 * The control file named by SIGNET_FSHIM_CTL holds at most one line,
 * "<call> <name> <action>": call is mkdirat or openat, name the last
 * path component the call is given (a namespace's folder), action "fail"
 * (the call fails with EIO) or "delay:<ms>". A delay happens once per
 * arming: the thread that creates "<ctl>.entered" (O_EXCL) sleeps, then
 * creates "<ctl>.done"; other calls pass. The test removes both files to
 * arm it again. Read on every matching call, so the test may rewrite it
 * at any time. Test code only: never linked into a program.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { PASS, FAIL, DELAY };

/* What the control file says about call on name; *ms for DELAY. Reads
 * with raw system calls, so it never comes back here. */
static int action_of(const char *call, const char *name, long *ms)
{
	const char *ctl = getenv("SIGNET_FSHIM_CTL");
	if (!ctl || !name || strchr(name, '/'))
		return PASS;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return PASS;
	char buf[512];
	ssize_t n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	if (n <= 0)
		return PASS;
	buf[n] = '\0';
	char c[32], nm[256], act[64];
	if (sscanf(buf, "%31s %255s %63s", c, nm, act) != 3 || strcmp(c, call) != 0 || strcmp(nm, name) != 0)
		return PASS;
	if (strcmp(act, "fail") == 0)
		return FAIL;
	if (strncmp(act, "delay:", 6) != 0)
		return PASS;
	char path[4200];
	snprintf(path, sizeof(path), "%s.entered", ctl);
	fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return PASS; /* armed once: another call took it */
	syscall(SYS_close, fd);
	*ms = strtol(act + 6, NULL, 10);
	return DELAY;
}

static void delay_done(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	const char *ctl = getenv("SIGNET_FSHIM_CTL");
	char path[4200];
	snprintf(path, sizeof(path), "%s.done", ctl);
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		syscall(SYS_close, fd);
}

/* Applies the control file's action; false when the call must fail. */
static int gate(const char *call, const char *name)
{
	long ms = 0;
	switch (action_of(call, name, &ms)) {
	case FAIL:
		errno = EIO;
		return 0;
	case DELAY:
		delay_done(ms);
		return 1;
	default:
		return 1;
	}
}

int mkdirat(int dirfd, const char *name, mode_t mode)
{
	static int (*real)(int, const char *, mode_t);
	if (!real)
		real = (int (*)(int, const char *, mode_t))dlsym(RTLD_NEXT, "mkdirat");
	if (!gate("mkdirat", name))
		return -1;
	return real(dirfd, name, mode);
}

static int openat_common(const char *sym, int dirfd, const char *name, int flags, mode_t mode)
{
	int (*real)(int, const char *, int, ...) = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, sym);
	if (!gate("openat", name))
		return -1;
	return real(dirfd, name, flags, mode);
}

int openat(int dirfd, const char *name, int flags, ...)
{
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return openat_common("openat", dirfd, name, flags, mode);
}

int openat64(int dirfd, const char *name, int flags, ...)
{
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return openat_common("openat64", dirfd, name, flags, mode);
}
