/*
 * Tests for sg_certset (trust bundles: strict PEM in; PEM, PKCS#12 and JKS
 * out). The certificates are made here by OpenSSL's own builder, and every
 * output is read back by code that did not write it: the expected PEM is
 * OpenSSL's PEM_write of each certificate, PKCS#12 stores are opened with
 * OpenSSL's PKCS#12 API (in a library context of the test's own, with the
 * legacy provider for RC2) and, where installed, by `openssl pkcs12` and
 * Java's keytool; JKS stores are parsed field by field here, their digest
 * recomputed from a password spelled out in UTF-16BE by hand.
 *
 * Hostile cases: each error message of the header, blocks of other types,
 * headers, broken base64 and armour, DER with trailing bytes, things that
 * are not certificates, NUL bytes, over-limit text, block counts and set
 * sizes, and that a failed add changes nothing.
 */
#include "sg_certset.h"
#include "sg_test.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/provider.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define T_2100 4102444800 /* 2100-01-01T00:00:00Z: GeneralizedTime */
#define T_2030 1893456000 /* 2030-01-01T00:00:00Z */
#define T_2020 1577836800 /* 2020-01-01T00:00:00Z */
#define T_2010 1262304000 /* 2010-01-01T00:00:00Z */

/* ---- certificates ---- */

static EVP_PKEY *test_key(void)
{
	static EVP_PKEY *k;
	if (!k)
		k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	if (!k)
		abort();
	return k;
}

typedef struct tcert {
	uint8_t *der;
	size_t len;
	char *pem; /* OpenSSL's PEM_write: 64 columns, final newline */
	char *cn;  /* the subject's only attribute */
} tcert;

enum { BC_NONE, BC_FALSE, BC_TRUE };

/* A self-signed certificate; serial 8 bytes 0x11..0x88 + n so that a test
 * may patch it in the DER. */
static tcert make_cert(const char *cn, uint32_t n, int64_t not_before, int64_t not_after, int bc)
{
	X509 *x = X509_new();
	BIO *b = BIO_new(BIO_s_mem());
	if (!x || !b)
		abort();
	X509_set_version(x, 2);
	uint8_t serial[8] = {0x11,      0x22, 0x33, 0x44, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
	                     (uint8_t)n};
	BIGNUM *bn = BN_bin2bn(serial, 8, NULL);
	if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)))
		abort();
	BN_free(bn);
	ASN1_TIME_set(X509_getm_notBefore(x), (time_t)not_before);
	ASN1_TIME_set(X509_getm_notAfter(x), (time_t)not_after);
	X509_NAME *name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, name);
	X509_set_pubkey(x, test_key());
	if (bc != BC_NONE) {
		X509V3_CTX ctx;
		X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
		X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, NID_basic_constraints,
		                                        bc == BC_TRUE ? "critical,CA:TRUE" : "critical,CA:FALSE");
		if (!e || X509_add_ext(x, e, -1) != 1)
			abort();
		X509_EXTENSION_free(e);
	}
	if (X509_sign(x, test_key(), EVP_sha256()) <= 0)
		abort();
	tcert c = {0};
	unsigned char *der = NULL;
	int len = i2d_X509(x, &der);
	char *p;
	long plen;
	if (len <= 0 || PEM_write_bio_X509(b, x) != 1 || (plen = BIO_get_mem_data(b, &p)) <= 0)
		abort();
	c.der = malloc((size_t)len);
	c.pem = strndup(p, (size_t)plen);
	c.cn = strdup(cn);
	if (!c.der || !c.pem || !c.cn)
		abort();
	memcpy(c.der, der, (size_t)len);
	c.len = (size_t)len;
	OPENSSL_free(der);
	BIO_free(b);
	X509_free(x);
	return c;
}

static tcert ca_cert(const char *cn, uint32_t n)
{
	return make_cert(cn, n, T_2020, T_2100, BC_TRUE);
}

static void tcert_free(tcert *c)
{
	free(c->der);
	free(c->pem);
	free(c->cn);
	memset(c, 0, sizeof(*c));
}

/* Base64 of n bytes on one line (EVP_EncodeBlock: no newlines). */
static char *b64(const uint8_t *p, size_t n)
{
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	if (!out || EVP_EncodeBlock((unsigned char *)out, p, (int)n) < 0)
		abort();
	return out;
}

/* printf into a new string. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	int n = vsnprintf(NULL, 0, f, ap);
	va_end(ap);
	char *s = malloc((size_t)n + 1);
	if (!s)
		abort();
	va_start(ap, f);
	vsnprintf(s, (size_t)n + 1, f, ap);
	va_end(ap);
	return s;
}

static int add(sg_certset *s, const char *text)
{
	return sg_certset_add_pem(s, text, strlen(text));
}

static sg_certset *new_set(const sg_certset_opts *o)
{
	sg_certset *s = NULL;
	if (sg_certset_new(&s, o) != SG_OK)
		abort();
	return s;
}

static char *pem_of(const sg_certset *s)
{
	char *p = NULL;
	size_t n = 0;
	SG_CHECK_OK(sg_certset_pem(s, &p, &n));
	SG_CHECK(p && strlen(p) == n);
	return p;
}

static void hash_of(const tcert *c, uint8_t out[32])
{
	SHA256(c->der, c->len, out);
}

static int by_hash(const void *a, const void *b)
{
	uint8_t ha[32], hb[32];
	hash_of(*(const tcert *const *)a, ha);
	hash_of(*(const tcert *const *)b, hb);
	return memcmp(ha, hb, 32);
}

/* What the set of these certificates must print: OpenSSL's PEM of each, in
 * SHA-256 order, without the final newline. */
static char *expected_pem(tcert **cs, size_t n)
{
	tcert **sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		abort();
	memcpy(sorted, cs, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), by_hash);
	size_t total = 1;
	for (size_t i = 0; i < n; i++)
		total += strlen(sorted[i]->pem);
	char *out = calloc(1, total);
	if (!out)
		abort();
	for (size_t i = 0; i < n; i++)
		strcat(out, sorted[i]->pem);
	size_t len = strlen(out);
	if (len && out[len - 1] == '\n')
		out[len - 1] = '\0';
	free(sorted);
	return out;
}

/* trust-manager's alias of a certificate made here (a CN of lower-case
 * ASCII without characters Go escapes): 8 hex digits of the SHA-256, "|",
 * "CN=<cn>"; lower case as in a JKS store when lower. Caller frees. */
static char *tm_alias(const tcert *c, bool lower)
{
	uint8_t h[32];
	hash_of(c, h);
	return fmt("%02x%02x%02x%02x|%s=%s", h[0], h[1], h[2], h[3], lower ? "cn" : "CN", c->cn);
}

static bool msg_is(const char *want)
{
	bool same = strcmp(sg_error_last()->msg, want) == 0;
	if (!same)
		fprintf(stderr, "  message: \"%s\"\n  wanted:  \"%s\"\n", sg_error_last()->msg, want);
	return same;
}

static bool msg_starts(const char *want)
{
	bool same = strncmp(sg_error_last()->msg, want, strlen(want)) == 0;
	if (!same)
		fprintf(stderr, "  message: \"%s\"\n  wanted a start of \"%s\"\n", sg_error_last()->msg, want);
	return same;
}

/* ---- sets and PEM ---- */

static void t_empty(void)
{
	sg_certset *s = new_set(NULL);
	SG_CHECK(sg_certset_count(s) == 0);
	char *p = pem_of(s);
	SG_CHECK(p && p[0] == '\0');
	free(p);
	SG_CHECK_OK(sg_certset_add_pem(s, NULL, 0));
	SG_CHECK_OK(sg_certset_add_pem(s, "", 0));
	SG_CHECK_OK(add(s, "# only a comment\nno blocks here\n-----END CERTIFICATE-----\n"));
	SG_CHECK(sg_certset_count(s) == 0);
	sg_certset_stats st;
	sg_certset_stats_get(s, &st);
	SG_CHECK(st.blocks == 0 && st.duplicates == 0 && st.expired == 0 && st.non_ca == 0);

	uint8_t *out = (uint8_t *)"x";
	size_t len = 7;
	SG_CHECK_RC(sg_certset_pkcs12(s, "changeit", SG_CERTSET_P12_MODERN_2023, &out, &len), SG_EINVAL);
	SG_CHECK_MSG("empty");
	SG_CHECK(out == NULL && len == 0);
	SG_CHECK_RC(sg_certset_jks(s, "changeit", &out, &len), SG_EINVAL);
	SG_CHECK_MSG("empty");
	SG_CHECK(out == NULL && len == 0);
	sg_certset_free(s);
	sg_certset_free(NULL);
}

static void t_dedupe(void)
{
	tcert a = ca_cert("a", 1), b = ca_cert("b", 2);
	sg_certset *s = new_set(NULL);
	char *twice = fmt("%s%s", a.pem, a.pem);
	SG_CHECK_OK(add(s, twice));
	SG_CHECK(sg_certset_count(s) == 1);
	SG_CHECK_OK(add(s, a.pem));
	char *ab = fmt("%s\n%s", b.pem, a.pem);
	SG_CHECK_OK(add(s, ab));
	SG_CHECK(sg_certset_count(s) == 2);
	sg_certset_stats st;
	sg_certset_stats_get(s, &st);
	SG_CHECK(st.blocks == 5);
	SG_CHECK(st.duplicates == 3);
	SG_CHECK(st.expired == 0 && st.non_ca == 0);
	char *got = pem_of(s);
	tcert *both[] = {&a, &b};
	char *want = expected_pem(both, 2);
	SG_CHECK(got && strcmp(got, want) == 0);
	free(got);
	free(want);
	free(twice);
	free(ab);
	sg_certset_free(s);
	tcert_free(&a);
	tcert_free(&b);
}

static void t_order_independent(void)
{
	tcert c[4] = {ca_cert("one", 1), ca_cert("two", 2), ca_cert("three", 3), ca_cert("four", 4)};
	sg_certset *x = new_set(NULL), *y = new_set(NULL), *z = new_set(NULL);
	for (int i = 0; i < 4; i++)
		SG_CHECK_OK(add(x, c[i].pem));
	for (int i = 3; i >= 0; i--)
		SG_CHECK_OK(add(y, c[i].pem));
	char *all = fmt("%s%s%s%s", c[2].pem, c[0].pem, c[3].pem, c[1].pem);
	SG_CHECK_OK(add(z, all));
	char *px = pem_of(x), *py = pem_of(y), *pz = pem_of(z);
	tcert *ps[] = {&c[0], &c[1], &c[2], &c[3]};
	char *want = expected_pem(ps, 4);
	SG_CHECK(strcmp(px, want) == 0);
	SG_CHECK(strcmp(py, want) == 0);
	SG_CHECK(strcmp(pz, want) == 0);

	/* Its own output reads back to itself. */
	sg_certset *again = new_set(NULL);
	SG_CHECK_OK(add(again, px));
	char *pa = pem_of(again);
	SG_CHECK(strcmp(pa, want) == 0);
	free(pa);
	sg_certset_free(again);

	free(px), free(py), free(pz), free(want), free(all);
	sg_certset_free(x), sg_certset_free(y), sg_certset_free(z);
	for (int i = 0; i < 4; i++)
		tcert_free(&c[i]);
}

/* The text of a block with the body written by the caller. */
static char *block(const char *type, const char *body)
{
	return fmt("-----BEGIN %s-----\n%s\n-----END %s-----\n", type, body, type);
}

static void t_pem_layout(void)
{
	tcert a = ca_cert("layout-a", 1), b = make_cert("layout-b-with-a-longer-name", 2, T_2020, T_2030, BC_NONE);
	/* Comments, CRLF line ends, trailing blanks, base64 on one line with
	 * spaces and tabs inside, and the END line right after the body. */
	char *b64a = b64(a.der, a.len), *b64b = b64(b.der, b.len);
	size_t half = strlen(b64a) / 2;
	char *messy = fmt("# Issuer: CN=whoever\r\n"
	                  "some text: with a colon\r\n"
	                  "-----BEGIN CERTIFICATE-----  \r\n"
	                  "  %.*s \t %s\r\n"
	                  "-----END CERTIFICATE-----\t\r\n"
	                  "\r\n"
	                  "trailing comment\n"
	                  "-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----",
	                  (int)half, b64a, b64a + half, b64b);
	sg_certset *s = new_set(NULL);
	SG_CHECK_OK(add(s, messy));
	SG_CHECK(sg_certset_count(s) == 2);
	char *got = pem_of(s);
	tcert *both[] = {&a, &b};
	char *want = expected_pem(both, 2);
	SG_CHECK(strcmp(got, want) == 0);

	/* The layout, spelled out. */
	size_t n = strlen(got);
	SG_CHECK(n > 0 && got[n - 1] == '-');
	SG_CHECK(strncmp(got, "-----BEGIN CERTIFICATE-----\n", 28) == 0);
	SG_CHECK(strstr(got, "-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\n") != NULL);
	SG_CHECK(!strchr(got, '\r') && !strchr(got, '#'));
	size_t col = 0, longest = 0;
	for (size_t i = 0; i < n; i++) {
		if (got[i] == '\n') {
			SG_CHECK(col > 0); /* no empty line */
			col = 0;
		} else if (++col > longest && got[i] != '-') {
			longest = col;
		}
	}
	SG_CHECK(longest == 64);
	/* sg_certset_pem's length excludes the NUL */
	char *p = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_certset_pem(s, &p, &len));
	SG_CHECK(len == n && p[len] == '\0');
	free(p);

	free(got), free(want), free(messy), free(b64a), free(b64b);
	sg_certset_free(s);
	tcert_free(&a);
	tcert_free(&b);
}

/* Adding text to a set holding one certificate fails with code and a
 * message; the set is as it was. */
static void expect_refused(const char *text, size_t len, int code, const char *msg, bool exact, int line)
{
	tcert keep = ca_cert("kept", 77);
	sg_certset *s = new_set(NULL);
	SG_CHECK_OK(add(s, keep.pem));
	char *before = pem_of(s);
	sg_certset_stats st0, st1;
	sg_certset_stats_get(s, &st0);
	int rc = sg_certset_add_pem(s, text, len);
	if (rc != code || !(exact ? msg_is(msg) : msg_starts(msg))) {
		fprintf(stderr, "test_certset.c:%d: refusal not as expected (rc %d)\n", line, rc);
		sg_test_failures++;
	}
	sg_test_checks++;
	SG_CHECK(sg_certset_count(s) == 1);
	sg_certset_stats_get(s, &st1);
	SG_CHECK(memcmp(&st0, &st1, sizeof(st0)) == 0);
	char *after = pem_of(s);
	SG_CHECK(strcmp(before, after) == 0);
	free(before), free(after);
	sg_certset_free(s);
	tcert_free(&keep);
}
#define REFUSED(text, msg) expect_refused((text), strlen(text), SG_EINVAL, (msg), false, __LINE__)
#define REFUSED_EXACTLY(text, msg) expect_refused((text), strlen(text), SG_EINVAL, (msg), true, __LINE__)

#define MALFORMED "invalid PEM block in bundle; malformed PEM block: "
#define INVALID_CERT "invalid PEM block in bundle; invalid PEM certificate: "

static void t_errors(void)
{
	tcert a = ca_cert("errors", 5);
	char *b64a = b64(a.der, a.len);
	char *good = block("CERTIFICATE", b64a);

	/* Blocks of other types, even after a good one, even broken. */
	char *key = fmt("%s-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n"
	                "-----END PRIVATE KEY-----\n",
	                good);
	REFUSED_EXACTLY(key,
	                "invalid PEM block in bundle: only CERTIFICATE blocks are permitted but found 'PRIVATE KEY'");
	char *rsa = block("RSA PRIVATE KEY", "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA");
	REFUSED_EXACTLY(
	    rsa, "invalid PEM block in bundle: only CERTIFICATE blocks are permitted but found 'RSA PRIVATE KEY'");
	char *x509crl = block("X509 CRL", "!!!not base64");
	REFUSED_EXACTLY(x509crl,
	                "invalid PEM block in bundle: only CERTIFICATE blocks are permitted but found 'X509 CRL'");
	char *trusted = block("TRUSTED CERTIFICATE", b64a);
	REFUSED_EXACTLY(
	    trusted,
	    "invalid PEM block in bundle: only CERTIFICATE blocks are permitted but found 'TRUSTED CERTIFICATE'");

	/* Headers: lines with ':' right after BEGIN. */
	char *hdr_body = fmt("Proc-Type: 4,ENCRYPTED\nDEK-Info: DES-EDE3-CBC,0011223344556677\n\n%s", b64a);
	char *hdr = block("CERTIFICATE", hdr_body);
	REFUSED_EXACTLY(hdr, "invalid PEM block in bundle; blocks are not permitted to have PEM headers");
	char *hdr1_body = fmt("Comment: hello\n%s", b64a);
	char *hdr1 = block("CERTIFICATE", hdr1_body);
	REFUSED_EXACTLY(hdr1, "invalid PEM block in bundle; blocks are not permitted to have PEM headers");

	/* Base64. */
	char *bad = block("CERTIFICATE", "MIIB!AAA");
	REFUSED(bad, MALFORMED);
	char *colon_late_body = fmt("%s\nA:BC", b64a);
	char *colon_late = block("CERTIFICATE", colon_late_body);
	REFUSED(colon_late, MALFORMED);
	char *trunc_body = strndup(b64a, strlen(b64a) - 1);
	char *trunc = block("CERTIFICATE", trunc_body);
	REFUSED(trunc, MALFORMED);
	char *midpad = block("CERTIFICATE", "AA==AAAA");
	REFUSED(midpad, MALFORMED);
	char *pad3 = block("CERTIFICATE", "A===");
	REFUSED(pad3, MALFORMED);
	char *bits = block("CERTIFICATE", "AB=="); /* 'B' leaves non-zero pad bits */
	REFUSED(bits, MALFORMED);
	char *url = block("CERTIFICATE", "AB-_");
	REFUSED(url, MALFORMED);

	/* Armour. */
	char *no_end = fmt("-----BEGIN CERTIFICATE-----\n%s\n", b64a);
	REFUSED(no_end, MALFORMED "no END line");
	char *end_other = fmt("-----BEGIN CERTIFICATE-----\n%s\n-----END PRIVATE KEY-----\n", b64a);
	REFUSED(end_other, MALFORMED "the END line at line 3 does not match");
	char *end_junk = fmt("-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE----- junk\n", b64a);
	REFUSED(end_junk, MALFORMED);
	char *begin_open = fmt("-----BEGIN CERTIFICATE\n%s\n-----END CERTIFICATE-----\n", b64a);
	REFUSED(begin_open, MALFORMED "the BEGIN line at line 1 does not end");
	char *begin_twice = fmt("-----BEGIN CERTIFICATE-----\n%s\n%s", b64a, good);
	REFUSED(begin_twice, MALFORMED "no END line for \"-----BEGIN CERTIFICATE-----\" at line 1 before");
	char *ctl_type = fmt("-----BEGIN CERT\x01-----\n%s\n-----END CERT\x01-----\n", b64a);
	REFUSED(ctl_type, MALFORMED);
	char longtype[200];
	memset(longtype, 'A', sizeof(longtype) - 1);
	longtype[sizeof(longtype) - 1] = '\0';
	char *long_type = block(longtype, b64a);
	REFUSED(long_type, MALFORMED);

	/* Certificates. */
	uint8_t *plus = malloc(a.len + 1);
	memcpy(plus, a.der, a.len);
	plus[a.len] = 0;
	char *b64plus = b64(plus, a.len + 1);
	char *trailing = block("CERTIFICATE", b64plus);
	REFUSED(trailing, INVALID_CERT "the block at line 1 has 1 bytes after its certificate");
	char *notcert = block("CERTIFICATE", "MAMCAQE="); /* SEQUENCE { INTEGER 1 } */
	REFUSED(notcert, INVALID_CERT "the block at line 1 is not a DER certificate");
	char *empty = fmt("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n");
	REFUSED(empty, INVALID_CERT);
	char *cut_b64 = b64(a.der, a.len - 3);
	char *cut = block("CERTIFICATE", cut_b64);
	REFUSED(cut, INVALID_CERT);
	/* BER: the outer length in a longer form than DER allows. */
	SG_CHECK(a.der[0] == 0x30 && a.der[1] == 0x82);
	uint8_t *ber = malloc(a.len + 1);
	ber[0] = 0x30, ber[1] = 0x83, ber[2] = 0;
	memcpy(ber + 3, a.der + 2, a.len - 2);
	char *b64ber = b64(ber, a.len + 1);
	char *berblk = block("CERTIFICATE", b64ber);
	REFUSED(berblk, INVALID_CERT);
	/* A good block then a bad one: nothing is added. */
	char *good_then_bad = fmt("%s%s", good, notcert);
	REFUSED(good_then_bad, INVALID_CERT);

	/* Limits. */
	size_t nul_len = strlen(good);
	char *nul = strdup(good);
	nul[nul_len / 2] = '\0';
	expect_refused(nul, nul_len, SG_EINVAL, "invalid PEM bundle: the text holds a NUL byte", true, __LINE__);
	size_t big_len = SG_CERTSET_PEM_MAX + 1;
	char *big = malloc(big_len);
	memset(big, '#', big_len);
	expect_refused(big, big_len, SG_EINVAL, "invalid PEM bundle: 4194305 bytes, more than 4194304", true, __LINE__);
	const char *one = "-----BEGIN X-----\n";
	size_t many_len = strlen(one) * (SG_CERTSET_MAX + 1);
	char *many = malloc(many_len + 1);
	for (size_t i = 0; i <= SG_CERTSET_MAX; i++)
		memcpy(many + i * strlen(one), one, strlen(one));
	many[many_len] = '\0';
	expect_refused(many, many_len, SG_EINVAL, "invalid PEM bundle: 8193 PEM blocks, more than 8192", true,
	               __LINE__);

	sg_certset *s = new_set(NULL);
	SG_CHECK_RC(sg_certset_add_pem(s, NULL, 3), SG_EINVAL);
	SG_CHECK_RC(sg_certset_add_pem(NULL, good, strlen(good)), SG_EINVAL);
	sg_certset_free(s);

	char *all[] = {b64a,       good,       key,       rsa,      x509crl,       trusted,
	               hdr_body,   hdr,        hdr1_body, hdr1,     bad,           colon_late_body,
	               colon_late, trunc_body, trunc,     midpad,   pad3,          bits,
	               url,        no_end,     end_other, end_junk, begin_open,    begin_twice,
	               ctl_type,   long_type,  b64plus,   trailing, notcert,       empty,
	               cut_b64,    cut,        b64ber,    berblk,   good_then_bad, nul,
	               big,        many};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(all[i]);
	free(plus);
	free(ber);
	tcert_free(&a);
}

static void t_set_limit(void)
{
	/* SG_CERTSET_MAX distinct certificates: one signed certificate with
	 * its serial patched (nothing here checks signatures). */
	tcert a = ca_cert("limit", 0);
	static const uint8_t serial[] = {0x02, 0x08, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0};
	size_t at = 0;
	for (size_t i = 0; i + sizeof(serial) <= a.len && !at; i++)
		if (memcmp(a.der + i, serial, sizeof(serial)) == 0)
			at = i + 6;
	SG_CHECK(at > 0);
	char *first = b64(a.der, a.len);
	size_t blen = strlen("-----BEGIN CERTIFICATE-----\n") + strlen(first) + strlen("\n-----END CERTIFICATE-----\n");
	free(first);
	size_t half = SG_CERTSET_MAX / 2;
	char *text = malloc(half * blen + 1);
	sg_certset *s = new_set(NULL);
	/* Two halves, then one known and one new certificate. */
	for (int round = 0; round < 3; round++) {
		size_t n = 0, count = round < 2 ? half : 2;
		for (size_t i = 0; i < count; i++) {
			uint32_t v = (uint32_t)(round * half + i) + 100;
			if (round == 2)
				v = i == 0 ? 105 : SG_CERTSET_MAX + 200;
			a.der[at] = (uint8_t)(v >> 24), a.der[at + 1] = (uint8_t)(v >> 16);
			a.der[at + 2] = (uint8_t)(v >> 8), a.der[at + 3] = (uint8_t)v;
			char *e = b64(a.der, a.len);
			n += (size_t)sprintf(text + n, "-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----\n",
			                     e);
			free(e);
		}
		if (round < 2) {
			SG_CHECK_OK(sg_certset_add_pem(s, text, n));
		} else {
			SG_CHECK_RC(sg_certset_add_pem(s, text, n), SG_EINVAL);
			SG_CHECK(msg_is("invalid PEM bundle: the set would hold 8193 certificates, more than 8192"));
		}
	}
	SG_CHECK(sg_certset_count(s) == SG_CERTSET_MAX);
	sg_certset_stats st;
	sg_certset_stats_get(s, &st);
	SG_CHECK(st.blocks == SG_CERTSET_MAX && st.duplicates == 0);
	/* Known certificates still add at the limit. */
	a.der[at] = 0, a.der[at + 1] = 0, a.der[at + 2] = 0, a.der[at + 3] = 109;
	char *e = b64(a.der, a.len);
	char *known = block("CERTIFICATE", e);
	SG_CHECK_OK(add(s, known));
	SG_CHECK(sg_certset_count(s) == SG_CERTSET_MAX);
	free(e), free(known), free(text);
	sg_certset_free(s);
	tcert_free(&a);
}

static void t_filters(void)
{
	tcert ca = ca_cert("ca", 1);
	tcert leaf = make_cert("leaf", 2, T_2020, T_2030, BC_NONE);
	tcert notca = make_cert("not-ca", 3, T_2020, T_2030, BC_FALSE);
	tcert old_ca = make_cert("old-ca", 4, T_2010, T_2020, BC_TRUE);
	tcert old_leaf = make_cert("old-leaf", 5, T_2010, T_2020, BC_NONE);
	char *all = fmt("%s%s%s%s%s%s", ca.pem, leaf.pem, notca.pem, old_ca.pem, old_leaf.pem, ca.pem);

	sg_certset *none = new_set(NULL);
	SG_CHECK_OK(add(none, all));
	SG_CHECK(sg_certset_count(none) == 5);

	sg_certset_opts both = {.filter_expired = true, .filter_non_ca = true}; /* now: the clock */
	sg_certset *s = new_set(&both);
	SG_CHECK_OK(add(s, all));
	SG_CHECK(sg_certset_count(s) == 1);
	sg_certset_stats st;
	sg_certset_stats_get(s, &st);
	SG_CHECK(st.blocks == 6);
	SG_CHECK(st.expired == 2); /* an expired leaf counts as expired */
	SG_CHECK(st.non_ca == 2);
	SG_CHECK(st.duplicates == 1);
	char *got = pem_of(s);
	tcert *only[] = {&ca};
	char *want = expected_pem(only, 1);
	SG_CHECK(strcmp(got, want) == 0);
	free(got), free(want);

	/* now: at notAfter a certificate is still valid, a second later not. */
	sg_certset_opts at = {.filter_expired = true, .now = T_2020};
	sg_certset *s_at = new_set(&at);
	SG_CHECK_OK(add(s_at, old_ca.pem));
	SG_CHECK(sg_certset_count(s_at) == 1);
	sg_certset_opts after = {.filter_expired = true, .now = T_2020 + 1};
	sg_certset *s_after = new_set(&after);
	SG_CHECK_OK(add(s_after, old_ca.pem));
	SG_CHECK(sg_certset_count(s_after) == 0);
	sg_certset_stats_get(s_after, &st);
	SG_CHECK(st.blocks == 1 && st.expired == 1);

	/* Only non-CAs. */
	sg_certset_opts ca_only = {.filter_non_ca = true};
	sg_certset *s_ca = new_set(&ca_only);
	SG_CHECK_OK(add(s_ca, all));
	SG_CHECK(sg_certset_count(s_ca) == 2);
	sg_certset_stats_get(s_ca, &st);
	SG_CHECK(st.non_ca == 3 && st.expired == 0 && st.duplicates == 1);

	/* A filtered certificate must still be a certificate. */
	char *bad = fmt("%s-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n", old_leaf.pem);
	SG_CHECK_RC(add(s, bad), SG_EINVAL);
	sg_certset_stats st2;
	sg_certset_stats_get(s, &st2);
	SG_CHECK(st2.blocks == 6 && st2.expired == 2);

	free(all), free(bad);
	sg_certset_free(none), sg_certset_free(s), sg_certset_free(s_at), sg_certset_free(s_after),
	    sg_certset_free(s_ca);
	tcert_free(&ca), tcert_free(&leaf), tcert_free(&notca), tcert_free(&old_ca), tcert_free(&old_leaf);
}

/* ---- PKCS#12 ---- */

static void t_p12_profile_parse(void)
{
	sg_certset_p12_profile p = SG_CERTSET_P12_MODERN_2023;
	SG_CHECK_OK(sg_certset_p12_profile_parse("", &p));
	SG_CHECK(p == SG_CERTSET_P12_LEGACY_RC2);
	SG_CHECK_OK(sg_certset_p12_profile_parse("LegacyDES", &p));
	SG_CHECK(p == SG_CERTSET_P12_LEGACY_DES);
	SG_CHECK_OK(sg_certset_p12_profile_parse("Modern2023", &p));
	SG_CHECK(p == SG_CERTSET_P12_MODERN_2023);
	SG_CHECK_OK(sg_certset_p12_profile_parse("LegacyRC2", &p));
	SG_CHECK(p == SG_CERTSET_P12_LEGACY_RC2);
	SG_CHECK_RC(sg_certset_p12_profile_parse("legacyrc2", &p), SG_EINVAL);
	SG_CHECK_MSG("LegacyRC2, LegacyDES or Modern2023");
	SG_CHECK_RC(sg_certset_p12_profile_parse("Modern2024", &p), SG_EINVAL);
	SG_CHECK_RC(sg_certset_p12_profile_parse(NULL, &p), SG_EINVAL);
}

/* The test's own library context for reading stores back: RC2 needs the
 * legacy provider, and the default context stays as the process had it. */
static OSSL_LIB_CTX *read_ctx(void)
{
	static OSSL_LIB_CTX *ctx;
	if (!ctx) {
		ctx = OSSL_LIB_CTX_new();
		if (!ctx || !OSSL_PROVIDER_load(ctx, "default"))
			abort();
		if (!OSSL_PROVIDER_load(ctx, "legacy"))
			fprintf(stderr, "note: no legacy provider; RC2 stores are not read back\n");
		ERR_clear_error();
	}
	return ctx;
}

static int alg_nid(const X509_ALGOR *a)
{
	const ASN1_OBJECT *o;
	X509_ALGOR_get0(&o, NULL, NULL, a);
	return OBJ_obj2nid(o);
}

/* PBES2's parts: the cipher, the PRF and the iterations. */
static void check_pbes2(const X509_ALGOR *alg, int cipher, int prf, long iter)
{
	const void *param;
	int ptype;
	X509_ALGOR_get0(NULL, &ptype, &param, alg);
	SG_CHECK(ptype == V_ASN1_SEQUENCE);
	PBE2PARAM *p2 = ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBE2PARAM), alg->parameter);
	SG_CHECK(p2 != NULL);
	if (!p2)
		return;
	SG_CHECK(alg_nid(p2->encryption) == cipher);
	SG_CHECK(alg_nid(p2->keyfunc) == NID_id_pbkdf2);
	PBKDF2PARAM *kdf = ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBKDF2PARAM), p2->keyfunc->parameter);
	SG_CHECK(kdf != NULL);
	if (kdf) {
		SG_CHECK(kdf->prf && alg_nid(kdf->prf) == prf);
		SG_CHECK(ASN1_INTEGER_get(kdf->iter) == iter);
		PBKDF2PARAM_free(kdf);
	}
	PBE2PARAM_free(p2);
}

static bool has_trusted_attr(const PKCS12_SAFEBAG *bag)
{
	const STACK_OF(X509_ATTRIBUTE) *attrs = PKCS12_SAFEBAG_get0_attrs(bag);
	for (int i = 0; i < sk_X509_ATTRIBUTE_num(attrs); i++) {
		X509_ATTRIBUTE *a = sk_X509_ATTRIBUTE_value(attrs, i);
		char oid[64];
		OBJ_obj2txt(oid, sizeof(oid), X509_ATTRIBUTE_get0_object(a), 1);
		if (strcmp(oid, "2.16.840.1.113894.746875.1.1") != 0)
			continue;
		ASN1_TYPE *v = X509_ATTRIBUTE_get0_type(a, 0);
		return X509_ATTRIBUTE_count(a) == 1 && v && v->type == V_ASN1_OBJECT &&
		       OBJ_obj2nid(v->value.object) == NID_anyExtendedKeyUsage;
	}
	return false;
}

typedef struct p12_want {
	int pbe;       /* NID of the safe's encryption; NID_pbes2 for PBES2 */
	int cipher;    /* for PBES2 */
	int mac;       /* NID of the MAC digest */
	long mac_iter; /* go-pkcs12's: 1 for the legacy profiles, 2048 for Modern2023 */
	int salt_len;  /* go-pkcs12's: 8 for the legacy profiles, 16 for Modern2023 */
	bool rc2;      /* needs the legacy provider to read */
} p12_want;

/* The bags of a passwordless store's one plain safe, checked as below. */
static void check_bags(STACK_OF(PKCS12_SAFEBAG) * bags, tcert **certs, size_t n);

/* Reads the store back and checks it against the certificates, in order.
 * With pass "" it is go-pkcs12's Passwordless: no MAC, one plain safe. */
static void check_p12(const uint8_t *der, size_t len, const char *pass, const p12_want *w, tcert **certs, size_t n)
{
	const unsigned char *p = der;
	PKCS12 *p12 = d2i_PKCS12(NULL, &p, (long)len);
	SG_CHECK(p12 && p == der + len);
	if (!p12)
		return;
	int plen = (int)strlen(pass);
	if (!*pass) {
		SG_CHECK(!PKCS12_mac_present(p12));
		STACK_OF(PKCS7) *safes = PKCS12_unpack_authsafes(p12);
		SG_CHECK(safes && sk_PKCS7_num(safes) == 1);
		PKCS7 *p7 = safes ? sk_PKCS7_value(safes, 0) : NULL;
		SG_CHECK(p7 && OBJ_obj2nid(p7->type) == NID_pkcs7_data);
		STACK_OF(PKCS12_SAFEBAG) *bags = p7 ? PKCS12_unpack_p7data(p7) : NULL;
		check_bags(bags, certs, n);
		sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
		sk_PKCS7_pop_free(safes, PKCS7_free);
		PKCS12_free(p12);
		ERR_clear_error();
		return;
	}
	SG_CHECK(PKCS12_verify_mac(p12, pass, plen) == 1);
	SG_CHECK(PKCS12_verify_mac(p12, "wrong", 5) != 1);
	ERR_clear_error();
	const X509_ALGOR *macalg;
	const ASN1_INTEGER *iter;
	const ASN1_OCTET_STRING *salt;
	PKCS12_get0_mac(NULL, &macalg, &salt, &iter, p12);
	SG_CHECK(alg_nid(macalg) == w->mac);
	SG_CHECK((iter ? ASN1_INTEGER_get(iter) : 1) == w->mac_iter); /* DEFAULT 1: absent when 1 */
	SG_CHECK(salt && ASN1_STRING_length(salt) == w->salt_len);

	STACK_OF(PKCS7) *safes = PKCS12_unpack_authsafes(p12);
	SG_CHECK(safes && sk_PKCS7_num(safes) == 1);
	PKCS7 *p7 = safes ? sk_PKCS7_value(safes, 0) : NULL;
	SG_CHECK(p7 && OBJ_obj2nid(p7->type) == NID_pkcs7_encrypted);
	if (p7 && OBJ_obj2nid(p7->type) == NID_pkcs7_encrypted) {
		PKCS7_ENC_CONTENT *ec = p7->d.encrypted->enc_data;
		SG_CHECK(alg_nid(ec->algorithm) == w->pbe);
		if (w->pbe == NID_pbes2) {
			check_pbes2(ec->algorithm, w->cipher, NID_hmacWithSHA256, 2048);
		} else {
			PBEPARAM *pp = ASN1_TYPE_unpack_sequence(ASN1_ITEM_rptr(PBEPARAM), ec->algorithm->parameter);
			SG_CHECK(pp && ASN1_INTEGER_get(pp->iter) == 2048);
			PBEPARAM_free(pp);
		}
		STACK_OF(PKCS12_SAFEBAG) *bags = PKCS12_item_decrypt_d2i_ex(
		    ec->algorithm, ASN1_ITEM_rptr(PKCS12_SAFEBAGS), pass, plen, ec->enc_data, 1, read_ctx(), NULL);
		if (!bags && w->rc2 && !OSSL_PROVIDER_available(read_ctx(), "legacy")) {
			ERR_clear_error(); /* cannot read RC2 here; the MAC checked the bytes */
		} else {
			check_bags(bags, certs, n);
			sk_PKCS12_SAFEBAG_pop_free(bags, PKCS12_SAFEBAG_free);
		}
	}
	sk_PKCS7_pop_free(safes, PKCS7_free);
	PKCS12_free(p12);
	ERR_clear_error();
}

static void check_bags(STACK_OF(PKCS12_SAFEBAG) * bags, tcert **certs, size_t n)
{
	SG_CHECK(bags && (size_t)sk_PKCS12_SAFEBAG_num(bags) == n);
	for (size_t i = 0; bags && i < n && i < (size_t)sk_PKCS12_SAFEBAG_num(bags); i++) {
		PKCS12_SAFEBAG *bag = sk_PKCS12_SAFEBAG_value(bags, (int)i);
		SG_CHECK(PKCS12_SAFEBAG_get_nid(bag) == NID_certBag);
		X509 *x = PKCS12_SAFEBAG_get1_cert(bag);
		unsigned char *xd = NULL;
		int xl = x ? i2d_X509(x, &xd) : -1;
		SG_CHECK(xl > 0 && (size_t)xl == certs[i]->len && memcmp(xd, certs[i]->der, certs[i]->len) == 0);
		OPENSSL_free(xd);
		X509_free(x);
		char *alias = tm_alias(certs[i], false);
		char *fn = PKCS12_get_friendlyname(bag);
		SG_CHECK(fn && strcmp(fn, alias) == 0);
		if (fn && strcmp(fn, alias) != 0)
			fprintf(stderr, "  friendlyName \"%s\", want \"%s\"\n", fn, alias);
		OPENSSL_free(fn);
		free(alias);
		SG_CHECK(has_trusted_attr(bag));
		SG_CHECK(PKCS12_get_attr_gen(PKCS12_SAFEBAG_get0_attrs(bag), NID_localKeyID) == NULL);
	}
}

/* certs sorted as the store must hold them. */
static void sorted_certs(tcert *c, size_t n, tcert **out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = &c[i];
	qsort(out, n, sizeof(*out), by_hash);
}

static const char *tmp_dir(void)
{
	const char *t = getenv("SIGNET_TEST_TMP");
	return t ? t : "/tmp";
}

static bool write_file(const char *path, const uint8_t *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	bool ok = f && fwrite(p, 1, n, f) == n;
	if (f)
		ok = fclose(f) == 0 && ok;
	return ok;
}

/* Runs cmd; its output (stdout and stderr) into a new string. */
static char *run(const char *cmd, int *status)
{
	char *full = fmt("%s 2>&1", cmd);
	FILE *p = popen(full, "r");
	free(full);
	if (!p) {
		*status = -1;
		return strdup("");
	}
	size_t cap = 4096, n = 0;
	char *out = malloc(cap);
	size_t got;
	while ((got = fread(out + n, 1, cap - n - 1, p)) > 0) {
		n += got;
		if (cap - n < 1024) {
			cap *= 2;
			out = realloc(out, cap);
		}
	}
	out[n] = '\0';
	*status = pclose(p);
	return out;
}

static size_t count_of(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

static bool have_tool(const char *name)
{
	char *cmd = fmt("command -v %s >/dev/null 2>&1", name);
	bool ok = system(cmd) == 0;
	free(cmd);
	return ok;
}

/* `openssl pkcs12 -info` reads the store and shows the attribute on each
 * bag (OpenSSL 3.0 prints the OID, having no name for it). */
static void check_p12_openssl(const char *path, const char *pass, bool legacy, size_t n)
{
	if (!have_tool("openssl"))
		return;
	/* A passwordless store needs no legacy provider: none is loadable. */
	char *cmd =
	    fmt("%sopenssl pkcs12 -info -nokeys %s -in '%s' -passin 'pass:%s'",
	        *pass ? "" : "OPENSSL_MODULES=/nonexistent-signet-test ", legacy && *pass ? "-legacy" : "", path, pass);
	int st;
	char *out = run(cmd, &st);
	SG_CHECK(st == 0);
	if (*pass)
		SG_CHECK(strstr(out, "MAC verified OK") != NULL || strstr(out, "MAC: ") != NULL);
	else
		SG_CHECK(strstr(out, "MAC is absent") != NULL && strstr(out, "PKCS7 Data") != NULL &&
		         strstr(out, "PKCS7 Encrypted") == NULL);
	SG_CHECK(count_of(out, "-----BEGIN CERTIFICATE-----") == n);
	size_t attrs = count_of(out, "2.16.840.1.113894.746875.1.1") + count_of(out, "Trusted key usage (Oracle)");
	SG_CHECK(attrs == n);
	if (st != 0 || attrs != n)
		fprintf(stderr, "%s\n%s\n", cmd, out);
	free(cmd);
	free(out);
}

/* keytool lists every certificate as a trusted entry under its alias. */
static void check_keytool(const char *path, const char *type, const char *pass, tcert **certs, size_t n)
{
	if (!have_tool("keytool"))
		return;
	/* A passwordless PKCS#12 store: no password given (keytool's prompt
	 * reads nothing). */
	bool none = !*pass && strcmp(type, "PKCS12") == 0;
	char *cmd = none ? fmt("keytool -list -keystore '%s' -storetype %s </dev/null", path, type)
	                 : fmt("keytool -list -keystore '%s' -storetype %s -storepass '%s'", path, type, pass);
	int st;
	char *out = run(cmd, &st);
	SG_CHECK(st == 0);
	char *count = fmt("Your keystore contains %zu entr", n);
	SG_CHECK(strstr(out, count) != NULL);
	SG_CHECK(count_of(out, "trustedCertEntry") == n);
	for (size_t i = 0; i < n; i++) {
		char *alias = tm_alias(certs[i], true); /* Java lists aliases in lower case */
		SG_CHECK(strstr(out, alias) != NULL);
		free(alias);
	}
	if (st != 0 || count_of(out, "trustedCertEntry") != n)
		fprintf(stderr, "%s\n%s\n", cmd, out);
	free(count);
	free(cmd);
	free(out);
}

static void p12_profile_case(sg_certset_p12_profile profile, const p12_want *w, const char *tag)
{
	tcert c[3] = {ca_cert("p12-a", 1), ca_cert("p12-b", 2), make_cert("p12-leaf", 3, T_2020, T_2030, BC_NONE)};
	tcert *order[3];
	sorted_certs(c, 3, order);
	sg_certset *s = new_set(NULL);
	char *all = fmt("%s%s%s", c[0].pem, c[1].pem, c[2].pem);
	SG_CHECK_OK(add(s, all));
	const char *passwords[] = {"changeit", "", "p\xc3\xa4ss w\xe2\x82\xac"};
	for (size_t i = 0; i < 3; i++) {
		uint8_t *der = NULL;
		size_t len = 0;
		int rc = sg_certset_pkcs12(s, passwords[i], profile, &der, &len);
		if (rc == SG_EINVAL && w->rc2 && strstr(sg_error_last()->msg, "legacy provider")) {
			fprintf(stderr, "note: %s\n", sg_error_last()->msg);
			break; /* this OpenSSL has no legacy provider: a clear refusal is right */
		}
		SG_CHECK_OK(rc);
		if (rc != SG_OK)
			break;
		check_p12(der, len, passwords[i], w, order, 3);
		/* Two stores of one set differ (salts), and both read; without a
		 * password they are the same bytes. */
		uint8_t *der2 = NULL;
		size_t len2 = 0;
		SG_CHECK_OK(sg_certset_pkcs12(s, passwords[i], profile, &der2, &len2));
		bool same = der2 && len2 == len && memcmp(der, der2, len) == 0;
		SG_CHECK(*passwords[i] ? !same : same);
		free(der2);
		if (i < 2) { /* "changeit" and "" */
			char *path = fmt("%s/certset-%s-%d-%zu.p12", tmp_dir(), tag, (int)getpid(), i);
			SG_CHECK(write_file(path, der, len));
			check_p12_openssl(path, passwords[i], w->rc2, 3);
			check_keytool(path, "PKCS12", passwords[i], order, 3);
			unlink(path);
			free(path);
		}
		free(der);
	}
	uint8_t *der = (uint8_t *)"x";
	size_t len = 1;
	SG_CHECK_RC(sg_certset_pkcs12(s, "\xff\xfe", profile, &der, &len), SG_EINVAL);
	SG_CHECK_MSG("not UTF-8");
	SG_CHECK(der == NULL && len == 0);
	SG_CHECK_RC(sg_certset_pkcs12(s, NULL, profile, &der, &len), SG_EINVAL);
	SG_CHECK_RC(sg_certset_pkcs12(s, "x", (sg_certset_p12_profile)7, &der, &len), SG_EINVAL);
	free(all);
	sg_certset_free(s);
	for (int i = 0; i < 3; i++)
		tcert_free(&c[i]);
}

static void t_pkcs12_legacy_rc2(void)
{
	p12_want w = {NID_pbe_WithSHA1And40BitRC2_CBC, 0, NID_sha1, 1, 8, true};
	p12_profile_case(SG_CERTSET_P12_LEGACY_RC2, &w, "rc2");
}

static void t_pkcs12_legacy_des(void)
{
	p12_want w = {NID_pbe_WithSHA1And3_Key_TripleDES_CBC, 0, NID_sha1, 1, 8, false};
	p12_profile_case(SG_CERTSET_P12_LEGACY_DES, &w, "des");
}

static void t_pkcs12_modern(void)
{
	p12_want w = {NID_pbes2, NID_aes_256_cbc, NID_sha256, 2048, 16, false};
	p12_profile_case(SG_CERTSET_P12_MODERN_2023, &w, "modern");
}

/* Without the legacy provider (OPENSSL_MODULES pointing nowhere, in a
 * child that makes the first store of its process), LegacyRC2 is refused
 * with a message that says why, and the other profiles work. */
static void t_pkcs12_no_legacy(void)
{
	pid_t pid = fork();
	SG_CHECK(pid >= 0);
	if (pid == 0) {
		setenv("OPENSSL_MODULES", "/nonexistent-signet-test", 1);
		tcert a = ca_cert("no-legacy", 1);
		sg_certset *s = new_set(NULL);
		uint8_t *der = NULL;
		size_t len = 0;
		int bad = 0;
		if (add(s, a.pem) != SG_OK)
			bad |= 1;
		int rc = sg_certset_pkcs12(s, "x", SG_CERTSET_P12_LEGACY_RC2, &der, &len);
		if (rc != SG_EINVAL || !strstr(sg_error_last()->msg, "legacy provider"))
			bad |= 2;
		else
			fprintf(stderr, "child: %s\n", sg_error_last()->msg);
		if (sg_certset_pkcs12(s, "x", SG_CERTSET_P12_LEGACY_DES, &der, &len) != SG_OK)
			bad |= 4;
		free(der);
		der = NULL;
		/* Without a password, LegacyRC2 is passwordless: no RC2 needed. */
		if (sg_certset_pkcs12(s, "", SG_CERTSET_P12_LEGACY_RC2, &der, &len) != SG_OK)
			bad |= 16;
		free(der);
		der = NULL;
		if (sg_certset_pkcs12(s, "x", SG_CERTSET_P12_MODERN_2023, &der, &len) != SG_OK)
			bad |= 8;
		free(der);
		sg_certset_free(s);
		tcert_free(&a);
		if (bad)
			fprintf(stderr, "child: failures 0x%x, last error: %s\n", bad, sg_error_last()->msg);
		_exit(bad);
	}
	int st = 0;
	SG_CHECK(waitpid(pid, &st, 0) == pid);
	SG_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Threads making their first stores at once: the library context is made
 * once (run under TSan). */
static void *p12_thread(void *arg)
{
	const char *pem = arg;
	sg_certset *s = NULL;
	int ok = sg_certset_new(&s, NULL) == SG_OK && add(s, pem) == SG_OK;
	for (int i = 0; ok && i < 3; i++) {
		uint8_t *der = NULL;
		size_t len = 0;
		ok = sg_certset_pkcs12(s, "changeit", (sg_certset_p12_profile)i, &der, &len) == SG_OK ||
		     (i == 0 && strstr(sg_error_last()->msg, "legacy provider") != NULL);
		free(der);
	}
	sg_certset_free(s);
	return ok ? arg : NULL;
}

static void t_pkcs12_threads(void)
{
	tcert a = ca_cert("threads", 1);
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		SG_CHECK(pthread_create(&th[i], NULL, p12_thread, a.pem) == 0);
	for (int i = 0; i < 4; i++) {
		void *r = NULL;
		SG_CHECK(pthread_join(th[i], &r) == 0);
		SG_CHECK(r == a.pem);
	}
	tcert_free(&a);
}

/* ---- JKS ---- */

typedef struct rd {
	const uint8_t *p;
	size_t len, off;
	bool bad;
} rd;

static uint64_t get_be(rd *r, unsigned n)
{
	uint64_t v = 0;
	if (n > r->len - r->off) {
		r->bad = true;
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		v = (v << 8) | r->p[r->off++];
	return v;
}

static const uint8_t *get_bytes(rd *r, size_t n)
{
	if (n > r->len - r->off) {
		r->bad = true;
		return NULL;
	}
	r->off += n;
	return r->p + r->off - n;
}

static int by_jks_alias(const void *a, const void *b)
{
	char *x = tm_alias(*(const tcert *const *)a, true), *y = tm_alias(*(const tcert *const *)b, true);
	int c = strcmp(x, y);
	free(x);
	free(y);
	return c;
}

/* The entries in the order of their (lower-case) aliases, each stamped
 * with its certificate's notBefore (every certificate here: not_before). */
static void check_jks(const uint8_t *jks, size_t len, const uint8_t *pw_utf16, size_t pw_len, int64_t not_before,
                      tcert **by_hash_order, size_t n)
{
	tcert *certs[8];
	memcpy(certs, by_hash_order, n * sizeof(*certs));
	qsort(certs, n, sizeof(*certs), by_jks_alias);
	rd r = {jks, len, 0, false};
	SG_CHECK(get_be(&r, 4) == 0xfeedfeed);
	SG_CHECK(get_be(&r, 4) == 2);
	SG_CHECK(get_be(&r, 4) == n);
	for (size_t i = 0; i < n && !r.bad; i++) {
		SG_CHECK(get_be(&r, 4) == 2); /* trusted certificate entry */
		size_t alen = (size_t)get_be(&r, 2);
		const uint8_t *alias = get_bytes(&r, alen);
		char *want = tm_alias(certs[i], true);
		SG_CHECK(alias && alen == strlen(want) && memcmp(alias, want, alen) == 0);
		free(want);
		SG_CHECK(get_be(&r, 8) == (uint64_t)(not_before * 1000));
		size_t tlen = (size_t)get_be(&r, 2);
		const uint8_t *type = get_bytes(&r, tlen);
		SG_CHECK(type && tlen == 4 && memcmp(type, "X509", 4) == 0);
		size_t clen = (size_t)get_be(&r, 4);
		const uint8_t *der = get_bytes(&r, clen);
		SG_CHECK(der && clen == certs[i]->len && memcmp(der, certs[i]->der, clen) == 0);
	}
	SG_CHECK(!r.bad && r.len - r.off == 20);
	if (r.bad || r.len - r.off != 20)
		return;
	uint8_t md[20];
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	SG_CHECK(c && EVP_DigestInit_ex(c, EVP_sha1(), NULL) == 1 && EVP_DigestUpdate(c, pw_utf16, pw_len) == 1 &&
	         EVP_DigestUpdate(c, "Mighty Aphrodite", 16) == 1 && EVP_DigestUpdate(c, jks, r.off) == 1 &&
	         EVP_DigestFinal_ex(c, md, NULL) == 1);
	EVP_MD_CTX_free(c);
	SG_CHECK(memcmp(md, jks + r.off, 20) == 0);
}

static void t_jks(void)
{
	tcert c[3] = {ca_cert("jks-a", 1), ca_cert("jks-b", 2), make_cert("jks-leaf", 3, T_2020, T_2030, BC_NONE)};
	tcert *order[3];
	sorted_certs(c, 3, order);
	sg_certset *s = new_set(NULL);
	char *all = fmt("%s%s%s", c[2].pem, c[0].pem, c[1].pem);
	SG_CHECK_OK(add(s, all));

	/* "changeit" */
	static const uint8_t changeit[] = {0, 'c', 0, 'h', 0, 'a', 0, 'n', 0, 'g', 0, 'e', 0, 'i', 0, 't'};
	uint8_t *jks = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_certset_jks(s, "changeit", &jks, &len));
	check_jks(jks, len, changeit, sizeof(changeit), T_2020, order, 3);
	char *path = fmt("%s/certset-%d.jks", tmp_dir(), (int)getpid());
	SG_CHECK(write_file(path, jks, len));
	check_keytool(path, "JKS", "changeit", order, 3);
	if (have_tool("keytool")) { /* the digest is what Java checks the password with */
		char *cmd = fmt("keytool -list -keystore '%s' -storetype JKS -storepass changeiT", path);
		int st;
		char *out = run(cmd, &st);
		SG_CHECK(st != 0 && strstr(out, "password was incorrect") != NULL);
		free(out);
		free(cmd);
	}
	unlink(path);
	free(path);
	/* Deterministic. */
	uint8_t *again = NULL;
	size_t alen = 0;
	SG_CHECK_OK(sg_certset_jks(s, "changeit", &again, &alen));
	SG_CHECK(alen == len && memcmp(again, jks, len) == 0);
	free(again);
	free(jks);

	/* "" and "ä€𝄞" (U+00E4, U+20AC, U+1D11E as a surrogate pair). */
	jks = NULL;
	SG_CHECK_OK(sg_certset_jks(s, "", &jks, &len));
	check_jks(jks, len, NULL, 0, T_2020, order, 3);
	free(jks);
	static const uint8_t intl[] = {0x00, 0xe4, 0x20, 0xac, 0xd8, 0x34, 0xdd, 0x1e};
	jks = NULL;
	SG_CHECK_OK(sg_certset_jks(s, "\xc3\xa4\xe2\x82\xac\xf0\x9d\x84\x9e", &jks, &len));
	check_jks(jks, len, intl, sizeof(intl), T_2020, order, 3);
	free(jks);
	/* A notBefore before 1970 is a negative creation time. */
	tcert old = make_cert("jks-old", 4, -86400, T_2030, BC_TRUE);
	sg_certset *os = new_set(NULL);
	SG_CHECK_OK(add(os, old.pem));
	tcert *one[1] = {&old};
	jks = NULL;
	SG_CHECK_OK(sg_certset_jks(os, "changeit", &jks, &len));
	check_jks(jks, len, changeit, sizeof(changeit), -86400, one, 1);
	free(jks);
	sg_certset_free(os);
	tcert_free(&old);

	/* Refusals. */
	jks = (uint8_t *)"x";
	len = 1;
	SG_CHECK_RC(sg_certset_jks(s, "\xc3\x28", &jks, &len), SG_EINVAL);
	SG_CHECK_MSG("not UTF-8");
	SG_CHECK(jks == NULL && len == 0);
	SG_CHECK_RC(sg_certset_jks(s, "\xed\xa0\x80", &jks, &len), SG_EINVAL); /* a UTF-8 surrogate */
	SG_CHECK_RC(sg_certset_jks(s, NULL, &jks, &len), SG_EINVAL);
	free(all);
	sg_certset_free(s);
	for (int i = 0; i < 3; i++)
		tcert_free(&c[i]);
}

/* ---- trust-manager's own bytes ---- */

#ifndef SIGNET_TEST_DATA
#error "SIGNET_TEST_DATA (tests/signer/data) must be defined"
#endif
#define TM_DATA SIGNET_TEST_DATA "/trust-manager/"

static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	SG_CHECK(f != NULL);
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0, got;
	uint8_t *p = malloc(cap + 1);
	while (p && (got = fread(p + n, 1, cap - n, f)) > 0)
		if ((n += got) == cap && !(p = realloc(p, (cap *= 2) + 1)))
			break;
	fclose(f);
	SG_CHECK(p != NULL);
	if (p)
		p[n] = 0;
	*len = n;
	return p;
}

static bool same_bytes(const char *what, const uint8_t *have, size_t hlen, const uint8_t *want, size_t wlen)
{
	bool same = have && want && hlen == wlen && memcmp(have, want, wlen) == 0;
	if (!same) {
		size_t at = 0;
		while (have && want && at < hlen && at < wlen && have[at] == want[at])
			at++;
		fprintf(stderr, "  %s: %zu bytes, trust-manager's %zu; first difference at byte %zu\n", what, hlen,
		        wlen, at);
	}
	return same;
}

/* The stores of data/trust-manager/certs.pem are trust-manager's, byte for
 * byte (README.md there says how those were made): the passwordless
 * PKCS#12 store whatever the profile (aliases with every rule of Go's
 * subject text, BMPString and T61String values, escapes, #hex), and the
 * JKS store (lower-case aliases in their order, notBefore as creation
 * time, one of them before 1970). Then OpenSSL without its legacy
 * provider and Java's keytool read them, and a subject beyond the BMP is
 * refused in PKCS#12 as go-pkcs12 refuses it. */
static void t_trust_manager_stores(void)
{
	size_t plen = 0, p12_len = 0, jks_len = 0;
	char *pem = (char *)read_all(TM_DATA "certs.pem", &plen);
	uint8_t *want_p12 = read_all(TM_DATA "passwordless.p12", &p12_len);
	uint8_t *want_jks = read_all(TM_DATA "changeit.jks", &jks_len);
	sg_certset *s = new_set(NULL);
	SG_CHECK_OK(sg_certset_add_pem(s, pem, plen));
	SG_CHECK(sg_certset_count(s) == 4);
	for (int pr = 0; pr < 3; pr++) {
		uint8_t *p12 = NULL;
		size_t len = 0;
		SG_CHECK_OK(sg_certset_pkcs12(s, "", (sg_certset_p12_profile)pr, &p12, &len));
		SG_CHECK(same_bytes("passwordless PKCS#12", p12, len, want_p12, p12_len));
		if (pr == 0) {
			char *path = fmt("%s/certset-tm-%d.p12", tmp_dir(), (int)getpid());
			SG_CHECK(write_file(path, p12, len));
			if (have_tool("openssl")) {
				char *cmd =
				    fmt("OPENSSL_MODULES=/nonexistent-signet-test openssl pkcs12 -in '%s' -nokeys "
				        "-passin pass:",
				        path);
				int st;
				char *out = run(cmd, &st);
				SG_CHECK(st == 0 && count_of(out, "-----BEGIN CERTIFICATE-----") == 4);
				SG_CHECK(strstr(out, "friendlyName: 5058e74b|CN=Old CA 1965") != NULL);
				if (st != 0)
					fprintf(stderr, "%s\n%s\n", cmd, out);
				free(out);
				free(cmd);
			}
			if (have_tool("keytool")) {
				char *cmd = fmt("keytool -list -keystore '%s' -storetype PKCS12 </dev/null", path);
				int st;
				char *out = run(cmd, &st);
				SG_CHECK(st == 0 && strstr(out, "Your keystore contains 4 entries") != NULL &&
				         count_of(out, "trustedCertEntry") == 4);
				if (st != 0)
					fprintf(stderr, "%s\n%s\n", cmd, out);
				free(out);
				free(cmd);
			}
			unlink(path);
			free(path);
		}
		free(p12);
	}
	uint8_t *jks = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_certset_jks(s, "changeit", &jks, &len));
	SG_CHECK(same_bytes("JKS", jks, len, want_jks, jks_len));
	if (have_tool("keytool")) {
		char *path = fmt("%s/certset-tm-%d.jks", tmp_dir(), (int)getpid());
		SG_CHECK(write_file(path, jks, len));
		char *cmd = fmt("keytool -list -keystore '%s' -storetype JKS -storepass changeit", path);
		int st;
		char *out = run(cmd, &st);
		SG_CHECK(st == 0 && strstr(out, "Your keystore contains 4 entries") != NULL &&
		         strstr(out, "5058e74b|cn=old ca 1965, Jan 1, 1965, trustedCertEntry") != NULL);
		if (st != 0)
			fprintf(stderr, "%s\n%s\n", cmd, out);
		free(out);
		free(cmd);
		unlink(path);
		free(path);
	}
	free(jks);
	sg_certset_free(s);

	/* A character beyond the BMP: no PKCS#12 (go-pkcs12's refusal), JKS
	 * as usual. */
	char *nb = (char *)read_all(TM_DATA "non-bmp.pem", &plen);
	s = new_set(NULL);
	SG_CHECK_OK(sg_certset_add_pem(s, nb, plen));
	uint8_t *out = (uint8_t *)"x";
	SG_CHECK_RC(sg_certset_pkcs12(s, "", SG_CERTSET_P12_MODERN_2023, &out, &len), SG_EINVAL);
	SG_CHECK_MSG("cannot be encoded in UCS-2");
	SG_CHECK(out == NULL);
	SG_CHECK_OK(sg_certset_jks(s, "changeit", &out, &len));
	free(out);
	sg_certset_free(s);
	free(nb);
	free(pem);
	free(want_p12);
	free(want_jks);
}

SG_TEST_MAIN(SG_TEST(t_pkcs12_no_legacy), SG_TEST(t_empty), SG_TEST(t_dedupe), SG_TEST(t_order_independent),
             SG_TEST(t_pem_layout), SG_TEST(t_errors), SG_TEST(t_set_limit), SG_TEST(t_filters),
             SG_TEST(t_p12_profile_parse), SG_TEST(t_pkcs12_threads), SG_TEST(t_pkcs12_legacy_rc2),
             SG_TEST(t_pkcs12_legacy_des), SG_TEST(t_pkcs12_modern), SG_TEST(t_jks), SG_TEST(t_trust_manager_stores))
