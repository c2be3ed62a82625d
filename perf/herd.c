/*
 * herd: a mesh restart against signetd (the thundering herd of issue #16).
 *
 *   herd --target grpc://127.0.0.1:PORT --token-file T --ca-file ROOT \
 *        --connections 5000 --calls-per-connection 10 --server-pid PID
 *
 * N clients connect, then call CreateCertificate at the same instant, and
 * each retries the way istio-agent does, until every one holds a verified
 * certificate or the time bound passes. It prints how many were served
 * (and lost), every answer by status code, the retries and reconnections
 * that took, the time until the last client was served against the HSM's
 * own ceiling (a closed-loop run of the same server just before), and the
 * server's memory: before the connections, with them held idle, and at its
 * peak under the herd (sampled from /proc/PID/status).
 *
 * Design notes.
 *
 * - A client is one logical istio-agent: one CSR (made before the clock
 *   starts, distinct, as loadgen makes them: lg_common.h), reused for its
 *   retries, as the agent's retry interceptor resends the same request.
 *   Clients share connections --calls-per-connection at a time (the issue's
 *   "5,000 connections and 50,000 requests"); with 1 each is a pod.
 * - The retry policy is istio-agent's (reference: istio-ca-api.md, "Inner
 *   unary interceptor", "Outer"). Inner: at most --attempts calls, waiting
 *   100/200/400/800 ms (--backoff doubled, +-10 % jitter,
 *   go-grpc-middleware's BackoffExponentialWithJitter) before attempts 2..5,
 *   retrying only CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
 *   ABORTED, INTERNAL and UNAVAILABLE. When the inner loop gives up (or the
 *   answer is not retryable) CSRSign fails and the SDS loop tries again
 *   forever, 500 ms doubling to 60 s (--outer-backoff, --outer-max, +-10 %).
 * - Reconnection (--reconnect): istio-agent's CSRSign closes and re-dials
 *   its connection after every failed CSR (`csr`, the default: once per
 *   exhausted inner loop, since grpc-go's retry interceptor retries on the
 *   same ClientConn); `attempt` re-dials after every failed attempt (the
 *   harsher reading), `never` keeps the first connection. A client that
 *   reconnects gets a channel of its own; the shared one is freed when its
 *   last client has left it. Every re-dial is a TLS handshake for signetd.
 * - Thousands of connections cannot each have a thread: every channel
 *   shares the --client-threads completion queues (sg_grpc_client), whose
 *   threads run the reply callbacks and do the I/O. Retries wait in one
 *   timer heap served by one thread, which also makes the new channels.
 * - One instant: every connection is made and held READY first (bounded by
 *   --connect-timeout; those that cannot connect are counted, and their
 *   clients start anyway, as agents would), then one thread starts every
 *   client's first call in a loop; how long that loop took is printed.
 * - Every certificate is checked, cheaply, as loadgen checks: the answer
 *   decodes with a chain of at least two, the leaf is one PEM certificate
 *   whose DER holds the CSR's SubjectPublicKeyInfo and the identity. A bad
 *   certificate loses its client (it is not retried: the server answered).
 * - Bounds: no attempt starts after --duration from the release; each has
 *   a --timeout deadline; herd waits for calls in flight at most --timeout
 *   + 10 s more. A client not served by then is lost. Loopback only.
 * - The exit status is 0 only when every client was served with a good
 *   certificate (and the ceiling run had no failure).
 *
 * The bearer token comes from a file (never argv) readable only by its
 * owner, is held in an sg_secret and is sent only over TLS. With
 * --token-dir (a pool, lg_common.h) each client is a pod with a token of
 * its own: item i (ceiling requests first, then the clients) presents
 * token i mod the pool's size and its CSR names that token's identity; a
 * client's retries present its token again (counted once: a pod retrying is
 * still one pod), so a pool of ceiling-requests + clients tokens sends no
 * token twice but for retries.
 */
#include "lg_common.h"
#include "sg_clock.h"
#include "sg_error.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_istio.h"
#include "sg_opt.h"
#include "sg_secret.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- settings ----------------------------------------------------------- */

typedef struct hd_args {
	char *target;
	int64_t connections;
	int64_t calls_per_connection;
	int64_t attempts;
	int64_t backoff_ms;
	int64_t outer_backoff_ms;
	int64_t outer_max_ms;
	int64_t reconnect; /* enum: never, csr, attempt */
	int64_t duration;
	int64_t timeout;
	int64_t connect_timeout;
	int64_t ceiling_requests;
	int64_t ceiling_connections;
	int64_t ceiling_depth;
	int64_t client_threads;
	int64_t csr_threads;
	int64_t server_pid;
	char *token_file;
	char *token_dir;
	char *trust_domain;
	char *ca_file;
	char *server_name;
	char *identity;
	char *cluster_id;
	bool json;
} hd_args;

enum { RECONNECT_NEVER, RECONNECT_CSR, RECONNECT_ATTEMPT };
#define CEIL_CONNS_MAX 16
#define CEIL_DEPTH_MAX 64
static const char *const reconnect_names[] = {"never", "csr", "attempt", NULL};

#define ROW(name, type, field, def, min, max, help)                                                                    \
	{                                                                                                              \
		name, type, offsetof(hd_args, field), def, min, max, NULL, help, true                                  \
	}

static const sg_opt opts[] = {
    ROW("target", SG_OPT_STRING, target, NULL, 0, 256, "grpc://127.0.0.1:PORT (signetd)"),
    ROW("connections", SG_OPT_INT, connections, "1000", 1, 200000, "connections made and held before the release"),
    ROW("calls-per-connection", SG_OPT_INT, calls_per_connection, "1", 1, 100,
        "clients (calls) released on each connection at once"),
    ROW("attempts", SG_OPT_INT, attempts, "5", 1, 100, "calls per inner retry loop (istio-agent: 5)"),
    ROW("backoff-ms", SG_OPT_INT, backoff_ms, "100", 0, 60000,
        "inner loop: wait this, doubled each attempt, +-10 %, before attempt 2, 3, ..."),
    ROW("outer-backoff-ms", SG_OPT_INT, outer_backoff_ms, "500", 0, 600000,
        "outer (SDS) loop: first wait after an inner loop failed, doubled each time, +-10 %"),
    ROW("outer-max-ms", SG_OPT_INT, outer_max_ms, "60000", 0, 3600000, "outer loop: longest wait"),
    {"reconnect", SG_OPT_ENUM, offsetof(hd_args, reconnect), "csr", 0, 0, reconnect_names,
     "new TLS connection after a failed csr (istio-agent's CSRSign), after every failed attempt, or never", true},
    ROW("duration", SG_OPT_DURATION, duration, "120s", 1, 3600,
        "start no attempt after this long from the release; clients not served by then are lost"),
    ROW("timeout", SG_OPT_DURATION, timeout, "10s", 1, 600, "deadline of each attempt"),
    ROW("connect-timeout", SG_OPT_DURATION, connect_timeout, "60s", 1, 3600,
        "wait at most this long for every connection to be ready before the release"),
    ROW("ceiling-requests", SG_OPT_INT, ceiling_requests, "2000", 0, 1000000,
        "closed-loop requests measuring the server's ceiling first (0: none)"),
    ROW("ceiling-connections", SG_OPT_INT, ceiling_connections, "4", 1, CEIL_CONNS_MAX, "ceiling run: connections"),
    ROW("ceiling-depth", SG_OPT_INT, ceiling_depth, "16", 1, CEIL_DEPTH_MAX,
        "ceiling run: calls in flight on each (keep the total within the server's queue)"),
    ROW("client-threads", SG_OPT_INT, client_threads, "1", 1, 64, "completion queues (threads) the connections share"),
    ROW("csr-threads", SG_OPT_INT, csr_threads, "0", 0, 64, "threads making the CSRs before the run (0: one per CPU)"),
    ROW("server-pid", SG_OPT_INT, server_pid, "0", 0, 4194304,
        "sample this process's memory (/proc/PID/status VmRSS, VmHWM) through the run (0: none)"),
    ROW("token-file", SG_OPT_PATH, token_file, NULL, 0, 0,
        "file (mode 0600) holding ONE bearer token every client sends (a server's verification or review "
        "cache answers all but the first; see --token-dir); never pass a token in argv"),
    ROW("token-dir", SG_OPT_PATH, token_dir, NULL, 0, 0,
        "a pool, one token per file (as loadgen's --token-dir; perf/tokenpool.py): ceiling request i, then "
        "client c, sends token (i or ceiling-requests + c) mod the pool's size, retries the same one; each CSR "
        "names its token's identity from the token's claims (--identity is then unused)"),
    ROW("trust-domain", SG_OPT_STRING, trust_domain, "cluster.local", 1, 253,
        "with --token-dir: the trust domain of the identities, spiffe://DOMAIN/ns/NS/sa/SA"),
    ROW("ca-file", SG_OPT_PATH, ca_file, NULL, 0, 0, "roots to verify the server with (TLS); without it, plaintext"),
    ROW("server-name", SG_OPT_STRING, server_name, "localhost", 0, 253, "TLS name to verify"),
    ROW("identity", SG_OPT_STRING, identity, "spiffe://cluster.local/ns/default/sa/default", 0, 1024,
        "URI SAN of the CSRs (must be the token's identity; not with --token-dir)"),
    ROW("cluster-id", SG_OPT_STRING, cluster_id, "Kubernetes", 0, 253, "clusterid header (empty: none)"),
    ROW("json", SG_OPT_BOOL, json, "false", 0, 0, "print the result as one JSON line"),
};

#define N(t) (sizeof(t) / sizeof((t)[0]))
#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull
#define MAX_CODE 17                /* gRPC status codes 0..16 */
#define CODE_START_FAILED MAX_CODE /* the call could not even start */

/* ---- shared state ------------------------------------------------------- */

typedef struct hd hd;

/* One completion queue and its thread, with the scratch its callbacks use. */
typedef struct hd_cq {
	sg_grpc_client *client;
	sg_istio_arena *arena;
	uint8_t der[16 * 1024];
} hd_cq;

/* A connection; clients hold references (only the timer thread changes
 * them once the herd is released, so the count needs no more than atomics
 * for the main thread's last look). */
typedef struct hd_chan {
	sg_grpc_channel *ch;
	atomic_uint refs;
} hd_chan;

typedef struct hd_client {
	hd *h;
	hd_cq *q;
	hd_chan *chan;
	size_t idx;         /* its CSR */
	bool presented;     /* its token was sent once (the pool counts first uses) */
	unsigned attempt;   /* calls made in the current inner loop */
	unsigned rounds;    /* inner loops that failed */
	bool reconnect;     /* re-dial before the next attempt */
	uint64_t due;       /* next attempt, while in the heap */
	uint64_t rng;       /* jitter */
	uint64_t served_ns; /* since the release, 0 while unserved */
} hd_client;

/* The closed-loop ceiling run: --ceiling-connections x --ceiling-depth slots. */
typedef struct hd_slot {
	hd *h;
	hd_cq *q;
	hd_chan *chan;
	size_t idx;
} hd_slot;

typedef struct hd_counts {
	atomic_uint_fast64_t by_code[MAX_CODE + 1];
	atomic_uint_fast64_t requests, ok, bad_cert, inner_retries, outer_retries, reconnects;
} hd_counts;

struct hd {
	const hd_args *a;
	lg_item *items;
	size_t nitems;
	size_t item_off;  /* items is advanced this far into the CSRs for the herd */
	sg_grpc_md md[2]; /* md[0] is the authorization, per call with a pool */
	size_t nmd;
	lg_tokens *pool; /* or NULL */
	bool one_token;  /* --token-file */
	const char *root;
	char addr[96];
	hd_cq *qs;
	size_t nq;

	/* the herd */
	hd_client *clients;
	size_t nclients;
	hd_chan *chans; /* the initial connections */
	size_t nchans;
	uint64_t t_release, t_end; /* no attempt starts at or after t_end */
	hd_counts c;
	atomic_size_t active;           /* clients neither served nor given up */
	atomic_size_t in_flight;        /* calls started and not yet answered */
	atomic_size_t lost;             /* gave up at the time bound */
	atomic_uint_fast64_t t_last_ok; /* CLOCK_MONOTONIC of the last client served */
	atomic_size_t chans_made;       /* channels made by reconnection */
	atomic_size_t chans_live;       /* channels held now */
	atomic_size_t chans_peak;

	/* the retry timer: a min-heap on due */
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* timer: a new earliest entry, or stop */
	pthread_cond_t done_cv; /* main: active reached 0 */
	hd_client **heap;
	size_t nheap;
	bool stop;
	pthread_t timer;

	/* the ceiling run */
	size_t ceil_first, ceil_end;
	atomic_size_t ceil_next, ceil_done, ceil_ok;
	atomic_uint_fast64_t ceil_t_last;
	hd_counts ceil_c;
};

static const char *code_name(int code)
{
	return code == CODE_START_FAILED ? "START_FAILED" : sg_grpc_status_name(code);
}

/* ---- memory sampler ----------------------------------------------------- */

typedef struct hd_mem {
	long pid;
	pthread_t t;
	atomic_bool stop;
	atomic_uint_fast64_t peak_rss_kb; /* since the last reset */
	bool running;
} hd_mem;

/* CPU time (user + system) of pid so far, in seconds; 0 when unreadable. */
static double proc_cpu(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the command may hold spaces */
	unsigned long long ut = 0, st = 0;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* VmRSS and VmHWM of pid, kB; false when unreadable. */
static bool proc_mem(long pid, uint64_t *rss, uint64_t *hwm)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	*rss = *hwm = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		if (sscanf(line, "VmRSS: %llu", &v) == 1)
			*rss = v;
		else if (sscanf(line, "VmHWM: %llu", &v) == 1)
			*hwm = v;
	}
	fclose(f);
	return *rss > 0;
}

static void *mem_thread(void *p)
{
	hd_mem *m = p;
	while (!atomic_load(&m->stop)) {
		uint64_t rss, hwm;
		if (proc_mem(m->pid, &rss, &hwm)) {
			uint64_t peak = atomic_load(&m->peak_rss_kb);
			while (rss > peak && !atomic_compare_exchange_weak(&m->peak_rss_kb, &peak, rss))
				;
		}
		struct timespec d = {0, 20 * 1000 * 1000};
		nanosleep(&d, NULL);
	}
	return NULL;
}

static uint64_t mem_rss(const hd_mem *m)
{
	uint64_t rss = 0, hwm = 0;
	if (m->pid)
		proc_mem(m->pid, &rss, &hwm);
	return rss;
}

/* ---- jitter and backoff ------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: per client, used only by the thread handling it */
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* ms * (1 +- 0.1), in ns. */
static uint64_t jittered(uint64_t *rng, uint64_t ms)
{
	double f = 0.9 + 0.2 * (double)(rng_next(rng) >> 11) / (double)(1ull << 53);
	return (uint64_t)((double)ms * f * (double)NS_PER_MS);
}

/* The codes go-grpc-middleware's retry interceptor is told to retry in
 * istio-agent (pkg/security/retry.go). */
static bool retryable(int code)
{
	switch (code) {
	case SG_GRPC_CANCELLED:
	case SG_GRPC_DEADLINE_EXCEEDED:
	case SG_GRPC_RESOURCE_EXHAUSTED:
	case 10: /* ABORTED */
	case SG_GRPC_INTERNAL:
	case SG_GRPC_UNAVAILABLE:
	case CODE_START_FAILED:
		return true;
	default:
		return false;
	}
}

/* ---- channels ----------------------------------------------------------- */

static int chan_new(hd *h, hd_chan **out)
{
	hd_chan *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory for a connection");
	/* own_connection: every channel is its own TCP + TLS connection, as
	 * every agent's ClientConn is. */
	sg_grpc_channel_options co = {.target = h->addr,
	                              .root_pem = h->root,
	                              .server_name = h->root ? h->a->server_name : NULL,
	                              .own_connection = true};
	int rc = sg_grpc_channel_new(&c->ch, &co);
	if (rc < 0) {
		free(c);
		return rc;
	}
	atomic_store(&c->refs, 1);
	size_t live = atomic_fetch_add(&h->chans_live, 1) + 1;
	size_t peak = atomic_load(&h->chans_peak);
	while (live > peak && !atomic_compare_exchange_weak(&h->chans_peak, &peak, live))
		;
	*out = c;
	return SG_OK;
}

static void chan_drop(hd *h, hd_chan *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
		sg_grpc_channel_free(c->ch);
		c->ch = NULL;
		atomic_fetch_sub(&h->chans_live, 1);
		/* The initial channels live in h->chans; made ones are freed. */
		if (!(c >= h->chans && c < h->chans + h->nchans))
			free(c);
	}
}

/* ---- the herd: attempts and retries ------------------------------------- */

static void heap_push(hd *h, hd_client *c)
{
	size_t i = h->nheap++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h->heap[p]->due <= c->due)
			break;
		h->heap[i] = h->heap[p];
		i = p;
	}
	h->heap[i] = c;
}

static hd_client *heap_pop(hd *h)
{
	hd_client *top = h->heap[0], *last = h->heap[--h->nheap];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const hd_client *mv = last;
		if (l < h->nheap && h->heap[l]->due < mv->due) {
			m = l;
			mv = h->heap[l];
		}
		if (r < h->nheap && h->heap[r]->due < mv->due)
			m = r;
		if (m == i)
			break;
		h->heap[i] = h->heap[m];
		i = m;
	}
	if (h->nheap)
		h->heap[i] = last;
	return top;
}

/* A client leaves the herd (served, bad certificate, or out of time). */
static void client_finished(hd *h)
{
	if (atomic_fetch_sub(&h->active, 1) == 1) {
		pthread_mutex_lock(&h->mu);
		pthread_cond_broadcast(&h->done_cv);
		pthread_mutex_unlock(&h->mu);
	}
}

static void on_herd_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg);

/* One attempt of client c; a call that cannot start is handled as a
 * retryable failure. Runs on the releasing or the timer thread. */
static void attempt_start(hd_client *c)
{
	hd *h = c->h;
	if (c->reconnect) {
		hd_chan *n = NULL;
		if (chan_new(h, &n) == SG_OK) {
			chan_drop(h, c->chan);
			c->chan = n;
			atomic_fetch_add(&h->chans_made, 1);
			atomic_fetch_add(&h->c.reconnects, 1);
		}
		c->reconnect = false;
	}
	const lg_item *it = &h->items[c->idx];
	sg_grpc_md md[2];
	memcpy(md, h->md, sizeof(md));
	if (h->pool) { /* copied by the call */
		size_t i = h->item_off + c->idx;
		md[0].value = c->presented ? lg_tokens_again(h->pool, i) : lg_tokens_take(h->pool, i);
		c->presented = true;
	}
	c->attempt++;
	atomic_fetch_add(&h->c.requests, 1);
	atomic_fetch_add(&h->in_flight, 1);
	if (sg_grpc_call_start(c->q->client, c->chan->ch, SG_ISTIO_METHOD, md, h->nmd, it->body, it->body_len,
	                       (uint64_t)h->a->timeout * NS_PER_S, on_herd_reply, c) < 0)
		on_herd_reply(CODE_START_FAILED, sg_error_last()->msg, NULL, 0, c);
}

/* After a failed attempt: the next one, by istio-agent's two loops. A retry
 * is counted when it is scheduled, not one that the time bound forbids. */
static void schedule_retry(hd_client *c, int status, uint64_t now)
{
	hd *h = c->h;
	const hd_args *a = h->a;
	uint64_t wait;
	bool inner = retryable(status) && c->attempt < (unsigned)a->attempts;
	if (inner) {
		/* inner: 100, 200, 400, 800 ms before attempts 2..5 */
		unsigned k = c->attempt - 1;
		wait = jittered(&c->rng, (uint64_t)a->backoff_ms << (k < 30 ? k : 30));
		if (a->reconnect == RECONNECT_ATTEMPT)
			c->reconnect = true;
	} else {
		/* CSRSign failed: the SDS loop starts a new inner loop later */
		unsigned k = c->rounds++;
		uint64_t ms = (uint64_t)a->outer_backoff_ms << (k < 30 ? k : 30);
		if (ms > (uint64_t)a->outer_max_ms)
			ms = (uint64_t)a->outer_max_ms;
		wait = jittered(&c->rng, ms);
		c->attempt = 0;
		if (a->reconnect != RECONNECT_NEVER)
			c->reconnect = true;
	}
	c->due = now + wait;
	if (c->due >= h->t_end) {
		atomic_fetch_add(&h->lost, 1);
		client_finished(h);
		return;
	}
	atomic_fetch_add(inner ? &h->c.inner_retries : &h->c.outer_retries, 1);
	pthread_mutex_lock(&h->mu);
	heap_push(h, c);
	if (h->heap[0] == c)
		pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

/* Checks an OK answer; NULL when it holds a good certificate. */
static const char *check_answer(hd *h, hd_cq *q, size_t idx, const uint8_t *resp, size_t len)
{
	sg_istio_arena_reset(q->arena);
	sg_istio_chain chain;
	if (sg_istio_response_decode(q->arena, resp, len, &chain) < 0)
		return "undecodable";
	if (chain.n < 2)
		return "chain shorter than 2";
	return lg_check_leaf(chain.elems[0], chain.lens[0], &h->items[idx], h->items[idx].identity, q->der,
	                     sizeof(q->der));
}

/* The first message of each kind of failure, once, on stderr. */
static void first_bad(int code, const char *what, const char *msg)
{
	static atomic_bool said[MAX_CODE + 2];
	int k = code >= 0 && code <= MAX_CODE ? code : MAX_CODE + 1;
	if (!atomic_exchange(&said[k], true))
		fprintf(stderr, "herd: first %s: %.200s\n", what, msg ? msg : "");
}

/* On the client's completion thread (or the starting thread when the call
 * could not start). */
static void on_herd_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg)
{
	hd_client *c = arg;
	hd *h = c->h;
	uint64_t now = sg_now_ns();
	atomic_fetch_sub(&h->in_flight, 1);
	atomic_fetch_add(&h->c.by_code[status >= 0 && status <= MAX_CODE ? status : SG_GRPC_UNKNOWN], 1);
	if (status == SG_GRPC_OK) {
		const char *bad = check_answer(h, c->q, c->idx, resp, len);
		if (bad) {
			first_bad(MAX_CODE + 1, "bad certificate", bad);
			atomic_fetch_add(&h->c.bad_cert, 1);
		} else {
			atomic_fetch_add(&h->c.ok, 1);
			c->served_ns = now - h->t_release;
			uint64_t last = atomic_load(&h->t_last_ok);
			while (now > last && !atomic_compare_exchange_weak(&h->t_last_ok, &last, now))
				;
		}
		client_finished(h);
		return;
	}
	first_bad(status, code_name(status), msg);
	schedule_retry(c, status, now);
}

static void *timer_thread(void *p)
{
	hd *h = p;
	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		if (!h->nheap) {
			pthread_cond_wait(&h->cv, &h->mu);
			continue;
		}
		uint64_t now = sg_now_ns();
		if (h->heap[0]->due > now) {
			uint64_t wait = h->heap[0]->due - now;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			uint64_t ns = (uint64_t)ts.tv_nsec + wait;
			ts.tv_sec += (time_t)(ns / NS_PER_S);
			ts.tv_nsec = (long)(ns % NS_PER_S);
			pthread_cond_timedwait(&h->cv, &h->mu, &ts);
			continue;
		}
		hd_client *c = heap_pop(h);
		pthread_mutex_unlock(&h->mu);
		attempt_start(c);
		pthread_mutex_lock(&h->mu);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* ---- the ceiling: closed loop on a few connections ---------------------- */

static void on_ceil_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg);

static void ceil_start(hd_slot *s)
{
	hd *h = s->h;
	size_t i = atomic_fetch_add(&h->ceil_next, 1);
	if (i >= h->ceil_end)
		return;
	s->idx = i;
	const lg_item *it = &h->items[i];
	sg_grpc_md md[2];
	memcpy(md, h->md, sizeof(md));
	if (h->pool)
		md[0].value = lg_tokens_take(h->pool, i); /* the ceiling runs before the shift */
	atomic_fetch_add(&h->ceil_c.requests, 1);
	if (sg_grpc_call_start(s->q->client, s->chan->ch, SG_ISTIO_METHOD, md, h->nmd, it->body, it->body_len,
	                       (uint64_t)h->a->timeout * NS_PER_S, on_ceil_reply, s) < 0)
		on_ceil_reply(CODE_START_FAILED, sg_error_last()->msg, NULL, 0, s);
}

static void on_ceil_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg)
{
	hd_slot *s = arg;
	hd *h = s->h;
	atomic_fetch_add(&h->ceil_c.by_code[status >= 0 && status <= MAX_CODE ? status : SG_GRPC_UNKNOWN], 1);
	if (status == SG_GRPC_OK && !check_answer(h, s->q, s->idx, resp, len)) {
		atomic_fetch_add(&h->ceil_ok, 1);
		uint64_t now = sg_now_ns(), last = atomic_load(&h->ceil_t_last);
		while (now > last && !atomic_compare_exchange_weak(&h->ceil_t_last, &last, now))
			;
	} else {
		first_bad(status == SG_GRPC_OK ? MAX_CODE + 1 : status,
		          status == SG_GRPC_OK ? "bad certificate (ceiling run)" : code_name(status), msg);
	}
	size_t done = atomic_fetch_add(&h->ceil_done, 1) + 1;
	if (done == h->ceil_end - h->ceil_first) {
		pthread_mutex_lock(&h->mu);
		pthread_cond_broadcast(&h->done_cv);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	ceil_start(s);
}

/* The server's closed-loop rate with requests [first, end), on
 * --ceiling-connections x --ceiling-depth calls: certificates per second. */
static int run_ceiling(hd *h, size_t first, size_t end, double *rate)
{
	*rate = 0;
	/* static: should the run time out, calls still in flight point at them */
	static hd_chan chans[CEIL_CONNS_MAX];
	static hd_slot slots[CEIL_CONNS_MAX * CEIL_DEPTH_MAX];
	size_t nconns = (size_t)h->a->ceiling_connections, nslots = nconns * (size_t)h->a->ceiling_depth;
	memset(chans, 0, sizeof(chans));
	size_t made = 0;
	int rc = SG_OK;
	for (; made < nconns && rc == SG_OK; made++) {
		hd_chan *c = NULL;
		rc = chan_new(h, &c);
		if (rc == SG_OK) {
			chans[made].ch = c->ch;
			atomic_store(&chans[made].refs, 1);
			free(c);
		}
	}
	if (rc < 0) {
		made--;
		goto out;
	}
	h->ceil_first = first;
	h->ceil_end = end;
	atomic_store(&h->ceil_next, first);
	uint64_t t0 = sg_now_ns();
	atomic_store(&h->ceil_t_last, t0);
	for (size_t k = 0; k < nslots; k++) {
		slots[k] = (hd_slot){h, &h->qs[k % h->nq], &chans[k % nconns], 0};
		ceil_start(&slots[k]);
	}
	uint64_t limit = t0 + (uint64_t)(h->a->duration + h->a->timeout + 10) * NS_PER_S;
	pthread_mutex_lock(&h->mu);
	while (atomic_load(&h->ceil_done) < end - first && sg_now_ns() < limit) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&h->done_cv, &h->mu, &ts);
	}
	pthread_mutex_unlock(&h->mu);
	if (atomic_load(&h->ceil_done) < end - first)
		return sg_error_set(SG_ETIMEOUT,
		                    "the ceiling run did not finish in time"); /* calls still point at slots */
	double secs = (double)(atomic_load(&h->ceil_t_last) - t0) / 1e9;
	*rate = secs > 0 ? (double)atomic_load(&h->ceil_ok) / secs : 0;
out:
	for (size_t k = 0; k < made; k++) {
		sg_grpc_channel_free(chans[k].ch);
		atomic_fetch_sub(&h->chans_live, 1);
	}
	return rc;
}

/* ---- connect, release, wait --------------------------------------------- */

/* Makes the initial channels and waits until each is READY (or has failed,
 * or the bound passed): how many are ready. */
static int connect_all(hd *h, size_t *ready)
{
	for (size_t i = 0; i < h->nchans; i++) {
		hd_chan *c = NULL;
		SG_TRY(chan_new(h, &c));
		h->chans[i].ch = c->ch;
		atomic_store(&h->chans[i].refs, 0); /* set by the clients */
		free(c);
	}
	uint64_t limit = sg_now_ns() + (uint64_t)h->a->connect_timeout * NS_PER_S;
	size_t n_ready = 0;
	for (;;) {
		n_ready = 0;
		for (size_t i = 0; i < h->nchans; i++)
			n_ready += sg_grpc_channel_state(h->chans[i].ch, true) == SG_GRPC_CHANNEL_READY;
		if (n_ready == h->nchans || sg_now_ns() >= limit)
			break;
		struct timespec d = {0, 50 * 1000 * 1000};
		nanosleep(&d, NULL);
	}
	*ready = n_ready;
	return SG_OK;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

typedef struct hd_result {
	size_t clients, connections, ready, served, lost, bad;
	uint64_t requests, retries;
	double release_ms, all_served_s, ceiling, ideal_s;
	double served_p50_ms, served_p99_ms, served_max_ms;
	uint64_t rss_start_kb, rss_connected_kb, rss_peak_kb, hwm_kb, rss_after_kb;
	size_t chans_made, chans_peak;
	double server_cpu_s, herd_cpu_s; /* from the release to the end */
	bool measured_mem;
} hd_result;

static void report(const hd *h, const hd_result *r)
{
	const hd_args *a = h->a;
	if (a->json) {
		json_t *codes = json_object();
		for (int k = 0; codes && k <= MAX_CODE; k++) {
			uint64_t v = atomic_load(&h->c.by_code[k]);
			if (v)
				json_object_set_new(codes, code_name(k), json_integer((json_int_t)v));
		}
		json_t *o = json_pack(
		    "{s:s, s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, "
		    "s:f, s:f, s:f, s:f, s:f, s:f, s:o}",
		    "target", a->target, "connections", (json_int_t)r->connections, "connected", (json_int_t)r->ready,
		    "clients", (json_int_t)r->clients, "attempts", (json_int_t)a->attempts, "reconnect",
		    reconnect_names[a->reconnect], "requests", (json_int_t)r->requests, "ok", (json_int_t)r->served,
		    "lost", (json_int_t)r->lost, "bad_certificates", (json_int_t)r->bad, "retries",
		    (json_int_t)r->retries, "inner_retries", (json_int_t)atomic_load(&h->c.inner_retries),
		    "outer_retries", (json_int_t)atomic_load(&h->c.outer_retries), "reconnects",
		    (json_int_t)atomic_load(&h->c.reconnects), "connections_peak", (json_int_t)r->chans_peak,
		    "rss_start_kb", (json_int_t)r->rss_start_kb, "rss_connected_kb", (json_int_t)r->rss_connected_kb,
		    "rss_peak_kb", (json_int_t)r->rss_peak_kb, "release_ms", r->release_ms, "all_served_s",
		    r->all_served_s, "ceiling_per_s", r->ceiling, "ideal_s", r->ideal_s, "served_p50_ms",
		    r->served_p50_ms, "served_p99_ms", r->served_p99_ms, "served_max_ms", r->served_max_ms, "codes",
		    codes ? codes : json_null());
		if (o) {
			lg_token_use tu = lg_token_use_of(h->pool, h->one_token);
			json_object_set_new(o, "tokens", lg_token_use_json(&tu));
			json_object_set_new(o, "vmhwm_kb", json_integer((json_int_t)r->hwm_kb));
			json_object_set_new(o, "rss_after_kb", json_integer((json_int_t)r->rss_after_kb));
			json_object_set_new(o, "server_cpu_s", json_real(r->server_cpu_s));
			json_object_set_new(o, "herd_cpu_s", json_real(r->herd_cpu_s));
		}
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(o);
		return;
	}
	printf("herd %s  connections=%zu (ready before the release: %zu)  clients=%zu  attempts=%lld "
	       "reconnect=%s\n",
	       a->target, r->connections, r->ready, r->clients, (long long)a->attempts, reconnect_names[a->reconnect]);
	printf("  released in %.1f ms; served %zu of %zu (lost %zu, bad certificates %zu) in %.2f s\n", r->release_ms,
	       r->served, r->clients, r->lost, r->bad, r->all_served_s);
	printf("  ceiling (closed loop, %lld x %lld): %.1f certs/s -> %zu clients need %.2f s at best (%.2fx)\n",
	       (long long)a->ceiling_connections, (long long)a->ceiling_depth, r->ceiling, r->clients, r->ideal_s,
	       r->ideal_s > 0 ? r->all_served_s / r->ideal_s : 0.0);
	printf("  time to served ms: p50 %.1f  p99 %.1f  max %.1f\n", r->served_p50_ms, r->served_p99_ms,
	       r->served_max_ms);
	printf("  requests %llu  retries %llu (inner %llu, outer %llu)  reconnects %llu  connections at most %zu\n",
	       (unsigned long long)r->requests, (unsigned long long)r->retries,
	       (unsigned long long)atomic_load(&h->c.inner_retries),
	       (unsigned long long)atomic_load(&h->c.outer_retries), (unsigned long long)atomic_load(&h->c.reconnects),
	       r->chans_peak);
	printf("  CPU from the release to the end: server %.2f s, herd %.2f s\n", r->server_cpu_s, r->herd_cpu_s);
	lg_token_use tu = lg_token_use_of(h->pool, h->one_token);
	lg_token_use_print(&tu);
	printf("  answers:");
	for (int k = 0; k <= MAX_CODE; k++) {
		uint64_t v = atomic_load(&h->c.by_code[k]);
		if (v)
			printf(" %s %llu", code_name(k), (unsigned long long)v);
	}
	printf("\n");
	if (r->measured_mem)
		printf("  server memory (MiB): start %.1f, %zu connections idle %.1f (%.1f KiB each), peak %.1f "
		       "(+%.1f over idle), VmHWM %.1f, after %.1f\n",
		       (double)r->rss_start_kb / 1024, r->ready, (double)r->rss_connected_kb / 1024,
		       r->ready ? (double)(r->rss_connected_kb - r->rss_start_kb) / (double)r->ready : 0.0,
		       (double)r->rss_peak_kb / 1024, ((double)r->rss_peak_kb - (double)r->rss_connected_kb) / 1024,
		       (double)r->hwm_kb / 1024, (double)r->rss_after_kb / 1024);
}

static int run_herd(hd *h, hd_mem *mem, hd_result *r)
{
	const hd_args *a = h->a;
	h->nchans = (size_t)a->connections;
	h->nclients = h->nchans * (size_t)a->calls_per_connection;
	h->chans = calloc(h->nchans, sizeof(*h->chans));
	h->clients = calloc(h->nclients, sizeof(*h->clients));
	h->heap = calloc(h->nclients, sizeof(*h->heap));
	SG_ENSURE(h->chans && h->clients && h->heap, SG_EINTERNAL, "out of memory for %zu clients", h->nclients);
	r->clients = h->nclients;
	r->connections = h->nchans;
	atomic_store(&h->chans_peak, atomic_load(&h->chans_live)); /* the herd's own */
	r->rss_start_kb = mem_rss(mem);
	SG_TRY(connect_all(h, &r->ready));
	struct timespec settle = {0, 500 * 1000 * 1000}; /* the server's reads of the last handshakes */
	nanosleep(&settle, NULL);
	r->rss_connected_kb = mem_rss(mem);
	atomic_store(&mem->peak_rss_kb, r->rss_connected_kb);

	for (size_t i = 0; i < h->nclients; i++) {
		hd_client *c = &h->clients[i];
		size_t ch = i / (size_t)a->calls_per_connection;
		*c = (hd_client){.h = h, .q = &h->qs[ch % h->nq], .chan = &h->chans[ch], .idx = i};
		c->rng = 0x9E3779B97F4A7C15ull * (i + 1);
		atomic_fetch_add(&h->chans[ch].refs, 1);
	}
	atomic_store(&h->active, h->nclients);
	SG_ENSURE(pthread_create(&h->timer, NULL, timer_thread, h) == 0, SG_EINTERNAL, "cannot start the timer");

	double cpu0 = mem->pid ? proc_cpu(mem->pid) : 0, self0 = (double)sg_process_cpu_ns() / 1e9;
	h->t_release = sg_now_ns();
	h->t_end = h->t_release + (uint64_t)a->duration * NS_PER_S;
	atomic_store(&h->t_last_ok, h->t_release);
	for (size_t i = 0; i < h->nclients; i++)
		attempt_start(&h->clients[i]);
	r->release_ms = (double)(sg_now_ns() - h->t_release) / 1e6;

	uint64_t limit = h->t_end + (uint64_t)(a->timeout + 10) * NS_PER_S;
	pthread_mutex_lock(&h->mu);
	while (atomic_load(&h->active) > 0 && sg_now_ns() < limit) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&h->done_cv, &h->mu, &ts);
	}
	h->stop = true;
	size_t waiting = h->nheap;
	double next_s = h->nheap ? ((double)h->heap[0]->due - (double)sg_now_ns()) / 1e9 : 0;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->timer, NULL);
	SG_ENSURE(atomic_load(&h->active) == 0, SG_ETIMEOUT,
	          "%zu clients unserved past every bound: %zu calls in flight, %zu retries waiting (the next due "
	          "in %.3f s)",
	          atomic_load(&h->active), atomic_load(&h->in_flight), waiting, next_s);

	r->server_cpu_s = mem->pid ? proc_cpu(mem->pid) - cpu0 : 0;
	r->herd_cpu_s = (double)sg_process_cpu_ns() / 1e9 - self0;
	r->served = atomic_load(&h->c.ok);
	r->bad = atomic_load(&h->c.bad_cert);
	r->lost = h->nclients - r->served;
	r->requests = atomic_load(&h->c.requests);
	r->retries = r->requests - h->nclients;
	r->all_served_s = (double)(atomic_load(&h->t_last_ok) - h->t_release) / 1e9;
	r->chans_made = atomic_load(&h->chans_made);
	r->chans_peak = atomic_load(&h->chans_peak);
	uint64_t *t = calloc(h->nclients, sizeof(*t));
	size_t n = 0;
	for (size_t i = 0; t && i < h->nclients; i++)
		if (h->clients[i].served_ns)
			t[n++] = h->clients[i].served_ns;
	if (t && n) {
		qsort(t, n, sizeof(*t), cmp_u64);
		r->served_p50_ms = (double)t[(n - 1) / 2] / 1e6;
		r->served_p99_ms = (double)t[(size_t)((double)(n - 1) * 0.99)] / 1e6;
		r->served_max_ms = (double)t[n - 1] / 1e6;
	}
	free(t);
	if (mem->pid) {
		uint64_t rss = 0, hwm = 0;
		proc_mem(mem->pid, &rss, &hwm);
		r->rss_peak_kb = atomic_load(&mem->peak_rss_kb);
		r->hwm_kb = hwm;
		r->rss_after_kb = rss;
		r->measured_mem = true;
	}
	return SG_OK;
}

/* ---- main --------------------------------------------------------------- */

static void teardown(hd *h)
{
	for (size_t q = 0; q < h->nq; q++) {
		sg_grpc_client_free(h->qs[q].client); /* waits for the calls in flight */
		sg_istio_arena_free(h->qs[q].arena);
	}
	for (size_t i = 0; i < h->nclients; i++)
		chan_drop(h, h->clients[i].chan);
	for (size_t i = 0; h->chans && i < h->nchans; i++)
		if (h->chans[i].ch) /* connections no client used */
			sg_grpc_channel_free(h->chans[i].ch);
	free(h->qs);
	free(h->chans);
	free(h->clients);
	free(h->heap);
}

static int run(const hd_args *a)
{
	SG_ENSURE(a->target, SG_EINVAL, "--target is required");
	SG_ENSURE(strncmp(a->identity, "spiffe://", 9) == 0, SG_EINVAL, "--identity must be a spiffe:// URI");
	lg_target t;
	SG_TRY(lg_parse_target(a->target, &t));
	SG_ENSURE(t.kind == LG_GRPC, SG_EINVAL, "--target must be grpc://");
	SG_ENSURE(!(a->token_file && a->token_dir), SG_EINVAL, "--token-file and --token-dir exclude each other");
	SG_ENSURE((!a->token_file && !a->token_dir) || a->ca_file, SG_EINVAL,
	          "--token-file and --token-dir need --ca-file: a bearer token is sent only over TLS");
	SG_ENSURE(!strchr(a->trust_domain, '/') && !strchr(a->trust_domain, ':'), SG_EINVAL,
	          "--trust-domain is a name, without scheme or path");
	size_t nclients = (size_t)a->connections * (size_t)a->calls_per_connection;
	SG_ENSURE(nclients <= 2000000, SG_EINVAL, "%zu clients (max 2000000)", nclients);
	/* Proxies from the environment would take requests off loopback. */
	const char *proxies[] = {"grpc_proxy",  "https_proxy", "http_proxy", "GRPC_PROXY",
	                         "HTTPS_PROXY", "HTTP_PROXY",  "all_proxy",  "ALL_PROXY"};
	for (size_t i = 0; i < N(proxies); i++)
		unsetenv(proxies[i]);

	hd *h = calloc(1, sizeof(*h));
	SG_ENSURE(h, SG_EINTERNAL, "out of memory");
	h->a = a;
	snprintf(h->addr, sizeof(h->addr), "%s:%u", t.host, t.port);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	pthread_cond_init(&h->done_cv, NULL);
	char *root = NULL;
	sg_secret *auth = NULL;
	int rc = a->ca_file ? lg_read_file(a->ca_file, 1 << 20, &root) : SG_OK;
	if (rc == SG_OK && a->token_file)
		rc = lg_bearer(a->token_file, &auth);
	if (rc == SG_OK && a->token_dir)
		rc = lg_tokens_load(&h->pool, a->token_dir, a->trust_domain);
	h->root = root;
	h->one_token = auth != NULL;
	if (auth)
		h->md[h->nmd++] = (sg_grpc_md){"authorization", sg_secret_cstr(auth)};
	else if (h->pool)
		h->md[h->nmd++] = (sg_grpc_md){"authorization", NULL}; /* set per call */
	if (a->cluster_id && a->cluster_id[0])
		h->md[h->nmd++] = (sg_grpc_md){"clusterid", a->cluster_id};

	size_t nceil = (size_t)a->ceiling_requests;
	h->nitems = nceil + nclients;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = a->csr_threads ? (unsigned)a->csr_threads : (unsigned)(cpus > 0 && cpus < 64 ? cpus : 1);
	uint64_t t0 = sg_now_ns();
	if (rc == SG_OK && h->pool) {
		/* CSR i names the identity of the token item i sends. */
		lg_idset ids;
		lg_tokens_idset(h->pool, &ids);
		if (!a->json)
			printf("herd: %zu tokens in %s, %zu identities from their claims; %zu ceiling requests + %zu "
			       "clients: %s\n",
			       lg_tokens_count(h->pool), a->token_dir, ids.n_names, nceil, nclients,
			       h->nitems > lg_tokens_count(h->pool) ? "the pool will wrap (tokens reused)"
			                                            : "no token sent twice but for retries");
		rc = lg_items_make_ids(&h->items, h->nitems, threads, LG_GRPC, &ids, 3600);
	} else if (rc == SG_OK) {
		rc = lg_items_make(&h->items, h->nitems, threads, LG_GRPC, a->identity, 3600);
	}
	if (rc == SG_OK && !a->json)
		printf("herd: %zu distinct P-256 CSRs made in %.1f s on %u threads\n", h->nitems,
		       (double)(sg_now_ns() - t0) / 1e9, threads);

	h->nq = (size_t)a->client_threads;
	h->qs = rc == SG_OK ? calloc(h->nq, sizeof(*h->qs)) : NULL;
	if (rc == SG_OK && !h->qs)
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	for (size_t q = 0; rc == SG_OK && q < h->nq; q++) {
		rc = sg_grpc_client_new(&h->qs[q].client);
		if (rc == SG_OK)
			rc = sg_istio_arena_new(&h->qs[q].arena);
	}
	hd_mem mem = {.pid = (long)a->server_pid};
	if (rc == SG_OK && mem.pid) {
		if (pthread_create(&mem.t, NULL, mem_thread, &mem) == 0)
			mem.running = true;
		else
			rc = sg_error_set(SG_EINTERNAL, "cannot start the memory sampler");
	}
	hd_result r = {0};
	if (rc == SG_OK && nceil)
		rc = run_ceiling(h, 0, nceil, &r.ceiling);
	if (rc == SG_OK) {
		r.ideal_s = r.ceiling > 0 ? (double)nclients / r.ceiling : 0;
		h->items += nceil; /* the herd's CSRs follow the ceiling's */
		h->item_off = nceil;
		rc = run_herd(h, &mem, &r);
		h->items -= nceil;
		h->item_off = 0;
	}
	if (mem.running) {
		atomic_store(&mem.stop, true);
		pthread_join(mem.t, NULL);
	}
	if (rc == SG_OK) {
		report(h, &r);
		uint64_t ceil_bad = atomic_load(&h->ceil_done) - atomic_load(&h->ceil_ok);
		if (r.served != r.clients || ceil_bad)
			rc = sg_error_set(SG_EPROTO, "%zu of %zu clients not served, %llu failures in the ceiling run",
			                  r.clients - r.served, r.clients, (unsigned long long)ceil_bad);
	}
	if (rc == SG_ETIMEOUT) {
		/* Calls are still in flight: freeing their state would be a use
		 * after free. Report and let exit() take the process down. The
		 * pool's identities check their answers: only its tokens go. */
		sg_secret_free(auth);
		lg_tokens_wipe(h->pool);
		return rc;
	}
	sg_error e;
	sg_error_save(&e);
	teardown(h);
	lg_items_free(h->items, h->nitems);
	free(root);
	sg_secret_free(auth);
	lg_tokens_free(h->pool);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	pthread_cond_destroy(&h->done_cv);
	free(h);
	sg_error_restore(&e);
	return rc;
}

int main(int argc, char **argv)
{
	hd_args a;
	memset(&a, 0, sizeof(a));
	int status;
	if (!sg_opt_program("herd",
	                    "usage: herd --target grpc://127.0.0.1:PORT --token-file T --ca-file ROOT [options]\n\n"
	                    "A mesh restart: N clients connect, call CreateCertificate at the same instant and\n"
	                    "retry as istio-agent does until each holds a verified certificate; prints the\n"
	                    "answers, retries, time to all served against the server's ceiling, and its memory.\n\n",
	                    opts, N(opts), &a, argc, argv, NULL, &status))
		return status;
	int rc = run(&a);
	fflush(stdout);
	if (rc < 0)
		fprintf(stderr, "herd: %s\n", sg_error_last()->msg);
	sg_opt_free(opts, N(opts), &a);
	return rc < 0 ? 1 : 0;
}
