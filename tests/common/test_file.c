/*
 * Tests for sg_file: the atomic write (mode whatever the umask, an existing
 * file replaced, a stale temporary of ours removed), the write of a new file
 * (an existing target or temporary refused, nothing touched), the bounded
 * read (a regular file only), and the folder sync that makes renames and unlinks durable.
 */
#include "sg_file.h"
#include "sg_test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static char dir[512];

static const char *at(const char *name)
{
	static char path[600];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

static void setup(void)
{
	const char *t = getenv("SIGNET_TEST_TMP");
	snprintf(dir, sizeof(dir), "%s/file-%d", t && *t ? t : "/tmp", (int)getpid());
	SG_CHECK(mkdir(dir, 0700) == 0);
}

static void put(const char *name, const char *text)
{
	int fd = open(at(name), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	SG_CHECK(fd >= 0);
	if (fd >= 0) {
		SG_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
		close(fd);
	}
}

static void expect(const char *name, const char *text)
{
	uint8_t *got = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_file_read(at(name), 4096, &got, &len));
	SG_CHECK(got && len == strlen(text) && memcmp(got, text, len) == 0 && got[len] == 0);
	free(got);
}

static void t_write_atomic(void)
{
	mode_t old = umask(077);
	SG_CHECK_OK(sg_file_write_atomic(at("a"), "one", 3, 0644));
	umask(old);
	struct stat st;
	SG_CHECK(stat(at("a"), &st) == 0 && (st.st_mode & 0777) == 0644);
	expect("a", "one");
	char stale[700];
	snprintf(stale, sizeof(stale), "%.600s.tmp.%ld", at("a"), (long)getpid());
	int fd = open(stale, O_WRONLY | O_CREAT, 0600); /* a crash of "our" pid left it */
	SG_CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	SG_CHECK_OK(sg_file_write_atomic(at("a"), "two", 3, 0600));
	expect("a", "two");
	SG_CHECK(access(stale, F_OK) != 0);
	SG_CHECK_RC(sg_file_write_atomic(at("missing/a"), "x", 1, 0600), SG_EINVAL);
	SG_CHECK_MSG("cannot create");
}

static void t_write_new(void)
{
	SG_CHECK_OK(sg_file_write_new(at("n"), "first", 5, 0600));
	expect("n", "first");
	SG_CHECK_RC(sg_file_write_new(at("n"), "second", 6, 0600), SG_EINVAL);
	SG_CHECK_MSG("already exists");
	expect("n", "first");
	put("m.new", "someone else's");
	SG_CHECK_RC(sg_file_write_new(at("m"), "mine", 4, 0600), SG_EINVAL);
	SG_CHECK(access(at("m"), F_OK) != 0);
	expect("m.new", "someone else's"); /* left as it was */
	SG_CHECK(symlink("nowhere", at("dangling")) == 0);
	SG_CHECK_RC(sg_file_write_new(at("dangling"), "x", 1, 0600), SG_EINVAL);
}

static void t_read_bounded(void)
{
	put("r", "0123456789");
	uint8_t *got = NULL;
	size_t len = 0;
	SG_CHECK_RC(sg_file_read(at("r"), 9, &got, &len), SG_EINVAL);
	SG_CHECK(got == NULL && len == 0);
	expect("r", "0123456789"); /* exactly at a limit of 4096 */
	SG_CHECK_OK(sg_file_read(at("r"), 10, &got, &len));
	SG_CHECK(len == 10);
	free(got);
	SG_CHECK_RC(sg_file_read(at("absent"), 10, &got, &len), SG_ENOTFOUND);

	/* Not a regular file: refused at once, nothing returned. A FIFO
	 * without a writer would block a plain open() forever, and /dev/zero
	 * would fill the limit with zeros. */
	SG_CHECK(mkfifo(at("fifo"), 0600) == 0);
	SG_CHECK_RC(sg_file_read(at("fifo"), 10, &got, &len), SG_EINVAL);
	SG_CHECK_MSG("not a regular file");
	SG_CHECK(got == NULL && len == 0);
	SG_CHECK_RC(sg_file_read("/dev/zero", 10, &got, &len), SG_EINVAL);
	SG_CHECK_MSG("not a regular file");
	SG_CHECK_RC(sg_file_read(dir, 10, &got, &len), SG_EINVAL);
	SG_CHECK_MSG("a directory");
	/* A socket (where the folder's path leaves room for its name). */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(at("sock")) < sizeof(sa.sun_path)) {
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", at("sock"));
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		SG_CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
		SG_CHECK_RC(sg_file_read(at("sock"), 10, &got, &len), SG_EINVAL);
		SG_CHECK_MSG("not a regular file");
		if (s >= 0)
			close(s);
	}
	SG_CHECK(got == NULL && len == 0);
	/* A symbolic link to a regular file is read through. */
	char target[600];
	snprintf(target, sizeof(target), "%s", at("r")); /* at() has one buffer */
	SG_CHECK(symlink(target, at("link")) == 0);
	SG_CHECK_OK(sg_file_read(at("link"), 10, &got, &len));
	SG_CHECK(len == 10 && memcmp(got, "0123456789", 10) == 0);
	free(got);
}

static void t_sync_dir(void)
{
	SG_CHECK_OK(sg_file_sync_dir(dir));
	SG_CHECK_RC(sg_file_sync_dir(at("absent")), SG_EINVAL);
	SG_CHECK_MSG("cannot open");
	SG_CHECK_RC(sg_file_sync_dir(at("r")), SG_EINVAL); /* a file, not a folder */
}

static void cleanup(void)
{
	const char *names[] = {"a", "n", "m.new", "dangling", "r", "fifo", "link", "sock"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		unlink(at(names[i]));
	SG_CHECK(rmdir(dir) == 0);
}

SG_TEST_MAIN(SG_TEST(setup), SG_TEST(t_write_atomic), SG_TEST(t_write_new), SG_TEST(t_read_bounded),
	     SG_TEST(t_sync_dir), SG_TEST(cleanup))
