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
#include "sg_csr_facts.h"
#include "sg_guard.h"
#include "sg_hex.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct facts_build {
	sg_csr_facts *f;
	size_t attr_cap, san_cap;
	size_t names_seen; /* GeneralNames read, listed or not */
} facts_build;

/* ---- text arena -------------------------------------------------------- */

/* Reserves room for max bytes plus a NUL; text_commit fixes the length. */
static int text_reserve(sg_csr_facts *f, size_t max, char **p)
{
	SG_ENSURE(max < f->arena_cap - f->arena_len, SG_EINTERNAL, "CSR facts: text arena exhausted (a bug)");
	*p = f->arena + f->arena_len;
	return SG_OK;
}

static const char *text_commit(sg_csr_facts *f, size_t n)
{
	char *p = f->arena + f->arena_len;
	p[n] = '\0';
	f->arena_len += n + 1;
	return p;
}

static int text_put(sg_csr_facts *f, const void *src, size_t n, const char **out)
{
	char *p = NULL;
	SG_TRY(text_reserve(f, n, &p));
	if (n)
		memcpy(p, src, n);
	*out = text_commit(f, n);
	return SG_OK;
}

static int text_hex(sg_csr_facts *f, sg_slice s, const char **out, size_t *outlen)
{
	char *p = NULL;
	SG_TRY(text_reserve(f, 2 * s.len, &p));
	sg_hex_encode(p, s.p, s.len); /* its NUL is where text_commit puts one */
	*out = text_commit(f, 2 * s.len);
	if (outlen)
		*outlen = 2 * s.len;
	return SG_OK;
}

/* Appends the UTF-8 form of cp (a valid scalar value) at p; returns bytes. */
static size_t utf8_put(char *p, uint32_t cp)
{
	if (cp < 0x80) {
		p[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		p[0] = (char)(0xc0 | (cp >> 6));
		p[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		p[0] = (char)(0xe0 | (cp >> 12));
		p[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		p[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | (cp >> 18));
	p[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	p[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	p[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* ---- OIDs as Go reads them ---------------------------------------------- */

/*
 * encoding/asn1's parseObjectIdentifier and ObjectIdentifier.String():
 * base-128 subidentifiers of at most 31 bits, minimally encoded, the first
 * one split into two arcs. Writes the dotted form into out (cap >= 4 *
 * oid.len + 2 always suffices) and returns NULL, or returns Go's error.
 */
static const char *oid_text(sg_slice oid, char *out, size_t cap, size_t *outlen)
{
	if (oid.len == 0)
		return "asn1: syntax error: zero length OBJECT IDENTIFIER";
	size_t i = 0, used = 0;
	bool first = true;
	while (i < oid.len) {
		uint64_t v = 0;
		for (int shifted = 0;; shifted++) {
			if (i >= oid.len)
				return "asn1: syntax error: truncated base 128 integer";
			if (shifted == 5)
				return "asn1: structure error: base 128 integer too large";
			uint8_t b = oid.p[i++];
			if (shifted == 0 && b == 0x80)
				return "asn1: syntax error: integer is not minimally encoded";
			v = (v << 7) | (b & 0x7f);
			if (!(b & 0x80))
				break;
		}
		if (v > INT32_MAX)
			return "asn1: structure error: base 128 integer too large";
		int n;
		if (first) {
			uint64_t a = v < 80 ? v / 40 : 2, b = v < 80 ? v % 40 : v - 80;
			n = snprintf(out + used, cap - used, "%" PRIu64 ".%" PRIu64, a, b);
			first = false;
		} else {
			n = snprintf(out + used, cap - used, ".%" PRIu64, v);
		}
		if (n < 0 || (size_t)n >= cap - used)
			return "OID text does not fit (a bug)";
		used += (size_t)n;
	}
	*outlen = used;
	return NULL;
}

/* Decodes an OID into the arena; the Go error when Go would refuse it. */
static int text_oid(sg_csr_facts *f, sg_slice oid, const char **out, const char **goerr)
{
	char *p = NULL;
	size_t n = 0;
	SG_TRY(text_reserve(f, 4 * oid.len + 2, &p));
	*goerr = oid_text(oid, p, 4 * oid.len + 3, &n);
	if (!*goerr)
		*out = text_commit(f, n);
	return SG_OK;
}

/* An OID that must be valid: SG_EINVAL with Go's error under what. */
static int need_oid(sg_csr_facts *f, sg_slice oid, const char *what, const char **out)
{
	const char *goerr;
	SG_TRY(text_oid(f, oid, out, &goerr));
	SG_ENSURE(!goerr, SG_EINVAL, "CSR %s: %s", what, goerr);
	return SG_OK;
}

static bool oid_eq(sg_slice oid, const uint8_t *want, size_t len)
{
	return sg_slice_eq(oid, want, len);
}

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
	SG_TRY(text_reserve(f, n / 2 * 3, &p));
	size_t used = 0;
	for (size_t i = 0; i < n; i += 2) {
		uint32_t u = (uint32_t)v.p[i] << 8 | v.p[i + 1];
		if (u >= 0xd800 && u < 0xdc00 && i + 3 < n) {
			uint32_t lo = (uint32_t)v.p[i + 2] << 8 | v.p[i + 3];
			if (lo >= 0xdc00 && lo < 0xe000) {
				used += utf8_put(p + used, 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00));
				i += 2;
				continue;
			}
		}
		if (u >= 0xd800 && u < 0xe000)
			u = 0xfffd;
		used += utf8_put(p + used, u);
	}
	*out = text_commit(f, used);
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
	SG_TRY(text_reserve(f, v.len, &p));
	size_t used = 0;
	for (size_t i = 0; i < v.len; i += 4)
		used += utf8_put(p + used, (uint32_t)v.p[i] << 24 | (uint32_t)v.p[i + 1] << 16 |
		                               (uint32_t)v.p[i + 2] << 8 | v.p[i + 3]);
	*out = text_commit(f, used);
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
		return text_hex(f, tlv, &a->value, &a->value_len);
	}
	default:
		a->is_string = false;
		return text_hex(f, tlv, &a->value, &a->value_len);
	}
	a->value_len = v.len;
	return text_put(f, v.p, v.len, &a->value);
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
	SG_TRY(need_oid(b->f, oid, "subject attribute type", &a->oid));
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
		if (oid_eq(curve, curves[i].oid, curves[i].len))
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
	SG_TRY(need_oid(f, oid, "key algorithm", &f->key_oid));
	if (sg_reader_left(&a) > 0) {
		sg_reader one = a;
		uint8_t tag;
		sg_slice v;
		SG_ENSURE(sg_der_read_any(&one, &tag, &v, NULL) == SG_OK && sg_reader_done(&one), SG_EINVAL,
		          "CSR key: the algorithm parameters are not one valid TLV");
	}
	if (oid_eq(oid, OID_RSA, sizeof(OID_RSA)))
		return rsa_key(f, &a, key);
	if (oid_eq(oid, OID_EC, sizeof(OID_EC)))
		return ec_key(f, &a, key);
	if (oid_eq(oid, OID_ED25519, sizeof(OID_ED25519))) {
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

/* ---- subjectAltName ------------------------------------------------------- */

static const char *const san_type_names[9] = {
    "otherName", "rfc822Name",   "dNSName", "x400Address", "directoryName", "ediPartyName", "uniformResourceIdentifier",
    "iPAddress", "registeredID",
};

const char *sg_csr_facts_san_type_name(sg_csr_facts_san_type t)
{
	return (unsigned)t < 9 ? san_type_names[t] : "unknown GeneralName";
}

/* Records cert-manager's decoding failure: the first one, and only for the
 * first subjectAltName extension (approver-policy stops at the second). */
static int cm_error(sg_csr_facts *f, const char *fmt, ...) SG_PRINTF(2, 3);
static int cm_error(sg_csr_facts *f, const char *fmt, ...)
{
	if (f->san_decode_error || f->san_extensions != 1)
		return SG_OK;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	size_t len = n < 0 ? 0 : (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
	return text_put(f, buf, len, &f->san_decode_error);
}

/*
 * net.IP.String(): dotted IPv4 for 4 bytes and for IPv4-mapped IPv6
 * (::ffff:a.b.c.d); otherwise netip's RFC 5952 form: lowercase hex groups
 * without leading zeros, the longest run of two or more zero groups (the
 * first of equal runs) as "::". out holds at least 40 bytes.
 */
static size_t ip_text(const uint8_t *ip, size_t n, char *out)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (n == 16 && memcmp(ip, mapped, 12) == 0) {
		ip += 12;
		n = 4;
	}
	if (n == 4)
		return (size_t)snprintf(out, 40, "%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
	unsigned g[8];
	for (int i = 0; i < 8; i++)
		g[i] = (unsigned)ip[2 * i] << 8 | ip[2 * i + 1];
	int zs = -1, ze = -1;
	for (int i = 0; i < 8; i++) {
		int j = i;
		while (j < 8 && g[j] == 0)
			j++;
		if (j - i >= 2 && j - i > ze - zs) {
			zs = i;
			ze = j;
		}
	}
	size_t used = 0;
	for (int i = 0; i < 8; i++) {
		if (i == zs) {
			out[used++] = ':';
			out[used++] = ':';
			i = ze - 1;
			continue;
		}
		if (i > 0 && i != ze)
			out[used++] = ':';
		used += (size_t)snprintf(out + used, 40 - used, "%x", g[i]);
	}
	out[used] = '\0';
	return used;
}

static bool alnum(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool hexdig(uint8_t c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Characters Go's url package keeps as they are in a path (validEncoded,
 * encodePath) and in a fragment (validEncoded, encodeFragment); '%' is
 * checked apart. */
static bool path_char(uint8_t c)
{
	return alnum(c) || (c && strchr("-._~!$&'()*+,;=:@[]/", c));
}

static bool frag_char(uint8_t c)
{
	return path_char(c) || c == '?';
}

/* A path or fragment whose escapes are all %XX. */
static bool encoded_ok(const char *s, size_t n, bool (*ok)(uint8_t))
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%') {
			if (i + 2 >= n || !hexdig((uint8_t)s[i + 1]) || !hexdig((uint8_t)s[i + 2]))
				return false;
			i += 2;
		} else if (!ok((uint8_t)s[i])) {
			return false;
		}
	}
	return true;
}

/* crypto/x509's domainToReverseLabels check on a URI's host: no empty
 * label (so no leading, trailing or doubled dot). */
static bool x509_uri_host(const char *h, size_t n)
{
	if (n == 0)
		return true;
	if (h[0] == '.' || h[n - 1] == '.')
		return false;
	for (size_t i = 1; i < n; i++)
		if (h[i] == '.' && h[i - 1] == '.')
			return false;
	return true;
}

static bool port_ok(const char *p, size_t n)
{
	if (n == 0)
		return true;
	if (p[0] != ':')
		return false;
	for (size_t i = 1; i < n; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	return true;
}

/* The authority of a hierarchical URI, without userinfo. */
static const char *uri_host_problem(const char *h, size_t n)
{
	if (memchr(h, '@', n))
		return "a userinfo part";
	if (n > 0 && h[0] == '[') {
		const char *end = NULL;
		for (size_t i = n; i-- > 0;)
			if (h[i] == ']') {
				end = h + i;
				break;
			}
		if (!end)
			return "a '[' without ']' in the host";
		size_t in = (size_t)(end - h) - 1;
		char addr[64];
		unsigned char bin[16];
		if (in == 0 || in >= sizeof(addr))
			return "an IP literal that is not an IPv6 address";
		for (size_t i = 1; i <= in; i++)
			if (!hexdig((uint8_t)h[i]) && h[i] != ':' && h[i] != '.')
				return "an IP literal that is not an IPv6 address";
		memcpy(addr, h + 1, in);
		addr[in] = '\0';
		if (inet_pton(AF_INET6, addr, bin) != 1)
			return "an IP literal that is not an IPv6 address";
		if (!port_ok(end + 1, n - in - 2))
			return "an invalid port";
	} else {
		size_t colon = n;
		for (size_t i = n; i-- > 0;)
			if (h[i] == ':') {
				colon = i;
				break;
			}
		if (!port_ok(h + colon, n - colon))
			return "an invalid port";
		for (size_t i = 0; i < colon; i++)
			if (!alnum((uint8_t)h[i]) && !strchr("-._~!$&'()*+,;=:", h[i]))
				return "a host character Go would refuse or escape";
	}
	if (!x509_uri_host(h, n))
		return "an invalid domain (crypto/x509 refuses empty labels)";
	return NULL;
}

/*
 * A URI as Go's url.Parse followed by URL.String() gives it back, for the
 * URIs whose round trip this reproduces exactly. Go's grammar, in its
 * order: a scheme ([A-Za-z][A-Za-z0-9+.-]* before the first ':', printed
 * in lower case; a ':' first is an error; anything else is a reference
 * without scheme, whose first path segment may then hold no ':'); the
 * fragment after the first '#' (an empty one is dropped); the query after
 * the first '?' (kept verbatim); then an opaque part (a scheme and no
 * leading '/': verbatim), or "//" authority (not "///" without a scheme)
 * and a path. An empty host prints no "//" unless a scheme and a path
 * follow ("s://" prints "s:"). Paths and fragments must hold only what Go
 * leaves unescaped, and %XX escapes; a host only unreserved characters and
 * sub-delims, a port, or a bracketed IPv6 address. Anything else -- a
 * userinfo part, a '%' in the host, a character Go would re-escape -- is
 * refused: its Go rendering is not reproduced here, and a policy must not
 * compare a string Go would not produce. out has room for n + 1 bytes
 * (the result is never longer).
 */
static const char *go_uri(const char *s, size_t n, char *out, size_t *outlen)
{
	for (size_t i = 0; i < n; i++)
		if ((uint8_t)s[i] <= 0x20 || (uint8_t)s[i] >= 0x7f)
			return (uint8_t)s[i] == ' ' ? "a space" : "net/url: invalid control character in URL";
	size_t sl = 0; /* scheme length, 0 for none (getScheme) */
	for (size_t i = 0; i < n; i++) {
		uint8_t c = (uint8_t)s[i];
		if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
			continue;
		if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.') {
			if (i == 0)
				break;
			continue;
		}
		if (c == ':') {
			if (i == 0)
				return "missing protocol scheme";
			sl = i;
		}
		break;
	}
	bool scheme = sl > 0;
	const char *rest = scheme ? s + sl + 1 : s;
	size_t rn = scheme ? n - sl - 1 : n;
	const char *hash = memchr(rest, '#', rn);
	size_t hn = hash ? (size_t)(hash - rest) : rn; /* before '#' */
	const char *frag = hash ? hash + 1 : NULL;
	size_t fn = hash ? rn - hn - 1 : 0;
	if (fn > 0 && !encoded_ok(frag, fn, frag_char))
		return "a fragment Go would re-escape";
	const char *q = memchr(rest, '?', hn);
	size_t pn = q ? (size_t)(q - rest) : hn; /* the hierarchical part */

	size_t used = 0;
	for (size_t i = 0; i < sl; i++)
		out[used++] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 32 : s[i]);
	if (scheme)
		out[used++] = ':';
	if (!scheme && (pn == 0 || rest[0] != '/')) {
		const char *slash = memchr(rest, '/', pn);
		if (memchr(rest, ':', slash ? (size_t)(slash - rest) : pn))
			return "first path segment in URL cannot contain colon";
	}
	bool authority = pn >= 2 && rest[0] == '/' && rest[1] == '/' && (scheme || pn == 2 || rest[2] != '/');
	if (authority) {
		const char *auth = rest + 2;
		const char *slash = memchr(auth, '/', pn - 2);
		size_t an = slash ? (size_t)(slash - auth) : pn - 2;
		const char *path = auth + an;
		size_t pathn = pn - 2 - an;
		const char *why = uri_host_problem(auth, an);
		if (why)
			return why;
		if (!encoded_ok(path, pathn, path_char))
			return "a path Go would re-escape";
		if (an > 0 || (scheme && pathn > 0)) {
			memcpy(out + used, rest, pn);
			used += pn;
		}
	} else {
		if (pn > 0 && (!scheme || rest[0] == '/') && !encoded_ok(rest, pn, path_char))
			return "a path Go would re-escape";
		memcpy(out + used, rest, pn); /* a path, or an opaque part (verbatim in Go) */
		used += pn;
	}
	memcpy(out + used, rest + pn, hn - pn); /* "?query", verbatim */
	used += hn - pn;
	if (fn > 0) {
		out[used++] = '#';
		memcpy(out + used, frag, fn);
		used += fn;
	}
	*outlen = used;
	return NULL;
}

static int add_san(facts_build *b, sg_csr_facts_san_type type, sg_slice content, sg_csr_facts_san **out)
{
	sg_csr_facts *f = b->f;
	if (f->san_count == b->san_cap) {
		size_t cap = b->san_cap ? 2 * b->san_cap : 8;
		sg_csr_facts_san *n = realloc(f->sans, cap * sizeof(*n));
		SG_ENSURE(n, SG_EINTERNAL, "CSR facts: out of memory");
		f->sans = n;
		b->san_cap = cap;
	}
	*out = &f->sans[f->san_count++];
	memset(*out, 0, sizeof(**out));
	(*out)->type = type;
	(*out)->content = content;
	return SG_OK;
}

/* rfc822Name, dNSName, URI: IA5String, which crypto/x509 checks is ASCII. */
static int ia5_name(facts_build *b, unsigned num, sg_slice v)
{
	sg_csr_facts *f = b->f;
	for (size_t i = 0; i < v.len; i++)
		SG_ENSURE(v.p[i] < 0x80, SG_EINVAL, "CSR subjectAltName: x509: SAN %s is malformed",
		          san_type_names[num]);
	sg_csr_facts_san *s;
	SG_TRY(add_san(b, (sg_csr_facts_san_type)num, v, &s));
	if (num != SG_CSR_FACTS_SAN_URI) {
		s->value_len = v.len;
		return text_put(f, v.p, v.len, &s->value);
	}
	char *p = NULL;
	SG_TRY(text_reserve(f, v.len, &p));
	const char *why = go_uri((const char *)v.p, v.len, p, &s->value_len);
	if (why) {
		char shown[96];
		snprintf(shown, sizeof(shown), "%.*s%s", v.len > 80 ? 80 : (int)v.len, (const char *)v.p,
		         v.len > 80 ? "..." : "");
		for (char *c = shown; *c; c++)
			if ((uint8_t)*c < 0x20 || (uint8_t)*c == 0x7f)
				*c = '?';
		SG_BAIL(SG_EINVAL, "CSR subjectAltName URI \"%s\" cannot be evaluated: %s", shown, why);
	}
	s->value = text_commit(f, s->value_len);
	return SG_OK;
}

/*
 *   OtherName ::= SEQUENCE { type-id OBJECT IDENTIFIER, value [0] EXPLICIT ANY }
 * (with the GeneralName's IMPLICIT [0] in place of the SEQUENCE tag).
 */
static int other_name(facts_build *b, sg_slice v)
{
	sg_csr_facts *f = b->f;
	sg_reader r = sg_reader_of(v);
	sg_slice oid, wrap, inner, inner_tlv;
	uint8_t tag;
	if (sg_der_read(&r, SG_DER_OID, &oid, NULL) != SG_OK)
		return cm_error(f, "otherName does not start with its type-id OID");
	const char *oidtxt, *goerr;
	SG_TRY(text_oid(f, oid, &oidtxt, &goerr));
	if (goerr)
		return cm_error(f, "%s", goerr);
	if (sg_der_read(&r, SG_DER_CTX0, &wrap, NULL) != SG_OK || !sg_reader_done(&r))
		return cm_error(f, "otherName %s has no single [0] EXPLICIT value", oidtxt);
	sg_reader w = sg_reader_of(wrap);
	if (sg_der_read_any(&w, &tag, &inner, &inner_tlv) != SG_OK || !sg_reader_done(&w))
		return cm_error(f, "otherName %s value is not one valid TLV", oidtxt);
	sg_csr_facts_san *s;
	SG_TRY(add_san(b, SG_CSR_FACTS_SAN_OTHER_NAME, v, &s));
	s->oid = oidtxt;
	unsigned num = tag & 0x1f;
	if ((tag & 0xc0) == 0 &&
	    (num == SG_DER_UTF8STRING || num == SG_DER_PRINTABLESTRING || num == SG_DER_IA5STRING || num == 0x14)) {
		s->value_len = inner.len;
		return text_put(f, inner.p, inner.len, &s->value);
	}
	return text_hex(f, inner_tlv, &s->value, &s->value_len);
}

/* cert-manager decodes directoryName as [4] IMPLICIT RDNSequence, so the
 * content must be SETs of SEQUENCEs; an RFC 5280 directoryName ([4]
 * EXPLICIT Name: a SEQUENCE inside) is "sequence tag mismatch" to it. */
static bool cm_reads_directory(sg_slice v)
{
	sg_reader r = sg_reader_of(v);
	while (!sg_reader_done(&r)) {
		sg_slice set;
		if (sg_der_read(&r, SG_DER_SET, &set, NULL) != SG_OK)
			return false;
		sg_reader s = sg_reader_of(set);
		while (!sg_reader_done(&s)) {
			sg_slice atv;
			if (sg_der_read(&s, SG_DER_SEQUENCE, &atv, NULL) != SG_OK)
				return false;
		}
	}
	return true;
}

/*
 *   GeneralName ::= CHOICE {
 *     otherName [0] OtherName, rfc822Name [1] IA5String, dNSName [2] IA5String,
 *     x400Address [3] ORAddress, directoryName [4] Name, ediPartyName [5] EDIPartyName,
 *     uniformResourceIdentifier [6] IA5String, iPAddress [7] OCTET STRING,
 *     registeredID [8] OBJECT IDENTIFIER }
 */
static int general_name(facts_build *b, uint8_t tag, sg_slice v)
{
	sg_csr_facts *f = b->f;
	unsigned num = tag & 0x1f;
	bool constructed = tag & 0x20;
	SG_ENSURE(b->names_seen < SG_CSR_FACTS_MAX_SANS, SG_EINVAL,
	          "CSR requests more than %d subject alternative names", SG_CSR_FACTS_MAX_SANS);
	b->names_seen++;
	SG_ENSURE(v.len <= SG_CSR_FACTS_MAX_VALUE, SG_EINVAL, "CSR subjectAltName has a name longer than %d bytes",
	          SG_CSR_FACTS_MAX_VALUE);
	if (num >= 9)
		return cm_error(f, "asn1: structure error: bad SAN choice");
	if ((tag & 0xc0) != 0x80)
		return cm_error(f, "GeneralName with tag 0x%02x is not context-specific", tag);
	const char *name = san_type_names[num];
	sg_csr_facts_san *s;
	switch (num) {
	case SG_CSR_FACTS_SAN_EMAIL:
	case SG_CSR_FACTS_SAN_DNS:
	case SG_CSR_FACTS_SAN_URI:
		if (constructed)
			return cm_error(f, "%s must be primitive", name);
		return ia5_name(b, num, v);
	case SG_CSR_FACTS_SAN_IP: {
		if (constructed)
			return cm_error(f, "%s must be primitive", name);
		SG_ENSURE(v.len == 4 || v.len == 16, SG_EINVAL,
		          "CSR subjectAltName: x509: cannot parse IP address of length %zu", v.len);
		char *p = NULL;
		SG_TRY(add_san(b, SG_CSR_FACTS_SAN_IP, v, &s));
		SG_TRY(text_reserve(f, 40, &p));
		s->value_len = ip_text(v.p, v.len, p);
		s->value = text_commit(f, s->value_len);
		return SG_OK;
	}
	case SG_CSR_FACTS_SAN_OTHER_NAME:
		if (!constructed)
			return cm_error(f, "%s must be constructed", name);
		return other_name(b, v);
	case SG_CSR_FACTS_SAN_DIRECTORY:
	case SG_CSR_FACTS_SAN_EDI_PARTY:
		if (!constructed)
			return cm_error(f, "%s must be constructed", name);
		if (num == SG_CSR_FACTS_SAN_DIRECTORY && !cm_reads_directory(v))
			SG_TRY(cm_error(f, "asn1: structure error: sequence tag mismatch"));
		/* fall through */
	case SG_CSR_FACTS_SAN_X400:
		SG_TRY(add_san(b, (sg_csr_facts_san_type)num, v, &s));
		return text_hex(f, v, &s->value, &s->value_len);
	case SG_CSR_FACTS_SAN_REGISTERED_ID: {
		if (constructed)
			return cm_error(f, "%s must be primitive", name);
		const char *oidtxt, *goerr;
		SG_TRY(text_oid(f, v, &oidtxt, &goerr));
		if (goerr)
			return cm_error(f, "%s", goerr);
		SG_TRY(add_san(b, SG_CSR_FACTS_SAN_REGISTERED_ID, v, &s));
		s->value = oidtxt;
		s->value_len = strlen(oidtxt);
		return SG_OK;
	}
	default:
		SG_BAIL(SG_EINTERNAL, "CSR facts: unreachable GeneralName %u", num);
	}
}

/*   SubjectAltName ::= GeneralNames ::= SEQUENCE SIZE (1..MAX) OF GeneralName
 * (crypto/x509 accepts an empty SEQUENCE and ignores bytes after it;
 * cert-manager refuses those bytes.) */
static int parse_san(facts_build *b, sg_slice value)
{
	sg_csr_facts *f = b->f;
	f->san_extensions++;
	sg_reader r = sg_reader_of(value);
	sg_slice names;
	SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &names, NULL) == SG_OK, SG_EINVAL,
	          "CSR subjectAltName: x509: invalid subject alternative names");
	if (!sg_reader_done(&r))
		SG_TRY(cm_error(f, "x509: trailing data after X.509 extension"));
	sg_reader g = sg_reader_of(names);
	while (!sg_reader_done(&g)) {
		uint8_t tag;
		sg_slice v;
		SG_ENSURE(sg_der_read_any(&g, &tag, &v, NULL) == SG_OK, SG_EINVAL,
		          "CSR subjectAltName: x509: invalid subject alternative name");
		SG_TRY(general_name(b, tag, v));
	}
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
		SG_TRY(need_oid(f, oid, "extension", &oidtxt));
		bool critical = false;
		if (sg_der_peek(&e, &tag) == SG_OK && tag == SG_DER_BOOLEAN)
			SG_ENSURE(sg_der_read_bool(&e, &critical) == SG_OK, SG_EINVAL,
			          "CSR extension %s: asn1: syntax error: invalid boolean", oidtxt);
		SG_ENSURE(sg_der_read(&e, SG_DER_OCTET_STRING, &value, NULL) == SG_OK && sg_reader_done(&e), SG_EINVAL,
		          "CSR extension %s is not a valid Extension", oidtxt);
		bool san = oid_eq(oid, OID_SAN, sizeof(OID_SAN));
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
			SG_TRY(parse_san(b, value));
		else if (oid_eq(oid, OID_KU, sizeof(OID_KU)))
			report(&f->key_usage_ext, key_usage(f, value));
		else if (oid_eq(oid, OID_EKU, sizeof(OID_EKU)))
			report(&f->ext_key_usage_ext, ext_key_usage(f, value));
		else if (oid_eq(oid, OID_BC, sizeof(OID_BC)))
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
		SG_TRY(need_oid(b->f, oid, "attribute type", &oidtxt));
		SG_ENSURE(sg_der_read(&a, SG_DER_SET, &values, NULL) == SG_OK && sg_reader_done(&a), SG_EINVAL,
		          "CSR attribute %s has no valid SET of values", oidtxt);
		if (!oid_eq(oid, OID_EXTENSION_REQUEST, sizeof(OID_EXTENSION_REQUEST)))
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
