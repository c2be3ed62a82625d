/*
 * The project's Kubernetes manifests (packaging/kubernetes/) and the
 * CertificateRequest fixture (fixtures/certificaterequests.crd.yaml)
 * against a real kube-apiserver (1.20): they are accepted, and they mean
 * what the controllers assume.
 *
 *   CRDs: Established and served; names, scope and printer columns; the
 *     two issuer kinds share one schema; an issuer with an empty or no
 *     spec reads back with the defaults, and those are the defaults
 *     signetd's own spec parser assumes; what the schema forbids (a caName
 *     that is no DNS label, wrong types, a malformed condition) is refused,
 *     unknown fields are pruned, status is written through /status only,
 *     by merge patch and by server-side apply as the issuers controller
 *     writes it.
 *   CertificateRequestPolicy CRD (policy-crds.yaml, approver-policy's
 *     API): Established under approver-policy's names; its key usages are
 *     cert-manager's; approver-policy's documented example with every
 *     field reads back unchanged (nothing pruned); what the schema
 *     refuses (wrong types, bad enums, no selector, sizes past 8192,
 *     duplicate rules or OIDs) is refused with 422, and what it leaves to
 *     the controller (relations, CEL, plugins) is accepted; status through
 *     /status only.
 *   RBAC: signet's ServiceAccount may do what each module's header says it
 *     needs, and not more where it matters (no Secrets outside
 *     istio-system, no signing for other signers, no approving but for
 *     signet's and cert-manager's own issuers, which the policy approver
 *     decides, no "use" of policies); cert-manager's ServiceAccount may
 *     approve for signet's issuers; the README's "use" ClusterRole works
 *     as approver-policy's review asks (in the request's namespace). Asked
 *     as the API server and cert-manager ask: SubjectAccessReviews, and for
 *     signer names first the name, then "<domain>/" followed by a star.
 *   CertificateRequest fixture: a request with a base64 CSR is accepted
 *     (bad base64, unknown usages and a missing issuer name are not), its
 *     status takes a certificate through /status, and a server-side apply
 *     of a condition with observedGeneration is refused as it is by
 *     cert-manager's CRD (why sg_cmissuer sends none).
 *
 * The API server may be shared with other tests (SIGNET_KUBE_ENV): the
 * objects made here have names of their own and are deleted before they
 * are made again. RBAC decisions follow new bindings once the API server's
 * informers have them, so the first allowed answer is waited for; the
 * answers after it are exact.
 */
#include "sg_signetissuer.h"

#include "sg_log.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include <stdio.h>
#include <string.h>

#ifndef SOURCE_DIR
#error "SOURCE_DIR (the project's top folder) must be defined"
#endif

#define CRDS SOURCE_DIR "/packaging/kubernetes/base/crds.yaml"
#define POLICY_CRDS SOURCE_DIR "/packaging/kubernetes/base/policy-crds.yaml"
#define RBAC SOURCE_DIR "/packaging/kubernetes/base/rbac.yaml"
#define CR_CRD TESTDATA "/fixtures/certificaterequests.crd.yaml"
#define NS "manifests"
#define SIGNET_USER "system:serviceaccount:signet-system:signet"
#define SIGNET_SA_NS "signet-system"
#define CM_USER "system:serviceaccount:cert-manager:cert-manager"
#define CM_SA_NS "cert-manager"
#define RBAC_WAIT_MS 15000

static sg_kube *k;

/* ---- fixtures ---- */

static sg_kube_ref crd_ref(const char *name)
{
	return (sg_kube_ref){.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions",
	                     .name = name};
}

static sg_kube_ref issuer_ref(const char *ns, const char *name)
{
	return (sg_kube_ref){.group = SG_SIGNETISSUER_GROUP, .version = SG_SIGNETISSUER_VERSION,
	                     .resource = ns ? SG_SIGNETISSUER_RESOURCE : SG_SIGNETISSUER_CLUSTER_RESOURCE, .ns = ns,
	                     .name = name};
}

static sg_kube_ref policy_ref(const char *name)
{
	return (sg_kube_ref){.group = "policy.cert-manager.io",
	                     .version = "v1alpha1",
	                     .resource = "certificaterequestpolicies",
	                     .name = name};
}

static sg_kube_ref cr_ref(const char *name)
{
	return (sg_kube_ref){.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests", .ns = NS,
	                     .name = name};
}

static void ns_create(const char *name)
{
	SG_CHECK_OK(kube_fx_ensure(k, KUBE_FX_CORE("namespaces", NULL, NULL), kube_fx_namespace(name, NULL, NULL)));
}

/* Creates obj at ref's collection after deleting what an earlier run left
 * under ref's name; returns the create's result, *out the object. */
static int recreate(sg_kube_ref ref, const json_t *obj, json_t **out)
{
	if (kube_fx_delete(k, ref) != 0)
		SG_CHECK(sg_kube_last_status()->code == 404);
	ref.name = NULL;
	return sg_kube_create(k, &ref, obj, out);
}

/* An issuer (SignetIssuer in ns, or SignetClusterIssuer when ns is NULL)
 * with spec given as JSON text (NULL: no spec at all); caller decrefs. */
static json_t *issuer(const char *ns, const char *name, const char *spec)
{
	json_t *o = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", SG_SIGNETISSUER_GROUP "/" SG_SIGNETISSUER_VERSION,
	                      "kind", ns ? SG_SIGNETISSUER_KIND : SG_SIGNETISSUER_CLUSTER_KIND, "metadata", "name", name);
	if (ns)
		json_object_set_new(json_object_get(o, "metadata"), "namespace", json_string(ns));
	if (spec)
		json_object_set_new(o, "spec", json_loads(spec, 0, NULL));
	return o;
}

/* Creates the issuer; the object as the API server stored it, or NULL
 * with the error left for the caller. */
static json_t *issuer_create(const char *ns, const char *name, const char *spec)
{
	json_t *o = issuer(ns, name, spec), *out = NULL;
	if (recreate(issuer_ref(ns, name), o, &out) != 0) {
		json_decref(out);
		out = NULL;
	}
	json_decref(o);
	return out;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

static bool str_is(const char *got, const char *want)
{
	return got && strcmp(got, want) == 0;
}

/* The printer column called name in crd's first version, or NULL. */
static const json_t *column(const json_t *crd, const char *name)
{
	const json_t *v0 = json_array_get(json_object_get(json_object_get(crd, "spec"), "versions"), 0);
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(v0, "additionalPrinterColumns"), i, c)
	{
		if (str_is(json_string_value(json_object_get(c, "name")), name))
			return c;
	}
	return NULL;
}

static bool column_is(const json_t *crd, const char *name, const char *type, const char *path)
{
	const json_t *c = column(crd, name);
	bool ok = c && str_is(json_string_value(json_object_get(c, "type")), type) &&
	          str_is(json_string_value(json_object_get(c, "jsonPath")), path);
	if (!ok)
		fprintf(stderr, "  column %s: want %s %s\n", name, type, path);
	return ok;
}

static bool condition_is(const json_t *crd, const char *type, const char *status)
{
	return str_is(kube_fx_cond_str(crd, type, "status"), status);
}

/* A status.conditions list of one Ready condition; the fields are JSON
 * text pieces so a test can leave one out or make it wrong. */
static json_t *ready_conditions(const char *status, const char *reason, const char *extra)
{
	char text[512];
	snprintf(text, sizeof(text),
	         "[{\"type\": \"Ready\", \"status\": \"%s\", \"reason\": \"%s\", \"message\": \"checked by the test\""
	         "%s}]",
	         status, reason, extra);
	json_t *c = json_loads(text, 0, NULL);
	SG_CHECK(c != NULL);
	return c;
}

#define LTT ", \"lastTransitionTime\": \"2026-01-01T00:00:00Z\""

/* Merge-patches status.conditions of a cluster issuer through /status. */
static int issuer_status_patch(const char *name, json_t *conditions)
{
	json_t *p = json_pack("{s:{s:o}}", "status", "conditions", conditions);
	return kube_fx_patch(k, kube_fx_named(issuer_ref(NULL, name), name, "status"), p);
}

/* A CertificateRequestPolicy with spec given as JSON text (NULL: no spec
 * at all); caller decrefs. */
static json_t *policy(const char *name, const char *spec)
{
	json_t *o = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "policy.cert-manager.io/v1alpha1", "kind",
	                      "CertificateRequestPolicy", "metadata", "name", name);
	if (spec) {
		json_t *s = json_loads(spec, JSON_DECODE_ANY, NULL);
		SG_CHECK(s != NULL);
		json_object_set_new(o, "spec", s ? s : json_null());
	}
	return o;
}

/* Creates the policy; the object as a GET returns it afterwards, or NULL
 * with the create's error left for the caller. */
static json_t *policy_create(const char *name, const char *spec)
{
	json_t *o = policy(name, spec), *out = NULL;
	sg_kube_ref r = policy_ref(name);
	if (recreate(r, o, NULL) == 0 && sg_kube_get(k, &r, &out) != 0) {
		json_decref(out);
		out = NULL;
	}
	json_decref(o);
	return out;
}

/* Whether the policy's spec reads back as spec (JSON text) says: nothing
 * pruned, nothing defaulted. */
static bool policy_spec_is(const json_t *o, const char *spec)
{
	json_t *want = json_loads(spec, 0, NULL);
	bool same = want && json_equal(json_object_get(o, "spec"), want);
	if (!same) {
		char *got = json_dumps(json_object_get(o, "spec"), JSON_SORT_KEYS);
		fprintf(stderr, "  spec sent: %s\n  read back: %s\n", spec, got ? got : "(none)");
		free(got);
	}
	json_decref(want);
	return same;
}

/* The schema node at path (property names; "[]" steps into items) in the
 * first version of crd, or NULL. */
static const json_t *schema_at(const json_t *crd, const char *const *path)
{
	const json_t *v0 = json_array_get(json_object_get(json_object_get(crd, "spec"), "versions"), 0);
	const json_t *n = json_object_get(json_object_get(v0, "schema"), "openAPIV3Schema");
	for (; n && *path; path++)
		n = strcmp(*path, "[]") == 0 ? json_object_get(n, "items")
		                             : json_object_get(json_object_get(n, "properties"), *path);
	return n;
}

/* ---- SubjectAccessReview ---- */

/* Whether user (a ServiceAccount of sa_ns) may verb the resource, as the
 * API server's authorizer answers a SubjectAccessReview. ns NULL: a
 * cluster-wide question. Errors print and answer false. */
static bool can(const char *user, const char *sa_ns, const char *verb, const char *group, const char *resource,
                const char *subresource, const char *ns, const char *name)
{
	char sa_group[128];
	snprintf(sa_group, sizeof(sa_group), "system:serviceaccounts:%s", sa_ns);
	json_t *attrs = json_pack("{s:s, s:s, s:s}", "verb", verb, "group", group, "resource", resource);
	if (subresource)
		json_object_set_new(attrs, "subresource", json_string(subresource));
	if (ns)
		json_object_set_new(attrs, "namespace", json_string(ns));
	if (name)
		json_object_set_new(attrs, "name", json_string(name));
	json_t *sar = json_pack("{s:s, s:s, s:{s:s, s:[s, s, s], s:o}}", "apiVersion", "authorization.k8s.io/v1", "kind",
	                        "SubjectAccessReview", "spec", "user", user, "groups", "system:serviceaccounts", sa_group,
	                        "system:authenticated", "resourceAttributes", attrs);
	sg_kube_ref coll = {.group = "authorization.k8s.io", .version = "v1", .resource = "subjectaccessreviews"};
	json_t *out = NULL;
	bool allowed = false;
	if (sg_kube_create(k, &coll, sar, &out) == 0)
		allowed = json_is_true(json_object_get(json_object_get(out, "status"), "allowed"));
	else
		fprintf(stderr, "  SubjectAccessReview: %s\n", sg_error_last()->msg);
	json_decref(out);
	json_decref(sar);
	return allowed;
}

static bool signet_can(const char *verb, const char *group, const char *resource, const char *subresource,
                       const char *ns, const char *name)
{
	bool yes = can(SIGNET_USER, SIGNET_SA_NS, verb, group, resource, subresource, ns, name);
	if (!yes)
		fprintf(stderr, "  signet may not %s %s%s%s/%s%s%s\n", verb, group, *group ? "/" : "", resource,
		        subresource ? subresource : "", ns ? " in " : "", ns ? ns : "");
	return yes;
}

static bool signet_cannot(const char *verb, const char *group, const char *resource, const char *subresource,
                          const char *ns, const char *name)
{
	return !can(SIGNET_USER, SIGNET_SA_NS, verb, group, resource, subresource, ns, name);
}

/* A signer name as the API server authorizes it for CSRs (plugin
 * certificates/util.go, IsAuthorizedForSignerName) and cert-manager's
 * webhook for approvals: the name itself, else "<domain>/" and a star. RBAC matches
 * resourceNames literally, so the manifests grant the second form. */
static bool signer_allowed(const char *user, const char *sa_ns, const char *group, const char *verb,
                           const char *signer)
{
	if (can(user, sa_ns, verb, group, "signers", NULL, NULL, signer))
		return true;
	char wildcard[300];
	const char *slash = strchr(signer, '/');
	snprintf(wildcard, sizeof(wildcard), "%.*s/*", slash ? (int)(slash - signer) : 0, signer);
	return slash && can(user, sa_ns, verb, group, "signers", NULL, NULL, wildcard);
}

/* ---- tests ---- */

static void t_start(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	/* Istio's namespace, where rbac.yaml binds the Lease and Secret
	 * rules: Istio creates it in a real cluster. */
	ns_create("istio-system");
	ns_create(NS);
	SG_CHECK(kube_env_apply_file(k, CRDS));
	SG_CHECK(kube_env_apply_file(k, POLICY_CRDS));
	SG_CHECK(kube_env_apply_file(k, RBAC));
	SG_CHECK(kube_env_apply_file(k, CR_CRD));
	/* Applying again is harmless: everything exists and is replaced. */
	SG_CHECK(kube_env_apply_file(k, CRDS));
	SG_CHECK(kube_env_apply_file(k, POLICY_CRDS));
	SG_CHECK(kube_env_apply_file(k, RBAC));
	if (sg_test_failures)
		exit(1);
}

static void t_crds(void)
{
	static const struct {
		const char *name, *kind, *scope, *short_name;
	} crds[] = {
	    {"signetissuers.signet.dev", "SignetIssuer", "Namespaced", "sgi"},
	    {"signetclusterissuers.signet.dev", "SignetClusterIssuer", "Cluster", "sgci"},
	};
	json_t *got[2] = {NULL, NULL};
	for (size_t i = 0; i < 2; i++) {
		sg_kube_ref r = crd_ref(crds[i].name);
		SG_CHECK_OK(sg_kube_get(k, &r, &got[i]));
		const json_t *crd = got[i], *spec = json_object_get(crd, "spec");
		SG_CHECK(condition_is(crd, "Established", "True"));
		SG_CHECK(condition_is(crd, "NamesAccepted", "True"));
		SG_CHECK(str_is(json_string_value(json_object_get(spec, "scope")), crds[i].scope));
		const json_t *names = json_object_get(spec, "names");
		SG_CHECK(str_is(json_string_value(json_object_get(names, "kind")), crds[i].kind));
		SG_CHECK(str_is(json_string_value(json_array_get(json_object_get(names, "shortNames"), 0)),
		                crds[i].short_name));
		const json_t *v = json_object_get(spec, "versions");
		SG_CHECK(json_array_size(v) == 1);
		const json_t *v0 = json_array_get(v, 0);
		SG_CHECK(str_is(json_string_value(json_object_get(v0, "name")), SG_SIGNETISSUER_VERSION));
		SG_CHECK(json_is_true(json_object_get(v0, "served")) && json_is_true(json_object_get(v0, "storage")));
		SG_CHECK(json_is_object(json_object_get(json_object_get(v0, "subresources"), "status")));
		SG_CHECK(column_is(crd, "Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status"));
		SG_CHECK(column_is(crd, "Reason", "string", ".status.conditions[?(@.type==\"Ready\")].reason"));
		SG_CHECK(column_is(crd, "CA", "string", ".spec.caName"));
		SG_CHECK(column_is(crd, "Age", "date", ".metadata.creationTimestamp"));
	}
	/* One schema for both kinds. */
	const json_t *s0 = json_object_get(json_array_get(json_object_get(json_object_get(got[0], "spec"), "versions"), 0),
	                                   "schema");
	const json_t *s1 = json_object_get(json_array_get(json_object_get(json_object_get(got[1], "spec"), "versions"), 0),
	                                   "schema");
	SG_CHECK(s0 && json_equal(s0, s1));
	json_decref(got[0]);
	json_decref(got[1]);
}

/* The schema's defaults, read back, and what signetd's parser makes of
 * them: the same as of a spec that says nothing (its own defaults). */
static void t_defaults(void)
{
	static const struct {
		const char *ns, *name, *spec;
	} cases[] = {
	    {NULL, "manifests-empty-spec", "{}"},
	    {NULL, "manifests-no-spec", NULL},
	    {NS, "manifests-empty-spec", "{}"},
	};
	sg_signetissuer_spec none;
	json_t *bare = json_pack("{s:{}}", "spec");
	SG_CHECK_OK(sg_signetissuer_spec_parse(bare, &none));
	json_decref(bare);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *o = issuer_create(cases[i].ns, cases[i].name, cases[i].spec);
		SG_CHECK(o != NULL);
		if (!o) {
			fprintf(stderr, "  create: %s\n", sg_error_last()->msg);
			continue;
		}
		/* and as a GET returns it, not only the create's answer */
		json_decref(o);
		sg_kube_ref r = issuer_ref(cases[i].ns, cases[i].name);
		o = NULL;
		SG_CHECK_OK(sg_kube_get(k, &r, &o));
		const json_t *spec = json_object_get(o, "spec");
		SG_CHECK(str_is(json_string_value(json_object_get(spec, "caName")), "default"));
		/* no default in the schema: signetd fits 90 days into the range */
		SG_CHECK(json_object_get(spec, "defaultDuration") == NULL);
		SG_CHECK(str_is(json_string_value(json_object_get(spec, "minDuration")), "1h"));
		SG_CHECK(json_is_false(json_object_get(spec, "allowCA")));
		SG_CHECK(json_object_get(spec, "maxDuration") == NULL);
		SG_CHECK(json_object_size(spec) == 3);
		sg_signetissuer_spec got;
		SG_CHECK_OK(sg_signetissuer_spec_parse(o, &got));
		SG_CHECK(strcmp(got.ca_name, none.ca_name) == 0);
		SG_CHECK(got.default_duration == none.default_duration && got.default_duration == SG_KUBESIGN_DEFAULT_DURATION);
		SG_CHECK(got.min_duration == none.min_duration && got.min_duration == 3600);
		SG_CHECK(got.max_duration == 0 && !got.allow_ca && !none.allow_ca);
		json_decref(o);
	}
	/* What is given is kept; only what is missing is defaulted. */
	json_t *o = issuer_create(NULL, "manifests-partial",
	                          "{\"caName\": \"team-a\", \"allowCA\": true, \"maxDuration\": \"8760h\"}");
	SG_CHECK(o != NULL);
	const json_t *spec = json_object_get(o, "spec");
	SG_CHECK(str_is(json_string_value(json_object_get(spec, "caName")), "team-a"));
	SG_CHECK(json_is_true(json_object_get(spec, "allowCA")));
	SG_CHECK(str_is(json_string_value(json_object_get(spec, "maxDuration")), "8760h"));
	SG_CHECK(json_object_get(spec, "defaultDuration") == NULL);
	SG_CHECK(str_is(json_string_value(json_object_get(spec, "minDuration")), "1h"));
	json_decref(o);
}

static void t_validation(void)
{
	/* Refused by the schema: 422 Invalid, SG_EINVAL. */
	static const char *const bad_specs[] = {
	    "{\"caName\": \"Bad_Name\"}",
	    "{\"caName\": \"-lead\"}",
	    "{\"caName\": \"\"}",
	    "{\"caName\": \"a123456789a123456789a123456789a123456789a123456789a123456789abcd\"}", /* 64 */
	    "{\"caName\": 5}",
	    "{\"allowCA\": \"yes\"}",
	    "{\"defaultDuration\": 3600}",
	    "{\"maxDuration\": {\"hours\": 1}}",
	    "[]",
	};
	for (size_t i = 0; i < sizeof(bad_specs) / sizeof(bad_specs[0]); i++) {
		json_t *o = issuer_create(NULL, "manifests-invalid", bad_specs[i]);
		SG_CHECK(o == NULL);
		SG_CHECK(sg_kube_last_status()->code == 422);
		if (o || sg_kube_last_status()->code != 422)
			fprintf(stderr, "  spec %s: %s\n", bad_specs[i], o ? "accepted" : sg_error_last()->msg);
		json_decref(o);
	}
	/* The longest DNS label is fine. */
	json_t *o = issuer_create(NULL, "manifests-long-ca",
	                          "{\"caName\": \"a123456789a123456789a123456789a123456789a123456789a123456789abc\"}");
	SG_CHECK(o != NULL);
	json_decref(o);

	/* Unknown fields are pruned (a structural schema), and status sent
	 * with the object is dropped: it belongs to /status. */
	json_t *with = issuer(NULL, "manifests-pruned", "{\"caName\": \"x\", \"bogus\": 1}");
	json_object_set_new(with, "status", json_pack("{s:o}", "conditions", ready_conditions("True", "Checked", LTT)));
	json_object_set_new(with, "extra", json_string("dropped"));
	o = NULL;
	SG_CHECK_OK(recreate(issuer_ref(NULL, "manifests-pruned"), with, &o));
	SG_CHECK(json_object_get(json_object_get(o, "spec"), "bogus") == NULL);
	SG_CHECK(str_is(str_at(o, "spec", "caName"), "x"));
	SG_CHECK(json_object_get(o, "extra") == NULL);
	SG_CHECK(json_object_get(json_object_get(o, "status"), "conditions") == NULL);
	json_decref(o);
	json_decref(with);

	/* Conditions through /status: metav1.Condition's rules. */
	SG_CHECK_OK(issuer_status_patch("manifests-pruned", ready_conditions("True", "Checked", LTT)));
	SG_CHECK_OK(issuer_status_patch("manifests-pruned",
	                                ready_conditions("False", "CAUnusable", LTT ", \"observedGeneration\": 1")));
	static const struct {
		const char *status, *reason, *extra;
	} bad[] = {
	    {"Maybe", "Checked", LTT},                                /* status not True/False/Unknown */
	    {"true", "Checked", LTT},                                 /* case matters */
	    {"True", "not ok", LTT},                                  /* reason: CamelCase identifier */
	    {"True", "", LTT},                                        /* reason: required, non-empty */
	    {"True", "Checked", ""},                                  /* lastTransitionTime required */
	    {"True", "Checked", ", \"lastTransitionTime\": \"yesterday\""}, /* date-time */
	    {"True", "Checked", LTT ", \"observedGeneration\": -1"},  /* minimum 0 */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		SG_CHECK_RC(issuer_status_patch("manifests-pruned", ready_conditions(bad[i].status, bad[i].reason,
		                                                                      bad[i].extra)),
		            SG_EINVAL);
	}
	/* A message past 32768 bytes is refused. */
	char *big = malloc(32770);
	SG_CHECK(big != NULL);
	if (big) {
		memset(big, 'm', 32769);
		big[32769] = 0;
		json_t *c = ready_conditions("True", "Checked", LTT);
		json_object_set_new(json_array_get(c, 0), "message", json_string(big));
		SG_CHECK_RC(issuer_status_patch("manifests-pruned", c), SG_EINVAL);
		free(big);
	}
	/* The last good write is what is there. */
	sg_kube_ref r = issuer_ref(NULL, "manifests-pruned");
	o = NULL;
	SG_CHECK_OK(sg_kube_get(k, &r, &o));
	const json_t *c0 = json_array_get(json_object_get(json_object_get(o, "status"), "conditions"), 0);
	SG_CHECK(str_is(json_string_value(json_object_get(c0, "reason")), "CAUnusable"));
	SG_CHECK(json_integer_value(json_object_get(c0, "observedGeneration")) == 1);
	json_decref(o);
}

/* The issuers controller's way: server-side apply of the status with its
 * field manager (sg_ctrl_apply_status), conditions keyed by type. */
static void t_status_apply(void)
{
	json_t *o = issuer_create(NULL, "manifests-apply", "{}");
	SG_CHECK(o != NULL);
	json_decref(o);
	sg_kube_ref r = issuer_ref(NULL, "manifests-apply");
	r.subresource = "status";
	json_t *body = issuer(NULL, "manifests-apply", NULL);
	json_object_set_new(body, "status",
	                    json_pack("{s:o}", "conditions",
	                              ready_conditions("True", "Checked", LTT ", \"observedGeneration\": 1")));
	o = NULL;
	SG_CHECK_OK(sg_kube_apply(k, &r, body, "signet-issuers", true, &o));
	const json_t *c0 = json_array_get(json_object_get(json_object_get(o, "status"), "conditions"), 0);
	SG_CHECK(str_is(json_string_value(json_object_get(c0, "status")), "True"));
	json_decref(o);
	/* Another manager's condition of another type stays beside ours
	 * (list-type map keyed by type). */
	json_t *other = issuer(NULL, "manifests-apply", NULL);
	json_t *oc = ready_conditions("True", "Fine", LTT);
	json_object_set_new(json_array_get(oc, 0), "type", json_string("example.com/Audited"));
	json_object_set_new(other, "status", json_pack("{s:o}", "conditions", oc));
	SG_CHECK_OK(sg_kube_apply(k, &r, other, "someone-else", false, NULL));
	o = NULL;
	SG_CHECK_OK(sg_kube_apply(k, &r, body, "signet-issuers", true, &o));
	SG_CHECK(json_array_size(json_object_get(json_object_get(o, "status"), "conditions")) == 2);
	json_decref(o);
	json_decref(other);
	json_decref(body);
}

/* ---- CertificateRequestPolicy (policy-crds.yaml) ---- */

/* approver-policy's names, so its CRD and ours are interchangeable. */
static void t_policy_crd(void)
{
	sg_kube_ref r = crd_ref("certificaterequestpolicies.policy.cert-manager.io");
	json_t *crd = NULL;
	SG_CHECK_OK(sg_kube_get(k, &r, &crd));
	const json_t *spec = json_object_get(crd, "spec"), *names = json_object_get(spec, "names");
	SG_CHECK(condition_is(crd, "Established", "True"));
	SG_CHECK(condition_is(crd, "NamesAccepted", "True"));
	SG_CHECK(str_is(json_string_value(json_object_get(spec, "group")), "policy.cert-manager.io"));
	SG_CHECK(str_is(json_string_value(json_object_get(spec, "scope")), "Cluster"));
	SG_CHECK(str_is(json_string_value(json_object_get(names, "kind")), "CertificateRequestPolicy"));
	SG_CHECK(str_is(json_string_value(json_object_get(names, "listKind")), "CertificateRequestPolicyList"));
	SG_CHECK(str_is(json_string_value(json_object_get(names, "plural")), "certificaterequestpolicies"));
	SG_CHECK(str_is(json_string_value(json_object_get(names, "singular")), "certificaterequestpolicy"));
	const json_t *short_names = json_object_get(names, "shortNames"), *cats = json_object_get(names, "categories");
	SG_CHECK(json_array_size(short_names) == 1 && str_is(json_string_value(json_array_get(short_names, 0)), "crp"));
	SG_CHECK(json_array_size(cats) == 1 && str_is(json_string_value(json_array_get(cats, 0)), "cert-manager"));
	const json_t *v = json_object_get(spec, "versions"), *v0 = json_array_get(v, 0);
	SG_CHECK(json_array_size(v) == 1);
	SG_CHECK(str_is(json_string_value(json_object_get(v0, "name")), "v1alpha1"));
	SG_CHECK(json_is_true(json_object_get(v0, "served")) && json_is_true(json_object_get(v0, "storage")));
	SG_CHECK(json_is_object(json_object_get(json_object_get(v0, "subresources"), "status")));
	SG_CHECK(json_array_size(json_object_get(v0, "additionalPrinterColumns")) == 2);
	SG_CHECK(column_is(crd, "Ready", "string", ".status.conditions[?(@.type == \"Ready\")].status"));
	SG_CHECK(column_is(crd, "Age", "date", ".metadata.creationTimestamp"));

	/* The key usages a policy may allow are those a request may ask for
	 * (the fixture is cert-manager's CertificateRequest schema). */
	sg_kube_ref fr = crd_ref("certificaterequests.cert-manager.io");
	json_t *cr_crd = NULL;
	SG_CHECK_OK(sg_kube_get(k, &fr, &cr_crd));
	static const char *const policy_usages[] = {"spec", "allowed", "usages", "[]", NULL};
	static const char *const cr_usages[] = {"spec", "usages", "[]", NULL};
	const json_t *mine = json_object_get(schema_at(crd, policy_usages), "enum");
	const json_t *theirs = json_object_get(schema_at(cr_crd, cr_usages), "enum");
	SG_CHECK(json_array_size(mine) == 23 && json_equal(mine, theirs));
	json_decref(cr_crd);
	json_decref(crd);
}

/* approver-policy's docs/examples/all-options.yaml (every field of the API),
 * its spec as JSON. */
static const char all_options[] =
    "{\"allowed\": {\"commonName\": {\"required\": true, \"value\": \"example.com\","
    " \"validations\": [{\"rule\": \"self.endsWith('.com')\","
    " \"message\": \"CommonName must end with '.com'\"}]}, \"dnsNames\": {\"required\": false,"
    " \"values\": [\"example.com\", \"*.example.com\"], \"validations\": [{\"rule\": \"self.size() <= 24\","
    " \"message\": \"DNSName must be no more than 24 characters\"}]}, \"ipAddresses\": {\"required\": false,"
    " \"values\": [\"*\"], \"validations\": [{\"rule\": \"self.matches('\\\\d+\\\\.\\\\d+\\\\.\\\\d+\\\\.\\\\d+')\","
    " \"message\": \"IPAddress must be a valid IPv4 address\"}]}, \"uris\": {\"required\": false,"
    " \"values\": [\"spiffe://example.org/ns/*/sa/*\"],"
    " \"validations\": [{\"rule\": \"self.startsWith('spiffe://%s/ns/%s/sa/'.format(['example.org',cr.namespace]))\","
    " \"message\": \"URI must be a valid SPIFFE ID in trust domain bound to request namespace\"}]},"
    " \"emailAddresses\": {\"required\": false, \"values\": [\"*@example.com\"],"
    " \"validations\": [{\"rule\": \"self.size() <= 24\","
    " \"message\": \"EmailAddress must be no more than 24 characters\"}]}, \"isCA\": false,"
    " \"usages\": [\"server auth\", \"client auth\"], \"subject\": {\"organizations\": {\"required\": false,"
    " \"values\": [\"*\"], \"validations\": []}, \"countries\": {\"required\": false, \"values\": [\"*\"],"
    " \"validations\": []}, \"organizationalUnits\": {\"required\": false, \"values\": [\"*\"],"
    " \"validations\": []}, \"localities\": {\"required\": false, \"values\": [\"*\"], \"validations\": []},"
    " \"provinces\": {\"required\": false, \"values\": [\"*\"], \"validations\": []},"
    " \"streetAddresses\": {\"required\": false, \"values\": [\"*\"], \"validations\": []},"
    " \"postalCodes\": {\"required\": false, \"values\": [\"*\"], \"validations\": []},"
    " \"serialNumber\": {\"required\": false, \"value\": \"*\", \"validations\": []},"
    " \"otherAttributes\": [{\"oid\": \"1.2.840.113549.1.9.1\", \"required\": false,"
    " \"values\": [\"*@example.com\"], \"validations\": []}]},"
    " \"otherNames\": [{\"oid\": \"1.3.6.1.4.1.311.20.2.3\", \"required\": false,"
    " \"values\": [\"*@example.com\"], \"validations\": []}]}, \"constraints\": {\"minDuration\": \"1h\","
    " \"maxDuration\": \"24h\", \"privateKey\": {\"algorithm\": \"RSA\", \"minSize\": 2048, \"maxSize\": 4096}},"
    " \"plugins\": {\"rego\": {\"values\": {\"my-ref\": \"hello-world\"}}},"
    " \"selector\": {\"issuerRef\": {\"name\": \"my-ca-*\", \"kind\": \"*Issuer\", \"group\": \"cert-manager.io\"}}}";

#define ANY_ISSUER "{\"selector\": {\"issuerRef\": {}}, "

/* Policies are accepted and read back as written: the schema knows every
 * field of approver-policy's API (none pruned) and defaults none. Among
 * them approver-policy's documented examples, and what only the
 * controller can refuse. */
static void t_policy_examples(void)
{
	static const struct {
		const char *name, *spec;
	} ok[] = {
	    {"manifests-all-options", all_options},
	    /* docs/examples/default-deny-all.yaml */
	    {"manifests-default-deny-all",
	     "{\"allowed\": {\"dnsNames\": {\"values\": [], \"required\": true}}, \"selector\": {\"issuerRef\": {}}}"},
	    /* The namespace selector alone; the key size limits themselves. */
	    {"manifests-namespace-only",
	     "{\"selector\": {\"namespace\": {\"matchNames\": [\"team-*\"], \"matchLabels\": {\"signet.dev/policy\": "
	     "\"web\"}}}, \"constraints\": {\"privateKey\": {\"algorithm\": \"ECDSA\", \"minSize\": 0, \"maxSize\": "
	     "8192}}}"},
	    /* What approver-policy's webhook refuses and a 1.20 schema cannot:
	     * signetd reports these NotReady (policy-crds.yaml's header). */
	    {"manifests-controller-checks",
	     ANY_ISSUER "\"constraints\": {\"minDuration\": \"1d\", \"maxDuration\": "
	                "\"-1h\", \"privateKey\": {\"algorithm\": \"Ed25519\", \"minSize\": 4096, "
	                "\"maxSize\": 0}}, \"allowed\": {\"dnsNames\": {\"required\": true, "
	                "\"validations\": [{\"rule\": \"self.(\", \"message\": \"two\\nlines\"}]}, "
	                "\"otherNames\": [{\"oid\": \"01.2\"}], \"subject\": {\"otherAttributes\": "
	                "[{\"oid\": \"2.5.4.3\", \"required\": true}]}}, \"plugins\": "
	                "{\"no-such-plugin\": {}}}"},
	    {"manifests-bad-labels", "{\"selector\": {\"namespace\": {\"matchLabels\": {\"not a key!\": \"x y\"}}}}"},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		json_t *o = policy_create(ok[i].name, ok[i].spec);
		SG_CHECK(o != NULL);
		if (!o) {
			fprintf(stderr, "  %s: %s\n", ok[i].name, sg_error_last()->msg);
			continue;
		}
		SG_CHECK(policy_spec_is(o, ok[i].spec));
		SG_CHECK(json_object_get(o, "status") == NULL);
		json_decref(o);
	}
}

/* What the schema refuses: 422 Invalid. */
static void t_policy_validation(void)
{
	static const char *const bad[] = {
	    "{}",                                    /* no selector */
	    "{\"selector\": {}}",                    /* neither issuerRef nor namespace */
	    "{\"selector\": {\"issuerRef\": null}}", /* the same */
	    "{\"selector\": {\"issuerRef\": \"*\"}}",
	    "{\"selector\": {\"issuerRef\": {\"name\": 5}}}",
	    "{\"selector\": {\"namespace\": {\"matchNames\": \"team-a\"}}}",
	    "{\"selector\": {\"namespace\": {\"matchLabels\": {\"team\": true}}}}",
	    ANY_ISSUER "\"allowed\": {\"usages\": [\"Server Auth\"]}}", /* cert-manager's spelling only */
	    ANY_ISSUER "\"allowed\": {\"usages\": [\"server auth\", \"sign everything\"]}}",
	    ANY_ISSUER "\"allowed\": {\"usages\": \"server auth\"}}",
	    ANY_ISSUER "\"allowed\": {\"isCA\": \"yes\"}}",
	    ANY_ISSUER "\"allowed\": {\"commonName\": {\"value\": [\"a\"]}}}",
	    ANY_ISSUER "\"allowed\": {\"dnsNames\": {\"values\": \"*\"}}}",
	    ANY_ISSUER "\"allowed\": {\"dnsNames\": {\"required\": \"yes\"}}}",
	    ANY_ISSUER "\"allowed\": {\"uris\": {\"validations\": [{\"message\": \"no rule\"}]}}}",
	    ANY_ISSUER "\"allowed\": {\"uris\": {\"validations\": [{\"rule\": \"true\"}, {\"rule\": \"true\"}]}}}",
	    ANY_ISSUER "\"allowed\": {\"otherNames\": [{\"oid\": \"1.2.3\"}, {\"oid\": \"1.2.3\"}]}}",
	    ANY_ISSUER "\"allowed\": {\"subject\": {\"otherAttributes\": [{\"values\": [\"*\"]}]}}}", /* no oid */
	    ANY_ISSUER "\"allowed\": {\"subject\": {\"organizations\": [\"Example\"]}}}",
	    ANY_ISSUER "\"constraints\": {\"privateKey\": {\"algorithm\": \"DSA\"}}}",
	    ANY_ISSUER "\"constraints\": {\"privateKey\": {\"algorithm\": \"rsa\"}}}",
	    ANY_ISSUER "\"constraints\": {\"privateKey\": {\"minSize\": \"2048\"}}}",
	    ANY_ISSUER "\"constraints\": {\"privateKey\": {\"maxSize\": 8193}}}",
	    ANY_ISSUER "\"constraints\": {\"privateKey\": {\"minSize\": -1}}}",
	    ANY_ISSUER "\"constraints\": {\"minDuration\": 3600}}",
	    ANY_ISSUER "\"plugins\": {\"rego\": {\"values\": {\"my-ref\": 1}}}}",
	    ANY_ISSUER "\"plugins\": {\"rego\": \"on\"}}",
	    "[]",
	    NULL, /* no spec at all */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *o = policy_create("manifests-crp-invalid", bad[i]);
		SG_CHECK(o == NULL && sg_kube_last_status()->code == 422);
		if (o || sg_kube_last_status()->code != 422)
			fprintf(stderr, "  spec %s: %s\n", bad[i] ? bad[i] : "(none)",
			        o ? "accepted" : sg_error_last()->msg);
		json_decref(o);
	}

	/* Unknown fields are pruned, and status sent with the object is
	 * dropped: it belongs to /status. */
	json_t *with =
	    policy("manifests-crp-pruned", "{\"selector\": {\"issuerRef\": {\"name\": \"x\", \"bogus\": 1}}, "
	                                   "\"bogus\": 2}");
	json_object_set_new(with, "status", json_pack("{s:o}", "conditions", ready_conditions("True", "Ready", LTT)));
	json_t *o = NULL;
	SG_CHECK_OK(recreate(policy_ref("manifests-crp-pruned"), with, &o));
	SG_CHECK(policy_spec_is(o, "{\"selector\": {\"issuerRef\": {\"name\": \"x\"}}}"));
	SG_CHECK(json_object_get(o, "status") == NULL);
	json_decref(o);
	json_decref(with);
}

/* Merge-patches status.conditions of a policy through /status. */
static int policy_status_patch(const char *name, json_t *conditions)
{
	sg_kube_ref r = policy_ref(name);
	r.subresource = "status";
	json_t *p = json_pack("{s:{s:o}}", "status", "conditions", conditions);
	int rc = sg_kube_merge_patch(k, &r, p, NULL);
	json_decref(p);
	return rc;
}

/* The Ready condition as approver-policy writes it (reasons Ready and
 * NotReady), through /status; metav1.Condition's rules hold. */
static void t_policy_status(void)
{
	json_t *o = policy_create("manifests-crp-status", ANY_ISSUER "\"allowed\": {\"isCA\": false}}");
	SG_CHECK(o != NULL);
	json_decref(o);
	SG_CHECK_OK(policy_status_patch("manifests-crp-status", ready_conditions("True", "Ready", LTT)));
	SG_CHECK_OK(policy_status_patch("manifests-crp-status",
	                                ready_conditions("False", "NotReady", LTT ", \"observedGeneration\": 1")));
	SG_CHECK_RC(policy_status_patch("manifests-crp-status", ready_conditions("False", "Not Ready", LTT)),
	            SG_EINVAL);
	SG_CHECK_RC(policy_status_patch("manifests-crp-status", ready_conditions("Maybe", "Ready", LTT)), SG_EINVAL);
	SG_CHECK_RC(policy_status_patch("manifests-crp-status", ready_conditions("True", "Ready", "")), SG_EINVAL);
	sg_kube_ref r = policy_ref("manifests-crp-status");
	o = NULL;
	SG_CHECK_OK(sg_kube_get(k, &r, &o));
	const json_t *c = json_object_get(json_object_get(o, "status"), "conditions");
	SG_CHECK(json_array_size(c) == 1);
	SG_CHECK(str_is(json_string_value(json_object_get(json_array_get(c, 0), "reason")), "NotReady"));
	json_decref(o);
}

/* signet's ServiceAccount: each module's rules (rbac.yaml's comments). */
static void t_rbac_signet(void)
{
	/* The first answer waits for the API server's RBAC informers. */
	SG_WAIT_FOR(RBAC_WAIT_MS, can(SIGNET_USER, SIGNET_SA_NS, "create", "authentication.k8s.io", "tokenreviews", NULL,
	                              NULL, NULL));
	SG_WAIT_FOR(RBAC_WAIT_MS, can(SIGNET_USER, SIGNET_SA_NS, "update", "coordination.k8s.io", "leases", NULL,
	                              "istio-system", "signet"));
	SG_WAIT_FOR(RBAC_WAIT_MS,
	            can(SIGNET_USER, SIGNET_SA_NS, "get", "", "secrets", NULL, "istio-system", "istiod-tls"));
	SG_WAIT_FOR(RBAC_WAIT_MS, can(CM_USER, CM_SA_NS, "approve", "cert-manager.io", "signers", NULL, NULL,
	                              "signetclusterissuers.signet.dev/*"));

	/* request path */
	SG_CHECK(signet_can("list", "", "pods", NULL, NULL, NULL));
	SG_CHECK(signet_can("watch", "", "pods", NULL, NULL, NULL));
	SG_CHECK(signet_can("get", "", "serviceaccounts", NULL, "default", "default"));
	SG_CHECK(signet_can("watch", "", "serviceaccounts", NULL, NULL, NULL));
	/* rootdist */
	SG_CHECK(signet_can("watch", "", "namespaces", NULL, NULL, NULL));
	static const char *const cm_verbs[] = {"get", "list", "watch", "create", "update", "delete"};
	for (size_t i = 0; i < sizeof(cm_verbs) / sizeof(cm_verbs[0]); i++)
		SG_CHECK(signet_can(cm_verbs[i], "", "configmaps", NULL, "team-a", "istio-ca-root-cert"));
	/* Events from every controller, in any namespace */
	SG_CHECK(signet_can("create", "", "events", NULL, "team-a", NULL));
	SG_CHECK(signet_can("patch", "", "events", NULL, "default", "x"));
	/* leader election and istiod's Secret, in istio-system */
	SG_CHECK(signet_can("get", "coordination.k8s.io", "leases", NULL, "istio-system", "signet"));
	SG_CHECK(signet_can("create", "coordination.k8s.io", "leases", NULL, "istio-system", NULL));
	static const char *const secret_verbs[] = {"get", "list", "watch", "create", "update", "delete"};
	for (size_t i = 0; i < sizeof(secret_verbs) / sizeof(secret_verbs[0]); i++)
		SG_CHECK(signet_can(secret_verbs[i], "", "secrets", NULL, "istio-system", "istiod-tls"));
	/* issuers */
	SG_CHECK(signet_can("list", "signet.dev", "signetclusterissuers", NULL, NULL, NULL));
	SG_CHECK(signet_can("watch", "signet.dev", "signetissuers", NULL, NULL, NULL));
	SG_CHECK(signet_can("get", "signet.dev", "signetissuers", NULL, "team-a", "ca"));
	SG_CHECK(signet_can("patch", "signet.dev", "signetclusterissuers", "status", NULL, "x"));
	SG_CHECK(signet_can("patch", "signet.dev", "signetissuers", "status", "team-a", "ca"));
	/* cert-manager issuer */
	SG_CHECK(signet_can("watch", "cert-manager.io", "certificaterequests", NULL, NULL, NULL));
	SG_CHECK(signet_can("get", "cert-manager.io", "certificaterequests", NULL, "team-a", "web-1"));
	SG_CHECK(signet_can("patch", "cert-manager.io", "certificaterequests", "status", "team-a", "web-1"));
	SG_CHECK(signet_can("create", "cert-manager.io", "certificaterequests", NULL, "team-a", NULL));
	SG_CHECK(signet_can("delete", "cert-manager.io", "certificaterequests", NULL, "team-a", "web-1"));
	/* Kubernetes CSR signer */
	SG_CHECK(signet_can("list", "certificates.k8s.io", "certificatesigningrequests", NULL, NULL, NULL));
	SG_CHECK(signet_can("update", "certificates.k8s.io", "certificatesigningrequests", "status", NULL, "csr-1"));
	SG_CHECK(signet_can("patch", "certificates.k8s.io", "certificatesigningrequests", "status", NULL, "csr-1"));
	SG_CHECK(signer_allowed(SIGNET_USER, SIGNET_SA_NS, "certificates.k8s.io", "sign",
	                        "signetclusterissuers.signet.dev/x"));

	/* Not more, where it matters. */
	SG_CHECK(signet_cannot("get", "", "secrets", NULL, "default", "x"));            /* Secrets: istio-system only */
	SG_CHECK(signet_cannot("list", "", "secrets", NULL, NULL, NULL));
	SG_CHECK(signet_cannot("update", "coordination.k8s.io", "leases", NULL, "default", "signet"));
	SG_CHECK(signet_cannot("create", "", "pods", NULL, "default", NULL));
	SG_CHECK(signet_cannot("update", "signet.dev", "signetclusterissuers", NULL, NULL, "x")); /* spec: users' */
	SG_CHECK(signet_cannot("update", "cert-manager.io", "certificaterequests", NULL, "team-a", "web-1"));
	SG_CHECK(signet_cannot("update", "certificates.k8s.io", "certificatesigningrequests", "approval", NULL, "c"));
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "certificates.k8s.io", "sign",
	                         "signetissuers.signet.dev/team-a.ca")); /* namespaced issuers sign no CSRs */
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "certificates.k8s.io", "sign",
	                         "kubernetes.io/kube-apiserver-client"));
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "certificates.k8s.io", "approve",
	                         "signetclusterissuers.signet.dev/x")); /* Kubernetes CSRs: someone else approves */
}

/* cert-manager's ServiceAccount approves for signet's issuers, and gets
 * nothing else from us. */
static void t_rbac_cert_manager(void)
{
	SG_WAIT_FOR(RBAC_WAIT_MS, can(CM_USER, CM_SA_NS, "approve", "cert-manager.io", "signers", NULL, NULL,
	                              "signetissuers.signet.dev/*"));
	SG_CHECK(signer_allowed(CM_USER, CM_SA_NS, "cert-manager.io", "approve", "signetclusterissuers.signet.dev/x"));
	SG_CHECK(signer_allowed(CM_USER, CM_SA_NS, "cert-manager.io", "approve", "signetissuers.signet.dev/team-a.ca"));
	SG_CHECK(!signer_allowed(CM_USER, CM_SA_NS, "cert-manager.io", "approve", "issuers.cert-manager.io/team-a.ca"));
	SG_CHECK(!signer_allowed(CM_USER, CM_SA_NS, "cert-manager.io", "approve", "signetissuers.example.com/a.b"));
	SG_CHECK(!signer_allowed(CM_USER, CM_SA_NS, "certificates.k8s.io", "sign", "signetclusterissuers.signet.dev/x"));
	SG_CHECK(!can(CM_USER, CM_SA_NS, "patch", "signet.dev", "signetclusterissuers", "status", NULL, "x"));
}

/* signet's ServiceAccount as the policy approver (ClusterRole
 * signet-policy-approver): each rule, and the signer names it approves for
 * and no others. */
static void t_rbac_policy_approver(void)
{
	SG_WAIT_FOR(RBAC_WAIT_MS, can(SIGNET_USER, SIGNET_SA_NS, "list", "policy.cert-manager.io",
	                              "certificaterequestpolicies", NULL, NULL, NULL));
	static const char *const read[] = {"get", "list", "watch"};
	for (size_t i = 0; i < sizeof(read) / sizeof(read[0]); i++) {
		SG_CHECK(signet_can(read[i], "policy.cert-manager.io", "certificaterequestpolicies", NULL, NULL,
		                    i == 0 ? "web" : NULL));
		SG_CHECK(signet_can(read[i], "cert-manager.io", "certificaterequests", NULL, "team-a",
		                    i == 0 ? "web-1" : NULL));
		SG_CHECK(signet_can(read[i], "", "namespaces", NULL, NULL, i == 0 ? "team-a" : NULL));
	}
	SG_CHECK(signet_can("patch", "policy.cert-manager.io", "certificaterequestpolicies", "status", NULL, "web"));
	SG_CHECK(signet_can("create", "authorization.k8s.io", "subjectaccessreviews", NULL, NULL, NULL));
	SG_CHECK(signet_can("watch", "cert-manager.io", "certificaterequests", NULL, NULL, NULL));
	SG_CHECK(signet_can("patch", "cert-manager.io", "certificaterequests", "status", "team-a", "web-1"));
	SG_CHECK(signet_can("update", "cert-manager.io", "certificaterequests", "status", "team-a", "web-1"));
	static const char *const rbac_kinds[] = {"roles", "rolebindings", "clusterroles", "clusterrolebindings"};
	for (size_t i = 0; i < sizeof(rbac_kinds) / sizeof(rbac_kinds[0]); i++) {
		SG_CHECK(signet_can("list", "rbac.authorization.k8s.io", rbac_kinds[i], NULL, NULL, NULL));
		SG_CHECK(signet_can("watch", "rbac.authorization.k8s.io", rbac_kinds[i], NULL, NULL, NULL));
	}
	SG_CHECK(signet_can("create", "", "events", NULL, "team-a", NULL));
	/* Approval for signet's issuers and cert-manager's own, as cert-manager's
	 * webhook asks (the exact name, then "<plural>.<group>/" and a star). */
	static const char *const approved[] = {
	    "signetclusterissuers.signet.dev/x", "signetissuers.signet.dev/team-a.ca",
	    "clusterissuers.cert-manager.io/x",  "issuers.cert-manager.io/x",
	    "issuers.cert-manager.io/team-a.ca",
	};
	for (size_t i = 0; i < sizeof(approved) / sizeof(approved[0]); i++) {
		bool yes = signer_allowed(SIGNET_USER, SIGNET_SA_NS, "cert-manager.io", "approve", approved[i]);
		SG_CHECK(yes);
		if (!yes)
			fprintf(stderr, "  signet may not approve for %s\n", approved[i]);
	}

	/* Not more. */
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "cert-manager.io", "approve", "example.com/foo"));
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "cert-manager.io", "approve",
	                         "awspcaclusterissuers.awspca.cert-manager.io/x")); /* other issuers: add them */
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "cert-manager.io", "approve",
	                         "signetissuers.example.com/team-a.ca"));
	SG_CHECK(!signer_allowed(SIGNET_USER, SIGNET_SA_NS, "certificates.k8s.io", "approve",
	                         "clusterissuers.cert-manager.io/x"));
	/* "use" is the requesters' verb; the policies are the administrators'. */
	SG_CHECK(signet_cannot("use", "policy.cert-manager.io", "certificaterequestpolicies", NULL, "team-a", "web"));
	SG_CHECK(signet_cannot("use", "policy.cert-manager.io", "certificaterequestpolicies", NULL, NULL, "web"));
	SG_CHECK(signet_cannot("create", "policy.cert-manager.io", "certificaterequestpolicies", NULL, NULL, NULL));
	SG_CHECK(signet_cannot("update", "policy.cert-manager.io", "certificaterequestpolicies", NULL, NULL, "web"));
	SG_CHECK(signet_cannot("delete", "policy.cert-manager.io", "certificaterequestpolicies", NULL, NULL, "web"));
	/* RBAC is watched, never written or read one by one. */
	SG_CHECK(signet_cannot("get", "rbac.authorization.k8s.io", "clusterroles", NULL, NULL, "cluster-admin"));
	SG_CHECK(signet_cannot("create", "rbac.authorization.k8s.io", "rolebindings", NULL, "team-a", NULL));
	SG_CHECK(signet_cannot("update", "rbac.authorization.k8s.io", "clusterrolebindings", NULL, NULL, "x"));
	SG_CHECK(signet_cannot("bind", "rbac.authorization.k8s.io", "clusterroles", NULL, NULL, "cluster-admin"));
	SG_CHECK(signet_cannot("escalate", "rbac.authorization.k8s.io", "clusterroles", NULL, NULL, "x"));
	SG_CHECK(signet_cannot("delete", "", "namespaces", NULL, NULL, "team-a"));
	SG_CHECK(signet_cannot("update", "cert-manager.io", "certificaterequests", NULL, "team-a", "web-1"));
}

#define REQUESTER "system:serviceaccount:" NS ":requester"
#define USE_RULE                                                                                                       \
	"\"rules\": [{\"apiGroups\": [\"policy.cert-manager.io\"], \"resources\": [\"certificaterequestpolicies\"], "  \
	"\"verbs\": [\"use\"], \"resourceNames\": [\"manifests-web\"]}]"

/* The README's "use" ClusterRole, bound as it shows, answers approver-policy's
 * question: may the request's requester use the policy, asked in the
 * request's namespace (a cluster-scoped resource, asked with a namespace).
 * A RoleBinding answers in its namespace only, a ClusterRoleBinding in all. */
static void t_policy_use(void)
{
	sg_kube_ref role = {.group = "rbac.authorization.k8s.io",
	                    .version = "v1",
	                    .resource = "clusterroles",
	                    .name = "manifests-policy-use"};
	sg_kube_ref rb = {.group = "rbac.authorization.k8s.io",
	                  .version = "v1",
	                  .resource = "rolebindings",
	                  .ns = NS,
	                  .name = "manifests-policy-use"};
	sg_kube_ref crb = {.group = "rbac.authorization.k8s.io",
	                   .version = "v1",
	                   .resource = "clusterrolebindings",
	                   .name = "manifests-policy-use"};
	static const char role_json[] = "{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"ClusterRole\", "
	                                "\"metadata\": {\"name\": \"manifests-policy-use\"}, " USE_RULE "}";
	static const char rb_json[] =
	    "{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"RoleBinding\", \"metadata\": {\"name\": "
	    "\"manifests-policy-use\", \"namespace\": \"" NS "\"}, \"roleRef\": {\"apiGroup\": "
	    "\"rbac.authorization.k8s.io\", \"kind\": \"ClusterRole\", \"name\": \"manifests-policy-use\"}, "
	    "\"subjects\": [{\"kind\": \"ServiceAccount\", \"name\": \"requester\", \"namespace\": \"" NS "\"}]}";
	/* Certificates are requested by cert-manager's ServiceAccount. */
	static const char crb_json[] =
	    "{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"ClusterRoleBinding\", \"metadata\": "
	    "{\"name\": \"manifests-policy-use\"}, \"roleRef\": {\"apiGroup\": \"rbac.authorization.k8s.io\", "
	    "\"kind\": \"ClusterRole\", \"name\": \"manifests-policy-use\"}, \"subjects\": [{\"kind\": "
	    "\"ServiceAccount\", \"name\": \"cert-manager\", \"namespace\": \"cert-manager\"}]}";
	const struct {
		sg_kube_ref ref;
		const char *json;
	} objs[] = {{role, role_json}, {rb, rb_json}, {crb, crb_json}};
	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
		json_t *o = json_loads(objs[i].json, 0, NULL);
		SG_CHECK(o != NULL);
		SG_CHECK_OK(recreate(objs[i].ref, o, NULL));
		json_decref(o);
	}
	const char *grp = "policy.cert-manager.io", *res = "certificaterequestpolicies";
	SG_WAIT_FOR(RBAC_WAIT_MS, can(REQUESTER, NS, "use", grp, res, NULL, NS, "manifests-web"));
	SG_CHECK(!can(REQUESTER, NS, "use", grp, res, NULL, NS, "manifests-other"));     /* that policy only */
	SG_CHECK(!can(REQUESTER, NS, "use", grp, res, NULL, "team-b", "manifests-web")); /* that namespace only */
	SG_CHECK(!can(REQUESTER, NS, "get", grp, res, NULL, NS, "manifests-web"));       /* use, nothing else */
	SG_WAIT_FOR(RBAC_WAIT_MS, can(CM_USER, CM_SA_NS, "use", grp, res, NULL, "team-b", "manifests-web"));
	SG_CHECK(can(CM_USER, CM_SA_NS, "use", grp, res, NULL, NS, "manifests-web"));
	SG_CHECK(!can(CM_USER, CM_SA_NS, "use", grp, res, NULL, NS, "manifests-other"));
	/* Gone again, so a shared API server keeps no grant of ours to
	 * cert-manager's ServiceAccount. */
	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++)
		SG_CHECK_OK(sg_kube_delete(k, &objs[i].ref, NULL));
}

/* The CertificateRequest fixture behaves as cert-manager's CRD. */
static void t_certificaterequest(void)
{
	sg_kube_ref r = crd_ref("certificaterequests.cert-manager.io");
	json_t *crd = NULL;
	SG_CHECK_OK(sg_kube_get(k, &r, &crd));
	SG_CHECK(condition_is(crd, "Established", "True"));
	SG_CHECK(column_is(crd, "Approved", "string", ".status.conditions[?(@.type==\"Approved\")].status"));
	SG_CHECK(column_is(crd, "Denied", "string", ".status.conditions[?(@.type==\"Denied\")].status"));
	SG_CHECK(column_is(crd, "Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status"));
	SG_CHECK(column_is(crd, "Issuer", "string", ".spec.issuerRef.name"));
	SG_CHECK(column_is(crd, "Requester", "string", ".spec.username"));
	SG_CHECK(column_is(crd, "Status", "string", ".status.conditions[?(@.type==\"Ready\")].message"));
	SG_CHECK(column_is(crd, "Age", "date", ".metadata.creationTimestamp"));
	json_decref(crd);

	static const char pem[] = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
	char *req = NULL;
	SG_CHECK_OK(sg_kubesign_base64(pem, strlen(pem), &req));
	json_t *cr = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:{s:s, s:s, s:s}, s:b, s:[s, s]}}", "apiVersion",
	                       "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name", "manifests-cr",
	                       "namespace", NS, "spec", "request", req ? req : "", "duration", "24h", "issuerRef", "name",
	                       "x", "kind", "SignetClusterIssuer", "group", "signet.dev", "isCA", 0, "usages",
	                       "digital signature", "server auth");
	json_t *out = NULL;
	SG_CHECK_OK(recreate(cr_ref("manifests-cr"), cr, &out));
	char *back = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_kubesign_bytes_field(json_object_get(out, "spec"), "request", SG_KUBESIGN_REQUEST_MAX, &back,
	                                    &len));
	SG_CHECK(back && len == strlen(pem) && memcmp(back, pem, len) == 0);
	free(back);
	json_decref(out);

	/* What the schema refuses. */
	static const struct {
		const char *path, *json;
	} bad[] = {
	    {"request", "\"not base64!\""},
	    {"usages", "[\"Server Auth\"]"},
	    {"usages", "[\"digital signature\", \"sign everything\"]"},
	    {"issuerRef", "{\"kind\": \"SignetClusterIssuer\", \"group\": \"signet.dev\"}"},
	    {"isCA", "\"yes\""},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *b = json_deep_copy(cr);
		json_t *v = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
		SG_CHECK(v != NULL);
		json_object_set_new(json_object_get(b, "spec"), bad[i].path, v);
		json_object_set_new(json_object_get(b, "metadata"), "name", json_string("manifests-cr-bad"));
		json_t *got = NULL;
		int rc = recreate(cr_ref("manifests-cr-bad"), b, &got);
		SG_CHECK(rc == SG_EINVAL && sg_kube_last_status()->code == 422);
		if (rc != SG_EINVAL)
			fprintf(stderr, "  spec.%s = %s: rc %d\n", bad[i].path, bad[i].json, rc);
		json_decref(got);
		json_decref(b);
	}
	json_t *no_request = json_deep_copy(cr);
	json_object_del(json_object_get(no_request, "spec"), "request");
	SG_CHECK_RC(recreate(cr_ref("manifests-cr"), no_request, NULL), SG_EINVAL);
	json_decref(no_request);
	SG_CHECK_OK(recreate(cr_ref("manifests-cr"), cr, NULL));

	/* Approval, as an approver writes it (reason: free text). */
	sg_kube_ref st = cr_ref("manifests-cr");
	st.subresource = "status";
	json_t *approve = json_pack("{s:{s:[{s:s, s:s, s:s, s:s, s:s}]}}", "status", "conditions", "type", "Approved",
	                            "status", "True", "reason", "cert-manager.io", "message", "approved by the test",
	                            "lastTransitionTime", "2026-01-01T00:00:00Z");
	SG_CHECK_OK(sg_kube_merge_patch(k, &st, approve, NULL));
	json_decref(approve);

	/* The issuer's write, by server-side apply on /status as sg_cmissuer
	 * makes it: certificate, ca, Ready. */
	char *cert = NULL;
	static const char leaf[] = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n";
	SG_CHECK_OK(sg_kubesign_base64(leaf, strlen(leaf), &cert));
	json_t *issued = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:[{s:s, s:s, s:s, s:s, s:s}]}}", "apiVersion",
	                           "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name", "manifests-cr",
	                           "namespace", NS, "status", "certificate", cert ? cert : "", "ca", cert ? cert : "",
	                           "conditions", "type", "Ready", "status", "True", "reason", "Issued", "message",
	                           "Certificate fetched from issuer successfully", "lastTransitionTime",
	                           "2026-01-01T00:00:01Z");
	out = NULL;
	SG_CHECK_OK(sg_kube_apply(k, &st, issued, "signet-certificaterequests", true, &out));
	back = NULL;
	SG_CHECK_OK(sg_kubesign_bytes_field(json_object_get(out, "status"), "certificate", 1 << 16, &back, &len));
	SG_CHECK(back && strcmp(back, leaf) == 0);
	free(back);
	SG_CHECK(json_array_size(json_object_get(json_object_get(out, "status"), "conditions")) == 2);
	json_decref(out);

	/* CertificateRequest conditions have no observedGeneration: an apply
	 * that sends one is refused, so the issuer must send none. Kubernetes
	 * 1.20 answers 500 ("failed to create typed patch object"), which a
	 * client takes for a passing fault and retries for ever. */
	json_t *with_gen = json_deep_copy(issued);
	json_t *c0 = json_array_get(json_object_get(json_object_get(with_gen, "status"), "conditions"), 0);
	json_object_set_new(c0, "observedGeneration", json_integer(1));
	SG_CHECK(sg_kube_apply(k, &st, with_gen, "signet-certificaterequests", true, NULL) != SG_OK);
	SG_CHECK(strstr(sg_kube_last_status()->message, "field not declared in schema") != NULL);
	json_decref(with_gen);

	/* status.certificate must be base64; status is not written through the
	 * object itself. */
	json_t *bad_cert = json_pack("{s:{s:s}}", "status", "certificate", "not base64!");
	SG_CHECK_RC(sg_kube_merge_patch(k, &st, bad_cert, NULL), SG_EINVAL);
	json_decref(bad_cert);
	sg_kube_ref main_ref = cr_ref("manifests-cr");
	json_t *sneak = json_pack("{s:{s:s}}", "status", "failureTime", "2026-01-01T00:00:02Z");
	out = NULL;
	SG_CHECK_OK(sg_kube_merge_patch(k, &main_ref, sneak, &out));
	SG_CHECK(str_at(out, "status", "failureTime") == NULL);
	json_decref(out);
	json_decref(sneak);

	json_decref(issued);
	free(cert);
	json_decref(cr);
	free(req);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_crds), SG_TEST(t_defaults), SG_TEST(t_validation), SG_TEST(t_status_apply),
             SG_TEST(t_policy_crd), SG_TEST(t_policy_examples), SG_TEST(t_policy_validation), SG_TEST(t_policy_status),
             SG_TEST(t_rbac_signet), SG_TEST(t_rbac_cert_manager), SG_TEST(t_rbac_policy_approver),
             SG_TEST(t_policy_use), SG_TEST(t_certificaterequest))
