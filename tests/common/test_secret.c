/*
 * Tests for sg_secret: file permissions (ssh-style refusal of group/other
 * access), newline stripping, size limits, the environment source, constant
 * time comparison results and random hex; then the memory the secrets live
 * in: a mapping the kernel leaves out of core dumps ("dd" in smaps) and
 * locks where allowed ("lo"), wiped before it is unmapped, a real core
 * dump (gcore) that shows heap memory but not the PIN, and the
 * non-dumpable process (checked in forked children, so that this test
 * process stays debuggable).
 *
 * _DEFAULT_SOURCE: syscall(2) for the munmap interposer, madvise below.
 */
#define _DEFAULT_SOURCE
#include "sg_secret.h"
#include "sg_test.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static char dir[512];

static void setup_dir(void)
{
	const char *t = getenv("SIGNET_TEST_TMP");
	snprintf(dir, sizeof(dir), "%s/secret-%d", t && *t ? t : "/tmp", (int)getpid());
	mkdir(dir, 0700);
}

/* Writes data to dir/name with exactly the given mode (umask bypassed). */
static const char *make(const char *name, const void *data, size_t n, mode_t mode)
{
	static char path[600];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	SG_CHECK(fd >= 0);
	if (fd < 0)
		return path;
	if (n)
		SG_CHECK(write(fd, data, n) == (ssize_t)n);
	SG_CHECK(fchmod(fd, mode) == 0);
	close(fd);
	return path;
}

static void expect_file(const char *content, size_t n, mode_t mode, int rc, const char *want)
{
	sg_secret *s = NULL;
	const char *path = make("pin", content, n, mode);
	SG_CHECK_RC(sg_secret_from_file(&s, path), rc);
	if (rc == 0 && s) {
		SG_CHECK(sg_secret_len(s) == strlen(want));
		SG_CHECK(memcmp(sg_secret_data(s), want, strlen(want)) == 0);
		SG_CHECK(sg_secret_cstr(s)[sg_secret_len(s)] == 0);
		SG_CHECK(sg_secret_equal(s, want, strlen(want)));
	}
	sg_secret_free(s);
}

static void t_file_modes(void)
{
	setup_dir(); /* idempotent: a single test can run alone */
	expect_file("1234", 4, 0600, 0, "1234");
	expect_file("1234", 4, 0400, 0, "1234");
	expect_file("1234", 4, 0644, SG_EAUTH, NULL);
	SG_CHECK_MSG("chmod 600");
	expect_file("1234", 4, 0640, SG_EAUTH, NULL);
	expect_file("1234", 4, 0604, SG_EAUTH, NULL);
	expect_file("1234", 4, 0601, SG_EAUTH, NULL);
}

/* The owner: this process's user or root, never another user (who could
 * read or replace the PIN). Needs root to give a file away. */
static void t_file_owner(void)
{
	setup_dir();
	if (geteuid() != 0) {
		printf("skip t_file_owner: giving a file to another user needs root\n");
		return;
	}
	sg_secret *s = NULL;
	const char *path = make("pin", "1234", 4, 0600);
	SG_CHECK(chown(path, 65534, 65534) == 0);
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EAUTH);
	SG_CHECK_MSG("belongs to uid 65534");
	SG_CHECK_MSG("chown it");
	SG_CHECK(chmod(path, 0400) == 0); /* a tight mode does not make another owner right */
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EAUTH);
	SG_CHECK(chown(path, 0, 0) == 0);
	SG_CHECK_OK(sg_secret_from_file(&s, path));
	sg_secret_free(s);
}

/* Writes a POSIX access ACL: user::r, the given named user (r), group::
 * group_perm, mask::mask, other::---. The kernel then shows the mask in the
 * file's group bits, as on a systemd credential. */
static int set_acl(const char *path, uint32_t user, unsigned group_perm, unsigned mask)
{
	const unsigned e[][3] = {{0x01, 04, 0xffffffffu}, {0x02, 04, user}, {0x04, group_perm, 0xffffffffu},
	                         {0x10, mask, 0xffffffffu}, {0x20, 0, 0xffffffffu}};
	uint8_t b[4 + 8 * 5] = {2, 0, 0, 0};
	for (size_t i = 0; i < 5; i++) {
		uint8_t *p = b + 4 + 8 * i;
		p[0] = (uint8_t)e[i][0];
		p[2] = (uint8_t)e[i][1];
		for (int k = 0; k < 4; k++)
			p[4 + k] = (uint8_t)(e[i][2] >> (8 * k));
	}
	return setxattr(path, "system.posix_acl_access", b, sizeof(b), 0);
}

/* A systemd credential handed to a service's user: root-owned 0400 plus an
 * ACL entry for that user, so stat says 0440. Accepted when the entry names
 * this process's user and nothing else is granted; refused when it names
 * someone else, grants the owning group (root's) or lets a user write. */
static void t_file_acl(void)
{
	setup_dir();
	if (geteuid() != 0) {
		printf("skip t_file_acl: root-owned files need root\n");
		return;
	}
	sg_secret *s = NULL;
	const char *path = make("pin", "1234", 4, 0400);
	if (set_acl(path, geteuid(), 0, 04) != 0) {
		printf("skip t_file_acl: no POSIX ACLs on this file system\n");
		return;
	}
	struct stat st;
	SG_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0440);
	SG_CHECK_OK(sg_secret_from_file(&s, path));
	SG_CHECK(s && sg_secret_equal(s, "1234", 4));
	sg_secret_free(s);
	s = NULL;

	SG_CHECK(set_acl(path, 65534, 0, 04) == 0); /* another user may read */
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EAUTH);
	SG_CHECK_MSG("its ACL");
	SG_CHECK(set_acl(path, geteuid(), 04, 04) == 0); /* root's group may read */
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EAUTH);
	SG_CHECK(set_acl(path, 65534, 0, 0) == 0); /* masked to nothing: only the owner */
	SG_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0400);
	SG_CHECK_OK(sg_secret_from_file(&s, path));
	sg_secret_free(s);
	s = NULL;
	SG_CHECK(chmod(path, 0444) == 0); /* others: refused whatever the ACL says */
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EAUTH);
	SG_CHECK_MSG("chmod 600");
}

static void t_file_content(void)
{
	setup_dir(); /* idempotent: a single test can run alone */
	expect_file("1234\n", 5, 0600, 0, "1234");
	expect_file("1234\r\n", 6, 0600, 0, "1234");
	expect_file("12\n\n", 4, 0600, 0, "12\n"); /* one newline only */
	expect_file("a b\tc", 5, 0600, 0, "a b\tc");
	expect_file("", 0, 0600, SG_EINVAL, NULL);
	SG_CHECK_MSG("empty");
	expect_file("\n", 1, 0600, SG_EINVAL, NULL);
	expect_file("\r\n", 2, 0600, SG_EINVAL, NULL);

	char *big = malloc(SG_SECRET_MAX + 2);
	SG_CHECK(big != NULL);
	if (!big)
		return;
	memset(big, 'p', SG_SECRET_MAX + 2);
	big[SG_SECRET_MAX] = 0;
	expect_file(big, SG_SECRET_MAX, 0600, 0, big);
	big[SG_SECRET_MAX] = 'p';
	expect_file(big, SG_SECRET_MAX + 1, 0600, SG_EINVAL, NULL);
	SG_CHECK_MSG("larger than");
	expect_file(big, SG_SECRET_MAX + 2, 0600, SG_EINVAL, NULL);
	free(big);
}

static void t_file_kinds(void)
{
	setup_dir(); /* idempotent: a single test can run alone */
	sg_secret *s = NULL;
	char path[600];
	snprintf(path, sizeof(path), "%s/does-not-exist", dir);
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_ENOTFOUND);
	SG_CHECK_RC(sg_secret_from_file(&s, dir), SG_EINVAL); /* a directory */
	SG_CHECK_MSG("not a regular file");
	/* Symlinks are not followed. */
	const char *target = make("real", "1234", 4, 0600);
	char real[600];
	snprintf(real, sizeof(real), "%s", target);
	snprintf(path, sizeof(path), "%s/link", dir);
	unlink(path);
	SG_CHECK(symlink(real, path) == 0);
	SG_CHECK(sg_secret_from_file(&s, path) < 0);
	SG_CHECK(s == NULL);
	unlink(path);
	unlink(real);
}

/* What a kubelet makes of a Secret volume: <vol>/pin -> ..data/pin,
 * ..data -> ..<timestamp>/, the files 0440 and group fsGroup. */
static void t_kubelet_layout(void)
{
	setup_dir(); /* idempotent: a single test can run alone */
	char vol[600], path[700];
	snprintf(vol, sizeof(vol), "%s/vol", dir);
	mkdir(vol, 0755);
	snprintf(path, sizeof(path), "%s/..2026_11_26_22_00_00.1", vol);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/..2026_11_26_22_00_00.1/pin", vol);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0400);
	SG_CHECK(fd >= 0 && write(fd, "4321\n", 5) == 5);
	close(fd);
	snprintf(path, sizeof(path), "%s/..data", vol);
	unlink(path);
	SG_CHECK(symlink("..2026_11_26_22_00_00.1", path) == 0);
	snprintf(path, sizeof(path), "%s/pin", vol);
	unlink(path);
	SG_CHECK(symlink("..data/pin", path) == 0);
	sg_secret *s = NULL;
	SG_CHECK_OK(sg_secret_from_file(&s, path));
	SG_CHECK(s && strcmp(sg_secret_cstr(s), "4321") == 0);
	sg_secret_free(s);
	s = NULL;
	/* A relative link that climbs out of the volume is not followed. */
	make("outside", "1234", 4, 0600);
	snprintf(path, sizeof(path), "%s/escape", vol);
	unlink(path);
	SG_CHECK(symlink("../outside", path) == 0);
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EINVAL);
	SG_CHECK_MSG("leaves its directory");
	SG_CHECK(s == NULL);

	/* Group-readable: only for a group of ours that is not root's. As
	 * root, the test can give a file another group and a child process
	 * that group (the pod's fsGroup). */
	if (geteuid() != 0)
		return;
	snprintf(path, sizeof(path), "%s/..2026_11_26_22_00_00.1/pin", vol);
	SG_CHECK(chown(path, 0, 4242) == 0 && chmod(path, 0440) == 0);
	snprintf(path, sizeof(path), "%s/pin", vol);
	SG_CHECK_RC(sg_secret_from_file(&s, path), SG_EAUTH); /* 4242 is not ours */
	pid_t pid = fork();
	if (pid == 0) {
		gid_t g = 4242;
		sg_secret *c = NULL;
		_exit(setgroups(1, &g) == 0 && sg_secret_from_file(&c, path) == SG_OK &&
		              strcmp(sg_secret_cstr(c), "4321") == 0
		          ? 0
		          : 1);
	}
	int st = -1;
	SG_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Group write, or any bit for others, is refused even for our group. */
	snprintf(path, sizeof(path), "%s/..2026_11_26_22_00_00.1/pin", vol);
	SG_CHECK(chmod(path, 0460) == 0);
	snprintf(path, sizeof(path), "%s/pin", vol);
	pid = fork();
	if (pid == 0) {
		gid_t g = 4242;
		sg_secret *c = NULL;
		_exit(setgroups(1, &g) == 0 && sg_secret_from_file(&c, path) == SG_EAUTH ? 0 : 1);
	}
	SG_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void t_env(void)
{
	sg_secret *s = NULL;
	SG_CHECK(setenv("SG_TEST_SECRET", "hunter2", 1) == 0);
	SG_CHECK_OK(sg_secret_from_env(&s, "SG_TEST_SECRET"));
	SG_CHECK(s && sg_secret_len(s) == 7 && strcmp(sg_secret_cstr(s), "hunter2") == 0);
	sg_secret_free(s);
	s = NULL;
	SG_CHECK(setenv("SG_TEST_SECRET", "", 1) == 0);
	SG_CHECK_RC(sg_secret_from_env(&s, "SG_TEST_SECRET"), SG_EINVAL);
	SG_CHECK(unsetenv("SG_TEST_SECRET") == 0);
	SG_CHECK_RC(sg_secret_from_env(&s, "SG_TEST_SECRET"), SG_ENOTFOUND);
	SG_CHECK_MSG("SG_TEST_SECRET");
	SG_CHECK(s == NULL);
}

static void t_new_equal(void)
{
	sg_secret *s = NULL;
	SG_CHECK_OK(sg_secret_new(&s, "abc\0def", 7));
	SG_CHECK(sg_secret_len(s) == 7);
	SG_CHECK(sg_secret_equal(s, "abc\0def", 7));
	SG_CHECK(!sg_secret_equal(s, "abc\0deg", 7)); /* last byte */
	SG_CHECK(!sg_secret_equal(s, "bbc\0def", 7)); /* first byte */
	SG_CHECK(!sg_secret_equal(s, "abc", 3));      /* prefix */
	SG_CHECK(!sg_secret_equal(s, "abc\0defg", 8)); /* longer */
	SG_CHECK(!sg_secret_equal(s, "", 0));
	sg_secret_free(s);
	SG_CHECK_OK(sg_secret_new(&s, NULL, 0));
	SG_CHECK(sg_secret_len(s) == 0 && sg_secret_cstr(s)[0] == 0);
	SG_CHECK(sg_secret_equal(s, "", 0));
	SG_CHECK(!sg_secret_equal(s, "x", 1));
	sg_secret_free(s);
	char *big = calloc(1, SG_SECRET_MAX + 1);
	SG_CHECK(big != NULL);
	if (big) {
		s = NULL;
		SG_CHECK_OK(sg_secret_new(&s, big, SG_SECRET_MAX));
		sg_secret_free(s);
		s = NULL;
		SG_CHECK_RC(sg_secret_new(&s, big, SG_SECRET_MAX + 1), SG_EINVAL);
		SG_CHECK(s == NULL);
		free(big);
	}
	sg_secret_free(NULL);
	{
		sg_secret *scoped __attribute__((cleanup(sg_secret_freep))) = NULL;
		SG_CHECK_OK(sg_secret_new(&scoped, "x", 1));
	}
	uint8_t wipe[16];
	memset(wipe, 0xaa, sizeof(wipe));
	sg_wipe(wipe, sizeof(wipe));
	for (size_t i = 0; i < sizeof(wipe); i++)
		SG_CHECK(wipe[i] == 0);
}

/* sg_wipe_realloc moves what it is told to keep into the new block, from
 * no block at all too. (That the old block is cleared before its free is
 * seen from outside the allocator: kube_test_kube_wipe's t_strbuf and
 * t_watch_parser, whose growths go through it.) */
static void t_wipe_realloc(void)
{
	char *p = sg_wipe_realloc(NULL, 0, 0, 8);
	SG_CHECK(p != NULL);
	if (!p)
		return;
	memcpy(p, "secret!", 8);
	char *q = sg_wipe_realloc(p, 8, 8, 64);
	SG_CHECK(q != NULL && memcmp(q, "secret!", 8) == 0);
	char *r = q ? sg_wipe_realloc(q, 64, 3, 16) : NULL;
	SG_CHECK(r != NULL && memcmp(r, "sec", 3) == 0);
	free(r ? r : q);
}

static void t_random_hex(void)
{
	sg_secret *a = NULL, *b = NULL;
	SG_CHECK_OK(sg_secret_random_hex(&a, 16));
	SG_CHECK_OK(sg_secret_random_hex(&b, 16));
	SG_CHECK(a && b && sg_secret_len(a) == 32 && sg_secret_len(b) == 32);
	if (a && b) {
		SG_CHECK(strspn(sg_secret_cstr(a), "0123456789abcdef") == 32);
		SG_CHECK(!sg_secret_equal(a, sg_secret_data(b), 32));
		SG_CHECK(sg_secret_equal(a, sg_secret_data(a), 32));
	}
	sg_secret_free(a);
	sg_secret_free(b);
	a = NULL;
	SG_CHECK_OK(sg_secret_random_hex(&a, 64));
	SG_CHECK(sg_secret_len(a) == 128);
	sg_secret_free(a);
	a = NULL;
	SG_CHECK_RC(sg_secret_random_hex(&a, 65), SG_EINVAL);
	SG_CHECK(a == NULL);
	SG_CHECK_OK(sg_secret_random_hex(&a, 0));
	SG_CHECK(sg_secret_len(a) == 0);
	sg_secret_free(a);
}

/* --- the memory secrets live in ------------------------------------------ */

/* The VmFlags of the /proc/self/smaps mapping holding addr, as " dd lo ... "
 * (a space around every flag, so " dd " matches one flag); "" if none. */
static void vm_flags(const void *addr, char *out, size_t cap)
{
	out[0] = 0;
	FILE *f = fopen("/proc/self/smaps", "r");
	SG_CHECK(f != NULL);
	if (!f)
		return;
	char line[512];
	bool in = false;
	uintptr_t a = (uintptr_t)addr;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char c;
		if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3) {
			in = a >= lo && a < hi;
		} else if (in && strncmp(line, "VmFlags:", 8) == 0) {
			line[strcspn(line, "\n")] = 0;
			snprintf(out, cap, "%s ", line + 8);
			break;
		}
	}
	fclose(f);
}

static bool has_flag(const void *addr, const char *flag)
{
	char flags[512], want[8];
	vm_flags(addr, flags, sizeof(flags));
	snprintf(want, sizeof(want), " %s ", flag);
	return strstr(flags, want) != NULL;
}

/* The sanitizers' runtimes replace mlock with a no-op that reports success,
 * so under them nothing is ever locked; the plain builds check "lo". */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MLOCK_IS_REAL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MLOCK_IS_REAL 0
#endif
#endif
#ifndef MLOCK_IS_REAL
#define MLOCK_IS_REAL 1
#endif

/* Whether mlock must succeed here: a real mlock, and root (CAP_IPC_LOCK
 * ignores the limit) or a limit with room for the few pages this test
 * locks. */
static bool can_lock(void)
{
	struct rlimit rl;
	if (!MLOCK_IS_REAL)
		return false;
	if (geteuid() == 0)
		return true;
	return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
	       (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 64 * (rlim_t)sysconf(_SC_PAGESIZE));
}

static void check_mapping(const sg_secret *s, const char *what)
{
	bool dd = has_flag(sg_secret_data(s), "dd"), lo = has_flag(sg_secret_data(s), "lo");
	SG_CHECK(dd);
	SG_CHECK(lo || !can_lock());
	if (!dd || (!lo && can_lock()))
		fprintf(stderr, "  (%s: dd=%d lo=%d)\n", what, dd, lo);
	/* Not on the heap: a heap address has neither flag. */
	void *heap = malloc(64);
	SG_CHECK(heap && !has_flag(heap, "dd"));
	free(heap);
}

static void t_mapping_flags(void)
{
	setup_dir(); /* idempotent: a single test can run alone */
	sg_secret *a = NULL, *b = NULL, *c = NULL, *d = NULL;
	SG_CHECK_OK(sg_secret_new(&a, "1234", 4));
	SG_CHECK_OK(sg_secret_from_file(&b, make("pin", "5678\n", 5, 0600)));
	SG_CHECK_OK(sg_secret_random_hex(&c, 16));
	SG_CHECK(setenv("SG_TEST_SECRET", "hunter2", 1) == 0);
	SG_CHECK_OK(sg_secret_from_env(&d, "SG_TEST_SECRET"));
	SG_CHECK(unsetenv("SG_TEST_SECRET") == 0);
	if (a && b && c && d) {
		check_mapping(a, "new");
		check_mapping(b, "from_file");
		check_mapping(c, "random_hex");
		check_mapping(d, "from_env");
		SG_CHECK(strcmp(sg_secret_cstr(b), "5678") == 0);
	}
	sg_secret_free(a);
	sg_secret_free(b);
	sg_secret_free(c);
	sg_secret_free(d);
	/* The largest file fills more than one page; all of it is marked. */
	char *big = malloc(SG_SECRET_MAX);
	SG_CHECK(big != NULL);
	if (big) {
		memset(big, 'p', SG_SECRET_MAX);
		b = NULL;
		SG_CHECK_OK(sg_secret_from_file(&b, make("pin", big, SG_SECRET_MAX, 0600)));
		if (b) {
			SG_CHECK(has_flag(sg_secret_data(b), "dd"));
			SG_CHECK(has_flag(sg_secret_data(b) + SG_SECRET_MAX, "dd"));
		}
		sg_secret_free(b);
		free(big);
	}
}

/* Runs fn in a forked child; true if every check there passed. */
static bool in_child(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	SG_CHECK(pid >= 0);
	if (pid == 0) {
		int before = sg_test_failures;
		fn();
		fflush(NULL);
		_exit(sg_test_failures == before ? 0 : 1);
	}
	int st = 0;
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* With no room to lock anything a secret still works, marked "dd"; only
 * CAP_IPC_LOCK (root) locks it anyway. */
static void lock_limit_child(void)
{
	struct rlimit zero = {0, 0};
	SG_CHECK(setrlimit(RLIMIT_MEMLOCK, &zero) == 0);
	sg_secret *s = NULL;
	SG_CHECK_OK(sg_secret_new(&s, "1234", 4));
	if (!s)
		return;
	SG_CHECK(has_flag(sg_secret_data(s), "dd"));
	SG_CHECK(geteuid() == 0 || !has_flag(sg_secret_data(s), "lo"));
	SG_CHECK(sg_secret_equal(s, "1234", 4));
	sg_secret_free(s);
}

static void t_lock_limit(void)
{
	SG_CHECK(in_child(lock_limit_child));
}

/*
 * munmap, interposed for this executable: when a watched secret's mapping
 * is unmapped, it records whether every byte of the mapping (header
 * included) was already zero. That is the last moment the bytes exist in
 * this process, so it is as close as a test gets to "wiped on free". The
 * real call is the system call itself.
 */
static const uint8_t *watch;
static int unmapped_calls;
static bool unmapped_zero;

int munmap(void *addr, size_t len)
{
	const uint8_t *p = addr;
	if (watch && watch >= p && watch < p + len) {
		unmapped_calls++;
		unmapped_zero = true;
		for (size_t i = 0; i < len; i++)
			unmapped_zero &= p[i] == 0;
	}
	return (int)syscall(SYS_munmap, addr, len);
}

static void t_wipe_on_free(void)
{
	setup_dir(); /* idempotent: a single test can run alone */
	sg_secret *s[3] = {NULL, NULL, NULL};
	SG_CHECK_OK(sg_secret_new(&s[0], "correct horse battery staple", 28));
	SG_CHECK_OK(sg_secret_from_file(&s[1], make("pin", "1234\r\n", 6, 0600))); /* stripped bytes too */
	SG_CHECK_OK(sg_secret_random_hex(&s[2], 64));
	for (int i = 0; i < 3; i++) {
		if (!s[i])
			continue;
		watch = sg_secret_data(s[i]);
		unmapped_calls = 0;
		unmapped_zero = false;
		sg_secret_free(s[i]);
		watch = NULL;
		SG_CHECK(unmapped_calls == 1);
		SG_CHECK(unmapped_zero);
	}
}

static void protect_child(void)
{
	SG_CHECK(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
	SG_CHECK_OK(sg_secret_protect_process());
	SG_CHECK(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0);
	SG_CHECK_OK(sg_secret_protect_process()); /* idempotent */
	SG_CHECK(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0);
	sg_secret *s = NULL; /* secrets still work */
	SG_CHECK_OK(sg_secret_new(&s, "1234", 4));
	SG_CHECK(s && sg_secret_equal(s, "1234", 4));
	sg_secret_free(s);
}

static void t_protect_process(void)
{
	SG_CHECK(in_child(protect_child));
	SG_CHECK(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1); /* this process untouched */
}

/* --- a real core dump ------------------------------------------------------ */

/* Finds prog in $PATH; false if absent. */
static bool in_path(const char *prog, char *out, size_t cap)
{
	const char *path = getenv("PATH");
	char copy[4096];
	snprintf(copy, sizeof(copy), "%s", path ? path : "/usr/bin:/bin");
	char *save = NULL;
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(out, cap, "%s/%s", d, prog);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* Whether the file contains needle (n bytes), read in overlapping chunks. */
static bool file_contains(const char *path, const void *needle, size_t n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	enum { CHUNK = 1 << 20 };
	uint8_t *buf = malloc(CHUNK + n);
	bool found = false;
	size_t keep = 0;
	size_t got;
	while (buf && !found && (got = fread(buf + keep, 1, CHUNK, f)) > 0) {
		size_t have = keep + got;
		for (size_t i = 0; i + n <= have && !found; i++)
			found = buf[i] == *(const uint8_t *)needle && memcmp(buf + i, needle, n) == 0;
		keep = have < n - 1 ? have : n - 1;
		memmove(buf, buf + have - keep, keep);
	}
	free(buf);
	fclose(f);
	return found;
}

/* Blocks until the pipe says something (or closes); false on EOF/error. */
static bool wait_byte(int fd)
{
	char b;
	ssize_t n;
	while ((n = read(fd, &b, 1)) < 0 && errno == EINTR)
		;
	return n == 1;
}

/*
 * Marks this process's inaccessible anonymous mappings (---p, no file) as
 * excluded from core dumps. gdb's gcore writes every anonymous mapping,
 * inaccessible ones included, and AddressSanitizer reserves terabytes of
 * them, which no test can wait for. They hold no data, so excluding them
 * hides nothing; readable memory is left alone, and the heap marker proves
 * it is still in the core.
 */
static void exclude_reservations(void)
{
	static uintptr_t lo[4096], hi[4096];
	size_t n = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return;
	char line[512];
	while (n < 4096 && fgets(line, sizeof(line), f)) {
		unsigned long a, b, inode;
		char perms[8], path[8] = "";
		if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %7s", &a, &b, perms, &inode, path) >= 4 &&
		    strcmp(perms, "---p") == 0 && inode == 0 && path[0] == 0) {
			lo[n] = a;
			hi[n++] = b;
		}
	}
	fclose(f);
	for (size_t i = 0; i < n; i++)
		(void)madvise((void *)lo[i], hi[i] - lo[i], MADV_DONTDUMP);
}

/* The dumped child: loads the PIN into a secret, puts a marker on the heap,
 * says so, and waits for the pipe to close. It never calls
 * sg_secret_protect_process: the secret's pages alone must keep the PIN
 * out of the core. */
static void core_child(int go, int ready)
{
	alarm(120); /* never outlive a test that lost track of us */
	/* Yama (ptrace_scope 1) would let only our ancestors attach; gcore is
	 * our sibling. Without Yama this fails harmlessly. */
	(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	if (!wait_byte(go))
		_exit(2);
	char path[600], *marker = malloc(64);
	snprintf(path, sizeof(path), "%s/core-pin", dir);
	sg_secret *pin = NULL;
	if (!marker || sg_secret_from_file(&pin, path) != 0)
		_exit(3);
	snprintf(marker, 64, "signet-heap-marker-%d", (int)getpid());
	exclude_reservations();
	if (write(ready, "r", 1) != 1)
		_exit(4);
	while (wait_byte(go))
		;
	sg_secret_free(pin);
	free(marker);
	_exit(0);
}

/* Runs gcore on pid with a time limit; true if it wrote prefix.pid. */
static bool run_gcore(const char *gcore, const char *prefix, pid_t pid, const char *log)
{
	char pidtext[16];
	snprintf(pidtext, sizeof(pidtext), "%d", (int)pid);
	fflush(NULL);
	pid_t g = fork();
	if (g == 0) {
		setpgid(0, 0); /* gcore runs gdb: one group to kill */
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(gcore, "gcore", "-o", prefix, pidtext, (char *)NULL);
		_exit(127);
	}
	if (g < 0)
		return false;
	setpgid(g, g);
	int st = 0;
	for (int i = 0; i < 1800; i++) { /* 90 s */
		if (waitpid(g, &st, WNOHANG) == g)
			return WIFEXITED(st) && WEXITSTATUS(st) == 0;
		nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
	}
	fprintf(stderr, "gcore took longer than 90 s; killed\n");
	kill(-g, SIGKILL);
	waitpid(g, &st, 0);
	return false;
}

static void t_core_dump(void)
{
	char gcore[600];
	if (!in_path("gcore", gcore, sizeof(gcore))) {
		printf("skip t_core_dump: gcore (from gdb) is not installed, so no core dump can be made\n");
		return;
	}
	setup_dir(); /* idempotent: a single test can run alone */
	int go[2], ready[2];
	SG_CHECK(pipe(go) == 0 && pipe(ready) == 0);
	fflush(NULL);
	/* The child is forked before the PIN exists, so the only copy it can
	 * have is the one it reads into its secret. */
	pid_t child = fork();
	SG_CHECK(child >= 0);
	if (child < 0)
		return;
	if (child == 0) {
		close(go[1]);
		close(ready[0]);
		core_child(go[0], ready[1]);
	}
	close(go[0]);
	close(ready[1]);
	sg_secret *pin = NULL;
	SG_CHECK_OK(sg_secret_random_hex(&pin, 16));
	char prefix[600], core[640], log[640], marker[64];
	snprintf(prefix, sizeof(prefix), "%s/core", dir);
	snprintf(core, sizeof(core), "%s.%d", prefix, (int)child);
	snprintf(log, sizeof(log), "%s/gcore.log", dir);
	snprintf(marker, sizeof(marker), "signet-heap-marker-%d", (int)child);
	if (pin) {
		make("core-pin", sg_secret_data(pin), sg_secret_len(pin), 0600);
		SG_CHECK(write(go[1], "g", 1) == 1);
		bool up = wait_byte(ready[0]);
		SG_CHECK(up);
		bool dumped = up && run_gcore(gcore, prefix, child, log);
		SG_CHECK(dumped);
		if (dumped) {
			/* The control: ordinary heap memory is in the core. */
			SG_CHECK(file_contains(core, marker, strlen(marker)));
			/* The PIN, alive in the child's secret, is not. */
			SG_CHECK(!file_contains(core, sg_secret_data(pin), sg_secret_len(pin)));
		} else {
			char cmd[700];
			snprintf(cmd, sizeof(cmd), "cat '%s' >&2", log);
			if (system(cmd) != 0)
				fprintf(stderr, "(no gcore log)\n");
		}
	}
	close(go[1]); /* the child exits */
	close(ready[0]);
	int st = 0;
	SG_CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	sg_secret_free(pin);
	unlink(core);
	unlink(log);
	snprintf(core, sizeof(core), "%s/core-pin", dir);
	unlink(core);
}

static void t_cleanup(void)
{
	char path[600];
	static const char *const left[] = {"pin", "outside", "vol/pin", "vol/escape", "vol/..data",
	                                   "vol/..2026_11_26_22_00_00.1/pin"};
	for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, left[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/vol/..2026_11_26_22_00_00.1", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/vol", dir);
	rmdir(path);
	rmdir(dir);
}

SG_TEST_MAIN(SG_TEST(setup_dir), SG_TEST(t_file_modes), SG_TEST(t_file_owner), SG_TEST(t_file_acl),
             SG_TEST(t_file_content), SG_TEST(t_file_kinds), SG_TEST(t_kubelet_layout), SG_TEST(t_env),
             SG_TEST(t_new_equal), SG_TEST(t_wipe_realloc), SG_TEST(t_random_hex), SG_TEST(t_mapping_flags),
             SG_TEST(t_lock_limit), SG_TEST(t_wipe_on_free), SG_TEST(t_protect_process), SG_TEST(t_core_dump),
             SG_TEST(t_cleanup))
