/*
 * sg_trust_targets: what a Bundle's target must hold and whether a cached
 * one holds it. The hash annotation (over the inputs in a stable order,
 * not the outputs: PKCS#12 and JKS differ at each encoding), the owner
 * reference, the data keys each field manager owns by managedFields
 * (the target caches hold metadata only, so drift is seen through
 * ownership), the apply intent, and the extra formats made once per
 * reconcile. Pure functions of the spec and the cached object: the writes
 * themselves, and what the caches have not shown yet, are in
 * sg_trust_writes.c. Apart so that trust-manager's needsUpdate reads in
 * one sitting with everything it compares.
 */
#include "sg_trust_impl.h"

#include "sg_base64.h"
#include "sg_crypto.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_strbuf.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- targets ---- */

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
	json_object_foreach((json_t *)map, k, v) keys[i++] = k;
	qsort(keys, n, sizeof(*keys), trust_cmp_json_str);
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
int trust_target_hash(const spec *s, const tgt *x, const char *pem, size_t len, char out[65])
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
const json_t *trust_controller_ref(const json_t *obj)
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

bool trust_controlled_by(const json_t *obj, const char *uid)
{
	const json_t *r = trust_controller_ref(obj);
	const char *u = json_string_value(json_object_get(r, "uid"));
	return u && uid && strcmp(u, uid) == 0;
}

bool trust_controlled_by_bundle_named(const json_t *obj, const char *bname)
{
	const json_t *r = trust_controller_ref(obj);
	const char *kind = json_string_value(json_object_get(r, "kind"));
	const char *name = json_string_value(json_object_get(r, "name"));
	const char *api = json_string_value(json_object_get(r, "apiVersion"));
	return kind && name && api && strcmp(kind, SG_TRUST_KIND) == 0 && strcmp(name, bname) == 0 &&
	       strncmp(api, SG_TRUST_GROUP "/", sizeof(SG_TRUST_GROUP)) == 0;
}

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

bool trust_owned_keys(const json_t *obj, bool secret, const char *keys[OWNED_MAX], size_t *n)
{
	return managed_data_keys(obj, secret, true, keys, n);
}

/* Whether anyone but us owns a data key of obj. Without managedFields
 * nobody can tell: true, so the caller keeps what might be someone's. */
bool trust_others_own_data(const json_t *obj, bool secret)
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
bool trust_needs_update(const json_t *obj, const spec *s, const want *w, const char *bname, const char *uid)
{
	const json_t *meta = json_object_get(obj, "metadata");
	const char *label = json_string_value(json_object_get(json_object_get(meta, "labels"), SG_TRUST_LABEL));
	const char *hash = json_string_value(json_object_get(json_object_get(meta, "annotations"), SG_TRUST_HASH));
	if (!trust_controlled_by(obj, uid) || !label || strcmp(label, bname) != 0 || !hash ||
	    strcmp(hash, w->hash) != 0)
		return true;
	const char *have[OWNED_MAX];
	size_t nhave;
	const char *expect[3] = {w->t->key};
	size_t nexp = 1;
	if (s->jks_key)
		expect[nexp++] = s->jks_key;
	if (s->p12_key)
		expect[nexp++] = s->p12_key;
	return !trust_owned_keys(obj, w->secret, have, &nhave) || !same_key_set(have, nhave, expect, nexp);
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
json_t *trust_target_body(const char *bname, const char *uid, const char *ns, const spec *s, want *w, bool empty)
{
	json_t *labels = empty ? json_object() : copy_map(w->t->labels);
	json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s, s:o, s:o}}", "apiVersion", "v1", "kind",
	                         w->secret ? "Secret" : "ConfigMap", "metadata", "name", bname, "namespace", ns,
	                         "labels", labels, "ownerReferences", owner_refs(bname, uid));
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

sg_kube_ref trust_target_ref(bool secret, const char *ns, const char *name)
{
	return (sg_kube_ref){.version = "v1", .resource = secret ? "secrets" : "configmaps", .ns = ns, .name = name};
}

/* The extra formats, once per reconcile (every target of this pass gets
 * the same bytes). */
int trust_make_formats(const spec *s, sg_certset *set, want *w, want *other)
{
	if (s->jks_key && !w->jks) {
		if (other && other->jks) {
			w->jks = other->jks;
			w->jks_len = other->jks_len;
		} else {
			SG_TRY(sg_certset_jks(set, s->jks_pw, &w->jks, &w->jks_len));
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
