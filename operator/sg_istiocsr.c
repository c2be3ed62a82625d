/*
 * The IstioCSR reconciler (contract: sg_istiocsr.h).
 *
 * One pass, for key "<namespace>/default":
 *   1. gone: nothing; being deleted: delete what we made, drop the
 *      finalizer;
 *   2. refused: a second instance while an older one exists
 *      (MultipleInstances; re-examined when the other goes, since every
 *      IstioCSR event re-queues every IstioCSR), or a spec the CRD's CEL
 *      rules would refuse (InvalidSpec);
 *   3. the finalizer and the immutable-field record, one patch;
 *   4. inputs: the istio namespace, the HSM Secret (signet mode only: in
 *      RA mode signetd runs with --hsm=false and needs none), the issuer,
 *      the CA (each missing one is a Ready=False message and a retry);
 *   5. the objects, each applied only when its cached copy differs; ones
 *      no longer wanted deleted. In RA mode through an issuer that is no
 *      CA issuer, the CA is istiod-tls's ca.crt, which exists only once
 *      the istiod Certificate is issued: the Certificate is applied
 *      first, the CA read after it, and the CA copy and Deployment wait
 *      (Progressing, saying so) until it is there;
 *   6. status from the operand Deployment (read fresh when this pass
 *      wrote it: the cached copy would speak of the old generation) and
 *      its pods. A pass that fails (an API error, 403 or 5xx) says so in
 *      the conditions; the status fields keep what is in effect; a
 *      Warning Event marks a change of the Ready reason to a failure.
 *
 * Inputs that are not watched (the issuer, the user's CA ConfigMap, the
 * CA Secret) are read live and looked at again every 30 s while they
 * matter; the objects we make, the namespaces, the HSM Secret and the
 * operand's pods are watched, so drift and recovery need no polling.
 */
#include "sg_istiocsr.h"
#include "sg_base64.h"
#include "sg_guard.h"
#include "sg_hsm_egress.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_opr.h"
#include "sg_x509.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define APP "cert-manager-istio-csr"
#define FINALIZER "istiocsr.openshift.operator.io/cert-manager-istio-csr-controller"
#define IMMUTABLE_ANNOTATION "operator.signet.dev/istiocsr-immutable"
#define CA_COPY "cert-manager-istio-csr-issuer-ca-copy"
#define HSM_MOUNT "/etc/signet/hsm"
/* The HSM Secret's key naming a network HSM's addresses (see hsm_egress). */
#define HSM_EGRESS_KEY "hsm-egress"
#define HSM_EGRESS_POLICY "istio-csr-allow-egress-to-hsm"
#define ROOT_MOUNT "/var/run/configmaps/istio-csr"
#define RETRY_MS 30000u
#define ISSUE_WAIT_MS 5000u   /* while istiod's Certificate is being issued */
#define SIGNET_FS_GROUP 65532 /* the image's non-root user and group */
#define SELECTOR "app=" APP ",app.kubernetes.io/managed-by=" SG_OPR_MANAGED_BY

enum {
	W_CR,
	W_DEPLOY,
	W_SVC,
	W_SA,
	W_NETPOL,
	W_CM,
	W_ROLE,
	W_RB,
	W_CROLE,
	W_CRB,
	W_NS,
	W_POD,
	W_SECRET,
	W_N
};

static const sg_kube_ref REF_CR = {SG_OPR_GROUP, SG_OPR_VERSION, "istiocsrs", NULL, NULL, NULL};
static const sg_kube_ref REFS[W_N] = {
	[W_CR] = {SG_OPR_GROUP, SG_OPR_VERSION, "istiocsrs", NULL, NULL, NULL},
	[W_DEPLOY] = {"apps", "v1", "deployments", NULL, NULL, NULL},
	[W_SVC] = {"", "v1", "services", NULL, NULL, NULL},
	[W_SA] = {"", "v1", "serviceaccounts", NULL, NULL, NULL},
	[W_NETPOL] = {"networking.k8s.io", "v1", "networkpolicies", NULL, NULL, NULL},
	[W_CM] = {"", "v1", "configmaps", NULL, NULL, NULL},
	[W_ROLE] = {"rbac.authorization.k8s.io", "v1", "roles", NULL, NULL, NULL},
	[W_RB] = {"rbac.authorization.k8s.io", "v1", "rolebindings", NULL, NULL, NULL},
	[W_CROLE] = {"rbac.authorization.k8s.io", "v1", "clusterroles", NULL, NULL, NULL},
	[W_CRB] = {"rbac.authorization.k8s.io", "v1", "clusterrolebindings", NULL, NULL, NULL},
	[W_NS] = {"", "v1", "namespaces", NULL, NULL, NULL},
	[W_POD] = {"", "v1", "pods", NULL, NULL, NULL},
	[W_SECRET] = {"", "v1", "secrets", NULL, NULL, NULL},
};
static const char *const KINDS[W_N] = {
	[W_DEPLOY] = "Deployment",  [W_SVC] = "Service",         [W_SA] = "ServiceAccount",
	[W_NETPOL] = "NetworkPolicy", [W_CM] = "ConfigMap",      [W_ROLE] = "Role",
	[W_RB] = "RoleBinding",     [W_CROLE] = "ClusterRole",   [W_CRB] = "ClusterRoleBinding",
};
static const sg_kube_ref REF_CERT = {"cert-manager.io", "v1", "certificates", NULL, NULL, NULL};
static const sg_kube_ref REF_MONITOR = {"monitoring.coreos.com", "v1", "servicemonitors", NULL, NULL, NULL};

struct sg_istiocsr {
	sg_ctrl *ctrl;
	char *image, *version, *hsm_secret;
	char field_selector[300];
	sg_opr_stats st;
};

/* ---- event mapping ---- */

/* Objects we made carry their IstioCSR's namespace (the one instance
 * there is named "default"; a label value holds 63 characters, so the
 * namespace alone). */
static void map_owned(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *o = json_string_value(
		json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), SG_OPR_OWNER_LABEL));
	if (!o || !*o || strlen(o) > 63)
		return;
	char key[SG_CTRL_KEY_MAX];
	snprintf(key, sizeof(key), "%s/default", o);
	sg_ctrl_add(c, key);
}

/* Every IstioCSR: a namespace appearing may be one's istio namespace, and
 * an IstioCSR going away may let a refused second one in. */
static void map_all(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)obj;
	(void)arg;
	sg_kube_informer *inf = sg_ctrl_informer(c, W_CR);
	if (!inf) {
		sg_ctrl_resync(c);
		return;
	}
	json_t *all = sg_kube_informer_list(inf);
	size_t i;
	json_t *o;
	json_array_foreach(all, i, o)
	{
		char key[SG_CTRL_KEY_MAX];
		if (sg_ctrl_key_of(o, key))
			sg_ctrl_add(c, key);
	}
	json_decref(all);
}

static void map_secret(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *ns = json_string_value(json_object_get(json_object_get(obj, "metadata"), "namespace"));
	char key[SG_CTRL_KEY_MAX];
	if (ns && strlen(ns) < 64) {
		snprintf(key, sizeof(key), "%s/default", ns);
		sg_ctrl_add(c, key);
	}
}

/* ---- small JSON helpers ---- */

/* The member at a dotted path of plain keys (never a label or annotation
 * key, which hold dots themselves: meta_str). */
static const json_t *at(const json_t *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", path);
	char *save = NULL;
	for (char *p = strtok_r(buf, ".", &save); p && o; p = strtok_r(NULL, ".", &save))
		o = json_object_get(o, p);
	return o;
}

static const char *str_at(const json_t *o, const char *path, const char *dflt)
{
	const char *s = json_string_value(at(o, path));
	return s && *s ? s : dflt;
}

/* A label or annotation (their keys hold dots, so not through at()). */
static const char *meta_str(const json_t *o, const char *map, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(o, "metadata"), map), key));
}

static const char *nz(const char *s)
{
	return s ? s : "";
}

static json_int_t int_at(const json_t *o, const char *path, json_int_t dflt)
{
	const json_t *v = at(o, path);
	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static int push(json_t *args, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int push(json_t *args, const char *fmt, ...)
{
	char buf[4200];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	SG_ENSURE(n >= 0 && (size_t)n < sizeof(buf), SG_EINVAL, "argument too long");
	SG_ENSURE(json_array_append_new(args, json_string(buf)) == 0, SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* "a,b,c" of a JSON array of strings (empty when absent). */
static void join(const json_t *arr, char *out, size_t cap)
{
	out[0] = '\0';
	size_t i, n = 0;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		const char *s = json_string_value(v);
		if (!s)
			continue;
		int w = snprintf(out + n, cap - n, "%s%s", n ? "," : "", s);
		if (w < 0 || (size_t)w >= cap - n)
			break;
		n += (size_t)w;
	}
}

/* ---- validation (the CRD's CEL rules) ---- */

typedef struct spec_view {
	const json_t *cfg; /* spec.istioCSRConfig */
	const char *ns, *name;
	const char *issuer_name, *issuer_kind, *issuer_group;
	bool signet_issuer, cluster_issuer;
	const char *istio_ns, *trust_domain, *algo;
	json_int_t key_size, port;
} spec_view;

static bool view(const json_t *cr, spec_view *v, char *msg, size_t cap)
{
	memset(v, 0, sizeof(*v));
	v->ns = str_at(cr, "metadata.namespace", "");
	v->name = str_at(cr, "metadata.name", "");
	v->cfg = at(cr, "spec.istioCSRConfig");
	if (strcmp(v->name, "default") != 0) {
		snprintf(msg, cap, "istiocsr is a singleton, .metadata.name must be 'default'");
		return false;
	}
	if (!json_is_object(v->cfg) || !json_is_object(json_object_get(v->cfg, "certManager")) ||
	    !json_is_object(json_object_get(v->cfg, "istio")) ||
	    !json_is_object(json_object_get(v->cfg, "istiodTLSConfig"))) {
		snprintf(msg, cap, "%s/%s configuration validation failed: spec.istioCSRConfig needs certManager, "
		         "istio and istiodTLSConfig", v->ns, v->name);
		return false;
	}
	v->issuer_name = str_at(v->cfg, "certManager.issuerRef.name", NULL);
	v->issuer_kind = str_at(v->cfg, "certManager.issuerRef.kind", "Issuer");
	v->issuer_group = str_at(v->cfg, "certManager.issuerRef.group", "cert-manager.io");
	if (!v->issuer_name) {
		snprintf(msg, cap, "spec.istioCSRConfig.certManager.issuerRef.name is required");
		return false;
	}
	if (strcasecmp(v->issuer_group, "cert-manager.io") == 0) {
		v->cluster_issuer = strcasecmp(v->issuer_kind, "ClusterIssuer") == 0;
		if (!v->cluster_issuer && strcasecmp(v->issuer_kind, "Issuer") != 0) {
			snprintf(msg, cap, "spec.istioCSRConfig.certManager.issuerRef.kind must be Issuer or ClusterIssuer "
			         "for group cert-manager.io, not %s", v->issuer_kind);
			return false;
		}
	} else if (strcasecmp(v->issuer_group, "signet.dev") == 0) {
		v->signet_issuer = true;
		v->cluster_issuer = strcasecmp(v->issuer_kind, "SignetClusterIssuer") == 0;
		if (!v->cluster_issuer && strcasecmp(v->issuer_kind, "SignetIssuer") != 0) {
			snprintf(msg, cap, "spec.istioCSRConfig.certManager.issuerRef.kind must be SignetIssuer or "
			         "SignetClusterIssuer for group signet.dev, not %s", v->issuer_kind);
			return false;
		}
	} else {
		snprintf(msg, cap, "spec.istioCSRConfig.certManager.issuerRef.group must be cert-manager.io or "
		         "signet.dev, not %s", v->issuer_group);
		return false;
	}
	v->istio_ns = str_at(v->cfg, "istio.namespace", NULL);
	if (!v->istio_ns || !sg_names_dns_label(v->istio_ns, strlen(v->istio_ns), SG_NAMES_LABEL_MAX)) {
		snprintf(msg, cap, "spec.istioCSRConfig.istio.namespace must be a namespace name");
		return false;
	}
	v->trust_domain = str_at(v->cfg, "istiodTLSConfig.trustDomain", NULL);
	if (!v->trust_domain) {
		snprintf(msg, cap, "spec.istioCSRConfig.istiodTLSConfig.trustDomain is required");
		return false;
	}
	v->algo = str_at(v->cfg, "istiodTLSConfig.privateKeyAlgorithm", "RSA");
	v->key_size = int_at(v->cfg, "istiodTLSConfig.privateKeySize", 2048);
	bool rsa = strcmp(v->algo, "RSA") == 0;
	bool ok = rsa ? (v->key_size == 2048 || v->key_size == 4096 || v->key_size == 8192)
	              : strcmp(v->algo, "ECDSA") == 0 && (v->key_size == 256 || v->key_size == 384);
	if (!ok) {
		snprintf(msg, cap, "privateKeySize must match with configured privateKeyAlgorithm (%s %lld)", v->algo,
		         (long long)v->key_size);
		return false;
	}
	v->port = int_at(v->cfg, "server.port", 443);
	if (v->port < 1 || v->port > 65535) {
		snprintf(msg, cap, "spec.istioCSRConfig.server.port must be 1..65535");
		return false;
	}
	return true;
}

/* The fields the CRD makes immutable, as recorded at the first accepted
 * reconcile and again when one is first written. New reference.
 * server.port is recorded as written, null while unset: the design's rule
 * is `oldSelf == 0 || self == oldSelf`, so a port written after creation
 * is allowed and fixed from then on. istio.revisions may change (a canary
 * revision is added): the design makes it mutable. */
static json_t *immutable_of(const spec_view *v)
{
	const json_t *port = at(v->cfg, "server.port");
	return json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:O}", "issuerName", v->issuer_name, "issuerKind", v->issuer_kind,
	                 "issuerGroup", v->issuer_group, "privateKeyAlgorithm", v->algo, "privateKeySize",
	                 (json_int_t)v->key_size, "istioNamespace", v->istio_ns, "port",
	                 json_is_integer(port) ? (json_t *)port : json_null());
}

static bool immutable_kept(const json_t *cr, const json_t *now, char *msg, size_t cap)
{
	const char *rec = meta_str(cr, "annotations", IMMUTABLE_ANNOTATION);
	if (!rec)
		return true;
	json_t *was = json_loads(rec, 0, NULL);
	if (!was) /* a user edited it into garbage: take the spec as it is now */
		return true;
	static const struct {
		const char *key, *field;
	} f[] = {
	    {"issuerName", "certManager.issuerRef"},
	    {"issuerKind", "certManager.issuerRef"},
	    {"issuerGroup", "certManager.issuerRef"},
	    {"privateKeyAlgorithm", "istiodTLSConfig.privateKeyAlgorithm"},
	    {"privateKeySize", "istiodTLSConfig.privateKeySize"},
	    {"istioNamespace", "istio.namespace"},
	    {"port", "server.port"},
	};
	bool ok = true;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]) && ok; i++) {
		const json_t *a = json_object_get(was, f[i].key), *b = json_object_get(now, f[i].key);
		/* An unset port next to a recorded 443: a record of an earlier
		 * release, which recorded the default for an unset port. */
		bool old_default = strcmp(f[i].key, "port") == 0 && json_is_null(b) && json_integer_value(a) == 443;
		if (a && !json_is_null(a) && !json_equal(a, b) && !old_default) { /* null: not set yet, may be */
			snprintf(msg, cap, "spec.istioCSRConfig.%s is immutable once set", f[i].field);
			ok = false;
		}
	}
	json_decref(was);
	return ok;
}

/* The oldest IstioCSR wins; equal creation times are broken by namespace
 * (the anchor refuses all of them, which leaves none running). */
static const char *older_instance(sg_ctrl *c, const json_t *cr)
{
	const char *ns = str_at(cr, "metadata.namespace", ""), *ts = str_at(cr, "metadata.creationTimestamp", "");
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, W_CR));
	static _Thread_local char other[64];
	const char *found = NULL;
	size_t i;
	json_t *o;
	json_array_foreach(all, i, o)
	{
		const char *ons = str_at(o, "metadata.namespace", "");
		const char *ots = str_at(o, "metadata.creationTimestamp", "");
		if (strcmp(ons, ns) == 0 || at(o, "metadata.deletionTimestamp") ||
		    strcmp(str_at(o, "metadata.name", ""), "default") != 0)
			continue;
		int cmp = strcmp(ots, ts); /* RFC 3339 UTC in one format: text order is time order */
		if (cmp < 0 || (cmp == 0 && strcmp(ons, ns) < 0)) {
			snprintf(other, sizeof(other), "%s", ons);
			found = other;
			break;
		}
	}
	json_decref(all);
	return found;
}

/* ---- inputs ---- */

/* The first PEM block of pem must be a CA certificate (the anchor's
 * check: basic constraints with cA; key usage is checked by signetd,
 * which refuses a root bundle that does not verify its own CA). */
static bool ca_pem_ok(const char *pem, size_t len, char *msg, size_t cap, const char *what)
{
	sg_x509_bundle *b = NULL;
	if (sg_x509_bundle_parse(&b, pem, len) < 0 || sg_x509_bundle_count(b) == 0) {
		snprintf(msg, cap, "%s: no valid PEM data found", what);
		sg_x509_bundle_free(b);
		return false;
	}
	sg_x509_facts f;
	bool ok = sg_x509_get_facts(b, 0, &f) == SG_OK && f.is_ca;
	if (!ok)
		snprintf(msg, cap, "%s: the first certificate is not a CA certificate", what);
	sg_x509_bundle_free(b);
	return ok;
}

/* The issuer's CA PEM for RA mode (the anchor's order): the user's
 * ConfigMap, a CA issuer's Secret, istiod-tls's ca.crt. *pem is a new
 * string (caller frees) or NULL with msg saying what is missing. */
static int issuer_ca(sg_istiocsr *t, const spec_view *v, const json_t *issuer, char **pem, char *msg, size_t cap,
                     bool *invalid)
{
	*pem = NULL;
	*invalid = false;
	sg_kube *k = sg_ctrl_kube(t->ctrl);
	const json_t *ref = at(v->cfg, "certManager.istioCACertificate");
	json_t *obj = NULL;
	const char *data = NULL;
	char what[400];
	if (json_is_object(ref)) {
		const char *name = str_at(ref, "name", ""), *key = str_at(ref, "key", "");
		const char *ns = str_at(ref, "namespace", v->ns);
		sg_kube_ref r = REFS[W_CM];
		r.ns = ns;
		r.name = name;
		int rc = sg_kube_get(k, &r, &obj);
		if (rc == SG_ENOTFOUND) {
			snprintf(msg, cap, "failed to fetch CA certificate ConfigMap %s/%s", ns, name);
			return SG_OK;
		}
		SG_TRY(rc);
		data = json_string_value(json_object_get(json_object_get(obj, "data"), key));
		snprintf(what, sizeof(what), "ConfigMap %s/%s key %s", ns, name, key);
		if (!data) {
			snprintf(msg, cap, "key \"%s\" not found in ConfigMap %s/%s", key, ns, name);
			*invalid = true;
			json_decref(obj);
			return SG_OK;
		}
	} else {
		const char *secret = str_at(issuer, "spec.ca.secretName", "istiod-tls");
		sg_kube_ref r = REFS[W_SECRET];
		r.ns = v->istio_ns;
		r.name = secret;
		int rc = sg_kube_get(k, &r, &obj);
		if (rc == SG_ENOTFOUND) {
			snprintf(msg, cap, "waiting for Secret %s/%s (the issuer's CA, key ca.crt)", v->istio_ns, secret);
			return SG_OK;
		}
		SG_TRY(rc);
		const char *b64 = json_string_value(json_object_get(json_object_get(obj, "data"), "ca.crt"));
		snprintf(what, sizeof(what), "Secret %s/%s key ca.crt", v->istio_ns, secret);
		if (!b64) {
			snprintf(msg, cap, "waiting for %s", what);
			json_decref(obj);
			return SG_OK;
		}
		size_t blen = strlen(b64), n = 0;
		/* The limit before the allocation: a CA bundle, not a file store. */
		if (blen > 1u << 20) {
			snprintf(msg, cap, "%s is larger than 1 MiB", what);
			*invalid = true;
			json_decref(obj);
			return SG_OK;
		}
		char *s = malloc(blen / 4 * 3 + 4);
		if (!s) {
			json_decref(obj);
			SG_BAIL(SG_EINTERNAL, "out of memory");
		}
		int drc = sg_b64_decode(SG_B64_STD, b64, blen, (uint8_t *)s, blen / 4 * 3 + 3, &n);
		json_decref(obj);
		obj = NULL;
		if (drc < 0) {
			free(s);
			snprintf(msg, cap, "%s is not base64", what);
			*invalid = true;
			return SG_OK;
		}
		s[n] = '\0';
		if (!ca_pem_ok(s, n, msg, cap, what)) {
			free(s);
			*invalid = true;
			return SG_OK;
		}
		*pem = s;
		return SG_OK;
	}
	if (!ca_pem_ok(data, strlen(data), msg, cap, what)) {
		*invalid = true;
		json_decref(obj);
		return SG_OK;
	}
	*pem = strdup(data);
	json_decref(obj);
	SG_ENSURE(*pem, SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* ---- the objects ---- */

typedef struct pass {
	sg_istiocsr *t;
	sg_ctrl *c;
	const json_t *cr;
	spec_view v;
	json_t *labels, *owner; /* owner: ownerReferences for objects in the CR's namespace */
	char owner_label[128], crole[128];
	bool ra;        /* a cert-manager issuer signs; signetd forwards */
	char *ca_copy;  /* the CA copy's ca.crt, or NULL: none wanted */
	json_t *hsm;    /* the HSM Secret, from the cache (signet mode) */
	json_t *hsm_egress; /* its hsm-egress as NetworkPolicy egress rules, or NULL: none */
	/* The Deployment was applied this pass: the cache still holds the one
	 * before the write, whose status speaks of the old generation. */
	bool deploy_written;
	/* Why the pass stopped short without a failure (the CA is not issued
	 * yet): Ready=False/Progressing with these words. */
	const char *waiting;
	bool reported;  /* the status of this pass's outcome was written (or tried) */
	json_t *issuer; /* the issuer, as read this pass */
} pass;

static json_t *meta(const pass *p, const char *name, const char *ns)
{
	json_t *m = json_pack("{s:s, s:O}", "name", name, "labels", p->labels);
	if (!m)
		return NULL;
	if (ns)
		json_object_set_new(m, "namespace", json_string(ns));
	if (ns && strcmp(ns, p->v.ns) == 0)
		json_object_set(m, "ownerReferences", p->owner);
	return m;
}

static json_t *object(const pass *p, const char *api, const char *kind, const char *name, const char *ns)
{
	json_t *m = meta(p, name, ns);
	return m ? json_pack("{s:s, s:s, s:o}", "apiVersion", api, "kind", kind, "metadata", m) : NULL;
}

/* Applies body (consumed) as object w (a watched kind) of namespace ns. */
static int put(pass *p, int w, const char *ns, json_t *body)
{
	SG_ENSURE(body, SG_EINTERNAL, "out of memory");
	const char *name = str_at(body, "metadata.name", "");
	json_t *live = sg_kube_informer_get(sg_ctrl_informer(p->c, (size_t)w), ns, name);
	sg_kube_ref r = REFS[w];
	r.ns = ns;
	r.name = name;
	/* The same test sg_opr_apply makes (it applies exactly when the
	 * cached object does not hold the body). */
	if (w == W_DEPLOY && !(live && sg_ctrl_object_holds(p->c, body, live)))
		p->deploy_written = true;
	int rc = sg_opr_apply(p->c, &p->t->st, p->cr, &r, KINDS[w], body, live);
	json_decref(live);
	json_decref(body);
	return rc;
}

static json_t *rule(const char *group, const char *resources, const char *verbs)
{
	json_t *r = json_pack("{s:[s], s:[], s:[]}", "apiGroups", group, "resources", "verbs");
	char buf[256];
	const char *lists[2] = {resources, verbs};
	const char *keys[2] = {"resources", "verbs"};
	for (int i = 0; i < 2 && r; i++) {
		snprintf(buf, sizeof(buf), "%s", lists[i]);
		char *save = NULL;
		for (char *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save))
			json_array_append_new(json_object_get(r, keys[i]), json_string(s));
	}
	return r;
}

static json_t *port(const char *name, json_int_t port, json_int_t target)
{
	return name ? json_pack("{s:s, s:I, s:I, s:s}", "name", name, "port", port, "targetPort", target, "protocol", "TCP")
	            : json_pack("{s:I, s:s}", "port", port, "protocol", "TCP");
}

static int services(pass *p)
{
	json_t *grpc = object(p, "v1", "Service", APP, p->v.ns);
	json_t *metrics = object(p, "v1", "Service", APP "-metrics", p->v.ns);
	if (grpc)
		json_object_set_new(grpc, "spec",
		                    json_pack("{s:s, s:{s:s}, s:[o]}", "type", "ClusterIP", "selector", "app", APP, "ports",
		                              port("web", p->v.port, 6443)));
	if (metrics)
		json_object_set_new(metrics, "spec",
		                    json_pack("{s:s, s:{s:s}, s:[o]}", "type", "ClusterIP", "selector", "app", APP, "ports",
		                              port("metrics", 9402, 9402)));
	int rc = put(p, W_SVC, p->v.ns, grpc);
	int rc2 = put(p, W_SVC, p->v.ns, metrics);
	return rc < 0 ? rc : rc2;
}

/* The egress to a network HSM that the HSM Secret's hsm-egress names
 * (signet mode only), else none: a policy of ours left from before is
 * deleted (that copy only), so removing the key closes the way again. */
static int hsm_policy(pass *p)
{
	if (!p->hsm_egress) {
		json_t *live = sg_kube_informer_get(sg_ctrl_informer(p->c, W_NETPOL), p->v.ns, HSM_EGRESS_POLICY);
		bool ours = live && strcmp(nz(meta_str(live, "labels", SG_OPR_OWNER_LABEL)), p->owner_label) == 0;
		sg_kube_ref r = REFS[W_NETPOL];
		r.ns = p->v.ns;
		r.name = HSM_EGRESS_POLICY;
		int rc = ours ? sg_opr_delete_uid(p->c, &p->t->st, p->cr, &r, "NetworkPolicy",
		                                  str_at(live, "metadata.uid", NULL))
		              : SG_OK;
		json_decref(live);
		return rc;
	}
	json_t *np = object(p, "networking.k8s.io/v1", "NetworkPolicy", HSM_EGRESS_POLICY, p->v.ns);
	SG_ENSURE(np, SG_EINTERNAL, "out of memory");
	json_object_set_new(json_object_get(json_object_get(np, "metadata"), "labels"),
	                    "istiocsr.operator.openshift.io/owned-by", json_string("istio-csr"));
	json_object_set_new(np, "spec",
	                    json_pack("{s:{s:{s:s}}, s:[s], s:O}", "podSelector", "matchLabels", "app", APP,
	                              "policyTypes", "Egress", "egress", p->hsm_egress));
	return put(p, W_NETPOL, p->v.ns, np);
}

static int network_policies(pass *p)
{
	static const char *const names[] = {"istio-csr-deny-all", "istio-csr-allow-egress-to-api-server",
	                                    "istio-csr-allow-ingress-to-metrics", "istio-csr-allow-ingress-to-grpc"};
	for (size_t i = 0; i < 4; i++) {
		json_t *np = object(p, "networking.k8s.io/v1", "NetworkPolicy", names[i], p->v.ns);
		if (!np)
			SG_BAIL(SG_EINTERNAL, "out of memory");
		json_object_set_new(json_object_get(json_object_get(np, "metadata"), "labels"),
		                    "istiocsr.operator.openshift.io/owned-by", json_string("istio-csr"));
		json_t *spec = json_pack("{s:{s:{s:s}}}", "podSelector", "matchLabels", "app", APP);
		switch (i) {
		case 0:
			json_object_set_new(spec, "policyTypes", json_pack("[s,s]", "Ingress", "Egress"));
			break;
		case 1: /* the API server's endpoint port (6443) and its Service port (443) */
			json_object_set_new(spec, "policyTypes", json_pack("[s]", "Egress"));
			json_object_set_new(spec, "egress", json_pack("[{s:[o,o]}]", "ports", port(NULL, 6443, 0),
			                                               port(NULL, 443, 0)));
			break;
		case 2:
			json_object_set_new(spec, "policyTypes", json_pack("[s]", "Ingress"));
			json_object_set_new(spec, "ingress",
			                    json_pack("[{s:[{s:{}}], s:[o]}]", "from", "namespaceSelector", "ports",
			                              port(NULL, 9402, 0)));
			break;
		default:
			json_object_set_new(spec, "policyTypes", json_pack("[s]", "Ingress"));
			json_object_set_new(spec, "ingress", json_pack("[{s:[o]}]", "ports", port(NULL, 6443, 0)));
		}
		json_object_set_new(np, "spec", spec);
		SG_TRY(put(p, W_NETPOL, p->v.ns, np));
	}
	return hsm_policy(p);
}

static int rbac(pass *p)
{
	json_t *cr = object(p, "rbac.authorization.k8s.io/v1", "ClusterRole", p->crole, NULL);
	SG_ENSURE(cr, SG_EINTERNAL, "out of memory");
	/* What signetd does cluster-wide: TokenReview for workload tokens,
	 * istio-ca-root-cert in every selected namespace, pods and service
	 * accounts for node authorization, Events. */
	json_object_set_new(cr, "rules",
	                    json_pack("[o,o,o,o,o]", rule("authentication.k8s.io", "tokenreviews", "create"),
	                              rule("", "configmaps", "get,list,watch,create,update,delete"),
	                              rule("", "namespaces", "get,list,watch"),
	                              rule("", "pods,serviceaccounts", "get,list,watch"),
	                              rule("", "events", "create,patch")));
	SG_TRY(put(p, W_CROLE, NULL, cr));
	json_t *subjects = json_pack("[{s:s, s:s, s:s}]", "kind", "ServiceAccount", "name", APP, "namespace", p->v.ns);
	json_t *crb = object(p, "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", p->crole, NULL);
	if (crb)
		json_object_set_new(crb, "roleRef",
		                    json_pack("{s:s, s:s, s:s}", "apiGroup", "rbac.authorization.k8s.io", "kind",
		                              "ClusterRole", "name", p->crole));
	if (crb && subjects)
		json_object_set(crb, "subjects", subjects);
	int rc = put(p, W_CRB, NULL, crb);
	if (rc < 0) {
		json_decref(subjects);
		return rc;
	}
	/* In the istio namespace: the Lease, Events, and what the signing
	 * mode needs (CertificateRequests to forward; istiod's Secret to
	 * issue). */
	json_t *role = object(p, "rbac.authorization.k8s.io/v1", "Role", APP, p->v.istio_ns);
	json_t *rules = json_pack("[o,o]", rule("coordination.k8s.io", "leases", "get,create,update"),
	                          rule("", "events", "create,patch"));
	if (rules && p->ra)
		json_array_append_new(rules, rule("cert-manager.io", "certificaterequests", "get,list,watch,create,delete"));
	else if (rules)
		json_array_append_new(rules, rule("", "secrets", "get,list,watch,create,update,delete"));
	if (role && rules)
		json_object_set(role, "rules", rules);
	json_decref(rules);
	rc = put(p, W_ROLE, p->v.istio_ns, role);
	json_t *rb = rc < 0 ? NULL : object(p, "rbac.authorization.k8s.io/v1", "RoleBinding", APP, p->v.istio_ns);
	if (rb) {
		json_object_set_new(rb, "roleRef",
		                    json_pack("{s:s, s:s, s:s}", "apiGroup", "rbac.authorization.k8s.io", "kind", "Role",
		                              "name", APP));
		json_object_set(rb, "subjects", subjects);
		rc = put(p, W_RB, p->v.istio_ns, rb);
	}
	json_decref(subjects);
	return rc;
}

/* istiod's certificate from the cert-manager issuer (RA mode). Not
 * watched (cert-manager's CRDs may not exist when signet signs): read
 * live, written only when it differs. */
static int istiod_certificate(pass *p)
{
	const json_t *tls = at(p->v.cfg, "istiodTLSConfig");
	char cn[128], uri[400];
	snprintf(cn, sizeof(cn), "%s", str_at(tls, "commonName", ""));
	if (!*cn)
		snprintf(cn, sizeof(cn), "istiod.%s.svc", p->v.istio_ns);
	snprintf(uri, sizeof(uri), "spiffe://%s/ns/%s/sa/istiod-service-account", p->v.trust_domain, p->v.istio_ns);
	json_t *dns = json_array();
	size_t i;
	json_t *d;
	json_array_foreach(json_object_get(tls, "certificateDNSNames"), i, d) json_array_append(dns, d);
	const json_t *revs = at(p->v.cfg, "istio.revisions");
	json_t *dflt = json_pack("[s]", "default");
	json_array_foreach(json_is_array(revs) ? revs : dflt, i, d)
	{
		char n[200];
		const char *r = json_string_value(d);
		if (!r)
			continue;
		if (strcmp(r, "default") == 0)
			snprintf(n, sizeof(n), "istiod.%s.svc", p->v.istio_ns);
		else
			snprintf(n, sizeof(n), "istiod-%s.%s.svc", r, p->v.istio_ns);
		json_array_append_new(dns, json_string(n));
	}
	json_decref(dflt);
	json_t *cert = object(p, "cert-manager.io/v1", "Certificate", "istiod", p->v.istio_ns);
	if (cert)
		json_object_set_new(
			cert, "spec",
			json_pack("{s:s, s:o, s:[s], s:s, s:s, s:s, s:{s:s, s:I, s:s}, s:I, s:{s:s, s:s, s:s}}", "commonName", cn,
			          "dnsNames", dns, "uris", uri, "secretName", "istiod-tls", "duration",
			          str_at(tls, "certificateDuration", "1h"), "renewBefore",
			          str_at(tls, "certificateRenewBefore", "30m"), "privateKey", "algorithm", p->v.algo, "size",
			          (json_int_t)p->v.key_size, "rotationPolicy", "Always", "revisionHistoryLimit", (json_int_t)1,
			          "issuerRef", "name", p->v.issuer_name, "kind", p->v.issuer_kind, "group", p->v.issuer_group));
	else
		json_decref(dns);
	SG_ENSURE(cert && json_object_get(cert, "spec"), SG_EINTERNAL, "out of memory");
	sg_kube_ref r = REF_CERT;
	r.ns = p->v.istio_ns;
	r.name = "istiod";
	json_t *live = NULL;
	int rc = sg_kube_get(sg_ctrl_kube(p->c), &r, &live);
	if (rc == SG_OK || rc == SG_ENOTFOUND)
		rc = sg_opr_apply(p->c, &p->t->st, p->cr, &r, "Certificate", cert, live);
	json_decref(live);
	json_decref(cert);
	return rc;
}

/* istiod's Certificate when signet signs instead: delete ours, if any. */
static int drop_istiod_certificate(pass *p)
{
	sg_kube_ref r = REF_CERT;
	r.ns = p->v.istio_ns;
	r.name = "istiod";
	json_t *live = NULL;
	int rc = sg_kube_get(sg_ctrl_kube(p->c), &r, &live);
	if (rc == SG_ENOTFOUND || (rc < 0 && sg_kube_last_status()->code == 404))
		return SG_OK; /* absent, or no cert-manager at all */
	SG_TRY(rc);
	const char *o = nz(meta_str(live, "labels", SG_OPR_OWNER_LABEL));
	bool ours = strcmp(o, p->owner_label) == 0;
	/* Only the copy just read as ours: another owner's made since stays. */
	rc = ours ? sg_opr_delete_uid(p->c, &p->t->st, p->cr, &r, "Certificate", str_at(live, "metadata.uid", NULL))
	          : SG_OK;
	json_decref(live);
	return rc;
}

/* Whether the API server serves ServiceMonitors (the Prometheus
 * operator's CRD is installed), from its discovery document of
 * monitoring.coreos.com/v1 (readable by every account). */
static int monitor_served(pass *p, bool *served)
{
	*served = false;
	uint8_t *body = NULL;
	size_t len = 0;
	int rc = sg_kube_get_path(sg_ctrl_kube(p->c), "/apis/monitoring.coreos.com/v1", NULL, &body, &len);
	if (rc == SG_ENOTFOUND || (rc < 0 && sg_kube_last_status()->code == 404))
		return SG_OK;
	SG_TRY(rc);
	json_t *doc = json_loadb((const char *)body, len, 0, NULL);
	free(body);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(doc, "resources"), i, r)
	{
		*served = *served || strcmp(str_at(r, "name", ""), "servicemonitors") == 0;
	}
	json_decref(doc);
	return SG_OK;
}

/* The live ServiceMonitor of ours (*live, may stay NULL: absent), and
 * whether its kind is served at all. Not watched: the CRD may come and
 * go. */
static int get_monitor(pass *p, json_t **live, bool *served)
{
	*live = NULL;
	SG_TRY(monitor_served(p, served));
	if (!*served)
		return SG_OK;
	sg_kube_ref r = REF_MONITOR;
	r.ns = p->v.ns;
	r.name = APP;
	int rc = sg_kube_get(sg_ctrl_kube(p->c), &r, live);
	return rc == SG_ENOTFOUND || (rc < 0 && sg_kube_last_status()->code == 404) ? SG_OK : rc;
}

/* The design's ServiceMonitor for the metrics Service, when the
 * Prometheus operator's CRD exists: port "metrics" of the Services
 * labelled app=cert-manager-istio-csr in the IstioCSR's namespace. */
static int service_monitor(pass *p)
{
	json_t *live = NULL;
	bool served = true;
	SG_TRY(get_monitor(p, &live, &served));
	if (!served)
		return SG_OK;
	json_t *sm = object(p, "monitoring.coreos.com/v1", "ServiceMonitor", APP, p->v.ns);
	if (sm)
		json_object_set_new(sm, "spec",
		                    json_pack("{s:s, s:[{s:s, s:s, s:s, s:s}], s:{s:[s]}, s:{s:{s:s}}}", "jobLabel",
		                              "app", "endpoints", "port", "metrics", "path", "/metrics", "scheme",
		                              "http", "interval", "30s", "namespaceSelector", "matchNames", p->v.ns,
		                              "selector", "matchLabels", "app", APP));
	sg_kube_ref r = REF_MONITOR;
	r.ns = p->v.ns;
	r.name = APP;
	int rc = sm && json_object_get(sm, "spec")
	             ? sg_opr_apply(p->c, &p->t->st, p->cr, &r, "ServiceMonitor", sm, live)
	             : sg_error_set(SG_EINTERNAL, "out of memory");
	json_decref(sm);
	json_decref(live);
	return rc;
}

/* The ServiceMonitor goes with the IstioCSR (ours only). */
static int drop_service_monitor(pass *p)
{
	json_t *live = NULL;
	bool served = true;
	SG_TRY(get_monitor(p, &live, &served));
	bool ours = live && strcmp(nz(meta_str(live, "labels", SG_OPR_OWNER_LABEL)), p->owner_label) == 0;
	sg_kube_ref r = REF_MONITOR;
	r.ns = p->v.ns;
	r.name = APP;
	int rc =
	    ours ? sg_opr_delete_uid(p->c, &p->t->st, p->cr, &r, "ServiceMonitor", str_at(live, "metadata.uid", NULL))
	         : SG_OK;
	json_decref(live);
	return rc;
}

static int ca_copy(pass *p)
{
	json_t *cm = object(p, "v1", "ConfigMap", CA_COPY, p->v.ns);
	if (cm)
		json_object_set_new(cm, "data", json_pack("{s:s}", "ca.crt", p->ca_copy));
	return put(p, W_CM, p->v.ns, cm);
}

/* Whether list (of objects with a "name") holds a name that ours does
 * not. */
static bool has_foreign(const json_t *list, const json_t *ours)
{
	size_t i, j;
	json_t *a, *b;
	json_array_foreach(list, i, a)
	{
		const char *n = json_string_value(json_object_get(a, "name"));
		bool found = false;
		json_array_foreach(ours, j, b) found = found || (n && strcmp(n, nz(str_at(b, "name", NULL))) == 0);
		if (!found)
			return true;
	}
	return false;
}

/* A Deployment of this name that another operator made (OpenShift's
 * cert-manager-operator runs container cert-manager-istio-csr) keeps its
 * containers and volumes through our server-side apply, which merges
 * lists by name: istio-csr would run beside signetd. The pod template's
 * lists are replaced whole by a merge patch (RFC 7386 replaces arrays),
 * conditional on the version seen, before the apply takes the fields. */
static int replace_foreign(pass *p, const json_t *body)
{
	json_t *live = sg_kube_informer_get(sg_ctrl_informer(p->c, W_DEPLOY), p->v.ns, APP);
	const json_t *have = at(live, "spec.template.spec"), *want = at(body, "spec.template.spec");
	bool foreign = live && (has_foreign(json_object_get(have, "containers"), json_object_get(want, "containers")) ||
	                        has_foreign(json_object_get(have, "volumes"), json_object_get(want, "volumes")) ||
	                        json_array_size(json_object_get(have, "initContainers")) > 0);
	if (!foreign) {
		json_decref(live);
		return SG_OK;
	}
	json_t *patch = json_pack("{s:{s:O}, s:{s:{s:{s:O, s:O, s:n}}}}", "metadata", "resourceVersion",
	                          at(live, "metadata.resourceVersion"), "spec", "template", "spec", "containers",
	                          json_object_get(want, "containers"), "volumes", json_object_get(want, "volumes"),
	                          "initContainers");
	json_decref(live);
	SG_ENSURE(patch, SG_EINTERNAL, "out of memory");
	sg_kube_ref r = REFS[W_DEPLOY];
	r.ns = p->v.ns;
	r.name = APP;
	int rc = sg_ctrl_stopping(p->c) ? sg_error_set(SG_EBUSY, "stopping")
	                                : sg_kube_merge_patch(sg_ctrl_kube(p->c), &r, patch, NULL);
	json_decref(patch);
	SG_TRY(rc);
	atomic_fetch_add(&p->t->st.writes, 1);
	atomic_fetch_add(&p->t->st.repaired, 1);
	p->deploy_written = true;
	sg_ctrl_event(
	    p->c, p->cr, "Normal", "Applied",
	    "Deployment %s/%s: containers and volumes another manager left (istio-csr's) replaced by signetd's",
	    p->v.ns, APP);
	sg_log(SG_LOG_INFO, "foreign pod template replaced", SG_F_STR("namespace", p->v.ns), SG_F_STR("name", APP),
	       SG_F_END);
	return SG_OK;
}

static int deployment(pass *p)
{
	const json_t *cfg = p->v.cfg, *tls = at(cfg, "istiodTLSConfig");
	json_t *args = json_array();
	SG_ENSURE(args, SG_EINTERNAL, "out of memory");
	char list[4096];
	int rc = SG_OK;
#define A(...)                                  \
	do {                                    \
		if (rc == SG_OK)                \
			rc = push(args, __VA_ARGS__); \
	} while (0)
	/* The HSM settings first: every flag after it overrides the file. In
	 * RA mode there are none: signetd holds no CA key, forwards every CSR
	 * and gets its serving certificate from the issuer too, as istio-csr
	 * does, so an IstioCSR as the seed writes it needs no HSM Secret. */
	if (p->ra)
		A("--hsm=false");
	else
		A("--config=" HSM_MOUNT "/signetd.conf");
	A("--log-level=%lld", (long long)int_at(cfg, "logLevel", 1));
	A("--log-format=%s", str_at(cfg, "logFormat", "text"));
	A("--metrics-port=9402");
	A("--readiness-probe-port=6060");
	A("--readiness-probe-path=/readyz");
	A("--serving-address=0.0.0.0:6443");
	A("--serving-certificate-dns-names=" APP ".%s.svc", p->v.ns);
	A("--serving-certificate-duration=%s", str_at(tls, "certificateDuration", "1h"));
	A("--trust-domain=%s", p->v.trust_domain);
	A("--cluster-id=%s", str_at(cfg, "server.clusterID", "Kubernetes"));
	A("--max-client-certificate-duration=%s", str_at(tls, "maxCertificateDuration", "1h"));
	A("--leader-election-namespace=%s", p->v.istio_ns);
	A("--enable-client-cert-authenticator=false");
	/* signetd's roles beyond istio-csr's stay off: an IstioCSR asks for
	 * the mesh's CA, not a cluster-wide issuer or CSR signer. */
	A("--cert-manager-issuer=false");
	A("--kube-csr-signer=false");
	const char *sel = str_at(cfg, "istioDataPlaneNamespaceSelector", NULL);
	if (sel)
		A("--configmap-namespace-selector=%s", sel);
	if (p->ra) {
		A("--issuer-name=%s", p->v.issuer_name);
		A("--issuer-kind=%s", p->v.issuer_kind);
		A("--issuer-group=%s", p->v.issuer_group);
		A("--certificate-namespace=%s", p->v.istio_ns);
		A("--preserve-certificate-requests=false");
		A("--istiod-cert-enabled=false");
	} else {
		A("--istiod-cert-enabled=true");
		A("--istiod-cert-namespace=%s", p->v.istio_ns);
		A("--istiod-cert-duration=%s", str_at(tls, "certificateDuration", "1h"));
		A("--istiod-cert-renew-before=%s", str_at(tls, "certificateRenewBefore", "30m"));
		A("--istiod-cert-key-algorithm=%s", p->v.algo);
		A("--istiod-cert-key-size=%lld", (long long)p->v.key_size);
		join(json_object_get(tls, "certificateDNSNames"), list, sizeof(list));
		if (*list)
			A("--istiod-cert-additional-dns-names=%s", list);
		join(at(cfg, "istio.revisions"), list, sizeof(list));
		A("--istiod-cert-istio-revisions=%s", *list ? list : "default");
	}
	if (p->ca_copy)
		A("--root-ca-file=" ROOT_MOUNT "/ca.crt");
#undef A
	if (rc < 0) {
		json_decref(args);
		return rc;
	}
	json_t *mounts = json_pack("[{s:s, s:s}]", "name", "tmp", "mountPath", "/tmp");
	json_t *volumes = json_pack("[{s:s, s:{}}]", "name", "tmp", "emptyDir");
	if (!p->ra && mounts && volumes) {
		json_array_insert_new(
		    mounts, 0, json_pack("{s:s, s:s, s:b}", "name", "hsm", "mountPath", HSM_MOUNT, "readOnly", 1));
		json_array_insert_new(volumes, 0,
		                      json_pack("{s:s, s:{s:s, s:I}}", "name", "hsm", "secret", "secretName",
		                                p->t->hsm_secret, "defaultMode", (json_int_t)0440));
	}
	if (p->ca_copy && mounts && volumes) {
		json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "root-ca", "mountPath", ROOT_MOUNT,
		                                        "readOnly", 1));
		json_array_append_new(volumes, json_pack("{s:s, s:{s:s, s:I}}", "name", "root-ca", "configMap", "name",
		                                         CA_COPY, "defaultMode", (json_int_t)0444));
	}
	const json_t *res = json_object_get(cfg, "resources");
	json_t *container = json_pack(
		"{s:s, s:s, s:s, s:o, s:[{s:s,s:I,s:s},{s:s,s:I,s:s},{s:s,s:I,s:s}], s:{s:{s:s,s:I,s:s}, s:I, s:I, s:I, "
		"s:I, s:I}, s:{s:{s:s,s:I,s:s}, s:I, s:I, s:I, s:I, s:I}, s:O, s:{s:b, s:b, s:b, s:{s:[s]}}, s:o}",
		"name", "signetd", "image", p->t->image, "imagePullPolicy", "IfNotPresent", "args", args, "ports", "name",
		"grpc", "containerPort", (json_int_t)6443, "protocol", "TCP", "name", "metrics", "containerPort",
		(json_int_t)9402, "protocol", "TCP", "name", "healthz", "containerPort", (json_int_t)6060, "protocol", "TCP",
		"readinessProbe", "httpGet", "path", "/readyz", "port", (json_int_t)6060, "scheme", "HTTP",
		"initialDelaySeconds", (json_int_t)3, "periodSeconds", (json_int_t)7, "timeoutSeconds", (json_int_t)1,
		"successThreshold", (json_int_t)1, "failureThreshold", (json_int_t)3, "livenessProbe", "httpGet", "path",
		"/healthz", "port", (json_int_t)6060, "scheme", "HTTP", "initialDelaySeconds", (json_int_t)10,
		"periodSeconds", (json_int_t)10, "timeoutSeconds", (json_int_t)1, "successThreshold", (json_int_t)1,
		"failureThreshold", (json_int_t)3, "resources", json_is_object(res) ? res : json_object(),
		"securityContext", "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1, "runAsNonRoot", 1,
		"capabilities", "drop", "ALL", "volumeMounts", mounts);
	if (!json_is_object(res))
		json_decref((json_t *)json_object_get(container, "resources")); /* the fresh {} above: one ref left */
	/* A crash's own words (signetd's last log lines) reach the pod's
	 * status, and from there Degraded. */
	if (container)
		json_object_set_new(container, "terminationMessagePolicy", json_string("FallbackToLogsOnError"));
	/* A new HSM Secret (PIN, token, CA) takes a restart: signetd reads it
	 * at start. The root copy needs none (signetd follows the file). */
	json_t *pod_meta = json_pack("{s:O}", "labels", p->labels);
	if (pod_meta && !p->ra)
		json_object_set_new(pod_meta, "annotations",
		                    json_pack("{s:s}", "operator.signet.dev/hsm-secret-version",
		                              str_at(p->hsm, "metadata.resourceVersion", "")));
	/* fsGroup: the kubelet gives the HSM Secret's files this group
	 * (mode 0440) and the container this supplementary group, which is how
	 * a non-root signetd reads its PIN (sg_secret accepts a group of its
	 * own that is not root's). */
	json_t *pod_spec = json_pack("{s:s, s:{s:b, s:I, s:{s:s}}, s:[o], s:o}", "serviceAccountName", APP,
	                             "securityContext", "runAsNonRoot", 1, "fsGroup", (json_int_t)SIGNET_FS_GROUP,
	                             "seccompProfile", "type", "RuntimeDefault", "containers", container, "volumes",
	                             volumes);
	static const char *const passthrough[] = {"affinity", "tolerations", "nodeSelector"};
	for (size_t i = 0; pod_spec && i < 3; i++) {
		const json_t *x = json_object_get(cfg, passthrough[i]);
		if (x && !json_is_null(x))
			json_object_set(pod_spec, passthrough[i], (json_t *)x);
	}
	json_t *d = object(p, "apps/v1", "Deployment", APP, p->v.ns);
	if (d && pod_meta && pod_spec)
		json_object_set_new(d, "spec",
		                    json_pack("{s:I, s:{s:{s:s}}, s:{s:o, s:o}}", "replicas", (json_int_t)1, "selector",
		                              "matchLabels", "app", APP, "template", "metadata", pod_meta, "spec", pod_spec));
	else {
		json_decref(pod_meta);
		json_decref(pod_spec);
	}
	if (d && !json_object_get(d, "spec")) {
		json_decref(d);
		d = NULL;
	}
	int frc = d ? replace_foreign(p, d) : SG_OK;
	if (frc < 0) {
		json_decref(d);
		return frc;
	}
	return put(p, W_DEPLOY, p->v.ns, d);
}

/* ---- the pass ---- */

/* The operand's Deployment for the status: from the cache, or fresh from
 * the API server when this pass wrote it (the cached copy is the one
 * before the write; its status, current for the old generation, would
 * read as Ready=True for a spec the pods do not run yet). *d may be NULL:
 * absent. */
static int operand_deployment(pass *p, json_t **d)
{
	*d = NULL;
	if (!p->deploy_written) {
		*d = sg_kube_informer_get(sg_ctrl_informer(p->c, W_DEPLOY), p->v.ns, APP);
		return SG_OK;
	}
	sg_kube_ref r = REFS[W_DEPLOY];
	r.ns = p->v.ns;
	r.name = APP;
	int rc = sg_kube_get(sg_ctrl_kube(p->c), &r, d);
	return rc == SG_ENOTFOUND ? SG_OK : rc;
}

static const char *const STATUS_FIELDS[] = {"istioCSRGRPCEndpoint", "istioCSRImage", "serviceAccount", "clusterRole",
                                            "clusterRoleBinding"};

/* The status fields besides conditions: what this pass made (applied),
 * else what the status said, so a pass that fails or is refused does not
 * take back what is still in effect. */
static int status_fields(const pass *p, bool applied, json_t *status)
{
	if (!applied) {
		const json_t *have = json_object_get(p->cr, "status");
		for (size_t i = 0; i < sizeof(STATUS_FIELDS) / sizeof(STATUS_FIELDS[0]); i++) {
			json_t *v = json_object_get(have, STATUS_FIELDS[i]);
			if (json_is_string(v) && json_object_set(status, STATUS_FIELDS[i], v) != 0)
				SG_BAIL(SG_EINTERNAL, "out of memory");
		}
		return SG_OK;
	}
	char ep[400];
	snprintf(ep, sizeof(ep), APP ".%s.svc:%lld", p->v.ns, (long long)p->v.port);
	const char *values[] = {ep, p->t->image, APP, p->crole, p->crole};
	for (size_t i = 0; i < sizeof(STATUS_FIELDS) / sizeof(STATUS_FIELDS[0]); i++)
		SG_ENSURE(json_object_set_new(status, STATUS_FIELDS[i], json_string(values[i])) == 0, SG_EINTERNAL,
		          "out of memory");
	return SG_OK;
}

/* Writes the status: a failure or refusal (failed, with its reason), the
 * wait of p->waiting, or the operand's state. An error reading the
 * Deployment is returned unwritten (the caller reports it as a failure).
 * A Warning Event when the Ready reason changes to a failure, not at
 * every pass that rewrites a message. */
static int write_status(pass *p, const char *failed, const char *reason, bool applied, char *opmsg)
{
	sg_ctrl *c = p->c;
	sg_opr_operand st = SG_OPR_OPERAND_PROGRESSING;
	if (!failed && p->waiting) {
		snprintf(opmsg, 1024, "%s", p->waiting);
	} else if (!failed) {
		json_t *d = NULL;
		SG_TRY(operand_deployment(p, &d));
		json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, W_POD)), *pods = json_array();
		size_t i;
		json_t *o;
		json_array_foreach(all, i, o)
		{
			/* Terminating pods too: sg_opr_operand_state passes over
			 * them. */
			if (strcmp(str_at(o, "metadata.namespace", ""), p->v.ns) == 0 &&
			    strcmp(nz(meta_str(o, "labels", SG_OPR_OWNER_LABEL)), p->owner_label) == 0)
				json_array_append(pods, o);
		}
		st = sg_opr_operand_state(d, pods, opmsg, 1024);
		json_decref(all);
		json_decref(pods);
		json_decref(d);
	}
	json_int_t gen = int_at(p->cr, "metadata.generation", 0);
	json_t *status = json_pack("{s:o}", "conditions", sg_opr_conditions(failed, reason, st, opmsg, gen));
	SG_ENSURE(status, SG_EINTERNAL, "out of memory");
	int rc = status_fields(p, applied, status);
	sg_kube_ref r = REF_CR;
	r.ns = p->v.ns;
	r.name = str_at(p->cr, "metadata.name", "");
	bool written = false;
	if (rc == SG_OK) {
		p->reported = true;
		rc = sg_opr_status(c, &p->t->st, &r, "IstioCSR", p->cr, status, &written);
	}
	json_decref(status);
	const char *now = failed ? reason : st == SG_OPR_OPERAND_FAILING ? "OperandFailed" : NULL;
	const char *was = json_string_value(json_object_get(sg_ctrl_condition_find(p->cr, "Ready"), "reason"));
	if (rc == SG_OK && written && now && (!was || strcmp(was, now) != 0))
		sg_ctrl_event(c, p->cr, "Warning", now, "%s", failed ? failed : opmsg);
	return rc;
}

static const int OWNED[] = {W_DEPLOY, W_SVC, W_SA, W_NETPOL, W_CM, W_ROLE, W_RB, W_CROLE, W_CRB};

static int remove_all(pass *p, const sg_kube_ref *cr_ref)
{
	for (size_t i = 0; i < sizeof(OWNED) / sizeof(OWNED[0]); i++) {
		int w = OWNED[i];
		SG_TRY(sg_opr_delete_owned(p->c, &p->t->st, p->cr, sg_ctrl_informer(p->c, (size_t)w), &REFS[w],
		                           p->owner_label, NULL, 0, NULL));
	}
	if (p->v.istio_ns)
		SG_TRY(drop_istiod_certificate(p));
	SG_TRY(drop_service_monitor(p));
	sg_ctrl_event(p->c, p->cr, "Normal", "Removed", "%s/%s: every object made for it is deleted", p->v.ns,
	              p->v.name);
	return sg_opr_set_finalizer(p->c, &p->t->st, cr_ref, p->cr, FINALIZER, false, NULL);
}

/* The HSM Secret must hold signetd.conf (signet mode: RA mode reads none). */
static bool hsm_ok(pass *p, char *msg, size_t cap)
{
	if (!p->hsm) {
		snprintf(msg, cap,
		         "Secret %s/%s (signetd.conf and the HSM material it names) does not exist; signet's own "
		         "issuer signs with the HSM key (a cert-manager issuer needs none)",
		         p->v.ns, p->t->hsm_secret);
		return false;
	}
	if (!json_string_value(json_object_get(json_object_get(p->hsm, "data"), "signetd.conf"))) {
		snprintf(msg, cap, "Secret %s/%s has no key signetd.conf", p->v.ns, p->t->hsm_secret);
		return false;
	}
	const char *b64 = json_string_value(json_object_get(json_object_get(p->hsm, "data"), HSM_EGRESS_KEY));
	if (!b64)
		return true;
	char text[SG_HSM_EGRESS_MAX];
	size_t n = 0, blen = strlen(b64);
	char why[256] = "";
	if (blen > (SG_HSM_EGRESS_MAX + 2) / 3 * 4 ||
	    sg_b64_decode(SG_B64_STD, b64, blen, (uint8_t *)text, SG_HSM_EGRESS_MAX, &n) < 0)
		snprintf(why, sizeof(why), "not base64 of at most %d bytes", SG_HSM_EGRESS_MAX);
	if (!*why && !(p->hsm_egress = sg_hsm_egress_rules(text, n, why, sizeof(why))) && !*why)
		snprintf(why, sizeof(why), "out of memory");
	if (*why) {
		snprintf(msg, cap, "Secret %s/%s key " HSM_EGRESS_KEY ": %s", p->v.ns, p->t->hsm_secret, why);
		return false;
	}
	return true;
}

/* The issuer named by issuerRef, read live. NULL with msg when absent. */
static int get_issuer(pass *p, json_t **out, char *msg, size_t cap)
{
	*out = NULL;
	sg_kube_ref r = {p->v.signet_issuer ? "signet.dev" : "cert-manager.io", p->v.signet_issuer ? "v1alpha1" : "v1",
	                 NULL, p->v.cluster_issuer ? NULL : p->v.istio_ns, p->v.issuer_name, NULL};
	r.resource = p->v.signet_issuer ? (p->v.cluster_issuer ? "signetclusterissuers" : "signetissuers")
	                                : (p->v.cluster_issuer ? "clusterissuers" : "issuers");
	int rc = sg_kube_get(sg_ctrl_kube(p->c), &r, out);
	if (rc == SG_ENOTFOUND || (rc < 0 && sg_kube_last_status()->code == 404)) {
		snprintf(msg, cap, "%s %s%s%s not found", p->v.issuer_kind, p->v.cluster_issuer ? "" : p->v.istio_ns,
		         p->v.cluster_issuer ? "" : "/", p->v.issuer_name);
		return SG_OK;
	}
	return rc;
}

/* The CA copy's text: the issuer's CA (issuer_ca), all the mesh trusts:
 * in RA mode the issuer signs the workloads' certificates and signetd's
 * own serving certificate alike. SG_OK with p->ca_copy NULL when the CA
 * is not there (yet): msg says what is missing, *invalid whether it is
 * there but unusable. */
static int resolve_ca(pass *p, char *msg, size_t cap, bool *invalid)
{
	return issuer_ca(p->t, &p->v, p->issuer, &p->ca_copy, msg, cap, invalid);
}

/* Whether the CA comes from istiod's own certificate: RA mode through an
 * issuer that is no CA issuer (Vault, Venafi, an external issuer) and no
 * istioCACertificate. That Secret exists only once the istiod
 * Certificate we apply is issued, so it is read after the apply, as the
 * design orders it; reading it first would wait for ever. */
static bool ca_from_istiod(const pass *p)
{
	return p->ra && !json_is_object(at(p->v.cfg, "certManager.istioCACertificate")) &&
	       !str_at(p->issuer, "spec.ca.secretName", NULL);
}

/* A pass over an accepted IstioCSR (finalizer and immutable record in
 * place): inputs, objects, status. A refusal or wait is written here
 * (p->reported); an API error is returned for the caller to report. */
static int accepted(pass *p, sg_ctrl_result *res, char *msg, size_t cap, char *opmsg)
{
	sg_ctrl *c = p->c;
	sg_istiocsr *t = p->t;
	const char *ns = p->v.ns;
	json_t *nsobj = sg_kube_informer_get(sg_ctrl_informer(c, W_NS), NULL, p->v.istio_ns);
	bool ns_ok = nsobj && !at(nsobj, "metadata.deletionTimestamp");
	json_decref(nsobj);
	if (!ns_ok) {
		snprintf(msg, cap, "istio namespace \"%s\" does not exist", p->v.istio_ns);
		return write_status(p, msg, "Failed", false, opmsg);
	}
	if (!p->ra) {
		p->hsm = sg_kube_informer_get(sg_ctrl_informer(c, W_SECRET), ns, t->hsm_secret);
		if (!hsm_ok(p, msg, cap))
			return write_status(p, msg, "Failed", false, opmsg);
	}
	res->requeue_after_ms = RETRY_MS; /* the issuer is not watched */
	SG_TRY(get_issuer(p, &p->issuer, msg, cap));
	if (!p->issuer)
		return write_status(p, msg, "Failed", false, opmsg);
	if (!p->v.signet_issuer && json_object_get(json_object_get(p->issuer, "spec"), "acme")) {
		snprintf(msg, cap, "spec.istioCSRConfig.certManager.issuerRef uses unsupported ACME issuer");
		return write_status(p, msg, "InvalidSpec", false, opmsg);
	}
	bool late_ca = ca_from_istiod(p), invalid = false;
	if (!late_ca && (p->ra || at(p->v.cfg, "certManager.istioCACertificate"))) {
		SG_TRY(resolve_ca(p, msg, cap, &invalid));
		if (!p->ca_copy)
			return write_status(p, msg, invalid ? "InvalidSpec" : "Failed", false, opmsg);
	} else if (!p->ra && !at(p->v.cfg, "certManager.istioCACertificate")) {
		res->requeue_after_ms = 0; /* nothing unwatched matters */
	}
	/* The objects: what signetd runs with comes last, once the CA is
	 * known. */
	SG_TRY(put(p, W_SA, ns, object(p, "v1", "ServiceAccount", APP, ns)));
	SG_TRY(services(p));
	SG_TRY(service_monitor(p));
	SG_TRY(network_policies(p));
	SG_TRY(rbac(p));
	SG_TRY(p->ra ? istiod_certificate(p) : drop_istiod_certificate(p));
	if (late_ca) {
		SG_TRY(resolve_ca(p, msg, cap, &invalid));
		if (invalid)
			return write_status(p, msg, "InvalidSpec", true, opmsg);
		if (!p->ca_copy) {
			/* cert-manager issues in seconds; the Secret is not
			 * watched (it holds istiod's key), so look again soon. */
			res->requeue_after_ms = ISSUE_WAIT_MS;
			char wait[1024];
			snprintf(
			    wait, sizeof(wait),
			    "waiting for cert-manager to issue Certificate %s/istiod: the issuer's CA is read from its "
			    "Secret %s/istiod-tls (key ca.crt) once it holds one; an issuer that writes no ca.crt "
			    "needs "
			    "spec.istioCSRConfig.certManager.istioCACertificate",
			    p->v.istio_ns, p->v.istio_ns);
			p->waiting = wait;
			return write_status(p, NULL, NULL, true, opmsg);
		}
	}
	if (p->ca_copy)
		SG_TRY(ca_copy(p));
	SG_TRY(deployment(p));
	if (!p->ca_copy) /* the only ConfigMap we make */
		SG_TRY(sg_opr_delete_owned(c, &t->st, p->cr, sg_ctrl_informer(c, W_CM), &REFS[W_CM], p->owner_label,
		                           NULL, 0, NULL));
	return write_status(p, NULL, NULL, true, opmsg);
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_istiocsr *t = arg;
	char ns[64], name[SG_KUBE_NAME_MAX + 1];
	if (!sg_ctrl_key_split(key, ns, name) || !*ns)
		return SG_OK;
	json_t *cr = sg_kube_informer_get(sg_ctrl_informer(c, W_CR), ns, name);
	if (!cr)
		return SG_OK;
	pass p = {.t = t, .c = c, .cr = cr};
	char msg[1024] = "", opmsg[1024] = "";
	json_t *imm = NULL;
	int rc = SG_OK;
	sg_kube_ref cr_ref = REF_CR;
	cr_ref.ns = ns;
	cr_ref.name = name;
	snprintf(p.owner_label, sizeof(p.owner_label), "%s", ns);
	snprintf(p.crole, sizeof(p.crole), APP "-%s", ns);
	bool valid = view(cr, &p.v, msg, sizeof(msg));
	p.v.ns = ns;
	p.v.name = name;
	p.labels = sg_opr_labels(at(cr, "spec.controllerConfig.labels"), APP, t->version, p.owner_label);
	p.owner = sg_opr_owner_ref(cr, "IstioCSR");
	if (!p.labels || !p.owner) {
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
		goto out;
	}
	if (at(cr, "metadata.deletionTimestamp")) {
		if (sg_opr_has_finalizer(cr, FINALIZER))
			rc = remove_all(&p, &cr_ref);
		goto out;
	}
	const char *older = older_instance(c, cr);
	if (older) {
		snprintf(msg, sizeof(msg), "multiple instances of istiocsr exist: %s/default is older; %s/%s will not be "
		         "processed until it is deleted", older, ns, name);
		rc = write_status(&p, msg, "MultipleInstances", false, opmsg);
		goto out;
	}
	if (valid) {
		imm = immutable_of(&p.v);
		valid = imm && immutable_kept(cr, imm, msg, sizeof(msg));
	}
	if (!valid) {
		rc = write_status(&p, msg, "InvalidSpec", false, opmsg);
		goto out;
	}
	p.ra = !p.v.signet_issuer;
	char *text = json_dumps(imm, JSON_COMPACT | JSON_SORT_KEYS);
	const char *rec = meta_str(cr, "annotations", IMMUTABLE_ANNOTATION);
	/* Recorded again when it changed: a field first written now (the
	 * check above let only those through) is fixed from here on. */
	if (!sg_opr_has_finalizer(cr, FINALIZER) || !rec || !text || strcmp(rec, text) != 0) {
		json_t *ann = text ? json_pack("{s:s}", IMMUTABLE_ANNOTATION, text) : NULL;
		free(text);
		rc = ann ? sg_opr_set_finalizer(c, &t->st, &cr_ref, cr, FINALIZER, true, ann)
		         : sg_error_set(SG_EINTERNAL, "out of memory");
		json_decref(ann);
		/* The patch's own event brings the next pass; a conflict (the
		 * CR changed meanwhile) is retried without a word. */
		if (rc == SG_OK || sg_kube_conflict(rc))
			goto out;
	} else {
		free(text);
		rc = accepted(&p, res, msg, sizeof(msg), opmsg);
	}
	/* An API error (403, 5xx, a conflict) on the way: said in the
	 * conditions, with the current generation, instead of leaving the
	 * last pass's verdict (a Ready=True of an older spec) standing; the
	 * error goes back to the runtime, which retries with backoff. */
	if (rc < 0 && !p.reported && !sg_ctrl_stopping(c)) {
		sg_error e;
		sg_error_save(&e);
		snprintf(msg, sizeof(msg), "reconciliation failed, retrying: %s", e.msg);
		(void)write_status(&p, msg, "Failed", false, opmsg);
		sg_error_restore(&e);
	}
out:
	sg_log(SG_LOG_DEBUG, "istiocsr pass", SG_F_STR("key", key), SG_F_INT("rc", rc), SG_F_STR("refused", msg),
	       SG_F_STR("operand", opmsg), SG_F_END);
	free(p.ca_copy);
	json_decref(p.issuer);
	json_decref(p.hsm);
	json_decref(p.hsm_egress);
	json_decref(imm);
	json_decref(p.labels);
	json_decref(p.owner);
	json_decref(cr);
	return rc;
}

/* ---- the module ---- */

/* signet_operator_istiocsr_*_total. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
	return sg_opr_metrics(&((sg_istiocsr *)arg)->st, "istiocsr", reg);
}

int sg_istiocsr_new(sg_istiocsr **out, const sg_istiocsr_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube && o->image && *o->image, SG_EINVAL, "istiocsr: needs a client and signetd's image");
	sg_istiocsr *t = calloc(1, sizeof(*t));
	SG_ENSURE(t, SG_EINTERNAL, "out of memory");
	t->image = strdup(o->image);
	t->version = strdup(o->version && *o->version ? o->version : "unknown");
	t->hsm_secret = strdup(o->hsm_secret && *o->hsm_secret ? o->hsm_secret : "signet-hsm");
	if (!t->image || !t->version || !t->hsm_secret) {
		sg_istiocsr_free(t);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	if (!sg_names_dns_subdomain(t->hsm_secret, strlen(t->hsm_secret))) {
		sg_istiocsr_free(t);
		SG_BAIL(SG_EINVAL, "hsm-secret \"%s\" is not a Secret name", o->hsm_secret);
	}
	snprintf(t->field_selector, sizeof(t->field_selector), "metadata.name=%s", t->hsm_secret);
	sg_ctrl_watch w[W_N];
	for (int i = 0; i < W_N; i++)
		w[i] = (sg_ctrl_watch){.ref = REFS[i], .label_selector = SELECTOR, .map = map_owned};
	w[W_CR] = (sg_ctrl_watch){.ref = REFS[W_CR], .map = map_all};
	w[W_NS] = (sg_ctrl_watch){.ref = REFS[W_NS], .map = map_all, .metadata_only = true};
	w[W_SECRET] = (sg_ctrl_watch){.ref = REFS[W_SECRET], .field_selector = t->field_selector, .map = map_secret};
	sg_ctrl_def d = {
	    .name = "istiocsr",
	    .kube = o->kube,
	    .watches = w,
	    .nwatches = W_N,
	    .reconcile = reconcile,
	    .metrics = metrics,
	    .arg = t,
	    .workers = o->workers ? o->workers : 1,
	    .field_manager = SG_OPR_FIELD_MANAGER,
	};
	int rc = sg_ctrl_new(&t->ctrl, &d);
	if (rc < 0) {
		sg_istiocsr_free(t);
		return rc;
	}
	*out = t;
	return SG_OK;
}

sg_ctrl *sg_istiocsr_controller(sg_istiocsr *t)
{
	return t ? t->ctrl : NULL;
}

uint64_t sg_istiocsr_writes(sg_istiocsr *t)
{
	return (uint64_t)atomic_load(&t->st.writes);
}

void sg_istiocsr_free(sg_istiocsr *t)
{
	if (!t)
		return;
	sg_ctrl_free(t->ctrl);
	free(t->image);
	free(t->version);
	free(t->hsm_secret);
	free(t);
}
