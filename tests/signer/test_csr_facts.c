/*
 * Tests of sg_csr_facts: what a policy learns from a CSR.
 *
 * Requests come from OpenSSL two ways: through the X509_REQ API (subjects,
 * every SAN type OpenSSL's GENERAL_NAME can express, keys of every kind),
 * and, where the API cannot say what a hostile client sends (an INTEGER as
 * a subject value, two subjectAltName extensions, trailing bytes inside an
 * extension, a malformed GeneralName), as DER written here with sg_der's
 * writer and signed with OpenSSL. The expected text forms are Go's (net.IP,
 * net/url, encoding/asn1), since approver-policy compares those.
 */
#include "sg_csr_facts.h"
#include "sg_test.h"
#include "signer/key_fixture.h"

#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#define BUF (80 * 1024)

/* ---- CSRs through the X509_REQ API --------------------------------------- */

typedef void (*customize_fn)(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans);

static size_t make_csr(EVP_PKEY *k, customize_fn fn, uint8_t *out)
{
	X509_REQ *req = X509_REQ_new();
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	GENERAL_NAMES *sans = sk_GENERAL_NAME_new_null();
	X509_REQ_set_version(req, 0);
	X509_REQ_set_pubkey(req, k);
	if (fn)
		fn(req, exts, sans);
	if (sk_GENERAL_NAME_num(sans) > 0) {
		X509_EXTENSION *e = X509V3_EXT_i2d(NID_subject_alt_name, 0, sans);
		if (!e)
			abort();
		sk_X509_EXTENSION_push(exts, e);
	}
	GENERAL_NAMES_free(sans);
	if (sk_X509_EXTENSION_num(exts) > 0)
		X509_REQ_add_extensions(req, exts);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	int id = EVP_PKEY_get_base_id(k);
	if (X509_REQ_sign(req, k, id == EVP_PKEY_ED25519 ? NULL : EVP_sha256()) <= 0)
		abort();
	uint8_t *p = out;
	int n = i2d_X509_REQ(req, &p);
	X509_REQ_free(req);
	if (n <= 0 || n > BUF)
		abort();
	return (size_t)n;
}

static void add_name(X509_REQ *req, const char *field, int type, const void *bytes, int len, int set)
{
	if (!X509_NAME_add_entry_by_txt(X509_REQ_get_subject_name(req), field, type, bytes, len, -1, set))
		abort();
}

static void push_gn(GENERAL_NAMES *sans, int type, void *value)
{
	GENERAL_NAME *gn = GENERAL_NAME_new();
	GENERAL_NAME_set0_value(gn, type, value);
	sk_GENERAL_NAME_push(sans, gn);
}

static void push_ia5(GENERAL_NAMES *sans, int type, const char *s)
{
	ASN1_IA5STRING *v = ASN1_IA5STRING_new();
	ASN1_STRING_set(v, s, -1);
	push_gn(sans, type, v);
}

static void push_ip(GENERAL_NAMES *sans, const uint8_t *ip, int len)
{
	ASN1_OCTET_STRING *v = ASN1_OCTET_STRING_new();
	ASN1_OCTET_STRING_set(v, ip, len);
	push_gn(sans, GEN_IPADD, v);
}

/* Parses der and checks success. */
static void parse_ok(sg_csr_facts *f, const uint8_t *der, size_t n)
{
	int rc = sg_csr_facts_parse(f, der, n);
	SG_CHECK_OK(rc);
	if (rc)
		memset(f, 0, sizeof(*f));
}

static void expect_fail(const uint8_t *der, size_t n, const char *msg)
{
	sg_csr_facts f;
	SG_CHECK_RC(sg_csr_facts_parse(&f, der, n), SG_EINVAL);
	SG_CHECK_MSG(msg);
	SG_CHECK(f.attrs == NULL && f.sans == NULL && f.arena == NULL);
	sg_csr_facts_clear(&f);
}

static bool text_is(const char *v, size_t len, const char *want)
{
	return v && len == strlen(want) && memcmp(v, want, len) == 0;
}

#define ATTR_IS(f, i, oid_, tag_, str_, val_)                                                                          \
	do {                                                                                                           \
		SG_CHECK((i) < (f).attr_count);                                                                        \
		if ((i) < (f).attr_count) {                                                                            \
			SG_CHECK(strcmp((f).attrs[i].oid, (oid_)) == 0);                                               \
			SG_CHECK((f).attrs[i].tag == (tag_));                                                          \
			SG_CHECK((f).attrs[i].is_string == (str_));                                                    \
			SG_CHECK(text_is((f).attrs[i].value, (f).attrs[i].value_len, (val_)));                         \
		}                                                                                                      \
	} while (0)

#define SAN_IS(f, i, type_, val_)                                                                                      \
	do {                                                                                                           \
		SG_CHECK((i) < (f).san_count);                                                                         \
		if ((i) < (f).san_count) {                                                                             \
			SG_CHECK((f).sans[i].type == (type_));                                                         \
			SG_CHECK(text_is((f).sans[i].value, (f).sans[i].value_len, (val_)));                           \
		}                                                                                                      \
	} while (0)

/* ---- keys -------------------------------------------------------------------- */

static void t_keys(void)
{
	static const struct {
		const char *kind;
		sg_csr_facts_key_alg alg;
		int size;
		const char *oid;
	} cases[] = {
	    {"rsa2048", SG_CSR_FACTS_KEY_RSA, 2048, "1.2.840.113549.1.1.1"},
	    {"rsa3072", SG_CSR_FACTS_KEY_RSA, 3072, "1.2.840.113549.1.1.1"},
	    {"P-256", SG_CSR_FACTS_KEY_ECDSA, 256, "1.2.840.10045.2.1"},
	    {"P-384", SG_CSR_FACTS_KEY_ECDSA, 384, "1.2.840.10045.2.1"},
	    {"P-521", SG_CSR_FACTS_KEY_ECDSA, 521, "1.2.840.10045.2.1"},
	    {"ed25519", SG_CSR_FACTS_KEY_ED25519, -1, "1.3.101.112"},
	};
	static uint8_t der[BUF];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = make_csr(key_of(cases[i].kind), NULL, der);
		sg_csr_facts f;
		parse_ok(&f, der, n);
		SG_CHECK(f.key_alg == cases[i].alg);
		SG_CHECK(f.key_size == cases[i].size);
		SG_CHECK(f.key_oid && strcmp(f.key_oid, cases[i].oid) == 0);
		SG_CHECK(f.attr_count == 0 && f.san_count == 0 && f.san_extensions == 0 && !f.san_decode_error);
		SG_CHECK(f.key_usage_ext == SG_CSR_FACTS_EXT_ABSENT);
		sg_csr_facts_clear(&f);
		SG_CHECK(f.arena == NULL && f.der_copy == NULL);
	}
	/* secp256k1 is a curve Go's crypto/x509 does not know. */
	size_t n = make_csr(key_of("secp256k1"), NULL, der);
	expect_fail(der, n, "x509: unsupported elliptic curve");
}

/* ---- subjects ----------------------------------------------------------------- */

static void subject_plain(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans)
{
	(void)exts, (void)sans;
	add_name(req, "C", MBSTRING_ASC, "GB", -1, 0);
	add_name(req, "O", MBSTRING_UTF8, "Jetstack \xc3\xa9", -1, 0);
	add_name(req, "OU", MBSTRING_ASC, "Platform", -1, 0);
	add_name(req, "OU", MBSTRING_ASC, "Security", -1, -1); /* joins the previous RDN */
	add_name(req, "CN", MBSTRING_ASC, "kubernetes-admin", -1, 0);
	add_name(req, "CN", MBSTRING_ASC, "app.tenant.example.com", -1, 0);
	add_name(req, "emailAddress", MBSTRING_ASC, "ops@example.com", -1, 0);
	add_name(req, "postalCode", MBSTRING_ASC, "EC1A 1BB", -1, 0);
	add_name(req, "serialNumber", MBSTRING_ASC, "legit-001", -1, 0);
}

static void t_subject(void)
{
	static uint8_t der[BUF];
	size_t n = make_csr(key_of("P-256"), subject_plain, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.attr_count == 9);
	/* OpenSSL's default mask (utf8only) writes DirectoryStrings as UTF8String;
	 * C and serialNumber are PrintableString by definition. */
	ATTR_IS(f, 0, "2.5.4.6", SG_DER_PRINTABLESTRING, true, "GB");
	ATTR_IS(f, 1, "2.5.4.10", SG_DER_UTF8STRING, true, "Jetstack \xc3\xa9");
	ATTR_IS(f, 2, "2.5.4.11", SG_DER_UTF8STRING, true, "Platform");
	ATTR_IS(f, 3, "2.5.4.11", SG_DER_UTF8STRING, true, "Security");
	ATTR_IS(f, 4, "2.5.4.3", SG_DER_UTF8STRING, true, "kubernetes-admin");
	ATTR_IS(f, 5, "2.5.4.3", SG_DER_UTF8STRING, true, "app.tenant.example.com");
	ATTR_IS(f, 6, "1.2.840.113549.1.9.1", SG_DER_IA5STRING, true, "ops@example.com");
	ATTR_IS(f, 7, "2.5.4.17", SG_DER_UTF8STRING, true, "EC1A 1BB");
	ATTR_IS(f, 8, "2.5.4.5", SG_DER_PRINTABLESTRING, true, "legit-001");
	/* The two OUs share an RDN: a multi-valued RDN is flattened, in order. */
	SG_CHECK(f.attr_count == 9 && f.attrs[2].rdn == f.attrs[3].rdn && f.attrs[1].rdn != f.attrs[2].rdn);
	SG_CHECK(f.rdn_count == 8);
	sg_csr_facts_clear(&f);
}

/* String types other than Printable/UTF8/IA5, and a BIT STRING value (an
 * X509_NAME cannot hold an INTEGER: t_subject_non_strings writes one). */
static void subject_types(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans)
{
	(void)exts, (void)sans;
	static const uint8_t bmp[] = {0x00, 'B',  0x00,
	                              'M',  0x20, 0xac}; /* "BM€" (no surrogates: OpenSSL refuses them) */
	static const uint8_t ucs4[] = {0, 0, 0, 'U', 0, 0, 0x20, 0xac};
	static const uint8_t teletex[] = {'T', 0xe9, 'l'}; /* Latin-1 e-acute, kept as the octet */
	static const uint8_t bits[] = {0x00, 0xa5};        /* OpenSSL writes BIT STRING content as given */
	add_name(req, "O", V_ASN1_BMPSTRING, bmp, sizeof(bmp), 0);
	add_name(req, "OU", V_ASN1_UNIVERSALSTRING, ucs4, sizeof(ucs4), 0);
	add_name(req, "L", V_ASN1_T61STRING, teletex, sizeof(teletex), 0);
	add_name(req, "serialNumber", V_ASN1_NUMERICSTRING, "0123 45", -1, 0);
	add_name(req, "CN", V_ASN1_BIT_STRING, bits, sizeof(bits), 0);
}

static void t_subject_types(void)
{
	static uint8_t der[BUF];
	size_t n = make_csr(key_of("P-256"), subject_types, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.attr_count == 5);
	ATTR_IS(f, 0, "2.5.4.10", SG_CSR_FACTS_BMPSTRING, true, "BM\xe2\x82\xac");
	ATTR_IS(f, 1, "2.5.4.11", SG_CSR_FACTS_UNIVERSALSTRING, true, "U\xe2\x82\xac");
	ATTR_IS(f, 2, "2.5.4.7", SG_CSR_FACTS_TELETEXSTRING, true, "T\xe9l");
	ATTR_IS(f, 3, "2.5.4.5", SG_CSR_FACTS_NUMERICSTRING, true, "0123 45");
	SG_CHECK(f.attr_count == 5 && f.attrs[4].tag == SG_DER_BIT_STRING && !f.attrs[4].is_string);
	SG_CHECK(f.attr_count == 5 && f.attrs[4].value && strncmp(f.attrs[4].value, "03", 2) == 0); /* hex of the TLV */
	if (f.attr_count == 5)
		printf("  (BIT STRING value as OpenSSL wrote it: %s)\n", f.attrs[4].value);
	sg_csr_facts_clear(&f);
}

/* ---- hand-made DER, signed with OpenSSL ------------------------------------------ */

static const uint8_t OID_CN[] = {0x55, 0x04, 0x03};
static const uint8_t OID_O[] = {0x55, 0x04, 0x0a};
static const uint8_t OID_SAN[] = {0x55, 0x1d, 0x11};
static const uint8_t OID_KU[] = {0x55, 0x1d, 0x0f};
static const uint8_t OID_EKU[] = {0x55, 0x1d, 0x25};
static const uint8_t OID_BC[] = {0x55, 0x1d, 0x13};

/* A one-attribute RDN: SET { SEQUENCE { oid, tag value } }. */
static void rdn(sg_der_writer *w, const uint8_t *oid, size_t olen, uint8_t tag, const void *v, size_t vlen)
{
	size_t set = sg_der_begin(w, SG_DER_SET);
	size_t seq = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_prim(w, SG_DER_OID, oid, olen);
	sg_der_prim(w, tag, v, vlen);
	sg_der_end(w, seq);
	sg_der_end(w, set);
}

/* Extension { oid, OCTET STRING { value } }. */
static void ext(sg_der_writer *w, const uint8_t *oid, size_t olen, const void *v, size_t vlen)
{
	size_t seq = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_prim(w, SG_DER_OID, oid, olen);
	sg_der_prim(w, SG_DER_OCTET_STRING, v, vlen);
	sg_der_end(w, seq);
}

/*
 * A CSR of the given subject Name content (the RDNs) and Extensions content
 * (NULL: no attributes at all), with k's key, signed by k (or by
 * signer when k cannot sign, e.g. X25519).
 */
static size_t hand_csr(EVP_PKEY *k, EVP_PKEY *signer, const uint8_t *rdns, size_t rlen, const uint8_t *exts,
                       size_t elen, uint8_t *out)
{
	static const uint8_t ext_req[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e};
	static const uint8_t ecdsa_sha256[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02};
	static uint8_t info[BUF];
	uint8_t *spki = NULL;
	int spki_len = i2d_PUBKEY(k, &spki);
	if (spki_len <= 0)
		abort();
	sg_der_writer w;
	sg_der_writer_init(&w, info, sizeof(info));
	size_t tbs = sg_der_begin(&w, SG_DER_SEQUENCE);
	sg_der_uint(&w, 0);
	size_t name = sg_der_begin(&w, SG_DER_SEQUENCE);
	sg_der_raw(&w, rdns, rlen);
	sg_der_end(&w, name);
	sg_der_raw(&w, spki, (size_t)spki_len);
	if (exts) {
		size_t attrs = sg_der_begin(&w, SG_DER_CTX0);
		size_t attr = sg_der_begin(&w, SG_DER_SEQUENCE);
		sg_der_prim(&w, SG_DER_OID, ext_req, sizeof(ext_req));
		size_t set = sg_der_begin(&w, SG_DER_SET);
		size_t seq = sg_der_begin(&w, SG_DER_SEQUENCE);
		sg_der_raw(&w, exts, elen);
		sg_der_end(&w, seq);
		sg_der_end(&w, set);
		sg_der_end(&w, attr);
		sg_der_end(&w, attrs);
	}
	sg_der_end(&w, tbs);
	OPENSSL_free(spki);
	if (sg_der_writer_status(&w) != SG_OK)
		abort();

	EVP_PKEY *s = signer ? signer : k;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t sig[1024];
	size_t siglen = sizeof(sig);
	if (EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, s) != 1 ||
	    EVP_DigestSign(ctx, sig, &siglen, info, w.len) != 1)
		abort();
	EVP_MD_CTX_free(ctx);

	sg_der_writer o;
	sg_der_writer_init(&o, out, BUF);
	size_t csr = sg_der_begin(&o, SG_DER_SEQUENCE);
	sg_der_raw(&o, info, w.len);
	size_t alg = sg_der_begin(&o, SG_DER_SEQUENCE);
	sg_der_prim(&o, SG_DER_OID, ecdsa_sha256, sizeof(ecdsa_sha256));
	sg_der_end(&o, alg);
	sg_der_bits(&o, sig, siglen);
	sg_der_end(&o, csr);
	if (sg_der_writer_status(&o) != SG_OK)
		abort();
	return o.len;
}

/* A CSR whose only extension is a subjectAltName of the given content
 * (the GeneralNames' bytes, wrapped in the SEQUENCE here). */
static size_t san_csr(const void *names, size_t nlen, uint8_t *out)
{
	uint8_t value[8192], exts[8300];
	sg_der_writer v, e;
	sg_der_writer_init(&v, value, sizeof(value));
	size_t seq = sg_der_begin(&v, SG_DER_SEQUENCE);
	sg_der_raw(&v, names, nlen);
	sg_der_end(&v, seq);
	sg_der_writer_init(&e, exts, sizeof(exts));
	ext(&e, OID_SAN, sizeof(OID_SAN), value, v.len);
	if (sg_der_writer_status(&v) || sg_der_writer_status(&e))
		abort();
	return hand_csr(key_of("P-256"), NULL, NULL, 0, exts, e.len, out);
}

static void t_subject_non_strings(void)
{
	static uint8_t der[BUF];
	uint8_t rdns[512];
	sg_der_writer w;
	sg_der_writer_init(&w, rdns, sizeof(rdns));
	rdn(&w, OID_CN, sizeof(OID_CN), SG_DER_INTEGER, "\x2a", 1);
	rdn(&w, OID_O, sizeof(OID_O), SG_DER_OCTET_STRING, "evil-corp", 9);
	rdn(&w, OID_CN, sizeof(OID_CN), SG_DER_UTF8STRING, "a", 1);
	rdn(&w, OID_CN, sizeof(OID_CN), SG_DER_PRINTABLESTRING, "*.example.com & co", 18); /* Go allows * and & */
	/* BMPString read as Go reads it: a surrogate pair joins, a lone one is
	 * U+FFFD, a trailing 00 00 is dropped. */
	rdn(&w, OID_O, sizeof(OID_O), SG_CSR_FACTS_BMPSTRING, "\xd8\x3d\xde\x00\xdc\x00\x00\x41\x00\x00", 10);
	SG_CHECK_OK(sg_der_writer_status(&w));
	size_t n = hand_csr(key_of("P-256"), NULL, rdns, w.len, NULL, 0, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.attr_count == 5);
	ATTR_IS(f, 0, "2.5.4.3", SG_DER_INTEGER, false, "02012a");
	ATTR_IS(f, 1, "2.5.4.10", SG_DER_OCTET_STRING, false, "04096576696c2d636f7270");
	ATTR_IS(f, 2, "2.5.4.3", SG_DER_UTF8STRING, true, "a");
	ATTR_IS(f, 3, "2.5.4.3", SG_DER_PRINTABLESTRING, true, "*.example.com & co");
	ATTR_IS(f, 4, "2.5.4.10", SG_CSR_FACTS_BMPSTRING, true,
	        "\xf0\x9f\x98\x80\xef\xbf\xbd"
	        "A");
	SG_CHECK(f.rdn_count == 5);
	sg_csr_facts_clear(&f);
}

/* Strings Go's encoding/asn1 refuses make the request unevaluable. */
static void t_subject_refused(void)
{
	static const struct {
		uint8_t tag;
		const char *v;
		size_t len;
		const char *msg;
	} cases[] = {
	    {SG_DER_PRINTABLESTRING, "a@b", 3, "PrintableString contains invalid character"},
	    {SG_DER_IA5STRING, "caf\xe9", 4, "IA5String contains invalid character"},
	    {SG_DER_UTF8STRING, "\xc0\xaf", 2, "asn1: invalid UTF-8 string"},
	    {SG_DER_UTF8STRING, "\xed\xa0\x80", 3, "asn1: invalid UTF-8 string"},
	    {SG_CSR_FACTS_NUMERICSTRING, "12a", 3, "NumericString contains invalid character"},
	    {SG_CSR_FACTS_BMPSTRING, "\x00\x41\x00", 3, "pkcs12: odd-length BMP string"},
	};
	static uint8_t der[BUF];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t rdns[256];
		sg_der_writer w;
		sg_der_writer_init(&w, rdns, sizeof(rdns));
		rdn(&w, OID_CN, sizeof(OID_CN), cases[i].tag, cases[i].v, cases[i].len);
		size_t n = hand_csr(key_of("P-256"), NULL, rdns, w.len, NULL, 0, der);
		expect_fail(der, n, cases[i].msg);
	}
	/* An arc beyond 2^31-1: Go's OID parser refuses it. */
	static const uint8_t big_oid[] = {0x55, 0x04, 0x88, 0x80, 0x80, 0x80, 0x00};
	uint8_t rdns[64];
	sg_der_writer w;
	sg_der_writer_init(&w, rdns, sizeof(rdns));
	rdn(&w, big_oid, sizeof(big_oid), SG_DER_UTF8STRING, "x", 1);
	size_t n = hand_csr(key_of("P-256"), NULL, rdns, w.len, NULL, 0, der);
	expect_fail(der, n, "base 128 integer too large");
}

/* ---- SANs ---------------------------------------------------------------------- */

static void all_sans(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans)
{
	(void)req, (void)exts;
	static const uint8_t v4[] = {10, 0, 0, 1};
	static const uint8_t v6[] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	static const uint8_t mapped[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2};
	push_ia5(sans, GEN_DNS, "foo.example.com");
	push_ia5(sans, GEN_EMAIL, "ops@example.com");
	push_ia5(sans, GEN_URI, "spiffe://cluster.local/ns/default/sa/web");
	push_ip(sans, v4, 4);
	push_ip(sans, v6, 16);
	push_ip(sans, mapped, 16);
	/* otherName: Microsoft UPN, a UTF8String; and one holding an INTEGER. */
	ASN1_TYPE *upn = ASN1_TYPE_new();
	ASN1_UTF8STRING *s = ASN1_UTF8STRING_new();
	ASN1_STRING_set(s, "user@tenant.example.com", -1);
	ASN1_TYPE_set(upn, V_ASN1_UTF8STRING, s);
	GENERAL_NAME *gn = GENERAL_NAME_new();
	GENERAL_NAME_set0_othername(gn, OBJ_txt2obj("1.3.6.1.4.1.311.20.2.3", 1), upn);
	sk_GENERAL_NAME_push(sans, gn);
	ASN1_TYPE *num = ASN1_TYPE_new();
	ASN1_INTEGER *i = ASN1_INTEGER_new();
	ASN1_INTEGER_set(i, 7);
	ASN1_TYPE_set(num, V_ASN1_INTEGER, i);
	gn = GENERAL_NAME_new();
	GENERAL_NAME_set0_othername(gn, OBJ_txt2obj("1.2.3.4", 1), num);
	sk_GENERAL_NAME_push(sans, gn);
	push_gn(sans, GEN_RID, OBJ_txt2obj("1.2.3.4.5", 1));
}

static void t_sans(void)
{
	static uint8_t der[BUF];
	size_t n = make_csr(key_of("P-256"), all_sans, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.san_extensions == 1 && !f.san_decode_error);
	SG_CHECK(f.san_count == 9);
	SAN_IS(f, 0, SG_CSR_FACTS_SAN_DNS, "foo.example.com");
	SAN_IS(f, 1, SG_CSR_FACTS_SAN_EMAIL, "ops@example.com");
	SAN_IS(f, 2, SG_CSR_FACTS_SAN_URI, "spiffe://cluster.local/ns/default/sa/web");
	SAN_IS(f, 3, SG_CSR_FACTS_SAN_IP, "10.0.0.1");
	SAN_IS(f, 4, SG_CSR_FACTS_SAN_IP, "2001:db8::1");
	SAN_IS(f, 5, SG_CSR_FACTS_SAN_IP, "192.168.1.2");
	SAN_IS(f, 6, SG_CSR_FACTS_SAN_OTHER_NAME, "user@tenant.example.com");
	SAN_IS(f, 7, SG_CSR_FACTS_SAN_OTHER_NAME, "020107"); /* hex of the INTEGER TLV */
	SAN_IS(f, 8, SG_CSR_FACTS_SAN_REGISTERED_ID, "1.2.3.4.5");
	SG_CHECK(f.san_count == 9 && strcmp(f.sans[6].oid, "1.3.6.1.4.1.311.20.2.3") == 0 &&
	         strcmp(f.sans[7].oid, "1.2.3.4") == 0 && f.sans[0].oid == NULL);
	SG_CHECK(strcmp(sg_csr_facts_san_type_name(SG_CSR_FACTS_SAN_URI), "uniformResourceIdentifier") == 0);
	sg_csr_facts_clear(&f);
}

/* An RFC 5280 directoryName ([4] EXPLICIT Name) as OpenSSL writes it:
 * listed, and cert-manager's IMPLICIT reading of it fails. */
static void dirname_san(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans)
{
	(void)req, (void)exts;
	push_ia5(sans, GEN_DNS, "a.example.com");
	X509_NAME *dn = X509_NAME_new();
	X509_NAME_add_entry_by_txt(dn, "CN", MBSTRING_ASC, (const unsigned char *)"Evil", -1, -1, 0);
	push_gn(sans, GEN_DIRNAME, dn);
}

static void t_sans_directory_name(void)
{
	static uint8_t der[BUF];
	size_t n = make_csr(key_of("P-256"), dirname_san, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.san_count == 2);
	SAN_IS(f, 0, SG_CSR_FACTS_SAN_DNS, "a.example.com");
	SG_CHECK(f.san_count == 2 && f.sans[1].type == SG_CSR_FACTS_SAN_DIRECTORY);
	SG_CHECK(f.san_decode_error && strcmp(f.san_decode_error, "asn1: structure error: sequence tag mismatch") == 0);
	sg_csr_facts_clear(&f);

	/* The IMPLICIT form cert-manager reads, and x400Address and
	 * ediPartyName: listed, decodable, their content in hex. */
	static const uint8_t names[] = {
	    0xa4, 0x0b, 0x31, 0x09, 0x30, 0x07, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x00, /* [4] { SET { CN="" } } */
	    0xa3, 0x02, 0x30, 0x00,                                                       /* [3] { SEQUENCE {} } */
	    0xa5, 0x03, 0x81, 0x01, 0x78,                                                 /* [5] { [1] "x" } */
	};
	n = san_csr(names, sizeof(names), der);
	parse_ok(&f, der, n);
	SG_CHECK(!f.san_decode_error && f.san_count == 3);
	SAN_IS(f, 0, SG_CSR_FACTS_SAN_DIRECTORY,
	       "310930070603550403"
	       "0c00");
	SAN_IS(f, 1, SG_CSR_FACTS_SAN_X400, "3000");
	SAN_IS(f, 2, SG_CSR_FACTS_SAN_EDI_PARTY, "810178");
	sg_csr_facts_clear(&f);
}

/* net.IP.String() of 16-byte addresses. */
static void t_ip_text(void)
{
	static const struct {
		uint8_t ip[16];
		const char *want;
	} cases[] = {
	    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "::1"},
	    {{0}, "::"},
	    {{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}, "2001:db8::1:0:0:1"},
	    {{0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3}, "1:0:0:2::3"},
	    {{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, "::1:0:0:1:0:0"},   /* first of equal runs */
	    {{0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0}, "1:0:2:0:3:0:4:0"}, /* no run of two */
	    {{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "fe80::"},
	    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4}, "1.2.3.4"}, /* IPv4-mapped */
	    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, "::102:304"},     /* IPv4-compatible: not */
	    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 1, 2, 3, 4}, "::fffe:102:304"},
	    {{0x12, 0x34, 0xab, 0xcd, 0, 0x0f, 0xff, 0xff, 0, 0, 0, 0, 0x10, 0, 0, 1}, "1234:abcd:f:ffff::1000:1"},
	};
	static uint8_t der[BUF];
	uint8_t names[40 * 18];
	sg_der_writer w;
	sg_der_writer_init(&w, names, sizeof(names));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		sg_der_prim(&w, 0x87, cases[i].ip, 16);
	SG_CHECK_OK(sg_der_writer_status(&w));
	size_t n = san_csr(names, w.len, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.san_count == sizeof(cases) / sizeof(cases[0]));
	for (size_t i = 0; i < f.san_count && i < sizeof(cases) / sizeof(cases[0]); i++) {
		SAN_IS(f, i, SG_CSR_FACTS_SAN_IP, cases[i].want);
		if (!text_is(f.sans[i].value, f.sans[i].value_len, cases[i].want))
			fprintf(stderr, "  ip %zu: got %s want %s\n", i, f.sans[i].value, cases[i].want);
	}
	sg_csr_facts_clear(&f);
}

/* url.URL.String() after url.Parse, or a refusal. */
static void t_uris(void)
{
	static const struct {
		const char *in, *want; /* want NULL: refused */
	} cases[] = {
	    {"spiffe://cluster.local/ns/default/sa/web", "spiffe://cluster.local/ns/default/sa/web"},
	    {"HTTPS://Example.COM/Path", "https://Example.COM/Path"}, /* scheme lowered, host kept */
	    {"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66"},
	    {"mailto:a@b.example", "mailto:a@b.example"},
	    {"https://example.com/a#", "https://example.com/a"}, /* empty fragment dropped */
	    {"https://example.com/a#frag", "https://example.com/a#frag"},
	    {"https://example.com/a?b=c&d", "https://example.com/a?b=c&d"},
	    {"https://example.com/a?", "https://example.com/a?"},
	    {"https://example.com/p%20q/%2F", "https://example.com/p%20q/%2F"},
	    {"https://[2001:db8::1]:8443/x", "https://[2001:db8::1]:8443/x"},
	    {"https://example.com:443", "https://example.com:443"},
	    {"s://", "s:"},
	    {"s://?q", "s:?q"},
	    {"s:///p", "s:///p"},
	    {"s:/p", "s:/p"},
	    {"s:", "s:"},
	    {"https://example.com/it's(ok)", "https://example.com/it's(ok)"},
	    {"https://user@example.com/", NULL},
	    {"https://example.com/{x}", NULL},
	    {"https://example.com/a b", NULL},
	    {"foo.bar.com", "foo.bar.com"}, /* a reference without scheme, as in approver-policy's tests */
	    {"relative/path?q#f", "relative/path?q#f"},
	    {"//example.com/x", "//example.com/x"},
	    {"///x", "///x"},
	    {"//", ""},
	    {"", ""},
	    {"1http://x", NULL}, /* no scheme, and a ':' in the first segment */
	    {":x", NULL},        /* missing protocol scheme */
	    {"a/b:c", "a/b:c"},
	    {"https://a..example.com/", NULL}, /* crypto/x509: invalid domain */
	    {"https://example.com./", NULL},   /* likewise */
	    {"https://example.com:8a/", NULL}, /* invalid port */
	    {"https://[::1/", NULL},
	    {"https://[zz::1]/", NULL},
	    {"https://ex%41mple.com/", NULL},
	    {"https://example.com/%zz", NULL},
	    {"https://example.com/#a#b", NULL},
	};
	static uint8_t der[BUF];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t names[256];
		sg_der_writer w;
		sg_der_writer_init(&w, names, sizeof(names));
		sg_der_prim(&w, 0x86, cases[i].in, strlen(cases[i].in));
		SG_CHECK_OK(sg_der_writer_status(&w));
		size_t n = san_csr(names, w.len, der);
		sg_csr_facts f;
		int rc = sg_csr_facts_parse(&f, der, n);
		if (cases[i].want) {
			SG_CHECK_OK(rc);
			SG_CHECK(rc == 0 && f.san_count == 1);
			if (rc == 0 && f.san_count == 1) {
				SAN_IS(f, 0, SG_CSR_FACTS_SAN_URI, cases[i].want);
				if (!text_is(f.sans[0].value, f.sans[0].value_len, cases[i].want))
					fprintf(stderr, "  uri %s: got %s\n", cases[i].in, f.sans[0].value);
			}
		} else {
			SG_CHECK_RC(rc, SG_EINVAL);
			if (rc == SG_EINVAL && !strstr(sg_error_last()->msg, "cannot be evaluated"))
				fprintf(stderr, "  uri %s: %s\n", cases[i].in, sg_error_last()->msg);
		}
		sg_csr_facts_clear(&f);
	}
}

static void two_san_extensions(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans)
{
	(void)req, (void)sans;
	GENERAL_NAMES *a = sk_GENERAL_NAME_new_null(), *b = sk_GENERAL_NAME_new_null();
	push_ia5(a, GEN_DNS, "allowed.example.com");
	push_ia5(b, GEN_DNS, "smuggled.example.com");
	sk_X509_EXTENSION_push(exts, X509V3_EXT_i2d(NID_subject_alt_name, 0, a));
	sk_X509_EXTENSION_push(exts, X509V3_EXT_i2d(NID_subject_alt_name, 0, b));
	GENERAL_NAMES_free(a);
	GENERAL_NAMES_free(b);
}

static void t_san_extensions(void)
{
	static uint8_t der[BUF];
	size_t n = make_csr(key_of("P-256"), two_san_extensions, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.san_extensions == 2 && f.san_count == 2 && !f.san_decode_error);
	SAN_IS(f, 0, SG_CSR_FACTS_SAN_DNS, "allowed.example.com");
	SAN_IS(f, 1, SG_CSR_FACTS_SAN_DNS, "smuggled.example.com");
	sg_csr_facts_clear(&f);
}

/* What cert-manager's decoder refuses: reported, not fatal. */
static void t_san_undecodable(void)
{
	static const struct {
		const uint8_t *names;
		size_t len;
		const char *err;
	} cases[] = {
	    {(const uint8_t *)"\x82\x01x\x0c\x01y", 6, "asn1: structure error: bad SAN choice"}, /* UTF8String */
	    {(const uint8_t *)"\x89\x01x", 3, "asn1: structure error: bad SAN choice"},          /* [9] */
	    {(const uint8_t *)"\xa2\x03\x04\x01x", 5, "dNSName must be primitive"},
	    {(const uint8_t *)"\x02\x01\x01", 3, "GeneralName with tag 0x02 is not context-specific"},
	    {(const uint8_t *)"\x80\x01x", 3, "otherName must be constructed"},
	    {(const uint8_t *)"\x88\x01\x81", 3, "asn1: syntax error: truncated base 128 integer"},
	    {(const uint8_t *)"\x88\x02\x2a\x81", 4, "asn1: syntax error: truncated base 128 integer"},
	    {(const uint8_t *)"\x88\x03\x2a\x80\x01", 5, "asn1: syntax error: integer is not minimally encoded"},
	    {(const uint8_t *)"\x88\x00", 2, "asn1: syntax error: zero length OBJECT IDENTIFIER"},
	    {(const uint8_t *)"\xa0\x05\x06\x03\x2a\x03\x04", 7, "otherName 1.2.3.4 has no single [0] EXPLICIT value"},
	};
	static uint8_t der[BUF];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = san_csr(cases[i].names, cases[i].len, der);
		sg_csr_facts f;
		parse_ok(&f, der, n);
		SG_CHECK(f.san_decode_error && strcmp(f.san_decode_error, cases[i].err) == 0);
		if (f.san_decode_error && strcmp(f.san_decode_error, cases[i].err) != 0)
			fprintf(stderr, "  case %zu: %s\n", i, f.san_decode_error);
		sg_csr_facts_clear(&f);
	}

	/* Bytes after the GeneralNames SEQUENCE inside the extension. */
	static const uint8_t value[] = {0x30, 0x03, 0x82, 0x01, 'a', 0x00};
	uint8_t exts[64];
	sg_der_writer e;
	sg_der_writer_init(&e, exts, sizeof(exts));
	ext(&e, OID_SAN, sizeof(OID_SAN), value, sizeof(value));
	size_t n = hand_csr(key_of("P-256"), NULL, NULL, 0, exts, e.len, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.san_decode_error && strcmp(f.san_decode_error, "x509: trailing data after X.509 extension") == 0);
	SG_CHECK(f.san_count == 1);
	sg_csr_facts_clear(&f);
}

/* What crypto/x509 refuses: the request cannot be evaluated. */
static void t_san_refused(void)
{
	static const struct {
		const uint8_t *names;
		size_t len;
		const char *msg;
	} cases[] = {
	    {(const uint8_t *)"\x87\x05\x01\x02\x03\x04\x05", 7, "x509: cannot parse IP address of length 5"},
	    {(const uint8_t *)"\x82\x02\xc3\xa9", 4, "x509: SAN dNSName is malformed"},
	    {(const uint8_t *)"\x81\x01\x80", 3, "x509: SAN rfc822Name is malformed"},
	    {(const uint8_t *)"\x82\x05x", 3, "x509: invalid subject alternative name"},
	};
	static uint8_t der[BUF];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = san_csr(cases[i].names, cases[i].len, der);
		expect_fail(der, n, cases[i].msg);
	}
	uint8_t exts[64];
	sg_der_writer e;
	sg_der_writer_init(&e, exts, sizeof(exts));
	ext(&e, OID_SAN, sizeof(OID_SAN), "\x04\x00", 2);
	size_t n = hand_csr(key_of("P-256"), NULL, NULL, 0, exts, e.len, der);
	expect_fail(der, n, "x509: invalid subject alternative names");
}

/* ---- keyUsage, extKeyUsage, basicConstraints ------------------------------------ */

static void usages(X509_REQ *req, STACK_OF(X509_EXTENSION) * exts, GENERAL_NAMES *sans)
{
	(void)req, (void)sans;
	sk_X509_EXTENSION_push(exts, X509V3_EXT_nconf_nid(NULL, NULL, NID_key_usage,
	                                                  "critical,digitalSignature,keyEncipherment,keyCertSign"));
	sk_X509_EXTENSION_push(
	    exts, X509V3_EXT_nconf_nid(NULL, NULL, NID_ext_key_usage, "serverAuth,clientAuth,timeStamping"));
	sk_X509_EXTENSION_push(exts, X509V3_EXT_nconf_nid(NULL, NULL, NID_basic_constraints, "critical,CA:TRUE"));
}

static void t_extensions(void)
{
	static uint8_t der[BUF];
	size_t n = make_csr(key_of("P-256"), usages, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.key_usage_ext == SG_CSR_FACTS_EXT_PRESENT);
	SG_CHECK(f.key_usage == (SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT | SG_KU_KEY_CERT_SIGN));
	SG_CHECK(f.ext_key_usage_ext == SG_CSR_FACTS_EXT_PRESENT);
	SG_CHECK(f.ext_key_usage == (SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH | SG_EKU_OTHER));
	SG_CHECK(f.basic_constraints_ext == SG_CSR_FACTS_EXT_PRESENT && f.is_ca);
	sg_csr_facts_clear(&f);

	/* Malformed ones are reported as such; Go's parser does not read them. */
	uint8_t exts[128];
	sg_der_writer e;
	sg_der_writer_init(&e, exts, sizeof(exts));
	ext(&e, OID_KU, sizeof(OID_KU), "\x03\x02\x09\x80", 4); /* 9 unused bits */
	ext(&e, OID_EKU, sizeof(OID_EKU), "\x30\x01\x05", 3);
	ext(&e, OID_BC, sizeof(OID_BC), "\x30\x03\x01\x01\x01", 5); /* BOOLEAN 0x01: not DER */
	SG_CHECK_OK(sg_der_writer_status(&e));
	n = hand_csr(key_of("P-256"), NULL, NULL, 0, exts, e.len, der);
	parse_ok(&f, der, n);
	SG_CHECK(f.key_usage_ext == SG_CSR_FACTS_EXT_MALFORMED);
	SG_CHECK(f.ext_key_usage_ext == SG_CSR_FACTS_EXT_MALFORMED);
	SG_CHECK(f.basic_constraints_ext == SG_CSR_FACTS_EXT_MALFORMED && !f.is_ca);
	sg_csr_facts_clear(&f);

	/* A duplicated extension other than subjectAltName: Go refuses. */
	sg_der_writer_init(&e, exts, sizeof(exts));
	ext(&e, OID_KU, sizeof(OID_KU), "\x03\x02\x07\x80", 4);
	ext(&e, OID_KU, sizeof(OID_KU), "\x03\x02\x07\x80", 4);
	n = hand_csr(key_of("P-256"), NULL, NULL, 0, exts, e.len, der);
	expect_fail(der, n, "x509: certificate request contains duplicate requested extensions");
}

/* ---- keys Go does not size ------------------------------------------------------ */

static void t_other_keys(void)
{
	static uint8_t der[BUF];
	EVP_PKEY *x = EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
	SG_CHECK(x != NULL);
	if (!x)
		return;
	size_t n = hand_csr(x, key_of("P-256"), NULL, 0, NULL, 0, der);
	sg_csr_facts f;
	parse_ok(&f, der, n);
	SG_CHECK(f.key_alg == SG_CSR_FACTS_KEY_OTHER && f.key_size == 0);
	SG_CHECK(f.key_oid && strcmp(f.key_oid, "1.3.101.110") == 0);
	sg_csr_facts_clear(&f);
	EVP_PKEY_free(x);
}

/* ---- bounds and hostile bytes --------------------------------------------------- */

static void t_bounds(void)
{
	static uint8_t der[BUF], big[SG_CSR_FACTS_MAX_DER + 1];
	sg_csr_facts f;
	SG_CHECK_RC(sg_csr_facts_parse(&f, big, sizeof(big)), SG_EINVAL);
	SG_CHECK_MSG("exceeds the maximum");
	SG_CHECK_RC(sg_csr_facts_parse(&f, big, 0), SG_EINVAL);
	SG_CHECK_MSG("empty");

	/* 65 subject attributes. */
	static uint8_t rdns[65 * 16];
	sg_der_writer w;
	sg_der_writer_init(&w, rdns, sizeof(rdns));
	for (int i = 0; i < 65; i++)
		rdn(&w, OID_O, sizeof(OID_O), SG_DER_UTF8STRING, "x", 1);
	size_t n = hand_csr(key_of("P-256"), NULL, rdns, w.len, NULL, 0, der);
	expect_fail(der, n, "more than 64 attributes");
	sg_der_writer_init(&w, rdns, sizeof(rdns));
	for (int i = 0; i < 64; i++)
		rdn(&w, OID_O, sizeof(OID_O), SG_DER_UTF8STRING, "x", 1);
	n = hand_csr(key_of("P-256"), NULL, rdns, w.len, NULL, 0, der);
	parse_ok(&f, der, n);
	SG_CHECK(f.attr_count == 64);
	sg_csr_facts_clear(&f);

	/* 257 names (256 pass). */
	static uint8_t names[257 * 3];
	for (int i = 0; i < 257; i++)
		memcpy(names + 3 * i, "\x82\x01x", 3);
	n = san_csr(names, sizeof(names), der);
	expect_fail(der, n, "more than 256 subject alternative names");
	n = san_csr(names, sizeof(names) - 3, der);
	parse_ok(&f, der, n);
	SG_CHECK(f.san_count == 256);
	sg_csr_facts_clear(&f);

	/* A value over SG_CSR_FACTS_MAX_VALUE. */
	static uint8_t longname[SG_CSR_FACTS_MAX_VALUE + 8];
	memset(longname, 'a', sizeof(longname));
	sg_der_writer_init(&w, names, sizeof(names));
	uint8_t *nb = malloc(SG_CSR_FACTS_MAX_VALUE + 16);
	sg_der_writer_init(&w, nb, SG_CSR_FACTS_MAX_VALUE + 16);
	sg_der_prim(&w, 0x82, longname, SG_CSR_FACTS_MAX_VALUE + 1);
	n = san_csr(nb, w.len, der);
	expect_fail(der, n, "longer than 4096 bytes");
	free(nb);

	/* Every truncation of a full CSR, and a byte too many. */
	n = make_csr(key_of("P-256"), all_sans, der);
	for (size_t cut = 1; cut < n; cut++) {
		SG_CHECK(sg_csr_facts_parse(&f, der, cut) == SG_EINVAL);
		SG_CHECK(f.arena == NULL);
	}
	der[n] = 0;
	expect_fail(der, n + 1, "trailing bytes");
	/* Every single-bit flip of its first 64 bytes either parses or fails
	 * cleanly (the sanitizers watch for the rest). */
	for (size_t i = 0; i < 64 * 8; i++) {
		der[i / 8] ^= (uint8_t)(1u << (i % 8));
		int rc = sg_csr_facts_parse(&f, der, n);
		SG_CHECK(rc == SG_OK || rc == SG_EINVAL);
		sg_csr_facts_clear(&f);
		der[i / 8] ^= (uint8_t)(1u << (i % 8));
	}

	sg_csr_facts_clear(NULL);
	memset(&f, 0, sizeof(f));
	sg_csr_facts_clear(&f);
}

SG_TEST_MAIN(SG_TEST(t_keys), SG_TEST(t_subject), SG_TEST(t_subject_types), SG_TEST(t_subject_non_strings),
             SG_TEST(t_subject_refused), SG_TEST(t_sans), SG_TEST(t_sans_directory_name), SG_TEST(t_ip_text),
             SG_TEST(t_uris), SG_TEST(t_san_extensions), SG_TEST(t_san_undecodable), SG_TEST(t_san_refused),
             SG_TEST(t_extensions), SG_TEST(t_other_keys), SG_TEST(t_bounds))
