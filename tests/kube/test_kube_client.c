/*
 * sg_kube against a real kube-apiserver (test_kube_env.h): CRUD and the
 * error details, a delete conditional on the uid, pagination, watches (order, bookmarks, 410), server-side
 * apply conflicts, a create whose fields the apply owns, the status subresource of a CRD, Events, authentication
 * failures and token-file rotation, TLS verification, the rate limiter,
 * the GET of non-resource paths (the OIDC discovery endpoints), and the
 * request loop (many creates in flight on one thread, and its stop).
 */
#include "sg_clock.h"
#include "sg_kube.h"
#include "sg_test.h"
#include "test_kube_env.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sg_kube *k;

static sg_kube_ref cm_ref(const char *name)
{
	return (sg_kube_ref){.version = "v1", .resource = "configmaps", .ns = "default", .name = name};
}

static const char *data_of(const json_t *obj, const char *key)
{
	json_t *v = json_object_get(json_object_get(obj, "data"), key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static void t_crud(void)
{
	sg_kube_ref coll = cm_ref(NULL), one = cm_ref("crud");
	json_t *cm = kube_env_configmap("default", "crud", "k", "v1");
	json_t *created = NULL, *got = NULL, *updated = NULL, *patched = NULL;
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &created));
	SG_CHECK(sg_kube_last_status()->code == 201);
	SG_CHECK(sg_kube_meta_str(created, "uid") != NULL);

	int rc = sg_kube_create(k, &coll, cm, NULL);
	SG_CHECK(rc == SG_EBUSY && sg_kube_conflict(rc));
	SG_CHECK(sg_kube_last_status()->code == 409);
	SG_CHECK(strcmp(sg_kube_last_status()->reason, "AlreadyExists") == 0);
	SG_CHECK_MSG("kube: POST configmaps in default: 409 AlreadyExists: configmaps \"crud\" already exists");

	SG_CHECK_OK(sg_kube_get(k, &one, &got));
	SG_CHECK(got && strcmp(data_of(got, "k"), "v1") == 0);
	SG_CHECK(!sg_kube_conflict(SG_OK) && !sg_kube_conflict(SG_EBUSY)); /* the last answer was 200 */

	/* PUT with the current resourceVersion, then a stale one. */
	json_t *edit = json_deep_copy(got);
	json_object_set_new(json_object_get(edit, "data"), "k", json_string("v2"));
	SG_CHECK_OK(sg_kube_update(k, &one, edit, &updated));
	SG_CHECK(updated && strcmp(data_of(updated, "k"), "v2") == 0);
	rc = sg_kube_update(k, &one, edit, NULL);
	SG_CHECK(rc == SG_EBUSY && sg_kube_conflict(rc));
	SG_CHECK(sg_kube_last_status()->code == 409 && strcmp(sg_kube_last_status()->reason, "Conflict") == 0);
	SG_CHECK_MSG("kube: PUT configmaps default/crud: 409 Conflict: Operation cannot be fulfilled on configmaps "
	             "\"crud\": the object has been modified");

	json_t *patch = json_pack("{s:{s:s, s:n}}", "data", "extra", "x", "k");
	SG_CHECK_OK(sg_kube_merge_patch(k, &one, patch, &patched));
	SG_CHECK(patched && data_of(patched, "k") == NULL && strcmp(data_of(patched, "extra"), "x") == 0);

	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	SG_CHECK_RC(sg_kube_get(k, &one, NULL), SG_ENOTFOUND);
	SG_CHECK(sg_kube_last_status()->code == 404);
	SG_CHECK_MSG("kube: GET configmaps default/crud: 404 NotFound: configmaps \"crud\" not found");
	SG_CHECK_RC(sg_kube_delete(k, &one, NULL), SG_ENOTFOUND);

	/* A body the server refuses: 422 Invalid. */
	json_t *bad = kube_env_configmap("default", "Not_A_Valid_Name", "k", "v");
	SG_CHECK_RC(sg_kube_create(k, &coll, bad, NULL), SG_EINVAL);
	SG_CHECK(sg_kube_last_status()->code == 422);
	json_decref(bad);
	json_decref(cm);
	json_decref(created);
	json_decref(got);
	json_decref(edit);
	json_decref(updated);
	json_decref(patch);
	json_decref(patched);
}

/* Delete with a UID precondition: another object of the same name (made
 * after the one whose uid is given) stays; the right uid deletes. And
 * sg_kube_delete_seen, which falls back to the name without a uid. */
static void t_delete_uid(void)
{
	sg_kube_ref coll = cm_ref(NULL), one = cm_ref("by-uid");
	json_t *cm = kube_env_configmap("default", "by-uid", "k", "v1");
	json_t *first = NULL, *second = NULL;
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &first));
	char old_uid[64];
	snprintf(old_uid, sizeof(old_uid), "%s", first ? sg_kube_meta_str(first, "uid") : "");
	SG_CHECK_OK(sg_kube_delete_uid(k, &one, old_uid, NULL));
	SG_CHECK_RC(sg_kube_get(k, &one, NULL), SG_ENOTFOUND);
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &second));
	SG_CHECK_RC(sg_kube_delete_uid(k, &one, old_uid, NULL), SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 409);
	SG_CHECK_OK(sg_kube_get(k, &one, NULL));
	SG_CHECK_RC(sg_kube_delete_uid(k, &one, "", NULL), SG_EINVAL);
	SG_CHECK_OK(sg_kube_delete_uid(k, &one, second ? sg_kube_meta_str(second, "uid") : "x", NULL));
	SG_CHECK_RC(sg_kube_delete_uid(k, &one, old_uid, NULL), SG_ENOTFOUND);

	/* As seen: the old uid leaves the newer object alone, no uid deletes
	 * by name. */
	json_t *third = NULL;
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &third));
	SG_CHECK_RC(sg_kube_delete_seen(k, &one, old_uid, NULL), SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 409);
	SG_CHECK_OK(sg_kube_get(k, &one, NULL));
	SG_CHECK_OK(sg_kube_delete_seen(k, &one, "", NULL));
	SG_CHECK_RC(sg_kube_get(k, &one, NULL), SG_ENOTFOUND);
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, NULL));
	SG_CHECK_OK(sg_kube_delete_seen(k, &one, NULL, NULL));
	SG_CHECK_RC(sg_kube_get(k, &one, NULL), SG_ENOTFOUND);
	json_decref(cm);
	json_decref(first);
	json_decref(second);
	json_decref(third);
}

/* Delete of the version seen: a write since (a key another manager added)
 * turns it into 409 and the object stays; the version as it is now
 * deletes. Both preconditions are required. */
static void t_delete_version(void)
{
	sg_kube_ref coll = cm_ref(NULL), one = cm_ref("by-version");
	json_t *cm = kube_env_configmap("default", "by-version", "k", "v1");
	json_t *seen = NULL, *now = NULL;
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &seen));
	char uid[64], rv[64];
	snprintf(uid, sizeof(uid), "%s", seen ? sg_kube_meta_str(seen, "uid") : "");
	snprintf(rv, sizeof(rv), "%s", seen ? sg_kube_meta_str(seen, "resourceVersion") : "");
	json_t *patch = json_pack("{s:{s:s}}", "data", "mine", "kept");
	SG_CHECK_OK(sg_kube_merge_patch(k, &one, patch, &now));
	SG_CHECK_RC(sg_kube_delete_version(k, &one, uid, rv, NULL), SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 409);
	json_t *still = NULL;
	SG_CHECK_OK(sg_kube_get(k, &one, &still));
	SG_CHECK(json_string_value(json_object_get(json_object_get(still, "data"), "mine")) != NULL);
	SG_CHECK_RC(sg_kube_delete_version(k, &one, uid, "", NULL), SG_EINVAL);
	SG_CHECK_RC(sg_kube_delete_version(k, &one, uid, NULL, NULL), SG_EINVAL);
	SG_CHECK_RC(sg_kube_delete_version(k, &one, NULL, rv, NULL), SG_EINVAL);
	SG_CHECK_OK(sg_kube_get(k, &one, NULL));
	SG_CHECK_OK(sg_kube_delete_version(k, &one, uid, now ? sg_kube_meta_str(now, "resourceVersion") : "x", NULL));
	SG_CHECK_RC(sg_kube_get(k, &one, NULL), SG_ENOTFOUND);
	json_decref(patch);
	json_decref(still);
	json_decref(cm);
	json_decref(seen);
	json_decref(now);
}

static void t_pagination(void)
{
	sg_kube_ref coll = cm_ref(NULL);
	for (int i = 0; i < 5; i++) {
		char name[32];
		snprintf(name, sizeof(name), "page-%d", i);
		json_t *cm = kube_env_configmap("default", name, "i", name);
		json_object_set_new(json_object_get(cm, "metadata"), "labels", json_pack("{s:s}", "signet-test", "page"));
		SG_CHECK_OK(sg_kube_create(k, &coll, cm, NULL));
		json_decref(cm);
	}
	sg_kube_list_opts o = {.label_selector = "signet-test=page", .limit = 2};
	int pages = 0;
	size_t total = 0;
	char cont[1024] = "";
	do {
		json_t *page = NULL;
		o.cont = cont[0] ? cont : NULL;
		SG_CHECK_OK(sg_kube_list(k, &coll, &o, &page));
		if (!page)
			break;
		pages++;
		total += json_array_size(json_object_get(page, "items"));
		SG_CHECK(json_array_size(json_object_get(page, "items")) <= 2);
		const char *c = sg_kube_meta_str(page, "continue");
		snprintf(cont, sizeof(cont), "%s", c ? c : "");
		json_decref(page);
	} while (cont[0] && pages < 10);
	SG_CHECK(pages == 3);
	SG_CHECK(total == 5);

	json_t *all = NULL;
	SG_CHECK_OK(sg_kube_list_all(k, &coll, &o, &all));
	SG_CHECK(json_array_size(json_object_get(all, "items")) == 5);
	SG_CHECK(sg_kube_meta_str(all, "resourceVersion") != NULL);
	json_decref(all);

	/* A forged continue token is refused, not a crash. */
	o.cont = "bm90LWEtdG9rZW4=";
	SG_CHECK(sg_kube_list(k, &coll, &o, NULL) < 0);
	SG_CHECK(sg_kube_last_status()->code == 400 || sg_kube_last_status()->code == 410);
}

/* ---- watch ---- */

struct wrec {
	pthread_mutex_t mu;
	int n;
	sg_kube_event_type types[64];
	char names[64][32];
	int bookmarks;
	atomic_bool stop;
	atomic_bool ended; /* sg_kube_watch has returned */
	int rc;
	sg_kube_status status;
	sg_kube_watch_opts opt;
	sg_kube_ref ref;
};

static int wrec_event(sg_kube_event_type t, json_t *obj, void *arg)
{
	struct wrec *w = arg;
	pthread_mutex_lock(&w->mu);
	if (t == SG_KUBE_BOOKMARK) {
		w->bookmarks++;
	} else if (w->n < 64) {
		w->types[w->n] = t;
		const char *name = sg_kube_meta_str(obj, "name");
		snprintf(w->names[w->n], sizeof(w->names[0]), "%s", name ? name : "?");
		w->n++;
	}
	pthread_mutex_unlock(&w->mu);
	return 0;
}

static void *watch_thread(void *arg)
{
	struct wrec *w = arg;
	w->opt.stop = &w->stop;
	w->rc = sg_kube_watch(k, &w->ref, &w->opt, wrec_event, w);
	w->status = *sg_kube_last_status();
	atomic_store(&w->ended, true);
	return NULL;
}

static int wrec_count(struct wrec *w)
{
	pthread_mutex_lock(&w->mu);
	int n = w->n;
	pthread_mutex_unlock(&w->mu);
	return n;
}

static void t_watch_order(void)
{
	sg_kube_ref coll = cm_ref(NULL), one = cm_ref("watched");
	json_t *list = NULL;
	SG_CHECK_OK(sg_kube_list(k, &coll, &(sg_kube_list_opts){.limit = 1}, &list));
	static struct wrec w = {.mu = PTHREAD_MUTEX_INITIALIZER};
	w.ref = coll;
	w.opt = (sg_kube_watch_opts){.resource_version = sg_kube_meta_str(list, "resourceVersion"),
	                             .field_selector = "metadata.name=watched", .timeout_seconds = 30};
	pthread_t th;
	pthread_create(&th, NULL, watch_thread, &w);
	json_t *cm = kube_env_configmap("default", "watched", "k", "a");
	json_t *p = json_pack("{s:{s:s}}", "data", "k", "b");
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, NULL));
	SG_CHECK_OK(sg_kube_merge_patch(k, &one, p, NULL));
	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	SG_WAIT_FOR(30000, wrec_count(&w) >= 3);
	uint64_t t0 = sg_now_ns();
	atomic_store(&w.stop, true);
	pthread_join(th, NULL);
	double stop_s = (double)(sg_now_ns() - t0) / 1e9;
	printf("watch stopped %.2f s after the request\n", stop_s);
	/* Within about a second; the bound leaves a loaded machine room and
	 * is still far from the watch's own 30 s end. */
	SG_CHECK(stop_s < 10);
	SG_CHECK_OK(w.rc);
	SG_CHECK(w.n == 3);
	SG_CHECK(w.types[0] == SG_KUBE_ADDED && w.types[1] == SG_KUBE_MODIFIED && w.types[2] == SG_KUBE_DELETED);
	for (int i = 0; i < 3; i++)
		SG_CHECK(strcmp(w.names[i], "watched") == 0);
	json_decref(cm);
	json_decref(p);
	json_decref(list);
}

static void t_watch_bookmarks(void)
{
	/* 1.20's watch cache sends a bookmark about 2 s before the watch's
	 * deadline, and only once it has seen an event of the resource newer
	 * than the watch's resourceVersion (bookmarks ignore selectors). */
	static struct wrec w = {.mu = PTHREAD_MUTEX_INITIALIZER};
	w.ref = cm_ref(NULL);
	w.opt = (sg_kube_watch_opts){.timeout_seconds = 5, .field_selector = "metadata.name=nothing-here"};
	json_t *list = NULL;
	SG_CHECK_OK(sg_kube_list(k, &w.ref, &(sg_kube_list_opts){.limit = 1}, &list));
	w.opt.resource_version = sg_kube_meta_str(list, "resourceVersion");
	uint64_t t0 = sg_now_ns();
	pthread_t th;
	pthread_create(&th, NULL, watch_thread, &w);
	/* The event must be newer than what the watch cache has replayed to
	 * the watch when it registers it (an event before that only moves the
	 * watch's own resourceVersion), and nothing tells the client when
	 * that was: so the trigger changes every 200 ms until the watch ends,
	 * and some change comes after, however long the watch took to start.
	 * The selector keeps every one of them out of the stream. */
	sg_kube_ref coll = cm_ref(NULL), one = cm_ref("bookmark-trigger");
	json_t *cm = kube_env_configmap("default", "bookmark-trigger", "k", "v");
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, NULL));
	for (int i = 0; i < 300 && !atomic_load(&w.ended); i++) {
		sg_sleep_ms(200);
		char v[16];
		snprintf(v, sizeof(v), "%d", i);
		json_t *p = json_pack("{s:{s:s}}", "data", "k", v);
		SG_CHECK_OK(sg_kube_merge_patch(k, &one, p, NULL));
		json_decref(p);
	}
	pthread_join(th, NULL); /* runs until the server ends it */
	double s = (double)(sg_now_ns() - t0) / 1e9;
	printf("bookmark watch: %d bookmarks, %d events, ended after %.1f s (rc %d)\n", w.bookmarks, w.n, s, w.rc);
	SG_CHECK_OK(w.rc);
	SG_CHECK(w.bookmarks >= 1);
	SG_CHECK(w.n == 0);
	SG_CHECK(s > 3 && s < 15);
	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	json_decref(cm);
	json_decref(list);
}

/* ---- server-side apply ---- */

static void t_apply(void)
{
	sg_kube_ref one = cm_ref("applied");
	json_t *intent = kube_env_configmap("default", "applied", "owner", "first");
	json_t *a = NULL, *b = NULL, *c = NULL;
	SG_CHECK_OK(sg_kube_apply(k, &one, intent, "signet-a", false, &a));
	SG_CHECK_OK(sg_kube_apply(k, &one, intent, "signet-a", false, &b));
	SG_CHECK(a && b);
	if (a && b) /* the same intent twice changes nothing */
		SG_CHECK(strcmp(sg_kube_meta_str(a, "resourceVersion"), sg_kube_meta_str(b, "resourceVersion")) == 0);

	json_t *other = kube_env_configmap("default", "applied", "owner", "second");
	SG_CHECK_RC(sg_kube_apply(k, &one, other, "signet-b", false, NULL), SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 409 && strcmp(sg_kube_last_status()->reason, "Conflict") == 0);
	SG_CHECK_MSG("409 Conflict: Apply failed with 1 conflict: conflict with \"signet-a\"");
	SG_CHECK_OK(sg_kube_apply(k, &one, other, "signet-b", true, &c));
	SG_CHECK(c && strcmp(data_of(c, "owner"), "second") == 0);
	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	json_decref(intent);
	json_decref(other);
	json_decref(a);
	json_decref(b);
	json_decref(c);
}

/* ---- a create whose fields an apply owns ---- */

/* ConfigMap name with labels a and (when with_b) b. */
static json_t *labelled_cm(const char *name, bool with_b)
{
	json_t *o = kube_env_configmap("default", name, "k", "v");
	json_t *labels = with_b ? json_pack("{s:s, s:s}", "a", "1", "b", "2") : json_pack("{s:s}", "a", "1");
	json_object_set_new(json_object_get(o, "metadata"), "labels", labels);
	return o;
}

static bool has_label(const json_t *o, const char *key)
{
	return json_object_get(json_object_get(json_object_get(o, "metadata"), "labels"), key) != NULL;
}

/* How many managedFields entries o has, and how many are (manager, op). */
static size_t entries(const json_t *o, const char *manager, const char *op, size_t *all)
{
	const json_t *mf = json_object_get(json_object_get(o, "metadata"), "managedFields");
	size_t n = 0, i;
	const json_t *m;
	json_array_foreach(mf, i, m)
	{
		const char *who = json_string_value(json_object_get(m, "manager"));
		const char *what = json_string_value(json_object_get(m, "operation"));
		n += who && what && strcmp(who, manager) == 0 && strcmp(what, op) == 0;
	}
	*all = json_array_size(mf);
	return n;
}

static void t_create_applied(void)
{
	sg_kube_ref coll = cm_ref(NULL), one = cm_ref("made-applied"), plain = cm_ref("made-plain");
	json_t *body = labelled_cm("made-applied", true), *less = labelled_cm("made-applied", false);
	json_t *made = NULL, *after = NULL;
	size_t all = 0;
	SG_CHECK_OK(sg_kube_create_applied(k, &coll, body, "signet-c", &made));
	SG_CHECK(sg_kube_last_status()->code == 201); /* the create's */
	SG_CHECK(made && has_label(made, "b"));
	SG_CHECK(entries(made, "signet-c", "Apply", &all) == 1 && all == 1);

	/* A name taken is refused, as by a create. */
	int rc = sg_kube_create_applied(k, &coll, body, "signet-c", NULL);
	SG_CHECK(rc == SG_EBUSY && sg_kube_conflict(rc));
	SG_CHECK(strcmp(sg_kube_last_status()->reason, "AlreadyExists") == 0);

	/* The manager's next intent leaves label b out: b goes. */
	SG_CHECK_OK(sg_kube_apply(k, &one, less, "signet-c", false, &after));
	SG_CHECK(after && has_label(after, "a") && !has_label(after, "b"));
	SG_CHECK(entries(after, "signet-c", "Apply", &all) == 1 && all == 1);
	json_decref(after);
	after = NULL;

	/* What a plain create leaves behind: the same apply keeps b, owned by
	 * an update under the client's User-Agent. */
	json_t *pbody = labelled_cm("made-plain", true), *pless = labelled_cm("made-plain", false);
	/* The apply's own intent has a label c the create had not. */
	json_t *pmore = labelled_cm("made-plain", false);
	json_object_set_new(json_object_get(json_object_get(pmore, "metadata"), "labels"), "c", json_string("3"));
	SG_CHECK_OK(sg_kube_create(k, &coll, pbody, NULL));
	SG_CHECK_OK(sg_kube_apply(k, &plain, pmore, "signet-c", false, &after));
	SG_CHECK(after && has_label(after, "b") && has_label(after, "c"));
	SG_CHECK(entries(after, "signet-c", "Apply", &all) == 1 && all == 2);
	SG_CHECK(entries(after, SG_KUBE_USER_AGENT_MANAGER, "Update", &all) == 1);

	/* Adopted: the update's fields join the apply's, values unchanged;
	 * the next apply without b and c removes both (b was the update's
	 * alone, c the apply's alone: the union of the two). */
	const char *from[] = {"someone-else", SG_KUBE_USER_AGENT_MANAGER};
	json_t *adopted = NULL, *again = NULL, *last = NULL;
	SG_CHECK_OK(sg_kube_adopt_fields(k, &plain, after, from, 2, "signet-c", &adopted));
	SG_CHECK(adopted && has_label(adopted, "b"));
	SG_CHECK(entries(adopted, "signet-c", "Apply", &all) == 1 && all == 1);
	/* The copy read before is stale now: refused as a conflict. */
	rc = sg_kube_adopt_fields(k, &plain, after, from, 2, "signet-c", NULL);
	SG_CHECK(rc == SG_EBUSY && sg_kube_conflict(rc));
	SG_CHECK(strcmp(sg_kube_last_status()->reason, "Conflict") == 0);
	/* Nothing left to adopt: no request (the last status is still the
	 * conflict's). */
	SG_CHECK_OK(sg_kube_adopt_fields(k, &plain, adopted, from, 2, "signet-c", &again));
	SG_CHECK(again == NULL && sg_kube_last_status()->code == 409);
	SG_CHECK_OK(sg_kube_apply(k, &plain, pless, "signet-c", false, &last));
	SG_CHECK(last && has_label(last, "a") && !has_label(last, "b") && !has_label(last, "c"));
	SG_CHECK_RC(sg_kube_adopt_fields(k, &one, adopted, from, 2, "signet-c", NULL), SG_EINVAL); /* another name */

	/* A JSON patch is all or none: a failed test refuses it (422). */
	json_t *ops = json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}]", "op", "test", "path", "/data/k", "value", "not-v",
	                        "op", "replace", "path", "/data/k", "value", "w");
	SG_CHECK_RC(sg_kube_json_patch(k, &plain, ops, NULL), SG_EINVAL);
	SG_CHECK(sg_kube_last_status()->code == 422);
	json_object_set_new(json_array_get(ops, 0), "value", json_string("v"));
	json_t *patched = NULL;
	SG_CHECK_OK(sg_kube_json_patch(k, &plain, ops, &patched));
	SG_CHECK(patched && strcmp(data_of(patched, "k"), "w") == 0);
	json_t *empty = json_array();
	SG_CHECK_RC(sg_kube_json_patch(k, &plain, empty, NULL), SG_EINVAL);
	json_decref(empty);
	json_decref(ops);
	json_decref(patched);
	json_decref(adopted);
	json_decref(last);

	/* Arguments: a field manager as for an apply, a collection only. */
	SG_CHECK_RC(sg_kube_create_applied(k, &coll, body, "", NULL), SG_EINVAL);
	SG_CHECK_MSG("kube: create_applied needs a field manager of 1..128 bytes");
	json_t *unread = labelled_cm("made-plain", true); /* the right name, no resourceVersion */
	SG_CHECK_RC(sg_kube_adopt_fields(k, &plain, unread, NULL, 0, "signet-c", NULL), SG_EINVAL);
	SG_CHECK_MSG("kube: adopt_fields needs the object as read (its name and resourceVersion)");
	json_decref(unread);
	SG_CHECK_RC(sg_kube_create_applied(k, &coll, body, "bad\nmanager", NULL), SG_EINVAL);
	SG_CHECK_RC(sg_kube_create_applied(k, &one, body, "signet-c", NULL), SG_EINVAL);

	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	SG_CHECK_OK(sg_kube_delete(k, &plain, NULL));
	json_decref(body);
	json_decref(less);
	json_decref(pbody);
	json_decref(pless);
	json_decref(pmore);
	json_decref(made);
	json_decref(after);
}

/* ---- CRD status subresource ---- */

static void t_status_subresource(void)
{
	json_t *crd = json_loads(
	    "{\"apiVersion\":\"apiextensions.k8s.io/v1\",\"kind\":\"CustomResourceDefinition\","
	    "\"metadata\":{\"name\":\"widgets.test.signet.io\"},"
	    "\"spec\":{\"group\":\"test.signet.io\",\"scope\":\"Namespaced\","
	    "\"names\":{\"plural\":\"widgets\",\"singular\":\"widget\",\"kind\":\"Widget\"},"
	    "\"versions\":[{\"name\":\"v1\",\"served\":true,\"storage\":true,\"subresources\":{\"status\":{}},"
	    "\"schema\":{\"openAPIV3Schema\":{\"type\":\"object\",\"properties\":{"
	    "\"spec\":{\"type\":\"object\",\"properties\":{\"size\":{\"type\":\"integer\"}}},"
	    "\"status\":{\"type\":\"object\",\"properties\":{\"phase\":{\"type\":\"string\"}}}}}}}]}}",
	    0, NULL);
	sg_kube_ref crds = {.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions"};
	SG_CHECK(crd != NULL);
	int crc = sg_kube_create(k, &crds, crd, NULL); /* a shared server may have it already */
	SG_CHECK(crc == 0 || (crc == SG_EBUSY && strcmp(sg_kube_last_status()->reason, "AlreadyExists") == 0));
	json_decref(crd);

	sg_kube_ref coll = {.group = "test.signet.io", .version = "v1", .resource = "widgets", .ns = "default"};
	json_t *w = json_pack("{s:s, s:s, s:{s:s}, s:{s:i}}", "apiVersion", "test.signet.io/v1", "kind", "Widget",
	                      "metadata", "name", "w1", "spec", "size", 3);
	json_t *created = NULL;
	int rc = -1;
	uint64_t deadline = sg_now_ns() + 20000000000ull;
	while ((rc = sg_kube_create(k, &coll, w, &created)) == SG_ENOTFOUND && sg_now_ns() < deadline)
		sg_sleep_ms(200); /* until the CRD is established and served */
	SG_CHECK_OK(rc);
	if (!created) {
		json_decref(w);
		return;
	}
	json_t *st = json_deep_copy(created);
	json_object_set_new(st, "status", json_pack("{s:s}", "phase", "Ready"));
	json_object_set_new(json_object_get(st, "spec"), "size", json_integer(99)); /* ignored by /status */
	sg_kube_ref one = coll;
	one.name = "w1";
	one.subresource = "status";
	json_t *after = NULL;
	SG_CHECK_OK(sg_kube_update(k, &one, st, &after));
	json_t *phase = json_object_get(json_object_get(after, "status"), "phase");
	SG_CHECK(json_is_string(phase) && strcmp(json_string_value(phase), "Ready") == 0);
	SG_CHECK(json_integer_value(json_object_get(json_object_get(after, "spec"), "size")) == 3);
	/* and a status change through the main resource is ignored */
	one.subresource = NULL;
	json_t *main_upd = json_deep_copy(after), *after2 = NULL;
	json_object_set_new(main_upd, "status", json_pack("{s:s}", "phase", "Hacked"));
	SG_CHECK_OK(sg_kube_update(k, &one, main_upd, &after2));
	phase = json_object_get(json_object_get(after2, "status"), "phase");
	SG_CHECK(json_is_string(phase) && strcmp(json_string_value(phase), "Ready") == 0);
	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	json_decref(w);
	json_decref(created);
	json_decref(st);
	json_decref(after);
	json_decref(main_upd);
	json_decref(after2);
}

static void t_event(void)
{
	sg_kube_ref coll = cm_ref(NULL);
	json_t *cm = kube_env_configmap("default", "evented", "k", "v"), *obj = NULL, *ev = NULL;
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &obj));
	SG_CHECK_OK(sg_kube_event(k, obj, "Warning", "IssuerNotReady", "the HSM \"slot 0\"\nis down", "signet", &ev));
	SG_CHECK(ev != NULL);
	if (ev) {
		sg_kube_ref evr = {.version = "v1", .resource = "events", .ns = "default", .name = sg_kube_meta_str(ev, "name")};
		json_t *got = NULL;
		SG_CHECK_OK(sg_kube_get(k, &evr, &got));
		json_t *io = json_object_get(got, "involvedObject");
		SG_CHECK(strcmp(json_string_value(json_object_get(io, "name")), "evented") == 0);
		SG_CHECK(strcmp(json_string_value(json_object_get(io, "kind")), "ConfigMap") == 0);
		SG_CHECK(strcmp(json_string_value(json_object_get(io, "uid")), sg_kube_meta_str(obj, "uid")) == 0);
		SG_CHECK(strcmp(json_string_value(json_object_get(got, "reason")), "IssuerNotReady") == 0);
		SG_CHECK(strcmp(json_string_value(json_object_get(got, "type")), "Warning") == 0);
		json_decref(got);
	}
	SG_CHECK_RC(sg_kube_event(k, obj, "Fatal", "X", "m", "signet", NULL), SG_EINVAL);
	sg_kube_ref one = cm_ref("evented");
	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	json_decref(cm);
	json_decref(obj);
	json_decref(ev);
}

static void t_watch_expired(void)
{
	/* A CRD's watch cache starts at the resourceVersion current when the
	 * CRD became established, so "1" lies before its window: 410. (The
	 * built-in resources' caches start near 1 on a fresh server.) */
	static struct wrec w = {.mu = PTHREAD_MUTEX_INITIALIZER};
	w.ref = (sg_kube_ref){.group = "test.signet.io", .version = "v1", .resource = "widgets", .ns = "default"};
	w.opt = (sg_kube_watch_opts){.resource_version = "1", .timeout_seconds = 10};
	watch_thread(&w);
	SG_CHECK_RC(w.rc, SG_EBUSY);
	SG_CHECK(w.status.code == 410);
	SG_CHECK(strcmp(w.status.reason, "Expired") == 0);
	printf("410: %s\n", sg_error_last()->msg);
	SG_CHECK_MSG("kube: WATCH widgets in default: watch expired: 410 Expired: too old resource version: 1 (");
}

/* ---- authentication, TLS ---- */

static sg_kube *client_from(const char *yaml)
{
	sg_kube_config *c = NULL;
	sg_kube *kk = NULL;
	if (sg_kube_config_from_bytes(&c, yaml, strlen(yaml), NULL, NULL) != 0) {
		fprintf(stderr, "config: %s\n", sg_error_last()->msg);
		return NULL;
	}
	if (sg_kube_new(&kk, &c, &(sg_kube_options){.qps = -1}) != 0)
		return NULL;
	return kk;
}

static void copy_file(const char *from, const char *to)
{
	char tmp[700];
	snprintf(tmp, sizeof(tmp), "%s.tmp", to);
	FILE *in = fopen(from, "r"), *out = fopen(tmp, "w");
	if (!in || !out)
		abort();
	char buf[512];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, n, out);
	fclose(in);
	fclose(out);
	if (rename(tmp, to) != 0) /* atomically, as the kubelet does */
		abort();
}

static void t_auth_and_rotation(void)
{
	char token[700], yaml[2048];
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(token, sizeof(token), "%s/kube-client-token.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
	copy_file(kube_env.user_token_file, token);
	snprintf(yaml, sizeof(yaml),
	         "current-context: t\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
	         "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n"
	         "users: [{name: u, user: {tokenFile: '%s'}}]\n",
	         kube_env.server, kube_env.ca_file, token);
	sg_kube *u = client_from(yaml);
	SG_CHECK(u != NULL);
	if (!u)
		return;
	sg_kube_ref one = cm_ref("anything");
	SG_CHECK_RC(sg_kube_get(u, &one, NULL), SG_EAUTH);
	SG_CHECK(sg_kube_last_status()->code == 403);
	SG_CHECK_MSG("403 Forbidden: configmaps \"anything\" is forbidden: User \"signet-user\" cannot get");

	/* The token file rotates to the admin's: picked up within a second.
	 * The client looks at the file again on the first request a second or
	 * more after its last look: past 1.1 s the next request is sure to,
	 * however slow the machine, so a fixed time is exact here. */
	copy_file(kube_env.token_file, token);
	sg_sleep_ms(1100);
	SG_CHECK_RC(sg_kube_get(u, &one, NULL), SG_ENOTFOUND);

	/* A token the server does not know: 401. */
	FILE *f = fopen(token, "w");
	fputs("not-a-valid-token\n", f);
	fclose(f);
	sg_sleep_ms(1100); /* as above */
	SG_CHECK_RC(sg_kube_get(u, &one, NULL), SG_EAUTH);
	SG_CHECK(sg_kube_last_status()->code == 401);
	SG_CHECK_MSG("401 Unauthorized");
	sg_kube_free(u);
	unlink(token);

	/* No CA in the kubeconfig: the system roots, which do not know the
	 * server's self-signed certificate. */
	snprintf(yaml, sizeof(yaml),
	         "current-context: t\ncontexts: [{name: t, context: {cluster: c}}]\n"
	         "clusters: [{name: c, cluster: {server: '%s'}}]\n",
	         kube_env.server);
	u = client_from(yaml);
	SG_CHECK_RC(sg_kube_get(u, &one, NULL), SG_EAUTH);
	SG_CHECK_MSG("kube: GET configmaps default/anything: SSL certificate problem");
	sg_kube_free(u);
	/* The right CA but another host name than the certificate's. */
	char server[300];
	snprintf(server, sizeof(server), "%s", kube_env.server);
	char *host = strstr(server, "127.0.0.1");
	if (host) {
		char alt[300];
		snprintf(alt, sizeof(alt), "https://127.0.0.2%s", host + strlen("127.0.0.1"));
		snprintf(yaml, sizeof(yaml),
		         "current-context: t\ncontexts: [{name: t, context: {cluster: c}}]\n"
		         "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n",
		         alt, kube_env.ca_file);
		u = client_from(yaml);
		int rc = sg_kube_get(u, &one, NULL);
		SG_CHECK(rc == SG_EAUTH || rc == SG_EBUSY); /* refused either way; never a success */
		sg_kube_free(u);
	}
}

static void t_rate_limit(void)
{
	sg_kube *slow = kube_env_client(10, 1);
	SG_CHECK(slow != NULL);
	if (!slow)
		return;
	sg_kube_ref one = cm_ref("rate");
	uint64_t t0 = sg_now_ns();
	for (int i = 0; i < 21; i++)
		SG_CHECK_RC(sg_kube_get(slow, &one, NULL), SG_ENOTFOUND);
	double s = (double)(sg_now_ns() - t0) / 1e9;
	printf("21 GETs at 10 qps, burst 1: %.2f s (ideal 2.0)\n", s);
	/* Each GET takes its token 0.1 s after the one before, so 2.0 s and
	 * the last call's time while calls take under 0.1 s; under TSan on a
	 * loaded machine a call can take longer, and each adds its excess.
	 * 5 s still tells 10 qps from a limiter that paces far slower. */
	SG_CHECK(s > 1.9 && s < 5.0);
	sg_kube_free(slow);
}

/* ---- non-resource paths ---- */

static void t_get_path(void)
{
	uint8_t *body = NULL;
	size_t len = 0;
	/* The JWKS (application/jwk-set+json) and the discovery document. */
	SG_CHECK_OK(sg_kube_get_path(k, "/openid/v1/jwks", NULL, &body, &len));
	SG_CHECK(sg_kube_last_status()->code == 200);
	SG_CHECK(body && len > 0 && body[len] == 0 && strlen((char *)body) == len);
	json_t *j = body ? json_loadb((const char *)body, len, 0, NULL) : NULL;
	SG_CHECK(json_array_size(json_object_get(j, "keys")) >= 1);
	json_decref(j);
	free(body);
	body = NULL;
	SG_CHECK_OK(
	    sg_kube_get_path(k, "/.well-known/openid-configuration", &(sg_kube_path_opts){.max = 65536}, &body, &len));
	j = body ? json_loadb((const char *)body, len, 0, NULL) : NULL;
	SG_CHECK(json_is_string(json_object_get(j, "issuer")) && json_is_string(json_object_get(j, "jwks_uri")));
	json_decref(j);
	free(body);
	body = NULL;
	SG_CHECK_OK(sg_kube_get_path(k, "/openid/v1/jwks", NULL, NULL, NULL)); /* answer not wanted */
	/* "/" itself is a path (the API server lists its paths there). */
	SG_CHECK_OK(sg_kube_get_path(k, "/", NULL, &body, &len));
	free(body);
	body = NULL;

	/* Bounded: a body over max is refused, nothing is returned. */
	SG_CHECK_RC(sg_kube_get_path(k, "/openid/v1/jwks", &(sg_kube_path_opts){.max = 16}, &body, &len), SG_EPROTO);
	SG_CHECK_MSG("kube: GET /openid/v1/jwks: response larger than 16 bytes");
	SG_CHECK(body == NULL && len == 0);
	/* Not JSON: /healthz answers text/plain "ok". */
	SG_CHECK_RC(sg_kube_get_path(k, "/healthz", NULL, &body, &len), SG_EPROTO);
	SG_CHECK_MSG("kube: GET /healthz: the answer is text/plain");
	SG_CHECK(body == NULL);
	/* HTTP errors as for the verbs. */
	SG_CHECK_RC(sg_kube_get_path(k, "/no/such/path", NULL, &body, &len), SG_ENOTFOUND);
	SG_CHECK(sg_kube_last_status()->code == 404);
	SG_CHECK_MSG("kube: GET /no/such/path: 404");
	/* A stop flag already raised: the call ends at once. */
	atomic_bool stop = true;
	SG_CHECK_RC(sg_kube_get_path(k, "/openid/v1/jwks", &(sg_kube_path_opts){.stop = &stop}, &body, &len), SG_EBUSY);
	SG_CHECK_MSG("kube: GET /openid/v1/jwks: stopped");

	/* Paths refused before anything is sent. */
	static const char *const bad[] = {
	    "",         "openid/v1/jwks", "/openid/../api", "/openid/./v1", "/..",         "/openid//jwks",
	    "/openid/", "/a?b=c",         "/a#frag",        "/a b",         "/%2e%2e/api", "/a\\b",
	    "/a\nb",    "/\xc3\xa9",      "/a\"b",          "/a<b>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		SG_CHECK_RC(sg_kube_get_path(k, bad[i], NULL, &body, &len), SG_EINVAL);
		SG_CHECK(sg_kube_last_status()->code == 0);
	}
	SG_CHECK_RC(sg_kube_get_path(k, NULL, NULL, &body, &len), SG_EINVAL);
	char long_path[SG_KUBE_PATH_MAX + 2];
	memset(long_path, 'a', sizeof(long_path));
	long_path[0] = '/';
	long_path[SG_KUBE_PATH_MAX + 1] = 0;
	SG_CHECK_RC(sg_kube_get_path(k, long_path, NULL, &body, &len), SG_EINVAL);
	SG_CHECK_MSG("longer than");
	long_path[SG_KUBE_PATH_MAX] = 0; /* exactly the limit: sent, and not found */
	SG_CHECK_RC(sg_kube_get_path(k, long_path, NULL, &body, &len), SG_ENOTFOUND);

	/* Anonymous callers are refused by the server (RBAC): 403. */
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
	         "current-context: t\ncontexts: [{name: t, context: {cluster: c}}]\n"
	         "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n",
	         kube_env.server, kube_env.ca_file);
	sg_kube *anon = client_from(yaml);
	SG_CHECK(anon != NULL);
	if (anon) {
		SG_CHECK_RC(sg_kube_get_path(anon, "/openid/v1/jwks", NULL, &body, &len), SG_EAUTH);
		SG_CHECK(sg_kube_last_status()->code == 403);
		SG_CHECK_MSG("kube: GET /openid/v1/jwks: 403 Forbidden");
		sg_kube_free(anon);
	}
}

/* ---- the request loop (sg_kube_loop) ---- */

#define LOOP_MANY 40

struct loop_seen {
	pthread_mutex_t mu;
	int calls, ok, conflict, invalid, stopped, other;
	int names_right;
	bool one_thread;
	pthread_t thread;
	bool have_thread;
};

struct loop_req {
	struct loop_seen *seen;
	char name[32];
};

static void loop_done(int rc, json_t *answer, void *arg)
{
	struct loop_req *r = arg;
	struct loop_seen *s = r->seen;
	const sg_kube_status *st = sg_kube_last_status();
	const char *msg = sg_error_last()->msg;
	pthread_mutex_lock(&s->mu);
	if (!s->have_thread) {
		s->thread = pthread_self();
		s->have_thread = true;
	}
	s->one_thread &= pthread_equal(s->thread, pthread_self()) != 0;
	s->calls++;
	if (rc == SG_OK && st->code == 201) {
		s->ok++;
		const char *name = sg_kube_meta_str(answer, "name");
		s->names_right += name && strcmp(name, r->name) == 0;
	} else if (rc == SG_EBUSY && st->code == 409 && strcmp(st->reason, "AlreadyExists") == 0 &&
	           strstr(msg, "409 AlreadyExists: configmaps \"loop-dup\" already exists")) {
		s->conflict++;
	} else if (rc == SG_EINVAL && st->code == 422) {
		s->invalid++;
	} else if (rc == SG_EBUSY && strstr(msg, "loop is stopping")) {
		s->stopped++;
	} else {
		s->other++;
		fprintf(stderr, "loop: %s: rc %d, HTTP %ld: %s\n", r->name, rc, st->code, msg);
	}
	pthread_mutex_unlock(&s->mu);
	json_decref(answer);
	free(r);
}

static int loop_submit(sg_kube_loop *l, struct loop_seen *s, const char *name)
{
	struct loop_req *r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	r->seen = s;
	snprintf(r->name, sizeof(r->name), "%s", name);
	sg_kube_ref coll = cm_ref(NULL);
	json_t *cm = kube_env_configmap("default", name, "k", "v");
	int rc = sg_kube_loop_create(l, &coll, cm, loop_done, r);
	json_decref(cm);
	if (rc != SG_OK)
		free(r);
	return rc;
}

static int loop_calls(struct loop_seen *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->calls;
	pthread_mutex_unlock(&s->mu);
	return n;
}

/* Many creates at once on one loop: each answered once, on the loop's one
 * thread (not the caller's), with the answer or the error detail and the
 * Status a blocking create gives; a loop freed with creates in flight ends
 * each of them before free returns. */
static void t_loop(void)
{
	sg_kube_ref coll = cm_ref(NULL);
	json_t *dup = kube_env_configmap("default", "loop-dup", "k", "v");
	SG_CHECK_OK(sg_kube_create(k, &coll, dup, NULL));
	json_decref(dup);

	struct loop_seen s = {.mu = PTHREAD_MUTEX_INITIALIZER, .one_thread = true};
	sg_kube_loop *l = NULL;
	SG_CHECK_OK(sg_kube_loop_new(&l, k));
	if (!l)
		return;
	char name[32];
	for (int i = 0; i < LOOP_MANY; i++) {
		snprintf(name, sizeof(name), "loop-%d", i);
		SG_CHECK_OK(loop_submit(l, &s, name));
	}
	SG_CHECK_OK(loop_submit(l, &s, "loop-dup"));
	SG_CHECK_OK(loop_submit(l, &s, "Loop_Not_A_Name"));
	/* A reference a create refuses: an error at once, no callback. */
	sg_kube_ref named = cm_ref("x");
	json_t *cm = kube_env_configmap("default", "x", "k", "v");
	SG_CHECK_RC(sg_kube_loop_create(l, &named, cm, loop_done, NULL), SG_EINVAL);
	json_decref(cm);
	SG_WAIT_FOR(30000, loop_calls(&s) == LOOP_MANY + 2);
	SG_CHECK(s.ok == LOOP_MANY && s.names_right == LOOP_MANY);
	SG_CHECK(s.conflict == 1 && s.invalid == 1 && s.other == 0 && s.stopped == 0);
	SG_CHECK(s.one_thread && s.have_thread && !pthread_equal(s.thread, pthread_self()));
	for (int i = 0; i < LOOP_MANY; i++) {
		snprintf(name, sizeof(name), "loop-%d", i);
		sg_kube_ref one = cm_ref(name);
		SG_CHECK_OK(sg_kube_get(k, &one, NULL));
	}

	/* Freed at once: every create ends before free returns, answered or
	 * stopped, exactly once. */
	struct loop_seen t = {.mu = PTHREAD_MUTEX_INITIALIZER, .one_thread = true};
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "loop-late-%d", i);
		SG_CHECK_OK(loop_submit(l, &t, name));
	}
	sg_kube_loop_free(l);
	SG_CHECK(t.calls == 20 && t.ok + t.stopped == 20 && t.other == 0);
	printf("loop freed with 20 creates in flight: %d answered, %d stopped\n", t.ok, t.stopped);
	sg_kube_loop_free(NULL);

	for (int i = 0; i < LOOP_MANY; i++) {
		snprintf(name, sizeof(name), "loop-%d", i);
		sg_kube_ref one = cm_ref(name);
		SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	}
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "loop-late-%d", i);
		sg_kube_ref one = cm_ref(name);
		int rc = sg_kube_delete(k, &one, NULL);
		SG_CHECK(rc == SG_OK || rc == SG_ENOTFOUND);
	}
	sg_kube_ref d = cm_ref("loop-dup");
	SG_CHECK_OK(sg_kube_delete(k, &d, NULL));
}

static void t_zz_cleanup(void)
{
	sg_kube_ref coll = cm_ref(NULL);
	for (int i = 0; i < 5; i++) {
		char name[32];
		snprintf(name, sizeof(name), "page-%d", i);
		sg_kube_ref one = cm_ref(name);
		SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	}
	(void)coll;
	sg_kube_free(k);
	k = NULL;
}

static void t_start(void)
{
	bool up = kube_env_start();
	SG_CHECK(up);
	if (!up) {
		fprintf(stderr, "no API server\n");
		exit(1);
	}
	k = kube_env_client(-1, 0);
	SG_CHECK(k != NULL);
	if (!k)
		exit(1);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_crud), SG_TEST(t_delete_uid), SG_TEST(t_delete_version), SG_TEST(t_pagination),
             SG_TEST(t_watch_order), SG_TEST(t_watch_bookmarks), SG_TEST(t_apply), SG_TEST(t_create_applied),
             SG_TEST(t_status_subresource), SG_TEST(t_watch_expired), SG_TEST(t_event), SG_TEST(t_auth_and_rotation),
             SG_TEST(t_rate_limit), SG_TEST(t_get_path), SG_TEST(t_loop), SG_TEST(t_zz_cleanup))
