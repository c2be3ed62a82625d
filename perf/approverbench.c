/*
 * approverbench: how fast signet's CertificateRequest policy approver
 * (controllers/sg_approver.h) decides a burst, against a real
 * kube-apiserver (perf/approverbench.sh starts one). Not a test: it
 * asserts no time, it measures one.
 *
 *   approverbench --kubeconfig K [--count 1000] [--rounds 1] [--configs AB]
 *
 * The cluster (made once, before any clock): 10 teams, each with a
 * Namespace apb-t<j> (labels team=t<j>, pair=p<j/2>), a user team-<j>
 * bound by a RoleBinding in that namespace to a ClusterRole granting `use`
 * on certificaterequestpolicies, and a CertificateRequestPolicy
 * apb-team-<j> allowing commonName and dnsNames *.t<j>.example.com, four
 * usages, at most 720h and ECDSA keys. Even teams' policies select by
 * issuer name (team-<j>-*), odd teams' by namespace label (pair=p<j/2>), so
 * a request of team 2m (issuer team-2m-ca in apb-t2m) is picked by two
 * policies (apb-team-2m first, by name, then apb-team-2m+1) and a request
 * of team 2m+1 by one. A request asks for w<i>.t<j>.example.com and is
 * approved by exactly its team's policy; about one in --deny-every asks
 * for a name outside its team and is denied (by both policies that pick
 * it, for an even team: two SubjectAccessReviews).
 *
 * Two configurations, one after the other in each round (A then B), the same
 * requests (CSRs made, one fresh P-256 key each, before any clock):
 *   A  signet's defaults: sg_approver_options zeroed (4 workers, answers
 *      of SubjectAccessReviews reused for 10 s);
 *   B  approver-policy's behaviour: one worker (controller-runtime's
 *      MaxConcurrentReconciles, approver-policy's default 1) and no
 *      SubjectAccessReview cache (sar_ttl_seconds < 0: one review per
 *      applicable policy per pass).
 * Two more for telling the two apart (--configs, e.g. ABCD): C one worker
 * with the cache, D four workers without it.
 * Each configuration gets a fresh approver on a fresh client with the same
 * options: no client-side rate limit by default (approver-policy sets
 * QPS = -1 on its rest.Config; --qps N --burst M for a limit). The approver
 * is started and left to settle (its informers listed, the policies
 * reconciled and Ready, its queue empty) before the clock starts; it is
 * stopped after. The bench's own client (creates, watch) has no limit.
 *
 * Clock: from the first create (--creators threads create every request
 * at once) to the last Approved or Denied condition seen by the bench's
 * own informer. Printed per configuration: decisions and their rate,
 * latency per request (create sent -> decision seen), the approver's
 * counters (sg_approver_stats: SubjectAccessReviews sent and answered from
 * the cache, decisions written, conflicts, errors), and whether every
 * decision was the one expected (approved by its team's policy, or
 * denied), and how busy the machine's CPUs were while the clock ran
 * (/proc/stat: everything on the machine, the API server and etcd
 * included). Exits non-zero when a configuration did not decide everything
 * within --timeout or decided anything wrongly. Loopback API servers only.
 */
#include "sg_approver.h"
#include "sg_clock.h"
#include "sg_error.h"
#include "sg_guard.h"
#include "sg_kube.h"
#include "sg_kube_informer.h"
#include "sg_kubesign.h"
#include "sg_log.h"
#include "sg_opt.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define TEAMS 10
#define NAME_MAX_ 64
#define CREATORS_MAX 64

typedef struct args {
	char *kubeconfig;
	int64_t count;
	int64_t creators;
	int64_t deny_every;
	int64_t rounds;
	int64_t qps;
	int64_t burst;
	int64_t timeout;
	char *configs;
	int log_level;
} args;

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};

/* The configurations: workers and sar_ttl_seconds as sg_approver_options
 * takes them (0: the default). */
static const struct config {
	char label;
	unsigned workers;
	int64_t sar_ttl;
	const char *what;
} configs[] = {
	{'A', 0, 0, "signet's defaults"},
	{'B', 1, -1, "approver-policy's: one worker, no review cache"},
	{'C', 1, 0, "one worker with the review cache"},
	{'D', 0, -1, "four workers without the review cache"},
};

#define ROW(name, type, field, def, min, max, choices, help)                                                           \
	{name, type, offsetof(args, field), def, min, max, choices, help, true}

static const sg_opt opts[] = {
	ROW("kubeconfig", SG_OPT_PATH, kubeconfig, NULL, 0, 0, NULL, "the API server's kubeconfig (admin; loopback only)"),
	ROW("count", SG_OPT_INT, count, "1000", 1, 10000, NULL, "CertificateRequests in the burst"),
	ROW("creators", SG_OPT_INT, creators, "16", 1, CREATORS_MAX, NULL, "threads creating the requests"),
	ROW("deny-every", SG_OPT_INT, deny_every, "20", 2, 10000, NULL, "about one request in this many is denied"),
	ROW("rounds", SG_OPT_INT, rounds, "1", 1, 3, NULL, "rounds of the configurations"),
	ROW("qps", SG_OPT_INT, qps, "0", 0, 100000, NULL, "the approver's client rate limit (0: none)"),
	ROW("burst", SG_OPT_INT, burst, "160", 1, 100000, NULL, "the approver's client burst (with --qps)"),
	ROW("timeout", SG_OPT_DURATION, timeout, "10m", 1, 3600, NULL, "give up on a configuration after this long"),
	ROW("configs", SG_OPT_STRING, configs, "AB", 0, 8, NULL,
	    "configurations to run, in this order: A (defaults), B (approver-policy's), C (1 worker + cache), "
	    "D (4 workers, no cache)"),
	ROW("log-level", SG_OPT_ENUM, log_level, "error", 0, 0, log_levels, "log level of the approver"),
};

/* ---- the requests ---- */

typedef struct req {
	char *b64;       /* spec.request */
	int team;
	bool deny;       /* asks for a name outside its team */
} req;

static uint32_t mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* A P-256 CSR with CN cn and one DNS SAN, base64 of its PEM. */
static char *make_csr_b64(const char *cn, const char *dns)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509_REQ *r = X509_REQ_new();
	X509_NAME *n = X509_NAME_new();
	char san[160];
	snprintf(san, sizeof(san), "DNS:%s", dns);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	char *out = NULL;
	BIO *b = BIO_new(BIO_s_mem());
	if (key && r && n && ext && exts && b &&
	    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) == 1 &&
	    X509_REQ_set_subject_name(r, n) == 1 && X509_REQ_set_pubkey(r, key) == 1 &&
	    sk_X509_EXTENSION_push(exts, ext) > 0) {
		ext = NULL; /* the stack owns it */
		char *p;
		if (X509_REQ_add_extensions(r, exts) == 1 && X509_REQ_sign(r, key, EVP_sha256()) > 0 &&
		    PEM_write_bio_X509_REQ(b, r) == 1) {
			long l = BIO_get_mem_data(b, &p);
			if (sg_kubesign_base64(p, (size_t)l, &out) != SG_OK)
				out = NULL;
		}
	}
	BIO_free(b);
	X509_EXTENSION_free(ext);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_NAME_free(n);
	X509_REQ_free(r);
	EVP_PKEY_free(key);
	return out;
}

/* ---- one configuration's run ---- */

typedef struct run {
	const args *a;
	sg_kube *k; /* the bench's own client */
	const req *reqs;
	int n;
	char tag[16]; /* request names: "<tag>-<i>" */
	json_t **objs;
	atomic_int next_create;
	atomic_int create_errors;
	atomic_int decided;
	atomic_int approved_seen, denied_seen, wrong;
	_Atomic uint64_t *t_created; /* per request, ns */
	_Atomic uint64_t *t_decided;
	_Atomic uint64_t t_last;
} run;

static int index_of(const run *r, const char *name)
{
	size_t len = strlen(r->tag);
	if (!name || strncmp(name, r->tag, len) != 0 || name[len] != '-')
		return -1;
	char *end;
	long i = strtol(name + len + 1, &end, 10);
	return *end == '\0' && i >= 0 && i < r->n ? (int)i : -1;
}

/* The condition of type with status True, or NULL. */
static const json_t *cond_true(const json_t *obj, const char *type)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c)
	{
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *st = json_string_value(json_object_get(c, "status"));
		if (t && strcmp(t, type) == 0 && st && strcmp(st, "True") == 0)
			return c;
	}
	return NULL;
}

static void seen(json_t *obj, void *arg)
{
	run *r = arg;
	int i = index_of(r, sg_kube_meta_str(obj, "name"));
	if (i < 0)
		return;
	const json_t *ap = cond_true(obj, "Approved"), *dn = cond_true(obj, "Denied");
	if (!ap && !dn)
		return;
	uint64_t now = sg_now_ns(), none = 0;
	if (!atomic_compare_exchange_strong(&r->t_decided[i], &none, now))
		return; /* seen already */
	bool ok;
	if (ap) {
		char want[96];
		snprintf(want, sizeof(want), "Approved by CertificateRequestPolicy: \"apb-team-%d\"", r->reqs[i].team);
		const char *msg = json_string_value(json_object_get(ap, "message"));
		ok = !r->reqs[i].deny && msg && strcmp(msg, want) == 0;
		atomic_fetch_add(&r->approved_seen, 1);
	} else {
		ok = r->reqs[i].deny;
		atomic_fetch_add(&r->denied_seen, 1);
	}
	if (!ok) {
		atomic_fetch_add(&r->wrong, 1);
		fprintf(stderr, "approverbench: %s-%d decided wrongly (team %d, %s)\n", r->tag, i, r->reqs[i].team,
		        ap ? "approved" : "denied");
	}
	atomic_store(&r->t_last, now);
	atomic_fetch_add(&r->decided, 1);
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

static void *creator(void *arg)
{
	run *r = arg;
	char ns[32];
	for (;;) {
		int i = atomic_fetch_add(&r->next_create, 1);
		if (i >= r->n)
			return NULL;
		snprintf(ns, sizeof(ns), "apb-t%d", r->reqs[i].team);
		sg_kube_ref coll = {.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests",
		                    .ns = ns};
		atomic_store(&r->t_created[i], sg_now_ns());
		if (sg_kube_create(r->k, &coll, r->objs[i], NULL) < 0) {
			fprintf(stderr, "approverbench: create %s-%d: %s\n", r->tag, i, sg_error_last()->msg);
			atomic_fetch_add(&r->create_errors, 1);
		}
	}
}

static json_t *request_object(const run *r, int i)
{
	const req *q = &r->reqs[i];
	char name[NAME_MAX_], ns[32], issuer[32], user[32], group[32], uid[32];
	snprintf(name, sizeof(name), "%s-%d", r->tag, i);
	snprintf(ns, sizeof(ns), "apb-t%d", q->team);
	snprintf(issuer, sizeof(issuer), "team-%d-ca", q->team);
	snprintf(user, sizeof(user), "team-%d", q->team);
	snprintf(group, sizeof(group), "team-%d-devs", q->team);
	snprintf(uid, sizeof(uid), "uid-team-%d", q->team);
	/* spec.username, groups and uid as cert-manager's webhook would set
	 * them for that user (no webhook runs here). */
	return json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:{s:s, s:s, s:s}, s:s, s:[s, s, s], s:s, s:[s, s], s:s}}",
	                 "apiVersion", "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name", name,
	                 "namespace", ns, "spec", "request", q->b64, "issuerRef", "name", issuer, "kind", "Issuer",
	                 "group", "cert-manager.io", "duration", "24h", "usages", "digital signature",
	                 "key encipherment", "server auth", "username", user, "groups", group, "system:authenticated",
	                 "uid", uid);
}

/* The machine's CPU time so far, in clock ticks: all of it and the busy
 * part (not idle, not iowait), from /proc/stat's first line; zeros when
 * unreadable. */
static void cpu_ticks(uint64_t *total, uint64_t *busy)
{
	unsigned long long v[8] = {0};
	*total = *busy = 0;
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
	               &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	*busy = *total - v[3] - v[4];
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

/* ---- set-up ---- */

static int put(sg_kube *k, const sg_kube_ref *coll, json_t *o)
{
	int rc = o ? sg_kube_create(k, coll, o, NULL) : sg_error_set(SG_EINTERNAL, "out of memory");
	json_decref(o);
	if (sg_kube_conflict(rc))
		return SG_OK; /* already there */
	return rc;
}

static int setup_cluster(sg_kube *k)
{
	sg_kube_ref nsr = {.version = "v1", .resource = "namespaces"};
	sg_kube_ref crr = {.group = "rbac.authorization.k8s.io", .version = "v1", .resource = "clusterroles"};
	sg_kube_ref pr = {.group = "policy.cert-manager.io", .version = "v1alpha1",
	                  .resource = "certificaterequestpolicies"};
	SG_TRY(put(k, &crr,
	           json_pack("{s:s, s:s, s:{s:s}, s:[{s:[s], s:[s], s:[s]}]}", "apiVersion", "rbac.authorization.k8s.io/v1",
	                     "kind", "ClusterRole", "metadata", "name", "apb-use", "rules", "apiGroups",
	                     "policy.cert-manager.io", "resources", "certificaterequestpolicies", "verbs", "use")));
	for (int j = 0; j < TEAMS; j++) {
		char ns[32], team[16], pair[16], user[32], rb[48], pol[32], issuer[32], dom[48];
		snprintf(ns, sizeof(ns), "apb-t%d", j);
		snprintf(team, sizeof(team), "t%d", j);
		snprintf(pair, sizeof(pair), "p%d", j / 2);
		snprintf(user, sizeof(user), "team-%d", j);
		snprintf(rb, sizeof(rb), "apb-use-team-%d", j);
		snprintf(pol, sizeof(pol), "apb-team-%d", j);
		snprintf(issuer, sizeof(issuer), "team-%d-*", j);
		snprintf(dom, sizeof(dom), "*.t%d.example.com", j);
		SG_TRY(put(k, &nsr,
		           json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}}}", "apiVersion", "v1", "kind", "Namespace", "metadata",
		                     "name", ns, "labels", "team", team, "pair", pair)));
		sg_kube_ref rbr = {.group = "rbac.authorization.k8s.io", .version = "v1", .resource = "rolebindings",
		                   .ns = ns};
		SG_TRY(put(k, &rbr,
		           json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s}, s:[{s:s, s:s, s:s}]}", "apiVersion",
		                     "rbac.authorization.k8s.io/v1", "kind", "RoleBinding", "metadata", "name", rb, "namespace",
		                     ns, "roleRef", "apiGroup", "rbac.authorization.k8s.io", "kind", "ClusterRole", "name",
		                     "apb-use", "subjects", "apiGroup", "rbac.authorization.k8s.io", "kind", "User", "name",
		                     user)));
		json_t *selector = j % 2 == 0 ? json_pack("{s:{s:s}}", "issuerRef", "name", issuer)
		                              : json_pack("{s:{s:{s:s}}}", "namespace", "matchLabels", "pair", pair);
		SG_TRY(put(k, &pr,
		           json_pack("{s:s, s:s, s:{s:s}, s:{s:{s:{s:s}, s:{s:[s]}, s:[s, s, s, s]}, s:{s:s, s:{s:s}}, s:o}}",
		                     "apiVersion", "policy.cert-manager.io/v1alpha1", "kind", "CertificateRequestPolicy",
		                     "metadata", "name", pol, "spec", "allowed", "commonName", "value", dom, "dnsNames",
		                     "values", dom, "usages", "digital signature", "key encipherment", "server auth",
		                     "client auth", "constraints", "maxDuration", "720h", "privateKey", "algorithm", "ECDSA",
		                     "selector", selector)));
	}
	return SG_OK;
}

static int policies_ready(sg_kube *k)
{
	int ready = 0;
	for (int j = 0; j < TEAMS; j++) {
		char pol[32];
		snprintf(pol, sizeof(pol), "apb-team-%d", j);
		sg_kube_ref r = {.group = "policy.cert-manager.io", .version = "v1alpha1",
		                 .resource = "certificaterequestpolicies", .name = pol};
		json_t *o = NULL;
		if (sg_kube_get(k, &r, &o) == SG_OK && cond_true(o, "Ready"))
			ready++;
		json_decref(o);
	}
	return ready;
}

static sg_kube *client(const char *kubeconfig, int64_t qps, int64_t burst)
{
	sg_kube_config *cfg = NULL;
	if (sg_kube_config_from_kubeconfig(&cfg, kubeconfig, NULL) != SG_OK)
		return NULL;
	const char *server = sg_kube_config_server(cfg);
	static const char *const loopback[] = {"https://127.0.0.1:", "https://localhost:", "https://[::1]:"};
	bool local = false;
	for (size_t i = 0; server && i < N(loopback); i++)
		local = local || strncmp(server, loopback[i], strlen(loopback[i])) == 0;
	if (!local) {
		sg_error_set(SG_EINVAL, "the API server %s is not on loopback: this bench runs against a private one only",
		             server ? server : "(none)");
		sg_kube_config_free(cfg);
		return NULL;
	}
	sg_kube_options o = {.qps = qps > 0 ? (double)qps : -1, .burst = (int)burst};
	sg_kube *k = NULL;
	return sg_kube_new(&k, &cfg, &o) == SG_OK ? k : NULL;
}

/* Starts an approver and waits until it has settled: every informer
 * listed, the policies reconciled and Ready, nothing queued. */
static int approver_start(sg_kube *k, const sg_approver_options *ao, sg_approver **out)
{
	SG_TRY(sg_approver_new(out, ao));
	sg_ctrl *c = sg_approver_controller(*out);
	SG_TRY(sg_ctrl_start(c));
	uint64_t until = sg_now_ns() + 120ull * 1000000000u;
	int quiet = 0;
	while (quiet < 5) {
		SG_ENSURE(sg_now_ns() < until, SG_ETIMEOUT, "the approver did not settle within 120 s");
		sg_sleep_ms(100);
		sg_ctrl_stats st;
		sg_ctrl_stats_get(c, &st);
		if (st.running && st.reconciles >= TEAMS && st.queued == 0 && policies_ready(k) == TEAMS)
			quiet++;
		else
			quiet = 0;
	}
	return SG_OK;
}

/* One configuration: returns SG_OK when every request was decided, and
 * rightly. */
static int run_config(const args *a, sg_kube *k, const req *reqs, const struct config *cf, int round,
                      int expect_sars_uncached)
{
	run r = {.a = a, .k = k, .reqs = reqs, .n = (int)a->count};
	unsigned workers = cf->workers;
	int64_t sar_ttl = cf->sar_ttl;
	char label[2] = {cf->label, 0};
	snprintf(r.tag, sizeof(r.tag), "%c%d", cf->label - 'A' + 'a', round);
	r.objs = calloc((size_t)r.n, sizeof(*r.objs));
	r.t_created = calloc((size_t)r.n, sizeof(*r.t_created));
	r.t_decided = calloc((size_t)r.n, sizeof(*r.t_decided));
	uint64_t *lat = calloc((size_t)r.n, sizeof(*lat));
	int rc = r.objs && r.t_created && r.t_decided && lat ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	for (int i = 0; rc == SG_OK && i < r.n; i++)
		if (!(r.objs[i] = request_object(&r, i)))
			rc = sg_error_set(SG_EINTERNAL, "out of memory");

	/* the approver under test, on a client of its own */
	sg_kube *ka = rc == SG_OK ? client(a->kubeconfig, a->qps, a->burst) : NULL;
	if (rc == SG_OK && !ka)
		rc = sg_error_last()->code < 0 ? sg_error_last()->code : sg_error_set(SG_EINVAL, "no client");
	sg_approver_options ao = {.kube = ka, .workers = workers, .sar_ttl_seconds = sar_ttl};
	sg_approver *ap = NULL;
	if (rc == SG_OK)
		rc = approver_start(k, &ao, &ap);
	sg_approver_stats s0 = {0};
	if (ap)
		sg_approver_stats_get(ap, &s0);

	/* the bench's own watch */
	sg_kube_informer *inf = NULL;
	sg_kube_ref wr = {.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests"};
	sg_kube_handlers h = {seen, seen_update, gone, &r};
	if (rc == SG_OK)
		rc = sg_kube_informer_new(&inf, k, &wr, NULL, &h);
	if (rc == SG_OK)
		rc = sg_kube_informer_start(inf);
	if (rc == SG_OK)
		rc = sg_kube_informer_wait_synced(inf, 60000);

	uint64_t t0 = 0, t_created = 0, t_end = 0, cpu0 = 0, busy0 = 0, cpu1 = 0, busy1 = 0;
	if (rc == SG_OK) {
		pthread_t cr[CREATORS_MAX];
		cpu_ticks(&cpu0, &busy0);
		t0 = sg_now_ns();
		for (int i = 0; i < a->creators; i++)
			pthread_create(&cr[i], NULL, creator, &r);
		for (int i = 0; i < a->creators; i++)
			pthread_join(cr[i], NULL);
		t_created = sg_now_ns();
		uint64_t deadline = t0 + (uint64_t)a->timeout * 1000000000u;
		while (atomic_load(&r.decided) + atomic_load(&r.create_errors) < r.n && sg_now_ns() < deadline)
			sg_sleep_ms(5);
		t_end = atomic_load(&r.t_last) ? atomic_load(&r.t_last) : sg_now_ns();
		cpu_ticks(&cpu1, &busy1);
	}
	int decided = atomic_load(&r.decided);

	/* the watch can see a decision before the approver has counted it:
	 * let the counters settle (bounded) */
	sg_approver_stats st = {0};
	for (int tries = 0; ap && tries < 1000; tries++) {
		sg_approver_stats_get(ap, &st);
		if (st.approved + st.denied - s0.approved - s0.denied >= (uint64_t)decided)
			break;
		sg_sleep_ms(10);
	}
	if (rc == SG_OK) {
		size_t nl = 0;
		for (int i = 0; i < r.n; i++) {
			uint64_t d = atomic_load(&r.t_decided[i]), c = atomic_load(&r.t_created[i]);
			if (d && c && d >= c)
				lat[nl++] = d - c;
		}
		qsort(lat, nl, sizeof(*lat), cmp_u64);
		double secs = (double)(t_end - t0) / 1e9;
		uint64_t written = st.approved + st.denied - s0.approved - s0.denied;
		uint64_t sars = st.sar_requests - s0.sar_requests, cached = st.sar_cached - s0.sar_cached;
		char limit[48];
		if (a->qps > 0)
			snprintf(limit, sizeof(limit), "%lld/%lld", (long long)a->qps, (long long)a->burst);
		else
			snprintf(limit, sizeof(limit), "none");
		char ttl[16];
		snprintf(ttl, sizeof(ttl), "%llds", (long long)(sar_ttl ? sar_ttl : SG_APPROVER_SAR_TTL_DEFAULT));
		printf("approverbench config=%s round=%d workers=%u sar_cache=%s client_limit=%s count=%d decided=%d "
		       "approved=%d denied=%d wrong=%d seconds=%.2f per_second=%.1f created_in=%.2f latency_p50_ms=%.0f "
		       "latency_p99_ms=%.0f latency_max_ms=%.0f sars_sent=%llu sars_cached=%llu sars_per_decision=%.3f "
		       "sars_uncached_would_be=%d decisions_written=%llu writes_per_decision=%.3f conflicts=%llu errors=%llu "
		       "unprocessed=%llu deferred=%llu create_errors=%d machine_cpu_busy=%.2f\n",
		       label, round, workers ? workers : 4u, sar_ttl < 0 ? "off" : ttl, limit, r.n, decided,
		       atomic_load(&r.approved_seen), atomic_load(&r.denied_seen), atomic_load(&r.wrong), secs,
		       decided / (secs > 0 ? secs : 1), (double)(t_created - t0) / 1e9,
		       nl ? (double)lat[nl / 2] / 1e6 : 0.0, nl ? (double)lat[(nl * 99) / 100] / 1e6 : 0.0,
		       nl ? (double)lat[nl - 1] / 1e6 : 0.0, (unsigned long long)sars, (unsigned long long)cached,
		       decided ? (double)sars / decided : 0.0, expect_sars_uncached, (unsigned long long)written,
		       decided ? (double)written / decided : 0.0, (unsigned long long)(st.conflicts - s0.conflicts),
		       (unsigned long long)(st.errors - s0.errors), (unsigned long long)(st.unprocessed - s0.unprocessed),
		       (unsigned long long)(st.deferred - s0.deferred), atomic_load(&r.create_errors),
		       cpu1 > cpu0 ? (double)(busy1 - busy0) / (double)(cpu1 - cpu0) : 0.0);
		fflush(stdout);
		if (decided < r.n)
			rc = sg_error_set(SG_ETIMEOUT, "config %s: %d of %d requests decided", label, decided, r.n);
		else if (atomic_load(&r.wrong) > 0)
			rc = sg_error_set(SG_EINTERNAL, "config %s: %d requests decided wrongly", label,
			                  atomic_load(&r.wrong));
	}
	sg_kube_informer_free(inf);
	sg_approver_free(ap);
	sg_kube_free(ka);
	for (int i = 0; r.objs && i < r.n; i++)
		json_decref(r.objs[i]);
	free(r.objs);
	free(r.t_created);
	free(r.t_decided);
	free(lat);
	return rc;
}

static int bench(const args *a)
{
	sg_kube *k = client(a->kubeconfig, 0, 1);
	if (!k) /* the detail is the thread's already */
		return sg_error_last()->code < 0 ? sg_error_last()->code : sg_error_set(SG_EINVAL, "no client");
	int n = (int)a->count, rc = SG_OK, expect_sars = 0, denied = 0;
	req *reqs = calloc((size_t)n, sizeof(*reqs));
	SG_ENSURE_GOTO(rc, reqs, out, SG_EINTERNAL, "out of memory");
	for (int i = 0; i < n; i++) {
		reqs[i].team = i % TEAMS;
		reqs[i].deny = mix((uint32_t)i) % (uint32_t)a->deny_every == 0;
		char cn[96], dns[96];
		snprintf(cn, sizeof(cn), "w%d.t%d.example.com", i, reqs[i].team);
		snprintf(dns, sizeof(dns), reqs[i].deny ? "w%d.elsewhere.example.net" : "w%d.t%d.example.com", i,
		         reqs[i].team);
		reqs[i].b64 = make_csr_b64(cn, dns);
		SG_ENSURE_GOTO(rc, reqs[i].b64, out, SG_EINTERNAL, "cannot make a CSR");
		/* without a cache: one review per policy consulted, in name order
		 * up to the one that approves */
		expect_sars += reqs[i].deny && reqs[i].team % 2 == 0 ? 2 : 1;
		denied += reqs[i].deny;
	}
	SG_TRY_GOTO(rc, setup_cluster(k), out);
	fprintf(stderr, "approverbench: %d requests, %d to be denied, %d teams, %lld creators\n", n, denied, TEAMS,
	        (long long)a->creators);
	for (int round = 1; round <= a->rounds; round++) {
		for (const char *c = a->configs; *c; c++) {
			int one = run_config(a, k, reqs, &configs[*c - 'A'], round, expect_sars);
			if (one < 0)
				fprintf(stderr, "approverbench: %s\n", sg_error_last()->msg);
			if (rc == SG_OK)
				rc = one;
		}
	}
out:
	for (int i = 0; reqs && i < n; i++)
		free(reqs[i].b64);
	free(reqs);
	sg_kube_free(k);
	return rc;
}

/* What one row of the table cannot say. */
static int check_args(void *target)
{
	const args *a = target;
	if (!a->kubeconfig)
		return sg_error_set(SG_EINVAL, "--kubeconfig is required");
	for (const char *c = a->configs; c && *c; c++)
		if (*c < 'A' || *c >= 'A' + (int)N(configs) || strchr(c + 1, *c))
			return sg_error_set(SG_EINVAL, "--configs: letters A to D, each at most once");
	if (!a->configs || !*a->configs)
		return sg_error_set(SG_EINVAL, "--configs: at least one of A to D");
	return SG_OK;
}

int main(int argc, char **argv)
{
	args a;
	memset(&a, 0, sizeof(a));
	int status;
	if (!sg_opt_program("approverbench",
	                    "usage: approverbench --kubeconfig FILE [options]\n\n"
	                    "Measures how fast signet's CertificateRequest policy approver decides a burst\n"
	                    "against a real (loopback) API server: signet's defaults (A) and\n"
	                    "approver-policy's one worker without a SubjectAccessReview cache (B).\n\n",
	                    opts, N(opts), &a, argc, argv, check_args, &status))
		return status;
	sg_log_configure((sg_log_level)a.log_level, SG_LOG_TEXT);
	int rc = bench(&a);
	if (rc < 0)
		fprintf(stderr, "approverbench: %s\n", sg_error_last()->msg);
	sg_opt_free(opts, N(opts), &a);
	return rc < 0 ? 1 : 0;
}
