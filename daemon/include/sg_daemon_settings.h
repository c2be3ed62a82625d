/*
 * sg_daemon_settings: signetd's own settings. They are listed once, as an
 * X-macro, and expanded two ways: as real rows in signetd's table, and as
 * foreign rows in signetctl's, so both programs can read one config file
 * that holds all of them (a foreign row is accepted in the file and
 * ignored). Names follow istio-csr's flags where they exist.
 */
#ifndef SG_DAEMON_SETTINGS_H
#define SG_DAEMON_SETTINGS_H

#include "sg_opt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_daemon_settings {
	char *serving_address;
	char *cluster_id;
	int64_t max_client_certificate_duration;
	int64_t default_certificate_duration;
	int policy;
	char *ca_trusted_node_accounts;
	bool enable_client_cert_authenticator;
	char *root_ca_file;
	int64_t root_rotation_lead;
	char *serving_certificate_dns_names;
	int64_t serving_certificate_duration;
	int64_t serving_certificate_key_size;
	int serving_signature_algorithm; /* index into sg_daemon_key_algorithm_names */
	char *serving_certificate_file;
	char *serving_key_file;
	char *http_address;
	int64_t metrics_port;
	int64_t readiness_probe_port;
	char *readiness_probe_path;
	int64_t server_timeout;
	int64_t grpc_threads;
	int64_t max_concurrent_streams;
	int64_t max_connections;
	int64_t handshake_timeout;
	int64_t max_connection_idle;
	int64_t max_connection_age;
	int64_t max_connection_age_grace;
	int64_t grpc_memory_limit;
	int64_t shutdown_grace;
	bool hsm; /* false: a pure RA, no HSM and no CA of signet's own */
	int64_t hsm_down_limit;
	int64_t hsm_probe_interval;
	int64_t hsm_probe_timeout;
	bool sched_batch;
	/* Kubernetes */
	char *kubeconfig;
	int64_t kube_api_qps;
	int64_t kube_api_burst;
	bool disable_kubernetes_client_rate_limiter;
	int token_authenticator;
	int64_t token_cache_ttl;
	int64_t token_review_max_inflight;
	int64_t jwks_refresh_interval;
	bool leader_election;
	char *leader_election_namespace;
	char *leader_election_lease_name;
	int64_t leader_election_lease_duration;
	int64_t leader_election_renew_deadline;
	int64_t leader_election_retry_period;
	bool root_ca_configmap;
	char *configmap_namespace_selector;
	char *trust_namespace;
	char *roots_configmap;
	bool istiod_cert_enabled;
	char *istiod_cert_name;
	char *istiod_cert_namespace;
	int64_t istiod_cert_duration;
	int64_t istiod_cert_renew_before;
	int istiod_cert_key_algorithm;
	int64_t istiod_cert_key_size;
	char *istiod_cert_additional_dns_names;
	char *istiod_cert_istio_revisions;
	bool istiod_ra_root_secret;
	char *istiod_ra_root_secret_name;
	bool cert_manager_issuer;
	int64_t cert_manager_issuer_workers;
	char *issuer_cas;
	bool kube_csr_signer;
	char *kube_csr_signer_alias;
	char *kube_csr_signer_alias_issuer;
	int64_t issuer_check_interval;
	bool issuer_enabled;
	char *issuer_name;
	char *issuer_kind;
	char *issuer_group;
	char *certificate_namespace;
	bool preserve_certificate_requests;
	int64_t forward_max_in_flight;
	char *certificate_request_additional_annotations;
	bool approver;
	int64_t approver_workers;
	int64_t approver_sar_cache_ttl;
	char *approver_signer_names;
	char *external_policy_servers;
	bool external_policy_server_objects;
	char *external_policy_server_namespace;
} sg_daemon_settings;

extern const char *const sg_daemon_policy_names[]; /* "istio-csr", "istiod", NULL */
/* "auto" (with a Kubernetes API: jwks for the API server's own tokens when
 * its OIDC discovery answers at start, tokenreview for other tokens, and
 * for all of them when discovery fails; without one: jwks), "tokenreview",
 * "jwks" */
extern const char *const sg_daemon_token_authenticator_names[];
enum { SG_TOKEN_AUTH_AUTO, SG_TOKEN_AUTH_TOKENREVIEW, SG_TOKEN_AUTH_JWKS };
extern const char *const sg_daemon_key_algorithm_names[]; /* "RSA", "ECDSA", NULL */
enum { SG_DAEMON_KEY_RSA, SG_DAEMON_KEY_ECDSA };

/* X(name, type, field, default, min, max, choices, help) */
#define SG_DAEMON_SETTINGS(X)                                                                                     \
	X("serving-address", SG_OPT_STRING, serving_address, "0.0.0.0:6443", 0, 256, NULL,                       \
	  "gRPC listen address host:port")                                                                         \
	X("cluster-id", SG_OPT_STRING, cluster_id, "Kubernetes", 0, 253, NULL,                                   \
	  "the clusterid header must be empty or equal this")                                                      \
	X("max-client-certificate-duration", SG_OPT_DURATION, max_client_certificate_duration, "1h", 60,         \
	  10LL * 365 * 86400, NULL, "longest workload certificate")                                                \
	X("default-certificate-duration", SG_OPT_DURATION, default_certificate_duration, "24h", 60,              \
	  10LL * 365 * 86400, NULL, "istiod policy: TTL when the request has none")                               \
	X("policy", SG_OPT_ENUM, policy, "istio-csr", 0, 0, sg_daemon_policy_names,                              \
	  "istio-csr: the CSR must ask for the caller's identity, TTL clamped; istiod: identity stamped, TTL above the max refused") \
	X("ca-trusted-node-accounts", SG_OPT_STRING, ca_trusted_node_accounts, "", 0, 4096, NULL,                \
	  "comma-separated namespace/serviceaccount list allowed to impersonate (node agents)")                   \
	X("enable-client-cert-authenticator", SG_OPT_BOOL, enable_client_cert_authenticator, "false", 0, 0,      \
	  NULL, "accept the URI SAN of a verified client certificate as the identity")                            \
	X("root-ca-file", SG_OPT_PATH, root_ca_file, NULL, 0, 0, NULL,                                            \
	  "root bundle returned to clients and trusted for client certificates (default: root-cert)")             \
	X("root-rotation-lead", SG_OPT_DURATION, root_rotation_lead, "0s", 0, 100LL * 365 * 86400, NULL,          \
	  "the CA's root is due for rotation this long before it expires: a warning is logged once and "          \
	  "signet_ca_root_rotation_due turns 1 (0: a third of the root's validity)")                              \
	X("serving-certificate-dns-names", SG_OPT_STRING, serving_certificate_dns_names,                         \
	  "signet.istio-system.svc,localhost", 0, 4096, NULL,                                                      \
	  "comma-separated DNS SANs of the self-issued serving certificate")                                       \
	X("serving-certificate-duration", SG_OPT_DURATION, serving_certificate_duration, "1h", 300,              \
	  365LL * 86400, NULL, "lifetime of the self-issued serving certificate (renewed at 2/3)")                \
	X("serving-certificate-key-size", SG_OPT_INT, serving_certificate_key_size, "0", 0, 8192, NULL,          \
	  "key size of the self-issued serving certificate: RSA 2048..8192 bits, ECDSA 256 (P-256) or 384 "       \
	  "(P-384); 0: RSA 2048, ECDSA 256")                                                                       \
	X("serving-signature-algorithm", SG_OPT_ENUM, serving_signature_algorithm, "ECDSA", 0, 0,                \
	  sg_daemon_key_algorithm_names,                                                                            \
	  "key type of the self-issued serving certificate (istio-csr's default is RSA; signet's ECDSA makes "    \
	  "faster handshakes)")                                                                                     \
	X("serving-certificate-file", SG_OPT_PATH, serving_certificate_file, NULL, 0, 0, NULL,                    \
	  "serve this certificate chain (PEM) instead of a self-issued one; reloaded when it changes")           \
	X("serving-key-file", SG_OPT_PATH, serving_key_file, NULL, 0, 0, NULL,                                    \
	  "private key of serving-certificate-file")                                                               \
	X("http-address", SG_OPT_STRING, http_address, "", 0, 256, NULL,                                          \
	  "address the metrics and probe endpoints listen on (default: 0.0.0.0 in a Kubernetes pod, where the "    \
	  "kubelet probes the pod's address, else 127.0.0.1)")                                                      \
	X("metrics-port", SG_OPT_INT, metrics_port, "9402", 0, 65535, NULL, "Prometheus /metrics port (0: any free port, logged)") \
	X("readiness-probe-port", SG_OPT_INT, readiness_probe_port, "6060", 0, 65535, NULL,                       \
	  "readiness and health probe port (0: any free port, logged; may equal metrics-port)")                                                             \
	X("readiness-probe-path", SG_OPT_STRING, readiness_probe_path, "/readyz", 0, 256, NULL,                  \
	  "readiness probe path (/healthz is served beside it)")                                                   \
	X("server-timeout", SG_OPT_DURATION, server_timeout, "10s", 1, 600, NULL,                                 \
	  "deadline of a request when the client sends none; also the time a call has to deliver its request")  \
	X("grpc-threads", SG_OPT_INT, grpc_threads, "2", 1, 64, NULL, "gRPC transport threads")                 \
	X("max-concurrent-streams", SG_OPT_INT, max_concurrent_streams, "100", 1, 100000, NULL,                  \
	  "concurrent calls per connection (istio-agent makes one at a time)")                                     \
	X("max-connections", SG_OPT_INT, max_connections, "0", 0, 1000000, NULL,                                  \
	  "gRPC connections held at once; more are refused at once (0: 16384, or the open-files limit less 256 "  \
	  "when that is lower)")                                                                                      \
	X("handshake-timeout", SG_OPT_DURATION, handshake_timeout, "10s", 1, 600, NULL,                           \
	  "time a new connection has to finish TLS and the HTTP/2 preface")                                        \
	X("max-connection-idle", SG_OPT_DURATION, max_connection_idle, "5m", 0, 30LL * 86400, NULL,                \
	  "close a gRPC connection without calls for this long (0: never)")                                        \
	X("max-connection-age", SG_OPT_DURATION, max_connection_age, "30m", 0, 30LL * 86400, NULL,                 \
	  "ask a gRPC connection to go away after this long, +-10% (0: never)")                                    \
	X("max-connection-age-grace", SG_OPT_DURATION, max_connection_age_grace, "30s", 1, 3600, NULL,            \
	  "time the calls of an aged connection get before it is closed")                                          \
	X("grpc-memory-limit", SG_OPT_INT, grpc_memory_limit, "256", 16, 65536, NULL,                             \
	  "MiB all gRPC connections together may buffer; beyond it new connections are refused, idle ones "       \
	  "closed and streams reset")   \
	X("shutdown-grace", SG_OPT_DURATION, shutdown_grace, "15s", 0, 600, NULL,                                 \
	  "time in-flight requests get to finish on SIGTERM")                                                      \
	X("hsm", SG_OPT_BOOL, hsm, "true", 0, 0, NULL,                                                            \
	  "open the HSM and the CA of the config file (hsm-*, pin-*, ca-cert, root-cert); false: a pure RA that "  \
	  "holds no CA key: needs issuer-name (RA mode) and root-ca-file (the issuer's CA, the roots the mesh "   \
	  "trusts); the serving certificate is the issuer's too (a CertificateRequest, as istio-csr gets its own) " \
	  "unless serving-certificate-file is set; the HSM settings are not read, and what signs with signet's "   \
	  "CA must be off (istiod-cert-enabled, cert-manager-issuer, kube-csr-signer, issuer-cas, init-dir)")      \
	X("hsm-down-limit", SG_OPT_DURATION, hsm_down_limit, "5m", 0, 7LL * 86400, NULL,                          \
	  "/healthz fails once the HSM has been down this long without recovering, so that a liveness probe "     \
	  "restarts signetd (0: never)")                                                                           \
	X("hsm-probe-interval", SG_OPT_DURATION, hsm_probe_interval, "5s", 0, 3600, NULL,                          \
	  "how often each HSM token is probed while idle (a cheap call on a session of its own; a test signature " \
	  "while it is failing), so that a token that goes silent or fails makes the replica unready without a "   \
	  "request failing on it (0: no probes)")                                                                  \
	X("hsm-probe-timeout", SG_OPT_DURATION, hsm_probe_timeout, "5s", 1, 600, NULL,                             \
	  "a probe not answered within this counts the token as down; a silent token makes the replica unready "   \
	  "within hsm-probe-interval + hsm-probe-timeout")                                                         \
	X("sched-batch", SG_OPT_BOOL, sched_batch, "true", 0, 0, NULL,                                            \
	  "run signetd's threads as SCHED_BATCH (CPU-bound work: a thread waking another does not get preempted "   \
	  "by it; fewer context switches under load)")                                                              \
	X("kubeconfig", SG_OPT_PATH, kubeconfig, NULL, 0, 0, NULL,                                                \
	  "kubeconfig of the Kubernetes API (default: $KUBECONFIG, else the in-cluster service account when "      \
	  "running in a pod; neither: no Kubernetes)")                                                            \
	X("kube-api-qps", SG_OPT_INT, kube_api_qps, "80", 1, 100000, NULL,                                        \
	  "Kubernetes API requests per second (client-side rate limit)")                                           \
	X("kube-api-burst", SG_OPT_INT, kube_api_burst, "160", 1, 100000, NULL,                                   \
	  "Kubernetes API requests allowed in a burst")                                                             \
	X("disable-kubernetes-client-rate-limiter", SG_OPT_BOOL, disable_kubernetes_client_rate_limiter, "false", \
	  0, 0, NULL, "no client-side rate limit on Kubernetes API requests")                                      \
	X("token-authenticator", SG_OPT_ENUM, token_authenticator, "auto", 0, 0,                                  \
	  sg_daemon_token_authenticator_names,                                                                      \
	  "how service-account tokens are checked: tokenreview (ask the API server, results cached), jwks "        \
	  "(verify locally; keys from jwt-jwks-file or the API server); auto: with Kubernetes, jwks for the API "  \
	  "server's tokens when its OIDC discovery answers, tokenreview for legacy/other tokens or when it does "  \
	  "not; else jwks")                                                                                        \
	X("token-cache-ttl", SG_OPT_DURATION, token_cache_ttl, "5m", 1, 3600, NULL,                               \
	  "longest time a token review is reused (never beyond the token's expiry)")                               \
	X("token-review-max-inflight", SG_OPT_INT, token_review_max_inflight, "64", 1, 256, NULL,                 \
	  "most TokenReviews in flight at once; within it the budget adapts to the API server (halved on 429, "   \
	  "which is retried after its Retry-After, cut on rising latency, grown while answers are fast); never "   \
	  "held back by kube-api-qps")                                                                             \
	X("jwks-refresh-interval", SG_OPT_DURATION, jwks_refresh_interval, "5m", 10, 86400, NULL,                 \
	  "how often keys discovered from the API server are refreshed (jwks mode without jwt-jwks-file)")         \
	X("leader-election", SG_OPT_BOOL, leader_election, "true", 0, 0, NULL,                                    \
	  "run the Kubernetes writers (root ConfigMaps, istiod certificate) only while holding the Lease; "        \
	  "false: always (one replica only)")                                                                       \
	X("leader-election-namespace", SG_OPT_STRING, leader_election_namespace, "istio-system", 1, 63, NULL,     \
	  "namespace of the leader-election Lease")                                                                 \
	X("leader-election-lease-name", SG_OPT_STRING, leader_election_lease_name, "signet", 1, 253, NULL,       \
	  "name of the leader-election Lease")                                                                      \
	X("leader-election-lease-duration", SG_OPT_DURATION, leader_election_lease_duration, "15s", 2, 600, NULL, \
	  "how long a silent leader keeps the Lease")                                                               \
	X("leader-election-renew-deadline", SG_OPT_DURATION, leader_election_renew_deadline, "10s", 1, 600, NULL, \
	  "a leader that cannot renew for this long steps down")                                                    \
	X("leader-election-retry-period", SG_OPT_DURATION, leader_election_retry_period, "2s", 1, 60, NULL,       \
	  "interval between Lease attempts")                                                                        \
	X("root-ca-configmap", SG_OPT_BOOL, root_ca_configmap, "true", 0, 0, NULL,                                \
	  "keep ConfigMap istio-ca-root-cert (root-cert.pem) in every selected namespace (leader only)")           \
	X("configmap-namespace-selector", SG_OPT_STRING, configmap_namespace_selector, "", 0, 4096, NULL,        \
	  "label selector of the namespaces that get istio-ca-root-cert (empty: all)")                             \
	X("trust-namespace", SG_OPT_STRING, trust_namespace, "cert-manager", 1, 63, NULL,                         \
	  "namespace trust bundles read their sources from, where roots-configmap is kept (as the trust "          \
	  "program's flag of the same name)")                                                                       \
	X("roots-configmap", SG_OPT_STRING, roots_configmap, "signet-ca-roots", 0, 253, NULL,                    \
	  "keep this ConfigMap (key ca.crt: every current root, label signet.dev/ca-roots=true) in "               \
	  "trust-namespace for trust bundles to name as a source (leader only; empty: off)")                       \
	X("istiod-cert-enabled", SG_OPT_BOOL, istiod_cert_enabled, "false", 0, 0, NULL,                           \
	  "issue and renew istiod's serving certificate into a kubernetes.io/tls Secret (leader only)")            \
	X("istiod-cert-name", SG_OPT_STRING, istiod_cert_name, "istiod-tls", 1, 253, NULL,                        \
	  "name of istiod's certificate Secret")                                                                    \
	X("istiod-cert-namespace", SG_OPT_STRING, istiod_cert_namespace, "istio-system", 1, 63, NULL,             \
	  "istiod's namespace (that of istiod-cert-name's and istiod-ra-root-secret-name's Secrets, and the DNS "   \
	  "names')")                                                                                                \
	X("istiod-cert-duration", SG_OPT_DURATION, istiod_cert_duration, "1h", 300, 365LL * 86400, NULL,          \
	  "lifetime of istiod's certificate")                                                                       \
	X("istiod-cert-renew-before", SG_OPT_DURATION, istiod_cert_renew_before, "0s", 0, 365LL * 86400, NULL,     \
	  "renew istiod's certificate when less than this remains (0: at 2/3 of its life)")                       \
	X("istiod-cert-key-algorithm", SG_OPT_ENUM, istiod_cert_key_algorithm, "RSA", 0, 0,                       \
	  sg_daemon_key_algorithm_names, "key type of istiod's certificate")                                       \
	X("istiod-cert-key-size", SG_OPT_INT, istiod_cert_key_size, "2048", 256, 8192, NULL,                      \
	  "RSA: 2048 or more bits; ECDSA: 256 or 384")                                                              \
	X("istiod-cert-additional-dns-names", SG_OPT_STRING, istiod_cert_additional_dns_names, "", 0, 4096, NULL, \
	  "comma-separated extra DNS SANs of istiod's certificate")                                                \
	X("istiod-cert-istio-revisions", SG_OPT_STRING, istiod_cert_istio_revisions, "default", 0, 4096, NULL,    \
	  "comma-separated Istio revisions; each but default adds istiod-<rev>.<ns>.svc")                           \
	X("istiod-ra-root-secret", SG_OPT_BOOL, istiod_ra_root_secret, "false", 0, 0, NULL,                       \
	  "keep Secret istiod-ra-root-secret-name (key root-cert.pem: every current root, as root-ca-file) in "    \
	  "istiod-cert-namespace, where istiod's RA reads the roots of the Kubernetes signers it forwards to with " \
	  "EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API (mounted at /etc/external-ca-cert); repaired when it drifts, "     \
	  "follows root changes (leader only)")                                                                     \
	X("istiod-ra-root-secret-name", SG_OPT_STRING, istiod_ra_root_secret_name, "external-ca-cert", 1, 253,     \
	  NULL, "name of the Secret istiod-ra-root-secret keeps (istiod's Deployment mounts external-ca-cert)")    \
	X("cert-manager-issuer", SG_OPT_BOOL, cert_manager_issuer, "true", 0, 0, NULL,                            \
	  "sign cert-manager CertificateRequests for SignetIssuer/SignetClusterIssuer (leader only)")              \
	X("cert-manager-issuer-workers", SG_OPT_INT, cert_manager_issuer_workers, "4", 1, 16, NULL,               \
	  "CertificateRequests signed concurrently")                                                               \
	X("issuer-cas", SG_OPT_STRING, issuer_cas, "", 0, 4096, NULL,                                             \
	  "more CAs for SignetIssuers' caName: comma-separated name=config-file (as signetctl init writes)")       \
	X("kube-csr-signer", SG_OPT_BOOL, kube_csr_signer, "true", 0, 0, NULL,                                    \
	  "sign Kubernetes CSRs for signerName signetclusterissuers.signet.dev/<name> (leader only)")              \
	X("kube-csr-signer-alias", SG_OPT_STRING, kube_csr_signer_alias, "", 0, 4096, NULL,                      \
	  "more signerNames to sign Kubernetes CSRs for, comma-separated signerName[=SignetClusterIssuer] (at "  \
	  "most 16; istiod's K8S_SIGNER, or CERT_SIGNER_DOMAIN/<ISTIO_META_CERT_SIGNER> names such as "          \
	  "clusterissuers.cert-manager.io/istio-system); empty: none")                                             \
	X("kube-csr-signer-alias-issuer", SG_OPT_STRING, kube_csr_signer_alias_issuer, "default", 1, 253, NULL,   \
	  "the SignetClusterIssuer whose CA and limits an alias signerName named without one uses")                \
	X("issuer-check-interval", SG_OPT_DURATION, issuer_check_interval, "30s", 1, 3600, NULL,                  \
	  "how often each SignetIssuer/SignetClusterIssuer's CA is checked for its Ready condition")              \
	X("issuer-enabled", SG_OPT_BOOL, issuer_enabled, "true", 0, 0, NULL,                                      \
	  "istio-csr's: sign through the issuer the issuer-* settings name from the start (RA mode; with "        \
	  "issuer-name empty, signet's HSM signs); false, where istio-csr waits for a runtime issuance ConfigMap, " \
	  "is refused: signetd reads no such ConfigMap")                                                            \
	X("issuer-name", SG_OPT_STRING, issuer_name, "", 0, 253, NULL,                                            \
	  "RA mode: the cert-manager issuer that signs workload certificates (empty: signet's HSM signs)")         \
	X("issuer-kind", SG_OPT_STRING, issuer_kind, "Issuer", 1, 63, NULL,                                       \
	  "RA mode: the issuer's kind (Issuer, ClusterIssuer, or an external issuer's kind)")                     \
	X("issuer-group", SG_OPT_STRING, issuer_group, "cert-manager.io", 1, 253, NULL,                           \
	  "RA mode: the issuer's API group")                                                                      \
	X("certificate-namespace", SG_OPT_STRING, certificate_namespace, "istio-system", 1, 63, NULL,             \
	  "RA mode: where CertificateRequests are created")                                                        \
	X("preserve-certificate-requests", SG_OPT_BOOL, preserve_certificate_requests, "false", 0, 0, NULL,       \
	  "RA mode: keep CertificateRequests once answered (debugging only: they pile up)")                       \
	X("forward-max-in-flight", SG_OPT_INT, forward_max_in_flight, "1000", 1, 100000, NULL,                    \
	  "RA mode: CertificateRequests waiting at once; more are answered UNAVAILABLE")                           \
	X("certificate-request-additional-annotations", SG_OPT_STRING, certificate_request_additional_annotations, \
	  "", 0, 270336, NULL,                                                                                     \
	  "RA mode, istio-csr's: annotations put on every CertificateRequest, key=value[,key=value...] (one "      \
	  "pair keeps commas in its value; several are CSV); keys qualified names, at most 256 KiB in all")       \
	X("approver", SG_OPT_BOOL, approver, "false", 0, 0, NULL,                                                 \
	  "approve or deny cert-manager CertificateRequests by CertificateRequestPolicies, as approver-policy "    \
	  "does (leader only; off: another approver decides)")                                                     \
	X("approver-workers", SG_OPT_INT, approver_workers, "4", 1, 16, NULL,                                     \
	  "CertificateRequests decided concurrently")                                                             \
	X("approver-sar-cache-ttl", SG_OPT_DURATION, approver_sar_cache_ttl, "10s", 0, 600, NULL,                 \
	  "how long a SubjectAccessReview answer (may the requester use a policy) is reused; any RBAC change "   \
	  "drops them at once; 0: ask every time")                                                                 \
	X("approver-signer-names", SG_OPT_STRING, approver_signer_names,                                          \
	  "signetissuers.signet.dev/*,signetclusterissuers.signet.dev/*,issuers.cert-manager.io/*,"              \
	  "clusterissuers.cert-manager.io/*",                                                                      \
	  1, 4096, NULL,                                                                                           \
	  "the signers whose CertificateRequests the approver decides, as its RBAC grants `approve` on them "     \
	  "(comma-separated <plural>.<group>/* or /<issuer>, or *); others are left to another approver")         \
	X("external-policy-servers", SG_OPT_STRING, external_policy_servers, "", 0, 4096, NULL,                   \
	  "gRPC policy servers a CertificateRequestPolicy may consult (plugin external-policy-servers): "          \
	  "comma-separated name=host:port, or name=host:port;ca=ROOTS.pem[;server-name=NAME] for TLS")         \
	X("external-policy-server-objects", SG_OPT_BOOL, external_policy_server_objects, "true", 0, 0, NULL,       \
	  "with approver: watch ExternalPolicyServer objects (policy.cert-manager.io) and call the ones a "        \
	  "CertificateRequestPolicy lists in spec.externalPolicyServers (needs their CRD)")                       \
	X("external-policy-server-namespace", SG_OPT_STRING, external_policy_server_namespace, "cert-manager", 1,  \
	  63, NULL,                                                                                                \
	  "namespace of an ExternalPolicyServer's configMapRef, secretRef and cainjector annotations written "    \
	  "without one (as cert-manager's cluster resource namespace)")

#define SG_DAEMON_ROW_(name, type, field, def, min, max, choices, help) \
	{name, type, offsetof(SG_DAEMON_T_, SG_DAEMON_M_.field), def, min, max, choices, help, false},
#define SG_DAEMON_FOREIGN_(name, type, field, def, min, max, choices, help) \
	{name, SG_OPT_FOREIGN, 0, NULL, 0, 0, NULL, NULL, false},

/* Rows for a table over struct T whose member m is an sg_daemon_settings:
 * define SG_DAEMON_T_ and SG_DAEMON_M_ first. */
#define SG_DAEMON_ROWS SG_DAEMON_SETTINGS(SG_DAEMON_ROW_)
/* The same names as foreign rows (for other programs sharing the file). */
#define SG_DAEMON_FOREIGN_ROWS SG_DAEMON_SETTINGS(SG_DAEMON_FOREIGN_)

#endif
