/*
 * sg_authn_impl: the authenticators signet ships (interface: sg_authn.h).
 *
 *   jwt    a Kubernetes service-account token in "authorization: Bearer",
 *          verified locally against a JWKS (sg_jwt.h), with a cache: a file
 *          it loads itself, or a key source the caller keeps fresh (the API
 *          server's keys through sg_jwks_kube.h).
 *   mtls   the first URI SAN of a client certificate the TLS layer has
 *          already verified; it must be a SPIFFE ID of our trust domain.
 *   chain  several of the above, tried in order (istio order: client
 *          certificate first, then JWT); the first success wins.
 *
 * All three complete synchronously when their members do: on success start()
 * calls done(SG_OK, caller, NULL, arg) before it returns SG_OK; on failure
 * it returns the error (SG_EAUTH with the detail set) and does not call
 * done. A chain also accepts members that complete later (it then reports a
 * final failure through done).
 *
 * Ownership: each constructor fills *out; release with out->free(out->self).
 * Option strings are copied.
 */
#ifndef SG_AUTHN_IMPL_H
#define SG_AUTHN_IMPL_H

#include "sg_authn.h"
#include "sg_error.h"
#include "sg_jwt.h"

#include <stddef.h>

/* Exactly one of jwks_file and jwks_source. */
typedef struct sg_authn_jwt_options {
	const char *jwks_file;        /* a JWKS file, loaded here and reloaded when it changes */
	sg_jwks_file *jwks_source;    /* or a key source (file or pushed, e.g. sg_jwks_kube_source);
	                                 borrowed: it must outlive the authenticator */
	const char *issuer;           /* required: the token's "iss" (e.g. sg_jwks_kube_issuer) */
	const char *const *audiences; /* NULL: {"istio-ca"} */
	size_t n_audiences;
	const char *trust_domain; /* required, e.g. "cluster.local" */
	int leeway;               /* seconds; 0: 60; < 0: none */
	size_t cache_entries;     /* 0: 16384 */
} sg_authn_jwt_options;

/* Fails with SG_EINVAL when not exactly one of jwks_file and jwks_source is
 * given, and with SG_EINVAL/SG_ENOTFOUND when the JWKS file cannot be loaded.
 * start(): no bearer -> SG_EAUTH "no bearer token"; otherwise the token's
 * SG_EAUTH detail, or a caller with method "jwt", identity
 * spiffe://<td>/ns/<ns>/sa/<sa>, ns, sa, pod name/uid and expires = exp. */
SG_API int sg_authn_jwt_new(sg_authenticator *out, const sg_authn_jwt_options *o) SG_MUST_CHECK;

/* start(): no peer identity -> SG_EAUTH "no client certificate"; an identity
 * that is not spiffe://<trust_domain>/<path> -> SG_EAUTH; otherwise a caller
 * with method "mtls" and identity = the peer's URI (ns and sa are "", as the
 * interface specifies for mTLS callers). '@' in trust_domain becomes '.'. */
SG_API int sg_authn_mtls_new(sg_authenticator *out, const char *trust_domain) SG_MUST_CHECK;

/* Takes ownership of the n authenticators in list (copied by value; the
 * chain frees them, also when this call fails). On all-fail the error is
 * that of the last member that applied to the request (its credential was
 * present: "jwt"/"tokenreview" need a bearer token, "mtls" a peer
 * identity), or else the last member's. */
SG_API int sg_authn_chain_new(sg_authenticator *out, const sg_authenticator *list, size_t n) SG_MUST_CHECK;

/* The "auto" token authenticator of a cluster (sg_authn_route.c): a token
 * whose "iss" (read unverified, only to choose) equals issuer goes to
 * local (the jwt authenticator with the bound-object check) unless it is
 * bound to a Secret; a Secret-bound one and any other readable token (a
 * legacy Secret token, another issuer) to remote (the tokenreview
 * authenticator); an unreadable one to local. The chosen
 * member completes the request exactly as it would alone. Named "jwt" (it
 * consumes the bearer token, for sg_authn_chain_new). Takes ownership of
 * both members (freed with it, also when this call fails); issuer is
 * copied. SG_EINVAL for an empty issuer or one longer than
 * SG_AUTHN_ROUTE_ISSUER_MAX. */
#define SG_AUTHN_ROUTE_ISSUER_MAX 1024
SG_API int sg_authn_route_new(sg_authenticator *out, sg_authenticator local, sg_authenticator remote,
                              const char *issuer) SG_MUST_CHECK;
/* Requests sent to each member so far (self: the route's out->self). */
SG_API void sg_authn_route_counts(void *self, uint64_t *local, uint64_t *remote);
#endif
