/*
 * Certificates read from PEM (sg_x509.h). This runs when files are
 * (re)loaded and about once an hour for istiod's certificate, never per
 * request, so it uses OpenSSL's X509 objects and chain verification freely,
 * as sg_ca.c does for CA material.
 *
 * Reading a bundle: PEM_bytes_read_bio finds the next CERTIFICATE block
 * (skipping text and other blocks) and decodes its base64; d2i_X509 then
 * decodes the DER, and the block must be that one certificate and nothing
 * more (PEM_read_bio_X509 would ignore bytes after it). The reader fails
 * both at the end of the text and on a broken block; the reason tells them
 * apart: PEM_R_NO_START_LINE means no BEGIN line is left. Before any of
 * this the text is checked for its length, NUL bytes and the number of
 * "-----BEGIN " lines, which bounds what OpenSSL allocates and sizes our
 * array once.
 *
 * Times become Unix seconds through ASN1_TIME_to_tm and sg_days_from_civil:
 * pure arithmetic, no time zone, and no allocation per call.
 */
#include "sg_x509.h"

#include "sg_clock.h"
#include "sg_crypto_impl.h"
#include "sg_csr.h"
#include "sg_guard.h"
#include "sg_ossl.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sg_x509_bundle {
	size_t n;
	X509 *certs[]; /* n used; room for as many as the text has BEGIN lines */
};

static void bundle_freep(sg_x509_bundle **b)
{
	sg_x509_bundle_free(*b);
}

/* An encrypted PEM block is not ours to open; never ask a terminal. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return -1;
}

/* Bounds and NUL bytes, before OpenSSL sees a byte. */
static int check_text(const char *p, size_t len, const char *what)
{
	SG_ENSURE(p && len > 0, SG_EINVAL, "%s is empty", what);
	SG_ENSURE(len <= SG_X509_PEM_MAX, SG_EINVAL, "%s is %zu bytes, more than %u", what, len, SG_X509_PEM_MAX);
	SG_ENSURE(!memchr(p, 0, len), SG_EINVAL, "%s holds a NUL byte", what);
	return SG_OK;
}

/* "-----BEGIN " lines, and a few more (it counts the marker anywhere): an
 * upper bound on the blocks OpenSSL's reader can find. */
static size_t count_begins(const char *p, size_t len)
{
	static const char begin[] = "-----BEGIN ";
	const size_t blen = sizeof(begin) - 1;
	size_t n = 0;
	for (size_t i = 0; i + blen <= len; i++) {
		if (p[i] == '-' && memcmp(p + i, begin, blen) == 0) {
			n++;
			i += blen - 1;
		}
	}
	return n;
}

/* The next certificate of bio into *out, or *out NULL at the end. num
 * counts certificates from 1, for messages. */
static int read_cert(BIO *bio, size_t num, X509 **out)
{
	*out = NULL;
	unsigned char *der = NULL;
	char *name = NULL;
	long len = 0;
	if (PEM_bytes_read_bio(&der, &len, &name, PEM_STRING_X509, bio, no_passphrase, NULL) != 1) {
		unsigned long e = ERR_peek_last_error();
		if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
			ERR_clear_error();
			return SG_OK;
		}
		return sg_error_set_ossl(SG_EINVAL, "PEM certificate number %zu is malformed", num);
	}
	const unsigned char *p = der;
	X509 *x = d2i_X509(NULL, &p, len);
	bool whole = x && p == der + len;
	OPENSSL_free(der);
	OPENSSL_free(name);
	if (!whole) {
		X509_free(x);
		return sg_error_set_ossl(SG_EINVAL, "PEM certificate number %zu is not exactly one DER certificate",
					 num);
	}
	*out = x;
	return SG_OK;
}

int sg_x509_bundle_parse(sg_x509_bundle **out, const char *pem, size_t len)
{
	*out = NULL;
	SG_TRY(check_text(pem, len, "the certificate text"));
	size_t blocks = count_begins(pem, len);
	SG_ENSURE(blocks <= SG_X509_BUNDLE_MAX, SG_EINVAL, "the certificate text has %zu PEM blocks, more than %d",
		  blocks, SG_X509_BUNDLE_MAX);
	SG_ENSURE(blocks > 0, SG_EINVAL, "the text holds no PEM certificate");
	sg_x509_bundle *b SG_CLEANUP(bundle_freep) = calloc(1, sizeof(*b) + blocks * sizeof(X509 *));
	SG_ENSURE(b, SG_EINTERNAL, "out of memory");
	ERR_clear_error();
	BIO *bio SG_CLEANUP(sg_ossl_bio_freep) = BIO_new_mem_buf(pem, (int)len); /* read-only, no copy */
	if (!bio)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	for (;;) {
		X509 *x;
		SG_TRY(read_cert(bio, b->n + 1, &x));
		if (!x)
			break;
		if (b->n == blocks) { /* every block has a BEGIN line: cannot happen */
			X509_free(x);
			SG_BAIL(SG_EINTERNAL, "more certificates than PEM blocks");
		}
		b->certs[b->n++] = x;
	}
	SG_ENSURE(b->n > 0, SG_EINVAL, "the text holds no PEM certificate");
	*out = SG_MOVE(b);
	return SG_OK;
}

size_t sg_x509_bundle_count(const sg_x509_bundle *b)
{
	return b ? b->n : 0;
}

void sg_x509_bundle_free(sg_x509_bundle *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++)
		X509_free(b->certs[i]);
	free(b);
}

static X509 *cert_at(const sg_x509_bundle *b, size_t i)
{
	return b && i < b->n ? b->certs[i] : NULL;
}

/* ---- facts ---- */

static int seconds_of(const ASN1_TIME *t, const char *what, int64_t *out)
{
	struct tm tm;
	if (!t || ASN1_TIME_to_tm(t, &tm) != 1)
		return sg_error_set_ossl(SG_EINVAL, "the certificate's %s does not decode", what);
	int64_t days = sg_days_from_civil((int64_t)tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
	*out = days * 86400 + tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec;
	return SG_OK;
}

/* BN_bn2hex in lower case. */
static int serial_hex(X509 *x, char *out, size_t cap)
{
	BIGNUM *bn SG_CLEANUP(sg_ossl_bn_freep) = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	if (!bn)
		return sg_error_set_ossl(SG_EINVAL, "the certificate's serial number does not decode");
	SG_ENSURE(BN_num_bytes(bn) <= SG_X509_SERIAL_HEX_MAX / 2, SG_EINVAL,
		  "the certificate's serial number has %d octets, more than 20 (RFC 5280 §4.1.2.2)", BN_num_bytes(bn));
	char *h = BN_bn2hex(bn);
	if (!h)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	size_t n = strlen(h);
	if (n >= cap) { /* the octet bound above makes this impossible */
		OPENSSL_free(h);
		SG_BAIL(SG_EINTERNAL, "serial number of %zu hex digits does not fit", n);
	}
	for (size_t i = 0; i <= n; i++)
		out[i] = (char)(h[i] >= 'A' && h[i] <= 'F' ? h[i] - 'A' + 'a' : h[i]);
	OPENSSL_free(h);
	return SG_OK;
}

int sg_x509_get_facts(const sg_x509_bundle *b, size_t i, sg_x509_facts *out)
{
	memset(out, 0, sizeof(*out));
	X509 *x = cert_at(b, i);
	SG_ENSURE(x, SG_EINVAL, "no certificate %zu in a bundle of %zu", i, sg_x509_bundle_count(b));
	ERR_clear_error();
	SG_TRY(seconds_of(X509_get0_notBefore(x), "notBefore", &out->not_before));
	SG_TRY(seconds_of(X509_get0_notAfter(x), "notAfter", &out->not_after));
	SG_TRY(serial_hex(x, out->serial, sizeof(out->serial)));
	int crit = -1;
	BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	if (!bc && crit != -1) /* -1 is "absent"; otherwise undecodable or repeated */
		return sg_error_set_ossl(SG_EINVAL, "the certificate's basicConstraints is malformed or repeated");
	out->is_ca = bc && bc->ca;
	BASIC_CONSTRAINTS_free(bc);
	return SG_OK;
}

/* ---- names ---- */

static bool string_is(const ASN1_STRING *s, const char *want)
{
	size_t n = strlen(want);
	return s && (size_t)ASN1_STRING_length(s) == n && (n == 0 || memcmp(ASN1_STRING_get0_data(s), want, n) == 0);
}

static bool cn_is(X509 *x, const char *cn)
{
	const X509_NAME *subj = X509_get_subject_name(x);
	int idx = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
	const X509_NAME_ENTRY *e = idx >= 0 ? X509_NAME_get_entry(subj, idx) : NULL;
	return e && string_is(X509_NAME_ENTRY_get_data(e), cn);
}

/* How many DNS names of gens are name. */
static size_t dns_count(const GENERAL_NAMES *gens, const char *name)
{
	size_t n = 0;
	for (int i = 0; i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		n += g->type == GEN_DNS && string_is(g->d.dNSName, name);
	}
	return n;
}

static size_t list_count(const char *const *list, size_t n, const char *name)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += strcmp(list[i], name) == 0;
	return c;
}

/* The SAN's DNS names are dns as a multiset (as many of them, and each as
 * often), with exactly the one URI asked for and nothing else. */
static bool sans_are(X509 *x, const char *const *dns, size_t ndns, const char *uri)
{
	int crit = -1;
	GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
	if (!gens)
		return crit == -1 && ndns == 0 && !uri; /* absent: no names at all */
	size_t seen_dns = 0, seen_uri = 0;
	bool ok = true;
	for (int i = 0; ok && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		if (g->type == GEN_DNS)
			seen_dns++;
		else if (g->type == GEN_URI)
			ok = ++seen_uri == 1 && uri && string_is(g->d.uniformResourceIdentifier, uri);
		else
			ok = false;
	}
	ok = ok && seen_dns == ndns && seen_uri == (uri ? 1u : 0u);
	/* Equal sizes and equal counts of every listed name: equal multisets. */
	for (size_t d = 0; ok && d < ndns; d++)
		ok = dns_count(gens, dns[d]) == list_count(dns, ndns, dns[d]);
	GENERAL_NAMES_free(gens);
	return ok;
}

bool sg_x509_names_are(const sg_x509_bundle *b, size_t i, const char *cn, const char *const *dns, size_t ndns,
		       const char *uri)
{
	X509 *x = cert_at(b, i);
	bool ok = x && (!cn || cn_is(x, cn)) && sans_are(x, dns, ndns, uri);
	ERR_clear_error();
	return ok;
}

/* ---- chains ---- */

/* X509_verify_cert of chain against roots, at *at (Unix seconds) or now.
 * partial: a root need not be self-signed, and the verified path must
 * then hold more than the leaf (an anchor that is the leaf itself proves
 * nothing about who issued it). */
static bool verify_chain(const sg_x509_bundle *chain, const sg_x509_bundle *roots, const int64_t *at, bool partial)
{
	if (!cert_at(chain, 0) || !cert_at(roots, 0))
		return false;
	X509_STORE *st = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	STACK_OF(X509) *untrusted = sk_X509_new_null(); /* borrows chain's certificates */
	bool ok = st && ctx && untrusted;
	for (size_t i = 0; ok && i < roots->n; i++)
		ok = X509_STORE_add_cert(st, roots->certs[i]) == 1; /* takes its own reference */
	for (size_t i = 1; ok && i < chain->n; i++)
		ok = sk_X509_push(untrusted, chain->certs[i]) > 0;
	ok = ok && X509_STORE_CTX_init(ctx, st, chain->certs[0], untrusted) == 1;
	if (ok && at)
		X509_STORE_CTX_set_time(ctx, 0, (time_t)*at);
	if (ok && partial)
		X509_STORE_CTX_set_flags(ctx, X509_V_FLAG_PARTIAL_CHAIN);
	ok = ok && X509_verify_cert(ctx) == 1;
	ok = ok && (!partial || sk_X509_num(X509_STORE_CTX_get0_chain(ctx)) >= 2);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	sk_X509_free(untrusted);
	ERR_clear_error();
	return ok;
}

bool sg_x509_chains_to(const sg_x509_bundle *chain, const sg_x509_bundle *roots)
{
	return verify_chain(chain, roots, NULL, false);
}

bool sg_x509_chains_to_at(const sg_x509_bundle *chain, const sg_x509_bundle *roots, int64_t at)
{
	return verify_chain(chain, roots, &at, false);
}

bool sg_x509_holds(const sg_x509_bundle *set, const sg_x509_bundle *b, size_t i)
{
	X509 *x = cert_at(b, i);
	bool found = false;
	for (size_t j = 0; x && set && !found && j < set->n; j++)
		found = X509_cmp(set->certs[j], x) == 0; /* the DER's digests, then the DER */
	ERR_clear_error();
	return found;
}

bool sg_x509_chains_to_anchors_at(const sg_x509_bundle *chain, const sg_x509_bundle *anchors, int64_t at)
{
	return verify_chain(chain, anchors, &at, true);
}

/* ---- public keys and PEM ---- */

static bool slice_eq(sg_slice a, sg_slice b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

bool sg_x509_key_is(const sg_x509_bundle *b, size_t i, const sg_pubkey *k)
{
	X509 *x = cert_at(b, i);
	if (!x || !k)
		return false;
	unsigned char *der = NULL;
	int len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(x), &der);
	bool same = false;
	if (len > 0) {
		/* Our own SPKI parser, so both keys are read alike; a refusal is
		 * a "no", and the caller's error detail stays as it was. */
		sg_error saved;
		sg_error_save(&saved);
		sg_pubkey c;
		if (sg_pubkey_parse(&c, der, (size_t)len) == SG_OK && c.kind == k->kind) {
			if (c.kind == SG_PUBKEY_EC)
				same = c.curve == k->curve && slice_eq(c.point, k->point);
			else
				same = slice_eq(c.n, k->n) && slice_eq(c.e, k->e);
		}
		sg_error_restore(&saved);
	}
	OPENSSL_free(der);
	ERR_clear_error();
	return same;
}

bool sg_x509_self_signed(const sg_x509_bundle *b, size_t i)
{
	X509 *x = cert_at(b, i);
	bool self = x && X509_self_signed(x, 1) == 1;
	ERR_clear_error();
	return self;
}

int sg_x509_pem(const sg_x509_bundle *b, size_t i, char **out, size_t *len)
{
	*out = NULL;
	X509 *x = cert_at(b, i);
	SG_ENSURE(x, SG_EINVAL, "no certificate %zu in a bundle of %zu", i, sg_x509_bundle_count(b));
	ERR_clear_error();
	unsigned char *der = NULL;
	int n = i2d_X509(x, &der); /* the encoding that was read, kept by the X509 */
	if (n <= 0)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot encode certificate %zu", i);
	int rc = sg_pem_encode("CERTIFICATE", der, (size_t)n, out, len);
	OPENSSL_free(der);
	return rc;
}

/* ---- private keys ---- */

int sg_x509_key_check(const sg_x509_bundle *b, size_t i, const char *key_pem, size_t len, sg_x509_keyinfo *out)
{
	memset(out, 0, sizeof(*out));
	X509 *x = cert_at(b, i);
	SG_ENSURE(x, SG_EINVAL, "no certificate %zu in a bundle of %zu", i, sg_x509_bundle_count(b));
	SG_TRY(check_text(key_pem, len, "the private key text"));
	ERR_clear_error();
	BIO *bio SG_CLEANUP(sg_ossl_bio_freep) = BIO_new_mem_buf(key_pem, (int)len); /* read-only, no copy */
	if (!bio)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	EVP_PKEY *k SG_CLEANUP(sg_ossl_pkey_freep) = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
	if (!k)
		return sg_error_set_ossl(SG_EINVAL, "the text holds no unencrypted PEM private key");
	if (X509_check_private_key(x, k) != 1)
		return sg_error_set_ossl(SG_EINVAL, "the private key does not belong to certificate %zu", i);
	int id = EVP_PKEY_get_base_id(k);
	SG_ENSURE(id == EVP_PKEY_RSA || id == EVP_PKEY_EC, SG_EINVAL, "the private key is %s, neither RSA nor EC",
		  id != EVP_PKEY_NONE && OBJ_nid2sn(id) ? OBJ_nid2sn(id) : "of an unknown type");
	int bits = EVP_PKEY_get_bits(k);
	SG_ENSURE(bits > 0, SG_EINVAL, "the private key has no size");
	out->kind = id == EVP_PKEY_RSA ? SG_PUBKEY_RSA : SG_PUBKEY_EC;
	out->bits = (unsigned)bits;
	return SG_OK;
}
