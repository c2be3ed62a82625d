/*
 * sg_kubecsr: signet as a Kubernetes signer. It signs certificates.k8s.io/v1
 * CertificateSigningRequests (cluster-scoped) whose spec.signerName is
 *
 *   signetclusterissuers.signet.dev/<name>   the SignetClusterIssuer <name>
 *                                            (sg_signetissuer.h) signs, or
 *   one of the configured aliases (optional) e.g. "example.com/signet" or
 *                                            istiod's per-signer names,
 *                                            "clusterissuers.cert-manager.io/
 *                                            istio-system": each served by
 *                                            the SignetClusterIssuer it is
 *                                            paired with ("default" unless
 *                                            told)
 *
 * with the HSM-held CA the issuer names. Namespaced SignetIssuers cannot
 * sign Kubernetes CSRs (a CSR is cluster-scoped and names no namespace a
 * requester was checked against): an approved CSR whose signerName is
 * signetissuers.signet.dev/<anything> gets a Failed condition saying so
 * (issuer-lib leaves such a CSR alone, which looks like a signer that is
 * down), never a certificate.

 * The contract (Kubernetes' signer contract, with cert-manager's
 * experimental annotations; cert-manager-issuer.md §5):
 *
 *   - another signerName: never written to (no status, no Event), ever;
 *   - signetissuers.signet.dev/<...> (a namespaced issuer), approved, not
 *     Denied, not yet Failed, no certificate: the Failed condition below
 *     with a message that says why; unapproved or denied: left alone;
 *   - Approved=True, not Denied, not Failed, no status.certificate: signed;
 *   - not approved, or Denied: left alone (Kubernetes' own signers do
 *     nothing with a denied request; the approval re-triggers);
 *   - a certificate already there, or Failed: done, left alone;
 *   - issuer missing or not Ready (sg_signetissuer_ready), its spec not
 *     valid or its CA not one of ours: left as it is, signed as soon as the
 *     issuer is Ready (an issuer change re-queues the CSRs that name it,
 *     and each waiting CSR is looked at again every
 *     SG_KUBECSR_RECHECK_MS); one Warning Event IssuerNotReady per CSR
 *     (remembered for the last SG_KUBECSR_WARNED_MAX CSRs of this run);
 *   - permanent problems (spec.request not base64 or not a CSR, an
 *     unknown usage, "cert sign" on a leaf, request-is-ca on an issuer
 *     without allowCA, a request-duration annotation that is not a Go
 *     duration, a CSR the signer's profile refuses): condition
 *     {type Failed, status True, reason SignerValidationFailure, message
 *     <why>} and a Warning Event Failed; nobody retries;
 *   - retryable problems (HSM busy or failing, signer queue full, the
 *     API server): nothing written, retried with the runtime's per-key
 *     backoff;
 *   - a pass over a CSR whose certificate this signer has written but
 *     whose cached copy does not show it yet (the watch behind our own
 *     write; a certificate, once set, never changes in Kubernetes): nothing
 *     signed, looked at again after SG_KUBECSR_BEHIND_MS (the write's own
 *     event comes first, as a rule); remembered for the last
 *     SG_KUBECSR_WRITTEN_MAX writes;
 *   - a status write refused with 409 whose live object already holds the
 *     very certificate it carried (our write took; its answer was lost on
 *     the way): issued, not lost;
 *   - success: status.certificate = the leaf then the intermediates (PEM;
 *     base64 in JSON), as issuer-lib writes it: Kubernetes calls it "the
 *     issued certificate chain", and the root is the trust anchor that
 *     clients get elsewhere (a root in the chain would be trusted by
 *     nobody for being there). A Normal Event Issued names the serial,
 *     the end of validity and the real lifetime.
 *
 * What is signed: the signer's generic profile (subject and SANs
 * re-encoded from the CSR, never its extensions) with the usages of
 * spec.usages (required by Kubernetes; sg_kubesign_usages) exactly as
 * asked, whatever the key type, or, with the
 * annotation experimental.cert-manager.io/request-is-ca: "true" on an
 * issuer with allowCA, the intermediate profile. The CSR's own keyUsage and
 * basicConstraints are not compared with the request (Kubernetes has no
 * such rule; the certificate says what the request says).
 *
 * Validity, in cert-manager's precedence
 * (pki.DurationFromCertificateSigningRequest): the annotation
 * experimental.cert-manager.io/request-duration when the CSR has it (a Go
 * duration; any other value, the empty string too, is a permanent
 * problem), else spec.expirationSeconds (Kubernetes >= 1.22), else the
 * issuer's defaultDuration. The annotation comes first because it
 * predates the field: istiod 1.12 to 1.18 set only the annotation, 1.19
 * and later only the field (sg_kubecsr_duration). Kubernetes allows a signer to issue
 * a shorter certificate than asked, so a request outside the issuer's
 * [minDuration, maxDuration] is clamped into it (and to at least
 * SG_KUBESIGN_MIN_DURATION) instead of refused, as the cert-manager
 * issuer does (sg_signetissuer_duration); the CA's own end cuts it
 * further. The Issued Event names the real lifetime, and the duration
 * asked when the clamp changed it.

 * Status writes are PUTs of the status subresource carrying the
 * resourceVersion the decision was made on (not server-side apply: CSR
 * conditions have no observedGeneration and the Approved condition is
 * the approver's). Exactly once: the controller runs on the leader only
 * (the daemon's table), and only one worker holds a CSR at a time; the
 * decision is taken from the informer's cache and checked against it
 * again just before the HSM signs; a write refused with 409 (a stale
 * cache) is followed by a live GET, and a CSR that has a certificate or
 * Failed by then is left alone (another replica or an earlier attempt
 * won); otherwise the certificate already signed is written to the live
 * object. A write that fails otherwise (refused, timed out) keeps the
 * certificate by the CSR's UID (sg_kubekeep.h): the retry writes it and
 * never signs again; it is dropped once written, or when the CSR is done,
 * gone, or the signer stops. A restart lists afresh and skips every CSR
 * that has a certificate. A certificate signed when the leader stops
 * before its write is dropped (never delivered), and the next leader
 * signs anew (nothing is kept across processes).
 *
 * Ownership: the client and the CAs (and their appliances) are borrowed
 * and must outlive the signer; strings in the options are copied.
 *
 * Threads (between start and stop): two informers (CSRs, and
 * SignetClusterIssuers, whose CRD must be installed: until it is, the
 * issuer informer does not list and nothing is signed), each with its own
 * thread, and `workers` workers that take CSR names from the runtime's
 * de-duplicated queue; each signature waits for the signer pool on the
 * worker (at most SG_KUBECSR_SIGN_TIMEOUT_MS). Stats may be read from any
 * thread.
 *
 * Kubernetes RBAC the client needs:
 *   certificates.k8s.io certificatesigningrequests get, list, watch;
 *   certificates.k8s.io certificatesigningrequests/status update;
 *   certificates.k8s.io signers sign, resourceNames the prefix with a
 *     wildcard (SG_KUBECSR_SIGNER_PREFIX followed by '*', or one name per
 *     issuer) and each alias (writing a Failed condition needs no "sign");
 *   signet.dev signetclusterissuers get, list, watch;
 *   "" events create.
 */
#ifndef SG_KUBECSR_H
#define SG_KUBECSR_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"
#include "sg_kubesign.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_KUBECSR_SIGNER_PREFIX "signetclusterissuers.signet.dev/"
#define SG_KUBECSR_NAMESPACED_PREFIX "signetissuers.signet.dev/" /* refused with a Failed condition */
#define SG_KUBECSR_ALIAS_ISSUER "default"                        /* the issuer that serves an alias unless told */
#define SG_KUBECSR_ALIASES_MAX 16
#define SG_KUBECSR_ANNOTATION_DURATION "experimental.cert-manager.io/request-duration"
#define SG_KUBECSR_ANNOTATION_IS_CA "experimental.cert-manager.io/request-is-ca"
#define SG_KUBECSR_FAILED_REASON "SignerValidationFailure"
#define SG_KUBECSR_WORKERS 2
#define SG_KUBECSR_SIGN_TIMEOUT_MS 30000u
#define SG_KUBECSR_RECHECK_MS 60000u   /* a CSR waiting for its issuer is looked at again after this */
#define SG_KUBECSR_WARNED_MAX 512      /* CSRs whose IssuerNotReady Event is remembered */
#define SG_KUBECSR_WRITTEN_MAX 256     /* CSRs whose certificate this signer wrote, remembered (a ring) */
#define SG_KUBECSR_BEHIND_MS 1000u     /* a CSR seen before our own write reached the cache: again after this */
#define SG_KUBECSR_SIGNER_NAME_MAX 571 /* Kubernetes: 253 (domain) + 1 + 317 (path) */

typedef struct sg_kubecsr sg_kubecsr;

typedef struct sg_kubecsr_options {
	sg_kube *kube;             /* borrowed; must outlive the signer */
	const sg_kubesign_ca *cas; /* borrowed: the CAs issuers may name */
	size_t ncas;
	/* Optional: more signerNames to serve, a comma-separated list of
	 * "<signerName>[=<SignetClusterIssuer>]" (at most
	 * SG_KUBECSR_ALIASES_MAX, blanks around the items ignored), each
	 * "<domain>/<path>" as Kubernetes validates it (domain a DNS subdomain
	 * with a dot; path DNS-subdomain labels), not under
	 * SG_KUBECSR_SIGNER_PREFIX nor SG_KUBECSR_NAMESPACED_PREFIX, none
	 * twice; an item without "=" is served by alias_issuer. NULL or "":
	 * none. */
	const char *aliases;
	const char *alias_issuer; /* serves aliases named without one; NULL: SG_KUBECSR_ALIAS_ISSUER */
	unsigned workers;         /* concurrent reconciles; 0: SG_KUBECSR_WORKERS */
} sg_kubecsr_options;

typedef struct sg_kubecsr_stats {
	uint64_t issued;  /* CSRs signed and their certificate written */
	uint64_t failed;  /* CSRs written Failed (permanent problems) */
	uint64_t waiting; /* passes that found the issuer missing or not Ready (each looked at again) */
	uint64_t skipped; /* passes over CSRs of ours with nothing to do: not approved, denied, done, gone */
	uint64_t foreign; /* events of CSRs for other signers, dropped before the queue */
	uint64_t rereads; /* live GETs after a status write refused with 409 */
	uint64_t lost;    /* signed, then found done by someone else before our write: not written */
	uint64_t signatures; /* certificates signed (one per CSR, however often its write is retried) */
	uint64_t reused;     /* certificates written that were kept from an earlier, failed write */
	uint64_t behind;     /* passes that found a CSR as it was before our own write (the watch behind): not signed */
	uint64_t kept;       /* now: signed and not yet written (sg_kubekeep.h) */
	uint64_t errors;  /* failed reconciles (each retried with backoff) */
	uint64_t queued;  /* CSRs waiting now, including those backing off or waiting for an issuer */
} sg_kubecsr_stats;

/* Creates a stopped signer (runtime name "kubecsr"). SG_EINVAL names a
 * bad option (no client, no CA, an alias that is not a signerName, is
 * under one of signet's own prefixes or comes twice, too many aliases, an
 * issuer that is not an object name, too many workers). Caller frees with
 * sg_kubecsr_free. */
SG_API int sg_kubecsr_new(sg_kubecsr **out, const sg_kubecsr_options *o) SG_MUST_CHECK;

/* The runtime's controller (borrowed): the daemon's table row, and how to
 * run the signer. sg_ctrl_start (call it when this process leads) lists
 * afresh, looks at every CSR of ours once and follows events; it returns
 * at once. sg_ctrl_stop: no write after the workers have seen the stop;
 * it returns once they are joined (at most one request or one signature
 * each) and the informers are gone; another start may follow. */
SG_API sg_ctrl *sg_kubecsr_controller(sg_kubecsr *k);

/* Counters since sg_kubecsr_new (queued: now). Any thread. */
SG_API void sg_kubecsr_stats_get(sg_kubecsr *k, sg_kubecsr_stats *out);

/* The validity csr (a certificates.k8s.io/v1 object) asks for, in whole
 * seconds, in cert-manager's precedence (above): the request-duration
 * annotation when present, else spec.expirationSeconds when positive,
 * else 0 (none: the issuer's default). SG_EINVAL, naming the annotation,
 * when the annotation is there and not a Go duration (the CSR's fault). */
SG_API int sg_kubecsr_duration(const json_t *csr, int64_t *seconds) SG_MUST_CHECK;

/* Stops and frees; accepts NULL. */
SG_API void sg_kubecsr_free(sg_kubecsr *k);

#endif
