/*
 * The names trust-manager gives a certificate in the PKCS#12 and JKS
 * stores of a Bundle target (sg_certset.h, private/sg_certset_impl.h), so
 * that a store written here holds the same bytes as trust-manager's.
 *
 * The alias (trust-manager's certAlias) is the first 8 hex digits of the
 * SHA-256 of the DER, "|", and the subject as Go's pkix.Name.String()
 * prints it. That text is Go's and not RFC 4514's, so it is rebuilt here
 * step by step as Go makes it:
 *   - Go's certificate parser turns every attribute value into a string:
 *     PrintableString, UTF8String, IA5String, NumericString and
 *     T61String as their bytes, BMPString decoded from UTF-16 (a final
 *     NUL dropped, an unpaired surrogate read as U+FFFD);
 *   - Name.String() lists first, each as an RDN of its own, the attributes
 *     that are not one of its nine named fields (C, ST, L, STREET,
 *     POSTALCODE, O, OU, CN, SERIALNUMBER), in the order of the
 *     certificate; then the named fields in that fixed order, all values
 *     of one field in one multi-valued RDN, CN and SERIALNUMBER only when
 *     not empty (the last value wins), whatever RDNs they came in;
 *   - RDNSequence.String() prints that list last RDN first, "," between
 *     RDNs, "+" between values of one RDN; a named field as NAME=value,
 *     escaping , + " \ < > ; anywhere, a space first or last, a # first,
 *     each with a backslash; any other attribute as <dotted OID>=#<hex of
 *     the value re-encoded by Go's asn1.Marshal> (a PrintableString when
 *     every byte is in its set, * and & excluded, otherwise UTF8String:
 *     not the certificate's own encoding), or, when that encoding fails
 *     (the value is not UTF-8), <dotted OID>=<escaped value>;
 *   - Go reads text a rune at a time: a byte that does not start valid
 *     UTF-8 is U+FFFD (written as EF BF BD) where a value is escaped.
 * In a JKS store keystore-go lower-cases the alias (strings.ToLower, the
 * Unicode simple mapping; the table below is Go 1.19's, Unicode 13: a
 * capital letter added later is left as it is). In a PKCS#12 store
 * go-pkcs12 writes it as a BMPString, and refuses characters outside the
 * Basic Multilingual Plane; so does this, with its words.
 *
 * A certificate Go itself could not parse (another string type, an odd
 * BMPString) never reaches trust-manager's stores: its whole bundle fails.
 * Here such values are read as OpenSSL holds them, except the odd
 * BMPString, which is refused. Apart from sg_certset.c because it is a
 * concern of its own: another program's text form, rebuilt exactly.
 */
#include "sg_certset_impl.h"

#include "sg_der.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_ossl.h"
#include "sg_strbuf.h"

#include <openssl/asn1.h>
#include <openssl/objects.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- runes, as Go's range over a string reads them ---- */

#define RUNE_ERROR 0xfffdu

/* The rune at s[*i] and advance *i; a byte that does not start valid UTF-8
 * is U+FFFD, one byte long (utf8.DecodeRuneInString). */
static uint32_t next_rune(sg_slice s, size_t *i)
{
	size_t j = *i;
	uint32_t cp;
	if (sg_der_utf8_next(s, &j, &cp)) {
		*i = j;
		return cp;
	}
	(*i)++;
	return RUNE_ERROR;
}

static bool put_rune(sg_strbuf *b, uint32_t r)
{
	char u[4];
	size_t n;
	if (r < 0x80) {
		u[0] = (char)r;
		n = 1;
	} else if (r < 0x800) {
		u[0] = (char)(0xc0 | (r >> 6));
		u[1] = (char)(0x80 | (r & 0x3f));
		n = 2;
	} else if (r < 0x10000) {
		u[0] = (char)(0xe0 | (r >> 12));
		u[1] = (char)(0x80 | ((r >> 6) & 0x3f));
		u[2] = (char)(0x80 | (r & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (r >> 18));
		u[1] = (char)(0x80 | ((r >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((r >> 6) & 0x3f));
		u[3] = (char)(0x80 | (r & 0x3f));
		n = 4;
	}
	return sg_strbuf_add(b, u, n);
}

/* ---- attribute values as Go's parser gives them ---- */

/* The value of e as Go's string: into b (cleared first). */
static int go_value(const X509_NAME_ENTRY *e, sg_strbuf *b)
{
	const ASN1_STRING *v = X509_NAME_ENTRY_get_data(e);
	const uint8_t *p = ASN1_STRING_get0_data(v);
	size_t n = (size_t)ASN1_STRING_length(v);
	b->len = 0;
	if (ASN1_STRING_type(v) != V_ASN1_BMPSTRING) {
		sg_strbuf_add(b, p, n);
		return SG_OK;
	}
	SG_ENSURE(n % 2 == 0, SG_EINVAL, "a certificate's subject holds a BMPString of odd length");
	if (n >= 2 && p[n - 1] == 0 && p[n - 2] == 0)
		n -= 2; /* the terminator Go drops */
	sg_strbuf_add(b, NULL, 0);
	for (size_t i = 0; i < n; i += 2) {
		uint32_t u = (uint32_t)p[i] << 8 | p[i + 1];
		if (u >= 0xd800 && u < 0xdc00 && i + 3 < n) {
			uint32_t lo = (uint32_t)p[i + 2] << 8 | p[i + 3];
			if (lo >= 0xdc00 && lo < 0xe000) {
				put_rune(b, 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00));
				i += 2;
				continue;
			}
		}
		put_rune(b, u >= 0xd800 && u < 0xe000 ? RUNE_ERROR : u); /* utf16.Decode */
	}
	return SG_OK;
}

/* ---- Name.String() ---- */

/* The named fields, in ToRDNSequence's order. */
static const struct field {
	int nid;
	const char *name;
} fields[] = {
    {NID_countryName, "C"},
    {NID_stateOrProvinceName, "ST"},
    {NID_localityName, "L"},
    {NID_streetAddress, "STREET"},
    {NID_postalCode, "POSTALCODE"},
    {NID_organizationName, "O"},
    {NID_organizationalUnitName, "OU"},
    {NID_commonName, "CN"},
    {NID_serialNumber, "SERIALNUMBER"},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
#define F_CN 7
#define F_SERIAL 8

static int field_of(const X509_NAME_ENTRY *e)
{
	int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(e));
	for (size_t f = 0; f < NFIELDS; f++)
		if (nid != NID_undef && nid == fields[f].nid)
			return (int)f;
	return -1;
}

/* value, escaped as RDNSequence.String() escapes it. */
static void put_escaped(sg_strbuf *out, sg_slice v)
{
	for (size_t k = 0; k < v.len;) {
		size_t at = k;
		uint32_t c = next_rune(v, &k);
		bool esc = c == ',' || c == '+' || c == '"' || c == '\\' || c == '<' || c == '>' || c == ';' ||
		           (c == ' ' && (at == 0 || at == v.len - 1)) || (c == '#' && at == 0);
		if (esc)
			sg_strbuf_putc(out, '\\');
		put_rune(out, c);
	}
}

/* asn1.Marshal's PrintableString set, without * and &. */
static bool printable(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c >= '\'' && c <= ')') ||
	       (c >= '+' && c <= '/') || c == ' ' || c == ':' || c == '=' || c == '?';
}

/* "=#<hex>" of asn1.Marshal(value); false when Go's Marshal fails (the
 * value is not UTF-8 and not printable), nothing written then. */
static bool put_marshalled(sg_strbuf *out, sg_slice v)
{
	bool all_printable = true, utf8 = true;
	for (size_t i = 0; i < v.len; i++)
		all_printable = all_printable && printable(v.p[i]);
	uint32_t cp;
	for (size_t i = 0; !all_printable && utf8 && i < v.len;)
		utf8 = sg_der_utf8_next(v, &i, &cp);
	if (!all_printable && !utf8)
		return false;
	uint8_t head[6];
	size_t h = 0;
	head[h++] = all_printable ? 0x13 : 0x0c; /* PrintableString : UTF8String */
	if (v.len < 0x80) {
		head[h++] = (uint8_t)v.len;
	} else {
		unsigned nb = v.len > 0xffffff ? 4 : v.len > 0xffff ? 3 : v.len > 0xff ? 2 : 1;
		head[h++] = (uint8_t)(0x80 | nb);
		for (unsigned i = nb; i > 0; i--)
			head[h++] = (uint8_t)(v.len >> (8 * (i - 1)));
	}
	sg_strbuf_puts(out, "=#");
	char hx[2 * sizeof(head) + 1];
	sg_hex_encode(hx, head, h);
	sg_strbuf_add(out, hx, 2 * h);
	for (size_t i = 0; i < v.len; i++) {
		sg_hex_encode(hx, v.p + i, 1);
		sg_strbuf_add(out, hx, 2);
	}
	return true;
}

/* One attribute that is not a named field: "<OID>=#<hex>" or, when Go's
 * Marshal fails, "<OID>=<escaped>". */
static int put_other(sg_strbuf *out, const X509_NAME_ENTRY *e, sg_slice v)
{
	char oid[256];
	int n = OBJ_obj2txt(oid, sizeof(oid), X509_NAME_ENTRY_get_object(e), 1);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(oid), SG_EINVAL,
	          "a certificate's subject has an unprintable attribute type");
	sg_strbuf_puts(out, oid);
	if (!put_marshalled(out, v)) {
		sg_strbuf_putc(out, '=');
		put_escaped(out, v);
	}
	return SG_OK;
}

static void strbuf_freep(sg_strbuf *b)
{
	sg_strbuf_free(b);
}

/* The subject of x as pkix.Name.String() prints it, appended to out. */
static int go_name_string(X509 *x, sg_strbuf *out)
{
	const X509_NAME *name = X509_get_subject_name(x);
	int count = X509_NAME_entry_count(name);
	sg_strbuf val SG_CLEANUP(strbuf_freep) = {.max = SG_CERTSET_ALIAS_MAX};
	bool first = true;
	/* Named fields, last RDN first: SERIALNUMBER, CN, then OU .. C. */
	for (int f = (int)NFIELDS - 1; f >= 0; f--) {
		int last = -1, any = 0;
		for (int i = 0; i < count; i++)
			if (field_of(X509_NAME_get_entry(name, i)) == f) {
				last = i;
				any++;
			}
		if (f == F_CN || f == F_SERIAL) {
			/* One value, the last one, and only when not empty. */
			if (last < 0)
				continue;
			SG_TRY(go_value(X509_NAME_get_entry(name, last), &val));
			if (val.len == 0)
				continue;
			sg_strbuf_puts(out, first ? "" : ",");
			sg_strbuf_puts(out, fields[f].name);
			sg_strbuf_putc(out, '=');
			put_escaped(out, (sg_slice){(const uint8_t *)val.p, val.len});
			first = false;
			continue;
		}
		if (!any)
			continue;
		sg_strbuf_puts(out, first ? "" : ",");
		first = false;
		bool first_value = true;
		for (int i = 0; i < count; i++) {
			const X509_NAME_ENTRY *e = X509_NAME_get_entry(name, i);
			if (field_of(e) != f)
				continue;
			SG_TRY(go_value(e, &val));
			sg_strbuf_puts(out, first_value ? "" : "+");
			sg_strbuf_puts(out, fields[f].name);
			sg_strbuf_putc(out, '=');
			put_escaped(out, (sg_slice){(const uint8_t *)(val.p ? val.p : ""), val.len});
			first_value = false;
		}
	}
	/* The other attributes, each an RDN of its own, last first. */
	for (int i = count - 1; i >= 0; i--) {
		const X509_NAME_ENTRY *e = X509_NAME_get_entry(name, i);
		if (field_of(e) >= 0)
			continue;
		SG_TRY(go_value(e, &val));
		sg_strbuf_puts(out, first ? "" : ",");
		first = false;
		SG_TRY(put_other(out, e, (sg_slice){(const uint8_t *)(val.p ? val.p : ""), val.len}));
	}
	SG_ENSURE(!val.oom, SG_EINTERNAL, "out of memory");
	SG_ENSURE(!val.overflow, SG_EINVAL, "a certificate's subject is longer than %u bytes", SG_CERTSET_ALIAS_MAX);
	return SG_OK;
}

int sg_certset_alias(X509 *x, const uint8_t hash[32], char **out)
{
	*out = NULL;
	sg_strbuf b SG_CLEANUP(strbuf_freep) = {.max = SG_CERTSET_ALIAS_MAX};
	char hx[9];
	sg_hex_encode(hx, hash, 4);
	sg_strbuf_add(&b, hx, 8);
	sg_strbuf_putc(&b, '|');
	SG_TRY(go_name_string(x, &b));
	SG_ENSURE(!b.oom, SG_EINTERNAL, "out of memory");
	SG_ENSURE(!b.overflow, SG_EINVAL, "a certificate's alias (its subject) is longer than %u bytes",
	          SG_CERTSET_ALIAS_MAX);
	*out = sg_strbuf_take(&b);
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* ---- strings.ToLower ---- */

/* unicode.ToLower beyond ASCII as ranges: lo..hi every stride code points
 * map to themselves + delta. Made from Go 1.19's tables (Unicode 13.0.0)
 * by walking every code point. */
static const struct lower_range {
	uint32_t lo, hi, stride;
	int32_t delta;
} lower_ranges[] = {
    // clang-format off
	{0x00c0, 0x00d6, 1, 32},
	{0x00d8, 0x00de, 1, 32},
	{0x0100, 0x012e, 2, 1},
	{0x0130, 0x0130, 1, -199},
	{0x0132, 0x0136, 2, 1},
	{0x0139, 0x0147, 2, 1},
	{0x014a, 0x0176, 2, 1},
	{0x0178, 0x0178, 1, -121},
	{0x0179, 0x017d, 2, 1},
	{0x0181, 0x0181, 1, 210},
	{0x0182, 0x0184, 2, 1},
	{0x0186, 0x0186, 1, 206},
	{0x0187, 0x0187, 1, 1},
	{0x0189, 0x018a, 1, 205},
	{0x018b, 0x018b, 1, 1},
	{0x018e, 0x018e, 1, 79},
	{0x018f, 0x018f, 1, 202},
	{0x0190, 0x0190, 1, 203},
	{0x0191, 0x0191, 1, 1},
	{0x0193, 0x0193, 1, 205},
	{0x0194, 0x0194, 1, 207},
	{0x0196, 0x0196, 1, 211},
	{0x0197, 0x0197, 1, 209},
	{0x0198, 0x0198, 1, 1},
	{0x019c, 0x019c, 1, 211},
	{0x019d, 0x019d, 1, 213},
	{0x019f, 0x019f, 1, 214},
	{0x01a0, 0x01a4, 2, 1},
	{0x01a6, 0x01a6, 1, 218},
	{0x01a7, 0x01a7, 1, 1},
	{0x01a9, 0x01a9, 1, 218},
	{0x01ac, 0x01ac, 1, 1},
	{0x01ae, 0x01ae, 1, 218},
	{0x01af, 0x01af, 1, 1},
	{0x01b1, 0x01b2, 1, 217},
	{0x01b3, 0x01b5, 2, 1},
	{0x01b7, 0x01b7, 1, 219},
	{0x01b8, 0x01b8, 1, 1},
	{0x01bc, 0x01bc, 1, 1},
	{0x01c4, 0x01c4, 1, 2},
	{0x01c5, 0x01c5, 1, 1},
	{0x01c7, 0x01c7, 1, 2},
	{0x01c8, 0x01c8, 1, 1},
	{0x01ca, 0x01ca, 1, 2},
	{0x01cb, 0x01db, 2, 1},
	{0x01de, 0x01ee, 2, 1},
	{0x01f1, 0x01f1, 1, 2},
	{0x01f2, 0x01f4, 2, 1},
	{0x01f6, 0x01f6, 1, -97},
	{0x01f7, 0x01f7, 1, -56},
	{0x01f8, 0x021e, 2, 1},
	{0x0220, 0x0220, 1, -130},
	{0x0222, 0x0232, 2, 1},
	{0x023a, 0x023a, 1, 10795},
	{0x023b, 0x023b, 1, 1},
	{0x023d, 0x023d, 1, -163},
	{0x023e, 0x023e, 1, 10792},
	{0x0241, 0x0241, 1, 1},
	{0x0243, 0x0243, 1, -195},
	{0x0244, 0x0244, 1, 69},
	{0x0245, 0x0245, 1, 71},
	{0x0246, 0x024e, 2, 1},
	{0x0370, 0x0372, 2, 1},
	{0x0376, 0x0376, 1, 1},
	{0x037f, 0x037f, 1, 116},
	{0x0386, 0x0386, 1, 38},
	{0x0388, 0x038a, 1, 37},
	{0x038c, 0x038c, 1, 64},
	{0x038e, 0x038f, 1, 63},
	{0x0391, 0x03a1, 1, 32},
	{0x03a3, 0x03ab, 1, 32},
	{0x03cf, 0x03cf, 1, 8},
	{0x03d8, 0x03ee, 2, 1},
	{0x03f4, 0x03f4, 1, -60},
	{0x03f7, 0x03f7, 1, 1},
	{0x03f9, 0x03f9, 1, -7},
	{0x03fa, 0x03fa, 1, 1},
	{0x03fd, 0x03ff, 1, -130},
	{0x0400, 0x040f, 1, 80},
	{0x0410, 0x042f, 1, 32},
	{0x0460, 0x0480, 2, 1},
	{0x048a, 0x04be, 2, 1},
	{0x04c0, 0x04c0, 1, 15},
	{0x04c1, 0x04cd, 2, 1},
	{0x04d0, 0x052e, 2, 1},
	{0x0531, 0x0556, 1, 48},
	{0x10a0, 0x10c5, 1, 7264},
	{0x10c7, 0x10c7, 1, 7264},
	{0x10cd, 0x10cd, 1, 7264},
	{0x13a0, 0x13ef, 1, 38864},
	{0x13f0, 0x13f5, 1, 8},
	{0x1c90, 0x1cba, 1, -3008},
	{0x1cbd, 0x1cbf, 1, -3008},
	{0x1e00, 0x1e94, 2, 1},
	{0x1e9e, 0x1e9e, 1, -7615},
	{0x1ea0, 0x1efe, 2, 1},
	{0x1f08, 0x1f0f, 1, -8},
	{0x1f18, 0x1f1d, 1, -8},
	{0x1f28, 0x1f2f, 1, -8},
	{0x1f38, 0x1f3f, 1, -8},
	{0x1f48, 0x1f4d, 1, -8},
	{0x1f59, 0x1f5f, 2, -8},
	{0x1f68, 0x1f6f, 1, -8},
	{0x1f88, 0x1f8f, 1, -8},
	{0x1f98, 0x1f9f, 1, -8},
	{0x1fa8, 0x1faf, 1, -8},
	{0x1fb8, 0x1fb9, 1, -8},
	{0x1fba, 0x1fbb, 1, -74},
	{0x1fbc, 0x1fbc, 1, -9},
	{0x1fc8, 0x1fcb, 1, -86},
	{0x1fcc, 0x1fcc, 1, -9},
	{0x1fd8, 0x1fd9, 1, -8},
	{0x1fda, 0x1fdb, 1, -100},
	{0x1fe8, 0x1fe9, 1, -8},
	{0x1fea, 0x1feb, 1, -112},
	{0x1fec, 0x1fec, 1, -7},
	{0x1ff8, 0x1ff9, 1, -128},
	{0x1ffa, 0x1ffb, 1, -126},
	{0x1ffc, 0x1ffc, 1, -9},
	{0x2126, 0x2126, 1, -7517},
	{0x212a, 0x212a, 1, -8383},
	{0x212b, 0x212b, 1, -8262},
	{0x2132, 0x2132, 1, 28},
	{0x2160, 0x216f, 1, 16},
	{0x2183, 0x2183, 1, 1},
	{0x24b6, 0x24cf, 1, 26},
	{0x2c00, 0x2c2e, 1, 48},
	{0x2c60, 0x2c60, 1, 1},
	{0x2c62, 0x2c62, 1, -10743},
	{0x2c63, 0x2c63, 1, -3814},
	{0x2c64, 0x2c64, 1, -10727},
	{0x2c67, 0x2c6b, 2, 1},
	{0x2c6d, 0x2c6d, 1, -10780},
	{0x2c6e, 0x2c6e, 1, -10749},
	{0x2c6f, 0x2c6f, 1, -10783},
	{0x2c70, 0x2c70, 1, -10782},
	{0x2c72, 0x2c72, 1, 1},
	{0x2c75, 0x2c75, 1, 1},
	{0x2c7e, 0x2c7f, 1, -10815},
	{0x2c80, 0x2ce2, 2, 1},
	{0x2ceb, 0x2ced, 2, 1},
	{0x2cf2, 0x2cf2, 1, 1},
	{0xa640, 0xa66c, 2, 1},
	{0xa680, 0xa69a, 2, 1},
	{0xa722, 0xa72e, 2, 1},
	{0xa732, 0xa76e, 2, 1},
	{0xa779, 0xa77b, 2, 1},
	{0xa77d, 0xa77d, 1, -35332},
	{0xa77e, 0xa786, 2, 1},
	{0xa78b, 0xa78b, 1, 1},
	{0xa78d, 0xa78d, 1, -42280},
	{0xa790, 0xa792, 2, 1},
	{0xa796, 0xa7a8, 2, 1},
	{0xa7aa, 0xa7aa, 1, -42308},
	{0xa7ab, 0xa7ab, 1, -42319},
	{0xa7ac, 0xa7ac, 1, -42315},
	{0xa7ad, 0xa7ad, 1, -42305},
	{0xa7ae, 0xa7ae, 1, -42308},
	{0xa7b0, 0xa7b0, 1, -42258},
	{0xa7b1, 0xa7b1, 1, -42282},
	{0xa7b2, 0xa7b2, 1, -42261},
	{0xa7b3, 0xa7b3, 1, 928},
	{0xa7b4, 0xa7be, 2, 1},
	{0xa7c2, 0xa7c2, 1, 1},
	{0xa7c4, 0xa7c4, 1, -48},
	{0xa7c5, 0xa7c5, 1, -42307},
	{0xa7c6, 0xa7c6, 1, -35384},
	{0xa7c7, 0xa7c9, 2, 1},
	{0xa7f5, 0xa7f5, 1, 1},
	{0xff21, 0xff3a, 1, 32},
	{0x10400, 0x10427, 1, 40},
	{0x104b0, 0x104d3, 1, 40},
	{0x10c80, 0x10cb2, 1, 64},
	{0x118a0, 0x118bf, 1, 32},
	{0x16e40, 0x16e5f, 1, 32},
	{0x1e900, 0x1e921, 1, 34},
    // clang-format on
};

static uint32_t to_lower(uint32_t r)
{
	if (r < 0x80)
		return r >= 'A' && r <= 'Z' ? r + 32 : r;
	size_t lo = 0, hi = sizeof(lower_ranges) / sizeof(lower_ranges[0]);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct lower_range *m = &lower_ranges[mid];
		if (r < m->lo)
			hi = mid;
		else if (r > m->hi)
			lo = mid + 1;
		else
			return (r - m->lo) % m->stride == 0 ? (uint32_t)((int32_t)r + m->delta) : r;
	}
	return r;
}

int sg_certset_alias_lower(const char *alias, char **out)
{
	*out = NULL;
	sg_slice s = {(const uint8_t *)alias, strlen(alias)};
	sg_strbuf b SG_CLEANUP(strbuf_freep) = {.first = s.len + 1};
	sg_strbuf_add(&b, NULL, 0);
	for (size_t i = 0; i < s.len;)
		put_rune(&b, to_lower(next_rune(s, &i)));
	*out = sg_strbuf_take(&b);
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* ---- BMPString ---- */

int sg_certset_alias_bmp(const char *alias, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	sg_slice s = {(const uint8_t *)alias, strlen(alias)};
	uint8_t *p SG_AUTOFREE = malloc(2 * s.len + 2);
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	size_t n = 0;
	for (size_t i = 0; i < s.len;) {
		uint32_t r = next_rune(s, &i);
		SG_ENSURE(r < 0x10000, SG_EINVAL,
		          "pkcs12: string contains characters that cannot be encoded in UCS-2 (a certificate's alias: "
		          "its subject)");
		p[n++] = (uint8_t)(r >> 8);
		p[n++] = (uint8_t)r;
	}
	*out = SG_MOVE(p);
	*len = n;
	return SG_OK;
}
