/*
 * sg_policyserver: the approver plugin "external-policy-servers": a
 * CertificateRequestPolicy that names it in spec.plugins has each request
 * it evaluates also judged by external policy servers over gRPC
 * (proto/policy.proto, signet.policy.v1.PolicyServer/Evaluate), as the
 * CertificateRequest Policy design's "External Policy Server" describes.
 *
 * Configuration (signetd's --external-policy-servers): a comma-separated
 * list of at most SG_POLICYSERVER_MAX servers, each
 *     name=host:port                                    plaintext (loopback, sidecars)
 *     name=host:port;ca=/path/roots.pem[;server-name=N] TLS, verified against roots.pem
 * name: a DNS label, unique in the list; host: a lower-case DNS name, an
 * IPv4 address or [an IPv6 address]; port: 1..65535 in decimal without
 * leading zeros; ca: a file of PEM certificates (read and checked once, at
 * sg_policyserver_new); server-name: the DNS name the server's
 * certificate must hold, instead of host. Anything else, an empty entry or
 * an option given twice is SG_EINVAL naming the entry (the detail in
 * printable ASCII: other bytes of the entry are shown as '?').
 *
 * A policy chooses its servers with the plugin's values:
 *     spec.plugins:
 *       external-policy-servers:
 *         values: {servers: "opa, audit"}
 * every value a string (approver-policy's values are map[string]string;
 * all of them travel to the servers as plugin_values). "servers" lists
 * configured names (spaces around a name are ignored). No values, a value
 * that is not a string, no list, an empty one, a name that is not
 * configured or one named twice: the plugin's check() refuses them, so the
 * approver marks the policy NotReady with the reason (the policy is fixed,
 * not retried forever); evaluate() refuses the same with SG_EINVAL should
 * it be called anyway — never an approval.
 *
 * Evaluation (the approver's evaluate(), any worker thread): one
 * PolicyRequest built from the CertificateRequest object as written and
 * the asking policy's name (policy_name), then one unary call per listed
 * server, in the listed order, each with its own deadline
 * (SG_POLICYSERVER_TIMEOUT_DEFAULT_MS unless configured; so a policy
 * listing n servers may take n deadlines):
 *   APPROVED  the next server; all approved: not denied, no message;
 *   DENIED    denied, message "external policy server <name>: <reason>";
 *             the servers after it are not asked (the design: any
 *             not-approved answer makes the whole policy not-approved, so
 *             their answers could not change the verdict; the message names
 *             the first that denied);
 *   ERROR     SG_EBUSY "external policy server <name>: <reason>" — the
 *             approver retries later;
 *   no answer SG_ETIMEOUT (deadline), SG_EBUSY (UNAVAILABLE: refused,
 *             unreachable, TLS failure), SG_EPROTO (any other status, a
 *             malformed response, a verdict that is unset — an empty
 *             response — or unknown, a response in the design's
 *             numbering), each with the server's name in the
 *             detail.
 * Control characters of a server's reason are shown as spaces.
 *
 * Threads: after sg_policyserver_new the configuration is immutable; one
 * gRPC channel per server, made once and shared by every call (calls on a
 * channel run concurrently, each on its own completion queue). Counters
 * are atomics. sg_policyserver_free must follow the last evaluation.
 */
#ifndef SG_POLICYSERVER_H
#define SG_POLICYSERVER_H

#include "sg_approver.h"
#include "sg_crpolicy.h"
#include "sg_error.h"
#include "sg_metrics.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The plugin's name in a policy's spec.plugins. */
#define SG_POLICYSERVER_PLUGIN "external-policy-servers"
/* The key of the plugin's values that lists servers. */
#define SG_POLICYSERVER_VALUES_SERVERS "servers"
#define SG_POLICYSERVER_MAX 16                  /* servers configured */
#define SG_POLICYSERVER_TIMEOUT_DEFAULT_MS 5000 /* deadline of one call */
#define SG_POLICYSERVER_TIMEOUT_MAX_MS 300000
#define SG_POLICYSERVER_CA_MAX (1u << 20)  /* bytes of a ca= file or an object's CA bundle */
#define SG_POLICYSERVER_RESOURCES_MAX 1024 /* ExternalPolicyServer objects known at once */

typedef struct sg_policyserver sg_policyserver;

typedef struct sg_policyserver_options {
	/* The --external-policy-servers value; read during the call only. NULL:
	 * none configured (ExternalPolicyServer objects only). */
	const char *servers;
	uint64_t timeout_ms; /* deadline of each call; 0: SG_POLICYSERVER_TIMEOUT_DEFAULT_MS */
} sg_policyserver_options;

/* Parses and checks the configuration, reads the ca= files and makes one
 * channel per server (no connection yet: the first call connects).
 * SG_EINVAL for a bad configuration (the detail names the entry; an empty
 * list is refused: create the plugin only when servers are configured),
 * SG_ENOTFOUND for a ca= file that cannot be opened, SG_EINTERNAL when
 * gRPC or memory fails. Caller frees with sg_policyserver_free. */
SG_API int sg_policyserver_new(sg_policyserver **out, const sg_policyserver_options *o) SG_MUST_CHECK;
/* Closes the channels and frees; accepts NULL. No evaluation may be
 * running or follow. */
SG_API void sg_policyserver_free(sg_policyserver *ps);

/* The plugin row for sg_approver_options.plugins: {SG_POLICYSERVER_PLUGIN,
 * sg_policyserver_check, sg_policyserver_evaluate, ps}; ps is borrowed and
 * must outlive the approver. */
SG_API sg_approver_plugin sg_policyserver_plugin(sg_policyserver *ps);

/* The plugin's check() (arg is the sg_policyserver): whether a policy's
 * values (NULL when it has none) can be evaluated, as above. false with
 * *why the reason ("values.servers: \"x\" is not a configured server";
 * UTF-8 without control characters; malloc'ed, caller frees; NULL only
 * when out of memory). No I/O; the thread's error detail is left as it
 * was. */
SG_API bool sg_policyserver_check(void *arg, const json_t *values, char **why);

/* The plugin's evaluate() (arg is the sg_policyserver): the answer above
 * for one request on behalf of policy (the CertificateRequestPolicy's name,
 * sent as PolicyRequest.policy_name; NULL is "") with its values
 * (request_obj: the CertificateRequest object, required; r is not read).
 * On SG_OK *denied is set and *message is NULL or a new string the caller
 * frees; on an error *denied is false and *message NULL. */
SG_API int sg_policyserver_evaluate(void *arg, const char *policy, const json_t *values, const sg_crpolicy_request *r,
                                    const json_t *request_obj, bool *denied, char **message) SG_MUST_CHECK;

/* Checks a policy's plugin values as check() does, as an error code: SG_OK,
 * or SG_EINVAL with the reason in the detail, after
 * "plugin external-policy-servers: ". */
SG_API int sg_policyserver_check_values(const sg_policyserver *ps, const json_t *values) SG_MUST_CHECK;

/* ---- ExternalPolicyServer objects --------------------------------------- */

/*
 * The design's ExternalPolicyServer (policy.cert-manager.io/v1alpha1,
 * cluster-scoped): a server a policy lists by name in
 * spec.externalPolicyServers. The controller that watches the objects
 * (controllers/sg_extpolicy.h) hands each one's endpoint and resolved CA
 * bundle here; the approver calls them through
 * sg_policyserver_evaluate_servers. Any thread; calls in flight keep the
 * server they started with when it is replaced or removed.
 *
 * endpoint: host[:port] as the flag's address (a DNS name, IPv4 or
 * [IPv6]), port 443 when none is written. ca: PEM certificates (ca_len
 * bytes, at most SG_POLICYSERVER_CA_MAX); the server's certificate must
 * chain to them and name host. Always TLS: an object with no CA bundle
 * yet is kept, and a policy that lists it evaluates nothing until it has
 * one (the design's words), retrying. An unchanged object keeps its
 * channel.
 * Returns SG_OK, or SG_EINVAL with the reason (a bad endpoint, a CA bundle
 * that is not PEM certificates, more than SG_POLICYSERVER_RESOURCES_MAX
 * objects): the object is then kept as not usable, and a policy that
 * lists it is retried with that reason. SG_EINTERNAL when out of memory.
 * *changed (may be NULL): whether the table changed (a policy that waited
 * for this server may be evaluated now).
 */
SG_API int sg_policyserver_resource_set(sg_policyserver *ps, const char *name, const char *endpoint, const char *ca,
                                        size_t ca_len, bool *changed) SG_MUST_CHECK;
/* Forgets the object (deleted); a policy that lists it is retried. */
SG_API void sg_policyserver_resource_remove(sg_policyserver *ps, const char *name);
/* Forgets every object. */
SG_API void sg_policyserver_resource_clear(sg_policyserver *ps);
/* Objects known. */
SG_API size_t sg_policyserver_resource_count(sg_policyserver *ps);

/* sg_approver_servers.evaluate (arg: the sg_policyserver): one
 * PolicyRequest (as the plugin's, without plugin values), then each listed
 * object's server in order, as the plugin asks its servers: APPROVED goes
 * on, DENIED ends with "external policy server <name>: <reason>", ERROR
 * and no answer are errors (retried). An object that is unknown, not
 * usable or without a CA bundle is SG_EBUSY naming it: retried, never
 * approved. */
SG_API int sg_policyserver_evaluate_servers(void *arg, const char *policy, const char *const *servers, size_t nservers,
                                            const sg_crpolicy_request *r, const json_t *request_obj, bool *denied,
                                            char **message) SG_MUST_CHECK;

/* ---- introspection ------------------------------------------------------ */

/* Configured servers, in configuration order. */
SG_API size_t sg_policyserver_count(const sg_policyserver *ps);

/* One server's configuration and counters (a snapshot; calls in flight
 * are not counted until they end). Strings are borrowed for ps's life. */
typedef struct sg_policyserver_stats {
	const char *name;
	const char *target; /* "host:port" */
	bool tls;
	uint64_t approved, denied; /* answers */
	uint64_t errors;           /* ERROR answers */
	uint64_t timeouts;         /* DEADLINE_EXCEEDED */
	uint64_t unavailable;      /* UNAVAILABLE, or the call could not be made */
	uint64_t invalid;          /* other statuses, malformed responses, unknown results */
} sg_policyserver_stats;

/* SG_EINVAL when i >= sg_policyserver_count(ps). */
SG_API int sg_policyserver_stats_get(const sg_policyserver *ps, size_t i, sg_policyserver_stats *out) SG_MUST_CHECK;

/* Registers signet_policyserver_calls_total{server,result} on reg, result
 * one of approved, denied, error, failed (timeouts, unavailable and invalid
 * together: 16 servers x 4 results fit a family's SG_METRICS_MAX_SERIES).
 * Call once, before the approver starts; calls before it are not counted
 * there (the stats above have them). */
SG_API int sg_policyserver_metrics(sg_policyserver *ps, sg_metrics *reg) SG_MUST_CHECK;

#endif
