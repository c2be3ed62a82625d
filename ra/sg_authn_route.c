/*
 * sg_authn_route: the "auto" token authenticator of a cluster
 * (sg_authn_impl.h): local JWKS verification for the API server's own
 * tokens, a TokenReview for every other token.
 *
 * Why split by issuer: a TokenRequest token (what the kubelet projects
 * into pods) carries the discovered issuer as "iss" and is judged as well
 * locally (signature against the API server's keys, then the bound
 * service account and pod against the informer, sg_authn_bound_new) as by
 * a TokenReview, at a fraction of the cost. A legacy Secret-based token
 * ("iss": "kubernetes/serviceaccount", no "exp") or a token of another
 * issuer the API server accepts (a second --service-account-issuer, an
 * OIDC authenticator) cannot be judged locally, so it is asked of the API
 * server as before.
 *
 * A Secret-bound token of the discovered issuer goes to a TokenReview too:
 * the informer holds pods and service accounts, not Secrets (watching every
 * Secret would need a read right on all of them), so only the API server
 * can tell that its Secret is gone. Such tokens are rare (kubelets bind to
 * pods); a wrong guess costs a review, never a wrong answer.
 *
 * The issuer is read from the token unverified (sg_jwt_peek_issuer). That
 * only chooses the judge, and both judges verify the whole token: forging
 * "iss" sends a token to the JWKS verifier, which refuses it, or to the API
 * server, which refuses it too. A token that does not parse goes to the
 * local verifier, so garbage costs no API call.
 *
 * The router has no per-request state: it hands the request, done and arg
 * straight to the member it chose, which completes it as it would alone.
 */
#include "sg_authn_impl.h"
#include "sg_guard.h"
#include "sg_jwt.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct route {
	sg_authenticator local;  /* jwt (+ bound check) */
	sg_authenticator remote; /* tokenreview */
	char issuer[SG_AUTHN_ROUTE_ISSUER_MAX + 1];
	_Atomic uint64_t n_local, n_remote;
};

static int route_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct route *r = self;
	char iss[SG_AUTHN_ROUTE_ISSUER_MAX + 1];
	bool local = true;
	/* A token too odd to peek at (or with an issuer of more than
	 * SG_AUTHN_ROUTE_ISSUER_MAX bytes, which cannot be ours) is the local
	 * verifier's to refuse: only a readable foreign issuer costs a review. */
	bool secret_bound = false;
	if (req->bearer && req->bearer_len > 0 &&
	    sg_jwt_peek_issuer(req->bearer, req->bearer_len, iss, sizeof(iss), &secret_bound) == SG_OK)
		local = strcmp(iss, r->issuer) == 0 && !secret_bound;
	sg_error_clear();
	const sg_authenticator *a = local ? &r->local : &r->remote;
	atomic_fetch_add_explicit(local ? &r->n_local : &r->n_remote, 1, memory_order_relaxed);
	return a->start(a->self, req, done, arg);
}

static void route_free(void *self)
{
	struct route *r = self;
	if (!r)
		return;
	if (r->local.free)
		r->local.free(r->local.self);
	if (r->remote.free)
		r->remote.free(r->remote.self);
	free(r);
}

int sg_authn_route_new(sg_authenticator *out, sg_authenticator local, sg_authenticator remote, const char *issuer)
{
	memset(out, 0, sizeof(*out));
	struct route *r = calloc(1, sizeof(*r));
	int rc = SG_EINTERNAL;
	if (!r) {
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	} else if (!issuer || !*issuer || strlen(issuer) > SG_AUTHN_ROUTE_ISSUER_MAX) {
		rc = sg_error_set(SG_EINVAL, "the router needs an issuer of 1..%d bytes", SG_AUTHN_ROUTE_ISSUER_MAX);
	} else {
		r->local = local;
		r->remote = remote;
		snprintf(r->issuer, sizeof(r->issuer), "%s", issuer);
		/* A member of a chain consumes the bearer token, as both judges do. */
		out->name = "jwt";
		out->start = route_start;
		out->free = route_free;
		out->self = r;
		return SG_OK;
	}
	free(r);
	if (local.free)
		local.free(local.self);
	if (remote.free)
		remote.free(remote.self);
	return rc;
}

void sg_authn_route_counts(void *self, uint64_t *local, uint64_t *remote)
{
	struct route *r = self;
	*local = r ? atomic_load_explicit(&r->n_local, memory_order_relaxed) : 0;
	*remote = r ? atomic_load_explicit(&r->n_remote, memory_order_relaxed) : 0;
}
