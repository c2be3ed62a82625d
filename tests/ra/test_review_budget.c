/*
 * The TokenReview budget (ra/sg_review_budget.h) on its own, with the
 * clock and the answers given by the test: it starts at 8 (or the ceiling),
 * doubles per round in slow start, grows by one per round after the first
 * cut and only while half of it is in use; a 429 halves it once per round
 * (not once per answer of a round already in flight) and holds every
 * start for its Retry-After (1 s without one, 60 s at most); a 5xx or a
 * timeout halves it, holding only when the server said Retry-After; a
 * slow answer (queueing beyond the base latency and beyond 25 ms) cuts it
 * to 4/5; the base follows the server within two windows; it never goes
 * below 1 or above the ceiling; failures that say nothing of load change
 * nothing. The authenticator that keeps it is tested against a real API
 * server in test_kube_tokenreview.c.
 */
#include "sg_review_budget.h"
#include "sg_test.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MS UINT64_C(1000000)
#define S UINT64_C(1000000000)
#define T0 (UINT64_C(1000) * S)

/* The budget with a backlog: reviews start whenever it has room (as the
 * authenticator's workers do while its queue is not empty), and end
 * oldest first. */
struct sim {
	sg_review_budget b;
	uint64_t q[512];
	size_t head, n;
};

static void sim_init(struct sim *s, unsigned max)
{
	memset(s, 0, sizeof(*s));
	sg_review_budget_init(&s->b, max);
}

static void fill(struct sim *s, uint64_t now)
{
	while (s->n < 512 && sg_review_budget_may_start(&s->b, now, NULL))
		s->q[(s->head + s->n++) % 512] = sg_review_budget_start(&s->b);
}

/* k answers at now, the budget topped up before each. */
static void answers(struct sim *s, unsigned k, uint64_t now, sg_review_outcome o, uint64_t lat, long retry_after)
{
	for (unsigned i = 0; i < k; i++) {
		fill(s, now);
		if (!s->n)
			return;
		uint64_t t = s->q[s->head];
		s->head = (s->head + 1) % 512;
		s->n--;
		sg_review_budget_end(&s->b, t, now, o, lat, retry_after);
	}
}

/* Ends what is in flight, starting nothing. */
static void drain(struct sim *s, uint64_t now, sg_review_outcome o, uint64_t lat)
{
	while (s->n) {
		uint64_t t = s->q[s->head];
		s->head = (s->head + 1) % 512;
		s->n--;
		sg_review_budget_end(&s->b, t, now, o, lat, 0);
	}
}

/* One review alone, start to end. */
static void single(sg_review_budget *b, uint64_t now, sg_review_outcome o, uint64_t lat, long retry_after)
{
	uint64_t t = sg_review_budget_start(b);
	sg_review_budget_end(b, t, now, o, lat, retry_after);
}

static void t_initial(void)
{
	sg_review_budget b;
	sg_review_budget_init(&b, 64);
	SG_CHECK(sg_review_budget_limit(&b) == SG_REVIEW_BUDGET_INITIAL && b.inflight == 0);
	sg_review_budget_init(&b, 3);
	SG_CHECK(sg_review_budget_limit(&b) == 3);
	sg_review_budget_init(&b, 0);
	SG_CHECK(sg_review_budget_limit(&b) == 1 && b.max == 1);

	/* may_start: room, then full. */
	sg_review_budget_init(&b, 2);
	uint64_t wait = 7;
	SG_CHECK(sg_review_budget_may_start(&b, T0, &wait) && wait == 0);
	(void)sg_review_budget_start(&b);
	(void)sg_review_budget_start(&b);
	SG_CHECK(!sg_review_budget_may_start(&b, T0, &wait) && wait == UINT64_MAX);
	SG_CHECK(b.inflight == 2);
}

static void t_slow_start_and_growth(void)
{
	struct sim s;
	sim_init(&s, 64);
	/* Slow start: +1 per fast answer, 8 -> 16 -> 32 -> 64, then capped. */
	answers(&s, 8, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 16);
	answers(&s, 16, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 32);
	answers(&s, 100, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 64 && s.b.cuts == 0 && s.b.inflight == 63); /* the last one ended */

	/* A budget not in use does not grow: one review at a time. */
	sg_review_budget b;
	sg_review_budget_init(&b, 64);
	for (int i = 0; i < 100; i++)
		single(&b, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&b) == SG_REVIEW_BUDGET_INITIAL && b.inflight == 0);

	/* After a cut, +1 per round of answers (additive); the answers of the
	 * round the cut judged change nothing. */
	sim_init(&s, 64);
	answers(&s, 1, T0, SG_REVIEW_THROTTLED, 0, 0); /* 8 in flight: -> 4, hold 1 s */
	SG_CHECK(sg_review_budget_limit(&s.b) == 4 && !s.b.slow_start && s.n == 7);
	drain(&s, T0, SG_REVIEW_ANSWERED, 2 * MS);
	SG_CHECK(s.b.limit == 4.0);
	uint64_t now = T0 + 2 * S;
	answers(&s, 4, now, SG_REVIEW_ANSWERED, 2 * MS, 0); /* 4 + 1/4 + 1/4.25 + ... */
	SG_CHECK(s.b.limit > 4.9 && s.b.limit < 5.0);
	answers(&s, 1, now, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 5);
	answers(&s, 5, now, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 6 && s.b.cuts == 1);
}

static void t_throttled(void)
{
	struct sim s;
	sim_init(&s, 64);
	answers(&s, 24, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 32);
	fill(&s, T0);

	/* 32 in flight, every one answered 429: one cut for the round, not 32. */
	answers(&s, 32, T0, SG_REVIEW_THROTTLED, 0, 3);
	SG_CHECK(sg_review_budget_limit(&s.b) == 16 && s.b.cuts == 1 && s.b.throttled == 32 && s.n == 0);
	/* Retry-After 3: nothing starts for 3 s, then it does. */
	uint64_t wait = 0;
	SG_CHECK(!sg_review_budget_may_start(&s.b, T0 + 1 * S, &wait) && wait == 2 * S);
	SG_CHECK(sg_review_budget_may_start(&s.b, T0 + 3 * S, &wait) && wait == 0);

	/* Reviews started after the cut are a new round: their 429 cuts again,
	 * once; without a Retry-After the hold is 1 s. */
	answers(&s, 2, T0 + 3 * S, SG_REVIEW_THROTTLED, 0, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 8 && s.b.cuts == 2);
	SG_CHECK(!sg_review_budget_may_start(&s.b, T0 + 3 * S + S / 2, &wait) && wait == S / 2);

	/* Started before the last cut and answered after it: no second cut;
	 * started after it: a cut. */
	sg_review_budget b;
	sg_review_budget_init(&b, 64);
	uint64_t early = sg_review_budget_start(&b);
	uint64_t t1 = sg_review_budget_start(&b);
	sg_review_budget_end(&b, t1, T0, SG_REVIEW_THROTTLED, 0, 0);
	SG_CHECK(sg_review_budget_limit(&b) == 4);
	uint64_t late = sg_review_budget_start(&b);
	sg_review_budget_end(&b, early, T0, SG_REVIEW_THROTTLED, 0, 0);
	SG_CHECK(sg_review_budget_limit(&b) == 4 && b.cuts == 1);
	sg_review_budget_end(&b, late, T0, SG_REVIEW_THROTTLED, 0, 0);
	SG_CHECK(sg_review_budget_limit(&b) == 2 && b.cuts == 2 && b.inflight == 0 && b.throttled == 3);

	/* A Retry-After beyond the cap holds for the cap. */
	single(&b, T0, SG_REVIEW_THROTTLED, 0, 86400);
	SG_CHECK(!sg_review_budget_may_start(&b, T0, &wait) && wait == SG_REVIEW_BUDGET_HOLD_MAX_S * S);

	/* Never below 1, and 1 still starts once the hold is over. */
	for (int i = 0; i < 20; i++)
		single(&b, T0, SG_REVIEW_THROTTLED, 0, 1);
	SG_CHECK(sg_review_budget_limit(&b) == 1 && b.limit >= 1.0);
	SG_CHECK(sg_review_budget_may_start(&b, T0 + SG_REVIEW_BUDGET_HOLD_MAX_S * S, NULL));
}

static void t_overloaded_and_no_signal(void)
{
	sg_review_budget b;
	sg_review_budget_init(&b, 64);
	single(&b, T0, SG_REVIEW_OVERLOADED, 0, 0); /* a 5xx or a timeout, no Retry-After: no hold */
	SG_CHECK(sg_review_budget_limit(&b) == 4 && sg_review_budget_may_start(&b, T0, NULL) && b.throttled == 0);
	single(&b, T0, SG_REVIEW_OVERLOADED, 0, 2); /* 503 with Retry-After: 2 */
	uint64_t wait = 0;
	SG_CHECK(sg_review_budget_limit(&b) == 2 && !sg_review_budget_may_start(&b, T0, &wait) && wait == 2 * S);

	sg_review_budget_init(&b, 64);
	for (int i = 0; i < 8; i++)
		single(&b, T0, SG_REVIEW_NO_SIGNAL, 0, 30);
	SG_CHECK(sg_review_budget_limit(&b) == 8 && b.cuts == 0 && b.hold_until_ns == 0 && b.inflight == 0);
}

static void t_latency(void)
{
	struct sim s;
	sim_init(&s, 64);
	/* Base 2 ms. 20 ms is 18 ms of queueing, under the 25 ms floor: fast. */
	answers(&s, 8, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	answers(&s, 16, T0, SG_REVIEW_ANSWERED, 20 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 32 && s.b.cuts == 0);
	/* 40 ms: 38 ms of queueing: slow. One cut to 4/5 for the round, and no hold. */
	answers(&s, 32, T0, SG_REVIEW_ANSWERED, 40 * MS, 0);
	SG_CHECK(s.b.cuts == 1 && sg_review_budget_limit(&s.b) == 25 && !s.b.slow_start && s.b.hold_until_ns == 0);

	/* A server whose base is 100 ms: 190 ms is not slow (90 < 100), 210 ms is. */
	sim_init(&s, 64);
	answers(&s, 8, T0, SG_REVIEW_ANSWERED, 100 * MS, 0);
	answers(&s, 16, T0, SG_REVIEW_ANSWERED, 190 * MS, 0);
	SG_CHECK(sg_review_budget_limit(&s.b) == 32 && s.b.cuts == 0);
	answers(&s, 1, T0, SG_REVIEW_ANSWERED, 210 * MS, 0);
	SG_CHECK(s.b.cuts == 1);

	/* The base follows a server that moved for good: 60 ms answers are
	 * slow against the last window's 2 ms, and normal two windows on. */
	sim_init(&s, 64);
	uint64_t w = SG_REVIEW_BUDGET_BASE_WINDOW_S * S;
	answers(&s, 8, T0, SG_REVIEW_ANSWERED, 2 * MS, 0);
	answers(&s, 1, T0 + w, SG_REVIEW_ANSWERED, 60 * MS, 0);
	SG_CHECK(s.b.cuts == 1);
	double after = s.b.limit;
	drain(&s, T0 + 2 * w, SG_REVIEW_ANSWERED, 60 * MS);
	answers(&s, 20, T0 + 2 * w, SG_REVIEW_ANSWERED, 60 * MS, 0);
	SG_CHECK(s.b.cuts == 1 && s.b.limit > after + 1);
}

SG_TEST_MAIN(SG_TEST(t_initial), SG_TEST(t_slow_start_and_growth), SG_TEST(t_throttled),
             SG_TEST(t_overloaded_and_no_signal), SG_TEST(t_latency))
