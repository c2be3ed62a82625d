/*
 * sg_trust_writes: the controller's writes and what it remembers of them.
 * A target applied when it needs it, stripped of our keys when it is no
 * longer wanted (deleted when nothing else is left), deleted when its
 * Bundle is gone; the Bundle's Synced condition, written only when it
 * differs. Each write leaves a record of the object it acted on until the
 * caches show its echo, so that a pass that runs before the echo neither
 * repeats the write nor acts on what it already changed (the comment below
 * explains). Apart from the targets' pure functions (sg_trust_targets.c)
 * and the reconcile (sg_trust.c) because this is the only file that calls
 * the API server, and its records are its own.
 */
#include "sg_trust_impl.h"

#include "sg_guard.h"
#include "sg_log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- own writes the caches have not shown yet ----
 *
 * Targets are read from a cache, and each write of ours comes back as an
 * event that queues the Bundle again, so the next reconcile often runs
 * before the cache holds the last writes of the one before. Acting on such
 * a stale object would apply the same content a second time, delete a
 * target already deleted or, worse, clean up a target just deleted: an
 * apply creates what is missing, and the empty object would be deleted
 * once more. So each write remembers the resourceVersion of the object it
 * acted on ("" when there was none): while the cache still shows exactly
 * that, the target is left alone, its echo being on the way (it queues the
 * Bundle again; the reconcile also asks for a later pass, should it never
 * come). Once the cache shows anything else, the record goes and the cache
 * is trusted again. A record is forgotten after PENDING_MAX_MS: an echo
 * folded into a relist, or an object we created that someone deleted
 * before the cache saw it. (client-go's controllers call these
 * expectations.) A write the server found to change nothing (the same
 * resourceVersion back) has no echo and leaves no record. */
#define PENDING_MAX_MS 10000u

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void pending_key(bool secret, const char *ns, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%c/%s/%s", secret ? 's' : 'c', ns, name);
}

static const char *rv_or_empty(const json_t *obj)
{
	const char *rv = sg_kube_meta_str(obj, "resourceVersion");
	return rv ? rv : "";
}

/* We wrote target ns/name after reading acted_on (NULL: none) from the
 * cache; after (NULL for a delete) is what the server answered. Out of
 * memory loses the record: at worst one write is repeated. */
static void pending_note(sg_trust *t, bool secret, const char *ns, const char *name, const json_t *acted_on,
                         const json_t *after, bool deleted)
{
	const char *rv = rv_or_empty(acted_on);
	if (!deleted && after && strcmp(rv_or_empty(after), rv) == 0)
		return; /* nothing changed: no event will follow */
	char key[SG_CTRL_KEY_MAX + 4];
	pending_key(secret, ns, name, key, sizeof(key));
	json_t *rec = json_pack("{s:s, s:I}", "rv", rv, "at", (json_int_t)mono_ms());
	pthread_mutex_lock(&t->pending_mu);
	if (rec)
		json_object_set_new(t->pending, key, rec);
	pthread_mutex_unlock(&t->pending_mu);
}

/* Whether cached (the cache's target ns/name, NULL: absent) is older than
 * our last write of it; drops the record when it is not. */
bool trust_pending_stale(sg_trust *t, bool secret, const char *ns, const char *name, const json_t *cached)
{
	char key[SG_CTRL_KEY_MAX + 4];
	pending_key(secret, ns, name, key, sizeof(key));
	pthread_mutex_lock(&t->pending_mu);
	json_t *rec = json_object_get(t->pending, key);
	const char *rv = json_string_value(json_object_get(rec, "rv"));
	uint64_t at = (uint64_t)json_integer_value(json_object_get(rec, "at"));
	bool stale = rv && mono_ms() - at < PENDING_MAX_MS && strcmp(rv, rv_or_empty(cached)) == 0;
	if (rec && !stale)
		json_object_del(t->pending, key);
	pthread_mutex_unlock(&t->pending_mu);
	return stale;
}

/* Forgets records past their time (of targets nobody looked at again). */
void trust_pending_prune(sg_trust *t)
{
	uint64_t now = mono_ms();
	pthread_mutex_lock(&t->pending_mu);
	const char *k;
	void *tmp;
	json_t *rec;
	json_object_foreach_safe(t->pending, tmp, k, rec)
	{
		if (now - (uint64_t)json_integer_value(json_object_get(rec, "at")) >= PENDING_MAX_MS)
			json_object_del(t->pending, k);
	}
	pthread_mutex_unlock(&t->pending_mu);
}

/* A DELETE of target seen, as it was seen: the same object (its uid), and
 * with exact the same version of it too, for a delete that is right only
 * for the content read (a cache behind the API server may not show a key
 * a user added a moment ago, and the delete would take it with ours).
 * SG_OK also when it was gone already, counted only when it did delete;
 * SG_EBUSY with a 409 (sg_kube_conflict() is true) when the name holds something
 * newer. */
static int delete_target(sg_trust *t, const sg_kube_ref *ref, const json_t *seen, bool exact)
{
	const char *uid = sg_kube_meta_str(seen, "uid");
	int rc = exact ? sg_kube_delete_version(t->kube, ref, uid, sg_kube_meta_str(seen, "resourceVersion"), NULL)
	               : sg_kube_delete_seen(t->kube, ref, uid, NULL);
	if (rc == SG_OK)
		atomic_fetch_add(&t->deletes, 1);
	return rc == SG_ENOTFOUND ? SG_OK : rc;
}

int trust_sync_target(sg_trust *t, sg_ctrl *c, const char *bname, const char *uid, const char *ns, const spec *s,
                      sg_certset *set, want *w, want *other, bool *deferred)
{
	sg_kube_informer *inf = sg_ctrl_informer(c, w->secret ? W_TGT_SECRET : W_TGT_CM);
	json_t *cur = sg_kube_informer_get(inf, ns, bname);
	if (trust_pending_stale(t, w->secret, ns, bname, cur)) {
		json_decref(cur);
		*deferred = true;
		return SG_OK;
	}
	bool needed = !cur || trust_needs_update(cur, s, w, bname, uid);
	/* A target whose controller is another Bundle of this name (deleted
	 * and created again, before garbage collection) cannot take a second
	 * controller reference: it goes first. */
	bool stale_owner = cur && trust_controller_ref(cur) && !trust_controlled_by(cur, uid) &&
	                   trust_controlled_by_bundle_named(cur, bname);
	int rc = SG_OK;
	json_t *body = NULL, *after = NULL;
	sg_kube_ref ref = trust_target_ref(w->secret, ns, bname);
	if (!needed)
		goto out;
	if (sg_ctrl_stopping(c)) {
		rc = sg_error_set(SG_EBUSY, "trust: stopping");
		goto out;
	}
	if (stale_owner && (rc = delete_target(t, &ref, cur, false)) < 0)
		goto out;
	if ((rc = trust_make_formats(s, set, w, other)) < 0)
		goto out;
	body = trust_target_body(bname, uid, ns, s, w, false);
	rc = body ? sg_kube_apply(t->kube, &ref, body, SG_TRUST_FIELD_MANAGER, true, &after)
	          : sg_error_set(SG_EINTERNAL, "trust: out of memory");
	if (rc == SG_OK) {
		atomic_fetch_add(&t->applies, 1);
		pending_note(t, w->secret, ns, bname, cur, after, false);
		sg_log(SG_LOG_DEBUG, "trust: target written", SG_F_STR("bundle", bname), SG_F_STR("namespace", ns),
		       SG_F_STR("kind", w->secret ? "Secret" : "ConfigMap"), SG_F_END);
	}
out:
	json_decref(body);
	json_decref(after);
	json_decref(cur);
	return rc;
}

static bool has_data(const json_t *obj)
{
	return json_object_size(json_object_get(obj, "data")) > 0 ||
	       json_object_size(json_object_get(obj, "binaryData")) > 0;
}

/* obj is a target this Bundle controls that should not exist: drop the
 * keys and the hash we wrote; delete what is left empty. */
int trust_cleanup_target(sg_trust *t, sg_ctrl *c, const json_t *obj, bool secret, const char *bname, const char *uid,
                         bool *deferred)
{
	const char *ns = sg_kube_meta_str(obj, "namespace");
	const char *have[OWNED_MAX];
	size_t nhave = 0;
	const json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
	if (trust_owned_keys(obj, secret, have, &nhave) && nhave == 0 && !json_object_get(ann, SG_TRUST_HASH))
		return SG_OK; /* cleaned before: what is left belongs to others */
	SG_ENSURE(!sg_ctrl_stopping(c), SG_EBUSY, "trust: stopping");
	sg_kube_ref ref = trust_target_ref(secret, ns, bname);
	if (!trust_others_own_data(obj, secret)) {
		/* Every key is ours, as far as the cache knows: the apply
		 * would leave it empty, and one delete does what apply +
		 * delete would, for this version only. A 409 says the object
		 * changed since (a user's key, perhaps): its event is on the
		 * way, and the next pass cleans up what it then shows. */
		int rc = delete_target(t, &ref, obj, true);
		if (rc == SG_OK)
			pending_note(t, secret, ns, bname, obj, NULL, true);
		if (sg_kube_conflict(rc)) {
			*deferred = true;
			rc = SG_OK;
		}
		return rc;
	}
	want w = {.secret = secret};
	json_t *body = trust_target_body(bname, uid, ns, NULL, &w, true);
	SG_ENSURE(body, SG_EINTERNAL, "trust: out of memory");
	json_t *after = NULL;
	int rc = sg_kube_apply(t->kube, &ref, body, SG_TRUST_FIELD_MANAGER, true, &after);
	json_decref(body);
	if (rc == SG_OK) {
		atomic_fetch_add(&t->cleanups, 1);
		bool empty = !has_data(after);
		if (empty)
			rc = delete_target(t, &ref, after, true);
		if (empty && sg_kube_conflict(rc)) {
			/* Written since our apply: no longer empty, not ours. */
			empty = false;
			rc = SG_OK;
		}
		pending_note(t, secret, ns, bname, obj, after, empty);
	} else if (rc == SG_ENOTFOUND) {
		rc = SG_OK; /* its namespace is gone */
	}
	json_decref(after);
	return rc;
}

/* Targets of a Bundle that no longer exists: deleted, as the garbage
 * collector would (a cluster without one, or a Bundle deleted with
 * orphaning, would otherwise keep serving a bundle nobody maintains). */
int trust_orphans(sg_trust *t, sg_ctrl *c, const char *bname, bool *deferred)
{
	int rc = SG_OK;
	for (int kind = 0; kind < (t->secrets ? 2 : 1); kind++) {
		json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, kind ? W_TGT_SECRET : W_TGT_CM));
		SG_ENSURE(all, SG_EINTERNAL, "trust: out of memory");
		size_t i;
		json_t *obj;
		json_array_foreach(all, i, obj)
		{
			/* Only the Bundle's own target: the object of its name
			 * (another object naming the Bundle as controller is not
			 * ours to delete, and its ref would name the target). */
			const char *ns = sg_kube_meta_str(obj, "namespace"), *name = sg_kube_meta_str(obj, "name");
			if (rc < 0 || !ns || !name || strcmp(name, bname) != 0 ||
			    !trust_controlled_by_bundle_named(obj, bname))
				continue;
			if (trust_pending_stale(t, kind, ns, bname, obj)) {
				*deferred = true; /* deleted already; the cache is behind */
				continue;
			}
			if (sg_ctrl_stopping(c)) {
				rc = sg_error_set(SG_EBUSY, "trust: stopping");
				continue;
			}
			sg_kube_ref ref = trust_target_ref(kind, ns, bname);
			if ((rc = delete_target(t, &ref, obj, false)) == SG_OK)
				pending_note(t, kind, ns, bname, obj, NULL, true);
			if (sg_kube_conflict(rc)) {
				*deferred = true; /* a newer object: the cache is behind */
				rc = SG_OK;
			}
		}
		json_decref(all);
	}
	return rc;
}

/* ---- status ---- */

int trust_set_status(sg_trust *t, sg_ctrl *c, const json_t *bundle, bool ok, const char *reason, const char *msg,
                     const char *default_id)
{
	atomic_fetch_add(ok ? &t->synced : &t->not_synced, 1);
	json_t *intent = json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "conditions", "type", "Synced", "status",
	                           ok ? "True" : "False", "reason", reason, "message", msg);
	SG_ENSURE(intent, SG_EINTERNAL, "trust: out of memory");
	if (default_id && json_object_set_new(intent, "defaultCAVersion", json_string(default_id)) != 0) {
		json_decref(intent);
		SG_BAIL(SG_EINTERNAL, "trust: out of memory");
	}
	sg_kube_ref ref = {.group = SG_TRUST_GROUP,
	                   .version = SG_TRUST_VERSION,
	                   .resource = SG_TRUST_RESOURCE,
	                   .name = sg_kube_meta_str(bundle, "name")};
	/* The status is compared with the cached Bundle; a pass that runs
	 * before the cache shows our last status write would write the same
	 * status again. As for targets ("own writes"): while the cache shows
	 * the version that write acted on and the intent is the same, its echo
	 * is on the way. */
	char key[SG_KUBE_NAME_MAX + 3];
	snprintf(key, sizeof(key), "b/%s", ref.name ? ref.name : "");
	char *said = json_dumps(intent, JSON_COMPACT | JSON_SORT_KEYS);
	const char *rv = rv_or_empty(bundle);
	bool echo_due = false;
	pthread_mutex_lock(&t->pending_mu);
	json_t *rec = json_object_get(t->pending, key);
	const char *rec_rv = json_string_value(json_object_get(rec, "rv"));
	const char *rec_said = json_string_value(json_object_get(rec, "said"));
	uint64_t at = (uint64_t)json_integer_value(json_object_get(rec, "at"));
	if (rec_rv && strcmp(rec_rv, rv) == 0 && mono_ms() - at < PENDING_MAX_MS)
		echo_due = said && rec_said && strcmp(said, rec_said) == 0;
	else if (rec)
		json_object_del(t->pending, key);
	pthread_mutex_unlock(&t->pending_mu);
	bool written = false;
	int rc = SG_OK;
	if (sg_ctrl_stopping(c))
		rc = sg_error_set(SG_EBUSY, "trust: stopping");
	else if (!echo_due)
		rc = sg_ctrl_apply_status(c, &ref, SG_TRUST_KIND, bundle, intent, &written);
	json_decref(intent);
	if (written && rc == SG_OK && said) {
		json_t *note = json_pack("{s:s, s:s, s:I}", "rv", rv, "said", said, "at", (json_int_t)mono_ms());
		pthread_mutex_lock(&t->pending_mu);
		if (note)
			json_object_set_new(t->pending, key, note);
		pthread_mutex_unlock(&t->pending_mu);
	}
	free(said);
	if (written) {
		atomic_fetch_add(&t->status_writes, 1);
		sg_ctrl_event(c, bundle, ok ? "Normal" : "Warning", reason, "%s", msg);
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, "trust: bundle status", SG_F_STR("bundle", ref.name),
		       SG_F_STR("reason", reason), SG_F_STR("message", msg), SG_F_END);
	}
	return rc;
}
