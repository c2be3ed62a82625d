/*
 * sg_authn_kube: the "tokenreview" authenticator. It asks the Kubernetes API
 * server whether a bearer token is valid with a TokenReview
 * (authentication.k8s.io/v1), as istiod's KubeJWT authenticator does, and
 * accepts the same callers: status.authenticated true, no status.error,
 * user in group system:serviceaccounts, username
 * system:serviceaccount:<ns>:<sa>, pod name and uid from user.extra, and
 * status.audiences (when present) meeting the audiences asked for.
 *
 * What istiod lacks, and signet adds, is a way to survive a mesh-wide
 * restart without throttling the API server:
 *   cache       answers are kept under SHA-256 of the token (never the
 *               token): a positive one until min(cache_ttl_max, the
 *               token's exp), a refusal for negative_ttl seconds. A hit
 *               completes inside start(), with no API call and no thread
 *               hop, at the cost of a hash and a short per-shard lock.
 *   coalescing  concurrent requests carrying one token share one review.
 *   queue       distinct reviews wait in a bounded queue; a full queue
 *               refuses at once with SG_EBUSY.
 *   budget      the queue's calls are made by one request loop
 *               (sg_kube_loop, one thread for every call in flight), at
 *               most max_inflight at once, and an adaptive budget
 *               (sg_review_budget.h: AIMD on the API server's answers)
 *               lets only so many be in flight: it grows while answers
 *               come fast, shrinks on 429, 5xx, timeouts and rising
 *               latency, and a 429's Retry-After holds
 *               every start until it has passed. A review answered 429 (or
 *               5xx with Retry-After) is asked again, up to 4 times, before
 *               its requests get SG_EBUSY. The kube client should be one of
 *               the authenticator's own, without the controllers' QPS
 *               limiter (qps < 0) and with idle_handles >= max_inflight so
 *               that every call in flight keeps its easy handle between
 *               calls: the budget is the reviews' limit, and nothing else
 *               should be.
 *
 * The token's exp is read from its JWT payload WITHOUT verifying the
 * signature: the API server has just verified it, and the value only
 * bounds the cache, fills caller.expires and lets a token that has
 * expired by its own claim be refused without an API call (stricter than
 * kube-apiserver, which allows 60 s of leeway). A token with no readable
 * exp (not a JWT, or no exp claim) is kept at most min(cache_ttl_max, 60 s)
 * and has expires 0. The cost of the cache: a token revoked after its
 * first review (pod or service account deleted) is accepted until its
 * entry ends, at most cache_ttl_max later (kube-apiserver itself keeps
 * successful authentications for 10 s). Entries are judged by req->now,
 * the wall clock.
 *
 * Completion (the sg_authn.h contract, made precise):
 *   - a cached acceptance: done(SG_OK, caller, NULL, arg) is called inside
 *     start(), on the calling thread, before start() returns SG_OK;
 *   - a synchronous refusal (no bearer, token too large or not printable
 *     ASCII, expired by its exp, a remembered refusal, queue full, shutting
 *     down): start() returns the error with the detail set; done is never
 *     called;
 *   - otherwise start() returns SG_OK and done is called exactly once
 *     later, from the authenticator's request loop thread (or its pump
 *     thread, for a call that could not start, or the thread calling
 *     free(), see below), with none of its locks held. done must not
 *     block: the answers of every other review wait for it.
 * start() keeps no pointer into req once it returns (the token is copied,
 * and the copy is wiped when the review is over), so the request may live
 * on the caller's stack.
 *
 * Results (through start() or done):
 *   SG_OK        caller: method "tokenreview", identity
 *                spiffe://<td>/ns/<ns>/sa/<sa> ('@' in td becomes '.'),
 *                ns, sa, sa_uid (status.user.uid), pod_name and pod_uid
 *                (user.extra, "" without a pod-bound token), expires = the
 *                token's exp (0 when unknown).
 *   SG_EAUTH     the token is refused: the API server said it is not
 *                authenticated (its status.error, sanitised, follows), the
 *                answer failed a check, or the token expired by its exp.
 *                A review's refusal is remembered negative_ttl seconds.
 *   SG_EBUSY     no verdict about the token, the client should retry: the
 *                API server is unreachable, overloaded (429 or a 5xx with
 *                Retry-After still after 4 retries; another 5xx), slow
 *                (timeouts), answers something that is not a TokenReview,
 *                or refuses signet itself (401/403 on the TokenReview call:
 *                signet's credentials or its RBAC rights; the message says
 *                so). Such failures are never cached, never counted as the
 *                caller's, and logged at WARN (at most one line per 10 s,
 *                with the number suppressed). Also: queue full ("too many
 *                token reviews pending"), shutting down.
 *   SG_EINTERNAL out of memory.
 * No message ever contains the token.
 *
 * Thread safety: start() may be called from any number of threads at once.
 * free() must not run concurrently with start(), nor from inside a done
 * callback (it joins the pump and the loop). It completes every review
 * still queued or in flight with SG_EBUSY "token review: signet is
 * shutting down", calling those done callbacks on its own thread, then
 * stops the loop, which ends the calls still in flight at once.
 */
#ifndef SG_AUTHN_KUBE_H
#define SG_AUTHN_KUBE_H

#include "sg_authn.h"
#include "sg_error.h"
#include "sg_kube.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits. */
#define SG_TOKENREVIEW_TOKEN_MAX 16384         /* bearer token, bytes (as SG_JWT_TOKEN_MAX) */
#define SG_TOKENREVIEW_ANSWER_MAX (256u << 10) /* sg_tokenreview_parse_bytes input */
#define SG_TOKENREVIEW_ERROR_MAX 200           /* status.error kept in a message, bytes */
#define SG_TOKENREVIEW_AUDIENCES_MAX 32

/* Defaults (the 0 of each option) and the largest accepted values. */
#define SG_TOKENREVIEW_CACHE_DEFAULT 16384
#define SG_TOKENREVIEW_CACHE_LIMIT (1u << 22)
#define SG_TOKENREVIEW_TTL_DEFAULT 300
#define SG_TOKENREVIEW_TTL_LIMIT 86400
#define SG_TOKENREVIEW_TTL_NO_EXP 60 /* cap for a token without a readable exp */
#define SG_TOKENREVIEW_NEGATIVE_TTL_DEFAULT 5
#define SG_TOKENREVIEW_NEGATIVE_TTL_LIMIT 3600
#define SG_TOKENREVIEW_INFLIGHT_DEFAULT 64
#define SG_TOKENREVIEW_INFLIGHT_LIMIT 256
#define SG_TOKENREVIEW_QUEUE_DEFAULT 1024
#define SG_TOKENREVIEW_QUEUE_LIMIT (1u << 20)

typedef struct sg_authn_tokenreview_options {
	sg_kube *kube;                /* required; borrowed: must outlive the authenticator */
	const char *const *audiences; /* spec.audiences; NULL: {"istio-ca"}; else 1..32 */
	size_t n_audiences;
	const char *trust_domain; /* required, e.g. "cluster.local" */
	size_t cache_entries;     /* 0: 16384; rounded down to a multiple of 256, at least 256 */
	int cache_ttl_max;        /* seconds an acceptance is reused at most; 0: 300 */
	int negative_ttl;         /* seconds a refusal is remembered; 0: 5; < 0: never */
	unsigned max_inflight;    /* the ceiling of the review budget (calls in flight); 0: 64 */
	size_t queue_max;         /* distinct reviews waiting for a worker; 0: 1024 */
} sg_authn_tokenreview_options;

/* Builds the authenticator (name "tokenreview") and starts its workers.
 * Option strings are copied. SG_EINVAL for a missing kube client or trust
 * domain, a malformed trust domain (empty, > 255 bytes, '/', spaces or
 * control bytes), bad audiences or an option beyond its limit;
 * SG_EINTERNAL when memory or threads run out. On failure *out is zeroed.
 * Release with out->free(out->self). */
SG_API int sg_authn_tokenreview_new(sg_authenticator *out, const sg_authn_tokenreview_options *o) SG_MUST_CHECK;

typedef struct sg_authn_tokenreview_stats {
	uint64_t reviews;    /* TokenReview calls made */
	uint64_t cache_hits; /* starts answered from the cache (acceptances and refusals) */
	uint64_t coalesced;  /* starts that joined a review already queued or in flight */
	uint64_t refused;    /* refusals decided by a review, or locally (expired, malformed token) */
	uint64_t api_errors; /* reviews that ended without a verdict (SG_EBUSY/SG_EINTERNAL), after retries */
	uint64_t rejected;   /* starts refused because queue_max reviews were waiting */
	size_t cached;       /* cache entries held (a stale one until it is replaced or looked up) */
	size_t pending;      /* reviews queued or in flight */
	uint64_t throttled;  /* 429 answers to TokenReview calls */
	uint64_t retries;    /* reviews asked again after a 429 (or a 5xx with Retry-After) */
	size_t in_flight;    /* TokenReview calls under way now */
	size_t budget;       /* calls the adaptive budget allows in flight now (1..max_inflight) */
	uint64_t budget_cuts; /* times the budget shrank (429, 5xx, timeouts, rising latency) */
} sg_authn_tokenreview_stats;

/* Counters of a tokenreview authenticator (zeros for any other kind).
 * Any thread, any time before free. */
SG_API void sg_authn_tokenreview_stats_get(const sg_authenticator *a, sg_authn_tokenreview_stats *out);
/* The same from the authenticator's self pointer, for holders that handed
 * the sg_authenticator itself to a chain. self must be the self of a
 * tokenreview authenticator (or NULL: zeros). */
SG_API void sg_authn_tokenreview_stats_of(const void *self, sg_authn_tokenreview_stats *out);

/* ---- the pure parts (exported for tests and the fuzz target) ---- */

typedef struct sg_tokenreview_expect {
	const char *const *audiences; /* the audiences asked for; NULL: {"istio-ca"} */
	size_t n_audiences;
	const char *trust_domain; /* required */
} sg_tokenreview_expect;

/* Turns a TokenReview answer into a caller, as istiod does, strictly:
 *   the envelope: an object, "kind" absent or "TokenReview", "status" an
 *     object, status.authenticated absent (false) or a boolean, otherwise
 *     SG_EPROTO (the API server's fault, not the caller's);
 *   then, SG_EAUTH unless every check passes: authenticated true, no
 *     non-empty status.error; status.user an object whose username is
 *     exactly system:serviceaccount:<ns>:<sa> (ns a DNS-1123 label, sa a
 *     DNS-1123 subdomain), whose groups is an array of strings holding
 *     "system:serviceaccounts", whose uid (optional) is a uid; user.extra
 *     (optional) an object whose authentication.kubernetes.io/pod-name and
 *     /pod-uid members (optional) are arrays of strings, the first one
 *     taken (a DNS-1123 subdomain, a uid); status.audiences (optional) an
 *     array of strings with one of x's audiences. Strings with NUL bytes
 *     are refused. status.error text is quoted sanitised (printable ASCII,
 *     at most SG_TOKENREVIEW_ERROR_MAX bytes).
 * On SG_OK *out is the caller with method "tokenreview" and expires 0 (the
 * answer does not carry it); on failure *out is zeroed. SG_EINVAL when x
 * has no trust domain. Borrows review. */
SG_API int sg_tokenreview_parse(const json_t *review, const sg_tokenreview_expect *x, sg_caller *out) SG_MUST_CHECK;
/* The same from JSON bytes (at most SG_TOKENREVIEW_ANSWER_MAX, duplicate
 * members refused): SG_EPROTO when they are not a JSON document. */
SG_API int sg_tokenreview_parse_bytes(const void *json, size_t len, const sg_tokenreview_expect *x,
                                      sg_caller *out) SG_MUST_CHECK;

/* Reads the exp claim of a compact JWT WITHOUT verifying anything: true
 * and *exp set when the token has three dot-separated parts whose second
 * is canonical base64url of at most 8 KiB encoding a JSON object with a
 * numeric exp in 0..9999-12-31 (reals truncated); false (and *exp = 0)
 * otherwise. Only for bounding what a verified answer is worth; never a
 * verdict by itself. May leave an error detail set on this thread. */
SG_API bool sg_tokenreview_token_exp(const char *token, size_t len, int64_t *exp);

#endif
