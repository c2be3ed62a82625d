/*
 * sg_crypto: the OpenSSL adapter for the hot path.
 *
 * One sg_crypto per thread. It fetches its digests once, caches the EC
 * groups it needs and keeps a reusable digest context, so the per-request
 * path does no algorithm fetches and takes none of OpenSSL 3.0's global
 * decoder/fetch locks (see perf/README.md and the design notes in
 * sg_crypto.c). Signature verification builds the key straight from the
 * parsed SPKI parts (EC point / RSA n, e) rather than through the OSSL_DECODER
 * machinery.
 *
 * Not thread-safe: one thread uses an sg_crypto at a time.
 */
#ifndef SG_CRYPTO_H
#define SG_CRYPTO_H

#include "sg_error.h"
#include "sg_key.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sg_crypto sg_crypto;

/* Caller frees with sg_crypto_free. */
SG_API int sg_crypto_new(sg_crypto **out) SG_MUST_CHECK;
SG_API void sg_crypto_free(sg_crypto *c);

/* Hashes n bytes into out (at least sg_hash_len(h) bytes). */
SG_API int sg_crypto_digest(sg_crypto *c, sg_hash h, const void *p, size_t n, uint8_t *out) SG_MUST_CHECK;

/* Verifies sig over msg (msg is hashed here with the algorithm's digest).
 * The key kind must match the algorithm. Returns SG_OK, or SG_EAUTH when the
 * signature does not verify, SG_EINVAL for malformed signatures/keys. */
SG_API int sg_crypto_verify(sg_crypto *c, const sg_pubkey *k, sg_sigalg alg, const uint8_t *msg, size_t msglen,
			    const uint8_t *sig, size_t siglen) SG_MUST_CHECK;

/* SHA-256 of n bytes, for callers without an sg_crypto (cache keys, key
 * identifiers, document fingerprints). Thread-safe; the digest is fetched
 * once per process. */
SG_API int sg_sha256(const void *p, size_t n, uint8_t out[32]) SG_MUST_CHECK;

/* Fills buf with n bytes from OpenSSL's CSPRNG (per-thread DRBG). */
SG_API int sg_crypto_random(uint8_t *buf, size_t n) SG_MUST_CHECK;

#endif
