/*
 * sg_pool: the multithreaded signer pool.
 *
 * Worker threads, each with its own sg_issuer (OpenSSL context + HSM
 * session), take requests from one bounded FIFO queue. The pool starts with
 * `threads` workers (one per CPU by default: enough for a token that signs
 * on the host's CPU) and grows, up to `max_threads` and the token's session
 * limit, while requests queue and the workers spend most of their time
 * waiting for the token (a latency-bound token: a network HSM); workers
 * grown beyond `threads` retire after idle_ms without work, or when the
 * latency falls and the pool is well above its target. The sizing rule
 * and why it is this one are in sg_pool.c's design note. Submission never
 * blocks: a full queue answers SG_EBUSY at once (the caller turns that into a
 * retryable status), so overload is never queued without bound; so does a
 * request whose estimated wait (queue depth x recent signing time / threads)
 * would outlast its deadline, which would otherwise expire in the queue or be
 * signed for a client already gone. Completion is
 * a callback run on the worker thread; the gRPC front end uses it to finish a
 * call without holding a thread per request. A request whose deadline passes
 * while queued completes with SG_ETIMEOUT without touching the HSM.
 *
 * Shutdown (sg_pool_free) refuses new work, lets the workers finish every
 * queued request, then joins them: nothing accepted is dropped.
 *
 * Ownership: the request (and the CSR bytes and identity it points to) is
 * borrowed until the callback runs. The result passed to the callback is
 * valid during the callback; it may keep the leaf by taking res->leaf_pem
 * (setting it to NULL). err is the failure detail when rc < 0.
 */
#ifndef SG_POOL_H
#define SG_POOL_H

#include "sg_ca.h"
#include "sg_error.h"
#include "sg_hsm.h"
#include "sg_issuer.h"

#include <stdint.h>

#define SG_POOL_MAX_THREADS 256
#define SG_POOL_MAX_QUEUE (1u << 20)
/* The default queue: SG_POOL_QUEUE_PER_THREAD per thread, at most
 * SG_POOL_DEFAULT_QUEUE_MAX (a mesh restart is served from the queue rather
 * than by retry waves; admission by deadline keeps it from holding what it
 * cannot serve in time). */
#define SG_POOL_QUEUE_PER_THREAD 1024u
#define SG_POOL_DEFAULT_QUEUE_MAX 16384u

typedef struct sg_pool sg_pool;

/* A grown worker with no work for this long retires (default). */
#define SG_POOL_IDLE_MS 2000u

typedef struct sg_pool_options {
	unsigned threads;        /* workers always running; 0: one per online CPU */
	unsigned max_threads;    /* workers (each one HSM session) at most while the token is latency-bound; 0:
	                          * SG_POOL_MAX_THREADS. Also capped by the tokens' session limits
	                          * (sg_hsm_load.max_sessions); below threads, it lowers threads. */
	unsigned idle_ms;        /* 0: SG_POOL_IDLE_MS */
	unsigned queue_capacity; /* 0: SG_POOL_QUEUE_PER_THREAD per thread, at most SG_POOL_DEFAULT_QUEUE_MAX */
	sg_issuer_options issuer;
} sg_pool_options;

typedef void (*sg_pool_done_fn)(int rc, sg_issue_result *res, const sg_error *err, void *arg);

/* Opens one HSM session per initial worker (one at a time) and starts the
 * workers, and the thread that grows and shrinks them. ca and hsm are
 * borrowed for the pool's life. Caller frees with sg_pool_free. */
SG_API int sg_pool_new(sg_pool **out, const sg_ca *ca, sg_hsm *hsm, const sg_pool_options *opts) SG_MUST_CHECK;

/* Queues a request. SG_OK: done will be called exactly once, later, on a
 * worker thread. SG_EBUSY: the queue is full, holds more work than the
 * request's deadline leaves time for (req->deadline_ns in the future and a
 * signing time measured), or the pool is shutting down; done will not be
 * called. */
SG_API int sg_pool_submit(sg_pool *p, const sg_issue_request *req, sg_pool_done_fn done, void *arg) SG_MUST_CHECK;

/* Submits and waits. On success *res is filled and owned by the caller
 * (release with sg_issue_result_clear). */
SG_API int sg_pool_issue(sg_pool *p, const sg_issue_request *req, sg_issue_result *res) SG_MUST_CHECK;

/* Moves signing to another CA and key (a CA rotation's activate, followed
 * by signetd without a restart). One issuer for the new pair is made here,
 * on the caller's thread, before anything changes, so a pair that cannot
 * sign (no session, a key the token refuses) leaves the pool signing as
 * before. Then every worker, the grown ones included, and every worker
 * started later, opens its own new session before the next request it
 * signs; a request already being signed finishes with the old one, and a
 * worker whose open fails keeps signing with the old pair, retries each
 * second and logs once. ca and hsm are borrowed for the pool's life, and
 * so are the previous ones (a worker may still hold them until its next
 * request). Called from one thread at a time. */
SG_API int sg_pool_set_signer(sg_pool *p, const sg_ca *ca, sg_hsm *hsm) SG_MUST_CHECK;

/* Counters, summed over the workers' private shards. */
/* One counter per error category of sg_error.h (SG_EINVAL .. SG_ELINT). */
#define SG_POOL_ERRORS 11

typedef struct sg_pool_stats {
	unsigned threads;         /* workers running now (each holds one HSM session) */
	uint64_t threads_base;    /* always running (options.threads, capped by max) */
	uint64_t threads_max;     /* the bound: max_threads and the tokens' session limits */
	uint64_t threads_target;  /* what the sizing asks for at the measured latency (base .. max) */
	uint64_t threads_started; /* workers started beyond the base, ever */
	uint64_t threads_retired; /* of those, retired: idle for idle_ms, or well above the target */
	uint64_t busy;            /* workers signing now */
	uint64_t hsm_wait_ns;     /* recent mean time a signature waited off CPU for the token */
	unsigned queue_capacity;
	uint64_t queued;          /* in the queue now */
	uint64_t submitted;       /* accepted by sg_pool_submit */
	uint64_t rejected;        /* refused with SG_EBUSY */
	uint64_t rejected_deadline; /* of those, refused because the wait would outlast the deadline */
	uint64_t service_ns;      /* moving average of one certificate's signing time (0: none yet) */
	uint64_t completed;       /* callbacks run */
	uint64_t issued;          /* completed with SG_OK */
	uint64_t by_error[SG_POOL_ERRORS]; /* completed with error -i (index by -rc) */
	uint64_t latency_ns_sum;  /* of issued certificates, queue wait included */
} sg_pool_stats;

SG_API void sg_pool_stats_get(sg_pool *p, sg_pool_stats *out);

/* Stops accepting, drains the queue, joins the workers. Accepts NULL. */
SG_API void sg_pool_free(sg_pool *p);

#endif
