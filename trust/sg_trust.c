/*
 * Trust bundles (sg_trust.h): trust-manager's Bundle on the controller
 * runtime.
 *
 * One reconcile per Bundle name, in five steps, each of which may end it:
 *   1. the spec is read into a `spec` (everything trust-manager's webhook
 *      and CRD would refuse is refused here: InvalidSpec, nothing written);
 *   2. Secret targets while they are disabled: SecretTargetsDisabled;
 *   3. the sources are read from the informers' caches into an sg_certset
 *      (strict PEM, dedupe, filters); not found: SourceNotFound (no retry,
 *      the next source or Bundle event brings it back), anything else:
 *      SourceBuildError (retried);
 *   4. every namespace that should hold a target gets one applied when it
 *      needs it (needs_update); targets that should not exist are cleaned;
 *      a target whose cache does not show our last write of it yet is
 *      left to the pass that write's echo brings ("own writes");
 *   5. the Synced condition, written only when it differs.
 * The caches say what exists; nothing is read from the API server during a
 * reconcile, and writes happen only for a difference, so a reconcile that
 * finds everything right makes no request at all.
 *
 * Which Bundles an event concerns: Bundle events are their own key; a
 * target's label names its Bundle; a namespace event concerns every Bundle
 * (a Bundle whose selector stopped matching must hear of it too, and the
 * map function sees only the new object, so "every" is the simple correct
 * answer; the queue holds each key once); a source event concerns the
 * Bundles that name it or select sources of its kind. That last needs the
 * Bundles' references, kept in `refs` by each reconcile (a Bundle not yet
 * reconciled is reached by the resync every start begins with).
 */
#include "sg_trust.h"

#include "sg_base64.h"
#include "sg_certset.h"
#include "sg_crypto.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_kube_selector.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_strbuf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define W_BUNDLES 0
#define W_NAMESPACES 1
#define W_SRC_CM 2
#define W_SRC_SECRET 3
#define W_TGT_CM 4
#define W_TGT_SECRET 5 /* only with Secret targets enabled */

#define SOURCES_MAX 100
#define KEY_MAX 253
#define MSG_MAX 2048
#define ID_MAX 300
#define PKG_STR_MAX 128

/* ---- the default package ---- */

struct sg_trust_package {
	char *bundle;
	size_t len;
	char id[ID_MAX];
};

static bool printable(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/* Messages quote what users wrote (JSON keys and values, a JSON parser's
 * view of broken input); they go to logs, Events and conditions, so
 * anything outside printable ASCII becomes '?'. */
static void printable_only(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			*s = '?';
}

static bool ends_with_json(const char *path)
{
	size_t n = strlen(path);
	return n > 5 && strcmp(path + n - 5, ".json") == 0;
}

int sg_trust_package_load(sg_trust_package **out, const char *path)
{
	*out = NULL;
	SG_ENSURE(path && ends_with_json(path), SG_EINVAL, "default package %s: the file name must end in .json",
	          path ? path : "(none)");
	uint8_t *raw SG_AUTOFREE = NULL;
	size_t len = 0;
	SG_TRY(sg_file_read(path, SG_TRUST_PACKAGE_MAX, &raw, &len));
	return sg_trust_package_parse(out, raw, len, path);
}

int sg_trust_package_parse(sg_trust_package **out, const void *data, size_t len, const char *what)
{
	*out = NULL;
	SG_ENSURE(len <= SG_TRUST_PACKAGE_MAX, SG_EINVAL, "default package %s: larger than %u bytes", what,
	          SG_TRUST_PACKAGE_MAX);
	json_error_t jerr;
	json_t *doc = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	printable_only(jerr.text);
	SG_ENSURE(doc, SG_EINVAL, "default package %s: not JSON: %s (line %d)", what, jerr.text, jerr.line);
	const json_t *jb = json_object_get(doc, "bundle");
	const char *name = json_string_value(json_object_get(doc, "name"));
	const char *version = json_string_value(json_object_get(doc, "version"));
	const char *bundle = json_string_value(jb);
	size_t blen = bundle ? json_string_length(jb) : 0;
	int rc = SG_OK;
	if (!json_is_object(doc) || !name || !version || !bundle)
		rc = sg_error_set(SG_EINVAL, "default package %s: needs the strings name, version and bundle", what);
	else if (!printable(name, PKG_STR_MAX) || !printable(version, PKG_STR_MAX))
		rc = sg_error_set(SG_EINVAL, "default package %s: name and version must be 1..%d printable bytes", what,
		                  PKG_STR_MAX);
	sg_certset *set = NULL;
	if (rc == SG_OK)
		rc = sg_certset_new(&set, NULL);
	if (rc == SG_OK && (rc = sg_certset_add_pem(set, bundle, blen)) < 0)
		rc = sg_error_set(rc, "default package %s: %s", what, sg_error_last()->msg);
	if (rc == SG_OK && sg_certset_count(set) == 0)
		rc = sg_error_set(SG_EINVAL, "default package %s: the bundle holds no certificate", what);
	sg_certset_free(set);
	sg_trust_package *p = NULL;
	if (rc == SG_OK) {
		p = calloc(1, sizeof(*p));
		if (p)
			p->bundle = malloc(blen + 1);
		if (!p || !p->bundle) {
			rc = sg_error_set(SG_EINTERNAL, "default package: out of memory");
		} else {
			memcpy(p->bundle, bundle, blen);
			p->bundle[blen] = '\0';
			p->len = blen;
			uint8_t d[32];
			char h[17];
			rc = sg_sha256(bundle, blen, d);
			sg_hex_encode(h, d, 8);
			snprintf(p->id, sizeof(p->id), "%s-%s-%s", name, version, h);
		}
	}
	json_decref(doc);
	if (rc < 0) {
		sg_trust_package_free(p);
		return rc;
	}
	*out = p;
	return SG_OK;
}

void sg_trust_package_free(sg_trust_package *p)
{
	if (!p)
		return;
	free(p->bundle);
	free(p);
}

const char *sg_trust_package_id(const sg_trust_package *p)
{
	return p->id;
}

const char *sg_trust_package_bundle(const sg_trust_package *p, size_t *len)
{
	if (len)
		*len = p->len;
	return p->bundle;
}

int sg_trust_package_normalize(const char *pem_path, char **pem_out, size_t *len_out)
{
	*pem_out = NULL;
	*len_out = 0;
	uint8_t *raw SG_AUTOFREE = NULL;
	size_t len = 0;
	SG_TRY(sg_file_read(pem_path, SG_CERTSET_PEM_MAX, &raw, &len));
	sg_certset *set = NULL;
	SG_TRY(sg_certset_new(&set, NULL));
	int rc = sg_certset_add_pem(set, (const char *)raw, len);
	if (rc < 0)
		rc = sg_error_set(rc, "package: %s: %s", pem_path, sg_error_last()->msg);
	if (rc == SG_OK && sg_certset_count(set) == 0)
		rc = sg_error_set(SG_EINVAL, "package: %s holds no certificate", pem_path);
	if (rc == SG_OK)
		rc = sg_certset_pem(set, pem_out, len_out);
	sg_certset_free(set);
	return rc;
}

int sg_trust_package_json(const char *pem, size_t len, const char *name, const char *version, char **out)
{
	*out = NULL;
	SG_ENSURE(name && printable(name, PKG_STR_MAX) && version && printable(version, PKG_STR_MAX), SG_EINVAL,
	          "package: name and version must be 1..%d printable bytes", PKG_STR_MAX);
	json_t *doc = json_pack("{s:s, s:s%, s:s}", "name", name, "bundle", pem, len, "version", version);
	SG_ENSURE(doc, SG_EINTERNAL, "package: out of memory");
	*out = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(doc);
	SG_ENSURE(*out, SG_EINTERNAL, "package: out of memory");
	return SG_OK;
}

int sg_trust_package_write(const char *pem_path, const char *name, const char *version, const char *out_path)
{
	SG_ENSURE(out_path && ends_with_json(out_path), SG_EINVAL, "package: the output file name must end in .json");
	SG_ENSURE(name && printable(name, PKG_STR_MAX) && version && printable(version, PKG_STR_MAX), SG_EINVAL,
	          "package: name and version must be 1..%d printable bytes", PKG_STR_MAX);
	char *pem = NULL, *text = NULL;
	size_t plen = 0;
	SG_TRY(sg_trust_package_normalize(pem_path, &pem, &plen));
	int rc = sg_trust_package_json(pem, plen, name, version, &text);
	free(pem);
	if (rc == SG_OK)
		rc = sg_file_write_atomic(out_path, text, strlen(text), 0644);
	free(text);
	return rc;
}

/* ---- the controller's state ---- */

struct sg_trust {
	sg_ctrl *ctrl;
	sg_kube *kube;
	char trust_ns[SG_NAMES_LABEL_MAX + 1];
	const sg_trust_package *package;
	bool secrets, filter_expired, filter_non_ca;
	char **target_ns;
	size_t ntarget_ns;

	/* Bundle name -> {"cm": [names], "secret": [names], "cmsel": bool,
	 * "secretsel": bool}: what each Bundle reads, for the source map. */
	pthread_mutex_t refs_mu;
	json_t *refs;

	/* Our target writes the caches have not shown yet (see "own writes"):
	 * "<c|s>/<namespace>/<name>" -> {"rv": the resourceVersion of the
	 * object acted on, "" when there was none; "at": ms, monotonic}. */
	pthread_mutex_t pending_mu;
	json_t *pending;

	_Atomic uint64_t synced, not_synced, applies, cleanups, deletes, status_writes, errors;
};

/* ---- the spec ---- */

enum src_kind { SRC_CM, SRC_SECRET, SRC_INLINE, SRC_DEFAULT };

typedef struct src {
	enum src_kind kind;
	const char *name;      /* by name, or NULL */
	sg_kube_selector *sel; /* by selector, or NULL */
	const char *key;       /* NULL: includeAllKeys */
	const char *pem;       /* inLine */
	size_t pem_len;
} src;

typedef struct tgt {
	bool on;
	const char *key;
	const json_t *labels, *annotations; /* borrowed; may be NULL */
} tgt;

typedef struct spec {
	src srcs[SOURCES_MAX];
	size_t nsrcs;
	tgt cm, secret;
	const char *jks_key, *jks_pw;
	const char *p12_key, *p12_pw, *p12_profile;
	sg_certset_p12_profile profile;
	sg_kube_selector *ns_sel; /* NULL: every namespace */
	bool uses_default;
} spec;

static void spec_free(spec *s)
{
	for (size_t i = 0; i < s->nsrcs; i++)
		sg_kube_selector_free(s->srcs[i].sel);
	sg_kube_selector_free(s->ns_sel);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A metav1.LabelSelector as the selector string Go prints for it
 * (requirements sorted by key, values sorted), into out. false with why
 * when it is malformed. */
static bool label_selector_string(const json_t *ls, char *out, size_t cap, char *why, size_t whycap)
{
	char *reqs[SG_KUBE_SELECTOR_REQS];
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
			snprintf(why, whycap,
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
		reqs[n++] = r;
	}
	if (ok) {
		qsort(reqs, n, sizeof(reqs[0]), cmp_str);
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
		snprintf(why, cap, "spec.sources[%zu]: must define exactly one of configMap, secret, inLine, useDefaultCAs",
		         i);
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
		snprintf(why, cap, "spec.sources[%zu].%s: must define exactly one of name and selector", i, types[which]);
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

static bool parse_spec(const json_t *bundle, const char *bname, spec *s, char *why, size_t cap)
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
			snprintf(why, cap, "spec.target.additionalFormats.pkcs12 needs a valid key and a string password");
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
					snprintf(why, cap, "spec.target: the key %s is used twice (target and "
					                   "additionalFormats keys must be unique)", keys[a]);
					return false;
				}
	}
	/* A source that is its own target would feed the bundle back into
	 * itself (trust-manager#830). */
	for (size_t k = 0; k < s->nsrcs; k++) {
		const src *x = &s->srcs[k];
		const tgt *same = x->kind == SRC_CM ? &s->cm : x->kind == SRC_SECRET ? &s->secret : NULL;
		if (same && same->on && x->name && strcmp(x->name, bname) == 0 && (!x->key || strcmp(x->key, same->key) == 0)) {
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
	bool ok = parse_spec(bundle, name, &s, why, sizeof(why));
	spec_free(&s);
	printable_only(why);
	return ok ? SG_OK : sg_error_set(SG_EINVAL, "%s", why);
}

/* ---- references, for the source map ---- */

static void refs_set(sg_trust *t, const char *bname, const spec *s)
{
	json_t *e = json_pack("{s:[], s:[], s:b, s:b}", "cm", "secret", "cmsel", 0, "secretsel", 0);
	if (!e)
		return;
	for (size_t i = 0; s && i < s->nsrcs; i++) {
		const src *x = &s->srcs[i];
		if (x->kind != SRC_CM && x->kind != SRC_SECRET)
			continue;
		const char *kind = x->kind == SRC_CM ? "cm" : "secret";
		if (x->name)
			json_array_append_new(json_object_get(e, kind), json_string(x->name));
		else
			json_object_set_new(e, x->kind == SRC_CM ? "cmsel" : "secretsel", json_true());
	}
	pthread_mutex_lock(&t->refs_mu);
	json_object_set_new(t->refs, bname, e);
	pthread_mutex_unlock(&t->refs_mu);
}

static void refs_drop(sg_trust *t, const char *bname)
{
	pthread_mutex_lock(&t->refs_mu);
	json_object_del(t->refs, bname);
	pthread_mutex_unlock(&t->refs_mu);
}

static void map_all(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)obj;
	sg_trust *t = arg;
	const char *k;
	json_t *v;
	pthread_mutex_lock(&t->refs_mu);
	json_object_foreach(t->refs, k, v)
		sg_ctrl_add(c, k);
	pthread_mutex_unlock(&t->refs_mu);
}

static void map_source(sg_ctrl *c, const json_t *obj, sg_trust *t, const char *kind)
{
	const char *name = sg_kube_meta_str(obj, "name");
	char sel[16];
	snprintf(sel, sizeof(sel), "%ssel", kind);
	const char *k;
	json_t *v;
	pthread_mutex_lock(&t->refs_mu);
	json_object_foreach(t->refs, k, v)
	{
		bool hit = json_is_true(json_object_get(v, sel));
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(v, kind), i, n)
			hit = hit || (name && strcmp(json_string_value(n), name) == 0);
		if (hit)
			sg_ctrl_add(c, k);
	}
	pthread_mutex_unlock(&t->refs_mu);
}

static void map_source_cm(sg_ctrl *c, const json_t *obj, void *arg)
{
	map_source(c, obj, arg, "cm");
}

static void map_source_secret(sg_ctrl *c, const json_t *obj, void *arg)
{
	map_source(c, obj, arg, "secret");
}

static void map_target(sg_ctrl *c, const json_t *obj, void *arg)
{
	(void)arg;
	const char *b = json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"),
	                                                  SG_TRUST_LABEL));
	if (b && sg_names_dns_subdomain(b, strlen(b)))
		sg_ctrl_add(c, b);
}

/* ---- building the bundle ---- */

typedef struct build {
	sg_certset *set;
	char msg[MSG_MAX];
	int rc; /* SG_ENOTFOUND: SourceNotFound; other < 0: SourceBuildError */
} build;

static int build_fail(build *b, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int build_fail(build *b, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b->msg, sizeof(b->msg), fmt, ap);
	va_end(ap);
	b->rc = rc;
	return rc;
}

static int add_pem(build *b, const char *what, const char *pem, size_t len)
{
	if (sg_certset_add_pem(b->set, pem, len) < 0) {
		int rc = sg_error_last()->code == SG_EINTERNAL ? SG_EINTERNAL : SG_EINVAL;
		return build_fail(b, rc, "%s: %s", what, sg_error_last()->msg);
	}
	return SG_OK;
}

/* The value of data key k of obj as bytes: ConfigMaps hold text in data
 * and base64 in binaryData, Secrets base64 in data. *tmp (freed by the
 * caller) holds decoded bytes. NULL when absent or undecodable. */
static const char *value_of(const json_t *obj, bool secret, const char *k, size_t *len, char **tmp)
{
	if (!secret) {
		const json_t *v = json_object_get(json_object_get(obj, "data"), k);
		if (json_is_string(v)) {
			*len = json_string_length(v);
			return json_string_value(v);
		}
	}
	const json_t *v = json_object_get(json_object_get(obj, secret ? "data" : "binaryData"), k);
	if (!json_is_string(v))
		return NULL;
	size_t n = json_string_length(v);
	*tmp = malloc(n / 4 * 3 + 4);
	if (!*tmp || sg_b64_decode(SG_B64_STD, json_string_value(v), n, (uint8_t *)*tmp, n / 4 * 3 + 3, len) < 0)
		return NULL;
	(*tmp)[*len] = '\0';
	return *tmp;
}

static int cmp_json_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int add_object(build *b, const json_t *obj, const src *x, const char *ns)
{
	bool secret = x->kind == SRC_SECRET;
	const char *kind = secret ? "Secret" : "ConfigMap";
	const char *name = sg_kube_meta_str(obj, "name");
	if (!x->key) {
		const char *type = json_string_value(json_object_get(obj, "type"));
		if (secret && type && strcmp(type, "kubernetes.io/tls") == 0)
			return build_fail(b, SG_EINVAL,
			                  "including all keys is not supported for TLS Secrets such as %s/%s", ns, name);
		/* Every key, in sorted order (the output is sorted anyway; the
		 * order only decides which error is reported first). */
		const char *keys[512];
		size_t n = 0;
		const char *members[2] = {"data", secret ? NULL : "binaryData"};
		for (int m = 0; m < 2 && members[m]; m++) {
			const char *k;
			json_t *v;
			json_object_foreach(json_object_get(obj, members[m]), k, v)
			{
				if (n == sizeof(keys) / sizeof(keys[0]))
					return build_fail(b, SG_EINVAL, "%s %s/%s has more than %zu keys", kind, ns, name,
					                  n);
				keys[n++] = k;
			}
		}
		if (n == 0)
			return build_fail(b, SG_ENOTFOUND, "no data found in %s %s/%s", kind, ns, name);
		qsort(keys, n, sizeof(keys[0]), cmp_json_str);
		for (size_t i = 0; i < n; i++) {
			src one = *x;
			one.key = keys[i];
			SG_TRY(add_object(b, obj, &one, ns));
		}
		return SG_OK;
	}
	size_t len = 0;
	char *tmp = NULL;
	const char *v = value_of(obj, secret, x->key, &len, &tmp);
	int rc = SG_OK;
	if (!v) {
		rc = build_fail(b, tmp ? SG_EINVAL : SG_ENOTFOUND, tmp ? "%s %s/%s at key \"%s\" is not valid base64"
		                                                       : "no data found in %s %s/%s at key \"%s\"",
		                kind, ns, name, x->key);
	} else {
		char what[600];
		snprintf(what, sizeof(what), "invalid PEM data in %s %s/%s at key \"%s\"", kind, ns, name, x->key);
		rc = add_pem(b, what, v, len);
	}
	free(tmp);
	return rc;
}

static int build_sources(sg_trust *t, sg_ctrl *c, const spec *s, build *b)
{
	for (size_t i = 0; i < s->nsrcs; i++) {
		const src *x = &s->srcs[i];
		if (x->kind == SRC_INLINE) {
			SG_TRY(add_pem(b, "inline source contains invalid PEM data", x->pem, x->pem_len));
		} else if (x->kind == SRC_DEFAULT) {
			if (!s->uses_default)
				continue;
			if (!t->package)
				return build_fail(b, SG_ENOTFOUND,
				                  "no default package was specified when signet-trust was started "
				                  "(--default-package-location); default CAs not available");
			size_t len;
			const char *pem = sg_trust_package_bundle(t->package, &len);
			SG_TRY(add_pem(b, "default package contains invalid PEM data", pem, len));
		} else {
			sg_kube_informer *inf = sg_ctrl_informer(c, x->kind == SRC_CM ? W_SRC_CM : W_SRC_SECRET);
			const char *kind = x->kind == SRC_CM ? "ConfigMap" : "Secret";
			if (x->name) {
				json_t *obj = sg_kube_informer_get(inf, t->trust_ns, x->name);
				if (!obj)
					return build_fail(b, SG_ENOTFOUND, "failed to get %s %s/%s: %s \"%s\" not found",
					                  kind, t->trust_ns, x->name,
					                  x->kind == SRC_CM ? "configmaps" : "secrets", x->name);
				int rc = add_object(b, obj, x, t->trust_ns);
				json_decref(obj);
				SG_TRY(rc);
			} else {
				/* A selector that matches nothing is not an error
				 * (trust-manager#426); the empty bundle check below
				 * catches a bundle with nothing at all. */
				json_t *all = sg_kube_informer_list(inf);
				SG_ENSURE(all, SG_EINTERNAL, "trust: out of memory");
				size_t j;
				json_t *obj;
				int rc = SG_OK;
				json_array_foreach(all, j, obj)
				{
					const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
					if (rc == SG_OK && sg_kube_selector_matches(x->sel, labels))
						rc = add_object(b, obj, x, t->trust_ns);
				}
				json_decref(all);
				SG_TRY(rc);
			}
		}
	}
	if (sg_certset_count(b->set) == 0) {
		sg_certset_stats st;
		sg_certset_stats_get(b->set, &st);
		char extra[160] = "";
		if (st.expired || st.non_ca)
			snprintf(extra, sizeof(extra), " (filtered out: %llu expired, %llu not a CA)",
			         (unsigned long long)st.expired, (unsigned long long)st.non_ca);
		return build_fail(b, SG_ENOTFOUND, "couldn't find any valid certificates in bundle%s", extra);
	}
	return SG_OK;
}

/* ---- targets ---- */

/* What a target of one kind must hold. */
typedef struct want {
	const tgt *t;
	bool secret;
	char hash[65];
	const char *pem;
	size_t pem_len;
	/* lazily built, shared by every target written in this reconcile */
	uint8_t *jks, *p12;
	size_t jks_len, p12_len;
} want;


/* The hash's input: common/sg_strbuf with no bound but memory. */
typedef sg_strbuf buf;

static void buf_add(buf *b, const void *p, size_t n)
{
	(void)sg_strbuf_add(b, p, n);
}

/* k+v of every member, keys in byte order: the same map always hashes the
 * same (trust-manager#971 iterated Go maps, whose order is random, and so
 * rewrote every target with more than one label on every pass). */
static void buf_add_sorted(buf *b, const json_t *map)
{
	size_t n = json_object_size(map), i = 0;
	if (n == 0)
		return;
	const char **keys = calloc(n, sizeof(*keys));
	if (!keys) {
		b->oom = true;
		return;
	}
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)map, k, v)
		keys[i++] = k;
	qsort(keys, n, sizeof(*keys), cmp_json_str);
	for (i = 0; i < n; i++) {
		const json_t *val = json_object_get(map, keys[i]);
		buf_add(b, keys[i], strlen(keys[i]));
		buf_add(b, json_string_value(val), json_string_length(val));
	}
	free(keys);
}

/* trust.cert-manager.io/hash: SHA-256 over the PEM, the passwords (and the
 * PKCS#12 profile) of the extra formats, then the target's annotations and
 * labels. The inputs, not the outputs: PKCS#12 and JKS files differ at each
 * encoding (salts, timestamps). */
static int target_hash(const spec *s, const tgt *x, const char *pem, size_t len, char out[65])
{
	buf b = {.first = 4096};
	buf_add(&b, pem, len);
	if (s->jks_key)
		buf_add(&b, s->jks_pw, strlen(s->jks_pw));
	if (s->p12_key) {
		buf_add(&b, s->p12_pw, strlen(s->p12_pw));
		buf_add(&b, s->p12_profile, strlen(s->p12_profile));
	}
	buf_add_sorted(&b, x->annotations);
	buf_add_sorted(&b, x->labels);
	uint8_t d[32];
	int rc = sg_strbuf_failed(&b) ? sg_error_set(SG_EINTERNAL, "trust: out of memory")
	                              : sg_sha256(b.p ? b.p : "", b.len, d);
	free(b.p);
	SG_TRY(rc);
	sg_hex_encode(out, d, 32);
	return SG_OK;
}

/* The controller ownerReference of obj, or NULL. */
static const json_t *controller_ref(const json_t *obj)
{
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "ownerReferences"), i, r)
	{
		if (json_is_true(json_object_get(r, "controller")))
			return r;
	}
	return NULL;
}

static bool controlled_by(const json_t *obj, const char *uid)
{
	const json_t *r = controller_ref(obj);
	const char *u = json_string_value(json_object_get(r, "uid"));
	return u && uid && strcmp(u, uid) == 0;
}

static bool controlled_by_bundle_named(const json_t *obj, const char *bname)
{
	const json_t *r = controller_ref(obj);
	const char *kind = json_string_value(json_object_get(r, "kind"));
	const char *name = json_string_value(json_object_get(r, "name"));
	const char *api = json_string_value(json_object_get(r, "apiVersion"));
	return kind && name && api && strcmp(kind, SG_TRUST_KIND) == 0 && strcmp(name, bname) == 0 &&
	       strncmp(api, SG_TRUST_GROUP "/", sizeof(SG_TRUST_GROUP)) == 0;
}

#define OWNED_MAX 8

/* The data (and binaryData) keys of obj that field managers own, by
 * metadata.managedFields: the trust-manager manager's (ours) or everyone
 * else's: n keys into keys, or false when there are more than OWNED_MAX
 * (which, for ours, can only be wrong). */
static bool managed_data_keys(const json_t *obj, bool secret, bool ours, const char *keys[OWNED_MAX], size_t *n)
{
	*n = 0;
	size_t i;
	json_t *mf;
	json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "managedFields"), i, mf)
	{
		const char *who = json_string_value(json_object_get(mf, "manager"));
		if (ours != (who && strcmp(who, SG_TRUST_FIELD_MANAGER) == 0))
			continue;
		const json_t *fs = json_object_get(mf, "fieldsV1");
		const char *members[2] = {"f:data", secret ? NULL : "f:binaryData"};
		for (int m = 0; m < 2 && members[m]; m++) {
			const char *k;
			json_t *v;
			json_object_foreach(json_object_get(fs, members[m]), k, v)
			{
				if (strncmp(k, "f:", 2) != 0)
					continue; /* "." is the map itself */
				bool seen = false;
				for (size_t j = 0; j < *n; j++)
					seen = seen || strcmp(keys[j], k + 2) == 0;
				if (seen)
					continue;
				if (*n == OWNED_MAX)
					return false;
				keys[(*n)++] = k + 2;
			}
		}
	}
	return true;
}

static bool owned_keys(const json_t *obj, bool secret, const char *keys[OWNED_MAX], size_t *n)
{
	return managed_data_keys(obj, secret, true, keys, n);
}

/* Whether anyone but us owns a data key of obj. Without managedFields
 * nobody can tell: true, so the caller keeps what might be someone's. */
static bool others_own_data(const json_t *obj, bool secret)
{
	const char *keys[OWNED_MAX];
	size_t n = 0;
	if (json_array_size(json_object_get(json_object_get(obj, "metadata"), "managedFields")) == 0)
		return true;
	return !managed_data_keys(obj, secret, false, keys, &n) || n > 0;
}

static bool same_key_set(const char *const *a, size_t na, const char *const *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++) {
		bool found = false;
		for (size_t j = 0; j < nb && !found; j++)
			found = strcmp(a[i], b[j]) == 0;
		if (!found)
			return false;
	}
	return true;
}

/* Whether obj (a cached target, metadata only) is not what we would write:
 * trust-manager's needsUpdate. */
static bool needs_update(const json_t *obj, const spec *s, const want *w, const char *bname, const char *uid)
{
	const json_t *meta = json_object_get(obj, "metadata");
	const char *label = json_string_value(json_object_get(json_object_get(meta, "labels"), SG_TRUST_LABEL));
	const char *hash = json_string_value(json_object_get(json_object_get(meta, "annotations"), SG_TRUST_HASH));
	if (!controlled_by(obj, uid) || !label || strcmp(label, bname) != 0 || !hash || strcmp(hash, w->hash) != 0)
		return true;
	const char *have[OWNED_MAX];
	size_t nhave;
	const char *expect[3] = {w->t->key};
	size_t nexp = 1;
	if (s->jks_key)
		expect[nexp++] = s->jks_key;
	if (s->p12_key)
		expect[nexp++] = s->p12_key;
	return !owned_keys(obj, w->secret, have, &nhave) || !same_key_set(have, nhave, expect, nexp);
}

static json_t *owner_refs(const char *bname, const char *uid)
{
	return json_pack("[{s:s, s:s, s:s, s:s, s:b, s:b}]", "apiVersion", SG_TRUST_GROUP "/" SG_TRUST_VERSION, "kind",
	                 SG_TRUST_KIND, "name", bname, "uid", uid, "controller", 1, "blockOwnerDeletion", 1);
}

static json_t *b64_json(const uint8_t *p, size_t n)
{
	size_t cap = sg_b64_encoded_len(SG_B64_STD, n) + 1;
	char *s = malloc(cap);
	json_t *j = NULL;
	if (s && sg_b64_encode(SG_B64_STD, p, n, s, cap) == 0)
		j = json_string(s);
	free(s);
	return j;
}

static json_t *copy_map(const json_t *m)
{
	return json_is_object(m) ? json_deep_copy(m) : json_object();
}

/* The apply intent of a target; empty: only the label and the owner (what
 * is left of our fields when a target is no longer wanted). */
static json_t *target_body(const char *bname, const char *uid, const char *ns, const spec *s, want *w, bool empty)
{
	json_t *labels = empty ? json_object() : copy_map(w->t->labels);
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s, s:o, s:o}}", "apiVersion", "v1", "kind",
	                         w->secret ? "Secret" : "ConfigMap", "metadata", "name", bname, "namespace", ns, "labels",
	                         labels, "ownerReferences", owner_refs(bname, uid));
	if (!body || json_object_set_new(json_object_get(json_object_get(body, "metadata"), "labels"), SG_TRUST_LABEL,
	                                 json_string(bname)) != 0) {
		json_decref(body);
		return NULL;
	}
	if (empty)
		return body;
	json_t *ann = copy_map(w->t->annotations);
	json_t *data = json_object(), *bin = json_object();
	bool ok = ann && data && bin && json_object_set_new(ann, SG_TRUST_HASH, json_string(w->hash)) == 0;
	if (ok && w->secret)
		ok = json_object_set_new(data, w->t->key, b64_json((const uint8_t *)w->pem, w->pem_len)) == 0;
	else if (ok)
		ok = json_object_set_new(data, w->t->key, json_stringn(w->pem, w->pem_len)) == 0;
	json_t *extra = w->secret ? data : bin;
	if (ok && s->jks_key)
		ok = json_object_set_new(extra, s->jks_key, b64_json(w->jks, w->jks_len)) == 0;
	if (ok && s->p12_key)
		ok = json_object_set_new(extra, s->p12_key, b64_json(w->p12, w->p12_len)) == 0;
	if (ok)
		ok = json_object_set_new(json_object_get(body, "metadata"), "annotations", ann) == 0 &&
		     json_object_set_new(body, "data", data) == 0 &&
		     (w->secret || json_object_size(bin) == 0 || json_object_set(body, "binaryData", bin) == 0);
	else {
		json_decref(ann);
		json_decref(data);
	}
	json_decref(bin);
	if (!ok) {
		json_decref(body);
		return NULL;
	}
	return body;
}

static sg_kube_ref target_ref(bool secret, const char *ns, const char *name)
{
	return (sg_kube_ref){.version = "v1", .resource = secret ? "secrets" : "configmaps", .ns = ns, .name = name};
}

/* The extra formats, once per reconcile (every target of this pass gets
 * the same bytes). */
static int make_formats(const spec *s, sg_certset *set, want *w, want *other)
{
	if (s->jks_key && !w->jks) {
		if (other && other->jks) {
			w->jks = other->jks;
			w->jks_len = other->jks_len;
		} else {
			SG_TRY(sg_certset_jks(set, s->jks_pw, (int64_t)time(NULL), &w->jks, &w->jks_len));
		}
	}
	if (s->p12_key && !w->p12) {
		if (other && other->p12) {
			w->p12 = other->p12;
			w->p12_len = other->p12_len;
		} else {
			SG_TRY(sg_certset_pkcs12(set, s->p12_pw, s->profile, &w->p12, &w->p12_len));
		}
	}
	return SG_OK;
}

/* ---- own writes the caches have not shown yet ----
 *
 * Targets are read from a cache, and each write of ours comes back as an
 * event that queues the Bundle again, so the next reconcile often runs
 * before the cache holds the last writes of the one before. Acting on such
 * a stale object would apply the same content a second time, delete a
 * target already deleted or, worse, clean up a target just deleted: an
 * apply creates what is missing, and the empty object would be deleted
 * once more. So each write remembers the resourceVersion of the object it
 * acted on ("" when there was none): while the cache still shows exactly
 * that, the target is left alone, its echo being on the way (it queues the
 * Bundle again; the reconcile also asks for a later pass, should it never
 * come). Once the cache shows anything else, the record goes and the cache
 * is trusted again. A record is forgotten after PENDING_MAX_MS: an echo
 * folded into a relist, or an object we created that someone deleted
 * before the cache saw it. (client-go's controllers call these
 * expectations.) A write the server found to change nothing (the same
 * resourceVersion back) has no echo and leaves no record. */
#define PENDING_MAX_MS 10000u
#define PENDING_RECHECK_MS 1000u

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void pending_key(bool secret, const char *ns, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%c/%s/%s", secret ? 's' : 'c', ns, name);
}

static const char *rv_or_empty(const json_t *obj)
{
	const char *rv = sg_kube_meta_str(obj, "resourceVersion");
	return rv ? rv : "";
}

/* We wrote target ns/name after reading acted_on (NULL: none) from the
 * cache; after (NULL for a delete) is what the server answered. Out of
 * memory loses the record: at worst one write is repeated. */
static void pending_note(sg_trust *t, bool secret, const char *ns, const char *name, const json_t *acted_on,
                         const json_t *after, bool deleted)
{
	const char *rv = rv_or_empty(acted_on);
	if (!deleted && after && strcmp(rv_or_empty(after), rv) == 0)
		return; /* nothing changed: no event will follow */
	char key[SG_CTRL_KEY_MAX + 4];
	pending_key(secret, ns, name, key, sizeof(key));
	json_t *rec = json_pack("{s:s, s:I}", "rv", rv, "at", (json_int_t)mono_ms());
	pthread_mutex_lock(&t->pending_mu);
	if (rec)
		json_object_set_new(t->pending, key, rec);
	pthread_mutex_unlock(&t->pending_mu);
}

/* Whether cached (the cache's target ns/name, NULL: absent) is older than
 * our last write of it; drops the record when it is not. */
static bool pending_stale(sg_trust *t, bool secret, const char *ns, const char *name, const json_t *cached)
{
	char key[SG_CTRL_KEY_MAX + 4];
	pending_key(secret, ns, name, key, sizeof(key));
	pthread_mutex_lock(&t->pending_mu);
	json_t *rec = json_object_get(t->pending, key);
	const char *rv = json_string_value(json_object_get(rec, "rv"));
	uint64_t at = (uint64_t)json_integer_value(json_object_get(rec, "at"));
	bool stale = rv && mono_ms() - at < PENDING_MAX_MS && strcmp(rv, rv_or_empty(cached)) == 0;
	if (rec && !stale)
		json_object_del(t->pending, key);
	pthread_mutex_unlock(&t->pending_mu);
	return stale;
}

/* Forgets records past their time (of targets nobody looked at again). */
static void pending_prune(sg_trust *t)
{
	uint64_t now = mono_ms();
	pthread_mutex_lock(&t->pending_mu);
	const char *k;
	void *tmp;
	json_t *rec;
	json_object_foreach_safe(t->pending, tmp, k, rec)
	{
		if (now - (uint64_t)json_integer_value(json_object_get(rec, "at")) >= PENDING_MAX_MS)
			json_object_del(t->pending, k);
	}
	pthread_mutex_unlock(&t->pending_mu);
}

/* A DELETE of a target: SG_OK also when it was gone already, counted only
 * when it did delete. */
static int delete_target(sg_trust *t, const sg_kube_ref *ref)
{
	int rc = sg_kube_delete(t->kube, ref, NULL);
	if (rc == SG_OK)
		atomic_fetch_add(&t->deletes, 1);
	return rc == SG_ENOTFOUND ? SG_OK : rc;
}

static int sync_target(sg_trust *t, sg_ctrl *c, const char *bname, const char *uid, const char *ns, const spec *s,
                       sg_certset *set, want *w, want *other, bool *deferred)
{
	sg_kube_informer *inf = sg_ctrl_informer(c, w->secret ? W_TGT_SECRET : W_TGT_CM);
	json_t *cur = sg_kube_informer_get(inf, ns, bname);
	if (pending_stale(t, w->secret, ns, bname, cur)) {
		json_decref(cur);
		*deferred = true;
		return SG_OK;
	}
	bool needed = !cur || needs_update(cur, s, w, bname, uid);
	/* A target whose controller is another Bundle of this name (deleted
	 * and created again, before garbage collection) cannot take a second
	 * controller reference: it goes first. */
	bool stale_owner = cur && controller_ref(cur) && !controlled_by(cur, uid) && controlled_by_bundle_named(cur, bname);
	int rc = SG_OK;
	json_t *body = NULL, *after = NULL;
	sg_kube_ref ref = target_ref(w->secret, ns, bname);
	if (!needed)
		goto out;
	if (sg_ctrl_stopping(c)) {
		rc = sg_error_set(SG_EBUSY, "trust: stopping");
		goto out;
	}
	if (stale_owner && (rc = delete_target(t, &ref)) < 0)
		goto out;
	if ((rc = make_formats(s, set, w, other)) < 0)
		goto out;
	body = target_body(bname, uid, ns, s, w, false);
	rc = body ? sg_kube_apply(t->kube, &ref, body, SG_TRUST_FIELD_MANAGER, true, &after)
	          : sg_error_set(SG_EINTERNAL, "trust: out of memory");
	if (rc == SG_OK) {
		atomic_fetch_add(&t->applies, 1);
		pending_note(t, w->secret, ns, bname, cur, after, false);
		sg_log(SG_LOG_DEBUG, "trust: target written", SG_F_STR("bundle", bname), SG_F_STR("namespace", ns),
		       SG_F_STR("kind", w->secret ? "Secret" : "ConfigMap"), SG_F_END);
	}
out:
	json_decref(body);
	json_decref(after);
	json_decref(cur);
	return rc;
}

static bool has_data(const json_t *obj)
{
	return json_object_size(json_object_get(obj, "data")) > 0 || json_object_size(json_object_get(obj, "binaryData")) > 0;
}

/* obj is a target this Bundle controls that should not exist: drop the
 * keys and the hash we wrote; delete what is left empty. */
static int cleanup_target(sg_trust *t, sg_ctrl *c, const json_t *obj, bool secret, const char *bname, const char *uid)
{
	const char *ns = sg_kube_meta_str(obj, "namespace");
	const char *have[OWNED_MAX];
	size_t nhave = 0;
	const json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
	if (owned_keys(obj, secret, have, &nhave) && nhave == 0 && !json_object_get(ann, SG_TRUST_HASH))
		return SG_OK; /* cleaned before: what is left belongs to others */
	SG_ENSURE(!sg_ctrl_stopping(c), SG_EBUSY, "trust: stopping");
	sg_kube_ref ref = target_ref(secret, ns, bname);
	if (!others_own_data(obj, secret)) {
		/* Every key is ours: the apply would leave it empty, and one
		 * delete does what apply + delete would. */
		int rc = delete_target(t, &ref);
		if (rc == SG_OK)
			pending_note(t, secret, ns, bname, obj, NULL, true);
		return rc;
	}
	want w = {.secret = secret};
	json_t *body = target_body(bname, uid, ns, NULL, &w, true);
	SG_ENSURE(body, SG_EINTERNAL, "trust: out of memory");
	json_t *after = NULL;
	int rc = sg_kube_apply(t->kube, &ref, body, SG_TRUST_FIELD_MANAGER, true, &after);
	json_decref(body);
	if (rc == SG_OK) {
		atomic_fetch_add(&t->cleanups, 1);
		bool empty = !has_data(after);
		if (empty)
			rc = delete_target(t, &ref);
		pending_note(t, secret, ns, bname, obj, after, empty);
	} else if (rc == SG_ENOTFOUND) {
		rc = SG_OK; /* its namespace is gone */
	}
	json_decref(after);
	return rc;
}

/* Targets of a Bundle that no longer exists: deleted, as the garbage
 * collector would (a cluster without one, or a Bundle deleted with
 * orphaning, would otherwise keep serving a bundle nobody maintains). */
static int orphans(sg_trust *t, sg_ctrl *c, const char *bname, bool *deferred)
{
	int rc = SG_OK;
	for (int kind = 0; kind < (t->secrets ? 2 : 1); kind++) {
		json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, kind ? W_TGT_SECRET : W_TGT_CM));
		SG_ENSURE(all, SG_EINTERNAL, "trust: out of memory");
		size_t i;
		json_t *obj;
		json_array_foreach(all, i, obj)
		{
			/* Only the Bundle's own target: the object of its name
			 * (another object naming the Bundle as controller is not
			 * ours to delete, and its ref would name the target). */
			const char *ns = sg_kube_meta_str(obj, "namespace"), *name = sg_kube_meta_str(obj, "name");
			if (rc < 0 || !ns || !name || strcmp(name, bname) != 0 || !controlled_by_bundle_named(obj, bname))
				continue;
			if (pending_stale(t, kind, ns, bname, obj)) {
				*deferred = true; /* deleted already; the cache is behind */
				continue;
			}
			if (sg_ctrl_stopping(c)) {
				rc = sg_error_set(SG_EBUSY, "trust: stopping");
				continue;
			}
			sg_kube_ref ref = target_ref(kind, ns, bname);
			if ((rc = delete_target(t, &ref)) == SG_OK)
				pending_note(t, kind, ns, bname, obj, NULL, true);
		}
		json_decref(all);
	}
	return rc;
}

/* ---- status ---- */

static int set_status(sg_trust *t, sg_ctrl *c, const json_t *bundle, bool ok, const char *reason, const char *msg,
                      const char *default_id)
{
	atomic_fetch_add(ok ? &t->synced : &t->not_synced, 1);
	json_t *intent = json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "conditions", "type", "Synced", "status",
	                         ok ? "True" : "False", "reason", reason, "message", msg);
	SG_ENSURE(intent, SG_EINTERNAL, "trust: out of memory");
	if (default_id && json_object_set_new(intent, "defaultCAVersion", json_string(default_id)) != 0) {
		json_decref(intent);
		SG_BAIL(SG_EINTERNAL, "trust: out of memory");
	}
	sg_kube_ref ref = {.group = SG_TRUST_GROUP, .version = SG_TRUST_VERSION, .resource = SG_TRUST_RESOURCE,
	                   .name = sg_kube_meta_str(bundle, "name")};
	/* The status is compared with the cached Bundle; a pass that runs
	 * before the cache shows our last status write would write the same
	 * status again. As for targets ("own writes"): while the cache shows
	 * the version that write acted on and the intent is the same, its echo
	 * is on the way. */
	char key[SG_KUBE_NAME_MAX + 3];
	snprintf(key, sizeof(key), "b/%s", ref.name ? ref.name : "");
	char *said = json_dumps(intent, JSON_COMPACT | JSON_SORT_KEYS);
	const char *rv = rv_or_empty(bundle);
	bool echo_due = false;
	pthread_mutex_lock(&t->pending_mu);
	json_t *rec = json_object_get(t->pending, key);
	const char *rec_rv = json_string_value(json_object_get(rec, "rv"));
	const char *rec_said = json_string_value(json_object_get(rec, "said"));
	uint64_t at = (uint64_t)json_integer_value(json_object_get(rec, "at"));
	if (rec_rv && strcmp(rec_rv, rv) == 0 && mono_ms() - at < PENDING_MAX_MS)
		echo_due = said && rec_said && strcmp(said, rec_said) == 0;
	else if (rec)
		json_object_del(t->pending, key);
	pthread_mutex_unlock(&t->pending_mu);
	bool written = false;
	int rc = SG_OK;
	if (sg_ctrl_stopping(c))
		rc = sg_error_set(SG_EBUSY, "trust: stopping");
	else if (!echo_due)
		rc = sg_ctrl_apply_status(c, &ref, SG_TRUST_KIND, bundle, intent, &written);
	json_decref(intent);
	if (written && rc == SG_OK && said) {
		json_t *note = json_pack("{s:s, s:s, s:I}", "rv", rv, "said", said, "at", (json_int_t)mono_ms());
		pthread_mutex_lock(&t->pending_mu);
		if (note)
			json_object_set_new(t->pending, key, note);
		pthread_mutex_unlock(&t->pending_mu);
	}
	free(said);
	if (written) {
		atomic_fetch_add(&t->status_writes, 1);
		sg_ctrl_event(c, bundle, ok ? "Normal" : "Warning", reason, "%s", msg);
		sg_log(ok ? SG_LOG_INFO : SG_LOG_WARN, "trust: bundle status", SG_F_STR("bundle", ref.name),
		       SG_F_STR("reason", reason), SG_F_STR("message", msg), SG_F_END);
	}
	return rc;
}

/* ---- reconcile ---- */

static bool ns_targeted(const sg_trust *t, const spec *s, const json_t *ns)
{
	const char *name = sg_kube_meta_str(ns, "name");
	const json_t *meta = json_object_get(ns, "metadata");
	const char *phase = json_string_value(json_object_get(json_object_get(ns, "status"), "phase"));
	if (!name || json_object_get(meta, "deletionTimestamp") || (phase && strcmp(phase, "Terminating") == 0))
		return false;
	if (t->ntarget_ns) {
		bool listed = false;
		for (size_t i = 0; i < t->ntarget_ns && !listed; i++)
			listed = strcmp(t->target_ns[i], name) == 0;
		if (!listed)
			return false;
	}
	return !s->ns_sel || sg_kube_selector_matches(s->ns_sel, json_object_get(meta, "labels"));
}

static void synced_message(const sg_trust *t, const spec *s, char *out, size_t cap)
{
	const char *where = t->ntarget_ns ? "the namespaces of --target-namespaces" : "all namespaces";
	if (s->ns_sel && !sg_kube_selector_everything(s->ns_sel))
		snprintf(out, cap, "Successfully synced Bundle to %s that match this label selector: %s",
		         t->ntarget_ns ? "the namespaces of --target-namespaces" : "namespaces",
		         sg_kube_selector_string(s->ns_sel));
	else
		snprintf(out, cap, "Successfully synced Bundle to %s", where);
}

static int sync_all(sg_trust *t, sg_ctrl *c, const json_t *bundle, const char *bname, const spec *s, build *b,
                    char *fail_ns, size_t fail_cap, bool *deferred)
{
	const char *uid = sg_kube_meta_str(bundle, "uid");
	SG_ENSURE(uid, SG_EPROTO, "trust: Bundle %s has no uid", bname);
	char *pem = NULL;
	size_t pem_len = 0;
	SG_TRY(sg_certset_pem(b->set, &pem, &pem_len));
	want w[2] = {{.t = &s->cm, .secret = false, .pem = pem, .pem_len = pem_len},
	             {.t = &s->secret, .secret = true, .pem = pem, .pem_len = pem_len}};
	int rc = SG_OK;
	for (int k = 0; k < 2 && rc == SG_OK; k++)
		if (w[k].t->on)
			rc = target_hash(s, w[k].t, pem, pem_len, w[k].hash);
	json_t *namespaces = rc == SG_OK ? sg_kube_informer_list(sg_ctrl_informer(c, W_NAMESPACES)) : NULL;
	json_t *desired = json_object();
	if (rc == SG_OK && (!namespaces || !desired))
		rc = sg_error_set(SG_EINTERNAL, "trust: out of memory");
	size_t i;
	json_t *ns;
	json_array_foreach(rc == SG_OK ? namespaces : NULL, i, ns)
	{
		if (!ns_targeted(t, s, ns))
			continue;
		const char *name = sg_kube_meta_str(ns, "name");
		json_object_set_new(desired, name, json_true());
		for (int k = 0; k < 2 && rc == SG_OK; k++) {
			if (!w[k].t->on)
				continue;
			rc = sync_target(t, c, bname, uid, name, s, b->set, &w[k], &w[1 - k], deferred);
			if (rc < 0)
				snprintf(fail_ns, fail_cap, "%s", name);
		}
		if (rc < 0)
			break;
	}
	/* What should not be there any more. */
	for (int k = 0; k < (t->secrets ? 2 : 1) && rc == SG_OK; k++) {
		json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, k ? W_TGT_SECRET : W_TGT_CM));
		if (!all) {
			rc = sg_error_set(SG_EINTERNAL, "trust: out of memory");
			break;
		}
		json_t *obj;
		json_array_foreach(all, i, obj)
		{
			const json_t *meta = json_object_get(obj, "metadata");
			const char *label = json_string_value(json_object_get(json_object_get(meta, "labels"), SG_TRUST_LABEL));
			const char *ons = sg_kube_meta_str(obj, "namespace");
			const char *oname = sg_kube_meta_str(obj, "name");
			if (!label || strcmp(label, bname) != 0 || !ons || !oname || strcmp(oname, bname) != 0)
				continue;
			if ((w[k].t->on && json_object_get(desired, ons)) || json_object_get(meta, "deletionTimestamp") ||
			    !controlled_by(obj, uid))
				continue;
			if (pending_stale(t, k == 1, ons, bname, obj)) {
				*deferred = true; /* cleaned already; the cache is behind */
				continue;
			}
			rc = cleanup_target(t, c, obj, k == 1, bname, uid);
			if (rc < 0) {
				snprintf(fail_ns, fail_cap, "%s", ons);
				break;
			}
		}
		json_decref(all);
	}
	json_decref(namespaces);
	json_decref(desired);
	/* The two kinds may share one encoding of each format. */
	if (w[1].jks != w[0].jks)
		free(w[1].jks);
	if (w[1].p12 != w[0].p12)
		free(w[1].p12);
	free(w[0].jks);
	free(w[0].p12);
	free(pem);
	return rc;
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	sg_trust *t = arg;
	bool deferred = false; /* a target's cache is behind our write: look again */
	pending_prune(t);
	json_t *bundle = sg_kube_informer_get(sg_ctrl_informer(c, W_BUNDLES), NULL, key);
	if (!bundle) {
		refs_drop(t, key);
		int rc = orphans(t, c, key, &deferred);
		if (rc == SG_OK && deferred)
			res->requeue_after_ms = PENDING_RECHECK_MS;
		return rc;
	}
	spec s;
	char why[MSG_MAX], msg[MSG_MAX + 64];
	int rc = SG_OK;
	build b = {0};
	if (!parse_spec(bundle, key, &s, why, sizeof(why))) {
		refs_set(t, key, NULL);
		printable_only(why);
		snprintf(msg, sizeof(msg), "Bundle is invalid: %s", why);
		rc = set_status(t, c, bundle, false, "InvalidSpec", msg, NULL);
		goto out;
	}
	refs_set(t, key, &s);
	if (s.secret.on && !t->secrets) {
		rc = set_status(t, c, bundle, false, "SecretTargetsDisabled",
		                "Bundle has Secret targets but the feature is disabled", NULL);
		goto out;
	}
	sg_certset_opts co = {.filter_expired = t->filter_expired, .filter_non_ca = t->filter_non_ca};
	if ((rc = sg_certset_new(&b.set, &co)) < 0)
		goto out;
	rc = build_sources(t, c, &s, &b);
	if (rc == SG_ENOTFOUND) {
		snprintf(msg, sizeof(msg), "Bundle source was not found: %s", b.msg);
		rc = set_status(t, c, bundle, false, "SourceNotFound", msg, NULL);
		goto out;
	}
	if (rc < 0) {
		/* Retried with backoff: the cause may be ours (memory), and a
		 * fixed source arrives as an event anyway. */
		snprintf(msg, sizeof(msg), "Failed to build bundle sources: %s", b.msg[0] ? b.msg : sg_error_last()->msg);
		int st = set_status(t, c, bundle, false, "SourceBuildError", msg, NULL);
		rc = sg_error_set(st < 0 ? st : rc, "%s", msg);
		goto out;
	}
	char fail_ns[SG_NAMES_LABEL_MAX + 1] = "";
	rc = sync_all(t, c, bundle, key, &s, &b, fail_ns, sizeof(fail_ns), &deferred);
	if (rc < 0) {
		if (rc == SG_EBUSY && sg_ctrl_stopping(c))
			goto out;
		snprintf(msg, sizeof(msg), "Failed to sync bundle to namespace \"%s\": %s", fail_ns,
		         sg_error_last()->msg);
		int saved = rc;
		sg_error e;
		sg_error_save(&e);
		(void)set_status(t, c, bundle, false, "SyncTargetFailed", msg, NULL);
		sg_error_restore(&e);
		rc = saved;
		goto out;
	}
	synced_message(t, &s, msg, sizeof(msg));
	rc = set_status(t, c, bundle, true, "Synced", msg, s.uses_default && t->package ? sg_trust_package_id(t->package) : NULL);
	if (rc == SG_OK && deferred)
		res->requeue_after_ms = PENDING_RECHECK_MS;
out:
	if (rc < 0)
		atomic_fetch_add(&t->errors, 1);
	sg_certset_free(b.set);
	spec_free(&s);
	json_decref(bundle);
	return rc;
}

/* ---- life ---- */

static void stats_of(void *arg, void *out)
{
	sg_trust_stats_get(arg, out);
}

/* signet_trust_*: the module's counters, by the registry's stats table. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
#define COUNTER(field, name, help) SG_METRICS_STAT_COUNTER(sg_trust_stats, field, name, help)
	static const sg_metrics_stat rows[] = {
	    COUNTER(synced, "signet_trust_bundle_synced_total", "Bundle reconciles that ended Synced=True."),
	    COUNTER(not_synced, "signet_trust_bundle_not_synced_total",
	            "Bundle reconciles that ended Synced=False (any reason)."),
	    COUNTER(applies, "signet_trust_target_writes_total", "Targets created or repaired (server-side apply)."),
	    COUNTER(cleanups, "signet_trust_target_cleanups_total",
	            "Targets stripped of the bundle's keys (no longer selected)."),
	    COUNTER(deletes, "signet_trust_target_deletes_total",
	            "Targets deleted (emptied, orphaned or of a re-created Bundle)."),
	    COUNTER(status_writes, "signet_trust_status_writes_total", "Bundle status writes."),
	    COUNTER(errors, "signet_trust_errors_total", "Bundle reconciles that failed (retried with backoff)."),
	    SG_METRICS_STAT_GAUGE(sg_trust_stats, bundles, "signet_trust_bundles", "Bundles known to the controller."),
	};
#undef COUNTER
	return sg_metrics_stats(reg, rows, sizeof(rows) / sizeof(rows[0]), stats_of, sizeof(sg_trust_stats), arg);
}

int sg_trust_new(sg_trust **out, const sg_trust_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube, SG_EINVAL, "trust: needs a Kubernetes client");
	const char *tns = o->trust_namespace ? o->trust_namespace : "cert-manager";
	SG_ENSURE(sg_names_dns_label(tns, strlen(tns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "trust: --trust-namespace \"%s\" is not a namespace name", tns);
	SG_ENSURE(o->ntarget_namespaces <= SG_TRUST_TARGET_NAMESPACES_MAX, SG_EINVAL,
	          "trust: at most %d --target-namespaces", SG_TRUST_TARGET_NAMESPACES_MAX);
	for (size_t i = 0; i < o->ntarget_namespaces; i++) {
		const char *n = o->target_namespaces[i];
		SG_ENSURE(n && sg_names_dns_label(n, strlen(n), SG_NAMES_LABEL_MAX), SG_EINVAL,
		          "trust: --target-namespaces: \"%s\" is not a namespace name", n ? n : "");
	}
	sg_trust *t = calloc(1, sizeof(*t));
	SG_ENSURE(t, SG_EINTERNAL, "trust: out of memory");
	pthread_mutex_init(&t->refs_mu, NULL);
	pthread_mutex_init(&t->pending_mu, NULL);
	t->kube = o->kube;
	snprintf(t->trust_ns, sizeof(t->trust_ns), "%s", tns);
	t->package = o->package;
	t->secrets = o->secret_targets_enabled;
	t->filter_expired = o->filter_expired;
	t->filter_non_ca = o->filter_non_ca;
	t->refs = json_object();
	t->pending = json_object();
	int rc = t->refs && t->pending ? SG_OK : sg_error_set(SG_EINTERNAL, "trust: out of memory");
	if (rc == SG_OK && o->ntarget_namespaces) {
		t->target_ns = calloc(o->ntarget_namespaces, sizeof(char *));
		for (size_t i = 0; t->target_ns && i < o->ntarget_namespaces; i++)
			if ((t->target_ns[i] = strdup(o->target_namespaces[i])))
				t->ntarget_ns++;
		if (t->ntarget_ns != o->ntarget_namespaces)
			rc = sg_error_set(SG_EINTERNAL, "trust: out of memory");
	}
	sg_ctrl_watch w[] = {
		[W_BUNDLES] = {.ref = {.group = SG_TRUST_GROUP, .version = SG_TRUST_VERSION, .resource = SG_TRUST_RESOURCE}},
		[W_NAMESPACES] = {.ref = {.version = "v1", .resource = "namespaces"}, .map = map_all},
		[W_SRC_CM] = {.ref = {.version = "v1", .resource = "configmaps", .ns = t->trust_ns}, .map = map_source_cm},
		[W_SRC_SECRET] = {.ref = {.version = "v1", .resource = "secrets", .ns = t->trust_ns},
		                  .map = map_source_secret},
		[W_TGT_CM] = {.ref = {.version = "v1", .resource = "configmaps"},
		              .label_selector = SG_TRUST_LABEL,
		              .map = map_target,
		              .metadata_only = true},
		[W_TGT_SECRET] = {.ref = {.version = "v1", .resource = "secrets"},
		                  .label_selector = SG_TRUST_LABEL,
		                  .map = map_target,
		                  .metadata_only = true},
	};
	sg_ctrl_def def = {.name = "bundles",
	                   .kube = o->kube,
	                   .watches = w,
	                   .nwatches = t->secrets ? 6 : 5,
	                   .reconcile = reconcile,
	                   .metrics = metrics,
	                   .arg = t,
	                   .workers = o->workers ? o->workers : 1,
	                   .field_manager = SG_TRUST_FIELD_MANAGER};
	if (rc == SG_OK)
		rc = sg_ctrl_new(&t->ctrl, &def);
	if (rc < 0) {
		sg_trust_free(t);
		return rc;
	}
	*out = t;
	return SG_OK;
}

sg_ctrl *sg_trust_controller(sg_trust *t)
{
	return t->ctrl;
}

void sg_trust_stats_get(sg_trust *t, sg_trust_stats *out)
{
	*out = (sg_trust_stats){
		.synced = atomic_load(&t->synced),
		.not_synced = atomic_load(&t->not_synced),
		.applies = atomic_load(&t->applies),
		.cleanups = atomic_load(&t->cleanups),
		.deletes = atomic_load(&t->deletes),
		.status_writes = atomic_load(&t->status_writes),
		.errors = atomic_load(&t->errors),
	};
	pthread_mutex_lock(&t->refs_mu);
	out->bundles = json_object_size(t->refs);
	pthread_mutex_unlock(&t->refs_mu);
}

void sg_trust_free(sg_trust *t)
{
	if (!t)
		return;
	sg_ctrl_free(t->ctrl);
	for (size_t i = 0; i < t->ntarget_ns; i++)
		free(t->target_ns[i]);
	free(t->target_ns);
	json_decref(t->refs);
	json_decref(t->pending);
	pthread_mutex_destroy(&t->refs_mu);
	pthread_mutex_destroy(&t->pending_mu);
	free(t);
}
