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
 * The main thread only starts things, then waits for signals and once a
 * second does housekeeping (serving certificate renewal, health). SIGTERM
 * and SIGINT shut down gracefully: not ready, stop accepting, let in-flight
 * requests finish within shutdown-grace, drain the signer pool.
 */
#include "sg_appliance.h"
#include "sg_authn.h"
#include "sg_authn_impl.h"
#include "sg_clock.h"
#include "sg_daemon.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_istio.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_policy.h"
#include "sg_serving.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_CHAIN 12
#define MAX_AUDIENCES 8

const char *const sg_daemon_policy_names[] = {"istio-csr", "istiod", NULL};

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
	sg_series *sign_err[5]; /* CA_NOT_READY, CSR_ERROR, TTL_ERROR, CERT_GEN_ERROR, UNKNOWN */
	sg_series *latency_ok, *latency_err;
	sg_series *requests[17]; /* signet_grpc_requests_total by status code */
} metrics;

enum { ERR_CA_NOT_READY, ERR_CSR, ERR_TTL, ERR_CERT_GEN, ERR_UNKNOWN };
static const char *const sign_err_names[] = {"CA_NOT_READY", "CSR_ERROR", "TTL_ERROR", "CERT_GEN_ERROR", "UNKNOWN"};

typedef struct daemon {
	daemon_args a;
	sg_appliance *app;
	sg_pool *pool;
	const sg_ca *ca;
	sg_authenticator auth;
	bool auth_ready;
	sg_policy *policy;
	sg_serving *serving;
	sg_grpc_server *grpc;
	sg_http_server *http_metrics, *http_probe;
	metrics m;
	/* Chain elements after the leaf: the CA's, with the root bundle
	 * replaced by root-ca-file when that is set. */
	const char *chain[MAX_CHAIN];
	size_t chain_lens[MAX_CHAIN];
	size_t chain_len;
	char *root_override;
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
	{SG_EINTERNAL, ERR_CERT_GEN},
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

static void finish(rpc *r, int status, const char *msg, const uint8_t *resp, size_t len)
{
	daemon *d = r->d;
	double secs = (double)(sg_now_ns() - r->t0) / 1e9;
	sg_series_observe(status == SG_GRPC_OK ? d->m.latency_ok : d->m.latency_err, secs);
	if (status >= 0 && status < 17 && d->m.requests[status])
		sg_series_inc(d->m.requests[status]);
	if (sg_grpc_call_finish(r->call, status, msg, resp, len) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot finish a call");
	rpc_free(r);
}

/* Ends a call with the error recorded in e; the message names the problem
 * (never a token or a PIN: no error detail in signet carries them). */
static void fail(rpc *r, int code, const sg_error *e, const char *prefix)
{
	char msg[SG_ERROR_MSG_MAX + 64];
	snprintf(msg, sizeof(msg), "%s: %s", prefix, e->msg);
	int status = sg_grpc_status_of(code);
	sg_log(SG_LOG_INFO, "request refused", SG_F_STR("peer", r->peer), SG_F_STR("reason", e->msg),
	       SG_F_STR("error", sg_error_name(code)), SG_F_INT("grpc_status", status), SG_F_END);
	finish(r, status, msg, NULL, 0);
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
	for (size_t i = 0; i < d->chain_len; i++) {
		elems[n] = d->chain[i];
		lens[n++] = d->chain_lens[i];
	}
	uint8_t *out = NULL;
	size_t out_len = 0;
	if (sg_istio_response_encode(elems, lens, n, &out, &out_len) < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[ERR_CERT_GEN]);
		fail(r, SG_EINTERNAL, &e, "cannot encode the response");
		return;
	}
	sg_series_inc(d->m.success);
	uint64_t us = (sg_now_ns() - r->t0) / 1000;
	/* The audit line: what was issued to whom, never how they proved it. */
	sg_log(SG_LOG_INFO, "certificate issued", SG_F_STR("serial", res->serial_hex),
	       SG_F_STR("identity", res->identity), SG_F_STR("san", res->identity), SG_F_INT("not_after", res->not_after),
	       SG_F_STR("key", sg_key_type_name(res->ca_key)), SG_F_STR("auth", r->caller_method),
	       SG_F_INT("impersonated", r->decision.impersonated), SG_F_STR("peer", r->peer),
	       SG_F_INT("latency_us", us), SG_F_END);
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
	for (int i = 0; i < 5; i++)
		SG_TRY(sg_metric_series(&m->sign_err[i], f, &sign_err_names[i]));
	static const char *const outcome[] = {"outcome"};
	SG_TRY(sg_metrics_histogram(&f, m->reg, "signet_request_duration_seconds",
				    "Time from receiving a CreateCertificate call to its answer.", SG_METRICS_LATENCY_BOUNDS,
				    SG_METRICS_LATENCY_NBOUNDS, outcome, 1));
	static const char *const ok[] = {"ok"}, *const err[] = {"error"};
	SG_TRY(sg_metric_series(&m->latency_ok, f, ok));
	SG_TRY(sg_metric_series(&m->latency_err, f, err));
	static const char *const code_label[] = {"grpc_code"};
	static const char *const codes[17] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
					      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
					      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
					      "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
	SG_TRY(sg_metrics_counter(&f, m->reg, "signet_grpc_requests_total", "CreateCertificate calls by gRPC status.",
				  code_label, 1));
	for (int i = 0; i < 17; i++)
		SG_TRY(sg_metric_series(&m->requests[i], f, &codes[i]));
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

/* /metrics on metrics-port; the readiness path and /healthz on
 * readiness-probe-port, which may be the same port (then one server). */
static int start_http(daemon *d)
{
	const sg_daemon_settings *s = &d->a.d;
	bool same = s->metrics_port == s->readiness_probe_port;
	sg_http_route probe[] = {{s->readiness_probe_path, serve_ready, d}, {"/healthz", serve_health, d}};
	sg_http_route routes[3] = {{"/metrics", serve_metrics, d}, probe[0], probe[1]};
	sg_http_options o = {.bind_address = s->http_address, .port = (uint16_t)s->metrics_port, .routes = routes,
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

static int setup_auth(daemon *d, char *audiences_buf)
{
	const sg_settings *s = &d->a.s;
	sg_authenticator list[2];
	size_t n = 0;
	if (d->a.d.enable_client_cert_authenticator)
		SG_TRY(sg_authn_mtls_new(&list[n++], s->trust_domain));
	SG_ENSURE(s->jwt_issuer && s->jwt_jwks_file, SG_EINVAL,
		  "jwt-issuer and jwt-jwks-file are required to authenticate workloads");
	const char *aud[MAX_AUDIENCES];
	size_t naud;
	SG_TRY(split_audiences(audiences_buf, aud, &naud));
	sg_authn_jwt_options jo = {
		.jwks_file = s->jwt_jwks_file,
		.issuer = s->jwt_issuer,
		.audiences = aud,
		.n_audiences = naud,
		.trust_domain = s->trust_domain,
	};
	int rc = sg_authn_jwt_new(&list[n], &jo);
	if (rc < 0) {
		for (size_t i = 0; i < n; i++)
			list[i].free(list[i].self);
		return rc;
	}
	n++;
	SG_TRY(sg_authn_chain_new(&d->auth, list, n)); /* owns the list, also on failure */
	d->auth_ready = true;
	return SG_OK;
}

static int load_root_override(daemon *d)
{
	const char *path = d->a.d.root_ca_file;
	size_t n;
	const char *const *elems;
	const size_t *lens;
	sg_ca_chain(d->ca, &elems, &lens, &n);
	SG_ENSURE(n <= MAX_CHAIN, SG_EINVAL, "CA chain too long");
	for (size_t i = 0; i < n; i++) {
		d->chain[i] = elems[i];
		d->chain_lens[i] = lens[i];
	}
	d->chain_len = n;
	if (!path)
		return SG_OK;
	FILE *f = fopen(path, "re");
	SG_ENSURE(f, SG_ENOTFOUND, "cannot open root-ca-file %s", path);
	char *buf = malloc(1 << 20);
	size_t got = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	fclose(f);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory");
	buf[got] = 0;
	if (!strstr(buf, "-----BEGIN CERTIFICATE-----")) {
		free(buf);
		SG_BAIL(SG_EINVAL, "root-ca-file %s holds no PEM certificate", path);
	}
	d->root_override = buf;
	d->chain[n - 1] = buf;
	d->chain_lens[n - 1] = got;
	return SG_OK;
}

static int start(daemon *d)
{
	sg_daemon_settings *s = &d->a.d;
	SG_TRY(sg_appliance_open(&d->app, &d->a.s));
	d->pool = sg_appliance_pool(d->app);
	d->ca = sg_appliance_ca(d->app);
	SG_TRY(load_root_override(d));

	char *aud SG_AUTOFREE = strdup(d->a.s.token_audiences ? d->a.s.token_audiences : "istio-ca");
	SG_ENSURE(aud, SG_EINTERNAL, "out of memory");
	SG_TRY(setup_auth(d, aud));
	sg_policy_options po = {
		.mode = (sg_policy_mode)s->policy,
		.max_ttl = s->max_client_certificate_duration,
		.default_ttl = s->default_certificate_duration,
		.cluster_id = s->cluster_id,
		.trust_domain = d->a.s.trust_domain,
		.trusted_node_accounts = s->ca_trusted_node_accounts,
	};
	SG_TRY(sg_policy_new(&d->policy, &po));
	sg_serving_options so = {
		.pool = d->pool,
		.dns_names = s->serving_certificate_dns_names,
		.duration = s->serving_certificate_duration,
		.cert_file = s->serving_certificate_file,
		.key_file = s->serving_key_file,
		.client_ca_pem = d->chain[d->chain_len - 1],
	};
	SG_TRY(sg_serving_new(&d->serving, &so));
	SG_TRY(setup_metrics(d));
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
	};
	SG_TRY(sg_grpc_server_start(&d->grpc, &go));
	/* The bound ports (the settings may say 0: any free port). */
	int metrics_port = d->http_metrics ? sg_http_server_port(d->http_metrics) : 0;
	int probe_port = d->http_probe ? sg_http_server_port(d->http_probe) : metrics_port;
	sg_log(SG_LOG_INFO, "signetd serving", SG_F_STR("address", s->serving_address),
	       SG_F_INT("port", sg_grpc_server_port(d->grpc)), SG_F_STR("policy", sg_daemon_policy_names[s->policy]),
	       SG_F_INT("metrics_port", metrics_port), SG_F_INT("probe_port", probe_port), SG_F_END);
	return SG_OK;
}

static void stop(daemon *d)
{
	atomic_store(&d->ready, false);
	atomic_store(&d->stopping, true);
	if (d->grpc)
		sg_grpc_server_shutdown(d->grpc, (uint64_t)d->a.d.shutdown_grace * 1000000000u);
	sg_http_server_stop(d->http_probe);
	sg_http_server_stop(d->http_metrics);
	/* The pool drains whatever is still queued, then the HSM closes. */
	sg_appliance_free(d->app);
	sg_serving_free(d->serving);
	sg_policy_free(d->policy);
	if (d->auth_ready)
		d->auth.free(d->auth.self);
	sg_metrics_free(d->m.reg);
	free(d->root_override);
}

/* Ready when the HSM can sign, the CA is loaded (it is, once started) and
 * the serving certificate is valid. */
static void housekeeping(daemon *d)
{
	int64_t now = sg_wall_seconds();
	if (sg_serving_tick(d->serving, now) < 0)
		sg_log_error_last(SG_LOG_WARN, "serving certificate renewal failed; will retry");
	bool ok = hsm_stats(d).state != SG_HSM_DOWN && sg_serving_not_after(d->serving) > now &&
		  !atomic_load(&d->stopping);
	bool was = atomic_exchange(&d->ready, ok);
	if (was != ok)
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, ok ? "ready" : "not ready",
		       SG_F_STR("hsm", hsm_stats(d).last_fault), SG_F_END);
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
	static daemon d;
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
