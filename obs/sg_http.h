/*
 * sg_http: a small HTTP/1.1 server for the operational endpoints (metrics,
 * readiness, health); the one adapter for libmicrohttpd.
 *
 * The server answers GET and HEAD on a fixed table of exact paths; anything
 * else is refused before a handler runs: another method is 405 (with Allow),
 * a request that announces a body (Content-Length other than 0, or
 * Transfer-Encoding) is 413, an unknown path 404. The query string is
 * ignored. Nothing from the request (headers, path, body) is ever echoed in
 * a response. HEAD runs the GET handler and sends its headers only.
 *
 * POST routes (a second table, for an admission webhook) take a body: the
 * handler runs once the whole body has arrived, with the body and the
 * Content-Type header. A declared Content-Length above the route's
 * max_body is 413 before a byte of the body is read; a chunked body that
 * grows past it, or past the server's body_budget (bytes of bodies held by
 * all connections together), closes the connection without a response.
 * Memory grows with the bytes received, never with what a header
 * announces. GET or HEAD on a POST path is 405 (Allow: POST); POST on any
 * other path is 405 (Allow: GET, HEAD).
 *
 * TLS: with tls_cert_pem and tls_key_pem the server speaks HTTPS only (TLS
 * 1.2 and 1.3, libmicrohttpd's GnuTLS, unless tls_policy says otherwise). sg_http_server_set_tls replaces
 * the certificate while serving: the new one is loaded and checked first
 * (a bad pair changes nothing); then the listening socket moves to a new
 * libmicrohttpd daemon with it, and the old daemon, no longer accepting,
 * keeps its connections until they end (each within about twice
 * request_timeout_seconds); it is stopped at the next change or at stop.
 * No connection is refused or cut by a change.
 *
 * Limits, so that no client (or crowd of clients from one address) can
 * starve a probe; every one has a default used when the option is 0, and
 * sg_http_server_start refuses values above the stated maximum:
 *
 *   max_connections (128, at most 4096): connections open at once, one
 *     descriptor each. At the limit the server stops accepting; a new
 *     client's connection waits in the kernel's listen queue until a slot
 *     frees (at the latest when a connection's deadline below passes), and
 *     is then served.
 *   max_connections_per_ip (8, at most 4096): connections open at once from
 *     one client address (IPv4 address, or the whole IPv6 address; clients
 *     of a dual-stack listener reaching it over IPv4 count by their mapped
 *     address). A connection beyond it is accepted and closed at once,
 *     without a response: the client sees end of file or a reset. Clients
 *     behind one NAT address share this budget; a value equal to
 *     max_connections turns the per-address limit off.
 *   request_timeout_seconds (5, at most 3600): an absolute deadline. The
 *     request line and headers must arrive in full within this time of the
 *     connection being accepted, and the client must then take the whole
 *     response within this time of its request having arrived. A connection
 *     past its deadline is closed without a response, however steadily it
 *     trickles bytes.
 *   timeout_seconds (5, at most 3600): an idle timeout. A connection on
 *     which nothing is received or sent for this long is closed; it matters
 *     only when set below request_timeout_seconds.
 *   request headers: within libmicrohttpd's per-connection memory (32 KiB);
 *     a longer header block is answered with an error and the connection
 *     closed.
 *
 * One request per connection: the server closes the connection after each
 * response (it sends Connection: close), so no client holds a slot between
 * requests, and a connection lives at most about twice
 * request_timeout_seconds.
 *
 * Handlers run on the server's single internal thread, one at a time, so
 * they must be quick (render metrics, read atomics, check a document) and
 * must not block. (For a short while after a TLS change, the old daemon's
 * thread may still run handlers of its last connections, so a handler
 * that keeps state between calls must lock it.)
 * The server owns one more thread, which enforces the deadlines and never
 * runs a handler.
 *
 * Ownership: the route table and its paths are copied; handler args are
 * borrowed until sg_http_server_stop returns.
 */
#ifndef SG_HTTP_H
#define SG_HTTP_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_HTTP_MAX_ROUTES 16
#define SG_HTTP_PATH_MAX 256
#define SG_HTTP_CONNECTIONS_MAX 4096 /* bound of both connection limits */
#define SG_HTTP_TIMEOUT_MAX 3600     /* bound of both timeouts, seconds */
#define SG_HTTP_BODY_MAX (64u << 20) /* bound of max_body and body_budget, bytes */

typedef struct sg_http_server sg_http_server;

/* Filled by a handler. Starts as status 200, content type
 * "text/plain; charset=utf-8", empty body. */
typedef struct sg_http_response {
	int status;               /* 200..599 */
	const char *content_type; /* a static string */
	/* The body: set with one of the functions below, not directly. */
	const char *body;
	size_t body_len;
	int body_owned; /* body is freed with free() after sending */
} sg_http_response;

/* Body borrowed: body must outlive the server (a string literal). */
SG_API void sg_http_response_static(sg_http_response *r, const char *body, size_t len);
/* Body copied. SG_EINTERNAL when out of memory. */
SG_API int sg_http_response_copy(sg_http_response *r, const char *body, size_t len) SG_MUST_CHECK;
/* Body taken: body was malloc'ed and is freed with free() by the server,
 * also when the handler then fails. */
SG_API void sg_http_response_take(sg_http_response *r, char *body, size_t len);

/* A handler fills resp and returns 0, or returns a negative sg_error code,
 * in which case the client gets 500 with a short fixed text (the detail is
 * logged, never sent). */
typedef int (*sg_http_handler_fn)(sg_http_response *resp, void *arg);

typedef struct sg_http_route {
	const char *path; /* exact match, e.g. "/metrics" */
	sg_http_handler_fn fn;
	void *arg;
} sg_http_route;

/* A request with a body, as a POST handler sees it: all borrowed for the
 * call. body is NUL-terminated (not counted in body_len; the body may
 * hold NUL bytes of its own); content_type is the header's value, or NULL. */
typedef struct sg_http_request {
	const char *body;
	size_t body_len;
	const char *content_type;
} sg_http_request;

/* As sg_http_handler_fn, for a POST route. */
typedef int (*sg_http_post_fn)(sg_http_response *resp, const sg_http_request *req, void *arg);

typedef struct sg_http_post_route {
	const char *path; /* exact match */
	sg_http_post_fn fn;
	void *arg;
	size_t max_body; /* bytes, 1..SG_HTTP_BODY_MAX */
} sg_http_post_route;

/* The TLS versions and cipher suites of an HTTPS server, in the words
 * Kubernetes programs take them (k8s.io/component-base/cli/flag, the
 * --tls-min-version and --tls-cipher-suites of cert-manager and
 * trust-manager): versions VersionTLS10..VersionTLS13, suites by Go's
 * crypto/tls names (and two older names of the CHACHA20 suites). As in
 * Go, the list names TLS 1.2 and older suites: TLS 1.3 names in it change
 * nothing. Unlike Go, which keeps TLS 1.3's three suites whatever the
 * list, TLS 1.3 here uses the AEAD ciphers of the listed suites (GnuTLS
 * has one cipher set for every version; see sg_http_tls.c).
 *
 * GnuTLS (libmicrohttpd's TLS) enables suites by key exchange, cipher and
 * MAC, not one by one, so a list whose suites do not combine into exactly
 * themselves (ECDHE-RSA with AES-128-GCM and RSA with AES-256-CBC would
 * also enable ECDHE-RSA with AES-256-CBC) is refused, naming the suites it
 * would add, rather than served with more than was asked; so is a suite
 * this GnuTLS cannot serve, or one the versions cannot use. */
typedef struct sg_http_tls_policy {
	uint16_t min_version;          /* IANA: 0x0301 TLS 1.0 .. 0x0304 TLS 1.3; 0: TLS 1.2 (Go's default) */
	const uint16_t *cipher_suites; /* IANA numbers; NULL/0: GnuTLS's defaults for the versions */
	size_t ncipher_suites;         /* at most SG_HTTP_TLS_SUITES_MAX */
} sg_http_tls_policy;

#define SG_HTTP_TLS_SUITES_MAX 64

/* --tls-min-version's value: "" is 0 (the default); otherwise SG_EINVAL
 * with component-base's words, 'unknown tls version "X"', and the names
 * accepted. */
SG_API int sg_http_tls_version_parse(const char *name, uint16_t *out) SG_MUST_CHECK;
/* --tls-cipher-suites's value: comma-separated names (spaces around them
 * allowed, "" none) into out (cap entries), *n of them. SG_EINVAL with
 * component-base's words, "Cipher suite X not supported or doesn't exist",
 * for a name it does not know, or for more than cap. */
SG_API int sg_http_tls_suites_parse(const char *list, uint16_t *out, size_t cap, size_t *n) SG_MUST_CHECK;
/* Whether this GnuTLS serves exactly policy (see above): SG_OK, or
 * SG_EINVAL saying why not. sg_http_server_start checks it too; a program
 * calls it at start-up, before any certificate exists. */
SG_API int sg_http_tls_policy_check(const sg_http_tls_policy *policy) SG_MUST_CHECK;

typedef struct sg_http_options {
	/* Numeric IPv4 or IPv6 address ("127.0.0.1", "0.0.0.0", "::1", "[::1]");
	 * "::" listens on IPv6 and IPv4 (dual stack). NULL: "127.0.0.1". */
	const char *bind_address;
	uint16_t port; /* 0: an ephemeral port, see sg_http_server_port */
	const sg_http_route *routes;
	size_t nroutes; /* 0..SG_HTTP_MAX_ROUTES; with post_routes, at least one route in all */
	const sg_http_post_route *post_routes;
	size_t npost_routes; /* 0..SG_HTTP_MAX_ROUTES */
	size_t body_budget;  /* bytes of POST bodies held at once, all connections; 0: 4 x the largest
	                      * max_body; at most SG_HTTP_BODY_MAX */
	/* PEM certificate chain and private key (PKCS#1, SEC1 or PKCS#8,
	 * unencrypted): both for HTTPS, neither for HTTP. Copied. */
	const char *tls_cert_pem;
	const char *tls_key_pem;
	const sg_http_tls_policy *tls_policy; /* NULL: TLS 1.2 and 1.3, GnuTLS's suites; copied */
	/* The limits described at the top of this file; 0 picks the default. */
	unsigned max_connections;         /* 0: 128, at most 4096 */
	unsigned max_connections_per_ip;  /* 0: 8, at most 4096 */
	unsigned request_timeout_seconds; /* 0: 5, at most 3600 (absolute) */
	unsigned timeout_seconds;         /* 0: 5, at most 3600 (idle) */
} sg_http_options;

/* Binds, listens and starts serving on an internal thread. SG_EINVAL for bad
 * options (routes, address, a limit above its maximum), SG_EINTERNAL when
 * the address cannot be bound or a thread cannot be started (the detail says
 * why). Caller stops with sg_http_server_stop. */
SG_API int sg_http_server_start(sg_http_server **out, const sg_http_options *o) SG_MUST_CHECK;

/* Replaces the TLS certificate and key of a server started with them (see
 * the top of this file); both are copied. SG_EINVAL when the pair does not
 * load (not PEM, the key does not match the certificate) or the server
 * has no TLS, and the server keeps serving the old pair; SG_EINTERNAL when
 * no new daemon could be started (then the server, if it could not go
 * back to the old pair either, no longer accepts connections). Not
 * concurrently with itself or sg_http_server_stop. */
SG_API int sg_http_server_set_tls(sg_http_server *s, const char *cert_pem, const char *key_pem) SG_MUST_CHECK;

/* The bound port (the real one when options asked for 0). */
SG_API uint16_t sg_http_server_port(const sg_http_server *s);

/* Counters for monitoring, read without locking (each is exact, the set is
 * not a snapshot). Connections refused by max_connections_per_ip never
 * count: the server closes them before they become connections. */
typedef struct sg_http_stats {
	uint64_t open;     /* connections open now */
	uint64_t accepted; /* connections accepted since start */
	uint64_t overdue;  /* connections closed at their request deadline */
} sg_http_stats;

SG_API void sg_http_server_stats(const sg_http_server *s, sg_http_stats *out);

/* Stops accepting, closes every connection (also ones mid-request), joins
 * the internal thread and frees the server. Accepts NULL. */
SG_API void sg_http_server_stop(sg_http_server *s);

#endif
