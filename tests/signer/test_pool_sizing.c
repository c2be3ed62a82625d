/*
 * The signer pool's sizing against the token's latency, on p11_fault (the
 * fault-injection PKCS#11 module wrapping SoftHSM2): a token whose C_Sign
 * takes 2 ms gets far more signatures in flight than the pool's base of
 * two threads, and gives the extra sessions back when idle; under steady
 * load it keeps the workers it grew (no thread and session started and
 * retired per swing of the estimate), and gives them back while still
 * loaded once the token is fast again; latency spikes
 * are ridden through without errors; a token session limit lower than the
 * pool would grow to is never passed (no open refused, no error), nor is
 * hsm-max-sessions; a token that does not state its limit has none; a token
 * answering in 0.1 ms grows the pool too; a fast token keeps the CPU-sized
 * pool.
 *
 * Everything is asserted on observable state (pool and HSM counters, and
 * p11_fault's own peaks), never on throughput or timing ratios; waits are
 * conditions with generous deadlines (ASan and TSan builds, a loaded
 * two-core machine). Load is bounded: CLIENTS threads, PER_CLIENT
 * certificates each at most.
 */
#include "ca_fixture.h"
#include "p11_fault_control.h"
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_issuer.h"
#include "sg_pool.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

#define CLIENTS 24
#define MANY_CLIENTS 64 /* more than the sizing asks for: demand is not the bound */
#define PER_CLIENT 400
#define BASE 2

static fixture fx;
static char control[700];

typedef void (*peaks_fn)(unsigned *, unsigned *, unsigned *);

static unsigned pk_sessions, pk_signs, pk_refused;

/* p11_fault's peaks since peaks_reset (the module's own are read and
 * restarted on each call): most sessions open at once, most C_Sign calls
 * inside at once, opens refused with CKR_SESSION_COUNT. While the
 * appliance has the module loaded. */
static void peaks(unsigned *sessions, unsigned *signs, unsigned *refused)
{
	void *dl = dlopen(HSM_P11_FAULT, RTLD_NOW | RTLD_NOLOAD);
	peaks_fn fn = dl ? (peaks_fn)dlsym(dl, "p11_fault_peaks") : NULL;
	unsigned a = 0, b = 0, c = 0;
	if (fn)
		fn(&a, &b, &c);
	if (dl)
		dlclose(dl);
	pk_sessions = a > pk_sessions ? a : pk_sessions;
	pk_signs = b > pk_signs ? b : pk_signs;
	pk_refused += c;
	*sessions = pk_sessions;
	*signs = pk_signs;
	*refused = pk_refused;
}

static void peaks_reset(void)
{
	unsigned a, b, c;
	peaks(&a, &b, &c);
	pk_sessions = pk_signs = pk_refused = 0;
}

static sg_appliance *open_app(unsigned threads, unsigned max_sessions)
{
	sg_appliance *app = NULL;
	fx.args.s.hsm_module = strdup(HSM_P11_FAULT);
	fx.args.s.signer_threads = threads;
	fx.args.s.hsm_max_sessions = max_sessions;
	SG_CHECK_OK(sg_appliance_open(&app, &fx.args.s));
	free(fx.args.s.hsm_module);
	fx.args.s.hsm_module = NULL;
	return app;
}

static sg_pool_stats pool_stats(sg_pool *p)
{
	sg_pool_stats st;
	sg_pool_stats_get(p, &st);
	return st;
}

typedef struct load {
	sg_pool *pool;
	char *csr;
	size_t len;
	int clients;
	atomic_bool stop;
	atomic_int ok, failed;
	atomic_uint most_threads; /* the most workers a client saw */
} load;

static void *client(void *arg)
{
	load *l = arg;
	for (int i = 0; i < PER_CLIENT && !atomic_load(&l->stop); i++) {
		sg_issue_request req = {.csr = (const uint8_t *)l->csr,
		                        .csr_len = l->len,
		                        .profile = SG_PROFILE_ISTIO,
		                        .ttl = 3600,
		                        .path_len = -1};
		sg_issue_result res;
		if (sg_pool_issue(l->pool, &req, &res) == SG_OK) {
			atomic_fetch_add(&l->ok, 1);
			sg_issue_result_clear(&res);
		} else {
			atomic_fetch_add(&l->failed, 1);
			fprintf(stderr, "issue failed: %s\n", sg_error_last()->msg);
		}
		unsigned t = pool_stats(l->pool).threads, seen = atomic_load(&l->most_threads);
		while (t > seen && !atomic_compare_exchange_weak(&l->most_threads, &seen, t))
			;
	}
	return NULL;
}

static void load_start_n(load *l, pthread_t *th, sg_pool *p, int clients)
{
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	memset(l, 0, sizeof(*l));
	l->pool = p;
	l->csr = make_csr(&o, &l->len);
	l->clients = clients;
	for (int i = 0; i < clients; i++)
		pthread_create(&th[i], NULL, client, l);
}

static void load_start(load *l, pthread_t *th, sg_pool *p)
{
	load_start_n(l, th, p, CLIENTS);
}

static void load_stop(load *l, pthread_t *th)
{
	atomic_store(&l->stop, true);
	for (int i = 0; i < l->clients; i++)
		pthread_join(th[i], NULL);
	free(l->csr);
}

/* A 2 ms token (every C_Sign) and a pool of its own on an appliance
 * whose own pool is one thread: base BASE, and grown workers retire after
 * 300 ms idle (a test need not wait signetd's 2 s). NULL (a failed check,
 * nothing left open) when it cannot be made. */
static sg_pool *slow_pool(sg_appliance **app)
{
	p11_fault_control(control, "C_Sign delay_ms=2\n");
	*app = open_app(1, 0);
	sg_pool_options po = {.threads = BASE, .idle_ms = 300};
	sg_pool *p = NULL;
	if (*app)
		SG_CHECK_OK(sg_pool_new(&p, sg_appliance_ca(*app), sg_appliance_hsm(*app), &po));
	if (!p) {
		sg_appliance_free(*app);
		*app = NULL;
	}
	return p;
}

/* 2 ms in every C_Sign: the pool grows past its base of 2 while requests
 * queue, the module sees far more than 2 signatures at once, nothing fails;
 * once idle the grown workers retire and their sessions close. */
static void t_latency_grows_and_shrinks(void)
{
	sg_appliance *app = NULL;
	sg_pool *p = slow_pool(&app);
	if (!p)
		return;
	peaks_reset();
	load l;
	pthread_t th[CLIENTS];
	load_start(&l, th, p);
	unsigned sessions, signs, refused;
	SG_WAIT_FOR(120000, (peaks(&sessions, &signs, &refused), signs >= 3 * BASE + 2) ||
	                        atomic_load(&l.ok) + atomic_load(&l.failed) >= CLIENTS * PER_CLIENT);
	load_stop(&l, th);
	sg_pool_stats st = pool_stats(p);
	peaks(&sessions, &signs, &refused);
	fprintf(stderr,
	        "2 ms: %d issued, most threads %u, target %llu, C_Sign peak %u, wait %llu us, service %llu us\n",
	        atomic_load(&l.ok), atomic_load(&l.most_threads), (unsigned long long)st.threads_target, signs,
	        (unsigned long long)st.hsm_wait_ns / 1000, (unsigned long long)st.service_ns / 1000);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(signs >= 3 * BASE + 2);
	SG_CHECK(atomic_load(&l.most_threads) > BASE);
	SG_CHECK(st.threads_started > 0);
	/* Not st.threads_target: a live decision, which the last few samples
	 * of a run on a loaded host may already have moved back to the base. */
	SG_CHECK(st.threads_max == SG_POOL_MAX_THREADS); /* SoftHSM2 states no session limit */
	SG_CHECK(st.by_error[-SG_EBUSY] == 0 && st.rejected == 0);
	SG_CHECK(refused == 0);

	/* Idle: back to the base, the grown sessions closed. */
	SG_WAIT_FOR(60000, pool_stats(p).threads == BASE);
	st = pool_stats(p);
	SG_CHECK(st.threads_retired > 0);
	sg_hsm_load hl;
	SG_WAIT_FOR(10000, (sg_hsm_load_get(sg_appliance_hsm(app), &hl),
	                    hl.sessions == BASE + pool_stats(sg_appliance_pool(app)).threads));
	SG_CHECK(hl.in_flight == 0);
	SG_CHECK(hl.calls > 0 && hl.wait_samples > 0 && hl.wait_ns > 0);
	sg_pool_free(p);
	sg_appliance_free(app);
	p11_fault_control(control, "");
}

/* A steady 2 ms token under steady load, from more clients than the
 * sizing asks for (demand is not what bounds the pool): once grown, the
 * pool keeps its workers. The sizing's estimate moves from tick to tick; when retiring
 * followed every dip and growing every rise, the pool started and retired
 * a thread and an HSM session for about one certificate in eight (2,700
 * of each in 21,000 certificates: perf/README.md, 13), a third more CPU
 * per certificate. Counted over 2,000 certificates after the growth has
 * settled: no worker retires twice on average (the default idle_ms, as
 * signetd runs). */
static void t_steady_latency_keeps_workers(void)
{
	p11_fault_control(control, "C_Sign delay_ms=2\n");
	sg_appliance *app = open_app(BASE, 0);
	sg_pool *p = sg_appliance_pool(app);
	load l;
	pthread_t th[MANY_CLIENTS];
	load_start_n(&l, th, p, MANY_CLIENTS);
	const int total = MANY_CLIENTS * PER_CLIENT;
	SG_WAIT_FOR(120000, pool_stats(p).threads_started > 0 || atomic_load(&l.ok) + atomic_load(&l.failed) >= total);
	int settle = atomic_load(&l.ok) + 1000;
	SG_WAIT_FOR(120000, atomic_load(&l.ok) >= settle || atomic_load(&l.ok) + atomic_load(&l.failed) >= total);
	sg_pool_stats a = pool_stats(p);
	int from = atomic_load(&l.ok);
	SG_WAIT_FOR(120000, atomic_load(&l.ok) >= from + 2000 || atomic_load(&l.ok) + atomic_load(&l.failed) >= total);
	sg_pool_stats b = pool_stats(p);
	int counted = atomic_load(&l.ok) - from;
	bool loaded = atomic_load(&l.ok) + atomic_load(&l.failed) < total;
	load_stop(&l, th);
	unsigned most = atomic_load(&l.most_threads);
	fprintf(stderr, "steady 2 ms: %d counted, started %llu, retired %llu, most threads %u, target %llu\n", counted,
	        (unsigned long long)(b.threads_started - a.threads_started),
	        (unsigned long long)(b.threads_retired - a.threads_retired), most,
	        (unsigned long long)b.threads_target);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(a.threads_started > 0);
	SG_CHECK(loaded && counted >= 2000);
	SG_CHECK(b.threads_retired - a.threads_retired <= most);
	SG_CHECK(b.threads_started - a.threads_started <= most);
	sg_appliance_free(app);
	p11_fault_control(control, "");
}

/* The token becomes fast while the load goes on: the grown workers are
 * not idle (the queue keeps them busy), yet the pool goes back near its
 * base, since the sizing no longer asks for them, once the estimates of
 * the slow period have left its window (idle_ms). */
static void t_latency_falls_under_load(void)
{
	sg_appliance *app = NULL;
	sg_pool *p = slow_pool(&app);
	if (!p)
		return;
	load l;
	pthread_t th[CLIENTS];
	load_start(&l, th, p);
	const int total = CLIENTS * PER_CLIENT;
	SG_WAIT_FOR(120000, pool_stats(p).threads > BASE + 2 || atomic_load(&l.ok) + atomic_load(&l.failed) >= total);
	unsigned grown = pool_stats(p).threads;
	p11_fault_control(control, "");
	SG_WAIT_FOR(120000, pool_stats(p).threads <= BASE + 1 || atomic_load(&l.ok) + atomic_load(&l.failed) >= total);
	unsigned after = pool_stats(p).threads;
	bool loaded = atomic_load(&l.ok) + atomic_load(&l.failed) < total;
	load_stop(&l, th);
	fprintf(stderr, "latency falls: grown to %u, then %u under load\n", grown, after);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(grown > BASE + 2);
	SG_CHECK(loaded && after <= BASE + 1);
	sg_pool_free(p);
	sg_appliance_free(app);
}

/* CLIENTS clients on an appliance whose pool has BASE threads, over a
 * token with these p11_fault rules; returns once the pool has started a
 * worker or every request is done. The caller stops the load. */
static sg_appliance *load_until_grown(const char *rules, load *l, pthread_t *th)
{
	p11_fault_control(control, rules);
	sg_appliance *app = open_app(BASE, 0);
	sg_pool *p = sg_appliance_pool(app);
	load_start(l, th, p);
	SG_WAIT_FOR(120000, pool_stats(p).threads_started > 0 ||
	                        atomic_load(&l->ok) + atomic_load(&l->failed) >= CLIENTS * PER_CLIENT);
	return app;
}

/* Spikes on top of a small delay: every request issued, the pool grew. */
static void t_latency_spikes(void)
{
	load l;
	pthread_t th[CLIENTS];
	sg_appliance *app = load_until_grown("C_Sign delay_ms=1 spike_ms=30 spike_prob=0.1\n", &l, th);
	sg_pool *p = sg_appliance_pool(app);
	/* Some more under the spikes after growing. */
	int after = atomic_load(&l.ok) + 200;
	SG_WAIT_FOR(120000,
	            atomic_load(&l.ok) >= after || atomic_load(&l.ok) + atomic_load(&l.failed) >= CLIENTS * PER_CLIENT);
	load_stop(&l, th);
	sg_pool_stats st = pool_stats(p);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(st.threads_started > 0);
	SG_CHECK(st.completed == st.issued);
	sg_appliance_free(app);
	p11_fault_control(control, "");
}

/* The token allows 6 sessions (4 for signing: its admin session and a
 * probe's are kept): the pool stops there, and the module never refuses an
 * open nor sees more than 6 at once; nothing fails. */
static void t_token_session_limit(void)
{
	p11_fault_control(control, "sessions max=6\nC_Sign delay_ms=3\n");
	sg_appliance *app = open_app(BASE, 0);
	sg_pool *p = sg_appliance_pool(app);
	sg_hsm_load hl;
	sg_hsm_load_get(sg_appliance_hsm(app), &hl);
	SG_CHECK(hl.max_sessions == 4);
	peaks_reset();
	load l;
	pthread_t th[CLIENTS];
	load_start(&l, th, p);
	SG_WAIT_FOR(120000,
	            pool_stats(p).threads == 4 || atomic_load(&l.ok) + atomic_load(&l.failed) >= CLIENTS * PER_CLIENT);
	int after = atomic_load(&l.ok) + 100;
	SG_WAIT_FOR(120000,
	            atomic_load(&l.ok) >= after || atomic_load(&l.ok) + atomic_load(&l.failed) >= CLIENTS * PER_CLIENT);
	load_stop(&l, th);
	sg_pool_stats st = pool_stats(p);
	unsigned sessions, signs, refused;
	peaks(&sessions, &signs, &refused);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(st.threads_max == 4);
	SG_CHECK(atomic_load(&l.most_threads) == 4);
	SG_CHECK(sessions <= 6);
	SG_CHECK(refused == 0);
	sg_appliance_free(app);
	p11_fault_control(control, "");
}

/* A token that does not say how many sessions it allows
 * (CK_UNAVAILABLE_INFORMATION) is taken as stating no limit, as SoftHSM2's
 * CK_EFFECTIVELY_INFINITE is (t_latency_grows_and_shrinks). */
static void t_token_limit_unavailable(void)
{
	p11_fault_control(control, "sessions unavailable\n");
	sg_appliance *app = open_app(BASE, 0);
	sg_hsm_load hl;
	sg_hsm_load_get(sg_appliance_hsm(app), &hl);
	SG_CHECK(hl.max_sessions == 0);
	SG_CHECK(pool_stats(sg_appliance_pool(app)).threads_max == SG_POOL_MAX_THREADS);
	SG_CHECK(pool_stats(sg_appliance_pool(app)).threads == BASE);
	sg_appliance_free(app);
	p11_fault_control(control, "");
}

/* hsm-max-sessions bounds the growth below what the token would allow. */
static void t_max_sessions_setting(void)
{
	p11_fault_control(control, "C_Sign delay_ms=3\n");
	sg_appliance *app = open_app(BASE, 3);
	sg_pool *p = sg_appliance_pool(app);
	load l;
	pthread_t th[CLIENTS];
	load_start(&l, th, p);
	SG_WAIT_FOR(120000,
	            pool_stats(p).threads == 3 || atomic_load(&l.ok) + atomic_load(&l.failed) >= CLIENTS * PER_CLIENT);
	int after = atomic_load(&l.ok) + 100;
	SG_WAIT_FOR(120000,
	            atomic_load(&l.ok) >= after || atomic_load(&l.ok) + atomic_load(&l.failed) >= CLIENTS * PER_CLIENT);
	load_stop(&l, th);
	sg_pool_stats st = pool_stats(p);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(st.threads_max == 3);
	SG_CHECK(atomic_load(&l.most_threads) == 3);
	sg_hsm_load hl;
	sg_hsm_load_get(sg_appliance_hsm(app), &hl);
	SG_CHECK(hl.sessions <= 3);
	sg_appliance_free(app);
}

/* A token that answers in 0.1 ms (every C_Sign): three sampled calls in
 * four (or more) sleep, if briefly, in a window of the sizing's, and the
 * pool grows past its base while requests queue. A wait this short is a
 * small part of a certificate's time in the pool (which counts the woken
 * thread's wait for a CPU), and the sizing used to take such a token for a
 * fast one: each of the base's threads then slept once per certificate
 * with nothing to take its CPU (perf/README.md, 13). */
static void t_short_latency_grows(void)
{
	load l;
	pthread_t th[CLIENTS];
	sg_appliance *app = load_until_grown("C_Sign delay_ms=0.1\n", &l, th);
	sg_pool *p = sg_appliance_pool(app);
	load_stop(&l, th);
	sg_pool_stats st = pool_stats(p);
	sg_hsm_load hl;
	sg_hsm_load_get(sg_appliance_hsm(app), &hl);
	fprintf(stderr, "0.1 ms: %d issued, most threads %u, wait %llu us, service %llu us, asleep %llu of %llu\n",
	        atomic_load(&l.ok), atomic_load(&l.most_threads), (unsigned long long)st.hsm_wait_ns / 1000,
	        (unsigned long long)st.service_ns / 1000, (unsigned long long)hl.asleep,
	        (unsigned long long)hl.wait_samples);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(st.threads_started > 0);
	/* Growth means some window of at least MIN_SAMPLE (16) sampled calls
	 * had three in four asleep, so the token counted at least 12. Not the
	 * ratio over the whole run: the pool's rule is per window, and under
	 * TSan a run that grew had 30 of 41 asleep overall. */
	SG_CHECK(hl.asleep >= 12);
	sg_appliance_free(app);
	p11_fault_control(control, "");
}

/* No delay: the token signs on our CPU, so the pool keeps its base however
 * many requests queue. */
static void t_fast_token_keeps_base(void)
{
	p11_fault_control(control, "");
	sg_appliance *app = open_app(BASE, 0);
	sg_pool *p = sg_appliance_pool(app);
	load l;
	pthread_t th[CLIENTS];
	load_start(&l, th, p);
	SG_WAIT_FOR(180000, atomic_load(&l.ok) + atomic_load(&l.failed) >= 1500);
	load_stop(&l, th);
	sg_pool_stats st = pool_stats(p);
	fprintf(stderr, "fast: %d issued, target %llu, wait %llu us, service %llu us\n", atomic_load(&l.ok),
	        (unsigned long long)st.threads_target, (unsigned long long)st.hsm_wait_ns / 1000,
	        (unsigned long long)st.service_ns / 1000);
	SG_CHECK(atomic_load(&l.failed) == 0);
	SG_CHECK(st.threads_started == 0);
	SG_CHECK(atomic_load(&l.most_threads) == BASE);
	SG_CHECK(st.threads_target == BASE);
	sg_appliance_free(app);
}

static void setup(void)
{
	SG_CHECK_OK(fixture_ca(&fx, "ecdsa-p256"));
	snprintf(control, sizeof(control), "%s/p11fault.control", fx.dir);
	setenv("SIGNET_P11FAULT_CONTROL", control, 1);
}

static void teardown(void)
{
	fixture_free(&fx);
}

SG_TEST_MAIN(SG_TEST(setup), SG_TEST(t_latency_grows_and_shrinks), SG_TEST(t_steady_latency_keeps_workers),
             SG_TEST(t_latency_falls_under_load), SG_TEST(t_latency_spikes), SG_TEST(t_token_session_limit),
             SG_TEST(t_token_limit_unavailable), SG_TEST(t_max_sessions_setting), SG_TEST(t_short_latency_grows),
             SG_TEST(t_fast_token_keeps_base),
             SG_TEST(teardown))
