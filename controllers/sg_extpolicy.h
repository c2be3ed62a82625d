/*
 * sg_extpolicy: the CertificateRequest Policy design's ExternalPolicyServer
 * objects (policy.cert-manager.io/v1alpha1, cluster-scoped): a policy
 * server a CertificateRequestPolicy lists by name in
 * spec.externalPolicyServers. This controller reads each object, resolves
 * its CA bundle, hands endpoint and bundle to the caller (signetd's
 * sg_policyserver, which calls the servers for the approver) and writes the
 * object's Ready condition.
 *
 * An object:
 *   spec.endpoint   host[:port] of the gRPC server (TLS; port 443 when
 *                   none is written), e.g. "policy.cert-manager" for a
 *                   Service reached through the cluster's DNS search path;
 *   spec.caBundle   exactly one of
 *                     data           base64 of PEM certificates (a Go
 *                                    []byte, as cert-manager's cainjector
 *                                    fills such a field);
 *                     configMapRef   {name, key, namespace}: a ConfigMap's
 *                                    data[key];
 *                     secretRef      {name, key, namespace}: a Secret's
 *                                    data[key];
 *                   key defaults to "ca.crt", namespace to
 *                   sg_extpolicy_options.ns (the objects are cluster-scoped
 *                   and the design's references carry no namespace; as
 *                   cert-manager's cluster resource namespace). The design's
 *                   example also writes configMapRef / secretRef directly
 *                   under spec: read the same way.
 *   annotations     cainjector's, which take the place of caBundle (as the
 *                   injector overwrites the field it owns):
 *                     cert-manager.io/inject-ca-from: [namespace/]certificate
 *                       the Certificate's Secret (spec.secretName), key
 *                       ca.crt, once that Secret names the Certificate in
 *                       cert-manager.io/certificate-name;
 *                     cert-manager.io/inject-ca-from-secret: [namespace/]secret
 *                       that Secret's ca.crt, when the Secret allows it
 *                       (cert-manager.io/allow-direct-injection: "true");
 *                     cert-manager.io/inject-apiserver-ca: "true"
 *                       the CA this client verifies the API server with.
 *                   More than one of them is refused.
 *
 * Ready: True ("Ready") once the endpoint and a bundle of PEM certificates
 * are in hand; False with reason "InvalidSpec" (a spec or annotation that
 * cannot be used, the endpoint or bundle refused), "CABundleMissing" (no
 * bundle given, or its source not there yet: the design's "may be empty";
 * policies listing the object then evaluate nothing and retry) or
 * "CABundleUnavailable" (the source could not be read: RBAC, the API
 * server). Every object is read again every recheck interval (the design's
 * "periodically checked"): a changed ConfigMap or Secret is picked up
 * without a watch on every Secret of the cluster.
 *
 * Threads: the runtime's (kube/ctrl). The callbacks run on its workers,
 * one object at a time per name.
 */
#ifndef SG_EXTPOLICY_H
#define SG_EXTPOLICY_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"

#include <stdbool.h>
#include <stddef.h>

#define SG_EXTPOLICY_RECHECK_DEFAULT_S 60
#define SG_EXTPOLICY_WAIT_RECHECK_S 10 /* while a bundle's source is missing */
#define SG_EXTPOLICY_CA_MAX (1u << 20) /* bytes of a CA bundle */

typedef struct sg_extpolicy sg_extpolicy;

typedef struct sg_extpolicy_options {
	sg_kube *kube;  /* borrowed; must outlive the controller */
	const char *ns; /* the namespace of references written without one; copied */
	/* An object as read: endpoint as written, the bundle's PEM (ca_len
	 * 0: none yet). SG_OK, or an error whose detail says why the server
	 * cannot be used (the Ready message); *changed whether anything
	 * differs from the last call for name. */
	int (*set)(void *arg, const char *name, const char *endpoint, const char *ca, size_t ca_len, bool *changed);
	/* The object is gone. */
	void (*remove)(void *arg, const char *name);
	/* Optional: forget every object (each start, before the objects are
	 * listed again: one deleted while another replica led is not kept). */
	void (*clear)(void *arg);
	void *arg;
	unsigned recheck_seconds; /* 0: SG_EXTPOLICY_RECHECK_DEFAULT_S */
} sg_extpolicy_options;

/* SG_EINVAL without kube, ns or the callbacks. Caller frees with
 * sg_extpolicy_free. */
SG_API int sg_extpolicy_new(sg_extpolicy **out, const sg_extpolicy_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed), for a table row. */
SG_API sg_ctrl *sg_extpolicy_controller(sg_extpolicy *e);
/* Stops and frees; accepts NULL. */
SG_API void sg_extpolicy_free(sg_extpolicy *e);

#endif
