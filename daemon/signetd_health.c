/*
 * signetd_health: whether signetd is ready and alive, and what systemd is
 * told. Housekeeping, once a second on the main thread: the serving
 * certificate's renewal, root-ca-file and the roots' expiry, the gRPC
 * listener's refusals, the HSM's state and how long it has been down (for
 * /healthz), the signer pool's progress, and from them readiness (the flag
 * /readyz reads) and systemd's READY=/STATUS=; the watchdog ping, withheld
 * while the signer pool is wedged; and the SIGHUP reload, which ends with
 * a housekeeping pass. Apart from main so that every reason signetd gives
 * for not being ready, and every word it says to systemd, reads in one
 * place.
 */
#include "signetd_impl.h"

#include "sg_clock.h"
#include "sg_log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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
	sg_pool_stats st = {0};
	if (d->pool) /* an RA without an HSM has none: always idle */
		sg_pool_stats_get(d->pool, &st);
	if (st.completed != d->pool_completed || st.submitted == st.completed) {
		d->pool_completed = st.completed;
		d->pool_progress_ns = now_ns;
		d->pool_wedged_logged = false;
	}
	return now_ns - d->pool_progress_ns;
}

/* Not ready while the signer pool has completed nothing for longer than
 * server-timeout (+ 1 s of signetd_housekeeping's pace) with work outstanding: a
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
 * taken, signetd_housekeeping renews the serving certificate and computes
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
	sg_pool_stats_get(d->pool, &st); /* stalled: there is a pool */
	if (!d->pool_wedged_logged)
		sg_log(SG_LOG_ERROR, "signer pool makes no progress; withholding the systemd watchdog ping",
		       SG_F_INT("outstanding", (int64_t)(st.submitted - st.completed)),
		       SG_F_INT("seconds", (int64_t)((now_ns - d->pool_progress_ns) / 1000000000u)), SG_F_END);
	d->pool_wedged_logged = true;
	return false;
}

void signetd_watchdog_ping(daemon *d)
{
	if (sg_notify_watchdog_usec(d->notify) && pool_progressing(d, sg_now_ns()))
		sg_notify_watchdog(d->notify);
}

/* How long the main loop waits for a signal: a second (signetd_housekeeping's
 * pace), or half the watchdog interval when that is shorter, so that a
 * ping is never late (sd_watchdog_enabled(3) asks for half). */
struct timespec signetd_loop_wait(const daemon *d)
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
		       SG_F_STR("hsm", signetd_hsm_stats(d).last_fault), SG_F_END);
		d->hsm_down_reported = true;
	}
}

/* Ready when the HSM can sign, the CA is loaded (it is, once started), the
 * serving certificate is valid and the gRPC listener takes connections. */
void signetd_housekeeping(daemon *d)
{
	int64_t now = sg_wall_seconds();
	(void)signetd_ca_follow(d, false);   /* logged inside; a change that fails waits for the next one */
	(void)signetd_reload_root(d, false); /* logged inside; retried on the next tick */
	signetd_root_expiry_tick(d, now);
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
	bool hsm_down = signetd_hsm_stats(d).state == SG_HSM_DOWN;
	track_hsm_down(d, hsm_down);
	const char *why_not = hsm_down                                  ? "HSM down"
	                      : pool_stalled(d, sg_now_ns())            ? "signer pool makes no progress"
	                      : sg_serving_not_after(d->serving) <= now ? "serving certificate expired"
	                      : atomic_load(&d->stopping)               ? "stopping"
	                      : !accepting                              ? "not accepting connections"
	                                                                : NULL;
	bool ok = !why_not;
	bool was = atomic_exchange(&d->ready, ok);
	if (was != ok)
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, ok ? "ready" : "not ready",
		       SG_F_STR("reason", ok ? "" : why_not), SG_F_STR("hsm", signetd_hsm_stats(d).last_fault),
		       SG_F_INT("accepting", accepting), SG_F_END);
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
 * is logged as an error with the reason; the others still signetd_reload. One
 * "reloaded" record names what was re-read and what failed. Readiness is
 * recomputed before READY=1 tells systemd the signetd_reload is over. Before the
 * first READY=1 systemd expects none of this, so nothing is sent. */
void signetd_reload(daemon *d)
{
	bool tell = d->notified_ready;
	if (tell)
		sg_notify_reloading(d->notify);
	char done[128] = "", failed[128] = "";
	bool files = false;
	if (sg_serving_reload(d->serving, &files) < 0) {
		sg_log_error_last(SG_LOG_ERROR,
		                  "serving certificate files cannot be reloaded; keeping the previous ones");
		note(failed, sizeof(failed), "serving-certificate-file");
	} else if (files) {
		note(done, sizeof(done), "serving-certificate-file");
	}
	if (d->ca_follow.on) {
		if (signetd_ca_follow(d, true) < 0)
			note(failed, sizeof(failed), "config");
		else
			note(done, sizeof(done), "config");
	}
	if (d->a.d.root_ca_file) {
		if (signetd_reload_root(d, true) < 0)
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
	signetd_housekeeping(d);
	if (tell)
		sg_notify_ready(d->notify, d->status);
}
