/*
 * sg_grant: what a caller may have, decided before any signing work.
 * (The word "policy" belongs to approver-policy's CertificateRequestPolicy,
 * policy/; this is the request path's grant.)
 *
 * Two modes (signetd's --policy values), matching the servers signet
 * replaces:
 *   istio-csr (default)  the CSR must ask for exactly the caller's identity
 *                        (checked by the signer, sg_issue_request.strict_csr);
 *                        TTL = min(requested, or the max when none, max).
 *   istiod               the CSR's names are ignored and the identity is
 *                        stamped; TTL <= 0 gives the default (24h), a TTL
 *                        above the max is refused (SG_EINVAL, istiod's
 *                        "requested TTL ... is greater than the max allowed").
 * Both: the clusterid header must be empty or equal the configured cluster
 * ID; metadata ImpersonatedIdentity is honoured only for callers whose
 * "namespace/serviceaccount" is in the trusted node accounts, and must be a
 * SPIFFE ID of this trust domain. With an impersonation hook (node
 * authorization, sg_workload.h) it must moreover be exactly
 * spiffe://<trust-domain>/ns/<ns>/sa/<sa> (istiod's spiffe.ParseIdentity),
 * and the hook decides whether this caller may have that identity. Refusals
 * are SG_EAUTH (authentication) or SG_EDENIED (authorization), which the
 * front end answers with UNAUTHENTICATED; a hook may also answer SG_EBUSY
 * (it cannot tell yet: the client retries).
 *
 * An sg_grant is immutable after sg_grant_new and shared by all threads.
 */
#ifndef SG_GRANT_H
#define SG_GRANT_H

#include "sg_authn.h"
#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sg_grant_mode {
	SG_GRANT_ISTIO_CSR = 0,
	SG_GRANT_ISTIOD = 1,
} sg_grant_mode;

extern const char *const sg_grant_mode_names[]; /* "istio-csr", "istiod", NULL */

typedef struct sg_grant_options {
	sg_grant_mode mode;
	int64_t max_ttl;                   /* seconds; > 0 */
	int64_t default_ttl;               /* istiod mode, for requests without a TTL */
	const char *cluster_id;            /* "Kubernetes" */
	const char *trust_domain;          /* "cluster.local" */
	const char *trusted_node_accounts; /* comma-separated "ns/sa" list, or NULL */
	/* Optional node authorization of impersonation, called (on the
	 * deciding thread, so it must not block) after the caller was found
	 * in the trusted node accounts and the impersonated identity parsed
	 * as spiffe://<our trust domain>/ns/<target_ns>/sa/<target_sa>; a
	 * negative result (SG_EAUTH with its detail, usually) is the
	 * decision's error. NULL: trusted node accounts may impersonate any
	 * identity of the trust domain. arg comes first: the hook is a
	 * method of the object it names (sg_workload_authorize_impersonation
	 * has this shape). */
	int (*authorize_impersonation)(void *arg, const sg_caller *caller, const char *target_ns,
	                               const char *target_sa);
	void *authorize_arg; /* borrowed; must outlive the grant */
} sg_grant_options;

typedef struct sg_grant sg_grant;

typedef struct sg_grant_input {
	const sg_caller *caller;
	const char *cluster_id;            /* clusterid header, or NULL */
	int64_t requested_ttl;             /* validity_duration, seconds */
	const char *impersonated_identity; /* or NULL */
} sg_grant_input;

typedef struct sg_grant_decision {
	char identity[SG_ID_MAX]; /* the SPIFFE ID to certify */
	int64_t ttl;              /* seconds */
	bool strict_csr;          /* the signer enforces istio-csr's CSR checks */
	bool impersonated;
} sg_grant_decision;

/* Caller frees with sg_grant_free. Validates the options (bad node
 * account entries are SG_EINVAL naming the entry). */
SG_API int sg_grant_new(sg_grant **out, const sg_grant_options *o) SG_MUST_CHECK;
SG_API void sg_grant_free(sg_grant *p);
SG_API sg_grant_mode sg_grant_get_mode(const sg_grant *p);

/* Thread-safe (the grant is immutable; the hook must be thread-safe). */
SG_API int sg_grant_decide(const sg_grant *p, const sg_grant_input *in, sg_grant_decision *out) SG_MUST_CHECK;

#endif
