/*
 * The libmicrohttpd adapter: the HTTP server behind /metrics, /readyz and
 * /healthz. Nothing else in signet includes microhttpd.h.
 *
 * Threading model: MHD_USE_EPOLL_INTERNAL_THREAD, one thread multiplexing
 * every connection with epoll. The endpoints are scraped every few seconds
 * and every handler is an in-memory operation (render the registry, read a
 * few atomics), so one thread is plenty; thread-per-connection would let
 * idle or slow clients pin a thread (and stack) each in a process whose
 * threads belong to the signer. libmicrohttpd's thread pool
 * (MHD_OPTION_THREAD_POOL_SIZE) is not used either: it would run handlers
 * concurrently, which sg_http.h promises they never are, and it buys nothing
 * against starvation, which is about connection slots held, not CPU; the
 * limits below bound what one thread does per connection. The cost is that a
 * slow handler delays the others, which is why handlers must not block.
 *
 * Starvation. A probe endpoint is only useful if a hostile client cannot
 * keep the kubelet out. Three layers, all inside libmicrohttpd's own
 * connection handling:
 *
 * - Per-address limit (MHD_OPTION_PER_IP_CONNECTION_LIMIT). libmicrohttpd
 *   counts connections per client address and closes an accepted socket at
 *   once when its address already holds the limit. One host can hold only a
 *   few slots, and each excess connection costs one accept and one close, so
 *   the listen queue keeps moving and the kubelet's connection is reached in
 *   turn.
 * - Total limit (MHD_OPTION_CONNECTION_LIMIT), which bounds descriptors and
 *   memory (32 KiB per connection). It is not what protects the probe: at
 *   the limit libmicrohttpd takes the listen socket out of its epoll set
 *   and new clients wait in the kernel's listen queue, so the limit must
 *   not be held for long by anyone:
 * - Deadlines. MHD_OPTION_CONNECTION_TIMEOUT is an idle timeout: every byte
 *   received restarts it, so a client trickling a header byte every few
 *   seconds would hold its slot forever. Nor does it help that the client
 *   leaves: libmicrohttpd 0.9.75 takes a short read as "drained" on its
 *   edge-triggered epoll set, so an end of file that arrived together with
 *   the last bytes raises no further event and the dead connection keeps
 *   its slot until a timeout. With only the idle timeout, a crowd that
 *   stops keeps the listen queue draining one full set of slots per idle
 *   timeout. libmicrohttpd has no absolute timeout, so this file adds one.
 *   Each connection gets a record in a table (NOTIFY_CONNECTION STARTED)
 *   holding its socket and a deadline: request_timeout after the accept;
 *   re-armed when the access handler runs (the client then has as long to
 *   take the response) and when a request completes (as long for a next
 *   request, should libmicrohttpd keep the connection: 0.9.75 does not,
 *   because it closes every connection whose response was queued on the
 *   first call of the access handler, which is where this file answers);
 *   the record is dropped at NOTIFY_CONNECTION CLOSED. A watcher thread
 *   sleeps until the earliest deadline and calls shutdown(2), not close(2),
 *   on the socket of each overdue connection. The shutdown is a state change
 *   that wakes the epoll set afresh with a hang-up, which libmicrohttpd
 *   handles as an error on the connection: it closes it through its
 *   ordinary path (call_handlers with force_close, then cleanup). It wakes
 *   its own connections the same way in MHD_stop_daemon.
 *
 * Why the watcher is safe (libmicrohttpd 0.9.75, daemon.c):
 * - Descriptor reuse. The watcher shuts a socket down only while it holds
 *   the table lock and finds the record armed; CLOSED removes the record
 *   under the same lock; and libmicrohttpd runs CLOSED before it closes the
 *   socket (MHD_cleanup_connections calls the callback, then
 *   MHD_socket_close_chk_; the one other path that closes a started
 *   connection, the failure branch of new_connection_process_, does the
 *   same). So while the lock is held every descriptor in the table is open
 *   and is that connection's socket; it cannot have been closed and reused
 *   for another file of the process.
 * - libmicrohttpd's state. The watcher never calls libmicrohttpd and never
 *   touches a connection object; shutdown(2) of a socket that another thread
 *   reads and writes is serialised by the kernel, and a peer that vanishes
 *   at any moment is something libmicrohttpd handles on every connection.
 * - Order. STARTED, the access handler, COMPLETED and CLOSED all run on the
 *   daemon's thread; the lock orders them against the watcher only. Every
 *   deadline is "now + request_timeout" read under the lock, so appending a
 *   re-armed record keeps the list sorted and the watcher looks only at its
 *   head.
 * - Capacity. The table has max_connections records, taken from a free
 *   list: libmicrohttpd counts a connection before STARTED and until after
 *   CLOSED, so no more can be live at once. Should the free list still be
 *   empty, the connection is shut down at once rather than served without a
 *   deadline (fail closed).
 *
 * Requests are judged on the first call of the access handler, when the
 * headers have arrived and before any body is read: the method, a declared
 * body and the path are checked, then the handler runs and the response is
 * queued at once. A refused body is never read; libmicrohttpd closes the
 * connection after the reply. The response texts are fixed strings, so no
 * byte of the request is reflected.
 *
 * Bodies (POST routes). The first call of the access handler checks the
 * method, path and a declared Content-Length, and leaves a record of the
 * body as the request's context; the calls that bring data append to it;
 * the last call (no data: the body is complete) re-arms the deadline, runs
 * the handler and queues the response. libmicrohttpd 0.9.75 accepts a
 * response only on the first or the last call (MHD_queue_response checks
 * the connection's state), so a body that outgrows its limit midway is
 * answered by closing the connection (returning MHD_NO). The buffer grows
 * by doubling as bytes arrive, and every byte of capacity is first taken
 * from the server's body budget (an atomic, shared with a retired daemon's
 * thread); NOTIFY_COMPLETED, which libmicrohttpd calls for every request
 * whose handler ran, also after an error, gives it back. Intermediate calls
 * do not re-arm the deadline: the body must arrive within the same
 * request_timeout as the headers.
 *
 * TLS reload. libmicrohttpd loads its certificate once, when a daemon
 * starts. A change therefore starts a new daemon: the new pair is first
 * loaded by a daemon that listens nowhere and runs no thread (so a bad
 * pair is found before anything changes), then MHD_quiesce_daemon takes
 * the listening socket from the running daemon (which needs MHD_USE_ITC)
 * and a new daemon serves it (MHD_OPTION_LISTEN_SOCKET). The quiesced
 * daemon accepts nothing more, finishes its connections, and does not
 * close the socket when stopped; the new daemon owns it. Both daemons'
 * connections share the deadline table, which TLS servers size for two.
 *
 * libmicrohttpd's own messages go to sg_log at debug level (a client can
 * trigger them at will); while a daemon is starting, the last one is kept
 * (the starting thread is marked thread-locally, so the daemons' own
 * threads never touch it) so that a failed start can say why (address in
 * use, permission denied, a key that does not match its certificate).
 */
#include "sg_http.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_http_impl.h"
#include "sg_log.h"
#include "sg_secret.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define TEXT_PLAIN "text/plain; charset=utf-8"
#define NS_PER_S 1000000000ull
#define ALLOW_GET "GET, HEAD"
#define ALLOW_POST "POST"
#define BODY_FIRST_CAP (16u << 10)

/* The limits of sg_http_options: where each lives, its default (for 0) and
 * its maximum. */
enum { L_CONNECTIONS, L_PER_IP, L_REQUEST_TIMEOUT, L_IDLE_TIMEOUT, L_COUNT };

typedef struct limit {
	const char *name;
	size_t offset; /* of an unsigned in sg_http_options */
	unsigned def, max;
} limit;

static const limit LIMITS[L_COUNT] = {
    [L_CONNECTIONS] = {"max_connections", offsetof(sg_http_options, max_connections), 128, SG_HTTP_CONNECTIONS_MAX},
    [L_PER_IP] = {"max_connections_per_ip", offsetof(sg_http_options, max_connections_per_ip), 8,
                  SG_HTTP_CONNECTIONS_MAX},
    [L_REQUEST_TIMEOUT] = {"request_timeout_seconds", offsetof(sg_http_options, request_timeout_seconds), 5,
                           SG_HTTP_TIMEOUT_MAX},
    [L_IDLE_TIMEOUT] = {"timeout_seconds", offsetof(sg_http_options, timeout_seconds), 5, SG_HTTP_TIMEOUT_MAX},
};

typedef struct route {
	char path[SG_HTTP_PATH_MAX];
	sg_http_handler_fn fn;
	void *arg;
} route;

typedef struct post_route {
	char path[SG_HTTP_PATH_MAX];
	sg_http_post_fn fn;
	void *arg;
	size_t max_body;
} post_route;

/* One per open connection, from STARTED to CLOSED. */
typedef struct watch {
	struct watch *prev, *next; /* the armed list; next also links the free list */
	int fd;                    /* the connection's socket, owned by libmicrohttpd */
	uint64_t deadline_ns;      /* monotonic; meaningful while armed */
	bool armed;                /* in the armed list */
	bool shut;                 /* shut down for its deadline; never re-armed */
} watch;

/* The deadline table and its thread; everything below lock is guarded by it. */
typedef struct watcher {
	uint64_t timeout_ns;
	watch *slots; /* max_connections records */
	bool ready;   /* lock and wake initialised */
	bool running; /* thread started */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* on CLOCK_MONOTONIC */
	bool stopping;
	watch *free;
	watch *head, *tail; /* armed, earliest deadline first */
	/* sg_http_stats, written under lock, read without. */
	_Atomic uint64_t open, accepted, overdue;
} watcher;

struct sg_http_server {
	struct MHD_Daemon *daemon;
	uint16_t port;
	size_t nroutes, nposts;
	route routes[SG_HTTP_MAX_ROUTES];
	post_route posts[SG_HTTP_MAX_ROUTES];
	size_t body_budget;
	_Atomic size_t body_held; /* capacity of the bodies held now */
	watcher watch;
	char start_message[256]; /* written and read by the starting thread only */
	/* How every daemon of this server starts. */
	unsigned flags;
	unsigned lim[L_COUNT];
	/* TLS: the pair the current daemon serves (libmicrohttpd reads it only
	 * while a daemon starts; kept to go back to after a failed change),
	 * and the daemon the last change replaced (stopped at the next change
	 * or at stop). */
	bool tls;
	char *tls_cert, *tls_key;
	/* GnuTLS's priorities (sg_http_tls.c): by default TLS 1.2 and 1.3
	 * only, as Go's servers (and so trust-manager's webhook). */
	char tls_prio[SG_HTTP_TLS_PRIORITIES_MAX];
	struct MHD_Daemon *retired;
	int orphan_fd; /* a listening socket no daemon owns (a failed change), or -1 */
};

/* The server whose daemon this thread is starting, if any: libmicrohttpd's
 * messages then explain a failed start. */
static _Thread_local sg_http_server *starting;

/* A POST body as it arrives: the request's context. */
typedef struct upload {
	const post_route *route;
	char *data; /* NUL-terminated; cap bytes taken from the budget */
	size_t len, cap;
} upload;

/* ---- deadlines ------------------------------------------------------- */

/* Lock held. */
static void unarm(watcher *w, watch *x)
{
	if (!x->armed)
		return;
	if (x->prev)
		x->prev->next = x->next;
	else
		w->head = x->next;
	if (x->next)
		x->next->prev = x->prev;
	else
		w->tail = x->prev;
	x->prev = x->next = NULL;
	x->armed = false;
}

/* Lock held. Gives x the deadline now + timeout, at the list's tail: every
 * deadline is made this way under the lock, so the list stays sorted. */
static void arm(watcher *w, watch *x)
{
	unarm(w, x);
	if (x->shut)
		return;
	x->deadline_ns = sg_now_ns() + w->timeout_ns;
	x->prev = w->tail;
	if (w->tail) {
		w->tail->next = x;
	} else {
		w->head = x;
		pthread_cond_signal(&w->wake); /* the thread may be waiting for any record */
	}
	w->tail = x;
	x->armed = true;
}

static void *watcher_run(void *arg)
{
	watcher *w = arg;
	pthread_mutex_lock(&w->lock);
	while (!w->stopping) {
		uint64_t now = sg_now_ns();
		unsigned overdue = 0;
		while (w->head && w->head->deadline_ns <= now) {
			watch *x = w->head;
			unarm(w, x);
			x->shut = true;
			/* Counted first, so the count is never behind what the
			 * client sees. */
			atomic_fetch_add_explicit(&w->overdue, 1, memory_order_relaxed);
			overdue++;
			/* x->fd is open and x's connection's while we hold the lock
			 * (design note); libmicrohttpd closes it after CLOSED. */
			(void)shutdown(x->fd, SHUT_RDWR);
		}
		if (overdue) {
			pthread_mutex_unlock(&w->lock);
			sg_log(SG_LOG_DEBUG, "http: closed connections past their deadline", SG_F_INT("count", overdue),
			       SG_F_END);
			pthread_mutex_lock(&w->lock);
			continue;
		}
		if (!w->head) {
			pthread_cond_wait(&w->wake, &w->lock);
		} else {
			struct timespec at = {(time_t)(w->head->deadline_ns / NS_PER_S),
			                      (long)(w->head->deadline_ns % NS_PER_S)};
			pthread_cond_timedwait(&w->wake, &w->lock, &at);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* MHD_OPTION_NOTIFY_CONNECTION: a record from accept to close. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
	watcher *w = cls;
	watch *x = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!ci)
			return; /* not in 0.9.75: the descriptor is set before STARTED */
		pthread_mutex_lock(&w->lock);
		x = w->free;
		if (x) {
			w->free = x->next;
			*x = (watch){.fd = ci->connect_fd};
			arm(w, x);
			atomic_fetch_add_explicit(&w->open, 1, memory_order_relaxed);
		}
		atomic_fetch_add_explicit(&w->accepted, 1, memory_order_relaxed);
		pthread_mutex_unlock(&w->lock);
		*socket_context = x;
		if (!x) /* cannot happen (design note); no deadline, no service */
			(void)shutdown(ci->connect_fd, SHUT_RDWR);
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_CLOSED || !x)
		return;
	pthread_mutex_lock(&w->lock);
	unarm(w, x);
	x->next = w->free;
	w->free = x;
	atomic_fetch_sub_explicit(&w->open, 1, memory_order_relaxed);
	pthread_mutex_unlock(&w->lock);
	*socket_context = NULL;
}

/* A new deadline for c: its response (from the access handler) or its next
 * request (from MHD_OPTION_NOTIFY_COMPLETED). */
static void rearm(watcher *w, struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	watch *x = ci ? ci->socket_context : NULL;
	if (!x)
		return;
	pthread_mutex_lock(&w->lock);
	arm(w, x);
	pthread_mutex_unlock(&w->lock);
}

static void upload_free(sg_http_server *s, upload *b)
{
	if (!b)
		return;
	atomic_fetch_sub_explicit(&s->body_held, b->cap, memory_order_relaxed);
	free(b->data);
	free(b);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode code)
{
	sg_http_server *s = cls;
	(void)code; /* also after an error: CLOSED follows and drops the record */
	upload_free(s, *req_cls);
	*req_cls = NULL;
	rearm(&s->watch, c);
}

static int watcher_init(watcher *w, unsigned slots, unsigned timeout_s)
{
	w->timeout_ns = (uint64_t)timeout_s * NS_PER_S;
	w->slots = calloc(slots, sizeof(*w->slots));
	SG_ENSURE(w->slots, SG_EINTERNAL, "http: out of memory");
	for (unsigned i = 0; i + 1 < slots; i++)
		w->slots[i].next = &w->slots[i + 1];
	w->free = &w->slots[0];

	pthread_condattr_t ca;
	SG_ENSURE(pthread_condattr_init(&ca) == 0, SG_EINTERNAL, "http: cannot create a condition variable");
	int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(&w->wake, &ca);
	pthread_condattr_destroy(&ca);
	SG_ENSURE(rc == 0, SG_EINTERNAL, "http: cannot create a condition variable");
	if (pthread_mutex_init(&w->lock, NULL) != 0) {
		pthread_cond_destroy(&w->wake);
		SG_BAIL(SG_EINTERNAL, "http: cannot create a mutex");
	}
	w->ready = true;

	/* The thread takes no signals: they belong to the daemon's main loop. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&w->thread, NULL, watcher_run, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	SG_ENSURE(rc == 0, SG_EINTERNAL, "http: cannot start the deadline thread: %s", strerror(rc));
	w->running = true;
	return 0;
}

/* After MHD_stop_daemon: every connection has been CLOSED. */
static void watcher_fini(watcher *w)
{
	if (w->running) {
		pthread_mutex_lock(&w->lock);
		w->stopping = true;
		pthread_cond_signal(&w->wake);
		pthread_mutex_unlock(&w->lock);
		pthread_join(w->thread, NULL);
	}
	if (w->ready) {
		pthread_cond_destroy(&w->wake);
		pthread_mutex_destroy(&w->lock);
	}
	free(w->slots);
}

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

/* Queues r on c (with an Allow header when allow is set); takes r's body
 * in every case. */
static enum MHD_Result send_response(struct MHD_Connection *c, sg_http_response *r, const char *allow)
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
	    (allow && MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow) != MHD_YES))
		ok = MHD_NO;
	if (ok == MHD_YES)
		ok = MHD_queue_response(c, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *text, const char *allow)
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

static const post_route *find_post(const sg_http_server *s, const char *path)
{
	for (size_t i = 0; i < s->nposts; i++)
		if (strcmp(s->posts[i].path, path) == 0)
			return &s->posts[i];
	return NULL;
}

/* A handler failed or misbehaved: 500 with a fixed text, the detail
 * logged. */
static enum MHD_Result handler_failed(struct MHD_Connection *c, const char *path, int rc, sg_http_response *r)
{
	sg_log(SG_LOG_WARN, "http handler failed", SG_F_STR("path", path), SG_F_STR("error", sg_error_name(rc)),
	       SG_F_STR("detail", sg_error_last()->msg), SG_F_END);
	body_drop(r);
	return send_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n", NULL);
}

static int check_response(const sg_http_response *r, const char *path)
{
	if (r->status < 200 || r->status > 599 || !r->content_type)
		return sg_error_set(SG_EINTERNAL, "http: handler for %s gave status %d", path, r->status);
	return 0;
}

/* The first call of a POST: the path and a declared length are checked
 * before any byte of the body is read; the body's record becomes the
 * request's context. */
static enum MHD_Result post_start(sg_http_server *s, struct MHD_Connection *c, const char *url, void **req_cls)
{
	const post_route *pr = find_post(s, url);
	if (!pr)
		return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", ALLOW_GET);
	/* libmicrohttpd has refused a malformed Content-Length already (400). */
	const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (len) {
		errno = 0;
		char *end = NULL;
		unsigned long long n = strtoull(len, &end, 10);
		if (errno != 0 || end == len || n > pr->max_body)
			return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large\n", NULL);
	}
	upload *b = calloc(1, sizeof(*b));
	if (!b)
		return MHD_NO;
	b->route = pr;
	*req_cls = b;
	return MHD_YES;
}

/* Room for n more bytes and the NUL, within the route's limit and the
 * server's budget; false closes the connection. */
static bool upload_grow(sg_http_server *s, upload *b, size_t n)
{
	if (n > b->route->max_body - b->len)
		return false;
	size_t need = b->len + n + 1;
	if (need <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : BODY_FIRST_CAP;
	while (cap < need)
		cap *= 2; /* cannot overflow: need <= SG_HTTP_BODY_MAX + 1 */
	if (cap > b->route->max_body + 1)
		cap = b->route->max_body + 1;
	size_t more = cap - b->cap;
	size_t held = atomic_fetch_add_explicit(&s->body_held, more, memory_order_relaxed);
	if (held > s->body_budget || more > s->body_budget - held) {
		atomic_fetch_sub_explicit(&s->body_held, more, memory_order_relaxed);
		sg_log(SG_LOG_DEBUG, "http: request bodies over budget; connection closed", SG_F_END);
		return false;
	}
	char *p = realloc(b->data, cap);
	if (!p) {
		atomic_fetch_sub_explicit(&s->body_held, more, memory_order_relaxed);
		return false;
	}
	b->data = p;
	b->cap = cap;
	return true;
}

/* The later calls of a POST: data to append, or (no data) the whole body. */
static enum MHD_Result post_body(sg_http_server *s, struct MHD_Connection *c, upload *b, const char *data, size_t *size)
{
	if (*size != 0) {
		if (!upload_grow(s, b, *size))
			return MHD_NO; /* too large: closed without a response (design note) */
		memcpy(b->data + b->len, data, *size);
		b->len += *size;
		b->data[b->len] = '\0';
		*size = 0;
		return MHD_YES;
	}
	rearm(&s->watch, c); /* the body is in: the response's deadline starts */
	const post_route *pr = b->route;
	sg_http_request req = {
	    .body = b->data ? b->data : "",
	    .body_len = b->len,
	    .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
	};
	sg_http_response r = {.status = MHD_HTTP_OK, .content_type = TEXT_PLAIN, .body = "", .body_len = 0};
	sg_error_clear();
	int rc = pr->fn(&r, &req, pr->arg);
	if (rc == 0)
		rc = check_response(&r, pr->path);
	if (rc < 0)
		return handler_failed(c, pr->path, rc, &r);
	return send_response(c, &r, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
	(void)version;
	sg_http_server *s = cls;
	if (*req_cls)
		return post_body(s, c, *req_cls, upload_data, upload_data_size);
	rearm(&s->watch, c); /* the headers are in: the response's (or body's) deadline starts */

	if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
		return post_start(s, c, url, req_cls);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", ALLOW_GET);
	if (announces_body(c) || *upload_data_size != 0)
		return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body not allowed\n", NULL);
	const route *rt = find_route(s, url);
	if (!rt && find_post(s, url))
		return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", ALLOW_POST);
	if (!rt)
		return send_text(c, MHD_HTTP_NOT_FOUND, "not found\n", NULL);

	sg_http_response r = {.status = MHD_HTTP_OK, .content_type = TEXT_PLAIN, .body = "", .body_len = 0};
	sg_error_clear();
	int rc = rt->fn(&r, rt->arg);
	if (rc == 0)
		rc = check_response(&r, rt->path);
	if (rc < 0)
		return handler_failed(c, rt->path, rc, &r);
	return send_response(c, &r, NULL);
}

/* ---- daemon ---------------------------------------------------------- */

static void on_mhd_log(void *cls, const char *fmt, va_list ap) SG_PRINTF(2, 0);

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	sg_http_server *s = cls;
	char msg[256];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	if (starting == s)
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

static bool path_ok(const char *path)
{
	return path && path[0] == '/' && strlen(path) < SG_HTTP_PATH_MAX;
}

static bool path_taken(const sg_http_server *s, const char *path)
{
	return find_route(s, path) != NULL || find_post(s, path) != NULL;
}

static int copy_routes(sg_http_server *s, const sg_http_options *o)
{
	SG_ENSURE(o->nroutes <= SG_HTTP_MAX_ROUTES && o->npost_routes <= SG_HTTP_MAX_ROUTES &&
	              o->nroutes + o->npost_routes >= 1 && (o->routes || !o->nroutes) &&
	              (o->post_routes || !o->npost_routes),
	          SG_EINVAL, "http: 1 to %d routes needed", SG_HTTP_MAX_ROUTES);
	for (size_t i = 0; i < o->nroutes; i++) {
		const sg_http_route *r = &o->routes[i];
		SG_ENSURE(path_ok(r->path) && r->fn, SG_EINVAL,
		          "http: route %zu needs a path starting with / and a handler", i);
		SG_ENSURE(!path_taken(s, r->path), SG_EINVAL, "http: route %s listed twice", r->path);
		strcpy(s->routes[i].path, r->path);
		s->routes[i].fn = r->fn;
		s->routes[i].arg = r->arg;
		s->nroutes = i + 1;
	}
	size_t largest = 0;
	for (size_t i = 0; i < o->npost_routes; i++) {
		const sg_http_post_route *r = &o->post_routes[i];
		SG_ENSURE(path_ok(r->path) && r->fn, SG_EINVAL,
		          "http: POST route %zu needs a path starting with / and a handler", i);
		SG_ENSURE(r->max_body >= 1 && r->max_body <= SG_HTTP_BODY_MAX, SG_EINVAL,
		          "http: POST route %s: max_body must be 1..%u bytes", r->path, SG_HTTP_BODY_MAX);
		SG_ENSURE(!path_taken(s, r->path), SG_EINVAL, "http: route %s listed twice", r->path);
		strcpy(s->posts[i].path, r->path);
		s->posts[i].fn = r->fn;
		s->posts[i].arg = r->arg;
		s->posts[i].max_body = r->max_body;
		s->nposts = i + 1;
		largest = r->max_body > largest ? r->max_body : largest;
	}
	SG_ENSURE(o->body_budget <= SG_HTTP_BODY_MAX, SG_EINVAL, "http: body_budget is %zu, at most %u", o->body_budget,
	          SG_HTTP_BODY_MAX);
	s->body_budget = o->body_budget ? o->body_budget : 4 * largest;
	return 0;
}

/* Each limit of o, or its default; SG_EINVAL above a maximum. */
static int resolve_limits(unsigned out[L_COUNT], const sg_http_options *o)
{
	for (size_t i = 0; i < L_COUNT; i++) {
		const limit *l = &LIMITS[i];
		unsigned v;
		memcpy(&v, (const char *)o + l->offset, sizeof(v));
		SG_ENSURE(v <= l->max, SG_EINVAL, "http: %s is %u, at most %u", l->name, v, l->max);
		out[i] = v ? v : l->def;
	}
	return 0;
}

static void wipe_free(char *p)
{
	if (p) {
		sg_wipe(p, strlen(p));
		free(p);
	}
}

/* Stops the daemons first: once they have returned, every connection has
 * been CLOSED, so the watcher holds no descriptor when it is stopped. */
static void server_free(sg_http_server *s)
{
	if (!s)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	if (s->retired)
		MHD_stop_daemon(s->retired);
	if (s->orphan_fd >= 0)
		close(s->orphan_fd);
	watcher_fini(&s->watch);
	free(s->tls_cert);
	wipe_free(s->tls_key);
	free(s);
}

static void server_freep(sg_http_server **s)
{
	server_free(*s);
}

/* A daemon of s: on a (the first) or on listen_fd (a TLS change), with
 * cert and key when the server has TLS. NULL with start_message set on
 * failure. */
static struct MHD_Daemon *start_daemon(sg_http_server *s, const addr *a, uint16_t port, int listen_fd, const char *cert,
                                       const char *key)
{
	struct MHD_OptionItem extra[5];
	size_t n = 0;
	if (a)
		extra[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)&a->sa};
	else
		extra[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, listen_fd, NULL};
	if (s->tls) {
		extra[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert};
		extra[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key};
		extra[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)s->tls_prio};
	}
	extra[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	s->start_message[0] = '\0';
	starting = s;
	// clang-format off
	struct MHD_Daemon *d = MHD_start_daemon(s->flags, port, NULL, NULL, on_request, s,
				     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
				     MHD_OPTION_CONNECTION_LIMIT, s->lim[L_CONNECTIONS],
				     MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->lim[L_PER_IP],
				     MHD_OPTION_CONNECTION_TIMEOUT, s->lim[L_IDLE_TIMEOUT],
				     MHD_OPTION_NOTIFY_CONNECTION, on_connection, &s->watch,
				     MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
				     MHD_OPTION_ARRAY, extra,
				     MHD_OPTION_END);
	// clang-format on
	starting = NULL;
	return d;
}

/* Whether GnuTLS (through libmicrohttpd) takes the pair: a daemon that
 * listens nowhere and runs no thread loads it and is stopped at once. */
static int check_tls(sg_http_server *s, const char *cert, const char *key)
{
	struct MHD_OptionItem tls[] = {
	    {MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert},
	    {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key},
	    {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)s->tls_prio},
	    {MHD_OPTION_END, 0, NULL},
	};
	s->start_message[0] = '\0';
	starting = s;
	struct MHD_Daemon *d =
	    MHD_start_daemon(MHD_USE_TLS | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, s,
	                     MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
	starting = NULL;
	SG_ENSURE(d, SG_EINVAL, "http: the TLS certificate and key cannot be used: %s",
	          s->start_message[0] ? s->start_message : "libmicrohttpd refused them");
	MHD_stop_daemon(d);
	return 0;
}

static int copy_pair(const char *cert, const char *key, char **cert_out, char **key_out)
{
	SG_ENSURE(cert && key && *cert && *key, SG_EINVAL, "http: TLS needs both a certificate and a key");
	*cert_out = strdup(cert);
	*key_out = strdup(key);
	if (!*cert_out || !*key_out) {
		free(*cert_out);
		wipe_free(*key_out);
		*cert_out = *key_out = NULL;
		SG_BAIL(SG_EINTERNAL, "http: out of memory");
	}
	return 0;
}

int sg_http_server_start(sg_http_server **out, const sg_http_options *o)
{
	const char *bind = o->bind_address ? o->bind_address : "127.0.0.1";
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
	addr a;
	unsigned lim[L_COUNT];
	SG_TRY(parse_bind(&a, &flags, bind, o->port));
	SG_TRY(resolve_limits(lim, o));
	bool tls = o->tls_cert_pem || o->tls_key_pem;
	if (tls) {
		SG_ENSURE(MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES, SG_EINVAL,
		          "http: this libmicrohttpd has no TLS");
		flags |= MHD_USE_TLS | MHD_USE_ITC; /* ITC: MHD_quiesce_daemon, for a change */
	}

	sg_http_server *s SG_CLEANUP(server_freep) = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "http: out of memory");
	s->orphan_fd = -1;
	s->flags = flags;
	s->tls = tls;
	memcpy(s->lim, lim, sizeof(lim));
	SG_TRY(copy_routes(s, o));
	if (tls) {
		if (o->tls_policy)
			SG_TRY(sg_http_tls_policy_check(o->tls_policy));
		SG_TRY(sg_http_tls_priorities(o->tls_policy, s->tls_prio, sizeof(s->tls_prio)));
		SG_TRY(copy_pair(o->tls_cert_pem, o->tls_key_pem, &s->tls_cert, &s->tls_key));
		SG_TRY(check_tls(s, s->tls_cert, s->tls_key));
	}
	/* A TLS server's connections may live in two daemons for a while. */
	SG_TRY(watcher_init(&s->watch, lim[L_CONNECTIONS] * (tls ? 2 : 1), lim[L_REQUEST_TIMEOUT]));

	s->daemon = start_daemon(s, &a, o->port, -1, s->tls_cert, s->tls_key);
	SG_ENSURE(s->daemon, SG_EINTERNAL, "http: cannot serve on %s port %u: %s", bind, (unsigned)o->port,
	          s->start_message[0] ? s->start_message : "libmicrohttpd failed to start");

	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : o->port;
	*out = SG_MOVE(s);
	return 0;
}

int sg_http_server_set_tls(sg_http_server *s, const char *cert_pem, const char *key_pem)
{
	SG_ENSURE(s->tls, SG_EINVAL, "http: the server was started without TLS");
	char *cert = NULL, *key = NULL;
	SG_TRY(copy_pair(cert_pem, key_pem, &cert, &key));
	int rc = check_tls(s, cert, key);
	if (rc < 0) {
		free(cert);
		wipe_free(key);
		return rc;
	}
	MHD_socket fd = s->orphan_fd;
	if (fd >= 0)
		s->orphan_fd = -1; /* a failed change left it: serve it again */
	else
		fd = MHD_quiesce_daemon(s->daemon);
	if (fd == MHD_INVALID_SOCKET) {
		free(cert);
		wipe_free(key);
		SG_BAIL(SG_EINTERNAL, "http: cannot take the listening socket from the running daemon");
	}
	struct MHD_Daemon *d = start_daemon(s, NULL, s->port, fd, cert, key);
	if (!d) {
		rc = sg_error_set(SG_EINTERNAL, "http: cannot start a daemon with the new certificate: %s",
		                  s->start_message[0] ? s->start_message : "libmicrohttpd failed to start");
		free(cert);
		wipe_free(key);
		cert = key = NULL;
		/* Back to the pair that served a moment ago, on a new daemon. */
		d = start_daemon(s, NULL, s->port, fd, s->tls_cert, s->tls_key);
		if (!d) {
			s->orphan_fd = fd; /* nothing accepts now; closed at stop */
			return rc;
		}
	}
	if (s->retired)
		MHD_stop_daemon(s->retired);
	s->retired = s->daemon;
	s->daemon = d;
	if (cert) {
		free(s->tls_cert);
		wipe_free(s->tls_key);
		s->tls_cert = cert;
		s->tls_key = key;
	}
	return rc;
}

uint16_t sg_http_server_port(const sg_http_server *s)
{
	return s->port;
}

void sg_http_server_stats(const sg_http_server *s, sg_http_stats *out)
{
	const watcher *w = &s->watch;
	out->open = atomic_load_explicit(&w->open, memory_order_relaxed);
	out->accepted = atomic_load_explicit(&w->accepted, memory_order_relaxed);
	out->overdue = atomic_load_explicit(&w->overdue, memory_order_relaxed);
}

void sg_http_server_stop(sg_http_server *s)
{
	server_free(s);
}
