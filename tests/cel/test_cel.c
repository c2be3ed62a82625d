/*
 * sg_cel beyond cel-spec's conformance cases: approver-policy's
 * environment (its validation tests' tables, turned into ours, and its
 * documented examples), the ServiceAccount library, positioned compile
 * errors, the JSON renderer, concurrent evaluation of one program, and
 * hostile expressions, each of which must end in bounded time and memory
 * with a clear error.
 */
#include "sg_cel.h"
#include "sg_test.h"

#include <pthread.h>
#include <time.h>

static sg_cel_env *approver(void)
{
	sg_cel_env *env = NULL;
	SG_CHECK_OK(sg_cel_env_new_approver(&env));
	return env;
}

typedef struct cr {
	const char *name, *ns, *username;
	const char *const *groups;
	size_t ngroups;
} cr;

static sg_cel_activation *bind(const sg_cel_env *env, const char *self, const cr *r)
{
	sg_cel_activation *a = NULL;
	SG_CHECK_OK(sg_cel_activation_new(&a, env));
	SG_CHECK_OK(sg_cel_bind_string(a, "self", self, strlen(self)));
	if (r->name)
		SG_CHECK_OK(sg_cel_bind_object_string(a, "cr", "name", r->name, strlen(r->name)));
	if (r->ns)
		SG_CHECK_OK(sg_cel_bind_object_string(a, "cr", "namespace", r->ns, strlen(r->ns)));
	if (r->username)
		SG_CHECK_OK(sg_cel_bind_object_string(a, "cr", "username", r->username, strlen(r->username)));
	size_t lens[8];
	for (size_t i = 0; i < r->ngroups; i++)
		lens[i] = strlen(r->groups[i]);
	if (r->groups)
		SG_CHECK_OK(sg_cel_bind_object_strings(a, "cr", "groups", r->groups, lens, r->ngroups));
	return a;
}

/* approver-policy's compile step: compile, then require a bool result. */
static int approver_compile(sg_cel_program **out, const sg_cel_env *env, const char *expr)
{
	return sg_cel_compile_bool(out, env, expr, strlen(expr));
}

/* pkg/internal/approver/validation/validator_test.go, Test_Validator_Compile. */
static void t_approver_compile(void)
{
	static const struct {
		const char *name, *expr;
		bool err;
	} cases[] = {
	    {"no-var-use", "'www.example.com'.endsWith('.com')", false},
	    {"simple-checks", "size(cr.namespace) < 24", false},
	    {"standard-macros", "[1,2,3].all(i, i % 2 > 0)", false},
	    {"extended-string-function-library", "self.startsWith('spiffe://trust-domain.com/')", false},
	    {"doc-example", "['.svc', '.svc.cluster.local'].exists(d, self.endsWith(cr.namespace + d))", false},
	    {"err-no-expression", "", true},
	    {"err-undeclared-vars", "foo = bar", true},
	    {"err-must-return-bool", "size('foo')", true},
	    {"err-invalid-property", "size(cr.foo) < 24", true},
	    {"check-username-property", "size(cr.username) > 0", false},
	    {"check-serviceaccount-getname", "self.startsWith(serviceAccount(cr.username).getName())", false},
	    {"check-serviceaccount-getnamespace", "self.startsWith(serviceAccount(cr.username).getNamespace())", false},
	    {"check-serviceaccount-isSA", "isServiceAccount(cr.username)", false},
	    {"check-groups-property", "size(cr.groups) > 0", false},
	    /* docs/examples/all-options.yaml and the ValidationRule doc comment;
	     * its IPv4 rule writes \d inside a CEL string, which is not a CEL
	     * escape: cel-go refuses it too */
	    {"all-options-cn", "self.endsWith('.com')", false},
	    {"all-options-size", "self.size() <= 24", false},
	    {"all-options-ip", "self.matches('\\d+\\.\\d+\\.\\d+\\.\\d+')", true},
	    {"all-options-ip-raw", "self.matches(r'\\d+\\.\\d+\\.\\d+\\.\\d+')", false},
	    {"all-options-uri", "self.startsWith('spiffe://%s/ns/%s/sa/'.format(['example.org',cr.namespace]))", false},
	    {"doc-comment", "self.endsWith(cr.namespace + '.svc.cluster.local')", false},
	    /* and what cel-go's checker refuses in this environment */
	    {"undeclared-function", "nosuch(self)", true},
	    {"wrong-argument-type", "self.startsWith(1)", true},
	    {"wrong-operand-types", "self + 1 == 'a'", true},
	    {"groups-are-strings", "cr.groups.exists(g, g > 1)", true},
	    {"getName-needs-a-service-account", "self.getName() == ''", true},
	    {"no-fields-on-service-accounts", "serviceAccount(cr.username).name == ''", true},
	    {"two-variable-macros-are-off", "cr.groups.all(i, g, g != '')", true},
	    {"heterogeneous-equality-refused", "1 == 1u", true},
	    {"ternary-branches-agree", "(self == '' ? 1 : 'a') == 1", true},
	    {"null-is-not-a-string", "self == null", true},
	    {"objects-compare-with-null", "cr != null", false},
	};
	sg_cel_env *env = approver();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sg_cel_program *p = NULL;
		int rc = approver_compile(&p, env, cases[i].expr);
		if ((rc < 0) != cases[i].err)
			fprintf(stderr, "case %s: rc %d, %s\n", cases[i].name, rc, sg_error_last()->msg);
		SG_CHECK((rc < 0) == cases[i].err);
		sg_cel_program_free(p);
	}
	sg_cel_env_free(env);
}

typedef struct vcase {
	const char *name, *self;
	cr r;
	bool want;
} vcase;

static void run_validate(const char *expr, const vcase *cases, size_t n)
{
	sg_cel_env *env = approver();
	sg_cel_program *p = NULL;
	SG_CHECK_OK(approver_compile(&p, env, expr));
	for (size_t i = 0; p && i < n; i++) {
		sg_cel_activation *a = bind(env, cases[i].self, &cases[i].r);
		bool got = !cases[i].want;
		SG_CHECK_OK(sg_cel_eval_bool(&got, p, a, NULL));
		if (got != cases[i].want)
			fprintf(stderr, "case %s of %s: got %d\n", cases[i].name, expr, got);
		SG_CHECK(got == cases[i].want);
		sg_cel_activation_free(a);
	}
	sg_cel_program_free(p);
	sg_cel_env_free(env);
}

/* validator_test.go: Test_Validator_Validate, _ServiceAccount, _Groups;
 * README examples. */
static void t_approver_validate(void)
{
	static const vcase ns[] = {
	    {"correct-namespace", "spiffe://acme.com/ns/foo-ns/sa/bar", {.ns = "foo-ns"}, true},
	    {"wrong-namespace", "spiffe://acme.com/ns/foo-ns/sa/bar", {.ns = "bar-ns"}, false},
	    {"unrelated", "spiffe://example.com", {.ns = "foo-ns"}, false},
	};
	run_validate("self.startsWith('spiffe://acme.com/ns/%s/sa/'.format([cr.namespace]))", ns, 3);

	static const vcase sa[] = {
	    {"correct-namespace-and-name",
	     "spiffe://acme.com/ns/foo-ns/sa/bar",
	     {.username = "system:serviceaccount:foo-ns:bar"},
	     true},
	    {"correct-namespace-and-name2",
	     "spiffe://acme.com/ns/bar-ns/sa/foo",
	     {.username = "system:serviceaccount:bar-ns:foo"},
	     true},
	    {"correct-namespace-wrong-name",
	     "spiffe://acme.com/ns/foo-ns/sa/foo",
	     {.username = "system:serviceaccount:foo-ns:bar"},
	     false},
	    {"wrong-namespace-correct-name",
	     "spiffe://acme.com/ns/foo-ns/sa/bar",
	     {.username = "system:serviceaccount:bar-ns:bar"},
	     false},
	    {"not-serviceaccount", "spiffe://acme.com/ns/foo-ns/sa/bar", {.username = "bar"}, false},
	    {"unrelated", "spiffe://example.com", {.username = "system:serviceaccount:foo-ns:bar"}, false},
	};
	run_validate("isServiceAccount(cr.username) && self.startsWith('spiffe://acme.com/ns/%s/sa/%s'.format("
	             "[serviceAccount(cr.username).getNamespace(),serviceAccount(cr.username).getName()]))",
	             sa, 6);

	static const char *const team_a[] = {"team-a"};
	static const char *const admin_team_a[] = {"admin", "team-a"};
	static const vcase groups[] = {
	    {"one-correct-group", "tool-team-a", {.groups = team_a, .ngroups = 1}, true},
	    {"one-of-many-groups-correct", "tool-team-a", {.groups = admin_team_a, .ngroups = 2}, true},
	    {"wrong-group", "tool-team-b", {.groups = team_a, .ngroups = 1}, false},
	    {"no-groups", "tool-team-b", {.groups = team_a, .ngroups = 0}, false},
	    {"groups-unset", "tool-team-b", {0}, false},
	};
	run_validate("cr.groups.exists(g, self.matches('tool-%s'.format([g])))", groups, 5);

	static const vcase wildcard[] = {
	    {"plain", "web.example.com", {0}, true},
	    {"wildcard", "*.example.com", {0}, false},
	};
	run_validate("!self.contains('*')", wildcard, 2);

	static const vcase spiffe[] = {
	    {"own-namespace", "spiffe://cluster.local/ns/shop/sa/web", {.ns = "shop"}, true},
	    {"other-namespace", "spiffe://cluster.local/ns/bank/sa/web", {.ns = "shop"}, false},
	    {"unset-namespace", "spiffe://cluster.local/ns//sa/web", {0}, true},
	};
	run_validate("self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')", spiffe, 3);

	static const vcase dns[] = {
	    {"svc", "web.shop.svc", {.ns = "shop"}, true},
	    {"cluster-local", "web.shop.svc.cluster.local", {.ns = "shop"}, true},
	    {"other", "web.bank.svc", {.ns = "shop"}, false},
	};
	run_validate("['.svc', '.svc.cluster.local'].exists(d, self.endsWith(cr.namespace + d))", dns, 3);

	static const vcase has[] = {
	    {"set", "x", {.name = "req-1"}, true},
	    {"unset", "x", {0}, false},
	};
	run_validate("has(cr.name) && cr.name.startsWith('req-')", has, 2);
}

/* Evaluates expr in the approver environment with a fixed request; the
 * result's rc, and the value in *out (freed by the caller). */
static int approver_eval(const char *expr, sg_cel_value **out)
{
	sg_cel_env *env = approver();
	sg_cel_program *p = NULL;
	*out = NULL;
	int rc = sg_cel_compile(&p, env, expr, strlen(expr));
	if (rc == 0) {
		static const char *const groups[] = {"system:authenticated"};
		cr r = {.name = "req",
		        .ns = "shop",
		        .username = "system:serviceaccount:shop:web",
		        .groups = groups,
		        .ngroups = 1};
		sg_cel_activation *a = bind(env, "spiffe://cluster.local/ns/shop/sa/web", &r);
		rc = sg_cel_eval(out, p, a, NULL);
		sg_cel_activation_free(a);
	}
	sg_cel_program_free(p);
	sg_cel_env_free(env);
	return rc;
}

static void check_string(const char *expr, const char *want)
{
	sg_cel_value *v = NULL;
	SG_CHECK_OK(approver_eval(expr, &v));
	size_t n = 0;
	const char *s = v ? sg_cel_value_string(v, &n) : NULL;
	if (!s || strcmp(s, want) != 0)
		fprintf(stderr, "%s: got %s, want %s\n", expr, s ? s : "(none)", want);
	SG_CHECK(s && strcmp(s, want) == 0);
	sg_cel_value_free(v);
}

static void check_error(const char *expr, const char *msg)
{
	sg_cel_value *v = NULL;
	SG_CHECK_RC(approver_eval(expr, &v), SG_EINVAL);
	SG_CHECK(v == NULL);
	SG_CHECK_MSG(msg);
}

/* serviceaccount_test.go, through CEL. */
static void t_service_account(void)
{
	check_string("serviceAccount('system:serviceaccount:my-namespace:my-sa').getNamespace()", "my-namespace");
	check_string("serviceAccount('system:serviceaccount:my-namespace:my-sa').getName()", "my-sa");
	check_string("serviceAccount(cr.username).getName()", "web");
	check_error("serviceAccount('not-a-service-account').getName()",
	            "Unable to convert to serviceaccount: err: Username must be in the form "
	            "system:serviceaccount:namespace:name, username: not-a-service-account");
	check_error("serviceAccount('system:serviceaccount:a:b:c').getName()", "Username must be in the form");
	check_error("serviceAccount('system:serviceaccount:Bad:b').getName()", "Username must be in the form");
	static const struct {
		const char *expr;
		bool want;
	} is[] = {
	    {"isServiceAccount('system:serviceaccount:default:my-sa')", true},
	    {"isServiceAccount('not-valid')", false},
	    {"isServiceAccount('')", false},
	    {"isServiceAccount('system:serviceaccount::x')", false},
	    {"isServiceAccount('system:serviceaccount:ns:a.b-c')", true},
	    {"serviceAccount('system:serviceaccount:ns:sa') == serviceAccount('system:serviceaccount:ns:sa')", true},
	    {"serviceAccount('system:serviceaccount:ns:sa') == serviceAccount('system:serviceaccount:ns:other')",
	     false},
	    {"type(serviceAccount('system:serviceaccount:ns:sa')) == type(serviceAccount(cr.username))", true},
	};
	for (size_t i = 0; i < sizeof(is) / sizeof(is[0]); i++) {
		sg_cel_value *v = NULL;
		SG_CHECK_OK(approver_eval(is[i].expr, &v));
		SG_CHECK(v && sg_cel_value_kind(v) == SG_CEL_BOOL && sg_cel_value_bool(v) == is[i].want);
		sg_cel_value_free(v);
	}
}

static void t_strings_extension(void)
{
	check_string("'%s/%d/%.2f/%x/%X/%o/%b/%e'.format(['a', -3, 2.5, 255, 'hi', 8, 5, 1234.5])",
	             "a/-3/2.50/ff/6869/10/101/1.234500e+03");
	check_string("'%s'.format([[1, 'a', 2.5, {'b': true, 'a': null}]])", "[1, a, 2.5, {a: null, b: true}]");
	check_string("strings.quote('a\"b\\n')", "\"a\\\"b\\n\"");
	check_string("'  \\t trim me \\u3000'.trim()", "trim me");
	check_string("'Hello ÆX'.lowerAscii() + 'Hello ÆX'.upperAscii()", "hello ÆxHELLO ÆX");
	check_string("'a-b-c'.split('-', 2).join('+')", "a+b-c");
	check_string("'abc'.replace('', '_')", "_a_b_c_");
	check_string("'©αT'.reverse() + 'taco©αT'.substring(4, 6) + 'taco©αT'.charAt(5)", "Tα©©αα");
	check_error("'tacocat'.substring(-1)", "index out of range: -1");
	check_error("{'a': 1, 'b': 2, 'a': 3}.size() == 2", "Failed with repeated key");
	check_error("dyn({1: 'a', 1u: 'b'}).size() == 2", "Failed with repeated key");
	/* Conversions as cel-go's: Go's number syntax, its range checks. */
	check_error("double('0x10')", "type conversion error from 'string' to 'double'");
	check_error("uint(-0.5)", "range error");
	check_error("int(9223372036854775807.0)", "range error");
	check_string(
	    "string(1e6) + ' ' + string(123456.0) + ' ' + string(0.00001) + ' ' + string(uint('18446744073709551615'))",
	    "1e+06 123456 1e-05 18446744073709551615");
	/* A constant format applied to a list literal is checked when compiled
	 * (cel-go's format validator); otherwise when evaluated. */
	check_error("'%z'.format([1])", "unrecognized formatting clause \"z\"");
	check_error("'%d'.format(['x'])",
	            "1:14: error during formatting: decimal clause can only be used on ints, uints, and doubles, "
	            "was given string");
	check_error("'%s %s'.format([1])", "index 1 out of range");
	check_error("'%s'.format([1, 2])", "too many arguments supplied to string.format (expected 1, got 2)");
	check_error("'%s'.format([[1, cr]])", "string clause can only be used on");
	check_error("'%d'.format([dyn('x')])", "evaluation error: error during formatting: decimal clause");
	check_error("(self + '%s %s').format([1])", "evaluation error: index 1 out of range");
}

static void t_compile_errors(void)
{
	sg_cel_env *env = approver();
	sg_cel_program *p = NULL;
	SG_CHECK_RC(sg_cel_compile(&p, env, "self.startsWith(\n  nope)", 24), SG_EINVAL);
	SG_CHECK_MSG("ERROR: <input>:2:3: undeclared reference to 'nope' (in container '')");
	SG_CHECK_MSG(" |   nope)\n | ..^");
	SG_CHECK_RC(sg_cel_compile_bool(&p, env, "size('foo')", 11), SG_EINVAL);
	SG_CHECK_MSG("got int, wanted bool result type");
	SG_CHECK_RC(sg_cel_compile_bool(&p, env, "dyn(true)", 9), SG_EINVAL);
	SG_CHECK_MSG("got dyn, wanted bool result type");
	SG_CHECK_RC(sg_cel_compile(&p, env, "1 + 'a'", 7), SG_EINVAL);
	SG_CHECK_MSG("found no matching overload for '_+_' applied to '(int, string)'");
	SG_CHECK_RC(sg_cel_compile(&p, env, "self.contains(1)", 16), SG_EINVAL);
	SG_CHECK_MSG("found no matching overload for 'contains' applied to 'string.(int)'");
	SG_CHECK_RC(sg_cel_compile(&p, env, "'unterminated", 13), SG_EINVAL);
	SG_CHECK_MSG("1:1: Syntax error: unterminated string literal");
	SG_CHECK_RC(sg_cel_compile(&p, env, "'\\q'", 4), SG_EINVAL);
	SG_CHECK_MSG("invalid escape sequence");
	SG_CHECK_RC(sg_cel_compile(&p, env, "a.b.if", 6), SG_EINVAL);
	SG_CHECK_RC(sg_cel_compile(&p, env, "if", 2), SG_EINVAL);
	SG_CHECK_MSG("reserved identifier: if");
	SG_CHECK_RC(sg_cel_compile(&p, env, "self.matches('a(b')", 19), SG_EINVAL);
	SG_CHECK_MSG("1:14: invalid regular expression: missing ): a(b");
	SG_CHECK_RC(sg_cel_compile(&p, env, "1e400 > 0.0", 11), SG_EINVAL);
	SG_CHECK_MSG("1:1: invalid double literal");
	SG_CHECK_RC(sg_cel_compile(&p, env, "9223372036854775808", 19), SG_EINVAL);
	SG_CHECK_MSG("invalid int literal");
	SG_CHECK_RC(sg_cel_compile(&p, env, "\xff", 1), SG_EINVAL);
	SG_CHECK(p == NULL);
	/* A long rule of many string literals compiles (each literal is sized
	 * by its own text, not by the rest of the source). */
	size_t cap = 80000, k = 0;
	char *many = malloc(cap);
	SG_CHECK(many != NULL);
	if (many) {
		k += (size_t)snprintf(many, cap, "size([");
		for (int i = 0; i < 16000; i++)
			k += (size_t)snprintf(many + k, cap - k, i ? ",'a'" : "'a'");
		k += (size_t)snprintf(many + k, cap - k, "]) == 16000");
		SG_CHECK_OK(sg_cel_compile_bool(&p, env, many, k));
		bool b = false;
		if (p)
			SG_CHECK_OK(sg_cel_eval_bool(&b, p, NULL, NULL));
		SG_CHECK(b);
		sg_cel_program_free(p);
		free(many);
	}
	/* ... and so does a map literal of thousands of entries, whose
	 * duplicate-key check is not quadratic (it runs at every evaluation). */
	many = malloc(cap);
	SG_CHECK(many != NULL);
	if (many) {
		k = (size_t)snprintf(many, cap, "size({");
		for (int i = 0; i < 7000; i++)
			k += (size_t)snprintf(many + k, cap - k, "%s%d: 1", i ? "," : "", i);
		k += (size_t)snprintf(many + k, cap - k, "}) == 7000");
		SG_CHECK_OK(sg_cel_compile_bool(&p, env, many, k));
		bool b = false;
		if (p)
			SG_CHECK_OK(sg_cel_eval_bool(&b, p, NULL, NULL));
		SG_CHECK(b);
		sg_cel_program_free(p);
		free(many);
	}
	SG_CHECK_OK(sg_cel_compile(&p, env, "[1, 'a', 2u]", 12));
	SG_CHECK(p && strcmp(sg_cel_program_type(p), "list(dyn)") == 0);
	sg_cel_program_free(p);
	SG_CHECK_OK(sg_cel_compile(&p, env, "{'a': [1]}", 10));
	SG_CHECK(p && strcmp(sg_cel_program_type(p), "map(string, list(int))") == 0);
	sg_cel_program_free(p);
	sg_cel_env_free(env);
}

static void t_json(void)
{
	static const struct {
		const char *expr, *json;
	} cases[] = {
	    {"[true, -1, 2u, 1.5, 'a\"', b'\\x00\\xff', null, int]",
	     "{\"type\": \"list\", \"value\": [{\"type\": \"bool\", \"value\": true}, {\"type\": \"int\", \"value\": "
	     "-1}, "
	     "{\"type\": \"uint\", \"value\": 2}, {\"type\": \"double\", \"value\": 1.5}, {\"type\": \"string\", "
	     "\"value\": \"a\\\"\"}, {\"type\": \"bytes\", \"value\": \"AP8=\"}, {\"type\": \"null\", \"value\": "
	     "null}, {\"type\": \"type\", \"value\": \"int\"}]}"},
	    {"[double('NaN'), double('-Infinity'), 0.1, -0.0]",
	     "{\"type\": \"list\", \"value\": [{\"type\": \"double\", \"value\": \"NaN\"}, {\"type\": \"double\", "
	     "\"value\": \"-Infinity\"}, {\"type\": \"double\", \"value\": 0.1}, {\"type\": \"double\", \"value\": "
	     "-0}]}"},
	    {"{1: {'k': [1]}}",
	     "{\"type\": \"map\", \"value\": [{\"key\": {\"type\": \"int\", \"value\": 1}, \"value\": "
	     "{\"type\": \"map\", \"value\": [{\"key\": {\"type\": \"string\", \"value\": \"k\"}, "
	     "\"value\": {\"type\": \"list\", \"value\": [{\"type\": \"int\", \"value\": 1}]}}]}}]}"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sg_cel_value *v = NULL;
		SG_CHECK_OK(approver_eval(cases[i].expr, &v));
		char *j = NULL;
		if (v)
			SG_CHECK_OK(sg_cel_value_json(&j, v));
		if (!j || strcmp(j, cases[i].json) != 0)
			fprintf(stderr, "%s\n  got  %s\n  want %s\n", cases[i].expr, j ? j : "(null)", cases[i].json);
		SG_CHECK(j && strcmp(j, cases[i].json) == 0);
		free(j);
		sg_cel_value_free(v);
	}
}

/* ---- concurrency: one program, many threads ---- */

typedef struct worker {
	const sg_cel_env *env;
	const sg_cel_program *p;
	int failures;
} worker;

static void *work(void *arg)
{
	worker *w = arg;
	for (int i = 0; i < 300; i++) {
		char ns[32];
		snprintf(ns, sizeof(ns), "ns-%d", i % 7);
		sg_cel_activation *a = NULL;
		if (sg_cel_activation_new(&a, w->env) < 0 ||
		    sg_cel_bind_string(a, "self", "spiffe://cluster.local/ns/ns-3/sa/x", 35) < 0 ||
		    sg_cel_bind_object_string(a, "cr", "namespace", ns, strlen(ns)) < 0) {
			w->failures++;
		} else {
			bool got;
			if (sg_cel_eval_bool(&got, w->p, a, NULL) < 0 || got != (i % 7 == 3))
				w->failures++;
		}
		sg_cel_activation_free(a);
	}
	return NULL;
}

static void t_concurrent(void)
{
	sg_cel_env *env = approver();
	sg_cel_program *p = NULL;
	const char *e = "[1, 2, 3].map(x, x * 2).exists(y, y == 4) && self.matches('^spiffe://[a-z.]+/ns/' + "
	                "cr.namespace + '/sa/')";
	SG_CHECK_OK(sg_cel_compile(&p, env, e, strlen(e)));
	pthread_t t[4];
	worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (worker){env, p, 0};
		SG_CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		SG_CHECK(w[i].failures == 0);
	}
	sg_cel_program_free(p);
	sg_cel_env_free(env);
}

/* ---- hostile inputs ---- */

static double seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* expr must fail (to compile or to evaluate) with msg, within 10 s. */
static void hostile(const char *what, const char *expr, size_t len, const char *msg)
{
	double t0 = seconds();
	sg_cel_env *env = approver();
	sg_cel_program *p = NULL;
	int rc = sg_cel_compile(&p, env, expr, len);
	if (rc == 0) {
		sg_cel_activation *a = NULL;
		SG_CHECK_OK(sg_cel_activation_new(&a, env));
		SG_CHECK_OK(sg_cel_bind_string(a, "self", "x", 1));
		sg_cel_value *v = NULL;
		rc = sg_cel_eval(&v, p, a, NULL);
		sg_cel_value_free(v);
		sg_cel_activation_free(a);
	}
	double dt = seconds() - t0;
	if (rc == 0 || !strstr(sg_error_last()->msg, msg))
		fprintf(stderr, "%s: rc %d, message %s\n", what, rc, sg_error_last()->msg);
	SG_CHECK(rc == SG_EINVAL);
	SG_CHECK_MSG(msg);
	if (dt > 10)
		fprintf(stderr, "%s took %.1f s\n", what, dt);
	SG_CHECK(dt < 10);
	sg_cel_program_free(p);
	sg_cel_env_free(env);
}

static char *repeat3(const char *head, const char *mid, size_t n, const char *tail)
{
	size_t len = strlen(head) * n + strlen(mid) + strlen(tail) * n + 1;
	char *s = malloc(len);
	SG_CHECK(s != NULL);
	if (!s)
		return NULL;
	s[0] = 0;
	for (size_t i = 0; i < n; i++)
		strcat(s, head);
	strcat(s, mid);
	for (size_t i = 0; i < n; i++)
		strcat(s, tail);
	return s;
}

static void t_hostile(void)
{
	char *s = repeat3("(", "1", 5000, ")");
	hostile("deep parentheses", s, strlen(s), "recursion limit exceeded");
	free(s);
	s = repeat3("!", "true", 5000, "");
	hostile("deep unary", s, strlen(s), "recursion limit exceeded");
	free(s);
	s = repeat3("[", "1", 5000, "]");
	hostile("deep lists", s, strlen(s), "recursion limit exceeded");
	free(s);
	s = repeat3("1 + ", "1", 5000, "");
	hostile("long operator chain", s, strlen(s), "recursion limit exceeded");
	free(s);
	s = repeat3("", "self", 5000, ".a");
	hostile("long selection chain", s, strlen(s), "recursion limit exceeded");
	free(s);
	s = repeat3("{1: ", "1", 5000, "}");
	hostile("deep maps", s, strlen(s), "recursion limit exceeded");
	free(s);

	size_t big = SG_CEL_SOURCE_MAX + 1;
	s = malloc(big + 1);
	memset(s, ' ', big);
	s[0] = '1';
	s[big] = 0;
	hostile("huge source", s, big, "expression code point size exceeds limit: size: 100001, limit 100000");
	free(s);

	/* Nested maps: 3^12 steps. */
	s = repeat3("[1,2,3].map(x, ", "x", 12, ")");
	hostile("nested map growth", s, strlen(s), "cost limit exceeded");
	free(s);
	/* approver-policy's own cost test: eight nested all() over ten. */
	s = repeat3("[0,1,2,3,4,5,6,7,8,9].all(a, ", "self != ''", 8, ")");
	hostile("nested all", s, strlen(s), "actual cost limit exceeded");
	free(s);
	/* The spec's exponential example: each map doubles every string and
	 * the list. */
	s = repeat3("", "['foo', 'bar']", 40, ".map(x, [x + x, x + x])");
	hostile("exponential map", s, strlen(s), "evaluation error");
	free(s);
	/* Doubling strings through join. */
	const char *join = "[self].map(a, [a, a, a, a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, "
	                   "a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, "
	                   "a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, "
	                   "a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, a].join()).map(a, [a, a, a, "
	                   "a].join()).map(a, [a, a, a, a].join())";
	hostile("string doubling through join", join, strlen(join), "evaluation error");
	const char *rep = "'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', "
	                  "'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa')";
	hostile("string growth through replace", rep, strlen(rep), "evaluation error");
	/* A huge range: millions of elements made from a short string. */
	const char *range =
	    "'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', "
	    "'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').split('').all(x, x == 'a')";
	hostile("huge range", range, strlen(range), "evaluation error");
	const char *concat = "[self].map(a, a + a).map(a, a + a + a + a + a + a + a + a + a + a + a + a + a + a + a "
	                     "+ a).map(a, a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + a).map(a, a + a "
	                     "+ a + a + a + a + a + a + a + a + a + a + a + a + a + a).map(a, a + a + a + a + a + a + "
	                     "a + a + a + a + a + a + a + a + a + a).map(a, a + a + a + a + a + a + a + a + a + a + a "
	                     "+ a + a + a + a + a).map(a, a + a + a + a + a + a + a + a + a + a + a + a + a + a + a + "
	                     "a)";
	hostile("string growth through +", concat, strlen(concat), "evaluation error");
	/* Searches in a long string stay linear in it: lastIndexOf once walked
	 * from the start for every position it tried. */
	static const char *const searches[] = {
	    "'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', "
	    "'aaaaaaaaaa').lastIndexOf('b') == -1",
	    "'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', "
	    "'aaaaaaaaaa').lastIndexOf('b', 100000) == -1",
	    "'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', "
	    "'aaaaaaaaaa').indexOf('b') == -1",
	};
	for (size_t i = 0; i < sizeof(searches) / sizeof(searches[0]); i++) {
		double t0 = seconds();
		sg_cel_value *r = NULL;
		SG_CHECK_OK(approver_eval(searches[i], &r));
		SG_CHECK(r && sg_cel_value_bool(r));
		sg_cel_value_free(r);
		if (seconds() - t0 > 2)
			fprintf(stderr, "search %zu took %.1f s\n", i, seconds() - t0);
		SG_CHECK(seconds() - t0 < 2);
	}
	/* Work on long shared strings is charged by their length, wherever it
	 * happens: A is 1.77 million characters, B as long and different at
	 * its end, R a range of 14,641 steps; each case once ran for seconds
	 * to hours within the cost limit. */
#define A_                                                                                                             \
	"'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa')"                   \
	".replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa')"
#define R_ "'aaaaaaaaaa'.replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').replace('', 'aaaaaaaaaa').split('')"
#define PAIR_ "[[" A_ ", (" A_ ").substring(1) + 'b']].exists(p, "
	static const struct {
		const char *what, *expr;
	} shared[] = {
	    {"equality of shared strings", PAIR_ R_ ".map(x, p[0]).exists(y, y == p[1]))"},
	    {"ordering of long strings", PAIR_ R_ ".all(x, p[0] < p[1]))"},
	    {"startsWith a long prefix", PAIR_ R_ ".all(x, !p[0].startsWith(p[1])))"},
	    {"map lookup by long keys", PAIR_ R_ ".all(x, !(p[1] in {p[0]: 1})))"},
	    {"split by a long separator", "(" A_ ").split((" A_ ").substring(0, 800000) + 'b').size() > 0"},
	    {"map literals of long keys", PAIR_ R_ ".all(x, {p[0]: 1, p[1]: 2}.size() == 2))"},
	    {"absorbed conversion errors", "[bytes(" A_ ") + b'\\xff'].exists(b, " R_ ".exists(x, string(b) == ''))"},
	};
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
		hostile(shared[i].what, shared[i].expr, strlen(shared[i].expr), "cost limit exceeded");
#undef A_
#undef R_
#undef PAIR_
	/* Cost limit below the default, as a caller may set it. */
	sg_cel_env *env = approver();
	sg_cel_program *p = NULL;
	const char *e = "[1, 2, 3, 4, 5].all(x, x > 0)";
	SG_CHECK_OK(sg_cel_compile(&p, env, e, strlen(e)));
	sg_cel_value *v = NULL;
	sg_cel_limits tight = {.cost = 5};
	SG_CHECK_RC(sg_cel_eval(&v, p, NULL, &tight), SG_EINVAL);
	SG_CHECK_MSG("cost limit exceeded");
	sg_cel_limits small = {.memory = 1};
	SG_CHECK_RC(sg_cel_eval(&v, p, NULL, &small), SG_EINVAL);
	SG_CHECK_MSG("memory limit exceeded");
	SG_CHECK_OK(sg_cel_eval(&v, p, NULL, NULL));
	sg_cel_value_free(v);
	sg_cel_program_free(p);
	sg_cel_env_free(env);
}

/* The deepest trees the parser accepts, compiled and evaluated on a
 * thread with a 1 MiB stack (the header's promise). */
static void *deep_work(void *arg)
{
	const char *expr = arg;
	sg_cel_env *env = NULL;
	sg_cel_program *p = NULL;
	sg_cel_value *v = NULL;
	int rc = sg_cel_env_new(&env);
	if (rc == 0)
		rc = sg_cel_compile(&p, env, expr, strlen(expr));
	if (rc == 0)
		rc = sg_cel_eval(&v, p, NULL, NULL);
	sg_cel_value_free(v);
	sg_cel_program_free(p);
	sg_cel_env_free(env);
	return (void *)(intptr_t)(rc == 0 ? 1 : 2);
}

static void t_deep_stack(void)
{
	/* E0 = 1, Ek = (E(k-1) + 1 + 1 ... + 1) with 60 operators: left-deep
	 * chains, so the tree is 240 levels deep, near the parser's bound of
	 * SG_CEL_DEPTH_MAX. */
	size_t cap = 200000, k = 0;
	char *s = malloc(cap);
	SG_CHECK(s != NULL);
	if (!s)
		return;
	for (int level = 0; level < 4; level++)
		s[k++] = '(';
	s[k++] = '1';
	for (int level = 0; level < 4; level++) {
		for (int i = 0; i < 60; i++)
			k += (size_t)snprintf(s + k, cap - k, " + 1");
		s[k++] = ')';
	}
	s[k] = 0;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1u << 20);
	pthread_t t;
	void *res = NULL;
	SG_CHECK(pthread_create(&t, &attr, deep_work, s) == 0);
	pthread_join(t, &res);
	SG_CHECK(res == (void *)(intptr_t)1);
	pthread_attr_destroy(&attr);
	free(s);
}

static void t_activation_errors(void)
{
	sg_cel_env *env = approver();
	sg_cel_activation *a = NULL;
	SG_CHECK_OK(sg_cel_activation_new(&a, env));
	SG_CHECK_RC(sg_cel_bind_string(a, "nope", "x", 1), SG_EINVAL);
	SG_CHECK_RC(sg_cel_bind_int(a, "self", 1), SG_EINVAL);
	SG_CHECK_RC(sg_cel_bind_string(a, "self", "\xff", 1), SG_EINVAL);
	SG_CHECK_MSG("not valid UTF-8");
	SG_CHECK_RC(sg_cel_bind_object_string(a, "cr", "nope", "x", 1), SG_EINVAL);
	SG_CHECK_RC(sg_cel_bind_object_string(a, "cr", "groups", "x", 1), SG_EINVAL);
	/* An unbound variable is an evaluation error, absorbed by ||. */
	sg_cel_program *p = NULL;
	SG_CHECK_OK(sg_cel_compile(&p, env, "self == 'x'", 11));
	bool b;
	SG_CHECK_RC(sg_cel_eval_bool(&b, p, a, NULL), SG_EINVAL);
	SG_CHECK_MSG("no such attribute: self");
	sg_cel_program_free(p);
	SG_CHECK_OK(sg_cel_compile(&p, env, "self == 'x' || true", 19));
	SG_CHECK_OK(sg_cel_eval_bool(&b, p, a, NULL));
	SG_CHECK(b);
	sg_cel_program_free(p);
	SG_CHECK_OK(sg_cel_compile(&p, env, "size(self)", 10));
	SG_CHECK_OK(sg_cel_bind_string(a, "self", "héllo", 6));
	SG_CHECK_RC(sg_cel_eval_bool(&b, p, a, NULL), SG_EINVAL);
	SG_CHECK_MSG("not a bool");
	sg_cel_value *v = NULL;
	SG_CHECK_OK(sg_cel_eval(&v, p, a, NULL));
	SG_CHECK(v && sg_cel_value_int(v) == 5);
	sg_cel_value_free(v);
	sg_cel_program_free(p);
	sg_cel_activation_free(a);
	sg_cel_env_free(env);
}

SG_TEST_MAIN({"approver_compile", t_approver_compile}, {"approver_validate", t_approver_validate},
             {"service_account", t_service_account}, {"strings_extension", t_strings_extension},
             {"compile_errors", t_compile_errors}, {"json", t_json}, {"concurrent", t_concurrent},
             {"hostile", t_hostile}, {"deep_stack", t_deep_stack}, {"activation_errors", t_activation_errors})
