/*
 * sg_lease: leader election on a coordination.k8s.io/v1 Lease with
 * client-go's semantics (tools/leaderelection, resourcelock/leaselock).
 *
 *  - Acquire: GET the Lease; create it when missing. Another holder's lease
 *    counts as expired when its record has not changed for
 *    lease_duration, measured on OUR monotonic clock from when we last saw
 *    it change (not from renewTime, so clock skew does not matter). A free
 *    or expired lease is taken with a PUT carrying the resourceVersion we
 *    read, so two candidates racing produce one winner and one 409.
 *  - Renew: the leader PUTs renewTime every retry_period; acquireTime and
 *    leaseTransitions are kept (a takeover sets acquireTime and adds one to
 *    leaseTransitions). If no renewal succeeds for renew_deadline the
 *    leader stops leading (on_stopped_leading) and becomes a candidate
 *    again.
 *  - Stop: a leader calls on_stopped_leading first (so its work has ended)
 *    and then releases the Lease by writing holderIdentity "" with
 *    leaseDurationSeconds 1, so a successor takes over at its next retry
 *    instead of waiting for expiry (client-go ReleaseOnCancel). keep_on_stop
 *    skips the release.
 *
 * Defaults: 15 s / 10 s / 2 s; lease_duration > renew_deadline >
 * 1.2 * retry_period is required. Callbacks run on the elector's thread.
 */
#ifndef SG_LEASE_H
#define SG_LEASE_H

#include "sg_kube.h"

typedef struct sg_lease_elector sg_lease_elector;

typedef struct sg_lease_opts {
	const char *ns;             /* Lease namespace; NULL: the client's */
	const char *name;           /* Lease name */
	const char *identity;       /* this candidate (e.g. pod name + random) */
	unsigned lease_duration_ms; /* 0: 15000 (written as whole seconds, rounded up) */
	unsigned renew_deadline_ms; /* 0: 10000 */
	unsigned retry_period_ms;   /* 0: 2000 */
	bool keep_on_stop;          /* do not release the Lease on stop */
	void (*on_started_leading)(void *arg);
	void (*on_stopped_leading)(void *arg);
	void (*on_new_leader)(const char *identity, void *arg); /* optional; "" when released */
	void *arg;
} sg_lease_opts;

/* Creates a stopped elector; strings are copied, the client must outlive
 * it. SG_EINVAL on bad durations or names. Free with sg_lease_elector_free. */
SG_API int sg_lease_elector_new(sg_lease_elector **out, sg_kube *k, const sg_lease_opts *opt) SG_MUST_CHECK;
/* Starts campaigning on a thread of its own. */
SG_API int sg_lease_elector_start(sg_lease_elector *e) SG_MUST_CHECK;
/* Stops (stopping leadership and releasing the Lease as described above)
 * and waits for the thread. Safe when not running. */
SG_API void sg_lease_elector_stop(sg_lease_elector *e);
/* Stops and frees; accepts NULL. */
SG_API void sg_lease_elector_free(sg_lease_elector *e);
/* Whether this elector currently leads (between the two callbacks). */
SG_API bool sg_lease_elector_is_leader(sg_lease_elector *e);
/* The holder last observed (copied into out; "" if none). */
SG_API void sg_lease_elector_holder(sg_lease_elector *e, char *out, size_t cap);

#endif
