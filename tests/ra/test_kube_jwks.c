/*
 * sg_jwks_kube against a real kube-apiserver (tests/kube/test_kube_env.h):
 * discovery yields the server's issuer; a TokenRequest token verifies
 * through the jwt authenticator built on the discovered key source (and a
 * token for another audience does not); refreshes of an unchanged JWKS
 * keep the key set's generation; failed refreshes (401, a server that
 * refuses connections, one that never answers) keep the old keys and
 * recover; free() is prompt even with a fetch hanging; new() fails
 * clearly when the server cannot be reached or refuses us. Plus the
 * discovery-document parser on hostile input (no server needed for that,
 * but it lives here with its module).
 *
 * Outages are made with a small TCP relay between the client and the API
 * server (the TLS session passes through it untouched): forward, refuse
 * (accept and close at once) or hold (accept, never answer). Switching
 * cuts every relayed connection, so a pooled HTTP/2 connection cannot
 * hide an outage.
 */
#include "sg_authn_impl.h"
#include "sg_clock.h"
#include "sg_jwks_kube.h"
#include "sg_jwt.h"
#include "sg_kube.h"
#include "sg_log.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NS "signet-jwks"
#define SA "workload"

static sg_kube *k;
static char issuer_want[512]; /* KUBE_SA_ISSUER of the env file */
static char sa_uid[64];

/* ---- the relay ---- */

enum { RELAY_FORWARD, RELAY_REFUSE, RELAY_HOLD };

/* The mode and the epoch are one atomic (epoch << 2 | mode), so that the
 * acceptor never pairs a new mode with an old epoch or the other way round. */
#define RELAY_MODE(state) ((state) & 3)
#define RELAY_EPOCH(state) ((state) >> 2)

static struct {
	int lfd;
	int port;
	int upstream;
	atomic_int state; /* the epoch is bumped on every switch: relayed connections end */
	atomic_int quit;
	atomic_int pumps;
	/* What a switch waits for, rather than a fixed time: the pumps of the
	 * epoch before it have closed their sockets (live pumps by the parity
	 * of their epoch: a switch returns only once the older ones are gone,
	 * so at most two epochs have pumps), and the acceptor has acted on it
	 * (closed what it held, unless holding still). */
	atomic_int pumps_of[2];
	atomic_int acceptor_epoch;
	atomic_int holding; /* connections held now (RELAY_HOLD) */
	pthread_t acceptor;
	int held[64];
	int n_held;
} relay;

struct pump {
	int a, b;
	int epoch;
};

static bool write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static void *pump_thread(void *arg)
{
	struct pump *p = arg;
	char buf[16384];
	struct pollfd fds[2] = {{p->a, POLLIN, 0}, {p->b, POLLIN, 0}};
	bool done = false;
	while (!done && !atomic_load(&relay.quit) && RELAY_EPOCH(atomic_load(&relay.state)) == p->epoch) {
		int r = poll(fds, 2, 50);
		if (r < 0 && errno != EINTR)
			break;
		for (int i = 0; r > 0 && i < 2 && !done; i++) {
			if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = read(fds[i].fd, buf, sizeof(buf));
			done = n <= 0 || !write_all(fds[1 - i].fd, buf, (size_t)n);
		}
	}
	close(p->a);
	close(p->b);
	atomic_fetch_sub(&relay.pumps_of[p->epoch & 1], 1);
	free(p);
	atomic_fetch_sub(&relay.pumps, 1);
	return NULL;
}

static int connect_upstream(void)
{
	int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)relay.upstream)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (u >= 0 && connect(u, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return u;
	if (u >= 0)
		close(u);
	return -1;
}

static void release_held(void)
{
	for (int i = 0; i < relay.n_held; i++)
		close(relay.held[i]);
	relay.n_held = 0;
	atomic_store(&relay.holding, 0);
}

static void *accept_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&relay.quit)) {
		/* Every pump made before this point is counted already, so the
		 * epoch announced here tells relay_set it may count them. */
		int st = atomic_load(&relay.state);
		if (RELAY_MODE(st) != RELAY_HOLD)
			release_held();
		atomic_store(&relay.acceptor_epoch, RELAY_EPOCH(st));
		struct pollfd pf = {relay.lfd, POLLIN, 0};
		if (poll(&pf, 1, 50) <= 0)
			continue;
		int c = accept(relay.lfd, NULL, NULL);
		if (c < 0)
			continue;
		st = atomic_load(&relay.state);
		int mode = RELAY_MODE(st);
		if (mode == RELAY_HOLD && relay.n_held < 64) {
			relay.held[relay.n_held++] = c;
			atomic_store(&relay.holding, relay.n_held);
			continue;
		}
		int u = mode == RELAY_FORWARD ? connect_upstream() : -1;
		if (u < 0) {
			close(c);
			continue;
		}
		struct pump *p = malloc(sizeof(*p));
		if (!p)
			abort();
		*p = (struct pump){c, u, RELAY_EPOCH(st)};
		pthread_t t;
		atomic_fetch_add(&relay.pumps_of[p->epoch & 1], 1);
		atomic_fetch_add(&relay.pumps, 1);
		if (pthread_create(&t, NULL, pump_thread, p) != 0)
			abort();
		pthread_detach(t);
	}
	release_held();
	return NULL;
}

static bool relay_start(void)
{
	const char *colon = strrchr(kube_env.server, ':');
	relay.upstream = colon ? atoi(colon + 1) : 0;
	relay.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	if (relay.upstream <= 0 || relay.lfd < 0 || bind(relay.lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(relay.lfd, 64) != 0 || getsockname(relay.lfd, (struct sockaddr *)&sa, &sl) != 0)
		return false;
	relay.port = ntohs(sa.sin_port);
	return pthread_create(&relay.acceptor, NULL, accept_thread, NULL) == 0;
}

/* Switches the mode and returns once every connection relayed or held
 * before the switch is closed (the pumps and the acceptor notice within
 * 50 ms; waited for, not slept: a loaded machine may take longer), so
 * that a pooled connection cannot outlive an outage. Only the test's
 * thread switches. */
static void relay_set(int mode)
{
	int epoch = RELAY_EPOCH(atomic_load(&relay.state)) + 1;
	atomic_store(&relay.state, (epoch << 2) | mode);
	SG_WAIT_FOR(30000, atomic_load(&relay.acceptor_epoch) == epoch &&
	                       atomic_load(&relay.pumps_of[(epoch - 1) & 1]) == 0);
}

static void relay_stop(void)
{
	atomic_store(&relay.quit, 1);
	pthread_join(relay.acceptor, NULL);
	close(relay.lfd);
	SG_WAIT_FOR(30000, atomic_load(&relay.pumps) == 0);
}

/* ---- helpers ---- */

/* A client of server (NULL: the API server) with the CA of the test
 * server, as the user of token_file (NULL: anonymous). The connect timeout
 * is the request's 30 s: a connection the relay holds then hangs for 30 s
 * unless free() ends it, far from what t_refresh_outage allows free(). */
static sg_kube *client_at(const char *server, const char *token_file)
{
	char yaml[2048];
	int n = snprintf(yaml, sizeof(yaml),
	                 "current-context: t\ncontexts: [{name: t, context: {cluster: c%s}}]\n"
	                 "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n",
	                 token_file ? ", user: u" : "", server ? server : kube_env.server, kube_env.ca_file);
	if (token_file)
		snprintf(yaml + n, sizeof(yaml) - (size_t)n, "users: [{name: u, user: {tokenFile: '%s'}}]\n",
		         token_file);
	return kube_fx_client_yaml(yaml, &(sg_kube_options){.qps = -1, .connect_timeout_ms = 30000});
}

static void copy_file(const char *from, const char *to)
{
	char tmp[700];
	snprintf(tmp, sizeof(tmp), "%s.tmp", to);
	FILE *in = fopen(from, "r"), *out = fopen(tmp, "w");
	if (!in || !out)
		abort();
	char buf[512];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, n, out);
	fclose(in);
	fclose(out);
	if (rename(tmp, to) != 0)
		abort();
}

static void write_text(const char *path, const char *text)
{
	char tmp[700];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		abort();
	FILE *f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
		abort();
}

/* A TokenRequest for NS/SA with one audience; caller frees. */
static char *token_for(const char *aud)
{
	sg_kube_ref ref = {
	    .version = "v1", .resource = "serviceaccounts", .ns = NS, .name = SA, .subresource = "token"};
	json_t *body = json_pack("{s:s, s:s, s:{s:[s], s:i}}", "apiVersion", "authentication.k8s.io/v1", "kind",
	                         "TokenRequest", "spec", "audiences", aud, "expirationSeconds", 600);
	json_t *out = NULL;
	SG_CHECK_OK(kube_fx_create_out(k, ref, body, &out));
	json_t *t = json_object_get(json_object_get(out, "status"), "token");
	char *tok = json_is_string(t) ? strdup(json_string_value(t)) : NULL;
	json_decref(out);
	SG_CHECK(tok != NULL);
	return tok;
}

struct result {
	int calls;
	int rc;
	sg_caller caller;
};

static void on_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	(void)err;
	struct result *r = arg;
	r->calls++;
	r->rc = rc;
	if (caller)
		r->caller = *caller;
}

static int authenticate(const sg_authenticator *a, const char *tok, struct result *r)
{
	memset(r, 0, sizeof(*r));
	sg_authn_request req = {tok, tok ? strlen(tok) : 0, NULL, sg_wall_seconds()};
	return a->start(a->self, &req, on_done, r);
}

static uint64_t generation_of(sg_jwks_kube *d)
{
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(d, &st);
	return st.generation;
}

static sg_jwks_kube_stats stats_of(sg_jwks_kube *d)
{
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(d, &st);
	return st;
}

/* ---- discovery and verification ---- */

static void t_discovery(void)
{
	sg_jwks_kube *d = NULL;
	SG_CHECK_OK(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k}));
	if (!d)
		return;
	SG_CHECK(strcmp(sg_jwks_kube_issuer(d), issuer_want) == 0);
	printf("issuer: %s\n", sg_jwks_kube_issuer(d));
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(d, &st);
	SG_CHECK(st.fetches == 1 && st.failures == 0 && st.updates == 0 && st.consecutive_failures == 0);
	SG_CHECK(st.keys >= 1 && st.last_success > 0 && st.last_failure == 0);
	sg_jwks_file *src = sg_jwks_kube_source(d);
	SG_CHECK(sg_jwks_file_is_pushed(src));
	SG_CHECK(st.generation == sg_jwks_file_poll(src));
	sg_jwks *keys = sg_jwks_file_get(src);
	SG_CHECK(sg_jwks_count(keys) == st.keys);
	sg_jwks_release(keys);
	sg_jwks_kube_free(d);
}

static void t_verify_token(void)
{
	sg_jwks_kube *d = NULL;
	SG_CHECK_OK(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k}));
	if (!d)
		return;
	sg_authenticator a;
	sg_authn_jwt_options o = {
	    .jwks_source = sg_jwks_kube_source(d),
	    .issuer = sg_jwks_kube_issuer(d),
	    .trust_domain = "cluster.local",
	};
	SG_CHECK_OK(sg_authn_jwt_new(&a, &o));
	char *tok = token_for("istio-ca");
	struct result r;
	SG_CHECK_OK(authenticate(&a, tok, &r));
	SG_CHECK(r.calls == 1 && r.rc == 0);
	SG_CHECK(strcmp(r.caller.identity, "spiffe://cluster.local/ns/" NS "/sa/" SA) == 0);
	SG_CHECK(strcmp(r.caller.ns, NS) == 0 && strcmp(r.caller.sa, SA) == 0);
	SG_CHECK(sa_uid[0] && strcmp(r.caller.sa_uid, sa_uid) == 0);
	SG_CHECK(strcmp(r.caller.method, "jwt") == 0);
	SG_CHECK(r.caller.expires > sg_wall_seconds() + 500 && r.caller.expires <= sg_wall_seconds() + 600);

	/* The same service account, another audience: refused. */
	char *other = token_for("some-other-audience");
	SG_CHECK_RC(authenticate(&a, other, &r), SG_EAUTH);
	SG_CHECK_MSG("aud");
	SG_CHECK(r.calls == 0);
	/* Tampered: refused. */
	size_t n = strlen(tok);
	tok[n - 5] = tok[n - 5] == 'A' ? 'B' : 'A';
	SG_CHECK_RC(authenticate(&a, tok, &r), SG_EAUTH);
	free(tok);
	free(other);
	a.free(a.self);
	sg_jwks_kube_free(d);
}

/* ---- refresh ---- */

/* Unchanged keys: every fetch succeeds and the generation stays (no cache
 * churn), both on demand and from the refresher thread. */
static void t_refresh_no_churn(void)
{
	sg_jwks_kube *d = NULL;
	SG_CHECK_OK(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k, .refresh_seconds = 1}));
	if (!d)
		return;
	uint64_t gen = generation_of(d);
	SG_CHECK_OK(sg_jwks_kube_refresh(d));
	SG_CHECK(generation_of(d) == gen);
	/* Two refresher rounds (one a second) after the fetches at new and
	 * above; a fetch counts when it starts, so wait for the round after
	 * them too, which the refresher starts only once they have ended. */
	uint64_t t0 = sg_now_ns();
	SG_WAIT_FOR(30000, stats_of(d).fetches >= 5);
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(d, &st);
	printf("no churn: %llu fetches in %.1f s\n", (unsigned long long)st.fetches,
	       (double)(sg_now_ns() - t0) / 1e9);
	SG_CHECK(st.fetches >= 5 && st.failures == 0 && st.updates == 0);
	SG_CHECK(st.generation == gen);
	sg_jwks_kube_free(d);
}

/* The API server refuses our token (401): the refresh fails, the old keys
 * stay and still verify, and a good token again recovers. */
static void t_refresh_unauthorized(void)
{
	char token[700];
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(token, sizeof(token), "%s/kube-jwks-token.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
	copy_file(kube_env.token_file, token);
	sg_kube *kk = client_at(NULL, token);
	SG_CHECK(kk != NULL);
	if (!kk)
		return;
	sg_jwks_kube *d = NULL;
	SG_CHECK_OK(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = kk}));
	if (!d) {
		sg_kube_free(kk);
		return;
	}
	sg_authenticator a;
	sg_authn_jwt_options o = {
	    .jwks_source = sg_jwks_kube_source(d), .issuer = sg_jwks_kube_issuer(d), .trust_domain = "cluster.local"};
	SG_CHECK_OK(sg_authn_jwt_new(&a, &o));
	uint64_t gen = generation_of(d);

	write_text(token, "not-a-valid-token\n");
	/* The client looks at its token file again on the first request a
	 * second or more after its last look: past 1.1 s the next request is
	 * sure to, however slow the machine, so a fixed time is exact here.
	 * Time is the mechanism under test, and no state shows it has passed
	 * (the look happens inside the next request): a sleep, not a wait. */
	sg_sleep_ms(1100);
	SG_CHECK_RC(sg_jwks_kube_refresh(d), SG_EAUTH);
	SG_CHECK_MSG("JWKS discovery: cannot fetch the JWKS from the API server: kube: GET /openid/v1/jwks: 401");
	SG_CHECK_RC(sg_jwks_kube_refresh(d), SG_EAUTH);
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(d, &st);
	SG_CHECK(st.failures == 2 && st.consecutive_failures == 2 && st.last_failure > 0);
	SG_CHECK(st.generation == gen && st.keys >= 1);
	char *tok = token_for("istio-ca");
	struct result r;
	SG_CHECK_OK(authenticate(&a, tok, &r)); /* verified locally with the kept keys */

	copy_file(kube_env.token_file, token);
	sg_sleep_ms(1100); /* as above */
	SG_CHECK_OK(sg_jwks_kube_refresh(d));
	sg_jwks_kube_stats_get(d, &st);
	SG_CHECK(st.consecutive_failures == 0 && st.failures == 2 && st.generation == gen);
	free(tok);
	a.free(a.self);
	sg_jwks_kube_free(d);
	sg_kube_free(kk);
	unlink(token);
}

/* Through the relay: the server refuses connections, then never answers,
 * then is back. The refresher backs off, keeps the keys, recovers without
 * a new generation, and free() does not wait for a hanging fetch. */
static void t_refresh_outage(void)
{
	char server[64];
	snprintf(server, sizeof(server), "https://127.0.0.1:%d", relay.port);
	sg_kube *kk = client_at(server, kube_env.token_file);
	SG_CHECK(kk != NULL);
	if (!kk)
		return;
	relay_set(RELAY_FORWARD);
	sg_jwks_kube *d = NULL;
	SG_CHECK_OK(
	    sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = kk, .refresh_seconds = 2, .min_refresh_seconds = 1}));
	if (!d) {
		sg_kube_free(kk);
		return;
	}
	SG_CHECK(strcmp(sg_jwks_kube_issuer(d), issuer_want) == 0);
	uint64_t gen = generation_of(d);
	sg_authenticator a;
	sg_authn_jwt_options o = {
	    .jwks_source = sg_jwks_kube_source(d), .issuer = sg_jwks_kube_issuer(d), .trust_domain = "cluster.local"};
	SG_CHECK_OK(sg_authn_jwt_new(&a, &o));
	char *tok = token_for("istio-ca");
	struct result r;

	/* Refused connections: the refresh fails with a transport error. */
	relay_set(RELAY_REFUSE);
	SG_CHECK_RC(sg_jwks_kube_refresh(d), SG_EBUSY);
	SG_CHECK_MSG("JWKS discovery: cannot fetch the JWKS from the API server: kube: GET /openid/v1/jwks:");
	/* The refresher too, backing off: 2 s, then 1 s, 2 s, 2 s ... Two
	 * failures of its own (about 3 s), waited for. */
	SG_WAIT_FOR(30000, stats_of(d).failures >= 3 && stats_of(d).consecutive_failures >= 2);
	sg_jwks_kube_stats st;
	sg_jwks_kube_stats_get(d, &st);
	printf("outage: %llu fetches, %llu failures, %llu in a row\n", (unsigned long long)st.fetches,
	       (unsigned long long)st.failures, (unsigned long long)st.consecutive_failures);
	SG_CHECK(st.failures >= 3 && st.consecutive_failures >= 2);
	SG_CHECK(st.generation == gen && st.keys >= 1);
	SG_CHECK_OK(authenticate(&a, tok, &r)); /* no API server needed to verify */
	SG_CHECK(r.calls == 1 && strcmp(r.caller.sa, SA) == 0);

	/* Back: the next refresh succeeds, same keys, same generation. */
	relay_set(RELAY_FORWARD);
	SG_CHECK_OK(sg_jwks_kube_refresh(d));
	sg_jwks_kube_stats_get(d, &st);
	SG_CHECK(st.consecutive_failures == 0 && st.generation == gen && st.updates == 0);

	/* A server that accepts and never answers: the refresher's fetch hangs
	 * (the connect and request timeouts are 30 s); free() ends it within
	 * about a second. The bound leaves a loaded machine room and is still
	 * far below the 30 s a free that waited for the fetch would take. */
	relay_set(RELAY_HOLD);
	/* The refresher is inside its fetch once the relay holds its
	 * connection (relay_set closed every older one). */
	SG_WAIT_FOR(30000, atomic_load(&relay.holding) >= 1);
	a.free(a.self);
	uint64_t t0 = sg_now_ns();
	sg_jwks_kube_free(d);
	double s = (double)(sg_now_ns() - t0) / 1e9;
	printf("free with a hanging fetch: %.2f s\n", s);
	SG_CHECK(s < 10);
	relay_set(RELAY_FORWARD);
	free(tok);
	sg_kube_free(kk);
}

/* ---- failures at new ---- */

static void t_new_fails(void)
{
	sg_log_set_fd(open("/dev/null", O_WRONLY | O_CLOEXEC));
	sg_jwks_kube *d = NULL;
	/* Nothing listens: a port bound but not listening refuses connections. */
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	SG_CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	         getsockname(s, (struct sockaddr *)&sa, &sl) == 0);
	char server[64];
	snprintf(server, sizeof(server), "https://127.0.0.1:%d", ntohs(sa.sin_port));
	sg_kube *kk = client_at(server, kube_env.token_file);
	SG_CHECK(kk != NULL);
	SG_CHECK_RC(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = kk}), SG_EBUSY);
	SG_CHECK_MSG("JWKS discovery: cannot fetch the OIDC discovery document from the API server: kube: GET "
	             "/.well-known/openid-configuration:");
	printf("unreachable: %s\n", sg_error_last()->msg);
	SG_CHECK(d == NULL);
	sg_kube_free(kk);
	close(s);

	/* Through the relay, refused: the same, fast. */
	snprintf(server, sizeof(server), "https://127.0.0.1:%d", relay.port);
	relay_set(RELAY_REFUSE);
	kk = client_at(server, kube_env.token_file);
	SG_CHECK_RC(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = kk}), SG_EBUSY);
	sg_kube_free(kk);
	relay_set(RELAY_FORWARD);

	/* Anonymous: the server answers 403 (discovery needs a credential). */
	kk = client_at(NULL, NULL);
	SG_CHECK_RC(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = kk}), SG_EAUTH);
	SG_CHECK_MSG("kube: GET /.well-known/openid-configuration: 403 Forbidden");
	sg_kube_free(kk);

	/* Options. */
	SG_CHECK_RC(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){0}), SG_EINVAL);
	SG_CHECK_RC(sg_jwks_kube_new(&d, NULL), SG_EINVAL);
	SG_CHECK_RC(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k, .refresh_seconds = -1}), SG_EINVAL);
	SG_CHECK_RC(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k, .refresh_seconds = 86401}), SG_EINVAL);
	SG_CHECK_RC(
	    sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k, .refresh_seconds = 5, .min_refresh_seconds = 6}),
	    SG_EINVAL);
	SG_CHECK(d == NULL);
	/* A short refresh interval caps the default minimum. */
	SG_CHECK_OK(sg_jwks_kube_new(&d, &(sg_jwks_kube_options){.kube = k, .refresh_seconds = 3}));
	sg_jwks_kube_free(d);
	sg_jwks_kube_free(NULL);
	sg_log_set_fd(2);
}

/* ---- the discovery document (hostile input) ---- */

static int parse(const char *doc, char *iss, size_t cap)
{
	return sg_jwks_kube_parse_discovery(doc, strlen(doc), iss, cap);
}

static void t_parse_discovery(void)
{
	char iss[SG_JWKS_KUBE_ISSUER_MAX + 1];
	/* What kube-apiserver 1.20 serves. */
	const char *real = "{\"issuer\":\"https://kubernetes.default.svc.cluster.local\","
	                   "\"jwks_uri\":\"https://127.0.0.1:6443/openid/v1/jwks\","
	                   "\"response_types_supported\":[\"id_token\"],\"subject_types_supported\":[\"public\"],"
	                   "\"id_token_signing_alg_values_supported\":[\"RS256\"]}";
	SG_CHECK_OK(parse(real, iss, sizeof(iss)));
	SG_CHECK(strcmp(iss, "https://kubernetes.default.svc.cluster.local") == 0);
	/* Issuers with ports, paths and escapes (EKS, GKE, self-hosted). */
	static const char *const good[] = {
	    "https://oidc.eks.eu-west-1.amazonaws.com/id/0123456789ABCDEF",
	    "https://container.googleapis.com/v1/projects/p/locations/europe-west1/clusters/c",
	    "https://10.0.0.1:6443",
	    "https://[fd00::1]:6443/x",
	    "https://example.com/a%2Fb",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char doc[512];
		snprintf(doc, sizeof(doc), "{\"issuer\":\"%s\"}", good[i]);
		SG_CHECK_OK(parse(doc, iss, sizeof(iss)));
		SG_CHECK(strcmp(iss, good[i]) == 0);
	}

	/* Refused, each with its reason, never quoting the input. */
	static const struct {
		const char *doc;
		const char *why;
	} bad[] = {
	    {"", "not valid JSON"},
	    {"<html>nope</html>", "not valid JSON"},
	    {"{\"issuer\":\"https://a\"", "not valid JSON"},
	    {"[\"https://a\"]", "not a JSON object"},
	    {"\"https://a\"", "not valid JSON"}, /* jansson wants an array or object */
	    {"{}", "has no \"issuer\""},
	    {"{\"issuer\":null}", "\"issuer\" is not a string"},
	    {"{\"issuer\":42}", "\"issuer\" is not a string"},
	    {"{\"issuer\":[\"https://a\"]}", "\"issuer\" is not a string"},
	    {"{\"issuer\":{\"url\":\"https://a\"}}", "\"issuer\" is not a string"},
	    {"{\"issuer\":\"https://a\",\"issuer\":\"https://b\"}", "not valid JSON"},
	    {"{\"issuer\":\"\"}", "\"issuer\" is empty"},
	    {"{\"issuer\":\"http://kubernetes.default.svc\"}", "not an https URL"},
	    {"{\"issuer\":\"HTTPS://kubernetes.default.svc\"}", "not an https URL"},
	    {"{\"issuer\":\"kubernetes/serviceaccount\"}", "not an https URL"},
	    {"{\"issuer\":\"https://\"}", "not an https URL"},
	    {"{\"issuer\":\"https:///path\"}", "has no host"},
	    {"{\"issuer\":\"https://user:pw@evil.example\"}", "carries userinfo"},
	    {"{\"issuer\":\"https://a.example/?x=1\"}", "query or fragment"},
	    {"{\"issuer\":\"https://a.example/#f\"}", "query or fragment"},
	    /* jansson refuses \u0000 without JSON_ALLOW_NUL; the length check
	     * behind it would catch one if that flag were ever turned on. */
	    {"{\"issuer\":\"https://a.example/\\u0000x\"}", "not valid JSON"},
	    {"{\"issuer\":\"https://a.example/a b\"}", "is not a URL character"},
	    {"{\"issuer\":\"https://a.example/\\n\"}", "is not a URL character"},
	    {"{\"issuer\":\"https://a.example/\\\"x\"}", "is not a URL character"},
	    {"{\"issuer\":\"https://a.example/\\u00e9\"}", "is not a URL character"},
	    {"{\"issuer\":\"https://a.example/%zz\"}", "malformed %-escape"},
	    {"{\"issuer\":\"https://a.example/%2\"}", "malformed %-escape"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		strcpy(iss, "stale");
		int rc = parse(bad[i].doc, iss, sizeof(iss));
		SG_CHECK_RC(rc, SG_EINVAL);
		SG_CHECK_MSG(bad[i].why);
		SG_CHECK(iss[0] == 0);
		if (rc != SG_EINVAL || !strstr(sg_error_last()->msg, bad[i].why))
			fprintf(stderr, "  case %zu: %s\n", i, bad[i].doc);
	}

	/* Sizes: the issuer at its limit and one byte over; a capacity too
	 * small; a document over the limit (refused before parsing). */
	char *doc = malloc(SG_JWKS_KUBE_DISCOVERY_MAX + 64);
	char *long_iss = malloc(SG_JWKS_KUBE_ISSUER_MAX + 2);
	memcpy(long_iss, "https://a/", 10);
	memset(long_iss + 10, 'x', SG_JWKS_KUBE_ISSUER_MAX - 10);
	long_iss[SG_JWKS_KUBE_ISSUER_MAX] = 0;
	snprintf(doc, SG_JWKS_KUBE_DISCOVERY_MAX, "{\"issuer\":\"%s\"}", long_iss);
	SG_CHECK_OK(parse(doc, iss, sizeof(iss)));
	SG_CHECK(strlen(iss) == SG_JWKS_KUBE_ISSUER_MAX);
	SG_CHECK_RC(parse(doc, iss, SG_JWKS_KUBE_ISSUER_MAX), SG_EINVAL);
	SG_CHECK_MSG("does not fit");
	long_iss[SG_JWKS_KUBE_ISSUER_MAX] = 'x';
	long_iss[SG_JWKS_KUBE_ISSUER_MAX + 1] = 0;
	snprintf(doc, SG_JWKS_KUBE_DISCOVERY_MAX, "{\"issuer\":\"%s\"}", long_iss);
	SG_CHECK_RC(parse(doc, iss, sizeof(iss)), SG_EINVAL);
	SG_CHECK_MSG("more than 1024");
	size_t n = SG_JWKS_KUBE_DISCOVERY_MAX + 1;
	memset(doc, ' ', n);
	memcpy(doc, "{\"issuer\":\"https://a\"}", 22);
	SG_CHECK_RC(sg_jwks_kube_parse_discovery(doc, n, iss, sizeof(iss)), SG_EINVAL);
	SG_CHECK_MSG("more than 65536");
	SG_CHECK_OK(sg_jwks_kube_parse_discovery(doc, n - 1, iss, sizeof(iss))); /* trailing spaces are JSON */
	free(doc);
	free(long_iss);
}

/* ---- set-up ---- */

static void t_start(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	kube_fx_env_value("KUBE_SA_ISSUER", issuer_want, sizeof(issuer_want));
	SG_CHECK(strncmp(issuer_want, "https://", 8) == 0);
	SG_CHECK(relay_start());

	/* The namespace and service account the tokens are for (no
	 * controller-manager runs, so the test makes them); a shared server
	 * may have them from an earlier run. */
	SG_CHECK_OK(kube_fx_ensure(k, KUBE_FX_CORE("namespaces", NULL, NULL), kube_fx_namespace(NS, NULL, NULL)));
	json_t *sa =
	    json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "ServiceAccount", "metadata", "name", SA);
	SG_CHECK_OK(kube_fx_ensure(k, KUBE_FX_CORE("serviceaccounts", NS, NULL), sa));
	json_t *got = kube_fx_get(k, KUBE_FX_CORE("serviceaccounts", NS, SA));
	SG_CHECK(got != NULL);
	const char *uid = sg_kube_meta_str(got, "uid");
	snprintf(sa_uid, sizeof(sa_uid), "%s", uid ? uid : "");
	json_decref(got);
}

static void t_zz_stop(void)
{
	relay_stop();
	sg_kube_free(k);
	k = NULL;
}

SG_TEST_MAIN(SG_TEST(t_parse_discovery), SG_TEST(t_start), SG_TEST(t_discovery), SG_TEST(t_verify_token),
             SG_TEST(t_refresh_no_churn), SG_TEST(t_refresh_unauthorized), SG_TEST(t_refresh_outage),
             SG_TEST(t_new_fails), SG_TEST(t_zz_stop))
