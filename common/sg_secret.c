/*
 * Secrets live in their own anonymous mapping of whole pages, never on the
 * heap: madvise(MADV_DONTDUMP) works on whole pages, and a heap chunk would
 * share its pages (and the dump flag) with everything else malloc puts
 * there. The mapping is marked before a secret byte is written, and locked
 * with mlock where RLIMIT_MEMLOCK allows so the bytes never reach swap.
 * Locking is best effort (a small limit is common and not the caller's
 * fault; it is logged once per process); the dump exclusion is not: it is
 * what keeps a PIN out of a core file, and it cannot fail on a kernel that
 * runs signet (Linux 3.4 or later), so a failure is an error.
 *
 * The header (length, mapping size, locked flag) sits at the start of the
 * mapping, the value right after it. On free the whole mapping is wiped with
 * explicit_bzero (glibc's wipe that the compiler may not elide), then
 * unlocked and unmapped.
 *
 * Random secrets come from getrandom(2) straight from the kernel: common/
 * has no crypto library, and the kernel's CSPRNG is what OpenSSL seeds
 * from anyway. Without flags the call blocks until the kernel's pool has
 * been initialised once, so an early boot yields a wait, never weak bytes.
 *
 * Reading a PIN file goes through read(2) into the mapping itself: stdio
 * would keep a copy in its buffer, and a bounce buffer on the stack would be
 * one more copy to wipe. Files holding secrets must not be readable by
 * anyone but the owner: a PIN file with mode 0644 is refused, as ssh does,
 * and so is one that belongs to another user (who could read or replace
 * it); root may own it (a kubelet Secret volume, a systemd credential).
 * Group bits are read through a POSIX ACL when the file has one: systemd
 * hands a credential to a service's user as a root-owned 0400 file plus an
 * ACL entry for that user, which stat shows as mode 0440 (the ACL's mask in
 * the group bits) although no group can read it.
 *
 * sg_secret_protect_process covers what the mappings cannot: copies made by
 * other libraries (a PKCS#11 module keeps the PIN) and the environment.
 *
 * Linux-specific by design (MAP_ANONYMOUS, MADV_DONTDUMP, prctl,
 * getrandom); glibc declares the first two and explicit_bzero only beyond
 * POSIX, hence _DEFAULT_SOURCE here.
 */
#define _DEFAULT_SOURCE
#include "sg_secret.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

struct sg_secret {
	size_t len;     /* bytes of the value */
	size_t map_len; /* bytes mapped: whole pages, header included */
	bool locked;    /* mlock succeeded; munlock on free */
	uint8_t data[]; /* len bytes + NUL; the rest of the mapping is zero */
};

void sg_wipe(void *p, size_t n)
{
	explicit_bzero(p, n);
}

void *sg_wipe_realloc(void *p, size_t cap, size_t keep, size_t n)
{
	void *b = malloc(n);
	if (!b || !p)
		return b;
	memcpy(b, p, keep);
	sg_wipe(p, cap);
	free(p);
	return b;
}

/* Fills buf with n bytes from the kernel's CSPRNG. A signal (EINTR) or a
 * short read asks again for the rest; any other failure (ENOSYS on a
 * kernel older than 3.17, EFAULT) fails closed: no secret is made from
 * bytes that did not come from the kernel. */
static int random_bytes(uint8_t *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		SG_ENSURE(r > 0, SG_EINTERNAL, "cannot read random bytes from the kernel (getrandom): %s",
			  r < 0 ? strerror(errno) : "no bytes returned");
		got += (size_t)r;
	}
	return SG_OK;
}

/* Compares in time that depends on n only, never on where the bytes first
 * differ; volatile keeps the compiler from ending the loop early. */
bool sg_equal_ct(const void *p, const void *q, size_t n)
{
	const uint8_t *a = p, *b = q;
	volatile uint8_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff |= (uint8_t)(a[i] ^ b[i]);
	return diff == 0;
}

/* Says once per process that secrets are not locked, and why: an operator
 * can raise the limit (LimitMEMLOCK= in a systemd unit). */
static void note_unlocked(int err)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&said))
		return;
	sg_log(SG_LOG_INFO, "secret memory is not locked and may be swapped out; raise RLIMIT_MEMLOCK to lock it",
	       SG_F_STR("error", strerror(err)), SG_F_END);
}

/* Maps a zeroed secret with room for cap value bytes and the NUL; len is 0.
 * cap is at most SG_SECRET_MAX + 1, so the size arithmetic cannot wrap. */
static int secret_map(sg_secret **out, size_t cap)
{
	long page = sysconf(_SC_PAGESIZE);
	SG_ENSURE(page > 0, SG_EINTERNAL, "cannot read the page size");
	size_t need = sizeof(sg_secret) + cap + 1;
	size_t map_len = (need + (size_t)page - 1) / (size_t)page * (size_t)page;
	void *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	SG_ENSURE(p != MAP_FAILED, SG_EINTERNAL, "cannot map memory for a secret: %s", strerror(errno));
	if (madvise(p, map_len, MADV_DONTDUMP) != 0) {
		int e = errno;
		munmap(p, map_len);
		SG_BAIL(SG_EINTERNAL, "cannot exclude secret memory from core dumps: %s", strerror(e));
	}
	sg_secret *s = p;
	s->map_len = map_len;
	s->locked = mlock(p, map_len) == 0;
	if (!s->locked)
		note_unlocked(errno);
	*out = s;
	return SG_OK;
}

int sg_secret_new(sg_secret **out, const void *p, size_t n)
{
	SG_ENSURE(n <= SG_SECRET_MAX, SG_EINVAL, "secret longer than %d bytes", SG_SECRET_MAX);
	sg_secret *s;
	SG_TRY(secret_map(&s, n));
	if (n)
		memcpy(s->data, p, n);
	s->len = n;
	*out = s;
	return SG_OK;
}

/* Reads until cap bytes or end of file; returns the count or -1 (errno). */
static ssize_t read_all(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;
	while (got < cap) {
		ssize_t n = read(fd, buf + got, cap - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Opens path, following a symlink only while it resolves beneath the
 * directory holding path (the kubelet's ..data layout). Without openat2
 * (Linux < 5.6) no symlink is followed. */
static int open_beneath(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 || errno != ELOOP)
		return fd;
	const char *slash = strrchr(path, '/');
	char dir[4096];
	const char *base = slash ? slash + 1 : path;
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if ((size_t)(slash - path) < sizeof(dir))
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	else
		return errno = ENAMETOOLONG, -1;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
	                       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	fd = (int)syscall(SYS_openat2, dfd, base, &how, sizeof(how));
	int saved = errno;
	close(dfd);
	if (fd < 0 && (saved == ENOSYS || saved == EXDEV))
		saved = ELOOP; /* no openat2, or a link out of the directory: a symlink we do not follow */
	errno = saved;
	return fd;
}

/* Whether gid is one of this process's groups (and not root's). */
static bool own_group(gid_t gid)
{
	if (gid == 0)
		return false;
	if (gid == getegid())
		return true;
	gid_t groups[256];
	int n = getgroups(256, groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/* Linux's POSIX access ACL attribute (linux/posix_acl_xattr.h): a 4-byte
 * version (2) then 8-byte entries {le16 tag, le16 perm, le32 id}. */
#define ACL_XATTR "system.posix_acl_access"
#define ACL_XATTR_VERSION 2u
#define ACL_MAX_ENTRIES 64 /* more is refused rather than read */
enum { ACL_TAG_USER_OBJ = 0x01, ACL_TAG_USER = 0x02, ACL_TAG_GROUP_OBJ = 0x04, ACL_TAG_GROUP = 0x08,
       ACL_TAG_MASK = 0x10, ACL_TAG_OTHER = 0x20 };

static uint32_t le(const uint8_t *p, size_t n)
{
	uint32_t v = 0;
	for (size_t i = n; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

/* Whether the file's access ACL lets only its owner, this process's user and
 * this process's own non-root groups read it, and nobody else write or run
 * it. false when it has no ACL (the mode bits then say it all), an ACL we
 * cannot read, or one that grants anyone else anything. */
static bool acl_only_us(int fd, gid_t file_gid)
{
	uint8_t buf[4 + 8 * ACL_MAX_ENTRIES];
	ssize_t n = fgetxattr(fd, ACL_XATTR, buf, sizeof(buf));
	if (n < 4 || (n - 4) % 8 != 0 || le(buf, 4) != ACL_XATTR_VERSION)
		return false;
	unsigned mask = 07; /* without a mask entry nothing is masked */
	for (ssize_t at = 4; at < n; at += 8)
		if (le(buf + at, 2) == ACL_TAG_MASK)
			mask = le(buf + at + 2, 2) & 07;
	for (ssize_t at = 4; at < n; at += 8) {
		unsigned tag = le(buf + at, 2), perm = le(buf + at + 2, 2) & 07;
		uint32_t id = le(buf + at + 4, 4);
		if (tag == ACL_TAG_USER_OBJ || tag == ACL_TAG_MASK)
			continue;
		if (tag == ACL_TAG_USER || tag == ACL_TAG_GROUP_OBJ || tag == ACL_TAG_GROUP)
			perm &= mask; /* what the entry grants in effect */
		if (!perm)
			continue;
		bool us = (tag == ACL_TAG_USER && id == geteuid()) ||
		          (tag == ACL_TAG_GROUP_OBJ && own_group(file_gid)) || (tag == ACL_TAG_GROUP && own_group(id));
		if (!us || perm != 04)
			return false;
	}
	return true;
}

int sg_secret_from_file(sg_secret **out, const char *path)
{
	int fd = open_beneath(path);
	SG_ENSURE(fd >= 0, errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "cannot open secret file %s: %s", path,
		  errno == ELOOP ? "a symlink that leaves its directory (only the kubelet's ..data layout is followed)"
		                 : strerror(errno));
	sg_secret *s = NULL;
	struct stat st;
	int rc = SG_EINVAL;
	SG_ENSURE_GOTO(rc, fstat(fd, &st) == 0 && S_ISREG(st.st_mode), out, SG_EINVAL,
		       "secret file %s is not a regular file", path);
	SG_ENSURE_GOTO(rc, st.st_uid == geteuid() || st.st_uid == 0, out, SG_EAUTH,
		       "secret file %s belongs to uid %u, another user who can read or replace it; chown it to "
		       "this process's user (uid %u) or to root", path, (unsigned)st.st_uid, (unsigned)geteuid());
	bool private = (st.st_mode & 077) == 0 || ((st.st_mode & 037) == 0 && own_group(st.st_gid));
	if (!private && (st.st_mode & 07) == 0) /* the group bits may be an ACL's mask */
		private = acl_only_us(fd, st.st_gid);
	SG_ENSURE_GOTO(rc, private, out, SG_EAUTH,
		       "secret file %s is accessible by group or others (mode %03o, or its ACL: see getfacl); "
		       "chmod 600 it (0440 is accepted when its group is one of this process's and not root's, as a "
		       "pod's fsGroup; an ACL may grant read to this process's user only, as systemd's credentials "
		       "do)", path, (unsigned)(st.st_mode & 0777));
	SG_ENSURE_GOTO(rc, st.st_size <= SG_SECRET_MAX, out, SG_EINVAL, "secret file %s is larger than %d bytes", path,
		       SG_SECRET_MAX);
	/* Sized by fstat, plus one byte: a file that grew since is noticed
	 * rather than cut short. */
	size_t size = (size_t)st.st_size;
	SG_TRY_GOTO(rc, secret_map(&s, size + 1), out);
	ssize_t got = read_all(fd, s->data, size + 1);
	SG_ENSURE_GOTO(rc, got >= 0, out, SG_EINVAL, "cannot read secret file %s: %s", path, strerror(errno));
	SG_ENSURE_GOTO(rc, (size_t)got <= size, out, SG_EINVAL, "secret file %s changed while it was read", path);
	size_t n = (size_t)got;
	if (n && s->data[n - 1] == '\n')
		s->data[--n] = 0;
	if (n && s->data[n - 1] == '\r')
		s->data[--n] = 0;
	SG_ENSURE_GOTO(rc, n > 0, out, SG_EINVAL, "secret file %s is empty", path);
	s->len = n;
	*out = SG_MOVE(s);
	rc = SG_OK;
out:
	sg_secret_free(s);
	close(fd);
	return rc;
}

int sg_secret_from_env(sg_secret **out, const char *name)
{
	const char *v = getenv(name);
	SG_ENSURE(v, SG_ENOTFOUND, "environment variable %s is not set", name);
	SG_ENSURE(*v, SG_EINVAL, "environment variable %s is empty", name);
	return sg_secret_new(out, v, strlen(v));
}

int sg_secret_random_hex(sg_secret **out, size_t n)
{
	uint8_t raw[64];
	SG_ENSURE(n <= sizeof(raw), SG_EINVAL, "random secret too long");
	sg_secret *s;
	SG_TRY(secret_map(&s, 2 * n));
	int rc = random_bytes(raw, n);
	if (rc == SG_OK)
		sg_hex_encode((char *)s->data, raw, n); /* the NUL lands in the map's spare byte */
	sg_wipe(raw, sizeof(raw));
	if (rc < 0) {
		sg_secret_free(s);
		return rc;
	}
	s->len = 2 * n;
	*out = s;
	return SG_OK;
}

const uint8_t *sg_secret_data(const sg_secret *s)
{
	return s->data;
}

const char *sg_secret_cstr(const sg_secret *s)
{
	return (const char *)s->data;
}

size_t sg_secret_len(const sg_secret *s)
{
	return s->len;
}

bool sg_secret_equal(const sg_secret *a, const void *p, size_t n)
{
	return a->len == n && sg_equal_ct(a->data, p, n);
}

void sg_secret_free(sg_secret *s)
{
	if (!s)
		return;
	size_t map_len = s->map_len;
	bool locked = s->locked;
	/* All of it: stripped newlines and the header are wiped too. */
	sg_wipe(s, map_len);
	if (locked)
		munlock(s, map_len);
	munmap(s, map_len);
}

int sg_secret_protect_process(void)
{
	SG_ENSURE(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0, SG_EINTERNAL, "cannot make the process non-dumpable: %s",
		  strerror(errno));
	/* Fail closed: a kernel that ignored the request is an error too. */
	SG_ENSURE(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0, SG_EINTERNAL,
		  "the process is still dumpable after PR_SET_DUMPABLE");
	return SG_OK;
}
