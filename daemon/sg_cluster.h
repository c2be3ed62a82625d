/*
 * sg_cluster: signetd's Kubernetes side. It owns the API client and puts
 * together what the daemon needs from a cluster:
 *
 *   authentication  a TokenReview authenticator (cached, coalesced), or for
 *                   jwks mode the cluster's keys discovered through the API
 *                   server, with the bound-token check (the token's
 *                   ServiceAccount and Pod must still exist);
 *   authorization   node authorization of impersonation (a trusted node
 *                   agent may only ask for identities of pods on its node);
 *   writers         the istio-ca-root-cert ConfigMaps, istiod's
 *                   certificate Secret, the SignetIssuer/SignetClusterIssuer
 *                   status, cert-manager CertificateRequests and Kubernetes
 *                   CSRs, run only by the replica that holds the
 *                   leader-election Lease (every replica serves gRPC).
 *
 * A cluster is "configured" when --kubeconfig is set, $KUBECONFIG is set,
 * or signetd runs in a pod ($KUBERNETES_SERVICE_HOST); otherwise signetd
 * runs standalone and none of this exists.
 *
 * Lifecycle: new (client, checks the API answers) -> authenticator /
 * impersonation hook handed to the request path -> start (informers, the
 * elector or the writers) -> set_root whenever the root bundle changes ->
 * free (stops writers first, releases the Lease, then the rest).
 */
#ifndef SG_CLUSTER_H
#define SG_CLUSTER_H

#include "sg_appliance.h"
#include "sg_authn.h"
#include "sg_daemon_settings.h"
#include "sg_error.h"
#include "sg_forward.h"
#include "sg_kubesign.h"
#include "sg_metrics.h"
#include "sg_pool.h"

#include <stdbool.h>
#include <stddef.h>

#define SG_CLUSTER_CAS_MAX 16 /* "default" and the issuer-cas */

typedef struct sg_cluster sg_cluster;

typedef struct sg_cluster_options {
	const sg_settings *settings;      /* borrowed for the cluster's life */
	const sg_daemon_settings *daemon; /* borrowed for the cluster's life */
	sg_pool *pool;                    /* signs istiod's certificate (NULL without an HSM) */
	sg_appliance *app;                /* the CA "default": signs for SignetIssuers and Kubernetes CSRs
	                                   * (NULL without an HSM: then those writers must be off) */
	const sg_kubesign_ca *extra_cas;  /* more CAs issuers may name (issuer-cas); borrowed, copied */
	size_t n_extra_cas;
	const char *root_pem;             /* the root bundle now (copied) */
	size_t root_len;
	const char *const *audiences;     /* token audiences (copied) */
	size_t n_audiences;
} sg_cluster_options;

/* Whether the settings and environment name a Kubernetes API. */
SG_API bool sg_cluster_configured(const sg_daemon_settings *d);
/* Whether the settings make signetd read Secrets that may hold a key: the
 * istiod serving certificate's (istiod-cert-enabled, an informer's cached
 * copy), the RA's root Secret (istiod-ra-root-secret; istio's cacerts
 * holds ca-key.pem) or the external policy servers' (their client keys).
 * signetd then makes jansson clear what it frees (sg_kube_json_wipe_frees);
 * otherwise its token parsing keeps the plain free. */
SG_API bool sg_cluster_reads_secrets(const sg_daemon_settings *d);

/* Loads the configuration, creates the client and the parts the settings
 * ask for (nothing runs yet). Caller frees with sg_cluster_free. */
SG_API int sg_cluster_new(sg_cluster **out, const sg_cluster_options *o) SG_MUST_CHECK;

/* The token authenticator the settings select (tokenreview, or jwks with
 * keys from jwt-jwks-file or the API server, plus the bound-token check).
 * *out is the caller's (free with out->free(out->self)); it borrows the
 * cluster, which must outlive it. method names what was chosen. */
SG_API int sg_cluster_authenticator(sg_cluster *c, sg_authenticator *out, const char **method) SG_MUST_CHECK;

/* The grant's impersonation hook (sg_grant_options.authorize_impersonation
 * with arg = the cluster): node authorization against the pod index. */
SG_API int sg_cluster_authorize_impersonation(void *cluster, const sg_caller *caller, const char *target_ns,
					      const char *target_sa);

/* Starts informers (waiting up to a few seconds for the first list) and
 * the leader elector, or the writers directly when leader-election is
 * off. */
SG_API int sg_cluster_start(sg_cluster *c) SG_MUST_CHECK;

/* Once a second from the daemon's housekeeping: retries a writer that
 * failed to start while this replica leads. */
SG_API void sg_cluster_tick(sg_cluster *c);

/* A new root bundle (copied): the writers converge to it. Any thread. */
SG_API void sg_cluster_set_root(sg_cluster *c, const char *pem, size_t len);

/* RA mode (issuer-name set): the forwarder that turns workload CSRs into
 * cert-manager CertificateRequests (sg_forward.h), with a client of its
 * own; NULL when signet signs itself. Owned by the cluster, which must be
 * freed only once no call uses it (after the gRPC server's shutdown). */
SG_API sg_forward *sg_cluster_forwarder(sg_cluster *c);

/* Gauges and counters under signet_kube_* / signet_leader. */
SG_API int sg_cluster_metrics(sg_cluster *c, sg_metrics *reg) SG_MUST_CHECK;

SG_API bool sg_cluster_is_leader(sg_cluster *c);

/* Stops the writers (releasing the Lease), the informers and workers, and
 * frees. Authenticators obtained from the cluster must be freed first.
 * Accepts NULL. */
SG_API void sg_cluster_free(sg_cluster *c);

#endif
