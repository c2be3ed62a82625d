/*
 * sg_crpolicy: cert-manager approver-policy's CertificateRequestPolicy
 * (policy.cert-manager.io/v1alpha1, approver-policy v0.27), evaluated
 * without an API server: the pure core of a policy approver.
 *
 * What it does, in the order approver-policy's review does it:
 *   1. compile: a policy object (JSON as the API server returns it) becomes
 *      an immutable sg_crpolicy, Ready or NotReady with the condition
 *      message approver-policy's admission webhook and reconciler would
 *      give ("CertificateRequestPolicy is not ready for approval
 *      evaluation: <field errors>");
 *   2. select: spec.selector.issuerRef (the request's kind defaults to
 *      "Issuer", its group to "cert-manager.io") and spec.selector.namespace
 *      (matchNames, then matchLabels against the namespace's labels); every
 *      selector defined must match;
 *   3. (the RBAC check, a SubjectAccessReview, is the caller's: the request
 *      carries username, groups, uid and extra for it);
 *   4. evaluate: spec.allowed and spec.constraints against one request,
 *      giving "not denied" or "denied" with the message approver-policy
 *      gives, byte for byte: apimachinery v0.36 field.ErrorList aggregates
 *      such as
 *        spec.allowed.dnsNames.values: Invalid value: ["bar.example.com"]: example.com, foo.example.com
 *      (a list is rendered as Go's encoding/json renders it since
 *      apimachinery v0.34; older releases printed []string{...});
 *   5. compose the CertificateRequest's Approved / Denied condition
 *      messages over all policies evaluated.
 *
 * What it does not do, and how that fails closed:
 *   - CEL: `validations` rules are compiled with the policy (a rule that
 *     does not compile, or whose type is not bool, makes it NotReady with
 *     the field path, the rule and why) and evaluated as approver-policy's
 *     runValidations does (sg_crpolicy_cel.c; the CEL language is
 *     cel/sg_cel.h's, whose messages are not cel-go's word for word);
 *   - plugins: a plugin name outside sg_crpolicy_options.plugins makes the
 *     policy NotReady, as approver-policy's webhook refuses it; a known
 *     plugin is the caller's to evaluate (sg_crpolicy_plugin_*), and its
 *     answer is folded in with sg_crpolicy_verdict_add;
 *   - external policy servers (spec.externalPolicyServers, the design's
 *     field, which approver-policy lacks): the names are checked here; the
 *     calls are the caller's (sg_crpolicy_external_*), folded in the same
 *     way;
 *   - durations are whole seconds (sg_goduration_parse drops
 *     fractions of a second); a dropped fraction is tracked, so verdicts
 *     stay right or err towards denial, but a message prints "1s" where Go
 *     prints "1.5s".
 * The header of sg_crpolicy.c lists every place where the output can
 * differ from approver-policy's and why.
 *
 * Errors: functions return SG_OK or a negative sg_error code with the
 * thread's detail set. A policy that cannot be used is not an error (it is
 * NotReady); a request that cannot be evaluated is SG_EINVAL (approver-
 * policy's "evaluation error": neither approve nor deny, retry later).
 * Out of memory, or a message beyond SG_CRPOLICY_MAX_MESSAGE bytes, is
 * SG_EINTERNAL.
 *
 * Threads: a compiled policy is immutable; any number of threads may select
 * and evaluate with it at once. The free functions are not thread-safe
 * against concurrent use of the same object.
 */
#ifndef SG_CRPOLICY_H
#define SG_CRPOLICY_H

#include "sg_csr_facts.h"
#include "sg_error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The reason of the Approved and Denied conditions approver-policy writes
 * on CertificateRequests (and its Event source, and field manager prefix). */
#define SG_CRPOLICY_CONDITION_REASON "policy.cert-manager.io"
/* The CertificateRequestPolicy Ready condition. */
#define SG_CRPOLICY_READY_REASON "Ready"
#define SG_CRPOLICY_NOT_READY_REASON "NotReady"
#define SG_CRPOLICY_READY_MESSAGE "CertificateRequestPolicy is ready for approval evaluation"
#define SG_CRPOLICY_NOT_READY_PREFIX "CertificateRequestPolicy is not ready for approval evaluation: "
/* The review's answers that set no condition (Unprocessed). */
#define SG_CRPOLICY_NO_POLICIES "No CertificateRequestPolicies exist"
#define SG_CRPOLICY_NONE_APPLICABLE "No CertificateRequestPolicies bound or applicable"

/* Bounds on what a policy may hold; beyond them the policy is NotReady
 * (with a field.TooMany / field.TooLong message), nothing is cut. */
#define SG_CRPOLICY_MAX_VALUES 1024 /* strings in one list (values, usages, matchNames) */
#define SG_CRPOLICY_MAX_ENTRIES 64  /* otherNames, otherAttributes, plugins, matchLabels, validations */
#define SG_CRPOLICY_MAX_STRING 4096 /* bytes of one string of a policy */
#define SG_CRPOLICY_MAX_MESSAGE (1u << 20)
#define SG_CRPOLICY_MAX_GROUPS 256 /* spec.groups of a request a CEL rule can see as cr.groups */

typedef struct sg_crpolicy sg_crpolicy;

typedef struct sg_crpolicy_options {
	/* Plugins this approver evaluates (their names in spec.plugins);
	 * any other name makes a policy NotReady. NULL / 0: none. Borrowed
	 * for the call only. */
	const char *const *plugins;
	size_t plugin_count;
	/* Whether the caller calls the ExternalPolicyServers a policy lists in
	 * spec.externalPolicyServers (the CertificateRequest Policy design's
	 * field); when false a policy listing any is NotReady ("Forbidden"). */
	bool external_policy_servers;
} sg_crpolicy_options;

/* Compiles a CertificateRequestPolicy object (metadata.name and spec are
 * read; status is ignored). *out is set on success, Ready or NotReady;
 * SG_EINVAL only when policy is not a JSON object with a non-empty
 * metadata.name string. opts may be NULL. The JSON is not kept (strings are
 * copied). Caller frees with sg_crpolicy_free. */
SG_API int sg_crpolicy_compile(sg_crpolicy **out, const json_t *policy, const sg_crpolicy_options *opts) SG_MUST_CHECK;
SG_API void sg_crpolicy_free(sg_crpolicy *p);

/* metadata.name; borrowed for the policy's life. */
SG_API const char *sg_crpolicy_name(const sg_crpolicy *p);
/* Whether the policy can be evaluated (its Ready condition is True). */
SG_API bool sg_crpolicy_ready(const sg_crpolicy *p);
/* The Ready condition's reason (SG_CRPOLICY_READY_REASON or _NOT_READY_
 * REASON) and message; borrowed for the policy's life. */
SG_API const char *sg_crpolicy_condition_reason(const sg_crpolicy *p);
SG_API const char *sg_crpolicy_condition_message(const sg_crpolicy *p);

/* The known plugins the policy uses, in name order: name, and its
 * `values` object (NULL when absent); borrowed for the policy's life. */
SG_API size_t sg_crpolicy_plugin_count(const sg_crpolicy *p);
SG_API const char *sg_crpolicy_plugin_name(const sg_crpolicy *p, size_t i);
SG_API const json_t *sg_crpolicy_plugin_values(const sg_crpolicy *p, size_t i);

/* spec.externalPolicyServers: the names of the ExternalPolicyServer
 * objects the policy lists, in its order (a Ready policy's are distinct
 * DNS subdomains; at most SG_CRPOLICY_MAX_ENTRIES); borrowed for the
 * policy's life. Calling them is the caller's, after the plugins: their
 * answers are folded in with sg_crpolicy_verdict_add. */
SG_API size_t sg_crpolicy_external_count(const sg_crpolicy *p);
SG_API const char *sg_crpolicy_external_name(const sg_crpolicy *p, size_t i);

/*
 * approver-policy's wildcards (pkg/internal/util/wildcard.go): only '*' is
 * special and matches any run of characters (Unicode code points, as Go
 * runes; '.' included), "*" matches everything, "" matches only "". So
 * "*.example.com" matches "a.b.example.com" and also the literal
 * "*.example.com". Iterative, O(len(pattern) * len(s)) time, no recursion
 * and no allocation.
 */
SG_API bool sg_crpolicy_wildcard_matches(const char *pattern, const char *s);
/* Every member matches at least one pattern (true when there are none). */
SG_API bool sg_crpolicy_wildcard_subset(const char *const *patterns, size_t npatterns, const char *const *members,
                                        size_t nmembers);

/* One CertificateRequest as the caller read it (every pointer borrowed for
 * the call). Strings are NUL-terminated; NULL is read as "". */
typedef struct sg_crpolicy_request {
	const char *name;          /* metadata.name (CEL rules' cr.name) */
	const char *name_space;    /* metadata.namespace */
	const char *issuer_name;   /* spec.issuerRef.name */
	const char *issuer_kind;   /* spec.issuerRef.kind ("" = Issuer) */
	const char *issuer_group;  /* spec.issuerRef.group ("" = cert-manager.io) */
	bool has_duration;         /* spec.duration set */
	int64_t duration_seconds;  /* spec.duration, whole seconds (sg_crpolicy_duration_parse) */
	bool duration_fraction;    /* spec.duration had a fraction of a second (see sg_crpolicy_duration_parse) */
	bool is_ca;                /* spec.isCA */
	const char *const *usages; /* spec.usages, as written */
	size_t usage_count;
	/* For the caller's SubjectAccessReview (not read here). */
	const char *username, *uid;
	const char *const *groups;
	size_t group_count;
	const json_t *extra; /* spec.extra: object of string arrays, or NULL */
	/* The CSR of spec.request, parsed (sg_csr_facts_parse). */
	const sg_csr_facts *csr;
} sg_crpolicy_request;

/* A CertificateRequest object (cert-manager.io/v1, JSON as the API server
 * returns it) read as the approver reads it, so that signetd's approver and
 * `signetctl policy check` evaluate the same request from the same object.
 * r is what the functions below take; the other members are its storage
 * (not to be read). Strings in r are borrowed from the object, which must
 * outlive the sg_crpolicy_cr. */
#define SG_CRPOLICY_MAX_USAGES 64               /* spec.usages */
#define SG_CRPOLICY_MAX_REQUEST_PEM (64u << 10) /* bytes of spec.request, decoded */
typedef struct sg_crpolicy_cr {
	sg_crpolicy_request r;
	sg_csr_facts facts;
	const char *groups[SG_CRPOLICY_MAX_GROUPS];
	const char *usages[SG_CRPOLICY_MAX_USAGES];
	char *pem;
	uint8_t *der;
} sg_crpolicy_cr;

/* Fills q from cr, all but the CSR: metadata name and namespace (NULL when
 * absent), spec.issuerRef, duration (sg_crpolicy_duration_parse), isCA,
 * usages, username, uid, groups, extra. SG_EINVAL with why for what
 * cannot be evaluated (a bad duration, a usage or group that is not a
 * string, more than the bounds above). q is always safe to clear. */
SG_API int sg_crpolicy_cr_read(sg_crpolicy_cr *q, const json_t *cr) SG_MUST_CHECK;
/* Parses spec.request (standard base64 of a PEM CSR, at most
 * SG_CRPOLICY_MAX_REQUEST_PEM bytes) into q->r.csr, once: a second call
 * does nothing. SG_EINVAL naming the field when it is missing, not base64
 * or too large, or with the CSR parser's detail. */
SG_API int sg_crpolicy_cr_csr(sg_crpolicy_cr *q, const json_t *cr) SG_MUST_CHECK;
SG_API void sg_crpolicy_cr_clear(sg_crpolicy_cr *q);

/* Parses a Go duration (time.ParseDuration's grammar, a leading '-'
 * allowed) with sg_goduration_parse: *seconds is the value truncated
 * toward zero, and *fraction says whether a fraction of a second was
 * dropped (or could not be ruled out, for strings near the parser's
 * 64-byte bound). Pass both to the request: a request of "24h0.5s" then
 * exceeds a maxDuration of "24h", as in Go, instead of equalling it. */
SG_API int sg_crpolicy_duration_parse(const char *s, int64_t *seconds, bool *fraction) SG_MUST_CHECK;

/* spec.selector.issuerRef against the request (true when not defined). */
SG_API bool sg_crpolicy_selects_issuer(const sg_crpolicy *p, const sg_crpolicy_request *r);
/* Whether spec.selector.namespace.matchLabels needs the namespace's labels
 * (so the caller fetches the Namespace only then). */
SG_API bool sg_crpolicy_needs_namespace_labels(const sg_crpolicy *p);
/* spec.selector.namespace against the namespace ns with labels (a JSON
 * object of strings, as metadata.labels; NULL allowed when
 * sg_crpolicy_needs_namespace_labels is false, else SG_EINVAL). */
SG_API int sg_crpolicy_selects_namespace(const sg_crpolicy *p, const char *ns, const json_t *labels,
                                         bool *match) SG_MUST_CHECK;
/* Both, as approver-policy filters: issuerRef, then namespace. */
SG_API int sg_crpolicy_selects(const sg_crpolicy *p, const sg_crpolicy_request *r, const json_t *ns_labels,
                               bool *match) SG_MUST_CHECK;

/* One policy's answer for one request. */
typedef struct sg_crpolicy_verdict {
	bool denied;
	/* The evaluators' messages joined with ", " (allowed, constraints,
	 * then plugins in the order added); "" when none. Owned. */
	char *message;
} sg_crpolicy_verdict;

/* Evaluates spec.allowed, then spec.constraints, of a Ready policy against
 * r (r->csr required). On SG_OK *out holds the verdict (release with
 * sg_crpolicy_verdict_clear). SG_EINVAL when the policy is NotReady or the
 * request cannot be evaluated (a privateKey constraint and a key type
 * approver-policy cannot size). *out is always safe to clear. */
SG_API int sg_crpolicy_evaluate(const sg_crpolicy *p, const sg_crpolicy_request *r,
                                sg_crpolicy_verdict *out) SG_MUST_CHECK;
/* Folds a plugin's answer into v: denied ORs in; a non-empty message is
 * appended after ", ". */
SG_API int sg_crpolicy_verdict_add(sg_crpolicy_verdict *v, bool denied, const char *message) SG_MUST_CHECK;
SG_API void sg_crpolicy_verdict_clear(sg_crpolicy_verdict *v);

/* A policy that denied, for the Denied message. */
typedef struct sg_crpolicy_denial {
	const char *policy;  /* its name */
	const char *message; /* its verdict's message */
} sg_crpolicy_denial;

/* "No policy approved this request: [<a>: <msg>] [<b>: <msg>]", the
 * policies sorted by name (byte order, stable). New string; caller frees. */
SG_API int sg_crpolicy_denied_message(const sg_crpolicy_denial *d, size_t n, char **out) SG_MUST_CHECK;
/* The same list after "Not all policies are ready for evaluation; refusing
 * to deny pending policy readiness: " (approver-policy defers instead of
 * denying while a matching policy has no Ready condition yet). */
SG_API int sg_crpolicy_deferred_message(const sg_crpolicy_denial *d, size_t n, char **out) SG_MUST_CHECK;
/* "Approved by CertificateRequestPolicy: \"<name>\"" (Go's %q quoting).
 * New string; caller frees. */
SG_API int sg_crpolicy_approved_message(const char *policy, char **out) SG_MUST_CHECK;

#endif
