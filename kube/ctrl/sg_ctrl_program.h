/*
 * sg_ctrl_program: what a controller program's main needs around its
 * controller table (signet-trust, signet-operator): the Kubernetes client
 * from --kubeconfig and the client limits, a Lease identity, the metrics
 * and probe endpoints, and the signal loop that ticks the table.
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

SG_API int sg_ctrl_program_main(const sg_ctrl_program_def *d, int argc, char **argv);

#endif
