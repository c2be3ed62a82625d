/*
 * Fault tests of sg_hsm against real SoftHSM2 tokens: C_CloseAllSessions and
 * C_Logout injected through the same module instance (dlopen of the same
 * library gives the same function list), a PIN changed under us, concurrent
 * signers with faults injected meanwhile, several tokens holding one key
 * (imported with C_CreateObject), and rough sign rates.
 */
#include "hsm_fixture.h"
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* --- cases ------------------------------------------------------------- */

static bool fault_is(const sg_hsm *h, const char *what)
{
	sg_hsm_stats st;
	sg_hsm_stats_get(h, &st);
	return strstr(st.last_fault, what) != NULL;
}

/* Logs the application out of the token in slot (all its sessions). */
static CK_RV logout_slot(fx *x, CK_SLOT_ID slot)
{
	CK_SESSION_HANDLE sh;
	CK_RV rv = x->f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &sh);
	if (rv != CKR_OK)
		return rv;
	rv = x->f->C_Logout(sh);
	x->f->C_CloseSession(sh);
	return rv;
}

/* C_CloseAllSessions and C_Logout from outside: the next signature on each
 * session recovers (reopen, re-login, re-find, re-copy) and verifies; an
 * expired deadline fails fast. With and without the session key copy. */
static void t_recover(void)
{
	for (int copy = 0; copy < 2; copy++) {
		fx x;
		fx_init(&x);
		SG_CHECK_OK(fx_token(&x, "rec"));
		sg_hsm *h = NULL;
		SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=rec", "pkcs11:id=%10;object=rec", copy, true));
		if (!h) {
			fx_free(&x);
			return;
		}
		SG_CHECK_OK(sg_hsm_generate_key(h, SG_KEY_EC_P256));
		CK_SLOT_ID slot = fx_slot(&x, "rec");
		sg_hsm_session *s1 = NULL, *s2 = NULL;
		SG_CHECK_OK(sg_hsm_session_open(&s1, h));
		SG_CHECK_OK(sg_hsm_session_open(&s2, h));
		SG_CHECK(sg_hsm_session_uses_copy(s1) == (bool)copy);
		bool ok = false;
		SG_CHECK_OK(sign_verify(h, s1, 0, &ok));
		SG_CHECK(ok);

		SG_CHECK(x.f->C_CloseAllSessions(slot) == CKR_OK);
		SG_CHECK_OK(sign_verify(h, s1, 0, &ok));
		SG_CHECK(ok);
		SG_CHECK_OK(sign_verify(h, s2, 0, &ok));
		SG_CHECK(ok);
		SG_CHECK(sg_hsm_session_uses_copy(s1) == (bool)copy);
		sg_hsm_stats st;
		sg_hsm_stats_get(h, &st);
		SG_CHECK(st.recoveries == 2 && st.faults >= 2 && st.sessions == 2 && st.signatures == 3);
		SG_CHECK(st.state == SG_HSM_OK);
		SG_CHECK(fault_is(h, "CKR_SESSION_HANDLE_INVALID"));

		/* A foreign logout: the token object needs the login again, the
		 * private session copy is gone. */
		SG_CHECK(logout_slot(&x, slot) == CKR_OK);
		SG_CHECK_OK(sign_verify(h, s1, 0, &ok));
		SG_CHECK(ok);
		/* SoftHSM2 hides private objects from a logged-out session:
		 * CKR_OBJECT_HANDLE_INVALID (others say CKR_USER_NOT_LOGGED_IN). */
		SG_CHECK(fault_is(h, "C_SignInit: CKR_OBJECT_HANDLE_INVALID") ||
		         fault_is(h, "C_SignInit: CKR_USER_NOT_LOGGED_IN"));
		sg_hsm_stats_get(h, &st);
		SG_CHECK(st.recoveries == 3);
		SG_CHECK_OK(sign_verify(h, s2, 0, &ok));
		SG_CHECK(ok);

		/* Deadline already passed: SG_ETIMEOUT at once, no hang (the
		 * bound is half a second, not the few milliseconds it takes:
		 * a paused vCPU must not fail it). */
		SG_CHECK(x.f->C_CloseAllSessions(slot) == CKR_OK);
		uint64_t t0 = sg_now_ns();
		SG_CHECK_RC(sign_verify(h, s1, t0 - 1, &ok), SG_ETIMEOUT);
		SG_CHECK(sg_now_ns() - t0 < 500000000u * SG_TEST_SLOW);
		SG_CHECK_OK(sign_verify(h, s1, sg_now_ns() + SIGN_DEADLINE_NS, &ok));
		SG_CHECK(ok);
		sg_hsm_stats_get(h, &st);
		SG_CHECK(st.recoveries >= 5);

		sg_hsm_session_free(s1);
		sg_hsm_session_free(s2);
		sg_hsm_stats_get(h, &st);
		SG_CHECK(st.sessions == 0);
		sg_hsm_free(h);
		fx_free(&x);
	}
}

/* The PIN changes under us and the login is lost: re-login fails once with
 * SG_EAUTH; later signatures fail at once without presenting the PIN again. */
static void t_wrong_pin_not_retried(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "pin"));
	sg_hsm *h = NULL;
	/* A first backoff of 1 s: the "no backoff" bound below is then half
	 * of it, not a few milliseconds a paused vCPU could take. */
	SG_CHECK_OK(fx_open_on(&x, &h, x.module, "pkcs11:token=pin", "pkcs11:id=%20;object=pin", false, true, 1000));
	if (!h) {
		fx_free(&x);
		return;
	}
	SG_CHECK_OK(sg_hsm_generate_key(h, SG_KEY_EC_P384));
	sg_hsm_session *s = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	bool ok = false;
	SG_CHECK_OK(sign_verify(h, s, 0, &ok));
	SG_CHECK(ok);

	CK_SLOT_ID slot = fx_slot(&x, "pin");
	CK_SESSION_HANDLE sh;
	SG_CHECK(x.f->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &sh) == CKR_OK);
	SG_CHECK(x.f->C_SetPIN(sh, (CK_UTF8CHAR_PTR) "1234", 4, (CK_UTF8CHAR_PTR) "9999", 4) == CKR_OK);
	SG_CHECK(x.f->C_Logout(sh) == CKR_OK);
	x.f->C_CloseSession(sh);

	SG_CHECK_RC(sign_verify(h, s, 0, &ok), SG_EAUTH);
	SG_CHECK_MSG("C_Login on token 'pin': CKR_PIN_INCORRECT");
	SG_CHECK(!strstr(sg_error_last()->msg, "1234"));
	sg_hsm_stats st1, st2;
	sg_hsm_stats_get(h, &st1);
	SG_CHECK(!strcmp(st1.last_fault, "C_Login: CKR_PIN_INCORRECT"));
	SG_CHECK(st1.state == SG_HSM_DOWN);
	uint64_t t0 = sg_now_ns();
	SG_CHECK_RC(sign_verify(h, s, 0, &ok), SG_EAUTH);
	SG_CHECK(sg_now_ns() - t0 < 500000000u); /* no backoff, no login */
	sg_hsm_stats_get(h, &st2);
	SG_CHECK(st2.faults == st1.faults); /* not a single PKCS#11 call failed */
	sg_hsm_session *s2 = NULL;
	SG_CHECK_RC(sg_hsm_session_open(&s2, h), SG_EAUTH);
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	fx_free(&x);
}

/* --- concurrency ------------------------------------------------------- */

/* The injector waits until no signer is inside sg_hsm_sign before it closes
 * the sessions: SoftHSM2 2.6.1 frees a session that C_CloseAllSessions (or a
 * C_Logout, for private session objects) closes under a running C_Sign and
 * crashes (softhsm/SoftHSMv2#688). Faults still land between signatures of
 * all four threads at once, so every session recovers concurrently with the
 * others signing or recovering. */
static atomic_bool gate_closed;
static atomic_int gate_inside;

static void gate_enter(void)
{
	for (;;) {
		while (atomic_load(&gate_closed))
			sched_yield();
		atomic_fetch_add(&gate_inside, 1);
		if (!atomic_load(&gate_closed))
			return;
		atomic_fetch_sub(&gate_inside, 1);
	}
}

static void gate_leave(void)
{
	atomic_fetch_sub(&gate_inside, 1);
}

static void gate_close(void)
{
	atomic_store(&gate_closed, true);
	while (atomic_load(&gate_inside) > 0)
		sched_yield();
}

static void gate_open(void)
{
	atomic_store(&gate_closed, false);
}

static void *sign_worker(void *arg)
{
	signer *w = arg;
	sg_hsm_session *s = NULL;
	/* Opening a session is PKCS#11 work too: inside the gate, so a fault is
	 * never injected halfway through it (SoftHSM2 cannot take that). */
	gate_enter();
	int orc = sg_hsm_session_open(&s, w->h);
	gate_leave();
	if (orc != 0) {
		fprintf(stderr, "signer: session open failed %d: %s\n", orc, sg_error_last()->msg);
		w->unclean++;
		return NULL;
	}
	/* Until told to stop: the test paces its faults by what the signers
	 * do, so they must not run out first. */
	while (!atomic_load(w->stop)) {
		bool ok = false;
		gate_enter();
		int rc = sign_verify(w->h, s, sg_now_ns() + 3000000000u, &ok);
		gate_leave();
		if (rc == 0) {
			w->ok++;
			atomic_store(&w->ok_now, w->ok);
			w->verified += ok;
		} else {
			w->errors++;
			w->codes[-rc & 15]++;
			fprintf(stderr, "signer: clean error %d: %s\n", rc, sg_error_last()->msg);
			if (rc < SG_EINTERNAL || !sg_error_last()->msg[0])
				w->unclean++;
		}
	}
	gate_enter();
	sg_hsm_session_free(s);
	gate_leave();
	return NULL;
}

static void t_concurrent_faults(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "conc"));
	sg_hsm *h = NULL;
	SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=conc", "pkcs11:id=%30;object=conc", true, true));
	if (!h) {
		fx_free(&x);
		return;
	}
	SG_CHECK_OK(sg_hsm_generate_key(h, SG_KEY_EC_P256));
	CK_SLOT_ID slot = fx_slot(&x, "conc");
	atomic_bool stop;
	atomic_init(&stop, false);
	signer w[4];
	pthread_t th[4];
	signers_start(w, th, 4, h, &stop, sign_worker);
	/* Faults paced by what the signers do, not by fixed times a loaded
	 * machine can outlast: the first once a signature shows the signers
	 * at work, each next one once the last has been met (a session
	 * recovered from it), and the signers stopped once every one of them
	 * has signed. So every fault lands on sessions in use. */
	SG_WAIT_FOR(30000, stats(h).signatures >= 4);
	for (int k = 0; k < 6; k++) {
		gate_close();
		uint64_t before = stats(h).recoveries;
		if (k % 3 == 2)
			SG_CHECK(logout_slot(&x, slot) == CKR_OK);
		else
			SG_CHECK(x.f->C_CloseAllSessions(slot) == CKR_OK);
		gate_open();
		SG_WAIT_FOR(30000, stats(h).recoveries > before);
	}
	for (int i = 0; i < 4; i++)
		SG_WAIT_FOR(30000, atomic_load(&w[i].ok_now) > 0);
	signer_sum sum = signers_stop(w, th, 4, &stop, true);
	sg_hsm_stats st = stats(h);
	printf("concurrent: %d signed (%d verified), %d clean errors, %llu faults, %llu recoveries\n", sum.ok,
	       sum.verified, sum.errors, (unsigned long long)st.faults, (unsigned long long)st.recoveries);
	SG_CHECK(sum.verified == sum.ok);
	SG_CHECK(st.recoveries >= 4);
	SG_CHECK(st.sessions == 0);
	SG_CHECK(st.signatures == (uint64_t)sum.ok);
	sg_hsm_free(h);
	fx_free(&x);
}

/* --- several tokens ---------------------------------------------------- */

static void t_two_tokens_same_key(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "multi-a"));
	SG_CHECK_OK(fx_token(&x, "multi-b"));
	const char *turi = "pkcs11:manufacturer=SoftHSM%20project";
	const char *kuri = "pkcs11:id=%aa%bb;object=shared";
	static const uint8_t id[] = {0xaa, 0xbb};
	sg_hsm *h = NULL;
	SG_CHECK_OK(fx_open(&x, &h, turi, kuri, true, true));
	if (!h) {
		fx_free(&x);
		return;
	}
	SG_CHECK(sg_hsm_token_count(h) == 2);
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	SG_CHECK(pk != NULL);
	CK_SLOT_ID sa = fx_slot(&x, "multi-a"), sb = fx_slot(&x, "multi-b");
	SG_CHECK(import_ec(&x, sa, id, sizeof(id), "shared", pk, false) == CKR_OK);
	SG_CHECK(import_ec(&x, sb, id, sizeof(id), "shared", pk, false) == CKR_OK);
	sg_hsm_free(h);

	h = NULL;
	SG_CHECK_OK(fx_open(&x, &h, turi, kuri, true, false));
	if (!h) {
		EVP_PKEY_free(pk);
		fx_free(&x);
		return;
	}
	SG_CHECK(sg_hsm_token_count(h) == 2);
	uint8_t *spki = NULL, *want = NULL;
	size_t spki_len = 0;
	SG_CHECK_OK(sg_hsm_public_key(h, &spki, &spki_len));
	int want_len = i2d_PUBKEY(pk, &want);
	SG_CHECK(want_len > 0 && (size_t)want_len == spki_len && !memcmp(spki, want, spki_len));
	OPENSSL_free(want);
	free(spki);

	sg_hsm_session *s[4] = {0};
	for (int i = 0; i < 4; i++) {
		SG_CHECK_OK(sg_hsm_session_open(&s[i], h));
		if (!s[i])
			continue;
		SG_CHECK(sg_hsm_session_token(s[i]) == (size_t)(i % 2));
		SG_CHECK(sg_hsm_session_uses_copy(s[i]));
		bool ok = false;
		SG_CHECK_OK(sign_verify(h, s[i], 0, &ok));
		SG_CHECK(ok);
	}

	/* Token b loses its login and its PIN changes: its sessions fail with
	 * SG_EAUTH, the health is DEGRADED, token a keeps signing and new
	 * sessions go to token a only. */
	CK_SESSION_HANDLE sh;
	SG_CHECK(x.f->C_OpenSession(sb, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &sh) == CKR_OK);
	SG_CHECK(x.f->C_SetPIN(sh, (CK_UTF8CHAR_PTR) "1234", 4, (CK_UTF8CHAR_PTR) "4321", 4) == CKR_OK);
	SG_CHECK(x.f->C_Logout(sh) == CKR_OK);
	x.f->C_CloseSession(sh);
	/* sg_hsm keeps the tokens in C_GetSlotList order. */
	CK_SLOT_ID slots[32];
	CK_ULONG nslots = 32;
	SG_CHECK(x.f->C_GetSlotList(CK_TRUE, slots, &nslots) == CKR_OK);
	CK_ULONG pa = 0, pb = 0;
	for (CK_ULONG i = 0; i < nslots; i++) {
		pa = slots[i] == sa ? i : pa;
		pb = slots[i] == sb ? i : pb;
	}
	size_t ib = pb < pa ? 0 : 1;
	size_t ia = 1 - ib;
	bool ok = false;
	SG_CHECK_RC(sign_verify(h, s[ib], 0, &ok), SG_EAUTH); /* s[i] is on token i % 2 */
	SG_CHECK_OK(sign_verify(h, s[ia], 0, &ok));
	SG_CHECK(ok);
	sg_hsm_stats st;
	sg_hsm_stats_get(h, &st);
	SG_CHECK(st.state == SG_HSM_DEGRADED);
	sg_hsm_session *extra = NULL;
	SG_CHECK_OK(sg_hsm_session_open(&extra, h));
	SG_CHECK(extra && sg_hsm_session_token(extra) == ia);
	sg_hsm_session_free(extra);
	for (int i = 0; i < 4; i++)
		sg_hsm_session_free(s[i]);
	sg_hsm_free(h);
	EVP_PKEY_free(pk);
	fx_free(&x);
}

static void t_two_tokens_different_keys(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "diff-a"));
	SG_CHECK_OK(fx_token(&x, "diff-b"));
	const char *turi = "pkcs11:manufacturer=SoftHSM%20project";
	const char *kuri = "pkcs11:id=%01;object=ca";
	static const uint8_t id[] = {0x01};
	sg_hsm *h = NULL;
	SG_CHECK_OK(fx_open(&x, &h, turi, kuri, false, true));
	if (!h) {
		fx_free(&x);
		return;
	}
	EVP_PKEY *k1 = EVP_EC_gen("P-256"), *k2 = EVP_EC_gen("P-256");
	SG_CHECK(import_ec(&x, fx_slot(&x, "diff-a"), id, 1, "ca", k1, false) == CKR_OK);
	SG_CHECK(import_ec(&x, fx_slot(&x, "diff-b"), id, 1, "ca", k2, true) == CKR_OK);
	sg_hsm_free(h);
	h = NULL;
	SG_CHECK_RC(fx_open(&x, &h, turi, kuri, false, false), SG_EINVAL);
	SG_CHECK_MSG("different keys");
	SG_CHECK(h == NULL);
	/* Only one of them selected: fine. Token b stores its CKA_EC_POINT
	 * raw, without the OCTET STRING: the SPKI is the same. */
	SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=diff-b", kuri, false, false));
	uint8_t *spki = NULL, *want = NULL;
	size_t spki_len = 0;
	SG_CHECK_OK(sg_hsm_public_key(h, &spki, &spki_len));
	int want_len = i2d_PUBKEY(k2, &want);
	SG_CHECK(want_len > 0 && (size_t)want_len == spki_len && spki && !memcmp(spki, want, spki_len));
	OPENSSL_free(want);
	free(spki);
	sg_hsm_session *s = NULL;
	bool ok = false;
	SG_CHECK_OK(sg_hsm_session_open(&s, h));
	SG_CHECK_OK(sign_verify(h, s, 0, &ok));
	SG_CHECK(ok);
	sg_hsm_session_free(s);
	sg_hsm_free(h);
	EVP_PKEY_free(k1);
	EVP_PKEY_free(k2);
	fx_free(&x);
}

/* --- rough sign rates (printed, not asserted) -------------------------- */

typedef struct rate_arg {
	sg_hsm *h;
	bool ec;
	uint64_t until;
	long n;
} rate_arg;

static void *rate_worker(void *arg)
{
	rate_arg *a = arg;
	sg_hsm_session *s = NULL;
	if (sg_hsm_session_open(&s, a->h) != 0)
		return NULL;
	uint8_t digest[32] = {1}, in[64], sig[512];
	size_t inlen = sign_input(a->ec, digest, in);
	while (sg_now_ns() < a->until) {
		size_t siglen = sizeof(sig);
		if (sg_hsm_sign(s, a->ec ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, in, inlen, sig, &siglen, 0) == 0)
			a->n++;
	}
	sg_hsm_session_free(s);
	return NULL;
}

static double measure(sg_hsm *h, bool ec, int threads)
{
	rate_arg a[4];
	pthread_t th[4];
	uint64_t t0 = sg_now_ns();
	for (int i = 0; i < threads; i++) {
		a[i] = (rate_arg){h, ec, t0 + 300000000u, 0};
		pthread_create(&th[i], NULL, rate_worker, &a[i]);
	}
	long n = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		n += a[i].n;
	}
	return (double)n / ((double)(sg_now_ns() - t0) / 1e9);
}

static void t_sign_rates(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "rate"));
	static const struct {
		sg_key_type type;
		const char *uri;
	} keys[] = {{SG_KEY_EC_P256, "pkcs11:id=%01;object=p256"}, {SG_KEY_RSA_2048, "pkcs11:id=%02;object=rsa"}};
	for (size_t k = 0; k < 2; k++) {
		sg_hsm *h = NULL;
		SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=rate", keys[k].uri, false, true));
		if (!h)
			break;
		SG_CHECK_OK(sg_hsm_generate_key(h, keys[k].type));
		sg_hsm_free(h);
		for (int copy = 0; copy < 2; copy++) {
			h = NULL;
			SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=rate", keys[k].uri, copy, false));
			if (!h)
				continue;
			bool ec = sg_key_type_is_ec(keys[k].type);
			double r1 = measure(h, ec, 1), r4 = measure(h, ec, 4);
			printf("rate %-10s copy=%d: %8.0f sig/s (1 thread), %8.0f sig/s (4 threads)\n",
			       sg_key_type_name(keys[k].type), copy, r1, r4);
			SG_CHECK(r1 > 0 && r4 > 0);
			sg_hsm_free(h);
		}
	}
	fx_free(&x);
}

SG_TEST_MAIN(SG_TEST(t_recover), SG_TEST(t_wrong_pin_not_retried), SG_TEST(t_concurrent_faults),
             SG_TEST(t_two_tokens_same_key), SG_TEST(t_two_tokens_different_keys), SG_TEST(t_sign_rates))
