/*
 * sg_cmissuer: signet as a cert-manager external issuer. It signs
 * cert-manager.io/v1 CertificateRequests whose spec.issuerRef names one of
 * signet's issuers (sg_signetissuer.h) with the HSM-held CA the issuer
 * names, following cert-manager's external-issuer contract:
 *
 *   - ours only when issuerRef.group is exactly "signet.dev" (an empty
 *     group is cert-manager's own, never ours) and the kind is
 *     SignetIssuer (also when empty; looked up in the request's namespace)
 *     or SignetClusterIssuer; every other request is never written to;
 *   - Denied=True: never signed; Ready=False reason Denied ("The
 *     CertificateRequest was denied by an approval controller") and
 *     failureTime, once;
 *   - neither Approved nor Denied: left alone (the approval re-triggers);
 *   - Ready=True, Ready reason Failed or Denied, InvalidRequest=True, or a
 *     certificate already there: terminal, left alone;
 *   - issuer missing or not Ready: Ready=False reason Pending with the
 *     reason in the message (an Event when it turns Pending), and signed
 *     as soon as the issuer is Ready (issuer changes re-queue the
 *     requests that name it);
 *   - permanent problems (undecodable request or CSR, a CSR whose
 *     basicConstraints, keyUsage or extKeyUsage disagree with spec.isCA and
 *     spec.usages, isCA on an issuer without allowCA,
 *     a CSR the signer's profile refuses): Ready=False reason Failed,
 *     failureTime, a Warning Event; cert-manager makes a new request
 *     after its backoff;
 *   - retryable problems (HSM busy or failing, signer queue full):
 *     Ready=False reason Pending "Failed to sign CertificateRequest, will
 *     retry: ..." and a retry with the runtime's per-key backoff;
 *   - success: one status write carrying status.certificate (leaf and
 *     intermediates, PEM, base64 in JSON), status.ca (the CA's root
 *     bundle) and Ready=True reason Issued ("Certificate fetched from
 *     issuer successfully"), and a CertificateIssued Event naming the
 *     serial, the end of validity and the real lifetime (with the
 *     duration asked when the issuer's range changed it).
 *
 * What is signed: the generic profile of the signer (subject and SANs
 * re-encoded from the CSR) with the usages of spec.usages exactly as asked
 * (every name of cert-manager's KeyUsage enum; keyEncipherment on an EC
 * key too; no extension for a kind not asked), and without spec.usages
 * what cert-manager's CA issuer gives: "digital signature" and "key
 * encipherment", no extended key usage; or with spec.isCA the
 * intermediate profile; validity
 * spec.duration (Go duration; none: the issuer's defaultDuration) brought
 * into the issuer's [minDuration, maxDuration] (an issuer may shorten: a
 * request for cert-manager's default 2160h from an issuer whose
 * maxDuration is 24h is issued for 24h, not failed into cert-manager's
 * retry loop), cut to the CA's own end.
 *
 * Status writes are server-side applies of the status subresource with
 * field manager "signet-certificaterequests" (only the Ready condition and
 * the fields above are ours; Approved/Denied stay the approver's). Each
 * write carries the resourceVersion the decision was made on: one made
 * from a cache that is behind (an Issued write by the leader before us not
 * seen yet) is refused with a conflict, retried, and decided again on
 * what the request says then, so Issued never turns back to Pending.
 *
 * Watching: requests are listed with the field selector
 * spec.issuerRef.group=signet.dev where the API server supports it (CRD
 * selectable fields, cert-manager >= 1.20 on Kubernetes >= 1.31); otherwise
 * all requests are watched and filtered here. The probe runs at every
 * start.
 *
 * Exactly once: the controller runs only on the leader (the daemon's
 * table); every start lists afresh; a certificate signed whose status
 * write then fails is kept by the request's UID (sg_kubekeep.h) and
 * written on the retry, never signed again (dropped once written, or when
 * the request is done, gone, or the controller stops); and a request this
 * process has written is read live before it could be signed again, so a
 * stale cache after our own write never signs twice. Across a restart or
 * a change of leader nothing is kept: a request whose write never
 * succeeded is signed again by the next leader.
 *
 * Kubernetes RBAC: cert-manager.io certificaterequests get, list, watch;
 * certificaterequests/status patch; signet.dev signetissuers and
 * signetclusterissuers get, list, watch; events create. cert-manager's
 * approver (or signet's) needs cert-manager.io signers approve on
 * signetissuers.signet.dev/<any> and signetclusterissuers.signet.dev/<any>
 * (resource names ending in a star).
 */
#ifndef SG_CMISSUER_H
#define SG_CMISSUER_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"
#include "sg_kubesign.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_CMISSUER_WORKERS 4
#define SG_CMISSUER_SIGN_TIMEOUT_MS 30000

typedef struct sg_cmissuer sg_cmissuer;

typedef struct sg_cmissuer_options {
	sg_kube *kube;             /* borrowed; must outlive the controller */
	const sg_kubesign_ca *cas; /* borrowed: the CAs issuers may name */
	size_t ncas;
	unsigned workers; /* concurrent reconciles; 0: SG_CMISSUER_WORKERS */
} sg_cmissuer_options;

typedef struct sg_cmissuer_stats {
	uint64_t issued;   /* requests signed and written Issued */
	uint64_t failed;   /* requests written Failed (permanent) */
	uint64_t denied;   /* Denied requests written Ready=False/Denied */
	uint64_t pending;  /* Pending writes (issuer missing or not ready, retryable errors) */
	uint64_t ignored;  /* reconciles of requests that are not ours, not approved or terminal */
	uint64_t rereads;  /* live reads of a request this process had signed */
	uint64_t signatures; /* certificates signed (one per request, however often its write is retried) */
	uint64_t reused;     /* Issued writes of a certificate kept from an earlier, failed write */
	uint64_t kept;       /* now: certificates signed and not yet written (sg_kubekeep.h) */
	uint64_t conflicts;  /* status writes refused: the request changed since it was read (409) */
	bool field_selector; /* the running controller lists with the field selector */
} sg_cmissuer_stats;

/* Creates a stopped controller (runtime name "certificaterequests").
 * Caller frees with sg_cmissuer_free. */
SG_API int sg_cmissuer_new(sg_cmissuer **out, const sg_cmissuer_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed): the daemon's table row. Each
 * sg_ctrl_start first asks the API server whether it filters requests by
 * issuer group (a LIST with the field selector) and lists with the
 * selector when it does. Its metrics (sg_ctrl_metrics):
 * signet_certificaterequests_total{result}. */
SG_API sg_ctrl *sg_cmissuer_controller(sg_cmissuer *m);
SG_API void sg_cmissuer_stats_get(sg_cmissuer *m, sg_cmissuer_stats *out);
/* Stops and frees; accepts NULL. */
SG_API void sg_cmissuer_free(sg_cmissuer *m);

#endif
