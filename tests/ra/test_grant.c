/*
 * The grant (sg_grant.h): cluster ID, impersonation (with and without the node
 * authorization hook) and TTL rules in both modes.
 */
#include "sg_grant.h"
#include "sg_test.h"

static sg_caller caller(const char *ns, const char *sa)
{
	sg_caller c = {0};
	snprintf(c.identity, sizeof(c.identity), "spiffe://cluster.local/ns/%s/sa/%s", ns, sa);
	snprintf(c.ns, sizeof(c.ns), "%s", ns);
	snprintf(c.sa, sizeof(c.sa), "%s", sa);
	c.method = "jwt";
	return c;
}

static sg_grant *make(sg_grant_mode mode, const char *trusted)
{
	sg_grant_options o = {.mode = mode,
	                      .max_ttl = 3600,
	                      .default_ttl = 86400,
	                      .cluster_id = "Kubernetes",
	                      .trust_domain = "cluster.local",
	                      .trusted_node_accounts = trusted};
	sg_grant *p = NULL;
	SG_CHECK_OK(sg_grant_new(&p, &o));
	return p;
}

static void t_istio_csr_ttl_clamps(void)
{
	sg_grant *p = make(SG_GRANT_ISTIO_CSR, NULL);
	sg_caller c = caller("default", "app");
	sg_grant_decision d;
	static const struct {
		int64_t req, want;
	} cases[] = {{0, 3600}, {-5, 3600}, {60, 60}, {3600, 3600}, {86400, 3600}, {INT64_MAX, 3600}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sg_grant_input in = {.caller = &c, .requested_ttl = cases[i].req};
		SG_CHECK_OK(sg_grant_decide(p, &in, &d));
		SG_CHECK(d.ttl == cases[i].want);
		SG_CHECK(d.strict_csr);
		SG_CHECK(strcmp(d.identity, c.identity) == 0);
	}
	sg_grant_free(p);
}

static void t_istiod_ttl_rejects(void)
{
	sg_grant *p = make(SG_GRANT_ISTIOD, NULL);
	sg_caller c = caller("default", "app");
	sg_grant_decision d;
	sg_grant_input in = {.caller = &c, .requested_ttl = 0};
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	SG_CHECK(d.ttl == 3600); /* the default (24h) is capped by the max */
	SG_CHECK(!d.strict_csr);
	in.requested_ttl = 3600;
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	in.requested_ttl = 3601;
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EINVAL);
	SG_CHECK_MSG("greater than the max allowed TTL");
	sg_grant_free(p);
}

static void t_cluster_id(void)
{
	sg_grant *p = make(SG_GRANT_ISTIO_CSR, NULL);
	sg_caller c = caller("default", "app");
	sg_grant_decision d;
	sg_grant_input in = {.caller = &c, .cluster_id = ""};
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	in.cluster_id = "Kubernetes";
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	in.cluster_id = "other";
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EAUTH);
	SG_CHECK_MSG("only know about local cluster");
	sg_grant_free(p);
}

static void t_impersonation(void)
{
	sg_grant *none = make(SG_GRANT_ISTIO_CSR, NULL);
	sg_grant *p = make(SG_GRANT_ISTIO_CSR, "istio-system/ztunnel, kube-system/node-agent");
	sg_caller zt = caller("istio-system", "ztunnel"), app = caller("default", "app");
	sg_grant_decision d;
	sg_grant_input in = {.caller = &zt, .impersonated_identity = "spiffe://cluster.local/ns/default/sa/app"};
	SG_CHECK_RC(sg_grant_decide(none, &in, &d), SG_EDENIED);
	SG_CHECK_MSG("no trusted node accounts");
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	SG_CHECK(d.impersonated && strcmp(d.identity, "spiffe://cluster.local/ns/default/sa/app") == 0);
	in.caller = &app;
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	SG_CHECK_MSG("default/app is not a trusted node account");
	in.caller = &zt;
	in.impersonated_identity = "spiffe://evil.example/ns/default/sa/app";
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	in.impersonated_identity = "spiffe://cluster.local";
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	in.impersonated_identity = "spiffe://cluster.local/ns/a b";
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	/* An mTLS caller has no namespace: never a trusted node account. */
	sg_caller m = {.method = "mtls"};
	snprintf(m.identity, sizeof(m.identity), "spiffe://cluster.local/ns/istio-system/sa/ztunnel");
	in.caller = &m;
	in.impersonated_identity = "spiffe://cluster.local/ns/default/sa/app";
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	sg_grant_free(p);
	sg_grant_free(none);
}

struct hook_state {
	int calls;
	int rc;
	char ns[64], sa[64];
	const sg_caller *caller;
};

static int hook(void *arg, const sg_caller *caller, const char *target_ns, const char *target_sa)
{
	struct hook_state *h = arg;
	h->calls++;
	h->caller = caller;
	snprintf(h->ns, sizeof(h->ns), "%s", target_ns);
	snprintf(h->sa, sizeof(h->sa), "%s", target_sa);
	return h->rc < 0 ? sg_error_set(h->rc, "node says no") : h->rc;
}

/* Node authorization: the hook sees parsed targets of our trust domain
 * only, after the trusted-account check, and its refusal is the answer. */
static void t_impersonation_hook(void)
{
	struct hook_state h = {0};
	sg_grant_options o = {.mode = SG_GRANT_ISTIO_CSR,
	                      .max_ttl = 3600,
	                      .trust_domain = "cluster.local",
	                      .trusted_node_accounts = "istio-system/ztunnel",
	                      .authorize_impersonation = hook,
	                      .authorize_arg = &h};
	sg_grant *p = NULL;
	SG_CHECK_OK(sg_grant_new(&p, &o));
	sg_caller zt = caller("istio-system", "ztunnel"), app = caller("default", "app");
	sg_grant_decision d;
	sg_grant_input in = {.caller = &zt, .impersonated_identity = "spiffe://cluster.local/ns/default/sa/app"};
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	SG_CHECK(h.calls == 1 && h.caller == &zt && strcmp(h.ns, "default") == 0 && strcmp(h.sa, "app") == 0);
	SG_CHECK(d.impersonated && strcmp(d.identity, "spiffe://cluster.local/ns/default/sa/app") == 0);
	in.impersonated_identity = "spiffe://cluster.local/ns/a.b-c_d/sa/x";
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	SG_CHECK(h.calls == 2 && strcmp(h.ns, "a.b-c_d") == 0 && strcmp(h.sa, "x") == 0);

	/* The hook's answer is the decision's, detail included. */
	in.impersonated_identity = "spiffe://cluster.local/ns/default/sa/app";
	h.rc = SG_EAUTH;
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EAUTH);
	SG_CHECK_MSG("node says no");
	SG_CHECK(!d.impersonated && d.identity[0] == 0);
	h.rc = SG_EBUSY;
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EBUSY);
	h.rc = 1; /* not a valid answer: refused all the same */
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EINTERNAL);
	h.rc = 0;
	int calls = h.calls;

	/* Refused before the hook: untrusted caller, foreign trust domain,
	 * IDs that are not exactly ns/<ns>/sa/<sa>. */
	in.caller = &app;
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	in.caller = &zt;
	static const char *const bad[] = {
	    "spiffe://evil.example/ns/default/sa/app",
	    "spiffe://cluster.local/foo/bar",
	    "spiffe://cluster.local/ns/default",
	    "spiffe://cluster.local/ns/default/sa",
	    "spiffe://cluster.local/ns/default/sa/",
	    "spiffe://cluster.local/ns//sa/app",
	    "spiffe://cluster.local/ns/default/sa/app/extra",
	    "spiffe://cluster.local/ns/default/sb/app",
	    "spiffe://cluster.local/ns/../sa/app",
	    "spiffe://cluster.local/ns/./sa/app",
	    "spiffe://cluster.local/ns/default/sa/a%2fb",
	    "spiffe://cluster.local/ns/default/sa/a:b",
	    "spiffe://cluster.local//ns/default/sa/app",
	    "spiffe://cluster.local/NS/default/sa/app",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		in.impersonated_identity = bad[i];
		SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	}
	/* Segments longer than a Kubernetes name cannot be ours either. */
	char longid[SG_ID_MAX];
	snprintf(longid, sizeof(longid), "spiffe://cluster.local/ns/%0300d/sa/app", 0);
	in.impersonated_identity = longid;
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	/* No impersonation: the hook is not asked. */
	in.impersonated_identity = NULL;
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	SG_CHECK(!d.impersonated && h.calls == calls);
	sg_grant_free(p);

	/* Without a hook, any path of our trust domain (as before). */
	sg_grant *plain = make(SG_GRANT_ISTIO_CSR, "istio-system/ztunnel");
	in.impersonated_identity = "spiffe://cluster.local/foo/bar";
	SG_CHECK_OK(sg_grant_decide(plain, &in, &d));
	sg_grant_free(plain);
}

static void t_bad_options(void)
{
	sg_grant *p = NULL;
	sg_grant_options o = {.mode = SG_GRANT_ISTIO_CSR, .max_ttl = 3600, .trusted_node_accounts = "noslash"};
	SG_CHECK_RC(sg_grant_new(&p, &o), SG_EINVAL);
	SG_CHECK_MSG("noslash");
	o.trusted_node_accounts = "a/b/c";
	SG_CHECK_RC(sg_grant_new(&p, &o), SG_EINVAL);
	o.trusted_node_accounts = "/sa";
	SG_CHECK_RC(sg_grant_new(&p, &o), SG_EINVAL);
	o.trusted_node_accounts = "ns/";
	SG_CHECK_RC(sg_grant_new(&p, &o), SG_EINVAL);
	o.trusted_node_accounts = NULL;
	o.max_ttl = 0;
	SG_CHECK_RC(sg_grant_new(&p, &o), SG_EINVAL);
	/* '@' in a trust domain is written as '.' (istio-csr). */
	o.max_ttl = 60;
	o.trust_domain = "corp@example";
	o.trusted_node_accounts = "a/b";
	SG_CHECK_OK(sg_grant_new(&p, &o));
	sg_caller c = caller("a", "b");
	sg_grant_input in = {.caller = &c, .impersonated_identity = "spiffe://corp.example/ns/x/sa/y"};
	sg_grant_decision d;
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	sg_grant_free(p);
}

SG_TEST_MAIN(SG_TEST(t_istio_csr_ttl_clamps), SG_TEST(t_istiod_ttl_rejects), SG_TEST(t_cluster_id),
             SG_TEST(t_impersonation), SG_TEST(t_impersonation_hook), SG_TEST(t_bad_options))
