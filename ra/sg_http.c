/*
 * The libmicrohttpd adapter: the HTTP server behind /metrics, /readyz and
 * /healthz. Nothing else in signet includes microhttpd.h.
 *
 * Threading model: MHD_USE_EPOLL_INTERNAL_THREAD, one thread multiplexing
 * every connection with epoll. The endpoints are scraped every few seconds
 * and every handler is an in-memory operation (render the registry, read a
 * few atomics), so one thread is plenty; thread-per-connection would let 64
 * idle or slow clients pin 64 threads (and stacks) in a process whose
 * threads belong to the signer. The cost is that a slow handler delays the
 * others, which is why handlers must not block (sg_http.h says so).
 *
 * Requests are judged on the first call of the access handler, when the
 * headers have arrived and before any body is read: the method, a declared
 * body and the path are checked, then the handler runs and the response is
 * queued at once. A refused body is never read; libmicrohttpd closes the
 * connection after the reply. The response texts are fixed strings, so no
 * byte of the request is reflected.
 *
 * libmicrohttpd's own messages go to sg_log at debug level (a client can
 * trigger them at will); while the daemon is starting, the last one is kept
 * so that a failed start can say why (address in use, permission denied).
 */
#include "sg_http.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define DEFAULT_MAX_CONNECTIONS 64
#define DEFAULT_TIMEOUT_SECONDS 10
#define TEXT_PLAIN "text/plain; charset=utf-8"

typedef struct route {
	char path[SG_HTTP_PATH_MAX];
	sg_http_handler_fn fn;
	void *arg;
} route;

struct sg_http_server {
	struct MHD_Daemon *daemon;
	uint16_t port;
	size_t nroutes;
	route routes[SG_HTTP_MAX_ROUTES];
	pthread_t starter;       /* the thread inside MHD_start_daemon */
	char start_message[256]; /* written and read by the starter only */
};

/* ---- responses ------------------------------------------------------- */

static void body_drop(sg_http_response *r)
{
	if (r->body_owned)
		free((char *)r->body);
	r->body = "";
	r->body_len = 0;
	r->body_owned = 0;
}

void sg_http_response_static(sg_http_response *r, const char *body, size_t len)
{
	body_drop(r);
	r->body = body;
	r->body_len = len;
}

void sg_http_response_take(sg_http_response *r, char *body, size_t len)
{
	body_drop(r);
	r->body = body;
	r->body_len = len;
	r->body_owned = 1;
}

int sg_http_response_copy(sg_http_response *r, const char *body, size_t len)
{
	char *p = malloc(len ? len : 1);
	SG_ENSURE(p, SG_EINTERNAL, "http: out of memory");
	memcpy(p, body, len);
	sg_http_response_take(r, p, len);
	return 0;
}

/* Queues r on c; takes r's body in every case. */
static enum MHD_Result send_response(struct MHD_Connection *c, sg_http_response *r, bool allow)
{
	struct MHD_Response *resp;
	if (r->body_owned) {
		resp = MHD_create_response_from_buffer_with_free_callback(r->body_len, (void *)r->body, free);
		if (!resp)
			free((char *)r->body);
	} else {
		resp = MHD_create_response_from_buffer(r->body_len, (void *)r->body, MHD_RESPMEM_PERSISTENT);
	}
	r->body_owned = 0;
	if (!resp)
		return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
	enum MHD_Result ok = MHD_YES;
	if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type) != MHD_YES ||
	    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") != MHD_YES ||
	    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff") != MHD_YES ||
	    (allow && MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD") != MHD_YES))
		ok = MHD_NO;
	if (ok == MHD_YES)
		ok = MHD_queue_response(c, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *text, bool allow)
{
	sg_http_response r = {.status = status, .content_type = TEXT_PLAIN, .body = text, .body_len = strlen(text)};
	return send_response(c, &r, allow);
}

/* ---- requests -------------------------------------------------------- */

static bool announces_body(struct MHD_Connection *c)
{
	const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	return te != NULL || (len != NULL && strcmp(len, "0") != 0);
}

static const route *find_route(const sg_http_server *s, const char *path)
{
	for (size_t i = 0; i < s->nroutes; i++)
		if (strcmp(s->routes[i].path, path) == 0)
			return &s->routes[i];
	return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
	(void)version;
	(void)upload_data;
	(void)req_cls;
	const sg_http_server *s = cls;

	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", true);
	if (announces_body(c) || *upload_data_size != 0)
		return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body not allowed\n", false);
	const route *rt = find_route(s, url);
	if (!rt)
		return send_text(c, MHD_HTTP_NOT_FOUND, "not found\n", false);

	sg_http_response r = {.status = MHD_HTTP_OK, .content_type = TEXT_PLAIN, .body = "", .body_len = 0};
	sg_error_clear();
	int rc = rt->fn(&r, rt->arg);
	if (rc == 0 && (r.status < 200 || r.status > 599 || !r.content_type))
		rc = sg_error_set(SG_EINTERNAL, "http: handler for %s gave status %d", rt->path, r.status);
	if (rc < 0) {
		sg_log(SG_LOG_WARN, "http handler failed", SG_F_STR("path", rt->path),
		       SG_F_STR("error", sg_error_name(rc)), SG_F_STR("detail", sg_error_last()->msg), SG_F_END);
		body_drop(&r);
		return send_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n", false);
	}
	return send_response(c, &r, false);
}

/* ---- daemon ---------------------------------------------------------- */

static void on_mhd_log(void *cls, const char *fmt, va_list ap) SG_PRINTF(2, 0);

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	sg_http_server *s = cls;
	char msg[256];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	if (pthread_equal(pthread_self(), s->starter))
		memcpy(s->start_message, msg, sizeof(msg));
	sg_log(SG_LOG_DEBUG, "libmicrohttpd", SG_F_STR("message", msg), SG_F_END);
}

typedef union addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
} addr;

/* Numeric addresses only: a bind address is never resolved. Sets the
 * libmicrohttpd flags the family needs. */
static int parse_bind(addr *a, unsigned *flags, const char *text, uint16_t port)
{
	char host[INET6_ADDRSTRLEN + 2];
	size_t n = strlen(text);
	if (n >= 2 && text[0] == '[' && text[n - 1] == ']') {
		text++;
		n -= 2;
	}
	SG_ENSURE(n < sizeof(host), SG_EINVAL, "http: bind address is not a numeric IPv4 or IPv6 address");
	memcpy(host, text, n);
	host[n] = '\0';

	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, host, &a->in4.sin_addr) == 1) {
		a->in4.sin_family = AF_INET;
		a->in4.sin_port = htons(port);
		return 0;
	}
	SG_ENSURE(inet_pton(AF_INET6, host, &a->in6.sin6_addr) == 1, SG_EINVAL,
	          "http: bind address is not a numeric IPv4 or IPv6 address");
	a->in6.sin6_family = AF_INET6;
	a->in6.sin6_port = htons(port);
	bool any = memcmp(&a->in6.sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0;
	*flags |= any ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
	return 0;
}

static int copy_routes(sg_http_server *s, const sg_http_options *o)
{
	SG_ENSURE(o->routes && o->nroutes >= 1 && o->nroutes <= SG_HTTP_MAX_ROUTES, SG_EINVAL,
	          "http: 1 to %d routes needed", SG_HTTP_MAX_ROUTES);
	for (size_t i = 0; i < o->nroutes; i++) {
		const sg_http_route *r = &o->routes[i];
		SG_ENSURE(r->path && r->path[0] == '/' && strlen(r->path) < SG_HTTP_PATH_MAX && r->fn, SG_EINVAL,
		          "http: route %zu needs a path starting with / and a handler", i);
		SG_ENSURE(find_route(s, r->path) == NULL, SG_EINVAL, "http: route %s listed twice", r->path);
		strcpy(s->routes[i].path, r->path);
		s->routes[i].fn = r->fn;
		s->routes[i].arg = r->arg;
		s->nroutes = i + 1;
	}
	return 0;
}

int sg_http_server_start(sg_http_server **out, const sg_http_options *o)
{
	const char *bind = o->bind_address ? o->bind_address : "127.0.0.1";
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
	addr a;
	SG_TRY(parse_bind(&a, &flags, bind, o->port));

	sg_http_server *s SG_AUTOFREE = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "http: out of memory");
	SG_TRY(copy_routes(s, o));
	s->starter = pthread_self();

	unsigned max_conn = o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS;
	unsigned timeout = o->timeout_seconds ? o->timeout_seconds : DEFAULT_TIMEOUT_SECONDS;
	// clang-format off
	s->daemon = MHD_start_daemon(flags, o->port, NULL, NULL, on_request, s,
				     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
				     MHD_OPTION_SOCK_ADDR, &a.sa,
				     MHD_OPTION_CONNECTION_LIMIT, max_conn,
				     MHD_OPTION_CONNECTION_TIMEOUT, timeout,
				     MHD_OPTION_END);
	// clang-format on
	SG_ENSURE(s->daemon, SG_EINTERNAL, "http: cannot serve on %s port %u: %s", bind, (unsigned)o->port,
	          s->start_message[0] ? s->start_message : "libmicrohttpd failed to start");

	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : o->port;
	*out = SG_MOVE(s);
	return 0;
}

uint16_t sg_http_server_port(const sg_http_server *s)
{
	return s->port;
}

void sg_http_server_stop(sg_http_server *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->daemon);
	free(s);
}
