/*
 * Fuzz target for ECDSA P-256 verification with a prepared key
 * (sg_jwk_prepare: the key's multiples precomputed, and the verification
 * equation composed in signer/sg_crypto.c) against the same key verified
 * by OpenSSL's own ECDSA_do_verify (a key not prepared).
 *
 * The first input byte picks the mode (its value mod 3):
 *   0: the next 64 bytes are r || s and the rest is the message, as they
 *      come;
 *   1: the rest is the message, signed here with the private half of the
 *      key (a test key, checked in on purpose); the signature, its twin
 *      (r, n - s) and the signature with one byte changed (where and how:
 *      the message's first and last bytes) are verified;
 *   2: a signature made so that R = u1·G + u2·Q is t·G for a small t of
 *      the input's choosing: with the private scalar d, r = (t·s - e)/d.
 *      t = 0 puts R at infinity; r = e/d (flag bit) makes u1·G = u2·Q, so
 *      the final addition is a doubling. Almost none of these verify: what
 *      they reach are the edge cases of the arithmetic.
 *
 * Oracles: both keys give the same answer, and it is SG_OK or SG_EAUTH,
 * never a fault; a signature made with the key verifies, and so does its
 * twin.
 */
#include "sg_jwk.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Test-only key. */
static const char ec_pem[] = "-----BEGIN PRIVATE KEY-----\n"
                             "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgKxK3ZsfUa18fNoT5\n"
                             "mrjvvG8gAXloyowUydQnVSM/NdChRANCAAS1C36EfVGeKvv2o4cCgJr1Pa5VzUse\n"
                             "fNzg7i1eerDV0L2/EWVWJaIkPuTjdzL35zNqeq8txcT09vTvPsyiuGWL\n"
                             "-----END PRIVATE KEY-----\n";

static EVP_PKEY *signer;
static sg_jwk *plain, *prepared;
static BIGNUM *order, *priv;
static BN_CTX *bctx;

static void check(int cond)
{
	if (!cond)
		abort();
}

static void init(void)
{
	if (signer)
		return;
	BIO *b = BIO_new_mem_buf(ec_pem, -1);
	signer = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	BIO_free(b);
	check(signer != NULL);
	uint8_t pub[65];
	size_t n = 0;
	check(EVP_PKEY_get_octet_string_param(signer, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub), &n) == 1 && n == 65);
	check(sg_jwk_new_ec(&plain, "P-256", pub + 1, 32, pub + 33, 32) == 0);
	check(sg_jwk_new_ec(&prepared, "P-256", pub + 1, 32, pub + 33, 32) == 0);
	check(sg_jwk_prepare(prepared) == 0 && sg_jwk_prepared(prepared));
	check(EVP_PKEY_get_bn_param(signer, OSSL_PKEY_PARAM_PRIV_KEY, &priv) == 1);
	check(BN_hex2bn(&order, "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551") > 0);
	bctx = BN_CTX_new();
	check(bctx != NULL);
}

/* Both keys' answer, which must agree. */
static int verify(const uint8_t *msg, size_t len, const uint8_t sig[64])
{
	int a = sg_jwk_verify(plain, SG_JWK_ECDSA, SG_HASH_SHA256, msg, len, sig, 64);
	int b = sg_jwk_verify(prepared, SG_JWK_ECDSA, SG_HASH_SHA256, msg, len, sig, 64);
	check(a == 0 || a == SG_EAUTH);
	check(b == a);
	return a;
}

static void to_sig(const BIGNUM *r, const BIGNUM *s, uint8_t sig[64])
{
	check(BN_bn2binpad(r, sig, 32) == 32 && BN_bn2binpad(s, sig + 32, 32) == 32);
}

static void signed_here(const uint8_t *msg, size_t len)
{
	uint8_t der[80], sig[64];
	size_t dlen = sizeof(der);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	check(ctx && EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, signer) == 1 &&
	      EVP_DigestSign(ctx, der, &dlen, msg, len) == 1);
	EVP_MD_CTX_free(ctx);
	const uint8_t *p = der;
	ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)dlen);
	check(es != NULL);
	to_sig(ECDSA_SIG_get0_r(es), ECDSA_SIG_get0_s(es), sig);
	check(verify(msg, len, sig) == 0);
	BIGNUM *twin = BN_new();
	check(twin && BN_sub(twin, order, ECDSA_SIG_get0_s(es)));
	to_sig(ECDSA_SIG_get0_r(es), twin, sig);
	check(verify(msg, len, sig) == 0);
	BN_free(twin);
	ECDSA_SIG_free(es);
	if (len > 0) {
		sig[msg[0] % 64] ^= (uint8_t)(msg[len - 1] | 1);
		(void)verify(msg, len, sig);
	}
}

static void crafted(const uint8_t *data, size_t size)
{
	/* t (2 bytes), a flag byte, s (32 bytes), then the message. */
	if (size < 35)
		return;
	unsigned t = (unsigned)data[0] << 8 | data[1];
	bool doubling = data[2] & 1;
	const uint8_t *msg = data + 35;
	size_t len = size - 35;
	uint8_t dg[32], sig[64];
	check(EVP_Digest(msg, len, dg, NULL, EVP_sha256(), NULL) == 1);
	BN_CTX_start(bctx);
	BIGNUM *e = BN_CTX_get(bctx), *s = BN_CTX_get(bctx), *r = BN_CTX_get(bctx), *dinv = BN_CTX_get(bctx);
	check(dinv && BN_bin2bn(dg, 32, e) && BN_bin2bn(data + 3, 32, s) && BN_nnmod(s, s, order, bctx));
	if (BN_is_zero(s))
		check(BN_one(s));
	check(BN_mod_inverse(dinv, priv, order, bctx) != NULL);
	if (doubling) {
		check(BN_mod_mul(r, e, dinv, order, bctx)); /* e = r·d: u1·G = u2·Q */
	} else {
		check(BN_set_word(r, t) && BN_mod_mul(r, r, s, order, bctx) && BN_mod_sub(r, r, e, order, bctx) &&
		      BN_mod_mul(r, r, dinv, order, bctx));
	}
	to_sig(r, s, sig);
	(void)verify(msg, len, sig);
	BN_CTX_end(bctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init();
	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0:
		if (size >= 65)
			(void)verify(data + 65, size - 65, data + 1);
		break;
	case 1:
		signed_here(data + 1, size - 1);
		break;
	default:
		crafted(data + 1, size - 1);
	}
	return 0;
}
