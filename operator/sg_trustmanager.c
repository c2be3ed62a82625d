/*
 * The TrustManager reconciler (contract: sg_trustmanager.h).
 *
 * One pass, for key "cluster" (every event of a managed object, of the
 * operand's pods and of the namespaces that matter maps to it; a
 * TrustManager of another name is its own key and only ever refused):
 *   1. gone: nothing; being deleted: delete what we made, drop the
 *      finalizer;
 *   2. the finalizer, at the first pass;
 *   3. the spec read and checked as the CRD's CEL rules would
 *      (InvalidSpec, nothing applied);
 *   4. inputs: the trust and operand namespaces, the default CA package
 *      when enabled (Failed, nothing applied, until they exist);
 *   5. the objects, each applied only when its cached copy does not hold
 *      it; those of ours no longer wanted deleted;
 *   6. status from the operand's Deployment and pods, written only when
 *      it changes.
 * Everything is read from the informers' caches, so a pass that finds
 * the cluster as it should be makes no request at all, with one
 * exception: cert-manager's Issuer and Certificate, whose kinds may not
 * be served (an informer of them would never list), are read from the
 * server when its CRDs are there. The other read that goes to the
 * server is the Deployment right after we wrote it:
 * its cached copy is the old one, whose status would speak of the old
 * generation (a Ready=True that is not true yet).
 *
 * Events of the objects we make come back in bursts (our own writes'
 * echoes), so their key is queued a little later (ECHO_DELAY_MS): the
 * next pass then finds the whole burst in the caches and does not apply
 * again what a stale copy seemed to miss. The CR's own events and
 * namespace events are queued at once.
 *
 * Events: sg_opr's Created, Applied (a repair or a spec change),
 * ApplyFailed and Deleted for objects, and one whenever the Ready
 * condition's reason changes (Warning for InvalidSpec, Failed and
 * OperandFailed, Normal for Progressing and Ready), so a failure is an
 * Event once, not at every pass.
 *
 * The trust namespace is watched (the anchor's defect: creating it
 * recovered nothing), but only the trust and operand namespaces' events
 * queue a pass; the trust namespace of the last pass is kept for the
 * informer's thread under a lock, and set before the pass looks for the
 * namespace, so one created after that look is an event that counts.
 */
#include "sg_trustmanager.h"

#include "sg_base64.h"
#include "sg_certset.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_opr.h"
#include "sg_secret.h"
#include "sg_softkey.h"
#include "sg_trust.h"
#include "sg_trust_webhook.h"
#include "sg_x509.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME SG_TRUSTMANAGER_NAME
#define APP SG_TRUSTMANAGER_APP
#define FINALIZER SG_TRUSTMANAGER_FINALIZER
#define DEFAULT_NAMESPACE "cert-manager"
#define OBJ "trust-manager" /* ServiceAccount, RBAC, Deployment, container */
#define OBJ_LEADER "trust-manager:leaderelection"
#define OBJ_METRICS "trust-manager-metrics"
#define OBJ_PACKAGE "trust-manager-default-ca-package"
#define OBJ_INJECTION SG_TRUSTMANAGER_INJECTION_CM
#define OBJ_TLS "trust-manager-tls" /* the webhook's serving certificate (Secret) */
/* The Bundle webhook, as signet-trust serves it (trust/signet-trust.c:
 * --webhook-host, --webhook-port, --webhook-certificate-dir, path
 * SG_TRUST_WEBHOOK_PATH) behind Service trust-manager on 443. */
#define WEBHOOK_NAME "trust.cert-manager.io"
#define WEBHOOK_PORT 6443
#define WEBHOOK_SVC_PORT 443
#define TLS_DIR "/tls"
#define TLS_VOLUME "tls"
#define INJECT_CA_FROM "cert-manager.io/inject-ca-from"
#define CRD_CERTIFICATES "certificates.cert-manager.io"
#define CRD_ISSUERS "issuers.cert-manager.io"
/* signet's own serving certificate: a year, made again after two thirds
 * of it (or when it does not fit); the previous one stays in the
 * caBundle while it is valid, so the API server trusts the pods that
 * still serve it until the kubelet has updated their volume. */
#define TLS_TTL (365 * 86400)
#define TLS_PEM_MAX (64u << 10)
#define PACKAGE_DIR "/packages"
#define PACKAGE_VOLUME "packages"
#define PACKAGE_CM_MAX 1000000u /* a ConfigMap holds at most 1 MiB, metadata included */
#define METRICS_PORT 9402
#define PROBE_PORT 6060
#define SELECTOR "app.kubernetes.io/managed-by=" SG_OPR_MANAGED_BY ",app=" APP
#define POD_SELECTOR "app=" APP
#define ECHO_DELAY_MS 200u
#define MSG_MAX 2048
#define LOG_LEVEL_MAX 5
#define SCHEDULING_MAX 50              /* tolerations, nodeSelector entries (the CRD's bounds) */
#define META_MAX 25                    /* controllerConfig labels, annotations */
#define ANNOTATIONS_BYTES (256u << 10) /* the API server's bound on all annotations */
#define AUTHORIZED_MAX 1024
#define WANT_MAX 16

static const char *const invalid_name_msg = "TrustManager is a singleton, .metadata.name must be 'cluster'";

/* ---- the kinds watched ---- */

enum {
	W_TM,
	W_NS,
	W_DEPLOY, /* the managed kinds: W_DEPLOY..W_RB */
	W_SA,
	W_SVC,
	W_CM,
	W_SECRET,
	W_CROLE,
	W_CRB,
	W_ROLE,
	W_RB,
	W_VWC,
	W_POD,
	W_CRD, /* cert-manager's CRDs: whether it is there */
	W_N,
	/* cert-manager's kinds: not watched (an informer of a kind the
	 * server does not serve would never list), read when its CRDs are
	 * there */
	W_ISSUER = W_N,
	W_CERT,
	W_KINDS
};
#define W_MANAGED_FIRST W_DEPLOY
#define W_MANAGED_LAST W_VWC
#define ADM "admissionregistration.k8s.io"

#define RBAC "rbac.authorization.k8s.io"
static const struct kind {
	sg_kube_ref ref;
	const char *api; /* apiVersion */
	const char *kind;
} K[W_KINDS] = {
    [W_TM] = {{SG_OPR_GROUP, SG_OPR_VERSION, "trustmanagers", NULL, NULL, NULL},
              SG_OPR_GROUP "/" SG_OPR_VERSION,
              "TrustManager"},
    [W_NS] = {{"", "v1", "namespaces", NULL, NULL, NULL}, "v1", "Namespace"},
    [W_DEPLOY] = {{"apps", "v1", "deployments", NULL, NULL, NULL}, "apps/v1", "Deployment"},
    [W_SA] = {{"", "v1", "serviceaccounts", NULL, NULL, NULL}, "v1", "ServiceAccount"},
    [W_SVC] = {{"", "v1", "services", NULL, NULL, NULL}, "v1", "Service"},
    [W_CM] = {{"", "v1", "configmaps", NULL, NULL, NULL}, "v1", "ConfigMap"},
    [W_CROLE] = {{RBAC, "v1", "clusterroles", NULL, NULL, NULL}, RBAC "/v1", "ClusterRole"},
    [W_CRB] = {{RBAC, "v1", "clusterrolebindings", NULL, NULL, NULL}, RBAC "/v1", "ClusterRoleBinding"},
    [W_ROLE] = {{RBAC, "v1", "roles", NULL, NULL, NULL}, RBAC "/v1", "Role"},
    [W_RB] = {{RBAC, "v1", "rolebindings", NULL, NULL, NULL}, RBAC "/v1", "RoleBinding"},
    [W_POD] = {{"", "v1", "pods", NULL, NULL, NULL}, "v1", "Pod"},
    [W_SECRET] = {{"", "v1", "secrets", NULL, NULL, NULL}, "v1", "Secret"},
    [W_VWC] = {{ADM, "v1", "validatingwebhookconfigurations", NULL, NULL, NULL},
               ADM "/v1",
               "ValidatingWebhookConfiguration"},
    [W_CRD] = {{"apiextensions.k8s.io", "v1", "customresourcedefinitions", NULL, NULL, NULL},
               "apiextensions.k8s.io/v1",
               "CustomResourceDefinition"},
    [W_ISSUER] = {{"cert-manager.io", "v1", "issuers", NULL, NULL, NULL}, "cert-manager.io/v1", "Issuer"},
    [W_CERT] = {{"cert-manager.io", "v1", "certificates", NULL, NULL, NULL}, "cert-manager.io/v1", "Certificate"},
};

/* What signet-trust needs (trust/sg_trust.h, packaging/kubernetes/
 * trust-rbac.yaml) and nothing more. */
typedef struct rule {
	const char *group, *resource;
	const char *verbs[8];
} rule;

static const rule cluster_rules[] = {
    {"trust.cert-manager.io", "bundles", {"get", "list", "watch"}},
    {"trust.cert-manager.io", "bundles/status", {"patch"}},
    /* blockOwnerDeletion on the targets a Bundle controls */
    {"trust.cert-manager.io", "bundles/finalizers", {"update"}},
    {"", "namespaces", {"get", "list", "watch"}},
    /* targets everywhere (server-side apply, deleted when orphaned); sources in the trust namespace */
    {"", "configmaps", {"get", "list", "watch", "create", "patch", "delete"}},
    {"", "events", {"create", "patch"}},
};
/* With Secret targets (secretTargets.policy All, Specific or Custom):
 * they are listed and watched everywhere (by label) and written under the
 * authorized names only (Specific, Custom) or under any name (All). */
static const rule secret_read = {"", "secrets", {"get", "list", "watch"}};
static const rule secret_write = {"", "secrets", {"create", "update", "patch", "delete"}};
/* The trust namespace: Secret sources. */
static const rule trust_rules[] = {
    {"", "secrets", {"get", "list", "watch"}},
};
/* The operand namespace: the Lease (kube/sg_lease.c reads, creates and
 * replaces it). */
static const rule leader_rules[] = {
    {"coordination.k8s.io", "leases", {"get", "create", "update"}},
};

static const char *const status_fields[] = {
    "trustManagerImage",
    "trustNamespace",
    "secretTargetsPolicy",
    "defaultCAPackagePolicy",
    "filterExpiredCertificatesPolicy",
};

struct sg_trustmanager {
	sg_ctrl *ctrl;
	char *image, *version;
	char ns[SG_NAMES_LABEL_MAX + 1]; /* the operand's */
	sg_trustmanager_ca_source ca_source;
	const char *pkg_name; /* the package's, by source */
	char pkg_key[64];     /* its file: pkg_name ".json" */
	/* Source file: the default CA package, made once by new(): the
	 * file's text and the SHA-256 (hex) of its PEM, or why there is none. */
	char *pkg_json;
	char pkg_hash[65];
	char pkg_error[SG_ERROR_MSG_MAX];
	/* Source OpenShift: the package made from the injection ConfigMap at
	 * resourceVersion inj_rv (made again only when that changes). Only
	 * the pass of key "cluster" touches it, and the runtime hands a key
	 * to one worker at a time. */
	char inj_rv[128];
	char *inj_json;
	char inj_hash[65];
	sg_opr_stats st;
	atomic_uint_fast64_t status_writes;
	atomic_uint_fast64_t conflicts;        /* a Secret write refused: it had changed since it was read */
	pthread_mutex_t mu;                    /* trust_ns */
	char trust_ns[SG_NAMES_LABEL_MAX + 1]; /* of the last pass; "" before the first */
};

/* ---- the spec ---- */

typedef struct tm_spec {
	int64_t log_level;
	const char *log_format;
	const char *trust_ns;
	const char *targets; /* secretTargets.policy as written: Disabled, All, Specific or Custom */
	bool secrets;        /* Secret targets on (every policy but Disabled) */
	json_t *authorized;  /* Specific, Custom: the Secret names, sorted, distinct (owned) */
	bool filter_expired;
	bool package;
	const json_t *resources, *affinity, *tolerations, *node_selector; /* borrowed, may be NULL */
	const json_t *labels, *annotations;                               /* borrowed, may be NULL */
} tm_spec;

/* One pass over the CR "cluster". */
typedef struct pass {
	sg_trustmanager *t;
	sg_ctrl *c;
	const json_t *cr; /* the informer's; never modified */
	tm_spec s;
	const char *accepted_ns; /* status.trustNamespace, or the spec's once checked */
	json_t *labels;          /* of every object */
	json_t *owner;           /* ownerReferences */
	const char *pkg_json;    /* the package's text and hash when enabled (borrowed from t) */
	const char *pkg_hash;
	bool cert_manager;                 /* its CRDs are there: the webhook's certificate is its */
	char dns[SG_NAMES_LABEL_MAX + 32]; /* trust-manager.<ns>.svc */
	/* Without cert-manager: the Secret's data, base64 as the API holds
	 * it (tls.crt, tls.key, ca.crt: the caBundle); owned. */
	char *tls_b64[3];
	/* The Secret the pair was decided on (the cache's, else the
	 * server's; owned; NULL: none exists) and its resourceVersion: the
	 * Secret is written only over that copy. */
	json_t *tls_copy;
	bool tls_copy_read; /* read from the server, not shared with the cache: wiped */
	const char *tls_rv;
	sg_ctrl_result *res;
} pass;

static bool refuse(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool refuse(char *msg, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
	return false;
}

/* A user's string for a message: printable ASCII, at most 64 bytes. */
static const char *quoted(const char *s, char out[72])
{
	size_t i = 0;
	for (; s && s[i] && i < 64; i++)
		out[i] = (unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e ? '?' : s[i];
	if (s && s[i])
		memcpy(out + i, "...", 4);
	else
		out[i] = '\0';
	return out;
}

/* A string member among allowed (absent: def); false for anything else. */
static bool one_of(const json_t *o, const char *key, const char *const *allowed, const char *def, const char **out)
{
	const json_t *v = json_object_get(o, key);
	if (!v) {
		*out = def;
		return true;
	}
	const char *s = json_string_value(v);
	for (size_t i = 0; s && allowed[i]; i++) {
		if (strcmp(s, allowed[i]) == 0) {
			*out = allowed[i];
			return true;
		}
	}
	return false;
}

static bool meta_map_ok(const json_t *m, bool labels, char *msg, size_t cap)
{
	const char *what = labels ? "labels" : "annotations";
	char q[72], q2[72];
	if (!m)
		return true;
	if (!json_is_object(m))
		return refuse(msg, cap, "spec.controllerConfig.%s must be a map of strings", what);
	if (json_object_size(m) > META_MAX)
		return refuse(msg, cap, "spec.controllerConfig.%s: at most %d entries", what, META_MAX);
	size_t bytes = 0;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)m, k, v)
	{
		const char *s = json_string_value(v);
		if (!sg_names_qualified(k, strlen(k)))
			return refuse(
			    msg, cap,
			    "spec.controllerConfig.%s: invalid key \"%s\": a qualified name is an "
			    "optional DNS subdomain prefix and '/', then 1..63 characters [A-Za-z0-9._-] starting "
			    "and ending alphanumeric",
			    what, quoted(k, q));
		if (!s)
			return refuse(msg, cap, "spec.controllerConfig.%s: the value of \"%s\" must be a string", what,
			              quoted(k, q));
		if (labels && *s && !sg_names_label_value(s))
			return refuse(msg, cap,
			              "spec.controllerConfig.labels: invalid value \"%s\" of \"%s\": at most 63 "
			              "characters [A-Za-z0-9._-] starting and ending alphanumeric",
			              quoted(s, q2), quoted(k, q));
		bytes += strlen(k) + strlen(s);
	}
	if (!labels && bytes > ANNOTATIONS_BYTES)
		return refuse(msg, cap, "spec.controllerConfig.annotations: larger than %u bytes in all",
		              ANNOTATIONS_BYTES);
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool secret_targets_ok(const json_t *tmc, tm_spec *s, char *msg, size_t cap)
{
	/* The design's Disabled, All and Specific, and the shipped operator's
	 * Custom (its name for Specific): a TrustManager written to either
	 * works. */
	static const char *const policies[] = {"Disabled", "All", "Specific", "Custom", NULL};
	const json_t *st = json_object_get(tmc, "secretTargets");
	const char *policy = NULL;
	char q[72];
	if (st && !json_is_object(st))
		return refuse(msg, cap, "spec.trustManagerConfig.secretTargets must be an object");
	if (!one_of(st, "policy", policies, "Disabled", &policy))
		return refuse(
		    msg, cap,
		    "spec.trustManagerConfig.secretTargets.policy: must be Disabled, All, Specific or Custom");
	s->targets = policy;
	s->secrets = strcmp(policy, "Disabled") != 0;
	bool named = strcmp(policy, "Specific") == 0 || strcmp(policy, "Custom") == 0;
	const json_t *list = json_object_get(st, "authorizedSecrets");
	if (list && !json_is_array(list))
		return refuse(msg, cap, "spec.trustManagerConfig.secretTargets.authorizedSecrets must be a list");
	size_t n = json_array_size(list);
	/* The design's validation messages, with the policy named as the
	 * resource names it (Specific, or the shipped operator's Custom). */
	if (named && n == 0)
		return refuse(
		    msg, cap,
		    "spec.trustManagerConfig.secretTargets: authorizedSecrets must not be empty when policy is %s",
		    policy);
	if (!named && n > 0)
		return refuse(
		    msg, cap,
		    "spec.trustManagerConfig.secretTargets: authorizedSecrets must be empty when policy is not "
		    "Specific");
	if (n > AUTHORIZED_MAX)
		return refuse(msg, cap, "spec.trustManagerConfig.secretTargets.authorizedSecrets: at most %d names",
		              AUTHORIZED_MAX);
	if (n == 0)
		return true;
	const char **names = calloc(n, sizeof(*names));
	if (!names)
		return refuse(msg, cap, "out of memory");
	bool ok = true;
	for (size_t i = 0; i < n && ok; i++) {
		names[i] = json_string_value(json_array_get(list, i));
		if (!names[i] || !sg_names_dns_subdomain(names[i], strlen(names[i])))
			ok = refuse(msg, cap,
			            "spec.trustManagerConfig.secretTargets.authorizedSecrets[%zu]: \"%s\" is not a "
			            "Secret name",
			            i, quoted(names[i], q));
	}
	if (ok) {
		/* resourceNames in a stable order (the anchor sorts them too),
		 * so the ClusterRole does not change with the list's order */
		qsort(names, n, sizeof(*names), cmp_str);
		s->authorized = json_array();
		for (size_t i = 0; i < n && s->authorized; i++) {
			if ((i == 0 || strcmp(names[i], names[i - 1]) != 0) &&
			    json_array_append_new(s->authorized, json_string(names[i])) != 0) {
				json_decref(s->authorized);
				s->authorized = NULL;
			}
		}
		if (!s->authorized)
			ok = refuse(msg, cap, "out of memory");
	}
	free(names);
	return ok;
}

static bool scheduling_ok(const json_t *tmc, tm_spec *s, char *msg, size_t cap)
{
	s->resources = json_object_get(tmc, "resources");
	s->affinity = json_object_get(tmc, "affinity");
	s->tolerations = json_object_get(tmc, "tolerations");
	s->node_selector = json_object_get(tmc, "nodeSelector");
	if (s->resources && !json_is_object(s->resources))
		return refuse(msg, cap, "spec.trustManagerConfig.resources must be an object");
	if (s->affinity && !json_is_object(s->affinity))
		return refuse(msg, cap, "spec.trustManagerConfig.affinity must be an object");
	if (s->tolerations && (!json_is_array(s->tolerations) || json_array_size(s->tolerations) > SCHEDULING_MAX))
		return refuse(msg, cap, "spec.trustManagerConfig.tolerations must be a list of at most %d",
		              SCHEDULING_MAX);
	if (s->node_selector &&
	    (!json_is_object(s->node_selector) || json_object_size(s->node_selector) > SCHEDULING_MAX))
		return refuse(msg, cap, "spec.trustManagerConfig.nodeSelector must be a map of at most %d",
		              SCHEDULING_MAX);
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)s->node_selector, k, v)
	{
		if (!json_is_string(v))
			return refuse(msg, cap, "spec.trustManagerConfig.nodeSelector: values must be strings");
	}
	return true;
}

/* Reads and checks p->cr's spec into p->s, as the CRD's schema and CEL
 * rules would; false with the InvalidSpec message. The trust namespace
 * comes first, so that it is recorded even while something else is
 * wrong. It may change (the design moves trust-manager's Role to the new
 * namespace, which it creates when missing; the old one is left). */
static bool parse(pass *p, char *msg, size_t cap)
{
	static const char *const formats[] = {"text", "json", NULL};
	static const char *const enabled[] = {"Enabled", "Disabled", NULL};
	tm_spec *s = &p->s;
	char q[72];
	const json_t *sp = json_object_get(p->cr, "spec");
	const json_t *tmc = json_object_get(sp, "trustManagerConfig");
	const json_t *cc = json_object_get(sp, "controllerConfig");
	const char *recorded = json_string_value(json_object_get(json_object_get(p->cr, "status"), "trustNamespace"));
	p->accepted_ns = recorded && *recorded ? recorded : NULL;
	if (!json_is_object(sp) || !json_is_object(tmc))
		return refuse(msg, cap, "spec.trustManagerConfig is required");
	const json_t *tn = json_object_get(tmc, "trustNamespace");
	s->trust_ns = tn ? json_string_value(tn) : DEFAULT_NAMESPACE;
	if (!s->trust_ns || !sg_names_dns_label(s->trust_ns, strlen(s->trust_ns), SG_NAMES_LABEL_MAX))
		return refuse(msg, cap, "spec.trustManagerConfig.trustNamespace: \"%s\" is not a namespace name",
		              quoted(s->trust_ns, q));
	p->accepted_ns = s->trust_ns;

	const json_t *ll = json_object_get(tmc, "logLevel");
	s->log_level = ll ? json_integer_value(ll) : 1;
	if ((ll && !json_is_integer(ll)) || s->log_level < 1 || s->log_level > LOG_LEVEL_MAX)
		return refuse(msg, cap, "spec.trustManagerConfig.logLevel: must be an integer from 1 to %d",
		              LOG_LEVEL_MAX);
	if (!one_of(tmc, "logFormat", formats, "text", &s->log_format))
		return refuse(msg, cap, "spec.trustManagerConfig.logFormat: must be text or json");
	if (!secret_targets_ok(tmc, s, msg, cap))
		return false;
	const char *v = NULL;
	if (!one_of(tmc, "filterExpiredCertificates", enabled, "Disabled", &v))
		return refuse(msg, cap,
		              "spec.trustManagerConfig.filterExpiredCertificates: must be Enabled or Disabled");
	s->filter_expired = strcmp(v, "Enabled") == 0;
	const json_t *pkg = json_object_get(tmc, "defaultCAPackage");
	if ((pkg && !json_is_object(pkg)) || !one_of(pkg, "policy", enabled, "Disabled", &v))
		return refuse(msg, cap, "spec.trustManagerConfig.defaultCAPackage.policy: must be Enabled or Disabled");
	s->package = strcmp(v, "Enabled") == 0;
	if (!scheduling_ok(tmc, s, msg, cap))
		return false;
	if (cc && !json_is_object(cc))
		return refuse(msg, cap, "spec.controllerConfig must be an object");
	s->labels = json_object_get(cc, "labels");
	s->annotations = json_object_get(cc, "annotations");
	if (json_object_size(s->annotations) == 0)
		s->annotations = NULL;
	return meta_map_ok(s->labels, true, msg, cap) &&
	       meta_map_ok(json_object_get(cc, "annotations"), false, msg, cap);
}

/* ---- the objects ---- */

static json_t *rules_of(const rule *r, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		json_t *verbs = json_array();
		for (size_t v = 0; verbs && v < 8 && r[i].verbs[v]; v++)
			json_array_append_new(verbs, json_string(r[i].verbs[v]));
		json_t *one = json_pack("{s:[s], s:[s], s:o}", "apiGroups", r[i].group, "resources", r[i].resource,
		                        "verbs", verbs);
		if (!one || json_array_append_new(a, one) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *meta(const pass *p, const char *name, const char *ns)
{
	json_t *m = json_pack("{s:s, s:O, s:O}", "name", name, "labels", p->labels, "ownerReferences", p->owner);
	if (m && ns && json_object_set_new(m, "namespace", json_string(ns)) != 0)
		goto fail;
	if (m && p->s.annotations && json_object_set(m, "annotations", (json_t *)p->s.annotations) != 0)
		goto fail;
	return m;
fail:
	json_decref(m);
	return NULL;
}

/* {apiVersion, kind, metadata} of kind w; NULL when out of memory. */
static json_t *object(const pass *p, int w, const char *name, const char *ns)
{
	return json_pack("{s:s, s:s, s:o}", "apiVersion", K[w].api, "kind", K[w].kind, "metadata", meta(p, name, ns));
}

/* Sets member k of o to v (stolen); false (and o freed) on failure. */
static json_t *with(json_t *o, const char *k, json_t *v)
{
	if (!o || !v) {
		json_decref(o);
		json_decref(v);
		return NULL;
	}
	if (json_object_set_new(o, k, v) != 0) { /* v is consumed either way */
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *service_account(const pass *p)
{
	return object(p, W_SA, OBJ, p->t->ns);
}

static json_t *cluster_role(const pass *p)
{
	json_t *rules = rules_of(cluster_rules, sizeof(cluster_rules) / sizeof(cluster_rules[0]));
	if (rules && p->s.secrets) {
		json_t *read = rules_of(&secret_read, 1), *write = rules_of(&secret_write, 1);
		json_t *w = json_array_get(write, 0);
		/* All: every Secret, as the design grants it; else the names */
		if (!read || !w || (p->s.authorized && json_object_set(w, "resourceNames", p->s.authorized) != 0) ||
		    json_array_extend(rules, read) != 0 || json_array_extend(rules, write) != 0) {
			json_decref(rules);
			rules = NULL;
		}
		json_decref(read);
		json_decref(write);
	}
	return with(object(p, W_CROLE, OBJ, NULL), "rules", rules);
}

static json_t *subjects(const pass *p)
{
	return json_pack("[{s:s, s:s, s:s}]", "kind", "ServiceAccount", "name", OBJ, "namespace", p->t->ns);
}

static json_t *binding(const pass *p, int w, const char *name, const char *ns, const char *role_kind)
{
	json_t *o = with(object(p, w, name, ns), "roleRef",
	                 json_pack("{s:s, s:s, s:s}", "apiGroup", RBAC, "kind", role_kind, "name", name));
	return with(o, "subjects", subjects(p));
}

static json_t *role(const pass *p, const char *name, const char *ns, const rule *r, size_t n)
{
	return with(object(p, W_ROLE, name, ns), "rules", rules_of(r, n));
}

static json_t *metrics_service(const pass *p)
{
	return with(object(p, W_SVC, OBJ_METRICS, p->t->ns), "spec",
	            json_pack("{s:s, s:{s:s}, s:[{s:s, s:i, s:i, s:s}]}", "type", "ClusterIP", "selector", "app", APP,
	                      "ports", "name", "metrics", "port", METRICS_PORT, "targetPort", METRICS_PORT, "protocol",
	                      "TCP"));
}

static json_t *package_configmap(const pass *p)
{
	return with(object(p, W_CM, OBJ_PACKAGE, p->t->ns), "data", json_pack("{s:s}", p->t->pkg_key, p->pkg_json));
}

/* The design's injection ConfigMap: the label only. Its data is the
 * network operator's (never in our intent, so an apply keeps it). */
static json_t *injection_configmap(const pass *p)
{
	json_t *o = object(p, W_CM, OBJ_INJECTION, p->t->ns);
	json_t *md = json_object_get(o, "metadata");
	json_t *labels = json_deep_copy(p->labels); /* meta() shares p->labels */
	if (!o || !labels || json_object_set_new(labels, SG_TRUSTMANAGER_INJECT_LABEL, json_string("true")) != 0) {
		json_decref(labels);
		json_decref(o);
		return NULL;
	}
	if (json_object_set_new(md, "labels", labels) != 0) { /* labels taken either way */
		json_decref(o);
		return NULL;
	}
	return o;
}

/* The webhook's Service, trust-manager's: 443 to signet-trust's 6443. */
static json_t *webhook_service(const pass *p)
{
	return with(object(p, W_SVC, OBJ, p->t->ns), "spec",
	            json_pack("{s:s, s:{s:s}, s:[{s:s, s:i, s:i, s:s}]}", "type", "ClusterIP", "selector", "app", APP,
	                      "ports", "name", "webhook", "port", WEBHOOK_SVC_PORT, "targetPort", WEBHOOK_PORT,
	                      "protocol", "TCP"));
}

/* Without cert-manager: the serving certificate's Secret, as
 * cert-manager would write it (kubernetes.io/tls with ca.crt). */
static json_t *tls_secret(const pass *p)
{
	json_t *o = with(object(p, W_SECRET, OBJ_TLS, p->t->ns), "type", json_string("kubernetes.io/tls"));
	return with(
	    o, "data",
	    json_pack("{s:s, s:s, s:s}", "tls.crt", p->tls_b64[0], "tls.key", p->tls_b64[1], "ca.crt", p->tls_b64[2]));
}

/* With cert-manager: the design's self-signed Issuer and Certificate. */
static json_t *issuer(const pass *p)
{
	return with(object(p, W_ISSUER, OBJ, p->t->ns), "spec", json_pack("{s:{}}", "selfSigned"));
}

static json_t *certificate(const pass *p)
{
	return with(object(p, W_CERT, OBJ, p->t->ns), "spec",
	            json_pack("{s:s, s:[s], s:s, s:i, s:{s:s, s:s, s:s}}", "commonName", p->dns, "dnsNames", p->dns,
	                      "secretName", OBJ_TLS, "revisionHistoryLimit", 1, "issuerRef", "name", OBJ, "kind",
	                      "Issuer", "group", "cert-manager.io"));
}

/* trust-manager's ValidatingWebhookConfiguration: Bundle CREATE and
 * UPDATE to the Service's webhook path, failing closed. The CA: cert-
 * manager's CA injector fills caBundle from the Certificate (the
 * annotation; our intent leaves the field to it), or ours from the
 * Secret's ca.crt. */
static json_t *webhook_config(const pass *p)
{
	json_t *o = object(p, W_VWC, OBJ, NULL);
	if (o && p->cert_manager) {
		json_t *md = json_object_get(o, "metadata");
		json_t *ann = p->s.annotations ? json_deep_copy(p->s.annotations) : json_object();
		char from[SG_NAMES_LABEL_MAX + 32];
		snprintf(from, sizeof(from), "%s/%s", p->t->ns, OBJ);
		if (!ann || json_object_set_new(ann, INJECT_CA_FROM, json_string(from)) != 0) {
			json_decref(ann);
			json_decref(o);
			return NULL;
		}
		if (json_object_set_new(md, "annotations", ann) != 0) { /* ann taken either way */
			json_decref(o);
			return NULL;
		}
	}
	json_t *cc = json_pack("{s:{s:s, s:s, s:s, s:i}}", "service", "name", OBJ, "namespace", p->t->ns, "path",
	                       SG_TRUST_WEBHOOK_PATH, "port", WEBHOOK_SVC_PORT);
	if (cc && !p->cert_manager)
		cc = with(cc, "caBundle", json_string(p->tls_b64[2]));
	json_t *hook =
	    json_pack("{s:s, s:o, s:[{s:[s], s:[s], s:[s, s], s:[s]}], s:[s], s:s, s:s, s:i}", "name", WEBHOOK_NAME,
	              "clientConfig", cc, "rules", "apiGroups", SG_TRUST_GROUP, "apiVersions", SG_TRUST_VERSION,
	              "operations", "CREATE", "UPDATE", "resources", "bundles", "admissionReviewVersions", "v1",
	              "sideEffects", "None", "failurePolicy", "Fail", "timeoutSeconds", 5);
	return with(o, "webhooks", hook ? json_pack("[o]", hook) : NULL);
}

static int arg(json_t *args, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int arg(json_t *args, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -1;
	return json_array_append_new(args, json_string(buf));
}

/* trust-manager's arguments as the anchor writes them, plus the Lease's
 * namespace: signet-trust, like trust-manager, would elect in the trust
 * namespace, where the leader-election Role is not. */
static json_t *container_args(const pass *p)
{
	const tm_spec *s = &p->s;
	json_t *a = json_array();
	int rc = !a ? -1 : 0;
	rc |= arg(a, "--log-format=%s", s->log_format);
	rc |= arg(a, "--log-level=%lld", (long long)s->log_level);
	rc |= arg(a, "--metrics-port=%d", METRICS_PORT);
	rc |= arg(a, "--readiness-probe-port=%d", PROBE_PORT);
	rc |= arg(a, "--readiness-probe-path=/readyz");
	rc |= arg(a, "--leader-elect=true");
	rc |= arg(a, "--leader-election-namespace=%s", p->t->ns);
	rc |= arg(a, "--leader-election-lease-duration=15s");
	rc |= arg(a, "--leader-election-renew-deadline=10s");
	rc |= arg(a, "--trust-namespace=%s", s->trust_ns);
	rc |= arg(a, "--webhook-host=0.0.0.0");
	rc |= arg(a, "--webhook-port=%d", WEBHOOK_PORT);
	rc |= arg(a, "--webhook-certificate-dir=" TLS_DIR);
	if (s->secrets)
		rc |= arg(a, "--secret-targets-enabled=true");
	if (s->filter_expired)
		rc |= arg(a, "--filter-expired-certificates=true");
	if (s->package)
		rc |= arg(a, "--default-package-location=" PACKAGE_DIR "/%s", p->t->pkg_key);
	if (rc != 0) {
		json_decref(a);
		return NULL;
	}
	return a;
}

static json_t *container(const pass *p)
{
	json_t *c =
	    json_pack("{s:s, s:s, s:s, s:o, s:[{s:s, s:i, s:s}, {s:s, s:i, s:s}, {s:s, s:i, s:s}], "
	              "s:{s:{s:s, s:i}, s:i, s:i}, "
	              "s:{s:{s:s, s:i}, s:i, s:i}, s:{s:b, s:b, s:b, s:{s:[s]}, s:{s:s}}}",
	              "name", OBJ, "image", p->t->image, "imagePullPolicy", "IfNotPresent", "args", container_args(p),
	              "ports", "name", "metrics", "containerPort", METRICS_PORT, "protocol", "TCP", "name", "probes",
	              "containerPort", PROBE_PORT, "protocol", "TCP", "name", "webhook", "containerPort", WEBHOOK_PORT,
	              "protocol", "TCP", "readinessProbe", "httpGet", "path", "/readyz", "port", PROBE_PORT,
	              "initialDelaySeconds", 3, "periodSeconds", 7, "livenessProbe", "httpGet", "path", "/healthz",
	              "port", PROBE_PORT, "initialDelaySeconds", 15, "periodSeconds", 20, "securityContext",
	              "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1, "runAsNonRoot", 1, "capabilities",
	              "drop", "ALL", "seccompProfile", "type", "RuntimeDefault");
	if (c)
		c = with(c, "terminationMessagePolicy", json_string("FallbackToLogsOnError"));
	if (c && p->s.resources)
		c = with(c, "resources", json_deep_copy(p->s.resources));
	/* The webhook's certificate (signet-trust waits for it and follows
	 * its changes), then the package. */
	json_t *mounts = json_pack("[{s:s, s:s, s:b}]", "name", TLS_VOLUME, "mountPath", TLS_DIR, "readOnly", 1);
	if (mounts && p->s.package &&
	    json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", PACKAGE_VOLUME, "mountPath", PACKAGE_DIR,
	                                            "readOnly", 1)) != 0) {
		json_decref(mounts);
		mounts = NULL;
	}
	return c ? with(c, "volumeMounts", mounts) : (json_decref(mounts), NULL);
}

static json_t *pod_template(const pass *p)
{
	json_t *spec =
	    json_pack("{s:s, s:{s:b, s:{s:s}}, s:[o]}", "serviceAccountName", OBJ, "securityContext", "runAsNonRoot", 1,
	              "seccompProfile", "type", "RuntimeDefault", "containers", container(p));
	json_t *vols = json_pack("[{s:s, s:{s:s}}]", "name", TLS_VOLUME, "secret", "secretName", OBJ_TLS);
	if (vols && p->s.package &&
	    json_array_append_new(
	        vols, json_pack("{s:s, s:{s:s}}", "name", PACKAGE_VOLUME, "configMap", "name", OBJ_PACKAGE)) != 0) {
		json_decref(vols);
		vols = NULL;
	}
	spec = spec ? with(spec, "volumes", vols) : (json_decref(vols), NULL);
	if (spec && p->s.node_selector)
		spec = with(spec, "nodeSelector", json_deep_copy(p->s.node_selector));
	if (spec && p->s.affinity)
		spec = with(spec, "affinity", json_deep_copy(p->s.affinity));
	if (spec && p->s.tolerations)
		spec = with(spec, "tolerations", json_deep_copy(p->s.tolerations));
	/* The user's annotations, and the package's hash: a new package is a
	 * new pod template, so the pods roll. */
	json_t *ann = p->s.annotations ? json_deep_copy(p->s.annotations) : json_object();
	if (ann && p->s.package)
		ann = with(ann, SG_TRUSTMANAGER_PACKAGE_HASH, json_string(p->pkg_hash));
	json_t *md = ann ? json_pack("{s:O}", "labels", p->labels) : NULL;
	if (md && json_object_size(ann) > 0)
		md = with(md, "annotations", json_incref(ann));
	json_decref(ann);
	return json_pack("{s:o, s:o}", "metadata", md, "spec", spec);
}

static json_t *deployment(const pass *p)
{
	return with(object(p, W_DEPLOY, OBJ, p->t->ns), "spec",
	            json_pack("{s:i, s:{s:{s:s}}, s:o}", "replicas", 1, "selector", "matchLabels", "app", APP,
	                      "template", pod_template(p)));
}

/* An object the pass wants: its kind (watch), place and intent. */
typedef struct want {
	int w;
	const char *ns; /* NULL: cluster-scoped */
	const char *name;
	json_t *body; /* owned; NULL when only named (deletion) */
} want;

static void wants_free(want *w, size_t n);

/* Every object p's spec asks for, in the order they are applied (the
 * Deployment last, once what it runs with is in place). With bodies
 * false only the names (deletion, where the spec may be invalid). */
static int wants_of(pass *p, want *out, size_t *n, bool bodies)
{
	const char *ns = p->t->ns, *tns = p->accepted_ns;
	size_t i = 0;
	out[i++] = (want){W_SA, ns, OBJ, bodies ? service_account(p) : NULL};
	out[i++] = (want){W_CROLE, NULL, OBJ, bodies ? cluster_role(p) : NULL};
	out[i++] = (want){W_CRB, NULL, OBJ, bodies ? binding(p, W_CRB, OBJ, NULL, "ClusterRole") : NULL};
	if (tns) {
		out[i++] = (want){W_ROLE, tns, OBJ, bodies ? role(p, OBJ, tns, trust_rules, 1) : NULL};
		out[i++] = (want){W_RB, tns, OBJ, bodies ? binding(p, W_RB, OBJ, tns, "Role") : NULL};
	}
	out[i++] = (want){W_ROLE, ns, OBJ_LEADER, bodies ? role(p, OBJ_LEADER, ns, leader_rules, 1) : NULL};
	out[i++] = (want){W_RB, ns, OBJ_LEADER, bodies ? binding(p, W_RB, OBJ_LEADER, ns, "Role") : NULL};
	out[i++] = (want){W_SVC, ns, OBJ_METRICS, bodies ? metrics_service(p) : NULL};
	out[i++] = (want){W_SVC, ns, OBJ, bodies ? webhook_service(p) : NULL};
	if (!bodies || p->cert_manager) {
		out[i++] = (want){W_ISSUER, ns, OBJ, bodies ? issuer(p) : NULL};
		out[i++] = (want){W_CERT, ns, OBJ, bodies ? certificate(p) : NULL};
	}
	if (!bodies || !p->cert_manager)
		out[i++] = (want){W_SECRET, ns, OBJ_TLS, bodies ? tls_secret(p) : NULL};
	if (!bodies || (p->s.package && p->t->ca_source == SG_TRUSTMANAGER_CA_OPENSHIFT))
		out[i++] = (want){W_CM, ns, OBJ_INJECTION, bodies ? injection_configmap(p) : NULL};
	if (!bodies || p->s.package)
		out[i++] = (want){W_CM, ns, OBJ_PACKAGE, bodies ? package_configmap(p) : NULL};
	out[i++] = (want){W_DEPLOY, ns, OBJ, bodies ? deployment(p) : NULL};
	/* Last: the webhook fails closed, so it is configured once what
	 * serves it is in place. */
	out[i++] = (want){W_VWC, NULL, OBJ, bodies ? webhook_config(p) : NULL};
	*n = i;
	for (size_t j = 0; bodies && j < i; j++) {
		if (!out[j].body) {
			wants_free(out, i); /* the Secret's body holds the key */
			*n = 0;
			SG_BAIL(SG_EINTERNAL, "trustmanager: out of memory");
		}
	}
	return SG_OK;
}

static void wants_free(want *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sg_kube_secret_wipe(w[i].body); /* the webhook's key */
		json_decref(w[i].body);
	}
}

static sg_kube_ref ref_of(const want *w)
{
	sg_kube_ref r = K[w->w].ref;
	r.ns = w->ns;
	r.name = w->name;
	return r;
}

static void key_of(const want *w, char out[SG_CTRL_KEY_MAX])
{
	snprintf(out, SG_CTRL_KEY_MAX, "%s%s%s", w->ns ? w->ns : "", w->ns ? "/" : "", w->name);
}

/* ---- status ---- */

static sg_kube_ref cr_ref(const json_t *cr)
{
	sg_kube_ref r = K[W_TM].ref;
	r.name = sg_kube_meta_str(cr, "name");
	return r;
}

static int64_t generation(const json_t *cr)
{
	return json_integer_value(json_object_get(json_object_get(cr, "metadata"), "generation"));
}

static const char *ready_reason(const json_t *cr)
{
	return json_string_value(json_object_get(sg_ctrl_condition_find(cr, "Ready"), "reason"));
}

/* Writes status (stolen) with conds (stolen) when it differs, counts it,
 * and records an Event when the Ready condition's reason changes:
 * Warning with the message for a failure, Normal otherwise. */
static int put_status(sg_trustmanager *t, sg_ctrl *c, const json_t *cr, json_t *status, json_t *conds)
{
	if (!status || !conds || json_object_set_new(status, "conditions", conds) != 0) {
		json_decref(status);
		json_decref(conds);
		SG_BAIL(SG_EINTERNAL, "trustmanager: out of memory");
	}
	sg_kube_ref ref = cr_ref(cr);
	bool written = false;
	int rc = sg_opr_status(c, &t->st, &ref, K[W_TM].kind, cr, status, &written);
	if (written) {
		atomic_fetch_add(&t->status_writes, 1);
		const json_t *ready = json_array_get(json_object_get(status, "conditions"), 0);
		const char *was = ready_reason(cr), *now = json_string_value(json_object_get(ready, "reason"));
		const char *st = json_string_value(json_object_get(ready, "status"));
		const char *m = json_string_value(json_object_get(ready, "message"));
		bool failing = st && strcmp(st, "True") != 0 && now && strcmp(now, "Progressing") != 0;
		if (now && (!was || strcmp(was, now) != 0))
			sg_ctrl_event(c, cr, failing ? "Warning" : "Normal", now, "%s", m && *m ? m : now);
	}
	json_decref(status);
	return rc;
}

/* The status fields besides conditions: what the spec asks for once it
 * was accepted (spec non-NULL), else what the status said (a refusal
 * changes nothing that was in effect), with the trust namespace as far
 * as it is known. */
static json_t *status_fields_of(const pass *p, bool accepted)
{
	const tm_spec *s = &p->s;
	if (accepted)
		return json_pack("{s:s, s:s, s:s, s:s, s:s}", "trustManagerImage", p->t->image, "trustNamespace",
		                 s->trust_ns, "secretTargetsPolicy", s->targets, "defaultCAPackagePolicy",
		                 s->package ? "Enabled" : "Disabled", "filterExpiredCertificatesPolicy",
		                 s->filter_expired ? "Enabled" : "Disabled");
	json_t *o = json_object();
	const json_t *have = json_object_get(p->cr, "status");
	for (size_t i = 0; o && i < sizeof(status_fields) / sizeof(status_fields[0]); i++) {
		json_t *v = json_object_get(have, status_fields[i]);
		if (json_is_string(v) && json_object_set(o, status_fields[i], v) != 0) {
			json_decref(o);
			return NULL;
		}
	}
	if (o && p->accepted_ns && json_object_set_new(o, "trustNamespace", json_string(p->accepted_ns)) != 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A refusal: Ready=False/Degraded=True with reason and message. */
static int put_failed(pass *p, bool accepted, const char *reason, const char *msg)
{
	return put_status(p->t, p->c, p->cr, status_fields_of(p, accepted),
	                  sg_opr_conditions(msg, reason, SG_OPR_OPERAND_PROGRESSING, "", generation(p->cr)));
}

/* ---- the operand ---- */

static bool deleting(const json_t *o)
{
	return sg_kube_meta_str(o, "deletionTimestamp") != NULL;
}

/* The operand's pods (a new array); sg_opr_operand_state passes over
 * those on their way out. */
static json_t *operand_pods(sg_trustmanager *t, sg_ctrl *c)
{
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, W_POD));
	json_t *out = json_array();
	size_t i;
	json_t *pod;
	json_array_foreach(all, i, pod)
	{
		const char *ns = sg_kube_meta_str(pod, "namespace");
		if (out && ns && strcmp(ns, t->ns) == 0)
			json_array_append(out, pod);
	}
	json_decref(all);
	return out;
}

/* ---- a pass ---- */

static void pass_free(pass *p)
{
	for (size_t i = 0; i < 3; i++) {
		if (p->tls_b64[i])
			sg_wipe(p->tls_b64[i], strlen(p->tls_b64[i]));
		free(p->tls_b64[i]);
	}
	if (p->tls_copy_read)
		sg_kube_secret_wipe(p->tls_copy);
	json_decref(p->tls_copy);
	json_decref(p->s.authorized);
	json_decref(p->labels);
	json_decref(p->owner);
}

static bool namespace_ok(sg_ctrl *c, const char *name, const char *role, char *msg, size_t cap)
{
	json_t *ns = sg_kube_informer_get(sg_ctrl_informer(c, W_NS), NULL, name);
	bool ok = ns && !deleting(ns);
	if (!ns && strcmp(role, "trust") == 0)
		refuse(msg, cap,
		       "trust namespace \"%s\" does not exist, create the namespace before creating TrustManager CR",
		       name);
	else if (!ns)
		refuse(msg, cap, "%s namespace \"%s\" does not exist", role, name);
	else if (!ok)
		refuse(msg, cap, "%s namespace \"%s\" is being deleted", role, name);
	json_decref(ns);
	return ok;
}

/* The object w names, from the server; *out NULL when absent. */
static int live_of_server(pass *p, const want *w, json_t **out)
{
	*out = NULL;
	sg_kube_ref ref = ref_of(w);
	int rc = sg_kube_get(sg_ctrl_kube(p->c), &ref, out);
	return rc == SG_ENOTFOUND || (rc < 0 && sg_kube_last_status()->code == 404) ? SG_OK : rc;
}

/* The live object w names: from our informer's cache, or (cert-manager's
 * kinds, not watched) from the server; *out NULL when absent. */
static int live_of(pass *p, const want *w, json_t **out)
{
	*out = NULL;
	if (w->w < W_N) {
		*out = sg_kube_informer_get(sg_ctrl_informer(p->c, (size_t)w->w), w->ns, w->name);
		return SG_OK;
	}
	return live_of_server(p, w, out);
}

/* Applies every wanted object; on a failure the API server will not take
 * back by itself (an invalid object, no permission) the status says so. */
static int apply_all(pass *p, want *w, size_t n, bool *deployment_written, bool *refused)
{
	*deployment_written = false;
	*refused = false;
	for (size_t i = 0; i < n; i++) {
		sg_kube_ref ref = ref_of(&w[i]);
		json_t *live = NULL;
		SG_TRY(live_of(p, &w[i], &live));
		bool changes = !live || !sg_ctrl_object_holds(p->c, w[i].body, live);
		/* The Secret: compared with, and written only over, the copy
		 * the pair was decided on (own_certificate), never a newer
		 * one the cache may hold by now. */
		bool exact = w[i].w == W_SECRET;
		int rc = !exact ? sg_opr_apply(p->c, &p->t->st, p->cr, &ref, K[w[i].w].kind, w[i].body, live)
		         : p->tls_copy && sg_ctrl_object_holds(p->c, w[i].body, p->tls_copy)
		             ? SG_OK
		             : sg_opr_apply_exact(p->c, &p->t->st, p->cr, &ref, K[w[i].w].kind, w[i].body, p->tls_rv);
		json_decref(live);
		if (exact && !sg_ctrl_stopping(p->c) && sg_kube_conflict(rc)) {
			/* The Secret was written since our copy. A Secret of ours
			 * changed: its watch event brings the next pass. A create
			 * refused (one of the name not ours, which the informer
			 * does not see, or made just now): the next pass reads it
			 * from the server; that one is asked for here. Nothing
			 * after it (the caBundle) is applied from this pass. */
			atomic_fetch_add(&p->t->conflicts, 1);
			if (!p->tls_copy && p->res)
				p->res->requeue_after_ms = ECHO_DELAY_MS;
			*refused = true;
			return SG_OK;
		}
		if (rc == SG_EINVAL || rc == SG_EAUTH) {
			sg_error e;
			sg_error_save(&e);
			char msg[MSG_MAX];
			snprintf(msg, sizeof(msg), "%s %s%s%s: %s", K[w[i].w].kind, w[i].ns ? w[i].ns : "",
			         w[i].ns ? "/" : "", w[i].name, e.msg);
			/* The apply's error is the one to return: a status that
			 * cannot be written either is only logged. */
			if (put_failed(p, true, "Failed", msg) < 0)
				sg_log_error_last(SG_LOG_WARN, "trustmanager: cannot write the failure to status");
			sg_error_restore(&e);
			*refused = true;
			/* An invalid object stays invalid until the spec changes
			 * (an event); a permission may be granted any time. */
			return rc == SG_EINVAL ? SG_OK : rc;
		}
		SG_TRY(rc);
		if (w[i].w == W_DEPLOY && changes)
			*deployment_written = true;
	}
	return SG_OK;
}

/* Deletes the objects of ours the pass no longer wants. */
static int delete_unwanted(pass *p, const want *w, size_t n)
{
	for (int k = W_MANAGED_FIRST; k <= W_MANAGED_LAST; k++) {
		char keys[WANT_MAX][SG_CTRL_KEY_MAX];
		const char *keep[WANT_MAX];
		size_t nkeep = 0;
		for (size_t i = 0; i < n; i++) {
			if (w[i].w != k)
				continue;
			key_of(&w[i], keys[nkeep]);
			keep[nkeep] = keys[nkeep];
			nkeep++;
		}
		SG_TRY(sg_opr_delete_owned(p->c, &p->t->st, p->cr, sg_ctrl_informer(p->c, k), &K[k].ref, NAME, keep,
		                           nkeep, NULL));
	}
	return SG_OK;
}

static int operand_status(pass *p, bool deployment_written)
{
	sg_kube_ref dref = K[W_DEPLOY].ref;
	dref.ns = p->t->ns;
	dref.name = OBJ;
	json_t *d = NULL;
	if (deployment_written) {
		/* The cache still holds the Deployment before our write. */
		int rc = sg_kube_get(sg_ctrl_kube(p->c), &dref, &d);
		if (rc < 0 && rc != SG_ENOTFOUND)
			return rc;
	} else {
		d = sg_kube_informer_get(sg_ctrl_informer(p->c, W_DEPLOY), p->t->ns, OBJ);
	}
	json_t *pods = operand_pods(p->t, p->c);
	char msg[MSG_MAX];
	sg_opr_operand st = sg_opr_operand_state(d, pods, msg, sizeof(msg));
	json_decref(d);
	json_decref(pods);
	return put_status(p->t, p->c, p->cr, status_fields_of(p, true),
	                  sg_opr_conditions(NULL, NULL, st, msg, generation(p->cr)));
}

/* The trust namespace, created when missing, as the design asks (it is
 * never deleted: Bundles' sources live there). false with why. A
 * namespace created here is not in the cache yet: *made tells the caller
 * not to look for it there this pass. */
static bool trust_namespace(pass *p, bool *made, char *msg, size_t cap)
{
	*made = false;
	json_t *have = sg_kube_informer_get(sg_ctrl_informer(p->c, W_NS), NULL, p->s.trust_ns);
	json_decref(have);
	if (have)
		return true;
	sg_kube_ref ref = K[W_NS].ref;
	json_t *body = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name",
	                         p->s.trust_ns);
	int rc = !body                    ? sg_error_set(SG_EINTERNAL, "trustmanager: out of memory")
	         : sg_ctrl_stopping(p->c) ? sg_error_set(SG_EBUSY, "stopping")
	                                  : sg_kube_create(sg_ctrl_kube(p->c), &ref, body, NULL);
	json_decref(body);
	if (rc == SG_OK) {
		atomic_fetch_add(&p->t->st.writes, 1);
		sg_ctrl_event(p->c, p->cr, "Normal", "Created", "Namespace %s created (the trust namespace)",
		              p->s.trust_ns);
		sg_log(SG_LOG_INFO, "trust namespace created", SG_F_STR("namespace", p->s.trust_ns), SG_F_END);
	}
	bool exists =
	    sg_kube_conflict(rc) && strcmp(sg_kube_last_status()->reason, "AlreadyExists") == 0; /* the cache trails */
	if (rc == SG_OK || exists) {
		*made = true;
		return true;
	}
	refuse(msg, cap, "trust namespace \"%s\" does not exist and cannot be created: %s", p->s.trust_ns,
	       sg_error_last()->msg);
	return false;
}

/* ---- the default CA package ---- */

/* trust-manager's package file ({name, bundle, version}, as
 * sg_trust_package_write writes it) from a normalized bundle (strict PEM,
 * deduplicated, sorted: sg_certset), and checked as signet-trust will read
 * it: *json (caller frees) and hash, the SHA-256 (hex) of the PEM. version
 * NULL: derived from that hash. what names the source in messages. */
static int package_of(const char *pem, size_t plen, const char *name, const char *version, const char *what,
                      char **json, char hash[65])
{
	*json = NULL;
	uint8_t d[32];
	SG_TRY(sg_sha256(pem, plen, d));
	sg_hex_encode(hash, d, sizeof(d));
	char derived[32];
	if (!version) {
		snprintf(derived, sizeof(derived), "sha256-%.16s", hash);
		version = derived;
	}
	char *text = NULL;
	SG_TRY(sg_trust_package_json(pem, plen, name, version, &text));
	size_t tlen = strlen(text);
	sg_trust_package *check = NULL;
	int rc = tlen > PACKAGE_CM_MAX ? sg_error_set(SG_EINVAL,
	                                              "%s makes a package of %zu bytes, more than a ConfigMap "
	                                              "holds",
	                                              what, tlen)
	                               : sg_trust_package_parse(&check, text, tlen, name);
	sg_trust_package_free(check);
	if (rc < 0) {
		free(text);
		return rc;
	}
	*json = text;
	return SG_OK;
}

/* Source file: the package from a PEM file of CAs, once, at new(). */
static int package_make(sg_trustmanager *t, const char *path, const char *version)
{
	SG_ENSURE(path && *path, SG_EINVAL, "no CA bundle file was configured");
	char *pem = NULL;
	size_t plen = 0;
	SG_TRY(sg_trust_package_normalize(path, &pem, &plen));
	int rc = package_of(pem, plen, t->pkg_name, version, path, &t->pkg_json, t->pkg_hash);
	free(pem);
	return rc;
}

typedef enum { PKG_READY, PKG_WAITING, PKG_FAILED } pkg_state;

/* Source OpenShift: the package of the bundle injected into the injection
 * ConfigMap (the cached copy), version its resourceVersion, as the design
 * formats it; made again only when that changes. PKG_WAITING while the
 * network operator has not written the bundle, PKG_FAILED when it cannot
 * be used; msg says which. */
static pkg_state injected_package(pass *p, char *msg, size_t cap)
{
	sg_trustmanager *t = p->t;
	json_t *cm = sg_kube_informer_get(sg_ctrl_informer(p->c, W_CM), t->ns, OBJ_INJECTION);
	const char *rv = sg_kube_meta_str(cm, "resourceVersion");
	const json_t *v = json_object_get(json_object_get(cm, "data"), SG_TRUSTMANAGER_INJECTED_KEY);
	char what[200];
	snprintf(what, sizeof(what), "ConfigMap %s/%s (key %s)", t->ns, OBJ_INJECTION, SG_TRUSTMANAGER_INJECTED_KEY);
	pkg_state st = PKG_FAILED;
	if (!json_string_length(v)) {
		refuse(msg, cap,
		       "waiting for the cluster's trusted CA bundle: OpenShift's network operator injects it into %s, "
		       "labelled %s=true; off OpenShift, run signet-operator with --default-ca-package-source=file",
		       what, SG_TRUSTMANAGER_INJECT_LABEL);
		st = PKG_WAITING;
	} else if (rv && t->inj_json && strcmp(rv, t->inj_rv) == 0) {
		st = PKG_READY;
	} else if (!rv || !*rv || strlen(rv) >= sizeof(t->inj_rv)) {
		refuse(msg, cap, "%s has no usable resourceVersion", what);
	} else {
		char *pem = NULL, *json = NULL;
		size_t plen = 0;
		char hash[65];
		int rc = sg_trust_package_normalize_pem(json_string_value(v), json_string_length(v), what, &pem, &plen);
		if (rc == SG_OK)
			rc = package_of(pem, plen, t->pkg_name, rv, what, &json, hash);
		free(pem);
		if (rc == SG_OK) {
			free(t->inj_json);
			t->inj_json = json;
			memcpy(t->inj_hash, hash, sizeof(hash));
			snprintf(t->inj_rv, sizeof(t->inj_rv), "%s", rv);
			st = PKG_READY;
		} else {
			refuse(msg, cap, "the injected CA bundle cannot be used: %s", sg_error_last()->msg);
		}
	}
	json_decref(cm);
	if (st == PKG_READY) {
		p->pkg_json = t->inj_json;
		p->pkg_hash = t->inj_hash;
	}
	return st;
}

/* Until the injected bundle is there (or usable), the injection
 * ConfigMap is all the pass applies: the design waits for the bundle
 * before it deploys, and an operand already running keeps its package.
 * The network operator's write is an event of our ConfigMap informer, so
 * no requeue is needed. */
static int await_injection(pass *p, pkg_state st, const char *why)
{
	want w = {W_CM, p->t->ns, OBJ_INJECTION, injection_configmap(p)};
	SG_ENSURE(w.body, SG_EINTERNAL, "trustmanager: out of memory");
	bool written = false, refused = false;
	int rc = apply_all(p, &w, 1, &written, &refused);
	json_decref(w.body);
	if (rc < 0 || refused)
		return rc;
	if (st == PKG_FAILED)
		return put_failed(p, true, "Failed", why);
	return put_status(p->t, p->c, p->cr, status_fields_of(p, true),
	                  sg_opr_conditions(NULL, NULL, SG_OPR_OPERAND_PROGRESSING, why, generation(p->cr)));
}

/* Whether o (a cached or fetched object) is one we made for NAME. */
static bool ours(const json_t *o)
{
	const json_t *l = json_object_get(json_object_get(o, "metadata"), "labels");
	const char *owner = json_string_value(json_object_get(l, SG_OPR_OWNER_LABEL));
	const char *app = json_string_value(json_object_get(l, "app"));
	return owner && app && strcmp(owner, NAME) == 0 && strcmp(app, APP) == 0;
}

/* ---- the webhook's serving certificate ---- */

/* Whether cert-manager's Issuer and Certificate kinds are served (their
 * CRDs are in our cache). */
static bool cert_manager_present(sg_ctrl *c)
{
	sg_kube_informer *inf = sg_ctrl_informer(c, W_CRD);
	json_t *a = sg_kube_informer_get(inf, NULL, CRD_CERTIFICATES);
	json_t *b = sg_kube_informer_get(inf, NULL, CRD_ISSUERS);
	bool both = a && b;
	json_decref(a);
	json_decref(b);
	return both;
}

/* A Secret data value (base64) decoded into a NUL-terminated buffer;
 * NULL when absent, not base64 or over max. Caller frees (wiping a key). */
static char *b64_value(const json_t *data, const char *key, size_t max, size_t *len)
{
	const char *v = json_string_value(json_object_get(data, key));
	size_t n = v ? strlen(v) : 0;
	if (!n || n / 4 * 3 > max)
		return NULL;
	char *out = malloc(n / 4 * 3 + 1);
	if (out && sg_b64_decode(SG_B64_STD, v, n, (uint8_t *)out, n / 4 * 3, len) != SG_OK) {
		free(out);
		return NULL;
	}
	if (out)
		out[*len] = '\0';
	return out;
}

static char *b64_of(const char *text)
{
	size_t n = sg_b64_encoded_len(SG_B64_STD, strlen(text));
	char *out = malloc(n + 1);
	if (out && sg_b64_encode(SG_B64_STD, (const uint8_t *)text, strlen(text), out, n + 1) != SG_OK) {
		free(out);
		return NULL;
	}
	return out;
}

/* Whether crt (PEM) is a certificate for dns that key belongs to, and
 * not yet in the last third of its life (*valid: not expired). */
static bool tls_current(const pass *p, const char *crt, size_t crt_len, const char *key, size_t key_len, bool *valid)
{
	*valid = false;
	sg_x509_bundle *b = NULL;
	if (sg_x509_bundle_parse(&b, crt, crt_len) != SG_OK)
		return false;
	sg_x509_facts f;
	sg_x509_keyinfo ki;
	const char *dns = p->dns;
	int64_t now = sg_wall_seconds();
	bool ok = sg_x509_bundle_count(b) == 1 && sg_x509_get_facts(b, 0, &f) == SG_OK;
	*valid = ok && now >= f.not_before && now < f.not_after;
	ok = *valid && sg_x509_names_are(b, 0, dns, &dns, 1, NULL) &&
	     now < f.not_before + (f.not_after - f.not_before) / 3 * 2 && key &&
	     sg_x509_key_check(b, 0, key, key_len, &ki) == SG_OK;
	sg_x509_bundle_free(b);
	return ok;
}

/* Our Secret's fields handed to the operator's apply when updates own
 * some of them: a Secret created by a plain POST (by signet before it
 * created this Secret as an apply, whose writes carried no field manager
 * and are owned by the User-Agent's; or one whose second step was
 * refused) keeps a label dropped from controllerConfig for good
 * otherwise. Only ownership changes. Returns the copy the pass goes on
 * with: the patched Secret when it was patched (read from the server, so
 * wiped after the pass), else sec. A Secret changed since the copy (a
 * cache behind) is refused and left to the pass its watch event brings;
 * any other failure is logged and the pass goes on: it decides nothing. */
static json_t *adopt_secret(pass *p, json_t *sec)
{
	static const char *const from[] = {SG_KUBE_USER_AGENT_MANAGER, SG_OPR_FIELD_MANAGER};
	sg_kube_ref ref = K[W_SECRET].ref;
	ref.ns = p->t->ns;
	ref.name = OBJ_TLS;
	json_t *adopted = NULL;
	int rc = sg_ctrl_stopping(p->c) ? SG_OK
	                                : sg_kube_adopt_fields(sg_ctrl_kube(p->c), &ref, sec, from, 2,
	                                                       sg_ctrl_field_manager(p->c), &adopted);
	if (rc < 0 && !sg_kube_conflict(rc))
		sg_log(SG_LOG_WARN, "trustmanager: cannot hand the webhook Secret's fields to the operator's apply",
		       SG_F_STR("namespace", p->t->ns), SG_F_STR("secret", OBJ_TLS),
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
	if (rc < 0)
		sg_error_clear(); /* the pass goes on: nothing of it was decided here */
	const char *rv = sg_kube_meta_str(adopted, "resourceVersion");
	if (!adopted || !rv || !*rv) {
		sg_kube_secret_release(&adopted);
		return sec;
	}
	sg_log(SG_LOG_INFO, "trustmanager: the webhook Secret's fields handed to the operator's apply",
	       SG_F_STR("namespace", p->t->ns), SG_F_STR("secret", OBJ_TLS), SG_F_END);
	atomic_fetch_add(&p->t->st.writes, 1);
	if (p->tls_copy_read)
		sg_kube_secret_wipe(sec);
	json_decref(sec);
	p->tls_copy = adopted;
	p->tls_copy_read = true;
	p->tls_rv = rv;
	return adopted;
}

/* Without cert-manager: the webhook's certificate, signet's own. The
 * Secret's pair is kept while it is ours, fits the Service's name and is
 * in the first two thirds of its life; otherwise a new self-signed pair
 * is made (sg_softkey), and the caBundle is the new certificate followed
 * by the old one while that is valid. Sets p->tls_b64, tls_copy and
 * tls_rv: the cache may be behind a pair written since (our own last
 * pass, whose echo has not come back; another replica's), and replacing
 * that one would drop from the caBundle a certificate pods may already
 * serve, so the Secret is written only over the copy read here
 * (apply_all). A Secret the cache does not hold is read from the server:
 * it may be ours, made moments ago, or one of that name without our
 * labels, which the informer never sees. */
static int own_certificate(pass *p)
{
	json_t *sec = sg_kube_informer_get(sg_ctrl_informer(p->c, W_SECRET), p->t->ns, OBJ_TLS);
	if (!sec) {
		want w = {W_SECRET, p->t->ns, OBJ_TLS, NULL};
		SG_TRY(live_of_server(p, &w, &sec));
		p->tls_copy_read = sec != NULL;
	}
	p->tls_copy = sec; /* the pass's now */
	p->tls_rv = sec ? sg_kube_meta_str(sec, "resourceVersion") : NULL;
	SG_ENSURE(!sec || (p->tls_rv && *p->tls_rv), SG_EINVAL, "trustmanager: Secret %s/%s has no resourceVersion",
	          p->t->ns, OBJ_TLS);
	if (sec && ours(sec))
		sec = adopt_secret(p, sec);
	const json_t *data = json_object_get(sec, "data");
	size_t clen = 0, klen = 0, alen = 0;
	char *crt = ours(sec) ? b64_value(data, "tls.crt", TLS_PEM_MAX, &clen) : NULL;
	char *key = crt ? b64_value(data, "tls.key", TLS_PEM_MAX, &klen) : NULL;
	char *ca = crt ? b64_value(data, "ca.crt", TLS_PEM_MAX, &alen) : NULL;
	bool valid = false; /* the Secret's certificate, still valid: kept in the caBundle when replaced */
	bool current = crt && tls_current(p, crt, clen, key, klen, &valid);
	int rc = SG_OK;
	if (current && ca && strstr(ca, crt)) {
		for (size_t i = 0; i < 3; i++) {
			const char *v = json_string_value(json_object_get(data, i == 0   ? "tls.crt"
			                                                        : i == 1 ? "tls.key"
			                                                                 : "ca.crt"));
			p->tls_b64[i] = strdup(v);
			if (!p->tls_b64[i])
				rc = sg_error_set(SG_EINTERNAL, "trustmanager: out of memory");
		}
	} else {
		const char *dns = p->dns;
		sg_softkey_request r = {.type = SG_SOFTKEY_EC_P256,
		                        .cn = dns,
		                        .dns = &dns,
		                        .ndns = 1,
		                        .ttl = TLS_TTL,
		                        .ext_key_usage = SG_EKU_SERVER_AUTH};
		char *nkey = NULL, *ncrt = NULL;
		rc = sg_softkey_self_signed(&r, &nkey, &ncrt);
		char *bundle = NULL;
		if (rc == SG_OK) {
			/* the old certificate stays trusted while pods may serve it */
			bool keep_old = crt && valid;
			size_t n = strlen(ncrt) + (keep_old ? clen : 0) + 1;
			bundle = malloc(n);
			if (bundle)
				snprintf(bundle, n, "%s%s", ncrt, keep_old ? crt : "");
			p->tls_b64[0] = b64_of(ncrt);
			p->tls_b64[1] = b64_of(nkey);
			p->tls_b64[2] = bundle ? b64_of(bundle) : NULL;
			if (!p->tls_b64[0] || !p->tls_b64[1] || !p->tls_b64[2])
				rc = sg_error_set(SG_EINTERNAL, "trustmanager: out of memory");
			else
				sg_log(SG_LOG_INFO, "trustmanager: a new serving certificate for the webhook",
				       SG_F_STR("name", p->dns), SG_F_END);
		}
		if (nkey) {
			sg_wipe(nkey, strlen(nkey));
			free(nkey);
		}
		free(ncrt);
		free(bundle);
	}
	if (key) {
		sg_wipe(key, klen);
		free(key);
	}
	free(crt);
	free(ca);
	return rc;
}

static void watch_namespace(sg_trustmanager *t, const char *ns)
{
	pthread_mutex_lock(&t->mu);
	snprintf(t->trust_ns, sizeof(t->trust_ns), "%s", ns);
	pthread_mutex_unlock(&t->mu);
}

static int reconcile_cluster(pass *p)
{
	sg_trustmanager *t = p->t;
	if (!sg_opr_has_finalizer(p->cr, FINALIZER)) {
		sg_kube_ref ref = cr_ref(p->cr);
		SG_TRY(sg_opr_set_finalizer(p->c, &t->st, &ref, p->cr, FINALIZER, true, NULL));
	}
	char msg[MSG_MAX];
	if (!parse(p, msg, sizeof(msg)))
		return put_failed(p, false, "InvalidSpec", msg);
	watch_namespace(t, p->s.trust_ns);
	bool made = false;
	if (!trust_namespace(p, &made, msg, sizeof(msg)) ||
	    (!made && !namespace_ok(p->c, p->s.trust_ns, "trust", msg, sizeof(msg))) ||
	    !namespace_ok(p->c, t->ns, "operand", msg, sizeof(msg)))
		return put_failed(p, true, "Failed", msg);
	if (p->s.package && t->ca_source == SG_TRUSTMANAGER_CA_FILE) {
		if (!t->pkg_json) {
			snprintf(msg, sizeof(msg), "the default CA package is not available: %s", t->pkg_error);
			return put_failed(p, true, "Failed", msg);
		}
		p->pkg_json = t->pkg_json;
		p->pkg_hash = t->pkg_hash;
	}
	p->labels = sg_opr_labels(p->s.labels, APP, t->version, NAME);
	p->owner = sg_opr_owner_ref(p->cr, K[W_TM].kind);
	SG_ENSURE(p->labels && p->owner, SG_EINTERNAL, "trustmanager: out of memory");
	if (p->s.package && t->ca_source == SG_TRUSTMANAGER_CA_OPENSHIFT) {
		pkg_state st = injected_package(p, msg, sizeof(msg));
		if (st != PKG_READY)
			return await_injection(p, st, msg);
	}
	p->cert_manager = cert_manager_present(p->c);
	snprintf(p->dns, sizeof(p->dns), "%s.%s.svc", OBJ, t->ns);
	if (!p->cert_manager)
		SG_TRY(own_certificate(p));
	want w[WANT_MAX];
	size_t n = 0;
	SG_TRY(wants_of(p, w, &n, true));
	bool written = false, refused = false;
	int rc = apply_all(p, w, n, &written, &refused);
	if (rc == SG_OK && !refused)
		rc = delete_unwanted(p, w, n);
	wants_free(w, n);
	SG_TRY(rc);
	return refused ? SG_OK : operand_status(p, written);
}

/* The CR is being deleted: everything we made goes (found by name, also
 * when the cache has not seen it yet, and by owner label in every
 * cache), then the finalizer. The trust namespace, Bundles and Secrets
 * are never ours. */
static int finalize(pass *p)
{
	if (!sg_opr_has_finalizer(p->cr, FINALIZER))
		return SG_OK;
	char msg[MSG_MAX];
	if (!parse(p, msg, sizeof(msg)) && !p->accepted_ns) {
		const char *tn = json_string_value(json_object_get(
		    json_object_get(json_object_get(p->cr, "spec"), "trustManagerConfig"), "trustNamespace"));
		p->accepted_ns = tn && sg_names_dns_label(tn, strlen(tn), SG_NAMES_LABEL_MAX) ? tn : DEFAULT_NAMESPACE;
	}
	want w[WANT_MAX];
	size_t n = 0;
	SG_TRY(wants_of(p, w, &n, false));
	/* The operand first: it stops before its permissions go. */
	for (size_t i = n; i-- > 0;) {
		sg_kube_ref ref = ref_of(&w[i]);
		if (w[i].w >= W_N && !cert_manager_present(p->c))
			continue; /* its kinds are not served: nothing of them to delete */
		json_t *o = NULL;
		SG_TRY(live_of(p, &w[i], &o));
		if (!o && w[i].w < W_N) {
			int rc = sg_kube_get(sg_ctrl_kube(p->c), &ref, &o);
			if (rc < 0 && rc != SG_ENOTFOUND)
				return rc;
		}
		/* By uid: a copy read from a cache that is behind must not
		 * delete an object made since under the same name. */
		int rc = o && ours(o) ? sg_opr_delete_uid(p->c, &p->t->st, p->cr, &ref, K[w[i].w].kind,
		                                          sg_kube_meta_str(o, "uid"))
		                      : SG_OK;
		json_decref(o);
		SG_TRY(rc);
	}
	SG_TRY(delete_unwanted(p, w, n));
	sg_kube_ref ref = cr_ref(p->cr);
	SG_TRY(sg_opr_set_finalizer(p->c, &p->t->st, &ref, p->cr, FINALIZER, false, NULL));
	sg_log(SG_LOG_INFO, "TrustManager deleted: its objects are gone", SG_F_STR("controller", sg_ctrl_name(p->c)),
	       SG_F_END);
	return SG_OK;
}

/* A TrustManager not named "cluster": refused for as long as it exists
 * (the CRD's CEL rule), and never a reason to touch anything. */
static int reconcile_other(pass *p)
{
	if (deleting(p->cr)) {
		if (!sg_opr_has_finalizer(p->cr, FINALIZER))
			return SG_OK;
		sg_kube_ref ref = cr_ref(p->cr);
		return sg_opr_set_finalizer(p->c, &p->t->st, &ref, p->cr, FINALIZER, false, NULL);
	}
	return put_status(
	    p->t, p->c, p->cr, json_object(),
	    sg_opr_conditions(invalid_name_msg, "InvalidSpec", SG_OPR_OPERAND_PROGRESSING, "", generation(p->cr)));
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_trustmanager *t = arg;
	json_t *cr = sg_kube_informer_get(sg_ctrl_informer(c, W_TM), NULL, key);
	if (!cr)
		return SG_OK;
	pass p = {.t = t, .c = c, .cr = cr, .res = res};
	int rc;
	if (strcmp(key, NAME) != 0)
		rc = reconcile_other(&p);
	else if (deleting(cr))
		rc = finalize(&p);
	else
		rc = reconcile_cluster(&p);
	pass_free(&p);
	json_decref(cr);
	return rc;
}

/* ---- event mapping ---- */

/* Our objects and the operand's pods: the one CR, a little later (see
 * the top of the file). */
static void map_owned(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)obj;
	(void)arg;
	sg_ctrl_add_after(c, NAME, ECHO_DELAY_MS);
}

/* cert-manager's CRDs coming or going switch the webhook's certificate. */
static void map_crd(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *name = sg_kube_meta_str(obj, "name");
	if (name && (strcmp(name, CRD_CERTIFICATES) == 0 || strcmp(name, CRD_ISSUERS) == 0))
		sg_ctrl_add(c, NAME);
}

/* A namespace matters when it is the trust namespace of the last pass or
 * the operand's; before the first pass every one does. */
static void map_namespace(sg_ctrl *c, const json_t *obj, void *arg)
{
	sg_trustmanager *t = arg;
	const char *name = sg_kube_meta_str(obj, "name");
	if (!name)
		return;
	pthread_mutex_lock(&t->mu);
	bool matters = !t->trust_ns[0] || strcmp(name, t->trust_ns) == 0 || strcmp(name, t->ns) == 0;
	pthread_mutex_unlock(&t->mu);
	if (matters)
		sg_ctrl_add(c, NAME);
}

/* ---- the module ---- */

static bool printable(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return n > 0 && n <= max;
}

static void stats_of(void *arg, void *out)
{
	sg_trustmanager_stats_get(arg, out);
}

/* signet_operator_trustmanager_*_total: the operator's four, status
 * writes and conflicts. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
	sg_trustmanager *t = arg;
	static const sg_metrics_stat rows[] = {
	    SG_METRICS_STAT_COUNTER(sg_trustmanager_stats, status_writes,
	                            "signet_operator_trustmanager_status_writes_total",
	                            "TrustManager status writes (counted in writes_total too)."),
	    SG_METRICS_STAT_COUNTER(sg_trustmanager_stats, conflicts, "signet_operator_trustmanager_conflicts_total",
	                            "Writes of the webhook's Secret refused: it had changed since it was read."),
	};
	SG_TRY(sg_opr_metrics(&t->st, "trustmanager", reg));
	return sg_metrics_stats(reg, rows, sizeof(rows) / sizeof(rows[0]), stats_of, sizeof(sg_trustmanager_stats), t);
}

int sg_trustmanager_new(sg_trustmanager **out, const sg_trustmanager_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube, SG_EINVAL, "trustmanager: a Kubernetes client is required");
	SG_ENSURE(printable(o->image, 1024), SG_EINVAL, "trustmanager: the signet-trust image is required");
	const char *version = o->version ? o->version : "unknown";
	const char *ns = o->operand_namespace ? o->operand_namespace : DEFAULT_NAMESPACE;
	SG_ENSURE(sg_names_label_value(version), SG_EINVAL, "trustmanager: version \"%s\" is not a label value",
	          version);
	SG_ENSURE(sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "trustmanager: operand namespace \"%s\" is not a namespace name", ns);
	SG_ENSURE(o->ca_source == SG_TRUSTMANAGER_CA_OPENSHIFT || o->ca_source == SG_TRUSTMANAGER_CA_FILE, SG_EINVAL,
	          "trustmanager: unknown default CA source %d", (int)o->ca_source);
	sg_trustmanager *t = calloc(1, sizeof(*t));
	SG_ENSURE(t, SG_EINTERNAL, "trustmanager: out of memory");
	pthread_mutex_init(&t->mu, NULL);
	t->ca_source = o->ca_source;
	t->pkg_name = t->ca_source == SG_TRUSTMANAGER_CA_FILE ? SG_TRUSTMANAGER_PACKAGE_DEBIAN
	                                                      : SG_TRUSTMANAGER_PACKAGE_OPENSHIFT;
	snprintf(t->pkg_key, sizeof(t->pkg_key), "%s.json", t->pkg_name);
	snprintf(t->ns, sizeof(t->ns), "%s", ns);
	t->image = strdup(o->image);
	t->version = strdup(version);
	int rc = t->image && t->version ? SG_OK : sg_error_set(SG_EINTERNAL, "trustmanager: out of memory");
	if (rc == SG_OK && t->ca_source == SG_TRUSTMANAGER_CA_FILE &&
	    package_make(t, o->ca_bundle_path, o->ca_bundle_version) < 0) {
		snprintf(t->pkg_error, sizeof(t->pkg_error), "%s", sg_error_last()->msg);
		sg_log(SG_LOG_WARN, "trustmanager: no default CA package (a TrustManager enabling it is Degraded)",
		       SG_F_STR("error", t->pkg_error), SG_F_END);
	}
	sg_ctrl_watch w[W_N] = {
	    [W_TM] = {.ref = K[W_TM].ref},
	    [W_NS] = {.ref = K[W_NS].ref, .map = map_namespace, .metadata_only = true},
	    [W_POD] = {.ref = K[W_POD].ref, .label_selector = POD_SELECTOR, .map = map_owned},
	};
	w[W_POD].ref.ns = t->ns;
	for (int k = W_MANAGED_FIRST; k <= W_MANAGED_LAST; k++)
		w[k] = (sg_ctrl_watch){.ref = K[k].ref, .label_selector = SELECTOR, .map = map_owned};
	/* Secrets of ours in the operand namespace only (the webhook's key) */
	w[W_SECRET].ref.ns = t->ns;
	w[W_CRD] = (sg_ctrl_watch){.ref = K[W_CRD].ref, .map = map_crd, .metadata_only = true};
	sg_ctrl_def def = {
	    .name = "trustmanager",
	    .kube = o->kube,
	    .watches = w,
	    .nwatches = W_N,
	    .reconcile = reconcile,
	    .metrics = metrics,
	    .arg = t,
	    .workers = o->workers ? o->workers : 1,
	    .field_manager = SG_OPR_FIELD_MANAGER,
	};
	/* map_namespace's arg is the definition's arg (sg_ctrl.h). */
	if (rc == SG_OK)
		rc = sg_ctrl_new(&t->ctrl, &def);
	if (rc < 0) {
		sg_trustmanager_free(t);
		return rc;
	}
	*out = t;
	return SG_OK;
}

sg_ctrl *sg_trustmanager_controller(sg_trustmanager *t)
{
	return t->ctrl;
}

void sg_trustmanager_stats_get(sg_trustmanager *t, sg_trustmanager_stats *out)
{
	out->writes = atomic_load(&t->st.writes);
	out->created = atomic_load(&t->st.created);
	out->repaired = atomic_load(&t->st.repaired);
	out->deleted = atomic_load(&t->st.deleted);
	out->status_writes = atomic_load(&t->status_writes);
	out->conflicts = atomic_load(&t->conflicts);
}

void sg_trustmanager_free(sg_trustmanager *t)
{
	if (!t)
		return;
	sg_ctrl_free(t->ctrl);
	pthread_mutex_destroy(&t->mu);
	free(t->pkg_json);
	free(t->inj_json);
	free(t->image);
	free(t->version);
	free(t);
}
