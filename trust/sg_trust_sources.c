/*
 * sg_trust_sources: step 3 of a reconcile (sg_trust.c): the bundle built
 * from a spec's sources into an sg_certset (strict PEM, dedupe, the
 * filters): inLine text, the default package, and the trust namespace's
 * ConfigMaps and Secrets by name or selector, one key or all of them, read
 * from the informers' caches and never from the API server. A failure
 * leaves its message and its kind in the `build`: SG_ENOTFOUND is
 * SourceNotFound, anything else SourceBuildError. Apart because reading
 * sources is its own concern (the data and binaryData forms, base64, the
 * messages trust-manager writes) that the targets never see.
 */
#include "sg_trust_impl.h"

#include "sg_base64.h"
#include "sg_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- building the bundle ---- */

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

int trust_cmp_json_str(const void *a, const void *b)
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
			                  "including all keys is not supported for TLS Secrets such as %s/%s", ns,
			                  name);
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
					return build_fail(b, SG_EINVAL, "%s %s/%s has more than %zu keys", kind, ns,
					                  name, n);
				keys[n++] = k;
			}
		}
		/* No data: nothing to add, not an error (trust-manager loops over
		 * nothing); a bundle left empty is SourceNotFound below. */
		qsort(keys, n, sizeof(keys[0]), trust_cmp_json_str);
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
		rc = build_fail(b, tmp ? SG_EINVAL : SG_ENOTFOUND,
		                tmp ? "%s %s/%s at key \"%s\" is not valid base64"
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

int trust_build_sources(sg_trust *t, sg_ctrl *c, const spec *s, build *b)
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
					return build_fail(b, SG_ENOTFOUND,
					                  "failed to get %s %s/%s: %s \"%s\" not found", kind,
					                  t->trust_ns, x->name,
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
					const json_t *labels =
					    json_object_get(json_object_get(obj, "metadata"), "labels");
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
