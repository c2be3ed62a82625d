/*
 * The operator's shared mechanics (contract: sg_opr.h).
 *
 * Writes are the scarce thing here: an operator that re-applies every
 * object on every pass keeps the API server busy and its audit log full,
 * and one that writes on its own watch events can loop. So an object is
 * applied only when the cached live object does not hold it
 * (sg_ctrl_apply_owned), and every write is counted so the tests and the
 * benchmark can show a quiet cluster gets none.
 */
#include "sg_opr.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_metrics.h"

#include <stdio.h>
#include <string.h>

json_t *sg_opr_labels(const json_t *user, const char *app, const char *version, const char *owner)
{
	json_t *l = json_object();
	if (!l)
		return NULL;
	if (json_is_object(user) && json_object_update(l, (json_t *)user) != 0)
		goto fail;
	/* The defaults override the user's: they are what the Services'
	 * selectors and the NetworkPolicies' podSelectors match. */
	if (json_object_set_new(l, "app", json_string(app)) != 0 ||
	    json_object_set_new(l, "app.kubernetes.io/name", json_string(app)) != 0 ||
	    json_object_set_new(l, "app.kubernetes.io/instance", json_string(app)) != 0 ||
	    json_object_set_new(l, "app.kubernetes.io/version", json_string(version)) != 0 ||
	    json_object_set_new(l, "app.kubernetes.io/managed-by", json_string(SG_OPR_MANAGED_BY)) != 0 ||
	    json_object_set_new(l, "app.kubernetes.io/part-of", json_string(SG_OPR_PART_OF)) != 0 ||
	    json_object_set_new(l, SG_OPR_OWNER_LABEL, json_string(owner)) != 0)
		goto fail;
	return l;
fail:
	json_decref(l);
	return NULL;
}

json_t *sg_opr_owner_ref(const json_t *cr, const char *kind)
{
	const json_t *md = json_object_get(cr, "metadata");
	return json_pack("[{s:s, s:s, s:s, s:s, s:b, s:b}]", "apiVersion", SG_OPR_GROUP "/" SG_OPR_VERSION, "kind", kind,
	                 "name", json_string_value(json_object_get(md, "name")), "uid",
	                 json_string_value(json_object_get(md, "uid")), "controller", 1, "blockOwnerDeletion", 1);
}

static const char *name_of(const json_t *o)
{
	const char *n = json_string_value(json_object_get(json_object_get(o, "metadata"), "name"));
	return n ? n : "?";
}

/* Whether live's RBAC rules differ from body's. sg_ctrl_object_holds
 * lets a list item hold members the apply did not name (server defaults,
 * as in a container), so a member dropped from a rule (resourceNames, when
 * Secret targets widen to every name) would read as held. A PolicyRule
 * has no server defaults: rules compare exactly. */
static bool rules_differ(const json_t *body, const json_t *live)
{
	const json_t *want = json_object_get(body, "rules");
	return live && want && !json_equal(want, json_object_get(live, "rules"));
}

static void apply_failed(sg_ctrl *c, const json_t *cr, const sg_kube_ref *ref, const char *what)
{
	sg_error e;
	sg_error_save(&e);
	sg_ctrl_event(c, cr, "Warning", "ApplyFailed", "%s %s%s%s: %s", what, ref->ns ? ref->ns : "",
	              ref->ns ? "/" : "", ref->name, e.msg);
	sg_error_restore(&e);
}

/* A write made: counted, an Event about cr and a log line. */
static void applied(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                    bool existed)
{
	atomic_fetch_add(&st->writes, 1);
	atomic_fetch_add(existed ? &st->repaired : &st->created, 1);
	sg_ctrl_event(c, cr, "Normal", existed ? "Applied" : "Created", "%s %s%s%s %s", what, ref->ns ? ref->ns : "",
	              ref->ns ? "/" : "", ref->name, existed ? "reconciled back to the desired state" : "created");
	sg_log(SG_LOG_INFO, existed ? "object repaired" : "object created", SG_F_STR("controller", sg_ctrl_name(c)),
	       SG_F_STR("kind", what), SG_F_STR("namespace", ref->ns ? ref->ns : ""), SG_F_STR("name", ref->name),
	       SG_F_END);
}

int sg_opr_apply(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                 const json_t *body, const json_t *live)
{
	if (sg_ctrl_stopping(c))
		return sg_error_set(SG_EBUSY, "stopping");
	bool written = false;
	bool rbac = ref->group && strcmp(ref->group, "rbac.authorization.k8s.io") == 0 &&
	            (strcmp(ref->resource, "roles") == 0 || strcmp(ref->resource, "clusterroles") == 0);
	int rc;
	if (rbac && rules_differ(body, live)) {
		rc = sg_ctrl_apply(c, ref, body, NULL);
		written = rc == SG_OK;
	} else {
		rc = sg_ctrl_apply_owned(c, ref, body, live, NULL, &written);
	}
	if (rc < 0) {
		apply_failed(c, cr, ref, what);
		return rc;
	}
	if (written)
		applied(c, st, cr, ref, what, live != NULL);
	return SG_OK;
}

int sg_opr_apply_exact(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                       const json_t *body, const char *rv)
{
	if (sg_ctrl_stopping(c))
		return sg_error_set(SG_EBUSY, "stopping");
	int rc;
	if (!rv) {
		sg_kube_ref coll = *ref;
		coll.name = NULL;
		/* Created as our apply would have: a field dropped from a later
		 * intent (a label no longer configured) is then removed. */
		rc = sg_kube_create_applied(sg_ctrl_kube(c), &coll, body, sg_ctrl_field_manager(c), NULL);
	} else {
		json_t *exact = json_deep_copy(body);
		json_t *md = json_object_get(exact, "metadata");
		rc = md && json_object_set_new(md, "resourceVersion", json_string(rv)) == 0
		         ? sg_ctrl_apply(c, ref, exact, NULL)
		         : sg_error_set(SG_EINTERNAL, "operator: out of memory");
		sg_kube_secret_wipe(exact); /* a copy of a Secret's data */
		json_decref(exact);
	}
	if (sg_kube_conflict(rc)) {
		/* Not a failure: what we decided on is gone. */
		sg_log(SG_LOG_INFO, "object written since it was read: decided again on the new copy",
		       SG_F_STR("controller", sg_ctrl_name(c)), SG_F_STR("kind", what),
		       SG_F_STR("namespace", ref->ns ? ref->ns : ""), SG_F_STR("name", ref->name), SG_F_END);
		return rc;
	}
	if (rc < 0) {
		apply_failed(c, cr, ref, what);
		return rc;
	}
	applied(c, st, cr, ref, what, rv != NULL);
	return SG_OK;
}

int sg_opr_delete_uid(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                      const char *uid)
{
	if (sg_ctrl_stopping(c))
		return sg_error_set(SG_EBUSY, "stopping");
	int rc = sg_kube_delete_seen(sg_ctrl_kube(c), ref, uid, NULL);
	if (rc == SG_ENOTFOUND)
		return SG_OK;
	atomic_fetch_add(&st->writes, 1);
	if (uid && *uid && sg_kube_conflict(rc)) {
		/* The name is another object's now (a handover: the next
		 * IstioCSR made its own since our copy was read): not ours to
		 * delete. */
		sg_log(SG_LOG_INFO, "object not deleted: the name now belongs to another object",
		       SG_F_STR("controller", sg_ctrl_name(c)), SG_F_STR("kind", what),
		       SG_F_STR("namespace", ref->ns ? ref->ns : ""), SG_F_STR("name", ref->name), SG_F_STR("uid", uid),
		       SG_F_END);
		return SG_OK;
	}
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_ctrl_event(c, cr, "Warning", "DeleteFailed", "%s %s%s%s: %s", what, ref->ns ? ref->ns : "",
		              ref->ns ? "/" : "", ref->name, e.msg);
		sg_error_restore(&e);
		return rc;
	}
	atomic_fetch_add(&st->deleted, 1);
	sg_ctrl_event(c, cr, "Normal", "Deleted", "%s %s%s%s deleted", what, ref->ns ? ref->ns : "", ref->ns ? "/" : "",
	              ref->name);
	return SG_OK;
}

int sg_opr_delete_owned(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, sg_kube_informer *inf,
                        const sg_kube_ref *ref, const char *owner, const char *const *keep, size_t nkeep, size_t *n)
{
	if (n)
		*n = 0;
	json_t *all = sg_kube_informer_list(inf);
	SG_ENSURE(all, SG_EINTERNAL, "out of memory");
	int rc = SG_OK;
	size_t i;
	json_t *o;
	json_array_foreach(all, i, o)
	{
		const json_t *md = json_object_get(o, "metadata");
		const char *mine = json_string_value(json_object_get(json_object_get(md, "labels"), SG_OPR_OWNER_LABEL));
		if (!mine || strcmp(mine, owner) != 0)
			continue;
		char key[SG_CTRL_KEY_MAX];
		if (!sg_ctrl_key_of(o, key))
			continue;
		bool kept = false;
		for (size_t k = 0; k < nkeep && !kept; k++)
			kept = keep[k] && strcmp(keep[k], key) == 0;
		if (kept)
			continue;
		sg_kube_ref r = *ref;
		r.ns = json_string_value(json_object_get(md, "namespace"));
		r.name = json_string_value(json_object_get(md, "name"));
		/* The uid of the copy that carries our label: the cache may be
		 * behind an object another owner made under the same name. */
		const char *uid = json_string_value(json_object_get(md, "uid"));
		if ((rc = sg_opr_delete_uid(c, st, cr, &r, ref->resource, uid)) < 0)
			break;
		if (n)
			(*n)++;
	}
	json_decref(all);
	return rc;
}

bool sg_opr_has_finalizer(const json_t *cr, const char *finalizer)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(json_object_get(cr, "metadata"), "finalizers"), i, f)
	{
		if (json_is_string(f) && strcmp(json_string_value(f), finalizer) == 0)
			return true;
	}
	return false;
}

int sg_opr_set_finalizer(sg_ctrl *c, sg_opr_stats *st, const sg_kube_ref *ref, const json_t *cr,
                         const char *finalizer, bool add, const json_t *extra_annotations)
{
	if (sg_ctrl_stopping(c))
		return sg_error_set(SG_EBUSY, "stopping");
	const json_t *md = json_object_get(cr, "metadata");
	json_t *list = json_array();
	SG_ENSURE(list, SG_EINTERNAL, "out of memory");
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(md, "finalizers"), i, f)
	{
		if (json_is_string(f) && strcmp(json_string_value(f), finalizer) != 0)
			json_array_append(list, f);
	}
	if (add)
		json_array_append_new(list, json_string(finalizer));
	/* A merge patch replaces the list whole, so it names the version it
	 * was computed from: another finalizer added meanwhile makes this
	 * one fail with a conflict instead of being lost. */
	json_t *patch = json_pack("{s:{s:O, s:o}}", "metadata", "resourceVersion",
	                          json_object_get(md, "resourceVersion"), "finalizers", list);
	SG_ENSURE(patch, SG_EINTERNAL, "out of memory");
	if (extra_annotations)
		json_object_set(json_object_get(patch, "metadata"), "annotations", (json_t *)extra_annotations);
	int rc = sg_kube_merge_patch(sg_ctrl_kube(c), ref, patch, NULL);
	json_decref(patch);
	atomic_fetch_add(&st->writes, 1);
	return rc == SG_ENOTFOUND && !add ? SG_OK : rc;
}

/* ---- the operand ---- */

static int64_t int_at(const json_t *o, const char *a, const char *b)
{
	const json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* The first failure a pod's containers report, as the kubelet writes it:
 * waiting with a reason other than ContainerCreating/PodInitializing, or
 * terminated with a non-zero exit code. */
static bool pod_failure(const json_t *pod, char *msg, size_t cap)
{
	const json_t *statuses = json_object_get(json_object_get(pod, "status"), "containerStatuses");
	size_t i;
	json_t *cs;
	json_array_foreach(statuses, i, cs)
	{
		const char *cname = json_string_value(json_object_get(cs, "name"));
		const json_t *state = json_object_get(cs, "state");
		const json_t *w = json_object_get(state, "waiting"), *t = json_object_get(state, "terminated");
		const json_t *last = json_object_get(json_object_get(cs, "lastState"), "terminated");
		const char *reason = NULL, *detail = NULL;
		if (w) {
			reason = json_string_value(json_object_get(w, "reason"));
			if (reason && (strcmp(reason, "ContainerCreating") == 0 || strcmp(reason, "PodInitializing") == 0))
				reason = NULL;
			detail = json_string_value(json_object_get(w, "message"));
			/* A crash loop's own cause is in the last termination. */
			if (reason && last && json_string_value(json_object_get(last, "message")))
				detail = json_string_value(json_object_get(last, "message"));
		} else if (t && int_at(t, "exitCode", NULL) != 0) {
			reason = json_string_value(json_object_get(t, "reason"));
			detail = json_string_value(json_object_get(t, "message"));
			if (!reason)
				reason = "Error";
		}
		if (!reason)
			continue;
		int n = snprintf(msg, cap, "pod %s: container %s: %s%s", name_of(pod), cname ? cname : "?", reason,
		                 detail ? ": " : "");
		if (n < 0 || (size_t)n >= cap || !detail)
			return true;
		/* A crash's cause is at the end of its log tail: when the detail
		 * does not fit, keep its end, from a line start. */
		size_t room = cap - (size_t)n - 1, len = strlen(detail);
		const char *from = detail;
		if (len > room) {
			static const char cut[] = "...";
			room = room > sizeof(cut) - 1 ? room - (sizeof(cut) - 1) : 0;
			from = detail + len - room;
			const char *nl = strchr(from, '\n');
			if (nl && nl[1])
				from = nl + 1;
			strcat(msg, cut);
		}
		strncat(msg, from, cap - strlen(msg) - 1);
		return true;
	}
	return false;
}

sg_opr_operand sg_opr_operand_state(const json_t *d, const json_t *pods, char *msg, size_t cap)
{
	if (!d) {
		snprintf(msg, cap, "the Deployment is not created yet");
		return SG_OPR_OPERAND_PROGRESSING;
	}
	int64_t gen = int_at(d, "metadata", "generation"), seen = int_at(d, "status", "observedGeneration");
	int64_t want = json_is_integer(json_object_get(json_object_get(d, "spec"), "replicas"))
	                   ? int_at(d, "spec", "replicas")
	                   : 1;
	int64_t avail = int_at(d, "status", "availableReplicas"), updated = int_at(d, "status", "updatedReplicas");
	int64_t total = int_at(d, "status", "replicas");
	size_t i;
	json_t *p;
	json_array_foreach(pods, i, p)
	{
		/* A terminating pod is on its way out (a rollout's old one, a
		 * drained node's): its failure is not the operand's. Here, so
		 * that every reconciler's pods are judged alike. */
		if (json_object_get(json_object_get(p, "metadata"), "deletionTimestamp"))
			continue;
		if (pod_failure(p, msg, cap))
			return SG_OPR_OPERAND_FAILING;
	}
	if (seen < gen) {
		snprintf(msg, cap, "Deployment %s: generation %lld not yet observed by the deployment controller",
		         name_of(d), (long long)gen);
		return SG_OPR_OPERAND_PROGRESSING;
	}
	/* Deployment's own verdict: ProgressDeadlineExceeded. */
	const json_t *conds = json_object_get(json_object_get(d, "status"), "conditions");
	json_t *cond;
	json_array_foreach(conds, i, cond)
	{
		const char *type = json_string_value(json_object_get(cond, "type"));
		const char *reason = json_string_value(json_object_get(cond, "reason"));
		if (type && reason && strcmp(type, "Progressing") == 0 && strcmp(reason, "ProgressDeadlineExceeded") == 0) {
			const char *m = json_string_value(json_object_get(cond, "message"));
			snprintf(msg, cap, "Deployment %s: %s", name_of(d), m ? m : reason);
			return SG_OPR_OPERAND_FAILING;
		}
	}
	if (avail >= want && updated >= want && total <= want) {
		snprintf(msg, cap, "%lld of %lld replicas available", (long long)avail, (long long)want);
		return SG_OPR_OPERAND_AVAILABLE;
	}
	snprintf(msg, cap, "rolling out: %lld of %lld replicas updated, %lld available", (long long)updated,
	         (long long)want, (long long)avail);
	return SG_OPR_OPERAND_PROGRESSING;
}

json_t *sg_opr_conditions(const char *failed, const char *reason_failed, sg_opr_operand st, const char *operand_msg,
                          int64_t generation)
{
	/* Each condition says the situation in words, never an empty message:
	 * a reader of any one of them learns why. */
	const char *msg = failed ? failed : operand_msg && *operand_msg ? operand_msg : "no detail";
	const char *ready = "False", *prog = "False", *deg = "False";
	const char *ready_reason, *prog_reason, *deg_reason = "Ready";
	if (failed) {
		ready_reason = prog_reason = deg_reason = reason_failed;
		deg = "True";
	} else if (st == SG_OPR_OPERAND_AVAILABLE) {
		ready = "True";
		ready_reason = prog_reason = "Ready";
	} else if (st == SG_OPR_OPERAND_PROGRESSING) {
		ready_reason = prog_reason = "Progressing";
		prog = "True";
	} else {
		ready_reason = prog_reason = deg_reason = "OperandFailed";
		deg = "True";
	}
	return json_pack("[{s:s,s:s,s:s,s:s,s:I},{s:s,s:s,s:s,s:s,s:I},{s:s,s:s,s:s,s:s,s:I}]", "type", "Ready",
	                 "status", ready, "reason", ready_reason, "message", msg, "observedGeneration",
	                 (json_int_t)generation, "type", "Progressing", "status", prog, "reason", prog_reason, "message",
	                 msg, "observedGeneration", (json_int_t)generation, "type", "Degraded", "status", deg, "reason",
	                 deg_reason, "message", msg, "observedGeneration", (json_int_t)generation);
}

int sg_opr_status(sg_ctrl *c, sg_opr_stats *st, const sg_kube_ref *ref, const char *kind, const json_t *cr,
                  const json_t *status, bool *written)
{
	bool w = false;
	if (written)
		*written = false;
	if (sg_ctrl_stopping(c))
		return sg_error_set(SG_EBUSY, "stopping");
	int rc = sg_ctrl_apply_status(c, ref, kind, cr, status, &w);
	if (w)
		atomic_fetch_add(&st->writes, 1);
	if (written)
		*written = w;
	return rc;
}

/* ---- metrics ---- */

/* The counters at one moment, for the registry's stats table. */
typedef struct counts {
	uint64_t writes, created, repaired, deleted;
} counts;

static void counts_of(void *arg, void *out)
{
	const sg_opr_stats *st = arg;
	*(counts *)out = (counts){atomic_load(&st->writes), atomic_load(&st->created), atomic_load(&st->repaired),
	                          atomic_load(&st->deleted)};
}

int sg_opr_metrics(sg_opr_stats *st, const char *name, sg_metrics *reg)
{
	static const struct {
		size_t offset;
		const char *suffix, *help;
	} fields[] = {
	    {offsetof(counts, writes), "writes_total",
	     "API writes (applies, patches, deletes) made by the operator for this kind."},
	    {offsetof(counts, created), "created_total", "Managed objects created."},
	    {offsetof(counts, repaired), "repaired_total",
	     "Managed objects that existed and were applied again (drift or a spec change)."},
	    {offsetof(counts, deleted), "deleted_total", "Managed objects deleted."},
	};
	enum { N = sizeof(fields) / sizeof(fields[0]) };
	char names[N][128];
	sg_metrics_stat rows[N];
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "signet_operator_%s_%s", name, fields[i].suffix);
		rows[i] = (sg_metrics_stat){names[i], fields[i].help, false, fields[i].offset, sizeof(uint64_t)};
	}
	return sg_metrics_stats(reg, rows, N, counts_of, sizeof(counts), st); /* names are copied */
}
