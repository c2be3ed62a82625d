/*
 * Secrets live in their own allocation, excluded from core dumps
 * (madvise MADV_DONTDUMP is Linux-only and best effort) and wiped with
 * OPENSSL_cleanse before free. Files holding secrets must not be readable by
 * anyone but the owner: a PIN file with mode 0644 is refused, as ssh does.
 */
#include "sg_secret.h"
#include "sg_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sg_secret {
	size_t len;
	uint8_t data[]; /* len bytes + NUL */
};

void sg_wipe(void *p, size_t n)
{
	OPENSSL_cleanse(p, n);
}

int sg_secret_new(sg_secret **out, const void *p, size_t n)
{
	SG_ENSURE(n <= SG_SECRET_MAX, SG_EINVAL, "secret longer than %d bytes", SG_SECRET_MAX);
	sg_secret *s = malloc(sizeof(*s) + n + 1);
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	s->len = n;
	if (n)
		memcpy(s->data, p, n);
	s->data[n] = 0;
	*out = s;
	return SG_OK;
}

int sg_secret_from_file(sg_secret **out, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	SG_ENSURE(fd >= 0, errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "cannot open secret file %s: %s", path,
		  strerror(errno));
	struct stat st;
	uint8_t buf[SG_SECRET_MAX + 1];
	int rc = SG_EINVAL;
	ssize_t n = 0;
	SG_ENSURE_GOTO(rc, fstat(fd, &st) == 0 && S_ISREG(st.st_mode), out_close, SG_EINVAL,
		       "secret file %s is not a regular file", path);
	SG_ENSURE_GOTO(rc, (st.st_mode & 077) == 0, out_close, SG_EAUTH,
		       "secret file %s is accessible by group or others (mode %03o); chmod 600 it", path,
		       (unsigned)(st.st_mode & 0777));
	size_t got = 0;
	while (got < sizeof(buf) && (n = read(fd, buf + got, sizeof(buf) - got)) > 0)
		got += (size_t)n;
	SG_ENSURE_GOTO(rc, n >= 0, out_wipe, SG_EINVAL, "cannot read secret file %s: %s", path, strerror(errno));
	SG_ENSURE_GOTO(rc, got <= SG_SECRET_MAX, out_wipe, SG_EINVAL, "secret file %s is larger than %d bytes",
		       path, SG_SECRET_MAX);
	if (got && buf[got - 1] == '\n')
		got--;
	if (got && buf[got - 1] == '\r')
		got--;
	SG_ENSURE_GOTO(rc, got > 0, out_wipe, SG_EINVAL, "secret file %s is empty", path);
	rc = sg_secret_new(out, buf, got);
out_wipe:
	sg_wipe(buf, sizeof(buf));
out_close:
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
	char hex[129];
	SG_ENSURE(n <= sizeof(raw), SG_EINVAL, "random secret too long");
	SG_OSSL(RAND_bytes(raw, (int)n), SG_EINTERNAL, "RAND_bytes failed");
	for (size_t i = 0; i < n; i++) {
		hex[2 * i] = "0123456789abcdef"[raw[i] >> 4];
		hex[2 * i + 1] = "0123456789abcdef"[raw[i] & 15];
	}
	int rc = sg_secret_new(out, hex, 2 * n);
	sg_wipe(raw, sizeof(raw));
	sg_wipe(hex, sizeof(hex));
	return rc;
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
	return a->len == n && CRYPTO_memcmp(a->data, p, n) == 0;
}

void sg_secret_free(sg_secret *s)
{
	if (!s)
		return;
	sg_wipe(s->data, s->len);
	free(s);
}
