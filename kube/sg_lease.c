/*
 * sg_lease: Lease-based leader election (the contract is in sg_lease.h).
 *
 * One thread per elector runs client-go's loop:
 *
 *   acquire:  try_acquire_or_renew every retry_period * (1 + 1.2 * rand)
 *             until it succeeds             -> on_started_leading
 *   renew:    every retry_period; a failed attempt is retried every
 *             retry_period until renew_deadline has passed since the last
 *             success                       -> on_stopped_leading, acquire
 *   stop:     on_stopped_leading, then release (holderIdentity "")
 *
 * The observed record (holder, acquire/renew times, transitions, duration)
 * is compared as a string; the local monotonic time at which it last
 * changed is what expiry is judged by.
 */
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_kube_impl.h"
#include "sg_lease.h"
#include "sg_log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RECORD_MAX 1024
#define IDENTITY_MAX 253

struct sg_lease_elector {
	sg_kube *k;
	char *ns, *name, *identity;
	sg_lease_opts opt;
	long lease_seconds;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	atomic_bool stop;
	atomic_bool leader;
	bool running;
	pthread_t th;
	unsigned seed;

	/* Owned by the elector thread (holder also read under mu). */
	char observed[RECORD_MAX];
	uint64_t observed_ns;
	char holder[IDENTITY_MAX + 1];
};

static const char lease_group[] = "coordination.k8s.io";

static sg_kube_ref lease_ref(const sg_lease_elector *e, bool named)
{
	return (sg_kube_ref){.group = lease_group, .version = "v1", .resource = "leases", .ns = e->ns,
	                     .name = named ? e->name : NULL};
}

static const char *spec_str(const json_t *spec, const char *k)
{
	json_t *v = json_object_get(spec, k);
	return json_is_string(v) ? json_string_value(v) : "";
}

static json_int_t spec_int(const json_t *spec, const char *k)
{
	json_t *v = json_object_get(spec, k);
	return json_is_integer(v) ? json_integer_value(v) : 0;
}

static void record_of(const json_t *spec, char *out, size_t cap)
{
	snprintf(out, cap, "%.253s|%.40s|%.40s|%lld|%lld", spec_str(spec, "holderIdentity"),
	         spec_str(spec, "acquireTime"), spec_str(spec, "renewTime"),
	         (long long)spec_int(spec, "leaseTransitions"), (long long)spec_int(spec, "leaseDurationSeconds"));
}

static void observe(sg_lease_elector *e, const json_t *spec)
{
	char rec[RECORD_MAX];
	record_of(spec, rec, sizeof(rec));
	if (strcmp(rec, e->observed) != 0) {
		snprintf(e->observed, sizeof(e->observed), "%s", rec);
		e->observed_ns = sg_now_ns();
	}
	const char *h = spec_str(spec, "holderIdentity");
	if (strncmp(h, e->holder, sizeof(e->holder)) != 0) {
		pthread_mutex_lock(&e->mu);
		snprintf(e->holder, sizeof(e->holder), "%s", h);
		pthread_mutex_unlock(&e->mu);
		if (e->opt.on_new_leader)
			e->opt.on_new_leader(h, e->opt.arg);
	}
}

static json_t *new_spec(const char *holder, long seconds, const char *acquire, const char *renew,
                        json_int_t transitions)
{
	return json_pack("{s:s, s:i, s:s, s:s, s:I}", "holderIdentity", holder, "leaseDurationSeconds", (int)seconds,
	                 "acquireTime", acquire, "renewTime", renew, "leaseTransitions", transitions);
}

/* client-go tryAcquireOrRenew. true when we hold the lease afterwards. */
static bool try_acquire_or_renew(sg_lease_elector *e)
{
	char now[40];
	sg_kube_microtime_now(now, sizeof(now));
	sg_kube_ref ref = lease_ref(e, true);
	json_t *cur SG_CLEANUP(json_decrefp) = NULL;
	int rc = sg_kube_get(e->k, &ref, &cur);
	if (rc == SG_ENOTFOUND) {
		json_t *spec = new_spec(e->identity, e->lease_seconds, now, now, 0);
		json_t *lease SG_CLEANUP(json_decrefp) =
		    json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion", "coordination.k8s.io/v1", "kind", "Lease",
		              "metadata", "name", e->name, "namespace", e->ns, "spec", spec);
		sg_kube_ref coll = lease_ref(e, false);
		if (!lease || sg_kube_create(e->k, &coll, lease, NULL) != SG_OK)
			return false;
		observe(e, spec);
		return true;
	}
	if (rc != SG_OK) {
		sg_log(SG_LOG_WARN, "lease: cannot read the lease", SG_F_STR("lease", e->name),
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		return false;
	}
	json_t *spec = json_object_get(cur, "spec");
	if (!json_is_object(spec))
		spec = NULL;
	observe(e, spec);
	const char *holder = spec_str(spec, "holderIdentity");
	bool mine = strcmp(holder, e->identity) == 0;
	uint64_t lease_ns = (uint64_t)e->opt.lease_duration_ms * 1000000u;
	if (*holder && !mine && sg_now_ns() - e->observed_ns < lease_ns)
		return false; /* held by someone else and not expired */

	json_t *upd SG_CLEANUP(json_decrefp) = json_deep_copy(cur);
	json_t *fresh = mine ? new_spec(e->identity, e->lease_seconds, *spec_str(spec, "acquireTime") ?
	                                                                      spec_str(spec, "acquireTime") : now,
	                                now, spec_int(spec, "leaseTransitions"))
	                     : new_spec(e->identity, e->lease_seconds, now, now,
	                                spec_int(spec, "leaseTransitions") + 1);
	if (!upd || !fresh || json_object_set_new(upd, "spec", fresh) != 0)
		return false;
	/* upd keeps metadata.resourceVersion: a concurrent writer makes this a 409. */
	if (sg_kube_update(e->k, &ref, upd, NULL) != SG_OK) {
		if (sg_kube_last_status()->code != 409)
			sg_log(SG_LOG_WARN, "lease: update failed", SG_F_STR("lease", e->name),
			       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		return false;
	}
	observe(e, fresh);
	return true;
}

/* Gives the lease up if we hold it: holderIdentity "" and a 1 s duration. */
static void release(sg_lease_elector *e)
{
	sg_kube_ref ref = lease_ref(e, true);
	json_t *cur SG_CLEANUP(json_decrefp) = NULL;
	if (sg_kube_get(e->k, &ref, &cur) != SG_OK)
		return;
	json_t *spec = json_object_get(cur, "spec");
	if (strcmp(spec_str(spec, "holderIdentity"), e->identity) != 0)
		return;
	char now[40];
	sg_kube_microtime_now(now, sizeof(now));
	json_t *upd SG_CLEANUP(json_decrefp) = json_deep_copy(cur);
	json_t *fresh = new_spec("", 1, now, now, spec_int(spec, "leaseTransitions"));
	if (!upd || !fresh || json_object_set_new(upd, "spec", fresh) != 0)
		return;
	if (sg_kube_update(e->k, &ref, upd, NULL) != SG_OK)
		sg_log(SG_LOG_WARN, "lease: release failed", SG_F_STR("lease", e->name),
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
	else
		observe(e, fresh);
}

static bool nap(sg_lease_elector *e, uint64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&e->mu);
	while (!atomic_load(&e->stop))
		if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0)
			break;
	pthread_mutex_unlock(&e->mu);
	return !atomic_load(&e->stop);
}

static void *run(void *arg)
{
	sg_lease_elector *e = arg;
	const uint64_t retry = e->opt.retry_period_ms;
	while (!atomic_load(&e->stop)) {
		/* Acquire, with client-go's JitterFactor 1.2 between attempts. */
		while (!atomic_load(&e->stop) && !try_acquire_or_renew(e)) {
			uint64_t d = retry + (uint64_t)((double)retry * 1.2 * ((double)rand_r(&e->seed) / RAND_MAX));
			if (!nap(e, d))
				break;
		}
		if (atomic_load(&e->stop))
			break;
		atomic_store(&e->leader, true);
		sg_log(SG_LOG_INFO, "lease: started leading", SG_F_STR("lease", e->name),
		       SG_F_STR("identity", e->identity), SG_F_END);
		if (e->opt.on_started_leading)
			e->opt.on_started_leading(e->opt.arg);

		uint64_t last_ok = sg_now_ns();
		bool lost = false;
		while (nap(e, retry)) {
			if (try_acquire_or_renew(e)) {
				last_ok = sg_now_ns();
				continue;
			}
			if (sg_now_ns() - last_ok >= (uint64_t)e->opt.renew_deadline_ms * 1000000u) {
				lost = true;
				break;
			}
		}
		atomic_store(&e->leader, false);
		sg_log(SG_LOG_INFO, lost ? "lease: lost leadership" : "lease: stopped leading",
		       SG_F_STR("lease", e->name), SG_F_STR("identity", e->identity), SG_F_END);
		if (e->opt.on_stopped_leading)
			e->opt.on_stopped_leading(e->opt.arg);
		if (!lost && !e->opt.keep_on_stop)
			release(e);
	}
	return NULL;
}

static int check_identity(const char *what, const char *s)
{
	SG_ENSURE(s && *s && strlen(s) <= IDENTITY_MAX, SG_EINVAL, "lease: %s must be 1..%d bytes", what,
	          IDENTITY_MAX);
	for (; *s; s++)
		SG_ENSURE(*s > 0x20 && *s < 0x7f, SG_EINVAL, "lease: %s must be printable", what);
	return SG_OK;
}

int sg_lease_elector_new(sg_lease_elector **out, sg_kube *k, const sg_lease_opts *opt)
{
	*out = NULL;
	SG_ENSURE(k && opt, SG_EINVAL, "lease: no client or options");
	SG_TRY(check_identity("name", opt->name));
	SG_TRY(check_identity("identity", opt->identity));
	sg_lease_opts o = *opt;
	if (!o.lease_duration_ms)
		o.lease_duration_ms = 15000;
	if (!o.renew_deadline_ms)
		o.renew_deadline_ms = 10000;
	if (!o.retry_period_ms)
		o.retry_period_ms = 2000;
	SG_ENSURE(o.lease_duration_ms > o.renew_deadline_ms, SG_EINVAL,
	          "lease: leaseDuration must be greater than renewDeadline");
	SG_ENSURE((double)o.renew_deadline_ms > 1.2 * o.retry_period_ms, SG_EINVAL,
	          "lease: renewDeadline must be greater than 1.2 * retryPeriod");
	sg_lease_elector *e = calloc(1, sizeof(*e));
	SG_ENSURE(e, SG_EINTERNAL, "lease: out of memory");
	e->k = k;
	e->opt = o;
	e->ns = strdup(o.ns ? o.ns : sg_kube_namespace(k));
	e->name = strdup(o.name);
	e->identity = strdup(o.identity);
	e->lease_seconds = (long)((o.lease_duration_ms + 999) / 1000);
	e->seed = (unsigned)sg_now_ns();
	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (!e->ns || !e->name || !e->identity) {
		sg_lease_elector_free(e);
		SG_BAIL(SG_EINTERNAL, "lease: out of memory");
	}
	e->opt.ns = e->opt.name = e->opt.identity = NULL;
	*out = e;
	return SG_OK;
}

int sg_lease_elector_start(sg_lease_elector *e)
{
	SG_ENSURE(!e->running, SG_EINVAL, "lease: already running");
	atomic_store(&e->stop, false);
	SG_ENSURE(pthread_create(&e->th, NULL, run, e) == 0, SG_EINTERNAL, "lease: cannot start a thread");
	e->running = true;
	return SG_OK;
}

void sg_lease_elector_stop(sg_lease_elector *e)
{
	if (!e || !e->running)
		return;
	pthread_mutex_lock(&e->mu);
	atomic_store(&e->stop, true);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->th, NULL);
	e->running = false;
}

void sg_lease_elector_free(sg_lease_elector *e)
{
	if (!e)
		return;
	sg_lease_elector_stop(e);
	free(e->ns);
	free(e->name);
	free(e->identity);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

bool sg_lease_elector_is_leader(sg_lease_elector *e)
{
	return atomic_load(&e->leader);
}

void sg_lease_elector_holder(sg_lease_elector *e, char *out, size_t cap)
{
	pthread_mutex_lock(&e->mu);
	snprintf(out, cap, "%s", e->holder);
	pthread_mutex_unlock(&e->mu);
}
