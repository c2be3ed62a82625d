/*
 * sg_lease against a real kube-apiserver: two electors in one process, at
 * client-go's default timings: exactly one leads; stopping it releases the
 * Lease and the other takes over well within lease duration + retry period;
 * the Lease record (holder, transitions, times) follows client-go. Then a
 * leader that vanishes without releasing (short timings): the other takes
 * over once the lease has expired on its own clock.
 */
#include "sg_clock.h"
#include "sg_lease.h"
#include "sg_test.h"
#include "test_kube_env.h"

#include <stdio.h>
#include <string.h>

static sg_kube *k;

struct cb {
	atomic_int started, stopped;
};

static void started(void *arg)
{
	atomic_fetch_add(&((struct cb *)arg)->started, 1);
}

static void stopped(void *arg)
{
	atomic_fetch_add(&((struct cb *)arg)->stopped, 1);
}

static json_t *get_lease(const char *name)
{
	sg_kube_ref r = {.group = "coordination.k8s.io", .version = "v1", .resource = "leases", .ns = "default",
	                 .name = name};
	json_t *o = NULL;
	SG_CHECK_OK(sg_kube_get(k, &r, &o));
	return o;
}

static const char *spec_s(json_t *lease, const char *f)
{
	json_t *v = json_object_get(json_object_get(lease, "spec"), f);
	return json_is_string(v) ? json_string_value(v) : "";
}

static json_int_t spec_i(json_t *lease, const char *f)
{
	return json_integer_value(json_object_get(json_object_get(lease, "spec"), f));
}

/* Waits until exactly one of a, b leads; returns it (NULL on timeout). */
static sg_lease_elector *one_leader(sg_lease_elector *a, sg_lease_elector *b, unsigned ms)
{
	uint64_t deadline = sg_now_ns() + (uint64_t)ms * 1000000u;
	while (sg_now_ns() < deadline) {
		bool la = sg_lease_elector_is_leader(a), lb = sg_lease_elector_is_leader(b);
		if (la != lb)
			return la ? a : b;
		SG_CHECK(!(la && lb));
		sg_sleep_ms(20);
	}
	return NULL;
}

static void t_defaults_release(void)
{
	static struct cb ca, cb;
	sg_lease_opts oa = {.name = "signet-leader", .identity = "candidate-a", .on_started_leading = started,
	                    .on_stopped_leading = stopped, .arg = &ca};
	sg_lease_opts ob = oa;
	ob.identity = "candidate-b";
	ob.arg = &cb;
	sg_lease_elector *a = NULL, *b = NULL;
	SG_CHECK_OK(sg_lease_elector_new(&a, k, &oa));
	SG_CHECK_OK(sg_lease_elector_new(&b, k, &ob));
	if (!a || !b)
		exit(1);
	SG_CHECK_OK(sg_lease_elector_start(a));
	SG_CHECK_OK(sg_lease_elector_start(b));
	sg_lease_elector *leader = one_leader(a, b, 30000);
	SG_CHECK(leader != NULL);
	if (!leader)
		exit(1);
	/* Exactly one, for a while (renewals happen every 2 s): an invariant
	 * held over a span, which a fixed time is right for. */
	for (int i = 0; i < 40; i++) {
		SG_CHECK(sg_lease_elector_is_leader(a) != sg_lease_elector_is_leader(b));
		sg_sleep_ms(100);
	}
	sg_lease_elector *other = leader == a ? b : a;
	const char *lid = leader == a ? "candidate-a" : "candidate-b";
	const char *oid = leader == a ? "candidate-b" : "candidate-a";
	json_t *l1 = get_lease("signet-leader");
	SG_CHECK(strcmp(spec_s(l1, "holderIdentity"), lid) == 0);
	SG_CHECK(spec_i(l1, "leaseDurationSeconds") == 15);
	SG_CHECK(strcmp(spec_s(l1, "acquireTime"), spec_s(l1, "renewTime")) < 0); /* renewed, acquire kept */
	json_int_t transitions = spec_i(l1, "leaseTransitions");

	uint64_t t0 = sg_now_ns();
	sg_lease_elector_stop(leader); /* on_stopped_leading, then release */
	SG_CHECK(!sg_lease_elector_is_leader(leader));
	SG_WAIT_FOR(30000, sg_lease_elector_is_leader(other));
	double handover = (double)(sg_now_ns() - t0) / 1e9;
	printf("handover after release: %.2f s\n", handover);
	/* Released: the next retry (2 s + jitter) takes it. Without the
	 * release it would wait out the 15 s lease; the bound leaves a loaded
	 * machine room and still tells the two apart. */
	SG_CHECK(handover < 10.0);

	json_t *l2 = get_lease("signet-leader");
	SG_CHECK(strcmp(spec_s(l2, "holderIdentity"), oid) == 0);
	SG_CHECK(spec_i(l2, "leaseTransitions") == transitions + 1);
	SG_CHECK(spec_i(l2, "leaseDurationSeconds") == 15);
	sg_lease_elector_stop(other);
	json_t *l3 = get_lease("signet-leader");
	SG_CHECK(strcmp(spec_s(l3, "holderIdentity"), "") == 0);
	SG_CHECK(spec_i(l3, "leaseDurationSeconds") == 1);
	SG_CHECK(atomic_load(&ca.started) + atomic_load(&cb.started) == 2);
	SG_CHECK(atomic_load(&ca.stopped) == atomic_load(&ca.started));
	SG_CHECK(atomic_load(&cb.stopped) == atomic_load(&cb.started));
	json_decref(l1);
	json_decref(l2);
	json_decref(l3);
	sg_lease_elector_free(a);
	sg_lease_elector_free(b);
}

static void t_expiry_takeover(void)
{
	static struct cb ca, cb;
	sg_lease_opts oa = {.name = "signet-short", .identity = "short-a", .lease_duration_ms = 3000,
	                    .renew_deadline_ms = 2000, .retry_period_ms = 500, .keep_on_stop = true,
	                    .on_started_leading = started, .on_stopped_leading = stopped, .arg = &ca};
	sg_lease_opts ob = oa;
	ob.identity = "short-b";
	ob.arg = &cb;
	sg_lease_elector *a = NULL, *b = NULL;
	SG_CHECK_OK(sg_lease_elector_new(&a, k, &oa));
	SG_CHECK_OK(sg_lease_elector_new(&b, k, &ob));
	if (!a || !b)
		exit(1);
	SG_CHECK_OK(sg_lease_elector_start(a));
	SG_CHECK(one_leader(a, b, 30000) == a);
	SG_CHECK_OK(sg_lease_elector_start(b));
	/* An absence: b does not take a held lease over three of its retries.
	 * A fixed time is right for it; a slower b only tries less. */
	sg_sleep_ms(1500);
	SG_CHECK(sg_lease_elector_is_leader(a) && !sg_lease_elector_is_leader(b));
	uint64_t t0 = sg_now_ns();
	sg_lease_elector_stop(a); /* keep_on_stop: like a crash, the lease stays held */
	SG_WAIT_FOR(30000, sg_lease_elector_is_leader(b));
	double took = (double)(sg_now_ns() - t0) / 1e9;
	printf("takeover after expiry: %.2f s (lease 3 s, retry 0.5 s)\n", took);
	/* b times the lease from when it saw a's last renewal, at its first
	 * attempt after it (attempts are 0.5-1.1 s apart), and takes over at
	 * its first attempt after expiry (up to 1.1 s more); 2 s more for the
	 * calls and naps of a loaded machine under TSan. */
	SG_CHECK(took > 1.0 && took < 3.0 + 1.1 + 1.1 + 2.0);
	sg_lease_elector_free(b);
	sg_lease_elector_free(a);

	sg_lease_opts bad = oa;
	bad.renew_deadline_ms = 500; /* not > 1.2 * retry */
	sg_lease_elector *e = NULL;
	SG_CHECK_RC(sg_lease_elector_new(&e, k, &bad), SG_EINVAL);
	bad = oa;
	bad.lease_duration_ms = 2000; /* not > renew deadline */
	SG_CHECK_RC(sg_lease_elector_new(&e, k, &bad), SG_EINVAL);
}

static void t_zz_cleanup(void)
{
	static const char *const names[] = {"signet-leader", "signet-short"};
	for (size_t i = 0; i < 2; i++) {
		sg_kube_ref r = {.group = "coordination.k8s.io", .version = "v1", .resource = "leases", .ns = "default",
		                 .name = names[i]};
		SG_CHECK_OK(sg_kube_delete(k, &r, NULL));
	}
	sg_kube_free(k);
}

static void t_start(void)
{
	if (!kube_env_start()) {
		fprintf(stderr, "no API server\n");
		exit(1);
	}
	k = kube_env_client(0, 0); /* the default limiter: 20 qps, burst 50 */
	if (!k)
		exit(1);
}

SG_TEST_MAIN(SG_TEST(t_start), SG_TEST(t_defaults_release), SG_TEST(t_expiry_takeover), SG_TEST(t_zz_cleanup))
