/*
 * sg_approver: the CertificateRequest policy approver. It decides
 * cert-manager CertificateRequests (cert-manager.io/v1) with
 * CertificateRequestPolicies (policy.cert-manager.io/v1alpha1) the way
 * cert-manager's approver-policy does, so clusters bring their policies
 * unchanged, and it keeps each policy's Ready condition.
 *
 * A request is decided once (a request with an Approved or Denied
 * condition is never touched again), in approver-policy's order:
 *   1. the policies whose selector picks the request (issuerRef with the
 *      request's kind defaulted to Issuer and group to cert-manager.io;
 *      namespace names and labels) — none: Unprocessed, no condition, an
 *      Event once;
 *   2. of those, the ones the requester may `use` (a SubjectAccessReview
 *      per policy, user/groups/uid/extra of the request, resource
 *      certificaterequestpolicies, the policy's name, the request's
 *      namespace), answers cached for a short time and dropped at once when
 *      any Role, ClusterRole or binding changes — none: Unprocessed;
 *   3. each Ready one, in name order, evaluated (sg_crpolicy.h: allowed,
 *      constraints, then its plugins, then its ExternalPolicyServers); the first that does not deny
 *      approves: condition Approved=True, reason policy.cert-manager.io,
 *      "Approved by CertificateRequestPolicy: \"<name>\"";
 *   4. every one denied: Denied=True, "No policy approved this request:
 *      [<policy>: <why>] ..." — unless a policy that applies is not Ready
 *      (no Ready condition yet, or NotReady: CEL rules that do not
 *      compile, values a plugin refuses, what approver-policy's webhook
 *      refuses): then nothing is written ("deferred") until it is Ready or
 *      no longer applies, because a denial is final and the policy, once
 *      fixed, may approve. A NotReady policy is never evaluated.
 *   An evaluation that cannot be made (a plugin's ERROR, a server down, a
 *   CSR that does not parse) stops the review there: no condition, retried
 *   with backoff; a later policy never approves past it. So does a
 *   Namespace whose labels a selector needs and that neither the cache nor
 *   a live read can give: a cache gap is never "no match".
 * Requests for a signer outside sg_approver_options.signer_names are left
 * alone before anything is read or asked (no SubjectAccessReview): another
 * approver decides them, and cert-manager would refuse our condition.
 * The CSR is parsed only once a Ready policy is to evaluate it, so a
 * request with a broken CSR that no policy applies to is Unprocessed like
 * any other, not an error retried forever.
 * The condition is written by a PUT of the status subresource carrying the
 * resourceVersion the decision was made on, after a live read: a request
 * decided meanwhile (by another approver, or a former leader) is a 409 and
 * is left as it is, and so is one that is not the request evaluated (a
 * cache behind a delete and a create under the same name: another uid or
 * generation), which is evaluated on its own event. Unprocessed and
 * deferred requests are decided again when a policy, a Namespace or RBAC
 * changes.
 *
 * It is a controller on the runtime (sg_ctrl.h) named "approver",
 * leader-only. Keys: "<namespace>/<name>" for requests, "crp:<name>" for
 * policies (a namespace holds no ':').
 *
 * Kubernetes RBAC: certificaterequests get/list/watch and /status update;
 * certificaterequestpolicies get/list/watch and /status patch;
 * subjectaccessreviews create; namespaces, roles, rolebindings,
 * clusterroles, clusterrolebindings list/watch; events create; and
 * cert-manager.io `signers` `approve` on the signer names it decides
 * (cert-manager's webhook refuses the condition otherwise).
 */
#ifndef SG_APPROVER_H
#define SG_APPROVER_H

#include "sg_crpolicy.h"
#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_APPROVER_SAR_TTL_DEFAULT 10 /* seconds a SubjectAccessReview answer is reused */

typedef struct sg_approver sg_approver;

/* A plugin a policy may name in spec.plugins (its values: the policy's
 * spec.plugins[name].values object, or NULL).
 *   check     optional: whether values can be evaluated at all; false
 *             with *why (malloc'ed, caller frees) makes the policy
 *             NotReady, so a typo never turns into endless retries;
 *   evaluate  one request: SG_OK with *denied and *message (malloc'ed or
 *             NULL) when the plugin has an answer; a negative code (with
 *             the thread's detail) when it has none: the request is
 *             retried, never approved by this policy.
 * Plugins run only for a request the policy's own rules did not deny
 * already (an external server is not asked about a lost cause). */
typedef struct sg_approver_plugin {
	const char *name;
	bool (*check)(void *arg, const json_t *values, char **why);
	int (*evaluate)(void *arg, const char *policy, const json_t *values, const sg_crpolicy_request *r,
	                const json_t *request_obj, bool *denied, char **message);
	void *arg;
} sg_approver_plugin;

/* The caller of a policy's spec.externalPolicyServers (the design's
 * ExternalPolicyServer objects, by name, in the policy's order): after the
 * plugins, with the same contract as a plugin's evaluate (an answer, or
 * an error that retries the request and never approves it). evaluate NULL:
 * this approver calls none, and a policy listing any is NotReady. */
typedef struct sg_approver_servers {
	int (*evaluate)(void *arg, const char *policy, const char *const *servers, size_t nservers,
	                const sg_crpolicy_request *r, const json_t *request_obj, bool *denied, char **message);
	void *arg;
} sg_approver_servers;

typedef struct sg_approver_options {
	sg_kube *kube;                      /* borrowed; must outlive the approver */
	const sg_approver_plugin *plugins;  /* copied (arg borrowed) */
	size_t nplugins;
	sg_approver_servers servers;        /* copied (arg borrowed) */
	int64_t sar_ttl_seconds;            /* 0: SG_APPROVER_SAR_TTL_DEFAULT; < 0: no cache */
	unsigned workers;                   /* 0: 4 */
	/* The signer names this approver may approve for (its RBAC `signers`
	 * `approve` resourceNames), comma-separated, as cert-manager names
	 * them: "<plural>.<group>/" followed by "*" for every issuer of a
	 * type, by "<namespace>.<name>" for one namespaced issuer or by
	 * "<name>" for one cluster-scoped issuer; or "*" alone for all.
	 * <plural> is the issuerRef kind in lower case plus "s" (every issuer
	 * type cert-manager lists is named so; a kind starting "Cluster" is
	 * cluster-scoped). NULL or "": all (approver-policy's behaviour).
	 * Copied. SG_EINVAL names an entry of another form. */
	const char *signer_names;
} sg_approver_options;

typedef struct sg_approver_stats {
	uint64_t approved, denied;  /* decisions written */
	uint64_t unprocessed;       /* passes that found no applicable policy */
	uint64_t deferred;          /* passes that waited for a policy to be Ready */
	uint64_t skipped;           /* passes on requests for a signer outside signer_names */
	uint64_t errors;            /* passes without an answer (retried) */
	uint64_t conflicts;         /* decisions not written: decided meanwhile, or not the request evaluated */
	uint64_t sar_requests;      /* SubjectAccessReviews sent */
	uint64_t sar_cached;        /* answers taken from the cache */
	uint64_t policy_status_writes;
} sg_approver_stats;

SG_API int sg_approver_new(sg_approver **out, const sg_approver_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed), for a table row; its metrics
 * (sg_ctrl_metrics) are signet_approver_*, from the stats below. */
SG_API sg_ctrl *sg_approver_controller(sg_approver *a);
SG_API void sg_approver_stats_get(sg_approver *a, sg_approver_stats *out);
/* Stops and frees; accepts NULL. */
SG_API void sg_approver_free(sg_approver *a);

#endif
