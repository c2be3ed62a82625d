/*
 * sg_kube_ratelimit: the client-side rate limiter (sg_kube.h), a token
 * bucket (qps tokens a second, up to burst): each call of the client
 * takes a token before it is made, and when none is left it reserves one
 * and sleeps until it is due, so that waiting callers are served in the
 * order they asked. Apart because only the client (sg_kube.c) calls it;
 * the watch parser, which the client also calls, has no use for it.
 */
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_kube_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* ---- rate limiter ---- */

struct sg_kube_ratelimit {
	pthread_mutex_t mu;
	double qps, burst;
	double tokens; /* may go negative: tokens reserved by sleepers */
	uint64_t last_ns;
};

int sg_kube_ratelimit_new(sg_kube_ratelimit **out, double qps, int burst)
{
	*out = NULL;
	SG_ENSURE(isfinite(qps) && qps <= 1e6, SG_EINVAL, "kube: qps out of range");
	if (qps <= 0)
		return SG_OK; /* disabled: a NULL limiter never waits */
	SG_ENSURE(burst >= 1, SG_EINVAL, "kube: burst must be at least 1");
	sg_kube_ratelimit *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "kube: out of memory");
	pthread_mutex_init(&r->mu, NULL);
	r->qps = qps;
	r->burst = burst;
	r->tokens = burst;
	r->last_ns = sg_now_ns();
	*out = r;
	return SG_OK;
}

void sg_kube_ratelimit_wait(sg_kube_ratelimit *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	uint64_t now = sg_now_ns();
	r->tokens += (double)(now - r->last_ns) / 1e9 * r->qps;
	if (r->tokens > r->burst)
		r->tokens = r->burst;
	r->last_ns = now;
	r->tokens -= 1; /* reserve ours */
	double wait_s = r->tokens < 0 ? -r->tokens / r->qps : 0;
	pthread_mutex_unlock(&r->mu);
	if (wait_s > 0) {
		struct timespec ts = {(time_t)wait_s, (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
		while (nanosleep(&ts, &ts) != 0)
			;
	}
}

void sg_kube_ratelimit_free(sg_kube_ratelimit *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->mu);
	free(r);
}
