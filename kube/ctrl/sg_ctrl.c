/*
 * One controller on the runtime (contract: sg_ctrl.h).
 *
 * Life of a run (start .. stop):
 *   start   creates the informers (a fresh LIST each run: a new leader
 *           must not act on what it saw when it last led), starts them,
 *           starts the workers;
 *   worker 0  waits until every informer has listed, runs `synced` (the
 *           controller adopts what exists), queues everything through
 *           `resync`, then opens the gate for the other workers: no
 *           reconcile sees a half-filled cache;
 *   workers take keys from the queue; the queue never hands one key to
 *           two workers, so a reconcile owns its key;
 *   stop    raises the stop flag (reconciles check it before each write),
 *           shuts the queue, joins the workers (each finishes at most the
 *           request it has in flight), then frees the informers.
 *
 * sg_ctrl_resync travels through the queue as a key no Kubernetes name can
 * be (it starts with a control byte), so concurrent resync requests fold
 * into one, and it runs on a worker while the informers surely exist.
 *
 * An absent API server: a failure that got no HTTP answer at all means the
 * next key would fail the same way, so the queue as a whole pauses (1 s
 * doubling to 30 s) besides the key's own backoff. Failure warnings are
 * logged at most once a second per controller, with the number not shown.
 *
 * Events live here rather than with the other helpers because an Event
 * names its object's apiVersion and kind, and the objects a reconcile has
 * in hand often carry neither: the API server leaves them out of LIST
 * items (only watch events have them), so what an informer listed is
 * untyped. The controller knows which watch holds such an object, hence
 * its group and version, and learns the kind from the API server's
 * discovery document of that group version, once per watch.
 */
#include "sg_ctrl.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESYNC_KEY "\001resync"
#define SYNC_POLL_MS 200u
#define KIND_MAX 128                /* a kind's name, and the NUL */
#define DISCOVERY_MAX (4u << 20)    /* one group version's APIResourceList */
#define EVENT_MESSAGE_MAX 1025      /* sg_kube_event keeps 1024 bytes */

typedef struct watch {
	sg_ctrl *owner;
	char *group, *version, *resource, *ns;
	char *label_selector, *field_selector;
	sg_ctrl_map_fn map;
	bool metadata_only;
	char kind[KIND_MAX]; /* learnt by discovery ("": not yet); under kind_mu */
} watch;

struct sg_ctrl {
	char name[SG_CTRL_NAME_MAX];
	char field_manager[SG_CTRL_NAME_MAX + 8];
	sg_kube *kube;
	watch watches[SG_CTRL_WATCH_MAX];
	size_t nwatches;
	sg_ctrl_reconcile_fn reconcile;
	void (*synced)(sg_ctrl *c, void *arg);
	void (*resync)(sg_ctrl *c, void *arg);
	int (*starting)(sg_ctrl *c, void *arg);
	void (*stopped)(sg_ctrl *c, void *arg);
	int (*metrics)(sg_ctrl *c, sg_metrics *reg, void *arg);
	void *arg;
	unsigned nworkers;
	sg_ctrl_queue *q;
	atomic_bool stop;

	/* start/stop and the fields below; recursive, so that the starting
	 * hook may call sg_ctrl_set_field_selector */
	pthread_mutex_t life;
	bool running;
	pthread_t workers[SG_CTRL_WORKERS_MAX];
	size_t started;
	sg_kube_informer *inf[SG_CTRL_WATCH_MAX];

	pthread_mutex_t gate_mu; /* the gate: workers > 0 wait for worker 0 */
	pthread_cond_t gate_cv;
	bool open;

	atomic_bool is_running;
	atomic_uint_fast64_t reconciles, errors, requeues;
	atomic_uint down; /* consecutive failures without an answer */
	_Atomic(sg_series *) m_ok, m_failed, m_requeued, m_queued;
	pthread_mutex_t queued_mu; /* orders the queue-length gauge's updates */

	pthread_mutex_t warn_mu;
	uint64_t last_warn_ns, quiet;

	pthread_mutex_t kind_mu;
};

/* ---- keys ---- */

bool sg_ctrl_key_of(const json_t *obj, char key[SG_CTRL_KEY_MAX])
{
	const char *ns = sg_kube_meta_str(obj, "namespace");
	const char *name = sg_kube_meta_str(obj, "name");
	if (!name || !*name)
		return false;
	int n = ns && *ns ? snprintf(key, SG_CTRL_KEY_MAX, "%s/%s", ns, name) : snprintf(key, SG_CTRL_KEY_MAX, "%s", name);
	return n > 0 && n < SG_CTRL_KEY_MAX;
}

bool sg_ctrl_key_split(const char *key, char ns[64], char name[SG_KUBE_NAME_MAX + 1])
{
	const char *slash = strchr(key, '/');
	size_t nl = slash ? (size_t)(slash - key) : 0;
	const char *nm = slash ? slash + 1 : key;
	if (nl > 63 || strlen(nm) == 0 || strlen(nm) > SG_KUBE_NAME_MAX || strchr(nm, '/'))
		return false;
	memcpy(ns, key, nl);
	ns[nl] = 0;
	memcpy(name, nm, strlen(nm) + 1);
	return true;
}

/* Every change of the queue's length is followed by this, from whichever
 * thread made it. Reading the length and setting the gauge is one step
 * under a lock, or a thread that read an older length could set it after
 * one that read the newer, and the gauge would keep the stale value. */
static void set_queued(sg_ctrl *c)
{
	sg_series *s = atomic_load(&c->m_queued);
	if (!s)
		return;
	pthread_mutex_lock(&c->queued_mu);
	sg_series_set(s, (double)sg_ctrl_queue_len(c->q));
	pthread_mutex_unlock(&c->queued_mu);
}

static void bump(atomic_uint_fast64_t *n, _Atomic(sg_series *) *series)
{
	atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
	sg_series *s = atomic_load(series);
	if (s)
		sg_series_inc(s);
}

void sg_ctrl_add(sg_ctrl *c, const char *key)
{
	sg_ctrl_queue_add(c->q, key); /* refused while stopped: the queue is shut */
	set_queued(c);
}

void sg_ctrl_add_after(sg_ctrl *c, const char *key, uint64_t delay_ms)
{
	sg_ctrl_queue_add_after(c->q, key, delay_ms);
	set_queued(c);
}

void sg_ctrl_resync(sg_ctrl *c)
{
	sg_ctrl_queue_add(c->q, RESYNC_KEY);
}

/* ---- informer handlers (informer threads) ---- */

static void map_obj(watch *w, const json_t *obj)
{
	if (w->map) {
		w->map(w->owner, obj, w->owner->arg);
		return;
	}
	char key[SG_CTRL_KEY_MAX];
	if (sg_ctrl_key_of(obj, key))
		sg_ctrl_add(w->owner, key);
}

static void on_add(json_t *obj, void *arg)
{
	map_obj(arg, obj);
}

static void on_update(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj;
	map_obj(arg, new_obj);
}

static void on_delete(json_t *obj, void *arg)
{
	map_obj(arg, obj);
}

/* ---- workers ---- */

bool sg_ctrl_stopping(const sg_ctrl *c)
{
	return atomic_load(&c->stop);
}

sg_kube_informer *sg_ctrl_informer(sg_ctrl *c, size_t i)
{
	return i < c->nwatches ? c->inf[i] : NULL;
}

static bool wait_synced(sg_ctrl *c)
{
	for (size_t i = 0; i < c->nwatches; i++)
		while (sg_kube_informer_wait_synced(c->inf[i], SYNC_POLL_MS) != SG_OK)
			if (sg_ctrl_stopping(c))
				return false;
	return !sg_ctrl_stopping(c);
}

static void resync_default(sg_ctrl *c)
{
	json_t *all = sg_kube_informer_list(c->inf[0]);
	size_t i;
	json_t *obj;
	json_array_foreach(all, i, obj)
	{
		map_obj(&c->watches[0], obj);
	}
	json_decref(all);
}

static void run_resync(sg_ctrl *c)
{
	if (c->resync)
		c->resync(c, c->arg);
	else
		resync_default(c);
}

/* After a reconcile: a failure without any HTTP answer means the API
 * server is unreachable, and the queue pauses, longer with each such
 * failure in a row. Only an answer ends the outage: a reconcile that
 * succeeds without a request (nothing to do, by the cache) says nothing
 * about the server, so it does not reset the pause (which would then stay
 * at 1 s for as long as the server is gone). This worker's last call
 * tells: sg_kube_last_status is per thread. */
static void note_outage(sg_ctrl *c, int rc)
{
	bool answered = sg_kube_last_status()->code != 0;
	if (rc < 0 && (rc == SG_EBUSY || rc == SG_ETIMEOUT) && !answered) {
		unsigned down = atomic_fetch_add(&c->down, 1);
		uint64_t pause = SG_CTRL_BACKOFF_FIRST_MS;
		for (unsigned i = 0; i < down && pause < SG_CTRL_BACKOFF_MAX_MS; i++)
			pause *= 2;
		if (pause > SG_CTRL_BACKOFF_MAX_MS)
			pause = SG_CTRL_BACKOFF_MAX_MS;
		sg_ctrl_queue_pause_until(c->q, sg_now_ns() + pause * 1000000ull);
	} else if (answered) {
		atomic_store(&c->down, 0);
	}
}

static void warn_failure(sg_ctrl *c, const char *key, uint64_t retry_ms)
{
	pthread_mutex_lock(&c->warn_mu);
	uint64_t now = sg_now_ns(), quiet = c->quiet;
	bool loud = c->last_warn_ns == 0 || now - c->last_warn_ns >= 1000000000u;
	if (loud) {
		c->last_warn_ns = now;
		c->quiet = 0;
	} else {
		c->quiet++;
	}
	pthread_mutex_unlock(&c->warn_mu);
	sg_log(loud ? SG_LOG_WARN : SG_LOG_DEBUG, "reconcile failed; retrying", SG_F_STR("controller", c->name),
	       SG_F_STR("key", key), SG_F_STR("error", sg_error_last()->msg), SG_F_INT("retry_ms", retry_ms),
	       SG_F_INT("failures_not_shown", loud ? quiet : 0), SG_F_END);
}

static void handle(sg_ctrl *c, const char *key)
{
	if (strcmp(key, RESYNC_KEY) == 0) {
		run_resync(c);
		return;
	}
	sg_ctrl_result res = {0};
	int rc = c->reconcile(c, key, &res, c->arg);
	if (sg_ctrl_stopping(c))
		return;
	note_outage(c, rc);
	if (rc < 0) {
		uint64_t ms = sg_ctrl_queue_add_rate_limited(c->q, key);
		bump(&c->errors, &c->m_failed);
		warn_failure(c, key, ms);
		return;
	}
	sg_ctrl_queue_forget(c->q, key);
	bump(&c->reconciles, &c->m_ok);
	if (res.requeue_after_ms) {
		sg_ctrl_queue_add_after(c->q, key, res.requeue_after_ms);
		bump(&c->requeues, &c->m_requeued);
	}
}

typedef struct worker_arg {
	sg_ctrl *c;
	size_t index;
} worker_arg;

static bool pass_gate(sg_ctrl *c, size_t index)
{
	if (index == 0) {
		bool ok = wait_synced(c);
		if (ok) {
			if (c->synced)
				c->synced(c, c->arg);
			run_resync(c);
		}
		pthread_mutex_lock(&c->gate_mu);
		c->open = true;
		pthread_cond_broadcast(&c->gate_cv);
		pthread_mutex_unlock(&c->gate_mu);
		return ok;
	}
	pthread_mutex_lock(&c->gate_mu);
	while (!c->open)
		pthread_cond_wait(&c->gate_cv, &c->gate_mu);
	pthread_mutex_unlock(&c->gate_mu);
	return !sg_ctrl_stopping(c);
}

static void *work(void *p)
{
	worker_arg wa = *(worker_arg *)p;
	free(p);
	sg_ctrl *c = wa.c;
	if (!pass_gate(c, wa.index))
		return NULL;
	char key[SG_CTRL_KEY_MAX];
	while (sg_ctrl_queue_get(c->q, key)) {
		if (!sg_ctrl_stopping(c))
			handle(c, key);
		sg_ctrl_queue_done(c->q, key);
		set_queued(c);
	}
	return NULL;
}

/* ---- life cycle ---- */

static int copy_opt(const char *s, char **out)
{
	*out = NULL;
	if (!s)
		return SG_OK;
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "controller: out of memory");
	return SG_OK;
}

static bool name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n >= SG_CTRL_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return true;
}

static int init(sg_ctrl *c, const sg_ctrl_def *d)
{
	SG_ENSURE(name_ok(d->name), SG_EINVAL, "controller: the name must be 1..%d bytes of [a-z0-9-]",
	          SG_CTRL_NAME_MAX - 1);
	SG_ENSURE(d->kube && d->reconcile, SG_EINVAL, "controller %s: needs a client and a reconcile function", d->name);
	SG_ENSURE(d->watches && d->nwatches >= 1 && d->nwatches <= SG_CTRL_WATCH_MAX, SG_EINVAL,
	          "controller %s: 1..%d watches", d->name, SG_CTRL_WATCH_MAX);
	SG_ENSURE(d->workers <= SG_CTRL_WORKERS_MAX, SG_EINVAL, "controller %s: at most %d workers", d->name,
	          SG_CTRL_WORKERS_MAX);
	snprintf(c->name, sizeof(c->name), "%s", d->name);
	if (d->field_manager) {
		size_t fl = strlen(d->field_manager);
		SG_ENSURE(fl >= 1 && fl < sizeof(c->field_manager) &&
		                  strspn(d->field_manager, "abcdefghijklmnopqrstuvwxyz0123456789-") == fl,
		          SG_EINVAL, "controller %s: field manager must be 1..%zu bytes of [a-z0-9-]", d->name,
		          sizeof(c->field_manager) - 1);
		memcpy(c->field_manager, d->field_manager, fl + 1);
	} else {
		snprintf(c->field_manager, sizeof(c->field_manager), "signet-%s", d->name);
	}
	c->kube = d->kube;
	c->reconcile = d->reconcile;
	c->synced = d->synced;
	c->resync = d->resync;
	c->starting = d->starting;
	c->stopped = d->stopped;
	c->metrics = d->metrics;
	c->arg = d->arg;
	c->nworkers = d->workers ? d->workers : 1;
	for (size_t i = 0; i < d->nwatches; i++) {
		const sg_ctrl_watch *s = &d->watches[i];
		watch *w = &c->watches[i];
		SG_ENSURE(s->ref.version && s->ref.resource && !s->ref.name, SG_EINVAL,
		          "controller %s: watch %zu must name a collection (version, resource, no name)", d->name, i);
		w->owner = c;
		w->map = s->map;
		w->metadata_only = s->metadata_only;
		c->nwatches++;
		SG_TRY(copy_opt(s->ref.group, &w->group));
		SG_TRY(copy_opt(s->ref.version, &w->version));
		SG_TRY(copy_opt(s->ref.resource, &w->resource));
		SG_TRY(copy_opt(s->ref.ns, &w->ns));
		SG_TRY(copy_opt(s->label_selector, &w->label_selector));
		SG_TRY(copy_opt(s->field_selector, &w->field_selector));
	}
	SG_TRY(sg_ctrl_queue_new(&c->q, d->backoff_first_ms, d->backoff_max_ms));
	sg_ctrl_queue_shutdown(c->q); /* adds are refused until start */
	return SG_OK;
}

int sg_ctrl_new(sg_ctrl **out, const sg_ctrl_def *d)
{
	*out = NULL;
	SG_ENSURE(d, SG_EINVAL, "controller: no definition");
	sg_ctrl *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "controller: out of memory");
	pthread_mutexattr_t recursive;
	pthread_mutexattr_init(&recursive);
	pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&c->life, &recursive);
	pthread_mutexattr_destroy(&recursive);
	pthread_mutex_init(&c->gate_mu, NULL);
	pthread_cond_init(&c->gate_cv, NULL);
	pthread_mutex_init(&c->warn_mu, NULL);
	pthread_mutex_init(&c->kind_mu, NULL);
	pthread_mutex_init(&c->queued_mu, NULL);
	int rc = init(c, d);
	if (rc < 0) {
		sg_ctrl_free(c);
		return rc;
	}
	*out = c;
	return SG_OK;
}

static void drop_informers(sg_ctrl *c)
{
	for (size_t i = 0; i < c->nwatches; i++) {
		sg_kube_informer_free(c->inf[i]);
		c->inf[i] = NULL;
	}
}

/* Ends a run: the workers first (once joined, nothing of ours writes),
 * then the informers. life held. */
static void halt(sg_ctrl *c)
{
	atomic_store(&c->stop, true);
	sg_ctrl_queue_shutdown(c->q);
	pthread_mutex_lock(&c->gate_mu);
	c->open = true; /* workers waiting at the gate leave */
	pthread_cond_broadcast(&c->gate_cv);
	pthread_mutex_unlock(&c->gate_mu);
	for (size_t i = 0; i < c->started; i++)
		pthread_join(c->workers[i], NULL);
	c->started = 0;
	drop_informers(c);
	sg_ctrl_queue_reset(c->q);
	sg_ctrl_queue_shutdown(c->q);
	set_queued(c);
}

static int make_informers(sg_ctrl *c)
{
	for (size_t i = 0; i < c->nwatches; i++) {
		watch *w = &c->watches[i];
		sg_kube_ref ref = {.group = w->group, .version = w->version, .resource = w->resource, .ns = w->ns};
		sg_kube_informer_opts o = {.label_selector = w->label_selector,
		                           .field_selector = w->field_selector,
		                           .metadata_only = w->metadata_only};
		sg_kube_handlers h = {on_add, on_update, on_delete, w};
		SG_TRY(sg_kube_informer_new(&c->inf[i], c->kube, &ref, &o, &h));
	}
	for (size_t i = 0; i < c->nwatches; i++)
		SG_TRY(sg_kube_informer_start(c->inf[i]));
	return SG_OK;
}

static int start_workers(sg_ctrl *c)
{
	for (size_t i = 0; i < c->nworkers; i++) {
		worker_arg *wa = malloc(sizeof(*wa));
		SG_ENSURE(wa, SG_EINTERNAL, "controller %s: out of memory", c->name);
		*wa = (worker_arg){c, i};
		if (pthread_create(&c->workers[i], NULL, work, wa) != 0) {
			free(wa);
			SG_BAIL(SG_EINTERNAL, "controller %s: cannot start a worker thread", c->name);
		}
		c->started++;
	}
	return SG_OK;
}

int sg_ctrl_start(sg_ctrl *c)
{
	pthread_mutex_lock(&c->life);
	int rc = SG_OK;
	if (c->running)
		goto unlock;
	if (c->starting && (rc = c->starting(c, c->arg)) < 0)
		goto unlock; /* nothing runs yet: nothing to undo */
	atomic_store(&c->stop, false);
	atomic_store(&c->down, 0);
	c->open = false;
	sg_ctrl_queue_reset(c->q);
	rc = make_informers(c);
	if (rc == SG_OK)
		rc = start_workers(c);
	if (rc < 0) {
		sg_error saved;
		sg_error_save(&saved);
		halt(c);
		if (c->stopped)
			c->stopped(c, c->arg);
		sg_error_restore(&saved);
		goto unlock;
	}
	c->running = true;
	atomic_store(&c->is_running, true);
unlock:
	pthread_mutex_unlock(&c->life);
	return rc;
}

void sg_ctrl_stop(sg_ctrl *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->life);
	if (c->running) {
		atomic_store(&c->is_running, false);
		halt(c);
		c->running = false;
		if (c->stopped)
			c->stopped(c, c->arg);
	}
	pthread_mutex_unlock(&c->life);
}

void sg_ctrl_free(sg_ctrl *c)
{
	if (!c)
		return;
	sg_ctrl_stop(c);
	sg_ctrl_queue_free(c->q);
	for (size_t i = 0; i < c->nwatches; i++) {
		watch *w = &c->watches[i];
		free(w->group);
		free(w->version);
		free(w->resource);
		free(w->ns);
		free(w->label_selector);
		free(w->field_selector);
	}
	pthread_mutex_destroy(&c->life);
	pthread_mutex_destroy(&c->gate_mu);
	pthread_cond_destroy(&c->gate_cv);
	pthread_mutex_destroy(&c->warn_mu);
	pthread_mutex_destroy(&c->kind_mu);
	pthread_mutex_destroy(&c->queued_mu);
	free(c);
}

const char *sg_ctrl_name(const sg_ctrl *c)
{
	return c->name;
}

sg_kube *sg_ctrl_kube(const sg_ctrl *c)
{
	return c->kube;
}

const char *sg_ctrl_field_manager(const sg_ctrl *c)
{
	return c->field_manager;
}

int sg_ctrl_set_field_selector(sg_ctrl *c, size_t i, const char *selector)
{
	SG_ENSURE(i < c->nwatches, SG_EINVAL, "controller %s: no watch %zu", c->name, i);
	pthread_mutex_lock(&c->life);
	bool running = c->running;
	char *copy = NULL;
	int rc = running ? sg_error_set(SG_EINVAL, "controller %s: a selector changes only while stopped", c->name)
	                 : copy_opt(selector, &copy);
	if (rc == SG_OK) {
		free(c->watches[i].field_selector);
		c->watches[i].field_selector = copy;
	}
	pthread_mutex_unlock(&c->life);
	return rc;
}

bool sg_ctrl_running(sg_ctrl *c)
{
	return c && atomic_load(&c->is_running);
}

void sg_ctrl_stats_get(sg_ctrl *c, sg_ctrl_stats *out)
{
	out->reconciles = atomic_load(&c->reconciles);
	out->errors = atomic_load(&c->errors);
	out->requeues = atomic_load(&c->requeues);
	size_t waiting, active;
	sg_ctrl_queue_counts(c->q, &waiting, &active);
	out->queued = waiting;
	out->active = active;
	out->running = atomic_load(&c->is_running);
}

int sg_ctrl_metrics(sg_ctrl *c, sg_metrics *reg)
{
	return c->metrics ? c->metrics(c, reg, c->arg) : SG_OK;
}

void sg_ctrl_bind_metrics(sg_ctrl *c, sg_series *ok, sg_series *failed, sg_series *requeued, sg_series *queued)
{
	atomic_store(&c->m_ok, ok);
	atomic_store(&c->m_failed, failed);
	atomic_store(&c->m_requeued, requeued);
	atomic_store(&c->m_queued, queued);
	set_queued(c);
}

/* ---- events ---- */

/* The kind the API server serves w's resource as, from the discovery
 * document of its group version (an APIResourceList). */
static int discover_kind(sg_ctrl *c, const watch *w, char kind[KIND_MAX])
{
	char path[SG_KUBE_PATH_MAX + 1];
	int n = w->group && *w->group ? snprintf(path, sizeof(path), "/apis/%s/%s", w->group, w->version)
	                              : snprintf(path, sizeof(path), "/api/%s", w->version);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(path), SG_EINVAL, "controller %s: discovery path too long", c->name);
	uint8_t *body = NULL;
	size_t len = 0;
	sg_kube_path_opts po = {.max = DISCOVERY_MAX, .stop = &c->stop};
	SG_TRY(sg_kube_get_path(c->kube, path, &po, &body, &len));
	json_t *doc = json_loadb((const char *)body, len, 0, NULL);
	free(body);
	SG_ENSURE(doc, SG_EPROTO, "controller %s: %s: not JSON", c->name, path);
	int rc = sg_error_set(SG_ENOTFOUND, "controller %s: %s serves no resource %s", c->name, path, w->resource);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(doc, "resources"), i, r)
	{
		const char *name = json_string_value(json_object_get(r, "name"));
		const char *k = json_string_value(json_object_get(r, "kind"));
		if (!name || strcmp(name, w->resource) != 0)
			continue;
		if (k && *k && strlen(k) < KIND_MAX) {
			memcpy(kind, k, strlen(k) + 1);
			rc = SG_OK;
		} else {
			rc = sg_error_set(SG_EPROTO, "controller %s: %s: resource %s has no usable kind", c->name, path,
			                  w->resource);
		}
		break;
	}
	json_decref(doc);
	return rc;
}

/* The watch whose informer holds obj (the same object, or one with its
 * uid), or NULL. Informers exist from start to stop only: like every
 * helper, for reconcile, synced and resync. */
static watch *holder_of(sg_ctrl *c, const json_t *obj)
{
	const char *ns = sg_kube_meta_str(obj, "namespace"), *name = sg_kube_meta_str(obj, "name");
	const char *uid = sg_kube_meta_str(obj, "uid");
	if (!name)
		return NULL;
	for (size_t i = 0; i < c->nwatches; i++) {
		if (!c->inf[i])
			continue;
		json_t *o = sg_kube_informer_get(c->inf[i], ns, name);
		const char *ouid = sg_kube_meta_str(o, "uid");
		bool same = o && (o == obj || (uid && ouid && strcmp(uid, ouid) == 0));
		json_decref(o);
		if (same)
			return &c->watches[i];
	}
	return NULL;
}

/* *out: obj itself when it carries apiVersion and kind; otherwise a copy
 * that does, from the watch that holds it. A new reference. */
static int typed(sg_ctrl *c, const json_t *obj, json_t **out)
{
	*out = NULL;
	if (json_is_string(json_object_get(obj, "apiVersion")) && json_is_string(json_object_get(obj, "kind"))) {
		*out = json_incref((json_t *)obj);
		return SG_OK;
	}
	watch *w = holder_of(c, obj);
	SG_ENSURE(w, SG_EINVAL, "controller %s: the object has no apiVersion and kind, and no informer of ours holds it",
	          c->name);
	char kind[KIND_MAX];
	pthread_mutex_lock(&c->kind_mu);
	memcpy(kind, w->kind, sizeof(kind));
	pthread_mutex_unlock(&c->kind_mu);
	if (!kind[0]) {
		SG_TRY(discover_kind(c, w, kind));
		pthread_mutex_lock(&c->kind_mu);
		memcpy(w->kind, kind, sizeof(kind));
		pthread_mutex_unlock(&c->kind_mu);
	}
	char av[300];
	int n = w->group && *w->group ? snprintf(av, sizeof(av), "%s/%s", w->group, w->version)
	                              : snprintf(av, sizeof(av), "%s", w->version);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(av), SG_EINVAL, "controller %s: apiVersion too long", c->name);
	/* A shallow copy: the members stay shared and unmodified. */
	json_t *t = json_copy((json_t *)obj);
	if (!t || json_object_set_new(t, "apiVersion", json_string(av)) != 0 ||
	    json_object_set_new(t, "kind", json_string(kind)) != 0) {
		json_decref(t);
		SG_BAIL(SG_EINTERNAL, "controller %s: out of memory", c->name);
	}
	*out = t;
	return SG_OK;
}

/* Best effort, so it leaves the thread's error detail as it found it: a
 * reconcile that records a Warning on its way out returns its own error,
 * and its detail is what the retry warning shows. */
void sg_ctrl_event(sg_ctrl *c, const json_t *obj, const char *type, const char *reason, const char *fmt, ...)
{
	sg_error saved;
	sg_error_save(&saved);
	char msg[EVENT_MESSAGE_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *t = NULL;
	if (typed(c, obj, &t) < 0 || sg_kube_event(c->kube, t, type, reason, msg, c->field_manager, NULL) < 0)
		sg_log(SG_LOG_DEBUG, "cannot record an Event", SG_F_STR("controller", c->name), SG_F_STR("reason", reason),
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
	json_decref(t);
	sg_error_restore(&saved);
}
