/*
 * Tests for sg_opt: GNU command-line forms, every value type with its
 * bounds, durations, the config file reader (limits, hostile bytes, errors
 * naming file and line), precedence (defaults < file < flags), log levels
 * (names and klog verbosities), string ownership (run under ASan: every
 * test ends with sg_opt_free) and sg_opt_program, a tool's command line in
 * one call.
 */
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_test.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct cfg {
	char *config;
	char *name;
	char *key;
	char *label;
	int64_t workers;
	int64_t ttl;
	bool verbose;
	int mode;
} cfg;

static const char *const modes[] = {"ca", "ra", "offline", NULL};

static const sg_opt table[] = {
	{"config", SG_OPT_PATH, offsetof(cfg, config), NULL, 0, 0, NULL, "config file", true},
	{"name", SG_OPT_STRING, offsetof(cfg, name), "signet", 0, 16, NULL, "instance name", false},
	{"key", SG_OPT_PATH, offsetof(cfg, key), NULL, 0, 0, NULL, "PIN file", false},
	{"label", SG_OPT_STRING, offsetof(cfg, label), NULL, 0, 0, NULL, "free text", false},
	{"workers", SG_OPT_INT, offsetof(cfg, workers), "4", 1, 64, NULL, "worker threads", false},
	{"max-ttl", SG_OPT_DURATION, offsetof(cfg, ttl), "1d", 60, 30 * 86400, NULL, "longest validity",
	 false},
	{"verbose", SG_OPT_BOOL, offsetof(cfg, verbose), "false", 0, 0, NULL, "log more", false},
	{"mode", SG_OPT_ENUM, offsetof(cfg, mode), "ca", 0, 0, modes, "role", false},
};
#define NT (sizeof(table) / sizeof(table[0]))

typedef struct wide {
	int64_t any;
	int64_t dur;
} wide;
static const sg_opt wide_table[] = {
	{"any", SG_OPT_INT, offsetof(wide, any), NULL, 0, 0, NULL, "unbounded", false},
	{"dur", SG_OPT_DURATION, offsetof(wide, dur), NULL, 0, 0, NULL, "unbounded", false},
};

/* Parses a NULL-terminated list of arguments into a fresh cfg. */
static int parse(cfg *c, sg_opt_result *res, char **pos, const char **args)
{
	int argc = 0;
	while (args[argc])
		argc++;
	memset(c, 0, sizeof(*c));
	memset(res, 0, sizeof(*res));
	res->argv = pos;
	return sg_opt_parse(table, NT, c, argc, (char **)args, res);
}

static const char *tmpdir(void)
{
	const char *d = getenv("SIGNET_TEST_TMP");
	return d && *d ? d : "/tmp";
}

static void write_file(const char *path, const void *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	SG_CHECK(fd >= 0);
	if (fd < 0)
		return;
	SG_CHECK(write(fd, data, n) == (ssize_t)n);
	close(fd);
}

static int file_bytes(cfg *c, const char *text, size_t n, const char *base)
{
	return sg_opt_parse_file_bytes(table, NT, c, text, n, "t.conf", base);
}

static void t_defaults(void)
{
	cfg c;
	sg_opt_result res;
	char *pos[1];
	const char *args[] = {NULL};
	SG_CHECK_OK(parse(&c, &res, pos, args));
	SG_CHECK(c.name && strcmp(c.name, "signet") == 0);
	SG_CHECK(c.workers == 4 && c.ttl == 86400 && !c.verbose && c.mode == 0);
	SG_CHECK(c.key == NULL && c.config == NULL && c.label == NULL);
	SG_CHECK(res.argc == 0 && !res.help);
	sg_opt_free(table, NT, &c);
	SG_CHECK(c.name == NULL);
	sg_opt_free(table, NT, &c); /* twice is fine */
}

static void t_gnu_forms(void)
{
	cfg c;
	sg_opt_result res;
	char *pos[16];
	const char *args[] = {"--workers", "8", "--name=x y", "--verbose", "--mode", "ra", "--max-ttl=1h30m",
			      "--label", "-dash", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, args));
	SG_CHECK(c.workers == 8);
	SG_CHECK(strcmp(c.name, "x y") == 0);
	SG_CHECK(c.name != args[2] + 7); /* a heap copy, not borrowed */
	SG_CHECK(c.verbose);
	SG_CHECK(c.mode == 1);
	SG_CHECK(c.ttl == 5400);
	SG_CHECK(strcmp(c.label, "-dash") == 0); /* "--name value" takes the next argument as is */
	sg_opt_free(table, NT, &c);

	const char *b1[] = {"--verbose=true", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, b1));
	SG_CHECK(c.verbose);
	sg_opt_free(table, NT, &c);
	const char *b2[] = {"--verbose=false", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, b2));
	SG_CHECK(!c.verbose);
	sg_opt_free(table, NT, &c);
	/* A bare boolean does not swallow the next argument. */
	const char *b3[] = {"--verbose", "false", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, b3));
	SG_CHECK(c.verbose && res.argc == 1 && strcmp(res.argv[0], "false") == 0);
	sg_opt_free(table, NT, &c);
	const char *b4[] = {"--verbose=maybe", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, b4), SG_EINVAL);
	SG_CHECK_MSG("--verbose");
	sg_opt_free(table, NT, &c);
	const char *b5[] = {"--verbose=", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, b5), SG_EINVAL);
	sg_opt_free(table, NT, &c);
	/* An empty string value is a value. */
	const char *b6[] = {"--label=", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, b6));
	SG_CHECK(c.label && c.label[0] == 0);
	sg_opt_free(table, NT, &c);
}

static void t_errors(void)
{
	cfg c;
	sg_opt_result res;
	char *pos[8];
	const char *u1[] = {"--nosuch", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, u1), SG_EINVAL);
	SG_CHECK_MSG("--nosuch");
	sg_opt_free(table, NT, &c);
	const char *u2[] = {"--bogus=3", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, u2), SG_EINVAL);
	SG_CHECK_MSG("--bogus");
	sg_opt_free(table, NT, &c);
	const char *u3[] = {"-v", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, u3), SG_EINVAL);
	SG_CHECK_MSG("-v");
	sg_opt_free(table, NT, &c);
	const char *u4[] = {"--", "--nosuch", NULL}; /* after --: positional */
	SG_CHECK_OK(parse(&c, &res, pos, u4));
	sg_opt_free(table, NT, &c);
	const char *u5[] = {"--=x", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, u5), SG_EINVAL);
	sg_opt_free(table, NT, &c);

	const char *m1[] = {"--workers", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, m1), SG_EINVAL);
	SG_CHECK_MSG("--workers: missing value");
	sg_opt_free(table, NT, &c);
	const char *m2[] = {"--workers", "3", "--workers", "4", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, m2), SG_EINVAL);
	SG_CHECK_MSG("more than once");
	sg_opt_free(table, NT, &c);
	const char *m3[] = {"--max-ttl", "5x", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, m3), SG_EINVAL);
	SG_CHECK_MSG("--max-ttl: \"5x\" is not a duration");
	sg_opt_free(table, NT, &c);
	const char *m4[] = {"--mode", "RA", NULL}; /* case-sensitive */
	SG_CHECK_RC(parse(&c, &res, pos, m4), SG_EINVAL);
	SG_CHECK_MSG("--mode");
	sg_opt_free(table, NT, &c);
	const char *m5[] = {"--help=1", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, m5), SG_EINVAL);
	sg_opt_free(table, NT, &c);
}

static void t_positionals(void)
{
	cfg c;
	sg_opt_result res;
	char *pos[16];
	const char *args[] = {"a", "--workers", "3", "b", "-", "--", "--verbose", "c", "--", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, args));
	SG_CHECK(c.workers == 3 && !c.verbose);
	SG_CHECK(res.argc == 6);
	const char *want[] = {"a", "b", "-", "--verbose", "c", "--"};
	for (int i = 0; i < 6 && i < res.argc; i++)
		SG_CHECK(strcmp(res.argv[i], want[i]) == 0);
	SG_CHECK(res.argv[0] == args[0]); /* borrowed */
	sg_opt_free(table, NT, &c);

	/* res->argv NULL: compacted in place into argv. */
	char a0[] = "--verbose", a1[] = "x", a2[] = "--workers=2", a3[] = "y";
	char *argv[] = {a0, a1, a2, a3};
	memset(&c, 0, sizeof(c));
	memset(&res, 0, sizeof(res));
	SG_CHECK_OK(sg_opt_parse(table, NT, &c, 4, argv, &res));
	SG_CHECK(res.argv == argv && res.argc == 2);
	SG_CHECK(argv[0] == a1 && argv[1] == a3);
	SG_CHECK(c.verbose && c.workers == 2);
	sg_opt_free(table, NT, &c);
}

static void t_help(void)
{
	cfg c;
	sg_opt_result res;
	char *pos[8];
	const char *args[] = {"--workers", "5", "--help", "--nosuch", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, args), SG_EINVAL); /* unknown flag still fails the scan */
	sg_opt_free(table, NT, &c);
	const char *h[] = {"pos", "--help", "--workers", "999", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, h));
	SG_CHECK(res.help);
	SG_CHECK(c.workers == 4); /* flags are not applied once help is asked for */
	sg_opt_free(table, NT, &c);
}

static void t_bounds(void)
{
	static const struct {
		const char *flag, *value;
		int rc;
	} cases[] = {
		{"--workers", "1", 0},       {"--workers", "64", 0},       {"--workers", "0", SG_EINVAL},
		{"--workers", "65", SG_EINVAL}, {"--workers", "-1", SG_EINVAL}, {"--workers", "abc", SG_EINVAL},
		{"--workers", "", SG_EINVAL}, {"--workers", "+5", SG_EINVAL},  {"--workers", " 5", SG_EINVAL},
		{"--workers", "5 ", SG_EINVAL}, {"--workers", "0x10", SG_EINVAL}, {"--workers", "1e1", SG_EINVAL},
		{"--max-ttl", "60s", 0},     {"--max-ttl", "1m", 0},       {"--max-ttl", "59s", SG_EINVAL},
		{"--max-ttl", "30d", 0},     {"--max-ttl", "30d1s", SG_EINVAL}, {"--max-ttl", "0s", SG_EINVAL},
		{"--name", "0123456789abcdef", 0}, {"--name", "0123456789abcdefg", SG_EINVAL},
		{"--name", "", 0},           {"--key", "", 0} /* unsets */, {"--mode", "offline", 0},
		{"--mode", "", SG_EINVAL},   {"--verbose", "yes", 0},      {"--verbose", "off", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cfg c;
		sg_opt_result res;
		char *pos[4];
		const char *args[] = {cases[i].flag, cases[i].value, NULL};
		char eq[64];
		if (strcmp(cases[i].flag, "--verbose") == 0) {
			snprintf(eq, sizeof(eq), "%s=%s", cases[i].flag, cases[i].value);
			args[0] = eq;
			args[1] = NULL;
		}
		int rc = parse(&c, &res, pos, args);
		if (rc != cases[i].rc)
			fprintf(stderr, "case %s %s: rc %d (%s)\n", cases[i].flag, cases[i].value, rc,
				sg_error_last()->msg);
		SG_CHECK(rc == cases[i].rc);
		sg_opt_free(table, NT, &c);
	}
	cfg c;
	sg_opt_result res;
	char *pos[4];
	const char *a[] = {"--workers", "65", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, a), SG_EINVAL);
	SG_CHECK_MSG("out of range [1, 64]");
	sg_opt_free(table, NT, &c);

	wide w = {0, 0};
	SG_CHECK_OK(sg_opt_set(wide_table, 2, &w, "any", "-9223372036854775808", "test"));
	SG_CHECK(w.any == INT64_MIN);
	SG_CHECK_OK(sg_opt_set(wide_table, 2, &w, "any", "9223372036854775807", "test"));
	SG_CHECK(w.any == INT64_MAX);
	SG_CHECK_RC(sg_opt_set(wide_table, 2, &w, "any", "9223372036854775808", "test"), SG_EINVAL);
	SG_CHECK_RC(sg_opt_set(wide_table, 2, &w, "any", "-9223372036854775809", "test"), SG_EINVAL);
	SG_CHECK_RC(sg_opt_set(wide_table, 2, &w, "any", "-", "test"), SG_EINVAL);
	SG_CHECK(w.any == INT64_MAX); /* failed sets change nothing */
	SG_CHECK_OK(sg_opt_set(wide_table, 2, &w, "dur", "0s", "test"));
	SG_CHECK(w.dur == 0);
	SG_CHECK_RC(sg_opt_set(wide_table, 2, &w, "nosuch", "1", "env"), SG_EINVAL);
	SG_CHECK_MSG("env: unknown setting \"nosuch\"");
}

static void t_durations(void)
{
	static const struct {
		const char *s;
		int64_t want;
	} good[] = {
		{"90s", 90},
		{"15m", 900},
		{"1h30m", 5400},
		{"2d", 172800},
		{"0s", 0},
		{"1d2h3m4s", 93784},
		{"90m", 5400},
		{"007s", 7},
		{"9223372036854775807s", INT64_MAX},
		{"153722867280912930m", 153722867280912930LL * 60},
		{"106751991167300d15h", 106751991167300LL * 86400 + 15 * 3600},
		/* Go's time.Duration.String for whole seconds, as operators
		 * write istio-csr's and trust-manager's arguments. */
		{"1h0m0s", 3600},
		{"30m0s", 1800},
		{"1h30m", 5400},
		{"1h30m0s", 5400},
		{"60m", 3600},
		{"2160h0m0s", 2160 * 3600},
		{"0m0s", 0},
		{"0", 0}, /* time.ParseDuration("0"): zero in any unit */
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int64_t v = -1;
		SG_CHECK_OK(sg_opt_parse_duration(good[i].s, &v));
		if (v != good[i].want)
			fprintf(stderr, "duration %s = %lld\n", good[i].s, (long long)v);
		SG_CHECK(v == good[i].want);
	}
	static const char *const bad[] = {
		"",      "10",     "1x",   "-5m",   "+5m",     "9999999999999999h", "30m1h", "1h1h", "1h 30m",
		" 1h",   "1h ",    "h",    "1hm",   "1.5h",    "9223372036854775808s", "153722867280912931m",
		"106751991167301d", "106751991167300d16h", "99999999999999999999s", "1H", "1w", "1ms",
		/* Go forms that are not whole seconds, or not Go's at all. */
		"1h0m0.5s", "500ms", "1us", "1ns", "-1h0m0s", "00", "0x1s", "0 ", "1h0m0s0s",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t v = 12345;
		int rc = sg_opt_parse_duration(bad[i], &v);
		if (rc != SG_EINVAL)
			fprintf(stderr, "duration \"%s\" accepted as %lld\n", bad[i], (long long)v);
		SG_CHECK(rc == SG_EINVAL);
		SG_CHECK(v == 12345);
	}
}

static void t_file_basic(void)
{
	cfg c;
	memset(&c, 0, sizeof(c));
	const char *text = "# signet\n"
			   "\n"
			   "   \t \n"
			   "  # indented comment\n"
			   "  workers\t=\t 7  \n"
			   "name=abc\n"
			   "label = hello   world # not a comment \n"
			   "verbose = yes\n"
			   "mode = offline\n"
			   "max-ttl = 2d\n"
			   "key = keys/ca.pin";
	SG_CHECK_OK(file_bytes(&c, text, strlen(text), "/etc/signet"));
	SG_CHECK(c.workers == 7);
	SG_CHECK(c.name && strcmp(c.name, "abc") == 0);
	SG_CHECK(c.label && strcmp(c.label, "hello   world # not a comment") == 0);
	SG_CHECK(c.verbose && c.mode == 2 && c.ttl == 172800);
	SG_CHECK(c.key && strcmp(c.key, "/etc/signet/keys/ca.pin") == 0);
	sg_opt_free(table, NT, &c);

	const char *abs = "key = /abs/ca.pin\n";
	SG_CHECK_OK(file_bytes(&c, abs, strlen(abs), "/etc/signet"));
	SG_CHECK(strcmp(c.key, "/abs/ca.pin") == 0);
	const char *rel = "key = rel.pin\n";
	SG_CHECK_OK(file_bytes(&c, rel, strlen(rel), NULL));
	SG_CHECK(strcmp(c.key, "rel.pin") == 0);
	const char *empty_label = "label =\n";
	SG_CHECK_OK(file_bytes(&c, empty_label, strlen(empty_label), NULL));
	SG_CHECK(c.label && c.label[0] == 0);
	SG_CHECK_OK(file_bytes(&c, "", 0, NULL));
	SG_CHECK_OK(file_bytes(&c, NULL, 0, NULL));
	/* Not NUL-terminated: only len bytes are read. */
	char raw[] = {'w', 'o', 'r', 'k', 'e', 'r', 's', '=', '9', '9'};
	SG_CHECK_OK(file_bytes(&c, raw, 9, NULL));
	SG_CHECK(c.workers == 9);
	sg_opt_free(table, NT, &c);
}

static void t_file_errors(void)
{
	static const struct {
		const char *text;
		const char *msg;
	} cases[] = {
		{"workers = 2\n\nfoo = 1\n", "t.conf:3: unknown setting \"foo\""},
		{"config = other.conf\n", "t.conf:1: \"config\" can only be given on the command line"},
		{"workers 5\n", "t.conf:1: expected \"name = value\""},
		{" = 5\n", "t.conf:1: missing setting name"},
		{"workers = 65\n", "t.conf:1: workers: 65 is out of range"},
		{"max-ttl = 10\n", "t.conf:1: max-ttl: \"10\" is not a duration"},
		{"name = a\nworkers = 2\nname = b\n", "t.conf:3: \"name\" is already set on line 1"},
		{"name = a\r\n", "t.conf:1: control character 0x0d"},
		{"name = a\x01\n", "control character 0x01"},
		{"name = a\x7f\n", "control character 0x7f"},
		{"# \x1b[2J\n", "control character 0x1b"},
		{"key = \n", "empty path"},
		{"Workers = 2\n", "unknown setting \"Workers\""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cfg c;
		memset(&c, 0, sizeof(c));
		SG_CHECK_RC(file_bytes(&c, cases[i].text, strlen(cases[i].text), NULL), SG_EINVAL);
		SG_CHECK_MSG(cases[i].msg);
		sg_opt_free(table, NT, &c);
	}
	/* NUL inside the bytes. */
	cfg c;
	memset(&c, 0, sizeof(c));
	const char nul[] = "name = a\0b\nworkers = 3\n";
	SG_CHECK_RC(file_bytes(&c, nul, sizeof(nul) - 1, NULL), SG_EINVAL);
	SG_CHECK_MSG("t.conf:1: control character 0x00");
	SG_CHECK(c.workers == 0);
	/* Lines before a bad line are applied (documented). */
	const char *partial = "workers = 3\nbad\n";
	SG_CHECK_RC(file_bytes(&c, partial, strlen(partial), NULL), SG_EINVAL);
	SG_CHECK(c.workers == 3);
	/* UTF-8 and tabs are fine in values. */
	const char *utf = "label = caf\xc3\xa9\tbar\n";
	SG_CHECK_OK(file_bytes(&c, utf, strlen(utf), NULL));
	SG_CHECK(strcmp(c.label, "caf\xc3\xa9\tbar") == 0);
	sg_opt_free(table, NT, &c);
	SG_CHECK_RC(sg_opt_parse_file_bytes(table, NT, &c, "x", 1, NULL, NULL), SG_EINVAL);
	SG_CHECK_MSG("config:1:");
}

static void t_file_limits(void)
{
	cfg c;
	memset(&c, 0, sizeof(c));
	char *buf = malloc(SG_OPT_FILE_MAX + 2);
	SG_CHECK(buf != NULL);
	if (!buf)
		return;
	/* A line of exactly SG_OPT_LINE_MAX bytes (newline excluded). */
	size_t n = 0;
	n += (size_t)snprintf(buf, 16, "label = ");
	while (n < SG_OPT_LINE_MAX)
		buf[n++] = 'x';
	SG_CHECK_OK(file_bytes(&c, buf, n, NULL));
	SG_CHECK(c.label && strlen(c.label) == SG_OPT_LINE_MAX - 8);
	buf[n] = '\n';
	SG_CHECK_OK(file_bytes(&c, buf, n + 1, NULL));
	buf[n] = 'x';
	SG_CHECK_RC(file_bytes(&c, buf, n + 1, NULL), SG_EINVAL);
	SG_CHECK_MSG("t.conf:1: line longer than 4096 bytes");
	/* Same for a comment line, on line 2. */
	buf[0] = '\n';
	buf[1] = '#';
	for (size_t i = 2; i < SG_OPT_LINE_MAX + 1; i++)
		buf[i] = '#';
	SG_CHECK_OK(file_bytes(&c, buf, SG_OPT_LINE_MAX + 1, NULL));
	SG_CHECK_RC(file_bytes(&c, buf, SG_OPT_LINE_MAX + 2, NULL), SG_EINVAL);
	SG_CHECK_MSG("t.conf:2:");

	/* A file of exactly SG_OPT_FILE_MAX bytes: comment lines of 64 bytes. */
	for (size_t i = 0; i < SG_OPT_FILE_MAX; i++)
		buf[i] = (i % 64 == 63) ? '\n' : '#';
	memcpy(buf, "workers=5\n", 10);
	SG_CHECK_OK(file_bytes(&c, buf, SG_OPT_FILE_MAX, NULL));
	SG_CHECK(c.workers == 5);
	buf[SG_OPT_FILE_MAX] = '#';
	SG_CHECK_RC(file_bytes(&c, buf, SG_OPT_FILE_MAX + 1, NULL), SG_EINVAL);
	SG_CHECK_MSG("larger than");

	/* The same through sg_opt_parse and a real file (fstat check). */
	char path[512];
	snprintf(path, sizeof(path), "%s/opt-limit-%d.conf", tmpdir(), (int)getpid());
	write_file(path, buf, SG_OPT_FILE_MAX);
	sg_opt_free(table, NT, &c);
	sg_opt_result res;
	char *pos[4];
	const char *args[] = {"--config", path, NULL};
	SG_CHECK_OK(parse(&c, &res, pos, args));
	SG_CHECK(c.workers == 5);
	sg_opt_free(table, NT, &c);
	write_file(path, buf, SG_OPT_FILE_MAX + 1);
	SG_CHECK_RC(parse(&c, &res, pos, args), SG_EINVAL);
	SG_CHECK_MSG("larger than 65536 bytes");
	sg_opt_free(table, NT, &c);
	unlink(path);
	free(buf);
}

static void t_config_precedence(void)
{
	char dir[512], path[600];
	snprintf(dir, sizeof(dir), "%s/opt-%d", tmpdir(), (int)getpid());
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/signet.conf", dir);
	const char *text = "workers = 5\nname = fromfile\nkey = rel.pin\nverbose = true\n";
	write_file(path, text, strlen(text));

	cfg c;
	sg_opt_result res;
	char *pos[8];
	const char *args[] = {"--workers", "9", "p1", "--config", path, NULL};
	SG_CHECK_OK(parse(&c, &res, pos, args));
	SG_CHECK(c.workers == 9);                         /* flag beats file */
	SG_CHECK(strcmp(c.name, "fromfile") == 0);        /* file beats default */
	SG_CHECK(c.verbose);
	SG_CHECK(c.ttl == 86400);                         /* default kept */
	SG_CHECK(c.config && strcmp(c.config, path) == 0);
	char want[700];
	snprintf(want, sizeof(want), "%s/rel.pin", dir);
	SG_CHECK(c.key && strcmp(c.key, want) == 0);      /* relative to the file's folder */
	SG_CHECK(res.argc == 1 && strcmp(res.argv[0], "p1") == 0);
	sg_opt_free(table, NT, &c);

	const char *flagkey[] = {"--config", path, "--key", "cli.pin", "--verbose=false", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, flagkey));
	SG_CHECK(strcmp(c.key, "cli.pin") == 0 && !c.verbose);
	sg_opt_free(table, NT, &c);

	/* An empty path flag drops the file's value (the file itself may not
	 * hold an empty path: t_file_errors). Both flag forms. */
	const char *dropkey[] = {"--config", path, "--key=", NULL};
	SG_CHECK_OK(parse(&c, &res, pos, dropkey));
	SG_CHECK(c.key == NULL && c.workers == 5);
	sg_opt_free(table, NT, &c);
	const char *dropkey2[] = {"--key", "", "--config", path, NULL};
	SG_CHECK_OK(parse(&c, &res, pos, dropkey2));
	SG_CHECK(c.key == NULL);
	sg_opt_free(table, NT, &c);
	/* --config itself still needs a file. */
	const char *noconf[] = {"--config=", NULL};
	SG_CHECK_RC(parse(&c, &res, pos, noconf), SG_EINVAL);
	SG_CHECK_MSG("empty path");
	sg_opt_free(table, NT, &c);

	/* Errors in the file name it and the line. */
	const char *bad = "workers = 5\nnope = 1\n";
	write_file(path, bad, strlen(bad));
	SG_CHECK_RC(parse(&c, &res, pos, args), SG_EINVAL);
	char msg[700];
	snprintf(msg, sizeof(msg), "%s:2: unknown setting \"nope\"", path);
	SG_CHECK_MSG(msg);
	sg_opt_free(table, NT, &c);
	unlink(path);

	/* --config twice: read in order, the later file overriding the
	 * earlier; relative paths follow each file's own folder; flags still
	 * win over both. */
	char site[640];
	snprintf(site, sizeof(site), "%s/site.conf", dir);
	const char *first = "workers = 5\nname = fromfile\nkey = rel.pin\n";
	const char *second = "workers = 6\nkey = site.pin\n";
	write_file(path, first, strlen(first));
	write_file(site, second, strlen(second));
	const char *two[] = {"--config", path, "--verbose", "--config=" , NULL};
	char site_arg[660];
	snprintf(site_arg, sizeof(site_arg), "--config=%s", site);
	two[3] = site_arg;
	SG_CHECK_OK(parse(&c, &res, pos, two));
	SG_CHECK(c.workers == 6 && strcmp(c.name, "fromfile") == 0 && c.verbose);
	snprintf(want, sizeof(want), "%s/site.pin", dir);
	SG_CHECK(c.key && strcmp(c.key, want) == 0);
	sg_opt_free(table, NT, &c);
	const char *two_flag[] = {"--config", site, "--workers", "2", "--config", path, NULL};
	SG_CHECK_OK(parse(&c, &res, pos, two_flag));
	SG_CHECK(c.workers == 2); /* the flag, whatever the files' order */
	snprintf(want, sizeof(want), "%s/rel.pin", dir);
	SG_CHECK(c.key && strcmp(c.key, want) == 0); /* path's file came last */
	sg_opt_free(table, NT, &c);
	unlink(site);
	unlink(path);

	const char *missing[] = {"--config", path, NULL};
	SG_CHECK_RC(parse(&c, &res, pos, missing), SG_ENOTFOUND);
	sg_opt_free(table, NT, &c);
	const char *isdir[] = {"--config", dir, NULL};
	SG_CHECK_RC(parse(&c, &res, pos, isdir), SG_EINVAL);
	SG_CHECK_MSG("not a regular file");
	sg_opt_free(table, NT, &c);
	rmdir(dir);
}

static void t_strings_owned(void)
{
	cfg c;
	memset(&c, 0, sizeof(c));
	char value[] = "first";
	SG_CHECK_OK(sg_opt_set(table, NT, &c, "name", value, "test"));
	SG_CHECK(c.name != value && strcmp(c.name, "first") == 0);
	value[0] = 'X'; /* the copy is independent */
	SG_CHECK(strcmp(c.name, "first") == 0);
	SG_CHECK_OK(sg_opt_set(table, NT, &c, "name", "second", "test")); /* frees "first" */
	SG_CHECK_RC(sg_opt_set(table, NT, &c, "name", "much-too-long-for-16", "test"), SG_EINVAL);
	SG_CHECK_MSG("test: name: value longer than 16 bytes");
	SG_CHECK(strcmp(c.name, "second") == 0);
	SG_CHECK_OK(sg_opt_set(table, NT, &c, "config", "x.conf", NULL)); /* flag_only ok here */
	SG_CHECK_OK(sg_opt_set(table, NT, &c, "key", "a", NULL));
	SG_CHECK_OK(sg_opt_set(table, NT, &c, "label", "b", NULL));
	sg_opt_free(table, NT, &c);
	SG_CHECK(!c.name && !c.config && !c.key && !c.label);
}

static void t_usage(void)
{
	FILE *f = tmpfile();
	SG_CHECK(f != NULL);
	if (!f)
		return;
	sg_opt_usage(table, NT, f);
	rewind(f);
	char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	SG_CHECK(strstr(buf, "--workers N (1..64)  worker threads (default: 4)") != NULL);
	SG_CHECK(strstr(buf, "--mode ca|ra|offline") != NULL);
	SG_CHECK(strstr(buf, "--max-ttl DURATION") != NULL);
	SG_CHECK(strstr(buf, "--config PATH") != NULL);
	SG_CHECK(strstr(buf, "--verbose") != NULL);
	SG_CHECK(strstr(buf, "--help") != NULL);
}

/* log-level: a name, or a klog verbosity 0..10 as istio-csr's and
 * trust-manager's --log-level (0-1 info, 2-10 debug), the same in flags,
 * in a config file and in sg_opt_set; anything else is refused by name and
 * leaves the field as it was. */
static void t_log_level(void)
{
	typedef struct {
		int level;
	} lv;
	static const sg_opt rows[] = {
		{"log-level", SG_OPT_LOG_LEVEL, offsetof(lv, level), "info", 0, 0, NULL, "log level", false},
	};
	static const struct {
		const char *s;
		int want;
	} good[] = {
		{"debug", SG_LOG_DEBUG}, {"info", SG_LOG_INFO}, {"warn", SG_LOG_WARN}, {"error", SG_LOG_ERROR},
		{"0", SG_LOG_INFO},      {"1", SG_LOG_INFO},    {"2", SG_LOG_DEBUG},   {"3", SG_LOG_DEBUG},
		{"4", SG_LOG_DEBUG},     {"5", SG_LOG_DEBUG},   {"9", SG_LOG_DEBUG},   {"10", SG_LOG_DEBUG},
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		lv l = {.level = -1};
		SG_CHECK_OK(sg_opt_set(rows, 1, &l, "log-level", good[i].s, "t"));
		SG_CHECK(l.level == good[i].want);
		sg_log_level direct = SG_LOG_ERROR;
		SG_CHECK_OK(sg_log_level_parse(good[i].s, &direct));
		SG_CHECK((int)direct == good[i].want);
	}
	char longv[5000];
	memset(longv, '1', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	const char *bad[] = {"-1", "11", "1.5", "", " 1", "1 ", "0x1", "01", "+1", "100", "1e0", "INFO",
			     "Debug", "warning", "one", "１", "2\t", "4294967297", "99999999999999999999", longv};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lv l = {.level = 42};
		int rc = sg_opt_set(rows, 1, &l, "log-level", bad[i], "t");
		if (rc != SG_EINVAL)
			fprintf(stderr, "log level \"%.20s\" accepted as %d\n", bad[i], l.level);
		SG_CHECK(rc == SG_EINVAL);
		SG_CHECK(l.level == 42);
		SG_CHECK(strstr(sg_error_last()->msg, "t: log-level") != NULL);
		SG_CHECK(strstr(sg_error_last()->msg, "not a log level") != NULL);
		/* A hostile value is cut, never copied whole into the message. */
		SG_CHECK(strlen(sg_error_last()->msg) < 300);
		sg_log_level direct = SG_LOG_ERROR;
		SG_CHECK_RC(sg_log_level_parse(bad[i], &direct), SG_EINVAL);
		SG_CHECK(direct == SG_LOG_ERROR);
	}

	/* Flags in both GNU forms, with the default when absent. */
	lv l = {0};
	char *pos[4];
	sg_opt_result res = {.argv = pos};
	char *a1[] = {"--log-level=2"};
	SG_CHECK_OK(sg_opt_parse(rows, 1, &l, 1, a1, &res));
	SG_CHECK(l.level == SG_LOG_DEBUG);
	char *a2[] = {"--log-level", "1"};
	SG_CHECK_OK(sg_opt_parse(rows, 1, &l, 2, a2, &res));
	SG_CHECK(l.level == SG_LOG_INFO);
	char *a3[] = {"--log-level", "warn"};
	SG_CHECK_OK(sg_opt_parse(rows, 1, &l, 2, a3, &res));
	SG_CHECK(l.level == SG_LOG_WARN);
	SG_CHECK_OK(sg_opt_parse(rows, 1, &l, 0, NULL, &res));
	SG_CHECK(l.level == SG_LOG_INFO);
	char *a4[] = {"--log-level=-1"};
	SG_CHECK_RC(sg_opt_parse(rows, 1, &l, 1, a4, &res), SG_EINVAL);
	SG_CHECK_MSG("--log-level: \"-1\" is not a log level");
	char *a5[] = {"--log-level", "11"};
	SG_CHECK_RC(sg_opt_parse(rows, 1, &l, 2, a5, &res), SG_EINVAL);
	char *a6[] = {"--log-level"};
	SG_CHECK_RC(sg_opt_parse(rows, 1, &l, 1, a6, &res), SG_EINVAL);
	SG_CHECK_MSG("missing value");

	/* The config file: same values, the line named on a bad one. */
	static const char f1[] = "log-level = 3\n";
	SG_CHECK_OK(sg_opt_parse_file_bytes(rows, 1, &l, f1, sizeof(f1) - 1, "t.conf", NULL));
	SG_CHECK(l.level == SG_LOG_DEBUG);
	static const char f2[] = "log-level = error\n";
	SG_CHECK_OK(sg_opt_parse_file_bytes(rows, 1, &l, f2, sizeof(f2) - 1, "t.conf", NULL));
	SG_CHECK(l.level == SG_LOG_ERROR);
	static const char f3[] = "# level\nlog-level = 1.5\n";
	SG_CHECK_RC(sg_opt_parse_file_bytes(rows, 1, &l, f3, sizeof(f3) - 1, "t.conf", NULL), SG_EINVAL);
	SG_CHECK_MSG("t.conf:2: log-level");
	SG_CHECK(l.level == SG_LOG_ERROR);

	/* --help shows both forms. */
	char buf[512] = "";
	FILE *f = fmemopen(buf, sizeof(buf), "w");
	SG_CHECK(f != NULL);
	if (f) {
		sg_opt_usage(rows, 1, f);
		fclose(f);
		SG_CHECK(strstr(buf, "--log-level debug|info|warn|error|0..10  log level (default: info)") != NULL);
	}
}

/* Settings of another program sharing the config file: accepted there,
 * unknown as flags, absent from --help. */
static void t_foreign(void)
{
	typedef struct {
		int64_t port;
	} mine;
	static const sg_opt rows[] = {
		{"port", SG_OPT_INT, offsetof(mine, port), "1", 1, 65535, NULL, "a port", false},
		{"serving-address", SG_OPT_FOREIGN, 0, NULL, 0, 0, NULL, NULL, false},
	};
	mine m = {0};
	static const char file[] = "port = 7\nserving-address = 0.0.0.0:6443\n";
	SG_CHECK_OK(sg_opt_parse_file_bytes(rows, 2, &m, file, sizeof(file) - 1, "shared.conf", NULL));
	SG_CHECK(m.port == 7);
	char *argv[] = {"--serving-address", "x"};
	char *pos[2];
	sg_opt_result res = {.argv = pos};
	SG_CHECK_RC(sg_opt_parse(rows, 2, &m, 2, argv, &res), SG_EINVAL);
	SG_CHECK_MSG("unknown option --serving-address");
	char buf[1024] = "";
	FILE *f = fmemopen(buf, sizeof(buf), "w");
	if (f) {
		sg_opt_usage(rows, 2, f);
		fclose(f);
		SG_CHECK(strstr(buf, "--port") && !strstr(buf, "serving-address"));
	}
}

/* Comma-separated settings: spaces before an item and empty items are
 * dropped; more than max, or nothing at all, is refused by name. */
static void t_split_list(void)
{
	char a[] = "x, y,,  z,";
	const char *items[3];
	size_t n = 0;
	SG_CHECK_OK(sg_opt_split_list(a, items, 3, &n, "names"));
	SG_CHECK(n == 3 && strcmp(items[0], "x") == 0 && strcmp(items[1], "y") == 0 && strcmp(items[2], "z") == 0);
	char b[] = "a,b,c,d";
	SG_CHECK_RC(sg_opt_split_list(b, items, 3, &n, "names"), SG_EINVAL);
	SG_CHECK(strstr(sg_error_last()->msg, "more than 3 names") != NULL);
	char c[] = " , ,";
	SG_CHECK_RC(sg_opt_split_list(c, items, 3, &n, "names"), SG_EINVAL);
	SG_CHECK(strstr(sg_error_last()->msg, "no names") != NULL && n == 0);
}

/* sg_opt_program's check: refuses a config without a label. */
static int checks;
static int need_label(void *target)
{
	checks++;
	const cfg *c = target;
	return c->label ? SG_OK : sg_error_set(SG_EINVAL, "--label is required");
}

/* Runs sg_opt_program on a NULL-terminated argument list (argv[0] is the
 * program) with stdout and stderr caught into out and err. */
static bool program(cfg *c, const char **args, int (*check)(void *), int *status, char *out, char *err, size_t room)
{
	int argc = 0;
	while (args[argc])
		argc++;
	memset(c, 0, sizeof(*c));
	fflush(stdout);
	fflush(stderr);
	FILE *fo = tmpfile(), *fe = tmpfile();
	SG_CHECK(fo && fe);
	int so = dup(1), se = dup(2);
	dup2(fileno(fo), 1);
	dup2(fileno(fe), 2);
	*status = -1;
	bool go = sg_opt_program("prog", "usage: prog [options]\n\n", table, NT, c, argc, (char **)args, check, status);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	FILE *fs[2] = {fo, fe};
	char *bufs[2] = {out, err};
	for (int i = 0; i < 2; i++) {
		rewind(fs[i]);
		size_t n = fread(bufs[i], 1, room - 1, fs[i]);
		bufs[i][n] = 0;
		fclose(fs[i]);
	}
	return go;
}

/* A tool's command line in one call: go on with the settings; --help
 * prints the program's lines and the table and exits 0 without the check;
 * a bad flag, a positional argument or a failed check print "prog: why"
 * and exit 2, the settings freed. */
static void t_program(void)
{
	cfg c;
	int status;
	char out[4096], err[1024];
	checks = 0;
	const char *ok[] = {"prog", "--label", "x", "--workers=8", NULL};
	SG_CHECK(program(&c, ok, need_label, &status, out, err, sizeof(out)));
	SG_CHECK(checks == 1 && c.workers == 8 && c.label && strcmp(c.label, "x") == 0 && !out[0] && !err[0]);
	sg_opt_free(table, NT, &c);

	const char *help[] = {"prog", "--help", NULL};
	SG_CHECK(!program(&c, help, need_label, &status, out, err, sizeof(out)));
	SG_CHECK(status == 0 && checks == 1 && !err[0]);
	SG_CHECK(strncmp(out, "usage: prog [options]\n\n", 23) == 0 && strstr(out, "--workers N (1..64)") != NULL);
	SG_CHECK(c.name == NULL); /* freed */

	const char *pos[] = {"prog", "--label", "x", "extra", NULL};
	SG_CHECK(!program(&c, pos, need_label, &status, out, err, sizeof(out)));
	SG_CHECK(status == 2 && checks == 1 && !out[0] && strcmp(err, "prog: unexpected argument \"extra\"\n") == 0);
	SG_CHECK(c.name == NULL && c.label == NULL);

	const char *bad[] = {"prog", "--workers", "65", NULL};
	SG_CHECK(!program(&c, bad, need_label, &status, out, err, sizeof(out)));
	SG_CHECK(status == 2 && checks == 1 && strncmp(err, "prog: ", 6) == 0 && strstr(err, "workers") != NULL);

	const char *unchecked[] = {"prog", NULL};
	SG_CHECK(!program(&c, unchecked, need_label, &status, out, err, sizeof(out)));
	SG_CHECK(status == 2 && checks == 2 && strcmp(err, "prog: --label is required\n") == 0);
	SG_CHECK(program(&c, unchecked, NULL, &status, out, err, sizeof(out)));
	SG_CHECK(c.name && strcmp(c.name, "signet") == 0);
	sg_opt_free(table, NT, &c);
}

SG_TEST_MAIN(SG_TEST(t_defaults), SG_TEST(t_gnu_forms), SG_TEST(t_errors), SG_TEST(t_positionals), SG_TEST(t_help),
             SG_TEST(t_bounds), SG_TEST(t_durations), SG_TEST(t_file_basic), SG_TEST(t_file_errors),
             SG_TEST(t_file_limits), SG_TEST(t_config_precedence), SG_TEST(t_strings_owned), SG_TEST(t_usage),
             SG_TEST(t_log_level), SG_TEST(t_foreign), SG_TEST(t_split_list), SG_TEST(t_program))
