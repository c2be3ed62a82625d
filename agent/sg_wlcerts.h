/*
 * sg_wlcerts: the workload certificates a node agent holds: one per
 * identity (a SPIFFE ID), kept while at least one pod uses it, refreshed
 * before it expires. The CA call itself is the caller's (a fetch function,
 * sg_caclient_fetch in signet-agent), so the store and the scheduler can be
 * used with any CA client and tested without one.
 *
 * The store. Each identity holds the SET of pod ids (the pod UIDs) that use
 * it, not a count: adding a pod that is already there changes nothing, so
 * a pod updated a hundred times and deleted once leaves nothing behind
 * (Kmesh #1843 counted every update). A pod moves when it is set under
 * another identity. When an identity's set empties, the identity, its
 * certificate and its pending refresh are dropped at once.
 *
 * The scheduler. A new identity is fetched at once. An issued certificate
 * is refreshed at refresh_fraction of its lifetime (start + fraction x
 * (not_after - start), where start is not_before, or the time it arrived
 * when the CA backdated not_before), moved by a random jitter of up to
 * +-refresh_jitter of the lifetime, and never sooner than refresh_floor_ms
 * after it arrived: a certificate shorter than the floor is refreshed every
 * floor, never in a loop (Kmesh refreshed 1 h before expiry, so a shorter
 * certificate was refreshed continuously). A failed fetch is retried after
 * backoff_initial_ms, doubling per failure up to backoff_max_ms, each delay
 * jittered by +-20 %; a certificate still held stays in use meanwhile.
 * Entries are objects, not names: dropping an identity removes its entry
 * from the timer heap, and a fetch in flight for a dropped entry is thrown
 * away when it returns, so an identity dropped and added again never sees
 * the old entry fire or its late answer stored (Kmesh #1707). Fetches run on
 * `concurrency` worker threads, which bounds the requests in flight to the
 * CA; a due entry waits in the heap, never in a channel a sender can block
 * on.
 *
 * Callbacks. Every change of what is held (issued, refreshed, dropped, and
 * each failed fetch) becomes an event, queued in the order the changes
 * were decided and delivered by one thread of the manager's own, one at a
 * time, with no lock held: a dropped event for an identity always follows
 * its issued event, and a re-added identity's new issued event follows the
 * dropped one. Queuing never blocks (a linked list; its length is the
 * number of undelivered changes). The callback may call any function here
 * but sg_wlcerts_free.
 *
 * Ownership: pod ids and identities are copied. A certificate (sg_wlcert)
 * is immutable and reference counted: the store and each event hold one,
 * sg_wlcerts_get hands out another; sg_wlcert_release drops it, wiping the
 * key with the last reference.
 *
 * Threads: every function may be called from any thread.
 */
#ifndef SG_WLCERTS_H
#define SG_WLCERTS_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_WLCERTS_ID_MAX 512     /* bytes of an identity, NUL excluded */
#define SG_WLCERTS_POD_MAX 128    /* bytes of a pod id, NUL excluded */
#define SG_WLCERTS_WORKERS_MAX 64 /* concurrency */

/* A certificate and its key, as fetched. Immutable once handed to the
 * manager. */
typedef struct sg_wlcert {
	char *key_pem;   /* the private key, PEM; wiped when the last reference goes */
	char *chain_pem; /* the leaf, then any intermediates, PEM */
	char *root_pem;  /* the root(s) the CA answered with, PEM */
	int64_t not_before, not_after; /* Unix seconds, of the leaf */
	char serial[41];               /* the leaf's serial, hex */
} sg_wlcert;

/* A new certificate with the three PEM texts taken over (they must come
 * from malloc; on failure they are freed, the key wiped). The reference
 * count starts at 1. SG_EINTERNAL when out of memory. */
SG_API int sg_wlcert_new(sg_wlcert **out, char *key_pem, char *chain_pem, char *root_pem, int64_t not_before,
                         int64_t not_after, const char *serial) SG_MUST_CHECK;
/* Another reference. */
SG_API sg_wlcert *sg_wlcert_ref(sg_wlcert *c);
/* Drops a reference; the last one frees (wiping the key). Accepts NULL. */
SG_API void sg_wlcert_release(sg_wlcert *c);

/* Fetches a certificate for identity: blocking, on a worker thread. On
 * success *out gets a new certificate (one reference, passed to the
 * manager). On failure returns < 0 with an sg_error detail. */
typedef int (*sg_wlcerts_fetch_fn)(const char *identity, sg_wlcert **out, void *arg);

typedef enum sg_wlcerts_event_type {
	SG_WLCERTS_ISSUED = 0,    /* the identity's first certificate */
	SG_WLCERTS_REFRESHED = 1, /* a new certificate replaced the held one */
	SG_WLCERTS_DROPPED = 2,   /* the last pod went: the certificate is gone */
	SG_WLCERTS_FAILED = 3,    /* a fetch failed; retried after retry_ms */
} sg_wlcerts_event_type;

/* What a callback gets; every pointer is borrowed for the call (take a
 * reference to keep cert). */
typedef struct sg_wlcerts_event {
	sg_wlcerts_event_type type;
	const char *identity;
	sg_wlcert *cert;       /* ISSUED, REFRESHED: the new one; DROPPED, FAILED: the one held, or NULL */
	int64_t refresh_at_ms; /* ISSUED, REFRESHED: when the refresh is due (Unix ms) */
	unsigned failures;     /* FAILED: failures in a row */
	uint64_t retry_ms;     /* FAILED: the delay before the next attempt */
	const char *error;     /* FAILED: the fetch's error detail */
} sg_wlcerts_event;

typedef void (*sg_wlcerts_event_fn)(const sg_wlcerts_event *ev, void *arg);

typedef struct sg_wlcerts_options {
	sg_wlcerts_fetch_fn fetch; /* required */
	void *fetch_arg;
	sg_wlcerts_event_fn on_event; /* optional */
	void *event_arg;
	unsigned concurrency;      /* worker threads, fetches in flight at most (0: 8) */
	double refresh_fraction;   /* of the lifetime, in (0, 1) (0: 0.5) */
	double refresh_jitter;     /* +- of the lifetime, in [0, 0.5), kept inside (0, 1) (negative: none; 0: 0.05) */
	uint64_t refresh_floor_ms; /* a refresh never sooner than this after a certificate arrived (0: 30 s) */
	uint64_t backoff_initial_ms; /* first retry delay (0: 1 s) */
	uint64_t backoff_max_ms;     /* retry delay cap (0: 5 min) */
} sg_wlcerts_options;

typedef struct sg_wlcerts sg_wlcerts;

/* Checks the options (SG_EINVAL names a bad one) and starts the worker and
 * delivery threads. Caller frees with sg_wlcerts_free. */
SG_API int sg_wlcerts_new(sg_wlcerts **out, const sg_wlcerts_options *o) SG_MUST_CHECK;

/* Stops: no new fetch starts, fetches in flight are waited for (each ends
 * by its own timeout) and thrown away, events not yet delivered are
 * discarded (no callback runs after this returns), everything held is
 * freed. Accepts NULL. */
SG_API void sg_wlcerts_free(sg_wlcerts *m);

/* Pod pod_id uses identity: adds it to that identity's set (creating the
 * identity, whose fetch starts at once), moving it from another identity
 * if it was there. Nothing changes when it is already there. SG_EINVAL for
 * an empty or too long id or identity, SG_EINTERNAL out of memory. */
SG_API int sg_wlcerts_pod_set(sg_wlcerts *m, const char *pod_id, const char *identity) SG_MUST_CHECK;

/* Pod pod_id is gone: removes it from its identity's set, dropping the
 * identity when the set is empty. Nothing happens for an unknown pod. */
SG_API void sg_wlcerts_pod_remove(sg_wlcerts *m, const char *pod_id);

/* The certificate held for identity, as a new reference (release it), or
 * NULL when none is held (yet). */
SG_API sg_wlcert *sg_wlcerts_get(sg_wlcerts *m, const char *identity);

typedef struct sg_wlcerts_stats {
	uint64_t identities;  /* identities with pods */
	uint64_t pods;        /* pods counted */
	uint64_t held;        /* identities with a certificate */
	uint64_t pending;     /* identities with pods and no certificate yet */
	uint64_t in_flight;   /* fetches running */
	uint64_t fetches;     /* fetches started, in all */
	uint64_t issued;      /* first certificates */
	uint64_t refreshed;   /* refreshes that succeeded */
	uint64_t failed;      /* fetches that failed */
	uint64_t discarded;   /* answers thrown away (their identity was dropped meanwhile) */
	uint64_t dropped;     /* identities dropped */
	int64_t soonest_expiry; /* the earliest not_after held (Unix seconds), 0 when none */
} sg_wlcerts_stats;

SG_API void sg_wlcerts_stats_get(sg_wlcerts *m, sg_wlcerts_stats *out);

/* Calls fn for every identity held (with pods), under the manager's lock:
 * fn must not call back into the manager. For a sweep of what is on disk. */
SG_API void sg_wlcerts_each(sg_wlcerts *m, void (*fn)(const char *identity, void *arg), void *arg);

#endif
