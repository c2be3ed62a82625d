/*
 * Tests for sg_secret: file permissions (ssh-style refusal of group/other
 * access), newline stripping, size limits, the environment source, constant
 * time comparison results and random hex.
 */
#include "sg_secret.h"
#include "sg_test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void t_cleanup(void)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/pin", dir);
	unlink(path);
	rmdir(dir);
}

SG_TEST_MAIN(SG_TEST(setup_dir), SG_TEST(t_file_modes), SG_TEST(t_file_content), SG_TEST(t_file_kinds),
	     SG_TEST(t_env), SG_TEST(t_new_equal), SG_TEST(t_random_hex), SG_TEST(t_cleanup))
