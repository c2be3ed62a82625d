/*
 * Software key + issued certificate (sg_softkey.h). OpenSSL makes the key
 * and signs the CSR with it (the CSR proves possession like any other); the
 * pool then issues exactly as it does for workloads.
 */
#include "sg_softkey.h"

#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_guard.h"
#include "sg_ossl.h"
#include "sg_secret.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_NS (30ull * 1000000000u)

/* The BIO's contents as a NUL-terminated string; the BIO may hold a key, so
 * its memory is BIO_s_secmem's where it matters (the caller chose). */
static char *bio_string(BIO *b)
{
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s) {
		memcpy(s, p, (size_t)n);
		s[n] = '\0';
	}
	return s;
}

static void wipe_free(char *s)
{
	if (s) {
		sg_wipe(s, strlen(s));
		free(s);
	}
}

static EVP_PKEY *make_key(const sg_softkey_request *r)
{
	switch (r->type) {
	case SG_SOFTKEY_EC_P256: return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	case SG_SOFTKEY_EC_P384: return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	case SG_SOFTKEY_RSA: return EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)r->rsa_bits);
	}
	return NULL;
}

static bool push_name(GENERAL_NAMES *gens, int type, const char *value)
{
	GENERAL_NAME *g = GENERAL_NAME_new();
	ASN1_IA5STRING *s = ASN1_IA5STRING_new();
	if (!g || !s || ASN1_STRING_set(s, value, (int)strlen(value)) != 1) {
		GENERAL_NAME_free(g);
		ASN1_IA5STRING_free(s);
		return false;
	}
	GENERAL_NAME_set0_value(g, type, s);
	if (!sk_GENERAL_NAME_push(gens, g)) {
		GENERAL_NAME_free(g);
		return false;
	}
	return true;
}

/* r's names: the subject (its CommonName, if any) and the
 * subjectAltName's DNS names and URIs. */
static bool fill_names(const sg_softkey_request *r, X509_NAME *subj, GENERAL_NAMES *gens)
{
	bool ok = true;
	if (r->cn)
		ok = X509_NAME_add_entry_by_NID(subj, NID_commonName, MBSTRING_UTF8, (const unsigned char *)r->cn, -1,
		                                -1, 0) == 1;
	for (size_t i = 0; ok && i < r->ndns; i++)
		ok = push_name(gens, GEN_DNS, r->dns[i]);
	for (size_t i = 0; ok && i < r->nuris; i++)
		ok = push_name(gens, GEN_URI, r->uris[i]);
	return ok;
}

/* A CSR for r's names, signed by k, as PEM. */
static int make_csr(const sg_softkey_request *r, EVP_PKEY *k, char **out)
{
	X509_REQ *req = X509_REQ_new();
	X509_NAME *subj = X509_NAME_new();
	GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
	STACK_OF(X509_EXTENSION) *exts = NULL;
	BIO *b = BIO_new(BIO_s_mem());
	bool ok = req && subj && gens && b && fill_names(r, subj, gens);
	ok = ok && X509V3_add1_i2d(&exts, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT) == 1 &&
	     X509_REQ_set_subject_name(req, subj) == 1 && X509_REQ_set_pubkey(req, k) == 1 &&
	     X509_REQ_add_extensions(req, exts) == 1 && X509_REQ_sign(req, k, EVP_sha256()) > 0 &&
	     PEM_write_bio_X509_REQ(b, req) == 1;
	*out = ok ? bio_string(b) : NULL;
	int rc = *out ? SG_OK : sg_error_set_ossl(SG_EINTERNAL, "cannot make a CSR for a software key");
	BIO_free(b);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	GENERAL_NAMES_free(gens);
	X509_NAME_free(subj);
	X509_REQ_free(req);
	return rc;
}

/* The key as PEM: PKCS#8, or the traditional PKCS#1/SEC1 form that some
 * readers of workload keys still expect (istio-agent writes either). */
static int key_pem(EVP_PKEY *k, bool pkcs8, char **out)
{
	BIO *b = BIO_new(BIO_s_secmem());
	int w = !b ? 0
		: pkcs8 ? PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL)
			: PEM_write_bio_PrivateKey_traditional(b, k, NULL, NULL, 0, NULL, NULL);
	*out = w == 1 ? bio_string(b) : NULL;
	BIO_free(b);
	SG_ENSURE(*out, SG_EINTERNAL, "cannot encode a software key");
	return SG_OK;
}

/* The leaf and the intermediates: the root bundle (the last chain element)
 * is the relying party's to have, not the server's to send. */
static int join_chain(const sg_issue_result *res, char **out)
{
	size_t total = res->leaf_pem_len;
	for (size_t i = 0; i + 1 < res->chain_len; i++)
		total += res->chain_lens[i];
	char *s = malloc(total + 1);
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	memcpy(s, res->leaf_pem, res->leaf_pem_len);
	size_t off = res->leaf_pem_len;
	for (size_t i = 0; i + 1 < res->chain_len; i++) {
		memcpy(s + off, res->chain[i], res->chain_lens[i]);
		off += res->chain_lens[i];
	}
	s[off] = '\0';
	*out = s;
	return SG_OK;
}

/* The request's names and key size, as both entry points require. */
static int check_request(const sg_softkey_request *r)
{
	SG_ENSURE(r->ndns + r->nuris > 0, SG_EINVAL, "a software key's certificate needs at least one name");
	SG_ENSURE(r->ndns + r->nuris <= SG_SOFTKEY_MAX_NAMES, SG_EINVAL, "more than %d names",
		  SG_SOFTKEY_MAX_NAMES);
	for (size_t i = 0; i < r->ndns; i++)
		SG_ENSURE(r->dns[i] && r->dns[i][0], SG_EINVAL, "an empty DNS name");
	for (size_t i = 0; i < r->nuris; i++)
		SG_ENSURE(r->uris[i] && r->uris[i][0], SG_EINVAL, "an empty URI");
	SG_ENSURE(r->type != SG_SOFTKEY_RSA || r->rsa_bits >= 2048, SG_EINVAL, "RSA keys have at least 2048 bits");
	return SG_OK;
}

int sg_softkey_csr(const sg_softkey_request *r, bool pkcs8, char **key, char **csr)
{
	*key = *csr = NULL;
	SG_TRY(check_request(r));
	ERR_clear_error();
	EVP_PKEY *k = make_key(r);
	SG_ENSURE(k, SG_EINTERNAL, "cannot make a software key");
	int rc = make_csr(r, k, csr);
	if (rc == SG_OK)
		rc = key_pem(k, pkcs8, key);
	EVP_PKEY_free(k);
	if (rc < 0) {
		free(*csr);
		*csr = NULL;
	}
	return rc;
}

int sg_softkey_issue(sg_pool *pool, const sg_softkey_request *r, sg_softkey_result *out)
{
	memset(out, 0, sizeof(*out));
	char *csr = NULL, *key = NULL;
	SG_TRY(sg_softkey_csr(r, true, &key, &csr));
	sg_issue_request req = {
		.csr = (const uint8_t *)csr,
		.csr_len = strlen(csr),
		.profile = SG_PROFILE_GENERIC,
		.ttl = r->ttl,
		.key_usage = SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT, /* the profile drops it for EC */
		.ext_key_usage = r->ext_key_usage,
		.path_len = -1,
		.deadline_ns = sg_now_ns() + (r->timeout_ns ? r->timeout_ns : DEFAULT_TIMEOUT_NS),
	};
	sg_issue_result res;
	int rc = sg_pool_issue(pool, &req, &res);
	free(csr);
	if (rc == SG_OK) {
		rc = join_chain(&res, &out->chain_pem);
		out->not_before = res.not_before;
		out->not_after = res.not_after;
		snprintf(out->serial_hex, sizeof(out->serial_hex), "%s", res.serial_hex);
		sg_issue_result_clear(&res);
	}
	if (rc < 0) {
		wipe_free(key);
		free(out->chain_pem);
		memset(out, 0, sizeof(*out));
		return rc;
	}
	out->key_pem = key;
	return SG_OK;
}

/* The extensions of a self-signed serving certificate (see the header). */
static bool self_signed_extensions(X509 *x, const sg_softkey_request *r, EVP_PKEY *k, GENERAL_NAMES *gens)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
	const char *ku =
	    EVP_PKEY_is_a(k, "RSA") ? "critical,digitalSignature,keyEncipherment" : "critical,digitalSignature";
	char eku[64] = "";
	if (r->ext_key_usage & SG_EKU_SERVER_AUTH)
		strcat(eku, "serverAuth");
	if (r->ext_key_usage & SG_EKU_CLIENT_AUTH)
		strcat(eku, eku[0] ? ",clientAuth" : "clientAuth");
	const struct {
		int nid;
		const char *value;
	} exts[] = {
	    {NID_basic_constraints, "critical,CA:FALSE"},
	    {NID_key_usage, ku},
	    {NID_ext_key_usage, eku},
	    {NID_subject_key_identifier, "hash"},
	};
	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		if (!exts[i].value[0])
			continue;
		X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, exts[i].nid, exts[i].value);
		bool ok = e && X509_add_ext(x, e, -1) == 1;
		X509_EXTENSION_free(e);
		if (!ok)
			return false;
	}
	return X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT) == 1;
}

int sg_softkey_self_signed(const sg_softkey_request *r, char **key, char **cert)
{
	*key = *cert = NULL;
	SG_TRY(check_request(r));
	SG_ENSURE(r->ttl > 0 && r->ttl <= 10 * 366 * 86400, SG_EINVAL,
	          "a self-signed certificate's ttl must be 1 s to 10 years");
	uint8_t serial[16];
	SG_TRY(sg_crypto_random(serial, sizeof(serial)));
	serial[0] &= 0x7f; /* positive, as RFC 5280 4.1.2.2 asks */
	serial[0] |= 0x40; /* and of the full 16 bytes */
	ERR_clear_error();
	EVP_PKEY *k = make_key(r);
	X509 *x = X509_new();
	X509_NAME *subj = X509_NAME_new();
	GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
	BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), NULL);
	ASN1_INTEGER *sn = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
	BIO *b = BIO_new(BIO_s_mem());
	time_t now = (time_t)sg_wall_seconds();
	bool ok = k && x && subj && gens && sn && b && X509_set_version(x, X509_VERSION_3) == 1 &&
	          X509_set_serialNumber(x, sn) == 1 && fill_names(r, subj, gens);
	ok = ok && X509_set_subject_name(x, subj) == 1 && X509_set_issuer_name(x, subj) == 1 &&
	     X509_time_adj_ex(X509_getm_notBefore(x), 0, -300, &now) &&
	     X509_time_adj_ex(X509_getm_notAfter(x), 0, (long)r->ttl, &now) && X509_set_pubkey(x, k) == 1 &&
	     self_signed_extensions(x, r, k, gens) && X509_sign(x, k, EVP_sha256()) > 0 &&
	     PEM_write_bio_X509(b, x) == 1;
	*cert = ok ? bio_string(b) : NULL;
	int rc = *cert ? SG_OK : sg_error_set_ossl(SG_EINTERNAL, "cannot make a self-signed certificate");
	if (rc == SG_OK)
		rc = key_pem(k, true, key);
	if (rc < 0) {
		free(*cert);
		*cert = NULL;
	}
	BIO_free(b);
	ASN1_INTEGER_free(sn);
	BN_free(bn);
	GENERAL_NAMES_free(gens);
	X509_NAME_free(subj);
	X509_free(x);
	EVP_PKEY_free(k);
	return rc;
}

void sg_softkey_result_clear(sg_softkey_result *r)
{
	wipe_free(r->key_pem);
	free(r->chain_pem);
	memset(r, 0, sizeof(*r));
}
