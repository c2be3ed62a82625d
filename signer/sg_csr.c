/*
 * sg_csr: PKCS#10 certification requests, parsed to policy.
 *
 * Implements:
 *   - CertificationRequest, RFC 2986 §4 (version 0 only);
 *   - Name, RFC 5280 §4.1.2.4 / §4.1.2.6, restricted to one attribute per
 *     RDN and the attribute types in name_attrs[] with the upper bounds of
 *     RFC 5280 Appendix A (ub-common-name 64, ...), counted in characters;
 *   - the extensionRequest attribute, PKCS#9 (RFC 2985 §5.4.2);
 *   - Extension, RFC 5280 §4.1 / §4.2, and from it subjectAltName
 *     (§4.2.1.6), keyUsage (§4.2.1.3), extKeyUsage (§4.2.1.12) and
 *     basicConstraints (§4.2.1.9).
 *
 * The parser is one function per ASN.1 type, each walking its own bounded
 * sg_reader over exactly the bytes of that type and checking that it is
 * exhausted: a parent never trusts a child to have consumed everything.
 * Nothing is allocated and nothing is copied; the sg_csr borrows the input.
 * The size limit (SG_CSR_MAX_DER) is checked before a single byte is read.
 *
 * Leniency, decided here (everything else is strict DER):
 *   - Extension.critical and BasicConstraints.cA encoded as an explicit
 *     FALSE are accepted, although DER (X.690 §11.5) says a DEFAULT value
 *     must be omitted. Some encoders (older BouncyCastle, some HSM tools)
 *     write it; the bytes are covered by the signature as received, and we
 *     re-encode every extension we issue, so nothing depends on it.
 *   - The attributes [0] field may be absent (RFC 2986 requires it; some
 *     encoders omit it when empty), and an extensionRequest may hold an
 *     empty Extensions SEQUENCE.
 *   - RSA signature AlgorithmIdentifiers with absent parameters (see sg_key).
 * Subject strings are checked harder than X.520 requires: only
 * PrintableString and UTF8String for DirectoryString attributes (no
 * Teletex/BMP/Universal), PrintableString for C and serialNumber, IA5String
 * for domainComponent and emailAddress; no control characters. Empty
 * values are accepted (except for fixed-length C): istio-agent's Go code
 * encodes its empty Organization as "O=" with a zero-length PrintableString.
 * SAN names must be printable ASCII without spaces.
 *
 * Error messages: DER-level failures from sg_der/sg_key are re-recorded with
 * a prefix naming where they happened ("CSR key: RSA key of 1024 bits is too
 * weak (minimum 2048)"), keeping the file:line of the original detection.
 */
#include "sg_csr.h"
#include "sg_cert_oids.h"
#include "sg_guard.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#define MAX_EXTENSIONS 32

/* Re-records the current error with a prefix; keeps where it was detected. */
static int prefixed(int rc, const char *prefix)
{
	if (rc >= 0)
		return rc;
	const sg_error *e = sg_error_last();
	char msg[SG_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", e->msg);
	return sg_error_set_at(e->file, e->line, rc, "%s: %s", prefix, msg);
}
#define IN(prefix, expr) SG_TRY(prefixed((expr), (prefix)))

static bool oid_is(sg_slice oid, const uint8_t *want, size_t len)
{
	return sg_slice_eq(oid, want, len);
}

/* ---- Subject ---------------------------------------------------------- */

enum { STR_PRINTABLE = 1, STR_UTF8 = 2, STR_IA5 = 4 };

static const struct name_attr {
	sg_name_attr attr;
	const char *name;
	uint8_t oid[10];
	size_t oid_len;
	size_t min, max; /* characters, RFC 5280 Appendix A upper bounds */
	unsigned strings;
} name_attrs[] = {
	{SG_NAME_CN, "CN", {0x55, 0x04, 0x03}, 3, 1, 64, STR_PRINTABLE | STR_UTF8},
	{SG_NAME_SERIAL, "serialNumber", {0x55, 0x04, 0x05}, 3, 1, 64, STR_PRINTABLE},
	{SG_NAME_C, "C", {0x55, 0x04, 0x06}, 3, 2, 2, STR_PRINTABLE},
	{SG_NAME_L, "L", {0x55, 0x04, 0x07}, 3, 1, 128, STR_PRINTABLE | STR_UTF8},
	{SG_NAME_ST, "ST", {0x55, 0x04, 0x08}, 3, 1, 128, STR_PRINTABLE | STR_UTF8},
	{SG_NAME_STREET, "street", {0x55, 0x04, 0x09}, 3, 1, 128, STR_PRINTABLE | STR_UTF8},
	{SG_NAME_O, "O", {0x55, 0x04, 0x0a}, 3, 1, 64, STR_PRINTABLE | STR_UTF8},
	{SG_NAME_OU, "OU", {0x55, 0x04, 0x0b}, 3, 1, 64, STR_PRINTABLE | STR_UTF8},
	/* RFC 4519 §2.4; 63 = one DNS label (RFC 1035 §2.3.4). */
	{SG_NAME_DC, "DC", {0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19}, 10, 1, 63, STR_IA5},
	/* PKCS#9 emailAddress; ub-emailaddress-length 255 (RFC 5280 App. A). */
	{SG_NAME_EMAIL, "emailAddress", {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01}, 9, 1, 255, STR_IA5},
};

static const char *string_type_name(uint8_t tag)
{
	switch (tag) {
	case SG_DER_PRINTABLESTRING: return "PrintableString";
	case SG_DER_UTF8STRING: return "UTF8String";
	case SG_DER_IA5STRING: return "IA5String";
	case 0x14: return "TeletexString";
	case 0x1c: return "UniversalString";
	case 0x1e: return "BMPString";
	default: return "non-string value";
	}
}

static unsigned string_kind(uint8_t tag)
{
	return tag == SG_DER_PRINTABLESTRING ? STR_PRINTABLE
	       : tag == SG_DER_UTF8STRING    ? STR_UTF8
	       : tag == SG_DER_IA5STRING     ? STR_IA5
					     : 0;
}

static bool control_char(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
}

/* Checks a string value's characters; *chars is its length in characters. */
static int check_string(const char *attr, uint8_t tag, sg_slice v, size_t *chars)
{
	size_t n = 0;
	for (size_t i = 0; i < v.len; n++) {
		uint32_t cp = v.p[i];
		if (tag == SG_DER_UTF8STRING) {
			SG_ENSURE(sg_der_utf8_next(v, &i, &cp), SG_EINVAL, "CSR subject %s is not valid UTF-8", attr);
		} else {
			i++;
			SG_ENSURE(cp < 0x80, SG_EINVAL, "CSR subject %s has a non-ASCII byte (0x%02x)", attr,
				  (unsigned)cp);
		}
		SG_ENSURE(!control_char(cp), SG_EINVAL, "CSR subject %s contains a control character", attr);
		SG_ENSURE(tag != SG_DER_PRINTABLESTRING || sg_der_printable_char((uint8_t)cp), SG_EINVAL,
			  "CSR subject %s has a character not allowed in a PrintableString ('%c')", attr, (char)cp);
	}
	*chars = n;
	return SG_OK;
}

/*
 *   AttributeTypeAndValue ::= SEQUENCE { type OID, value ANY -- DirectoryString etc. }
 */
static int parse_atv(sg_rdn *out, sg_slice atv)
{
	sg_reader r = sg_reader_of(atv);
	sg_slice oid, value;
	uint8_t tag;
	IN("CSR subject", sg_der_read(&r, SG_DER_OID, &oid, NULL));
	const struct name_attr *a = NULL;
	for (size_t i = 0; i < sizeof(name_attrs) / sizeof(name_attrs[0]) && !a; i++)
		if (oid_is(oid, name_attrs[i].oid, name_attrs[i].oid_len))
			a = &name_attrs[i];
	if (!a) {
		char buf[64];
		SG_BAIL(SG_EINVAL, "CSR subject attribute %s is not supported", sg_oid_format(oid, buf, sizeof(buf)));
	}
	IN("CSR subject", sg_der_read_any(&r, &tag, &value, NULL));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR subject %s has trailing data", a->name);
	SG_ENSURE(string_kind(tag) & a->strings, SG_EINVAL, "CSR subject %s as a %s is not supported", a->name,
		  string_type_name(tag));
	size_t chars = 0;
	SG_TRY(check_string(a->name, tag, value, &chars));
	if (a->min == a->max)
		SG_ENSURE(chars == a->min, SG_EINVAL, "CSR subject %s must be exactly %zu characters (is %zu)",
			  a->name, a->min, chars);
	SG_ENSURE(chars <= a->max, SG_EINVAL, "CSR subject %s is %zu characters long (maximum %zu)", a->name,
		  chars, a->max);
	out->attr = a->attr;
	out->string_tag = tag;
	out->value = value;
	return SG_OK;
}

/*
 *   Name ::= RDNSequence ::= SEQUENCE OF RelativeDistinguishedName
 *   RelativeDistinguishedName ::= SET SIZE (1..MAX) OF AttributeTypeAndValue
 */
static int parse_name(sg_csr *out, sg_slice name)
{
	sg_reader r = sg_reader_of(name);
	while (!sg_reader_done(&r)) {
		sg_slice rdn, atv;
		IN("CSR subject", sg_der_read(&r, SG_DER_SET, &rdn, NULL));
		SG_ENSURE(out->subject_len < SG_CSR_MAX_RDNS, SG_EINVAL, "CSR subject has more than %d attributes",
			  SG_CSR_MAX_RDNS);
		sg_reader rr = sg_reader_of(rdn);
		SG_ENSURE(!sg_reader_done(&rr), SG_EINVAL, "CSR subject has an empty RDN");
		IN("CSR subject", sg_der_read(&rr, SG_DER_SEQUENCE, &atv, NULL));
		SG_ENSURE(sg_reader_done(&rr), SG_EINVAL, "CSR subject has a multi-valued RDN (not supported)");
		SG_TRY(parse_atv(&out->subject[out->subject_len], atv));
		out->subject_len++;
	}
	return SG_OK;
}

/* ---- Extensions ------------------------------------------------------- */

static const char *const general_name_types[9] = {
	"otherName", "rfc822Name", "dNSName", "x400Address", "directoryName",
	"ediPartyName", "uniformResourceIdentifier", "iPAddress", "registeredID",
};

/*
 *   GeneralName ::= CHOICE { otherName [0], rfc822Name [1] IA5String,
 *     dNSName [2] IA5String, x400Address [3], directoryName [4],
 *     ediPartyName [5], uniformResourceIdentifier [6] IA5String,
 *     iPAddress [7] OCTET STRING, registeredID [8] OID }
 */
static int parse_general_name(sg_csr *out, uint8_t tag, sg_slice v)
{
	unsigned num = tag & 0x1f;
	SG_ENSURE((tag & 0xc0) == 0x80 && num < 9, SG_EINVAL, "CSR SAN has an unknown GeneralName tag 0x%02x", tag);
	const char *type = general_name_types[num];
	SG_ENSURE(num == SG_SAN_EMAIL || num == SG_SAN_DNS || num == SG_SAN_URI || num == SG_SAN_IP, SG_EINVAL,
		  "CSR SAN type %s is not supported", type);
	SG_ENSURE(!(tag & 0x20), SG_EINVAL, "CSR SAN %s must be primitive", type);
	SG_ENSURE(out->san_count < SG_CSR_MAX_SANS, SG_EINVAL, "CSR requests more than %d SANs", SG_CSR_MAX_SANS);

	if (num == SG_SAN_IP) {
		SG_ENSURE(v.len == 4 || v.len == 16, SG_EINVAL, "CSR SAN iPAddress of %zu bytes (must be 4 or 16)",
			  v.len);
	} else {
		SG_ENSURE(v.len > 0, SG_EINVAL, "CSR SAN %s is empty", type);
		SG_ENSURE(v.len <= SG_SAN_MAX_LEN, SG_EINVAL, "CSR SAN %s is longer than %d bytes", type,
			  SG_SAN_MAX_LEN);
		for (size_t i = 0; i < v.len; i++) {
			SG_ENSURE(v.p[i] != ' ', SG_EINVAL, "CSR SAN %s contains a space", type);
			SG_ENSURE(v.p[i] > 0x20 && v.p[i] < 0x7f, SG_EINVAL,
				  "CSR SAN %s contains a control or non-ASCII byte (0x%02x)", type, v.p[i]);
		}
	}
	out->sans[out->san_count].type = (sg_san_type)num;
	out->sans[out->san_count].value = v;
	out->san_count++;
	return SG_OK;
}

/*   SubjectAltName ::= GeneralNames ::= SEQUENCE SIZE (1..MAX) OF GeneralName */
static int parse_san(sg_csr *out, sg_slice value)
{
	sg_reader r = sg_reader_of(value);
	sg_slice names;
	IN("CSR subjectAltName", sg_der_read(&r, SG_DER_SEQUENCE, &names, NULL));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR subjectAltName has trailing data");
	sg_reader g = sg_reader_of(names);
	SG_ENSURE(!sg_reader_done(&g), SG_EINVAL, "CSR subjectAltName is empty");
	while (!sg_reader_done(&g)) {
		uint8_t tag;
		sg_slice v;
		IN("CSR subjectAltName", sg_der_read_any(&g, &tag, &v, NULL));
		SG_TRY(parse_general_name(out, tag, v));
	}
	out->has_san_ext = true;
	return SG_OK;
}

/*
 *   KeyUsage ::= BIT STRING { digitalSignature (0), ..., decipherOnly (8) }
 *
 * A named bit list: DER (X.690 §11.2.2) drops trailing zero bits, so the
 * last used bit is 1 and the unused bits (§11.2.1) are 0. That is why this
 * does not use sg_der_read_bits, which requires zero unused bits.
 */
static int parse_key_usage(sg_csr *out, sg_slice value)
{
	sg_reader r = sg_reader_of(value);
	sg_slice c;
	IN("CSR keyUsage", sg_der_read(&r, SG_DER_BIT_STRING, &c, NULL));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR keyUsage has trailing data");
	SG_ENSURE(c.len >= 1 && c.p[0] <= 7 && (c.len > 1 || c.p[0] == 0), SG_EINVAL,
		  "CSR keyUsage is not a valid BIT STRING");
	SG_ENSURE(c.len >= 2, SG_EINVAL, "CSR keyUsage has no bits set");
	SG_ENSURE(c.len <= 3, SG_EINVAL, "CSR keyUsage has more than 16 bits");
	unsigned unused = c.p[0];
	uint8_t last = c.p[c.len - 1];
	SG_ENSURE((last & ((1u << unused) - 1)) == 0, SG_EINVAL, "CSR keyUsage has non-zero unused bits");
	SG_ENSURE(last & (1u << unused), SG_EINVAL, "CSR keyUsage is not DER (trailing zero bits)");

	size_t nbits = (c.len - 1) * 8 - unused;
	uint32_t ku = 0;
	for (size_t i = 0; i < nbits; i++)
		if (c.p[1 + i / 8] & (0x80u >> (i % 8)))
			ku |= 1u << i;
	SG_ENSURE(ku < (1u << 9), SG_EINVAL, "CSR keyUsage sets a bit beyond decipherOnly");
	out->has_key_usage = true;
	out->key_usage = ku;
	return SG_OK;
}

/*   ExtKeyUsageSyntax ::= SEQUENCE SIZE (1..MAX) OF KeyPurposeId (OID) */
static int parse_ext_key_usage(sg_csr *out, sg_slice value)
{
	sg_reader r = sg_reader_of(value);
	sg_slice seq;
	IN("CSR extKeyUsage", sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR extKeyUsage has trailing data");
	sg_reader s = sg_reader_of(seq);
	SG_ENSURE(!sg_reader_done(&s), SG_EINVAL, "CSR extKeyUsage is empty");
	uint32_t eku = 0;
	while (!sg_reader_done(&s)) {
		sg_slice oid;
		IN("CSR extKeyUsage", sg_der_read(&s, SG_DER_OID, &oid, NULL));
		eku |= sg_eku_bit_of(oid.p, oid.len); /* the encoder's list (sg_cert_oids.h) */
	}
	out->has_ext_key_usage = true;
	out->ext_key_usage = eku;
	return SG_OK;
}

/*
 *   BasicConstraints ::= SEQUENCE {
 *     cA                 BOOLEAN DEFAULT FALSE,
 *     pathLenConstraint  INTEGER (0..MAX) OPTIONAL }
 */
static int parse_basic_constraints(sg_csr *out, sg_slice value)
{
	sg_reader r = sg_reader_of(value);
	sg_slice seq;
	uint8_t tag;
	IN("CSR basicConstraints", sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR basicConstraints has trailing data");
	sg_reader s = sg_reader_of(seq);
	bool ca = false;
	if (sg_der_peek(&s, &tag) == SG_OK && tag == SG_DER_BOOLEAN)
		IN("CSR basicConstraints", sg_der_read_bool(&s, &ca));
	int path_len = -1;
	if (!sg_reader_done(&s)) {
		uint64_t v;
		IN("CSR basicConstraints pathLenConstraint", sg_der_read_uint(&s, &v));
		SG_ENSURE(v <= INT_MAX, SG_EINVAL, "CSR basicConstraints pathLenConstraint is too large");
		path_len = (int)v;
	}
	SG_ENSURE(sg_reader_done(&s), SG_EINVAL, "CSR basicConstraints has trailing data");
	out->has_basic_constraints = true;
	out->is_ca = ca;
	out->path_len = path_len;
	return SG_OK;
}

static const struct ext_kind {
	uint8_t oid[3]; /* id-ce: 2.5.29.<n> */
	const char *name;
	int (*parse)(sg_csr *, sg_slice);
} ext_kinds[] = {
	{{0x55, 0x1d, 0x11}, "subjectAltName", parse_san},
	{{0x55, 0x1d, 0x0f}, "keyUsage", parse_key_usage},
	{{0x55, 0x1d, 0x25}, "extKeyUsage", parse_ext_key_usage},
	{{0x55, 0x1d, 0x13}, "basicConstraints", parse_basic_constraints},
};

/*
 *   Extensions ::= SEQUENCE SIZE (1..MAX) OF Extension
 *   Extension ::= SEQUENCE {
 *     extnID     OBJECT IDENTIFIER,
 *     critical   BOOLEAN DEFAULT FALSE,
 *     extnValue  OCTET STRING -- the DER of the extension's own type }
 */
static int parse_extensions(sg_csr *out, sg_slice exts)
{
	sg_slice seen[MAX_EXTENSIONS];
	size_t nseen = 0;
	sg_reader r = sg_reader_of(exts);
	while (!sg_reader_done(&r)) {
		sg_slice ext, oid, value;
		uint8_t tag;
		char buf[64];
		IN("CSR extension", sg_der_read(&r, SG_DER_SEQUENCE, &ext, NULL));
		sg_reader e = sg_reader_of(ext);
		IN("CSR extension", sg_der_read(&e, SG_DER_OID, &oid, NULL));
		SG_ENSURE(nseen < MAX_EXTENSIONS, SG_EINVAL, "CSR requests more than %d extensions", MAX_EXTENSIONS);
		for (size_t i = 0; i < nseen; i++)
			SG_ENSURE(!sg_slice_eq(seen[i], oid.p, oid.len), SG_EINVAL, "CSR requests extension %s twice",
				  sg_oid_format(oid, buf, sizeof(buf)));
		seen[nseen++] = oid;

		bool critical = false; /* not needed by policy: we re-encode what we issue */
		if (sg_der_peek(&e, &tag) == SG_OK && tag == SG_DER_BOOLEAN)
			IN("CSR extension critical flag", sg_der_read_bool(&e, &critical));
		IN("CSR extension value", sg_der_read(&e, SG_DER_OCTET_STRING, &value, NULL));
		SG_ENSURE(sg_reader_done(&e), SG_EINVAL, "CSR extension %s has trailing data",
			  sg_oid_format(oid, buf, sizeof(buf)));

		const struct ext_kind *k = NULL;
		for (size_t i = 0; i < sizeof(ext_kinds) / sizeof(ext_kinds[0]) && !k; i++)
			if (oid_is(oid, ext_kinds[i].oid, sizeof(ext_kinds[i].oid)))
				k = &ext_kinds[i];
		if (k)
			SG_TRY(k->parse(out, value));
		else
			out->other_extensions++;
	}
	return SG_OK;
}

/* ---- Attributes ------------------------------------------------------- */

static const uint8_t OID_EXTENSION_REQUEST[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e};

/* Attributes we recognise only to refuse them by name. */
static const struct {
	uint8_t oid[10];
	size_t len;
	const char *name;
} refused_attrs[] = {
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x07}, 9, "challengePassword"},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x02}, 9, "unstructuredName"},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x08}, 9, "unstructuredAddress"},
	{{0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x01, 0x0e}, 10, "msExtReq"},
	{{0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x0d, 0x02, 0x03}, 10, "msOSVersion"},
	{{0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x0d, 0x02, 0x02}, 10, "msEnrollmentCSP"},
	{{0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x15, 0x14}, 9, "msRequestClientInfo"},
};

/*
 *   attributes [0] IMPLICIT SET OF Attribute
 *   Attribute ::= SEQUENCE { type OID, values SET SIZE (1..MAX) OF ANY }
 *   extensionRequest: values = SET { Extensions }   (exactly one value)
 */
static int parse_attributes(sg_csr *out, sg_slice attrs)
{
	sg_reader r = sg_reader_of(attrs);
	bool seen_ext = false;
	while (!sg_reader_done(&r)) {
		sg_slice attr, oid, values, exts;
		IN("CSR attributes", sg_der_read(&r, SG_DER_SEQUENCE, &attr, NULL));
		sg_reader a = sg_reader_of(attr);
		IN("CSR attributes", sg_der_read(&a, SG_DER_OID, &oid, NULL));
		if (!oid_is(oid, OID_EXTENSION_REQUEST, sizeof(OID_EXTENSION_REQUEST))) {
			char buf[64];
			const char *name = sg_oid_format(oid, buf, sizeof(buf));
			for (size_t i = 0; i < sizeof(refused_attrs) / sizeof(refused_attrs[0]); i++)
				if (oid_is(oid, refused_attrs[i].oid, refused_attrs[i].len))
					name = refused_attrs[i].name;
			SG_BAIL(SG_EINVAL, "CSR attribute %s is not accepted", name);
		}
		SG_ENSURE(!seen_ext, SG_EINVAL, "CSR has more than one extensionRequest attribute");
		seen_ext = true;
		IN("CSR extensionRequest", sg_der_read(&a, SG_DER_SET, &values, NULL));
		SG_ENSURE(sg_reader_done(&a), SG_EINVAL, "CSR extensionRequest has trailing data");
		sg_reader v = sg_reader_of(values);
		SG_ENSURE(!sg_reader_done(&v), SG_EINVAL, "CSR extensionRequest has no value");
		IN("CSR extensionRequest", sg_der_read(&v, SG_DER_SEQUENCE, &exts, NULL));
		SG_ENSURE(sg_reader_done(&v), SG_EINVAL, "CSR extensionRequest has more than one value");
		SG_TRY(parse_extensions(out, exts));
	}
	return SG_OK;
}

/* ---- CertificationRequest --------------------------------------------- */

/*
 *   CertificationRequestInfo ::= SEQUENCE {
 *     version       INTEGER { v1(0) },
 *     subject       Name,
 *     subjectPKInfo SubjectPublicKeyInfo,
 *     attributes    [0] IMPLICIT SET OF Attribute }
 */
static int parse_info(sg_csr *out, sg_slice info)
{
	sg_reader r = sg_reader_of(info);
	uint64_t version;
	sg_slice subject, spki, spki_tlv, attrs;
	IN("CSR version", sg_der_read_uint(&r, &version));
	SG_ENSURE(version == 0, SG_EINVAL, "CSR version %llu is not supported", (unsigned long long)version);
	IN("CSR subject", sg_der_read(&r, SG_DER_SEQUENCE, &subject, NULL));
	SG_TRY(parse_name(out, subject));
	IN("CSR key", sg_der_read(&r, SG_DER_SEQUENCE, &spki, &spki_tlv));
	IN("CSR key", sg_pubkey_parse(&out->key, spki_tlv.p, spki_tlv.len));
	if (!sg_reader_done(&r)) {
		IN("CSR attributes", sg_der_read(&r, SG_DER_CTX0, &attrs, NULL));
		SG_TRY(parse_attributes(out, attrs));
	}
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR request info has %zu trailing bytes", sg_reader_left(&r));
	return SG_OK;
}

/*
 * Looks at the outermost TLV header only, so that the common ways a CSR
 * arrives broken get a plain message (truncated, BER, not a SEQUENCE)
 * rather than a DER reader's. r is a copy: this consumes nothing.
 */
static int check_outer(sg_reader r)
{
	uint8_t tag;
	sg_slice b;
	SG_TRY(sg_der_peek(&r, &tag));
	SG_ENSURE(tag == SG_DER_SEQUENCE, SG_EINVAL, "CSR is not DER (expected a SEQUENCE, found tag 0x%02x)", tag);
	SG_ENSURE(sg_reader_bytes(&r, 2, &b) == SG_OK, SG_EINVAL, "CSR is truncated");
	uint8_t first = b.p[1];
	SG_ENSURE(first != 0x80, SG_EINVAL, "CSR uses an indefinite length (BER); DER is required");
	size_t len = first;
	if (first & 0x80) {
		size_t nlen = first & 0x7f;
		if (nlen > 3)
			return SG_OK; /* sg_der_read_any names the problem */
		SG_ENSURE(sg_reader_bytes(&r, nlen, &b) == SG_OK, SG_EINVAL, "CSR is truncated");
		len = 0;
		for (size_t i = 0; i < nlen; i++)
			len = (len << 8) | b.p[i];
	}
	SG_ENSURE(len <= sg_reader_left(&r), SG_EINVAL, "CSR is truncated (%zu of %zu bytes)", r.len,
		  r.off + len);
	return SG_OK;
}

/*
 *   CertificationRequest ::= SEQUENCE {
 *     certificationRequestInfo CertificationRequestInfo,
 *     signatureAlgorithm       AlgorithmIdentifier,
 *     signature                BIT STRING }
 */
int sg_csr_parse(sg_csr *out, const uint8_t *der, size_t len)
{
	memset(out, 0, sizeof(*out));
	out->path_len = -1;
	SG_ENSURE(len <= SG_CSR_MAX_DER, SG_EINVAL, "CSR of %zu bytes exceeds the maximum of %d bytes", len,
		  SG_CSR_MAX_DER);
	SG_ENSURE(len > 0, SG_EINVAL, "CSR is empty");

	sg_reader top = sg_reader_of((sg_slice){der, len});
	sg_slice csr, info;
	SG_TRY(check_outer(top));
	IN("CSR is not valid DER", sg_der_read(&top, SG_DER_SEQUENCE, &csr, &out->der));
	SG_ENSURE(sg_reader_done(&top), SG_EINVAL, "CSR has %zu trailing bytes", sg_reader_left(&top));

	sg_reader r = sg_reader_of(csr);
	IN("CSR request info", sg_der_read(&r, SG_DER_SEQUENCE, &info, &out->info));
	SG_TRY(parse_info(out, info));
	IN("CSR", sg_sigalg_parse(&r, &out->sigalg));
	IN("CSR signature", sg_der_read_bits(&r, &out->signature));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR has trailing data after the signature");
	SG_ENSURE(sg_sigalg_is_ec(out->sigalg) == (out->key.kind == SG_PUBKEY_EC), SG_EINVAL,
		  "CSR is signed with %s but its key is %s", sg_sigalg_name(out->sigalg),
		  out->key.kind == SG_PUBKEY_EC ? "EC" : "RSA");
	return SG_OK;
}

int sg_csr_verify(const sg_csr *csr, sg_crypto *c)
{
	int rc = sg_crypto_verify(c, &csr->key, csr->sigalg, csr->info.p, csr->info.len, csr->signature.p,
				  csr->signature.len);
	if (rc == SG_EAUTH)
		SG_BAIL(SG_EAUTH, "CSR signature does not verify");
	return prefixed(rc, "CSR signature");
}
