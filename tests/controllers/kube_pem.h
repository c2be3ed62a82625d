/*
 * kube_pem: what the controllers' kube tests do with the PEM and base64
 * that Kubernetes objects carry ([]byte fields are base64 of PEM): read a
 * file, encode and decode base64 with OpenSSL (not with the code under
 * test), split a PEM chain into certificates, and read a certificate's
 * extKeyUsage purposes as OpenSSL sees them. Header-only: each test file
 * is its own program.
 */
#ifndef KUBE_PEM_H
#define KUBE_PEM_H

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A text file (at most 1 MiB), NUL-terminated; caller frees. NULL when it
 * cannot be read. */
static inline char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *buf = calloc(1, 1 << 20);
	size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	fclose(f);
	if (buf)
		buf[n] = 0;
	return buf;
}

/* n bytes of s as standard base64; caller frees. */
static inline char *b64n(const char *s, size_t n)
{
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	if (out)
		EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
	return out;
}

/* Standard base64 decoded, NUL-terminated; caller frees. NULL for NULL,
 * empty or malformed input. */
static inline char *unb64(const char *v)
{
	size_t n = v ? strlen(v) : 0;
	if (n == 0 || n % 4)
		return NULL;
	unsigned char *out = malloc(n / 4 * 3 + 1);
	if (!out)
		return NULL;
	int got = EVP_DecodeBlock(out, (const unsigned char *)v, (int)n);
	if (got < 0) {
		free(out);
		return NULL;
	}
	got -= (v[n - 1] == '=') + (v[n - 2] == '=');
	out[got] = 0;
	return (char *)out;
}

/* Every certificate of a PEM text, in order; caller frees with
 * sk_X509_pop_free(sk, X509_free). */
static inline STACK_OF(X509) * certs_of(const char *pem)
{
	STACK_OF(X509) *sk = sk_X509_new_null();
	BIO *b = BIO_new_mem_buf(pem, -1);
	X509 *x;
	while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
		sk_X509_push(sk, x);
	ERR_clear_error();
	BIO_free(b);
	return sk;
}

/* x's extKeyUsage purposes as dotted OIDs, each followed by a space, in
 * the certificate's order ("" without the extension), in out (cap bytes). */
static inline const char *eku_oids(X509 *x, char *out, size_t cap)
{
	out[0] = 0;
	EXTENDED_KEY_USAGE *eku = X509_get_ext_d2i(x, NID_ext_key_usage, NULL, NULL);
	for (int i = 0; eku && i < sk_ASN1_OBJECT_num(eku); i++) {
		char oid[80];
		OBJ_obj2txt(oid, sizeof(oid), sk_ASN1_OBJECT_value(eku, i), 1);
		size_t n = strlen(out);
		snprintf(out + n, cap - n, "%s ", oid);
	}
	EXTENDED_KEY_USAGE_free(eku);
	return out;
}

/* Every purpose cert-manager's API names (its KeyUsage enum's extended
 * ones, in the order we write them: id-kp 1..9, any, Microsoft's and
 * Netscape's SGC), and their names in that API, in the same order. */
#define ALL_EKU_OIDS                                                                                                   \
	"1.3.6.1.5.5.7.3.1 1.3.6.1.5.5.7.3.2 1.3.6.1.5.5.7.3.3 1.3.6.1.5.5.7.3.4 1.3.6.1.5.5.7.3.5 "                   \
	"1.3.6.1.5.5.7.3.6 1.3.6.1.5.5.7.3.7 1.3.6.1.5.5.7.3.8 1.3.6.1.5.5.7.3.9 2.5.29.37.0 "                         \
	"1.3.6.1.4.1.311.10.3.3 2.16.840.1.113730.4.1 "
#define ALL_EKU_NAMES                                                                                                  \
	"\"server auth\", \"client auth\", \"code signing\", \"email protection\", \"ipsec end system\", "             \
	"\"ipsec tunnel\", \"ipsec user\", \"timestamping\", \"ocsp signing\", \"any\", \"microsoft sgc\", "           \
	"\"netscape sgc\", \"s/mime\""
/* Every keyUsage name of the API that a leaf may carry, and the bits
 * OpenSSL reports for them (X509_get_key_usage). */
#define ALL_KU_NAMES                                                                                                   \
	"\"signing\", \"digital signature\", \"content commitment\", \"key encipherment\", \"key agreement\", "        \
	"\"data encipherment\", \"encipher only\", \"decipher only\""
#define ALL_KU_BITS                                                                                                    \
	(KU_DIGITAL_SIGNATURE | KU_NON_REPUDIATION | KU_KEY_ENCIPHERMENT | KU_KEY_AGREEMENT | KU_DATA_ENCIPHERMENT |   \
	 KU_ENCIPHER_ONLY | KU_DECIPHER_ONLY)

#endif
