/*
 * signetd_metrics: what signetd shows on HTTP. The daemon's metrics beside
 * the service's: values derived from a part's state (the CA's and the
 * serving certificate's expiry, the HSM's state, the pool's service time,
 * readiness) are gauge callbacks; the HSM's, the pool's and the gRPC
 * server's counters are stats tables (sg_metrics_stats). Then the
 * endpoints: /metrics, the readiness path (the flag housekeeping sets,
 * signetd_health.c) and /healthz (the HSM down beyond hsm-down-limit),
 * and where they listen. Apart from main so that the thirty-odd getters
 * and their tables read as one list, next to the probes that read the
 * same state.
 */
#include "signetd_impl.h"

#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <stdlib.h>

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

static double rotation_due(void *arg)
{
	return signetd_root_rotation_due(arg, sg_wall_seconds());
}

static double rotation_lead(void *arg)
{
	return (double)signetd_root_rotation_lead(arg);
}

sg_hsm_stats signetd_hsm_stats(daemon *d)
{
	sg_hsm_stats st = {.state = SG_HSM_OK, .last_fault = ""};
	if (d->app) /* else no HSM: never down */
		sg_hsm_stats_get(sg_appliance_hsm(d->app), &st);
	return st;
}

static double hsm_state(void *arg)
{
	return (double)signetd_hsm_stats(arg).state;
}

static double hsm_up(void *arg)
{
	return signetd_hsm_stats(arg).state != SG_HSM_DOWN;
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

static double signer_threads(void *arg)
{
	return (double)pool_stats(arg).threads;
}

static double signer_hsm_wait_seconds(void *arg)
{
	return (double)pool_stats(arg).hsm_wait_ns / 1e9;
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
    GAUGE(sg_pool_stats, busy, "signet_signer_busy", "Signer threads signing now."),
    GAUGE(sg_pool_stats, threads_base, "signet_signer_threads_base",
          "Signer threads always running (signer-threads; one per CPU by default)."),
    GAUGE(sg_pool_stats, threads_max, "signet_signer_threads_max",
          "Signer threads (one HSM session each) at most: hsm-max-sessions and the tokens' session limits."),
    GAUGE(sg_pool_stats, threads_target, "signet_signer_threads_target",
          "Signer threads the measured HSM latency asks for while requests wait (the median of the last seven "
          "estimates; base when the token signs on the host's CPU)."),
    COUNTER(sg_pool_stats, threads_started, "signet_signer_threads_started_total",
            "Signer threads started beyond the base because the HSM was slow to answer and requests waited."),
    COUNTER(sg_pool_stats, threads_retired, "signet_signer_threads_retired_total",
            "Signer threads beyond the base retired: idle, or well above the target once the HSM answered faster."),
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

int signetd_setup_metrics(daemon *d)
{
	daemon_metrics *m = &d->m;
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
		bool ca; /* of the CA, the HSM or the pool */
	} fns[] = {
	    {"citadel_server_root_cert_expiry_timestamp", "The unix timestamp when the root CA expires.", root_expiry,
	     false, true},
	    {"citadel_server_root_cert_expiry_seconds", "Seconds until the root CA expires.", root_expiry_seconds,
	     false, true},
	    {"citadel_server_cert_chain_expiry_timestamp", "The unix timestamp when the CA chain expires.",
	     chain_expiry, false, true},
	    {"citadel_server_cert_chain_expiry_seconds", "Seconds until the CA chain expires.", chain_expiry_seconds,
	     false, true},
	    {"signet_ca_root_rotation_due",
	     "1 when the CA's root expires within signet_ca_root_rotation_lead_seconds: time to rotate the CA.",
	     rotation_due, false, true},
	    {"signet_ca_root_rotation_lead_seconds",
	     "How long before the CA's root expires its rotation is due (root-rotation-lead; default a third of the "
	     "root's validity).",
	     rotation_lead, false, true},
	    {"signet_hsm_up", "1 while at least one HSM token is usable.", hsm_up, false, true},
	    {"signet_hsm_state", "HSM health: 0 ok, 1 degraded, 2 down.", hsm_state, false, true},
	    {"signet_signer_service_seconds", "Moving average of one certificate's signing time in the signer pool.",
	     signer_service_seconds, false, true},
	    {"signet_signer_threads", "Signer threads running, each with its HSM session.", signer_threads, false, true},
	    {"signet_signer_hsm_wait_seconds",
	     "Recent mean time a signature kept its thread waiting off CPU inside the PKCS#11 module (what grows the "
	     "signer pool).",
	     signer_hsm_wait_seconds, false, true},
	    {"signet_serving_cert_expiry_timestamp", "The unix timestamp when the serving certificate expires.",
	     serving_expiry, false, false},
	    {"signet_ready", "1 when signet is ready to serve.", ready_gauge, false, false},
	};
	/* An RA without an HSM (no appliance) has no CA, HSM or signer pool:
	 * their series are left out rather than shown as zeros that read as
	 * "expired" or "down". */
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (d->app || !fns[i].ca)
			SG_TRY(fns[i].counter ? sg_metrics_counter_fn(m->reg, fns[i].name, fns[i].help, fns[i].fn, d)
			                      : sg_metrics_gauge_fn(m->reg, fns[i].name, fns[i].help, fns[i].fn, d));
#define TABLE(rows, get, type) rows, sizeof(rows) / sizeof(rows[0]), get, sizeof(type)
	if (d->app) {
		SG_TRY(sg_metrics_stats(m->reg, TABLE(hsm_rows, hsm_of, sg_hsm_stats), d));
		SG_TRY(sg_metrics_stats(m->reg, TABLE(pool_rows, pool_of, sg_pool_stats), d));
	}
	SG_TRY(sg_metrics_stats(m->reg, TABLE(grpc_rows, grpc_of, sg_grpc_server_stats), d));
#undef TABLE
	return SG_OK;
}

/* Each signing call's latency into its token's histogram, on the signing
 * thread. */
static void on_sign(size_t token, double seconds, void *arg)
{
	daemon_metrics *m = arg;
	if (token < m->ntok && m->tok[token].sign)
		sg_series_observe(m->tok[token].sign, seconds);
}

/* C_SignInit + C_Sign latency, 50 us (a local software token) to 10 s. */
static const double sign_bounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};

/* Per token: signing calls in flight, signer sessions, the session cap and
 * the signing latency, labelled as the probes' series. */
int signetd_setup_token_metrics(daemon *d)
{
	daemon_metrics *m = &d->m;
	if (!d->app)
		return SG_OK; /* hsm=false: no token */
	sg_hsm *h = sg_appliance_hsm(d->app);
	static const char *const labels[] = {"token", "serial"};
	sg_metric *in_flight, *sessions, *max_sessions, *sign;
	SG_TRY(sg_metrics_gauge(&in_flight, m->reg, "signet_hsm_token_in_flight",
	                        "Signing calls (C_SignInit + C_Sign) inside each HSM token now.", labels, 2));
	SG_TRY(sg_metrics_gauge(&sessions, m->reg, "signet_hsm_token_sessions",
	                        "Signer sessions open on each HSM token.", labels, 2));
	SG_TRY(sg_metrics_gauge(&max_sessions, m->reg, "signet_hsm_token_max_sessions",
	                        "Signer sessions each HSM token allows (its ulMaxSessionCount less the admin and probe "
	                        "sessions); 0: no limit stated.",
	                        labels, 2));
	SG_TRY(sg_metrics_histogram(&sign, m->reg, "signet_hsm_sign_duration_seconds",
	                            "How long each HSM token took to sign (C_SignInit + C_Sign).", sign_bounds,
	                            sizeof(sign_bounds) / sizeof(sign_bounds[0]), labels, 2));
	m->ntok = sg_hsm_token_count(h);
	m->tok = calloc(m->ntok ? m->ntok : 1, sizeof(*m->tok));
	SG_ENSURE(m->tok, SG_EINTERNAL, "out of memory");
	for (size_t i = 0; i < m->ntok; i++) {
		const char *lv[2] = {sg_hsm_token_label(h, i), sg_hsm_token_serial(h, i)};
		token_series *ts = &m->tok[i];
		if (sg_metric_series(&ts->in_flight, in_flight, lv) < 0)
			ts->in_flight = NULL;
		if (sg_metric_series(&ts->sessions, sessions, lv) < 0)
			ts->sessions = NULL;
		if (sg_metric_series(&ts->max_sessions, max_sessions, lv) < 0)
			ts->max_sessions = NULL;
		if (sg_metric_series(&ts->sign, sign, lv) < 0)
			ts->sign = NULL;
	}
	signetd_refresh_token_metrics(d);
	sg_hsm_on_sign(h, on_sign, m);
	return SG_OK;
}

/* A rotation's new HSM handle (same tokens, another key) reports its
 * signing calls to the same series. */
void signetd_follow_token_metrics(daemon *d)
{
	if (d->app && d->m.ntok)
		sg_hsm_on_sign(sg_appliance_hsm(d->app), on_sign, &d->m);
}

void signetd_refresh_token_metrics(daemon *d)
{
	daemon_metrics *m = &d->m;
	if (!d->app || !m->ntok)
		return;
	sg_hsm *h = sg_appliance_hsm(d->app);
	for (size_t i = 0; i < m->ntok; i++) {
		sg_hsm_load l;
		sg_hsm_token_load(h, i, &l);
		token_series *ts = &m->tok[i];
		if (ts->in_flight)
			sg_series_set(ts->in_flight, l.in_flight);
		if (ts->sessions)
			sg_series_set(ts->sessions, l.sessions);
		if (ts->max_sessions)
			sg_series_set(ts->max_sessions, l.max_sessions);
	}
}

/* A probe's result into its token's series, on the probe's thread. */
static void on_probe(size_t token, sg_hsm_probe_result result, double seconds, void *arg)
{
	daemon_metrics *m = arg;
	if (token >= m->nprobe)
		return;
	probe_series *ps = &m->probe[token];
	if (result == SG_HSM_PROBE_STUCK) {
		if (ps->stuck)
			sg_series_inc(ps->stuck);
		return;
	}
	if ((unsigned)result < 3 && ps->result[result])
		sg_series_inc(ps->result[result]);
	if (ps->duration)
		sg_series_observe(ps->duration, seconds);
}

/* Labelled by the token's label and serial number: tokens a URI selects by
 * label share it. A token beyond what the families hold (64 series each:
 * 21 tokens) is probed all the same, without metrics. A token already
 * labelled (a new key in the same token) gets its series back, so its
 * counts go on rising across a rotation. */
static int probe_series_of(daemon_metrics *m, sg_hsm *h)
{
	static const char *const result_names[3] = {"ok", "failed", "late"};
	size_t n = sg_hsm_token_count(h);
	probe_series *series = calloc(n ? n : 1, sizeof(*series));
	SG_ENSURE(series, SG_EINTERNAL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		probe_series *ps = &series[i];
		const char *lv[3] = {sg_hsm_token_label(h, i), sg_hsm_token_serial(h, i), NULL};
		for (size_t r = 0; r < 3; r++) {
			lv[2] = result_names[r];
			if (sg_metric_series(&ps->result[r], m->probe_results, lv) < 0)
				ps->result[r] = NULL;
		}
		if (sg_metric_series(&ps->duration, m->probe_duration, lv) < 0)
			ps->duration = NULL;
		if (sg_metric_series(&ps->stuck, m->probe_stuck, lv) < 0)
			ps->stuck = NULL;
	}
	free(m->probe); /* no probe thread reads it any more */
	m->probe = series;
	m->nprobe = n;
	return SG_OK;
}

/* Probes h, told into its tokens' series. */
static int probe_hsm(daemon *d, sg_hsm *h)
{
	const sg_daemon_settings *s = &d->a.d;
	SG_TRY(probe_series_of(&d->m, h));
	sg_hsm_probe_options po = {
	    .interval_ms = (unsigned)s->hsm_probe_interval * 1000u,
	    .timeout_ms = (unsigned)s->hsm_probe_timeout * 1000u,
	    .on_probe = on_probe,
	    .arg = &d->m,
	};
	return sg_hsm_probe_start(h, &po);
}

int signetd_start_hsm_probes(daemon *d)
{
	const sg_daemon_settings *s = &d->a.d;
	if (!s->hsm_probe_interval || !d->app)
		return SG_OK;
	daemon_metrics *m = &d->m;
	static const char *const labels[] = {"token", "serial", "result"};
	SG_TRY(sg_metrics_counter(&m->probe_results, m->reg, "signet_hsm_probes_total",
	                          "Health probes of each HSM token by result: ok, failed (an error, and a test "
	                          "signature failed too), late (answered after hsm-probe-timeout). A token that "
	                          "signed for requests since its last probe is not probed.",
	                          labels, 3));
	SG_TRY(sg_metrics_histogram(&m->probe_duration, m->reg, "signet_hsm_probe_duration_seconds",
	                            "How long each HSM token's health probes took.", SG_METRICS_LATENCY_BOUNDS,
	                            SG_METRICS_LATENCY_NBOUNDS, labels, 2));
	SG_TRY(sg_metrics_counter(&m->probe_stuck, m->reg, "signet_hsm_probes_stuck_total",
	                          "Health probes still inside the PKCS#11 module at hsm-probe-timeout (the token "
	                          "counted as down unless it signs for requests meanwhile; the thread may stay "
	                          "there).",
	                          labels, 2));
	return probe_hsm(d, sg_appliance_hsm(d->app));
}

int signetd_follow_hsm_probes(daemon *d, sg_hsm *old)
{
	sg_hsm *h = sg_appliance_hsm(d->app);
	if (!d->m.probe_results || h == old)
		return SG_OK;
	/* The retired handle's probes first: they tell on_probe through
	 * m->probe, which is replaced below, and after finish they would test
	 * a key no longer in the token. Its stats stay as they are; nothing
	 * reads them for readiness any more (signetd_hsm_stats reads the
	 * current handle). */
	if (!sg_hsm_probe_stop(old))
		sg_log(SG_LOG_WARN, "a health probe of the previous HSM key was left inside the module", SG_F_END);
	SG_TRY(probe_hsm(d, h));
	sg_log(SG_LOG_INFO, "HSM health probes follow the new key", SG_F_INT("tokens", (int64_t)d->m.nprobe), SG_F_END);
	return SG_OK;
}

static int serve_metrics(sg_http_response *resp, void *arg)
{
	daemon *d = arg;
	char *text;
	size_t len;
	/* Gauges read from the HSM layer's counters at the scrape. */
	signetd_refresh_token_metrics(d);
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
const char *signetd_http_address(const daemon *d)
{
	const char *a = d->a.d.http_address;
	if (a && *a)
		return a;
	const char *k8s = getenv("KUBERNETES_SERVICE_HOST");
	return k8s && *k8s ? "0.0.0.0" : "127.0.0.1";
}

/* /metrics on metrics-port; the readiness path and /healthz on
 * readiness-probe-port, which may be the same port (then one server). */
int signetd_start_http(daemon *d)
{
	const sg_daemon_settings *s = &d->a.d;
	bool same = s->metrics_port == s->readiness_probe_port;
	sg_http_route probe[] = {{s->readiness_probe_path, serve_ready, d}, {"/healthz", serve_health, d}};
	sg_http_route routes[3] = {{"/metrics", serve_metrics, d}, probe[0], probe[1]};
	sg_http_options o = {.bind_address = signetd_http_address(d),
	                     .port = (uint16_t)s->metrics_port,
	                     .routes = routes,
	                     .nroutes = same ? 3 : 1};
	SG_TRY(sg_http_server_start(&d->http_metrics, &o));
	if (same)
		return SG_OK;
	o.port = (uint16_t)s->readiness_probe_port;
	o.routes = probe;
	o.nroutes = 2;
	return sg_http_server_start(&d->http_probe, &o);
}
