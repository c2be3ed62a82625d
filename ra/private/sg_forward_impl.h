/*
 * sg_forward_impl: what the files of sg_forward share and nobody else
 * sees: the forwarder (struct sg_forward), a request (struct req), the
 * mesh roots, and the calls one file makes into another. Not installed,
 * not public: on sg_ra's private include path only. The shared functions
 * carry a forward_ prefix, so that none of them can clash with another
 * symbol of ra/ or of another layer at link time.
 *
 * The files: sg_forward.c, the forwarder (the map, ending a request, the
 * informer's handlers, the workers, the timer, submit, life; its design
 * comment explains the whole); sg_forward_answer.c, what an issuer's
 * answer says and whether it is one to hand on; sg_forward_sweep.c, the
 * requests a crash left behind; sg_forward_annotations.c, the additional
 * annotations' setting.
 */
#ifndef SG_FORWARD_IMPL_H
#define SG_FORWARD_IMPL_H

#include "sg_forward.h"

#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_strmap.h"
#include "sg_x509.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NAME_PREFIX "signet-"
#define NAME_RANDOM 16 /* bytes: 32 hex digits */
#define NAME_LEN (sizeof(NAME_PREFIX) - 1 + 2 * NAME_RANDOM)

enum fate { PENDING, ENDED };
/* Where the request's create is; see the design note. */
enum create { C_QUEUED, C_POSTING, C_POSTED, C_MAYBE, C_NONE };
enum job { JOB_NONE, JOB_CREATE, JOB_DELETE };

struct req {
	atomic_uint refs;
	sg_strmap_node h;        /* in the map, keyed by name */
	struct req *prev, *next; /* pending list, in submit order */
	struct req *qnext;       /* job queue or retry list */
	enum job job;
	unsigned attempts;  /* deletes tried */
	uint64_t retry_at;  /* on the retry list: when it is due */
	enum fate fate;     /* under mu */
	enum create create; /* under mu */
	uint64_t t0, deadline;
	bool (*cancelled)(void *arg);
	void *cancel_arg;
	sg_forward_done_fn done;
	void *arg;
	json_t *body; /* the CertificateRequest; the worker that posts it frees it */
	uint8_t *csr; /* DER, for the key check */
	size_t csr_len;
	char name[NAME_LEN + 1];
};

struct roots {
	atomic_uint refs;
	sg_x509_bundle *b;
};

struct sg_forward {
	sg_kube *kube;
	char *ns, *issuer_name, *issuer_kind, *issuer_group, *replica_id, *selector;
	bool preserve;
	json_t *annotations; /* the additional annotations (an object, maybe empty) */
	unsigned max_in_flight, timeout_ms, nworkers;
	unsigned orphan_age_s, sweep_ms;
	int64_t born_s; /* wall-clock second this forwarder was made */

	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* workers: a job, or stopping */
	pthread_cond_t tick_cv; /* the timer: stopping (CLOCK_MONOTONIC) */
	sg_strmap map;
	struct req *head, *tail; /* pending */
	struct req *qhead, **qtail;
	struct req *retry;
	size_t pending;
	bool stopping;      /* no submits; the timer ends */
	bool draining;      /* workers end when the queue is empty */
	uint64_t drain_end; /* after it, queued deletes are dropped */

	pthread_t *workers;
	unsigned workers_started;
	pthread_t timer;
	bool timer_started;
	pthread_t sweeper;
	bool sweeper_started;
	struct req **scratch; /* the timer's: max_in_flight references */
	sg_kube_informer *inf;

	pthread_mutex_t roots_mu;
	struct roots *roots;

	atomic_uint_fast64_t submitted, rejected, issued, refused, timeouts, errors, in_flight;
	atomic_uint_fast64_t creates, deletes, api_errors, left_behind, swept;
	atomic_uint_fast64_t warn_last, warn_suppressed;
};

/* ------------------------------------------------------------------ */
/* The forwarder (sg_forward.c)                                       */

static inline void count(atomic_uint_fast64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* At most one warning a second; the ones left out are counted into the
 * next. */
void forward_warn(sg_forward *f, const char *msg, const char *name, const char *why);
/* Under mu: the pending request of that name, or NULL. */
struct req *forward_map_find(sg_forward *f, const char *name);
/* The CertificateRequest of that name (NULL: the collection). */
sg_kube_ref forward_cr_ref(const sg_forward *f, const char *name);
/* This thread's last error as a message for a request, with an API
 * server's message that quotes the request withheld. */
void forward_api_message(char *out, size_t cap);
/* Waits ms or until stop; false once stopping. */
bool forward_nap(sg_forward *f, unsigned ms);

/* ------------------------------------------------------------------ */
/* The answer (sg_forward_answer.c)                                   */

/* Drops a reference to the roots (NULL is fine). */
void forward_roots_put(struct roots *r);
/* status.certificate checked as cert-manager and istio-csr check it;
 * SG_EPROTO with the reason. On success *chain is the answer (free()). */
int forward_check_answer(sg_forward *f, const struct req *e, const char *b64, size_t n, char **chain, size_t *len);
/* The terminal condition of a CertificateRequest, in cert-manager's order:
 * true with *what and *why set, or false. */
bool forward_terminal(const json_t *status, const char **what, const char **why);

/* ------------------------------------------------------------------ */
/* Additional annotations (sg_forward_annotations.c)                  */

/* The object of the setting's text (NULL or "": empty); SG_EINVAL with
 * the reason. Caller owns *out (json_decref). */
int forward_annotations_parse(const char *text, json_t **out);

/* ------------------------------------------------------------------ */
/* What a crash left behind (sg_forward_sweep.c)                      */

/* The sweeper thread (arg: the forwarder), when requests are not
 * preserved. */
void *forward_sweeper(void *arg);

#endif
