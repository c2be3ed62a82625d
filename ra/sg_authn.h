/*
 * sg_authn: who is calling. An authenticator turns what a request carries
 * (a bearer token, a verified client certificate, headers) into a caller
 * identity, or refuses.
 *
 * The interface is asynchronous so that authenticators that must ask
 * someone else (Kubernetes TokenReview) can answer later without holding a
 * transport thread: start() either completes synchronously by calling done
 * before it returns, or arranges for done to be called exactly once later,
 * from any thread. Local ones (JWT against a JWKS, mTLS) complete at once.
 *
 * Ownership: the request is borrowed until done is called; the caller
 * struct passed to done is valid during the call only (copy what you keep).
 */
#ifndef SG_AUTHN_H
#define SG_AUTHN_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

#define SG_ID_MAX 512

typedef struct sg_authn_request {
	const char *bearer;        /* token after "Bearer ", or NULL */
	size_t bearer_len;
	const char *peer_identity; /* first URI SAN of a verified client certificate, or NULL */
	int64_t now;               /* wall-clock seconds */
} sg_authn_request;

typedef struct sg_caller {
	char identity[SG_ID_MAX]; /* spiffe://<trust-domain>/ns/<ns>/sa/<sa> */
	char ns[254];             /* Kubernetes namespace, "" for mTLS callers */
	char sa[254];             /* service account */
	char sa_uid[64];          /* the service account's uid, when the credential names it */
	char pod_name[254];       /* from the token's kubernetes.io claims, or "" */
	char pod_uid[64];
	int64_t expires;          /* token expiry (0: none known) */
	const char *method;       /* "jwt", "mtls", "tokenreview" (static string) */
} sg_caller;

typedef void (*sg_authn_done_fn)(int rc, const sg_caller *caller, const sg_error *err, void *arg);

typedef struct sg_authenticator {
	const char *name;
	/* SG_OK: done has been or will be called. Any other result: done will
	 * not be called and the error detail is set. */
	int (*start)(void *self, const sg_authn_request *req, sg_authn_done_fn done, void *arg);
	void (*free)(void *self);
	void *self;
} sg_authenticator;

#endif
