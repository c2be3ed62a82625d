/*
 * Tests for sg_x509 (PEM bundles, facts, names, chains, private keys),
 * against certificates that OpenSSL's own builder makes here, so what is
 * under test did not write its input. Hostile cases: garbage, NUL bytes,
 * over-limit text, DER with trailing bytes, encrypted keys, and names that
 * are almost right.
 */
#include "key_fixture.h"
#include "sg_test.h"
#include "sg_x509.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define T_2023 1700000000  /* 2023-11-14T22:13:20Z: UTCTime */
#define T_2100 4102444800u /* 2100-01-01T00:00:00Z: GeneralizedTime */

typedef struct cert_spec {
	EVP_PKEY *key;        /* the subject's */
	const char *cn;       /* NULL: no subject CN */
	const char *san;      /* X509v3 config text, e.g. "DNS:a,URI:b"; NULL: no SAN */
	bool ca;              /* basicConstraints CA:TRUE */
	int64_t not_before;   /* absolute; 0: an hour ago */
	int64_t not_after;    /* absolute; 0: a day from now */
	const uint8_t *serial; /* big-endian magnitude; NULL: 1 */
	size_t serial_len;
	bool negative;
	X509 *issuer;         /* NULL: self-signed */
	EVP_PKEY *issuer_key;
} cert_spec;

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!e || X509_add_ext(x, e, -1) != 1)
		abort();
	X509_EXTENSION_free(e);
}

static X509 *make_cert(const cert_spec *s)
{
	X509 *x = X509_new();
	time_t now = time(NULL);
	BIGNUM *bn = s->serial ? BN_bin2bn(s->serial, (int)s->serial_len, NULL) : BN_new();
	if (!x || !bn || (!s->serial && !BN_set_word(bn, 1)))
		abort();
	BN_set_negative(bn, s->negative);
	X509_set_version(x, 2);
	if (!BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)))
		abort();
	BN_free(bn);
	ASN1_TIME_set(X509_getm_notBefore(x), (time_t)(s->not_before ? s->not_before : now - 3600));
	ASN1_TIME_set(X509_getm_notAfter(x), (time_t)(s->not_after ? s->not_after : now + 86400));
	X509_NAME *n = X509_get_subject_name(x);
	if (s->cn)
		X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)s->cn, -1, -1, 0);
	else
		X509_NAME_add_entry_by_txt(n, "O", MBSTRING_UTF8, (const unsigned char *)"signet tests", -1, -1, 0);
	X509_set_issuer_name(x, s->issuer ? X509_get_subject_name(s->issuer) : n);
	X509_set_pubkey(x, s->key);
	if (s->ca)
		add_ext(x, s->issuer, NID_basic_constraints, "critical,CA:TRUE");
	/* Key identifiers, as real CAs write them: what tells two roots of
	 * one name (a rotation) apart. */
	add_ext(x, s->issuer, NID_subject_key_identifier, "hash");
	if (s->issuer)
		add_ext(x, s->issuer, NID_authority_key_identifier, "keyid:always");
	if (s->san)
		add_ext(x, s->issuer, NID_subject_alt_name, s->san);
	EVP_PKEY *signer = s->issuer_key ? s->issuer_key : s->key;
	bool raw = EVP_PKEY_is_a(signer, "ED25519");
	if (X509_sign(x, signer, raw ? NULL : EVP_sha256()) <= 0)
		abort();
	return x;
}

/* What was written to the memory BIO b, as a string; frees b. */
static char *text_of(BIO *b, bool ok)
{
	char *p;
	long len = BIO_get_mem_data(b, &p);
	char *out = ok && len >= 0 ? strndup(p, (size_t)len) : NULL;
	BIO_free(b);
	if (!out)
		abort();
	return out;
}

/* The certificates as PEM, in order, with `between` written before each. */
static char *pem_of(X509 *const *certs, size_t n, const char *between)
{
	BIO *b = BIO_new(BIO_s_mem());
	bool ok = b != NULL;
	for (size_t i = 0; ok && i < n; i++)
		ok = (!between || BIO_puts(b, between) > 0) && PEM_write_bio_X509(b, certs[i]) == 1;
	return text_of(b, ok);
}

static char *key_pem(EVP_PKEY *k, bool traditional, const char *pass)
{
	BIO *b = BIO_new(BIO_s_mem());
	int ok = traditional ? PEM_write_bio_PrivateKey_traditional(b, k, NULL, NULL, 0, NULL, NULL)
	         : pass       ? PEM_write_bio_PrivateKey(b, k, EVP_aes_128_cbc(), (const unsigned char *)pass,
	                                                 (int)strlen(pass), NULL, NULL)
	                      : PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
	return text_of(b, ok == 1);
}

static sg_x509_bundle *parse_ok(const char *pem)
{
	sg_x509_bundle *b = NULL;
	SG_CHECK_OK(sg_x509_bundle_parse(&b, pem, strlen(pem)));
	if (!b)
		abort();
	return b;
}

/* A failure leaves nothing in OpenSSL's error queue. */
#define CHECK_DRAINED() SG_CHECK(ERR_peek_error() == 0)

static sg_x509_bundle *bundle_of(X509 *x)
{
	char *pem = pem_of(&x, 1, NULL);
	sg_x509_bundle *b = parse_ok(pem);
	free(pem);
	return b;
}

/* ---- parsing ---- */

static void t_bundle_multi(void)
{
	cert_spec rs = {.key = key_of("P-384"), .cn = "root", .ca = true};
	X509 *root = make_cert(&rs);
	cert_spec is = {.key = key_of("rsa2048"), .cn = "intermediate", .ca = true, .issuer = root,
	                .issuer_key = key_of("P-384")};
	X509 *inter = make_cert(&is);
	cert_spec ls = {.key = key_of("P-256"), .cn = "leaf", .san = "DNS:a.example", .issuer = inter,
	                .issuer_key = key_of("rsa2048"), .not_before = T_2023, .not_after = T_2100};
	X509 *leaf = make_cert(&ls);
	X509 *all[] = {leaf, inter, root};
	/* Explanatory text before each block (RFC 7468 §5.2), CRLF-free. */
	char *pem = pem_of(all, 3, "subject=whatever\n# a comment\n");
	sg_x509_bundle *b = parse_ok(pem);
	SG_CHECK(sg_x509_bundle_count(b) == 3);
	sg_x509_facts f;
	SG_CHECK_OK(sg_x509_get_facts(b, 0, &f));
	SG_CHECK(f.not_before == T_2023 && f.not_after == (int64_t)T_2100);
	SG_CHECK(!f.is_ca && strcmp(f.serial, "01") == 0);
	SG_CHECK_OK(sg_x509_get_facts(b, 1, &f));
	SG_CHECK(f.is_ca);
	SG_CHECK_OK(sg_x509_get_facts(b, 2, &f));
	SG_CHECK(f.is_ca);
	SG_CHECK_RC(sg_x509_get_facts(b, 3, &f), SG_EINVAL);
	SG_CHECK_MSG("no certificate 3 in a bundle of 3");
	sg_x509_bundle_free(b);

	/* Other kinds of block are skipped; a key block in a chain file is
	 * not a certificate. */
	char *k = key_pem(key_of("P-256"), false, NULL);
	size_t n = strlen(k) + strlen(pem) + 1;
	char *mixed = malloc(n);
	snprintf(mixed, n, "%s%s", k, pem);
	b = parse_ok(mixed);
	SG_CHECK(sg_x509_bundle_count(b) == 3);
	sg_x509_bundle_free(b);
	free(mixed);
	free(k);
	free(pem);
	sg_x509_bundle_free(NULL);
	SG_CHECK(sg_x509_bundle_count(NULL) == 0);
	X509_free(leaf);
	X509_free(inter);
	X509_free(root);
}

static void t_bundle_garbage(void)
{
	static const struct {
		const char *text;
		const char *msg;
	} bad[] = {
	    {"hello", "holds no PEM certificate"},
	    {"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
	     "-----END PUBLIC KEY-----\n",
	     "holds no PEM certificate"},
	    {"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "not exactly one DER certificate"},
	    {"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "malformed"},
	    {"-----BEGIN CERTIFICATE-----\nMIIB\n", "malformed"},
	    {"-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n"
	     "DEK-Info: AES-128-CBC,00000000000000000000000000000000\n\nAAAA\n-----END CERTIFICATE-----\n",
	     "malformed"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_x509_bundle *b = (sg_x509_bundle *)1;
		SG_CHECK_RC(sg_x509_bundle_parse(&b, bad[i].text, strlen(bad[i].text)), SG_EINVAL);
		SG_CHECK_MSG(bad[i].msg);
		SG_CHECK(b == NULL);
		CHECK_DRAINED();
	}
	sg_x509_bundle *b = NULL;
	SG_CHECK_RC(sg_x509_bundle_parse(&b, "", 0), SG_EINVAL);
	SG_CHECK_RC(sg_x509_bundle_parse(&b, NULL, 0), SG_EINVAL);

	/* A good certificate, then a broken one: the whole text is refused,
	 * not cut short. */
	cert_spec s = {.key = key_of("P-256"), .cn = "x"};
	X509 *x = make_cert(&s);
	char *good = pem_of(&x, 1, NULL);
	size_t n = 2 * strlen(good) + 64;
	char *text = malloc(n);
	snprintf(text, n, "%s-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", good);
	SG_CHECK_RC(sg_x509_bundle_parse(&b, text, strlen(text)), SG_EINVAL);
	SG_CHECK_MSG("PEM certificate number 2");
	CHECK_DRAINED();

	/* The DER of a good certificate with two bytes after it. */
	unsigned char *der = NULL;
	int dlen = i2d_X509(x, &der);
	unsigned char *longer = malloc((size_t)dlen + 2);
	memcpy(longer, der, (size_t)dlen);
	longer[dlen] = 0x05;
	longer[dlen + 1] = 0x00;
	BIO *bio = BIO_new(BIO_s_mem());
	PEM_write_bio(bio, "CERTIFICATE", "", longer, dlen + 2);
	char *p;
	long plen = BIO_get_mem_data(bio, &p);
	SG_CHECK_RC(sg_x509_bundle_parse(&b, p, (size_t)plen), SG_EINVAL);
	SG_CHECK_MSG("not exactly one DER certificate");
	CHECK_DRAINED();
	BIO_free(bio);
	free(longer);
	OPENSSL_free(der);
	free(text);
	free(good);
	X509_free(x);
}

static void t_bundle_nul_and_limits(void)
{
	cert_spec s = {.key = key_of("P-256"), .cn = "x"};
	X509 *x = make_cert(&s);
	char *pem = pem_of(&x, 1, NULL);
	size_t n = strlen(pem);
	sg_x509_bundle *b = NULL;

	/* A NUL anywhere: after the block (where a C string would end), or
	 * inside it. */
	char *with_nul = malloc(n + 8);
	memcpy(with_nul, pem, n);
	memcpy(with_nul + n, "\0junk", 5);
	SG_CHECK_RC(sg_x509_bundle_parse(&b, with_nul, n + 5), SG_EINVAL);
	SG_CHECK_MSG("NUL byte");
	with_nul[40] = '\0';
	SG_CHECK_RC(sg_x509_bundle_parse(&b, with_nul, n), SG_EINVAL);
	SG_CHECK_MSG("NUL byte");
	free(with_nul);

	/* One byte over the limit, refused before it is looked at. */
	char *big = malloc(SG_X509_PEM_MAX + 1);
	memset(big, 'A', SG_X509_PEM_MAX + 1);
	memcpy(big, pem, n);
	SG_CHECK_RC(sg_x509_bundle_parse(&b, big, SG_X509_PEM_MAX + 1), SG_EINVAL);
	SG_CHECK_MSG("more than");
	free(big);

	/* SG_X509_BUNDLE_MAX certificates parse; one more block does not. */
	size_t cap = (SG_X509_BUNDLE_MAX + 1) * n + 1;
	char *many = malloc(cap);
	many[0] = 0;
	for (size_t i = 0; i < SG_X509_BUNDLE_MAX; i++)
		memcpy(many + i * n, pem, n + 1);
	SG_CHECK_OK(sg_x509_bundle_parse(&b, many, strlen(many)));
	SG_CHECK(sg_x509_bundle_count(b) == SG_X509_BUNDLE_MAX);
	sg_x509_bundle_free(b);
	b = NULL;
	memcpy(many + SG_X509_BUNDLE_MAX * n, "-----BEGIN X-----\n", 19);
	SG_CHECK_RC(sg_x509_bundle_parse(&b, many, strlen(many)), SG_EINVAL);
	SG_CHECK_MSG("257 PEM blocks, more than 256");
	free(many);
	free(pem);
	X509_free(x);
}

/* ---- facts ---- */

static void check_serial(const uint8_t *bytes, size_t len, bool negative, const char *want)
{
	cert_spec s = {.key = key_of("P-256"), .cn = "x", .serial = bytes, .serial_len = len, .negative = negative};
	X509 *x = make_cert(&s);
	sg_x509_bundle *b = bundle_of(x);
	sg_x509_facts f;
	if (want) {
		SG_CHECK_OK(sg_x509_get_facts(b, 0, &f));
		SG_CHECK(strcmp(f.serial, want) == 0);
		if (strcmp(f.serial, want) != 0)
			fprintf(stderr, "serial %s, want %s\n", f.serial, want);
	} else {
		SG_CHECK_RC(sg_x509_get_facts(b, 0, &f), SG_EINVAL);
		SG_CHECK_MSG("more than 20");
		CHECK_DRAINED();
	}
	sg_x509_bundle_free(b);
	X509_free(x);
}

static void t_facts(void)
{
	static const uint8_t zero[] = {0}, ten[] = {0x0a}, wide[] = {0xde, 0xad, 0x00, 0xBE, 0xEF};
	uint8_t twenty[20], twentyone[21];
	memset(twenty, 0xab, sizeof(twenty));
	memset(twentyone, 0x7f, sizeof(twentyone));
	check_serial(zero, 1, false, "0");
	check_serial(ten, 1, false, "0a"); /* whole bytes, as BN_bn2hex */
	check_serial(wide, sizeof(wide), false, "dead00beef");
	check_serial(ten, 1, true, "-0a");
	check_serial(twenty, sizeof(twenty), false, "abababababababababababababababababababab");
	check_serial(twentyone, sizeof(twentyone), false, NULL);

	/* Validity before 1970 and in GeneralizedTime. */
	cert_spec s = {.key = key_of("P-256"), .cn = "old", .not_before = -86400, .not_after = T_2100, .ca = true};
	X509 *x = make_cert(&s);
	sg_x509_bundle *b = bundle_of(x);
	sg_x509_facts f;
	SG_CHECK_OK(sg_x509_get_facts(b, 0, &f));
	SG_CHECK(f.not_before == -86400 && f.not_after == (int64_t)T_2100 && f.is_ca);
	sg_x509_bundle_free(b);
	X509_free(x);
}

/* ---- names ---- */

static bool names(const char *san, const char *subject_cn, const char *cn, const char *const *dns, size_t ndns,
                  const char *uri)
{
	cert_spec s = {.key = key_of("P-256"), .cn = subject_cn, .san = san};
	X509 *x = make_cert(&s);
	sg_x509_bundle *b = bundle_of(x);
	bool ok = sg_x509_names_are(b, 0, cn, dns, ndns, uri);
	sg_x509_bundle_free(b);
	X509_free(x);
	return ok;
}

static void t_names(void)
{
	const char *dns[] = {"istiod.istio-system.svc", "istiod.istio-system"};
	const char *uri = "spiffe://cluster.local/ns/istio-system/sa/istiod";
	const char *both = "DNS:istiod.istio-system.svc,DNS:istiod.istio-system,"
	                   "URI:spiffe://cluster.local/ns/istio-system/sa/istiod";
	/* Exact, in either order, with or without the CN asked for. */
	SG_CHECK(names(both, "istiod", "istiod", dns, 2, uri));
	SG_CHECK(names("URI:spiffe://cluster.local/ns/istio-system/sa/istiod,DNS:istiod.istio-system,"
	               "DNS:istiod.istio-system.svc",
	               "istiod", "istiod", dns, 2, uri));
	SG_CHECK(names(both, NULL, NULL, dns, 2, uri));
	SG_CHECK(names(both, "other", NULL, dns, 2, uri));
	/* The CN: different, a prefix, absent, different case. */
	SG_CHECK(!names(both, "istiod2", "istiod", dns, 2, uri));
	SG_CHECK(!names(both, "istio", "istiod", dns, 2, uri));
	SG_CHECK(!names(both, NULL, "istiod", dns, 2, uri));
	SG_CHECK(!names(both, "ISTIOD", "istiod", dns, 2, uri));
	/* Extra, missing and repeated DNS names. */
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system,DNS:evil.example,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod",
	                NULL, NULL, dns, 2, uri));
	SG_CHECK(!names("DNS:istiod.istio-system.svc,URI:spiffe://cluster.local/ns/istio-system/sa/istiod", NULL, NULL,
	                dns, 2, uri));
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system.svc,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod",
	                NULL, NULL, dns, 2, uri));
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system.svc,DNS:istiod.istio-system,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod",
	                NULL, NULL, dns, 2, uri));
	SG_CHECK(!names("DNS:ISTIOD.istio-system.svc,DNS:istiod.istio-system,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod",
	                NULL, NULL, dns, 2, uri));
	/* A list with a repeat needs the certificate to repeat it. */
	const char *twice[] = {"a.example", "a.example"};
	SG_CHECK(!names("DNS:a.example,DNS:b.example", NULL, NULL, twice, 2, NULL));
	SG_CHECK(names("DNS:a.example,DNS:a.example", NULL, NULL, twice, 2, NULL));
	/* The URI: missing, two of them, another one, one not asked for. */
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system", NULL, NULL, dns, 2, uri));
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod",
	                NULL, NULL, dns, 2, uri));
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system,URI:spiffe://evil/ns/a/sa/b", NULL, NULL,
	                dns, 2, uri));
	SG_CHECK(!names(both, NULL, NULL, dns, 2, NULL));
	SG_CHECK(names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system", NULL, NULL, dns, 2, NULL));
	/* Names of other types are never "exactly these". */
	SG_CHECK(!names("DNS:istiod.istio-system.svc,DNS:istiod.istio-system,IP:10.0.0.1,"
	                "URI:spiffe://cluster.local/ns/istio-system/sa/istiod",
	                NULL, NULL, dns, 2, uri));
	SG_CHECK(!names("email:a@example.com", NULL, NULL, NULL, 0, NULL));
	/* No subjectAltName: right only when no names are asked for. */
	SG_CHECK(names(NULL, "x", "x", NULL, 0, NULL));
	SG_CHECK(!names(NULL, "x", "x", dns, 1, NULL));
	SG_CHECK(!names(NULL, "x", "x", NULL, 0, uri));
	/* Out of range. */
	SG_CHECK(!sg_x509_names_are(NULL, 0, NULL, NULL, 0, NULL));
	CHECK_DRAINED();
}

/* ---- chains ---- */

typedef struct pki {
	X509 *root, *inter, *leaf;
} pki;

static pki make_pki(int64_t leaf_not_before, int64_t leaf_not_after)
{
	pki p;
	cert_spec rs = {.key = key_of("P-384"), .cn = "root", .ca = true};
	p.root = make_cert(&rs);
	cert_spec is = {.key = key_of("rsa2048"), .cn = "inter", .ca = true, .issuer = p.root,
	                .issuer_key = key_of("P-384")};
	p.inter = make_cert(&is);
	cert_spec ls = {.key = key_of("P-256"), .cn = "leaf", .issuer = p.inter, .issuer_key = key_of("rsa2048"),
	                .not_before = leaf_not_before, .not_after = leaf_not_after};
	p.leaf = make_cert(&ls);
	return p;
}

static void pki_free(pki *p)
{
	X509_free(p->root);
	X509_free(p->inter);
	X509_free(p->leaf);
}

static sg_x509_bundle *bundle_list(X509 *a, X509 *b)
{
	X509 *all[] = {a, b};
	char *pem = pem_of(all, b ? 2 : 1, NULL);
	sg_x509_bundle *out = parse_ok(pem);
	free(pem);
	return out;
}

static void t_chains(void)
{
	pki p = make_pki(0, 0);
	cert_spec os = {.key = key_of("prime256v1"), .cn = "root", .ca = true}; /* same name, other key */
	X509 *other = make_cert(&os);
	sg_x509_bundle *chain = bundle_list(p.leaf, p.inter);
	sg_x509_bundle *leaf_only = bundle_list(p.leaf, NULL);
	sg_x509_bundle *roots = bundle_list(p.root, NULL);
	sg_x509_bundle *both_roots = bundle_list(other, p.root);
	sg_x509_bundle *wrong = bundle_list(other, NULL);
	SG_CHECK(sg_x509_chains_to(chain, roots));
	SG_CHECK(sg_x509_chains_to(chain, both_roots)); /* a rotation: old and new root */
	SG_CHECK(!sg_x509_chains_to(leaf_only, roots)); /* intermediate missing */
	SG_CHECK(!sg_x509_chains_to(chain, wrong));
	SG_CHECK(!sg_x509_chains_to(roots, chain)); /* a root is not trusted because a chain names it */
	SG_CHECK(!sg_x509_chains_to(NULL, roots));
	SG_CHECK(!sg_x509_chains_to(chain, NULL));
	/* At a given time: now, and long after every certificate expired. */
	SG_CHECK(sg_x509_chains_to_at(chain, roots, (int64_t)time(NULL)));
	SG_CHECK(!sg_x509_chains_to_at(chain, roots, (int64_t)time(NULL) + 200LL * 365 * 86400));
	SG_CHECK(!sg_x509_chains_to_at(chain, wrong, (int64_t)time(NULL)));
	/* An intermediate as the anchor (istiod's per-signer roots): refused
	 * as a root, trusted as an anchor, and never for itself. */
	sg_x509_bundle *inter = bundle_list(p.inter, NULL);
	int64_t t = (int64_t)time(NULL);
	SG_CHECK(!sg_x509_chains_to_at(leaf_only, inter, t));
	SG_CHECK(sg_x509_chains_to_anchors_at(leaf_only, inter, t));
	SG_CHECK(sg_x509_chains_to_anchors_at(chain, roots, t)); /* a root is an anchor too */
	SG_CHECK(!sg_x509_chains_to_anchors_at(leaf_only, roots, t));
	SG_CHECK(!sg_x509_chains_to_anchors_at(inter, inter, t));
	SG_CHECK(!sg_x509_chains_to_anchors_at(leaf_only, wrong, t));
	SG_CHECK(!sg_x509_chains_to_anchors_at(leaf_only, inter, t + 200LL * 365 * 86400));
	sg_x509_bundle_free(inter);
	SG_CHECK(sg_x509_holds(both_roots, roots, 0));
	SG_CHECK(sg_x509_holds(both_roots, wrong, 0));
	SG_CHECK(!sg_x509_holds(roots, wrong, 0)); /* the same name, another certificate */
	SG_CHECK(!sg_x509_holds(roots, roots, 1));
	SG_CHECK(!sg_x509_holds(NULL, roots, 0));
	CHECK_DRAINED();
	sg_x509_bundle_free(chain);

	/* Expired, and not yet valid. */
	pki_free(&p);
	time_t now = time(NULL);
	p = make_pki(now - 7200, now - 3600);
	chain = bundle_list(p.leaf, p.inter);
	sg_x509_bundle_free(roots);
	roots = bundle_list(p.root, NULL);
	SG_CHECK(!sg_x509_chains_to(chain, roots));
	sg_x509_bundle_free(chain);
	pki_free(&p);
	p = make_pki(now + 3600, now + 7200);
	chain = bundle_list(p.leaf, p.inter);
	sg_x509_bundle_free(roots);
	roots = bundle_list(p.root, NULL);
	SG_CHECK(!sg_x509_chains_to(chain, roots));
	CHECK_DRAINED();

	sg_x509_bundle_free(chain);
	sg_x509_bundle_free(leaf_only);
	sg_x509_bundle_free(roots);
	sg_x509_bundle_free(both_roots);
	sg_x509_bundle_free(wrong);
	X509_free(other);
	pki_free(&p);
}

/* ---- private keys ---- */

static int key_check(const char *cert_kind, const char *key_kind, bool traditional, const char *pass,
                     sg_x509_keyinfo *ki)
{
	cert_spec s = {.key = key_of(cert_kind), .cn = "k"};
	X509 *x = make_cert(&s);
	sg_x509_bundle *b = bundle_of(x);
	char *k = key_pem(key_of(key_kind), traditional, pass);
	int rc = sg_x509_key_check(b, 0, k, strlen(k), ki);
	free(k);
	sg_x509_bundle_free(b);
	X509_free(x);
	return rc;
}

static void t_key_check(void)
{
	sg_x509_keyinfo ki;
	SG_CHECK_OK(key_check("P-256", "P-256", false, NULL, &ki));
	SG_CHECK(ki.kind == SG_PUBKEY_EC && ki.bits == 256);
	SG_CHECK_OK(key_check("P-384", "P-384", true, NULL, &ki)); /* "EC PRIVATE KEY" */
	SG_CHECK(ki.kind == SG_PUBKEY_EC && ki.bits == 384);
	SG_CHECK_OK(key_check("rsa2048", "rsa2048", false, NULL, &ki));
	SG_CHECK(ki.kind == SG_PUBKEY_RSA && ki.bits == 2048);
	SG_CHECK_OK(key_check("rsa2048", "rsa2048", true, NULL, &ki)); /* "RSA PRIVATE KEY" */

	/* Another key of the same kind, a key of another kind. */
	SG_CHECK_RC(key_check("P-256", "prime256v1", false, NULL, &ki), SG_EINVAL);
	SG_CHECK_MSG("does not belong to certificate 0");
	CHECK_DRAINED();
	SG_CHECK_RC(key_check("P-256", "rsa2048", false, NULL, &ki), SG_EINVAL);
	SG_CHECK_MSG("does not belong");
	SG_CHECK_RC(key_check("rsa2048", "P-256", false, NULL, &ki), SG_EINVAL);
	CHECK_DRAINED();
	/* The right key of a kind we do not take. */
	SG_CHECK_RC(key_check("ed25519", "ed25519", false, NULL, &ki), SG_EINVAL);
	SG_CHECK_MSG("neither RSA nor EC");
	CHECK_DRAINED();
	/* Encrypted: refused, never prompted for. */
	SG_CHECK_RC(key_check("P-256", "P-256", false, "secret", &ki), SG_EINVAL);
	SG_CHECK_MSG("no unencrypted PEM private key");
	CHECK_DRAINED();

	cert_spec s = {.key = key_of("P-256"), .cn = "k"};
	X509 *x = make_cert(&s);
	sg_x509_bundle *b = bundle_of(x);
	char *k = key_pem(key_of("P-256"), false, NULL);
	size_t n = strlen(k);
	SG_CHECK_RC(sg_x509_key_check(b, 1, k, n, &ki), SG_EINVAL);
	SG_CHECK_MSG("no certificate 1");
	SG_CHECK_RC(sg_x509_key_check(b, 0, "garbage", 7, &ki), SG_EINVAL);
	SG_CHECK_MSG("no unencrypted PEM private key");
	CHECK_DRAINED();
	SG_CHECK_RC(sg_x509_key_check(b, 0, k, 0, &ki), SG_EINVAL);
	k[n / 2] = '\0';
	SG_CHECK_RC(sg_x509_key_check(b, 0, k, n, &ki), SG_EINVAL);
	SG_CHECK_MSG("NUL byte");
	SG_CHECK_RC(sg_x509_key_check(b, 0, k, SG_X509_PEM_MAX + 1, &ki), SG_EINVAL);
	SG_CHECK_MSG("more than");
	free(k);
	sg_x509_bundle_free(b);
	X509_free(x);
}

SG_TEST_MAIN(SG_TEST(t_bundle_multi), SG_TEST(t_bundle_garbage), SG_TEST(t_bundle_nul_and_limits),
             SG_TEST(t_facts), SG_TEST(t_names), SG_TEST(t_chains), SG_TEST(t_key_check))
