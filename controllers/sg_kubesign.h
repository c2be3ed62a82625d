/*
 * sg_kubesign: what signet's two Kubernetes-facing signers share, the
 * cert-manager external issuer (CertificateRequests, sg_cmissuer.h) and the
 * Kubernetes CSR signer (CertificateSigningRequests, sg_kubecsr.h):
 *
 *   - the CAs a signetd instance signs with, by name ("default" is the one
 *     `signetctl init` creates), and whether one is usable now;
 *   - Go time.Duration strings ("2160h0m0s", "1h30m"), which both APIs and
 *     the issuer kinds use for durations;
 *   - the key-usage names both APIs share ("digital signature", "server
 *     auth", ...) turned into the signer's bit masks;
 *   - one issuance: the CSR (PEM) is parsed, what it asks for (isCA,
 *     keyUsage, extKeyUsage) is checked against what the request says,
 *     and the pool signs it with the generic profile (a leaf: subject and
 *     SANs re-encoded from the CSR, the request's usages exactly as asked,
 *     whatever the key type: keyEncipherment on an EC key too, and no
 *     extension for a kind of usage not asked) or, for isCA,
 *     the intermediate profile; the chain comes back split as both APIs
 *     want it: leaf + intermediates, and the root bundle apart.
 *
 * Nothing here talks to the API server. Errors: SG_EINVAL / SG_EAUTH /
 * SG_EDENIED are the request's fault and permanent (a CertificateRequest
 * is Failed, a CSR gets a Failed condition); the others are retryable
 * (sg_kubesign_permanent tells them apart).
 */
#ifndef SG_KUBESIGN_H
#define SG_KUBESIGN_H

#include "sg_appliance.h"
#include "sg_error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_KUBESIGN_DEFAULT_DURATION (90LL * 24 * 3600) /* cert-manager's default: 90 days */
#define SG_KUBESIGN_MIN_DURATION 600LL                   /* below this nothing is issued (cert-manager's floor) */
#define SG_KUBESIGN_CA_NAME_MAX 63
#define SG_KUBESIGN_REQUEST_MAX (64u << 10) /* PEM bytes of a request's CSR */

/* One CA this signetd signs with. */
typedef struct sg_kubesign_ca {
	const char *name;  /* as issuers name it in spec.caName; "default" for signetctl init's */
	sg_appliance *app; /* borrowed: its pool signs, its CA and HSM are checked */
} sg_kubesign_ca;

/* The CA called name among n, or NULL. */
SG_API const sg_kubesign_ca *sg_kubesign_ca_find(const sg_kubesign_ca *cas, size_t n, const char *name);

/* Whether ca can sign now: the HSM has a usable token and a session opens,
 * the CA certificate, its chain and the root that chain ends at are inside
 * their validity (at now, Unix seconds); another root of the bundle that
 * has expired does not count (sg_ca.h). false with why (cap bytes) saying
 * what is wrong. */
SG_API bool sg_kubesign_ca_usable(const sg_kubesign_ca *ca, int64_t now, char *why, size_t cap);

/* Turns a JSON array of usage names (cert-manager's KeyUsage and
 * certificates.k8s.io's KeyUsage share them) into SG_KU_* and SG_EKU_*
 * masks; is_ca adds keyCertSign, as cert-manager does. "signing" is
 * digitalSignature, "content commitment" nonRepudiation, "email
 * protection" and "s/mime" both emailProtection. NULL or an empty array
 * gives defaults (dflt_ku, dflt_eku). Every name cert-manager's API
 * accepts has a bit ("any": anyExtendedKeyUsage; "encipher only" and
 * "decipher only": keyUsage bits 7 and 8). SG_EINVAL names a value that is
 * not a string or an unknown usage. */
SG_API int sg_kubesign_usages(const json_t *usages, bool is_ca, uint32_t dflt_ku, uint32_t dflt_eku, uint32_t *ku,
			      uint32_t *eku) SG_MUST_CHECK;

typedef struct sg_kubesign_request {
	const char *csr_pem; /* the CSR as PEM (or DER), borrowed */
	size_t csr_len;
	int64_t duration;     /* seconds, >= SG_KUBESIGN_MIN_DURATION */
	bool is_ca;           /* intermediate CA certificate */
	uint32_t key_usage;   /* SG_KU_* (sg_kubesign_usages) */
	uint32_t ext_key_usage;
	/* cert-manager's rule: a keyUsage, extKeyUsage or basicConstraints
	 * extension the CSR asks for must say exactly what the request says. */
	bool csr_must_match;
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none */
} sg_kubesign_request;

typedef struct sg_kubesign_result {
	char *chain;      /* owned: leaf then intermediates, PEM (no root) */
	char *ca;         /* owned: the CA's root bundle, PEM */
	char serial[41];  /* the leaf's serial number, hex */
	int64_t not_before, not_after; /* the leaf's validity, Unix seconds */
} sg_kubesign_result;

/* Checks and signs one request with ca (see above). On success *out must
 * be released with sg_kubesign_result_clear. */
SG_API int sg_kubesign_issue(const sg_kubesign_ca *ca, const sg_kubesign_request *r, sg_kubesign_result *out)
	SG_MUST_CHECK;
SG_API void sg_kubesign_result_clear(sg_kubesign_result *r);

/* Whether an error of sg_kubesign_issue (or of a request's decoding) is
 * the request's fault: no retry will change the answer. */
SG_API bool sg_kubesign_permanent(int rc);

/* Decodes a []byte field of a Kubernetes object (standard base64 of, here,
 * PEM text) into a new NUL-terminated string of at most max bytes; caller
 * frees. SG_EINVAL names the field when it is missing, not a string, not
 * base64, or too large. */
SG_API int sg_kubesign_bytes_field(const json_t *obj, const char *field, size_t max, char **out, size_t *len)
	SG_MUST_CHECK;

/* Encodes len bytes as standard base64 into a new string; caller frees. */
SG_API int sg_kubesign_base64(const char *data, size_t len, char **out) SG_MUST_CHECK;

#endif
