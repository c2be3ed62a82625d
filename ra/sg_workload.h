/*
 * sg_workload: what signet knows about the cluster's workloads, from
 * informer caches (kube/sg_kube_informer.h) of Pods and ServiceAccounts in
 * all namespaces. Two consumers:
 *
 *   node authorization  a trusted node agent (ztunnel) may impersonate only
 *                       identities of pods on its own node, as istiod's
 *                       NodeAuthorizer does (security/pkg/server/ca/
 *                       node_auth.go). Synchronous, cache only.
 *   bound tokens        a token verified locally (jwks mode) is refused
 *                       when its ServiceAccount or bound Pod no longer
 *                       exists or has another uid, which is what the API
 *                       server's TokenReview would have said
 *                       (pkg/serviceaccount/claims.go). An authenticator
 *                       wrapping another; cache first, a live GET on a
 *                       worker thread when the cache cannot tell.
 *
 * Memory: the informers keep whole objects (a Pod is typically 4-16 KiB of
 * JSON; ServiceAccounts are small), about what client-go's informers
 * without a transform keep. A node-local cache would need a field selector
 * per node, which a cluster-wide CA cannot use.
 *
 * Errors: refusals are SG_EAUTH with a message naming the object; "cannot
 * tell now" (cache not synced, API unreachable, queue full, shutting down)
 * is SG_EBUSY, which clients retry.
 *
 * Thread safety: every function but new/start/stop/free may be called from
 * any thread at once.
 */
#ifndef SG_WORKLOAD_H
#define SG_WORKLOAD_H

#include "sg_authn.h"
#include "sg_error.h"
#include "sg_kube_informer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_workload sg_workload;

typedef struct sg_workload_options {
	sg_kube *kube;           /* required; borrowed, must outlive the index */
	bool pods;               /* cache Pods (impersonation; pod-bound tokens) */
	bool service_accounts;   /* cache ServiceAccounts (bound tokens) */
	unsigned lookup_threads; /* per bound authenticator, live GET workers; 0: 2, at most 16 */
	size_t lookup_queue;     /* per bound authenticator, waiting checks; 0: 256 */
	size_t dead_uids;        /* uids remembered as deleted; 0: 4096 */
} sg_workload_options;

typedef struct sg_workload_stats {
	size_t pods; /* objects cached */
	size_t service_accounts;
	bool pods_synced; /* false also when the cache is off */
	bool service_accounts_synced;
	uint64_t impersonation_allowed;
	uint64_t impersonation_refused; /* SG_EAUTH and SG_EBUSY answers */
	uint64_t bound_cached;          /* bound checks answered at once, without a worker */
	uint64_t bound_live;            /* live GETs made by bound checks */
	uint64_t bound_refused;         /* SG_EAUTH answers */
	uint64_t bound_busy;            /* SG_EBUSY answers */
	uint64_t dead_uid_hits;         /* refusals from the deleted-uid memory */
	sg_kube_informer_stats pod_informer, sa_informer;
} sg_workload_stats;

/* Creates a stopped index: the informers asked for in o, nothing running.
 * With a cache off, bound checks of that kind always ask the API (live GET)
 * and impersonation (which needs pods) fails with SG_EINTERNAL. Caller frees
 * with sg_workload_free. */
SG_API int sg_workload_new(sg_workload **out, const sg_workload_options *o) SG_MUST_CHECK;
/* Starts the informers' threads (after a stop, they resume). */
SG_API int sg_workload_start(sg_workload *w) SG_MUST_CHECK;
/* Waits up to timeout_ms for the first LIST of every enabled cache:
 * SG_OK or SG_ETIMEOUT naming the resource. */
SG_API int sg_workload_wait_synced(sg_workload *w, unsigned timeout_ms) SG_MUST_CHECK;
/* Stops the informers; the caches stay as they were (and go stale), so
 * bound checks keep working, with more live GETs. Safe when not running. */
SG_API void sg_workload_stop(sg_workload *w);
/* Stops and frees; accepts NULL. Every bound authenticator made on w must
 * have been freed first. */
SG_API void sg_workload_free(sg_workload *w);
SG_API void sg_workload_stats_get(sg_workload *w, sg_workload_stats *out);

/* Node authorization of "caller impersonates spiffe://<td>/ns/<target_ns>/
 * sa/<target_sa>" (the caller already known to be a trusted node account,
 * the target already parsed): SG_OK when the caller's pod (ns, pod_name)
 * is cached with the caller's pod uid and service account and is scheduled
 * on a node where a pod of target_ns/target_sa is (and is not Succeeded or
 * Failed). Otherwise SG_EAUTH: "caller has no pod claim", "caller pod ns/name
 * not found", "caller pod uid mismatch", "caller pod runs as another service
 * account", "caller pod is not scheduled on a node", "no pod of ns/sa runs on
 * node X". SG_EBUSY before the pod cache's first LIST; SG_EINTERNAL without
 * a pod cache; SG_EINVAL for NULL or malformed names. Cache only, never
 * blocks on I/O (it runs on a gRPC transport thread): a pod too new for the
 * cache is refused and the client's retry succeeds once the watch has
 * delivered it, which is what istiod does. */
SG_API int sg_workload_authorize_impersonation(sg_workload *w, const sg_caller *caller, const char *target_ns,
                                               const char *target_sa) SG_MUST_CHECK;

/* The pod index (an sg_kube_index_fn): "<namespace>/<serviceAccountName>/
 * <nodeName>" for pods with all three set (non-empty, printable, no '/'),
 * not in phase Succeeded or Failed, whose key fits in cap; 0 (not indexed)
 * for anything else, including members of the wrong JSON type. arg unused. */
SG_API int sg_workload_pod_index(const json_t *pod, char *key, size_t cap, void *arg);

/* The bound-token check as an authenticator: runs inner and, when it
 * accepts a caller with a namespace, checks that the ServiceAccount ns/sa
 * exists with uid == caller->sa_uid (when the token carries one) and, when
 * the token names a pod, that pod ns/pod_name exists with uid ==
 * caller->pod_uid; an object whose deletionTimestamp is more than 60 s past
 * is refused as the API server does. Callers without a namespace (mTLS)
 * pass unchanged.
 *
 * Answers: a cache hit with the token's uid completes at once (synchronously
 * when inner did); a uid remembered as deleted (an informer DELETE or an
 * earlier live answer) is refused at once; anything else (not cached, a
 * different uid, cache off or not synced) queues a live GET on one of the
 * authenticator's worker threads, which calls done. Refusals are SG_EAUTH
 * ("service account ns/sa no longer exists", "service account ns/sa uid does
 * not match the token", "pod ns/name bound to the token no longer exists",
 * "pod ns/name uid does not match the token", "... has been deleted"); a
 * full queue (returned by start) or an API failure other than 404 (through
 * done) is SG_EBUSY. Inner's own failures pass through unchanged.
 *
 * The authenticator takes inner's name (so a chain treats it as the same
 * kind of member). Ownership: inner is taken (freed with the authenticator,
 * also when this call fails); w is borrowed and must outlive it. free()
 * waits for GETs in progress (bounded by the client's request timeout),
 * answers every queued request with SG_EBUSY exactly once, then frees
 * inner. */
SG_API int sg_authn_bound_new(sg_authenticator *out, sg_authenticator inner, sg_workload *w) SG_MUST_CHECK;

#endif
