/*
 * Tests for sg_log: the text and JSON layouts, escaping (a hostile value
 * must never produce a second line or break out of its string), level
 * filtering, truncation of huge records, and lines from concurrent threads
 * never interleaving. Output is captured with sg_log_set_fd on a temp file.
 */
#include "sg_log.h"
#include "sg_test.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cap_fd = -1;
static char cap_path[512];
static char out[1 << 20];

static void capture(sg_log_level min, sg_log_format fmt)
{
	const char *t = getenv("SIGNET_TEST_TMP");
	snprintf(cap_path, sizeof(cap_path), "%s/log-XXXXXX", t && *t ? t : "/tmp");
	cap_fd = mkstemp(cap_path);
	SG_CHECK(cap_fd >= 0);
	int fl = fcntl(cap_fd, F_GETFL);
	SG_CHECK(fcntl(cap_fd, F_SETFL, fl | O_APPEND) == 0);
	sg_log_set_fd(cap_fd);
	sg_log_configure(min, fmt);
}

/* Stops capturing; returns what was written, NUL-terminated, in out. */
static size_t captured(void)
{
	sg_log_set_fd(2);
	size_t n = 0;
	ssize_t r;
	if (lseek(cap_fd, 0, SEEK_SET) == 0)
		while (n < sizeof(out) - 1 && (r = read(cap_fd, out + n, sizeof(out) - 1 - n)) > 0)
			n += (size_t)r;
	out[n] = 0;
	close(cap_fd);
	unlink(cap_path);
	sg_log_configure(SG_LOG_INFO, SG_LOG_TEXT);
	return n;
}

static size_t count_char(const char *s, size_t n, char c)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i] == c;
	return k;
}

/* "2026-11-22T00:00:00.123Z" */
static int is_ts(const char *s)
{
	const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ";
	for (size_t i = 0; shape[i]; i++) {
		if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i])
			return 0;
	}
	return 1;
}

/* No raw control byte other than the final newline. */
static int clean_line(const char *s, size_t n)
{
	if (n == 0 || s[n - 1] != '\n')
		return 0;
	for (size_t i = 0; i + 1 < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

static void t_text(void)
{
	capture(SG_LOG_DEBUG, SG_LOG_TEXT);
	sg_log(SG_LOG_INFO, "certificate issued", SG_F_STR("serial", "ab01"), SG_F_INT("latency_us", 412),
	       SG_F_INT("neg", INT64_MIN), SG_F_END);
	size_t n = captured();
	SG_CHECK(is_ts(out));
	SG_CHECK(strcmp(out + 24, " info certificate issued serial=ab01 latency_us=412 neg=-9223372036854775808\n") == 0);
	SG_CHECK(clean_line(out, n));
}

static void t_json(void)
{
	capture(SG_LOG_DEBUG, SG_LOG_JSON);
	sg_log(SG_LOG_WARN, "certificate issued", SG_F_STR("serial", "ab01"), SG_F_INT("latency_us", 412),
	       SG_F_STR("none", NULL), SG_F_END);
	size_t n = captured();
	SG_CHECK(strncmp(out, "{\"ts\":\"", 7) == 0 && is_ts(out + 7));
	SG_CHECK(strcmp(out + 31, "\",\"level\":\"warn\",\"msg\":\"certificate issued\",\"serial\":\"ab01\","
				  "\"latency_us\":412,\"none\":null}\n") == 0);
	SG_CHECK(clean_line(out, n));
	capture(SG_LOG_DEBUG, SG_LOG_JSON);
	sg_log_fields(SG_LOG_ERROR, "no fields", NULL);
	captured();
	SG_CHECK(strstr(out, "\"level\":\"error\",\"msg\":\"no fields\"}\n") != NULL);
}

static void t_json_escaping(void)
{
	capture(SG_LOG_DEBUG, SG_LOG_JSON);
	sg_log(SG_LOG_INFO, "m\"s\ng",
	       SG_F_STR("v", "q\"b\\s\nn\rr\tt\x01\x1f\x7f"),
	       SG_F_STR("forge", "x\"}\n{\"ts\":\"0\",\"level\":\"error\",\"msg\":\"pwned"),
	       SG_F_STR("utf8", "caf\xc3\xa9 \xe2\x82\xac"),
	       SG_F_STR("bad", "a\xff" "b\xc3(\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80"),
	       SG_F_STR("k\"ey\n", "v"), SG_F_END);
	size_t n = captured();
	SG_CHECK(clean_line(out, n));
	SG_CHECK(count_char(out, n, '\n') == 1);
	SG_CHECK(strstr(out, "\"msg\":\"m\\\"s\\ng\"") != NULL);
	SG_CHECK(strstr(out, "\"v\":\"q\\\"b\\\\s\\nn\\rr\\tt\\u0001\\u001f\\u007f\"") != NULL);
	SG_CHECK(strstr(out, "\"forge\":\"x\\\"}\\n{\\\"ts\\\":\\\"0\\\",\\\"level\\\":\\\"error\\\"") != NULL);
	SG_CHECK(strstr(out, "\"utf8\":\"caf\xc3\xa9 \xe2\x82\xac\"") != NULL);
	/* Each invalid byte (overlong, surrogate, > U+10FFFF, stray) is U+FFFD. */
	SG_CHECK(strstr(out, "\"bad\":\"a\\ufffdb\\ufffd(\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"") != NULL);
	SG_CHECK(strstr(out, "\"k_ey_\":\"v\"") != NULL);
}

static void t_text_escaping(void)
{
	capture(SG_LOG_DEBUG, SG_LOG_TEXT);
	sg_log(SG_LOG_INFO, "line\nbreak", SG_F_STR("sp", "a b"), SG_F_STR("eq", "a=b"), SG_F_STR("empty", ""),
	       SG_F_STR("q", "say \"hi\" \\o/"), SG_F_STR("forge", "x\n2026-01-01T00:00:00.000Z error fake"),
	       SG_F_STR("ctl", "\x01\x7f\t"), SG_F_STR("bad", "\xff"), SG_F_STR("utf8", "caf\xc3\xa9"),
	       SG_F_STR("none", NULL), SG_F_STR("bare", "ok-1.2_3:/x"), SG_F_STR("key with space", "v"), SG_F_END);
	size_t n = captured();
	SG_CHECK(clean_line(out, n));
	SG_CHECK(count_char(out, n, '\n') == 1);
	SG_CHECK(strstr(out, " info line\\nbreak sp=\"a b\" eq=\"a=b\" empty=\"\" q=\"say \\\"hi\\\" \\\\o/\"") != NULL);
	SG_CHECK(strstr(out, " forge=\"x\\n2026-01-01T00:00:00.000Z error fake\"") != NULL);
	SG_CHECK(strstr(out, " ctl=\"\\x01\\x7f\\t\"") != NULL);
	SG_CHECK(strstr(out, " bad=\"\\xff\"") != NULL);
	SG_CHECK(strstr(out, " utf8=\"caf\xc3\xa9\"") != NULL);
	SG_CHECK(strstr(out, " none=(null)") != NULL);
	SG_CHECK(strstr(out, " bare=ok-1.2_3:/x") != NULL);
	SG_CHECK(strstr(out, " key_with_space=v\n") != NULL);
}

static void t_levels(void)
{
	sg_log_level l;
	sg_log_format f;
	SG_CHECK_OK(sg_log_level_parse("debug", &l));
	SG_CHECK(l == SG_LOG_DEBUG);
	SG_CHECK_OK(sg_log_level_parse("error", &l));
	SG_CHECK(l == SG_LOG_ERROR);
	SG_CHECK_RC(sg_log_level_parse("INFO", &l), SG_EINVAL);
	SG_CHECK_RC(sg_log_level_parse("", &l), SG_EINVAL);
	SG_CHECK_RC(sg_log_level_parse("warning", &l), SG_EINVAL);
	SG_CHECK_OK(sg_log_format_parse("json", &f));
	SG_CHECK(f == SG_LOG_JSON);
	SG_CHECK_OK(sg_log_format_parse("text", &f));
	SG_CHECK(f == SG_LOG_TEXT);
	SG_CHECK_RC(sg_log_format_parse("xml", &f), SG_EINVAL);

	capture(SG_LOG_WARN, SG_LOG_TEXT);
	SG_CHECK(!sg_log_enabled(SG_LOG_DEBUG) && !sg_log_enabled(SG_LOG_INFO));
	SG_CHECK(sg_log_enabled(SG_LOG_WARN) && sg_log_enabled(SG_LOG_ERROR));
	sg_log(SG_LOG_DEBUG, "d", SG_F_END);
	sg_log(SG_LOG_INFO, "i", SG_F_END);
	sg_log_fields(SG_LOG_INFO, "direct", NULL); /* filtered even when called directly */
	sg_log(SG_LOG_WARN, "w", SG_F_END);
	sg_log(SG_LOG_ERROR, "e", SG_F_END);
	size_t n = captured();
	SG_CHECK(count_char(out, n, '\n') == 2);
	SG_CHECK(strstr(out, " warn w\n") != NULL && strstr(out, " error e\n") != NULL);
	SG_CHECK(strstr(out, " info ") == NULL && strstr(out, " debug ") == NULL);

	capture(SG_LOG_DEBUG, SG_LOG_TEXT);
	sg_log(SG_LOG_DEBUG, "d", SG_F_END);
	captured();
	SG_CHECK(strstr(out, " debug d\n") != NULL);
}

static void t_error_last(void)
{
	capture(SG_LOG_DEBUG, SG_LOG_JSON);
	sg_error_set(SG_EINVAL, "bad \"thing\"\nsecond line");
	sg_log_error_last(SG_LOG_ERROR, "request failed");
	size_t n = captured();
	SG_CHECK(clean_line(out, n));
	SG_CHECK(strstr(out, "\"msg\":\"request failed\",\"error\":\"invalid\",\"detail\":\"bad \\\"thing\\\"\\nsecond line\",\"at\":\"") != NULL);
	SG_CHECK(strstr(out, "test_log.c:") != NULL);
}

/* Checks a JSON line is well-formed enough: strings close, escapes whole. */
static int json_shape_ok(const char *s, size_t n)
{
	int in_str = 0;
	for (size_t i = 0; i < n; i++) {
		if (in_str && s[i] == '\\') {
			if (i + 1 >= n)
				return 0;
			if (s[i + 1] == 'u') {
				if (i + 5 >= n)
					return 0;
				i += 5;
			} else {
				if (!strchr("\"\\nrtbf/", s[i + 1]))
					return 0;
				i++;
			}
		} else if (s[i] == '"') {
			in_str = !in_str;
		}
	}
	return !in_str && n >= 2 && s[n - 2] == '}' && s[n - 1] == '\n';
}

static void t_truncation(void)
{
	static const char fill[] = {'a', '"', '\x01', '\\', (char)0xff};
	char *big = malloc(3 * SG_LOG_RECORD_MAX);
	SG_CHECK(big != NULL);
	if (!big)
		return;
	for (size_t k = 0; k < sizeof(fill); k++) {
		/* Several lengths so the cut lands at every offset of an escape. */
		for (size_t len = SG_LOG_RECORD_MAX - 200; len < SG_LOG_RECORD_MAX + 10; len += 7) {
			memset(big, fill[k], len);
			big[len] = 0;
			capture(SG_LOG_DEBUG, SG_LOG_JSON);
			sg_log(SG_LOG_INFO, "big", SG_F_STR("v", big), SG_F_INT("after", 1), SG_F_END);
			size_t n = captured();
			SG_CHECK(n <= SG_LOG_RECORD_MAX);
			SG_CHECK(clean_line(out, n));
			SG_CHECK(json_shape_ok(out, n));
			/* Either the whole record or a marked cut. */
			SG_CHECK((strstr(out, ",\"after\":1}\n") != NULL) !=
				 (strstr(out, ",\"truncated\":true}\n") != NULL));

			capture(SG_LOG_DEBUG, SG_LOG_TEXT);
			sg_log(SG_LOG_INFO, "big", SG_F_STR("v", big), SG_F_END);
			n = captured();
			SG_CHECK(n <= SG_LOG_RECORD_MAX);
			SG_CHECK(clean_line(out, n));
		}
	}
	memset(big, 'x', 3 * SG_LOG_RECORD_MAX - 1);
	big[3 * SG_LOG_RECORD_MAX - 1] = 0;
	capture(SG_LOG_DEBUG, SG_LOG_TEXT);
	sg_log(SG_LOG_INFO, "big", SG_F_STR("v", big), SG_F_STR("w", "y"), SG_F_END);
	size_t n = captured();
	SG_CHECK(n <= SG_LOG_RECORD_MAX && clean_line(out, n));
	SG_CHECK(strstr(out, " truncated=true\n") != NULL);
	SG_CHECK(strstr(out, " w=y") == NULL);
	/* A record that fits is not marked. */
	capture(SG_LOG_DEBUG, SG_LOG_JSON);
	sg_log(SG_LOG_INFO, "small", SG_F_STR("v", "x"), SG_F_END);
	captured();
	SG_CHECK(strstr(out, "truncated") == NULL);
	free(big);
}

#define THREADS 4
#define PER_THREAD 300

static void *writer(void *arg)
{
	char v[600];
	memset(v, 'a' + (int)(size_t)arg, sizeof(v) - 1);
	v[sizeof(v) - 1] = 0;
	for (int i = 0; i < PER_THREAD; i++)
		sg_log(SG_LOG_INFO, "t", SG_F_INT("i", i), SG_F_STR("v", v), SG_F_END);
	return NULL;
}

static void t_threads(void)
{
	capture(SG_LOG_DEBUG, SG_LOG_TEXT);
	pthread_t th[THREADS];
	for (size_t i = 0; i < THREADS; i++)
		SG_CHECK(pthread_create(&th[i], NULL, writer, (void *)i) == 0);
	for (size_t i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	size_t n = captured();
	SG_CHECK(count_char(out, n, '\n') == THREADS * PER_THREAD);
	/* Every line is whole: one letter repeated 599 times, then newline. */
	size_t lines = 0, good = 0;
	for (char *line = out; *line; lines++) {
		char *nl = strchr(line, '\n');
		if (!nl)
			break;
		char *v = strstr(line, " v=");
		if (v && nl - (v + 3) == 599 && strspn(v + 3, "abcd") >= 599 &&
		    strspn(v + 3, (char[]){v[3], 0}) == 599)
			good++;
		line = nl + 1;
	}
	SG_CHECK(good == THREADS * PER_THREAD);
}

/* Opens cap_path with flags, writes what a killed process left, mends,
 * logs one record and returns the file's whole text in out. */
static size_t mend_after(const char *left, int flags)
{
	int fd = open(cap_path, flags | O_CREAT | O_TRUNC, 0600);
	SG_CHECK(fd >= 0);
	if (*left)
		SG_CHECK(write(fd, left, strlen(left)) == (ssize_t)strlen(left));
	sg_log_set_fd(fd);
	sg_log_configure(SG_LOG_INFO, SG_LOG_JSON);
	sg_log_mend();
	sg_log_mend(); /* idempotent: the file now ends in a newline */
	sg_log(SG_LOG_INFO, "next", SG_F_END);
	sg_log_set_fd(2);
	sg_log_configure(SG_LOG_INFO, SG_LOG_TEXT);
	close(fd);
	size_t n = 0;
	ssize_t r;
	fd = open(cap_path, O_RDONLY);
	SG_CHECK(fd >= 0);
	while (fd >= 0 && n < sizeof(out) - 1 && (r = read(fd, out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = 0;
	if (fd >= 0)
		close(fd);
	return n;
}

/* A record torn by a kill ({"ts":... with no newline) gets a newline before
 * the next process's first record, through a read-write, an append-only
 * (write-only: a shell's 2>>) and a write-only positioned fd; a file that
 * ends in a newline, or is empty, is left as it is. */
static void t_mend(void)
{
	const char *t = getenv("SIGNET_TEST_TMP");
	snprintf(cap_path, sizeof(cap_path), "%s/mend-%d", t && *t ? t : "/tmp", (int)getpid());
	const int modes[] = {O_RDWR | O_APPEND, O_WRONLY | O_APPEND, O_WRONLY};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		size_t n = mend_after("{\"ts\":\"2026-11-27T05:00:00.000Z\",\"lev", modes[i]);
		SG_CHECK(n > 0 && strncmp(out, "{\"ts\":\"2026-11-27T05:00:00.000Z\",\"lev\n{", 39) == 0);
		SG_CHECK(count_char(out, n, '\n') == 2);
		n = mend_after("{\"msg\":\"whole\"}\n", modes[i]);
		SG_CHECK(strncmp(out, "{\"msg\":\"whole\"}\n{", 17) == 0 && count_char(out, n, '\n') == 2);
		n = mend_after("", modes[i]);
		SG_CHECK(out[0] == '{' && count_char(out, n, '\n') == 1);
	}
	unlink(cap_path);
}

/* sg_log_printable: printable ASCII kept, every other byte one '?', cut to
 * the buffer, NUL-terminated; in place too. */
static void t_printable(void)
{
	char shown[16];
	sg_log_printable(shown, sizeof(shown), "a b~", 4);
	SG_CHECK(strcmp(shown, "a b~") == 0);
	sg_log_printable(shown, sizeof(shown), "x\x1b[2J\r\x7f\xc3\xa9\0y", 11);
	SG_CHECK(strcmp(shown, "x?[2J?????y") == 0); /* the NUL byte too */
	sg_log_printable(shown, 4, "abcdef", 6);     /* cut: 3 bytes and the NUL */
	SG_CHECK(strcmp(shown, "abc") == 0);
	sg_log_printable(shown, 1, "abc", 3);
	SG_CHECK(shown[0] == '\0');
	sg_log_printable(shown, sizeof(shown), "", 0);
	SG_CHECK(shown[0] == '\0');
	char in[] = "k\x02v\xff";
	sg_log_printable(in, sizeof(in), in, strlen(in));
	SG_CHECK(strcmp(in, "k?v?") == 0);
}

SG_TEST_MAIN(SG_TEST(t_text), SG_TEST(t_json), SG_TEST(t_json_escaping), SG_TEST(t_text_escaping), SG_TEST(t_levels),
             SG_TEST(t_error_last), SG_TEST(t_truncation), SG_TEST(t_threads), SG_TEST(t_mend), SG_TEST(t_printable))
