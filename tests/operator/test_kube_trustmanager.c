/*
 * The TrustManager reconciler (operator/sg_trustmanager) against a real
 * kube-apiserver 1.20: the operator's CRDs as signet ships them
 * (packaging/kubernetes/operator-crds.yaml), the reconciler in process on
 * the controller runtime, the test's own reads and writes with the admin
 * client.
 *
 * No kube-controller-manager runs here: the test plays the deployment
 * controller by writing the Deployment's status (observedGeneration,
 * replicas, updated and available replicas, conditions) through its
 * status subresource, and the kubelet by creating a pod of the operand
 * and writing a crashing container's status. Nothing garbage-collects, so
 * what disappears was deleted by the reconciler.
 *
 * What is shown, one test function each:
 *  - the seed's sample TrustManager (trust-manager-controller.md) is
 *    accepted and reconciles: the finalizer, every object with its
 *    labels and ownerReference, the ClusterRole's least-privilege rules,
 *    the Roles, the metrics Service, the default CA package (trust-
 *    manager's JSON, the bundle deduplicated, the version given) mounted
 *    at /packages with its hash on the pod template, the Deployment's
 *    arguments exactly (and signet-trust parses them), probes, security
 *    context; the status fields;
 *  - Ready follows the operand: False/Progressing until the Deployment's
 *    status says its generation is observed and available, then True;
 *    Degraded with the pod's own failure; observedGeneration on every
 *    condition;
 *  - a spec change rolls: filterExpiredCertificates off, secretTargets
 *    Custom with authorized Secrets (sorted resourceNames, the argument),
 *    then the design's Specific (the same) and All (Secret writes under
 *    any name);
 *    the package disabled: its ConfigMap deleted, mount and argument gone;
 *  - invalid specs (what the CRD's CEL rules refuse on newer servers) are
 *    InvalidSpec and change nothing; labels and annotations of
 *    controllerConfig reach every object, and leave every object when
 *    dropped (the webhook's Secret created with them too);
 *  - drift is repaired: the Deployment's arguments edited, the Service
 *    deleted, the ClusterRole and a Role edited;
 *  - a quiet cluster sees no write: a handled event (the CR relabelled)
 *    and seconds of nothing write nothing;
 *  - an operator restarted with a new CA bundle rolls the pods (the hash);
 *  - signet's own webhook certificate is made again when the Secret's
 *    does not fit, the old one kept in ca.crt (the caBundle) while valid;
 *    a new pair decided on a cached copy that is behind never replaces
 *    the good pair written since; with no cached copy the server's
 *    Secret decides (ours kept, one not ours taken over);
 *  - the Bundle webhook is deployed for real (the sample checks its
 *    ValidatingWebhookConfiguration, taken over from one trust-manager's
 *    own installation left pointing at a webhook now gone; its Service;
 *    and the operator's own self-signed certificate for
 *    trust-manager.cert-manager.svc, whose ca.crt is the caBundle): the
 *    API server calls it: signet-trust run
 *    here with the Secret the operator made, the Service bent into an
 *    ExternalName of 127.0.0.1 and the webhook's port into the local one
 *    (the reconciler stopped meanwhile), a Bundle the webhook refuses is
 *    refused at admission ("admission webhook "trust.cert-manager.io"
 *    denied the request"), a valid one is created; the operator restarted
 *    puts its Service and port back;
 *  - deleting the CR deletes every object and then the finalizer, never
 *    the trust namespace or a user Secret; recreating it works;
 *  - a second TrustManager not named "cluster" is InvalidSpec and touches
 *    nothing;
 *  - a missing trust namespace is created (the design's goal), the CR
 *    untouched; a new trustNamespace moves the Role and RoleBinding, and
 *    no namespace is deleted;
 *  - the design's default CA package on OpenShift (the reconciler's
 *    default source; the tests above use source file, Debian's bundle):
 *    the injection ConfigMap with the network operator's label and no
 *    data, the CR Progressing "waiting for the cluster's trusted CA
 *    bundle" with nothing else applied; the test then plays the network
 *    operator (writes ca-bundle.crt): the package
 *    cert-manager-package-openshift (version the injection ConfigMap's
 *    resourceVersion, read back by signet-trust's parser) mounted and
 *    named by --default-package-location; a new injected bundle is
 *    formatted again and rolls the pods; one that is not PEM is Failed
 *    saying so, the operand untouched; deletion takes both ConfigMaps;
 *  - with cert-manager's CRDs (applied loose), the webhook's certificate
 *    is cert-manager's: the Issuer, the Certificate and the CA injection
 *    annotation, no Secret of ours; deletion takes them.
 *
 * TM_DEBUG=1 in the environment logs at debug level.
 */
#include "sg_trustmanager.h"

#include "self_signed.h"
#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_opr.h"
#include "sg_secret.h"
#include "sg_softkey.h"
#include "sg_test.h"
#include "sg_trust.h"
#include "sg_x509.h"
#include "test_kube_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SOURCE_DIR
#error "SOURCE_DIR (the project's top folder) must be defined"
#endif

#define NS "cert-manager" /* operand and (the sample's) trust namespace */
#define MANAGER "tm-test" /* the test's own field manager */
#define IMAGE "registry.example/signet/signet-trust:test"
#define VERSION "0.1.0-test"
#define PKG_VERSION "20230311"
#define APP "cert-manager-trust-manager"
#define PKG_CM "trust-manager-default-ca-package"
#define PKG_KEY "cert-manager-package-debian.json"
#define PKG_OS_KEY "cert-manager-package-openshift.json"
#define INJ_CM "trust-manager-default-ca-injection"
#define TLS_SECRET "trust-manager-tls"
#define ADM "admissionregistration.k8s.io"
#define WEBHOOK_PATH "/validate-trust-cert-manager-io-v1alpha1-bundle"
#define SVC_DNS "trust-manager." NS ".svc"
#define WAIT_MS 30000
#define QUIET_MS 3000

static sg_kube *k;
static sg_trustmanager *tm;
static char bundle1[600], bundle2[600]; /* CA bundle files */
static char *ca[4];
static char late_ns[64];

/* ---- objects ---- */

static sg_kube_ref tm_ref(const char *name)
{
	return (sg_kube_ref){
	    .group = "operator.openshift.io", .version = "v1alpha1", .resource = "trustmanagers", .name = name};
}

static sg_kube_ref ref_in(const char *group, const char *resource, const char *ns, const char *name)
{
	return (sg_kube_ref){.group = group, .version = "v1", .resource = resource, .ns = ns, .name = name};
}

#define DEPLOY() ref_in("apps", "deployments", NS, "trust-manager")
#define RBAC "rbac.authorization.k8s.io"

static int64_t generation_of(sg_kube_ref ref)
{
	json_t *o = kube_fx_get(k, ref);
	int64_t g = json_integer_value(json_object_get(json_object_get(o, "metadata"), "generation"));
	json_decref(o);
	return g;
}

static const char *label(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"), "labels"), key));
}

static const char *annotation(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"), "annotations"), key));
}

static void ns_create(const char *name)
{
	SG_CHECK_OK(kube_fx_ensure(k, ref_in(NULL, "namespaces", NULL, NULL), kube_fx_namespace(name, NULL, NULL)));
}

/* Creates or replaces TrustManager name with spec (JSON text, printf-
 * formatted) by server-side apply as MANAGER: fields it no longer names go. */
static void tm_put(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tm_put(const char *name, const char *fmt, ...)
{
	char text[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	json_error_t e;
	json_t *spec = json_loads(text, 0, &e);
	if (!spec)
		fprintf(stderr, "test spec: %s: %s\n", e.text, text);
	SG_CHECK(spec != NULL);
	json_t *o = json_pack("{s:s, s:s, s:{s:s}, s:o}", "apiVersion", "operator.openshift.io/v1alpha1", "kind",
	                      "TrustManager", "metadata", "name", name, "spec", spec);
	int rc = kube_fx_apply(k, tm_ref(name), o, MANAGER);
	if (rc != SG_OK)
		fprintf(stderr, "apply TrustManager %s: %s\n", name, sg_error_last()->msg);
	SG_CHECK_OK(rc);
}

/* The seed's sample (trust-manager-controller.md, "Example TrustManager CR
 * with defaultCAPackage.policy: Enabled"), unchanged. */
#define SAMPLE                                                                                                         \
	"{\"trustManagerConfig\": {\"logLevel\": 1, \"logFormat\": \"text\", \"trustNamespace\": \"cert-manager\", "   \
	"\"defaultCAPackage\": {\"policy\": \"Enabled\"}, \"filterExpiredCertificates\": \"Enabled\"}}"

/* ---- conditions ---- */

static char seen[2000]; /* what the last check saw */

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* Whether TrustManager name's condition type has status and reason, a
 * message holding part (NULL: any), and observedGeneration = generation. */
static bool cond_is(const char *name, const char *type, const char *status, const char *reason, const char *part)
{
	json_t *o = kube_fx_get(k, tm_ref(name));
	bool ok = kube_fx_cond_is(o, type, status, reason, part, seen, sizeof(seen));
	json_decref(o);
	return ok;
}

#define WAIT_COND(name, type, status, reason, part)                                                                    \
	do {                                                                                                           \
		int f_ = sg_test_failures;                                                                             \
		SG_WAIT_FOR(WAIT_MS, cond_is((name), (type), (status), (reason), (part)));                             \
		if (sg_test_failures != f_)                                                                            \
			fprintf(stderr, "  want %s=%s %s \"%s\"; have %s\n", (type), (status), (reason),               \
			        or_empty(part), seen);                                                                 \
	} while (0)

/* Ready and its two companions as sg_opr_conditions sets them. */
static bool progressing(const char *name)
{
	return cond_is(name, "Ready", "False", "Progressing", NULL) &&
	       cond_is(name, "Progressing", "True", "Progressing", NULL) &&
	       cond_is(name, "Degraded", "False", "Ready", NULL);
}

static bool ready(const char *name)
{
	return cond_is(name, "Ready", "True", "Ready", "available") &&
	       cond_is(name, "Progressing", "False", "Ready", NULL) &&
	       cond_is(name, "Degraded", "False", "Ready", NULL);
}

#define WAIT_STATE(fn, name)                                                                                           \
	do {                                                                                                           \
		int f_ = sg_test_failures;                                                                             \
		SG_WAIT_FOR(WAIT_MS, fn(name));                                                                        \
		if (sg_test_failures != f_)                                                                            \
			fprintf(stderr, "  want " #fn "; have %s\n", seen);                                            \
	} while (0)

static const char *status_str(const char *name, const char *field)
{
	static char buf[256];
	json_t *o = kube_fx_get(k, tm_ref(name));
	const char *v = json_string_value(json_object_get(json_object_get(o, "status"), field));
	snprintf(buf, sizeof(buf), "%s", v ? v : "");
	json_decref(o);
	return buf;
}

/* ---- playing the deployment controller and the kubelet ---- */

/* Writes the Deployment's status as the deployment controller would:
 * observedGeneration current, one replica updated, available or not. */
static void deployment_status(bool available)
{
	for (int attempt = 0; attempt < 10; attempt++) {
		json_t *d = kube_fx_get(k, DEPLOY());
		SG_CHECK(d != NULL);
		if (!d)
			return;
		json_int_t gen = json_integer_value(json_object_get(json_object_get(d, "metadata"), "generation"));
		json_t *st = json_pack("{s:I, s:i, s:i, s:i, s:i, s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]}",
		                       "observedGeneration", gen, "replicas", 1, "updatedReplicas", 1, "readyReplicas",
		                       available ? 1 : 0, "availableReplicas", available ? 1 : 0, "conditions", "type",
		                       "Available", "status", available ? "True" : "False", "reason",
		                       available ? "MinimumReplicasAvailable" : "MinimumReplicasUnavailable", "message",
		                       available ? "Deployment has minimum availability."
		                                 : "Deployment does not have minimum availability.",
		                       "type", "Progressing", "status", "True", "reason",
		                       available ? "NewReplicaSetAvailable" : "ReplicaSetUpdated", "message", "test");
		if (!available)
			json_object_del(st, "availableReplicas");
		json_object_set_new(d, "status", st);
		sg_kube_ref ref = DEPLOY();
		ref.subresource = "status";
		int rc = sg_kube_update(k, &ref, d, NULL);
		json_decref(d);
		if (rc == SG_OK)
			return;
		if (sg_kube_last_status()->code != 409) {
			SG_CHECK_OK(rc);
			return;
		}
	}
	SG_CHECK(!"the Deployment's status could not be written");
}

#define CRASH_MSG "signet-trust: cannot start: default package /packages/x.json: not JSON"

static void crashing_pod(const char *name)
{
	sg_kube_ref coll = ref_in(NULL, "pods", NS, NULL);
	json_t *pod =
	    json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:i, s:[{s:s, s:s}]}}", "apiVersion", "v1", "kind", "Pod",
	              "metadata", "name", name, "namespace", NS, "labels", "app", APP, "spec",
	              "terminationGracePeriodSeconds", 0, "containers", "name", "trust-manager", "image", IMAGE);
	SG_CHECK_OK(kube_fx_create(k, coll, pod));
	json_t *patch =
	    json_pack("{s:{s:s, s:[{s:s, s:b, s:i, s:s, s:s, s:{s:{s:s, s:s}}, s:{s:{s:i, s:s, s:s}}}]}}", "status",
	              "phase", "Running", "containerStatuses", "name", "trust-manager", "ready", 0, "restartCount", 4,
	              "image", IMAGE, "imageID", "", "state", "waiting", "reason", "CrashLoopBackOff", "message",
	              "back-off 40s restarting failed container=trust-manager", "lastState", "terminated", "exitCode",
	              1, "reason", "Error", "message", CRASH_MSG);
	SG_CHECK_OK(kube_fx_patch(k, kube_fx_named(coll, name, "status"), patch));
}

/* ---- the Deployment ---- */

static json_t *container_of(const json_t *d)
{
	return json_array_get(
	    json_object_get(json_object_get(json_object_get(json_object_get(d, "spec"), "template"), "spec"),
	                    "containers"),
	    0);
}

static json_t *args_now(void)
{
	json_t *d = kube_fx_get(k, DEPLOY());
	json_t *a = json_incref(json_object_get(container_of(d), "args"));
	json_decref(d);
	return a;
}

static bool has_arg(const json_t *args, const char *want)
{
	size_t i;
	json_t *v;
	json_array_foreach(args, i, v)
	{
		if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
			return true;
	}
	return false;
}

static bool arg_is(const char *want, bool present)
{
	json_t *a = args_now();
	bool ok = a && has_arg(a, want) == present;
	char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
	snprintf(seen, sizeof(seen), "args %s", text ? text : "(no Deployment)");
	free(text);
	json_decref(a);
	return ok;
}

#define WAIT_ARG(want, present)                                                                                        \
	do {                                                                                                           \
		int f_ = sg_test_failures;                                                                             \
		SG_WAIT_FOR(WAIT_MS, arg_is((want), (present)));                                                       \
		if (sg_test_failures != f_)                                                                            \
			fprintf(stderr, "  want %s %s; have %s\n", (want), (present) ? "present" : "absent", seen);    \
	} while (0)

/* The arguments the sample maps to, in order. */
static const char *const sample_args[] = {
    "--log-format=text",
    "--log-level=1",
    "--metrics-port=9402",
    "--readiness-probe-port=6060",
    "--readiness-probe-path=/readyz",
    "--leader-elect=true",
    "--leader-election-namespace=" NS,
    "--leader-election-lease-duration=15s",
    "--leader-election-renew-deadline=10s",
    "--trust-namespace=" NS,
    "--webhook-host=0.0.0.0",
    "--webhook-port=6443",
    "--webhook-certificate-dir=/tls",
    "--filter-expired-certificates=true",
    "--default-package-location=/packages/" PKG_KEY,
};

/* signet-trust takes every argument the operator wrote: parsed with
 * --help last, which stops before anything starts. */
static void check_signet_trust_parses(const json_t *args)
{
#ifdef SIGNET_TRUST
	char *argv[64];
	size_t n = 0;
	argv[n++] = (char *)SIGNET_TRUST;
	size_t i;
	json_t *v;
	json_array_foreach(args, i, v)
	{
		if (n < 62)
			argv[n++] = (char *)json_string_value(v);
	}
	argv[n++] = (char *)"--help";
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0)
			dup2(devnull, 1);
		execv(SIGNET_TRUST, argv);
		_exit(127);
	}
	int status = 0;
	SG_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	SG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr, "  signet-trust refused the Deployment's arguments (status %d)\n", status);
#else
	(void)args;
	printf("signet-trust not built: its parse of the arguments is not checked\n");
#endif
}

/* ---- the reconciler's state ---- */

static sg_trustmanager_stats stats(void)
{
	sg_trustmanager_stats s;
	sg_trustmanager_stats_get(tm, &s);
	return s;
}

static char idle_why[200];

/* Nothing queued (delayed keys included), none in progress, and no
 * reconcile ended during the last 10 looks (200 ms): the events of the
 * last writes are handled. */
static bool idle(uint64_t *done, int *looks)
{
	sg_ctrl_stats s;
	sg_ctrl_stats_get(sg_trustmanager_controller(tm), &s);
	uint64_t n = s.reconciles + s.errors;
	snprintf(idle_why, sizeof(idle_why), "queued %llu, active %llu, reconciles %llu, errors %llu",
	         (unsigned long long)s.queued, (unsigned long long)s.active, (unsigned long long)s.reconciles,
	         (unsigned long long)s.errors);
	return kube_fx_settled(s.queued == 0 && s.active == 0, n, done, looks, 10);
}

#define WAIT_IDLE() KUBE_FX_WAIT_SETTLED(WAIT_MS, idle(&kube_fx_done, &kube_fx_looks), idle_why)

static void print_stats(const char *when)
{
	sg_trustmanager_stats s = stats();
	printf("%s: writes %llu created %llu repaired %llu deleted %llu status %llu\n", when,
	       (unsigned long long)s.writes, (unsigned long long)s.created, (unsigned long long)s.repaired,
	       (unsigned long long)s.deleted, (unsigned long long)s.status_writes);
}

static void start_reconciler(sg_trustmanager_ca_source source, const char *bundle)
{
	sg_trustmanager_options o = {.kube = k,
	                             .image = IMAGE,
	                             .version = VERSION,
	                             .operand_namespace = NS,
	                             .ca_source = source,
	                             .ca_bundle_path = bundle,
	                             .ca_bundle_version = PKG_VERSION};
	SG_CHECK_OK(sg_trustmanager_new(&tm, &o));
	if (!tm)
		exit(1);
	SG_CHECK_OK(sg_ctrl_start(sg_trustmanager_controller(tm)));
}

/* ---- the objects the sample makes ---- */

typedef struct made {
	const char *group, *resource;
	bool in_ns; /* in NS (else cluster-scoped) */
	const char *name;
} made;

static const made objects[] = {
    {NULL, "serviceaccounts", true, "trust-manager"},
    {RBAC, "clusterroles", false, "trust-manager"},
    {RBAC, "clusterrolebindings", false, "trust-manager"},
    {RBAC, "roles", true, "trust-manager"},
    {RBAC, "rolebindings", true, "trust-manager"},
    {RBAC, "roles", true, "trust-manager:leaderelection"},
    {RBAC, "rolebindings", true, "trust-manager:leaderelection"},
    {NULL, "services", true, "trust-manager-metrics"},
    {NULL, "services", true, "trust-manager"},
    {NULL, "secrets", true, TLS_SECRET},
    {NULL, "configmaps", true, PKG_CM},
    {"apps", "deployments", true, "trust-manager"},
    {ADM, "validatingwebhookconfigurations", false, "trust-manager"},
};
#define NOBJECTS (sizeof(objects) / sizeof(objects[0]))

static sg_kube_ref made_ref(const made *m)
{
	return ref_in(m->group, m->resource, m->in_ns ? NS : NULL, m->name);
}

static bool all_exist(void)
{
	for (size_t i = 0; i < NOBJECTS; i++) {
		if (!kube_fx_exists(k, made_ref(&objects[i]))) {
			snprintf(seen, sizeof(seen), "%s %s missing", objects[i].resource, objects[i].name);
			return false;
		}
	}
	return true;
}

static bool none_exist(void)
{
	for (size_t i = 0; i < NOBJECTS; i++) {
		if (kube_fx_exists(k, made_ref(&objects[i]))) {
			snprintf(seen, sizeof(seen), "%s %s still there", objects[i].resource, objects[i].name);
			return false;
		}
	}
	return true;
}

/* Labels, ownerReference and (when given) an annotation of every object. */
static void check_meta(const char *uid, const char *ann_key, const char *ann_value, const char *user_label)
{
	for (size_t i = 0; i < NOBJECTS; i++) {
		json_t *o = kube_fx_get(k, made_ref(&objects[i]));
		const char *what = objects[i].name;
		SG_CHECK(o != NULL);
		const char *l_app = label(o, "app"), *l_mb = label(o, "app.kubernetes.io/managed-by");
		const char *l_owner = label(o, "operator.signet.dev/owner"),
		           *l_ver = label(o, "app.kubernetes.io/version");
		bool labels_ok = l_app && strcmp(l_app, APP) == 0 && l_mb &&
		                 strcmp(l_mb, "cert-manager-operator") == 0 && l_owner &&
		                 strcmp(l_owner, "cluster") == 0 && l_ver && strcmp(l_ver, VERSION) == 0;
		if (user_label)
			labels_ok = labels_ok && label(o, user_label) != NULL;
		SG_CHECK(labels_ok);
		const json_t *ref =
		    json_array_get(json_object_get(json_object_get(o, "metadata"), "ownerReferences"), 0);
		const char *kind = json_string_value(json_object_get(ref, "kind"));
		const char *ruid = json_string_value(json_object_get(ref, "uid"));
		bool owner_ok = kind && strcmp(kind, "TrustManager") == 0 && ruid && strcmp(ruid, uid) == 0 &&
		                json_is_true(json_object_get(ref, "controller"));
		SG_CHECK(owner_ok);
		if (ann_key) {
			const char *a = annotation(o, ann_key);
			SG_CHECK(a && strcmp(a, ann_value) == 0);
		}
		if (!labels_ok || !owner_ok)
			fprintf(stderr, "  %s %s: labels or ownerReference wrong\n", objects[i].resource, what);
		json_decref(o);
	}
}

static char *cr_uid(const char *name)
{
	json_t *o = kube_fx_get(k, tm_ref(name));
	const char *u = sg_kube_meta_str(o, "uid");
	char *out = strdup(u ? u : "");
	json_decref(o);
	return out;
}

static bool has_finalizer(const char *name)
{
	json_t *o = kube_fx_get(k, tm_ref(name));
	bool has = false;
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(json_object_get(o, "metadata"), "finalizers"), i, f)
	{
		has = has || strcmp(json_string_value(f), SG_TRUSTMANAGER_FINALIZER) == 0;
	}
	json_decref(o);
	return has;
}

/* The rules of a (Cluster)Role as compact JSON text; caller frees. */
static char *rules_text(sg_kube_ref ref)
{
	json_t *o = kube_fx_get(k, ref);
	char *t = o ? json_dumps(json_object_get(o, "rules"), JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(o);
	return t ? t : strdup("");
}

static bool rules_are(sg_kube_ref ref, const char *want)
{
	char *t = rules_text(ref);
	bool ok = strcmp(t, want) == 0;
	snprintf(seen, sizeof(seen), "%s %s rules %s", ref.resource, ref.name, t);
	free(t);
	return ok;
}

#define CLUSTER_RULES                                                                                                  \
	"{\"apiGroups\":[\"trust.cert-manager.io\"],\"resources\":[\"bundles\"],\"verbs\":[\"get\",\"list\","          \
	"\"watch\"]},{\"apiGroups\":[\"trust.cert-manager.io\"],\"resources\":[\"bundles/status\"],\"verbs\":["        \
	"\"patch\"]},{\"apiGroups\":[\"trust.cert-manager.io\"],\"resources\":[\"bundles/finalizers\"],\"verbs\":["    \
	"\"update\"]},{\"apiGroups\":[\"\"],\"resources\":[\"namespaces\"],\"verbs\":[\"get\",\"list\",\"watch\"]},"   \
	"{\"apiGroups\":[\"\"],\"resources\":[\"configmaps\"],\"verbs\":[\"get\",\"list\",\"watch\",\"create\","       \
	"\"patch\",\"delete\"]},{\"apiGroups\":[\"\"],\"resources\":[\"events\"],\"verbs\":[\"create\",\"patch\"]}"
#define SECRET_RULES                                                                                                   \
	",{\"apiGroups\":[\"\"],\"resources\":[\"secrets\"],\"verbs\":[\"get\",\"list\",\"watch\"]},{\"apiGroups\":"   \
	"[\"\"],\"resourceNames\":[\"alpha-ca\",\"zeta-ca\"],\"resources\":[\"secrets\"],\"verbs\":[\"create\","       \
	"\"update\",\"patch\",\"delete\"]}"

/* secretTargets.policy All: Secret writes under any name. */
#define SECRET_RULES_ALL                                                                                               \
	",{\"apiGroups\":[\"\"],\"resources\":[\"secrets\"],\"verbs\":[\"get\",\"list\",\"watch\"]},{\"apiGroups\":"   \
	"[\"\"],\"resources\":[\"secrets\"],\"verbs\":[\"create\",\"update\",\"patch\",\"delete\"]}"

#define WAIT_RULES(ref, want)                                                                                          \
	do {                                                                                                           \
		int f_ = sg_test_failures;                                                                             \
		SG_WAIT_FOR(WAIT_MS, rules_are((ref), (want)));                                                        \
		if (sg_test_failures != f_)                                                                            \
			fprintf(stderr, "  want %s; have %s\n", (want), seen);                                         \
	} while (0)

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The package file key in the ConfigMap: parsed, or NULL. */
static json_t *package_at(const char *key)
{
	json_t *cm = kube_fx_get(k, ref_in(NULL, "configmaps", NS, PKG_CM));
	const char *text = json_string_value(json_object_get(json_object_get(cm, "data"), key));
	json_t *pkg = text ? json_loads(text, 0, NULL) : NULL;
	json_decref(cm);
	return pkg;
}

static json_t *package_now(void)
{
	return package_at(PKG_KEY);
}

/* How many certificates the package in the ConfigMap holds. */
static size_t package_certs_at(const char *key)
{
	json_t *pkg = package_at(key);
	size_t n = count(json_string_value(json_object_get(pkg, "bundle")), "-----BEGIN CERTIFICATE-----");
	json_decref(pkg);
	return n;
}

static size_t package_certs(void)
{
	return package_certs_at(PKG_KEY);
}

static void sha256_hex(const char *s, char out[65])
{
	unsigned char d[32];
	SHA256((const unsigned char *)s, strlen(s), d);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static bool template_hash_is(const char *want)
{
	json_t *d = kube_fx_get(k, DEPLOY());
	const json_t *tmpl = json_object_get(json_object_get(d, "spec"), "template");
	const char *h = annotation(tmpl, SG_TRUSTMANAGER_PACKAGE_HASH);
	bool ok = want ? h && strcmp(h, want) == 0 : h == NULL;
	snprintf(seen, sizeof(seen), "template hash %s", h ? h : "(none)");
	json_decref(d);
	return ok;
}

/* A certificate's PEM without its final newline: how it appears in a
 * bundle (each block re-encoded alike, 64 columns). */
static bool bundle_has(const char *bundle, const char *pem)
{
	size_t n = strlen(pem);
	while (n && pem[n - 1] == '\n')
		n--;
	char *t = strndup(pem, n);
	bool ok = t && strstr(bundle, t) != NULL;
	free(t);
	return ok;
}

/* ---- the webhook ---- */

/* A Secret's data value, decoded (caller frees), or NULL. */
static char *secret_value(const char *name, const char *key)
{
	json_t *sec = kube_fx_get(k, ref_in(NULL, "secrets", NS, name));
	const char *v = json_string_value(json_object_get(json_object_get(sec, "data"), key));
	char *out = NULL;
	size_t n = v ? strlen(v) : 0, len = 0;
	if (v && (out = malloc(n + 1)) && sg_b64_decode(SG_B64_STD, v, n, (uint8_t *)out, n, &len) == SG_OK)
		out[len] = '\0';
	else if (out) {
		free(out);
		out = NULL;
	}
	json_decref(sec);
	return out;
}

/* The ValidatingWebhookConfiguration as trust-manager's, the Service
 * behind it, and the certificate: with cert-manager, its Issuer,
 * Certificate and CA injection annotation; without, signet's own Secret,
 * whose key belongs to its certificate for the Service's name, and whose
 * ca.crt is the caBundle. */
static void check_webhook(bool cert_manager)
{
	json_t *v = kube_fx_get(k, ref_in(ADM, "validatingwebhookconfigurations", NULL, "trust-manager"));
	SG_CHECK(v != NULL);
	const json_t *hook = json_array_get(json_object_get(v, "webhooks"), 0);
	const json_t *cc = json_object_get(hook, "clientConfig");
	const json_t *svc = json_object_get(cc, "service");
	const json_t *rule = json_array_get(json_object_get(hook, "rules"), 0);
	char *rules = json_dumps(rule, JSON_COMPACT | JSON_SORT_KEYS);
	SG_CHECK(json_array_size(json_object_get(v, "webhooks")) == 1);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(hook, "name"))), "trust.cert-manager.io") == 0);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(svc, "name"))), "trust-manager") == 0);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(svc, "namespace"))), NS) == 0);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(svc, "path"))), WEBHOOK_PATH) == 0);
	SG_CHECK(json_integer_value(json_object_get(svc, "port")) == 443);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(hook, "failurePolicy"))), "Fail") == 0);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(hook, "sideEffects"))), "None") == 0);
	SG_CHECK(rules && strcmp(rules, "{\"apiGroups\":[\"trust.cert-manager.io\"],\"apiVersions\":[\"v1alpha1\"],"
	                                "\"operations\":[\"CREATE\",\"UPDATE\"],\"resources\":[\"bundles\"],"
	                                "\"scope\":\"*\"}") == 0);
	if (rules && !strstr(rules, "bundles"))
		fprintf(stderr, "  rules %s\n", rules);
	free(rules);
	const char *inject = annotation(v, "cert-manager.io/inject-ca-from");
	const char *ca_bundle = json_string_value(json_object_get(cc, "caBundle"));
	json_t *s = kube_fx_get(k, ref_in(NULL, "services", NS, "trust-manager"));
	const json_t *port = json_array_get(json_object_get(json_object_get(s, "spec"), "ports"), 0);
	SG_CHECK(json_integer_value(json_object_get(port, "port")) == 443 &&
	         json_integer_value(json_object_get(port, "targetPort")) == 6443);
	json_decref(s);
	sg_kube_ref iss = {
	    .group = "cert-manager.io", .version = "v1", .resource = "issuers", .ns = NS, .name = "trust-manager"};
	sg_kube_ref cert = iss;
	cert.resource = "certificates";
	if (cert_manager) {
		SG_CHECK(inject && strcmp(inject, NS "/trust-manager") == 0);
		SG_CHECK(ca_bundle == NULL); /* the CA injector's to write */
		json_t *i = kube_fx_get(k, iss), *c = kube_fx_get(k, cert);
		SG_CHECK(json_is_object(json_object_get(json_object_get(i, "spec"), "selfSigned")));
		const json_t *cs = json_object_get(c, "spec");
		SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(cs, "secretName"))), TLS_SECRET) == 0);
		SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(cs, "commonName"))), SVC_DNS) == 0);
		SG_CHECK(strcmp(or_empty(json_string_value(json_array_get(json_object_get(cs, "dnsNames"), 0))),
		                SVC_DNS) == 0);
		const json_t *ir = json_object_get(cs, "issuerRef");
		SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(ir, "name"))), "trust-manager") == 0 &&
		         strcmp(or_empty(json_string_value(json_object_get(ir, "kind"))), "Issuer") == 0);
		json_decref(i);
		json_decref(c);
	} else {
		SG_CHECK(inject == NULL);
		char *crt = secret_value(TLS_SECRET, "tls.crt"), *key = secret_value(TLS_SECRET, "tls.key");
		char *ca_crt = secret_value(TLS_SECRET, "ca.crt");
		json_t *sec = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
		SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(sec, "type"))), "kubernetes.io/tls") == 0);
		SG_CHECK(ca_bundle && strcmp(ca_bundle, or_empty(json_string_value(json_object_get(
		                                            json_object_get(sec, "data"), "ca.crt")))) == 0);
		json_decref(sec);
		sg_x509_bundle *b = NULL;
		sg_x509_keyinfo ki;
		const char *dns = SVC_DNS;
		SG_CHECK(crt && sg_x509_bundle_parse(&b, crt, strlen(crt)) == SG_OK);
		SG_CHECK(b && sg_x509_names_are(b, 0, SVC_DNS, &dns, 1, NULL));
		SG_CHECK(b && key && sg_x509_key_check(b, 0, key, strlen(key), &ki) == SG_OK);
		SG_CHECK(b && sg_x509_self_signed(b, 0));
		SG_CHECK(crt && ca_crt && strstr(ca_crt, crt) == ca_crt); /* the certificate first */
		sg_x509_bundle_free(b);
		free(crt);
		free(key);
		free(ca_crt);
		SG_CHECK(!kube_fx_exists(k, iss) && !kube_fx_exists(k, cert));
	}
	json_decref(v);
}

/* The webhook configuration names cert-manager's CA injection. */
static bool annotation_is_set(void)
{
	json_t *v = kube_fx_get(k, ref_in(ADM, "validatingwebhookconfigurations", NULL, "trust-manager"));
	bool ok = annotation(v, "cert-manager.io/inject-ca-from") != NULL;
	json_decref(v);
	return ok;
}

static bool cert_manager_crds(void)
{
	sg_kube_ref crd = {.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions"};
	crd.name = "certificates.cert-manager.io";
	bool a = kube_fx_exists(k, crd);
	crd.name = "issuers.cert-manager.io";
	return a && kube_fx_exists(k, crd);
}

/* ---- tests ---- */

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	SG_CHECK(f != NULL);
	if (!f)
		exit(1);
	fputs(text, f);
	fclose(f);
}

/* The TrustManager CRD the 1.20 server can take, should the project's
 * manifest be missing: structural, the spec left open, status a
 * subresource. */
static bool minimal_crd(void)
{
	static const char crd[] =
	    "{\"apiVersion\": \"apiextensions.k8s.io/v1\", \"kind\": \"CustomResourceDefinition\", \"metadata\": "
	    "{\"name\": \"trustmanagers.operator.openshift.io\"}, \"spec\": {\"group\": \"operator.openshift.io\", "
	    "\"names\": {\"kind\": \"TrustManager\", \"listKind\": \"TrustManagerList\", \"plural\": "
	    "\"trustmanagers\", "
	    "\"singular\": \"trustmanager\"}, \"scope\": \"Cluster\", \"versions\": [{\"name\": \"v1alpha1\", "
	    "\"served\": "
	    "true, \"storage\": true, \"subresources\": {\"status\": {}}, \"schema\": {\"openAPIV3Schema\": {\"type\": "
	    "\"object\", \"properties\": {\"spec\": {\"type\": \"object\", \"x-kubernetes-preserve-unknown-fields\": "
	    "true}, \"status\": {\"type\": \"object\", \"x-kubernetes-preserve-unknown-fields\": true}}}}}]}}";
	json_t *o = json_loads(crd, 0, NULL);
	bool ok = o && kube_env_apply_json(k, o, "minimal TrustManager CRD");
	json_decref(o);
	return ok;
}

static void t_start(void)
{
	k = kube_fx_start(getenv("TM_DEBUG") ? SG_LOG_DEBUG : SG_LOG_WARN);
	FILE *crds = fopen(SOURCE_DIR "/packaging/kubernetes/operator-crds.yaml", "r");
	if (crds) {
		fclose(crds);
		SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/packaging/kubernetes/operator-crds.yaml"));
	} else {
		printf("packaging/kubernetes/operator-crds.yaml missing: a minimal CRD instead\n");
		SG_CHECK(minimal_crd());
	}
	ns_create(NS);
	snprintf(late_ns, sizeof(late_ns), "tm-late-%ld", (long)getpid());
	/* A user's Secret in the trust namespace: never touched. */
	json_t *sec = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "Secret", "metadata",
	                        "name", "user-ca", "namespace", NS, "stringData", "ca.crt", "not really");
	SG_CHECK_OK(kube_fx_apply(k, ref_in(NULL, "secrets", NS, "user-ca"), sec, MANAGER));

	for (int i = 0; i < 4; i++) {
		char cn[40];
		snprintf(cn, sizeof(cn), "signet operator test CA %d", i);
		ca[i] = test_cert_pem(cn, true, 0, 86400);
		if (!ca[i])
			exit(1);
	}
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(bundle1, sizeof(bundle1), "%s/tm-bundle1-%ld.pem", tmp && *tmp ? tmp : "/tmp", (long)getpid());
	snprintf(bundle2, sizeof(bundle2), "%s/tm-bundle2-%ld.pem", tmp && *tmp ? tmp : "/tmp", (long)getpid());
	/* A comment, three CAs and one of them twice: the package holds three. */
	char *text = malloc(strlen(ca[0]) * 5 + 100);
	if (!text)
		exit(1);
	sprintf(text, "# test CAs\n%s%s%s%s", ca[0], ca[1], ca[2], ca[1]);
	write_file(bundle1, text);
	sprintf(text, "%s%s%s%s", ca[0], ca[1], ca[2], ca[3]);
	write_file(bundle2, text);
	free(text);
	start_reconciler(SG_TRUSTMANAGER_CA_FILE, bundle1);
	/* What an earlier run against a shared server left: deleted through
	 * the reconciler (the finalizer). */
	const char *const crs[] = {"cluster", "other"};
	for (size_t i = 0; i < 2; i++) {
		if (kube_fx_delete(k, tm_ref(crs[i])) == SG_OK)
			SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref(crs[i])));
	}
	if (kube_fx_delete(k, ref_in(NULL, "pods", NS, "trust-manager-crash")) != SG_OK)
		SG_CHECK(sg_kube_last_status()->code == 404);
}

/* A configuration left by trust-manager's own installation under the same
 * name, pointing at a webhook that is gone, with another field manager's
 * fields. trust-manager's says failurePolicy Fail (every Bundle write
 * refused); this one says Ignore, so that on a shared API server
 * (SIGNET_KUBE_ENV) it refuses no other test's Bundle while it lasts, and
 * the Fail that check_webhook finds is ours. */
static const char leftover_webhook[] =
    "{\"apiVersion\": \"admissionregistration.k8s.io/v1\", \"kind\": \"ValidatingWebhookConfiguration\","
    " \"metadata\": {\"name\": \"trust-manager\"},"
    " \"webhooks\": [{\"name\": \"trust.cert-manager.io\", \"admissionReviewVersions\": [\"v1\"],"
    " \"sideEffects\": \"None\", \"failurePolicy\": \"Ignore\", \"timeoutSeconds\": 30,"
    " \"clientConfig\": {\"service\": {\"name\": \"trust-manager-old\", \"namespace\": \"" NS "\","
    " \"path\": \"/old\", \"port\": 9443}},"
    " \"rules\": [{\"apiGroups\": [\"trust.cert-manager.io\"], \"apiVersions\": [\"v1alpha1\"],"
    " \"operations\": [\"CREATE\", \"UPDATE\"], \"resources\": [\"bundles\"]}]}]}";

static void t_sample(void)
{
	/* Migrating from trust-manager's own installation: its webhook
	 * configuration is there first, and is taken over (check_webhook
	 * below: our Service, path, port and failurePolicy; timeoutSeconds
	 * ours too). */
	SG_CHECK(kube_fx_apply_text(k, leftover_webhook));
	tm_put("cluster", SAMPLE);
	SG_WAIT_FOR(WAIT_MS, has_finalizer("cluster"));
	{
		int f = sg_test_failures;
		SG_WAIT_FOR(WAIT_MS, all_exist());
		if (f != sg_test_failures)
			fprintf(stderr, "  %s\n", seen);
	}
	WAIT_STATE(progressing, "cluster");
	WAIT_IDLE();
	char *uid = cr_uid("cluster");
	check_meta(uid, NULL, NULL, NULL);
	free(uid);

	/* RBAC: least privilege, no Secret access without Custom targets. */
	SG_CHECK(rules_are(ref_in(RBAC, "clusterroles", NULL, "trust-manager"), "[" CLUSTER_RULES "]"));
	SG_CHECK(
	    rules_are(ref_in(RBAC, "roles", NS, "trust-manager"),
	              "[{\"apiGroups\":[\"\"],\"resources\":[\"secrets\"],\"verbs\":[\"get\",\"list\",\"watch\"]}]"));
	SG_CHECK(rules_are(ref_in(RBAC, "roles", NS, "trust-manager:leaderelection"),
	                   "[{\"apiGroups\":[\"coordination.k8s.io\"],\"resources\":[\"leases\"],\"verbs\":[\"get\","
	                   "\"create\",\"update\"]}]"));
	json_t *crb = kube_fx_get(k, ref_in(RBAC, "clusterrolebindings", NULL, "trust-manager"));
	json_t *binding = json_pack("{s:O, s:O}", "roleRef", json_object_get(crb, "roleRef"), "subjects",
	                            json_object_get(crb, "subjects"));
	char *t = binding ? json_dumps(binding, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(binding);
	SG_CHECK(t && strcmp(t, "{\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\","
	                        "\"name\":\"trust-manager\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":"
	                        "\"trust-manager\",\"namespace\":\"cert-manager\"}]}") == 0);
	if (t && !strstr(t, "trust-manager"))
		fprintf(stderr, "  binding %s\n", t);
	free(t);
	json_decref(crb);
	json_t *rb = kube_fx_get(k, ref_in(RBAC, "rolebindings", NS, "trust-manager:leaderelection"));
	const char *rk = json_string_value(json_object_get(json_object_get(rb, "roleRef"), "kind"));
	const char *rn = json_string_value(json_object_get(json_object_get(rb, "roleRef"), "name"));
	SG_CHECK(rk && strcmp(rk, "Role") == 0 && rn && strcmp(rn, "trust-manager:leaderelection") == 0);
	json_decref(rb);

	/* The metrics Service. */
	json_t *svc = kube_fx_get(k, ref_in(NULL, "services", NS, "trust-manager-metrics"));
	const json_t *port = json_array_get(json_object_get(json_object_get(svc, "spec"), "ports"), 0);
	SG_CHECK(json_integer_value(json_object_get(port, "port")) == 9402);
	SG_CHECK(json_integer_value(json_object_get(port, "targetPort")) == 9402);
	const char *sel =
	    json_string_value(json_object_get(json_object_get(json_object_get(svc, "spec"), "selector"), "app"));
	SG_CHECK(sel && strcmp(sel, APP) == 0);
	json_decref(svc);

	/* The default CA package: trust-manager's JSON, the bundle's three
	 * distinct CAs, the version given. */
	json_t *pkg = package_now();
	SG_CHECK(pkg != NULL);
	const char *name = json_string_value(json_object_get(pkg, "name"));
	const char *ver = json_string_value(json_object_get(pkg, "version"));
	const char *bundle = json_string_value(json_object_get(pkg, "bundle"));
	SG_CHECK(name && strcmp(name, "cert-manager-package-debian") == 0);
	SG_CHECK(ver && strcmp(ver, PKG_VERSION) == 0);
	SG_CHECK(bundle && count(bundle, "-----BEGIN CERTIFICATE-----") == 3);
	SG_CHECK(bundle && bundle_has(bundle, ca[0]) && bundle_has(bundle, ca[1]) && bundle_has(bundle, ca[2]));
	char hash[65] = "";
	if (bundle)
		sha256_hex(bundle, hash);
	SG_CHECK(template_hash_is(hash));
	json_decref(pkg);

	/* The Deployment. */
	json_t *d = kube_fx_get(k, DEPLOY());
	const json_t *spec = json_object_get(d, "spec");
	const json_t *pspec = json_object_get(json_object_get(spec, "template"), "spec");
	const json_t *c = container_of(d);
	SG_CHECK(json_integer_value(json_object_get(spec, "replicas")) == 1);
	const char *img = json_string_value(json_object_get(c, "image"));
	SG_CHECK(img && strcmp(img, IMAGE) == 0);
	const char *sa = json_string_value(json_object_get(pspec, "serviceAccountName"));
	SG_CHECK(sa && strcmp(sa, "trust-manager") == 0);
	const json_t *args = json_object_get(c, "args");
	bool args_ok = json_array_size(args) == sizeof(sample_args) / sizeof(sample_args[0]);
	for (size_t i = 0; args_ok && i < json_array_size(args); i++)
		args_ok = strcmp(json_string_value(json_array_get(args, i)), sample_args[i]) == 0;
	SG_CHECK(args_ok);
	if (!args_ok) {
		char *a = json_dumps(args, JSON_COMPACT);
		fprintf(stderr, "  args %s\n", a ? a : "-");
		free(a);
	}
	check_signet_trust_parses(args);
	const json_t *rp = json_object_get(json_object_get(c, "readinessProbe"), "httpGet");
	const json_t *lp = json_object_get(json_object_get(c, "livenessProbe"), "httpGet");
	SG_CHECK(json_integer_value(json_object_get(rp, "port")) == 6060 &&
	         strcmp(json_string_value(json_object_get(rp, "path")), "/readyz") == 0);
	SG_CHECK(json_integer_value(json_object_get(lp, "port")) == 6060 &&
	         strcmp(json_string_value(json_object_get(lp, "path")), "/healthz") == 0);
	const json_t *ports = json_object_get(c, "ports");
	SG_CHECK(json_integer_value(json_object_get(json_array_get(ports, 0), "containerPort")) == 9402 &&
	         json_integer_value(json_object_get(json_array_get(ports, 1), "containerPort")) == 6060);
	const json_t *sc = json_object_get(c, "securityContext");
	SG_CHECK(json_is_true(json_object_get(sc, "runAsNonRoot")) &&
	         json_is_true(json_object_get(sc, "readOnlyRootFilesystem")) &&
	         json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
	const char *drop =
	    json_string_value(json_array_get(json_object_get(json_object_get(sc, "capabilities"), "drop"), 0));
	SG_CHECK(drop && strcmp(drop, "ALL") == 0);
	const char *seccomp = json_string_value(json_object_get(json_object_get(sc, "seccompProfile"), "type"));
	SG_CHECK(seccomp && strcmp(seccomp, "RuntimeDefault") == 0);
	/* The webhook's certificate at /tls, the package at /packages. */
	const json_t *mounts = json_object_get(c, "volumeMounts");
	SG_CHECK(json_array_size(mounts) == 2);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(json_array_get(mounts, 0), "mountPath"))), "/tls") ==
	         0);
	SG_CHECK(strcmp(or_empty(json_string_value(json_object_get(json_array_get(mounts, 1), "mountPath"))),
	                "/packages") == 0);
	const json_t *vols = json_object_get(pspec, "volumes");
	const char *vsec =
	    json_string_value(json_object_get(json_object_get(json_array_get(vols, 0), "secret"), "secretName"));
	SG_CHECK(vsec && strcmp(vsec, TLS_SECRET) == 0);
	const char *vcm =
	    json_string_value(json_object_get(json_object_get(json_array_get(vols, 1), "configMap"), "name"));
	SG_CHECK(vcm && strcmp(vcm, PKG_CM) == 0);
	SG_CHECK(json_integer_value(json_object_get(json_array_get(ports, 2), "containerPort")) == 6443);
	json_decref(d);

	/* Status. */
	SG_CHECK(strcmp(status_str("cluster", "trustManagerImage"), IMAGE) == 0);
	SG_CHECK(strcmp(status_str("cluster", "trustNamespace"), NS) == 0);
	SG_CHECK(strcmp(status_str("cluster", "secretTargetsPolicy"), "Disabled") == 0);
	SG_CHECK(strcmp(status_str("cluster", "defaultCAPackagePolicy"), "Enabled") == 0);
	SG_CHECK(strcmp(status_str("cluster", "filterExpiredCertificatesPolicy"), "Enabled") == 0);
	/* The Bundle webhook, with signet's own certificate (cert-manager's
	 * on a shared server that has its CRDs). */
	check_webhook(cert_manager_crds());
	json_t *vwc = kube_fx_get(k, ref_in(ADM, "validatingwebhookconfigurations", NULL, "trust-manager"));
	SG_CHECK(json_integer_value(json_object_get(json_array_get(json_object_get(vwc, "webhooks"), 0),
	                                            "timeoutSeconds")) == 5);
	json_decref(vwc);
	print_stats("sample applied");
}

/* resources, affinity, tolerations and nodeSelector of a spec, and the
 * pod spec they must become (compact JSON, sorted keys). */
#define SCHEDULING                                                                                                     \
	"\"resources\": {\"requests\": {\"cpu\": \"10m\", \"memory\": \"32Mi\"}, \"limits\": {\"memory\": "            \
	"\"64Mi\"}}, \"nodeSelector\": {\"kubernetes.io/os\": \"linux\"}, \"tolerations\": [{\"key\": "                \
	"\"signet.dev/dedicated\", \"operator\": \"Exists\", \"effect\": \"NoSchedule\"}], \"affinity\": "             \
	"{\"nodeAffinity\": {\"requiredDuringSchedulingIgnoredDuringExecution\": {\"nodeSelectorTerms\": "             \
	"[{\"matchExpressions\": [{\"key\": \"kubernetes.io/arch\", \"operator\": \"In\", \"values\": "                \
	"[\"amd64\"]}]}]}}}"
#define SCHEDULED                                                                                                      \
	"{\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":"  \
	"[{\"matchExpressions\":[{\"key\":\"kubernetes.io/arch\",\"operator\":\"In\",\"values\":[\"amd64\"]}]}]}}},"   \
	"\"nodeSelector\":{\"kubernetes.io/os\":\"linux\"},\"resources\":{\"limits\":{\"memory\":\"64Mi\"},"           \
	"\"requests\":{\"cpu\":\"10m\",\"memory\":\"32Mi\"}},\"tolerations\":[{\"effect\":\"NoSchedule\",\"key\":"     \
	"\"signet.dev/dedicated\",\"operator\":\"Exists\"}]}"

/* Whether the Deployment's pod spec holds SCHEDULED. */
static bool scheduling_is(void)
{
	json_t *d = kube_fx_get(k, DEPLOY());
	const json_t *pspec = json_object_get(json_object_get(json_object_get(d, "spec"), "template"), "spec");
	json_t *got = json_pack("{s:O*, s:O*, s:O*, s:O*}", "affinity", json_object_get(pspec, "affinity"),
	                        "nodeSelector", json_object_get(pspec, "nodeSelector"), "resources",
	                        json_object_get(container_of(d), "resources"), "tolerations",
	                        json_object_get(pspec, "tolerations"));
	char *t = got ? json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	bool ok = t && strcmp(t, SCHEDULED) == 0;
	if (!ok)
		fprintf(stderr, "  scheduling: %s\n", t ? t : "-");
	free(t);
	json_decref(got);
	json_decref(d);
	return ok;
}

/* How many Events about TrustManager cluster have reason (they live in
 * "default": the CR is cluster-scoped). */
static size_t events(const char *reason)
{
	char sel[200];
	snprintf(sel, sizeof(sel), "involvedObject.kind=TrustManager,involvedObject.name=cluster,reason=%s", reason);
	sg_kube_list_opts lo = {.field_selector = sel};
	size_t n = kube_fx_count(k, ref_in(NULL, "events", "default", NULL), &lo);
	return n == SIZE_MAX ? 0 : n;
}

static void t_ready(void)
{
	/* Observed but not available: still rolling out. */
	deployment_status(false);
	WAIT_COND("cluster", "Ready", "False", "Progressing", "rolling out");
	SG_CHECK(progressing("cluster"));
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
}

static void t_degraded(void)
{
	crashing_pod("trust-manager-crash");
	WAIT_COND("cluster", "Degraded", "True", "OperandFailed", CRASH_MSG);
	SG_CHECK(cond_is("cluster", "Ready", "False", "OperandFailed", "CrashLoopBackOff"));
	SG_CHECK(cond_is("cluster", "Progressing", "False", "OperandFailed", NULL));
	SG_WAIT_FOR(WAIT_MS, events("OperandFailed") > 0);
	SG_CHECK_OK(kube_fx_delete(k, ref_in(NULL, "pods", NS, "trust-manager-crash")));
	WAIT_STATE(ready, "cluster");
}

static void t_spec_change(void)
{
	int64_t dgen = generation_of(DEPLOY());
	tm_put(
	    "cluster",
	    "{\"trustManagerConfig\": {\"logLevel\": 3, \"logFormat\": \"json\", \"trustNamespace\": \"cert-manager\", "
	    "\"defaultCAPackage\": {\"policy\": \"Enabled\"}, \"filterExpiredCertificates\": \"Disabled\", "
	    "\"secretTargets\": {\"policy\": \"Custom\", \"authorizedSecrets\": [\"zeta-ca\", "
	    "\"alpha-ca\"]}, " SCHEDULING "}}");
	WAIT_ARG("--secret-targets-enabled=true", true);
	WAIT_ARG("--filter-expired-certificates=true", false);
	SG_CHECK(arg_is("--log-level=3", true) && arg_is("--log-format=json", true));
	SG_CHECK(scheduling_is());
	WAIT_RULES(ref_in(RBAC, "clusterroles", NULL, "trust-manager"), "[" CLUSTER_RULES SECRET_RULES "]");
	SG_CHECK(generation_of(DEPLOY()) > dgen);
	/* The new generation is not observed yet: not Ready. */
	WAIT_STATE(progressing, "cluster");
	SG_CHECK(strcmp(status_str("cluster", "secretTargetsPolicy"), "Custom") == 0);
	SG_CHECK(strcmp(status_str("cluster", "filterExpiredCertificatesPolicy"), "Disabled") == 0);
	json_t *a = args_now();
	check_signet_trust_parses(a);
	json_decref(a);
	deployment_status(true);
	WAIT_STATE(ready, "cluster");

	/* The design's names for the same: Specific (the authorized names),
	 * then All (any Secret); the status says the policy as written. */
	tm_put("cluster",
	       "{\"trustManagerConfig\": {\"defaultCAPackage\": {\"policy\": \"Enabled\"}, \"secretTargets\": "
	       "{\"policy\": \"Specific\", \"authorizedSecrets\": [\"alpha-ca\", \"zeta-ca\"]}}}");
	SG_WAIT_FOR(WAIT_MS, strcmp(status_str("cluster", "secretTargetsPolicy"), "Specific") == 0);
	WAIT_RULES(ref_in(RBAC, "clusterroles", NULL, "trust-manager"), "[" CLUSTER_RULES SECRET_RULES "]");
	SG_CHECK(arg_is("--secret-targets-enabled=true", true));
	tm_put("cluster", "{\"trustManagerConfig\": {\"defaultCAPackage\": {\"policy\": \"Enabled\"}, "
	                  "\"secretTargets\": {\"policy\": \"All\"}}}");
	SG_WAIT_FOR(WAIT_MS, strcmp(status_str("cluster", "secretTargetsPolicy"), "All") == 0);
	WAIT_RULES(ref_in(RBAC, "clusterroles", NULL, "trust-manager"), "[" CLUSTER_RULES SECRET_RULES_ALL "]");
	SG_CHECK(arg_is("--secret-targets-enabled=true", true));
	deployment_status(true);
	WAIT_STATE(ready, "cluster");

	/* The package off: its ConfigMap, mount, volume, argument and hash go. */
	tm_put("cluster", "{\"trustManagerConfig\": {\"defaultCAPackage\": {\"policy\": \"Disabled\"}}}");
	WAIT_ARG("--default-package-location=/packages/" PKG_KEY, false);
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, ref_in(NULL, "configmaps", NS, PKG_CM)));
	SG_CHECK(template_hash_is(NULL));
	json_t *d = kube_fx_get(k, DEPLOY());
	const json_t *pspec = json_object_get(json_object_get(json_object_get(d, "spec"), "template"), "spec");
	/* the webhook's certificate only */
	SG_CHECK(json_array_size(json_object_get(pspec, "volumes")) == 1);
	SG_CHECK(json_array_size(json_object_get(container_of(d), "volumeMounts")) == 1);
	json_decref(d);
	WAIT_ARG("--secret-targets-enabled=true", false);
	WAIT_RULES(ref_in(RBAC, "clusterroles", NULL, "trust-manager"), "[" CLUSTER_RULES "]");
	SG_WAIT_FOR(WAIT_MS, strcmp(status_str("cluster", "defaultCAPackagePolicy"), "Disabled") == 0);
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	print_stats("spec changes rolled");
}

static void invalid(const char *spec, const char *part)
{
	WAIT_IDLE();
	char *drv = kube_fx_rv(k, DEPLOY());
	sg_trustmanager_stats before = stats();
	tm_put("cluster", "%s", spec);
	WAIT_COND("cluster", "Ready", "False", "InvalidSpec", part);
	SG_CHECK(cond_is("cluster", "Degraded", "True", "InvalidSpec", part));
	WAIT_IDLE();
	sg_trustmanager_stats after = stats();
	SG_CHECK(after.created == before.created && after.repaired == before.repaired &&
	         after.deleted == before.deleted);
	SG_CHECK(after.writes - before.writes == after.status_writes - before.status_writes);
	char *now = kube_fx_rv(k, DEPLOY());
	SG_CHECK(strcmp(drv, now) == 0);
	free(now);
	free(drv);
}

static void t_invalid(void)
{
	invalid("{\"trustManagerConfig\": {\"secretTargets\": {\"policy\": \"Custom\"}}}",
	        "authorizedSecrets must not be empty when policy is Custom");
	invalid(
	    "{\"trustManagerConfig\": {\"secretTargets\": {\"policy\": \"Disabled\", \"authorizedSecrets\": [\"a\"]}}}",
	    "authorizedSecrets must be empty when policy is not Specific");
	/* the design's own rules, in its words */
	invalid("{\"trustManagerConfig\": {\"secretTargets\": {\"policy\": \"Specific\"}}}",
	        "authorizedSecrets must not be empty when policy is Specific");
	invalid("{\"trustManagerConfig\": {\"secretTargets\": {\"policy\": \"All\", \"authorizedSecrets\": [\"a\"]}}}",
	        "authorizedSecrets must be empty when policy is not Specific");
	invalid("{\"trustManagerConfig\": {}, \"controllerConfig\": {\"labels\": {\"bad key!\": \"x\"}}}",
	        "invalid key \"bad key!\"");
	invalid("{\"trustManagerConfig\": {}, \"controllerConfig\": {\"labels\": {\"team\": \"-bad\"}}}",
	        "invalid value \"-bad\"");
	invalid("{\"trustManagerConfig\": {}, \"controllerConfig\": {\"annotations\": {\"example.com/a/b\": \"x\"}}}",
	        "invalid key");
	/* The status kept what is in effect. */
	SG_CHECK(strcmp(status_str("cluster", "trustNamespace"), NS) == 0);
	SG_CHECK(strcmp(status_str("cluster", "trustManagerImage"), IMAGE) == 0);

	/* Valid again, with labels and annotations for every object, and the
	 * package back. */
	tm_put("cluster", "{\"trustManagerConfig\": {\"defaultCAPackage\": {\"policy\": \"Enabled\"}, " SCHEDULING "}, "
	                  "\"controllerConfig\": {\"labels\": {\"team\": \"security\"}, \"annotations\": "
	                  "{\"example.com/note\": \"managed by signet\"}}}");
	SG_WAIT_FOR(WAIT_MS, all_exist());
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	char *uid = cr_uid("cluster");
	check_meta(uid, "example.com/note", "managed by signet", "team");
	free(uid);
	SG_CHECK(scheduling_is());
	json_t *d = kube_fx_get(k, DEPLOY());
	const json_t *tmpl = json_object_get(json_object_get(d, "spec"), "template");
	SG_CHECK(label(tmpl, "team") && annotation(tmpl, "example.com/note"));
	json_decref(d);
}

/* Whether no object carries label key lkey or annotation akey. */
static bool meta_gone(const char *lkey, const char *akey)
{
	for (size_t i = 0; i < NOBJECTS; i++) {
		json_t *o = kube_fx_get(k, made_ref(&objects[i]));
		bool has = !o || label(o, lkey) || annotation(o, akey);
		json_decref(o);
		if (has) {
			snprintf(seen, sizeof(seen), "%s %s still labelled or annotated", objects[i].resource,
			         objects[i].name);
			return false;
		}
	}
	return true;
}

static bool secret_remade(const char *old_uid)
{
	json_t *o = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
	const char *uid = sg_kube_meta_str(o, "uid");
	bool remade = uid && strcmp(uid, old_uid) != 0 && label(o, "team") && annotation(o, "example.com/note");
	json_decref(o);
	return remade;
}

/* Whether sec's one managedFields entry is the operator's apply (nothing
 * else owns a field of it). */
static bool owned_by_apply(const json_t *sec)
{
	const json_t *mf = json_object_get(json_object_get(sec, "metadata"), "managedFields");
	const json_t *m = json_array_get(mf, 0);
	const char *op = json_string_value(json_object_get(m, "operation"));
	const char *who = json_string_value(json_object_get(m, "manager"));
	bool one =
	    json_array_size(mf) == 1 && op && who && strcmp(op, "Apply") == 0 && strcmp(who, SG_OPR_FIELD_MANAGER) == 0;
	if (!one)
		snprintf(seen, sizeof(seen), "the Secret's fields owned by %zu entries, the first %s (%s)",
		         json_array_size(mf), who ? who : "-", op ? op : "-");
	return one;
}

/* owned_by_apply of the webhook Secret as the API server has it now. */
static bool secret_owned_by_apply(void)
{
	json_t *sec = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
	bool one = owned_by_apply(sec);
	sg_kube_secret_release(&sec);
	return one;
}

/* A label and an annotation dropped from controllerConfig leave every
 * object, the webhook's Secret too when it was created with them. That
 * Secret alone is created by a POST (a name taken since must be refused,
 * which an apply cannot say): unless the POST's fields are handed to the
 * operator's apply, no later apply removes them. One created before
 * signet did so (an update's fields) is handed over at the next pass. */
static void t_labels_dropped(void)
{
	WAIT_IDLE();
	json_t *s = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
	char *old_uid = strdup(s && sg_kube_meta_str(s, "uid") ? sg_kube_meta_str(s, "uid") : "");
	json_decref(s);
	SG_CHECK_OK(kube_fx_delete(k, ref_in(NULL, "secrets", NS, TLS_SECRET)));
	SG_WAIT_FOR(WAIT_MS, secret_remade(old_uid));
	free(old_uid);
	WAIT_IDLE();
	SG_CHECK(secret_owned_by_apply());

	/* As a Secret created before (by a POST naming no field manager):
	 * its fields an update's by the User-Agent's manager. The operator
	 * hands them to its apply at the pass this write brings. */
	sg_kube_ref sref = ref_in(NULL, "secrets", NS, TLS_SECRET);
	json_t *ops = json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}, {s:s, s:s, s:s}]", "op", "test", "path",
	                        "/metadata/managedFields/0/manager", "value", SG_OPR_FIELD_MANAGER, "op", "replace",
	                        "path", "/metadata/managedFields/0/manager", "value", SG_KUBE_USER_AGENT_MANAGER, "op",
	                        "replace", "path", "/metadata/managedFields/0/operation", "value", "Update");
	json_t *legacy = NULL;
	SG_CHECK_OK(sg_kube_json_patch(k, &sref, ops, &legacy));
	json_decref(ops);
	/* The patch's own answer: a read now could already see the operator's
	 * handover. */
	SG_CHECK(legacy && !owned_by_apply(legacy));
	sg_kube_secret_release(&legacy);
	SG_WAIT_FOR(WAIT_MS, secret_owned_by_apply());
	WAIT_IDLE();

	tm_put("cluster",
	       "{\"trustManagerConfig\": {\"defaultCAPackage\": {\"policy\": \"Enabled\"}, " SCHEDULING "}}");
	SG_WAIT_FOR(WAIT_MS, meta_gone("team", "example.com/note"));
	if (!meta_gone("team", "example.com/note"))
		fprintf(stderr, "  %s\n", seen);
	SG_CHECK(secret_owned_by_apply());

	/* Back as t_invalid left them. */
	tm_put("cluster", "{\"trustManagerConfig\": {\"defaultCAPackage\": {\"policy\": \"Enabled\"}, " SCHEDULING "}, "
	                  "\"controllerConfig\": {\"labels\": {\"team\": \"security\"}, \"annotations\": "
	                  "{\"example.com/note\": \"managed by signet\"}}}");
	SG_WAIT_FOR(WAIT_MS, secret_remade(""));
	WAIT_IDLE();
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	char *uid = cr_uid("cluster");
	check_meta(uid, "example.com/note", "managed by signet", "team");
	free(uid);
}

/* Replaces the live object's field (a merge patch by the test's client,
 * another field manager). patch is stolen. */
#define PATCH(ref, p) SG_CHECK_OK(kube_fx_patch(k, (ref), (p)))

static void t_drift(void)
{
	WAIT_IDLE();
	sg_trustmanager_stats before = stats();

	/* The Deployment's arguments edited (a PUT of the whole object). */
	json_t *d = kube_fx_get(k, DEPLOY());
	json_t *args = json_object_get(container_of(d), "args");
	json_array_remove(args, json_array_size(args) - 1);
	json_array_append_new(args, json_string("--bogus=1"));
	sg_kube_ref dref = DEPLOY();
	SG_CHECK_OK(sg_kube_update(k, &dref, d, NULL));
	json_decref(d);
	WAIT_ARG("--bogus=1", false);
	WAIT_ARG("--default-package-location=/packages/" PKG_KEY, true);

	/* The Service deleted. */
	SG_CHECK_OK(kube_fx_delete(k, ref_in(NULL, "services", NS, "trust-manager-metrics")));
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, ref_in(NULL, "services", NS, "trust-manager-metrics")));

	/* The ClusterRole and a Role edited. */
	PATCH(ref_in(RBAC, "clusterroles", NULL, "trust-manager"),
	      json_pack("{s:[{s:[s], s:[s], s:[s]}]}", "rules", "apiGroups", "", "resources", "secrets", "verbs", "*"));
	WAIT_RULES(ref_in(RBAC, "clusterroles", NULL, "trust-manager"), "[" CLUSTER_RULES "]");
	PATCH(ref_in(RBAC, "roles", NS, "trust-manager:leaderelection"),
	      json_pack("{s:[{s:[s], s:[s], s:[s]}]}", "rules", "apiGroups", "coordination.k8s.io", "resources",
	                "leases", "verbs", "*"));
	WAIT_RULES(ref_in(RBAC, "roles", NS, "trust-manager:leaderelection"),
	           "[{\"apiGroups\":[\"coordination.k8s.io\"],\"resources\":[\"leases\"],\"verbs\":[\"get\",\"create\","
	           "\"update\"]}]");
	/* Counted after the writes seen above; idle() cannot tell a reconcile
	 * in progress (not queued) from none. */
	SG_WAIT_FOR(WAIT_MS, stats().created >= before.created + 1 && stats().repaired >= before.repaired + 3);
	WAIT_IDLE();
	sg_trustmanager_stats after = stats();
	SG_CHECK(events("Created") > 0 && events("Applied") > 0 && events("InvalidSpec") > 0 && events("Ready") > 0);
	SG_CHECK(after.created >= before.created + 1);   /* the Service */
	SG_CHECK(after.repaired >= before.repaired + 3); /* Deployment, ClusterRole, Role */
	/* The repaired Deployment is a new generation: rolled out again. */
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	print_stats("drift repaired");
}

static void t_quiet(void)
{
	WAIT_IDLE();
	sg_trustmanager_stats before = stats();
	char *drv = kube_fx_rv(k, DEPLOY()), *crv = kube_fx_rv(k, tm_ref("cluster"));
	sg_ctrl_stats c0;
	sg_ctrl_stats_get(sg_trustmanager_controller(tm), &c0);
	/* An event the reconciler handles: the CR relabelled (no new
	 * generation). */
	PATCH(tm_ref("cluster"), json_pack("{s:{s:{s:s}}}", "metadata", "labels", "tm-test/touched", "yes"));
	sg_ctrl_stats c1;
	SG_WAIT_FOR(WAIT_MS, (sg_ctrl_stats_get(sg_trustmanager_controller(tm), &c1), c1.reconciles > c0.reconciles));
	free(crv);
	crv = kube_fx_rv(k, tm_ref("cluster"));
	/* The quiet period is what is tested (no write follows the event),
	 * so a fixed time is right here, not a wait for a state. */
	sg_sleep_ms(QUIET_MS);
	WAIT_IDLE();
	sg_trustmanager_stats after = stats();
	SG_CHECK(after.writes == before.writes);
	if (after.writes != before.writes)
		print_stats("quiet cluster, yet writes");
	char *drv2 = kube_fx_rv(k, DEPLOY()), *crv2 = kube_fx_rv(k, tm_ref("cluster"));
	SG_CHECK(strcmp(drv, drv2) == 0 && strcmp(crv, crv2) == 0);
	free(drv);
	free(crv);
	free(drv2);
	free(crv2);
}

static char *stale_crt, *renewed_seen;

/* The Secret holds a new certificate (neither stale_crt nor before),
 * first in ca.crt, the stale one after it. */
static bool renewed(const char *before)
{
	char *crt = secret_value(TLS_SECRET, "tls.crt"), *ca_crt = secret_value(TLS_SECRET, "ca.crt");
	bool ok = crt && ca_crt && strcmp(crt, stale_crt) != 0 && strcmp(crt, or_empty(before)) != 0 &&
	          strstr(ca_crt, crt) == ca_crt && strstr(ca_crt, stale_crt) != NULL;
	free(renewed_seen);
	renewed_seen = ca_crt;
	free(crt);
	return ok;
}

/* signet's own serving certificate is made again when the one in the
 * Secret does not fit (here one without the Service's name and not of its
 * key, as a foreign or outdated one would be); the old one stays in
 * ca.crt while valid, and the caBundle follows. */
static void t_renew(void)
{
	if (cert_manager_crds())
		return;
	WAIT_IDLE();
	char *before = secret_value(TLS_SECRET, "tls.crt");
	stale_crt = test_cert_pem(SVC_DNS, false, -3600, 86400);
	SG_CHECK(before && stale_crt);
	if (!stale_crt)
		exit(1);
	size_t n = sg_b64_encoded_len(SG_B64_STD, strlen(stale_crt));
	char *b64 = malloc(n + 1);
	SG_CHECK(b64 && sg_b64_encode(SG_B64_STD, (const uint8_t *)stale_crt, strlen(stale_crt), b64, n + 1) == SG_OK);
	PATCH(ref_in(NULL, "secrets", NS, TLS_SECRET), json_pack("{s:{s:s}}", "data", "tls.crt", b64 ? b64 : ""));
	free(b64);
	{
		int f = sg_test_failures;
		SG_WAIT_FOR(WAIT_MS, renewed(before));
		if (f != sg_test_failures)
			fprintf(stderr, "  ca.crt %s\n", or_empty(renewed_seen));
	}
	WAIT_IDLE();
	check_webhook(false);
	free(before);
	free(stale_crt);
	free(renewed_seen);
	stale_crt = renewed_seen = NULL;
}

/* Whether data[key] of the informer's copy of the Secret is b64. */
static bool cached_value_is(sg_kube_informer *inf, const char *key, const char *b64)
{
	json_t *sec = sg_kube_informer_get(inf, NS, TLS_SECRET);
	const char *v = json_string_value(json_object_get(json_object_get(sec, "data"), key));
	bool ok = v && b64 && strcmp(v, b64) == 0;
	json_decref(sec);
	return ok;
}

static bool cached_absent(sg_kube_informer *inf)
{
	json_t *sec = sg_kube_informer_get(inf, NS, TLS_SECRET);
	json_decref(sec);
	return sec == NULL;
}

static char *b64_text(const char *text)
{
	size_t n = sg_b64_encoded_len(SG_B64_STD, strlen(text));
	char *out = malloc(n + 1);
	if (!out || sg_b64_encode(SG_B64_STD, (const uint8_t *)text, strlen(text), out, n + 1) != SG_OK)
		exit(1);
	return out;
}

/* The Secret's data[key] as the API server holds it (base64; owned). */
static char *live_b64(const char *key)
{
	json_t *sec = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
	const char *v = json_string_value(json_object_get(json_object_get(sec, "data"), key));
	char *out = v ? strdup(v) : NULL;
	json_decref(sec);
	return out;
}

static bool live_is_ours(void)
{
	json_t *sec = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
	const char *owner = json_string_value(
	    json_object_get(json_object_get(json_object_get(sec, "metadata"), "labels"), "operator.signet.dev/owner"));
	bool ours = owner && strcmp(owner, "cluster") == 0;
	json_decref(sec);
	return ours;
}

/* What the reconciler's cache holds when the API server already has a
 * good pair written since. */
typedef enum {
	STALE_COPY,     /* a copy whose certificate needs replacing */
	NO_COPY,        /* none: ours made moments ago, its echo not back */
	NO_COPY_FOREIGN /* none: the Secret of the name is not ours (no labels: the informer never sees it) */
} stale_mode;

/* The Secret is decided on one copy and written only over it. With a
 * stale copy the new pair is refused (409; the conflicts counter), the
 * good one stays, and once the cache catches up it is kept as it is and
 * the caBundle is its. Before, the stale copy's new pair replaced the
 * good one, and the certificate pods may already serve was gone from the
 * caBundle. With no copy the server's Secret decides: ours is kept (no
 * second pair), one not ours is taken over with a new pair.
 *
 * The interleaving is made certain: passes stop before the certificate
 * while the spec is invalid, and the reconciler's Secret informer is
 * stopped (its store kept) once it holds the copy to decide on. */
static void stale_secret(stale_mode mode)
{
	WAIT_IDLE();
	bool was_ready = ready("cluster");
	sg_ctrl *ctl = sg_trustmanager_controller(tm);
	sg_kube_informer *secrets = NULL;
	for (size_t i = 0; !secrets && sg_ctrl_informer(ctl, i); i++) {
		json_t *o = sg_kube_informer_get(sg_ctrl_informer(ctl, i), NS, TLS_SECRET);
		if (o)
			secrets = sg_ctrl_informer(ctl, i);
		json_decref(o);
	}
	SG_CHECK(secrets != NULL);
	json_t *cr = kube_fx_get(k, tm_ref("cluster"));
	char *spec = json_dumps(json_object_get(cr, "spec"), JSON_COMPACT);
	json_decref(cr);
	json_t *live = kube_fx_get(k, ref_in(NULL, "secrets", NS, TLS_SECRET));
	json_t *labels = mode == NO_COPY_FOREIGN
	                     ? json_pack("{s:s}", "app", "someone-else")
	                     : json_deep_copy(json_object_get(json_object_get(live, "metadata"), "labels"));
	json_decref(live);
	SG_CHECK(spec && labels);
	if (!secrets || !spec || !labels)
		exit(1);
	invalid("{\"trustManagerConfig\": {\"secretTargets\": {\"policy\": \"Custom\"}}}",
	        "authorizedSecrets must not be empty when policy is Custom");

	char *stale = test_cert_pem(SVC_DNS, false, -3600, 86400);
	if (!stale)
		exit(1);
	char *stale_b64 = b64_text(stale);
	if (mode != STALE_COPY) {
		SG_CHECK_OK(kube_fx_delete(k, ref_in(NULL, "secrets", NS, TLS_SECRET)));
		SG_WAIT_FOR(WAIT_MS, cached_absent(secrets));
	} else {
		PATCH(ref_in(NULL, "secrets", NS, TLS_SECRET), json_pack("{s:{s:s}}", "data", "tls.crt", stale_b64));
		SG_WAIT_FOR(WAIT_MS, cached_value_is(secrets, "tls.crt", stale_b64));
	}
	WAIT_IDLE();
	sg_kube_informer_stop(secrets);

	/* the pair written meanwhile: good for the Service's name, its
	 * certificate the caBundle */
	const char *dns = SVC_DNS;
	sg_softkey_request r = {.type = SG_SOFTKEY_EC_P256,
	                        .cn = dns,
	                        .dns = &dns,
	                        .ndns = 1,
	                        .ttl = 30 * 86400,
	                        .ext_key_usage = SG_EKU_SERVER_AUTH};
	char *nkey = NULL, *ncrt = NULL;
	SG_CHECK_OK(sg_softkey_self_signed(&r, &nkey, &ncrt));
	if (!nkey || !ncrt)
		exit(1);
	char *crt_b64 = b64_text(ncrt), *key_b64 = b64_text(nkey);
	json_t *data = json_pack("{s:s, s:s, s:s}", "tls.crt", crt_b64, "tls.key", key_b64, "ca.crt", crt_b64);
	if (mode != STALE_COPY)
		SG_CHECK_OK(kube_fx_create(k, ref_in(NULL, "secrets", NS, NULL),
		                           json_pack("{s:s, s:s, s:{s:s, s:s, s:O}, s:s, s:o}", "apiVersion", "v1",
		                                     "kind", "Secret", "metadata", "name", TLS_SECRET, "namespace", NS,
		                                     "labels", labels, "type", "kubernetes.io/tls", "data", data)));
	else
		PATCH(ref_in(NULL, "secrets", NS, TLS_SECRET), json_pack("{s:o}", "data", data));

	sg_trustmanager_stats before = stats();
	tm_put("cluster", "%s", spec);
	if (mode == STALE_COPY)
		SG_WAIT_FOR(WAIT_MS, stats().conflicts > before.conflicts);
	else if (mode == NO_COPY)
		SG_WAIT_FOR(WAIT_MS, !cond_is("cluster", "Ready", "False", "InvalidSpec", NULL));
	else
		SG_WAIT_FOR(WAIT_MS, live_is_ours());
	WAIT_IDLE();
	uint64_t refused = stats().conflicts;
	SG_CHECK(mode == STALE_COPY || refused == before.conflicts);
	char *crt = secret_value(TLS_SECRET, "tls.crt"), *key = secret_value(TLS_SECRET, "tls.key");
	if (mode == NO_COPY_FOREIGN) /* taken over: a pair of ours */
		SG_CHECK(crt && strcmp(crt, ncrt) != 0 && key && strcmp(key, nkey) != 0);
	else /* kept */
		SG_CHECK(crt && strcmp(crt, ncrt) == 0 && key && strcmp(key, nkey) == 0);
	free(crt);
	if (key)
		sg_wipe(key, strlen(key));
	free(key);

	/* caught up: the pair is kept, and the caBundle is its */
	char *now_b64 = live_b64("tls.crt");
	SG_CHECK_OK(sg_kube_informer_start(secrets));
	SG_WAIT_FOR(WAIT_MS, cached_value_is(secrets, "tls.crt", now_b64));
	sg_ctrl_add(ctl, "cluster");
	if (was_ready)
		WAIT_STATE(ready, "cluster");
	WAIT_IDLE();
	char *after_b64 = live_b64("tls.crt");
	crt = secret_value(TLS_SECRET, "tls.crt");
	char *ca_crt = secret_value(TLS_SECRET, "ca.crt");
	SG_CHECK(after_b64 && now_b64 && strcmp(after_b64, now_b64) == 0);
	SG_CHECK(crt && ca_crt && strstr(ca_crt, crt) == ca_crt);
	check_webhook(false);
	SG_CHECK(stats().conflicts == refused); /* none once the cache is current */
	free(after_b64);
	free(now_b64);
	free(crt);
	free(ca_crt);
	sg_wipe(nkey, strlen(nkey));
	sg_wipe(key_b64, strlen(key_b64));
	free(nkey);
	free(ncrt);
	free(key_b64);
	free(crt_b64);
	free(stale_b64);
	free(stale);
	free(spec);
	json_decref(labels);
}

static void t_stale_secret(void)
{
	if (cert_manager_crds())
		return;
	stale_secret(STALE_COPY);
	stale_secret(NO_COPY);
	stale_secret(NO_COPY_FOREIGN);
}

/* An operator restarted with another CA bundle (a new ca-certificates):
 * the package is rewritten and the pods roll (the hash). */
static void t_package_change(void)
{
	WAIT_IDLE();
	json_t *pkg = package_now();
	char old_hash[65] = "";
	if (json_string_value(json_object_get(pkg, "bundle")))
		sha256_hex(json_string_value(json_object_get(pkg, "bundle")), old_hash);
	json_decref(pkg);
	int64_t dgen = generation_of(DEPLOY());
	sg_trustmanager_free(tm);
	tm = NULL;
	start_reconciler(SG_TRUSTMANAGER_CA_FILE, bundle2);
	SG_WAIT_FOR(WAIT_MS, package_certs() == 4);
	pkg = package_now();
	char hash[65] = "";
	if (json_string_value(json_object_get(pkg, "bundle")))
		sha256_hex(json_string_value(json_object_get(pkg, "bundle")), hash);
	json_decref(pkg);
	SG_CHECK(strcmp(hash, old_hash) != 0);
	SG_WAIT_FOR(WAIT_MS, template_hash_is(hash));
	SG_CHECK(generation_of(DEPLOY()) > dgen);
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
}

extern char **environ; /* POSIX: the environment, for posix_spawn */

/* A port free on the loopback now, below the kernel's ephemeral range:
 * signet-trust binds it a moment later, and a port in the range can be
 * taken meanwhile by any outgoing connection on the machine
 * (tests/kube/apiserver.sh, free_ports). -1 when none is found. */
static int free_port(void)
{
	int low = 32768;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%d", &low) != 1)
			low = 32768;
		fclose(f);
	}
	int first = low - 16384 > 1024 ? low - 16384 : 1024;
	unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
	for (int i = 0; i < 1000; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			return -1;
		/* below the range if it leaves room; otherwise the kernel's pick */
		int want = low - first >= 1024 ? first + (int)(rand_r(&seed) % (unsigned)(low - first)) : 0;
		struct sockaddr_in a = {.sin_family = AF_INET,
		                        .sin_port = htons((uint16_t)want),
		                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t n = sizeof(a);
		int port = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		                   getsockname(fd, (struct sockaddr *)&a, &n) == 0
		               ? ntohs(a.sin_port)
		               : -1;
		close(fd);
		if (port > 0)
			return port;
	}
	return -1;
}

static bool port_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {
	    .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A Bundle of sources (stolen) whose target selects no namespace. */
static json_t *bundle_obj(const char *name, json_t *sources)
{
	return json_pack("{s:s, s:s, s:{s:s}, s:{s:o, s:{s:{s:s}, s:{s:{s:s}}}}}", "apiVersion",
	                 "trust.cert-manager.io/v1alpha1", "kind", "Bundle", "metadata", "name", name, "spec",
	                 "sources", sources, "target", "configMap", "key", "ca.crt", "namespaceSelector", "matchLabels",
	                 "tm-test/none", "none");
}

static int vwc_port(void)
{
	json_t *v = kube_fx_get(k, ref_in(ADM, "validatingwebhookconfigurations", NULL, "trust-manager"));
	const json_t *cc = json_object_get(json_array_get(json_object_get(v, "webhooks"), 0), "clientConfig");
	int port = (int)json_integer_value(json_object_get(json_object_get(cc, "service"), "port"));
	json_decref(v);
	return port;
}

/* Creates Bundle name with sources (stolen) where the webhook is called:
 * the create's result, its Status in sg_kube_last_status(). The API
 * server's admission reads webhook configurations and Services through
 * informers of its own, so the port t_webhook_call just wrote can take a
 * moment to be the one it dials; under load it was seen dialling the old
 * one ("failed calling webhook ...: dial tcp 127.0.0.1:443: connect:
 * connection refused", stress.sh, release, 1 run in 5). No API says when
 * its admission has the new configuration, so the create is retried
 * while, and only while, the call itself failed (failurePolicy Fail:
 * nothing was created), up to WAIT_MS; the webhook's own answer, either
 * way, ends it. */
static int create_through_webhook(const char *name, json_t *sources)
{
	sg_kube_ref bundles = {.group = "trust.cert-manager.io", .version = "v1alpha1", .resource = "bundles"};
	uint64_t deadline = sg_now_ns() + (uint64_t)WAIT_MS * 1000000u;
	int rc;
	unsigned failed_calls = 0;
	for (;;) {
		rc = kube_fx_create(k, bundles, bundle_obj(name, json_deep_copy(sources)));
		const char *msg = rc == SG_OK ? NULL : sg_kube_last_status()->message;
		if (!msg || !strstr(msg, "failed calling webhook") || sg_now_ns() >= deadline)
			break;
		failed_calls++;
		sg_sleep_ms(SG_TEST_POLL_MS);
	}
	if (failed_calls) /* so a run shows when the lag was there */
		printf("%s: the API server's call of the webhook failed %u times first\n", name, failed_calls);
	json_decref(sources);
	return rc;
}

static void dump_tail(const char *path, int status)
{
	FILE *f = fopen(path, "r");
	char buf[4096];
	size_t n = 0;
	if (f && fseek(f, 0, SEEK_END) == 0) {
		long end = ftell(f);
		if (end > (long)sizeof(buf) - 1)
			fseek(f, end - (long)sizeof(buf) + 1, SEEK_SET);
		else
			rewind(f);
		n = fread(buf, 1, sizeof(buf) - 1, f);
	}
	buf[n] = '\0';
	if (f)
		fclose(f);
	fprintf(stderr, "  signet-trust ended with status %d; its log ends:\n%s\n", status, buf);
}

/* The API server really calls the webhook the operator configured: a
 * local signet-trust serves it with the Secret the operator made, the
 * API server checks it against the caBundle the operator wrote, for the
 * Service's name, and its answer decides. Two things are bent for a
 * loopback run, with the reconciler stopped: the Service trust-manager
 * becomes an ExternalName of 127.0.0.1 (no kube-proxy here; the API
 * server dials an ExternalName directly, still checking the certificate
 * against trust-manager.cert-manager.svc), and the webhook's port is the
 * local one. Then the operator, started again, puts both back. */
static void t_webhook_call(void)
{
#ifndef SIGNET_TRUST
	printf("signet-trust not built: the API server's call of the webhook is not shown\n");
#else
	if (cert_manager_crds()) {
		printf("cert-manager's CRDs are on this server: the webhook's certificate is cert-manager's to issue, "
		       "and no cert-manager runs here; the API server's call is not shown\n");
		return;
	}
	WAIT_IDLE();
	SG_CHECK(kube_env_apply_file(k, SOURCE_DIR "/packaging/kubernetes/base/trust-crds.yaml"));
	const char *tmp = getenv("SIGNET_TEST_TMP");
	char dir[600], path[700], kubeconfig[600] = "";
	snprintf(dir, sizeof(dir), "%s/tm-webhook-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
	SG_CHECK(mkdir(dir, 0700) == 0);
	char *crt = secret_value(TLS_SECRET, "tls.crt"), *key = secret_value(TLS_SECRET, "tls.key");
	SG_CHECK(crt && key);
	if (!crt || !key)
		exit(1);
	snprintf(path, sizeof(path), "%s/tls.crt", dir);
	write_file(path, crt);
	snprintf(path, sizeof(path), "%s/tls.key", dir);
	write_file(path, key);
	free(crt);
	free(key);
	SG_CHECK(kube_fx_env_value("KUBECONFIG", kubeconfig, sizeof(kubeconfig)) && kubeconfig[0]);
	int port = free_port();
	SG_CHECK(port > 0);
	char a_kc[700], a_port[64], a_dir[700], log[700];
	snprintf(a_kc, sizeof(a_kc), "--kubeconfig=%s", kubeconfig);
	snprintf(a_port, sizeof(a_port), "--webhook-port=%d", port);
	snprintf(a_dir, sizeof(a_dir), "--webhook-certificate-dir=%s", dir);
	snprintf(log, sizeof(log), "%s/signet-trust.log", dir);
	/* posix_spawn, not fork: this process has threads (the reconciler's,
	 * the client's), and the child must do nothing before exec. */
	char *const argv[] = {(char *)SIGNET_TRUST,
	                      a_kc,
	                      (char *)"--leader-elect=false",
	                      (char *)"--metrics-port=0",
	                      (char *)"--readiness-probe-port=0",
	                      (char *)"--http-address=127.0.0.1",
	                      (char *)"--webhook-host=127.0.0.1",
	                      a_port,
	                      a_dir,
	                      (char *)"--trust-namespace=" NS,
	                      NULL};
	/* Its environment: ours, with TSan's suppressions for signet-trust
	 * (tests/trust/tsan.supp: jansson's reference counts; this test
	 * embeds them for itself, the program needs the file). */
	size_t nenv = 0;
	while (environ[nenv])
		nenv++;
	char **envp = calloc(nenv + 2, sizeof(*envp));
	char tsan[1200];
	const char *have = getenv("TSAN_OPTIONS");
	snprintf(tsan, sizeof(tsan), "TSAN_OPTIONS=%s%ssuppressions=%s/tests/trust/tsan.supp", have ? have : "",
	         have && *have ? ":" : "", SOURCE_DIR);
	size_t m = 0;
	for (size_t i = 0; envp && i < nenv; i++)
		if (strncmp(environ[i], "TSAN_OPTIONS=", 13) != 0)
			envp[m++] = environ[i];
	if (envp)
		envp[m] = tsan;
	SG_CHECK(envp != NULL);
	posix_spawn_file_actions_t fa;
	pid_t pid = -1;
	SG_CHECK(posix_spawn_file_actions_init(&fa) == 0 &&
	         posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600) == 0 &&
	         posix_spawn_file_actions_adddup2(&fa, 1, 2) == 0 &&
	         posix_spawn(&pid, SIGNET_TRUST, &fa, NULL, argv, envp ? envp : environ) == 0);
	posix_spawn_file_actions_destroy(&fa);
	free(envp);
	SG_CHECK(pid > 0);
	SG_WAIT_FOR(WAIT_MS, port_open(port));

	sg_trustmanager_free(tm);
	tm = NULL;
	sg_kube_ref svc = ref_in(NULL, "services", NS, "trust-manager");
	SG_CHECK_OK(kube_fx_delete(k, svc));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, svc));
	SG_CHECK_OK(kube_fx_create(k, ref_in(NULL, "services", NS, NULL),
	                           json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s}}", "apiVersion", "v1", "kind",
	                                     "Service", "metadata", "name", "trust-manager", "namespace", NS, "spec",
	                                     "type", "ExternalName", "externalName", "127.0.0.1")));
	sg_kube_ref vref = ref_in(ADM, "validatingwebhookconfigurations", NULL, "trust-manager");
	json_t *v = kube_fx_get(k, vref);
	json_t *service = json_object_get(
	    json_object_get(json_array_get(json_object_get(v, "webhooks"), 0), "clientConfig"), "service");
	SG_CHECK(service != NULL);
	json_object_set_new(service, "port", json_integer(port));
	SG_CHECK_OK(sg_kube_update(k, &vref, v, NULL));
	json_decref(v);

	/* Refused at admission by the webhook: two kinds of source in one. */
	sg_kube_ref bundles = {.group = "trust.cert-manager.io", .version = "v1alpha1", .resource = "bundles"};
	int rc =
	    create_through_webhook("tm-webhook-bad", json_pack("[{s:s, s:b}]", "inLine", ca[0], "useDefaultCAs", 1));
	const sg_kube_status *st = sg_kube_last_status();
	SG_CHECK(rc != SG_OK && st->code == 403 &&
	         strstr(st->message, "admission webhook \"trust.cert-manager.io\" denied the request"));
	if (rc == SG_OK || !strstr(st->message, "denied the request"))
		fprintf(stderr, "  bad Bundle: rc %d, HTTP %ld: %s\n", rc, st->code, st->message);
	bundles.name = "tm-webhook-bad";
	SG_CHECK(!kube_fx_exists(k, bundles));
	/* Allowed by it. */
	bundles.name = NULL;
	rc = create_through_webhook("tm-webhook-good", json_pack("[{s:s}]", "inLine", ca[0]));
	SG_CHECK_OK(rc);
	if (rc != SG_OK)
		fprintf(stderr, "  good Bundle: HTTP %ld: %s\n", sg_kube_last_status()->code,
		        sg_kube_last_status()->message);
	bundles.name = "tm-webhook-good";
	SG_CHECK_OK(kube_fx_delete(k, bundles));

	/* The operator again: it puts its Service and port back. */
	kill(pid, SIGTERM);
	int status = 0;
	bool clean = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
	SG_CHECK(clean);
	if (!clean) /* what it said, the end of it */
		dump_tail(log, status);
	SG_CHECK_OK(kube_fx_delete(k, svc));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, svc));
	start_reconciler(SG_TRUSTMANAGER_CA_FILE, bundle2);
	SG_WAIT_FOR(WAIT_MS, all_exist());
	SG_WAIT_FOR(WAIT_MS, vwc_port() == 443);
	WAIT_IDLE();
	check_webhook(false);
	snprintf(path, sizeof(path), "%s/tls.crt", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/tls.key", dir);
	unlink(path);
	unlink(log);
	rmdir(dir);
#endif
}

/* With cert-manager's CRDs there, the webhook's certificate is its: the
 * design's self-signed Issuer and Certificate (Secret trust-manager-tls)
 * and the CA injection annotation, no Secret of ours. The CRDs are
 * applied loose (no cert-manager runs); they stay, as on a shared server
 * another test may hold them. */
static void t_cert_manager(void)
{
	static const char *const crds[] = {"certificates", "Certificate", "issuers", "Issuer"};
	for (size_t i = 0; i < 4 && !cert_manager_crds(); i += 2) {
		char text[1200];
		snprintf(text, sizeof(text),
		         "{\"apiVersion\": \"apiextensions.k8s.io/v1\", \"kind\": \"CustomResourceDefinition\", "
		         "\"metadata\": {\"name\": \"%s.cert-manager.io\"}, \"spec\": {\"group\": \"cert-manager.io\", "
		         "\"names\": {\"kind\": \"%s\", \"plural\": \"%s\"}, \"scope\": \"Namespaced\", \"versions\": "
		         "[{\"name\": \"v1\", \"served\": true, \"storage\": true, \"subresources\": {\"status\": {}}, "
		         "\"schema\": {\"openAPIV3Schema\": {\"type\": \"object\", "
		         "\"x-kubernetes-preserve-unknown-fields\": true}}}]}}",
		         crds[i], crds[i + 1], crds[i]);
		json_t *o = json_loads(text, 0, NULL);
		SG_CHECK(o && kube_env_apply_json(k, o, "loose cert-manager CRD"));
		json_decref(o);
	}
	SG_CHECK(cert_manager_crds());
	tm_put("cluster", "{\"trustManagerConfig\": {}}");
	sg_kube_ref cert = {
	    .group = "cert-manager.io", .version = "v1", .resource = "certificates", .ns = NS, .name = "trust-manager"};
	sg_kube_ref iss = cert;
	iss.resource = "issuers";
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, cert) && kube_fx_exists(k, iss));
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, DEPLOY()));
	SG_WAIT_FOR(WAIT_MS, annotation_is_set());
	WAIT_IDLE();
	check_webhook(true);
	SG_CHECK(!kube_fx_exists(k, ref_in(NULL, "secrets", NS, TLS_SECRET)));
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	/* Deleted: the Issuer and Certificate go with the rest. */
	SG_CHECK_OK(kube_fx_delete(k, tm_ref("cluster")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref("cluster")));
	SG_CHECK(!kube_fx_exists(k, cert) && !kube_fx_exists(k, iss));
	SG_CHECK(!kube_fx_exists(k, ref_in(ADM, "validatingwebhookconfigurations", NULL, "trust-manager")));
}

static void t_delete(void)
{
	SG_CHECK_OK(kube_fx_delete(k, tm_ref("cluster")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref("cluster")));
	{
		int f = sg_test_failures;
		SG_CHECK(none_exist());
		if (f != sg_test_failures)
			fprintf(stderr, "  %s\n", seen);
	}
	SG_CHECK(kube_fx_exists(k, ref_in(NULL, "namespaces", NULL, NS)));
	SG_CHECK(kube_fx_exists(k, ref_in(NULL, "secrets", NS, "user-ca")));
	SG_CHECK(events("Deleted") > 0);
	print_stats("deleted");
}

static void t_recreate(void)
{
	tm_put("cluster", SAMPLE);
	SG_WAIT_FOR(WAIT_MS, has_finalizer("cluster"));
	SG_WAIT_FOR(WAIT_MS, all_exist());
	char *uid = cr_uid("cluster");
	WAIT_IDLE();
	check_meta(uid, NULL, NULL, NULL);
	free(uid);
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
}

static void t_second(void)
{
	WAIT_IDLE();
	char *drv = kube_fx_rv(k, DEPLOY());
	sg_trustmanager_stats before = stats();
	tm_put("other", SAMPLE);
	WAIT_COND("other", "Ready", "False", "InvalidSpec",
	          "TrustManager is a singleton, .metadata.name must be 'cluster'");
	SG_CHECK(!has_finalizer("other"));
	WAIT_IDLE();
	sg_trustmanager_stats after = stats();
	SG_CHECK(after.created == before.created && after.repaired == before.repaired &&
	         after.deleted == before.deleted);
	char *now = kube_fx_rv(k, DEPLOY());
	SG_CHECK(strcmp(now, drv) == 0);
	SG_CHECK(ready("cluster"));
	free(now);
	free(drv);
	SG_CHECK_OK(kube_fx_delete(k, tm_ref("other")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref("other")));
	SG_CHECK(ready("cluster"));
}

/* The design's trust namespace: created when missing, and it may change
 * (trust-manager's Role and RoleBinding move; no namespace is deleted). */
static void t_missing_namespace(void)
{
	SG_CHECK_OK(kube_fx_delete(k, tm_ref("cluster")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref("cluster")));
	SG_CHECK(none_exist());
	SG_CHECK(!kube_fx_exists(k, ref_in(NULL, "namespaces", NULL, late_ns)));
	tm_put("cluster", "{\"trustManagerConfig\": {\"trustNamespace\": \"%s\"}}", late_ns);
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, ref_in(NULL, "namespaces", NULL, late_ns)));
	int64_t gen = generation_of(tm_ref("cluster"));
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, DEPLOY()));
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, ref_in(RBAC, "roles", late_ns, "trust-manager")));
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, ref_in(RBAC, "rolebindings", late_ns, "trust-manager")));
	char a[128];
	snprintf(a, sizeof(a), "--trust-namespace=%s", late_ns);
	WAIT_ARG(a, true);
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	SG_CHECK(generation_of(tm_ref("cluster")) == gen);

	/* Moved: to a namespace that does not exist yet either. */
	char moved[64];
	snprintf(moved, sizeof(moved), "tm-moved-%ld", (long)getpid());
	tm_put("cluster", "{\"trustManagerConfig\": {\"trustNamespace\": \"%s\"}}", moved);
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, ref_in(RBAC, "roles", moved, "trust-manager")));
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, ref_in(RBAC, "rolebindings", moved, "trust-manager")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, ref_in(RBAC, "roles", late_ns, "trust-manager")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, ref_in(RBAC, "rolebindings", late_ns, "trust-manager")));
	snprintf(a, sizeof(a), "--trust-namespace=%s", moved);
	WAIT_ARG(a, true);
	SG_WAIT_FOR(WAIT_MS, strcmp(status_str("cluster", "trustNamespace"), moved) == 0);
	deployment_status(true);
	WAIT_STATE(ready, "cluster");
	SG_CHECK(kube_fx_exists(k, ref_in(NULL, "namespaces", NULL, late_ns))); /* the old one stays */

	/* Gone again: its Role in the trust namespace too; the namespaces stay. */
	SG_CHECK_OK(kube_fx_delete(k, tm_ref("cluster")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref("cluster")));
	SG_CHECK(!kube_fx_exists(k, ref_in(RBAC, "roles", moved, "trust-manager")));
	SG_CHECK(!kube_fx_exists(k, ref_in(RBAC, "rolebindings", moved, "trust-manager")));
	SG_CHECK(kube_fx_exists(k, ref_in(NULL, "namespaces", NULL, moved)));
	SG_CHECK(none_exist());
}

/* The test plays OpenShift's network operator: it writes the cluster's
 * trusted CA bundle into the injection ConfigMap (another field manager's
 * merge patch, as the network operator's update would be). */
static void inject(const char *bundle)
{
	PATCH(ref_in(NULL, "configmaps", NS, INJ_CM), json_pack("{s:{s:s}}", "data", "ca-bundle.crt", bundle));
}

/* The OpenShift package in the ConfigMap is the one for the injection
 * ConfigMap as it is now: version its resourceVersion, ncerts
 * certificates, the pod template's hash that of its bundle. */
static bool openshift_package_is(size_t ncerts)
{
	json_t *pkg = package_at(PKG_OS_KEY);
	char *rv = kube_fx_rv(k, ref_in(NULL, "configmaps", NS, INJ_CM));
	const char *name = json_string_value(json_object_get(pkg, "name"));
	const char *ver = json_string_value(json_object_get(pkg, "version"));
	const char *bundle = json_string_value(json_object_get(pkg, "bundle"));
	char hash[65] = "";
	if (bundle)
		sha256_hex(bundle, hash);
	bool ok = name && strcmp(name, "cert-manager-package-openshift") == 0 && ver && rv && strcmp(ver, rv) == 0 &&
	          bundle && count(bundle, "-----BEGIN CERTIFICATE-----") == ncerts;
	snprintf(seen, sizeof(seen), "package %s version %s (injection ConfigMap at %s), %zu certificates",
	         name ? name : "(none)", ver ? ver : "-", rv ? rv : "-",
	         bundle ? count(bundle, "-----BEGIN CERTIFICATE-----") : 0);
	char why[sizeof(seen)];
	memcpy(why, seen, sizeof(why));
	ok = ok && template_hash_is(hash);
	if (!ok)
		memcpy(seen, why, sizeof(why));
	free(rv);
	json_decref(pkg);
	return ok;
}

#define WAIT_OPENSHIFT_PACKAGE(n)                                                                                      \
	do {                                                                                                           \
		int f_ = sg_test_failures;                                                                             \
		SG_WAIT_FOR(WAIT_MS, openshift_package_is(n));                                                         \
		if (sg_test_failures != f_)                                                                            \
			fprintf(stderr, "  want the package of %d certificates; have %s\n", (n), seen);                \
	} while (0)

static void t_openshift_package(void)
{
	/* The reconciler's default source: OpenShift's injection. */
	sg_trustmanager_free(tm);
	tm = NULL;
	start_reconciler(SG_TRUSTMANAGER_CA_OPENSHIFT, NULL);
	sg_kube_ref inj = ref_in(NULL, "configmaps", NS, INJ_CM);
	tm_put("cluster", SAMPLE);
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, inj));
	json_t *cm = kube_fx_get(k, inj);
	const char *l = label(cm, "config.openshift.io/inject-trusted-cabundle");
	SG_CHECK(l && strcmp(l, "true") == 0);
	SG_CHECK(label(cm, "app") && strcmp(label(cm, "app"), APP) == 0);
	SG_CHECK(json_object_size(json_object_get(cm, "data")) == 0);
	json_decref(cm);

	/* Waiting for the injection, said so; nothing else applied. */
	WAIT_COND("cluster", "Ready", "False", "Progressing", "waiting for the cluster's trusted CA bundle");
	SG_CHECK(cond_is("cluster", "Progressing", "True", "Progressing", "ca-bundle.crt"));
	SG_CHECK(cond_is("cluster", "Degraded", "False", "Ready", NULL));
	WAIT_IDLE();
	SG_CHECK(!kube_fx_exists(k, DEPLOY()));
	SG_CHECK(!kube_fx_exists(k, ref_in(NULL, "configmaps", NS, PKG_CM)));

	/* Injected: a comment, three CAs and one twice; the package holds
	 * three, mounted and named as the design says. */
	char *text = malloc(strlen(ca[0]) * 5 + 100);
	if (!text)
		exit(1);
	sprintf(text, "# cluster trusted CAs\n%s%s%s%s", ca[0], ca[1], ca[2], ca[1]);
	inject(text);
	SG_WAIT_FOR(WAIT_MS, kube_fx_exists(k, DEPLOY()));
	WAIT_OPENSHIFT_PACKAGE(3);
	WAIT_ARG("--default-package-location=/packages/" PKG_OS_KEY, true);
	json_t *d = kube_fx_get(k, DEPLOY());
	const json_t *pspec = json_object_get(json_object_get(json_object_get(d, "spec"), "template"), "spec");
	const char *vcm = json_string_value(json_object_get(
	    json_object_get(json_array_get(json_object_get(pspec, "volumes"), 1), "configMap"), "name"));
	SG_CHECK(vcm && strcmp(vcm, PKG_CM) == 0);
	const json_t *mount = json_array_get(json_object_get(container_of(d), "volumeMounts"), 1);
	SG_CHECK(json_string_value(json_object_get(mount, "mountPath")) &&
	         strcmp(json_string_value(json_object_get(mount, "mountPath")), "/packages") == 0);
	check_signet_trust_parses(json_object_get(container_of(d), "args"));
	json_decref(d);
	/* signet-trust reads the file as trust-manager would. */
	json_t *pcm = kube_fx_get(k, ref_in(NULL, "configmaps", NS, PKG_CM));
	const char *ptext = json_string_value(json_object_get(json_object_get(pcm, "data"), PKG_OS_KEY));
	sg_trust_package *pkg = NULL;
	SG_CHECK(ptext && sg_trust_package_parse(&pkg, ptext, strlen(ptext), PKG_OS_KEY) == SG_OK);
	SG_CHECK(pkg && strncmp(sg_trust_package_id(pkg), "cert-manager-package-openshift-", 31) == 0);
	sg_trust_package_free(pkg);
	json_decref(pcm);
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");

	/* The network operator injects a new bundle: formatted again, and
	 * the pods roll. */
	int64_t dgen = generation_of(DEPLOY());
	sprintf(text, "%s%s%s%s", ca[0], ca[1], ca[2], ca[3]);
	inject(text);
	WAIT_OPENSHIFT_PACKAGE(4);
	SG_CHECK(generation_of(DEPLOY()) > dgen);
	WAIT_STATE(progressing, "cluster");
	deployment_status(true);
	WAIT_STATE(ready, "cluster");

	/* A bundle that is not PEM: Failed, saying why; the operand keeps
	 * its package. */
	WAIT_IDLE();
	char *drv = kube_fx_rv(k, DEPLOY());
	inject("no certificate here\n");
	WAIT_COND("cluster", "Degraded", "True", "Failed", "the injected CA bundle cannot be used");
	WAIT_IDLE();
	char *drv2 = kube_fx_rv(k, DEPLOY());
	SG_CHECK(drv && drv2 && strcmp(drv, drv2) == 0);
	SG_CHECK(package_certs_at(PKG_OS_KEY) == 4);
	free(drv);
	free(drv2);
	inject(text);
	WAIT_STATE(ready, "cluster");
	free(text);

	/* Deleted: both ConfigMaps go with the rest. */
	SG_CHECK_OK(kube_fx_delete(k, tm_ref("cluster")));
	SG_WAIT_FOR(WAIT_MS, !kube_fx_exists(k, tm_ref("cluster")));
	SG_CHECK(!kube_fx_exists(k, inj));
	SG_CHECK(none_exist());
}

static void t_metrics(void)
{
	sg_metrics *reg = NULL;
	SG_CHECK_OK(sg_metrics_new(&reg));
	SG_CHECK_OK(sg_ctrl_metrics(sg_trustmanager_controller(tm), reg));
	char *text = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_metrics_render(reg, &text, &len));
	SG_CHECK(text && strstr(text, "signet_operator_trustmanager_writes_total") &&
	         strstr(text, "signet_operator_trustmanager_status_writes_total"));
	/* the counter as the stats say it (t_stale_secret's refusals were
	 * counted by an earlier reconciler: the tests start new ones) */
	char line[96];
	snprintf(line, sizeof(line), "\nsignet_operator_trustmanager_conflicts_total %llu\n",
	         (unsigned long long)stats().conflicts);
	SG_CHECK(text && strstr(text, line));
	free(text);
	sg_metrics_free(reg);
}

static void t_stop(void)
{
	print_stats("end");
	sg_trustmanager_free(tm);
	tm = NULL;
	unlink(bundle1);
	unlink(bundle2);
	for (int i = 0; i < 4; i++)
		free(ca[i]);
	sg_kube_free(k);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_sample), SG_TEST(t_ready), SG_TEST(t_degraded), SG_TEST(t_spec_change),
             SG_TEST(t_invalid), SG_TEST(t_labels_dropped), SG_TEST(t_drift), SG_TEST(t_quiet), SG_TEST(t_renew),
             SG_TEST(t_stale_secret), SG_TEST(t_package_change), SG_TEST(t_webhook_call), SG_TEST(t_delete),
             SG_TEST(t_recreate), SG_TEST(t_second), SG_TEST(t_missing_namespace), SG_TEST(t_openshift_package),
             SG_TEST(t_cert_manager), SG_TEST(t_metrics), SG_TEST(t_stop))
