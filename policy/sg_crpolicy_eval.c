/*
 * sg_crpolicy_eval: a compiled policy against one CertificateRequest.
 * approver-policy's two evaluators in their order: allowed (the CSR's
 * facts from signer/sg_csr_facts: common name, SANs, isCA, usages,
 * otherNames, subject fields, serial number, other attributes) and
 * constraints (duration bounds, with the dropped fractions of a second
 * sg_crpolicy_duration_parse tracks; the key's algorithm and size), each
 * a field.ErrorList whose aggregate is its message; then the verdict that
 * joins them and the plugins' answers. Apart from the compiler
 * (sg_crpolicy_compile.c) so that the per-request path reads alone, and
 * so that what a new kind of rule needs per request lands here.
 */
#include "sg_crpolicy_impl.h"
#include "sg_guard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- evaluation ------------------------------------------------------------ */

#define NON_STRING "<non-string value>"
#define NON_STRING_DETAIL                                                                                              \
	"uses an unsupported ASN.1 type or string encoding; re-issue the certificate with a UTF8String or "            \
	"PrintableString subject"

/* A value Go's encoding/asn1 decodes to a string (UniversalString is not). */
static bool go_string(const sg_csr_facts_attr *a)
{
	return a->is_string && a->tag != SG_CSR_FACTS_UNIVERSALSTRING;
}

static sstr attr_text(const sg_csr_facts_attr *a)
{
	return (sstr){a->value, a->value_len};
}

/* "<path>[.<child>]" as a new string; NULL (and l marked failed) when out
 * of memory. key, when given, is appended as "[<key>]" before the child. */
static char *path_of(ferrs *l, const char *path, const sstr *key, const char *child)
{
	sb m = SB_INIT;
	sg_strbuf_puts(&m, path);
	if (key) {
		sg_strbuf_putc(&m, '[');
		sb_put(&m, *key);
		sg_strbuf_putc(&m, ']');
	}
	if (child) {
		sg_strbuf_putc(&m, '.');
		sg_strbuf_puts(&m, child);
	}
	char *s = sg_strbuf_take(&m);
	if (!s)
		l->failed = true;
	return s;
}

static void fe_required_true(ferrs *l, const char *path, const sstr *key)
{
	char *p = path_of(l, path, key, "required");
	if (p)
		crpolicy_fe_required(l, p, "true");
	free(p);
}

/* runValidations: each rule on s, in order. false: Invalid(<vpath>[i], s,
 * the rule's message or "failed rule: <rule>"); an evaluation error:
 * InternalError(<vpath>[i], err), which denies (approver-policy's way: a
 * rule that cannot be evaluated does not let a value through). */
static void run_validations(ferrs *l, const allowed_field *f, sstr s, const char *vpath, const sg_crpolicy_request *r)
{
	for (size_t i = 0; i < f->rules.n; i++) {
		char at[512];
		int w = snprintf(at, sizeof(at), "%s[%zu]", vpath, i);
		if (w < 0 || (size_t)w >= sizeof(at)) {
			l->failed = true;
			return;
		}
		bool valid = false;
		if (!f->progs[i] || crpolicy_rule_eval(f->progs[i], s, r, &valid) < 0) {
			sb m = SB_INIT;
			crpolicy_fe_begin(&m, at, "Internal error");
			crpolicy_fe_end(l, &m, cstr(f->progs[i] ? sg_error_last()->msg : "the rule was not compiled"));
			continue;
		}
		if (valid)
			continue;
		if (f->messages[i].p) {
			crpolicy_fe_invalid_str(l, at, s, f->messages[i]);
			continue;
		}
		sb d = SB_INIT;
		sg_strbuf_puts(&d, "failed rule: ");
		sb_put(&d, f->rules.v[i]);
		char *ds = sg_strbuf_take(&d);
		if (ds)
			crpolicy_fe_invalid_str(l, at, s, cstr(ds));
		else
			l->failed = true;
		free(ds);
	}
}

/* evaluateString: one subject string against allowed.<field>. */
static void eval_string(ferrs *l, sstr s, const allowed_field *f, const char *path, const sg_crpolicy_request *r)
{
	if (s.len == 0) {
		if (f->required)
			fe_required_true(l, path, NULL);
		return;
	}
	if (!f->has_value && f->rules.n == 0) {
		crpolicy_fe_invalid_str(l, path, s, cstr("no allowed value"));
		return;
	}
	if (f->has_value && !crpolicy_wild(f->value, s)) {
		char *p = path_of(l, path, NULL, "value");
		if (p)
			crpolicy_fe_invalid_str(l, p, s, f->value);
		free(p);
	}
	if (f->rules.n) {
		char *vp = path_of(l, path, NULL, "validations");
		if (vp)
			run_validations(l, f, s, vp, r);
		free(vp);
	}
}

/* evaluateSlice: a list of values against allowed.<field> (or an
 * otherNames / otherAttributes entry, path then carrying its key). */
static void eval_slice(ferrs *l, const sstr *v, size_t n, const allowed_field *f, const char *path, const sstr *key,
                       const sg_crpolicy_request *r)
{
	if (n == 0) {
		if (f && f->required)
			fe_required_true(l, path, key);
		return;
	}
	char *at = path_of(l, path, key, NULL);
	if (!at)
		return;
	if (!f || (!f->has_value && f->rules.n == 0)) {
		crpolicy_fe_invalid_list(l, at, v, n, cstr("no allowed values"));
		free(at);
		return;
	}
	if (f->has_value && !crpolicy_wild_subset(f->values.v, f->values.n, v, n)) {
		sb d = SB_INIT;
		crpolicy_sb_join(&d, f->values.v, f->values.n);
		char *ds = sg_strbuf_take(&d);
		char *vp = path_of(l, path, key, "values");
		if (ds && vp)
			crpolicy_fe_invalid_list(l, vp, v, n, cstr(ds));
		else
			l->failed = true;
		free(ds);
		free(vp);
	}
	free(at);
	if (f->rules.n) {
		char *vp = path_of(l, path, key, "validations");
		for (size_t i = 0; vp && i < n; i++)
			run_validations(l, f, v[i], vp, r);
		if (!vp)
			l->failed = true;
		free(vp);
	}
}

/* CommonName / SerialNumber: every RDN value of oid, each judged alone
 * when there are several (a duplicate-CN request cannot hide one). */
static void eval_subject_string(ferrs *l, const sg_csr_facts *f, const char *oid, const allowed_field *field,
                                const char *path, const sg_crpolicy_request *r)
{
	sstr v[SG_CSR_FACTS_MAX_ATTRS];
	size_t n = 0;
	for (size_t i = 0; i < f->attr_count; i++) {
		const sg_csr_facts_attr *a = &f->attrs[i];
		if (strcmp(a->oid, oid) != 0)
			continue;
		if (!go_string(a)) {
			sb d = SB_INIT;
			sg_strbuf_printf(&d, "subject attribute %s ", oid);
			sg_strbuf_puts(&d, NON_STRING_DETAIL);
			char *ds = sg_strbuf_take(&d);
			if (ds)
				crpolicy_fe_invalid_str(l, path, cstr(NON_STRING), cstr(ds));
			else
				l->failed = true;
			free(ds);
			return;
		}
		v[n++] = attr_text(a);
	}
	if (n <= 1) {
		eval_string(l, n ? v[0] : cstr(""), field, path, r);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char ip[96];
		snprintf(ip, sizeof(ip), "%s[%zu]", path, i);
		eval_string(l, v[i], field, ip, r);
	}
}

static void eval_sans(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f, const sg_crpolicy_request *r)
{
	for (int k = 0; k < SAN_FIELDS; k++) {
		sstr v[SG_CSR_FACTS_MAX_SANS];
		size_t n = 0;
		for (size_t i = 0; i < f->san_count; i++)
			if (f->sans[i].type == crpolicy_san_types[k])
				v[n++] = (sstr){f->sans[i].value, f->sans[i].value_len};
		char path[64];
		snprintf(path, sizeof(path), "spec.allowed.%s", crpolicy_san_fields[k]);
		eval_slice(l, v, n, &p->san[k], path, NULL, r);
	}
}

static void eval_usages(ferrs *l, const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	if (r->usage_count == 0)
		return;
	sstr v[SG_CRPOLICY_MAX_VALUES];
	size_t n = r->usage_count < SG_CRPOLICY_MAX_VALUES ? r->usage_count : SG_CRPOLICY_MAX_VALUES;
	for (size_t i = 0; i < n; i++)
		v[i] = cstr(r->usages[i]);
	if (!p->has_usages) {
		crpolicy_fe_invalid_list(l, "spec.allowed.usages", v, n, cstr("nil"));
		return;
	}
	if (crpolicy_wild_subset(p->usages.v, p->usages.n, v, n))
		return;
	sb d = SB_INIT;
	crpolicy_sb_join(&d, p->usages.v, p->usages.n);
	char *ds = sg_strbuf_take(&d);
	if (ds)
		crpolicy_fe_invalid_list(l, "spec.allowed.usages", v, n, cstr(ds));
	else
		l->failed = true;
	free(ds);
}

/* The last entry for oid (Go indexes them in a map: the last one wins). */
static const other_entry *entry_for(const other_entry *e, size_t n, sstr oid)
{
	const other_entry *found = NULL;
	for (size_t i = 0; i < n; i++)
		if (sstr_eq(e[i].oid, oid))
			found = &e[i];
	return found;
}

static const char *const denied_types[] = {"directoryName", "x400Address", "ediPartyName", "registeredID"};
static const sg_csr_facts_san_type denied_type_ids[] = {SG_CSR_FACTS_SAN_DIRECTORY, SG_CSR_FACTS_SAN_X400,
                                                        SG_CSR_FACTS_SAN_EDI_PARTY, SG_CSR_FACTS_SAN_REGISTERED_ID};

/* OtherNames: the GeneralName types without an opt-in, then otherName
 * values grouped by type-id in order of first appearance. */
static void eval_other_names(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f, const sg_crpolicy_request *r)
{
	for (size_t t = 0; t < 4; t++)
		for (size_t i = 0; i < f->san_count; i++)
			if (f->sans[i].type == denied_type_ids[t]) {
				char path[64], detail[64];
				snprintf(path, sizeof(path), "spec.allowed.subjectAltName.%s", denied_types[t]);
				snprintf(detail, sizeof(detail), "%s SAN entries are not permitted", denied_types[t]);
				crpolicy_fe_invalid_str(l, path, cstr(denied_types[t]), cstr(detail));
			}
	for (size_t i = 0; i < f->san_count; i++) {
		const sg_csr_facts_san *s = &f->sans[i];
		if (s->type != SG_CSR_FACTS_SAN_OTHER_NAME)
			continue;
		sstr oid = cstr(s->oid);
		bool first = true;
		for (size_t j = 0; j < i && first; j++)
			first =
			    !(f->sans[j].type == SG_CSR_FACTS_SAN_OTHER_NAME && strcmp(f->sans[j].oid, s->oid) == 0);
		if (!first)
			continue;
		sstr v[SG_CSR_FACTS_MAX_SANS];
		size_t n = 0;
		for (size_t j = i; j < f->san_count; j++)
			if (f->sans[j].type == SG_CSR_FACTS_SAN_OTHER_NAME && strcmp(f->sans[j].oid, s->oid) == 0)
				v[n++] = (sstr){f->sans[j].value, f->sans[j].value_len};
		const other_entry *e = entry_for(p->other_names, p->n_other_names, oid);
		eval_slice(l, v, n, e ? &e->f : NULL, "spec.allowed.otherNames", &oid, r);
	}
	for (size_t k = 0; k < p->n_other_names; k++) {
		if (!p->other_names[k].f.required)
			continue;
		bool seen = false;
		for (size_t i = 0; i < f->san_count && !seen; i++)
			seen = f->sans[i].type == SG_CSR_FACTS_SAN_OTHER_NAME &&
			       sstr_eq(cstr(f->sans[i].oid), p->other_names[k].oid);
		if (!seen)
			fe_required_true(l, "spec.allowed.otherNames", &p->other_names[k].oid);
	}
}

static void eval_subject_slices(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f, const sg_crpolicy_request *r)
{
	for (int k = 0; k < SUBJ_COUNT; k++) {
		sstr v[SG_CSR_FACTS_MAX_ATTRS];
		size_t n = 0;
		for (size_t i = 0; i < f->attr_count; i++)
			if (go_string(&f->attrs[i]) && strcmp(f->attrs[i].oid, crpolicy_subject_slots[k].oid) == 0)
				v[n++] = attr_text(&f->attrs[i]);
		char path[64];
		snprintf(path, sizeof(path), "spec.allowed.subject.%s", crpolicy_subject_slots[k].field);
		eval_slice(l, v, n, &p->subj[k], path, NULL, r);
	}
}

/* OtherAttributes: non-string values under the named fields, then every
 * attribute outside them, which needs an otherAttributes entry. */
static void eval_other_attributes(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f, const sg_crpolicy_request *r)
{
	static const char generic[] = "subject attribute " NON_STRING_DETAIL;
	for (size_t i = 0; i < f->attr_count; i++) {
		const sg_csr_facts_attr *a = &f->attrs[i];
		sstr oid = cstr(a->oid);
		if (crpolicy_named_subject_oid(oid)) {
			if (sstr_is(oid, OID_CN) || sstr_is(oid, OID_SERIAL) || go_string(a))
				continue;
			for (int k = 0; k < SUBJ_COUNT; k++)
				if (sstr_is(oid, crpolicy_subject_slots[k].oid)) {
					char path[64];
					snprintf(path, sizeof(path), "spec.allowed.subject.%s",
					         crpolicy_subject_slots[k].field);
					crpolicy_fe_invalid_str(l, path, cstr(NON_STRING), cstr(generic));
				}
			continue;
		}
		if (!go_string(a)) {
			char *path = path_of(l, "spec.allowed.subject.otherAttributes", &oid, NULL);
			if (path)
				crpolicy_fe_invalid_str(l, path, cstr(NON_STRING), cstr(generic));
			free(path);
		}
	}
	for (size_t i = 0; i < f->attr_count; i++) {
		const sg_csr_facts_attr *a = &f->attrs[i];
		sstr oid = cstr(a->oid);
		if (crpolicy_named_subject_oid(oid) || !go_string(a))
			continue;
		bool first = true;
		for (size_t j = 0; j < i && first; j++)
			first = !(go_string(&f->attrs[j]) && strcmp(f->attrs[j].oid, a->oid) == 0);
		if (!first)
			continue;
		sstr v[SG_CSR_FACTS_MAX_ATTRS];
		size_t n = 0;
		for (size_t j = i; j < f->attr_count; j++)
			if (go_string(&f->attrs[j]) && strcmp(f->attrs[j].oid, a->oid) == 0)
				v[n++] = attr_text(&f->attrs[j]);
		const other_entry *e = entry_for(p->other_attrs, p->n_other_attrs, oid);
		eval_slice(l, v, n, e ? &e->f : NULL, "spec.allowed.subject.otherAttributes", &oid, r);
	}
	for (size_t k = 0; k < p->n_other_attrs; k++) {
		if (!p->other_attrs[k].f.required)
			continue;
		bool seen = false;
		for (size_t i = 0; i < f->attr_count && !seen; i++)
			seen = sstr_eq(cstr(f->attrs[i].oid), p->other_attrs[k].oid);
		if (!seen)
			fe_required_true(l, "spec.allowed.subject.otherAttributes", &p->other_attrs[k].oid);
	}
}

/* The allowed evaluator: its message (empty when it does not deny). */
static void eval_allowed(sb *out, bool *denied, const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	const sg_csr_facts *f = r->csr;
	if (f->san_decode_error) {
		sg_strbuf_puts(out, "subjectAltName (SAN) extension could not be decoded: ");
		sg_strbuf_puts(out, f->san_decode_error);
		*denied = true;
		return;
	}
	if (f->san_extensions > 1) {
		sg_strbuf_puts(out, "CSR contains multiple SAN extensions; at most one is permitted");
		*denied = true;
		return;
	}
	ferrs l = {0};
	eval_subject_string(&l, f, OID_CN, &p->cn, "spec.allowed.commonName", r);
	eval_sans(&l, p, f, r);
	if (r->is_ca && (!p->has_is_ca || !p->is_ca)) {
		sb m = SB_INIT;
		crpolicy_fe_begin(&m, "spec.allowed.isCA", "Invalid value: true");
		crpolicy_fe_end(&l, &m, cstr(p->has_is_ca ? "false" : "nil"));
	}
	eval_usages(&l, p, r);
	eval_other_names(&l, p, f, r);
	eval_subject_slices(&l, p, f, r);
	eval_subject_string(&l, f, OID_SERIAL, &p->serial, "spec.allowed.subject.serialNumber", r);
	eval_other_attributes(&l, p, f, r);
	if (l.failed)
		out->oom = true; /* a message of the list could not be built */
	if (l.n) {
		*denied = true;
		crpolicy_sb_aggregate(out, &l);
	}
	crpolicy_ferrs_free(&l);
}

static const char *const key_alg_names[] = {"", "RSA", "ECDSA", "Ed25519"};

/* The constraints evaluator; SG_EINVAL when the key cannot be sized. */
static int eval_constraints(sb *out, bool *denied, const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	if (!p->has_constraints)
		return SG_OK;
	const sg_csr_facts *f = r->csr;
	ferrs l = {0};
	struct {
		bool has;
		int64_t bound;
		bool bad;
		const char *path;
	} d[] = {
	    /* Whole seconds R (request) and M (bound), each maybe with a
	     * dropped fraction: r > m is R > M, or R == M and the request's
	     * fraction is larger, which is unknown when both have one (then
	     * deny); r < m is R < M, or R == M and the bound's fraction is
	     * larger. */
	    {p->has_max, p->max_s,
	     r->duration_seconds > p->max_s || (r->duration_seconds == p->max_s && r->duration_fraction),
	     "spec.constraints.maxDuration"},
	    {p->has_min, p->min_s, r->duration_seconds < p->min_s || (r->duration_seconds == p->min_s && p->min_frac),
	     "spec.constraints.minDuration"},
	};
	for (size_t i = 0; i < 2; i++) {
		if (!d[i].has || (r->has_duration && !d[i].bad))
			continue;
		sb v = SB_INIT, b = SB_INIT;
		if (r->has_duration)
			crpolicy_sb_duration(&v, r->duration_seconds);
		else
			sg_strbuf_puts(&v, "nil"); /* metav1.Duration's String() of a nil pointer */
		crpolicy_sb_duration(&b, d[i].bound);
		char *vs = sg_strbuf_take(&v), *bs = sg_strbuf_take(&b);
		if (vs && bs)
			crpolicy_fe_invalid_str(&l, d[i].path, cstr(vs), cstr(bs));
		else
			l.failed = true;
		free(vs);
		free(bs);
	}
	if (p->has_pk) {
		if (f->key_alg == SG_CSR_FACTS_KEY_OTHER) {
			crpolicy_ferrs_free(&l);
			SG_BAIL(SG_EINVAL, "CertificateRequestPolicy %s: unrecognised public key type (algorithm %s)",
			        p->name, f->key_oid ? f->key_oid : "?");
		}
		const char *alg = key_alg_names[f->key_alg];
		char size[24], bound[24];
		snprintf(size, sizeof(size), "%d", f->key_size);
		if (p->has_alg && !sstr_is(p->alg, alg))
			crpolicy_fe_invalid_str(&l, "spec.constraints.privateKey.algorithm", cstr(alg), p->alg);
		if (p->has_max_size && p->max_size < f->key_size) {
			snprintf(bound, sizeof(bound), "%lld", p->max_size);
			crpolicy_fe_invalid_str(&l, "spec.constraints.privateKey.maxSize", cstr(size), cstr(bound));
		}
		if (p->has_min_size && p->min_size > f->key_size) {
			snprintf(bound, sizeof(bound), "%lld", p->min_size);
			crpolicy_fe_invalid_str(&l, "spec.constraints.privateKey.minSize", cstr(size), cstr(bound));
		}
	}
	if (l.failed)
		out->oom = true; /* a message of the list could not be built */
	if (l.n) {
		*denied = true;
		crpolicy_sb_aggregate(out, &l);
	}
	crpolicy_ferrs_free(&l);
	return SG_OK;
}

void sg_crpolicy_verdict_clear(sg_crpolicy_verdict *v)
{
	if (!v)
		return;
	free(v->message);
	memset(v, 0, sizeof(*v));
}

int sg_crpolicy_evaluate(const sg_crpolicy *p, const sg_crpolicy_request *r, sg_crpolicy_verdict *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(p->ready, SG_EINVAL, "CertificateRequestPolicy %s is not ready for approval evaluation", p->name);
	SG_ENSURE(r && r->csr, SG_EINVAL, "CertificateRequestPolicy %s: the request has no parsed CSR", p->name);
	SG_ENSURE(r->csr->attr_count <= SG_CSR_FACTS_MAX_ATTRS && r->csr->san_count <= SG_CSR_FACTS_MAX_SANS, SG_EINVAL,
	          "CertificateRequestPolicy %s: the CSR facts are over their bounds", p->name);
	SG_ENSURE(r->usage_count <= SG_CRPOLICY_MAX_VALUES, SG_EINVAL,
	          "CertificateRequestPolicy %s: the request has more than %d usages", p->name, SG_CRPOLICY_MAX_VALUES);
	sb a = SB_INIT, c = SB_INIT, msg = SB_INIT;
	bool denied = false;
	eval_allowed(&a, &denied, p, r);
	int rc = eval_constraints(&c, &denied, p, r);
	if (rc < 0) {
		sg_strbuf_free(&a);
		sg_strbuf_free(&c);
		return rc;
	}
	sb_put(&msg, (sstr){a.p ? a.p : "", a.len});
	if (a.len && c.len)
		sg_strbuf_puts(&msg, ", ");
	sb_put(&msg, (sstr){c.p ? c.p : "", c.len});
	bool failed = sg_strbuf_failed(&a) || sg_strbuf_failed(&c);
	sg_strbuf_free(&a);
	sg_strbuf_free(&c);
	out->message = failed ? NULL : sg_strbuf_take(&msg);
	sg_strbuf_free(&msg);
	SG_ENSURE(out->message, SG_EINTERNAL,
	          "CertificateRequestPolicy %s: out of memory (or a message over %u bytes) evaluating a request",
	          p->name, SG_CRPOLICY_MAX_MESSAGE);
	out->denied = denied;
	return SG_OK;
}

int sg_crpolicy_verdict_add(sg_crpolicy_verdict *v, bool denied, const char *message)
{
	v->denied = v->denied || denied;
	if (!message || !*message)
		return SG_OK;
	sb m = SB_INIT;
	sg_strbuf_puts(&m, v->message ? v->message : "");
	if (v->message && *v->message)
		sg_strbuf_puts(&m, ", ");
	sg_strbuf_puts(&m, message);
	char *s = sg_strbuf_take(&m);
	SG_ENSURE(s, SG_EINTERNAL, "CertificateRequestPolicy verdict: out of memory (or over %u bytes)",
	          SG_CRPOLICY_MAX_MESSAGE);
	free(v->message);
	v->message = s;
	return SG_OK;
}
