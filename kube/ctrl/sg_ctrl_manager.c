/*
 * The table of controllers and its leader gate (contract: sg_ctrl.h).
 *
 * Rows that run everywhere start with the manager. Leader-only rows start
 * when the elector says this replica leads, and stop, all at once (each
 * may be finishing one request), when it stops leading; the elector
 * releases the Lease only after its on_stopped_leading callback returned,
 * so a successor never writes while we still do. Without election the
 * replica leads alone from start to free.
 *
 * "Leading" (the signet_leader gauge, readiness of the writers) is true
 * only while every leader-only row runs: a leader that failed to start a
 * row says so, and tick retries the row once a second, so the Lease is
 * never held while silently writing nothing.
 */
#include "sg_ctrl.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct row {
	sg_ctrl_row r;
	bool running;
} row;

struct sg_ctrl_manager {
	row rows[SG_CTRL_ROWS_MAX];
	size_t nrows;
	sg_lease_elector *elector;
	char identity[128];

	pthread_mutex_t mu; /* the rows' running flags, want_leader, started */
	bool started;       /* rows that run everywhere should run */
	bool want_leader;   /* we lead (or run alone): leader-only rows should run */
	atomic_bool leading;
};

/* Starts every row that should run and does not; recomputes leading.
 * mu held. */
static void converge_locked(sg_ctrl_manager *m)
{
	bool all = m->want_leader;
	for (size_t i = 0; i < m->nrows; i++) {
		row *w = &m->rows[i];
		bool should = w->r.leader_only ? m->want_leader : m->started;
		if (should && !w->running) {
			if (sg_ctrl_start(w->r.ctrl) == SG_OK) {
				w->running = true;
				sg_log(SG_LOG_INFO, "controller started", SG_F_STR("controller", sg_ctrl_name(w->r.ctrl)),
				       SG_F_END);
			} else {
				sg_log(SG_LOG_ERROR, "cannot start a controller; will retry",
				       SG_F_STR("controller", sg_ctrl_name(w->r.ctrl)),
				       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
			}
		}
		if (w->r.leader_only && !w->running)
			all = false;
	}
	atomic_store(&m->leading, all);
}

static void *stop_one(void *arg)
{
	sg_ctrl_stop(((row *)arg)->r.ctrl);
	return NULL;
}

/* Stops the rows (leader-only ones, or all) in parallel. mu held. */
static void stop_rows_locked(sg_ctrl_manager *m, bool leader_only)
{
	pthread_t th[SG_CTRL_ROWS_MAX];
	bool threaded[SG_CTRL_ROWS_MAX] = {false};
	for (size_t i = 0; i < m->nrows; i++) {
		row *w = &m->rows[i];
		if (!w->running || (leader_only && !w->r.leader_only))
			continue;
		threaded[i] = pthread_create(&th[i], NULL, stop_one, w) == 0;
		if (!threaded[i])
			sg_ctrl_stop(w->r.ctrl); /* no thread to spare: one after the other */
	}
	for (size_t i = 0; i < m->nrows; i++) {
		row *w = &m->rows[i];
		if (!w->running || (leader_only && !w->r.leader_only))
			continue;
		if (threaded[i])
			pthread_join(th[i], NULL);
		w->running = false;
		sg_log(SG_LOG_INFO, "controller stopped", SG_F_STR("controller", sg_ctrl_name(w->r.ctrl)), SG_F_END);
	}
}

static void on_started_leading(void *arg)
{
	sg_ctrl_manager *m = arg;
	sg_log(SG_LOG_INFO, "leading: starting the leader-only controllers", SG_F_STR("identity", m->identity),
	       SG_F_END);
	pthread_mutex_lock(&m->mu);
	m->want_leader = true;
	converge_locked(m);
	pthread_mutex_unlock(&m->mu);
}

static void on_stopped_leading(void *arg)
{
	sg_ctrl_manager *m = arg;
	pthread_mutex_lock(&m->mu);
	m->want_leader = false;
	atomic_store(&m->leading, false);
	stop_rows_locked(m, true);
	pthread_mutex_unlock(&m->mu);
	sg_log(SG_LOG_INFO, "stopped leading", SG_F_STR("identity", m->identity), SG_F_END);
}

static void on_new_leader(const char *identity, void *arg)
{
	sg_ctrl_manager *m = arg;
	if (strcmp(identity, m->identity) != 0)
		sg_log(SG_LOG_INFO, "leader", SG_F_STR("holder", identity[0] ? identity : "(none)"), SG_F_END);
}

int sg_ctrl_manager_new(sg_ctrl_manager **out, const sg_ctrl_manager_opts *o)
{
	*out = NULL;
	sg_ctrl_manager *m = calloc(1, sizeof(*m));
	SG_ENSURE(m, SG_EINTERNAL, "controller manager: out of memory");
	pthread_mutex_init(&m->mu, NULL);
	if (o && o->lease_kube) {
		sg_lease_opts lo = o->lease;
		snprintf(m->identity, sizeof(m->identity), "%s", lo.identity ? lo.identity : "");
		lo.on_started_leading = on_started_leading;
		lo.on_stopped_leading = on_stopped_leading;
		lo.on_new_leader = on_new_leader;
		lo.arg = m;
		int rc = sg_lease_elector_new(&m->elector, o->lease_kube, &lo);
		if (rc < 0) {
			sg_ctrl_manager_free(m);
			return rc;
		}
	}
	*out = m;
	return SG_OK;
}

int sg_ctrl_manager_add(sg_ctrl_manager *m, const sg_ctrl_row *r)
{
	SG_ENSURE(r && r->ctrl, SG_EINVAL, "controller manager: a row needs a controller");
	pthread_mutex_lock(&m->mu);
	int rc = SG_OK;
	if (m->started)
		rc = sg_error_set(SG_EINVAL, "controller manager: rows are added before start");
	else if (m->nrows == SG_CTRL_ROWS_MAX)
		rc = sg_error_set(SG_EINVAL, "controller manager: more than %d controllers", SG_CTRL_ROWS_MAX);
	else
		m->rows[m->nrows++] = (row){.r = *r};
	pthread_mutex_unlock(&m->mu);
	return rc;
}

int sg_ctrl_manager_start(sg_ctrl_manager *m)
{
	bool leader_rows = false;
	pthread_mutex_lock(&m->mu);
	m->started = true;
	for (size_t i = 0; i < m->nrows; i++)
		leader_rows |= m->rows[i].r.leader_only;
	/* Without election this replica runs alone: it leads from start to
	 * free, whether or not any row is leader-only. */
	if (!m->elector) {
		if (leader_rows)
			sg_log(SG_LOG_INFO, "leader election off: this replica runs every controller", SG_F_END);
		m->want_leader = true;
	}
	converge_locked(m);
	pthread_mutex_unlock(&m->mu);
	/* No leader-only row: nothing to elect for. */
	return m->elector && leader_rows ? sg_lease_elector_start(m->elector) : SG_OK;
}

void sg_ctrl_manager_tick(sg_ctrl_manager *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	if (m->started)
		converge_locked(m);
	pthread_mutex_unlock(&m->mu);
}

bool sg_ctrl_manager_leading(sg_ctrl_manager *m)
{
	return m && atomic_load(&m->leading);
}

int sg_ctrl_manager_metrics(sg_ctrl_manager *m, sg_metrics *reg)
{
	static const char *const by_result[] = {"controller", "result"};
	static const char *const by_ctrl[] = {"controller"};
	sg_metric *reconciles = NULL, *queued = NULL;
	SG_TRY(sg_metrics_counter(&reconciles, reg, "signet_controller_reconciles_total",
	                          "Reconciles by controller and result (success, error, requeue: a success that asked "
	                          "to run again later).",
	                          by_result, 2));
	SG_TRY(sg_metrics_gauge(&queued, reg, "signet_controller_queue_depth",
	                        "Keys waiting in a controller's queue (ready, delayed or backing off).", by_ctrl, 1));
	for (size_t i = 0; i < m->nrows; i++) {
		sg_ctrl *c = m->rows[i].r.ctrl;
		const char *name = sg_ctrl_name(c);
		sg_series *ok = NULL, *err = NULL, *again = NULL, *depth = NULL;
		SG_TRY(sg_metric_series(&ok, reconciles, (const char *[]){name, "success"}));
		SG_TRY(sg_metric_series(&err, reconciles, (const char *[]){name, "error"}));
		SG_TRY(sg_metric_series(&again, reconciles, (const char *[]){name, "requeue"}));
		SG_TRY(sg_metric_series(&depth, queued, (const char *[]){name}));
		sg_ctrl_bind_metrics(c, ok, err, again, depth);
		SG_TRY(sg_ctrl_metrics(c, reg));
	}
	return SG_OK;
}

void sg_ctrl_manager_free(sg_ctrl_manager *m)
{
	if (!m)
		return;
	/* The elector stops leading first (the leader-only rows stop), then
	 * releases the Lease so a successor takes over at its next retry. */
	sg_lease_elector_free(m->elector);
	pthread_mutex_lock(&m->mu);
	m->want_leader = false;
	m->started = false;
	atomic_store(&m->leading, false);
	stop_rows_locked(m, false);
	pthread_mutex_unlock(&m->mu);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
