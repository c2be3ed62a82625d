/*
 * The tokenreview authenticator (ra/sg_authn_kube.h) against a real
 * kube-apiserver (tests/kube/test_kube_env.h): tokens come from
 * TokenRequest (audience istio-ca, 600 s, the 1.20 minimum, optionally
 * bound to a Pod that stays Pending), and every verdict is the API
 * server's own.
 *
 * Cases: a pod-bound and an unbound token give the right caller (identity,
 * ns, sa, sa uid, pod name and uid, expires); the second look is a cache
 * hit that completes inside start(); tokens for another audience, for a
 * deleted service account, for a service account deleted and recreated
 * (the token's uid no longer matches: what an expired token looks like to
 * the API server, since 1.20 will not mint one shorter than 10 minutes),
 * for a deleted pod, tampered and garbage tokens, and valid credentials
 * that are not service accounts are refused; a token that has expired by
 * its own exp is simulated through the request's clock and refused without
 * an API call; a revocation is seen once the cache entry ends; sixteen
 * threads presenting one new token cause one review; distinct tokens of
 * one service account presented at once (a mesh restart) are each
 * reviewed exactly once and each answered with its own token's entry,
 * revoked ones among them (account or bound pod deleted) refused;
 * an API server whose API Priority and Fairness rejects signet's reviews
 * (429: the test holds every seat of its level with requests whose
 * bodies have not come) shrinks the review budget, and every token is
 * still accepted after retries once the seats are released; an
 * unreachable API server and a client without RBAC
 * rights give SG_EBUSY, never cached; free() right after many starts
 * answers each exactly once.
 */
#include "sg_authn_kube.h"
#include "sg_clock.h"
#include "sg_kube.h"
#include "sg_secret.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS "tr-test"
#define TD "cluster.local"

static sg_kube *k;
static char app_uid[64], pod_uid[64], loose_uid[64];

/* ---- objects and tokens ---- */

static bool create(const char *resource, const char *ns, json_t *body, char *uid, size_t cap)
{
	json_t *out = NULL;
	if (kube_fx_create_out(k, KUBE_FX_CORE(resource, ns, NULL), body, &out) != 0) {
		fprintf(stderr, "create %s: %s\n", resource, sg_error_last()->msg);
		return false;
	}
	if (uid)
		snprintf(uid, cap, "%s", sg_kube_meta_str(out, "uid") ? sg_kube_meta_str(out, "uid") : "");
	json_decref(out);
	return true;
}

static bool service_account(const char *name, char *uid, size_t cap)
{
	return create("serviceaccounts", NS,
	              json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "v1", "kind", "ServiceAccount", "metadata",
	                        "name", name, "namespace", NS),
	              uid, cap);
}

/* A Pod that stays Pending: nodeName set (no kubelet runs) or, without a
 * node, unscheduled (and then deleted at once, without a grace period). */
static bool pod(const char *name, const char *sa, const char *node, char *uid, size_t cap)
{
	json_t *spec = json_pack("{s:s, s:[{s:s, s:s}]}", "serviceAccountName", sa, "containers", "name", "c", "image",
	                         "registry.invalid/none");
	if (node)
		json_object_set_new(spec, "nodeName", json_string(node));
	return create("pods", NS,
	              json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata", "name",
	                        name, "namespace", NS, "spec", spec),
	              uid, cap);
}

/* The API server's own verdict on tok for audience istio-ca, from a
 * TokenReview made here: 1 authenticated, 0 not, -1 no answer. */
static int api_verdict(const char *tok)
{
	static const sg_kube_ref ref = {.group = "authentication.k8s.io", .version = "v1", .resource = "tokenreviews"};
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:[s]}}", "apiVersion", "authentication.k8s.io/v1", "kind",
	                         "TokenReview", "spec", "token", tok, "audiences", "istio-ca");
	json_t *out = NULL;
	int rc = sg_kube_create(k, &ref, body, &out);
	json_decref(body);
	json_t *yes = json_object_get(json_object_get(out, "status"), "authenticated");
	int verdict = rc != 0 ? -1 : json_is_true(yes) ? 1 : 0;
	json_decref(out);
	return verdict;
}

/* Deletes the object and waits until it is gone from the API and, when
 * tok is not NULL, until the API server refuses tok. TokenReview looks
 * objects up through the API server's informers, which follow etcd
 * closely but not at once: its own verdict on a token never reviewed
 * before (no answer cached) is the state to wait for, not a time. */
static bool gone_from_api(sg_kube_ref ref, const char *tok)
{
	return sg_kube_get(k, &ref, NULL) == SG_ENOTFOUND && (!tok || api_verdict(tok) == 0);
}

static bool delete_and_wait(const char *resource, const char *name, const char *tok)
{
	sg_kube_ref ref = KUBE_FX_CORE(resource, NS, name);
	if (kube_fx_delete(k, ref) != 0)
		return false;
	int failed = sg_test_failures;
	SG_WAIT_FOR(30000, gone_from_api(ref, tok));
	return sg_test_failures == failed;
}

/* A TokenRequest; caller frees the token with free_token. Two requests
 * alike in the same second give the same token (RS256 is deterministic),
 * so each asks for one more second of life: every token is new. */
static char *mint(const char *sa, const char *aud, const char *pod_name, const char *uid)
{
	static int minted;
	json_t *spec = json_pack("{s:[s], s:i}", "audiences", aud, "expirationSeconds", 600 + minted++);
	if (pod_name)
		json_object_set_new(
		    spec, "boundObjectRef",
		    json_pack("{s:s, s:s, s:s, s:s}", "kind", "Pod", "apiVersion", "v1", "name", pod_name, "uid", uid));
	json_t *body = json_pack("{s:s, s:s, s:o}", "apiVersion", "authentication.k8s.io/v1", "kind", "TokenRequest",
	                         "spec", spec);
	json_t *out = NULL;
	sg_kube_ref ref = {
	    .version = "v1", .resource = "serviceaccounts", .ns = NS, .name = sa, .subresource = "token"};
	int rc = sg_kube_create(k, &ref, body, &out);
	json_decref(body);
	if (rc != 0) {
		fprintf(stderr, "TokenRequest %s: %s\n", sa, sg_error_last()->msg);
		return NULL;
	}
	const char *t = json_string_value(json_object_get(json_object_get(out, "status"), "token"));
	char *copy = t ? strdup(t) : NULL;
	json_decref(out);
	return copy;
}

static void free_token(char *t)
{
	if (t)
		sg_wipe(t, strlen(t));
	free(t);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char buf[512] = "";
	if (!f || !fgets(buf, sizeof(buf), f)) {
		if (f)
			fclose(f);
		return NULL;
	}
	fclose(f);
	buf[strcspn(buf, "\r\n")] = '\0';
	return strdup(buf);
}

/* ---- running the authenticator ---- */

struct result {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
	int rc;
	bool inside_start; /* done ran before start() returned, on its thread */
	pthread_t starter;
	sg_caller caller;
	sg_error err;
};

static void on_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	struct result *r = arg;
	pthread_mutex_lock(&r->mu);
	r->calls++;
	r->rc = rc;
	r->inside_start = pthread_equal(pthread_self(), r->starter);
	if (caller)
		r->caller = *caller;
	if (err)
		r->err = *err;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void result_init(struct result *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->starter = pthread_self();
}

static void result_destroy(struct result *r)
{
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
}

static int wait_calls(struct result *r, int n, int ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	pthread_mutex_lock(&r->mu);
	while (r->calls < n && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0)
		;
	int calls = r->calls;
	pthread_mutex_unlock(&r->mu);
	return calls;
}

/* Starts and waits for the verdict: start()'s error, or what done said
 * (the detail then in r->err); SG_ETIMEOUT when done never came and
 * SG_EINTERNAL when it came after start() failed. r is (re)initialised;
 * destroy it after. */
static int run(sg_authenticator *a, const char *token, int64_t now, struct result *r)
{
	result_init(r);
	sg_authn_request req = {.bearer = token, .bearer_len = token ? strlen(token) : 0, .now = now};
	int rc = a->start(a->self, &req, on_done, r);
	pthread_mutex_lock(&r->mu);
	bool inside = r->calls == 1 && r->inside_start;
	pthread_mutex_unlock(&r->mu);
	if (rc != SG_OK) {
		snprintf(r->err.msg, sizeof(r->err.msg), "%s", sg_error_last()->msg);
		return r->calls == 0 ? rc : SG_EINTERNAL; /* done must not run after a failed start */
	}
	/* No SG_CHECK here: racing threads call this. */
	int calls = wait_calls(r, 1, 120000);
	r->inside_start = inside;
	return calls == 1 ? r->rc : SG_ETIMEOUT;
}

/* Counts acceptances that complete inside start() (on this thread). */
static void count_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	(void)caller;
	(void)err;
	if (rc == SG_OK)
		++*(int *)arg;
}

static int new_tr(sg_authenticator *a, sg_kube *kk, const sg_authn_tokenreview_options *extra)
{
	sg_authn_tokenreview_options o = extra ? *extra : (sg_authn_tokenreview_options){0};
	o.kube = kk;
	if (!o.trust_domain)
		o.trust_domain = TD;
	return sg_authn_tokenreview_new(a, &o);
}

static sg_authn_tokenreview_stats stats(const sg_authenticator *a)
{
	sg_authn_tokenreview_stats st;
	sg_authn_tokenreview_stats_get(a, &st);
	return st;
}

/* ---- the cases ---- */

static void t_start(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	bool ok = create(
	    "namespaces", NULL,
	    json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name", NS), NULL, 0);
	ok = ok && service_account("app", app_uid, sizeof(app_uid));
	ok = ok && pod("app-pod", "app", "node-1", pod_uid, sizeof(pod_uid));
	SG_CHECK(ok && app_uid[0] && pod_uid[0]);
	if (!ok)
		exit(1);
}

static void t_accepts(void)
{
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, NULL));
	char *tok = mint("app", "istio-ca", "app-pod", pod_uid);
	SG_CHECK(tok != NULL);
	if (!tok)
		return;
	int64_t exp = 0, now = sg_wall_seconds();
	SG_CHECK(sg_tokenreview_token_exp(tok, strlen(tok), &exp));
	SG_CHECK(exp >= now + 540 && exp <= now + 720);

	struct result r;
	SG_CHECK_OK(run(&a, tok, now, &r));
	SG_CHECK(!r.inside_start); /* a worker's answer */
	SG_CHECK(strcmp(r.caller.identity, "spiffe://cluster.local/ns/" NS "/sa/app") == 0);
	SG_CHECK(strcmp(r.caller.ns, NS) == 0 && strcmp(r.caller.sa, "app") == 0);
	SG_CHECK(strcmp(r.caller.sa_uid, app_uid) == 0);
	SG_CHECK(strcmp(r.caller.pod_name, "app-pod") == 0 && strcmp(r.caller.pod_uid, pod_uid) == 0);
	SG_CHECK(r.caller.expires == exp && r.caller.method && strcmp(r.caller.method, "tokenreview") == 0);
	sg_authn_tokenreview_stats st = stats(&a);
	SG_CHECK(st.reviews == 1 && st.cache_hits == 0 && st.cached == 1 && st.pending == 0);
	result_destroy(&r);

	/* Again: from the cache, inside start(), no API call. */
	SG_CHECK_OK(run(&a, tok, now + 1, &r));
	SG_CHECK(r.inside_start);
	SG_CHECK(strcmp(r.caller.identity, "spiffe://cluster.local/ns/" NS "/sa/app") == 0);
	SG_CHECK(strcmp(r.caller.pod_uid, pod_uid) == 0 && r.caller.expires == exp);
	st = stats(&a);
	SG_CHECK(st.reviews == 1 && st.cache_hits == 1);
	result_destroy(&r);

	/* The fast path: a hash and a short lock, no API call. */
	enum { HITS = 20000 };
	int accepted = 0;
	uint64_t t0 = sg_now_ns();
	for (int i = 0; i < HITS; i++) {
		sg_authn_request req = {.bearer = tok, .bearer_len = strlen(tok), .now = now};
		if (a.start(a.self, &req, count_done, &accepted) != SG_OK)
			break;
	}
	printf("cache hit: %llu ns each\n", (unsigned long long)((sg_now_ns() - t0) / HITS));
	SG_CHECK(accepted == HITS && stats(&a).reviews == 1);

	/* A token bound to no pod: no pod in the caller. */
	char *plain = mint("app", "istio-ca", NULL, NULL);
	SG_CHECK_OK(run(&a, plain, now, &r));
	SG_CHECK(strcmp(r.caller.sa, "app") == 0 && r.caller.pod_name[0] == '\0' && r.caller.pod_uid[0] == '\0');
	result_destroy(&r);
	a.free(a.self);

	/* '@' in the trust domain, and two audiences of which the token has one. */
	static const char *const two[] = {"https://kubernetes.default.svc.cluster.local", "istio-ca"};
	SG_CHECK_OK(new_tr(
	    &a, k,
	    &(sg_authn_tokenreview_options){.trust_domain = "corp@example.com", .audiences = two, .n_audiences = 2}));
	SG_CHECK_OK(run(&a, plain, now, &r));
	SG_CHECK(strcmp(r.caller.identity, "spiffe://corp.example.com/ns/" NS "/sa/app") == 0);
	result_destroy(&r);
	a.free(a.self);
	free_token(plain);
	free_token(tok);
}

static void t_audience(void)
{
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, NULL));
	char *other = mint("app", "some-other-audience", NULL, NULL);
	int64_t now = sg_wall_seconds();
	struct result r;
	SG_CHECK_RC(run(&a, other, now, &r), SG_EAUTH);
	printf("another audience: %s\n", r.err.msg);
	SG_CHECK(strstr(r.err.msg, "token review: not authenticated") != NULL);
	SG_CHECK(!strstr(r.err.msg, other));
	SG_CHECK(stats(&a).reviews == 1 && stats(&a).refused == 1);
	result_destroy(&r);
	/* The refusal is remembered: refused inside start(), no second call. */
	SG_CHECK_RC(run(&a, other, now + 1, &r), SG_EAUTH);
	SG_CHECK(strstr(r.err.msg, "token review: not authenticated") != NULL);
	SG_CHECK(stats(&a).reviews == 1 && stats(&a).cache_hits == 1);
	result_destroy(&r);
	/* ... for negative_ttl seconds only. */
	SG_CHECK_RC(run(&a, other, now + 5, &r), SG_EAUTH);
	SG_CHECK(stats(&a).reviews == 2);
	result_destroy(&r);
	a.free(a.self);

	/* negative_ttl < 0: every refusal is asked again. */
	SG_CHECK_OK(new_tr(&a, k, &(sg_authn_tokenreview_options){.negative_ttl = -1}));
	SG_CHECK_RC(run(&a, other, now, &r), SG_EAUTH);
	result_destroy(&r);
	SG_CHECK_RC(run(&a, other, now, &r), SG_EAUTH);
	result_destroy(&r);
	SG_CHECK(stats(&a).reviews == 2 && stats(&a).cache_hits == 0);
	a.free(a.self);

	/* An istio-ca token where another audience is required. */
	static const char *const api[] = {"https://kubernetes.default.svc.cluster.local"};
	SG_CHECK_OK(new_tr(&a, k, &(sg_authn_tokenreview_options){.audiences = api, .n_audiences = 1}));
	char *tok = mint("app", "istio-ca", NULL, NULL);
	SG_CHECK_RC(run(&a, tok, now, &r), SG_EAUTH);
	SG_CHECK(strstr(r.err.msg, "not authenticated") != NULL);
	result_destroy(&r);
	a.free(a.self);
	free_token(tok);
	free_token(other);
}

static void t_revoked(void)
{
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, NULL));
	struct result r;

	/* A fresh token whose service account is then deleted. */
	SG_CHECK(service_account("gone", NULL, 0));
	char *gone = mint("gone", "istio-ca", NULL, NULL);
	SG_CHECK(gone && delete_and_wait("serviceaccounts", "gone", gone));
	SG_CHECK_RC(run(&a, gone, sg_wall_seconds(), &r), SG_EAUTH);
	printf("deleted service account: %s\n", r.err.msg);
	SG_CHECK(strstr(r.err.msg, "not authenticated") != NULL);
	result_destroy(&r);

	/* Deleted and recreated: same name, new uid. The token is within its
	 * exp but no longer valid, which is how the API server treats an
	 * expired one too. */
	char old_uid[64], new_uid[64];
	SG_CHECK(service_account("recreated", old_uid, sizeof(old_uid)));
	char *stale = mint("recreated", "istio-ca", NULL, NULL);
	SG_CHECK(stale && delete_and_wait("serviceaccounts", "recreated", stale));
	SG_CHECK(service_account("recreated", new_uid, sizeof(new_uid)) && strcmp(old_uid, new_uid) != 0);
	/* The informers have the new account once the API server accepts a
	 * token of it (so the old token meets the new uid, not no account). */
	char *fresh = mint("recreated", "istio-ca", NULL, NULL);
	SG_WAIT_FOR(30000, api_verdict(fresh) == 1);
	SG_CHECK_RC(run(&a, stale, sg_wall_seconds(), &r), SG_EAUTH);
	printf("recreated service account: %s\n", r.err.msg);
	result_destroy(&r);
	/* A token of the new account works. */
	SG_CHECK_OK(run(&a, fresh, sg_wall_seconds(), &r));
	SG_CHECK(strcmp(r.caller.sa_uid, new_uid) == 0);
	result_destroy(&r);

	/* A token bound to a pod that is then deleted (unscheduled: at once). */
	SG_CHECK(pod("loose-pod", "app", NULL, loose_uid, sizeof(loose_uid)));
	char *bound = mint("app", "istio-ca", "loose-pod", loose_uid);
	SG_CHECK(bound && delete_and_wait("pods", "loose-pod", bound));
	SG_CHECK_RC(run(&a, bound, sg_wall_seconds(), &r), SG_EAUTH);
	printf("deleted pod: %s\n", r.err.msg);
	result_destroy(&r);
	a.free(a.self);

	/* The cost of the cache: a token accepted before its account went
	 * away stays accepted until its entry ends (cache_ttl_max = 1 here),
	 * then a review refuses it, once the API server's own cache of
	 * successful authentications (10 s in 1.20) has let go as well. */
	SG_CHECK_OK(new_tr(&a, k, &(sg_authn_tokenreview_options){.cache_ttl_max = 1}));
	SG_CHECK(service_account("short", NULL, 0));
	char *tok = mint("short", "istio-ca", NULL, NULL);
	int64_t now = sg_wall_seconds();
	SG_CHECK_OK(run(&a, tok, now, &r));
	result_destroy(&r);
	SG_CHECK(delete_and_wait("serviceaccounts", "short", NULL));
	SG_CHECK_OK(run(&a, tok, now, &r)); /* the same second: still the cached answer */
	SG_CHECK(r.inside_start);
	result_destroy(&r);
	/* The API server caches its positive answer on tok for 10 s. Its own
	 * verdict (asked for istio-ca, the audience the authenticator asks
	 * for: the same cache entry) turns to "no" when that entry ends: the
	 * state to wait for. Then a review refuses tok. */
	SG_WAIT_FOR(40000, api_verdict(tok) == 0);
	SG_CHECK_RC(run(&a, tok, now + 2, &r), SG_EAUTH); /* past our entry: a review */
	SG_CHECK(!r.inside_start);
	result_destroy(&r);
	SG_CHECK(stats(&a).reviews >= 2 && stats(&a).cache_hits == 1);
	a.free(a.self);
	free_token(tok);
	free_token(bound);
	free_token(fresh);
	free_token(stale);
	free_token(gone);
}

/* Expired by its own exp: simulated through the request's clock (1.20
 * mints nothing shorter than 600 s), refused inside start(). */
static void t_expired(void)
{
	sg_authenticator a;
	/* Entries then live until the token's exp, not 5 minutes. */
	SG_CHECK_OK(new_tr(&a, k, &(sg_authn_tokenreview_options){.cache_ttl_max = 3600}));
	char *tok = mint("app", "istio-ca", NULL, NULL);
	int64_t exp = 0, now = sg_wall_seconds();
	SG_CHECK(sg_tokenreview_token_exp(tok, strlen(tok), &exp));
	struct result r;
	SG_CHECK_OK(run(&a, tok, now, &r)); /* reviewed and cached */
	result_destroy(&r);
	SG_CHECK_RC(run(&a, tok, exp - 1, &r), SG_OK); /* the entry lives until exp at most */
	SG_CHECK(r.inside_start);
	result_destroy(&r);
	SG_CHECK_RC(run(&a, tok, exp, &r), SG_EAUTH);
	SG_CHECK(strcmp(r.err.msg, "token expired") == 0);
	result_destroy(&r);
	char *unseen = mint("app", "istio-ca", NULL, NULL);
	SG_CHECK(sg_tokenreview_token_exp(unseen, strlen(unseen), &exp));
	SG_CHECK_RC(run(&a, unseen, exp + 10, &r), SG_EAUTH);
	SG_CHECK(strcmp(r.err.msg, "token expired") == 0);
	result_destroy(&r);
	sg_authn_tokenreview_stats st = stats(&a);
	SG_CHECK(st.reviews == 1 && st.refused == 2);
	a.free(a.self);
	free_token(unseen);
	free_token(tok);
}

static void t_garbage(void)
{
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, NULL));
	int64_t now = sg_wall_seconds();
	struct result r;
	SG_CHECK_RC(run(&a, "not-a-token", now, &r), SG_EAUTH);
	printf("garbage: %s\n", r.err.msg);
	SG_CHECK(strstr(r.err.msg, "not authenticated") != NULL);
	result_destroy(&r);

	/* A real token with its signature changed. */
	char *tok = mint("app", "istio-ca", NULL, NULL);
	size_t n = strlen(tok);
	tok[n - 5] = tok[n - 5] == 'A' ? 'B' : 'A';
	SG_CHECK_RC(run(&a, tok, now, &r), SG_EAUTH);
	printf("tampered: %s\n", r.err.msg);
	SG_CHECK(!strstr(r.err.msg, tok));
	result_destroy(&r);

	/* Valid credentials of users that are not service accounts. */
	char *admin = read_file(kube_env.token_file), *user = read_file(kube_env.user_token_file);
	SG_CHECK(admin && user);
	SG_CHECK_RC(run(&a, admin, now, &r), SG_EAUTH);
	printf("admin token: %s\n", r.err.msg);
	SG_CHECK(strstr(r.err.msg, "user \"signet-admin\" is not a service account") != NULL);
	result_destroy(&r);
	SG_CHECK_RC(run(&a, user, now, &r), SG_EAUTH);
	SG_CHECK(strstr(r.err.msg, "user \"signet-user\" is not a service account") != NULL);
	result_destroy(&r);
	SG_CHECK(stats(&a).reviews == 4 && stats(&a).refused == 4 && stats(&a).api_errors == 0);
	a.free(a.self);
	free_token(admin);
	free_token(user);
	free_token(tok);
}

struct racer {
	sg_authenticator *a;
	const char *token;
	pthread_barrier_t *go;
	struct result r;
	int rc;
};

static void *race(void *arg)
{
	struct racer *x = arg;
	pthread_barrier_wait(x->go);
	x->rc = run(x->a, x->token, sg_wall_seconds(), &x->r);
	return NULL;
}

static void t_coalescing(void)
{
	enum { N = 16 };
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, NULL));
	char *tok = mint("app", "istio-ca", "app-pod", pod_uid);
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, N);
	struct racer x[N];
	pthread_t th[N];
	for (int i = 0; i < N; i++) {
		x[i] = (struct racer){.a = &a, .token = tok, .go = &go};
		pthread_create(&th[i], NULL, race, &x[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < N; i++) {
		SG_CHECK(x[i].rc == SG_OK && x[i].r.calls == 1);
		SG_CHECK(strcmp(x[i].r.caller.pod_name, "app-pod") == 0);
		result_destroy(&x[i].r);
	}
	sg_authn_tokenreview_stats st = stats(&a);
	printf("16 racers: %llu review, %llu coalesced, %llu cache hits\n", (unsigned long long)st.reviews,
	       (unsigned long long)st.coalesced, (unsigned long long)st.cache_hits);
	SG_CHECK(st.reviews == 1 && st.coalesced + st.cache_hits == N - 1);
	pthread_barrier_destroy(&go);
	a.free(a.self);
	free_token(tok);
}

/* Starts every token at once and waits for each answer; the results are
 * initialised here, destroyed by the caller. */
static void run_all(sg_authenticator *a, char **toks, struct result *r, int n)
{
	int64_t now = sg_wall_seconds();
	for (int i = 0; i < n; i++) {
		result_init(&r[i]);
		sg_authn_request req = {.bearer = toks[i], .bearer_len = strlen(toks[i]), .now = now};
		SG_CHECK_OK(a->start(a->self, &req, on_done, &r[i]));
	}
	for (int i = 0; i < n; i++)
		SG_CHECK(wait_calls(&r[i], 1, 120000) == 1);
}

/* Whether every result is an acceptance of the app account whose expires
 * is its own token's exp (an answer from another token's entry would
 * carry that token's exp: every token here has its own). */
static bool own_answers(char **toks, struct result *r, int n)
{
	bool ok = true;
	for (int i = 0; i < n; i++) {
		int64_t exp = 0;
		bool has = sg_tokenreview_token_exp(toks[i], strlen(toks[i]), &exp);
		pthread_mutex_lock(&r[i].mu);
		bool good = r[i].calls == 1 && r[i].rc == SG_OK && has && r[i].caller.expires == exp &&
		            strcmp(r[i].caller.sa, "app") == 0;
		if (!good)
			fprintf(stderr, "token %d: calls %d rc %d exp %lld/%lld: %s\n", i, r[i].calls, r[i].rc,
			        (long long)r[i].caller.expires, (long long)exp, r[i].err.msg);
		pthread_mutex_unlock(&r[i].mu);
		ok &= good;
	}
	return ok;
}

/* A mesh restart: every pod brings its own token (TokenRequest, each with
 * its own expiration), all at once, and among them revoked ones (their
 * account deleted; their bound pod deleted): each token gets its own
 * verdict, from one review of its own. */
static void t_distinct(void)
{
	enum { N = 40, R = 4, ALL = N + R };
	char *toks[ALL];
	struct result r[ALL];
	for (int i = 0; i < N; i++)
		SG_CHECK((toks[i] = mint("app", "istio-ca", NULL, NULL)) != NULL);
	char uid[64];
	SG_CHECK(service_account("doomed", NULL, 0));
	SG_CHECK(pod("doomed-pod", "app", NULL, uid, sizeof(uid)));
	for (int i = N; i < ALL - 1; i++)
		SG_CHECK((toks[i] = mint("doomed", "istio-ca", NULL, NULL)) != NULL);
	SG_CHECK((toks[ALL - 1] = mint("app", "istio-ca", "doomed-pod", uid)) != NULL);
	SG_CHECK(delete_and_wait("serviceaccounts", "doomed", toks[N]));
	SG_CHECK(delete_and_wait("pods", "doomed-pod", toks[ALL - 1]));

	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, NULL));
	run_all(&a, toks, r, ALL);
	SG_CHECK(own_answers(toks, r, N));
	for (int i = N; i < ALL; i++)
		SG_CHECK(r[i].calls == 1 && r[i].rc == SG_EAUTH && strstr(r[i].err.msg, "not authenticated") != NULL);
	sg_authn_tokenreview_stats st = stats(&a);
	printf("%d distinct tokens (%d revoked): %llu reviews, %llu refused, %llu coalesced, %llu cache hits, "
	       "budget %zu\n",
	       ALL, R, (unsigned long long)st.reviews, (unsigned long long)st.refused, (unsigned long long)st.coalesced,
	       (unsigned long long)st.cache_hits, st.budget);
	SG_CHECK(st.reviews == ALL && st.refused == R && st.coalesced == 0 && st.cached == ALL);
	SG_CHECK(st.in_flight == 0 && st.pending == 0);
	for (int i = 0; i < ALL; i++)
		result_destroy(&r[i]);

	/* Again: each accepted one from its own entry, inside start(), no review. */
	int64_t now = sg_wall_seconds();
	for (int i = 0; i < N; i++) {
		result_init(&r[i]);
		sg_authn_request req = {.bearer = toks[i], .bearer_len = strlen(toks[i]), .now = now};
		SG_CHECK_OK(a.start(a.self, &req, on_done, &r[i]));
		SG_CHECK(r[i].calls == 1 && r[i].inside_start);
	}
	SG_CHECK(own_answers(toks, r, N));
	SG_CHECK(stats(&a).reviews == ALL && stats(&a).cache_hits == N);
	for (int i = 0; i < N; i++)
		result_destroy(&r[i]);
	for (int i = 0; i < ALL; i++)
		free_token(toks[i]);
	a.free(a.self);
}

/* API Priority and Fairness (on by default since 1.20) puts the reviewer
 * account's TokenReviews in a priority level of its own with the least
 * share there is (1 of the server's ~600 seats, rounded up: 3) and no
 * queue: what it cannot run at once it answers 429 with Retry-After. A
 * real API server, refusing as it refuses a busy client. */
static const char apf_level[] =
    "{\"apiVersion\": \"flowcontrol.apiserver.k8s.io/v1beta1\", \"kind\": \"PriorityLevelConfiguration\","
    " \"metadata\": {\"name\": \"signet-test-reviews\"},"
    " \"spec\": {\"type\": \"Limited\", \"limited\": {\"assuredConcurrencyShares\": 1,"
    " \"limitResponse\": {\"type\": \"Reject\"}}}}";
static const char apf_schema[] =
    "{\"apiVersion\": \"flowcontrol.apiserver.k8s.io/v1beta1\", \"kind\": \"FlowSchema\","
    " \"metadata\": {\"name\": \"signet-test-reviews\"},"
    " \"spec\": {\"priorityLevelConfiguration\": {\"name\": \"signet-test-reviews\"},"
    " \"matchingPrecedence\": 500, \"distinguisherMethod\": {\"type\": \"ByUser\"},"
    " \"rules\": [{\"subjects\": [{\"kind\": \"ServiceAccount\","
    " \"serviceAccount\": {\"namespace\": \"" NS "\", \"name\": \"reviewer\"}}],"
    " \"resourceRules\": [{\"verbs\": [\"create\"], \"apiGroups\": [\"authentication.k8s.io\"],"
    " \"resources\": [\"tokenreviews\"], \"clusterScope\": true}]}]}}";
static const char apf_binding[] =
    "{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"ClusterRoleBinding\","
    " \"metadata\": {\"name\": \"signet-test-reviewer\"},"
    " \"roleRef\": {\"apiGroup\": \"rbac.authorization.k8s.io\", \"kind\": \"ClusterRole\","
    " \"name\": \"system:auth-delegator\"},"
    " \"subjects\": [{\"kind\": \"ServiceAccount\", \"namespace\": \"" NS "\", \"name\": \"reviewer\"}]}";

/* The API server has taken the FlowSchema in: its configuration
 * controller writes Dangling=False once the schema's level exists in the
 * configuration it serves with. */
static bool apf_in_force(void)
{
	sg_kube_ref ref = {.group = "flowcontrol.apiserver.k8s.io",
	                   .version = "v1beta1",
	                   .resource = "flowschemas",
	                   .name = "signet-test-reviews"};
	json_t *fs = kube_fx_get(k, ref);
	const char *st = kube_fx_cond_str(fs, "Dangling", "status");
	bool ok = st && strcmp(st, "False") == 0;
	json_decref(fs);
	return ok;
}

/* A client as the reviewer account (its own TokenRequest token, for the
 * API server's audience), without a rate limit, a connection per review. */
static sg_kube *reviewer_client(unsigned handles)
{
	char *tok = mint("reviewer", "https://kubernetes.default.svc.cluster.local", NULL, NULL);
	if (!tok)
		return NULL;
	char yaml[4096];
	int n = snprintf(yaml, sizeof(yaml),
	                 "current-context: t\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
	                 "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n"
	                 "users: [{name: u, user: {token: '%s'}}]\n",
	                 kube_env.server, kube_env.ca_file, tok);
	free_token(tok);
	sg_kube *rk = n < (int)sizeof(yaml)
	                  ? kube_fx_client_yaml(yaml, &(sg_kube_options){.qps = -1, .idle_handles = handles})
	                  : NULL;
	sg_wipe(yaml, sizeof(yaml));
	return rk;
}

/* Seats held at the API server: TokenReview POSTs as the reviewer that
 * ask "Expect: 100-continue" and send no body until released. API
 * Priority and Fairness gives a request its seat before the handler reads
 * the body, and the server says "100 Continue" when the handler first
 * reads it: a request so answered holds a seat until its body comes.
 * Connections are opened one at a time until one is answered 429 instead
 * (the level rejects, no queues): every seat was taken then, and only held
 * requests take the level's seats (its FlowSchema matches the reviewer
 * alone), so every request of the level is refused until release. How many
 * seats the level has (the server's share arithmetic) does not matter, and
 * nothing waits on a timer: each answer is awaited. (Without the Expect
 * header a refusal would not come either: Go's server reads a small unread
 * body before it answers.) */
enum { HOLD_MAX = 64 };
struct hold {
	SSL_CTX *ctx;
	int n;
	SSL *ssl[HOLD_MAX];
	int fd[HOLD_MAX];
	char body[512];
};

static SSL *tls_open(struct hold *h, int *fd_out)
{
	int port = 0;
	if (sscanf(kube_env.server, "https://127.0.0.1:%d", &port) != 1)
		return NULL;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {
	    .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	SSL *ssl = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? SSL_new(h->ctx) : NULL;
	if (!ssl || !SSL_set_fd(ssl, fd) || SSL_connect(ssl) != 1) {
		SSL_free(ssl);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	*fd_out = fd;
	return ssl;
}

/* The socket is non-blocking (a TLS 1.3 server's session tickets make it
 * readable with no answer yet): SSL calls are retried as it says, until
 * the deadline. */
static bool tls_wait(SSL *ssl, int fd, int rc, uint64_t until)
{
	int e = SSL_get_error(ssl, rc);
	uint64_t now = sg_now_ns();
	if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || now >= until)
		return false;
	struct pollfd p = {.fd = fd, .events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT};
	poll(&p, 1, (int)((until - now) / 1000000u) + 1);
	return true;
}

static bool tls_write(SSL *ssl, int fd, const char *data, int len)
{
	uint64_t until = sg_now_ns() + 10000 * 1000000ull;
	int rc;
	while ((rc = SSL_write(ssl, data, len)) <= 0)
		if (!tls_wait(ssl, fd, rc, until))
			return false;
	return rc == len;
}

/* The response's status, its head read within ms (0 when none came);
 * *retry_after from its Retry-After header. */
static int tls_status(SSL *ssl, int fd, int ms, long *retry_after)
{
	char buf[4096] = "";
	size_t got = 0;
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u;
	while (got < sizeof(buf) - 1 && !strstr(buf, "\r\n\r\n")) {
		int n = SSL_read(ssl, buf + got, (int)(sizeof(buf) - 1 - got));
		if (n > 0) {
			got += (size_t)n;
			buf[got] = '\0';
		} else if (!tls_wait(ssl, fd, n, until)) {
			break;
		}
	}
	int code = 0;
	if (sscanf(buf, "HTTP/1.1 %d", &code) != 1)
		return 0;
	const char *ra = strstr(buf, "\r\nRetry-After:"); /* Go's canonical spelling */
	*retry_after = ra ? strtol(ra + 14, NULL, 10) : -1;
	return code;
}

/* Holds every seat of the reviewer's level; the refusal's Retry-After in
 * *retry_after. False when no connection was refused. */
static bool hold_seats(struct hold *h, const char *reviewer_tok, long *retry_after)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->body, sizeof(h->body),
	         "{\"apiVersion\": \"authentication.k8s.io/v1\", \"kind\": \"TokenReview\","
	         " \"spec\": {\"token\": \"not-a-token\", \"audiences\": [\"istio-ca\"]}}");
	h->ctx = SSL_CTX_new(TLS_client_method());
	if (!h->ctx || SSL_CTX_load_verify_locations(h->ctx, kube_env.ca_file, NULL) != 1)
		return false;
	SSL_CTX_set_verify(h->ctx, SSL_VERIFY_PEER, NULL);
	char head[2048];
	int hn = snprintf(head, sizeof(head),
	                  "POST /apis/authentication.k8s.io/v1/tokenreviews HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                  "Authorization: Bearer %s\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
	                  "Content-Length: %zu\r\n\r\n",
	                  reviewer_tok, strlen(h->body));
	bool refused = false;
	while (h->n < HOLD_MAX && !refused) {
		int fd;
		SSL *ssl = tls_open(h, &fd);
		if (!ssl)
			break;
		if (hn >= (int)sizeof(head) || !tls_write(ssl, fd, head, hn)) {
			SSL_free(ssl);
			close(fd);
			break;
		}
		int code = tls_status(ssl, fd, 30000, retry_after);
		if (code == 100) { /* in a seat, waiting for its body */
			h->ssl[h->n] = ssl;
			h->fd[h->n++] = fd;
			continue;
		}
		refused = code == 429;
		SSL_free(ssl);
		close(fd);
		if (!refused) {
			fprintf(stderr, "a review to hold a seat was answered %d\n", code);
			break;
		}
	}
	sg_wipe(head, sizeof(head));
	return refused;
}

/* Sends each held request its body and reads its answer: the seats are
 * free once every answer came. The number of 201s. */
static int hold_release(struct hold *h)
{
	int answered = 0;
	for (int i = 0; i < h->n; i++) {
		long ra;
		int len = (int)strlen(h->body);
		if (tls_write(h->ssl[i], h->fd[i], h->body, len) && tls_status(h->ssl[i], h->fd[i], 30000, &ra) == 201)
			answered++;
		SSL_free(h->ssl[i]);
		close(h->fd[i]);
	}
	SSL_CTX_free(h->ctx);
	return answered;
}

static void t_throttled(void)
{
	enum { N = 48, MAX = 32 };
	SG_CHECK(service_account("reviewer", NULL, 0));
	SG_CHECK(kube_fx_apply_text(k, apf_binding));
	SG_CHECK(kube_fx_apply_text(k, apf_level));
	SG_CHECK(kube_fx_apply_text(k, apf_schema));
	SG_WAIT_FOR(60000, apf_in_force());
	sg_kube *rk = reviewer_client(MAX);
	char *rtok = mint("reviewer", "https://kubernetes.default.svc.cluster.local", NULL, NULL);
	SG_CHECK(rk != NULL && rtok != NULL);
	if (!rk || !rtok) {
		sg_kube_free(rk);
		free_token(rtok);
		return;
	}
	struct hold h;
	long raw_ra = -1;
	bool full = hold_seats(&h, rtok, &raw_ra);
	free_token(rtok);
	printf("%d seats held; the next review: 429 with Retry-After %ld\n", h.n, raw_ra);
	SG_CHECK(full && h.n >= 1 && raw_ra >= 1);

	/* Our client reads the refusal: its status holds the header's
	 * Retry-After (APF's 429 has a plain-text body: no Status to take it
	 * from). */
	static const sg_kube_ref ref = {.group = "authentication.k8s.io", .version = "v1", .resource = "tokenreviews"};
	char *tok = mint("app", "istio-ca", NULL, NULL);
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:[s]}}", "apiVersion", "authentication.k8s.io/v1", "kind",
	                         "TokenReview", "spec", "token", tok ? tok : "", "audiences", "istio-ca");
	SG_CHECK(sg_kube_create(rk, &ref, body, NULL) != SG_OK && sg_kube_last_status()->code == 429 &&
	         sg_kube_last_status()->retry_after >= 1);
	json_decref(body);
	free_token(tok);

	/* A flood of distinct tokens meets the full level: the first reviews
	 * are refused, the budget is cut, and once the seats are released
	 * (well inside the Retry-After hold) every token is answered with its
	 * own entry, nothing failing that a retry passed. */
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, rk, &(sg_authn_tokenreview_options){.max_inflight = MAX}));
	char *toks[N];
	struct result r[N];
	for (int i = 0; i < N; i++)
		SG_CHECK((toks[i] = mint("app", "istio-ca", NULL, NULL)) != NULL);
	int64_t now = sg_wall_seconds();
	for (int i = 0; i < N; i++) {
		result_init(&r[i]);
		sg_authn_request req = {.bearer = toks[i], .bearer_len = strlen(toks[i]), .now = now};
		SG_CHECK_OK(a.start(a.self, &req, on_done, &r[i]));
	}
	SG_WAIT_FOR(60000, stats(&a).throttled > 0);
	int released = hold_release(&h);
	SG_CHECK(released == h.n);
	for (int i = 0; i < N; i++)
		SG_CHECK(wait_calls(&r[i], 1, 120000) == 1);
	SG_CHECK(own_answers(toks, r, N));
	for (int i = 0; i < N; i++) {
		result_destroy(&r[i]);
		free_token(toks[i]);
	}
	sg_authn_tokenreview_stats st = stats(&a);
	printf("%d tokens: %llu reviews, %llu answered 429, %llu retries, %llu budget cuts, budget %zu of %d\n", N,
	       (unsigned long long)st.reviews, (unsigned long long)st.throttled, (unsigned long long)st.retries,
	       (unsigned long long)st.budget_cuts, st.budget, MAX);
	SG_CHECK(st.throttled > 0 && st.retries == st.throttled && st.budget_cuts >= 1);
	SG_CHECK(st.reviews == (uint64_t)N + st.retries); /* each token once, plus the retries */
	SG_CHECK(st.api_errors == 0 && st.refused == 0 && st.in_flight == 0 && st.pending == 0);
	SG_CHECK(st.budget < MAX);
	a.free(a.self);
	sg_kube_free(rk);
	sg_kube_ref fs = {.group = "flowcontrol.apiserver.k8s.io",
	                  .version = "v1beta1",
	                  .resource = "flowschemas",
	                  .name = "signet-test-reviews"};
	SG_CHECK_OK(kube_fx_delete(k, fs));
}

static void t_unreachable(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	SG_CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	         getsockname(s, (struct sockaddr *)&sa, &len) == 0);
	/* Bound and never listening: a connection is refused, and the port
	 * stays ours until the case ends (closed, it could be any listener's). */
	char yaml[2048];
	snprintf(yaml, sizeof(yaml),
	         "current-context: t\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
	         "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:%d', certificate-authority: '%s'}}]\n"
	         "users: [{name: u, user: {tokenFile: '%s'}}]\n",
	         ntohs(sa.sin_port), kube_env.ca_file, kube_env.token_file);
	sg_kube *dead = kube_fx_client_yaml(yaml, NULL);
	SG_CHECK(dead != NULL);
	if (!dead) {
		close(s);
		return;
	}
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, dead, NULL));
	char *tok = mint("app", "istio-ca", NULL, NULL);
	struct result r;
	for (int i = 1; i <= 2; i++) {
		SG_CHECK_RC(run(&a, tok, sg_wall_seconds(), &r), SG_EBUSY);
		SG_CHECK(strstr(r.err.msg, "token review unavailable: kube: POST tokenreviews") != NULL);
		result_destroy(&r);
		sg_authn_tokenreview_stats st = stats(&a);
		SG_CHECK(st.reviews == (uint64_t)i && st.api_errors == (uint64_t)i && st.cached == 0 &&
		         st.refused == 0);
	}
	a.free(a.self);
	sg_kube_free(dead);
	close(s);
	/* The same token through the real server: accepted (it was never cached as bad). */
	SG_CHECK_OK(new_tr(&a, k, NULL));
	SG_CHECK_OK(run(&a, tok, sg_wall_seconds(), &r));
	result_destroy(&r);
	a.free(a.self);
	free_token(tok);
}

/* signet's own credentials lack RBAC rights (403) or are unknown (401):
 * not the caller's fault, so SG_EBUSY and not cached. */
static void t_rbac(void)
{
	sg_kube *weak = kube_fx_user_client();
	SG_CHECK(weak != NULL);
	if (!weak)
		return;
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, weak, NULL));
	char *tok = mint("app", "istio-ca", NULL, NULL);
	struct result r;
	for (int i = 1; i <= 2; i++) {
		SG_CHECK_RC(run(&a, tok, sg_wall_seconds(), &r), SG_EBUSY);
		if (i == 1)
			printf("no RBAC: %s\n", r.err.msg);
		SG_CHECK(strstr(r.err.msg, "signet may not create tokenreviews.authentication.k8s.io (RBAC)") != NULL);
		SG_CHECK(strstr(r.err.msg, "User \"signet-user\" cannot create resource \"tokenreviews\"") != NULL);
		result_destroy(&r);
	}
	SG_CHECK(stats(&a).reviews == 2 && stats(&a).api_errors == 2 && stats(&a).refused == 0);
	a.free(a.self);
	sg_kube_free(weak);

	char yaml[2048];
	snprintf(yaml, sizeof(yaml),
	         "current-context: t\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
	         "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n"
	         "users: [{name: u, user: {token: not-a-known-token}}]\n",
	         kube_env.server, kube_env.ca_file);
	sg_kube *unknown = kube_fx_client_yaml(yaml, NULL);
	SG_CHECK(unknown != NULL);
	if (unknown) {
		SG_CHECK_OK(new_tr(&a, unknown, NULL));
		SG_CHECK_RC(run(&a, tok, sg_wall_seconds(), &r), SG_EBUSY);
		SG_CHECK(strstr(r.err.msg, "does not accept signet's credentials") != NULL);
		result_destroy(&r);
		a.free(a.self);
		sg_kube_free(unknown);
	}
	free_token(tok);
}

/* free() while reviews are queued and in flight: each start that was
 * accepted gets exactly one done, a verdict or "shutting down". */
static void t_free_pending(void)
{
	enum { N = 8 };
	char *toks[N];
	for (int i = 0; i < N; i++)
		toks[i] = mint("app", "istio-ca", NULL, NULL);
	sg_authenticator a;
	SG_CHECK_OK(new_tr(&a, k, &(sg_authn_tokenreview_options){.max_inflight = 1}));
	struct result r[2 * N];
	int64_t now = sg_wall_seconds();
	for (int i = 0; i < 2 * N; i++) {
		result_init(&r[i]);
		sg_authn_request req = {.bearer = toks[i % N], .bearer_len = strlen(toks[i % N]), .now = now};
		SG_CHECK_OK(a.start(a.self, &req, on_done, &r[i]));
	}
	a.free(a.self);
	int answered = 0, shut = 0;
	for (int i = 0; i < 2 * N; i++) {
		SG_CHECK(r[i].calls == 1);
		SG_CHECK(r[i].rc == SG_OK || (r[i].rc == SG_EBUSY && strstr(r[i].err.msg, "shutting down")));
		answered += r[i].rc == SG_OK;
		shut += r[i].rc == SG_EBUSY;
		result_destroy(&r[i]);
	}
	printf("free with %d pending: %d answered, %d shutting down\n", 2 * N, answered, shut);
	SG_CHECK(shut > 0);
	for (int i = 0; i < N; i++)
		free_token(toks[i]);
}

static void t_zz_cleanup(void)
{
	sg_kube_free(k);
	k = NULL;
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_accepts), SG_TEST(t_audience), SG_TEST(t_revoked), SG_TEST(t_expired),
             SG_TEST(t_garbage), SG_TEST(t_coalescing), SG_TEST(t_distinct), SG_TEST(t_throttled),
             SG_TEST(t_unreachable), SG_TEST(t_rbac), SG_TEST(t_free_pending), SG_TEST(t_zz_cleanup))
