/*
 * sg_crpolicy_compile: a CertificateRequestPolicy read into plain C
 * (struct sg_crpolicy, private/sg_crpolicy_impl.h) and checked the way
 * the API server's schema checks it: types, bounds, the KeyUsage enum, Go
 * durations. Every string is an owned copy in the policy's one list of
 * allocations, so the JSON is not kept and freeing is one loop. What the
 * schema refuses and what approver-policy's webhook refuses
 * (sg_crpolicy_webhook.c) become the policy's NotReady condition in that
 * order; then come the accessors. Apart from the evaluation
 * (sg_crpolicy_eval.c) so that each of the two reads alone, and so that
 * what a new kind of rule needs at compile time lands here and what it
 * needs per request lands there.
 */
#include "sg_crpolicy_impl.h"
#include "sg_goduration.h"
#include "sg_guard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the compiled policy's tables ------------------------------------------ */

const struct subject_slot crpolicy_subject_slots[SUBJ_COUNT] = {
    {"2.5.4.10", "organizations"}, {"2.5.4.6", "countries"}, {"2.5.4.11", "organizationalUnits"},
    {"2.5.4.7", "localities"},     {"2.5.4.8", "provinces"}, {"2.5.4.9", "streetAddresses"},
    {"2.5.4.17", "postalCodes"},
};

const char *const crpolicy_san_fields[SAN_FIELDS] = {"dnsNames", "ipAddresses", "uris", "emailAddresses"};
const sg_csr_facts_san_type crpolicy_san_types[SAN_FIELDS] = {SG_CSR_FACTS_SAN_DNS, SG_CSR_FACTS_SAN_IP,
                                                              SG_CSR_FACTS_SAN_URI, SG_CSR_FACTS_SAN_EMAIL};

/* ---- compiling --------------------------------------------------------------- */

static void *cc_alloc(cc *c, size_t n)
{
	sg_crpolicy *p = c->p;
	if (c->oom)
		return NULL;
	if (p->n_allocs == p->cap_allocs) {
		size_t cap = p->cap_allocs ? 2 * p->cap_allocs : 32;
		void **a = realloc(p->allocs, cap * sizeof(*a));
		if (!a) {
			c->oom = true;
			return NULL;
		}
		p->allocs = a;
		p->cap_allocs = cap;
	}
	void *m = calloc(1, n ? n : 1);
	if (!m) {
		c->oom = true;
		return NULL;
	}
	p->allocs[p->n_allocs++] = m;
	return m;
}

static const char *json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "object";
	case JSON_ARRAY:
		return "array";
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
		return "integer";
	case JSON_REAL:
		return "number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "boolean";
	default:
		return "null";
	}
}

/* A member of obj, or NULL when absent or null (the API server drops nulls
 * of fields that are not nullable). */
static const json_t *member(const json_t *obj, const char *key)
{
	const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
	return json_is_null(v) ? NULL : v;
}

/* The API server's schema error for a value of the wrong type. */
static bool typed(cc *c, const char *path, const json_t *v, json_type want, const char *wantname)
{
	if (json_typeof(v) == want || (want == JSON_TRUE && json_is_boolean(v)))
		return true;
	sb m = SB_INIT;
	const char *got = json_type_name(v);
	crpolicy_fe_begin(&m, path, "Invalid value: ");
	crpolicy_sb_go_quote(&m, cstr(got));
	sg_strbuf_printf(&m, ": %s in body must be of type %s: \"%s\"", path, wantname, got);
	crpolicy_ferrs_push(&c->schema, &m);
	return false;
}

/* A field error "Too long" when n > SG_CRPOLICY_MAX_STRING; whether so. */
static bool too_long(cc *c, const char *path, size_t n)
{
	if (n <= SG_CRPOLICY_MAX_STRING)
		return false;
	sb m = SB_INIT;
	crpolicy_fe_begin(&m, path, "Too long");
	sg_strbuf_printf(&m, ": may not be more than %d bytes", SG_CRPOLICY_MAX_STRING);
	crpolicy_ferrs_push(&c->schema, &m);
	return true;
}

static bool read_string(cc *c, const char *path, const json_t *v, sstr *out)
{
	if (!typed(c, path, v, JSON_STRING, "string"))
		return false;
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);
	if (too_long(c, path, n))
		return false;
	if (memchr(s, '\0', n)) {
		crpolicy_fe_invalid_str(&c->schema, path, (sstr){s, n}, cstr("must not contain a NUL character"));
		return false;
	}
	char *d = cc_alloc(c, n + 1);
	if (!d)
		return false;
	memcpy(d, s, n);
	*out = (sstr){d, n};
	return true;
}

static bool too_many(cc *c, const char *path, size_t n, size_t max)
{
	if (n <= max)
		return false;
	sb m = SB_INIT;
	crpolicy_fe_begin(&m, path, "Too many: ");
	sg_strbuf_printf(&m, "%zu: must have at most %zu items", n, max);
	crpolicy_ferrs_push(&c->schema, &m);
	return true;
}

static bool read_strings(cc *c, const char *path, const json_t *v, slist *out)
{
	if (!typed(c, path, v, JSON_ARRAY, "array") || too_many(c, path, json_array_size(v), SG_CRPOLICY_MAX_VALUES))
		return false;
	size_t n = json_array_size(v);
	out->v = cc_alloc(c, n * sizeof(sstr));
	if (!out->v)
		return false;
	bool ok = true;
	for (size_t i = 0; i < n; i++) {
		char ipath[256];
		snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
		ok = read_string(c, ipath, json_array_get(v, i), &out->v[out->n]) && ok;
		if (ok)
			out->n++;
	}
	return ok;
}

static bool read_bool(cc *c, const char *path, const json_t *v, bool *out)
{
	if (!typed(c, path, v, JSON_TRUE, "boolean"))
		return false;
	*out = json_is_true(v);
	return true;
}

/* Holds r in the policy (released by sg_crpolicy_free). */
static bool hold(cc *c, crpolicy_rule *r)
{
	sg_crpolicy *p = c->p;
	if (p->n_held == p->cap_held) {
		size_t cap = p->cap_held ? 2 * p->cap_held : 8;
		crpolicy_rule **h = realloc(p->held, cap * sizeof(*h));
		if (!h) {
			crpolicy_rule_put(r);
			c->oom = true;
			return false;
		}
		p->held = h;
		p->cap_held = cap;
	}
	p->held[p->n_held++] = r;
	return true;
}

/* validations: [{rule, message}]: each rule compiled (or found compiled:
 * sg_crpolicy_cel.c), its message kept for a denial. A rule that does
 * not compile is the webhook's to report (crpolicy_rule_error). */
static void read_rules(cc *c, const char *path, const json_t *v, allowed_field *f)
{
	slist *out = &f->rules;
	if (!typed(c, path, v, JSON_ARRAY, "array") || too_many(c, path, json_array_size(v), SG_CRPOLICY_MAX_ENTRIES))
		return;
	size_t n = json_array_size(v);
	out->v = cc_alloc(c, n * sizeof(sstr));
	f->messages = cc_alloc(c, n * sizeof(sstr));
	f->progs = cc_alloc(c, n * sizeof(crpolicy_rule *));
	if (!out->v || !f->messages || !f->progs)
		return;
	for (size_t i = 0; i < n; i++) {
		char ipath[256];
		const json_t *e = json_array_get(v, i);
		/* Field paths are short (our own names and an index); a cut one
		 * would only shorten a message, but say so rather than hide it. */
		int w = snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (!typed(c, ipath, e, JSON_OBJECT, "object"))
			continue;
		sstr rule = {"", 0};
		const json_t *r = member(e, "rule");
		w = snprintf(ipath, sizeof(ipath), "%s[%zu].rule", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (r && !read_string(c, ipath, r, &rule))
			continue;
		sstr message = {NULL, 0};
		const json_t *m = member(e, "message");
		w = snprintf(ipath, sizeof(ipath), "%s[%zu].message", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (m && !read_string(c, ipath, m, &message))
			continue;
		crpolicy_rule *prog = NULL;
		if (crpolicy_rule_get(rule, &prog) < 0) {
			c->oom = true;
			return;
		}
		if (!hold(c, prog))
			return;
		f->progs[out->n] = prog;
		f->messages[out->n] = message;
		out->v[out->n++] = rule;
	}
}

/* allowed.<field>: {value|values, required, validations}. */
static void read_allowed(cc *c, const char *path, const json_t *v, bool slice, allowed_field *out)
{
	char sub[256];
	if (!v || !typed(c, path, v, JSON_OBJECT, "object"))
		return;
	out->present = true;
	const json_t *val = member(v, slice ? "values" : "value");
	snprintf(sub, sizeof(sub), "%s.%s", path, slice ? "values" : "value");
	if (val)
		out->has_value =
		    slice ? read_strings(c, sub, val, &out->values) : read_string(c, sub, val, &out->value);
	const json_t *req = member(v, "required");
	snprintf(sub, sizeof(sub), "%s.required", path);
	if (req)
		read_bool(c, sub, req, &out->required);
	const json_t *rules = member(v, "validations");
	snprintf(sub, sizeof(sub), "%s.validations", path);
	if (rules)
		read_rules(c, sub, rules, out);
}

static void read_others(cc *c, const char *path, const json_t *v, other_entry **out, size_t *count)
{
	if (!typed(c, path, v, JSON_ARRAY, "array") || too_many(c, path, json_array_size(v), SG_CRPOLICY_MAX_ENTRIES))
		return;
	size_t n = json_array_size(v);
	*out = cc_alloc(c, n * sizeof(other_entry));
	if (!*out)
		return;
	for (size_t i = 0; i < n; i++) {
		char ipath[256], sub[300];
		const json_t *e = json_array_get(v, i);
		/* Field paths are short (our own names and an index); a cut one
		 * would only shorten a message, but say so rather than hide it. */
		int w = snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (!typed(c, ipath, e, JSON_OBJECT, "object"))
			continue;
		other_entry *o = &(*out)[*count];
		const json_t *oid = member(e, "oid");
		snprintf(sub, sizeof(sub), "%s.oid", ipath);
		if (!oid) {
			crpolicy_fe_required(&c->schema, sub, ""); /* the schema requires it */
			continue;
		}
		if (!read_string(c, sub, oid, &o->oid))
			continue;
		read_allowed(c, ipath, e, true, &o->f);
		(*count)++;
	}
}

static void read_subject(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	char path[128];
	if (!typed(c, "spec.allowed.subject", v, JSON_OBJECT, "object"))
		return;
	p->has_subject = true;
	for (int i = 0; i < SUBJ_COUNT; i++) {
		snprintf(path, sizeof(path), "spec.allowed.subject.%s", crpolicy_subject_slots[i].field);
		read_allowed(c, path, member(v, crpolicy_subject_slots[i].field), true, &p->subj[i]);
	}
	read_allowed(c, "spec.allowed.subject.serialNumber", member(v, "serialNumber"), false, &p->serial);
	const json_t *o = member(v, "otherAttributes");
	if (o)
		read_others(c, "spec.allowed.subject.otherAttributes", o, &p->other_attrs, &p->n_other_attrs);
}

/* cert-manager's KeyUsage enum, which the CRD's schema enforces on
 * allowed.usages (so a wildcard never reaches the evaluator there). */
static const char *const key_usages[] = {
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
};

static void check_usage(cc *c, size_t i, sstr u)
{
	for (size_t k = 0; k < sizeof(key_usages) / sizeof(key_usages[0]); k++)
		if (sstr_is(u, key_usages[k]))
			return;
	sb m = SB_INIT;
	sg_strbuf_printf(&m, "spec.allowed.usages[%zu]: Unsupported value: ", i);
	crpolicy_sb_go_quote(&m, u);
	for (size_t k = 0; k < sizeof(key_usages) / sizeof(key_usages[0]); k++) {
		sg_strbuf_puts(&m, k ? ", " : ": supported values: ");
		crpolicy_sb_go_quote(&m, cstr(key_usages[k]));
	}
	crpolicy_ferrs_push(&c->schema, &m);
}

static void read_allowed_spec(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.allowed", v, JSON_OBJECT, "object"))
		return;
	p->has_allowed = true;
	read_allowed(c, "spec.allowed.commonName", member(v, "commonName"), false, &p->cn);
	for (int i = 0; i < SAN_FIELDS; i++) {
		char path[64];
		snprintf(path, sizeof(path), "spec.allowed.%s", crpolicy_san_fields[i]);
		read_allowed(c, path, member(v, crpolicy_san_fields[i]), true, &p->san[i]);
	}
	const json_t *isca = member(v, "isCA");
	if (isca)
		p->has_is_ca = read_bool(c, "spec.allowed.isCA", isca, &p->is_ca);
	const json_t *usages = member(v, "usages");
	if (usages)
		p->has_usages = read_strings(c, "spec.allowed.usages", usages, &p->usages);
	for (size_t i = 0; i < p->usages.n; i++)
		check_usage(c, i, p->usages.v[i]);
	const json_t *subject = member(v, "subject");
	if (subject)
		read_subject(c, subject);
	const json_t *others = member(v, "otherNames");
	if (others)
		read_others(c, "spec.allowed.otherNames", others, &p->other_names, &p->n_other_names);
}

int sg_crpolicy_duration_parse(const char *s, int64_t *seconds, bool *fraction)
{
	*seconds = 0;
	*fraction = false;
	SG_ENSURE(s, SG_EINVAL, "duration: missing");
	bool neg = s[0] == '-' && s[1] != '+' && s[1] != '-';
	const char *t = neg ? s + 1 : s;
	int64_t sec = 0, up = 0;
	SG_TRY(sg_goduration_parse(t, &sec));
	/* The parser truncates to seconds: with 999999999ns more it gives the
	 * value rounded up instead, so the two differ exactly when a fraction
	 * was dropped. Where the longer string cannot be parsed (the 64-byte
	 * bound, the int64 bound) a fraction cannot be ruled out. */
	char more[96];
	int n = snprintf(more, sizeof(more), "%s999999999ns", t);
	if (n < 0 || (size_t)n >= sizeof(more) || sg_goduration_parse(more, &up) != SG_OK) {
		sg_error_clear();
		*fraction = true;
	} else {
		*fraction = up != sec;
	}
	*seconds = neg ? -sec : sec;
	return SG_OK;
}

/* A Go duration in a policy. */
static bool read_duration(cc *c, const char *path, const json_t *v, int64_t *out, bool *fraction)
{
	sstr s;
	if (!read_string(c, path, v, &s))
		return false;
	if (sg_crpolicy_duration_parse(s.p, out, fraction) != SG_OK) {
		crpolicy_fe_invalid_str(&c->schema, path, s, cstr(sg_error_last()->msg));
		sg_error_clear();
		return false;
	}
	return true;
}

static bool read_int(cc *c, const char *path, const json_t *v, long long *out)
{
	if (!typed(c, path, v, JSON_INTEGER, "integer"))
		return false;
	*out = (long long)json_integer_value(v);
	return true;
}

static void read_constraints(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.constraints", v, JSON_OBJECT, "object"))
		return;
	p->has_constraints = true;
	const json_t *d;
	if ((d = member(v, "minDuration")))
		p->has_min = read_duration(c, "spec.constraints.minDuration", d, &p->min_s, &p->min_frac);
	if ((d = member(v, "maxDuration")))
		p->has_max = read_duration(c, "spec.constraints.maxDuration", d, &p->max_s, &p->max_frac);
	const json_t *pk = member(v, "privateKey");
	if (!pk || !typed(c, "spec.constraints.privateKey", pk, JSON_OBJECT, "object"))
		return;
	p->has_pk = true;
	if ((d = member(pk, "algorithm")))
		p->has_alg = read_string(c, "spec.constraints.privateKey.algorithm", d, &p->alg);
	if ((d = member(pk, "minSize")))
		p->has_min_size = read_int(c, "spec.constraints.privateKey.minSize", d, &p->min_size);
	if ((d = member(pk, "maxSize")))
		p->has_max_size = read_int(c, "spec.constraints.privateKey.maxSize", d, &p->max_size);
}

static void read_selector(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.selector", v, JSON_OBJECT, "object"))
		return;
	const json_t *ir = member(v, "issuerRef"), *ns = member(v, "namespace"), *d;
	if (ir && typed(c, "spec.selector.issuerRef", ir, JSON_OBJECT, "object")) {
		p->has_issuer_sel = true;
		if ((d = member(ir, "name")))
			p->has_sel_name = read_string(c, "spec.selector.issuerRef.name", d, &p->sel_name);
		if ((d = member(ir, "kind")))
			p->has_sel_kind = read_string(c, "spec.selector.issuerRef.kind", d, &p->sel_kind);
		if ((d = member(ir, "group")))
			p->has_sel_group = read_string(c, "spec.selector.issuerRef.group", d, &p->sel_group);
	}
	if (ns && typed(c, "spec.selector.namespace", ns, JSON_OBJECT, "object")) {
		p->has_ns_sel = true;
		if ((d = member(ns, "matchNames")))
			read_strings(c, "spec.selector.namespace.matchNames", d, &p->match_names);
		if ((d = member(ns, "matchLabels")) &&
		    typed(c, "spec.selector.namespace.matchLabels", d, JSON_OBJECT, "object") &&
		    !too_many(c, "spec.selector.namespace.matchLabels", json_object_size(d), SG_CRPOLICY_MAX_ENTRIES)) {
			size_t n = json_object_size(d);
			p->has_match_labels = true;
			p->label_keys = cc_alloc(c, n * sizeof(sstr));
			p->label_values = cc_alloc(c, n * sizeof(sstr));
			if (!p->label_keys || !p->label_values)
				return;
			const char *k;
			const json_t *lv;
			json_object_foreach((json_t *)d, k, lv)
			{
				size_t kn = strlen(k);
				sstr value;
				if (too_long(c, "spec.selector.namespace.matchLabels", kn))
					continue;
				sb path = SB_INIT;
				sg_strbuf_puts(&path, "spec.selector.namespace.matchLabels.");
				sg_strbuf_puts(&path, k);
				char *ps = sg_strbuf_take(&path);
				if (!ps) {
					c->oom = true;
					return;
				}
				bool ok = read_string(c, ps, lv, &value);
				free(ps);
				char *kd = ok ? cc_alloc(c, kn + 1) : NULL;
				if (!kd)
					continue;
				memcpy(kd, k, kn);
				/* kept sorted by key, as Go's encoding/json prints a map */
				size_t at = p->n_labels;
				while (at > 0 && strcmp(p->label_keys[at - 1].p, kd) > 0) {
					p->label_keys[at] = p->label_keys[at - 1];
					p->label_values[at] = p->label_values[at - 1];
					at--;
				}
				p->label_keys[at] = (sstr){kd, kn};
				p->label_values[at] = value;
				p->n_labels++;
			}
		}
	}
}

static void read_plugins(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.plugins", v, JSON_OBJECT, "object") ||
	    too_many(c, "spec.plugins", json_object_size(v), SG_CRPOLICY_MAX_ENTRIES))
		return;
	size_t n = json_object_size(v);
	p->plugin_names = cc_alloc(c, n * sizeof(sstr));
	p->plugin_values = cc_alloc(c, n * sizeof(json_t *));
	p->plugin_known = cc_alloc(c, n * sizeof(bool));
	if (!p->plugin_names || !p->plugin_values || !p->plugin_known)
		return;
	const char *name;
	const json_t *pv;
	json_object_foreach((json_t *)v, name, pv)
	{
		size_t nn = strlen(name);
		if (too_long(c, "spec.plugins", nn))
			continue;
		sb path = SB_INIT;
		sg_strbuf_puts(&path, "spec.plugins.");
		sg_strbuf_puts(&path, name);
		char *ps = sg_strbuf_take(&path);
		if (!ps) {
			c->oom = true;
			return;
		}
		bool ok = typed(c, ps, pv, JSON_OBJECT, "object");
		const json_t *values = ok ? member(pv, "values") : NULL;
		if (values) {
			sb vp = SB_INIT;
			sg_strbuf_puts(&vp, ps);
			sg_strbuf_puts(&vp, ".values");
			char *vps = sg_strbuf_take(&vp);
			ok = vps && typed(c, vps, values, JSON_OBJECT, "object");
			const char *k;
			const json_t *s;
			if (ok) {
				json_object_foreach((json_t *)values, k, s)
				{
					if (json_is_string(s))
						continue;
					sb kp = SB_INIT;
					sg_strbuf_puts(&kp, vps);
					sg_strbuf_putc(&kp, '.');
					sg_strbuf_puts(&kp, k);
					char *kps = sg_strbuf_take(&kp);
					if (kps)
						typed(c, kps, s, JSON_STRING, "string");
					else
						c->oom = true;
					free(kps);
					ok = false;
				}
			}
			free(vps);
		}
		free(ps);
		char *nd = cc_alloc(c, nn + 1);
		if (!ok || !nd)
			continue;
		memcpy(nd, name, nn);
		json_t *copy = values ? json_deep_copy(values) : NULL;
		if (values && !copy) {
			c->oom = true;
			return;
		}
		size_t at = p->n_plugins; /* kept sorted by name */
		while (at > 0 && strcmp(p->plugin_names[at - 1].p, nd) > 0) {
			p->plugin_names[at] = p->plugin_names[at - 1];
			p->plugin_values[at] = p->plugin_values[at - 1];
			at--;
		}
		p->plugin_names[at] = (sstr){nd, nn};
		p->plugin_values[at] = copy;
		p->n_plugins++;
	}
	for (size_t i = 0; i < p->n_plugins; i++)
		for (size_t j = 0; c->opts && j < c->opts->plugin_count; j++)
			if (c->opts->plugins[j] && sstr_is(p->plugin_names[i], c->opts->plugins[j]))
				p->plugin_known[i] = true;
}

/* ---- compile, free, accessors ---------------------------------------------------- */

void sg_crpolicy_free(sg_crpolicy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_plugins; i++)
		json_decref(p->plugin_values[i]);
	for (size_t i = 0; i < p->n_allocs; i++)
		free(p->allocs[i]);
	free(p->allocs);
	for (size_t i = 0; i < p->n_held; i++)
		crpolicy_rule_put(p->held[i]);
	free(p->held);
	free(p->condition);
	free(p);
}

int sg_crpolicy_compile(sg_crpolicy **out, const json_t *policy, const sg_crpolicy_options *opts)
{
	*out = NULL;
	SG_ENSURE(json_is_object(policy), SG_EINVAL, "CertificateRequestPolicy: not a JSON object");
	const json_t *name = member(member(policy, "metadata"), "name");
	SG_ENSURE(json_is_string(name) && json_string_length(name) > 0 &&
	              json_string_length(name) <= SG_CRPOLICY_MAX_STRING &&
	              strlen(json_string_value(name)) == json_string_length(name),
	          SG_EINVAL, "CertificateRequestPolicy: metadata.name is missing or not a name");

	sg_crpolicy *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "CertificateRequestPolicy: out of memory");
	cc c = {.p = p, .opts = opts};
	sstr n;
	if (read_string(&c, "metadata.name", name, &n))
		p->name = (char *)n.p;
	const json_t *spec = member(policy, "spec"), *v;
	if (spec && typed(&c, "spec", spec, JSON_OBJECT, "object")) {
		if ((v = member(spec, "allowed")))
			read_allowed_spec(&c, v);
		if ((v = member(spec, "constraints")))
			read_constraints(&c, v);
		if ((v = member(spec, "selector")))
			read_selector(&c, v);
		if ((v = member(spec, "plugins")))
			read_plugins(&c, v);
		if ((v = member(spec, "externalPolicyServers")) &&
		    !too_many(&c, "spec.externalPolicyServers", json_array_size(v), SG_CRPOLICY_MAX_ENTRIES))
			p->has_external = read_strings(&c, "spec.externalPolicyServers", v, &p->external);
	}
	crpolicy_webhook_checks(&c);

	/* The condition: what the schema refused, then what the webhook did. */
	for (size_t i = 0; i < c.webhook.n; i++) {
		sb m = SB_INIT;
		sg_strbuf_puts(&m, c.webhook.v[i]);
		crpolicy_ferrs_push(&c.schema, &m);
	}
	sb msg = SB_INIT;
	p->ready = c.schema.n == 0;
	if (p->ready) {
		sg_strbuf_puts(&msg, SG_CRPOLICY_READY_MESSAGE);
	} else {
		sg_strbuf_puts(&msg, SG_CRPOLICY_NOT_READY_PREFIX);
		crpolicy_sb_aggregate(&msg, &c.schema);
	}
	bool failed = c.oom || c.schema.failed || c.webhook.failed || !p->name;
	crpolicy_ferrs_free(&c.schema);
	crpolicy_ferrs_free(&c.webhook);
	p->condition = sg_strbuf_take(&msg);
	if (failed || !p->condition) {
		sg_crpolicy_free(p);
		SG_BAIL(SG_EINTERNAL, "CertificateRequestPolicy: out of memory (or a condition message over %u bytes)",
		        SG_CRPOLICY_MAX_MESSAGE);
	}
	*out = p;
	return SG_OK;
}

const char *sg_crpolicy_name(const sg_crpolicy *p)
{
	return p->name;
}

bool sg_crpolicy_ready(const sg_crpolicy *p)
{
	return p->ready;
}

const char *sg_crpolicy_condition_reason(const sg_crpolicy *p)
{
	return p->ready ? SG_CRPOLICY_READY_REASON : SG_CRPOLICY_NOT_READY_REASON;
}

const char *sg_crpolicy_condition_message(const sg_crpolicy *p)
{
	return p->condition;
}

size_t sg_crpolicy_plugin_count(const sg_crpolicy *p)
{
	return p->n_plugins;
}

const char *sg_crpolicy_plugin_name(const sg_crpolicy *p, size_t i)
{
	return i < p->n_plugins ? p->plugin_names[i].p : NULL;
}

const json_t *sg_crpolicy_plugin_values(const sg_crpolicy *p, size_t i)
{
	return i < p->n_plugins ? p->plugin_values[i] : NULL;
}

size_t sg_crpolicy_external_count(const sg_crpolicy *p)
{
	return p->external.n;
}

const char *sg_crpolicy_external_name(const sg_crpolicy *p, size_t i)
{
	return i < p->external.n ? p->external.v[i].p : NULL;
}
