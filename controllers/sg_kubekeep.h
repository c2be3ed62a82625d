/*
 * sg_kubekeep: certificates signed for a Kubernetes request whose status
 * write has not succeeded yet, kept so that the retry writes them instead
 * of signing again. Both Kubernetes-facing signers use it: the
 * cert-manager issuer (sg_cmissuer.h, CertificateRequests) and the CSR
 * signer (sg_kubecsr.h, CertificateSigningRequests).
 *
 * Why. A signature is an HSM operation and a certificate handed out; a
 * status write can fail after it (the API server refuses, times out, or
 * says the object changed). Without this store the retry would sign the
 * same request again, and two certificates (two serials) would exist for
 * one request, one of them never delivered.
 *
 * What is kept. One entry per request: its object key ("ns/name", or the
 * name of a cluster-scoped object), its UID and metadata.generation, and
 * a copy of the signing result. A lookup matches the UID and the
 * generation: a request deleted and created again under the same name has
 * a new UID and is signed afresh, and a changed spec (a new generation;
 * both kinds' specs are immutable, so this is defence only) drops the
 * entry. The store is bounded (max entries): when full, the oldest entry
 * is dropped (that request is signed again if its write is ever retried),
 * and counted.
 *
 * Lifetime. The caller puts an entry right after signing, before its
 * write; drops it once the write succeeded, once the request is found
 * done (a certificate, Failed, Denied) or gone (by key, when the informer
 * no longer holds the object), and clears the store when its controller
 * stops (a new leader signs for itself). Memory only: after a restart, or
 * on another replica that takes the lead, a request whose write never
 * succeeded is signed again. Avoiding that would need a write before the
 * signature (an annotation or a condition recording intent plus the
 * serial), which costs every request an extra write; not done.
 *
 * Threads: every function may be called from any thread (one mutex).
 */
#ifndef SG_KUBEKEEP_H
#define SG_KUBEKEEP_H

#include "sg_error.h"
#include "sg_kubesign.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_KUBEKEEP_MAX 256    /* the signers' default bound */
#define SG_KUBEKEEP_UID_MAX 64 /* Kubernetes UIDs are 36 characters */

typedef struct sg_kubekeep sg_kubekeep;

typedef struct sg_kubekeep_stats {
	uint64_t entries; /* kept now */
	uint64_t kept;    /* results put */
	uint64_t reused;  /* lookups that found one (a signature saved) */
	uint64_t evicted; /* dropped because the store was full */
} sg_kubekeep_stats;

/* An empty store of at most max entries (0: SG_KUBEKEEP_MAX). Caller
 * frees with sg_kubekeep_free. */
SG_API int sg_kubekeep_new(sg_kubekeep **out, size_t max) SG_MUST_CHECK;
SG_API void sg_kubekeep_free(sg_kubekeep *kp); /* accepts NULL */

/* Keeps a copy of res for the request (key, uid, generation), replacing
 * what was kept for the same uid. SG_EINVAL for a missing or oversized
 * key or uid, SG_EINTERNAL out of memory (nothing kept: the request would
 * be signed again). */
SG_API int sg_kubekeep_put(sg_kubekeep *kp, const char *key, const char *uid, int64_t generation,
                           const sg_kubesign_result *res) SG_MUST_CHECK;

/* Whether a result is kept for uid at generation; if so *out is a copy
 * (release with sg_kubesign_result_clear). An entry of that uid at another
 * generation is dropped. false also when the copy cannot be made (out of
 * memory): the caller then signs again. */
SG_API bool sg_kubekeep_get(sg_kubekeep *kp, const char *uid, int64_t generation, sg_kubesign_result *out);

/* Drops what is kept for uid (NULL: nothing), or for the object key. */
SG_API void sg_kubekeep_drop(sg_kubekeep *kp, const char *uid);
SG_API void sg_kubekeep_drop_key(sg_kubekeep *kp, const char *key);

/* Drops everything (a controller's stop). */
SG_API void sg_kubekeep_clear(sg_kubekeep *kp);

SG_API void sg_kubekeep_stats_get(sg_kubekeep *kp, sg_kubekeep_stats *out);

#endif
