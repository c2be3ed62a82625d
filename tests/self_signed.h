/*
 * Test helpers: throwaway self-signed P-256 certificates as PEM, for tests
 * that need "some other root" (root bundles, rotations) or certificates of
 * a given validity and kind (trust bundles' filters), and certificates a
 * test's own root signs for a given key (a CA re-certified under it).
 * OpenSSL's own builder, not our encoder. Header-only: each test is its
 * own program.
 */
#ifndef SELF_SIGNED_H
#define SELF_SIGNED_H

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <string.h>

/* A certificate for key's public key, CN=cn, valid from now+from_s to
 * now+to_s, a CA (basicConstraints cA TRUE, keyCertSign) or not, signed
 * by issuer_key under issuer's name (issuer NULL: self-signed, key must
 * then be a private key). Caller frees; NULL when OpenSSL fails. */
static inline X509 *test_cert_new(const char *cn, bool is_ca, long from_s, long to_s, EVP_PKEY *key, X509 *issuer,
                                  EVP_PKEY *issuer_key)
{
	static long serial; /* distinct serials within one test program */
	X509 *x = X509_new();
	if (!x)
		return NULL;
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), ++serial);
	X509_gmtime_adj(X509_getm_notBefore(x), from_s);
	X509_gmtime_adj(X509_getm_notAfter(x), to_s);
	X509_NAME *n = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n);
	X509_set_pubkey(x, key);
	X509V3_CTX v3;
	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
	X509_EXTENSION *bc =
	    X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
	X509_EXTENSION *ku = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage,
	                                         is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
	bool ok = bc && ku && X509_add_ext(x, bc, -1) == 1 && X509_add_ext(x, ku, -1) == 1;
	X509_EXTENSION_free(bc);
	X509_EXTENSION_free(ku);
	if (!ok || X509_sign(x, issuer ? issuer_key : key, EVP_sha256()) <= 0) {
		X509_free(x);
		return NULL;
	}
	return x;
}

/* x as PEM; caller frees. NULL when OpenSSL fails. */
static inline char *test_cert_to_pem(X509 *x)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *out = NULL, *p;
	long len;
	if (b && x && PEM_write_bio_X509(b, x) == 1 && (len = BIO_get_mem_data(b, &p)) > 0)
		out = strndup(p, (size_t)len);
	BIO_free(b);
	return out;
}

/* A self-signed P-256 certificate valid from now+from_s to now+to_s, a CA
 * (basicConstraints cA TRUE, keyCertSign) or not; caller frees. */
static inline char *test_cert_pem(const char *cn, bool is_ca, long from_s, long to_s)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509 *x = key ? test_cert_new(cn, is_ca, from_s, to_s, key, NULL, NULL) : NULL;
	char *out = test_cert_to_pem(x);
	X509_free(x);
	EVP_PKEY_free(key);
	return out;
}

/* A CA valid for a day from now; caller frees. NULL when OpenSSL fails. */
static inline char *test_self_signed_pem(const char *cn)
{
	return test_cert_pem(cn, true, 0, 86400);
}

#endif
