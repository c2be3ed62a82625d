/*
 * The ExternalPolicyServer controller (sg_extpolicy.h): one reconcile per
 * object, in three steps: where its CA bundle comes from (annotations
 * first, then spec.caBundle), the bundle read from there, then the caller
 * told and the Ready condition written.
 *
 * Shape. Each step ends in an outcome (a reason and a message) rather than
 * an error code, because most failures here are states of the cluster to
 * report on the object (a ConfigMap not created yet, a Secret cert-manager
 * has not written) and not faults to retry with backoff: the object is
 * looked at again after SG_EXTPOLICY_WAIT_RECHECK_S. Only a failed status
 * write is an error for the runtime.
 *
 * Why no watch on ConfigMaps and Secrets: the references may name any
 * namespace, and a cluster-wide watch of Secrets would hold every Secret
 * of the cluster in memory (and need the right to read them all) for the
 * few that carry a CA. A timed recheck bounds how stale a bundle can be;
 * the design asks for periodic checks anyway.
 */
#include "sg_extpolicy.h"

#include "sg_base64.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W_SERVERS 0

#define ANN_FROM "cert-manager.io/inject-ca-from"
#define ANN_FROM_SECRET "cert-manager.io/inject-ca-from-secret"
#define ANN_APISERVER "cert-manager.io/inject-apiserver-ca"
#define ANN_ALLOW_DIRECT "cert-manager.io/allow-direct-injection"
#define ANN_CERT_NAME "cert-manager.io/certificate-name"
#define DEFAULT_KEY "ca.crt"

struct sg_extpolicy {
	sg_ctrl *ctrl;
	sg_kube *kube;
	char ns[SG_NAMES_LABEL_MAX + 1];
	int (*set)(void *arg, const char *name, const char *endpoint, const char *ca, size_t ca_len, bool *changed);
	void (*remove)(void *arg, const char *name);
	void (*clear)(void *arg);
	void *arg;
	unsigned recheck_s;
};

/* How far an object got, for its Ready condition. */
typedef enum { O_READY, O_MISSING, O_UNAVAILABLE, O_INVALID } outcome_kind;
static const char *const reasons[] = {"Ready", "CABundleMissing", "CABundleUnavailable", "InvalidSpec"};

typedef struct outcome {
	outcome_kind kind;
	char msg[1024];
} outcome;

#define SAY(o, k, ...)                                                                                                 \
	do {                                                                                                           \
		(o)->kind = (k);                                                                                       \
		snprintf((o)->msg, sizeof((o)->msg), __VA_ARGS__);                                                     \
	} while (0)

/* The bundle as found: owned bytes, and where they came from. */
typedef struct bundle {
	char *pem;
	size_t len;
	char source[400];
} bundle;

static const char *str_member(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- reading a bundle's source ---- */

/* "[namespace/]name" of an annotation, the namespace defaulted. */
static bool split_ref(sg_extpolicy *e, const char *text, char ns[SG_NAMES_LABEL_MAX + 1],
                      char name[SG_NAMES_SUBDOMAIN_MAX + 1])
{
	const char *slash = strchr(text, '/');
	const char *n = slash ? slash + 1 : text;
	size_t nslen = slash ? (size_t)(slash - text) : strlen(e->ns);
	const char *nsp = slash ? text : e->ns;
	if (!sg_names_dns_label(nsp, nslen, SG_NAMES_LABEL_MAX) || !sg_names_dns_subdomain(n, strlen(n)))
		return false;
	memcpy(ns, nsp, nslen);
	ns[nslen] = '\0';
	snprintf(name, SG_NAMES_SUBDOMAIN_MAX + 1, "%s", n);
	return true;
}

/* GET of one object; O_MISSING when it does not exist, O_UNAVAILABLE when
 * it cannot be read. */
static bool get_object(sg_extpolicy *e, const sg_kube_ref *ref, const char *what, json_t **out, outcome *o)
{
	*out = NULL;
	int rc = sg_kube_get(e->kube, ref, out);
	if (rc == SG_OK)
		return true;
	if (rc == SG_ENOTFOUND)
		SAY(o, O_MISSING, "%s %s/%s does not exist", what, ref->ns, ref->name);
	else
		SAY(o, O_UNAVAILABLE, "%s %s/%s cannot be read: %s", what, ref->ns, ref->name, sg_error_last()->msg);
	return false;
}

/* A base64 value of data (a Secret's, or caBundle.data) into b. */
static bool decode_into(const char *b64, const char *what, bundle *b, outcome *o)
{
	size_t n = strlen(b64);
	if (n > SG_EXTPOLICY_CA_MAX / 3 * 4 + 4) {
		SAY(o, O_INVALID, "%s is larger than %u bytes", what, SG_EXTPOLICY_CA_MAX);
		return false;
	}
	size_t cap = n / 4 * 3 + 3;
	b->pem = malloc(cap + 1);
	if (!b->pem) {
		SAY(o, O_UNAVAILABLE, "out of memory");
		return false;
	}
	if (sg_b64_decode(SG_B64_STD, b64, n, (uint8_t *)b->pem, cap, &b->len) != SG_OK) {
		SAY(o, O_INVALID, "%s is not base64: %s", what, sg_error_last()->msg);
		return false;
	}
	b->pem[b->len] = '\0';
	return true;
}

static bool copy_into(const char *text, const char *what, bundle *b, outcome *o)
{
	size_t n = strlen(text);
	if (n > SG_EXTPOLICY_CA_MAX) {
		SAY(o, O_INVALID, "%s is larger than %u bytes", what, SG_EXTPOLICY_CA_MAX);
		return false;
	}
	b->pem = strdup(text);
	b->len = n;
	if (!b->pem)
		SAY(o, O_UNAVAILABLE, "out of memory");
	return b->pem != NULL;
}

/* data[key] of a ConfigMap (text) or a Secret (base64). */
static bool read_key(sg_extpolicy *e, bool secret, const char *ns, const char *name, const char *key, bundle *b,
                     outcome *o)
{
	const char *what = secret ? "Secret" : "ConfigMap";
	sg_kube_ref ref = {.version = "v1", .resource = secret ? "secrets" : "configmaps", .ns = ns, .name = name};
	sg_kube_secret_auto_t *obj = NULL; /* a Secret's other keys may be a private key */
	if (!get_object(e, &ref, what, &obj, o))
		return false;
	const char *v = str_member(json_object_get(obj, "data"), key);
	if (!v) {
		SAY(o, O_MISSING, "%s %s/%s has no key %s", what, ns, name, key);
		return false;
	}
	char field[400];
	snprintf(field, sizeof(field), "%s %s/%s key %s", what, ns, name, key);
	snprintf(b->source, sizeof(b->source), "%s", field);
	return secret ? decode_into(v, field, b, o) : copy_into(v, field, b, o);
}

/* {name, key, namespace} of spec.caBundle (or spec). */
static bool from_ref(sg_extpolicy *e, const json_t *ref, bool secret, const char *path, bundle *b, outcome *o)
{
	const char *name = str_member(ref, "name"), *key = str_member(ref, "key"), *ns = str_member(ref, "namespace");
	if (!json_is_object(ref) || !name || !sg_names_dns_subdomain(name, strlen(name))) {
		SAY(o, O_INVALID, "%s.name must be the name of a %s", path, secret ? "Secret" : "ConfigMap");
		return false;
	}
	if (ns && !sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX)) {
		SAY(o, O_INVALID, "%s.namespace is not a namespace name", path);
		return false;
	}
	if (key && (!*key || strlen(key) > 253)) {
		SAY(o, O_INVALID, "%s.key is empty or longer than 253 characters", path);
		return false;
	}
	return read_key(e, secret, ns ? ns : e->ns, name, key ? key : DEFAULT_KEY, b, o);
}

/* cert-manager.io/inject-ca-from: the Certificate's Secret, once it is
 * that Certificate's. */
static bool from_certificate(sg_extpolicy *e, const char *text, bundle *b, outcome *o)
{
	char ns[SG_NAMES_LABEL_MAX + 1], name[SG_NAMES_SUBDOMAIN_MAX + 1];
	if (!split_ref(e, text, ns, name)) {
		SAY(o, O_INVALID, "annotation " ANN_FROM ": \"%.100s\" is not [namespace/]certificate", text);
		return false;
	}
	sg_kube_ref ref = {
	    .group = "cert-manager.io", .version = "v1", .resource = "certificates", .ns = ns, .name = name};
	json_auto_t *crt = NULL;
	if (!get_object(e, &ref, "Certificate", &crt, o))
		return false;
	const char *secret = str_member(json_object_get(crt, "spec"), "secretName");
	if (!secret || !sg_names_dns_subdomain(secret, strlen(secret))) {
		SAY(o, O_INVALID, "Certificate %s/%s has no spec.secretName", ns, name);
		return false;
	}
	sg_kube_ref sref = {.version = "v1", .resource = "secrets", .ns = ns, .name = secret};
	sg_kube_secret_auto_t *obj = NULL; /* the Certificate's tls.key beside its ca.crt */
	if (!get_object(e, &sref, "Secret", &obj, o))
		return false;
	const char *owner = str_member(json_object_get(json_object_get(obj, "metadata"), "annotations"), ANN_CERT_NAME);
	if (!owner || strcmp(owner, name) != 0) {
		SAY(o, O_MISSING, "Secret %s/%s is not Certificate %s's yet (annotation " ANN_CERT_NAME ")", ns, secret,
		    name);
		return false;
	}
	const char *v = str_member(json_object_get(obj, "data"), DEFAULT_KEY);
	if (!v || !*v) {
		SAY(o, O_MISSING, "Secret %s/%s has no " DEFAULT_KEY, ns, secret);
		return false;
	}
	snprintf(b->source, sizeof(b->source), "Certificate %s/%s (Secret %s, " DEFAULT_KEY ")", ns, name, secret);
	return decode_into(v, b->source, b, o);
}

/* cert-manager.io/inject-ca-from-secret: a Secret that allows it. */
static bool from_secret(sg_extpolicy *e, const char *text, bundle *b, outcome *o)
{
	char ns[SG_NAMES_LABEL_MAX + 1], name[SG_NAMES_SUBDOMAIN_MAX + 1];
	if (!split_ref(e, text, ns, name)) {
		SAY(o, O_INVALID, "annotation " ANN_FROM_SECRET ": \"%.100s\" is not [namespace/]secret", text);
		return false;
	}
	sg_kube_ref ref = {.version = "v1", .resource = "secrets", .ns = ns, .name = name};
	sg_kube_secret_auto_t *obj = NULL;
	if (!get_object(e, &ref, "Secret", &obj, o))
		return false;
	const char *allow =
	    str_member(json_object_get(json_object_get(obj, "metadata"), "annotations"), ANN_ALLOW_DIRECT);
	if (!allow || strcmp(allow, "true") != 0) {
		SAY(o, O_INVALID, "Secret %s/%s does not allow injection (annotation " ANN_ALLOW_DIRECT ": \"true\")",
		    ns, name);
		return false;
	}
	const char *v = str_member(json_object_get(obj, "data"), DEFAULT_KEY);
	if (!v || !*v) {
		SAY(o, O_MISSING, "Secret %s/%s has no " DEFAULT_KEY, ns, name);
		return false;
	}
	snprintf(b->source, sizeof(b->source), "Secret %s/%s (" DEFAULT_KEY ")", ns, name);
	return decode_into(v, b->source, b, o);
}

static bool from_apiserver(sg_extpolicy *e, bundle *b, outcome *o)
{
	size_t len = 0;
	const uint8_t *ca = sg_kube_ca_pem(e->kube, &len);
	if (!ca || !len) {
		SAY(o, O_INVALID,
		    "annotation " ANN_APISERVER
		    ": this client verifies the API server with the system's roots, not a CA "
		    "of its own");
		return false;
	}
	b->pem = malloc(len + 1);
	if (!b->pem) {
		SAY(o, O_UNAVAILABLE, "out of memory");
		return false;
	}
	memcpy(b->pem, ca, len);
	b->pem[len] = '\0';
	b->len = len;
	snprintf(b->source, sizeof(b->source), "the API server's CA");
	return true;
}

/* The object's bundle: true with b filled (b->len may be 0: none given),
 * or false with o saying why not. */
static bool find_bundle(sg_extpolicy *e, const json_t *obj, bundle *b, outcome *o)
{
	const json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
	const char *from = str_member(ann, ANN_FROM), *from_s = str_member(ann, ANN_FROM_SECRET),
	           *api = str_member(ann, ANN_APISERVER);
	bool want_api = api && strcmp(api, "true") == 0;
	if ((from != NULL) + (from_s != NULL) + want_api > 1) {
		SAY(o, O_INVALID,
		    "more than one of the annotations " ANN_FROM ", " ANN_FROM_SECRET " and " ANN_APISERVER);
		return false;
	}
	if (from)
		return from_certificate(e, from, b, o);
	if (from_s)
		return from_secret(e, from_s, b, o);
	if (want_api)
		return from_apiserver(e, b, o);

	const json_t *spec = json_object_get(obj, "spec");
	const json_t *cab = json_object_get(spec, "caBundle");
	const json_t *data = json_object_get(cab, "data");
	const json_t *cm = json_object_get(cab, "configMapRef"), *sec = json_object_get(cab, "secretRef");
	const char *cm_path = "spec.caBundle.configMapRef", *sec_path = "spec.caBundle.secretRef";
	const json_t *cm2 = json_object_get(spec, "configMapRef"), *sec2 = json_object_get(spec, "secretRef");
	if (!cm && cm2)
		cm = cm2, cm_path = "spec.configMapRef";
	if (!sec && sec2)
		sec = sec2, sec_path = "spec.secretRef";
	int given = (data && !json_is_null(data)) + (cm && !json_is_null(cm)) + (sec && !json_is_null(sec)) +
	            (cm2 && cm != cm2) + (sec2 && sec != sec2);
	if (given > 1) {
		SAY(o, O_INVALID, "spec.caBundle must hold exactly one of data, configMapRef or secretRef");
		return false;
	}
	if (data && !json_is_null(data)) {
		if (!json_is_string(data)) {
			SAY(o, O_INVALID, "spec.caBundle.data is not a string");
			return false;
		}
		snprintf(b->source, sizeof(b->source), "spec.caBundle.data");
		return decode_into(json_string_value(data), "spec.caBundle.data", b, o);
	}
	if (cm && !json_is_null(cm))
		return from_ref(e, cm, false, cm_path, b, o);
	if (sec && !json_is_null(sec))
		return from_ref(e, sec, true, sec_path, b, o);
	snprintf(b->source, sizeof(b->source), "nowhere");
	return true; /* none given: the design's empty bundle */
}

/* ---- reconcile ---- */

static int write_ready(sg_ctrl *c, const json_t *obj, const char *name, const outcome *o)
{
	json_t *gen = json_object_get(json_object_get(obj, "metadata"), "generation");
	json_t *want =
	    json_pack("{s:[{s:s, s:s, s:s, s:s, s:I}]}", "conditions", "type", "Ready", "status",
	              o->kind == O_READY ? "True" : "False", "reason", reasons[o->kind], "message", o->msg,
	              "observedGeneration", (json_int_t)(json_is_integer(gen) ? json_integer_value(gen) : 0));
	SG_ENSURE(want, SG_EINTERNAL, "externalpolicyservers: out of memory");
	sg_kube_ref ref = {.group = "policy.cert-manager.io",
	                   .version = "v1alpha1",
	                   .resource = "externalpolicyservers",
	                   .name = name};
	bool written = false;
	int rc = sg_ctrl_stopping(c) ? sg_error_set(SG_EBUSY, "externalpolicyservers: stopping")
	                             : sg_ctrl_apply_status(c, &ref, "ExternalPolicyServer", obj, want, &written);
	json_decref(want);
	if (written)
		sg_log(o->kind == O_READY ? SG_LOG_INFO : SG_LOG_WARN, "externalpolicyservers: Ready",
		       SG_F_STR("name", name), SG_F_STR("reason", reasons[o->kind]), SG_F_STR("message", o->msg),
		       SG_F_END);
	return rc;
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_extpolicy *e = arg;
	json_auto_t *obj = sg_kube_informer_get(sg_ctrl_informer(c, W_SERVERS), NULL, key);
	if (!obj) {
		e->remove(e->arg, key);
		return SG_OK;
	}
	outcome o = {O_READY, ""};
	bundle b = {0};
	const char *endpoint = str_member(json_object_get(obj, "spec"), "endpoint");
	bool found = false, changed = false;
	if (!endpoint || !*endpoint)
		SAY(&o, O_INVALID, "spec.endpoint is required");
	else
		found = find_bundle(e, obj, &b, &o);
	if (found || o.kind == O_MISSING) {
		/* told even without a bundle: the server is known, and waits */
		if (e->set(e->arg, key, endpoint, found ? b.pem : NULL, found ? b.len : 0, &changed) != SG_OK)
			SAY(&o, O_INVALID, "%s", sg_error_last()->msg);
		else if (found && b.len == 0)
			SAY(&o, O_MISSING,
			    "no CA bundle: policies that list this server evaluate no request until it has one");
		else if (found)
			SAY(&o, O_READY, "ExternalPolicyServer is ready: %s, CA bundle from %s", endpoint, b.source);
	} else if (o.kind == O_INVALID) {
		e->remove(e->arg, key); /* policies listing it wait for it to be fixed */
	}
	/* O_UNAVAILABLE: the source could not be read this time; the server
	 * stays as it was last known, so a passing API server fault does not
	 * stop approvals. */
	free(b.pem);
	res->requeue_after_ms =
	    (uint64_t)(o.kind == O_READY ? e->recheck_s : SG_EXTPOLICY_WAIT_RECHECK_S) * UINT64_C(1000);
	return write_ready(c, obj, key, &o);
}

static int starting(sg_ctrl *c, void *arg)
{
	(void)c;
	sg_extpolicy *e = arg;
	if (e->clear)
		e->clear(e->arg);
	return SG_OK;
}

int sg_extpolicy_new(sg_extpolicy **out, const sg_extpolicy_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube && o->set && o->remove, SG_EINVAL,
	          "externalpolicyservers: needs a Kubernetes client and both callbacks");
	SG_ENSURE(o->ns && sg_names_dns_label(o->ns, strlen(o->ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "externalpolicyservers: \"%s\" is not a namespace name", o->ns ? o->ns : "");
	sg_extpolicy *e = calloc(1, sizeof(*e));
	SG_ENSURE(e, SG_EINTERNAL, "externalpolicyservers: out of memory");
	e->kube = o->kube;
	snprintf(e->ns, sizeof(e->ns), "%s", o->ns);
	e->set = o->set;
	e->remove = o->remove;
	e->clear = o->clear;
	e->arg = o->arg;
	e->recheck_s = o->recheck_seconds ? o->recheck_seconds : SG_EXTPOLICY_RECHECK_DEFAULT_S;
	sg_ctrl_watch w = {
	    .ref = {.group = "policy.cert-manager.io", .version = "v1alpha1", .resource = "externalpolicyservers"}};
	sg_ctrl_def def = {.name = "externalpolicyservers",
	                   .kube = o->kube,
	                   .watches = &w,
	                   .nwatches = 1,
	                   .reconcile = reconcile,
	                   .starting = starting,
	                   .arg = e};
	int rc = sg_ctrl_new(&e->ctrl, &def);
	if (rc < 0) {
		free(e);
		return rc;
	}
	*out = e;
	return SG_OK;
}

sg_ctrl *sg_extpolicy_controller(sg_extpolicy *e)
{
	return e->ctrl;
}

void sg_extpolicy_free(sg_extpolicy *e)
{
	if (!e)
		return;
	sg_ctrl_free(e->ctrl);
	free(e);
}
