/*
 * sg_csr_facts: what a CertificateRequest policy needs to know about a
 * PKCS#10 request (RFC 2986), decoded from its raw bytes.
 *
 * sg_csr (sg_csr.h) parses a CSR to *issue* it and refuses anything signet
 * would not put in a certificate. A policy approver needs the opposite: an
 * exact account of everything the request asks for, including what signet
 * would refuse, because cert-manager's issuers copy the raw subject and
 * the raw subjectAltName extension into the certificate. So this module
 * reports, in order and without judging:
 *
 *   - every subject attribute (AttributeTypeAndValue of every RDN, multi-
 *     valued RDNs flattened), with its OID, its value's tag and the value
 *     as text when it is a string type;
 *   - every GeneralName of the subjectAltName extension (RFC 5280
 *     §4.2.1.6), with its type, including the types a policy must deny
 *     (x400Address, directoryName, ediPartyName, registeredID) and
 *     otherName with its type-id;
 *   - keyUsage, extKeyUsage and basicConstraints when requested;
 *   - the public key's algorithm and size.
 *
 * Go compatibility. The facts are the ones cert-manager's approver-policy
 * (v0.27) derives with Go's crypto/x509 and cert-manager's UnmarshalSANs,
 * and the text forms are Go's: IP addresses as net.IP.String() prints them
 * (IPv4-mapped IPv6 as dotted IPv4, RFC 5952 compression), URIs as
 * url.URL.String() prints them, OIDs as asn1.ObjectIdentifier.String(),
 * key sizes as approver-policy computes them (RSA modulus bits, EC curve
 * bits 224/256/384/521, Ed25519 -1). Where Go's CSR parser fails (a
 * malformed subject string, a dNSName that is not ASCII, an IP address of
 * 5 bytes, an unsupported EC curve, a duplicated extension other than
 * subjectAltName, ...) sg_csr_facts_parse fails too, with SG_EINVAL:
 * approver-policy cannot evaluate such a request either. Where only
 * cert-manager's SAN decoder fails, parsing succeeds and san_decode_error
 * says why (approver-policy denies such a request); likewise
 * san_extensions counts subjectAltName extensions (more than one is
 * denied).
 *
 * Stricter than Go, deliberately (each fails closed: SG_EINVAL, or a
 * san_decode_error): anything that is not DER (sg_der.h); a GeneralName
 * that is not context-specific, or a dNSName/rfc822Name/URI/iPAddress/
 * registeredID that is constructed, or an otherName/directoryName that is
 * primitive (crypto/x509 skips these and approver-policy would never see
 * them, though the raw extension carries them into the certificate); a URI
 * whose Go rendering this module does not reproduce exactly (a userinfo
 * part, a '%' in the host, characters Go would re-escape; see
 * sg_csr_facts.c); values longer than SG_CSR_FACTS_MAX_VALUE bytes; more
 * than SG_CSR_FACTS_MAX_ATTRS subject attributes or SG_CSR_FACTS_MAX_SANS
 * names. The signature is not verified (the signer does that at issuance);
 * the EC point is not checked to lie on its curve.
 *
 * Ownership: sg_csr_facts_parse fills a caller-provided struct whose
 * strings and arrays it owns (one copy of the DER, one text arena, two
 * arrays); every pointer in it stays valid until sg_csr_facts_clear. The
 * facts are read-only after parsing: any number of threads may read one.
 */
#ifndef SG_CSR_FACTS_H
#define SG_CSR_FACTS_H

#include "sg_csr.h"
#include "sg_der.h"
#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_CSR_FACTS_MAX_DER (64 * 1024) /* a larger request is refused unread */
#define SG_CSR_FACTS_MAX_ATTRS 64        /* subject attributes */
#define SG_CSR_FACTS_MAX_SANS 256        /* GeneralNames, over all subjectAltName extensions */
#define SG_CSR_FACTS_MAX_EXTENSIONS 64   /* requested extensions */
#define SG_CSR_FACTS_MAX_VALUE 4096      /* bytes of one subject value or one GeneralName */

/* Universal string tags, as the subject attribute `tag` reports them. */
enum {
	SG_CSR_FACTS_NUMERICSTRING = 0x12,
	SG_CSR_FACTS_TELETEXSTRING = 0x14,
	SG_CSR_FACTS_UNIVERSALSTRING = 0x1c,
	SG_CSR_FACTS_BMPSTRING = 0x1e,
};

typedef struct sg_csr_facts_attr {
	const char *oid; /* dotted decimal ("2.5.4.3") */
	size_t rdn;      /* index of the RelativeDistinguishedName holding it */
	uint8_t tag;     /* the value's tag octet as encoded */
	/* UTF8String, PrintableString, IA5String, TeletexString, BMPString,
	 * UniversalString or NumericString. Note that Go (and so approver-
	 * policy) treats UniversalString as a non-string value. */
	bool is_string;
	/* is_string: the value as text. UTF8String, PrintableString,
	 * IA5String, NumericString and TeletexString: the octets as they are
	 * (a TeletexString's are not converted, as in Go); BMPString and
	 * UniversalString: converted to UTF-8 (unpaired surrogates as U+FFFD,
	 * as Go's UTF-16 decoder does). Otherwise: lowercase hex of the whole
	 * value TLV, for messages. NUL-terminated; value_len excludes the NUL
	 * (a TeletexString may hold a NUL octet). */
	const char *value;
	size_t value_len;
} sg_csr_facts_attr;

/* GeneralName types; the values are the CHOICE's context tag numbers. */
typedef enum sg_csr_facts_san_type {
	SG_CSR_FACTS_SAN_OTHER_NAME = 0,
	SG_CSR_FACTS_SAN_EMAIL = 1, /* rfc822Name */
	SG_CSR_FACTS_SAN_DNS = 2,   /* dNSName */
	SG_CSR_FACTS_SAN_X400 = 3,  /* x400Address */
	SG_CSR_FACTS_SAN_DIRECTORY = 4,
	SG_CSR_FACTS_SAN_EDI_PARTY = 5,
	SG_CSR_FACTS_SAN_URI = 6, /* uniformResourceIdentifier */
	SG_CSR_FACTS_SAN_IP = 7,  /* iPAddress */
	SG_CSR_FACTS_SAN_REGISTERED_ID = 8,
} sg_csr_facts_san_type;

typedef struct sg_csr_facts_san {
	sg_csr_facts_san_type type;
	/* As text, NUL-terminated (value_len excludes the NUL):
	 *   rfc822Name, dNSName   the IA5String as it is (ASCII, control
	 *                         characters included, as Go keeps them);
	 *   URI                   Go's url.URL.String() of it;
	 *   iPAddress             Go's net.IP.String() ("10.0.0.1", "::1",
	 *                         "1.2.3.4" for ::ffff:1.2.3.4);
	 *   otherName             the value inside [0] EXPLICIT as approver-
	 *                         policy renders it: the octets of a UTF8-,
	 *                         Printable-, IA5- or TeletexString, else
	 *                         lowercase hex of the whole inner TLV;
	 *   registeredID          the OID, dotted;
	 *   x400Address, directoryName, ediPartyName
	 *                         lowercase hex of the content octets. */
	const char *value;
	size_t value_len;
	const char *oid;  /* otherName: the type-id, dotted; NULL for the others */
	sg_slice content; /* the GeneralName's content octets (inside the facts' copy of the DER) */
} sg_csr_facts_san;

typedef enum sg_csr_facts_key_alg {
	SG_CSR_FACTS_KEY_OTHER = 0, /* DSA, X25519, RSA-PSS, unknown: approver-policy cannot size these */
	SG_CSR_FACTS_KEY_RSA,
	SG_CSR_FACTS_KEY_ECDSA,
	SG_CSR_FACTS_KEY_ED25519,
} sg_csr_facts_key_alg;

/* An extension a policy may look at: absent, present and decoded, or
 * present but malformed (Go's CSR parser does not read keyUsage, extKeyUsage
 * or basicConstraints, so a malformed one does not fail the parse). */
typedef enum sg_csr_facts_ext {
	SG_CSR_FACTS_EXT_ABSENT = 0,
	SG_CSR_FACTS_EXT_PRESENT,
	SG_CSR_FACTS_EXT_MALFORMED,
} sg_csr_facts_ext;

typedef struct sg_csr_facts {
	sg_csr_facts_attr *attrs; /* subject attributes in order */
	size_t attr_count;
	size_t rdn_count;

	sg_csr_facts_san *sans; /* GeneralNames in order, over all subjectAltName extensions */
	size_t san_count;
	size_t san_extensions; /* subjectAltName extensions requested (approver-policy denies more than one) */
	/* NULL, or why cert-manager's SAN decoder (UnmarshalSANs) refuses the
	 * extension, in Go's words where they can be reproduced (e.g. "x509:
	 * trailing data after X.509 extension", "asn1: structure error: bad SAN
	 * choice", and "asn1: structure error: sequence tag mismatch" for an
	 * RFC 5280 directoryName, which cert-manager reads with an IMPLICIT
	 * tag). approver-policy denies such a request. */
	const char *san_decode_error;

	sg_csr_facts_ext key_usage_ext;
	uint32_t key_usage; /* SG_KU_* bits (sg_csr.h), bit n = KeyUsage bit n, up to decipherOnly (8) */
	sg_csr_facts_ext ext_key_usage_ext;
	uint32_t ext_key_usage; /* SG_EKU_* (sg_csr.h); SG_EKU_OTHER for any purpose not listed there */
	sg_csr_facts_ext basic_constraints_ext;
	bool is_ca; /* basicConstraints cA */

	sg_csr_facts_key_alg key_alg;
	int key_size;        /* RSA modulus bits; EC curve bits; -1 for Ed25519; 0 for others */
	const char *key_oid; /* the SubjectPublicKeyInfo algorithm, dotted */

	/* Owned storage behind the pointers above. */
	uint8_t *der_copy;
	size_t der_len;
	char *arena;
	size_t arena_len, arena_cap;
} sg_csr_facts;

/* Parses exactly len bytes of DER (at most SG_CSR_FACTS_MAX_DER; checked
 * before anything is read or allocated) into *out, which is always left
 * safe to clear. SG_EINVAL with a message naming the problem when the
 * request is malformed or over a bound; SG_EINTERNAL when out of memory.
 * On success the caller releases *out with sg_csr_facts_clear. */
SG_API int sg_csr_facts_parse(sg_csr_facts *out, const uint8_t *der, size_t len) SG_MUST_CHECK;

/* Frees what *f owns and zeroes it; accepts NULL and a zeroed struct. */
SG_API void sg_csr_facts_clear(sg_csr_facts *f);

/* "otherName", "rfc822Name", "dNSName", ... for a type; static string. */
SG_API const char *sg_csr_facts_san_type_name(sg_csr_facts_san_type t);

#endif
