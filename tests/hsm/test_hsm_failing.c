/*
 * sg_hsm on p11_fault (the fault-injection module the daemon tests load),
 * driven through its control file: a token whose sessions reopen fine but
 * whose C_Sign always fails counts as down (readiness), and comes back
 * through sg_hsm_stats_get's test signature alone, with no signature asked
 * for; an intermittent session fault is cured without the token ever
 * counting as down; a C_Sign that hangs holds only its own session while
 * another signs, and completes once released.
 */
#include "hsm_fixture.h"
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <pthread.h>
#include <stdatomic.h>

/* A token with an EC key, opened through p11_fault; control file and event
 * log beside it. */
static bool open_faulty(fx *x, sg_hsm **h, const char *label)
{
	fx_faults_init(x);
	return fx_open_keyed(x, h, HSM_P11_FAULT, label, true, 2);
}

/* Every C_Sign fails with CKR_DEVICE_ERROR while the session reopens fine:
 * signatures fail retryably, and after three given up the token is DOWN
 * (before the fix it stayed OK, so /readyz said ready while nothing could
 * be signed). Cleared, the health poll's test signature brings it back
 * without any signature being asked for. */
static void t_sign_failing_is_down(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	SG_CHECK(open_faulty(&x, &h, "failing"));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	bool ok = false;
	SG_CHECK_OK(sign_verify(h, s, 0, &ok));
	SG_CHECK(ok && stats(h).state == SG_HSM_OK);

	fx_faults("C_Sign error=CKR_DEVICE_ERROR\n");
	for (int i = 0; i < 3; i++) {
		int rc = sign_verify(h, s, sg_now_ns() + 3000000000u, &ok);
		SG_CHECK(rc == SG_EBUSY || rc == SG_ETIMEOUT);
		if (i < 2)
			SG_CHECK(stats(h).state != SG_HSM_DOWN);
	}
	sg_hsm_stats st = stats(h);
	SG_CHECK(st.state == SG_HSM_DOWN);
	SG_CHECK(strstr(st.last_fault, "CKR_DEVICE_ERROR") != NULL);
	/* Reopened sessions do not make it usable again: still down. */
	SG_CHECK(sign_verify(h, s, sg_now_ns() + 3000000000u, &ok) < 0);
	SG_CHECK(stats(h).state == SG_HSM_DOWN);

	fx_faults("");
	SG_WAIT_FOR(30000, stats(h).state != SG_HSM_DOWN);
	SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + SIGN_DEADLINE_NS, &ok));
	SG_CHECK(ok && stats(h).state == SG_HSM_OK);

	sg_hsm_session_free(s);
	sg_hsm_free(h);
	fx_free(&x);
}

/* Every other C_Sign answers CKR_SESSION_HANDLE_INVALID: each signature is
 * cured by a reopen, all verify, and the token never counts as down. */
static void t_intermittent_not_down(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	SG_CHECK(open_faulty(&x, &h, "flaky"));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	fx_faults("C_Sign error=CKR_SESSION_HANDLE_INVALID every=2\n");
	uint64_t rec0 = stats(h).recoveries;
	for (int i = 0; i < 20; i++) {
		bool ok = false;
		SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + SIGN_DEADLINE_NS, &ok));
		SG_CHECK(ok);
		SG_CHECK(stats(h).state != SG_HSM_DOWN);
	}
	SG_CHECK(stats(h).recoveries >= rec0 + 5);
	fx_faults("");
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	fx_free(&x);
}

typedef struct hung_arg {
	sg_hsm *h;
	sg_hsm_session *s;
	int rc;
	bool ok;
	atomic_bool done;
} hung_arg;

static void *hung_signer(void *p)
{
	hung_arg *a = p;
	a->rc = sign_verify(a->h, a->s, 0, &a->ok);
	atomic_store(&a->done, true);
	return NULL;
}

/* One C_Sign hangs (hang=1): another session on the same token keeps
 * signing meanwhile; released, the hung one completes with a good
 * signature. */
static void t_hang_holds_one_session(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	SG_CHECK(open_faulty(&x, &h, "hang"));
	sg_hsm_session *s1 = NULL, *s2 = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s1, h));
	SG_CHECK_OK(sg_hsm_session_open(&s2, h));
	fx_faults("C_Sign hang=1\n");
	hung_arg a = {.h = h, .s = s1};
	pthread_t t;
	SG_CHECK(pthread_create(&t, NULL, hung_signer, &a) == 0);
	/* Its C_Sign is the one held (hang=1: the first only), not one of
	 * those below. */
	SG_WAIT_FOR(30000, fx_logged("hang C_Sign "));
	SG_CHECK(!atomic_load(&a.done));
	for (int i = 0; i < 10; i++) {
		bool ok = false;
		SG_CHECK_OK(sign_verify(h, s2, sg_now_ns() + SIGN_DEADLINE_NS, &ok));
		SG_CHECK(ok);
	}
	SG_CHECK(!atomic_load(&a.done));
	fx_faults("");
	pthread_join(t, NULL);
	SG_CHECK(a.rc == 0 && a.ok);
	sg_hsm_session_free(s1);
	sg_hsm_session_free(s2);
	sg_hsm_free(h);
	fx_free(&x);
}

/* The module loses every session behind signet's back (p11_fault's crash:
 * SoftHSM2 finalised and initialised again, which numbers new sessions
 * from 1 again) while four threads sign. Each session finds its handle
 * invalid and reopens; none may sign on a number that now belongs to
 * another thread's new session (before the fix: two threads in one
 * SoftHSM2 session, a crash inside C_Sign under ASan, or a signature that
 * does not verify). Every signature verifies and signing goes on. */
static void t_crash_no_aliasing(void)
{
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	SG_CHECK(open_faulty(&x, &h, "crash"));
	atomic_bool stop;
	atomic_init(&stop, false);
	signer a[4];
	pthread_t th[4];
	signers_start(a, th, 4, h, &stop, signer_run);
	/* Each crash lands while the threads sign and is waited for (the
	 * module logs it), then signing is seen to go on before the next:
	 * paced by state, not by times a loaded machine can outlast. */
	SG_WAIT_FOR(30000, signed_now(a, 4) > 0);
	char text[32], line[48];
	for (int gen = 1; gen <= 12; gen++) {
		snprintf(text, sizeof(text), "crash %d\n", gen);
		fx_faults(text);
		snprintf(line, sizeof(line), "crash generation %d\n", gen);
		SG_WAIT_FOR(30000, fx_logged(line));
		int before = signed_now(a, 4);
		SG_WAIT_FOR(30000, signed_now(a, 4) > before);
	}
	signer_sum sum = signers_stop(a, th, 4, &stop, false);
	printf("crashes under load: %d signed, %d verified, %d failed\n", sum.ok, sum.verified, sum.errors);
	SG_CHECK(sum.ok > 0 && sum.verified == sum.ok);
	bool good = false;
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + SIGN_DEADLINE_NS, &good));
	SG_CHECK(good);
	sg_hsm_session_free(s);
	fx_faults("");
	sg_hsm_free(h);
	fx_free(&x);
}

SG_TEST_MAIN(SG_TEST(t_sign_failing_is_down), SG_TEST(t_intermittent_not_down), SG_TEST(t_hang_holds_one_session),
             SG_TEST(t_crash_no_aliasing))
