/*
 * signet benchmarks: each stage of the issuance path, the whole path, the
 * signer pool at 1..4 threads, an ES256 token's verification with a JWKS
 * key as parsed and as prepared for service, and - measured in the same
 * process on the same token - the ceilings they are compared with: raw
 * C_Sign through the module's own function list, and OpenSSL's own sign
 * and verify.
 *
 * One CA per process, because SoftHSM2 reads its configuration once per
 * process: SIGNET_BENCH_CA=ecdsa-p256 (default) or rsa-2048 selects it. The
 * CA is made by the real signetctl in a temporary folder
 * (SIGNET_BENCH_TMP, default /tmp). SIGNET_BENCH_CSRS sets how many distinct
 * CSRs of each kind are generated up front (default 256); benchmarks rotate
 * through them. Every issued certificate's status is checked; an error fails
 * the benchmark rather than being timed.
 */
#include "bench_shim.h"
#include "sg_appliance.h"
#include "sg_cert.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_csr.h"
#include "sg_issuer.h"
#include "sg_jwk.h"
#include "sg_opt.h"
#include "sg_pool.h"

#include <dlfcn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct csr_set {
	char **pem;
	size_t *len;
	size_t n;
} csr_set;

typedef struct bench_args {
	sg_settings s;
} bench_args;

static const sg_opt opts[] = {SG_SETTINGS_ROWS(bench_args, s, "warn")};

static struct {
	char ca_type[32];
	bench_args args;
	sg_appliance *app;
	csr_set p256, rsa;
	EVP_PKEY *soft_ca; /* a software key of the CA's type, for OpenSSL's own speed */
	EVP_PKEY *soft_p256;
} g;

static void die(const char *what)
{
	fprintf(stderr, "bench_signet: %s: %s\n", what, sg_error_last()->msg);
	exit(1);
}

static char *make_csr(EVP_PKEY *k, size_t *len)
{
	X509_REQ *r = X509_REQ_new();
	X509_REQ_set_pubkey(r, k);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name,
							  "critical,URI:spiffe://cluster.local/ns/default/sa/default"));
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
	X509_REQ_free(r);
	return out;
}

static void make_csrs(csr_set *set, size_t n, bool rsa)
{
	set->pem = calloc(n, sizeof(*set->pem));
	set->len = calloc(n, sizeof(*set->len));
	set->n = n;
	for (size_t i = 0; i < n; i++) {
		EVP_PKEY *k = rsa ? EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048)
				  : EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
		set->pem[i] = make_csr(k, &set->len[i]);
		EVP_PKEY_free(k);
	}
}

/* ---- CSR stage ---------------------------------------------------------- */

static void bm_csr_parse_verify(sg_bench_state *st, void *arg)
{
	csr_set *set = arg;
	sg_crypto *c;
	if (sg_crypto_new(&c) < 0)
		return sg_bench_fail(st, "sg_crypto_new");
	static _Thread_local uint8_t der[SG_CSR_MAX_DER];
	sg_csr csr;
	size_t i = 0, len;
	while (sg_bench_next(st)) {
		size_t k = i++ % set->n;
		if (sg_csr_decode((const uint8_t *)set->pem[k], set->len[k], der, sizeof(der), &len) < 0 ||
		    sg_csr_parse(&csr, der, len) < 0 || sg_csr_verify(&csr, c) < 0) {
			sg_bench_fail(st, sg_error_last()->msg);
			break;
		}
	}
	sg_bench_items(st, sg_bench_iterations(st));
	sg_crypto_free(c);
}

/* What the textbook OpenSSL path costs for the same work (default library
 * context, d2i_X509_REQ builds an OSSL_DECODER chain per call). */
static void bm_openssl_req_verify(sg_bench_state *st, void *arg)
{
	csr_set *set = arg;
	static _Thread_local uint8_t der[SG_CSR_MAX_DER];
	size_t i = 0, len;
	while (sg_bench_next(st)) {
		size_t k = i++ % set->n;
		if (sg_csr_decode((const uint8_t *)set->pem[k], set->len[k], der, sizeof(der), &len) < 0)
			return sg_bench_fail(st, "decode");
		const unsigned char *p = der;
		X509_REQ *r = d2i_X509_REQ(NULL, &p, (long)len);
		EVP_PKEY *pk = r ? X509_REQ_get0_pubkey(r) : NULL;
		if (!pk || X509_REQ_verify(r, pk) != 1) {
			X509_REQ_free(r);
			return sg_bench_fail(st, "X509_REQ_verify");
		}
		X509_REQ_free(r);
	}
	sg_bench_items(st, sg_bench_iterations(st));
}

/* ---- certificate build -------------------------------------------------- */

static void bm_cert_build(sg_bench_state *st, void *arg)
{
	csr_set *set = arg;
	sg_crypto *c;
	if (sg_crypto_new(&c) < 0)
		return sg_bench_fail(st, "sg_crypto_new");
	uint8_t der[SG_CSR_MAX_DER], tbs[SG_CERT_MAX_DER];
	size_t len;
	sg_csr csr;
	if (sg_csr_decode((const uint8_t *)set->pem[0], set->len[0], der, sizeof(der), &len) < 0 ||
	    sg_csr_parse(&csr, der, len) < 0)
		return sg_bench_fail(st, "parse");
	const sg_cert_issuer *iss = sg_ca_issuer(sg_appliance_ca(g.app));
	while (sg_bench_next(st)) {
		int64_t now = sg_wall_seconds();
		sg_cert_spec spec = {
			.not_before = now - SG_ISTIO_BACKDATE,
			.not_after = now + 3600,
			.key = &csr.key,
			.sans = csr.sans,
			.san_count = 1,
			.key_usage = SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT,
			.ext_key_usage = SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH,
			.path_len = -1,
		};
		sg_der_writer w;
		sg_der_writer_init(&w, tbs, sizeof(tbs));
		if (sg_cert_serial(&spec) < 0 || sg_cert_encode_tbs(&w, &spec, iss, c) < 0 ||
		    sg_cert_lint_tbs(w.buf, w.len, iss, SG_LINT_ISTIO) < 0)
			return sg_bench_fail(st, sg_error_last()->msg);
	}
	sg_bench_items(st, sg_bench_iterations(st));
	sg_crypto_free(c);
}

/* ---- OpenSSL's own speed (software keys, reused contexts) --------------- */

static void bm_openssl_sign(sg_bench_state *st, void *arg)
{
	EVP_PKEY *k = arg;
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new(k, NULL);
	uint8_t md[32] = {1}, sig[1024];
	EVP_PKEY_sign_init(ctx);
	if (EVP_PKEY_get_base_id(k) == EVP_PKEY_RSA)
		EVP_PKEY_CTX_set_signature_md(ctx, EVP_sha256());
	while (sg_bench_next(st)) {
		size_t n = sizeof(sig);
		if (EVP_PKEY_sign(ctx, sig, &n, md, sizeof(md)) != 1)
			return sg_bench_fail(st, "EVP_PKEY_sign");
	}
	sg_bench_items(st, sg_bench_iterations(st));
	EVP_PKEY_CTX_free(ctx);
}

static void bm_openssl_verify(sg_bench_state *st, void *arg)
{
	EVP_PKEY *k = arg;
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new(k, NULL);
	uint8_t md[32] = {1}, sig[1024];
	size_t n = sizeof(sig);
	EVP_PKEY_sign_init(ctx);
	EVP_PKEY_sign(ctx, sig, &n, md, sizeof(md));
	EVP_PKEY_verify_init(ctx);
	while (sg_bench_next(st))
		if (EVP_PKEY_verify(ctx, sig, n, md, sizeof(md)) != 1)
			return sg_bench_fail(st, "EVP_PKEY_verify");
	sg_bench_items(st, sg_bench_iterations(st));
	EVP_PKEY_CTX_free(ctx);
}

/* ---- a JWKS key: ES256 tokens as the authenticator verifies them -------- */

#define JWS_N 64
#define JWS_LEN 600 /* about a projected service-account token's header.payload */

static struct {
	sg_jwk *plain, *prepared;
	uint8_t msg[JWS_N][JWS_LEN];
	uint8_t sig[JWS_N][64];
} jws;

/* Distinct messages, each signed with the software P-256 key, and the key
 * twice: as parsed, and prepared for service (sg_jwk_prepare). */
static void make_jws(void)
{
	uint8_t pub[65];
	size_t n = 0;
	if (EVP_PKEY_get_octet_string_param(g.soft_p256, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub), &n) != 1 ||
	    n != 65 || sg_jwk_new_ec(&jws.plain, "P-256", pub + 1, 32, pub + 33, 32) != 0 ||
	    sg_jwk_new_ec(&jws.prepared, "P-256", pub + 1, 32, pub + 33, 32) != 0 || sg_jwk_prepare(jws.prepared) != 0)
		die("JWS keys");
	for (int i = 0; i < JWS_N; i++) {
		for (int j = 0; j < JWS_LEN; j++)
			jws.msg[i][j] = (uint8_t)('A' + (i * 7 + j * 13) % 26);
		uint8_t der[80];
		size_t dlen = sizeof(der);
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		if (!ctx || EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, g.soft_p256) != 1 ||
		    EVP_DigestSign(ctx, der, &dlen, jws.msg[i], JWS_LEN) != 1)
			die("JWS signature");
		EVP_MD_CTX_free(ctx);
		const uint8_t *p = der;
		ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)dlen);
		if (!es || BN_bn2binpad(ECDSA_SIG_get0_r(es), jws.sig[i], 32) != 32 ||
		    BN_bn2binpad(ECDSA_SIG_get0_s(es), jws.sig[i] + 32, 32) != 32)
			die("JWS signature");
		ECDSA_SIG_free(es);
	}
}

static void bm_jwk_verify(sg_bench_state *st, void *arg)
{
	const sg_jwk *k = *(sg_jwk *const *)arg;
	size_t i = 0;
	while (sg_bench_next(st)) {
		if (sg_jwk_verify(k, SG_JWK_ECDSA, SG_HASH_SHA256, jws.msg[i], JWS_LEN, jws.sig[i], 64) != 0)
			return sg_bench_fail(st, "sg_jwk_verify");
		i = (i + 1) % JWS_N;
	}
	sg_bench_items(st, sg_bench_iterations(st));
}

/* ---- the HSM: raw C_Sign ceiling and our layer -------------------------- */

static bool ca_is_ec(void)
{
	return strncmp(g.ca_type, "ecdsa", 5) == 0;
}

/* Input as the signer passes it: a SHA-256 digest, or its DigestInfo. */
static size_t sign_input(uint8_t *in)
{
	static const uint8_t prefix[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
					 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};
	size_t n = 0;
	if (!ca_is_ec()) {
		memcpy(in, prefix, sizeof(prefix));
		n = sizeof(prefix);
	}
	memset(in + n, 0x5a, 32);
	return n + 32;
}

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

/* The ceiling: PKCS#11 straight from the module, one session per thread,
 * the key found once and copied to a session object exactly as the signer
 * is configured to do (hsm-copy-key). */
static void bm_raw_csign(sg_bench_state *st, void *arg)
{
	(void)arg;
	void *lib = dlopen(g.args.s.hsm_module ? g.args.s.hsm_module : "/usr/lib/softhsm/libsofthsm2.so",
			   RTLD_NOW | RTLD_NOLOAD);
	if (!lib)
		return sg_bench_fail(st, "module not loaded");
	CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
	CK_FUNCTION_LIST_PTR f;
	get(&f);
	CK_SLOT_ID slots[8];
	CK_ULONG ns = 8;
	CK_SESSION_HANDLE s = 0;
	CK_OBJECT_HANDLE key = 0, copy = 0;
	pthread_mutex_lock(&open_lock);
	if (f->C_GetSlotList(CK_TRUE, slots, &ns) == CKR_OK && ns > 0 &&
	    f->C_OpenSession(slots[0], CKF_SERIAL_SESSION, NULL, NULL, &s) == CKR_OK) {
		/* The key the config names (hsm-key: its label and CKA_ID). */
		CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
		CK_ATTRIBUTE t[8] = {{CKA_CLASS, &cls, sizeof(cls)}};
		CK_ULONG nt = 1, found = 0;
		P11KitUri *uri = p11_kit_uri_new();
		if (uri && g.args.s.hsm_key &&
		    p11_kit_uri_parse(g.args.s.hsm_key, P11_KIT_URI_FOR_OBJECT, uri) == P11_KIT_URI_OK) {
			CK_ULONG na = 0;
			CK_ATTRIBUTE *a = p11_kit_uri_get_attributes(uri, &na);
			for (CK_ULONG i = 0; i < na && nt < 8; i++)
				if (a[i].type == CKA_LABEL || a[i].type == CKA_ID)
					t[nt++] = a[i];
		}
		f->C_FindObjectsInit(s, t, nt);
		f->C_FindObjects(s, &key, 1, &found);
		f->C_FindObjectsFinal(s);
		p11_kit_uri_free(uri);
		CK_BBOOL no = CK_FALSE;
		CK_ATTRIBUTE ct[] = {{CKA_TOKEN, &no, sizeof(no)}};
		if (found && g.args.s.hsm_copy_key && f->C_CopyObject(s, key, ct, 1, &copy) == CKR_OK)
			key = copy;
		if (!found)
			key = 0;
	}
	pthread_mutex_unlock(&open_lock);
	if (!key) {
		dlclose(lib);
		return sg_bench_fail(st, "no session or key");
	}
	CK_MECHANISM mech = {ca_is_ec() ? CKM_ECDSA : CKM_RSA_PKCS, NULL, 0};
	uint8_t in[64], sig[1024];
	size_t in_len = sign_input(in);
	while (sg_bench_next(st)) {
		CK_ULONG n = sizeof(sig);
		if (f->C_SignInit(s, &mech, key) != CKR_OK || f->C_Sign(s, in, in_len, sig, &n) != CKR_OK) {
			sg_bench_fail(st, "C_Sign");
			break;
		}
	}
	sg_bench_items(st, sg_bench_iterations(st));
	if (copy)
		f->C_DestroyObject(s, copy);
	f->C_CloseSession(s);
	dlclose(lib);
}

static void bm_hsm_sign(sg_bench_state *st, void *arg)
{
	(void)arg;
	sg_hsm_session *s = NULL;
	pthread_mutex_lock(&open_lock);
	int rc = sg_hsm_session_open(&s, sg_appliance_hsm(g.app));
	pthread_mutex_unlock(&open_lock);
	if (rc < 0)
		return sg_bench_fail(st, sg_error_last()->msg);
	uint8_t in[64], sig[1024];
	size_t in_len = sign_input(in);
	while (sg_bench_next(st)) {
		size_t n = sizeof(sig);
		if (sg_hsm_sign(s, ca_is_ec() ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, in, in_len, sig, &n, 0) < 0) {
			sg_bench_fail(st, sg_error_last()->msg);
			break;
		}
	}
	sg_bench_items(st, sg_bench_iterations(st));
	sg_hsm_session_free(s);
}

/* ---- the whole path ----------------------------------------------------- */

static void bm_issue(sg_bench_state *st, void *arg)
{
	csr_set *set = arg;
	sg_issuer *is = NULL;
	if (sg_issuer_new(&is, sg_appliance_ca(g.app), sg_appliance_hsm(g.app), NULL) < 0)
		return sg_bench_fail(st, sg_error_last()->msg);
	size_t i = 0;
	while (sg_bench_next(st)) {
		size_t k = i++ % set->n;
		sg_issue_request req = {.csr = (const uint8_t *)set->pem[k], .csr_len = set->len[k],
					.profile = SG_PROFILE_ISTIO};
		sg_issue_result res;
		if (sg_issuer_issue(is, &req, &res) < 0) {
			sg_bench_fail(st, sg_error_last()->msg);
			break;
		}
		sg_issue_result_clear(&res);
	}
	sg_bench_items(st, sg_bench_iterations(st));
	sg_issuer_free(is);
}

/* ---- the signer pool ------------------------------------------------------ */

typedef struct batch {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int pending;
	atomic_int failed;
} batch;

static void batch_done(int rc, sg_issue_result *res, const sg_error *err, void *arg)
{
	batch *b = arg;
	(void)res;
	if (rc < 0) {
		if (atomic_fetch_add(&b->failed, 1) == 0)
			fprintf(stderr, "bench_signet: pool issue failed: %s\n", err->msg);
	}
	pthread_mutex_lock(&b->lock);
	if (--b->pending == 0)
		pthread_cond_signal(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

typedef struct pool_bench {
	csr_set *set;
	unsigned threads;
	bool verify;
} pool_bench;

#define POOL_BATCH 256

/* One iteration = POOL_BATCH requests submitted at once and awaited: the
 * queue never runs dry while the batch lasts, so this measures the pool's
 * throughput with T workers. */
static void bm_pool(sg_bench_state *st, void *arg)
{
	pool_bench *pb = arg;
	sg_pool *pool = NULL;
	sg_pool_options po = {.threads = pb->threads, .queue_capacity = POOL_BATCH,
			      .issuer = {.verify_issued = pb->verify}};
	if (sg_pool_new(&pool, sg_appliance_ca(g.app), sg_appliance_hsm(g.app), &po) < 0)
		return sg_bench_fail(st, sg_error_last()->msg);
	sg_issue_request reqs[POOL_BATCH];
	batch b = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	size_t k = 0;
	while (sg_bench_next(st)) {
		b.pending = POOL_BATCH;
		for (int i = 0; i < POOL_BATCH; i++, k++) {
			reqs[i] = (sg_issue_request){.csr = (const uint8_t *)pb->set->pem[k % pb->set->n],
						     .csr_len = pb->set->len[k % pb->set->n],
						     .profile = SG_PROFILE_ISTIO};
			if (sg_pool_submit(pool, &reqs[i], batch_done, &b) < 0) {
				sg_bench_fail(st, sg_error_last()->msg);
				b.pending -= POOL_BATCH - i;
				break;
			}
		}
		pthread_mutex_lock(&b.lock);
		while (b.pending > 0)
			pthread_cond_wait(&b.cond, &b.lock);
		pthread_mutex_unlock(&b.lock);
		if (atomic_load(&b.failed)) {
			sg_bench_fail(st, "an issue failed");
			break;
		}
	}
	sg_bench_items(st, sg_bench_iterations(st) * POOL_BATCH);
	sg_pool_free(pool);
}

/* ---- set-up --------------------------------------------------------------- */

static void setup(void)
{
	const char *ca = getenv("SIGNET_BENCH_CA");
	snprintf(g.ca_type, sizeof(g.ca_type), "%s", ca ? ca : "ecdsa-p256");
	const char *tmp = getenv("SIGNET_BENCH_TMP");
	char dir[512], cmd[1200], conf[600];
	snprintf(dir, sizeof(dir), "%s/benchXXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(cmd, sizeof(cmd), "'%s' init --dir '%s/ca' --key-type %s --log-level warn >/dev/null", SIGNETCTL,
		 dir, g.ca_type);
	if (system(cmd) != 0) {
		fprintf(stderr, "bench_signet: signetctl init failed\n");
		exit(1);
	}
	snprintf(conf, sizeof(conf), "%s/ca/signet.conf", dir);
	char *argv[] = {"--config", conf};
	char *pos[2];
	sg_opt_result res = {.argv = pos};
	if (sg_opt_parse(opts, sizeof(opts) / sizeof(opts[0]), &g.args, 2, argv, &res) < 0)
		die("settings");
	g.args.s.signer_threads = 1;
	if (sg_appliance_open(&g.app, &g.args.s) < 0)
		die("appliance");

	const char *n = getenv("SIGNET_BENCH_CSRS");
	size_t ncsr = n ? (size_t)atoi(n) : 256;
	if (ncsr < 1)
		ncsr = 1;
	make_csrs(&g.p256, ncsr, false);
	make_csrs(&g.rsa, ncsr / 4 ? ncsr / 4 : 1, true);
	g.soft_p256 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	g.soft_ca = strcmp(g.ca_type, "ecdsa-p256") == 0 ? g.soft_p256
		    : strcmp(g.ca_type, "ecdsa-p384") == 0 ? EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384")
		    : EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)(atoi(g.ca_type + 4)));
	make_jws();
}

int main(int argc, char **argv)
{
	setup();
	static const int one[] = {1}, two[] = {1, 2};
	char name[128];
#define REG(fmt, fn, arg, thr, n, rt)                          \
	do {                                                   \
		snprintf(name, sizeof(name), fmt, g.ca_type);  \
		sg_bench_register(name, fn, arg, thr, n, rt);  \
	} while (0)
	sg_bench_register("csr_parse_verify/p256", bm_csr_parse_verify, &g.p256, two, 2, false);
	sg_bench_register("csr_parse_verify/rsa2048", bm_csr_parse_verify, &g.rsa, one, 1, false);
	sg_bench_register("openssl_d2i_req_verify/p256", bm_openssl_req_verify, &g.p256, two, 2, false);
	REG("cert_build/ca:%s", bm_cert_build, &g.p256, one, 1, false);
	sg_bench_register("openssl_verify/p256", bm_openssl_verify, g.soft_p256, one, 1, false);
	sg_bench_register("jwk_verify/es256", bm_jwk_verify, &jws.plain, two, 2, false);
	sg_bench_register("jwk_verify/es256/prepared", bm_jwk_verify, &jws.prepared, two, 2, false);
	REG("openssl_sign/%s", bm_openssl_sign, g.soft_ca, one, 1, false);
	REG("raw_csign/%s", bm_raw_csign, NULL, two, 2, true);
	REG("hsm_sign/%s", bm_hsm_sign, NULL, two, 2, true);
	REG("issue/ca:%s/csr:p256", bm_issue, &g.p256, one, 1, false);
	REG("issue/ca:%s/csr:rsa2048", bm_issue, &g.rsa, one, 1, false);
	static pool_bench pools[] = {
		{&g.p256, 1, false}, {&g.p256, 2, false}, {&g.p256, 4, false},
		{&g.rsa, 1, false},  {&g.rsa, 2, false},  {&g.p256, 2, true},
	};
	for (size_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++) {
		snprintf(name, sizeof(name), "pool/ca:%s/csr:%s/threads:%u%s", g.ca_type,
			 pools[i].set == &g.p256 ? "p256" : "rsa2048", pools[i].threads,
			 pools[i].verify ? "/verify-issued" : "");
		sg_bench_register(name, bm_pool, &pools[i], one, 1, true);
	}
	int rc = sg_bench_main(argc, argv);
	sg_appliance_free(g.app);
	return rc;
}
