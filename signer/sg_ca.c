/*
 * Loading CA material. This runs once at start-up (and on reload), so it
 * uses OpenSSL's X509 objects and chain verification freely; what the hot
 * path needs (issuer Name DER, key identifier, algorithm, validity, the PEM
 * chain elements) is extracted here into plain bytes.
 */
#include "sg_ca.h"
#include "sg_crypto.h"
#include "sg_csr.h"
#include "sg_guard.h"
#include "sg_ossl.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CHAIN 8
_Static_assert(MAX_CHAIN == SG_CA_BUNDLE_MAX, "sg_ca.h promises the bundle limit");
#define MAX_PEM_FILE (256 * 1024)

struct sg_ca {
	sg_cert_issuer issuer;
	uint8_t *name_der;
	uint8_t key_id[20];
	uint8_t *spki;
	size_t spki_len;
	sg_pubkey pubkey;
	sg_key_type key_type;
	char *elems[MAX_CHAIN + 2];
	size_t elem_lens[MAX_CHAIN + 2];
	size_t n_elems;
	char *root_pem;
	char *cert_pem;     /* the CA certificate, also when it is a root */
	size_t n_inter;     /* elems[first_inter .. first_inter + n_inter): intermediates */
	size_t first_inter;
	/* The root the CA's own chain ends at (its anchor), not every root
	 * of the bundle: see sg_ca_root_not_after. */
	uint8_t *root_der;
	size_t root_der_len;
	int64_t root_not_before;
	int64_t root_not_after;
	int64_t chain_not_after;
	char subject[256];
	char root_subject[256];
};

static void free_certs(STACK_OF(X509) **sk)
{
	sk_X509_pop_free(*sk, X509_free);
}

static int64_t asn1_seconds(const ASN1_TIME *t)
{
	int days = 0, secs = 0;
	ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
	if (!epoch || !ASN1_TIME_diff(&days, &secs, epoch, t))
		days = secs = 0;
	ASN1_TIME_free(epoch);
	return (int64_t)days * 86400 + secs;
}

/* Reads every CERTIFICATE block of bio (consumed); at least one is
 * required. what names the source in messages. */
static int read_certs_bio(BIO *bio, const char *what, STACK_OF(X509) **out)
{
	STACK_OF(X509) *sk = sk_X509_new_null();
	X509 *x;
	ERR_clear_error();
	while (sk && sk_X509_num(sk) <= MAX_CHAIN && (x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
		if (!sk_X509_push(sk, x))
			X509_free(x);
	BIO_free(bio);
	unsigned long e = ERR_peek_last_error();
	if (ERR_GET_REASON(e) == PEM_R_NO_START_LINE)
		ERR_clear_error();
	if (!sk || sk_X509_num(sk) == 0 || ERR_peek_error()) {
		sk_X509_pop_free(sk, X509_free);
		return sg_error_set_ossl(SG_EINVAL, "%s holds no valid PEM certificate", what);
	}
	if (sk_X509_num(sk) > MAX_CHAIN) {
		sk_X509_pop_free(sk, X509_free);
		SG_BAIL(SG_EINVAL, "%s holds more than %d certificates", what, MAX_CHAIN);
	}
	*out = sk;
	return SG_OK;
}

/* Reads every CERTIFICATE block of a PEM file; at least one is required. */
static int read_certs(const char *path, STACK_OF(X509) **out)
{
	BIO *bio = BIO_new_file(path, "r");
	SG_ENSURE(bio, SG_ENOTFOUND, "cannot read %s", path);
	return read_certs_bio(bio, path, out);
}

static int pem_of(X509 *x, char **out, size_t *len)
{
	unsigned char *der = NULL;
	int n = i2d_X509(x, &der);
	SG_ENSURE(n > 0, SG_EINTERNAL, "cannot encode a certificate");
	int rc = sg_pem_encode("CERTIFICATE", der, (size_t)n, out, len);
	OPENSSL_free(der);
	return rc;
}

static bool same_cert(X509 *a, X509 *b)
{
	return X509_cmp(a, b) == 0;
}

static int check_ca_cert(X509 *cert, const char *path, int64_t now)
{
	SG_ENSURE(X509_check_ca(cert) >= 1, SG_EINVAL, "%s is not a CA certificate (basicConstraints CA:TRUE)", path);
	uint32_t ku = X509_get_key_usage(cert);
	SG_ENSURE(ku == UINT32_MAX || (ku & KU_KEY_CERT_SIGN), SG_EINVAL, "%s lacks keyUsage keyCertSign", path);
	int64_t nb = asn1_seconds(X509_get0_notBefore(cert)), na = asn1_seconds(X509_get0_notAfter(cert));
	SG_ENSURE(now >= nb, SG_EINVAL, "CA certificate %s is not valid yet", path);
	SG_ENSURE(now < na, SG_EINVAL, "CA certificate %s has expired", path);
	return SG_OK;
}

/* Verifies cert (+ chain) to a root of roots at the current time; *anchor
 * (when asked for) is the root the verified path ends at, which the
 * caller frees. */
static int verify_chain(X509 *cert, STACK_OF(X509) * chain, STACK_OF(X509) * roots, const char *root_path,
                        X509 **anchor)
{
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	int rc = SG_EINTERNAL;
	SG_ENSURE_GOTO(rc, store && ctx, out, SG_EINTERNAL, "out of memory");
	for (int i = 0; i < sk_X509_num(roots); i++)
		SG_ENSURE_GOTO(rc, X509_STORE_add_cert(store, sk_X509_value(roots, i)) == 1, out, SG_EINTERNAL,
			       "cannot add a root");
	SG_ENSURE_GOTO(rc, X509_STORE_CTX_init(ctx, store, cert, chain) == 1, out, SG_EINTERNAL,
		       "cannot set up chain verification");
	if (X509_verify_cert(ctx) != 1) {
		int err = X509_STORE_CTX_get_error(ctx);
		rc = sg_error_set(SG_EINVAL, "CA certificate does not chain to a root of %s: %s", root_path,
				  X509_verify_cert_error_string(err));
		goto out;
	}
	if (anchor) {
		STACK_OF(X509) *path = X509_STORE_CTX_get0_chain(ctx);
		X509 *top = path ? sk_X509_value(path, sk_X509_num(path) - 1) : NULL;
		SG_ENSURE_GOTO(rc, top && X509_up_ref(top) == 1, out, SG_EINTERNAL, "no verified chain");
		*anchor = top;
	}
	rc = SG_OK;
out:
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	return rc;
}

static int add_elem(sg_ca *ca, X509 *x)
{
	SG_ENSURE(ca->n_elems < MAX_CHAIN + 1, SG_EINVAL, "CA chain too long");
	SG_TRY(pem_of(x, &ca->elems[ca->n_elems], &ca->elem_lens[ca->n_elems]));
	ca->n_elems++;
	int64_t na = asn1_seconds(X509_get0_notAfter(x));
	if (ca->chain_not_after == 0 || na < ca->chain_not_after)
		ca->chain_not_after = na;
	return SG_OK;
}

static void free_cert(X509 **x)
{
	X509_free(*x);
}

/* The anchor's expiry is the CA's: every chain it hands out ends there.
 * Another root of the bundle (the other half of a rotation's overlap)
 * may expire first without making the CA's certificates unverifiable,
 * so it does not count here (sg_ca_bundle_roots describes it). */
static int note_anchor(sg_ca *ca, X509 *anchor)
{
	unsigned char *der = NULL;
	int n = i2d_X509(anchor, &der);
	SG_ENSURE(n > 0, SG_EINTERNAL, "cannot encode the CA's root");
	ca->root_der = malloc((size_t)n);
	if (ca->root_der)
		memcpy(ca->root_der, der, (size_t)n);
	OPENSSL_free(der);
	SG_ENSURE(ca->root_der, SG_EINTERNAL, "out of memory");
	ca->root_der_len = (size_t)n;
	ca->root_not_before = asn1_seconds(X509_get0_notBefore(anchor));
	ca->root_not_after = asn1_seconds(X509_get0_notAfter(anchor));
	X509_NAME_oneline(X509_get_subject_name(anchor), ca->root_subject, sizeof(ca->root_subject));
	return SG_OK;
}

static bool in_stack(STACK_OF(X509) *sk, X509 *x)
{
	for (int i = 0; i < sk_X509_num(sk); i++)
		if (same_cert(sk_X509_value(sk, i), x))
			return true;
	return false;
}

static int build(sg_ca *ca, const sg_ca_files *f, const uint8_t *hsm_spki, size_t spki_len, int64_t now)
{
	STACK_OF(X509) *certs SG_CLEANUP(free_certs) = NULL;
	STACK_OF(X509) *chain SG_CLEANUP(free_certs) = NULL;
	STACK_OF(X509) *roots SG_CLEANUP(free_certs) = NULL;
	SG_TRY(read_certs(f->cert, &certs));
	SG_ENSURE(sk_X509_num(certs) == 1, SG_EINVAL, "%s must hold exactly one certificate", f->cert);
	X509 *cert = sk_X509_value(certs, 0);
	SG_TRY(read_certs(f->root, &roots));
	if (f->chain && *f->chain)
		SG_TRY(read_certs(f->chain, &chain));
	else
		SG_ENSURE(chain = sk_X509_new_null(), SG_EINTERNAL, "out of memory");

	SG_TRY(check_ca_cert(cert, f->cert, now));
	unsigned char *der = NULL;
	int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
	bool match = n > 0 && (size_t)n == spki_len && memcmp(der, hsm_spki, spki_len) == 0;
	OPENSSL_free(der);
	SG_ENSURE(match, SG_EINVAL, "the public key of %s is not the HSM key", f->cert);
	X509 *anchor SG_CLEANUP(free_cert) = NULL;
	SG_TRY(verify_chain(cert, chain, roots, f->root, &anchor));
	SG_TRY(note_anchor(ca, anchor));

	/* Plain bytes for the hot path. */
	n = i2d_X509_NAME(X509_get_subject_name(cert), &ca->name_der);
	SG_ENSURE(n > 0, SG_EINTERNAL, "cannot encode the CA subject");
	ca->issuer.name_der = (sg_slice){ca->name_der, (size_t)n};
	SG_ENSURE(ca->spki = malloc(spki_len), SG_EINTERNAL, "out of memory");
	memcpy(ca->spki, hsm_spki, spki_len);
	ca->spki_len = spki_len;
	SG_TRY(sg_pubkey_parse(&ca->pubkey, ca->spki, ca->spki_len));
	SG_TRY(sg_pubkey_ca_type(&ca->pubkey, &ca->key_type));
	const ASN1_OCTET_STRING *skid = X509_get0_subject_key_id(cert);
	if (skid && ASN1_STRING_length(skid) == 20) {
		memcpy(ca->key_id, ASN1_STRING_get0_data(skid), 20);
	} else {
		sg_crypto *c = NULL;
		SG_TRY(sg_crypto_new(&c));
		int rc = sg_key_id(c, &ca->pubkey, ca->key_id);
		sg_crypto_free(c);
		SG_TRY(rc);
	}
	ca->issuer.key_id = (sg_slice){ca->key_id, 20};
	ca->issuer.sigalg = sg_sigalg_for_ca(ca->key_type);
	ca->issuer.not_before = asn1_seconds(X509_get0_notBefore(cert));
	ca->issuer.not_after = asn1_seconds(X509_get0_notAfter(cert));
	X509_NAME_oneline(X509_get_subject_name(cert), ca->subject, sizeof(ca->subject));

	/* Chain elements: the CA certificate unless it is a root we hand out
	 * anyway, the intermediates (roots dropped), then the bundle. */
	size_t cert_len;
	SG_TRY(pem_of(cert, &ca->cert_pem, &cert_len));
	if (!in_stack(roots, cert))
		SG_TRY(add_elem(ca, cert));
	ca->first_inter = ca->n_elems;
	for (int i = 0; i < sk_X509_num(chain); i++)
		if (!in_stack(roots, sk_X509_value(chain, i)))
			SG_TRY(add_elem(ca, sk_X509_value(chain, i)));
	ca->n_inter = ca->n_elems - ca->first_inter;
	size_t total = 0;
	for (int i = 0; i < sk_X509_num(roots); i++) {
		char *pem;
		size_t len;
		SG_TRY(pem_of(sk_X509_value(roots, i), &pem, &len));
		char *grown = realloc(ca->root_pem, total + len + 1);
		if (!grown) {
			free(pem);
			SG_BAIL(SG_EINTERNAL, "out of memory");
		}
		memcpy(grown + total, pem, len + 1);
		free(pem);
		ca->root_pem = grown;
		total += len;
	}
	ca->elems[ca->n_elems] = ca->root_pem;
	ca->elem_lens[ca->n_elems] = total;
	ca->n_elems++;
	if (ca->chain_not_after == 0 || ca->root_not_after < ca->chain_not_after)
		ca->chain_not_after = ca->root_not_after;
	return SG_OK;
}

int sg_ca_load(sg_ca **out, const sg_ca_files *files, const uint8_t *hsm_spki, size_t spki_len, int64_t now)
{
	SG_ENSURE(files && files->cert && files->root, SG_EINVAL, "CA certificate and root files are required");
	sg_ca *ca = calloc(1, sizeof(*ca));
	SG_ENSURE(ca, SG_EINTERNAL, "out of memory");
	int rc = build(ca, files, hsm_spki, spki_len, now);
	if (rc < 0) {
		sg_ca_free(ca);
		return rc;
	}
	*out = ca;
	return SG_OK;
}

void sg_ca_free(sg_ca *ca)
{
	if (!ca)
		return;
	/* The last element is root_pem; free it once. */
	for (size_t i = 0; i < ca->n_elems; i++)
		if (ca->elems[i] != ca->root_pem)
			free(ca->elems[i]);
	free(ca->root_pem);
	free(ca->cert_pem);
	free(ca->root_der);
	OPENSSL_free(ca->name_der);
	free(ca->spki);
	free(ca);
}

const sg_cert_issuer *sg_ca_issuer(const sg_ca *ca)
{
	return &ca->issuer;
}

const sg_pubkey *sg_ca_pubkey(const sg_ca *ca)
{
	return &ca->pubkey;
}

sg_key_type sg_ca_key_type(const sg_ca *ca)
{
	return ca->key_type;
}

void sg_ca_chain(const sg_ca *ca, const char *const **elems, const size_t **lens, size_t *n)
{
	*elems = (const char *const *)ca->elems;
	*lens = ca->elem_lens;
	*n = ca->n_elems;
}

const char *sg_ca_root_pem(const sg_ca *ca)
{
	return ca->root_pem;
}

int64_t sg_ca_root_not_after(const sg_ca *ca)
{
	return ca->root_not_after;
}

int64_t sg_ca_root_not_before(const sg_ca *ca)
{
	return ca->root_not_before;
}

const char *sg_ca_root_subject(const sg_ca *ca)
{
	return ca->root_subject;
}

int64_t sg_ca_chain_not_after(const sg_ca *ca)
{
	return ca->chain_not_after;
}

const char *sg_ca_subject(const sg_ca *ca)
{
	return ca->subject;
}

static X509 *cert_of_pem(const char *pem)
{
	BIO *bio = BIO_new_mem_buf(pem, -1);
	X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	return x;
}

int sg_ca_check_bundle(const sg_ca *ca, const char *pem, size_t len, const char *what)
{
	SG_ENSURE(len > 0 && len <= INT32_MAX, SG_EINVAL, "%s is empty or too large", what);
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	SG_ENSURE(bio, SG_EINTERNAL, "out of memory");
	STACK_OF(X509) *roots SG_CLEANUP(free_certs) = NULL;
	SG_TRY(read_certs_bio(bio, what, &roots));
	if (!ca)
		return SG_OK; /* no CA of our own (an RA without an HSM): nothing must chain to it */
	STACK_OF(X509) *chain SG_CLEANUP(free_certs) = sk_X509_new_null();
	X509 *cert = cert_of_pem(ca->cert_pem);
	int rc = chain && cert ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	for (size_t i = 0; rc == SG_OK && i < ca->n_inter; i++) {
		X509 *x = cert_of_pem(ca->elems[ca->first_inter + i]);
		if (!x || !sk_X509_push(chain, x)) {
			X509_free(x);
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
		}
	}
	if (rc == SG_OK)
		rc = verify_chain(cert, chain, roots, what, NULL);
	X509_free(cert);
	return rc;
}

int sg_ca_bundle_roots(const sg_ca *ca, const char *pem, size_t len, sg_ca_root_info *out, size_t cap, size_t *n)
{
	*n = 0;
	SG_ENSURE(len > 0 && len <= INT32_MAX, SG_EINVAL, "root bundle is empty or too large");
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	SG_ENSURE(bio, SG_EINTERNAL, "out of memory");
	STACK_OF(X509) * roots SG_CLEANUP(free_certs) = NULL;
	SG_TRY(read_certs_bio(bio, "root bundle", &roots));
	for (int i = 0; i < sk_X509_num(roots) && *n < cap; i++) {
		X509 *x = sk_X509_value(roots, i);
		sg_ca_root_info *r = &out[(*n)++];
		r->not_before = asn1_seconds(X509_get0_notBefore(x));
		r->not_after = asn1_seconds(X509_get0_notAfter(x));
		X509_NAME_oneline(X509_get_subject_name(x), r->subject, sizeof(r->subject));
		unsigned char *der = NULL;
		int dl = i2d_X509(x, &der);
		SG_ENSURE(dl > 0, SG_EINTERNAL, "cannot encode a root");
		r->is_ca_root =
		    ca && (size_t)dl == ca->root_der_len && memcmp(der, ca->root_der, ca->root_der_len) == 0;
		OPENSSL_free(der);
	}
	return SG_OK;
}
