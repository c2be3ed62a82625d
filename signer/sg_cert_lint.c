/*
 * The lint of the certificate that will be signed (sg_cert_lint_tbs).
 *
 * The encoder's input can be right and its output wrong (a bug in the
 * encoder, a spec field the encoder drops), so the last check before C_Sign
 * reads the encoded TBSCertificate back with the DER reader, exactly as a
 * relying party would, and checks what it says against the rules every
 * certificate of ours obeys. Every TLV is read with its exact length and
 * every reader must end exhausted: trailing or missing bytes fail too.
 *
 * The rules (RFC 5280 unless noted), in the order they are checked:
 *   version v3; serial positive, minimal, 8 to 20 octets; the signature
 *   algorithm and issuer Name exactly the issuer's; validity in UTCTime
 *   through 2049 and GeneralizedTime from 2050 (§4.1.2.5), NotBefore <
 *   NotAfter, inside the issuer's; subject a Name of single-attribute RDNs
 *   with well-formed strings; an EC or RSA key; extensions only those we
 *   write, each at most once, DER booleans (a FALSE critical flag is
 *   omitted), with the criticality the profile defines: keyUsage and
 *   basicConstraints critical, subjectAltName critical exactly when the
 *   subject is empty (§4.2.1.6), the others not; keyUsage present and
 *   consistent with the key type (no keyEncipherment or dataEncipherment on
 *   an EC key, no keyAgreement on RSA, no encipherOnly or decipherOnly),
 *   with the exceptions of the profiles that write otherwise (ku_rules:
 *   istiod's workload profile sets keyEncipherment on EC keys as istiod
 *   does; a leaf with the usages a request named is issued as asked);
 *   extKeyUsage purposes only those we know (sg_cert_oids.h), none twice;
 *   keyCertSign exactly on CAs; cA exactly in the CA profile, a path length
 *   only with it; the authority key identifier the issuer's; a SAN on every
 *   leaf, each name well-formed for its type (DNS: LDH labels, a wildcard
 *   only as the whole leftmost label; IP: 4 or 16 octets; URI: a scheme and
 *   printable ASCII; email: local@domain).
 */
#include "sg_cert.h"
#include "sg_cert_oids.h"
#include "sg_guard.h"

#include <string.h>

static const uint8_t OID_EC_KEY[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01};
static const uint8_t OID_RSA_KEY[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01};

#define LINT(cond, ...) SG_ENSURE(cond, SG_ELINT, "lint: " __VA_ARGS__)
#define READ(expr, ...) LINT((expr) == SG_OK, __VA_ARGS__)

enum { KEY_EC = 1, KEY_RSA = 2 };

enum ext_id { EXT_KU, EXT_EKU, EXT_BC, EXT_SKI, EXT_AKI, EXT_SAN, EXT_COUNT };

static const struct {
	const uint8_t *oid;
	size_t len;
	const char *name;
} known_ext[EXT_COUNT] = {
	[EXT_KU] = {OID_KU, sizeof(OID_KU), "keyUsage"},
	[EXT_EKU] = {OID_EKU, sizeof(OID_EKU), "extKeyUsage"},
	[EXT_BC] = {OID_BC, sizeof(OID_BC), "basicConstraints"},
	[EXT_SKI] = {OID_SKI, sizeof(OID_SKI), "subjectKeyIdentifier"},
	[EXT_AKI] = {OID_AKI, sizeof(OID_AKI), "authorityKeyIdentifier"},
	[EXT_SAN] = {OID_SAN, sizeof(OID_SAN), "subjectAltName"},
};

typedef struct seen {
	int key;
	bool subject_empty;
	bool present[EXT_COUNT];
	bool critical[EXT_COUNT];
	sg_slice value[EXT_COUNT];
} seen;

/* ---- names ------------------------------------------------------------ */

static int lint_string(uint8_t tag, sg_slice v)
{
	LINT(v.len > 0, "an empty subject attribute");
	for (size_t i = 0; i < v.len;) {
		uint8_t c = v.p[i];
		uint32_t cp;
		switch (tag) {
		case SG_DER_PRINTABLESTRING:
			LINT(sg_der_printable_char(c), "a PrintableString with a character outside its set");
			i++;
			break;
		case SG_DER_IA5STRING:
			LINT(c && c < 0x80, "an IA5String with a NUL or a non-ASCII byte");
			i++;
			break;
		case SG_DER_UTF8STRING:
			LINT(sg_der_utf8_next(v, &i, &cp) && cp != 0, "a UTF8String that is not NUL-free UTF-8");
			break;
		default:
			LINT(false, "a subject attribute of string type 0x%02x", tag);
		}
	}
	return SG_OK;
}

static int lint_name(sg_slice name, bool *empty)
{
	sg_reader r = sg_reader_of(name);
	*empty = sg_reader_done(&r);
	while (!sg_reader_done(&r)) {
		sg_slice set, atv, oid, value;
		uint8_t tag;
		READ(sg_der_read(&r, SG_DER_SET, &set, NULL), "a subject RDN is not a SET");
		sg_reader sr = sg_reader_of(set);
		READ(sg_der_read(&sr, SG_DER_SEQUENCE, &atv, NULL), "a subject RDN holds no attribute");
		LINT(sg_reader_done(&sr), "a subject RDN with more than one attribute");
		sg_reader ar = sg_reader_of(atv);
		READ(sg_der_read(&ar, SG_DER_OID, &oid, NULL), "a subject attribute without a type");
		LINT(oid.len > 0, "a subject attribute with an empty type");
		READ(sg_der_read_any(&ar, &tag, &value, NULL), "a subject attribute without a value");
		LINT(sg_reader_done(&ar), "trailing bytes in a subject attribute");
		SG_TRY(lint_string(tag, value));
	}
	return SG_OK;
}

/* ---- SAN syntax ---------------------------------------------------------- */

static bool ldh(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/* A host name: 1..253 octets of dot-separated LDH labels (1..63, no hyphen
 * at either end); "*" as the whole first label only when wildcard. */
static bool dns_ok(sg_slice v, bool wildcard)
{
	if (v.len == 0 || v.len > 253)
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= v.len; i++) {
		if (i < v.len && v.p[i] != '.')
			continue;
		size_t n = i - start;
		const uint8_t *l = v.p + start;
		if (n == 0 || n > 63)
			return false;
		if (!(wildcard && start == 0 && n == 1 && l[0] == '*' && i < v.len)) {
			if (l[0] == '-' || l[n - 1] == '-')
				return false;
			for (size_t k = 0; k < n; k++)
				if (!ldh(l[k]))
					return false;
		}
		start = i + 1;
	}
	return true;
}

static bool uri_ok(sg_slice v)
{
	size_t i = 0;
	if (v.len < 3 || !((v.p[0] >= 'a' && v.p[0] <= 'z') || (v.p[0] >= 'A' && v.p[0] <= 'Z')))
		return false;
	while (i < v.len && v.p[i] != ':') {
		uint8_t c = v.p[i];
		if (!(ldh(c) || c == '+' || c == '.'))
			return false;
		i++;
	}
	if (i + 1 >= v.len) /* no ':' or nothing after it */
		return false;
	for (size_t k = 0; k < v.len; k++)
		if (v.p[k] <= 0x20 || v.p[k] >= 0x7f)
			return false;
	return true;
}

static bool email_ok(sg_slice v)
{
	const uint8_t *at = memchr(v.p, '@', v.len);
	if (!at || at == v.p || memchr(at + 1, '@', v.len - (size_t)(at + 1 - v.p)))
		return false;
	for (const uint8_t *c = v.p; c < at; c++)
		if (*c <= 0x20 || *c >= 0x7f)
			return false;
	sg_slice domain = {at + 1, v.len - (size_t)(at + 1 - v.p)};
	return dns_ok(domain, false);
}

static int lint_san(sg_slice ext)
{
	sg_reader r = sg_reader_of(ext);
	sg_slice names;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &names, NULL), "subjectAltName is not a SEQUENCE");
	LINT(sg_reader_done(&r), "trailing bytes after subjectAltName");
	sg_reader nr = sg_reader_of(names);
	LINT(!sg_reader_done(&nr), "an empty subjectAltName");
	while (!sg_reader_done(&nr)) {
		uint8_t tag;
		sg_slice v;
		READ(sg_der_read_any(&nr, &tag, &v, NULL), "a malformed subjectAltName entry");
		switch (tag) {
		case 0x80 | SG_SAN_EMAIL:
			LINT(email_ok(v), "an rfc822Name that is not local@domain");
			break;
		case 0x80 | SG_SAN_DNS:
			LINT(dns_ok(v, true), "a dNSName that is not a host name");
			break;
		case 0x80 | SG_SAN_URI:
			LINT(uri_ok(v), "a URI without a scheme or with characters outside printable ASCII");
			break;
		case 0x80 | SG_SAN_IP:
			LINT(v.len == 4 || v.len == 16, "an iPAddress of %zu octets", v.len);
			break;
		default:
			LINT(false, "a subjectAltName entry of tag 0x%02x", tag);
		}
	}
	return SG_OK;
}

/* ---- extensions ---------------------------------------------------------- */

/* A named bit list in DER: unused bits 0..7, trailing zero bits dropped. */
static int read_bit_list(sg_slice ext, uint32_t *bits)
{
	sg_reader r = sg_reader_of(ext);
	sg_slice bs;
	READ(sg_der_read(&r, SG_DER_BIT_STRING, &bs, NULL), "keyUsage is not a BIT STRING");
	LINT(sg_reader_done(&r), "trailing bytes after keyUsage");
	LINT(bs.len == 2 || bs.len == 3, "keyUsage of %zu octets", bs.len);
	uint8_t unused = bs.p[0], last = bs.p[bs.len - 1];
	LINT(unused < 8 && last != 0 && !(last & ((1u << unused) - 1)) && (last & (1u << unused)),
	     "keyUsage is not minimal DER");
	*bits = 0;
	for (int bit = 0; bit < 8; bit++)
		if (bs.p[1] & (0x80 >> bit))
			*bits |= 1u << bit;
	LINT(bs.len == 2 || bs.p[2] == 0x80, "keyUsage has bits beyond decipherOnly");
	if (bs.len == 3)
		*bits |= 1u << 8; /* decipherOnly */
	return SG_OK;
}

/* What each profile may not put in keyUsage, by key type, and whether it
 * may leave keyUsage out. */
#define KU_ONLY_BITS (SG_KU_ENCIPHER_ONLY | SG_KU_DECIPHER_ONLY)
static const struct {
	uint32_t not_ec, not_rsa; /* bits refused on that key type */
	bool optional;            /* keyUsage may be absent */
} ku_rules[] = {
    [SG_LINT_LEAF] = {SG_KU_KEY_ENCIPHERMENT | SG_KU_DATA_ENCIPHERMENT | KU_ONLY_BITS,
                      SG_KU_KEY_AGREEMENT | KU_ONLY_BITS, false},
    [SG_LINT_ISTIO] = {SG_KU_DATA_ENCIPHERMENT | KU_ONLY_BITS, SG_KU_KEY_AGREEMENT | KU_ONLY_BITS, false},
    [SG_LINT_CA] = {SG_KU_KEY_ENCIPHERMENT | SG_KU_DATA_ENCIPHERMENT | KU_ONLY_BITS, SG_KU_KEY_AGREEMENT | KU_ONLY_BITS,
                    false},
    [SG_LINT_ASKED] = {0, 0, true},
};

static const struct {
	uint32_t bit;
	const char *name;
} ku_names[] = {
    {SG_KU_KEY_ENCIPHERMENT, "keyEncipherment"}, {SG_KU_DATA_ENCIPHERMENT, "dataEncipherment"},
    {SG_KU_KEY_AGREEMENT, "keyAgreement"},       {SG_KU_ENCIPHER_ONLY, "encipherOnly"},
    {SG_KU_DECIPHER_ONLY, "decipherOnly"},
};

static int lint_key_usage(const seen *s, sg_lint_profile profile)
{
	LINT((size_t)profile < sizeof(ku_rules) / sizeof(ku_rules[0]), "unknown lint profile %d", (int)profile);
	bool ca = profile == SG_LINT_CA;
	if (!s->present[EXT_KU]) {
		LINT(ku_rules[profile].optional, "no keyUsage");
		return SG_OK;
	}
	uint32_t ku = 0;
	SG_TRY(read_bit_list(s->value[EXT_KU], &ku));
	LINT(ca || !(ku & (SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN)), "keyCertSign or cRLSign on a leaf");
	LINT(!ca || (ku & SG_KU_KEY_CERT_SIGN), "a CA without keyCertSign");
	uint32_t refused = ku & (s->key == KEY_EC ? ku_rules[profile].not_ec : ku_rules[profile].not_rsa);
	for (size_t i = 0; i < sizeof(ku_names) / sizeof(ku_names[0]); i++)
		LINT(!(refused & ku_names[i].bit), "%s on an %s key in this profile", ku_names[i].name,
		     s->key == KEY_EC ? "EC" : "RSA");
	return SG_OK;
}

static int lint_eku(sg_slice ext, sg_lint_profile profile)
{
	LINT(profile != SG_LINT_CA, "extKeyUsage on a CA certificate");
	sg_reader r = sg_reader_of(ext);
	sg_slice seq;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL), "extKeyUsage is not a SEQUENCE");
	LINT(sg_reader_done(&r), "trailing bytes after extKeyUsage");
	sg_reader pr = sg_reader_of(seq);
	LINT(!sg_reader_done(&pr), "an empty extKeyUsage");
	sg_slice oids[SG_EKU_OIDS_COUNT];
	size_t n = 0;
	while (!sg_reader_done(&pr)) {
		LINT(n < SG_EKU_OIDS_COUNT, "more than %zu extKeyUsage purposes", SG_EKU_OIDS_COUNT);
		READ(sg_der_read(&pr, SG_DER_OID, &oids[n], NULL), "an extKeyUsage purpose is not an OID");
		LINT(sg_eku_bit_of(oids[n].p, oids[n].len) != SG_EKU_OTHER, "an extKeyUsage purpose we do not write");
		for (size_t i = 0; i < n; i++)
			LINT(!sg_slice_eq(oids[i], oids[n].p, oids[n].len), "an extKeyUsage purpose listed twice");
		n++;
	}
	return SG_OK;
}

static int lint_basic_constraints(sg_slice ext, sg_lint_profile profile)
{
	sg_reader r = sg_reader_of(ext);
	sg_slice seq;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL), "basicConstraints is not a SEQUENCE");
	LINT(sg_reader_done(&r), "trailing bytes after basicConstraints");
	sg_reader br = sg_reader_of(seq);
	bool ca = false;
	uint8_t tag;
	if (!sg_reader_done(&br) && sg_der_peek(&br, &tag) == SG_OK && tag == SG_DER_BOOLEAN) {
		READ(sg_der_read_bool(&br, &ca), "basicConstraints cA is not a DER BOOLEAN");
		LINT(ca, "basicConstraints says cA FALSE explicitly (DER omits the default)");
	}
	if (!sg_reader_done(&br)) {
		uint64_t path;
		LINT(ca, "a path length on a certificate that is not a CA");
		READ(sg_der_read_uint(&br, &path), "basicConstraints pathLen is not a small non-negative INTEGER");
		LINT(path <= 16, "basicConstraints pathLen %llu", (unsigned long long)path);
	}
	LINT(sg_reader_done(&br), "trailing bytes in basicConstraints");
	LINT(ca == (profile == SG_LINT_CA), "%s", ca ? "cA TRUE outside the CA profile" : "a CA certificate without cA TRUE");
	return SG_OK;
}

static int lint_key_ids(const seen *s, const sg_cert_issuer *iss)
{
	LINT(s->present[EXT_SKI], "no subjectKeyIdentifier");
	sg_reader r = sg_reader_of(s->value[EXT_SKI]);
	sg_slice id;
	READ(sg_der_read(&r, SG_DER_OCTET_STRING, &id, NULL), "subjectKeyIdentifier is not an OCTET STRING");
	LINT(sg_reader_done(&r) && id.len == 20, "subjectKeyIdentifier is not 20 octets");
	LINT(s->present[EXT_AKI] == (iss->key_id.len > 0), "authorityKeyIdentifier %s",
	     iss->key_id.len ? "missing" : "without an issuer key identifier");
	if (!s->present[EXT_AKI])
		return SG_OK;
	r = sg_reader_of(s->value[EXT_AKI]);
	sg_slice seq, kid;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &seq, NULL), "authorityKeyIdentifier is not a SEQUENCE");
	LINT(sg_reader_done(&r), "trailing bytes after authorityKeyIdentifier");
	sg_reader ar = sg_reader_of(seq);
	READ(sg_der_read(&ar, 0x80, &kid, NULL), "authorityKeyIdentifier without a keyIdentifier");
	LINT(sg_reader_done(&ar), "authorityKeyIdentifier with more than a keyIdentifier");
	LINT(sg_slice_eq(kid, iss->key_id.p, iss->key_id.len), "authorityKeyIdentifier is not the issuer's");
	return SG_OK;
}

static int read_extensions(sg_reader *r, seen *s)
{
	sg_slice ctx3, exts;
	READ(sg_der_read(r, SG_DER_CTX3, &ctx3, NULL), "no extensions");
	sg_reader cr = sg_reader_of(ctx3);
	READ(sg_der_read(&cr, SG_DER_SEQUENCE, &exts, NULL), "extensions are not a SEQUENCE");
	LINT(sg_reader_done(&cr), "trailing bytes after the extensions");
	sg_reader er = sg_reader_of(exts);
	LINT(!sg_reader_done(&er), "an empty extensions SEQUENCE");
	while (!sg_reader_done(&er)) {
		sg_slice ext, oid, value;
		READ(sg_der_read(&er, SG_DER_SEQUENCE, &ext, NULL), "an extension is not a SEQUENCE");
		sg_reader xr = sg_reader_of(ext);
		READ(sg_der_read(&xr, SG_DER_OID, &oid, NULL), "an extension without an OID");
		bool critical = false;
		uint8_t tag;
		if (sg_der_peek(&xr, &tag) == SG_OK && tag == SG_DER_BOOLEAN) {
			READ(sg_der_read_bool(&xr, &critical), "an extension's critical flag is not a DER BOOLEAN");
			LINT(critical, "an extension says critical FALSE explicitly (DER omits the default)");
		}
		READ(sg_der_read(&xr, SG_DER_OCTET_STRING, &value, NULL), "an extension without a value");
		LINT(sg_reader_done(&xr), "trailing bytes in an extension");
		int id = -1;
		for (int i = 0; i < EXT_COUNT; i++)
			if (sg_slice_eq(oid, known_ext[i].oid, known_ext[i].len))
				id = i;
		LINT(id >= 0, "an extension we never write");
		LINT(!s->present[id], "%s twice", known_ext[id].name);
		s->present[id] = true;
		s->critical[id] = critical;
		s->value[id] = value;
	}
	return SG_OK;
}

static int lint_criticality(const seen *s)
{
	for (int i = 0; i < EXT_COUNT; i++) {
		if (!s->present[i])
			continue;
		bool want = i == EXT_KU || i == EXT_BC || (i == EXT_SAN && s->subject_empty);
		LINT(s->critical[i] == want, "%s is %scritical", known_ext[i].name, s->critical[i] ? "" : "not ");
	}
	return SG_OK;
}

/* ---- the TBSCertificate -------------------------------------------------- */

static int lint_validity(sg_slice v, const sg_cert_issuer *iss)
{
	sg_reader r = sg_reader_of(v);
	int64_t t[2];
	for (int i = 0; i < 2; i++) {
		uint8_t tag;
		sg_slice c;
		READ(sg_der_read_any(&r, &tag, &c, NULL), "a malformed validity time");
		LINT(tag == SG_DER_UTCTIME || tag == SG_DER_GENERALIZEDTIME, "a validity time of tag 0x%02x", tag);
		READ(sg_der_parse_time(tag, c, &t[i]), "a validity time not in RFC 5280's form");
		/* 2050-01-01T00:00:00Z: UTCTime before, GeneralizedTime from then. */
		LINT((tag == SG_DER_UTCTIME) == (t[i] < 2524608000LL), "a validity time in the wrong type for its year");
	}
	LINT(sg_reader_done(&r), "trailing bytes in the validity");
	LINT(t[0] < t[1], "NotBefore is not before NotAfter");
	LINT(t[0] >= iss->not_before && t[1] <= iss->not_after, "validity is outside the issuer's");
	return SG_OK;
}

static int lint_spki(sg_slice spki, int *key)
{
	sg_reader r = sg_reader_of(spki);
	sg_slice alg, oid, bits;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &alg, NULL), "the key has no algorithm");
	READ(sg_der_read_bits(&r, &bits), "the key is not a BIT STRING without unused bits");
	LINT(sg_reader_done(&r) && bits.len > 0, "a malformed subjectPublicKeyInfo");
	sg_reader ar = sg_reader_of(alg);
	READ(sg_der_read(&ar, SG_DER_OID, &oid, NULL), "the key algorithm is not an OID");
	if (sg_slice_eq(oid, OID_EC_KEY, sizeof(OID_EC_KEY)))
		*key = KEY_EC;
	else if (sg_slice_eq(oid, OID_RSA_KEY, sizeof(OID_RSA_KEY)))
		*key = KEY_RSA;
	else
		LINT(false, "a key that is neither EC nor RSA");
	return SG_OK;
}

int sg_cert_lint_tbs(const uint8_t *tbs, size_t len, const sg_cert_issuer *iss, sg_lint_profile profile)
{
	sg_reader top = sg_reader_of((sg_slice){tbs, len});
	sg_slice body, f, name, spki;
	READ(sg_der_read(&top, SG_DER_SEQUENCE, &body, NULL), "the TBSCertificate is not a SEQUENCE");
	LINT(sg_reader_done(&top), "bytes after the TBSCertificate");
	sg_reader r = sg_reader_of(body);

	uint64_t version;
	READ(sg_der_read(&r, SG_DER_CTX0, &f, NULL), "no version");
	sg_reader vr = sg_reader_of(f);
	READ(sg_der_read_uint(&vr, &version), "a malformed version");
	LINT(sg_reader_done(&vr) && version == 2, "not a v3 certificate");

	sg_reader sr = r;
	sg_slice serial, serial_tlv;
	READ(sg_der_read(&sr, SG_DER_INTEGER, &serial_tlv, NULL), "no serial number");
	READ(sg_der_read_unsigned_bytes(&r, &serial), "the serial is negative or not minimal");
	LINT(serial_tlv.len <= 20 && serial.len >= 8, "a serial of %zu octets (8 to 20 allowed)", serial_tlv.len);

	uint8_t alg_buf[64];
	sg_der_writer aw;
	sg_der_writer_init(&aw, alg_buf, sizeof(alg_buf));
	sg_sigalg_encode(&aw, iss->sigalg);
	SG_TRY(sg_der_writer_status(&aw));
	sg_slice alg_tlv;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &f, &alg_tlv), "no signature algorithm");
	LINT(sg_slice_eq(alg_tlv, aw.buf, aw.len), "the signature algorithm is not the issuer's");

	sg_slice issuer_tlv;
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &f, &issuer_tlv), "no issuer");
	LINT(sg_slice_eq(issuer_tlv, iss->name_der.p, iss->name_der.len), "the issuer is not the CA's Name");

	READ(sg_der_read(&r, SG_DER_SEQUENCE, &f, NULL), "no validity");
	SG_TRY(lint_validity(f, iss));

	seen s = {0};
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &name, NULL), "no subject");
	SG_TRY(lint_name(name, &s.subject_empty));
	READ(sg_der_read(&r, SG_DER_SEQUENCE, &spki, NULL), "no subjectPublicKeyInfo");
	SG_TRY(lint_spki(spki, &s.key));

	SG_TRY(read_extensions(&r, &s));
	LINT(sg_reader_done(&r), "fields after the extensions");
	SG_TRY(lint_criticality(&s));
	SG_TRY(lint_key_usage(&s, profile));
	if (s.present[EXT_EKU])
		SG_TRY(lint_eku(s.value[EXT_EKU], profile));
	LINT(s.present[EXT_BC], "no basicConstraints");
	SG_TRY(lint_basic_constraints(s.value[EXT_BC], profile));
	SG_TRY(lint_key_ids(&s, iss));
	LINT(s.present[EXT_SAN] || profile == SG_LINT_CA, "a leaf without a subjectAltName");
	LINT(s.present[EXT_SAN] || !s.subject_empty, "an empty subject and no subjectAltName");
	if (s.present[EXT_SAN])
		SG_TRY(lint_san(s.value[EXT_SAN]));
	return SG_OK;
}
