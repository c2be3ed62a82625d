/*
 * kube_pem: what the controllers' kube tests do with the PEM and base64
 * that Kubernetes objects carry ([]byte fields are base64 of PEM): read a
 * file, encode and decode base64 with OpenSSL (not with the code under
 * test), and split a PEM chain into certificates. Header-only: each test
 * file is its own program.
 */
#ifndef KUBE_PEM_H
#define KUBE_PEM_H

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
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

#endif
