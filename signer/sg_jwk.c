/*
 * JWS verification keys (sg_jwk.h): moved here from token/sg_jwks.c so that
 * the OpenSSL calls live in the OpenSSL adapter.
 *
 * A key is built once per key set and verifies many tokens: one per
 * request when every pod brings its own. It is kept two ways. The EVP_PKEY
 * (from OSSL_PARAMs, EVP_PKEY_fromdata) validates the key and verifies
 * RSASSA-PSS. RS* and ES* signatures, which are what API servers and
 * istiod issue, go through the legacy RSA/EC_KEY object built once beside
 * it (sg_crypto_impl.h's sg_verify_key): EVP_DigestVerifyInit sets up a
 * provider context for every signature, under the provider store's locks.
 * Measured on the 2-vCPU machine of perf/README.md (OpenSSL 3.0, a 600-byte
 * message, µs per verification, one thread / two threads at once):
 *
 *              EVP_DigestVerify    legacy key built once
 *     RS256       18.9 / 25.9          16.0 / 16.4
 *     ES256       64.7 / 72.2          61.2 / 65.6
 *
 * A P-256 key can also be prepared (sg_jwk_prepare): its point's
 * multiples computed once, which takes ES256 from ~43 to ~26 µs on the
 * AMD machine of perf/README.md (sg_crypto.c has the breakdown).
 *
 * Both objects are only read after the key is built, so threads share
 * them.
 *
 * Errors: a signature that does not verify is SG_EAUTH and clears
 * OpenSSL's error queue (it is an answer, not a fault); a key that does not
 * build is SG_EINVAL with the queue drained into the message.
 */
#include "sg_jwk.h"

#include "sg_crypto_impl.h"
#include "sg_guard.h"
#include "sg_ossl.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/rsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EC_COORD_MAX 66
#define RSA_EXP_MAX 64 /* bytes of a public exponent: far beyond any in use */

struct sg_jwk {
	EVP_PKEY *pkey;
	sg_verify_key *fast; /* the same key, for PKCS#1 v1.5 and ECDSA */
	sg_jwk_info info;
};

static const struct curve {
	const char *jose;  /* RFC 7518 §6.2.1.1 */
	const char *group; /* OpenSSL's name */
	int nid;
	size_t bytes;
	unsigned bits;
} curves[] = {
	{"P-256", "prime256v1", NID_X9_62_prime256v1, 32, 256},
	{"P-384", "secp384r1", NID_secp384r1, 48, 384},
	{"P-521", "secp521r1", NID_secp521r1, EC_COORD_MAX, 521},
};

static void jwk_freep(sg_jwk **k)
{
	sg_jwk_free(*k);
}

void sg_jwk_free(sg_jwk *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pkey);
	sg_verify_key_free(k->fast);
	free(k);
}

const sg_jwk_info *sg_jwk_get_info(const sg_jwk *k)
{
	return &k->info;
}

int sg_jwk_prepare(sg_jwk *k)
{
	return sg_verify_key_prepare(k->fast);
}

bool sg_jwk_prepared(const sg_jwk *k)
{
	return sg_verify_key_prepared(k->fast);
}

/* A public key of type ("RSA", "EC") from the parameters in bld. */
static int pkey_from_params(const char *type, OSSL_PARAM_BLD *bld, EVP_PKEY **out)
{
	OSSL_PARAM *params SG_CLEANUP(sg_ossl_params_freep) = OSSL_PARAM_BLD_to_param(bld);
	SG_ENSURE(params, SG_EINTERNAL, "out of memory");
	EVP_PKEY_CTX *ctx SG_CLEANUP(sg_ossl_pkey_ctx_freep) = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
	SG_ENSURE(ctx, SG_EINTERNAL, "no %s support", type);
	SG_OSSL(EVP_PKEY_fromdata_init(ctx), SG_EINTERNAL, "%s key import", type);
	SG_OSSL(EVP_PKEY_fromdata(ctx, out, EVP_PKEY_PUBLIC_KEY, params), SG_EINVAL, "bad %s key", type);
	return SG_OK;
}

static int rsa_build(sg_jwk *k, const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen, unsigned min_bits,
		     unsigned max_bits)
{
	/* Bounded before BN_bin2bn allocates: one leading zero byte is
	 * tolerated (RFC 7518 §6.3.1.1 notes libraries that add one). */
	SG_ENSURE(nlen <= ((size_t)max_bits + 7) / 8 + 1, SG_EINVAL, "RSA modulus of %zu bytes is above %u bits", nlen,
		  max_bits);
	SG_ENSURE(elen <= RSA_EXP_MAX, SG_EINVAL, "RSA exponent of %zu bytes is too long", elen);
	BIGNUM *bn SG_CLEANUP(sg_ossl_bn_freep) = BN_bin2bn(n, (int)nlen, NULL);
	BIGNUM *be SG_CLEANUP(sg_ossl_bn_freep) = BN_bin2bn(e, (int)elen, NULL);
	SG_ENSURE(bn && be, SG_EINTERNAL, "out of memory");
	int bits = BN_num_bits(bn);
	SG_ENSURE(bits >= (int)min_bits, SG_EINVAL, "RSA key of %d bits is below %u", bits, min_bits);
	SG_ENSURE(bits <= (int)max_bits, SG_EINVAL, "RSA key of %d bits is above %u", bits, max_bits);
	SG_ENSURE(BN_is_odd(be) && BN_num_bits(be) >= 2, SG_EINVAL, "bad RSA exponent");
	OSSL_PARAM_BLD *bld SG_CLEANUP(sg_ossl_param_bld_freep) = OSSL_PARAM_BLD_new();
	SG_ENSURE(bld, SG_EINTERNAL, "out of memory");
	SG_OSSL(OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn), SG_EINTERNAL, "RSA n");
	SG_OSSL(OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be), SG_EINTERNAL, "RSA e");
	SG_TRY(pkey_from_params("RSA", bld, &k->pkey));
	SG_TRY(sg_verify_key_rsa(&k->fast, bn, be));
	k->info = (sg_jwk_info){.kind = SG_PUBKEY_RSA, .bits = (unsigned)bits, .size = ((size_t)bits + 7) / 8};
	return SG_OK;
}

int sg_jwk_new_rsa(sg_jwk **out, const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen, unsigned min_bits,
		   unsigned max_bits)
{
	*out = NULL;
	sg_jwk *k SG_CLEANUP(jwk_freep) = calloc(1, sizeof(*k));
	SG_ENSURE(k, SG_EINTERNAL, "out of memory");
	ERR_clear_error();
	SG_TRY(rsa_build(k, n, nlen, e, elen, min_bits, max_bits));
	*out = SG_MOVE(k);
	return SG_OK;
}

static int ec_build(sg_jwk *k, const struct curve *c, const uint8_t *x, const uint8_t *y)
{
	uint8_t pub[1 + 2 * EC_COORD_MAX]; /* uncompressed point, SEC 1 §2.3.3 */
	pub[0] = 0x04;
	memcpy(pub + 1, x, c->bytes);
	memcpy(pub + 1 + c->bytes, y, c->bytes);
	OSSL_PARAM_BLD *bld SG_CLEANUP(sg_ossl_param_bld_freep) = OSSL_PARAM_BLD_new();
	SG_ENSURE(bld, SG_EINTERNAL, "out of memory");
	SG_OSSL(OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, c->group, 0), SG_EINTERNAL,
		"EC group");
	SG_OSSL(OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, 1 + 2 * c->bytes), SG_EINTERNAL,
		"EC point");
	SG_TRY(pkey_from_params("EC", bld, &k->pkey));
	/* The import decodes the point; the explicit check makes "on the
	 * curve" a stated property rather than a side effect. */
	EVP_PKEY_CTX *chk SG_CLEANUP(sg_ossl_pkey_ctx_freep) = EVP_PKEY_CTX_new_from_pkey(NULL, k->pkey, NULL);
	SG_ENSURE(chk, SG_EINTERNAL, "out of memory");
	SG_OSSL(EVP_PKEY_public_check(chk), SG_EINVAL, "EC point is not on %s", c->jose);
	SG_TRY(sg_verify_key_ec(&k->fast, c->nid, pub, 1 + 2 * c->bytes));
	k->info = (sg_jwk_info){.kind = SG_PUBKEY_EC, .bits = c->bits, .size = c->bytes, .crv = c->jose};
	return SG_OK;
}

int sg_jwk_new_ec(sg_jwk **out, const char *crv, const uint8_t *x, size_t xlen, const uint8_t *y, size_t ylen)
{
	*out = NULL;
	const struct curve *c = NULL;
	for (size_t i = 0; i < sizeof(curves) / sizeof(curves[0]) && !c; i++)
		if (strcmp(crv, curves[i].jose) == 0)
			c = &curves[i];
	SG_ENSURE(c, SG_EINVAL, "unsupported curve (P-256, P-384 and P-521 are)");
	/* RFC 7518 §6.2.1.2: coordinates are full-length octet strings. */
	SG_ENSURE(xlen == c->bytes && ylen == c->bytes, SG_EINVAL, "%s coordinates must be %zu bytes", c->jose,
		  c->bytes);
	sg_jwk *k SG_CLEANUP(jwk_freep) = calloc(1, sizeof(*k));
	SG_ENSURE(k, SG_EINTERNAL, "out of memory");
	ERR_clear_error();
	SG_TRY(ec_build(k, c, x, y));
	*out = SG_MOVE(k);
	return SG_OK;
}

int sg_jwk_verify(const sg_jwk *k, sg_jwk_scheme scheme, sg_hash h, const uint8_t *msg, size_t msglen,
		  const uint8_t *sig, size_t siglen)
{
	SG_ENSURE(scheme == SG_JWK_RSA_PKCS1 || scheme == SG_JWK_RSA_PSS || scheme == SG_JWK_ECDSA, SG_EINVAL,
		  "unknown JWS signature scheme %d", (int)scheme);
	SG_ENSURE(h == SG_HASH_SHA256 || h == SG_HASH_SHA384 || h == SG_HASH_SHA512, SG_EINVAL,
		  "JWS signatures hash with SHA-256, SHA-384 or SHA-512");
	bool ec = scheme == SG_JWK_ECDSA;
	SG_ENSURE(ec == (k->info.kind == SG_PUBKEY_EC), SG_EAUTH, "an %s key cannot verify %s signatures",
		  k->info.kind == SG_PUBKEY_EC ? "EC" : "RSA", ec ? "ECDSA" : "RSA");
	size_t want = ec ? 2 * k->info.size : k->info.size;
	SG_ENSURE(siglen == want, SG_EAUTH, "signature has %zu bytes, the key needs %zu", siglen, want);
	const EVP_MD *md = sg_crypto_shared_md(h);
	SG_ENSURE(md, SG_EINTERNAL, "digest %d is not available", (int)h);
	if (scheme != SG_JWK_RSA_PSS) {
		/* r || s goes to OpenSSL as two numbers: a zero one, or one past
		 * the order, does not verify. */
		uint8_t dg[EVP_MAX_MD_SIZE];
		unsigned dglen = 0;
		ERR_clear_error();
		SG_OSSL(EVP_Digest(msg, msglen, dg, &dglen, md, NULL), SG_EINTERNAL, "digest");
		return sg_verify_key_check(k->fast, h, dg, dglen, sig, siglen);
	}
	EVP_MD_CTX *ctx SG_CLEANUP(sg_ossl_md_ctx_freep) = EVP_MD_CTX_new();
	SG_ENSURE(ctx, SG_EINTERNAL, "out of memory");
	EVP_PKEY_CTX *pctx = NULL; /* owned by ctx */
	ERR_clear_error();
	SG_OSSL(EVP_DigestVerifyInit(ctx, &pctx, md, NULL, k->pkey), SG_EINTERNAL, "verify init");
	SG_OSSL(EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING), SG_EINTERNAL, "PSS padding");
	/* RFC 7518 §3.5: the salt is as long as the hash. */
	SG_OSSL(EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST), SG_EINTERNAL, "PSS salt");
	if (EVP_DigestVerify(ctx, sig, siglen, msg, msglen) != 1) {
		ERR_clear_error(); /* a wrong signature is not an OpenSSL fault */
		SG_BAIL(SG_EAUTH, "signature does not verify");
	}
	return SG_OK;
}
