/*
 * signet-trust: the trust-bundle controller as a program of its own. It
 * holds no key and no HSM session, so it runs with its own small RBAC
 * (packaging/kubernetes/trust.yaml), beside signetd or without it.
 *
 *   signet-trust [flags]            run the Bundle controller (sg_trust.h)
 *   signet-trust package [flags]    write a default CA package file from a
 *                                   PEM file (Debian's ca-certificates)
 *
 * Flags are trust-manager's where it has them, with its defaults, so its
 * Deployment's arguments carry over. Leader election uses trust-manager's
 * Lease name by default: while a cluster moves from trust-manager to
 * signet-trust, at most one of the two writes.
 *
 * The main thread starts things, ticks the controller table once a second
 * (it restarts what failed to start) and waits for SIGTERM/SIGINT. Probes:
 * /healthz always answers while the process lives; the readiness path
 * answers 200 once the table runs, and on the leader only while the
 * controller runs (a standby replica is ready: it takes over when elected).
 */
#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_kube.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_names.h"
#include "sg_opt.h"
#include "sg_trust.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const formats[] = {"text", "json", NULL};

typedef struct settings {
	char *config;
	char *kubeconfig;
	int64_t kube_api_qps, kube_api_burst;
	char *trust_namespace;
	char *default_package_location;
	bool secret_targets_enabled, filter_expired, filter_non_ca;
	char *target_namespaces;
	bool leader_elect;
	char *leader_election_namespace, *leader_election_lease_name;
	int64_t lease_duration, renew_deadline, retry_period;
	char *http_address;
	int64_t metrics_port, readiness_probe_port;
	char *readiness_probe_path;
	int64_t workers;
	int log_level, log_format;
} settings;

#define S(f) offsetof(settings, f)
static const sg_opt opts[] = {
	{"config", SG_OPT_PATH, S(config), NULL, 0, 4096, NULL, "config file of \"name = value\" lines (flags override it)",
	 true},
	{"kubeconfig", SG_OPT_PATH, S(kubeconfig), NULL, 0, 4096, NULL,
	 "kubeconfig file (default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config)", false},
	{"kube-api-qps", SG_OPT_INT, S(kube_api_qps), "50", 1, 10000, NULL, "Kubernetes API requests per second", false},
	{"kube-api-burst", SG_OPT_INT, S(kube_api_burst), "100", 1, 10000, NULL, "Kubernetes API request burst", false},
	{"trust-namespace", SG_OPT_STRING, S(trust_namespace), "cert-manager", 0, 63, NULL,
	 "the only namespace Bundle sources (ConfigMaps, Secrets) are read from", false},
	{"default-package-location", SG_OPT_STRING, S(default_package_location), "", 0, 4096, NULL,
	 "default CA package file (.json) for useDefaultCAs; empty: Bundles using it fail with SourceNotFound", false},
	{"secret-targets-enabled", SG_OPT_BOOL, S(secret_targets_enabled), "false", 0, 0, NULL,
	 "allow Bundles to write Secret targets (needs Secret write access in every namespace)", false},
	{"filter-expired-certificates", SG_OPT_BOOL, S(filter_expired), "false", 0, 0, NULL,
	 "leave expired certificates out of every bundle", false},
	{"filter-non-ca-certs", SG_OPT_BOOL, S(filter_non_ca), "false", 0, 0, NULL,
	 "leave certificates that are not CAs out of every bundle", false},
	{"target-namespaces", SG_OPT_STRING, S(target_namespaces), "", 0, 65536, NULL,
	 "comma-separated namespaces that may get targets (empty: any namespace a Bundle selects)", false},
	{"leader-elect", SG_OPT_BOOL, S(leader_elect), "true", 0, 0, NULL, "elect a leader among replicas (Lease)", false},
	{"leader-election-namespace", SG_OPT_STRING, S(leader_election_namespace), "", 0, 63, NULL,
	 "namespace of the Lease (empty: the trust namespace)", false},
	{"leader-election-lease-name", SG_OPT_STRING, S(leader_election_lease_name), "trust-manager-leader-election", 1,
	 253, NULL, "name of the Lease (trust-manager's, so the two never write at once)", false},
	{"leader-election-lease-duration", SG_OPT_DURATION, S(lease_duration), "15s", 2, 3600, NULL,
	 "how long a Lease holds without renewal", false},
	{"leader-election-renew-deadline", SG_OPT_DURATION, S(renew_deadline), "10s", 1, 3600, NULL,
	 "how long the leader tries to renew before it steps down", false},
	{"leader-election-retry-period", SG_OPT_DURATION, S(retry_period), "2s", 1, 3600, NULL,
	 "time between election attempts", false},
	{"http-address", SG_OPT_STRING, S(http_address), "", 0, 256, NULL,
	 "address of the metrics and probe endpoints (default: 0.0.0.0 in a pod, else 127.0.0.1)", false},
	{"metrics-port", SG_OPT_INT, S(metrics_port), "9402", 0, 65535, NULL, "Prometheus /metrics port (0: any)", false},
	{"readiness-probe-port", SG_OPT_INT, S(readiness_probe_port), "6060", 0, 65535, NULL,
	 "readiness and health probe port (0: any; may equal metrics-port)", false},
	{"readiness-probe-path", SG_OPT_STRING, S(readiness_probe_path), "/readyz", 1, 256, NULL,
	 "readiness probe path (/healthz is served beside it)", false},
	{"workers", SG_OPT_INT, S(workers), "2", 1, SG_CTRL_WORKERS_MAX, NULL, "Bundles reconciled at once", false},
	{"log-level", SG_OPT_ENUM, S(log_level), "info", 0, 0, levels, "log level", false},
	{"log-format", SG_OPT_ENUM, S(log_format), "text", 0, 0, formats, "log format", false},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

typedef struct program {
	settings s;
	sg_kube *kube, *kube_lease;
	sg_trust_package *package;
	sg_trust *trust;
	sg_ctrl_manager *table;
	sg_metrics *metrics;
	sg_http_server *http_metrics, *http_probe;
	atomic_bool started;
	char *ns_buf;
} program;

/* ---- endpoints ---- */

static int serve_metrics(sg_http_response *resp, void *arg)
{
	program *p = arg;
	char *text = NULL;
	size_t len = 0;
	SG_TRY(sg_metrics_render(p->metrics, &text, &len));
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
	sg_http_response_take(resp, text, len);
	return SG_OK;
}

static bool ready(program *p)
{
	if (!atomic_load(&p->started))
		return false;
	/* Leader: only while the controller runs. Standby: ready to lead. */
	bool leads = !p->s.leader_elect || sg_ctrl_manager_leading(p->table);
	return !leads || sg_ctrl_running(sg_trust_controller(p->trust));
}

static int serve_ready(sg_http_response *resp, void *arg)
{
	if (ready(arg)) {
		sg_http_response_static(resp, "ok\n", 3);
	} else {
		resp->status = 503;
		sg_http_response_static(resp, "not ready\n", 10);
	}
	return SG_OK;
}

static int serve_health(sg_http_response *resp, void *arg)
{
	(void)arg;
	sg_http_response_static(resp, "ok\n", 3);
	return SG_OK;
}

static int start_http(program *p)
{
	const settings *s = &p->s;
	const char *addr = s->http_address;
	if (!addr || !*addr) {
		const char *k8s = getenv("KUBERNETES_SERVICE_HOST");
		addr = k8s && *k8s ? "0.0.0.0" : "127.0.0.1";
	}
	bool same = s->metrics_port == s->readiness_probe_port;
	sg_http_route probe[] = {{s->readiness_probe_path, serve_ready, p}, {"/healthz", serve_health, p}};
	sg_http_route routes[3] = {{"/metrics", serve_metrics, p}, probe[0], probe[1]};
	sg_http_options o = {.bind_address = addr, .port = (uint16_t)s->metrics_port, .routes = routes,
	                     .nroutes = same ? 3 : 1};
	SG_TRY(sg_http_server_start(&p->http_metrics, &o));
	sg_log(SG_LOG_INFO, "metrics endpoint", SG_F_STR("address", addr),
	       SG_F_INT("port", sg_http_server_port(p->http_metrics)), SG_F_END);
	if (same)
		return SG_OK;
	o.port = (uint16_t)s->readiness_probe_port;
	o.routes = probe;
	o.nroutes = 2;
	SG_TRY(sg_http_server_start(&p->http_probe, &o));
	sg_log(SG_LOG_INFO, "probe endpoint", SG_F_STR("address", addr),
	       SG_F_INT("port", sg_http_server_port(p->http_probe)), SG_F_END);
	return SG_OK;
}

/* ---- start and stop ---- */

static int new_client(const settings *s, sg_kube **out, long timeout_ms)
{
	sg_kube_config *cfg = NULL;
	SG_TRY(sg_kube_config_load(&cfg, s->kubeconfig));
	sg_kube_options ko = {.qps = (double)s->kube_api_qps, .burst = (int)s->kube_api_burst,
	                      .request_timeout_ms = timeout_ms};
	return sg_kube_new(out, &cfg, &ko);
}

static int hostname_identity(char *out, size_t cap)
{
	char host[256] = "signet-trust";
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "signet-trust");
	host[sizeof(host) - 1] = '\0';
	unsigned r = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
	snprintf(out, cap, "%.200s_%08x", host, r);
	return SG_OK;
}

static int trust_metrics(void *self, sg_metrics *reg)
{
	return sg_trust_metrics(self, reg);
}

static int start(program *p)
{
	settings *s = &p->s;
	SG_ENSURE(s->lease_duration > s->renew_deadline && s->renew_deadline * 10 > s->retry_period * 12, SG_EINVAL,
	          "leader election: lease duration > renew deadline > 1.2 x retry period is required");
	/* Settings first, so a typo is named before any connection is tried. */
	SG_ENSURE(sg_names_dns_label(s->trust_namespace, strlen(s->trust_namespace), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "trust-namespace \"%s\" is not a namespace name", s->trust_namespace);
	if (s->default_package_location && *s->default_package_location) {
		SG_TRY(sg_trust_package_load(&p->package, s->default_package_location));
		sg_log(SG_LOG_INFO, "default CA package", SG_F_STR("id", sg_trust_package_id(p->package)), SG_F_END);
	}
	const char *nss[SG_TRUST_TARGET_NAMESPACES_MAX];
	size_t nns = 0;
	if (s->target_namespaces && *s->target_namespaces) {
		SG_ENSURE(p->ns_buf = strdup(s->target_namespaces), SG_EINTERNAL, "out of memory");
		SG_TRY(sg_opt_split_list(p->ns_buf, nss, SG_TRUST_TARGET_NAMESPACES_MAX, &nns, "target-namespaces"));
	}
	/* Writers stop before a successor can lead (sg_cluster.c has the
	 * reasoning): a write may take lease - renew deadline. */
	long writers_ms = (long)(s->lease_duration - s->renew_deadline) * 1000;
	long lease_ms = (long)(s->renew_deadline - s->retry_period) * 1000;
	SG_TRY(new_client(s, &p->kube, s->leader_elect && writers_ms >= 1000 ? writers_ms : 0));
	sg_trust_options to = {
		.kube = p->kube,
		.trust_namespace = s->trust_namespace,
		.package = p->package,
		.secret_targets_enabled = s->secret_targets_enabled,
		.filter_expired = s->filter_expired,
		.filter_non_ca = s->filter_non_ca,
		.target_namespaces = nss,
		.ntarget_namespaces = nns,
		.workers = (unsigned)s->workers,
	};
	SG_TRY(sg_trust_new(&p->trust, &to));

	char identity[300];
	sg_ctrl_manager_opts mo = {0};
	if (s->leader_elect) {
		SG_TRY(new_client(s, &p->kube_lease, lease_ms >= 1000 ? lease_ms : 1000));
		SG_TRY(hostname_identity(identity, sizeof(identity)));
		const char *lns = s->leader_election_namespace && *s->leader_election_namespace ? s->leader_election_namespace
		                                                                               : s->trust_namespace;
		SG_ENSURE(sg_names_dns_label(lns, strlen(lns), SG_NAMES_LABEL_MAX), SG_EINVAL,
		          "leader-election-namespace \"%s\" is not a namespace name", lns);
		mo.lease_kube = p->kube_lease;
		mo.lease = (sg_lease_opts){
			.ns = lns,
			.name = s->leader_election_lease_name,
			.identity = identity,
			.lease_duration_ms = (unsigned)s->lease_duration * 1000u,
			.renew_deadline_ms = (unsigned)s->renew_deadline * 1000u,
			.retry_period_ms = (unsigned)s->retry_period * 1000u,
		};
	}
	SG_TRY(sg_ctrl_manager_new(&p->table, &mo));
	sg_ctrl_row row = {.ctrl = sg_trust_controller(p->trust), .leader_only = true, .self = p->trust,
	                   .metrics = trust_metrics};
	SG_TRY(sg_ctrl_manager_add(p->table, &row));
	SG_TRY(sg_metrics_new(&p->metrics));
	SG_TRY(sg_ctrl_manager_metrics(p->table, p->metrics));
	SG_TRY(start_http(p));
	SG_TRY(sg_ctrl_manager_start(p->table));
	atomic_store(&p->started, true);
	sg_log(SG_LOG_INFO, "signet-trust started", SG_F_STR("trust_namespace", s->trust_namespace),
	       SG_F_STR("leader_election", s->leader_elect ? "on" : "off"),
	       SG_F_STR("secret_targets", s->secret_targets_enabled ? "enabled" : "disabled"), SG_F_END);
	return SG_OK;
}

static void stop(program *p)
{
	atomic_store(&p->started, false);
	sg_http_server_stop(p->http_probe);
	sg_http_server_stop(p->http_metrics);
	sg_ctrl_manager_free(p->table); /* leadership ends and the Lease is released */
	sg_trust_free(p->trust);
	sg_metrics_free(p->metrics);
	sg_kube_free(p->kube_lease);
	sg_kube_free(p->kube);
	sg_trust_package_free(p->package);
	free(p->ns_buf);
}

/* ---- signet-trust package ---- */

typedef struct package_args {
	char *certificates, *name, *version, *output;
} package_args;

static const sg_opt package_opts[] = {
	{"certificates", SG_OPT_PATH, offsetof(package_args, certificates), "/etc/ssl/certs/ca-certificates.crt", 0,
	 4096, NULL, "PEM file of the CAs to package", true},
	{"name", SG_OPT_STRING, offsetof(package_args, name), "cert-manager-debian", 1, 128, NULL,
	 "package name (the first part of status.defaultCAVersion)", true},
	{"version", SG_OPT_STRING, offsetof(package_args, version), NULL, 1, 128, NULL,
	 "package version, e.g. the ca-certificates package's (required)", true},
	{"output", SG_OPT_PATH, offsetof(package_args, output), NULL, 0, 4096, NULL,
	 "the package file to write; must end in .json (required)", true},
};
#define NPACKAGE_OPTS (sizeof(package_opts) / sizeof(package_opts[0]))

static int package_main(int argc, char **argv)
{
	package_args a = {0};
	sg_opt_result res = {0};
	int rc = sg_opt_parse(package_opts, NPACKAGE_OPTS, &a, argc, argv, &res);
	if (rc == SG_OK && res.help) {
		printf("Usage: signet-trust package --version V --output FILE.json [--certificates PEM] [--name N]\n"
		       "Writes a default CA package for --default-package-location from a PEM file of CAs.\n\n");
		sg_opt_usage(package_opts, NPACKAGE_OPTS, stdout);
		sg_opt_free(package_opts, NPACKAGE_OPTS, &a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK && (!a.version || !a.output))
		rc = sg_error_set(SG_EINVAL, "--version and --output are required");
	int status = 2;
	if (rc == SG_OK) {
		rc = sg_trust_package_write(a.certificates, a.name, a.version, a.output);
		status = rc == SG_OK ? 0 : 1;
	}
	if (rc < 0)
		fprintf(stderr, "signet-trust package: %s\n", sg_error_last()->msg);
	sg_opt_free(package_opts, NPACKAGE_OPTS, &a);
	return status;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "package") == 0)
		return package_main(argc - 2, argv + 2);
	static program p;
	sg_opt_result res = {0};
	int rc = sg_opt_parse(opts, NOPTS, &p.s, argc - 1, argv + 1, &res);
	if (rc == SG_OK && res.help) {
		printf("Usage: signet-trust [flags]\n"
		       "       signet-trust package --help\n"
		       "Keeps trust bundles (trust.cert-manager.io/v1alpha1 Bundle) in the cluster's namespaces.\n"
		       "Every flag may also be a line \"name = value\" in the --config file; flags override it.\n\n");
		sg_opt_usage(opts, NOPTS, stdout);
		sg_opt_free(opts, NOPTS, &p.s);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc < 0) {
		fprintf(stderr, "signet-trust: %s\n", sg_error_last()->msg);
		sg_opt_free(opts, NOPTS, &p.s);
		return 2;
	}
	sg_log_configure((sg_log_level)p.s.log_level, (sg_log_format)p.s.log_format);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = start(&p);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_log(SG_LOG_ERROR, "cannot start", SG_F_STR("error", e.msg), SG_F_END);
		fprintf(stderr, "signet-trust: %s\n", e.msg);
		stop(&p);
		sg_opt_free(opts, NOPTS, &p.s);
		return 1;
	}
	for (;;) {
		struct timespec one = {1, 0};
		int sig = sigtimedwait(&set, NULL, &one);
		if (sig == SIGTERM || sig == SIGINT) {
			sg_log(SG_LOG_INFO, "shutting down", SG_F_STR("signal", sig == SIGTERM ? "TERM" : "INT"), SG_F_END);
			break;
		}
		sg_ctrl_manager_tick(p.table);
	}
	stop(&p);
	sg_log(SG_LOG_INFO, "stopped", SG_F_END);
	sg_opt_free(opts, NOPTS, &p.s);
	return 0;
}
