/*
 * Tests of sg_hsm against real SoftHSM2 tokens: provisioning, the five key
 * types (generate, sign, verify with OpenSSL), key attributes, URIs and the
 * not-found / PIN errors. Each case gets its own token directory (the
 * fixture is in hsm_fixture.h).
 */
#include "hsm_fixture.h"
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <pthread.h>
#include <stdatomic.h>

/* --- cases ------------------------------------------------------------- */

static void t_key_type_names(void)
{
	for (int i = 0; i < SG_KEY_TYPE_COUNT; i++) {
		sg_key_type t;
		SG_CHECK_OK(sg_key_type_parse(sg_key_type_name((sg_key_type)i), &t));
		SG_CHECK(t == (sg_key_type)i);
		SG_CHECK(sg_key_type_is_ec(t) == (i <= SG_KEY_EC_P384));
	}
	sg_key_type t;
	SG_CHECK_RC(sg_key_type_parse("rsa-1024", &t), SG_EINVAL);
	SG_CHECK_RC(sg_key_type_parse("", &t), SG_EINVAL);
	SG_CHECK(!strcmp(sg_key_type_name(SG_KEY_TYPE_COUNT), "unknown"));

	char buf[64];
	SG_CHECK(sg_hsm_key_uses_text(0, buf, sizeof(buf)) == 0 && buf[0] == 0);
	SG_CHECK(sg_hsm_key_uses_text(SG_HSM_USE_DECRYPT | SG_HSM_USE_UNWRAP, buf, sizeof(buf)) == 15);
	SG_CHECK(!strcmp(buf, "decrypt, unwrap"));
	unsigned all = SG_HSM_USE_DECRYPT | SG_HSM_USE_UNWRAP | SG_HSM_USE_DERIVE | SG_HSM_USE_SIGN_RECOVER;
	size_t need = sg_hsm_key_uses_text(all, buf, sizeof(buf));
	SG_CHECK(need == strlen("decrypt, unwrap, derive, sign-recover") && !strcmp(buf, "decrypt, unwrap, derive, sign-recover"));
	char small[8];
	SG_CHECK(sg_hsm_key_uses_text(all, small, sizeof(small)) == need && strlen(small) == 7);
}

/* Reads a bool attribute of the private key labelled label through a
 * direct session; checks that the secret value is refused. */
static void check_key_attributes(fx *x, CK_SLOT_ID slot, const char *label, bool ec)
{
	CK_SESSION_HANDLE sh;
	SG_CHECK(x->f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &sh) == CKR_OK);
	CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
	CK_ATTRIBUTE q[] = {{CKA_CLASS, &cls, sizeof(cls)}, {CKA_LABEL, (void *)label, strlen(label)}};
	CK_OBJECT_HANDLE o = 0;
	CK_ULONG n = 0;
	SG_CHECK(x->f->C_FindObjectsInit(sh, q, 2) == CKR_OK);
	SG_CHECK(x->f->C_FindObjects(sh, &o, 1, &n) == CKR_OK && n == 1);
	x->f->C_FindObjectsFinal(sh);
	CK_BBOOL sens = CK_FALSE, extr = CK_TRUE, tok = CK_FALSE, priv = CK_FALSE;
	CK_ATTRIBUTE a[] = {
	    {CKA_SENSITIVE, &sens, 1}, {CKA_EXTRACTABLE, &extr, 1}, {CKA_TOKEN, &tok, 1}, {CKA_PRIVATE, &priv, 1}};
	SG_CHECK(x->f->C_GetAttributeValue(sh, o, a, 4) == CKR_OK);
	SG_CHECK(sens == CK_TRUE && extr == CK_FALSE && tok == CK_TRUE && priv == CK_TRUE);
	uint8_t buf[1024];
	CK_ATTRIBUTE v = {ec ? CKA_VALUE : CKA_PRIVATE_EXPONENT, buf, sizeof(buf)};
	SG_CHECK(x->f->C_GetAttributeValue(sh, o, &v, 1) == CKR_ATTRIBUTE_SENSITIVE);
	/* Signing only: SoftHSM2's defaults would add decrypt and unwrap. */
	CK_BBOOL sign = CK_FALSE, dec = CK_TRUE, unw = CK_TRUE, der = CK_TRUE, rec = CK_TRUE;
	CK_ATTRIBUTE u[] = {{CKA_SIGN, &sign, 1},   {CKA_DECRYPT, &dec, 1},     {CKA_UNWRAP, &unw, 1},
	                    {CKA_DERIVE, &der, 1}, {CKA_SIGN_RECOVER, &rec, 1}};
	SG_CHECK(x->f->C_GetAttributeValue(sh, o, u, 5) == CKR_OK);
	SG_CHECK(sign == CK_TRUE && dec == CK_FALSE && unw == CK_FALSE && der == CK_FALSE && rec == CK_FALSE);
	/* The public key verifies and nothing else. */
	cls = CKO_PUBLIC_KEY;
	SG_CHECK(x->f->C_FindObjectsInit(sh, q, 2) == CKR_OK);
	SG_CHECK(x->f->C_FindObjects(sh, &o, 1, &n) == CKR_OK && n == 1);
	x->f->C_FindObjectsFinal(sh);
	CK_BBOOL ver = CK_FALSE, enc = CK_TRUE, wrap = CK_TRUE, vrec = CK_TRUE;
	CK_ATTRIBUTE p[] = {{CKA_VERIFY, &ver, 1}, {CKA_ENCRYPT, &enc, 1}, {CKA_WRAP, &wrap, 1},
	                    {CKA_VERIFY_RECOVER, &vrec, 1}};
	SG_CHECK(x->f->C_GetAttributeValue(sh, o, p, 4) == CKR_OK);
	SG_CHECK(ver == CK_TRUE && enc == CK_FALSE && wrap == CK_FALSE && vrec == CK_FALSE);
	x->f->C_CloseSession(sh);
}

/* What sg_hsm_key_info_get reports of a key signet generated. */
static void check_key_info(const sg_hsm *h)
{
	sg_hsm_key_info ki;
	SG_CHECK_OK(sg_hsm_key_info_get(h, &ki));
	SG_CHECK(ki.sensitive && !ki.extractable && ki.sign && ki.other_uses == 0);
}

/* Generates each of the five key types, signs through a session, verifies
 * with OpenSSL against sg_hsm_public_key, checks the key's attributes, and
 * finds the key again with a fresh sg_hsm. */
static void t_generate_sign_verify(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "gen"));
	for (int i = 0; i < SG_KEY_TYPE_COUNT; i++) {
		sg_key_type type = (sg_key_type)i;
		char key_uri[128], label[32];
		snprintf(label, sizeof(label), "ca-%s", sg_key_type_name(type));
		snprintf(key_uri, sizeof(key_uri), "pkcs11:id=%%%02x;object=%s", i + 1, label);
		sg_hsm *h = NULL;
		SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=gen", key_uri, true, true));
		if (!h)
			break;
		sg_key_type got;
		SG_CHECK_RC(sg_hsm_key_type(h, &got), SG_ENOTFOUND);
		sg_hsm_key_info ki;
		SG_CHECK_RC(sg_hsm_key_info_get(h, &ki), SG_ENOTFOUND);
		sg_hsm_session *s = NULL;
		SG_CHECK_RC(sg_hsm_session_open(&s, h), SG_ENOTFOUND);
		SG_CHECK_OK(sg_hsm_generate_key(h, type));
		SG_CHECK_OK(sg_hsm_key_type(h, &got));
		SG_CHECK(got == type);
		SG_CHECK_RC(sg_hsm_generate_key(h, type), SG_EINVAL);
		SG_CHECK_OK(sg_hsm_session_open(&s, h));
		bool ok = false;
		SG_CHECK_OK(sign_verify(h, s, 0, &ok));
		SG_CHECK(ok);
		SG_CHECK(sg_hsm_session_uses_copy(s));
		check_key_attributes(&x, fx_slot(&x, "gen"), label, sg_key_type_is_ec(type));
		check_key_info(h);
		sg_hsm_session_free(s);
		sg_hsm_free(h);

		/* A fresh handle finds the generated key by id and label. */
		h = NULL;
		SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=gen", key_uri, false, false));
		if (!h)
			continue;
		SG_CHECK_OK(sg_hsm_key_type(h, &got));
		SG_CHECK(got == type);
		SG_CHECK(sg_hsm_token_count(h) == 1);
		check_key_info(h); /* as read from the token at open */
		s = NULL;
		SG_CHECK_OK(sg_hsm_session_open(&s, h));
		SG_CHECK(!sg_hsm_session_uses_copy(s));
		SG_CHECK_OK(sign_verify(h, s, sg_now_ns() + 5000000000u, &ok));
		SG_CHECK(ok);
		sg_hsm_stats st;
		sg_hsm_stats_get(h, &st);
		SG_CHECK(st.state == SG_HSM_OK && st.signatures == 1 && st.sessions == 1 && st.faults == 0);
		SG_CHECK(st.last_fault[0] == '\0');

		/* Wrong mechanism, small buffer: SG_EINVAL without a fault. */
		uint8_t in[64] = {0}, sig[512];
		size_t siglen = 16;
		bool ec = sg_key_type_is_ec(type);
		SG_CHECK_RC(sg_hsm_sign(s, ec ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, in, 32, sig, &siglen, 0), SG_EINVAL);
		siglen = sizeof(sig);
		SG_CHECK_RC(sg_hsm_sign(s, ec ? SG_HSM_RSA_PKCS : SG_HSM_ECDSA, in, 32, sig, &siglen, 0), SG_EINVAL);
		sg_hsm_session_free(s);
		sg_hsm_free(h);
	}
	fx_free(&x);
}

static void t_uri_errors(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "uri"));
	sg_hsm *h = NULL;
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=uri;pin-value=1234", "pkcs11:object=k", false, true), SG_EINVAL);
	SG_CHECK_MSG("pin-value");
	SG_CHECK(!strstr(sg_error_last()->msg, "1234"));
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=uri", "pkcs11:object=k?pin-value=1234", false, true), SG_EINVAL);
	SG_CHECK_MSG("pin-value");
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=uri", "pkcs11:object=k;pin-value=1234", false, true), SG_EINVAL);
	SG_CHECK(!strstr(sg_error_last()->msg, "1234"));
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=%zz", "pkcs11:object=k", false, true), SG_EINVAL);
	SG_CHECK_MSG("malformed token URI");
	SG_CHECK_RC(fx_open(&x, &h, "https://example.com/", "pkcs11:object=k", false, true), SG_EINVAL);
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=uri", "pkcs11:", false, true), SG_EINVAL);
	SG_CHECK_MSG("names no key");
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=uri", "pkcs11:object=k;type=cert", false, true), SG_EINVAL);
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=uri", "", false, true), SG_EINVAL);
	SG_CHECK(h == NULL);

	/* A full key URI may serve as the token URI; unknown attributes not. */
	SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=uri;object=k", "pkcs11:token=uri;object=k", false, true));
	sg_hsm_free(h);
	h = NULL;
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:tokn=uri", "pkcs11:object=k", false, true), SG_EINVAL);
	SG_CHECK_MSG("does not understand");

	/* Generation needs both id and label. */
	SG_CHECK_OK(fx_open(&x, &h, "pkcs11:token=uri", "pkcs11:object=only-label", false, true));
	SG_CHECK_RC(sg_hsm_generate_key(h, SG_KEY_EC_P256), SG_EINVAL);
	SG_CHECK_MSG("both id= and object=");
	sg_hsm_free(h);
	fx_free(&x);
}

static void t_not_found_and_auth(void)
{
	fx x;
	fx_init(&x);
	SG_CHECK_OK(fx_token(&x, "nf"));
	SG_CHECK_RC(fx_token(&x, "nf"), SG_EINVAL); /* duplicate label refused */
	SG_CHECK_MSG("exists already");
	sg_hsm *h = NULL;
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=missing", "pkcs11:object=k", false, false), SG_ENOTFOUND);
	SG_CHECK_MSG("no initialised token");
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=nf", "pkcs11:id=%01;object=k", false, false), SG_ENOTFOUND);
	SG_CHECK_MSG("no private key");
	/* The key URI's token attributes must match too. */
	SG_CHECK_RC(fx_open(&x, &h, "pkcs11:token=nf", "pkcs11:token=other;object=k", false, true), SG_ENOTFOUND);

	sg_hsm_options o = {.module_path = "/nonexistent/libnothing.so",
	                    .token_uri = "pkcs11:token=nf",
	                    .key_uri = "pkcs11:object=k",
	                    .pin = x.pin,
	                    .softhsm_conf = x.conf};
	SG_CHECK_RC(sg_hsm_open(&h, &o), SG_ENOTFOUND);

	sg_secret *bad = NULL;
	SG_CHECK_OK(sg_secret_new(&bad, "0000", 4));
	o.module_path = x.module;
	o.pin = bad;
	o.allow_missing_key = true;
	SG_CHECK_RC(sg_hsm_open(&h, &o), SG_EAUTH);
	SG_CHECK_MSG("CKR_PIN_INCORRECT");
	SG_CHECK(!strstr(sg_error_last()->msg, "0000"));
	/* Login is process-wide: while another handle is logged in, SoftHSM2
	 * answers CKR_USER_ALREADY_LOGGED_IN without looking at the PIN, so a
	 * second handle opens even with a wrong one (documented limit). */
	sg_hsm *good = NULL;
	SG_CHECK_OK(fx_open(&x, &good, "pkcs11:token=nf", "pkcs11:object=k", false, true));
	SG_CHECK_OK(sg_hsm_open(&h, &o));
	sg_hsm_free(h);
	h = NULL;
	sg_hsm_free(good);
	sg_secret_free(bad);
	SG_CHECK(h == NULL);
	fx_free(&x);
}

SG_TEST_MAIN(SG_TEST(t_key_type_names), SG_TEST(t_generate_sign_verify), SG_TEST(t_uri_errors),
             SG_TEST(t_not_found_and_auth))
