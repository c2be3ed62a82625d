/*
 * sg_crypto_impl: what signer/'s OpenSSL files share and nobody else may
 * use (the layers above see OpenSSL through signer's APIs only). Unlike the
 * public headers, this one exposes OpenSSL types.
 */
#ifndef SG_CRYPTO_IMPL_H
#define SG_CRYPTO_IMPL_H

#include "sg_key.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

/* The process-wide digest for h, fetched once on first use (thread-safe);
 * borrowed for the life of the process. NULL when the provider lacks it. */
const EVP_MD *sg_crypto_shared_md(sg_hash h);

/* A public key in OpenSSL's legacy form (EC_KEY or RSA, see sg_crypto.c
 * for why), built once and then verified with by any number of threads at
 * once: verification only reads it. For keys that live long and verify
 * often, such as a JWKS's, where EVP_DigestVerifyInit would set up a
 * provider context per signature and take the provider store's locks. */
typedef struct sg_verify_key sg_verify_key;

/* nid: NID_X9_62_prime256v1, NID_secp384r1 or NID_secp521r1; point: SEC 1
 * uncompressed. SG_EINVAL when the point is not on the curve. */
int sg_verify_key_ec(sg_verify_key **out, int nid, const uint8_t *point, size_t len);
/* n and e are copied. */
int sg_verify_key_rsa(sg_verify_key **out, const BIGNUM *n, const BIGNUM *e);
void sg_verify_key_free(sg_verify_key *k);
/* Makes a P-256 key cheaper to verify with, for one that verifies many
 * signatures: its point's multiples are computed now (~15 ms, ~150 KiB;
 * sg_crypto.c says when and why). SG_OK and nothing done for other keys,
 * or where OpenSSL's P-256 is not its specialised implementation;
 * SG_EINTERNAL (the key unchanged and still usable) when OpenSSL fails.
 * Call it before the key is shared: it writes the key. */
int sg_verify_key_prepare(sg_verify_key *k);
/* Whether sg_verify_key_prepare built the table (for tests and logs). */
bool sg_verify_key_prepared(const sg_verify_key *k);
/* Verifies a signature over the digest dg (of hash h): an EC key's as r || s
 * (two halves of equal length), an RSA key's as PKCS#1 v1.5. SG_EAUTH when
 * it does not verify (OpenSSL's error queue cleared); SG_EINTERNAL when
 * OpenSSL fails. */
int sg_verify_key_check(const sg_verify_key *k, sg_hash h, const uint8_t *dg, size_t dglen, const uint8_t *sig,
                        size_t siglen);

/* w = a⁻¹ mod n, n the order of P-256's group; both 32 bytes, big-endian.
 * false, and w zero, when a is 0 or not below n. Variable time: for
 * public values only, such as a signature's s. sg_crypto.c's prepared
 * ECDSA check uses it; it is here for its test. */
bool sg_p256_inv_mod_n(uint8_t w[32], const uint8_t a[32]);

/* Scope-bound cleanup of OpenSSL handles (sg_guard.h's SG_CLEANUP):
 * `BIO *b SG_CLEANUP(sg_ossl_bio_freep) = BIO_new(...)`. Each accepts a
 * NULL handle, as the OpenSSL free functions do. */
#define SG_OSSL_FREEP(name, type, free_fn) \
	static inline void name(type **p)  \
	{                                  \
		free_fn(*p);               \
	}
SG_OSSL_FREEP(sg_ossl_bio_freep, BIO, BIO_free)
SG_OSSL_FREEP(sg_ossl_bn_freep, BIGNUM, BN_free)
SG_OSSL_FREEP(sg_ossl_pkey_freep, EVP_PKEY, EVP_PKEY_free)
SG_OSSL_FREEP(sg_ossl_pkey_ctx_freep, EVP_PKEY_CTX, EVP_PKEY_CTX_free)
SG_OSSL_FREEP(sg_ossl_md_ctx_freep, EVP_MD_CTX, EVP_MD_CTX_free)
SG_OSSL_FREEP(sg_ossl_param_bld_freep, OSSL_PARAM_BLD, OSSL_PARAM_BLD_free)
SG_OSSL_FREEP(sg_ossl_params_freep, OSSL_PARAM, OSSL_PARAM_free)

#endif
