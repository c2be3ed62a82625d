/*
 * Test helpers on OpenSSL's own code, so that what is under test was not
 * written by our encoder: CSRs made with X509_REQ, and issued chains
 * checked with OpenSSL's verifier. Header-only: each test file is its own
 * program. Used by ca_fixture.h and by tests that make their CA otherwise.
 */
#ifndef OPENSSL_FIXTURE_H
#define OPENSSL_FIXTURE_H

#include "sg_issuer.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CSR like istio-agent's: empty O=, one critical URI SAN, SHA-256. */
typedef struct csr_opts {
	const char *alg;     /* "EC" or "RSA" */
	const char *param;   /* "P-256" / 2048 as text */
	const char *san;     /* X509V3 SAN text, e.g. "critical,URI:spiffe://..."; NULL: none */
	const char *cn;      /* subject CN; NULL: the istio-agent O= form */
	bool ca;             /* add basicConstraints CA:TRUE */
	const char *ku;      /* keyUsage text, e.g. "critical,digitalSignature"; NULL: none */
	bool comment;        /* add a Netscape comment extension (neither SAN, KU nor EKU) */
} csr_opts;

static inline char *make_csr(const csr_opts *o, size_t *len)
{
	EVP_PKEY *k = strcmp(o->alg, "EC") == 0 ? EVP_PKEY_Q_keygen(NULL, NULL, "EC", o->param)
						: EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)atoi(o->param));
	X509_REQ *r = X509_REQ_new();
	X509_NAME *n = X509_NAME_new();
	if (o->cn)
		X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)o->cn, -1, -1, 0);
	else
		X509_NAME_add_entry_by_txt(n, "O", V_ASN1_PRINTABLESTRING, (const unsigned char *)"", 0, -1, 0);
	X509_REQ_set_subject_name(r, n);
	X509_REQ_set_pubkey(r, k);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	if (o->san)
		sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, o->san));
	if (o->ca)
		sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_basic_constraints, "critical,CA:TRUE"));
	if (o->ku)
		sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_key_usage, o->ku));
	if (o->comment)
		sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_netscape_comment, "hello"));
	if (sk_X509_EXTENSION_num(exts))
		X509_REQ_add_extensions(r, exts);
	X509_REQ_sign(r, k, EVP_sha256());
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509_REQ(b, r);
	char *p;
	long l = BIO_get_mem_data(b, &p);
	char *out = malloc((size_t)l + 1);
	memcpy(out, p, (size_t)l);
	out[l] = 0;
	*len = (size_t)l;
	BIO_free(b);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_NAME_free(n);
	X509_REQ_free(r);
	EVP_PKEY_free(k);
	return out;
}

/* Verifies a PEM chain (leaf first, root bundle last) against the root file
 * with OpenSSL's verifier; returns the parsed leaf (caller frees) or NULL. */
static inline X509 *verify_chain(const sg_issue_result *res, const char *root_file)
{
	char *joined = NULL;
	if (sg_issue_result_join(res, &joined) != 0)
		return NULL;
	BIO *b = BIO_new_mem_buf(joined, -1);
	X509 *leaf = PEM_read_bio_X509(b, NULL, NULL, NULL);
	STACK_OF(X509) *rest = sk_X509_new_null();
	X509 *x;
	while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
		sk_X509_push(rest, x);
	ERR_clear_error();
	BIO_free(b);
	free(joined);
	X509_STORE *st = X509_STORE_new();
	X509_STORE_load_file(st, root_file);
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_STORE_CTX_init(ctx, st, leaf, rest);
	int ok = X509_verify_cert(ctx);
	if (ok != 1)
		fprintf(stderr, "verify: %s\n", X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	sk_X509_pop_free(rest, X509_free);
	if (ok != 1) {
		X509_free(leaf);
		return NULL;
	}
	return leaf;
}

#endif
