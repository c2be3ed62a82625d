/*
 * Tests for ra/sg_workload.h. First without a server: the pod index
 * function against hostile pod JSON. Then against a real kube-apiserver
 * (tests/kube/apiserver.sh; no scheduler or kubelet, so pods are created
 * with spec.nodeName set and stay Pending):
 *
 *   node authorization  a ztunnel-like caller pod on n1 may impersonate a
 *                       service account with a pod on n1, not one whose pods
 *                       run on n2 only or have finished; uid, service-account
 *                       and node mismatches, no pod claim, deletions seen
 *                       through the watch; the grant's hook end to end;
 *   bound tokens        cache hits (synchronous), informer deletes (the
 *                       deleted-uid memory), a re-created service account,
 *                       a marked-for-deletion one past the leeway, objects
 *                       the cache has not seen (a frozen cache, and no cache:
 *                       live GETs on the worker), an unreachable API server,
 *                       a full queue and shutdown; inner authenticators that
 *                       answer synchronously, later, or fail; and real
 *                       TokenRequest tokens verified by the jwt authenticator
 *                       against the API server's key.
 */
#include "sg_authn_impl.h"
#include "sg_clock.h"
#include "sg_grant.h"
#include "sg_jwt.h"
#include "sg_test.h"
#include "sg_workload.h"
#include "test_kube_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <sys/socket.h>

/* ---- the index function, no server ---- */

static int index_of(const char *json, char *key, size_t cap)
{
	json_error_t e;
	json_t *pod = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!pod) {
		fprintf(stderr, "bad test JSON: %s\n", json);
		abort();
	}
	int rc = sg_workload_pod_index(pod, key, cap, NULL);
	json_decref(pod);
	return rc;
}

static void t_index_hostile(void)
{
	char key[512];
	SG_CHECK(index_of("{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":"
	                  "\"n1\"}}",
	                  key, sizeof(key)) == 1);
	SG_CHECK(strcmp(key, "ns/sa/n1") == 0);
	SG_CHECK(index_of("{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":"
	                  "\"n1\"},\"status\":{\"phase\":\"Running\"}}",
	                  key, sizeof(key)) == 1);
	/* A phase of another type is no phase: still indexed. */
	SG_CHECK(index_of("{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":"
	                  "\"n1\"},\"status\":{\"phase\":7}}",
	                  key, sizeof(key)) == 1);

	static const char *const refused[] = {
	    "null",
	    "[]",
	    "\"pod\"",
	    "42",
	    "{}",
	    "{\"metadata\":null,\"spec\":null}",
	    "{\"metadata\":[],\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":7},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":\"x\"}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":[\"sa\"],\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":true}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"a/b\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"n/1\"}}",
	    "{\"metadata\":{\"namespace\":\"n s\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"s\\na\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\\u0000x\",\"nodeName\":\"n1\"}"
	    "}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"s\\u00e9\",\"nodeName\":\"n1\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"n1\"},"
	    "\"status\":{\"phase\":\"Succeeded\"}}",
	    "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"n1\"},"
	    "\"status\":{\"phase\":\"Failed\"}}",
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		strcpy(key, "stale");
		int rc = index_of(refused[i], key, sizeof(key));
		SG_CHECK(rc == 0 && key[0] == 0);
		if (rc != 0)
			fprintf(stderr, "indexed: %s -> %s\n", refused[i], key);
	}

	/* Keys that do not fit are not indexed (never truncated into another
	 * pod's key); one that fits exactly is. */
	const char *pod = "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":"
	                  "\"n1\"}}";
	SG_CHECK(index_of(pod, key, 9) == 1 && strcmp(key, "ns/sa/n1") == 0);
	SG_CHECK(index_of(pod, key, 8) == 0 && key[0] == 0);
	SG_CHECK(index_of(pod, key, 1) == 0 && key[0] == 0);
	SG_CHECK(sg_workload_pod_index(NULL, key, sizeof(key), NULL) == 0);
	json_t *j = json_loads(pod, 0, NULL);
	SG_CHECK(sg_workload_pod_index(j, key, 0, NULL) == 0);
	SG_CHECK(sg_workload_pod_index(j, NULL, 10, NULL) == 0);
	json_decref(j);
	/* Names longer than Kubernetes allows. */
	char big[1200], name[300];
	memset(name, 'a', 299);
	name[299] = 0;
	snprintf(big, sizeof(big),
	         "{\"metadata\":{\"namespace\":\"ns\"},\"spec\":{\"serviceAccountName\":\"sa\",\"nodeName\":\"%s\"}}",
	         name);
	SG_CHECK(index_of(big, key, sizeof(key)) == 0);
	/* 63 + 253 + 253 bytes of legal names exceed the informer's 512. */
	char ns63[64], sa253[254], node253[254];
	memset(ns63, 'n', 63), ns63[63] = 0;
	memset(sa253, 's', 253), sa253[253] = 0;
	memset(node253, 'd', 253), node253[253] = 0;
	snprintf(big, sizeof(big),
	         "{\"metadata\":{\"namespace\":\"%s\"},\"spec\":{\"serviceAccountName\":\"%s\",\"nodeName\":\"%s\"}}",
	         ns63, sa253, node253);
	SG_CHECK(index_of(big, key, sizeof(key)) == 0);
}

/* ---- helpers for the server tests ---- */

static sg_kube *k;
static char ns_sys[64], ns_app[64];

static void json_uid(json_t *obj, char *uid, size_t cap)
{
	const char *u = sg_kube_meta_str(obj, "uid");
	snprintf(uid, cap, "%s", u ? u : "");
}

static void create_ns(const char *name)
{
	SG_CHECK_OK(kube_fx_create(k, KUBE_FX_CORE("namespaces", NULL, NULL), kube_fx_namespace(name, NULL, NULL)));
}

static void create_sa(const char *ns, const char *name, char uid[64])
{
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "v1", "kind", "ServiceAccount", "metadata",
	                         "name", name, "namespace", ns);
	json_t *out = NULL;
	SG_CHECK_OK(kube_fx_create_out(k, KUBE_FX_CORE("serviceaccounts", ns, NULL), body, &out));
	json_uid(out, uid, 64);
	json_decref(out);
}

static void delete_obj(const char *resource, const char *ns, const char *name)
{
	sg_kube_ref ref = KUBE_FX_CORE(resource, ns, name);
	SG_CHECK_OK(kube_fx_delete(k, ref));
	/* Gone from the API (pods: terminationGracePeriodSeconds 0). */
	int rc = SG_OK;
	SG_WAIT_FOR(30000, (rc = sg_kube_get(k, &ref, NULL)) != SG_OK);
	SG_CHECK(rc == SG_ENOTFOUND);
}

/* node NULL: not scheduled. phase NULL: left as the server sets it. */
static void create_pod(const char *ns, const char *name, const char *sa, const char *node, const char *phase,
                       char uid[64])
{
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:i, s:[{s:s, s:s}]}}", "apiVersion", "v1", "kind",
	                         "Pod", "metadata", "name", name, "namespace", ns, "spec", "serviceAccountName", sa,
	                         "terminationGracePeriodSeconds", 0, "containers", "name", "c", "image", "busybox");
	if (node)
		json_object_set_new(json_object_get(body, "spec"), "nodeName", json_string(node));
	json_t *out = NULL;
	SG_CHECK_OK(kube_fx_create_out(k, KUBE_FX_CORE("pods", ns, NULL), body, &out));
	json_uid(out, uid, 64);
	json_decref(out);
	if (phase)
		SG_CHECK_OK(kube_fx_patch(k, kube_fx_named(KUBE_FX_CORE("pods", ns, NULL), name, "status"),
		                          json_pack("{s:{s:s}}", "status", "phase", phase)));
}

static sg_caller mk_caller(const char *ns, const char *sa, const char *sa_uid, const char *pod, const char *pod_uid)
{
	sg_caller c;
	memset(&c, 0, sizeof(c));
	snprintf(c.identity, sizeof(c.identity), "spiffe://cluster.local/ns/%s/sa/%s", ns, sa);
	snprintf(c.ns, sizeof(c.ns), "%s", ns);
	snprintf(c.sa, sizeof(c.sa), "%s", sa);
	snprintf(c.sa_uid, sizeof(c.sa_uid), "%s", sa_uid ? sa_uid : "");
	snprintf(c.pod_name, sizeof(c.pod_name), "%s", pod ? pod : "");
	snprintf(c.pod_uid, sizeof(c.pod_uid), "%s", pod_uid ? pod_uid : "");
	c.method = "jwt";
	return c;
}

/* ---- an inner authenticator the tests steer ---- */

enum fake_mode { FAKE_SYNC, FAKE_LATER, FAKE_REFUSE, FAKE_REFUSE_DONE, FAKE_LATER_REFUSE };

struct fake {
	enum fake_mode mode;
	sg_caller caller;
	int frees;
	pthread_t th;
	bool have_th;
};

struct later_call {
	sg_authn_done_fn done;
	void *arg;
	sg_caller caller;
	bool refuse;
};

static void *later_thread(void *arg)
{
	struct later_call *l = arg;
	/* An inner that answers a little later, from its own thread. Nothing
	 * rests on the 20 ms: "later" is told by the thread done runs on (see
	 * run_at), so any delay, or none, gives the same outcome. */
	sg_sleep_ms(20);
	if (l->refuse) {
		sg_error e = {.code = SG_EAUTH, .msg = "fake refuses later"};
		l->done(SG_EAUTH, NULL, &e, l->arg);
	} else {
		sg_caller c = l->caller; /* valid during the call only */
		l->done(SG_OK, &c, NULL, l->arg);
		memset(&c, 0xa5, sizeof(c));
	}
	free(l);
	return NULL;
}

static int fake_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct fake *f = self;
	(void)req;
	switch (f->mode) {
	case FAKE_SYNC: {
		sg_caller c = f->caller;
		done(SG_OK, &c, NULL, arg);
		memset(&c, 0xa5, sizeof(c)); /* a copy kept by reference would show this */
		return SG_OK;
	}
	case FAKE_REFUSE:
		return sg_error_set(SG_EAUTH, "fake refuses");
	case FAKE_REFUSE_DONE: {
		sg_error e = {.code = SG_EAUTH, .msg = "fake refuses through done"};
		done(SG_EAUTH, NULL, &e, arg);
		return SG_OK;
	}
	case FAKE_LATER:
	case FAKE_LATER_REFUSE: {
		struct later_call *l = calloc(1, sizeof(*l));
		if (!l)
			abort();
		*l = (struct later_call){done, arg, f->caller, f->mode == FAKE_LATER_REFUSE};
		if (pthread_create(&f->th, NULL, later_thread, l) != 0)
			abort();
		f->have_th = true;
		return SG_OK;
	}
	}
	return sg_error_set(SG_EINTERNAL, "fake: unknown mode");
}

static void fake_free(void *self)
{
	struct fake *f = self;
	f->frees++;
}

static void fake_join(struct fake *f)
{
	if (f->have_th)
		pthread_join(f->th, NULL);
	f->have_th = false;
}

struct result {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
	int rc;
	sg_caller caller;
	sg_error err;
	pthread_t thread;
};

static void result_init(struct result *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
}

static void result_destroy(struct result *r)
{
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
}

static void on_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	struct result *r = arg;
	pthread_mutex_lock(&r->mu);
	r->calls++;
	r->rc = rc;
	if (caller)
		r->caller = *caller;
	if (err)
		r->err = *err;
	r->thread = pthread_self();
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static int calls_of(struct result *r)
{
	pthread_mutex_lock(&r->mu);
	int n = r->calls;
	pthread_mutex_unlock(&r->mu);
	return n;
}

/* Waits up to ms for done; returns the number of calls seen. */
static int wait_done(struct result *r, unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->mu);
	while (r->calls == 0)
		if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0)
			break;
	int n = r->calls;
	pthread_mutex_unlock(&r->mu);
	return n;
}

struct outcome {
	int start_rc; /* what start() returned */
	int rc;       /* the final answer: start's error, or done's rc */
	bool sync;    /* answered before start() returned */
	int calls;
	char msg[SG_ERROR_MSG_MAX];
	sg_caller caller;
	bool other_thread; /* done ran on another thread */
};

/* One request through a; *o tells how it went. */
static void run_at(sg_authenticator *a, const char *bearer, int64_t now, struct outcome *o)
{
	struct result r;
	result_init(&r);
	memset(o, 0, sizeof(*o));
	sg_authn_request req = {bearer, bearer ? strlen(bearer) : 0, NULL, now};
	sg_error_clear();
	o->start_rc = a->start(a->self, &req, on_done, &r);
	if (o->start_rc != SG_OK) {
		o->rc = o->start_rc;
		o->sync = true;
		snprintf(o->msg, sizeof(o->msg), "%s", sg_error_last()->msg);
		o->calls = calls_of(&r);
		result_destroy(&r);
		return;
	}
	wait_done(&r, 20000);
	pthread_mutex_lock(&r.mu);
	/* Only a synchronous answer runs on this thread: workers and inner's
	 * own threads are others. */
	o->sync = r.calls && pthread_equal(r.thread, pthread_self());
	o->calls = r.calls;
	o->rc = r.calls ? r.rc : SG_ETIMEOUT;
	snprintf(o->msg, sizeof(o->msg), "%s", r.rc < 0 ? r.err.msg : "");
	o->caller = r.caller;
	o->other_thread = r.calls && !pthread_equal(r.thread, pthread_self());
	pthread_mutex_unlock(&r.mu);
	result_destroy(&r);
}

static void run(sg_authenticator *a, struct outcome *o)
{
	run_at(a, "token", sg_wall_seconds(), o);
}

/* The final answer only (for SG_WAIT_FOR). */
static int answer(sg_authenticator *a)
{
	struct outcome o;
	run(a, &o);
	return o.rc;
}

#define CHECK_OUTCOME_MSG(o, substr)                                                                                   \
	do {                                                                                                           \
		sg_test_checks++;                                                                                      \
		if (!strstr((o).msg, (substr))) {                                                                      \
			sg_test_failures++;                                                                            \
			fprintf(stderr, "%s:%d: error \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, (o).msg, (substr));  \
		}                                                                                                      \
	} while (0)

static sg_workload *workload(sg_kube *client, bool pods, bool sas, bool start)
{
	sg_workload_options o = {.kube = client, .pods = pods, .service_accounts = sas};
	sg_workload *w = NULL;
	SG_CHECK_OK(sg_workload_new(&w, &o));
	if (w && start) {
		SG_CHECK_OK(sg_workload_start(w));
		SG_CHECK_OK(sg_workload_wait_synced(w, 30000));
	}
	return w;
}

static sg_authenticator bound(struct fake *f, sg_workload *w)
{
	sg_authenticator inner = {"jwt", fake_start, fake_free, f}, a;
	SG_CHECK_OK(sg_authn_bound_new(&a, inner, w));
	return a;
}

/* ---- the cluster ---- */

static sg_workload *w; /* both caches, running */
static char uid_zt[64], uid_app1[64], uid_app2[64], uid_app3[64], uid_app4[64];
static char uid_zt_n1[64], uid_zt_n2[64], uid_zt_nonode[64], uid_app1_a[64], uid_app2_a[64], uid_app3_a[64];

static void t_setup(void)
{
	k = kube_fx_start(SG_LOG_WARN);
	snprintf(ns_sys, sizeof(ns_sys), "wl-sys-%ld", (long)getpid());
	snprintf(ns_app, sizeof(ns_app), "wl-app-%ld", (long)getpid());
	create_ns(ns_sys);
	create_ns(ns_app);
	create_sa(ns_sys, "ztunnel", uid_zt);
	create_sa(ns_app, "app1", uid_app1);
	create_sa(ns_app, "app2", uid_app2);
	create_sa(ns_app, "app3", uid_app3);
	create_sa(ns_app, "app4", uid_app4);
	create_pod(ns_sys, "zt-n1", "ztunnel", "n1", NULL, uid_zt_n1);
	create_pod(ns_sys, "zt-n2", "ztunnel", "n2", NULL, uid_zt_n2);
	create_pod(ns_sys, "zt-nonode", "ztunnel", NULL, NULL, uid_zt_nonode);
	create_pod(ns_app, "app1-a", "app1", "n1", NULL, uid_app1_a);
	create_pod(ns_app, "app2-a", "app2", "n2", NULL, uid_app2_a);
	create_pod(ns_app, "app3-a", "app3", "n1", "Succeeded", uid_app3_a);
	w = workload(k, true, true, true);
	sg_workload_stats s;
	sg_workload_stats_get(w, &s);
	SG_CHECK(s.pods_synced && s.service_accounts_synced && s.pods >= 6 && s.service_accounts >= 5);
}

/* ---- node authorization ---- */

static int imp(const char *pod, const char *pod_uid, const char *sa, const char *tns, const char *tsa)
{
	sg_caller c = mk_caller(ns_sys, sa, uid_zt, pod, pod_uid);
	return sg_workload_authorize_impersonation(w, &c, tns, tsa);
}

static void t_impersonation(void)
{
	SG_CHECK_OK(imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app1"));
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app2"), SG_EAUTH);
	SG_CHECK_MSG("no pod of");
	SG_CHECK_MSG("/app2 runs on node n1");
	SG_CHECK_OK(imp("zt-n2", uid_zt_n2, "ztunnel", ns_app, "app2"));
	SG_CHECK_RC(imp("zt-n2", uid_zt_n2, "ztunnel", ns_app, "app1"), SG_EAUTH);
	/* app3's only pod on n1 has Succeeded; app4 has no pod at all. */
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app3"), SG_EAUTH);
	SG_CHECK_MSG("runs on node n1");
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app4"), SG_EAUTH);
	/* The same service account name in another namespace is another one. */
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "ztunnel", ns_sys, "app1"), SG_EAUTH);

	SG_CHECK_RC(imp("zt-n1", "00000000-0000-0000-0000-000000000000", "ztunnel", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("caller pod uid mismatch");
	SG_CHECK_RC(imp("zt-n1", "", "ztunnel", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("caller pod uid mismatch");
	SG_CHECK_RC(imp(NULL, NULL, "ztunnel", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("caller has no pod claim");
	SG_CHECK_RC(imp("zt-missing", uid_zt_n1, "ztunnel", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("not found");
	/* A token of another service account naming ztunnel's pod. */
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "app1", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("caller pod runs as another service account");
	SG_CHECK_RC(imp("zt-nonode", uid_zt_nonode, "ztunnel", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("caller pod");
	SG_CHECK_MSG("is not scheduled on a node");

	/* Malformed targets never reach the index. */
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app1/n1"), SG_EINVAL);
	SG_CHECK_RC(imp("zt-n1", uid_zt_n1, "ztunnel", "", "app1"), SG_EINVAL);
	sg_caller c = mk_caller(ns_sys, "ztunnel", uid_zt, "zt-n1", uid_zt_n1);
	SG_CHECK_RC(sg_workload_authorize_impersonation(w, &c, NULL, "app1"), SG_EINVAL);
	SG_CHECK_RC(sg_workload_authorize_impersonation(w, NULL, ns_app, "app1"), SG_EINVAL);

	/* No pod cache: a wiring error. A pod cache not synced yet: retry. */
	sg_workload *sa_only = workload(k, false, true, false);
	SG_CHECK_RC(sg_workload_authorize_impersonation(sa_only, &c, ns_app, "app1"), SG_EINTERNAL);
	sg_workload_free(sa_only);
	sg_workload *cold = workload(k, true, false, false);
	SG_CHECK_RC(sg_workload_authorize_impersonation(cold, &c, ns_app, "app1"), SG_EBUSY);
	SG_CHECK_MSG("not synced");
	sg_workload_free(cold);

	sg_workload_stats s;
	sg_workload_stats_get(w, &s);
	SG_CHECK(s.impersonation_allowed >= 2 && s.impersonation_refused >= 10);
}

static void t_impersonation_follows_changes(void)
{
	/* A new app2 pod on n1: allowed once the watch delivers it. */
	char uid[64], zt_uid[64];
	create_pod(ns_app, "app2-b", "app2", "n1", NULL, uid);
	SG_WAIT_FOR(15000, imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app2") == SG_OK);
	/* It finishes: out of the index at once, though it still exists. */
	SG_CHECK_OK(kube_fx_patch(k, kube_fx_named(KUBE_FX_CORE("pods", ns_app, NULL), "app2-b", "status"),
	                          json_pack("{s:{s:s}}", "status", "phase", "Failed")));
	SG_WAIT_FOR(15000, imp("zt-n1", uid_zt_n1, "ztunnel", ns_app, "app2") == SG_EAUTH);
	delete_obj("pods", ns_app, "app2-b");

	/* A second node agent pod: allowed, then deleted: "not found". */
	create_pod(ns_sys, "zt-tmp", "ztunnel", "n1", NULL, zt_uid);
	SG_WAIT_FOR(15000, imp("zt-tmp", zt_uid, "ztunnel", ns_app, "app1") == SG_OK);
	delete_obj("pods", ns_sys, "zt-tmp");
	SG_WAIT_FOR(15000, imp("zt-tmp", zt_uid, "ztunnel", ns_app, "app1") == SG_EAUTH);
	SG_CHECK_MSG("not found");
	/* Re-created under the same name: the old token's uid no longer fits. */
	create_pod(ns_sys, "zt-tmp", "ztunnel", "n1", NULL, uid);
	SG_WAIT_FOR(15000, imp("zt-tmp", uid, "ztunnel", ns_app, "app1") == SG_OK);
	SG_CHECK_RC(imp("zt-tmp", zt_uid, "ztunnel", ns_app, "app1"), SG_EAUTH);
	SG_CHECK_MSG("caller pod uid mismatch");
	delete_obj("pods", ns_sys, "zt-tmp");
}

static int hook(void *arg, const sg_caller *caller, const char *target_ns, const char *target_sa)
{
	return sg_workload_authorize_impersonation(arg, caller, target_ns, target_sa);
}

static void t_grant_hook(void)
{
	char trusted[128];
	snprintf(trusted, sizeof(trusted), "%s/ztunnel", ns_sys);
	sg_grant_options po = {.mode = SG_GRANT_ISTIO_CSR,
	                       .max_ttl = 3600,
	                       .trust_domain = "cluster.local",
	                       .trusted_node_accounts = trusted,
	                       .authorize_impersonation = hook,
	                       .authorize_arg = w};
	sg_grant *p = NULL;
	SG_CHECK_OK(sg_grant_new(&p, &po));
	sg_caller c = mk_caller(ns_sys, "ztunnel", uid_zt, "zt-n1", uid_zt_n1);
	char id[256];
	snprintf(id, sizeof(id), "spiffe://cluster.local/ns/%s/sa/app1", ns_app);
	sg_grant_input in = {.caller = &c, .impersonated_identity = id};
	sg_grant_decision d;
	SG_CHECK_OK(sg_grant_decide(p, &in, &d));
	SG_CHECK(d.impersonated && strcmp(d.identity, id) == 0);
	snprintf(id, sizeof(id), "spiffe://cluster.local/ns/%s/sa/app2", ns_app);
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EAUTH);
	SG_CHECK_MSG("runs on node n1");
	/* Not of the ns/sa form: refused before the index is asked. */
	snprintf(id, sizeof(id), "spiffe://cluster.local/ns/%s/sa/app1/extra", ns_app);
	SG_CHECK_RC(sg_grant_decide(p, &in, &d), SG_EDENIED);
	sg_grant_free(p);
}

/* ---- bound tokens: the caches ---- */

static void t_bound_cached(void)
{
	struct fake f = {.mode = FAKE_SYNC};
	sg_authenticator a = bound(&f, w);
	SG_CHECK(strcmp(a.name, "jwt") == 0);
	struct outcome o;
	sg_workload_stats s0, s1;
	sg_workload_stats_get(w, &s0);

	/* Everything cached with the token's uids: answered during start(). */
	f.caller = mk_caller(ns_app, "app1", uid_app1, "app1-a", uid_app1_a);
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_OK && o.rc == SG_OK && o.sync && o.calls == 1);
	SG_CHECK(strcmp(o.caller.pod_uid, uid_app1_a) == 0 && strcmp(o.caller.identity, f.caller.identity) == 0);
	SG_CHECK(strcmp(o.caller.method, "jwt") == 0);
	/* No uid in the token: the service account's existence is enough. */
	f.caller = mk_caller(ns_app, "app2", NULL, NULL, NULL);
	run(&a, &o);
	SG_CHECK(o.rc == SG_OK && o.sync);
	/* mTLS callers name no Kubernetes object. */
	memset(&f.caller, 0, sizeof(f.caller));
	snprintf(f.caller.identity, sizeof(f.caller.identity), "spiffe://cluster.local/ns/x/sa/y");
	f.caller.method = "mtls";
	run(&a, &o);
	SG_CHECK(o.rc == SG_OK && o.sync && strcmp(o.caller.identity, "spiffe://cluster.local/ns/x/sa/y") == 0);
	sg_workload_stats_get(w, &s1);
	SG_CHECK(s1.bound_cached == s0.bound_cached + 3 && s1.bound_live == s0.bound_live);

	/* A pod claim without a uid: the API server compares it, so do we. */
	f.caller = mk_caller(ns_app, "app1", uid_app1, "app1-a", NULL);
	run(&a, &o);
	SG_CHECK(o.rc == SG_EAUTH && o.sync && o.calls == 0);
	CHECK_OUTCOME_MSG(o, "without its uid");
	f.caller = mk_caller(ns_app, "app1", uid_app1, "app1/a", "x");
	run(&a, &o);
	SG_CHECK(o.rc == SG_EAUTH && o.calls == 0);

	/* Another uid than the cached one: a worker asks the API server, which
	 * says the same; the uid is then remembered as deleted. */
	f.caller = mk_caller(ns_app, "app1", "11111111-2222-3333-4444-555555555555", NULL, NULL);
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_OK && !o.sync && o.rc == SG_EAUTH && o.calls == 1 && o.other_thread);
	CHECK_OUTCOME_MSG(o, "uid does not match the token");
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_EAUTH && o.sync && o.calls == 0);
	CHECK_OUTCOME_MSG(o, "no longer exists");
	f.caller = mk_caller(ns_app, "app1", uid_app1, "app1-a", "66666666-2222-3333-4444-555555555555");
	run(&a, &o);
	SG_CHECK(!o.sync && o.rc == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "pod ");
	CHECK_OUTCOME_MSG(o, "/app1-a uid does not match the token");
	/* Names the cluster never had: 404 from the API server. */
	f.caller = mk_caller(ns_app, "nobody", "77777777-2222-3333-4444-555555555555", NULL, NULL);
	run(&a, &o);
	SG_CHECK(!o.sync && o.rc == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "/nobody no longer exists");
	f.caller = mk_caller(ns_app, "app1", uid_app1, "ghost", "88888888-2222-3333-4444-555555555555");
	run(&a, &o);
	SG_CHECK(!o.sync && o.rc == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "/ghost bound to the token no longer exists");
	sg_workload_stats_get(w, &s1);
	SG_CHECK(s1.bound_live >= s0.bound_live + 4 && s1.dead_uid_hits >= s0.dead_uid_hits + 1);
	SG_CHECK(s1.bound_refused >= s0.bound_refused + 7);

	a.free(a.self);
	SG_CHECK(f.frees == 1);
}

static void t_bound_inner(void)
{
	struct fake f = {.mode = FAKE_REFUSE};
	sg_authenticator a = bound(&f, w);
	struct outcome o;
	/* Inner's refusals pass through unchanged, synchronous or not. */
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_EAUTH && o.calls == 0);
	CHECK_OUTCOME_MSG(o, "fake refuses");
	f.mode = FAKE_REFUSE_DONE;
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_EAUTH && o.calls == 0);
	CHECK_OUTCOME_MSG(o, "fake refuses through done");
	f.mode = FAKE_LATER_REFUSE;
	run(&a, &o);
	fake_join(&f);
	SG_CHECK(o.start_rc == SG_OK && o.rc == SG_EAUTH && o.calls == 1 && o.other_thread);
	CHECK_OUTCOME_MSG(o, "fake refuses later");
	/* Inner answering later, from its own thread: a cache hit completes
	 * there, a miss goes to a worker. */
	f.mode = FAKE_LATER;
	f.caller = mk_caller(ns_app, "app1", uid_app1, "app1-a", uid_app1_a);
	run(&a, &o);
	fake_join(&f);
	SG_CHECK(o.start_rc == SG_OK && !o.sync && o.rc == SG_OK && o.calls == 1);
	SG_CHECK(strcmp(o.caller.pod_name, "app1-a") == 0 && strcmp(o.caller.sa_uid, uid_app1) == 0);
	f.caller = mk_caller(ns_app, "app2", "99999999-2222-3333-4444-555555555555", NULL, NULL);
	run(&a, &o);
	fake_join(&f);
	SG_CHECK(o.rc == SG_EAUTH && o.calls == 1);
	CHECK_OUTCOME_MSG(o, "uid does not match the token");
	a.free(a.self);
	SG_CHECK(f.frees == 1);

	/* Construction errors: inner is freed all the same. */
	struct fake g = {.mode = FAKE_SYNC};
	sg_authenticator inner = {"jwt", fake_start, fake_free, &g};
	SG_CHECK_RC(sg_authn_bound_new(&a, inner, NULL), SG_EINVAL);
	SG_CHECK(g.frees == 1);
	sg_workload_options bad = {.kube = k, .lookup_threads = 17};
	sg_workload *x = NULL;
	SG_CHECK_RC(sg_workload_new(&x, &bad), SG_EINVAL);
	bad = (sg_workload_options){.kube = NULL};
	SG_CHECK_RC(sg_workload_new(&x, &bad), SG_EINVAL);
}

static void t_bound_deleted(void)
{
	struct fake f = {.mode = FAKE_SYNC};
	sg_authenticator a = bound(&f, w);
	struct outcome o;
	char sa_uid[64], pod_uid[64];
	create_sa(ns_app, "gone", sa_uid);
	create_pod(ns_app, "gone-p", "gone", "n1", NULL, pod_uid);
	f.caller = mk_caller(ns_app, "gone", sa_uid, "gone-p", pod_uid);
	SG_WAIT_FOR(15000, answer(&a) == SG_OK);
	/* Cached by now: synchronous. */
	SG_WAIT_FOR(15000, (run(&a, &o), o.sync ? o.rc : SG_EBUSY) == SG_OK);

	/* The pod goes: once the informer has seen it, refused at once from
	 * the deleted-uid memory. */
	delete_obj("pods", ns_app, "gone-p");
	SG_WAIT_FOR(15000, (run(&a, &o), o.sync ? o.rc : SG_EBUSY) == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "/gone-p bound to the token no longer exists");
	/* A token of the service account alone still works... */
	f.caller = mk_caller(ns_app, "gone", sa_uid, NULL, NULL);
	SG_CHECK(answer(&a) == SG_OK);
	/* ... until it goes too. */
	delete_obj("serviceaccounts", ns_app, "gone");
	SG_WAIT_FOR(15000, answer(&a) == SG_EAUTH);
	run(&a, &o);
	CHECK_OUTCOME_MSG(o, "service account ");
	CHECK_OUTCOME_MSG(o, "/gone no longer exists");

	/* Re-created under the same name: the old tokens stay refused, new
	 * ones (new uid) are accepted. */
	char uid1[64], uid2[64];
	create_sa(ns_app, "re", uid1);
	f.caller = mk_caller(ns_app, "re", uid1, NULL, NULL);
	SG_WAIT_FOR(15000, answer(&a) == SG_OK);
	delete_obj("serviceaccounts", ns_app, "re");
	create_sa(ns_app, "re", uid2);
	SG_CHECK(strcmp(uid1, uid2) != 0);
	SG_WAIT_FOR(15000, answer(&a) == SG_EAUTH);
	f.caller = mk_caller(ns_app, "re", uid2, NULL, NULL);
	SG_CHECK(answer(&a) == SG_OK);
	f.caller = mk_caller(ns_app, "re", uid1, NULL, NULL);
	SG_CHECK(answer(&a) == SG_EAUTH);

	/* Marked for deletion and held by a finalizer: accepted within the
	 * API server's 60 s leeway, refused after it. */
	char uid3[64];
	sg_kube_ref ref = KUBE_FX_CORE("serviceaccounts", ns_app, "held");
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s, s:[s]}}", "apiVersion", "v1", "kind", "ServiceAccount",
	                         "metadata", "name", "held", "namespace", ns_app, "finalizers", "signet.test/hold");
	json_t *out = NULL;
	SG_CHECK_OK(kube_fx_create_out(k, KUBE_FX_CORE("serviceaccounts", ns_app, NULL), body, &out));
	json_uid(out, uid3, sizeof(uid3));
	json_decref(out);
	SG_CHECK_OK(kube_fx_delete(k, ref));
	f.caller = mk_caller(ns_app, "held", uid3, NULL, NULL);
	int64_t now = sg_wall_seconds();
	SG_WAIT_FOR(15000, (run_at(&a, "token", now + 120, &o), o.rc) == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "/held has been deleted");
	run_at(&a, "token", now, &o);
	SG_CHECK(o.rc == SG_OK);
	SG_CHECK_OK(kube_fx_patch(k, ref, json_pack("{s:{s:n}}", "metadata", "finalizers")));

	a.free(a.self);
}

/* ---- bound tokens: live GETs ---- */

static void t_bound_live(void)
{
	/* A cache frozen after its first LIST: objects created now are not in
	 * it, as if the watch lagged. */
	sg_workload *frozen = workload(k, true, true, true);
	sg_workload_stop(frozen);
	struct fake f = {.mode = FAKE_SYNC};
	sg_authenticator a = bound(&f, frozen);
	char sa_uid[64], pod_uid[64];
	create_sa(ns_app, "fresh", sa_uid);
	create_pod(ns_app, "fresh-p", "fresh", "n2", NULL, pod_uid);
	f.caller = mk_caller(ns_app, "fresh", sa_uid, "fresh-p", pod_uid);
	struct outcome o;
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_OK && !o.sync && o.rc == SG_OK && o.calls == 1 && o.other_thread);
	SG_CHECK(strcmp(o.caller.pod_uid, pod_uid) == 0 && strcmp(o.caller.sa, "fresh") == 0);
	sg_workload_stats s;
	sg_workload_stats_get(frozen, &s);
	SG_CHECK(s.bound_live == 2 && s.bound_cached == 0);
	/* Objects the frozen cache has: still answered from it. */
	f.caller = mk_caller(ns_app, "app1", uid_app1, "app1-a", uid_app1_a);
	run(&a, &o);
	SG_CHECK(o.rc == SG_OK && o.sync);
	a.free(a.self);
	sg_workload_free(frozen);

	/* With the running cache: a service account created just before the
	 * call is accepted whichever way the answer comes. */
	char quick_uid[64];
	a = bound(&f, w);
	create_sa(ns_app, "quick", quick_uid);
	f.caller = mk_caller(ns_app, "quick", quick_uid, NULL, NULL);
	run(&a, &o);
	SG_CHECK(o.rc == SG_OK);
	a.free(a.self);

	/* No caches at all: every check is a live GET. */
	sg_workload *none = workload(k, false, false, false);
	a = bound(&f, none);
	f.caller = mk_caller(ns_app, "fresh", sa_uid, "fresh-p", pod_uid);
	run(&a, &o);
	SG_CHECK(o.rc == SG_OK && !o.sync);
	f.caller = mk_caller(ns_app, "app1", "12121212-2222-3333-4444-555555555555", NULL, NULL);
	run(&a, &o);
	SG_CHECK(o.rc == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "uid does not match the token");
	run(&a, &o);
	SG_CHECK(o.rc == SG_EAUTH && o.sync); /* remembered */
	sg_workload_stats_get(none, &s);
	SG_CHECK(s.bound_live == 3 && s.dead_uid_hits == 1 && !s.pods_synced && s.pods == 0);
	a.free(a.self);
	sg_workload_free(none);
}

/* A client of a server that is not there, or that never answers. */
static sg_kube *client_at(int port, long timeout_ms)
{
	char cfg[2048];
	snprintf(
	    cfg, sizeof(cfg),
	    "{\"apiVersion\":\"v1\",\"kind\":\"Config\",\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":"
	    "\"https://127.0.0.1:%d\",\"certificate-authority\":\"%s\"}}],\"users\":[{\"name\":\"u\",\"user\":{"
	    "\"token\":\"nothing\"}}],\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\",\"user\":\"u\"}}],"
	    "\"current-context\":\"x\"}",
	    port, kube_env.ca_file);
	sg_kube_options o = {.qps = -1, .connect_timeout_ms = timeout_ms, .request_timeout_ms = timeout_ms};
	sg_kube *kc = kube_fx_client_yaml(cfg, &o);
	SG_CHECK(kc != NULL);
	return kc;
}

/* A loopback port with a listener that never accepts (listening) or with
 * nothing behind it (bound, never listening: a connection is refused).
 * *fd_out holds it either way until the caller closes it (closed, the
 * port could become any listener's). */
static int loopback_port(bool listening, int *fd_out)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || (listening && listen(fd, 16) != 0))
		abort();
	*fd_out = fd;
	return ntohs(sa.sin_port);
}

static void t_bound_unreachable(void)
{
	int fd;
	sg_kube *dead = client_at(loopback_port(false, &fd), 2000);
	sg_workload *wd = workload(dead, false, false, false);
	struct fake f = {.mode = FAKE_SYNC};
	sg_authenticator a = bound(&f, wd);
	f.caller = mk_caller(ns_app, "app1", uid_app1, NULL, NULL);
	struct outcome o;
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_OK && o.rc == SG_EBUSY && o.calls == 1);
	CHECK_OUTCOME_MSG(o, "cannot confirm service account");
	/* A failure says nothing about the uid: not remembered. */
	run(&a, &o);
	SG_CHECK(o.start_rc == SG_OK && o.rc == SG_EBUSY);
	sg_workload_stats s;
	sg_workload_stats_get(wd, &s);
	SG_CHECK(s.bound_busy == 2 && s.dead_uid_hits == 0);
	a.free(a.self);
	sg_workload_free(wd);
	sg_kube_free(dead);
	close(fd);
}

static uint64_t bound_live_of(sg_workload *wl)
{
	sg_workload_stats s;
	sg_workload_stats_get(wl, &s);
	return s.bound_live;
}

static void t_bound_queue_and_shutdown(void)
{
	/* One worker stuck on a server that never answers, a queue of one.
	 * The stuck GET ends at the client's 1.5 s timeout: r2 and r3 must be
	 * started before that, which takes two calls, not a fixed time. */
	int fd;
	sg_kube *mute = client_at(loopback_port(true, &fd), 1500);
	sg_workload_options wo = {.kube = mute, .lookup_threads = 1, .lookup_queue = 1};
	sg_workload *wm = NULL;
	SG_CHECK_OK(sg_workload_new(&wm, &wo));
	struct fake f = {.mode = FAKE_SYNC};
	f.caller = mk_caller(ns_app, "app1", uid_app1, NULL, NULL);
	sg_authenticator a = bound(&f, wm);
	struct result r1, r2, r3;
	result_init(&r1);
	result_init(&r2);
	result_init(&r3);
	sg_authn_request req = {"token", 5, NULL, sg_wall_seconds()};
	SG_CHECK_OK(a.start(a.self, &req, on_done, &r1));
	/* The worker has taken r1 off the queue: it counts the live GET it
	 * starts for it (no cache here, so nothing answers r1 sooner). */
	SG_WAIT_FOR(30000, bound_live_of(wm) == 1);
	SG_CHECK_OK(a.start(a.self, &req, on_done, &r2));
	SG_CHECK_RC(a.start(a.self, &req, on_done, &r3), SG_EBUSY);
	SG_CHECK_MSG("queue is full");
	/* free: waits for the stuck GET (its timeout), answers the queued
	 * request with SG_EBUSY; each done exactly once. */
	a.free(a.self);
	SG_CHECK(f.frees == 1);
	SG_CHECK(calls_of(&r1) == 1 && r1.rc == SG_EBUSY);
	SG_CHECK(calls_of(&r2) == 1 && r2.rc == SG_EBUSY && strstr(r2.err.msg, "shutting down"));
	SG_CHECK(calls_of(&r3) == 0);
	/* An absence: no second answer after free. Only a fixed time can look
	 * for one; with the code right the check holds however slow the
	 * machine, so it cannot fail by chance. */
	sg_sleep_ms(100);
	SG_CHECK(calls_of(&r1) == 1 && calls_of(&r2) == 1);
	result_destroy(&r1);
	result_destroy(&r2);
	result_destroy(&r3);
	sg_workload_free(wm);
	sg_kube_free(mute);
	close(fd);
}

/* ---- real tokens: TokenRequest, verified locally with the server's key ---- */


static bool b64url_bn(EVP_PKEY *pk, const char *param, size_t pad, char *out, size_t cap)
{
	BIGNUM *bn = NULL;
	uint8_t buf[1024];
	if (EVP_PKEY_get_bn_param(pk, param, &bn) != 1)
		return false;
	int n = pad ? BN_bn2binpad(bn, buf, (int)pad) : BN_bn2bin(bn, buf);
	BN_free(bn);
	return n > 0 && sg_b64url_encode(buf, (size_t)n, out, cap) == SG_OK;
}

/* The API server's one-key JWKS, kid = base64url(SHA-256(SPKI DER)) as
 * kube-apiserver derives it. */
static bool write_jwks(const char *pub_path, const char *jwks_path)
{
	FILE *f = fopen(pub_path, "r");
	if (!f)
		return false;
	EVP_PKEY *pk = PEM_read_PUBKEY(f, NULL, NULL, NULL);
	fclose(f);
	if (!pk)
		return false;
	unsigned char *der = NULL;
	int dlen = i2d_PUBKEY(pk, &der);
	uint8_t digest[32];
	char kid[64], a[700], b[700];
	bool ok = dlen > 0 && SHA256(der, (size_t)dlen, digest) && sg_b64url_encode(digest, 32, kid, sizeof(kid)) == 0;
	OPENSSL_free(der);
	json_t *key = NULL;
	if (ok && EVP_PKEY_is_a(pk, "RSA") && b64url_bn(pk, OSSL_PKEY_PARAM_RSA_N, 0, a, sizeof(a)) &&
	    b64url_bn(pk, OSSL_PKEY_PARAM_RSA_E, 0, b, sizeof(b)))
		key = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "kty", "RSA", "alg", "RS256", "use", "sig", "kid",
		                kid, "n", a, "e", b);
	else if (ok && EVP_PKEY_is_a(pk, "EC") && b64url_bn(pk, OSSL_PKEY_PARAM_EC_PUB_X, 32, a, sizeof(a)) &&
	         b64url_bn(pk, OSSL_PKEY_PARAM_EC_PUB_Y, 32, b, sizeof(b)))
		key = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "kty", "EC", "crv", "P-256", "alg", "ES256",
		                "use", "sig", "kid", kid, "x", a, "y", b);
	EVP_PKEY_free(pk);
	json_t *jwks = key ? json_pack("{s:[o]}", "keys", key) : NULL;
	ok = jwks && json_dump_file(jwks, jwks_path, 0) == 0;
	json_decref(jwks);
	return ok;
}

/* A TokenRequest token for ns/sa (bound to pod/uid when pod is set);
 * caller frees it. */
static char *token_request(const char *ns, const char *sa, const char *pod, const char *uid)
{
	sg_kube_ref ref = {
	    .version = "v1", .resource = "serviceaccounts", .ns = ns, .name = sa, .subresource = "token"};
	json_t *body = json_pack("{s:s, s:s, s:{s:[s], s:i}}", "apiVersion", "authentication.k8s.io/v1", "kind",
	                         "TokenRequest", "spec", "audiences", "istio-ca", "expirationSeconds", 600);
	if (pod)
		json_object_set_new(
		    json_object_get(body, "spec"), "boundObjectRef",
		    json_pack("{s:s, s:s, s:s, s:s}", "kind", "Pod", "apiVersion", "v1", "name", pod, "uid", uid));
	json_t *out = NULL;
	int rc = sg_kube_create(k, &ref, body, &out);
	SG_CHECK_OK(rc);
	json_decref(body);
	const char *t = json_string_value(json_object_get(json_object_get(out, "status"), "token"));
	char *tok = t ? strdup(t) : NULL;
	json_decref(out);
	SG_CHECK(tok != NULL);
	return tok;
}

static void t_real_tokens(void)
{
	char pub[600], issuer[256], dir[600], jwks[700];
	SG_CHECK(kube_fx_env_value("KUBE_SA_PUBLIC_KEY", pub, sizeof(pub)));
	SG_CHECK(kube_fx_env_value("KUBE_SA_ISSUER", issuer, sizeof(issuer)));
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(dir, sizeof(dir), "%s/wl-jwks.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	SG_CHECK(mkdtemp(dir) != NULL);
	snprintf(jwks, sizeof(jwks), "%s/jwks.json", dir);
	SG_CHECK(write_jwks(pub, jwks));

	sg_authn_jwt_options jo = {.jwks_file = jwks, .issuer = issuer, .trust_domain = "cluster.local"};
	sg_authenticator inner, a;
	SG_CHECK_OK(sg_authn_jwt_new(&inner, &jo));
	SG_CHECK_OK(sg_authn_bound_new(&a, inner, w));

	char sa_uid[64], pod_uid[64];
	create_sa(ns_app, "tok", sa_uid);
	create_pod(ns_app, "tok-p", "tok", "n1", NULL, pod_uid);
	char *pod_tok = token_request(ns_app, "tok", "tok-p", pod_uid);
	char *sa_tok = token_request(ns_app, "tok", NULL, NULL);
	struct outcome o;
	run_at(&a, pod_tok, sg_wall_seconds(), &o);
	SG_CHECK(o.rc == SG_OK && o.calls == 1);
	SG_CHECK(strcmp(o.caller.sa_uid, sa_uid) == 0 && strcmp(o.caller.pod_name, "tok-p") == 0 &&
	         strcmp(o.caller.pod_uid, pod_uid) == 0 && strcmp(o.caller.method, "jwt") == 0);
	char want[256];
	snprintf(want, sizeof(want), "spiffe://cluster.local/ns/%s/sa/tok", ns_app);
	SG_CHECK(strcmp(o.caller.identity, want) == 0);

	/* The pod goes: its token is refused (the signature is still good). */
	delete_obj("pods", ns_app, "tok-p");
	SG_WAIT_FOR(15000, (run_at(&a, pod_tok, sg_wall_seconds(), &o), o.rc) == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "/tok-p bound to the token no longer exists");
	run_at(&a, sa_tok, sg_wall_seconds(), &o);
	SG_CHECK(o.rc == SG_OK && o.caller.pod_name[0] == 0);
	/* The service account goes: every token of it is refused. */
	delete_obj("serviceaccounts", ns_app, "tok");
	SG_WAIT_FOR(15000, (run_at(&a, sa_tok, sg_wall_seconds(), &o), o.rc) == SG_EAUTH);
	CHECK_OUTCOME_MSG(o, "/tok no longer exists");
	/* Re-created: the old token stays refused. */
	char uid2[64];
	create_sa(ns_app, "tok", uid2);
	run_at(&a, sa_tok, sg_wall_seconds(), &o);
	SG_CHECK(o.rc == SG_EAUTH);
	char *new_tok = token_request(ns_app, "tok", NULL, NULL);
	SG_WAIT_FOR(15000, (run_at(&a, new_tok, sg_wall_seconds(), &o), o.rc) == SG_OK);
	SG_CHECK(strcmp(o.caller.sa_uid, uid2) == 0);

	free(new_tok);
	free(sa_tok);
	free(pod_tok);
	a.free(a.self);
	char cmd[800];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	SG_CHECK(system(cmd) == 0);
}

static void t_teardown(void)
{
	sg_workload_free(w);
	w = NULL;
	sg_kube_free(k);
	k = NULL;
}

SG_TEST_MAIN(SG_TEST(t_index_hostile), SG_TEST(t_setup), SG_TEST(t_impersonation),
             SG_TEST(t_impersonation_follows_changes), SG_TEST(t_grant_hook), SG_TEST(t_bound_cached),
             SG_TEST(t_bound_inner), SG_TEST(t_bound_deleted), SG_TEST(t_bound_live), SG_TEST(t_bound_unreachable),
             SG_TEST(t_bound_queue_and_shutdown), SG_TEST(t_real_tokens), SG_TEST(t_teardown))
