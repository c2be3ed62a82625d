/*
 * sg_crpolicy: the evaluation core of a cert-manager approver-policy
 * compatible CertificateRequest approver (contract in sg_crpolicy.h).
 *
 * Sources reproduced (approver-policy v0.27.0, apimachinery v0.36.3, the
 * versions approver-policy v0.27.0 builds with; facts only, no code):
 *   pkg/internal/approver/allowed/evaluator.go     spec.allowed
 *   pkg/internal/approver/allowed/validation.go    its admission checks
 *   pkg/internal/approver/constraints/evaluator.go spec.constraints (and
 *                                  validation.go, its admission checks)
 *   pkg/internal/approver/manager/predicate/predicate.go  spec.selector
 *   pkg/internal/approver/manager/review.go        the messages
 *   pkg/internal/webhook/validator.go              plugins, selector
 *   pkg/internal/util/wildcard.go                  wildcards
 *   k8s.io/apimachinery pkg/util/validation/field  Error.Error(), Path,
 *                                                  ErrorList.ToAggregate
 *
 * How the pieces fit. A policy is read once into plain C (owned copies of
 * its strings: the JSON is not kept) and checked the way the API server's
 * schema and approver-policy's webhook check it; what they would refuse
 * makes the policy NotReady with their messages, so a policy admitted
 * without the webhook is never half-applied. Evaluation then walks the
 * request's facts (sg_csr_facts) in approver-policy's evaluator order,
 * appending field errors to a list whose rendering is apimachinery's:
 *
 *   <path>: <Type>[: <bad value>][: <detail>]
 *   bad value: a string with Go's %q; bool and int with %v; anything else
 *              (here: []string, map[string]string) with encoding/json,
 *              which since apimachinery v0.34 replaces %#v;
 *   the list:  identical messages dropped; one -> itself; more ->
 *              "[" + joined with ", " + "]".
 *
 * The files. This one holds what the approver asks around an evaluation:
 * which requests a policy selects (spec.selector, predicate.go) and the
 * messages of the CertificateRequest's condition (review.go). Apart from
 * it, sharing private/sg_crpolicy_impl.h: sg_crpolicy_text.c, Go's text
 * forms, field.ErrorList and the wildcards, which the others write and
 * match with; sg_crpolicy_compile.c, the policy read and checked as the
 * schema checks it, and its accessors; sg_crpolicy_webhook.c, what the
 * admission webhook would refuse; sg_crpolicy_eval.c, the evaluators and
 * the verdict.
 *
 * Everything that can grow is bounded: policy lists (SG_CRPOLICY_MAX_*,
 * NotReady beyond), the facts (sg_csr_facts.h), and every message
 * (SG_CRPOLICY_MAX_MESSAGE, SG_EINTERNAL beyond). Wildcard matching is
 * the iterative O(n*m) matcher, on Go runes (an invalid UTF-8 byte is one
 * U+FFFD rune, as in Go's []rune conversion).
 *
 * Known differences from approver-policy (all fail closed):
 *   - CEL validations run on cel/ (sg_crpolicy_cel.c): the language is
 *     cel-spec's, but a compile or evaluation error's text is ours where
 *     it is not cel-go's.
 *   - Durations in whole seconds (sg_goduration_parse): a dropped
 *     fraction of a second is tracked (sg_crpolicy_duration_parse), so a
 *     bound is never passed that Go would enforce; when both the request
 *     and the bound have a fraction and the whole seconds are equal the
 *     request is denied; messages and the webhook's min <= max check use
 *     the whole seconds ("1s" where Go prints "1.5s").
 *   - allowed.usages outside cert-manager's KeyUsage enum make the policy
 *     NotReady, as the CRD's schema refuses them; so wildcards in usages,
 *     which approver-policy's evaluator would honour, never get there.
 *   - Go's strconv.Quote escapes runes unicode.IsPrint rejects; here the
 *     non-printable set is control, format, separator, private-use,
 *     noncharacter and the large unassigned blocks, not every unassigned
 *     code point (a CN holding an unassigned code point may print raw
 *     where Go prints \uXXXX).
 *   - A policy the webhook would refuse (approver-policy evaluates it
 *     anyway if the webhook was bypassed) is NotReady here; with invalid
 *     matchLabels approver-policy fails every evaluation instead, and
 *     reports the first bad label in Go's random map order where this
 *     reports the first in key order.
 *   - The SAN differences of sg_csr_facts.h (stricter decoding; an RFC
 *     ediPartyName is "not permitted" here where cert-manager's decoder
 *     fails on it with a Go-internal message).
 *   - A request with more than one subjectAltName extension: crypto/x509
 *     (Go >= 1.21) already refuses duplicate extensions, so approver-
 *     policy reports an evaluation error where its code means to deny
 *     with "CSR contains multiple SAN extensions; at most one is
 *     permitted"; this denies with that message.
 */
#include "sg_crpolicy_impl.h"
#include "sg_guard.h"

#include <stdlib.h>
#include <string.h>

/* ---- selectors --------------------------------------------------------------- */

bool sg_crpolicy_selects_issuer(const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	if (!p->has_issuer_sel)
		return true;
	sstr kind = cstr(r->issuer_kind), group = cstr(r->issuer_group);
	if (kind.len == 0)
		kind = cstr("Issuer");
	if (group.len == 0)
		group = cstr("cert-manager.io");
	if (p->has_sel_name && !crpolicy_wild(p->sel_name, cstr(r->issuer_name)))
		return false;
	if (p->has_sel_kind && !crpolicy_wild(p->sel_kind, kind))
		return false;
	return !p->has_sel_group || crpolicy_wild(p->sel_group, group);
}

bool sg_crpolicy_needs_namespace_labels(const sg_crpolicy *p)
{
	return p->has_ns_sel && p->n_labels > 0;
}

int sg_crpolicy_selects_namespace(const sg_crpolicy *p, const char *ns, const json_t *labels, bool *match)
{
	*match = false;
	if (!p->has_ns_sel) {
		*match = true;
		return SG_OK;
	}
	bool named = p->match_names.n == 0 || crpolicy_wild_any(p->match_names.v, p->match_names.n, cstr(ns));
	if (!named || p->n_labels == 0) {
		*match = named;
		return SG_OK;
	}
	SG_ENSURE(labels, SG_EINVAL, "CertificateRequestPolicy %s: the namespace's labels are needed for matchLabels",
	          p->name);
	for (size_t i = 0; i < p->n_labels; i++) {
		const json_t *v = json_is_object(labels) ? json_object_get(labels, p->label_keys[i].p) : NULL;
		if (!json_is_string(v) ||
		    !sstr_eq((sstr){json_string_value(v), json_string_length(v)}, p->label_values[i]))
			return SG_OK;
	}
	*match = true;
	return SG_OK;
}

int sg_crpolicy_selects(const sg_crpolicy *p, const sg_crpolicy_request *r, const json_t *ns_labels, bool *match)
{
	*match = false;
	if (!sg_crpolicy_selects_issuer(p, r))
		return SG_OK;
	return sg_crpolicy_selects_namespace(p, r->name_space, ns_labels, match);
}

/* ---- the CertificateRequest's condition messages ------------------------------ */

typedef struct order {
	const sg_crpolicy_denial *d;
	size_t i;
} order;

static int by_name(const void *a, const void *b)
{
	const order *x = a, *y = b;
	int c = strcmp(x->d->policy ? x->d->policy : "", y->d->policy ? y->d->policy : "");
	return c ? c : (x->i > y->i) - (x->i < y->i); /* stable, as sort.SliceStable */
}

static int policies_message(const char *prefix, const sg_crpolicy_denial *d, size_t n, char **out)
{
	*out = NULL;
	order *o = n ? calloc(n, sizeof(*o)) : NULL;
	SG_ENSURE(o || n == 0, SG_EINTERNAL, "CertificateRequestPolicy message: out of memory");
	for (size_t i = 0; i < n; i++)
		o[i] = (order){&d[i], i};
	if (n > 1)
		qsort(o, n, sizeof(*o), by_name);
	sb m = SB_INIT;
	sg_strbuf_puts(&m, prefix);
	for (size_t i = 0; i < n; i++) {
		if (i)
			sg_strbuf_putc(&m, ' ');
		sg_strbuf_putc(&m, '[');
		sg_strbuf_puts(&m, o[i].d->policy ? o[i].d->policy : "");
		sg_strbuf_puts(&m, ": ");
		sg_strbuf_puts(&m, o[i].d->message ? o[i].d->message : "");
		sg_strbuf_putc(&m, ']');
	}
	free(o);
	*out = sg_strbuf_take(&m);
	SG_ENSURE(*out, SG_EINTERNAL, "CertificateRequestPolicy message: out of memory (or over %u bytes)",
	          SG_CRPOLICY_MAX_MESSAGE);
	return SG_OK;
}

int sg_crpolicy_denied_message(const sg_crpolicy_denial *d, size_t n, char **out)
{
	return policies_message("No policy approved this request: ", d, n, out);
}

int sg_crpolicy_deferred_message(const sg_crpolicy_denial *d, size_t n, char **out)
{
	return policies_message(
	    "Not all policies are ready for evaluation; refusing to deny pending policy readiness: ", d, n, out);
}

int sg_crpolicy_approved_message(const char *policy, char **out)
{
	sb m = SB_INIT;
	sg_strbuf_puts(&m, "Approved by CertificateRequestPolicy: ");
	crpolicy_sb_go_quote(&m, cstr(policy));
	*out = sg_strbuf_take(&m);
	SG_ENSURE(*out, SG_EINTERNAL, "CertificateRequestPolicy message: out of memory");
	return SG_OK;
}
