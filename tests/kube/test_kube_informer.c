/*
 * sg_kube_informer against a real kube-apiserver: initial sync, live
 * add/update/delete with handlers and the index, then an apiserver restart
 * with one informer watching (it must recover and follow changes made after
 * the restart) and one stopped while objects changed (on start its
 * resourceVersion is older than the restarted server's watch cache: 410,
 * relist, and the relist emits the delete it missed). A metadata-only
 * informer keeps apiVersion, kind and metadata (managedFields included)
 * and nothing else, from the LIST and from the watch alike.
 */
#include "sg_clock.h"
#include "sg_kube_informer.h"
#include "sg_test.h"
#include "test_kube_env.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static sg_kube *k;

struct counts {
	pthread_mutex_t mu;
	int adds, updates, deletes;
	char last_deleted[64];
};

static void on_add(json_t *obj, void *arg)
{
	struct counts *c = arg;
	(void)obj;
	pthread_mutex_lock(&c->mu);
	c->adds++;
	pthread_mutex_unlock(&c->mu);
}

static void on_update(json_t *old_obj, json_t *new_obj, void *arg)
{
	struct counts *c = arg;
	(void)old_obj, (void)new_obj;
	pthread_mutex_lock(&c->mu);
	c->updates++;
	pthread_mutex_unlock(&c->mu);
}

static void on_delete(json_t *obj, void *arg)
{
	struct counts *c = arg;
	const char *name = sg_kube_meta_str(obj, "name");
	pthread_mutex_lock(&c->mu);
	c->deletes++;
	snprintf(c->last_deleted, sizeof(c->last_deleted), "%s", name ? name : "?");
	pthread_mutex_unlock(&c->mu);
}

static struct counts snapshot(struct counts *c)
{
	pthread_mutex_lock(&c->mu);
	struct counts s = *c;
	pthread_mutex_unlock(&c->mu);
	return s;
}

/* Index: ConfigMaps by data.team. */
static int by_team(const json_t *obj, char *key, size_t cap, void *arg)
{
	(void)arg;
	json_t *t = json_object_get(json_object_get(obj, "data"), "team");
	if (!json_is_string(t))
		return 0;
	snprintf(key, cap, "%s", json_string_value(t));
	return 1;
}

static void put_cm(const char *name, const char *label, const char *team, const char *v)
{
	sg_kube_ref one = {.version = "v1", .resource = "configmaps", .ns = "default", .name = name};
	json_t *cm = kube_env_configmap("default", name, "v", v);
	json_object_set_new(json_object_get(cm, "data"), "team", json_string(team));
	json_object_set_new(json_object_get(cm, "metadata"), "labels", json_pack("{s:s}", "app", label));
	SG_CHECK_OK(sg_kube_apply(k, &one, cm, "informer-test", true, NULL));
	json_decref(cm);
}

static void del_cm(const char *name)
{
	sg_kube_ref one = {.version = "v1", .resource = "configmaps", .ns = "default", .name = name};
	SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
}

/* The informer holds name with data.v == v (v NULL: holds no name). */
static bool holds(sg_kube_informer *inf, const char *name, const char *v)
{
	json_t *o = sg_kube_informer_get(inf, "default", name);
	bool ok;
	if (!v) {
		ok = o == NULL;
	} else {
		json_t *d = json_object_get(json_object_get(o, "data"), "v");
		ok = json_is_string(d) && strcmp(json_string_value(d), v) == 0;
	}
	json_decref(o);
	return ok;
}

/* Handlers run just after the store changes: wait for them too. */
static struct counts counts_after(struct counts *c, int adds, int updates, int deletes)
{
	uint64_t deadline = sg_now_ns() + 10000000000ull;
	struct counts s = snapshot(c);
	while ((s.adds < adds || s.updates < updates || s.deletes < deletes) && sg_now_ns() < deadline) {
		sg_sleep_ms(20);
		s = snapshot(c);
	}
	return s;
}

static struct counts ca = {.mu = PTHREAD_MUTEX_INITIALIZER}, cb = {.mu = PTHREAD_MUTEX_INITIALIZER};
static sg_kube_informer *ia, *ib;

static void t_sync_and_events(void)
{
	put_cm("a-1", "inf-a", "red", "1");
	put_cm("a-2", "inf-a", "red", "1");
	put_cm("a-3", "inf-a", "blue", "1");
	put_cm("b-1", "inf-b", "red", "1");
	put_cm("b-2", "inf-b", "red", "1");
	sg_kube_ref coll = {.version = "v1", .resource = "configmaps", .ns = "default"};
	sg_kube_informer_opts oa = {.label_selector = "app=inf-a", .index_fn = by_team, .backoff_max_ms = 2000};
	sg_kube_informer_opts ob = {.label_selector = "app=inf-b", .page_size = 1, .backoff_max_ms = 2000};
	sg_kube_handlers ha = {on_add, on_update, on_delete, &ca}, hb = {on_add, on_update, on_delete, &cb};
	SG_CHECK_OK(sg_kube_informer_new(&ia, k, &coll, &oa, &ha));
	SG_CHECK_OK(sg_kube_informer_new(&ib, k, &coll, &ob, &hb));
	if (!ia || !ib)
		exit(1);
	SG_CHECK(!sg_kube_informer_has_synced(ia));
	SG_CHECK_OK(sg_kube_informer_start(ia));
	SG_CHECK_OK(sg_kube_informer_start(ib));
	SG_CHECK_OK(sg_kube_informer_wait_synced(ia, 10000));
	SG_CHECK_OK(sg_kube_informer_wait_synced(ib, 10000));
	SG_CHECK(sg_kube_informer_size(ia) == 3);
	SG_CHECK(sg_kube_informer_size(ib) == 2);
	SG_CHECK(counts_after(&ca, 3, 0, 0).adds == 3);

	json_t *red = sg_kube_informer_by_index(ia, "red");
	SG_CHECK(json_array_size(red) == 2);
	json_decref(red);

	put_cm("a-4", "inf-a", "blue", "1");
	put_cm("a-1", "inf-a", "blue", "2");
	del_cm("a-2");
	SG_WAIT_FOR(10000, holds(ia, "a-4", "1"));
	SG_WAIT_FOR(10000, holds(ia, "a-1", "2"));
	SG_WAIT_FOR(10000, holds(ia, "a-2", NULL));
	struct counts s = counts_after(&ca, 4, 1, 1);
	SG_CHECK(s.adds == 4 && s.updates == 1 && s.deletes == 1);
	SG_CHECK(strcmp(s.last_deleted, "a-2") == 0);
	json_t *blue = sg_kube_informer_by_index(ia, "blue");
	SG_CHECK(json_array_size(blue) == 3);
	json_decref(blue);
	red = sg_kube_informer_by_index(ia, "red");
	SG_CHECK(json_array_size(red) == 0);
	json_decref(red);
	json_t *all = sg_kube_informer_list(ia);
	SG_CHECK(json_array_size(all) == 3);
	json_decref(all);
	/* b's handlers run on its own thread after its store changed */
	SG_CHECK(counts_after(&cb, 2, 0, 0).adds == 2); /* the selector kept a-* out of b */
}

static void t_restart_and_gap(void)
{
	if (!kube_env.dir[0]) {
		printf("skipped: a shared API server cannot be restarted\n");
		return;
	}
	/* b stops; its objects change while it is not looking. */
	sg_kube_informer_stop(ib);
	char rv_before[128];
	sg_kube_informer_resource_version(ib, rv_before, sizeof(rv_before));
	del_cm("b-1");
	put_cm("b-2", "inf-b", "red", "2");
	put_cm("b-3", "inf-b", "red", "1");

	sg_kube_informer_stats sa0;
	sg_kube_informer_stats_get(ia, &sa0);
	uint64_t t0 = sg_now_ns();
	SG_CHECK(kube_env_restart_apiserver());
	printf("apiserver restarted in %.1f s\n", (double)(sg_now_ns() - t0) / 1e9);

	/* a recovers and follows changes made after the restart. */
	put_cm("a-5", "inf-a", "red", "1");
	put_cm("a-3", "inf-a", "blue", "3");
	del_cm("a-4");
	t0 = sg_now_ns();
	SG_WAIT_FOR(40000, holds(ia, "a-5", "1"));
	SG_WAIT_FOR(40000, holds(ia, "a-3", "3"));
	SG_WAIT_FOR(40000, holds(ia, "a-4", NULL));
	sg_kube_informer_stats sa;
	sg_kube_informer_stats_get(ia, &sa);
	printf("a converged %.1f s after the restart: lists %llu relists %llu watches %llu errors %llu\n",
	       (double)(sg_now_ns() - t0) / 1e9, (unsigned long long)sa.lists, (unsigned long long)sa.relists,
	       (unsigned long long)sa.watches, (unsigned long long)sa.errors);
	SG_CHECK(sa.watches > sa0.watches);
	SG_CHECK(sg_kube_informer_size(ia) == 3); /* a-1, a-3, a-5 */

	/* b resumes from its old resourceVersion: 410, relist, and the delete
	 * of b-1 it never saw is emitted by the relist. */
	SG_CHECK_OK(sg_kube_informer_start(ib));
	SG_WAIT_FOR(20000, holds(ib, "b-1", NULL));
	SG_WAIT_FOR(20000, holds(ib, "b-2", "2"));
	SG_WAIT_FOR(20000, holds(ib, "b-3", "1"));
	sg_kube_informer_stats sb;
	sg_kube_informer_stats_get(ib, &sb);
	printf("b: rv before %s, lists %llu relists %llu\n", rv_before, (unsigned long long)sb.lists,
	       (unsigned long long)sb.relists);
	SG_CHECK(sb.relists >= 1 && sb.lists >= 2);
	struct counts s = counts_after(&cb, 3, 1, 1);
	SG_CHECK(s.deletes == 1 && strcmp(s.last_deleted, "b-1") == 0);
	SG_CHECK(s.adds == 3 && s.updates == 1);

}

static int ignore(sg_kube_event_type t, json_t *o, void *arg)
{
	(void)t, (void)o, (void)arg;
	return 0;
}

static void t_raw_410(void)
{
	if (!kube_env.dir[0])
		return;
	/* After the restart, resourceVersion "1" is before the configmap
	 * cache's window. */
	sg_kube_ref coll = {.version = "v1", .resource = "configmaps", .ns = "default"};
	sg_kube_watch_opts wo = {.resource_version = "1", .timeout_seconds = 5};
	SG_CHECK_RC(sg_kube_watch(k, &coll, &wo, ignore, NULL), SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 410);
}

/* What a metadata-only informer holds of name: metadata (with labels and
 * managedFields), no data. */
static bool metadata_only(sg_kube_informer *inf, const char *name, const char *label)
{
	json_t *o = sg_kube_informer_get(inf, "default", name);
	json_t *meta = json_object_get(o, "metadata");
	const char *app = json_string_value(json_object_get(json_object_get(meta, "labels"), "app"));
	bool ok = o && !json_object_get(o, "data") && json_array_size(json_object_get(meta, "managedFields")) > 0 &&
	          app && strcmp(app, label) == 0;
	json_decref(o);
	return ok;
}

static void t_metadata_only(void)
{
	put_cm("m-1", "inf-m", "green", "1");
	sg_kube_ref coll = {.version = "v1", .resource = "configmaps", .ns = "default"};
	sg_kube_informer_opts om = {.label_selector = "app=inf-m", .metadata_only = true, .backoff_max_ms = 2000};
	struct counts cm = {.mu = PTHREAD_MUTEX_INITIALIZER};
	sg_kube_handlers hm = {on_add, on_update, on_delete, &cm};
	sg_kube_informer *im = NULL;
	SG_CHECK_OK(sg_kube_informer_new(&im, k, &coll, &om, &hm));
	if (!im)
		exit(1);
	SG_CHECK_OK(sg_kube_informer_start(im));
	SG_CHECK_OK(sg_kube_informer_wait_synced(im, 10000));
	SG_CHECK(metadata_only(im, "m-1", "inf-m")); /* from the LIST */
	put_cm("m-2", "inf-m", "green", "1");
	SG_WAIT_FOR(10000, sg_kube_informer_size(im) >= 2);
	SG_CHECK(metadata_only(im, "m-2", "inf-m")); /* from the watch */
	SG_CHECK(counts_after(&cm, 2, 0, 0).adds == 2);
	sg_kube_informer_free(im);
	del_cm("m-1");
	del_cm("m-2");
}

static void t_zz_cleanup(void)
{
	sg_kube_informer_free(ia);
	sg_kube_informer_free(ib);
	static const char *const names[] = {"a-1", "a-3", "a-5", "b-2", "b-3"};
	for (size_t i = 0; i < 5; i++)
		del_cm(names[i]);
	sg_kube_free(k);
}

static void t_start(void)
{
	if (!kube_env_start()) {
		fprintf(stderr, "no API server\n");
		exit(1);
	}
	k = kube_env_client(-1, 0);
	if (!k)
		exit(1);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_sync_and_events), SG_TEST(t_restart_and_gap), SG_TEST(t_raw_410),
             SG_TEST(t_metadata_only), SG_TEST(t_zz_cleanup))
