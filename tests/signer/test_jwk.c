/*
 * Tests for sg_jwk (JWS verification keys from JWK parts): every JWS
 * algorithm against signatures OpenSSL makes here, keys that must not
 * build (weak, even exponent, off the curve, wrong sizes), signatures that
 * must not verify (altered, wrong length, wrong scheme, wrong PSS salt,
 * zero r and s), one key shared by threads verifying at once, and
 * Project Wycheproof's P-256 vectors through a prepared key and a plain
 * one (sg_jwk_prepare).
 */
#include "key_fixture.h"
#include "sg_jwk.h"
#include "sg_test.h"
#include "vector_fixture.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <pthread.h>
#include <stdio.h>

static const uint8_t msg[] = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0";
#define MSG_LEN (sizeof(msg) - 1)

static const char *md_name(sg_hash h)
{
	return h == SG_HASH_SHA256 ? "SHA256" : h == SG_HASH_SHA384 ? "SHA384" : "SHA512";
}

static sg_jwk *rsa_jwk(EVP_PKEY *k)
{
	BIGNUM *n = NULL, *e = NULL;
	uint8_t nb[1100], eb[16];
	if (EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &n) != 1 ||
	    EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &e) != 1)
		abort();
	int nl = BN_bn2bin(n, nb), el = BN_bn2bin(e, eb);
	BN_free(n);
	BN_free(e);
	sg_jwk *j = NULL;
	SG_CHECK_OK(sg_jwk_new_rsa(&j, nb, (size_t)nl, eb, (size_t)el, 2048, 8192));
	return j;
}

/* The uncompressed point of k, 0x04 || X || Y; returns the coordinate size. */
static size_t ec_point(EVP_PKEY *k, uint8_t *pub)
{
	size_t len = 0;
	if (EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, pub, 1 + 2 * 66, &len) != 1 || pub[0] != 4)
		abort();
	return (len - 1) / 2;
}

static sg_jwk *ec_jwk(EVP_PKEY *k, const char *crv)
{
	uint8_t pub[1 + 2 * 66];
	size_t c = ec_point(k, pub);
	sg_jwk *j = NULL;
	SG_CHECK_OK(sg_jwk_new_ec(&j, crv, pub + 1, c, pub + 1 + c, c));
	return j;
}

/* An OpenSSL signature over msg; for EC converted to JWS's r || s. */
static size_t sign(EVP_PKEY *k, sg_jwk_scheme scheme, sg_hash h, int pss_salt, uint8_t *sig)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	uint8_t der[1100];
	size_t len = sizeof(der);
	if (!ctx || EVP_DigestSignInit_ex(ctx, &pctx, md_name(h), NULL, NULL, k, NULL) != 1)
		abort();
	if (scheme == SG_JWK_RSA_PSS && (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
	                                 EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, pss_salt) != 1))
		abort();
	if (EVP_DigestSign(ctx, der, &len, msg, MSG_LEN) != 1)
		abort();
	EVP_MD_CTX_free(ctx);
	if (scheme != SG_JWK_ECDSA) {
		memcpy(sig, der, len);
		return len;
	}
	uint8_t pub[1 + 2 * 66];
	size_t c = ec_point(k, pub);
	const unsigned char *p = der;
	ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)len);
	if (!es || BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, (int)c) < 0 ||
	    BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + c, (int)c) < 0)
		abort();
	ECDSA_SIG_free(es);
	return 2 * c;
}

static void check_alg(EVP_PKEY *k, sg_jwk *j, sg_jwk_scheme scheme, sg_hash h)
{
	uint8_t sig[1100];
	size_t len = sign(k, scheme, h, RSA_PSS_SALTLEN_DIGEST, sig);
	SG_CHECK_OK(sg_jwk_verify(j, scheme, h, msg, MSG_LEN, sig, len));
	/* Another message, an altered signature, a short one. */
	SG_CHECK_RC(sg_jwk_verify(j, scheme, h, msg, MSG_LEN - 1, sig, len), SG_EAUTH);
	SG_CHECK_MSG("signature does not verify");
	SG_CHECK(ERR_peek_error() == 0);
	sig[len / 2] ^= 0x10;
	SG_CHECK_RC(sg_jwk_verify(j, scheme, h, msg, MSG_LEN, sig, len), SG_EAUTH);
	sig[len / 2] ^= 0x10;
	SG_CHECK_RC(sg_jwk_verify(j, scheme, h, msg, MSG_LEN, sig, len - 1), SG_EAUTH);
	SG_CHECK_MSG("the key needs");
	/* The same signature under another hash. */
	sg_hash other = h == SG_HASH_SHA256 ? SG_HASH_SHA384 : SG_HASH_SHA256;
	SG_CHECK_RC(sg_jwk_verify(j, scheme, other, msg, MSG_LEN, sig, len), SG_EAUTH);
}

static void t_rsa(void)
{
	EVP_PKEY *k = key_of("rsa2048");
	sg_jwk *j = rsa_jwk(k);
	const sg_jwk_info *i = sg_jwk_get_info(j);
	SG_CHECK(i->kind == SG_PUBKEY_RSA && i->bits == 2048 && i->size == 256 && i->crv == NULL);
	for (sg_hash h = SG_HASH_SHA256; h <= SG_HASH_SHA512; h++) {
		check_alg(k, j, SG_JWK_RSA_PKCS1, h);
		check_alg(k, j, SG_JWK_RSA_PSS, h);
	}
	uint8_t sig[512];
	/* PSS with a salt other than the hash length (RFC 7518 §3.5). */
	size_t len = sign(k, SG_JWK_RSA_PSS, SG_HASH_SHA256, 20, sig);
	SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_RSA_PSS, SG_HASH_SHA256, msg, MSG_LEN, sig, len), SG_EAUTH);
	/* A PKCS#1 v1.5 signature is not a PSS one, nor the reverse. */
	len = sign(k, SG_JWK_RSA_PKCS1, SG_HASH_SHA256, 0, sig);
	SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_RSA_PSS, SG_HASH_SHA256, msg, MSG_LEN, sig, len), SG_EAUTH);
	/* An RSA key never verifies ECDSA; the hash must be SHA-2. */
	SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_ECDSA, SG_HASH_SHA256, msg, MSG_LEN, sig, 64), SG_EAUTH);
	SG_CHECK_MSG("an RSA key cannot verify ECDSA signatures");
	SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_RSA_PKCS1, SG_HASH_SHA1, msg, MSG_LEN, sig, len), SG_EINVAL);
	SG_CHECK_RC(sg_jwk_verify(j, (sg_jwk_scheme)0, SG_HASH_SHA256, msg, MSG_LEN, sig, len), SG_EINVAL);
	sg_jwk_free(j);
	sg_jwk_free(NULL);
}

static void t_ec(void)
{
	static const struct {
		const char *kind, *crv;
		sg_hash h;
		size_t size;
		unsigned bits;
	} curves[] = {
	    {"P-256", "P-256", SG_HASH_SHA256, 32, 256},
	    {"P-384", "P-384", SG_HASH_SHA384, 48, 384},
	    {"P-521", "P-521", SG_HASH_SHA512, 66, 521},
	};
	for (size_t c = 0; c < sizeof(curves) / sizeof(curves[0]); c++) {
		EVP_PKEY *k = key_of(curves[c].kind);
		sg_jwk *j = ec_jwk(k, curves[c].crv);
		const sg_jwk_info *i = sg_jwk_get_info(j);
		SG_CHECK(i->kind == SG_PUBKEY_EC && i->size == curves[c].size && i->bits == curves[c].bits &&
		         strcmp(i->crv, curves[c].crv) == 0);
		check_alg(k, j, SG_JWK_ECDSA, curves[c].h);
		uint8_t zero[2 * 66] = {0};
		SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_ECDSA, curves[c].h, msg, MSG_LEN, zero, 2 * curves[c].size),
		            SG_EAUTH);
		SG_CHECK_MSG("does not verify");
		/* r and s past the group's order; then a real r with s zero. */
		uint8_t big[2 * 66], sig[2 * 66];
		memset(big, 0xff, sizeof(big));
		SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_ECDSA, curves[c].h, msg, MSG_LEN, big, 2 * curves[c].size),
		            SG_EAUTH);
		SG_CHECK_MSG("does not verify");
		size_t len = sign(k, SG_JWK_ECDSA, curves[c].h, 0, sig);
		memset(sig + len / 2, 0, len / 2);
		SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_ECDSA, curves[c].h, msg, MSG_LEN, sig, len), SG_EAUTH);
		SG_CHECK(ERR_peek_error() == 0);
		SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_RSA_PKCS1, curves[c].h, msg, MSG_LEN, zero, curves[c].size),
		            SG_EAUTH);
		SG_CHECK(ERR_peek_error() == 0);
		sg_jwk_free(j);
	}
}

static void t_bad_keys(void)
{
	sg_jwk *j = (sg_jwk *)1;
	uint8_t n[512], e3[] = {3}, e2[] = {2}, e1[] = {1};
	memset(n, 0xc5, sizeof(n));
	n[255] |= 1;
	SG_CHECK_RC(sg_jwk_new_rsa(&j, n, 128, e3, 1, 2048, 8192), SG_EINVAL);
	SG_CHECK_MSG("RSA key of 1024 bits is below 2048");
	SG_CHECK(j == NULL);
	SG_CHECK_RC(sg_jwk_new_rsa(&j, n, 512, e3, 1, 2048, 3072), SG_EINVAL);
	SG_CHECK_MSG("above");
	SG_CHECK_RC(sg_jwk_new_rsa(&j, n, 256, e2, 1, 2048, 8192), SG_EINVAL);
	SG_CHECK_MSG("bad RSA exponent");
	SG_CHECK_RC(sg_jwk_new_rsa(&j, n, 256, e1, 1, 2048, 8192), SG_EINVAL);
	SG_CHECK_RC(sg_jwk_new_rsa(&j, n, 0, e3, 1, 2048, 8192), SG_EINVAL);
	SG_CHECK_OK(sg_jwk_new_rsa(&j, n, 256, e3, 1, 2048, 8192));
	sg_jwk_free(j);

	uint8_t pub[1 + 2 * 66];
	size_t c = ec_point(key_of("P-256"), pub);
	SG_CHECK_RC(sg_jwk_new_ec(&j, "P-192", pub + 1, c, pub + 1 + c, c), SG_EINVAL);
	SG_CHECK_MSG("unsupported curve");
	SG_CHECK_RC(sg_jwk_new_ec(&j, "P-384", pub + 1, c, pub + 1 + c, c), SG_EINVAL);
	SG_CHECK_MSG("P-384 coordinates must be 48 bytes");
	SG_CHECK_RC(sg_jwk_new_ec(&j, "P-256", pub + 1, c - 1, pub + 1 + c, c), SG_EINVAL);
	pub[1 + 2 * c - 1] ^= 1; /* y + or - 1: off the curve */
	SG_CHECK_RC(sg_jwk_new_ec(&j, "P-256", pub + 1, c, pub + 1 + c, c), SG_EINVAL);
	SG_CHECK(j == NULL);
	SG_CHECK(ERR_peek_error() == 0);
}

/* ---- one key, many threads ---- */

struct shared {
	const sg_jwk *j;
	sg_jwk_scheme scheme;
	sg_hash h;
	const uint8_t *sig;
	size_t len;
	int failures;
};

static void *verify_many(void *arg)
{
	struct shared *s = arg;
	for (int i = 0; i < 300; i++)
		s->failures += sg_jwk_verify(s->j, s->scheme, s->h, msg, MSG_LEN, s->sig, s->len) != SG_OK;
	return NULL;
}

static void t_threads(void)
{
	sg_jwk *ec = ec_jwk(key_of("P-256"), "P-256"), *rsa = rsa_jwk(key_of("rsa2048"));
	uint8_t ec_sig[64], rsa_sig[256];
	size_t ec_len = sign(key_of("P-256"), SG_JWK_ECDSA, SG_HASH_SHA256, 0, ec_sig);
	size_t rsa_len = sign(key_of("rsa2048"), SG_JWK_RSA_PSS, SG_HASH_SHA256, RSA_PSS_SALTLEN_DIGEST, rsa_sig);
	struct shared s[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		s[i] = i % 2 ? (struct shared){rsa, SG_JWK_RSA_PSS, SG_HASH_SHA256, rsa_sig, rsa_len, 0}
		             : (struct shared){ec, SG_JWK_ECDSA, SG_HASH_SHA256, ec_sig, ec_len, 0};
		if (pthread_create(&th[i], NULL, verify_many, &s[i]) != 0)
			abort();
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		SG_CHECK(s[i].failures == 0);
	}
	sg_jwk_free(ec);
	sg_jwk_free(rsa);
}

/* ---- prepared keys (sg_jwk_prepare) ---- */

#ifndef SIGNET_TEST_DATA
#error "SIGNET_TEST_DATA (tests/signer/data) must be defined"
#endif

/* Every vector through two keys built from the same point, one prepared:
 * "valid" verifies with both, "invalid" with neither, and the two always
 * answer alike. The file has no "acceptable" vectors. */
static void t_wycheproof(void)
{
	FILE *f = fopen(SIGNET_TEST_DATA "/ecdsa_p256_sha256_p1363.txt", "r");
	SG_CHECK(f != NULL);
	if (!f)
		return;
	char line[4096], cur_x[80] = "", cur_y[80] = "";
	sg_jwk *plain = NULL, *prepared = NULL;
	int valid = 0, invalid = 0, keys = 0;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#')
			continue;
		int id;
		char result[16], x[80], y[80], m[2100], sh[600];
		if (sscanf(line, "%d %15s %79s %79s %2099s %599s", &id, result, x, y, m, sh) != 6)
			abort();
		if (strcmp(x, cur_x) != 0 || strcmp(y, cur_y) != 0) {
			sg_jwk_free(plain);
			sg_jwk_free(prepared);
			uint8_t bx[32], by[32];
			SG_CHECK(vector_unhex(x, bx, 32) == 32 && vector_unhex(y, by, 32) == 32);
			SG_CHECK_OK(sg_jwk_new_ec(&plain, "P-256", bx, 32, by, 32));
			SG_CHECK_OK(sg_jwk_new_ec(&prepared, "P-256", bx, 32, by, 32));
			SG_CHECK(!sg_jwk_prepared(prepared));
			SG_CHECK_OK(sg_jwk_prepare(prepared));
			/* OpenSSL's P-256 is its specialised one on the appliance's
			 * platforms (x86-64, arm64), so the table is built. */
			SG_CHECK(sg_jwk_prepared(prepared) && !sg_jwk_prepared(plain));
			memcpy(cur_x, x, sizeof(cur_x));
			memcpy(cur_y, y, sizeof(cur_y));
			keys++;
		}
		uint8_t mb[1050], sb[300];
		size_t ml = vector_unhex(m, mb, sizeof(mb)), sl = vector_unhex(sh, sb, sizeof(sb));
		int a = sg_jwk_verify(plain, SG_JWK_ECDSA, SG_HASH_SHA256, mb, ml, sb, sl);
		int b = sg_jwk_verify(prepared, SG_JWK_ECDSA, SG_HASH_SHA256, mb, ml, sb, sl);
		bool want = strcmp(result, "valid") == 0;
		SG_CHECK(want || strcmp(result, "invalid") == 0);
		if (a != (want ? SG_OK : SG_EAUTH) || b != a)
			fprintf(stderr, "tcId %d (%s): plain %d, prepared %d\n", id, result, a, b);
		SG_CHECK(a == (want ? SG_OK : SG_EAUTH) && b == a);
		SG_CHECK(ERR_peek_error() == 0);
		*(want ? &valid : &invalid) += 1;
	}
	fclose(f);
	sg_jwk_free(plain);
	sg_jwk_free(prepared);
	/* The whole file was read: its header's counts. */
	SG_CHECK(valid == 173 && invalid == 89 && keys == 112);
}

/* Preparing is for P-256 only, twice is once, and a prepared key is
 * shared by threads like any other. */
static void t_prepare(void)
{
	sg_jwk *p384 = ec_jwk(key_of("P-384"), "P-384"), *rsa = rsa_jwk(key_of("rsa2048"));
	SG_CHECK_OK(sg_jwk_prepare(p384));
	SG_CHECK_OK(sg_jwk_prepare(rsa));
	SG_CHECK(!sg_jwk_prepared(p384) && !sg_jwk_prepared(rsa));
	check_alg(key_of("P-384"), p384, SG_JWK_ECDSA, SG_HASH_SHA384);
	sg_jwk_free(p384);
	sg_jwk_free(rsa);

	EVP_PKEY *k = key_of("P-256");
	sg_jwk *j = ec_jwk(k, "P-256");
	SG_CHECK_OK(sg_jwk_prepare(j));
	SG_CHECK_OK(sg_jwk_prepare(j));
	SG_CHECK(sg_jwk_prepared(j));
	check_alg(k, j, SG_JWK_ECDSA, SG_HASH_SHA256);
	/* (r, n - s) is the same signature's other half: it verifies too. */
	uint8_t sig[64];
	sign(k, SG_JWK_ECDSA, SG_HASH_SHA256, 0, sig);
	BIGNUM *s = BN_bin2bn(sig + 32, 32, NULL), *n = NULL;
	SG_CHECK(BN_hex2bn(&n, "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551") > 0);
	SG_CHECK(BN_sub(s, n, s) == 1 && BN_bn2binpad(s, sig + 32, 32) == 32);
	SG_CHECK_OK(sg_jwk_verify(j, SG_JWK_ECDSA, SG_HASH_SHA256, msg, MSG_LEN, sig, 64));
	/* s = n: out of range, however the arithmetic would treat it. */
	SG_CHECK(BN_bn2binpad(n, sig + 32, 32) == 32);
	SG_CHECK_RC(sg_jwk_verify(j, SG_JWK_ECDSA, SG_HASH_SHA256, msg, MSG_LEN, sig, 64), SG_EAUTH);
	BN_free(s);
	BN_free(n);

	uint8_t good[64];
	size_t len = sign(k, SG_JWK_ECDSA, SG_HASH_SHA256, 0, good);
	struct shared sh[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		sh[i] = (struct shared){j, SG_JWK_ECDSA, SG_HASH_SHA256, good, len, 0};
		if (pthread_create(&th[i], NULL, verify_many, &sh[i]) != 0)
			abort();
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		SG_CHECK(sh[i].failures == 0);
	}
	sg_jwk_free(j);
}

SG_TEST_MAIN(SG_TEST(t_rsa), SG_TEST(t_ec), SG_TEST(t_bad_keys), SG_TEST(t_threads), SG_TEST(t_wycheproof),
             SG_TEST(t_prepare))
