/*
 * Root-bundle distribution (see sg_rootdist.h for the contract), a
 * controller on the runtime (sg_ctrl.h): the keys are namespace names.
 *
 * Two watches: namespaces (the primary: a resync queues every selected
 * namespace) and ConfigMaps with our name in every namespace (an event
 * queues the ConfigMap's namespace). The runtime de-duplicates keys, so a
 * burst of events (a relist, a root change, our own writes echoing back)
 * costs one reconcile per namespace, and one worker means one namespace is
 * never reconciled twice at the same time.
 *
 * Namespace selection is done by the API server: the namespace informer
 * carries the selector, so its store holds exactly the selected
 * namespaces, and a namespace that gains the label arrives as ADDED (and
 * one that loses it as DELETED), which is what makes "labelled later"
 * work. The selector is still parsed here (sg_kube_selector.h), so a typo
 * fails at start-up instead of as a LIST that 400s forever.
 *
 * One namespace (options.ns) is the same machinery with narrower watches:
 * namespaces by field selector metadata.name=<ns> (a field kube-apiserver
 * selects namespaces by, 1.20 included) and ConfigMaps in <ns> only. So a
 * namespace created later arrives as ADDED, and nothing outside <ns> is
 * ever seen, let alone written.
 *
 * The write decision reads the informer's cache, not a live GET: at start
 * (and after every root change) every selected namespace is reconciled, and
 * with thousands of namespaces that already match a live GET each would
 * be thousands of requests for nothing. The cache can be behind the
 * server; that is safe because every replace carries the resourceVersion
 * we decided on, so a stale decision ends in 409 Conflict, and only then
 * do we GET the live object and decide again. A create answered by 409
 * AlreadyExists is the same case. So a stale cache costs one refused
 * request, never a blind overwrite, and a matching object costs no request
 * at all, which is also why our own writes cannot loop: their watch events
 * arrive after the store holds the object we wrote, and it matches.
 *
 * Leadership, retries, the pause while the API server is away and the
 * rate of failure warnings are the runtime's.
 *
 * Events (core/v1 Event objects) are not written: a root rotation would
 * write one per namespace, and the log says the same.
 *
 * A Secret is the same object shape with two differences kept in one
 * place each: the value kept is the bundle's base64 (root_value), and the
 * resource and kind (r->kind). Everything else, the decision from the
 * cache, the conditional PUT, the immutable case, is shared.
 */
#include "sg_rootdist.h"

#include "sg_ctrl.h"
#include "sg_guard.h"
#include "sg_kube_selector.h"
#include "sg_kubesign.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_x509.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITE_ATTEMPTS 5 /* conflicts answered by re-reading before we back off */
#define NS_WATCH 0
#define CM_WATCH 1

struct sg_rootdist {
	sg_kube *kube;
	sg_ctrl *ctrl;
	sg_kube_selector *selector;
	char *ns; /* one namespace only, or NULL */
	char *name;
	char *key;
	char *label;
	char *label_value;
	bool secret;
	const char *kind;     /* "ConfigMap" or "Secret" */
	const char *resource; /* "configmaps" or "secrets" */

	pthread_mutex_t mu; /* the fields below */
	json_t *root; /* string: the data value (PEM, or its base64 in a Secret); replaced whole, never modified */
	sg_rootdist_stats stats;
};

typedef enum outcome {
	OUT_CREATED,
	OUT_UPDATED,
	OUT_UNCHANGED,
	OUT_SKIPPED,
	OUT_STOPPED,
} outcome;

/* ---- the root bundle ---- */

/* PEM text holding at least one certificate, as the JSON string the
 * object's data holds: the text in a ConfigMap, its base64 in a Secret. */
static int root_value(bool secret, const char *pem, size_t len, json_t **out)
{
	SG_ENSURE(pem && len > 0 && len <= SG_ROOTDIST_ROOT_MAX, SG_EINVAL,
	          "rootdist: the root bundle must be 1..%u bytes", SG_ROOTDIST_ROOT_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)pem[i];
		SG_ENSURE(c >= 0x20 ? c < 0x7f : (c == '\n' || c == '\r' || c == '\t'), SG_EINVAL,
		          "rootdist: the root bundle is not PEM text (byte %zu)", i);
	}
	sg_x509_bundle *b = NULL;
	int rc = sg_x509_bundle_parse(&b, pem, len);
	sg_x509_bundle_free(b);
	SG_ENSURE(rc == SG_OK, SG_EINVAL, "rootdist: the root bundle holds no PEM certificate (%s)",
	          sg_error_last()->msg);
	char *b64 = NULL;
	if (secret)
		SG_TRY(sg_kubesign_base64(pem, len, &b64));
	*out = secret ? json_string(b64) : json_stringn(pem, len);
	free(b64);
	SG_ENSURE(*out, SG_EINTERNAL, "rootdist: out of memory");
	return SG_OK;
}

/* ---- reconciling one namespace ---- */

static bool stopping(const sg_rootdist *r)
{
	return sg_ctrl_stopping(r->ctrl);
}

static void count(sg_rootdist *r, uint64_t *counter)
{
	pthread_mutex_lock(&r->mu);
	(*counter)++;
	pthread_mutex_unlock(&r->mu);
}

static bool terminating(const json_t *ns)
{
	const char *phase = json_string_value(json_object_get(json_object_get(ns, "status"), "phase"));
	return sg_kube_meta_str(ns, "deletionTimestamp") || (phase && strcmp(phase, "Terminating") == 0);
}

/* Whether cm is exactly what we want: data = {key: root}, no binaryData,
 * our label with our value. Anything unexpected in the payload is simply
 * "no". */
static bool matches(const sg_rootdist *r, const json_t *cm, const json_t *root)
{
	json_t *data = json_object_get(cm, "data");
	json_t *v = json_object_get(data, r->key);
	if (!json_is_object(data) || json_object_size(data) != 1 || !json_is_string(v) ||
	    json_string_length(v) != json_string_length(root) ||
	    memcmp(json_string_value(v), json_string_value(root), json_string_length(root)) != 0)
		return false;
	json_t *bin = json_object_get(cm, "binaryData");
	if (bin && !json_is_null(bin) && !(json_is_object(bin) && json_object_size(bin) == 0))
		return false;
	json_t *labels = json_object_get(json_object_get(cm, "metadata"), "labels");
	const char *mine = json_string_value(json_object_get(labels, r->label));
	return mine && strcmp(mine, r->label_value) == 0;
}

static json_t *desired_new(const sg_rootdist *r, const char *ns, json_t *root)
{
	json_t *o =
	    json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:O}}", "apiVersion", "v1", "kind", r->kind, "metadata",
	              "name", r->name, "namespace", ns, "labels", r->label, r->label_value, "data", r->key, root);
	if (o && r->secret && json_object_set_new(o, "type", json_string("Opaque")) != 0) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

/* cm corrected: our data and label, everything else as it was (the
 * resourceVersion too, which makes the PUT conditional). */
static json_t *desired_update(const sg_rootdist *r, const json_t *cm, json_t *root)
{
	json_t *c = json_deep_copy(cm);
	json_t *meta = json_object_get(c, "metadata");
	if (!c || !json_is_object(meta) || !json_is_string(json_object_get(meta, "resourceVersion"))) {
		json_decref(c);
		return NULL;
	}
	json_t *labels = json_object_get(meta, "labels");
	if (!json_is_object(labels)) {
		labels = json_object();
		if (json_object_set_new(meta, "labels", labels) != 0)
			labels = NULL;
	}
	json_t *data = json_pack("{s:O}", r->key, root);
	bool ok = labels && data && json_object_set_new(labels, r->label, json_string(r->label_value)) == 0 &&
	          json_object_set_new(c, "data", data) == 0;
	json_object_del(c, "binaryData");
	if (!ok) {
		json_decref(c);
		return NULL;
	}
	return c;
}

/* A write refused because the namespace is gone or being deleted: the
 * namespace's own events will tell us if that changes. */
static bool namespace_refused(void)
{
	const sg_kube_status *st = sg_kube_last_status();
	return (st->code == 404 && strstr(st->message, "namespaces")) ||
	       (st->code == 403 && strstr(st->message, "being terminated"));
}

/* Re-reads the live object after a conflict: *cm becomes it, or NULL when
 * it is gone. */
static int reread(sg_rootdist *r, const sg_kube_ref *ref, json_t **cm)
{
	json_decref(*cm);
	*cm = NULL;
	count(r, &r->stats.rereads);
	int rc = sg_kube_get(r->kube, ref, cm);
	if (rc == SG_ENOTFOUND)
		return SG_OK;
	return rc;
}

static int create(sg_rootdist *r, const sg_kube_ref *ref, json_t *root, json_t **cm, outcome *out)
{
	sg_kube_ref coll = *ref;
	coll.name = NULL;
	json_t *body = desired_new(r, ref->ns, root);
	SG_ENSURE(body, SG_EINTERNAL, "rootdist: out of memory");
	int rc = sg_kube_create(r->kube, &coll, body, NULL);
	json_decref(body);
	if (rc == SG_OK) {
		*out = OUT_CREATED;
		return SG_OK;
	}
	if (sg_kube_conflict(rc))
		return reread(r, ref, cm); /* AlreadyExists: our cache is behind */
	if (namespace_refused()) {
		*out = OUT_SKIPPED;
		return SG_OK;
	}
	return rc;
}

/* An immutable ConfigMap or Secret cannot have its data replaced: delete
 * it, so the next attempt creates it. Only the object seen, by its uid: the
 * cache can be behind our own replacement, and a delete by name would
 * remove the new one (a 409 says the name holds a newer object: look at
 * that instead). */
static int recreate(sg_rootdist *r, const sg_kube_ref *ref, json_t **cm)
{
	sg_log(SG_LOG_WARN, "rootdist: replacing an immutable object with the wrong data", SG_F_STR("kind", r->kind),
	       SG_F_STR("namespace", ref->ns), SG_F_STR("name", ref->name), SG_F_END);
	int rc = sg_kube_delete_seen(r->kube, ref, sg_kube_meta_str(*cm, "uid"), NULL);
	if (sg_kube_conflict(rc))
		return reread(r, ref, cm);
	if (rc < 0 && rc != SG_ENOTFOUND)
		return rc;
	json_decref(*cm);
	*cm = NULL;
	return SG_OK;
}

static int update(sg_rootdist *r, const sg_kube_ref *ref, json_t *root, json_t **cm, outcome *out)
{
	if (json_is_true(json_object_get(*cm, "immutable")))
		return recreate(r, ref, cm);
	json_t *body = desired_update(r, *cm, root);
	if (!body)
		return reread(r, ref, cm); /* no usable metadata in what we had */
	int rc = sg_kube_update(r->kube, ref, body, NULL);
	json_decref(body);
	if (rc == SG_OK) {
		*out = OUT_UPDATED;
		return SG_OK;
	}
	if (sg_kube_conflict(rc) || rc == SG_ENOTFOUND)
		return reread(r, ref, cm); /* stale resourceVersion, or deleted meanwhile */
	return rc;
}

static int reconcile_ns(sg_rootdist *r, const char *ns_name, outcome *out)
{
	json_t *ns = sg_kube_informer_get(sg_ctrl_informer(r->ctrl, NS_WATCH), NULL, ns_name);
	bool skip = !ns || terminating(ns);
	json_decref(ns);
	if (skip) {
		*out = OUT_SKIPPED;
		return SG_OK;
	}
	pthread_mutex_lock(&r->mu);
	json_t *root = json_incref(r->root);
	pthread_mutex_unlock(&r->mu);
	sg_kube_ref ref = {.version = "v1", .resource = r->resource, .ns = ns_name, .name = r->name};
	json_t *cm = sg_kube_informer_get(sg_ctrl_informer(r->ctrl, CM_WATCH), ns_name, r->name);
	int rc = SG_OK;
	*out = OUT_STOPPED;
	for (int attempt = 0; attempt < WRITE_ATTEMPTS && *out == OUT_STOPPED; attempt++) {
		if (cm && matches(r, cm, root)) {
			*out = OUT_UNCHANGED;
			break;
		}
		if (stopping(r))
			break;
		rc = cm ? update(r, &ref, root, &cm, out) : create(r, &ref, root, &cm, out);
		if (rc < 0)
			break;
	}
	if (rc == SG_OK && *out == OUT_STOPPED && !stopping(r))
		rc = sg_error_set(SG_EBUSY, "rootdist: %s/%s kept changing under us (%d attempts)", ns_name, r->name,
		                  WRITE_ATTEMPTS);
	json_decref(cm);
	json_decref(root);
	return rc;
}


/* ---- the controller's callbacks ---- */

static void tally(sg_rootdist *r, const char *ns, outcome out)
{
	pthread_mutex_lock(&r->mu);
	switch (out) {
	case OUT_CREATED:
		r->stats.creates++;
		break;
	case OUT_UPDATED:
		r->stats.updates++;
		break;
	case OUT_UNCHANGED:
		r->stats.unchanged++;
		break;
	case OUT_SKIPPED:
		r->stats.skipped++;
		break;
	case OUT_STOPPED:
		break;
	}
	pthread_mutex_unlock(&r->mu);
	if (out == OUT_CREATED || out == OUT_UPDATED)
		sg_log(SG_LOG_INFO, out == OUT_CREATED ? "rootdist: created" : "rootdist: updated",
		       SG_F_STR("kind", r->kind), SG_F_STR("namespace", ns), SG_F_STR("name", r->name), SG_F_END);
	else if (out == OUT_SKIPPED)
		sg_log(SG_LOG_DEBUG, "rootdist: namespace skipped (not selected, gone or terminating)",
		       SG_F_STR("namespace", ns), SG_F_END);
}

static int reconcile(sg_ctrl *c, const char *ns, sg_ctrl_result *res, void *arg)
{
	(void)c, (void)res;
	sg_rootdist *r = arg;
	outcome out = OUT_STOPPED;
	int rc = reconcile_ns(r, ns, &out);
	if (rc == SG_OK && !stopping(r))
		tally(r, ns, out);
	return rc;
}

/* A namespace event queues the namespace itself. */
static void map_namespace(sg_ctrl *c, const json_t *ns, void *arg)
{
	sg_rootdist *r = arg;
	const char *name = sg_kube_meta_str(ns, "name");
	if (name && *name && strlen(name) <= SG_KUBE_NAME_MAX)
		sg_ctrl_add(c, name);
	size_t n = sg_kube_informer_size(sg_ctrl_informer(c, NS_WATCH));
	pthread_mutex_lock(&r->mu);
	r->stats.namespaces = n;
	pthread_mutex_unlock(&r->mu);
}

/* A ConfigMap (Secret) event queues its namespace. */
static void map_configmap(sg_ctrl *c, const json_t *cm, void *arg)
{
	(void)arg;
	const char *ns = sg_kube_meta_str(cm, "namespace");
	if (ns && *ns && strlen(ns) <= SG_KUBE_NAME_MAX)
		sg_ctrl_add(c, ns);
}

/* ---- life cycle ---- */

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool configmap_key_ok(const char *k)
{
	size_t n = strlen(k);
	if (n == 0 || n > 253 || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(k[i]) && k[i] != '-' && k[i] != '_' && k[i] != '.')
			return false;
	return true;
}

/* A label key (apimachinery's IsQualifiedName): [prefix/]name, the prefix
 * a DNS subdomain, the name what a label value may be (1..63 bytes of
 * [A-Za-z0-9._-], alphanumeric ends). */
static bool label_key_ok(const char *k)
{
	return sg_names_qualified(k, strlen(k));
}

static int copy_str(const char *s, char **out)
{
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "rootdist: out of memory");
	return SG_OK;
}

static const char *or_default(const char *s, const char *def)
{
	return s ? s : def;
}

/* The strings of o, checked and copied into r. */
static int init_strings(sg_rootdist *r, const sg_rootdist_options *o)
{
	const char *name = or_default(o->name, SG_ROOTDIST_NAME);
	const char *key = or_default(o->key, SG_ROOTDIST_KEY);
	const char *label = or_default(o->label, SG_ROOTDIST_LABEL);
	const char *value = or_default(o->label_value, SG_ROOTDIST_LABEL_VALUE);
	SG_ENSURE(sg_names_dns_subdomain(name, strlen(name)), SG_EINVAL, "rootdist: invalid %s name \"%.260s\"",
	          r->kind, name);
	/* Secrets' keys follow the same rule (apimachinery's IsConfigMapKey) */
	SG_ENSURE(configmap_key_ok(key), SG_EINVAL, "rootdist: invalid %s key \"%.260s\"", r->kind, key);
	SG_ENSURE(label_key_ok(label), SG_EINVAL, "rootdist: invalid label key \"%.320s\"", label);
	SG_ENSURE(sg_names_label_value(value), SG_EINVAL,
	          "rootdist: invalid label value \"%.70s\" (1..63 bytes of [A-Za-z0-9._-], alphanumeric at both ends)",
	          value);
	SG_TRY(copy_str(name, &r->name));
	SG_TRY(copy_str(key, &r->key));
	SG_TRY(copy_str(label, &r->label));
	SG_TRY(copy_str(value, &r->label_value));
	if (o->ns && *o->ns) {
		SG_ENSURE(sg_names_dns_label(o->ns, strlen(o->ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
		          "rootdist: invalid namespace \"%.70s\" (a DNS-1123 label of at most %d bytes)", o->ns,
		          SG_NAMES_LABEL_MAX);
		SG_TRY(copy_str(o->ns, &r->ns));
	}
	return SG_OK;
}

/* The runtime's hooks: say what this run distributes, and forget the
 * namespace count when it ends. */
static int starting(sg_ctrl *c, void *arg)
{
	(void)c;
	sg_rootdist *r = arg;
	if (r->ns)
		sg_log(SG_LOG_INFO, "rootdist: starting", SG_F_STR("kind", r->kind), SG_F_STR("name", r->name),
		       SG_F_STR("namespace", r->ns), SG_F_END);
	else
		sg_log(SG_LOG_INFO, "rootdist: starting", SG_F_STR("kind", r->kind), SG_F_STR("name", r->name),
		       SG_F_STR("selector", sg_kube_selector_string(r->selector)), SG_F_END);
	return SG_OK;
}

static void stopped(sg_ctrl *c, void *arg)
{
	(void)c;
	sg_rootdist *r = arg;
	pthread_mutex_lock(&r->mu);
	r->stats.namespaces = 0;
	pthread_mutex_unlock(&r->mu);
}

static int init(sg_rootdist *r, const sg_rootdist_options *o, const char *root_pem, size_t len)
{
	SG_ENSURE(o->kube, SG_EINVAL, "rootdist: no Kubernetes client");
	r->secret = o->secret;
	r->kind = o->secret ? "Secret" : "ConfigMap";
	r->resource = o->secret ? "secrets" : "configmaps";
	SG_TRY(init_strings(r, o));
	SG_TRY(sg_kube_selector_parse(&r->selector, o->namespace_selector, "rootdist: namespace selector"));
	bool every = sg_kube_selector_everything(r->selector);
	SG_ENSURE(!r->ns || every, SG_EINVAL,
	          "rootdist: a namespace selector (\"%.100s\") and a single namespace (%s) exclude each other",
	          sg_kube_selector_string(r->selector), r->ns);
	SG_TRY(root_value(r->secret, root_pem, len, &r->root));
	r->kube = o->kube;
	char field[300], ns_field[100];
	snprintf(field, sizeof(field), "metadata.name=%s", r->name);
	snprintf(ns_field, sizeof(ns_field), "metadata.name=%s", r->ns ? r->ns : "");
	sg_ctrl_watch watches[] = {
	    [NS_WATCH] = {.ref = {.version = "v1", .resource = "namespaces"},
	                  .label_selector = every ? NULL : sg_kube_selector_string(r->selector),
	                  .field_selector = r->ns ? ns_field : NULL,
	                  .map = map_namespace},
	    [CM_WATCH] = {.ref = {.version = "v1", .resource = r->resource, .ns = r->ns},
	                  .field_selector = field,
	                  .map = map_configmap},
	};
	sg_ctrl_def def = {
	    .name = or_default(o->controller, SG_ROOTDIST_CONTROLLER),
	    .kube = o->kube,
	    .watches = watches,
	    .nwatches = 2,
	    .reconcile = reconcile,
	    .starting = starting,
	    .stopped = stopped,
	    .arg = r,
	};
	return sg_ctrl_new(&r->ctrl, &def);
}

int sg_rootdist_new(sg_rootdist **out, const sg_rootdist_options *o, const char *root_pem, size_t len)
{
	*out = NULL;
	SG_ENSURE(o, SG_EINVAL, "rootdist: no options");
	sg_rootdist *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "rootdist: out of memory");
	pthread_mutex_init(&r->mu, NULL);
	int rc = init(r, o, root_pem, len);
	if (rc < 0) {
		sg_rootdist_free(r);
		return rc;
	}
	*out = r;
	return SG_OK;
}

sg_ctrl *sg_rootdist_controller(sg_rootdist *r)
{
	return r->ctrl;
}

int sg_rootdist_set_root(sg_rootdist *r, const char *root_pem, size_t len)
{
	json_t *root = NULL;
	SG_TRY(root_value(r->secret, root_pem, len, &root));
	pthread_mutex_lock(&r->mu);
	bool changed = !json_equal(root, r->root);
	if (changed) {
		json_decref(r->root);
		r->root = root;
		root = NULL;
	}
	pthread_mutex_unlock(&r->mu);
	json_decref(root);
	if (changed) {
		sg_ctrl_resync(r->ctrl); /* every selected namespace, on a worker */
		sg_log(SG_LOG_INFO, "rootdist: root bundle changed; reconciling every selected namespace",
		       SG_F_STR("name", r->name), SG_F_END);
	}
	return SG_OK;
}

void sg_rootdist_stats_get(sg_rootdist *r, sg_rootdist_stats *out)
{
	sg_ctrl_stats cs;
	sg_ctrl_stats_get(r->ctrl, &cs);
	pthread_mutex_lock(&r->mu);
	*out = r->stats;
	pthread_mutex_unlock(&r->mu);
	out->errors = cs.errors;
	out->queued = cs.queued;
	out->writes = out->creates + out->updates;
}

void sg_rootdist_free(sg_rootdist *r)
{
	if (!r)
		return;
	sg_ctrl_free(r->ctrl); /* stops first */
	sg_kube_selector_free(r->selector);
	json_decref(r->root);
	free(r->ns);
	free(r->name);
	free(r->key);
	free(r->label);
	free(r->label_value);
	pthread_mutex_destroy(&r->mu);
	free(r);
}
