/*
 * sg_review_budget: how many TokenReviews may be in flight at once, sized
 * to what the API server answers rather than to a fixed rate. The
 * tokenreview authenticator (sg_authn_kube.h) keeps one under its queue
 * lock; the controllers' clients keep their own QPS limiters, and no
 * review waits on those.
 *
 * The budget is a congestion window (AIMD, as TCP's, RFC 5681), counted
 * in reviews rather than bytes:
 *   start        SG_REVIEW_BUDGET_INITIAL (or max when smaller), in slow
 *                start: +1 for each fast answer, so it doubles per round
 *                of answers until the first sign of congestion;
 *   grow         after that, +1/budget for each fast answer: +1 per round;
 *                only while at least half the budget is in use, so a quiet
 *                period does not bank a budget no answer has vouched for;
 *   shrink       x0.5 on a 429 (the server refused work: API Priority and
 *                Fairness, or --max-requests-inflight), on a 5xx or on a
 *                timeout; x0.8 on a slow answer (the server still works,
 *                its queues are filling); at most once per round: answers
 *                to reviews started before the last cut were judged with
 *                it, and neither cut again nor grow;
 *   hold         a 429 (or a 5xx that says Retry-After) stops every start
 *                until its Retry-After has passed (1 s when it says none,
 *                at most SG_REVIEW_BUDGET_HOLD_MAX_S).
 * "Slow" is judged as LEDBAT (RFC 6817) judges delay: the base latency is
 * the least seen over the last one or two windows of
 * SG_REVIEW_BUDGET_BASE_WINDOW_S, what exceeds it is queueing, and an
 * answer is slow when its queueing exceeds the base itself or
 * SG_REVIEW_BUDGET_SLOW_MIN_MS, whichever is more (an API server that
 * answers in 2 ms is not slow at 6 ms; one that answers in 40 ms is at
 * 100 ms).
 *
 * Why AIMD and not a gradient (Netflix's concurrency-limits) or a fixed
 * number: the API server's capacity for reviews is whatever its priority
 * level has left, which changes with everyone else's load; AIMD converges
 * to a fair share among clients that all back off on the same signal, needs
 * no model of the server, and its one failure mode (probing one step past
 * the capacity each round) costs one 429 that the authenticator retries.
 *
 * Pure: no clock, no lock, no thread. The caller passes the time, holds
 * its own lock around every call, and decides what an answer was.
 */
#ifndef SG_REVIEW_BUDGET_H
#define SG_REVIEW_BUDGET_H

#include "sg_error.h"

#include <stdbool.h>
#include <stdint.h>

#define SG_REVIEW_BUDGET_INITIAL 8
#define SG_REVIEW_BUDGET_HOLD_MAX_S 60
#define SG_REVIEW_BUDGET_BASE_WINDOW_S 10
#define SG_REVIEW_BUDGET_SLOW_MIN_MS 25

/* What one review's answer says about the API server's load. */
typedef enum sg_review_outcome {
	SG_REVIEW_ANSWERED,   /* it answered (a verdict, or a refusal of our request): its latency counts */
	SG_REVIEW_THROTTLED,  /* 429 Too Many Requests */
	SG_REVIEW_OVERLOADED, /* 5xx, or no answer within the request timeout */
	SG_REVIEW_NO_SIGNAL,  /* a failure that says nothing of load (connection refused, TLS, ...) */
} sg_review_outcome;

/* Plain data, for the owner to embed; read it only under the owner's lock. */
typedef struct sg_review_budget {
	double limit;      /* reviews allowed in flight: 1..max (whole steps count) */
	unsigned max;      /* the ceiling: the setting */
	unsigned inflight; /* started and not ended */
	bool slow_start;   /* no congestion seen yet */
	uint64_t tickets;  /* reviews started so far */
	uint64_t cut_at;   /* tickets issued before the last cut */
	uint64_t hold_until_ns;
	uint64_t base_ns, base_prev_ns; /* least latency: this window, the one before (UINT64_MAX: none) */
	uint64_t window_end_ns;
	uint64_t throttled; /* 429s seen */
	uint64_t cuts;      /* times the budget shrank */
} sg_review_budget;

/* An empty budget with ceiling max (1 or more; 0 is taken as 1). */
SG_API void sg_review_budget_init(sg_review_budget *b, unsigned max);

/* Whether a review may start at now_ns. When not, *wait_ns (may be NULL)
 * is how long until a hold ends, or UINT64_MAX when only an ending review
 * can make room. */
SG_API bool sg_review_budget_may_start(const sg_review_budget *b, uint64_t now_ns, uint64_t *wait_ns);

/* Counts a review as started (whether or not may_start said yes: the
 * caller asks first) and returns its ticket for sg_review_budget_end. */
SG_API uint64_t sg_review_budget_start(sg_review_budget *b);

/* Ends the review of ticket at now_ns: what its answer said, how long it
 * took (latency_ns, for SG_REVIEW_ANSWERED) and the server's Retry-After
 * in seconds (0: none given). Adjusts the budget as the note above says. */
SG_API void sg_review_budget_end(sg_review_budget *b, uint64_t ticket, uint64_t now_ns, sg_review_outcome o,
                                 uint64_t latency_ns, long retry_after_s);

/* The budget in whole reviews (1..max). */
SG_API unsigned sg_review_budget_limit(const sg_review_budget *b);

#endif
