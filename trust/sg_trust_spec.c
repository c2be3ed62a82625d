/*
 * sg_trust_spec: a Bundle's spec read into a `spec` (private/
 * sg_trust_impl.h), borrowing the Bundle's JSON, and checked as
 * trust-manager's webhook and CRD check it: exactly one kind per source,
 * name or selector, key or includeAllKeys, data keys, label selectors (in
 * the string form Go prints, then parsed by kube/'s selector), target
 * metadata without reserved keys, unique target and format keys, no
 * source that is its own target. What it refuses is the InvalidSpec
 * condition of a reconcile and the admission webhook's answer
 * (sg_trust_spec_check), one reading for both. Apart so that the rules of
 * the spec read in one sitting, away from the controller that acts on it.
 */
#include "sg_trust_impl.h"

#include "sg_guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 253

/* ---- the spec ---- */

void trust_spec_free(spec *s)
{
	for (size_t i = 0; i < s->nsrcs; i++)
		sg_kube_selector_free(s->srcs[i].sel);
	sg_kube_selector_free(s->ns_sel);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts the n requirements reqs by their keys, stably: apimachinery's
 * internalSelector.Add sorts by key alone (sort.Sort(ByKey), an insertion
 * sort at a selector's sizes), so "a=x" comes before "a-b=y" and "!c"
 * sits where "c" does, which sorting the printed requirements would not
 * give. */
static void sort_by_key(char **reqs, const char **keys, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		char *r = reqs[i];
		const char *k = keys[i];
		size_t j = i;
		for (; j > 0 && strcmp(keys[j - 1], k) > 0; j--) {
			reqs[j] = reqs[j - 1];
			keys[j] = keys[j - 1];
		}
		reqs[j] = r;
		keys[j] = k;
	}
}

/* A metav1.LabelSelector as the selector string Go prints for it
 * (requirements sorted by key, values sorted), into out. false with why
 * when it is malformed. */
static bool label_selector_string(const json_t *ls, char *out, size_t cap, char *why, size_t whycap)
{
	char *reqs[SG_KUBE_SELECTOR_REQS];
	const char *keys[SG_KUBE_SELECTOR_REQS];
	size_t n = 0;
	bool ok = true;
	const char *k;
	json_t *v;
	out[0] = '\0';
	if (!json_is_object(ls)) {
		snprintf(why, whycap, "must be an object");
		return false;
	}
	json_t *ml = json_object_get(ls, "matchLabels");
	json_t *me = json_object_get(ls, "matchExpressions");
	if ((ml && !json_is_object(ml)) || (me && !json_is_array(me))) {
		snprintf(why, whycap, "matchLabels must be an object and matchExpressions a list");
		return false;
	}
	json_object_foreach(ml, k, v)
	{
		if (!json_is_string(v) || n == SG_KUBE_SELECTOR_REQS) {
			snprintf(why, whycap, "matchLabels[%s]: a string value is required", k);
			ok = false;
			break;
		}
		size_t len = strlen(k) + json_string_length(v) + 2;
		if (!(reqs[n] = malloc(len))) {
			ok = false;
			snprintf(why, whycap, "out of memory");
			break;
		}
		keys[n] = k;
		snprintf(reqs[n++], len, "%s=%s", k, json_string_value(v));
	}
	size_t i;
	json_array_foreach(ok ? me : NULL, i, v)
	{
		const char *key = json_string_value(json_object_get(v, "key"));
		const char *op = json_string_value(json_object_get(v, "operator"));
		json_t *vals = json_object_get(v, "values");
		size_t nv = json_is_array(vals) ? json_array_size(vals) : 0;
		bool set_op = op && (strcmp(op, "In") == 0 || strcmp(op, "NotIn") == 0);
		bool ex_op = op && (strcmp(op, "Exists") == 0 || strcmp(op, "DoesNotExist") == 0);
		if (!key || n == SG_KUBE_SELECTOR_REQS || (!set_op && !ex_op) || (set_op && nv == 0) || (ex_op && nv) ||
		    nv > SG_KUBE_SELECTOR_VALUES) {
			snprintf(
			    why, whycap,
			    "matchExpressions[%zu]: needs a key and an operator In or NotIn (with values) or Exists "
			    "or DoesNotExist (without)",
			    i);
			ok = false;
			break;
		}
		const char *sv[SG_KUBE_SELECTOR_VALUES];
		size_t total = strlen(key) + 16;
		for (size_t j = 0; j < nv; j++) {
			sv[j] = json_string_value(json_array_get(vals, j));
			if (!sv[j]) {
				ok = false;
				break;
			}
			total += strlen(sv[j]) + 1;
		}
		if (!ok) {
			snprintf(why, whycap, "matchExpressions[%zu]: values must be strings", i);
			break;
		}
		qsort(sv, nv, sizeof(sv[0]), cmp_str);
		char *r = malloc(total);
		if (!r) {
			ok = false;
			snprintf(why, whycap, "out of memory");
			break;
		}
		if (ex_op) {
			snprintf(r, total, "%s%s", strcmp(op, "Exists") == 0 ? "" : "!", key);
		} else {
			size_t at = (size_t)snprintf(r, total, "%s %s (", key, strcmp(op, "In") == 0 ? "in" : "notin");
			for (size_t j = 0; j < nv; j++)
				at += (size_t)snprintf(r + at, total - at, "%s%s", j ? "," : "", sv[j]);
			snprintf(r + at, total - at, ")");
		}
		keys[n] = key;
		reqs[n++] = r;
	}
	if (ok) {
		sort_by_key(reqs, keys, n);
		size_t at = 0;
		for (size_t j = 0; j < n && ok; j++) {
			int w = snprintf(out + at, cap - at, "%s%s", j ? "," : "", reqs[j]);
			if (w < 0 || (size_t)w >= cap - at) {
				snprintf(why, whycap, "longer than %zu bytes", cap - 1);
				ok = false;
			} else {
				at += (size_t)w;
			}
		}
	}
	for (size_t j = 0; j < n; j++)
		free(reqs[j]);
	return ok;
}

static bool reserved_key(const char *k)
{
	return strncmp(k, "trust.cert-manager.io/", 22) == 0 || strncmp(k, "trust-manager.io/", 17) == 0;
}

static bool key_ok(const char *k)
{
	/* A ConfigMap/Secret data key: [-._a-zA-Z0-9]+, at most 253 bytes. */
	size_t n = k ? strlen(k) : 0;
	if (n == 0 || n > KEY_MAX || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
		return false;
	return strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") == n;
}

static bool parse_target(const json_t *t, const char *what, tgt *out, char *why, size_t cap)
{
	if (!t)
		return true;
	out->on = true;
	out->key = json_string_value(json_object_get(t, "key"));
	if (!key_ok(out->key)) {
		snprintf(why, cap, "spec.target.%s.key must be a valid data key", what);
		return false;
	}
	const json_t *meta = json_object_get(t, "metadata");
	out->labels = json_object_get(meta, "labels");
	out->annotations = json_object_get(meta, "annotations");
	const json_t *maps[2] = {out->labels, out->annotations};
	for (int m = 0; m < 2; m++) {
		const char *k;
		json_t *v;
		if (maps[m] && !json_is_object(maps[m])) {
			snprintf(why, cap, "spec.target.%s.metadata: labels and annotations must be maps", what);
			return false;
		}
		json_object_foreach((json_t *)maps[m], k, v)
		{
			if (!json_is_string(v)) {
				snprintf(why, cap, "spec.target.%s.metadata: %s must be a string", what, k);
				return false;
			}
			if (reserved_key(k)) {
				snprintf(why, cap,
				         "spec.target.%s.metadata: %s is reserved (trust.cert-manager.io/* and "
				         "trust-manager.io/* keys are the controller's)",
				         what, k);
				return false;
			}
		}
	}
	return true;
}

static bool parse_source(const json_t *item, size_t i, src *s, char *why, size_t cap)
{
	const char *types[] = {"configMap", "secret", "inLine", "useDefaultCAs"};
	int which = -1, count = 0;
	for (int t = 0; t < 4; t++) {
		if (json_object_get(item, types[t]) && !json_is_null(json_object_get(item, types[t]))) {
			which = t;
			count++;
		}
	}
	if (count != 1) {
		snprintf(why, cap,
		         "spec.sources[%zu]: must define exactly one of configMap, secret, inLine, useDefaultCAs", i);
		return false;
	}
	const json_t *v = json_object_get(item, types[which]);
	if (which == 2) {
		s->kind = SRC_INLINE;
		s->pem = json_string_value(v);
		s->pem_len = json_string_length(v);
		if (!s->pem) {
			snprintf(why, cap, "spec.sources[%zu].inLine must be a string", i);
			return false;
		}
		return true;
	}
	if (which == 3) {
		s->kind = SRC_DEFAULT;
		if (!json_is_boolean(v)) {
			snprintf(why, cap, "spec.sources[%zu].useDefaultCAs must be a boolean", i);
			return false;
		}
		return true;
	}
	s->kind = which == 0 ? SRC_CM : SRC_SECRET;
	const json_t *name = json_object_get(v, "name");
	const json_t *sel = json_object_get(v, "selector");
	const json_t *all = json_object_get(v, "includeAllKeys");
	s->name = json_string_value(name);
	s->key = json_string_value(json_object_get(v, "key"));
	if (!!s->name == !!(sel && !json_is_null(sel))) {
		snprintf(why, cap, "spec.sources[%zu].%s: must define exactly one of name and selector", i,
		         types[which]);
		return false;
	}
	if (s->name && !sg_names_dns_subdomain(s->name, strlen(s->name))) {
		snprintf(why, cap, "spec.sources[%zu].%s.name must be a valid object name", i, types[which]);
		return false;
	}
	bool all_keys = json_is_true(all);
	if (all && !json_is_boolean(all)) {
		snprintf(why, cap, "spec.sources[%zu].%s.includeAllKeys must be a boolean", i, types[which]);
		return false;
	}
	if (all_keys == !!s->key) {
		snprintf(why, cap, "spec.sources[%zu].%s: must define exactly one of key and includeAllKeys: true", i,
		         types[which]);
		return false;
	}
	if (s->key && !key_ok(s->key)) {
		snprintf(why, cap, "spec.sources[%zu].%s.key must be a valid data key", i, types[which]);
		return false;
	}
	if (!s->name) {
		char str[SG_KUBE_SELECTOR_MAX], w[256];
		if (!label_selector_string(sel, str, sizeof(str), w, sizeof(w))) {
			snprintf(why, cap, "spec.sources[%zu].%s.selector: %s", i, types[which], w);
			return false;
		}
		if (sg_kube_selector_parse(&s->sel, str, "selector") < 0) {
			snprintf(why, cap, "spec.sources[%zu].%s.selector: %s", i, types[which], sg_error_last()->msg);
			return false;
		}
	}
	return true;
}

bool trust_parse_spec(const json_t *bundle, const char *bname, spec *s, char *why, size_t cap)
{
	memset(s, 0, sizeof(*s));
	const json_t *sp = json_object_get(bundle, "spec");
	const json_t *sources = json_object_get(sp, "sources");
	if (!json_is_array(sources) || json_array_size(sources) == 0 || json_array_size(sources) > SOURCES_MAX) {
		snprintf(why, cap, "spec.sources must hold 1..%d sources", SOURCES_MAX);
		return false;
	}
	size_t i, real = 0, defaults = 0;
	json_t *item;
	json_array_foreach(sources, i, item)
	{
		src *x = &s->srcs[s->nsrcs];
		if (!json_is_object(item) || !parse_source(item, i, x, why, cap)) {
			if (!json_is_object(item))
				snprintf(why, cap, "spec.sources[%zu] must be an object", i);
			s->nsrcs += x->sel != NULL; /* freed with the spec */
			return false;
		}
		s->nsrcs++;
		if (x->kind == SRC_DEFAULT) {
			defaults++;
			if (json_is_true(json_object_get(item, "useDefaultCAs"))) {
				s->uses_default = true;
				real++;
			}
		} else {
			real++;
		}
	}
	if (real == 0) {
		snprintf(why, cap, "spec.sources: at least one source other than useDefaultCAs: false is required");
		return false;
	}
	if (defaults > 1) {
		snprintf(why, cap, "spec.sources: useDefaultCAs may appear at most once");
		return false;
	}
	const json_t *t = json_object_get(sp, "target");
	if (!json_is_object(t)) {
		snprintf(why, cap, "spec.target is required");
		return false;
	}
	if (!parse_target(json_object_get(t, "configMap"), "configMap", &s->cm, why, cap) ||
	    !parse_target(json_object_get(t, "secret"), "secret", &s->secret, why, cap))
		return false;
	if (!s->cm.on && !s->secret.on) {
		snprintf(why, cap, "spec.target: at least one of configMap and secret is required");
		return false;
	}
	const json_t *af = json_object_get(t, "additionalFormats");
	const json_t *jks = json_object_get(af, "jks"), *p12 = json_object_get(af, "pkcs12");
	if (jks) {
		s->jks_key = json_string_value(json_object_get(jks, "key"));
		const json_t *pw = json_object_get(jks, "password");
		s->jks_pw = pw ? json_string_value(pw) : "changeit";
		if (!key_ok(s->jks_key) || !s->jks_pw) {
			snprintf(why, cap, "spec.target.additionalFormats.jks needs a valid key and a string password");
			return false;
		}
	}
	if (p12) {
		s->p12_key = json_string_value(json_object_get(p12, "key"));
		const json_t *pw = json_object_get(p12, "password");
		s->p12_pw = pw ? json_string_value(pw) : "";
		const json_t *prof = json_object_get(p12, "profile");
		s->p12_profile = prof ? json_string_value(prof) : "";
		if (!key_ok(s->p12_key) || !s->p12_pw || !s->p12_profile) {
			snprintf(why, cap,
			         "spec.target.additionalFormats.pkcs12 needs a valid key and a string password");
			return false;
		}
		if (sg_certset_p12_profile_parse(s->p12_profile, &s->profile) < 0) {
			snprintf(why, cap, "spec.target.additionalFormats.pkcs12.profile: %s", sg_error_last()->msg);
			return false;
		}
	}
	/* The keys of one target must differ: PEM, JKS and PKCS#12 land in
	 * the same object. */
	const char *keys[3] = {NULL, s->jks_key, s->p12_key};
	for (int kind = 0; kind < 2; kind++) {
		const tgt *x = kind ? &s->secret : &s->cm;
		if (!x->on)
			continue;
		keys[0] = x->key;
		for (int a = 0; a < 3; a++)
			for (int b = a + 1; b < 3; b++)
				if (keys[a] && keys[b] && strcmp(keys[a], keys[b]) == 0) {
					snprintf(why, cap,
					         "spec.target: the key %s is used twice (target and "
					         "additionalFormats keys must be unique)",
					         keys[a]);
					return false;
				}
	}
	/* A source that is its own target would feed the bundle back into
	 * itself (trust-manager#830). trust-manager's webhook compares the
	 * name and the key only, so a source of the Bundle's name with
	 * includeAllKeys (no key) is accepted, and read like any other. */
	for (size_t k = 0; k < s->nsrcs; k++) {
		const src *x = &s->srcs[k];
		const tgt *same = x->kind == SRC_CM ? &s->cm : x->kind == SRC_SECRET ? &s->secret : NULL;
		if (same && same->on && x->name && strcmp(x->name, bname) == 0 && x->key &&
		    strcmp(x->key, same->key) == 0) {
			snprintf(why, cap, "spec.sources[%zu]: cannot define the same source as target", k);
			return false;
		}
	}
	const json_t *nsel = json_object_get(t, "namespaceSelector");
	if (nsel && !json_is_null(nsel)) {
		char str[SG_KUBE_SELECTOR_MAX], w[256];
		if (!label_selector_string(nsel, str, sizeof(str), w, sizeof(w))) {
			snprintf(why, cap, "spec.target.namespaceSelector: %s", w);
			return false;
		}
		if (sg_kube_selector_parse(&s->ns_sel, str, "namespace selector") < 0) {
			snprintf(why, cap, "spec.target.namespaceSelector: %s", sg_error_last()->msg);
			return false;
		}
	}
	return true;
}

int sg_trust_spec_check(const json_t *bundle)
{
	const char *name = sg_kube_meta_str(bundle, "name");
	SG_ENSURE(json_is_object(bundle) && name && sg_names_dns_subdomain(name, strlen(name)), SG_EINVAL,
	          "metadata.name must be a valid object name");
	spec s;
	char why[MSG_MAX];
	bool ok = trust_parse_spec(bundle, name, &s, why, sizeof(why));
	trust_spec_free(&s);
	trust_printable_only(why);
	return ok ? SG_OK : sg_error_set(SG_EINVAL, "%s", why);
}
