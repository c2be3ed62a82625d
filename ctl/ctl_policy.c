/*
 * signetctl policy check: the verdict of one CertificateRequestPolicy on
 * one CertificateRequest, offline, with the message signetd's approver
 * would write on the request's Approved or Denied condition.
 * approver-policy has no such tool; a policy author tries a policy on a
 * request before applying it, or asks why a request was denied.
 *
 * The files are manifests as kubectl applies them (YAML, read as kubectl
 * reads it through kube/yaml's adapter, or JSON), one object each. The
 * request is read and the policy compiled, selected and evaluated by the
 * approver's own code (policy/: sg_crpolicy_cr_read, sg_crpolicy_compile,
 * sg_crpolicy_selects_*, sg_crpolicy_evaluate) in the approver's order,
 * and the message is composed by the same functions, so it is the
 * approver's byte for byte. What needs the cluster is not guessed at:
 *   - RBAC: the approver evaluates a policy only for a requester who may
 *     `use` it (a SubjectAccessReview); here that is assumed;
 *   - plugins (spec.plugins) and ExternalPolicyServers
 *     (spec.externalPolicyServers): called by signetd only; a policy with
 *     either gets no verdict unless its own rules deny (the approver does
 *     not ask them then);
 *   - the namespace's labels, when the policy selects by matchLabels, come
 *     from --namespace-labels, and are required then.
 * The policy's Ready condition is its compiled readiness (the approver
 * also waits until the condition is written; a file has no status).
 *
 * Exit status (also in --help and the README): 0 Approved, 1 Denied,
 * 2 usage or input error, 3 not applicable (the policy does not select
 * the request, or is NotReady), 4 no verdict offline (plugins decide, or
 * an evaluation error, which the approver retries). Nothing here touches
 * an HSM or the network.
 */
#include "ctl.h"

#include "sg_crpolicy.h"
#include "sg_guard.h"
#include "sg_kube_yaml.h"
#include "sg_opt.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* etcd's default request limit: no larger object exists in a cluster. */
#define MANIFEST_MAX (1536u * 1024u)
#define MANIFEST_DEPTH_MAX 64
#define MANIFEST_NODES_MAX 200000 /* YAML nodes visited, aliases counted at each use */
#define LABELS_MAX 256

enum { EXIT_APPROVED = 0, EXIT_DENIED = 1, EXIT_USAGE = 2, EXIT_NOT_APPLICABLE = 3, EXIT_UNDECIDED = 4 };

typedef struct policy_args {
	char *policy, *request, *labels;
	int output; /* index into outputs */
} policy_args;

static const char *const outputs[] = {"text", "json", NULL};

static const sg_opt policy_opts[] = {
    {"policy", SG_OPT_STRING, offsetof(policy_args, policy), NULL, 1, 4096, NULL,
     "the CertificateRequestPolicy, YAML or JSON (\"-\": stdin) (required)", true},
    {"request", SG_OPT_STRING, offsetof(policy_args, request), NULL, 1, 4096, NULL,
     "the CertificateRequest, YAML or JSON (\"-\": stdin) (required)", true},
    {"namespace-labels", SG_OPT_STRING, offsetof(policy_args, labels), NULL, 0, 65536, NULL,
     "the request namespace's labels, k=v,... (\"\" for none); needed when the policy selects by matchLabels", true},
    {"output", SG_OPT_ENUM, offsetof(policy_args, output), "text", 0, 0, outputs,
     "text: the verdict, then the message; json: {\"verdict\", \"reason\", \"message\"}", true},
};
#define N_POLICY_OPTS (sizeof(policy_opts) / sizeof(policy_opts[0]))

static void usage(void)
{
	printf("usage: signetctl policy check --policy FILE --request FILE [--namespace-labels k=v,...]\n"
	       "                              [--output text|json]\n\n"
	       "The verdict of one CertificateRequestPolicy (policy.cert-manager.io/v1alpha1) on\n"
	       "one CertificateRequest (cert-manager.io/v1), offline, as signetd's approver\n"
	       "decides it, with the message it writes on the request's condition. Each file\n"
	       "holds one object, YAML or JSON, as applied with kubectl.\n\n"
	       "It assumes the requester may `use` the policy (the approver's SubjectAccessReview\n"
	       "needs the cluster) and cannot run plugins (spec.plugins) or call\n"
	       "ExternalPolicyServers (spec.externalPolicyServers): a policy with either gets\n"
	       "no verdict unless its own rules deny.\n\n"
	       "Output (text): the verdict on the first line (Approved, Denied,\n"
	       "NotApplicable (NotSelected|NotReady), Undecided (Plugins|ExternalPolicyServers|\n"
	       "EvaluationError)), then the message: for Approved and Denied the condition's\n"
	       "message byte for byte, for NotReady the policy's Ready condition message.\n\n"
	       "Exit status:\n"
	       "  0  Approved\n"
	       "  1  Denied\n"
	       "  2  usage or input error (a file that is not one object of the right kind,\n"
	       "     a request field or CSR the approver cannot read, labels needed and not given)\n"
	       "  3  not applicable: the policy does not select the request, or is NotReady\n"
	       "  4  no verdict offline: the policy's plugins or ExternalPolicyServers decide,\n"
	       "     or an evaluation error (the approver retries)\n\n");
	sg_opt_usage(policy_opts, N_POLICY_OPTS, stdout);
}

/* ---- reading the manifests ---- */

static size_t depth_of(const json_t *v, size_t limit)
{
	size_t d = 0, i;
	const char *k;
	json_t *m;
	if (limit == 0)
		return 1;
	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, k, m)
		{
			size_t c = depth_of(m, limit - 1);
			d = c > d ? c : d;
		}
		return d + 1;
	}
	if (json_is_array(v)) {
		json_array_foreach(v, i, m)
		{
			size_t c = depth_of(m, limit - 1);
			d = c > d ? c : d;
		}
		return d + 1;
	}
	return 0;
}

/* The one object of path (YAML or JSON), of kind and apiVersion. */
static int read_manifest(const char *path, const char *kind, const char *api_version, json_t **out)
{
	*out = NULL;
	uint8_t *data SG_AUTOFREE = NULL;
	size_t len = 0;
	SG_TRY(ctl_read_file(path, MANIFEST_MAX, &data, &len));
	size_t at = 0;
	while (at < len && (data[at] == ' ' || data[at] == '\t' || data[at] == '\n' || data[at] == '\r'))
		at++;
	json_t *obj = NULL;
	if (at < len && data[at] == '{') {
		/* JSON, as kubectl reads it when the text starts with '{'. */
		json_error_t e;
		obj = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &e);
		SG_ENSURE(obj, SG_EINVAL, "%s: not JSON (line %d: %s)", path, e.line, e.text);
	} else {
		sg_kube_yaml_options o = {.what = path,
		                          .max_bytes = MANIFEST_MAX,
		                          .max_depth = MANIFEST_DEPTH_MAX,
		                          .max_nodes = MANIFEST_NODES_MAX,
		                          .typed = true,
		                          .single = true};
		SG_TRY(sg_kube_yaml_to_json(&obj, data, len, &o));
	}
	json_t *own SG_CLEANUP(json_decrefp) = obj;
	SG_ENSURE(json_is_object(obj), SG_EINVAL, "%s: not an object", path);
	SG_ENSURE(depth_of(obj, MANIFEST_DEPTH_MAX + 1) <= MANIFEST_DEPTH_MAX, SG_EINVAL, "%s: nested deeper than %d",
	          path, MANIFEST_DEPTH_MAX);
	const char *k = json_string_value(json_object_get(obj, "kind"));
	const char *v = json_string_value(json_object_get(obj, "apiVersion"));
	SG_ENSURE(!k || strcmp(k, "List") != 0, SG_EINVAL, "%s: a List; give one %s per file", path, kind);
	SG_ENSURE(k && v && strcmp(k, kind) == 0 && strcmp(v, api_version) == 0, SG_EINVAL,
	          "%s: kind %s, apiVersion %s; want kind %s, apiVersion %s", path, k ? k : "(none)", v ? v : "(none)",
	          kind, api_version);
	*out = SG_MOVE(own);
	return SG_OK;
}

/* "k=v,k2=v2" (or "") into a JSON object of strings. */
static int parse_labels(const char *text, json_t **out)
{
	*out = NULL;
	json_t *o SG_CLEANUP(json_decrefp) = json_object();
	char *list SG_AUTOFREE = strdup(text);
	SG_ENSURE(o && list, SG_EINTERNAL, "out of memory");
	const char *items[LABELS_MAX];
	size_t n = 0;
	if (*list) /* "" is a namespace without labels */
		SG_TRY(sg_opt_split_list(list, items, LABELS_MAX, &n, "--namespace-labels"));
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(items[i], '=');
		SG_ENSURE(eq && eq > items[i], SG_EINVAL, "--namespace-labels: \"%s\" is not key=value", items[i]);
		size_t klen = (size_t)(eq - items[i]);
		SG_ENSURE(!json_object_getn(o, items[i], klen), SG_EINVAL, "--namespace-labels: %.*s given twice",
		          (int)klen, items[i]);
		json_t *v = json_string(eq + 1);
		SG_ENSURE(v && json_object_setn_new(o, items[i], klen, v) == 0, SG_EINVAL,
		          "--namespace-labels: \"%s\" is not UTF-8", items[i]);
	}
	*out = SG_MOVE(o);
	return SG_OK;
}

/* The names in spec.plugins: compiled as known, so that a policy is not
 * NotReady here for a plugin signetd may well have; they are not run. */
static size_t plugin_names(const json_t *policy, const char **names, size_t max)
{
	const json_t *plugins = json_object_get(json_object_get(policy, "spec"), "plugins");
	const char *k;
	json_t *v;
	size_t n = 0;
	json_object_foreach((json_t *)plugins, k, v)
	{
		(void)v;
		if (n < max)
			names[n++] = k;
	}
	return n;
}

/* ---- the verdict ---- */

typedef struct verdict {
	const char *verdict; /* Approved, Denied, NotApplicable, Undecided */
	const char *reason;
	char *message; /* owned */
	int status;
} verdict;

static int set_verdict(verdict *v, int status, const char *word, const char *reason, char *message)
{
	SG_ENSURE(message, SG_EINTERNAL, "out of memory");
	*v = (verdict){.verdict = word, .reason = reason, .message = message, .status = status};
	return SG_OK;
}

/* A new string, or NULL when out of memory. */
static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s) {
		va_start(ap, fmt);
		vsnprintf(s, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	return s;
}

static int decide(const policy_args *a, const json_t *pol, const json_t *cr, verdict *out)
{
	sg_crpolicy_cr q SG_CLEANUP(sg_crpolicy_cr_clear) = {0};
	sg_crpolicy *p = NULL;
	json_t *labels SG_CLEANUP(json_decrefp) = NULL;
	int rc = sg_crpolicy_cr_read(&q, cr);
	if (rc < 0)
		return sg_error_set(rc, "%s: %s", a->request, sg_error_last()->msg);
	SG_ENSURE(q.r.name_space && *q.r.name_space, SG_EINVAL,
	          "%s: metadata.namespace is missing (the policy's namespace selector and CEL's cr.namespace read it)",
	          a->request);
	const char *names[SG_CRPOLICY_MAX_ENTRIES];
	/* external_policy_servers: as signetd compiles it (the servers are
	 * named, not called, here) */
	sg_crpolicy_options po = {.plugins = names,
	                          .plugin_count = plugin_names(pol, names, SG_CRPOLICY_MAX_ENTRIES),
	                          .external_policy_servers = true};
	rc = sg_crpolicy_compile(&p, pol, &po);
	if (rc < 0)
		return sg_error_set(rc, "%s: %s", a->policy, sg_error_last()->msg);
	if (!sg_crpolicy_selects_issuer(p, &q.r)) {
		rc = set_verdict(out, EXIT_NOT_APPLICABLE, "NotApplicable", "NotSelected",
		                 dup_printf("spec.selector.issuerRef does not select the request's issuerRef (name "
		                            "\"%s\", kind \"%s\", group \"%s\")",
		                            q.r.issuer_name, *q.r.issuer_kind ? q.r.issuer_kind : "Issuer",
		                            *q.r.issuer_group ? q.r.issuer_group : "cert-manager.io"));
		goto done;
	}
	if (sg_crpolicy_needs_namespace_labels(p)) {
		if (!a->labels) {
			rc = sg_error_set(
			    SG_EINVAL,
			    "policy %s selects namespaces by label (spec.selector.namespace.matchLabels): "
			    "give the labels of namespace %s with --namespace-labels k=v,... (\"\" for none)",
			    sg_crpolicy_name(p), q.r.name_space);
			goto done;
		}
		if ((rc = parse_labels(a->labels, &labels)) < 0)
			goto done;
	}
	bool match = false;
	if ((rc = sg_crpolicy_selects_namespace(p, q.r.name_space, labels, &match)) < 0)
		goto done;
	if (!match) {
		rc = set_verdict(out, EXIT_NOT_APPLICABLE, "NotApplicable", "NotSelected",
		                 dup_printf("spec.selector.namespace does not select namespace %s", q.r.name_space));
		goto done;
	}
	if (!sg_crpolicy_ready(p)) {
		rc = set_verdict(out, EXIT_NOT_APPLICABLE, "NotApplicable", SG_CRPOLICY_NOT_READY_REASON,
		                 strdup(sg_crpolicy_condition_message(p)));
		goto done;
	}
	if ((rc = sg_crpolicy_cr_csr(&q, cr)) < 0) {
		rc = sg_error_set(rc, "%s: spec.request: %s (the approver leaves such a request undecided)", a->request,
		                  sg_error_last()->msg);
		goto done;
	}
	sg_crpolicy_verdict vd = {0};
	rc = sg_crpolicy_evaluate(p, &q.r, &vd);
	if (rc == SG_EINVAL) {
		rc = set_verdict(out, EXIT_UNDECIDED, "Undecided", "EvaluationError",
		                 dup_printf("evaluation error (the approver retries): %s", sg_error_last()->msg));
	} else if (rc == SG_OK && vd.denied) {
		sg_crpolicy_denial d = {sg_crpolicy_name(p), vd.message};
		char *msg = NULL;
		if ((rc = sg_crpolicy_denied_message(&d, 1, &msg)) == SG_OK)
			rc = set_verdict(out, EXIT_DENIED, "Denied", SG_CRPOLICY_CONDITION_REASON, msg);
	} else if (rc == SG_OK && sg_crpolicy_plugin_count(p) > 0) {
		rc = set_verdict(out, EXIT_UNDECIDED, "Undecided", "Plugins",
		                 dup_printf("the policy's rules pass; its plugins (spec.plugins: %s%s) decide, and "
		                            "signetctl cannot run them",
		                            sg_crpolicy_plugin_name(p, 0),
		                            sg_crpolicy_plugin_count(p) > 1 ? ", ..." : ""));
	} else if (rc == SG_OK && sg_crpolicy_external_count(p) > 0) {
		rc = set_verdict(out, EXIT_UNDECIDED, "Undecided", "ExternalPolicyServers",
		                 dup_printf("the policy's rules pass; its ExternalPolicyServers "
		                            "(spec.externalPolicyServers: %s%s) decide, and signetctl cannot call them",
		                            sg_crpolicy_external_name(p, 0),
		                            sg_crpolicy_external_count(p) > 1 ? ", ..." : ""));
	} else if (rc == SG_OK) {
		char *msg = NULL;
		if ((rc = sg_crpolicy_approved_message(sg_crpolicy_name(p), &msg)) == SG_OK)
			rc = set_verdict(out, EXIT_APPROVED, "Approved", SG_CRPOLICY_CONDITION_REASON, msg);
	}
	sg_crpolicy_verdict_clear(&vd);
done:
	sg_crpolicy_free(p);
	return rc;
}

static int print_verdict(const verdict *v, bool json)
{
	if (!json) {
		/* Approved and Denied are conditions (reason policy.cert-manager.io);
		 * the others say why there is none. */
		if (v->status == EXIT_APPROVED || v->status == EXIT_DENIED)
			printf("%s\n%s\n", v->verdict, v->message);
		else
			printf("%s (%s)\n%s\n", v->verdict, v->reason, v->message);
		return SG_OK;
	}
	json_t *o SG_CLEANUP(json_decrefp) =
	    json_pack("{s:s, s:s, s:s}", "verdict", v->verdict, "reason", v->reason, "message", v->message);
	char *text SG_AUTOFREE = o ? json_dumps(o, JSON_COMPACT) : NULL;
	SG_ENSURE(text, SG_EINTERNAL, "out of memory");
	printf("%s\n", text);
	return SG_OK;
}

static int check(const policy_args *a)
{
	json_t *pol SG_CLEANUP(json_decrefp) = NULL;
	json_t *cr SG_CLEANUP(json_decrefp) = NULL;
	SG_ENSURE(strcmp(a->policy, "-") != 0 || strcmp(a->request, "-") != 0, SG_EINVAL,
	          "--policy and --request cannot both be stdin");
	SG_TRY(read_manifest(a->policy, "CertificateRequestPolicy", "policy.cert-manager.io/v1alpha1", &pol));
	SG_TRY(read_manifest(a->request, "CertificateRequest", "cert-manager.io/v1", &cr));
	verdict v = {0};
	SG_TRY(decide(a, pol, cr, &v));
	int rc = print_verdict(&v, a->output == 1);
	free(v.message);
	return rc < 0 ? rc : v.status;
}

int ctl_policy(int argc, char **argv)
{
	if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "help") == 0) {
		if (argc < 1)
			fprintf(stderr,
			        "usage: signetctl policy check --policy FILE --request FILE (--help for more)\n");
		else
			usage();
		return argc < 1 ? EXIT_USAGE : 0;
	}
	if (strcmp(argv[0], "check") != 0) {
		fprintf(stderr, "signetctl policy: unknown command \"%s\" (check)\n", argv[0]);
		return EXIT_USAGE;
	}
	policy_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return EXIT_USAGE;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(policy_opts, N_POLICY_OPTS, &a, argc - 1, argv + 1, &res);
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(policy_opts, N_POLICY_OPTS, &a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK && (!a.policy || !a.request))
		rc = sg_error_set(SG_EINVAL, "--policy and --request are required");
	if (rc == SG_OK)
		rc = check(&a);
	if (rc < 0)
		fprintf(stderr, "signetctl policy check: %s\n", sg_error_last()->msg);
	sg_opt_free(policy_opts, N_POLICY_OPTS, &a);
	return rc < 0 ? EXIT_USAGE : rc;
}
