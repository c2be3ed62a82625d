/*
 * lg_common: the load tools' shared parts (contract: lg_common.h), taken
 * out of loadgen so that herd makes the same CSRs and checks the same way.
 *
 * Why CSRs from a template: on OpenSSL 3.0 X509_REQ_set_pubkey and
 * i2d_PUBKEY each build an OSSL_ENCODER chain (~400 us and ~125 us here,
 * under global locks), ten times the key generation and signature; the
 * template is made once by OpenSSL and each CSR patches its point in and
 * signs the bytes. The first CSR of every thread is checked by OpenSSL's
 * X509_REQ_verify (and the server verifies every one).
 *
 * The token pool (a directory of token files, one per simulated pod) is
 * described where it is read, below. MAP_ANONYMOUS and MADV_DONTDUMP are
 * beyond POSIX, hence _DEFAULT_SOURCE (as in common/sg_secret.c).
 */
#define _DEFAULT_SOURCE
#include "lg_common.h"

#include "sg_base64.h"
#include "sg_csr.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_istio.h"
#include "sg_key.h"
#include "sg_ossl.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* ---- the target --------------------------------------------------------- */

/* Parses "grpc://HOST:PORT" or "http://HOST:PORT[/]" and refuses any host
 * that is not loopback. Literal addresses only (plus "localhost", mapped to
 * 127.0.0.1 here rather than resolved): a name could resolve anywhere. */
int lg_parse_target(const char *s, lg_target *t)
{
	const char *rest;
	if (strncmp(s, "grpc://", 7) == 0) {
		t->kind = LG_GRPC;
		rest = s + 7;
	} else if (strncmp(s, "http://", 7) == 0) {
		t->kind = LG_HTTP;
		rest = s + 7;
	} else {
		SG_BAIL(SG_EINVAL, "--target: \"%s\" is not grpc://HOST:PORT or http://HOST:PORT", s);
	}
	char host[64];
	const char *colon;
	if (rest[0] == '[') {
		const char *end = strchr(rest, ']');
		SG_ENSURE(end && end[1] == ':' && (size_t)(end - rest - 1) < sizeof(host), SG_EINVAL,
		          "--target: bad IPv6 address in \"%s\"", s);
		memcpy(host, rest + 1, (size_t)(end - rest - 1));
		host[end - rest - 1] = '\0';
		colon = end + 1;
	} else {
		colon = strrchr(rest, ':');
		SG_ENSURE(colon && (size_t)(colon - rest) < sizeof(host), SG_EINVAL, "--target: no port in \"%s\"", s);
		memcpy(host, rest, (size_t)(colon - rest));
		host[colon - rest] = '\0';
	}
	char *end;
	errno = 0;
	unsigned long port = strtoul(colon + 1, &end, 10);
	SG_ENSURE(errno == 0 && end != colon + 1 && (*end == '\0' || strcmp(end, "/") == 0) && port >= 1 &&
	              port <= 65535 && colon[1] != '-' && colon[1] != '+',
	          SG_EINVAL, "--target: bad port in \"%s\"", s);
	t->port = (unsigned)port;

	struct in_addr a4;
	struct in6_addr a6;
	if (strcmp(host, "localhost") == 0) {
		snprintf(t->host, sizeof(t->host), "127.0.0.1");
	} else if (inet_pton(AF_INET, host, &a4) == 1) {
		SG_ENSURE((ntohl(a4.s_addr) >> 24) == 127, SG_EINVAL,
		          "--target: %s is not a loopback address (127.0.0.0/8, ::1, localhost)", host);
		snprintf(t->host, sizeof(t->host), "%s", host);
	} else if (inet_pton(AF_INET6, host, &a6) == 1) {
		SG_ENSURE(memcmp(&a6, &in6addr_loopback, sizeof(a6)) == 0, SG_EINVAL,
		          "--target: %s is not a loopback address (127.0.0.0/8, ::1, localhost)", host);
		snprintf(t->host, sizeof(t->host), "[::1]");
	} else {
		SG_BAIL(SG_EINVAL, "--target: host \"%s\" is not a loopback address (127.0.0.0/8, ::1, localhost)",
		        host);
	}
	return SG_OK;
}

const uint8_t *lg_find_bytes(const uint8_t *hay, size_t n, const uint8_t *needle, size_t m)
{
	if (m == 0 || m > n)
		return NULL;
	for (const uint8_t *p = hay, *end = hay + (n - m); p <= end;) {
		p = memchr(p, needle[0], (size_t)(end - p) + 1);
		if (!p)
			return NULL;
		if (memcmp(p, needle, m) == 0)
			return p;
		p++;
	}
	return NULL;
}

/* ---- the CSRs ----------------------------------------------------------- */

typedef struct csr_template csr_template;

typedef struct rsa_keys rsa_keys;

/* What every CSR thread shares. */
typedef struct csr_ctx {
	lg_item *items;
	lg_kind kind;
	const csr_template *tpls; /* one per identity of ids */
	const lg_idset *ids;
	int64_t ttl;
	const rsa_keys *rsa; /* NULL: a new P-256 key per CSR */
} csr_ctx;

/* ---- work split over threads ------------------------------------------- */

typedef int (*range_fn)(void *ctx, size_t from, size_t to);

typedef struct range_job {
	range_fn fn;
	void *ctx;
	size_t from, to;
	sg_error err;
	int rc;
} range_job;

static void *range_thread(void *p)
{
	range_job *j = p;
	j->rc = j->fn(j->ctx, j->from, j->to);
	if (j->rc < 0)
		sg_error_save(&j->err);
	return NULL;
}

/* fn over [from, to), split evenly over `threads` threads (1 to 64); the
 * first thread's error is the result. Before a run's clock starts only:
 * all CPUs may be used. */
static int run_split(range_fn fn, void *ctx, size_t from, size_t to, unsigned threads)
{
	size_t n = to - from;
	if (threads > n)
		threads = (unsigned)n;
	if (threads > 64)
		threads = 64;
	range_job jobs[64];
	pthread_t tids[64];
	unsigned started = 0;
	for (unsigned t = 0; t < threads; t++) {
		jobs[t] = (range_job){fn, ctx, from + n * t / threads, from + n * (t + 1) / threads, {0}, 0};
		if (pthread_create(&tids[t], NULL, range_thread, &jobs[t]) != 0)
			break;
		started++;
	}
	int rc = started == threads ? SG_OK : sg_error_set(SG_EINTERNAL, "cannot start %u threads", threads);
	for (unsigned t = 0; t < started; t++) {
		pthread_join(tids[t], NULL);
		if (jobs[t].rc < 0 && rc == SG_OK) {
			sg_error_restore(&jobs[t].err);
			rc = jobs[t].rc;
		}
	}
	return rc;
}

static void x509_req_freep(X509_REQ **r)
{
	X509_REQ_free(*r);
}
static void evp_pkey_freep(EVP_PKEY **k)
{
	EVP_PKEY_free(*k);
}
static void general_names_freep(GENERAL_NAMES **g)
{
	GENERAL_NAMES_free(*g);
}
static void exts_freep(STACK_OF(X509_EXTENSION) * *e)
{
	sk_X509_EXTENSION_pop_free(*e, X509_EXTENSION_free);
}

/* The P-256 SubjectPublicKeyInfo before the point (RFC 5480): SEQUENCE {
 * SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING { 0 unused bits, ...
 * followed by the 65-byte uncompressed point. */
static const uint8_t p256_spki_prefix[26] = {0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48,
                                             0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
                                             0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00};
#define P256_POINT 65

/* The CertificationRequestInfo that every CSR shares but for its key. Why a
 * template: on OpenSSL 3.0, X509_REQ_set_pubkey and i2d_PUBKEY each build
 * an OSSL_ENCODER chain (~400 us and ~125 us here, under global locks),
 * ten times the key generation and signature; 20000 CSRs would take a
 * minute. The template is made once by OpenSSL, then each CSR patches its
 * point in and signs the bytes. */
struct csr_template {
	uint8_t info[2048];
	size_t len;
	size_t point_off; /* offset of the point inside info */
};

static int pub_point(EVP_PKEY *key, uint8_t point[P256_POINT])
{
	size_t n = 0;
	SG_OSSL(EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, point, P256_POINT, &n), SG_EINTERNAL,
	        "cannot read the public point");
	SG_ENSURE(n == P256_POINT && point[0] == 0x04, SG_EINTERNAL, "not an uncompressed P-256 point");
	return SG_OK;
}

/* The template, as istio-agent's CSRs are: subject O="" and a critical
 * subjectAltName holding one URI. */
static int make_template(EVP_PKEY *key, const char *identity, csr_template *t)
{
	X509_REQ *req SG_CLEANUP(x509_req_freep) = X509_REQ_new();
	SG_ENSURE(req, SG_EINTERNAL, "out of memory for a CSR");
	/* O="" as Go's encoder writes it (PrintableString). Not through
	 * MBSTRING_*: OpenSSL's string table refuses an empty O there. */
	SG_OSSL(X509_NAME_add_entry_by_NID(X509_REQ_get_subject_name(req), NID_organizationName, V_ASN1_PRINTABLESTRING,
	                                   (const unsigned char *)"", 0, -1, 0),
	        SG_EINTERNAL, "cannot set the CSR subject");
	SG_OSSL(X509_REQ_set_pubkey(req, key), SG_EINTERNAL, "cannot set the CSR key");

	GENERAL_NAMES *gens SG_CLEANUP(general_names_freep) = sk_GENERAL_NAME_new_null();
	GENERAL_NAME *uri = GENERAL_NAME_new();
	ASN1_IA5STRING *ia5 = ASN1_IA5STRING_new();
	if (!gens || !uri || !ia5 || ASN1_STRING_set(ia5, identity, (int)strlen(identity)) != 1) {
		GENERAL_NAME_free(uri);
		ASN1_IA5STRING_free(ia5);
		SG_BAIL(SG_EINTERNAL, "out of memory for the CSR's subjectAltName");
	}
	GENERAL_NAME_set0_value(uri, GEN_URI, ia5);
	if (!sk_GENERAL_NAME_push(gens, uri)) {
		GENERAL_NAME_free(uri);
		SG_BAIL(SG_EINTERNAL, "out of memory for the CSR's subjectAltName");
	}
	STACK_OF(X509_EXTENSION) * exts SG_CLEANUP(exts_freep) = NULL;
	SG_OSSL(X509V3_add1_i2d(&exts, NID_subject_alt_name, gens, 1, X509V3_ADD_DEFAULT), SG_EINTERNAL,
	        "cannot encode the CSR's subjectAltName");
	SG_OSSL(X509_REQ_add_extensions(req, exts), SG_EINTERNAL, "cannot add the CSR's extensions");

	int n = i2d_re_X509_REQ_tbs(req, NULL);
	SG_ENSURE(n > 0 && (size_t)n <= sizeof(t->info), SG_EINTERNAL, "CSR info of %d bytes", n);
	uint8_t *p = t->info;
	i2d_re_X509_REQ_tbs(req, &p);
	t->len = (size_t)n;
	if (EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA)
		return SG_OK; /* rsa_template finds the SPKI */
	uint8_t point[P256_POINT];
	SG_TRY(pub_point(key, point));
	const uint8_t *at = lg_find_bytes(t->info, t->len, point, sizeof(point));
	SG_ENSURE(at && (size_t)(at - t->info) >= sizeof(p256_spki_prefix) &&
	              memcmp(at - sizeof(p256_spki_prefix), p256_spki_prefix, sizeof(p256_spki_prefix)) == 0,
	          SG_EINTERNAL, "the CSR template does not hold a standard P-256 SPKI");
	t->point_off = (size_t)(at - t->info);
	return SG_OK;
}

static void md_ctx_freep(EVP_MD_CTX **c)
{
	EVP_MD_CTX_free(*c);
}

/* The CSR of info signed by key (SHA-256 with its algorithm, sigalg), as
 * PEM. */
static int sign_csr(EVP_PKEY *key, sg_sigalg sigalg, const uint8_t *info, size_t len, char **pem, size_t *pem_len)
{
	EVP_MD_CTX *md SG_CLEANUP(md_ctx_freep) = EVP_MD_CTX_new();
	SG_ENSURE(md, SG_EINTERNAL, "out of memory for a digest");
	uint8_t sig[256]; /* RSA-2048; a P-256 DER signature is at most 72 */
	size_t sig_len = sizeof(sig);
	SG_OSSL(EVP_DigestSignInit_ex(md, NULL, "SHA256", NULL, NULL, key, NULL), SG_EINTERNAL,
	        "cannot start the CSR signature");
	SG_OSSL(EVP_DigestSign(md, sig, &sig_len, info, len), SG_EINTERNAL, "cannot sign the CSR");
	uint8_t der[sizeof(((csr_template *)0)->info) + 320];
	sg_der_writer w;
	sg_der_writer_init(&w, der, sizeof(der));
	size_t mark = sg_der_begin(&w, 0x30);
	sg_der_raw(&w, info, len);
	sg_sigalg_encode(&w, sigalg);
	sg_der_bits(&w, sig, sig_len);
	sg_der_end(&w, mark);
	SG_TRY(sg_der_writer_status(&w));
	return sg_pem_encode("CERTIFICATE REQUEST", w.buf, w.len, pem, pem_len);
}

/* One CSR (RFC 2986): the template with a new key's point, signed with that
 * key (ECDSA with SHA-256), as PEM; it->spki is the key's SPKI. */
static int make_csr(EVP_PKEY_CTX *kctx, const csr_template *t, char **pem, size_t *pem_len, lg_item *it)
{
	EVP_PKEY *key SG_CLEANUP(evp_pkey_freep) = NULL;
	SG_OSSL(EVP_PKEY_keygen(kctx, &key), SG_EINTERNAL, "P-256 key generation failed");
	uint8_t info[sizeof(t->info)], point[P256_POINT];
	SG_TRY(pub_point(key, point));
	memcpy(info, t->info, t->len);
	memcpy(info + t->point_off, point, sizeof(point));
	memcpy(it->spki, p256_spki_prefix, sizeof(p256_spki_prefix));
	memcpy(it->spki + sizeof(p256_spki_prefix), point, sizeof(point));
	it->spki_len = sizeof(p256_spki_prefix) + sizeof(point);

	return sign_csr(key, SG_SIG_ECDSA_SHA256, info, t->len, pem, pem_len);
}

/* RSA-2048 CSRs, istio-agent's default key (WORKLOAD_RSA_KEY_SIZE 2048,
 * SHA256WithRSA). Generating a 2048-bit key takes 0.1-0.2 s here, so a
 * run's CSRs share a set of keys made for that run, and a CSR is distinct
 * from every other by its (identity, key) pair: the k-th CSR naming an
 * identity takes key k mod the set's size, and lg_items_make_opts refuses
 * a set smaller than the most CSRs one identity gets. Neither server keeps
 * anything per key, so sharing keys changes nothing they compute; an
 * identical CSR sent twice would (PKCS#1 v1.5 signatures are
 * deterministic), which is what the pairing rules out. */
struct rsa_keys {
	EVP_PKEY **keys;
	uint8_t (*spki)[LG_SPKI_MAX];
	size_t spki_len; /* the same for every key: 2048-bit modulus, e 65537 */
	size_t n;
	uint32_t *key_of; /* CSR i signs with keys[key_of[i]] */
};

static void rsa_keys_clear(rsa_keys *r)
{
	for (size_t i = 0; r->keys && i < r->n; i++)
		EVP_PKEY_free(r->keys[i]);
	free(r->keys);
	free(r->spki);
	free(r->key_of);
}

/* Keys [from, to) of the set (ctx: the rsa_keys). */
static int rsa_gen_range(void *ctx, size_t from, size_t to)
{
	rsa_keys *r = ctx;
	for (size_t i = from; i < to; i++) {
		EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
		SG_ENSURE(k, SG_EINTERNAL, "RSA-2048 key generation failed");
		r->keys[i] = k;
		int len = i2d_PUBKEY(k, NULL);
		SG_ENSURE(len > 0 && (size_t)len <= LG_SPKI_MAX, SG_EINTERNAL, "RSA SPKI of %d bytes", len);
		uint8_t *p = r->spki[i];
		i2d_PUBKEY(k, &p);
		SG_ENSURE(i == 0 || (size_t)len == r->spki_len, SG_EINTERNAL,
		          "RSA-2048 SPKIs of different lengths (%d, %zu)", len, r->spki_len);
		if (i == 0)
			r->spki_len = (size_t)len;
	}
	return SG_OK;
}

/* The set of nkeys keys on `threads` threads and each CSR's key; fails
 * when some identity would get more CSRs than there are keys. */
static int rsa_keys_make(rsa_keys *r, size_t nkeys, unsigned threads, size_t n, const lg_idset *ids)
{
	memset(r, 0, sizeof(*r));
	SG_ENSURE(nkeys >= 1 && nkeys <= LG_RSA_KEYS_MAX, SG_EINVAL, "%zu RSA keys (1 to %d)", nkeys, LG_RSA_KEYS_MAX);
	r->key_of = calloc(n ? n : 1, sizeof(*r->key_of));
	size_t *per_id SG_AUTOFREE = calloc(ids->n_names, sizeof(size_t));
	SG_ENSURE(r->key_of && per_id, SG_EINTERNAL, "out of memory for %zu CSRs' keys", n);
	for (size_t i = 0; i < n; i++) {
		size_t k = ids->of ? ids->of[i % ids->n_of] : 0;
		SG_ENSURE(per_id[k] < nkeys, SG_EINVAL,
		          "RSA CSRs: more than %zu CSRs name %s, and a CSR is distinct only by its identity and key: "
		          "make more keys (--csr-keys) or spread the tokens over more service accounts",
		          nkeys, ids->names[k]);
		r->key_of[i] = (uint32_t)per_id[k]++;
	}
	r->keys = calloc(nkeys, sizeof(*r->keys));
	r->spki = calloc(nkeys, sizeof(*r->spki));
	SG_ENSURE(r->keys && r->spki, SG_EINTERNAL, "out of memory for %zu RSA keys", nkeys);
	r->n = nkeys;
	/* The first key alone: it fixes spki_len, which the others check. */
	SG_TRY(rsa_gen_range(r, 0, 1));
	return nkeys > 1 ? run_split(rsa_gen_range, r, 1, nkeys, threads) : SG_OK;
}

/* Where the template (made with keys[0]) holds that key's SPKI. */
static int rsa_template(const rsa_keys *r, csr_template *t)
{
	const uint8_t *at = lg_find_bytes(t->info, t->len, r->spki[0], r->spki_len);
	SG_ENSURE(at, SG_EINTERNAL, "the CSR template does not hold its key's SPKI");
	t->point_off = (size_t)(at - t->info);
	return SG_OK;
}

/* CSR i: the template with key key_of[i]'s SPKI, signed with it. */
static int make_rsa_csr(const rsa_keys *r, size_t i, const csr_template *t, char **pem, size_t *pem_len, lg_item *it)
{
	uint32_t k = r->key_of[i];
	uint8_t info[sizeof(t->info)];
	memcpy(info, t->info, t->len);
	memcpy(info + t->point_off, r->spki[k], r->spki_len);
	memcpy(it->spki, r->spki[k], r->spki_len);
	it->spki_len = r->spki_len;

	return sign_csr(r->keys[k], SG_SIG_RSA_SHA256, info, t->len, pem, pem_len);
}

/* OpenSSL's own verdict on one CSR of each thread: the template path must
 * make requests any reader accepts (the servers check all of them too). */
static int check_csr(const char *pem, size_t pem_len)
{
	uint8_t der[4096];
	size_t len;
	SG_TRY(sg_csr_decode((const uint8_t *)pem, pem_len, der, sizeof(der), &len));
	const unsigned char *p = der;
	X509_REQ *req SG_CLEANUP(x509_req_freep) = d2i_X509_REQ(NULL, &p, (long)len);
	SG_ENSURE(req && p == der + len, SG_EINTERNAL, "OpenSSL cannot read the CSR we made");
	EVP_PKEY *k = X509_REQ_get0_pubkey(req);
	SG_ENSURE(k && X509_REQ_verify(req, k) == 1, SG_EINTERNAL, "OpenSSL refuses the CSR's signature");
	return SG_OK;
}

/* The request body for one CSR: the protobuf message for signet, the JSON
 * text cfssl's sign endpoint takes (made by jansson, not by hand). */
static int make_body(lg_kind kind, const char *pem, size_t pem_len, int64_t ttl, lg_item *it)
{
	if (kind == LG_GRPC)
		return sg_istio_request_encode(pem, pem_len, ttl, NULL, &it->body, &it->body_len);
	json_t *o = json_pack("{s:s%}", "certificate_request", pem, pem_len);
	SG_ENSURE(o, SG_EINTERNAL, "cannot build the cfssl request JSON");
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	SG_ENSURE(text, SG_EINTERNAL, "cannot serialize the cfssl request JSON");
	it->body = (uint8_t *)text;
	it->body_len = strlen(text);
	return SG_OK;
}

static void pkey_ctx_freep(EVP_PKEY_CTX **c)
{
	EVP_PKEY_CTX_free(*c);
}

/* A key generation context, set up once per thread and reused. */
static int p256_keygen(EVP_PKEY_CTX **out)
{
	EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
	if (!c || EVP_PKEY_keygen_init(c) != 1 || EVP_PKEY_CTX_set_group_name(c, "P-256") != 1) {
		EVP_PKEY_CTX_free(c);
		SG_BAIL(SG_EINTERNAL, "cannot set up P-256 key generation");
	}
	*out = c;
	return SG_OK;
}

static int csr_range(void *ctx, size_t from, size_t to)
{
	const csr_ctx *j = ctx;
	EVP_PKEY_CTX *kctx SG_CLEANUP(pkey_ctx_freep) = NULL;
	if (!j->rsa)
		SG_TRY(p256_keygen(&kctx));
	int rc = SG_OK;
	for (size_t i = from; i < to && rc == SG_OK; i++) {
		char *pem = NULL;
		size_t pem_len = 0;
		size_t k = j->ids->of ? j->ids->of[i % j->ids->n_of] : 0;
		j->items[i].identity = j->ids->names[k];
		rc = j->rsa ? make_rsa_csr(j->rsa, i, &j->tpls[k], &pem, &pem_len, &j->items[i])
		            : make_csr(kctx, &j->tpls[k], &pem, &pem_len, &j->items[i]);
		if (rc == SG_OK && i == from)
			rc = check_csr(pem, pem_len);
		if (rc == SG_OK)
			rc = make_body(j->kind, pem, pem_len, j->ttl, &j->items[i]);
		free(pem);
	}
	return rc;
}

/* Makes n distinct CSRs on `threads` threads (key generation dominates and
 * the run has not started, so all CPUs may be used), from a template per
 * identity. */
int lg_items_make_opts(lg_item **out, size_t n, unsigned threads, lg_kind kind, const lg_idset *ids, int64_t ttl,
                       const lg_csr_opts *o)
{
	*out = NULL;
	SG_ENSURE(ids->n_names >= 1 && ids->n_names <= LG_TOKENS_IDENTITIES_MAX && (!ids->of || ids->n_of >= 1),
	          SG_EINVAL, "%zu identities for the CSRs (1 to %d)", ids->n_names, LG_TOKENS_IDENTITIES_MAX);
	lg_item *items = calloc(n, sizeof(*items));
	SG_ENSURE(items, SG_EINTERNAL, "out of memory for %zu requests", n);
	*out = items;
	csr_template *tpls SG_AUTOFREE = calloc(ids->n_names, sizeof(*tpls));
	SG_ENSURE(tpls, SG_EINTERNAL, "out of memory for %zu CSR templates", ids->n_names);
	bool rsa = o && o->key == LG_CSR_RSA2048;
	rsa_keys keys SG_CLEANUP(rsa_keys_clear) = {0};
	if (rsa) {
		SG_TRY(rsa_keys_make(&keys, o->rsa_keys, threads, n, ids));
		for (size_t k = 0; k < ids->n_names; k++) {
			SG_TRY(make_template(keys.keys[0], ids->names[k], &tpls[k]));
			SG_TRY(rsa_template(&keys, &tpls[k]));
		}
	} else {
		EVP_PKEY_CTX *kctx SG_CLEANUP(pkey_ctx_freep) = NULL;
		SG_TRY(p256_keygen(&kctx));
		for (size_t k = 0; k < ids->n_names; k++) {
			EVP_PKEY *key SG_CLEANUP(evp_pkey_freep) = NULL;
			SG_OSSL(EVP_PKEY_keygen(kctx, &key), SG_EINTERNAL, "P-256 key generation failed");
			SG_TRY(make_template(key, ids->names[k], &tpls[k]));
		}
	}
	csr_ctx c = {items, kind, tpls, ids, ttl, rsa ? &keys : NULL};
	return run_split(csr_range, &c, 0, n, threads ? threads : 1);
}

int lg_items_make_ids(lg_item **out, size_t n, unsigned threads, lg_kind kind, const lg_idset *ids, int64_t ttl)
{
	return lg_items_make_opts(out, n, threads, kind, ids, ttl, NULL);
}

int lg_items_make(lg_item **out, size_t n, unsigned threads, lg_kind kind, const char *identity, int64_t ttl)
{
	const char *names[] = {identity};
	lg_idset ids = {names, 1, NULL, 0};
	return lg_items_make_ids(out, n, threads, kind, &ids, ttl);
}

void lg_items_free(lg_item *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		free(items[i].body);
	free(items);
}

/* ---- response checks ---------------------------------------------------- */

/* The leaf must be one PEM certificate for the CSR's key (its DER holds the
 * CSR's SPKI verbatim: both servers re-encode the key as a standard
 * named-curve SPKI) and, when identity is given, must name it. Returns a
 * failure label, or NULL when the leaf is good. */
const char *lg_check_leaf(const char *pem, size_t len, const lg_item *it, const char *identity, uint8_t *der,
                          size_t cap)
{
	size_t der_len, used;
	if (sg_pem_decode((const uint8_t *)pem, len, "CERTIFICATE", der, cap, &der_len, &used) < 0)
		return "bad response: leaf is not a PEM certificate";
	if (!lg_find_bytes(der, der_len, it->spki, it->spki_len))
		return "bad response: leaf is not for the CSR's key";
	if (identity && !lg_find_bytes(der, der_len, (const uint8_t *)identity, strlen(identity)))
		return "bad response: leaf lacks the identity";
	return NULL;
}

/* ---- files ------------------------------------------------------------- */

int lg_read_file(const char *path, size_t max, char **out)
{
	FILE *f = fopen(path, "rb");
	SG_ENSURE(f, SG_ENOTFOUND, "cannot open %s: %s", path, strerror(errno));
	char *buf = malloc(max + 1);
	size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
	int bad = ferror(f);
	fclose(f);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory reading %s", path);
	if (bad || n == 0 || n > max) {
		free(buf);
		SG_BAIL(SG_EINVAL, "%s is unreadable, empty or larger than %zu bytes", path, max);
	}
	buf[n] = '\0';
	*out = buf;
	return SG_OK;
}

/* The authorization header value "Bearer <token>", as a secret. */
int lg_bearer(const char *path, sg_secret **out)
{
	sg_secret *tok SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_secret_from_file(&tok, path));
	size_t n = sg_secret_len(tok);
	while (n && (sg_secret_data(tok)[n - 1] == '\n' || sg_secret_data(tok)[n - 1] == '\r'))
		n--;
	SG_ENSURE(n > 0, SG_EINVAL, "token file %s is empty", path);
	size_t cap = n + 8;
	char *v = malloc(cap);
	SG_ENSURE(v, SG_EINTERNAL, "out of memory");
	memcpy(v, "Bearer ", 7);
	memcpy(v + 7, sg_secret_data(tok), n);
	v[n + 7] = '\0';
	int rc = sg_secret_new(out, v, n + 7);
	sg_wipe(v, cap);
	free(v);
	return rc;
}
/* ---- the token pool ------------------------------------------------------
 *
 * Loaded in three steps so that nothing is allocated past a limit: the
 * directory's names are listed (at most LG_TOKENS_MAX), their sizes summed
 * from stat (at most LG_TOKENS_BYTES_MAX), then one mapping of that size
 * is made and each file is read into it through sg_secret_from_file, the
 * same owner-only check --token-file has. The mapping is left out of core
 * dumps (as sg_secret's pages are) and wiped on free; it is not locked, as
 * a pool may be megabytes and RLIMIT_MEMLOCK is small.
 *
 * The identity comes from the token's own claims, read without verifying
 * the signature: the server verifies it, and a wrong identity only makes
 * its requests fail, which the run reports. Holding identities beside the
 * tokens (a side file) would be one more thing to keep in step. */

struct lg_tokens {
	char *map; /* "Bearer <token>\0" one after another */
	size_t map_len;
	size_t *off;     /* token k's value at map + off[k] */
	uint32_t *ident; /* token k's identity: names[ident[k]] */
	char **names;
	size_t n, n_names;
	_Atomic uint64_t *uses;
};

typedef struct tok_name {
	char *name;
	size_t size; /* bytes by stat */
} tok_name;

static int cmp_tok_name(const void *a, const void *b)
{
	return strcmp(((const tok_name *)a)->name, ((const tok_name *)b)->name);
}

static void tok_names_free(tok_name *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].name);
	free(v);
}

/* The non-hidden names of dir, sorted, with their sizes. */
static int list_tokens(const char *dir, tok_name **out, size_t *count, size_t *bytes)
{
	DIR *d = opendir(dir);
	SG_ENSURE(d, errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "--token-dir %s: %s", dir, strerror(errno));
	tok_name *v = NULL;
	size_t n = 0, cap = 0, sum = 0;
	int rc = SG_OK;
	struct dirent *e;
	while (rc == SG_OK && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue; /* ".", "..", and a kubelet volume's ..data links */
		if (n == LG_TOKENS_MAX) {
			rc = sg_error_set(SG_EINVAL, "--token-dir %s holds more than %d tokens", dir, LG_TOKENS_MAX);
			break;
		}
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
		    st.st_size > SG_SECRET_MAX) {
			rc = sg_error_set(SG_EINVAL, "--token-dir: %s/%s is not a regular file of 1 to %d bytes", dir,
			                  e->d_name, SG_SECRET_MAX);
			break;
		}
		sum += (size_t)st.st_size + 8; /* "Bearer " and the NUL */
		if (sum > LG_TOKENS_BYTES_MAX) {
			rc = sg_error_set(SG_EINVAL, "--token-dir %s holds more than %u bytes of tokens", dir,
			                  LG_TOKENS_BYTES_MAX);
			break;
		}
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 256;
			tok_name *nv = realloc(v, ncap * sizeof(*v));
			if (!nv) {
				rc = sg_error_set(SG_EINTERNAL, "out of memory listing %s", dir);
				break;
			}
			v = nv;
			cap = ncap;
		}
		v[n].size = (size_t)st.st_size;
		v[n].name = strdup(e->d_name);
		if (!v[n].name)
			rc = sg_error_set(SG_EINTERNAL, "out of memory listing %s", dir);
		else
			n++;
	}
	closedir(d);
	if (rc == SG_OK && n == 0)
		rc = sg_error_set(SG_EINVAL, "--token-dir %s holds no token files", dir);
	if (rc < 0) {
		tok_names_free(v, n);
		return rc;
	}
	qsort(v, n, sizeof(*v), cmp_tok_name);
	*out = v;
	*count = n;
	*bytes = sum;
	return SG_OK;
}

/* A Kubernetes namespace or service account name: DNS-1123 characters. */
static bool k8s_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.'))
			return false;
	return true;
}

/* spiffe://<td>/ns/<ns>/sa/<sa> from the token's payload claims. */
static int token_identity(const char *tok, size_t len, const char *td, char *out, size_t cap)
{
	const char *dot1 = memchr(tok, '.', len);
	const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - tok)) : NULL;
	SG_ENSURE(dot2, SG_EINVAL, "not a JWT (header.payload.signature)");
	uint8_t payload[SG_SECRET_MAX];
	size_t plen = 0;
	int rc = sg_b64_decode(SG_B64_URL, dot1 + 1, (size_t)(dot2 - dot1 - 1), payload, sizeof(payload), &plen);
	json_t *c = rc == SG_OK ? json_loadb((const char *)payload, plen, 0, NULL) : NULL;
	sg_wipe(payload, sizeof(payload));
	SG_ENSURE(c, SG_EINVAL, "its payload is not base64url JSON");
	char ns[254] = "", sa[254] = "";
	json_t *k8s = json_object_get(c, "kubernetes.io");
	const char *kns = json_string_value(json_object_get(k8s, "namespace"));
	const char *ksa = json_string_value(json_object_get(json_object_get(k8s, "serviceaccount"), "name"));
	const char *sub = json_string_value(json_object_get(c, "sub"));
	static const char prefix[] = "system:serviceaccount:";
	if (kns && ksa) {
		snprintf(ns, sizeof(ns), "%s", kns);
		snprintf(sa, sizeof(sa), "%s", ksa);
	} else if (sub && strncmp(sub, prefix, sizeof(prefix) - 1) == 0 && strchr(sub + sizeof(prefix) - 1, ':')) {
		const char *rest = sub + sizeof(prefix) - 1, *colon = strchr(rest, ':');
		snprintf(ns, sizeof(ns), "%.*s", (int)(colon - rest), rest);
		snprintf(sa, sizeof(sa), "%s", colon + 1);
	}
	json_decref(c);
	SG_ENSURE(k8s_name(ns) && k8s_name(sa), SG_EINVAL,
	          "its claims name no service account (kubernetes.io or sub system:serviceaccount:NS:SA)");
	int n = snprintf(out, cap, "spiffe://%s/ns/%s/sa/%s", td, ns, sa);
	SG_ENSURE(n > 0 && (size_t)n < cap, SG_EINVAL, "its identity is too long");
	return SG_OK;
}

typedef struct tok_ident {
	char *uri;
	uint32_t tok;
} tok_ident;

static int cmp_tok_ident(const void *a, const void *b)
{
	return strcmp(((const tok_ident *)a)->uri, ((const tok_ident *)b)->uri);
}

/* Reads token k of the listing into the mapping at *at; its identity into
 * ids[k]. */
static int read_token(lg_tokens *p, const char *dir, const tok_name *tn, size_t k, size_t *at, const char *td,
                      tok_ident *ids)
{
	char path[4096];
	int pn = snprintf(path, sizeof(path), "%s/%s", dir, tn->name);
	SG_ENSURE(pn > 0 && (size_t)pn < sizeof(path), SG_EINVAL, "--token-dir: path of %s too long", tn->name);
	sg_secret *s SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_secret_from_file(&s, path));
	size_t len = sg_secret_len(s);
	/* The size came from stat; a file that grew since does not fit. */
	SG_ENSURE(len <= tn->size && *at + len + 8 <= p->map_len, SG_EINVAL, "--token-dir: %s changed while read",
	          path);
	char uri[1024];
	if (token_identity(sg_secret_cstr(s), len, td, uri, sizeof(uri)) < 0) {
		char why[sizeof(sg_error_last()->msg)]; /* copied out: the new error overwrites the record */
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(SG_EINVAL, "--token-dir: the token in %s: %s", path, why);
	}
	ids[k].uri = strdup(uri);
	ids[k].tok = (uint32_t)k;
	SG_ENSURE(ids[k].uri, SG_EINTERNAL, "out of memory");
	p->off[k] = *at;
	memcpy(p->map + *at, "Bearer ", 7);
	memcpy(p->map + *at + 7, sg_secret_data(s), len);
	p->map[*at + 7 + len] = '\0';
	*at += len + 8;
	return SG_OK;
}

/* Gives each distinct identity one name, and each token its index. */
static int index_identities(lg_tokens *p, tok_ident *ids)
{
	qsort(ids, p->n, sizeof(*ids), cmp_tok_ident);
	size_t d = 0;
	for (size_t k = 0; k < p->n; k++)
		if (k == 0 || strcmp(ids[k].uri, ids[k - 1].uri) != 0)
			d++;
	SG_ENSURE(d <= LG_TOKENS_IDENTITIES_MAX, SG_EINVAL,
	          "--token-dir: the tokens name %zu service accounts (at most %d: each is a CSR template)", d,
	          LG_TOKENS_IDENTITIES_MAX);
	p->names = calloc(d, sizeof(*p->names));
	SG_ENSURE(p->names, SG_EINTERNAL, "out of memory");
	for (size_t k = 0; k < p->n; k++) {
		if (p->n_names == 0 || strcmp(ids[k].uri, p->names[p->n_names - 1]) != 0)
			p->names[p->n_names++] = SG_MOVE(ids[k].uri);
		p->ident[ids[k].tok] = (uint32_t)(p->n_names - 1);
	}
	return SG_OK;
}

/* qsort has no argument: the pool being checked, for cmp_token. */
static const lg_tokens *sorting;

static int cmp_token(const void *a, const void *b)
{
	return strcmp(sorting->map + sorting->off[*(const size_t *)a], sorting->map + sorting->off[*(const size_t *)b]);
}

/* A pool that holds one token twice would send it twice and let a cache
 * answer: refused, naming the files. */
static int check_distinct(const lg_tokens *p, const char *dir, const tok_name *names)
{
	size_t *order SG_AUTOFREE = calloc(p->n, sizeof(*order));
	SG_ENSURE(order, SG_EINTERNAL, "out of memory");
	for (size_t k = 0; k < p->n; k++)
		order[k] = k;
	sorting = p;
	qsort(order, p->n, sizeof(*order), cmp_token);
	sorting = NULL;
	for (size_t k = 1; k < p->n; k++)
		SG_ENSURE(strcmp(p->map + p->off[order[k]], p->map + p->off[order[k - 1]]) != 0, SG_EINVAL,
		          "--token-dir %s: %s and %s hold the same token (each pod's must be its own)", dir,
		          names[order[k - 1]].name, names[order[k]].name);
	return SG_OK;
}

static int tokens_fill(lg_tokens *p, const char *dir, const tok_name *names, const char *td, tok_ident *ids)
{
	size_t at = 0;
	for (size_t k = 0; k < p->n; k++)
		SG_TRY(read_token(p, dir, &names[k], k, &at, td, ids));
	SG_TRY(check_distinct(p, dir, names));
	return index_identities(p, ids);
}

int lg_tokens_load(lg_tokens **out, const char *dir, const char *trust_domain)
{
	tok_name *names = NULL;
	size_t n = 0, bytes = 0;
	SG_TRY(list_tokens(dir, &names, &n, &bytes));
	lg_tokens *p = calloc(1, sizeof(*p));
	tok_ident *ids = calloc(n, sizeof(*ids));
	int rc = p && ids ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory for %zu tokens", n);
	if (rc == SG_OK) {
		p->n = n;
		p->off = calloc(n, sizeof(*p->off));
		p->ident = calloc(n, sizeof(*p->ident));
		p->uses = calloc(n, sizeof(*p->uses));
		p->map_len = bytes;
		p->map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p->map == MAP_FAILED)
			p->map = NULL;
		if (!p->off || !p->ident || !p->uses || !p->map)
			rc = sg_error_set(SG_EINTERNAL, "out of memory for %zu tokens", n);
		else if (madvise(p->map, bytes, MADV_DONTDUMP) != 0)
			rc = sg_error_set(SG_EINTERNAL, "cannot exclude the tokens from core dumps: %s",
			                  strerror(errno));
	}
	if (rc == SG_OK)
		rc = tokens_fill(p, dir, names, trust_domain, ids);
	for (size_t k = 0; ids && k < n; k++)
		free(ids[k].uri);
	free(ids);
	tok_names_free(names, n);
	if (rc < 0) {
		lg_tokens_free(p);
		return rc;
	}
	*out = p;
	return SG_OK;
}

void lg_tokens_wipe(lg_tokens *p)
{
	if (p && p->map)
		sg_wipe(p->map, p->map_len);
}

void lg_tokens_free(lg_tokens *p)
{
	if (!p)
		return;
	if (p->map) {
		sg_wipe(p->map, p->map_len);
		munmap(p->map, p->map_len);
	}
	for (size_t k = 0; k < p->n_names; k++)
		free(p->names[k]);
	free(p->names);
	free(p->off);
	free(p->ident);
	free(p->uses);
	free(p);
}

size_t lg_tokens_count(const lg_tokens *p)
{
	return p->n;
}

const char *lg_tokens_take(lg_tokens *p, size_t i)
{
	size_t k = i % p->n;
	atomic_fetch_add_explicit(&p->uses[k], 1, memory_order_relaxed);
	return p->map + p->off[k];
}

const char *lg_tokens_again(const lg_tokens *p, size_t i)
{
	return p->map + p->off[i % p->n];
}

void lg_tokens_idset(const lg_tokens *p, lg_idset *out)
{
	*out = (lg_idset){(const char *const *)p->names, p->n_names, p->ident, p->n};
}

void lg_tokens_usage(const lg_tokens *p, size_t *distinct, uint64_t *max_uses)
{
	*distinct = 0;
	*max_uses = 0;
	for (size_t k = 0; k < p->n; k++) {
		uint64_t u = atomic_load_explicit(&p->uses[k], memory_order_relaxed);
		*distinct += u > 0;
		if (u > *max_uses)
			*max_uses = u;
	}
}

lg_token_use lg_token_use_of(const lg_tokens *pool, bool one_token)
{
	lg_token_use u = {.source = pool ? "pool" : one_token ? "file" : "none"};
	if (pool) {
		u.pool = pool->n;
		lg_tokens_usage(pool, &u.distinct, &u.max_uses);
	}
	return u;
}

void lg_token_use_print(const lg_token_use *u)
{
	if (strcmp(u->source, "file") == 0)
		printf("  tokens  one (--token-file), reused by every request: a verification or review cache "
		       "answers all but the first\n");
	else if (strcmp(u->source, "pool") == 0)
		printf("  tokens  pool of %zu (--token-dir): %zu distinct used over the whole run; most uses of one "
		       "token %llu, so the pool wrapped %llu times%s\n",
		       u->pool, u->distinct, (unsigned long long)u->max_uses,
		       (unsigned long long)(u->max_uses ? u->max_uses - 1 : 0),
		       u->max_uses > 1 ? " (reused tokens: a cache may answer those)" : "");
}

json_t *lg_token_use_json(const lg_token_use *u)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:I}", "source", u->source, "pool", (json_int_t)u->pool, "distinct",
	                 (json_int_t)u->distinct, "max_uses", (json_int_t)u->max_uses, "wraps",
	                 (json_int_t)(u->max_uses ? u->max_uses - 1 : 0));
}
