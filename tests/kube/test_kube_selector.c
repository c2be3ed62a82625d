/*
 * Label selectors (kube/sg_kube_selector.c, contract in
 * sg_kube_selector.h) against apimachinery's labels.Parse and Matches
 * (pkg/labels/selector.go and its tests): a table of selectors it accepts,
 * a table of selectors it refuses (each with the reason our message gives
 * and the offset of the mistake), and a table of label sets matched, with
 * absent labels, values that are not integers, and values that are not
 * strings. No server.
 */
#include "sg_kube_selector.h"
#include "sg_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memset(s, c, n);
	s[n] = 0;
	return s;
}

static char *cat3(const char *a, const char *b, const char *c)
{
	size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
	char *s = malloc(n);
	if (!s)
		abort();
	snprintf(s, n, "%s%s%s", a, b, c);
	return s;
}

/* ---- selectors apimachinery accepts ---- */

typedef struct good {
	const char *sel;
	const char *string; /* what sg_kube_selector_string gives: the input trimmed */
	bool everything;
} good;

static const good goods[] = {
    {"", "", true},
    {"  ", "", true},
    {"\t\r\n ", "", true},
    {"a", "a", false},
    {"!a", "!a", false},
    {"a=b", "a=b", false},
    {"a==b", "a==b", false},
    {"a!=b", "a!=b", false},
    {"a=", "a=", false}, /* the empty value */
    {"a!=", "a!=", false},
    {"a= ,b= ", "a= ,b=", false},
    {"a in (x,y)", "a in (x,y)", false},
    {"a notin (x,)", "a notin (x,)", false},
    {"a in ()", "a in ()", false},         /* the set of the empty value */
    {"a notin ( )", "a notin ( )", false}, /* likewise */
    {"a in (,)", "a in (,)", false},
    {"a in (a,,a,,a,,a,,)", "a in (a,,a,,a,,a,,)", false},
    {"a in (x,y,notin, z,in)", "a in (x,y,notin, z,in)", false},
    {"a>1", "a>1", false},
    {"a<7", "a<7", false},
    {"a>0", "a>0", false},
    {"a>007", "a>007", false},
    {"a>9223372036854775807", "a>9223372036854775807", false},
    {"a<1000000000000000000", "a<1000000000000000000", false}, /* 19 digits */
    {"example.com/app=web", "example.com/app=web", false},
    {"a,b=c, d notin (e)", "a,b=c, d notin (e)", false},
    {"  a = b  ", "a = b", false},
    {"in=notin", "in=notin", false},
    {"notin", "notin", false},
    {"!in", "!in", false},
    {"A..b=c", "A..b=c", false}, /* a name may hold dots anywhere but at its ends */
    {"A_b.c-D=E_f.g-H", "A_b.c-D=E_f.g-H", false},
    {"0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)", "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
     false},
    {"\rx", "x", false},
    {"foo  in\t (abc)", "foo  in\t (abc)", false},
    {"x notin\n (abc)", "x notin\n (abc)", false},
    {"a in(x)", "a in(x)", false},
    {"a=b,a!=c,!z", "a=b,a!=c,!z", false},
};

static void check_good(const char *sel, const char *string, bool everything)
{
	sg_kube_selector *s = NULL;
	sg_test_checks++;
	int rc = sg_kube_selector_parse(&s, sel, NULL);
	if (rc != SG_OK || !s) {
		sg_test_failures++;
		fprintf(stderr, "%s:%d: \"%.80s\" refused: %s\n", __FILE__, __LINE__, sel ? sel : "(null)",
		        sg_error_last()->msg);
		return;
	}
	SG_CHECK(sg_kube_selector_everything(s) == everything);
	if (string && strcmp(sg_kube_selector_string(s), string) != 0) {
		sg_test_checks++;
		sg_test_failures++;
		fprintf(stderr, "%s:%d: \"%.80s\" gives string \"%.80s\", want \"%.80s\"\n", __FILE__, __LINE__, sel,
		        sg_kube_selector_string(s), string);
	}
	sg_kube_selector_free(s);
}

static void t_good(void)
{
	for (size_t i = 0; i < sizeof(goods) / sizeof(goods[0]); i++)
		check_good(goods[i].sel, goods[i].string, goods[i].everything);
	check_good(NULL, "", true);

	/* The longest name, value, prefix and key. */
	char *n63 = repeat('n', 63), *p253 = repeat('p', 253);
	char *s = cat3(n63, "=", n63);
	check_good(s, s, false);
	free(s);
	char *key = cat3(p253, "/", n63);
	check_good(key, key, false);
	char *set = cat3("(", n63, ",x)");
	s = cat3(key, " in ", set);
	check_good(s, s, false);
	free(s);
	free(set);
	free(key);

	/* SG_KUBE_SELECTOR_REQS requirements, SG_KUBE_SELECTOR_VALUES values
	 * (plus duplicates, which a set holds once). */
	char buf[SG_KUBE_SELECTOR_MAX + 1];
	size_t o = 0;
	for (int i = 0; i < SG_KUBE_SELECTOR_REQS; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%sk%d", i ? "," : "", i);
	check_good(buf, buf, false);
	o = (size_t)snprintf(buf, sizeof(buf), "a in (");
	for (int i = 0; i < SG_KUBE_SELECTOR_VALUES; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "v%d,", i);
	snprintf(buf + o, sizeof(buf) - o, "v0,v1)");
	check_good(buf, buf, false);

	/* SG_KUBE_SELECTOR_MAX bytes exactly. */
	memset(buf, ' ', SG_KUBE_SELECTOR_MAX);
	buf[SG_KUBE_SELECTOR_MAX] = 0;
	buf[SG_KUBE_SELECTOR_MAX / 2] = 'a';
	check_good(buf, "a", false);
	buf[SG_KUBE_SELECTOR_MAX / 2] = ' ';
	check_good(buf, "", true);
	free(n63);
	free(p253);
}

/* ---- selectors apimachinery refuses ---- */

typedef struct bad {
	const char *sel;
	const char *why; /* a substring of the message */
	long offset;     /* of the mistake; -1: the message gives none */
} bad;

static const bad bads[] = {
    {"=b", "expected a label key", 0},
    {"  =b", "expected a label key", 2},
    {"a=b=c", "expected ','", 3},
    {"a==b==c", "expected ','", 4},
    {"a=b c", "expected ','", 4},
    {"a in x", "expected '('", 5},
    {"a notin", "expected '('", 7},
    {"a in (x", "expected ',' or ')'", 7},
    {"a in (x,y", "expected ',' or ')'", 9},
    {"a in (x y)", "expected ',' or ')'", 8},
    {"a in ((x))", "expected a value", 6},
    {"a in (=)", "expected a value", 6},
    {"a=(b)", "expected a value", 2},
    {"!a=b", "'!key' takes no operator", 2},
    {"!a in (b)", "'!key' takes no operator", 3},
    {"a>b", "need an integer", 2},
    {"a>", "need an integer", 2},
    {"a<,b", "need an integer", 2},
    {"a>1.5", "need an integer", 2},
    {"a>9223372036854775808", "need an integer", 2}, /* beyond int64 */
    {"a<-5", "valid label value (no sign)", 2},      /* NewRequirement checks it as a value */
    {"a>+5", "valid label value (no sign)", 2},
    {"a b", "expected an operator", 2},
    {"a!", "expected an operator", 1},
    {"a (", "expected an operator", 2},
    {"-a=b", "invalid label key", 0},
    {"a-=b", "invalid label key", 0},
    {"a..b/c=d", "invalid label key", 0}, /* the prefix is a DNS subdomain */
    {"Example.com/a", "invalid label key", 0},
    {"a/b/c", "invalid label key", 0},
    {"/a", "invalid label key", 0},
    {"a/", "invalid label key", 0},
    {"a,b=c,d e", "expected an operator", 8},
    {"a=-b", "invalid label value", 2},
    {"a=b.", "invalid label value", 2},
    {"x=a||y=b", "invalid label value", 2},
    {"a in (x,-y)", "invalid label value", 8},
    {"a,", "expected a label key", 2},
    {",a", "expected a label key", 0},
    {"a,,b", "expected a label key", 2},
    {"a in (x),", "expected a label key", 9},
    {"(", "expected a label key", 0},
    {"!", "expected a label key", 1},
    {"a=caf\xc3\xa9", "not printable ASCII", 5},
    {"\xff", "not printable ASCII", 0},
    {"a=b\x01", "not printable ASCII", 3},
    {"a\v=b", "not printable ASCII", 1},
    {"a in (x\x7f)", "not printable ASCII", 7},
};

/* The offset a message gives, or -1. */
static long offset_of(const char *msg)
{
	const char *at = strstr(msg, " at offset ");
	if (!at)
		return -1;
	char *end;
	long v = strtol(at + strlen(" at offset "), &end, 10);
	return *end == 0 ? v : -2;
}

static void check_bad(const char *sel, const char *why, long offset, int line)
{
	sg_kube_selector *s = (sg_kube_selector *)&s; /* must be set to NULL */
	sg_test_checks++;
	int rc = sg_kube_selector_parse(&s, sel, NULL);
	const char *msg = sg_error_last()->msg;
	if (rc != SG_EINVAL || s || !strstr(msg, why) || offset_of(msg) != offset) {
		sg_test_failures++;
		fprintf(stderr, "%s:%d: \"%.60s\": rc %d, message \"%s\"; want \"%s\" at offset %ld\n", __FILE__, line,
		        sel, rc, msg, why, offset);
	}
	if (rc == SG_OK)
		sg_kube_selector_free(s);
	/* The message quotes the selector with anything unprintable escaped. */
	for (const char *p = msg; *p; p++)
		SG_CHECK(*p >= 0x20 && *p < 0x7f);
}

static void t_bad(void)
{
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++)
		check_bad(bads[i].sel, bads[i].why, bads[i].offset, __LINE__);

	/* Too long: a 64-byte name, a 254-byte prefix, a 64-byte value, an
	 * identifier longer than any valid key. */
	char *n64 = repeat('n', 64), *p254 = repeat('p', 254), *id400 = repeat('i', 400);
	check_bad(n64, "invalid label key", 0, __LINE__);
	char *s = cat3(p254, "/", "a");
	check_bad(s, "invalid label key", 0, __LINE__);
	free(s);
	s = cat3("a=", n64, "");
	check_bad(s, "invalid label value", 2, __LINE__);
	free(s);
	s = cat3("a,", id400, "=b");
	check_bad(s, "longer than any valid label key", 2, __LINE__);
	free(s);
	free(n64);
	free(p254);
	free(id400);

	/* One requirement too many: the mistake is where it begins. */
	char buf[SG_KUBE_SELECTOR_MAX + 2];
	size_t o = 0, last = 0;
	for (int i = 0; i <= SG_KUBE_SELECTOR_REQS; i++) {
		last = o + (i ? 1 : 0);
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%sk%d", i ? "," : "", i);
	}
	check_bad(buf, "more than 64 requirements", (long)last, __LINE__);

	/* One value too many (distinct ones: duplicates do not count). */
	o = (size_t)snprintf(buf, sizeof(buf), "a in (");
	for (int i = 0; i <= SG_KUBE_SELECTOR_VALUES; i++) {
		last = o;
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "v%d,", i);
	}
	buf[o - 1] = ')';
	check_bad(buf, "more than 256 values in a set", (long)last, __LINE__);

	/* Longer than SG_KUBE_SELECTOR_MAX: refused before anything else. */
	memset(buf, ' ', SG_KUBE_SELECTOR_MAX + 1);
	buf[0] = 'a';
	buf[SG_KUBE_SELECTOR_MAX + 1] = 0;
	check_bad(buf, "longer than 4096 bytes", -1, __LINE__);

	/* The message names the selector as the caller does. */
	sg_kube_selector *sel = NULL;
	SG_CHECK_RC(sg_kube_selector_parse(&sel, "=b", "namespace selector"), SG_EINVAL);
	SG_CHECK_MSG("namespace selector \"=b\": expected a label key at offset 0");
	SG_CHECK_RC(sg_kube_selector_parse(&sel, "a=b\x01", NULL), SG_EINVAL);
	SG_CHECK_MSG("label selector \"a=b\\x01\"");
	SG_CHECK(sel == NULL);
	SG_CHECK_RC(sg_kube_selector_parse(&sel, buf, "trust bundle selector"), SG_EINVAL);
	SG_CHECK_MSG("trust bundle selector longer than 4096 bytes");
	/* A long selector is cut in the message, which keeps the reason. */
	s = repeat('a', 300);
	s[299] = '-';
	SG_CHECK_RC(sg_kube_selector_parse(&sel, s, NULL), SG_EINVAL);
	SG_CHECK_MSG("...\": invalid label key at offset 0");
	free(s);
}

/* ---- matching ---- */

typedef struct match {
	const char *sel;
	const char *labels; /* JSON; NULL: no labels object at all */
	bool want;
} match;

static const match matches[] = {
    {"", "{}", true},
    {"", NULL, true},
    {"", "{\"a\":\"b\"}", true},
    {"a", "{\"a\":\"x\"}", true},
    {"a", "{\"a\":\"\"}", true},
    {"a", "{\"b\":\"x\"}", false},
    {"a", NULL, false},
    {"a", "[\"a\"]", false}, /* not an object: no labels */
    {"!a", "{}", true},
    {"!a", NULL, true},
    {"!a", "{\"a\":\"x\"}", false},
    {"!a", "{\"a\":\"\"}", false},
    {"a=b", "{\"a\":\"b\"}", true},
    {"a==b", "{\"a\":\"b\"}", true},
    {"a=b", "{\"a\":\"c\"}", false},
    {"a=b", "{\"a\":\"B\"}", false},
    {"a=b", "{}", false},
    {"a=", "{\"a\":\"\"}", true},
    {"a=", "{\"a\":\"x\"}", false},
    {"a=", "{}", false},
    {"a!=b", "{\"a\":\"c\"}", true},
    {"a!=b", "{}", true}, /* absent */
    {"a!=b", "{\"a\":\"b\"}", false},
    {"a!=", "{\"a\":\"\"}", false},
    {"a!=", "{}", true},
    {"a in (x,y)", "{\"a\":\"y\"}", true},
    {"a in (x,y)", "{\"a\":\"z\"}", false},
    {"a in (x,y)", "{}", false},
    {"a in ()", "{\"a\":\"\"}", true},
    {"a in ()", "{\"a\":\"x\"}", false},
    {"a in (x,)", "{\"a\":\"\"}", true},
    {"a notin (x,y)", "{}", true}, /* absent */
    {"a notin (x,y)", "{\"a\":\"z\"}", true},
    {"a notin (x,y)", "{\"a\":\"x\"}", false},
    {"a notin (x,)", "{\"a\":\"\"}", false},
    {"a notin ()", "{\"a\":\"x\"}", true},
    {"a>1", "{\"a\":\"2\"}", true},
    {"a>1", "{\"a\":\"1\"}", false},
    {"a>1", "{\"a\":\"0\"}", false},
    {"a>1", "{}", false},
    {"a>1", "{\"a\":\"abc\"}", false}, /* not an integer: never matches */
    {"a>1", "{\"a\":\"v2\"}", false},
    {"a>1", "{\"a\":\"1.5\"}", false},
    {"a>1", "{\"a\":\"\"}", false},
    {"a>1", "{\"a\":\" 2\"}", false},
    {"a>1", "{\"a\":\"007\"}", true},
    {"a>1", "{\"a\":\"+3\"}", true}, /* ParseInt reads a sign */
    {"a>1", "{\"a\":\"9223372036854775807\"}", true},
    {"a>1", "{\"a\":\"9223372036854775808\"}", false}, /* out of int64 */
    {"a>1", "{\"a\":\"1000000000000000000\"}", true},  /* 19 digits */
    {"a>9223372036854775806", "{\"a\":\"9223372036854775807\"}", true},
    {"a<7", "{\"a\":\"6\"}", true},
    {"a<7", "{\"a\":\"7\"}", false},
    {"a<7", "{\"a\":\"-5\"}", true},
    {"a<7", "{\"a\":\"-9223372036854775808\"}", true},
    {"a<7", "{\"a\":\"-9223372036854775809\"}", false},
    {"a<7", "{\"a\":\"-\"}", false},
    {"a<7", "{}", false},
    {"a<0", "{\"a\":\"-0\"}", false},
    /* Values that are not strings are no labels (metadata.labels holds
     * only strings; anything else is treated as absent). */
    {"a", "{\"a\":1}", false},
    {"!a", "{\"a\":1}", true},
    {"a=1", "{\"a\":1}", false},
    {"a!=b", "{\"a\":true}", true},
    {"a notin (x)", "{\"a\":null}", true},
    {"a in (x)", "{\"a\":[\"x\"]}", false},
    {"a>0", "{\"a\":5}", false},
    {"a<9", "{\"a\":5}", false},
    /* Several requirements: all must hold. */
    {"a=b,c in (d),!e", "{\"a\":\"b\",\"c\":\"d\"}", true},
    {"a=b,c in (d),!e", "{\"a\":\"b\",\"c\":\"d\",\"e\":\"\"}", false},
    {"a=b,c in (d),!e", "{\"a\":\"b\"}", false},
    {"a=b,a!=c", "{\"a\":\"b\"}", true},
    {"a=b,a=c", "{\"a\":\"b\"}", false},
    {"example.com/app=web", "{\"example.com/app\":\"web\"}", true},
    {"example.com/app=web", "{\"app\":\"web\"}", false},
    {"in=notin", "{\"in\":\"notin\"}", true},
    {"a in (in,notin)", "{\"a\":\"in\"}", true},
    {"x,y in (a)", "{\"x\":\"1\",\"y\":\"a\"}", true},
    {"x,y in (a)", "{\"y\":\"a\"}", false},
};

static void t_matches(void)
{
	for (size_t i = 0; i < sizeof(matches) / sizeof(matches[0]); i++) {
		const match *m = &matches[i];
		sg_kube_selector *s = NULL;
		SG_CHECK_OK(sg_kube_selector_parse(&s, m->sel, NULL));
		json_t *labels = NULL;
		if (m->labels) {
			labels = json_loads(m->labels, JSON_DECODE_ANY, NULL);
			SG_CHECK(labels != NULL);
		}
		if (s) {
			bool got = sg_kube_selector_matches(s, labels);
			sg_test_checks++;
			if (got != m->want) {
				sg_test_failures++;
				fprintf(stderr, "%s:%d: \"%s\" on %s gives %d, want %d\n", __FILE__, __LINE__, m->sel,
				        m->labels ? m->labels : "NULL", got, m->want);
			}
		}
		json_decref(labels);
		sg_kube_selector_free(s);
	}
	sg_kube_selector_free(NULL);
}

/* A parsed selector is immutable: threads match with it at once. */
typedef struct matcher {
	const sg_kube_selector *sel;
	json_t *yes, *no;
	int wrong;
} matcher;

static void *match_many(void *arg)
{
	matcher *m = arg;
	for (int i = 0; i < 20000; i++)
		m->wrong += !sg_kube_selector_matches(m->sel, m->yes) + sg_kube_selector_matches(m->sel, m->no);
	return NULL;
}

static void t_threads(void)
{
	sg_kube_selector *s = NULL;
	SG_CHECK_OK(sg_kube_selector_parse(&s, "app in (web,api), tier!=db, !legacy, rev>3", NULL));
	if (!s)
		return;
	json_t *yes = json_pack("{s:s, s:s, s:s}", "app", "api", "tier", "front", "rev", "10");
	json_t *no = json_pack("{s:s, s:s, s:s}", "app", "api", "legacy", "", "rev", "10");
	enum { NTHREADS = 4 };
	matcher m[NTHREADS];
	pthread_t th[NTHREADS];
	int started = 0, wrong = 0;
	for (; started < NTHREADS; started++) {
		m[started] = (matcher){s, yes, no, 0};
		if (pthread_create(&th[started], NULL, match_many, &m[started]) != 0)
			break;
	}
	SG_CHECK(started == NTHREADS);
	while (started-- > 0) {
		pthread_join(th[started], NULL);
		wrong += m[started].wrong;
	}
	SG_CHECK(wrong == 0);
	json_decref(yes);
	json_decref(no);
	sg_kube_selector_free(s);
}

SG_TEST_MAIN(SG_TEST(t_good), SG_TEST(t_bad), SG_TEST(t_matches), SG_TEST(t_threads))
