/*
 * sg_grpc_conn: the gRPC server's connection guard (private to the gRPC
 * adapter, sg_grpc*.c).
 *
 * gRPC core 1.51 gives an application no say over its listener: it accepts
 * every connection the kernel queues, and when accept4 fails with EMFILE it
 * stops accepting on that listener for good. The guard puts the decision
 * back in our hands. It wraps accept4 (the process's definition of the
 * symbol; libgrpc calls it through its PLT, so ours is the one it gets) and,
 * for the listening sockets a server has registered, and only for those:
 *
 *   - refuses a new connection at once (accept, then close with a TCP reset)
 *     when the server already holds max_connections;
 *   - when the process is out of file descriptors, refuses the waiting
 *     connections through a reserved descriptor and reports EAGAIN, so the
 *     listener stays armed and accepting resumes as soon as descriptors free
 *     up;
 *   - remembers each accepted connection (fd, socket cookie, peer address),
 *     so the adapter can count the open ones and close one that abuses the
 *     protocol (sg_grpc_conn_note_reset: the HTTP/2 rapid-reset defence).
 *
 * Every other caller of accept4 (the HTTP endpoints, anything else) goes
 * straight to the C library's. gRPC closes connections without telling us,
 * so a connection counts as open until a sweep finds its descriptor closed
 * or reused (the socket cookie is unique for the life of the system); the
 * guard sweeps before it refuses anything, and the adapter sweeps every
 * second, so the count lags reality by at most that.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef SG_GRPC_CONN_H
#define SG_GRPC_CONN_H

#include "sg_error.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sg_grpc_guard sg_grpc_guard;

typedef struct sg_grpc_guard_stats {
	uint64_t open;		     /* connections accepted and not yet seen closed */
	uint64_t accepted;	     /* ever */
	uint64_t refused_limit;	     /* refused at max_connections */
	uint64_t refused_fds;	     /* refused because the process had no descriptor left */
	uint64_t rapid_reset_closed; /* connections closed for resetting too many streams */
	uint64_t last_refused_ns;    /* CLOCK_MONOTONIC of the last refusal, 0: never */
} sg_grpc_guard_stats;

/* Guards every listening TCP socket of this process bound to `port` (gRPC
 * has just created them in grpc_server_add_http2_port). At most
 * max_connections (>= 1) connections are held at once. resets_per_second:
 * a connection whose streams the client cancels more often than this in one
 * second is closed (0: never). SG_ENOTFOUND when no listener is bound to the
 * port, SG_EINTERNAL when out of memory or descriptors. Free with
 * sg_grpc_guard_free after the server has been destroyed. */
SG_API int sg_grpc_guard_new(sg_grpc_guard **out, int port, unsigned max_connections,
			     unsigned resets_per_second) SG_MUST_CHECK;
SG_API void sg_grpc_guard_free(sg_grpc_guard *g);

/* Forgets the connections that have been closed since the last sweep. */
SG_API void sg_grpc_guard_sweep(sg_grpc_guard *g);

SG_API void sg_grpc_guard_stats_get(sg_grpc_guard *g, sg_grpc_guard_stats *out);

/* A stream of the connection whose peer is `peer` (gRPC's peer string,
 * "ipv4:127.0.0.1:5000" or "ipv6:[::1]:5000") was cancelled by the client.
 * Returns true when this closed the connection (too many in one second). */
SG_API bool sg_grpc_guard_note_reset(sg_grpc_guard *g, const char *peer);

#endif
