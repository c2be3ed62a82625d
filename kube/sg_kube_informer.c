/*
 * sg_kube_informer: list + watch of one resource into a local store.
 *
 * The store is a jansson object used as a hash map from "ns/name" (or
 * "name" for cluster-scoped objects) to the object itself; the optional
 * index is a second map from index key to a set (an object whose members
 * are store keys). Both sit under one mutex held only for map operations,
 * never during I/O or a handler call. Objects are shared by reference
 * (jansson's counts are atomic) and never modified after they arrive, which
 * is what makes handing them to any thread safe.
 *
 * The reflector loop (client-go tools/cache/reflector.go ListAndWatch) runs
 * on the informer's own thread:
 *
 *   need_list? LIST all pages -> reconcile the store -> synced
 *   WATCH from rv:  event  -> store + handler, rv = object's rv
 *                   BOOKMARK -> rv only
 *                   end of stream (timeoutSeconds) -> WATCH again
 *                   410 -> need_list (no backoff: it is not a failure)
 *                   error -> backoff with jitter, WATCH again from rv
 *
 * Reconciling a relist against the store is what turns a 410 gap into
 * correct events: keys that disappeared are deleted (on_delete with the
 * last state we had), new keys are added, keys whose resourceVersion moved
 * are updated. Unchanged objects produce nothing (client-go would send a
 * resync update; our consumers key on resourceVersion anyway).
 */
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_kube_impl.h"
#include "sg_kube_informer.h"
#include "sg_log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RV_MAX 128
#define KEY_MAX (2 * SG_KUBE_NAME_MAX + 2)
#define INDEX_KEY_MAX 512
#define BACKOFF_RESET_NS (120ull * 1000000000ull)

struct sg_kube_informer {
	sg_kube *k;
	char *group, *version, *resource, *ns, *label, *field;
	sg_kube_ref ref;
	sg_kube_informer_opts opt;
	sg_kube_handlers h;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* on CLOCK_MONOTONIC: synced, stop */
	json_t *store;
	json_t *index;
	char rv[RV_MAX];
	bool synced;
	bool need_list;
	sg_kube_informer_stats stats;

	atomic_bool stop;
	bool running;
	pthread_t th;
	unsigned seed;
};

/* ---- keys and the index ---- */

static bool obj_key(const json_t *obj, char *key, size_t cap)
{
	const char *name = sg_kube_meta_str(obj, "name");
	const char *ns = sg_kube_meta_str(obj, "namespace");
	if (!name || !*name || strlen(name) > SG_KUBE_NAME_MAX || (ns && strlen(ns) > SG_KUBE_NAME_MAX))
		return false;
	if (ns && *ns)
		snprintf(key, cap, "%s/%s", ns, name);
	else
		snprintf(key, cap, "%s", name);
	return true;
}

static bool index_key(sg_kube_informer *inf, const json_t *obj, char *key)
{
	if (!inf->opt.index_fn)
		return false;
	key[0] = 0;
	if (inf->opt.index_fn(obj, key, INDEX_KEY_MAX, inf->opt.index_arg) != 1)
		return false;
	key[INDEX_KEY_MAX - 1] = 0;
	return true;
}

/* Under mu. Adds or removes store key skey under the object's index key. */
static void index_apply(sg_kube_informer *inf, const json_t *obj, const char *skey, bool add)
{
	char ik[INDEX_KEY_MAX];
	if (!obj || !index_key(inf, obj, ik))
		return;
	json_t *set = json_object_get(inf->index, ik);
	if (add) {
		if (!set) {
			set = json_object();
			if (!set || json_object_set_new(inf->index, ik, set) != 0)
				return; /* out of memory or non-UTF-8 key: not indexed */
		}
		json_object_set_new(set, skey, json_true());
	} else if (set) {
		json_object_del(set, skey);
		if (json_object_size(set) == 0)
			json_object_del(inf->index, ik);
	}
}

/* ---- applying changes ---- */

static void set_rv(sg_kube_informer *inf, const json_t *obj)
{
	const char *rv = sg_kube_meta_str(obj, "resourceVersion");
	if (rv && *rv && strlen(rv) < RV_MAX)
		snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
}

static int on_object(sg_kube_informer *inf, sg_kube_event_type type, json_t *obj);

/* What the store keeps of obj: a new reference (NULL when out of memory). */
static json_t *kept(const sg_kube_informer *inf, json_t *obj)
{
	if (!inf->opt.metadata_only)
		return json_incref(obj);
	json_t *m = json_object();
	static const char *const keep[] = {"apiVersion", "kind", "metadata"};
	for (size_t i = 0; m && i < sizeof(keep) / sizeof(keep[0]); i++) {
		json_t *v = json_object_get(obj, keep[i]);
		if (v && json_object_set(m, keep[i], v) != 0) {
			json_decref(m);
			m = NULL;
		}
	}
	return m;
}

static int on_event(sg_kube_event_type type, json_t *full, void *arg)
{
	sg_kube_informer *inf = arg;
	if (type == SG_KUBE_BOOKMARK) {
		pthread_mutex_lock(&inf->mu);
		set_rv(inf, full);
		inf->stats.bookmarks++;
		pthread_mutex_unlock(&inf->mu);
		return 0;
	}
	json_t *obj = kept(inf, full);
	SG_ENSURE(obj, SG_EINTERNAL, "kube informer: out of memory");
	int rc = on_object(inf, type, obj);
	json_decref(obj);
	return rc;
}

static int on_object(sg_kube_informer *inf, sg_kube_event_type type, json_t *obj)
{
	char key[KEY_MAX];
	if (!obj_key(obj, key, sizeof(key))) {
		sg_log(SG_LOG_WARN, "kube informer: event object without a usable name ignored",
		       SG_F_STR("resource", inf->resource), SG_F_END);
		return 0;
	}
	pthread_mutex_lock(&inf->mu);
	json_t *old = json_incref(json_object_get(inf->store, key));
	if (old)
		index_apply(inf, old, key, false);
	if (type == SG_KUBE_DELETED) {
		json_object_del(inf->store, key);
	} else if (json_object_set(inf->store, key, obj) == 0) {
		index_apply(inf, obj, key, true);
	}
	set_rv(inf, obj);
	inf->stats.events++;
	pthread_mutex_unlock(&inf->mu);

	if (type == SG_KUBE_DELETED) {
		if (inf->h.on_delete)
			inf->h.on_delete(obj, inf->h.arg);
	} else if (old) {
		if (inf->h.on_update)
			inf->h.on_update(old, obj, inf->h.arg);
	} else if (inf->h.on_add) {
		inf->h.on_add(obj, inf->h.arg);
	}
	json_decref(old);
	return 0;
}

struct action {
	enum { ACT_ADD, ACT_UPDATE, ACT_DELETE } type;
	json_t *old_obj, *new_obj; /* owned references */
};

static bool rv_equal(const json_t *a, const json_t *b)
{
	const char *ra = sg_kube_meta_str(a, "resourceVersion"), *rb = sg_kube_meta_str(b, "resourceVersion");
	return ra && rb && strcmp(ra, rb) == 0;
}

/* Replaces the store with a LIST snapshot and emits the differences. */
static int reconcile(sg_kube_informer *inf, json_t *list)
{
	json_t *items = json_object_get(list, "items");
	json_t *fresh = json_object();
	json_t *fresh_index = json_object();
	SG_ENSURE(fresh && fresh_index, SG_EINTERNAL, "kube: out of memory");
	size_t i;
	json_t *obj;
	char key[KEY_MAX];
	json_array_foreach(items, i, obj)
	{
		if (json_is_object(obj) && obj_key(obj, key, sizeof(key)))
			json_object_set_new(fresh, key, kept(inf, obj));
	}

	pthread_mutex_lock(&inf->mu);
	size_t cap = json_object_size(inf->store) + json_object_size(fresh);
	struct action *acts = calloc(cap ? cap : 1, sizeof(*acts));
	if (!acts) {
		pthread_mutex_unlock(&inf->mu);
		json_decref(fresh);
		json_decref(fresh_index);
		SG_BAIL(SG_EINTERNAL, "kube: out of memory");
	}
	size_t n = 0;
	const char *k;
	json_t *old;
	json_object_foreach(inf->store, k, old)
	{
		if (!json_object_get(fresh, k))
			acts[n++] = (struct action){ACT_DELETE, json_incref(old), NULL};
	}
	json_object_foreach(fresh, k, obj)
	{
		old = json_object_get(inf->store, k);
		if (!old)
			acts[n++] = (struct action){ACT_ADD, NULL, json_incref(obj)};
		else if (!rv_equal(old, obj))
			acts[n++] = (struct action){ACT_UPDATE, json_incref(old), json_incref(obj)};
	}
	json_decref(inf->store);
	inf->store = fresh;
	json_decref(inf->index);
	inf->index = fresh_index;
	json_object_foreach(fresh, k, obj)
		index_apply(inf, obj, k, true);
	const char *rv = sg_kube_meta_str(list, "resourceVersion");
	snprintf(inf->rv, sizeof(inf->rv), "%s", rv && strlen(rv) < RV_MAX ? rv : "");
	inf->synced = true;
	inf->stats.lists++;
	pthread_cond_broadcast(&inf->cv);
	pthread_mutex_unlock(&inf->mu);

	for (size_t a = 0; a < n; a++) {
		if (acts[a].type == ACT_DELETE && inf->h.on_delete)
			inf->h.on_delete(acts[a].old_obj, inf->h.arg);
		else if (acts[a].type == ACT_ADD && inf->h.on_add)
			inf->h.on_add(acts[a].new_obj, inf->h.arg);
		else if (acts[a].type == ACT_UPDATE && inf->h.on_update)
			inf->h.on_update(acts[a].old_obj, acts[a].new_obj, inf->h.arg);
		json_decref(acts[a].old_obj);
		json_decref(acts[a].new_obj);
	}
	free(acts);
	return SG_OK;
}

/* ---- the reflector thread ---- */

/* Sleeps ms unless stopped first; returns false when stopped. */
static bool nap(sg_kube_informer *inf, unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&inf->mu);
	while (!atomic_load(&inf->stop))
		if (pthread_cond_timedwait(&inf->cv, &inf->mu, &ts) != 0)
			break;
	pthread_mutex_unlock(&inf->mu);
	return !atomic_load(&inf->stop);
}

struct backoff {
	unsigned cur_ms;
	uint64_t last_fail_ns;
};

/* client-go: duration d, then d * (1 + jitter*rand) with jitter 1.0,
 * doubling to the cap; reset after 2 minutes without failures. */
static bool back_off(sg_kube_informer *inf, struct backoff *b)
{
	uint64_t now = sg_now_ns();
	if (b->cur_ms == 0 || now - b->last_fail_ns > BACKOFF_RESET_NS)
		b->cur_ms = inf->opt.backoff_initial_ms;
	b->last_fail_ns = now;
	unsigned d = b->cur_ms + (unsigned)((double)b->cur_ms * ((double)rand_r(&inf->seed) / RAND_MAX));
	if (d > inf->opt.backoff_max_ms)
		d = inf->opt.backoff_max_ms;
	b->cur_ms = b->cur_ms > inf->opt.backoff_max_ms / 2 ? inf->opt.backoff_max_ms : b->cur_ms * 2;
	return nap(inf, d);
}

static void count_error(sg_kube_informer *inf, const char *what)
{
	pthread_mutex_lock(&inf->mu);
	inf->stats.errors++;
	pthread_mutex_unlock(&inf->mu);
	sg_log(SG_LOG_WARN, what, SG_F_STR("resource", inf->resource), SG_F_STR("error", sg_error_last()->msg),
	       SG_F_END);
}

static void *run(void *arg)
{
	sg_kube_informer *inf = arg;
	struct backoff b = {0};
	sg_kube_list_opts lo = {.label_selector = inf->label, .field_selector = inf->field, .limit = inf->opt.page_size};
	while (!atomic_load(&inf->stop)) {
		pthread_mutex_lock(&inf->mu);
		bool need_list = inf->need_list;
		char rv[RV_MAX];
		snprintf(rv, sizeof(rv), "%s", inf->rv);
		pthread_mutex_unlock(&inf->mu);

		if (need_list) {
			json_t *list = NULL;
			int rc = sg_kube_list_all(inf->k, &inf->ref, &lo, &list);
			if (rc == SG_OK)
				rc = reconcile(inf, list);
			json_decref(list);
			if (rc < 0) {
				count_error(inf, "kube informer: list failed");
				if (!back_off(inf, &b))
					break;
				continue;
			}
			pthread_mutex_lock(&inf->mu);
			inf->need_list = false;
			pthread_mutex_unlock(&inf->mu);
			continue;
		}

		sg_kube_watch_opts wo = {
		    .resource_version = rv,
		    .label_selector = inf->label,
		    .field_selector = inf->field,
		    .timeout_seconds = inf->opt.watch_timeout_seconds,
		    .stop = &inf->stop,
		};
		pthread_mutex_lock(&inf->mu);
		inf->stats.watches++;
		pthread_mutex_unlock(&inf->mu);
		int rc = sg_kube_watch(inf->k, &inf->ref, &wo, on_event, inf);
		if (atomic_load(&inf->stop))
			break;
		if (rc >= 0)
			continue; /* the server ended the stream: watch again from rv */
		if (rc == SG_EBUSY && sg_kube_last_status()->code == 410) {
			sg_log(SG_LOG_INFO, "kube informer: resourceVersion expired, relisting",
			       SG_F_STR("resource", inf->resource), SG_F_END);
			pthread_mutex_lock(&inf->mu);
			inf->need_list = true;
			inf->stats.relists++;
			pthread_mutex_unlock(&inf->mu);
			continue;
		}
		count_error(inf, "kube informer: watch failed");
		if (!back_off(inf, &b))
			break;
	}
	return NULL;
}

/* ---- life cycle ---- */

static int dup_opt(const char *s, char **out)
{
	*out = NULL;
	if (!s)
		return SG_OK;
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "kube: out of memory");
	return SG_OK;
}

int sg_kube_informer_new(sg_kube_informer **out, sg_kube *k, const sg_kube_ref *ref, const sg_kube_informer_opts *opt,
                         const sg_kube_handlers *h)
{
	*out = NULL;
	SG_ENSURE(k && ref && ref->version && ref->resource && !ref->name && !ref->subresource, SG_EINVAL,
	          "kube informer: needs a collection (version, resource; no name)");
	sg_kube_informer *inf = calloc(1, sizeof(*inf));
	SG_ENSURE(inf, SG_EINTERNAL, "kube: out of memory");
	inf->k = k;
	inf->store = json_object();
	inf->index = json_object();
	pthread_mutex_init(&inf->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&inf->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = inf->store && inf->index ? SG_OK : sg_error_set(SG_EINTERNAL, "kube: out of memory");
	if (rc == SG_OK)
		rc = dup_opt(ref->group, &inf->group);
	if (rc == SG_OK)
		rc = dup_opt(ref->version, &inf->version);
	if (rc == SG_OK)
		rc = dup_opt(ref->resource, &inf->resource);
	if (rc == SG_OK)
		rc = dup_opt(ref->ns, &inf->ns);
	if (rc == SG_OK && opt)
		rc = dup_opt(opt->label_selector, &inf->label);
	if (rc == SG_OK && opt)
		rc = dup_opt(opt->field_selector, &inf->field);
	if (rc < 0) {
		sg_kube_informer_free(inf);
		return rc;
	}
	inf->ref = (sg_kube_ref){.group = inf->group, .version = inf->version, .resource = inf->resource, .ns = inf->ns};
	if (opt)
		inf->opt = *opt;
	inf->opt.label_selector = inf->label;
	inf->opt.field_selector = inf->field;
	if (inf->opt.page_size <= 0)
		inf->opt.page_size = 500;
	if (inf->opt.backoff_initial_ms == 0)
		inf->opt.backoff_initial_ms = 800;
	if (inf->opt.backoff_max_ms == 0)
		inf->opt.backoff_max_ms = 30000;
	if (inf->opt.backoff_max_ms < inf->opt.backoff_initial_ms)
		inf->opt.backoff_max_ms = inf->opt.backoff_initial_ms;
	if (h)
		inf->h = *h;
	inf->need_list = true;
	inf->seed = (unsigned)sg_now_ns();
	*out = inf;
	return SG_OK;
}

int sg_kube_informer_start(sg_kube_informer *inf)
{
	SG_ENSURE(!inf->running, SG_EINVAL, "kube informer: already running");
	atomic_store(&inf->stop, false);
	pthread_mutex_lock(&inf->mu);
	if (!inf->rv[0])
		inf->need_list = true;
	pthread_mutex_unlock(&inf->mu);
	SG_ENSURE(pthread_create(&inf->th, NULL, run, inf) == 0, SG_EINTERNAL, "kube informer: cannot start a thread");
	inf->running = true;
	return SG_OK;
}

void sg_kube_informer_stop(sg_kube_informer *inf)
{
	if (!inf || !inf->running)
		return;
	pthread_mutex_lock(&inf->mu);
	atomic_store(&inf->stop, true);
	pthread_cond_broadcast(&inf->cv);
	pthread_mutex_unlock(&inf->mu);
	pthread_join(inf->th, NULL);
	inf->running = false;
}

void sg_kube_informer_free(sg_kube_informer *inf)
{
	if (!inf)
		return;
	sg_kube_informer_stop(inf);
	json_decref(inf->store);
	json_decref(inf->index);
	free(inf->group);
	free(inf->version);
	free(inf->resource);
	free(inf->ns);
	free(inf->label);
	free(inf->field);
	pthread_mutex_destroy(&inf->mu);
	pthread_cond_destroy(&inf->cv);
	free(inf);
}

bool sg_kube_informer_has_synced(sg_kube_informer *inf)
{
	pthread_mutex_lock(&inf->mu);
	bool s = inf->synced;
	pthread_mutex_unlock(&inf->mu);
	return s;
}

int sg_kube_informer_wait_synced(sg_kube_informer *inf, unsigned timeout_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&inf->mu);
	while (!inf->synced)
		if (pthread_cond_timedwait(&inf->cv, &inf->mu, &ts) != 0)
			break;
	bool s = inf->synced;
	pthread_mutex_unlock(&inf->mu);
	SG_ENSURE(s, SG_ETIMEOUT, "kube informer: %s not synced within %u ms", inf->resource, timeout_ms);
	return SG_OK;
}

json_t *sg_kube_informer_get(sg_kube_informer *inf, const char *ns, const char *name)
{
	char key[KEY_MAX];
	if (!name || strlen(name) > SG_KUBE_NAME_MAX || (ns && strlen(ns) > SG_KUBE_NAME_MAX))
		return NULL;
	if (ns && *ns)
		snprintf(key, sizeof(key), "%s/%s", ns, name);
	else
		snprintf(key, sizeof(key), "%s", name);
	pthread_mutex_lock(&inf->mu);
	json_t *o = json_incref(json_object_get(inf->store, key));
	pthread_mutex_unlock(&inf->mu);
	return o;
}

json_t *sg_kube_informer_list(sg_kube_informer *inf)
{
	json_t *a = json_array();
	if (!a)
		return NULL;
	pthread_mutex_lock(&inf->mu);
	const char *k;
	json_t *o;
	json_object_foreach(inf->store, k, o)
		json_array_append(a, o);
	pthread_mutex_unlock(&inf->mu);
	return a;
}

json_t *sg_kube_informer_by_index(sg_kube_informer *inf, const char *key)
{
	json_t *a = json_array();
	if (!a || !key)
		return a;
	pthread_mutex_lock(&inf->mu);
	json_t *set = json_object_get(inf->index, key);
	const char *k;
	json_t *v;
	json_object_foreach(set, k, v)
	{
		json_t *o = json_object_get(inf->store, k);
		if (o)
			json_array_append(a, o);
	}
	pthread_mutex_unlock(&inf->mu);
	return a;
}

size_t sg_kube_informer_size(sg_kube_informer *inf)
{
	pthread_mutex_lock(&inf->mu);
	size_t n = json_object_size(inf->store);
	pthread_mutex_unlock(&inf->mu);
	return n;
}

void sg_kube_informer_resource_version(sg_kube_informer *inf, char *out, size_t cap)
{
	pthread_mutex_lock(&inf->mu);
	snprintf(out, cap, "%s", inf->rv);
	pthread_mutex_unlock(&inf->mu);
}

void sg_kube_informer_stats_get(sg_kube_informer *inf, sg_kube_informer_stats *out)
{
	pthread_mutex_lock(&inf->mu);
	*out = inf->stats;
	pthread_mutex_unlock(&inf->mu);
}
