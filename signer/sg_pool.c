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
 * Sizing: how many signatures can be in flight is how many workers (each
 * with its HSM session) there are. One per CPU is right when the token
 * signs on the host's CPU (SoftHSM2): more threads only queue for the same
 * cores. It is wrong for a token that answers after a wait (a network HSM,
 * a p11-kit-forwarded partition: 1-20 ms in C_Sign, the thread asleep), where
 * a thread per CPU leaves the CPUs idle and the throughput at threads /
 * latency. By Little's law the signatures in flight needed to keep the CPUs
 * busy are rate x time-per-certificate; the rate the CPUs allow is
 * base / (service - wait) (a certificate's CPU time is its signing time
 * less the time its thread waited for the token), so
 *     target = HEADROOM x base x service / (service - wait)
 * where service is the moving average of one certificate's signing time and
 * wait the recent mean time a signature's thread slept in the module
 * (sg_hsm_load: wall time less time on a CPU or runnable, sampled).
 * HEADROOM (2) is slack over the mean: the law keeps the CPUs busy only if
 * every thread is back exactly when a CPU frees, and the latency and the
 * scheduler vary (on a busy two-CPU host, 1x kept a 2 ms token at 0.74 of
 * the undelayed rate, 2x at 0.86; perf/README.md). Extra threads cost a
 * stack and a session each, and growth is capped by demand anyway.
 * For a token that computes on our CPU, most calls do not sleep at all,
 * the wait counts as zero (below) and target is the base: no change from a
 * CPU-sized pool. A token that makes three calls in four sleep, however
 * briefly, gets at least HEADROOM x base. Not only a wait that is a large
 * part of the service: a token answering in 20-100 us was treated as a fast one
 * while its wait was under an eighth of the service (which counts the
 * time a woken thread queues for a CPU, large on a busy host), and a
 * CPU-sized pool whose threads each sleep once per certificate, with no
 * other signer to take the CPU meanwhile, signed up to a quarter fewer
 * certificates than one grown to 5-7 threads (perf/README.md section 13).
 * The target is bounded by
 * max_threads and by what the tokens allow (ulMaxSessionCount, through
 * sg_hsm_load.max_sessions; an open refused anyway stops growth for
 * GROW_BACKOFF_MS), and growth follows demand: workers are added only while
 * requests wait in the queue and every worker is busy, at most as many as
 * are waiting. A grown worker idle for idle_ms retires (closing its
 * session), so an idle replica holds no more sessions than the base, and
 * so does one finding the pool a quarter above the highest target of the
 * last idle_ms (the latency fell). The target is the median of the last
 * few ticks' estimates, and retirement compares with its recent highest,
 * not its latest: a pool that retired on every dip of a noisy estimate and
 * grew on every rise started and closed a thread and a session for one
 * certificate in eight on a 2 ms token. Only a wait three signatures in four share counts: contention inside the
 * module (a lock holder preempted on a busy host) makes a few calls wait
 * long, and more threads would only feed it (sg_hsm_load.asleep).
 *
 * Why grow the workers rather than keep a CPU pool that hands C_Sign to a
 * separate pool of session threads: a worker is already one session and
 * one thread; a hand-off per certificate would add two queue transfers on
 * the hot path of the fast token too (the case that must not regress),
 * while a grown worker costs a thread stack and an OpenSSL context only
 * while the token is slow. The CPU work of the extra workers is the same
 * work, so it needs no other bound than the CPUs themselves.
 *
 * A rotation moves signing to another key without stopping the pool
 * (sg_pool_set_signer): the pool's signer (CA, HSM handle) carries a
 * generation; each worker compares its issuer's generation with the
 * pool's (one acquire load per batch) and, when they differ, opens its own
 * new session between requests, so growth, retirement and a rotation never
 * need to agree on which slots are running.
 *
 * A manager thread makes the decisions: it sleeps while the pool is idle
 * (a submit wakes it), ticks every TICK_MS while there is work, reads the
 * load counters (no PKCS#11 call), opens sessions for new workers one at a
 * time outside the queue's lock, and joins workers that retired.
 */
#include "sg_pool.h"
#include "sg_clock.h"
#include "sg_guard.h"

#include "sg_log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define BATCH 8
#define TICK_MS 20           /* the manager's period while the pool has work */
#define HEADROOM 2u          /* x the Little's-law figure: slack for latency and scheduling jitter */
#define MIN_SAMPLE 16        /* measured signatures (sg_hsm_load.wait_samples) before a new wait estimate */
#define GROW_BACKOFF_MS 5000 /* no growth after an open failed */
#define RECENT 7             /* the target is the median of this many ticks' estimates */

enum { SLOT_EMPTY = 0, SLOT_RUNNING, SLOT_RETIRED };

typedef struct job {
	sg_issue_request req;
	sg_pool_done_fn done;
	void *arg;
	uint64_t queued_ns;
} job;

typedef struct worker {
	sg_pool *pool;
	pthread_t thread;
	int state;                 /* SLOT_*: under the pool's lock; EMPTY -> RUNNING by the manager */
	sg_issuer *issuer;         /* the manager's (or sg_pool_new's) while EMPTY, the worker's while RUNNING */
	uint64_t gen;              /* the signer generation issuer was made for */
	uint64_t refresh_after_ns; /* after a failed switch to a new signer: when to try again */
	bool refresh_warned;
	_Atomic uint64_t completed, issued, latency_ns;
	_Atomic uint64_t by_error[SG_POOL_ERRORS];
	char pad[64];
} worker;

struct sg_pool {
	pthread_mutex_t lock;
	pthread_cond_t nonempty; /* CLOCK_MONOTONIC: grown workers wait with a timeout */
	pthread_cond_t manager_cv;
	job *ring;
	unsigned cap, head, count;
	bool stopping;
	uint64_t submitted, rejected, rejected_deadline;
	unsigned nactive; /* workers RUNNING */
	unsigned busy;    /* of those, signing */
	unsigned base, max, target;
	unsigned shrink_to; /* the highest target of the last idle_ms: what retirement above the target compares with */
	bool manager_asleep; /* waiting for work without a timeout: a submit wakes it */
	uint64_t started, retired;
	unsigned unreaped; /* retired workers not yet joined */
	unsigned nslots;   /* max */
	worker *workers;
	const sg_ca *ca; /* the signer: under the lock, with gen */
	sg_hsm *hsm;
	_Atomic uint64_t gen; /* bumped by sg_pool_set_signer (written under the lock) */
	sg_issuer_options issuer_opts;
	unsigned idle_ms;
	pthread_t manager;
	bool manager_started;
	/* The manager's own (its thread only). */
	uint64_t last_samples, last_asleep, last_wait_ns;
	sg_hsm *load_hsm; /* the HSM handle last_* were read from */
	uint64_t grow_after_ns;
	unsigned recent[RECENT], nrecent, recent_pos; /* the last RECENT ticks' estimates */
	unsigned win_cur, win_prev; /* the highest target in this half of idle_ms and in the one before */
	uint64_t win_end_ns;
	bool warned;
	_Atomic uint64_t wait_ns; /* recent mean off-CPU wait per signature, for stats */
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

static void deadline_in(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* This worker leaves the pool (its thread returns after the call; the
 * manager joins it and closes its session). Lock held. */
static void retire_locked(sg_pool *p, worker *w)
{
	w->state = SLOT_RETIRED;
	p->nactive--;
	p->retired++;
	p->unreaped++;
	pthread_cond_signal(&p->manager_cv);
}

/* Waits for work; false when this worker should retire instead: more than
 * the base run and it was idle for idle_ms, or the pool is well above what
 * the sizing has asked for lately (shrink_to, and a quarter over it).
 * Lock held. */
static bool await_work(sg_pool *p, worker *w)
{
	if (!p->stopping && p->nactive > p->base && p->nactive > p->shrink_to + p->shrink_to / 4 + 1) {
		retire_locked(p, w);
		return false;
	}
	struct timespec until;
	bool timed = false;
	while (p->count == 0 && !p->stopping) {
		if (p->nactive <= p->base) {
			pthread_cond_wait(&p->nonempty, &p->lock);
			timed = false;
			continue;
		}
		if (!timed) {
			deadline_in(&until, p->idle_ms);
			timed = true;
		}
		if (pthread_cond_timedwait(&p->nonempty, &p->lock, &until) == ETIMEDOUT && p->count == 0 &&
		    !p->stopping && p->nactive > p->base) {
			retire_locked(p, w);
			return false;
		}
	}
	return true;
}

#define REFRESH_RETRY_MS 1000

/* Moves this worker to the pool's current signer (a rotation): its own
 * new session, opened between requests; the old one is closed. On failure
 * the worker keeps the old signer (still a valid key until the rotation's
 * finish) and tries again after REFRESH_RETRY_MS. Worker thread; the lock
 * not held. */
static void refresh_signer(worker *w)
{
	sg_pool *p = w->pool;
	uint64_t now = sg_now_ns();
	if (now < w->refresh_after_ns)
		return;
	pthread_mutex_lock(&p->lock);
	const sg_ca *ca = p->ca;
	sg_hsm *hsm = p->hsm;
	uint64_t gen = atomic_load_explicit(&p->gen, memory_order_relaxed);
	pthread_mutex_unlock(&p->lock);
	sg_issuer *fresh = NULL;
	if (sg_issuer_new(&fresh, ca, hsm, &p->issuer_opts) != SG_OK) {
		w->refresh_after_ns = now + REFRESH_RETRY_MS * 1000000ull;
		if (!w->refresh_warned)
			sg_log(SG_LOG_WARN,
			       "a signer thread cannot move to the new CA key yet; it signs with the previous one",
			       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		w->refresh_warned = true;
		return;
	}
	sg_issuer_free(w->issuer);
	w->issuer = fresh;
	w->gen = gen;
	w->refresh_warned = false;
}

static void *worker_main(void *arg)
{
	prctl(PR_SET_NAME, "sg-signer"); /* top -H, perf and /proc tell the pool's threads apart */
	worker *w = arg;
	sg_pool *p = w->pool;
	job batch[BATCH];
	bool had = false;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		if (had)
			p->busy--;
		had = false;
		if (!await_work(p, w)) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		/* Take a fair share, not a fixed batch: when the queue runs low,
		 * one worker must not sit on requests another could be signing. */
		unsigned share = p->count / p->nactive, n = 0;
		unsigned take = share < 1 ? 1 : share > BATCH ? BATCH : share;
		while (n < take && p->count > 0) {
			batch[n++] = p->ring[p->head];
			p->head = (p->head + 1) % p->cap;
			p->count--;
		}
		bool more = p->count > 0;
		bool done = n == 0 && p->stopping;
		if (n > 0) {
			p->busy++;
			had = true;
		}
		pthread_mutex_unlock(&p->lock);
		if (done)
			return NULL;
		/* Leave the rest to an idle worker rather than serialising behind us. */
		if (more)
			pthread_cond_signal(&p->nonempty);
		if (w->gen != atomic_load_explicit(&p->gen, memory_order_acquire))
			refresh_signer(w);
		for (unsigned i = 0; i < n; i++)
			run_job(w, &batch[i]);
	}
}

static unsigned online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

/* Sizing ("Sizing" above): the workers the measured latency asks for,
 * within base .. max. Manager thread; no lock held. */
static unsigned size_target(sg_pool *p)
{
	pthread_mutex_lock(&p->lock);
	sg_hsm *hsm = p->hsm;
	pthread_mutex_unlock(&p->lock);
	sg_hsm_load l;
	sg_hsm_load_get(hsm, &l);
	if (hsm != p->load_hsm) {
		/* A rotation's new handle counts from zero: start over from it. */
		p->load_hsm = hsm;
		p->last_samples = l.wait_samples;
		p->last_asleep = l.asleep;
		p->last_wait_ns = l.wait_ns;
	}
	uint64_t wait = atomic_load_explicit(&p->wait_ns, memory_order_relaxed);
	uint64_t n = l.wait_samples - p->last_samples;
	if (n >= MIN_SAMPLE) {
		/* A wait counts only when three calls in four were asleep: a
		 * slow token makes every call wait (0.1 ms: 9 in 10 on a busy
		 * host), while contention inside the module (a lock holder
		 * preempted on a busy host) makes a few wait, and more threads
		 * would only add to it. Under ASan a fast token's calls slept
		 * 20 us or more one time in five: of four samples, two did now
		 * and then, and the pool grew; twelve of sixteen happen by
		 * chance about three times in a million windows. */
		wait = 4 * (l.asleep - p->last_asleep) >= 3 * n ? (l.wait_ns - p->last_wait_ns) / n : 0;
		atomic_store_explicit(&p->wait_ns, wait, memory_order_relaxed);
		p->last_samples = l.wait_samples;
		p->last_asleep = l.asleep;
		p->last_wait_ns = l.wait_ns;
	}
	uint64_t service = atomic_load_explicit(&p->service_ns, memory_order_relaxed);
	if (!service || wait == 0)
		return p->base;
	/* service - wait is the CPU time per certificate; a floor of 1/64 of
	 * the service keeps the ratio finite (max bounds it anyway). */
	uint64_t cpu = service > wait ? service - wait : 0;
	if (cpu < service / 64)
		cpu = service / 64 + 1;
	uint64_t t = (HEADROOM * p->base * service + cpu - 1) / cpu;
	return t > p->max ? p->max : t < p->base ? p->base : (unsigned)t;
}

/* The median of the last RECENT ticks' estimates (fewer while a busy
 * period starts). One tick's estimate divides by service - wait, the
 * difference of two noisy means that are nearly equal on a slow token: on
 * a 2 ms token it read 10, 20, 12, 256 (the floor: a wait sample above the
 * service average), 10 in five ticks. A median ignores the outliers that
 * would grow the pool to four times what it needs and still follows a real
 * change within RECENT / 2 ticks. Manager thread. */
static unsigned median_target(sg_pool *p, unsigned t)
{
	p->recent[p->recent_pos] = t;
	p->recent_pos = (p->recent_pos + 1) % RECENT;
	if (p->nrecent < RECENT)
		p->nrecent++;
	unsigned v[RECENT];
	memcpy(v, p->recent, sizeof(v));
	/* Insertion sort of at most RECENT values; until the window is full
	 * the filled slots are the first nrecent. */
	unsigned n = p->nrecent;
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
			unsigned x = v[j];
			v[j] = v[j - 1];
			v[j - 1] = x;
		}
	return v[n / 2];
}

/* Keeps shrink_to at the highest target of the last half to whole idle_ms
 * (two half windows). The target is a live estimate that moves with every
 * few samples; retiring workers whenever it dipped and growing them back
 * when it rose cost a thread and a session per swing (hundreds a second
 * on a 2 ms token, a third more CPU per certificate: perf/README.md, 13).
 * Growth still follows the live target at once. Manager thread, lock held. */
static void note_target(sg_pool *p, unsigned target)
{
	uint64_t now = sg_now_ns();
	if (now >= p->win_end_ns) {
		p->win_prev = p->win_cur;
		p->win_cur = target;
		p->win_end_ns = now + (uint64_t)p->idle_ms * 1000000ull / 2;
	} else if (target > p->win_cur) {
		p->win_cur = target;
	}
	p->shrink_to = p->win_cur > p->win_prev ? p->win_cur : p->win_prev;
}

/* Opens a session for an empty slot and starts its worker. Manager thread
 * (or sg_pool_new before it starts); the lock not held. */
static int start_worker(sg_pool *p)
{
	pthread_mutex_lock(&p->lock);
	worker *w = NULL;
	for (unsigned i = 0; i < p->nslots && !w; i++)
		if (p->workers[i].state == SLOT_EMPTY)
			w = &p->workers[i];
	pthread_mutex_unlock(&p->lock);
	SG_ENSURE(w, SG_EBUSY, "every signer slot is in use");
	w->pool = p;
	pthread_mutex_lock(&p->lock);
	const sg_ca *ca = p->ca;
	sg_hsm *hsm = p->hsm;
	uint64_t gen = atomic_load_explicit(&p->gen, memory_order_relaxed);
	pthread_mutex_unlock(&p->lock);
	/* A rotation between here and the worker's first request is caught
	 * there: its generation is this one. */
	SG_TRY(sg_issuer_new(&w->issuer, ca, hsm, &p->issuer_opts));
	w->gen = gen;
	w->refresh_after_ns = 0;
	w->refresh_warned = false;
	pthread_mutex_lock(&p->lock);
	w->state = SLOT_RUNNING;
	p->nactive++;
	pthread_mutex_unlock(&p->lock);
	int err = pthread_create(&w->thread, NULL, worker_main, w);
	if (err != 0) {
		pthread_mutex_lock(&p->lock);
		w->state = SLOT_EMPTY;
		p->nactive--;
		pthread_mutex_unlock(&p->lock);
		sg_issuer_free(w->issuer);
		w->issuer = NULL;
		SG_BAIL(SG_EINTERNAL, "cannot start signer thread: error %d", err);
	}
	return SG_OK;
}

/* Joins the workers that retired and closes their sessions. Manager
 * thread; the lock not held. */
static void reap(sg_pool *p)
{
	for (unsigned i = 0; i < p->nslots; i++) {
		worker *w = &p->workers[i];
		pthread_mutex_lock(&p->lock);
		bool retired = w->state == SLOT_RETIRED;
		pthread_mutex_unlock(&p->lock);
		if (!retired)
			continue;
		pthread_join(w->thread, NULL);
		sg_issuer_free(w->issuer);
		w->issuer = NULL;
		pthread_mutex_lock(&p->lock);
		w->state = SLOT_EMPTY;
		p->unreaped--;
		pthread_mutex_unlock(&p->lock);
	}
}

/* Adds up to n workers, one session at a time; stops growing for
 * GROW_BACKOFF_MS when a session cannot be opened (the token's own limit,
 * lower than it says, or a fault). */
static void grow(sg_pool *p, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (start_worker(p) == SG_OK) {
			pthread_mutex_lock(&p->lock);
			p->started++;
			bool stop = p->stopping;
			pthread_mutex_unlock(&p->lock);
			if (stop)
				return;
			continue;
		}
		p->grow_after_ns = sg_now_ns() + GROW_BACKOFF_MS * 1000000ull;
		if (!p->warned) {
			p->warned = true;
			pthread_mutex_lock(&p->lock);
			unsigned running = p->nactive;
			pthread_mutex_unlock(&p->lock);
			sg_log(SG_LOG_WARN, "cannot open another HSM session for a signer thread; growth paused",
			       SG_F_STR("error", sg_error_last()->msg), SG_F_INT("threads", running), SG_F_END);
		}
		return;
	}
}

static void *manager_main(void *arg)
{
	prctl(PR_SET_NAME, "sg-pool-mgr");
	sg_pool *p = arg;
	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		if (p->count == 0 && p->busy == 0 && p->nactive <= p->base && p->unreaped == 0) {
			/* Idle, nothing to reap: sleep until a submit. */
			p->manager_asleep = true;
			pthread_cond_wait(&p->manager_cv, &p->lock);
			p->manager_asleep = false;
			continue;
		}
		/* Most ticks have nothing to join: a scan of every slot took
		 * and released the lock the workers share once per slot (256
		 * by default), fifty times a second. */
		bool to_reap = p->unreaped > 0;
		pthread_mutex_unlock(&p->lock);
		if (to_reap)
			reap(p);
		unsigned target = median_target(p, size_target(p));
		pthread_mutex_lock(&p->lock);
		p->target = target;
		note_target(p, target);
		unsigned want = 0;
		if (p->count > 0 && p->busy == p->nactive && p->nactive < target && sg_now_ns() >= p->grow_after_ns) {
			want = target - p->nactive;
			if (want > p->count)
				want = p->count;
		}
		if (want) {
			pthread_mutex_unlock(&p->lock);
			grow(p, want);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		struct timespec until;
		deadline_in(&until, TICK_MS);
		pthread_cond_timedwait(&p->manager_cv, &p->lock, &until);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int sg_pool_new(sg_pool **out, const sg_ca *ca, sg_hsm *hsm, const sg_pool_options *opts)
{
	sg_pool_options o = opts ? *opts : (sg_pool_options){0};
	if (!o.threads)
		o.threads = online_cpus();
	SG_ENSURE(o.threads <= SG_POOL_MAX_THREADS, SG_EINVAL, "signer threads must be 1..%d", SG_POOL_MAX_THREADS);
	SG_ENSURE(o.max_threads <= SG_POOL_MAX_THREADS, SG_EINVAL, "HSM sessions must be 1..%d", SG_POOL_MAX_THREADS);
	if (!o.max_threads)
		o.max_threads = SG_POOL_MAX_THREADS;
	sg_hsm_load load;
	sg_hsm_load_get(hsm, &load);
	if (load.max_sessions && load.max_sessions < o.max_threads)
		o.max_threads = load.max_sessions;
	if (o.threads > o.max_threads) {
		sg_log(SG_LOG_INFO, "signer threads lowered to the HSM session limit", SG_F_INT("threads", o.threads),
		       SG_F_INT("sessions", o.max_threads), SG_F_END);
		o.threads = o.max_threads;
	}
	if (!o.queue_capacity)
		o.queue_capacity = o.threads >= SG_POOL_DEFAULT_QUEUE_MAX / SG_POOL_QUEUE_PER_THREAD
		                           ? SG_POOL_DEFAULT_QUEUE_MAX
		                           : SG_POOL_QUEUE_PER_THREAD * o.threads;
	SG_ENSURE(o.queue_capacity <= SG_POOL_MAX_QUEUE, SG_EINVAL, "signer queue capacity must be 1..%u",
		  SG_POOL_MAX_QUEUE);

	sg_pool *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_t ca_attr;
	pthread_condattr_init(&ca_attr);
	pthread_condattr_setclock(&ca_attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->nonempty, &ca_attr);
	pthread_cond_init(&p->manager_cv, &ca_attr);
	pthread_condattr_destroy(&ca_attr);
	p->cap = o.queue_capacity;
	p->base = o.threads;
	p->max = o.max_threads;
	p->target = o.threads;
	p->shrink_to = o.threads;
	p->idle_ms = o.idle_ms ? o.idle_ms : SG_POOL_IDLE_MS;
	p->ca = ca;
	p->hsm = hsm;
	p->load_hsm = hsm;
	p->issuer_opts = o.issuer;
	p->nslots = o.max_threads;
	p->ring = calloc(p->cap, sizeof(*p->ring));
	p->workers = calloc(p->nslots, sizeof(*p->workers));
	int rc = SG_EINTERNAL;
	SG_ENSURE_GOTO(rc, p->ring && p->workers, fail, SG_EINTERNAL, "out of memory");
	for (unsigned i = 0; i < p->nslots; i++)
		p->workers[i].pool = p;
	/* Sessions one at a time (some modules cannot open them
	 * concurrently; start_worker opens before it starts the thread). */
	for (unsigned i = 0; i < o.threads; i++)
		SG_TRY_GOTO(rc, start_worker(p), fail);
	int err = pthread_create(&p->manager, NULL, manager_main, p);
	SG_ENSURE_GOTO(rc, err == 0, fail, SG_EINTERNAL, "cannot start the signer pool's manager: error %d", err);
	p->manager_started = true;
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
		uint64_t wait = ((uint64_t)p->count / p->nactive + 1) * service;
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
	if (p->manager_asleep)
		pthread_cond_signal(&p->manager_cv);
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
	/* One issuer first, here: a pair that cannot sign changes nothing. */
	sg_issuer *probe = NULL;
	SG_TRY(sg_issuer_new(&probe, ca, hsm, &p->issuer_opts));
	sg_issuer_free(probe);
	pthread_mutex_lock(&p->lock);
	p->ca = ca;
	p->hsm = hsm;
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_mutex_unlock(&p->lock);
	/* Idle workers move with their next request; nothing to wake. */
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
	out->threads = p->nactive;
	out->threads_base = p->base;
	out->threads_max = p->max;
	out->threads_target = p->target;
	out->threads_started = p->started;
	out->threads_retired = p->retired;
	out->busy = p->busy;
	pthread_mutex_unlock(&p->lock);
	out->service_ns = atomic_load_explicit(&p->service_ns, memory_order_relaxed);
	out->hsm_wait_ns = atomic_load_explicit(&p->wait_ns, memory_order_relaxed);
	out->queue_capacity = p->cap;
	/* Every slot: a retired worker's counts stay in its slot. */
	for (unsigned i = 0; i < p->nslots; i++) {
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
	pthread_cond_signal(&p->manager_cv);
	pthread_mutex_unlock(&p->lock);
	/* The manager first: then no worker starts any more, and every slot
	 * is EMPTY, RUNNING (draining the queue) or RETIRED. */
	if (p->manager_started)
		pthread_join(p->manager, NULL);
	for (unsigned i = 0; p->workers && i < p->nslots; i++) {
		if (p->workers[i].state != SLOT_EMPTY)
			pthread_join(p->workers[i].thread, NULL);
		sg_issuer_free(p->workers[i].issuer);
	}
	free(p->workers);
	free(p->ring);
	pthread_cond_destroy(&p->manager_cv);
	pthread_cond_destroy(&p->nonempty);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
