/*
 * sg_rootdist against a real kube-apiserver: the ConfigMap appears in the
 * selected namespaces only, follows a namespace labelled later, a root
 * change, deletions and edits (value, extra keys, binaryData, our label,
 * immutability) while keeping what users added; it is never written when
 * it already matches (no loop); stop means no writes and start repairs;
 * a Terminating namespace is skipped without errors; an empty selector
 * covers every namespace; an API server restart in the middle (with a
 * root change while it is down) still converges.
 *
 * No kube-controller-manager runs, so a deleted namespace stays
 * Terminating for the rest of the test, as a namespace with a stuck
 * finalizer would in a real cluster.
 */
#include "sg_rootdist.h"

#include "sg_clock.h"
#include "sg_log.h"
#include "self_signed.h"
#include "sg_test.h"
#include "test_kube_env.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define NAME SG_ROOTDIST_NAME
#define KEY SG_ROOTDIST_KEY
#define SELECTOR "istio-injection=enabled"

static sg_kube *k;
static char *root_a, *root_b;
static sg_rootdist *rd;

/* ---- fixtures ---- */

static sg_kube_ref cm_ref(const char *ns)
{
	return (sg_kube_ref){.version = "v1", .resource = "configmaps", .ns = ns, .name = NAME};
}

static void ns_create(const char *name, bool selected)
{
	sg_kube_ref coll = {.version = "v1", .resource = "namespaces"};
	json_t *ns =
	    json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name", name);
	if (selected)
		json_object_set_new(json_object_get(ns, "metadata"), "labels",
		                    json_pack("{s:s}", "istio-injection", "enabled"));
	SG_CHECK_OK(sg_kube_create(k, &coll, ns, NULL));
	json_decref(ns);
}

/* Sets (value) or removes (NULL) label key of namespace name. */
static void ns_label(const char *name, const char *key, const char *value)
{
	sg_kube_ref ref = {.version = "v1", .resource = "namespaces", .name = name};
	json_t *patch = json_pack("{s:{s:{s:o}}}", "metadata", "labels", key, value ? json_string(value) : json_null());
	SG_CHECK_OK(sg_kube_merge_patch(k, &ref, patch, NULL));
	json_decref(patch);
}

static json_t *cm_get(const char *ns)
{
	sg_kube_ref ref = cm_ref(ns);
	json_t *cm = NULL;
	int rc = sg_kube_get(k, &ref, &cm);
	if (rc != SG_OK && rc != SG_ENOTFOUND)
		fprintf(stderr, "GET %s/%s: %s\n", ns, NAME, sg_error_last()->msg);
	return cm;
}

static void cm_patch(const char *ns, json_t *patch)
{
	sg_kube_ref ref = cm_ref(ns);
	SG_CHECK_OK(sg_kube_merge_patch(k, &ref, patch, NULL));
	json_decref(patch);
}

static void cm_delete(const char *ns)
{
	sg_kube_ref ref = cm_ref(ns);
	SG_CHECK_OK(sg_kube_delete(k, &ref, NULL));
}

static const char *label(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

/* The ConfigMap is exactly ours: one data key holding root, our label. */
static bool cm_ok(const json_t *cm, const char *root)
{
	json_t *data = json_object_get(cm, "data");
	const char *v = json_string_value(json_object_get(data, KEY));
	const char *l = label(cm, SG_ROOTDIST_LABEL);
	json_t *bin = json_object_get(cm, "binaryData");
	return cm && json_object_size(data) == 1 && v && strcmp(v, root) == 0 && l && strcmp(l, "true") == 0 &&
	       (!bin || json_object_size(bin) == 0) && !json_is_true(json_object_get(cm, "immutable"));
}

static bool wait_ok(const char *ns, const char *root, unsigned ms)
{
	uint64_t deadline = sg_now_ns() + (uint64_t)ms * 1000000u;
	for (;;) {
		json_t *cm = cm_get(ns);
		bool ok = cm_ok(cm, root);
		json_decref(cm);
		if (ok)
			return true;
		if (sg_now_ns() > deadline) {
			fprintf(stderr, "namespace %s: ConfigMap not converged within %u ms\n", ns, ms);
			return false;
		}
		sg_sleep_ms(50);
	}
}

static bool cm_absent(const char *ns)
{
	json_t *cm = cm_get(ns);
	bool absent = cm == NULL;
	json_decref(cm);
	return absent;
}

static char *cm_rv(const char *ns)
{
	json_t *cm = cm_get(ns);
	const char *rv = sg_kube_meta_str(cm, "resourceVersion");
	char *out = strdup(rv ? rv : "");
	json_decref(cm);
	return out;
}

static sg_rootdist_stats stats(void)
{
	sg_rootdist_stats s;
	sg_rootdist_stats_get(rd, &s);
	return s;
}

static uint64_t writes(sg_rootdist_stats s)
{
	return s.creates + s.updates;
}

/* Waits until the worker has nothing queued (events delivered and handled). */
static void settle(void)
{
	sg_sleep_ms(500);
	uint64_t deadline = sg_now_ns() + 10000000000ull;
	while (stats().queued && sg_now_ns() < deadline)
		sg_sleep_ms(50);
	sg_sleep_ms(300);
}

static sg_rootdist *make(const char *selector, const char *root)
{
	sg_rootdist_options o = {.kube = k, .namespace_selector = selector};
	sg_rootdist *r = NULL;
	SG_CHECK_OK(sg_rootdist_new(&r, &o, root, strlen(root)));
	if (!r)
		exit(1);
	return r;
}

/* ---- tests ---- */

static void t_start(void)
{
	sg_log_configure(SG_LOG_WARN, SG_LOG_TEXT);
	if (!kube_env_start()) {
		fprintf(stderr, "no API server\n");
		exit(1);
	}
	k = kube_env_client(-1, 0);
	root_a = test_self_signed_pem("signet test root A");
	root_b = test_self_signed_pem("signet test root B");
	if (!k || !root_a || !root_b)
		exit(1);
}

static void t_options(void)
{
	static const char *const bad[] = {
	    "a=b,",    ",a",
	    "=b",      "a in ()",
	    "a in (b", "!a=b",
	    "a b",     "a=b c",
	    "-a=b",    "a=-b",
	    "A.b/c=d", "a>b",
	    "a=b=c",   "\xc3\xa9=1",
	    "a notin", "a,,b",
	    "x/=1",    "a=0123456789012345678901234567890123456789012345678901234567890123", /* a value of 64 bytes */
	};
	static const char *const good[] = {
	    "",           "  ",          SELECTOR,          "a==b,c!=d", "a",  "!a",
	    "a in (x,y)", "a notin (x)", "example.com/a=b", "a>5",       "a=", " a = b , c in ( d , e ) ",
	};
	sg_rootdist_options o = {.kube = k};
	sg_rootdist *r = NULL;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.namespace_selector = bad[i];
		int rc = sg_rootdist_new(&r, &o, root_a, strlen(root_a));
		if (rc != SG_EINVAL)
			fprintf(stderr, "selector \"%s\" accepted\n", bad[i]);
		SG_CHECK(rc == SG_EINVAL && r == NULL);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		o.namespace_selector = good[i];
		int rc = sg_rootdist_new(&r, &o, root_a, strlen(root_a));
		if (rc != SG_OK)
			fprintf(stderr, "selector \"%s\" refused: %s\n", good[i], sg_error_last()->msg);
		SG_CHECK_OK(rc);
		sg_rootdist_free(r);
		r = NULL;
	}
	o.namespace_selector = NULL;
	SG_CHECK_RC(sg_rootdist_new(&r, &o, "", 0), SG_EINVAL);
	SG_CHECK_RC(sg_rootdist_new(&r, &o, "not a certificate\n", 18), SG_EINVAL);
	char with_nul[64] = "-----BEGIN CERTIFICATE-----\n";
	SG_CHECK_RC(sg_rootdist_new(&r, &o, with_nul, sizeof(with_nul)), SG_EINVAL);
	o.name = "Bad_Name";
	SG_CHECK_RC(sg_rootdist_new(&r, &o, root_a, strlen(root_a)), SG_EINVAL);
	o.name = NULL;
	o.key = "a/b";
	SG_CHECK_RC(sg_rootdist_new(&r, &o, root_a, strlen(root_a)), SG_EINVAL);
	o.key = NULL;
	o.kube = NULL;
	SG_CHECK_RC(sg_rootdist_new(&r, &o, root_a, strlen(root_a)), SG_EINVAL);
	/* Lifecycle without an API call in between: stop before start, start twice. */
	o.kube = k;
	SG_CHECK_OK(sg_rootdist_new(&r, &o, root_a, strlen(root_a)));
	sg_rootdist_stop(r);
	SG_CHECK_OK(sg_rootdist_start(r));
	SG_CHECK_OK(sg_rootdist_start(r));
	sg_rootdist_stop(r);
	sg_rootdist_stop(r);
	SG_CHECK_RC(sg_rootdist_set_root(r, "x", 1), SG_EINVAL);
	sg_rootdist_free(r);
	sg_rootdist_free(NULL);
}

static void t_selected(void)
{
	ns_create("rd-a", true);
	ns_create("rd-b", true);
	ns_create("rd-c", false);
	/* rd-b already holds a stale ConfigMap with a user's label, an
	 * annotation and an extra key, and without our label. */
	sg_kube_ref coll = {.version = "v1", .resource = "configmaps", .ns = "rd-b"};
	json_t *cm = kube_env_configmap("rd-b", NAME, KEY, "stale");
	json_object_set_new(json_object_get(cm, "data"), "extra", json_string("x"));
	json_object_set_new(json_object_get(cm, "metadata"), "labels", json_pack("{s:s}", "team", "blue"));
	json_object_set_new(json_object_get(cm, "metadata"), "annotations", json_pack("{s:s}", "note", "keep me"));
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, NULL));
	json_decref(cm);

	rd = make(SELECTOR, root_a);
	uint64_t t0 = sg_now_ns();
	SG_CHECK_OK(sg_rootdist_start(rd));
	SG_CHECK(wait_ok("rd-a", root_a, 30000));
	SG_CHECK(wait_ok("rd-b", root_a, 30000));
	printf("converged in %.2f s\n", (double)(sg_now_ns() - t0) / 1e9);
	json_t *b = cm_get("rd-b");
	SG_CHECK(label(b, "team") && strcmp(label(b, "team"), "blue") == 0);
	const char *note =
	    json_string_value(json_object_get(json_object_get(json_object_get(b, "metadata"), "annotations"), "note"));
	SG_CHECK(note && strcmp(note, "keep me") == 0);
	json_decref(b);

	settle();
	SG_CHECK(cm_absent("rd-c"));
	SG_CHECK(cm_absent("default")); /* not selected */

	ns_label("rd-c", "istio-injection", "enabled"); /* selected later */
	SG_CHECK(wait_ok("rd-c", root_a, 30000));
	settle();
	sg_rootdist_stats s = stats();
	printf("creates %llu updates %llu unchanged %llu skipped %llu rereads %llu errors %llu namespaces %llu\n",
	       (unsigned long long)s.creates, (unsigned long long)s.updates, (unsigned long long)s.unchanged,
	       (unsigned long long)s.skipped, (unsigned long long)s.rereads, (unsigned long long)s.errors,
	       (unsigned long long)s.namespaces);
	SG_CHECK(s.creates == 2 && s.updates == 1 && s.errors == 0);
	SG_CHECK(s.namespaces == 3);
}

/* After convergence nothing is written: counters and resourceVersions
 * stay put, although our own writes came back as events. */
static void t_no_loop(void)
{
	settle();
	sg_rootdist_stats s0 = stats();
	char *rv[3] = {cm_rv("rd-a"), cm_rv("rd-b"), cm_rv("rd-c")};
	sg_sleep_ms(4000);
	sg_rootdist_stats s1 = stats();
	char *rv1[3] = {cm_rv("rd-a"), cm_rv("rd-b"), cm_rv("rd-c")};
	SG_CHECK(writes(s1) == writes(s0) && s1.rereads == s0.rereads && s1.errors == s0.errors);
	for (int i = 0; i < 3; i++) {
		SG_CHECK(rv[i][0] && strcmp(rv[i], rv1[i]) == 0);
		free(rv[i]);
		free(rv1[i]);
	}
}

static void t_repair(void)
{
	sg_rootdist_stats s0 = stats();
	cm_delete("rd-a");
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	settle();
	SG_CHECK(stats().creates == s0.creates + 1);

	cm_patch("rd-a", json_pack("{s:{s:s}}", "data", KEY, "tampered"));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	cm_patch("rd-a", json_pack("{s:{s:s}}", "data", "extra", "1"));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	cm_patch("rd-a", json_pack("{s:{s:{s:n}}}", "metadata", "labels", SG_ROOTDIST_LABEL));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	cm_patch("rd-a", json_pack("{s:{s:s}}", "binaryData", "blob", "AAEC"));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	settle();

	/* A user's own label and annotation on a correct ConfigMap: kept, and
	 * their write is not answered by one of ours. */
	sg_rootdist_stats s1 = stats();
	cm_patch("rd-a", json_pack("{s:{s:{s:s}, s:{s:s}}}", "metadata", "labels", "owner", "me", "annotations", "why",
	                           "because"));
	char *rv = cm_rv("rd-a");
	settle();
	char *rv2 = cm_rv("rd-a");
	SG_CHECK(strcmp(rv, rv2) == 0);
	SG_CHECK(writes(stats()) == writes(s1));
	json_t *cm = cm_get("rd-a");
	SG_CHECK(cm_ok(cm, root_a) && label(cm, "owner") && strcmp(label(cm, "owner"), "me") == 0);
	json_decref(cm);
	free(rv);
	free(rv2);

	/* An immutable ConfigMap with the wrong data can only be replaced. */
	cm_patch("rd-a", json_pack("{s:b, s:{s:s}}", "immutable", 1, "data", KEY, "frozen"));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	settle();
	sg_rootdist_stats s2 = stats();
	printf("repairs: creates %llu updates %llu rereads %llu errors %llu\n", (unsigned long long)s2.creates,
	       (unsigned long long)s2.updates, (unsigned long long)s2.rereads, (unsigned long long)s2.errors);
	SG_CHECK(s2.errors == 0);
}

static void t_set_root(void)
{
	sg_rootdist_stats s0 = stats();
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	SG_CHECK(wait_ok("rd-a", root_b, 20000));
	SG_CHECK(wait_ok("rd-b", root_b, 20000));
	SG_CHECK(wait_ok("rd-c", root_b, 20000));
	settle();
	sg_rootdist_stats s1 = stats();
	SG_CHECK(s1.updates == s0.updates + 3 && s1.creates == s0.creates);
	/* The same bundle again changes nothing. */
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	settle();
	sg_rootdist_stats s2 = stats();
	SG_CHECK(writes(s2) == writes(s1) && s2.unchanged == s1.unchanged);
}

/* A namespace that stops matching keeps its ConfigMap, which is no longer
 * updated (istio-csr does the same). */
static void t_unselected(void)
{
	ns_label("rd-c", "istio-injection", NULL);
	settle();
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_a, strlen(root_a)));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	SG_CHECK(wait_ok("rd-b", root_a, 20000));
	settle();
	json_t *cm = cm_get("rd-c");
	SG_CHECK(cm_ok(cm, root_b));
	json_decref(cm);
	SG_CHECK(stats().namespaces == 2);
}

static void t_terminating(void)
{
	sg_kube_ref ns = {.version = "v1", .resource = "namespaces", .name = "rd-b"};
	SG_CHECK_OK(sg_kube_delete(k, &ns, NULL));
	settle();
	sg_rootdist_stats s0 = stats();
	cm_delete("rd-b"); /* deletes are still allowed in a Terminating namespace */
	/* A root change reaches every selected namespace, the Terminating one
	 * included, which is skipped. */
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	SG_CHECK(wait_ok("rd-a", root_b, 20000));
	settle();
	sg_sleep_ms(2000);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(cm_absent("rd-b"));
	SG_CHECK(s1.errors == s0.errors);
	SG_CHECK(s1.skipped >= s0.skipped + 1); /* the delete event and the root change (may coalesce) */
	SG_CHECK(s1.creates == s0.creates && s1.updates == s0.updates + 1);
}

static void t_stop(void)
{
	sg_rootdist_stop(rd);
	sg_rootdist_stats s0 = stats();
	SG_CHECK(s0.namespaces == 0 && s0.queued == 0);
	cm_patch("rd-a", json_pack("{s:{s:s}}", "data", KEY, "edited while stopped"));
	cm_delete("rd-c");
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_a, strlen(root_a))); /* stored, not acted on */
	sg_sleep_ms(3000);
	json_t *cm = cm_get("rd-a");
	const char *v = json_string_value(json_object_get(json_object_get(cm, "data"), KEY));
	SG_CHECK(v && strcmp(v, "edited while stopped") == 0);
	json_decref(cm);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(writes(s1) == writes(s0) && s1.unchanged == s0.unchanged);

	/* Leading again repairs it, with the root set meanwhile. */
	ns_label("rd-c", "istio-injection", "enabled");
	SG_CHECK_OK(sg_rootdist_start(rd));
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	SG_CHECK(wait_ok("rd-c", root_a, 20000));
	/* Quick lose/lead/lose/lead cycles. */
	for (int i = 0; i < 3; i++) {
		sg_rootdist_stop(rd);
		SG_CHECK_OK(sg_rootdist_start(rd));
	}
	cm_delete("rd-a");
	SG_CHECK(wait_ok("rd-a", root_a, 20000));
	settle();
	SG_CHECK(stats().errors == 0);
}

static void t_every_namespace(void)
{
	sg_rootdist_free(rd);
	rd = make(NULL, root_a);
	SG_CHECK_OK(sg_rootdist_start(rd));
	static const char *const all[] = {"default", "kube-system", "kube-public", "kube-node-lease", "rd-a", "rd-c"};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		SG_CHECK(wait_ok(all[i], root_a, 30000));
	ns_create("rd-d", false);
	SG_CHECK(wait_ok("rd-d", root_a, 20000));
	settle();
	SG_CHECK(cm_absent("rd-b"));
	sg_rootdist_stats s = stats();
	SG_CHECK(s.errors == 0 && s.namespaces >= 7);
}

static void *restart_apiserver(void *arg)
{
	*(bool *)arg = kube_env_restart_apiserver();
	return NULL;
}

static void t_apiserver_restart(void)
{
	if (!kube_env.dir[0]) {
		printf("skipped: a shared API server cannot be restarted\n");
		return;
	}
	bool restarted = false;
	pthread_t th;
	uint64_t t0 = sg_now_ns();
	pthread_create(&th, NULL, restart_apiserver, &restarted);
	/* Once the server is really away: a root change, whose writes fail
	 * and back off until it is back. */
	sg_kube_ref ns = {.version = "v1", .resource = "namespaces", .name = "default"};
	bool down = false;
	for (int i = 0; i < 200 && !down; i++) {
		json_t *o = NULL;
		down = sg_kube_get(k, &ns, &o) != SG_OK;
		json_decref(o);
		if (!down)
			sg_sleep_ms(25);
	}
	SG_CHECK(down);
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	pthread_join(th, NULL);
	SG_CHECK(restarted);
	printf("apiserver restarted in %.1f s\n", (double)(sg_now_ns() - t0) / 1e9);
	cm_patch("default", json_pack("{s:{s:s}}", "data", KEY, "edited after the restart"));
	static const char *const all[] = {"default", "kube-system", "kube-public", "kube-node-lease",
	                                  "rd-a",    "rd-c",        "rd-d"};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		SG_CHECK(wait_ok(all[i], root_b, 90000));
	printf("converged %.1f s after the restart began\n", (double)(sg_now_ns() - t0) / 1e9);
	settle();
	sg_rootdist_stats s0 = stats();
	sg_sleep_ms(3000);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(writes(s1) == writes(s0));
	printf("after the restart: errors %llu (failed writes while the server was away)\n",
	       (unsigned long long)s1.errors);
	SG_CHECK(s1.errors > 0);
}

static void t_zz_cleanup(void)
{
	sg_rootdist_free(rd);
	free(root_a);
	free(root_b);
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_options), SG_TEST(t_selected), SG_TEST(t_no_loop), SG_TEST(t_repair),
             SG_TEST(t_set_root), SG_TEST(t_unselected), SG_TEST(t_terminating), SG_TEST(t_stop),
             SG_TEST(t_every_namespace), SG_TEST(t_apiserver_restart), SG_TEST(t_zz_cleanup))
