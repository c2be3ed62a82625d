/*
 * sg_rootdist against a real kube-apiserver: the ConfigMap appears in the
 * selected namespaces only, follows a namespace labelled later, a root
 * change (a rotation: both roots, then the new one), deletions and edits
 * (value, extra keys, binaryData, our label, immutability) while keeping
 * what users added; it is never written when
 * it already matches (no loop); stop means no writes and start repairs;
 * a Terminating namespace is skipped without errors; an empty selector
 * covers every namespace; an API server restart in the middle (with a
 * root change while it is down) still converges. Then the single-namespace
 * instance signetd runs for trust bundles (ConfigMap signet-ca-roots, key
 * ca.crt, label signet.dev/ca-roots=true): only in its namespace, which
 * may come later; a rotation's bundle (two roots) and the next one reach
 * it; a deleted one comes back; a ConfigMap of the same name in another
 * namespace is never touched. Then the Secret signetd keeps for istiod's
 * RA (issue 30, item 6: external-ca-cert, key root-cert.pem, type Opaque,
 * base64 of the bundle): created, repaired after edits (a wrong value,
 * an extra key, our label gone) and deletion, following a rotation, an
 * immutable one with the wrong roots made again; a ConfigMap of that name
 * beside it is never touched.
 *
 * No kube-controller-manager runs, so a deleted namespace stays
 * Terminating for the rest of the test, as a namespace with a stuck
 * finalizer would in a real cluster.
 *
 * The checks wait for states, never for time: for the ConfigMaps to read
 * as expected in the API server, and for the distributor to be idle (its
 * informers hold what the server has, so every event has been delivered;
 * its queue is empty; no reconcile ended since the previous look) before
 * exact counts are read. That something does NOT happen is shown the same
 * way: the event that would cause it is demonstrably handled (a reconcile
 * that found nothing to do, counted as unchanged) and the write counters
 * did not move.
 */
#include "sg_rootdist.h"

#include "kube_pem.h"
#include "self_signed.h"
#include "sg_clock.h"
#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_test.h"
#include "test_kube_fixture.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define NAME SG_ROOTDIST_NAME
#define KEY SG_ROOTDIST_KEY
#define SELECTOR "istio-injection=enabled"
/* The distributor's watches (sg_rootdist.c): namespaces, the primary, and
 * our ConfigMaps. */
#define NS_WATCH 0
#define CM_WATCH 1

/* The publication for trust bundles (signetd's second instance). */
#define PUB_NS "rp-trust"
#define PUB_NAME "signet-ca-roots"

static sg_kube *k;
static char *root_a, *root_b;
static sg_rootdist *rd;
/* What rd is: its namespace selector (NULL: every namespace) or its one
 * namespace, and the ConfigMap it keeps. */
static const char *selector;
static const char *only_ns;
static const char *cm_name = NAME, *cm_key = KEY, *cm_label = SG_ROOTDIST_LABEL;
static bool as_secret;                         /* rd keeps a Secret (t_ra_secret) */
static const char *cm_resource = "configmaps"; /* what rd keeps */

/* ---- fixtures ---- */

#define CM_REF(ns) KUBE_FX_CORE(cm_resource, (ns), cm_name)

static void ns_create(const char *name, bool selected)
{
	json_t *ns = kube_fx_namespace(name, selected ? "istio-injection" : NULL, "enabled");
	SG_CHECK_OK(kube_fx_create(k, KUBE_FX_CORE("namespaces", NULL, NULL), ns));
}

/* Sets (value) or removes (NULL) label key of namespace name. */
static void ns_label(const char *name, const char *key, const char *value)
{
	SG_CHECK_OK(kube_env_label_namespace(k, name, key, value));
}

static json_t *cm_get(const char *ns)
{
	return kube_fx_get(k, CM_REF(ns));
}

#define CM_PATCH(ns, patch) SG_CHECK_OK(kube_fx_patch(k, CM_REF(ns), (patch)))
#define CM_DELETE(ns) SG_CHECK_OK(kube_fx_delete(k, CM_REF(ns)))

static const char *label(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

/* The ConfigMap is exactly ours: one data key holding root (in a Secret:
 * its base64, type Opaque), our label. */
static bool cm_ok(const json_t *cm, const char *root)
{
	json_t *data = json_object_get(cm, "data");
	const char *v = json_string_value(json_object_get(data, cm_key));
	char *decoded = as_secret ? unb64(v) : NULL;
	const char *type = json_string_value(json_object_get(cm, "type"));
	bool value_ok = as_secret ? decoded && strcmp(decoded, root) == 0 && type && strcmp(type, "Opaque") == 0
	                          : v && strcmp(v, root) == 0;
	free(decoded);
	const char *l = label(cm, cm_label);
	json_t *bin = json_object_get(cm, "binaryData");
	return cm && json_object_size(data) == 1 && value_ok && l && strcmp(l, "true") == 0 &&
	       (!bin || json_object_size(bin) == 0) && !json_is_true(json_object_get(cm, "immutable"));
}

static bool cm_is(const char *ns, const char *root)
{
	json_t *cm = cm_get(ns);
	bool ok = cm_ok(cm, root);
	json_decref(cm);
	return ok;
}

/* Waits (at most ms) until namespace ns holds exactly our ConfigMap with root. */
#define WAIT_OK(ns, root, ms) SG_WAIT_FOR(ms, cm_is(ns, root))

static bool cm_absent(const char *ns)
{
	json_t *cm = cm_get(ns);
	bool absent = cm == NULL;
	json_decref(cm);
	return absent;
}

static char *cm_rv(const char *ns)
{
	return kube_fx_rv(k, CM_REF(ns));
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

static sg_ctrl_stats ctrl_stats(void)
{
	sg_ctrl_stats cs;
	sg_ctrl_stats_get(sg_rootdist_controller(rd), &cs);
	return cs;
}

static char idle_why[400]; /* why the last idle() said no */

/* Whether rd's informer of watch holds exactly what the server lists for
 * resource (in namespace in_ns; NULL: all) with those selectors. */
static bool cache_current(size_t watch, const char *resource, const char *in_ns, const char *labels, const char *fields)
{
	sg_kube_list_opts lo = {.label_selector = labels, .field_selector = fields};
	return kube_fx_cache_current(k, sg_ctrl_informer(sg_rootdist_controller(rd), watch),
	                             KUBE_FX_CORE(resource, in_ns, NULL), &lo, idle_why, sizeof(idle_why));
}

/* The distributor has nothing left to do: its informers hold what the
 * server has (every event delivered), nothing is queued, and no reconcile
 * ended since the previous look, one poll interval earlier (*done, *looks:
 * kube_fx_settled's). */
static bool idle(uint64_t *done, int *looks)
{
	char ns_field[100], cm_field[300];
	snprintf(ns_field, sizeof(ns_field), "metadata.name=%s", only_ns ? only_ns : "");
	snprintf(cm_field, sizeof(cm_field), "metadata.name=%s", cm_name);
	sg_ctrl_stats a = ctrl_stats();
	bool ok = a.queued == 0 && a.active == 0 &&
	          cache_current(NS_WATCH, "namespaces", NULL, selector, only_ns ? ns_field : NULL) &&
	          cache_current(CM_WATCH, cm_resource, only_ns, NULL, cm_field);
	sg_ctrl_stats b = ctrl_stats();
	uint64_t n = b.reconciles + b.errors;
	if (a.queued || b.queued)
		snprintf(idle_why, sizeof(idle_why), "%llu namespaces queued",
		         (unsigned long long)(a.queued ? a.queued : b.queued));
	if (a.active || b.active)
		snprintf(idle_why, sizeof(idle_why), "a reconcile in progress");
	ok = ok && b.queued == 0 && b.active == 0 && n == a.reconciles + a.errors;
	bool quiet = kube_fx_settled(ok, n, done, looks, 1);
	if (ok && !quiet)
		snprintf(idle_why, sizeof(idle_why), "a reconcile ended since the previous look");
	return quiet;
}

/* Waits (at most ms) until the distributor is idle; a failed check saying
 * what was still moving when the deadline passed. */
#define WAIT_IDLE(ms) KUBE_FX_WAIT_SETTLED(ms, idle(&kube_fx_done, &kube_fx_looks), idle_why)

/* Waits until the counters show at least the writes the test has seen: a
 * reconcile counts its outcome after its write (idle() also waits for no
 * reconcile in progress; this says which count the test is after). */
#define WAIT_COUNTED(cond) SG_WAIT_FOR(20000, cond)

/* A label change on namespace ns (selected): one event, so one reconcile
 * of ns. */
static void poke(const char *ns)
{
	static unsigned n;
	char v[16];
	snprintf(v, sizeof(v), "%u", ++n);
	ns_label(ns, "signet-test/poke", v);
}

/* After events that leave every ConfigMap correct (taken while idle, s0):
 * waits until n more reconciles have found nothing to do and the
 * distributor is idle again, then checks that these n were all and that
 * nothing was written or re-read. */
static void check_unanswered_within(sg_rootdist_stats s0, uint64_t n, unsigned wait_ms)
{
	SG_WAIT_FOR(wait_ms, stats().unchanged >= s0.unchanged + n);
	WAIT_IDLE(20000);
	sg_rootdist_stats s1 = stats();
	if (s1.unchanged != s0.unchanged + n)
		fprintf(stderr, "unchanged %llu, want %llu\n", (unsigned long long)s1.unchanged,
		        (unsigned long long)(s0.unchanged + n));
	SG_CHECK(s1.unchanged == s0.unchanged + n);
	SG_CHECK(writes(s1) == writes(s0) && s1.rereads == s0.rereads && s1.errors == s0.errors);
}

static void check_unanswered(sg_rootdist_stats s0, uint64_t n)
{
	check_unanswered_within(s0, n, 20000);
}

static sg_rootdist *make(const char *sel, const char *root)
{
	selector = sel && *sel ? sel : NULL;
	sg_rootdist_options o = {.kube = k, .namespace_selector = sel};
	sg_rootdist *r = NULL;
	SG_CHECK_OK(sg_rootdist_new(&r, &o, root, strlen(root)));
	if (!r)
		exit(1);
	return r;
}

/* The instance signetd runs for trust bundles, in namespace PUB_NS. */
static sg_rootdist *make_pub(const char *root)
{
	selector = NULL;
	only_ns = PUB_NS;
	cm_name = PUB_NAME;
	cm_key = SG_ROOTDIST_ROOTS_KEY;
	cm_label = SG_ROOTDIST_ROOTS_LABEL;
	sg_rootdist_options o = {
		.kube = k,
		.ns = PUB_NS,
		.name = PUB_NAME,
		.key = SG_ROOTDIST_ROOTS_KEY,
		.label = SG_ROOTDIST_ROOTS_LABEL,
		.label_value = "true",
		.controller = SG_ROOTDIST_ROOTS_CONTROLLER,
	};
	sg_rootdist *r = NULL;
	SG_CHECK_OK(sg_rootdist_new(&r, &o, root, strlen(root)));
	if (!r)
		exit(1);
	return r;
}

/* ---- tests ---- */

static void t_start(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	root_a = test_self_signed_pem("signet test root A");
	root_b = test_self_signed_pem("signet test root B");
	if (!root_a || !root_b)
		exit(1);
}

static void t_options(void)
{
	static const char *const bad[] = {
	    "a=b,",    ",a",
	    "=b",      "a<-5",
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
	    "a in ()", /* apimachinery: the set of the empty value */
	};
	sg_rootdist_options o = {.kube = k};
	sg_rootdist *r = NULL;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.namespace_selector = bad[i];
		int rc = sg_rootdist_new(&r, &o, root_a, strlen(root_a));
		if (rc != SG_EINVAL)
			fprintf(stderr, "selector \"%s\" accepted\n", bad[i]);
		SG_CHECK(rc == SG_EINVAL && r == NULL);
		sg_rootdist_free(r); /* NULL unless the check above failed */
		r = NULL;
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
	/* Lifecycle: stop before start, start twice, stop twice. The instance
	 * keeps one namespace that no test creates: between its start and its
	 * stop its workers may list and reconcile (a loaded machine gives them
	 * time to), and an instance of every namespace once wrote a ConfigMap
	 * into "default" here that t_selected then found. */
	o.kube = k;
	o.ns = "rd-lifecycle";
	SG_CHECK_OK(sg_rootdist_new(&r, &o, root_a, strlen(root_a)));
	sg_ctrl_stop(sg_rootdist_controller(r));
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(r)));
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(r)));
	sg_ctrl_stop(sg_rootdist_controller(r));
	sg_ctrl_stop(sg_rootdist_controller(r));
	SG_CHECK_RC(sg_rootdist_set_root(r, "x", 1), SG_EINVAL);
	sg_rootdist_stats s;
	sg_rootdist_stats_get(r, &s);
	SG_CHECK(s.creates == 0 && s.updates == 0);
	sg_rootdist_free(r);
	sg_rootdist_free(NULL);
}

/* The options of a single-namespace instance: the namespace, the label,
 * its value, the controller's name; a selector beside a namespace. */
static void t_options_one_namespace(void)
{
	static const struct {
		const char *ns, *selector, *label, *value, *controller;
	} bad[] = {
	    {"cert-manager", "a=b", NULL, NULL, NULL}, /* one namespace, or a selector */
	    {"cert-manager", "!a", NULL, NULL, NULL},
	    {"Cert-Manager", NULL, NULL, NULL, NULL},
	    {"-a", NULL, NULL, NULL, NULL},
	    {"a.b", NULL, NULL, NULL, NULL}, /* a label, not a subdomain */
	    {"a123456789012345678901234567890123456789012345678901234567890123", NULL, NULL, NULL, NULL}, /* 64 */
	    {NULL, NULL, "", NULL, NULL},
	    {NULL, NULL, "a b", NULL, NULL},
	    {NULL, NULL, "/a", NULL, NULL},
	    {NULL, NULL, "a/", NULL, NULL},
	    {NULL, NULL, "a/b/c", NULL, NULL},
	    {NULL, NULL, "Signet.dev/a", NULL, NULL},
	    {NULL, NULL, "-a", NULL, NULL},
	    {NULL, NULL, "a=b", NULL, NULL},
	    {NULL, NULL, NULL, "", NULL},
	    {NULL, NULL, NULL, "-true", NULL},
	    {NULL, NULL, NULL, "a b", NULL},
	    {NULL, NULL, NULL, NULL, ""},
	    {NULL, NULL, NULL, NULL, "Root_Pub"},
	};
	static const struct {
		const char *ns, *selector, *label, *value, *controller;
	} good[] = {
	    {"cert-manager", NULL, SG_ROOTDIST_ROOTS_LABEL, "true", SG_ROOTDIST_ROOTS_CONTROLLER},
	    {"cert-manager", "", NULL, NULL, NULL},
	    {"cert-manager", "  ", NULL, NULL, NULL}, /* blanks select everything: no selector */
	    {"", "a=b", NULL, NULL, NULL},            /* "": no single namespace */
	    {"a", NULL, "a", "A", "a"},
	    {NULL, NULL, "a.b-c/d_e.f", "x-1.y_2", "rootpub-2"},
	};
	sg_rootdist *r = NULL;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_rootdist_options o = {.kube = k,
		                         .ns = bad[i].ns,
		                         .namespace_selector = bad[i].selector,
		                         .label = bad[i].label,
		                         .label_value = bad[i].value,
		                         .controller = bad[i].controller};
		int rc = sg_rootdist_new(&r, &o, root_a, strlen(root_a));
		if (rc != SG_EINVAL)
			fprintf(stderr, "bad options %zu accepted\n", i);
		SG_CHECK(rc == SG_EINVAL && r == NULL);
		sg_rootdist_free(r);
		r = NULL;
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		sg_rootdist_options o = {.kube = k,
		                         .ns = good[i].ns,
		                         .namespace_selector = good[i].selector,
		                         .label = good[i].label,
		                         .label_value = good[i].value,
		                         .controller = good[i].controller};
		int rc = sg_rootdist_new(&r, &o, root_a, strlen(root_a));
		if (rc != SG_OK)
			fprintf(stderr, "good options %zu refused: %s\n", i, sg_error_last()->msg);
		SG_CHECK_OK(rc);
		if (r && good[i].controller)
			SG_CHECK(strcmp(sg_ctrl_name(sg_rootdist_controller(r)), good[i].controller) == 0);
		sg_rootdist_free(r);
		r = NULL;
	}
	/* The message says what is wrong. */
	sg_rootdist_options o = {.kube = k, .ns = "cert-manager", .namespace_selector = "team=a"};
	SG_CHECK_RC(sg_rootdist_new(&r, &o, root_a, strlen(root_a)), SG_EINVAL);
	SG_CHECK(strstr(sg_error_last()->msg, "exclude each other") != NULL);
	/* The default instance keeps its name. */
	o = (sg_rootdist_options){.kube = k};
	SG_CHECK_OK(sg_rootdist_new(&r, &o, root_a, strlen(root_a)));
	SG_CHECK(r && strcmp(sg_ctrl_name(sg_rootdist_controller(r)), "rootdist") == 0);
	sg_rootdist_free(r);
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
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	WAIT_OK("rd-a", root_a, 30000);
	WAIT_OK("rd-b", root_a, 30000);
	printf("converged in %.2f s\n", (double)(sg_now_ns() - t0) / 1e9);
	json_t *b = cm_get("rd-b");
	SG_CHECK(label(b, "team") && strcmp(label(b, "team"), "blue") == 0);
	const char *note =
	    json_string_value(json_object_get(json_object_get(json_object_get(b, "metadata"), "annotations"), "note"));
	SG_CHECK(note && strcmp(note, "keep me") == 0);
	json_decref(b);

	/* The first pass and the echoes of its writes are handled; the
	 * namespaces not selected got nothing. */
	WAIT_COUNTED(stats().creates >= 1 && stats().updates >= 1);
	WAIT_IDLE(30000);
	sg_rootdist_stats s0 = stats();
	SG_CHECK(s0.creates == 1 && s0.updates == 1 && s0.errors == 0 && s0.namespaces == 2);
	SG_CHECK(cm_absent("rd-c"));
	SG_CHECK(cm_absent("default")); /* not selected */

	ns_label("rd-c", "istio-injection", "enabled"); /* selected later */
	WAIT_OK("rd-c", root_a, 30000);
	WAIT_COUNTED(stats().creates >= 2);
	WAIT_IDLE(30000);
	sg_rootdist_stats s = stats();
	printf("creates %llu updates %llu unchanged %llu skipped %llu rereads %llu errors %llu namespaces %llu\n",
	       (unsigned long long)s.creates, (unsigned long long)s.updates, (unsigned long long)s.unchanged,
	       (unsigned long long)s.skipped, (unsigned long long)s.rereads, (unsigned long long)s.errors,
	       (unsigned long long)s.namespaces);
	SG_CHECK(s.creates == 2 && s.updates == 1 && s.errors == 0);
	SG_CHECK(s.namespaces == 3);
}

/* After convergence nothing is written: our own writes came back as
 * events and found nothing to do, and another pass over every namespace
 * writes nothing either (counters and resourceVersions stay put). */
static void t_no_loop(void)
{
	WAIT_IDLE(30000);
	sg_rootdist_stats s0 = stats();
	/* Idle: each write's echo reached the cache and was reconciled after. */
	SG_CHECK(s0.unchanged >= writes(s0));
	char *rv[3] = {cm_rv("rd-a"), cm_rv("rd-b"), cm_rv("rd-c")};
	poke("rd-a");
	poke("rd-b");
	poke("rd-c");
	check_unanswered(s0, 3);
	char *rv1[3] = {cm_rv("rd-a"), cm_rv("rd-b"), cm_rv("rd-c")};
	for (int i = 0; i < 3; i++) {
		SG_CHECK(rv[i][0] && strcmp(rv[i], rv1[i]) == 0);
		free(rv[i]);
		free(rv1[i]);
	}
}

static void t_repair(void)
{
	sg_rootdist_stats s0 = stats();
	CM_DELETE("rd-a");
	WAIT_OK("rd-a", root_a, 20000);
	WAIT_COUNTED(stats().creates >= s0.creates + 1);
	WAIT_IDLE(20000);
	SG_CHECK(stats().creates == s0.creates + 1);

	CM_PATCH("rd-a", json_pack("{s:{s:s}}", "data", KEY, "tampered"));
	WAIT_OK("rd-a", root_a, 20000);
	CM_PATCH("rd-a", json_pack("{s:{s:s}}", "data", "extra", "1"));
	WAIT_OK("rd-a", root_a, 20000);
	CM_PATCH("rd-a", json_pack("{s:{s:{s:n}}}", "metadata", "labels", SG_ROOTDIST_LABEL));
	WAIT_OK("rd-a", root_a, 20000);
	CM_PATCH("rd-a", json_pack("{s:{s:s}}", "binaryData", "blob", "AAEC"));
	WAIT_OK("rd-a", root_a, 20000);
	WAIT_COUNTED(stats().updates >= s0.updates + 4); /* the four repairs: s1 below counts them */
	WAIT_IDLE(20000);

	/* A user's own label and annotation on a correct ConfigMap: kept, and
	 * their write is not answered by one of ours. */
	sg_rootdist_stats s1 = stats();
	CM_PATCH("rd-a", json_pack("{s:{s:{s:s}, s:{s:s}}}", "metadata", "labels", "owner", "me", "annotations", "why",
	                           "because"));
	char *rv = cm_rv("rd-a");
	check_unanswered(s1, 1);
	char *rv2 = cm_rv("rd-a");
	SG_CHECK(strcmp(rv, rv2) == 0);
	json_t *cm = cm_get("rd-a");
	SG_CHECK(cm_ok(cm, root_a) && label(cm, "owner") && strcmp(label(cm, "owner"), "me") == 0);
	json_decref(cm);
	free(rv);
	free(rv2);

	/* An immutable ConfigMap with the wrong data can only be replaced. */
	CM_PATCH("rd-a", json_pack("{s:b, s:{s:s}}", "immutable", 1, "data", KEY, "frozen"));
	WAIT_OK("rd-a", root_a, 20000);
	WAIT_IDLE(20000);
	sg_rootdist_stats s2 = stats();
	printf("repairs: creates %llu updates %llu rereads %llu errors %llu\n", (unsigned long long)s2.creates,
	       (unsigned long long)s2.updates, (unsigned long long)s2.rereads, (unsigned long long)s2.errors);
	SG_CHECK(s2.errors == 0);
}

static char *concat(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *s = malloc(la + lb + 1);
	if (!s)
		exit(1);
	memcpy(s, a, la);
	memcpy(s + la, b, lb + 1);
	return s;
}

/* A rotation through istio-ca-root-cert: old and new root together, then
 * the new one alone, in every selected namespace. */
static void t_set_root(void)
{
	sg_rootdist_stats s0 = stats();
	char *both = concat(root_a, root_b);
	SG_CHECK_OK(sg_rootdist_set_root(rd, both, strlen(both)));
	WAIT_OK("rd-a", both, 20000);
	WAIT_OK("rd-b", both, 20000);
	WAIT_OK("rd-c", both, 20000);
	free(both);
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	WAIT_OK("rd-a", root_b, 20000);
	WAIT_OK("rd-b", root_b, 20000);
	WAIT_OK("rd-c", root_b, 20000);
	WAIT_COUNTED(stats().updates >= s0.updates + 6);
	WAIT_IDLE(20000);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(s1.updates == s0.updates + 6 && s1.creates == s0.creates);
	/* The same bundle again changes nothing: no pass over the namespaces,
	 * so a poke of one, queued after it, is the only reconcile. */
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	poke("rd-a");
	check_unanswered(s1, 1);
}

/* A namespace that stops matching keeps its ConfigMap, which is no longer
 * updated (istio-csr does the same). */
static void t_unselected(void)
{
	sg_rootdist_stats s0 = stats();
	ns_label("rd-c", "istio-injection", NULL);
	/* The namespace informer lets it go (DELETED), and its reconcile
	 * skips it. */
	SG_WAIT_FOR(20000, stats().namespaces == 2 && stats().skipped > s0.skipped);
	WAIT_IDLE(20000);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(s1.skipped == s0.skipped + 1 && writes(s1) == writes(s0));
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_a, strlen(root_a)));
	WAIT_OK("rd-a", root_a, 20000);
	WAIT_OK("rd-b", root_a, 20000);
	/* The pass is over: two updates, and rd-c was not among them. */
	WAIT_COUNTED(stats().updates >= s1.updates + 2);
	WAIT_IDLE(20000);
	sg_rootdist_stats s2 = stats();
	SG_CHECK(s2.updates == s1.updates + 2 && s2.creates == s1.creates);
	json_t *cm = cm_get("rd-c");
	SG_CHECK(cm_ok(cm, root_b));
	json_decref(cm);
	SG_CHECK(s2.namespaces == 2);
}

static void t_terminating(void)
{
	sg_kube_ref ns = {.version = "v1", .resource = "namespaces", .name = "rd-b"};
	sg_rootdist_stats before = stats();
	SG_CHECK_OK(sg_kube_delete(k, &ns, NULL));
	/* Its event (deletionTimestamp set) is handled: skipped. */
	SG_WAIT_FOR(20000, stats().skipped > before.skipped);
	WAIT_IDLE(20000);
	sg_rootdist_stats s0 = stats();
	SG_CHECK(writes(s0) == writes(before) && s0.errors == before.errors);
	CM_DELETE("rd-b"); /* deletes are still allowed in a Terminating namespace */
	/* A root change reaches every selected namespace, the Terminating one
	 * included, which is skipped. */
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	WAIT_OK("rd-a", root_b, 20000);
	WAIT_COUNTED(stats().updates >= s0.updates + 1 && stats().skipped >= s0.skipped + 1);
	WAIT_IDLE(20000);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(cm_absent("rd-b"));
	SG_CHECK(s1.errors == s0.errors);
	SG_CHECK(s1.skipped >= s0.skipped + 1); /* the delete event and the root change (may coalesce) */
	SG_CHECK(s1.creates == s0.creates && s1.updates == s0.updates + 1);
}

static void t_stop(void)
{
	sg_ctrl_stop(sg_rootdist_controller(rd));
	sg_rootdist_stats s0 = stats();
	SG_CHECK(s0.namespaces == 0 && s0.queued == 0);
	sg_ctrl_stats c0 = ctrl_stats();
	CM_PATCH("rd-a", json_pack("{s:{s:s}}", "data", KEY, "edited while stopped"));
	CM_DELETE("rd-c");
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_a, strlen(root_a))); /* stored, not acted on */
	ns_label("rd-c", "istio-injection", "enabled");
	/* Nothing can see these: stopped, the distributor has no informers,
	 * and its queue refuses keys (the root change's pass included). */
	sg_ctrl *ctrl = sg_rootdist_controller(rd);
	SG_CHECK(!sg_ctrl_running(ctrl) && !sg_ctrl_informer(ctrl, NS_WATCH) && !sg_ctrl_informer(ctrl, CM_WATCH));
	sg_ctrl_stats c1 = ctrl_stats();
	SG_CHECK(c1.queued == 0 && c1.reconciles == c0.reconciles && c1.errors == c0.errors);
	json_t *cm = cm_get("rd-a");
	const char *v = json_string_value(json_object_get(json_object_get(cm, "data"), KEY));
	SG_CHECK(v && strcmp(v, "edited while stopped") == 0);
	json_decref(cm);
	SG_CHECK(cm_absent("rd-c"));
	sg_rootdist_stats s1 = stats();
	SG_CHECK(writes(s1) == writes(s0) && s1.unchanged == s0.unchanged && s1.queued == 0);

	/* Leading again repairs both, with the root set meanwhile, in the
	 * first pass of the new run. */
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	WAIT_OK("rd-a", root_a, 20000);
	WAIT_OK("rd-c", root_a, 20000);
	WAIT_COUNTED(stats().updates >= s0.updates + 1 && stats().creates >= s0.creates + 1);
	WAIT_IDLE(20000);
	sg_rootdist_stats s2 = stats();
	SG_CHECK(s2.updates == s0.updates + 1 && s2.creates == s0.creates + 1 && s2.errors == s0.errors);
	/* Quick lose/lead/lose/lead cycles. */
	for (int i = 0; i < 3; i++) {
		sg_ctrl_stop(sg_rootdist_controller(rd));
		SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	}
	CM_DELETE("rd-a");
	WAIT_OK("rd-a", root_a, 20000);
	WAIT_IDLE(20000);
	SG_CHECK(stats().errors == 0);
}

static void t_every_namespace(void)
{
	sg_rootdist_free(rd);
	rd = make(NULL, root_a);
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	static const char *const all[] = {"default", "kube-system", "kube-public", "kube-node-lease", "rd-a", "rd-c"};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		WAIT_OK(all[i], root_a, 30000);
	ns_create("rd-d", false);
	WAIT_OK("rd-d", root_a, 20000);
	/* Every namespace was handled, the Terminating rd-b too (skipped). */
	WAIT_COUNTED(stats().skipped >= 1);
	WAIT_IDLE(30000);
	SG_CHECK(cm_absent("rd-b"));
	sg_rootdist_stats s = stats();
	SG_CHECK(s.errors == 0 && s.namespaces >= 7 && s.skipped >= 1);
}

static void *restart_apiserver(void *arg)
{
	*(bool *)arg = kube_env_restart_apiserver();
	return NULL;
}

static bool apiserver_away(void)
{
	sg_kube_ref ns = {.version = "v1", .resource = "namespaces", .name = "default"};
	json_t *o = NULL;
	bool away = sg_kube_get(k, &ns, &o) != SG_OK;
	json_decref(o);
	return away;
}

static void t_apiserver_restart(void)
{
	if (!kube_env.dir[0]) {
		printf("skipped: a shared API server cannot be restarted\n");
		return;
	}
	bool restarted = false;
	pthread_t th;
	sg_rootdist_stats before = stats();
	uint64_t t0 = sg_now_ns();
	pthread_create(&th, NULL, restart_apiserver, &restarted);
	/* Once the server is really away: a root change, whose writes fail
	 * and back off until it is back. */
	SG_WAIT_FOR(10000, apiserver_away());
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	pthread_join(th, NULL);
	SG_CHECK(restarted);
	printf("apiserver restarted in %.1f s\n", (double)(sg_now_ns() - t0) / 1e9);
	CM_PATCH("default", json_pack("{s:{s:s}}", "data", KEY, "edited after the restart"));
	static const char *const all[] = {"default", "kube-system", "kube-public", "kube-node-lease",
	                                  "rd-a",    "rd-c",        "rd-d"};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		WAIT_OK(all[i], root_b, 90000);
	printf("converged %.1f s after the restart began\n", (double)(sg_now_ns() - t0) / 1e9);
	/* Converged for good: idle (retries included), and a pass for one more
	 * event writes nothing. The root change's seven updates are counted
	 * (the edit of "default" may add an eighth). */
	WAIT_COUNTED(stats().updates >= before.updates + 7);
	WAIT_IDLE(60000);
	sg_rootdist_stats s0 = stats();
	/* The poke comes through the Namespace watch, which may still be
	 * backing off (up to 30 s) after the restart: no namespace changed
	 * while the server was away, so idle() cannot tell it is down. */
	poke("default");
	check_unanswered_within(s0, 1, 90000);
	sg_rootdist_stats s1 = stats();
	printf("after the restart: errors %llu (failed writes while the server was away)\n",
	       (unsigned long long)s1.errors);
	SG_CHECK(s1.errors > 0);
}

/* Every ConfigMap named PUB_NAME in the cluster: exactly ours in PUB_NS
 * (when want_ours) and the one a user made in rp-other, still at
 * resourceVersion other_rv. */
static bool pub_only_where_asked(bool want_ours, const char *other_rv)
{
	sg_kube_ref coll = {.version = "v1", .resource = "configmaps"};
	sg_kube_list_opts lo = {.field_selector = "metadata.name=" PUB_NAME};
	json_t *list = NULL;
	if (sg_kube_list_all(k, &coll, &lo, &list) != SG_OK) {
		fprintf(stderr, "LIST configmaps: %s\n", sg_error_last()->msg);
		return false;
	}
	json_t *items = json_object_get(list, "items");
	bool ok = json_array_size(items) == (want_ours ? 2u : 1u);
	size_t i;
	json_t *item;
	json_array_foreach(items, i, item)
	{
		const char *ns = sg_kube_meta_str(item, "namespace"), *rv = sg_kube_meta_str(item, "resourceVersion");
		if (ns && strcmp(ns, PUB_NS) == 0)
			continue;
		if (!ns || strcmp(ns, "rp-other") != 0 || !rv || strcmp(rv, other_rv) != 0) {
			fprintf(stderr, "unexpected %s/%s at %s\n", ns ? ns : "-", PUB_NAME, rv ? rv : "-");
			ok = false;
		}
	}
	json_decref(list);
	return ok;
}

/* signetd's publication for trust bundles: one ConfigMap in one namespace,
 * which exists only after the instance started. */
static void t_publish(void)
{
	sg_rootdist_free(rd);
	rd = NULL;
	ns_create("rp-other", false);
	/* A user's ConfigMap of the same name in another namespace. */
	sg_kube_ref coll = {.version = "v1", .resource = "configmaps", .ns = "rp-other"};
	json_t *cm = kube_env_configmap("rp-other", PUB_NAME, SG_ROOTDIST_ROOTS_KEY, "not ours");
	json_t *made = NULL;
	SG_CHECK_OK(sg_kube_create(k, &coll, cm, &made));
	json_decref(cm);
	const char *made_rv = sg_kube_meta_str(made, "resourceVersion");
	char *other_rv = strdup(made_rv ? made_rv : "-");
	json_decref(made);

	rd = make_pub(root_a);
	SG_CHECK(strcmp(sg_ctrl_name(sg_rootdist_controller(rd)), SG_ROOTDIST_ROOTS_CONTROLLER) == 0);
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	/* No trust namespace yet: nothing known, nothing written. */
	WAIT_IDLE(30000);
	sg_rootdist_stats s0 = stats();
	SG_CHECK(s0.namespaces == 0 && writes(s0) == 0 && s0.errors == 0);
	SG_CHECK(pub_only_where_asked(false, other_rv));

	ns_create(PUB_NS, false); /* created later */
	WAIT_OK(PUB_NS, root_a, 30000);
	ns_create("rp-late", true); /* another namespace: not ours */
	WAIT_COUNTED(stats().creates >= 1);
	WAIT_IDLE(30000);
	sg_rootdist_stats s1 = stats();
	SG_CHECK(s1.creates == 1 && s1.updates == 0 && s1.errors == 0 && s1.namespaces == 1);
	json_t *pub = cm_get(PUB_NS);
	const char *l = label(pub, SG_ROOTDIST_ROOTS_LABEL);
	SG_CHECK(l && strcmp(l, "true") == 0);
	SG_CHECK(label(pub, SG_ROOTDIST_LABEL) == NULL); /* not Istio's */
	SG_CHECK(json_object_get(json_object_get(pub, "data"), "ca.crt") != NULL);
	json_decref(pub);
	SG_CHECK(pub_only_where_asked(true, other_rv));
	/* The watches see the trust namespace only: the user's ConfigMap in
	 * rp-other never reached the cache. */
	sg_ctrl *ctrl = sg_rootdist_controller(rd);
	SG_CHECK(sg_kube_informer_size(sg_ctrl_informer(ctrl, NS_WATCH)) == 1 &&
	         sg_kube_informer_size(sg_ctrl_informer(ctrl, CM_WATCH)) == 1);

	/* A rotation: the bundle holds both roots, then only the new one. */
	char *both = concat(root_a, root_b);
	SG_CHECK_OK(sg_rootdist_set_root(rd, both, strlen(both)));
	WAIT_OK(PUB_NS, both, 20000);
	WAIT_COUNTED(stats().updates >= s1.updates + 1);
	WAIT_IDLE(20000);
	SG_CHECK(stats().updates == s1.updates + 1);
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	WAIT_OK(PUB_NS, root_b, 20000);
	WAIT_COUNTED(stats().updates >= s1.updates + 2);
	WAIT_IDLE(20000);
	sg_rootdist_stats s2 = stats();
	SG_CHECK(s2.updates == s1.updates + 2 && s2.creates == s1.creates);

	/* Deleted: it comes back; edited: repaired. */
	CM_DELETE(PUB_NS);
	WAIT_OK(PUB_NS, root_b, 20000);
	CM_PATCH(PUB_NS, json_pack("{s:{s:{s:n}}, s:{s:s}}", "metadata", "labels", SG_ROOTDIST_ROOTS_LABEL, "data",
	                           SG_ROOTDIST_ROOTS_KEY, "tampered"));
	WAIT_OK(PUB_NS, root_b, 20000);
	WAIT_COUNTED(stats().creates >= s2.creates + 1 && stats().updates >= s2.updates + 1);
	WAIT_IDLE(20000);
	sg_rootdist_stats s3 = stats();
	SG_CHECK(s3.creates == s2.creates + 1 && s3.updates == s2.updates + 1 && s3.errors == 0);
	SG_CHECK(pub_only_where_asked(true, other_rv));
	printf("publication: creates %llu updates %llu unchanged %llu errors %llu\n", (unsigned long long)s3.creates,
	       (unsigned long long)s3.updates, (unsigned long long)s3.unchanged, (unsigned long long)s3.errors);
	free(both);
	free(other_rv);
}

/* The Secret signetd keeps for istiod's RA when asked
 * (--istiod-ra-root-secret): external-ca-cert in istiod's namespace, the
 * file istiod reads as /etc/external-ca-cert/root-cert.pem. */
#define RA_NS "rp-istio"
static void t_ra_secret(void)
{
	sg_rootdist_free(rd);
	rd = NULL;
	ns_create(RA_NS, false);
	/* A ConfigMap of the same name beside it: never touched. */
	sg_kube_ref cms = {.version = "v1", .resource = "configmaps", .ns = RA_NS};
	json_t *cm = kube_env_configmap(RA_NS, SG_ROOTDIST_RA_SECRET, KEY, "not ours");
	json_t *made = NULL;
	SG_CHECK_OK(sg_kube_create(k, &cms, cm, &made));
	json_decref(cm);
	char *cm_rv0 =
	    strdup(sg_kube_meta_str(made, "resourceVersion") ? sg_kube_meta_str(made, "resourceVersion") : "-");
	json_decref(made);

	selector = NULL;
	only_ns = RA_NS;
	cm_name = SG_ROOTDIST_RA_SECRET;
	cm_key = KEY;
	cm_label = SG_ROOTDIST_ROOTS_LABEL;
	as_secret = true;
	cm_resource = "secrets";
	sg_rootdist_options o = {
	    .kube = k,
	    .ns = RA_NS,
	    .name = SG_ROOTDIST_RA_SECRET,
	    .key = KEY,
	    .label = SG_ROOTDIST_ROOTS_LABEL,
	    .label_value = "true",
	    .controller = SG_ROOTDIST_RA_CONTROLLER,
	    .secret = true,
	};
	SG_CHECK_OK(sg_rootdist_new(&rd, &o, root_a, strlen(root_a)));
	if (!rd)
		exit(1);
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	WAIT_OK(RA_NS, root_a, 30000);
	WAIT_COUNTED(stats().creates >= 1);
	WAIT_IDLE(30000);
	sg_rootdist_stats s0 = stats();
	SG_CHECK(s0.creates == 1 && s0.updates == 0 && s0.errors == 0);

	/* Drift: a wrong value, an extra key, our label gone: repaired, what
	 * users add to the metadata kept. */
	CM_PATCH(RA_NS, json_pack("{s:{s:{s:n, s:s}}, s:{s:s, s:s}}", "metadata", "labels", SG_ROOTDIST_ROOTS_LABEL,
	                          "team", "mesh", "data", KEY, "dGFtcGVyZWQ=", "extra", "eA=="));
	WAIT_OK(RA_NS, root_a, 20000);
	json_t *sec = cm_get(RA_NS);
	const char *team = label(sec, "team");
	SG_CHECK(team && strcmp(team, "mesh") == 0);
	json_decref(sec);
	/* A rotation: both roots, then the new one alone. */
	char *both = concat(root_a, root_b);
	SG_CHECK_OK(sg_rootdist_set_root(rd, both, strlen(both)));
	WAIT_OK(RA_NS, both, 20000);
	SG_CHECK_OK(sg_rootdist_set_root(rd, root_b, strlen(root_b)));
	WAIT_OK(RA_NS, root_b, 20000);
	/* Deleted: back. */
	CM_DELETE(RA_NS);
	WAIT_OK(RA_NS, root_b, 20000);
	/* Made again, immutable and stale, while the writer was stopped (a
	 * leader change): replaced once it runs. */
	sg_ctrl_stop(sg_rootdist_controller(rd));
	CM_DELETE(RA_NS);
	json_t *imm = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:b, s:{s:s}}", "apiVersion", "v1", "kind", "Secret",
	                        "metadata", "name", SG_ROOTDIST_RA_SECRET, "namespace", RA_NS, "type", "Opaque",
	                        "immutable", 1, "data", KEY, "c3RhbGU=");
	SG_CHECK_OK(kube_fx_create(k, KUBE_FX_CORE("secrets", RA_NS, NULL), imm));
	SG_CHECK_OK(sg_ctrl_start(sg_rootdist_controller(rd)));
	WAIT_OK(RA_NS, root_b, 20000);
	WAIT_IDLE(20000);
	sg_rootdist_stats s1 = stats();
	printf("istiod RA roots: creates %llu updates %llu unchanged %llu errors %llu\n",
	       (unsigned long long)s1.creates, (unsigned long long)s1.updates, (unsigned long long)s1.unchanged,
	       (unsigned long long)s1.errors);
	SG_CHECK(s1.updates >= 3 && s1.creates >= 2);
	/* The ConfigMap beside it: as it was. */
	char *rv = kube_fx_rv(k, KUBE_FX_CORE("configmaps", RA_NS, SG_ROOTDIST_RA_SECRET));
	SG_CHECK(rv && strcmp(rv, cm_rv0) == 0);
	free(rv);
	free(cm_rv0);
	free(both);
}

static void t_zz_cleanup(void)
{
	sg_rootdist_free(rd);
	free(root_a);
	free(root_b);
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_options), SG_TEST(t_options_one_namespace), SG_TEST(t_selected),
             SG_TEST(t_no_loop), SG_TEST(t_repair), SG_TEST(t_set_root), SG_TEST(t_unselected), SG_TEST(t_terminating),
             SG_TEST(t_stop), SG_TEST(t_every_namespace), SG_TEST(t_apiserver_restart), SG_TEST(t_publish),
             SG_TEST(t_ra_secret), SG_TEST(t_zz_cleanup))
