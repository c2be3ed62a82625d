/*
 * sg_workload: the Pod and ServiceAccount caches and the two checks built on
 * them, node authorization and the bound-token authenticator (contract in
 * sg_workload.h).
 *
 * The caches are plain informers (kube/sg_kube_informer.h) over all
 * namespaces. Pods carry one index, "<ns>/<serviceAccountName>/<nodeName>",
 * istiod's node+sa index, so "does a pod of ns/sa run on node X" is one map
 * lookup. Terminal pods (Succeeded, Failed) are left out of it, which is
 * stricter than istiod: a completed Job's pod stays on its node until it is
 * garbage-collected, and a node agent has no business minting identities for
 * containers that no longer run.
 *
 * Node authorization is synchronous and reads the cache only: the policy
 * calls it on a gRPC transport thread, which must never wait for the API
 * server. A caller pod too new for the cache is refused; node agents retry
 * certificate requests with backoff, and the watch delivers a new pod within
 * milliseconds, so the retry succeeds. istiod behaves the same way.
 *
 * The bound-token authenticator wraps another one (the local JWT verifier)
 * and adds what the API server's TokenReview checks and a signature cannot
 * show: the token's ServiceAccount and Pod still exist with the uids the
 * token names (kubernetes pkg/serviceaccount/claims.go, Validate). It is
 * built from three sources, cheapest first:
 *
 *   deleted uids   uids are never reused, so an object uid known to be gone
 *                  stays gone: informer DELETE events and live 404s or uid
 *                  mismatches fill a bounded memory (FIFO eviction), and a
 *                  replayed token of a deleted pod costs no API call;
 *   the caches     the object cached with the token's uid is accepted at
 *                  once, on the calling thread;
 *   a live GET     anything else (absent, another uid: the cache may lag a
 *                  re-creation) is queued to the authenticator's own worker
 *                  threads, which GET the object and call done. The queue is
 *                  bounded; a full queue is SG_EBUSY at once.
 *
 * start() keeps the synchronous contract of the authenticators it wraps:
 * when inner completes during its start() and the caches decide, our
 * start() completes too (done before returning SG_OK, or an error without
 * done). Telling "inner called done during start()" from "inner called done
 * from elsewhere" uses a thread-local slot naming the request being started;
 * a completion on another thread, or on this thread after start() returned,
 * finds no slot and takes the asynchronous path, which owns the request.
 */
#include "sg_workload.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UID_MAX 64          /* sg_caller's uid fields, NUL included */
#define INDEX_KEY_CAP 512   /* what the informer hands the index function */
#define DELETED_LEEWAY_S 60 /* jwt.DefaultLeeway of the API server's validator */
#define LOOKUP_THREADS_MAX 16
#define LOOKUP_THREADS_DEFAULT 2
#define LOOKUP_QUEUE_DEFAULT 256
#define LOOKUP_QUEUE_MAX 65536
#define DEAD_UIDS_DEFAULT 4096
#define DEAD_UIDS_MAX (1u << 20)
#define UNSURE 1 /* a check the caches cannot answer */

struct sg_workload {
	sg_workload_options o;
	sg_kube_informer *pods, *sas;

	pthread_mutex_t mu;    /* the deleted-uid memory */
	json_t *dead;          /* uid -> null */
	char (*ring)[UID_MAX]; /* insertion order, for eviction */
	size_t next;

	atomic_uint_fast64_t imp_allowed, imp_refused;
	atomic_uint_fast64_t bound_cached, bound_live, bound_refused, bound_busy, dead_hits;
};

/* ---- reading objects ---- */

/* A JSON string as a C string; NULL when absent, of another type, or holding
 * a NUL (which a C comparison would cut short). */
static const char *str_of(const json_t *v)
{
	if (!json_is_string(v))
		return NULL;
	const char *s = json_string_value(v);
	return strlen(s) == json_string_length(v) ? s : NULL;
}

/* obj.a.b as a string, NULL for anything else (json_object_get accepts
 * NULL and non-objects). */
static const char *member(const json_t *obj, const char *a, const char *b)
{
	return str_of(json_object_get(json_object_get(obj, a), b));
}

/* One segment of an index key or a REST path: 1..253 printable bytes, no
 * '/' (so "a/b" + "c" and "a" + "b/c" cannot meet in one key). */
static bool segment(const char *s)
{
	size_t n = s ? strnlen(s, SG_KUBE_NAME_MAX + 1) : 0;
	if (n == 0 || n > SG_KUBE_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '/')
			return false;
	return true;
}

static bool make_key(char *key, size_t cap, const char *ns, const char *sa, const char *node)
{
	if (cap == 0)
		return false;
	key[0] = 0;
	if (!segment(ns) || !segment(sa) || !segment(node))
		return false;
	int n = snprintf(key, cap, "%s/%s/%s", ns, sa, node);
	if (n < 0 || (size_t)n >= cap) {
		key[0] = 0;
		return false;
	}
	return true;
}

int sg_workload_pod_index(const json_t *pod, char *key, size_t cap, void *arg)
{
	(void)arg;
	if (!key || cap == 0)
		return 0;
	key[0] = 0;
	if (!json_is_object(pod))
		return 0;
	const char *phase = member(pod, "status", "phase");
	if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
		return 0;
	return make_key(key, cap, member(pod, "metadata", "namespace"), member(pod, "spec", "serviceAccountName"),
	                member(pod, "spec", "nodeName"))
	           ? 1
	           : 0;
}

/* ---- the deleted-uid memory ---- */

static void dead_add(sg_workload *w, const char *uid)
{
	if (!uid || !*uid || strnlen(uid, UID_MAX) >= UID_MAX)
		return;
	pthread_mutex_lock(&w->mu);
	if (!json_object_get(w->dead, uid)) {
		char *slot = w->ring[w->next];
		if (slot[0])
			json_object_del(w->dead, slot);
		if (json_object_set_new(w->dead, uid, json_null()) == 0) {
			snprintf(slot, UID_MAX, "%s", uid);
			w->next = (w->next + 1) % w->o.dead_uids;
		} else {
			slot[0] = 0; /* out of memory or not UTF-8: not remembered */
		}
	}
	pthread_mutex_unlock(&w->mu);
}

static bool dead_has(sg_workload *w, const char *uid)
{
	if (!*uid)
		return false;
	pthread_mutex_lock(&w->mu);
	bool found = json_object_get(w->dead, uid) != NULL;
	pthread_mutex_unlock(&w->mu);
	return found;
}

/* Informer handler (both caches): an object that left the cluster. The
 * informer also reports objects that vanished while its watch was down,
 * found by the relist, which are just as gone. */
static void on_delete(json_t *obj, void *arg)
{
	dead_add(arg, member(obj, "metadata", "uid"));
}

/* ---- life cycle ---- */

static int informer_new(sg_workload *w, const char *resource, sg_kube_index_fn index, sg_kube_informer **out)
{
	sg_kube_ref ref = {.version = "v1", .resource = resource};
	sg_kube_informer_opts io = {.index_fn = index};
	sg_kube_handlers h = {.on_delete = on_delete, .arg = w};
	return sg_kube_informer_new(out, w->o.kube, &ref, &io, &h);
}

int sg_workload_new(sg_workload **out, const sg_workload_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube, SG_EINVAL, "workload index needs a Kubernetes client");
	SG_ENSURE(o->lookup_threads <= LOOKUP_THREADS_MAX && o->lookup_queue <= LOOKUP_QUEUE_MAX &&
	              o->dead_uids <= DEAD_UIDS_MAX,
	          SG_EINVAL, "workload index: at most %d lookup threads, %d queued lookups and %u deleted uids",
	          LOOKUP_THREADS_MAX, LOOKUP_QUEUE_MAX, DEAD_UIDS_MAX);
	sg_workload *w = calloc(1, sizeof(*w));
	SG_ENSURE(w, SG_EINTERNAL, "out of memory");
	w->o = *o;
	if (!w->o.lookup_threads)
		w->o.lookup_threads = LOOKUP_THREADS_DEFAULT;
	if (!w->o.lookup_queue)
		w->o.lookup_queue = LOOKUP_QUEUE_DEFAULT;
	if (!w->o.dead_uids)
		w->o.dead_uids = DEAD_UIDS_DEFAULT;
	pthread_mutex_init(&w->mu, NULL);
	w->dead = json_object();
	w->ring = calloc(w->o.dead_uids, sizeof(*w->ring));
	int rc = w->dead && w->ring ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK && o->pods)
		rc = informer_new(w, "pods", sg_workload_pod_index, &w->pods);
	if (rc == SG_OK && o->service_accounts)
		rc = informer_new(w, "serviceaccounts", NULL, &w->sas);
	if (rc < 0) {
		sg_workload_free(w);
		return rc;
	}
	*out = w;
	return SG_OK;
}

int sg_workload_start(sg_workload *w)
{
	if (w->pods)
		SG_TRY(sg_kube_informer_start(w->pods));
	if (w->sas) {
		int rc = sg_kube_informer_start(w->sas);
		if (rc < 0) {
			sg_kube_informer_stop(w->pods);
			return rc;
		}
	}
	return SG_OK;
}

int sg_workload_wait_synced(sg_workload *w, unsigned timeout_ms)
{
	uint64_t deadline = sg_now_ns() + (uint64_t)timeout_ms * 1000000u;
	sg_kube_informer *list[] = {w->pods, w->sas};
	for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
		if (!list[i])
			continue;
		uint64_t now = sg_now_ns();
		unsigned left = now < deadline ? (unsigned)((deadline - now) / 1000000u) : 0;
		SG_TRY(sg_kube_informer_wait_synced(list[i], left));
	}
	return SG_OK;
}

void sg_workload_stop(sg_workload *w)
{
	if (!w)
		return;
	sg_kube_informer_stop(w->pods);
	sg_kube_informer_stop(w->sas);
}

void sg_workload_free(sg_workload *w)
{
	if (!w)
		return;
	/* Informers first: their handlers write the deleted-uid memory. */
	sg_kube_informer_free(w->pods);
	sg_kube_informer_free(w->sas);
	json_decref(w->dead);
	free(w->ring);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

void sg_workload_stats_get(sg_workload *w, sg_workload_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (w->pods) {
		out->pods = sg_kube_informer_size(w->pods);
		out->pods_synced = sg_kube_informer_has_synced(w->pods);
		sg_kube_informer_stats_get(w->pods, &out->pod_informer);
	}
	if (w->sas) {
		out->service_accounts = sg_kube_informer_size(w->sas);
		out->service_accounts_synced = sg_kube_informer_has_synced(w->sas);
		sg_kube_informer_stats_get(w->sas, &out->sa_informer);
	}
	out->impersonation_allowed = atomic_load(&w->imp_allowed);
	out->impersonation_refused = atomic_load(&w->imp_refused);
	out->bound_cached = atomic_load(&w->bound_cached);
	out->bound_live = atomic_load(&w->bound_live);
	out->bound_refused = atomic_load(&w->bound_refused);
	out->bound_busy = atomic_load(&w->bound_busy);
	out->dead_uid_hits = atomic_load(&w->dead_hits);
}

/* ---- node authorization ---- */

static int authorize(sg_workload *w, const sg_caller *c, const char *tns, const char *tsa)
{
	SG_ENSURE(w->pods, SG_EINTERNAL, "impersonation check needs the pod cache, which is off");
	SG_ENSURE(c && segment(tns) && segment(tsa), SG_EINVAL,
	          "impersonation target is not a namespace/serviceaccount");
	SG_ENSURE(c->pod_name[0], SG_EAUTH, "caller has no pod claim");
	SG_ENSURE(sg_kube_informer_has_synced(w->pods), SG_EBUSY, "the pod cache has not synced yet");
	json_t *pod SG_CLEANUP(json_decrefp) = sg_kube_informer_get(w->pods, c->ns, c->pod_name);
	SG_ENSURE(pod, SG_EAUTH, "caller pod %s/%s not found", c->ns, c->pod_name);
	const char *uid = member(pod, "metadata", "uid");
	/* istiod: only when a pod is re-created under the same name and the
	 * client has not caught up; it retries. */
	SG_ENSURE(uid && strcmp(uid, c->pod_uid) == 0, SG_EAUTH,
	          "caller pod uid mismatch: %s/%s is %.64s, the token names %s", c->ns, c->pod_name,
	          uid ? uid : "(none)", *c->pod_uid ? c->pod_uid : "(none)");
	const char *sa = member(pod, "spec", "serviceAccountName");
	SG_ENSURE(sa && strcmp(sa, c->sa) == 0, SG_EAUTH,
	          "caller pod runs as another service account: %s/%s runs as %.253s, not %s", c->ns, c->pod_name,
	          sa ? sa : "(none)", c->sa);
	const char *node = member(pod, "spec", "nodeName");
	SG_ENSURE(node && *node, SG_EAUTH, "caller pod %s/%s is not scheduled on a node", c->ns, c->pod_name);
	char key[INDEX_KEY_CAP];
	bool keyed = make_key(key, sizeof(key), tns, tsa, node);
	json_t *found SG_CLEANUP(json_decrefp) = keyed ? sg_kube_informer_by_index(w->pods, key) : NULL;
	SG_ENSURE(json_array_size(found) > 0, SG_EAUTH, "no pod of %s/%s runs on node %.253s", tns, tsa, node);
	return SG_OK;
}

int sg_workload_authorize_impersonation(sg_workload *w, const sg_caller *caller, const char *target_ns,
                                        const char *target_sa)
{
	int rc = authorize(w, caller, target_ns, target_sa);
	if (rc == SG_OK) {
		atomic_fetch_add(&w->imp_allowed, 1);
		sg_log(SG_LOG_DEBUG, "node caller impersonates", SG_F_STR("caller", caller->identity),
		       SG_F_STR("pod", caller->pod_name), SG_F_STR("target_ns", target_ns),
		       SG_F_STR("target_sa", target_sa), SG_F_END);
	} else {
		atomic_fetch_add(&w->imp_refused, 1);
	}
	return rc;
}

/* ---- the bound-token check ---- */

/* The two objects a token names (a table, so both take the same path). */
enum { KIND_SA, KIND_POD };
static const struct kind {
	const char *what;     /* in messages */
	const char *resource; /* REST resource of the live GET */
	const char *bound;    /* after "<what> ns/name" in "no longer exists" */
} kinds[] = {
    [KIND_SA] = {"service account", "serviceaccounts", ""},
    [KIND_POD] = {"pod", "pods", " bound to the token"},
};

static sg_kube_informer *cache_of(sg_workload *w, int kind)
{
	return kind == KIND_POD ? w->pods : w->sas;
}

/* Judges obj, the object ns/name as a cache or the API server has it (NULL:
 * absent), against the token's uid ("" when the token carries none). From
 * a cache, absence or another uid may be lag (UNSURE); from a live GET they
 * are final, and the token's uid is remembered as deleted. */
static int judge(sg_workload *w, int kind, const json_t *obj, const char *ns, const char *name, const char *uid,
                 int64_t now, bool live)
{
	const struct kind *k = &kinds[kind];
	if (!obj) {
		if (!live)
			return UNSURE;
		dead_add(w, uid);
		SG_BAIL(SG_EAUTH, "%s %s/%s%s no longer exists", k->what, ns, name, k->bound);
	}
	const char *have = member(obj, "metadata", "uid");
	if (*uid && !(have && strcmp(have, uid) == 0)) {
		if (!live)
			return UNSURE;
		dead_add(w, uid);
		SG_BAIL(SG_EAUTH, "%s %s/%s uid does not match the token", k->what, ns, name);
	}
	/* claims.go: objects deleted more than the leeway ago (their
	 * deletionTimestamp passed; finalizers keep them around) are gone. */
	json_t *when = json_object_get(json_object_get(obj, "metadata"), "deletionTimestamp");
	if (when && !json_is_null(when)) {
		int64_t t;
		SG_ENSURE(sg_clock_parse_rfc3339(str_of(when), &t), SG_EAUTH,
		          "%s %s/%s has an unreadable deletionTimestamp", k->what, ns, name);
		SG_ENSURE(t >= now - DELETED_LEEWAY_S, SG_EAUTH, "%s %s/%s%s has been deleted", k->what, ns, name,
		          k->bound);
	}
	return SG_OK;
}

/* From the deleted-uid memory and the cache: SG_OK, UNSURE or SG_EAUTH. */
static int check_cached(sg_workload *w, int kind, const char *ns, const char *name, const char *uid, int64_t now)
{
	if (dead_has(w, uid)) {
		atomic_fetch_add(&w->dead_hits, 1);
		SG_BAIL(SG_EAUTH, "%s %s/%s%s no longer exists", kinds[kind].what, ns, name, kinds[kind].bound);
	}
	sg_kube_informer *inf = cache_of(w, kind);
	if (!inf)
		return UNSURE;
	json_t *obj SG_CLEANUP(json_decrefp) = sg_kube_informer_get(inf, ns, name);
	return judge(w, kind, obj, ns, name, uid, now, false);
}

/* On a worker: the cache again (it may have caught up while the request
 * waited), then the API server. Failures other than 404 say nothing about
 * the token: SG_EBUSY, so that the client retries. */
static int check_live(sg_workload *w, int kind, const char *ns, const char *name, const char *uid, int64_t now)
{
	int rc = check_cached(w, kind, ns, name, uid, now);
	if (rc != UNSURE)
		return rc;
	const struct kind *k = &kinds[kind];
	sg_kube_ref ref = {.version = "v1", .resource = k->resource, .ns = ns, .name = name};
	json_t *obj SG_CLEANUP(json_decrefp) = NULL;
	atomic_fetch_add(&w->bound_live, 1);
	rc = sg_kube_get(w->o.kube, &ref, &obj);
	if (rc == SG_ENOTFOUND)
		return judge(w, kind, NULL, ns, name, uid, now, true);
	if (rc < 0) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		sg_log(SG_LOG_DEBUG, "bound token check: live GET failed", SG_F_STR("resource", k->resource),
		       SG_F_STR("namespace", ns), SG_F_STR("name", name), SG_F_STR("error", why), SG_F_END);
		SG_BAIL(SG_EBUSY, "cannot confirm %s %s/%s: %s", k->what, ns, name, why);
	}
	const char *got_ns = member(obj, "metadata", "namespace"), *got = member(obj, "metadata", "name");
	SG_ENSURE(got && got_ns && strcmp(got, name) == 0 && strcmp(got_ns, ns) == 0, SG_EBUSY,
	          "cannot confirm %s %s/%s: the API server answered with another object", k->what, ns, name);
	return judge(w, kind, obj, ns, name, uid, now, true);
}

/* Both checks of one caller: SG_OK, UNSURE (live is false and a cache
 * could not tell) or a refusal. A final refusal of the pod from the
 * memory or cache wins over an UNSURE service account: no GET for it. */
static int check_caller(sg_workload *w, const sg_caller *c, int64_t now, bool live)
{
	if (!c->ns[0])
		return SG_OK; /* mTLS: no Kubernetes object named */
	int (*check)(sg_workload *, int, const char *, const char *, const char *, int64_t) =
	    live ? check_live : check_cached;
	SG_ENSURE(segment(c->ns) && segment(c->sa), SG_EAUTH, "token names a malformed service account");
	int sa = check(w, KIND_SA, c->ns, c->sa, c->sa_uid, now);
	if (sa < 0)
		return sa;
	int pod = SG_OK;
	if (c->pod_name[0]) {
		SG_ENSURE(segment(c->pod_name), SG_EAUTH, "token names a malformed pod");
		/* claims.go compares the pod uid unconditionally. */
		SG_ENSURE(c->pod_uid[0], SG_EAUTH, "token names pod %s/%s without its uid", c->ns, c->pod_name);
		pod = check(w, KIND_POD, c->ns, c->pod_name, c->pod_uid, now);
		if (pod < 0)
			return pod;
	}
	return sa == UNSURE || pod == UNSURE ? UNSURE : SG_OK;
}

/* One request through the authenticator. */
struct req {
	struct bound *b;
	sg_authn_done_fn done;
	void *arg;
	int64_t now;
	sg_caller caller; /* inner's, copied: inner's is valid during its done only */
	struct req *next;
};

struct bound {
	sg_authenticator inner;
	sg_workload *w;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct req *head, *tail;
	size_t queued;
	bool stopping;
	pthread_t th[LOOKUP_THREADS_MAX];
	unsigned nth;
};

/* The request whose inner start() is running on this thread. */
struct sync_slot {
	struct req *r;
	bool called;
	int rc;
	sg_error err;
};
static _Thread_local struct sync_slot *tl_slot;

static void tally(sg_workload *w, int rc)
{
	if (rc == SG_EBUSY)
		atomic_fetch_add(&w->bound_busy, 1);
	else if (rc < 0)
		atomic_fetch_add(&w->bound_refused, 1);
}

/* Answers r through done (rc's detail is this thread's last error) and
 * frees it. */
static void finish(struct req *r, int rc)
{
	tally(r->b->w, rc);
	if (rc == SG_OK) {
		r->done(SG_OK, &r->caller, NULL, r->arg);
	} else {
		sg_error e;
		sg_error_save(&e);
		e.code = rc;
		r->done(rc, NULL, &e, r->arg);
	}
	free(r);
}

/* SG_OK: a worker owns r now. Otherwise r is still the caller's. */
static int enqueue(struct bound *b, struct req *r)
{
	int rc = SG_OK;
	pthread_mutex_lock(&b->mu);
	SG_ENSURE_GOTO(rc, !b->stopping, unlock, SG_EBUSY, "bound token check is shutting down");
	SG_ENSURE_GOTO(rc, b->queued < b->w->o.lookup_queue, unlock, SG_EBUSY,
	               "bound token check queue is full (%zu waiting)", b->queued);
	r->next = NULL;
	if (b->tail)
		b->tail->next = r;
	else
		b->head = r;
	b->tail = r;
	b->queued++;
	pthread_cond_signal(&b->cv);
unlock:
	pthread_mutex_unlock(&b->mu);
	return rc;
}

static struct req *dequeue_locked(struct bound *b)
{
	struct req *r = b->head;
	if (r) {
		b->head = r->next;
		if (!b->head)
			b->tail = NULL;
		b->queued--;
	}
	return r;
}

static void *worker(void *arg)
{
	struct bound *b = arg;
	for (;;) {
		pthread_mutex_lock(&b->mu);
		while (!b->head && !b->stopping)
			pthread_cond_wait(&b->cv, &b->mu);
		/* On stop, what is still queued is answered by bound_free. */
		struct req *r = b->stopping ? NULL : dequeue_locked(b);
		pthread_mutex_unlock(&b->mu);
		if (!r)
			return NULL;
		finish(r, check_caller(b->w, &r->caller, r->now, true));
	}
}

/* Inner's verdict arrived; r->caller holds its caller. Completes r through
 * done or hands it to a worker. */
static void judge_async(struct req *r)
{
	int rc = check_caller(r->b->w, &r->caller, r->now, false);
	if (rc == UNSURE) {
		rc = enqueue(r->b, r);
		if (rc == SG_OK)
			return;
	} else {
		atomic_fetch_add(&r->b->w->bound_cached, 1);
	}
	finish(r, rc);
}

static void inner_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	struct req *r = arg;
	struct sync_slot *s = tl_slot;
	if (rc == SG_OK && caller)
		r->caller = *caller;
	if (s && s->r == r && !s->called) {
		/* During our start(), on its thread: start() goes on from here. */
		s->called = true;
		s->rc = rc == SG_OK && !caller ? SG_EINTERNAL : rc;
		if (s->rc != SG_OK) {
			if (err)
				s->err = *err;
			else
				sg_error_save(&s->err);
		}
		return;
	}
	if (rc != SG_OK || !caller) {
		/* Inner's failure, unchanged (not counted: it is not ours). */
		sg_error e;
		if (err)
			e = *err;
		else
			sg_error_save(&e);
		if (e.code >= 0)
			e.code = rc < 0 ? rc : SG_EINTERNAL;
		r->done(e.code, NULL, &e, r->arg);
		free(r);
		return;
	}
	judge_async(r);
}

static int bound_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct bound *b = self;
	struct req *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "out of memory");
	r->b = b;
	r->done = done;
	r->arg = arg;
	r->now = req->now > 0 ? req->now : sg_wall_seconds();
	struct sync_slot slot = {.r = r};
	struct sync_slot *outer = tl_slot;
	tl_slot = &slot;
	int rc = b->inner.start(b->inner.self, req, inner_done, r);
	tl_slot = outer;
	if (rc != SG_OK) {
		free(r); /* inner did not take it; its detail is current */
		return rc;
	}
	if (!slot.called)
		return SG_OK; /* inner answers later; inner_done owns r */
	if (slot.rc != SG_OK) {
		free(r);
		sg_error_restore(&slot.err);
		return slot.rc < 0 ? slot.rc : SG_EINTERNAL;
	}
	rc = check_caller(b->w, &r->caller, r->now, false);
	if (rc == UNSURE) {
		rc = enqueue(b, r);
		if (rc == SG_OK)
			return SG_OK; /* a worker calls done */
	} else {
		atomic_fetch_add(&b->w->bound_cached, 1);
	}
	tally(b->w, rc);
	if (rc == SG_OK)
		done(SG_OK, &r->caller, NULL, arg);
	free(r);
	return rc;
}

static void bound_free(void *self)
{
	struct bound *b = self;
	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	b->stopping = true;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	for (unsigned i = 0; i < b->nth; i++)
		pthread_join(b->th[i], NULL);
	for (;;) {
		pthread_mutex_lock(&b->mu);
		struct req *r = dequeue_locked(b);
		pthread_mutex_unlock(&b->mu);
		if (!r)
			break;
		finish(r, sg_error_set(SG_EBUSY, "bound token check is shutting down"));
	}
	/* Inner may complete its own pending requests while it is freed:
	 * they find us stopping and are answered at once. */
	if (b->inner.free)
		b->inner.free(b->inner.self);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

int sg_authn_bound_new(sg_authenticator *out, sg_authenticator inner, sg_workload *w)
{
	memset(out, 0, sizeof(*out));
	struct bound *b = NULL;
	if (w && inner.start)
		b = calloc(1, sizeof(*b));
	if (!b) {
		if (inner.free)
			inner.free(inner.self);
		SG_BAIL(w && inner.start ? SG_EINTERNAL : SG_EINVAL,
		        w && inner.start ? "out of memory"
		                         : "bound token check needs an authenticator and a workload index");
	}
	b->inner = inner;
	b->w = w;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	for (; b->nth < w->o.lookup_threads; b->nth++) {
		if (pthread_create(&b->th[b->nth], NULL, worker, b) != 0) {
			bound_free(b);
			SG_BAIL(SG_EINTERNAL, "bound token check: cannot start a worker thread");
		}
	}
	out->name = inner.name ? inner.name : "bound";
	out->start = bound_start;
	out->free = bound_free;
	out->self = b;
	return SG_OK;
}
