/*
 * sg_tokenkey: the signing key of the development token issuer (token/sg_jwt.h:
 * sg_jwt_dev_issuer_create, sg_jwt_mint), which lets the appliance run
 * without Kubernetes. An EC P-256 key that signs ES256 (RFC 7518 §3.4) in
 * software; it is not a CA key and never goes near the HSM.
 *
 * This is the OpenSSL side of the development issuer, kept in the signer
 * layer (the OpenSSL adapter) so that ra/'s JWT code needs no OpenSSL: ra/
 * builds the JOSE header, the claims and the JWKS; this module makes,
 * stores, loads and uses the key, and says what its public half is in the
 * JWK's own terms (x, y) with Kubernetes' key id.
 *
 * Secrets: the private key is freed with its memory cleared, the PEM text
 * is wiped wherever it passes through our buffers, and neither is ever
 * logged (nothing here logs; failures name the path in the error detail).
 *
 * Ownership: sg_tokenkey_generate and sg_tokenkey_load return a key the
 * caller frees with sg_tokenkey_free. A key is immutable once made and may
 * be used by several threads at once.
 */
#ifndef SG_TOKENKEY_H
#define SG_TOKENKEY_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

#define SG_TOKENKEY_SIG_LEN 64           /* ES256: r || s, 32 bytes each */
#define SG_TOKENKEY_B64_LEN 43           /* base64url of 32 bytes, unpadded */
#define SG_TOKENKEY_FILE_MAX (64u << 10) /* a key file, bytes */

typedef struct sg_tokenkey sg_tokenkey;

/* The public half as a JWK (RFC 7518 §6.2.1: kty EC, crv P-256) carries it,
 * and the key id Kubernetes gives such a key: base64url(SHA-256(the
 * SubjectPublicKeyInfo DER)). All three are NUL-terminated base64url. */
typedef struct sg_tokenkey_jwk {
	char x[SG_TOKENKEY_B64_LEN + 1];
	char y[SG_TOKENKEY_B64_LEN + 1];
	char kid[SG_TOKENKEY_B64_LEN + 1];
} sg_tokenkey_jwk;

/* A new random P-256 key. SG_EINTERNAL when OpenSSL cannot make one. */
SG_API int sg_tokenkey_generate(sg_tokenkey **out) SG_MUST_CHECK;

/* Loads a PEM private key (PKCS#8 or the traditional EC form) of at most
 * SG_TOKENKEY_FILE_MAX bytes; the file's mode is not checked (the caller's
 * business). SG_ENOTFOUND when the file cannot be opened; SG_EINVAL when it
 * is not a PEM private key ("... is not a PEM private key"), is encrypted
 * (never opened: no passphrase is asked for, on a terminal or otherwise) or
 * is a key of another type or curve ("... is not an EC P-256 key"). */
SG_API int sg_tokenkey_load(sg_tokenkey **out, const char *path) SG_MUST_CHECK;

/* Writes the private key as PKCS#8 PEM to path, mode 0600, atomically
 * (sg_file_write_atomic: an existing file is replaced). SG_EINVAL on an I/O
 * failure, SG_EINTERNAL when the key cannot be encoded. */
SG_API int sg_tokenkey_save(const sg_tokenkey *k, const char *path) SG_MUST_CHECK;

/* Signs n bytes of msg with ES256: ECDSA over SHA-256 of msg, written as
 * the fixed-length r || s of RFC 7518 §3.4 (not DER). */
SG_API int sg_tokenkey_sign(const sg_tokenkey *k, const void *msg, size_t n,
                            uint8_t sig[SG_TOKENKEY_SIG_LEN]) SG_MUST_CHECK;

/* The JWK members and the key id of k's public half. */
SG_API int sg_tokenkey_jwk_of(const sg_tokenkey *k, sg_tokenkey_jwk *out) SG_MUST_CHECK;

/* Frees k, clearing the private key; accepts NULL. */
SG_API void sg_tokenkey_free(sg_tokenkey *k);

#endif
