/*
 * sg_cert: builds X.509 v3 certificates (RFC 5280 §4.1) from a spec that
 * policy filled in, and lints the encoded result before anything is
 * signed.
 *
 * The encoder writes every field itself: the subject Name from parsed
 * attributes, the SPKI from the parsed key (sg_pubkey_encode), SANs from
 * parsed names, usages from bit masks. Nothing of a CSR is copied through as
 * raw bytes. Per-CA constants (issuer Name, AKI, signature AlgorithmIdentifier)
 * come from sg_ca, computed once at load.
 *
 * Extension order and criticality follow common practice (Go's x509 and
 * istiod): keyUsage (critical), extKeyUsage, basicConstraints (critical),
 * subjectKeyIdentifier, authorityKeyIdentifier, subjectAltName (critical when
 * the subject is empty, RFC 5280 §4.2.1.6).
 */
#ifndef SG_CERT_H
#define SG_CERT_H

#include "sg_crypto.h"
#include "sg_csr.h"
#include "sg_der.h"
#include "sg_key.h"

#include <stdbool.h>
#include <stdint.h>

#define SG_SERIAL_LEN 16 /* 126 random bits: positive, no leading zero octet */
#define SG_CERT_MAX_DER 16384

typedef struct sg_cert_spec {
	uint8_t serial[20];
	size_t serial_len;
	int64_t not_before, not_after; /* seconds since the epoch */
	const sg_rdn *subject;
	size_t subject_len;
	const sg_pubkey *key;
	const sg_san *sans;
	size_t san_count;
	uint32_t key_usage;     /* SG_KU_*; 0 omits the extension */
	uint32_t ext_key_usage; /* SG_EKU_* (never SG_EKU_OTHER); 0 omits it */
	bool is_ca;
	int path_len; /* CA only; -1: no limit */
} sg_cert_spec;

/* The issuing side of a certificate: its Name, key identifier, algorithm and
 * validity window. For a self-signed certificate the caller passes the
 * subject's own values. */
typedef struct sg_cert_issuer {
	sg_slice name_der; /* the issuer Name TLV */
	sg_slice key_id;   /* authorityKeyIdentifier keyIdentifier */
	sg_sigalg sigalg;
	int64_t not_before, not_after;
} sg_cert_issuer;

/* Fills serial/serial_len with SG_SERIAL_LEN CSPRNG bytes, first octet in
 * 0x40..0x7f (positive, minimal DER, RFC 5280 §4.1.2.2). */
SG_API int sg_cert_serial(sg_cert_spec *spec) SG_MUST_CHECK;

/* What a certificate is allowed to be (sg_cert_lint_tbs). */
typedef enum sg_lint_profile {
	SG_LINT_LEAF,  /* an end-entity certificate */
	SG_LINT_ISTIO, /* istiod's workload profile: a leaf that may carry keyEncipherment on an EC key */
	SG_LINT_CA,    /* a CA certificate (root or intermediate) */
	/* a leaf whose usages a request named one by one (cert-manager's
	 * CertificateRequests, Kubernetes CSRs), issued as asked: keyUsage may
	 * be absent or carry bits that mean nothing for the key type
	 * (keyEncipherment on EC, keyAgreement on RSA, encipherOnly and
	 * decipherOnly), as Go's x509 and so cert-manager's CA issuer write */
	SG_LINT_ASKED,
} sg_lint_profile;

/* Reads the encoded TBSCertificate back with the DER reader (exact lengths,
 * nothing left over) and checks what it says against the rules every
 * certificate of ours obeys; the list is in sg_cert_lint.c. Called last
 * before the HSM signs. Returns SG_OK, or SG_ELINT naming the rule broken (a
 * lint failure is a bug in policy or the encoder, never the requester's
 * fault). */
SG_API int sg_cert_lint_tbs(const uint8_t *tbs, size_t len, const sg_cert_issuer *iss,
			    sg_lint_profile profile) SG_MUST_CHECK;

/* Writes the TBSCertificate of spec into w. */
SG_API int sg_cert_encode_tbs(sg_der_writer *w, const sg_cert_spec *spec, const sg_cert_issuer *iss,
			      sg_crypto *c) SG_MUST_CHECK;

/* Writes SEQUENCE { tbs, sigalg, BIT STRING sig }: a Certificate, or a
 * CertificationRequest when tbs is a CertificationRequestInfo. sig is the
 * signature value (for ECDSA the DER Ecdsa-Sig-Value, see
 * sg_ecdsa_raw_to_der). */
SG_API int sg_cert_encode(sg_der_writer *w, const uint8_t *tbs, size_t tbs_len, sg_sigalg alg, const uint8_t *sig,
			  size_t sig_len) SG_MUST_CHECK;

/* Writes a Name from attributes (an empty SEQUENCE when n is 0). */
SG_API void sg_name_encode(sg_der_writer *w, const sg_rdn *rdns, size_t n);

/* Writes the CertificationRequestInfo of a CSR for key with the subject
 * rdns and no attributes (signetctl's intermediate-CA path). */
SG_API int sg_csr_encode_info(sg_der_writer *w, const sg_rdn *rdns, size_t n, const sg_pubkey *key) SG_MUST_CHECK;

/* The key identifier of k: SHA-1 of its subjectPublicKey bits (RFC 5280
 * §4.2.1.2 method 1), 20 bytes into out. */
SG_API int sg_key_id(sg_crypto *c, const sg_pubkey *k, uint8_t out[20]) SG_MUST_CHECK;

#endif
