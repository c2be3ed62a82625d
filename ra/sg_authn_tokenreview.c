/*
 * sg_authn_tokenreview: the "tokenreview" authenticator (contract:
 * sg_authn_kube.h). Three parts, in this order below:
 *
 *   the parser   sg_tokenreview_parse reads a TokenReview answer the way
 *                istiod's kube_jwt.go does (authenticated, error, groups,
 *                a four-part service-account username, the pod extras,
 *                status.audiences), with the strictness of a parser of
 *                untrusted bytes: every member's type is checked, names
 *                are validated as Kubernetes validates them, and nothing
 *                we quote back is longer or less printable than a log line
 *                can take. sg_tokenreview_token_exp is the unverified exp
 *                probe.
 *   the cache    the sharded expiring cache the JWT verifier uses too
 *                (common/sg_cache.h: 64 shards, each a mutex over 4-way
 *                sets with LRU replacement), keyed by SHA-256 of the token
 *                (sg_sha256), generation 0: nothing here invalidates it
 *                but time. An entry holds either who the token is (ns, sa,
 *                uids, pod) or why it was refused; the identity string is
 *                rebuilt on a hit rather than stored, to keep entries
 *                under 800 bytes.
 *   the queue    one mutex guards a FIFO of reviews waiting for a call
 *                and a hash table of every review queued or in flight, so
 *                that a second request with the same token becomes one
 *                more waiter on the first one's review. The pump (one
 *                thread) takes a review and, with no lock held, hands its
 *                call to the client's request loop (sg_kube_loop: one
 *                thread drives every call in flight, multiplexed on
 *                HTTP/2, so answers that arrive together cost one
 *                wake-up, not a blocked thread each). The loop's callback
 *                stores the answer in the cache, and only then unlinks the
 *                review and calls its waiters. Because the cache is filled
 *                before the review leaves the table, and start() looks at
 *                the cache again (under the queue lock) when it finds no
 *                review, a token is reviewed once however the requests
 *                interleave with the answer.
 *   the budget   the pump starts a call only while the budget
 *                (sg_review_budget.h, kept under the queue lock) has room
 *                and no Retry-After hold is running; a review's end
 *                reports what the answer said of the server's load and
 *                wakes the pump when something queued may start. A
 *                throttled review goes back to the queue's head, still in
 *                the table (new requests for its token keep joining it),
 *                and its waiters hear nothing until it has a verdict or
 *                its retries run out. The client is the authenticator's
 *                own, without a QPS limiter: a review waits for the
 *                budget, never for a limiter meant for the controllers.
 *
 * Lock order: the queue mutex, then a cache shard mutex (start() re-checks
 * the cache under the queue lock; sg_cache takes only its own shard lock and
 * never calls out, which is what makes that safe); the pump and the loop's
 * callback never hold both. done callbacks are never called with a lock
 * held; they run on the loop's thread (or the pump's, for a call that
 * could not start), so they must not block: sg_authn's contract.
 *
 * The Kubernetes client (sg_kube.h, through sg_authn_kube.h) is here for
 * the TokenReview call itself; names are checked by common/sg_names.h.
 *
 * The token travels in three copies we can reach: the review's own
 * buffer, the JSON string in the request body and the spec.token the API
 * server echoes in its answer. The last two are wiped as soon as the call
 * returns, the first when the review ends (a throttled review is asked
 * again with it). (sg_kube's serialised request body and its response
 * buffer are its own, and wiped by it.)
 */
#include "sg_authn_kube.h"
#include "sg_cache.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_review_budget.h"
#include "sg_secret.h"
#include "sg_spiffe.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A review the API server throttles (429, or 5xx with Retry-After) is
 * asked again at most this often; client-go's limit is 10, but each of
 * ours waits out a Retry-After with its callers' deadlines running. */
#define RETRIES_MAX 4
#define AUDIENCE_LEN_MAX 256
#define NUMERIC_DATE_MAX INT64_C(253402300799) /* 9999-12-31T23:59:59Z */
#define NAME_SHOWN_MAX 64                      /* a username quoted in a message */
#define WARN_INTERVAL_NS (UINT64_C(10) * 1000000000u)

static const char *const default_audiences[] = {"istio-ca"};
static const char sa_group[] = "system:serviceaccounts";
static const char sa_prefix[] = "system:serviceaccount:";
static const char extra_pod_name[] = "authentication.kubernetes.io/pod-name";
static const char extra_pod_uid[] = "authentication.kubernetes.io/pod-uid";

/* ---- small validators ---- */

static bool printable_ascii(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return true;
}

/* Copies at most max bytes of s as printable ASCII ('?' for anything
 * else), with "..." when cut: what a server said, fit for a message. */
static void sanitize(char *out, size_t cap, const char *s, size_t max)
{
	size_t n = 0, i = 0;
	for (; s[i] && i < max && n + 1 < cap; i++)
		out[n++] = s[i] >= 0x20 && s[i] <= 0x7e ? s[i] : '?';
	out[n] = '\0';
	if (s[i] && n + 4 <= cap)
		memcpy(out + n, "...", 4);
}

/* A JSON string without NUL bytes (which strlen-based checks would cut). */
static const char *plain_string(const json_t *v)
{
	if (!json_is_string(v))
		return NULL;
	const char *s = json_string_value(v);
	return strlen(s) == json_string_length(v) ? s : NULL;
}

/* ---- the parser (TokenReview v1; istio security/pkg/server/ca/authenticate/kubeauth) ---- */

static int check_envelope(const json_t *review, const json_t **status, bool *authenticated)
{
	SG_ENSURE(json_is_object(review), SG_EPROTO, "token review: the answer is not a JSON object");
	const json_t *kind = json_object_get(review, "kind");
	SG_ENSURE(!kind || (plain_string(kind) && strcmp(json_string_value(kind), "TokenReview") == 0), SG_EPROTO,
	          "token review: the answer is not a TokenReview");
	*status = json_object_get(review, "status");
	SG_ENSURE(json_is_object(*status), SG_EPROTO, "token review: the answer has no status object");
	/* Go's omitempty drops a false "authenticated". */
	const json_t *a = json_object_get(*status, "authenticated");
	SG_ENSURE(!a || json_is_boolean(a), SG_EPROTO, "token review: status.authenticated is not a boolean");
	*authenticated = json_is_true(a);
	return SG_OK;
}

/* istiod refuses on a non-empty status.error even when authenticated. */
static int check_verdict(const json_t *status, bool authenticated)
{
	const json_t *e = json_object_get(status, "error");
	const char *why = NULL;
	if (e) {
		SG_ENSURE(json_is_string(e), SG_EAUTH, "token review: status.error is not a string");
		why = json_string_value(e); /* shown sanitised, NUL bytes end it */
	}
	char shown[SG_TOKENREVIEW_ERROR_MAX + 4];
	if (why && *why) {
		sanitize(shown, sizeof(shown), why, SG_TOKENREVIEW_ERROR_MAX);
		SG_BAIL(SG_EAUTH, "token review: %s: %s", authenticated ? "error" : "not authenticated", shown);
	}
	SG_ENSURE(authenticated, SG_EAUTH, "token review: not authenticated");
	return SG_OK;
}

/* username = system:serviceaccount:<ns>:<sa>, exactly four parts. */
static int check_username(const json_t *user, sg_caller *c)
{
	const char *u = plain_string(json_object_get(user, "username"));
	SG_ENSURE(u, SG_EAUTH, "token review: user has no username string");
	char shown[NAME_SHOWN_MAX + 4];
	sanitize(shown, sizeof(shown), u, NAME_SHOWN_MAX);
	SG_ENSURE(strncmp(u, sa_prefix, sizeof(sa_prefix) - 1) == 0, SG_EAUTH,
	          "token review: user \"%s\" is not a service account", shown);
	const char *ns = u + sizeof(sa_prefix) - 1;
	const char *colon = strchr(ns, ':');
	SG_ENSURE(colon && !strchr(colon + 1, ':'), SG_EAUTH,
	          "token review: username \"%s\" is not system:serviceaccount:<namespace>:<name>", shown);
	size_t nlen = (size_t)(colon - ns);
	SG_ENSURE(sg_names_dns_label(ns, nlen, SG_NAMES_LABEL_MAX), SG_EAUTH,
	          "token review: namespace in \"%s\" is not a DNS-1123 label", shown);
	SG_ENSURE(sg_names_dns_subdomain(colon + 1, strlen(colon + 1)), SG_EAUTH,
	          "token review: service account in \"%s\" is not a DNS-1123 subdomain", shown);
	memcpy(c->ns, ns, nlen);
	c->ns[nlen] = '\0';
	snprintf(c->sa, sizeof(c->sa), "%s", colon + 1);
	return SG_OK;
}

static int check_groups(const json_t *user)
{
	const json_t *groups = json_object_get(user, "groups");
	SG_ENSURE(json_is_array(groups), SG_EAUTH, "token review: user has no groups array");
	bool member = false;
	size_t i;
	const json_t *g;
	json_array_foreach(groups, i, g)
	{
		const char *s = plain_string(g);
		SG_ENSURE(s, SG_EAUTH, "token review: group %zu is not a string", i);
		member |= strcmp(s, sa_group) == 0;
	}
	SG_ENSURE(member, SG_EAUTH, "token review: user is not in group %s", sa_group);
	return SG_OK;
}

/* extra[key]: absent, or an array of strings whose first one is taken. */
static int extra_first(const json_t *extra, const char *key, const char **out)
{
	*out = NULL;
	const json_t *v = json_object_get(extra, key);
	if (!v)
		return SG_OK;
	SG_ENSURE(json_is_array(v), SG_EAUTH, "token review: extra %s is not an array", key);
	size_t i;
	const json_t *e;
	json_array_foreach(v, i, e)
	{
		SG_ENSURE(plain_string(e), SG_EAUTH, "token review: extra %s holds a non-string", key);
	}
	if (json_array_size(v) > 0)
		*out = json_string_value(json_array_get(v, 0));
	return SG_OK;
}

static int check_extra(const json_t *user, sg_caller *c)
{
	const json_t *uid = json_object_get(user, "uid");
	if (uid) {
		const char *s = plain_string(uid);
		SG_ENSURE(s && sg_names_uid(s), SG_EAUTH, "token review: user uid is malformed");
		snprintf(c->sa_uid, sizeof(c->sa_uid), "%s", s);
	}
	const json_t *extra = json_object_get(user, "extra");
	if (!extra)
		return SG_OK;
	SG_ENSURE(json_is_object(extra), SG_EAUTH, "token review: user extra is not an object");
	const char *pod, *pod_uid;
	SG_TRY(extra_first(extra, extra_pod_name, &pod));
	SG_TRY(extra_first(extra, extra_pod_uid, &pod_uid));
	SG_ENSURE(!pod || sg_names_dns_subdomain(pod, strlen(pod)), SG_EAUTH,
	          "token review: pod name is not a DNS-1123 subdomain");
	SG_ENSURE(!pod_uid || sg_names_uid(pod_uid), SG_EAUTH, "token review: pod uid is malformed");
	snprintf(c->pod_name, sizeof(c->pod_name), "%s", pod ? pod : "");
	snprintf(c->pod_uid, sizeof(c->pod_uid), "%s", pod_uid ? pod_uid : "");
	return SG_OK;
}

/* status.audiences, when present, is the part of what we asked for that
 * the token is good for: it must not be empty of ours. */
static int check_audiences(const json_t *status, const sg_tokenreview_expect *x)
{
	const json_t *aud = json_object_get(status, "audiences");
	if (!aud)
		return SG_OK;
	SG_ENSURE(json_is_array(aud), SG_EAUTH, "token review: status.audiences is not an array");
	const char *const *want = x->audiences ? x->audiences : default_audiences;
	size_t nwant = x->audiences ? x->n_audiences : 1;
	size_t i;
	const json_t *v;
	json_array_foreach(aud, i, v)
	{
		const char *s = plain_string(v);
		SG_ENSURE(s, SG_EAUTH, "token review: audience %zu is not a string", i);
		for (size_t j = 0; j < nwant; j++)
			if (strcmp(s, want[j]) == 0)
				return SG_OK;
	}
	SG_BAIL(SG_EAUTH, "token review: the token's audiences do not include %s%s", nwant > 1 ? "any of " : "",
	        nwant > 1 ? "the configured audiences" : want[0]);
}

static int parse_review(const json_t *review, const sg_tokenreview_expect *x, sg_caller *c)
{
	SG_ENSURE(x && x->trust_domain && *x->trust_domain, SG_EINVAL, "token review: no trust domain");
	SG_ENSURE(!x->audiences || x->n_audiences > 0, SG_EINVAL, "token review: no audiences");
	const json_t *status = NULL;
	bool authenticated = false;
	SG_TRY(check_envelope(review, &status, &authenticated));
	SG_TRY(check_verdict(status, authenticated));
	const json_t *user = json_object_get(status, "user");
	SG_ENSURE(json_is_object(user), SG_EAUTH, "token review: authenticated, but no user");
	SG_TRY(check_username(user, c));
	SG_TRY(check_groups(user));
	SG_TRY(check_extra(user, c));
	SG_TRY(check_audiences(status, x));
	/* spiffe:// + 255 + /ns/ + 63 + /sa/ + 253 can exceed SG_ID_MAX. */
	if (sg_jwt_identity(c->identity, sizeof(c->identity), x->trust_domain, c->ns, c->sa) != SG_OK)
		SG_BAIL(SG_EAUTH, "token review: the identity is longer than %d bytes", SG_ID_MAX - 1);
	c->method = "tokenreview";
	return SG_OK;
}

int sg_tokenreview_parse(const json_t *review, const sg_tokenreview_expect *x, sg_caller *out)
{
	sg_caller c;
	memset(&c, 0, sizeof(c));
	memset(out, 0, sizeof(*out));
	SG_TRY(parse_review(review, x, &c));
	*out = c;
	return SG_OK;
}

int sg_tokenreview_parse_bytes(const void *json, size_t len, const sg_tokenreview_expect *x, sg_caller *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(json && len > 0, SG_EPROTO, "token review: the answer is empty");
	SG_ENSURE(len <= SG_TOKENREVIEW_ANSWER_MAX, SG_EPROTO, "token review: the answer is %zu bytes, more than %u",
	          len, SG_TOKENREVIEW_ANSWER_MAX);
	json_error_t jerr;
	json_t *review SG_CLEANUP(json_decrefp) = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	/* jansson's text would quote the input ("near '...'"): not repeated. */
	SG_ENSURE(review, SG_EPROTO, "token review: the answer is not valid JSON (line %d)", jerr.line);
	return sg_tokenreview_parse(review, x, out);
}

/* ---- the unverified exp (RFC 7519 §4.1.4, RFC 7515 §7.1) ---- */

bool sg_tokenreview_token_exp(const char *token, size_t len, int64_t *exp)
{
	*exp = 0;
	if (!token || len == 0 || len > SG_TOKENREVIEW_TOKEN_MAX)
		return false;
	sg_reader r = sg_reader_of((sg_slice){(const uint8_t *)token, len});
	sg_slice header, payload, dot;
	sg_reader_until(&r, '.', &header);
	if (sg_reader_left(&r) == 0 || sg_reader_bytes(&r, 1, &dot) != SG_OK)
		return false;
	sg_reader_until(&r, '.', &payload);
	/* A third part must follow (the signature); its content is not ours. */
	if (sg_reader_left(&r) == 0 || payload.len == 0 || payload.len / 4 * 3 > SG_JWT_PAYLOAD_MAX)
		return false;
	uint8_t buf[SG_JWT_PAYLOAD_MAX];
	size_t n;
	if (sg_b64url_decode((const char *)payload.p, payload.len, buf, sizeof(buf), &n) != SG_OK)
		return false;
	json_error_t jerr;
	json_t *claims SG_CLEANUP(json_decrefp) = json_loadb((const char *)buf, n, JSON_REJECT_DUPLICATES, &jerr);
	const json_t *v = json_object_get(claims, "exp"); /* NULL unless an object with exp */
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0 || i > NUMERIC_DATE_MAX)
			return false;
		*exp = (int64_t)i;
		return true;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (!isfinite(d) || d < 0 || d > (double)NUMERIC_DATE_MAX)
			return false;
		*exp = (int64_t)d;
		return true;
	}
	return false;
}

/* ---- the authenticator's state ---- */

struct who {
	char ns[64];
	char sa[254];
	char sa_uid[64];
	char pod_name[254];
	char pod_uid[64];
};

/* A cache entry's value: the answer of one review. */
struct answer {
	bool refusal;
	int64_t exp; /* the token's; 0: unknown */
	union {
		struct who who;
		char why[SG_ERROR_MSG_MAX];
	} u;
};

struct waiter {
	sg_authn_done_fn done;
	void *arg;
	struct waiter *next;
};

/* One TokenReview to make, for every request that carried its token. */
struct review {
	uint8_t key[32];
	struct review *hnext; /* the table's chain */
	struct review *qnext; /* the queue */
	struct waiter *waiters, **wtail;
	bool queued;       /* in the queue, not yet taken by the pump */
	unsigned attempts; /* calls made for it that were throttled */
	int64_t now;       /* the first request's clock */
	int64_t exp; /* the token's, 0: unknown */
	size_t len;
	char token[]; /* len bytes + NUL; wiped before free */
};

struct tr {
	/* Read-only after new(). */
	sg_kube *kube;
	char trust_domain[SG_TRUST_DOMAIN_MAX + 1];
	char **aud;
	size_t n_aud;
	sg_tokenreview_expect expect;
	int64_t ttl_max, negative_ttl; /* negative_ttl 0: refusals are not kept */
	size_t queue_max;
	unsigned max_inflight; /* the budget's ceiling */
	sg_kube_loop *loop;    /* every call in flight, on its thread */
	pthread_t pump;
	bool pump_started;

	sg_cache *cache; /* struct answer under SHA-256 of the token */

	/* The queue, the table of reviews queued or in flight, and the budget
	 * of calls in flight (at most its limit on the loop). cv wakes the
	 * pump; it is on the monotonic clock: a hold is waited out. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stopping;
	atomic_bool quitting; /* stopping, as the loop's callbacks may read it */
	struct review *qhead, **qtail;
	size_t queued;
	struct review **table;
	size_t table_mask;
	sg_review_budget budget;

	atomic_uint_fast64_t reviews, coalesced, refused, api_errors, rejected, throttled, retries;
	atomic_size_t pending, in_flight, limit; /* the budget's, copied for stats */
	atomic_uint_fast64_t cuts;
	_Atomic uint64_t warn_last_ns;
	atomic_uint_fast64_t warn_suppressed;
};

/* ---- the cache ---- */

enum hit { MISS, HIT_ACCEPTED, HIT_REFUSED };

static void caller_of(const struct tr *a, const struct who *w, int64_t exp, sg_caller *c)
{
	memset(c, 0, sizeof(*c));
	memcpy(c->ns, w->ns, sizeof(w->ns));
	memcpy(c->sa, w->sa, sizeof(w->sa));
	memcpy(c->sa_uid, w->sa_uid, sizeof(w->sa_uid));
	memcpy(c->pod_name, w->pod_name, sizeof(w->pod_name));
	memcpy(c->pod_uid, w->pod_uid, sizeof(w->pod_uid));
	/* It fitted when the entry was made; the trust domain has not changed. */
	if (sg_jwt_identity(c->identity, sizeof(c->identity), a->trust_domain, c->ns, c->sa) != SG_OK)
		c->identity[0] = '\0';
	c->expires = exp;
	c->method = "tokenreview";
}

/* The reverse: what an entry keeps of a caller (every field fits; the
 * parser checked the lengths). */
static void who_of(const sg_caller *c, struct who *w)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->ns, c->ns, strnlen(c->ns, sizeof(w->ns) - 1));
	memcpy(w->sa, c->sa, strnlen(c->sa, sizeof(w->sa) - 1));
	memcpy(w->sa_uid, c->sa_uid, strnlen(c->sa_uid, sizeof(w->sa_uid) - 1));
	memcpy(w->pod_name, c->pod_name, strnlen(c->pod_name, sizeof(w->pod_name) - 1));
	memcpy(w->pod_uid, c->pod_uid, strnlen(c->pod_uid, sizeof(w->pod_uid) - 1));
}

_Static_assert(SG_TOKENREVIEW_CACHE_LIMIT <= SG_CACHE_ENTRIES_MAX, "the cache takes every size we accept");
_Static_assert(sizeof(struct answer) <= SG_CACHE_VALUE_MAX, "an answer fits in a cache value");

/* Copies out what the cache knows about h at now (a stale entry found on
 * the way is dropped by the cache). */
static enum hit lookup(struct tr *a, const uint8_t h[32], int64_t now, struct who *who, int64_t *exp, char *why,
                       size_t whycap)
{
	struct answer ans;
	if (!sg_cache_get(a->cache, h, 0, now, &ans))
		return MISS;
	enum hit hit = ans.refusal ? HIT_REFUSED : HIT_ACCEPTED;
	if (ans.refusal) {
		snprintf(why, whycap, "%s", ans.u.why);
	} else {
		*who = ans.u.who;
		*exp = ans.exp;
	}
	sg_wipe(&ans, sizeof(ans));
	return hit;
}

/* Stores an answer: who (an acceptance) or why (a refusal), until then.
 * The cache keeps one entry per token, whatever the order of the stores. */
static void insert(struct tr *a, const uint8_t h[32], int64_t now, int64_t until, const struct who *who, int64_t exp,
                   const char *why)
{
	struct answer ans;
	memset(&ans, 0, sizeof(ans));
	ans.exp = exp;
	ans.refusal = who == NULL;
	if (who)
		ans.u.who = *who;
	else
		snprintf(ans.u.why, sizeof(ans.u.why), "%s", why);
	(void)sg_cache_put(a->cache, h, 0, now, SG_CACHE_FROM_ANY, until, &ans); /* not kept when until <= now */
	sg_wipe(&ans, sizeof(ans));
}

/* ---- reviews and waiters ---- */

static void review_free(struct review *r)
{
	if (!r)
		return;
	sg_wipe(r->token, r->len + 1);
	while (r->waiters) {
		struct waiter *w = r->waiters;
		r->waiters = w->next;
		free(w);
	}
	free(r);
}

static struct review **bucket_of(struct tr *a, const uint8_t h[32])
{
	uint64_t x;
	memcpy(&x, h + 16, sizeof(x));
	return &a->table[x & a->table_mask];
}

static struct review *find(struct tr *a, const uint8_t h[32])
{
	for (struct review *r = *bucket_of(a, h); r; r = r->hnext)
		if (memcmp(r->key, h, 32) == 0)
			return r;
	return NULL;
}

static void unlink_review(struct tr *a, struct review *r)
{
	for (struct review **p = bucket_of(a, r->key); *p; p = &(*p)->hnext) {
		if (*p == r) {
			*p = r->hnext;
			atomic_fetch_sub_explicit(&a->pending, 1, memory_order_relaxed);
			return;
		}
	}
}

static void add_waiter(struct review *r, struct waiter *w)
{
	w->next = NULL;
	*r->wtail = w;
	r->wtail = &w->next;
}

/* Calls and frees every waiter of a list; err is the failure's detail. */
static void deliver(struct waiter *ws, int rc, const sg_caller *caller, const sg_error *err)
{
	while (ws) {
		struct waiter *w = ws;
		ws = w->next;
		if (rc == SG_OK) {
			w->done(SG_OK, caller, NULL, w->arg);
		} else {
			sg_error_restore(err); /* the detail is also this thread's during the call */
			w->done(rc, NULL, err, w->arg);
		}
		free(w);
	}
}

/* ---- one TokenReview ---- */

/* Rate-limited WARN for failures that are ours or the API server's. */
static void warn_api(struct tr *a, const sg_error *e)
{
	uint64_t now = sg_now_ns();
	uint64_t last = atomic_load_explicit(&a->warn_last_ns, memory_order_relaxed);
	if ((last && now - last < WARN_INTERVAL_NS) ||
	    !atomic_compare_exchange_strong_explicit(&a->warn_last_ns, &last, now, memory_order_relaxed,
	                                             memory_order_relaxed)) {
		atomic_fetch_add_explicit(&a->warn_suppressed, 1, memory_order_relaxed);
		return;
	}
	uint64_t quiet = atomic_exchange_explicit(&a->warn_suppressed, 0, memory_order_relaxed);
	sg_log(SG_LOG_WARN, "token review failed", SG_F_STR("error", sg_error_name(e->code)),
	       SG_F_STR("reason", e->msg), SG_F_INT("suppressed", quiet), SG_F_END);
}

/* A failed sg_kube_create: never the caller's fault, so never SG_EAUTH.
 * 401/403 (and TLS verification failures) mean signet itself is refused. */
static int api_failure(int rc)
{
	char kube[SG_ERROR_MSG_MAX];
	snprintf(kube, sizeof(kube), "%s", sg_error_last()->msg);
	long http = sg_kube_last_status()->code;
	if (rc == SG_EINTERNAL)
		return sg_error_set(SG_EINTERNAL, "token review: %s", kube);
	if (rc == SG_EAUTH && http == 403)
		SG_BAIL(SG_EBUSY,
		        "token review unavailable: signet may not create tokenreviews.authentication.k8s.io "
		        "(RBAC): %s",
		        kube);
	if (rc == SG_EAUTH && http == 401)
		SG_BAIL(SG_EBUSY, "token review unavailable: the API server does not accept signet's credentials: %s",
		        kube);
	SG_BAIL(SG_EBUSY, "token review unavailable: %s", kube);
}

/* Whether the message quotes the token (defence in depth: no server we
 * know echoes it, but a message goes to the client and the log). */
static bool quotes(const char *msg, const char *token, size_t len)
{
	size_t m = strlen(msg);
	if (len < 8 || len > m)
		return false;
	for (size_t i = 0; i + len <= m; i++)
		if (msg[i] == token[0] && memcmp(msg + i, token, len) == 0)
			return true;
	return false;
}

static void wipe_string(json_t *s)
{
	if (json_is_string(s)) /* jansson's own buffer: it is ours to clear before the decref */
		sg_wipe((char *)json_string_value(s), json_string_length(s));
}

static json_t *request_body(const struct tr *a, const struct review *r)
{
	json_t *aud = json_array();
	for (size_t i = 0; aud && i < a->n_aud; i++)
		if (json_array_append_new(aud, json_string(a->aud[i])) != 0) {
			json_decref(aud);
			aud = NULL;
		}
	if (!aud)
		return NULL;
	return json_pack("{s:s, s:s, s:{s:s%, s:o}}", "apiVersion", "authentication.k8s.io/v1", "kind", "TokenReview",
	                 "spec", "token", r->token, r->len, "audiences", aud);
}

/* What one call said of the API server's load (sg_review_budget.h), and
 * whether asking again later may pass. */
struct call_info {
	sg_review_outcome outcome;
	uint64_t latency_ns;
	long http, retry_after;
};

static void classify(int kube_rc, uint64_t latency_ns, struct call_info *ci)
{
	const sg_kube_status *st = sg_kube_last_status();
	ci->latency_ns = latency_ns;
	ci->http = st->code;
	ci->retry_after = st->retry_after;
	if (st->code == 429)
		ci->outcome = SG_REVIEW_THROTTLED;
	else if (st->code >= 500 || kube_rc == SG_ETIMEOUT)
		ci->outcome = SG_REVIEW_OVERLOADED;
	else if (kube_rc == SG_OK || st->code > 0)
		ci->outcome = SG_REVIEW_ANSWERED; /* a verdict, or a quick refusal of our own request */
	else
		ci->outcome = SG_REVIEW_NO_SIGNAL;
}

/* The API server asked us to come back (client-go retries the same: a 429,
 * or a 5xx that says Retry-After). */
static bool retryable(const struct call_info *ci)
{
	return ci->http == 429 || (ci->http >= 500 && ci->retry_after > 0);
}

/* What the call for r ended with (kube_rc and answer, as sg_kube_create
 * returns them; the kube detail still this thread's) made into the
 * review's result: the caller, or the detail in *err; what the call said
 * of the server's load goes to *ci. The review keeps its token (a
 * throttled review is asked again); the answer's echo of it is wiped
 * here, and the answer freed. */
static int review_result(struct tr *a, struct review *r, int kube_rc, json_t *answer, uint64_t latency_ns,
                         sg_caller *caller, sg_error *err, struct call_info *ci)
{
	classify(kube_rc, latency_ns, ci);
	int rc = kube_rc == SG_OK ? SG_OK : api_failure(kube_rc);
	if (rc == SG_OK) {
		rc = sg_tokenreview_parse(answer, &a->expect, caller);
		if (rc == SG_EPROTO) {
			char why[SG_ERROR_MSG_MAX];
			snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
			rc = sg_error_set(SG_EBUSY,
			                  "token review unavailable: the API server's answer is malformed: %s", why);
		}
		wipe_string(json_object_get(json_object_get(answer, "spec"), "token"));
	}
	json_decref(answer);
	sg_error_save(err);
	err->code = rc;
	if (rc != SG_OK && quotes(err->msg, r->token, r->len))
		snprintf(err->msg, sizeof(err->msg), "%s",
		         rc == SG_EAUTH ? "token review: refused" : "token review unavailable");
	return rc;
}

/* Remembers the verdict of a finished review, or counts its failure. */
static void remember(struct tr *a, struct review *r, int rc, sg_caller *caller, const sg_error *err)
{
	if (rc == SG_OK) {
		caller->expires = r->exp;
		struct who who;
		who_of(caller, &who);
		int64_t life = r->exp
		                   ? a->ttl_max
		                   : (a->ttl_max < SG_TOKENREVIEW_TTL_NO_EXP ? a->ttl_max : SG_TOKENREVIEW_TTL_NO_EXP);
		int64_t until = r->now + life;
		if (r->exp && r->exp < until)
			until = r->exp;
		insert(a, r->key, r->now, until, &who, r->exp, NULL);
	} else if (rc == SG_EAUTH) {
		atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
		if (a->negative_ttl > 0)
			insert(a, r->key, r->now, r->now + a->negative_ttl, NULL, 0, err->msg);
	} else if (!atomic_load_explicit(&a->quitting, memory_order_relaxed)) {
		/* (the calls free() ends are no fault of the API server's) */
		atomic_fetch_add_explicit(&a->api_errors, 1, memory_order_relaxed);
		warn_api(a, err);
	}
}

/* Under the lock: the budget's numbers, copied for stats. */
static void budget_shown(struct tr *a)
{
	atomic_store_explicit(&a->in_flight, a->budget.inflight, memory_order_relaxed);
	atomic_store_explicit(&a->limit, sg_review_budget_limit(&a->budget), memory_order_relaxed);
	atomic_store_explicit(&a->cuts, a->budget.cuts, memory_order_relaxed);
}

/* Under the lock, from a review's end: the numbers, and the pump woken
 * when something is queued (the budget may let it start now, or a hold
 * now runs that the pump should time). */
static void budget_changed(struct tr *a)
{
	budget_shown(a);
	if (a->queued)
		pthread_cond_signal(&a->cv);
}

/* The end of one call for r (taken from the queue with its ticket): a
 * verdict or a failure is remembered and handed to every waiter; a
 * throttled review goes back to the head of the queue, to be asked again
 * once the budget (and its hold: the server's Retry-After) lets it.
 * Called, and returns, without the lock: on the loop's thread, or on the
 * pump's when the call could not be made. */
static void attempt_end(struct tr *a, struct review *r, uint64_t ticket, int rc, sg_caller *caller,
                        const sg_error *err, const struct call_info *ci)
{
	bool again = rc == SG_EBUSY && retryable(ci) && r->attempts < RETRIES_MAX;
	if (ci->outcome == SG_REVIEW_THROTTLED)
		atomic_fetch_add_explicit(&a->throttled, 1, memory_order_relaxed);
	if (!again)
		remember(a, r, rc, caller, err);
	/* The answer is in the cache before the review leaves the table. */
	pthread_mutex_lock(&a->mu);
	sg_review_budget_end(&a->budget, ticket, sg_now_ns(), ci->outcome, ci->latency_ns, ci->retry_after);
	if (again && !a->stopping) {
		r->attempts++;
		r->queued = true;
		r->qnext = a->qhead;
		a->qhead = r;
		if (!r->qnext)
			a->qtail = &r->qnext;
		a->queued++;
		atomic_fetch_add_explicit(&a->retries, 1, memory_order_relaxed);
		budget_changed(a);
		pthread_mutex_unlock(&a->mu);
		return;
	}
	unlink_review(a, r);
	struct waiter *ws = r->waiters;
	r->waiters = NULL;
	r->wtail = &r->waiters;
	budget_changed(a);
	pthread_mutex_unlock(&a->mu);
	deliver(ws, rc, caller, err); /* none when free() took them (stopping) */
	review_free(r);
}

/* One call in flight: what its answer needs. */
struct call {
	struct tr *a;
	struct review *r;
	uint64_t ticket, t0;
};

/* The loop's callback: the API server answered, or the call failed. */
static void on_answer(int kube_rc, json_t *answer, void *arg)
{
	struct call c = *(struct call *)arg;
	free(arg);
	sg_caller caller;
	sg_error err;
	struct call_info ci;
	memset(&caller, 0, sizeof(caller));
	memset(&err, 0, sizeof(err));
	int rc = review_result(c.a, c.r, kube_rc, answer, sg_now_ns() - c.t0, &caller, &err, &ci);
	attempt_end(c.a, c.r, c.ticket, rc, &caller, &err, &ci);
	sg_wipe(&caller, sizeof(caller));
}

/* Starts the call for r on the loop (without the lock); a call that
 * cannot start ends here, as a failed one. */
static void submit(struct tr *a, struct review *r, uint64_t ticket)
{
	static const sg_kube_ref ref = {.group = "authentication.k8s.io", .version = "v1", .resource = "tokenreviews"};
	json_t *body = request_body(a, r);
	struct call *c = malloc(sizeof(*c));
	int rc;
	if (!body || !c) {
		rc = sg_error_set(SG_EINTERNAL, "token review: out of memory");
	} else {
		*c = (struct call){.a = a, .r = r, .ticket = ticket, .t0 = sg_now_ns()};
		atomic_fetch_add_explicit(&a->reviews, 1, memory_order_relaxed);
		rc = sg_kube_loop_create(a->loop, &ref, body, on_answer, c);
		if (rc == SG_OK)
			c = NULL; /* on_answer's now */
	}
	if (body) {
		wipe_string(json_object_get(json_object_get(body, "spec"), "token"));
		json_decref(body);
	}
	free(c);
	if (rc == SG_OK)
		return;
	/* No call was made: nothing said about the server's load. */
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	rc = sg_error_set(rc == SG_EINTERNAL ? SG_EINTERNAL : SG_EBUSY, "token review unavailable: %s", why);
	sg_caller caller;
	sg_error err;
	struct call_info ci = {.outcome = SG_REVIEW_NO_SIGNAL};
	memset(&caller, 0, sizeof(caller));
	sg_error_save(&err);
	err.code = rc;
	attempt_end(a, r, ticket, rc, &caller, &err, &ci);
}

/* Sleeps until something may have changed: a review queued or ended, a
 * hold over (wait_ns), or stop. */
static void wait_for_work(struct tr *a, uint64_t wait_ns)
{
	if (wait_ns == UINT64_MAX || !a->qhead) {
		pthread_cond_wait(&a->cv, &a->mu);
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + wait_ns;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_cond_timedwait(&a->cv, &a->mu, &ts);
}

/* The pump: starts every queued review the budget lets start, on the loop,
 * and sleeps until that changes. */
static void *pump(void *arg)
{
	struct tr *a = arg;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		uint64_t wait_ns = UINT64_MAX;
		while (!a->stopping && !(a->qhead && sg_review_budget_may_start(&a->budget, sg_now_ns(), &wait_ns)))
			wait_for_work(a, wait_ns);
		if (a->stopping)
			break;
		struct review *r = a->qhead;
		a->qhead = r->qnext;
		if (!a->qhead)
			a->qtail = &a->qhead;
		a->queued--;
		r->queued = false;
		uint64_t ticket = sg_review_budget_start(&a->budget);
		budget_shown(a);
		pthread_mutex_unlock(&a->mu);
		submit(a, r, ticket);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* ---- start ---- */

static int answer_hit(struct tr *a, enum hit hit, const struct who *who, int64_t exp, const char *why,
                      sg_authn_done_fn done, void *arg)
{
	if (hit == HIT_REFUSED)
		SG_BAIL(SG_EAUTH, "%s", why);
	sg_caller caller;
	caller_of(a, who, exp, &caller);
	done(SG_OK, &caller, NULL, arg);
	return SG_OK;
}

/* Joins the review of h, or queues a new one. */
static int enqueue(struct tr *a, const uint8_t h[32], const sg_authn_request *req, int64_t exp, sg_authn_done_fn done,
                   void *arg)
{
	struct waiter *w = malloc(sizeof(*w));
	struct review *r = malloc(sizeof(*r) + req->bearer_len + 1);
	if (!w || !r) {
		free(w);
		free(r);
		SG_BAIL(SG_EINTERNAL, "token review: out of memory");
	}
	*w = (struct waiter){.done = done, .arg = arg};
	memset(r, 0, sizeof(*r));
	memcpy(r->key, h, 32);
	r->wtail = &r->waiters;
	r->now = req->now;
	r->exp = exp;
	r->len = req->bearer_len;
	memcpy(r->token, req->bearer, req->bearer_len);
	r->token[r->len] = '\0';

	struct who who;
	char why[SG_ERROR_MSG_MAX];
	int64_t hexp = 0;
	enum hit hit = MISS;
	bool full = false;
	int rc;
	pthread_mutex_lock(&a->mu);
	SG_ENSURE_GOTO(rc, !a->stopping, unlock, SG_EBUSY, "token review: signet is shutting down");
	struct review *cur = find(a, h);
	if (cur) {
		add_waiter(cur, w);
		w = NULL;
		atomic_fetch_add_explicit(&a->coalesced, 1, memory_order_relaxed);
		rc = SG_OK;
		goto unlock;
	}
	/* The review of this token may have ended since the first look. */
	hit = lookup(a, h, req->now, &who, &hexp, why, sizeof(why));
	if (hit != MISS) {
		rc = SG_OK;
		goto unlock;
	}
	full = a->queued >= a->queue_max;
	SG_ENSURE_GOTO(rc, !full, unlock, SG_EBUSY, "too many token reviews pending");
	add_waiter(r, w);
	w = NULL;
	r->queued = true;
	struct review **b = bucket_of(a, h);
	r->hnext = *b;
	*b = r;
	*a->qtail = r;
	a->qtail = &r->qnext;
	a->queued++;
	atomic_fetch_add_explicit(&a->pending, 1, memory_order_relaxed);
	r = NULL;
	pthread_cond_signal(&a->cv);
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&a->mu);
	free(w);
	review_free(r);
	if (full)
		atomic_fetch_add_explicit(&a->rejected, 1, memory_order_relaxed);
	if (hit != MISS)
		return answer_hit(a, hit, &who, hexp, why, done, arg);
	return rc;
}

static int tr_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct tr *a = self;
	SG_ENSURE(req->bearer && req->bearer_len > 0, SG_EAUTH, "no bearer token");
	if (req->bearer_len > SG_TOKENREVIEW_TOKEN_MAX) {
		atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
		SG_BAIL(SG_EAUTH, "token is %zu bytes, more than %d", req->bearer_len, SG_TOKENREVIEW_TOKEN_MAX);
	}
	uint8_t h[32];
	SG_TRY(sg_sha256(req->bearer, req->bearer_len, h));

	struct who who;
	char why[SG_ERROR_MSG_MAX];
	int64_t exp = 0;
	enum hit hit = lookup(a, h, req->now, &who, &exp, why, sizeof(why));
	if (hit != MISS)
		return answer_hit(a, hit, &who, exp, why, done, arg);

	/* Misses only: a hit is a token that passed these checks before. A
	 * bearer token is visible ASCII (RFC 6750 §2.1 b64token); anything
	 * else is no token the API server issued. */
	if (!printable_ascii(req->bearer, req->bearer_len)) {
		atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
		SG_BAIL(SG_EAUTH, "token has bytes outside printable ASCII");
	}
	/* Its own exp says it is over: kube-apiserver would still take it for
	 * up to a minute (leeway); a certificate authority need not. */
	if (sg_tokenreview_token_exp(req->bearer, req->bearer_len, &exp) && req->now >= exp) {
		atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
		SG_BAIL(SG_EAUTH, "token expired");
	}
	return enqueue(a, h, req, exp, done, arg);
}

/* ---- lifetime ---- */

static void tr_destroy(struct tr *a)
{
	sg_cache_free(a->cache);
	for (size_t i = 0; a->aud && i < a->n_aud; i++)
		free(a->aud[i]);
	free(a->aud);
	free(a->table);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a);
}

/* Stops the pump and the loop: every waiter not yet answered gets
 * "shutting down" now; reviews still queued are dropped, those in flight
 * end when the loop stops (SG_EBUSY), with no one left to tell. */
static void tr_stop(struct tr *a)
{
	struct waiter *orphans = NULL, **otail = &orphans;
	struct review *dropped = NULL;
	pthread_mutex_lock(&a->mu);
	a->stopping = true;
	atomic_store_explicit(&a->quitting, true, memory_order_relaxed);
	for (size_t i = 0; a->table && i <= a->table_mask; i++) {
		struct review **p = &a->table[i];
		while (*p) {
			struct review *r = *p;
			*otail = r->waiters;
			if (r->waiters)
				otail = r->wtail;
			r->waiters = NULL;
			r->wtail = &r->waiters;
			if (r->queued) {
				*p = r->hnext;
				atomic_fetch_sub_explicit(&a->pending, 1, memory_order_relaxed);
				r->hnext = dropped;
				dropped = r;
			} else {
				p = &r->hnext;
			}
		}
	}
	a->qhead = NULL;
	a->qtail = &a->qhead;
	a->queued = 0;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);

	sg_error err = {.code = SG_EBUSY, .file = __FILE__, .line = __LINE__};
	snprintf(err.msg, sizeof(err.msg), "token review: signet is shutting down");
	deliver(orphans, SG_EBUSY, NULL, &err);
	while (dropped) {
		struct review *r = dropped;
		dropped = r->hnext;
		review_free(r);
	}
	if (a->pump_started)
		pthread_join(a->pump, NULL);
	sg_kube_loop_free(a->loop); /* after the pump: nothing adds to it now */
	a->loop = NULL;
}

static void tr_free(void *self)
{
	struct tr *a = self;
	if (!a)
		return;
	tr_stop(a);
	tr_destroy(a);
}

static int check_options(const sg_authn_tokenreview_options *o)
{
	SG_ENSURE(o && o->kube && o->trust_domain, SG_EINVAL,
	          "tokenreview authenticator needs a Kubernetes client and a trust domain");
	SG_ENSURE(sg_trust_domain_valid(o->trust_domain), SG_EINVAL, "trust domain is empty, too long or malformed");
	SG_ENSURE(!o->audiences || (o->n_audiences > 0 && o->n_audiences <= SG_TOKENREVIEW_AUDIENCES_MAX), SG_EINVAL,
	          "tokenreview authenticator needs 1..%d audiences", SG_TOKENREVIEW_AUDIENCES_MAX);
	for (size_t i = 0; o->audiences && i < o->n_audiences; i++) {
		const char *s = o->audiences[i];
		SG_ENSURE(s && *s && strlen(s) <= AUDIENCE_LEN_MAX && printable_ascii(s, strlen(s)), SG_EINVAL,
		          "audience %zu is empty, longer than %d bytes or not printable", i, AUDIENCE_LEN_MAX);
	}
	SG_ENSURE(o->cache_entries <= SG_TOKENREVIEW_CACHE_LIMIT, SG_EINVAL, "cache_entries is above %u",
	          SG_TOKENREVIEW_CACHE_LIMIT);
	SG_ENSURE(o->cache_ttl_max >= 0 && o->cache_ttl_max <= SG_TOKENREVIEW_TTL_LIMIT, SG_EINVAL,
	          "cache_ttl_max must be 0..%d seconds", SG_TOKENREVIEW_TTL_LIMIT);
	SG_ENSURE(o->negative_ttl <= SG_TOKENREVIEW_NEGATIVE_TTL_LIMIT, SG_EINVAL, "negative_ttl is above %d seconds",
	          SG_TOKENREVIEW_NEGATIVE_TTL_LIMIT);
	SG_ENSURE(o->max_inflight <= SG_TOKENREVIEW_INFLIGHT_LIMIT, SG_EINVAL, "max_inflight is above %d",
	          SG_TOKENREVIEW_INFLIGHT_LIMIT);
	SG_ENSURE(o->queue_max <= SG_TOKENREVIEW_QUEUE_LIMIT, SG_EINVAL, "queue_max is above %u",
	          SG_TOKENREVIEW_QUEUE_LIMIT);
	return SG_OK;
}

/* Copies the settings and allocates everything; no thread yet. */
static int tr_alloc(struct tr **out, const sg_authn_tokenreview_options *o)
{
	struct tr *a = calloc(1, sizeof(*a));
	SG_ENSURE(a, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&a->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&a->cv, &ca);
	pthread_condattr_destroy(&ca);
	a->kube = o->kube;
	snprintf(a->trust_domain, sizeof(a->trust_domain), "%s", o->trust_domain);
	a->ttl_max = o->cache_ttl_max ? o->cache_ttl_max : SG_TOKENREVIEW_TTL_DEFAULT;
	a->negative_ttl =
	    o->negative_ttl == 0 ? SG_TOKENREVIEW_NEGATIVE_TTL_DEFAULT : (o->negative_ttl < 0 ? 0 : o->negative_ttl);
	a->queue_max = o->queue_max ? o->queue_max : SG_TOKENREVIEW_QUEUE_DEFAULT;
	a->max_inflight = o->max_inflight ? o->max_inflight : SG_TOKENREVIEW_INFLIGHT_DEFAULT;
	sg_review_budget_init(&a->budget, a->max_inflight);
	a->limit = sg_review_budget_limit(&a->budget);
	/* Every review queued or in flight has a slot; twice that keeps chains short. */
	size_t slots = 16;
	while (slots < 2 * (a->queue_max + a->max_inflight))
		slots *= 2;
	a->table_mask = slots - 1;
	a->qtail = &a->qhead;

	const char *const *aud = o->audiences ? o->audiences : default_audiences;
	a->n_aud = o->audiences ? o->n_audiences : 1;
	a->aud = calloc(a->n_aud, sizeof(char *));
	a->table = calloc(slots, sizeof(struct review *));
	bool ok = a->aud && a->table;
	for (size_t i = 0; ok && i < a->n_aud; i++)
		ok = (a->aud[i] = strdup(aud[i])) != NULL;
	int rc = ok ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK)
		rc = sg_cache_new(&a->cache, o->cache_entries ? o->cache_entries : SG_TOKENREVIEW_CACHE_DEFAULT,
		                  sizeof(struct answer));
	if (rc != SG_OK) {
		tr_destroy(a);
		return rc;
	}
	a->expect = (sg_tokenreview_expect){
	    .audiences = (const char *const *)a->aud, .n_audiences = a->n_aud, .trust_domain = a->trust_domain};
	*out = a;
	return SG_OK;
}

int sg_authn_tokenreview_new(sg_authenticator *out, const sg_authn_tokenreview_options *o)
{
	memset(out, 0, sizeof(*out));
	SG_TRY(check_options(o));
	struct tr *a = NULL;
	SG_TRY(tr_alloc(&a, o));
	int rc = sg_kube_loop_new(&a->loop, a->kube);
	if (rc == SG_OK && pthread_create(&a->pump, NULL, pump, a) != 0)
		rc = sg_error_set(SG_EINTERNAL, "cannot start the token review pump");
	a->pump_started = rc == SG_OK;
	if (rc != SG_OK) {
		tr_stop(a);
		tr_destroy(a);
		return rc;
	}
	out->name = "tokenreview";
	out->start = tr_start;
	out->free = tr_free;
	out->self = a;
	return SG_OK;
}

/* ---- stats ---- */

void sg_authn_tokenreview_stats_of(const void *self, sg_authn_tokenreview_stats *out)
{
	memset(out, 0, sizeof(*out));
	const struct tr *a = self;
	if (!a)
		return;
	sg_cache_stats cs;
	sg_cache_stats_get(a->cache, &cs);
	out->reviews = atomic_load_explicit(&a->reviews, memory_order_relaxed);
	out->cache_hits = cs.hits;
	out->coalesced = atomic_load_explicit(&a->coalesced, memory_order_relaxed);
	out->refused = atomic_load_explicit(&a->refused, memory_order_relaxed);
	out->api_errors = atomic_load_explicit(&a->api_errors, memory_order_relaxed);
	out->rejected = atomic_load_explicit(&a->rejected, memory_order_relaxed);
	out->cached = cs.entries;
	out->pending = atomic_load_explicit(&a->pending, memory_order_relaxed);
	out->throttled = atomic_load_explicit(&a->throttled, memory_order_relaxed);
	out->retries = atomic_load_explicit(&a->retries, memory_order_relaxed);
	out->in_flight = atomic_load_explicit(&a->in_flight, memory_order_relaxed);
	out->budget = atomic_load_explicit(&a->limit, memory_order_relaxed);
	out->budget_cuts = atomic_load_explicit(&a->cuts, memory_order_relaxed);
}

void sg_authn_tokenreview_stats_get(const sg_authenticator *a, sg_authn_tokenreview_stats *out)
{
	sg_authn_tokenreview_stats_of(a && a->start == tr_start ? a->self : NULL, out);
}
