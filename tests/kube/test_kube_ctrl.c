/*
 * sg_ctrl, the controller runtime, against a real kube-apiserver. The test
 * works in a namespace of its own, with a CustomResourceDefinition of its
 * own (widgets.ctrltest.signet.test, namespaced, status subresource on,
 * status.conditions a list-map keyed by type as metav1.Condition lists are):
 *
 *  - status: a controller over the widgets reconciles exactly their keys
 *    and keeps a Ready condition by server-side apply (observedGeneration,
 *    lastTransitionTime kept while the status stays, no write when nothing
 *    would change, even beside another manager's fields; a write when we
 *    stop wanting a field we set; the field manager in managedFields);
 *  - runtime: retries with backoff that success forgets, requeue_after,
 *    the stats, synced once per start before any reconcile, resync (default
 *    and custom, from another thread), stop that joins, start that lists
 *    afresh; a second watch mapped onto the first's keys; the pause of the
 *    whole queue while the API server does not answer;
 *  - events: sg_ctrl_event about a widget and about informer objects
 *    (listed, so without apiVersion and kind);
 *  - managers: two managers elect on one Lease; only the leader runs its
 *    leader-only row, and the other takes over when it is freed; rows that
 *    run everywhere run on both; the metrics; without election every row
 *    runs, and a row that fails to start is retried by tick.
 *
 * Waits poll observable state under a deadline (SG_WAIT_FOR); the only
 * windows of time are those in which something must NOT happen.
 */
#include "sg_clock.h"
#include "sg_ctrl.h"
#include "sg_test.h"
#include "test_kube_env.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define GROUP "ctrltest.signet.test"
#define LEASE "signet-ctrl-test"

static sg_kube *k;
static char ns[64];

static sg_kube_ref widgets(const char *name)
{
	return (sg_kube_ref){.group = GROUP, .version = "v1", .resource = "widgets", .ns = ns, .name = name};
}

static sg_kube_ref configmaps(const char *name)
{
	return (sg_kube_ref){.version = "v1", .resource = "configmaps", .ns = ns, .name = name};
}

/* ---- what the reconcile functions saw ---- */

#define TALLY_KEYS 32
#define TALLY_TIMES 8

/* One key's reconciles, with the monotonic time of the first few. */
typedef struct tally_entry {
	char key[SG_CTRL_KEY_MAX];
	unsigned count;
	uint64_t at_ns[TALLY_TIMES];
	char rv[32];    /* the status reconcile's last pass: the object's version */
	bool wrote;     /* and whether it wrote */
	unsigned notes; /* how many such passes */
} tally_entry;

typedef struct tally {
	pthread_mutex_t mu;
	size_t n;
	unsigned total;
	tally_entry k[TALLY_KEYS];
	char listed[512]; /* what the last synced saw in the informer: ",a,b," */
} tally;

/* A controller's test double: what ran, and what to do next. */
typedef struct probe {
	tally seen;
	atomic_uint starts;        /* set by the test before each start */
	atomic_uint synced;        /* synced hook calls */
	atomic_uint early;         /* reconciles before this start's synced ran */
	atomic_uint resyncs;       /* custom resync hook calls */
	atomic_uint entered, exited;
	atomic_uint ok, failed;
	atomic_uint written, unwritten;
	atomic_uint fail_left;     /* failures to inject into the key "flaky" */
	atomic_uint requeue_left;  /* requeues to ask for the key "again" */
	atomic_uint slow_ms;       /* how long each reconcile takes */
	atomic_uint start_fails;   /* starting hook: failures left */
	atomic_uint start_calls;   /* starting hook calls */
	atomic_uint stopped_calls; /* stopped hook calls */
	atomic_uint odd;           /* what a reconcile found wrong (checked by the test) */
} probe;

#define PROBE_INIT {.seen.mu = PTHREAD_MUTEX_INITIALIZER}

static const char *key_of(const char *name, char key[SG_CTRL_KEY_MAX])
{
	snprintf(key, SG_CTRL_KEY_MAX, "%s/%s", ns, name);
	return key;
}

/* Counts a reconcile of key; returns its number for that key (1: the
 * first). */
static unsigned tally_add(tally *t, const char *key)
{
	pthread_mutex_lock(&t->mu);
	size_t i = 0;
	while (i < t->n && strcmp(t->k[i].key, key) != 0)
		i++;
	if (i == t->n && t->n < TALLY_KEYS)
		snprintf(t->k[t->n++].key, SG_CTRL_KEY_MAX, "%s", key);
	unsigned n = 0;
	if (i < t->n) {
		n = ++t->k[i].count;
		if (n <= TALLY_TIMES)
			t->k[i].at_ns[n - 1] = sg_now_ns();
	}
	t->total++;
	pthread_mutex_unlock(&t->mu);
	return n;
}

/* Notes a status pass over key: the version it saw, whether it wrote. */
static void tally_note(tally *t, const char *key, const char *rv, bool wrote)
{
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->n; i++) {
		if (strcmp(t->k[i].key, key) == 0) {
			snprintf(t->k[i].rv, sizeof(t->k[i].rv), "%s", rv ? rv : "");
			t->k[i].wrote = wrote;
			t->k[i].notes++;
		}
	}
	pthread_mutex_unlock(&t->mu);
}

/* A copy of the entry of name's key (all zero when it has none). */
static tally_entry tally_get(tally *t, const char *name)
{
	char key[SG_CTRL_KEY_MAX];
	key_of(name, key);
	tally_entry e = {.count = 0};
	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->k[i].key, key) == 0)
			e = t->k[i];
	pthread_mutex_unlock(&t->mu);
	return e;
}

static unsigned tally_notes(tally *t, const char *name)
{
	return tally_get(t, name).notes;
}

static unsigned tally_count(tally *t, const char *name)
{
	return tally_get(t, name).count;
}

/* The monotonic time of reconcile number n (1: the first) of name; 0
 * when there was none. */
static uint64_t tally_at(tally *t, const char *name, unsigned n)
{
	tally_entry e = tally_get(t, name);
	return n >= 1 && n <= TALLY_TIMES && e.count >= n ? e.at_ns[n - 1] : 0;
}

/* Milliseconds from reconcile number `from` of name to the next one. */
static double tally_gap_ms(tally *t, const char *name, unsigned from)
{
	uint64_t a = tally_at(t, name, from), b = tally_at(t, name, from + 1);
	return a && b ? (double)(b - a) / 1e6 : -1;
}

static size_t tally_keys(tally *t)
{
	pthread_mutex_lock(&t->mu);
	size_t n = t->n;
	pthread_mutex_unlock(&t->mu);
	return n;
}

static unsigned tally_total(tally *t)
{
	pthread_mutex_lock(&t->mu);
	unsigned n = t->total;
	pthread_mutex_unlock(&t->mu);
	return n;
}

static bool listed(tally *t, const char *name)
{
	char item[80];
	snprintf(item, sizeof(item), ",%s,", name);
	pthread_mutex_lock(&t->mu);
	bool yes = strstr(t->listed, item) != NULL;
	pthread_mutex_unlock(&t->mu);
	return yes;
}

/* The start of every test reconcile. */
static unsigned probe_enter(probe *p, const char *key)
{
	atomic_fetch_add(&p->entered, 1);
	if (atomic_load(&p->synced) != atomic_load(&p->starts))
		atomic_fetch_add(&p->early, 1);
	unsigned n = tally_add(&p->seen, key);
	unsigned slow = atomic_load(&p->slow_ms);
	if (slow)
		sg_sleep_ms(slow);
	return n;
}

static int probe_leave(probe *p, int rc)
{
	atomic_fetch_add(rc == SG_OK ? &p->ok : &p->failed, 1);
	atomic_fetch_add(&p->exited, 1);
	return rc;
}

/* synced: counts, and notes the names the informer of watch 0 holds. */
static void probe_synced(sg_ctrl *c, void *arg)
{
	probe *p = arg;
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, 0));
	char names[sizeof(p->seen.listed)] = ",";
	size_t i;
	json_t *obj;
	json_array_foreach(all, i, obj)
	{
		size_t len = strlen(names);
		snprintf(names + len, sizeof(names) - len, "%s,", sg_kube_meta_str(obj, "name"));
	}
	json_decref(all);
	pthread_mutex_lock(&p->seen.mu);
	memcpy(p->seen.listed, names, sizeof(names));
	pthread_mutex_unlock(&p->seen.mu);
	atomic_fetch_add(&p->synced, 1);
}

static int count_reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	(void)c, (void)res;
	probe_enter(arg, key);
	return probe_leave(arg, SG_OK);
}

static sg_ctrl *new_ctrl(const char *name, const sg_ctrl_watch *w, sg_ctrl_reconcile_fn fn, probe *p)
{
	sg_ctrl_def d = {.name = name, .kube = k, .watches = w, .nwatches = 1, .reconcile = fn, .arg = p};
	sg_ctrl *c = NULL;
	SG_CHECK_OK(sg_ctrl_new(&c, &d));
	if (!c)
		exit(1);
	return c;
}

/* A controller of d, started the first time (d->arg is its probe). */
static sg_ctrl *run_ctrl(const sg_ctrl_def *d)
{
	sg_ctrl *c = NULL;
	SG_CHECK_OK(sg_ctrl_new(&c, d));
	if (!c)
		exit(1);
	atomic_store(&((probe *)d->arg)->starts, 1);
	SG_CHECK_OK(sg_ctrl_start(c));
	return c;
}

/* ---- objects ---- */

static json_t *get_obj(const sg_kube_ref *r)
{
	json_t *o = NULL;
	if (sg_kube_get(k, r, &o) != SG_OK)
		return NULL;
	return o;
}

static void put_cm(const char *name, const char *test)
{
	sg_kube_ref r = configmaps(name);
	json_t *cm = kube_env_configmap(ns, name, "v", "1");
	json_object_set_new(json_object_get(cm, "metadata"), "labels", json_pack("{s:s}", "test", test));
	SG_CHECK_OK(sg_kube_apply(k, &r, cm, "ctrl-test", true, NULL));
	json_decref(cm);
}

static void create_widget(const char *name)
{
	sg_kube_ref coll = widgets(NULL);
	json_t *w = json_pack("{s:s, s:s, s:{s:s}, s:{s:i, s:b}}", "apiVersion", GROUP "/v1", "kind", "Widget",
	                      "metadata", "name", name, "spec", "size", 1, "ready", 1);
	SG_CHECK_OK(sg_kube_create(k, &coll, w, NULL));
	json_decref(w);
}

/* Merges patch (consumed) into the widget (a member null removes). */
static void patch_widget(const char *name, json_t *patch)
{
	sg_kube_ref r = widgets(name);
	SG_CHECK_OK(sg_kube_merge_patch(k, &r, patch, NULL));
	json_decref(patch);
}

static const char *cond_str(const json_t *obj, const char *field)
{
	const char *s = json_string_value(json_object_get(sg_ctrl_condition_find(obj, "Ready"), field));
	return s ? s : "";
}

static bool has_condition(const char *name, const char *type)
{
	sg_kube_ref r = widgets(name);
	json_t *o = get_obj(&r);
	bool yes = sg_ctrl_condition_find(o, type) != NULL;
	json_decref(o);
	return yes;
}

/* The widget's status.summary.<member> (an integer, -1 when absent) */
static json_int_t summary_int(const char *name, const char *member)
{
	sg_kube_ref r = widgets(name);
	json_t *o = get_obj(&r);
	json_t *v = json_object_get(json_object_get(json_object_get(o, "status"), "summary"), member);
	json_int_t n = json_is_integer(v) ? json_integer_value(v) : -1;
	json_decref(o);
	return n;
}

/* Someone else's status.summary.color is still there. */
static bool summary_has_color(const char *name)
{
	sg_kube_ref r = widgets(name);
	json_t *o = get_obj(&r);
	bool yes = json_is_string(json_object_get(json_object_get(json_object_get(o, "status"), "summary"), "color"));
	json_decref(o);
	return yes;
}

/* The status controller is at rest about name: its last pass saw the
 * live resourceVersion and had nothing to write. */
static bool quiet(tally *t, const char *name)
{
	sg_kube_ref r = widgets(name);
	json_t *o = get_obj(&r);
	tally_entry e = tally_get(t, name);
	bool yes = o && e.notes && !e.wrote && strcmp(e.rv, sg_kube_meta_str(o, "resourceVersion")) == 0;
	json_decref(o);
	return yes;
}

static json_int_t meta_int(const json_t *obj, const char *field)
{
	return json_integer_value(json_object_get(json_object_get(obj, "metadata"), field));
}

/* The widget's Ready condition has that status and speaks of generation
 * gen, which is the object's. */
static bool ready_is(const char *name, const char *status, json_int_t gen)
{
	sg_kube_ref r = widgets(name);
	json_t *o = get_obj(&r);
	const json_t *c = sg_ctrl_condition_find(o, "Ready");
	bool yes = c && strcmp(cond_str(o, "status"), status) == 0 && meta_int(o, "generation") == gen &&
	           json_integer_value(json_object_get(c, "observedGeneration")) == gen;
	json_decref(o);
	return yes;
}

/* The Ready condition's lastTransitionTime (into out). */
static void ready_since(const char *name, char out[32])
{
	sg_kube_ref r = widgets(name);
	json_t *o = get_obj(&r);
	snprintf(out, 32, "%s", cond_str(o, "lastTransitionTime"));
	json_decref(o);
}

/* Whether the wall clock, as an RFC 3339 second, is past t. */
static bool now_after(const char *t)
{
	time_t now = time(NULL);
	struct tm tm;
	char s[32] = "";
	if (gmtime_r(&now, &tm))
		strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return strcmp(s, t) > 0;
}

/* Whether manager applied status fields of obj (its managedFields). */
static bool applies_status(const json_t *obj, const char *manager)
{
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "managedFields"), i, m)
	{
		const char *who = json_string_value(json_object_get(m, "manager"));
		const char *op = json_string_value(json_object_get(m, "operation"));
		json_t *fields = json_object_get(m, "fieldsV1");
		if (who && op && strcmp(who, manager) == 0 && strcmp(op, "Apply") == 0 &&
		    json_object_get(json_object_get(fields, "f:status"), "f:conditions") && !json_object_get(fields, "f:spec"))
			return true;
	}
	return false;
}

/* Whether what must not change stays so for ms (polled). */
static bool stays(atomic_uint *v, unsigned want, unsigned ms)
{
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u;
	while (sg_now_ns() < until) {
		if (atomic_load(v) != want)
			return false;
		sg_sleep_ms(SG_TEST_POLL_MS);
	}
	return atomic_load(v) == want;
}

/* ---- without a server: keys, conditions, definitions ---- */

static void t_keys_and_conditions(void)
{
	char key[SG_CTRL_KEY_MAX], kns[64], name[SG_KUBE_NAME_MAX + 1];
	json_t *o = json_pack("{s:{s:s, s:s}}", "metadata", "namespace", "a", "name", "b");
	SG_CHECK(sg_ctrl_key_of(o, key) && strcmp(key, "a/b") == 0);
	json_object_del(json_object_get(o, "metadata"), "namespace");
	SG_CHECK(sg_ctrl_key_of(o, key) && strcmp(key, "b") == 0);
	json_object_del(json_object_get(o, "metadata"), "name");
	SG_CHECK(!sg_ctrl_key_of(o, key));
	json_decref(o);
	SG_CHECK(sg_ctrl_key_split("a/b", kns, name) && strcmp(kns, "a") == 0 && strcmp(name, "b") == 0);
	SG_CHECK(sg_ctrl_key_split("b", kns, name) && strcmp(kns, "") == 0 && strcmp(name, "b") == 0);
	SG_CHECK(!sg_ctrl_key_split("a/b/c", kns, name));
	SG_CHECK(!sg_ctrl_key_split("a/", kns, name));

	json_t *conds = json_array();
	sg_ctrl_condition c = {.type = "Ready", .status = "True", .reason = "Checked", .message = "fine",
	                       .observed_generation = 4};
	SG_CHECK(sg_ctrl_condition_set(conds, &c, 1000));
	SG_CHECK(!sg_ctrl_condition_set(conds, &c, 2000)); /* the same: nothing moves, not even the time */
	json_t *obj = json_pack("{s:{s:O}}", "status", "conditions", conds);
	const json_t *got = sg_ctrl_condition_find(obj, "Ready");
	SG_CHECK(got && strcmp(json_string_value(json_object_get(got, "lastTransitionTime")), "1970-01-01T00:16:40Z") == 0);
	SG_CHECK(json_integer_value(json_object_get(got, "observedGeneration")) == 4);
	SG_CHECK(sg_ctrl_condition_find(obj, "Other") == NULL);
	c.observed_generation = 5;
	c.message = "still fine";
	SG_CHECK(sg_ctrl_condition_set(conds, &c, 3000));
	SG_CHECK(strcmp(json_string_value(json_object_get(got, "lastTransitionTime")), "1970-01-01T00:16:40Z") == 0);
	c.status = "False";
	SG_CHECK(sg_ctrl_condition_set(conds, &c, 4000));
	SG_CHECK(strcmp(json_string_value(json_object_get(got, "lastTransitionTime")), "1970-01-01T01:06:40Z") == 0);
	SG_CHECK(json_array_size(conds) == 1);
	sg_ctrl_condition bad = c;
	bad.status = "Maybe";
	SG_CHECK(!sg_ctrl_condition_set(conds, &bad, 5000));
	bad = c;
	bad.reason = "";
	SG_CHECK(!sg_ctrl_condition_set(conds, &bad, 5000));
	SG_CHECK(!sg_ctrl_condition_set(obj, &c, 5000)); /* not an array */
	json_decref(obj);
	json_decref(conds);

	sg_ctrl_watch w = {.ref = configmaps(NULL)};
	sg_ctrl_def d = {.name = "ok", .kube = k, .watches = &w, .nwatches = 1, .reconcile = count_reconcile};
	sg_ctrl *ctl = NULL;
	d.name = "Bad_Name";
	SG_CHECK_RC(sg_ctrl_new(&ctl, &d), SG_EINVAL);
	d.name = "ok";
	d.nwatches = 0;
	SG_CHECK_RC(sg_ctrl_new(&ctl, &d), SG_EINVAL);
	d.nwatches = 1;
	d.workers = SG_CTRL_WORKERS_MAX + 1;
	SG_CHECK_RC(sg_ctrl_new(&ctl, &d), SG_EINVAL);
	d.workers = 0;
	w.ref.name = "one";
	SG_CHECK_RC(sg_ctrl_new(&ctl, &d), SG_EINVAL);
	SG_CHECK(ctl == NULL);
	w.ref.name = NULL;
	/* A field manager of another implementation (trust bundles take over
	 * trust-manager's), checked like a name. */
	d.field_manager = "Trust Manager";
	SG_CHECK_RC(sg_ctrl_new(&ctl, &d), SG_EINVAL);
	d.field_manager = "";
	SG_CHECK_RC(sg_ctrl_new(&ctl, &d), SG_EINVAL);
	d.field_manager = "trust-manager";
	SG_CHECK_OK(sg_ctrl_new(&ctl, &d));
	SG_CHECK(ctl && strcmp(sg_ctrl_field_manager(ctl), "trust-manager") == 0);
	sg_ctrl_free(ctl);
	sg_ctrl_free(NULL);
}

/* ---- status through server-side apply ---- */

static probe p_status = PROBE_INIT;
static sg_ctrl *c_status;

/* The intent: Ready is spec.ready; summary.size is spec.size. Two
 * annotations (which leave the generation alone) add a Degraded condition
 * and leave the summary out. */
static json_t *status_intent(const json_t *obj)
{
	const json_t *spec = json_object_get(obj, "spec");
	const json_t *notes = json_object_get(json_object_get(obj, "metadata"), "annotations");
	bool ok = !json_is_false(json_object_get(spec, "ready"));
	json_t *st = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:{s:I}}", "conditions", "type", "Ready", "status",
	                       ok ? "True" : "False", "reason", ok ? "Checked" : "NotReady", "message",
	                       ok ? "the widget is ready" : "spec.ready is false", "summary", "size",
	                       (json_int_t)json_integer_value(json_object_get(spec, "size")));
	if (json_object_get(notes, GROUP "/degraded"))
		json_array_append_new(json_object_get(st, "conditions"),
		                      json_pack("{s:s, s:s, s:s}", "type", "Degraded", "status", "True", "reason", "Broken"));
	if (json_object_get(notes, GROUP "/no-summary"))
		json_object_del(st, "summary");
	return st;
}

static int status_reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	probe *p = arg;
	(void)res;
	probe_enter(p, key);
	char kns[64], name[SG_KUBE_NAME_MAX + 1];
	if (!sg_ctrl_key_split(key, kns, name))
		return probe_leave(p, sg_error_set(SG_EINVAL, "bad key %s", key));
	json_t *obj = sg_kube_informer_get(sg_ctrl_informer(c, 0), kns, name);
	if (!obj || sg_ctrl_stopping(c)) {
		json_decref(obj);
		return probe_leave(p, SG_OK); /* gone, or no more writes */
	}
	json_t *status = status_intent(obj);
	sg_kube_ref r = widgets(name);
	bool written = false;
	int rc = sg_ctrl_apply_status(c, &r, "Widget", obj, status, &written);
	atomic_fetch_add(written ? &p->written : &p->unwritten, 1);
	if (rc == SG_OK)
		tally_note(&p->seen, key, sg_kube_meta_str(obj, "resourceVersion"), written);
	json_decref(status);
	json_decref(obj);
	return probe_leave(p, rc);
}

static void t_status(void)
{
	sg_ctrl_watch w = {.ref = widgets(NULL)};
	sg_ctrl_def d = {.name = "widgets", .kube = k, .watches = &w, .nwatches = 1, .reconcile = status_reconcile,
	                 .synced = probe_synced, .arg = &p_status, .workers = 2};
	c_status = run_ctrl(&d);
	SG_CHECK(strcmp(sg_ctrl_name(c_status), "widgets") == 0);
	SG_CHECK(strcmp(sg_ctrl_field_manager(c_status), "signet-widgets") == 0);
	SG_CHECK(sg_ctrl_running(c_status));
	create_widget("w-1");
	create_widget("w-2");
	SG_WAIT_FOR(15000, ready_is("w-1", "True", 1) && ready_is("w-2", "True", 1));
	/* Each widget: the write, then the pass its own watch event brought,
	 * which finds nothing to write. */
	SG_WAIT_FOR(10000, quiet(&p_status.seen, "w-1") && quiet(&p_status.seen, "w-2"));
	SG_CHECK(atomic_load(&p_status.written) >= 2 && atomic_load(&p_status.unwritten) >= 2);
	SG_CHECK(tally_keys(&p_status.seen) == 2);
	SG_CHECK(tally_count(&p_status.seen, "w-1") >= 2 && tally_count(&p_status.seen, "w-2") >= 2);
	SG_CHECK(atomic_load(&p_status.synced) == 1 && atomic_load(&p_status.early) == 0);
	SG_CHECK(summary_int("w-1", "size") == 1);

	/* The same intent again: no request, the resourceVersion stays. */
	sg_kube_ref r1 = widgets("w-1");
	json_t *before = get_obj(&r1);
	SG_CHECK(applies_status(before, "signet-widgets"));
	unsigned notes = tally_notes(&p_status.seen, "w-1"), writes = atomic_load(&p_status.written);
	char key[SG_CTRL_KEY_MAX];
	sg_ctrl_add(c_status, key_of("w-1", key));
	SG_WAIT_FOR(10000, tally_notes(&p_status.seen, "w-1") > notes);
	SG_CHECK(quiet(&p_status.seen, "w-1"));
	json_t *after = get_obj(&r1);
	SG_CHECK(strcmp(sg_kube_meta_str(before, "resourceVersion"), sg_kube_meta_str(after, "resourceVersion")) == 0);
	json_t *intent = status_intent(after);
	bool written = true;
	SG_CHECK_OK(sg_ctrl_apply_status(c_status, &r1, "Widget", after, intent, &written));
	SG_CHECK(!written);
	SG_CHECK(atomic_load(&p_status.written) == writes);
	json_decref(intent);

	/* Another manager's condition and summary member beside ours: ours
	 * still hold, so nothing to write, and theirs stay. */
	json_t *theirs = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:[{s:s, s:s, s:s, s:s, s:s}], s:{s:s}}}", "apiVersion",
	                           GROUP "/v1", "kind", "Widget", "metadata", "name", "w-1", "namespace", ns, "status",
	                           "conditions", "type", "Other", "status", "True", "reason", "Theirs", "message", "",
	                           "lastTransitionTime", "2020-01-01T00:00:00Z", "summary", "color", "blue");
	sg_kube_ref r1s = r1;
	r1s.subresource = "status";
	SG_CHECK_OK(sg_kube_apply(k, &r1s, theirs, "someone-else", false, NULL));
	json_decref(theirs);
	SG_WAIT_FOR(10000, quiet(&p_status.seen, "w-1"));
	SG_CHECK(atomic_load(&p_status.written) == writes);
	SG_CHECK(has_condition("w-1", "Other") && ready_is("w-1", "True", 1));

	/* A spec edit: a new generation, the same Ready status and time. */
	char since[32], since2[32];
	ready_since("w-1", since);
	SG_CHECK(since[0] != 0);
	patch_widget("w-1", json_pack("{s:{s:i}}", "spec", "size", 2));
	SG_WAIT_FOR(10000, ready_is("w-1", "True", 2) && summary_int("w-1", "size") == 2);
	ready_since("w-1", since2);
	SG_CHECK(strcmp(since, since2) == 0);

	/* What we stop wanting goes, by the same generation: a condition
	 * (theirs stays), then our summary member (theirs stays). */
	patch_widget("w-1", json_pack("{s:{s:{s:s}}}", "metadata", "annotations", GROUP "/degraded", "yes"));
	SG_WAIT_FOR(10000, has_condition("w-1", "Degraded"));
	patch_widget("w-1", json_pack("{s:{s:{s:n}}}", "metadata", "annotations", GROUP "/degraded"));
	SG_WAIT_FOR(10000, !has_condition("w-1", "Degraded"));
	SG_CHECK(has_condition("w-1", "Other") && ready_is("w-1", "True", 2));
	patch_widget("w-1", json_pack("{s:{s:{s:s}}}", "metadata", "annotations", GROUP "/no-summary", "yes"));
	SG_WAIT_FOR(10000, summary_int("w-1", "size") == -1);
	SG_CHECK(summary_has_color("w-1"));
	SG_WAIT_FOR(10000, quiet(&p_status.seen, "w-1"));

	/* The status flips (a second later, so the time can tell). */
	SG_WAIT_FOR(10000, now_after(since));
	patch_widget("w-1", json_pack("{s:{s:b}}", "spec", "ready", 0));
	SG_WAIT_FOR(10000, ready_is("w-1", "False", 3));
	ready_since("w-1", since2);
	SG_CHECK(strcmp(since2, since) > 0);
	SG_CHECK(has_condition("w-1", "Other"));
	SG_CHECK(ready_is("w-2", "True", 1));
	SG_CHECK(tally_keys(&p_status.seen) == 2); /* still only the two widgets' keys */
	json_decref(before);
	before = get_obj(&r1);
	SG_CHECK(applies_status(before, "signet-widgets"));

	/* A write decided from a copy that is behind (after is from before
	 * the edits above), made exact: refused with a conflict, and nothing
	 * changes. Without a resourceVersion to name: refused before any
	 * request. */
	SG_WAIT_FOR(10000, quiet(&p_status.seen, "w-1"));
	json_decref(before);
	before = get_obj(&r1);
	json_t *probe_cond = json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "conditions", "type", "Probe", "status", "True",
	                               "reason", "Stale", "message", "");
	written = true;
	SG_CHECK_RC(sg_ctrl_apply_status_exact(c_status, &r1, "Widget", after, probe_cond, &written), SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 409 && !written);
	json_t *now = get_obj(&r1);
	SG_CHECK(strcmp(sg_kube_meta_str(before, "resourceVersion"), sg_kube_meta_str(now, "resourceVersion")) == 0);
	SG_CHECK(!has_condition("w-1", "Probe") && ready_is("w-1", "False", 3));
	json_decref(now);
	json_t *bare = json_pack("{s:{s:s, s:s}}", "metadata", "name", "w-1", "namespace", ns);
	written = true;
	SG_CHECK_RC(sg_ctrl_apply_status_exact(c_status, &r1, "Widget", bare, probe_cond, &written), SG_EINVAL);
	SG_CHECK(!written);
	json_decref(bare);
	json_decref(probe_cond);

	/* A malformed intent is refused before any request. */
	json_t *bad = json_pack("{s:[{s:s, s:s}]}", "conditions", "type", "Ready", "status", "Perhaps");
	written = true;
	SG_CHECK_RC(sg_ctrl_apply_status(c_status, &r1, "Widget", after, bad, &written), SG_EINVAL);
	SG_CHECK(!written);
	json_decref(bad);
	json_decref(before);
	json_decref(after);
}

/* ---- the runtime: retries, requeues, stats, synced, resync, stop ---- */

static probe p_rt = PROBE_INIT, p_custom = PROBE_INIT;

static int runtime_reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	probe *p = arg;
	(void)c;
	unsigned n = probe_enter(p, key);
	char want[SG_CTRL_KEY_MAX];
	if (strcmp(key, key_of("flaky", want)) == 0) {
		unsigned left = atomic_load(&p->fail_left);
		if (left && atomic_compare_exchange_strong(&p->fail_left, &left, left - 1))
			return probe_leave(p, sg_error_set(SG_EINVAL, "flaky: injected failure (attempt %u)", n));
	}
	if (strcmp(key, key_of("again", want)) == 0) {
		unsigned left = atomic_load(&p->requeue_left);
		if (left && atomic_compare_exchange_strong(&p->requeue_left, &left, left - 1))
			res->requeue_after_ms = 300;
	}
	return probe_leave(p, SG_OK);
}

/* The runtime's synced also records an Event about an informer object
 * (a ConfigMap from the LIST: it carries no apiVersion nor kind). */
static void runtime_synced(sg_ctrl *c, void *arg)
{
	probe_synced(c, arg);
	json_t *cm = sg_kube_informer_get(sg_ctrl_informer(c, 0), ns, "cm-a");
	if (cm)
		sg_ctrl_event(c, cm, "Normal", "Adopted", "found %s", "cm-a");
	json_decref(cm);
}

static void custom_resync(sg_ctrl *c, void *arg)
{
	probe *p = arg;
	char key[SG_CTRL_KEY_MAX];
	sg_ctrl_add(c, key_of("virtual", key));
	atomic_fetch_add(&p->resyncs, 1);
}

static void *resync_thread(void *c)
{
	sg_ctrl_resync(c);
	return NULL;
}

static void resync_from_another_thread(sg_ctrl *c)
{
	pthread_t th;
	SG_CHECK(pthread_create(&th, NULL, resync_thread, c) == 0);
	pthread_join(th, NULL);
}

static bool stats_agree(sg_ctrl *c, probe *p, uint64_t requeues)
{
	sg_ctrl_stats s;
	sg_ctrl_stats_get(c, &s);
	return s.running && s.reconciles == atomic_load(&p->ok) && s.errors == atomic_load(&p->failed) &&
	       s.requeues == requeues && s.queued == 0;
}

static sg_ctrl *c_rt;

static void t_runtime(void)
{
	put_cm("cm-a", "runtime");
	put_cm("cm-b", "runtime");
	sg_ctrl_watch w = {.ref = configmaps(NULL), .label_selector = "test=runtime"};
	sg_ctrl_def d = {.name = "runtime", .kube = k, .watches = &w, .nwatches = 1, .reconcile = runtime_reconcile,
	                 .synced = runtime_synced, .arg = &p_rt, .workers = 2, .backoff_first_ms = 400,
	                 .backoff_max_ms = 5000};
	SG_CHECK(!sg_ctrl_running(NULL));
	c_rt = run_ctrl(&d);
	SG_WAIT_FOR(10000, tally_count(&p_rt.seen, "cm-a") >= 1 && tally_count(&p_rt.seen, "cm-b") >= 1);
	SG_CHECK(atomic_load(&p_rt.synced) == 1 && atomic_load(&p_rt.early) == 0);
	SG_CHECK(listed(&p_rt.seen, "cm-a") && listed(&p_rt.seen, "cm-b"));

	/* Two failures: retried after 400 ms, then 800 ms; then success. */
	atomic_store(&p_rt.fail_left, 2);
	put_cm("flaky", "runtime");
	SG_WAIT_FOR(10000, tally_count(&p_rt.seen, "flaky") == 3 && atomic_load(&p_rt.fail_left) == 0);
	double g1 = tally_gap_ms(&p_rt.seen, "flaky", 1), g2 = tally_gap_ms(&p_rt.seen, "flaky", 2);
	printf("backoff: %.0f ms, %.0f ms (400, 800)\n", g1, g2);
	SG_CHECK(g1 >= 400 && g2 >= 800);
	/* The success forgot the failures: the next failure waits 400 ms
	 * again (not 1600 ms, the third step). */
	SG_WAIT_FOR(20000, stats_agree(c_rt, &p_rt, 0));
	atomic_store(&p_rt.fail_left, 1);
	char key[SG_CTRL_KEY_MAX];
	sg_ctrl_add(c_rt, key_of("flaky", key));
	SG_WAIT_FOR(10000, tally_count(&p_rt.seen, "flaky") == 5);
	double g4 = tally_gap_ms(&p_rt.seen, "flaky", 4);
	printf("backoff after a success: %.0f ms (400)\n", g4);
	SG_CHECK(g4 >= 400 && g4 < 1500);
	SG_CHECK(atomic_load(&p_rt.failed) == 3);

	/* requeue_after brings the key back, twice, then it rests. */
	atomic_store(&p_rt.requeue_left, 2);
	put_cm("again", "runtime");
	SG_WAIT_FOR(10000, tally_count(&p_rt.seen, "again") == 3);
	SG_CHECK(tally_gap_ms(&p_rt.seen, "again", 1) >= 300 && tally_gap_ms(&p_rt.seen, "again", 2) >= 300);
	SG_WAIT_FOR(20000, stats_agree(c_rt, &p_rt, 2));
	sg_ctrl_stats s;
	sg_ctrl_stats_get(c_rt, &s);
	SG_CHECK(s.errors == 3 && s.requeues == 2 && s.running);

	/* The default resync, asked from another thread: every object of
	 * watch 0 comes again. */
	static const char *const objs[] = {"cm-a", "cm-b", "flaky", "again"};
	unsigned was[4];
	for (size_t i = 0; i < 4; i++)
		was[i] = tally_count(&p_rt.seen, objs[i]);
	resync_from_another_thread(c_rt);
	SG_WAIT_FOR(10000, tally_count(&p_rt.seen, objs[0]) > was[0] && tally_count(&p_rt.seen, objs[1]) > was[1] &&
	                       tally_count(&p_rt.seen, objs[2]) > was[2] && tally_count(&p_rt.seen, objs[3]) > was[3]);
	SG_CHECK(tally_keys(&p_rt.seen) == 4);

	/* stop joins: a slow reconcile in flight ends before stop returns,
	 * and nothing runs afterwards although "again" asked to. */
	atomic_store(&p_rt.requeue_left, 1000);
	atomic_store(&p_rt.slow_ms, 300);
	sg_ctrl_add(c_rt, key_of("again", key));
	SG_WAIT_FOR(20000, atomic_load(&p_rt.entered) > atomic_load(&p_rt.exited));
	sg_ctrl_stop(c_rt);
	unsigned entered = atomic_load(&p_rt.entered);
	SG_CHECK(entered == atomic_load(&p_rt.exited));
	SG_CHECK(!sg_ctrl_running(c_rt));
	sg_ctrl_add(c_rt, key_of("cm-a", key)); /* ignored while stopped */
	sg_ctrl_resync(c_rt);
	sg_ctrl_stats_get(c_rt, &s);
	SG_CHECK(!s.running && s.queued == 0);
	SG_CHECK(stays(&p_rt.entered, entered, 1000));
	sg_ctrl_stop(c_rt); /* again: nothing to do */

	/* Start again: a fresh LIST (cm-b deleted and cm-c made while
	 * stopped), synced once more before any reconcile. */
	sg_kube_ref rb = configmaps("cm-b");
	SG_CHECK_OK(sg_kube_delete(k, &rb, NULL));
	put_cm("cm-c", "runtime");
	atomic_store(&p_rt.slow_ms, 0);
	atomic_store(&p_rt.requeue_left, 0);
	atomic_store(&p_rt.starts, 2);
	SG_CHECK_OK(sg_ctrl_start(c_rt));
	SG_CHECK_OK(sg_ctrl_start(c_rt)); /* running already */
	SG_WAIT_FOR(10000, tally_count(&p_rt.seen, "cm-c") >= 1);
	SG_CHECK(atomic_load(&p_rt.synced) == 2 && atomic_load(&p_rt.early) == 0);
	SG_CHECK(listed(&p_rt.seen, "cm-c") && !listed(&p_rt.seen, "cm-b") && listed(&p_rt.seen, "cm-a"));

	/* A custom resync: after synced, and after each sg_ctrl_resync. */
	sg_ctrl_def dc = d;
	dc.name = "custom";
	dc.synced = probe_synced;
	dc.resync = custom_resync;
	dc.arg = &p_custom;
	dc.workers = 0;
	sg_ctrl *cc = run_ctrl(&dc);
	SG_WAIT_FOR(10000, atomic_load(&p_custom.resyncs) == 1 && tally_count(&p_custom.seen, "virtual") == 1);
	SG_CHECK(atomic_load(&p_custom.synced) == 1 && atomic_load(&p_custom.early) == 0);
	resync_from_another_thread(cc);
	SG_WAIT_FOR(10000, atomic_load(&p_custom.resyncs) == 2 && tally_count(&p_custom.seen, "virtual") == 2);
	sg_ctrl_free(cc);
}

/* ---- a second watch, mapped to the keys of the first ---- */

static probe p_mapped = PROBE_INIT;

/* A ConfigMap names the widget it concerns in data.widget. */
static void cm_to_widget(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *w = json_string_value(json_object_get(json_object_get(obj, "data"), "widget"));
	char key[SG_CTRL_KEY_MAX];
	if (w)
		sg_ctrl_add(c, key_of(w, key));
}

/* Reconciles a widget: records an Event about each ConfigMap that names
 * it, as the informer of watch 1 holds them (listed: untyped). */
static int mapped_reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	(void)res;
	probe_enter(arg, key);
	char kns[64], name[SG_KUBE_NAME_MAX + 1];
	if (!sg_ctrl_key_split(key, kns, name) || strcmp(kns, ns) != 0 || sg_ctrl_informer(c, 2) != NULL)
		atomic_fetch_add(&((probe *)arg)->odd, 1);
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, 1));
	size_t i;
	json_t *cm;
	json_array_foreach(all, i, cm)
	{
		const char *w = json_string_value(json_object_get(json_object_get(cm, "data"), "widget"));
		if (w && strcmp(w, name) == 0)
			sg_ctrl_event(c, cm, "Normal", "Noticed", "names %s", name);
	}
	json_decref(all);
	return probe_leave(arg, SG_OK);
}

static void t_mapped(void)
{
	/* Listed at start: ConfigMaps carry no kind (only watch events do). */
	sg_kube_ref r = configmaps("names-w-2");
	json_t *cm = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
	                       "metadata", "name", "names-w-2", "labels", "test", "maps", "data", "widget", "w-2");
	SG_CHECK_OK(sg_kube_apply(k, &r, cm, "ctrl-test", true, NULL));
	json_decref(cm);
	sg_ctrl_watch w[2] = {{.ref = widgets(NULL)},
	                      {.ref = configmaps(NULL), .label_selector = "test=maps", .map = cm_to_widget}};
	sg_ctrl_def d = {.name = "mapped", .kube = k, .watches = w, .nwatches = 2, .reconcile = mapped_reconcile,
	                 .synced = probe_synced, .arg = &p_mapped};
	sg_ctrl *c = run_ctrl(&d);
	SG_WAIT_FOR(10000, tally_count(&p_mapped.seen, "w-1") >= 1 && tally_count(&p_mapped.seen, "w-2") >= 1);
	SG_CHECK(atomic_load(&p_mapped.early) == 0);
	/* A change to the ConfigMap brings its widget's key, and only it. */
	unsigned w1 = tally_count(&p_mapped.seen, "w-1"), w2 = tally_count(&p_mapped.seen, "w-2");
	json_t *patch = json_pack("{s:{s:s}}", "data", "more", "x");
	SG_CHECK_OK(sg_kube_merge_patch(k, &r, patch, NULL));
	json_decref(patch);
	SG_WAIT_FOR(10000, tally_count(&p_mapped.seen, "w-2") > w2);
	SG_CHECK(tally_count(&p_mapped.seen, "w-1") == w1);
	SG_CHECK(tally_keys(&p_mapped.seen) == 2);
	SG_CHECK(atomic_load(&p_mapped.odd) == 0);
	sg_ctrl_free(c);
}

/* ---- an absent API server pauses the whole controller ---- */

static probe p_pause = PROBE_INIT;
static sg_kube *absent;

/* "dead" fails fail_left times the way a call fails when no server
 * answers, then succeeds with an answer from ours; "live" succeeds
 * without a request (as a reconcile with nothing to do). */
static int pause_reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	probe *p = arg;
	(void)c, (void)res;
	probe_enter(p, key);
	char dead[SG_CTRL_KEY_MAX];
	unsigned left = atomic_load(&p->fail_left);
	if (strcmp(key, key_of("dead", dead)) == 0 && left &&
	    atomic_compare_exchange_strong(&p->fail_left, &left, left - 1)) {
		sg_kube_ref r = configmaps("dead");
		return probe_leave(p, sg_kube_get(absent, &r, NULL));
	}
	if (strcmp(key, dead) == 0) {
		sg_kube_ref r = {.version = "v1", .resource = "namespaces", .name = ns};
		return probe_leave(p, sg_kube_get(k, &r, NULL));
	}
	return probe_leave(p, SG_OK);
}

static void t_pause(void)
{
	/* Nothing listens on port 1: connections are refused, no answer. */
	static const char cfg[] = "{\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"https://127.0.0.1:1\"}}],"
	                          "\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\"}}],"
	                          "\"current-context\":\"x\"}";
	sg_kube_config *kc = NULL;
	if (sg_kube_config_from_bytes(&kc, cfg, strlen(cfg), NULL, NULL) != 0 || sg_kube_new(&absent, &kc, NULL) != 0)
		exit(1);
	sg_ctrl_watch w = {.ref = configmaps(NULL), .label_selector = "test=pause"};
	sg_ctrl_def d = {.name = "pause", .kube = k, .watches = &w, .nwatches = 1, .reconcile = pause_reconcile,
	                 .synced = probe_synced, .arg = &p_pause, .backoff_first_ms = 100};
	sg_ctrl *c = run_ctrl(&d);
	SG_WAIT_FOR(10000, atomic_load(&p_pause.synced) == 1);
	/* Two failures without an answer: the queue pauses 1 s, then 2 s,
	 * for every key (its own backoff is 100 ms). "live" between them
	 * asked the server nothing, so the outage goes on. */
	atomic_store(&p_pause.fail_left, 2);
	char key[SG_CTRL_KEY_MAX];
	sg_ctrl_add(c, key_of("dead", key));
	sg_ctrl_add(c, key_of("live", key));
	SG_WAIT_FOR(10000, tally_count(&p_pause.seen, "dead") == 3 && tally_count(&p_pause.seen, "live") == 1);
	double live_ms = (double)(tally_at(&p_pause.seen, "live", 1) - tally_at(&p_pause.seen, "dead", 1)) / 1e6;
	double g1 = tally_gap_ms(&p_pause.seen, "dead", 1), g2 = tally_gap_ms(&p_pause.seen, "dead", 2);
	printf("paused: live after %.0f ms; dead retried after %.0f ms, %.0f ms (1000, 2000)\n", live_ms, g1, g2);
	SG_CHECK(live_ms >= 1000 && g1 >= 1000 && g2 >= 2000);
	/* The answered success ended the outage: the next one pauses 1 s
	 * again (not 4 s). */
	atomic_store(&p_pause.fail_left, 1);
	sg_ctrl_add(c, key_of("dead", key));
	SG_WAIT_FOR(10000, tally_count(&p_pause.seen, "dead") == 5);
	double g4 = tally_gap_ms(&p_pause.seen, "dead", 4);
	printf("paused after a success: %.0f ms (1000)\n", g4);
	SG_CHECK(g4 >= 1000 && g4 < 3500);
	sg_ctrl_stats st;
	sg_ctrl_stats_get(c, &st);
	SG_CHECK(st.errors == 3);
	sg_ctrl_free(c);
	sg_kube_free(absent);
}

/* ---- events ---- */

/* An Event about name with that reason, as listed (new reference). */
static json_t *find_event(const char *name, const char *reason)
{
	char sel[128];
	snprintf(sel, sizeof(sel), "involvedObject.name=%s", name);
	sg_kube_ref r = {.version = "v1", .resource = "events", .ns = ns};
	sg_kube_list_opts lo = {.field_selector = sel};
	json_t *list = NULL, *found = NULL;
	if (sg_kube_list(k, &r, &lo, &list) != SG_OK)
		return NULL;
	size_t i;
	json_t *ev;
	json_array_foreach(json_object_get(list, "items"), i, ev)
	{
		const char *why = json_string_value(json_object_get(ev, "reason"));
		if (why && strcmp(why, reason) == 0 && !found)
			found = json_incref(ev);
	}
	json_decref(list);
	return found;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
	const json_t *v = b ? json_object_get(json_object_get(o, a), b) : json_object_get(o, a);
	return json_is_string(v) ? json_string_value(v) : "";
}

static void t_events(void)
{
	sg_kube_ref r = widgets("w-2");
	json_t *obj = get_obj(&r);
	SG_CHECK(obj != NULL);
	sg_ctrl_event(c_status, obj, "Warning", "WidgetBroken", "widget %s: %d parts missing", "w-2", 3);
	json_t *ev = find_event("w-2", "WidgetBroken");
	SG_CHECK(ev != NULL);
	SG_CHECK(strcmp(str_at(ev, "type", NULL), "Warning") == 0);
	SG_CHECK(strcmp(str_at(ev, "message", NULL), "widget w-2: 3 parts missing") == 0);
	SG_CHECK(strcmp(str_at(ev, "reportingComponent", NULL), "signet-widgets") == 0);
	SG_CHECK(strcmp(str_at(ev, "source", "component"), "signet-widgets") == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "kind"), "Widget") == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "apiVersion"), GROUP "/v1") == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "namespace"), ns) == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "uid"), sg_kube_meta_str(obj, "uid")) == 0);
	json_decref(ev);
	json_decref(obj);

	/* The one the mapped controller recorded about its second watch's. */
	ev = find_event("names-w-2", "Noticed");
	SG_CHECK(ev != NULL);
	SG_CHECK(strcmp(str_at(ev, "reportingComponent", NULL), "signet-mapped") == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "kind"), "ConfigMap") == 0);
	SG_CHECK(strcmp(str_at(ev, "message", NULL), "names w-2") == 0);
	json_decref(ev);

	/* The one the runtime's synced recorded about an informer object. */
	ev = find_event("cm-a", "Adopted");
	SG_CHECK(ev != NULL);
	SG_CHECK(strcmp(str_at(ev, "reportingComponent", NULL), "signet-runtime") == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "kind"), "ConfigMap") == 0);
	SG_CHECK(strcmp(str_at(ev, "involvedObject", "apiVersion"), "v1") == 0);
	SG_CHECK(strcmp(str_at(ev, "message", NULL), "found cm-a") == 0);
	json_decref(ev);
}

/* ---- the manager ---- */

typedef struct side {
	const char *identity;
	probe lead_p, all_p;
	sg_ctrl *lead, *all;
	sg_ctrl_manager *m;
	sg_metrics *reg;
} side;

static side sa = {.identity = "mgr-a", .lead_p = PROBE_INIT, .all_p = PROBE_INIT};
static side sb = {.identity = "mgr-b", .lead_p = PROBE_INIT, .all_p = PROBE_INIT};

static void side_new(side *s, const sg_ctrl_manager_opts *o, const char *suffix)
{
	sg_ctrl_watch w = {.ref = configmaps(NULL), .label_selector = "test=mgr"};
	char name[SG_CTRL_NAME_MAX];
	snprintf(name, sizeof(name), "lead-%s", suffix);
	s->lead = new_ctrl(name, &w, count_reconcile, &s->lead_p);
	snprintf(name, sizeof(name), "all-%s", suffix);
	s->all = new_ctrl(name, &w, count_reconcile, &s->all_p);
	SG_CHECK_OK(sg_ctrl_manager_new(&s->m, o));
	SG_CHECK_OK(sg_metrics_new(&s->reg));
	if (!s->m || !s->reg)
		exit(1);
	SG_CHECK_OK(sg_ctrl_manager_add(s->m, &(sg_ctrl_row){.ctrl = s->lead, .leader_only = true}));
	SG_CHECK_OK(sg_ctrl_manager_add(s->m, &(sg_ctrl_row){.ctrl = s->all}));
}

static void side_free(side *s)
{
	sg_ctrl_manager_free(s->m);
	s->m = NULL;
	sg_ctrl_free(s->lead);
	sg_ctrl_free(s->all);
	sg_metrics_free(s->reg);
}

/* Whether the rendered registry holds line (a whole line). */
static bool has_line(sg_metrics *reg, const char *line)
{
	char *text = NULL;
	size_t len = 0;
	if (sg_metrics_render(reg, &text, &len) != SG_OK)
		return false;
	char want[300];
	snprintf(want, sizeof(want), "\n%.280s\n", line);
	bool yes = strstr(text, want) != NULL || strncmp(text, want + 1, strlen(want + 1)) == 0;
	free(text);
	return yes;
}

/* The reconcile counter of c in reg matches its stats. */
static bool metrics_agree(sg_metrics *reg, sg_ctrl *c)
{
	sg_ctrl_stats s;
	sg_ctrl_stats_get(c, &s);
	char line[256];
	snprintf(line, sizeof(line), "signet_controller_reconciles_total{controller=\"%s\",result=\"success\"} %llu",
	         sg_ctrl_name(c), (unsigned long long)s.reconciles);
	bool yes = s.reconciles > 0 && has_line(reg, line);
	snprintf(line, sizeof(line), "signet_controller_reconciles_total{controller=\"%s\",result=\"error\"} 0",
	         sg_ctrl_name(c));
	yes = yes && has_line(reg, line);
	snprintf(line, sizeof(line), "signet_controller_queue_depth{controller=\"%s\"} 0", sg_ctrl_name(c));
	return yes && has_line(reg, line);
}

static bool lease_holder_is(const char *who)
{
	sg_kube_ref r = {.group = "coordination.k8s.io", .version = "v1", .resource = "leases", .ns = ns,
	                 .name = LEASE};
	json_t *l = get_obj(&r);
	const char *h = str_at(l, "spec", "holderIdentity");
	bool yes = l && strcmp(h, who) == 0;
	json_decref(l);
	return yes;
}

static bool exactly_one_leads(void)
{
	return sg_ctrl_manager_leading(sa.m) != sg_ctrl_manager_leading(sb.m);
}

static void t_managers(void)
{
	put_cm("mgr-1", "mgr");
	sg_ctrl_manager_opts o = {.lease_kube = k,
	                          .lease = {.ns = ns, .name = LEASE, .lease_duration_ms = 3000, .renew_deadline_ms = 2000,
	                                    .retry_period_ms = 500}};
	o.lease.identity = sa.identity;
	side_new(&sa, &o, "a");
	o.lease.identity = sb.identity;
	side_new(&sb, &o, "b");
	SG_CHECK_OK(sg_ctrl_manager_metrics(sa.m, sa.reg));
	SG_CHECK_OK(sg_ctrl_manager_metrics(sb.m, sb.reg));
	SG_CHECK_OK(sg_ctrl_manager_start(sa.m));
	SG_CHECK_OK(sg_ctrl_manager_start(sb.m));
	SG_WAIT_FOR(10000, exactly_one_leads());
	side *lead = sg_ctrl_manager_leading(sa.m) ? &sa : &sb, *other = lead == &sa ? &sb : &sa;
	SG_CHECK(sg_ctrl_running(lead->lead) && !sg_ctrl_running(other->lead));
	SG_CHECK(sg_ctrl_running(sa.all) && sg_ctrl_running(sb.all));
	SG_WAIT_FOR(10000, tally_count(&lead->lead_p.seen, "mgr-1") >= 1 && tally_count(&sa.all_p.seen, "mgr-1") >= 1 &&
	                       tally_count(&sb.all_p.seen, "mgr-1") >= 1);
	SG_CHECK(lease_holder_is(lead->identity));
	/* Exactly one, through several renewals (every 0.5 s). */
	for (int i = 0; i < 30; i++) {
		SG_CHECK(exactly_one_leads());
		sg_sleep_ms(50);
	}
	SG_CHECK(tally_total(&other->lead_p.seen) == 0);

	SG_WAIT_FOR(20000, metrics_agree(lead->reg, lead->lead) && metrics_agree(lead->reg, lead->all));
	SG_WAIT_FOR(20000, metrics_agree(other->reg, other->all));
	SG_CHECK(has_line(lead->reg, "# TYPE signet_controller_reconciles_total counter"));
	SG_CHECK(has_line(lead->reg, "# TYPE signet_controller_queue_depth gauge"));

	/* Freeing the leader releases the Lease; the other takes over. */
	uint64_t t0 = sg_now_ns();
	sg_ctrl_manager_free(lead->m);
	lead->m = NULL;
	SG_CHECK(!sg_ctrl_running(lead->lead) && !sg_ctrl_running(lead->all));
	SG_CHECK(!lease_holder_is(lead->identity));
	SG_WAIT_FOR(20000, sg_ctrl_manager_leading(other->m));
	printf("takeover after free: %.2f s\n", (double)(sg_now_ns() - t0) / 1e9);
	SG_CHECK(sg_ctrl_running(other->lead) && sg_ctrl_running(other->all));
	SG_WAIT_FOR(10000, tally_count(&other->lead_p.seen, "mgr-1") >= 1);
	SG_CHECK(lease_holder_is(other->identity));
	side_free(other);
	SG_CHECK(lease_holder_is(""));
	side_free(lead);
}

/* ---- without election; a row that fails to start ---- */

static probe p_flaky_row = PROBE_INIT;
static sg_ctrl *c_flaky_row;

/* The definition's lifecycle hooks: starting fails start_fails times (the
 * manager retries the row on tick), and may change a field selector, as
 * the cert-manager issuer does after probing the API server. */
static int flaky_starting(sg_ctrl *c, void *arg)
{
	probe *p = arg;
	SG_CHECK(!sg_ctrl_running(c));
	atomic_fetch_add(&p->start_calls, 1);
	unsigned left = atomic_load(&p->start_fails);
	if (left && atomic_compare_exchange_strong(&p->start_fails, &left, left - 1))
		return sg_error_set(SG_EBUSY, "flaky row: not yet");
	return sg_ctrl_set_field_selector(c, 0, "metadata.name!=no-such-map"); /* selects all */
}

static void flaky_stopped(sg_ctrl *c, void *arg)
{
	probe *p = arg;
	SG_CHECK(!sg_ctrl_running(c));
	atomic_fetch_add(&p->stopped_calls, 1);
}

static int flaky_metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	SG_CHECK(arg == &p_flaky_row && c == c_flaky_row);
	sg_metric *m = NULL;
	return sg_metrics_gauge(&m, reg, "signet_test_flaky_row", "A row's own metric.", NULL, 0);
}

static void t_solo(void)
{
	side s = {.identity = "solo", .lead_p = PROBE_INIT, .all_p = PROBE_INIT};
	side_new(&s, &(sg_ctrl_manager_opts){0}, "solo");
	sg_ctrl_watch w = {.ref = configmaps(NULL), .label_selector = "test=mgr"};
	sg_ctrl_def d = {.name = "flaky-row", .kube = k, .watches = &w, .nwatches = 1, .reconcile = count_reconcile,
	                 .starting = flaky_starting, .stopped = flaky_stopped, .metrics = flaky_metrics,
	                 .arg = &p_flaky_row};
	SG_CHECK_OK(sg_ctrl_new(&c_flaky_row, &d));
	if (!c_flaky_row)
		exit(1);
	atomic_store(&p_flaky_row.start_fails, 2);
	sg_ctrl_row row = {.ctrl = c_flaky_row, .leader_only = true};
	SG_CHECK_RC(sg_ctrl_manager_add(s.m, &(sg_ctrl_row){.ctrl = NULL}), SG_EINVAL);
	SG_CHECK_OK(sg_ctrl_manager_add(s.m, &row));
	SG_CHECK_OK(sg_ctrl_manager_metrics(s.m, s.reg));
	SG_CHECK_OK(sg_ctrl_manager_start(s.m));
	SG_CHECK(sg_ctrl_running(s.lead) && sg_ctrl_running(s.all));
	SG_CHECK(!sg_ctrl_running(c_flaky_row) && !sg_ctrl_manager_leading(s.m));
	SG_CHECK(atomic_load(&p_flaky_row.start_calls) == 1);
	sg_ctrl_manager_tick(s.m);
	SG_CHECK(!sg_ctrl_running(c_flaky_row) && !sg_ctrl_manager_leading(s.m));
	sg_ctrl_manager_tick(s.m);
	SG_CHECK(sg_ctrl_running(c_flaky_row) && sg_ctrl_manager_leading(s.m));
	SG_CHECK(atomic_load(&p_flaky_row.start_calls) == 3);
	sg_ctrl_manager_tick(s.m); /* running: nothing to do */
	SG_CHECK(atomic_load(&p_flaky_row.start_calls) == 3);
	SG_CHECK_RC(sg_ctrl_manager_add(s.m, &row), SG_EINVAL); /* after start */
	SG_WAIT_FOR(10000, tally_count(&p_flaky_row.seen, "mgr-1") >= 1 && tally_count(&s.lead_p.seen, "mgr-1") >= 1);
	SG_CHECK(has_line(s.reg, "# TYPE signet_test_flaky_row gauge"));
	SG_WAIT_FOR(20000, metrics_agree(s.reg, c_flaky_row) && metrics_agree(s.reg, s.lead));
	SG_CHECK(atomic_load(&p_flaky_row.stopped_calls) == 0); /* a failed starting hook has nothing to undo */
	sg_ctrl_manager_free(s.m);
	s.m = NULL;
	SG_CHECK(!sg_ctrl_running(c_flaky_row) && !sg_ctrl_running(s.lead) && !sg_ctrl_running(s.all));
	SG_CHECK(atomic_load(&p_flaky_row.stopped_calls) == 1);
	sg_ctrl_stop(c_flaky_row); /* not running: no hook */
	SG_CHECK(atomic_load(&p_flaky_row.stopped_calls) == 1);
	SG_CHECK_RC(sg_ctrl_set_field_selector(c_flaky_row, 0, NULL), SG_OK);
	sg_ctrl_free(c_flaky_row);
	side_free(&s);

	/* No election and no leader-only row: this replica runs alone, so it
	 * leads from the start. */
	probe p = PROBE_INIT;
	sg_ctrl *only = new_ctrl("only", &w, count_reconcile, &p);
	sg_ctrl_manager *m = NULL;
	SG_CHECK_OK(sg_ctrl_manager_new(&m, NULL));
	if (!m)
		exit(1);
	SG_CHECK_OK(sg_ctrl_manager_add(m, &(sg_ctrl_row){.ctrl = only}));
	SG_CHECK(!sg_ctrl_manager_leading(m));
	SG_CHECK_OK(sg_ctrl_manager_start(m));
	SG_CHECK(sg_ctrl_running(only) && sg_ctrl_manager_leading(m));
	sg_ctrl_manager_free(m);
	SG_CHECK(!sg_ctrl_running(only));
	sg_ctrl_free(only);
	sg_ctrl_manager_free(NULL);
	SG_CHECK(!sg_ctrl_manager_leading(NULL));
}

/* ---- set-up and clean-up ---- */

static void apply_crd(void)
{
	json_t *crd = json_loads(
	    "{\"apiVersion\":\"apiextensions.k8s.io/v1\",\"kind\":\"CustomResourceDefinition\","
	    "\"metadata\":{\"name\":\"widgets." GROUP "\"},"
	    "\"spec\":{\"group\":\"" GROUP "\",\"scope\":\"Namespaced\","
	    "\"names\":{\"plural\":\"widgets\",\"singular\":\"widget\",\"kind\":\"Widget\",\"listKind\":\"WidgetList\"},"
	    "\"versions\":[{\"name\":\"v1\",\"served\":true,\"storage\":true,\"subresources\":{\"status\":{}},"
	    "\"schema\":{\"openAPIV3Schema\":{\"type\":\"object\",\"properties\":{"
	    "\"spec\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":true},"
	    "\"status\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":true,\"properties\":{"
	    "\"conditions\":{\"type\":\"array\",\"x-kubernetes-list-type\":\"map\","
	    "\"x-kubernetes-list-map-keys\":[\"type\"],\"items\":{\"type\":\"object\",\"required\":[\"type\"],"
	    "\"x-kubernetes-preserve-unknown-fields\":true,\"properties\":{\"type\":{\"type\":\"string\"}}}}}}}}}}]}}",
	    0, NULL);
	SG_CHECK(crd != NULL);
	sg_kube_ref r = {.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions",
	                 .name = "widgets." GROUP};
	SG_CHECK_OK(sg_kube_apply(k, &r, crd, "ctrl-test", true, NULL)); /* a shared server may have it */
	json_decref(crd);
}

static bool crd_established(void)
{
	sg_kube_ref r = {.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions",
	                 .name = "widgets." GROUP};
	json_t *crd = get_obj(&r);
	bool yes = false;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(crd, "status"), "conditions"), i, c)
	{
		if (strcmp(str_at(c, "type", NULL), "Established") == 0 && strcmp(str_at(c, "status", NULL), "True") == 0)
			yes = true;
	}
	json_decref(crd);
	return yes;
}

/* Established, and the collection answers (the handler can lag). */
static bool widgets_served(void)
{
	sg_kube_ref r = widgets(NULL);
	return crd_established() && sg_kube_list(k, &r, NULL, NULL) == SG_OK;
}

static void t_start(void)
{
	k = kube_env_start() ? kube_env_client(-1, 0) : NULL; /* no rate limit */
	if (!k) {
		fprintf(stderr, "no API server, or no client of it\n");
		exit(1);
	}
	/* A namespace of our own: a shared server may hold older runs'. */
	snprintf(ns, sizeof(ns), "ctrl-test-%llx", (unsigned long long)(sg_now_ns() & 0xffffffffffull));
	sg_kube_ref nsr = {.version = "v1", .resource = "namespaces"};
	json_t *nso = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name", ns);
	SG_CHECK_OK(sg_kube_create(k, &nsr, nso, NULL));
	json_decref(nso);
	apply_crd();
	SG_WAIT_FOR(30000, widgets_served());
}

/* Deletes every object of a collection of our namespace. */
static void delete_all(sg_kube_ref coll)
{
	json_t *list = NULL;
	SG_CHECK_OK(sg_kube_list(k, &coll, NULL, &list));
	size_t i;
	json_t *o;
	json_array_foreach(json_object_get(list, "items"), i, o)
	{
		sg_kube_ref one = coll;
		one.name = sg_kube_meta_str(o, "name");
		SG_CHECK_OK(sg_kube_delete(k, &one, NULL));
	}
	json_decref(list);
}

static void t_zz_cleanup(void)
{
	sg_ctrl_free(c_status);
	sg_ctrl_free(c_rt);
	/* No namespace controller runs here: empty the namespace ourselves
	 * (the CRD stays for the next run on a shared server). */
	delete_all(widgets(NULL));
	delete_all(configmaps(NULL));
	delete_all((sg_kube_ref){.version = "v1", .resource = "events", .ns = ns});
	delete_all((sg_kube_ref){.group = "coordination.k8s.io", .version = "v1", .resource = "leases", .ns = ns});
	sg_kube_ref nsr = {.version = "v1", .resource = "namespaces", .name = ns};
	SG_CHECK_OK(sg_kube_delete(k, &nsr, NULL));
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_keys_and_conditions), SG_TEST(t_status), SG_TEST(t_runtime), SG_TEST(t_mapped), SG_TEST(t_pause),
             SG_TEST(t_events), SG_TEST(t_managers), SG_TEST(t_solo), SG_TEST(t_zz_cleanup))
