/*
 * The Istio certificate service (contract: sg_service.h).
 *
 * A call is an `rpc` that moves from thread to thread by callback: the
 * transport thread decodes it and starts authentication; the
 * authenticator's callback (on its thread, or at once when cached) applies
 * the grant and submits to the pool; the pool's callback on a signer
 * thread encodes the answer, writes the audit line and finishes the call.
 * Whoever finishes frees. No thread waits for another on a call's behalf.
 *
 * Errors: the status a client sees comes from sg_grpc_status_of (the one
 * table); istiod's csr_sign_err_count labels are mapped here.
 *
 * The chain after the leaf is a reference-counted snapshot: set_root swaps
 * it whole under a mutex, and a signer thread holds its reference only
 * while it encodes, so a root reload never blocks the hot path for longer
 * than a pointer swap.
 */
#include "sg_service.h"

#include "sg_crypto.h"
#include "sg_forward.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_istio.h"
#include "sg_log.h"
#include "sg_x509.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_CHAIN SG_SERVICE_CHAIN_MAX

enum { ERR_CA_NOT_READY, ERR_CSR, ERR_TTL, ERR_CERT_GEN, ERR_LINT, ERR_UNKNOWN, ERR_COUNT };
/* istiod's labels, and "lint": a certificate our own checks refused to
 * sign (a bug in the grant or the encoder, reported on its own). */
static const char *const sign_err_names[ERR_COUNT] = {"CA_NOT_READY", "CSR_ERROR", "TTL_ERROR", "CERT_GEN_ERROR",
                                                       "lint", "UNKNOWN"};

/* The elements a response carries after the leaf: the CA's chain, with the
 * root bundle replaced by set_root. */
typedef struct chain_snap {
	atomic_uint refs;
	const char *elems[MAX_CHAIN];
	size_t lens[MAX_CHAIN];
	size_t n;
	char *root; /* the replacement bundle (owned), or NULL */
	size_t root_len;
} chain_snap;

struct sg_service {
	sg_pool *pool;
	sg_forward *forward; /* RA mode: CSRs go to a cert-manager issuer instead */
	pthread_key_t crypto_key; /* RA mode: each thread's context for CSR checks */
	const sg_ca *ca;
	const sg_authenticator *auth;
	sg_grant *grant;
	atomic_bool stopping;
	pthread_mutex_t chain_lock;
	chain_snap *chain;
	struct {
		sg_series *csr, *authn_fail, *parse_err, *success;
		sg_series *sign_err[ERR_COUNT];
		sg_series *latency_ok, *latency_err;
		sg_series *requests[17]; /* signet_grpc_requests_total by status code */
		sg_series *gone;         /* signet_requests_abandoned_total */
		atomic_uint_fast64_t finish_warn_ns; /* rate limit of "cannot finish a call" */
	} m;
};

/* ---- errors ------------------------------------------------------------- */

/* The status a client sees comes from sg_grpc_status_of (the one table);
 * this one only says which of istiod's csr_sign_err_count labels a signing
 * failure counts under. */
static const struct {
	int code;
	int sign_err;
} sign_err_map[] = {
	{SG_EINVAL, ERR_CSR},          {SG_EAUTH, ERR_CSR},          {SG_EDENIED, ERR_CSR},
	{SG_EBUSY, ERR_CA_NOT_READY},  {SG_EHSM, ERR_CA_NOT_READY},  {SG_ETIMEOUT, ERR_CA_NOT_READY},
	{SG_EINTERNAL, ERR_CERT_GEN},  {SG_ELINT, ERR_LINT},
};

static int sign_err_of(int code)
{
	for (size_t i = 0; i < sizeof(sign_err_map) / sizeof(sign_err_map[0]); i++)
		if (sign_err_map[i].code == code)
			return sign_err_map[i].sign_err;
	return ERR_UNKNOWN;
}

/* ---- one call ------------------------------------------------------------ */

typedef struct rpc {
	sg_service *d;
	sg_grpc_call *call;
	uint64_t t0;
	uint64_t deadline_ns;
	sg_istio_arena *arena;
	sg_istio_request req;
	char cluster_id[256];
	bool has_cluster_id;
	char peer[128];
	sg_grant_decision decision;
	char caller_method[16];
	sg_issue_request issue;
} rpc;

static void rpc_free(rpc *r)
{
	sg_istio_arena_free(r->arena);
	free(r);
}

/* Answers the call; true when the answer was handed to gRPC, false when
 * the client had gone (cancelled, reset, deadline or shutdown): counted,
 * not logged, since a client can make that happen at will. A real failure
 * to answer is logged, at most once a second. Does not free r. */
static bool answer_call(rpc *r, int status, const char *msg, const uint8_t *resp, size_t len)
{
	sg_service *d = r->d;
	double secs = (double)(sg_now_ns() - r->t0) / 1e9;
	sg_series_observe(status == SG_GRPC_OK ? d->m.latency_ok : d->m.latency_err, secs);
	if (status >= 0 && status < 17 && d->m.requests[status])
		sg_series_inc(d->m.requests[status]);
	int rc = sg_grpc_call_finish(r->call, status, msg, resp, len);
	if (rc == SG_ETIMEOUT) {
		sg_series_inc(d->m.gone);
	} else if (rc < 0) {
		uint64_t now = sg_now_ns(), last = atomic_load(&d->m.finish_warn_ns);
		if (now - last >= 1000000000u && atomic_compare_exchange_strong(&d->m.finish_warn_ns, &last, now))
			sg_log_error_last(SG_LOG_WARN, "cannot finish a call");
	}
	return rc == SG_OK;
}

static void finish(rpc *r, int status, const char *msg, const uint8_t *resp, size_t len)
{
	answer_call(r, status, msg, resp, len);
	rpc_free(r);
}

/* Ends a call with the error recorded in e; the message names the problem
 * (never a token or a PIN: no error detail in signet carries them). A call
 * whose client has gone is ended without a log line. */
static void fail(rpc *r, int code, const sg_error *e, const char *prefix)
{
	char msg[SG_ERROR_MSG_MAX + 64];
	snprintf(msg, sizeof(msg), "%s: %s", prefix, e->msg);
	int status = sg_grpc_status_of(code);
	if (!sg_grpc_call_ended(r->call))
		sg_log(SG_LOG_INFO, "request refused", SG_F_STR("peer", r->peer), SG_F_STR("reason", e->msg),
		       SG_F_STR("error", sg_error_name(code)), SG_F_INT("grpc_status", status), SG_F_END);
	finish(r, status, msg, NULL, 0);
}

/* Nobody will receive this call's answer: stop before spending on it. */
static bool abandoned(rpc *r)
{
	if (!sg_grpc_call_ended(r->call))
		return false;
	finish(r, SG_GRPC_CANCELLED, "the call ended before it was answered", NULL, 0);
	return true;
}

static bool rpc_cancelled(void *arg)
{
	return sg_grpc_call_ended(((rpc *)arg)->call);
}

/* ---- the chain returned after the leaf ------------------------------------- */

static chain_snap *chain_get(sg_service *d)
{
	pthread_mutex_lock(&d->chain_lock);
	chain_snap *c = d->chain;
	atomic_fetch_add(&c->refs, 1);
	pthread_mutex_unlock(&d->chain_lock);
	return c;
}

static void chain_put(chain_snap *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
		free(c->root);
		free(c);
	}
}

/* Encodes the answer (elements leaf first, the root bundle last) and
 * counts the success; when it cannot be encoded the call fails here and
 * false is returned. *out is the caller's to free. */
static bool encode_answer(rpc *r, const char *const *elems, const size_t *lens, size_t n, uint8_t **out,
                          size_t *out_len)
{
	sg_service *d = r->d;
	int erc = n ? sg_istio_response_encode(elems, lens, n, out, out_len)
	            : sg_error_set(SG_EINTERNAL, "the answer holds no certificate");
	if (erc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[ERR_CERT_GEN]);
		fail(r, SG_EINTERNAL, &e, "cannot encode the response");
		return false;
	}
	sg_series_inc(d->m.success);
	return true;
}

static void on_issued(int rc, sg_issue_result *res, const sg_error *err, void *arg)
{
	rpc *r = arg;
	sg_service *d = r->d;
	if (rc < 0) {
		sg_series_inc(d->m.sign_err[sign_err_of(rc)]);
		if (rc == SG_EINVAL || rc == SG_EAUTH)
			sg_series_inc(d->m.parse_err);
		fail(r, rc, err, rc == SG_EDENIED ? "request authenticate failure" : "CSR signing error");
		return;
	}
	/* Istio's response: leaf, each intermediate, the root bundle last. */
	const char *elems[MAX_CHAIN + 1];
	size_t lens[MAX_CHAIN + 1], n = 0;
	elems[n] = res->leaf_pem;
	lens[n++] = res->leaf_pem_len;
	chain_snap *cs = chain_get(d);
	/* The intermediates of the CA that signed this leaf (a rotation may
	 * have moved the service's chain since), then the bundle handed out
	 * now. */
	if (res->chain_len > 0 && res->chain_len <= MAX_CHAIN) {
		for (size_t i = 0; i + 1 < res->chain_len; i++) {
			elems[n] = res->chain[i];
			lens[n++] = res->chain_lens[i];
		}
		elems[n] = cs->elems[cs->n - 1];
		lens[n++] = cs->lens[cs->n - 1];
	} else {
		for (size_t i = 0; i < cs->n; i++) {
			elems[n] = cs->elems[i];
			lens[n++] = cs->lens[i];
		}
	}
	uint8_t *out = NULL;
	size_t out_len = 0;
	bool ok = encode_answer(r, elems, lens, n, &out, &out_len);
	chain_put(cs);
	if (!ok)
		return;
	uint64_t us = (sg_now_ns() - r->t0) / 1000;
	/* The audit line, written before the answer leaves: what was issued to
	 * whom, never how they proved it. Every signature has one; a client
	 * that went away after the signature shows as abandoned=1. */
	sg_log(SG_LOG_INFO, "certificate issued", SG_F_STR("serial", res->serial_hex),
	       SG_F_STR("identity", res->identity), SG_F_STR("san", res->identity), SG_F_INT("not_after", res->not_after),
	       SG_F_STR("key", sg_key_type_name(res->ca_key)), SG_F_STR("auth", r->caller_method),
	       SG_F_INT("impersonated", r->decision.impersonated), SG_F_STR("peer", r->peer),
	       SG_F_INT("latency_us", us), SG_F_INT("abandoned", sg_grpc_call_ended(r->call)), SG_F_END);
	finish(r, SG_GRPC_OK, NULL, out, out_len);
	free(out);
}

static void forward(rpc *r); /* RA mode, below */

static void on_authenticated(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	rpc *r = arg;
	sg_service *d = r->d;
	if (rc < 0) {
		sg_series_inc(d->m.authn_fail);
		fail(r, rc, err, "request authenticate failure");
		return;
	}
	if (abandoned(r))
		return;
	snprintf(r->caller_method, sizeof(r->caller_method), "%s", caller->method ? caller->method : "");
	sg_grant_input in = {
	    .caller = caller,
	    .cluster_id = r->has_cluster_id ? r->cluster_id : NULL,
	    .requested_ttl = r->req.validity_seconds,
	    .impersonated_identity = r->req.impersonated_identity,
	};
	int prc = sg_grant_decide(d->grant, &in, &r->decision);
	if (prc < 0) {
		sg_error e;
		sg_error_save(&e);
		if (prc == SG_EINVAL)
			sg_series_inc(d->m.sign_err[ERR_TTL]);
		else
			sg_series_inc(d->m.authn_fail);
		fail(r, prc, &e, prc == SG_EINVAL ? "CSR signing error" : "request authenticate failure");
		return;
	}
	r->issue = (sg_issue_request){
		.csr = (const uint8_t *)r->req.csr,
		.csr_len = r->req.csr_len,
		.profile = SG_PROFILE_ISTIO,
		.identity = r->decision.identity,
		.strict_csr = r->decision.strict_csr,
		.ttl = r->decision.ttl,
		.path_len = -1,
		.deadline_ns = r->deadline_ns,
		.cancelled = rpc_cancelled,
		.cancel_arg = r,
	};
	if (d->forward) {
		forward(r);
		return;
	}
	int src = sg_pool_submit(d->pool, &r->issue, on_issued, r);
	if (src < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[ERR_CA_NOT_READY]);
		fail(r, src, &e, "CSR signing error");
	}
}

/* ---- RA mode ---------------------------------------------------------------- */

/* The certificates of a PEM text, one element each (Istio's cert_chain
 * holds one certificate per element). Returns how many the text holds,
 * which may be more than max: only the first max are stored, and the
 * caller refuses such a chain rather than cut it. */
static size_t pem_split(const char *pem, size_t len, const char **elems, size_t *lens, size_t max)
{
	static const char end[] = "-----END CERTIFICATE-----";
	size_t n = 0;
	const char *p = pem, *stop = pem + len;
	while (p < stop) {
		const char *b = strstr(p, "-----BEGIN CERTIFICATE-----");
		const char *e = b ? strstr(b, end) : NULL;
		if (!e || e >= stop)
			break;
		e += sizeof(end) - 1;
		if (e < stop && *e == '\n')
			e++;
		if (n < max) {
			elems[n] = b;
			lens[n] = (size_t)(e - b);
		}
		n++;
		p = e;
	}
	return n;
}

static void on_forwarded(int rc, const char *chain_pem, size_t len, const sg_error *err, void *arg)
{
	rpc *r = arg;
	sg_service *d = r->d;
	if (rc < 0) {
		sg_series_inc(d->m.sign_err[sign_err_of(rc == SG_EDENIED || rc == SG_EPROTO ? SG_EINTERNAL : rc)]);
		/* the issuer's refusal or a bad answer is our failure to sign, not
		 * the caller's (istio-csr: Internal); an issuer that does not
		 * answer within the call's deadline is the deadline's error */
		int code = rc == SG_EDENIED || rc == SG_EPROTO ? SG_EINTERNAL : rc;
		fail(r, code, err, "failed to sign certificate request");
		return;
	}
	const char *elems[MAX_CHAIN + 1];
	size_t lens[MAX_CHAIN + 1];
	size_t n = pem_split(chain_pem, len, elems, lens, MAX_CHAIN);
	if (n > MAX_CHAIN) {
		/* A chain cut short would not verify for the workload: the
		 * issuer's answer is refused whole, as a bad answer is. */
		sg_error e;
		sg_error_set(SG_EINTERNAL,
		             "the issuer returned %zu certificates (leaf and intermediates), more than the %d an answer "
		             "carries before the root bundle",
		             n, MAX_CHAIN);
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[sign_err_of(SG_EINTERNAL)]);
		fail(r, SG_EINTERNAL, &e, "failed to sign certificate request");
		return;
	}
	/* the leaf's facts for the audit line (the forwarder has checked the
	 * chain; an unreadable serial only leaves the field empty) */
	sg_x509_facts facts = {0};
	sg_x509_bundle *b = NULL;
	if (n && sg_x509_bundle_parse(&b, elems[0], lens[0]) == SG_OK && sg_x509_get_facts(b, 0, &facts) != SG_OK)
		facts = (sg_x509_facts){0};
	sg_x509_bundle_free(b);
	chain_snap *cs = chain_get(d);
	elems[n] = cs->elems[cs->n - 1]; /* the root bundle, as for our own leaves */
	lens[n] = cs->lens[cs->n - 1];
	uint8_t *out = NULL;
	size_t out_len = 0;
	bool ok = encode_answer(r, elems, lens, n ? n + 1 : 0, &out, &out_len);
	chain_put(cs);
	if (!ok)
		return;
	uint64_t us = (sg_now_ns() - r->t0) / 1000;
	sg_log(SG_LOG_INFO, "certificate issued", SG_F_STR("serial", facts.serial),
	       SG_F_STR("identity", r->decision.identity), SG_F_INT("not_after", facts.not_after),
	       SG_F_STR("by", "cert-manager issuer"), SG_F_STR("auth", r->caller_method),
	       SG_F_INT("impersonated", r->decision.impersonated), SG_F_STR("peer", r->peer), SG_F_INT("latency_us", us),
	       SG_F_INT("abandoned", sg_grpc_call_ended(r->call)), SG_F_END);
	finish(r, SG_GRPC_OK, NULL, out, out_len);
	free(out);
}

static void crypto_release(void *c)
{
	sg_crypto_free(c);
}

/* This thread's crypto context (made on first use, freed at thread exit). */
static sg_crypto *thread_crypto(sg_service *d)
{
	sg_crypto *c = pthread_getspecific(d->crypto_key);
	if (!c && sg_crypto_new(&c) == SG_OK && pthread_setspecific(d->crypto_key, c) != 0) {
		sg_crypto_free(c);
		c = NULL;
	}
	return c;
}

/* RA mode: the CSR is checked here as the signer would check it (the
 * issuer signs whatever it is sent), then forwarded. */
static void forward(rpc *r)
{
	sg_service *d = r->d;
	sg_crypto *c = thread_crypto(d);
	int rc = c ? sg_issue_check(&r->issue, c) : sg_error_set(SG_EBUSY, "out of memory");
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[sign_err_of(rc)]);
		if (rc == SG_EINVAL || rc == SG_EAUTH)
			sg_series_inc(d->m.parse_err);
		fail(r, rc, &e, rc == SG_EDENIED ? "request authenticate failure" : "CSR signing error");
		return;
	}
	sg_forward_request fr = {
		.csr_pem = r->req.csr,
		.csr_len = r->req.csr_len,
		.identity = r->decision.identity,
		.ttl = r->decision.ttl,
		.deadline_ns = r->deadline_ns,
		.cancelled = rpc_cancelled,
		.cancel_arg = r,
	};
	rc = sg_forward_submit(d->forward, &fr, on_forwarded, r);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.sign_err[ERR_CA_NOT_READY]);
		fail(r, rc, &e, "failed to sign certificate request");
	}
}

/* "Bearer <token>": the scheme is case-insensitive (RFC 6750 §2.1). */
static const char *bearer_of(const char *h, size_t *len)
{
	if (!h || strlen(h) < 7 || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	const char *t = h + 7;
	while (*t == ' ')
		t++;
	*len = strlen(t);
	return *len ? t : NULL;
}

void sg_service_on_call(sg_grpc_call *call, const sg_grpc_request *gr, void *arg)
{
	sg_service *d = arg;
	sg_series_inc(d->m.csr);
	rpc *r = calloc(1, sizeof(*r));
	if (!r) {
		sg_grpc_call_finish(call, SG_GRPC_UNAVAILABLE, "out of memory", NULL, 0);
		return;
	}
	r->d = d;
	r->call = call;
	r->t0 = gr->received_ns ? gr->received_ns : sg_now_ns();
	r->deadline_ns = gr->deadline_ns;
	snprintf(r->peer, sizeof(r->peer), "%s", gr->peer ? gr->peer : "");
	if (gr->cluster_id) {
		snprintf(r->cluster_id, sizeof(r->cluster_id), "%s", gr->cluster_id);
		r->has_cluster_id = true;
	}
	if (atomic_load(&d->stopping)) {
		sg_error e = {.code = SG_EBUSY};
		snprintf(e.msg, sizeof(e.msg), "signet is shutting down");
		fail(r, SG_EBUSY, &e, "unavailable");
		return;
	}
	int rc = sg_istio_arena_new(&r->arena);
	if (rc == SG_OK)
		rc = sg_istio_request_decode(r->arena, gr->body, gr->len, &r->req);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.parse_err);
		fail(r, rc == SG_EINTERNAL ? SG_EBUSY : SG_EINVAL, &e, "malformed request");
		return;
	}
	if (abandoned(r))
		return;
	sg_authn_request ar = {.peer_identity = gr->peer_identity, .now = sg_wall_seconds()};
	ar.bearer = bearer_of(gr->authorization, &ar.bearer_len);
	rc = d->auth->start(d->auth->self, &ar, on_authenticated, r);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_series_inc(d->m.authn_fail);
		fail(r, rc, &e, "request authenticate failure");
	}
}


/* ---- the chain snapshot ---------------------------------------------------- */

/* A new chain: the CA's, with root (copied, may be NULL) as the bundle.
 * Without a CA (an RA without an HSM) the root bundle alone: forwarded
 * answers only ever take the last element. */
static int chain_new(const sg_ca *ca, const char *root, size_t root_len, chain_snap **out)
{
	size_t n = 1;
	const char *const *elems = NULL;
	const size_t *lens = NULL;
	if (ca)
		sg_ca_chain(ca, &elems, &lens, &n);
	else
		SG_ENSURE(root, SG_EINVAL, "service: without a CA the root bundle must be given");
	SG_ENSURE(n > 0 && n <= MAX_CHAIN, SG_EINVAL, "CA chain has %zu elements", n);
	chain_snap *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	atomic_init(&c->refs, 1);
	for (size_t i = 0; elems && i < n; i++) {
		c->elems[i] = elems[i];
		c->lens[i] = lens[i];
	}
	c->n = n;
	if (root) {
		c->root = malloc(root_len + 1);
		if (!c->root) {
			free(c);
			SG_BAIL(SG_EINTERNAL, "out of memory");
		}
		memcpy(c->root, root, root_len);
		c->root[root_len] = 0;
		c->root_len = root_len;
		c->elems[n - 1] = c->root;
		c->lens[n - 1] = root_len;
	}
	*out = c;
	return SG_OK;
}

int sg_service_set_ca(sg_service *s, const sg_ca *ca, const char *root, size_t len)
{
	chain_snap *next = NULL;
	SG_TRY(chain_new(ca, root, len, &next));
	pthread_mutex_lock(&s->chain_lock);
	s->ca = ca;
	chain_snap *old = s->chain;
	s->chain = next;
	pthread_mutex_unlock(&s->chain_lock);
	chain_put(old);
	return SG_OK;
}

int sg_service_set_root(sg_service *s, const char *pem, size_t len)
{
	chain_snap *next = NULL;
	pthread_mutex_lock(&s->chain_lock);
	const sg_ca *ca = s->ca; /* set_ca's, which only ever borrows CAs that live as long as s */
	pthread_mutex_unlock(&s->chain_lock);
	SG_TRY(chain_new(ca, pem, len, &next));
	pthread_mutex_lock(&s->chain_lock);
	chain_snap *old = s->chain;
	s->chain = next;
	pthread_mutex_unlock(&s->chain_lock);
	chain_put(old);
	return SG_OK;
}

bool sg_service_root_is(sg_service *s, const char *pem, size_t len)
{
	chain_snap *c = chain_get(s);
	bool same = c->lens[c->n - 1] == len && memcmp(c->elems[c->n - 1], pem, len) == 0;
	chain_put(c);
	return same;
}

int sg_service_root(sg_service *s, char **pem, size_t *len)
{
	chain_snap *c = chain_get(s);
	*len = c->lens[c->n - 1];
	*pem = malloc(*len + 1);
	if (*pem) {
		memcpy(*pem, c->elems[c->n - 1], *len);
		(*pem)[*len] = 0;
	}
	chain_put(c);
	SG_ENSURE(*pem, SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* ---- metrics ------------------------------------------------------------------ */

static int counter(sg_metrics *reg, const char *name, const char *help, sg_series **out)
{
	sg_metric *f;
	SG_TRY(sg_metrics_counter(&f, reg, name, help, NULL, 0));
	return sg_metric_series(out, f, NULL);
}

static int setup_metrics(sg_service *s, sg_metrics *reg)
{
	SG_TRY(counter(reg, "citadel_server_csr_count", "The number of CSRs received.", &s->m.csr));
	SG_TRY(counter(reg, "citadel_server_authentication_failure_count", "The number of authentication failures.",
	               &s->m.authn_fail));
	SG_TRY(counter(reg, "citadel_server_csr_parsing_err_count", "The number of errors occurred when parsing the CSR.",
	               &s->m.parse_err));
	SG_TRY(counter(reg, "citadel_server_success_cert_issuance_count",
	               "The number of certificates issuances that have succeeded.", &s->m.success));
	sg_metric *f;
	static const char *const err_label[] = {"error"};
	SG_TRY(sg_metrics_counter(&f, reg, "citadel_server_csr_sign_err_count",
	                          "The number of errors occurred when signing the CSR.", err_label, 1));
	for (int i = 0; i < ERR_COUNT; i++)
		SG_TRY(sg_metric_series(&s->m.sign_err[i], f, &sign_err_names[i]));
	static const char *const outcome[] = {"outcome"};
	SG_TRY(sg_metrics_histogram(&f, reg, "signet_request_duration_seconds",
	                            "Time from receiving a CreateCertificate call to its answer.",
	                            SG_METRICS_LATENCY_BOUNDS, SG_METRICS_LATENCY_NBOUNDS, outcome, 1));
	static const char *const ok[] = {"ok"}, *const err[] = {"error"};
	SG_TRY(sg_metric_series(&s->m.latency_ok, f, ok));
	SG_TRY(sg_metric_series(&s->m.latency_err, f, err));
	static const char *const code_label[] = {"grpc_code"};
	SG_TRY(sg_metrics_counter(&f, reg, "signet_grpc_requests_total", "CreateCertificate calls by gRPC status.",
	                          code_label, 1));
	for (int i = 0; i < 17; i++) {
		const char *code = sg_grpc_status_name(i); /* the one table of status names */
		SG_TRY(sg_metric_series(&s->m.requests[i], f, &code));
	}
	return counter(reg, "signet_requests_abandoned_total",
	               "Calls whose client went away (cancelled, reset or timed out) before the answer.", &s->m.gone);
}

void sg_service_counts_get(sg_service *s, sg_service_counts *out)
{
	*out = (sg_service_counts){0};
	if (s->m.success)
		out->issued = (uint64_t)sg_series_value(s->m.success);
	for (int i = 1; i < 17; i++) /* 0 is OK */
		if (s->m.requests[i])
			out->refused += (uint64_t)sg_series_value(s->m.requests[i]);
}

/* ---- life cycle ------------------------------------------------------------------ */

int sg_service_new(sg_service **out, const sg_service_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->auth && o->grant && o->metrics, SG_EINVAL,
	          "service: needs an authenticator, a grant and a metrics registry");
	SG_ENSURE((o->pool && o->ca) || (o->forward && !o->pool && !o->ca && o->root_pem), SG_EINVAL,
	          "service: needs a pool and a CA, or (RA without an HSM) a forwarder and a root bundle only");
	sg_service *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	s->pool = o->pool;
	s->ca = o->ca;
	s->auth = o->auth;
	s->grant = o->grant;
	pthread_mutex_init(&s->chain_lock, NULL);
	int rc = SG_OK;
	if (o->forward) {
		if (pthread_key_create(&s->crypto_key, crypto_release) != 0) {
			free(s);
			SG_BAIL(SG_EINTERNAL, "service: cannot make a thread key");
		}
		s->forward = o->forward;
	}
	rc = chain_new(s->ca, o->root_pem, o->root_len, &s->chain);
	if (rc == SG_OK)
		rc = setup_metrics(s, o->metrics);
	if (rc < 0) {
		sg_service_free(s);
		return rc;
	}
	*out = s;
	return SG_OK;
}

void sg_service_stop_accepting(sg_service *s)
{
	atomic_store(&s->stopping, true);
}

void sg_service_free(sg_service *s)
{
	if (!s)
		return;
	chain_put(s->chain);
	pthread_mutex_destroy(&s->chain_lock);
	if (s->forward) {
		/* this thread's context now; other threads' at their exit */
		sg_crypto_free(pthread_getspecific(s->crypto_key));
		pthread_setspecific(s->crypto_key, NULL);
		pthread_key_delete(s->crypto_key);
	}
	free(s);
}
