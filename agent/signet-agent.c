/*
 * signet-agent: the node agent. It watches the pods of its own node
 * (a field selector on spec.nodeName), keeps one workload certificate per
 * service account that has pods there, and publishes each under
 * --output-dir as DIR/<namespace>/<service-account>/{cert-chain.pem,
 * key.pem, root-cert.pem} (sg_certdir.h: switched atomically;
 * root-cert.pem holds every root of the CA's answer, old and new while a
 * rotation overlaps them: sg_caclient.h). The
 * certificates come from any Istio-API CA (signetd, istiod, istio-csr)
 * through sg_caclient, asked for as the agent's own service account
 * impersonating each workload's: the CA must list the agent's account in
 * its trusted node accounts (signetd: --ca-trusted-node-accounts), and
 * signetd then issues only for service accounts with a pod on the agent's
 * node.
 *
 * Flow. The pod informer's handlers (its one thread) turn each pod into a
 * (pod UID, identity) pair for sg_wlcerts: a running or pending pod is set,
 * a finished (Succeeded/Failed) or deleted one removed. sg_wlcerts fetches,
 * refreshes and drops; its events arrive here on its delivery thread, one
 * at a time, in order, and become files, log lines and counters. A write
 * that fails is retried by the once-a-second tick, which also sweeps, once
 * after the first list, the folders a previous run left for service
 * accounts that no longer have pods here.
 *
 * Enrolment. Every pod of the node by default; --pod-label-selector
 * narrows it (the API server filters). --namespace-label-selector enrols
 * the way Kmesh does (a pod carrying the label, or a pod in a namespace
 * carrying it): a pod is then served when it matches the pod selector
 * (when one is given) or its namespace matches the namespace selector, so
 * the pods are watched unfiltered and matched here, and a second informer
 * watches the matching namespaces. A namespace that gains or loses the
 * label re-decides its pods on that informer's thread; both informers'
 * handlers decide under enrol_mu, reading the other's store (updated
 * before its handlers run), so neither can undo a later decision of the
 * other.
 *
 * One writer per folder: the delivery thread (issued, refreshed, dropped)
 * and the tick (retried writes, the start-up sweep) both change files, so
 * every change of --output-dir is made under one lock (files_mu), and each
 * decides under it from what the certificates hold then: a retried write
 * takes the certificate held at that moment (none: the account was
 * dropped, nothing is written), and the sweep takes its list of accounts
 * with pods under the lock too, so no folder written after that list can
 * be swept by it. One lock for all accounts rather than one per account:
 * a write is a few small files on a local disk, and the sweep runs once.
 *
 * No leader election: one agent per node, each the only writer of its
 * node's folder. Probes: /healthz while the process lives; the readiness
 * path once the pods are listed and every service account with pods has
 * its certificate on disk.
 */
#include "sg_caclient.h"
#include "sg_certdir.h"
#include "sg_ctrl.h"
#include "sg_ctrl_program.h"
#include "sg_error.h"
#include "sg_guard.h"
#include "sg_kube.h"
#include "sg_kube_informer.h"
#include "sg_kube_selector.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_names.h"
#include "sg_opt.h"
#include "sg_wlcerts.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const formats[] = {"text", "json", NULL};
static const char *const key_types[] = {"ec-p256", "rsa", NULL};

typedef struct settings {
	char *config;
	sg_ctrl_common c; /* no leader election: every node's agent runs */
	char *node_name;
	char *pod_label_selector;
	char *namespace_label_selector;
	char *output_dir;
	char *ca_address, *ca_server_name;
	char *cluster_id;
	char *trust_domain;
	int64_t secret_ttl;
	char *root_ca_file, *token_file;
	int key_type;
	int64_t rsa_key_size;
	bool pkcs8_key;
	int64_t refresh_percent, refresh_jitter_percent, refresh_floor;
	int64_t retry_initial, retry_max;
	int64_t max_concurrent, request_timeout;
	int log_level, log_format;
} settings;

#define S(f) offsetof(settings, f)
/* clang-format off: the table keeps its one-row-per-flag layout */
static const sg_opt opts[] = {
	{"config", SG_OPT_PATH, S(config), NULL, 0, 4096, NULL, "config file of \"name = value\" lines (flags override it)",
	 true},
	SG_CTRL_OPTS_CLIENT(settings, c, "5", "10"),
	{"node-name", SG_OPT_STRING, S(node_name), NULL, 1, 253, NULL,
	 "this node's name: the pods with spec.nodeName equal to it are served (required; a DaemonSet passes "
	 "spec.nodeName through the downward API)",
	 false},
	{"pod-label-selector", SG_OPT_STRING, S(pod_label_selector), "", 0, 4096, NULL,
	 "serve only the pods matching this label selector (empty: every pod of the node; with "
	 "namespace-label-selector: pods enrolled by their own labels, empty: none)",
	 false},
	{"namespace-label-selector", SG_OPT_STRING, S(namespace_label_selector), "", 0, 4096, NULL,
	 "also serve the pods of namespaces matching this label selector, as Kmesh enrols (a pod is served when "
	 "it matches pod-label-selector or its namespace matches this; empty: namespaces do not enrol)",
	 false},
	{"output-dir", SG_OPT_PATH, S(output_dir), "/var/run/signet-agent", 1, 4000, NULL,
	 "folder of the certificates: <namespace>/<service-account>/{cert-chain.pem,key.pem,root-cert.pem}", false},
	{"ca-address", SG_OPT_STRING, S(ca_address), "istiod.istio-system.svc:15012", 1, 512, NULL,
	 "host:port of the Istio certificate service (signetd, istiod, istio-csr)", false},
	{"ca-server-name", SG_OPT_STRING, S(ca_server_name), "", 0, 253, NULL,
	 "TLS name the CA's certificate must carry (empty: ca-address's host)", false},
	{"cluster-id", SG_OPT_STRING, S(cluster_id), "Kubernetes", 0, 253, NULL,
	 "cluster ID sent to the CA (header clusterid; istio-agent's default)", false},
	{"trust-domain", SG_OPT_STRING, S(trust_domain), "cluster.local", 1, 253, NULL,
	 "trust domain of the SPIFFE identities asked for: spiffe://<trust-domain>/ns/<ns>/sa/<sa>", false},
	{"secret-ttl", SG_OPT_DURATION, S(secret_ttl), "24h", 60, 365LL * 86400, NULL,
	 "certificate lifetime asked of the CA (the CA may shorten it)", false},
	{"root-ca-file", SG_OPT_PATH, S(root_ca_file), "/var/run/secrets/istio/root-cert.pem", 1, 4096, NULL,
	 "PEM roots that the CA's serving certificate, and an intermediate the CA answers as its root, must chain to "
	 "(re-read when it changes)",
	 false},
	{"token-file", SG_OPT_PATH, S(token_file), "/var/run/secrets/tokens/istio-token", 1, 4096, NULL,
	 "the agent's service-account token (a projected, pod-bound token); re-read on every call", false},
	{"key-type", SG_OPT_ENUM, S(key_type), "ec-p256", 0, 0, key_types,
	 "workload key type: ec-p256 (ECDSA P-256) or rsa (rsa-key-size bits, istio-agent's default)", false},
	{"rsa-key-size", SG_OPT_INT, S(rsa_key_size), "2048", 2048, 4096, NULL, "RSA key size (key-type rsa)", false},
	{"pkcs8-key", SG_OPT_BOOL, S(pkcs8_key), "false", 0, 0, NULL,
	 "write key.pem as PKCS#8 (false: PKCS#1 for RSA, SEC1 for EC, as istio-agent)", false},
	{"refresh-percent", SG_OPT_INT, S(refresh_percent), "50", 5, 95, NULL,
	 "refresh a certificate at this percentage of its lifetime", false},
	{"refresh-jitter-percent", SG_OPT_INT, S(refresh_jitter_percent), "5", 0, 45, NULL,
	 "random spread of the refresh time, +- this percentage of the lifetime (kept inside the lifetime)", false},
	{"refresh-floor", SG_OPT_DURATION, S(refresh_floor), "30s", 1, 86400, NULL,
	 "never refresh sooner than this after a certificate arrived (a certificate shorter than this is "
	 "refreshed at this interval, never in a loop)",
	 false},
	{"retry-initial", SG_OPT_DURATION, S(retry_initial), "1s", 1, 3600, NULL,
	 "first retry delay after a failed request (doubling per failure, +-20 % jitter)", false},
	{"retry-max", SG_OPT_DURATION, S(retry_max), "5m", 1, 86400, NULL, "retry delay cap", false},
	{"max-concurrent-requests", SG_OPT_INT, S(max_concurrent), "8", 1, SG_WLCERTS_WORKERS_MAX, NULL,
	 "requests to the CA in flight at most", false},
	{"ca-request-timeout", SG_OPT_DURATION, S(request_timeout), "30s", 1, 600, NULL,
	 "deadline of one request to the CA", false},
	SG_CTRL_OPTS_ENDPOINTS(settings, c),
	{"log-level", SG_OPT_LOG_LEVEL, S(log_level), "info", 0, 0, NULL, "log level (or a klog verbosity 0-10)", false},
	{"log-format", SG_OPT_ENUM, S(log_format), "text", 0, 0, formats, "log format", false},
};
/* clang-format on */
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* Identities whose files could not be written: retried by the tick. */
typedef struct retry_item {
	struct retry_item *next;
	char identity[];
} retry_item;

typedef struct program {
	settings s;
	char *selector;
	sg_ctrl_common_run run; /* the client (no Lease) */
	sg_kube *kube;          /* run.kube */
	sg_kube_informer *pods;
	sg_kube_informer *namespaces; /* namespace-label-selector's, or NULL */
	sg_kube_selector *pod_sel, *ns_sel;
	pthread_mutex_t enrol_mu; /* enrolment decisions (see the design note) */
	sg_caclient *ca;
	sg_wlcerts *certs;
	sg_metrics *metrics;
	sg_ctrl_endpoints *endpoints;
	sg_ctrl_manager *table; /* none: the agent runs no controller table */
	atomic_bool started;
	/* Held across every change of the output folder (see the design
	 * note); taken before mu, never inside it. */
	pthread_mutex_t files_mu;
	/* Written by the delivery thread, read by the tick and readiness. */
	pthread_mutex_t mu;
	retry_item *retry;
	uint64_t files_written, file_errors, removed, swept;
	unsigned synced_ticks;
	bool swept_once;
	sg_series *s_written, *s_errors;
} program;

/* ---- pods ---- */

/* The identity a pod uses, or false when it is not served: finished pods
 * need no certificate (their UID is removed, so a pod that completes lets
 * its certificate go like a deleted one). */
static bool pod_identity(program *p, const json_t *pod, const char **uid, char *id, size_t cap)
{
	*uid = sg_kube_meta_str(pod, "uid");
	const char *ns = sg_kube_meta_str(pod, "namespace");
	if (!*uid || !**uid || !ns)
		return false;
	const json_t *spec = json_object_get(pod, "spec");
	const char *sa = json_string_value(json_object_get(spec, "serviceAccountName"));
	if (!sa || !*sa)
		sa = "default"; /* what the API server's admission sets when a pod names none */
	const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
	if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
		return false;
	int n = snprintf(id, cap, "spiffe://%s/ns/%s/sa/%s", p->s.trust_domain, ns, sa);
	char ns_ok[64], sa_ok[254];
	if (n < 0 || (size_t)n >= cap || !sg_certdir_identity_split(id, ns_ok, sa_ok)) {
		sg_log(SG_LOG_WARN, "pod skipped: its namespace or service account is not a valid name",
		       SG_F_STR("namespace", ns), SG_F_STR("uid", *uid), SG_F_END);
		return false;
	}
	return true;
}

/* Whether a pod is enrolled. Without namespace-label-selector the pod
 * informer holds only what the pod selector picks; with it, the pod's own
 * labels or its namespace decide (the namespace informer holds the
 * matching namespaces). Called under enrol_mu. */
static bool pod_enrolled(program *p, const json_t *pod)
{
	if (!p->namespaces)
		return true;
	const json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
	if (!sg_kube_selector_everything(p->pod_sel) && sg_kube_selector_matches(p->pod_sel, labels))
		return true;
	const char *ns = sg_kube_meta_str(pod, "namespace");
	json_t *n = ns ? sg_kube_informer_get(p->namespaces, NULL, ns) : NULL;
	bool in = n && sg_kube_selector_matches(p->ns_sel, json_object_get(json_object_get(n, "metadata"), "labels"));
	json_decref(n);
	return in;
}

/* Sets or removes one pod by what it is now. Called under enrol_mu. */
static void pod_apply(program *p, const json_t *pod)
{
	const char *uid;
	char id[SG_WLCERTS_ID_MAX + 1];
	if (!pod_enrolled(p, pod) || !pod_identity(p, pod, &uid, id, sizeof(id))) {
		uid = sg_kube_meta_str(pod, "uid");
		if (uid && *uid && strlen(uid) <= SG_WLCERTS_POD_MAX)
			sg_wlcerts_pod_remove(p->certs, uid);
		return;
	}
	if (sg_wlcerts_pod_set(p->certs, uid, id) < 0)
		sg_log_error_last(SG_LOG_ERROR, "pod not counted");
}

static void pod_seen(json_t *pod, void *arg)
{
	program *p = arg;
	pthread_mutex_lock(&p->enrol_mu);
	pod_apply(p, pod);
	pthread_mutex_unlock(&p->enrol_mu);
}

static void pod_updated(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj;
	pod_seen(new_obj, arg);
}

static void pod_gone(json_t *pod, void *arg)
{
	program *p = arg;
	const char *uid = sg_kube_meta_str(pod, "uid");
	pthread_mutex_lock(&p->enrol_mu);
	if (uid && *uid && strlen(uid) <= SG_WLCERTS_POD_MAX)
		sg_wlcerts_pod_remove(p->certs, uid);
	pthread_mutex_unlock(&p->enrol_mu);
}

/* A namespace matched, changed or stopped matching: its pods of this node
 * are decided again, from the pod informer's store. */
static void namespace_changed(program *p, const json_t *ns_obj)
{
	const char *name = sg_kube_meta_str(ns_obj, "name");
	if (!name)
		return;
	pthread_mutex_lock(&p->enrol_mu);
	json_t *pods = sg_kube_informer_list(p->pods);
	size_t i;
	json_t *pod;
	json_array_foreach(pods, i, pod)
	{
		const char *ns = sg_kube_meta_str(pod, "namespace");
		if (ns && strcmp(ns, name) == 0)
			pod_apply(p, pod);
	}
	json_decref(pods);
	pthread_mutex_unlock(&p->enrol_mu);
}

static void ns_seen(json_t *obj, void *arg)
{
	namespace_changed(arg, obj);
}

static void ns_updated(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj;
	namespace_changed(arg, new_obj);
}

/* Both informers have listed once (the namespaces' when there is one). */
static bool synced(program *p)
{
	return sg_kube_informer_has_synced(p->pods) && (!p->namespaces || sg_kube_informer_has_synced(p->namespaces));
}

/* ---- files ---- */

static void retry_add_locked(program *p, const char *identity)
{
	for (retry_item *r = p->retry; r; r = r->next)
		if (strcmp(r->identity, identity) == 0)
			return;
	size_t n = strlen(identity) + 1;
	retry_item *r = malloc(sizeof(*r) + n);
	if (!r)
		return; /* the next refresh writes it again */
	memcpy(r->identity, identity, n);
	r->next = p->retry;
	p->retry = r;
}

static void retry_drop_locked(program *p, const char *identity)
{
	for (retry_item **pp = &p->retry; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->identity, identity) == 0) {
			retry_item *r = *pp;
			*pp = r->next;
			free(r);
			return;
		}
	}
}

/* Writes identity's certificate; on failure it is retried by the tick.
 * Called with files_mu held. */
static void publish_locked(program *p, const char *identity, const sg_wlcert *cert)
{
	char ns[64], sa[254];
	if (!sg_certdir_identity_split(identity, ns, sa))
		return; /* pod_identity let only valid ones in */
	int rc = sg_certdir_write(p->s.output_dir, ns, sa, cert);
	pthread_mutex_lock(&p->mu);
	if (rc == SG_OK) {
		p->files_written++;
		retry_drop_locked(p, identity);
	} else {
		p->file_errors++;
		retry_add_locked(p, identity);
	}
	pthread_mutex_unlock(&p->mu);
	if (rc == SG_OK)
		sg_series_inc(p->s_written);
	else {
		sg_series_inc(p->s_errors);
		sg_log_error_last(SG_LOG_ERROR, "cannot write the certificate files; retrying every second");
	}
}

static void on_event(const sg_wlcerts_event *ev, void *arg)
{
	program *p = arg;
	char ns[64] = "", sa[254] = "";
	(void)sg_certdir_identity_split(ev->identity, ns, sa);
	switch (ev->type) {
	case SG_WLCERTS_ISSUED:
	case SG_WLCERTS_REFRESHED:
		pthread_mutex_lock(&p->files_mu);
		publish_locked(p, ev->identity, ev->cert);
		pthread_mutex_unlock(&p->files_mu);
		sg_log(SG_LOG_INFO, ev->type == SG_WLCERTS_ISSUED ? "certificate issued" : "certificate refreshed",
		       SG_F_STR("namespace", ns), SG_F_STR("service_account", sa), SG_F_STR("serial", ev->cert->serial),
		       SG_F_INT("not_after", ev->cert->not_after), SG_F_INT("refresh_at", ev->refresh_at_ms / 1000),
		       SG_F_END);
		/* The floor wins over the lifetime (no refresh loop), so a CA
		 * that shortens certificates below it leaves gaps: say so. */
		if (ev->refresh_at_ms / 1000 >= ev->cert->not_after)
			sg_log(SG_LOG_WARN,
			       "refresh-floor is past the certificate's expiry: the CA issues certificates shorter than "
			       "refresh-floor, so each expires before its refresh",
			       SG_F_STR("namespace", ns), SG_F_STR("service_account", sa),
			       SG_F_INT("lifetime", ev->cert->not_after - ev->cert->not_before),
			       SG_F_INT("refresh_floor", p->s.refresh_floor), SG_F_END);
		break;
	case SG_WLCERTS_DROPPED: {
		pthread_mutex_lock(&p->files_mu);
		pthread_mutex_lock(&p->mu);
		retry_drop_locked(p, ev->identity);
		pthread_mutex_unlock(&p->mu);
		int rc = sg_certdir_remove(p->s.output_dir, ns, sa);
		pthread_mutex_unlock(&p->files_mu);
		if (rc < 0)
			sg_log_error_last(SG_LOG_ERROR, "cannot remove a dropped certificate's files");
		else
			sg_log(SG_LOG_INFO, "certificate dropped: no pod of the service account left on this node",
			       SG_F_STR("namespace", ns), SG_F_STR("service_account", sa), SG_F_END);
		break;
	}
	case SG_WLCERTS_FAILED:
		sg_log(ev->failures > 3 ? SG_LOG_ERROR : SG_LOG_WARN, "certificate request failed",
		       SG_F_STR("namespace", ns), SG_F_STR("service_account", sa), SG_F_STR("error", ev->error),
		       SG_F_INT("failures", ev->failures), SG_F_INT("retry_ms", (int64_t)ev->retry_ms),
		       SG_F_INT("held_until", ev->cert ? ev->cert->not_after : 0), SG_F_END);
		break;
	}
}

/* ---- the tick: retries and the sweep ---- */

typedef struct sweep {
	program *p;
	char **held;
	size_t n, cap;
} sweep;

static void collect(const char *identity, void *arg)
{
	sweep *w = arg;
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		char **h = realloc(w->held, cap * sizeof(*h));
		if (!h)
			return;
		w->held = h;
		w->cap = cap;
	}
	char *s = strdup(identity);
	if (s)
		w->held[w->n++] = s;
}

static void sweep_one(const char *ns, const char *sa, void *arg)
{
	sweep *w = arg;
	char id[SG_WLCERTS_ID_MAX + 1];
	snprintf(id, sizeof(id), "spiffe://%s/ns/%s/sa/%s", w->p->s.trust_domain, ns, sa);
	for (size_t i = 0; i < w->n; i++)
		if (strcmp(w->held[i], id) == 0)
			return;
	if (sg_certdir_remove(w->p->s.output_dir, ns, sa) < 0) {
		sg_log_error_last(SG_LOG_WARN, "cannot remove a stale certificate folder");
		return;
	}
	w->p->swept++;
	sg_log(SG_LOG_INFO, "stale certificate folder removed: no pod of the service account on this node",
	       SG_F_STR("namespace", ns), SG_F_STR("service_account", sa), SG_F_END);
}

/* Folders from an earlier run whose service account has no pod here now.
 * Runs once, two ticks after the first list, when the list's handlers have
 * set every pod (they run right after the informer says synced). A folder
 * of an account that has pods stays: its files serve until the new
 * certificate replaces them. The accounts with pods are read under
 * files_mu, and the folders listed and removed under it: a folder written
 * since holds an account of that list, or waits until the sweep is done. */
static void sweep_stale(program *p)
{
	sweep w = {.p = p};
	pthread_mutex_lock(&p->files_mu);
	sg_wlcerts_each(p->certs, collect, &w);
	if (sg_certdir_list(p->s.output_dir, sweep_one, &w) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot list the output folder for stale certificates");
	pthread_mutex_unlock(&p->files_mu);
	for (size_t i = 0; i < w.n; i++)
		free(w.held[i]);
	free(w.held);
}

static void tick(void *self)
{
	program *p = self;
	if (!atomic_load(&p->started))
		return;
	if (!p->swept_once && synced(p) && ++p->synced_ticks >= 2) {
		sweep_stale(p);
		p->swept_once = true;
	}
	/* Writes that failed: once a second, with the certificate held now. */
	pthread_mutex_lock(&p->mu);
	retry_item *list = p->retry;
	p->retry = NULL;
	pthread_mutex_unlock(&p->mu);
	while (list) {
		retry_item *r = list;
		list = r->next;
		/* The certificate held now, looked up under files_mu: a drop
		 * (which removes the folder under it) either came first, and
		 * none is held, or waits until this write is done. */
		pthread_mutex_lock(&p->files_mu);
		sg_wlcert *c = sg_wlcerts_get(p->certs, r->identity);
		if (c)
			publish_locked(p, r->identity, c);
		pthread_mutex_unlock(&p->files_mu);
		sg_wlcert_release(c);
		free(r);
	}
}

/* ---- endpoints ---- */

static bool ready(void *arg)
{
	program *p = arg;
	if (!atomic_load(&p->started) || !synced(p))
		return false;
	sg_wlcerts_stats st;
	sg_wlcerts_stats_get(p->certs, &st);
	pthread_mutex_lock(&p->mu);
	bool files_ok = p->retry == NULL;
	pthread_mutex_unlock(&p->mu);
	return st.pending == 0 && files_ok;
}

static void stats_of(void *arg, void *out)
{
	sg_wlcerts_stats_get(((program *)arg)->certs, out);
}

/* Seconds until the soonest certificate held expires; +Inf when none is
 * held (an alert on "< N" then stays quiet on an idle node). A value
 * derived from the stats: a callback. */
static double m_expiry(void *a)
{
	sg_wlcerts_stats st;
	stats_of(a, &st);
	if (st.soonest_expiry == 0)
		return INFINITY;
	return (double)(st.soonest_expiry - (int64_t)time(NULL));
}

#define COUNTER(field, name, help) SG_METRICS_STAT_COUNTER(sg_wlcerts_stats, field, name, help)
#define GAUGE(field, name, help) SG_METRICS_STAT_GAUGE(sg_wlcerts_stats, field, name, help)
static const sg_metrics_stat stat_rows[] = {
    GAUGE(pods, "signet_agent_pods", "Pods of this node counted (running or pending)."),
    GAUGE(identities, "signet_agent_identities", "Service accounts with pods on this node."),
    GAUGE(held, "signet_agent_certificates", "Certificates held (one per service account with pods)."),
    GAUGE(pending, "signet_agent_certificates_pending",
          "Service accounts with pods whose first certificate has not arrived yet."),
    COUNTER(fetches, "signet_agent_ca_requests_total", "Requests made to the CA."),
    COUNTER(issued, "signet_agent_certificates_issued_total", "First certificates of a service account."),
    COUNTER(refreshed, "signet_agent_refreshes_total", "Certificates refreshed."),
    COUNTER(failed, "signet_agent_ca_failures_total", "Requests to the CA that failed (each retried with backoff)."),
    COUNTER(dropped, "signet_agent_certificates_dropped_total", "Certificates dropped when their last pod went."),
};
#undef COUNTER
#undef GAUGE

static int setup_metrics(program *p)
{
	SG_TRY(sg_metrics_new(&p->metrics));
	SG_TRY(sg_metrics_stats(p->metrics, stat_rows, sizeof(stat_rows) / sizeof(stat_rows[0]), stats_of,
	                        sizeof(sg_wlcerts_stats), p));
	SG_TRY(sg_metrics_gauge_fn(p->metrics, "signet_agent_certificate_expiry_seconds",
	                           "Seconds until the soonest-expiring certificate held expires (+Inf: none held).",
	                           m_expiry, p));
	sg_metric *w = NULL, *e = NULL;
	SG_TRY(sg_metrics_counter(&w, p->metrics, "signet_agent_files_written_total",
	                          "Certificate folders written (each a new version switched in).", NULL, 0));
	SG_TRY(sg_metric_series(&p->s_written, w, NULL));
	SG_TRY(sg_metrics_counter(&e, p->metrics, "signet_agent_file_errors_total",
	                          "Certificate folders that could not be written (retried every second).", NULL, 0));
	SG_TRY(sg_metric_series(&p->s_errors, e, NULL));
	return SG_OK;
}

/* ---- start and stop ---- */

static int start(void *self)
{
	program *p = self;
	settings *s = &p->s;
	/* Settings first, so a typo is named before any connection is tried. */
	SG_ENSURE(s->node_name && *s->node_name, SG_EINVAL,
	          "node-name is required (a DaemonSet passes spec.nodeName through the downward API)");
	SG_ENSURE(sg_names_dns_subdomain(s->node_name, strlen(s->node_name)), SG_EINVAL,
	          "node-name \"%s\" is not a node name", s->node_name);
	SG_ENSURE(sg_names_dns_subdomain(s->trust_domain, strlen(s->trust_domain)), SG_EINVAL,
	          "trust-domain \"%s\" is not a DNS name", s->trust_domain);
	SG_ENSURE(s->retry_initial <= s->retry_max, SG_EINVAL, "retry-initial is longer than retry-max");
	SG_TRY(sg_kube_selector_parse(&p->pod_sel, s->pod_label_selector, "pod-label-selector"));
	SG_TRY(sg_kube_selector_parse(&p->ns_sel, s->namespace_label_selector, "namespace-label-selector"));
	bool by_ns = !sg_kube_selector_everything(p->ns_sel);
	pthread_mutex_init(&p->mu, NULL);
	pthread_mutex_init(&p->files_mu, NULL);
	pthread_mutex_init(&p->enrol_mu, NULL);

	sg_caclient_options co = {
		.address = s->ca_address,
		.server_name = s->ca_server_name,
		.root_ca_file = s->root_ca_file,
		.token_file = s->token_file,
		.cluster_id = s->cluster_id,
		.impersonate = true,
		.ttl_seconds = s->secret_ttl,
		.key_type = s->key_type == 1 ? SG_CACLIENT_KEY_RSA : SG_CACLIENT_KEY_EC_P256,
		.rsa_bits = (unsigned)s->rsa_key_size,
		.pkcs8 = s->pkcs8_key,
		.timeout_ms = (uint64_t)s->request_timeout * 1000u,
		/* Reach a CA that comes back within the agent's own retry cap. */
		.reconnect_backoff_max_ms = (uint64_t)(s->retry_max < 10 ? s->retry_max : 10) * 1000u,
	};
	SG_TRY(sg_caclient_new(&p->ca, &co));
	sg_wlcerts_options wo = {
		.fetch = sg_caclient_fetch_fn,
		.fetch_arg = p->ca,
		.on_event = on_event,
		.event_arg = p,
		.concurrency = (unsigned)s->max_concurrent,
		.refresh_fraction = (double)s->refresh_percent / 100.0,
		.refresh_jitter = s->refresh_jitter_percent ? (double)s->refresh_jitter_percent / 100.0 : -1.0,
		.refresh_floor_ms = (uint64_t)s->refresh_floor * 1000u,
		.backoff_initial_ms = (uint64_t)s->retry_initial * 1000u,
		.backoff_max_ms = (uint64_t)s->retry_max * 1000u,
	};
	SG_TRY(sg_wlcerts_new(&p->certs, &wo));

	SG_TRY(sg_ctrl_common_clients(&s->c, "signet-agent", NULL, &p->run));
	p->kube = p->run.kube;
	size_t n = strlen("spec.nodeName=") + strlen(s->node_name) + 1;
	SG_ENSURE(p->selector = malloc(n), SG_EINTERNAL, "out of memory");
	snprintf(p->selector, n, "spec.nodeName=%s", s->node_name);
	const sg_kube_ref pods = {.version = "v1", .resource = "pods"};
	/* With namespaces enrolling, a pod outside the pod selector may be
	 * served: the pods are matched here instead of by the API server. */
	const sg_kube_informer_opts io = {
		.field_selector = p->selector,
		.label_selector =
		    by_ns || sg_kube_selector_everything(p->pod_sel) ? NULL : sg_kube_selector_string(p->pod_sel),
	};
	const sg_kube_handlers h = {.on_add = pod_seen, .on_update = pod_updated, .on_delete = pod_gone, .arg = p};
	SG_TRY(sg_kube_informer_new(&p->pods, p->kube, &pods, &io, &h));
	if (by_ns) {
		const sg_kube_ref nss = {.version = "v1", .resource = "namespaces"};
		const sg_kube_informer_opts no = {.label_selector = sg_kube_selector_string(p->ns_sel),
		                                  .metadata_only = true};
		const sg_kube_handlers nh = {
		    .on_add = ns_seen, .on_update = ns_updated, .on_delete = ns_seen, .arg = p};
		SG_TRY(sg_kube_informer_new(&p->namespaces, p->kube, &nss, &no, &nh));
	}

	SG_TRY(setup_metrics(p));
	SG_TRY(sg_ctrl_common_endpoints(&s->c, p->metrics, ready, p, &p->endpoints));
	atomic_store(&p->started, true);
	if (p->namespaces)
		SG_TRY(sg_kube_informer_start(p->namespaces));
	SG_TRY(sg_kube_informer_start(p->pods));
	sg_log(SG_LOG_INFO, "signet-agent started", SG_F_STR("node", s->node_name), SG_F_STR("ca", s->ca_address),
	       SG_F_STR("output_dir", s->output_dir), SG_F_STR("key_type", key_types[s->key_type]), SG_F_END);
	return SG_OK;
}

static void stop(void *self)
{
	program *p = self;
	atomic_store(&p->started, false);
	sg_ctrl_endpoints_stop(p->endpoints);
	p->endpoints = NULL;
	/* The informers first: no handler calls into the certificates after;
	 * the namespaces' before the pods', whose store its handlers read. */
	sg_kube_informer_free(p->namespaces);
	sg_kube_informer_free(p->pods);
	sg_wlcerts_free(p->certs); /* no event is delivered after this */
	sg_caclient_free(p->ca);
	sg_ctrl_common_free(&p->run);
	p->kube = NULL;
	sg_metrics_free(p->metrics);
	free(p->selector);
	sg_kube_selector_free(p->pod_sel);
	sg_kube_selector_free(p->ns_sel);
	while (p->retry) {
		retry_item *r = p->retry;
		p->retry = r->next;
		free(r);
	}
}

int main(int argc, char **argv)
{
	static program p;
	sg_ctrl_program_def d = {
		.name = "signet-agent",
		.usage = "Usage: signet-agent --node-name NODE [flags]\n"
		         "Keeps a workload certificate for every service account with pods on this node, from an Istio\n"
		         "certificate service (signetd, istiod, istio-csr), as files under --output-dir.\n"
		         "Every flag may also be a line \"name = value\" in the --config file; flags override it.\n\n",
		.opts = opts,
		.nopts = NOPTS,
		.settings = &p.s,
		.log_level = &p.s.log_level,
		.log_format = &p.s.log_format,
		.start = start,
		.stop = stop,
		.self = &p,
		.table = &p.table,
		.tick = tick,
	};
	return sg_ctrl_program_main(&d, argc, argv);
}
