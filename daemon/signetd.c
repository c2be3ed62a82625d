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
 * key, root-ca-file, jwt-jwks-file, the config file's CA settings: key, CA
 * certificate and root bundle), keeping what it has when a file cannot be
 * used; housekeeping follows the CA settings once a second too.
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
 *
 * The files: this one holds main, start and stop; the metrics and probes
 * are signetd_metrics.c, root-ca-file signetd_root.c, the config file's CA
 * settings (followed through a CA rotation) signetd_ca.c, readiness,
 * liveness and systemd signetd_health.c, sharing private/signetd_impl.h.
 */
#include "signetd_impl.h"

#include "sg_appliance.h"
#include "sg_authn.h"
#include "sg_authn_impl.h"
#include "sg_clock.h"
#include "sg_cluster.h"
#include "sg_daemon_settings.h"
#include "sg_forward.h"
#include "sg_grant.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_init.h"
#include "sg_istio.h"
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_names.h"
#include "sg_notify.h"
#include "sg_secret.h"
#include "sg_service.h"
#include "sg_serving.h"

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

int signetd_parse_config(const char *path, daemon_args *out)
{
	char *argv[] = {"--config", (char *)path};
	char *pos[2];
	sg_opt_result res = {.argv = pos};
	memset(out, 0, sizeof(*out));
	int rc = sg_opt_parse(opts, NOPTS, out, 2, argv, &res);
	if (rc < 0)
		sg_opt_free(opts, NOPTS, out);
	return rc;
}

void signetd_free_args(daemon_args *a)
{
	sg_opt_free(opts, NOPTS, a);
}

/* The settings of an issuer-cas CA's file (extra_ca_args). */
static const sg_opt extra_ca_opts[] = {SG_SETTINGS_ROWS(extra_ca_args, s, "info")};
#define N_EXTRA_CA_OPTS (sizeof(extra_ca_opts) / sizeof(extra_ca_opts[0]))

/* ---- TLS material for gRPC ------------------------------------------------ */

static int tls_fetch(void *arg, char **chain, char **key, char **client_ca, uint64_t *version)
{
	daemon *d = arg;
	return sg_serving_get(d->serving, chain, key, client_ca, version);
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

/* --hsm=false: a pure RA. Everything that would sign with signet's own CA
 * is refused by name rather than silently not done, and so is what the RA
 * cannot work without: the issuer and the roots the mesh trusts (with no
 * CA there is no root of our own to fall back on). */
static int check_no_hsm(const daemon_args *a)
{
	const sg_daemon_settings *s = &a->d;
	SG_ENSURE(s->issuer_name && *s->issuer_name, SG_EINVAL,
	          "--hsm=false needs issuer-name: without an HSM signetd only forwards (RA mode)");
	SG_ENSURE(s->root_ca_file, SG_EINVAL,
	          "--hsm=false needs root-ca-file: the issuer's CA, the roots the mesh trusts (there is no CA of "
	          "signet's own to take them from)");
	static const struct {
		size_t off;
		const char *name;
	} signs[] = {
	    {offsetof(sg_daemon_settings, istiod_cert_enabled), "istiod-cert-enabled"},
	    {offsetof(sg_daemon_settings, cert_manager_issuer), "cert-manager-issuer"},
	    {offsetof(sg_daemon_settings, kube_csr_signer), "kube-csr-signer"},
	};
	for (size_t i = 0; i < sizeof(signs) / sizeof(signs[0]); i++)
		SG_ENSURE(!*(const bool *)((const char *)s + signs[i].off), SG_EINVAL,
		          "--hsm=false: %s signs with signet's CA, which an RA without an HSM does not have; set "
		          "--%s=false",
		          signs[i].name, signs[i].name);
	SG_ENSURE(!s->issuer_cas || !*s->issuer_cas, SG_EINVAL,
	          "--hsm=false: issuer-cas names CAs in an HSM; leave it empty");
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
	SG_TRY(sg_forward_annotations_check(s->certificate_request_additional_annotations));
	if (!s->hsm)
		SG_TRY(check_no_hsm(a));
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
	if (s->hsm) {
		SG_TRY(sg_init_softhsm_repair(d->a.s.softhsm2_conf));
		SG_TRY(sg_appliance_open(&d->app, &d->a.s));
		SG_TRY(open_extra_cas(d));
		d->pool = sg_appliance_pool(d->app);
		d->ca = sg_appliance_ca(d->app);
	} else {
		/* No appliance, pool or CA: every certificate, our serving one
		 * included, comes from the issuer (check_no_hsm made sure nothing
		 * else would need them). */
		sg_log(SG_LOG_INFO, "no HSM (hsm=false): a pure RA; the HSM and CA settings are not read",
		       SG_F_STR("issuer", s->issuer_name), SG_F_STR("root_ca_file", s->root_ca_file), SG_F_END);
	}
	const char *root = NULL;
	size_t root_len = 0;
	char *root_own SG_AUTOFREE = NULL;
	SG_TRY(signetd_load_root(d, &root, &root_len, &root_own));

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
	sg_grant_options po = {
	    .mode = (sg_grant_mode)s->policy,
	    .max_ttl = s->max_client_certificate_duration,
	    .default_ttl = s->default_certificate_duration,
	    .cluster_id = s->cluster_id,
	    .trust_domain = d->a.s.trust_domain,
	    .trusted_node_accounts = s->ca_trusted_node_accounts,
	    .authorize_impersonation = node_authz ? sg_cluster_authorize_impersonation : NULL,
	    .authorize_arg = d->cluster,
	};
	SG_TRY(sg_grant_new(&d->grant, &po));
	SG_ENSURE(!(s->issuer_name && *s->issuer_name) || sg_cluster_forwarder(d->cluster), SG_EINVAL,
	          "issuer-name (RA mode) needs a Kubernetes API (kubeconfig, KUBECONFIG or in-cluster)");
	sg_serving_options so = {
	    .pool = d->pool,
	    .forward = d->pool ? NULL : sg_cluster_forwarder(d->cluster),
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
	    .grant = d->grant,
	    .metrics = d->m.reg,
	    .root_pem = root_own,
	    .root_len = root_len,
	    .forward = sg_cluster_forwarder(d->cluster),
	};
	SG_TRY(sg_service_new(&d->svc, &vo));
	SG_TRY(signetd_ca_follow_start(d));
	SG_TRY(signetd_setup_metrics(d));
	SG_TRY(signetd_setup_token_metrics(d));
	SG_TRY(signetd_start_hsm_probes(d));
	if (d->cluster)
		SG_TRY(sg_cluster_metrics(d->cluster, d->m.reg));
	SG_TRY(signetd_start_http(d));

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
	       SG_F_INT("max_connections", (int64_t)gs.max_connections),
	       SG_F_STR("signetd_http_address", signetd_http_address(d)), SG_F_END);
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
	sg_grant_free(d->grant);
	sg_metrics_free(d->m.reg);
	free(d->m.probe);
	free(d->m.tok);
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
	printf("usage: signetd {--config FILE | --init-dir DIR} [options]\n"
	       "       signetd --hsm=false --issuer-name NAME --root-ca-file FILE [options]\n\n"
	       "Serves istio.v1.auth.IstioCertificateService/CreateCertificate with CA keys in a PKCS#11 token,\n"
	       "or, with --hsm=false, as a pure RA that forwards every CSR (its own serving certificate's too)\n"
	       "to a cert-manager issuer.\n"
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
	/* Before init-dir would make (or open) a CA for nothing. */
	if (rc == SG_OK && !res.help && d.a.init_dir && !d.a.d.hsm)
		rc = sg_error_set(SG_EINVAL, "--hsm=false: init-dir makes a CA in an HSM; leave it out");
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
	/* Before any thread: jansson then clears every block it frees, an
	 * informer's shared copy of a Secret included. */
	if (sg_cluster_reads_secrets(&d.a.d))
		sg_kube_json_wipe_frees();
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
	signetd_housekeeping(&d);
	d.pool_progress_ns = sg_now_ns();
	signetd_watchdog_ping(&d);
	uint64_t last_tick = sg_now_ns();
	for (;;) {
		struct timespec wait = signetd_loop_wait(&d);
		int sig = sigtimedwait(&set, NULL, &wait);
		if (sig == SIGTERM || sig == SIGINT) {
			sg_log(SG_LOG_INFO, "shutting down", SG_F_STR("signal", sig == SIGTERM ? "TERM" : "INT"),
			       SG_F_INT("grace_s", d.a.d.shutdown_grace), SG_F_END);
			break;
		}
		if (sig == SIGHUP) {
			signetd_reload(&d);
			last_tick = sg_now_ns();
		} else if (sg_now_ns() - last_tick >= 1000000000ull - 1000000ull) {
			/* Once a second, whatever the watchdog's pace (1 ms of
			 * slack for the wait's rounding). */
			signetd_housekeeping(&d);
			last_tick = sg_now_ns();
		}
		signetd_watchdog_ping(&d);
	}
	stop_bounded(&d);
	sg_log(SG_LOG_INFO, "stopped", SG_F_END);
	sg_notify_free(d.notify);
	sg_opt_free(opts, NOPTS, &d.a);
	if (sg_hsm_threads_left()) {
		/* An HSM health probe is still inside the PKCS#11 module (the
		 * stop did not wait for it: sg_hsm.h). exit() would run the
		 * module's destructors under that call, which may wait for it
		 * for good; _exit ends the process as it stands. */
		sg_log(SG_LOG_WARN, "exiting without library destructors: a PKCS#11 call is still inside the module",
		       SG_F_INT("threads", sg_hsm_threads_left()), SG_F_END);
		fflush(NULL);
		_exit(0);
	}
	return 0;
}
