/*
 * sg_trust_webhook: trust-manager's validating admission webhook for
 * Bundles, as a pure function from the HTTP request to the HTTP answer.
 *
 * trust-manager serves it at SG_TRUST_WEBHOOK_PATH through
 * controller-runtime (pkg/webhook/admission/http.go, validator_custom.go),
 * and its ValidatingWebhookConfiguration (failurePolicy Fail) sends every
 * Bundle CREATE and UPDATE there. The answer is what that code gives:
 *
 *   CREATE, UPDATE  the new object checked by sg_trust_spec_check (what the
 *                   controller reports as InvalidSpec): allowed, or denied
 *                   with status code 403, reason Forbidden and the check's
 *                   message (the API server shows it to the user as
 *                   "admission webhook ... denied the request: <message>");
 *   DELETE, CONNECT allowed;
 *   anything else   "errored": allowed false, status code 400 (413 for a
 *                   body over the limit, 500 for our own failure) and a
 *                   fixed message: an empty body, a Content-Type other than
 *                   exactly application/json, a body that is not JSON or
 *                   not an AdmissionReview (admission.k8s.io v1 or v1beta1;
 *                   the answer uses the request's version), a request
 *                   without a uid, for another kind than
 *                   trust.cert-manager.io/v1alpha1 Bundle, an object (or
 *                   for UPDATE and DELETE, an old object) that is not one,
 *                   an unknown operation.
 *
 * The answer is always an AdmissionReview with HTTP status 200, as
 * controller-runtime writes it; the response carries the request's uid when
 * one was read. Nothing of the request but the uid and the check's message
 * is written back.
 *
 * Hostile input: the body is untrusted (any pod that can reach the port
 * may send one). Before jansson parses it, a linear scan bounds what the
 * parse may allocate: at most SG_TRUST_WEBHOOK_BODY_MAX bytes (the limit
 * controller-runtime applies), SG_TRUST_WEBHOOK_VALUES_MAX JSON values and
 * SG_TRUST_WEBHOOK_DEPTH_MAX levels of nesting; duplicate keys are refused;
 * the uid is 1..SG_TRUST_WEBHOOK_UID_MAX printable ASCII bytes.
 */
#ifndef SG_TRUST_WEBHOOK_H
#define SG_TRUST_WEBHOOK_H

#include "sg_error.h"

#include <stddef.h>

#define SG_TRUST_WEBHOOK_PATH "/validate-trust-cert-manager-io-v1alpha1-bundle"
/* controller-runtime's maxRequestSize: two objects of at most 3 MB (the
 * API server's limit for a JSON write) and 1 MB for the rest. */
#define SG_TRUST_WEBHOOK_BODY_MAX (7u << 20)
/* A Bundle and its old version hold a few thousand values at most (its
 * metadata, managedFields included, and sources); 200,000 bound the
 * parser's memory to tens of MiB. */
#define SG_TRUST_WEBHOOK_VALUES_MAX 200000u
#define SG_TRUST_WEBHOOK_DEPTH_MAX 64u
#define SG_TRUST_WEBHOOK_UID_MAX 128u

typedef enum sg_trust_admission {
	SG_TRUST_ADMISSION_ALLOWED,
	SG_TRUST_ADMISSION_DENIED,  /* the Bundle is invalid */
	SG_TRUST_ADMISSION_ERRORED, /* the request is (see above) */
} sg_trust_admission;

/* Answers one AdmissionReview: body[0..len) (need not be NUL-terminated)
 * and the request's Content-Type (NULL: none). *out is the answer's JSON
 * (caller frees with free()), *out_len its length, *result which answer it
 * is. SG_OK, or SG_EINTERNAL when out of memory (then *out is NULL). */
SG_API int sg_trust_admission_review(const char *body, size_t len, const char *content_type, char **out,
                                     size_t *out_len, sg_trust_admission *result) SG_MUST_CHECK;

#endif
