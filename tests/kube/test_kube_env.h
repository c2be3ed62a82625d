/*
 * test_kube_env: the API server a kube test talks to. Either the file named
 * by $SIGNET_KUBE_ENV (an apiserver.sh env file of a server someone else
 * runs), or a private server: `apiserver.sh start` in a fresh folder under
 * $SIGNET_TEST_TMP, stopped and removed at exit (kept on failure).
 *
 * kube_env_start() fills `kube_env` and returns false when no server can
 * be had (the caller then fails: these tests exist to run against one).
 *
 * kube_env_apply_file() puts the objects of a YAML file (the project's
 * manifests, test fixtures) into the server, as `kubectl apply -f` would
 * for the few kinds those files hold.
 */
#ifndef TEST_KUBE_ENV_H
#define TEST_KUBE_ENV_H

#include "sg_kube.h"
#include "sg_test.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KUBE_SCRIPTS
#error "KUBE_SCRIPTS (the tests/kube folder) must be defined"
#endif

/* ThreadSanitizer: jansson's json_incref/json_decref (inline, in
 * jansson.h) test the refcount for the "immortal" value with a plain read
 * next to their atomic update. jansson >= 2.11 documents reference counting
 * as thread-safe; the plain read of an aligned word is benign, so those two
 * frames are suppressed (nothing of ours), and so are the frees inside
 * libjansson after the last json_decref, whose release-only decrement
 * TSan cannot pair with the reader's accesses (through sg_kube.c's
 * wiping_free when Secrets' frees are cleared). Used only by TSan builds;
 * SG_API exports it from the (hidden-by-default) test executable, which is
 * how libtsan finds it. */
SG_API const char *__tsan_default_suppressions(void);
SG_API const char *__tsan_default_suppressions(void)
{
	return "race:json_incref\nrace:json_decref\ncalled_from_lib:libjansson.so\n"
	       "race:wiping_free\n";
}

static struct {
	char dir[512];    /* our own server's folder, "" when shared */
	char server[256]; /* KUBE_APISERVER */
	char kubeconfig[600];
	char token_file[600];
	char user_token_file[600];
	char ca_file[600];
} kube_env;

static void kube_env_stop(void)
{
	if (!kube_env.dir[0])
		return;
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "'%s/apiserver.sh' stop '%s' >/dev/null 2>&1", KUBE_SCRIPTS, kube_env.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "kube_env: stop failed\n");
	if (sg_test_failures == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", kube_env.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "kube_env: cannot remove %s\n", kube_env.dir);
	} else {
		fprintf(stderr, "kube_env: kept %s (apiserver.log)\n", kube_env.dir);
	}
	kube_env.dir[0] = 0;
}

static void kube_env_value(const char *line, const char *key, char *out, size_t cap)
{
	size_t n = strlen(key);
	if (strncmp(line, key, n) != 0 || line[n] != '=')
		return;
	const char *v = line + n + 1;
	size_t len = strcspn(v, "\r\n");
	if (len >= cap)
		len = 0; /* too long for us: treated as missing */
	memcpy(out, v, len);
	out[len] = 0;
}

static bool kube_env_read(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[1024];
	while (fgets(line, sizeof(line), f)) {
		kube_env_value(line, "KUBE_APISERVER", kube_env.server, sizeof(kube_env.server));
		kube_env_value(line, "KUBECONFIG", kube_env.kubeconfig, sizeof(kube_env.kubeconfig));
		kube_env_value(line, "KUBE_TOKEN_FILE", kube_env.token_file, sizeof(kube_env.token_file));
		kube_env_value(line, "KUBE_USER_TOKEN_FILE", kube_env.user_token_file, sizeof(kube_env.user_token_file));
		kube_env_value(line, "KUBE_CA_FILE", kube_env.ca_file, sizeof(kube_env.ca_file));
	}
	fclose(f);
	return kube_env.server[0] && kube_env.kubeconfig[0];
}

static bool kube_env_start(void)
{
	const char *shared = getenv("SIGNET_KUBE_ENV");
	if (shared && *shared)
		return kube_env_read(shared);
	const char *tmp = getenv("SIGNET_TEST_TMP");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(kube_env.dir, sizeof(kube_env.dir), "%s/kube-client.XXXXXX", tmp);
	if (!mkdtemp(kube_env.dir)) {
		kube_env.dir[0] = 0;
		return false;
	}
	atexit(kube_env_stop);
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "'%s/apiserver.sh' start '%s' >/dev/null", KUBE_SCRIPTS, kube_env.dir);
	if (system(cmd) != 0)
		return false;
	char env[600];
	snprintf(env, sizeof(env), "%s/env", kube_env.dir);
	return kube_env_read(env);
}

/* Restarts our private kube-apiserver (same port and data). */
static inline bool kube_env_restart_apiserver(void)
{
	if (!kube_env.dir[0])
		return false;
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "'%s/apiserver.sh' restart-apiserver '%s' >/dev/null 2>&1", KUBE_SCRIPTS,
	         kube_env.dir);
	return system(cmd) == 0;
}

/* A client on the admin kubeconfig with the given rate limit (qps < 0: off). */
static inline sg_kube *kube_env_client(double qps, int burst)
{
	sg_kube_config *cfg = NULL;
	if (sg_kube_config_from_kubeconfig(&cfg, kube_env.kubeconfig, NULL) != 0) {
		fprintf(stderr, "kube_env: kubeconfig: %s\n", sg_error_last()->msg);
		return NULL;
	}
	sg_kube_options o = {.qps = qps, .burst = burst};
	sg_kube *k = NULL;
	if (sg_kube_new(&k, &cfg, &o) != 0) {
		fprintf(stderr, "kube_env: client: %s\n", sg_error_last()->msg);
		return NULL;
	}
	return k;
}

/* A ConfigMap {name, namespace, data: {key: value}}; caller decrefs. */
static inline json_t *kube_env_configmap(const char *ns, const char *name, const char *key, const char *value)
{
	return json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap", "metadata",
	                 "name", name, "namespace", ns, "data", key, value);
}

/* ---- applying manifests ---- */

/* Sets (value) or removes (value NULL) label key of namespace name, by a
 * merge patch of the client's own field manager. */
static inline int kube_env_label_namespace(sg_kube *k, const char *name, const char *key, const char *value)
{
	sg_kube_ref ref = {.version = "v1", .resource = "namespaces", .name = name};
	json_t *patch = json_pack("{s:{s:{s:o}}}", "metadata", "labels", key, value ? json_string(value) : json_null());
	int rc = patch ? sg_kube_merge_patch(k, &ref, patch, NULL) : SG_EINTERNAL;
	json_decref(patch);
	return rc;
}

#define KUBE_ENV_APPLY_DEADLINE_MS 30000u
#define KUBE_ENV_MANIFEST_MAX (16u << 20)

/* Fills ref (pointing into buf and obj) from obj's apiVersion and kind;
 * false for a kind not in the table or a malformed object. */
static inline bool kube_env_ref_of(const json_t *obj, char *buf, size_t cap, sg_kube_ref *ref)
{
	/* The kinds our manifests and fixtures hold: the resource each is
	 * served as, and whether it lives in a namespace. Another kind is
	 * refused (a test that needs one adds its row). */
	static const struct {
		const char *kind, *resource;
		bool namespaced;
	} kinds[] = {
	    {"CustomResourceDefinition", "customresourcedefinitions", false},
	    {"Namespace", "namespaces", false},
	    {"ClusterRole", "clusterroles", false},
	    {"ClusterRoleBinding", "clusterrolebindings", false},
	    {"Role", "roles", true},
	    {"RoleBinding", "rolebindings", true},
	    {"ServiceAccount", "serviceaccounts", true},
	    {"CertificateRequestPolicy", "certificaterequestpolicies", false},
	    {"ExternalPolicyServer", "externalpolicyservers", false},
	    {"SignetIssuer", "signetissuers", true},
	    {"FlowSchema", "flowschemas", false},
	    {"PriorityLevelConfiguration", "prioritylevelconfigurations", false},
	    {"ValidatingWebhookConfiguration", "validatingwebhookconfigurations", false},
	};
	const char *api = json_string_value(json_object_get(obj, "apiVersion"));
	const char *kind = json_string_value(json_object_get(obj, "kind"));
	if (!api || !kind || !sg_kube_meta_str(obj, "name") || snprintf(buf, cap, "%s", api) >= (int)cap)
		return false;
	*ref = (sg_kube_ref){0};
	char *slash = strchr(buf, '/');
	if (slash) {
		*slash = 0;
		ref->group = buf;
		ref->version = slash + 1;
	} else {
		ref->version = buf; /* "v1": the core group */
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		if (strcmp(kinds[i].kind, kind) != 0)
			continue;
		ref->resource = kinds[i].resource;
		if (kinds[i].namespaced) {
			const char *ns = sg_kube_meta_str(obj, "namespace");
			ref->ns = ns ? ns : "default";
		}
		return true;
	}
	return false;
}

/* Whether CRD name is Established and its resource answers a list, within
 * the deadline (Unix ns of sg_now_ns). Established is what `kubectl wait
 * --for condition=established` waits for; the list shows the endpoint
 * really serves. */
static inline bool kube_env_crd_ready(sg_kube *k, const char *name, uint64_t deadline)
{
	sg_kube_ref ref = {.group = "apiextensions.k8s.io", .version = "v1", .resource = "customresourcedefinitions",
	                   .name = name};
	for (;;) {
		json_t *crd = NULL;
		bool established = false, served = false;
		if (sg_kube_get(k, &ref, &crd) == 0) {
			size_t i;
			json_t *c;
			json_array_foreach(json_object_get(json_object_get(crd, "status"), "conditions"), i, c)
			{
				const char *t = json_string_value(json_object_get(c, "type"));
				const char *st = json_string_value(json_object_get(c, "status"));
				if (t && st && strcmp(t, "Established") == 0 && strcmp(st, "True") == 0)
					established = true;
			}
		}
		if (established) {
			const json_t *spec = json_object_get(crd, "spec");
			const json_t *versions = json_object_get(spec, "versions");
			sg_kube_ref coll = {
			    .group = json_string_value(json_object_get(spec, "group")),
			    .version = json_string_value(json_object_get(json_array_get(versions, 0), "name")),
			    .resource = json_string_value(json_object_get(json_object_get(spec, "names"), "plural")),
			};
			sg_kube_list_opts lo = {.limit = 1};
			served = coll.group && coll.version && coll.resource && sg_kube_list(k, &coll, &lo, NULL) == 0;
		}
		json_decref(crd);
		if (served)
			return true;
		if (sg_now_ns() > deadline) {
			fprintf(stderr, "kube_env: CRD %s not %s within %u ms\n", name, established ? "served" : "Established",
			        KUBE_ENV_APPLY_DEADLINE_MS);
			return false;
		}
		sg_sleep_ms(50);
	}
}

/* Creates obj; when it exists already (the API server may be shared with
 * other tests, or kept from an earlier run), replaces it with obj, so what
 * the server holds is what the file says now and not an older revision.
 * A CRD is then waited for until it serves. */
static inline bool kube_env_apply_object(sg_kube *k, const json_t *obj, const char *what)
{
	char api[256];
	sg_kube_ref ref;
	if (!kube_env_ref_of(obj, api, sizeof(api), &ref)) {
		fprintf(stderr, "kube_env: %s: an object without apiVersion, kind or name, or of a kind not in "
		                "kube_env_ref_of's table\n", what);
		return false;
	}
	const char *name = sg_kube_meta_str(obj, "name");
	uint64_t deadline = sg_now_ns() + (uint64_t)KUBE_ENV_APPLY_DEADLINE_MS * 1000000u;
	sg_kube_ref one = ref;
	one.name = name;
	for (;;) {
		if (sg_now_ns() > deadline) {
			fprintf(stderr, "kube_env: %s: %s %s: still failing after %u ms: %s\n", what, ref.resource, name,
			        KUBE_ENV_APPLY_DEADLINE_MS, sg_error_last()->msg);
			return false;
		}
		if (sg_kube_create(k, &ref, obj, NULL) == 0)
			break;
		if (strcmp(sg_kube_last_status()->reason, "AlreadyExists") != 0) {
			fprintf(stderr, "kube_env: %s: create %s %s: %s\n", what, ref.resource, name, sg_error_last()->msg);
			return false;
		}
		json_t *live = NULL;
		if (sg_kube_get(k, &one, &live) != 0) {
			json_decref(live);
			sg_sleep_ms(50);
			continue; /* deleted in between: create it again */
		}
		json_t *body = json_deep_copy(obj);
		json_object_set(json_object_get(body, "metadata"), "resourceVersion",
		                json_object_get(json_object_get(live, "metadata"), "resourceVersion"));
		json_decref(live);
		int rc = sg_kube_update(k, &one, body, NULL);
		json_decref(body);
		if (rc == 0)
			break;
		if (sg_kube_last_status()->code != 409) { /* 409: written in between; read it again */
			fprintf(stderr, "kube_env: %s: replace %s %s: %s\n", what, ref.resource, name, sg_error_last()->msg);
			return false;
		}
	}
	if (strcmp(ref.resource, "customresourcedefinitions") == 0)
		return kube_env_crd_ready(k, name, deadline);
	return true;
}

/* Applies docs: one object, an array of objects, or a List (its items). */
static inline bool kube_env_apply_json(sg_kube *k, const json_t *docs, const char *what)
{
	const char *kind = json_string_value(json_object_get(docs, "kind"));
	if (kind && strlen(kind) > 4 && strcmp(kind + strlen(kind) - 4, "List") == 0)
		docs = json_object_get(docs, "items");
	if (json_is_object(docs))
		return kube_env_apply_object(k, docs, what);
	if (!json_is_array(docs) || json_array_size(docs) == 0) {
		fprintf(stderr, "kube_env: %s holds no objects\n", what);
		return false;
	}
	size_t i;
	json_t *obj;
	json_array_foreach(docs, i, obj)
	{
		if (!kube_env_apply_object(k, obj, what))
			return false;
	}
	return true;
}

/* Applies a JSON file (see kube_env_apply_json). */
static inline bool kube_env_apply_json_file(sg_kube *k, const char *path)
{
	json_error_t e;
	json_t *docs = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
	if (!docs) {
		fprintf(stderr, "kube_env: %s:%d: %s\n", path, e.line, e.text);
		return false;
	}
	bool ok = kube_env_apply_json(k, docs, path);
	json_decref(docs);
	return ok;
}

/* Applies every document of a YAML file, in order. The YAML is read by
 * Debian's python3-yaml (safe_load_all: plain data, no tags), which turns
 * the file into one JSON array; signet's own YAML reader (libyaml, in
 * kube/) is for kubeconfig files only, and a second reader here keeps the
 * manifests honest: what is tested is what any YAML tool makes of them.
 * Empty documents ("---" at the top) are skipped. */
static inline bool kube_env_apply_file(sg_kube *k, const char *path)
{
	if (strchr(path, '\'')) {
		fprintf(stderr, "kube_env: a quote in %s\n", path);
		return false;
	}
	char cmd[1400];
	if (snprintf(cmd, sizeof(cmd),
	             "/usr/bin/python3 -c 'import json, sys, yaml\n"
	             "with open(sys.argv[1]) as f:\n"
	             "    json.dump([d for d in yaml.safe_load_all(f) if d is not None], sys.stdout)' '%s'",
	             path) >= (int)sizeof(cmd))
		return false;
	FILE *p = popen(cmd, "r");
	if (!p) {
		perror("kube_env: popen python3");
		return false;
	}
	size_t cap = 1u << 16, len = 0;
	char *buf = malloc(cap);
	bool too_big = false;
	while (buf) {
		if (len == cap) {
			char *grown = cap < KUBE_ENV_MANIFEST_MAX ? realloc(buf, cap * 2) : NULL;
			if (!grown) {
				too_big = true;
				break;
			}
			buf = grown;
			cap *= 2;
		}
		size_t n = fread(buf + len, 1, cap - len, p);
		if (n == 0)
			break;
		len += n;
	}
	int status = pclose(p);
	if (!buf || too_big || status != 0) {
		fprintf(stderr, "kube_env: %s: python3 yaml -> json failed (status %d%s)\n", path, status,
		        too_big ? ", output too large" : "");
		free(buf);
		return false;
	}
	json_error_t e;
	json_t *docs = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);
	free(buf);
	if (!docs) {
		fprintf(stderr, "kube_env: %s: %s\n", path, e.text);
		return false;
	}
	bool ok = kube_env_apply_json(k, docs, path);
	json_decref(docs);
	return ok;
}

#endif
