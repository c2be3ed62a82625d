/*
 * signetd_impl: what the files of the signetd program share: the daemon's
 * state (struct daemon and its parts) and the calls one file makes into
 * another. On signetd's own include path only (not sg_daemon's, which
 * the program links). The shared functions carry a signetd_ prefix, so
 * that none of them can clash with a symbol of a library signetd links.
 *
 * The files: signetd.c, main, start and stop (its design comment explains
 * the whole); signetd_metrics.c, the metrics and the HTTP probes;
 * signetd_root.c, root-ca-file (read at start, followed, reloaded);
 * signetd_health.c, readiness, liveness, the systemd notifications and
 * watchdog, housekeeping and the SIGHUP reload; signetd_rootexpiry.c,
 * the CA's root nearing its expiry and the served roots past theirs.
 */
#ifndef SIGNETD_IMPL_H
#define SIGNETD_IMPL_H

#include "sg_appliance.h"
#include "sg_authn.h"
#include "sg_cluster.h"
#include "sg_daemon_settings.h"
#include "sg_grant.h"
#include "sg_grpc.h"
#include "sg_http.h"
#include "sg_jwt.h"
#include "sg_metrics.h"
#include "sg_notify.h"
#include "sg_service.h"
#include "sg_serving.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

typedef struct daemon_args {
	sg_settings s;
	sg_daemon_settings d;
	char *init_dir; /* signetd's alone: the embedded default's state folder */
} daemon_args;

/* One HSM token's health probe series (NULL when the families are full). */
typedef struct probe_series {
	sg_series *result[3]; /* signet_hsm_probes_total: ok, failed, late */
	sg_series *duration;  /* signet_hsm_probe_duration_seconds */
	sg_series *stuck;     /* signet_hsm_probes_stuck_total */
} probe_series;

/* One HSM token's signing series (NULL when the families are full). */
typedef struct token_series {
	sg_series *in_flight;    /* signet_hsm_token_in_flight */
	sg_series *sessions;     /* signet_hsm_token_sessions */
	sg_series *max_sessions; /* signet_hsm_token_max_sessions */
	sg_series *sign;         /* signet_hsm_sign_duration_seconds */
} token_series;

/* The daemon's own metrics beside the service's (sg_service.h). */
typedef struct daemon_metrics {
	sg_metrics *reg;
	sg_series *conn_refused_limit, *conn_refused_fds; /* signet_grpc_connections_refused_total */
	uint64_t seen_refused_limit, seen_refused_fds;    /* main thread only */
	/* The probe families (NULL: no probes), and per token of the HSM
	 * handle probed now, by index: set before its probes start, then
	 * read by their threads only (replaced, after those of the previous
	 * handle have stopped, when a CA rotation moves to a new key). */
	sg_metric *probe_results, *probe_duration, *probe_stuck;
	probe_series *probe;
	size_t nprobe;
	/* Per HSM token, by index; set before signatures are told to
	 * on_sign (signing threads) and refreshed by the scraper. */
	token_series *tok;
	size_t ntok;
} daemon_metrics;

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

typedef struct extra_ca {
	extra_ca_args a;
	char name[SG_KUBESIGN_CA_NAME_MAX + 1];
	sg_appliance *app;
} extra_ca;

/* What signetd_ca.c follows of the config file. */
#define SIGNETD_CA_FILES 4 /* the config file, ca-cert, ca-chain, root-cert */
struct ca_follow {
	bool on;        /* a config file is read */
	bool follow[5]; /* hsm-token, hsm-key, ca-cert, ca-chain, root-cert: the file's (no flag overrode) */
	struct file_id ids[SIGNETD_CA_FILES];
};

typedef struct daemon {
	daemon_args a;
	sg_appliance *app;
	extra_ca extra[SG_CLUSTER_CAS_MAX - 1]; /* issuer-cas */
	sg_kubesign_ca extra_cas[SG_CLUSTER_CAS_MAX - 1];
	size_t nextra;
	sg_pool *pool;
	/* The CA signing now: replaced by the main thread when a rotation's
	 * step is followed (signetd_ca.c), read by /metrics' thread too, hence
	 * atomic. A replaced CA stays alive (sg_appliance_reload retires it),
	 * so a reader holding the previous one is safe. */
	_Atomic(const sg_ca *) ca;
	sg_authenticator auth;
	bool auth_ready;
	sg_cluster *cluster; /* NULL when no Kubernetes API is configured */
	sg_grant *grant;
	sg_serving *serving;
	sg_service *svc;
	sg_grpc_server *grpc;
	/* grpc as the HTTP thread may read it: set once serving, cleared
	 * before the server is shut down (and freed). */
	pthread_mutex_t grpc_mu;
	sg_grpc_server *grpc_live;
	sg_http_server *http_metrics, *http_probe;
	daemon_metrics m;
	struct file_id root_file;
	struct ca_follow ca_follow; /* main thread only */
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
	/* The served bundle's roots and what has been said of them
	 * (signetd_rootexpiry.c; main thread only). */
	struct root_watch {
		sg_ca_root_info roots[SG_CA_BUNDLE_MAX];
		bool expired_logged[SG_CA_BUNDLE_MAX];
		size_t n;
		bool rotation_due; /* as last logged */
	} root_watch;
} daemon;

/* ------------------------------------------------------------------ */
/* Metrics and probes (signetd_metrics.c)                             */

/* The HSM's stats now. */
sg_hsm_stats signetd_hsm_stats(daemon *d);
/* The daemon's metrics: callbacks for values derived from state, the
 * parts' stats tables. */
int signetd_setup_metrics(daemon *d);
/* Where the HTTP endpoints listen (http-address, or by where we run). */
const char *signetd_http_address(const daemon *d);
/* /metrics, the readiness path and /healthz. */
int signetd_start_http(daemon *d);
/* The main HSM's health probes (hsm-probe-interval, hsm-probe-timeout),
 * with their per-token metrics; nothing when the interval is 0. */
int signetd_start_hsm_probes(daemon *d);
/* The per-token signing series (signet_hsm_token_*, the signing latency
 * histogram), told each signature by the HSM layer; and their gauges read
 * again from its counters (at each scrape). */
int signetd_setup_token_metrics(daemon *d);
void signetd_refresh_token_metrics(daemon *d);
void signetd_follow_token_metrics(daemon *d);
/* After a reload moved signing to another HSM handle (a new key): stops
 * the probes of old, which was signing until now, and probes the current
 * handle instead, with the per-token series of its tokens (the same series
 * when the token is the same). Nothing when probes are off or the handle
 * did not change. May wait up to hsm-probe-timeout for a probe inside the
 * module. */
int signetd_follow_hsm_probes(daemon *d, sg_hsm *old);

/* ------------------------------------------------------------------ */
/* root-ca-file (signetd_root.c)                                      */

/* The root bundle clients are given: root-ca-file when set (checked
 * against the CA), else the CA's own; *own is what the caller frees. */
int signetd_load_root(daemon *d, const char **root, size_t *len, char **own);
/* Follows root-ca-file: a changed file replaces the bundle; force
 * (SIGHUP) reads it whether or not it looks changed. */
int signetd_reload_root(daemon *d, bool force);

/* ------------------------------------------------------------------ */
/* The config file's CA settings (signetd_ca.c)                       */

/* The config file alone, read with signetd's whole table (signetd.c; a
 * config file may hold any of its settings). Free with signetd_free_args. */
int signetd_parse_config(const char *path, daemon_args *out);
void signetd_free_args(daemon_args *a);
/* Notes which CA settings come from the config file (not a flag) and the
 * files' identities; at start, after the service exists. */
int signetd_ca_follow_start(daemon *d);
/* Follows a changed config file or CA file (force: SIGHUP, whatever the
 * identities): a new key or CA is checked, then signed with and served;
 * one that cannot be used keeps the current one (logged, and the error
 * returned). */
int signetd_ca_follow(daemon *d, bool force);

/* ------------------------------------------------------------------ */
/* The roots' expiry (signetd_rootexpiry.c)                           */

/* The lead time in effect: root-rotation-lead, or a third of the CA's
 * root's validity when it is 0. */
int64_t signetd_root_rotation_lead(const daemon *d);
/* Whether the CA's root expires within that lead at now (wall seconds). */
bool signetd_root_rotation_due(const daemon *d, int64_t now);
/* Notes the roots of the bundle now served (pem, len bytes) for
 * signetd_root_expiry_tick: a new bundle is a new fact, so an expired root
 * it still holds is reported again. */
void signetd_root_watch(daemon *d, const char *pem, size_t len);
/* Housekeeping: logs once when the rotation falls due (and when it no
 * longer is), and once per root of the served bundle that has expired. */
void signetd_root_expiry_tick(daemon *d, int64_t now);

/* ------------------------------------------------------------------ */
/* Health and systemd (signetd_health.c)                              */

/* Once a second: renewal, root-ca-file, readiness, STATUS=. */
void signetd_housekeeping(daemon *d);
/* SIGHUP: every file signetd serves from, read again. */
void signetd_reload(daemon *d);
/* WATCHDOG=1 when the signer pool makes progress (and a watchdog is set). */
void signetd_watchdog_ping(daemon *d);
/* How long the main loop waits for a signal. */
struct timespec signetd_loop_wait(const daemon *d);

#endif
