/*
 * Tests of sg_caclient (agent/sg_caclient.c).
 *
 * The checks of a CA's answer with answers built here (OpenSSL's own
 * certificate builder, not ours): good chains of two and three elements,
 * and one hostile variation per check, each refused with SG_EINVAL and a
 * message naming the check.
 *
 * Then real fetches from a real signetd (SIGNETD, SIGNETCTL: a CA made
 * with `signetctl init`, a development token from `signetctl token`):
 * EC PKCS#8 and RSA PKCS#1 keys, a wrong token, a token file rewritten
 * between calls, the root file replaced (garbage, another root, the right
 * one again), and signetd gone. signetd is killed at exit on every path.
 */
#include "sg_caclient.h"
#include "sg_istio.h"
#include "sg_softkey.h"
#include "sg_test.h"
#include "sg_x509.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ID "spiffe://cluster.local/ns/default/sa/sleep"

/* ---- certificates made here ------------------------------------------------ */

static char *key_pem_new(bool rsa, bool pkcs8)
{
	const char *uris[] = {ID};
	sg_softkey_request r = {
	    .type = rsa ? SG_SOFTKEY_RSA : SG_SOFTKEY_EC_P256, .rsa_bits = 2048, .uris = uris, .nuris = 1};
	char *key = NULL, *csr = NULL;
	if (sg_softkey_csr(&r, pkcs8, &key, &csr) != SG_OK) {
		fprintf(stderr, "sg_softkey_csr: %s\n", sg_error_last()->msg);
		exit(1);
	}
	free(csr);
	return key;
}

static EVP_PKEY *key_load(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	BIO_free(b);
	return k;
}

static EVP_PKEY *ec_new(void)
{
	return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!e || X509_add_ext(x, e, -1) != 1) {
		fprintf(stderr, "extension %d=%s failed\n", nid, value);
		exit(1);
	}
	X509_EXTENSION_free(e);
}

/* A certificate for key (its public part), issued by issuer/issuer_key or
 * self-signed (issuer NULL: signed by key), valid from now+from to now+to;
 * san is a subjectAltName value ("URI:...,DNS:...") or NULL. */
static X509 *cert_new(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key, bool ca, const char *san,
                      long from, long to)
{
	static long serial = 1000;
	X509 *x = X509_new();
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), ++serial);
	X509_gmtime_adj(X509_getm_notBefore(x), from);
	X509_gmtime_adj(X509_getm_notAfter(x), to);
	X509_NAME *n = X509_get_subject_name(x);
	if (cn)
		X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n);
	X509_set_pubkey(x, key);
	X509 *iss = issuer ? issuer : x;
	add_ext(x, iss, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
	add_ext(x, iss, NID_key_usage,
	        ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature,keyEncipherment");
	add_ext(x, iss, NID_subject_key_identifier, "hash");
	if (issuer)
		add_ext(x, iss, NID_authority_key_identifier, "keyid:always");
	if (!ca)
		add_ext(x, iss, NID_ext_key_usage, "serverAuth,clientAuth");
	if (san)
		add_ext(x, iss, NID_subject_alt_name, san);
	if (X509_sign(x, issuer ? issuer_key : key, EVP_sha256()) <= 0) {
		fprintf(stderr, "X509_sign failed\n");
		exit(1);
	}
	return x;
}

static char *pem_of(X509 *x)
{
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = strndup(p, (size_t)n);
	BIO_free(b);
	return s;
}

/* The serialized response of n PEM texts. */
static uint8_t *response(size_t *len, size_t n, ...)
{
	const char *elems[8];
	size_t lens[8];
	va_list ap;
	va_start(ap, n);
	for (size_t i = 0; i < n; i++) {
		elems[i] = va_arg(ap, const char *);
		lens[i] = strlen(elems[i]);
	}
	va_end(ap);
	uint8_t *out = NULL;
	if (sg_istio_response_encode(elems, lens, n, &out, len) != SG_OK) {
		fprintf(stderr, "sg_istio_response_encode: %s\n", sg_error_last()->msg);
		exit(1);
	}
	return out;
}

/* The PKI of the check tests: a root, an intermediate, another root. */
static struct {
	EVP_PKEY *root_key, *inter_key, *other_key;
	X509 *root, *inter, *other;
	char *root_pem, *inter_pem, *other_pem;
} pki;

static void pki_init(void)
{
	if (pki.root)
		return;
	pki.root_key = ec_new();
	pki.inter_key = ec_new();
	pki.other_key = ec_new();
	pki.root = cert_new("root", pki.root_key, NULL, NULL, true, NULL, -3600, 86400);
	pki.inter = cert_new("intermediate", pki.inter_key, pki.root, pki.root_key, true, NULL, -3600, 86400);
	pki.other = cert_new("other root", pki.other_key, NULL, NULL, true, NULL, -3600, 86400);
	pki.root_pem = pem_of(pki.root);
	pki.inter_pem = pem_of(pki.inter);
	pki.other_pem = pem_of(pki.other);
}

static void pki_free(void)
{
	X509_free(pki.root);
	X509_free(pki.inter);
	X509_free(pki.other);
	EVP_PKEY_free(pki.root_key);
	EVP_PKEY_free(pki.inter_key);
	EVP_PKEY_free(pki.other_key);
	free(pki.root_pem);
	free(pki.inter_pem);
	free(pki.other_pem);
	memset(&pki, 0, sizeof(pki));
}

/* A leaf PEM for key, issued by the root (or by issuer). */
static char *leaf_pem(EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key, const char *san, long from, long to)
{
	X509 *x =
	    cert_new(NULL, key, issuer ? issuer : pki.root, issuer ? issuer_key : pki.root_key, false, san, from, to);
	char *s = pem_of(x);
	X509_free(x);
	return s;
}

/* The answer is refused with SG_EINVAL and a message holding want. */
static void refused(const uint8_t *resp, size_t len, const char *key, const char *trust, const char *want, int line)
{
	sg_wlcert *c = (sg_wlcert *)1;
	int rc = sg_caclient_check(resp, len, ID, key, trust, trust ? strlen(trust) : 0, (int64_t)time(NULL), &c);
	if (rc != SG_EINVAL || c != NULL || !strstr(sg_error_last()->msg, want)) {
		fprintf(stderr, "line %d: rc %d, want SG_EINVAL with \"%s\"; got \"%s\"\n", line, rc, want,
		        sg_error_last()->msg);
		SG_CHECK(false);
	} else {
		SG_CHECK(true);
	}
	if (rc == SG_OK)
		sg_wlcert_release(c);
}
#define REFUSED(resp, len, key, want) refused((resp), (len), (key), NULL, (want), __LINE__)
#define REFUSED_T(resp, len, key, trust, want) refused((resp), (len), (key), (trust), (want), __LINE__)

/* The answer is taken with trust as the configured roots (NULL: none):
 * its chain is want_chain (NULL: not compared) and its roots want_roots. */
static void accepted(const uint8_t *resp, size_t len, const char *key, const char *trust, const char *want_chain,
                     const char *want_roots, int line)
{
	sg_wlcert *c = NULL;
	int rc = sg_caclient_check(resp, len, ID, key, trust, trust ? strlen(trust) : 0, (int64_t)time(NULL), &c);
	bool ok =
	    rc == SG_OK && c && (!want_chain || !strcmp(c->chain_pem, want_chain)) && !strcmp(c->root_pem, want_roots);
	if (!ok)
		fprintf(stderr, "line %d: rc %d (%s), or not the chain and roots wanted\n", line, rc,
		        rc == SG_OK ? "" : sg_error_last()->msg);
	SG_CHECK(ok);
	sg_wlcert_release(c);
}
#define ACCEPTED(resp, len, key, trust, chain, roots)                                                                  \
	accepted((resp), (len), (key), (trust), (chain), (roots), __LINE__)

static void t_check_good(void)
{
	pki_init();
	char *key = key_pem_new(false, true);
	EVP_PKEY *k = key_load(key);
	SG_CHECK(k != NULL);
	char *leaf = leaf_pem(k, NULL, NULL, "URI:" ID, -60, 3600);
	size_t len;
	uint8_t *resp = response(&len, 2, leaf, pki.root_pem);
	sg_wlcert *c = NULL;
	SG_CHECK_OK(sg_caclient_check(resp, len, ID, key, NULL, 0, (int64_t)time(NULL), &c));
	if (c) {
		SG_CHECK(!strcmp(c->key_pem, key) && c->key_pem != key);
		SG_CHECK(!strcmp(c->chain_pem, leaf));
		SG_CHECK(!strcmp(c->root_pem, pki.root_pem));
		SG_CHECK(c->not_after - c->not_before == 3660);
		SG_CHECK(llabs(c->not_before - (time(NULL) - 60)) < 10);
		SG_CHECK(c->serial[0] != '\0');
	}
	sg_wlcert_release(c);
	free(resp);

	/* With an intermediate, and text around the blocks (which is not
	 * kept: the chain is re-encoded from the DER). */
	char *leaf2 = leaf_pem(k, pki.inter, pki.inter_key, "URI:" ID, -60, 3600);
	char around[8192];
	snprintf(around, sizeof(around), "subject=leaf\n%s", leaf2);
	resp = response(&len, 3, around, pki.inter_pem, pki.root_pem);
	c = NULL;
	SG_CHECK_OK(sg_caclient_check(resp, len, ID, key, NULL, 0, (int64_t)time(NULL), &c));
	if (c) {
		char want[8192];
		snprintf(want, sizeof(want), "%s%s", leaf2, pki.inter_pem);
		SG_CHECK(!strcmp(c->chain_pem, want));
		SG_CHECK(!strcmp(c->root_pem, pki.root_pem));
	}
	sg_wlcert_release(c);
	free(resp);

	free(leaf);
	free(leaf2);
	EVP_PKEY_free(k);
	free(key);
}

/* A rotation's overlap: the last element is the root bundle, old and new
 * (what istiod, istio-csr and signetd send while two roots are current).
 * The leaf verifies against either; all of them reach root-cert.pem, in
 * the CA's order. */
static void t_check_root_bundle(void)
{
	pki_init();
	char *key = key_pem_new(false, true);
	EVP_PKEY *k = key_load(key);
	char *leaf = leaf_pem(k, NULL, NULL, "URI:" ID, -60, 3600);
	char bundle[8192];
	size_t len;
	uint8_t *resp;
	/* The issuing root second and first. */
	const char *firsts[2] = {pki.other_pem, pki.root_pem};
	const char *seconds[2] = {pki.root_pem, pki.other_pem};
	for (size_t i = 0; i < 2; i++) {
		snprintf(bundle, sizeof(bundle), "%s%s", firsts[i], seconds[i]);
		resp = response(&len, 2, leaf, bundle);
		ACCEPTED(resp, len, key, NULL, leaf, bundle);
		free(resp);
	}
	/* Under an intermediate, with text between the roots (not kept). */
	char *leaf2 = leaf_pem(k, pki.inter, pki.inter_key, "URI:" ID, -60, 3600);
	snprintf(bundle, sizeof(bundle), "# old\n%s# new\n%s", pki.other_pem, pki.root_pem);
	resp = response(&len, 3, leaf2, pki.inter_pem, bundle);
	char want[8192];
	snprintf(want, sizeof(want), "%s%s", pki.other_pem, pki.root_pem);
	ACCEPTED(resp, len, key, NULL, NULL, want);
	free(resp);
	free(leaf);
	free(leaf2);
	EVP_PKEY_free(k);
	free(key);
}

/* istiod's per-signer mode: the last element is the signer's
 * intermediate, which the workload is to trust alone. Accepted when it
 * chains to the configured roots (or is one of them), and written as the
 * root; refused otherwise. */
static void t_check_signer_root(void)
{
	pki_init();
	char *key = key_pem_new(false, true);
	EVP_PKEY *k = key_load(key);
	char *under_inter = leaf_pem(k, pki.inter, pki.inter_key, "URI:" ID, -60, 3600);
	char *under_root = leaf_pem(k, NULL, NULL, "URI:" ID, -60, 3600);
	size_t len;
	uint8_t *resp = response(&len, 2, under_inter, pki.inter_pem);
	const char *trusted[3] = {pki.root_pem, pki.inter_pem, NULL};
	char both[8192];
	snprintf(both, sizeof(both), "%s%s", pki.other_pem, pki.root_pem);
	trusted[2] = both;
	for (size_t i = 0; i < 3; i++)
		ACCEPTED(resp, len, key, trusted[i], under_inter, pki.inter_pem);
	/* Configured roots it does not chain to. */
	REFUSED_T(resp, len, key, pki.other_pem, "does not chain to the configured roots");
	free(resp);

	/* It chains to the configured roots, but the leaf is not under it. */
	resp = response(&len, 2, under_root, pki.inter_pem);
	REFUSED_T(resp, len, key, pki.root_pem, "does not verify up to a root of the last element");
	free(resp);

	/* A leaf under the configured root posing as the root: not a CA. */
	resp = response(&len, 2, under_root, under_root);
	REFUSED_T(resp, len, key, pki.root_pem, "neither a self-signed root nor a CA certificate");
	free(resp);

	/* An overlap of a root and a signer's intermediate; the leaf under the
	 * intermediate. Both are what the workload trusts. */
	char bundle[8192];
	snprintf(bundle, sizeof(bundle), "%s%s", pki.other_pem, pki.inter_pem);
	resp = response(&len, 2, under_inter, bundle);
	ACCEPTED(resp, len, key, pki.root_pem, under_inter, bundle);
	REFUSED(resp, len, key, "root 1 of the last element is not a self-signed root");
	free(resp);

	/* Configured roots that are not PEM. */
	resp = response(&len, 2, under_inter, pki.inter_pem);
	REFUSED_T(resp, len, key, "junk", "the configured roots hold no usable PEM certificate");
	free(resp);

	free(under_inter);
	free(under_root);
	EVP_PKEY_free(k);
	free(key);
}

/* The bound on the roots of the last element. */
static void t_check_roots_max(void)
{
	pki_init();
	char *key = key_pem_new(false, true);
	EVP_PKEY *k = key_load(key);
	char *leaf = leaf_pem(k, NULL, NULL, "URI:" ID, -60, 3600);
	size_t one = strlen(pki.root_pem) + strlen(pki.other_pem); /* more than either */
	char *bundle = calloc(SG_CACLIENT_ROOTS_MAX + 1, one + 1);
	SG_CHECK(bundle != NULL);
	for (size_t i = 0; bundle && i < SG_CACLIENT_ROOTS_MAX; i++)
		strcat(bundle, i == SG_CACLIENT_ROOTS_MAX - 1 ? pki.root_pem : pki.other_pem);
	size_t len;
	uint8_t *resp = response(&len, 2, leaf, bundle); /* the most there may be */
	ACCEPTED(resp, len, key, NULL, leaf, bundle);
	free(resp);
	strcat(bundle, pki.other_pem); /* one more */
	resp = response(&len, 2, leaf, bundle);
	char want[128];
	snprintf(want, sizeof(want), "the last element holds %d roots, at most %d", SG_CACLIENT_ROOTS_MAX + 1,
	         SG_CACLIENT_ROOTS_MAX);
	REFUSED(resp, len, key, want);
	free(resp);
	free(bundle);
	free(leaf);
	EVP_PKEY_free(k);
	free(key);
}

static void t_check_key_forms(void)
{
	pki_init();
	static const struct {
		bool rsa, pkcs8;
		const char *header;
	} forms[] = {
	    {false, true, "-----BEGIN PRIVATE KEY-----"},
	    {false, false, "-----BEGIN EC PRIVATE KEY-----"},
	    {true, true, "-----BEGIN PRIVATE KEY-----"},
	    {true, false, "-----BEGIN RSA PRIVATE KEY-----"},
	};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		char *key = key_pem_new(forms[i].rsa, forms[i].pkcs8);
		SG_CHECK(!strncmp(key, forms[i].header, strlen(forms[i].header)));
		EVP_PKEY *k = key_load(key);
		SG_CHECK(k && EVP_PKEY_get_bits(k) == (forms[i].rsa ? 2048 : 256));
		char *leaf = leaf_pem(k, NULL, NULL, "URI:" ID, -60, 3600);
		size_t len;
		uint8_t *resp = response(&len, 2, leaf, pki.root_pem);
		sg_wlcert *c = NULL;
		SG_CHECK_OK(sg_caclient_check(resp, len, ID, key, NULL, 0, (int64_t)time(NULL), &c));
		sg_wlcert_release(c);
		free(resp);
		free(leaf);
		EVP_PKEY_free(k);
		free(key);
	}
	/* The names are checked as for sg_softkey_issue. */
	sg_softkey_request none = {.type = SG_SOFTKEY_EC_P256};
	char *key = (char *)1, *csr = (char *)1;
	SG_CHECK_RC(sg_softkey_csr(&none, true, &key, &csr), SG_EINVAL);
	SG_CHECK(key == NULL && csr == NULL);
	const char *uris[] = {ID};
	sg_softkey_request small = {.type = SG_SOFTKEY_RSA, .rsa_bits = 1024, .uris = uris, .nuris = 1};
	SG_CHECK_RC(sg_softkey_csr(&small, true, &key, &csr), SG_EINVAL);
}

static void t_check_hostile(void)
{
	pki_init();
	char *key = key_pem_new(false, true);
	EVP_PKEY *k = key_load(key);
	EVP_PKEY *other_k = ec_new();
	char *good = leaf_pem(k, NULL, NULL, "URI:" ID, -60, 3600);
	size_t len;
	uint8_t *resp;

	resp = response(&len, 1, good);
	REFUSED(resp, len, key, "1 certificate chain element(s)");
	free(resp);

	REFUSED((const uint8_t *)"", 0, key, "0 certificate chain element(s)");
	REFUSED(NULL, 0, key, "0 certificate chain element(s)");

	static const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x41, 0x42};
	REFUSED(garbage, sizeof(garbage), key, "not an IstioCertificateResponse");
	static const uint8_t wiretype[] = {0x0b, 0x01, 0x02};
	REFUSED(wiretype, sizeof(wiretype), key, "not an IstioCertificateResponse");

	resp = response(&len, 2, "hello", pki.root_pem);
	REFUSED(resp, len, key, "element 0 is not a PEM certificate");
	free(resp);

	char two[8192];
	snprintf(two, sizeof(two), "%s%s", good, pki.inter_pem);
	resp = response(&len, 2, two, pki.root_pem);
	REFUSED(resp, len, key, "element 0 holds 2 certificates");
	free(resp);

	char *wrong_san = leaf_pem(k, NULL, NULL, "URI:spiffe://cluster.local/ns/default/sa/other", -60, 3600);
	resp = response(&len, 2, wrong_san, pki.root_pem);
	REFUSED(resp, len, key, "subjectAltName");
	free(resp);

	char *extra_uri = leaf_pem(k, NULL, NULL, "URI:" ID ",URI:spiffe://cluster.local/ns/x/sa/y", -60, 3600);
	resp = response(&len, 2, extra_uri, pki.root_pem);
	REFUSED(resp, len, key, "subjectAltName");
	free(resp);

	char *extra_dns = leaf_pem(k, NULL, NULL, "URI:" ID ",DNS:example.com", -60, 3600);
	resp = response(&len, 2, extra_dns, pki.root_pem);
	REFUSED(resp, len, key, "subjectAltName");
	free(resp);

	char *no_san = leaf_pem(k, NULL, NULL, NULL, -60, 3600);
	resp = response(&len, 2, no_san, pki.root_pem);
	REFUSED(resp, len, key, "subjectAltName");
	free(resp);

	char *wrong_key = leaf_pem(other_k, NULL, NULL, "URI:" ID, -60, 3600);
	resp = response(&len, 2, wrong_key, pki.root_pem);
	REFUSED(resp, len, key, "does not hold the key");
	free(resp);

	/* The last element is an intermediate and no roots are configured
	 * (t_check_signer_root has the rest). */
	char *under_inter = leaf_pem(k, pki.inter, pki.inter_key, "URI:" ID, -60, 3600);
	resp = response(&len, 2, under_inter, pki.inter_pem);
	REFUSED(resp, len, key, "root 0 of the last element is not a self-signed root, and no roots are configured");
	free(resp);

	/* A root that did not issue the chain. */
	resp = response(&len, 2, good, pki.other_pem);
	REFUSED(resp, len, key, "does not verify");
	free(resp);
	/* An intermediate missing between leaf and root. */
	resp = response(&len, 2, under_inter, pki.root_pem);
	REFUSED(resp, len, key, "does not verify");
	free(resp);

	char *expired = leaf_pem(k, NULL, NULL, "URI:" ID, -7200, -3600);
	resp = response(&len, 2, expired, pki.root_pem);
	REFUSED(resp, len, key, "expired");
	free(resp);

	char *future = leaf_pem(k, NULL, NULL, "URI:" ID, 3600, 7200);
	resp = response(&len, 2, future, pki.root_pem);
	REFUSED(resp, len, key, "not valid yet");
	free(resp);

	/* A CA clock a minute ahead of ours: within the skew allowance, and
	 * the chain verifies at the leaf's start. */
	char *skewed = leaf_pem(k, NULL, NULL, "URI:" ID, 60, 3600);
	resp = response(&len, 2, skewed, pki.root_pem);
	sg_wlcert *sc = NULL;
	SG_CHECK_OK(sg_caclient_check(resp, len, ID, key, NULL, 0, time(NULL), &sc));
	sg_wlcert_release(sc);
	free(resp);
	free(skewed);

	/* Another identity asked for than the leaf names. */
	resp = response(&len, 2, good, pki.root_pem);
	sg_wlcert *c = NULL;
	SG_CHECK_RC(
	    sg_caclient_check(resp, len, "spiffe://cluster.local/ns/default/sa/other", key, NULL, 0, time(NULL), &c),
	    SG_EINVAL);
	SG_CHECK_MSG("subjectAltName");
	SG_CHECK_RC(sg_caclient_check(resp, len, ID, "", NULL, 0, time(NULL), &c), SG_EINVAL);
	free(resp);

	free(good);
	free(wrong_san);
	free(extra_uri);
	free(extra_dns);
	free(no_san);
	free(wrong_key);
	free(under_inter);
	free(expired);
	free(future);
	EVP_PKEY_free(k);
	EVP_PKEY_free(other_k);
	free(key);
}

/* ---- a real signetd ------------------------------------------------------------ */

#if defined(SIGNETD) && defined(SIGNETCTL)

static struct {
	char dir[256];
	char conf[512], root[512], served[512], token[512], log[512];
	pid_t pid;
	int port;
	bool tried;
} fx;

static void signetd_stop(void)
{
	if (fx.pid <= 0)
		return;
	kill(fx.pid, SIGTERM);
	for (int i = 0; i < 300; i++) { /* 30 s, then SIGKILL */
		if (waitpid(fx.pid, NULL, WNOHANG) == fx.pid) {
			fx.pid = 0;
			return;
		}
		sg_sleep_ms(100);
	}
	kill(fx.pid, SIGKILL);
	waitpid(fx.pid, NULL, 0);
	fx.pid = 0;
}

static void write_text(const char *path, const char *text)
{
	char tmp[1024];
	int n = snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = n > 0 && (size_t)n < sizeof(tmp) ? fopen(tmp, "w") : NULL;
	if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
		perror(path);
		exit(1);
	}
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strdup(buf);
}

/* `signetctl token` for ns/sa into the token file (rewritten by rename, as
 * the kubelet does). */
static void token_for(const char *ns, const char *sa)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "'%s' token --config '%s' --namespace '%s' --service-account '%s'", SIGNETCTL,
	         fx.conf, ns, sa);
	FILE *p = popen(cmd, "r");
	char tok[8192];
	size_t n = p ? fread(tok, 1, sizeof(tok) - 1, p) : 0;
	if (!p || pclose(p) != 0 || n == 0) {
		fprintf(stderr, "signetctl token failed\n");
		exit(1);
	}
	tok[n] = '\0';
	write_text(fx.token, tok);
}

/* The port of signetd's "signetd serving" JSON line, or 0. */
static int serving_port(void)
{
	char *log = read_text(fx.log);
	int port = 0;
	char *line = log ? strstr(log, "\"msg\":\"signetd serving\"") : NULL;
	char *p = line ? strstr(line, "\"port\":") : NULL;
	if (p)
		port = atoi(p + strlen("\"port\":"));
	free(log);
	return port;
}

static bool fixture_start(void)
{
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(fx.dir, sizeof(fx.dir), "%s/caclient.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
	if (!mkdtemp(fx.dir))
		return false;
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "'%s' init --dir '%s/ca' --log-level warn >/dev/null", SIGNETCTL, fx.dir);
	if (system(cmd) != 0)
		return false;
	snprintf(fx.conf, sizeof(fx.conf), "%s/ca/signet.conf", fx.dir);
	snprintf(fx.root, sizeof(fx.root), "%s/ca/root-cert.pem", fx.dir);
	snprintf(fx.token, sizeof(fx.token), "%s/token", fx.dir);
	snprintf(fx.log, sizeof(fx.log), "%s/signetd.log", fx.dir);
	/* The roots signetd serves (--root-ca-file, followed while it runs):
	 * its own root until t_fetch_overlap adds another. */
	snprintf(fx.served, sizeof(fx.served), "%s/served-roots.pem", fx.dir);
	char *own = read_text(fx.root);
	if (!own)
		return false;
	write_text(fx.served, own);
	free(own);
	atexit(signetd_stop);
	fx.pid = fork();
	if (fx.pid == 0) {
		int fd = open(fx.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		/* Standalone: no cluster, whatever the environment has. */
		unsetenv("KUBECONFIG");
		unsetenv("KUBERNETES_SERVICE_HOST");
		execl(SIGNETD, SIGNETD, "--config", fx.conf, "--serving-address", "127.0.0.1:0", "--http-address",
		      "127.0.0.1", "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json",
		      "--signer-threads", "2", "--root-ca-file", fx.served, (char *)NULL);
		_exit(127);
	}
	if (fx.pid < 0)
		return false;
	for (int i = 0; i < 1200 && !fx.port; i++) { /* 60 s: a sanitizer build starts slowly */
		fx.port = serving_port();
		if (!fx.port && waitpid(fx.pid, NULL, WNOHANG) == fx.pid) {
			fx.pid = 0;
			break;
		}
		if (!fx.port)
			sg_sleep_ms(50);
	}
	if (!fx.port) {
		char *log = read_text(fx.log);
		fprintf(stderr, "signetd did not start:\n%s\n", log ? log : "");
		free(log);
	}
	return fx.port > 0;
}

/* signetd, started by the first test that needs it. */
static bool fixture(void)
{
	if (!fx.tried) {
		fx.tried = true;
		SG_CHECK(fixture_start());
	}
	return fx.port > 0;
}

static int client_new(sg_caclient **c, const char *root_file, bool rsa, bool pkcs8, uint64_t timeout_ms)
{
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", fx.port);
	sg_caclient_options o = {
	    .address = addr,
	    .server_name = "localhost", /* signetd's serving certificate names localhost */
	    .root_ca_file = root_file,
	    .token_file = fx.token,
	    .cluster_id = "Kubernetes",
	    .ttl_seconds = 3600,
	    .key_type = rsa ? SG_CACLIENT_KEY_RSA : SG_CACLIENT_KEY_EC_P256,
	    .pkcs8 = pkcs8,
	    .timeout_ms = timeout_ms,
	    .reconnect_backoff_max_ms = 1000,
	};
	return sg_caclient_new(c, &o);
}

/* What an issued certificate must be, checked independently of the
 * client's own checks. */
static void check_issued(const sg_wlcert *c, const char *id, const char *key_header, unsigned bits)
{
	SG_CHECK(!strncmp(c->key_pem, key_header, strlen(key_header)));
	sg_x509_bundle *chain = NULL, *root = NULL, *file_root = NULL;
	SG_CHECK_OK(sg_x509_bundle_parse(&chain, c->chain_pem, strlen(c->chain_pem)));
	SG_CHECK_OK(sg_x509_bundle_parse(&root, c->root_pem, strlen(c->root_pem)));
	char *fr = read_text(fx.root);
	SG_CHECK_OK(sg_x509_bundle_parse(&file_root, fr, strlen(fr)));
	if (chain && root && file_root) {
		SG_CHECK(sg_x509_names_are(chain, 0, NULL, NULL, 0, id));
		sg_x509_keyinfo ki;
		SG_CHECK_OK(sg_x509_key_check(chain, 0, c->key_pem, strlen(c->key_pem), &ki));
		SG_CHECK(ki.bits == bits);
		SG_CHECK(sg_x509_chains_to(chain, root));
		SG_CHECK(sg_x509_chains_to(chain, file_root)); /* openssl verify -CAfile root-cert.pem */
		sg_x509_facts f;
		SG_CHECK_OK(sg_x509_get_facts(chain, 0, &f));
		SG_CHECK(f.not_before == c->not_before && f.not_after == c->not_after && !strcmp(f.serial, c->serial));
		SG_CHECK(c->not_after - c->not_before <= 3600 + 600);
	}
	sg_x509_bundle_free(chain);
	sg_x509_bundle_free(root);
	sg_x509_bundle_free(file_root);
	free(fr);
}

static void t_fetch(void)
{
	if (!fixture())
		return;
	token_for("default", "sleep");
	sg_caclient *c = NULL;
	SG_CHECK_OK(client_new(&c, fx.root, false, true, 10000));
	if (!c)
		return;
	sg_wlcert *w = NULL;
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	if (w)
		check_issued(w, ID, "-----BEGIN PRIVATE KEY-----", 256);
	sg_wlcert_release(w);
	/* As an sg_wlcerts_fetch_fn. */
	sg_wlcerts_fetch_fn fn = sg_caclient_fetch_fn;
	w = NULL;
	SG_CHECK_OK(fn(ID, &w, c));
	sg_wlcert_release(w);
	sg_caclient_stats st;
	sg_caclient_stats_get(c, &st);
	SG_CHECK(st.calls == 2 && st.ok == 2 && st.failed == 0 && st.root_reloads == 0);
	sg_caclient_free(c);

	/* RSA-2048 as PKCS#1. */
	c = NULL;
	SG_CHECK_OK(client_new(&c, fx.root, true, false, 10000));
	w = NULL;
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	if (w)
		check_issued(w, ID, "-----BEGIN RSA PRIVATE KEY-----", 2048);
	sg_wlcert_release(w);
	/* EC as SEC1. */
	sg_caclient_free(c);
	c = NULL;
	SG_CHECK_OK(client_new(&c, fx.root, false, false, 10000));
	w = NULL;
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	if (w)
		check_issued(w, ID, "-----BEGIN EC PRIVATE KEY-----", 256);
	sg_wlcert_release(w);
	sg_caclient_free(c);
}

/* One fetch's root bundle, or NULL. */
static char *fetched_roots(sg_caclient *c)
{
	sg_wlcert *w = NULL;
	char *roots = sg_caclient_fetch(c, ID, &w) == SG_OK ? strdup(w->root_pem) : NULL;
	sg_wlcert_release(w);
	return roots;
}

static bool roots_are(sg_caclient *c, const char *want)
{
	char *got = fetched_roots(c);
	bool same = got && strcmp(got, want) == 0;
	free(got);
	return same;
}

/* A rotation's overlap from signetd itself: its --root-ca-file gains a
 * second root (followed within seconds, no restart), its answers carry
 * both in the last element, and the client takes them, then one again. */
static void t_fetch_overlap(void)
{
	if (!fixture())
		return;
	token_for("default", "sleep");
	pki_init();
	sg_caclient *c = NULL;
	SG_CHECK_OK(client_new(&c, fx.root, false, true, 10000));
	char *own = read_text(fx.root);
	if (!c || !own) {
		sg_caclient_free(c);
		free(own);
		return;
	}
	SG_CHECK(roots_are(c, own));
	size_t n = strlen(own) + strlen(pki.other_pem) + 1;
	char *both = malloc(n);
	snprintf(both, n, "%s%s", own, pki.other_pem);
	write_text(fx.served, both);
	SG_WAIT_FOR(30000, roots_are(c, both));
	sg_wlcert *w = NULL;
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	if (w) {
		check_issued(w, ID, "-----BEGIN PRIVATE KEY-----", 256);
		sg_x509_bundle *b = NULL;
		SG_CHECK_OK(sg_x509_bundle_parse(&b, w->root_pem, strlen(w->root_pem)));
		SG_CHECK(b && sg_x509_bundle_count(b) == 2);
		sg_x509_bundle_free(b);
	}
	sg_wlcert_release(w);
	write_text(fx.served, own);
	SG_WAIT_FOR(30000, roots_are(c, own));
	free(both);
	free(own);
	sg_caclient_free(c);
}

static void t_tokens(void)
{
	if (!fixture())
		return;
	sg_caclient *c = NULL;
	SG_CHECK_OK(client_new(&c, fx.root, false, true, 10000));
	if (!c)
		return;
	sg_wlcert *w = NULL;

	/* A token that does not verify. */
	write_text(fx.token, "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\n");
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_EAUTH);
	SG_CHECK_MSG("UNAUTHENTICATED");
	SG_CHECK(w == NULL);

	/* The file is read on every call: another identity's token, then
	 * the first one's again. */
	const char *id1 = "spiffe://cluster.local/ns/ns-one/sa/sa-one";
	const char *id2 = "spiffe://cluster.local/ns/ns-two/sa/sa-two";
	token_for("ns-one", "sa-one");
	SG_CHECK_OK(sg_caclient_fetch(c, id1, &w));
	if (w)
		check_issued(w, id1, "-----BEGIN PRIVATE KEY-----", 256);
	sg_wlcert_release(w);
	w = NULL;
	token_for("ns-two", "sa-two");
	SG_CHECK_OK(sg_caclient_fetch(c, id2, &w));
	if (w)
		check_issued(w, id2, "-----BEGIN PRIVATE KEY-----", 256);
	sg_wlcert_release(w);
	w = NULL;
	/* ns-two's token does not get ns-one's identity. */
	SG_CHECK_RC(sg_caclient_fetch(c, id1, &w), SG_EAUTH);
	SG_CHECK(w == NULL);

	/* An empty token file, and none at all. */
	write_text(fx.token, " \n\n");
	SG_CHECK_RC(sg_caclient_fetch(c, id2, &w), SG_ENOTFOUND);
	SG_CHECK_MSG("empty");
	unlink(fx.token);
	SG_CHECK_RC(sg_caclient_fetch(c, id2, &w), SG_ENOTFOUND);
	token_for("ns-two", "sa-two");
	SG_CHECK_OK(sg_caclient_fetch(c, id2, &w));
	sg_wlcert_release(w);
	w = NULL;

	sg_caclient_stats st;
	sg_caclient_stats_get(c, &st);
	SG_CHECK(st.calls == 7 && st.ok == 3 && st.failed == 4);
	sg_caclient_free(c);
}

static void t_root_reload(void)
{
	if (!fixture())
		return;
	token_for("default", "sleep");
	char copy[800];
	snprintf(copy, sizeof(copy), "%s/roots.pem", fx.dir);
	char *root = read_text(fx.root);
	write_text(copy, root);
	sg_caclient *c = NULL;
	SG_CHECK_OK(client_new(&c, copy, false, true, 10000));
	if (!c) {
		free(root);
		return;
	}
	sg_wlcert *w = NULL;
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	sg_wlcert_release(w);
	w = NULL;

	/* Garbage: the next fetch fails, saying so. */
	write_text(copy, "not a certificate\n");
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_EINVAL);
	SG_CHECK_MSG("root file");
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_EINVAL); /* and keeps failing until fixed */

	/* Another root: read, and the handshake with signetd fails. */
	pki_init();
	write_text(copy, pki.other_pem);
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_EBUSY);
	SG_CHECK_MSG("UNAVAILABLE");

	/* The right root again. */
	write_text(copy, root);
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	sg_wlcert_release(w);
	w = NULL;

	sg_caclient_stats st;
	sg_caclient_stats_get(c, &st);
	SG_CHECK(st.root_reloads == 2);

	/* Gone: SG_ENOTFOUND. */
	unlink(copy);
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_ENOTFOUND);
	SG_CHECK_MSG("root file");
	sg_caclient_free(c); /* LeakSanitizer: no channel is left behind */
	free(root);
}

static void t_options(void)
{
	char junk[800], missing[800];
	const char *dir = fx.port ? fx.dir : "/tmp";
	snprintf(junk, sizeof(junk), "%s/junk.pem", dir);
	snprintf(missing, sizeof(missing), "%s/missing.pem", dir);
	if (fx.port)
		write_text(junk, "junk\n");
	sg_caclient *c = (sg_caclient *)1;
	sg_caclient_options o = {.address = "127.0.0.1:1", .root_ca_file = missing};
	SG_CHECK_RC(sg_caclient_new(&c, &o), SG_ENOTFOUND);
	SG_CHECK(c == NULL);
	if (fx.port) {
		o.root_ca_file = junk;
		SG_CHECK_RC(sg_caclient_new(&c, &o), SG_EINVAL);
		SG_CHECK_MSG("root file");
	}
	o.root_ca_file = NULL;
	SG_CHECK_RC(sg_caclient_new(&c, &o), SG_EINVAL);
	o = (sg_caclient_options){.root_ca_file = fx.root};
	SG_CHECK_RC(sg_caclient_new(&c, &o), SG_EINVAL);
	o = (sg_caclient_options){.address = "no-port", .insecure = true};
	SG_CHECK_RC(sg_caclient_new(&c, &o), SG_EINVAL);
	o = (sg_caclient_options){
	    .address = "h:1", .insecure = true, .key_type = SG_CACLIENT_KEY_RSA, .rsa_bits = 1024};
	SG_CHECK_RC(sg_caclient_new(&c, &o), SG_EINVAL);
	o = (sg_caclient_options){.address = "h:1", .insecure = true, .ttl_seconds = -1};
	SG_CHECK_RC(sg_caclient_new(&c, &o), SG_EINVAL);
	o = (sg_caclient_options){.address = "[::1]:1", .insecure = true};
	SG_CHECK_OK(sg_caclient_new(&c, &o));
	sg_wlcert *w = NULL;
	SG_CHECK_RC(sg_caclient_fetch(c, "", &w), SG_EINVAL);
	sg_caclient_free(c);
	sg_caclient_free(NULL);
}

/* Last: signetd goes away, and a fetch fails as retryable within its
 * timeout. */
static void t_ca_down(void)
{
	if (!fixture())
		return;
	token_for("default", "sleep");
	sg_caclient *c = NULL;
	SG_CHECK_OK(client_new(&c, fx.root, false, true, 3000));
	if (!c)
		return;
	sg_wlcert *w = NULL;
	SG_CHECK_OK(sg_caclient_fetch(c, ID, &w));
	sg_wlcert_release(w);
	w = NULL;
	signetd_stop();
	uint64_t t0 = sg_now_ns();
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_EBUSY);
	SG_CHECK((sg_now_ns() - t0) / 1000000u < 3000 + 2000);
	SG_CHECK_RC(sg_caclient_fetch(c, ID, &w), SG_EBUSY);
	SG_CHECK((sg_now_ns() - t0) / 1000000u < 2 * (3000 + 2000));
	sg_caclient_free(c);
}

#else
static void t_fetch(void)
{
	fprintf(stderr, "no SIGNETD/SIGNETCTL: skipped\n");
}
static void t_fetch_overlap(void)
{
}
static void t_tokens(void)
{
}
static void t_root_reload(void)
{
}
static void t_options(void)
{
}
static void t_ca_down(void)
{
}
#endif

static void t_cleanup(void)
{
	pki_free();
}

SG_TEST_MAIN(SG_TEST(t_check_good), SG_TEST(t_check_root_bundle), SG_TEST(t_check_signer_root),
             SG_TEST(t_check_roots_max), SG_TEST(t_check_key_forms), SG_TEST(t_check_hostile), SG_TEST(t_fetch),
             SG_TEST(t_fetch_overlap), SG_TEST(t_tokens), SG_TEST(t_root_reload), SG_TEST(t_options),
             SG_TEST(t_ca_down), SG_TEST(t_cleanup))
