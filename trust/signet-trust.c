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
 *
 * The admission webhook (sg_trust_webhook.h) is trust-manager's: HTTPS on
 * webhook-host:webhook-port with tls.crt and tls.key of
 * webhook-certificate-dir, on every replica (the API server calls any
 * one). The once-a-second tick also watches the two files: the webhook
 * starts when both are there (a cert-manager Certificate may be issued
 * after the pod starts) and takes a changed pair without dropping a
 * connection (sg_http_server_set_tls); a pair that does not load keeps the
 * previous one and is reported once per change. Readiness does not wait
 * for the webhook, so a Deployment without the certificate (signet's own
 * manifests) runs as before, with one warning.
 */
#include "sg_ctrl.h"
#include "sg_ctrl_program.h"
#include "sg_error.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_kube.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_names.h"
#include "sg_opt.h"
#include "sg_secret.h"
#include "sg_trust.h"
#include "sg_trust_webhook.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const formats[] = {"text", "json", NULL};

/* component-base's lists (PreferredTLSCipherNames, InsecureTLSCipherNames),
 * for the help text; obs/sg_http_tls.c accepts each, which test_webhook.py
 * shows. */
#define TLS_PREFERRED                                                                                                  \
	"TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256, "                               \
	"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, "                              \
	"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, "                              \
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, "                      \
	"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "                                  \
	"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, "                                  \
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256, "                          \
	"TLS_RSA_WITH_AES_128_CBC_SHA, TLS_RSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_256_CBC_SHA, "                 \
	"TLS_RSA_WITH_AES_256_GCM_SHA384"
#define TLS_INSECURE                                                                                                   \
	"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, TLS_ECDHE_ECDSA_WITH_RC4_128_SHA, "                                  \
	"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA, TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256, "                                 \
	"TLS_ECDHE_RSA_WITH_RC4_128_SHA, TLS_RSA_WITH_3DES_EDE_CBC_SHA, TLS_RSA_WITH_AES_128_CBC_SHA256, "              \
	"TLS_RSA_WITH_RC4_128_SHA"

typedef struct settings {
	char *config;
	sg_ctrl_common c;
	char *trust_namespace;
	char *default_package_location;
	bool secret_targets_enabled, filter_expired, filter_non_ca;
	char *target_namespaces;
	int64_t workers;
	char *webhook_host;
	int64_t webhook_port;
	char *webhook_certificate_dir;
	char *tls_min_version, *tls_cipher_suites;
	int log_level, log_format;
} settings;

#define S(f) offsetof(settings, f)
/* clang-format off: the table keeps its one-row-per-flag layout */
static const sg_opt opts[] = {
	{"config", SG_OPT_PATH, S(config), NULL, 0, 4096, NULL, "config file of \"name = value\" lines (flags override it)",
	 true},
	SG_CTRL_OPTS_CLIENT(settings, c, "50", "100"),
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
	SG_CTRL_OPTS_LEASE(settings, c, "trust-manager-leader-election",
	                   "namespace of the Lease (empty: the trust namespace)",
	                   "name of the Lease (trust-manager's, so the two never write at once)"),
	SG_CTRL_OPTS_ENDPOINTS(settings, c),
	{"workers", SG_OPT_INT, S(workers), "2", 1, SG_CTRL_WORKERS_MAX, NULL, "Bundles reconciled at once", false},
	{"webhook-host", SG_OPT_STRING, S(webhook_host), "0.0.0.0", 1, 64, NULL,
	 "numeric address the Bundle validating webhook listens on (HTTPS)", false},
	{"webhook-port", SG_OPT_INT, S(webhook_port), "6443", 0, 65535, NULL,
	 "port of the webhook, path " SG_TRUST_WEBHOOK_PATH " (0: any free port, logged)", false},
	{"webhook-certificate-dir", SG_OPT_STRING, S(webhook_certificate_dir), "/tls", 0, 4000, NULL,
	 "folder of the webhook's tls.crt and tls.key (reloaded when they change; the webhook starts once both "
	 "exist); empty: no webhook",
	 false},
	/* trust-manager's TLS flags (cert-manager's, from Kubernetes'
	 * component-base): the values are Go's names (obs/sg_http.h). */
	{"tls-min-version", SG_OPT_STRING, S(tls_min_version), "", 0, 64, NULL,
	 "minimum TLS version of the webhook, one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13 (empty: "
	 "VersionTLS12)",
	 false},
	{"tls-cipher-suites", SG_OPT_STRING, S(tls_cipher_suites), "", 0, 4096, NULL,
	 "comma-separated TLS 1.2 (and older) cipher suites of the webhook, by Go's names (empty: GnuTLS's defaults; "
	 "TLS 1.3 names change nothing, and TLS 1.3 uses the AEAD ciphers of the listed suites; a list GnuTLS cannot "
	 "serve exactly, since it enables suites by key exchange, cipher and MAC, is refused at start naming what it "
	 "would add). Preferred values: " TLS_PREFERRED ". Insecure values: " TLS_INSECURE ".",
	 false},
	{"log-level", SG_OPT_LOG_LEVEL, S(log_level), "info", 0, 0, NULL,
	 "log level, or a klog verbosity as trust-manager's: 0-1 info, 2-10 debug", false},
	{"log-format", SG_OPT_ENUM, S(log_format), "text", 0, 0, formats, "log format", false},
};
/* clang-format on */
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* What identifies a file's contents cheaply (a change means "re-read"). */
typedef struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
} file_id;

/* The webhook: its server (NULL until the certificate is there) and what
 * the tick knows of the files. */
typedef struct webhook {
	sg_http_server *srv;
	file_id crt, key;           /* the pair last served, or refused */
	bool known;                 /* crt and key say something */
	char last_error[SG_ERROR_MSG_MAX]; /* the last failure reported */
	bool waiting_reported;
	sg_series *answers[3];      /* by sg_trust_admission */
} webhook;

typedef struct program {
	settings s;
	sg_ctrl_common_run run; /* the clients and the Lease */
	sg_kube *kube;          /* run.kube */
	sg_trust_package *package;
	sg_trust *trust;
	sg_ctrl_manager *table;
	sg_metrics *metrics;
	sg_ctrl_endpoints *endpoints;
	webhook wh;
	uint16_t tls_suites[SG_HTTP_TLS_SUITES_MAX];
	sg_http_tls_policy tls; /* the webhook's, from --tls-min-version and --tls-cipher-suites */
	atomic_bool started;
	char *ns_buf;
} program;

/* ---- endpoints ---- */

static bool ready(void *arg)
{
	program *p = arg;
	if (!atomic_load(&p->started))
		return false;
	/* Leader: only while the controller runs. Standby: ready to lead. */
	bool leads = !p->s.c.leader_elect || sg_ctrl_manager_leading(p->table);
	return !leads || sg_ctrl_running(sg_trust_controller(p->trust));
}


/* ---- the admission webhook ---- */

/* Largest tls.crt or tls.key read (a chain of a few certificates is a few
 * KiB). */
#define WEBHOOK_FILE_MAX (256u << 10)
/* Connections the webhook holds at once, and per client address: the API
 * server calls from a few addresses, at most one call per Bundle write in
 * flight; per address, so that one hostile pod cannot hold them all. */
#define WEBHOOK_CONNECTIONS 64
#define WEBHOOK_PER_IP 16
/* Seconds a connection has for its request (the handshake and the whole
 * body included), and again for the answer: no API server waits longer
 * for a call than its configuration's timeoutSeconds (default 10;
 * trust-manager's and the OpenShift operator's say 5). */
#define WEBHOOK_TIMEOUT 10
/* Bodies held at once: two of the largest AdmissionReview, and some. */
#define WEBHOOK_BODY_BUDGET (16u << 20)

static const char *const admission_names[] = {"allowed", "denied", "errored"};

static int serve_admission(sg_http_response *resp, const sg_http_request *req, void *arg)
{
	program *p = arg;
	char *out = NULL;
	size_t len = 0;
	sg_trust_admission result = SG_TRUST_ADMISSION_ERRORED;
	SG_TRY(sg_trust_admission_review(req->body, req->body_len, req->content_type, &out, &len, &result));
	sg_series_add(p->wh.answers[result], 1);
	sg_log(SG_LOG_DEBUG, "admission review", SG_F_STR("result", admission_names[result]),
	       SG_F_INT("bytes", (int64_t)req->body_len), SG_F_END);
	resp->content_type = "application/json";
	sg_http_response_take(resp, out, len);
	return SG_OK;
}

static int webhook_metrics(program *p)
{
	sg_metric *f = NULL;
	static const char *const label[] = {"result"};
	SG_TRY(sg_metrics_counter(&f, p->metrics, "signet_trust_webhook_reviews_total",
	                          "Bundle admission reviews answered: allowed, denied (an invalid Bundle) or errored "
	                          "(not a well-formed review).",
	                          label, 1));
	for (int i = 0; i < 3; i++)
		SG_TRY(sg_metric_series(&p->wh.answers[i], f, &admission_names[i]));
	return SG_OK;
}

static file_id id_of(const struct stat *st)
{
	return (file_id){.dev = st->st_dev, .ino = st->st_ino, .size = st->st_size, .mtime = st->st_mtim};
}

static bool same_id(const file_id *a, const file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
	       a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Starts the webhook with the pair, or gives it the pair. */
static int webhook_use(program *p, const char *crt, const char *key)
{
	if (p->wh.srv)
		return sg_http_server_set_tls(p->wh.srv, crt, key);
	const settings *s = &p->s;
	const sg_http_post_route route = {SG_TRUST_WEBHOOK_PATH, serve_admission, p, SG_TRUST_WEBHOOK_BODY_MAX};
	const sg_http_options o = {
		.bind_address = s->webhook_host,
		.port = (uint16_t)s->webhook_port,
		.post_routes = &route,
		.npost_routes = 1,
		.body_budget = WEBHOOK_BODY_BUDGET,
		.max_connections = WEBHOOK_CONNECTIONS,
		.max_connections_per_ip = WEBHOOK_PER_IP,
		.request_timeout_seconds = WEBHOOK_TIMEOUT,
		.timeout_seconds = WEBHOOK_TIMEOUT,
		.tls_cert_pem = crt,
		.tls_key_pem = key,
		.tls_policy = &p->tls,
	};
	SG_TRY(sg_http_server_start(&p->wh.srv, &o));
	sg_log(SG_LOG_INFO, "webhook serving", SG_F_STR("address", s->webhook_host),
	       SG_F_INT("port", sg_http_server_port(p->wh.srv)), SG_F_STR("path", SG_TRUST_WEBHOOK_PATH), SG_F_END);
	return SG_OK;
}

/* Reads the pair and uses it. */
static int webhook_load(program *p, const char *crt_path, const char *key_path)
{
	uint8_t *crt = NULL, *key = NULL;
	size_t crt_len = 0, key_len = 0;
	SG_TRY(sg_file_read(crt_path, WEBHOOK_FILE_MAX, &crt, &crt_len));
	int rc = sg_file_read(key_path, WEBHOOK_FILE_MAX, &key, &key_len);
	if (rc == SG_OK)
		rc = webhook_use(p, (const char *)crt, (const char *)key);
	free(crt);
	if (key) {
		sg_wipe(key, key_len);
		free(key);
	}
	return rc;
}

/* Once a second: start the webhook when the pair appears, reload it when
 * either file changes. Failures keep what serves and are logged once each. */
static void webhook_tick(void *arg)
{
	program *p = arg;
	const char *dir = p->s.webhook_certificate_dir;
	if (!dir || !*dir)
		return;
	char crt[PATH_MAX], key[PATH_MAX];
	snprintf(crt, sizeof(crt), "%s/tls.crt", dir); /* the setting is shorter than PATH_MAX - 8 */
	snprintf(key, sizeof(key), "%s/tls.key", dir);
	struct stat cs, ks;
	if (stat(crt, &cs) != 0 || stat(key, &ks) != 0) {
		if (!p->wh.srv && !p->wh.waiting_reported)
			sg_log(SG_LOG_WARN, "webhook: waiting for its certificate", SG_F_STR("tls.crt", crt),
			       SG_F_STR("tls.key", key), SG_F_END);
		p->wh.waiting_reported = true;
		return;
	}
	file_id c = id_of(&cs), k = id_of(&ks);
	if (p->wh.known && same_id(&c, &p->wh.crt) && same_id(&k, &p->wh.key))
		return;
	bool reload = p->wh.srv != NULL;
	if (webhook_load(p, crt, key) < 0) {
		/* A pair that does not load (SG_EINVAL) waits for the files to
		 * change; anything else (the port taken, a file that vanished
		 * between stat and read) is retried on the next tick. Each
		 * failure is reported once. */
		if (sg_error_last()->code == SG_EINVAL) {
			p->wh.crt = c;
			p->wh.key = k;
			p->wh.known = true;
		}
		if (strcmp(p->wh.last_error, sg_error_last()->msg) != 0) {
			snprintf(p->wh.last_error, sizeof(p->wh.last_error), "%s", sg_error_last()->msg);
			sg_log_error_last(SG_LOG_WARN, reload ? "webhook: the new certificate cannot be used; keeping the "
			                                        "previous one"
			                                      : "webhook: cannot start");
		}
		return;
	}
	p->wh.crt = c;
	p->wh.key = k;
	p->wh.known = true;
	p->wh.last_error[0] = '\0';
	if (reload)
		sg_log(SG_LOG_INFO, "webhook certificate reloaded", SG_F_STR("tls.crt", crt), SG_F_END);
}

/* ---- start and stop ---- */

/* What sg_http binds to: a numeric address, IPv6 optionally in brackets. */
static bool numeric_address(const char *a)
{
	char host[INET6_ADDRSTRLEN + 1];
	size_t n = strlen(a);
	if (n >= 2 && a[0] == '[' && a[n - 1] == ']') {
		a++;
		n -= 2;
	}
	if (n >= sizeof(host))
		return false;
	memcpy(host, a, n);
	host[n] = '\0';
	unsigned char buf[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The error just set, prefixed with the flag it is about. */
static int flag_error(const char *flag)
{
	char why[512];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	SG_BAIL(SG_EINVAL, "%s: %s", flag, why);
}

/* --tls-min-version and --tls-cipher-suites into p->tls, and whether the
 * webhook can serve exactly that. */
static int webhook_tls(program *p)
{
	const settings *s = &p->s;
	if (sg_http_tls_version_parse(s->tls_min_version, &p->tls.min_version) < 0)
		return flag_error("tls-min-version");
	if (sg_http_tls_suites_parse(s->tls_cipher_suites, p->tls_suites, SG_HTTP_TLS_SUITES_MAX,
	                             &p->tls.ncipher_suites) < 0)
		return flag_error("tls-cipher-suites");
	p->tls.cipher_suites = p->tls_suites;
	if (sg_http_tls_policy_check(&p->tls) < 0)
		return flag_error("tls-min-version, tls-cipher-suites");
	return SG_OK;
}

static int start(void *self)
{
	program *p = self;
	settings *s = &p->s;
	/* Settings first, so a typo is named before any connection is tried. */
	SG_ENSURE(sg_names_dns_label(s->trust_namespace, strlen(s->trust_namespace), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "trust-namespace \"%s\" is not a namespace name", s->trust_namespace);
	SG_ENSURE(numeric_address(s->webhook_host), SG_EINVAL,
	          "webhook-host \"%s\" is not a numeric IPv4 or IPv6 address", s->webhook_host);
	/* The webhook's TLS, checked now: its certificate may come much later. */
	SG_TRY(webhook_tls(p));
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
	SG_TRY(sg_ctrl_common_clients(&s->c, "signet-trust", s->trust_namespace, &p->run));
	p->kube = p->run.kube;
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

	SG_TRY(sg_ctrl_manager_new(&p->table, &p->run.mo));
	sg_ctrl_row row = {.ctrl = sg_trust_controller(p->trust), .leader_only = true};
	SG_TRY(sg_ctrl_manager_add(p->table, &row));
	SG_TRY(sg_metrics_new(&p->metrics));
	SG_TRY(sg_ctrl_manager_metrics(p->table, p->metrics));
	SG_TRY(webhook_metrics(p));
	SG_TRY(sg_ctrl_common_endpoints(&s->c, p->metrics, ready, p, &p->endpoints));
	webhook_tick(p);
	SG_TRY(sg_ctrl_manager_start(p->table));
	atomic_store(&p->started, true);
	sg_log(SG_LOG_INFO, "signet-trust started", SG_F_STR("trust_namespace", s->trust_namespace),
	       SG_F_STR("leader_election", s->c.leader_elect ? "on" : "off"),
	       SG_F_STR("secret_targets", s->secret_targets_enabled ? "enabled" : "disabled"), SG_F_END);
	return SG_OK;
}

static void stop(void *self)
{
	program *p = self;
	atomic_store(&p->started, false);
	sg_http_server_stop(p->wh.srv);
	sg_ctrl_endpoints_stop(p->endpoints);
	p->endpoints = NULL;
	sg_ctrl_manager_free(p->table); /* leadership ends and the Lease is released */
	sg_trust_free(p->trust);
	sg_metrics_free(p->metrics);
	sg_ctrl_common_free(&p->run);
	p->kube = NULL;
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
	sg_ctrl_program_def d = {
		.name = "signet-trust",
		.usage = "Usage: signet-trust [flags]\n"
		         "       signet-trust package --help\n"
		         "Keeps trust bundles (trust.cert-manager.io/v1alpha1 Bundle) in the cluster's namespaces.\n"
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
		.tick = webhook_tick,
	};
	return sg_ctrl_program_main(&d, argc, argv);
}
