/*
 * sg_authn_mtls: the "mtls" authenticator and the authenticator chain
 * (sg_authn_impl.h).
 *
 * mtls trusts the TLS layer: by the time a request arrives, the client
 * certificate has been verified against the mesh roots, and
 * req->peer_identity is its first URI SAN. What is left is to check that
 * the SAN is a well-formed SPIFFE ID (https://github.com/spiffe/spiffe,
 * standards/SPIFFE-ID.md §2) of our own trust domain, so that a certificate
 * issued for another mesh sharing a root cannot act here.
 *
 * The chain lives in this file because it is small and has no state of its
 * own beyond a per-request record. It supports members that complete
 * later (a TokenReview authenticator), so each request gets a heap record
 * that carries the position and the most useful error so far: the error of
 * the last member whose credential was present ("token expired" tells the
 * operator more than "no client certificate"), by a table from member name
 * to the credential it consumes.
 */
#include "sg_authn_impl.h"
#include "sg_spiffe.h"
#include "sg_guard.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- mtls ---- */


struct mtls_authn {
	char prefix[sizeof("spiffe://") + SG_TRUST_DOMAIN_MAX + 1]; /* "spiffe://<td>/" */
};

static void mtls_free(void *self)
{
	free(self);
}

static bool path_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
	       c == '_';
}

/* SPIFFE-ID §2.2: non-empty segments of [A-Za-z0-9._-], not "." or "..",
 * no trailing '/'. */
static bool spiffe_path(const char *p)
{
	if (!*p)
		return false;
	for (;;) {
		size_t n = 0;
		while (path_char(p[n]))
			n++;
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (p[n] == '\0')
			return true;
		if (p[n] != '/')
			return false;
		p += n + 1;
	}
}

static int mtls_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct mtls_authn *a = self;
	const char *id = req->peer_identity;
	SG_ENSURE(id && *id, SG_EAUTH, "no client certificate");
	size_t n = strnlen(id, SG_ID_MAX);
	SG_ENSURE(n < SG_ID_MAX, SG_EAUTH, "client certificate identity is longer than %d bytes", SG_ID_MAX - 1);
	SG_ENSURE(strncmp(id, "spiffe://", 9) == 0, SG_EAUTH, "client certificate identity is not a SPIFFE ID");
	size_t plen = strlen(a->prefix);
	SG_ENSURE(strncmp(id, a->prefix, plen) == 0, SG_EAUTH,
	          "client certificate identity is not in trust domain %.*s", (int)(plen - 10), a->prefix + 9);
	SG_ENSURE(spiffe_path(id + plen), SG_EAUTH, "client certificate identity has a malformed SPIFFE path");
	sg_caller caller;
	memset(&caller, 0, sizeof(caller));
	memcpy(caller.identity, id, n + 1);
	caller.method = "mtls";
	done(SG_OK, &caller, NULL, arg);
	return SG_OK;
}

int sg_authn_mtls_new(sg_authenticator *out, const char *trust_domain)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(trust_domain, SG_EINVAL, "mtls authenticator needs a trust domain");
	char td[SG_TRUST_DOMAIN_MAX + 1];
	SG_TRY(sg_trust_domain_normalize(trust_domain, td, sizeof(td)));
	struct mtls_authn *a = calloc(1, sizeof(*a));
	SG_ENSURE(a, SG_EINTERNAL, "out of memory");
	snprintf(a->prefix, sizeof(a->prefix), "spiffe://%s/", td);
	out->name = "mtls";
	out->start = mtls_start;
	out->free = mtls_free;
	out->self = a;
	return SG_OK;
}

/* ---- chain ---- */

#define CHAIN_MAX 8

struct chain {
	size_t n;
	sg_authenticator list[CHAIN_MAX];
};

/* One request going through the chain. */
struct chain_run {
	const struct chain *c;
	sg_authn_request req;
	size_t i;
	sg_authn_done_fn done;
	void *arg;
	sg_error best;
	bool have_best;
	bool best_applied;
};

/* Which credential each kind of member consumes; unknown kinds always apply. */
static const struct {
	const char *name;
	enum { NEEDS_BEARER, NEEDS_PEER } needs;
} applies_table[] = {
    {"jwt", NEEDS_BEARER},
    {"tokenreview", NEEDS_BEARER},
    {"mtls", NEEDS_PEER},
};

static bool applies(const sg_authenticator *a, const sg_authn_request *req)
{
	for (size_t i = 0; i < sizeof(applies_table) / sizeof(applies_table[0]); i++) {
		if (a->name && strcmp(a->name, applies_table[i].name) == 0)
			return applies_table[i].needs == NEEDS_BEARER ? req->bearer && req->bearer_len > 0
			                                              : req->peer_identity && *req->peer_identity;
	}
	return true;
}

static void record(struct chain_run *r, const sg_authenticator *a, const sg_error *e)
{
	bool app = applies(a, &r->req);
	if (app || !r->best_applied) {
		r->best = *e;
		r->have_best = true;
		r->best_applied = app;
	}
}

static void on_member_done(int rc, const sg_caller *caller, const sg_error *err, void *arg);

/* Starts members from r->i on. SG_OK: a member took the request (r is
 * now its to finish). Otherwise every member failed synchronously; the
 * chosen error is current and r is still the caller's. */
static int run_from(struct chain_run *r)
{
	for (; r->i < r->c->n; r->i++) {
		const sg_authenticator *a = &r->c->list[r->i];
		sg_error_clear();
		int rc = a->start(a->self, &r->req, on_member_done, r);
		if (rc == SG_OK)
			return SG_OK; /* r may already be freed: do not touch it */
		sg_error e;
		sg_error_save(&e);
		if (e.code == 0)
			e.code = rc;
		record(r, a, &e);
	}
	if (!r->have_best)
		return sg_error_set(SG_EAUTH, "no authenticator configured");
	sg_error_restore(&r->best);
	return r->best.code < 0 ? r->best.code : SG_EAUTH;
}

static void on_member_done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	struct chain_run *r = arg;
	if (rc == SG_OK) {
		r->done(SG_OK, caller, NULL, r->arg);
		free(r);
		return;
	}
	sg_error e;
	if (err)
		e = *err;
	else
		sg_error_save(&e);
	if (e.code >= 0)
		e.code = rc < 0 ? rc : SG_EAUTH;
	record(r, &r->c->list[r->i], &e);
	r->i++;
	if (run_from(r) == SG_OK)
		return;
	/* Every remaining member failed: report through done, since the
	 * chain's start() has returned (or will return) SG_OK. */
	sg_error fin;
	sg_error_save(&fin);
	r->done(fin.code, NULL, &fin, r->arg);
	free(r);
}

static int chain_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct chain_run *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "out of memory");
	r->c = self;
	r->req = *req;
	r->done = done;
	r->arg = arg;
	int rc = run_from(r);
	if (rc != SG_OK)
		free(r);
	return rc;
}

static void chain_free(void *self)
{
	struct chain *c = self;
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		if (c->list[i].free)
			c->list[i].free(c->list[i].self);
	free(c);
}

int sg_authn_chain_new(sg_authenticator *out, const sg_authenticator *list, size_t n)
{
	memset(out, 0, sizeof(*out));
	struct chain *c = calloc(1, sizeof(*c));
	if (!c || n == 0 || n > CHAIN_MAX || !list) {
		for (size_t i = 0; list && i < n; i++)
			if (list[i].free)
				list[i].free(list[i].self);
		int code = c ? SG_EINVAL : SG_EINTERNAL;
		free(c);
		SG_BAIL(code, "authenticator chain needs 1..%d members", CHAIN_MAX);
	}
	c->n = n;
	memcpy(c->list, list, n * sizeof(*list));
	out->name = "chain";
	out->start = chain_start;
	out->free = chain_free;
	out->self = c;
	return SG_OK;
}
