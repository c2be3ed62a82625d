/*
 * YAML into jansson (kube/yaml/sg_kube_yaml.c, contract in sg_kube_yaml.h):
 * plain scalars resolved as kubectl's parser (go-yaml v2's resolve())
 * resolves them, a table of values and the JSON each must become; the
 * untyped reading kubeconfig uses; and what is refused, with the reason
 * each message gives: tags, merge keys, numbers JSON cannot hold, a second
 * document, nesting and alias bombs, all in bounded time. No server.
 */
#include "sg_kube_yaml.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const sg_kube_yaml_options typed = {
    .what = "manifest", .max_bytes = 1u << 20, .max_depth = 64, .max_nodes = 200000, .typed = true, .single = true};

/* "v: <yaml>" read typed; its value dumped as compact JSON. */
static char *value_of(const char *yaml, const sg_kube_yaml_options *o)
{
	char doc[512];
	snprintf(doc, sizeof(doc), "v: %s\n", yaml);
	json_t *j = NULL;
	if (sg_kube_yaml_to_json(&j, doc, strlen(doc), o) != SG_OK)
		return NULL;
	char *s = json_dumps(json_object_get(j, "v"), JSON_COMPACT | JSON_ENCODE_ANY);
	json_decref(j);
	return s;
}

static void t_typed_scalars(void)
{
	static const struct {
		const char *yaml, *json;
	} cases[] = {
	    {"true", "true"},
	    {"True", "true"},
	    {"yes", "true"},
	    {"On", "true"},
	    {"y", "true"},
	    {"false", "false"},
	    {"NO", "false"},
	    {"off", "false"},
	    {"~", "null"},
	    {"null", "null"},
	    {"", "null"},
	    {"0", "0"},
	    {"2048", "2048"},
	    {"-17", "-17"},
	    {"+5", "5"},
	    {"0x1F", "31"},
	    {"0o17", "15"},
	    {"017", "15"},
	    {"0b101", "5"},
	    {"1_000", "1000"},
	    {"1.5", "1.5"},
	    {"1e3", "1000"},
	    {".5", "0.5"},
	    {"08", "8"},
	    {"9223372036854775807", "9223372036854775807"},
	    {"-9223372036854775808", "-9223372036854775808"},
	    {"\"true\"", "\"true\""},
	    {"'2048'", "\"2048\""},
	    {"2048h", "\"2048h\""},
	    {"server auth", "\"server auth\""},
	    {"0x", "\"0x\""},
	    {"1.2.3", "\"1.2.3\""},
	    {"1e999", "\"1e999\""},
	    {"-.NaN", "\"-.NaN\""},
	    {"-x", "\"-x\""},
	    {"[a, 1, true]", "[\"a\",1,true]"},
	    {"{k: 1}", "{\"k\":1}"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = value_of(cases[i].yaml, &typed);
		if (!got || strcmp(got, cases[i].json) != 0)
			fprintf(stderr, "  %s: got %s, want %s\n", cases[i].yaml, got ? got : sg_error_last()->msg,
			        cases[i].json);
		SG_CHECK(got && strcmp(got, cases[i].json) == 0);
		free(got);
	}
	/* Keys stay text, whatever they look like. */
	json_t *j = NULL;
	SG_CHECK_OK(sg_kube_yaml_to_json(&j, "1: a\ntrue: b\n", 13, &typed));
	SG_CHECK(json_object_get(j, "1") && json_object_get(j, "true"));
	json_decref(j);
}

static void t_untyped(void)
{
	sg_kube_yaml_options o = typed;
	o.typed = false;
	o.single = false;
	char *got = value_of("[true, 2048, ~, '1']", &o);
	SG_CHECK(got && strcmp(got, "[\"true\",\"2048\",\"~\",\"1\"]") == 0);
	free(got);
	/* Untyped readers take the first document only, as libyaml's loader did. */
	json_t *j = NULL;
	SG_CHECK_OK(sg_kube_yaml_to_json(&j, "a: 1\n---\nb: 2\n", 14, &o));
	SG_CHECK(json_object_size(j) == 1);
	json_decref(j);
}

static void t_refused(void)
{
	static const struct {
		const char *yaml, *msg;
	} cases[] = {
	    {"rule: !self.contains('*')\n", "manifest: line 1: the tag !self.contains('*') is not supported"},
	    {"v: !!int 5\n", "the tag tag:yaml.org,2002:int is not supported"},
	    {"a: &x {b: 1}\nc:\n  <<: *x\n", "line 3: merge keys (<<) are not supported"},
	    {"a: .inf\n", "line 1: .inf is not a number JSON can hold"},
	    {"a: +.INF\n", "line 1: +.INF is not a number JSON can hold"},
	    {"a: .NaN\n", "line 1: .NaN is not a number JSON can hold"},
	    {"a: 9223372036854775808\n", "the integer 9223372036854775808 is out of range"},
	    {"a: 1\na: 2\n", "line 2: duplicate key \"a\""},
	    {"a: *nope\n", "the alias *nope names no anchor before it"},
	    {"[a]: 1\n", "duplicate or non-scalar key"},
	    {"a: 1\n---\nb: 2\n", "a second document at line 3 (one object per file)"},
	    {"- a\n", "the document is not a mapping"},
	    {"", "manifest: empty document"},
	    {"a: [unclosed\n", "YAML error at line"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *j = NULL;
		SG_CHECK_RC(sg_kube_yaml_to_json(&j, cases[i].yaml, strlen(cases[i].yaml), &typed), SG_EINVAL);
		SG_CHECK(j == NULL);
		if (!strstr(sg_error_last()->msg, cases[i].msg))
			fprintf(stderr, "  %s: got %s\n", cases[i].yaml, sg_error_last()->msg);
		SG_CHECK_MSG(cases[i].msg);
	}
	/* A trailing "---" is an empty document, not a second object. */
	json_t *j = NULL;
	SG_CHECK_OK(sg_kube_yaml_to_json(&j, "a: 1\n---\n", 9, &typed));
	json_decref(j);
}

/* Nesting and aliases end at their bounds, and fast: libyaml's loader
 * took minutes over 200,000 nested '[' (its scanner is quadratic in open
 * flow collections); the event parser stops at max_depth. */
static void t_bounds(void)
{
	size_t n = 300000;
	char *deep = malloc(2 * n + 8);
	SG_CHECK(deep != NULL);
	if (!deep)
		return;
	memcpy(deep, "a: ", 3);
	memset(deep + 3, '[', n);
	memset(deep + 3 + n, ']', n);
	deep[3 + 2 * n] = 0;
	time_t t0 = time(NULL);
	json_t *j = NULL;
	SG_CHECK_RC(sg_kube_yaml_to_json(&j, deep, strlen(deep), &typed), SG_EINVAL);
	SG_CHECK_MSG("line 1: nested deeper than 64");
	SG_CHECK(time(NULL) - t0 < 10);
	free(deep);

	const char *bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	                   "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
	                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
	                   "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
	                   "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
	                   "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
	SG_CHECK_RC(sg_kube_yaml_to_json(&j, bomb, strlen(bomb), &typed), SG_EINVAL);
	SG_CHECK_MSG("document too large or too deep");
	/* Within the budget an alias is its anchor's tree again. */
	const char *small = "a: &a {k: [1, 2]}\nb: *a\n";
	SG_CHECK_OK(sg_kube_yaml_to_json(&j, small, strlen(small), &typed));
	SG_CHECK(json_equal(json_object_get(j, "a"), json_object_get(j, "b")));
	json_decref(j);

	sg_kube_yaml_options o = typed;
	o.max_bytes = 8;
	SG_CHECK_RC(sg_kube_yaml_to_json(&j, "a: 123456\n", 10, &o), SG_EINVAL);
	SG_CHECK_MSG("manifest: larger than 8 bytes");
}

SG_TEST_MAIN(SG_TEST(t_typed_scalars), SG_TEST(t_untyped), SG_TEST(t_refused), SG_TEST(t_bounds))
