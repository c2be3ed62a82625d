/*
 * sg_key: public keys and signature algorithms as signet understands them.
 *
 * A SubjectPublicKeyInfo (RFC 5280 §4.1.2.7) is parsed into an sg_pubkey
 * that borrows the input bytes; only keys that policy can accept parse:
 * EC on P-256 or P-384 with an uncompressed point (RFC 5480), and RSA
 * (rsaEncryption, NULL parameters, RFC 8017 RSAPublicKey) of 2048..8192 bits
 * with an odd public exponent >= 3. Everything else fails with SG_EINVAL and
 * a message naming the problem ("RSA key of 1024 bits is too weak (minimum
 * 2048)", "EC curve 1.3.132.0.10 is not supported (P-256 and P-384 only)",
 * "compressed EC points are not supported", "Ed25519 keys are not
 * supported ...", ...). Whether an EC point lies on its curve is checked by
 * sg_crypto_verify, not here (this module does no field arithmetic).
 *
 * sg_pubkey_encode writes the SPKI afresh from the parsed parts, so a
 * certificate never carries bytes copied from a CSR.
 */
#ifndef SG_KEY_H
#define SG_KEY_H

#include "sg_der.h"
#include "sg_error.h"
#include "sg_hsm.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum sg_pubkey_kind {
	SG_PUBKEY_EC = 1,
	SG_PUBKEY_RSA = 2,
} sg_pubkey_kind;

typedef enum sg_curve {
	SG_CURVE_P256 = 1,
	SG_CURVE_P384 = 2,
} sg_curve;

typedef struct sg_pubkey {
	sg_pubkey_kind kind;
	sg_curve curve;      /* EC */
	sg_slice point;      /* EC: 0x04 || X || Y */
	sg_slice n, e;       /* RSA: unsigned big-endian magnitudes, no leading zero */
	unsigned bits;       /* RSA modulus bits, or the curve size */
	sg_slice key_bits;   /* the subjectPublicKey BIT STRING contents (for SKI) */
} sg_pubkey;

/* Signature algorithms accepted on CSRs and used by CAs. */
typedef enum sg_sigalg {
	SG_SIG_ECDSA_SHA256 = 1,
	SG_SIG_ECDSA_SHA384,
	SG_SIG_ECDSA_SHA512,
	SG_SIG_RSA_SHA256,
	SG_SIG_RSA_SHA384,
	SG_SIG_RSA_SHA512,
} sg_sigalg;

typedef enum sg_hash {
	SG_HASH_SHA1 = 0, /* only for key identifiers (RFC 5280 §4.2.1.2) */
	SG_HASH_SHA256,
	SG_HASH_SHA384,
	SG_HASH_SHA512,
	SG_HASH_COUNT
} sg_hash;

#define SG_HASH_MAX 64

/* Parses a whole SPKI TLV (exact length). *out borrows der. */
SG_API int sg_pubkey_parse(sg_pubkey *out, const uint8_t *der, size_t len) SG_MUST_CHECK;
/* Writes the SPKI DER of k. */
SG_API void sg_pubkey_encode(sg_der_writer *w, const sg_pubkey *k);
/* The key type a CA key of this shape has, or SG_EINVAL for sizes a CA
 * cannot use. */
SG_API int sg_pubkey_ca_type(const sg_pubkey *k, sg_key_type *out) SG_MUST_CHECK;

/* Parses an AlgorithmIdentifier TLV into a signature algorithm; weak or
 * unknown algorithms (MD5, SHA-1, RSA-PSS, Ed25519, ...) fail with a message
 * naming them. */
SG_API int sg_sigalg_parse(sg_reader *r, sg_sigalg *out) SG_MUST_CHECK;
/* Writes the AlgorithmIdentifier of alg (NULL parameters for RSA, absent for
 * ECDSA, per RFC 5758 / RFC 4055). */
SG_API void sg_sigalg_encode(sg_der_writer *w, sg_sigalg alg);
SG_API sg_hash sg_sigalg_hash(sg_sigalg alg);
SG_API bool sg_sigalg_is_ec(sg_sigalg alg);
/* The algorithm a CA key of type t signs with: ECDSA P-256 -> SHA-256,
 * P-384 -> SHA-384, RSA -> SHA-256. */
SG_API sg_sigalg sg_sigalg_for_ca(sg_key_type t);
SG_API size_t sg_hash_len(sg_hash h);
/* "ecdsa-with-SHA256", "sha256WithRSAEncryption", ...; static string. */
SG_API const char *sg_sigalg_name(sg_sigalg alg);

/* Formats an OID's content octets in dotted form ("1.3.132.0.10") into buf
 * and returns buf; malformed encodings print as "(bad OID)". For messages. */
SG_API const char *sg_oid_format(sg_slice oid, char *buf, size_t cap);

/* DigestInfo prefix (RFC 8017 §9.2 note 1) for RSA PKCS#1 v1.5 signing. */
SG_API void sg_digestinfo_prefix(sg_hash h, const uint8_t **p, size_t *len);

/* Converts a PKCS#11 raw ECDSA signature r||s (2 * field bytes) into a DER
 * Ecdsa-Sig-Value (RFC 5480 §2.2 / X9.62). */
SG_API int sg_ecdsa_raw_to_der(sg_der_writer *w, const uint8_t *raw, size_t rawlen) SG_MUST_CHECK;

#endif
