/*
 * Tests of sg_hsm against real SoftHSM2 tokens: provisioning, the five key
 * types (generate, sign, verify with OpenSSL), key attributes, URIs and the
 * not-found / PIN errors. Each case gets its own token directory.
 */
#include "sg_clock.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <dirent.h>
#include <dlfcn.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <p11-kit/pkcs11.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- fixture: a private SoftHSM2 token directory per test case ---------- */

typedef struct fx {
	char dir[600];
	char conf[700];
	const char *module;
	sg_secret *pin;
	sg_secret *so;
	CK_FUNCTION_LIST_PTR f; /* the same module instance, for direct checks */
} fx;

static __attribute__((unused)) void rm_rf(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			char sub[1200];
			snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
			rm_rf(sub);
		}
		closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

static __attribute__((unused)) void fx_init(fx *x)
{
	memset(x, 0, sizeof(*x));
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(x->dir, sizeof(x->dir), "%s/hsm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(x->dir)) {
		perror("mkdtemp");
		exit(2);
	}
	char tokens[700];
	snprintf(tokens, sizeof(tokens), "%s/tokens", x->dir);
	mkdir(tokens, 0700);
	snprintf(x->conf, sizeof(x->conf), "%s/softhsm2.conf", x->dir);
	FILE *fp = fopen(x->conf, "w");
	if (!fp) {
		perror("fopen");
		exit(2);
	}
	fprintf(fp, "directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n", tokens);
	fclose(fp);
	const char *m = getenv("SIGNET_SOFTHSM_MODULE");
	x->module = m && *m ? m : "/usr/lib/softhsm/libsofthsm2.so";
	if (sg_secret_new(&x->pin, "1234", 4) || sg_secret_new(&x->so, "5678", 4))
		exit(2);
	void *dl = dlopen(x->module, RTLD_NOW | RTLD_LOCAL);
	CK_C_GetFunctionList gfl = dl ? (CK_C_GetFunctionList)dlsym(dl, "C_GetFunctionList") : NULL;
	if (!gfl || gfl(&x->f) != CKR_OK) {
		fprintf(stderr, "cannot load %s\n", x->module);
		exit(2);
	}
}

static __attribute__((unused)) void fx_free(fx *x)
{
	sg_secret_free(x->pin);
	sg_secret_free(x->so);
	rm_rf(x->dir);
}

static __attribute__((unused)) int fx_token(fx *x, const char *label)
{
	return sg_hsm_init_token(x->module, x->conf, NULL, label, x->so, x->pin);
}

static __attribute__((unused)) int fx_open(fx *x, sg_hsm **h, const char *token_uri, const char *key_uri, bool copy,
                                           bool allow_missing)
{
	sg_hsm_options o = {
	    .module_path = x->module,
	    .token_uri = token_uri,
	    .key_uri = key_uri,
	    .pin = x->pin,
	    .softhsm_conf = x->conf,
	    .copy_key = copy,
	    .allow_missing_key = allow_missing,
	};
	return sg_hsm_open(h, &o);
}

/* Slot of the initialised token labelled label (module must be live). */
static __attribute__((unused)) CK_SLOT_ID fx_slot(fx *x, const char *label)
{
	CK_SLOT_ID slots[32];
	CK_ULONG n = 32;
	if (x->f->C_GetSlotList(CK_TRUE, slots, &n) != CKR_OK)
		return (CK_SLOT_ID)-1;
	for (CK_ULONG i = 0; i < n; i++) {
		CK_TOKEN_INFO ti;
		if (x->f->C_GetTokenInfo(slots[i], &ti) != CKR_OK || !(ti.flags & CKF_TOKEN_INITIALIZED))
			continue;
		size_t len = strlen(label);
		if (memcmp(ti.label, label, len) == 0 && (len == 32 || ti.label[len] == ' '))
			return slots[i];
	}
	return (CK_SLOT_ID)-1;
}

/* --- signing and verification with OpenSSL ----------------------------- */

static const uint8_t sha256_prefix[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                        0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};

/* Verifies sig (raw r||s for EC, PKCS#1 v1.5 for RSA) over digest. */
static __attribute__((unused)) bool verify(const uint8_t *spki, size_t spki_len, const uint8_t digest[32],
                                           const uint8_t *sig, size_t siglen)
{
	const uint8_t *p = spki;
	EVP_PKEY *pk = d2i_PUBKEY(NULL, &p, (long)spki_len);
	if (!pk || p != spki + spki_len) {
		EVP_PKEY_free(pk);
		return false;
	}
	uint8_t der[256];
	const uint8_t *vs = sig;
	size_t vlen = siglen;
	bool ec = EVP_PKEY_get_base_id(pk) == EVP_PKEY_EC;
	if (ec) {
		ECDSA_SIG *es = ECDSA_SIG_new();
		BIGNUM *r = BN_bin2bn(sig, (int)siglen / 2, NULL);
		BIGNUM *s = BN_bin2bn(sig + siglen / 2, (int)siglen / 2, NULL);
		ECDSA_SIG_set0(es, r, s);
		uint8_t *dp = der;
		int n = i2d_ECDSA_SIG(es, &dp);
		ECDSA_SIG_free(es);
		if (n <= 0) {
			EVP_PKEY_free(pk);
			return false;
		}
		vs = der;
		vlen = (size_t)n;
	}
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new(pk, NULL);
	bool ok = ctx && EVP_PKEY_verify_init(ctx) == 1;
	if (ok && !ec)
		ok = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1 &&
		     EVP_PKEY_CTX_set_signature_md(ctx, EVP_sha256()) == 1;
	ok = ok && EVP_PKEY_verify(ctx, vs, vlen, digest, 32) == 1;
	EVP_PKEY_CTX_free(ctx);
	EVP_PKEY_free(pk);
	return ok;
}

/* Builds the sg_hsm_sign input for digest: the digest (EC) or DigestInfo. */
static __attribute__((unused)) size_t sign_input(bool ec, const uint8_t digest[32], uint8_t *in)
{
	if (ec) {
		memcpy(in, digest, 32);
		return 32;
	}
	memcpy(in, sha256_prefix, sizeof(sha256_prefix));
	memcpy(in + sizeof(sha256_prefix), digest, 32);
	return sizeof(sha256_prefix) + 32;
}

/* Signs a fresh random digest through s; returns the sg_hsm_sign result and
 * sets *verified. */
static __attribute__((unused)) int sign_verify(sg_hsm *h, sg_hsm_session *s, uint64_t deadline, bool *verified)
{
	sg_key_type kt;
	*verified = false;
	if (sg_hsm_key_type(h, &kt))
		return -100;
	bool ec = sg_key_type_is_ec(kt);
	uint8_t digest[32], in[64], sig[512];
	RAND_bytes(digest, sizeof(digest));
	size_t inlen = sign_input(ec, digest, in), siglen = sizeof(sig);
	int rc = sg_hsm_sign(s, ec ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, in, inlen, sig, &siglen, deadline);
	if (rc == 0) {
		uint8_t *spki = NULL;
		size_t spki_len = 0;
		if (sg_hsm_public_key(h, &spki, &spki_len) == 0)
			*verified = verify(spki, spki_len, digest, sig, siglen);
		free(spki);
	}
	return rc;
}

/* Imports an OpenSSL EC P-256 key as a private and a public token object;
 * CKA_EC_POINT wrapped in an OCTET STRING (as the spec says) or raw (as some
 * modules store it). */
static __attribute__((unused)) CK_RV import_ec(fx *x, CK_SLOT_ID slot, const uint8_t *id, size_t idlen,
                                               const char *label, EVP_PKEY *pk, bool raw_point)
{
	static const uint8_t p256[] = {0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
	uint8_t d[32], pub[65], point[67];
	size_t publen = 0;
	BIGNUM *bn = NULL;
	if (EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_PRIV_KEY, &bn) != 1 || BN_bn2binpad(bn, d, 32) != 32)
		return CKR_GENERAL_ERROR;
	BN_clear_free(bn);
	if (EVP_PKEY_get_octet_string_param(pk, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub), &publen) != 1 ||
	    publen != 65)
		return CKR_GENERAL_ERROR;
	point[0] = 0x04;
	point[1] = 65;
	memcpy(point + 2, pub, 65);
	CK_OBJECT_CLASS cpriv = CKO_PRIVATE_KEY, cpub = CKO_PUBLIC_KEY;
	CK_KEY_TYPE kt = CKK_EC;
	CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
	CK_ATTRIBUTE priv[] = {
	    {CKA_CLASS, &cpriv, sizeof(cpriv)},
	    {CKA_KEY_TYPE, &kt, sizeof(kt)},
	    {CKA_TOKEN, &yes, sizeof(yes)},
	    {CKA_PRIVATE, &yes, sizeof(yes)},
	    {CKA_SENSITIVE, &yes, sizeof(yes)},
	    {CKA_SIGN, &yes, sizeof(yes)},
	    {CKA_EXTRACTABLE, &no, sizeof(no)},
	    {CKA_EC_PARAMS, (void *)p256, sizeof(p256)},
	    {CKA_VALUE, d, sizeof(d)},
	    {CKA_ID, (void *)id, idlen},
	    {CKA_LABEL, (void *)label, strlen(label)},
	};
	CK_ATTRIBUTE pubt[] = {
	    {CKA_CLASS, &cpub, sizeof(cpub)},
	    {CKA_KEY_TYPE, &kt, sizeof(kt)},
	    {CKA_TOKEN, &yes, sizeof(yes)},
	    {CKA_VERIFY, &yes, sizeof(yes)},
	    {CKA_EC_PARAMS, (void *)p256, sizeof(p256)},
	    {CKA_EC_POINT, raw_point ? point + 2 : point, raw_point ? 65 : sizeof(point)},
	    {CKA_ID, (void *)id, idlen},
	    {CKA_LABEL, (void *)label, strlen(label)},
	};
	CK_SESSION_HANDLE sh;
	CK_RV rv = x->f->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &sh);
	if (rv != CKR_OK)
		return rv;
	CK_OBJECT_HANDLE o;
	rv = x->f->C_CreateObject(sh, priv, sizeof(priv) / sizeof(priv[0]), &o);
	if (rv == CKR_OK)
		rv = x->f->C_CreateObject(sh, pubt, sizeof(pubt) / sizeof(pubt[0]), &o);
	x->f->C_CloseSession(sh);
	OPENSSL_cleanse(d, sizeof(d));
	return rv;
}
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
	x->f->C_CloseSession(sh);
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
