/*
 * sg_istiocsr: the IstioCSR reconciler. An IstioCSR (operator.openshift.io/
 * v1alpha1, name "default", one per cluster) asks for istio-csr in its
 * namespace; signet deploys signetd in its place, under istio-csr's object
 * names (Service cert-manager-istio-csr, so CA_ADDR stays what the mesh
 * already uses) and with istio-csr's argument names.
 *
 * What it makes, each labelled (sg_opr_labels) and, in the IstioCSR's
 * namespace, owned by the CR:
 *   ServiceAccount, Services (gRPC spec.port -> 6443, metrics 9402), four
 *   NetworkPolicies (deny all; egress to the API server; ingress to gRPC
 *   and metrics) and a fifth, egress to a network HSM, when the HSM
 *   Secret's key hsm-egress names its addresses (signet mode), a
 *   ClusterRole and ClusterRoleBinding (cert-manager-istio-csr-<namespace>),
 *   Roles and RoleBindings in the
 *   istio namespace (leases and events; CertificateRequests when a
 *   cert-manager issuer signs; istiod's Secret when signetd issues it),
 *   istiod's certificate (a cert-manager Certificate "istiod" when a
 *   cert-manager issuer signs, else signetd's own istiod-tls issuance),
 *   the CA copy ConfigMap (cert-manager-istio-csr-issuer-ca-copy) and the
 *   Deployment cert-manager-istio-csr.
 *
 * HSM and CA material, when signet's own issuer signs: a Secret in the
 * IstioCSR's namespace (options hsm_secret, default "signet-hsm") holds
 * signetd.conf (hsm-module, hsm-token, hsm-key, pin-file, ca-cert, ...
 * with paths under /etc/signet/hsm/) and the files it names; it is
 * mounted read-only there and named by --config, so no PIN is ever an
 * argument or an environment value. When a cert-manager issuer signs (RA
 * mode) no Secret is read: signetd runs with --hsm=false, a pure RA whose
 * serving certificate is the issuer's too, and the issuer's CA alone is
 * the CA copy, which becomes --root-ca-file.
 *
 * Validation the CRD cannot express on every API server (its CEL rules)
 * is done here and reported as Ready=False/InvalidSpec; immutable fields
 * are remembered in an annotation at the first accepted reconcile.
 *
 * Threads: the runtime's workers; ownership as in sg_ctrl.h.
 */
#ifndef SG_ISTIOCSR_H
#define SG_ISTIOCSR_H

#include "sg_ctrl.h"
#include "sg_metrics.h"

typedef struct sg_istiocsr sg_istiocsr;

typedef struct sg_istiocsr_options {
	sg_kube *kube;          /* borrowed */
	const char *image;      /* signetd's image (RELATED_IMAGE_SIGNETD) */
	const char *version;    /* app.kubernetes.io/version */
	const char *hsm_secret; /* NULL: "signet-hsm" */
	unsigned workers;       /* 0: 1 */
} sg_istiocsr_options;

SG_API int sg_istiocsr_new(sg_istiocsr **out, const sg_istiocsr_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed), for a table row; its metrics
 * (sg_ctrl_metrics) are signet_operator_istiocsr_*_total. */
SG_API sg_ctrl *sg_istiocsr_controller(sg_istiocsr *t);
/* Writes made so far (applies, patches, deletes, status writes). */
SG_API uint64_t sg_istiocsr_writes(sg_istiocsr *t);
SG_API void sg_istiocsr_free(sg_istiocsr *t);

#endif
