/*
 * Tests for sg_http over real loopback sockets, with a tiny HTTP client:
 * routes, 404/405/413/500, HEAD, nothing echoed, bind addresses, limits,
 * concurrent scrapes of a registry being hammered, and a stop that does not
 * hang on connected clients.
 *
 * The routes here are the example of how signetd wires the endpoints:
 * /metrics renders a registry, /healthz always answers, /readyz answers 503
 * until something sets the ready flag.
 */
#include "sg_guard.h"
#include "sg_http.h"
#include "sg_metrics.h"
#include "sg_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- example endpoints ------------------------------------------------ */

static int h_metrics(sg_http_response *r, void *arg)
{
	char *text = NULL;
	size_t len = 0;
	SG_TRY(sg_metrics_render(arg, &text, &len));
	r->content_type = SG_METRICS_CONTENT_TYPE;
	sg_http_response_take(r, text, len);
	return 0;
}

static int h_healthz(sg_http_response *r, void *arg)
{
	(void)arg;
	sg_http_response_static(r, "ok\n", 3);
	return 0;
}

static int h_readyz(sg_http_response *r, void *arg)
{
	if (atomic_load((atomic_bool *)arg)) {
		sg_http_response_static(r, "ready\n", 6);
	} else {
		r->status = 503;
		sg_http_response_static(r, "not ready\n", 10);
	}
	return 0;
}

static int h_fail(sg_http_response *r, void *arg)
{
	(void)arg;
	SG_TRY(sg_http_response_copy(r, "partial", 7)); /* dropped on failure */
	return sg_error_set(SG_EHSM, "secret detail SECRETMARKER");
}

static int h_bad_status(sg_http_response *r, void *arg)
{
	(void)arg;
	r->status = 42;
	return 0;
}

/* ---- a tiny client ---------------------------------------------------- */

typedef struct reply {
	int status;
	char head[4096];
	char *body; /* malloc'ed, NUL-terminated */
	size_t body_len;
} reply;

static void reply_clear(reply *r)
{
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static int dial(const char *ip, uint16_t port)
{
	int v6 = strchr(ip, ':') != NULL;
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {5, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int rc;
	if (v6) {
		struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
		inet_pton(AF_INET6, ip, &a.sin6_addr);
		rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	} else {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
		inet_pton(AF_INET, ip, &a.sin_addr);
		rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	}
	if (rc != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = send(fd, s, n, 0);
		if (w <= 0)
			return false;
		s += w;
		n -= (size_t)w;
	}
	return true;
}

/* Reads until EOF; returns bytes read or -1 on error/timeout. */
static ssize_t read_all(int fd, char **out)
{
	size_t cap = 4096, len = 0;
	char *p = malloc(cap);
	for (;;) {
		if (cap - len < 1024) {
			cap *= 2;
			p = realloc(p, cap);
		}
		ssize_t r = recv(fd, p + len, cap - len - 1, 0);
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == ECONNRESET)
				break;
			free(p);
			return -1;
		}
		len += (size_t)r;
	}
	p[len] = '\0';
	*out = p;
	return (ssize_t)len;
}

/* Sends raw request bytes to ip:port and parses the reply; status -1 if no
 * well-formed reply came. */
static void exchange_at(const char *ip, uint16_t port, const char *req, reply *out)
{
	memset(out, 0, sizeof(*out));
	out->status = -1;
	int fd = dial(ip, port);
	if (fd < 0)
		return;
	char *raw = NULL;
	if (!send_all(fd, req, strlen(req)) || read_all(fd, &raw) < 0) {
		close(fd);
		return;
	}
	close(fd);
	char *sep = strstr(raw, "\r\n\r\n");
	int st;
	if (sep && sscanf(raw, "HTTP/1.%*d %d", &st) == 1) {
		size_t hl = (size_t)(sep - raw);
		if (hl >= sizeof(out->head))
			hl = sizeof(out->head) - 1;
		memcpy(out->head, raw, hl);
		out->status = st;
		out->body_len = strlen(sep + 4);
		out->body = strdup(sep + 4);
	}
	free(raw);
}

static void exchange(uint16_t port, const char *req, reply *out)
{
	exchange_at("127.0.0.1", port, req, out);
}

static void get(uint16_t port, const char *method, const char *path, reply *out)
{
	char req[512];
	snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", method, path);
	exchange(port, req, out);
}

static bool has_header(const reply *r, const char *line)
{
	return strstr(r->head, line) != NULL;
}

/* ---- fixture ---------------------------------------------------------- */

typedef struct fixture {
	sg_metrics *m;
	sg_series *hits;
	atomic_bool ready;
	sg_http_server *srv;
	uint16_t port;
} fixture;

static bool fixture_start(fixture *fx, const char *bind, unsigned max_conn, unsigned timeout)
{
	memset(fx, 0, sizeof(*fx));
	atomic_init(&fx->ready, false);
	sg_metric *c = NULL;
	if (sg_metrics_new(&fx->m) != 0 || sg_metrics_counter(&c, fx->m, "hits_total", "Hits.", NULL, 0) != 0 ||
	    sg_metric_series(&fx->hits, c, NULL) != 0)
		return false;
	const sg_http_route routes[] = {
	    {"/metrics", h_metrics, fx->m}, {"/healthz", h_healthz, NULL}, {"/readyz", h_readyz, &fx->ready},
	    {"/fail", h_fail, NULL},        {"/bad", h_bad_status, NULL},
	};
	sg_http_options o = {.bind_address = bind,
	                     .port = 0,
	                     .routes = routes,
	                     .nroutes = 5,
	                     .max_connections = max_conn,
	                     .timeout_seconds = timeout};
	int rc = sg_http_server_start(&fx->srv, &o);
	SG_CHECK_OK(rc);
	if (rc != 0)
		return false;
	fx->port = sg_http_server_port(fx->srv);
	SG_CHECK(fx->port != 0);
	return true;
}

static void fixture_stop(fixture *fx)
{
	sg_http_server_stop(fx->srv);
	sg_metrics_free(fx->m);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- tests ------------------------------------------------------------ */

static void t_routes(void)
{
	fixture fx;
	if (!fixture_start(&fx, NULL, 0, 0))
		return;
	reply r;
	sg_series_add(fx.hits, 7);
	get(fx.port, "GET", "/metrics", &r);
	SG_CHECK(r.status == 200);
	SG_CHECK(has_header(&r, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
	SG_CHECK(has_header(&r, "Cache-Control: no-store"));
	SG_CHECK(r.body && strcmp(r.body, "# HELP hits_total Hits.\n# TYPE hits_total counter\nhits_total 7\n") == 0);
	reply_clear(&r);

	get(fx.port, "GET", "/healthz", &r);
	SG_CHECK(r.status == 200 && r.body && strcmp(r.body, "ok\n") == 0);
	reply_clear(&r);
	get(fx.port, "GET", "/healthz?verbose=1", &r); /* query ignored */
	SG_CHECK(r.status == 200);
	reply_clear(&r);

	get(fx.port, "GET", "/readyz", &r);
	SG_CHECK(r.status == 503 && r.body && strcmp(r.body, "not ready\n") == 0);
	reply_clear(&r);
	atomic_store(&fx.ready, true);
	get(fx.port, "GET", "/readyz", &r);
	SG_CHECK(r.status == 200 && r.body && strcmp(r.body, "ready\n") == 0);
	reply_clear(&r);

	get(fx.port, "GET", "/nope", &r);
	SG_CHECK(r.status == 404);
	reply_clear(&r);
	get(fx.port, "GET", "/metrics/", &r);
	SG_CHECK(r.status == 404);
	reply_clear(&r);
	fixture_stop(&fx);
}

static void t_methods(void)
{
	fixture fx;
	if (!fixture_start(&fx, NULL, 0, 0))
		return;
	reply r;
	const char *refused[] = {"POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "BREW"};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		get(fx.port, refused[i], "/metrics", &r);
		SG_CHECK(r.status == 405);
		SG_CHECK(has_header(&r, "Allow: GET, HEAD"));
		reply_clear(&r);
	}
	/* POST with a body: 405, the body is neither read nor echoed. */
	exchange(fx.port,
	         "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nConnection: close\r\n\r\nECHOMARKER!", &r);
	SG_CHECK(r.status == 405 && !strstr(r.head, "ECHOMARKER") && r.body && !strstr(r.body, "ECHOMARKER"));
	reply_clear(&r);
	/* GET with a body: 413. */
	exchange(fx.port, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
	         &r);
	SG_CHECK(r.status == 413);
	reply_clear(&r);
	exchange(fx.port,
	         "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
	         "5\r\nhello\r\n0\r\n\r\n",
	         &r);
	SG_CHECK(r.status == 413);
	reply_clear(&r);
	exchange(fx.port, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", &r);
	SG_CHECK(r.status == 200);
	reply_clear(&r);

	/* HEAD: same headers as GET, no body. */
	sg_series_add(fx.hits, 1);
	get(fx.port, "HEAD", "/metrics", &r);
	SG_CHECK(r.status == 200);
	SG_CHECK(r.body && r.body_len == 0);
	SG_CHECK(has_header(&r, "Content-Length: 63"));
	SG_CHECK(has_header(&r, "Content-Type: text/plain; version=0.0.4"));
	reply_clear(&r);
	get(fx.port, "HEAD", "/nope", &r);
	SG_CHECK(r.status == 404 && r.body_len == 0);
	reply_clear(&r);
	fixture_stop(&fx);
}

static void t_errors_not_echoed(void)
{
	fixture fx;
	if (!fixture_start(&fx, NULL, 0, 0))
		return;
	reply r;
	get(fx.port, "GET", "/fail", &r);
	SG_CHECK(r.status == 500 && r.body && strcmp(r.body, "internal error\n") == 0);
	SG_CHECK(!strstr(r.head, "SECRETMARKER"));
	reply_clear(&r);
	get(fx.port, "GET", "/bad", &r);
	SG_CHECK(r.status == 500);
	reply_clear(&r);
	/* Hostile path and headers: nothing comes back. */
	exchange(fx.port,
	         "GET /ECHOMARKER<script> HTTP/1.1\r\nHost: ECHOMARKER\r\nX-Evil: ECHOMARKER\r\n"
	         "Connection: close\r\n\r\n",
	         &r);
	SG_CHECK(r.status == 404);
	SG_CHECK(!strstr(r.head, "ECHOMARKER") && r.body && !strstr(r.body, "ECHOMARKER"));
	reply_clear(&r);
	/* Garbage is answered or dropped, never echoed, and the server lives. */
	exchange(fx.port, "ECHOMARKER\r\n\r\n", &r);
	SG_CHECK(!r.body || !strstr(r.body, "ECHOMARKER"));
	reply_clear(&r);
	char big[40000];
	snprintf(big, sizeof(big), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	size_t n = strlen(big);
	memset(big + n, 'A', sizeof(big) - n - 8);
	memcpy(big + sizeof(big) - 8, "\r\n\r\n", 5);
	exchange(fx.port, big, &r);
	SG_CHECK(r.status != 200);
	reply_clear(&r);
	get(fx.port, "GET", "/healthz", &r);
	SG_CHECK(r.status == 200);
	reply_clear(&r);
	fixture_stop(&fx);
}

static void t_bind(void)
{
	const sg_http_route routes[] = {{"/healthz", h_healthz, NULL}};
	sg_http_options o = {.routes = routes, .nroutes = 1};
	sg_http_server *s = NULL;
	const char *bad[] = {"localhost", "1.2.3.4.5", "", "[127.0.0.1", "::1]", "fe80::1%lo"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.bind_address = bad[i];
		SG_CHECK_RC(sg_http_server_start(&s, &o), SG_EINVAL);
	}
	o.bind_address = "127.0.0.1";
	sg_http_options no_routes = o;
	no_routes.nroutes = 0;
	SG_CHECK_RC(sg_http_server_start(&s, &no_routes), SG_EINVAL);
	const sg_http_route dup[] = {{"/a", h_healthz, NULL}, {"/a", h_healthz, NULL}};
	sg_http_options dup_o = {.routes = dup, .nroutes = 2};
	SG_CHECK_RC(sg_http_server_start(&s, &dup_o), SG_EINVAL);
	const sg_http_route rel[] = {{"a", h_healthz, NULL}};
	sg_http_options rel_o = {.routes = rel, .nroutes = 1};
	SG_CHECK_RC(sg_http_server_start(&s, &rel_o), SG_EINVAL);

	/* A taken port fails with a reason. */
	SG_CHECK_OK(sg_http_server_start(&s, &o));
	sg_http_options same = o;
	same.port = sg_http_server_port(s);
	sg_http_server *s2 = NULL;
	SG_CHECK_RC(sg_http_server_start(&s2, &same), SG_EINTERNAL);
	SG_CHECK_MSG("cannot serve on 127.0.0.1");
	printf("  in use: %s\n", sg_error_last()->msg);
	sg_http_server_stop(s);

	/* IPv6, when the host has it: "::1", "[::1]", and "::" (dual stack). */
	reply r;
	const char *v6[] = {"::1", "[::1]"};
	for (size_t i = 0; i < 2; i++) {
		o.bind_address = v6[i];
		if (sg_http_server_start(&s, &o) != 0) {
			printf("  no IPv6 loopback here: %s\n", sg_error_last()->msg);
			break;
		}
		exchange_at("::1", sg_http_server_port(s),
		            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r);
		SG_CHECK(r.status == 200);
		reply_clear(&r);
		sg_http_server_stop(s);
	}
	o.bind_address = "::";
	if (sg_http_server_start(&s, &o) == 0) {
		get(sg_http_server_port(s), "GET", "/healthz", &r); /* over IPv4 */
		SG_CHECK(r.status == 200);
		reply_clear(&r);
		sg_http_server_stop(s);
	}
	sg_http_server_stop(NULL);
}

static void t_limits(void)
{
	fixture fx;
	if (!fixture_start(&fx, NULL, 2, 1))
		return;
	int a = dial("127.0.0.1", fx.port), b = dial("127.0.0.1", fx.port);
	SG_CHECK(a >= 0 && b >= 0);
	sleep_ms(200); /* let the server accept both */
	/* At the limit the server stops accepting: a third client waits in the
	 * listen backlog until the 1 s idle timeout frees a slot. */
	reply r;
	double t0 = now_s();
	get(fx.port, "GET", "/healthz", &r);
	double waited = now_s() - t0;
	printf("  third client served after %.3f s\n", waited);
	SG_CHECK(r.status == 200 && waited > 0.7 && waited < 4);
	reply_clear(&r);
	/* The idle connections were closed by the timeout. */
	char c;
	ssize_t got = recv(a, &c, 1, 0);
	SG_CHECK(got == 0 || (got < 0 && errno == ECONNRESET));
	close(a);
	close(b);
	sleep_ms(200);
	get(fx.port, "GET", "/healthz", &r);
	SG_CHECK(r.status == 200);
	reply_clear(&r);
	fixture_stop(&fx);
}

static void t_stop_with_clients(void)
{
	fixture fx;
	if (!fixture_start(&fx, NULL, 0, 0))
		return;
	int idle = dial("127.0.0.1", fx.port);
	int partial = dial("127.0.0.1", fx.port);
	SG_CHECK(idle >= 0 && partial >= 0);
	SG_CHECK(send_all(partial, "GET /metrics HTTP/1.1\r\nHost: x\r\n", 33));
	sleep_ms(200);
	double t0 = now_s();
	fixture_stop(&fx);
	double took = now_s() - t0;
	printf("  stop with 2 connected clients: %.3f s\n", took);
	SG_CHECK(took < 2);
	char c;
	SG_CHECK(recv(partial, &c, 1, 0) <= 0);
	close(idle);
	close(partial);
}

/* ---- concurrent scrapes while counters are hammered -------------------- */

#define HAMMERS 2
#define HAMMER_OPS 200000
#define SCRAPERS 4
#define SCRAPES 25

typedef struct scrape_ctx {
	uint16_t port;
	int ok;
	bool monotonic;
} scrape_ctx;

static double hits_in(const char *body)
{
	const char *p = strstr(body, "\nhits_total ");
	return p ? strtod(p + 12, NULL) : -1;
}

static void *hammer_run(void *arg)
{
	sg_series *s = arg;
	for (int i = 0; i < HAMMER_OPS; i++)
		sg_series_inc(s);
	return NULL;
}

static void *scrape_run(void *arg)
{
	scrape_ctx *c = arg;
	double last = 0;
	for (int i = 0; i < SCRAPES; i++) {
		reply r;
		get(c->port, i % 2 ? "GET" : "HEAD", "/metrics", &r);
		if (r.status == 200)
			c->ok++;
		if (r.status == 200 && i % 2) {
			double v = hits_in(r.body);
			if (v < last)
				c->monotonic = false;
			last = v;
		}
		reply_clear(&r);
	}
	return NULL;
}

static void t_concurrent_scrapes(void)
{
	fixture fx;
	if (!fixture_start(&fx, "127.0.0.1", 0, 0))
		return;
	pthread_t h[HAMMERS], s[SCRAPERS];
	scrape_ctx sc[SCRAPERS];
	for (int i = 0; i < HAMMERS; i++)
		SG_CHECK(pthread_create(&h[i], NULL, hammer_run, fx.hits) == 0);
	for (int i = 0; i < SCRAPERS; i++) {
		sc[i] = (scrape_ctx){fx.port, 0, true};
		SG_CHECK(pthread_create(&s[i], NULL, scrape_run, &sc[i]) == 0);
	}
	for (int i = 0; i < HAMMERS; i++)
		pthread_join(h[i], NULL);
	for (int i = 0; i < SCRAPERS; i++) {
		pthread_join(s[i], NULL);
		SG_CHECK(sc[i].ok == SCRAPES);
		SG_CHECK(sc[i].monotonic);
	}
	reply r;
	get(fx.port, "GET", "/metrics", &r);
	SG_CHECK(r.status == 200 && hits_in(r.body) == (double)HAMMERS * HAMMER_OPS);
	reply_clear(&r);
	fixture_stop(&fx);
}

SG_TEST_MAIN(SG_TEST(t_routes), SG_TEST(t_methods), SG_TEST(t_errors_not_echoed), SG_TEST(t_bind), SG_TEST(t_limits),
             SG_TEST(t_stop_with_clients), SG_TEST(t_concurrent_scrapes))
