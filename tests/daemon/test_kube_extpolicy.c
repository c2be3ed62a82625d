/*
 * The design's ExternalPolicyServer against a real kube-apiserver, as
 * signetd wires it (daemon/sg_cluster.c): the CRDs of policy-crds.yaml, the
 * ExternalPolicyServer controller (controllers/sg_extpolicy.c) filling
 * sg_policyserver's table, and the policy approver calling the servers a
 * CertificateRequestPolicy lists in spec.externalPolicyServers — over TLS,
 * to policy_server.py (Debian's python3-grpcio), whose answer the
 * request's name chooses.
 *
 * What is shown:
 *   - a CA bundle from a ConfigMap (the design's Case 4 form, configMapRef
 *     with name and key): Ready, and a request approved or denied by the
 *     server with its reason in the Denied message;
 *   - a server built to the design's numbering (APPROVED = 0) is never
 *     read as approving: the request stays undecided;
 *   - an empty CA bundle (the design: "may be empty") is Ready=False
 *     CABundleMissing, and a request of a policy listing it waits, then is
 *     decided once the bundle is written;
 *   - caBundle.data (base64), spec.secretRef (the design's Case 6 form),
 *     cainjector's inject-ca-from-secret (refused without
 *     allow-direct-injection) and inject-apiserver-ca, two sources at once
 *     refused, a missing ConfigMap named in the condition;
 *   - a deleted server: the request waits ("does not exist").
 * Waiting is for states (SG_WAIT_FOR), never for time.
 */
#include "sg_approver.h"
#include "sg_extpolicy.h"
#include "sg_policyserver.h"

#include "kube_pem.h"
#include "openssl_fixture.h"
#include "sg_log.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include "policy_server_fx.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define NS "eps-a"
#define CA_NS "eps-ca"
#define WAIT_MS 60000u
#define APPLY(json_text) SG_CHECK(kube_fx_apply_text(k, (json_text)))

static sg_kube *k;
static sg_approver *ap;
static sg_extpolicy *ep;
static sg_policyserver *ps;
static char *ca_pem, *ca_b64;
static char endpoint[64];

/* ---- the wiring, as daemon/sg_cluster.c has it ---- */

static int on_set(void *arg, const char *name, const char *endpoint_, const char *ca, size_t ca_len, bool *changed)
{
	(void)arg;
	int rc = sg_policyserver_resource_set(ps, name, endpoint_, ca, ca_len, changed);
	if (*changed)
		sg_ctrl_resync(sg_approver_controller(ap));
	return rc;
}

static void on_remove(void *arg, const char *name)
{
	(void)arg;
	sg_policyserver_resource_remove(ps, name);
}

static void on_clear(void *arg)
{
	(void)arg;
	sg_policyserver_resource_clear(ps);
}

/* ---- objects ---- */

static sg_kube_ref eps_ref(const char *name)
{
	return (sg_kube_ref){.group = "policy.cert-manager.io",
	                     .version = "v1alpha1",
	                     .resource = "externalpolicyservers",
	                     .name = name};
}

/* The Ready condition as "status|reason|message" ("" when none). */
static const char *eps_ready(const char *name)
{
	static char buf[2048];
	json_t *o = kube_fx_get(k, eps_ref(name));
	const json_t *c = kube_fx_cond(o, "Ready");
	buf[0] = '\0';
	if (c)
		snprintf(buf, sizeof(buf), "%s|%s|%s", json_string_value(json_object_get(c, "status")),
		         json_string_value(json_object_get(c, "reason")),
		         json_string_value(json_object_get(c, "message")));
	json_decref(o);
	return buf;
}

static bool eps_ready_is(const char *name, const char *prefix)
{
	return strncmp(eps_ready(name), prefix, strlen(prefix)) == 0;
}

static bool eps_ready_has(const char *name, const char *prefix, const char *part)
{
	const char *r = eps_ready(name);
	return strncmp(r, prefix, strlen(prefix)) == 0 && strstr(r, part) != NULL;
}

/* An ExternalPolicyServer with spec (JSON text of its members) and
 * annotations (JSON text of an object, or NULL). */
static void eps_apply(const char *name, const char *annotations, const char *spec)
{
	char text[8192];
	snprintf(text, sizeof(text),
	         "{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"ExternalPolicyServer\","
	         "\"metadata\":{\"name\":\"%s\"%s%s},\"spec\":{%s}}",
	         name, annotations ? ",\"annotations\":" : "", annotations ? annotations : "", spec);
	APPLY(text);
}

static const char *policy_ready(const char *name)
{
	static char buf[2048];
	sg_kube_ref r = {.group = "policy.cert-manager.io",
	                 .version = "v1alpha1",
	                 .resource = "certificaterequestpolicies",
	                 .name = name};
	json_t *o = kube_fx_get(k, r);
	const json_t *c = kube_fx_cond(o, "Ready");
	buf[0] = '\0';
	if (c)
		snprintf(buf, sizeof(buf), "%s|%s", json_string_value(json_object_get(c, "status")),
		         json_string_value(json_object_get(c, "message")));
	json_decref(o);
	return buf;
}

/* A policy for issuer <issuer> listing the servers (JSON text of an
 * array). */
static void policy_apply(const char *name, const char *issuer, const char *servers)
{
	char text[2048];
	snprintf(text, sizeof(text),
	         "{\"apiVersion\":\"policy.cert-manager.io/v1alpha1\",\"kind\":\"CertificateRequestPolicy\","
	         "\"metadata\":{\"name\":\"%s\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*\"},"
	         "\"dnsNames\":{\"values\":[\"*\"]},\"usages\":[\"digital signature\",\"server auth\"]},"
	         "\"selector\":{\"issuerRef\":{\"name\":\"%s\"}},\"externalPolicyServers\":%s}}",
	         name, issuer, servers);
	APPLY(text);
}

static sg_kube_ref cr_ref(const char *name)
{
	return (sg_kube_ref){
	    .group = "cert-manager.io", .version = "v1", .resource = "certificaterequests", .ns = NS, .name = name};
}

static void cr_create(const char *name, const char *issuer)
{
	size_t len;
	csr_opts o = {.alg = "EC", .param = "P-256", .san = "DNS:a.example.com", .cn = "a.example.com"};
	char *pem = make_csr(&o, &len);
	char *req = b64n(pem, strlen(pem));
	json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:{s:s, s:s, s:s}, s:s, s:[s], s:s, s:[s,s]}}",
	                        "apiVersion", "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name",
	                        name, "namespace", NS, "spec", "request", req, "issuerRef", "name", issuer, "kind",
	                        "Issuer", "group", "cert-manager.io", "username", "alice", "groups",
	                        "system:authenticated", "uid", "u-1", "usages", "digital signature", "server auth");
	SG_CHECK_OK(kube_fx_create(k, cr_ref(NULL), obj));
	free(req);
	free(pem);
}

/* The request's condition type as "status|message" ("" when none). */
static const char *cr_cond(const char *name, const char *type)
{
	static char buf[4096];
	json_t *o = kube_fx_get(k, cr_ref(name));
	const json_t *c = kube_fx_cond(o, type);
	buf[0] = '\0';
	if (c)
		snprintf(buf, sizeof(buf), "%s|%s", json_string_value(json_object_get(c, "status")),
		         json_string_value(json_object_get(c, "message")));
	json_decref(o);
	return buf;
}

static bool undecided(const char *name)
{
	return !cr_cond(name, "Approved")[0] && !cr_cond(name, "Denied")[0];
}

static uint64_t errors(void)
{
	sg_approver_stats s;
	sg_approver_stats_get(ap, &s);
	return s.errors;
}

/* The approver tried name and could not decide: its error counter moved
 * twice since e0 (two passes, so the request was seen after its create)
 * and the request has no condition. */
#define WAIT_UNDECIDED(name, e0)                                                                                       \
	do {                                                                                                           \
		SG_WAIT_FOR(WAIT_MS, errors() >= (e0) + 2);                                                            \
		SG_CHECK(undecided(name));                                                                             \
	} while (0)

/* ---- tests ---- */

static void t_start(void)
{
	if (!server())
		exit(1);
	snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", srv.tls);
	ca_pem = read_text(srv.ca);
	SG_CHECK(ca_pem != NULL);
	ca_b64 = b64n(ca_pem, strlen(ca_pem));
	k = kube_fx_start(SG_LOG_WARN);
	SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/tests/controllers/fixtures/certificaterequests.crd.yaml"));
	SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/packaging/kubernetes/base/policy-crds.yaml"));
	APPLY("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" NS "\"}}");
	APPLY("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"" CA_NS "\"}}");
	APPLY("{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRole\",\"metadata\":{\"name\":"
	      "\"eps-use\"},\"rules\":[{\"apiGroups\":[\"policy.cert-manager.io\"],\"resources\":["
	      "\"certificaterequestpolicies\"],\"verbs\":[\"use\"]}]}");
	APPLY(
	    "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":"
	    "\"eps-alice\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":"
	    "\"eps-use\"},\"subjects\":[{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"User\",\"name\":"
	    "\"alice\"}]}");

	sg_policyserver_options po = {.timeout_ms = 15000};
	SG_CHECK_OK(sg_policyserver_new(&ps, &po));
	sg_approver_options ao = {.kube = k,
	                          .workers = 2,
	                          .servers = {sg_policyserver_evaluate_servers, ps},
	                          .signer_names = "issuers.cert-manager.io/*"};
	SG_CHECK_OK(sg_approver_new(&ap, &ao));
	sg_extpolicy_options eo = {.kube = k, .ns = CA_NS, .set = on_set, .remove = on_remove, .clear = on_clear};
	SG_CHECK_OK(sg_extpolicy_new(&ep, &eo));
	if (!ps || !ap || !ep)
		exit(1);
	SG_CHECK_OK(sg_ctrl_start(sg_extpolicy_controller(ep)));
	SG_CHECK_OK(sg_ctrl_start(sg_approver_controller(ap)));
}

/* The design's Case 4: configMapRef {name, key}; the ConfigMap comes after
 * the server. */
static void t_configmap(void)
{
	char spec[4096];
	snprintf(spec, sizeof(spec),
	         "\"endpoint\":\"%s\",\"caBundle\":{\"configMapRef\":{\"name\":"
	         "\"cert-manager-istio-csr-policy-tls\",\"key\":\"ca.tls\"}}",
	         endpoint);
	eps_apply("istio-csr", NULL, spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("istio-csr", "False|CABundleMissing|",
	                                   "ConfigMap " CA_NS "/cert-manager-istio-csr-policy-tls does not exist"));
	json_t *cm =
	    json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap", "metadata", "name",
	              "cert-manager-istio-csr-policy-tls", "namespace", CA_NS, "data", "ca.tls", ca_pem);
	SG_CHECK_OK(kube_fx_create(k, (sg_kube_ref){.version = "v1", .resource = "configmaps", .ns = CA_NS}, cm));
	/* no watch on ConfigMaps: read again at the waiting object's recheck */
	SG_WAIT_FOR(WAIT_MS, eps_ready_is("istio-csr", "True|Ready|"));
	SG_CHECK(strstr(eps_ready("istio-csr"), "ConfigMap " CA_NS "/cert-manager-istio-csr-policy-tls key ca.tls"));

	policy_apply("with-eps", "eps-issuer", "[\"istio-csr\"]");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("with-eps"), "True|", 5) == 0);
	cr_create("approve-cm", "eps-issuer");
	SG_WAIT_FOR(WAIT_MS, strcmp(cr_cond("approve-cm", "Approved"),
	                            "True|Approved by CertificateRequestPolicy: \"with-eps\"") == 0);
	cr_create("deny-cm", "eps-issuer");
	SG_WAIT_FOR(WAIT_MS, strcmp(cr_cond("deny-cm", "Denied"),
	                            "True|No policy approved this request: [with-eps: external policy server "
	                            "istio-csr: A says no to deny-cm]") == 0);
	if (!cr_cond("deny-cm", "Denied")[0])
		fprintf(stderr, "deny-cm: %s\n", cr_cond("deny-cm", "Denied"));
}

/* A server answering in the design's numbering (APPROVED = 0 in field 1):
 * refused, so the request is never approved; ERROR likewise retries. */
static void t_design_numbering(void)
{
	uint64_t e0 = errors();
	cr_create("design-approve-1", "eps-issuer");
	cr_create("error-1", "eps-issuer");
	WAIT_UNDECIDED("design-approve-1", e0);
	SG_CHECK(undecided("error-1"));
}

/* The design: a bundle "may be empty", and a policy listing the server
 * evaluates nothing until it has one; then the waiting request is decided. */
static void t_empty_then_data(void)
{
	char spec[4096];
	snprintf(spec, sizeof(spec), "\"endpoint\":\"%s\"", endpoint);
	eps_apply("later", NULL, spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_is("later", "False|CABundleMissing|no CA bundle"));
	policy_apply("with-later", "later-issuer", "[\"later\"]");
	SG_WAIT_FOR(WAIT_MS, strncmp(policy_ready("with-later"), "True|", 5) == 0);
	uint64_t e0 = errors();
	cr_create("approve-later", "later-issuer");
	WAIT_UNDECIDED("approve-later", e0);
	snprintf(spec, sizeof(spec), "\"endpoint\":\"%s\",\"caBundle\":{\"data\":\"%s\"}", endpoint, ca_b64);
	eps_apply("later", NULL, spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("later", "True|Ready|", "spec.caBundle.data"));
	SG_WAIT_FOR(WAIT_MS, strcmp(cr_cond("approve-later", "Approved"),
	                            "True|Approved by CertificateRequestPolicy: \"with-later\"") == 0);
}

/* Where else a bundle comes from, and what is refused. */
static void t_sources(void)
{
	char spec[4096];
	json_t *sec = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "Secret", "metadata",
	                        "name", "policy-ca", "namespace", CA_NS, "data", "ca.crt", ca_b64);
	SG_CHECK_OK(kube_fx_create(k, (sg_kube_ref){.version = "v1", .resource = "secrets", .ns = CA_NS}, sec));
	/* the design's Case 6: secretRef directly under spec */
	snprintf(spec, sizeof(spec), "\"endpoint\":\"%s\",\"secretRef\":{\"name\":\"policy-ca\",\"key\":\"ca.crt\"}",
	         endpoint);
	eps_apply("manual", NULL, spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("manual", "True|Ready|", "Secret " CA_NS "/policy-ca key ca.crt"));
	/* cainjector's Secret source needs the Secret's consent */
	snprintf(spec, sizeof(spec), "\"endpoint\":\"%s\"", endpoint);
	eps_apply("injected", "{\"cert-manager.io/inject-ca-from-secret\":\"" CA_NS "/policy-ca\"}", spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("injected", "False|InvalidSpec|", "does not allow injection"));
	SG_CHECK_OK(kube_fx_patch(
	    k, (sg_kube_ref){.version = "v1", .resource = "secrets", .ns = CA_NS, .name = "policy-ca"},
	    json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "cert-manager.io/allow-direct-injection", "true")));
	/* read again at the next recheck (no watch on Secrets): touch the
	 * object to have it now */
	eps_apply("injected", "{\"cert-manager.io/inject-ca-from-secret\":\"" CA_NS "/policy-ca\",\"touch\":\"1\"}",
	          spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("injected", "True|Ready|", "Secret " CA_NS "/policy-ca (ca.crt)"));
	/* the design's Case 5: inject-ca-from a Certificate (cert-manager's CRD
	 * is not installed here: it does not exist), over a placeholder data */
	eps_apply("spiffe", "{\"cert-manager.io/inject-ca-from\":\"spiffe-policy\"}",
	          "\"endpoint\":\"cert-manager-spiffe-policy.cert-manager\",\"caBundle\":{\"data\":\"foobar\"}");
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("spiffe", "False|CABundleMissing|",
	                                   "Certificate " CA_NS "/spiffe-policy does not exist"));
	/* the API server's CA */
	eps_apply("apiserver", "{\"cert-manager.io/inject-apiserver-ca\":\"true\"}", spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("apiserver", "True|Ready|", "the API server's CA"));
	/* refused */
	snprintf(spec, sizeof(spec),
	         "\"endpoint\":\"%s\",\"caBundle\":{\"data\":\"%s\",\"configMapRef\":{\"name\":\"x\"}}", endpoint,
	         ca_b64);
	eps_apply("two-sources", NULL, spec);
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("two-sources", "False|InvalidSpec|", "exactly one of"));
	eps_apply("not-pem", NULL, "\"endpoint\":\"policy.example\",\"caBundle\":{\"data\":\"bm90IGEgUEVN\"}");
	SG_WAIT_FOR(WAIT_MS, eps_ready_has("not-pem", "False|InvalidSpec|", "caBundle"));
	eps_apply("bad-endpoint", NULL, "\"endpoint\":\"Not A Host\"");
	SG_WAIT_FOR(WAIT_MS, eps_ready_is("bad-endpoint", "False|InvalidSpec|"));
	/* the not-Ready object's name is refused by no policy; a policy
	 * listing an unknown name is Ready and waits */
	policy_apply("bad-name", "x-issuer", "[\"Bad_Name\"]");
	SG_WAIT_FOR(WAIT_MS, strstr(policy_ready("bad-name"), "spec.externalPolicyServers[0]: Invalid value") != NULL);
}

/* A deleted server: the request of a policy listing it waits. */
static void t_deleted(void)
{
	size_t known = sg_policyserver_resource_count(ps);
	SG_CHECK_OK(kube_fx_delete(k, eps_ref("later")));
	SG_WAIT_FOR(WAIT_MS, sg_policyserver_resource_count(ps) == known - 1);
	uint64_t e0 = errors();
	cr_create("approve-gone", "later-issuer");
	WAIT_UNDECIDED("approve-gone", e0);
	/* and the first server still answers */
	cr_create("approve-still", "eps-issuer");
	SG_WAIT_FOR(WAIT_MS, strncmp(cr_cond("approve-still", "Approved"), "True|", 5) == 0);
}

static void t_zz_stop(void)
{
	sg_ctrl_stop(sg_approver_controller(ap));
	sg_ctrl_stop(sg_extpolicy_controller(ep));
	sg_extpolicy_free(ep);
	sg_approver_free(ap);
	sg_policyserver_free(ps);
	free(ca_pem);
	free(ca_b64);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_configmap), SG_TEST(t_design_numbering), SG_TEST(t_empty_then_data),
             SG_TEST(t_sources), SG_TEST(t_deleted), SG_TEST(t_zz_stop))
