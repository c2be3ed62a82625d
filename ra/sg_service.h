/*
 * sg_service: istio.v1.auth.IstioCertificateService/CreateCertificate, the
 * request path of one call from the gRPC server to the signer pool and
 * back. It is what istio-agent, ztunnel and node agents talk to.
 *
 *   transport thread:  decode (sg_istio) -> authenticate (sg_authn) ->
 *                      grant (sg_grant) -> sg_pool_submit, or an error
 *                      (RA mode: the CSR checks, then sg_forward_submit;
 *                      a cert-manager issuer signs, see sg_forward.h)
 *   signer thread:     parse, verify, profile, lint, C_Sign (sg_issuer) ->
 *                      encode leaf + chain, answer, audit line
 *
 * No thread waits for the HSM on a call's behalf. A call whose client has
 * gone is noticed before authentication, before the pool takes it and
 * right before C_Sign, and is not signed; one that went away after the
 * signature is answered into the void and audited with abandoned=1.
 *
 * The chain after the leaf is the CA's, with its root bundle replaced by
 * set_root (root-ca-file) when the daemon says so; a call in flight keeps
 * the chain it started encoding with.
 *
 * Metrics it registers (istiod's names first, then ours):
 * citadel_server_csr_count, _authentication_failure_count,
 * _csr_parsing_err_count, _success_cert_issuance_count,
 * _csr_sign_err_count{error}, signet_request_duration_seconds{outcome},
 * signet_grpc_requests_total{grpc_code}, signet_requests_abandoned_total.
 *
 * Ownership: everything in the options is borrowed and must outlive the
 * service; the service must outlive every call (shut the gRPC server down
 * first).
 */
#ifndef SG_SERVICE_H
#define SG_SERVICE_H

#include "sg_authn.h"
#include "sg_ca.h"
#include "sg_error.h"
#include "sg_forward.h"
#include "sg_grant.h"
#include "sg_grpc.h"
#include "sg_metrics.h"
#include "sg_pool.h"

#include <stddef.h>

#define SG_SERVICE_CHAIN_MAX 12 /* certificates after the leaf */

typedef struct sg_service sg_service;

typedef struct sg_service_options {
	sg_pool *pool;
	const sg_ca *ca;
	const sg_authenticator *auth;
	sg_grant *grant;
	sg_metrics *metrics;  /* the service's families are registered here */
	const char *root_pem; /* root bundle to return instead of the CA's (copied); NULL: the CA's */
	size_t root_len;
	/* RA mode (NULL: sign with the pool): each CSR that passes
	 * authentication, policy and the signer's CSR checks is forwarded to a
	 * cert-manager issuer; the answer is the issuer's leaf and
	 * intermediates, then the root bundle above. An RA without an HSM
	 * gives a forwarder and root_pem with neither pool nor ca (then
	 * set_root needs no CA either). */
	sg_forward *forward;
} sg_service_options;

SG_API int sg_service_new(sg_service **out, const sg_service_options *o) SG_MUST_CHECK;
/* No call may be in flight. Accepts NULL. */
SG_API void sg_service_free(sg_service *s);

/* The gRPC server's handler (sg_grpc_server_options.handler; arg: the
 * service). */
SG_API void sg_service_on_call(sg_grpc_call *call, const sg_grpc_request *gr, void *service);

/* From now on calls are answered UNAVAILABLE ("shutting down"). */
SG_API void sg_service_stop_accepting(sg_service *s);

/* Replaces the root bundle returned after the leaf (copied; the caller has
 * checked it against the CA). Any thread. */
SG_API int sg_service_set_root(sg_service *s, const char *pem, size_t len) SG_MUST_CHECK;
/* Follows a CA rotation: the chain returned after the leaf becomes ca's
 * (borrowed for the service's life: answers in flight may still hold an
 * earlier one) with root (copied; NULL: ca's own bundle) as the bundle.
 * Leaves carry the intermediates of the CA that signed them whichever is
 * current when they are answered (sg_issue_result.chain), so a leaf the
 * previous key signed during the switch is never sent with the next key's
 * intermediates. Any thread. */
SG_API int sg_service_set_ca(sg_service *s, const sg_ca *ca, const char *root, size_t len) SG_MUST_CHECK;
/* Whether pem is the root bundle returned now. */
SG_API bool sg_service_root_is(sg_service *s, const char *pem, size_t len);
/* A copy of the root bundle returned now (NUL-terminated; caller frees). */
SG_API int sg_service_root(sg_service *s, char **pem, size_t *len) SG_MUST_CHECK;

/* What the service has answered so far, from the same counters /metrics
 * shows: certificates issued (citadel_server_success_cert_issuance_count)
 * and calls answered with any status but OK (signet_grpc_requests_total).
 * Any thread; the two are read one after the other, not as one snapshot. */
typedef struct sg_service_counts {
	uint64_t issued;
	uint64_t refused;
} sg_service_counts;
SG_API void sg_service_counts_get(sg_service *s, sg_service_counts *out);

#endif
