/*
 * sg_csr: PKCS#10 certification requests (RFC 2986), parsed to policy.
 *
 *   CertificationRequest ::= SEQUENCE {
 *     certificationRequestInfo SEQUENCE {
 *       version INTEGER (0), subject Name, subjectPKInfo SPKI,
 *       attributes [0] IMPLICIT SET OF Attribute },
 *     signatureAlgorithm AlgorithmIdentifier,
 *     signature BIT STRING }
 *
 * sg_csr_parse walks the DER with a bounded reader: every length is checked
 * against what remains, all bytes must be consumed, and only the attribute
 * extensionRequest (PKCS#9, RFC 2985 §5.4.2) is understood; challengePassword
 * and unknown attributes are rejected. From the requested extensions it
 * extracts the SANs (RFC 5280 §4.2.1.6: dNSName, rfc822Name, URI, iPAddress;
 * others rejected), keyUsage, extKeyUsage and basicConstraints; any other
 * extension is counted in other_extensions so policy can refuse it. The
 * subject Name is parsed into attributes (one per RDN; PrintableString,
 * UTF8String or IA5String values without control bytes).
 *
 * The parsed sg_csr borrows the input bytes: keep them alive while it is in
 * use. Nothing is allocated. Every rejection is SG_EINVAL with a specific
 * message ("CSR is truncated", "CSR signature does not verify", ...) except a
 * bad signature, which is SG_EAUTH.
 */
#ifndef SG_CSR_H
#define SG_CSR_H

#include "sg_crypto.h"
#include "sg_der.h"
#include "sg_error.h"
#include "sg_key.h"

#include <stdbool.h>
#include <stdint.h>

#define SG_CSR_MAX_DER (16 * 1024) /* a CSR larger than this is refused unread */
#define SG_CSR_MAX_SANS 32
#define SG_CSR_MAX_RDNS 16
#define SG_SAN_MAX_LEN 1024        /* one name's bytes */

typedef enum sg_san_type {
	SG_SAN_EMAIL = 1, /* rfc822Name [1] */
	SG_SAN_DNS = 2,   /* dNSName [2] */
	SG_SAN_URI = 6,   /* uniformResourceIdentifier [6] */
	SG_SAN_IP = 7,    /* iPAddress [7], 4 or 16 bytes */
} sg_san_type;

typedef struct sg_san {
	sg_san_type type;
	sg_slice value;
} sg_san;

/* keyUsage bits as in RFC 5280 §4.2.1.3 (bit 0 = digitalSignature). */
enum {
	SG_KU_DIGITAL_SIGNATURE = 1u << 0,
	SG_KU_NON_REPUDIATION = 1u << 1,
	SG_KU_KEY_ENCIPHERMENT = 1u << 2,
	SG_KU_DATA_ENCIPHERMENT = 1u << 3,
	SG_KU_KEY_AGREEMENT = 1u << 4,
	SG_KU_KEY_CERT_SIGN = 1u << 5,
	SG_KU_CRL_SIGN = 1u << 6,
	SG_KU_ENCIPHER_ONLY = 1u << 7, /* meaningful with keyAgreement only (§4.2.1.3) */
	SG_KU_DECIPHER_ONLY = 1u << 8,
};

/* extKeyUsage purposes we know; anything else sets SG_EKU_OTHER. */
enum {
	SG_EKU_SERVER_AUTH = 1u << 0,
	SG_EKU_CLIENT_AUTH = 1u << 1,
	SG_EKU_CODE_SIGNING = 1u << 2,
	SG_EKU_EMAIL_PROTECTION = 1u << 3,
	SG_EKU_OCSP_SIGNING = 1u << 4,
	SG_EKU_IPSEC_END_SYSTEM = 1u << 5, /* id-kp 5, 6, 7: RFC 4945 says not to use them, */
	SG_EKU_IPSEC_TUNNEL = 1u << 6,     /* but cert-manager's API and Go name them */
	SG_EKU_IPSEC_USER = 1u << 7,
	SG_EKU_TIME_STAMPING = 1u << 8, /* id-kp 8 */
	SG_EKU_ANY = 1u << 9,           /* anyExtendedKeyUsage, 2.5.29.37.0 */
	SG_EKU_MS_SGC = 1u << 10,       /* Microsoft server gated crypto, 1.3.6.1.4.1.311.10.3.3 */
	SG_EKU_NS_SGC = 1u << 11,       /* Netscape server gated crypto, 2.16.840.1.113730.4.1 */
	SG_EKU_OTHER = 1u << 31,
};

/* Subject attribute types we accept; others make parsing fail. */
typedef enum sg_name_attr {
	SG_NAME_CN = 1,    /* 2.5.4.3 */
	SG_NAME_SERIAL,    /* 2.5.4.5 */
	SG_NAME_C,         /* 2.5.4.6 */
	SG_NAME_L,         /* 2.5.4.7 */
	SG_NAME_ST,        /* 2.5.4.8 */
	SG_NAME_STREET,    /* 2.5.4.9 */
	SG_NAME_O,         /* 2.5.4.10 */
	SG_NAME_OU,        /* 2.5.4.11 */
	SG_NAME_DC,        /* 0.9.2342.19200300.100.1.25 */
	SG_NAME_EMAIL,     /* 1.2.840.113549.1.9.1 */
} sg_name_attr;

typedef struct sg_rdn {
	sg_name_attr attr;
	uint8_t string_tag; /* SG_DER_UTF8STRING, _PRINTABLESTRING or _IA5STRING */
	sg_slice value;
} sg_rdn;

typedef struct sg_csr {
	sg_slice der;  /* the whole request */
	sg_slice info; /* certificationRequestInfo TLV: the signed bytes */
	sg_rdn subject[SG_CSR_MAX_RDNS];
	size_t subject_len;
	sg_pubkey key;
	sg_sigalg sigalg;
	sg_slice signature;

	sg_san sans[SG_CSR_MAX_SANS];
	size_t san_count;
	bool has_san_ext;
	bool has_key_usage;
	uint32_t key_usage;
	bool has_ext_key_usage;
	uint32_t ext_key_usage;
	bool has_basic_constraints;
	bool is_ca;
	int path_len; /* -1 when absent */
	unsigned other_extensions;
} sg_csr;

/* Parses a DER CSR of exactly len bytes. */
SG_API int sg_csr_parse(sg_csr *out, const uint8_t *der, size_t len) SG_MUST_CHECK;

/* Verifies the self-signature with the request's own key. */
SG_API int sg_csr_verify(const sg_csr *csr, sg_crypto *c) SG_MUST_CHECK;

/* If in starts with a PEM armour (after optional whitespace), decodes the
 * first block with label "CERTIFICATE REQUEST" (or "NEW CERTIFICATE
 * REQUEST") into out (capacity cap); otherwise copies in as DER. Bounded by
 * SG_CSR_MAX_DER. Text after the END line is ignored. */
SG_API int sg_csr_decode(const uint8_t *in, size_t inlen, uint8_t *out, size_t cap, size_t *outlen) SG_MUST_CHECK;

/* Generic PEM helpers (RFC 7468, strict base64, lines of any length). */
SG_API int sg_pem_decode(const uint8_t *in, size_t inlen, const char *label, uint8_t *out, size_t cap,
			 size_t *outlen, size_t *consumed) SG_MUST_CHECK;
/* Encodes der as PEM with 64-column lines and a trailing newline into a new
 * NUL-terminated string; caller frees with free(). */
SG_API int sg_pem_encode(const char *label, const uint8_t *der, size_t len, char **out, size_t *outlen) SG_MUST_CHECK;

#endif
