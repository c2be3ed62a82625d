/*
 * sg_forward: RA mode, workload CSRs forwarded to a cert-manager issuer as
 * CertificateRequests (contract: sg_forward.h; the flow is istio-csr's
 * pkg/certmanager/certmanager.go, the answer's checks are cert-manager's
 * issuing controller's, see the reference contract cert-manager-issuer.md
 * §1.4 and §2.4).
 *
 * One mutex guards everything that moves:
 *
 *   the pending map   a hash table (common/sg_strmap) of the requests still
 *                     waiting, keyed by their name ("signet-" + 32 random
 *                     hex digits, so the first 16 digits are the hash), sized
 *                     at creation for twice max_in_flight (it never grows),
 *                     plus a list of them in
 *                     submit order for the timer. A request enters it in
 *                     submit, before its create is even queued, so no
 *                     informer event can come before the request is known.
 *   the job queue     a FIFO of requests to create or delete, taken by the
 *                     worker threads, which make the blocking API call with
 *                     no lock held; a failed delete waits on a retry list
 *                     that the timer moves back into the queue when due.
 *
 * A request ends exactly once, in finish(): under the mutex its fate turns
 * from PENDING to ENDED and it leaves the map, and whoever made that change
 * calls done, with no lock held. The informer (answers, refusals,
 * deletions), the workers (failed creates), the timer (deadlines and
 * cancelled callers) and free (shutting down) all go through it, so they
 * may race freely: the losers see ENDED and drop what they found.
 *
 * Who deletes the CertificateRequest depends on where its create is when
 * the request ends, which the create state records (under the mutex):
 * still queued, the worker skips the POST; being posted, the worker queues
 * the delete when the POST returns; posted (or maybe posted: the call
 * failed without an answer, or with a 5xx), finish queues it. A 409 or any
 * other refusal means there is nothing of ours to delete.
 *
 * A request is shared by reference count: one reference for the map, one
 * for the queue (or the retry list) while it is there, and short-lived ones
 * that the informer handler and the timer take while they work on it
 * outside the lock. Its bytes (the body to post, the CSR's DER for the key
 * check) never change after submit.
 *
 * Checking an answer (informer thread, no lock held): status.certificate
 * is base64 of PEM; the PEM must parse as certificates (signer/sg_x509),
 * the first one's key must be the CSR's, and the chain must verify against
 * one of the mesh roots now (an intermediate among them is an anchor as
 * it stands, as in istio-csr's Go pool). The answer handed to done is leaf and intermediates,
 * each re-written as PEM from its DER (so text between blocks goes), with
 * any self-signed certificate after the leaf left out: cert-manager says
 * issuers SHOULD omit the root, and the caller appends its own bundle.
 *
 * Nothing here logs a CSR, and an API server message that quotes the
 * request body is withheld.
 *
 * The files: this one is the forwarder; checking an answer is
 * sg_forward_answer.c and the crash sweep sg_forward_sweep.c, sharing
 * private/sg_forward_impl.h.
 */
#include "sg_forward_impl.h"

#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_csr.h"
#include "sg_guard.h"
#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_strmap.h"
#include "sg_x509.h"

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPLICA_RANDOM 8 /* bytes of a random replica id */
#define TICK_MS 100u
#define DELETE_ATTEMPTS 3
#define DELETE_RETRY_MS 500u /* doubled per attempt */
#define DRAIN_MS 5000u       /* free's bound for the last deletes (plus one call) */
#define WORKERS_MAX 64u
#define IN_FLIGHT_MAX 100000u
#define TIMEOUT_MAX_MS (3600u * 1000u)
#define IDENTITY_MAX 4096
#define TTL_MAX (INT64_C(100) * 365 * 86400)
#define SHOWN_MAX 256 /* an issuer's or API server's words quoted in a message */
#define WARN_INTERVAL_NS (UINT64_C(1000000000))
/* base64 of "-----BEGIN": the request body quoted back in a message. */
#define REQUEST_QUOTE "LS0tLS1CRUdJTi"

static const char api_group[] = "cert-manager.io";
static const char api_version[] = "cert-manager.io/v1";
static const char resource[] = "certificaterequests";

/* ---- small helpers ---- */

/* Copies at most SHOWN_MAX bytes of s as printable ASCII ('?' for anything
 * else), "..." when cut: another party's words, fit for a message. */
static void shown(char *out, size_t cap, const char *s)
{
	size_t n = 0, i = 0;
	if (!s)
		s = "";
	for (; s[i] && i < SHOWN_MAX && n + 1 < cap; i++)
		out[n++] = s[i] >= 0x20 && s[i] <= 0x7e ? s[i] : '?';
	out[n] = '\0';
	if (s[i] && n + 4 <= cap)
		memcpy(out + n, "...", 4);
}

/* A label value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends. */
static bool printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

static int random_hex(char *out, size_t bytes)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t r[NAME_RANDOM];
	SG_TRY(sg_crypto_random(r, bytes));
	for (size_t i = 0; i < bytes; i++) {
		out[2 * i] = hex[r[i] >> 4];
		out[2 * i + 1] = hex[r[i] & 15];
	}
	out[2 * bytes] = '\0';
	return SG_OK;
}

static void wake_at(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* At most one warning a second; the ones left out are counted into the
 * next. */
void forward_warn(sg_forward *f, const char *msg, const char *name, const char *why)
{
	uint64_t now = sg_now_ns();
	uint_fast64_t last = atomic_load_explicit(&f->warn_last, memory_order_relaxed);
	if ((last && now - last < WARN_INTERVAL_NS) ||
	    !atomic_compare_exchange_strong_explicit(&f->warn_last, &last, now, memory_order_relaxed,
	                                             memory_order_relaxed)) {
		count(&f->warn_suppressed);
		return;
	}
	uint64_t quiet = atomic_exchange_explicit(&f->warn_suppressed, 0, memory_order_relaxed);
	sg_log(SG_LOG_WARN, msg, SG_F_STR("request", name), SG_F_STR("namespace", f->ns),
	       SG_F_STR("issuer", f->issuer_name), SG_F_STR("kind", f->issuer_kind), SG_F_STR("reason", why),
	       SG_F_INT("suppressed", quiet), SG_F_END);
}

/* ---- requests and the map ---- */

static void req_unref(struct req *e)
{
	if (!e || atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
		return;
	json_decref(e->body);
	free(e->csr);
	free(e);
}

static void req_ref(struct req *e)
{
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The bucket hash of a name of ours (its first 16 random digits); false
 * for any other name. */
static bool name_hash(const char *name, uint64_t *h)
{
	if (!name || strlen(name) != NAME_LEN || strncmp(name, NAME_PREFIX, sizeof(NAME_PREFIX) - 1) != 0)
		return false;
	const char *d = name + sizeof(NAME_PREFIX) - 1;
	uint64_t v = 0;
	for (size_t i = 0; i < 2 * NAME_RANDOM; i++) {
		int x = hexval(d[i]);
		if (x < 0)
			return false;
		if (i < 16)
			v = v << 4 | (uint64_t)x;
	}
	*h = v;
	return true;
}

/* The map's hash: only our own names are ever hashed (forward_map_find checks). */
static size_t map_hash(const char *name)
{
	uint64_t h = 0;
	(void)name_hash(name, &h);
	return (size_t)h;
}

/* Under mu. */
struct req *forward_map_find(sg_forward *f, const char *name)
{
	uint64_t h;
	if (!name_hash(name, &h))
		return NULL; /* not a name of ours: not looked up */
	sg_strmap_node *n = sg_strmap_find(&f->map, name);
	return n ? SG_STRMAP_ENTRY(n, struct req, h) : NULL;
}

/* Under mu: into the map and the pending list. */
static void map_insert(sg_forward *f, struct req *e)
{
	e->h.key = e->name; /* our own name: name_hash always takes it */
	sg_strmap_insert(&f->map, &e->h);
	e->prev = f->tail;
	e->next = NULL;
	if (f->tail)
		f->tail->next = e;
	else
		f->head = e;
	f->tail = e;
	f->pending++;
	atomic_store_explicit(&f->in_flight, f->pending, memory_order_relaxed);
}

/* Under mu. */
static void map_remove(sg_forward *f, struct req *e)
{
	(void)sg_strmap_remove(&f->map, &e->h);
	if (e->prev)
		e->prev->next = e->next;
	else
		f->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		f->tail = e->prev;
	e->prev = e->next = NULL; /* sg_strmap_remove cleared e->h.next */
	f->pending--;
	atomic_store_explicit(&f->in_flight, f->pending, memory_order_relaxed);
}

/* Under mu: appends e as a job; the queue takes a reference. */
static void enqueue(sg_forward *f, struct req *e, enum job job)
{
	req_ref(e);
	e->job = job;
	e->qnext = NULL;
	*f->qtail = e;
	f->qtail = &e->qnext;
	pthread_cond_signal(&f->work_cv);
}

/* ---- ending a request ---- */

static void count_outcome(sg_forward *f, int rc)
{
	if (rc == SG_OK)
		count(&f->issued);
	else if (rc == SG_EDENIED)
		count(&f->refused);
	else if (rc == SG_ETIMEOUT)
		count(&f->timeouts);
	else
		count(&f->errors);
}

/* Ends e with rc, exactly once: false when it had ended already. On
 * failure err is the detail (this thread's becomes a copy of it). Queues
 * the delete of what may have been created. The caller holds a reference. */
static bool finish(sg_forward *f, struct req *e, int rc, const char *chain, size_t len, const sg_error *err)
{
	pthread_mutex_lock(&f->mu);
	if (e->fate != PENDING) {
		pthread_mutex_unlock(&f->mu);
		return false;
	}
	e->fate = ENDED;
	map_remove(f, e);
	if (!f->preserve && (e->create == C_POSTED || e->create == C_MAYBE))
		enqueue(f, e, JOB_DELETE);
	pthread_mutex_unlock(&f->mu);
	count_outcome(f, rc);
	if (rc != SG_OK && err)
		sg_error_restore(err);
	e->done(rc, rc == SG_OK ? chain : NULL, rc == SG_OK ? len : 0, rc == SG_OK ? NULL : err, e->arg);
	req_unref(e); /* the map's */
	return true;
}

/* finish() with an error made here, and its log line: a refusal is the
 * issuer's answer (info), a caller that went away is no fault (debug),
 * the rest are warnings (at most one a second). */
static SG_PRINTF(5, 6) void fail(sg_forward *f, struct req *e, int rc, sg_log_level level, const char *fmt, ...)
{
	sg_error err = {.code = rc, .file = __FILE__, .line = __LINE__};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
	va_end(ap);
	if (!finish(f, e, rc, NULL, 0, &err))
		return;
	if (level == SG_LOG_WARN)
		forward_warn(f, rc == SG_ETIMEOUT ? "certificate request timed out" : "certificate request failed",
		             e->name, err.msg);
	else
		sg_log(level, rc == SG_EDENIED ? "certificate request refused" : "certificate request abandoned",
		       SG_F_STR("request", e->name), SG_F_STR("namespace", f->ns), SG_F_STR("reason", err.msg),
		       SG_F_END);
}

/* ---- the informer's handlers ---- */

/* What an object says about its request, acted on: a refusal, an answer,
 * or nothing yet (gone: it was deleted). The caller holds a reference. */
static void examine(sg_forward *f, struct req *e, const json_t *obj, bool gone)
{
	const json_t *status = json_object_get(obj, "status");
	const char *what, *why;
	char words[SHOWN_MAX + 4];
	if (forward_terminal(status, &what, &why)) {
		shown(words, sizeof(words), why);
		fail(f, e, SG_EDENIED, SG_LOG_INFO, "certificate request %s/%s %s by issuer %s/%s: %s", f->ns, e->name,
		     what, f->issuer_kind, f->issuer_name, words);
		return;
	}
	const json_t *cert = json_object_get(status, "certificate");
	if (json_is_string(cert) && json_string_length(cert) > 0) {
		char *chain = NULL;
		size_t len = 0;
		int rc = forward_check_answer(f, e, json_string_value(cert), json_string_length(cert), &chain, &len);
		if (rc == SG_OK) {
			if (finish(f, e, SG_OK, chain, len, NULL))
				sg_log(SG_LOG_DEBUG, "certificate request answered", SG_F_STR("request", e->name),
				       SG_F_STR("namespace", f->ns),
				       SG_F_INT("latency_us", (int64_t)((sg_now_ns() - e->t0) / 1000)), SG_F_END);
		} else {
			sg_error err;
			sg_error_save(&err);
			fail(f, e, rc, SG_LOG_WARN, "issuer %s/%s answered certificate request %s/%s badly: %s",
			     f->issuer_kind, f->issuer_name, f->ns, e->name, err.msg);
		}
		free(chain);
		return;
	}
	if (gone)
		fail(f, e, SG_EDENIED, SG_LOG_INFO, "certificate request %s/%s was deleted before it was answered",
		     f->ns, e->name);
}

/* The pending request an object names, with a reference, or NULL. */
static struct req *pending_of(sg_forward *f, const json_t *obj)
{
	const char *ns = sg_kube_meta_str(obj, "namespace");
	if (ns && strcmp(ns, f->ns) != 0)
		return NULL;
	pthread_mutex_lock(&f->mu);
	struct req *e = forward_map_find(f, sg_kube_meta_str(obj, "name"));
	if (e)
		req_ref(e);
	pthread_mutex_unlock(&f->mu);
	return e;
}

static void seen(sg_forward *f, const json_t *obj, bool gone)
{
	struct req *e = pending_of(f, obj);
	if (!e)
		return;
	if (gone) { /* nothing left to delete (a create still being posted is the worker's to judge) */
		pthread_mutex_lock(&f->mu);
		if (e->create == C_POSTED || e->create == C_MAYBE)
			e->create = C_NONE;
		pthread_mutex_unlock(&f->mu);
	}
	examine(f, e, obj, gone);
	req_unref(e);
}

static void on_add(json_t *obj, void *arg)
{
	seen(arg, obj, false);
}

static void on_update(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj;
	seen(arg, new_obj, false);
}

static void on_delete(json_t *obj, void *arg)
{
	seen(arg, obj, true);
}

/* ---- the workers ---- */

sg_kube_ref forward_cr_ref(const sg_forward *f, const char *name)
{
	return (sg_kube_ref){.group = api_group, .version = "v1", .resource = resource, .ns = f->ns, .name = name};
}

/* This thread's last error as a message for a request, with an API
 * server's message that quotes the request withheld. */
void forward_api_message(char *out, size_t cap)
{
	const char *m = sg_error_last()->msg;
	if (strstr(m, REQUEST_QUOTE))
		m = "the API server's message is withheld: it quotes the request";
	snprintf(out, cap, "%s", m);
}

static void do_create(sg_forward *f, struct req *e)
{
	sg_kube_ref ref = forward_cr_ref(f, NULL);
	count(&f->creates);
	int rc = sg_kube_create(f->kube, &ref, e->body, NULL);
	char why[SG_ERROR_MSG_MAX];
	long http = sg_kube_last_status()->code;
	if (rc != SG_OK) {
		count(&f->api_errors);
		forward_api_message(why, sizeof(why));
	}
	json_decref(e->body);
	e->body = NULL;
	/* Without an answer, or with a 5xx, the object may exist all the same. */
	bool maybe = rc == SG_ETIMEOUT || (rc == SG_EBUSY && (http == 0 || http >= 500));
	pthread_mutex_lock(&f->mu);
	e->create = rc == SG_OK ? C_POSTED : maybe ? C_MAYBE : C_NONE;
	bool ended = e->fate == ENDED;
	if (ended && !f->preserve && (e->create == C_POSTED || e->create == C_MAYBE))
		enqueue(f, e, JOB_DELETE);
	pthread_mutex_unlock(&f->mu);
	if (rc == SG_OK) {
		sg_log(SG_LOG_DEBUG, "certificate request created", SG_F_STR("request", e->name),
		       SG_F_STR("namespace", f->ns), SG_F_END);
		return;
	}
	if (!ended)
		fail(f, e, SG_EBUSY, SG_LOG_WARN, "cannot create certificate request %s/%s: %s", f->ns, e->name, why);
}

static void do_delete(sg_forward *f, struct req *e)
{
	sg_kube_ref ref = forward_cr_ref(f, e->name);
	count(&f->deletes);
	e->attempts++;
	int rc = sg_kube_delete(f->kube, &ref, NULL);
	if (rc == SG_OK || rc == SG_ENOTFOUND)
		return;
	count(&f->api_errors);
	char why[SG_ERROR_MSG_MAX];
	forward_api_message(why, sizeof(why));
	bool again = (rc == SG_EBUSY || rc == SG_ETIMEOUT) && e->attempts < DELETE_ATTEMPTS;
	pthread_mutex_lock(&f->mu);
	if (again && !f->stopping) {
		req_ref(e);
		e->job = JOB_DELETE;
		e->retry_at = sg_now_ns() + (uint64_t)(DELETE_RETRY_MS << (e->attempts - 1)) * 1000000u;
		e->qnext = f->retry;
		f->retry = e;
	} else if (again && (!f->draining || sg_now_ns() < f->drain_end)) {
		enqueue(f, e, JOB_DELETE);
	} else {
		again = false;
	}
	pthread_mutex_unlock(&f->mu);
	if (!again) {
		count(&f->left_behind);
		forward_warn(f, "certificate request left behind: cannot delete it", e->name, why);
	}
}

static void *worker(void *arg)
{
	sg_forward *f = arg;
	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->qhead && !f->draining)
			pthread_cond_wait(&f->work_cv, &f->mu);
		struct req *e = f->qhead;
		if (!e)
			break; /* draining, and nothing left */
		f->qhead = e->qnext;
		if (!f->qhead)
			f->qtail = &f->qhead;
		e->qnext = NULL;
		enum job job = e->job;
		e->job = JOB_NONE;
		bool late = f->draining && sg_now_ns() >= f->drain_end;
		if (job == JOB_CREATE) {
			/* Ended or out of time before its turn: never posted (the
			 * timer ends one that is still pending). */
			if (e->fate == ENDED || late || sg_now_ns() >= e->deadline) {
				e->create = C_NONE;
				job = JOB_NONE;
			} else {
				e->create = C_POSTING;
			}
		} else if (job == JOB_DELETE && late) {
			job = JOB_NONE;
			count(&f->left_behind);
		}
		pthread_mutex_unlock(&f->mu);
		if (job == JOB_CREATE)
			do_create(f, e);
		else if (job == JOB_DELETE)
			do_delete(f, e);
		req_unref(e); /* the queue's */
		pthread_mutex_lock(&f->mu);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* ---- the timer ---- */

static void tick(sg_forward *f)
{
	uint64_t now = sg_now_ns();
	size_t nlate = 0, nask = 0, cap = f->max_in_flight;
	struct req **late = f->scratch, **ask = f->scratch + cap;
	pthread_mutex_lock(&f->mu);
	for (struct req *e = f->head; e; e = e->next) {
		if (now >= e->deadline && nlate < cap) {
			req_ref(e);
			late[nlate++] = e;
		} else if (e->cancelled && nask < cap) {
			req_ref(e);
			ask[nask++] = e;
		}
	}
	for (struct req **p = &f->retry; *p;) {
		struct req *e = *p;
		if (now < e->retry_at) {
			p = &e->qnext;
			continue;
		}
		*p = e->qnext;
		enqueue(f, e, JOB_DELETE);
		req_unref(e); /* the retry list's: enqueue took its own */
	}
	pthread_mutex_unlock(&f->mu);
	for (size_t i = 0; i < nlate; i++) {
		struct req *e = late[i];
		uint64_t wait = e->deadline > e->t0 ? e->deadline - e->t0 : 0;
		fail(f, e, SG_ETIMEOUT, SG_LOG_WARN,
		     "no answer from issuer %s/%s within %llu ms (certificate request %s/%s)", f->issuer_kind,
		     f->issuer_name, (unsigned long long)((wait + 500000u) / 1000000u), f->ns, e->name);
		req_unref(e);
	}
	for (size_t i = 0; i < nask; i++) {
		struct req *e = ask[i];
		if (e->cancelled(e->cancel_arg))
			fail(f, e, SG_ETIMEOUT, SG_LOG_DEBUG, "the call ended (certificate request %s/%s)", f->ns,
			     e->name);
		req_unref(e);
	}
}

/* Waits ms or until stop; false once stopping (the timer's and the
 * forward_sweeper's loops). */
bool forward_nap(sg_forward *f, unsigned ms)
{
	struct timespec ts;
	wake_at(&ts, ms);
	pthread_mutex_lock(&f->mu);
	while (!f->stopping && pthread_cond_timedwait(&f->tick_cv, &f->mu, &ts) == 0)
		;
	bool stop = f->stopping;
	pthread_mutex_unlock(&f->mu);
	return !stop;
}

static void *timer(void *arg)
{
	sg_forward *f = arg;
	while (forward_nap(f, TICK_MS))
		tick(f);
	return NULL;
}

/* ---- submit ---- */

static json_t *request_body(const sg_forward *f, const char *name, const char *b64, const char *identity, int64_t ttl)
{
	char duration[32];
	snprintf(duration, sizeof(duration), "%llds", (long long)ttl);
	json_t *body = json_pack(
	    "{s:s, s:s, s:{s:s, s:s, s:{s:s}, s:{s:s}}, s:{s:s, s:s, s:b, s:[s, s], s:{s:s, s:s, s:s}}}", "apiVersion",
	    api_version, "kind", "CertificateRequest", "metadata", "name", name, "namespace", f->ns, "labels",
	    SG_FORWARD_LABEL, f->replica_id, "annotations", SG_FORWARD_IDENTITY_ANNOTATION, identity, "spec", "request",
	    b64, "duration", duration, "isCA", 0, "usages", "client auth", "server auth", "issuerRef", "name",
	    f->issuer_name, "kind", f->issuer_kind, "group", f->issuer_group);
	/* istio-csr copies its additional annotations over the ones it set
	 * (maps.Copy), so a configured identities key wins too */
	json_t *ann = json_object_get(json_object_get(body, "metadata"), "annotations");
	if (body && json_object_update(ann, f->annotations) != 0) {
		json_decref(body);
		return NULL;
	}
	return body;
}

static void req_freep(struct req **e)
{
	req_unref(*e);
}

/* A request ready to queue: the CSR read and re-armoured, the body built. */
static int prepare(sg_forward *f, const sg_forward_request *r, struct req **out)
{
	*out = NULL;
	SG_ENSURE(r->csr_pem && r->csr_len > 0, SG_EINVAL, "no CSR");
	SG_ENSURE(r->identity && *r->identity, SG_EINVAL, "no identity");
	size_t idlen = strlen(r->identity);
	SG_ENSURE(idlen <= IDENTITY_MAX && printable(r->identity, idlen), SG_EINVAL,
	          "identity is longer than %d bytes or not printable ASCII", IDENTITY_MAX);
	SG_ENSURE(r->ttl > 0 && r->ttl <= TTL_MAX, SG_EINVAL, "ttl of %lld s is out of range", (long long)r->ttl);

	struct req *e SG_CLEANUP(req_freep) = calloc(1, sizeof(*e));
	SG_ENSURE(e, SG_EINTERNAL, "out of memory");
	atomic_init(&e->refs, 1);
	uint8_t der[SG_CSR_MAX_DER];
	size_t der_len = 0;
	SG_TRY(sg_csr_decode((const uint8_t *)r->csr_pem, r->csr_len, der, sizeof(der), &der_len));
	sg_csr csr;
	SG_TRY(sg_csr_parse(&csr, der, der_len));
	e->csr = malloc(der_len);
	SG_ENSURE(e->csr, SG_EINTERNAL, "out of memory");
	memcpy(e->csr, der, der_len);
	e->csr_len = der_len;

	char *pem SG_AUTOFREE = NULL;
	size_t pem_len = 0;
	SG_TRY(sg_pem_encode("CERTIFICATE REQUEST", der, der_len, &pem, &pem_len));
	size_t b64_cap = sg_b64_encoded_len(SG_B64_STD, pem_len) + 1;
	char *b64 SG_AUTOFREE = malloc(b64_cap);
	SG_ENSURE(b64, SG_EINTERNAL, "out of memory");
	SG_TRY(sg_b64_encode(SG_B64_STD, (const uint8_t *)pem, pem_len, b64, b64_cap));

	memcpy(e->name, NAME_PREFIX, sizeof(NAME_PREFIX) - 1);
	SG_TRY(random_hex(e->name + sizeof(NAME_PREFIX) - 1, NAME_RANDOM));
	e->body = request_body(f, e->name, b64, r->identity, r->ttl);
	SG_ENSURE(e->body, SG_EINTERNAL, "out of memory");
	e->t0 = sg_now_ns();
	e->deadline = r->deadline_ns ? r->deadline_ns : e->t0 + (uint64_t)f->timeout_ms * 1000000u;
	e->cancelled = r->cancelled;
	e->cancel_arg = r->cancel_arg;
	*out = SG_MOVE(e);
	return SG_OK;
}

int sg_forward_submit(sg_forward *f, const sg_forward_request *r, sg_forward_done_fn done, void *arg)
{
	SG_ENSURE(f && r && done, SG_EINVAL, "sg_forward_submit needs a forwarder, a request and a callback");
	/* Shed load before any work; the count is checked again under the lock. */
	if (atomic_load_explicit(&f->in_flight, memory_order_relaxed) >= f->max_in_flight) {
		count(&f->rejected);
		SG_BAIL(SG_EBUSY, "%u certificate requests are waiting for issuer %s/%s already", f->max_in_flight,
		        f->issuer_kind, f->issuer_name);
	}
	struct req *e SG_CLEANUP(req_freep) = NULL;
	SG_TRY(prepare(f, r, &e));
	e->done = done;
	e->arg = arg;
	int rc;
	pthread_mutex_lock(&f->mu);
	SG_ENSURE_GOTO(rc, !f->stopping, unlock, SG_EBUSY, "certificate forwarding is shutting down");
	if (f->pending >= f->max_in_flight) {
		count(&f->rejected);
		rc = sg_error_set(SG_EBUSY, "%u certificate requests are waiting for issuer %s/%s already",
		                  f->max_in_flight, f->issuer_kind, f->issuer_name);
		goto unlock;
	}
	e->fate = PENDING;
	e->create = C_QUEUED;
	map_insert(f, e);
	enqueue(f, e, JOB_CREATE);
	e = NULL; /* the map's reference now */
	count(&f->submitted);
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&f->mu);
	return rc;
}

/* ---- roots, stats ---- */

static int roots_new(struct roots **out, const char *pem, size_t len)
{
	*out = NULL;
	SG_ENSURE(pem && len > 0, SG_EINVAL, "certificate forwarding needs the mesh roots");
	sg_x509_bundle *b = NULL;
	SG_TRY(sg_x509_bundle_parse(&b, pem, len));
	struct roots *r = malloc(sizeof(*r));
	if (!r) {
		sg_x509_bundle_free(b);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	atomic_init(&r->refs, 1);
	r->b = b;
	*out = r;
	return SG_OK;
}

int sg_forward_set_roots(sg_forward *f, const char *pem, size_t len)
{
	SG_ENSURE(f, SG_EINVAL, "no forwarder");
	struct roots *r;
	SG_TRY(roots_new(&r, pem, len));
	pthread_mutex_lock(&f->roots_mu);
	struct roots *old = f->roots;
	f->roots = r;
	pthread_mutex_unlock(&f->roots_mu);
	forward_roots_put(old);
	return SG_OK;
}

void sg_forward_stats_get(sg_forward *f, sg_forward_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!f)
		return;
	out->submitted = atomic_load(&f->submitted);
	out->rejected = atomic_load(&f->rejected);
	out->issued = atomic_load(&f->issued);
	out->refused = atomic_load(&f->refused);
	out->timeouts = atomic_load(&f->timeouts);
	out->errors = atomic_load(&f->errors);
	out->in_flight = atomic_load(&f->in_flight);
	out->creates = atomic_load(&f->creates);
	out->deletes = atomic_load(&f->deletes);
	out->api_errors = atomic_load(&f->api_errors);
	out->swept = atomic_load(&f->swept);
	out->api_calls = out->creates + out->deletes;
}

bool sg_forward_ready(sg_forward *f)
{
	return f && f->inf && sg_kube_informer_has_synced(f->inf);
}

/* ---- lifetime ---- */

/* Stops everything started so far: no more submits, the timer stopped,
 * every waiting request failed at once, then the informer stopped (which
 * takes up to a second) while the workers make the deletes that follow,
 * for DRAIN_MS at most; the workers joined. An informer handler may still
 * be at work on a request failed here: finish() lets only one of them end
 * it. */
static void stop(sg_forward *f)
{
	pthread_mutex_lock(&f->mu);
	f->stopping = true;
	pthread_cond_broadcast(&f->tick_cv);
	pthread_mutex_unlock(&f->mu);
	if (f->timer_started)
		pthread_join(f->timer, NULL);
	f->timer_started = false;
	if (f->sweeper_started)
		pthread_join(f->sweeper, NULL);
	f->sweeper_started = false;

	sg_error err = {.code = SG_EBUSY, .file = __FILE__, .line = __LINE__};
	snprintf(err.msg, sizeof(err.msg), "certificate forwarding is shutting down");
	size_t failed = 0;
	for (;;) {
		pthread_mutex_lock(&f->mu);
		struct req *e = f->head;
		if (e)
			req_ref(e);
		pthread_mutex_unlock(&f->mu);
		if (!e)
			break;
		failed += finish(f, e, SG_EBUSY, NULL, 0, &err);
		req_unref(e);
	}

	pthread_mutex_lock(&f->mu);
	while (f->retry) { /* one last try each */
		struct req *e = f->retry;
		f->retry = e->qnext;
		enqueue(f, e, JOB_DELETE);
		req_unref(e);
	}
	f->draining = true;
	f->drain_end = sg_now_ns() + (uint64_t)DRAIN_MS * 1000000u;
	pthread_cond_broadcast(&f->work_cv);
	pthread_mutex_unlock(&f->mu);
	sg_kube_informer_free(f->inf); /* no handler runs after this */
	f->inf = NULL;
	for (unsigned i = 0; i < f->workers_started; i++)
		pthread_join(f->workers[i], NULL);
	f->workers_started = 0;
	uint64_t left = atomic_load(&f->left_behind);
	if (failed || left)
		sg_log(SG_LOG_INFO, "certificate forwarding stopped", SG_F_INT("failed", (int64_t)failed),
		       SG_F_INT("left_behind", (int64_t)left), SG_F_END);
}

static void destroy(sg_forward *f)
{
	/* Only what stop() left: jobs dropped before their worker ran. */
	while (f->qhead) {
		struct req *e = f->qhead;
		f->qhead = e->qnext;
		req_unref(e);
	}
	forward_roots_put(f->roots);
	sg_strmap_fini(&f->map);
	free(f->scratch);
	free(f->workers);
	free(f->ns);
	free(f->issuer_name);
	free(f->issuer_kind);
	free(f->issuer_group);
	json_decref(f->annotations);
	free(f->replica_id);
	free(f->selector);
	pthread_mutex_destroy(&f->mu);
	pthread_mutex_destroy(&f->roots_mu);
	pthread_cond_destroy(&f->work_cv);
	pthread_cond_destroy(&f->tick_cv);
	free(f);
}

void sg_forward_free(sg_forward *f)
{
	if (!f)
		return;
	stop(f);
	destroy(f);
}

static int check_options(const sg_forward_options *o)
{
	SG_ENSURE(o && o->kube, SG_EINVAL, "certificate forwarding needs a Kubernetes client");
	SG_ENSURE(o->ns && sg_names_dns_label(o->ns, strlen(o->ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "certificate forwarding: the namespace is missing or not a DNS-1123 label");
	SG_ENSURE(o->issuer_name && sg_names_dns_subdomain(o->issuer_name, strlen(o->issuer_name)), SG_EINVAL,
	          "certificate forwarding: the issuer name is missing or not a DNS-1123 subdomain");
	SG_ENSURE(!o->issuer_kind || !*o->issuer_kind || sg_names_label_value(o->issuer_kind), SG_EINVAL,
	          "certificate forwarding: the issuer kind is malformed");
	SG_ENSURE(!o->issuer_group || !*o->issuer_group ||
	              sg_names_dns_subdomain(o->issuer_group, strlen(o->issuer_group)),
	          SG_EINVAL, "certificate forwarding: the issuer group is not a DNS-1123 subdomain");
	SG_ENSURE(!o->replica_id || sg_names_label_value(o->replica_id), SG_EINVAL,
	          "certificate forwarding: the replica id is not a label value");
	SG_ENSURE(o->max_in_flight <= IN_FLIGHT_MAX, SG_EINVAL, "certificate forwarding: max_in_flight above %u",
	          IN_FLIGHT_MAX);
	SG_ENSURE(o->workers <= WORKERS_MAX, SG_EINVAL, "certificate forwarding: more than %u workers", WORKERS_MAX);
	SG_ENSURE(o->timeout_ms <= TIMEOUT_MAX_MS, SG_EINVAL, "certificate forwarding: timeout above %u ms",
	          TIMEOUT_MAX_MS);
	return SG_OK;
}

static char *dup_or(const char *s, const char *dflt)
{
	return strdup(s && *s ? s : dflt);
}

static int start(sg_forward *f)
{
	for (unsigned i = 0; i < f->nworkers; i++) {
		SG_ENSURE(pthread_create(&f->workers[i], NULL, worker, f) == 0, SG_EINTERNAL,
		          "cannot start a forwarding worker");
		f->workers_started++;
	}
	SG_ENSURE(pthread_create(&f->timer, NULL, timer, f) == 0, SG_EINTERNAL, "cannot start the forwarding timer");
	f->timer_started = true;
	if (!f->preserve) {
		SG_ENSURE(pthread_create(&f->sweeper, NULL, forward_sweeper, f) == 0, SG_EINTERNAL,
		          "cannot start the forwarding forward_sweeper");
		f->sweeper_started = true;
	}
	sg_kube_ref ref = forward_cr_ref(f, NULL);
	sg_kube_informer_opts io = {.label_selector = f->selector};
	sg_kube_handlers h = {.on_add = on_add, .on_update = on_update, .on_delete = on_delete, .arg = f};
	SG_TRY(sg_kube_informer_new(&f->inf, f->kube, &ref, &io, &h));
	return sg_kube_informer_start(f->inf);
}

int sg_forward_new(sg_forward **out, const sg_forward_options *o)
{
	*out = NULL;
	SG_TRY(check_options(o));
	sg_forward *f = calloc(1, sizeof(*f));
	SG_ENSURE(f, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&f->mu, NULL);
	pthread_mutex_init(&f->roots_mu, NULL);
	pthread_cond_init(&f->work_cv, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->tick_cv, &ca);
	pthread_condattr_destroy(&ca);
	f->qtail = &f->qhead;
	f->kube = o->kube;
	f->preserve = o->preserve;
	f->max_in_flight = o->max_in_flight ? o->max_in_flight : SG_FORWARD_MAX_IN_FLIGHT;
	f->timeout_ms = o->timeout_ms ? o->timeout_ms : SG_FORWARD_TIMEOUT_MS;
	f->nworkers = o->workers ? o->workers : SG_FORWARD_WORKERS;
	f->orphan_age_s = o->orphan_age_s ? o->orphan_age_s : SG_FORWARD_ORPHAN_AGE;
	f->sweep_ms = o->sweep_interval_ms ? o->sweep_interval_ms : SG_FORWARD_SWEEP_MS;
	f->born_s = sg_wall_seconds();

	int rc;
	char rid[2 * REPLICA_RANDOM + 1];
	if (!o->replica_id)
		SG_TRY_GOTO(rc, random_hex(rid, REPLICA_RANDOM), bad);
	f->ns = strdup(o->ns);
	f->issuer_name = strdup(o->issuer_name);
	f->issuer_kind = dup_or(o->issuer_kind, "Issuer");
	f->issuer_group = dup_or(o->issuer_group, api_group);
	f->replica_id = strdup(o->replica_id ? o->replica_id : rid);
	size_t slen = sizeof(SG_FORWARD_LABEL) + 1 + strlen(f->replica_id ? f->replica_id : "");
	f->selector = malloc(slen);
	size_t buckets = 2 * (size_t)f->max_in_flight;
	bool map_ok = sg_strmap_init(&f->map, buckets < 16 ? 16 : buckets, map_hash) == SG_OK;
	f->scratch = calloc(2 * (size_t)f->max_in_flight, sizeof(*f->scratch));
	f->workers = calloc(f->nworkers, sizeof(*f->workers));
	SG_ENSURE_GOTO(rc,
	               f->ns && f->issuer_name && f->issuer_kind && f->issuer_group && f->replica_id && f->selector &&
	                   map_ok && f->scratch && f->workers,
	               bad, SG_EINTERNAL, "out of memory");
	snprintf(f->selector, slen, "%s=%s", SG_FORWARD_LABEL, f->replica_id);
	SG_TRY_GOTO(rc, forward_annotations_parse(o->additional_annotations, &f->annotations), bad);
	SG_TRY_GOTO(rc, roots_new(&f->roots, o->roots_pem, o->roots_len), bad);
	SG_TRY_GOTO(rc, start(f), bad);
	sg_log(SG_LOG_INFO, "certificate forwarding started", SG_F_STR("namespace", f->ns),
	       SG_F_STR("issuer", f->issuer_name), SG_F_STR("kind", f->issuer_kind), SG_F_STR("group", f->issuer_group),
	       SG_F_STR("replica", f->replica_id), SG_F_INT("preserve", f->preserve), SG_F_END);
	*out = f;
	return SG_OK;
bad:;
	sg_error err;
	sg_error_save(&err);
	sg_forward_free(f);
	sg_error_restore(&err);
	return rc;
}
