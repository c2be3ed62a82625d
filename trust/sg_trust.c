/*
 * Trust bundles (sg_trust.h): trust-manager's Bundle on the controller
 * runtime.
 *
 * One reconcile per Bundle name, in five steps, each of which may end it:
 *   1. the spec is read into a `spec` (everything trust-manager's webhook
 *      and CRD would refuse is refused here: InvalidSpec, nothing written);
 *   2. the sources are read from the informers' caches into an sg_certset
 *      (strict PEM, dedupe, filters); not found: SourceNotFound (no retry,
 *      the next source or Bundle event brings it back), anything else:
 *      SourceBuildError (retried);
 *   3. Secret targets while they are disabled: SecretTargetsDisabled
 *      (after the sources, in trust-manager's order);
 *   4. every namespace that should hold a target gets one applied when it
 *      needs it (trust_needs_update); targets that should not exist are
 *      cleaned (a failed cleanup is logged, not a failure of the Bundle,
 *      as in trust-manager); a target whose cache does not show our last
 *      write of it yet is left to the pass that write's echo brings ("own
 *      writes");
 *   5. the Synced condition, written only when it differs.
 * The caches say what exists; nothing is read from the API server during a
 * reconcile, and writes happen only for a difference, so a reconcile that
 * finds everything right makes no request at all.
 *
 * Which Bundles an event concerns: Bundle events are their own key; a
 * target's label names its Bundle; a namespace event concerns every Bundle
 * (a Bundle whose selector stopped matching must hear of it too, and the
 * map function sees only the new object, so "every" is the simple correct
 * answer; the queue holds each key once); a source event concerns the
 * Bundles that name it or select sources of its kind. That last needs the
 * Bundles' references, kept in `refs` by each reconcile (a Bundle not yet
 * reconciled is reached by the resync every start begins with).
 *
 * The files: this one is the controller (the source map, the reconcile,
 * start and stop); the steps it calls are apart, sharing
 * private/sg_trust_impl.h: sg_trust_spec.c (1), sg_trust_sources.c (3),
 * sg_trust_targets.c and sg_trust_writes.c (4, 5; the latter also holds
 * the records of own writes). sg_trust_package.c is the default package.
 */
#include "sg_trust_impl.h"

#include "sg_guard.h"
#include "sg_log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- references, for the source map ---- */

static void refs_set(sg_trust *t, const char *bname, const spec *s)
{
	json_t *e = json_pack("{s:[], s:[], s:b, s:b}", "cm", "secret", "cmsel", 0, "secretsel", 0);
	if (!e)
		return;
	for (size_t i = 0; s && i < s->nsrcs; i++) {
		const src *x = &s->srcs[i];
		if (x->kind != SRC_CM && x->kind != SRC_SECRET)
			continue;
		const char *kind = x->kind == SRC_CM ? "cm" : "secret";
		if (x->name)
			json_array_append_new(json_object_get(e, kind), json_string(x->name));
		else
			json_object_set_new(e, x->kind == SRC_CM ? "cmsel" : "secretsel", json_true());
	}
	pthread_mutex_lock(&t->refs_mu);
	json_object_set_new(t->refs, bname, e);
	pthread_mutex_unlock(&t->refs_mu);
}

static void refs_drop(sg_trust *t, const char *bname)
{
	pthread_mutex_lock(&t->refs_mu);
	json_object_del(t->refs, bname);
	pthread_mutex_unlock(&t->refs_mu);
}

static void map_all(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)obj;
	sg_trust *t = arg;
	const char *k;
	json_t *v;
	pthread_mutex_lock(&t->refs_mu);
	json_object_foreach(t->refs, k, v)
		sg_ctrl_add(c, k);
	pthread_mutex_unlock(&t->refs_mu);
}

static void map_source(sg_ctrl *c, const json_t *obj, sg_trust *t, const char *kind)
{
	const char *name = sg_kube_meta_str(obj, "name");
	char sel[16];
	snprintf(sel, sizeof(sel), "%ssel", kind);
	const char *k;
	json_t *v;
	pthread_mutex_lock(&t->refs_mu);
	json_object_foreach(t->refs, k, v)
	{
		bool hit = json_is_true(json_object_get(v, sel));
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(v, kind), i, n)
			hit = hit || (name && strcmp(json_string_value(n), name) == 0);
		if (hit)
			sg_ctrl_add(c, k);
	}
	pthread_mutex_unlock(&t->refs_mu);
}

static void map_source_cm(sg_ctrl *c, const json_t *obj, void *arg)
{
	map_source(c, obj, arg, "cm");
}

static void map_source_secret(sg_ctrl *c, const json_t *obj, void *arg)
{
	map_source(c, obj, arg, "secret");
}

static void map_target(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *b = json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"),
	                                                  SG_TRUST_LABEL));
	if (b && sg_names_dns_subdomain(b, strlen(b)))
		sg_ctrl_add(c, b);
}

/* ---- reconcile ---- */

static bool ns_targeted(const sg_trust *t, const spec *s, const json_t *ns)
{
	const char *name = sg_kube_meta_str(ns, "name");
	const json_t *meta = json_object_get(ns, "metadata");
	const char *phase = json_string_value(json_object_get(json_object_get(ns, "status"), "phase"));
	if (!name || json_object_get(meta, "deletionTimestamp") || (phase && strcmp(phase, "Terminating") == 0))
		return false;
	if (t->ntarget_ns) {
		bool listed = false;
		for (size_t i = 0; i < t->ntarget_ns && !listed; i++)
			listed = strcmp(t->target_ns[i], name) == 0;
		if (!listed)
			return false;
	}
	return !s->ns_sel || sg_kube_selector_matches(s->ns_sel, json_object_get(meta, "labels"));
}

/* trust-manager's words (pkg/bundle/bundle.go): "allowed" namespaces are
 * those of --target-namespaces. */
static void synced_message(const sg_trust *t, const spec *s, char *out, size_t cap)
{
	const char *allowed = t->ntarget_ns ? "allowed " : "";
	if (s->ns_sel && !sg_kube_selector_everything(s->ns_sel))
		snprintf(out, cap, "Successfully synced Bundle to %snamespaces that match this label selector: %s",
		         allowed, sg_kube_selector_string(s->ns_sel));
	else
		snprintf(out, cap, "Successfully synced Bundle to all %snamespaces", allowed);
}

/* Writes every target the Bundle wants and cleans those it no longer
 * wants. A target that cannot be written fails the reconcile (fail_ns and
 * *fail_secret say which); one that cannot be cleaned does not: as in
 * trust-manager, the failure is logged and the Bundle is still Synced (the
 * old target keeps what it held, and its next event tries again). */
static int sync_all(sg_trust *t, sg_ctrl *c, const json_t *bundle, const char *bname, const spec *s, build *b,
                    char *fail_ns, size_t fail_cap, bool *fail_secret, bool *deferred)
{
	const char *uid = sg_kube_meta_str(bundle, "uid");
	SG_ENSURE(uid, SG_EPROTO, "trust: Bundle %s has no uid", bname);
	char *pem = NULL;
	size_t pem_len = 0;
	SG_TRY(sg_certset_pem(b->set, &pem, &pem_len));
	want w[2] = {{.t = &s->cm, .secret = false, .pem = pem, .pem_len = pem_len},
	             {.t = &s->secret, .secret = true, .pem = pem, .pem_len = pem_len}};
	int rc = SG_OK;
	for (int k = 0; k < 2 && rc == SG_OK; k++)
		if (w[k].t->on)
			rc = trust_target_hash(s, w[k].t, pem, pem_len, w[k].hash);
	json_t *namespaces = rc == SG_OK ? sg_kube_informer_list(sg_ctrl_informer(c, W_NAMESPACES)) : NULL;
	json_t *desired = json_object();
	if (rc == SG_OK && (!namespaces || !desired))
		rc = sg_error_set(SG_EINTERNAL, "trust: out of memory");
	size_t i;
	json_t *ns;
	json_array_foreach(rc == SG_OK ? namespaces : NULL, i, ns)
	{
		if (!ns_targeted(t, s, ns))
			continue;
		const char *name = sg_kube_meta_str(ns, "name");
		json_object_set_new(desired, name, json_true());
		for (int k = 0; k < 2 && rc == SG_OK; k++) {
			if (!w[k].t->on)
				continue;
			rc = trust_sync_target(t, c, bname, uid, name, s, b->set, &w[k], &w[1 - k], deferred);
			if (rc < 0) {
				snprintf(fail_ns, fail_cap, "%s", name);
				*fail_secret = w[k].secret;
			}
		}
		if (rc < 0)
			break;
	}
	/* What should not be there any more. */
	for (int k = 0; k < (t->secrets ? 2 : 1) && rc == SG_OK; k++) {
		json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, k ? W_TGT_SECRET : W_TGT_CM));
		if (!all) {
			rc = sg_error_set(SG_EINTERNAL, "trust: out of memory");
			break;
		}
		json_t *obj;
		json_array_foreach(all, i, obj)
		{
			const json_t *meta = json_object_get(obj, "metadata");
			const char *label = json_string_value(json_object_get(json_object_get(meta, "labels"), SG_TRUST_LABEL));
			const char *ons = sg_kube_meta_str(obj, "namespace");
			const char *oname = sg_kube_meta_str(obj, "name");
			if (!label || strcmp(label, bname) != 0 || !ons || !oname || strcmp(oname, bname) != 0)
				continue;
			if ((w[k].t->on && json_object_get(desired, ons)) ||
			    json_object_get(meta, "deletionTimestamp") || !trust_controlled_by(obj, uid))
				continue;
			if (trust_pending_stale(t, k == 1, ons, bname, obj)) {
				*deferred = true; /* cleaned already; the cache is behind */
				continue;
			}
			rc = trust_cleanup_target(t, c, obj, k == 1, bname, uid, deferred);
			if (rc < 0 && !(rc == SG_EBUSY && sg_ctrl_stopping(c))) {
				sg_log(SG_LOG_WARN, "trust: failed to clean up a Bundle target it no longer wants",
				       SG_F_STR("bundle", bname), SG_F_STR("namespace", ons),
				       SG_F_STR("kind", k ? "Secret" : "ConfigMap"),
				       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
				atomic_fetch_add(&t->cleanup_failures, 1);
				rc = SG_OK;
			}
			if (rc < 0)
				break; /* stopping */
		}
		json_decref(all);
	}
	json_decref(namespaces);
	json_decref(desired);
	/* The two kinds may share one encoding of each format. */
	if (w[1].jks != w[0].jks)
		free(w[1].jks);
	if (w[1].p12 != w[0].p12)
		free(w[1].p12);
	free(w[0].jks);
	free(w[0].p12);
	free(pem);
	return rc;
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_trust *t = arg;
	bool deferred = false; /* a target's cache is behind our write: look again */
	trust_pending_prune(t);
	json_t *bundle = sg_kube_informer_get(sg_ctrl_informer(c, W_BUNDLES), NULL, key);
	if (!bundle) {
		refs_drop(t, key);
		int rc = trust_orphans(t, c, key, &deferred);
		if (rc == SG_OK && deferred)
			res->requeue_after_ms = PENDING_RECHECK_MS;
		return rc;
	}
	spec s;
	char why[MSG_MAX], msg[MSG_MAX + 64];
	int rc = SG_OK;
	build b = {0};
	if (!trust_parse_spec(bundle, key, &s, why, sizeof(why))) {
		refs_set(t, key, NULL);
		trust_printable_only(why);
		snprintf(msg, sizeof(msg), "Bundle is invalid: %s", why);
		rc = trust_set_status(t, c, bundle, false, "InvalidSpec", msg, NULL);
		goto out;
	}
	refs_set(t, key, &s);
	sg_certset_opts co = {.filter_expired = t->filter_expired, .filter_non_ca = t->filter_non_ca};
	if ((rc = sg_certset_new(&b.set, &co)) < 0)
		goto out;
	rc = trust_build_sources(t, c, &s, &b);
	if (rc == SG_ENOTFOUND) {
		snprintf(msg, sizeof(msg), "Bundle source was not found: %s", b.msg);
		rc = trust_set_status(t, c, bundle, false, "SourceNotFound", msg, NULL);
		goto out;
	}
	if (rc < 0) {
		/* Retried with backoff: the cause may be ours (memory), and a
		 * fixed source arrives as an event anyway. */
		snprintf(msg, sizeof(msg), "Failed to build bundle sources: %s", b.msg[0] ? b.msg : sg_error_last()->msg);
		int st = trust_set_status(t, c, bundle, false, "SourceBuildError", msg, NULL);
		rc = sg_error_set(st < 0 ? st : rc, "%s", msg);
		goto out;
	}
	/* After the sources, as trust-manager checks it: a Bundle whose
	 * sources are missing says so first. */
	if (s.secret.on && !t->secrets) {
		rc = trust_set_status(t, c, bundle, false, "SecretTargetsDisabled",
		                      "Bundle has Secret targets but the feature is disabled", NULL);
		goto out;
	}
	char fail_ns[SG_NAMES_LABEL_MAX + 1] = "";
	bool fail_secret = false;
	rc = sync_all(t, c, bundle, key, &s, &b, fail_ns, sizeof(fail_ns), &fail_secret, &deferred);
	if (rc < 0) {
		if (rc == SG_EBUSY && sg_ctrl_stopping(c))
			goto out;
		const char *kind = fail_secret ? "Secret" : "ConfigMap";
		char reason[32];
		snprintf(reason, sizeof(reason), "Sync%sTargetFailed", kind);
		snprintf(msg, sizeof(msg), "Failed to sync bundle %s to namespace \"%s\": %s", kind, fail_ns,
		         sg_error_last()->msg);
		int saved = rc;
		sg_error e;
		sg_error_save(&e);
		(void)trust_set_status(t, c, bundle, false, reason, msg, NULL);
		sg_error_restore(&e);
		rc = saved;
		goto out;
	}
	synced_message(t, &s, msg, sizeof(msg));
	rc = trust_set_status(t, c, bundle, true, "Synced", msg,
	                      s.uses_default && t->package ? sg_trust_package_id(t->package) : NULL);
	if (rc == SG_OK && deferred)
		res->requeue_after_ms = PENDING_RECHECK_MS;
out:
	if (rc < 0)
		atomic_fetch_add(&t->errors, 1);
	sg_certset_free(b.set);
	trust_spec_free(&s);
	json_decref(bundle);
	return rc;
}

/* ---- life ---- */

static void stats_of(void *arg, void *out)
{
	sg_trust_stats_get(arg, out);
}

/* signet_trust_*: the module's counters, by the registry's stats table. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
#define COUNTER(field, name, help) SG_METRICS_STAT_COUNTER(sg_trust_stats, field, name, help)
	static const sg_metrics_stat rows[] = {
	    COUNTER(synced, "signet_trust_bundle_synced_total", "Bundle reconciles that ended Synced=True."),
	    COUNTER(not_synced, "signet_trust_bundle_not_synced_total",
	            "Bundle reconciles that ended Synced=False (any reason)."),
	    COUNTER(applies, "signet_trust_target_writes_total", "Targets created or repaired (server-side apply)."),
	    COUNTER(cleanups, "signet_trust_target_cleanups_total",
	            "Targets stripped of the bundle's keys (no longer selected)."),
	    COUNTER(cleanup_failures, "signet_trust_target_cleanup_failures_total",
	            "Targets no longer selected that could not be cleaned (logged; the Bundle stays Synced)."),
	    COUNTER(deletes, "signet_trust_target_deletes_total",
	            "Targets deleted (emptied, orphaned or of a re-created Bundle)."),
	    COUNTER(status_writes, "signet_trust_status_writes_total", "Bundle status writes."),
	    COUNTER(errors, "signet_trust_errors_total", "Bundle reconciles that failed (retried with backoff)."),
	    SG_METRICS_STAT_GAUGE(sg_trust_stats, bundles, "signet_trust_bundles", "Bundles known to the controller."),
	};
#undef COUNTER
	return sg_metrics_stats(reg, rows, sizeof(rows) / sizeof(rows[0]), stats_of, sizeof(sg_trust_stats), arg);
}

int sg_trust_new(sg_trust **out, const sg_trust_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube, SG_EINVAL, "trust: needs a Kubernetes client");
	const char *tns = o->trust_namespace ? o->trust_namespace : "cert-manager";
	SG_ENSURE(sg_names_dns_label(tns, strlen(tns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "trust: --trust-namespace \"%s\" is not a namespace name", tns);
	SG_ENSURE(o->ntarget_namespaces <= SG_TRUST_TARGET_NAMESPACES_MAX, SG_EINVAL,
	          "trust: at most %d --target-namespaces", SG_TRUST_TARGET_NAMESPACES_MAX);
	for (size_t i = 0; i < o->ntarget_namespaces; i++) {
		const char *n = o->target_namespaces[i];
		SG_ENSURE(n && sg_names_dns_label(n, strlen(n), SG_NAMES_LABEL_MAX), SG_EINVAL,
		          "trust: --target-namespaces: \"%s\" is not a namespace name", n ? n : "");
	}
	sg_trust *t = calloc(1, sizeof(*t));
	SG_ENSURE(t, SG_EINTERNAL, "trust: out of memory");
	pthread_mutex_init(&t->refs_mu, NULL);
	pthread_mutex_init(&t->pending_mu, NULL);
	t->kube = o->kube;
	snprintf(t->trust_ns, sizeof(t->trust_ns), "%s", tns);
	t->package = o->package;
	t->secrets = o->secret_targets_enabled;
	t->filter_expired = o->filter_expired;
	t->filter_non_ca = o->filter_non_ca;
	t->refs = json_object();
	t->pending = json_object();
	int rc = t->refs && t->pending ? SG_OK : sg_error_set(SG_EINTERNAL, "trust: out of memory");
	if (rc == SG_OK && o->ntarget_namespaces) {
		t->target_ns = calloc(o->ntarget_namespaces, sizeof(char *));
		for (size_t i = 0; t->target_ns && i < o->ntarget_namespaces; i++)
			if ((t->target_ns[i] = strdup(o->target_namespaces[i])))
				t->ntarget_ns++;
		if (t->ntarget_ns != o->ntarget_namespaces)
			rc = sg_error_set(SG_EINTERNAL, "trust: out of memory");
	}
	sg_ctrl_watch w[] = {
		[W_BUNDLES] = {.ref = {.group = SG_TRUST_GROUP, .version = SG_TRUST_VERSION, .resource = SG_TRUST_RESOURCE}},
		[W_NAMESPACES] = {.ref = {.version = "v1", .resource = "namespaces"}, .map = map_all},
		[W_SRC_CM] = {.ref = {.version = "v1", .resource = "configmaps", .ns = t->trust_ns}, .map = map_source_cm},
		[W_SRC_SECRET] = {.ref = {.version = "v1", .resource = "secrets", .ns = t->trust_ns},
		                  .map = map_source_secret},
		[W_TGT_CM] = {.ref = {.version = "v1", .resource = "configmaps"},
		              .label_selector = SG_TRUST_LABEL,
		              .map = map_target,
		              .metadata_only = true},
		[W_TGT_SECRET] = {.ref = {.version = "v1", .resource = "secrets"},
		                  .label_selector = SG_TRUST_LABEL,
		                  .map = map_target,
		                  .metadata_only = true},
	};
	sg_ctrl_def def = {.name = "bundles",
	                   .kube = o->kube,
	                   .watches = w,
	                   .nwatches = t->secrets ? 6 : 5,
	                   .reconcile = reconcile,
	                   .metrics = metrics,
	                   .arg = t,
	                   .workers = o->workers ? o->workers : 1,
	                   .field_manager = SG_TRUST_FIELD_MANAGER};
	if (rc == SG_OK)
		rc = sg_ctrl_new(&t->ctrl, &def);
	if (rc < 0) {
		sg_trust_free(t);
		return rc;
	}
	*out = t;
	return SG_OK;
}

sg_ctrl *sg_trust_controller(sg_trust *t)
{
	return t->ctrl;
}

void sg_trust_stats_get(sg_trust *t, sg_trust_stats *out)
{
	*out = (sg_trust_stats){
	    .synced = atomic_load(&t->synced),
	    .not_synced = atomic_load(&t->not_synced),
	    .applies = atomic_load(&t->applies),
	    .cleanups = atomic_load(&t->cleanups),
	    .cleanup_failures = atomic_load(&t->cleanup_failures),
	    .deletes = atomic_load(&t->deletes),
	    .status_writes = atomic_load(&t->status_writes),
	    .errors = atomic_load(&t->errors),
	};
	pthread_mutex_lock(&t->refs_mu);
	out->bundles = json_object_size(t->refs);
	pthread_mutex_unlock(&t->refs_mu);
}

void sg_trust_free(sg_trust *t)
{
	if (!t)
		return;
	sg_ctrl_free(t->ctrl);
	for (size_t i = 0; i < t->ntarget_ns; i++)
		free(t->target_ns[i]);
	free(t->target_ns);
	json_decref(t->refs);
	json_decref(t->pending);
	pthread_mutex_destroy(&t->refs_mu);
	pthread_mutex_destroy(&t->pending_mu);
	free(t);
}
