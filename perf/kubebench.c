/*
 * kubebench: how fast signet's Kubernetes-facing signers clear a burst,
 * against a real kube-apiserver (perf/kubebench.sh starts one). Not a
 * test: it asserts no time, it measures one.
 *
 *   kubebench --kubeconfig K --config signet.conf --mode cr|csr|ra [--count 1000]
 *
 *   cr   N cert-manager CertificateRequests for a SignetIssuer are created
 *        at once (--creators threads); an approver approves each as it
 *        appears (as cert-manager's approver would); the issuers and
 *        certificaterequests controllers sign. Clock: first create to the
 *        last Ready=True seen by a watch.
 *   csr  the same with N Kubernetes CertificateSigningRequests of signerName
 *        signetclusterissuers.signet.dev/<issuer> and the CSR signer.
 *   ra   RA mode: N workload CSRs are handed to the forwarder at once
 *        (sg_forward, as signetd's request path does after authentication),
 *        each becomes a CertificateRequest for a SignetIssuer, which the
 *        approver approves and signet's own issuer signs (a test issuer
 *        that signs as fast as the HSM does); clock: first submit to the
 *        last answer.
 *
 * The controllers run in this process on a client limited to --qps and
 * --burst (signetd's defaults: 80 and 160; 0 turns the limit off), RA
 * mode's forwarder on another with the same limit (as in signetd), the
 * driver (creates, approvals, watch) on an unlimited client of its own.
 * Every CSR is made (a fresh P-256 key each) before the clock starts.
 * Prints one line of key=value results; exits non-zero when not every
 * certificate arrived within --timeout.
 */
#include "sg_appliance.h"
#include "sg_clock.h"
#include "sg_cmissuer.h"
#include "sg_error.h"
#include "sg_forward.h"
#include "sg_guard.h"
#include "sg_kube.h"
#include "sg_kube_informer.h"
#include "sg_kubecsr.h"
#include "sg_kubesign.h"
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_signetissuer.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define NAME_MAX_ 96

typedef struct args {
	sg_settings s;
	char *kubeconfig;
	int mode;
	int64_t count;
	int64_t creators;
	int64_t approvers;
	int64_t workers;
	int64_t qps;
	int64_t burst;
	int64_t timeout;
} args;

static const char *const mode_names[] = {"cr", "csr", "ra", NULL};
enum { MODE_CR, MODE_CSR, MODE_RA };

#define ROW(name, type, field, def, min, max, choices, help)                                                           \
	{name, type, offsetof(args, field), def, min, max, choices, help, true}

static const sg_opt opts[] = {
	SG_SETTINGS_ROWS(args, s, "warn"),
	ROW("kubeconfig", SG_OPT_PATH, kubeconfig, NULL, 0, 0, NULL, "the API server's kubeconfig (admin)"),
	ROW("mode", SG_OPT_ENUM, mode, "cr", 0, 0, mode_names, "what to measure: cr, csr or ra"),
	ROW("count", SG_OPT_INT, count, "1000", 1, 100000, NULL, "certificates in the burst"),
	ROW("creators", SG_OPT_INT, creators, "16", 1, 256, NULL, "threads creating the requests"),
	ROW("approvers", SG_OPT_INT, approvers, "16", 1, 256, NULL, "threads approving them"),
	ROW("workers", SG_OPT_INT, workers, "4", 1, 16, NULL, "signing workers of the controller under test"),
	ROW("qps", SG_OPT_INT, qps, "80", 0, 100000, NULL, "the controllers' client rate limit (0: none)"),
	ROW("burst", SG_OPT_INT, burst, "160", 1, 100000, NULL, "the controllers' client burst"),
	ROW("timeout", SG_OPT_DURATION, timeout, "10m", 1, 7200, NULL, "give up after this long"),
};

/* ---- the run's state ---- */

typedef struct bench {
	args *a;
	sg_kube *k;  /* the driver's: creates, approvals, watch */
	sg_kube *kc; /* the controllers' */
	sg_kube *kf; /* RA mode's forwarder's (signetd gives it its own, with the same limit) */
	char ns[64];
	char issuer[64];
	char **csrs;
	int n;
	atomic_int next_create;
	atomic_int created;
	atomic_int finished;
	atomic_int failed;
	atomic_uchar *done;            /* per request */
	/* approval queue (names), and the names ever queued (a set) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char (*queue)[NAME_MAX_];
	int qhead, qtail;
	char (*queued)[NAME_MAX_];
	size_t queued_cap;
	bool stop;
	uint64_t t_done;
} bench;

/* A P-256 CSR with one URI SAN, PEM. */
static char *make_csr(const char *uri)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509_REQ *r = X509_REQ_new();
	X509_REQ_set_pubkey(r, key);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	char san[256];
	snprintf(san, sizeof(san), "critical,URI:%s", uri);
	sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san));
	X509_REQ_add_extensions(r, exts);
	X509_REQ_sign(r, key, EVP_sha256());
	BIO *b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509_REQ(b, r);
	char *p;
	long l = BIO_get_mem_data(b, &p);
	char *out = strndup(p, (size_t)l);
	BIO_free(b);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_REQ_free(r);
	EVP_PKEY_free(key);
	return out;
}

static int index_of(bench *b, const char *name)
{
	char prefix[NAME_MAX_];
	int len = snprintf(prefix, sizeof(prefix), "%s-", b->ns);
	if (!name || strncmp(name, prefix, (size_t)len) != 0)
		return -1;
	int i = atoi(name + len);
	return i >= 0 && i < b->n ? i : -1;
}

static bool cond_true(const json_t *obj, const char *type)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c)
	{
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *st = json_string_value(json_object_get(c, "status"));
		if (t && strcmp(t, type) == 0)
			return st && strcmp(st, "True") == 0;
	}
	return false;
}

static void finish_one(bench *b, int i, bool ok)
{
	unsigned char was = 0;
	if (!atomic_compare_exchange_strong(&b->done[i], &was, 1))
		return;
	if (!ok)
		atomic_fetch_add(&b->failed, 1);
	if (atomic_fetch_add(&b->finished, 1) + 1 == b->n)
		b->t_done = sg_now_ns();
}

/* The watch: approve what appears, count what is done. */
static void seen(json_t *obj, void *arg)
{
	bench *b = arg;
	const char *name = sg_kube_meta_str(obj, "name");
	int i = index_of(b, name);
	if ((i < 0 && b->a->mode != MODE_RA) || !name || strlen(name) >= NAME_MAX_)
		return; /* RA mode: the forwarder names its requests */
	bool issued = b->a->mode == MODE_CSR
			      ? json_string_length(json_object_get(json_object_get(obj, "status"), "certificate")) > 0
			      : cond_true(obj, "Ready");
	if (issued && b->a->mode != MODE_RA && i >= 0)
		finish_one(b, i, true);
	if (cond_true(obj, "Approved") || issued)
		return;
	/* FNV-1a into an open-addressing set: each name is approved once */
	uint64_t h = 1469598103934665603ull;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	pthread_mutex_lock(&b->mu);
	size_t at = (size_t)(h % b->queued_cap);
	while (b->queued[at][0] && strcmp(b->queued[at], name) != 0)
		at = (at + 1) % b->queued_cap;
	if (!b->queued[at][0] && b->qtail < b->n) {
		snprintf(b->queued[at], NAME_MAX_, "%s", name);
		snprintf(b->queue[b->qtail++], NAME_MAX_, "%s", name);
		pthread_cond_signal(&b->cv);
	}
	pthread_mutex_unlock(&b->mu);
}

static void seen_update(json_t *old, json_t *obj, void *arg)
{
	(void)old;
	seen(obj, arg);
}

static void gone(json_t *obj, void *arg)
{
	(void)obj, (void)arg;
}

static int approve(bench *b, const char *name)
{
	if (b->a->mode == MODE_CSR) {
		/* the approval subresource takes the whole object */
		sg_kube_ref r = {.group = "certificates.k8s.io", .version = "v1", .resource = "certificatesigningrequests",
				 .name = name};
		json_t *obj = NULL;
		SG_TRY(sg_kube_get(b->k, &r, &obj));
		json_t *st = json_object_get(obj, "status");
		if (!st) {
			st = json_object();
			json_object_set_new(obj, "status", st);
		}
		json_object_set_new(st, "conditions",
				    json_pack("[{s:s, s:s, s:s, s:s}]", "type", "Approved", "status", "True", "reason",
					      "KubeBench", "message", "approved by kubebench"));
		r.subresource = "approval";
		int rc = sg_kube_update(b->k, &r, obj, NULL);
		json_decref(obj);
		return rc;
	}
	sg_kube_ref r = {.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests", .ns = b->ns,
			 .name = name, .subresource = "status"};
	json_t *p = json_pack("{s:{s:[{s:s, s:s, s:s, s:s, s:s}]}}", "status", "conditions", "type", "Approved", "status",
			      "True", "reason", "kubebench", "message", "approved by kubebench", "lastTransitionTime",
			      "2026-01-01T00:00:00Z");
	int rc = sg_kube_merge_patch(b->k, &r, p, NULL);
	json_decref(p);
	return rc;
}

static void *approver(void *arg)
{
	bench *b = arg;
	for (;;) {
		pthread_mutex_lock(&b->mu);
		while (!b->stop && b->qhead == b->qtail)
			pthread_cond_wait(&b->cv, &b->mu);
		if (b->stop) {
			pthread_mutex_unlock(&b->mu);
			return NULL;
		}
		char name[NAME_MAX_];
		memcpy(name, b->queue[b->qhead++], sizeof(name));
		pthread_mutex_unlock(&b->mu);
		if (approve(b, name) < 0)
			fprintf(stderr, "kubebench: approve %s: %s\n", name, sg_error_last()->msg);
	}
}

static json_t *request_object(bench *b, int i)
{
	char name[NAME_MAX_];
	snprintf(name, sizeof(name), "%s-%d", b->ns, i);
	size_t n = strlen(b->csrs[i]);
	char *req = NULL;
	if (sg_kubesign_base64(b->csrs[i], n, &req) != SG_OK)
		return NULL;
	json_t *usages = json_pack("[s, s, s, s]", "digital signature", "key encipherment", "server auth", "client auth");
	json_t *o;
	if (b->a->mode == MODE_CSR) {
		char signer[128];
		snprintf(signer, sizeof(signer), "signetclusterissuers.signet.dev/%s", b->issuer);
		o = json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:o}}", "apiVersion", "certificates.k8s.io/v1", "kind",
			      "CertificateSigningRequest", "metadata", "name", name, "spec", "request", req, "signerName",
			      signer, "usages", usages);
	} else {
		o = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:o, s:{s:s, s:s, s:s}}}", "apiVersion",
			      "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name", name, "namespace", b->ns,
			      "spec", "request", req, "duration", "24h", "usages", usages, "issuerRef", "name", b->issuer,
			      "kind", "SignetIssuer", "group", "signet.dev");
	}
	free(req);
	return o;
}

static void *creator(void *arg)
{
	bench *b = arg;
	sg_kube_ref coll = b->a->mode == MODE_CSR
				   ? (sg_kube_ref){.group = "certificates.k8s.io", .version = "v1",
						   .resource = "certificatesigningrequests"}
				   : (sg_kube_ref){.group = "cert-manager.io", .version = "v1",
						   .resource = "certificaterequests", .ns = b->ns};
	for (;;) {
		int i = atomic_fetch_add(&b->next_create, 1);
		if (i >= b->n)
			return NULL;
		json_t *o = request_object(b, i);
		if (!o || sg_kube_create(b->k, &coll, o, NULL) < 0) {
			fprintf(stderr, "kubebench: create %d: %s\n", i, sg_error_last()->msg);
			finish_one(b, i, false);
		} else {
			atomic_fetch_add(&b->created, 1);
		}
		json_decref(o);
	}
}

/* ---- RA mode's answers ---- */

typedef struct ra_call {
	bench *b;
	int i;
} ra_call;

static void forwarded(int rc, const char *chain, size_t len, const sg_error *err, void *arg)
{
	(void)chain;
	ra_call *c = arg;
	if (rc < 0 || len == 0)
		fprintf(stderr, "kubebench: request %d: %s\n", c->i, err ? err->msg : "empty answer");
	finish_one(c->b, c->i, rc == SG_OK && len > 0);
}

/* ---- set-up ---- */

static int put(sg_kube *k, const sg_kube_ref *coll, json_t *o)
{
	int rc = sg_kube_create(k, coll, o, NULL);
	json_decref(o);
	if (sg_kube_conflict(rc))
		return SG_OK; /* already there */
	return rc;
}

static bool issuer_ready(bench *b, bool cluster)
{
	sg_kube_ref r = {.group = "signet.dev", .version = "v1alpha1",
			 .resource = cluster ? "signetclusterissuers" : "signetissuers", .ns = cluster ? NULL : b->ns,
			 .name = b->issuer};
	json_t *o = NULL;
	if (sg_kube_get(b->k, &r, &o) != SG_OK)
		return false;
	char why[512];
	bool yes = sg_signetissuer_ready(o, why, sizeof(why));
	json_decref(o);
	return yes;
}

static sg_kube *client(const char *kubeconfig, int64_t qps, int64_t burst)
{
	sg_kube_config *cfg = NULL;
	if (sg_kube_config_from_kubeconfig(&cfg, kubeconfig, NULL) != SG_OK)
		return NULL;
	sg_kube_options o = {.qps = qps > 0 ? (double)qps : -1, .burst = (int)burst};
	sg_kube *k = NULL;
	return sg_kube_new(&k, &cfg, &o) == SG_OK ? k : NULL;
}

static int run(args *a)
{
	bench b = {.a = a, .n = (int)a->count};
	pthread_mutex_init(&b.mu, NULL);
	pthread_cond_init(&b.cv, NULL);
	snprintf(b.ns, sizeof(b.ns), "bench-%s-%ld", mode_names[a->mode], (long)getpid());
	snprintf(b.issuer, sizeof(b.issuer), "%s", b.ns);
	b.k = client(a->kubeconfig, 0, 1);
	b.kc = client(a->kubeconfig, a->qps, a->burst);
	b.kf = client(a->kubeconfig, a->qps, a->burst);
	SG_ENSURE(b.k && b.kc && b.kf, SG_EINVAL, "no client: %s", sg_error_last()->msg);
	sg_appliance *app = NULL;
	SG_TRY(sg_appliance_open(&app, &a->s));
	sg_kubesign_ca cas[1] = {{.name = "default", .app = app}};

	b.csrs = calloc((size_t)b.n, sizeof(char *));
	b.queue = calloc((size_t)b.n, sizeof(*b.queue));
	b.queued_cap = 4 * (size_t)b.n;
	b.queued = calloc(b.queued_cap, sizeof(*b.queued));
	b.done = calloc((size_t)b.n, 1);
	SG_ENSURE(b.csrs && b.queue && b.queued && b.done, SG_EINTERNAL, "out of memory");
	for (int i = 0; i < b.n; i++) {
		char uri[160];
		snprintf(uri, sizeof(uri), "spiffe://cluster.local/ns/%s/sa/w%d", b.ns, i);
		b.csrs[i] = make_csr(uri);
	}

	sg_kube_ref nsr = {.version = "v1", .resource = "namespaces"};
	SG_TRY(put(b.k, &nsr, json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name",
				       b.ns)));
	bool cluster = a->mode == MODE_CSR;
	sg_kube_ref ir = {.group = "signet.dev", .version = "v1alpha1",
			  .resource = cluster ? "signetclusterissuers" : "signetissuers", .ns = cluster ? NULL : b.ns};
	json_t *iss = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "signet.dev/v1alpha1", "kind",
				cluster ? "SignetClusterIssuer" : "SignetIssuer", "metadata", "name", b.issuer, "spec",
				"caName", "default");
	if (!cluster)
		json_object_set_new(json_object_get(iss, "metadata"), "namespace", json_string(b.ns));
	SG_TRY(put(b.k, &ir, iss));

	/* the controllers under test */
	sg_signetissuer *issuers = NULL;
	sg_cmissuer *cm = NULL;
	sg_kubecsr *kc = NULL;
	sg_forward *fw = NULL;
	sg_signetissuer_options io = {.kube = b.kc, .cas = cas, .ncas = 1};
	SG_TRY(sg_signetissuer_new(&issuers, &io));
	SG_TRY(sg_ctrl_start(sg_signetissuer_controller(issuers)));
	if (cluster) {
		sg_kubecsr_options ko = {.kube = b.kc, .cas = cas, .ncas = 1, .workers = (unsigned)a->workers};
		SG_TRY(sg_kubecsr_new(&kc, &ko));
		SG_TRY(sg_ctrl_start(sg_kubecsr_controller(kc)));
	} else {
		sg_cmissuer_options mo = {.kube = b.kc, .cas = cas, .ncas = 1, .workers = (unsigned)a->workers};
		SG_TRY(sg_cmissuer_new(&cm, &mo));
		SG_TRY(sg_ctrl_start(sg_cmissuer_controller(cm)));
	}
	if (a->mode == MODE_RA) {
		const char *root = sg_ca_root_pem(sg_appliance_ca(app));
		sg_forward_options fo = {.kube = b.kf, .ns = b.ns, .issuer_name = b.issuer, .issuer_kind = "SignetIssuer",
					 .issuer_group = "signet.dev", .roots_pem = root, .roots_len = strlen(root),
					 .max_in_flight = (unsigned)b.n, .timeout_ms = (unsigned)a->timeout * 1000u};
		SG_TRY(sg_forward_new(&fw, &fo));
	}
	uint64_t until = sg_now_ns() + 60ull * 1000000000u;
	while (!issuer_ready(&b, cluster) || (fw && !sg_forward_ready(fw))) {
		SG_ENSURE(sg_now_ns() < until, SG_ETIMEOUT, "the issuer did not become Ready within 60 s");
		sg_sleep_ms(50);
	}

	/* the driver's watch and approvers */
	sg_kube_ref wr = cluster ? (sg_kube_ref){.group = "certificates.k8s.io", .version = "v1",
						 .resource = "certificatesigningrequests"}
				 : (sg_kube_ref){.group = "cert-manager.io", .version = "v1",
						 .resource = "certificaterequests", .ns = b.ns};
	sg_kube_informer *inf = NULL;
	sg_kube_handlers h = {seen, seen_update, gone, &b};
	SG_TRY(sg_kube_informer_new(&inf, b.k, &wr, NULL, &h));
	SG_TRY(sg_kube_informer_start(inf));
	SG_TRY(sg_kube_informer_wait_synced(inf, 30000));
	pthread_t ap[256], cr[256];
	for (int i = 0; i < a->approvers; i++)
		pthread_create(&ap[i], NULL, approver, &b);

	uint64_t t0 = sg_now_ns();
	ra_call *calls = NULL;
	if (a->mode == MODE_RA) {
		calls = calloc((size_t)b.n, sizeof(*calls));
		SG_ENSURE(calls, SG_EINTERNAL, "out of memory");
		for (int i = 0; i < b.n; i++) {
			char id[160];
			snprintf(id, sizeof(id), "spiffe://cluster.local/ns/%s/sa/w%d", b.ns, i);
			calls[i] = (ra_call){&b, i};
			sg_forward_request fr = {.csr_pem = b.csrs[i], .csr_len = strlen(b.csrs[i]), .identity = id,
						 .ttl = 3600};
			if (sg_forward_submit(fw, &fr, forwarded, &calls[i]) != SG_OK) {
				fprintf(stderr, "kubebench: submit %d: %s\n", i, sg_error_last()->msg);
				finish_one(&b, i, false);
			}
		}
	} else {
		for (int i = 0; i < a->creators; i++)
			pthread_create(&cr[i], NULL, creator, &b);
		for (int i = 0; i < a->creators; i++)
			pthread_join(cr[i], NULL);
	}
	uint64_t t_submitted = sg_now_ns();
	uint64_t deadline = t0 + (uint64_t)a->timeout * 1000000000u;
	while (atomic_load(&b.finished) < b.n && sg_now_ns() < deadline)
		sg_sleep_ms(5);
	uint64_t t_end = b.t_done ? b.t_done : sg_now_ns();
	int finished = atomic_load(&b.finished), failed = atomic_load(&b.failed);

	/* the watch can see a certificate before the controller has counted
	 * it: let the counters settle (bounded) before they are printed */
	for (int tries = 0; tries < 3000; tries++) {
		uint64_t counted = (uint64_t)finished;
		if (cm) {
			sg_cmissuer_stats st;
			sg_cmissuer_stats_get(cm, &st);
			counted = st.issued;
		} else if (kc) {
			sg_kubecsr_stats st;
			sg_kubecsr_stats_get(kc, &st);
			counted = st.issued;
		}
		if (fw) { /* and the forwarder's deletes, which follow each answer */
			sg_forward_stats fs;
			sg_forward_stats_get(fw, &fs);
			if (fs.deletes < fs.creates)
				counted = 0;
		}
		if (counted >= (uint64_t)(finished - failed))
			break;
		sg_sleep_ms(10);
	}
	double secs = (double)(t_end - t0) / 1e9;
	printf("kubebench mode=%s count=%d issued=%d failed=%d seconds=%.2f per_second=%.1f submitted_in=%.2f qps=%lld "
	       "burst=%lld workers=%lld",
	       mode_names[a->mode], b.n, finished - failed, failed, secs, (double)(finished - failed) / secs,
	       (double)(t_submitted - t0) / 1e9, (long long)a->qps, (long long)a->burst, (long long)a->workers);
	if (fw) {
		sg_forward_stats fs;
		sg_forward_stats_get(fw, &fs);
		printf(" forward_creates=%llu forward_deletes=%llu api_calls_per_cert=%.2f", (unsigned long long)fs.creates,
		       (unsigned long long)fs.deletes, (double)(fs.creates + fs.deletes) / (finished ? finished : 1));
	}
	if (cm) {
		sg_cmissuer_stats st;
		sg_cmissuer_stats_get(cm, &st);
		printf(" issuer_issued=%llu issuer_pending=%llu", (unsigned long long)st.issued,
		       (unsigned long long)st.pending);
	}
	if (kc) {
		sg_kubecsr_stats st;
		sg_kubecsr_stats_get(kc, &st);
		printf(" signer_issued=%llu", (unsigned long long)st.issued);
	}
	printf("\n");
	fflush(stdout);

	pthread_mutex_lock(&b.mu);
	b.stop = true;
	pthread_cond_broadcast(&b.cv);
	pthread_mutex_unlock(&b.mu);
	for (int i = 0; i < a->approvers; i++)
		pthread_join(ap[i], NULL);
	sg_kube_informer_free(inf);
	sg_forward_free(fw);
	sg_cmissuer_free(cm);
	sg_kubecsr_free(kc);
	sg_signetissuer_free(issuers);
	free(calls);
	sg_appliance_free(app);
	for (int i = 0; i < b.n; i++)
		free(b.csrs[i]);
	free(b.csrs);
	free(b.queue);
	free(b.queued);
	free(b.done);
	sg_kube_free(b.k);
	sg_kube_free(b.kc);
	sg_kube_free(b.kf);
	return finished - failed == b.n ? SG_OK : sg_error_set(SG_ETIMEOUT, "%d of %d certificates", finished - failed, b.n);
}

static int check_args(void *target)
{
	const args *a = target;
	return a->kubeconfig ? SG_OK : sg_error_set(SG_EINVAL, "--kubeconfig is required");
}

int main(int argc, char **argv)
{
	args a;
	memset(&a, 0, sizeof(a));
	int status;
	if (!sg_opt_program("kubebench",
	                    "usage: kubebench --kubeconfig FILE --config signet.conf --mode cr|csr|ra [options]\n\n"
	                    "Measures how fast signet's cert-manager issuer, CSR signer or RA mode clear\n"
	                    "a burst of requests against a real API server.\n\n",
	                    opts, N(opts), &a, argc, argv, check_args, &status))
		return status;
	sg_settings_apply_log(&a.s);
	int rc = run(&a);
	if (rc < 0)
		fprintf(stderr, "kubebench: %s\n", sg_error_last()->msg);
	sg_opt_free(opts, N(opts), &a);
	return rc < 0 ? 1 : 0;
}
