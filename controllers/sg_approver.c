/*
 * The CertificateRequest policy approver (sg_approver.h) on the runtime.
 *
 * Everything is read from the informers' caches except three things: the
 * SubjectAccessReviews (cached by SHA-256 of who asks, which policy and
 * where, for sar_ttl seconds, under a generation that any RBAC event
 * bumps, so a new RoleBinding counts at once), a Namespace the cache does
 * not hold yet (read live: a gap must not read as "no labels"), and the
 * live read of a request just before its decision is written (a decision
 * is final; the PUT carries that read's resourceVersion, and it is written
 * only when the live request is the one evaluated: the same uid and
 * generation, not a request made since under the same name, as
 * cert-manager does when a Certificate is deleted and made again).
 *
 * A pass (review_run) is approver-policy's review with two changes that
 * keep a final decision from being wrong: a policy that applies but is not
 * Ready holds back a denial, and the first error ends the pass (retried)
 * instead of letting a later policy approve past it.
 *
 * Policies are compiled on every pass (sg_crpolicy_compile): a pass costs
 * a few microseconds per policy, and compiling from the cache's object
 * means a pass never evaluates a policy other than the one the cache holds.
 *
 * Why resync on every policy, Namespace and RBAC event: each can change
 * the answer for any undecided request, and the map functions may not read
 * the other informers; the runtime holds one pending resync however many
 * events ask for it, and the resync queues only undecided requests.
 */
#include "sg_approver.h"

#include "sg_cache.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_opt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define W_REQUESTS 0
#define W_POLICIES 1
#define W_NAMESPACES 2
#define W_RBAC_FIRST 3 /* roles, rolebindings, clusterroles, clusterrolebindings */
#define NWATCHES 7

#define POLICY_PREFIX "crp:"
#define SIGNER_NAMES_MAX 64
#define SIGNER_NAME_MAX 512
#define SAR_CACHE_ENTRIES 16384
#define TOLD_MAX 65536 /* requests remembered as told "Unprocessed" */
#define CONFLICT_RETRY_MS 200u
/* The API server answers SubjectAccessReviews from caches of its own,
 * which can trail the RBAC watch that told us of a change (seconds on a
 * loaded server): a review made at once may still give the old answer,
 * and a request left undecided by it would wait for the next event. So
 * an RBAC change is looked at twice: at once, and again once RBAC has
 * been quiet for RBAC_SETTLE_MS, with the cached answers dropped again. */
#define RBAC_SETTLE_KEY "rbac:settle" /* no request or policy key has this form */
#define RBAC_SETTLE_MS 3000u

/* One entry of sg_approver_options.signer_names: "<plural>.<group>" and
 * "*" or one issuer's "<namespace>.<name>" / "<name>". */
typedef struct signer_name {
	char resource[SIGNER_NAME_MAX];
	char name[SIGNER_NAME_MAX];
} signer_name;

struct sg_approver {
	sg_ctrl *ctrl;
	sg_kube *kube;
	sg_approver_plugin *plugins;
	const char **plugin_names;
	size_t nplugins;
	sg_approver_servers servers;
	int64_t sar_ttl;
	sg_cache *sar;
	signer_name *signers; /* NULL: every signer */
	size_t nsigners;
	_Atomic uint64_t rbac_gen;
	_Atomic uint64_t rbac_last_ns; /* monotonic time of the last RBAC event */

	/* uids of requests told "Unprocessed" (one Event each, not one per
	 * re-evaluation); emptied when full. */
	pthread_mutex_t told_mu;
	json_t *told;

	_Atomic uint64_t approved, denied, unprocessed, deferred, skipped, errors, conflicts, sar_requests, sar_cached,
	    policy_status_writes;
};

/* ---- which requests are still to decide ---- */

static bool has_condition(const json_t *obj, const char *type)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c)
	{
		const char *t = json_string_value(json_object_get(c, "type"));
		if (t && strcmp(t, type) == 0)
			return true;
	}
	return false;
}

static bool decided(const json_t *cr)
{
	return has_condition(cr, "Approved") || has_condition(cr, "Denied");
}

static void map_request(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	char key[SG_CTRL_KEY_MAX];
	if (!decided(obj) && sg_ctrl_key_of(obj, key))
		sg_ctrl_add(c, key);
}

static void map_policy(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *name = sg_kube_meta_str(obj, "name");
	char key[SG_CTRL_KEY_MAX];
	if (name && strlen(name) + sizeof(POLICY_PREFIX) <= sizeof(key)) {
		snprintf(key, sizeof(key), POLICY_PREFIX "%s", name);
		sg_ctrl_add(c, key);
	}
	sg_ctrl_resync(c);
}

static void map_namespace(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)obj, (void)arg;
	sg_ctrl_resync(c);
}

static void map_rbac(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)obj;
	sg_approver *a = arg;
	atomic_store(&a->rbac_last_ns, sg_now_ns());
	atomic_fetch_add(&a->rbac_gen, 1);
	sg_ctrl_resync(c);
	sg_ctrl_add_after(c, RBAC_SETTLE_KEY, RBAC_SETTLE_MS);
}

/* The second look at an RBAC change, once RBAC has been quiet for
 * RBAC_SETTLE_MS. */
static int rbac_settled(sg_approver *a, sg_ctrl *c, sg_ctrl_result *res)
{
	uint64_t quiet_ns = sg_now_ns() - atomic_load(&a->rbac_last_ns);
	if (quiet_ns < RBAC_SETTLE_MS * UINT64_C(1000000)) {
		res->requeue_after_ms = RBAC_SETTLE_MS - quiet_ns / 1000000u;
		return SG_OK;
	}
	atomic_fetch_add(&a->rbac_gen, 1);
	sg_ctrl_resync(c);
	return SG_OK;
}

static void resync(sg_ctrl *c, void *arg)
{
	(void)arg;
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, W_REQUESTS));
	size_t i;
	json_t *obj;
	json_array_foreach(all, i, obj)
		map_request(c, obj, NULL);
	json_decref(all);
	all = sg_kube_informer_list(sg_ctrl_informer(c, W_POLICIES));
	json_array_foreach(all, i, obj)
	{
		const char *name = sg_kube_meta_str(obj, "name");
		char key[SG_CTRL_KEY_MAX];
		if (name && strlen(name) + sizeof(POLICY_PREFIX) <= sizeof(key)) {
			snprintf(key, sizeof(key), POLICY_PREFIX "%s", name);
			sg_ctrl_add(c, key);
		}
	}
	json_decref(all);
}

/* ---- policies' Ready condition ---- */

static int compile(sg_approver *a, const json_t *obj, sg_crpolicy **out)
{
	sg_crpolicy_options po = {.plugins = a->plugin_names,
	                          .plugin_count = a->nplugins,
	                          .external_policy_servers = a->servers.evaluate != NULL};
	return sg_crpolicy_compile(out, obj, &po);
}

/* NULL when every plugin the (Ready) policy names accepts its values;
 * else why not, as the Ready condition's message (caller frees). */
static char *plugins_refuse(sg_approver *a, const sg_crpolicy *p)
{
	for (size_t i = 0; i < sg_crpolicy_plugin_count(p); i++) {
		const char *name = sg_crpolicy_plugin_name(p, i);
		for (size_t j = 0; j < a->nplugins; j++) {
			const sg_approver_plugin *pl = &a->plugins[j];
			char *why = NULL;
			if (strcmp(pl->name, name) != 0 || !pl->check ||
			    pl->check(pl->arg, sg_crpolicy_plugin_values(p, i), &why))
				continue;
			size_t n = strlen(SG_CRPOLICY_NOT_READY_PREFIX) + strlen(name) + (why ? strlen(why) : 0) + 40;
			char *msg = malloc(n);
			if (msg)
				snprintf(msg, n, "%sspec.plugins[%s]: %s", SG_CRPOLICY_NOT_READY_PREFIX, name,
				         why ? why : "values refused");
			free(why);
			return msg ? msg : strdup("CertificateRequestPolicy is not ready for approval evaluation");
		}
	}
	return NULL;
}

static int reconcile_policy(sg_approver *a, sg_ctrl *c, const char *name)
{
	json_t *obj = sg_kube_informer_get(sg_ctrl_informer(c, W_POLICIES), NULL, name);
	if (!obj)
		return SG_OK;
	sg_crpolicy *p = NULL;
	int rc = compile(a, obj, &p);
	if (rc == SG_OK) {
		char *refused = sg_crpolicy_ready(p) ? plugins_refuse(a, p) : NULL;
		bool ready = sg_crpolicy_ready(p) && !refused;
		const char *why = refused ? refused : sg_crpolicy_condition_message(p);
		json_t *want = json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "conditions", "type", "Ready", "status",
		                         ready ? "True" : "False", "reason",
		                         ready ? SG_CRPOLICY_READY_REASON : SG_CRPOLICY_NOT_READY_REASON, "message", why);
		sg_kube_ref ref = {.group = "policy.cert-manager.io", .version = "v1alpha1",
		                   .resource = "certificaterequestpolicies", .name = name};
		bool written = false;
		rc = !want ? sg_error_set(SG_EINTERNAL, "approver: out of memory")
		     : sg_ctrl_stopping(c) ? sg_error_set(SG_EBUSY, "approver: stopping")
		                           : sg_ctrl_apply_status(c, &ref, "CertificateRequestPolicy", obj, want, &written);
		json_decref(want);
		if (written) {
			atomic_fetch_add(&a->policy_status_writes, 1);
			sg_log(ready ? SG_LOG_INFO : SG_LOG_WARN, "approver: policy", SG_F_STR("policy", name),
			       SG_F_STR("message", why), SG_F_END);
		}
		free(refused);
	}
	sg_crpolicy_free(p);
	json_decref(obj);
	return rc;
}

/* ---- the request, as sg_crpolicy reads it ---- */

/* sg_crpolicy_cr_read and sg_crpolicy_cr_csr (policy/): the same reading
 * `signetctl policy check` makes of a request. */
typedef sg_crpolicy_cr request;

/* ---- SubjectAccessReviews ---- */


/* The cache key: SHA-256 over who asks (user, uid, groups, extra), the
 * policy and the namespace, each ended by a NUL (names hold none). */
static int sar_key(const sg_crpolicy_request *r, const char *policy, uint8_t key[SG_CACHE_KEY_LEN])
{
	char *extra = r->extra ? json_dumps(r->extra, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	size_t n = strlen(r->username) + strlen(r->uid) + strlen(policy) + strlen(r->name_space) +
	           (extra ? strlen(extra) : 0) + 8;
	for (size_t i = 0; i < r->group_count; i++)
		n += strlen(r->groups[i]) + 1;
	char *b = malloc(n);
	if (!b) {
		free(extra);
		SG_BAIL(SG_EINTERNAL, "approver: out of memory");
	}
	size_t at = 0;
	const char *parts[] = {r->username, r->uid, extra ? extra : "", policy, r->name_space};
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		size_t l = strlen(parts[i]) + 1;
		memcpy(b + at, parts[i], l);
		at += l;
	}
	for (size_t i = 0; i < r->group_count; i++) {
		size_t l = strlen(r->groups[i]) + 1;
		memcpy(b + at, r->groups[i], l);
		at += l;
	}
	int rc = sg_sha256(b, at, key);
	free(b);
	free(extra);
	return rc;
}

/* Whether the requester may `use` policy in the request's namespace. */
static int may_use(sg_approver *a, const sg_crpolicy_request *r, const char *policy, bool *allowed)
{
	uint8_t key[SG_CACHE_KEY_LEN];
	uint8_t ans = 0;
	uint64_t gen = atomic_load(&a->rbac_gen);
	int64_t now = (int64_t)time(NULL);
	if (a->sar) {
		SG_TRY(sar_key(r, policy, key));
		if (sg_cache_get(a->sar, key, gen, now, &ans)) {
			atomic_fetch_add(&a->sar_cached, 1);
			*allowed = ans != 0;
			return SG_OK;
		}
	}
	json_t *groups = json_array();
	for (size_t i = 0; groups && i < r->group_count; i++)
		json_array_append_new(groups, json_string(r->groups[i]));
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s, s:o, s:{s:s, s:s, s:s, s:s, s:s}}}", "apiVersion",
	                         "authorization.k8s.io/v1", "kind", "SubjectAccessReview", "spec", "user", r->username,
	                         "uid", r->uid, "groups", groups, "resourceAttributes", "group", "policy.cert-manager.io",
	                         "resource", "certificaterequestpolicies", "name", policy, "namespace", r->name_space,
	                         "verb", "use");
	SG_ENSURE(body, SG_EINTERNAL, "approver: out of memory");
	if (r->extra)
		json_object_set(json_object_get(body, "spec"), "extra", (json_t *)r->extra);
	sg_kube_ref ref = {.group = "authorization.k8s.io", .version = "v1", .resource = "subjectaccessreviews"};
	json_t *out = NULL;
	atomic_fetch_add(&a->sar_requests, 1);
	int rc = sg_kube_create(a->kube, &ref, body, &out);
	json_decref(body);
	if (rc == SG_OK) {
		*allowed = json_is_true(json_object_get(json_object_get(out, "status"), "allowed"));
		ans = *allowed;
		if (a->sar)
			(void)sg_cache_put(a->sar, key, gen, now, SG_CACHE_FROM_ANY, now + a->sar_ttl, &ans);
	}
	json_decref(out);
	return rc;
}

/* ---- writing the decision ---- */

/* Whether live is the request cr was: the same object (uid) with the same
 * spec (generation). */
static bool same_request(const json_t *cr, const json_t *live)
{
	const char *u1 = sg_kube_meta_str(cr, "uid"), *u2 = sg_kube_meta_str(live, "uid");
	const json_t *g1 = json_object_get(json_object_get(cr, "metadata"), "generation");
	const json_t *g2 = json_object_get(json_object_get(live, "metadata"), "generation");
	return u1 && u2 && strcmp(u1, u2) == 0 && json_integer_value(g1) == json_integer_value(g2);
}

/* Writes the decision made on cr (the cached copy evaluated): a live read
 * (a request decided meanwhile, or another one made since under the same
 * name, is left alone), the condition added, PUT of /status with the
 * read's resourceVersion. *conflict: someone else wrote first (409,
 * decided, or not the request evaluated). */
static int write_decision(sg_approver *a, sg_ctrl *c, const json_t *cr, bool approve, const char *msg, bool *conflict)
{
	const char *ns = sg_kube_meta_str(cr, "namespace"), *name = sg_kube_meta_str(cr, "name");
	*conflict = false;
	SG_ENSURE(!sg_ctrl_stopping(c), SG_EBUSY, "approver: stopping");
	sg_kube_ref ref = {.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests", .ns = ns,
	                   .name = name};
	json_t *live = NULL;
	int rc = sg_kube_get(a->kube, &ref, &live);
	if (rc == SG_ENOTFOUND) {
		*conflict = true;
		return SG_OK;
	}
	SG_TRY(rc);
	if (decided(live) || !same_request(cr, live)) {
		json_decref(live);
		*conflict = true;
		return SG_OK;
	}
	json_t *status = json_object_get(live, "status");
	if (!json_is_object(status)) {
		status = json_object();
		json_object_set_new(live, "status", status);
	}
	json_t *conds = json_object_get(status, "conditions");
	if (!json_is_array(conds)) {
		conds = json_array();
		json_object_set_new(status, "conditions", conds);
	}
	char when[32];
	(void)sg_clock_rfc3339(when, sizeof(when), (int64_t)time(NULL));
	json_t *cond = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", approve ? "Approved" : "Denied", "status", "True",
	                         "reason", SG_CRPOLICY_CONDITION_REASON, "message", msg, "lastTransitionTime", when);
	if (!cond || json_array_append_new(conds, cond) != 0) {
		json_decref(live);
		SG_BAIL(SG_EINTERNAL, "approver: out of memory");
	}
	ref.subresource = "status";
	rc = sg_kube_update(a->kube, &ref, live, NULL);
	if (sg_kube_conflict(rc)) {
		*conflict = true;
		rc = SG_OK;
	} else if (rc == SG_OK) {
		atomic_fetch_add(approve ? &a->approved : &a->denied, 1);
		sg_ctrl_event(c, live, approve ? "Normal" : "Warning", approve ? "Approved" : "Denied", "%s", msg);
		sg_log(SG_LOG_INFO, approve ? "approver: approved" : "approver: denied", SG_F_STR("namespace", ns),
		       SG_F_STR("name", name), SG_F_STR("message", msg), SG_F_END);
	}
	json_decref(live);
	return rc;
}

/* An Event "Unprocessed" once per request (by uid). */
static void tell_unprocessed(sg_approver *a, sg_ctrl *c, const json_t *cr, const char *why)
{
	atomic_fetch_add(&a->unprocessed, 1);
	const char *uid = sg_kube_meta_str(cr, "uid");
	if (!uid)
		return;
	bool first;
	pthread_mutex_lock(&a->told_mu);
	first = !json_object_get(a->told, uid);
	if (first) {
		if (json_object_size(a->told) >= TOLD_MAX)
			json_object_clear(a->told);
		json_object_set_new(a->told, uid, json_true());
	}
	pthread_mutex_unlock(&a->told_mu);
	if (first)
		sg_ctrl_event(c, cr, "Normal", "Unprocessed", "%s", why);
}

static int cmp_name(const void *x, const void *y)
{
	const char *a = sg_kube_meta_str(*(json_t *const *)x, "name");
	const char *b = sg_kube_meta_str(*(json_t *const *)y, "name");
	return strcmp(a ? a : "", b ? b : "");
}

/* The policy's plugins, folded into v. */
static int run_plugins(sg_approver *a, const sg_crpolicy *p, const sg_crpolicy_request *r, const json_t *cr,
                       sg_crpolicy_verdict *v)
{
	for (size_t i = 0; i < sg_crpolicy_plugin_count(p); i++) {
		const char *name = sg_crpolicy_plugin_name(p, i);
		const sg_approver_plugin *pl = NULL;
		for (size_t j = 0; j < a->nplugins && !pl; j++)
			if (strcmp(a->plugins[j].name, name) == 0)
				pl = &a->plugins[j];
		SG_ENSURE(pl, SG_EINTERNAL, "approver: plugin %s is not known", name);
		bool denied = false;
		char *msg = NULL;
		SG_TRY(pl->evaluate(pl->arg, sg_crpolicy_name(p), sg_crpolicy_plugin_values(p, i), r, cr, &denied, &msg));
		int rc = sg_crpolicy_verdict_add(v, denied, msg);
		free(msg);
		SG_TRY(rc);
	}
	return SG_OK;
}

/* The policy's ExternalPolicyServers, folded into v. */
static int run_servers(sg_approver *a, const sg_crpolicy *p, const sg_crpolicy_request *r, const json_t *cr,
                       sg_crpolicy_verdict *v)
{
	size_t n = sg_crpolicy_external_count(p);
	if (n == 0)
		return SG_OK;
	/* A Ready policy lists servers only when the approver calls them
	 * (sg_crpolicy_options.external_policy_servers). */
	SG_ENSURE(a->servers.evaluate, SG_EINTERNAL, "approver: policy %s lists external policy servers",
	          sg_crpolicy_name(p));
	const char *names[SG_CRPOLICY_MAX_ENTRIES];
	for (size_t i = 0; i < n && i < SG_CRPOLICY_MAX_ENTRIES; i++)
		names[i] = sg_crpolicy_external_name(p, i);
	bool denied = false;
	char *msg = NULL;
	SG_TRY(a->servers.evaluate(a->servers.arg, sg_crpolicy_name(p), names,
	                           n < SG_CRPOLICY_MAX_ENTRIES ? n : SG_CRPOLICY_MAX_ENTRIES, r, cr, &denied, &msg));
	int rc = sg_crpolicy_verdict_add(v, denied, msg);
	free(msg);
	return rc;
}

/* ---- which signers are ours ---- */

/* Parses sg_approver_options.signer_names into a->signers (NULL: all). */
static int signers_parse(sg_approver *a, const char *list)
{
	if (!list || !*list)
		return SG_OK;
	char *copy = strdup(list);
	SG_ENSURE(copy, SG_EINTERNAL, "approver: out of memory");
	const char *items[SIGNER_NAMES_MAX];
	size_t n = 0;
	int rc = sg_opt_split_list(copy, items, SIGNER_NAMES_MAX, &n, "approver signer names");
	if (rc == SG_OK)
		a->signers = calloc(n, sizeof(*a->signers));
	if (rc == SG_OK && !a->signers)
		rc = sg_error_set(SG_EINTERNAL, "approver: out of memory");
	for (size_t i = 0; rc == SG_OK && i < n; i++) {
		const char *it = items[i];
		if (strcmp(it, "*") == 0) { /* every signer: no list at all */
			free(a->signers);
			a->signers = NULL;
			a->nsigners = 0;
			break;
		}
		const char *slash = strchr(it, '/');
		size_t rlen = slash ? (size_t)(slash - it) : 0;
		if (!slash || rlen == 0 || !memchr(it, '.', rlen) || !slash[1] || strchr(slash + 1, '/') ||
		    rlen >= SIGNER_NAME_MAX || strlen(slash + 1) >= SIGNER_NAME_MAX) {
			rc = sg_error_set(SG_EINVAL,
			                  "approver signer names: \"%s\" is not \"*\", \"<plural>.<group>/*\" or "
			                  "\"<plural>.<group>/<issuer>\"",
			                  it);
			break;
		}
		signer_name *e = &a->signers[a->nsigners++];
		memcpy(e->resource, it, rlen);
		e->resource[rlen] = '\0';
		snprintf(e->name, sizeof(e->name), "%s", slash + 1);
	}
	free(copy);
	return rc;
}

/* Whether the request's signer is one this approver approves for:
 * cert-manager's signer name "<plural>.<group>/<namespace>.<name>" (or
 * "/<name>" for a cluster-scoped issuer) against the list. */
static bool signer_ours(const sg_approver *a, const sg_crpolicy_request *r)
{
	if (!a->signers)
		return true;
	const char *kind = r->issuer_kind && *r->issuer_kind ? r->issuer_kind : "Issuer";
	const char *group = r->issuer_group && *r->issuer_group ? r->issuer_group : "cert-manager.io";
	char resource[SIGNER_NAME_MAX], name[SIGNER_NAME_MAX];
	size_t k = 0;
	for (; kind[k] && k + 1 < sizeof(resource); k++)
		resource[k] = (char)((kind[k] >= 'A' && kind[k] <= 'Z') ? kind[k] - 'A' + 'a' : kind[k]);
	int n = snprintf(resource + k, sizeof(resource) - k, "s.%s", group);
	if (kind[k] || n < 0 || (size_t)n >= sizeof(resource) - k)
		return false; /* longer than any name we could hold: not one we were given */
	bool cluster = strncmp(kind, "Cluster", 7) == 0;
	n = cluster ? snprintf(name, sizeof(name), "%s", r->issuer_name)
	            : snprintf(name, sizeof(name), "%s.%s", r->name_space, r->issuer_name);
	if (n < 0 || (size_t)n >= sizeof(name))
		return false;
	for (size_t i = 0; i < a->nsigners; i++)
		if (strcmp(a->signers[i].resource, resource) == 0 &&
		    (strcmp(a->signers[i].name, "*") == 0 || strcmp(a->signers[i].name, name) == 0))
			return true;
	return false;
}

/* ---- deciding ---- */

/* The labels of namespace ns, for a selector: from the cache, else from a
 * live read (a Namespace created a moment ago may not be cached yet, and
 * "no labels" would be a wrong "no match"). *labels is a new reference. */
static int namespace_labels(sg_approver *a, sg_ctrl *c, const char *ns, json_t **labels)
{
	json_t *obj = sg_kube_informer_get(sg_ctrl_informer(c, W_NAMESPACES), NULL, ns);
	if (!obj) {
		sg_kube_ref ref = {.version = "v1", .resource = "namespaces", .name = ns};
		int rc = sg_kube_get(a->kube, &ref, &obj);
		if (rc < 0)
			return sg_error_set(rc == SG_ENOTFOUND ? SG_EBUSY : rc,
			                    "Namespace %s, whose labels a policy's selector needs, cannot be read: %s",
			                    ns, sg_error_last()->msg);
	}
	json_t *l = json_object_get(json_object_get(obj, "metadata"), "labels");
	*labels = json_is_object(l) ? json_incref(l) : json_object();
	json_decref(obj);
	return *labels ? SG_OK : sg_error_set(SG_EINTERNAL, "approver: out of memory");
}

/* One pass over one request, as approver-policy's review: what it found. */
typedef struct review {
	sg_crpolicy **compiled; /* every policy compiled this pass, freed after */
	size_t ncompiled;
	sg_crpolicy_denial *denials; /* the Ready policies that denied, in name order */
	sg_crpolicy_verdict *verdicts;
	size_t ndenied;
	size_t nbound;        /* selecting, and the requester may use them */
	size_t nwaiting;      /* of those, not Ready (or not reconciled yet) */
	size_t nready;        /* of those, evaluated */
	const char *approver; /* the policy that approved, or NULL */
} review;

static void review_clear(review *v)
{
	for (size_t i = 0; i < v->ndenied; i++)
		sg_crpolicy_verdict_clear(&v->verdicts[i]);
	for (size_t i = 0; i < v->ncompiled; i++)
		sg_crpolicy_free(v->compiled[i]);
	free(v->compiled);
	free(v->denials);
	free(v->verdicts);
}

/* Whether policy p (compiled from obj) applies to q: selected, and the
 * requester may use it. The Namespace is read once, when a selector first
 * needs its labels. */
static int applies(sg_approver *a, sg_ctrl *c, const sg_crpolicy *p, const request *q, json_t **labels, bool *yes)
{
	*yes = false;
	if (!sg_crpolicy_selects_issuer(p, &q->r))
		return SG_OK;
	if (sg_crpolicy_needs_namespace_labels(p) && !*labels)
		SG_TRY(namespace_labels(a, c, q->r.name_space, labels));
	bool match = false;
	SG_TRY(sg_crpolicy_selects_namespace(p, q->r.name_space, *labels, &match));
	if (!match)
		return SG_OK;
	return may_use(a, &q->r, sg_crpolicy_name(p), yes);
}

/* Evaluates one Ready policy (its rules, then its plugins, then its
 * ExternalPolicyServers: each asked only while none before denied); an error stops
 * the review (the caller returns it). */
static int evaluate(sg_approver *a, const sg_crpolicy *p, request *q, const json_t *cr, review *v)
{
	SG_TRY(sg_crpolicy_cr_csr(q, cr));
	sg_crpolicy_verdict *vd = &v->verdicts[v->ndenied];
	memset(vd, 0, sizeof(*vd));
	int rc = sg_crpolicy_evaluate(p, &q->r, vd);
	if (rc == SG_OK && !vd->denied)
		rc = run_plugins(a, p, &q->r, cr, vd);
	if (rc == SG_OK && !vd->denied)
		rc = run_servers(a, p, &q->r, cr, vd);
	if (rc < 0) {
		sg_crpolicy_verdict_clear(vd);
		return rc;
	}
	if (!vd->denied) {
		sg_crpolicy_verdict_clear(vd);
		v->approver = sg_crpolicy_name(p);
		return SG_OK;
	}
	v->denials[v->ndenied++] = (sg_crpolicy_denial){sg_crpolicy_name(p), vd->message};
	return SG_OK;
}

/* approver-policy's review over the policies pols (sorted here by name):
 * stops at the first approval or the first error. */
static int review_run(sg_approver *a, sg_ctrl *c, const json_t *pols, request *q, const json_t *cr, review *v)
{
	size_t npol = json_array_size(pols);
	json_t **sorted = calloc(npol, sizeof(*sorted));
	v->compiled = calloc(npol, sizeof(*v->compiled));
	v->denials = calloc(npol, sizeof(*v->denials));
	v->verdicts = calloc(npol, sizeof(*v->verdicts));
	json_t *labels = NULL;
	int rc = sorted && v->compiled && v->denials && v->verdicts
	             ? SG_OK
	             : sg_error_set(SG_EINTERNAL, "approver: out of memory");
	for (size_t i = 0; rc == SG_OK && i < npol; i++)
		sorted[i] = json_array_get(pols, i);
	if (rc == SG_OK)
		qsort(sorted, npol, sizeof(*sorted), cmp_name);
	for (size_t i = 0; rc == SG_OK && i < npol && !v->approver; i++) {
		sg_crpolicy *p = NULL;
		if (compile(a, sorted[i], &p) < 0)
			continue; /* not a usable object (no name): nobody's policy */
		v->compiled[v->ncompiled++] = p;
		bool yes = false;
		if ((rc = applies(a, c, p, q, &labels, &yes)) < 0 || !yes)
			continue;
		v->nbound++;
		/* Ready: compiled Ready, its plugins accept it, and its Ready
		 * condition written (a policy just created has none yet). */
		char *refused = sg_crpolicy_ready(p) ? plugins_refuse(a, p) : NULL;
		bool ready = sg_crpolicy_ready(p) && !refused && sg_ctrl_condition_find(sorted[i], "Ready");
		free(refused);
		if (!ready) {
			v->nwaiting++;
			continue;
		}
		v->nready++;
		rc = evaluate(a, p, q, cr, v);
	}
	json_decref(labels);
	free(sorted);
	return rc;
}

static int reconcile_request(sg_approver *a, sg_ctrl *c, const char *ns, const char *name, sg_ctrl_result *res)
{
	json_t *cr = sg_kube_informer_get(sg_ctrl_informer(c, W_REQUESTS), ns, name);
	if (!cr || decided(cr)) {
		json_decref(cr);
		return SG_OK;
	}
	json_t *pols = NULL;
	request q;
	review v = {0};
	bool conflict = false;
	char *msg = NULL;
	int rc = sg_crpolicy_cr_read(&q, cr); /* the issuerRef is read first, whatever fails after */
	if (!signer_ours(a, &q.r)) {
		atomic_fetch_add(&a->skipped, 1);
		rc = SG_OK;
		goto out; /* another approver's */
	}
	if (rc < 0) {
		rc = sg_error_set(rc, "CertificateRequest %s/%s cannot be evaluated: %s", ns, name,
		                  sg_error_last()->msg);
		goto out;
	}
	pols = sg_kube_informer_list(sg_ctrl_informer(c, W_POLICIES));
	if (!pols) {
		rc = sg_error_set(SG_EINTERNAL, "approver: out of memory");
		goto out;
	}
	if (json_array_size(pols) == 0) {
		tell_unprocessed(a, c, cr, SG_CRPOLICY_NO_POLICIES);
		goto out;
	}
	if ((rc = review_run(a, c, pols, &q, cr, &v)) < 0) {
		rc = sg_error_set(rc == SG_EINVAL ? SG_EBUSY : rc, "CertificateRequest %s/%s: no answer yet: %s", ns,
		                  name, sg_error_last()->msg);
		goto out;
	}
	if (v.approver) {
		if ((rc = sg_crpolicy_approved_message(v.approver, &msg)) == SG_OK)
			rc = write_decision(a, c, cr, true, msg, &conflict);
	} else if (v.nready == 0) {
		/* nothing bound, or nothing Ready of what is */
		tell_unprocessed(a, c, cr, SG_CRPOLICY_NONE_APPLICABLE);
	} else if (v.nwaiting > 0) {
		/* A policy that applies is not Ready: deny nothing until it is
		 * (its Ready condition brings the request back). */
		atomic_fetch_add(&a->deferred, 1);
		if ((rc = sg_crpolicy_deferred_message(v.denials, v.ndenied, &msg)) == SG_OK)
			sg_log(SG_LOG_INFO, "approver: deferred", SG_F_STR("namespace", ns), SG_F_STR("name", name),
			       SG_F_STR("message", msg), SG_F_END);
	} else if ((rc = sg_crpolicy_denied_message(v.denials, v.ndenied, &msg)) == SG_OK) {
		rc = write_decision(a, c, cr, false, msg, &conflict);
	}
	if (rc == SG_OK && conflict) {
		atomic_fetch_add(&a->conflicts, 1);
		res->requeue_after_ms = CONFLICT_RETRY_MS; /* the live state decides */
	}
out:
	if (rc < 0)
		atomic_fetch_add(&a->errors, 1);
	free(msg);
	review_clear(&v);
	sg_crpolicy_cr_clear(&q);
	json_decref(pols);
	json_decref(cr);
	return rc;
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_approver *a = arg;
	if (strncmp(key, POLICY_PREFIX, sizeof(POLICY_PREFIX) - 1) == 0)
		return reconcile_policy(a, c, key + sizeof(POLICY_PREFIX) - 1);
	if (strcmp(key, RBAC_SETTLE_KEY) == 0)
		return rbac_settled(a, c, res);
	char ns[64], name[SG_KUBE_NAME_MAX + 1];
	if (!sg_ctrl_key_split(key, ns, name) || !ns[0])
		return SG_OK;
	return reconcile_request(a, c, ns, name, res);
}

/* ---- life ---- */

static void stats_of(void *arg, void *out)
{
	sg_approver_stats_get(arg, out);
}

/* signet_approver_*: the module's counters, by the registry's stats table. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
#define ROW(field, name, help) SG_METRICS_STAT_COUNTER(sg_approver_stats, field, name, help)
	static const sg_metrics_stat rows[] = {
	    ROW(approved, "signet_approver_approved_total", "CertificateRequests approved by a policy."),
	    ROW(denied, "signet_approver_denied_total", "CertificateRequests denied (no policy approved)."),
	    ROW(unprocessed, "signet_approver_unprocessed_total", "Passes that found no applicable, bound policy."),
	    ROW(deferred, "signet_approver_deferred_total", "Passes that waited for an applicable policy to be Ready."),
	    ROW(skipped, "signet_approver_skipped_total",
	        "Passes on requests for a signer outside --approver-signer-names (left to another approver)."),
	    ROW(errors, "signet_approver_errors_total", "Passes without an answer (retried with backoff)."),
	    ROW(sar_requests, "signet_approver_subjectaccessreviews_total", "SubjectAccessReviews sent."),
	    ROW(sar_cached, "signet_approver_subjectaccessreviews_cached_total", "SubjectAccessReview answers reused."),
	};
#undef ROW
	return sg_metrics_stats(reg, rows, sizeof(rows) / sizeof(rows[0]), stats_of, sizeof(sg_approver_stats), arg);
}

int sg_approver_new(sg_approver **out, const sg_approver_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube, SG_EINVAL, "approver: needs a Kubernetes client");
	sg_approver *a = calloc(1, sizeof(*a));
	SG_ENSURE(a, SG_EINTERNAL, "approver: out of memory");
	pthread_mutex_init(&a->told_mu, NULL);
	a->kube = o->kube;
	a->servers = o->servers;
	a->told = json_object();
	int rc = a->told ? SG_OK : sg_error_set(SG_EINTERNAL, "approver: out of memory");
	a->sar_ttl = o->sar_ttl_seconds ? o->sar_ttl_seconds : SG_APPROVER_SAR_TTL_DEFAULT;
	if (rc == SG_OK && a->sar_ttl > 0)
		rc = sg_cache_new(&a->sar, SAR_CACHE_ENTRIES, 1);
	if (rc == SG_OK)
		rc = signers_parse(a, o->signer_names);
	if (rc == SG_OK && o->nplugins) {
		a->plugins = calloc(o->nplugins, sizeof(*a->plugins));
		a->plugin_names = calloc(o->nplugins, sizeof(*a->plugin_names));
		if (!a->plugins || !a->plugin_names)
			rc = sg_error_set(SG_EINTERNAL, "approver: out of memory");
		for (size_t i = 0; rc == SG_OK && i < o->nplugins; i++) {
			SG_ENSURE_GOTO(rc, o->plugins[i].name && o->plugins[i].evaluate, fail, SG_EINVAL,
			               "approver: plugin %zu needs a name and an evaluate function", i);
			a->plugins[i] = o->plugins[i];
			a->plugin_names[i] = o->plugins[i].name;
			a->nplugins++;
		}
	}
	static const char *const rbac[] = {"roles", "rolebindings", "clusterroles", "clusterrolebindings"};
	sg_ctrl_watch w[NWATCHES] = {
		[W_REQUESTS] = {.ref = {.group = "cert-manager.io", .version = "v1", .resource = "certificaterequests"},
		                .map = map_request},
		[W_POLICIES] = {.ref = {.group = "policy.cert-manager.io", .version = "v1alpha1",
		                        .resource = "certificaterequestpolicies"},
		                .map = map_policy},
		[W_NAMESPACES] = {.ref = {.version = "v1", .resource = "namespaces"}, .map = map_namespace,
		                  .metadata_only = true},
	};
	for (size_t i = 0; i < 4; i++)
		w[W_RBAC_FIRST + i] = (sg_ctrl_watch){
			.ref = {.group = "rbac.authorization.k8s.io", .version = "v1", .resource = rbac[i]},
			.map = map_rbac,
			.metadata_only = true};
	sg_ctrl_def def = {.name = "approver",
	                   .kube = o->kube,
	                   .watches = w,
	                   .nwatches = NWATCHES,
	                   .reconcile = reconcile,
	                   .resync = resync,
	                   .metrics = metrics,
	                   .arg = a,
	                   .workers = o->workers ? o->workers : 4};
	if (rc == SG_OK)
		rc = sg_ctrl_new(&a->ctrl, &def);
fail:
	if (rc < 0) {
		sg_approver_free(a);
		return rc;
	}
	*out = a;
	return SG_OK;
}

sg_ctrl *sg_approver_controller(sg_approver *a)
{
	return a->ctrl;
}

void sg_approver_stats_get(sg_approver *a, sg_approver_stats *out)
{
	*out = (sg_approver_stats){
	    .approved = atomic_load(&a->approved),
	    .denied = atomic_load(&a->denied),
	    .unprocessed = atomic_load(&a->unprocessed),
	    .deferred = atomic_load(&a->deferred),
	    .skipped = atomic_load(&a->skipped),
	    .errors = atomic_load(&a->errors),
	    .conflicts = atomic_load(&a->conflicts),
	    .sar_requests = atomic_load(&a->sar_requests),
	    .sar_cached = atomic_load(&a->sar_cached),
	    .policy_status_writes = atomic_load(&a->policy_status_writes),
	};
}

void sg_approver_free(sg_approver *a)
{
	if (!a)
		return;
	sg_ctrl_free(a->ctrl);
	sg_cache_free(a->sar);
	free(a->signers);
	free(a->plugins);
	free(a->plugin_names);
	json_decref(a->told);
	pthread_mutex_destroy(&a->told_mu);
	free(a);
}
