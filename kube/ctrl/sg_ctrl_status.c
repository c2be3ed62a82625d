/*
 * What a reconcile function writes besides its objects (contract:
 * sg_ctrl.h): metav1.Conditions and server-side apply. (Events are in
 * sg_ctrl.c: typing an informer object for one needs the watches.)
 *
 * Conditions follow apimachinery's meta.SetStatusCondition: a condition is
 * identified by its type; lastTransitionTime moves only when the status
 * does, so a controller that re-asserts "Ready=True" on every pass does not
 * make the condition look new. Status is written only when the apply
 * would change something, so a reconcile that finds nothing to do makes
 * no request and no watch event, and cannot loop on its own writes. The
 * test follows the apply's merge: a wanted field must hold its value
 * (objects compared member by member and the conditions by type, so what
 * other managers set beside ours does not count), and a field our manager
 * applied before (metadata.managedFields) must still be wanted, or the
 * apply would remove it.
 *
 * Server-side apply with one field manager per controller
 * ("signet-<name>") and force: a controller's fields are its own, and the
 * API server tells apart what a user or another controller set.
 */
#include "sg_clock.h"
#include "sg_ctrl.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define REASON_MAX 1024
#define MESSAGE_MAX 32768

int sg_ctrl_apply(sg_ctrl *c, const sg_kube_ref *ref, const json_t *body, json_t **out)
{
	return sg_kube_apply(sg_ctrl_kube(c), ref, body, sg_ctrl_field_manager(c), true, out);
}

/* ---- conditions ---- */

static void rfc3339(int64_t t, char out[32])
{
	if (!sg_clock_rfc3339(out, 32, t))
		snprintf(out, 32, "1970-01-01T00:00:00Z");
}

static bool condition_ok(const sg_ctrl_condition *c)
{
	bool status = c->status && (strcmp(c->status, "True") == 0 || strcmp(c->status, "False") == 0 ||
	                            strcmp(c->status, "Unknown") == 0);
	size_t rl = c->reason ? strlen(c->reason) : 0;
	return c->type && *c->type && strlen(c->type) <= 316 && status && rl >= 1 && rl <= REASON_MAX &&
	       (!c->message || strlen(c->message) <= MESSAGE_MAX) && c->observed_generation >= 0;
}

static json_t *find_in(const json_t *conditions, const char *type)
{
	size_t i;
	json_t *v;
	json_array_foreach(conditions, i, v)
	{
		const char *t = json_string_value(json_object_get(v, "type"));
		if (t && strcmp(t, type) == 0)
			return v;
	}
	return NULL;
}

/* Sets member k of o to v (consumed) when it differs; true when it did. */
static bool put(json_t *o, const char *k, json_t *v)
{
	if (!v)
		return false;
	if (json_equal(json_object_get(o, k), v)) {
		json_decref(v);
		return false;
	}
	return json_object_set_new(o, k, v) == 0;
}

bool sg_ctrl_condition_set(json_t *conditions, const sg_ctrl_condition *cond, int64_t now)
{
	if (!json_is_array(conditions) || !cond || !condition_ok(cond)) {
		sg_log(SG_LOG_ERROR, "controller: refusing a malformed condition",
		       SG_F_STR("type", cond && cond->type ? cond->type : ""), SG_F_END);
		return false;
	}
	char when[32];
	rfc3339(now, when);
	json_t *c = find_in(conditions, cond->type);
	bool changed = false;
	if (!c) {
		c = json_pack("{s:s}", "type", cond->type);
		if (!c || json_array_append_new(conditions, c) != 0)
			return false;
		changed = true;
	}
	const char *was = json_string_value(json_object_get(c, "status"));
	if (!was || strcmp(was, cond->status) != 0 || !json_is_string(json_object_get(c, "lastTransitionTime")))
		changed |= put(c, "lastTransitionTime", json_string(when));
	changed |= put(c, "status", json_string(cond->status));
	changed |= put(c, "reason", json_string(cond->reason));
	changed |= put(c, "message", json_string(cond->message ? cond->message : ""));
	if (cond->observed_generation > 0)
		changed |= put(c, "observedGeneration", json_integer(cond->observed_generation));
	return changed;
}

const json_t *sg_ctrl_condition_find(const json_t *obj, const char *type)
{
	return find_in(json_object_get(json_object_get(obj, "status"), "conditions"), type);
}

/* ---- status by server-side apply ---- */

/* The intent's conditions completed from the object's: observedGeneration
 * defaults to the generation, lastTransitionTime survives an unchanged
 * status. Each condition is the intent whole: members of the live one that
 * the intent does not set are dropped. */
static int complete_conditions(json_t *want, const json_t *obj, int64_t now)
{
	json_t *conds = json_object_get(want, "conditions");
	if (!conds)
		return SG_OK;
	SG_ENSURE(json_is_array(conds), SG_EINVAL, "status.conditions must be an array");
	const json_t *have = json_object_get(json_object_get(obj, "status"), "conditions");
	json_int_t gen = json_integer_value(json_object_get(json_object_get(obj, "metadata"), "generation"));
	char when[32];
	rfc3339(now, when);
	json_t *fixed = json_array();
	SG_ENSURE(fixed, SG_EINTERNAL, "out of memory");
	size_t i;
	json_t *w;
	json_array_foreach(conds, i, w)
	{
		const json_t *ogv = json_object_get(w, "observedGeneration");
		json_int_t og = json_is_null(ogv) ? -1 : json_integer_value(ogv);
		sg_ctrl_condition c = {
			.type = json_string_value(json_object_get(w, "type")),
			.status = json_string_value(json_object_get(w, "status")),
			.reason = json_string_value(json_object_get(w, "reason")),
			.message = json_string_value(json_object_get(w, "message")),
			.observed_generation = og > 0 ? og : og < 0 ? 0 : gen,
		};
		if (!condition_ok(&c) || find_in(fixed, c.type)) {
			json_decref(fixed);
			SG_BAIL(SG_EINVAL, "status.conditions[%zu] is malformed or repeats a type", i);
		}
		const json_t *prev = find_in(have, c.type);
		const char *prev_status = json_string_value(json_object_get(prev, "status"));
		json_t *prev_time = json_object_get(prev, "lastTransitionTime");
		bool same = prev_status && strcmp(prev_status, c.status) == 0 && json_is_string(prev_time);
		json_t *t = same ? json_incref(prev_time) : json_string(when);
		/* "o" takes t, also when json_pack fails */
		json_t *n = json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", c.type, "status", c.status, "reason", c.reason,
		                      "message", c.message ? c.message : "", "lastTransitionTime", t);
		if (!n || (c.observed_generation > 0 &&
		           json_object_set_new(n, "observedGeneration", json_integer(c.observed_generation)) != 0) ||
		    json_array_append_new(fixed, n) != 0) {
			json_decref(fixed);
			SG_BAIL(SG_EINTERNAL, "out of memory");
		}
	}
	if (json_object_set_new(want, "conditions", fixed) != 0)
		SG_BAIL(SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* Whether want holds in have the way an apply merges it: objects member
 * by member (fields of other managers beside ours do not count), scalars
 * equal. Arrays: equal (status: atomic unless they are the conditions),
 * or with by_item (objects) as many items as have, each holding in the
 * live item at its place: items keep their order on the server, and what
 * the server defaults inside an item (a container's imagePullPolicy, a
 * port's protocol) is an extra member, which does not count. */
static bool holds(const json_t *want, const json_t *have, bool by_item)
{
	if (by_item && json_is_array(want)) {
		if (!json_is_array(have) || json_array_size(want) != json_array_size(have))
			return false;
		size_t i;
		json_t *w;
		json_array_foreach(want, i, w)
		{
			if (!holds(w, json_array_get(have, i), true))
				return false;
		}
		return true;
	}
	if (!json_is_object(want))
		return json_equal(want, have);
	if (!json_is_object(have))
		return false;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)want, k, v)
	{
		if (!holds(v, json_object_get(have, k), by_item))
			return false;
	}
	return true;
}

/* Whether managedFields entry m is an apply by this controller's manager
 * (of the main resource when main_only). */
static bool our_apply(sg_ctrl *c, const json_t *m, bool main_only)
{
	const char *who = json_string_value(json_object_get(m, "manager"));
	const char *op = json_string_value(json_object_get(m, "operation"));
	const char *sub = json_string_value(json_object_get(m, "subresource"));
	return who && op && strcmp(who, sg_ctrl_field_manager(c)) == 0 && strcmp(op, "Apply") == 0 &&
	       !(main_only && sub && *sub);
}

/* The conditions by type: each wanted one holds in the live one of its
 * type; conditions of other types are another manager's business here
 * (those that were ours are caught by dropped()). */
static bool conditions_hold(const json_t *want, const json_t *have)
{
	size_t i;
	json_t *w;
	json_array_foreach(want, i, w)
	{
		const json_t *h = find_in(have, json_string_value(json_object_get(w, "type")));
		if (!h || !holds(w, h, false))
			return false;
	}
	return true;
}

/* have may be NULL (no status yet). */
static bool status_holds(const json_t *want, const json_t *have)
{
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)want, k, v)
	{
		const json_t *h = json_object_get(have, k);
		if (strcmp(k, "conditions") == 0 ? !conditions_hold(v, h) : !holds(v, h, false))
			return false;
	}
	return true;
}

/* Whether a condition that fs (our fieldsV1 set of status.conditions)
 * says we applied is no longer wanted. Keyed items ("k:{"type":"X"}")
 * mean a list-map; none means an atomic list, ours whole, which must
 * then read exactly as want. */
static bool conditions_dropped(const json_t *fs, const json_t *want, const json_t *have)
{
	bool keyed = false;
	const char *k;
	json_t *sub;
	json_object_foreach((json_t *)fs, k, sub)
	{
		if (strncmp(k, "k:", 2) != 0)
			continue;
		keyed = true;
		json_t *key = json_loads(k + 2, 0, NULL);
		const char *type = json_string_value(json_object_get(key, "type"));
		bool gone = type && !find_in(want, type);
		json_decref(key);
		if (gone)
			return true;
	}
	return !keyed && !json_equal(want, have);
}

/* Whether a field that fs (a fieldsV1 set: "f:<member>" entries) says we
 * applied is missing from want: an apply without it removes it, so that
 * is a change to write. */
static bool dropped(const json_t *fs, const json_t *want, const json_t *have, bool top)
{
	const char *k;
	json_t *sub;
	json_object_foreach((json_t *)fs, k, sub)
	{
		if (strncmp(k, "f:", 2) != 0)
			continue;
		const json_t *w = json_object_get(want, k + 2), *h = json_object_get(have, k + 2);
		if (!w)
			return true;
		if (top && strcmp(k + 2, "conditions") == 0 && json_is_array(w)) {
			if (conditions_dropped(sub, w, h))
				return true;
		} else if (json_is_object(w) && dropped(sub, w, h, false)) {
			return true;
		}
	}
	return false;
}

/* Whether the status apply of want would change nothing in obj: every
 * wanted field holds, and every status field our field manager applied
 * before is still wanted (managedFields; without them, the first test
 * alone). */
static bool nothing_to_write(sg_ctrl *c, const json_t *want, const json_t *obj)
{
	const json_t *have = json_object_get(obj, "status");
	if (!status_holds(want, have))
		return false;
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "managedFields"), i, m)
	{
		const json_t *fs = json_object_get(json_object_get(m, "fieldsV1"), "f:status");
		if (fs && our_apply(c, m, false) && dropped(fs, want, have, true))
			return false;
	}
	return true;
}

/* ---- objects ---- */

bool sg_ctrl_object_holds(sg_ctrl *c, const json_t *want, const json_t *live)
{
	if (!json_is_object(live))
		return false;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)want, k, v)
	{
		if (strcmp(k, "apiVersion") == 0 || strcmp(k, "kind") == 0)
			continue;
		if (!holds(v, json_object_get(live, k), true))
			return false;
	}
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(json_object_get(live, "metadata"), "managedFields"), i, m)
	{
		const json_t *fs = json_object_get(m, "fieldsV1");
		if (!fs || !our_apply(c, m, true))
			continue;
		const char *f;
		json_t *fv;
		json_object_foreach((json_t *)fs, f, fv)
		{
			if (strncmp(f, "f:", 2) != 0 || strcmp(f, "f:status") == 0)
				continue;
			const json_t *w = json_object_get(want, f + 2);
			/* Lists are left to holds(): a removed item changes the
			 * list's length or an item. */
			if (!w || (json_is_object(w) && dropped(fv, w, NULL, false)))
				return false;
		}
	}
	return true;
}

int sg_ctrl_apply_owned(sg_ctrl *c, const sg_kube_ref *ref, const json_t *body, const json_t *live, json_t **out,
                        bool *written)
{
	if (written)
		*written = false;
	if (out)
		*out = NULL;
	if (live && sg_ctrl_object_holds(c, body, live))
		return SG_OK;
	SG_TRY(sg_ctrl_apply(c, ref, body, out));
	if (written)
		*written = true;
	return SG_OK;
}

static char *api_version(const sg_kube_ref *ref, char *buf, size_t cap)
{
	if (ref->group && *ref->group)
		snprintf(buf, cap, "%s/%s", ref->group, ref->version);
	else
		snprintf(buf, cap, "%s", ref->version);
	return buf;
}

/* exact: the apply names obj's resourceVersion, so the API server refuses
 * it (409) when the object changed after obj was read. */
static int apply_status(sg_ctrl *c, const sg_kube_ref *ref, const char *kind, const json_t *obj, const json_t *status,
                        bool exact, bool *written)
{
	if (written)
		*written = false;
	SG_ENSURE(ref && ref->version && ref->name && kind && json_is_object(status), SG_EINVAL,
	          "status apply: needs a named object, its kind and a status object");
	const char *rv = exact ? sg_kube_meta_str(obj, "resourceVersion") : NULL;
	SG_ENSURE(!exact || (rv && *rv), SG_EINVAL, "status apply: the object read has no resourceVersion");
	json_t *want = json_deep_copy(status);
	SG_ENSURE(want, SG_EINTERNAL, "out of memory");
	int rc = complete_conditions(want, obj, time(NULL));
	if (rc < 0 || nothing_to_write(c, want, obj)) {
		json_decref(want);
		return rc;
	}
	char av[300];
	/* "o" consumes want, also when json_pack fails; "s*" leaves out a
	 * NULL namespace or resourceVersion. */
	json_t *body =
	    json_pack("{s:s, s:s, s:{s:s, s:s*, s:s*}, s:o}", "apiVersion", api_version(ref, av, sizeof(av)), "kind",
	              kind, "metadata", "name", ref->name, "namespace", ref->ns, "resourceVersion", rv, "status", want);
	if (!body)
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK) {
		sg_kube_ref sub = *ref;
		sub.subresource = "status";
		rc = sg_ctrl_apply(c, &sub, body, NULL);
		if (rc == SG_OK && written)
			*written = true;
	}
	json_decref(body);
	return rc;
}

int sg_ctrl_apply_status(sg_ctrl *c, const sg_kube_ref *ref, const char *kind, const json_t *obj, const json_t *status,
                         bool *written)
{
	return apply_status(c, ref, kind, obj, status, false, written);
}

int sg_ctrl_apply_status_exact(sg_ctrl *c, const sg_kube_ref *ref, const char *kind, const json_t *obj,
                               const json_t *status, bool *written)
{
	return apply_status(c, ref, kind, obj, status, true, written);
}
