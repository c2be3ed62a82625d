/*
 * signetctl cel: evaluates one CEL expression in the environment the
 * policy approver gives a CertificateRequestPolicy's validations (self, cr
 * with name, namespace, username and groups; the strings extension and the
 * ServiceAccount library), so a policy author can try a rule before
 * applying it. The expression is type-checked but need not be a bool.
 *
 * Output is for scripts: exit 0 and one JSON object {"type": T, "value": V}
 * on stdout (sg_cel_value_json's form); exit 1 and {"error": "..."} on
 * stdout when the expression evaluates to an error (a rule's runtime
 * failure, which the approver reports as an InternalError); exit 2 with
 * the reason on stderr when it does not parse or type-check, or the
 * command line is wrong. Nothing here touches an HSM or the network.
 */
#include "ctl.h"

#include "sg_cel.h"
#include "sg_guard.h"
#include "sg_opt.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUPS_MAX 256

typedef struct cel_args {
	char *expr, *self, *cr_name, *cr_namespace, *cr_username, *cr_groups;
} cel_args;

static const sg_opt cel_opts[] = {
    {"expr", SG_OPT_STRING, offsetof(cel_args, expr), NULL, 1, SG_CEL_SOURCE_BYTES_MAX, NULL,
     "the CEL expression (required)", true},
    {"self", SG_OPT_STRING, offsetof(cel_args, self), "", 0, 65536, NULL, "the value under test, `self`", true},
    {"cr-name", SG_OPT_STRING, offsetof(cel_args, cr_name), "", 0, 253, NULL, "the request's name, `cr.name`", true},
    {"cr-namespace", SG_OPT_STRING, offsetof(cel_args, cr_namespace), "", 0, 63, NULL,
     "the request's namespace, `cr.namespace`", true},
    {"cr-username", SG_OPT_STRING, offsetof(cel_args, cr_username), "", 0, 65536, NULL,
     "who made the request, `cr.username`", true},
    {"cr-groups", SG_OPT_STRING, offsetof(cel_args, cr_groups), "", 0, 65536, NULL,
     "the requester's groups, comma-separated, `cr.groups`", true},
};
#define N_CEL_OPTS (sizeof(cel_opts) / sizeof(cel_opts[0]))

static void usage(void)
{
	printf("usage: signetctl cel --expr EXPR [--self S] [--cr-name N] [--cr-namespace NS] [--cr-username U]\n"
	       "                     [--cr-groups g1,g2]\n\n"
	       "Evaluates EXPR as the policy approver evaluates a CertificateRequestPolicy's\n"
	       "validations rule: self is a string, cr has name, namespace, username and\n"
	       "groups. Exit 0 and {\"type\": T, \"value\": V} on stdout; exit 1 and\n"
	       "{\"error\": \"...\"} when it evaluates to an error; exit 2 with the reason on\n"
	       "stderr when it does not parse or type-check.\n\n");
	sg_opt_usage(cel_opts, N_CEL_OPTS, stdout);
}

static int bind_all(sg_cel_activation *act, const cel_args *a)
{
	SG_TRY(sg_cel_bind_string(act, "self", a->self, strlen(a->self)));
	SG_TRY(sg_cel_bind_object_string(act, "cr", "name", a->cr_name, strlen(a->cr_name)));
	SG_TRY(sg_cel_bind_object_string(act, "cr", "namespace", a->cr_namespace, strlen(a->cr_namespace)));
	SG_TRY(sg_cel_bind_object_string(act, "cr", "username", a->cr_username, strlen(a->cr_username)));
	char *list SG_AUTOFREE = strdup(a->cr_groups);
	SG_ENSURE(list, SG_EINTERNAL, "out of memory");
	const char *groups[GROUPS_MAX];
	size_t lens[GROUPS_MAX], n = 0;
	if (*list) /* sg_opt_split_list refuses an empty list: no groups is fine here */
		SG_TRY(sg_opt_split_list(list, groups, GROUPS_MAX, &n, "cr-groups"));
	for (size_t i = 0; i < n; i++)
		lens[i] = strlen(groups[i]);
	return sg_cel_bind_object_strings(act, "cr", "groups", groups, lens, n);
}

/* Prints {"error": msg} on stdout. */
static void print_error(const char *msg)
{
	json_t *o = json_pack("{s:s}", "error", msg);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	printf("%s\n", text ? text : "{\"error\": \"out of memory\"}");
	free(text);
	json_decref(o);
}

static int run(const cel_args *a)
{
	sg_cel_env *env = NULL;
	sg_cel_program *prog = NULL;
	sg_cel_activation *act = NULL;
	sg_cel_value *v = NULL;
	char *json = NULL;
	int status = 2;
	if (sg_cel_env_new_approver(&env) < 0 || sg_cel_compile(&prog, env, a->expr, strlen(a->expr)) < 0) {
		fprintf(stderr, "signetctl cel: %s\n", sg_error_last()->msg);
		goto out;
	}
	if (sg_cel_activation_new(&act, env) < 0 || bind_all(act, a) < 0) {
		fprintf(stderr, "signetctl cel: %s\n", sg_error_last()->msg);
		goto out;
	}
	if (sg_cel_eval(&v, prog, act, NULL) < 0) {
		print_error(sg_error_last()->msg);
		status = 1;
		goto out;
	}
	if (sg_cel_value_json(&json, v) < 0) {
		fprintf(stderr, "signetctl cel: %s\n", sg_error_last()->msg);
		goto out;
	}
	printf("%s\n", json);
	status = 0;
out:
	free(json);
	sg_cel_value_free(v);
	sg_cel_activation_free(act);
	sg_cel_program_free(prog);
	sg_cel_env_free(env);
	return status;
}

int ctl_cel(int argc, char **argv)
{
	cel_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 2;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(cel_opts, N_CEL_OPTS, &a, argc, argv, &res);
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(cel_opts, N_CEL_OPTS, &a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK && !a.expr)
		rc = sg_error_set(SG_EINVAL, "--expr is required");
	if (rc < 0) {
		fprintf(stderr, "signetctl cel: %s\n", sg_error_last()->msg);
		sg_opt_free(cel_opts, N_CEL_OPTS, &a);
		return 2;
	}
	int status = run(&a);
	sg_opt_free(cel_opts, N_CEL_OPTS, &a);
	return status;
}
