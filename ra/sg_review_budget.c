/*
 * sg_review_budget: the adaptive in-flight budget of TokenReviews (the
 * contract and the reasons for AIMD are in sg_review_budget.h). Three
 * small steps per answer: keep the base latency, decide whether the
 * answer is a sign of congestion, then cut or grow. The hold (Retry-After)
 * is a time before which nothing starts; may_start reads it, end sets it.
 */
#include "sg_review_budget.h"

#include <stddef.h>

#define NS_PER_S UINT64_C(1000000000)
#define NS_PER_MS UINT64_C(1000000)
#define CUT_REFUSED 0.5  /* 429, 5xx, timeout: the server said no */
#define CUT_SLOW 0.8     /* a slow answer: gentler, the server still answers */
#define HOLD_DEFAULT_S 1 /* a 429 without Retry-After: APF's and max-inflight's own value */

void sg_review_budget_init(sg_review_budget *b, unsigned max)
{
	*b = (sg_review_budget){0};
	b->max = max ? max : 1;
	b->limit = b->max < SG_REVIEW_BUDGET_INITIAL ? b->max : SG_REVIEW_BUDGET_INITIAL;
	b->slow_start = true;
	b->base_ns = b->base_prev_ns = UINT64_MAX;
}

unsigned sg_review_budget_limit(const sg_review_budget *b)
{
	unsigned n = (unsigned)b->limit; /* limit is in [1, max] */
	return n ? n : 1;
}

bool sg_review_budget_may_start(const sg_review_budget *b, uint64_t now_ns, uint64_t *wait_ns)
{
	uint64_t wait = 0;
	if (now_ns < b->hold_until_ns)
		wait = b->hold_until_ns - now_ns;
	else if (b->inflight >= sg_review_budget_limit(b))
		wait = UINT64_MAX;
	if (wait_ns)
		*wait_ns = wait;
	return wait == 0;
}

uint64_t sg_review_budget_start(sg_review_budget *b)
{
	b->inflight++;
	return ++b->tickets;
}

/* The least latency of the last one or two windows: a base that follows
 * the server when it moves for good, within two windows. */
static uint64_t base_latency(sg_review_budget *b, uint64_t now_ns, uint64_t sample_ns)
{
	if (now_ns >= b->window_end_ns) {
		b->base_prev_ns = b->base_ns;
		b->base_ns = UINT64_MAX;
		b->window_end_ns = now_ns + SG_REVIEW_BUDGET_BASE_WINDOW_S * NS_PER_S;
	}
	if (sample_ns < b->base_ns)
		b->base_ns = sample_ns;
	return b->base_ns < b->base_prev_ns ? b->base_ns : b->base_prev_ns;
}

static bool slow(sg_review_budget *b, uint64_t now_ns, uint64_t latency_ns)
{
	uint64_t base = base_latency(b, now_ns, latency_ns);
	uint64_t allowed =
	    base > SG_REVIEW_BUDGET_SLOW_MIN_MS * NS_PER_MS ? base : SG_REVIEW_BUDGET_SLOW_MIN_MS * NS_PER_MS;
	return latency_ns - base > allowed; /* base <= latency_ns: this sample is in it */
}

static void cut(sg_review_budget *b, uint64_t ticket, double factor)
{
	if (ticket <= b->cut_at)
		return; /* started before the last cut: that cut already answered this round */
	b->cut_at = b->tickets;
	b->slow_start = false;
	b->limit *= factor;
	if (b->limit < 1)
		b->limit = 1;
	b->cuts++;
}

static void grow(sg_review_budget *b, uint64_t ticket)
{
	/* Not for a review started before the last cut (its round was judged),
	 * nor while less than half the budget is in use: inflight still counts
	 * this review, and with a backlog the budget is full when one ends. */
	if (ticket <= b->cut_at || 2.0 * b->inflight < b->limit)
		return;
	b->limit += b->slow_start ? 1.0 : 1.0 / b->limit;
	if (b->limit > b->max)
		b->limit = b->max;
}

static void hold(sg_review_budget *b, uint64_t now_ns, long retry_after_s, bool always)
{
	if (retry_after_s <= 0 && !always)
		return;
	uint64_t s = retry_after_s <= 0 ? HOLD_DEFAULT_S
	                                : (retry_after_s > SG_REVIEW_BUDGET_HOLD_MAX_S ? SG_REVIEW_BUDGET_HOLD_MAX_S
	                                                                               : (uint64_t)retry_after_s);
	uint64_t until = now_ns + s * NS_PER_S;
	if (until > b->hold_until_ns)
		b->hold_until_ns = until;
}

void sg_review_budget_end(sg_review_budget *b, uint64_t ticket, uint64_t now_ns, sg_review_outcome o,
                          uint64_t latency_ns, long retry_after_s)
{
	switch (o) {
	case SG_REVIEW_ANSWERED:
		if (slow(b, now_ns, latency_ns))
			cut(b, ticket, CUT_SLOW);
		else
			grow(b, ticket);
		break;
	case SG_REVIEW_THROTTLED:
		b->throttled++;
		hold(b, now_ns, retry_after_s, true);
		cut(b, ticket, CUT_REFUSED);
		break;
	case SG_REVIEW_OVERLOADED:
		hold(b, now_ns, retry_after_s, false);
		cut(b, ticket, CUT_REFUSED);
		break;
	case SG_REVIEW_NO_SIGNAL:
		break;
	}
	if (b->inflight)
		b->inflight--;
}
