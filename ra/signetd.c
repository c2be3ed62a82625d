/*
 * signetd: the signet daemon. Serves istio.v1.auth.IstioCertificateService
 * over gRPC (TLS, HTTP/2) to istio-agent, ztunnel and node agents, as a
 * drop-in for istio-csr and istiod's CA, with metrics and probes on HTTP.
 *
 * A request's life (no thread ever waits for the HSM on its behalf):
 *
 *   transport thread:  decode (sg_istio) -> authenticate (sg_authn) ->
 *                      policy (sg_policy) -> sg_pool_submit, or an error
 *   signer thread:     parse, verify, profile, lint, C_Sign (sg_issuer) ->
 *                      on_issued: encode the chain, finish the call, audit
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
#include "sg_istio.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_policy.h"
#include "sg_secret.h"
#include "sg_serving.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>

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

#define MAX_CHAIN 12
#define MAX_AUDIENCES 8

const char *const sg_daemon_policy_names[] = {"istio-csr", "istiod", NULL};
const char *const sg_daemon_token_authenticator_names[] = {"auto", "tokenreview", "jwks", NULL};
const char *const sg_daemon_key_algorithm_names[] = {"RSA", "ECDSA", NULL};

typedef struct daemon_args {
	sg_settings s;
	sg_daemon_settings d;
} daemon_args;

#define SG_DAEMON_T_ daemon_args
#define SG_DAEMON_M_ d
static const sg_opt opts[] = {SG_SETTINGS_ROWS(daemon_args, s, "info"), SG_DAEMON_ROWS};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* istiod's metric names, then ours. */
typedef struct metrics {
	sg_metrics *reg;
	sg_series *csr, *authn_fail, *parse_err, *success;
	sg_series *sign_err[6]; /* CA_NOT_READY, CSR_ERROR, TTL_ERROR, CERT_GEN_ERROR, lint, UNKNOWN */
	sg_series *latency_ok, *latency_err;
	sg_series *requests[17]; /* signet_grpc_requests_total by status code */
	sg_series *conn_refused_limit, *conn_refused_fds; /* signet_grpc_connections_refused_total */
	uint64_t seen_refused_limit, seen_refused_fds;    /* main thread only */
	sg_series *gone;          /* signet_requests_abandoned_total */
	atomic_uint_fast64_t finish_warn_ns; /* rate limit of "cannot finish a call" */
} metrics;

enum { ERR_CA_NOT_READY, ERR_CSR, ERR_TTL, ERR_CERT_GEN, ERR_LINT, ERR_UNKNOWN, ERR_COUNT };
/* istiod's labels, and "lint": a certificate our own checks refused to
 * sign (a bug in policy or the encoder, reported on its own). */
static const char *const sign_err_names[ERR_COUNT] = {"CA_NOT_READY", "CSR_ERROR", "TTL_ERROR", "CERT_GEN_ERROR",
						       "lint", "UNKNOWN"};

/* The elements a response carries after the leaf: the CA's chain, with the
 * root bundle replaced by root-ca-file when that is set. */
typedef struct chain_snap {
	atomic_uint refs;
	const char *elems[MAX_CHAIN];
	size_t lens[MAX_CHAIN];
	size_t n;
	char *root; /* the root-ca-file bundle (owned), or NULL */
	size_t root_len;
} chain_snap;

/* What identifies a file's contents cheaply (a change means "re-read"). */
struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	bool known;
};

typedef struct daemon {
	daemon_args a;
	sg_appliance *app;
	sg_pool *pool;
	const sg_ca *ca;
	sg_authenticator auth;
	bool auth_ready;
	sg_cluster *cluster; /* NULL when no Kubernetes API is configured */
	sg_policy *policy;
	sg_serving *serving;
	sg_grpc_server *grpc;
	/* grpc as the HTTP thread may read it: set once serving, cleared
	 * before the server is shut down (and freed). */
	pthread_mutex_t grpc_mu;
	sg_grpc_server *grpc_live;
	sg_http_server *http_metrics, *http_probe;
	metrics m;
	/* Chain elements after the leaf, swapped whole when root-ca-file
	 * changes; signer threads hold a reference while they encode. */
	pthread_mutex_t chain_lock;
	chain_snap *chain;
	struct file_id root_file;
	atomic_bool ready, stopping;
} daemon;

/* ---- errors ------------------------------------------------------------- */

/* The status a client sees comes from sg_grpc_status_of (the one table);
 * this one only says which of istiod's csr_sign_err_count labels a signing
 * failure counts under. */
static const struct {
	int code;
	int sign_err;
} sign_err_map[] = {
	{SG_EINVAL, ERR_CSR},          {SG_EAUTH, ERR_CSR},          {SG_EDENIED, ERR_CSR},
	{SG_EBUSY, ERR_CA_NOT_READY},  {SG_EHSM, ERR_CA_NOT_READY},  {SG_ETIMEOUT, ERR_CA_NOT_READY},
	{SG_EINTERNAL, ERR_CERT_GEN},  {SG_ELINT, ERR_LINT},
};

static int sign_err_of(int code)
{
	for (size_t i = 0; i < sizeof(sign_err_map) / sizeof(sign_err_map[0]); i++)
		if (sign_err_map[i].code == code)
			return sign_err_map[i].sign_err;
	return ERR_UNKNOWN;
}

/* ---- one call ------------------------------------------------------------ */

typedef struct rpc {
	daemon *d;
	sg_grpc_call *call;
	uint64_t t0;
	uint64_t deadline_ns;
	sg_istio_arena *arena;
	sg_istio_request req;
	char cluster_id[256];
	bool has_cluster_id;
	char peer[128];
	sg_policy_decision decision;
	char caller_method[16];
	sg_issue_request issue;
} rpc;

static void rpc_free(rpc *r)
{
	sg_istio_arena_free(r->arena);
	free(r);
}

/* Answers the call; true when the answer was handed to gRPC, false when
 * the client had gone (cancelled, reset, deadline or shutdown): counted,
 * not logged, since a client can make that happen at will. A real failure
 * to answer is logged, at most once a second. Does not free r. */
static bool answer_call(rpc *r, int status, const char *msg, const uint8_t *resp, size_t len)
{
	daemon *d = r->d;
	double secs = (double)(sg_now_ns() - r->t0) / 1e9;
	sg_series_observe(status == SG_GRPC_OK ? d->m.latency_ok : d->m.latency_err, secs);
	if (status >= 0 && status < 17 && d->m.requests[status])
		sg_series_inc(d->m.requests[status]);
	int rc = sg_grpc_call_finish(r->call, status, msg, resp, len);
	if (rc == SG_ETIMEOUT) {
		sg_series_inc(d->m.gone);
	} else if (rc < 0) {
		uint64_t now = sg_now_ns(), last = atomic_load(&d->m.finish_warn_ns);
		if (now - last >= 1000000000u && atomic_compare_exchange_strong(&d->m.finish_warn_ns, &last, now))
			sg_log_error_last(SG_LOG_WARN, "cannot finish a call");
	}
	return rc == SG_OK;
}

static void finish(rpc *r, int status, const char *msg, const uint8_t *resp, size_t len)
{
	answer_call(r, status, msg, resp, len);
	rpc_free(r);
}

/* Ends a call with the error recorded in e; the message names the problem
 * (never a token or a PIN: no error detail in signet carries them). A call
 * whose client has gone is ended without a log line. */
static void fail(rpc *r, int code, const sg_error *e, const char *prefix)
{
	char msg[SG_ERROR_MSG_MAX + 64];
	snprintf(msg, sizeof(msg), "%s: %s", prefix, e->msg);
	int status = sg_grpc_status_of(code);
	if (!sg_grpc_call_ended(r->call))
		sg_log(SG_LOG_INFO, "request refused", SG_F_STR("peer", r->peer), SG_F_STR("reason", e->msg),
		       SG_F_STR("error", sg_error_name(code)), SG_F_INT("grpc_status", status), SG_F_END);
	finish(r, status, msg, NULL, 0);
}

/* Nobody will receive this call's answer: stop before spending on it. */
static bool abandoned(rpc *r)
{
	if (!sg_grpc_call_ended(r->call))
		return false;
	finish(r, SG_GRPC_CANCELLED, "the call ended before it was answered", NULL, 0);
	return true;
}

static bool rpc_cancelled(void *arg)
{
	return sg_grpc_call_ended(((rpc *)arg)->call);
}

/* ---- the chain returned after the leaf ------------------------------------- */

static chain_snap *chain_get(daemon *d)
{
	pthread_mutex_lock(&d->chain_lock);
	chain_snap *c = d->chain;
	atomic_fetch_add(&c->refs, 1);
	pthread_mutex_unlock(&d->chain_lock);
	return c;
}

static void chain_put(chain_snap *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
		free(c->root);
		free(c);
	}
}

/* The root bundle clients are given (and the mesh trusts). */
static const char *chain_root(const chain_snap *c, size_t *len)
{
	*len = c->lens[c->n - 1];
	return c->elems[c->n - 1];
}

static void on_issued(int rc, sg_issue_result *res, const sg_error *err, void *arg)
{
	rpc *r = arg;
	daemon *d = r->d;
	if (rc < 0) {
		sg_series_inc(d->m.sign_err[sign_err_of(rc)]);
		if (rc == SG_EINVAL || rc == SG_EAUTH)
			sg_series_inc(d->m.parse_err);
		fail(r, rc, err, rc == SG_EDENIED ? "request authenticate failure" : "CSR signing error");
		return;
	}
	/* Istio's response: leaf, each intermediate, the root bundle last. */
	const char *elems[MAX_CHAIN + 1];
	size_t lens[MAX_CHAIN + 1], n = 0;
	elems[n] = res->leaf_pem;
	lens[n++] = res->leaf_pem_len;
	chain_snap *cs = chain_get(d);
	for (size_t i = 0; i < cs->n; i++) {
		elems[n] = cs->elems[i];
		lens[n++] = cs->lens[i];
	}
	uint8_t *out = NULL;
	size_t out_len = 0;
	int erc = sg_istio_response_encode(elems, lens, n, &out, &out_len);
	chain_put(cs);
	if (erc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[ERR_CERT_GEN]);
		fail(r, SG_EINTERNAL, &e, "cannot encode the response");
		return;
	}
	sg_series_inc(d->m.success);
	uint64_t us = (sg_now_ns() - r->t0) / 1000;
	/* The audit line, written before the answer leaves: what was issued to
	 * whom, never how they proved it. Every signature has one; a client
	 * that went away after the signature shows as abandoned=1. */
	sg_log(SG_LOG_INFO, "certificate issued", SG_F_STR("serial", res->serial_hex),
	       SG_F_STR("identity", res->identity), SG_F_STR("san", res->identity), SG_F_INT("not_after", res->not_after),
	       SG_F_STR("key", sg_key_type_name(res->ca_key)), SG_F_STR("auth", r->caller_method),
	       SG_F_INT("impersonated", r->decision.impersonated), SG_F_STR("peer", r->peer),
	       SG_F_INT("latency_us", us), SG_F_INT("abandoned", sg_grpc_call_ended(r->call)), SG_F_END);
	finish(r, SG_GRPC_OK, NULL, out, out_len);
	free(out);
}

static void on_authenticated(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	rpc *r = arg;
	daemon *d = r->d;
	if (rc < 0) {
		sg_series_inc(d->m.authn_fail);
		fail(r, rc, err, "request authenticate failure");
		return;
	}
	if (abandoned(r))
		return;
	snprintf(r->caller_method, sizeof(r->caller_method), "%s", caller->method ? caller->method : "");
	sg_policy_input in = {
		.caller = caller,
		.cluster_id = r->has_cluster_id ? r->cluster_id : NULL,
		.requested_ttl = r->req.validity_seconds,
		.impersonated_identity = r->req.impersonated_identity,
	};
	int prc = sg_policy_decide(d->policy, &in, &r->decision);
	if (prc < 0) {
		sg_error e;
		sg_error_save(&e);
		if (prc == SG_EINVAL)
			sg_series_inc(d->m.sign_err[ERR_TTL]);
		else
			sg_series_inc(d->m.authn_fail);
		fail(r, prc, &e, prc == SG_EINVAL ? "CSR signing error" : "request authenticate failure");
		return;
	}
	r->issue = (sg_issue_request){
		.csr = (const uint8_t *)r->req.csr,
		.csr_len = r->req.csr_len,
		.profile = SG_PROFILE_ISTIO,
		.identity = r->decision.identity,
		.strict_csr = r->decision.strict_csr,
		.ttl = r->decision.ttl,
		.path_len = -1,
		.deadline_ns = r->deadline_ns,
		.cancelled = rpc_cancelled,
		.cancel_arg = r,
	};
	int src = sg_pool_submit(d->pool, &r->issue, on_issued, r);
	if (src < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[ERR_CA_NOT_READY]);
		fail(r, src, &e, "CSR signing error");
	}
}

/* "Bearer <token>": the scheme is case-insensitive (RFC 6750 §2.1). */
static const char *bearer_of(const char *h, size_t *len)
{
	if (!h || strlen(h) < 7 || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	const char *t = h + 7;
	while (*t == ' ')
		t++;
	*len = strlen(t);
	return *len ? t : NULL;
}

static void on_call(sg_grpc_call *call, const sg_grpc_request *gr, void *arg)
{
	daemon *d = arg;
	sg_series_inc(d->m.csr);
	rpc *r = calloc(1, sizeof(*r));
	if (!r) {
		sg_grpc_call_finish(call, SG_GRPC_UNAVAILABLE, "out of memory", NULL, 0);
		return;
	}
	r->d = d;
	r->call = call;
	r->t0 = gr->received_ns ? gr->received_ns : sg_now_ns();
	r->deadline_ns = gr->deadline_ns;
	snprintf(r->peer, sizeof(r->peer), "%s", gr->peer ? gr->peer : "");
	if (gr->cluster_id) {
		snprintf(r->cluster_id, sizeof(r->cluster_id), "%s", gr->cluster_id);
		r->has_cluster_id = true;
	}
	if (atomic_load(&d->stopping)) {
		sg_error e = {.code = SG_EBUSY};
		snprintf(e.msg, sizeof(e.msg), "signet is shutting down");
		fail(r, SG_EBUSY, &e, "unavailable");
		return;
	}
	int rc = sg_istio_arena_new(&r->arena);
	if (rc == SG_OK)
		rc = sg_istio_request_decode(r->arena, gr->body, gr->len, &r->req);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.parse_err);
		fail(r, rc == SG_EINTERNAL ? SG_EBUSY : SG_EINVAL, &e, "malformed request");
		return;
	}
	if (abandoned(r))
		return;
	sg_authn_request ar = {.peer_identity = gr->peer_identity, .now = sg_wall_seconds()};
	ar.bearer = bearer_of(gr->authorization, &ar.bearer_len);
	rc = d->auth.start(d->auth.self, &ar, on_authenticated, r);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.authn_fail);
		fail(r, rc, &e, "request authenticate failure");
	}
}

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

static double hsm_signatures(void *arg)
{
	return (double)hsm_stats(arg).signatures;
}

static double hsm_faults(void *arg)
{
	return (double)hsm_stats(arg).faults;
}

static double hsm_recoveries(void *arg)
{
	return (double)hsm_stats(arg).recoveries;
}

static double hsm_sessions(void *arg)
{
	return (double)hsm_stats(arg).sessions;
}

static sg_pool_stats pool_stats(daemon *d)
{
	sg_pool_stats st;
	sg_pool_stats_get(d->pool, &st);
	return st;
}

static double queue_depth(void *arg)
{
	return (double)pool_stats(arg).queued;
}

static double queue_rejected(void *arg)
{
	return (double)pool_stats(arg).rejected;
}

static double serving_expiry(void *arg)
{
	return (double)sg_serving_not_after(((daemon *)arg)->serving);
}

static double ready_gauge(void *arg)
{
	return atomic_load(&((daemon *)arg)->ready);
}

/* Zeros before the gRPC server is up and once it is shutting down. */
static sg_grpc_server_stats grpc_stats(daemon *d)
{
	sg_grpc_server_stats st = {0};
	pthread_mutex_lock(&d->grpc_mu);
	if (d->grpc_live)
		sg_grpc_server_stats_get(d->grpc_live, &st);
	pthread_mutex_unlock(&d->grpc_mu);
	return st;
}

static double grpc_connections(void *arg)
{
	return (double)grpc_stats(arg).connections;
}

static double grpc_max_connections(void *arg)
{
	return (double)grpc_stats(arg).max_connections;
}

static double grpc_cancelled(void *arg)
{
	return (double)grpc_stats(arg).calls_cancelled;
}

static double grpc_expired(void *arg)
{
	return (double)grpc_stats(arg).streams_expired;
}

static double grpc_rapid_reset(void *arg)
{
	return (double)grpc_stats(arg).rapid_reset_closed;
}

static int counter(sg_metrics *reg, const char *name, const char *help, sg_series **out)
{
	sg_metric *f;
	SG_TRY(sg_metrics_counter(&f, reg, name, help, NULL, 0));
	return sg_metric_series(out, f, NULL);
}

static int setup_metrics(daemon *d)
{
	metrics *m = &d->m;
	SG_TRY(sg_metrics_new(&m->reg));
	SG_TRY(counter(m->reg, "citadel_server_csr_count", "The number of CSRs received.", &m->csr));
	SG_TRY(counter(m->reg, "citadel_server_authentication_failure_count",
		       "The number of authentication failures.", &m->authn_fail));
	SG_TRY(counter(m->reg, "citadel_server_csr_parsing_err_count", "The number of errors occurred when parsing the CSR.",
		       &m->parse_err));
	SG_TRY(counter(m->reg, "citadel_server_success_cert_issuance_count", "The number of certificates issuances that have succeeded.",
		       &m->success));
	sg_metric *f;
	static const char *const err_label[] = {"error"};
	SG_TRY(sg_metrics_counter(&f, m->reg, "citadel_server_csr_sign_err_count",
				  "The number of errors occurred when signing the CSR.", err_label, 1));
	for (int i = 0; i < ERR_COUNT; i++)
		SG_TRY(sg_metric_series(&m->sign_err[i], f, &sign_err_names[i]));
	static const char *const outcome[] = {"outcome"};
	SG_TRY(sg_metrics_histogram(&f, m->reg, "signet_request_duration_seconds",
				    "Time from receiving a CreateCertificate call to its answer.", SG_METRICS_LATENCY_BOUNDS,
				    SG_METRICS_LATENCY_NBOUNDS, outcome, 1));
	static const char *const ok[] = {"ok"}, *const err[] = {"error"};
	SG_TRY(sg_metric_series(&m->latency_ok, f, ok));
	SG_TRY(sg_metric_series(&m->latency_err, f, err));
	static const char *const code_label[] = {"grpc_code"};
	SG_TRY(sg_metrics_counter(&f, m->reg, "signet_grpc_requests_total", "CreateCertificate calls by gRPC status.",
				  code_label, 1));
	for (int i = 0; i < 17; i++) {
		const char *code = sg_grpc_status_name(i); /* the one table of status names */
		SG_TRY(sg_metric_series(&m->requests[i], f, &code));
	}
	static const char *const reason_label[] = {"reason"};
	static const char *const limit[] = {"limit"}, *const fds[] = {"fds"};
	SG_TRY(sg_metrics_counter(&f, m->reg, "signet_grpc_connections_refused_total",
				  "gRPC connections refused at once: at max-connections (limit) or with no file "
				  "descriptor left (fds).",
				  reason_label, 1));
	SG_TRY(sg_metric_series(&m->conn_refused_limit, f, limit));
	SG_TRY(sg_metric_series(&m->conn_refused_fds, f, fds));
	SG_TRY(counter(m->reg, "signet_requests_abandoned_total",
		       "Calls whose client went away (cancelled, reset or timed out) before the answer.", &m->gone));
	static const struct {
		const char *name, *help;
		sg_metrics_value_fn fn;
		bool counter;
	} fns[] = {
		{"citadel_server_root_cert_expiry_timestamp", "The unix timestamp when the root CA expires.", root_expiry, false},
		{"citadel_server_root_cert_expiry_seconds", "Seconds until the root CA expires.", root_expiry_seconds, false},
		{"citadel_server_cert_chain_expiry_timestamp", "The unix timestamp when the CA chain expires.", chain_expiry, false},
		{"citadel_server_cert_chain_expiry_seconds", "Seconds until the CA chain expires.", chain_expiry_seconds, false},
		{"signet_hsm_up", "1 while at least one HSM token is usable.", hsm_up, false},
		{"signet_hsm_state", "HSM health: 0 ok, 1 degraded, 2 down.", hsm_state, false},
		{"signet_hsm_sessions", "Open PKCS#11 signing sessions.", hsm_sessions, false},
		{"signet_hsm_signatures_total", "Signatures made by the HSM.", hsm_signatures, true},
		{"signet_hsm_faults_total", "PKCS#11 faults seen.", hsm_faults, true},
		{"signet_hsm_recoveries_total", "PKCS#11 sessions recovered after a fault.", hsm_recoveries, true},
		{"signet_signer_queue_depth", "Requests waiting for a signer thread.", queue_depth, false},
		{"signet_signer_rejected_total", "Requests refused because the signer queue was full.", queue_rejected, true},
		{"signet_serving_cert_expiry_timestamp", "The unix timestamp when the serving certificate expires.",
		 serving_expiry, false},
		{"signet_ready", "1 when signet is ready to serve.", ready_gauge, false},
		{"signet_grpc_connections", "Open gRPC connections.", grpc_connections, false},
		{"signet_grpc_max_connections", "gRPC connections held at once at most (max-connections).",
		 grpc_max_connections, false},
		{"signet_grpc_calls_cancelled_total", "Calls the client cancelled or reset.", grpc_cancelled, true},
		{"signet_grpc_streams_expired_total",
		 "Calls reset because their request message did not arrive within the deadline.", grpc_expired, true},
		{"signet_grpc_rapid_reset_closed_total",
		 "Connections closed for cancelling streams faster than allowed (HTTP/2 rapid reset).",
		 grpc_rapid_reset, true},
	};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		SG_TRY(fns[i].counter ? sg_metrics_counter_fn(m->reg, fns[i].name, fns[i].help, fns[i].fn, d)
				      : sg_metrics_gauge_fn(m->reg, fns[i].name, fns[i].help, fns[i].fn, d));
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

static int serve_health(sg_http_response *resp, void *arg)
{
	(void)arg;
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

static int split_audiences(char *list, const char **out, size_t *n)
{
	*n = 0;
	char *save = NULL;
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		if (!*t)
			continue;
		SG_ENSURE(*n < MAX_AUDIENCES, SG_EINVAL, "more than %d token audiences", MAX_AUDIENCES);
		out[(*n)++] = t;
	}
	SG_ENSURE(*n > 0, SG_EINVAL, "token-audiences is empty");
	return SG_OK;
}

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
		sg_authn_jwt_options jo = {
			.jwks_file = s->jwt_jwks_file,
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

/* A new chain: the CA's, with root (owned, may be NULL) as the bundle. */
static int chain_new(daemon *d, char *root, size_t root_len, chain_snap **out)
{
	size_t n;
	const char *const *elems;
	const size_t *lens;
	sg_ca_chain(d->ca, &elems, &lens, &n);
	chain_snap *c = calloc(1, sizeof(*c));
	if (!c || n == 0 || n > MAX_CHAIN) {
		free(c);
		free(root);
		SG_BAIL(c ? SG_EINVAL : SG_EINTERNAL, c ? "CA chain has %zu elements" : "out of memory", n);
	}
	atomic_init(&c->refs, 1);
	for (size_t i = 0; i < n; i++) {
		c->elems[i] = elems[i];
		c->lens[i] = lens[i];
	}
	c->n = n;
	if (root) {
		c->root = root;
		c->root_len = root_len;
		c->elems[n - 1] = root;
		c->lens[n - 1] = root_len;
	}
	*out = c;
	return SG_OK;
}

static int load_chain(daemon *d)
{
	char *root = NULL;
	size_t len = 0;
	if (d->a.d.root_ca_file) {
		SG_TRY(read_root_file(d->a.d.root_ca_file, &root, &len, &d->root_file));
		int rc = sg_ca_check_bundle(d->ca, root, len, d->a.d.root_ca_file);
		if (rc < 0) {
			free(root);
			return rc;
		}
	}
	return chain_new(d, root, len, &d->chain);
}

/* root-ca-file is followed like istio-csr follows it: a changed file
 * replaces the bundle returned to clients, trusted for client
 * certificates and distributed to namespaces. A broken new file keeps the
 * old bundle (and is reported once per change). */
static void reload_root(daemon *d)
{
	const char *path = d->a.d.root_ca_file;
	struct stat st;
	if (!path || stat(path, &st) != 0 || same_file(&d->root_file, &st))
		return;
	char *root = NULL;
	size_t len = 0;
	struct file_id id;
	/* A broken file is reported once per change: its identity is noted so
	 * that the next tick does not read it again. */
	if (read_root_file(path, &root, &len, &id) < 0 || sg_ca_check_bundle(d->ca, root, len, path) < 0) {
		free(root);
		d->root_file = (struct file_id){.dev = st.st_dev, .ino = st.st_ino, .size = st.st_size,
						.mtime = st.st_mtim, .known = true};
		sg_log_error_last(SG_LOG_WARN, "root-ca-file changed but cannot be used; keeping the previous roots");
		return;
	}
	chain_snap *cur = chain_get(d);
	bool same = cur->root_len == len && memcmp(cur->root, root, len) == 0;
	chain_put(cur);
	if (same) {
		free(root);
		d->root_file = id;
		return;
	}
	chain_snap *next = NULL;
	if (chain_new(d, root, len, &next) < 0) { /* takes root; retried on the next tick */
		sg_log_error_last(SG_LOG_WARN, "cannot use the new root bundle");
		return;
	}
	d->root_file = id;
	pthread_mutex_lock(&d->chain_lock);
	chain_snap *old = d->chain;
	d->chain = next;
	pthread_mutex_unlock(&d->chain_lock);
	chain_put(old);
	if (sg_serving_set_client_ca(d->serving, next->root) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot update the client-certificate roots");
	sg_cluster_set_root(d->cluster, next->root, next->root_len);
	sg_log(SG_LOG_INFO, "root bundle reloaded", SG_F_STR("file", path), SG_F_INT("bytes", (int64_t)len), SG_F_END);
}

static int start(daemon *d)
{
	sg_daemon_settings *s = &d->a.d;
	SG_TRY(sg_appliance_open(&d->app, &d->a.s));
	d->pool = sg_appliance_pool(d->app);
	d->ca = sg_appliance_ca(d->app);
	SG_TRY(load_chain(d));

	char *aud_buf SG_AUTOFREE = strdup(d->a.s.token_audiences ? d->a.s.token_audiences : "istio-ca");
	SG_ENSURE(aud_buf, SG_EINTERNAL, "out of memory");
	const char *aud[MAX_AUDIENCES];
	size_t naud;
	SG_TRY(split_audiences(aud_buf, aud, &naud));
	if (sg_cluster_configured(s)) {
		size_t root_len;
		const char *root = chain_root(d->chain, &root_len);
		sg_cluster_options co = {
			.settings = &d->a.s,
			.daemon = s,
			.pool = d->pool,
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
		.client_ca_pem = d->chain->elems[d->chain->n - 1],
	};
	SG_TRY(sg_serving_new(&d->serving, &so));
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
		.handler = on_call,
		.handler_arg = d,
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
	atomic_store(&d->ready, false);
	atomic_store(&d->stopping, true);
	pthread_mutex_lock(&d->grpc_mu);
	d->grpc_live = NULL;
	pthread_mutex_unlock(&d->grpc_mu);
	if (d->grpc)
		sg_grpc_server_shutdown(d->grpc, (uint64_t)d->a.d.shutdown_grace * 1000000000u);
	sg_http_server_stop(d->http_probe);
	sg_http_server_stop(d->http_metrics);
	/* No call is left: the authenticator goes, then the cluster (its
	 * writers stop and the Lease is released while the signer pool still
	 * runs), then the pool drains and the HSM closes. */
	if (d->auth_ready)
		d->auth.free(d->auth.self);
	sg_cluster_free(d->cluster);
	sg_appliance_free(d->app);
	sg_serving_free(d->serving);
	sg_policy_free(d->policy);
	sg_metrics_free(d->m.reg);
	chain_put(d->chain);
}

/* A listener that refused a connection this recently (at max-connections,
 * or out of descriptors) is not taking new clients: the replica says so,
 * so that a Service sends new connections elsewhere. */
#define REFUSED_UNREADY_NS 2000000000ull

/* Ready when the HSM can sign, the CA is loaded (it is, once started), the
 * serving certificate is valid and the gRPC listener takes connections. */
static void housekeeping(daemon *d)
{
	int64_t now = sg_wall_seconds();
	reload_root(d);
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
	bool ok = hsm_stats(d).state != SG_HSM_DOWN && sg_serving_not_after(d->serving) > now &&
		  !atomic_load(&d->stopping) && accepting;
	bool was = atomic_exchange(&d->ready, ok);
	if (was != ok)
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, ok ? "ready" : "not ready",
		       SG_F_STR("hsm", hsm_stats(d).last_fault), SG_F_INT("accepting", accepting), SG_F_END);
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
	printf("usage: signetd --config FILE [options]\n\n"
	       "Serves istio.v1.auth.IstioCertificateService/CreateCertificate with CA keys in a PKCS#11 token.\n"
	       "Every option may also be a line \"name = value\" in the config file; options override it.\n\n");
	sg_opt_usage(opts, NOPTS, stdout);
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
	pthread_mutex_init(&d.chain_lock, NULL);
	pthread_mutex_init(&d.grpc_mu, NULL);
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(opts, NOPTS, &d.a, argc - 1, argv + 1, &res);
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(opts, NOPTS, &d.a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
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
	set_sched_batch(d.a.d.sched_batch);
	raise_fd_limit();

	rc = start(&d);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_log(SG_LOG_ERROR, "cannot start", SG_F_STR("error", e.msg), SG_F_END);
		fprintf(stderr, "signetd: %s\n", e.msg);
		stop(&d);
		sg_opt_free(opts, NOPTS, &d.a);
		return 1;
	}
	housekeeping(&d);
	for (;;) {
		struct timespec one = {1, 0};
		int sig = sigtimedwait(&set, NULL, &one);
		if (sig == SIGTERM || sig == SIGINT) {
			sg_log(SG_LOG_INFO, "shutting down", SG_F_STR("signal", sig == SIGTERM ? "TERM" : "INT"),
			       SG_F_INT("grace_s", d.a.d.shutdown_grace), SG_F_END);
			break;
		}
		housekeeping(&d);
	}
	stop(&d);
	sg_log(SG_LOG_INFO, "stopped", SG_F_END);
	sg_opt_free(opts, NOPTS, &d.a);
	return 0;
}
