/*
 * sg_approver against a real kube-apiserver, with cert-manager's
 * CertificateRequest CRD (fixture) and the CertificateRequestPolicy CRD
 * this project ships: policies approve and deny with approver-policy's
 * reason and messages; no applicable policy, or no RBAC `use`, means no
 * decision until a binding appears; the selector by issuerRef and by
 * namespace labels; wildcards; duration and key constraints; an unknown
 * GeneralName type denied; a NotReady policy decides nothing; a
 * plugin's DENIED, ERROR (retried, never approved) and answer after an
 * error; policies' Ready conditions; two approvers at once deciding every
 * request exactly once; and approval with issuance: beside signet's
 * cert-manager issuer (a SoftHSM2 CA), an approved request is issued and a
 * denied one never is.
 *
 * The requests' user information is written by the test (no cert-manager
 * webhook runs here), as cert-manager's webhook would fill it in.
 *
 * Waiting is for states (SG_WAIT_FOR), never for time. "No decision" is
 * shown by the approver having looked at the request (its "Unprocessed"
 * Event, or a later request's decision behind it in the queue) and the
 * request still having no condition. The approver's counters are not
 * evidence that something did not happen: any policy, Namespace or RBAC
 * event passes over every undecided request again, whenever its watch
 * delivers it.
 */
#include "sg_approver.h"
#include "sg_appliance.h"
#include "sg_cmissuer.h"
#include "sg_signetissuer.h"

#include "ca_fixture.h"
#include "kube_pem.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define NS_A "ap-a"
#define NS_B "ap-b"
#define WAIT_MS 30000u
/* The signers the approvers here decide for (as signetd's RBAC grants):
 * cert-manager's Issuers but not its ClusterIssuers, and SignetIssuers. */
#define SIGNERS "issuers.cert-manager.io/*,signetissuers.signet.dev/*"
#define ALLOW_ALL                                                                                                      \
	"\"allowed\":{\"commonName\":{\"value\":\"*\"},\"dnsNames\":{\"values\":[\"*\"]},\"usages\":[\"digital "       \
	"signature\",\"server auth\"]}"

static sg_kube *k;
static sg_approver *ap, *ap2;

/* ---- objects ---- */

#define APPLY(json_text) SG_CHECK(kube_fx_apply_text(k, (json_text)))

static sg_kube_ref cr_ref(const char *ns, const char *name)
{
	return (sg_kube_ref){.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests", .ns = ns,
	                     .name = name};
}

static json_t *cr_get(const char *ns, const char *name)
{
	return kube_fx_get(k, cr_ref(ns, name));
}

typedef struct cr_spec {
	const char *ns, *name;
	const char *user;     /* spec.username; NULL: "alice" */
	const char *issuer;   /* NULL: "my-issuer" */
	const char *san;      /* X509V3 SAN text; NULL: "DNS:a.example.com" */
	const char *cn;       /* NULL: "a.example.com" */
	const char *duration; /* NULL: none */
	const char *rsa_bits; /* RSA key of this size instead of P-256 */
	const char *kind, *group; /* issuerRef; NULL: Issuer, cert-manager.io */
	const char *request;      /* spec.request as is (base64) instead of a CSR made here */
	const char *usage;        /* the one usage instead of digital signature + server auth */
} cr_spec;

/* The request object of s, made ahead of its create (the key takes time). */
static json_t *cr_object(const cr_spec *s)
{
	size_t len;
	csr_opts o = {.alg = s->rsa_bits ? "RSA" : "EC",
	              .param = s->rsa_bits ? s->rsa_bits : "P-256",
	              .san = s->san ? s->san : "DNS:a.example.com",
	              .cn = s->cn ? s->cn : "a.example.com"};
	char *pem = s->request ? NULL : make_csr(&o, &len);
	char *req = s->request ? strdup(s->request) : b64n(pem, strlen(pem));
	json_t *spec =
	    json_pack("{s:s, s:{s:s, s:s, s:s}, s:s, s:[s], s:s, s:[s,s]}", "request", req, "issuerRef", "name",
	              s->issuer ? s->issuer : "my-issuer", "kind", s->kind ? s->kind : "Issuer", "group",
	              s->group ? s->group : "cert-manager.io", "username", s->user ? s->user : "alice", "groups",
	              "system:authenticated", "uid", "u-1", "usages", "digital signature", "server auth");
	if (s->duration)
		json_object_set_new(spec, "duration", json_string(s->duration));
	if (s->usage)
		json_object_set_new(spec, "usages", json_pack("[s]", s->usage));
	free(req);
	free(pem);
	return json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion", "cert-manager.io/v1", "kind",
	                 "CertificateRequest", "metadata", "name", s->name, "namespace", s->ns, "spec", spec);
}

static void cr_create(const cr_spec *s)
{
	SG_CHECK_OK(kube_fx_create(k, cr_ref(s->ns, NULL), cr_object(s)));
}

/* The request's condition of type (Approved/Denied) as "status|reason|
 * message" into out; false when it has none. */
static bool cr_condition(const char *ns, const char *name, const char *type, char *out, size_t cap)
{
	json_t *o = cr_get(ns, name);
	const json_t *c = kube_fx_cond(o, type);
	if (c)
		snprintf(out, cap, "%s|%s|%s", json_string_value(json_object_get(c, "status")),
		         json_string_value(json_object_get(c, "reason")),
		         json_string_value(json_object_get(c, "message")));
	json_decref(o);
	return c != NULL;
}

static size_t cr_condition_count(const char *ns, const char *name)
{
	json_t *o = cr_get(ns, name);
	size_t n = json_array_size(json_object_get(json_object_get(o, "status"), "conditions"));
	json_decref(o);
	return n;
}

static bool decided_as(const char *ns, const char *name, const char *type, const char *want)
{
	char got[4096];
	if (!cr_condition(ns, name, type, got, sizeof(got)))
		return false;
	if (strcmp(got, want) != 0) {
		fprintf(stderr, "%s/%s %s:\n  got  %s\n  want %s\n", ns, name, type, got, want);
		return false;
	}
	return true;
}

/* A shared case's message (tests/policy/cases/, one line): the bytes
 * `signetctl policy check` is held to as well. */
static void shared_message(const char *file, char *out, size_t cap)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/tests/policy/cases/%s", SOURCE_DIR, file);
	FILE *f = fopen(path, "r");
	SG_CHECK(f != NULL);
	out[0] = 0;
	if (f && fgets(out, (int)cap, f))
		out[strcspn(out, "\n")] = 0;
	if (f)
		fclose(f);
}

static bool decided_starting(const char *ns, const char *name, const char *type, const char *prefix)
{
	char got[4096];
	return cr_condition(ns, name, type, got, sizeof(got)) && strncmp(got, prefix, strlen(prefix)) == 0;
}

static sg_approver_stats stats(sg_approver *a)
{
	sg_approver_stats s;
	sg_approver_stats_get(a, &s);
	return s;
}

/* How many Events of reason name the request ns/name as it is now (its
 * uid: a namesake's of an earlier run do not count). */
static size_t events_of(const char *ns, const char *name, const char *reason)
{
	json_t *cr = cr_get(ns, name);
	const char *uid = sg_kube_meta_str(cr, "uid");
	char sel[500];
	snprintf(sel, sizeof(sel), "involvedObject.name=%s,involvedObject.uid=%s,reason=%s", name, uid ? uid : "none",
	         reason);
	json_decref(cr);
	return kube_fx_count(k, KUBE_FX_CORE("events", ns, NULL), &(sg_kube_list_opts){.field_selector = sel});
}

/* The approver looked at the request and left it undecided: its
 * "Unprocessed" Event (one per request) is there. Evidence per request,
 * as the counters are not: any policy, Namespace or RBAC event, however
 * late its watch delivers it, passes over every undecided request again. */
#define WAIT_UNPROCESSED(ns, name) SG_WAIT_FOR(WAIT_MS, events_of((ns), (name), "Unprocessed") == 1)

static const char *policy_ready(const char *name)
{
	static char buf[2048];
	sg_kube_ref r = {.group = "policy.cert-manager.io", .version = "v1alpha1",
	                 .resource = "certificaterequestpolicies", .name = name};
	json_t *o = kube_fx_get(k, r);
	const json_t *c = kube_fx_cond(o, "Ready");
	buf[0] = '\0';
	if (c)
		snprintf(buf, sizeof(buf), "%s|%s|%s", json_string_value(json_object_get(c, "status")),
		         json_string_value(json_object_get(c, "reason")),
		         json_string_value(json_object_get(c, "message")));
	json_decref(o);
	return buf;
}

/* ---- a plugin of the test's own ---- */

static atomic_int plugin_mode; /* 0 approve, 1 deny, 2 error */
static atomic_int plugin_calls;

static int test_plugin(void *arg, const char *policy, const json_t *values, const sg_crpolicy_request *r,
                       const json_t *cr, bool *denied, char **message)
{
	(void)arg, (void)values, (void)r, (void)cr;
	atomic_fetch_add(&plugin_calls, 1);
	SG_ENSURE(strcmp(policy, "with-plugin") == 0, SG_EINTERNAL, "plugin called for %s", policy);
	int m = atomic_load(&plugin_mode);
	if (m == 2)
		return sg_error_set(SG_EBUSY, "test plugin: no answer");
	*denied = m == 1;
	*message = m == 1 ? strdup("test plugin says no") : NULL;
	return SG_OK;
}

static bool test_plugin_check(void *arg, const json_t *values, char **why)
{
	(void)arg;
	if (json_is_string(json_object_get(values, "ok")))
		return true;
	*why = strdup("values.ok is required");
	return false;
}

/* ---- tests ---- */

static void t_start(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/tests/controllers/fixtures/certificaterequests.crd.yaml"));
	SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/packaging/kubernetes/base/policy-crds.yaml"));
	APPLY("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" NS_A
	      "\",\"labels\":{\"team\":\"a\"}}}");
	APPLY("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" NS_B "\"}}");
	/* `use` of every policy for alice, in both namespaces. */
	APPLY("{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRole\",\"metadata\":{\"name\":"
	      "\"ap-use\"},\"rules\":[{\"apiGroups\":[\"policy.cert-manager.io\"],\"resources\":["
	      "\"certificaterequestpolicies\"],\"verbs\":[\"use\"]}]}");
	APPLY("{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":"
	      "\"ap-alice\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":"
	      "\"ap-use\"},\"subjects\":[{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"User\",\"name\":"
	      "\"alice\"}]}");
	/* From approver-policy's documentation: names under example.com for
	 * my-issuer. */
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"allow-example\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*.example.com\"},"
	      "\"dnsNames\":{\"values\":[\"*.example.com\"]},\"usages\":[\"digital signature\",\"server auth\"]},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"my-issuer\"}}}}");
	static const sg_approver_plugin pl = {"test-plugin", test_plugin_check, test_plugin, NULL};
	/* A signer list of another form is refused, naming the entry. */
	sg_approver_options bad = {.kube = k, .signer_names = "issuers.cert-manager.io/*, vault"};
	SG_CHECK(sg_approver_new(&ap, &bad) == SG_EINVAL && !ap);
	SG_CHECK(strstr(sg_error_last()->msg, "\"vault\" is not") != NULL);
	sg_approver_options o = {.kube = k, .plugins = &pl, .nplugins = 1, .workers = 2, .signer_names = SIGNERS};
	SG_CHECK_OK(sg_approver_new(&ap, &o));
	if (!ap)
		exit(1);
	SG_CHECK_OK(sg_ctrl_start(sg_approver_controller(ap)));
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("allow-example"), "True|Ready|", 11) == 0);
	SG_CHECK(strcmp(policy_ready("allow-example"),
	                "True|Ready|CertificateRequestPolicy is ready for approval evaluation") == 0);
}

static void t_approve_and_deny(void)
{
	cr_create(&(cr_spec){.ns = NS_A, .name = "ok-1"});
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "ok-1", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"allow-example\""));
	SG_CHECK(cr_condition_count(NS_A, "ok-1") == 1);

	cr_create(&(cr_spec){.ns = NS_A, .name = "bad-1", .san = "DNS:evil.test", .cn = "evil.test"});
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "bad-1", "Denied",
	                                      "True|policy.cert-manager.io|No policy approved this request: "
	                                      "[allow-example: "));
	char got[4096];
	SG_CHECK(cr_condition(NS_A, "bad-1", "Denied", got, sizeof(got)));
	SG_CHECK(strstr(got, "spec.allowed.dnsNames.values: Invalid value: ") != NULL);
	SG_CHECK(strstr(got, "evil.test") != NULL);
	SG_CHECK(strstr(got, "spec.allowed.commonName.value: Invalid value: ") != NULL);
	SG_CHECK(!cr_condition(NS_A, "bad-1", "Approved", got, sizeof(got)));

	/* Wildcards: '*' spans dots, and matches the literal wildcard name. */
	cr_create(&(cr_spec){.ns = NS_A, .name = "deep-1", .san = "DNS:a.b.example.com,DNS:*.example.com",
	                     .cn = "a.b.example.com"});
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "deep-1", "Approved", "True|"));

	/* A GeneralName type approver-policy always denies. */
	cr_create(&(cr_spec){.ns = NS_A, .name = "rid-1", .san = "DNS:a.example.com,RID:1.2.3.4"});
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "rid-1", "Denied", "True|policy.cert-manager.io|"));
}

static void t_unprocessed_until_bound(void)
{
	/* No policy for this issuer: no decision. */
	cr_create(&(cr_spec){.ns = NS_A, .name = "other-issuer-1", .issuer = "other-issuer"});
	WAIT_UNPROCESSED(NS_A, "other-issuer-1");
	SG_CHECK(cr_condition_count(NS_A, "other-issuer-1") == 0);

	/* bob may use no policy: no decision, until a RoleBinding lets him
	 * (the RBAC event re-evaluates, the cached answer is dropped). */
	cr_create(&(cr_spec){.ns = NS_A, .name = "bob-1", .user = "bob"});
	WAIT_UNPROCESSED(NS_A, "bob-1");
	SG_CHECK(cr_condition_count(NS_A, "bob-1") == 0);
	APPLY("{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"RoleBinding\",\"metadata\":{\"name\":"
	      "\"ap-bob\",\"namespace\":\"" NS_A "\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":"
	      "\"ClusterRole\",\"name\":\"ap-use\"},\"subjects\":[{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":"
	      "\"User\",\"name\":\"bob\"}]}");
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "bob-1", "Approved", "True|"));
	/* The binding is in ap-a only: bob in ap-b is still not bound. */
	cr_create(&(cr_spec){.ns = NS_B, .name = "bob-2", .user = "bob"});
	WAIT_UNPROCESSED(NS_B, "bob-2");
	SG_CHECK(cr_condition_count(NS_B, "bob-2") == 0);
	/* The SubjectAccessReviews were cached: fewer than the passes made. */
	SG_CHECK(stats(ap).sar_cached > 0);
}

static void t_namespace_selector_and_constraints(void)
{
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"team-a-short\"},\"spec\":{\"allowed\":{\"dnsNames\":{\"values\":[\"*.svc\"]},\"commonName\":"
	      "{\"value\":\"*\"},\"usages\":[\"digital signature\",\"server auth\"]},\"constraints\":{\"maxDuration\":\"1h\",\"privateKey\":{"
	      "\"algorithm\":\"ECDSA\"}},\"selector\":{\"issuerRef\":{\"name\":\"svc-*\"},\"namespace\":{"
	      "\"matchLabels\":{\"team\":\"a\"}}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("team-a-short"), "True|", 5) == 0);
	cr_create(&(cr_spec){.ns = NS_A, .name = "svc-1", .issuer = "svc-web", .san = "DNS:web.svc", .cn = "web.svc",
	                     .duration = "30m"});
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "svc-1", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"team-a-short\""));
	cr_create(&(cr_spec){.ns = NS_A, .name = "svc-long", .issuer = "svc-web", .san = "DNS:web.svc", .cn = "web.svc",
	                     .duration = "2h"});
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "svc-long", "Denied", "True|policy.cert-manager.io|No policy "
	                                                                  "approved this request: [team-a-short: "));
	char got[4096];
	SG_CHECK(cr_condition(NS_A, "svc-long", "Denied", got, sizeof(got)) &&
	         strstr(got, "spec.constraints.maxDuration") != NULL);
	cr_create(&(cr_spec){.ns = NS_A, .name = "svc-rsa", .issuer = "svc-web", .san = "DNS:web.svc", .cn = "web.svc",
	                     .duration = "30m", .rsa_bits = "2048"});
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "svc-rsa", "Denied", "True|"));
	SG_CHECK(cr_condition(NS_A, "svc-rsa", "Denied", got, sizeof(got)) &&
	         strstr(got, "spec.constraints.privateKey.algorithm") != NULL);
	/* ap-b has no team=a label: the policy does not apply there. */
	cr_create(&(cr_spec){.ns = NS_B, .name = "svc-b", .issuer = "svc-web", .san = "DNS:web.svc", .cn = "web.svc",
	                     .duration = "30m"});
	WAIT_UNPROCESSED(NS_B, "svc-b");
	SG_CHECK(cr_condition_count(NS_B, "svc-b") == 0);
	/* Labelled later: decided then. */
	SG_CHECK_OK(kube_env_label_namespace(k, NS_B, "team", "a"));
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_B, "svc-b", "Approved", "True|"));
}

static void t_not_ready_defers(void)
{
	/* A CEL rule that does not compile: NotReady, and a request only it
	 * would decide gets no decision (approver-policy evaluates Ready
	 * policies only). */
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"with-cel\"},\"spec\":{\"allowed\":{\"dnsNames\":{\"values\":[\"*\"],\"validations\":[{"
	      "\"rule\":\"self.endsWith('.cel'\"}]}},\"selector\":{\"issuerRef\":{\"name\":\"cel-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("with-cel"), "False|NotReady|CertificateRequestPolicy is not ready "
	                                                        "for approval evaluation: ", 74) == 0);
	cr_create(&(cr_spec){.ns = NS_A, .name = "cel-1", .issuer = "cel-issuer", .san = "DNS:x.cel", .cn = NULL});
	WAIT_UNPROCESSED(NS_A, "cel-1");
	SG_CHECK(cr_condition_count(NS_A, "cel-1") == 0);
}

/* CEL validations on the API server: approver-policy's documented
 * example.com policy decides; a SPIFFE rule bound to the request's
 * namespace approves there and denies elsewhere with approver-policy's
 * message. The example's Denied message is a shared case
 * (tests/policy/cases/example-com.denied) that `signetctl policy check`
 * must print too (tests/ctl/test_signetctl.sh). */
static void t_cel(void)
{
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"example-com\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"example.com\"},"
	      "\"dnsNames\":{\"values\":[\"example.com\",\"*.example.com\"],\"validations\":[{\"rule\":"
	      "\"!self.contains('*')\",\"message\":\"Wildcard certificates are not allowed\"}]},"
	      "\"usages\":[\"server auth\"]},\"constraints\":{\"privateKey\":{\"algorithm\":\"RSA\",\"minSize\":2048}},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"letsencrypt-prod\",\"kind\":\"Issuer\",\"group\":"
	      "\"cert-manager.io\"}}}}");
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"spiffe-ns\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*\"},\"uris\":{"
	      "\"validations\":[{\"rule\":\"self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')\"}]},"
	      "\"usages\":[\"digital signature\",\"server auth\"]},\"selector\":{\"issuerRef\":{\"name\":"
	      "\"mesh-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strcmp(policy_ready("example-com"), "True|Ready|" SG_CRPOLICY_READY_MESSAGE) == 0);
	SG_WAIT_FOR(WAIT_MS, strcmp(policy_ready("spiffe-ns"), "True|Ready|" SG_CRPOLICY_READY_MESSAGE) == 0);

	cr_create(&(cr_spec){.ns = NS_A,
	                     .name = "le-1",
	                     .issuer = "letsencrypt-prod",
	                     .cn = "example.com",
	                     .san = "DNS:www.example.com",
	                     .rsa_bits = "2048",
	                     .usage = "server auth"});
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "le-1", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"example-com\""));
	cr_create(&(cr_spec){.ns = NS_A,
	                     .name = "le-2",
	                     .issuer = "letsencrypt-prod",
	                     .cn = "example.com",
	                     .san = "DNS:*.example.com",
	                     .rsa_bits = "2048",
	                     .usage = "server auth"});
	char denied[1024], want[1100];
	shared_message("example-com.denied", denied, sizeof(denied));
	snprintf(want, sizeof(want), "True|policy.cert-manager.io|%s", denied);
	SG_CHECK(strstr(denied, "Wildcard certificates are not allowed]") != NULL);
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "le-2", "Denied", want));

	cr_create(&(cr_spec){.ns = NS_A,
	                     .name = "mesh-1",
	                     .issuer = "mesh-issuer",
	                     .cn = "web",
	                     .san = "URI:spiffe://cluster.local/ns/" NS_A "/sa/web"});
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "mesh-1", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"spiffe-ns\""));
	cr_create(&(cr_spec){.ns = NS_B,
	                     .name = "mesh-2",
	                     .issuer = "mesh-issuer",
	                     .cn = "web",
	                     .san = "URI:spiffe://cluster.local/ns/" NS_A "/sa/web"});
	SG_WAIT_FOR(WAIT_MS,
	            decided_as(NS_B, "mesh-2", "Denied",
	                       "True|policy.cert-manager.io|No policy approved this request: [spiffe-ns: "
	                       "spec.allowed.uris.validations[0]: Invalid value: \"spiffe://cluster.local/ns/" NS_A
	                       "/sa/web\": failed rule: self.startsWith('spiffe://cluster.local/ns/' + "
	                       "cr.namespace + '/sa/')]"));
}

static void t_plugin(void)
{
	/* Values the plugin refuses: NotReady. */
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"with-plugin\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*\"},\"dnsNames\":{"
	      "\"values\":[\"*\"]},\"usages\":[\"digital signature\",\"server auth\"]},\"plugins\":{\"test-plugin\":{\"values\":{\"nope\":\"x\"}}},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"plugin-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strstr(policy_ready("with-plugin"), "values.ok is required") != NULL);
	SG_CHECK(strncmp(policy_ready("with-plugin"), "False|NotReady|", 15) == 0);
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"with-plugin\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*\"},\"dnsNames\":{"
	      "\"values\":[\"*\"]},\"usages\":[\"digital signature\",\"server auth\"]},\"plugins\":{\"test-plugin\":{\"values\":{\"ok\":\"yes\"}}},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"plugin-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("with-plugin"), "True|", 5) == 0);

	/* ERROR: retried, never approved; then the answer comes. */
	atomic_store(&plugin_mode, 2);
	int calls0 = atomic_load(&plugin_calls);
	cr_create(&(cr_spec){.ns = NS_A, .name = "plug-1", .issuer = "plugin-issuer"});
	SG_WAIT_FOR(WAIT_MS, atomic_load(&plugin_calls) >= calls0 + 2); /* asked again after the error */
	SG_CHECK(cr_condition_count(NS_A, "plug-1") == 0);
	atomic_store(&plugin_mode, 1);
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "plug-1", "Denied", "True|"));
	char got[4096];
	SG_CHECK(cr_condition(NS_A, "plug-1", "Denied", got, sizeof(got)) &&
	         strstr(got, "[with-plugin: test plugin says no]") != NULL);
	atomic_store(&plugin_mode, 0);
	cr_create(&(cr_spec){.ns = NS_A, .name = "plug-2", .issuer = "plugin-issuer"});
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "plug-2", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"with-plugin\""));
}

static bool idle(void);

static void t_two_approvers(void)
{
	/* The counters settle first: the test before saw its last decision
	 * through a GET, which can come before the approver's PUT returns and
	 * counts it. */
	SG_WAIT_FOR(WAIT_MS, idle());
	/* The same configuration, as two replicas have. */
	static const sg_approver_plugin pl = {"test-plugin", test_plugin_check, test_plugin, NULL};
	sg_approver_options o = {.kube = k, .plugins = &pl, .nplugins = 1, .workers = 2, .signer_names = SIGNERS};
	SG_CHECK_OK(sg_approver_new(&ap2, &o));
	if (!ap2)
		exit(1);
	SG_CHECK_OK(sg_ctrl_start(sg_approver_controller(ap2)));
	uint64_t before = stats(ap).approved + stats(ap2).approved;
	uint64_t errors_before = stats(ap).errors + stats(ap2).errors;
	char name[32];
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "many-%02d", i);
		cr_create(&(cr_spec){.ns = NS_A, .name = name});
	}
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "many-%02d", i);
		SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, name, "Approved", "True|"));
		SG_CHECK(cr_condition_count(NS_A, name) == 1);
	}
	/* Each written once: the loser of a race finds it decided (or a 409).
	 * A write counts when its answer says it took; on a loaded machine a
	 * PUT can time out after the API server committed it, and the next
	 * pass finds the request decided (a conflict, not an approval). So:
	 * never more than one count per request, and every request is either
	 * counted or stood behind a failed pass. */
	SG_WAIT_FOR(WAIT_MS,
	            stats(ap).approved + stats(ap2).approved + (stats(ap).errors + stats(ap2).errors - errors_before) >=
	                before + 20);
	SG_CHECK(stats(ap).approved + stats(ap2).approved <= before + 20);
	sg_approver_free(ap2);
	ap2 = NULL;
}

/* The approver has nothing queued or in hand. */
static bool idle(void)
{
	sg_ctrl_stats s;
	sg_ctrl_stats_get(sg_approver_controller(ap), &s);
	return s.queued == 0 && s.active == 0;
}

static sg_kube_ref policy_ref(const char *name)
{
	return (sg_kube_ref){.group = "policy.cert-manager.io",
	                     .version = "v1alpha1",
	                     .resource = "certificaterequestpolicies",
	                     .name = name};
}

/* A policy that applies but is not Ready (here: a plugin this approver
 * does not know) holds back another's denial: a denial is final, and the
 * policy, once fixed, approves. (approver-policy defers only for a policy
 * with no Ready condition yet, and lets the other deny.) */
static void t_not_ready_holds_denial(void)
{
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"nr-allow\"},\"spec\":{" ALLOW_ALL ",\"plugins\":{\"no-such-plugin\":{}},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"nr-issuer\"}}}}");
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"nr-strict\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*.strict\"},\"dnsNames\":{"
	      "\"values\":[\"*.strict\"]},\"usages\":[\"digital signature\",\"server auth\"]},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"nr-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("nr-allow"), "False|NotReady|", 15) == 0);
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("nr-strict"), "True|", 5) == 0);
	sg_approver_stats s0 = stats(ap);
	cr_create(&(cr_spec){.ns = NS_A, .name = "nr-1", .issuer = "nr-issuer"});
	SG_WAIT_FOR(WAIT_MS, stats(ap).deferred > s0.deferred);
	SG_CHECK(cr_condition_count(NS_A, "nr-1") == 0);
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"nr-allow\"},\"spec\":{" ALLOW_ALL
	      ",\"selector\":{\"issuerRef\":{\"name\":\"nr-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "nr-1", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"nr-allow\""));
}

/* An evaluation error stops the review: "zz-after-plugin", after
 * "with-plugin" in name order, would approve, but never past an error. */
static void t_error_stops_review(void)
{
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"zz-after-plugin\"},\"spec\":{" ALLOW_ALL ",\"selector\":{\"issuerRef\":{\"name\":"
	      "\"plugin-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("zz-after-plugin"), "True|", 5) == 0);
	atomic_store(&plugin_mode, 2);
	int calls0 = atomic_load(&plugin_calls);
	cr_create(&(cr_spec){.ns = NS_A, .name = "plug-3", .issuer = "plugin-issuer"});
	SG_WAIT_FOR(WAIT_MS, atomic_load(&plugin_calls) >= calls0 + 2); /* asked again: no decision came between */
	SG_CHECK(cr_condition_count(NS_A, "plug-3") == 0);
	atomic_store(&plugin_mode, 0);
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "plug-3", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"with-plugin\""));
	SG_CHECK_OK(kube_fx_delete(k, policy_ref("zz-after-plugin")));
}

/* A CSR that does not parse: Unprocessed when no policy applies (the CSR
 * is never read), an error retried when one does; never decided. */
static void t_unparsable_request(void)
{
	static const char not_a_csr[] = "bm90IGEgQ1NS"; /* "not a CSR" */
	SG_WAIT_FOR(WAIT_MS, idle());
	sg_approver_stats s0 = stats(ap);
	cr_create(&(cr_spec){.ns = NS_A, .name = "broken-1", .issuer = "nobody-issuer", .request = not_a_csr});
	SG_WAIT_FOR(WAIT_MS, events_of(NS_A, "broken-1", "Unprocessed") == 1);
	SG_WAIT_FOR(WAIT_MS, idle());
	SG_CHECK(stats(ap).errors == s0.errors);
	SG_CHECK(cr_condition_count(NS_A, "broken-1") == 0);

	s0 = stats(ap);
	cr_create(&(cr_spec){.ns = NS_A, .name = "broken-2", .request = not_a_csr}); /* allow-example applies */
	SG_WAIT_FOR(WAIT_MS, stats(ap).errors >= s0.errors + 2);
	SG_CHECK(cr_condition_count(NS_A, "broken-2") == 0);
	SG_CHECK_OK(kube_fx_delete(k, cr_ref(NS_A, "broken-2")));
}

/* Requests for a signer outside the approver's list are left alone: never
 * evaluated (vault-any would approve them, or, had alice no binding, leave
 * an "Unprocessed" Event), so no SubjectAccessReview either; an Issuer of
 * cert-manager's is decided. vault-2, created last, is the barrier: the
 * informer queues in creation order, so once vault-2 is decided and the
 * approver idle, the passes over the other two are done. */
static void t_signer_names(void)
{
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"vault-any\"},\"spec\":{" ALLOW_ALL ",\"selector\":{\"issuerRef\":{\"name\":\"vault\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("vault-any"), "True|", 5) == 0);
	sg_approver_stats s0 = stats(ap);
	cr_create(&(cr_spec){
	    .ns = NS_A, .name = "vault-1", .issuer = "vault", .kind = "VaultIssuer", .group = "vault.example.com"});
	cr_create(&(cr_spec){.ns = NS_A, .name = "vault-ci", .issuer = "vault", .kind = "ClusterIssuer"});
	cr_create(&(cr_spec){.ns = NS_A, .name = "vault-2", .issuer = "vault"});
	SG_WAIT_FOR(WAIT_MS, decided_as(NS_A, "vault-2", "Approved",
	                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                "\"vault-any\""));
	SG_WAIT_FOR(WAIT_MS, idle());
	SG_CHECK(stats(ap).skipped >= s0.skipped + 2);
	SG_CHECK(cr_condition_count(NS_A, "vault-1") == 0);
	SG_CHECK(cr_condition_count(NS_A, "vault-ci") == 0);
	SG_CHECK(events_of(NS_A, "vault-1", "Unprocessed") == 0);
	SG_CHECK(events_of(NS_A, "vault-ci", "Unprocessed") == 0);
}

/* A Namespace created a moment before its request may not be in the
 * approver's cache yet: its labels are read live, never taken as "none"
 * (here that would let gap-deny deny what gap-allow approves). The gap is
 * made certain by stopping the approver's Namespace informer (its third
 * watch, W_NAMESPACES in sg_approver.c; the store is kept) while the
 * Namespaces are created, as a watch that lags behind would leave it. */
static void t_namespace_cache_gap(void)
{
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"gap-allow\"},\"spec\":{" ALLOW_ALL ",\"selector\":{\"issuerRef\":{\"name\":\"gap-issuer\"},"
	      "\"namespace\":{\"matchLabels\":{\"gap\":\"yes\"}}}}}");
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"gap-deny\"},\"spec\":{\"allowed\":{\"dnsNames\":{\"values\":[\"*.never\"]}},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"gap-issuer\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("gap-allow"), "True|", 5) == 0);
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("gap-deny"), "True|", 5) == 0);
	enum { N = 2 };
	char ns[N][16];
	sg_kube_informer *namespaces = sg_ctrl_informer(sg_approver_controller(ap), 2);
	sg_kube_informer_stop(namespaces);
	for (int i = 0; i < N; i++) {
		snprintf(ns[i], sizeof(ns[i]), "ap-gap-%d", i);
		json_t *cr = cr_object(&(cr_spec){.ns = ns[i], .name = "gap", .issuer = "gap-issuer"});
		SG_CHECK_OK(kube_fx_create(k, (sg_kube_ref){.version = "v1", .resource = "namespaces"},
		                           kube_fx_namespace(ns[i], "gap", "yes")));
		SG_CHECK_OK(kube_fx_create(k, cr_ref(ns[i], NULL), cr));
	}
	for (int i = 0; i < N; i++)
		SG_WAIT_FOR(WAIT_MS, decided_as(ns[i], "gap", "Approved",
		                                "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
		                                "\"gap-allow\""));
	SG_CHECK(!sg_kube_informer_get(namespaces, NULL, ns[0])); /* it was a gap */
	SG_CHECK_OK(sg_kube_informer_start(namespaces));
}

/* A request deleted and made again under the same name (cert-manager does
 * so when a Certificate is made again: its requests are <name>-1, ...)
 * while the approver's cache still holds the first one: a decision made
 * on the cached request is not written on the new one. Here the first
 * asks for a name the policy allows, the second for one it does not; the
 * cache stands still (its informer stopped) while the policy that decides
 * arrives. Before, the live read took whatever held the name, and the new
 * request was Approved unevaluated. */
static void t_recreated_same_name(void)
{
	cr_create(&(cr_spec){.ns = NS_A, .name = "again-1", .issuer = "again-issuer"});
	WAIT_UNPROCESSED(NS_A, "again-1");
	SG_WAIT_FOR(WAIT_MS, idle());
	sg_kube_informer *requests = sg_ctrl_informer(sg_approver_controller(ap), 0); /* its request watch */
	sg_kube_informer_stop(requests);
	SG_CHECK_OK(kube_fx_delete(k, cr_ref(NS_A, "again-1")));
	cr_create(&(cr_spec){
	    .ns = NS_A, .name = "again-1", .issuer = "again-issuer", .san = "DNS:evil.test", .cn = "evil.test"});
	uint64_t c0 = stats(ap).conflicts, a0 = stats(ap).approved;
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"again-allow\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*.example.com\"},"
	      "\"dnsNames\":{\"values\":[\"*.example.com\"]},\"usages\":[\"digital signature\",\"server auth\"]},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"again-issuer\"}}}}");
	/* the cached request is evaluated, approved, and not written */
	SG_WAIT_FOR(WAIT_MS, stats(ap).conflicts > c0);
	SG_CHECK(stats(ap).approved == a0);
	SG_CHECK(cr_condition_count(NS_A, "again-1") == 0);
	/* caught up: the new request is evaluated on its own, and denied */
	SG_CHECK_OK(sg_kube_informer_start(requests));
	SG_WAIT_FOR(WAIT_MS, decided_starting(NS_A, "again-1", "Denied",
	                                      "True|policy.cert-manager.io|No policy approved this request: "
	                                      "[again-allow: "));
	char got[4096];
	SG_CHECK(!cr_condition(NS_A, "again-1", "Approved", got, sizeof(got)));
	SG_CHECK(stats(ap).approved == a0);
}

/* More policies than the approver once held (1,024): all compiled, the
 * last in name order approves. Only this test's requests select them. */
static void t_many_policies(void)
{
	enum { N = 1030 };
	char name[32];
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "many-%04d", i);
		char text[512];
		snprintf(text, sizeof(text),
		         "{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\","
		         "\"metadata\":{\"name\":\"%s\"},\"spec\":{%s,\"selector\":{\"issuerRef\":{\"name\":"
		         "\"many-issuer\"}}}}",
		         name, i == N - 1 ? ALLOW_ALL : "\"allowed\":{\"dnsNames\":{\"values\":[\"*.never\"]}}");
		json_t *p = json_loads(text, 0, NULL);
		SG_CHECK_OK(kube_fx_ensure(k, policy_ref(NULL), p));
	}
	/* The approving one in the cache before the request: a decision is
	 * final, and the others alone deny. */
	SG_WAIT_FOR(120000u, strncmp(policy_ready("many-1029"), "True|", 5) == 0);
	cr_create(&(cr_spec){.ns = NS_A, .name = "many-policies", .issuer = "many-issuer"});
	SG_WAIT_FOR(120000u, decided_starting(NS_A, "many-policies", "Approved",
	                                      "True|policy.cert-manager.io|Approved by CertificateRequestPolicy: "
	                                      "\"many-1029\""));
}

static bool cr_has_certificate(const char *ns, const char *name)
{
	json_t *o = cr_get(ns, name);
	const char *c = json_string_value(json_object_get(json_object_get(o, "status"), "certificate"));
	bool yes = c && *c;
	json_decref(o);
	return yes;
}

static bool cr_ready_reason(const char *ns, const char *name, const char *reason)
{
	json_t *o = cr_get(ns, name);
	const char *r = kube_fx_cond_str(o, "Ready", "reason");
	bool yes = r && strcmp(r, reason) == 0;
	json_decref(o);
	return yes;
}

static void t_with_issuer(void)
{
	static fixture fx;
	sg_appliance *app = kube_fx_ca(&fx, 1);
	SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/packaging/kubernetes/base/crds.yaml"));
	sg_kubesign_ca cas[1] = {{.name = "default", .app = app}};
	sg_signetissuer *iss = NULL;
	sg_cmissuer *cm = NULL;
	sg_signetissuer_options io = {.kube = k, .cas = cas, .ncas = 1, .check_interval = 1};
	sg_cmissuer_options mo = {.kube = k, .cas = cas, .ncas = 1};
	SG_CHECK_OK(sg_signetissuer_new(&iss, &io));
	SG_CHECK_OK(sg_cmissuer_new(&cm, &mo));
	if (!iss || !cm)
		exit(1);
	SG_CHECK_OK(sg_ctrl_start(sg_signetissuer_controller(iss)));
	SG_CHECK_OK(sg_ctrl_start(sg_cmissuer_controller(cm)));
	APPLY("{\"apiVersion\":\"signet.dev/v1alpha1\",\"kind\":\"SignetIssuer\",\"metadata\":{\"name\":\"hsm\","
	      "\"namespace\":\"" NS_A "\"},\"spec\":{\"caName\":\"default\"}}");
	APPLY("{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\",\"metadata\":"
	      "{\"name\":\"signet-hsm\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*.hsm.example\"},"
	      "\"dnsNames\":{\"values\":[\"*.hsm.example\"]},\"usages\":[\"digital signature\",\"server auth\"]},"
	      "\"selector\":{\"issuerRef\":{\"name\":\"hsm\",\"kind\":\"SignetIssuer\",\"group\":\"signet.dev\"}}}}");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("signet-hsm"), "True|", 5) == 0);
	/* cr_create names Issuer/cert-manager.io: write these two by hand. */
	const char *names[2] = {"hsm-ok", "hsm-bad"};
	const char *sans[2] = {"DNS:web.hsm.example", "DNS:web.elsewhere.example"};
	const char *cns[2] = {"web.hsm.example", "web.elsewhere.example"};
	for (int i = 0; i < 2; i++) {
		size_t len;
		csr_opts o = {.alg = "EC", .param = "P-256", .san = sans[i], .cn = cns[i]};
		char *pem = make_csr(&o, &len);
		char *req = b64n(pem, strlen(pem));
		json_t *cr = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:{s:s, s:s, s:s}, s:s, s:[s], s:[s,s]}}",
		                       "apiVersion", "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name",
		                       names[i], "namespace", NS_A, "spec", "request", req, "issuerRef", "name", "hsm", "kind",
		                       "SignetIssuer", "group", "signet.dev", "username", "alice", "groups",
		                       "system:authenticated", "usages", "digital signature", "server auth");
		SG_CHECK_OK(kube_fx_create(k, cr_ref(NS_A, NULL), cr));
		free(req);
		free(pem);
	}
	SG_WAIT_FOR(WAIT_MS, cr_has_certificate(NS_A, "hsm-ok"));
	SG_CHECK(decided_starting(NS_A, "hsm-ok", "Approved", "True|policy.cert-manager.io|"));
	SG_WAIT_FOR(WAIT_MS, cr_ready_reason(NS_A, "hsm-bad", "Denied"));
	SG_CHECK(decided_starting(NS_A, "hsm-bad", "Denied", "True|policy.cert-manager.io|"));
	SG_CHECK(!cr_has_certificate(NS_A, "hsm-bad"));
	sg_cmissuer_free(cm);
	sg_signetissuer_free(iss);
	sg_appliance_free(app);
	fixture_free(&fx);
}

static void t_zz_stop(void)
{
	sg_approver_free(ap);
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_approve_and_deny), SG_TEST(t_unprocessed_until_bound),
             SG_TEST(t_namespace_selector_and_constraints), SG_TEST(t_not_ready_defers), SG_TEST(t_cel),
             SG_TEST(t_plugin), SG_TEST(t_not_ready_holds_denial), SG_TEST(t_error_stops_review),
             SG_TEST(t_unparsable_request), SG_TEST(t_signer_names), SG_TEST(t_namespace_cache_gap),
             SG_TEST(t_recreated_same_name), SG_TEST(t_two_approvers), SG_TEST(t_with_issuer), SG_TEST(t_many_policies),
             SG_TEST(t_zz_stop))
