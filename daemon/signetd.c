/*
 * signetd: the signet daemon. Serves istio.v1.auth.IstioCertificateService
 * over gRPC (TLS, HTTP/2) to istio-agent, ztunnel and node agents, as a
 * drop-in for istio-csr and istiod's CA, with metrics and probes on HTTP.
 *
 * The request path is sg_service (sg_service.h): decode, authenticate,
 * policy, the signer pool, the answer and the audit line. This file puts
 * the parts together from the settings and runs them.
 *
 * With a Kubernetes API configured, sg_cluster (sg_cluster.h) supplies the
 * token authenticator (TokenReview or cluster-discovered JWKS), node
 * authorization for impersonation, and the leader-only writers (root
 * ConfigMaps, istiod's Secret); standalone, tokens are checked against a
 * JWKS file.
 *
 * The main thread only starts things, then waits for signals and once a
 * second does housekeeping (serving certificate renewal, root-ca-file
 * changes, health). SIGTERM and SIGINT shut down gracefully: not ready,
 * stop accepting, let in-flight requests finish within shutdown-grace, stop
 * the cluster writers (the Lease is released), drain the signer pool.
 * SIGHUP reloads the files signetd serves from (serving certificate and
 * key, root-ca-file, jwt-jwks-file), keeping what it has when a file
 * cannot be used.
 *
 * The graceful stop is bounded: a thread started at SIGTERM gives it
 * shutdown-grace plus STOP_OVERRUN_NS, and when a stage still has not
 * returned by then (a C_Sign the HSM never returns from holds its gRPC call
 * and its signer thread for good) it logs the stage and ends the process
 * with _exit(EXIT_FAILURE): every call was answered by then (the deadline
 * reaper and the gRPC drain do that), and waiting longer would only let
 * systemd's TimeoutStopSec= SIGKILL us without a word.
 *
 * Under systemd (Type=notify) the main thread also tells systemd what it
 * does, through sg_notify: READY=1 once /readyz would answer 200 (and
 * again after a reload), STATUS= with readiness and issuance counts,
 * RELOADING=1, STOPPING=1, and WATCHDOG=1 pings while the main loop and the
 * signer pool make progress.
 */
#include "sg_appliance.h"
#include "sg_authn.h"
#include "sg_authn_impl.h"
#include "sg_clock.h"
#include "sg_cluster.h"
#include "sg_daemon.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_init.h"
#include "sg_istio.h"
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_metrics.h"
#include "sg_notify.h"
#include "sg_policy.h"
#include "sg_secret.h"
#include "sg_serving.h"
#include "sg_service.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A Linux policy (uapi linux/sched.h: 3) that glibc's sched.h declares
 * only under _GNU_SOURCE, which the project does not ask for (it would
 * also declare daemon(3), a name this file uses). */
#ifndef SCHED_BATCH
#define SCHED_BATCH 3
#endif
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_AUDIENCES 8

const char *const sg_daemon_policy_names[] = {"istio-csr", "istiod", NULL};
const char *const sg_daemon_token_authenticator_names[] = {"auto", "tokenreview", "jwks", NULL};
const char *const sg_daemon_key_algorithm_names[] = {"RSA", "ECDSA", NULL};

typedef struct daemon_args {
	sg_settings s;
	sg_daemon_settings d;
	char *init_dir; /* signetd's alone: the embedded default's state folder */
} daemon_args;

#define SG_DAEMON_T_ daemon_args
#define SG_DAEMON_M_ d
static const sg_opt opts[] = {
	SG_SETTINGS_ROWS(daemon_args, s, "info"),
	SG_DAEMON_ROWS
	{"init-dir", SG_OPT_PATH, offsetof(daemon_args, init_dir), NULL, 0, 0, NULL,
	 "the embedded default, for a container with no shell: DIR/ca/signet.conf is read first (before any "
	 "--config), and on first start it is made as \"signetctl init --dir DIR/ca --so-pin-file DIR/so-pin\" "
	 "makes it (a SoftHSM2 token, a self-signed root, a development token issuer); DIR must exist, and be "
	 "writable on first start",
	 true},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* The daemon's own metrics beside the service's (sg_service.h). */
typedef struct metrics {
	sg_metrics *reg;
	sg_series *conn_refused_limit, *conn_refused_fds; /* signet_grpc_connections_refused_total */
	uint64_t seen_refused_limit, seen_refused_fds;    /* main thread only */
} metrics;

/* What identifies a file's contents cheaply (a change means "re-read"). */
struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	bool known;
};

/* A CA of issuer-cas: its own settings file, opened like the main one. */
typedef struct extra_ca_args {
	sg_settings s;
} extra_ca_args;
static const sg_opt extra_ca_opts[] = {SG_SETTINGS_ROWS(extra_ca_args, s, "info")};
#define N_EXTRA_CA_OPTS (sizeof(extra_ca_opts) / sizeof(extra_ca_opts[0]))

typedef struct extra_ca {
	extra_ca_args a;
	char name[SG_KUBESIGN_CA_NAME_MAX + 1];
	sg_appliance *app;
} extra_ca;

typedef struct daemon {
	daemon_args a;
	sg_appliance *app;
	extra_ca extra[SG_CLUSTER_CAS_MAX - 1]; /* issuer-cas */
	sg_kubesign_ca extra_cas[SG_CLUSTER_CAS_MAX - 1];
	size_t nextra;
	sg_pool *pool;
	const sg_ca *ca;
	sg_authenticator auth;
	bool auth_ready;
	sg_cluster *cluster; /* NULL when no Kubernetes API is configured */
	sg_policy *policy;
	sg_serving *serving;
	sg_service *svc;
	sg_grpc_server *grpc;
	/* grpc as the HTTP thread may read it: set once serving, cleared
	 * before the server is shut down (and freed). */
	pthread_mutex_t grpc_mu;
	sg_grpc_server *grpc_live;
	sg_http_server *http_metrics, *http_probe;
	metrics m;
	struct file_id root_file;
	atomic_bool ready, stopping;
	/* Standalone JWT authentication's key source (jwt-jwks-file), owned
	 * here so that SIGHUP can re-read it; NULL otherwise. */
	sg_jwks_file *jwks;
	/* systemd (main thread only). */
	sg_notify *notify;
	bool notified_ready; /* READY=1 has been sent once */
	char status[SG_NOTIFY_STATUS_MAX];
	/* What stop() is doing, for the stop guard's message (a static
	 * string; written by the main thread, read by the guard). */
	_Atomic(const char *) stop_stage;
	uint64_t pool_completed;   /* the watchdog's view of the signer pool */
	uint64_t pool_progress_ns; /* when it last completed work or was idle */
	bool pool_wedged_logged;
	/* Since when the HSM has been down without a break (0: it is not),
	 * written by housekeeping, read by /healthz's thread. */
	_Atomic uint64_t hsm_down_since_ns;
	bool hsm_down_reported;
} daemon;

/* ---- TLS material for gRPC ------------------------------------------------ */

static int tls_fetch(void *arg, char **chain, char **key, char **client_ca, uint64_t *version)
{
	daemon *d = arg;
	return sg_serving_get(d->serving, chain, key, client_ca, version);
}

/* ---- metrics and probes ---------------------------------------------------- */

static double root_expiry(void *arg)
{
	return (double)sg_ca_root_not_after(((daemon *)arg)->ca);
}

static double root_expiry_seconds(void *arg)
{
	return (double)(sg_ca_root_not_after(((daemon *)arg)->ca) - sg_wall_seconds());
}

static double chain_expiry(void *arg)
{
	return (double)sg_ca_chain_not_after(((daemon *)arg)->ca);
}

static double chain_expiry_seconds(void *arg)
{
	return (double)(sg_ca_chain_not_after(((daemon *)arg)->ca) - sg_wall_seconds());
}

static sg_hsm_stats hsm_stats(daemon *d)
{
	sg_hsm_stats st;
	sg_hsm_stats_get(sg_appliance_hsm(d->app), &st);
	return st;
}

static double hsm_state(void *arg)
{
	return (double)hsm_stats(arg).state;
}

static double hsm_up(void *arg)
{
	return hsm_stats(arg).state != SG_HSM_DOWN;
}

static sg_pool_stats pool_stats(daemon *d)
{
	sg_pool_stats st;
	sg_pool_stats_get(d->pool, &st);
	return st;
}

static double signer_service_seconds(void *arg)
{
	return (double)pool_stats(arg).service_ns / 1e9;
}

static double serving_expiry(void *arg)
{
	return (double)sg_serving_not_after(((daemon *)arg)->serving);
}

static double ready_gauge(void *arg)
{
	return atomic_load(&((daemon *)arg)->ready);
}

/* The parts' stats for the registry's tables. gRPC's: zeros before the
 * server is up and once it is shutting down. */
static void grpc_of(void *arg, void *out)
{
	daemon *d = arg;
	pthread_mutex_lock(&d->grpc_mu);
	if (d->grpc_live)
		sg_grpc_server_stats_get(d->grpc_live, out);
	pthread_mutex_unlock(&d->grpc_mu);
}

static void hsm_of(void *arg, void *out)
{
	sg_hsm_stats_get(sg_appliance_hsm(((daemon *)arg)->app), out);
}

static void pool_of(void *arg, void *out)
{
	sg_pool_stats_get(((daemon *)arg)->pool, out);
}

#define COUNTER SG_METRICS_STAT_COUNTER
#define GAUGE SG_METRICS_STAT_GAUGE

static const sg_metrics_stat hsm_rows[] = {
    GAUGE(sg_hsm_stats, sessions, "signet_hsm_sessions", "Open PKCS#11 signing sessions."),
    COUNTER(sg_hsm_stats, signatures, "signet_hsm_signatures_total", "Signatures made by the HSM."),
    COUNTER(sg_hsm_stats, faults, "signet_hsm_faults_total", "PKCS#11 faults seen."),
    COUNTER(sg_hsm_stats, recoveries, "signet_hsm_recoveries_total", "PKCS#11 sessions recovered after a fault."),
    COUNTER(sg_hsm_stats, reinits, "signet_hsm_reinits_total",
            "PKCS#11 module re-initialisations (C_Finalize + C_Initialize) after sessions could not be reopened."),
};

static const sg_metrics_stat pool_rows[] = {
    GAUGE(sg_pool_stats, queued, "signet_signer_queue_depth", "Requests waiting for a signer thread."),
    COUNTER(sg_pool_stats, rejected, "signet_signer_rejected_total",
            "Requests refused at once: the signer queue was full, or held more work than their deadline left time "
            "for."),
    COUNTER(sg_pool_stats, rejected_deadline, "signet_signer_rejected_deadline_total",
            "Requests refused because their wait in the signer queue would have outlasted their deadline."),
};

static const sg_metrics_stat grpc_rows[] = {
    GAUGE(sg_grpc_server_stats, connections, "signet_grpc_connections", "Open gRPC connections."),
    GAUGE(sg_grpc_server_stats, max_connections, "signet_grpc_max_connections",
          "gRPC connections held at once at most (max-connections)."),
    COUNTER(sg_grpc_server_stats, calls_cancelled, "signet_grpc_calls_cancelled_total",
            "Calls the client cancelled or reset."),
    COUNTER(sg_grpc_server_stats, streams_expired, "signet_grpc_streams_expired_total",
            "Calls reset because their request message did not arrive within the deadline."),
    COUNTER(sg_grpc_server_stats, answers_dropped, "signet_grpc_answers_dropped_total",
            "Answers the client did not take by the deadline (no flow-control window): the call was reset."),
    COUNTER(sg_grpc_server_stats, rapid_reset_closed, "signet_grpc_rapid_reset_closed_total",
            "Connections closed for cancelling streams faster than allowed (HTTP/2 rapid reset)."),
};

#undef COUNTER
#undef GAUGE

static int setup_metrics(daemon *d)
{
	metrics *m = &d->m;
	sg_metric *f;
	static const char *const reason_label[] = {"reason"};
	static const char *const limit[] = {"limit"}, *const fds[] = {"fds"};
	SG_TRY(sg_metrics_counter(&f, m->reg, "signet_grpc_connections_refused_total",
				  "gRPC connections refused at once: at max-connections (limit) or with no file "
				  "descriptor left (fds).",
				  reason_label, 1));
	SG_TRY(sg_metric_series(&m->conn_refused_limit, f, limit));
	SG_TRY(sg_metric_series(&m->conn_refused_fds, f, fds));
	/* Values derived from a part's state (seconds until, a state as a
	 * number, a scaled average): callbacks. The parts' counters: tables. */
	static const struct {
		const char *name, *help;
		sg_metrics_value_fn fn;
		bool counter;
	} fns[] = {
	    {"citadel_server_root_cert_expiry_timestamp", "The unix timestamp when the root CA expires.", root_expiry,
	     false},
	    {"citadel_server_root_cert_expiry_seconds", "Seconds until the root CA expires.", root_expiry_seconds,
	     false},
	    {"citadel_server_cert_chain_expiry_timestamp", "The unix timestamp when the CA chain expires.",
	     chain_expiry, false},
	    {"citadel_server_cert_chain_expiry_seconds", "Seconds until the CA chain expires.", chain_expiry_seconds,
	     false},
	    {"signet_hsm_up", "1 while at least one HSM token is usable.", hsm_up, false},
	    {"signet_hsm_state", "HSM health: 0 ok, 1 degraded, 2 down.", hsm_state, false},
	    {"signet_signer_service_seconds", "Moving average of one certificate's signing time in the signer pool.",
	     signer_service_seconds, false},
	    {"signet_serving_cert_expiry_timestamp", "The unix timestamp when the serving certificate expires.",
	     serving_expiry, false},
	    {"signet_ready", "1 when signet is ready to serve.", ready_gauge, false},
	};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		SG_TRY(fns[i].counter ? sg_metrics_counter_fn(m->reg, fns[i].name, fns[i].help, fns[i].fn, d)
				      : sg_metrics_gauge_fn(m->reg, fns[i].name, fns[i].help, fns[i].fn, d));
#define TABLE(rows, get, type) rows, sizeof(rows) / sizeof(rows[0]), get, sizeof(type)
	SG_TRY(sg_metrics_stats(m->reg, TABLE(hsm_rows, hsm_of, sg_hsm_stats), d));
	SG_TRY(sg_metrics_stats(m->reg, TABLE(pool_rows, pool_of, sg_pool_stats), d));
	SG_TRY(sg_metrics_stats(m->reg, TABLE(grpc_rows, grpc_of, sg_grpc_server_stats), d));
#undef TABLE
	return SG_OK;
}

static int serve_metrics(sg_http_response *resp, void *arg)
{
	daemon *d = arg;
	char *text;
	size_t len;
	SG_TRY(sg_metrics_render(d->m.reg, &text, &len));
	resp->content_type = SG_METRICS_CONTENT_TYPE;
	sg_http_response_take(resp, text, len);
	return SG_OK;
}

static int serve_ready(sg_http_response *resp, void *arg)
{
	daemon *d = arg;
	bool ready = atomic_load(&d->ready);
	resp->status = ready ? 200 : 503;
	sg_http_response_static(resp, ready ? "ok\n" : "not ready\n", ready ? 3 : 10);
	return SG_OK;
}

/* Alive unless the HSM has been down for longer than hsm-down-limit. The
 * HSM layer reconnects and re-initialises the module by itself; what it
 * cannot cure (a module wedged inside, a backend gone for good, a device
 * the process lost) only a new process can, and a liveness probe is how an
 * orchestrator is told. Within the limit an outage only takes the replica
 * out of service (/readyz), so that a short one costs no restart. */
static int serve_health(sg_http_response *resp, void *arg)
{
	daemon *d = arg;
	uint64_t since = atomic_load(&d->hsm_down_since_ns), limit = (uint64_t)d->a.d.hsm_down_limit * 1000000000u;
	if (since && limit && sg_now_ns() - since > limit) {
		resp->status = 503;
		sg_http_response_static(resp, "HSM down beyond hsm-down-limit\n", 31);
		return SG_OK;
	}
	sg_http_response_static(resp, "ok\n", 3);
	return SG_OK;
}

/* Where the endpoints listen unless http-address says: in a pod, every
 * address (the kubelet probes the pod's address, Prometheus scrapes it, and
 * the pod's network namespace is its own); on a host, loopback only, since
 * a host's addresses may face networks the endpoints have no business on. */
static const char *http_address(const daemon *d)
{
	const char *a = d->a.d.http_address;
	if (a && *a)
		return a;
	const char *k8s = getenv("KUBERNETES_SERVICE_HOST");
	return k8s && *k8s ? "0.0.0.0" : "127.0.0.1";
}

/* /metrics on metrics-port; the readiness path and /healthz on
 * readiness-probe-port, which may be the same port (then one server). */
static int start_http(daemon *d)
{
	const sg_daemon_settings *s = &d->a.d;
	bool same = s->metrics_port == s->readiness_probe_port;
	sg_http_route probe[] = {{s->readiness_probe_path, serve_ready, d}, {"/healthz", serve_health, d}};
	sg_http_route routes[3] = {{"/metrics", serve_metrics, d}, probe[0], probe[1]};
	sg_http_options o = {.bind_address = http_address(d), .port = (uint16_t)s->metrics_port, .routes = routes,
			     .nroutes = same ? 3 : 1};
	SG_TRY(sg_http_server_start(&d->http_metrics, &o));
	if (same)
		return SG_OK;
	o.port = (uint16_t)s->readiness_probe_port;
	o.routes = probe;
	o.nroutes = 2;
	return sg_http_server_start(&d->http_probe, &o);
}

/* ---- start-up ---------------------------------------------------------------- */

/* mTLS first when enabled (istio's order), then the token authenticator:
 * the cluster's choice when there is a cluster, else a JWKS file. */
static int setup_auth(daemon *d, const char *const *aud, size_t naud)
{
	const sg_settings *s = &d->a.s;
	sg_authenticator list[2];
	size_t n = 0;
	if (d->a.d.enable_client_cert_authenticator)
		SG_TRY(sg_authn_mtls_new(&list[n++], s->trust_domain));
	const char *method = "jwks (keys from jwt-jwks-file)";
	int rc;
	if (d->cluster) {
		rc = sg_cluster_authenticator(d->cluster, &list[n], &method);
	} else if (d->a.d.token_authenticator == SG_TOKEN_AUTH_TOKENREVIEW) {
		rc = sg_error_set(SG_EINVAL, "token-authenticator tokenreview needs a Kubernetes API (kubeconfig)");
	} else if (!s->jwt_issuer || !s->jwt_jwks_file) {
		rc = sg_error_set(SG_EINVAL, "jwt-issuer and jwt-jwks-file are required to authenticate workloads "
					     "without a Kubernetes API");
	} else {
		rc = sg_jwks_file_new(&d->jwks, s->jwt_jwks_file);
		if (rc < 0) {
			for (size_t i = 0; i < n; i++)
				list[i].free(list[i].self);
			return rc;
		}
		sg_authn_jwt_options jo = {
			.jwks_source = d->jwks,
			.issuer = s->jwt_issuer,
			.audiences = aud,
			.n_audiences = naud,
			.trust_domain = s->trust_domain,
		};
		rc = sg_authn_jwt_new(&list[n], &jo);
	}
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			list[i].free(list[i].self);
		return rc;
	}
	n++;
	SG_TRY(sg_authn_chain_new(&d->auth, list, n)); /* owns the list, also on failure */
	d->auth_ready = true;
	sg_log(SG_LOG_INFO, "token authentication", SG_F_STR("method", method), SG_F_END);
	return SG_OK;
}

#define ROOT_FILE_MAX (1u << 20)

static bool same_file(const struct file_id *a, const struct stat *st)
{
	return a->known && a->dev == st->st_dev && a->ino == st->st_ino && a->size == st->st_size &&
	       a->mtime.tv_sec == st->st_mtim.tv_sec && a->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Reads root-ca-file (bounded; it must hold a PEM certificate) and notes
 * which file it was. */
static int read_root_file(const char *path, char **out, size_t *len, struct file_id *id)
{
	FILE *f = fopen(path, "re");
	SG_ENSURE(f, SG_ENOTFOUND, "cannot open root-ca-file %s", path);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int rc = fstat(fileno(f), &st) == 0 ? SG_OK : sg_error_set(SG_EINVAL, "cannot stat root-ca-file %s", path);
	if (rc == SG_OK && (st.st_size <= 0 || (uint64_t)st.st_size >= ROOT_FILE_MAX))
		rc = sg_error_set(SG_EINVAL, "root-ca-file %s is empty or larger than %u bytes", path, ROOT_FILE_MAX);
	if (rc == SG_OK && !(buf = malloc((size_t)st.st_size + 1)))
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK) {
		got = fread(buf, 1, (size_t)st.st_size, f);
		buf[got] = 0;
		if (got != (size_t)st.st_size)
			rc = sg_error_set(SG_EINVAL, "root-ca-file %s changed while it was read", path);
		else if (!strstr(buf, "-----BEGIN CERTIFICATE-----"))
			rc = sg_error_set(SG_EINVAL, "root-ca-file %s holds no PEM certificate", path);
	}
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*id = (struct file_id){.dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .mtime = st.st_mtim, .known = true};
	*out = buf;
	*len = got;
	return SG_OK;
}

/* The root bundle clients are given (and the mesh trusts): root-ca-file
 * when set (checked against the CA), else the CA's own. *own is what the
 * caller frees (NULL when the bundle is the CA's). */
static int load_root(daemon *d, const char **root, size_t *len, char **own)
{
	*own = NULL;
	if (d->a.d.root_ca_file) {
		SG_TRY(read_root_file(d->a.d.root_ca_file, own, len, &d->root_file));
		int rc = sg_ca_check_bundle(d->ca, *own, *len, d->a.d.root_ca_file);
		if (rc < 0) {
			free(*own);
			*own = NULL;
			return rc;
		}
		*root = *own;
		return SG_OK;
	}
	size_t n;
	const char *const *elems;
	const size_t *lens;
	sg_ca_chain(d->ca, &elems, &lens, &n);
	SG_ENSURE(n > 0, SG_EINVAL, "the CA has no chain");
	*root = elems[n - 1];
	*len = lens[n - 1];
	return SG_OK;
}

/* root-ca-file is followed like istio-csr follows it: a changed file
 * replaces the bundle returned to clients, trusted for client
 * certificates and distributed to namespaces. A broken new file keeps the
 * old bundle (and is reported once per change). force (SIGHUP) reads the
 * file whether or not it looks changed, and reports a failure as an error
 * (the operator asked for this reload); the detail stays set for the
 * caller. */
static int reload_root(daemon *d, bool force)
{
	const char *path = d->a.d.root_ca_file;
	struct stat st;
	if (!path)
		return SG_OK;
	if (stat(path, &st) != 0) {
		if (!force)
			return SG_OK; /* a file being replaced; the next tick looks again */
		int rc = sg_error_set(SG_ENOTFOUND, "cannot stat root-ca-file %s", path);
		sg_log_error_last(SG_LOG_ERROR, "root-ca-file cannot be reloaded; keeping the previous roots");
		return rc;
	}
	if (!force && same_file(&d->root_file, &st))
		return SG_OK;
	char *root = NULL;
	size_t len = 0;
	struct file_id id;
	/* A broken file is reported once per change: its identity is noted so
	 * that the next tick does not read it again. */
	int rc = read_root_file(path, &root, &len, &id);
	if (rc == SG_OK)
		rc = sg_ca_check_bundle(d->ca, root, len, path);
	if (rc < 0) {
		free(root);
		d->root_file = (struct file_id){.dev = st.st_dev, .ino = st.st_ino, .size = st.st_size,
						.mtime = st.st_mtim, .known = true};
		sg_log_error_last(force ? SG_LOG_ERROR : SG_LOG_WARN,
		                  force ? "root-ca-file cannot be reloaded; keeping the previous roots"
		                        : "root-ca-file changed but cannot be used; keeping the previous roots");
		return rc;
	}
	if (sg_service_root_is(d->svc, root, len)) {
		free(root);
		d->root_file = id;
		return SG_OK;
	}
	rc = sg_service_set_root(d->svc, root, len);
	if (rc < 0) { /* retried on the next tick */
		free(root);
		sg_log_error_last(force ? SG_LOG_ERROR : SG_LOG_WARN, "cannot use the new root bundle");
		return rc;
	}
	d->root_file = id;
	if (sg_serving_set_client_ca(d->serving, root) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot update the client-certificate roots");
	sg_cluster_set_root(d->cluster, root, len);
	free(root);
	sg_log(SG_LOG_INFO, "root bundle reloaded", SG_F_STR("file", path), SG_F_INT("bytes", (int64_t)len), SG_F_END);
	return SG_OK;
}

/* issuer-cas: "name=config-file,...": each a CA of its own (a key in a
 * token this process can open, as `signetctl init --hsm-module
 * --key-label` adds one), for SignetIssuers that name it. The log settings
 * stay the daemon's. */
static int open_extra_cas(daemon *d)
{
	const char *list = d->a.d.issuer_cas;
	if (!list || !*list)
		return SG_OK;
	char *buf SG_AUTOFREE = strdup(list);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory");
	const char *items[SG_CLUSTER_CAS_MAX];
	size_t n;
	SG_TRY(sg_opt_split_list(buf, items, SG_CLUSTER_CAS_MAX - 1, &n, "issuer-cas"));
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(items[i], '=');
		SG_ENSURE(eq && eq > items[i] && eq[1], SG_EINVAL, "issuer-cas: \"%s\" is not name=config-file", items[i]);
		size_t nlen = (size_t)(eq - items[i]);
		SG_ENSURE(sg_names_dns_label(items[i], nlen, SG_KUBESIGN_CA_NAME_MAX), SG_EINVAL,
		          "issuer-cas: the CA name \"%.*s\" is not a DNS label", (int)nlen, items[i]);
		extra_ca *x = &d->extra[d->nextra];
		memcpy(x->name, items[i], nlen);
		x->name[nlen] = 0;
		SG_ENSURE(strcmp(x->name, "default") != 0, SG_EINVAL,
		          "issuer-cas: \"default\" is this daemon's own CA (its config file)");
		for (size_t j = 0; j < d->nextra; j++)
			SG_ENSURE(strcmp(d->extra[j].name, x->name) != 0, SG_EINVAL, "issuer-cas: CA \"%s\" named twice",
			          x->name);
		char *argv[] = {"--config", (char *)eq + 1};
		char *pos[2];
		sg_opt_result res = {.argv = pos};
		memset(&x->a, 0, sizeof(x->a));
		int rc = sg_opt_parse(extra_ca_opts, N_EXTRA_CA_OPTS, &x->a, 2, argv, &res);
		if (rc < 0) {
			sg_opt_free(extra_ca_opts, N_EXTRA_CA_OPTS, &x->a);
			SG_BAIL(rc, "issuer-cas: CA \"%s\": %s", x->name, sg_error_last()->msg);
		}
		d->nextra++; /* from here its settings are freed at the end */
		x->a.s.log_level = d->a.s.log_level;
		x->a.s.log_format = d->a.s.log_format;
		/* A SoftHSM2 token.object emptied by a kill during a login is
		 * put back before the module reads it (sg_init.h). */
		if (sg_init_softhsm_repair(x->a.s.softhsm2_conf) < 0 || sg_appliance_open(&x->app, &x->a.s) < 0)
			SG_BAIL(SG_EINVAL, "issuer-cas: CA \"%s\": %s", x->name, sg_error_last()->msg);
		d->extra_cas[d->nextra - 1] = (sg_kubesign_ca){.name = x->name, .app = x->app};
		sg_log(SG_LOG_INFO, "issuer CA ready", SG_F_STR("name", x->name),
		       SG_F_STR("ca", sg_ca_subject(sg_appliance_ca(x->app))), SG_F_END);
	}
	return SG_OK;
}

/* The self-issued serving key as istio-csr reads its two flags
 * (pkg/tls/tls.go): RSA takes the size in bits, ECDSA 256 or 384 for
 * P-256 or P-384. Unlike istio-csr's, the size defaults (0) to the
 * algorithm's usual one, so either flag may be given alone. */
static int serving_key(const sg_daemon_settings *s, sg_softkey_type *type, unsigned *bits)
{
	int64_t size = s->serving_certificate_key_size;
	if (s->serving_signature_algorithm == SG_DAEMON_KEY_RSA) {
		size = size ? size : 2048;
		SG_ENSURE(size >= 2048 && size <= 8192, SG_EINVAL,
		          "serving-certificate-key-size: an RSA key has 2048..8192 bits, not %" PRId64, size);
		*type = SG_SOFTKEY_RSA;
		*bits = (unsigned)size;
		return SG_OK;
	}
	size = size ? size : 256;
	SG_ENSURE(size == 256 || size == 384, SG_EINVAL,
	          "serving-certificate-key-size: an ECDSA key is 256 (P-256) or 384 (P-384), not %" PRId64, size);
	*type = size == 384 ? SG_SOFTKEY_EC_P384 : SG_SOFTKEY_EC_P256;
	*bits = 0;
	return SG_OK;
}

/* What the table's bounds cannot say: combinations, and istio-csr flag
 * values signetd has no meaning for. Checked before anything starts, so
 * a Deployment's mistake exits at once with status 2, as a bad flag does. */
static int check_settings(const daemon_args *a)
{
	const sg_daemon_settings *s = &a->d;
	SG_ENSURE(s->issuer_enabled, SG_EINVAL,
	          "--issuer-enabled=false is not supported: istio-csr then waits for a runtime issuance ConfigMap, "
	          "which signetd does not read; signetd signs with its own CA (issuer-name empty) or through the "
	          "issuer that issuer-name, issuer-kind and issuer-group name");
	sg_softkey_type type;
	unsigned bits;
	return serving_key(s, &type, &bits);
}

static int start(daemon *d)
{
	sg_daemon_settings *s = &d->a.d;
	/* A SoftHSM2 token.object emptied by a kill during a login (SoftHSM2
	 * rewrites it in place) is put back before the module reads it: a
	 * restart after kill -9 must find the same CA (sg_init.h). */
	SG_TRY(sg_init_softhsm_repair(d->a.s.softhsm2_conf));
	SG_TRY(sg_appliance_open(&d->app, &d->a.s));
	SG_TRY(open_extra_cas(d));
	d->pool = sg_appliance_pool(d->app);
	d->ca = sg_appliance_ca(d->app);
	const char *root = NULL;
	size_t root_len = 0;
	char *root_own SG_AUTOFREE = NULL;
	SG_TRY(load_root(d, &root, &root_len, &root_own));

	char *aud_buf SG_AUTOFREE = strdup(d->a.s.token_audiences ? d->a.s.token_audiences : "istio-ca");
	SG_ENSURE(aud_buf, SG_EINTERNAL, "out of memory");
	const char *aud[MAX_AUDIENCES];
	size_t naud;
	SG_TRY(sg_opt_split_list(aud_buf, aud, MAX_AUDIENCES, &naud, "token audiences"));
	if (sg_cluster_configured(s)) {
		sg_cluster_options co = {
			.settings = &d->a.s,
			.daemon = s,
			.pool = d->pool,
			.app = d->app,
			.extra_cas = d->extra_cas,
			.n_extra_cas = d->nextra,
			.root_pem = root,
			.root_len = root_len,
			.audiences = aud,
			.n_audiences = naud,
		};
		SG_TRY(sg_cluster_new(&d->cluster, &co));
	}
	SG_TRY(setup_auth(d, aud, naud));
	bool node_authz = d->cluster && s->ca_trusted_node_accounts && *s->ca_trusted_node_accounts;
	sg_policy_options po = {
		.mode = (sg_policy_mode)s->policy,
		.max_ttl = s->max_client_certificate_duration,
		.default_ttl = s->default_certificate_duration,
		.cluster_id = s->cluster_id,
		.trust_domain = d->a.s.trust_domain,
		.trusted_node_accounts = s->ca_trusted_node_accounts,
		.authorize_impersonation = node_authz ? sg_cluster_authorize_impersonation : NULL,
		.authorize_arg = d->cluster,
	};
	SG_TRY(sg_policy_new(&d->policy, &po));
	sg_serving_options so = {
		.pool = d->pool,
		.dns_names = s->serving_certificate_dns_names,
		.duration = s->serving_certificate_duration,
		.cert_file = s->serving_certificate_file,
		.key_file = s->serving_key_file,
		.client_ca_pem = root,
	};
	SG_TRY(serving_key(s, &so.key_type, &so.rsa_bits));
	SG_TRY(sg_serving_new(&d->serving, &so));
	SG_TRY(sg_metrics_new(&d->m.reg));
	sg_service_options vo = {
		.pool = d->pool,
		.ca = d->ca,
		.auth = &d->auth,
		.policy = d->policy,
		.metrics = d->m.reg,
		.root_pem = root_own,
		.root_len = root_len,
		.forward = sg_cluster_forwarder(d->cluster),
	};
	SG_ENSURE(!(s->issuer_name && *s->issuer_name) || vo.forward, SG_EINVAL,
	          "issuer-name (RA mode) needs a Kubernetes API (kubeconfig, KUBECONFIG or in-cluster)");
	SG_TRY(sg_service_new(&d->svc, &vo));
	SG_TRY(setup_metrics(d));
	if (d->cluster)
		SG_TRY(sg_cluster_metrics(d->cluster, d->m.reg));
	SG_TRY(start_http(d));

	sg_grpc_server_options go = {
		.address = s->serving_address,
		.method = SG_GRPC_ISTIO_METHOD,
		.cq_threads = (unsigned)s->grpc_threads,
		.max_message = SG_ISTIO_MAX_MESSAGE,
		.server_timeout_ns = (uint64_t)s->server_timeout * 1000000000u,
		.tls_fetch = tls_fetch,
		.tls_arg = d,
		.request_client_cert = s->enable_client_cert_authenticator,
		.handler = sg_service_on_call,
		.handler_arg = d->svc,
		.max_concurrent_streams = (unsigned)s->max_concurrent_streams,
		.max_connections = (unsigned)s->max_connections,
		.handshake_timeout_ms = (unsigned)s->handshake_timeout * 1000u,
		.max_connection_idle_ms = (unsigned)s->max_connection_idle * 1000u,
		.max_connection_age_ms = (unsigned)s->max_connection_age * 1000u,
		.max_connection_age_grace_ms = (unsigned)s->max_connection_age_grace * 1000u,
		.memory_limit = (size_t)s->grpc_memory_limit << 20,
	};
	/* The pod and service-account caches fill before the first call is
	 * accepted, so node agents and bound tokens are not refused for it. */
	if (d->cluster)
		SG_TRY(sg_cluster_start(d->cluster));
	SG_TRY(sg_grpc_server_start(&d->grpc, &go));
	pthread_mutex_lock(&d->grpc_mu);
	d->grpc_live = d->grpc;
	pthread_mutex_unlock(&d->grpc_mu);
	sg_grpc_server_stats gs;
	sg_grpc_server_stats_get(d->grpc, &gs);
	/* The bound ports (the settings may say 0: any free port). */
	int metrics_port = d->http_metrics ? sg_http_server_port(d->http_metrics) : 0;
	int probe_port = d->http_probe ? sg_http_server_port(d->http_probe) : metrics_port;
	sg_log(SG_LOG_INFO, "signetd serving", SG_F_STR("address", s->serving_address),
	       SG_F_INT("port", sg_grpc_server_port(d->grpc)), SG_F_STR("policy", sg_daemon_policy_names[s->policy]),
	       SG_F_INT("metrics_port", metrics_port), SG_F_INT("probe_port", probe_port),
	       SG_F_INT("max_connections", (int64_t)gs.max_connections), SG_F_STR("http_address", http_address(d)),
	       SG_F_END);
	return SG_OK;
}

static void stop(daemon *d)
{
	/* First, so that systemd knows the drain (up to shutdown-grace) is a
	 * shutdown and not a hang. */
	sg_notify_stopping(d->notify);
	atomic_store(&d->ready, false);
	atomic_store(&d->stopping, true);
	if (d->svc)
		sg_service_stop_accepting(d->svc);
	pthread_mutex_lock(&d->grpc_mu);
	d->grpc_live = NULL;
	pthread_mutex_unlock(&d->grpc_mu);
	atomic_store(&d->stop_stage, "draining gRPC calls");
	if (d->grpc)
		sg_grpc_server_shutdown(d->grpc, (uint64_t)d->a.d.shutdown_grace * 1000000000u);
	atomic_store(&d->stop_stage, "stopping the HTTP servers");
	sg_http_server_stop(d->http_probe);
	sg_http_server_stop(d->http_metrics);
	/* No call is left: the authenticator goes, then the cluster (its
	 * writers stop and the Lease is released while the signer pool still
	 * runs), then the pool drains and the HSM closes. */
	atomic_store(&d->stop_stage, "stopping the authenticator and the cluster writers");
	if (d->auth_ready)
		d->auth.free(d->auth.self);
	sg_jwks_file_free(d->jwks); /* after the authenticator that borrowed it */
	sg_cluster_free(d->cluster);
	atomic_store(&d->stop_stage, "draining the signer pool and closing the HSM");
	sg_appliance_free(d->app);
	for (size_t i = 0; i < d->nextra; i++) {
		sg_appliance_free(d->extra[i].app);
		sg_opt_free(extra_ca_opts, N_EXTRA_CA_OPTS, &d->extra[i].a);
	}
	sg_service_free(d->svc); /* the pool has drained: no call refers to it */
	sg_serving_free(d->serving);
	sg_policy_free(d->policy);
	sg_metrics_free(d->m.reg);
}

/* How long a graceful stop may run beyond shutdown-grace: gRPC's drain
 * adds up to ~3 s of flushing and lingering, the cluster writers release
 * the Lease over the network, the pool finishes what is queued (each
 * request bounded by its deadline). With the packaged unit's defaults
 * (shutdown-grace 15 s, TimeoutStopSec=30s) the guard fires at 25 s, before
 * systemd's SIGKILL would. */
#define STOP_OVERRUN_NS (10ull * 1000000000ull)

typedef struct stop_guard {
	daemon *d;
	pthread_mutex_t mu;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	bool done;           /* stop() returned */
	uint64_t limit_ns;   /* CLOCK_MONOTONIC */
} stop_guard;

/* Waits for stop() to return; past the limit, logs the stage that did not
 * return and ends the process. _exit, not exit: a thread may still be
 * inside the PKCS#11 module, and atexit handlers or library destructors
 * (SoftHSM2's among them) must not run under it. */
static void *stop_guard_main(void *arg)
{
	stop_guard *g = arg;
	pthread_mutex_lock(&g->mu);
	while (!g->done && sg_now_ns() < g->limit_ns) {
		struct timespec ts = {(time_t)(g->limit_ns / 1000000000u), (long)(g->limit_ns % 1000000000u)};
		pthread_cond_timedwait(&g->cond, &g->mu, &ts);
	}
	bool done = g->done;
	pthread_mutex_unlock(&g->mu);
	if (done)
		return NULL;
	const char *stage = atomic_load(&g->d->stop_stage);
	sg_log(SG_LOG_ERROR, "graceful stop did not finish in time; exiting without it",
	       SG_F_STR("stage", stage ? stage : "starting"), SG_F_INT("grace_s", g->d->a.d.shutdown_grace),
	       SG_F_INT("overrun_s", (int64_t)(STOP_OVERRUN_NS / 1000000000u)),
	       SG_F_STR("likely", "a PKCS#11 call that does not return"), SG_F_END);
	_exit(EXIT_FAILURE);
}

/* stop(), bounded by shutdown-grace + STOP_OVERRUN_NS (see the top of the
 * file). Without a guard thread (pthread_create failed) the stop runs
 * unbounded, as it would have anyway. */
static void stop_bounded(daemon *d)
{
	uint64_t grace_ns = (uint64_t)d->a.d.shutdown_grace * 1000000000u;
	stop_guard g = {.d = d, .limit_ns = sg_now_ns() + grace_ns + STOP_OVERRUN_NS};
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t t;
	bool guarded = pthread_create(&t, NULL, stop_guard_main, &g) == 0;
	if (!guarded)
		sg_log(SG_LOG_WARN, "cannot start the stop guard; the stop is not bounded", SG_F_END);
	stop(d);
	if (guarded) {
		pthread_mutex_lock(&g.mu);
		g.done = true;
		pthread_cond_signal(&g.cond);
		pthread_mutex_unlock(&g.mu);
		pthread_join(t, NULL);
	}
	pthread_cond_destroy(&g.cond);
	pthread_mutex_destroy(&g.mu);
}

/* A listener that refused a connection this recently (at max-connections,
 * or out of descriptors) is not taking new clients: the replica says so,
 * so that a Service sends new connections elsewhere. */
#define REFUSED_UNREADY_NS 2000000000ull

/* ---- systemd ----------------------------------------------------------------- */

/* "ready; issued 3, refused/failed 1" or "not ready: HSM down; ...". The
 * counts are the service's own metric counters (sg_service_counts_get),
 * so that STATUS and /metrics never disagree. */
static void status_text(daemon *d, char *buf, size_t size, const char *why_not)
{
	sg_service_counts c = {0};
	if (d->svc)
		sg_service_counts_get(d->svc, &c);
	snprintf(buf, size, "%s%s; issued %" PRIu64 ", refused/failed %" PRIu64, why_not ? "not ready: " : "ready",
	         why_not ? why_not : "", c.issued, c.refused);
}

/* READY=1 the first time the daemon is ready (after /readyz says so: the
 * flag it reads is set first), STATUS= whenever the line changes. Before
 * the first READY=1 systemd shows the unit as "activating" with the
 * reason it is not ready yet. */
static void notify_state(daemon *d, const char *why_not)
{
	if (!sg_notify_enabled(d->notify))
		return;
	status_text(d, d->status, sizeof(d->status), why_not);
	if (!why_not && !d->notified_ready) {
		sg_notify_ready(d->notify, d->status);
		d->notified_ready = true;
		return;
	}
	sg_notify_status(d->notify, d->status);
}

/* How long the signer pool has completed nothing while it had work
 * outstanding (0 while it completes work or is idle); main thread only. */
static uint64_t pool_stalled_ns(daemon *d, uint64_t now_ns)
{
	sg_pool_stats st;
	sg_pool_stats_get(d->pool, &st);
	if (st.completed != d->pool_completed || st.submitted == st.completed) {
		d->pool_completed = st.completed;
		d->pool_progress_ns = now_ns;
		d->pool_wedged_logged = false;
	}
	return now_ns - d->pool_progress_ns;
}

/* Not ready while the signer pool has completed nothing for longer than
 * server-timeout (+ 1 s of housekeeping's pace) with work outstanding: a
 * worker that is not stuck takes queued requests and completes them, those
 * past their deadline at once, so by then every signer thread is inside a
 * PKCS#11 call that does not return. New calls would only queue and time
 * out; a Service sends them to another replica instead. Ready again with
 * the first completion. */
static bool pool_stalled(daemon *d, uint64_t now_ns)
{
	return pool_stalled_ns(d, now_ns) > (uint64_t)d->a.d.server_timeout * 1000000000u + 1000000000u;
}

/* A signer pool with work outstanding that completed nothing for this long
 * is taken as wedged (a C_Sign that never returns): far beyond any
 * signature, and beyond server-timeout's default, after which queued work
 * completes with a timeout. */
#define POOL_WEDGED_NS (60ull * 1000000000ull)

/* What a WATCHDOG=1 ping vouches for: the main thread runs (signals are
 * taken, housekeeping renews the serving certificate and computes
 * readiness) and the signer pool makes progress. A pool whose threads are
 * all stuck inside the PKCS#11 module cannot be cured from inside the
 * process, so the ping is withheld and systemd restarts signetd
 * (WatchdogSec=, Restart=). An HSM that is down is not withheld for: the
 * HSM layer reconnects by itself, /readyz already sends clients elsewhere,
 * and a restart cannot make an unreachable HSM reachable; it would only
 * turn an outage into a restart loop that also loses the warm sessions. */
static bool pool_progressing(daemon *d, uint64_t now_ns)
{
	if (pool_stalled_ns(d, now_ns) < POOL_WEDGED_NS)
		return true;
	sg_pool_stats st;
	sg_pool_stats_get(d->pool, &st);
	if (!d->pool_wedged_logged)
		sg_log(SG_LOG_ERROR, "signer pool makes no progress; withholding the systemd watchdog ping",
		       SG_F_INT("outstanding", (int64_t)(st.submitted - st.completed)),
		       SG_F_INT("seconds", (int64_t)((now_ns - d->pool_progress_ns) / 1000000000u)), SG_F_END);
	d->pool_wedged_logged = true;
	return false;
}

static void watchdog_ping(daemon *d)
{
	if (sg_notify_watchdog_usec(d->notify) && pool_progressing(d, sg_now_ns()))
		sg_notify_watchdog(d->notify);
}

/* How long the main loop waits for a signal: a second (housekeeping's
 * pace), or half the watchdog interval when that is shorter, so that a
 * ping is never late (sd_watchdog_enabled(3) asks for half). */
static struct timespec loop_wait(const daemon *d)
{
	uint64_t ns = 1000000000ull, wd = sg_notify_watchdog_usec(d->notify);
	if (wd && wd / 2 * 1000u < ns)
		ns = wd / 2 * 1000u;
	if (ns < 1000000u) /* a watchdog under 2 ms cannot be served anyway */
		ns = 1000000u;
	return (struct timespec){.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
}

/* Keeps hsm_down_since_ns for /healthz and says once when the outage
 * passes hsm-down-limit (the probe will fail from then on). */
static void track_hsm_down(daemon *d, bool down)
{
	uint64_t now = sg_now_ns(), since = atomic_load(&d->hsm_down_since_ns);
	if (!down) {
		if (since)
			atomic_store(&d->hsm_down_since_ns, 0);
		d->hsm_down_reported = false;
		return;
	}
	if (!since) {
		atomic_store(&d->hsm_down_since_ns, now);
		return;
	}
	uint64_t limit = (uint64_t)d->a.d.hsm_down_limit * 1000000000u;
	if (limit && now - since > limit && !d->hsm_down_reported) {
		sg_log(SG_LOG_ERROR, "HSM down beyond hsm-down-limit; /healthz fails so that signetd is restarted",
		       SG_F_INT("seconds", (int64_t)((now - since) / 1000000000u)),
		       SG_F_STR("hsm", hsm_stats(d).last_fault), SG_F_END);
		d->hsm_down_reported = true;
	}
}

/* Ready when the HSM can sign, the CA is loaded (it is, once started), the
 * serving certificate is valid and the gRPC listener takes connections. */
static void housekeeping(daemon *d)
{
	int64_t now = sg_wall_seconds();
	(void)reload_root(d, false); /* logged inside; retried on the next tick */
	sg_cluster_tick(d->cluster);
	if (sg_serving_tick(d->serving, now) < 0)
		sg_log_error_last(SG_LOG_WARN, "serving certificate renewal failed; will retry");
	sg_grpc_server_stats gs;
	sg_grpc_server_stats_get(d->grpc, &gs);
	sg_series_add(d->m.conn_refused_limit, gs.refused_limit - d->m.seen_refused_limit);
	sg_series_add(d->m.conn_refused_fds, gs.refused_fds - d->m.seen_refused_fds);
	if (gs.refused_fds > d->m.seen_refused_fds)
		sg_log(SG_LOG_WARN, "gRPC connections refused: no file descriptor left",
		       SG_F_INT("refused", (int64_t)(gs.refused_fds - d->m.seen_refused_fds)), SG_F_END);
	if (gs.refused_limit > d->m.seen_refused_limit)
		sg_log(SG_LOG_WARN, "gRPC connections refused at max-connections",
		       SG_F_INT("refused", (int64_t)(gs.refused_limit - d->m.seen_refused_limit)),
		       SG_F_INT("max_connections", (int64_t)gs.max_connections), SG_F_END);
	d->m.seen_refused_limit = gs.refused_limit;
	d->m.seen_refused_fds = gs.refused_fds;
	bool accepting = !gs.last_refused_ns || sg_now_ns() - gs.last_refused_ns >= REFUSED_UNREADY_NS;
	bool hsm_down = hsm_stats(d).state == SG_HSM_DOWN;
	track_hsm_down(d, hsm_down);
	const char *why_not = hsm_down                                ? "HSM down"
			      : pool_stalled(d, sg_now_ns())            ? "signer pool makes no progress"
			      : sg_serving_not_after(d->serving) <= now ? "serving certificate expired"
			      : atomic_load(&d->stopping)               ? "stopping"
			      : !accepting                              ? "not accepting connections"
									: NULL;
	bool ok = !why_not;
	bool was = atomic_exchange(&d->ready, ok);
	if (was != ok)
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, ok ? "ready" : "not ready", SG_F_STR("reason", ok ? "" : why_not),
		       SG_F_STR("hsm", hsm_stats(d).last_fault), SG_F_INT("accepting", accepting), SG_F_END);
	notify_state(d, why_not); /* after the flag /readyz reads */
}

/* Appends ",what" (or "what") to a list of setting names. */
static void note(char *list, size_t size, const char *what)
{
	size_t len = strlen(list);
	snprintf(list + len, size - len, "%s%s", len ? "," : "", what);
}

/* SIGHUP (the unit's ExecReload=kill -HUP $MAINPID): re-read every file
 * signetd serves from, now, whether or not it looks changed. Each is
 * independent: one that cannot be used keeps what was loaded before and
 * is logged as an error with the reason; the others still reload. One
 * "reloaded" record names what was re-read and what failed. Readiness is
 * recomputed before READY=1 tells systemd the reload is over. Before the
 * first READY=1 systemd expects none of this, so nothing is sent. */
static void reload(daemon *d)
{
	bool tell = d->notified_ready;
	if (tell)
		sg_notify_reloading(d->notify);
	char done[128] = "", failed[128] = "";
	bool files = false;
	if (sg_serving_reload(d->serving, &files) < 0) {
		sg_log_error_last(SG_LOG_ERROR, "serving certificate files cannot be reloaded; keeping the previous ones");
		note(failed, sizeof(failed), "serving-certificate-file");
	} else if (files) {
		note(done, sizeof(done), "serving-certificate-file");
	}
	if (d->a.d.root_ca_file) {
		if (reload_root(d, true) < 0)
			note(failed, sizeof(failed), "root-ca-file");
		else
			note(done, sizeof(done), "root-ca-file");
	}
	/* The key source re-reads the file when its inode, size or mtime
	 * changed (sg_jwt.h), now rather than at its once-a-second check. */
	if (d->jwks) {
		if (sg_jwks_file_refresh(d->jwks) < 0) {
			sg_log_error_last(SG_LOG_ERROR, "jwt-jwks-file cannot be reloaded; keeping the previous keys");
			note(failed, sizeof(failed), "jwt-jwks-file");
		} else {
			note(done, sizeof(done), "jwt-jwks-file");
		}
	}
	sg_log(*failed ? SG_LOG_WARN : SG_LOG_INFO, "reloaded", SG_F_STR("reread", *done ? done : "nothing"),
	       SG_F_STR("failed", failed), SG_F_END);
	housekeeping(d);
	if (tell)
		sg_notify_ready(d->notify, d->status);
}

/* Connections are descriptors: take the whole hard limit the process is
 * allowed (systemd's default soft limit is 1024, its hard limit far
 * higher), before max-connections is derived from it. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		sg_log(SG_LOG_WARN, "cannot raise the open-files limit", SG_F_STR("error", strerror(errno)), SG_F_END);
	else
		sg_log(SG_LOG_DEBUG, "open-files limit raised", SG_F_INT("from", (int64_t)was),
		       SG_F_INT("to", (int64_t)rl.rlim_cur), SG_F_END);
}

/* Signing and TLS are CPU-bound, and the request path hands work between
 * threads (transport -> signer -> transport). Under SCHED_OTHER every such
 * hand-off lets the woken thread preempt the waker; SCHED_BATCH threads do
 * not preempt on wakeup, so a busy signetd switches far less (measured in
 * perf/README.md). Set on the main thread before any other thread exists,
 * so every thread, gRPC's own included, inherits it. No privilege needed. */
static void set_sched_batch(bool on)
{
	if (!on)
		return;
	struct sched_param sp = {.sched_priority = 0};
	if (sched_setscheduler(0, SCHED_BATCH, &sp) != 0)
		sg_log(SG_LOG_WARN, "cannot use SCHED_BATCH; staying on the default policy",
		       SG_F_STR("error", strerror(errno)), SG_F_END);
}

static void usage(void)
{
	printf("usage: signetd {--config FILE | --init-dir DIR} [options]\n\n"
	       "Serves istio.v1.auth.IstioCertificateService/CreateCertificate with CA keys in a PKCS#11 token.\n"
	       "Every option may also be a line \"name = value\" in the config file; options override it.\n\n");
	sg_opt_usage(opts, NOPTS, stdout);
}

/*
 * --init-dir: the settings again, with STATE/ca/signet.conf (made now on
 * a first start) as the first config file, so --config files and flags
 * still override it. Runs before any thread exists, as sg_init needs (the
 * SoftHSM2 module sets SOFTHSM2_CONF), and with the log settings of the
 * first pass, so that its records have the format asked for.
 */
static int use_init_dir(daemon_args *a, int argc, char **argv, sg_opt_result *res)
{
	sg_settings_apply_log(&a->s);
	char conf[PATH_MAX];
	SG_TRY(sg_init_default_dir(a->init_dir, conf, sizeof(conf)));
	char *flag SG_AUTOFREE = NULL;
	size_t len = strlen("--config=") + strlen(conf) + 1;
	flag = malloc(len);
	char **args SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*args));
	SG_ENSURE(flag && args, SG_EINTERNAL, "out of memory");
	snprintf(flag, len, "--config=%s", conf);
	args[0] = flag;
	for (int i = 1; i < argc; i++)
		args[i] = argv[i];
	sg_opt_free(opts, NOPTS, a);
	char **pos = res->argv;
	*res = (sg_opt_result){.argv = pos};
	return sg_opt_parse(opts, NOPTS, a, argc, args, res);
}

int main(int argc, char **argv)
{
	/* Before any secret exists: no core dump, no same-user ptrace or
	 * /proc/PID/mem of a process that holds the HSM PIN. */
	if (sg_secret_protect_process() < 0) {
		fprintf(stderr, "signetd: %s\n", sg_error_last()->msg);
		return 1;
	}
	static daemon d;
	pthread_mutex_init(&d.grpc_mu, NULL);
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(opts, NOPTS, &d.a, argc - 1, argv + 1, &res);
	if (rc == SG_OK && !res.help && d.a.init_dir && use_init_dir(&d.a, argc, argv, &res) < 0) {
		/* Not a usage error: the folder or the token failed. */
		fprintf(stderr, "signetd: %s\n", sg_error_last()->msg);
		sg_opt_free(opts, NOPTS, &d.a);
		return 1;
	}
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(opts, NOPTS, &d.a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK)
		rc = check_settings(&d.a);
	if (rc == SG_OK)
		rc = sg_settings_check(&d.a.s);
	if (rc < 0) {
		fprintf(stderr, "signetd: %s\n", sg_error_last()->msg);
		sg_opt_free(opts, NOPTS, &d.a);
		return 2;
	}
	/* Signals are taken by the main thread only: block them before any
	 * thread exists so every thread inherits the mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* Before the first record, so that every record (these start-up ones
	 * included) has the level and format asked for. */
	sg_settings_apply_log(&d.a.s);
	set_sched_batch(d.a.d.sched_batch);
	raise_fd_limit();

	rc = sg_notify_new(&d.notify);
	if (rc == SG_OK)
		rc = start(&d);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_log(SG_LOG_ERROR, "cannot start", SG_F_STR("error", e.msg), SG_F_END);
		fprintf(stderr, "signetd: %s\n", e.msg);
		char why[sizeof("cannot start: ") + SG_ERROR_MSG_MAX]; /* sg_notify cuts it to a STATUS line */
		snprintf(why, sizeof(why), "cannot start: %s", e.msg);
		sg_notify_status(d.notify, why);
		stop(&d);
		sg_notify_free(d.notify);
		sg_opt_free(opts, NOPTS, &d.a);
		return 1;
	}
	housekeeping(&d);
	d.pool_progress_ns = sg_now_ns();
	watchdog_ping(&d);
	uint64_t last_tick = sg_now_ns();
	for (;;) {
		struct timespec wait = loop_wait(&d);
		int sig = sigtimedwait(&set, NULL, &wait);
		if (sig == SIGTERM || sig == SIGINT) {
			sg_log(SG_LOG_INFO, "shutting down", SG_F_STR("signal", sig == SIGTERM ? "TERM" : "INT"),
			       SG_F_INT("grace_s", d.a.d.shutdown_grace), SG_F_END);
			break;
		}
		if (sig == SIGHUP) {
			reload(&d);
			last_tick = sg_now_ns();
		} else if (sg_now_ns() - last_tick >= 1000000000ull - 1000000ull) {
			/* Once a second, whatever the watchdog's pace (1 ms of
			 * slack for the wait's rounding). */
			housekeeping(&d);
			last_tick = sg_now_ns();
		}
		watchdog_ping(&d);
	}
	stop_bounded(&d);
	sg_log(SG_LOG_INFO, "stopped", SG_F_END);
	sg_notify_free(d.notify);
	sg_opt_free(opts, NOPTS, &d.a);
	return 0;
}
