/*
 * sg_ctrl_program: what a controller program's main needs around its
 * controller table (signet-trust, signet-operator; signet-agent uses the
 * client and the endpoints): the flags they share (sg_ctrl_common, rows
 * written once), the Kubernetes client from --kubeconfig and the client
 * limits, the Lease and its identity, the metrics and probe endpoints, and
 * the signal loop that ticks the table.
 *
 * Endpoints: /metrics on metrics_port; the readiness path and /healthz on
 * probe_port (both on one server when the ports are equal). /healthz
 * answers while the process lives; the readiness path asks ready(arg).
 * The bind address defaults to 0.0.0.0 in a pod (KUBERNETES_SERVICE_HOST
 * set) and 127.0.0.1 elsewhere. Each server's port is logged ("metrics
 * endpoint", "probe endpoint"), which is how tests find ephemeral ports.
 *
 * Ownership: the registry and arg are borrowed until stop.
 */
#ifndef SG_CTRL_PROGRAM_H
#define SG_CTRL_PROGRAM_H

#include "sg_ctrl.h"
#include "sg_http.h"
#include "sg_metrics.h"
#include "sg_opt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A client from kubeconfig (NULL: $KUBECONFIG, in-cluster, ~/.kube/config)
 * with qps/burst and a request timeout (0: the client's default). */
SG_API int sg_ctrl_client_new(sg_kube **out, const char *kubeconfig, int64_t qps, int64_t burst,
                              long timeout_ms) SG_MUST_CHECK;

/* A Lease holder identity: "<hostname>_<8 hex>", unique per process
 * start; program names the fallback when there is no hostname. */
SG_API void sg_ctrl_identity(char *out, size_t cap, const char *program);

typedef struct sg_ctrl_endpoints sg_ctrl_endpoints;

typedef struct sg_ctrl_endpoints_opts {
	const char *address; /* NULL or "": the default above */
	int64_t metrics_port, probe_port;
	const char *probe_path;
	sg_metrics *metrics;
	bool (*ready)(void *arg);
	void *arg;
} sg_ctrl_endpoints_opts;

SG_API int sg_ctrl_endpoints_start(sg_ctrl_endpoints **out, const sg_ctrl_endpoints_opts *o) SG_MUST_CHECK;
/* Stops both servers and frees; accepts NULL. */
SG_API void sg_ctrl_endpoints_stop(sg_ctrl_endpoints *e);

/* Blocks SIGTERM and SIGINT (call before any thread starts) and ignores
 * SIGPIPE. */
SG_API void sg_ctrl_signals_block(void);
/* Ticks the table, then tick(arg) when given, once a second until SIGTERM
 * or SIGINT; logs which. */
SG_API void sg_ctrl_run_until_signal(sg_ctrl_manager *m, void (*tick)(void *arg), void *arg);

/* A controller program's main: parses the flags (--help prints usage
 * then every flag; a bad flag or an extra argument exits 2 with the
 * reason), configures logging, blocks the signals, runs start (exit 1
 * with its error, after stop), ticks *table until SIGTERM/SIGINT, stops.
 * Returns the exit status. */
typedef struct sg_ctrl_program_def {
	const char *name;  /* for messages: "signet-trust" */
	const char *usage; /* printed before the flags by --help */
	const sg_opt *opts;
	size_t nopts;
	void *settings;                /* the struct the opts fill */
	const int *log_level, *log_format; /* in settings */
	int (*start)(void *self);
	void (*stop)(void *self);
	void *self;
	sg_ctrl_manager *const *table; /* the table start made */
	void (*tick)(void *self);      /* optional, once a second beside the table's */
} sg_ctrl_program_def;

/* The program's main: first makes jansson clear what it frees
 * (sg_kube_json_wipe_frees), then parses the flags, starts, runs the table
 * until a signal and stops. */
SG_API int sg_ctrl_program_main(const sg_ctrl_program_def *d, int argc, char **argv);

/* ---- the flags every controller program shares ---- */

/* A program embeds this in its settings and lists the rows of the
 * SG_CTRL_OPTS_* macros in its sg_opt table (T: the settings type, m: this
 * member), so the names, bounds and help of the shared flags are written
 * once. The fields are filled by sg_opt like the program's own. */
typedef struct sg_ctrl_common {
	char *kubeconfig;
	int64_t kube_api_qps, kube_api_burst;
	bool leader_elect;
	char *leader_election_namespace, *leader_election_lease_name;
	int64_t lease_duration, renew_deadline, retry_period; /* seconds */
	char *http_address;
	int64_t metrics_port, readiness_probe_port;
	char *readiness_probe_path;
} sg_ctrl_common;

#define SG_CTRL_OPT_(T, m, f) (offsetof(T, m) + offsetof(sg_ctrl_common, f))

/* clang-format off: one row per flag, as in the programs' tables */

/* --kubeconfig, --kube-api-qps, --kube-api-burst (defaults as strings). */
#define SG_CTRL_OPTS_CLIENT(T, m, qps, burst) \
	{"kubeconfig", SG_OPT_PATH, SG_CTRL_OPT_(T, m, kubeconfig), NULL, 0, 4096, NULL, \
	 "kubeconfig file (default: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config)", false}, \
	{"kube-api-qps", SG_OPT_INT, SG_CTRL_OPT_(T, m, kube_api_qps), qps, 1, 10000, NULL, \
	 "Kubernetes API requests per second", false}, \
	{"kube-api-burst", SG_OPT_INT, SG_CTRL_OPT_(T, m, kube_api_burst), burst, 1, 10000, NULL, \
	 "Kubernetes API request burst", false}

/* --leader-elect and --leader-election-*: the Lease's default name, and
 * the help of the namespace and name flags (what an empty namespace means
 * is the program's). */
#define SG_CTRL_OPTS_LEASE(T, m, lease_name, ns_help, name_help) \
	{"leader-elect", SG_OPT_BOOL, SG_CTRL_OPT_(T, m, leader_elect), "true", 0, 0, NULL, \
	 "elect a leader among replicas (Lease)", false}, \
	{"leader-election-namespace", SG_OPT_STRING, SG_CTRL_OPT_(T, m, leader_election_namespace), "", 0, 63, NULL, \
	 ns_help, false}, \
	{"leader-election-lease-name", SG_OPT_STRING, SG_CTRL_OPT_(T, m, leader_election_lease_name), lease_name, 1, \
	 253, NULL, name_help, false}, \
	{"leader-election-lease-duration", SG_OPT_DURATION, SG_CTRL_OPT_(T, m, lease_duration), "15s", 2, 3600, NULL, \
	 "how long a Lease holds without renewal", false}, \
	{"leader-election-renew-deadline", SG_OPT_DURATION, SG_CTRL_OPT_(T, m, renew_deadline), "10s", 1, 3600, NULL, \
	 "how long the leader tries to renew before it steps down", false}, \
	{"leader-election-retry-period", SG_OPT_DURATION, SG_CTRL_OPT_(T, m, retry_period), "2s", 1, 3600, NULL, \
	 "time between election attempts", false}

/* --http-address, --metrics-port, --readiness-probe-port and -path. */
#define SG_CTRL_OPTS_ENDPOINTS(T, m) \
	{"http-address", SG_OPT_STRING, SG_CTRL_OPT_(T, m, http_address), "", 0, 256, NULL, \
	 "address of the metrics and probe endpoints (default: 0.0.0.0 in a pod, else 127.0.0.1)", false}, \
	{"metrics-port", SG_OPT_INT, SG_CTRL_OPT_(T, m, metrics_port), "9402", 0, 65535, NULL, \
	 "Prometheus /metrics port (0: any)", false}, \
	{"readiness-probe-port", SG_OPT_INT, SG_CTRL_OPT_(T, m, readiness_probe_port), "6060", 0, 65535, NULL, \
	 "readiness and health probe port (0: any; may equal metrics-port)", false}, \
	{"readiness-probe-path", SG_OPT_STRING, SG_CTRL_OPT_(T, m, readiness_probe_path), "/readyz", 1, 256, NULL, \
	 "readiness probe path (/healthz is served beside it)", false}

/* clang-format on */

/* What sg_ctrl_common_clients makes; the caller frees the clients (after
 * the table that borrows them) and keeps this struct while the table
 * lives (mo points into it). */
typedef struct sg_ctrl_common_run {
	sg_kube *kube;       /* the controllers' client */
	sg_kube *kube_lease; /* the Lease's own, or NULL without election */
	sg_ctrl_manager_opts mo;
	char identity[300];
	char lease_ns[64];
} sg_ctrl_common_run;

/* The clients and the table options from c. With leader election: the
 * timings must keep lease duration > renew deadline > 1.2 x retry period;
 * the controllers' requests are cut at lease duration - renew deadline (a
 * leader that loses the Lease stops writing before a successor can lead)
 * and the Lease's at renew deadline - retry period, each at least 1 s; the
 * Lease lives in c's namespace, else lease_ns_default (checked as a
 * namespace name), held by sg_ctrl_identity(program). SG_EINVAL names a
 * bad setting. On failure the clients made are freed. */
SG_API int sg_ctrl_common_clients(const sg_ctrl_common *c, const char *program, const char *lease_ns_default,
                                  sg_ctrl_common_run *out) SG_MUST_CHECK;
/* Frees the clients; accepts a zeroed struct. */
SG_API void sg_ctrl_common_free(sg_ctrl_common_run *r);

/* Starts c's endpoints for metrics, with ready(arg) as the readiness. */
SG_API int sg_ctrl_common_endpoints(const sg_ctrl_common *c, sg_metrics *metrics, bool (*ready)(void *arg), void *arg,
                                    sg_ctrl_endpoints **out) SG_MUST_CHECK;

#endif
