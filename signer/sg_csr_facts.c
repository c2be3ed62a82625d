/*
 * sg_csr_facts: what a CertificateRequest policy needs to know about a
 * PKCS#10 request, decoded from the raw bytes (contract in sg_csr_facts.h).
 *
 * Implements, reading only:
 *   - CertificationRequest, RFC 2986 §4 (any version, attributes [0]
 *     optional as in sg_csr.c, signature not verified);
 *   - Name, RFC 5280 §4.1.2.4, every AttributeTypeAndValue of every RDN;
 *   - SubjectPublicKeyInfo, RFC 5280 §4.1.2.7 with RFC 8017 (RSA), RFC 5480
 *     (EC) and RFC 8410 (Ed25519) for the algorithm and size;
 *   - the extensionRequest attribute (PKCS#9, RFC 2985 §5.4.2) and from it
 *     subjectAltName (RFC 5280 §4.2.1.6), keyUsage (§4.2.1.3), extKeyUsage
 *     (§4.2.1.12) and basicConstraints (§4.2.1.9).
 *
 * Why a second CSR parser next to sg_csr.c: that one is the issuance gate
 * and refuses what signet will not sign (a directoryName SAN, a
 * BMPString, an unknown subject attribute, an Ed25519 key); refusing is
 * not reporting. This one must say exactly what a request asks for so that
 * a policy can deny it with approver-policy's words. Its helpers are
 * static and shaped for refusal, so only the DER reader is shared.
 *
 * The files: this one reads the request, its subject, its key and its
 * extensions; subjectAltName is sg_csr_facts_san.c, the Go forms of its
 * IP addresses and URIs sg_csr_facts_goforms.c, and the text arena and
 * OIDs as Go reads them sg_csr_facts_text.c, sharing
 * private/sg_csr_facts_impl.h.
 *
 * The shape follows Go, because approver-policy's verdicts are Go's: the
 * three layers it reads a request through are reproduced here, each with
 * its own failure mode:
 *   1. crypto/x509.ParseCertificateRequest: failures make the request
 *      unevaluable, so sg_csr_facts_parse fails (SG_EINVAL). That covers
 *      subject strings Go's encoding/asn1 refuses (PrintableString outside
 *      its set plus '*' and '&', IA5String above 0x7f, invalid UTF-8,
 *      NumericString outside digits and space, odd-length BMPString),
 *      OIDs Go cannot hold (an arc above 2^31-1), a duplicated extension,
 *      a dNSName/rfc822Name/URI that is not ASCII, an iPAddress not of 4
 *      or 16 bytes, a URI Go's url.Parse refuses, RSA/EC/Ed25519 keys Go
 *      refuses (P-224/256/384/521 only).
 *   2. cert-manager's UnmarshalSANs, which reads every GeneralName by its
 *      tag number: a failure is recorded in san_decode_error and the
 *      request is otherwise reported (approver-policy denies it).
 *   3. approver-policy's evaluators, which need the values as Go prints
 *      them: net.IP.String(), url.URL.String(), ObjectIdentifier.String().
 * Where Go is laxer than DER (BER lengths in places, trailing elements in
 * SEQUENCEs, GeneralNames of the wrong class that crypto/x509 silently
 * skips) this module is stricter, always towards "unevaluable" or
 * "undecodable", never towards a smaller report.
 *
 * Memory: the DER is copied once and every slice points into the copy;
 * all text lives in one arena allocated up front. Its size bound: every
 * text is derived from a disjoint stretch of the DER and is at most four
 * times as long (hex doubles, an OID byte prints as at most "127.", an
 * IPv4 address of 6 DER bytes prints in at most 15), plus one NUL per
 * text; 6 * len + 256 covers it and a bug would be caught, not overrun.
 * The two arrays grow by doubling after their bound has been checked.
 */
#include "sg_csr_facts_impl.h"
#include "sg_guard.h"

#include <stdlib.h>
#include <string.h>

/* ---- subject -------------------------------------------------------------- */

/* Go's isPrintable with allowAsterisk and allowAmpersand, which is how
 * encoding/asn1 reads a PrintableString into an interface value. */
static bool go_printable(uint8_t c)
{
	return sg_der_printable_char(c) || c == '*' || c == '&';
}

/* BMPString (UCS-2, big-endian, read as UTF-16 like Go's parseBMPString:
 * a trailing 00 00 is dropped, unpaired surrogates become U+FFFD). */
static int bmp_text(sg_csr_facts *f, sg_slice v, const char *oid, const char **out, size_t *outlen)
{
	SG_ENSURE(v.len % 2 == 0, SG_EINVAL, "CSR subject attribute %s: pkcs12: odd-length BMP string", oid);
	size_t n = v.len;
	if (n >= 2 && v.p[n - 1] == 0 && v.p[n - 2] == 0)
		n -= 2;
	char *p = NULL;
	SG_TRY(csr_facts_text_reserve(f, n / 2 * 3, &p));
	size_t used = 0;
	for (size_t i = 0; i < n; i += 2) {
		uint32_t u = (uint32_t)v.p[i] << 8 | v.p[i + 1];
		if (u >= 0xd800 && u < 0xdc00 && i + 3 < n) {
			uint32_t lo = (uint32_t)v.p[i + 2] << 8 | v.p[i + 3];
			if (lo >= 0xdc00 && lo < 0xe000) {
				used += csr_facts_utf8_put(p + used, 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00));
				i += 2;
				continue;
			}
		}
		if (u >= 0xd800 && u < 0xe000)
			u = 0xfffd;
		used += csr_facts_utf8_put(p + used, u);
	}
	*out = csr_facts_text_commit(f, used);
	*outlen = used;
	return SG_OK;
}

/* UniversalString (UCS-4, big-endian); false when it is not valid UCS-4
 * (Go does not read UniversalString at all, so this is never an error). */
static int universal_text(sg_csr_facts *f, sg_slice v, bool *ok, const char **out, size_t *outlen)
{
	*ok = false;
	if (v.len % 4)
		return SG_OK;
	for (size_t i = 0; i < v.len; i += 4) {
		uint32_t cp =
		    (uint32_t)v.p[i] << 24 | (uint32_t)v.p[i + 1] << 16 | (uint32_t)v.p[i + 2] << 8 | v.p[i + 3];
		if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
			return SG_OK;
	}
	char *p = NULL;
	SG_TRY(csr_facts_text_reserve(f, v.len, &p));
	size_t used = 0;
	for (size_t i = 0; i < v.len; i += 4)
		used += csr_facts_utf8_put(p + used, (uint32_t)v.p[i] << 24 | (uint32_t)v.p[i + 1] << 16 |
		                                         (uint32_t)v.p[i + 2] << 8 | v.p[i + 3]);
	*out = csr_facts_text_commit(f, used);
	*outlen = used;
	*ok = true;
	return SG_OK;
}

/* The value of one AttributeTypeAndValue, checked as encoding/asn1 checks
 * it when it decodes into an interface value. */
static int attr_value(sg_csr_facts *f, sg_csr_facts_attr *a, uint8_t tag, sg_slice v, sg_slice tlv)
{
	a->tag = tag;
	a->is_string = true;
	switch (tag) {
	case SG_DER_UTF8STRING:
		for (size_t i = 0; i < v.len;) {
			uint32_t cp;
			SG_ENSURE(sg_der_utf8_next(v, &i, &cp), SG_EINVAL,
			          "CSR subject attribute %s: asn1: invalid UTF-8 string", a->oid);
		}
		break;
	case SG_DER_PRINTABLESTRING:
		for (size_t i = 0; i < v.len; i++)
			SG_ENSURE(
			    go_printable(v.p[i]), SG_EINVAL,
			    "CSR subject attribute %s: asn1: syntax error: PrintableString contains invalid character",
			    a->oid);
		break;
	case SG_DER_IA5STRING:
		for (size_t i = 0; i < v.len; i++)
			SG_ENSURE(v.p[i] < 0x80, SG_EINVAL,
			          "CSR subject attribute %s: asn1: syntax error: IA5String contains invalid character",
			          a->oid);
		break;
	case SG_CSR_FACTS_NUMERICSTRING:
		for (size_t i = 0; i < v.len; i++)
			SG_ENSURE(
			    (v.p[i] >= '0' && v.p[i] <= '9') || v.p[i] == ' ', SG_EINVAL,
			    "CSR subject attribute %s: asn1: syntax error: NumericString contains invalid character",
			    a->oid);
		break;
	case SG_CSR_FACTS_TELETEXSTRING:
		break;
	case SG_CSR_FACTS_BMPSTRING:
		return bmp_text(f, v, a->oid, &a->value, &a->value_len);
	case SG_CSR_FACTS_UNIVERSALSTRING: {
		bool ok;
		SG_TRY(universal_text(f, v, &ok, &a->value, &a->value_len));
		if (ok)
			return SG_OK;
		a->is_string = false;
		return csr_facts_text_hex(f, tlv, &a->value, &a->value_len);
	}
	default:
		a->is_string = false;
		return csr_facts_text_hex(f, tlv, &a->value, &a->value_len);
	}
	a->value_len = v.len;
	return csr_facts_text_put(f, v.p, v.len, &a->value);
}

static int add_attr(facts_build *b, sg_csr_facts_attr **out)
{
	sg_csr_facts *f = b->f;
	SG_ENSURE(f->attr_count < SG_CSR_FACTS_MAX_ATTRS, SG_EINVAL, "CSR subject has more than %d attributes",
	          SG_CSR_FACTS_MAX_ATTRS);
	if (f->attr_count == b->attr_cap) {
		size_t cap = b->attr_cap ? 2 * b->attr_cap : 8;
		sg_csr_facts_attr *n = realloc(f->attrs, cap * sizeof(*n));
		SG_ENSURE(n, SG_EINTERNAL, "CSR facts: out of memory");
		f->attrs = n;
		b->attr_cap = cap;
	}
	*out = &f->attrs[f->attr_count];
	memset(*out, 0, sizeof(**out));
	return SG_OK;
}

/*
 *   AttributeTypeAndValue ::= SEQUENCE { type OBJECT IDENTIFIER, value ANY }
 */
static int parse_atv(facts_build *b, sg_slice atv, size_t rdn)
{
	sg_reader r = sg_reader_of(atv);
	sg_slice oid, v, tlv;
	uint8_t tag;
	sg_csr_facts_attr *a = NULL;
	SG_TRY(add_attr(b, &a));
	SG_ENSURE(sg_der_read(&r, SG_DER_OID, &oid, NULL) == SG_OK, SG_EINVAL,
	          "CSR subject: an attribute does not start with its type OID");
	SG_TRY(csr_facts_need_oid(b->f, oid, "subject attribute type", &a->oid));
	SG_ENSURE(sg_der_read_any(&r, &tag, &v, &tlv) == SG_OK, SG_EINVAL,
	          "CSR subject attribute %s has no valid value", a->oid);
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR subject attribute %s has trailing data", a->oid);
	SG_ENSURE(v.len <= SG_CSR_FACTS_MAX_VALUE, SG_EINVAL, "CSR subject attribute %s is longer than %d bytes",
	          a->oid, SG_CSR_FACTS_MAX_VALUE);
	a->rdn = rdn;
	SG_TRY(attr_value(b->f, a, tag, v, tlv));
	b->f->attr_count++;
	return SG_OK;
}

/*
 *   Name ::= RDNSequence ::= SEQUENCE OF RelativeDistinguishedName
 *   RelativeDistinguishedName ::= SET OF AttributeTypeAndValue
 * (An empty RDN is accepted, as Go accepts it; it adds no attribute.)
 */
static int parse_name(facts_build *b, sg_slice name)
{
	sg_reader r = sg_reader_of(name);
	while (!sg_reader_done(&r)) {
		sg_slice rdn;
		SG_ENSURE(sg_der_read(&r, SG_DER_SET, &rdn, NULL) == SG_OK, SG_EINVAL,
		          "CSR subject: a RelativeDistinguishedName is not a valid SET");
		sg_reader rr = sg_reader_of(rdn);
		while (!sg_reader_done(&rr)) {
			sg_slice atv;
			SG_ENSURE(sg_der_read(&rr, SG_DER_SEQUENCE, &atv, NULL) == SG_OK, SG_EINVAL,
			          "CSR subject: an AttributeTypeAndValue is not a valid SEQUENCE");
			SG_TRY(parse_atv(b, atv, b->f->rdn_count));
		}
		b->f->rdn_count++;
	}
	return SG_OK;
}

/* ---- public key ----------------------------------------------------------- */

static const uint8_t OID_RSA[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01};
static const uint8_t OID_EC[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01};
static const uint8_t OID_ED25519[] = {0x2b, 0x65, 0x70};

static const struct {
	uint8_t oid[8];
	size_t len;
	int bits;
} curves[] = {
    {{0x2b, 0x81, 0x04, 0x00, 0x21}, 5, 224},                   /* secp224r1, 1.3.132.0.33 */
    {{0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}, 8, 256}, /* prime256v1 */
    {{0x2b, 0x81, 0x04, 0x00, 0x22}, 5, 384},                   /* secp384r1 */
    {{0x2b, 0x81, 0x04, 0x00, 0x23}, 5, 521},                   /* secp521r1 */
};

/* An INTEGER that must be positive, as Go's ReadASN1Integer + Sign() > 0
 * reads it; *mag is the magnitude without leading zero octets. */
static int positive_integer(sg_reader *r, const char *invalid, const char *notpos, sg_slice *mag)
{
	sg_slice c;
	SG_ENSURE(sg_der_read(r, SG_DER_INTEGER, &c, NULL) == SG_OK && c.len > 0, SG_EINVAL, "CSR key: %s", invalid);
	SG_ENSURE(c.len == 1 || !((c.p[0] == 0 && !(c.p[1] & 0x80)) || (c.p[0] == 0xff && (c.p[1] & 0x80))), SG_EINVAL,
	          "CSR key: %s", invalid);
	SG_ENSURE(!(c.p[0] & 0x80), SG_EINVAL, "CSR key: %s", notpos);
	while (c.len > 0 && c.p[0] == 0) {
		c.p++;
		c.len--;
	}
	SG_ENSURE(c.len > 0, SG_EINVAL, "CSR key: %s", notpos);
	*mag = c;
	return SG_OK;
}

static int rsa_key(sg_csr_facts *f, sg_reader *params, sg_slice key)
{
	static const uint8_t null_tlv[] = {0x05, 0x00};
	sg_slice p;
	SG_ENSURE(sg_reader_left(params) == 2 && sg_reader_bytes(params, 2, &p) == SG_OK && sg_slice_eq(p, null_tlv, 2),
	          SG_EINVAL, "CSR key: x509: RSA key missing NULL parameters");
	sg_reader r = sg_reader_of(key);
	sg_slice seq, n, e;
	SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL) == SG_OK && sg_reader_done(&r), SG_EINVAL,
	          "CSR key: x509: invalid RSA public key");
	sg_reader s = sg_reader_of(seq);
	SG_TRY(positive_integer(&s, "x509: invalid RSA modulus", "x509: RSA modulus is not a positive number", &n));
	SG_TRY(positive_integer(&s, "x509: invalid RSA public exponent",
	                        "x509: RSA public exponent is not a positive number", &e));
	SG_ENSURE(e.len <= 8 && (e.len < 8 || !(e.p[0] & 0x80)), SG_EINVAL,
	          "CSR key: x509: invalid RSA public exponent");
	SG_ENSURE(sg_reader_done(&s), SG_EINVAL, "CSR key: x509: invalid RSA public key");
	SG_ENSURE(n.len <= 2048, SG_EINVAL, "CSR key: RSA modulus of more than 16384 bits");
	int bits = (int)(n.len - 1) * 8;
	for (uint8_t top = n.p[0]; top; top >>= 1)
		bits++;
	f->key_alg = SG_CSR_FACTS_KEY_RSA;
	f->key_size = bits;
	return SG_OK;
}

static int ec_key(sg_csr_facts *f, sg_reader *params, sg_slice point)
{
	sg_slice curve;
	SG_ENSURE(sg_der_read(params, SG_DER_OID, &curve, NULL) == SG_OK && sg_reader_done(params), SG_EINVAL,
	          "CSR key: x509: invalid ECDSA parameters");
	int bits = 0;
	for (size_t i = 0; i < sizeof(curves) / sizeof(curves[0]); i++)
		if (csr_facts_oid_eq(curve, curves[i].oid, curves[i].len))
			bits = curves[i].bits;
	SG_ENSURE(bits, SG_EINVAL, "CSR key: x509: unsupported elliptic curve");
	size_t field = ((size_t)bits + 7) / 8;
	SG_ENSURE(point.len == 1 + 2 * field && point.p[0] == 0x04, SG_EINVAL,
	          "CSR key: x509: failed to unmarshal elliptic curve point");
	f->key_alg = SG_CSR_FACTS_KEY_ECDSA;
	f->key_size = bits;
	return SG_OK;
}

/*
 *   SubjectPublicKeyInfo ::= SEQUENCE {
 *     algorithm AlgorithmIdentifier ::= SEQUENCE { algorithm OID, parameters ANY OPTIONAL },
 *     subjectPublicKey BIT STRING }
 */
static int parse_spki(sg_csr_facts *f, sg_slice spki)
{
	sg_reader r = sg_reader_of(spki);
	sg_slice alg, oid, key;
	SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &alg, NULL) == SG_OK, SG_EINVAL,
	          "CSR key: the algorithm is not a valid AlgorithmIdentifier");
	SG_ENSURE(sg_der_read_bits(&r, &key) == SG_OK, SG_EINVAL, "CSR key: the public key is not a valid BIT STRING");
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "CSR key: SubjectPublicKeyInfo has trailing data");
	sg_reader a = sg_reader_of(alg);
	SG_ENSURE(sg_der_read(&a, SG_DER_OID, &oid, NULL) == SG_OK, SG_EINVAL,
	          "CSR key: the algorithm does not start with an OID");
	SG_TRY(csr_facts_need_oid(f, oid, "key algorithm", &f->key_oid));
	if (sg_reader_left(&a) > 0) {
		sg_reader one = a;
		uint8_t tag;
		sg_slice v;
		SG_ENSURE(sg_der_read_any(&one, &tag, &v, NULL) == SG_OK && sg_reader_done(&one), SG_EINVAL,
		          "CSR key: the algorithm parameters are not one valid TLV");
	}
	if (csr_facts_oid_eq(oid, OID_RSA, sizeof(OID_RSA)))
		return rsa_key(f, &a, key);
	if (csr_facts_oid_eq(oid, OID_EC, sizeof(OID_EC)))
		return ec_key(f, &a, key);
	if (csr_facts_oid_eq(oid, OID_ED25519, sizeof(OID_ED25519))) {
		SG_ENSURE(sg_reader_done(&a), SG_EINVAL, "CSR key: x509: Ed25519 key encoded with illegal parameters");
		SG_ENSURE(key.len == 32, SG_EINVAL, "CSR key: x509: wrong Ed25519 public key size");
		f->key_alg = SG_CSR_FACTS_KEY_ED25519;
		f->key_size = -1;
		return SG_OK;
	}
	f->key_alg = SG_CSR_FACTS_KEY_OTHER;
	f->key_size = 0;
	return SG_OK;
}

/* ---- keyUsage, extKeyUsage, basicConstraints (reported, never fatal) ----- */

/*   KeyUsage ::= BIT STRING { digitalSignature (0), ..., decipherOnly (8) } */
static bool key_usage(sg_csr_facts *f, sg_slice value)
{
	sg_reader r = sg_reader_of(value);
	sg_slice c;
	if (sg_der_read(&r, SG_DER_BIT_STRING, &c, NULL) != SG_OK || !sg_reader_done(&r) || c.len < 1 || c.p[0] > 7 ||
	    (c.len == 1 && c.p[0]))
		return false;
	uint32_t ku = 0;
	size_t nbits = (c.len - 1) * 8 - c.p[0];
	for (size_t i = 0; i < nbits && i < 32; i++)
		if (c.p[1 + i / 8] & (0x80u >> (i % 8)))
			ku |= 1u << i;
	f->key_usage = ku;
	return true;
}

/*   ExtKeyUsageSyntax ::= SEQUENCE SIZE (1..MAX) OF KeyPurposeId */
static bool ext_key_usage(sg_csr_facts *f, sg_slice value)
{
	static const uint8_t id_kp[] = {0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03};
	static const struct {
		uint8_t last;
		uint32_t bit;
	} known[] = {
	    {1, SG_EKU_SERVER_AUTH},      {2, SG_EKU_CLIENT_AUTH},  {3, SG_EKU_CODE_SIGNING},
	    {4, SG_EKU_EMAIL_PROTECTION}, {9, SG_EKU_OCSP_SIGNING},
	};
	sg_reader r = sg_reader_of(value);
	sg_slice seq;
	if (sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL) != SG_OK || !sg_reader_done(&r))
		return false;
	sg_reader s = sg_reader_of(seq);
	uint32_t eku = 0;
	while (!sg_reader_done(&s)) {
		sg_slice oid;
		if (sg_der_read(&s, SG_DER_OID, &oid, NULL) != SG_OK)
			return false;
		uint32_t bit = SG_EKU_OTHER;
		if (oid.len == sizeof(id_kp) + 1 && memcmp(oid.p, id_kp, sizeof(id_kp)) == 0)
			for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
				if (oid.p[sizeof(id_kp)] == known[i].last)
					bit = known[i].bit;
		eku |= bit;
	}
	f->ext_key_usage = eku;
	return true;
}

/*   BasicConstraints ::= SEQUENCE { cA BOOLEAN DEFAULT FALSE, pathLenConstraint INTEGER OPTIONAL } */
static bool basic_constraints(sg_csr_facts *f, sg_slice value)
{
	sg_reader r = sg_reader_of(value);
	sg_slice seq;
	uint8_t tag;
	if (sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL) != SG_OK || !sg_reader_done(&r))
		return false;
	sg_reader s = sg_reader_of(seq);
	bool ca = false;
	if (sg_der_peek(&s, &tag) == SG_OK && tag == SG_DER_BOOLEAN && sg_der_read_bool(&s, &ca) != SG_OK)
		return false;
	if (!sg_reader_done(&s)) {
		sg_slice n;
		if (sg_der_read(&s, SG_DER_INTEGER, &n, NULL) != SG_OK || !sg_reader_done(&s))
			return false;
	}
	f->is_ca = ca;
	return true;
}

/* ---- extensions and attributes ------------------------------------------ */

static const uint8_t OID_SAN[] = {0x55, 0x1d, 0x11};
static const uint8_t OID_KU[] = {0x55, 0x1d, 0x0f};
static const uint8_t OID_EKU[] = {0x55, 0x1d, 0x25};
static const uint8_t OID_BC[] = {0x55, 0x1d, 0x13};
static const uint8_t OID_EXTENSION_REQUEST[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e};

static void report(sg_csr_facts_ext *state, bool ok)
{
	*state = ok ? SG_CSR_FACTS_EXT_PRESENT : SG_CSR_FACTS_EXT_MALFORMED;
}

/*
 *   Extensions ::= SEQUENCE OF Extension
 *   Extension ::= SEQUENCE { extnID OID, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }
 * Duplicates are refused as crypto/x509 refuses them, across every
 * extensionRequest attribute; subjectAltName is counted instead, because
 * approver-policy has a verdict of its own for more than one.
 */
static int parse_extensions(facts_build *b, sg_slice exts, sg_slice *seen, size_t *nseen)
{
	sg_csr_facts *f = b->f;
	sg_reader r = sg_reader_of(exts);
	while (!sg_reader_done(&r)) {
		sg_slice ext, oid, value;
		uint8_t tag;
		const char *oidtxt;
		SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &ext, NULL) == SG_OK, SG_EINVAL,
		          "CSR extensions: an Extension is not a valid SEQUENCE");
		sg_reader e = sg_reader_of(ext);
		SG_ENSURE(sg_der_read(&e, SG_DER_OID, &oid, NULL) == SG_OK, SG_EINVAL,
		          "CSR extensions: an Extension does not start with its OID");
		SG_TRY(csr_facts_need_oid(f, oid, "extension", &oidtxt));
		bool critical = false;
		if (sg_der_peek(&e, &tag) == SG_OK && tag == SG_DER_BOOLEAN)
			SG_ENSURE(sg_der_read_bool(&e, &critical) == SG_OK, SG_EINVAL,
			          "CSR extension %s: asn1: syntax error: invalid boolean", oidtxt);
		SG_ENSURE(sg_der_read(&e, SG_DER_OCTET_STRING, &value, NULL) == SG_OK && sg_reader_done(&e), SG_EINVAL,
		          "CSR extension %s is not a valid Extension", oidtxt);
		bool san = csr_facts_oid_eq(oid, OID_SAN, sizeof(OID_SAN));
		if (!san) {
			for (size_t i = 0; i < *nseen; i++)
				SG_ENSURE(!sg_slice_eq(seen[i], oid.p, oid.len), SG_EINVAL,
				          "CSR extension %s: x509: certificate request contains duplicate requested "
				          "extensions",
				          oidtxt);
		}
		SG_ENSURE(*nseen < SG_CSR_FACTS_MAX_EXTENSIONS, SG_EINVAL, "CSR requests more than %d extensions",
		          SG_CSR_FACTS_MAX_EXTENSIONS);
		seen[(*nseen)++] = oid;
		if (san)
			SG_TRY(csr_facts_parse_san(b, value));
		else if (csr_facts_oid_eq(oid, OID_KU, sizeof(OID_KU)))
			report(&f->key_usage_ext, key_usage(f, value));
		else if (csr_facts_oid_eq(oid, OID_EKU, sizeof(OID_EKU)))
			report(&f->ext_key_usage_ext, ext_key_usage(f, value));
		else if (csr_facts_oid_eq(oid, OID_BC, sizeof(OID_BC)))
			report(&f->basic_constraints_ext, basic_constraints(f, value));
	}
	return SG_OK;
}

/*
 *   attributes [0] IMPLICIT SET OF Attribute
 *   Attribute ::= SEQUENCE { type OID, values SET OF ANY }
 * Only extensionRequest is read, and of it only the first value (as
 * crypto/x509 reads it); other attributes (challengePassword, ...) are
 * not policy's business, but must be well-formed.
 */
static int parse_attributes(facts_build *b, sg_slice attrs)
{
	sg_slice seen[SG_CSR_FACTS_MAX_EXTENSIONS];
	size_t nseen = 0;
	sg_reader r = sg_reader_of(attrs);
	while (!sg_reader_done(&r)) {
		sg_slice attr, oid, values, exts;
		const char *oidtxt;
		SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &attr, NULL) == SG_OK, SG_EINVAL,
		          "CSR attributes: an Attribute is not a valid SEQUENCE");
		sg_reader a = sg_reader_of(attr);
		SG_ENSURE(sg_der_read(&a, SG_DER_OID, &oid, NULL) == SG_OK, SG_EINVAL,
		          "CSR attributes: an Attribute does not start with its type OID");
		SG_TRY(csr_facts_need_oid(b->f, oid, "attribute type", &oidtxt));
		SG_ENSURE(sg_der_read(&a, SG_DER_SET, &values, NULL) == SG_OK && sg_reader_done(&a), SG_EINVAL,
		          "CSR attribute %s has no valid SET of values", oidtxt);
		if (!csr_facts_oid_eq(oid, OID_EXTENSION_REQUEST, sizeof(OID_EXTENSION_REQUEST)))
			continue;
		sg_reader v = sg_reader_of(values);
		if (sg_reader_done(&v))
			continue; /* no value: crypto/x509 skips it */
		SG_ENSURE(sg_der_read(&v, SG_DER_SEQUENCE, &exts, NULL) == SG_OK, SG_EINVAL,
		          "CSR extensionRequest: its value is not a SEQUENCE of Extensions");
		SG_TRY(parse_extensions(b, exts, seen, &nseen));
	}
	return SG_OK;
}

/* ---- CertificationRequest ------------------------------------------------ */

/*
 *   CertificationRequest ::= SEQUENCE {
 *     certificationRequestInfo SEQUENCE {
 *       version INTEGER, subject Name, subjectPKInfo SubjectPublicKeyInfo,
 *       attributes [0] IMPLICIT SET OF Attribute },
 *     signatureAlgorithm AlgorithmIdentifier,
 *     signature BIT STRING }
 */
static int parse_request(facts_build *b)
{
	sg_csr_facts *f = b->f;
	sg_reader top = sg_reader_of((sg_slice){f->der_copy, f->der_len});
	sg_slice csr, info, version, subject, spki, attrs, sigalg, sig;
	SG_ENSURE(sg_der_read(&top, SG_DER_SEQUENCE, &csr, NULL) == SG_OK, SG_EINVAL,
	          "CSR is not a DER SEQUENCE (truncated, BER or not a CSR)");
	SG_ENSURE(sg_reader_done(&top), SG_EINVAL, "CSR has %zu trailing bytes", sg_reader_left(&top));
	sg_reader r = sg_reader_of(csr);
	SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &info, NULL) == SG_OK, SG_EINVAL,
	          "CSR request info is not a valid SEQUENCE");
	SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &sigalg, NULL) == SG_OK, SG_EINVAL,
	          "CSR signature algorithm is not a valid AlgorithmIdentifier");
	SG_ENSURE(sg_der_read(&r, SG_DER_BIT_STRING, &sig, NULL) == SG_OK && sg_reader_done(&r), SG_EINVAL,
	          "CSR signature is not a valid BIT STRING at the end of the request");

	sg_reader i = sg_reader_of(info);
	SG_ENSURE(sg_der_read(&i, SG_DER_INTEGER, &version, NULL) == SG_OK, SG_EINVAL, "CSR version is not an INTEGER");
	SG_ENSURE(sg_der_read(&i, SG_DER_SEQUENCE, &subject, NULL) == SG_OK, SG_EINVAL,
	          "CSR subject is not a valid Name");
	SG_TRY(parse_name(b, subject));
	SG_ENSURE(sg_der_read(&i, SG_DER_SEQUENCE, &spki, NULL) == SG_OK, SG_EINVAL,
	          "CSR key is not a valid SubjectPublicKeyInfo");
	SG_TRY(parse_spki(f, spki));
	if (!sg_reader_done(&i)) {
		SG_ENSURE(sg_der_read(&i, SG_DER_CTX0, &attrs, NULL) == SG_OK, SG_EINVAL,
		          "CSR attributes are not a valid [0] SET");
		SG_TRY(parse_attributes(b, attrs));
	}
	SG_ENSURE(sg_reader_done(&i), SG_EINVAL, "CSR request info has %zu trailing bytes", sg_reader_left(&i));
	return SG_OK;
}

int sg_csr_facts_parse(sg_csr_facts *out, const uint8_t *der, size_t len)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(len <= SG_CSR_FACTS_MAX_DER, SG_EINVAL, "CSR of %zu bytes exceeds the maximum of %d bytes", len,
	          SG_CSR_FACTS_MAX_DER);
	SG_ENSURE(len > 0 && der, SG_EINVAL, "CSR is empty");
	out->der_copy = malloc(len);
	out->arena_cap = 6 * len + 256;
	out->arena = malloc(out->arena_cap);
	if (!out->der_copy || !out->arena) {
		sg_csr_facts_clear(out);
		SG_BAIL(SG_EINTERNAL, "CSR facts: out of memory");
	}
	memcpy(out->der_copy, der, len);
	out->der_len = len;
	facts_build b = {.f = out};
	int rc = parse_request(&b);
	if (rc < 0)
		sg_csr_facts_clear(out);
	return rc;
}

void sg_csr_facts_clear(sg_csr_facts *f)
{
	if (!f)
		return;
	free(f->attrs);
	free(f->sans);
	free(f->der_copy);
	free(f->arena);
	memset(f, 0, sizeof(*f));
}
