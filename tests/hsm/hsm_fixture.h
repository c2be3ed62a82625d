/*
 * hsm_fixture: the SoftHSM2 fixture shared by the sg_hsm test programs
 * (test_hsm.c, test_hsm_faults.c). Each case gets a private token directory
 * with its own softhsm2.conf, the PINs as sg_secrets, and the module's
 * function list loaded through dlopen, which is the same module instance
 * sg_hsm uses, so a test can inspect or disturb the token directly. Also the
 * OpenSSL side: verifying what sg_hsm signed and importing keys with
 * C_CreateObject. Kept in one place so both programs test against the same
 * setup. Header-only, as each test file is its own program; every function
 * is static and marked unused, so a program that needs only some of them
 * still builds under -Werror.
 */
#ifndef HSM_FIXTURE_H
#define HSM_FIXTURE_H

#include "sg_hsm.h"

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
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
