/*
 * sg_grpc: the one adapter over the gRPC C core (libgrpc 1.51): a unary
 * server for the Istio CA API and a client (blocking and asynchronous).
 * Nothing else includes <grpc/...>; the rest of signet sees these types.
 *
 * Server model. Transport threads (one per completion queue) accept calls
 * and run the handler on the transport thread with the flattened request
 * message and its headers. The handler must not block: it hands the work on
 * (to the signer pool) and the call is answered later, from any thread, by
 * sg_grpc_call_finish. The handler must call sg_grpc_call_finish exactly
 * once for every call it is given, even when the call has meanwhile expired
 * or been cancelled (finish then returns SG_ETIMEOUT and sends nothing);
 * that call also releases the call object.
 *
 * Deadlines: a call's deadline is the client's grpc-timeout, capped by the
 * server timeout (istio-agent sends none), counted from the moment the
 * call's headers arrive. When it passes before the handler finishes, or
 * before the client has even sent its request message, the adapter answers
 * DEADLINE_EXCEEDED itself (which also resets the stream).
 *
 * Hostile peers (none of this needs credentials): request bytes are bounded
 * by small HTTP/2 windows and a memory quota for the whole server; a
 * connection cap (with the listener kept alive when descriptors run out,
 * sg_grpc_conn.h), a handshake timeout, idle and age limits, a stream cap
 * per connection and the deadline above reclaim what a silent client holds;
 * a connection that cancels streams faster than resets_per_second is closed
 * (the HTTP/2 rapid-reset defence). sg_grpc_call_ended lets the handler skip
 * work nobody will receive.
 *
 * Errors follow sg_error.h; sg_grpc_status_of is the one table from our
 * error categories to gRPC status codes.
 */
#ifndef SG_GRPC_H
#define SG_GRPC_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* gRPC status codes (grpc_status_code values), so callers need no gRPC
 * header. */
enum sg_grpc_status {
	SG_GRPC_OK = 0,
	SG_GRPC_CANCELLED = 1,
	SG_GRPC_UNKNOWN = 2,
	SG_GRPC_INVALID_ARGUMENT = 3,
	SG_GRPC_DEADLINE_EXCEEDED = 4,
	SG_GRPC_NOT_FOUND = 5,
	SG_GRPC_PERMISSION_DENIED = 7,
	SG_GRPC_RESOURCE_EXHAUSTED = 8,
	SG_GRPC_FAILED_PRECONDITION = 9,
	SG_GRPC_UNIMPLEMENTED = 12,
	SG_GRPC_INTERNAL = 13,
	SG_GRPC_UNAVAILABLE = 14,
	SG_GRPC_UNAUTHENTICATED = 16,
};

/* The status for one of our error codes (sg_error.h), as Istio's servers
 * answer (reference §7.5): invalid -> INVALID_ARGUMENT, auth and policy ->
 * UNAUTHENTICATED, busy and HSM -> UNAVAILABLE (retryable), timeout ->
 * DEADLINE_EXCEEDED, protocol -> INVALID_ARGUMENT, not_found and internal
 * -> INTERNAL; 0 -> OK. */
SG_API int sg_grpc_status_of(int sg_code);
/* "OK", "INVALID_ARGUMENT", ... for logs; "UNKNOWN_STATUS" otherwise. */
SG_API const char *sg_grpc_status_name(int status);

/* ---- server ------------------------------------------------------------ */

typedef struct sg_grpc_server sg_grpc_server;
typedef struct sg_grpc_call sg_grpc_call; /* one in-flight unary call */

/* What the handler sees; every pointer is borrowed until the call is
 * finished (sg_grpc_call_finish). */
typedef struct sg_grpc_request {
	const uint8_t *body; /* the serialized request message, contiguous */
	size_t len;
	const char *authorization; /* "authorization" header (first one), or NULL */
	const char *cluster_id;    /* "clusterid" header, or NULL */
	const char *peer_identity; /* first URI SAN of a verified client certificate, or NULL */
	const char *peer;          /* peer address for logs ("ipv4:127.0.0.1:5000") */
	uint64_t deadline_ns;      /* CLOCK_MONOTONIC (sg_now_ns): min(client deadline, server timeout) */
	uint64_t received_ns;      /* CLOCK_MONOTONIC when the call was accepted */
} sg_grpc_request;

/* Runs on a transport thread for each accepted call; must not block. */
typedef void (*sg_grpc_handler)(sg_grpc_call *call, const sg_grpc_request *req, void *arg);

/* Answers the call and releases it; call exactly once per handled call,
 * from any thread. status is a grpc status code (SG_GRPC_*); msg the detail
 * for errors (may be NULL); resp/resp_len the serialized response for OK
 * (copied). Returns 0 when the answer was handed to gRPC, SG_ETIMEOUT when
 * the call had already been answered by the adapter (deadline passed,
 * server shut down) or cancelled by the client, SG_EINTERNAL when gRPC
 * refused the batch. In every case the call is released: do not touch it
 * again. */
SG_API int sg_grpc_call_finish(sg_grpc_call *call, int status, const char *msg,
			       const uint8_t *resp, size_t resp_len);

/* The serving TLS material, fetched by gRPC's certificate-config fetcher at
 * start and before every TLS handshake, from transport threads: must be
 * fast and thread-safe. On success it sets *cert_chain_pem (serving chain,
 * leaf first), *key_pem (its key), *client_ca_pem (roots for client
 * certificates, may stay NULL when request_client_cert is off), all
 * allocated with malloc and taken over by the adapter (which frees them,
 * wiping the key), and *version, which must change whenever the material
 * does: an unchanged version keeps the current configuration, a new one
 * is used for new connections (existing ones keep theirs). A negative
 * result keeps the current configuration (logged); at start it fails
 * sg_grpc_server_start. */
typedef int (*sg_grpc_tls_fetch)(void *arg, char **cert_chain_pem, char **key_pem,
				 char **client_ca_pem, uint64_t *version);

typedef struct sg_grpc_server_options {
	const char *address; /* "0.0.0.0:6443"; port 0 picks one (sg_grpc_server_port) */
	const char *method;  /* the one method served (default SG_GRPC_ISTIO_METHOD) */
	sg_grpc_handler handler;
	void *handler_arg;
	unsigned cq_threads;        /* transport threads, one completion queue each (default 2) */
	unsigned calls_per_thread;  /* calls requested in advance per queue (default 128) */
	size_t max_message;         /* largest request message (default 64 KiB) */
	uint64_t server_timeout_ns; /* deadline cap, and the deadline when the client sends none (default 10 s) */
	unsigned max_concurrent_streams; /* per connection (default 100) */
	/* Connections held at once; more are refused at once with a TCP reset
	 * (0: the smallest of SG_GRPC_DEFAULT_MAX_CONNECTIONS, the open-files
	 * soft limit less SG_GRPC_FD_RESERVE, and memory_limit /
	 * SG_GRPC_CONN_QUOTA, at least 16; more than the open-files room is
	 * refused with SG_EINVAL, since the process would run out of
	 * descriptors first). */
	unsigned max_connections;
	unsigned handshake_timeout_ms;	 /* TLS and HTTP/2 preface (default 10 s) */
	unsigned max_connection_idle_ms; /* close a connection without calls after this (0: never) */
	unsigned max_connection_age_ms;	 /* GOAWAY after this, +-10 % jitter (0: never) */
	unsigned max_connection_age_grace_ms; /* then calls get this long before the close (default 30 s) */
	size_t memory_limit; /* bytes the server's connections may buffer, in all (default 256 MiB) */
	unsigned resets_per_second; /* client cancels per connection per second before it is closed (default 200) */
	/* Keepalive: clients may ping every min_ping_interval_ms (default 10 s,
	 * below istio-agent's 30 s), also without calls, without being sent
	 * GOAWAY; the server pings idle connections every keepalive_time_ms
	 * (default 60 s) and drops them after keepalive_timeout_ms (20 s). */
	unsigned min_ping_interval_ms;
	unsigned keepalive_time_ms;
	unsigned keepalive_timeout_ms;
	bool insecure; /* plaintext HTTP/2 (tests and benchmarks only) */
	/* TLS (unless insecure): required. */
	sg_grpc_tls_fetch tls_fetch;
	void *tls_arg;
	/* Request a client certificate and verify it against client_ca_pem when
	 * one is presented (a client without one is still served, with
	 * peer_identity NULL; an untrusted one fails the handshake). */
	bool request_client_cert;
} sg_grpc_server_options;

#define SG_GRPC_ISTIO_METHOD "/istio.v1.auth.IstioCertificateService/CreateCertificate"

/* Descriptors kept for everything but gRPC connections (HSM, files, the
 * HTTP endpoints, the Kubernetes client) when max_connections is derived
 * from the open-files limit. */
#define SG_GRPC_FD_RESERVE 256
/* An idle TLS connection costs about 75 KiB (gRPC's buffers, the TLS
 * session, kernel socket memory): 16384 of them are about 1.2 GiB. */
#define SG_GRPC_DEFAULT_MAX_CONNECTIONS 16384
/* What one idle TLS connection holds of the memory quota (its read buffer
 * and TLS records; measured 32-44 KiB with gRPC 1.51, rounded up). Past
 * memory_limit / this, gRPC's quota, not the connection cap, would refuse
 * connections: it closes them during the handshake and reclaims idle ones,
 * uncounted, while the server still calls itself ready (perf/herd: at
 * 10,000 connections and the default 256 MiB only ~6,000 were served). So
 * the default cap is derived from the limit too. */
#define SG_GRPC_CONN_QUOTA (48u * 1024u)

/* Binds, starts the transport threads and serves. Unknown methods are
 * answered UNIMPLEMENTED. *out is freed by sg_grpc_server_shutdown.
 * SG_EINVAL for bad options, SG_EBUSY when the address cannot be bound,
 * SG_EINTERNAL when gRPC fails. */
SG_API int sg_grpc_server_start(sg_grpc_server **out, const sg_grpc_server_options *o) SG_MUST_CHECK;

/* The bound port (the address may say :0). */
SG_API int sg_grpc_server_port(const sg_grpc_server *s);

typedef struct sg_grpc_server_stats {
	uint64_t connections;	      /* open now (closed ones are noticed within a second) */
	uint64_t max_connections;     /* the cap in force */
	uint64_t refused_limit;	      /* connections refused at the cap */
	uint64_t refused_fds;	      /* connections refused for want of a descriptor */
	uint64_t rapid_reset_closed;  /* connections closed for cancelling too fast */
	uint64_t calls_cancelled;     /* calls the client cancelled or reset */
	uint64_t streams_expired;     /* calls reset because no request message came in time */
	uint64_t answers_dropped;     /* answers not written by the deadline (client grants no window): reset */
	uint64_t last_refused_ns;     /* CLOCK_MONOTONIC of the last refused connection, 0: never */
} sg_grpc_server_stats;

/* Counters for metrics and readiness; any thread. */
SG_API void sg_grpc_server_stats_get(sg_grpc_server *s, sg_grpc_server_stats *out);

/* True once nobody can receive this call's answer any more: the client
 * cancelled or reset it, its deadline passed, or the server shut down.
 * The handler asks before costly work (authentication, signing); the call
 * must still be finished. Any thread, until sg_grpc_call_finish. */
SG_API bool sg_grpc_call_ended(const sg_grpc_call *call);

/* Lets the calls in flight be answered first (new calls are still accepted
 * meanwhile, and clients get half a second to read their answers), then
 * stops accepting connections and calls (GOAWAY); calls in flight may still
 * be finished by the handler until grace_ns passes, after which the adapter
 * answers the rest UNAVAILABLE. Then waits until the handler has released
 * every call it was given (sg_grpc_call_finish), joins the threads and
 * frees the server. Accepts NULL. */
SG_API void sg_grpc_server_shutdown(sg_grpc_server *s, uint64_t grace_ns);

/* ---- client ------------------------------------------------------------ */

typedef struct sg_grpc_channel sg_grpc_channel;

typedef struct sg_grpc_channel_options {
	const char *target;          /* "host:port" */
	const char *root_pem;        /* roots for the server certificate; NULL: plaintext */
	const char *server_name;     /* TLS name to verify instead of the target host */
	const char *client_cert_pem; /* optional client certificate chain ... */
	const char *client_key_pem;  /* ... and its key */
	bool own_connection;         /* do not share connections with other channels (load tests) */
	unsigned keepalive_ms;       /* ping the server this often, also when idle; 0: gRPC default (off) */
	unsigned reconnect_backoff_max_ms; /* cap of gRPC's reconnect backoff (0: gRPC's 120 s) */
} sg_grpc_channel_options;

/* A channel (connections are made lazily and shared by calls); free with
 * sg_grpc_channel_free after its calls have completed. */
SG_API int sg_grpc_channel_new(sg_grpc_channel **out, const sg_grpc_channel_options *o) SG_MUST_CHECK;
SG_API void sg_grpc_channel_free(sg_grpc_channel *ch);

/* A channel's connection, as gRPC's connectivity state says. */
enum sg_grpc_channel_state {
	SG_GRPC_CHANNEL_IDLE = 0,	/* no connection, none being made */
	SG_GRPC_CHANNEL_CONNECTING = 1, /* TCP, TLS or the HTTP/2 preface under way */
	SG_GRPC_CHANNEL_READY = 2,	/* connected: a call starts at once */
	SG_GRPC_CHANNEL_FAILING = 3,	/* the last attempt failed; the next waits for its backoff */
	SG_GRPC_CHANNEL_SHUTDOWN = 4,
};

/* The channel's state now; with connect, an idle channel starts connecting
 * (so that a load test can hold its connections open before any call:
 * channels otherwise connect at their first call). Any thread; does not
 * block. The connection makes progress while some thread of the process
 * waits on a completion queue (an sg_grpc_client's thread does). */
SG_API int sg_grpc_channel_state(sg_grpc_channel *ch, bool connect);

typedef struct sg_grpc_md {
	const char *key; /* lower case */
	const char *value;
} sg_grpc_md;

/* Blocking unary call. timeout_ns 0 sends no deadline. On return 0 the call
 * completed: *status is its grpc status, msg (msg_cap bytes, may be NULL)
 * the status details, and for OK *resp (malloc'ed, caller frees) and
 * *resp_len the response message. Negative only when the call could not be
 * made at all. */
SG_API int sg_grpc_unary(sg_grpc_channel *ch, const char *method, const sg_grpc_md *md, size_t nmd,
			 const uint8_t *req, size_t req_len, uint64_t timeout_ns, uint8_t **resp,
			 size_t *resp_len, int *status, char *msg, size_t msg_cap) SG_MUST_CHECK;

/* Asynchronous calls: a client owns a completion queue and one thread that
 * runs the reply callbacks. Any number of channels may share one client
 * (a load test with thousands of connections runs them all on one or a
 * few clients: a thread per connection would take the CPUs from the
 * server it measures). */
typedef struct sg_grpc_client sg_grpc_client;
SG_API int sg_grpc_client_new(sg_grpc_client **out) SG_MUST_CHECK;
/* Waits for the calls in flight (they end by their deadlines at the
 * latest), then stops the thread. Accepts NULL. */
SG_API void sg_grpc_client_free(sg_grpc_client *c);

/* The outcome of an asynchronous call; every pointer is borrowed for the
 * duration of the callback. */
typedef void (*sg_grpc_reply_fn)(int status, const char *msg, const uint8_t *resp, size_t len,
				 void *arg);

/* Starts a unary call (request copied); done runs once on the client's
 * thread. Fails (and done is not called) only when the call cannot start. */
SG_API int sg_grpc_call_start(sg_grpc_client *c, sg_grpc_channel *ch, const char *method,
			      const sg_grpc_md *md, size_t nmd, const uint8_t *req, size_t len,
			      uint64_t timeout_ns, sg_grpc_reply_fn done, void *arg) SG_MUST_CHECK;

#endif
