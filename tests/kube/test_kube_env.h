/*
 * test_kube_env: the API server a kube test talks to. Either the file named
 * by $SIGNET_KUBE_ENV (an apiserver.sh env file of a server someone else
 * runs), or a private server: `apiserver.sh start` in a fresh folder under
 * $SIGNET_TEST_TMP, stopped and removed at exit (kept on failure).
 *
 * kube_env_start() fills `kube_env` and returns false when no server can
 * be had (the caller then fails: these tests exist to run against one).
 */
#ifndef TEST_KUBE_ENV_H
#define TEST_KUBE_ENV_H

#include "sg_kube.h"
#include "sg_test.h"

#include <stdbool.h>
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
 * TSan cannot pair with the reader's accesses. Used only by TSan builds;
 * SG_API exports it from the (hidden-by-default) test executable, which is
 * how libtsan finds it. */
SG_API const char *__tsan_default_suppressions(void);
SG_API const char *__tsan_default_suppressions(void)
{
	return "race:json_incref\nrace:json_decref\ncalled_from_lib:libjansson.so\n";
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

#endif
