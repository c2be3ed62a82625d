/*
 * sg_istiodcert: istiod's serving certificate, kept in a kubernetes.io/tls
 * Secret (istiod-tls in istio-system by default) for an istiod whose own CA
 * is disabled, as istio-csr's istiod certificate does. Leader-only: the
 * daemon starts it when it takes the Lease and stops it when it loses it.
 *
 * The certificate (istio-csr's shape):
 *   subject     CN=istiod.<ns>.svc
 *   DNS SANs    istiod.<ns>.svc, istiod-<rev>.<ns>.svc for every revision
 *               other than "default", then the additional DNS names
 *               (duplicates dropped)
 *   URI SAN     spiffe://<trust-domain>/ns/<ns>/sa/istiod-service-account
 *   usages      digitalSignature, keyEncipherment; serverAuth, clientAuth
 *   key         a fresh software key per certificate (RSA >= 2048 bits, or
 *               ECDSA P-256/P-384): it protects transport, not the CA, and
 *               istiod must read it from the Secret anyway
 * issued through the signer pool (profile generic), so it is linted, signed
 * in the HSM and audited like every other certificate.
 *
 * The Secret: type kubernetes.io/tls, tls.crt = leaf + intermediates (PEM),
 * tls.key = the private key (PKCS#8 PEM), ca.crt = the root bundle. Other
 * data keys, labels and annotations someone added are kept.
 *
 * Renewal: when less than renew_before remains, or at 2/3 of the life when
 * renew_before is 0 (also when the CA cut the life shorter than
 * renew_before). Never sooner than SG_ISTIODCERT_MIN_REISSUE seconds after
 * the previous certificate, whatever the CA's validity does, so it cannot
 * spin.
 *
 * Drift: a deleted or edited Secret is written again with the current
 * certificate (no new issuance); a Secret of another type, or an immutable
 * one, is deleted and created. On each start a valid Secret already there
 * (names, key type and size, key matching, chaining to the root bundle, not
 * due) is adopted, so a leadership change or restart does not re-issue.
 * A root bundle change (set_root) rewrites ca.crt, and re-issues only when
 * the current certificate no longer chains to the new bundle.
 *
 * It is a controller on the runtime (sg_ctrl.h), named "istiodcert", with
 * one key (the Secret). Threads (between start and stop): one Secret
 * informer (field selector on the name) and one worker that issues, renews
 * and writes. Failures are retried after 1 s, doubling to 30 s.
 *
 * Kubernetes RBAC the client needs: secrets get/list/watch/create/update/
 * delete in <ns>; events create in <ns>.
 */
#ifndef SG_ISTIODCERT_H
#define SG_ISTIODCERT_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"
#include "sg_pool.h"

#include <stddef.h>
#include <stdint.h>

#define SG_ISTIODCERT_NAMESPACE "istio-system"
#define SG_ISTIODCERT_SECRET "istiod-tls"
#define SG_ISTIODCERT_TRUST_DOMAIN "cluster.local"
#define SG_ISTIODCERT_SERVICE_ACCOUNT "istiod-service-account"
#define SG_ISTIODCERT_DURATION 3600 /* seconds (istio-csr's 1h) */
#define SG_ISTIODCERT_DURATION_MIN 60
#define SG_ISTIODCERT_DURATION_MAX (100LL * 365 * 86400) /* the issuer's TTL limit */
#define SG_ISTIODCERT_MIN_REISSUE 5                      /* seconds between two certificates, at least */
#define SG_ISTIODCERT_ROOT_MAX (512u << 10)              /* root bundle bytes */

typedef struct sg_istiodcert sg_istiodcert;

typedef enum sg_istiodcert_key_algorithm {
	SG_ISTIODCERT_RSA = 0, /* the order of the daemon's "RSA", "ECDSA" choices */
	SG_ISTIODCERT_ECDSA = 1,
} sg_istiodcert_key_algorithm;

typedef struct sg_istiodcert_options {
	sg_kube *kube;                    /* borrowed; must outlive the controller */
	sg_pool *pool;                    /* borrowed; must outlive it too (stop before freeing the pool) */
	const char *ns;                   /* NULL: SG_ISTIODCERT_NAMESPACE */
	const char *secret_name;          /* NULL: SG_ISTIODCERT_SECRET */
	const char *trust_domain;         /* NULL: SG_ISTIODCERT_TRUST_DOMAIN */
	const char *revisions;            /* comma-separated; NULL or "": "default" */
	const char *additional_dns_names; /* comma-separated; may be NULL; "*." prefix allowed */
	int64_t duration;                 /* seconds; 0: SG_ISTIODCERT_DURATION */
	int64_t renew_before;             /* seconds; 0: renew at 2/3 of the life */
	sg_istiodcert_key_algorithm key_algorithm;
	unsigned key_size; /* RSA: 2048..8192 bits (0: 2048); ECDSA: 256 or 384 (0: 256) */
} sg_istiodcert_options;

typedef struct sg_istiodcert_stats {
	uint64_t issued;    /* certificates issued */
	uint64_t adopted;   /* valid certificates taken over from the Secret on start */
	uint64_t creates;   /* Secrets created (after a delete too) */
	uint64_t updates;   /* Secrets replaced (PUT) */
	uint64_t recreates; /* Secrets deleted because of their type or immutability */
	uint64_t unchanged; /* syncs that found the Secret correct */
	uint64_t errors;    /* failed syncs (each retried with backoff) */
	int64_t not_before; /* the current certificate's validity (0: none yet) */
	int64_t not_after;
	int64_t renew_at;        /* wall-clock seconds */
	char serial[2 * 20 + 1]; /* hex; "" when none */
} sg_istiodcert_stats;

/* Creates a stopped controller; checks the options (SG_EINVAL naming the
 * bad one) and the root bundle (PEM with at least one certificate;
 * copied). Strings are copied. Caller frees with sg_istiodcert_free. */
SG_API int sg_istiodcert_new(sg_istiodcert **out, const sg_istiodcert_options *o, const char *root_pem,
                             size_t len) SG_MUST_CHECK;

/* Replaces the root bundle (copied; same rules as for new): ca.crt follows,
 * and the certificate is re-issued if it no longer chains to the bundle.
 * Any thread. */
SG_API int sg_istiodcert_set_root(sg_istiodcert *c, const char *root_pem, size_t len) SG_MUST_CHECK;

/* Counters since sg_istiodcert_new and the current certificate. Any thread. */
SG_API void sg_istiodcert_stats_get(sg_istiodcert *c, sg_istiodcert_stats *out);

/* The runtime's controller (borrowed): the daemon's table row, and how to
 * run it. sg_ctrl_start (call it when this process leads) returns at once;
 * the worker adopts or issues a certificate and writes the Secret once the
 * informer has listed it. sg_ctrl_stop (leadership lost, or shutdown):
 * no write after the worker has seen the stop; it waits for the worker (at
 * most an issuance or the one request in flight) and the informer (about a
 * second); then this module makes no more API calls and no more pool
 * requests. The current certificate is kept in memory for the next
 * start. */
SG_API sg_ctrl *sg_istiodcert_controller(sg_istiodcert *c);

/* Stops and frees (the key is wiped); accepts NULL. */
SG_API void sg_istiodcert_free(sg_istiodcert *c);

#endif
