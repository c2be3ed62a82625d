/*
 * sg_issuer: the issuance pipeline of one signer thread.
 *
 *   decode (PEM/DER) -> parse -> verify self-signature -> profile policy ->
 *   build TBS -> lint -> hash -> HSM C_Sign -> assemble -> [verify] -> PEM
 *
 * An sg_issuer owns a per-thread OpenSSL context (sg_crypto), one HSM session
 * and its scratch buffers; it is used by one thread at a time. The CA is
 * shared read-only.
 *
 * Profiles (what the certificate says is decided here, never by the CSR):
 *   istio         istiod's workload profile: empty subject, one critical URI
 *                 SAN = the identity, KU digitalSignature|keyEncipherment,
 *                 EKU serverAuth|clientAuth, CA:FALSE, NotBefore = now - 2 min.
 *                 The identity is the request's, or the CSR's only URI SAN.
 *                 With strict_csr (istio-csr's policy) the CSR must also ask
 *                 for exactly that: its URI SANs equal the identity, no DNS,
 *                 IP or email SANs, no CommonName, keyUsage only
 *                 digitalSignature/keyEncipherment, extKeyUsage only
 *                 serverAuth/clientAuth, no basicConstraints and no other
 *                 extension; a mismatch is SG_EDENIED.
 *   generic       subject (without empty attributes, such as istio-agent's
 *                 "O=") and SANs (at least one) from the CSR (re-encoded), usages
 *                 from the request (default digitalSignature, plus
 *                 keyEncipherment for RSA keys; serverAuth|clientAuth),
 *                 CA:FALSE (cert-manager's issuer). Usages that mean nothing
 *                 for the key type (keyEncipherment and dataEncipherment on EC
 *                 keys, keyAgreement on RSA keys) are left out.
 *   intermediate  subject from the CSR, CA:TRUE with the request's pathLen,
 *                 KU keyCertSign|cRLSign|digitalSignature, no SAN, no EKU.
 * NotAfter = NotBefore-or-now + TTL, clamped to the CA's NotAfter.
 */
#ifndef SG_ISSUER_H
#define SG_ISSUER_H

#include "sg_ca.h"
#include "sg_csr.h"
#include "sg_error.h"
#include "sg_hsm.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum sg_profile {
	SG_PROFILE_ISTIO = 0,
	SG_PROFILE_GENERIC,
	SG_PROFILE_INTERMEDIATE,
} sg_profile;

SG_API int sg_profile_parse(const char *s, sg_profile *out) SG_MUST_CHECK;
SG_API const char *sg_profile_name(sg_profile p);

#define SG_ISTIO_BACKDATE 120           /* seconds, istiod's ClockSkewGracePeriod */
#define SG_TTL_DEFAULT_ISTIO (24 * 3600) /* istiod's DEFAULT_WORKLOAD_CERT_TTL */
#define SG_TTL_DEFAULT_GENERIC (90 * 24 * 3600)
#define SG_TTL_DEFAULT_INTERMEDIATE (365 * 24 * 3600)
#define SG_IDENTITY_MAX 1024

typedef struct sg_issue_request {
	const uint8_t *csr; /* PEM or DER, borrowed until the issue completes */
	size_t csr_len;
	sg_profile profile;
	const char *identity;   /* istio: the URI SAN to stamp; NULL: the CSR's */
	bool strict_csr;        /* istio: istio-csr's CSR checks (see below) */
	int64_t ttl;            /* seconds; 0: the profile's default */
	uint32_t key_usage;     /* generic: SG_KU_*; 0: default */
	uint32_t ext_key_usage; /* generic: SG_EKU_*; 0: default */
	/* generic: key_usage and ext_key_usage are what the certificate says,
	 * exactly (0: that extension is left out), for a request that names its
	 * usages one by one (cert-manager, Kubernetes CSRs); without it the
	 * profile's defaults apply and usages that mean nothing for the key
	 * type (keyEncipherment on EC, ...) are left out. Linted as
	 * SG_LINT_ASKED. */
	bool exact_usages;
	int path_len;           /* intermediate: -1 for none */
	uint64_t deadline_ns;   /* CLOCK_MONOTONIC; 0: none */
	/* Asked before a queued request starts and again just before the HSM
	 * signs: true means nobody will receive the certificate (the caller
	 * went away), and the issue stops with SG_ETIMEOUT without a
	 * signature. NULL: never. Called on the signer thread; must be quick. */
	bool (*cancelled)(void *arg);
	void *cancel_arg;
} sg_issue_request;

typedef struct sg_issue_result {
	char *leaf_pem; /* owned: free with sg_issue_result_clear */
	size_t leaf_pem_len;
	const char *const *chain; /* borrowed from the CA: elements after the leaf */
	const size_t *chain_lens;
	size_t chain_len;
	char serial_hex[2 * 20 + 1];
	int64_t not_before, not_after;
	char identity[SG_IDENTITY_MAX + 1]; /* first URI SAN, or "" */
	sg_key_type ca_key;
	uint64_t latency_ns; /* from the start of the issue to the signed leaf */
} sg_issue_result;

typedef struct sg_issuer_options {
	bool verify_issued; /* verify each HSM signature in software before returning */
} sg_issuer_options;

typedef struct sg_issuer sg_issuer;

/* Opens the thread's HSM session. ca may be NULL for an issuer that only
 * signs raw (signetctl init, before a CA certificate exists). Caller frees
 * with sg_issuer_free. */
SG_API int sg_issuer_new(sg_issuer **out, const sg_ca *ca, sg_hsm *hsm, const sg_issuer_options *opts) SG_MUST_CHECK;
SG_API void sg_issuer_free(sg_issuer *is);

/* Issues one certificate. Errors: SG_EINVAL (malformed CSR, bad TTL or
 * identity), SG_EAUTH (CSR signature), SG_EDENIED (profile refuses), SG_EBUSY
 * / SG_EHSM / SG_ETIMEOUT (HSM), SG_EINTERNAL (lint or encoding). On success
 * *res must be released with sg_issue_result_clear. */
SG_API int sg_issuer_issue(sg_issuer *is, const sg_issue_request *req, sg_issue_result *res) SG_MUST_CHECK;

/* What sg_issuer_issue checks of the request before it builds a
 * certificate (decode, exact-length parse, the CSR's self-signature with
 * c, the profile's rules, the identity), without a CA or an HSM: for RA
 * mode, where another CA signs what passed. Same errors. c is the calling
 * thread's crypto context. */
SG_API int sg_issue_check(const sg_issue_request *req, sg_crypto *c) SG_MUST_CHECK;
/* Frees what a result owns and zeroes it; accepts a zeroed result. */
SG_API void sg_issue_result_clear(sg_issue_result *res);

/* The whole chain, leaf first, as one newly allocated string; caller frees. */
SG_API int sg_issue_result_join(const sg_issue_result *res, char **out) SG_MUST_CHECK;

/* The per-thread crypto context (for callers that share the thread). */
SG_API sg_crypto *sg_issuer_crypto(sg_issuer *is);

/* Signs an arbitrary TBS (certificate or CSR info) with the HSM key through
 * this issuer's session: hashes it with alg's digest and writes the signature
 * value as it goes into a BIT STRING (ECDSA: DER Ecdsa-Sig-Value) into sig
 * (capacity *sig_len). Used by signetctl for the root and the CA CSR. */
SG_API int sg_issuer_sign_raw(sg_issuer *is, sg_sigalg alg, const uint8_t *tbs, size_t tbs_len, uint8_t *sig,
			      size_t *sig_len, uint64_t deadline_ns) SG_MUST_CHECK;

/* sg_issuer_sign_raw, then the signed object into w: SEQUENCE { tbs,
 * alg's AlgorithmIdentifier, the signature }, which is a Certificate for a
 * TBSCertificate and a CertificationRequest for a CertificationRequestInfo
 * (sg_cert_encode). Used by signetctl and sg_init for the root and the CA
 * CSR. */
SG_API int sg_issuer_sign_tbs(sg_issuer *is, sg_sigalg alg, const uint8_t *tbs, size_t tbs_len,
			      uint64_t deadline_ns, sg_der_writer *w) SG_MUST_CHECK;

#endif
