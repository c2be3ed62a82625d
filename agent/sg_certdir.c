/*
 * Workload certificates as files (sg_certdir.h).
 *
 * Design. Every operation works relative to directory descriptors opened
 * with O_NOFOLLOW|O_DIRECTORY (openat, mkdirat, unlinkat, renameat,
 * symlinkat), never by resolving "dir/ns/sa/..." strings again and again:
 * a name is checked once, the folder it names is opened once, and nothing
 * placed inside the tree afterwards (a symbolic link swapped in for a
 * folder) can redirect a later step outside it. Path strings are built
 * only for error details.
 *
 * The layout is the projected-volume one (atomic_writer.go in Kubernetes):
 *
 *   DIR/ns/sa/..<serial>.<random>/{cert-chain.pem,key.pem,root-cert.pem}
 *   DIR/ns/sa/..data -> ..<serial>.<random>
 *   DIR/ns/sa/<file> -> ..data/<file>
 *
 * A version folder is complete and fsync'ed before "..data" points at it,
 * the file-name links exist before "..data" does (so the first version's
 * three files appear together), and "..data" is switched by rename(2) of
 * a fresh link "..data_tmp", so a
 * reader that opens "DIR/ns/sa/key.pem" and "DIR/ns/sa/cert-chain.pem"
 * through the links sees one version or the other, never a mix (it may
 * see two versions across two opens; readers that care resolve "..data"
 * once, as Kubernetes' readers do). Removal touches only the names this
 * module makes (the three files, "..data", "..data_tmp" and "..*"
 * version folders), so a DIR shared with something else loses nothing.
 */
#include "sg_certdir.h"

#include "sg_guard.h"
#include "sg_names.h"
#include "sg_spiffe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_LINK                                                                                                      \
	".."                                                                                                           \
	"data"
#define DATA_TMP                                                                                                       \
	".."                                                                                                           \
	"data_tmp"
#define PATH_CAP 4096
#define LINK_CAP 256 /* "..<40 hex>.<8 hex>" and "..data/<file>" fit easily */

static const char *const file_names[3] = {"cert-chain.pem", "key.pem", "root-cert.pem"};

/* ---- names --------------------------------------------------------------- */

static bool ns_valid(const char *ns)
{
	return ns && sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX);
}

static bool sa_valid(const char *sa)
{
	return sa && sg_names_dns_subdomain(sa, strlen(sa));
}

static int check_names(const char *dir, const char *ns, const char *sa)
{
	SG_ENSURE(dir && dir[0], SG_EINVAL, "certdir: no folder");
	SG_ENSURE(strlen(dir) < PATH_CAP - 512, SG_EINVAL, "certdir: the folder's path is too long");
	SG_ENSURE(ns_valid(ns), SG_EINVAL, "certdir: the namespace is not a DNS label of at most %d bytes",
	          SG_NAMES_LABEL_MAX);
	SG_ENSURE(sa_valid(sa), SG_EINVAL, "certdir: the service account is not a DNS subdomain of at most %d bytes",
	          SG_NAMES_SUBDOMAIN_MAX);
	return SG_OK;
}

bool sg_certdir_identity_split(const char *id, char ns[64], char sa[254])
{
	static const char scheme[] = "spiffe://";
	if (!id || strncmp(id, scheme, sizeof(scheme) - 1) != 0)
		return false;
	const char *td = id + sizeof(scheme) - 1;
	const char *slash = strchr(td, '/');
	if (!slash || slash == td || (size_t)(slash - td) > SG_TRUST_DOMAIN_MAX)
		return false;
	char tdbuf[SG_TRUST_DOMAIN_MAX + 1];
	memcpy(tdbuf, td, (size_t)(slash - td));
	tdbuf[slash - td] = '\0';
	if (!sg_trust_domain_valid(tdbuf))
		return false;
	/* Exactly "/ns/<label>/sa/<subdomain>": no further segment, no empty
	 * one, no query or fragment (none of those characters passes the
	 * name checks). */
	if (strncmp(slash, "/ns/", 4) != 0)
		return false;
	const char *n = slash + 4;
	const char *nend = strchr(n, '/');
	if (!nend || (size_t)(nend - n) > SG_NAMES_LABEL_MAX ||
	    !sg_names_dns_label(n, (size_t)(nend - n), SG_NAMES_LABEL_MAX))
		return false;
	if (strncmp(nend, "/sa/", 4) != 0)
		return false;
	const char *s = nend + 4;
	size_t slen = strlen(s);
	if (slen > SG_NAMES_SUBDOMAIN_MAX || !sg_names_dns_subdomain(s, slen))
		return false;
	memcpy(ns, n, (size_t)(nend - n));
	ns[nend - n] = '\0';
	memcpy(sa, s, slen + 1);
	return true;
}

/* ---- small file-system helpers ------------------------------------------- */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}
#define SG_AUTOCLOSE SG_CLEANUP(close_fd)

/* a/b into out (cap > 11); false, and a placeholder, when it does not fit
 * (the callers have checked the lengths that matter beforehand; a path
 * kept only for an error detail may be replaced). */
static bool join(char *out, size_t cap, const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la + 1 + lb >= cap) {
		memcpy(out, "(too long)", sizeof("(too long)"));
		return false;
	}
	memcpy(out, a, la);
	out[la] = '/';
	memcpy(out + la + 1, b, lb + 1);
	return true;
}

static int fs_fail(const char *what, const char *path, int err)
{
	return sg_error_set(SG_EINTERNAL, "certdir: %s %s: %s", what, path, strerror(err));
}

/* The sub-folder name of parent (fd), made when missing (mode 0755 as
 * mkdir makes it under the umask) and opened without following a link. */
static int subdir(int parent, const char *name, bool create, const char *path, int *out)
{
	*out = -1;
	if (create && mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
		return fs_fail("cannot make", path, errno);
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (!create && errno == ENOENT)
			return SG_ENOTFOUND; /* no detail: the callers treat absence as success */
		return fs_fail("cannot open the folder", path, errno);
	}
	*out = fd;
	return SG_OK;
}

/* mkdir -p of dir itself, then opens it. */
static int open_root(const char *dir, bool create, int *out)
{
	*out = -1;
	if (create) {
		char p[PATH_CAP];
		int n = snprintf(p, sizeof(p), "%s", dir);
		SG_ENSURE(n > 0 && (size_t)n < sizeof(p), SG_EINVAL, "certdir: the folder's path is too long");
		for (char *c = p + 1; *c; c++) {
			if (*c != '/')
				continue;
			*c = '\0';
			if (mkdir(p, 0755) < 0 && errno != EEXIST)
				return fs_fail("cannot make", p, errno);
			*c = '/';
		}
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return fs_fail("cannot make", p, errno);
	}
	/* dir is the operator's: a link there is theirs to make, so it is
	 * followed; below it nothing is. */
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		if (!create && errno == ENOENT)
			return SG_ENOTFOUND;
		return fs_fail("cannot open the folder", dir, errno);
	}
	*out = fd;
	return SG_OK;
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		data += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A new file in the version folder: O_EXCL (the folder is ours and new),
 * the exact mode whatever the umask, the bytes, fsync. */
static int write_file(int vfd, const char *name, const char *text, unsigned mode, const char *vpath)
{
	char path[PATH_CAP];
	(void)join(path, sizeof(path), vpath, name);
	int fd SG_AUTOCLOSE = openat(vfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return fs_fail("cannot create", path, errno);
	if (fchmod(fd, mode) < 0 || write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
		return fs_fail("cannot write", path, errno);
	return SG_OK;
}

/* Removes a version folder name of sa (fd): its non-folder entries, then
 * the folder. Absent is fine. */
static int remove_version(int safd, const char *name, const char *sapath)
{
	char path[PATH_CAP];
	(void)join(path, sizeof(path), sapath, name);
	int vfd = openat(safd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return errno == ENOENT ? SG_OK : fs_fail("cannot open the folder", path, errno);
	DIR *d = fdopendir(vfd);
	if (!d) {
		int e = errno;
		close(vfd);
		return fs_fail("cannot read the folder", path, e);
	}
	int rc = SG_OK;
	struct dirent *de;
	while (rc == SG_OK && (errno = 0, de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
			rc = fs_fail("cannot remove an entry of", path, errno);
	}
	closedir(d);
	if (rc == SG_OK && unlinkat(safd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = fs_fail("cannot remove", path, errno);
	return rc;
}

/* Whether name is one of our version folders' names: "..", then more, and
 * not one of the two links. */
static bool version_name(const char *name)
{
	return name[0] == '.' && name[1] == '.' && name[2] != '\0' && strcmp(name, DATA_LINK) != 0 &&
	       strcmp(name, DATA_TMP) != 0;
}

/* Removes every version folder of sa but keep (NULL: all): the previous
 * version and any a crash left before its switch. */
static int sweep_versions(int safd, const char *keep, const char *sapath)
{
	int fd = openat(safd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return fs_fail("cannot open the folder", sapath, errno);
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		return fs_fail("cannot read the folder", sapath, e);
	}
	/* Names first, removal after: removing while readdir walks the same
	 * folder may skip entries. */
	char(*names)[LINK_CAP] = NULL;
	size_t n = 0, cap = 0;
	int rc = SG_OK;
	struct dirent *de;
	while ((errno = 0, de = readdir(d)) != NULL) {
		if (!version_name(de->d_name) || (keep && !strcmp(de->d_name, keep)) || strlen(de->d_name) >= LINK_CAP)
			continue;
		struct stat st;
		if (fstatat(safd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 4;
			void *p = realloc(names, nc * sizeof(*names));
			if (!p) {
				rc = sg_error_set(SG_EINTERNAL, "out of memory");
				break;
			}
			names = p;
			cap = nc;
		}
		memcpy(names[n++], de->d_name, strlen(de->d_name) + 1); /* < LINK_CAP, checked above */
	}
	closedir(d);
	for (size_t i = 0; rc == SG_OK && i < n; i++)
		rc = remove_version(safd, names[i], sapath);
	free(names);
	return rc;
}

/* ---- write ---------------------------------------------------------------- */

static bool serial_valid(const char *s)
{
	size_t n = strnlen(s, sizeof(((sg_wlcert *)0)->serial));
	if (n == 0 || n >= sizeof(((sg_wlcert *)0)->serial))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F')))
			return false;
	return true;
}

/* A new, empty version folder "..<serial>.<8 random hex>" (mkdtemp's
 * uniqueness: a name taken is tried again with new random bits). */
static int make_version(int safd, const char *serial, const char *sapath, char name[LINK_CAP])
{
	for (int attempt = 0; attempt < 16; attempt++) {
		uint32_t r;
		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return fs_fail("getrandom for a folder name in", sapath, errno);
		snprintf(name, LINK_CAP, "..%s.%08x", serial, (unsigned)r);
		if (mkdirat(safd, name, 0755) == 0)
			return SG_OK;
		if (errno != EEXIST)
			return fs_fail("cannot make a version folder in", sapath, errno);
	}
	SG_BAIL(SG_EINTERNAL, "certdir: no free version folder name in %s", sapath);
}

/* The file-name link name -> ..data/name, made when missing and repaired
 * when it is something else. */
static int ensure_link(int safd, const char *name, const char *sapath)
{
	char want[LINK_CAP], have[LINK_CAP];
	snprintf(want, sizeof(want), DATA_LINK "/%s", name);
	if (symlinkat(want, safd, name) == 0)
		return SG_OK;
	if (errno != EEXIST)
		return fs_fail("cannot link a file name in", sapath, errno);
	ssize_t n = readlinkat(safd, name, have, sizeof(have) - 1);
	if (n >= 0) {
		have[n] = '\0';
		if (!strcmp(have, want))
			return SG_OK;
	}
	/* Something else holds the name (an old regular file, a wrong link):
	 * the link replaces it. A folder there is not ours to remove. */
	if (unlinkat(safd, name, 0) < 0 || symlinkat(want, safd, name) < 0)
		return fs_fail("cannot replace a file name in", sapath, errno);
	return SG_OK;
}

int sg_certdir_write(const char *dir, const char *ns, const char *sa, const sg_wlcert *cert)
{
	SG_TRY(check_names(dir, ns, sa));
	SG_ENSURE(cert && cert->key_pem && cert->chain_pem && cert->root_pem, SG_EINVAL,
	          "certdir: a certificate without its key, chain or root");
	SG_ENSURE(serial_valid(cert->serial), SG_EINVAL, "certdir: the certificate's serial is not hex");

	char sapath[PATH_CAP];
	int n = snprintf(sapath, sizeof(sapath), "%s/%s/%s", dir, ns, sa);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(sapath) - 2 * LINK_CAP, SG_EINVAL, "certdir: the path is too long");
	char nspath[PATH_CAP];
	(void)join(nspath, sizeof(nspath), dir, ns);

	int dfd SG_AUTOCLOSE = -1, nsfd SG_AUTOCLOSE = -1, safd SG_AUTOCLOSE = -1, vfd SG_AUTOCLOSE = -1;
	SG_TRY(open_root(dir, true, &dfd));
	SG_TRY(subdir(dfd, ns, true, nspath, &nsfd));
	SG_TRY(subdir(nsfd, sa, true, sapath, &safd));

	char vname[LINK_CAP];
	SG_TRY(make_version(safd, cert->serial, sapath, vname));
	char vpath[PATH_CAP];
	(void)join(vpath, sizeof(vpath), sapath, vname);
	int rc = subdir(safd, vname, false, vpath, &vfd);
	if (rc == SG_ENOTFOUND)
		rc = fs_fail("cannot open the folder", vpath, ENOENT);
	const char *texts[3] = {cert->chain_pem, cert->key_pem, cert->root_pem};
	const unsigned modes[3] = {0644, 0600, 0644};
	for (int i = 0; rc == SG_OK && i < 3; i++)
		rc = write_file(vfd, file_names[i], texts[i], modes[i], vpath);
	if (rc == SG_OK && (fchmod(vfd, 0755) < 0 || fsync(vfd) < 0))
		rc = fs_fail("cannot sync", vpath, errno);
	if (rc < 0) {
		sg_error saved;
		sg_error_save(&saved);
		(void)remove_version(safd, vname, sapath);
		sg_error_restore(&saved);
		return rc;
	}

	/* The file names first: on the first write they dangle until
	 * "..data" exists, so that all three appear at the switch's one
	 * rename. Made after it, one at a time, a reader waiting for
	 * cert-chain.pem could open it before key.pem existed (agent_e2e
	 * saw exactly that under load). Later writes find them in place. */
	for (int i = 0; i < 3; i++)
		SG_TRY(ensure_link(safd, file_names[i], sapath));
	/* The switch: a fresh link renamed over "..data" (rename is atomic;
	 * a stale "..data_tmp" from a crash is replaced). */
	if (symlinkat(vname, safd, DATA_TMP) < 0) {
		if (errno != EEXIST || unlinkat(safd, DATA_TMP, 0) < 0 || symlinkat(vname, safd, DATA_TMP) < 0)
			return fs_fail("cannot link " DATA_TMP " in", sapath, errno);
	}
	if (renameat(safd, DATA_TMP, safd, DATA_LINK) < 0)
		return fs_fail("cannot switch " DATA_LINK " in", sapath, errno);
	if (fsync(safd) < 0)
		return fs_fail("cannot sync", sapath, errno);
	/* Readers now follow the new version; the previous one (and any a
	 * crash left behind) goes. */
	SG_TRY(sweep_versions(safd, vname, sapath));
	if (fsync(safd) < 0 || fsync(nsfd) < 0 || fsync(dfd) < 0)
		return fs_fail("cannot sync", sapath, errno);
	return SG_OK;
}

/* ---- remove ---------------------------------------------------------------- */

int sg_certdir_remove(const char *dir, const char *ns, const char *sa)
{
	SG_TRY(check_names(dir, ns, sa));
	char nspath[PATH_CAP], sapath[PATH_CAP];
	(void)join(nspath, sizeof(nspath), dir, ns);
	int n = snprintf(sapath, sizeof(sapath), "%s/%s/%s", dir, ns, sa);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(sapath) - 2 * LINK_CAP, SG_EINVAL, "certdir: the path is too long");

	int dfd SG_AUTOCLOSE = -1, nsfd SG_AUTOCLOSE = -1, safd SG_AUTOCLOSE = -1;
	int rc = open_root(dir, false, &dfd);
	if (rc == SG_ENOTFOUND)
		return SG_OK;
	SG_TRY(rc);
	rc = subdir(dfd, ns, false, nspath, &nsfd);
	if (rc == SG_ENOTFOUND)
		return SG_OK;
	SG_TRY(rc);
	rc = subdir(nsfd, sa, false, sapath, &safd);
	if (rc != SG_ENOTFOUND) {
		SG_TRY(rc);
		/* The names first, so no reader follows a link into a folder
		 * being emptied; then the versions. */
		for (int i = 0; i < 3; i++)
			if (unlinkat(safd, file_names[i], 0) < 0 && errno != ENOENT)
				return fs_fail("cannot remove a file name in", sapath, errno);
		if ((unlinkat(safd, DATA_LINK, 0) < 0 && errno != ENOENT) ||
		    (unlinkat(safd, DATA_TMP, 0) < 0 && errno != ENOENT))
			return fs_fail("cannot remove " DATA_LINK " in", sapath, errno);
		SG_TRY(sweep_versions(safd, NULL, sapath));
		close_fd(&safd);
		/* Anything left is not ours: the folder stays, and says so. */
		if (unlinkat(nsfd, sa, AT_REMOVEDIR) < 0 && errno != ENOENT)
			return fs_fail("cannot remove", sapath, errno);
	}
	if (unlinkat(dfd, ns, AT_REMOVEDIR) < 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
		return fs_fail("cannot remove", nspath, errno);
	return SG_OK;
}

/* ---- list ------------------------------------------------------------------- */

/* The account folders of one namespace folder (fd, taken over). */
static int list_ns(int nsfd, const char *ns, const char *nspath, void (*fn)(const char *ns, const char *sa, void *arg),
                   void *arg)
{
	DIR *d = fdopendir(nsfd);
	if (!d) {
		int e = errno;
		close(nsfd);
		return fs_fail("cannot read the folder", nspath, e);
	}
	struct dirent *de;
	while ((errno = 0, de = readdir(d)) != NULL) {
		if (!sa_valid(de->d_name))
			continue;
		char rel[SG_NAMES_SUBDOMAIN_MAX + sizeof("/" DATA_LINK) + 1];
		snprintf(rel, sizeof(rel), "%s/" DATA_LINK, de->d_name);
		struct stat st, sd;
		/* A real folder holding the link: a link named like an account
		 * is not followed. */
		if (fstatat(dirfd(d), de->d_name, &sd, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sd.st_mode) &&
		    fstatat(dirfd(d), rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			fn(ns, de->d_name, arg);
	}
	int e = errno;
	closedir(d);
	if (e)
		return fs_fail("cannot read the folder", nspath, e);
	return SG_OK;
}

int sg_certdir_list(const char *dir, void (*fn)(const char *ns, const char *sa, void *arg), void *arg)
{
	SG_ENSURE(dir && dir[0] && fn, SG_EINVAL, "certdir: no folder or no callback");
	SG_ENSURE(strlen(dir) < PATH_CAP - 512, SG_EINVAL, "certdir: the folder's path is too long");
	int dfd = -1;
	int rc = open_root(dir, false, &dfd);
	if (rc == SG_ENOTFOUND)
		return SG_OK;
	SG_TRY(rc);
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = errno;
		close(dfd);
		return fs_fail("cannot read the folder", dir, e);
	}
	rc = SG_OK;
	struct dirent *de;
	while (rc == SG_OK && (errno = 0, de = readdir(d)) != NULL) {
		if (!ns_valid(de->d_name))
			continue;
		int nsfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nsfd < 0)
			continue; /* not a folder (or a link): not ours */
		char nspath[PATH_CAP];
		(void)join(nspath, sizeof(nspath), dir, de->d_name);
		char ns[SG_NAMES_LABEL_MAX + 1];
		memcpy(ns, de->d_name, strlen(de->d_name) + 1); /* a valid label: at most 63 bytes */
		rc = list_ns(nsfd, ns, nspath, fn, arg);
	}
	closedir(d);
	return rc;
}
