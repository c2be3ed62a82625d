/*
 * sg_kube_config: where the API server is and how we prove who we are.
 *
 * Two sources. A kubeconfig file (the format of `kubectl config view`;
 * k8s.io/client-go/tools/clientcmd/api/v1 types) is YAML, read with libyaml (kube/yaml/sg_kube_yaml.h)
 * into a jansson tree (every scalar a string; JSON is YAML, so a JSON
 * kubeconfig goes the same way), then resolved like clientcmd does:
 * current-context -> context{cluster, user, namespace} -> clusters[] and
 * users[] entries by name. Only the subset signet needs is accepted; a field
 * that would change how we authenticate and that we do not implement (exec,
 * auth-provider, username/password, insecure-skip-tls-verify: true) is an
 * error rather than silently ignored, so a misconfiguration fails closed.
 *
 * The in-cluster source is the service-account volume plus the
 * KUBERNETES_SERVICE_HOST/PORT environment (client-go rest.InClusterConfig).
 *
 * Hostile input: the file is bounded (SG_KUBE_CONFIG_MAX), the YAML tree is
 * bounded in depth and in node visits (aliases are followed, so a "billion
 * laughs" document hits the visit budget instead of our memory), and
 * duplicate keys are refused. A name or path from the file that a message
 * quotes is made printable first (messages reach terminals, logs and
 * statuses), and a file it names must be a regular file, opened so that a
 * FIFO cannot hang the reader.
 */
#include "sg_base64.h"
#include "sg_guard.h"
#include "sg_kube_impl.h"
#include "sg_kube_yaml.h"
#include "sg_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define YAML_DEPTH_MAX 32
#define YAML_VISITS_MAX 20000
#define PEM_MAX (256u << 10)

static const char sa_dir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

/* ---- files ---- */

static void close_fdp(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

/* A path for a message: it comes from a kubeconfig, so it is made
 * printable and cut. */
#define SHOWN_PATH_MAX 256

int sg_kube_read_file(const char *path, size_t max, uint8_t **out, size_t *len)
{
	char shown[SHOWN_PATH_MAX];
	sg_log_printable(shown, sizeof(shown), path, strlen(path));
	/* O_NONBLOCK: a FIFO named here must not hang the open (it is then
	 * refused as not a regular file); it changes nothing for the read of
	 * a regular file. */
	int fd SG_CLEANUP(close_fdp) = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
		SG_BAIL(SG_ENOTFOUND, "kube: %s does not exist", shown);
	SG_ENSURE(fd >= 0, SG_EINVAL, "kube: cannot open %s: %s", shown, strerror(errno));
	struct stat st;
	SG_ENSURE(fstat(fd, &st) == 0 && S_ISREG(st.st_mode), SG_EINVAL, "kube: %s is not a regular file", shown);
	SG_ENSURE((uint64_t)st.st_size <= max, SG_EINVAL, "kube: %s is larger than %zu bytes", shown, max);
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	SG_ENSURE(buf, SG_EINTERNAL, "kube: out of memory");
	size_t n = 0;
	for (;;) {
		/* Read one byte past the size: the file may have grown. */
		ssize_t r = read(fd, buf + n, (size_t)st.st_size + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n > (size_t)st.st_size)
			break;
	}
	if (n > (size_t)st.st_size) {
		free(buf);
		SG_BAIL(SG_EINVAL, "kube: %s changed while being read", shown);
	}
	buf[n] = 0;
	*out = buf;
	*len = n;
	return SG_OK;
}

int sg_kube_read_token(const char *path, sg_secret **out)
{
	uint8_t *buf;
	size_t n;
	SG_TRY(sg_kube_read_file(path, SG_SECRET_MAX, &buf, &n));
	size_t b = 0, e = n;
	while (b < e && (buf[b] == ' ' || buf[b] == '\t' || buf[b] == '\n' || buf[b] == '\r'))
		b++;
	while (e > b && (buf[e - 1] == ' ' || buf[e - 1] == '\t' || buf[e - 1] == '\n' || buf[e - 1] == '\r'))
		e--;
	int rc = SG_EINVAL;
	bool ok = e > b;
	for (size_t i = b; i < e && ok; i++)
		ok = buf[i] > 0x20 && buf[i] < 0x7f; /* a header value: no spaces, no controls */
	if (!ok) {
		char shown[SHOWN_PATH_MAX];
		sg_log_printable(shown, sizeof(shown), path, strlen(path));
		rc = sg_error_set(SG_EINVAL, "kube: token file %s is empty or holds non-printable bytes", shown);
	} else
		rc = sg_secret_new(out, buf + b, e - b);
	sg_wipe(buf, n);
	free(buf);
	return rc;
}

/* ---- YAML to jansson ---- */

/* Parses YAML (or JSON) bytes into a tree of strings, arrays and objects
 * (sg_kube_yaml: every scalar a string, as client-go's types read them). */
static int yaml_to_json(const void *data, size_t len, json_t **out)
{
	sg_kube_yaml_options o = {.what = "kubeconfig",
	                          .max_bytes = SG_KUBE_CONFIG_MAX,
	                          .max_depth = YAML_DEPTH_MAX,
	                          .max_nodes = YAML_VISITS_MAX};
	return sg_kube_yaml_to_json(out, data, len, &o);
}

/* ---- kubeconfig resolution ---- */

/* A member that must be a string when present. */
static int str_of(const json_t *o, const char *k, const char *where, const char **out)
{
	json_t *v = json_object_get(o, k);
	*out = NULL;
	if (!v || json_is_null(v))
		return SG_OK;
	SG_ENSURE(json_is_string(v), SG_EINVAL, "kubeconfig: %s.%s is not a string", where, k);
	*out = json_string_value(v);
	if (**out == 0)
		*out = NULL; /* clientcmd treats "" as unset */
	return SG_OK;
}

/* The entry {name: <name>, <field>: {...}} of list <list>. */
static int named(const json_t *root, const char *list, const char *field, const char *name, json_t **out)
{
	json_t *a = json_object_get(root, list);
	SG_ENSURE(!a || json_is_array(a), SG_EINVAL, "kubeconfig: %s is not a list", list);
	size_t i;
	json_t *e;
	json_array_foreach(a, i, e)
	{
		json_t *n = json_object_get(e, "name");
		if (json_is_string(n) && strcmp(json_string_value(n), name) == 0) {
			json_t *v = json_object_get(e, field);
			if (!json_is_object(v)) {
				char shown[65];
				sg_log_printable(shown, sizeof(shown), name, strlen(name));
				SG_BAIL(SG_EINVAL, "kubeconfig: %s \"%s\" has no %s mapping", list, shown, field);
			}
			*out = v;
			return SG_OK;
		}
	}
	char shown[65];
	sg_log_printable(shown, sizeof(shown), name, strlen(name));
	SG_BAIL(SG_EINVAL, "kubeconfig: no %s entry named \"%s\"", list, shown);
}

/* A "<field>-data" value: base64 (RFC 4648 §4, padded) as client-go reads
 * it, with Go's base64.StdEncoding, which skips CR and LF, so a YAML block
 * scalar broken into lines decodes too; any other byte outside the
 * alphabet, and an empty value, is an error. The bytes may be a private
 * key (client-key-data), so the buffer is wiped when we give up. */
static int b64_decode(const char *in, const char *what, uint8_t **out, size_t *outlen)
{
	size_t n = strlen(in);
	SG_ENSURE(n <= PEM_MAX * 4 / 3 + 4, SG_EINVAL, "kubeconfig: %s is too large", what);
	size_t cap = n / 4 * 3 + 3;
	uint8_t *buf = malloc(cap);
	SG_ENSURE(buf, SG_EINTERNAL, "kubeconfig: out of memory");
	sg_b64_decoder d;
	sg_b64_decoder_init(&d, SG_B64_STD, buf, cap);
	int rc = SG_OK;
	for (size_t i = 0; rc == SG_OK && i < n;) {
		size_t line = strcspn(in + i, "\r\n");
		rc = sg_b64_decoder_feed(&d, (const uint8_t *)in + i, line);
		i += line + (i + line < n); /* and the line break */
	}
	size_t len = 0;
	if (rc == SG_OK)
		rc = sg_b64_decoder_finish(&d, &len);
	if (rc == SG_OK && len == 0)
		rc = sg_error_set(SG_EINVAL, "it is empty");
	if (rc != SG_OK) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		sg_wipe(buf, cap);
		free(buf);
		SG_BAIL(SG_EINVAL, "kubeconfig: %s is not valid base64: %s", what, why);
	}
	*out = buf;
	*outlen = len;
	return SG_OK;
}

/* base_dir/rel unless rel is absolute. */
static int resolve(const char *base_dir, const char *rel, char **out)
{
	size_t need = (base_dir ? strlen(base_dir) : 0) + strlen(rel) + 2;
	char *p = malloc(need);
	SG_ENSURE(p, SG_EINTERNAL, "kubeconfig: out of memory");
	if (rel[0] == '/' || !base_dir || !*base_dir)
		snprintf(p, need, "%s", rel);
	else
		snprintf(p, need, "%s/%s", base_dir, rel);
	*out = p;
	return SG_OK;
}

/* The bytes of "<field>-data" (base64) or of the file named by "<field>". */
static int data_or_file(const json_t *o, const char *where, const char *field, const char *base_dir, uint8_t **out,
                        size_t *len)
{
	char dfield[64];
	snprintf(dfield, sizeof(dfield), "%s-data", field);
	const char *data, *file;
	SG_TRY(str_of(o, dfield, where, &data));
	SG_TRY(str_of(o, field, where, &file));
	*out = NULL;
	*len = 0;
	if (data)
		return b64_decode(data, dfield, out, len);
	if (!file)
		return SG_OK;
	char *path SG_AUTOFREE = NULL;
	SG_TRY(resolve(base_dir, file, &path));
	return sg_kube_read_file(path, PEM_MAX, out, len);
}

static int set_server(sg_kube_config *c, const char *server)
{
	SG_ENSURE(server, SG_EINVAL, "kubeconfig: the cluster has no server");
	SG_ENSURE(strncmp(server, "https://", 8) == 0, SG_EINVAL, "kubeconfig: server must be an https:// URL");
	size_t n = strlen(server);
	SG_ENSURE(n > 8 && n < 512, SG_EINVAL, "kubeconfig: server URL length is out of range");
	for (size_t i = 0; i < n; i++)
		SG_ENSURE(server[i] > 0x20 && server[i] < 0x7f && server[i] != '?' && server[i] != '#', SG_EINVAL,
		          "kubeconfig: server URL holds a forbidden byte");
	while (n > 8 && server[n - 1] == '/')
		n--;
	/* The authority: a host (a bare "https:///" would leave none), and no
	 * user information, which would be credentials we do not use. */
	const char *auth = server + 8;
	size_t alen = strcspn(auth, "/");
	alen = alen < n - 8 ? alen : n - 8;
	SG_ENSURE(alen > 0 && auth[0] != ':', SG_EINVAL, "kubeconfig: server URL names no host");
	SG_ENSURE(!memchr(auth, '@', alen), SG_EINVAL, "kubeconfig: server URL holds user information");
	c->server = strndup(server, n);
	SG_ENSURE(c->server, SG_EINTERNAL, "kubeconfig: out of memory");
	return SG_OK;
}

static int resolve_cluster(sg_kube_config *c, const json_t *cl, const char *base_dir)
{
	const char *server, *insecure, *proxy;
	SG_TRY(str_of(cl, "server", "cluster", &server));
	SG_TRY(str_of(cl, "insecure-skip-tls-verify", "cluster", &insecure));
	SG_TRY(str_of(cl, "proxy-url", "cluster", &proxy));
	SG_ENSURE(!insecure || strcmp(insecure, "false") == 0, SG_EINVAL,
	          "kubeconfig: insecure-skip-tls-verify is not supported (TLS is always verified)");
	SG_ENSURE(!proxy, SG_EINVAL, "kubeconfig: proxy-url is not supported");
	SG_TRY(set_server(c, server));
	SG_TRY(data_or_file(cl, "cluster", "certificate-authority", base_dir, &c->ca, &c->ca_len));
	return SG_OK;
}

static int resolve_user(sg_kube_config *c, const json_t *u, const char *base_dir)
{
	static const char *const unsupported[] = {"exec", "auth-provider", "username", "password", "as",
	                                          "as-groups", "as-user-extra"};
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
		SG_ENSURE(!json_object_get(u, unsupported[i]), SG_EINVAL, "kubeconfig: user.%s is not supported",
		          unsupported[i]);
	const char *token, *token_file;
	SG_TRY(str_of(u, "token", "user", &token));
	SG_TRY(str_of(u, "tokenFile", "user", &token_file));
	if (token) {
		SG_ENSURE(strlen(token) <= SG_SECRET_MAX, SG_EINVAL, "kubeconfig: user.token is too long");
		for (const char *p = token; *p; p++)
			SG_ENSURE(*p > 0x20 && *p < 0x7f, SG_EINVAL, "kubeconfig: user.token holds a forbidden byte");
		SG_TRY(sg_secret_new(&c->token, token, strlen(token)));
	} else if (token_file) {
		SG_TRY(resolve(base_dir, token_file, &c->token_file));
		sg_secret *probe = NULL;
		SG_TRY(sg_kube_read_token(c->token_file, &probe)); /* fail now, not at the first call */
		sg_secret_free(probe);
	}
	SG_TRY(data_or_file(u, "user", "client-certificate", base_dir, &c->cert, &c->cert_len));
	uint8_t *key = NULL;
	size_t key_len = 0;
	SG_TRY(data_or_file(u, "user", "client-key", base_dir, &key, &key_len));
	int rc = SG_OK;
	if (key) {
		if (key_len > SG_SECRET_MAX)
			rc = sg_error_set(SG_EINVAL, "kubeconfig: client key larger than %d bytes", SG_SECRET_MAX);
		else
			rc = sg_secret_new(&c->key, key, key_len);
		sg_wipe(key, key_len);
		free(key);
	}
	SG_TRY(rc);
	SG_ENSURE(!c->cert == !c->key, SG_EINVAL, "kubeconfig: client-certificate and client-key go together");
	return SG_OK;
}

static int config_alloc(sg_kube_config **out)
{
	*out = calloc(1, sizeof(**out));
	SG_ENSURE(*out, SG_EINTERNAL, "kube: out of memory");
	return SG_OK;
}

static int set_ns(sg_kube_config *c, const char *ns, size_t n)
{
	if (!ns || n == 0) {
		ns = "default";
		n = 7;
	}
	SG_ENSURE(n <= 63, SG_EINVAL, "kube: namespace longer than 63 bytes");
	for (size_t i = 0; i < n; i++)
		SG_ENSURE((ns[i] >= 'a' && ns[i] <= 'z') || (ns[i] >= '0' && ns[i] <= '9') || ns[i] == '-', SG_EINVAL,
		          "kube: namespace is not a DNS label");
	c->ns = strndup(ns, n);
	SG_ENSURE(c->ns, SG_EINTERNAL, "kube: out of memory");
	return SG_OK;
}

static int from_tree(sg_kube_config *c, const json_t *root, const char *context, const char *base_dir)
{
	const char *cur;
	SG_TRY(str_of(root, "current-context", "kubeconfig", &cur));
	if (!context)
		context = cur;
	SG_ENSURE(context, SG_EINVAL, "kubeconfig: no current-context");
	json_t *ctx, *cl, *u = NULL;
	SG_TRY(named(root, "contexts", "context", context, &ctx));
	const char *cluster, *user, *ns;
	SG_TRY(str_of(ctx, "cluster", "context", &cluster));
	SG_TRY(str_of(ctx, "user", "context", &user));
	SG_TRY(str_of(ctx, "namespace", "context", &ns));
	if (!cluster) {
		char shown[65];
		sg_log_printable(shown, sizeof(shown), context, strlen(context));
		SG_BAIL(SG_EINVAL, "kubeconfig: context \"%s\" names no cluster", shown);
	}
	SG_TRY(named(root, "clusters", "cluster", cluster, &cl));
	SG_TRY(resolve_cluster(c, cl, base_dir));
	if (user) {
		SG_TRY(named(root, "users", "user", user, &u));
		SG_TRY(resolve_user(c, u, base_dir));
	}
	return set_ns(c, ns, ns ? strlen(ns) : 0);
}

int sg_kube_config_from_bytes(sg_kube_config **out, const void *data, size_t len, const char *context,
                              const char *base_dir)
{
	*out = NULL;
	json_t *root SG_CLEANUP(json_decrefp) = NULL;
	SG_TRY(yaml_to_json(data, len, &root));
	sg_kube_config *c;
	SG_TRY(config_alloc(&c));
	int rc = from_tree(c, root, context, base_dir);
	if (rc < 0) {
		sg_kube_config_free(c);
		return rc;
	}
	*out = c;
	return SG_OK;
}

int sg_kube_config_from_kubeconfig(sg_kube_config **out, const char *path, const char *context)
{
	*out = NULL;
	char home_path[1024];
	char first[1024];
	if (!path || !*path) {
		const char *env = getenv("KUBECONFIG");
		if (env && *env) {
			/* A list a:b:c merges in clientcmd; we take the first file. */
			size_t n = strcspn(env, ":");
			SG_ENSURE(n < sizeof(first), SG_EINVAL, "kubeconfig: $KUBECONFIG is too long");
			memcpy(first, env, n);
			first[n] = 0;
			path = first;
		} else {
			const char *home = getenv("HOME");
			SG_ENSURE(home && *home, SG_ENOTFOUND, "kubeconfig: no path, $KUBECONFIG or $HOME");
			snprintf(home_path, sizeof(home_path), "%s/.kube/config", home);
			path = home_path;
		}
	}
	uint8_t *buf SG_AUTOFREE = NULL;
	size_t len;
	SG_TRY(sg_kube_read_file(path, SG_KUBE_CONFIG_MAX, &buf, &len));
	char dir[1024];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	else
		dir[0] = 0;
	int rc = sg_kube_config_from_bytes(out, buf, len, context, dir);
	sg_wipe(buf, len); /* it may hold a token or a key */
	if (rc < 0) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		return sg_error_set(rc, "%s (%s)", why, path);
	}
	return SG_OK;
}

int sg_kube_config_in_cluster(sg_kube_config **out, const sg_kube_incluster *paths)
{
	*out = NULL;
	sg_kube_incluster p = paths ? *paths : (sg_kube_incluster){0};
	char tok[256], ca[256], nsp[256];
	snprintf(tok, sizeof(tok), "%s/token", sa_dir);
	snprintf(ca, sizeof(ca), "%s/ca.crt", sa_dir);
	snprintf(nsp, sizeof(nsp), "%s/namespace", sa_dir);
	if (!p.token_path)
		p.token_path = tok;
	if (!p.ca_path)
		p.ca_path = ca;
	if (!p.namespace_path)
		p.namespace_path = nsp;
	if (!p.host)
		p.host = getenv("KUBERNETES_SERVICE_HOST");
	if (!p.port)
		p.port = getenv("KUBERNETES_SERVICE_PORT");
	SG_ENSURE(p.host && *p.host && p.port && *p.port, SG_ENOTFOUND,
	          "kube: not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset)");
	SG_ENSURE(strlen(p.host) < 256 && strspn(p.host, "0123456789abcdefABCDEF.:-") == strlen(p.host) &&
	              strlen(p.port) < 6 && strspn(p.port, "0123456789") == strlen(p.port),
	          SG_EINVAL, "kube: KUBERNETES_SERVICE_HOST/PORT are malformed");
	sg_kube_config *c;
	SG_TRY(config_alloc(&c));
	int rc;
	char url[300];
	/* An IPv6 literal needs brackets (net.JoinHostPort). */
	snprintf(url, sizeof(url), strchr(p.host, ':') ? "https://[%s]:%s" : "https://%s:%s", p.host, p.port);
	SG_TRY_GOTO(rc, set_server(c, url), fail);
	SG_TRY_GOTO(rc, sg_kube_read_file(p.ca_path, PEM_MAX, &c->ca, &c->ca_len), fail);
	c->token_file = strdup(p.token_path);
	SG_ENSURE_GOTO(rc, c->token_file, fail, SG_EINTERNAL, "kube: out of memory");
	sg_secret *probe = NULL;
	SG_TRY_GOTO(rc, sg_kube_read_token(c->token_file, &probe), fail);
	sg_secret_free(probe);
	uint8_t *ns = NULL;
	size_t ns_len = 0;
	rc = sg_kube_read_file(p.namespace_path, 256, &ns, &ns_len);
	if (rc == SG_OK) {
		while (ns_len && (ns[ns_len - 1] == '\n' || ns[ns_len - 1] == ' '))
			ns_len--;
		rc = set_ns(c, (const char *)ns, ns_len);
		free(ns);
	} else if (rc == SG_ENOTFOUND) {
		rc = set_ns(c, NULL, 0);
	}
	if (rc < 0)
		goto fail;
	*out = c;
	return SG_OK;
fail:
	sg_kube_config_free(c);
	return rc;
}

int sg_kube_config_load(sg_kube_config **out, const char *kubeconfig)
{
	if (kubeconfig && *kubeconfig)
		return sg_kube_config_from_kubeconfig(out, kubeconfig, NULL);
	const char *env = getenv("KUBECONFIG");
	if (env && *env)
		return sg_kube_config_from_kubeconfig(out, NULL, NULL);
	int rc = sg_kube_config_in_cluster(out, NULL);
	if (rc != SG_ENOTFOUND)
		return rc;
	return sg_kube_config_from_kubeconfig(out, NULL, NULL);
}

const char *sg_kube_config_server(const sg_kube_config *c)
{
	return c->server;
}

const char *sg_kube_config_namespace(const sg_kube_config *c)
{
	return c->ns ? c->ns : "default";
}

void sg_kube_config_free(sg_kube_config *c)
{
	if (!c)
		return;
	free(c->server);
	free(c->ns);
	free(c->ca);
	free(c->cert);
	sg_secret_free(c->key);
	sg_secret_free(c->token);
	free(c->token_file);
	free(c);
}
