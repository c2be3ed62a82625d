/*
 * Module re-initialisation tests of sg_hsm, through fault_module (a PKCS#11
 * module forwarding to SoftHSM2 that plays p11-kit's client losing its
 * server: CKR_DEVICE_ERROR from every call until C_Finalize + C_Initialize).
 * The decision (reopens that keep failing with module faults, only on a
 * module signet initialised), the cure within one sg_hsm_sign, stale handles
 * of other sessions, bounded attempts while the "server" stays away and the
 * recovery driven by sg_hsm_stats_get once it is back, the foreign-initialised
 * module left alone, and signers running while re-inits drain them.
 */
#include "hsm_fixture.h"
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <pthread.h>
#include <stdatomic.h>

static struct {
	void (*set)(int cut, int down);
	int (*inits)(void);
	int (*finals)(void);
	CK_FUNCTION_LIST_PTR f;
} shim;

static bool shim_load(void)
{
	void *dl = dlopen(HSM_FAULT_MODULE, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr, "cannot load %s: %s\n", HSM_FAULT_MODULE, dlerror());
		return false;
	}
	*(void **)&shim.set = dlsym(dl, "fault_module_set");
	*(void **)&shim.inits = dlsym(dl, "fault_module_inits");
	*(void **)&shim.finals = dlsym(dl, "fault_module_finals");
	CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(dl, "C_GetFunctionList");
	return shim.set && shim.inits && shim.finals && gfl && gfl(&shim.f) == CKR_OK;
}

/* The connection drops: the next signature on one session reopens, fails
 * twice with CKR_DEVICE_ERROR, re-initialises the module and signs; the
 * other session finds its handles stale and reopens without a second
 * re-init. With and without the session key copy. */
static void t_reinit_cures(void)
{
	if (!shim.set)
		return; /* t_load failed */
	for (int copy = 0; copy < 2; copy++) {
		fx x;
		fx_init(&x);
		sg_hsm *h = NULL;
		SG_CHECK(fx_open_keyed(&x, &h, HSM_FAULT_MODULE, "cure", copy, 0));
		sg_hsm_session *s1 = NULL, *s2 = NULL;
		SG_CHECK_OK(sg_hsm_session_open(&s1, h));
		SG_CHECK_OK(sg_hsm_session_open(&s2, h));
		bool ok = false;
		SG_CHECK_OK(sign_verify(h, s1, 0, &ok));
		SG_CHECK(ok);
		SG_CHECK_OK(sign_verify(h, s2, 0, &ok));
		SG_CHECK(ok);
		int inits = shim.inits(), finals = shim.finals();

		shim.set(1, 0);
		SG_CHECK_OK(sign_verify(h, s1, sg_now_ns() + 5000000000u, &ok));
		SG_CHECK(ok);
		SG_CHECK(shim.inits() == inits + 1 && shim.finals() == finals + 1);
		SG_CHECK(stats(h).reinits == 1);
		SG_CHECK_OK(sign_verify(h, s2, sg_now_ns() + 5000000000u, &ok));
		SG_CHECK(ok);
		SG_CHECK(shim.inits() == inits + 1);
		sg_hsm_stats st = stats(h);
		SG_CHECK(st.reinits == 1 && st.state == SG_HSM_OK && st.sessions == 2);
		SG_CHECK(sg_hsm_session_uses_copy(s1) == (bool)copy && sg_hsm_session_uses_copy(s2) == (bool)copy);

		sg_hsm_session_free(s1);
		sg_hsm_session_free(s2);
		sg_hsm_free(h);
		SG_CHECK(shim.finals() == finals + 2); /* ours at the last release */
		fx_free(&x);
	}
}

/* The server stays away: attempts are few (backoff), the signature fails
 * cleanly, the health is DOWN; once it is back, polling the health alone
 * re-initialises the module, and signing works again. */
static void t_reinit_bounded_then_back(void)
{
	if (!shim.set)
		return; /* t_load failed */
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	SG_CHECK(fx_open_keyed(&x, &h, HSM_FAULT_MODULE, "away", true, 0));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	int inits = shim.inits();

	shim.set(1, 1);
	bool ok = false;
	int rc = sign_verify(h, s, sg_now_ns() + 1500000000u, &ok);
	SG_CHECK(rc == SG_EBUSY || rc == SG_ETIMEOUT);
	SG_CHECK(sg_error_last()->msg[0] != '\0');
	SG_CHECK(!strstr(sg_error_last()->msg, "1234"));
	/* A second of health polls, as often as a busy readiness probe would:
	 * the span is what is tested (attempts stay few however often it is
	 * polled), and a slower machine only polls less. */
	uint64_t until = sg_now_ns() + 1000000000u;
	long polls = 0;
	while (sg_now_ns() < until) {
		SG_CHECK(stats(h).state == SG_HSM_DOWN);
		polls++;
		sg_sleep_ms(1);
	}
	int attempts = shim.inits() - inits;
	printf("server away: %d re-init attempts in ~1.5 s of signing and %ld health polls\n", attempts, polls);
	SG_CHECK(attempts >= 1 && attempts <= 6);
	SG_CHECK(stats(h).reinits == 0);

	shim.set(1, 0); /* back: the next C_Initialize reconnects */
	SG_WAIT_FOR(30000, stats(h).state != SG_HSM_DOWN);
	/* Usable again; DEGRADED until the broken session has reopened. */
	SG_CHECK(stats(h).state == SG_HSM_DEGRADED);
	SG_CHECK(stats(h).reinits == 1);
	SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + 5000000000u, &ok));
	SG_CHECK(ok);
	SG_CHECK(stats(h).state == SG_HSM_OK && stats(h).reinits == 1);
	SG_CHECK(sg_hsm_session_uses_copy(s));
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	fx_free(&x);
}

/* Someone else initialised the module: sg_hsm never finalises it, so the
 * faults end in SG_EBUSY as before, and a cure from outside is picked up by
 * the ordinary session reopen. */
static void t_foreign_module_left_alone(void)
{
	if (!shim.set)
		return; /* t_load failed */
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "foreign"));
	setenv("SOFTHSM2_CONF", x.conf, 1);
	CK_C_INITIALIZE_ARGS args = {.flags = CKF_OS_LOCKING_OK};
	SG_CHECK(shim.f->C_Initialize(&args) == CKR_OK);
	sg_hsm_options o = {
	    .module_path = HSM_FAULT_MODULE,
	    .token_uri = "pkcs11:token=foreign",
	    .key_uri = "pkcs11:id=%43;object=foreign",
	    .pin = x.pin,
	    .allow_missing_key = true,
	};
	sg_hsm *h = NULL;
	SG_CHECK_OK(sg_hsm_open(&h, &o));
	if (!h) {
		shim.f->C_Finalize(NULL);
		fx_free(&x);
		return;
	}
	SG_CHECK_OK(sg_hsm_generate_key(h, SG_KEY_EC_P256));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	int finals = shim.finals();
	shim.set(1, 0);
	bool ok = false;
	SG_CHECK_RC(sign_verify(h, s, sg_now_ns() + 5000000000u, &ok), SG_EBUSY);
	SG_CHECK(stats(h).state == SG_HSM_DOWN);
	SG_CHECK(shim.finals() == finals && stats(h).reinits == 0);
	shim.set(0, 0);
	SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + 5000000000u, &ok));
	SG_CHECK(ok);
	SG_CHECK(shim.finals() == finals && stats(h).reinits == 0);
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	SG_CHECK(shim.finals() == finals); /* still not ours */
	SG_CHECK(shim.f->C_Finalize(NULL) == CKR_OK);
	fx_free(&x);
}

/* --- signers running while the module is re-initialised ---------------- */

/* No gate here, unlike the fault tests: the re-init itself must keep every
 * thread out of the module while it finalises (SoftHSM2 crashes when a
 * session is freed under a running C_Sign). */
static void t_reinit_under_load(void)
{
	if (!shim.set)
		return; /* t_load failed */
	fx x;
	fx_init(&x);
	sg_hsm *h = NULL;
	SG_CHECK(fx_open_keyed(&x, &h, HSM_FAULT_MODULE, "load", true, 0));
	atomic_bool stop;
	atomic_init(&stop, false);
	signer w[4];
	pthread_t th[4];
	signers_start(w, th, 4, h, &stop, signer_run);
	/* Cuts spaced out so that the workers sign between them. Nothing
	 * rests on the spacing: cuts that fall together make fewer re-inits,
	 * and 1 to 4 is what is checked. */
	for (int k = 0; k < 4; k++) {
		sg_sleep_ms(80);
		shim.set(1, 0);
	}
	/* Every worker signs again after the last cut. Waited for rather than
	 * given a fixed time: a worker may sit in the re-init backoff, and a
	 * loaded machine stretches everything. */
	int after[4];
	for (int i = 0; i < 4; i++)
		after[i] = atomic_load(&w[i].ok_now);
	for (int i = 0; i < 4; i++)
		SG_WAIT_FOR(15000, atomic_load(&w[i].ok_now) > after[i]);
	signer_sum sum = signers_stop(w, th, 4, &stop, true);
	sg_hsm_stats st = stats(h);
	printf("under load: %d signed (%d verified), %d clean errors, %llu re-inits, %llu recoveries\n", sum.ok,
	       sum.verified, sum.errors, (unsigned long long)st.reinits, (unsigned long long)st.recoveries);
	SG_CHECK(sum.verified == sum.ok);
	SG_CHECK(st.reinits >= 1 && st.reinits <= 4);
	SG_CHECK(st.sessions == 0);
	sg_hsm_free(h);
	fx_free(&x);
}

static void t_load(void)
{
	SG_CHECK(shim_load());
}

SG_TEST_MAIN(SG_TEST(t_load), SG_TEST(t_reinit_cures), SG_TEST(t_reinit_bounded_then_back),
             SG_TEST(t_foreign_module_left_alone), SG_TEST(t_reinit_under_load))
