/*
 * sg_signetissuer: the SignetIssuer / SignetClusterIssuer kinds and the
 * controller that keeps their Ready condition (contract:
 * sg_signetissuer.h).
 *
 * Design notes. One controller watches both kinds; a key with a '/' is a
 * namespaced SignetIssuer ("ns/name"), one without is a
 * SignetClusterIssuer ("name"), as the runtime's default keys make them.
 * Every reconcile asks to run again after the check interval: that is the
 * periodic health check (issuer-lib has none; an HSM that dies must turn
 * the issuers not Ready without anyone editing them). The status is written
 * through sg_ctrl_apply_status, which writes only when the condition
 * changes, so a healthy cluster sees no writes between transitions.
 *
 * Whether a CA is usable costs an HSM session open; the answer is kept for
 * a few seconds per CA so a cluster with many issuers asks the module once
 * per check, not once per issuer.
 */
#include "sg_signetissuer.h"

#include "sg_clock.h"
#include "sg_goduration.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_names.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_WATCH 0
#define CLUSTER_WATCH 1
#define USABLE_CACHE_NS (5ull * 1000000000ull)
#define WHY_MAX 512
#define CAS_MAX 16

/* ---- the spec ---- */

static int duration_field(const json_t *spec, const char *field, int64_t dflt, int64_t *out)
{
	const json_t *v = json_object_get(spec, field);
	*out = dflt;
	if (!v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0))
		return SG_OK;
	SG_ENSURE(json_is_string(v), SG_EINVAL, "spec.%s is not a string", field);
	if (sg_goduration_parse(json_string_value(v), out) != SG_OK)
		SG_BAIL(SG_EINVAL, "spec.%s: %s", field, sg_error_last()->msg);
	return SG_OK;
}

int sg_signetissuer_spec_parse(const json_t *obj, sg_signetissuer_spec *out)
{
	memset(out, 0, sizeof(*out));
	const json_t *spec = json_object_get(obj, "spec");
	SG_ENSURE(!spec || json_is_object(spec), SG_EINVAL, "spec is not an object");
	const json_t *ca = json_object_get(spec, "caName");
	const char *name = "default";
	if (ca && !json_is_null(ca)) {
		name = json_string_value(ca);
		SG_ENSURE(name, SG_EINVAL, "spec.caName is not a string");
	}
	SG_ENSURE(sg_names_dns_label(name, strlen(name), SG_KUBESIGN_CA_NAME_MAX), SG_EINVAL,
		  "spec.caName \"%.64s\" is not a DNS label (lower-case letters, digits and '-', at most %d)", name,
		  SG_KUBESIGN_CA_NAME_MAX);
	snprintf(out->ca_name, sizeof(out->ca_name), "%s", name);
	/* 0: absent, fitted into the range below */
	SG_TRY(duration_field(spec, "defaultDuration", 0, &out->default_duration));
	SG_TRY(duration_field(spec, "minDuration", 3600, &out->min_duration));
	SG_TRY(duration_field(spec, "maxDuration", 0, &out->max_duration));
	const json_t *ac = json_object_get(spec, "allowCA");
	SG_ENSURE(!ac || json_is_null(ac) || json_is_boolean(ac), SG_EINVAL, "spec.allowCA is not a boolean");
	out->allow_ca = json_is_true(ac);
	char a[32], b[32];
	SG_ENSURE(out->min_duration >= SG_KUBESIGN_MIN_DURATION, SG_EINVAL, "spec.minDuration is below %lld s",
		  SG_KUBESIGN_MIN_DURATION);
	if (out->max_duration) {
		sg_goduration_format(out->min_duration, a, sizeof(a));
		sg_goduration_format(out->max_duration, b, sizeof(b));
		SG_ENSURE(out->max_duration >= out->min_duration, SG_EINVAL,
			  "spec.maxDuration (%s) is below spec.minDuration (%s)", b, a);
	}
	/* An absent default fits the range; one given outside it is a
	 * mistake worth saying (InvalidSpec), not something to guess. */
	if (!out->default_duration) {
		out->default_duration = sg_signetissuer_duration(out, SG_KUBESIGN_DEFAULT_DURATION);
		return SG_OK;
	}
	SG_ENSURE(out->default_duration >= out->min_duration &&
			  (!out->max_duration || out->default_duration <= out->max_duration),
		  SG_EINVAL, "spec.defaultDuration is outside [spec.minDuration, spec.maxDuration]");
	return SG_OK;
}

bool sg_signetissuer_ready(const json_t *obj, char *why, size_t cap)
{
	const json_t *ready = sg_ctrl_condition_find(obj, "Ready");
	const char *status = json_string_value(json_object_get(ready, "status"));
	json_int_t gen = json_integer_value(json_object_get(json_object_get(obj, "metadata"), "generation"));
	json_int_t seen = json_integer_value(json_object_get(ready, "observedGeneration"));
	const char *lead = "Waiting for issuer to become ready. Current issuer ready condition";
	if (!ready || !status) {
		snprintf(why, cap, "%s: <none>.", lead);
		return false;
	}
	if (seen < gen) {
		snprintf(why, cap, "%s is outdated.", lead);
		return false;
	}
	if (strcmp(status, "True") != 0) {
		const char *reason = json_string_value(json_object_get(ready, "reason"));
		const char *msg = json_string_value(json_object_get(ready, "message"));
		snprintf(why, cap, "%s is \"%s\": %s.", lead, reason ? reason : "", msg ? msg : "");
		return false;
	}
	return true;
}

int64_t sg_signetissuer_duration(const sg_signetissuer_spec *spec, int64_t requested)
{
	int64_t d = requested > 0 ? requested : spec->default_duration;
	int64_t lo = spec->min_duration > SG_KUBESIGN_MIN_DURATION ? spec->min_duration : SG_KUBESIGN_MIN_DURATION;
	if (spec->max_duration && d > spec->max_duration)
		d = spec->max_duration;
	return d < lo ? lo : d;
}

void sg_signetissuer_duration_note(const sg_signetissuer_spec *spec, int64_t requested, int64_t issued, char *out,
                                   size_t cap)
{
	out[0] = 0;
	if (requested <= 0 || requested == issued)
		return;
	char asked[32], bound[32];
	sg_goduration_format(requested, asked, sizeof(asked));
	bool longer = requested > issued;
	sg_goduration_format(longer ? spec->max_duration : spec->min_duration, bound, sizeof(bound));
	snprintf(out, cap, " (%s asked; the issuer's %s is %s)", asked, longer ? "maxDuration" : "minDuration", bound);
}

/* ---- the controller ---- */

typedef struct usable_entry {
	uint64_t at_ns; /* 0: never checked */
	bool ok;
	char why[WHY_MAX];
} usable_entry;

struct sg_signetissuer {
	sg_kube *kube;
	sg_ctrl *ctrl;
	const sg_kubesign_ca *cas;
	size_t ncas;
	unsigned interval;
	pthread_mutex_t mu; /* stats and usable */
	sg_signetissuer_stats stats;
	usable_entry usable[CAS_MAX];
};

static bool ca_usable(sg_signetissuer *s, const sg_kubesign_ca *ca, char *why, size_t cap)
{
	size_t i = (size_t)(ca - s->cas);
	uint64_t now = sg_now_ns();
	pthread_mutex_lock(&s->mu);
	usable_entry e = s->usable[i];
	pthread_mutex_unlock(&s->mu);
	if (!e.at_ns || now - e.at_ns > USABLE_CACHE_NS) {
		e.ok = sg_kubesign_ca_usable(ca, sg_wall_seconds(), e.why, sizeof(e.why));
		e.at_ns = now;
		pthread_mutex_lock(&s->mu);
		s->usable[i] = e;
		pthread_mutex_unlock(&s->mu);
	}
	snprintf(why, cap, "%s", e.ok ? "" : e.why);
	return e.ok;
}

/* The Ready condition obj deserves now. */
static void judge(sg_signetissuer *s, const json_t *obj, const char **status, const char **reason, char *msg,
		  size_t cap)
{
	sg_signetissuer_spec spec;
	*status = "False";
	if (sg_signetissuer_spec_parse(obj, &spec) != SG_OK) {
		*reason = "InvalidSpec";
		snprintf(msg, cap, "%s", sg_error_last()->msg);
		return;
	}
	const sg_kubesign_ca *ca = sg_kubesign_ca_find(s->cas, s->ncas, spec.ca_name);
	if (!ca) {
		*reason = "CANotFound";
		int n = snprintf(msg, cap, "signetd has no CA named \"%s\" (it has:", spec.ca_name);
		for (size_t i = 0; i < s->ncas && n > 0 && (size_t)n < cap; i++)
			n += snprintf(msg + n, cap - (size_t)n, " %s", s->cas[i].name);
		if (n > 0 && (size_t)n < cap)
			snprintf(msg + n, cap - (size_t)n, ")");
		return;
	}
	char why[WHY_MAX];
	if (!ca_usable(s, ca, why, sizeof(why))) {
		*reason = "CAUnusable";
		snprintf(msg, cap, "%s", why);
		return;
	}
	*status = "True";
	*reason = "Checked";
	snprintf(msg, cap, "CA \"%s\" (%s) is usable", spec.ca_name, sg_ca_subject(sg_appliance_ca(ca->app)));
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_signetissuer *s = arg;
	char ns[64], name[SG_KUBE_NAME_MAX + 1];
	if (!sg_ctrl_key_split(key, ns, name))
		return SG_OK; /* not a key of ours: nothing to do, ever */
	bool cluster = ns[0] == 0;
	json_t *obj = sg_kube_informer_get(sg_ctrl_informer(c, cluster ? CLUSTER_WATCH : NS_WATCH), cluster ? NULL : ns,
					   name);
	if (!obj)
		return SG_OK; /* deleted */
	const char *status, *reason;
	char msg[1024];
	judge(s, obj, &status, &reason, msg, sizeof(msg));
	const json_t *prev = sg_ctrl_condition_find(obj, "Ready");
	const char *prev_status = json_string_value(json_object_get(prev, "status"));
	json_t *want = json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "conditions", "type", "Ready", "status", status, "reason",
				 reason, "message", msg);
	sg_kube_ref ref = {
		.group = SG_SIGNETISSUER_GROUP,
		.version = SG_SIGNETISSUER_VERSION,
		.resource = cluster ? SG_SIGNETISSUER_CLUSTER_RESOURCE : SG_SIGNETISSUER_RESOURCE,
		.ns = cluster ? NULL : ns,
		.name = name,
	};
	bool written = false;
	int rc = want ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK && !sg_ctrl_stopping(c))
		rc = sg_ctrl_apply_status(c, &ref, cluster ? SG_SIGNETISSUER_CLUSTER_KIND : SG_SIGNETISSUER_KIND, obj, want,
					  &written);
	bool ok = strcmp(status, "True") == 0;
	if (rc == SG_OK && (!prev_status || strcmp(prev_status, status) != 0)) {
		/* a transition: worth an Event and a log line */
		sg_ctrl_event(c, obj, ok ? "Normal" : "Warning", ok ? "Checked" : "NotReady", "%s", msg);
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, ok ? "issuer ready" : "issuer not ready",
		       SG_F_STR("issuer", key), SG_F_STR("reason", reason), SG_F_STR("message", msg), SG_F_END);
	}
	pthread_mutex_lock(&s->mu);
	s->stats.checks++;
	if (rc == SG_OK) {
		s->stats.writes += written;
		if (ok)
			s->stats.ready++;
		else
			s->stats.not_ready++;
	}
	pthread_mutex_unlock(&s->mu);
	json_decref(want);
	json_decref(obj);
	res->requeue_after_ms = (uint64_t)s->interval * 1000u;
	return rc;
}

/* Both kinds are checked at every start (the default resync covers watch
 * 0 only). */
static void resync(sg_ctrl *c, void *arg)
{
	(void)arg;
	for (size_t w = NS_WATCH; w <= CLUSTER_WATCH; w++) {
		json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, w));
		size_t i;
		json_t *obj;
		json_array_foreach(all, i, obj)
		{
			char key[SG_CTRL_KEY_MAX];
			if (sg_ctrl_key_of(obj, key))
				sg_ctrl_add(c, key);
		}
		json_decref(all);
	}
}

static void stats_of(void *arg, void *out)
{
	sg_signetissuer_stats_get(arg, out);
}

/* signet_issuers_*: what the checks found, by the registry's stats table. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
#define ROW(field, name, help) SG_METRICS_STAT_COUNTER(sg_signetissuer_stats, field, name, help)
	static const sg_metrics_stat rows[] = {
	    ROW(ready, "signet_issuers_ready_checks_total", "Issuer checks that found the issuer Ready."),
	    ROW(not_ready, "signet_issuers_not_ready_checks_total",
	        "Issuer checks that found the issuer not Ready (bad spec, unknown or unusable CA)."),
	    ROW(writes, "signet_issuers_status_writes_total", "Issuer status writes."),
	};
#undef ROW
	return sg_metrics_stats(reg, rows, sizeof(rows) / sizeof(rows[0]), stats_of, sizeof(sg_signetissuer_stats),
	                        arg);
}

int sg_signetissuer_new(sg_signetissuer **out, const sg_signetissuer_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube && o->cas && o->ncas > 0, SG_EINVAL, "issuers: needs a Kubernetes client and a CA");
	SG_ENSURE(o->ncas <= CAS_MAX, SG_EINVAL, "issuers: at most %d CAs", CAS_MAX);
	sg_signetissuer *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "issuers: out of memory");
	pthread_mutex_init(&s->mu, NULL);
	s->kube = o->kube;
	s->cas = o->cas;
	s->ncas = o->ncas;
	s->interval = o->check_interval ? o->check_interval : SG_SIGNETISSUER_CHECK_INTERVAL;
	const sg_ctrl_watch watches[] = {
		{.ref = {.group = SG_SIGNETISSUER_GROUP, .version = SG_SIGNETISSUER_VERSION,
			 .resource = SG_SIGNETISSUER_RESOURCE}},
		{.ref = {.group = SG_SIGNETISSUER_GROUP, .version = SG_SIGNETISSUER_VERSION,
			 .resource = SG_SIGNETISSUER_CLUSTER_RESOURCE}},
	};
	sg_ctrl_def def = {
	    .name = "issuers",
	    .kube = o->kube,
	    .watches = watches,
	    .nwatches = 2,
	    .reconcile = reconcile,
	    .resync = resync,
	    .metrics = metrics,
	    .arg = s,
	};
	int rc = sg_ctrl_new(&s->ctrl, &def);
	if (rc < 0) {
		sg_signetissuer_free(s);
		return rc;
	}
	*out = s;
	return SG_OK;
}

sg_ctrl *sg_signetissuer_controller(sg_signetissuer *s)
{
	return s->ctrl;
}

void sg_signetissuer_stats_get(sg_signetissuer *s, sg_signetissuer_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->stats;
	pthread_mutex_unlock(&s->mu);
}

void sg_signetissuer_free(sg_signetissuer *s)
{
	if (!s)
		return;
	sg_ctrl_free(s->ctrl);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
