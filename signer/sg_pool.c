/*
 * Signer pool: a bounded ring of requests under one mutex, N workers.
 *
 * The lock is held only to move requests in and out of the ring; under load
 * a worker takes up to BATCH requests per wake-up (its fair share of the
 * queue) so that the mutex and condition variable cost is shared by several
 * certificates. Counters are
 * per worker (written by that worker only, read with relaxed atomics), so
 * the hot path shares no cache line between workers.
 *
 * Admission by deadline: the queue is deep by default (about a second of
 * work for a software token), because a mesh restarting at once is better
 * served from a queue than by refusing most callers and letting them come
 * back in retry waves while the HSM idles between them (perf/herd). What a
 * deep queue must not do is hold a request it cannot serve in time: a
 * request whose wait, estimated from the queue depth and the workers'
 * recent service time, would run past its deadline is refused at once
 * (SG_EBUSY: UNAVAILABLE, retried after a backoff) instead of expiring in
 * the queue, or being signed for a client that has gone. The service time
 * is one shared moving average, written by each worker after each
 * certificate (a relaxed store; a lost update only delays it a little).
 *
 * A rotation moves signing to another key without stopping the pool
 * (sg_pool_set_signer): each worker's next issuer waits in an atomic slot
 * that only its own thread swaps in, between requests, so the hot path
 * gains one relaxed-cost exchange and no lock.
 */
#include "sg_pool.h"
#include "sg_clock.h"
#include "sg_guard.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH 8

typedef struct job {
	sg_issue_request req;
	sg_pool_done_fn done;
	void *arg;
	uint64_t queued_ns;
} job;

typedef struct worker {
	sg_pool *pool;
	pthread_t thread;
	bool started;
	sg_issuer *issuer;
	_Atomic(sg_issuer *) next; /* sg_pool_set_signer's issuer, taken before the next request */
	_Atomic uint64_t completed, issued, latency_ns;
	_Atomic uint64_t by_error[SG_POOL_ERRORS];
	char pad[64];
} worker;

struct sg_pool {
	pthread_mutex_t lock;
	pthread_cond_t nonempty;
	job *ring;
	unsigned cap, head, count;
	bool stopping;
	uint64_t submitted, rejected, rejected_deadline;
	unsigned nworkers;
	worker *workers;
	sg_issuer_options issuer_opts;
	char pad[64];
	_Atomic uint64_t service_ns; /* moving average of one certificate's signing time, 0: none yet */
};

/* Folds one certificate's signing time into the average (weight 1/16). */
static void note_service(sg_pool *p, uint64_t ns)
{
	uint64_t avg = atomic_load_explicit(&p->service_ns, memory_order_relaxed);
	avg = avg ? avg - avg / 16 + ns / 16 : ns;
	atomic_store_explicit(&p->service_ns, avg, memory_order_relaxed);
}

static void run_job(worker *w, job *j)
{
	sg_issue_result res = {0};
	sg_error err = {0};
	int rc;
	if (j->req.deadline_ns && sg_now_ns() >= j->req.deadline_ns)
		rc = sg_error_set(SG_ETIMEOUT, "deadline passed while queued for a signer");
	else if (j->req.cancelled && j->req.cancelled(j->req.cancel_arg))
		rc = sg_error_set(SG_ETIMEOUT, "the request was cancelled while queued for a signer");
	else {
		uint64_t t0 = sg_now_ns();
		rc = sg_issuer_issue(w->issuer, &j->req, &res);
		if (rc == SG_OK)
			note_service(w->pool, sg_now_ns() - t0);
	}
	if (rc < 0)
		sg_error_save(&err);
	else
		atomic_fetch_add_explicit(&w->latency_ns, sg_now_ns() - j->queued_ns, memory_order_relaxed);
	j->done(rc, &res, rc < 0 ? &err : NULL, j->arg);
	sg_issue_result_clear(&res);

	atomic_fetch_add_explicit(&w->completed, 1, memory_order_relaxed);
	if (rc == SG_OK)
		atomic_fetch_add_explicit(&w->issued, 1, memory_order_relaxed);
	else if (-rc < SG_POOL_ERRORS)
		atomic_fetch_add_explicit(&w->by_error[-rc], 1, memory_order_relaxed);
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	sg_pool *p = w->pool;
	job batch[BATCH];
	for (;;) {
		pthread_mutex_lock(&p->lock);
		while (p->count == 0 && !p->stopping)
			pthread_cond_wait(&p->nonempty, &p->lock);
		/* Take a fair share, not a fixed batch: when the queue runs low,
		 * one worker must not sit on requests another could be signing. */
		unsigned share = p->count / p->nworkers, n = 0;
		unsigned take = share < 1 ? 1 : share > BATCH ? BATCH : share;
		while (n < take && p->count > 0) {
			batch[n++] = p->ring[p->head];
			p->head = (p->head + 1) % p->cap;
			p->count--;
		}
		bool more = p->count > 0;
		bool done = n == 0 && p->stopping;
		pthread_mutex_unlock(&p->lock);
		if (done)
			return NULL;
		/* Leave the rest to an idle worker rather than serialising behind us. */
		if (more)
			pthread_cond_signal(&p->nonempty);
		sg_issuer *next = atomic_exchange(&w->next, NULL);
		if (next) {
			sg_issuer_free(w->issuer);
			w->issuer = next;
		}
		for (unsigned i = 0; i < n; i++)
			run_job(w, &batch[i]);
	}
}

static unsigned online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

int sg_pool_new(sg_pool **out, const sg_ca *ca, sg_hsm *hsm, const sg_pool_options *opts)
{
	sg_pool_options o = opts ? *opts : (sg_pool_options){0};
	if (!o.threads)
		o.threads = online_cpus();
	SG_ENSURE(o.threads <= SG_POOL_MAX_THREADS, SG_EINVAL, "signer threads must be 1..%d", SG_POOL_MAX_THREADS);
	if (!o.queue_capacity)
		o.queue_capacity = o.threads >= SG_POOL_DEFAULT_QUEUE_MAX / SG_POOL_QUEUE_PER_THREAD
		                           ? SG_POOL_DEFAULT_QUEUE_MAX
		                           : SG_POOL_QUEUE_PER_THREAD * o.threads;
	SG_ENSURE(o.queue_capacity <= SG_POOL_MAX_QUEUE, SG_EINVAL, "signer queue capacity must be 1..%u",
		  SG_POOL_MAX_QUEUE);

	sg_pool *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->nonempty, NULL);
	p->cap = o.queue_capacity;
	p->issuer_opts = o.issuer;
	p->ring = calloc(p->cap, sizeof(*p->ring));
	p->workers = calloc(o.threads, sizeof(*p->workers));
	int rc = SG_EINTERNAL;
	SG_ENSURE_GOTO(rc, p->ring && p->workers, fail, SG_EINTERNAL, "out of memory");
	/* Sessions first, one at a time (some modules cannot open them
	 * concurrently); threads only once every worker has its issuer. */
	for (unsigned i = 0; i < o.threads; i++) {
		p->workers[i].pool = p;
		SG_TRY_GOTO(rc, sg_issuer_new(&p->workers[i].issuer, ca, hsm, &o.issuer), fail);
		p->nworkers++;
	}
	for (unsigned i = 0; i < p->nworkers; i++) {
		int err = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
		SG_ENSURE_GOTO(rc, err == 0, fail, SG_EINTERNAL, "cannot start signer thread: error %d", err);
		p->workers[i].started = true;
	}
	*out = p;
	return SG_OK;
fail:
	sg_pool_free(p);
	return rc;
}

int sg_pool_submit(sg_pool *p, const sg_issue_request *req, sg_pool_done_fn done, void *arg)
{
	int rc;
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		rc = sg_error_set(SG_EBUSY, "signer pool is shutting down");
		goto unlock;
	}
	if (p->count == p->cap) {
		p->rejected++;
		rc = sg_error_set(SG_EBUSY, "signer queue is full (%u requests)", p->cap);
		goto unlock;
	}
	uint64_t now = sg_now_ns();
	uint64_t service = atomic_load_explicit(&p->service_ns, memory_order_relaxed);
	/* A request already past its deadline is queued as before: a worker
	 * answers it SG_ETIMEOUT at once, without the HSM. */
	if (service && req->deadline_ns > now) {
		uint64_t wait = ((uint64_t)p->count / p->nworkers + 1) * service;
		if (wait > req->deadline_ns - now) {
			p->rejected++;
			p->rejected_deadline++;
			rc = sg_error_set(SG_EBUSY,
			                  "signer queue holds about %" PRIu64 " ms of work (%u requests), more than the %" PRIu64
			                  " ms left before the request's deadline",
			                  wait / 1000000u, p->count, (req->deadline_ns - now) / 1000000u);
			goto unlock;
		}
	}
	p->ring[(p->head + p->count) % p->cap] = (job){*req, done, arg, now};
	p->count++;
	p->submitted++;
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&p->lock);
	if (rc == SG_OK)
		pthread_cond_signal(&p->nonempty);
	return rc;
}

typedef struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int rc;
	sg_error err;
	sg_issue_result *res;
} waiter;

static void wake(int rc, sg_issue_result *res, const sg_error *err, void *arg)
{
	waiter *w = arg;
	pthread_mutex_lock(&w->lock);
	w->rc = rc;
	if (rc == SG_OK) {
		*w->res = *res;
		res->leaf_pem = NULL; /* ownership moves to the waiter */
	} else {
		w->err = *err;
	}
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int sg_pool_issue(sg_pool *p, const sg_issue_request *req, sg_issue_result *res)
{
	waiter w = {.res = res};
	memset(res, 0, sizeof(*res));
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	int rc = sg_pool_submit(p, req, wake, &w);
	if (rc == SG_OK) {
		pthread_mutex_lock(&w.lock);
		while (!w.done)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
		rc = w.rc;
		if (rc < 0)
			sg_error_restore(&w.err);
	}
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return rc;
}

int sg_pool_set_signer(sg_pool *p, const sg_ca *ca, sg_hsm *hsm)
{
	SG_ENSURE(p && ca && hsm, SG_EINVAL, "sg_pool_set_signer: bad arguments");
	sg_issuer **fresh SG_AUTOFREE = calloc(p->nworkers, sizeof(*fresh));
	SG_ENSURE(fresh, SG_EINTERNAL, "out of memory");
	int rc = SG_OK;
	for (unsigned i = 0; rc == SG_OK && i < p->nworkers; i++)
		rc = sg_issuer_new(&fresh[i], ca, hsm, &p->issuer_opts);
	if (rc < 0) {
		for (unsigned i = 0; i < p->nworkers; i++)
			sg_issuer_free(fresh[i]);
		return rc;
	}
	/* A worker that has not yet taken an earlier one (idle since) gets
	 * the newest; the one it skipped is freed here. */
	for (unsigned i = 0; i < p->nworkers; i++)
		sg_issuer_free(atomic_exchange(&p->workers[i].next, fresh[i]));
	/* Idle workers take theirs with their next request; nothing to wake. */
	return SG_OK;
}

void sg_pool_stats_get(sg_pool *p, sg_pool_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&p->lock);
	out->queued = p->count;
	out->submitted = p->submitted;
	out->rejected = p->rejected;
	out->rejected_deadline = p->rejected_deadline;
	pthread_mutex_unlock(&p->lock);
	out->service_ns = atomic_load_explicit(&p->service_ns, memory_order_relaxed);
	out->threads = p->nworkers;
	out->queue_capacity = p->cap;
	for (unsigned i = 0; i < p->nworkers; i++) {
		worker *w = &p->workers[i];
		out->completed += atomic_load_explicit(&w->completed, memory_order_relaxed);
		out->issued += atomic_load_explicit(&w->issued, memory_order_relaxed);
		out->latency_ns_sum += atomic_load_explicit(&w->latency_ns, memory_order_relaxed);
		for (int e = 0; e < SG_POOL_ERRORS; e++)
			out->by_error[e] += atomic_load_explicit(&w->by_error[e], memory_order_relaxed);
	}
}

void sg_pool_free(sg_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->nonempty);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nworkers; i++) {
		if (p->workers[i].started)
			pthread_join(p->workers[i].thread, NULL);
		sg_issuer_free(p->workers[i].issuer);
		sg_issuer_free(atomic_exchange(&p->workers[i].next, NULL));
	}
	free(p->workers);
	free(p->ring);
	pthread_cond_destroy(&p->nonempty);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
