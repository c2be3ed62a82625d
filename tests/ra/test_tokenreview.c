/*
 * Tests for ra/sg_authn_kube.h that need no API server: the TokenReview
 * answer parser against hostile JSON (missing members, wrong types,
 * usernames of 3 and 5 parts, no service-account group, extras that are
 * not arrays, huge strings, audiences that do not meet ours), the
 * unverified exp probe, the options' bounds, and the authenticator's
 * behaviour when the API cannot answer: a closed port (SG_EBUSY, never
 * cached, the review budget unchanged), a listener that never answers
 * (timeouts, which halve the budget; the bounded queue; and
 * free() completing every pending request exactly once). Everything stays
 * on 127.0.0.1. The real API server's answers are in test_kube_tokenreview.c.
 */
#include "sg_authn_impl.h"
#include "sg_authn_kube.h"
#include "sg_clock.h"
#include "sg_jwt.h"
#include "sg_review_budget.h"
#include "sg_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
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

#define NOW INT64_C(1700000000)
#define TD "cluster.local"

/* ---- the parser ---- */

static const sg_tokenreview_expect expect = {.trust_domain = TD};

/* A TokenReview answer around a status object. */
static int parse_status(const char *status, sg_caller *c)
{
	char buf[8192];
	snprintf(buf, sizeof(buf),
	         "{\"kind\":\"TokenReview\",\"apiVersion\":\"authentication.k8s.io/v1\",\"metadata\":{},"
	         "\"spec\":{\"token\":\"t\",\"audiences\":[\"istio-ca\"]},\"status\":%s}",
	         status);
	return sg_tokenreview_parse_bytes(buf, strlen(buf), &expect, c);
}

#define USER_OK                                                                                                        \
	"\"user\":{\"username\":\"system:serviceaccount:default:sleep\",\"uid\":\"2f1c3d4e-0000-4000-8000-"            \
	"00000000abcd\","                                                                                              \
	"\"groups\":[\"system:serviceaccounts\",\"system:serviceaccounts:default\",\"system:authenticated\"],"         \
	"\"extra\":{\"authentication.kubernetes.io/pod-name\":[\"sleep-5d8f\"],"                                       \
	"\"authentication.kubernetes.io/pod-uid\":[\"7c2e11aa-0000-4000-8000-000000000001\"]}}"

static void t_parse_good(void)
{
	sg_caller c;
	SG_CHECK_OK(parse_status("{\"authenticated\":true," USER_OK ",\"audiences\":[\"istio-ca\"]}", &c));
	SG_CHECK(strcmp(c.identity, "spiffe://cluster.local/ns/default/sa/sleep") == 0);
	SG_CHECK(strcmp(c.ns, "default") == 0 && strcmp(c.sa, "sleep") == 0);
	SG_CHECK(strcmp(c.sa_uid, "2f1c3d4e-0000-4000-8000-00000000abcd") == 0);
	SG_CHECK(strcmp(c.pod_name, "sleep-5d8f") == 0);
	SG_CHECK(strcmp(c.pod_uid, "7c2e11aa-0000-4000-8000-000000000001") == 0);
	SG_CHECK(c.expires == 0 && c.method && strcmp(c.method, "tokenreview") == 0);

	/* No audiences, no extra, no uid, no kind: still a caller (as istiod). */
	const char *bare = "{\"status\":{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b.c\","
	                   "\"groups\":[\"system:serviceaccounts\"]}}}";
	SG_CHECK_OK(sg_tokenreview_parse_bytes(bare, strlen(bare), &expect, &c));
	SG_CHECK(strcmp(c.identity, "spiffe://cluster.local/ns/a/sa/b.c") == 0 && c.pod_name[0] == '\0' &&
	         c.sa_uid[0] == '\0');

	/* Several audiences asked for: one in common is enough. */
	static const char *const two[] = {"https://kubernetes.default.svc", "istio-ca"};
	sg_tokenreview_expect x2 = {.audiences = two, .n_audiences = 2, .trust_domain = "corp@example.com"};
	const char *doc = "{\"status\":{\"authenticated\":true," USER_OK ",\"audiences\":[\"istio-ca\"]}}";
	SG_CHECK_OK(sg_tokenreview_parse_bytes(doc, strlen(doc), &x2, &c));
	SG_CHECK(strcmp(c.identity, "spiffe://corp.example.com/ns/default/sa/sleep") == 0);

	/* An empty pod-name array: no pod. */
	SG_CHECK_OK(parse_status("{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:x:y\","
	                         "\"groups\":[\"system:serviceaccounts\"],\"extra\":{"
	                         "\"authentication.kubernetes.io/pod-name\":[],\"other\":7}}}",
	                         &c));
	SG_CHECK(c.pod_name[0] == '\0');
}

static const struct {
	const char *status; /* NULL: the whole document is `doc` */
	const char *doc;
	int rc;
	const char *msg;
} hostile[] = {
    /* The envelope: the API server's fault, SG_EPROTO. */
    {NULL, "not json", SG_EPROTO, "not valid JSON"},
    {NULL, "[1,2]", SG_EPROTO, "not a JSON object"},
    {NULL, "{\"kind\":\"Status\",\"status\":{}}", SG_EPROTO, "not a TokenReview"},
    {NULL, "{\"kind\":7,\"status\":{}}", SG_EPROTO, "not a TokenReview"},
    {NULL, "{\"kind\":\"TokenReview\"}", SG_EPROTO, "no status object"},
    {NULL, "{\"status\":[]}", SG_EPROTO, "no status object"},
    {NULL, "{\"status\":{},\"status\":{}}", SG_EPROTO, "not valid JSON"},
    {"\"yes\"", NULL, SG_EPROTO, "no status object"},
    {"{\"authenticated\":\"true\"}", NULL, SG_EPROTO, "authenticated is not a boolean"},
    {"{\"authenticated\":1," USER_OK "}", NULL, SG_EPROTO, "authenticated is not a boolean"},
    /* The verdict. */
    {"{}", NULL, SG_EAUTH, "token review: not authenticated"},
    {"{\"authenticated\":false," USER_OK "}", NULL, SG_EAUTH, "token review: not authenticated"},
    {"{\"user\":{},\"error\":\"[invalid bearer token, token audiences [\\\"x\\\"] is invalid]\"}", NULL, SG_EAUTH,
     "token review: not authenticated: [invalid bearer token, token audiences [\"x\"] is invalid]"},
    {"{\"authenticated\":true," USER_OK ",\"error\":\"webhook said so\"}", NULL, SG_EAUTH,
     "token review: error: webhook said so"},
    {"{\"authenticated\":true," USER_OK ",\"error\":42}", NULL, SG_EAUTH, "status.error is not a string"},
    {"{\"authenticated\":false,\"error\":\"a\\u0001b\\nc\\u00e9\"}", NULL, SG_EAUTH, "not authenticated: a?b?c??"},
    /* The user. */
    {"{\"authenticated\":true}", NULL, SG_EAUTH, "authenticated, but no user"},
    {"{\"authenticated\":true,\"user\":\"system:serviceaccount:a:b\"}", NULL, SG_EAUTH, "no user"},
    {"{\"authenticated\":true,\"user\":{\"groups\":[\"system:serviceaccounts\"]}}", NULL, SG_EAUTH,
     "no username string"},
    {"{\"authenticated\":true,\"user\":{\"username\":7,\"groups\":[\"system:serviceaccounts\"]}}", NULL, SG_EAUTH,
     "no username string"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"admin\",\"groups\":[\"system:masters\"]}}", NULL, SG_EAUTH,
     "user \"admin\" is not a service account"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:default\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not system:serviceaccount:<namespace>:<name>"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:default:sleep:x\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not system:serviceaccount:<namespace>:<name>"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccounts:default:sleep\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not a service account"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount::sleep\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not a DNS-1123 label"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:Default:sleep\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not a DNS-1123 label"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:default:\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not a DNS-1123 subdomain"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:default:a/b\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not a DNS-1123 subdomain"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:"
     "a123456789012345678901234567890123456789012345678901234567890123:sleep\","
     "\"groups\":[\"system:serviceaccounts\"]}}",
     NULL, SG_EAUTH, "is not a DNS-1123 label"},
    /* Groups. */
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\"}}", NULL, SG_EAUTH,
     "no groups array"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":\"system:serviceaccounts\"}}",
     NULL, SG_EAUTH, "no groups array"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:authenticated\",\"system:serviceaccounts:a\"]}}",
     NULL, SG_EAUTH, "not in group system:serviceaccounts"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\",null]}}",
     NULL, SG_EAUTH, "group 1 is not a string"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\",\"groups\":[]}}", NULL, SG_EAUTH,
     "not in group system:serviceaccounts"},
    /* uid and extra. */
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"uid\":12}}",
     NULL, SG_EAUTH, "user uid is malformed"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"uid\":\"a b\"}}",
     NULL, SG_EAUTH, "user uid is malformed"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"extra\":[]}}",
     NULL, SG_EAUTH, "extra is not an object"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"extra\":{\"authentication.kubernetes.io/pod-name\":\"p\"}}}",
     NULL, SG_EAUTH, "extra authentication.kubernetes.io/pod-name is not an array"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"extra\":{\"authentication.kubernetes.io/pod-uid\":[1]}}}",
     NULL, SG_EAUTH, "extra authentication.kubernetes.io/pod-uid holds a non-string"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"extra\":{\"authentication.kubernetes.io/pod-name\":[\"Pod_1\"]}}}",
     NULL, SG_EAUTH, "pod name is not a DNS-1123 subdomain"},
    {"{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:a:b\","
     "\"groups\":[\"system:serviceaccounts\"],\"extra\":{\"authentication.kubernetes.io/pod-uid\":[\"\"]}}}",
     NULL, SG_EAUTH, "pod uid is malformed"},
    /* Audiences. */
    {"{\"authenticated\":true," USER_OK ",\"audiences\":[\"https://kubernetes.default.svc\"]}", NULL, SG_EAUTH,
     "the token's audiences do not include istio-ca"},
    {"{\"authenticated\":true," USER_OK ",\"audiences\":[]}", NULL, SG_EAUTH, "do not include istio-ca"},
    {"{\"authenticated\":true," USER_OK ",\"audiences\":\"istio-ca\"}", NULL, SG_EAUTH,
     "status.audiences is not an array"},
    {"{\"authenticated\":true," USER_OK ",\"audiences\":[7,\"istio-ca\"]}", NULL, SG_EAUTH,
     "audience 0 is not a string"},
};

static void t_parse_hostile(void)
{
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		sg_caller c;
		memset(&c, 0x5a, sizeof(c));
		int rc = hostile[i].status
		             ? parse_status(hostile[i].status, &c)
		             : sg_tokenreview_parse_bytes(hostile[i].doc, strlen(hostile[i].doc), &expect, &c);
		if (rc != hostile[i].rc || !strstr(sg_error_last()->msg, hostile[i].msg)) {
			fprintf(stderr, "case %zu: rc %d, message \"%s\"; want %d, \"%s\"\n", i, rc,
			        sg_error_last()->msg, hostile[i].rc, hostile[i].msg);
		}
		SG_CHECK(rc == hostile[i].rc);
		SG_CHECK(strstr(sg_error_last()->msg, hostile[i].msg) != NULL);
		/* A refusal leaves nothing behind. */
		SG_CHECK(c.identity[0] == '\0' && c.ns[0] == '\0' && c.method == NULL);
	}
}

static void t_parse_limits(void)
{
	sg_caller c;
	/* A huge status.error is cut at SG_TOKENREVIEW_ERROR_MAX bytes. */
	size_t big = 100000;
	char *doc = malloc(big + 200);
	SG_CHECK(doc != NULL);
	if (!doc)
		return;
	int n = snprintf(doc, 200, "{\"status\":{\"error\":\"");
	memset(doc + n, 'e', big);
	snprintf(doc + n + big, 200, "\"}}");
	SG_CHECK_RC(sg_tokenreview_parse_bytes(doc, strlen(doc), &expect, &c), SG_EAUTH);
	SG_CHECK(strlen(sg_error_last()->msg) < 40 + SG_TOKENREVIEW_ERROR_MAX);
	SG_CHECK_MSG("eee...");
	/* A huge username: refused, quoted at most 64 bytes. */
	n = snprintf(doc, 200,
	             "{\"status\":{\"authenticated\":true,\"user\":{\"groups\":[\"system:serviceaccounts\"],"
	             "\"username\":\"system:serviceaccount:a:");
	memset(doc + n, 'b', big);
	snprintf(doc + n + big, 200, "\"}}}");
	SG_CHECK_RC(sg_tokenreview_parse_bytes(doc, strlen(doc), &expect, &c), SG_EAUTH);
	SG_CHECK_MSG("is not a DNS-1123 subdomain");
	SG_CHECK(strlen(sg_error_last()->msg) < 200);
	free(doc);

	/* Larger than SG_TOKENREVIEW_ANSWER_MAX: not even parsed. */
	size_t over = SG_TOKENREVIEW_ANSWER_MAX + 1;
	char *huge = malloc(over);
	SG_CHECK(huge != NULL);
	if (huge) {
		memset(huge, ' ', over);
		huge[0] = '{';
		huge[over - 1] = '}';
		SG_CHECK_RC(sg_tokenreview_parse_bytes(huge, over, &expect, &c), SG_EPROTO);
		SG_CHECK_MSG("more than");
		free(huge);
	}
	SG_CHECK_RC(sg_tokenreview_parse_bytes("", 0, &expect, &c), SG_EPROTO);

	/* Deep nesting stops in jansson's depth limit, as malformed. */
	size_t depth = 5000;
	char *deep = malloc(2 * depth + 20);
	if (deep) {
		n = snprintf(deep, 20, "{\"status\":");
		memset(deep + n, '[', depth);
		memset(deep + n + depth, ']', depth);
		snprintf(deep + n + 2 * depth, 20, "}");
		SG_CHECK_RC(sg_tokenreview_parse_bytes(deep, strlen(deep), &expect, &c), SG_EPROTO);
		free(deep);
	}

	/* NUL inside a string (only reachable through the json_t entry). */
	json_t *r = json_pack("{s:{s:b, s:{s:o, s:[s]}}}", "status", "authenticated", 1, "user", "username",
	                      json_stringn("system:serviceaccount:a:b\0:c", 29), "groups", "system:serviceaccounts");
	SG_CHECK(r != NULL);
	SG_CHECK_RC(sg_tokenreview_parse(r, &expect, &c), SG_EAUTH);
	SG_CHECK_MSG("no username string");
	json_decref(r);

	/* The identity does not fit SG_ID_MAX: refused, not cut. */
	char td[256];
	memset(td, 't', 255);
	td[255] = '\0';
	char sa[254];
	memset(sa, 's', 253);
	sa[253] = '\0';
	char status[1024];
	snprintf(status, sizeof(status),
	         "{\"authenticated\":true,\"user\":{\"username\":\"system:serviceaccount:"
	         "n12345678901234567890123456789012345678901234567890123456789012:%s\","
	         "\"groups\":[\"system:serviceaccounts\"]}}",
	         sa);
	char full[1200];
	snprintf(full, sizeof(full), "{\"status\":%s}", status);
	sg_tokenreview_expect xl = {.trust_domain = td};
	SG_CHECK_RC(sg_tokenreview_parse_bytes(full, strlen(full), &xl, &c), SG_EAUTH);
	SG_CHECK_MSG("identity is longer than 511 bytes");

	/* No trust domain is the caller's mistake. */
	sg_tokenreview_expect none = {0};
	SG_CHECK_RC(sg_tokenreview_parse_bytes(full, strlen(full), &none, &c), SG_EINVAL);
}

/* ---- the exp probe ---- */

/* "<header>.<base64url(payload)>.c2ln"; caller frees. */
static char *jwt_with(const char *payload)
{
	size_t cap = strlen(payload) * 2 + 64;
	char *t = malloc(cap);
	if (!t)
		abort();
	int n = snprintf(t, cap, "eyJhbGciOiJSUzI1NiJ9.");
	if (sg_b64url_encode((const uint8_t *)payload, strlen(payload), t + n, cap - (size_t)n) != 0)
		abort();
	strcat(t, ".c2ln");
	return t;
}

static void t_token_exp(void)
{
	static const struct {
		const char *payload;
		bool ok;
		int64_t exp;
	} cases[] = {
	    {"{\"exp\":1700000600,\"sub\":\"system:serviceaccount:a:b\"}", true, 1700000600},
	    {"{\"exp\":1700000600.9}", true, 1700000600},
	    {"{\"exp\":0}", true, 0},
	    {"{\"exp\":253402300799}", true, INT64_C(253402300799)},
	    {"{\"exp\":253402300800}", false, 0},
	    {"{\"exp\":-1}", false, 0},
	    {"{\"exp\":\"1700000600\"}", false, 0},
	    {"{\"exp\":null}", false, 0},
	    {"{\"iat\":1700000000}", false, 0},
	    {"{\"exp\":1,\"exp\":2}", false, 0},
	    {"[1700000600]", false, 0},
	    {"not json", false, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *t = jwt_with(cases[i].payload);
		int64_t exp = -7;
		bool ok = sg_tokenreview_token_exp(t, strlen(t), &exp);
		if (ok != cases[i].ok || exp != cases[i].exp)
			fprintf(stderr, "exp case %zu: %d %lld\n", i, ok, (long long)exp);
		SG_CHECK(ok == cases[i].ok && exp == cases[i].exp);
		free(t);
	}
	int64_t exp;
	static const char *const shapes[] = {
	    "",
	    "opaque-static-token",
	    "a.b",
	    "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjF9",       /* no third part */
	    "eyJhbGciOiJSUzI1NiJ9..c2ln",              /* empty payload */
	    "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjF9=.c2ln", /* padding */
	    "eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjF+.c2ln",  /* standard alphabet */
	    "eyJhbGciOiJSUzI1NiJ9.e.c2ln",             /* 1 mod 4 */
	};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		exp = -7;
		SG_CHECK(!sg_tokenreview_token_exp(shapes[i], strlen(shapes[i]), &exp) && exp == 0);
	}
	SG_CHECK(!sg_tokenreview_token_exp(NULL, 0, &exp));
	/* A payload larger than 8 KiB is not decoded. */
	char *pl = malloc(9000);
	if (pl) {
		memset(pl, ' ', 8999);
		memcpy(pl, "{\"exp\":5", 8);
		pl[8997] = '}';
		pl[8998] = '\0';
		char *t = jwt_with(pl);
		SG_CHECK(!sg_tokenreview_token_exp(t, strlen(t), &exp));
		free(t);
		free(pl);
	}
}

/* ---- the authenticator without an API server ---- */

/* A port on 127.0.0.1 nobody listens on: bound and never listening, so a
 * connection is refused; *fd holds it until the caller closes it (closed,
 * the port could become any listener's). */
static int closed_port(int *fd)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    getsockname(s, (struct sockaddr *)&sa, &len) != 0)
		abort();
	*fd = s;
	return ntohs(sa.sin_port);
}

/* A listener that accepts connections into its backlog and never answers. */
static int black_hole(int *port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(s, 16) != 0 ||
	    getsockname(s, (struct sockaddr *)&sa, &len) != 0)
		abort();
	*port = ntohs(sa.sin_port);
	return s;
}

static sg_kube *client_at(int port, long timeout_ms)
{
	char yaml[512];
	snprintf(yaml, sizeof(yaml),
	         "current-context: t\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
	         "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:%d'}}]\n"
	         "users: [{name: u, user: {token: not-a-real-token}}]\n",
	         port);
	sg_kube_config *cfg = NULL;
	sg_kube *k = NULL;
	sg_kube_options o = {.qps = -1, .connect_timeout_ms = 2000, .request_timeout_ms = timeout_ms};
	if (sg_kube_config_from_bytes(&cfg, yaml, strlen(yaml), NULL, NULL) != 0 || sg_kube_new(&k, &cfg, &o) != 0) {
		fprintf(stderr, "client: %s\n", sg_error_last()->msg);
		abort();
	}
	return k;
}

struct result {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
	int rc;
	bool on_caller_thread;
	pthread_t starter;
	sg_caller caller;
	sg_error err;
};

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

static void on_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	struct result *r = arg;
	pthread_mutex_lock(&r->mu);
	r->calls++;
	r->rc = rc;
	r->on_caller_thread = pthread_equal(pthread_self(), r->starter);
	if (caller)
		r->caller = *caller;
	if (err)
		r->err = *err;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* Waits until done has been called n times (or ms pass); returns calls. */
static int wait_calls(struct result *r, int n, int ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&r->mu);
	while (r->calls < n && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0)
		;
	int calls = r->calls;
	pthread_mutex_unlock(&r->mu);
	return calls;
}

static int start(sg_authenticator *a, const char *token, int64_t now, struct result *r)
{
	sg_authn_request req = {.bearer = token, .bearer_len = token ? strlen(token) : 0, .now = now};
	return a->start(a->self, &req, on_done, r);
}

static sg_authn_tokenreview_stats stats(const sg_authenticator *a)
{
	sg_authn_tokenreview_stats st;
	sg_authn_tokenreview_stats_get(a, &st);
	return st;
}

static void t_options(void)
{
	int port_fd;
	sg_kube *k = client_at(closed_port(&port_fd), 2000);
	sg_authenticator a;
	memset(&a, 0x5a, sizeof(a));
	SG_CHECK_RC(sg_authn_tokenreview_new(&a, NULL), SG_EINVAL);
	SG_CHECK(a.self == NULL && a.start == NULL);
	static const char *const empty_aud[] = {""};
	static const char *const spaced_aud[] = {"istio ca"};
	static const char *const ok_aud[] = {"istio-ca"};
	const struct {
		sg_authn_tokenreview_options o;
		const char *msg;
	} bad[] = {
	    {{.trust_domain = TD}, "needs a Kubernetes client"},
	    {{.kube = k}, "needs a Kubernetes client and a trust domain"},
	    {{.kube = k, .trust_domain = ""}, "trust domain"},
	    {{.kube = k, .trust_domain = "a/b"}, "trust domain"},
	    {{.kube = k, .trust_domain = "a b"}, "trust domain"},
	    {{.kube = k, .trust_domain = TD, .audiences = ok_aud, .n_audiences = 0}, "1..32 audiences"},
	    {{.kube = k, .trust_domain = TD, .audiences = ok_aud, .n_audiences = 33}, "1..32 audiences"},
	    {{.kube = k, .trust_domain = TD, .audiences = empty_aud, .n_audiences = 1}, "audience 0"},
	    {{.kube = k, .trust_domain = TD, .audiences = spaced_aud, .n_audiences = 1}, "audience 0"},
	    {{.kube = k, .trust_domain = TD, .cache_ttl_max = -1}, "cache_ttl_max"},
	    {{.kube = k, .trust_domain = TD, .cache_ttl_max = 86401}, "cache_ttl_max"},
	    {{.kube = k, .trust_domain = TD, .negative_ttl = 3601}, "negative_ttl"},
	    {{.kube = k, .trust_domain = TD, .max_inflight = 257}, "max_inflight"},
	    {{.kube = k, .trust_domain = TD, .queue_max = (1u << 20) + 1}, "queue_max"},
	    {{.kube = k, .trust_domain = TD, .cache_entries = (1u << 22) + 1}, "cache_entries"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		SG_CHECK_RC(sg_authn_tokenreview_new(&a, &bad[i].o), SG_EINVAL);
		SG_CHECK_MSG(bad[i].msg);
	}
	/* Limits themselves are fine; so are the defaults. */
	sg_authn_tokenreview_options most = {.kube = k,
	                                     .trust_domain = TD,
	                                     .cache_entries = 1,
	                                     .cache_ttl_max = 86400,
	                                     .negative_ttl = -1,
	                                     .max_inflight = 1,
	                                     .queue_max = 1};
	SG_CHECK_OK(sg_authn_tokenreview_new(&a, &most));
	SG_CHECK(strcmp(a.name, "tokenreview") == 0);
	sg_authn_tokenreview_stats st = stats(&a);
	SG_CHECK(st.reviews == 0 && st.cached == 0 && st.pending == 0);
	a.free(a.self);
	SG_CHECK_OK(sg_authn_tokenreview_new(&a, &(sg_authn_tokenreview_options){.kube = k, .trust_domain = TD}));
	a.free(a.self);

	/* Stats of another kind of authenticator: zeros, not a crash. */
	SG_CHECK_OK(sg_authn_mtls_new(&a, TD));
	memset(&st, 0x5a, sizeof(st));
	sg_authn_tokenreview_stats_get(&a, &st);
	SG_CHECK(st.reviews == 0 && st.cached == 0);
	sg_authn_tokenreview_stats_of(NULL, &st);
	SG_CHECK(st.reviews == 0);
	a.free(a.self);
	sg_kube_free(k);
	close(port_fd);
}

/* Refusals that need no API call, answered inside start(). */
static void t_sync_refusals(void)
{
	int port_fd;
	sg_kube *k = client_at(closed_port(&port_fd), 2000);
	sg_authenticator a;
	SG_CHECK_OK(sg_authn_tokenreview_new(&a, &(sg_authn_tokenreview_options){.kube = k, .trust_domain = TD}));
	struct result r;
	result_init(&r);
	SG_CHECK_RC(start(&a, NULL, NOW, &r), SG_EAUTH);
	SG_CHECK_MSG("no bearer token");
	SG_CHECK_RC(start(&a, "", NOW, &r), SG_EAUTH);
	SG_CHECK_MSG("no bearer token");

	char *big = malloc(SG_TOKENREVIEW_TOKEN_MAX + 2);
	memset(big, 'a', SG_TOKENREVIEW_TOKEN_MAX + 1);
	big[SG_TOKENREVIEW_TOKEN_MAX + 1] = '\0';
	SG_CHECK_RC(start(&a, big, NOW, &r), SG_EAUTH);
	SG_CHECK_MSG("token is 16385 bytes, more than 16384");
	free(big);
	SG_CHECK_RC(start(&a, "abc def", NOW, &r), SG_EAUTH);
	SG_CHECK_MSG("outside printable ASCII");
	SG_CHECK_RC(start(&a, "abc\001def", NOW, &r), SG_EAUTH);
	SG_CHECK_MSG("outside printable ASCII");

	/* Expired by its own exp: refused without a review, at exp exactly. */
	char *t = jwt_with("{\"exp\":1700000000}");
	SG_CHECK_RC(start(&a, t, NOW, &r), SG_EAUTH);
	SG_CHECK_MSG("token expired");
	SG_CHECK(!strstr(sg_error_last()->msg, t));
	free(t);

	SG_CHECK(r.calls == 0);
	sg_authn_tokenreview_stats st = stats(&a);
	SG_CHECK(st.reviews == 0 && st.refused == 4 && st.pending == 0);
	a.free(a.self);
	result_destroy(&r);
	sg_kube_free(k);
	close(port_fd);
}

/* Nobody listens: SG_EBUSY through done, from a worker, and not cached. */
static void t_unreachable(void)
{
	int port_fd;
	sg_kube *k = client_at(closed_port(&port_fd), 5000);
	sg_authenticator a;
	SG_CHECK_OK(sg_authn_tokenreview_new(&a, &(sg_authn_tokenreview_options){.kube = k, .trust_domain = TD}));
	char *t = jwt_with("{\"exp\":1700000600}");
	for (int round = 1; round <= 2; round++) {
		struct result r;
		result_init(&r);
		SG_CHECK_OK(start(&a, t, NOW, &r));
		SG_CHECK(wait_calls(&r, 1, 20000) == 1);
		SG_CHECK(r.rc == SG_EBUSY && !r.on_caller_thread);
		SG_CHECK(strstr(r.err.msg, "token review unavailable: kube: POST tokenreviews") != NULL);
		SG_CHECK(r.err.code == SG_EBUSY && !strstr(r.err.msg, t));
		sg_authn_tokenreview_stats st = stats(&a);
		SG_CHECK(st.reviews == (uint64_t)round && st.api_errors == (uint64_t)round && st.cache_hits == 0);
		SG_CHECK(st.cached == 0 && st.refused == 0);
		/* A refused connection says nothing of the server's load. */
		SG_CHECK(st.budget_cuts == 0 && st.budget == SG_REVIEW_BUDGET_INITIAL && st.in_flight == 0);
		SG_CHECK(st.throttled == 0 && st.retries == 0);
		result_destroy(&r);
	}
	free(t);
	a.free(a.self);
	sg_kube_free(k);
	close(port_fd);
}

/* A server that never answers: the request times out (SG_EBUSY, not
 * SG_ETIMEOUT: no verdict, retry), and the review budget halves (a
 * timeout is the slowest answer there is). */
static void t_timeout(void)
{
	int port;
	int hole = black_hole(&port);
	sg_kube *k = client_at(port, 700);
	sg_authenticator a;
	SG_CHECK_OK(sg_authn_tokenreview_new(&a, &(sg_authn_tokenreview_options){.kube = k, .trust_domain = TD}));
	struct result r;
	result_init(&r);
	SG_CHECK_OK(start(&a, "opaque-token-1234", NOW, &r));
	SG_CHECK(wait_calls(&r, 1, 20000) == 1);
	SG_CHECK(r.rc == SG_EBUSY && strstr(r.err.msg, "token review unavailable") != NULL);
	sg_authn_tokenreview_stats st = stats(&a);
	SG_CHECK(st.api_errors == 1 && st.retries == 0);
	SG_CHECK(st.budget_cuts == 1 && st.budget == SG_REVIEW_BUDGET_INITIAL / 2 && st.in_flight == 0);
	a.free(a.self);
	result_destroy(&r);
	sg_kube_free(k);
	close(hole);
}

/* The queue bound, coalescing of queued reviews, and free() with reviews
 * in flight and queued: every accepted start gets exactly one done. */
static void t_queue_and_free(void)
{
	int port;
	int hole = black_hole(&port);
	sg_kube *k = client_at(port, 1500);
	sg_authenticator a;
	SG_CHECK_OK(sg_authn_tokenreview_new(
	    &a, &(sg_authn_tokenreview_options){.kube = k, .trust_domain = TD, .max_inflight = 1, .queue_max = 2}));
	enum { N = 5 };
	struct result r[N];
	for (int i = 0; i < N; i++)
		result_init(&r[i]);
	/* A: taken by the only worker, which then hangs on the black hole. */
	SG_CHECK_OK(start(&a, "token-a-0123456789", NOW, &r[0]));
	struct pollfd p = {.fd = hole, .events = POLLIN};
	SG_CHECK(poll(&p, 1, 10000) == 1); /* the worker's connection arrived */
	int conn = accept(hole, NULL, NULL);
	SG_CHECK(conn >= 0);
	/* B and C wait in the queue; B again joins B's review. */
	SG_CHECK_OK(start(&a, "token-b-0123456789", NOW, &r[1]));
	SG_CHECK_OK(start(&a, "token-c-0123456789", NOW, &r[2]));
	SG_CHECK_OK(start(&a, "token-b-0123456789", NOW, &r[3]));
	/* D: the queue is full. */
	SG_CHECK_RC(start(&a, "token-d-0123456789", NOW, &r[4]), SG_EBUSY);
	SG_CHECK_MSG("too many token reviews pending");
	/* A again: joins the review in flight, the queue bound does not apply. */
	struct result a2;
	result_init(&a2);
	SG_CHECK_OK(start(&a, "token-a-0123456789", NOW, &a2));

	sg_authn_tokenreview_stats st = stats(&a);
	SG_CHECK(st.pending == 3 && st.coalesced == 2 && st.rejected == 1 && st.reviews <= 1);
	for (int i = 0; i < N; i++)
		SG_CHECK(r[i].calls == 0);

	uint64_t t0 = sg_now_ns();
	a.free(a.self);
	/* free() waited for the worker's call to time out, not much longer. */
	SG_CHECK((sg_now_ns() - t0) / 1000000 < 10000);
	for (int i = 0; i < 4; i++) {
		SG_CHECK(r[i].calls == 1 && r[i].rc == SG_EBUSY);
		SG_CHECK(strstr(r[i].err.msg, "shutting down") != NULL);
		SG_CHECK(r[i].on_caller_thread); /* free()'s thread */
	}
	SG_CHECK(a2.calls == 1 && a2.rc == SG_EBUSY);
	SG_CHECK(r[4].calls == 0);
	for (int i = 0; i < N; i++)
		result_destroy(&r[i]);
	result_destroy(&a2);
	if (conn >= 0)
		close(conn);
	close(hole);
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_parse_good), SG_TEST(t_parse_hostile), SG_TEST(t_parse_limits), SG_TEST(t_token_exp),
             SG_TEST(t_options), SG_TEST(t_sync_refusals), SG_TEST(t_unreachable), SG_TEST(t_timeout),
             SG_TEST(t_queue_and_free))
