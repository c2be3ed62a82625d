/*
 * Test helper: a throwaway self-signed P-256 CA certificate as PEM, for
 * tests that need "some other root" (root bundles, rotations). OpenSSL's
 * own builder, not our encoder. Header-only: each test is its own program.
 */
#ifndef SELF_SIGNED_H
#define SELF_SIGNED_H

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <string.h>

/* Valid for a day from now; caller frees. NULL when OpenSSL fails. */
static inline char *test_self_signed_pem(const char *cn)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509 *x = X509_new();
	BIO *b = BIO_new(BIO_s_mem());
	char *out = NULL;
	if (key && x && b) {
		X509_set_version(x, 2);
		ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
		X509_gmtime_adj(X509_getm_notBefore(x), 0);
		X509_gmtime_adj(X509_getm_notAfter(x), 86400);
		X509_NAME *n = X509_get_subject_name(x);
		X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
		X509_set_issuer_name(x, n);
		X509_set_pubkey(x, key);
		char *p;
		long len;
		if (X509_sign(x, key, EVP_sha256()) > 0 && PEM_write_bio_X509(b, x) == 1 &&
		    (len = BIO_get_mem_data(b, &p)) > 0)
			out = strndup(p, (size_t)len);
	}
	BIO_free(b);
	X509_free(x);
	EVP_PKEY_free(key);
	return out;
}

#endif
