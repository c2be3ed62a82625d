/*
 * sg_jwk: public keys for verifying JWS signatures (RFC 7515), built from
 * the parts of a JSON Web Key (RFC 7517; RFC 7518 §6.3 RSA, §6.2 EC), and
 * the verification itself (RFC 7518 §3.3 RSASSA-PKCS1-v1_5, §3.4 ECDSA,
 * §3.5 RSASSA-PSS). The JSON around them (kty, use, alg, kid, base64url)
 * is the caller's (token/sg_jwks.c); this is the OpenSSL half.
 *
 * A key is built once, when its key set is parsed (EVP_PKEY_fromdata,
 * ~35 µs for a P-256 key: paid at load time, never per request), and is
 * immutable afterwards: any number of threads may verify with one key at
 * the same time. The SHA-2 digests are fetched once per process, so a
 * verification pays OpenSSL's context set-up (EVP_DigestVerifyInit) and
 * the signature, no digest fetch.
 *
 * What builds: RSA keys whose modulus has min_bits..max_bits (the caller's
 * policy) and whose public exponent is odd and at least 3; EC keys on
 * P-256, P-384 or P-521 whose coordinates are full length (RFC 7518
 * §6.2.1.2) and name a point on the curve (checked explicitly, not left to
 * a side effect of the import). Anything else is SG_EINVAL with a message
 * naming the problem and no prefix, for the caller to put its own on.
 *
 * Ownership: a key from sg_jwk_new_* is the caller's, freed with
 * sg_jwk_free; the inputs are copied and may go once the call returns.
 */
#ifndef SG_JWK_H
#define SG_JWK_H

#include "sg_error.h"
#include "sg_key.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sg_jwk sg_jwk;

/* How a signature is made, apart from its hash. */
typedef enum sg_jwk_scheme {
	SG_JWK_RSA_PKCS1 = 1, /* RS256/384/512: RSASSA-PKCS1-v1_5 (RFC 7518 §3.3) */
	SG_JWK_RSA_PSS,	      /* PS256/384/512: RSASSA-PSS, MGF1 with the same hash,
				 salt as long as the hash (RFC 7518 §3.5) */
	SG_JWK_ECDSA,	      /* ES256/384/512: ECDSA; the signature is r || s, each
				 as long as a coordinate (RFC 7518 §3.4) */
} sg_jwk_scheme;

/* What a key is, for matching it with an algorithm and for messages. */
typedef struct sg_jwk_info {
	sg_pubkey_kind kind; /* SG_PUBKEY_RSA or SG_PUBKEY_EC */
	unsigned bits;	     /* RSA: modulus bits; EC: the curve's (256, 384, 521) */
	size_t size;	     /* RSA: modulus bytes, which is the signature's length;
				EC: coordinate bytes (32, 48, 66), half the signature's */
	const char *crv;     /* EC: "P-256", "P-384" or "P-521" (static); RSA: NULL */
} sg_jwk_info;

/* An RSA key from the JWK's "n" and "e" (unsigned big-endian; n may carry
 * one leading zero byte). SG_EINVAL for a modulus outside
 * min_bits..max_bits or an exponent that is even or below 3. */
SG_API int sg_jwk_new_rsa(sg_jwk **out, const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen,
			  unsigned min_bits, unsigned max_bits) SG_MUST_CHECK;

/* An EC key from the JWK's "crv" (JOSE name) and "x", "y" (each exactly
 * the curve's coordinate size). SG_EINVAL for another curve, coordinates of
 * another length, or a point that is not on the curve. */
SG_API int sg_jwk_new_ec(sg_jwk **out, const char *crv, const uint8_t *x, size_t xlen, const uint8_t *y,
			 size_t ylen) SG_MUST_CHECK;

/* Borrowed; valid as long as the key. */
SG_API const sg_jwk_info *sg_jwk_get_info(const sg_jwk *k);

/* For a key that will verify many signatures (a key set's, in service):
 * a P-256 key's point multiples are computed once, ~15 ms and ~150 KiB,
 * which takes about 40 % off each ES256 verification after it. Nothing is
 * done for other keys, or where OpenSSL's P-256 is not its specialised
 * implementation. SG_EINTERNAL when OpenSSL fails: the key is unchanged
 * and verifies as before. Not thread-safe: call it before the key is
 * shared. */
SG_API int sg_jwk_prepare(sg_jwk *k) SG_MUST_CHECK;
/* Whether sg_jwk_prepare made the key cheaper to verify with. */
SG_API bool sg_jwk_prepared(const sg_jwk *k);

/* Verifies sig over msg (hashed here with h: SHA-256, SHA-384 or SHA-512).
 * SG_OK; SG_EAUTH when the signature does not verify, has the wrong length
 * for the key, or the scheme does not suit the key's kind (an ECDSA scheme
 * for an RSA key, or the reverse); SG_EINVAL for another hash;
 * SG_EINTERNAL when OpenSSL fails (out of memory). Thread-safe. Whether
 * the hash suits the curve (ES256 is P-256 with SHA-256) is JOSE's rule and
 * the caller's to check. */
SG_API int sg_jwk_verify(const sg_jwk *k, sg_jwk_scheme scheme, sg_hash h, const uint8_t *msg, size_t msglen,
			 const uint8_t *sig, size_t siglen) SG_MUST_CHECK;

/* Accepts NULL. */
SG_API void sg_jwk_free(sg_jwk *k);

#endif
