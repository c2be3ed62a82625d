/*
 * sg_signetissuer: signet's issuer kinds (API group signet.dev, version
 * v1alpha1), the namespaced SignetIssuer and the cluster-scoped
 * SignetClusterIssuer, and the controller that keeps their status.
 *
 * An issuer names one of signetd's CAs and the limits of what it signs:
 *
 *   spec.caName           which CA signs ("default": signetctl init's)
 *   spec.defaultDuration  a Go duration, for requests that name none
 *                         (absent: cert-manager's 90 days, "2160h", brought
 *                         into [minDuration, maxDuration] when they are set)
 *   spec.minDuration      shortest duration it signs ("1h")
 *   spec.maxDuration      longest ("" or absent: up to the CA's own end)
 *   spec.allowCA          whether it signs CA certificates (false)
 *
 * A request asking for a duration outside [minDuration, maxDuration] is
 * issued with the nearest bound (sg_signetissuer_duration): cert-manager's
 * API lets an issuer ignore spec.duration and Kubernetes lets a signer
 * issue shorter than asked, and refusing would only start a retry loop
 * (cert-manager asks 2160h by default and would ask again after its
 * backoff). The certificate's real lifetime is in its Issued Event.
 *
 * Both the cert-manager issuer (sg_cmissuer.h, CertificateRequests whose
 * issuerRef names one of these) and the Kubernetes CSR signer
 * (sg_kubecsr.h, signerName signetclusterissuers.signet.dev/<name>) sign
 * only for an issuer whose Ready condition is True and speaks of its
 * current generation.
 *
 * The controller ("issuers", leader-only) writes status.conditions[Ready]
 * with observedGeneration: True, reason Checked, while the spec is valid
 * and its CA is usable (sg_kubesign_ca_usable: HSM answering, CA chain
 * inside its validity); False with reason InvalidSpec, CANotFound or
 * CAUnusable and a message saying what is wrong otherwise. It checks every
 * issuer again every check_interval seconds (and on every change), so an
 * HSM that fails or a chain that expires turns the issuers not Ready, and
 * back when it recovers. Events: Ready transitions (Normal Checked,
 * Warning NotReady).
 *
 * Kubernetes RBAC: signet.dev signetissuers, signetclusterissuers get,
 * list, watch; their /status patch; events create.
 */
#ifndef SG_SIGNETISSUER_H
#define SG_SIGNETISSUER_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"
#include "sg_kubesign.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_SIGNETISSUER_GROUP "signet.dev"
#define SG_SIGNETISSUER_VERSION "v1alpha1"
#define SG_SIGNETISSUER_KIND "SignetIssuer"
#define SG_SIGNETISSUER_CLUSTER_KIND "SignetClusterIssuer"
#define SG_SIGNETISSUER_RESOURCE "signetissuers"
#define SG_SIGNETISSUER_CLUSTER_RESOURCE "signetclusterissuers"
#define SG_SIGNETISSUER_CHECK_INTERVAL 30 /* seconds */

/* What an issuer's spec says, with the defaults applied. */
typedef struct sg_signetissuer_spec {
	char ca_name[SG_KUBESIGN_CA_NAME_MAX + 1];
	int64_t default_duration; /* seconds */
	int64_t min_duration;
	int64_t max_duration; /* 0: no limit but the CA's */
	bool allow_ca;
} sg_signetissuer_spec;

/* Reads obj's spec (an issuer object of either kind). SG_EINVAL names the
 * field that is wrong (a duration that does not parse, min > max, a
 * defaultDuration given outside [min, max], a caName that is not a DNS
 * label). An absent defaultDuration is 90 days brought into [min, max]. */
SG_API int sg_signetissuer_spec_parse(const json_t *obj, sg_signetissuer_spec *out) SG_MUST_CHECK;

/* Whether obj may sign now: its Ready condition is True and its
 * observedGeneration is at least metadata.generation. Otherwise false,
 * with why (cap bytes) in cert-manager's words: "Waiting for issuer to
 * become ready. Current issuer ready condition: <none>." / "... is
 * outdated." / "... is \"<reason>\": <message>.". */
SG_API bool sg_signetissuer_ready(const json_t *obj, char *why, size_t cap);

/* What to issue for a requested duration (seconds; <= 0: none asked, the
 * issuer's default): the request brought into [minDuration, maxDuration]
 * (no upper bound without a maxDuration; the CA's own end cuts further
 * when signing). */
SG_API int64_t sg_signetissuer_duration(const sg_signetissuer_spec *spec, int64_t requested);

/* Says in out (cap bytes; >= 128 is enough) how the duration issued
 * relates to the one asked: "" when none was asked or it was issued as
 * asked, else " (2160h0m0s asked; the issuer's maxDuration is 24h0m0s)"
 * or the minDuration alike. For Events and logs. */
SG_API void sg_signetissuer_duration_note(const sg_signetissuer_spec *spec, int64_t requested, int64_t issued,
                                          char *out, size_t cap);

typedef struct sg_signetissuer sg_signetissuer;

typedef struct sg_signetissuer_options {
	sg_kube *kube;                  /* borrowed; must outlive the controller */
	const sg_kubesign_ca *cas;      /* borrowed: the CAs issuers may name */
	size_t ncas;
	unsigned check_interval;        /* seconds; 0: SG_SIGNETISSUER_CHECK_INTERVAL */
} sg_signetissuer_options;

typedef struct sg_signetissuer_stats {
	uint64_t ready;     /* checks that found an issuer Ready */
	uint64_t not_ready; /* checks that found one not Ready */
	uint64_t writes;    /* status writes */
	uint64_t checks;    /* reconciles */
} sg_signetissuer_stats;

/* Creates a stopped controller (runtime name "issuers"). Caller frees
 * with sg_signetissuer_free. */
SG_API int sg_signetissuer_new(sg_signetissuer **out, const sg_signetissuer_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed): a table row, started and stopped
 * by sg_ctrl_start and sg_ctrl_stop; its metrics (sg_ctrl_metrics) are
 * signet_issuers_{ready_checks,not_ready_checks,status_writes}_total. */
SG_API sg_ctrl *sg_signetissuer_controller(sg_signetissuer *s);
SG_API void sg_signetissuer_stats_get(sg_signetissuer *s, sg_signetissuer_stats *out);
/* Stops and frees; accepts NULL. */
SG_API void sg_signetissuer_free(sg_signetissuer *s);

#endif
