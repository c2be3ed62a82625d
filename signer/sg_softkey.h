/*
 * sg_softkey: a key made in software and a certificate for it issued
 * through the signer pool, for the certificates signet issues to itself
 * (signetd's serving certificate, istiod's certificate). The key never
 * touches the HSM, which holds only CA keys; it leaves here as PEM, to be
 * served or written to a Secret by the caller.
 *
 * The CSR is made with OpenSSL (this is the signer layer, the OpenSSL
 * adapter) and goes through the same issuance path as any request: the
 * generic profile, the lint, the HSM signature.
 *
 * Ownership: everything in sg_softkey_result is allocated here and freed by
 * sg_softkey_result_clear, which wipes the key.
 */
#ifndef SG_SOFTKEY_H
#define SG_SOFTKEY_H

#include "sg_pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_SOFTKEY_MAX_NAMES 64

typedef enum sg_softkey_type {
	SG_SOFTKEY_EC_P256 = 0,
	SG_SOFTKEY_EC_P384,
	SG_SOFTKEY_RSA, /* rsa_bits */
} sg_softkey_type;

typedef struct sg_softkey_request {
	sg_softkey_type type;
	unsigned rsa_bits;	       /* SG_SOFTKEY_RSA: 2048 or more */
	const char *cn;		       /* subject CommonName, or NULL for an empty subject */
	const char *const *dns;	       /* DNS SANs */
	size_t ndns;
	const char *const *uris;       /* URI SANs */
	size_t nuris;
	int64_t ttl;		       /* seconds */
	uint32_t ext_key_usage;	       /* SG_EKU_* */
	uint64_t timeout_ns;	       /* for the pool; 0: 30 s */
} sg_softkey_request;

typedef struct sg_softkey_result {
	char *key_pem;	 /* PKCS#8 PEM, wiped on clear */
	char *chain_pem; /* the leaf and the intermediates, PEM (the root bundle is not included) */
	int64_t not_before, not_after;
	char serial_hex[2 * 20 + 1];
} sg_softkey_result;

/* Makes the key and the CSR, has the pool issue it (key usage:
 * digitalSignature, plus keyEncipherment for RSA). SG_EINVAL for a request
 * without names or with more than SG_SOFTKEY_MAX_NAMES, the pool's errors
 * otherwise. */
SG_API int sg_softkey_issue(sg_pool *pool, const sg_softkey_request *req, sg_softkey_result *out) SG_MUST_CHECK;
/* Makes the key and a CSR for r's names (r->cn NULL: an empty subject),
 * without issuing anything: for a client that sends the CSR to a CA of its
 * own (the node agent's sg_caclient). The names are checked as for
 * sg_softkey_issue (SG_EINVAL); ttl, ext_key_usage and timeout_ns are not
 * used. The key is PEM, PKCS#8 ("PRIVATE KEY") when pkcs8, else the
 * traditional form ("RSA PRIVATE KEY" / "EC PRIVATE KEY"), encoded in
 * OpenSSL's secure memory. On success the caller frees *key_pem (after
 * sg_wipe) and *csr_pem with free(); on failure both are NULL. */
SG_API int sg_softkey_csr(const sg_softkey_request *r, bool pkcs8, char **key_pem, char **csr_pem) SG_MUST_CHECK;
/* Makes the key and a self-signed certificate for r's names, with no CA
 * and no HSM: for a serving certificate that its relying party pins
 * whole (signet-operator's webhook certificate, the API server's
 * caBundle). Valid from five minutes before now (clocks differ) for ttl
 * seconds; basicConstraints CA:FALSE, digitalSignature (plus
 * keyEncipherment for RSA), the EKUs of ext_key_usage, a random 16-byte
 * serial. The names are checked as for sg_softkey_issue; timeout_ns is
 * not used. The key is PKCS#8 PEM; on success the caller frees *key_pem
 * (after sg_wipe) and *cert_pem with free(); on failure both are NULL. */
SG_API int sg_softkey_self_signed(const sg_softkey_request *r, char **key_pem, char **cert_pem) SG_MUST_CHECK;
/* Frees (wiping the key) and zeroes; accepts a zeroed result. */
SG_API void sg_softkey_result_clear(sg_softkey_result *r);

#endif
