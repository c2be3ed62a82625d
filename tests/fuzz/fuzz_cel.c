/*
 * Fuzz target for CEL (cel/): the rule text of a CertificateRequestPolicy
 * is a CEL expression from a Kubernetes object, so the parser, checker and
 * evaluator all see untrusted bytes.
 *
 * The input's first byte picks the environment (low bit: approver-policy's,
 * checked; otherwise the plain one, unchecked, where every call reaches
 * the runtime); the rest, cut at a little more than SG_CEL_SOURCE_BYTES_MAX, is
 * the expression, compiled and evaluated twice with tighter limits than
 * the defaults (so that an input runs fast, not so that anything is
 * skipped). Oracles: compile and evaluation answer SG_OK, SG_EINVAL or
 * SG_EINTERNAL (memory only) with a message on failure; a checked result
 * type that is concrete matches the value's kind; the two evaluations give
 * identical values; a value equals itself under the strict equality and
 * renders to JSON. Nothing may crash, leak or hang.
 */
#include "sg_cel.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static sg_cel_env *envs[2];

static void init(void)
{
	if (envs[0])
		return;
	check(sg_cel_env_new_approver(&envs[0]) == 0);
	check(sg_cel_env_new(&envs[1]) == 0);
	sg_cel_env_set_unchecked(envs[1], true);
	sg_cel_env_set_extensions(envs[1], SG_CEL_EXT_TWO_VAR);
}

/* The kind a concrete checked type promises; -1 for dyn and the like. */
static int kind_of_type(const char *t)
{
	static const struct {
		const char *prefix;
		sg_cel_kind kind;
	} kinds[] = {
	    {"bool", SG_CEL_BOOL},     {"int", SG_CEL_INT},        {"uint", SG_CEL_UINT},  {"double", SG_CEL_DOUBLE},
	    {"string", SG_CEL_STRING}, {"bytes", SG_CEL_BYTES},    {"list(", SG_CEL_LIST}, {"map(", SG_CEL_MAP},
	    {"type", SG_CEL_TYPE},     {"null_type", SG_CEL_NULL},
	};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		size_t n = strlen(kinds[i].prefix);
		if (strncmp(t, kinds[i].prefix, n) == 0 && (kinds[i].prefix[n - 1] == '(' || t[n] == 0 || t[n] == '('))
			return (int)kinds[i].kind;
	}
	return -1;
}

static int eval(sg_cel_value **out, const sg_cel_program *p, const sg_cel_activation *a)
{
	sg_cel_limits limits = {.cost = 200000, .memory = 8u << 20};
	int rc = sg_cel_eval(out, p, a, &limits);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	check((rc == SG_OK) == (*out != NULL));
	if (rc < 0)
		check(sg_error_last()->msg[0] != 0);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init();
	if (size == 0)
		return 0;
	bool approver = data[0] & 1;
	const sg_cel_env *env = envs[approver ? 0 : 1];
	size_t n = size - 1;
	if (n > SG_CEL_SOURCE_BYTES_MAX + 8)
		n = SG_CEL_SOURCE_BYTES_MAX + 8;

	sg_cel_program *p = (sg_cel_program *)&p;
	int rc = sg_cel_compile(&p, env, (const char *)data + 1, n);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc < 0) {
		check(p == NULL);
		check(sg_error_last()->msg[0] != 0);
		return 0;
	}
	sg_cel_activation *a = NULL;
	check(sg_cel_activation_new(&a, env) == 0);
	if (approver) {
		static const char *const groups[] = {"system:serviceaccounts", "team-a"};
		static const size_t lens[] = {22, 6};
		check(sg_cel_bind_string(a, "self", "spiffe://cluster.local/ns/shop/sa/web", 37) == 0);
		check(sg_cel_bind_object_string(a, "cr", "namespace", "shop", 4) == 0);
		check(sg_cel_bind_object_string(a, "cr", "username", "system:serviceaccount:shop:web", 30) == 0);
		check(sg_cel_bind_object_strings(a, "cr", "groups", groups, lens, 2) == 0);
	}
	sg_cel_value *v1 = NULL, *v2 = NULL;
	int rc1 = eval(&v1, p, a);
	int rc2 = eval(&v2, p, a);
	check((rc1 == SG_OK) == (rc2 == SG_OK) || rc1 == SG_EINTERNAL || rc2 == SG_EINTERNAL);
	if (v1) {
		int want = approver ? kind_of_type(sg_cel_program_type(p)) : -1;
		check(want < 0 || (int)sg_cel_value_kind(v1) == want);
		check(sg_cel_value_identical(v1, v1));
		if (v2)
			check(sg_cel_value_identical(v1, v2));
		char *json = NULL;
		if (sg_cel_value_json(&json, v1) == 0) {
			check(json && json[0] == '{');
			free(json);
		}
	}
	sg_cel_value_free(v1);
	sg_cel_value_free(v2);
	sg_cel_activation_free(a);
	sg_cel_program_free(p);
	return 0;
}
