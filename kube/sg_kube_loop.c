/*
 * sg_kube_loop: many requests of one client in flight at once on one
 * thread (contract: sg_kube.h). The caller's thread prepares a request on
 * a pooled easy handle (sg_kube.c's own code, through sg_kube_impl.h),
 * puts it on the pending list and wakes the loop with curl_multi_wakeup;
 * the loop adds what is pending to its multi handle, lets libcurl move
 * every transfer on, and finishes each one that libcurl reports done on
 * its own thread, where the error detail and the Status are thread-local
 * like a blocking call's.
 *
 * Why: a user with dozens of calls in flight (the TokenReview authenticator
 * under a mesh's burst) otherwise keeps a thread blocked in each call, and
 * every answer costs a thread wake-up of its own; here answers that arrive
 * together are read in one pass, and HTTP/2 carries them on one connection.
 *
 * Lock: mu guards the pending list and the stopping flag only; libcurl's
 * multi handle is the loop thread's alone (curl_multi_wakeup is the one
 * call libcurl allows from another thread). Callbacks run with no lock
 * held. Stop: the flag is set under mu, the loop wakes, removes every
 * transfer and ends each (and each still pending) with SG_EBUSY before the
 * thread exits.
 */
#include "sg_guard.h"
#include "sg_kube_impl.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

/* How long the loop sleeps in curl_multi_poll with nothing to do; any new
 * request, libcurl's own timers or a stop wake it before. */
#define POLL_MS 1000

struct req {
	sg_kube_xfer *x;
	sg_kube_done_fn done;
	void *arg;
	struct req *next;              /* the pending list */
	struct req *fly_prev, *fly_next; /* in the multi handle (the loop thread's) */
};

struct sg_kube_loop {
	sg_kube *k;
	CURLM *m;
	pthread_t thread;
	pthread_mutex_t mu;
	struct req *pending; /* under mu, newest first */
	bool stopping;       /* under mu */
	struct req *flying;  /* the loop thread's: added to m, not yet done */
};

static void fly_add(sg_kube_loop *l, struct req *r)
{
	r->fly_prev = NULL;
	r->fly_next = l->flying;
	if (l->flying)
		l->flying->fly_prev = r;
	l->flying = r;
}

static void fly_remove(sg_kube_loop *l, struct req *r)
{
	if (r->fly_prev)
		r->fly_prev->fly_next = r->fly_next;
	else
		l->flying = r->fly_next;
	if (r->fly_next)
		r->fly_next->fly_prev = r->fly_prev;
}

/* Ends r: its answer or error on this thread, then the callback. */
static void end(struct req *r, CURLcode cc)
{
	json_t *answer = NULL;
	int rc = sg_kube_xfer_end(r->x, (int)cc, &answer);
	r->done(rc, answer, r->arg);
	free(r);
}

/* A request that was never performed: stopping. */
static void end_unsent(struct req *r)
{
	sg_kube_xfer_end(r->x, CURLE_ABORTED_BY_CALLBACK, NULL);
	sg_error_set(SG_EBUSY, "kube: the request loop is stopping");
	r->done(SG_EBUSY, NULL, r->arg);
	free(r);
}

static void *loop_main(void *arg)
{
	sg_kube_loop *l = arg;
	for (;;) {
		pthread_mutex_lock(&l->mu);
		struct req *add = l->pending;
		l->pending = NULL;
		bool stopping = l->stopping;
		pthread_mutex_unlock(&l->mu);
		while (add) {
			struct req *r = add;
			add = r->next;
			CURL *h = sg_kube_xfer_handle(r->x);
			if (stopping)
				end_unsent(r);
			else if (curl_easy_setopt(h, CURLOPT_PRIVATE, r) != CURLE_OK ||
			         curl_multi_add_handle(l->m, h) != CURLM_OK)
				end(r, CURLE_OUT_OF_MEMORY);
			else
				fly_add(l, r);
		}
		if (stopping)
			break;
		int running = 0;
		curl_multi_perform(l->m, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(l->m, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			CURL *h = msg->easy_handle;
			CURLcode cc = msg->data.result;
			struct req *r = NULL;
			curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&r);
			curl_multi_remove_handle(l->m, h);
			fly_remove(l, r);
			end(r, cc);
		}
		curl_multi_poll(l->m, NULL, 0, POLL_MS, NULL);
	}
	/* Stopping: every transfer still in flight ends now. */
	while (l->flying) {
		struct req *r = l->flying;
		fly_remove(l, r);
		curl_multi_remove_handle(l->m, sg_kube_xfer_handle(r->x));
		end_unsent(r);
	}
	return NULL;
}

int sg_kube_loop_new(sg_kube_loop **out, sg_kube *k)
{
	*out = NULL;
	SG_ENSURE(k, SG_EINVAL, "kube: a loop needs a client");
	sg_kube_loop *l = calloc(1, sizeof(*l));
	SG_ENSURE(l, SG_EINTERNAL, "kube: out of memory");
	l->k = k;
	l->m = curl_multi_init();
	if (!l->m) {
		free(l);
		SG_BAIL(SG_EINTERNAL, "kube: out of memory");
	}
	pthread_mutex_init(&l->mu, NULL);
	if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
		pthread_mutex_destroy(&l->mu);
		curl_multi_cleanup(l->m);
		free(l);
		SG_BAIL(SG_EINTERNAL, "kube: cannot start a request loop");
	}
	*out = l;
	return SG_OK;
}

void sg_kube_loop_free(sg_kube_loop *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stopping = true;
	pthread_mutex_unlock(&l->mu);
	curl_multi_wakeup(l->m);
	pthread_join(l->thread, NULL);
	curl_multi_cleanup(l->m);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

int sg_kube_loop_create(sg_kube_loop *l, const sg_kube_ref *ref, const json_t *body, sg_kube_done_fn done, void *arg)
{
	SG_ENSURE(l && done, SG_EINVAL, "kube: a loop request needs a loop and a callback");
	struct req *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "kube: out of memory");
	int rc = sg_kube_xfer_create(l->k, ref, body, &r->x);
	if (rc < 0) {
		free(r);
		return rc;
	}
	r->done = done;
	r->arg = arg;
	pthread_mutex_lock(&l->mu);
	bool stopping = l->stopping;
	if (!stopping) {
		r->next = l->pending;
		l->pending = r;
	}
	pthread_mutex_unlock(&l->mu);
	if (stopping) {
		sg_kube_xfer_end(r->x, CURLE_ABORTED_BY_CALLBACK, NULL);
		free(r);
		SG_BAIL(SG_EBUSY, "kube: the request loop is stopping");
	}
	curl_multi_wakeup(l->m);
	return SG_OK;
}
