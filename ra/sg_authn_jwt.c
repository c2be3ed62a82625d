/*
 * sg_authn_jwt: the "jwt" authenticator (sg_authn_impl.h). It owns a
 * verifier with its cache (sg_jwt.h) over a key source: a JWKS file it
 * loads and owns, or a source the caller owns and keeps fresh (the API
 * server's JWKS, sg_jwks_kube.h), which it only borrows. The verifier
 * cannot tell the two apart; only who frees the source differs. start()
 * turns the bearer token into a caller synchronously, so it never holds a
 * request beyond the call.
 *
 * This is what istio-csr does with a TokenReview on every request, done
 * locally: the same claims (issuer, audience istio-ca, expiry, the
 * service-account name) decide, and the identity is built the same way
 * (spiffe://<td>/ns/<ns>/sa/<sa>, '@' in the trust domain becoming '.').
 */
#include "sg_authn_impl.h"
#include "sg_spiffe.h"
#include "sg_guard.h"
#include "sg_jwt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct jwt_authn {
	sg_jwks_file *owned; /* the source loaded from jwks_file; NULL when borrowed */
	sg_jwt_verifier *verifier;
	char trust_domain[SG_TRUST_DOMAIN_MAX + 1];
};

static void jwt_free(void *self)
{
	struct jwt_authn *a = self;
	if (!a)
		return;
	sg_jwt_verifier_free(a->verifier);
	sg_jwks_file_free(a->owned);
	free(a);
}

static int jwt_start(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg)
{
	struct jwt_authn *a = self;
	SG_ENSURE(req->bearer && req->bearer_len > 0, SG_EAUTH, "no bearer token");
	sg_jwt_claims c;
	SG_TRY(sg_jwt_verifier_verify(a->verifier, req->bearer, req->bearer_len, req->now, &c));
	sg_caller caller;
	memset(&caller, 0, sizeof(caller));
	/* Fits by construction: trust domain <= 255, ns <= 63, sa <= 253. */
	SG_TRY(sg_jwt_identity(caller.identity, sizeof(caller.identity), a->trust_domain, c.ns, c.sa));
	snprintf(caller.ns, sizeof(caller.ns), "%s", c.ns);
	snprintf(caller.sa, sizeof(caller.sa), "%s", c.sa);
	snprintf(caller.sa_uid, sizeof(caller.sa_uid), "%s", c.sa_uid);
	snprintf(caller.pod_name, sizeof(caller.pod_name), "%s", c.pod_name);
	snprintf(caller.pod_uid, sizeof(caller.pod_uid), "%s", c.pod_uid);
	caller.expires = c.exp;
	caller.method = "jwt";
	done(SG_OK, &caller, NULL, arg);
	return SG_OK;
}

int sg_authn_jwt_new(sg_authenticator *out, const sg_authn_jwt_options *o)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(o && o->issuer && o->trust_domain, SG_EINVAL, "jwt authenticator needs an issuer and a trust domain");
	SG_ENSURE(!o->jwks_file != !o->jwks_source, SG_EINVAL,
	          "jwt authenticator needs exactly one of a JWKS file and a key source");
	SG_ENSURE(sg_trust_domain_valid(o->trust_domain), SG_EINVAL, "trust domain is empty, too long or malformed");
	struct jwt_authn *a = calloc(1, sizeof(*a));
	SG_ENSURE(a, SG_EINTERNAL, "out of memory");
	snprintf(a->trust_domain, sizeof(a->trust_domain), "%s", o->trust_domain);
	sg_jwt_options vo = {
	    .issuer = o->issuer,
	    .audiences = o->audiences,
	    .n_audiences = o->n_audiences,
	    .leeway = o->leeway,
	    .cache_entries = o->cache_entries,
	};
	int rc = o->jwks_file ? sg_jwks_file_new(&a->owned, o->jwks_file) : SG_OK;
	if (rc == SG_OK)
		rc = sg_jwt_verifier_new(&a->verifier, o->jwks_file ? a->owned : o->jwks_source, &vo);
	if (rc != SG_OK) {
		jwt_free(a);
		return rc;
	}
	out->name = "jwt";
	out->start = jwt_start;
	out->free = jwt_free;
	out->self = a;
	return SG_OK;
}
