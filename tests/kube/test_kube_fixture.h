/*
 * test_kube_fixture: the fixture the C kube tests share (tests/controllers,
 * tests/ra, tests/operator, tests/trust: each test_kube_*.c), on top of
 * test_kube_env.h (which server, applying manifests).
 *
 * What it gives:
 *   - kube_fx_start(): the API server (started or shared, as test_kube_env.h
 *     finds it) and an admin client on it, or exit(1): these tests exist to
 *     run against a server; a client as its unprivileged user
 *     (kube_fx_user_client); other clients from kubeconfig text
 *     (kube_fx_client_yaml); a value of the server's env file
 *     (kube_fx_env_value).
 *   - object access by sg_kube_ref, one call each: kube_fx_get (NULL when
 *     absent), kube_fx_exists, kube_fx_rv, kube_fx_count, kube_fx_create,
 *     kube_fx_ensure (created or there already), kube_fx_patch (merge),
 *     kube_fx_apply (server-side), kube_fx_delete; a Namespace
 *     (kube_fx_namespace) and JSON text applied as `kubectl apply` would
 *     (kube_fx_apply_text). The fallible ones return the sg_kube result,
 *     so the caller's SG_CHECK_OK names the caller's line.
 *   - conditions (kube_fx_cond, kube_fx_cond_str, kube_fx_cond_is: status,
 *     reason, message and observedGeneration, what was seen written out).
 *   - waiting for a state: KUBE_FX_WAIT(ms, cond, seen) is SG_WAIT_FOR that,
 *     past the deadline, also prints what the last look saw;
 *     kube_fx_cache_current() says whether an informer holds what the
 *     server lists (every event delivered), kube_fx_settled() whether a
 *     count stopped moving over a number of looks (KUBE_FX_WAIT_SETTLED
 *     waits for that): together, "the controller is idle".
 *   - with signer/ca_fixture.h included before this header: the test CA
 *     (signetctl init into a SoftHSM2 token) opened as an appliance
 *     (kube_fx_ca), a chain check against its root file (kube_fx_verify)
 *     and certificate times (kube_fx_asn1_seconds). Tests without a CA do
 *     not include the CA fixture and so do not see these.
 *
 * Who owns what: the test owns the client kube_fx_start returns and every
 * object a kube_fx_get/kube_fx_rv returns (json_decref / free);
 * kube_fx_create(_out), kube_fx_ensure, kube_fx_patch and kube_fx_apply
 * take the JSON they are given (stolen, even on failure), so a json_pack
 * can be passed straight in. The API server is test_kube_env.h's (stopped at exit). kube_fx_ca's
 * fixture folder and appliance are the test's.
 *
 * Header-only and static inline, as test_kube_env.h: each test file is its
 * own program, and a helper a test does not use costs nothing.
 */
#ifndef TEST_KUBE_FIXTURE_H
#define TEST_KUBE_FIXTURE_H

#include "sg_kube.h"
#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_test.h"
#include "test_kube_env.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the server and the admin client ---- */

/* Configures the log (level), starts or finds the API server and returns
 * a client on its admin kubeconfig without a rate limit; exits when there
 * is no server or no client. Caller frees the client (sg_kube_free). */
static inline sg_kube *kube_fx_start(sg_log_level level)
{
	sg_log_configure(level, SG_LOG_TEXT);
	if (!kube_env_start()) {
		fprintf(stderr, "no API server\n");
		exit(1);
	}
	sg_kube *k = kube_env_client(-1, 0);
	if (!k) {
		fprintf(stderr, "no client\n");
		exit(1);
	}
	return k;
}

/* A client of the kubeconfig text yaml with options o (NULL: no rate
 * limit), or NULL (printed). Caller frees. */
static inline sg_kube *kube_fx_client_yaml(const char *yaml, const sg_kube_options *o)
{
	sg_kube_config *c = NULL;
	sg_kube *kk = NULL;
	if (sg_kube_config_from_bytes(&c, yaml, strlen(yaml), NULL, NULL) != 0 ||
	    sg_kube_new(&kk, &c, o ? o : &(sg_kube_options){.qps = -1}) != 0) {
		fprintf(stderr, "client: %s\n", sg_error_last()->msg);
		return NULL;
	}
	return kk;
}

/* A client as the server's unprivileged user (KUBE_USER_TOKEN_FILE: no
 * RBAC rights), no rate limit; NULL (printed) when none can be had. Caller
 * frees. */
static inline sg_kube *kube_fx_user_client(void)
{
	char yaml[2048];
	if (snprintf(yaml, sizeof(yaml),
	             "current-context: t\ncontexts: [{name: t, context: {cluster: c, user: u}}]\n"
	             "clusters: [{name: c, cluster: {server: '%s', certificate-authority: '%s'}}]\n"
	             "users: [{name: u, user: {tokenFile: '%s'}}]\n",
	             kube_env.server, kube_env.ca_file, kube_env.user_token_file) >= (int)sizeof(yaml))
		return NULL;
	return kube_fx_client_yaml(yaml, NULL);
}

/* The value of key in the server's env file (apiserver.sh's: KUBE_SA_ISSUER,
 * KUBE_SA_PUBLIC_KEY, ...) into out; false when it has none. */
static inline bool kube_fx_env_value(const char *key, char *out, size_t cap)
{
	char path[700];
	const char *shared = getenv("SIGNET_KUBE_ENV");
	if (shared && *shared)
		snprintf(path, sizeof(path), "%s", shared);
	else
		snprintf(path, sizeof(path), "%s/env", kube_env.dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[1024];
	out[0] = 0;
	while (fgets(line, sizeof(line), f))
		kube_env_value(line, key, out, cap);
	fclose(f);
	return out[0] != 0;
}

/* ---- objects ---- */

/* A core (v1) collection or object. */
#define KUBE_FX_CORE(resource_, ns_, name_) \
	((sg_kube_ref){.version = "v1", .resource = (resource_), .ns = (ns_), .name = (name_)})

/* ref with name (and subresource, NULL: none). */
static inline sg_kube_ref kube_fx_named(sg_kube_ref ref, const char *name, const char *subresource)
{
	ref.name = name;
	ref.subresource = subresource;
	return ref;
}

/* Whether rc is a create's answer for an object that exists already (409
 * AlreadyExists). */
static inline bool kube_fx_already_exists(int rc)
{
	return rc != SG_OK && sg_kube_last_status()->code == 409 &&
	       strcmp(sg_kube_last_status()->reason, "AlreadyExists") == 0;
}

/* The object, or NULL when it is absent or the GET failed (a failure other
 * than 404 is printed). Caller decrefs. */
static inline json_t *kube_fx_get(sg_kube *k, sg_kube_ref ref)
{
	json_t *o = NULL;
	int rc = sg_kube_get(k, &ref, &o);
	if (rc != SG_OK && rc != SG_ENOTFOUND)
		fprintf(stderr, "GET %s %s/%s: %s\n", ref.resource, ref.ns ? ref.ns : "", ref.name ? ref.name : "",
		        sg_error_last()->msg);
	if (rc != SG_OK) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static inline bool kube_fx_exists(sg_kube *k, sg_kube_ref ref)
{
	json_t *o = kube_fx_get(k, ref);
	json_decref(o);
	return o != NULL;
}

/* The object's resourceVersion, "" when it is absent; caller frees. */
static inline char *kube_fx_rv(sg_kube *k, sg_kube_ref ref)
{
	json_t *o = kube_fx_get(k, ref);
	const char *rv = sg_kube_meta_str(o, "resourceVersion");
	char *out = strdup(rv ? rv : "");
	json_decref(o);
	return out;
}

/* Creates obj (stolen) in collection coll; *out (may be NULL) the object
 * the server made, caller decrefs. */
static inline int kube_fx_create_out(sg_kube *k, sg_kube_ref coll, json_t *obj, json_t **out)
{
	int rc = obj ? sg_kube_create(k, &coll, obj, out) : sg_error_set(SG_EINTERNAL, "test: no object to create");
	json_decref(obj);
	return rc;
}

static inline int kube_fx_create(sg_kube *k, sg_kube_ref coll, json_t *obj)
{
	return kube_fx_create_out(k, coll, obj, NULL);
}

/* As kube_fx_create, an object that exists already counting as made (the
 * API server may be shared, or kept from an earlier run). */
static inline int kube_fx_ensure(sg_kube *k, sg_kube_ref coll, json_t *obj)
{
	int rc = kube_fx_create(k, coll, obj);
	return kube_fx_already_exists(rc) ? SG_OK : rc;
}

/* A merge patch (stolen) by the client's own field manager. */
static inline int kube_fx_patch(sg_kube *k, sg_kube_ref ref, json_t *patch)
{
	int rc = patch ? sg_kube_merge_patch(k, &ref, patch, NULL) : sg_error_set(SG_EINTERNAL, "test: no patch");
	json_decref(patch);
	return rc;
}

/* A server-side apply of obj (stolen) at ref by field manager (forced):
 * what the object holds of manager's is what obj says now. */
static inline int kube_fx_apply(sg_kube *k, sg_kube_ref ref, json_t *obj, const char *manager)
{
	int rc = obj ? sg_kube_apply(k, &ref, obj, manager, true, NULL) : sg_error_set(SG_EINTERNAL, "test: no object");
	json_decref(obj);
	return rc;
}

static inline int kube_fx_delete(sg_kube *k, sg_kube_ref ref)
{
	return sg_kube_delete(k, &ref, NULL);
}

/* A Namespace object with one label (label_key NULL: none); caller
 * decrefs, or hands it to kube_fx_create. */
static inline json_t *kube_fx_namespace(const char *name, const char *label_key, const char *label_value)
{
	json_t *ns = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name", name);
	if (ns && label_key)
		json_object_set_new(json_object_get(ns, "metadata"), "labels", json_pack("{s:s}", label_key, label_value));
	return ns;
}

/* Applies one object written as JSON text (kube_env_apply_object: created,
 * or replaced when it exists); a text that is not JSON ends the test. */
static inline bool kube_fx_apply_text(sg_kube *k, const char *json_text)
{
	json_error_t e;
	json_t *o = json_loads(json_text, 0, &e);
	if (!o) {
		fprintf(stderr, "bad JSON in test: %s\n%s\n", e.text, json_text);
		exit(1);
	}
	bool ok = kube_env_apply_object(k, o, "test object");
	json_decref(o);
	return ok;
}

/* How many objects of coll (in one namespace or all) match lo; SIZE_MAX
 * when the LIST fails. */
static inline size_t kube_fx_count(sg_kube *k, sg_kube_ref coll, const sg_kube_list_opts *lo)
{
	json_t *list = NULL;
	size_t n = SIZE_MAX;
	if (sg_kube_list_all(k, &coll, lo, &list) == SG_OK)
		n = json_array_size(json_object_get(list, "items"));
	json_decref(list);
	return n;
}

/* ---- conditions ---- */

/* The last status.conditions entry of type, or NULL (borrowed from obj). */
static inline const json_t *kube_fx_cond(const json_t *obj, const char *type)
{
	const json_t *found = NULL;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c)
	{
		const char *t = json_string_value(json_object_get(c, "type"));
		if (t && strcmp(t, type) == 0)
			found = c;
	}
	return found;
}

/* A string field of condition type, or NULL (borrowed from obj). */
static inline const char *kube_fx_cond_str(const json_t *obj, const char *type, const char *field)
{
	return json_string_value(json_object_get(kube_fx_cond(obj, type), field));
}

/* Whether obj's condition type has status and reason, a message holding
 * part (NULL: any message, but one), and observedGeneration equal to the
 * object's generation; what it saw goes to seen (for the caller to print
 * when a wait for it fails). */
static inline bool kube_fx_cond_is(const json_t *obj, const char *type, const char *status, const char *reason,
                                   const char *part, char *seen, size_t cap)
{
	const json_t *c = kube_fx_cond(obj, type);
	const char *st = json_string_value(json_object_get(c, "status"));
	const char *r = json_string_value(json_object_get(c, "reason"));
	const char *m = json_string_value(json_object_get(c, "message"));
	json_int_t og = json_integer_value(json_object_get(c, "observedGeneration"));
	json_int_t gen = json_integer_value(json_object_get(json_object_get(obj, "metadata"), "generation"));
	bool ok = st && r && m && strcmp(st, status) == 0 && strcmp(r, reason) == 0 && (!part || strstr(m, part)) &&
	          gen > 0 && og == gen;
	const char *name = sg_kube_meta_str(obj, "name");
	snprintf(seen, cap, "%s: %s=%s %s \"%.1200s\" (observedGeneration %lld, generation %lld)", name ? name : "-",
	         type, st ? st : "-", r ? r : "-", m ? m : "-", (long long)og, (long long)gen);
	return ok;
}

/* ---- waiting for a state ---- */

/* SG_WAIT_FOR(ms, cond) that, when the deadline passes, also prints seen
 * (a string the condition keeps up to date with what its last look saw). */
#define KUBE_FX_WAIT(ms, cond, seen)                                           \
	do {                                                                   \
		int kube_fx_failed_ = sg_test_failures;                        \
		SG_WAIT_FOR(ms, cond);                                         \
		if (sg_test_failures != kube_fx_failed_)                       \
			fprintf(stderr, "  last seen: %s\n", (const char *)(seen)); \
	} while (0)

/* Whether informer inf holds exactly what the server lists for coll with
 * lo (NULL: all): the same objects at the same resourceVersions, so every
 * event up to now has been delivered. What differs goes to why. */
static inline bool kube_fx_cache_current(sg_kube *k, sg_kube_informer *inf, sg_kube_ref coll,
                                         const sg_kube_list_opts *lo, char *why, size_t cap)
{
	json_t *list = NULL;
	if (!inf || sg_kube_list_all(k, &coll, lo, &list) != SG_OK) {
		snprintf(why, cap, "%s: no informer, or LIST failed: %.200s", coll.resource,
		         inf ? sg_error_last()->msg : "-");
		json_decref(list);
		return false;
	}
	json_t *items = json_object_get(list, "items");
	bool same = json_array_size(items) == sg_kube_informer_size(inf);
	if (!same)
		snprintf(why, cap, "%s: server %zu, cache %zu", coll.resource, json_array_size(items),
		         sg_kube_informer_size(inf));
	size_t i;
	json_t *item;
	json_array_foreach(items, i, item)
	{
		const char *ns = sg_kube_meta_str(item, "namespace"), *name = sg_kube_meta_str(item, "name");
		const char *rv = sg_kube_meta_str(item, "resourceVersion");
		json_t *cached = sg_kube_informer_get(inf, ns, name);
		const char *crv = sg_kube_meta_str(cached, "resourceVersion");
		if (same && !(rv && crv && strcmp(rv, crv) == 0)) {
			snprintf(why, cap, "%s %.63s/%.100s: server at %.30s, cache at %.30s", coll.resource, ns ? ns : "",
			         name ? name : "", rv ? rv : "-", crv ? crv : "-");
			same = false;
		}
		json_decref(cached);
	}
	json_decref(list);
	return same;
}

/* One look of a wait for a count to stop moving: ok says this look found
 * the rest of the state settled, n is the count now. True once `looks`
 * looks in a row (one poll interval apart) were ok with the count
 * unchanged since the look before; *done (start at UINT64_MAX) and *seen
 * (start at 0) carry the previous looks. */
static inline bool kube_fx_settled(bool ok, uint64_t n, uint64_t *done, int *seen, int looks)
{
	*seen = ok && *done == n ? *seen + 1 : 0;
	*done = ok ? n : UINT64_MAX;
	return ok && *seen >= looks;
}

/* KUBE_FX_WAIT for a settled state: settled_expr is evaluated with
 * kube_fx_done and kube_fx_looks in scope (fresh for this wait: UINT64_MAX
 * and 0), for it to hand to kube_fx_settled, e.g.
 * KUBE_FX_WAIT_SETTLED(ms, idle(&kube_fx_done, &kube_fx_looks), why). */
#define KUBE_FX_WAIT_SETTLED(ms, settled_expr, why)              \
	do {                                                     \
		uint64_t kube_fx_done = UINT64_MAX;              \
		int kube_fx_looks = 0;                           \
		KUBE_FX_WAIT(ms, settled_expr, why);             \
	} while (0)

/* ---- the test CA (with signer/ca_fixture.h) ---- */

/* Only for the tests that have a CA: the fixture's types and the
 * appliance come with its header, which this one does not pull into a
 * test that has none. */
#ifdef CA_FIXTURE_H

#include <openssl/asn1.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

/* The test CA: an ecdsa-p256 key in a fresh SoftHSM2 token (signetctl
 * init, fixture_ca) opened as an appliance with signer_threads signers.
 * Exits when there is none. The fixture's folder and the appliance are the
 * test's (its root bundle: fx->root). */
static inline sg_appliance *kube_fx_ca(fixture *fx, int signer_threads)
{
	if (fixture_ca(fx, "ecdsa-p256") != 0) {
		fprintf(stderr, "no CA\n");
		exit(1);
	}
	fx->args.s.signer_threads = signer_threads;
	sg_appliance *app = NULL;
	SG_CHECK_OK(sg_appliance_open(&app, &fx->args.s));
	if (!app)
		exit(1);
	return app;
}

/* t as Unix seconds. */
static inline int64_t kube_fx_asn1_seconds(const ASN1_TIME *t)
{
	int days = 0, secs = 0;
	ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
	ASN1_TIME_diff(&days, &secs, epoch, t);
	ASN1_TIME_free(epoch);
	return (int64_t)days * 86400 + secs;
}

/* Whether leaf, with the untrusted certificates of chain (may be NULL),
 * verifies against the roots of root_file for purpose (0: any); a failure
 * is printed with what (no leaf: false, silently). */
static inline bool kube_fx_verify(const char *root_file, X509 *leaf, STACK_OF(X509) * chain, int purpose,
                                  const char *what)
{
	X509_STORE *st = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	int v = -1;
	if (!leaf) {
		/* nothing to verify: false, and the caller knows why */
	} else if (!st || !ctx || X509_STORE_load_file(st, root_file) != 1 ||
	           X509_STORE_CTX_init(ctx, st, leaf, chain) != 1) {
		fprintf(stderr, "verify %s: cannot set up a store of %s\n", what, root_file);
	} else {
		if (purpose)
			X509_STORE_CTX_set_purpose(ctx, purpose);
		v = X509_verify_cert(ctx);
		if (v != 1)
			fprintf(stderr, "verify %s: %s\n", what, X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
	}
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(st);
	ERR_clear_error();
	return v == 1;
}

#endif /* CA_FIXTURE_H */

#endif
