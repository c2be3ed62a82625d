/*
 * The gRPC C core adapter, client side: channels, a blocking unary call
 * (signetctl) and asynchronous unary calls (the load generator).
 *
 * Every unary call is one batch of the six client ops (send metadata,
 * message and close; receive metadata, message and status). The blocking
 * form plucks that batch from a completion queue of its own, so any number
 * of threads may call concurrently on one channel (a shared pluck queue
 * would allow only GRPC_MAX_COMPLETION_QUEUE_PLUCKERS). The asynchronous
 * form runs the batch on the client's queue, whose one thread completes the
 * calls and runs the reply callbacks; channels do not own queues, so one
 * client serves any number of channels (perf/herd: thousands of
 * connections on one thread).
 */
#include "sg_grpc.h"

#include "sg_grpc_absl.h"
#include "sg_guard.h"

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

struct sg_grpc_channel {
	grpc_channel *ch;
};

struct sg_grpc_client {
	grpc_completion_queue *cq;
	pthread_t thread;
};

/* One unary call's state: what the six ops read and write. */
typedef struct unary {
	grpc_call *call;
	grpc_metadata *md;
	size_t nmd;
	grpc_slice *md_slices; /* 2 * nmd copies (async) */
	grpc_byte_buffer *send;
	grpc_metadata_array initial, trailing;
	grpc_byte_buffer *recv;
	grpc_status_code status;
	grpc_slice details;
	const char *error_string;
	sg_grpc_reply_fn done; /* async only */
	void *arg;
	/* Release/acquire handoff to the thread that completes the call. The
	 * completion queue orders it already, but inside uninstrumented libgrpc
	 * where ThreadSanitizer cannot see it. */
	atomic_int published;
} unary;

int sg_grpc_channel_new(sg_grpc_channel **out, const sg_grpc_channel_options *o)
{
	*out = NULL;
	SG_ENSURE(o->target && o->target[0], SG_EINVAL, "grpc channel: no target");
	SG_ENSURE(!o->client_cert_pem == !o->client_key_pem, SG_EINVAL,
		  "grpc channel: a client certificate needs its key and the key its certificate");
	SG_ENSURE(o->root_pem || !o->client_cert_pem, SG_EINVAL,
		  "grpc channel: a client certificate needs TLS (root_pem)");
	sg_grpc_channel *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory for a channel");
	sg_grpc_absl_quiet();
	grpc_init();

	grpc_channel_credentials *creds;
	if (o->root_pem) {
		grpc_ssl_pem_key_cert_pair pair = {o->client_key_pem, o->client_cert_pem};
		creds = grpc_ssl_credentials_create(o->root_pem, o->client_cert_pem ? &pair : NULL, NULL,
						    NULL);
	} else {
		creds = grpc_insecure_credentials_create();
	}
	grpc_arg args[9];
	size_t n = 0;
	args[n].type = GRPC_ARG_INTEGER;
	args[n].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
	args[n++].value.integer = 4 << 20;
	if (o->own_connection) {
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
		args[n++].value.integer = 1;
	}
	if (o->keepalive_ms) {
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
		args[n++].value.integer = o->keepalive_ms > INT32_MAX ? INT32_MAX : (int)o->keepalive_ms;
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
		args[n++].value.integer = 1;
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA;
		args[n++].value.integer = 0;
	}
	if (o->reconnect_backoff_max_ms) {
		/* A caller that retries on its own schedule (a node agent) must
		 * reach a CA that comes back within seconds, not after gRPC's
		 * backoff has grown to two minutes; the first attempts start at
		 * most a second apart so the cap is not reached at once either. */
		int max = o->reconnect_backoff_max_ms > INT32_MAX ? INT32_MAX : (int)o->reconnect_backoff_max_ms;
		int first = max < 1000 ? max : 1000;
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
		args[n++].value.integer = max;
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
		args[n++].value.integer = first;
		args[n].type = GRPC_ARG_INTEGER;
		args[n].key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
		args[n++].value.integer = first;
	}
	if (o->server_name) {
		args[n].type = GRPC_ARG_STRING;
		args[n].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
		args[n++].value.string = (char *)o->server_name;
	}
	grpc_channel_args ca = {n, args};
	c->ch = creds ? grpc_channel_create(o->target, creds, &ca) : NULL;
	if (creds)
		grpc_channel_credentials_release(creds);
	if (!c->ch) {
		free(c);
		grpc_shutdown();
		SG_BAIL(SG_EINTERNAL, "grpc channel: cannot create a channel to %s", o->target);
	}
	*out = c;
	return SG_OK;
}

void sg_grpc_channel_free(sg_grpc_channel *c)
{
	if (!c)
		return;
	grpc_channel_destroy(c->ch);
	free(c);
	grpc_shutdown();
}

int sg_grpc_channel_state(sg_grpc_channel *c, bool connect)
{
	switch (grpc_channel_check_connectivity_state(c->ch, connect ? 1 : 0)) {
	case GRPC_CHANNEL_IDLE:
		return SG_GRPC_CHANNEL_IDLE;
	case GRPC_CHANNEL_CONNECTING:
		return SG_GRPC_CHANNEL_CONNECTING;
	case GRPC_CHANNEL_READY:
		return SG_GRPC_CHANNEL_READY;
	case GRPC_CHANNEL_TRANSIENT_FAILURE:
		return SG_GRPC_CHANNEL_FAILING;
	default:
		return SG_GRPC_CHANNEL_SHUTDOWN;
	}
}

static gpr_timespec deadline_of(uint64_t timeout_ns)
{
	if (!timeout_ns || timeout_ns > (uint64_t)INT64_MAX / 2)
		return gpr_inf_future(GPR_CLOCK_MONOTONIC);
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_nanos((int64_t)timeout_ns, GPR_TIMESPAN));
}

static void unary_free(unary *u)
{
	if (u->call)
		grpc_call_unref(u->call);
	if (u->send)
		grpc_byte_buffer_destroy(u->send);
	if (u->recv)
		grpc_byte_buffer_destroy(u->recv);
	grpc_metadata_array_destroy(&u->initial);
	grpc_metadata_array_destroy(&u->trailing);
	grpc_slice_unref(u->details);
	gpr_free((void *)u->error_string);
	if (u->md_slices)
		for (size_t i = 0; i < 2 * u->nmd; i++)
			grpc_slice_unref(u->md_slices[i]);
	free(u->md_slices);
	free(u->md);
	free(u);
}

/* Creates the call on cq and starts the six ops with tag u. copy_md: the
 * metadata strings are copied (they must outlive the caller's). */
static int unary_start(unary *u, sg_grpc_channel *ch, grpc_completion_queue *cq, const char *method,
		       const sg_grpc_md *md, size_t nmd, const uint8_t *req, size_t len,
		       uint64_t timeout_ns, bool copy_md)
{
	SG_ENSURE(method && method[0] == '/', SG_EINVAL, "grpc call: bad method");
	SG_ENSURE(nmd <= 64, SG_EINVAL, "grpc call: %zu headers (max 64)", nmd);
	grpc_metadata_array_init(&u->initial);
	grpc_metadata_array_init(&u->trailing);
	u->details = grpc_empty_slice();
	if (nmd) {
		u->md = calloc(nmd, sizeof(*u->md));
		SG_ENSURE(u->md, SG_EINTERNAL, "out of memory for call metadata");
		if (copy_md) {
			u->md_slices = calloc(2 * nmd, sizeof(*u->md_slices));
			SG_ENSURE(u->md_slices, SG_EINTERNAL, "out of memory for call metadata");
		}
		u->nmd = nmd;
		for (size_t i = 0; i < nmd; i++) {
			if (copy_md) {
				u->md_slices[2 * i] = grpc_slice_from_copied_string(md[i].key);
				u->md_slices[2 * i + 1] = grpc_slice_from_copied_string(md[i].value);
				u->md[i].key = u->md_slices[2 * i];
				u->md[i].value = u->md_slices[2 * i + 1];
			} else {
				u->md[i].key = grpc_slice_from_static_string(md[i].key);
				u->md[i].value = grpc_slice_from_static_string(md[i].value);
			}
		}
	}
	grpc_slice body = grpc_slice_from_copied_buffer((const char *)req, len);
	u->send = grpc_raw_byte_buffer_create(&body, 1);
	grpc_slice_unref(body);
	grpc_slice msl = grpc_slice_from_static_string(method);
	u->call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, msl, NULL,
					   deadline_of(timeout_ns), NULL);
	SG_ENSURE(u->call, SG_EINTERNAL, "grpc_channel_create_call(%s) failed", method);

	grpc_op ops[6];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[0].data.send_initial_metadata.count = nmd;
	ops[0].data.send_initial_metadata.metadata = u->md;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = u->send;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &u->recv;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing;
	ops[5].data.recv_status_on_client.status = &u->status;
	ops[5].data.recv_status_on_client.status_details = &u->details;
	ops[5].data.recv_status_on_client.error_string = &u->error_string;
	grpc_call *call = u->call; /* u may complete and be freed at once */
	atomic_store_explicit(&u->published, 1, memory_order_release);
	grpc_call_error e = grpc_call_start_batch(call, ops, 6, u, NULL);
	SG_ENSURE(e == GRPC_CALL_OK, SG_EINTERNAL, "grpc_call_start_batch failed: %s",
		  grpc_call_error_to_string(e));
	return SG_OK;
}

/* The received message, flattened and malloc'ed; NULL with *len 0 when
 * none. */
static int unary_message(unary *u, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	if (!u->recv)
		return SG_OK;
	grpc_byte_buffer_reader rd;
	SG_ENSURE(grpc_byte_buffer_reader_init(&rd, u->recv), SG_EINTERNAL,
		  "cannot read the response message");
	grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
	grpc_byte_buffer_reader_destroy(&rd);
	size_t n = GRPC_SLICE_LENGTH(s);
	uint8_t *p = malloc(n ? n : 1);
	if (p && n)
		memcpy(p, GRPC_SLICE_START_PTR(s), n);
	grpc_slice_unref(s);
	SG_ENSURE(p, SG_EINTERNAL, "out of memory for a %zu-byte response", n);
	*out = p;
	*len = n;
	return SG_OK;
}

static void details_to(const unary *u, char *msg, size_t cap)
{
	if (!msg || !cap)
		return;
	size_t n = GRPC_SLICE_LENGTH(u->details);
	if (n >= cap)
		n = cap - 1;
	if (n)
		memcpy(msg, GRPC_SLICE_START_PTR(u->details), n);
	msg[n] = '\0';
}

int sg_grpc_unary(sg_grpc_channel *ch, const char *method, const sg_grpc_md *md, size_t nmd,
		  const uint8_t *req, size_t req_len, uint64_t timeout_ns, uint8_t **resp,
		  size_t *resp_len, int *status, char *msg, size_t msg_cap)
{
	*resp = NULL;
	*resp_len = 0;
	*status = SG_GRPC_UNKNOWN;
	if (msg && msg_cap)
		msg[0] = '\0';
	unary *u = calloc(1, sizeof(*u));
	SG_ENSURE(u, SG_EINTERNAL, "out of memory for a call");
	grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
	if (!cq) {
		free(u);
		SG_BAIL(SG_EINTERNAL, "grpc_completion_queue_create_for_pluck failed");
	}
	int rc = unary_start(u, ch, cq, method, md, nmd, req, req_len, timeout_ns, false);
	if (rc == 0) {
		grpc_event ev = grpc_completion_queue_pluck(cq, u, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
			rc = sg_error_set(SG_EINTERNAL, "grpc call: the batch failed");
		} else {
			*status = (int)u->status;
			details_to(u, msg, msg_cap);
			if (u->status == GRPC_STATUS_OK)
				rc = unary_message(u, resp, resp_len);
		}
	}
	unary_free(u);
	grpc_completion_queue_shutdown(cq);
	grpc_completion_queue_destroy(cq);
	return rc;
}

/* ---- asynchronous client ----------------------------------------------- */

static void *client_thread(void *p)
{
	sg_grpc_client *c = p;
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		unary *u = ev.tag;
		(void)atomic_load_explicit(&u->published, memory_order_acquire);
		char msg[512];
		uint8_t *resp = NULL;
		size_t len = 0;
		int status = ev.success ? (int)u->status : SG_GRPC_UNKNOWN;
		details_to(u, msg, sizeof(msg));
		if (!ev.success)
			snprintf(msg, sizeof(msg), "grpc call: the batch failed");
		if (status == SG_GRPC_OK && unary_message(u, &resp, &len) < 0) {
			status = SG_GRPC_INTERNAL;
			snprintf(msg, sizeof(msg), "%s", sg_error_last()->msg);
		}
		u->done(status, msg, resp, len, u->arg);
		free(resp);
		unary_free(u);
	}
	return NULL;
}

int sg_grpc_client_new(sg_grpc_client **out)
{
	*out = NULL;
	sg_grpc_client *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory for a client");
	sg_grpc_absl_quiet();
	grpc_init();
	c->cq = grpc_completion_queue_create_for_next(NULL);
	if (!c->cq || pthread_create(&c->thread, NULL, client_thread, c) != 0) {
		if (c->cq)
			grpc_completion_queue_destroy(c->cq);
		free(c);
		grpc_shutdown();
		SG_BAIL(SG_EINTERNAL, "grpc client: cannot create its queue or thread");
	}
	*out = c;
	return SG_OK;
}

void sg_grpc_client_free(sg_grpc_client *c)
{
	if (!c)
		return;
	grpc_completion_queue_shutdown(c->cq); /* pending calls complete first */
	pthread_join(c->thread, NULL);
	grpc_completion_queue_destroy(c->cq);
	free(c);
	grpc_shutdown();
}

int sg_grpc_call_start(sg_grpc_client *c, sg_grpc_channel *ch, const char *method,
		       const sg_grpc_md *md, size_t nmd, const uint8_t *req, size_t len,
		       uint64_t timeout_ns, sg_grpc_reply_fn done, void *arg)
{
	SG_ENSURE(done, SG_EINVAL, "grpc call: no reply callback");
	unary *u = calloc(1, sizeof(*u));
	SG_ENSURE(u, SG_EINTERNAL, "out of memory for a call");
	u->done = done;
	u->arg = arg;
	int rc = unary_start(u, ch, c->cq, method, md, nmd, req, len, timeout_ns, true);
	if (rc < 0)
		unary_free(u);
	return rc;
}
