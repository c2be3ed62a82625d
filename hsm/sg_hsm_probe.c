/*
 * sg_hsm_probe: health probes for idle tokens (sg_hsm_probe_start).
 *
 * Without them signet learns of an outage only from the signatures it is
 * asked for, so a replica that receives no request stays ready while its
 * token is gone. With them, each token of an sg_hsm has a worker thread
 * that, every interval, makes a cheap call on a session of its own
 * (C_GetSessionInfo: the session lives and is logged in; C_GetTokenInfo:
 * the device answers), and while the token has been failing a test
 * signature through sg_hsm_sign, whose recovery (reopen, login, re-init
 * when due) is then what brings the token back without traffic.
 *
 * Why threads of sg_hsm's own, and not signetd's once-a-second health loop:
 * a PKCS#11 call cannot be cancelled or given a timeout (before 3.0 there
 * is no way at all), so whatever thread makes the call may stay inside the
 * module for good. The call must therefore be off the thread that decides
 * readiness, answers SIGTERM and pings the watchdog. One worker per token,
 * so that one silent token does not hold up the probes of the others; and
 * one watcher per sg_hsm that never calls the module: it wakes at the
 * timeout of each probe under way and, when the probe is still inside,
 * counts and logs it once as stuck and tells on_probe. Readiness does not
 * wait for the watcher: sg_hsm_stats_get reads the time a probe started
 * (step_ns) and counts a probe past its timeout as down by itself, so the
 * bound is interval + timeout however the threads are scheduled.
 *
 * A token that signs for callers is not down, whatever its probe says. A
 * module that serialises its calls (tpm2-pkcs11 behind its resource
 * manager) queues the probe behind every signature asked of it: under load
 * the probe comes late, the next one (a test signature) queues again, and
 * a replica that serves every request was counted unready, and after
 * hsm-down-limit not alive. So the probe's verdict counts only while no
 * signature for a caller has succeeded within interval + timeout
 * (token.signed_ns). A token that goes silent signs nothing more, so the
 * bound stays interval + timeout; an idle one has only its probe to go by.
 * A probe due on a token that signed for callers since the last one
 * is not made at all (it has answered, and the probe would only wait
 * behind it), unless the token is troubled: then the test signature is
 * what recovers it. The next one is then due an interval after that
 * signature, which keeps the bound for a token that goes silent just
 * after signing.
 *
 * step_ns is the start of the probe under way (CLOCK_MONOTONIC, made
 * even), 0 between probes; bit 0 says the watcher reported it stuck. The
 * watcher sets the bit with a compare-and-swap and the worker clears the
 * word with an exchange when it returns, so a stuck probe is reported once
 * and its return is seen by exactly one side, without a lock between them.
 *
 * Stopping (sg_hsm_free): the threads are asked to stop and waited for at
 * most until each probe under way reaches its timeout; one already stuck
 * is not waited for at all. A worker still inside the module then is left
 * behind (detached, counted in sg_hsm_threads_left, logged), and so is the
 * whole sg_hsm: the worker may return into its session, its token and the
 * module at any time, so nothing of them is freed, no session closed and
 * C_Finalize not called. PKCS#11 v2.40 §5.4 leaves C_Finalize undefined
 * while another thread is inside a call, and a module wedged inside one
 * (a lost connection, a held lock) would most likely block in C_Finalize
 * and C_CloseSession too, turning a stuck probe into a stop that never
 * ends. What is left is reclaimed by the process's end, which should then
 * be _exit (sg_hsm_threads_left): the module's destructors must not run
 * under the stuck call either. Signer sessions freed while a probe is
 * stuck are forgotten rather than closed, for the same reason.
 *
 * Stopping before the free (sg_hsm_probe_stop, a handle a CA rotation
 * retired): the same wait, but ps itself stays in place until sg_hsm_free
 * (halted), because another thread may be reading the handle's health
 * through it at that moment (hsm_probe_token_down); only the threads end.
 * sg_hsm_free then finds them halted and does not wait or join again.
 *
 * on_probe is called under the probes' mutex, so calls never overlap and
 * none comes after a stop has given up on a worker (abandoned) or ended.
 */
#include "sg_hsm.h"

#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_hsm_impl.h"
#include "sg_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STUCK_BIT 1ull

typedef struct probe {
	sg_hsm *h;
	size_t tok;
	sg_hsm_session *s; /* the probe's own session; its worker's alone */
	pthread_t thread;
	bool started, exited;       /* under the probes' mutex */
	bool left_behind;           /* sg_hsm_free's own: still running when it gave up */
	_Atomic uint64_t step_ns;   /* start of the probe under way | STUCK_BIT; 0: none */
	_Atomic(const char *) step; /* what it is doing, for the stuck record */
	atomic_bool down;           /* the last probe failed or came late */
	uint64_t last_ns;           /* the worker's own: end of its last probe, or the signature it skipped for */
} probe;

struct hsm_probes {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; stop, a probe started or ended */
	bool stop;         /* under mu */
	bool abandoned;    /* under mu: a stop left a worker inside the module */
	bool halted;       /* under mu: the threads were stopped (joined or left) once */
	uint64_t interval_ns, timeout_ns;
	sg_hsm_probe_fn fn;
	void *arg;
	pthread_t watcher;
	bool watcher_started, watcher_exited; /* under mu */
	size_t n;
	probe p[]; /* one per token */
};

static atomic_uint threads_left;

unsigned sg_hsm_threads_left(void)
{
	return atomic_load(&threads_left);
}

static void wait_until(hsm_probes *ps, uint64_t until_ns)
{
	struct timespec ts = {(time_t)(until_ns / 1000000000u), (long)(until_ns % 1000000000u)};
	pthread_cond_timedwait(&ps->cv, &ps->mu, &ts);
}

/* Whether a probe that started at v (step_ns) is past its timeout now. */
static bool past_timeout(const hsm_probes *ps, uint64_t v, uint64_t now_ns)
{
	uint64_t start = v & ~STUCK_BIT;
	return v && now_ns > start && now_ns - start > ps->timeout_ns;
}

/* Whether t signed for a caller within interval + timeout of now: then
 * its signatures outweigh its probe. */
static bool signs_for_callers(const hsm_probes *ps, const token *t, uint64_t now_ns)
{
	uint64_t at = hsm_token_signed_at(t), window = ps->interval_ns + ps->timeout_ns;
	return at && (now_ns <= window || at >= now_ns - window);
}

bool hsm_probe_token_down(const sg_hsm *h, size_t i, uint64_t now_ns)
{
	hsm_probes *ps = atomic_load(&((sg_hsm *)h)->probes);
	if (!ps || i >= ps->n || !ps->p[i].s)
		return false;
	probe *p = &ps->p[i];
	if (!atomic_load(&p->down) && !past_timeout(ps, atomic_load(&p->step_ns), now_ns))
		return false;
	return !signs_for_callers(ps, &h->tokens[i], now_ns);
}

bool hsm_probe_wedged(const sg_hsm *h, uint64_t now_ns)
{
	hsm_probes *ps = atomic_load(&((sg_hsm *)h)->probes);
	for (size_t i = 0; ps && i < ps->n; i++)
		if (past_timeout(ps, atomic_load(&ps->p[i].step_ns), now_ns))
			return true;
	return false;
}

/* ---- the worker ---------------------------------------------------------- */

static const char *result_name(sg_hsm_probe_result r)
{
	static const char *const names[] = {"ok", "failed", "late", "stuck"};
	return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "?";
}

/* One probe of p's token: false when none was needed (it signed for
 * callers since the last one; last_ns is then that signature's end), else
 * true with its result and duration. Logs the token's changes between up
 * and down, once each. */
static bool probe_once(probe *p, sg_hsm_probe_result *result, double *seconds)
{
	sg_hsm *h = p->h;
	hsm_probes *ps = atomic_load(&h->probes);
	token *t = &h->tokens[p->tok];
	/* A token that signed for callers since the last probe has answered
	 * already, and a module that serialises its calls would only queue
	 * the probe behind them. Not when it is troubled: the test
	 * signature is what recovers it. A re-init that is due waits for a
	 * probe that is made (a troubled token's, or this one's once idle):
	 * it is timed as the probe's first step. */
	bool troubled = hsm_token_troubled(t);
	uint64_t signed_at = hsm_token_signed_at(t);
	if (!troubled && signed_at > p->last_ns) {
		p->last_ns = signed_at;
		if (atomic_exchange(&p->down, false))
			sg_log(SG_LOG_WARN, "PKCS#11 token signs for callers again; counted as up",
			       SG_F_STR("token", t->label), SG_F_STR("serial", t->serial_text), SG_F_END);
		return false;
	}
	uint64_t start = sg_now_ns() & ~STUCK_BIT;
	if (!start)
		start = 2;
	atomic_store(&p->step, "module re-init");
	atomic_store(&p->step_ns, start);
	pthread_mutex_lock(&ps->mu);
	pthread_cond_broadcast(&ps->cv); /* the watcher's next deadline */
	pthread_mutex_unlock(&ps->mu);

	/* A re-init whose backoff is over: what readiness polling made
	 * before probes ran. Then the cheap call, or a test signature when
	 * the token has been failing or the cheap call failed (a lost
	 * session is reopened by it, as for a signature). */
	hsm_module_reinit_if_due(h->mod);
	const char *fn = "test signature";
	int rc = SG_EBUSY;
	bool test = troubled || atomic_load(&p->down);
	if (!test) {
		atomic_store(&p->step, "C_GetSessionInfo, C_GetTokenInfo");
		rc = hsm_session_check(p->s, &fn);
	}
	if (test || rc < 0) {
		atomic_store(&p->step, "test signature");
		rc = hsm_session_test_sign(p->s, start + ps->timeout_ns);
	}
	uint64_t end = sg_now_ns();
	uint64_t was = atomic_exchange(&p->step_ns, 0);
	p->last_ns = end;
	*seconds = (double)(end - start) / 1e9;
	sg_hsm_probe_result r = rc < 0                         ? SG_HSM_PROBE_FAILED
	                        : end - start > ps->timeout_ns ? SG_HSM_PROBE_LATE
	                                                       : SG_HSM_PROBE_OK;
	if (was & STUCK_BIT)
		sg_log(SG_LOG_WARN, "PKCS#11 health probe returned from the module", SG_F_STR("token", t->label),
		       SG_F_STR("result", result_name(r)), SG_F_INT("ms", (int64_t)((end - start) / 1000000u)),
		       SG_F_END);
	bool down = r != SG_HSM_PROBE_OK;
	bool before = atomic_exchange(&p->down, down);
	if (down && !before)
		sg_log(
		    SG_LOG_WARN,
		    signs_for_callers(ps, t, end)
		        ? "PKCS#11 token failed its health probe but signs for callers; counted as down once they stop"
		        : "PKCS#11 token failed its health probe; counted as down",
		    SG_F_STR("token", t->label), SG_F_STR("serial", t->serial_text), SG_F_STR("result", result_name(r)),
		    SG_F_STR("error",
		             r == SG_HSM_PROBE_FAILED ? sg_error_last()->msg : "answered after hsm-probe-timeout"),
		    SG_F_INT("ms", (int64_t)((end - start) / 1000000u)), SG_F_END);
	else if (!down && before)
		sg_log(SG_LOG_WARN, "PKCS#11 token answers its health probe again", SG_F_STR("token", t->label),
		       SG_F_STR("serial", t->serial_text), SG_F_INT("ms", (int64_t)((end - start) / 1000000u)),
		       SG_F_END);
	*result = r;
	return true;
}

static void *probe_main(void *arg)
{
	probe *p = arg;
	hsm_probes *ps = atomic_load(&p->h->probes);
	pthread_mutex_lock(&ps->mu);
	p->last_ns = sg_now_ns();
	uint64_t due = p->last_ns + ps->interval_ns;
	bool quick = false; /* this probe is the at-once one after a late answer */
	while (!ps->stop) {
		if (sg_now_ns() < due) {
			wait_until(ps, due);
			continue;
		}
		pthread_mutex_unlock(&ps->mu);
		double seconds = 0;
		sg_hsm_probe_result r = SG_HSM_PROBE_OK;
		bool made = probe_once(p, &r, &seconds);
		pthread_mutex_lock(&ps->mu);
		if (ps->abandoned) /* sg_hsm_free gave up on this thread: touch nothing */
			break;
		if (made && ps->fn)
			ps->fn(p->tok, r, seconds, ps->arg);
		/* After a late answer (a stuck call that returned) the token is
		 * judged again at once: it answers, and a fresh probe tells
		 * whether it does in time. Only once in a row, so that a token
		 * that is merely slow is still probed once an interval. */
		bool again = made && r == SG_HSM_PROBE_LATE && !quick;
		quick = again;
		/* Not made: due an interval after the signature it skipped for,
		 * not after now, so that a token that goes silent right after
		 * one is probed within the interval all the same. */
		due = made ? sg_now_ns() + (again ? 0 : ps->interval_ns) : p->last_ns + ps->interval_ns;
	}
	p->exited = true;
	pthread_cond_broadcast(&ps->cv);
	pthread_mutex_unlock(&ps->mu);
	return NULL;
}

/* ---- the watcher ---------------------------------------------------------- */

/* Reports each probe that passed its timeout inside the module, once; mu
 * held. Returns when the next one under way will pass it (0: none). */
static uint64_t watch_once(hsm_probes *ps, uint64_t now_ns)
{
	uint64_t next = 0;
	for (size_t i = 0; i < ps->n; i++) {
		probe *p = &ps->p[i];
		uint64_t v = atomic_load(&p->step_ns);
		if (!v || (v & STUCK_BIT))
			continue;
		if (!past_timeout(ps, v, now_ns)) {
			uint64_t at = v + ps->timeout_ns + 1;
			next = !next || at < next ? at : next;
			continue;
		}
		if (!atomic_compare_exchange_strong(&p->step_ns, &v, v | STUCK_BIT))
			continue; /* it returned meanwhile */
		token *t = &p->h->tokens[p->tok];
		const char *step = atomic_load(&p->step);
		bool signs = signs_for_callers(ps, t, now_ns);
		sg_log(signs ? SG_LOG_WARN : SG_LOG_ERROR,
		       signs ? "PKCS#11 health probe stuck in the module past hsm-probe-timeout; the token signs for "
		               "callers meanwhile"
		             : "PKCS#11 health probe stuck in the module past hsm-probe-timeout; token counted as down",
		       SG_F_STR("token", t->label), SG_F_STR("serial", t->serial_text),
		       SG_F_STR("call", step ? step : "?"), SG_F_INT("ms", (int64_t)((now_ns - v) / 1000000u)),
		       SG_F_END);
		if (ps->fn)
			ps->fn(p->tok, SG_HSM_PROBE_STUCK, (double)(now_ns - v) / 1e9, ps->arg);
	}
	return next;
}

static void *watch_main(void *arg)
{
	hsm_probes *ps = arg;
	pthread_mutex_lock(&ps->mu);
	while (!ps->stop) {
		uint64_t next = watch_once(ps, sg_now_ns());
		if (ps->stop)
			break;
		if (next)
			wait_until(ps, next);
		else
			pthread_cond_wait(&ps->cv, &ps->mu);
	}
	ps->watcher_exited = true;
	pthread_cond_broadcast(&ps->cv);
	pthread_mutex_unlock(&ps->mu);
	return NULL;
}

/* ---- start and stop ------------------------------------------------------- */

/* Frees ps and its probes' sessions; every thread joined. */
static void probes_free(hsm_probes *ps)
{
	for (size_t i = 0; i < ps->n; i++)
		hsm_session_release(ps->p[i].s, false);
	pthread_cond_destroy(&ps->cv);
	pthread_mutex_destroy(&ps->mu);
	free(ps);
}

/* The latest moment the stop waits for: each running worker's probe
 * timeout (from its start, or from the stop when between probes). */
static uint64_t stop_limit(const hsm_probes *ps, uint64_t stop_ns)
{
	uint64_t limit = stop_ns;
	for (size_t i = 0; i < ps->n; i++) {
		const probe *p = &ps->p[i];
		if (!p->started || p->exited)
			continue;
		uint64_t v = atomic_load(&p->step_ns) & ~STUCK_BIT;
		uint64_t at = (v ? v : stop_ns) + ps->timeout_ns;
		limit = at > limit ? at : limit;
	}
	return limit;
}

/* Ends ps's threads, once: later calls only repeat the first one's
 * answer (a thread is joined or detached exactly once). True when every
 * thread has ended. */
static bool probes_halt(sg_hsm *h, hsm_probes *ps)
{
	pthread_mutex_lock(&ps->mu);
	if (ps->halted) {
		bool ended = !ps->abandoned;
		pthread_mutex_unlock(&ps->mu);
		return ended;
	}
	ps->halted = true;
	ps->stop = true;
	pthread_cond_broadcast(&ps->cv);
	uint64_t limit = stop_limit(ps, sg_now_ns());
	size_t left;
	for (;;) {
		left = 0;
		for (size_t i = 0; i < ps->n; i++)
			left += ps->p[i].started && !ps->p[i].exited;
		bool watcher = ps->watcher_started && !ps->watcher_exited;
		if ((!left && !watcher) || (!watcher && sg_now_ns() >= limit))
			break;
		wait_until(ps, watcher ? sg_now_ns() + 100000000u : limit);
	}
	ps->abandoned = left > 0;
	for (size_t i = 0; i < ps->n; i++)
		ps->p[i].left_behind = ps->p[i].started && !ps->p[i].exited;
	pthread_mutex_unlock(&ps->mu);
	if (ps->watcher_started)
		pthread_join(ps->watcher, NULL);
	for (size_t i = 0; i < ps->n; i++) {
		probe *p = &ps->p[i];
		if (!p->started)
			continue;
		if (!p->left_behind) {
			pthread_join(p->thread, NULL);
			continue;
		}
		pthread_detach(p->thread);
		token *t = &h->tokens[p->tok];
		const char *step = atomic_load(&p->step);
		sg_log(
		    SG_LOG_ERROR,
		    "PKCS#11 health probe still inside the module at shutdown; leaving it, and the module unfinalized",
		    SG_F_STR("token", t->label), SG_F_STR("serial", t->serial_text),
		    SG_F_STR("call", step ? step : "?"), SG_F_END);
		atomic_fetch_add(&threads_left, 1);
	}
	return !left;
}

bool hsm_probe_stop(sg_hsm *h)
{
	hsm_probes *ps = atomic_load(&h->probes);
	if (!ps)
		return true;
	if (!probes_halt(h, ps))
		return false;
	atomic_store(&h->probes, NULL);
	probes_free(ps);
	return true;
}

bool sg_hsm_probe_stop(sg_hsm *h)
{
	hsm_probes *ps = h ? atomic_load(&h->probes) : NULL;
	return !ps || probes_halt(h, ps);
}

int sg_hsm_probe_start(sg_hsm *h, const sg_hsm_probe_options *o)
{
	SG_ENSURE(h && o && o->interval_ms > 0 && o->timeout_ms > 0, SG_EINVAL,
	          "sg_hsm_probe_start: an interval and a timeout are needed");
	SG_ENSURE(!atomic_load(&h->probes), SG_EINVAL, "sg_hsm_probe_start: probes already started");
	SG_ENSURE(h->have_key, SG_EINVAL, "sg_hsm_probe_start: no key to probe with");
	hsm_probes *ps = calloc(1, sizeof(*ps) + h->ntokens * sizeof(probe));
	SG_ENSURE(ps, SG_EINTERNAL, "out of memory");
	pthread_condattr_t ca;
	bool ok = pthread_condattr_init(&ca) == 0;
	ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
	if (!ok || pthread_mutex_init(&ps->mu, NULL) != 0) {
		free(ps);
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	}
	if (pthread_cond_init(&ps->cv, &ca) != 0) {
		pthread_mutex_destroy(&ps->mu);
		free(ps);
		SG_BAIL(SG_EINTERNAL, "pthread_cond_init failed");
	}
	pthread_condattr_destroy(&ca);
	ps->interval_ns = (uint64_t)o->interval_ms * 1000000u;
	ps->timeout_ns = (uint64_t)o->timeout_ms * 1000000u;
	ps->fn = o->on_probe;
	ps->arg = o->arg;
	ps->n = h->ntokens;
	int rc = SG_OK;
	for (size_t i = 0; i < ps->n && rc == SG_OK; i++) {
		probe *p = &ps->p[i];
		p->h = h;
		p->tok = i;
		atomic_init(&p->step_ns, 0);
		atomic_init(&p->step, NULL);
		atomic_init(&p->down, false);
		if (h->tokens[i].has_key)
			rc = hsm_session_new(&p->s, h, i, true);
	}
	if (rc < 0) {
		probes_free(ps);
		return rc;
	}
	atomic_store(&h->probes, ps);
	pthread_mutex_lock(&ps->mu);
	ps->watcher_started = pthread_create(&ps->watcher, NULL, watch_main, ps) == 0;
	rc = ps->watcher_started ? SG_OK : SG_EINTERNAL;
	for (size_t i = 0; i < ps->n && rc == SG_OK; i++) {
		probe *p = &ps->p[i];
		if (!p->s)
			continue;
		p->started = pthread_create(&p->thread, NULL, probe_main, p) == 0;
		rc = p->started ? SG_OK : SG_EINTERNAL;
	}
	pthread_mutex_unlock(&ps->mu);
	if (rc < 0) {
		(void)hsm_probe_stop(h); /* nothing has called the module yet: they all end */
		SG_BAIL(SG_EINTERNAL, "cannot start the HSM health probe threads");
	}
	return SG_OK;
}
