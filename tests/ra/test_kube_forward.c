/*
 * RA mode (ra/sg_forward.h) against a real kube-apiserver
 * (tests/kube/test_kube_env.h): workload CSRs become cert-manager
 * CertificateRequests, and a test issuer that runs inside this process
 * answers them.
 *
 * The API server has no cert-manager: the test creates the
 * CertificateRequest CRD itself (schema-less spec and status, a status
 * subresource; another test may have created the same CRD from its YAML
 * fixture, which is fine), and plays the issuer: an informer on
 * certificaterequests in the test namespace hands every request whose
 * issuerRef.group is test-issuer.example.com to four threads that act as
 * issuerRef.name says:
 *   sign       a leaf for the CSR's key and URI SAN, signed by the root
 *   chain      the same signed by an intermediate; certificate = leaf +
 *              intermediate + root (the root must be dropped from the answer)
 *   deny       Denied=True (and Ready=False/Denied)
 *   fail       Ready=False, reason Failed
 *   invalid    InvalidRequest=True
 *   silent     never answers
 *   wrongkey   a leaf for another key, signed by the root
 *   wrongroot  a leaf for the CSR's key, signed by an unrelated root
 *   garbage    a status.certificate that is no PEM certificate
 * Certificates, keys and CSRs are made here with OpenSSL (EC P-256, URI SAN
 * spiffe://cluster.local/ns/default/sa/x).
 *
 * Cases: answered (chain, key, the request deleted afterwards), chain
 * normalisation, preserve (the request as created: labels, annotation,
 * spec), denied, failed, invalid, deleted by someone else, the deadline,
 * the default timeout, a cancelled caller, max_in_flight, bad answers
 * (other key, other root, garbage, roots replaced), mesh roots that are
 * an intermediate alone (answers under it taken, others not), an API server that
 * refuses (no RBAC rights), a burst of 200 concurrent requests, free()
 * with requests pending (and with creates not yet made), bad arguments;
 * last, nothing of ours is left in the namespace.
 *
 * Every wait is for a condition with a deadline (SG_WAIT_FOR), never a
 * fixed sleep before an exact check.
 */
#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_csr.h"
#include "sg_forward.h"
#include "sg_kube.h"
#include "sg_kube_informer.h"
#include "sg_test.h"
#include "sg_x509.h"
#include "test_kube_fixture.h"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NS "forward-test"
#define ISSUER_GROUP "test-issuer.example.com"
#define ISSUER_KIND "TestIssuer"
#define SPIFFE_ID "spiffe://cluster.local/ns/default/sa/x"
#define CRD_NAME "certificaterequests.cert-manager.io"
#define ISSUER_THREADS 4
#define BURST 200
#define BURST_THREADS 8

static sg_kube *k; /* the test's own calls and the test issuer's: no rate limit */
static char run_id[16];

static const sg_kube_ref crs = {
    .group = "cert-manager.io", .version = "v1", .resource = "certificaterequests", .ns = NS};

/* ---- OpenSSL: keys, certificates, CSRs ---- */

static EVP_PKEY *root_key, *inter_key, *other_key, *stranger_key;
static X509 *root, *inter, *other_root;
static char *root_pem, *other_root_pem;

static EVP_PKEY *ec_key(void)
{
	EVP_PKEY *p = EVP_EC_gen("P-256");
	if (!p) {
		fprintf(stderr, "EVP_EC_gen failed\n");
		exit(1);
	}
	return p;
}

static void add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value)
{
	X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
	if (!e || X509_add_ext(x, e, -1) != 1) {
		fprintf(stderr, "extension %d=%s failed\n", nid, value);
		exit(1);
	}
	X509_EXTENSION_free(e);
}

/* A certificate for pub, signed by issuer/issuer_key (NULL issuer: self-
 * signed with issuer_key); san is copied in when given. */
static X509 *make_cert(EVP_PKEY *pub, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, bool ca, long secs,
                       const X509_EXTENSION *san)
{
	X509 *x = X509_new();
	BIGNUM *bn = BN_new();
	bool ok = x && bn && X509_set_version(x, 2) == 1 && BN_rand(bn, 64, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ANY) == 1 &&
	          BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL &&
	          X509_gmtime_adj(X509_getm_notBefore(x), -60) && X509_gmtime_adj(X509_getm_notAfter(x), secs) &&
	          X509_set_pubkey(x, pub) == 1;
	BN_free(bn);
	X509_NAME *name = X509_get_subject_name(x);
	if (ok && cn)
		ok = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) == 1;
	ok = ok && X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name) == 1;
	if (!ok) {
		fprintf(stderr, "certificate setup failed\n");
		exit(1);
	}
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
	add_ext(x, &ctx, NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
	add_ext(x, &ctx, NID_key_usage, ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
	add_ext(x, &ctx, NID_subject_key_identifier, "hash");
	if (issuer)
		add_ext(x, &ctx, NID_authority_key_identifier, "keyid:always");
	if (!ca)
		add_ext(x, &ctx, NID_ext_key_usage, "serverAuth,clientAuth");
	if (san && X509_add_ext(x, (X509_EXTENSION *)san, -1) != 1) {
		fprintf(stderr, "SAN copy failed\n");
		exit(1);
	}
	if (X509_sign(x, issuer_key, EVP_sha256()) <= 0) {
		fprintf(stderr, "X509_sign failed\n");
		exit(1);
	}
	return x;
}

static char *bio_text(BIO *b)
{
	char *data = NULL;
	long n = BIO_get_mem_data(b, &data);
	char *s = malloc((size_t)n + 1);
	if (s) {
		memcpy(s, data, (size_t)n);
		s[n] = 0;
	}
	BIO_free(b);
	return s;
}

static char *cert_pem(X509 *x)
{
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	return bio_text(b);
}

static char *make_csr(EVP_PKEY *key, const char *uri)
{
	X509_REQ *req = X509_REQ_new();
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	char val[300];
	snprintf(val, sizeof(val), "URI:%s", uri);
	X509_EXTENSION *san = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, val);
	bool ok = req && exts && san && X509_REQ_set_version(req, 0) == 1 && X509_REQ_set_pubkey(req, key) == 1 &&
	          sk_X509_EXTENSION_push(exts, san) > 0;
	if (!ok)
		X509_EXTENSION_free(san);
	ok = ok && X509_REQ_add_extensions(req, exts) == 1 && X509_REQ_sign(req, key, EVP_sha256()) > 0;
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	BIO *b = BIO_new(BIO_s_mem());
	ok = ok && PEM_write_bio_X509_REQ(b, req) == 1;
	X509_REQ_free(req);
	if (!ok) {
		fprintf(stderr, "CSR failed\n");
		exit(1);
	}
	return bio_text(b);
}

/* The CSR's key, parsed as the forwarder parses it (for sg_x509_key_is). */
static bool csr_key(const char *pem, uint8_t *der, size_t cap, sg_csr *csr)
{
	size_t n = 0;
	return sg_csr_decode((const uint8_t *)pem, strlen(pem), der, cap, &n) == SG_OK &&
	       sg_csr_parse(csr, der, n) == SG_OK;
}

/* ---- the test issuer ---- */

static struct {
	sg_kube_informer *inf;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	json_t *queue;   /* objects to act on */
	json_t *handled; /* names taken already */
	bool stop;
	pthread_t th[ISSUER_THREADS];
	atomic_int answers;
} iss = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static const char *jstr(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static void rfc3339_now(char *out, size_t cap)
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *condition(const char *type, const char *status, const char *reason, const char *message)
{
	char now[32];
	rfc3339_now(now, sizeof(now));
	return json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", type, "status", status, "reason", reason, "message",
	                 message, "lastTransitionTime", now);
}

static void write_status(const char *name, json_t *status)
{
	json_t *patch = json_pack("{s:o}", "status", status);
	if (kube_fx_patch(k, kube_fx_named(crs, name, "status"), patch) != SG_OK)
		fprintf(stderr, "test issuer: status of %s: %s\n", name, sg_error_last()->msg);
	else
		atomic_fetch_add(&iss.answers, 1);
}

static char *b64_of(const char *s)
{
	size_t n = strlen(s), cap = sg_b64_encoded_len(SG_B64_STD, n) + 1;
	char *out = malloc(cap);
	if (out && sg_b64_encode(SG_B64_STD, (const uint8_t *)s, n, out, cap) != SG_OK) {
		free(out);
		out = NULL;
	}
	return out;
}

/* The CSR of spec.request (base64 of PEM). */
static X509_REQ *request_of(const json_t *obj)
{
	const char *b64 = jstr(json_object_get(obj, "spec"), "request");
	if (!b64)
		return NULL;
	size_t n = strlen(b64), len = 0;
	uint8_t *pem = malloc(n);
	X509_REQ *req = NULL;
	if (pem && sg_b64_decode(SG_B64_STD, b64, n, pem, n, &len) == SG_OK) {
		BIO *b = BIO_new_mem_buf(pem, (int)len);
		req = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
		BIO_free(b);
	}
	free(pem);
	return req;
}

static X509_EXTENSION *san_of(X509_REQ *req)
{
	STACK_OF(X509_EXTENSION) *exts = X509_REQ_get_extensions(req);
	X509_EXTENSION *san = NULL;
	for (int i = 0; i < sk_X509_EXTENSION_num(exts); i++) {
		X509_EXTENSION *e = sk_X509_EXTENSION_value(exts, i);
		if (OBJ_obj2nid(X509_EXTENSION_get_object(e)) == NID_subject_alt_name)
			san = X509_EXTENSION_dup(e);
	}
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	return san;
}

static void sign(const json_t *obj, const char *name, const char *mode)
{
	X509_REQ *req = request_of(obj);
	if (!req) {
		fprintf(stderr, "test issuer: %s has no readable CSR\n", name);
		return;
	}
	long secs = 3600;
	const char *dur = jstr(json_object_get(obj, "spec"), "duration");
	if (dur && atol(dur) > 0)
		secs = atol(dur);
	X509_EXTENSION *san = san_of(req);
	bool chain = strcmp(mode, "chain") == 0, wrongroot = strcmp(mode, "wrongroot") == 0;
	EVP_PKEY *pub = strcmp(mode, "wrongkey") == 0 ? stranger_key : X509_REQ_get0_pubkey(req);
	X509 *by = chain ? inter : wrongroot ? other_root : root;
	EVP_PKEY *by_key = chain ? inter_key : wrongroot ? other_key : root_key;
	X509 *leaf = make_cert(pub, NULL, by, by_key, false, secs, san);
	X509_EXTENSION_free(san);
	X509_REQ_free(req);
	char *pem = cert_pem(leaf);
	X509_free(leaf);
	if (chain) {
		char *ip = cert_pem(inter);
		size_t n = strlen(pem) + strlen(ip) + strlen(root_pem) + 1;
		char *all = malloc(n);
		snprintf(all, n, "%s%s%s", pem, ip, root_pem);
		free(ip);
		free(pem);
		pem = all;
	}
	char *b64 = b64_of(pem);
	free(pem);
	write_status(name,
	             json_pack("{s:s, s:[o]}", "certificate", b64, "conditions",
	                       condition("Ready", "True", "Issued", "Certificate fetched from issuer successfully")));
	free(b64);
}

/* What issuerRef.name asks of the test issuer. */
static void act(const json_t *obj)
{
	const char *name = sg_kube_meta_str(obj, "name");
	const char *mode = jstr(json_object_get(json_object_get(obj, "spec"), "issuerRef"), "name");
	char now[32];
	rfc3339_now(now, sizeof(now));
	if (!name || !mode || strcmp(mode, "silent") == 0)
		return;
	if (strcmp(mode, "deny") == 0)
		write_status(name, json_pack("{s:[o, o], s:s}", "conditions",
		                             condition("Denied", "True", ISSUER_GROUP, "denied by the test policy"),
		                             condition("Ready", "False", "Denied",
		                                       "The CertificateRequest was denied by an approval controller"),
		                             "failureTime", now));
	else if (strcmp(mode, "fail") == 0)
		write_status(name, json_pack("{s:[o], s:s}", "conditions",
		                             condition("Ready", "False", "Failed", "the test issuer failed on purpose"),
		                             "failureTime", now));
	else if (strcmp(mode, "invalid") == 0)
		write_status(name, json_pack("{s:[o]}", "conditions",
		                             condition("InvalidRequest", "True", "BadRequest",
		                                       "the test issuer finds this request invalid")));
	else if (strcmp(mode, "garbage") == 0) {
		char *b64 =
		    b64_of("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
		write_status(name, json_pack("{s:s, s:[o]}", "certificate", b64, "conditions",
		                             condition("Ready", "True", "Issued", "here it is")));
		free(b64);
	} else {
		sign(obj, name, mode);
	}
}

/* Not ours, answered or terminal already: nothing to do. */
static bool settled(const json_t *obj)
{
	const json_t *ref = json_object_get(json_object_get(obj, "spec"), "issuerRef");
	const char *group = jstr(ref, "group");
	if (!group || strcmp(group, ISSUER_GROUP) != 0)
		return true;
	const json_t *status = json_object_get(obj, "status");
	return json_object_get(status, "certificate") || json_array_size(json_object_get(status, "conditions")) > 0;
}

static void issuer_saw(json_t *obj)
{
	const char *name = sg_kube_meta_str(obj, "name");
	if (!name || settled(obj))
		return;
	pthread_mutex_lock(&iss.mu);
	if (!json_object_get(iss.handled, name)) {
		json_object_set_new(iss.handled, name, json_true());
		json_array_append(iss.queue, obj);
		pthread_cond_signal(&iss.cv);
	}
	pthread_mutex_unlock(&iss.mu);
}

static void issuer_on_add(json_t *obj, void *arg)
{
	(void)arg;
	issuer_saw(obj);
}

static void issuer_on_update(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj, (void)arg;
	issuer_saw(new_obj);
}

static void *issuer_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&iss.mu);
	for (;;) {
		while (!iss.stop && json_array_size(iss.queue) == 0)
			pthread_cond_wait(&iss.cv, &iss.mu);
		if (iss.stop)
			break;
		json_t *obj = json_incref(json_array_get(iss.queue, 0));
		json_array_remove(iss.queue, 0);
		pthread_mutex_unlock(&iss.mu);
		act(obj);
		json_decref(obj);
		pthread_mutex_lock(&iss.mu);
	}
	pthread_mutex_unlock(&iss.mu);
	return NULL;
}

static bool issuer_start(void)
{
	iss.queue = json_array();
	iss.handled = json_object();
	sg_kube_handlers h = {.on_add = issuer_on_add, .on_update = issuer_on_update};
	if (sg_kube_informer_new(&iss.inf, k, &crs, NULL, &h) != SG_OK || sg_kube_informer_start(iss.inf) != SG_OK ||
	    sg_kube_informer_wait_synced(iss.inf, 30000) != SG_OK) {
		fprintf(stderr, "test issuer: %s\n", sg_error_last()->msg);
		return false;
	}
	for (int i = 0; i < ISSUER_THREADS; i++)
		pthread_create(&iss.th[i], NULL, issuer_thread, NULL);
	return true;
}

static void issuer_stop(void)
{
	sg_kube_informer_free(iss.inf);
	iss.inf = NULL;
	pthread_mutex_lock(&iss.mu);
	iss.stop = true;
	pthread_cond_broadcast(&iss.cv);
	pthread_mutex_unlock(&iss.mu);
	for (int i = 0; i < ISSUER_THREADS; i++)
		pthread_join(iss.th[i], NULL);
	json_decref(iss.queue);
	json_decref(iss.handled);
}

/* ---- what done tells ---- */

typedef struct rec {
	pthread_mutex_t mu;
	int calls;
	int rc;
	char *chain;
	size_t len;
	bool nul;    /* chain_pem[len] was NUL */
	bool err_ok; /* err NULL on success, set with rc's code on failure */
	char msg[SG_ERROR_MSG_MAX];
	uint64_t at;
} rec;

static void rec_init(rec *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
}

static void rec_clear(rec *r)
{
	free(r->chain);
	pthread_mutex_destroy(&r->mu);
}

static int rec_calls(rec *r)
{
	pthread_mutex_lock(&r->mu);
	int n = r->calls;
	pthread_mutex_unlock(&r->mu);
	return n;
}

static void on_done(int rc, const char *chain, size_t len, const sg_error *err, void *arg)
{
	rec *r = arg;
	pthread_mutex_lock(&r->mu);
	r->calls++;
	r->rc = rc;
	r->at = sg_now_ns();
	if (rc == SG_OK) {
		r->err_ok = err == NULL && chain != NULL;
		if (chain) {
			r->nul = chain[len] == 0;
			free(r->chain);
			r->chain = malloc(len + 1);
			memcpy(r->chain, chain, len + 1);
			r->len = len;
		}
	} else {
		r->err_ok = err != NULL && err->code == rc && chain == NULL && len == 0;
		snprintf(r->msg, sizeof(r->msg), "%s", err ? err->msg : "");
	}
	pthread_mutex_unlock(&r->mu);
}

/* ---- helpers ---- */

static const char *rid(const char *what, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s-%s", run_id, what);
	return buf;
}

typedef struct fw_opts {
	const char *issuer;
	const char *replica;
	const char *roots; /* the mesh roots; NULL: root_pem */
	bool preserve;
	unsigned max_in_flight, timeout_ms, workers;
	sg_kube *kube;
	bool no_wait;
} fw_opts;

static sg_forward *fw_new(const fw_opts *o)
{
	sg_forward_options fo = {
	    .kube = o->kube ? o->kube : k,
	    .ns = NS,
	    .issuer_name = o->issuer,
	    .issuer_kind = ISSUER_KIND,
	    .issuer_group = ISSUER_GROUP,
	    .roots_pem = o->roots ? o->roots : root_pem,
	    .roots_len = strlen(o->roots ? o->roots : root_pem),
	    .preserve = o->preserve,
	    .max_in_flight = o->max_in_flight,
	    .timeout_ms = o->timeout_ms,
	    .workers = o->workers,
	    .replica_id = o->replica,
	};
	sg_forward *f = NULL;
	SG_CHECK_OK(sg_forward_new(&f, &fo));
	if (f && !o->no_wait)
		SG_WAIT_FOR(30000, sg_forward_ready(f));
	return f;
}

static sg_forward_request request(const char *csr, uint64_t deadline)
{
	return (sg_forward_request){
	    .csr_pem = csr, .csr_len = strlen(csr), .identity = SPIFFE_ID, .ttl = 3600, .deadline_ns = deadline};
}

/* The requests a replica made that exist now (-1 when the list fails);
 * *items gets them when asked. */
static long crs_of(const char *replica, json_t **items)
{
	char sel[128];
	snprintf(sel, sizeof(sel), "%s=%s", SG_FORWARD_LABEL, replica);
	json_t *list = NULL;
	if (sg_kube_list(k, &crs, &(sg_kube_list_opts){.label_selector = sel}, &list) != SG_OK)
		return -1;
	long n = (long)json_array_size(json_object_get(list, "items"));
	if (items)
		*items = json_incref(json_object_get(list, "items"));
	json_decref(list);
	return n;
}

static sg_forward_stats stats(sg_forward *f)
{
	sg_forward_stats st;
	sg_forward_stats_get(f, &st);
	return st;
}

/* The answer holds want certificates, the first for key, none
 * self-signed, and chains to the test root. */
static void check_chain(rec *r, EVP_PKEY *key, size_t want)
{
	SG_CHECK(r->nul && r->err_ok && r->chain && r->len == strlen(r->chain));
	if (!r->chain)
		return;
	sg_x509_bundle *b = NULL, *roots = NULL;
	SG_CHECK_OK(sg_x509_bundle_parse(&b, r->chain, r->len));
	SG_CHECK_OK(sg_x509_bundle_parse(&roots, root_pem, strlen(root_pem)));
	SG_CHECK(sg_x509_bundle_count(b) == want);
	SG_CHECK(sg_x509_chains_to(b, roots));
	for (size_t i = 0; i < sg_x509_bundle_count(b); i++)
		SG_CHECK(!sg_x509_self_signed(b, i));
	BIO *bio = BIO_new_mem_buf(r->chain, (int)r->len);
	X509 *leaf = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	SG_CHECK(leaf && EVP_PKEY_eq(X509_get0_pubkey(leaf), key) == 1);
	X509_free(leaf);
	BIO_free(bio);
	sg_x509_bundle_free(b);
	sg_x509_bundle_free(roots);
}

/* One request through a forwarder of its own with these mesh roots (NULL:
 * root_pem); returns after done. */
static void one_roots(const char *issuer, const char *what, const char *roots, rec *r, EVP_PKEY **key_out)
{
	char buf[64];
	sg_forward *f = fw_new(&(fw_opts){.issuer = issuer, .replica = rid(what, buf, sizeof(buf)), .roots = roots});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec_init(r);
	sg_forward_request q = request(csr, 0);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, r));
	SG_WAIT_FOR(20000, rec_calls(r) == 1);
	SG_WAIT_FOR(20000, crs_of(buf, NULL) == 0); /* deleted once it ended */
	sg_forward_stats st = stats(f);
	SG_CHECK(st.submitted == 1 && st.in_flight == 0 && st.creates == 1);
	SG_WAIT_FOR(20000, stats(f).deletes == 1);
	sg_forward_free(f);
	SG_CHECK(rec_calls(r) == 1);
	free(csr);
	if (key_out)
		*key_out = key;
	else
		EVP_PKEY_free(key);
}

static void one(const char *issuer, const char *what, rec *r, EVP_PKEY **key_out)
{
	one_roots(issuer, what, NULL, r, key_out);
}

/* ---- setup ---- */

static json_t *crd(void)
{
	json_t *open = json_pack("{s:s, s:b}", "type", "object", "x-kubernetes-preserve-unknown-fields", 1);
	return json_pack(
	    "{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:{s:s, s:s, s:s, s:s, s:[s, s]}, s:[{s:s, s:b, s:b, s:{s:{s:s, "
	    "s:{s:O, s:o}}}, s:{s:{}}}]}}",
	    "apiVersion", "apiextensions.k8s.io/v1", "kind", "CustomResourceDefinition", "metadata", "name", CRD_NAME,
	    "spec", "group", "cert-manager.io", "scope", "Namespaced", "names", "plural", "certificaterequests",
	    "singular", "certificaterequest", "kind", "CertificateRequest", "listKind", "CertificateRequestList",
	    "shortNames", "cr", "crs", "versions", "name", "v1", "served", 1, "storage", 1, "schema", "openAPIV3Schema",
	    "type", "object", "properties", "spec", open, "status", open, "subresources", "status");
}

static void t_setup(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	snprintf(run_id, sizeof(run_id), "t%ld", (long)getpid());

	/* Keys and certificates: the mesh root, an intermediate under it, an
	 * unrelated root, and a stranger's key. */
	root_key = ec_key();
	inter_key = ec_key();
	other_key = ec_key();
	stranger_key = ec_key();
	root = make_cert(root_key, "forward-test root", NULL, root_key, true, 86400, NULL);
	inter = make_cert(inter_key, "forward-test intermediate", root, root_key, true, 86400, NULL);
	other_root = make_cert(other_key, "forward-test other root", NULL, other_key, true, 86400, NULL);
	root_pem = cert_pem(root);
	other_root_pem = cert_pem(other_root);

	SG_CHECK_OK(kube_fx_ensure(k, KUBE_FX_CORE("namespaces", NULL, NULL), kube_fx_namespace(NS, NULL, NULL)));
	SG_CHECK_OK(kube_fx_ensure(
	    k, (sg_kube_ref){.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions"},
	    crd()));
	if (sg_test_failures)
		exit(1);
	/* Served once a LIST answers. */
	SG_WAIT_FOR(60000, sg_kube_list(k, &crs, NULL, NULL) == SG_OK);
	/* Whatever an earlier run left in our namespace. */
	json_t *list = NULL;
	if (sg_kube_list(k, &crs, NULL, &list) == SG_OK) {
		size_t i;
		json_t *o;
		json_array_foreach(json_object_get(list, "items"), i, o)
		{
			if (kube_fx_delete(k, kube_fx_named(crs, sg_kube_meta_str(o, "name"), NULL)) != SG_OK)
				fprintf(stderr, "cleanup: %s\n", sg_error_last()->msg);
		}
		json_decref(list);
	}
	SG_CHECK(issuer_start());
}

/* ---- cases ---- */

/* The sg_x509 additions, on certificates made here. */
static void t_x509_helpers(void)
{
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	uint8_t der[SG_CSR_MAX_DER];
	sg_csr parsed;
	SG_CHECK(csr_key(csr, der, sizeof(der), &parsed));
	X509 *mine = make_cert(key, NULL, root, root_key, false, 3600, NULL);
	X509 *theirs = make_cert(stranger_key, NULL, root, root_key, false, 3600, NULL);
	char *a = cert_pem(mine), *b = cert_pem(theirs);
	size_t n = strlen(a) + strlen(b) + strlen(root_pem) + 64;
	char *text = malloc(n);
	snprintf(text, n, "comment\n%s%s\n%s", a, b, root_pem);
	sg_x509_bundle *bundle = NULL;
	SG_CHECK_OK(sg_x509_bundle_parse(&bundle, text, strlen(text)));
	SG_CHECK(sg_x509_bundle_count(bundle) == 3);
	(void)sg_error_set(SG_EDENIED, "kept");
	SG_CHECK(sg_x509_key_is(bundle, 0, &parsed.key));
	SG_CHECK(!sg_x509_key_is(bundle, 1, &parsed.key));
	SG_CHECK(!sg_x509_key_is(bundle, 3, &parsed.key));
	SG_CHECK(strcmp(sg_error_last()->msg, "kept") == 0);
	SG_CHECK(!sg_x509_self_signed(bundle, 0) && !sg_x509_self_signed(bundle, 1) && sg_x509_self_signed(bundle, 2));
	SG_CHECK(!sg_x509_self_signed(bundle, 3));
	char *pem = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_x509_pem(bundle, 1, &pem, &len));
	SG_CHECK(pem && len == strlen(b) && strcmp(pem, b) == 0);
	free(pem);
	SG_CHECK_RC(sg_x509_pem(bundle, 3, &pem, &len), SG_EINVAL);
	SG_CHECK(pem == NULL);
	sg_x509_bundle_free(bundle);
	free(text);
	free(a);
	free(b);
	X509_free(mine);
	X509_free(theirs);
	free(csr);
	EVP_PKEY_free(key);
}

static void t_answered(void)
{
	rec r;
	EVP_PKEY *key = NULL;
	one("sign", "answered", &r, &key);
	SG_CHECK_OK(r.rc);
	check_chain(&r, key, 1);
	rec_clear(&r);
	EVP_PKEY_free(key);
}

/* leaf + intermediate + root written: leaf + intermediate answered. */
static void t_chain(void)
{
	rec r;
	EVP_PKEY *key = NULL;
	one("chain", "chain", &r, &key);
	SG_CHECK_OK(r.rc);
	check_chain(&r, key, 2);
	rec_clear(&r);
	EVP_PKEY_free(key);
}

static void t_preserve(void)
{
	char buf[64];
	const char *replica = rid("preserve", buf, sizeof(buf));
	sg_forward *f = fw_new(&(fw_opts){.issuer = "sign", .replica = replica, .preserve = true});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r;
	rec_init(&r);
	sg_forward_request q = request(csr, 0);
	q.ttl = 7200;
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	SG_WAIT_FOR(20000, rec_calls(&r) == 1);
	SG_CHECK_OK(r.rc);
	check_chain(&r, key, 1);
	SG_CHECK(stats(f).creates == 1 && stats(f).deletes == 0);
	sg_forward_free(f);

	json_t *items = NULL;
	SG_CHECK(crs_of(replica, &items) == 1);
	json_t *cr = json_array_get(items, 0);
	const json_t *meta = json_object_get(cr, "metadata"), *spec = json_object_get(cr, "spec");
	const char *name = jstr(meta, "name");
	SG_CHECK(name && strncmp(name, "signet-", 7) == 0 && strlen(name) == 7 + 32);
	SG_CHECK(jstr(json_object_get(meta, "labels"), SG_FORWARD_LABEL) &&
	         strcmp(jstr(json_object_get(meta, "labels"), SG_FORWARD_LABEL), replica) == 0);
	const char *ids = jstr(json_object_get(meta, "annotations"), SG_FORWARD_IDENTITY_ANNOTATION);
	SG_CHECK(ids && strcmp(ids, SPIFFE_ID) == 0);
	SG_CHECK(jstr(spec, "duration") && strcmp(jstr(spec, "duration"), "7200s") == 0);
	SG_CHECK(json_is_false(json_object_get(spec, "isCA")));
	const json_t *u = json_object_get(spec, "usages");
	SG_CHECK(json_array_size(u) == 2 && strcmp(json_string_value(json_array_get(u, 0)), "client auth") == 0 &&
	         strcmp(json_string_value(json_array_get(u, 1)), "server auth") == 0);
	const json_t *ref = json_object_get(spec, "issuerRef");
	SG_CHECK(jstr(ref, "name") && strcmp(jstr(ref, "name"), "sign") == 0);
	SG_CHECK(jstr(ref, "kind") && strcmp(jstr(ref, "kind"), ISSUER_KIND) == 0);
	SG_CHECK(jstr(ref, "group") && strcmp(jstr(ref, "group"), ISSUER_GROUP) == 0);
	/* spec.request: base64 of the CSR's PEM, the same key */
	X509_REQ *req = request_of(cr);
	SG_CHECK(req && EVP_PKEY_eq(X509_REQ_get0_pubkey(req), key) == 1);
	X509_REQ_free(req);
	SG_CHECK(jstr(json_object_get(cr, "status"), "certificate") != NULL);
	if (name) {
		sg_kube_ref del = crs;
		del.name = name;
		SG_CHECK_OK(sg_kube_delete(k, &del, NULL));
	}
	json_decref(items);
	SG_WAIT_FOR(10000, crs_of(replica, NULL) == 0);
	rec_clear(&r);
	free(csr);
	EVP_PKEY_free(key);
}

static void refused(const char *issuer, const char *what, const char *why)
{
	rec r;
	one(issuer, what, &r, NULL);
	SG_CHECK_RC(r.rc, SG_EDENIED);
	SG_CHECK(r.err_ok);
	printf("%s: %s\n", what, r.msg);
	SG_CHECK(strstr(r.msg, why) != NULL);
	rec_clear(&r);
}

static void t_denied(void)
{
	refused("deny", "denied", "denied by issuer " ISSUER_KIND "/deny: denied by the test policy");
}

static void t_failed(void)
{
	refused("fail", "failed", "failed by issuer " ISSUER_KIND "/fail: the test issuer failed on purpose");
}

static void t_invalid(void)
{
	refused("invalid", "invalid", "invalid by issuer " ISSUER_KIND "/invalid: the test issuer finds this");
}

static void bad_answer(const char *issuer, const char *what, const char *why)
{
	rec r;
	one(issuer, what, &r, NULL);
	SG_CHECK_RC(r.rc, SG_EPROTO);
	SG_CHECK(r.err_ok);
	printf("%s: %s\n", what, r.msg);
	SG_CHECK(strstr(r.msg, why) != NULL);
	rec_clear(&r);
}

static void t_bad_certificate(void)
{
	bad_answer("wrongkey", "wrongkey", "public key that does not match the CSR");
	bad_answer("wrongroot", "wrongroot", "does not verify against the mesh roots");
	bad_answer("garbage", "garbage", "status.certificate does not parse");

	/* Roots replaced: the same issuer's answers no longer chain. */
	char buf[64];
	const char *replica = rid("roots", buf, sizeof(buf));
	sg_forward *f = fw_new(&(fw_opts){.issuer = "sign", .replica = replica});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	SG_CHECK_RC(sg_forward_set_roots(f, "not PEM", 7), SG_EINVAL);
	SG_CHECK_OK(sg_forward_set_roots(f, other_root_pem, strlen(other_root_pem)));
	rec r;
	rec_init(&r);
	sg_forward_request q = request(csr, 0);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	SG_WAIT_FOR(20000, rec_calls(&r) == 1);
	SG_CHECK_RC(r.rc, SG_EPROTO);
	rec_clear(&r);
	/* Both roots: answered again. */
	size_t n = strlen(root_pem) + strlen(other_root_pem) + 1;
	char *both = malloc(n);
	snprintf(both, n, "%s%s", other_root_pem, root_pem);
	SG_CHECK_OK(sg_forward_set_roots(f, both, strlen(both)));
	free(both);
	rec_init(&r);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	SG_WAIT_FOR(20000, rec_calls(&r) == 1);
	SG_CHECK_OK(r.rc);
	check_chain(&r, key, 1);
	rec_clear(&r);
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 0);
	sg_forward_stats st = stats(f);
	SG_CHECK(st.issued == 1 && st.errors == 1 && st.in_flight == 0);
	sg_forward_free(f);
	free(csr);
	EVP_PKEY_free(key);
}

/* Mesh roots that hold an intermediate, not its root (istiod's per-signer
 * roots; a CA issuer whose ca.crt is its own intermediate): trusted as it
 * stands, as istio-csr's Go pool trusts it. A leaf under the root alone
 * does not verify against it. */
static void t_signer_roots(void)
{
	char *inter_pem = cert_pem(inter);
	rec r;
	EVP_PKEY *key = NULL;
	one_roots("chain", "signer-ok", inter_pem, &r, &key);
	SG_CHECK_OK(r.rc);
	check_chain(&r, key, 2); /* leaf + intermediate: the root dropped */
	rec_clear(&r);
	EVP_PKEY_free(key);
	one_roots("sign", "signer-no", inter_pem, &r, NULL);
	SG_CHECK_RC(r.rc, SG_EPROTO);
	SG_CHECK(strstr(r.msg, "does not verify against the mesh roots") != NULL);
	rec_clear(&r);
	free(inter_pem);
}

/* Someone else deletes the request while it waits. */
static void t_deleted(void)
{
	char buf[64];
	const char *replica = rid("deleted", buf, sizeof(buf));
	sg_forward *f = fw_new(&(fw_opts){.issuer = "silent", .replica = replica, .workers = 1});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r;
	rec_init(&r);
	sg_forward_request q = request(csr, 0);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	json_t *items = NULL;
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 1);
	SG_CHECK(crs_of(replica, &items) == 1);
	sg_kube_ref del = crs;
	del.name = sg_kube_meta_str(json_array_get(items, 0), "name");
	SG_CHECK(del.name != NULL);
	/* The object exists before its create returns: a delete seen before
	 * the worker notes that the create succeeded leaves it a delete to
	 * make (of nothing). With one worker, jobs run in order, so once a
	 * second request exists the first create has returned. */
	rec barrier;
	rec_init(&barrier);
	sg_forward_request qb = request(csr, sg_now_ns() + 300ull * 1000000000u); /* waits until free */
	SG_CHECK_OK(sg_forward_submit(f, &qb, on_done, &barrier));
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 2);
	if (del.name)
		SG_CHECK_OK(sg_kube_delete(k, &del, NULL));
	json_decref(items);
	SG_WAIT_FOR(20000, rec_calls(&r) == 1);
	SG_CHECK_RC(r.rc, SG_EDENIED);
	printf("deleted: %s\n", r.msg);
	SG_CHECK(strstr(r.msg, "was deleted before it was answered") != NULL);
	sg_forward_stats st = stats(f);
	SG_CHECK(st.refused == 1 && st.in_flight == 1 && st.creates == 2);
	/* Gone already: nothing to delete. Once a later request exists any
	 * delete queued before it has run (one worker). */
	rec later;
	rec_init(&later);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &later));
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 2);
	SG_CHECK(stats(f).deletes == 0);
	sg_forward_free(f);
	SG_CHECK(rec_calls(&r) == 1 && rec_calls(&later) == 1 && rec_calls(&barrier) == 1);
	rec_clear(&barrier);
	rec_clear(&later);
	rec_clear(&r);
	free(csr);
	EVP_PKEY_free(key);
}

/* An issuer that never answers: SG_ETIMEOUT at the caller's deadline. */
static void t_deadline(void)
{
	char buf[64];
	const char *replica = rid("deadline", buf, sizeof(buf));
	sg_forward *f = fw_new(&(fw_opts){.issuer = "silent", .replica = replica});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r;
	rec_init(&r);
	uint64_t t0 = sg_now_ns(), deadline = t0 + 1500 * UINT64_C(1000000);
	sg_forward_request q = request(csr, deadline);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	SG_WAIT_FOR(10000, rec_calls(&r) == 1);
	SG_CHECK_RC(r.rc, SG_ETIMEOUT);
	printf("deadline: %s after %.3f s\n", r.msg, (double)(r.at - t0) / 1e9);
	/* "within N ms": the time left at submit, a little after t0 */
	const char *within = strstr(r.msg, "no answer from issuer " ISSUER_KIND "/silent within ");
	unsigned ms = 0;
	SG_CHECK(within && sscanf(within + strlen("no answer from issuer " ISSUER_KIND "/silent within "), "%u ms",
	                          &ms) == 1 && ms > 1000 && ms <= 1500);
	/* The timer ticks every 100 ms; 3 s leaves a loaded machine under TSan
	 * room and still tells the deadline from the default timeout (30 s). */
	SG_CHECK(r.at >= deadline && r.at - deadline < 3000 * UINT64_C(1000000));
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 0);
	sg_forward_stats st = stats(f);
	SG_CHECK(st.timeouts == 1 && st.in_flight == 0 && st.creates == 1);
	SG_WAIT_FOR(20000, stats(f).deletes == 1);
	sg_forward_free(f);
	rec_clear(&r);
	free(csr);
	EVP_PKEY_free(key);
}

static bool cancel_flag(void *arg)
{
	return atomic_load((atomic_bool *)arg);
}

/* The caller goes away: the request ends within a tick or two. */
static void t_cancelled(void)
{
	char buf[64];
	const char *replica = rid("cancelled", buf, sizeof(buf));
	sg_forward *f = fw_new(&(fw_opts){.issuer = "silent", .replica = replica});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r;
	rec_init(&r);
	atomic_bool gone = false;
	sg_forward_request q = request(csr, 0);
	q.cancelled = cancel_flag;
	q.cancel_arg = &gone;
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 1);
	SG_CHECK(rec_calls(&r) == 0);
	uint64_t t0 = sg_now_ns();
	atomic_store(&gone, true);
	SG_WAIT_FOR(20000, rec_calls(&r) == 1);
	SG_CHECK_RC(r.rc, SG_ETIMEOUT);
	SG_CHECK(strstr(r.msg, "the call ended") != NULL);
	SG_CHECK(r.at - t0 < 3000 * UINT64_C(1000000)); /* a tick is 100 ms; the timeout would be 30 s */
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 0);
	SG_CHECK(stats(f).timeouts == 1 && stats(f).in_flight == 0);
	sg_forward_free(f);
	rec_clear(&r);
	free(csr);
	EVP_PKEY_free(key);
}

/* max_in_flight 3 with a silent issuer: the fourth is SG_EBUSY at once;
 * after the three time out (default timeout 1 s), submits are taken again. */
static void t_max_in_flight(void)
{
	char buf[64];
	const char *replica = rid("max", buf, sizeof(buf));
	sg_forward *f =
	    fw_new(&(fw_opts){.issuer = "silent", .replica = replica, .max_in_flight = 3, .timeout_ms = 1000});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r[5];
	for (int i = 0; i < 5; i++)
		rec_init(&r[i]);
	sg_forward_request q = request(csr, 0);
	uint64_t t0 = sg_now_ns();
	for (int i = 0; i < 3; i++)
		SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r[i]));
	SG_CHECK_RC(sg_forward_submit(f, &q, on_done, &r[3]), SG_EBUSY);
	SG_CHECK_MSG("3 certificate requests are waiting");
	sg_forward_stats st = stats(f);
	SG_CHECK(st.submitted == 3 && st.rejected == 1 && st.in_flight == 3);
	SG_WAIT_FOR(10000, rec_calls(&r[0]) == 1 && rec_calls(&r[1]) == 1 && rec_calls(&r[2]) == 1);
	for (int i = 0; i < 3; i++) {
		SG_CHECK_RC(r[i].rc, SG_ETIMEOUT);
		SG_CHECK(r[i].at - t0 >= 1000 * UINT64_C(1000000));
	}
	SG_CHECK(strstr(r[0].msg, "within 1000 ms") != NULL);
	SG_CHECK(stats(f).in_flight == 0);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r[4]));
	SG_WAIT_FOR(10000, rec_calls(&r[4]) == 1);
	SG_CHECK_RC(r[4].rc, SG_ETIMEOUT);
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == 0);
	st = stats(f);
	SG_CHECK(st.submitted == 4 && st.rejected == 1 && st.timeouts == 4 && st.in_flight == 0);
	sg_forward_free(f);
	SG_CHECK(rec_calls(&r[3]) == 0);
	for (int i = 0; i < 5; i++)
		rec_clear(&r[i]);
	free(csr);
	EVP_PKEY_free(key);
}

/* Credentials without RBAC rights: the create is refused (403), so the
 * request fails with SG_EBUSY and the API's words; never ready. */
static void t_rbac(void)
{
	sg_kube *weak = kube_fx_user_client();
	SG_CHECK(weak != NULL);
	if (!weak)
		return;
	char buf[64];
	sg_forward *f = fw_new(
	    &(fw_opts){.issuer = "sign", .replica = rid("rbac", buf, sizeof(buf)), .kube = weak, .no_wait = true});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r;
	rec_init(&r);
	sg_forward_request q = request(csr, 0);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	SG_WAIT_FOR(20000, rec_calls(&r) == 1);
	SG_CHECK_RC(r.rc, SG_EBUSY);
	printf("rbac: %s\n", r.msg);
	SG_CHECK(strstr(r.msg, "cannot create certificate request") != NULL && strstr(r.msg, "403") != NULL);
	sg_forward_stats st = stats(f);
	SG_CHECK(st.errors == 1 && st.api_errors == 1 && st.creates == 1 && st.deletes == 0 && st.in_flight == 0);
	SG_CHECK(!sg_forward_ready(f));
	sg_forward_free(f);
	sg_kube_free(weak);
	rec_clear(&r);
	free(csr);
	EVP_PKEY_free(key);
}

/* ---- the burst ---- */

static struct {
	sg_forward *f;
	char *csr[BURST];
	rec r[BURST];
	atomic_int refused;
} burst;

static void *burst_thread(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = t; i < BURST; i += BURST_THREADS) {
		sg_forward_request q = request(burst.csr[i], 0);
		if (sg_forward_submit(burst.f, &q, on_done, &burst.r[i]) != SG_OK)
			atomic_fetch_add(&burst.refused, 1);
	}
	return NULL;
}

static int burst_done(void)
{
	int n = 0;
	for (int i = 0; i < BURST; i++)
		n += rec_calls(&burst.r[i]);
	return n;
}

static void t_burst(void)
{
	char buf[64];
	const char *replica = rid("burst", buf, sizeof(buf));
	/* The forwarder's own client, as in signetd, here without a rate limit:
	 * the time measured is the API server's and the issuer's. */
	sg_kube *kf = kube_env_client(-1, 0);
	SG_CHECK(kf != NULL);
	if (!kf)
		return;
	burst.f = fw_new(&(fw_opts){.issuer = "sign", .replica = replica, .kube = kf});
	EVP_PKEY *keys[BURST];
	for (int i = 0; i < BURST; i++) {
		keys[i] = ec_key();
		burst.csr[i] = make_csr(keys[i], SPIFFE_ID);
		rec_init(&burst.r[i]);
	}
	int answers0 = atomic_load(&iss.answers);
	uint64_t t0 = sg_now_ns();
	pthread_t th[BURST_THREADS];
	for (int t = 0; t < BURST_THREADS; t++)
		pthread_create(&th[t], NULL, burst_thread, (void *)(intptr_t)t);
	for (int t = 0; t < BURST_THREADS; t++)
		pthread_join(th[t], NULL);
	SG_CHECK(atomic_load(&burst.refused) == 0);
	SG_WAIT_FOR(120000, burst_done() == BURST);
	uint64_t last = 0;
	int ok = 0;
	for (int i = 0; i < BURST; i++) {
		SG_CHECK(rec_calls(&burst.r[i]) == 1);
		if (burst.r[i].at > last)
			last = burst.r[i].at;
		if (burst.r[i].rc == SG_OK) {
			ok++;
			check_chain(&burst.r[i], keys[i], 1);
		} else {
			fprintf(stderr, "burst %d: %d %s\n", i, burst.r[i].rc, burst.r[i].msg);
		}
	}
	SG_CHECK(ok == BURST);
	double wall = (double)(last - t0) / 1e9;
	SG_WAIT_FOR(60000, crs_of(replica, NULL) == 0);
	/* Counted before each call; the last calls may still be on their way
	 * through the client's rate limit on a loaded machine. The sweeper
	 * (first look 10 s after start) leaves this run's requests alone, so
	 * no request is deleted twice. */
	SG_WAIT_FOR(30000, stats(burst.f).deletes >= BURST);
	SG_CHECK(stats(burst.f).deletes == BURST && stats(burst.f).swept == 0);
	sg_forward_stats st = stats(burst.f);
	SG_CHECK(st.submitted == BURST && st.issued == BURST && st.creates == BURST && st.api_errors == 0 &&
	         st.in_flight == 0);
	printf("burst: %d certificates in %.3f s (%.0f/s), API calls per certificate %.2f "
	       "(creates %llu + deletes %llu), issuer status writes %d\n",
	       BURST, wall, BURST / wall, (double)(st.creates + st.deletes) / BURST, (unsigned long long)st.creates,
	       (unsigned long long)st.deletes, atomic_load(&iss.answers) - answers0);
	sg_forward_free(burst.f);
	sg_kube_free(kf);
	for (int i = 0; i < BURST; i++) {
		rec_clear(&burst.r[i]);
		free(burst.csr[i]);
		EVP_PKEY_free(keys[i]);
	}
}

/* free() with requests waiting: each done once, SG_EBUSY; nothing left. */
static void t_free_pending(void)
{
	enum { WAITING = 5, FRESH = 40 };
	char buf[64];
	const char *replica = rid("free", buf, sizeof(buf));
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	sg_forward_request q = request(csr, 0);
	rec r[FRESH];

	/* Created and waiting. */
	sg_forward *f = fw_new(&(fw_opts){.issuer = "silent", .replica = replica});
	for (int i = 0; i < WAITING; i++) {
		rec_init(&r[i]);
		SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r[i]));
	}
	SG_WAIT_FOR(20000, crs_of(replica, NULL) == WAITING);
	uint64_t t0 = sg_now_ns();
	sg_forward_free(f);
	printf("free with %d waiting: %.3f s\n", WAITING, (double)(sg_now_ns() - t0) / 1e9);
	for (int i = 0; i < WAITING; i++) {
		SG_CHECK(rec_calls(&r[i]) == 1);
		SG_CHECK_RC(r[i].rc, SG_EBUSY);
		SG_CHECK(r[i].err_ok && strstr(r[i].msg, "shutting down") != NULL);
		rec_clear(&r[i]);
	}
	SG_CHECK(crs_of(replica, NULL) == 0); /* free deleted them before returning */

	/* Freed at once: creates queued, in flight or made. */
	f = fw_new(&(fw_opts){.issuer = "silent", .replica = replica});
	for (int i = 0; i < FRESH; i++) {
		rec_init(&r[i]);
		SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r[i]));
	}
	sg_forward_free(f);
	for (int i = 0; i < FRESH; i++) {
		SG_CHECK(rec_calls(&r[i]) == 1);
		SG_CHECK_RC(r[i].rc, SG_EBUSY);
		rec_clear(&r[i]);
	}
	SG_CHECK(crs_of(replica, NULL) == 0);
	free(csr);
	EVP_PKEY_free(key);
}

static void t_arguments(void)
{
	sg_forward *f = NULL;
	sg_forward_options fo = {
	    .kube = k, .ns = NS, .issuer_name = "sign", .roots_pem = root_pem, .roots_len = strlen(root_pem)};
	fo.ns = "Not_A_Namespace";
	SG_CHECK_RC(sg_forward_new(&f, &fo), SG_EINVAL);
	fo.ns = NS;
	fo.replica_id = "-bad-";
	SG_CHECK_RC(sg_forward_new(&f, &fo), SG_EINVAL);
	fo.replica_id = NULL;
	fo.roots_pem = "garbage";
	fo.roots_len = 7;
	SG_CHECK_RC(sg_forward_new(&f, &fo), SG_EINVAL);
	fo.roots_pem = NULL;
	fo.roots_len = 0;
	SG_CHECK_RC(sg_forward_new(&f, &fo), SG_EINVAL);
	SG_CHECK(f == NULL);
	sg_forward_free(NULL);

	char buf[64];
	f = fw_new(&(fw_opts){.issuer = "silent", .replica = rid("args", buf, sizeof(buf)), .no_wait = true});
	EVP_PKEY *key = ec_key();
	char *csr = make_csr(key, SPIFFE_ID);
	rec r;
	rec_init(&r);
	sg_forward_request q = request("not a CSR", 0);
	SG_CHECK_RC(sg_forward_submit(f, &q, on_done, &r), SG_EINVAL);
	q = request(csr, 0);
	q.identity = NULL;
	SG_CHECK_RC(sg_forward_submit(f, &q, on_done, &r), SG_EINVAL);
	q.identity = "spiffe://x\n";
	SG_CHECK_RC(sg_forward_submit(f, &q, on_done, &r), SG_EINVAL);
	q = request(csr, 0);
	q.ttl = 0;
	SG_CHECK_RC(sg_forward_submit(f, &q, on_done, &r), SG_EINVAL);
	SG_CHECK(stats(f).submitted == 0 && stats(f).creates == 0);
	sg_forward_free(f);
	SG_CHECK(rec_calls(&r) == 0);
	rec_clear(&r);
	free(csr);
	EVP_PKEY_free(key);
}

/* Requests of any forwarder in the namespace (-1 when the list fails). */
/* A CertificateRequest as a replica labelled `replica` left it (for the
 * silent issuer: nobody will touch it). */
static void leftover(const char *name, const char *replica)
{
	json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:s, s:{s:s, s:s, s:s}}}", "apiVersion",
	                      "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name", name, "namespace", NS,
	                      "labels", SG_FORWARD_LABEL, replica, "spec", "request", "eA==", "issuerRef", "name", "silent",
	                      "kind", ISSUER_KIND, "group", ISSUER_GROUP);
	SG_CHECK_OK(kube_fx_create(k, crs, o));
}

static bool exists(const char *name)
{
	sg_kube_ref r = crs;
	r.name = name;
	json_t *o = NULL;
	int rc = sg_kube_get(k, &r, &o);
	json_decref(o);
	return rc != SG_ENOTFOUND;
}

/* What a crash left: this replica's own requests that nobody waits for
 * go at the first sweep; another replica's only once they are older than
 * orphan_age_s; a request still waited for stays. */
static void t_sweep(void)
{
	char mine[64], theirs[64], n1[80], n2[80];
	rid("sweep-me", mine, sizeof(mine));
	rid("sweep-other", theirs, sizeof(theirs));
	snprintf(n1, sizeof(n1), "%s-left", mine);
	snprintf(n2, sizeof(n2), "%s-left", theirs);
	leftover(n1, mine);
	leftover(n2, theirs);
	/* This replica's leftovers are those of an earlier run: made in a
	 * second before the forwarder's. */
	int64_t made = sg_wall_seconds();
	SG_WAIT_FOR(3000, sg_wall_seconds() > made);
	sg_forward_options fo = {
	    .kube = k, .ns = NS, .issuer_name = "silent", .issuer_kind = ISSUER_KIND, .issuer_group = ISSUER_GROUP,
	    .roots_pem = root_pem, .roots_len = strlen(root_pem), .replica_id = mine,
	    /* Old enough after 9 s at the earliest (creationTimestamp has whole
	     * seconds): the checks below that it is young yet come well before
	     * that on a slow machine too. */
	    .orphan_age_s = 10, .sweep_interval_ms = 500,
	};
	sg_forward *f = NULL;
	SG_CHECK_OK(sg_forward_new(&f, &fo));
	if (!f)
		return;
	SG_WAIT_FOR(30000, sg_forward_ready(f));
	/* a request still waited for is never swept */
	rec r;
	rec_init(&r);
	char *csr = make_csr(stranger_key, SPIFFE_ID);
	sg_forward_request q = request(csr, sg_now_ns() + 120ull * 1000000000u);
	SG_CHECK_OK(sg_forward_submit(f, &q, on_done, &r));
	/* the old one of this replica goes, the waited-for one (created by
	 * the forwarder) stays */
	SG_WAIT_FOR(10000, !exists(n1) && crs_of(mine, NULL) == 1);
	SG_CHECK(crs_of(theirs, NULL) == 1);          /* the other replica's is young yet */
	SG_WAIT_FOR(30000, crs_of(theirs, NULL) == 0); /* ... and goes once it is old */
	SG_CHECK(crs_of(mine, NULL) == 1);             /* the waited-for request stayed */
	/* The sweeper counts a delete once its answer is back, which can be
	 * after the list above no longer shows the request. */
	SG_WAIT_FOR(10000, stats(f).swept == 2);
	SG_CHECK(rec_calls(&r) == 0);
	sg_forward_free(f);
	SG_CHECK(rec_calls(&r) == 1);
	SG_WAIT_FOR(10000, crs_of(mine, NULL) == 0);
	rec_clear(&r);
	free(csr);
}

static long ours_left(json_t **list)
{
	json_decref(*list);
	*list = NULL;
	if (sg_kube_list(k, &crs, &(sg_kube_list_opts){.label_selector = SG_FORWARD_LABEL}, list) != SG_OK)
		return -1;
	return (long)json_array_size(json_object_get(*list, "items"));
}

/* Nothing of ours is left in the namespace. */
static void t_zz_nothing_left(void)
{
	json_t *list = NULL;
	SG_WAIT_FOR(20000, ours_left(&list) == 0);
	if (json_array_size(json_object_get(list, "items")) > 0) {
		size_t i;
		json_t *o;
		json_array_foreach(json_object_get(list, "items"), i, o)
		    fprintf(stderr, "left: %s\n", sg_kube_meta_str(o, "name"));
	}
	json_decref(list);
	issuer_stop();
	sg_kube_free(k);
	k = NULL;
	X509_free(root);
	X509_free(inter);
	X509_free(other_root);
	EVP_PKEY_free(root_key);
	EVP_PKEY_free(inter_key);
	EVP_PKEY_free(other_key);
	EVP_PKEY_free(stranger_key);
	free(root_pem);
	free(other_root_pem);
}

SG_TEST_MAIN(SG_TEST(t_setup), SG_TEST(t_x509_helpers), SG_TEST(t_answered), SG_TEST(t_chain), SG_TEST(t_preserve),
             SG_TEST(t_denied), SG_TEST(t_failed), SG_TEST(t_invalid), SG_TEST(t_bad_certificate),
             SG_TEST(t_signer_roots), SG_TEST(t_deleted), SG_TEST(t_deadline), SG_TEST(t_cancelled),
             SG_TEST(t_max_in_flight), SG_TEST(t_rbac), SG_TEST(t_burst), SG_TEST(t_free_pending), SG_TEST(t_arguments),
             SG_TEST(t_sweep), SG_TEST(t_zz_nothing_left))
