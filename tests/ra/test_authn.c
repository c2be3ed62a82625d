/*
 * Tests for ra/sg_authn_impl.h: the jwt authenticator (tokens from the
 * development issuer; keys from a file or from a borrowed key source whose
 * keys are pushed), the mtls authenticator (own and foreign trust
 * domains, malformed SPIFFE IDs) and the chain (order, which error wins,
 * members that complete later).
 */
#include "sg_authn_impl.h"
#include "sg_jwt.h"
#include "sg_test.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOW INT64_C(1700000000)

static char dir[64], key_path[128], jwks_path[128];

struct result {
	int calls;
	int rc;
	sg_caller caller;
	sg_error err;
};

static void on_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	struct result *r = arg;
	r->calls++;
	r->rc = rc;
	if (caller)
		r->caller = *caller;
	if (err)
		r->err = *err;
}

/* Runs a; returns start()'s result, *r holds what done saw. */
static int run(const sg_authenticator *a, const char *bearer, const char *peer, struct result *r)
{
	memset(r, 0, sizeof(*r));
	sg_authn_request req = {bearer, bearer ? strlen(bearer) : 0, peer, NOW};
	return a->start(a->self, &req, on_done, r);
}

static void setup(void)
{
	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "/tmp/sg_authn_test.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(key_path, sizeof(key_path), "%s/issuer.key", dir);
	snprintf(jwks_path, sizeof(jwks_path), "%s/issuer.jwks", dir);
	if (sg_jwt_dev_issuer_create(key_path, jwks_path, NULL) != 0)
		abort();
}

static char *mint(const char *ns, const char *sa, int64_t ttl)
{
	sg_jwt_mint_options o = {
	    .issuer = "signet-dev",
	    .ns = ns,
	    .sa = sa,
	    .pod_name = "app-5d8f",
	    .pod_uid = "7c2e-11",
	    .ttl = ttl,
	    .now = NOW,
	};
	char *t = NULL;
	if (sg_jwt_mint(key_path, &o, &t) != 0)
		abort();
	return t;
}

static int jwt_new(sg_authenticator *a, const char *td)
{
	sg_authn_jwt_options o = {.jwks_file = jwks_path, .issuer = "signet-dev", .trust_domain = td};
	return sg_authn_jwt_new(a, &o);
}

static void t_jwt(void)
{
	setup();
	sg_authenticator a;
	SG_CHECK_OK(jwt_new(&a, "cluster.local"));
	SG_CHECK(strcmp(a.name, "jwt") == 0);
	struct result r;
	char *tok = mint("default", "sleep", 3600);
	SG_CHECK_OK(run(&a, tok, NULL, &r));
	SG_CHECK(r.calls == 1 && r.rc == 0);
	SG_CHECK(strcmp(r.caller.identity, "spiffe://cluster.local/ns/default/sa/sleep") == 0);
	SG_CHECK(strcmp(r.caller.ns, "default") == 0 && strcmp(r.caller.sa, "sleep") == 0);
	SG_CHECK(strcmp(r.caller.pod_name, "app-5d8f") == 0 && strcmp(r.caller.pod_uid, "7c2e-11") == 0);
	SG_CHECK(r.caller.expires == NOW + 3600 && strcmp(r.caller.method, "jwt") == 0);
	/* Again: from the cache, same caller. */
	SG_CHECK_OK(run(&a, tok, NULL, &r));
	SG_CHECK(r.calls == 1 && strcmp(r.caller.identity, "spiffe://cluster.local/ns/default/sa/sleep") == 0);

	SG_CHECK_RC(run(&a, NULL, NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("no bearer token");
	SG_CHECK(r.calls == 0);
	SG_CHECK_RC(run(&a, "", NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("no bearer token");
	tok[strlen(tok) - 3] = tok[strlen(tok) - 3] == 'A' ? 'B' : 'A'; /* still base64url */
	SG_CHECK_RC(run(&a, tok, NULL, &r), SG_EAUTH);
	SG_CHECK(r.calls == 0);
	free(tok);
	tok = mint("default", "sleep", 10);
	sg_authn_request late = {tok, strlen(tok), NULL, NOW + 100};
	SG_CHECK_RC(a.start(a.self, &late, on_done, &r), SG_EAUTH);
	SG_CHECK_MSG("token expired");
	free(tok);
	a.free(a.self);

	/* '@' in the trust domain. */
	SG_CHECK_OK(jwt_new(&a, "corp@example.com"));
	tok = mint("ns1", "sa1", 60);
	SG_CHECK_OK(run(&a, tok, NULL, &r));
	SG_CHECK(strcmp(r.caller.identity, "spiffe://corp.example.com/ns/ns1/sa/sa1") == 0);
	free(tok);
	a.free(a.self);

	/* Construction errors. */
	sg_authn_jwt_options bad = {.jwks_file = "/nonexistent/jwks", .issuer = "x", .trust_domain = "td"};
	SG_CHECK_RC(sg_authn_jwt_new(&a, &bad), SG_ENOTFOUND);
	bad.jwks_file = jwks_path;
	bad.trust_domain = "a/b";
	SG_CHECK_RC(sg_authn_jwt_new(&a, &bad), SG_EINVAL);
	bad.trust_domain = NULL;
	SG_CHECK_RC(sg_authn_jwt_new(&a, &bad), SG_EINVAL);
}

/* The jwt authenticator over a key source it borrows (as the daemon does
 * with the API server's keys, sg_jwks_kube.h): a rotation pushed into the
 * source reaches the authenticator, and the source outlives it. */
static void t_jwt_source(void)
{
	setup();
	FILE *fp = fopen(jwks_path, "rb");
	char buf[4096];
	size_t n = fp ? fread(buf, 1, sizeof(buf), fp) : 0;
	if (fp)
		fclose(fp);
	sg_jwks *keys = NULL;
	SG_CHECK_OK(sg_jwks_parse(&keys, buf, n));
	sg_jwks_file *src = NULL;
	SG_CHECK_OK(sg_jwks_file_new_pushed(&src, keys));

	sg_authenticator a;
	sg_authn_jwt_options o = {.jwks_source = src, .issuer = "signet-dev", .trust_domain = "cluster.local"};
	SG_CHECK_OK(sg_authn_jwt_new(&a, &o));
	struct result r;
	sg_jwt_mint_options mo = {
	    .issuer = "signet-dev", .ns = "default", .sa = "sleep", .sa_uid = "5f1d-77", .ttl = 600, .now = NOW};
	char *tok = NULL;
	SG_CHECK_OK(sg_jwt_mint(key_path, &mo, &tok));
	SG_CHECK_OK(run(&a, tok, NULL, &r));
	SG_CHECK(r.calls == 1 && r.rc == 0);
	SG_CHECK(strcmp(r.caller.identity, "spiffe://cluster.local/ns/default/sa/sleep") == 0);
	SG_CHECK(strcmp(r.caller.sa_uid, "5f1d-77") == 0 && strcmp(r.caller.method, "jwt") == 0);

	/* The issuer rotates its key: the old token's key is gone from the
	 * pushed set, so the (cached) token is refused from then on. */
	char key2[160], jwks2[160];
	snprintf(key2, sizeof(key2), "%s/issuer2.key", dir);
	snprintf(jwks2, sizeof(jwks2), "%s/issuer2.jwks", dir);
	SG_CHECK_OK(sg_jwt_dev_issuer_create(key2, jwks2, NULL));
	fp = fopen(jwks2, "rb");
	n = fp ? fread(buf, 1, sizeof(buf), fp) : 0;
	if (fp)
		fclose(fp);
	sg_jwks *keys2 = NULL;
	SG_CHECK_OK(sg_jwks_parse(&keys2, buf, n));
	SG_CHECK_OK(sg_jwks_file_set(src, keys2));
	SG_CHECK_RC(run(&a, tok, NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("is not in the JWKS");
	SG_CHECK(r.calls == 0);
	char *tok2 = NULL;
	SG_CHECK_OK(sg_jwt_mint(key2, &mo, &tok2));
	SG_CHECK_OK(run(&a, tok2, NULL, &r));
	SG_CHECK(r.calls == 1 && strcmp(r.caller.sa, "sleep") == 0);
	free(tok);
	free(tok2);
	/* The authenticator borrowed the source: freeing it leaves src whole. */
	a.free(a.self);
	sg_jwks *cur = sg_jwks_file_get(src);
	SG_CHECK(cur == keys2);
	sg_jwks_release(cur);

	/* Exactly one of file and source. */
	sg_authn_jwt_options both = {
	    .jwks_file = jwks_path, .jwks_source = src, .issuer = "signet-dev", .trust_domain = "cluster.local"};
	SG_CHECK_RC(sg_authn_jwt_new(&a, &both), SG_EINVAL);
	SG_CHECK_MSG("exactly one of a JWKS file and a key source");
	sg_authn_jwt_options neither = {.issuer = "signet-dev", .trust_domain = "cluster.local"};
	SG_CHECK_RC(sg_authn_jwt_new(&a, &neither), SG_EINVAL);
	SG_CHECK_MSG("exactly one of a JWKS file and a key source");
	sg_authn_jwt_options no_issuer = {.jwks_source = src, .trust_domain = "cluster.local"};
	SG_CHECK_RC(sg_authn_jwt_new(&a, &no_issuer), SG_EINVAL);

	sg_jwks_file_free(src);
	sg_jwks_release(keys);
	sg_jwks_release(keys2);
}

static void t_mtls(void)
{
	sg_authenticator a;
	struct result r;
	SG_CHECK_OK(sg_authn_mtls_new(&a, "cluster.local"));
	SG_CHECK_OK(run(&a, NULL, "spiffe://cluster.local/ns/default/sa/sleep", &r));
	SG_CHECK(r.calls == 1 && r.rc == 0 && strcmp(r.caller.method, "mtls") == 0);
	SG_CHECK(strcmp(r.caller.identity, "spiffe://cluster.local/ns/default/sa/sleep") == 0);
	SG_CHECK(r.caller.ns[0] == '\0' && r.caller.expires == 0);

	static const char *const refused[][2] = {
	    {"spiffe://other.local/ns/default/sa/sleep", "not in trust domain cluster.local"},
	    {"spiffe://cluster.local.evil/ns/a/sa/b", "not in trust domain"},
	    {"spiffe://cluster.localx/ns/a", "not in trust domain"},
	    {"https://cluster.local/ns/a/sa/b", "not a SPIFFE ID"},
	    {"spiffe://cluster.local", "not in trust domain"},
	    {"spiffe://cluster.local/", "malformed SPIFFE path"},
	    {"spiffe://cluster.local/ns//sa/b", "malformed SPIFFE path"},
	    {"spiffe://cluster.local/ns/../sa/b", "malformed SPIFFE path"},
	    {"spiffe://cluster.local/ns/a/sa/b/", "malformed SPIFFE path"},
	    {"spiffe://cluster.local/ns/a b", "malformed SPIFFE path"},
	    {"spiffe://cluster.local/ns/a?x=1", "malformed SPIFFE path"},
	    {"", "no client certificate"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		SG_CHECK_RC(run(&a, NULL, refused[i][0], &r), SG_EAUTH);
		SG_CHECK_MSG(refused[i][1]);
		SG_CHECK(r.calls == 0);
	}
	SG_CHECK_RC(run(&a, "tok", NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("no client certificate");
	char longid[700] = "spiffe://cluster.local/";
	memset(longid + strlen(longid), 'a', 600);
	SG_CHECK_RC(run(&a, NULL, longid, &r), SG_EAUTH);
	SG_CHECK_MSG("longer than");
	a.free(a.self);

	SG_CHECK_OK(sg_authn_mtls_new(&a, "corp@example.com"));
	SG_CHECK_OK(run(&a, NULL, "spiffe://corp.example.com/ns/a/sa/b", &r));
	a.free(a.self);
	SG_CHECK_RC(sg_authn_mtls_new(&a, ""), SG_EINVAL);
	SG_CHECK_RC(sg_authn_mtls_new(&a, "a/b"), SG_EINVAL);
}

/* A member that completes later: start() keeps done and returns SG_OK; the
 * test then finishes it with a failure or a success. */
struct later {
	sg_authn_done_fn done;
	void *arg;
	int started;
};

static int later_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct later *l = self;
	(void)req;
	l->done = done;
	l->arg = arg;
	l->started++;
	return SG_OK;
}

static void later_free(void *self)
{
	(void)self;
}

static void t_chain(void)
{
	setup();
	sg_authenticator list[2], chain;
	SG_CHECK_OK(sg_authn_mtls_new(&list[0], "cluster.local"));
	SG_CHECK_OK(jwt_new(&list[1], "cluster.local"));
	SG_CHECK_OK(sg_authn_chain_new(&chain, list, 2));
	struct result r;
	char *tok = mint("default", "sleep", 3600);
	const char *peer = "spiffe://cluster.local/ns/gw/sa/gateway";

	SG_CHECK_OK(run(&chain, tok, NULL, &r));
	SG_CHECK(r.calls == 1 && strcmp(r.caller.method, "jwt") == 0);
	SG_CHECK_OK(run(&chain, NULL, peer, &r));
	SG_CHECK(r.calls == 1 && strcmp(r.caller.method, "mtls") == 0);
	/* Both present: the client certificate comes first (istio order). */
	SG_CHECK_OK(run(&chain, tok, peer, &r));
	SG_CHECK(r.calls == 1 && strcmp(r.caller.method, "mtls") == 0 && strcmp(r.caller.identity, peer) == 0);
	/* A foreign certificate and a good token: the token wins. */
	SG_CHECK_OK(run(&chain, tok, "spiffe://evil/ns/a/sa/b", &r));
	SG_CHECK(r.calls == 1 && strcmp(r.caller.method, "jwt") == 0);

	/* All fail: the error of the last member that applied. */
	char *bad = strdup(tok);
	bad[strlen(bad) - 3] = bad[strlen(bad) - 3] == 'A' ? 'B' : 'A';
	SG_CHECK_RC(run(&chain, bad, NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("token signature does not verify");
	SG_CHECK(r.calls == 0);
	SG_CHECK_RC(run(&chain, NULL, "spiffe://evil/ns/a/sa/b", &r), SG_EAUTH);
	SG_CHECK_MSG("not in trust domain");
	SG_CHECK_RC(run(&chain, bad, "spiffe://evil/ns/a/sa/b", &r), SG_EAUTH);
	SG_CHECK_MSG("token signature does not verify");
	SG_CHECK_RC(run(&chain, NULL, NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("no bearer token");
	chain.free(chain.self);

	/* Order the other way: jwt first. */
	SG_CHECK_OK(jwt_new(&list[0], "cluster.local"));
	SG_CHECK_OK(sg_authn_mtls_new(&list[1], "cluster.local"));
	SG_CHECK_OK(sg_authn_chain_new(&chain, list, 2));
	SG_CHECK_OK(run(&chain, tok, peer, &r));
	SG_CHECK(strcmp(r.caller.method, "jwt") == 0);
	SG_CHECK_RC(run(&chain, bad, NULL, &r), SG_EAUTH);
	SG_CHECK_MSG("token signature does not verify"); /* not "no client certificate" */
	chain.free(chain.self);

	/* A member that answers later, then fails: the chain goes on. */
	struct later l = {0};
	list[0] = (sg_authenticator){"tokenreview", later_start, later_free, &l};
	SG_CHECK_OK(sg_authn_mtls_new(&list[1], "cluster.local"));
	SG_CHECK_OK(sg_authn_chain_new(&chain, list, 2));
	SG_CHECK_OK(run(&chain, bad, peer, &r));
	SG_CHECK(l.started == 1 && r.calls == 0);
	sg_error e = {.code = SG_EAUTH, .msg = "token review said no"};
	l.done(SG_EAUTH, NULL, &e, l.arg);
	SG_CHECK(r.calls == 1 && r.rc == 0 && strcmp(r.caller.method, "mtls") == 0);
	/* ... then everything fails: done carries the applying member's error. */
	SG_CHECK_OK(run(&chain, bad, NULL, &r));
	l.done(SG_EAUTH, NULL, &e, l.arg);
	SG_CHECK(r.calls == 1 && r.rc == SG_EAUTH && strstr(r.err.msg, "token review said no"));
	/* ... or succeeds later. */
	SG_CHECK_OK(run(&chain, bad, NULL, &r));
	sg_caller c = {.identity = "spiffe://cluster.local/ns/x/sa/y", .method = "tokenreview"};
	l.done(SG_OK, &c, NULL, l.arg);
	SG_CHECK(r.calls == 1 && r.rc == 0 && strcmp(r.caller.identity, c.identity) == 0);
	chain.free(chain.self);

	SG_CHECK_RC(sg_authn_chain_new(&chain, list, 0), SG_EINVAL);
	free(bad);
	free(tok);
}

/* auto's router: the discovered issuer's tokens to the local member, a
 * readable token of any other issuer to the remote one, garbage local;
 * the chosen member completes the request as it would alone. */
static void t_route(void)
{
	setup();
	static struct later remote_self;
	memset(&remote_self, 0, sizeof(remote_self));
	sg_authenticator local,
	    remote = {.name = "tokenreview", .start = later_start, .free = later_free, .self = &remote_self};
	SG_CHECK_OK(jwt_new(&local, "cluster.local"));
	sg_authenticator route;
	SG_CHECK_OK(sg_authn_route_new(&route, local, remote, "signet-dev"));
	SG_CHECK(strcmp(route.name, "jwt") == 0);
	struct result r;
	uint64_t nl, nr;

	char *tok = mint("default", "sleep", 3600);
	SG_CHECK_OK(run(&route, tok, NULL, &r)); /* verified locally, at once */
	SG_CHECK(r.calls == 1 && r.rc == SG_OK && strcmp(r.caller.method, "jwt") == 0);
	SG_CHECK(remote_self.started == 0);

	/* A legacy-shaped token (another issuer, no exp): the remote member
	 * has it, and answers later. */
	char h[64], p[256], legacy[512];
	SG_CHECK_OK(sg_b64url_encode((const uint8_t *)"{\"alg\":\"RS256\"}", 15, h, sizeof(h)));
	SG_CHECK_OK(sg_b64url_encode((const uint8_t *)"{\"iss\":\"kubernetes/serviceaccount\"}", 35, p, sizeof(p)));
	snprintf(legacy, sizeof(legacy), "%s.%s.AAAA", h, p);
	SG_CHECK_OK(run(&route, legacy, NULL, &r));
	SG_CHECK(remote_self.started == 1 && r.calls == 0);
	sg_caller c = {.method = "tokenreview"};
	remote_self.done(SG_OK, &c, NULL, remote_self.arg);
	SG_CHECK(r.calls == 1 && r.rc == SG_OK && strcmp(r.caller.method, "tokenreview") == 0);

	/* Our issuer, bound to a Secret (the informer holds none): reviewed. */
	static const char sb[] = "{\"iss\":\"signet-dev\",\"kubernetes.io\":{\"secret\":{\"name\":\"s\"}}}";
	SG_CHECK_OK(sg_b64url_encode((const uint8_t *)sb, strlen(sb), p, sizeof(p)));
	snprintf(legacy, sizeof(legacy), "%s.%s.AAAA", h, p);
	SG_CHECK_OK(run(&route, legacy, NULL, &r));
	SG_CHECK(remote_self.started == 2 && r.calls == 0);
	remote_self.done(SG_OK, &c, NULL, remote_self.arg);
	SG_CHECK(r.calls == 1 && r.rc == SG_OK);

	/* Our issuer with a bad signature: refused locally, never reviewed. */
	char *bad = strdup(tok);
	bad[strlen(bad) - 3] = bad[strlen(bad) - 3] == 'A' ? 'B' : 'A';
	SG_CHECK_RC(run(&route, bad, NULL, &r), SG_EAUTH);
	/* Garbage and no token: local, refused, never reviewed. */
	SG_CHECK_RC(run(&route, "not-a-token", NULL, &r), SG_EAUTH);
	SG_CHECK_RC(run(&route, NULL, NULL, &r), SG_EAUTH);
	SG_CHECK(remote_self.started == 2);
	sg_authn_route_counts(route.self, &nl, &nr);
	SG_CHECK(nl == 4 && nr == 2);
	route.free(route.self);
	free(bad);
	free(tok);

	/* Bad issuer: both members are freed by the failed constructor. */
	SG_CHECK_OK(jwt_new(&local, "cluster.local"));
	SG_CHECK_RC(sg_authn_route_new(&route, local, remote, ""), SG_EINVAL);
}

static void t_teardown(void)
{
	setup();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	SG_CHECK(system(cmd) == 0);
}

SG_TEST_MAIN(SG_TEST(t_jwt), SG_TEST(t_jwt_source), SG_TEST(t_mtls), SG_TEST(t_chain), SG_TEST(t_route),
             SG_TEST(t_teardown))
