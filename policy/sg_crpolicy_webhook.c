/*
 * sg_crpolicy_webhook: what approver-policy's admission webhook
 * (pkg/internal/webhook/validator.go, then allowed's and constraints'
 * validation.go) would refuse in a policy the schema admits: unknown
 * plugins, an empty selector, bad matchLabels (apimachinery's label key
 * and value checks and messages), required fields with nothing to match,
 * OIDs, CEL validations that do not compile to a bool, key and duration
 * bounds. It reads the compiled policy and appends to the compiler's
 * webhook list (cc, private/sg_crpolicy_impl.h); sg_crpolicy_compile
 * turns that list into the NotReady condition, so a policy admitted
 * without the webhook is refused as the webhook would have refused it.
 * Apart from the compiler because these are a second reading of the same
 * policy, with their own sources to follow.
 */
#include "sg_crpolicy_impl.h"
#include "sg_names.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the admission webhook's checks ---------------------------------------- */

#define NEED_VALUES "at least one of 'values' or 'validations' must be defined if field is 'required'"
#define NEED_VALUE "at least one of 'value' or 'validations' must be defined if field is 'required'"

static void check_field(cc *c, const char *path, const allowed_field *f, bool slice)
{
	char sub[300];
	if (!f->present)
		return;
	if (f->required && !f->has_value && f->rules.n == 0) {
		snprintf(sub, sizeof(sub), "%s.%s", path, slice ? "values" : "value");
		crpolicy_fe_required(&c->webhook, sub, slice ? NEED_VALUES : NEED_VALUE);
	}
	/* allowed's Validate: field.Invalid(<path>.validations[i], rule,
	 * the compiler's error), as validators.Get reports it */
	for (size_t i = 0; i < f->rules.n; i++) {
		const char *why =
		    f->progs && f->progs[i] ? crpolicy_rule_error(f->progs[i]) : "the rule was not compiled";
		if (!why)
			continue;
		snprintf(sub, sizeof(sub), "%s.validations[%zu]", path, i);
		crpolicy_fe_invalid_str(&c->webhook, sub, f->rules.v[i], cstr(why));
	}
}

/* cert-manager's ParseObjectIdentifier (strconv.Atoi per arc) and the
 * round trip through ObjectIdentifier.String() approver-policy requires. */
static const char *oid_problem(sstr oid)
{
	static const char canonical[] = "must be a valid, canonical dotted ASN.1 object identifier (e.g. "
	                                "\"1.3.6.1.4.1.311.20.2.3\")";
	if (oid.len == 0)
		return canonical;
	bool negative = false;
	for (size_t i = 0; i <= oid.len;) {
		size_t j = i;
		while (j < oid.len && oid.p[j] != '.')
			j++;
		size_t k = i;
		if (k < j && oid.p[k] == '-') {
			negative = true;
			k++;
		}
		if (k == j || (oid.p[k] == '0' && j - k > 1) || (oid.p[k] == '0' && k > i))
			return canonical; /* empty, leading zero, "-0" */
		if (j - k > 19 ||
		    (j - k == 19 && memcmp(oid.p + k, k > i ? "9223372036854775808" : "9223372036854775807", 19) > 0))
			return canonical; /* beyond int64: Atoi fails */
		for (size_t d = k; d < j; d++)
			if (oid.p[d] < '0' || oid.p[d] > '9')
				return canonical;
		i = j + 1;
	}
	return negative ? "OID arcs must be non-negative" : NULL;
}

bool crpolicy_named_subject_oid(sstr oid)
{
	if (sstr_is(oid, OID_CN) || sstr_is(oid, OID_SERIAL))
		return true;
	for (int i = 0; i < SUBJ_COUNT; i++)
		if (sstr_is(oid, crpolicy_subject_slots[i].oid))
			return true;
	return false;
}

static void check_others(cc *c, const char *base, const other_entry *e, size_t n, bool attributes)
{
	for (size_t i = 0; i < n; i++) {
		char path[128], sub[300];
		snprintf(path, sizeof(path), "%s[%zu]", base, i);
		snprintf(sub, sizeof(sub), "%s.oid", path);
		const char *why = oid_problem(e[i].oid);
		if (why)
			crpolicy_fe_invalid_str(&c->webhook, sub, e[i].oid, cstr(why));
		else if (attributes && crpolicy_named_subject_oid(e[i].oid))
			crpolicy_fe_invalid_str(
			    &c->webhook, sub, e[i].oid,
			    cstr("this OID is covered by a dedicated allowed.commonName / allowed.subject.* "
			         "field; configure it there instead of otherAttributes"));
		check_field(c, path, &e[i].f, true);
	}
}

/* apimachinery's label key and value checks (content.IsLabelKey,
 * IsLabelValue), joined with "; " as NewRequirement joins them. */
#define LABEL_FMT "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
#define LABEL_KEY_MSG                                                                                                  \
	"must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "       \
	"character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '" LABEL_FMT "')"
#define DNS1123_SUBDOMAIN_MSG                                                                                          \
	"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "     \
	"start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "              \
	"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
#define LABEL_VALUE_MSG                                                                                                \
	"a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "      \
	"start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "       \
	"for validation is '(" LABEL_FMT ")?')"

/* apimachinery reports a length and a pattern apart, so these check the
 * pattern alone (sg_names with no length bound); the lengths are tested
 * where the messages are written. */
static bool label_name_ok(const char *s, size_t n)
{
	return sg_names_label_name(s, n, SIZE_MAX);
}

static bool dns1123_subdomain_ok(const char *s, size_t n)
{
	return sg_names_dns_subdomain_max(s, n, SIZE_MAX);
}

static void label_key_errors(sb *m, sstr k)
{
	const char *slash = memchr(k.p, '/', k.len);
	const char *name = k.p;
	size_t nn = k.len;
	bool any = false;
	if (slash) {
		if (memchr(slash + 1, '/', k.len - (size_t)(slash - k.p) - 1)) {
			sg_strbuf_puts(m, "a valid label key " LABEL_KEY_MSG
			                  " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
			return;
		}
		size_t pn = (size_t)(slash - k.p);
		name = slash + 1;
		nn = k.len - pn - 1;
		if (pn == 0) {
			sg_strbuf_puts(m, "prefix part must be non-empty");
			any = true;
		} else {
			if (pn > 253) {
				sg_strbuf_puts(m, "prefix part must be no more than 253 bytes");
				any = true;
			}
			if (!dns1123_subdomain_ok(k.p, pn)) {
				sg_strbuf_puts(m, any ? "; prefix part " DNS1123_SUBDOMAIN_MSG
				                      : "prefix part " DNS1123_SUBDOMAIN_MSG);
				any = true;
			}
		}
	}
	if (nn == 0 || nn > 63) {
		sg_strbuf_puts(m, any ? "; " : "");
		sg_strbuf_puts(m, nn == 0 ? "name part must be non-empty" : "name part must be no more than 63 bytes");
		any = true;
	}
	if (!label_name_ok(name, nn)) {
		sg_strbuf_puts(m, any ? "; " : "");
		sg_strbuf_puts(m, "name part " LABEL_KEY_MSG);
	}
}

static bool label_key_ok(sstr k)
{
	sb m = SB_INIT;
	label_key_errors(&m, k);
	bool ok = m.len == 0 && !sg_strbuf_failed(&m);
	sg_strbuf_free(&m);
	return ok;
}

static void check_match_labels(cc *c)
{
	const sg_crpolicy *p = c->p;
	for (size_t i = 0; i < p->n_labels; i++) {
		sstr k = p->label_keys[i], v = p->label_values[i];
		bool key_ok = label_key_ok(k);
		bool value_ok = v.len <= 63 && (v.len == 0 || label_name_ok(v.p, v.len));
		if (key_ok && value_ok)
			continue;
		/* NewRequirement's aggregate: "key: ...", "values[0][<key>]: ..." */
		ferrs req = {0};
		if (!key_ok) {
			sb m = SB_INIT;
			crpolicy_fe_begin(&m, "key", "Invalid value: ");
			crpolicy_sb_go_quote(&m, k);
			sg_strbuf_puts(&m, ": ");
			label_key_errors(&m, k);
			crpolicy_ferrs_push(&req, &m);
		}
		if (!value_ok) {
			sb m = SB_INIT;
			sg_strbuf_puts(&m, "values[0][");
			sb_put(&m, k);
			sg_strbuf_puts(&m, "]: Invalid value: ");
			crpolicy_sb_go_quote(&m, v);
			sg_strbuf_puts(&m, ": ");
			if (v.len > 63)
				sg_strbuf_puts(&m, "must be no more than 63 bytes");
			if (v.len > 0 && !label_name_ok(v.p, v.len)) {
				sg_strbuf_puts(&m, v.len > 63 ? "; " : "");
				sg_strbuf_puts(&m, LABEL_VALUE_MSG);
			}
			crpolicy_ferrs_push(&req, &m);
		}
		sb m = SB_INIT;
		crpolicy_fe_begin(&m, "spec.selector.namespace.matchLabels", "Invalid value: {");
		for (size_t j = 0; j < p->n_labels; j++) {
			if (j)
				sg_strbuf_putc(&m, ',');
			crpolicy_sb_json_quote(&m, p->label_keys[j]);
			sg_strbuf_putc(&m, ':');
			crpolicy_sb_json_quote(&m, p->label_values[j]);
		}
		sg_strbuf_puts(&m, "}: ");
		crpolicy_sb_aggregate(&m, &req);
		if (req.failed)
			m.oom = true; /* the list could not be built: the message fails */
		crpolicy_ferrs_free(&req);
		crpolicy_ferrs_push(&c->webhook, &m);
		return; /* LabelSelectorAsSelector stops at the first bad label */
	}
}

static void check_constraints(cc *c)
{
	const sg_crpolicy *p = c->p;
	if (p->has_pk) {
		const char *pk = "spec.constraints.privateKey";
		char path[64];
		if (p->has_alg) {
			if (!sstr_is(p->alg, "RSA") && !sstr_is(p->alg, "ECDSA") && !sstr_is(p->alg, "Ed25519")) {
				sb m = SB_INIT;
				crpolicy_fe_begin(&m, "spec.constraints.privateKey.algorithm", "Unsupported value: ");
				crpolicy_sb_go_quote(&m, p->alg);
				sg_strbuf_puts(&m, ": supported values: \"RSA\", \"ECDSA\", \"Ed25519\"");
				crpolicy_ferrs_push(&c->webhook, &m);
			}
			if (sstr_is(p->alg, "Ed25519")) {
				snprintf(path, sizeof(path), "%s.maxSize", pk);
				if (p->has_max_size)
					crpolicy_fe_invalid_int(
					    &c->webhook, path, p->max_size,
					    "maxSize cannot be defined with algorithm constraint Ed25519");
				snprintf(path, sizeof(path), "%s.minSize", pk);
				if (p->has_min_size)
					crpolicy_fe_invalid_int(
					    &c->webhook, path, p->min_size,
					    "minSize cannot be defined with algorithm constraint Ed25519");
			}
		}
		snprintf(path, sizeof(path), "%s.maxSize", pk);
		if (p->has_max_size && (p->max_size < 0 || p->max_size > 8192))
			crpolicy_fe_invalid_int(&c->webhook, path, p->max_size, "must be between 0 and 8192 inclusive");
		snprintf(path, sizeof(path), "%s.minSize", pk);
		if (p->has_min_size && (p->min_size < 0 || p->min_size > 8192))
			crpolicy_fe_invalid_int(&c->webhook, path, p->min_size, "must be between 0 and 8192 inclusive");
		snprintf(path, sizeof(path), "%s.maxSize", pk);
		if (p->has_max_size && p->has_min_size && p->max_size < p->min_size)
			crpolicy_fe_invalid_int(&c->webhook, path, p->max_size,
			                        "maxSize must be the same value as minSize or larger");
	}
	struct {
		bool when;
		const char *path;
		int64_t v;
		const char *detail;
	} d[] = {
	    {p->has_max && p->has_min && p->max_s < p->min_s, "spec.constraints.maxDuration", p->max_s,
	     "maxDuration must be the same value as minDuration or larger"},
	    {p->has_max && p->max_s < 0, "spec.constraints.maxDuration", p->max_s,
	     "maxDuration must be a value greater or equal to 0"},
	    {p->has_min && p->min_s < 0, "spec.constraints.minDuration", p->min_s,
	     "minDuration must be a value greater or equal to 0"},
	};
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
		if (!d[i].when)
			continue;
		sb v = SB_INIT;
		crpolicy_sb_duration(&v, d[i].v);
		char *vs = sg_strbuf_take(&v);
		if (!vs) {
			c->oom = true;
			return;
		}
		crpolicy_fe_invalid_str(&c->webhook, d[i].path, cstr(vs), cstr(d[i].detail));
		free(vs);
	}
}

/* spec.externalPolicyServers (the design's field; approver-policy has no
 * webhook check of it): names of cluster-scoped objects, each once, and an
 * approver that calls such servers. */
static void check_external(cc *c)
{
	const sg_crpolicy *p = c->p;
	if (p->external.n && !(c->opts && c->opts->external_policy_servers)) {
		sb m = SB_INIT;
		crpolicy_fe_begin(&m, "spec.externalPolicyServers", "Forbidden");
		crpolicy_fe_end(&c->webhook, &m, cstr("this approver does not call external policy servers"));
		return;
	}
	for (size_t i = 0; i < p->external.n; i++) {
		char path[64];
		snprintf(path, sizeof(path), "spec.externalPolicyServers[%zu]", i);
		sstr n = p->external.v[i];
		if (!sg_names_dns_subdomain(n.p, n.len)) {
			crpolicy_fe_invalid_str(&c->webhook, path, n,
			                        cstr("not the name of an ExternalPolicyServer (a lower-case RFC 1123 "
			                             "subdomain of at most 253 characters)"));
			continue;
		}
		for (size_t j = 0; j < i; j++) {
			if (!sstr_eq(p->external.v[j], n))
				continue;
			sb m = SB_INIT;
			crpolicy_fe_begin(&m, path, "Duplicate value: ");
			crpolicy_sb_go_quote(&m, n);
			crpolicy_fe_end(&c->webhook, &m, cstr(""));
			break;
		}
	}
}

/* validator.go, then allowed's and constraints' Validate, in that order;
 * then the design's externalPolicyServers. */
void crpolicy_webhook_checks(cc *c)
{
	const sg_crpolicy *p = c->p;
	for (size_t i = 0; i < p->n_plugins; i++) {
		if (p->plugin_known[i])
			continue;
		sb m = SB_INIT;
		crpolicy_fe_begin(&m, "spec.plugins", "Unsupported value: ");
		crpolicy_sb_go_quote(&m, p->plugin_names[i]);
		for (size_t j = 0; c->opts && j < c->opts->plugin_count; j++) {
			sg_strbuf_puts(&m, j ? ", " : ": supported values: ");
			crpolicy_sb_go_quote(&m, cstr(c->opts->plugins[j]));
		}
		crpolicy_ferrs_push(&c->webhook, &m);
	}
	if (!p->has_issuer_sel && !p->has_ns_sel)
		crpolicy_fe_required(
		    &c->webhook, "spec.selector",
		    "one of issuerRef or namespace must be defined, hint: `{}` on either matches everything");
	check_match_labels(c);

	if (p->has_allowed) {
		for (int i = 0; i < SAN_FIELDS; i++) {
			char path[64];
			snprintf(path, sizeof(path), "spec.allowed.%s", crpolicy_san_fields[i]);
			check_field(c, path, &p->san[i], true);
		}
		if (p->has_subject)
			for (int i = 0; i < SUBJ_COUNT; i++) {
				char path[64];
				snprintf(path, sizeof(path), "spec.allowed.subject.%s",
				         crpolicy_subject_slots[i].field);
				check_field(c, path, &p->subj[i], true);
			}
		check_field(c, "spec.allowed.commonName", &p->cn, false);
		if (p->has_subject)
			check_field(c, "spec.allowed.subject.serialNumber", &p->serial, false);
		check_others(c, "spec.allowed.otherNames", p->other_names, p->n_other_names, false);
		if (p->has_subject)
			check_others(c, "spec.allowed.subject.otherAttributes", p->other_attrs, p->n_other_attrs, true);
	}
	if (p->has_constraints)
		check_constraints(c);
	check_external(c);
}
