/*
 * The gRPC C core adapter, server side (the client is sg_grpc_client.c).
 *
 * Shape: one grpc_server with the single registered method (payload read
 * with the call, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER) and N completion
 * queues, each polled by one transport thread. Each queue keeps
 * calls_per_thread calls requested in advance, so a burst is accepted
 * without waiting for the application; every accepted call is replaced by a
 * new request at once. Unregistered methods are requested too, with
 * grpc_server_request_call, and answered UNIMPLEMENTED: without an
 * outstanding request gRPC would park such a call until its deadline.
 *
 * A call object (sg_grpc_call) is reference counted: one reference for the
 * RECV_CLOSE_ON_SERVER batch started on arrival, one for the handler (until
 * sg_grpc_call_finish), one for the answering batch. The answer is sent once:
 * `answered` is claimed with a compare-and-swap by the handler's finish, the
 * deadline reaper or shutdown, whichever comes first.
 *
 * The method is registered without payload pre-read, so a call surfaces as
 * soon as its headers arrive and the adapter reads the message itself
 * (RECV_MESSAGE). That is what puts a message-less stream under the
 * deadline: with pre-read, gRPC would hold such a stream invisibly for as
 * long as the client liked.
 *
 * The reaper thread enforces the server-side deadline (istio-agent sends no
 * grpc-timeout): it scans the calls every REAPER_TICK_MS and answers the
 * expired ones DEADLINE_EXCEEDED; answering a call whose request has not
 * arrived resets its stream. It also ends calls whose answer was given but
 * could not be written by ANSWER_GRACE_MS past their deadline (a client
 * that never grants flow-control window, or never reads its socket): the
 * stream is cancelled (RST_STREAM), which completes the answering batch
 * and frees the call. Without that, gRPC would hold such a call, its
 * answer and its stream slot until the connection ended, up to
 * max-connection-age (30 min), however many the client made. Once a
 * second the reaper also has the connection guard forget closed
 * connections.
 *
 * Request bytes: gRPC 1.51 checks the receive limit only once a whole
 * message has arrived, and while a message is incomplete it keeps granting
 * the stream window for it, however large the length prefix says it is. The
 * bound is therefore the memory quota (GRPC_ARG_RESOURCE_QUOTA): every
 * buffer of every connection is charged to it, and when it is exceeded gRPC
 * stops accepting connections and reclaims memory by closing idle
 * connections and then resetting streams. BDP probing is off and the
 * initial window is one request, so honest connections stay small and
 * nothing grows a window on its own.
 *
 * TLS uses gRPC's certificate-config fetcher: gRPC asks before each
 * handshake, our callback asks the application's tls_fetch with the version
 * in use, and only a new version builds a new config (a new SSL_CTX), so a
 * rotated serving certificate is served to new connections without restart.
 * gRPC's SSL server negotiates ALPN "h2" and allows TLS 1.2 through 1.3 by
 * default (1.51 has no setter for the SSL credentials; see the tests).
 */
#include "sg_grpc.h"

#include "sg_clock.h"
#include "sg_grpc_absl.h"
#include "sg_grpc_conn.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_secret.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#define REAPER_TICK_MS 20
#define SWEEP_EVERY_NS 1000000000ull /* connection count refreshed this often */
#define LINGER_MS 500 /* after the last answer, before closing connections */
/* An answer still unwritten this long after the call's deadline is
 * dropped with its stream (the client grants no window or does not read). */
#define ANSWER_GRACE_MS 1000

/* ---- status table ------------------------------------------------------ */

/* An HSM that failed and did not recover within the request's deadline is
 * a transient condition for the caller (another replica, or this one after
 * recovery, can sign): UNAVAILABLE, which istio-agent retries. Only our own
 * bugs are INTERNAL. A NOT_FOUND would tell a client something about our
 * insides; nothing the client names can be "not found" here. */
static const struct {
	int code;
	int status;
} status_of[] = {
	{SG_OK, SG_GRPC_OK},
	{SG_EINVAL, SG_GRPC_INVALID_ARGUMENT},
	{SG_ENOTFOUND, SG_GRPC_INTERNAL},
	{SG_EBUSY, SG_GRPC_UNAVAILABLE},
	{SG_EAUTH, SG_GRPC_UNAUTHENTICATED},
	{SG_EDENIED, SG_GRPC_UNAUTHENTICATED},
	{SG_EHSM, SG_GRPC_UNAVAILABLE},
	{SG_EPROTO, SG_GRPC_INVALID_ARGUMENT},
	{SG_ETIMEOUT, SG_GRPC_DEADLINE_EXCEEDED},
	{SG_EINTERNAL, SG_GRPC_INTERNAL},
	{SG_ELINT, SG_GRPC_INTERNAL}, /* our policy or encoder is wrong, not the request */
};

int sg_grpc_status_of(int sg_code)
{
	for (size_t i = 0; i < sizeof(status_of) / sizeof(status_of[0]); i++)
		if (status_of[i].code == sg_code)
			return status_of[i].status;
	return SG_GRPC_INTERNAL;
}

const char *sg_grpc_status_name(int status)
{
	static const char *const names[] = {
		"OK",	      "CANCELLED",	"UNKNOWN",	      "INVALID_ARGUMENT",
		"DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",   "PERMISSION_DENIED",
		"RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
		"UNIMPLEMENTED", "INTERNAL",	"UNAVAILABLE",	      "DATA_LOSS",
		"UNAUTHENTICATED",
	};
	if (status >= 0 && (size_t)status < sizeof(names) / sizeof(names[0]))
		return names[status];
	return "UNKNOWN_STATUS";
}

/* ---- types ------------------------------------------------------------- */

enum tag_kind {
	TAG_REQUESTED,	/* a registered call arrived (or the request failed) */
	TAG_MESSAGE,	/* its request message arrived (or cannot) */
	TAG_CLOSED,	/* RECV_CLOSE_ON_SERVER completed */
	TAG_ANSWERED,	/* the answering batch completed */
	TAG_OTHER_ARRIVED, /* a call to an unregistered method arrived */
	TAG_OTHER_DONE,	/* its UNIMPLEMENTED answer completed */
	TAG_SHUTDOWN,	/* grpc_server_shutdown_and_notify completed */
};

typedef struct tag {
	enum tag_kind kind;
	void *owner;
} tag;

struct sg_grpc_call {
	sg_grpc_server *srv;
	unsigned cq;
	tag t_req, t_msg, t_close, t_answer;
	grpc_call *call;
	gpr_timespec deadline;
	grpc_metadata_array md;
	grpc_byte_buffer *payload;
	grpc_byte_buffer *resp; /* sent message, kept until the batch completes */
	grpc_slice body;
	bool has_body;
	int cancelled;
	atomic_int refs;     /* 0 while only requested */
	atomic_int answered; /* 1 once an answer was claimed */
	atomic_bool answer_pending; /* the answering batch is started and not complete */
	atomic_bool answer_dropped; /* the reaper cancelled it (once) */
	atomic_bool handled; /* the handler holds a reference */
	atomic_bool has_message; /* the request message arrived */
	_Atomic uint64_t deadline_ns;
	char *authorization, *cluster_id, *peer_identity, *peer;
	sg_grpc_request req;
	struct sg_grpc_call *prev, *next; /* srv->calls, under srv->mu */
	bool listed;                      /* in srv->calls (from its arrival), under srv->mu */
};

/* A call to a method we do not serve. */
typedef struct other_call {
	sg_grpc_server *srv;
	unsigned cq;
	tag t_req, t_done;
	grpc_call *call;
	grpc_call_details details;
	grpc_metadata_array md;
	int cancelled;
} other_call;

struct sg_grpc_server {
	sg_grpc_server_options o;
	char *method;
	grpc_server *server;
	void *method_handle;
	grpc_completion_queue **cqs;
	pthread_t *threads;
	unsigned nthreads; /* started */
	pthread_t reaper;
	bool reaper_started;
	int port;
	bool grpc_inited;
	sg_grpc_guard *guard;
	uint64_t last_sweep_ns; /* reaper only */
	atomic_uint_fast64_t calls_cancelled, streams_expired, answers_dropped;

	pthread_mutex_t mu;
	pthread_cond_t cond;	    /* shutdown progress (signalled only while stopping) */
	pthread_cond_t reaper_cond; /* the reaper's tick and stop */
	sg_grpc_call *calls;	/* every call object, requested or in flight */
	size_t handler_refs;	/* calls the handler has not released */
	size_t open_calls;	/* arrived calls whose answer is not yet sent */
	uint64_t closed_total;	/* arrived calls that ended, ever */
	uint64_t drain_target;	/* shutdown: closed_total once those in flight ended */
	bool stopping;		/* shutdown began (wakes shutdown's waits) */
	bool goaway;		/* gRPC's shutdown began: no new requests */
	bool shutdown_notified;
	bool reaper_stop;
	/* "call refused" lines: a client can cause them at will, so at most one
	 * a second, with the number left out since the last one. */
	atomic_uint_fast64_t refused_log_ns, refused_unlogged;
	tag t_shutdown;

	pthread_mutex_t tls_mu;
	bool have_tls;
	uint64_t tls_version;
	char tls_error[SG_ERROR_MSG_MAX];
};

/* ---- helpers ----------------------------------------------------------- */

static char *dup_bytes(const void *p, size_t n)
{
	char *s = malloc(n + 1);
	if (s) {
		if (n)
			memcpy(s, p, n);
		s[n] = '\0';
	}
	return s;
}

static bool slice_is(grpc_slice s, const char *str)
{
	return grpc_slice_str_cmp(s, str) == 0;
}

/* Nanoseconds until t (0 when past); UINT64_MAX for an infinite deadline. */
static uint64_t ns_until(gpr_timespec t)
{
	if (t.clock_type == GPR_TIMESPAN || gpr_time_cmp(t, gpr_inf_future(t.clock_type)) == 0)
		return UINT64_MAX;
	gpr_timespec left = gpr_time_sub(t, gpr_now(t.clock_type));
	if (left.tv_sec < 0)
		return 0;
	if (left.tv_sec > 100000000) /* ~3 years: as good as none */
		return UINT64_MAX;
	return (uint64_t)left.tv_sec * 1000000000u + (uint64_t)left.tv_nsec;
}

/* ---- call lifetime ----------------------------------------------------- */

/* Only shutdown waits on s->cond, so the per-call bookkeeping wakes it only
 * then: a broadcast with a waiter is a futex wake and a context switch, and
 * every call makes three of them. Called with s->mu held. */
static void wake_shutdown(sg_grpc_server *s)
{
	if (s->stopping)
		pthread_cond_broadcast(&s->cond);
}

/* Puts an arrived call on the reaper's list. Only arrived calls are on it:
 * the calls_per_thread requested in advance (256 by default) have no
 * deadline yet, and walking them under s->mu every REAPER_TICK_MS was
 * most of the reaper's time (0.2-0.4 % of signetd's samples) and held the
 * lock every call takes. Called with s->mu held. */
static void call_list_add_locked(sg_grpc_call *c)
{
	sg_grpc_server *s = c->srv;
	c->prev = NULL;
	c->next = s->calls;
	if (s->calls)
		s->calls->prev = c;
	s->calls = c;
	c->listed = true;
}

static void call_destroy(sg_grpc_call *c)
{
	sg_grpc_server *s = c->srv;
	pthread_mutex_lock(&s->mu);
	if (c->listed) {
		if (c->prev)
			c->prev->next = c->next;
		else
			s->calls = c->next;
		if (c->next)
			c->next->prev = c->prev;
	}
	wake_shutdown(s);
	pthread_mutex_unlock(&s->mu);

	if (c->call)
		grpc_call_unref(c->call);
	grpc_metadata_array_destroy(&c->md);
	if (c->payload)
		grpc_byte_buffer_destroy(c->payload);
	if (c->resp)
		grpc_byte_buffer_destroy(c->resp);
	if (c->has_body)
		grpc_slice_unref(c->body);
	if (c->authorization) {
		sg_wipe(c->authorization, strlen(c->authorization));
		free(c->authorization);
	}
	free(c->cluster_id);
	free(c->peer_identity);
	free(c->peer);
	free(c);
}

static void call_unref(sg_grpc_call *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		call_destroy(c);
}

/* Takes a reference unless the call is only requested or already dying. */
static bool call_ref_live(sg_grpc_call *c)
{
	int n = atomic_load(&c->refs);
	while (n > 0)
		if (atomic_compare_exchange_weak(&c->refs, &n, n + 1))
			return true;
	return false;
}

/* An arrived call is over for shutdown's purposes: its answer was sent (or
 * cannot be), or the client went away. Once per arrived call. */
static void call_closed(sg_grpc_call *c)
{
	sg_grpc_server *s = c->srv;
	pthread_mutex_lock(&s->mu);
	s->open_calls--;
	s->closed_total++;
	wake_shutdown(s);
	pthread_mutex_unlock(&s->mu);
}

/* Sends the one answer of a call, unless someone already did. */
static int answer(sg_grpc_call *c, int status, const char *msg, const uint8_t *resp, size_t resp_len)
{
	int expect = 0;
	if (!atomic_compare_exchange_strong(&c->answered, &expect, 1))
		return sg_error_set(SG_ETIMEOUT, "the call already ended (deadline, cancel or shutdown)");
	grpc_op ops[3];
	size_t n = 0;
	memset(ops, 0, sizeof(ops));
	ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
	if (status == SG_GRPC_OK) {
		grpc_slice body = grpc_slice_from_copied_buffer((const char *)resp, resp_len);
		c->resp = grpc_raw_byte_buffer_create(&body, 1);
		grpc_slice_unref(body);
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n++].data.send_message.send_message = c->resp;
	}
	grpc_slice details = grpc_slice_from_copied_string(msg ? msg : "");
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = (grpc_status_code)status;
	ops[n++].data.send_status_from_server.status_details = msg ? &details : NULL;

	atomic_fetch_add(&c->refs, 1); /* for the batch */
	atomic_store(&c->answer_pending, true);
	grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_answer, NULL);
	grpc_slice_unref(details); /* not retained past start_batch */
	if (e != GRPC_CALL_OK) {
		atomic_store(&c->answer_pending, false);
		call_closed(c);
		call_unref(c);
		return sg_error_set(SG_EINTERNAL, "grpc_call_start_batch (answer) failed: %s",
				    grpc_call_error_to_string(e));
	}
	return SG_OK;
}

int sg_grpc_call_finish(sg_grpc_call *c, int status, const char *msg, const uint8_t *resp,
			size_t resp_len)
{
	int rc = answer(c, status, msg, resp, resp_len);
	bool was = atomic_exchange(&c->handled, false);
	if (was) {
		/* Drop our reference first: the moment handler_refs reaches zero,
		 * sg_grpc_server_shutdown may free the server, so nothing after the
		 * unlock may touch the call or the server. */
		sg_grpc_server *s = c->srv;
		call_unref(c);
		pthread_mutex_lock(&s->mu);
		s->handler_refs--;
		wake_shutdown(s);
		pthread_mutex_unlock(&s->mu);
	}
	return rc;
}

/* ---- accepting calls --------------------------------------------------- */

static int request_call(sg_grpc_server *s, unsigned cq)
{
	sg_grpc_call *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory for a call");
	c->srv = s;
	c->cq = cq;
	c->t_req = (tag){TAG_REQUESTED, c};
	c->t_msg = (tag){TAG_MESSAGE, c};
	c->t_close = (tag){TAG_CLOSED, c};
	c->t_answer = (tag){TAG_ANSWERED, c};
	grpc_metadata_array_init(&c->md);
	grpc_call_error e = grpc_server_request_registered_call(
		s->server, s->method_handle, &c->call, &c->deadline, &c->md, NULL, s->cqs[cq], s->cqs[cq],
		&c->t_req);
	if (e != GRPC_CALL_OK) {
		call_destroy(c);
		SG_BAIL(SG_EINTERNAL, "grpc_server_request_registered_call failed: %s",
			grpc_call_error_to_string(e));
	}
	return SG_OK;
}

static int request_other(sg_grpc_server *s, unsigned cq)
{
	other_call *o = calloc(1, sizeof(*o));
	SG_ENSURE(o, SG_EINTERNAL, "out of memory for a call");
	o->srv = s;
	o->cq = cq;
	o->t_req = (tag){TAG_OTHER_ARRIVED, o};
	o->t_done = (tag){TAG_OTHER_DONE, o};
	grpc_call_details_init(&o->details);
	grpc_metadata_array_init(&o->md);
	grpc_call_error e = grpc_server_request_call(s->server, &o->call, &o->details, &o->md,
						     s->cqs[cq], s->cqs[cq], &o->t_req);
	if (e != GRPC_CALL_OK) {
		grpc_call_details_destroy(&o->details);
		grpc_metadata_array_destroy(&o->md);
		free(o);
		SG_BAIL(SG_EINTERNAL, "grpc_server_request_call failed: %s",
			grpc_call_error_to_string(e));
	}
	return SG_OK;
}

static void other_free(other_call *o)
{
	if (o->call)
		grpc_call_unref(o->call);
	grpc_call_details_destroy(&o->details);
	grpc_metadata_array_destroy(&o->md);
	free(o);
}

static bool goaway_sent(sg_grpc_server *s)
{
	pthread_mutex_lock(&s->mu);
	bool g = s->goaway;
	pthread_mutex_unlock(&s->mu);
	return g;
}

static void rerequest(sg_grpc_server *s, unsigned cq, bool other)
{
	if (goaway_sent(s))
		return;
	if ((other ? request_other(s, cq) : request_call(s, cq)) < 0)
		sg_log_error_last(SG_LOG_ERROR, "grpc: could not request the next call");
}

static void other_arrived(other_call *o, bool ok)
{
	rerequest(o->srv, o->cq, true);
	if (!ok) {
		other_free(o);
		return;
	}
	grpc_op ops[3];
	memset(ops, 0, sizeof(ops));
	grpc_slice details = grpc_slice_from_static_string("method not implemented");
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[1].data.recv_close_on_server.cancelled = &o->cancelled;
	ops[2].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[2].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
	ops[2].data.send_status_from_server.status_details = &details;
	grpc_call_error e = grpc_call_start_batch(o->call, ops, 3, &o->t_done, NULL);
	if (e != GRPC_CALL_OK) {
		sg_log(SG_LOG_ERROR, "grpc: cannot answer an unknown method",
		       SG_F_STR("error", grpc_call_error_to_string(e)), SG_F_END);
		other_free(o);
	}
}

/* The value of header key (the first one), copied; *out NULL when absent.
 * SG_EINVAL for a value with a NUL byte. */
static int header(const grpc_metadata_array *md, const char *key, char **out)
{
	*out = NULL;
	for (size_t i = 0; i < md->count; i++) {
		if (!slice_is(md->metadata[i].key, key))
			continue;
		grpc_slice v = md->metadata[i].value;
		size_t n = GRPC_SLICE_LENGTH(v);
		SG_ENSURE(!memchr(GRPC_SLICE_START_PTR(v), '\0', n), SG_EINVAL,
			  "header %s contains a NUL byte", key);
		*out = dup_bytes(GRPC_SLICE_START_PTR(v), n);
		SG_ENSURE(*out, SG_EINTERNAL, "out of memory for a header");
		return SG_OK;
	}
	return SG_OK;
}

/* The first URI SAN of the peer's certificate. The server requests client
 * certificates with ..._AND_VERIFY, so a certificate that reached the auth
 * context chained to the client CA. */
static int peer_identity(grpc_call *call, char **out)
{
	*out = NULL;
	grpc_auth_context *ctx = grpc_call_auth_context(call);
	if (!ctx)
		return SG_OK;
	int rc = SG_OK;
	grpc_auth_property_iterator it =
		grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_PEM_CERT_PROPERTY_NAME);
	if (grpc_auth_property_iterator_next(&it)) {
		it = grpc_auth_context_find_properties_by_name(ctx, GRPC_PEER_URI_PROPERTY_NAME);
		const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
		if (p && p->value) {
			*out = dup_bytes(p->value, p->value_length);
			if (!*out)
				rc = sg_error_set(SG_EINTERNAL, "out of memory for a peer identity");
		}
	}
	grpc_auth_context_release(ctx);
	return rc;
}

/* Reads what the handler needs; on failure returns the status to answer. */
static int prepare(sg_grpc_call *c, int *status)
{
	sg_grpc_server *s = c->srv;
	*status = SG_GRPC_INTERNAL;
	SG_ENSURE(c->peer, SG_EINTERNAL, "out of memory for a peer address");

	*status = SG_GRPC_INVALID_ARGUMENT;
	SG_ENSURE(c->payload, SG_EINVAL, "the call carries no request message");
	size_t n = grpc_byte_buffer_length(c->payload);
	if (n > s->o.max_message) {
		*status = SG_GRPC_RESOURCE_EXHAUSTED;
		SG_BAIL(SG_EINVAL, "request message of %zu bytes exceeds %zu", n, s->o.max_message);
	}
	grpc_byte_buffer_reader rd;
	*status = SG_GRPC_INTERNAL;
	SG_ENSURE(grpc_byte_buffer_reader_init(&rd, c->payload), SG_EINTERNAL,
		  "cannot read the request message (decompression failed)");
	c->body = grpc_byte_buffer_reader_readall(&rd);
	c->has_body = true;
	grpc_byte_buffer_reader_destroy(&rd);
	if (GRPC_SLICE_LENGTH(c->body) > s->o.max_message) {
		*status = SG_GRPC_RESOURCE_EXHAUSTED;
		SG_BAIL(SG_EINVAL, "request message of %zu bytes exceeds %zu",
			(size_t)GRPC_SLICE_LENGTH(c->body), s->o.max_message);
	}
	*status = SG_GRPC_INVALID_ARGUMENT;
	SG_TRY(header(&c->md, "authorization", &c->authorization));
	SG_TRY(header(&c->md, "clusterid", &c->cluster_id));
	*status = SG_GRPC_INTERNAL;
	SG_TRY(peer_identity(c->call, &c->peer_identity));

	c->req.body = GRPC_SLICE_START_PTR(c->body);
	c->req.len = GRPC_SLICE_LENGTH(c->body);
	c->req.authorization = c->authorization;
	c->req.cluster_id = c->cluster_id;
	c->req.peer_identity = c->peer_identity;
	c->req.peer = c->peer;
	return SG_OK;
}

static void start_message(sg_grpc_call *c);

/* The call's headers arrived: it is live from now on, under its deadline,
 * whether or not the client ever sends its message. */
static void call_arrived(sg_grpc_call *c, bool ok)
{
	sg_grpc_server *s = c->srv;
	rerequest(s, c->cq, false);
	if (!ok) { /* the server is shutting down */
		call_destroy(c);
		return;
	}
	uint64_t now = sg_now_ns();
	uint64_t left = ns_until(c->deadline);
	if (left > s->o.server_timeout_ns)
		left = s->o.server_timeout_ns;
	c->req.received_ns = now;
	c->req.deadline_ns = now + left;
	atomic_store(&c->deadline_ns, now + left);
	char *peer = grpc_call_get_peer(c->call);
	c->peer = dup_bytes(peer ? peer : "", peer ? strlen(peer) : 0);
	gpr_free(peer);

	pthread_mutex_lock(&s->mu);
	s->open_calls++;
	call_list_add_locked(c); /* the deadline is set: the reaper may see it */
	pthread_mutex_unlock(&s->mu);
	atomic_store(&c->refs, 1); /* the close batch; the call is now live */

	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	op.data.recv_close_on_server.cancelled = &c->cancelled;
	grpc_call_error e = grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL);
	if (e != GRPC_CALL_OK) {
		/* Without the close batch the call cannot be tracked; answer it
		 * and let the answer's completion release it. */
		sg_log(SG_LOG_ERROR, "grpc: cannot start RECV_CLOSE_ON_SERVER",
		       SG_F_STR("error", grpc_call_error_to_string(e)), SG_F_END);
		if (answer(c, SG_GRPC_INTERNAL, "internal error", NULL, 0) < 0)
			sg_log_error_last(SG_LOG_ERROR, "grpc: cannot answer a call");
		call_unref(c);
		return;
	}
	start_message(c);
}

static void start_message(sg_grpc_call *c)
{
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &c->payload;
	atomic_fetch_add(&c->refs, 1); /* for the batch */
	grpc_call_error e = grpc_call_start_batch(c->call, &op, 1, &c->t_msg, NULL);
	if (e != GRPC_CALL_OK) {
		sg_log(SG_LOG_ERROR, "grpc: cannot start RECV_MESSAGE", SG_F_STR("error", grpc_call_error_to_string(e)),
		       SG_F_END);
		if (answer(c, SG_GRPC_INTERNAL, "internal error", NULL, 0) < 0)
			sg_log_error_last(SG_LOG_ERROR, "grpc: cannot answer a call");
		call_unref(c);
	}
}

/* The request message arrived (ok with a payload), or the stream ended
 * without one, or the call was answered meanwhile (deadline, cancel). */
static void message_arrived(sg_grpc_call *c, bool ok)
{
	sg_grpc_server *s = c->srv;
	if (atomic_load(&c->answered)) { /* expired or cancelled while waiting */
		call_unref(c);
		return;
	}
	atomic_store(&c->has_message, ok && c->payload);
	int status;
	if (prepare(c, &status) < 0) {
		uint64_t now = sg_now_ns(), last = atomic_load(&s->refused_log_ns);
		if (now - last >= 1000000000u && atomic_compare_exchange_strong(&s->refused_log_ns, &last, now))
			sg_log(SG_LOG_INFO, "grpc: call refused", SG_F_STR("peer", c->peer ? c->peer : ""),
			       SG_F_STR("status", sg_grpc_status_name(status)), SG_F_STR("error", sg_error_last()->msg),
			       SG_F_INT("not_logged_since", (int64_t)atomic_exchange(&s->refused_unlogged, 0)),
			       SG_F_END);
		else
			atomic_fetch_add(&s->refused_unlogged, 1);
		if (answer(c, status, sg_error_last()->msg, NULL, 0) < 0 && sg_error_last()->code != SG_ETIMEOUT)
			sg_log_error_last(SG_LOG_ERROR, "grpc: cannot answer a call");
		call_unref(c);
		return;
	}
	/* The batch's reference becomes the handler's. */
	pthread_mutex_lock(&s->mu);
	s->handler_refs++;
	pthread_mutex_unlock(&s->mu);
	atomic_store(&c->handled, true);
	s->o.handler(c, &c->req, s->o.handler_arg);
}

bool sg_grpc_call_ended(const sg_grpc_call *c)
{
	return atomic_load(&c->answered) != 0;
}

/* The client went away (cancel, deadline, reset) before an answer: nothing
 * is sent any more, and a late finish is told so. */
static void close_done(sg_grpc_call *c)
{
	sg_grpc_server *s = c->srv;
	int expect = 0;
	if (c->cancelled && atomic_compare_exchange_strong(&c->answered, &expect, 1))
		call_closed(c);
	if (c->cancelled) {
		atomic_fetch_add_explicit(&s->calls_cancelled, 1, memory_order_relaxed);
		if (s->guard && sg_grpc_guard_note_reset(s->guard, c->peer))
			sg_log(SG_LOG_WARN, "grpc: closed a connection that cancels streams too fast",
			       SG_F_STR("peer", c->peer ? c->peer : ""),
			       SG_F_INT("limit_per_second", s->o.resets_per_second), SG_F_END);
	}
	call_unref(c);
}

/* ---- threads ----------------------------------------------------------- */

static void dispatch(sg_grpc_server *s, const tag *t, bool ok)
{
	switch (t->kind) {
	case TAG_REQUESTED:
		call_arrived(t->owner, ok);
		break;
	case TAG_MESSAGE:
		message_arrived(t->owner, ok);
		break;
	case TAG_CLOSED:
		close_done(t->owner);
		break;
	case TAG_ANSWERED:
		atomic_store(&((sg_grpc_call *)t->owner)->answer_pending, false);
		call_closed(t->owner);
		call_unref(t->owner);
		break;
	case TAG_OTHER_ARRIVED:
		other_arrived(t->owner, ok);
		break;
	case TAG_OTHER_DONE:
		other_free(t->owner);
		break;
	case TAG_SHUTDOWN:
		pthread_mutex_lock(&s->mu);
		s->shutdown_notified = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->mu);
		break;
	}
}

typedef struct cq_arg {
	sg_grpc_server *srv;
	unsigned i;
} cq_arg;

static void *cq_thread(void *p)
{
	prctl(PR_SET_NAME, "sg-grpc-cq"); /* top -H, perf and /proc tell the transport threads apart */
	cq_arg a = *(cq_arg *)p;
	free(p);
	grpc_completion_queue *cq = a.srv->cqs[a.i];
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (ev.type == GRPC_OP_COMPLETE)
			dispatch(a.srv, ev.tag, ev.success != 0);
	}
	return NULL;
}

/* An answer given but not written ANSWER_GRACE_MS past the call's deadline
 * (and not dropped yet). Called with s->mu held. */
static bool answer_stuck(sg_grpc_call *c, uint64_t now)
{
	return atomic_load(&c->answer_pending) && !atomic_load(&c->answer_dropped) &&
	       atomic_load(&c->deadline_ns) + (uint64_t)ANSWER_GRACE_MS * 1000000u <= now;
}

/* Cancels a call whose answer cannot be written: gRPC resets the stream
 * (RST_STREAM; the client sees DEADLINE_EXCEEDED), fails the answering batch, which releases the call
 * (TAG_ANSWERED), and frees what the stream held. */
static void drop_answer(sg_grpc_call *c)
{
	if (atomic_exchange(&c->answer_dropped, true))
		return;
	atomic_fetch_add_explicit(&c->srv->answers_dropped, 1, memory_order_relaxed);
	grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED,
				     "the answer could not be written before the deadline", NULL);
}

/* Answers calls whose deadline passed (all unanswered ones when `all`,
 * with UNAVAILABLE: shutdown after the grace period), and drops answers
 * stuck past it (answer_stuck). */
static void reap(sg_grpc_server *s, bool all)
{
	enum { BATCH = 64 };
	sg_grpc_call *due[BATCH];
	for (;;) {
		size_t n = 0;
		uint64_t now = sg_now_ns();
		pthread_mutex_lock(&s->mu);
		for (sg_grpc_call *c = s->calls; c && n < BATCH; c = c->next) {
			if (atomic_load(&c->answered) ? !answer_stuck(c, now)
						      : !all && atomic_load(&c->deadline_ns) > now)
				continue;
			if (call_ref_live(c))
				due[n++] = c;
		}
		pthread_mutex_unlock(&s->mu);
		for (size_t i = 0; i < n; i++) {
			if (atomic_load(&due[i]->answered)) {
				drop_answer(due[i]);
				call_unref(due[i]);
				continue;
			}
			bool no_request = !atomic_load(&due[i]->has_message);
			int rc = all ? answer(due[i], SG_GRPC_UNAVAILABLE, "server shutting down", NULL, 0)
			       : no_request
				       ? answer(due[i], SG_GRPC_DEADLINE_EXCEEDED,
						"no request message arrived within the deadline", NULL, 0)
				       : answer(due[i], SG_GRPC_DEADLINE_EXCEEDED,
						"deadline exceeded before the request was answered", NULL, 0);
			if (rc == SG_OK && !all && no_request)
				atomic_fetch_add_explicit(&s->streams_expired, 1, memory_order_relaxed);
			if (rc < 0 && rc != SG_ETIMEOUT)
				sg_log_error_last(SG_LOG_ERROR, "grpc: cannot answer an expired call");
			call_unref(due[i]);
		}
		if (n < BATCH)
			return;
	}
}

static void *reaper_thread(void *p)
{
	sg_grpc_server *s = p;
	pthread_mutex_lock(&s->mu);
	while (!s->reaper_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += REAPER_TICK_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->reaper_cond, &s->mu, &ts);
		if (s->reaper_stop)
			break;
		pthread_mutex_unlock(&s->mu);
		reap(s, false);
		uint64_t now = sg_now_ns();
		if (s->guard && now - s->last_sweep_ns >= SWEEP_EVERY_NS) {
			sg_grpc_guard_sweep(s->guard);
			s->last_sweep_ns = now;
		}
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ---- TLS --------------------------------------------------------------- */

static void wipe_free(char *pem)
{
	if (pem) {
		sg_wipe(pem, strlen(pem));
		free(pem);
	}
}

static grpc_ssl_certificate_config_reload_status fetch_config(void *ud,
							      grpc_ssl_server_certificate_config **config)
{
	sg_grpc_server *s = ud;
	grpc_ssl_certificate_config_reload_status st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
	char *chain = NULL, *key = NULL, *ca = NULL;
	uint64_t version = 0;
	pthread_mutex_lock(&s->tls_mu);
	int rc = s->o.tls_fetch(s->o.tls_arg, &chain, &key, &ca, &version);
	if (rc < 0) {
		snprintf(s->tls_error, sizeof(s->tls_error), "%s", sg_error_last()->msg);
		sg_log_error_last(SG_LOG_ERROR, "grpc: TLS certificate fetch failed; keeping the current one");
		goto out;
	}
	if (s->have_tls && version == s->tls_version) {
		st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
		goto out;
	}
	if (!chain || !key || (s->o.request_client_cert && !ca)) {
		snprintf(s->tls_error, sizeof(s->tls_error),
			 "tls_fetch returned an incomplete configuration (need chain, key%s)",
			 s->o.request_client_cert ? " and client CA" : "");
		sg_log(SG_LOG_ERROR, "grpc: TLS configuration incomplete; keeping the current one",
		       SG_F_STR("error", s->tls_error), SG_F_END);
		goto out;
	}
	/* gRPC 1.51 asserts that a fetched config has roots even when client
	 * certificates are not requested (ssl_security_connector.cc); then they
	 * are never used, and the serving chain stands in when there is no CA. */
	grpc_ssl_pem_key_cert_pair pair = {key, chain};
	*config = grpc_ssl_server_certificate_config_create(ca ? ca : chain, &pair, 1); /* copies */
	if (!*config) {
		snprintf(s->tls_error, sizeof(s->tls_error),
			 "grpc_ssl_server_certificate_config_create failed");
		goto out;
	}
	if (s->have_tls)
		sg_log(SG_LOG_INFO, "grpc: serving certificate changed", SG_F_INT("version", version),
		       SG_F_END);
	s->have_tls = true;
	s->tls_version = version;
	st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
out:
	pthread_mutex_unlock(&s->tls_mu);
	wipe_free(key);
	free(chain);
	free(ca);
	return st;
}

/* ---- start and shutdown ------------------------------------------------ */

static int make_credentials(sg_grpc_server *s, grpc_server_credentials **out)
{
	*out = NULL;
	if (s->o.insecure) {
		*out = grpc_insecure_server_credentials_create();
		SG_ENSURE(*out, SG_EINTERNAL, "grpc_insecure_server_credentials_create failed");
		return SG_OK;
	}
	SG_ENSURE(s->o.tls_fetch, SG_EINVAL, "grpc server: TLS needs a tls_fetch callback");
	grpc_ssl_server_credentials_options *opts =
		grpc_ssl_server_credentials_create_options_using_config_fetcher(
			s->o.request_client_cert ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
						 : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
			fetch_config, s);
	SG_ENSURE(opts, SG_EINTERNAL, "grpc_ssl_server_credentials_create_options_using_config_fetcher failed");
	*out = grpc_ssl_server_credentials_create_with_options(opts); /* takes opts */
	SG_ENSURE(*out, SG_EINTERNAL, "grpc_ssl_server_credentials_create_with_options failed");
	return SG_OK;
}

static int int_arg(unsigned v)
{
	return v > (unsigned)INT32_MAX ? INT32_MAX : (int)v;
}

/* Bytes of HTTP/2 window a stream starts with: one whole request and its
 * gRPC prefix, so an honest call never waits for a window update. */
static int initial_window(const sg_grpc_server_options *o)
{
	return int_arg((unsigned)o->max_message + 1024);
}

static int setup(sg_grpc_server *s)
{
	const sg_grpc_server_options *o = &s->o;
	grpc_resource_quota *quota = grpc_resource_quota_create("signet-grpc");
	SG_ENSURE(quota, SG_EINTERNAL, "grpc_resource_quota_create failed");
	grpc_resource_quota_resize(quota, o->memory_limit);
	grpc_arg args[] = {
		{GRPC_ARG_POINTER, (char *)GRPC_ARG_RESOURCE_QUOTA,
		 {.pointer = {quota, grpc_resource_quota_arg_vtable()}}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_HTTP2_BDP_PROBE, {.integer = 0}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, {.integer = initial_window(o)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
		 {.integer = int_arg(o->handshake_timeout_ms)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS,
		 {.integer = o->max_connection_idle_ms ? int_arg(o->max_connection_idle_ms) : INT32_MAX}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_CONNECTION_AGE_MS,
		 {.integer = o->max_connection_age_ms ? int_arg(o->max_connection_age_ms) : INT32_MAX}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
		 {.integer = int_arg(o->max_connection_age_grace_ms)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		 {.integer = (int)o->max_message}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS,
		 {.integer = int_arg(o->max_concurrent_streams)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = int_arg(o->keepalive_time_ms)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
		 {.integer = int_arg(o->keepalive_timeout_ms)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, {.integer = 1}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
		 {.integer = int_arg(o->min_ping_interval_ms)}},
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, {.integer = 0}},
		/* a second daemon on our port must fail, not share the traffic */
		{GRPC_ARG_INTEGER, (char *)GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}},
	};
	grpc_channel_args ca = {sizeof(args) / sizeof(args[0]), args};
	s->server = grpc_server_create(&ca, NULL);
	grpc_resource_quota_unref(quota); /* the server holds its own reference */
	SG_ENSURE(s->server, SG_EINTERNAL, "grpc_server_create failed");
	s->method_handle = grpc_server_register_method(s->server, s->method, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
	SG_ENSURE(s->method_handle, SG_EINVAL, "grpc_server_register_method(%s) failed", s->method);
	s->cqs = calloc(o->cq_threads, sizeof(*s->cqs));
	s->threads = calloc(o->cq_threads, sizeof(*s->threads));
	SG_ENSURE(s->cqs && s->threads, SG_EINTERNAL, "out of memory for completion queues");
	for (unsigned i = 0; i < o->cq_threads; i++) {
		s->cqs[i] = grpc_completion_queue_create_for_next(NULL);
		SG_ENSURE(s->cqs[i], SG_EINTERNAL, "grpc_completion_queue_create_for_next failed");
		grpc_server_register_completion_queue(s->server, s->cqs[i], NULL);
	}
	grpc_server_credentials *creds;
	SG_TRY(make_credentials(s, &creds));
	s->port = grpc_server_add_http2_port(s->server, o->address, creds);
	grpc_server_credentials_release(creds);
	if (s->port <= 0) {
		pthread_mutex_lock(&s->tls_mu);
		bool tls_failed = !o->insecure && !s->have_tls;
		pthread_mutex_unlock(&s->tls_mu);
		if (tls_failed)
			SG_BAIL(SG_EINVAL, "grpc server: no TLS configuration for %s: %s", o->address,
				s->tls_error[0] ? s->tls_error : "the fetcher failed");
		SG_BAIL(SG_EBUSY, "grpc server: cannot bind %s", o->address);
	}
	/* The listener exists once the port is added; guard it before the
	 * first accept. */
	SG_TRY(sg_grpc_guard_new(&s->guard, s->port, o->max_connections, o->resets_per_second));
	grpc_server_start(s->server);
	for (unsigned i = 0; i < o->cq_threads; i++) {
		for (unsigned k = 0; k < o->calls_per_thread; k++)
			SG_TRY(request_call(s, i));
		for (unsigned k = 0; k < 4; k++)
			SG_TRY(request_other(s, i));
	}
	for (unsigned i = 0; i < o->cq_threads; i++) {
		cq_arg *a = malloc(sizeof(*a));
		SG_ENSURE(a, SG_EINTERNAL, "out of memory for a thread");
		*a = (cq_arg){s, i};
		if (pthread_create(&s->threads[i], NULL, cq_thread, a) != 0) {
			free(a);
			SG_BAIL(SG_EINTERNAL, "pthread_create failed for a transport thread");
		}
		s->nthreads++;
	}
	SG_ENSURE(pthread_create(&s->reaper, NULL, reaper_thread, s) == 0, SG_EINTERNAL,
		  "pthread_create failed for the deadline thread");
	s->reaper_started = true;
	return SG_OK;
}

static int check_options(sg_grpc_server_options *o)
{
	SG_ENSURE(o->address && o->address[0], SG_EINVAL, "grpc server: no address");
	SG_ENSURE(o->handler, SG_EINVAL, "grpc server: no handler");
	if (!o->method)
		o->method = SG_GRPC_ISTIO_METHOD;
	SG_ENSURE(o->method[0] == '/', SG_EINVAL, "grpc server: method %s does not start with /", o->method);
	if (!o->cq_threads)
		o->cq_threads = 2;
	SG_ENSURE(o->cq_threads <= 64, SG_EINVAL, "grpc server: %u transport threads (max 64)", o->cq_threads);
	if (!o->calls_per_thread)
		o->calls_per_thread = 128;
	SG_ENSURE(o->calls_per_thread <= 4096, SG_EINVAL, "grpc server: calls_per_thread %u (max 4096)",
		  o->calls_per_thread);
	if (!o->max_message)
		o->max_message = 64 * 1024;
	SG_ENSURE(o->max_message <= (16u << 20), SG_EINVAL, "grpc server: max_message %zu (max 16 MiB)",
		  o->max_message);
	if (!o->server_timeout_ns)
		o->server_timeout_ns = 10ull * 1000000000u;
	if (!o->max_concurrent_streams)
		o->max_concurrent_streams = 100;
	struct rlimit rl;
	SG_ENSURE(getrlimit(RLIMIT_NOFILE, &rl) == 0, SG_EINTERNAL, "getrlimit(RLIMIT_NOFILE) failed");
	rlim_t room = rl.rlim_cur > SG_GRPC_FD_RESERVE + 16 ? rl.rlim_cur - SG_GRPC_FD_RESERVE : 16;
	if (room > UINT32_MAX / 2)
		room = UINT32_MAX / 2;
	if (!o->memory_limit)
		o->memory_limit = 256u << 20;
	SG_ENSURE(o->memory_limit >= (4u << 20), SG_EINVAL, "grpc server: memory limit %zu below 4 MiB",
		  o->memory_limit);
	if (!o->max_connections) {
		/* The cap must be what refuses connections (at once, counted,
		 * readiness down), not the memory quota running out first. */
		size_t by_memory = o->memory_limit / SG_GRPC_CONN_QUOTA;
		rlim_t cap = room < SG_GRPC_DEFAULT_MAX_CONNECTIONS ? room : SG_GRPC_DEFAULT_MAX_CONNECTIONS;
		if (by_memory < cap) /* >= 85: the limit is at least 4 MiB */
			cap = (rlim_t)by_memory;
		o->max_connections = (unsigned)cap;
	}
	SG_ENSURE(o->max_connections <= room, SG_EINVAL,
		  "grpc server: max-connections %u needs an open-files limit of at least %u (it is %llu)",
		  o->max_connections, o->max_connections + SG_GRPC_FD_RESERVE, (unsigned long long)rl.rlim_cur);
	if (!o->handshake_timeout_ms)
		o->handshake_timeout_ms = 10000;
	if (!o->max_connection_age_grace_ms)
		o->max_connection_age_grace_ms = 30000;
	if (!o->resets_per_second)
		o->resets_per_second = 200;
	if (!o->min_ping_interval_ms)
		o->min_ping_interval_ms = 10000;
	if (!o->keepalive_time_ms)
		o->keepalive_time_ms = 60000;
	if (!o->keepalive_timeout_ms)
		o->keepalive_timeout_ms = 20000;
	return SG_OK;
}

int sg_grpc_server_start(sg_grpc_server **out, const sg_grpc_server_options *opts)
{
	*out = NULL;
	sg_grpc_server_options o = *opts;
	SG_TRY(check_options(&o));
	sg_grpc_server *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory for a server");
	s->o = o;
	s->method = strdup(o.method);
	s->o.method = s->method;
	s->o.address = NULL; /* not kept */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_cond_init(&s->reaper_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->tls_mu, NULL);
	s->t_shutdown = (tag){TAG_SHUTDOWN, s};
	sg_grpc_absl_quiet();
	grpc_init();
	s->grpc_inited = true;
	s->o.address = o.address;
	int rc = s->method ? setup(s) : sg_error_set(SG_EINTERNAL, "out of memory");
	s->o.address = NULL;
	if (rc < 0) {
		sg_error saved;
		sg_error_save(&saved);
		sg_grpc_server_shutdown(s, 0);
		sg_error_restore(&saved);
		return rc;
	}
	*out = s;
	return SG_OK;
}

int sg_grpc_server_port(const sg_grpc_server *s)
{
	return s ? s->port : 0;
}

void sg_grpc_server_stats_get(sg_grpc_server *s, sg_grpc_server_stats *out)
{
	sg_grpc_guard_stats g = {0};
	if (s->guard)
		sg_grpc_guard_stats_get(s->guard, &g);
	*out = (sg_grpc_server_stats){
		.connections = g.open,
		.max_connections = s->o.max_connections,
		.refused_limit = g.refused_limit,
		.refused_fds = g.refused_fds,
		.rapid_reset_closed = g.rapid_reset_closed,
		.calls_cancelled = atomic_load_explicit(&s->calls_cancelled, memory_order_relaxed),
		.streams_expired = atomic_load_explicit(&s->streams_expired, memory_order_relaxed),
		.answers_dropped = atomic_load_explicit(&s->answers_dropped, memory_order_relaxed),
		.last_refused_ns = g.last_refused_ns,
	};
}

/* Waits on the server condition until pred holds or deadline (monotonic ns,
 * 0 = forever) passes; returns pred. Called with s->mu held. */
static bool wait_until(sg_grpc_server *s, bool (*pred)(sg_grpc_server *), uint64_t deadline)
{
	uint64_t last_log = sg_now_ns();
	while (!pred(s)) {
		uint64_t now = sg_now_ns();
		if (deadline && now >= deadline)
			return false;
		uint64_t until = now + 200000000u; /* re-check periodically */
		if (deadline && deadline < until)
			until = deadline;
		struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
		pthread_cond_timedwait(&s->cond, &s->mu, &ts);
		if (!deadline && sg_now_ns() - last_log > 5000000000u) {
			sg_log(SG_LOG_WARN, "grpc: shutdown waits for the handler to finish calls",
			       SG_F_INT("calls", s->handler_refs), SG_F_END);
			last_log = sg_now_ns();
		}
	}
	return true;
}

static bool all_answered(sg_grpc_server *s)
{
	return s->open_calls == 0;
}

static bool notified(sg_grpc_server *s)
{
	return s->shutdown_notified;
}

static bool in_flight_ended(sg_grpc_server *s)
{
	return s->closed_total >= s->drain_target;
}

static bool all_released(sg_grpc_server *s)
{
	return s->handler_refs == 0 && s->shutdown_notified;
}

void sg_grpc_server_shutdown(sg_grpc_server *s, uint64_t grace_ns)
{
	if (!s)
		return;
	bool started = s->server && s->nthreads > 0;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	s->goaway = !started; /* a server that never served has nothing to drain */
	pthread_mutex_unlock(&s->mu);
	if (started) {
		uint64_t deadline = sg_now_ns() + grace_ns;
		/* Answer the calls in flight before saying GOAWAY. gRPC closes a
		 * connection the moment its last stream ends after a GOAWAY; a
		 * client that still sends then (a BDP or keepalive ping answering
		 * our last answer) gets a reset, and a reset makes its kernel drop
		 * the answers it has not read yet. So: wait for the calls in
		 * flight now (new ones keep being accepted meanwhile), give clients a
		 * moment to read, and only then start gRPC's shutdown, which then
		 * finds little or nothing in flight. */
		pthread_mutex_lock(&s->mu);
		bool in_flight = s->open_calls > 0;
		s->drain_target = s->closed_total + s->open_calls;
		wait_until(s, in_flight_ended, deadline);
		pthread_mutex_unlock(&s->mu);
		if (in_flight && sg_now_ns() + (uint64_t)LINGER_MS * 1000000u < deadline)
			sg_sleep_ms(LINGER_MS);
		pthread_mutex_lock(&s->mu);
		s->goaway = true;
		pthread_mutex_unlock(&s->mu);
		grpc_server_shutdown_and_notify(s->server, s->cqs[0], &s->t_shutdown);
		pthread_mutex_lock(&s->mu);
		wait_until(s, all_answered, deadline);
		pthread_mutex_unlock(&s->mu);
		reap(s, true);
		/* Let those answers go out before cancelling what remains: gRPC's
		 * shutdown tag says every call has completed. A connection closed
		 * (or a call cancelled) with an answer still unsent or unread is
		 * an answer lost, so wait for the tag within the grace period (and
		 * at least 2 s more for the answers just given by reap). */
		uint64_t flush = sg_now_ns() + 2000000000u;
		pthread_mutex_lock(&s->mu);
		wait_until(s, all_answered, flush > deadline ? flush : deadline);
		bool had_calls = !s->shutdown_notified;
		wait_until(s, notified, flush > deadline ? flush : deadline);
		pthread_mutex_unlock(&s->mu);
		/* "Completed" means written to the socket, not read by the client.
		 * Closing a connection whose peer still sends (window updates,
		 * pings) makes the kernel answer with a reset, and a reset makes
		 * the client's kernel drop answers it has not read yet. After
		 * GOAWAY clients close their connections themselves once their
		 * calls are done; give them a moment before we do. */
		if (had_calls)
			sg_sleep_ms(LINGER_MS);
		grpc_server_cancel_all_calls(s->server);
		pthread_mutex_lock(&s->mu);
		wait_until(s, all_released, 0);
		pthread_mutex_unlock(&s->mu);
	}
	if (s->reaper_started) {
		pthread_mutex_lock(&s->mu);
		s->reaper_stop = true;
		pthread_cond_broadcast(&s->reaper_cond);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->reaper, NULL);
	}
	if (s->server && !started) {
		/* Never served: shut down, draining the queues here. */
		grpc_server_shutdown_and_notify(s->server, s->cqs[0], &s->t_shutdown);
		grpc_server_cancel_all_calls(s->server);
		for (unsigned i = 0; s->cqs && i < s->o.cq_threads && s->cqs[i]; i++) {
			for (;;) {
				grpc_event ev = grpc_completion_queue_next(
					s->cqs[i], gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
								gpr_time_from_millis(200, GPR_TIMESPAN)),
					NULL);
				if (ev.type != GRPC_OP_COMPLETE)
					break;
				dispatch(s, ev.tag, ev.success != 0);
			}
		}
	}
	if (s->server)
		grpc_server_destroy(s->server);
	sg_grpc_guard_free(s->guard);
	for (unsigned i = 0; s->cqs && i < s->o.cq_threads; i++)
		if (s->cqs[i])
			grpc_completion_queue_shutdown(s->cqs[i]);
	for (unsigned i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	for (unsigned i = 0; s->cqs && i < s->o.cq_threads; i++) {
		if (!s->cqs[i])
			continue;
		if (i >= s->nthreads) /* no thread drained it */
			while (grpc_completion_queue_next(s->cqs[i], gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
				       .type != GRPC_QUEUE_SHUTDOWN)
				;
		grpc_completion_queue_destroy(s->cqs[i]);
	}
	free(s->cqs);
	free(s->threads);
	if (s->grpc_inited)
		grpc_shutdown();
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->tls_mu);
	pthread_cond_destroy(&s->cond);
	pthread_cond_destroy(&s->reaper_cond);
	free(s->method);
	free(s);
}
