/*
 * loadgen: the load generator behind perf/compare.sh. It drives signetd's
 * Istio CA API over gRPC (grpc core through grpc/sg_grpc.h) or cfssl's
 * /api/v1/cfssl/sign over HTTP/1.1 (libcurl multi + jansson) with the same
 * workload, and prints certificates per second and the latency
 * distribution.
 *
 *   loadgen --target grpc://127.0.0.1:PORT --token-file T --ca-file ROOT \
 *           --connections 4 --concurrency 16 --requests 20000 --duration 20s
 *   loadgen --target grpc://127.0.0.1:PORT --token-dir POOL --ca-file ROOT ...
 *   loadgen --target http://127.0.0.1:PORT --connections 4 --concurrency 16 ...
 *
 * Design notes.
 *
 * - Every request carries its own CSR. All warmup + requests CSRs (a new
 *   P-256 key each, istio-agent's shape: empty O=, one critical URI SAN,
 *   self-signed with ECDSA-SHA256; or with --csr-key rsa2048, istio-agent's
 *   default key, from a per-run set of RSA keys, each CSR distinct by its
 *   identity and key: lg_common.h) are made before the clock starts, so no
 *   server-side cache keyed by request content can short-cut the work and
 *   the client spends no CPU on keys while measuring (it shares the
 *   machine with the server). The request info is a template made once by
 *   OpenSSL with each key's point patched in (lg_common.c); the first
 *   CSR of every thread is checked with OpenSSL's X509_REQ_verify, and the
 *   servers verify every one of them.
 * - Workload: C connections x M outstanding calls each. Closed loop (the
 *   default) starts the next call from the completion of the previous one,
 *   so it measures the maximum throughput. Open loop (--rate R) starts call
 *   i at t0 + i/R, with at most the same C x M outstanding; its latency is
 *   measured from the scheduled start, not the actual one, so a server that
 *   falls behind cannot hide it by slowing the client down (coordinated
 *   omission); starts more than 1 ms behind schedule are counted.
 * - Both bounds always apply: at most --requests calls (after --warmup
 *   calls, which are not counted) and no call started after --duration.
 * - Every response is checked, cheaply (the client must not eat the CPU
 *   the server needs): status OK; the response decodes; signet's chain has
 *   at least two elements; the leaf is a PEM certificate (decoded with the
 *   signer's strict PEM reader) whose DER contains the CSR's
 *   SubjectPublicKeyInfo bytes, and for signet also the requested SPIFFE
 *   URI (cfssl 1.2 drops URI SANs, so not for cfssl, whose /sign answer
 *   is the leaf alone). A leaf for any other key fails the request. X.509
 *   is not parsed.
 * - HTTP/1.1 has no multiplexing, so for cfssl the C x M outstanding
 *   requests use C x M keep-alive connections; the number of requests in
 *   flight, which is what loads the server, is the same as for gRPC.
 * - Loopback only: the target host must be 127.0.0.0/8, ::1 or localhost
 *   (which is sent to 127.0.0.1 without asking a resolver), and proxies
 *   from the environment are ignored (gRPC's and libcurl's alike), so no
 *   request can leave the machine.
 * - loadgen reports its own CPU while it sends (cpu_s: user and system,
 *   warm-up included, the CSRs made before it not), because on one machine
 *   it shares the CPUs with the server: the benchmarks that compare two
 *   servers' rates on this host (perf/hsmlatency.sh) count it as part of
 *   what a certificate costs.
 * - Failures are counted by kind (gRPC status name, HTTP status, transport
 *   error, bad response) with the first message of each kind. The exit
 *   status is 0 only when every request succeeded and was checked.
 *
 * The bearer token comes from a file (never argv) readable only by its
 * owner, is held in an sg_secret and is sent only over TLS.
 *
 * Tokens as a mesh sends them (--token-dir): each pod presents its own
 * token, once per certificate lifetime, so one token reused for every
 * request measures the server's verification or review cache rather than
 * what a token costs. With a pool, request i (warm-up included) presents
 * token i mod pool size and its CSR names that token's identity, so no
 * token is sent twice until the pool is exhausted; the run counts each
 * token's uses and reports how many were distinct and how often the pool
 * wrapped (a wrapped pool is reused tokens again). Per request rather than
 * per connection or slot: a slot is a stream of requests, not a pod, and a
 * pod asks once, so a token per slot would be the reuse again.
 */
#include "lg_common.h"
#include "lg_pause.h"
#include "sg_clock.h"
#include "sg_error.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_istio.h"
#include "sg_opt.h"
#include "sg_secret.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- settings ----------------------------------------------------------- */

typedef struct lg_args {
	char *target;
	int64_t connections;
	int64_t concurrency;
	int64_t requests;
	int64_t duration;
	int64_t rate;
	int64_t warmup;
	int64_t timeout;
	int64_t ttl;
	int64_t csr_threads;
	char *csr_key;
	int64_t csr_keys;
	int64_t identities;
	int64_t client_threads;
	char *token_file;
	char *token_dir;
	char *trust_domain;
	char *ca_file;
	char *server_name;
	char *identity;
	char *cluster_id;
	char *latency_file;
	bool watch_pauses;
	int64_t watch_idle;
	bool json;
} lg_args;

#define ROW(name, type, field, def, min, max, help)                                                                    \
	{                                                                                                              \
		name, type, offsetof(lg_args, field), def, min, max, NULL, help, true                                  \
	}

static const sg_opt opts[] = {
    ROW("target", SG_OPT_STRING, target, NULL, 0, 256,
        "grpc://127.0.0.1:PORT (signetd) or http://127.0.0.1:PORT (cfssl serve)"),
    ROW("connections", SG_OPT_INT, connections, "4", 1, 256, "connections (gRPC channels); HTTP: see --concurrency"),
    ROW("concurrency", SG_OPT_INT, concurrency, "16", 1, 1024,
        "outstanding calls per connection (HTTP: C x M connections)"),
    ROW("requests", SG_OPT_INT, requests, "10000", 1, 2000000,
        "at most this many measured requests, each with its own CSR"),
    ROW("duration", SG_OPT_DURATION, duration, "30s", 1, 3600,
        "start no request after this long (warm-up bounded the same way)"),
    ROW("rate", SG_OPT_INT, rate, "0", 0, 1000000, "open loop: start this many requests per second (0: closed loop)"),
    ROW("warmup", SG_OPT_INT, warmup, "500", 0, 1000000, "requests before measuring (own CSRs, not counted)"),
    ROW("timeout", SG_OPT_DURATION, timeout, "10s", 1, 600, "deadline of each request"),
    ROW("ttl", SG_OPT_DURATION, ttl, "1h", 0, 86400, "gRPC: validity_duration asked for (0s: none)"),
    ROW("csr-threads", SG_OPT_INT, csr_threads, "0", 0, 64, "threads making the CSRs before the run (0: one per CPU)"),
    ROW("csr-key", SG_OPT_STRING, csr_key, "p256", 1, 16,
        "the CSRs' keys: p256 (a new P-256 key per CSR) or rsa2048 (istio-agent's default: RSA-2048 keys from a "
        "set of --csr-keys made for the run, the k-th CSR of an identity taking key k mod the set, so that each "
        "CSR is distinct by its identity and key; refused when an identity would get more CSRs than keys)"),
    ROW("csr-keys", SG_OPT_INT, csr_keys, "64", 1, 100000,
        "with --csr-key rsa2048: RSA keys made for the run (0.1-0.2 s each, on the CSR threads)"),
    ROW("identities", SG_OPT_INT, identities, "1", 1, 4096,
        "without --token-dir: CSR i names IDENTITY-k, k = i mod this (IDENTITY itself when 1), as a mesh's "
        "service accounts; with --csr-key rsa2048 spread the CSRs so that none gets more than --csr-keys"),
    ROW("client-threads", SG_OPT_INT, client_threads, "1", 1, 64,
        "gRPC: completion threads shared by the connections (the client shares the CPUs with the server)"),
    ROW("token-file", SG_OPT_PATH, token_file, NULL, 0, 0,
        "gRPC: file (mode 0600) holding ONE bearer token reused by every request (a server's verification "
        "or review cache answers all but the first; see --token-dir); never pass a token in argv"),
    ROW("token-dir", SG_OPT_PATH, token_dir, NULL, 0, 0,
        "gRPC: a pool, one token per file (each mode 0600, names not starting with '.', read in name order, "
        "at most 100000): request i sends token i mod the pool's size, as each pod of a mesh sends its own "
        "token once; each CSR names its token's identity, taken from the token's claims (--identity is "
        "then unused); the run prints the distinct tokens used and how often the pool wrapped. "
        "Make one with perf/tokenpool.py"),
    ROW("trust-domain", SG_OPT_STRING, trust_domain, "cluster.local", 1, 253,
        "with --token-dir: the trust domain of the identities, spiffe://DOMAIN/ns/NS/sa/SA"),
    ROW("ca-file", SG_OPT_PATH, ca_file, NULL, 0, 0,
        "gRPC: roots to verify the server with (TLS); without it, plaintext"),
    ROW("server-name", SG_OPT_STRING, server_name, "localhost", 0, 253, "gRPC: TLS name to verify"),
    ROW("identity", SG_OPT_STRING, identity, "spiffe://cluster.local/ns/default/sa/default", 0, 1024,
        "URI SAN of the CSRs (signet: must be the token's identity; not with --token-dir)"),
    ROW("cluster-id", SG_OPT_STRING, cluster_id, "Kubernetes", 0, 253, "gRPC: clusterid header (empty: none)"),
    ROW("latency-file", SG_OPT_PATH, latency_file, NULL, 0, 0,
        "write each measured request (completed at, latency; ms) to this file, to see when slow ones happen"),
    ROW("watch-pauses", SG_OPT_BOOL, watch_pauses, "false", 0, 0,
        "watch for pauses of the machine itself (a real-time thread per CPU, 1 ms sleeps) and report them"),
    ROW("watch-idle", SG_OPT_DURATION, watch_idle, "0s", 0, 3600,
        "only watch for the machine's pauses this long, sending nothing, and report them (no --target needed)"),
    ROW("json", SG_OPT_BOOL, json, "false", 0, 0, "print the result as one JSON line"),
};

#define N(t) (sizeof(t) / sizeof((t)[0]))
#define NS_PER_S 1000000000ull
#define LATE_NS 1000000ull /* an open-loop start this late is counted */
#define MAX_FAIL_KINDS 32
#define MAX_HTTP_BODY (1u << 20)

/* The target, the CSRs, the leaf check and the token: lg_common.h (shared
 * with herd). */

/* ---- results ------------------------------------------------------------ */

typedef struct fail_kind {
	char label[48];
	char first[160]; /* the first message of this kind */
	uint64_t count;
} fail_kind;

/* One phase (warm-up or measured) of a run: the requests [first, end), the
 * pacing, and what came back. Completions arrive on several threads (one
 * per gRPC connection): counters are atomics, the rare failure table and
 * the open-loop slot list are under mu. */
typedef struct lg_phase {
	size_t first, end;
	atomic_size_t next;       /* next request index to start */
	uint64_t t_start, t_stop; /* no start at or after t_stop */
	uint64_t rate;            /* open loop: starts per second; 0: closed loop */
	atomic_size_t n_ok;
	atomic_size_t n_done; /* completed calls, OK or not */
	atomic_size_t n_late;
	atomic_uint_fast64_t t_last; /* latest completion */
	uint64_t *lat;               /* latencies (ns) of OK requests, n_ok of them */
	uint64_t *lat_sent;          /* open loop: the same from the actual start */
	uint64_t *done_at;           /* when each of them completed */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t outstanding;
	fail_kind fails[MAX_FAIL_KINDS];
	size_t n_fail_kinds;
	uint64_t n_failed;
} lg_phase;

static void phase_fail(lg_phase *ph, const char *label, const char *msg)
{
	pthread_mutex_lock(&ph->mu);
	ph->n_failed++;
	size_t i = 0;
	while (i < ph->n_fail_kinds && strcmp(ph->fails[i].label, label) != 0)
		i++;
	if (i == ph->n_fail_kinds && i < MAX_FAIL_KINDS) {
		snprintf(ph->fails[i].label, sizeof(ph->fails[i].label), "%s", label);
		snprintf(ph->fails[i].first, sizeof(ph->fails[i].first), "%s", msg ? msg : "");
		for (char *c = ph->fails[i].first; *c; c++) /* one line per failure kind */
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = ' ';
		ph->n_fail_kinds++;
	}
	if (i < MAX_FAIL_KINDS)
		ph->fails[i].count++;
	pthread_mutex_unlock(&ph->mu);
}

static void phase_done(lg_phase *ph, uint64_t now)
{
	atomic_fetch_add(&ph->n_done, 1);
	uint64_t last = atomic_load(&ph->t_last);
	while (now > last && !atomic_compare_exchange_weak(&ph->t_last, &last, now))
		;
}

/* t0: when the request was due (open loop) or sent; sent: when it was. */
static void phase_ok(lg_phase *ph, uint64_t t0, uint64_t sent, uint64_t now)
{
	size_t k = atomic_fetch_add(&ph->n_ok, 1);
	ph->lat[k] = now - t0;
	ph->done_at[k] = now;
	if (ph->lat_sent)
		ph->lat_sent[k] = now - sent;
}

/* When open-loop request i is due (computed from i, so no error adds up). */
static uint64_t phase_due(const lg_phase *ph, size_t i)
{
	return ph->t_start + (uint64_t)(i - ph->first) * NS_PER_S / ph->rate;
}

/* ---- gRPC driver -------------------------------------------------------- */

typedef struct lg_grpc lg_grpc;

/* One gRPC connection: a channel (TCP connection) of its own, one of the
 * --client-threads clients (completion queue + thread; connections share
 * them round-robin, because on a small machine every client thread is taken
 * from the server under test) and a decode arena and scratch of its own
 * (used only on its client's thread). */
typedef struct lg_conn {
	lg_grpc *g;
	sg_grpc_client *client;
	sg_grpc_channel *channel;
	sg_istio_arena *arena;
	uint8_t der[16 * 1024];
} lg_conn;

/* One outstanding-call slot; a connection owns M of them. */
typedef struct lg_slot {
	lg_conn *conn;
	size_t idx;  /* request index */
	uint64_t t0; /* start (closed loop) or scheduled start (open loop) */
	uint64_t sent;
	struct lg_slot *next_free;
} lg_slot;

struct lg_grpc {
	const lg_args *a;
	lg_item *items;
	lg_phase *ph; /* the phase running */
	lg_conn *conns;
	size_t nconns;
	sg_grpc_client **clients;
	size_t nclients;
	lg_slot *slots;
	size_t nslots;
	lg_slot *free_slots; /* open loop, under ph->mu */
	sg_grpc_md md[2];    /* md[0] is the authorization, per request with a pool */
	size_t nmd;
	lg_tokens *pool; /* or NULL */
	uint64_t timeout_ns;
};

static void on_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg);

/* Starts the call for s->idx; on failure the call is counted as failed and
 * the slot is not in flight. */
static bool slot_start(lg_grpc *g, lg_slot *s)
{
	const lg_item *it = &g->items[s->idx];
	sg_grpc_md md[2];
	memcpy(md, g->md, sizeof(md));
	if (g->pool)
		md[0].value = lg_tokens_take(g->pool, s->idx); /* copied by the call */
	if (sg_grpc_call_start(s->conn->client, s->conn->channel, SG_ISTIO_METHOD, md, g->nmd, it->body, it->body_len,
	                       g->timeout_ns, on_reply, s) == SG_OK)
		return true;
	phase_fail(g->ph, "start failed", sg_error_last()->msg);
	phase_done(g->ph, sg_now_ns());
	return false;
}

/* The slot leaves flight: back to the free list (open loop) and one fewer
 * outstanding; the waiting thread is woken. */
static void slot_release(lg_grpc *g, lg_slot *s)
{
	lg_phase *ph = g->ph;
	pthread_mutex_lock(&ph->mu);
	s->next_free = g->free_slots;
	g->free_slots = s;
	ph->outstanding--;
	pthread_cond_broadcast(&ph->cv);
	pthread_mutex_unlock(&ph->mu);
}

static void check_grpc(lg_conn *c, lg_slot *s, int status, const char *msg, const uint8_t *resp, size_t len,
                       uint64_t now)
{
	lg_grpc *g = c->g;
	if (status != SG_GRPC_OK) {
		phase_fail(g->ph, sg_grpc_status_name(status), msg);
		return;
	}
	sg_istio_arena_reset(c->arena);
	sg_istio_chain chain;
	const char *bad = NULL;
	if (sg_istio_response_decode(c->arena, resp, len, &chain) < 0)
		bad = "bad response: undecodable";
	else if (chain.n < 2)
		bad = "bad response: chain shorter than 2";
	else
		bad = lg_check_leaf(chain.elems[0], chain.lens[0], &g->items[s->idx], g->items[s->idx].identity, c->der,
		                    sizeof(c->der));
	if (bad)
		phase_fail(g->ph, bad, bad);
	else
		phase_ok(g->ph, s->t0, s->sent, now);
}

/* Runs on the connection's client thread. Closed loop: the slot goes on
 * with the next request at once, from this thread. */
static void on_reply(int status, const char *msg, const uint8_t *resp, size_t len, void *arg)
{
	lg_slot *s = arg;
	lg_grpc *g = s->conn->g;
	lg_phase *ph = g->ph;
	uint64_t now = sg_now_ns();
	check_grpc(s->conn, s, status, msg, resp, len, now);
	phase_done(ph, now);
	while (!ph->rate && now < ph->t_stop) {
		size_t i = atomic_fetch_add(&ph->next, 1);
		if (i >= ph->end)
			break;
		s->idx = i;
		s->t0 = s->sent = sg_now_ns();
		if (slot_start(g, s))
			return;
	}
	slot_release(g, s);
}

static void sleep_until(uint64_t t)
{
	for (;;) {
		uint64_t now = sg_now_ns();
		if (now >= t)
			return;
		struct timespec d = {(time_t)((t - now) / NS_PER_S), (long)((t - now) % NS_PER_S)};
		nanosleep(&d, NULL);
	}
}

/* Waits until no call of the phase is in flight. Calls end by their
 * deadlines at the latest, so this is bounded; the bound is checked anyway
 * so that a broken transport cannot hang the benchmark. */
static int phase_wait(lg_phase *ph, uint64_t timeout_ns)
{
	uint64_t limit = ph->t_stop + timeout_ns + 10 * NS_PER_S;
	int rc = SG_OK;
	pthread_mutex_lock(&ph->mu);
	while (ph->outstanding > 0) {
		if (sg_now_ns() > limit) {
			rc = sg_error_set(SG_ETIMEOUT, "%zu calls still in flight past their deadlines",
			                  ph->outstanding);
			break;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&ph->cv, &ph->mu, &ts);
	}
	pthread_mutex_unlock(&ph->mu);
	return rc;
}

static int grpc_run_phase(lg_grpc *g, lg_phase *ph)
{
	g->ph = ph;
	g->free_slots = NULL;
	for (size_t k = g->nslots; k-- > 0;) {
		g->slots[k].next_free = g->free_slots;
		g->free_slots = &g->slots[k];
	}
	ph->outstanding = 0;
	ph->t_start = sg_now_ns();
	ph->t_stop = ph->t_start + (uint64_t)g->a->duration * NS_PER_S;
	atomic_store(&ph->t_last, ph->t_start);
	if (!ph->rate) {
		/* Closed loop: fill every slot; completions keep them busy. */
		for (size_t k = 0; k < g->nslots; k++) {
			size_t i = atomic_fetch_add(&ph->next, 1);
			if (i >= ph->end)
				break;
			lg_slot *s = &g->slots[k];
			s->idx = i;
			s->t0 = s->sent = sg_now_ns();
			pthread_mutex_lock(&ph->mu);
			ph->outstanding++;
			pthread_mutex_unlock(&ph->mu);
			if (!slot_start(g, s)) {
				pthread_mutex_lock(&ph->mu);
				ph->outstanding--;
				pthread_mutex_unlock(&ph->mu);
			}
		}
		return phase_wait(ph, g->timeout_ns);
	}
	/* Open loop: call i is due at t_start + i * interval; a free slot is
	 * waited for when all C x M are busy (and the start counted as late). */
	for (size_t i = ph->first; i < ph->end; i++) {
		uint64_t due = phase_due(ph, i);
		if (due >= ph->t_stop)
			break;
		sleep_until(due);
		pthread_mutex_lock(&ph->mu);
		while (!g->free_slots)
			pthread_cond_wait(&ph->cv, &ph->mu);
		lg_slot *s = g->free_slots;
		g->free_slots = s->next_free;
		ph->outstanding++;
		pthread_mutex_unlock(&ph->mu);
		s->idx = i;
		s->t0 = due;
		s->sent = sg_now_ns();
		if (s->sent - due > LATE_NS)
			atomic_fetch_add(&ph->n_late, 1);
		if (!slot_start(g, s))
			slot_release(g, s);
	}
	return phase_wait(ph, g->timeout_ns);
}

static void grpc_teardown(lg_grpc *g)
{
	for (size_t c = 0; c < g->nclients; c++)
		sg_grpc_client_free(g->clients[c]);
	for (size_t c = 0; c < g->nconns; c++) {
		sg_grpc_channel_free(g->conns[c].channel);
		sg_istio_arena_free(g->conns[c].arena);
	}
	free(g->clients);
	free(g->conns);
	free(g->slots);
}

/* What a gRPC run needs from files, read (and refused) before any CSR is
 * made. */
typedef struct lg_creds {
	char *root;      /* PEM roots, or NULL: plaintext */
	sg_secret *auth; /* "Bearer <token>", or NULL */
	lg_tokens *pool; /* --token-dir, or NULL */
} lg_creds;

static int creds_read(const lg_args *a, lg_kind kind, lg_creds *c)
{
	if (kind == LG_HTTP) {
		SG_ENSURE(!a->token_file && !a->token_dir && !a->ca_file, SG_EINVAL,
		          "--token-file, --token-dir and --ca-file are for gRPC targets (cfssl is driven over plain "
		          "HTTP)");
		return SG_OK;
	}
	SG_ENSURE(!(a->token_file && a->token_dir), SG_EINVAL, "--token-file and --token-dir exclude each other");
	SG_ENSURE((!a->token_file && !a->token_dir) || a->ca_file, SG_EINVAL,
	          "--token-file and --token-dir need --ca-file: a bearer token is sent only over TLS");
	if (a->ca_file)
		SG_TRY(lg_read_file(a->ca_file, 1 << 20, &c->root));
	if (a->token_file)
		SG_TRY(lg_bearer(a->token_file, &c->auth));
	if (a->token_dir)
		SG_TRY(lg_tokens_load(&c->pool, a->token_dir, a->trust_domain));
	return SG_OK;
}

static void creds_clear(lg_creds *c)
{
	free(c->root);
	sg_secret_free(c->auth);
	lg_tokens_free(c->pool);
	c->root = NULL;
	c->auth = NULL;
	c->pool = NULL;
}

static int grpc_run(const lg_args *a, const lg_target *t, const lg_creds *cr, lg_item *items, lg_phase *phases,
                    size_t nphases)
{
	const char *root = cr->root;
	const sg_secret *auth = cr->auth;
	char addr[96];
	snprintf(addr, sizeof(addr), "%s:%u", t->host, t->port);

	lg_grpc g = {.a = a, .items = items, .pool = cr->pool, .timeout_ns = (uint64_t)a->timeout * NS_PER_S};
	if (auth)
		g.md[g.nmd++] = (sg_grpc_md){"authorization", sg_secret_cstr(auth)};
	else if (g.pool)
		g.md[g.nmd++] = (sg_grpc_md){"authorization", NULL}; /* set per request */
	if (a->cluster_id && a->cluster_id[0])
		g.md[g.nmd++] = (sg_grpc_md){"clusterid", a->cluster_id};
	g.nconns = (size_t)a->connections;
	g.nslots = g.nconns * (size_t)a->concurrency;
	g.nclients = (size_t)a->client_threads < g.nconns ? (size_t)a->client_threads : g.nconns;
	g.conns = calloc(g.nconns, sizeof(*g.conns));
	g.clients = calloc(g.nclients, sizeof(*g.clients));
	g.slots = calloc(g.nslots, sizeof(*g.slots));
	int rc = g.conns && g.clients && g.slots ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory for connections");
	for (size_t c = 0; c < g.nclients && rc == SG_OK; c++)
		rc = sg_grpc_client_new(&g.clients[c]);
	for (size_t c = 0; c < g.nconns && rc == SG_OK; c++) {
		lg_conn *cn = &g.conns[c];
		cn->g = &g;
		/* own_connection: C channels must be C TCP connections, not one
		 * shared subchannel. */
		sg_grpc_channel_options co = {.target = addr,
		                              .root_pem = root,
		                              .server_name = root ? a->server_name : NULL,
		                              .own_connection = true};
		rc = sg_grpc_channel_new(&cn->channel, &co);
		cn->client = g.clients[c % g.nclients];
		if (rc == SG_OK)
			rc = sg_istio_arena_new(&cn->arena);
	}
	for (size_t k = 0; k < g.nslots && rc == SG_OK; k++)
		g.slots[k].conn = &g.conns[k / (size_t)a->concurrency];
	for (size_t p = 0; p < nphases && rc == SG_OK; p++)
		if (phases[p].end > phases[p].first)
			rc = grpc_run_phase(&g, &phases[p]);
	if (rc == SG_ETIMEOUT) {
		/* Calls are still in flight: freeing their state would be a use
		 * after free. Report and let exit() take the process down. */
		return rc;
	}
	sg_error e;
	sg_error_save(&e);
	grpc_teardown(&g);
	sg_error_restore(&e);
	return rc;
}

/* ---- HTTP driver (cfssl) ------------------------------------------------ */

typedef struct lg_http_slot {
	CURL *h;
	struct curl_slist *headers;
	char *buf;
	size_t len, cap;
	bool overflow;
	size_t idx;
	uint64_t t0, sent;
	bool busy;
} lg_http_slot;

typedef struct lg_http {
	const lg_args *a;
	lg_item *items;
	CURLM *m;
	lg_http_slot *slots;
	size_t nslots;
	char url[160];
	uint8_t der[16 * 1024];
} lg_http;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	lg_http_slot *s = arg;
	size_t n = size * nmemb;
	if (s->len + n > MAX_HTTP_BODY) {
		s->overflow = true;
		return 0; /* aborts the transfer */
	}
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < s->len + n + 1)
			cap *= 2;
		char *b = realloc(s->buf, cap);
		if (!b)
			return 0;
		s->buf = b;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, data, n);
	s->len += n;
	s->buf[s->len] = '\0';
	return n;
}

/* curl_easy_setopt, failing the function with the option's name. */
#define SETOPT(h, opt, val)                                                                                            \
	do {                                                                                                           \
		CURLcode e_ = curl_easy_setopt((h), opt, val);                                                         \
		SG_ENSURE(e_ == CURLE_OK, SG_EINTERNAL, "curl_easy_setopt(%s): %s", #opt, curl_easy_strerror(e_));     \
	} while (0)

static int http_slot_init(lg_http *h, lg_http_slot *s)
{
	s->h = curl_easy_init();
	SG_ENSURE(s->h, SG_EINTERNAL, "curl_easy_init failed");
	s->headers = curl_slist_append(NULL, "Content-Type: application/json");
	/* No "Expect: 100-continue" round trip before the body. */
	struct curl_slist *l = s->headers ? curl_slist_append(s->headers, "Expect:") : NULL;
	SG_ENSURE(l, SG_EINTERNAL, "out of memory for HTTP headers");
	s->headers = l;
	/* Proxy "" disables proxies even when the environment names one;
	 * only plain HTTP, no redirects: the request stays on loopback. */
	SETOPT(s->h, CURLOPT_URL, h->url);
	SETOPT(s->h, CURLOPT_PROXY, "");
	SETOPT(s->h, CURLOPT_NOPROXY, "*");
	SETOPT(s->h, CURLOPT_PROTOCOLS_STR, "http");
	SETOPT(s->h, CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(s->h, CURLOPT_HTTPHEADER, s->headers);
	SETOPT(s->h, CURLOPT_POST, 1L);
	SETOPT(s->h, CURLOPT_WRITEFUNCTION, on_body);
	SETOPT(s->h, CURLOPT_WRITEDATA, s);
	SETOPT(s->h, CURLOPT_PRIVATE, s);
	SETOPT(s->h, CURLOPT_TCP_NODELAY, 1L);
	SETOPT(s->h, CURLOPT_NOSIGNAL, 1L);
	SETOPT(s->h, CURLOPT_TIMEOUT_MS, (long)h->a->timeout * 1000L);
	return SG_OK;
}

static bool http_start(lg_http *h, lg_phase *ph, lg_http_slot *s, size_t idx, uint64_t t0)
{
	const lg_item *it = &h->items[idx];
	s->idx = idx;
	s->t0 = t0;
	s->sent = sg_now_ns();
	s->len = 0;
	s->overflow = false;
	CURLcode e = curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE, (long)it->body_len);
	if (!e)
		e = curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, (const char *)it->body);
	CURLMcode me = e ? CURLM_OK : curl_multi_add_handle(h->m, s->h);
	if (e || me) {
		phase_fail(ph, "start failed", e ? curl_easy_strerror(e) : curl_multi_strerror(me));
		phase_done(ph, sg_now_ns());
		return false;
	}
	s->busy = true;
	ph->outstanding++;
	return true;
}

/* cfssl answers {"success":true,"result":{"certificate":"<PEM>"},...}. */
static void check_http(lg_http *h, lg_phase *ph, lg_http_slot *s, CURLcode res, uint64_t now)
{
	char label[48];
	if (res != CURLE_OK) {
		snprintf(label, sizeof(label), "transport: %s",
		         s->overflow ? "response too large" : curl_easy_strerror(res));
		phase_fail(ph, label, curl_easy_strerror(res));
		return;
	}
	long code = 0;
	curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200) {
		snprintf(label, sizeof(label), "HTTP %ld", code);
		phase_fail(ph, label, s->len ? s->buf : "");
		return;
	}
	json_error_t err;
	json_t *root = json_loadb(s->buf ? s->buf : "", s->len, 0, &err);
	json_t *cert = json_object_get(json_object_get(root, "result"), "certificate");
	const char *bad = NULL;
	if (!root)
		bad = "bad response: not JSON";
	else if (!json_is_true(json_object_get(root, "success")))
		bad = "bad response: success is not true";
	else if (!json_is_string(cert))
		bad = "bad response: no result.certificate";
	else
		bad = lg_check_leaf(json_string_value(cert), json_string_length(cert), &h->items[s->idx], NULL, h->der,
		                 sizeof(h->der));
	json_decref(root);
	if (bad)
		phase_fail(ph, bad, s->len ? s->buf : bad);
	else
		phase_ok(ph, s->t0, s->sent, now);
}

/* One thread runs the multi handle: completions are read after each poll,
 * checked, and (closed loop) the handle goes on with the next request on
 * its kept-alive connection. Open loop starts due requests between polls;
 * curl_multi_poll's millisecond timeout bounds the pacing error. */
static int http_run_phase(lg_http *h, lg_phase *ph)
{
	ph->outstanding = 0;
	ph->t_start = sg_now_ns();
	ph->t_stop = ph->t_start + (uint64_t)h->a->duration * NS_PER_S;
	atomic_store(&ph->t_last, ph->t_start);
	size_t next = ph->first;
	uint64_t limit = ph->t_stop + (uint64_t)h->a->timeout * NS_PER_S + 10 * NS_PER_S;
	if (!ph->rate)
		for (size_t k = 0; k < h->nslots && next < ph->end; k++)
			http_start(h, ph, &h->slots[k], next++, sg_now_ns());
	for (;;) {
		uint64_t now = sg_now_ns();
		if (ph->rate) {
			for (size_t k = 0; k < h->nslots && next < ph->end; k++) {
				uint64_t due = phase_due(ph, next);
				if (due > now || due >= ph->t_stop)
					break;
				if (h->slots[k].busy)
					continue;
				if (now - due > LATE_NS)
					atomic_fetch_add(&ph->n_late, 1);
				http_start(h, ph, &h->slots[k], next++, due);
			}
		}
		bool more = next < ph->end && now < ph->t_stop;
		if (ph->outstanding == 0 && !more)
			break;
		SG_ENSURE(now < limit, SG_ETIMEOUT, "%zu HTTP requests still in flight past their deadlines",
		          ph->outstanding);
		int running = 0;
		CURLMcode me = curl_multi_perform(h->m, &running);
		SG_ENSURE(me == CURLM_OK, SG_EINTERNAL, "curl_multi_perform: %s", curl_multi_strerror(me));
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(h->m, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			char *priv = NULL;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
			lg_http_slot *s = (lg_http_slot *)priv;
			CURLcode res = msg->data.result;
			curl_multi_remove_handle(h->m, s->h);
			s->busy = false;
			ph->outstanding--;
			uint64_t t = sg_now_ns();
			check_http(h, ph, s, res, t);
			phase_done(ph, t);
			if (!ph->rate && next < ph->end && t < ph->t_stop)
				http_start(h, ph, s, next++, sg_now_ns());
		}
		int wait_ms = 100;
		if (ph->rate && next < ph->end) {
			uint64_t due = phase_due(ph, next);
			uint64_t n2 = sg_now_ns();
			wait_ms = due <= n2 ? 0 : (int)((due - n2 + 999999) / 1000000);
			if (wait_ms > 100)
				wait_ms = 100;
		}
		me = curl_multi_poll(h->m, NULL, 0, wait_ms, NULL);
		SG_ENSURE(me == CURLM_OK, SG_EINTERNAL, "curl_multi_poll: %s", curl_multi_strerror(me));
	}
	return SG_OK;
}

static int http_run(const lg_args *a, const lg_target *t, lg_item *items, lg_phase *phases, size_t nphases)
{
	SG_ENSURE(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK, SG_EINTERNAL, "curl_global_init failed");
	lg_http *h = calloc(1, sizeof(*h));
	SG_ENSURE(h, SG_EINTERNAL, "out of memory");
	h->a = a;
	h->items = items;
	snprintf(h->url, sizeof(h->url), "http://%s:%u/api/v1/cfssl/sign", t->host, t->port);
	h->nslots = (size_t)(a->connections * a->concurrency);
	h->slots = calloc(h->nslots, sizeof(*h->slots));
	h->m = curl_multi_init();
	int rc = h->slots && h->m ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory for the HTTP client");
	if (rc == SG_OK) {
		/* One connection per outstanding request (HTTP/1.1), all kept. */
		curl_multi_setopt(h->m, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
		curl_multi_setopt(h->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)h->nslots);
		curl_multi_setopt(h->m, CURLMOPT_MAXCONNECTS, (long)h->nslots);
	}
	for (size_t k = 0; k < h->nslots && rc == SG_OK; k++)
		rc = http_slot_init(h, &h->slots[k]);
	for (size_t p = 0; p < nphases && rc == SG_OK; p++)
		if (phases[p].end > phases[p].first)
			rc = http_run_phase(h, &phases[p]);
	sg_error e;
	sg_error_save(&e);
	for (size_t k = 0; h->slots && k < h->nslots; k++) {
		if (h->slots[k].busy)
			curl_multi_remove_handle(h->m, h->slots[k].h);
		curl_easy_cleanup(h->slots[k].h);
		curl_slist_free_all(h->slots[k].headers);
		free(h->slots[k].buf);
	}
	if (h->m)
		curl_multi_cleanup(h->m);
	free(h->slots);
	free(h);
	curl_global_cleanup();
	sg_error_restore(&e);
	return rc;
}

/* ---- report ------------------------------------------------------------- */

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

/* Nearest-rank percentile of a sorted array, in ms. */
static double pct_ms(const uint64_t *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t r = (size_t)(p * (double)n + 0.999999);
	if (r < 1)
		r = 1;
	if (r > n)
		r = n;
	return (double)v[r - 1] / 1e6;
}

typedef struct lg_dist {
	double p50, p99, p999, max;
} lg_dist;

static lg_dist dist_of(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (lg_dist){pct_ms(v, n, 0.50), pct_ms(v, n, 0.99), pct_ms(v, n, 0.999), n ? (double)v[n - 1] / 1e6 : 0};
}

static json_t *dist_json(lg_dist d)
{
	return json_pack("{s:f, s:f, s:f, s:f}", "p50_ms", d.p50, "p99_ms", d.p99, "p999_ms", d.p999, "max_ms", d.max);
}

/* One line per OK request of the measured phase, in completion order as the
 * client saw it: completed at (ms since the phase began), latency, and in
 * open loop the latency from the actual start. Written before report(),
 * which sorts the arrays. */
static int write_latencies(const char *path, const lg_phase *ph)
{
	FILE *f = fopen(path, "w");
	SG_ENSURE(f, SG_EINVAL, "--latency-file: cannot create %s", path);
	size_t ok = atomic_load(&ph->n_ok);
	fprintf(f, "# phase began at CLOCK_MONOTONIC %llu ns\n", (unsigned long long)ph->t_start);
	fprintf(f, "# done_ms latency_ms%s\n", ph->lat_sent ? " latency_from_sent_ms" : "");
	for (size_t k = 0; k < ok; k++) {
		fprintf(f, "%.3f %.3f", (double)(ph->done_at[k] - ph->t_start) / 1e6, (double)ph->lat[k] / 1e6);
		if (ph->lat_sent)
			fprintf(f, " %.3f", (double)ph->lat_sent[k] / 1e6);
		fputc('\n', f);
	}
	bool bad = ferror(f) != 0;
	bad |= fclose(f) != 0;
	SG_ENSURE(!bad, SG_EINVAL, "--latency-file: cannot write %s", path);
	return SG_OK;
}

/* What the pause watcher saw during the measured phase, and the latency of
 * the requests that no pause touched (computed before report() sorts the
 * latencies). A request is touched when a pause overlaps the time from
 * when it was due (or sent) to its completion; requests that merely queued
 * behind a pause count as untouched, so the split flatters nobody. */
typedef struct lg_pauses {
	bool watched, realtime;
	lg_pause_sum sum;
	uint64_t dropped;
	size_t clean_n;
	double clean_p99, clean_p999;
} lg_pauses;

static lg_pauses pauses_of(lg_pause_watch *w, const lg_phase *ph)
{
	lg_pauses r = {.watched = true, .realtime = lg_pause_realtime(w), .dropped = lg_pause_dropped(w)};
	size_t np;
	const lg_pause *p = lg_pause_list(w, &np);
	r.sum = lg_pause_summarize(p, np, ph->t_start, atomic_load(&ph->t_last)); /* the measured phase */
	size_t ok = atomic_load(&ph->n_ok);
	uint64_t *clean = malloc((ok ? ok : 1) * sizeof(*clean));
	if (!clean)
		return r;
	for (size_t k = 0; k < ok; k++) {
		uint64_t done = ph->done_at[k];
		if (!lg_pause_overlaps(p, np, done - ph->lat[k], done))
			clean[r.clean_n++] = ph->lat[k];
	}
	lg_dist d = dist_of(clean, r.clean_n);
	r.clean_p99 = d.p99;
	r.clean_p999 = d.p999;
	free(clean);
	return r;
}

static lg_token_use token_use_of(const lg_creds *cr)
{
	return lg_token_use_of(cr->pool, cr->auth != NULL);
}

/* Throughput is OK responses over the time from the phase's start to its
 * last completion. Open loop reports latency from the scheduled start (the
 * number that matters) and, beside it, from the actual start, so client
 * side delays show as the difference. */
static void report(const lg_args *a, const lg_target *t, lg_phase *ph, size_t warmup_ok, const lg_pauses *pz,
                   const lg_token_use *tu, double cpu_s)
{
	size_t ok = atomic_load(&ph->n_ok);
	lg_dist d = dist_of(ph->lat, ok);
	lg_dist ds = ph->lat_sent ? dist_of(ph->lat_sent, ok) : d;
	double secs = (double)(atomic_load(&ph->t_last) - ph->t_start) / 1e9;
	double rate = secs > 0 ? (double)ok / secs : 0;
	if (a->json) {
		json_t *fails = json_object();
		for (size_t i = 0; fails && i < ph->n_fail_kinds; i++)
			json_object_set_new(fails, ph->fails[i].label, json_integer((json_int_t)ph->fails[i].count));
		json_t *pj = pz->watched ? json_pack("{s:b, s:I, s:I, s:f, s:f, s:I, s:I, s:f, s:f}", "realtime",
		                                     pz->realtime, "count", (json_int_t)pz->sum.n, "over_5ms",
		                                     (json_int_t)pz->sum.n_over_5ms, "total_ms", pz->sum.total_ms,
		                                     "max_ms", pz->sum.max_ms, "dropped", (json_int_t)pz->dropped, "untouched",
		                                     (json_int_t)pz->clean_n, "untouched_p99_ms", pz->clean_p99,
		                                     "untouched_p999_ms", pz->clean_p999)
		                         : json_null();
		json_t *tj = lg_token_use_json(tu);
		json_t *o = json_pack(
		    "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
		    "s:o, s:o, s:o, s:o}",
		    "target", a->target, "kind", t->kind == LG_GRPC ? "grpc" : "http", "connections",
		    (json_int_t)a->connections, "concurrency", (json_int_t)a->concurrency, "rate", (json_int_t)a->rate,
		    "warmup_ok", (json_int_t)warmup_ok, "sent", (json_int_t)atomic_load(&ph->n_done), "ok",
		    (json_int_t)ok, "failed", (json_int_t)ph->n_failed, "late_starts",
		    (json_int_t)atomic_load(&ph->n_late), "elapsed_s", secs, "certs_per_s", rate, "p50_ms", d.p50,
		    "p99_ms", d.p99, "p999_ms", d.p999, "max_ms", d.max, "cpu_s", cpu_s, "from_actual_start",
		    dist_json(ds), "failures", fails ? fails : json_null(), "pauses", pj ? pj : json_null(), "tokens",
		    tj ? tj : json_null());
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(o);
		return;
	}
	printf("loadgen %s  connections=%lld concurrency=%lld %s", a->target, (long long)a->connections,
	       (long long)a->concurrency, a->rate ? "open loop" : "closed loop");
	if (a->rate)
		printf(" rate=%lld/s", (long long)a->rate);
	printf("  (warm-up: %zu ok, not counted)\n", warmup_ok);
	printf("  requests %zu  ok %zu  failed %llu  in %.2f s  ->  %.1f certs/s\n", atomic_load(&ph->n_done), ok,
	       (unsigned long long)ph->n_failed, secs, rate);
	printf("  latency ms%s  p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (n=%zu)\n",
	       a->rate ? " (from scheduled start)" : "", d.p50, d.p99, d.p999, d.max, ok);
	if (a->rate) {
		printf("  latency ms (from actual start)     p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", ds.p50,
		       ds.p99, ds.p999, ds.max);
		printf("  starts more than 1 ms behind schedule: %zu\n", atomic_load(&ph->n_late));
	}
	printf("  loadgen's own CPU: %.2f s, %.3f ms per request (warm-up included)\n", cpu_s,
	       ok + warmup_ok ? 1000 * cpu_s / (double)(ok + warmup_ok) : 0.0);
	lg_token_use_print(tu);
	if (pz->watched) {
		printf("  machine pauses (>= 2 ms, all CPUs merged%s): %zu, %zu of them >= 5 ms, %.1f ms in all, "
		       "longest %.1f ms%s\n",
		       pz->realtime ? "" : "; NO real-time priority, so guest scheduling counts too", pz->sum.n,
		       pz->sum.n_over_5ms, pz->sum.total_ms, pz->sum.max_ms, pz->dropped ? " (list overflowed)" : "");
		printf("  latency ms of the %zu requests (%.1f%%) no pause touched: p99 %.3f  p99.9 %.3f\n", pz->clean_n,
		       ok ? 100.0 * (double)pz->clean_n / (double)ok : 0.0, pz->clean_p99, pz->clean_p999);
	}
	for (size_t i = 0; i < ph->n_fail_kinds; i++)
		printf("  failed %-40s %llu  (first: %.120s)\n", ph->fails[i].label,
		       (unsigned long long)ph->fails[i].count, ph->fails[i].first);
}

/* ---- main --------------------------------------------------------------- */

static int phase_init(lg_phase *ph, size_t first, size_t n, int64_t rate)
{
	memset(ph, 0, sizeof(*ph));
	ph->first = first;
	ph->end = first + n;
	atomic_store(&ph->next, first);
	ph->rate = (uint64_t)rate;
	ph->lat = calloc(n ? n : 1, sizeof(*ph->lat));
	ph->done_at = calloc(n ? n : 1, sizeof(*ph->done_at));
	if (rate)
		ph->lat_sent = calloc(n ? n : 1, sizeof(*ph->lat_sent));
	SG_ENSURE(ph->lat && ph->done_at && (!rate || ph->lat_sent), SG_EINTERNAL, "out of memory for %zu latencies", n);
	SG_ENSURE(pthread_mutex_init(&ph->mu, NULL) == 0 && pthread_cond_init(&ph->cv, NULL) == 0, SG_EINTERNAL,
	          "cannot create a lock");
	return SG_OK;
}

/* --watch-idle: the machine's pauses with no load at all, the baseline for
 * those seen under load. */
static int watch_idle(const lg_args *a)
{
	lg_pause_watch *w;
	SG_TRY(lg_pause_start(&w, LG_PAUSE_TICK_NS, LG_PAUSE_MIN_NS));
	uint64_t t0 = sg_now_ns();
	struct timespec d = {(time_t)a->watch_idle, 0};
	while (nanosleep(&d, &d) != 0 && errno == EINTR)
		;
	lg_pause_stop(w);
	uint64_t t1 = sg_now_ns();
	double secs = (double)(t1 - t0) / 1e9;
	size_t np;
	const lg_pause *p = lg_pause_list(w, &np);
	lg_pause_sum sum = lg_pause_summarize(p, np, t0, t1);
	bool rt = lg_pause_realtime(w);
	lg_pause_free(w);
	if (a->json) {
		json_t *o = json_pack("{s:f, s:b, s:I, s:I, s:f, s:f}", "idle_s", secs, "realtime", rt, "count",
		                      (json_int_t)sum.n, "over_5ms", (json_int_t)sum.n_over_5ms, "total_ms",
		                      sum.total_ms, "max_ms", sum.max_ms);
		char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
		json_decref(o);
		SG_ENSURE(text, SG_EINTERNAL, "out of memory for the report");
		printf("%s\n", text);
		free(text);
	} else {
		printf("machine pauses while idle for %.1f s (>= 2 ms, all CPUs merged%s): %zu, %zu of them >= 5 ms, "
		       "%.1f ms in all (%.2f%% of the time), longest %.1f ms\n",
		       secs, rt ? "" : "; NO real-time priority", sum.n, sum.n_over_5ms, sum.total_ms,
		       secs > 0 ? sum.total_ms / (secs * 10.0) : 0.0, sum.max_ms);
	}
	return SG_OK;
}

static int run(lg_args *a)
{
	if (a->watch_idle)
		return watch_idle(a);
	SG_ENSURE(a->target, SG_EINVAL, "--target is required");
	SG_ENSURE(strncmp(a->identity, "spiffe://", 9) == 0, SG_EINVAL, "--identity must be a spiffe:// URI");
	SG_ENSURE(!strchr(a->trust_domain, '/') && !strchr(a->trust_domain, ':'), SG_EINVAL,
	          "--trust-domain is a name, without scheme or path");
	lg_target t;
	SG_TRY(lg_parse_target(a->target, &t));
	SG_ENSURE(a->connections * a->concurrency <= 4096, SG_EINVAL,
	          "--connections x --concurrency is %lld (max 4096)", (long long)(a->connections * a->concurrency));
	/* Proxies from the environment would take requests off loopback. */
	const char *proxies[] = {"grpc_proxy",  "https_proxy", "http_proxy", "GRPC_PROXY",
	                         "HTTPS_PROXY", "HTTP_PROXY",  "all_proxy",  "ALL_PROXY"};
	for (size_t i = 0; i < N(proxies); i++)
		unsetenv(proxies[i]);

	lg_creds cr = {0};
	int rc = creds_read(a, t.kind, &cr);
	if (rc < 0) {
		creds_clear(&cr);
		return rc;
	}
	size_t warm = (size_t)a->warmup, n = (size_t)a->requests;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = a->csr_threads ? (unsigned)a->csr_threads : (unsigned)(cpus > 0 && cpus < 64 ? cpus : 1);
	lg_item *items = NULL;
	uint64_t t0 = sg_now_ns();
	lg_csr_opts co = {LG_CSR_P256, (size_t)a->csr_keys};
	if (strcmp(a->csr_key, "rsa2048") == 0)
		co.key = LG_CSR_RSA2048;
	else if (strcmp(a->csr_key, "p256") != 0)
		rc = sg_error_set(SG_EINVAL, "--csr-key: p256 or rsa2048, not \"%s\"", a->csr_key);
	/* --identities N: the names IDENTITY-0 .. IDENTITY-(N-1), CSR i the
	 * (i mod N)-th. */
	char **names = NULL;
	uint32_t *of = NULL;
	if (rc == SG_OK && cr.pool && a->identities > 1)
		rc = sg_error_set(SG_EINVAL, "--identities is for runs without --token-dir (each token's claims name "
		                             "its CSR's identity)");
	if (rc == SG_OK && !cr.pool && a->identities > 1) {
		size_t ni = (size_t)a->identities;
		names = calloc(ni, sizeof(*names));
		of = calloc(ni, sizeof(*of));
		if (!names || !of)
			rc = sg_error_set(SG_EINTERNAL, "out of memory for %zu identities", ni);
		for (size_t k = 0; rc == SG_OK && k < ni; k++) {
			of[k] = (uint32_t)k;
			size_t len = strlen(a->identity) + 24;
			names[k] = malloc(len);
			if (!names[k])
				rc = sg_error_set(SG_EINTERNAL, "out of memory for identity %zu", k);
			else
				snprintf(names[k], len, "%s-%zu", a->identity, k);
		}
	}
	if (rc < 0) {
		/* nothing made yet */
	} else if (cr.pool) {
		/* CSR i names the identity of the token request i sends. */
		lg_idset ids;
		lg_tokens_idset(cr.pool, &ids);
		if (!a->json)
			printf("loadgen: %zu tokens in %s, %zu identities from their claims; %zu requests: %s\n",
			       lg_tokens_count(cr.pool), a->token_dir, ids.n_names, warm + n,
			       warm + n > lg_tokens_count(cr.pool) ? "the pool will wrap (tokens reused)"
			                                           : "no token sent twice");
		rc = lg_items_make_opts(&items, warm + n, threads, t.kind, &ids, a->ttl, &co);
	} else if (names) {
		lg_idset ids = {(const char *const *)names, (size_t)a->identities, of, (size_t)a->identities};
		rc = lg_items_make_opts(&items, warm + n, threads, t.kind, &ids, a->ttl, &co);
	} else {
		const char *one[] = {a->identity};
		lg_idset ids = {one, 1, NULL, 0};
		rc = lg_items_make_opts(&items, warm + n, threads, t.kind, &ids, a->ttl, &co);
	}
	if (rc == SG_OK && !a->json) {
		if (co.key == LG_CSR_RSA2048)
			printf("loadgen: %zu distinct RSA-2048 CSRs (%lld keys) made in %.1f s on %u threads\n",
			       warm + n, (long long)a->csr_keys, (double)(sg_now_ns() - t0) / 1e9, threads);
		else
			printf("loadgen: %zu distinct P-256 CSRs made in %.1f s on %u threads\n", warm + n,
			       (double)(sg_now_ns() - t0) / 1e9, threads);
	}
	lg_phase phases[2];
	memset(phases, 0, sizeof(phases));
	if (rc == SG_OK)
		rc = phase_init(&phases[0], 0, warm, 0); /* warm-up: closed loop */
	if (rc == SG_OK)
		rc = phase_init(&phases[1], warm, n, a->rate);
	lg_pause_watch *pw = NULL;
	if (rc == SG_OK && a->watch_pauses)
		rc = lg_pause_start(&pw, LG_PAUSE_TICK_NS, LG_PAUSE_MIN_NS);
	/* loadgen's own CPU while it sends (CSRs made before it): on a host
	 * it shares with the server it is part of what bounds the rate. */
	uint64_t cpu0 = sg_process_cpu_ns();
	if (rc == SG_OK)
		rc = t.kind == LG_GRPC ? grpc_run(a, &t, &cr, items, phases, 2) : http_run(a, &t, items, phases, 2);
	double cpu_s = (double)(sg_process_cpu_ns() - cpu0) / 1e9;
	lg_pauses pz = {0};
	if (pw) {
		lg_pause_stop(pw);
		if (rc == SG_OK)
			pz = pauses_of(pw, &phases[1]);
		lg_pause_free(pw);
	}
	lg_token_use tu = token_use_of(&cr);
	if (rc == SG_ETIMEOUT) {
		/* Calls in flight copied their metadata, so the tokens can go,
		 * but their answers are checked against identities the pool
		 * holds: it stays (as items and phases do) until exit. */
		lg_tokens_wipe(cr.pool);
		cr.pool = NULL;
	}
	creds_clear(&cr);
	if (rc == SG_OK && a->latency_file)
		rc = write_latencies(a->latency_file, &phases[1]);
	if (rc == SG_OK) {
		report(a, &t, &phases[1], atomic_load(&phases[0].n_ok), &pz, &tu, cpu_s);
		if (phases[0].n_failed || phases[1].n_failed || atomic_load(&phases[1].n_ok) == 0)
			rc = sg_error_set(SG_EPROTO, "%llu of %zu requests failed (warm-up included)",
			                  (unsigned long long)(phases[0].n_failed + phases[1].n_failed),
			                  atomic_load(&phases[0].n_done) + atomic_load(&phases[1].n_done));
	}
	if (rc == SG_ETIMEOUT)
		return rc; /* calls in flight still point into items and phases */
	for (size_t p = 0; p < 2; p++) {
		free(phases[p].lat);
		free(phases[p].lat_sent);
		free(phases[p].done_at);
	}
	lg_items_free(items, warm + n);
	for (size_t k = 0; names && k < (size_t)a->identities; k++)
		free(names[k]);
	free(names);
	free(of);
	return rc;
}

int main(int argc, char **argv)
{
	lg_args a;
	memset(&a, 0, sizeof(a));
	int status;
	if (!sg_opt_program("loadgen",
	                    "usage: loadgen --target grpc://127.0.0.1:PORT|http://127.0.0.1:PORT [options]\n\n"
	                    "Drives signetd (gRPC) or cfssl serve (HTTP) with distinct CSRs and prints\n"
	                    "certificates/s and latency percentiles. Tokens: --token-file sends one token\n"
	                    "with every request; --token-dir sends each request its own, as a mesh does.\n\n",
	                    opts, N(opts), &a, argc, argv, NULL, &status))
		return status;
	int rc = run(&a);
	fflush(stdout);
	if (rc < 0)
		fprintf(stderr, "loadgen: %s\n", sg_error_last()->msg);
	sg_opt_free(opts, N(opts), &a);
	return rc < 0 ? 1 : 0;
}
