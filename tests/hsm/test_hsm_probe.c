/*
 * sg_hsm's health probes (sg_hsm_probe_start) on p11_fault, with no
 * signature asked for (an idle token): a token whose every call hangs is
 * down within interval + timeout, the stuck probe is reported once, health
 * reads never wait on the hung module, and released it is back with the
 * next probe; a token that answers errors is down and back once cured; a
 * probe that only answers late counts as down, unless the token signs for
 * callers meanwhile (its probe waits behind them); sg_hsm_free with a probe
 * under way waits for it, but not past its timeout; probes stopped before
 * the free (sg_hsm_probe_stop) tell nothing more and leave health readable.
 */
#include "hsm_fixture.h"
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <pthread.h>
#include <stdatomic.h>

#define INTERVAL_MS 200
#define TIMEOUT_MS 500
/* A health read that called into a hung module would block until the
 * hang is released, after the reads; 5 s tells that apart from a read a
 * paused vCPU or a loaded machine delayed. */
#define READ_BOUND_NS 5000000000u

/* What on_probe was told, per result. */
typedef struct told {
	atomic_uint n[4];
	atomic_uint bad_token;
} told;

static void on_probe(size_t token, sg_hsm_probe_result r, double seconds, void *arg)
{
	told *t = arg;
	if (token != 0 || seconds < 0)
		atomic_fetch_add(&t->bad_token, 1);
	if ((unsigned)r < 4)
		atomic_fetch_add(&t->n[r], 1);
}

static unsigned count(told *t, sg_hsm_probe_result r)
{
	return atomic_load(&t->n[r]);
}

static bool open_probed_timed(fx *x, sg_hsm **h, const char *label, told *t, unsigned interval_ms, unsigned timeout_ms)
{
	fx_faults_init(x);
	if (!fx_open_keyed(x, h, HSM_P11_FAULT, label, true, 2))
		return false;
	sg_hsm_probe_options o = {.interval_ms = interval_ms, .timeout_ms = timeout_ms, .on_probe = on_probe, .arg = t};
	return sg_hsm_probe_start(*h, &o) == SG_OK;
}

static bool open_probed_every(fx *x, sg_hsm **h, const char *label, told *t, unsigned interval_ms)
{
	return open_probed_timed(x, h, label, t, interval_ms, TIMEOUT_MS);
}

static bool open_probed(fx *x, sg_hsm **h, const char *label, told *t)
{
	return open_probed_every(x, h, label, t, INTERVAL_MS);
}

/* The longest a health read took, over reads for ms. */
static uint64_t slowest_read_ns(const sg_hsm *h, unsigned ms)
{
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u, worst = 0;
	while (sg_now_ns() < until) {
		uint64_t t0 = sg_now_ns();
		(void)stats(h);
		uint64_t d = sg_now_ns() - t0;
		worst = d > worst ? d : worst;
		sg_sleep_ms(5);
	}
	return worst;
}

/* Every call hangs while the token is idle: down within interval +
 * timeout (the probe stuck, reported once), health reads stay quick,
 * released it is OK again with the next probe; a signer session then
 * signs. Without probes the token stayed OK for the whole outage. */
static void t_idle_hang(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed(&x, &h, "idlehang", &t));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) >= 2);
	SG_CHECK(stats(h).state == SG_HSM_OK);

	uint64_t t0 = sg_now_ns();
	fx_faults("* hang=64\n");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_DOWN);
	uint64_t down_ms = (sg_now_ns() - t0) / 1000000u;
	printf("idle hang: down after %llu ms (interval %d + timeout %d)\n", (unsigned long long)down_ms, INTERVAL_MS,
	       TIMEOUT_MS);
	/* The bound, with the fault file's 30 ms and a loaded machine's
	 * scheduling on top. */
	SG_CHECK(down_ms <= INTERVAL_MS + TIMEOUT_MS + 1500 * SG_TEST_SLOW);
	SG_CHECK(fx_logged("hang C_GetSessionInfo"));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_STUCK) == 1);
	/* Health reads make no call into the hung module (one that did would
	 * block until the release below). */
	SG_CHECK(slowest_read_ns(h, 300) < READ_BOUND_NS);
	SG_CHECK(stats(h).state == SG_HSM_DOWN);
	SG_CHECK(count(&t, SG_HSM_PROBE_STUCK) == 1); /* once per stuck probe */

	uint64_t t1 = sg_now_ns();
	fx_faults("");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_OK);
	uint64_t back_ms = (sg_now_ns() - t1) / 1000000u;
	printf("idle hang: OK again %llu ms after the release\n", (unsigned long long)back_ms);
	/* The stuck call returns late, and the probe made at once then
	 * answers: no interval in between. */
	SG_CHECK(count(&t, SG_HSM_PROBE_LATE) >= 1);
	SG_CHECK(back_ms <= TIMEOUT_MS + 1500 * SG_TEST_SLOW);
	bool ok = false;
	SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + SIGN_DEADLINE_NS, &ok));
	SG_CHECK(ok);
	SG_CHECK(atomic_load(&t.bad_token) == 0);
	SG_CHECK(stats(h).sessions == 1); /* the probe's own session is not counted */
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	SG_CHECK(sg_hsm_threads_left() == 0);
	fx_free(&x);
}

/* Every call answers CKR_DEVICE_ERROR while idle: the probe's cheap call
 * and its test signature fail, the token is down; cured, it comes back
 * without a signature asked for. */
static void t_idle_error(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed(&x, &h, "idleerr", &t));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) >= 1);
	uint64_t sig0 = stats(h).signatures;
	fx_faults("* error=CKR_DEVICE_ERROR\n");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_DOWN);
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_FAILED) >= 2);
	SG_CHECK(strstr(stats(h).last_fault, "CKR_DEVICE_ERROR") != NULL);
	fx_faults("");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_OK);
	/* Test signatures are not counted as the HSM's signatures. */
	SG_CHECK(stats(h).signatures == sig0);
	SG_CHECK(count(&t, SG_HSM_PROBE_STUCK) == 0);
	sg_hsm_free(h);
	fx_free(&x);
}

/* A token whose every call answers, but only after the timeout, is down (a probe
 * answered late), and up again once it answers in time. */
static void t_slow_is_down(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed(&x, &h, "slow", &t));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) >= 1);
	char rule[64];
	snprintf(rule, sizeof(rule), "* delay_ms=%d\n", TIMEOUT_MS + 300);
	fx_faults(rule);
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_LATE) >= 1);
	SG_CHECK(stats(h).state == SG_HSM_DOWN);
	fx_faults("");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_OK);
	sg_hsm_free(h);
	fx_free(&x);
}

/* Starts n signers one after another, gap_ms apart: signatures that
 * each take as long end spread out rather than together. */
static void signers_start_spread(signer *w, pthread_t *th, int n, sg_hsm *h, atomic_bool *stop, unsigned gap_ms)
{
	for (int i = 0; i < n; i++) {
		if (i)
			sg_sleep_ms(gap_ms);
		signers_start(w + i, th + i, 1, h, stop, signer_run);
	}
}

/* A busy token whose every call answers late (a module that queues the
 * probe behind the signatures asked of it, as tpm2-pkcs11 behind its
 * resource manager does) is not down while it signs for callers: a probe
 * late or stuck meanwhile does not count, and while it signs no probe is
 * made. The same probes count it as down once the signatures stop, and a
 * token that hangs under load is down within interval + timeout of its
 * last signature, as an idle one is: signatures that went before do not
 * stretch the bound. */
static void t_busy_late_not_down(void)
{
	enum { INTERVAL = 1000, CALL_MS = TIMEOUT_MS + 200 };
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed_every(&x, &h, "busylate", &t, INTERVAL));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) >= 1);
	char rule[128];
	/* Both probes late (the cheap call and the test signature), and
	 * each signature of the four threads takes as long; started apart,
	 * one ends about every CALL_MS / N, well within the interval. */
	snprintf(rule, sizeof(rule), "C_Sign delay_ms=%d\nC_GetTokenInfo delay_ms=%d\n", CALL_MS, CALL_MS);
	fx_faults(rule);
	enum { N = 4 };
	signer w[N];
	pthread_t th[N];
	atomic_bool stop = false;
	/* Idle first: a probe stuck past its timeout, the token down. The
	 * signatures start while it is inside, and it comes back late. */
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_STUCK) >= 1);
	SG_CHECK(stats(h).state == SG_HSM_DOWN);
	signers_start_spread(w, th, N, h, &stop, CALL_MS / N);
	SG_WAIT_FOR(30000, signed_now(w, N) >= N);
	unsigned made0 = count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_LATE) + count(&t, SG_HSM_PROBE_FAILED);
	unsigned down_reads = 0, reads = 0;
	uint64_t until = sg_now_ns() + 3000000000u;
	while (sg_now_ns() < until) {
		down_reads += stats(h).state == SG_HSM_DOWN;
		reads++;
		sg_sleep_ms(20);
	}
	unsigned made =
	    count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_LATE) + count(&t, SG_HSM_PROBE_FAILED) - made0;
	printf("busy and late: %u of %u health reads down, %u probes made in 3 s, %d signatures\n", down_reads, reads,
	       made, signed_now(w, N));
	SG_CHECK(down_reads == 0);
	/* The stuck one may return in the window, and the one made at once
	 * after a late answer may start before a signature ends. */
	SG_CHECK(made <= 2);

	/* The signatures stop; the probes' verdict counts again. */
	signer_sum sum = signers_stop(w, th, N, &stop, true);
	SG_CHECK(sum.errors == 0 && sum.verified == sum.ok);
	uint64_t t0 = sg_now_ns();
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_DOWN);
	uint64_t down_ms = (sg_now_ns() - t0) / 1000000u;
	printf("busy and late: down %llu ms after the signatures stopped\n", (unsigned long long)down_ms);
	SG_CHECK(down_ms <= INTERVAL + TIMEOUT_MS + 1500 * SG_TEST_SLOW);

	/* Signing again, then every call hangs. */
	fx_faults("");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_OK);
	fx_faults(rule);
	atomic_store(&stop, false);
	signers_start_spread(w, th, N, h, &stop, CALL_MS / N);
	SG_WAIT_FOR(30000, signed_now(w, N) >= 2 * N);
	SG_CHECK(stats(h).state != SG_HSM_DOWN);
	t0 = sg_now_ns();
	fx_faults("* hang=64\n");
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_DOWN);
	down_ms = (sg_now_ns() - t0) / 1000000u;
	printf("busy, then hung: down after %llu ms (interval %d + timeout %d)\n", (unsigned long long)down_ms,
	       INTERVAL, TIMEOUT_MS);
	/* A signature under way when the hang began may still end CALL_MS
	 * later; from that one, interval + timeout as for an idle token. */
	SG_CHECK(down_ms <= CALL_MS + INTERVAL + TIMEOUT_MS + 1500 * SG_TEST_SLOW);
	fx_faults("");
	sum = signers_stop(w, th, N, &stop, true);
	SG_CHECK(sum.errors == 0);
	SG_WAIT_FOR(30000, stats(h).state == SG_HSM_OK);
	sg_hsm_free(h);
	SG_CHECK(sg_hsm_threads_left() == 0);
	fx_free(&x);
}

/* sg_hsm_free while a probe is inside a slow call waits for it (it
 * returns before its timeout), and leaves no thread behind. */
static void t_free_bounded(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed(&x, &h, "freewait", &t));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) >= 1);
	char rule[64];
	snprintf(rule, sizeof(rule), "C_GetTokenInfo delay_ms=%d\n", TIMEOUT_MS / 2);
	fx_faults(rule);
	unsigned before = count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_LATE);
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_LATE) > before);
	uint64_t t0 = sg_now_ns();
	sg_hsm_free(h);
	uint64_t took_ms = (sg_now_ns() - t0) / 1000000u;
	SG_CHECK(took_ms < TIMEOUT_MS + 1000 * SG_TEST_SLOW);
	SG_CHECK(sg_hsm_threads_left() == 0);
	fx_faults("");
	fx_free(&x);
}

/* A signer's reopen failed (the token counts as down) and then the fault
 * went, with no signature asked for after: the probe's test signature on
 * its own, healthy session brings the token back (before, only a signer's
 * reopen could, so an idle token stayed down). The probe's first run comes
 * after the fault is gone (a 2 s interval), so its session never saw it. */
static void t_signer_down_cleared(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed_every(&x, &h, "reopenfail", &t, 2000));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	fx_faults("C_Sign error=CKR_SESSION_HANDLE_INVALID\nC_OpenSession error=CKR_HOST_MEMORY\n");
	bool ok = false;
	SG_CHECK(sign_verify(h, s, sg_now_ns() + 3000000000u, &ok) < 0);
	fx_faults("");
	SG_CHECK(count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_FAILED) == 0); /* no probe yet */
	SG_CHECK(stats(h).state == SG_HSM_DOWN);
	/* Not down; degraded until the broken signer session signs again. */
	SG_WAIT_FOR(30000, stats(h).state != SG_HSM_DOWN);
	SG_CHECK(count(&t, SG_HSM_PROBE_OK) >= 1);
	SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + SIGN_DEADLINE_NS, &ok));
	SG_CHECK(ok && stats(h).state == SG_HSM_OK);
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	fx_free(&x);
}

/* sg_hsm_probe_stop before the free (a handle a CA rotation retired):
 * the probes end and tell nothing more, health stays readable without a
 * call into the module, a second stop gives the first one's answer, and
 * sg_hsm_free afterwards neither waits nor joins again. */
static void t_stop_before_free(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	/* A long probe timeout: a free that still waited for a probe after
	 * the stop would take that long, far beyond the bound below. A probe
	 * that still ran would not be reported stuck that soon; the fault
	 * module's log shows any call that entered the hang instead. */
	enum { STOP_TIMEOUT_MS = 5000 };
	SG_CHECK(open_probed_timed(&x, &h, "stopfirst", &t, INTERVAL_MS, STOP_TIMEOUT_MS));
	SG_WAIT_FOR(30000, count(&t, SG_HSM_PROBE_OK) >= 1);
	SG_CHECK(sg_hsm_probe_stop(h));
	unsigned told_then = count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_FAILED);
	/* The module hangs from now on: a probe, or a health read that made
	 * a call, would be seen stuck. */
	fx_faults("* hang=64\n");
	SG_CHECK(slowest_read_ns(h, 3 * INTERVAL_MS) < READ_BOUND_NS);
	SG_CHECK(!fx_logged("hang "));
	SG_CHECK(stats(h).state == SG_HSM_OK);
	SG_CHECK(count(&t, SG_HSM_PROBE_OK) + count(&t, SG_HSM_PROBE_FAILED) == told_then);
	SG_CHECK(count(&t, SG_HSM_PROBE_STUCK) == 0);
	fx_faults("");
	SG_CHECK(sg_hsm_probe_stop(h)); /* again: the first answer */
	SG_CHECK(sg_hsm_probe_stop(NULL));
	uint64_t t0 = sg_now_ns();
	sg_hsm_free(h);
	SG_CHECK((sg_now_ns() - t0) / 1000000u < 1000 * SG_TEST_SLOW);
	SG_CHECK(sg_hsm_threads_left() == 0);
	fx_free(&x);
}

/* Options checked. */
static void t_bad_options(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	told t = {0};
	SG_CHECK(open_probed(&x, &h, "opts", &t));
	sg_hsm_probe_options o = {.interval_ms = 100, .timeout_ms = 100};
	SG_CHECK(sg_hsm_probe_start(h, &o) == SG_EINVAL); /* twice */
	sg_hsm_probe_options zero = {.interval_ms = 0, .timeout_ms = 100};
	SG_CHECK(sg_hsm_probe_start(h, &zero) == SG_EINVAL);
	SG_CHECK(strcmp(sg_hsm_token_label(h, 0), "opts") == 0);
	SG_CHECK(sg_hsm_token_serial(h, 0) && *sg_hsm_token_serial(h, 0));
	SG_CHECK(sg_hsm_token_label(h, 1) == NULL);
	sg_hsm_free(h);
	fx_free(&x);
}

SG_TEST_MAIN(SG_TEST(t_idle_hang), SG_TEST(t_idle_error), SG_TEST(t_slow_is_down), SG_TEST(t_busy_late_not_down),
             SG_TEST(t_free_bounded), SG_TEST(t_signer_down_cleared), SG_TEST(t_stop_before_free),
             SG_TEST(t_bad_options))
