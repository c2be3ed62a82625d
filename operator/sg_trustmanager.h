/*
 * sg_trustmanager: the TrustManager reconciler. A TrustManager
 * (operator.openshift.io/v1alpha1, cluster-scoped, one per cluster named
 * "cluster") asks for trust-manager; signet deploys signet-trust in its
 * place, under trust-manager's object names and with its argument names,
 * so a CR written for OpenShift's cert-manager-operator keeps working
 * (its finalizer name included).
 *
 * What it makes, each labelled (sg_opr_labels, app
 * "cert-manager-trust-manager", owner "cluster"), annotated with
 * spec.controllerConfig.annotations and controlled by the CR
 * (ownerReference; the CR is cluster-scoped, so every object may carry
 * one):
 *   ServiceAccount trust-manager                  (operand namespace)
 *   ClusterRole and ClusterRoleBinding trust-manager: Bundles, their
 *     status and finalizers, namespaces, ConfigMaps, Events; with
 *     Secret targets (secretTargets.policy All, Specific, or Custom, the
 *     shipped operator's name for Specific) also Secrets: read
 *     everywhere, written under any name (All) or only under the
 *     authorized names, sorted
 *   Role and RoleBinding trust-manager             (trust namespace:
 *     Secret sources)
 *   Role and RoleBinding trust-manager:leaderelection (operand namespace:
 *     the Lease; --leader-election-namespace names it)
 *   Service trust-manager-metrics                 (9402)
 *   Service trust-manager                         (443 -> 6443: the Bundle
 *     webhook signet-trust serves, trust/sg_trust_webhook.h)
 *   the webhook's serving certificate, for trust-manager.<ns>.svc:
 *     with cert-manager's CRDs (watched), the design's Issuer
 *     trust-manager (selfSigned) and Certificate trust-manager (Secret
 *     trust-manager-tls, cert-manager's); without, Secret
 *     trust-manager-tls of our own (a self-signed P-256 certificate for a
 *     year, made again after two thirds of it; ca.crt the new one and the
 *     previous one while valid)
 *   ConfigMap trust-manager-default-ca-injection  (defaultCAPackage
 *     Enabled, source OpenShift, the design's: no data of ours, label
 *     config.openshift.io/inject-trusted-cabundle "true", so OpenShift's
 *     network operator writes the cluster's trusted CA bundle into its key
 *     ca-bundle.crt; until it has, the CR is Ready=False/Progressing
 *     saying so, and nothing else is applied)
 *   ConfigMap trust-manager-default-ca-package    (defaultCAPackage
 *     Enabled: the package file, mounted at /packages, made from the
 *     injected bundle (cert-manager-package-openshift.json, version the
 *     injection ConfigMap's resourceVersion, so it is made again whenever
 *     that changes) or, with source file, from the options' CA bundle
 *     (cert-manager-package-debian.json, Debian's); the pod template's
 *     operator.openshift.io/default-ca-package-hash annotation is the
 *     SHA-256 of its PEM, so pods roll when the certificates change)
 *   Deployment trust-manager                      (1 replica, non-root,
 *     read-only root file system, no capabilities, RuntimeDefault seccomp,
 *     probes /readyz and /healthz on 6060; trust-manager-tls at /tls)
 *   ValidatingWebhookConfiguration trust-manager  (last; trust-manager's:
 *     webhook trust.cert-manager.io, Bundle CREATE and UPDATE, Fail; its
 *     caBundle cert-manager's CA injector's (annotation
 *     cert-manager.io/inject-ca-from) or ours, the Secret's ca.crt)
 * Objects no longer wanted (the package after policy Disabled) are deleted.
 *
 * What the 1.20 API server cannot check (the CRD's CEL rules) is checked
 * here and reported as Ready=False/InvalidSpec with nothing applied: the
 * name "cluster", authorizedSecrets non-empty exactly with policy Specific
 * or Custom, and the syntax of controllerConfig's labels and annotations.
 * The trust namespace may change (the design's rule; the shipped operator
 * makes it immutable): the accepted value is kept in status.trustNamespace,
 * the namespace is created when missing (never deleted), and the Role and
 * RoleBinding in the old one go. An operand namespace that does not exist
 * is Degraded (reason Failed) until it appears: namespaces are watched.
 *
 * Status (written only when it changes): trustManagerImage,
 * trustNamespace, secretTargetsPolicy, defaultCAPackagePolicy,
 * filterExpiredCertificatesPolicy and Ready/Progressing/Degraded with
 * observedGeneration, Ready=True only when the Deployment is current and
 * available (sg_opr_operand_state). Deleting the CR deletes every object
 * made for it (never the trust namespace, Bundles or user Secrets), then
 * its finalizer.
 *
 * Writes happen only for a difference (sg_opr_apply against the informers'
 * caches, and with cert-manager a read of its Issuer and Certificate),
 * so a quiet cluster sees none; every one is counted.
 *
 * Threads: the runtime's workers; ownership as in sg_ctrl.h.
 */
#ifndef SG_TRUSTMANAGER_H
#define SG_TRUSTMANAGER_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"
#include "sg_metrics.h"

#include <stdint.h>

#define SG_TRUSTMANAGER_NAME "cluster"
#define SG_TRUSTMANAGER_FINALIZER "trustmanager.openshift.operator.io/cert-manager-trust-manager-controller"
#define SG_TRUSTMANAGER_APP "cert-manager-trust-manager"
/* The default CA package's name (and file name, with ".json") by source. */
#define SG_TRUSTMANAGER_PACKAGE_OPENSHIFT "cert-manager-package-openshift"
#define SG_TRUSTMANAGER_PACKAGE_DEBIAN "cert-manager-package-debian"
/* OpenShift's trusted CA bundle injection (the Cluster Network Operator's
 * contract): a ConfigMap with the label gets the bundle in the key. */
#define SG_TRUSTMANAGER_INJECTION_CM "trust-manager-default-ca-injection"
#define SG_TRUSTMANAGER_INJECT_LABEL "config.openshift.io/inject-trusted-cabundle"
#define SG_TRUSTMANAGER_INJECTED_KEY "ca-bundle.crt"
#define SG_TRUSTMANAGER_PACKAGE_HASH "operator.openshift.io/default-ca-package-hash"

typedef struct sg_trustmanager sg_trustmanager;

/* Where the default CA package's certificates come from. */
typedef enum sg_trustmanager_ca_source {
	SG_TRUSTMANAGER_CA_OPENSHIFT, /* the cluster's trusted CA bundle, injected (the design's) */
	SG_TRUSTMANAGER_CA_FILE,      /* ca_bundle_path: Debian's bundle, off OpenShift */
} sg_trustmanager_ca_source;

typedef struct sg_trustmanager_options {
	sg_kube *kube;                 /* borrowed; must outlive the reconciler */
	const char *image;             /* signet-trust image (RELATED_IMAGE_SIGNET_TRUST); required */
	const char *version;           /* app.kubernetes.io/version label value; NULL: "unknown" */
	const char *operand_namespace; /* where signet-trust runs; NULL: "cert-manager" */
	/* The default CA package's source (0: OpenShift's injection); with
	 * source file, the PEM of the default CAs (Debian's
	 * /etc/ssl/certs/ca-certificates.crt) and the package's version (e.g.
	 * ca-certificates'; NULL: from its SHA-256). */
	sg_trustmanager_ca_source ca_source;
	const char *ca_bundle_path;
	const char *ca_bundle_version;
	unsigned workers;              /* 0: 1 */
} sg_trustmanager_options;

typedef struct sg_trustmanager_stats {
	uint64_t writes;        /* every API write: applies, deletes, finalizer patches, status */
	uint64_t created;       /* objects that did not exist */
	uint64_t repaired;      /* objects that existed and were applied again */
	uint64_t deleted;       /* objects deleted */
	uint64_t status_writes; /* TrustManager status writes (in writes too) */
	uint64_t conflicts;     /* webhook Secret writes refused: it had been written since it was read */
} sg_trustmanager_stats;

/* Checks the options, makes the default CA package from ca_bundle_path
 * with source file (a missing or bad file is not an error here: a
 * TrustManager that enables the package is then Degraded saying why; an
 * injected bundle that cannot be used is reported alike) and creates the
 * stopped controller "trustmanager" (field manager "signet-operator").
 * Caller frees with sg_trustmanager_free. */
SG_API int sg_trustmanager_new(sg_trustmanager **out, const sg_trustmanager_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed), for a table row or start/stop; its
 * metrics (sg_ctrl_metrics) are signet_operator_trustmanager_{writes,
 * created,repaired,deleted,status_writes,conflicts}_total. */
SG_API sg_ctrl *sg_trustmanager_controller(sg_trustmanager *t);
SG_API void sg_trustmanager_stats_get(sg_trustmanager *t, sg_trustmanager_stats *out);
/* Stops and frees; accepts NULL. */
SG_API void sg_trustmanager_free(sg_trustmanager *t);

#endif
