/*
 * Whole-file reads and atomic writes (contract: sg_file.h). The write was
 * the development issuer's (token/sg_jwt.c) until its key moved to the signer
 * layer (signer/sg_tokenkey.c) while its key set stayed in ra/: both need
 * the same write, so it lives here, below both.
 *
 * Buffers that may hold a key are wiped on every path out, including the
 * failures, because the caller never sees them then.
 */
#include "sg_file.h"

#include "sg_guard.h"
#include "sg_secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* remove_stale: the atomic write's temporary is path.tmp.<pid>, removed
 * first (a crash of an earlier process with our pid left it); a new file's
 * is path.new, never removed (it may be someone else's: then the write
 * fails and leaves it). */
static int write_via_tmp(const char *path, const void *data, size_t len, unsigned mode, bool remove_stale)
{
	char tmp[4096];
	int n = remove_stale ? snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid())
			     : snprintf(tmp, sizeof(tmp), "%s.new", path);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(tmp), SG_EINVAL, "path too long: %s", path);
	if (remove_stale)
		unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
	SG_ENSURE(fd >= 0, SG_EINVAL, "cannot create %s: %s", tmp, strerror(errno));
	const char *p = data;
	size_t off = 0;
	int rc = SG_OK;
	while (off < len && rc == SG_OK) {
		ssize_t w = write(fd, p + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rc = sg_error_set(SG_EINVAL, "cannot write %s: %s", tmp, strerror(errno));
		else
			off += (size_t)w;
	}
	/* The umask applied at open(2); the caller's mode is the contract. */
	if (rc == SG_OK && (fchmod(fd, (mode_t)mode) != 0 || fsync(fd) != 0))
		rc = sg_error_set(SG_EINVAL, "cannot sync %s: %s", tmp, strerror(errno));
	if (close(fd) != 0 && rc == SG_OK)
		rc = sg_error_set(SG_EINVAL, "cannot close %s: %s", tmp, strerror(errno));
	if (rc == SG_OK && rename(tmp, path) != 0)
		rc = sg_error_set(SG_EINVAL, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
	if (rc != SG_OK)
		unlink(tmp);
	return rc;
}

int sg_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode)
{
	return write_via_tmp(path, data, len, mode, true);
}

int sg_file_write_new(const char *path, const void *data, size_t len, unsigned mode)
{
	struct stat st;
	SG_ENSURE(lstat(path, &st) != 0, SG_EINVAL, "%s already exists; not overwriting it", path);
	return write_via_tmp(path, data, len, mode, false);
}

int sg_file_sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	SG_ENSURE(fd >= 0, SG_EINVAL, "cannot open %s: %s", dir, strerror(errno));
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	SG_ENSURE(rc == 0, SG_EINVAL, "cannot sync %s: %s", dir, strerror(e));
	return SG_OK;
}

static int not_a_file(const char *path, mode_t mode)
{
	return sg_error_set(SG_EINVAL, "cannot read %s: %s", path,
	                    S_ISDIR(mode) ? "a directory, not a file" : "not a regular file");
}

int sg_file_read(const char *path, size_t max, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	SG_ENSURE(max < SIZE_MAX, SG_EINVAL, "read limit too large");
	/* Only a regular file is read: a FIFO, a terminal, a socket or a
	 * device (/dev/stdin, /dev/zero) named by mistake gets an error, not a
	 * read that waits forever or fills max with what is not a file. The
	 * type is looked at before the open (opening some devices does
	 * something) and again on what was opened (the path may have changed
	 * in between); the open is non-blocking, so a FIFO swapped in by then
	 * cannot hang it either. */
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return not_a_file(path, st.st_mode);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	SG_ENSURE(fd >= 0, SG_ENOTFOUND, "cannot open %s: %s", path, strerror(errno));
	int st_rc = fstat(fd, &st), e = errno;
	if (st_rc != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return st_rc != 0 ? sg_error_set(SG_EINVAL, "cannot read %s: %s", path, strerror(e))
		                  : not_a_file(path, st.st_mode);
	}
	/* One byte past max tells "exactly max" from "more than max". */
	uint8_t *buf = malloc(max + 1);
	if (!buf) {
		close(fd);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	size_t got = 0;
	int rc = SG_OK;
	while (got <= max && rc == SG_OK) {
		ssize_t r = read(fd, buf + got, max + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = sg_error_set(SG_EINVAL, "cannot read %s: %s", path, strerror(errno));
		else if (r == 0)
			break;
		else
			got += (size_t)r;
	}
	close(fd);
	if (rc == SG_OK && got > max)
		rc = sg_error_set(SG_EINVAL, "%s is larger than %zu bytes", path, max);
	if (rc != SG_OK) {
		sg_wipe(buf, got);
		free(buf);
		return rc;
	}
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return SG_OK;
}
