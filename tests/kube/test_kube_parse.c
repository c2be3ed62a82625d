/*
 * sg_kube without a server: kubeconfig and in-cluster configuration, the
 * watch-stream parser and the Status parser on good and hostile input,
 * resource-reference checks, the error table, and the rate limiter.
 */
#include "sg_clock.h"
#include "sg_kube.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[512];

static void make_tmp(void)
{
	if (tmpdir[0])
		return;
	const char *t = getenv("SIGNET_TEST_TMP");
	snprintf(tmpdir, sizeof(tmpdir), "%s/kube-parse.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpdir))
		abort();
}

static void write_file(const char *name, const char *text, char *path, size_t cap)
{
	make_tmp();
	snprintf(path, cap, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	if (!f)
		abort();
	fputs(text, f);
	fclose(f);
}

/* "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" in base64 */
static const char pem_b64[] = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

static int from_text(sg_kube_config **c, const char *text, const char *ctx)
{
	return sg_kube_config_from_bytes(c, text, strlen(text), ctx, tmpdir);
}

static void t_kubeconfig_yaml(void)
{
	char text[2048];
	snprintf(text, sizeof(text),
	         "apiVersion: v1\nkind: Config\n"
	         "clusters:\n- name: c1\n  cluster:\n    server: https://10.0.0.1:6443/\n"
	         "    certificate-authority-data: %s\n"
	         "- name: c2\n  cluster:\n    server: https://example.test\n"
	         "users:\n- name: u1\n  user:\n    token: abc.def\n"
	         "contexts:\n- name: one\n  context: {cluster: c1, user: u1, namespace: team-a}\n"
	         "- name: two\n  context:\n    cluster: c2\n"
	         "current-context: one\n",
	         pem_b64);
	sg_kube_config *c = NULL;
	SG_CHECK_OK(from_text(&c, text, NULL));
	if (c) {
		SG_CHECK(strcmp(sg_kube_config_server(c), "https://10.0.0.1:6443") == 0);
		SG_CHECK(strcmp(sg_kube_config_namespace(c), "team-a") == 0);
	}
	sg_kube_config_free(c);
	c = NULL;
	SG_CHECK_OK(from_text(&c, text, "two"));
	if (c) {
		SG_CHECK(strcmp(sg_kube_config_server(c), "https://example.test") == 0);
		SG_CHECK(strcmp(sg_kube_config_namespace(c), "default") == 0);
	}
	sg_kube_config_free(c);
	SG_CHECK_RC(from_text(&c, text, "three"), SG_EINVAL);
	SG_CHECK_MSG("no contexts entry named \"three\"");
}

/* "-data" values as client-go reads them: line breaks (a YAML block
 * scalar) are skipped, anything else outside the alphabet is not. */
static void t_kubeconfig_base64_lines(void)
{
	char lines[256] = "", text[2048];
	for (size_t i = 0; i < strlen(pem_b64); i += 20)
		snprintf(lines + strlen(lines), sizeof(lines) - strlen(lines), "      %.20s\n", pem_b64 + i);
	snprintf(text, sizeof(text),
	         "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	         "clusters:\n- name: c\n  cluster:\n    server: https://h\n    certificate-authority-data: |\n%s",
	         lines);
	sg_kube_config *c = NULL;
	SG_CHECK_OK(from_text(&c, text, NULL));
	sg_kube_config_free(c);
}

static void t_kubeconfig_json_and_files(void)
{
	char ca[600], tok[600], text[2048];
	write_file("ca.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", ca, sizeof(ca));
	write_file("token", "  tok-123\n", tok, sizeof(tok));
	snprintf(text, sizeof(text),
	         "{\"current-context\":\"x\",\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\",\"user\":\"u\"}}],"
	         "\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"https://[::1]:6443\",\"certificate-authority\":"
	         "\"ca.crt\",\"insecure-skip-tls-verify\":false}}],"
	         "\"users\":[{\"name\":\"u\",\"user\":{\"tokenFile\":\"token\"}}]}");
	sg_kube_config *c = NULL;
	SG_CHECK_OK(from_text(&c, text, NULL)); /* relative names resolve against base_dir */
	sg_kube_config_free(c);

	char path[600];
	write_file("kubeconfig.json", text, path, sizeof(path));
	SG_CHECK_OK(sg_kube_config_from_kubeconfig(&c, path, NULL));
	sg_kube_config_free(c);
	setenv("KUBECONFIG", path, 1);
	SG_CHECK_OK(sg_kube_config_load(&c, NULL));
	sg_kube_config_free(c);
	unsetenv("KUBECONFIG");
	char missing[700];
	snprintf(missing, sizeof(missing), "%s/nope", tmpdir);
	SG_CHECK_RC(sg_kube_config_from_kubeconfig(&c, missing, NULL), SG_ENOTFOUND);
}

static void t_kubeconfig_refused(void)
{
	static const struct {
		const char *yaml;
		const char *msg;
	} bad[] = {
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\n",
	     "insecure-skip-tls-verify"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'http://h'}}]\n",
	     "https://"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
	     "users: [{name: u, user: {exec: {command: aws}}}]\n",
	     "user.exec is not supported"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
	     "users: [{name: u, user: {client-certificate-data: LS0t}}]\n",
	     "go together"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: '!!!'}}]\n",
	     "not valid base64"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: 'QR=='}}]\n",
	     "non-zero trailing bits"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: 'LS0t LS0t'}}]\n",
	     "outside the alphabet"},
	    {"current-context: x\ncurrent-context: y\n", "duplicate"},
	    {"- a\n- b\n", "not a mapping"},
	    {"a: [unclosed\n", "YAML error"},
	    {"contexts: []\n", "no current-context"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: /nonexistent/ca}}]\n",
	     "does not exist"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c, namespace: 'Bad/NS'}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://h'}}]\n",
	     "DNS label"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: [1]}}]\n", "not a string"},
	    /* found by fuzz_kubeconfig: the trailing '/' stripped, nothing was left */
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https:///'}}]\n",
	     "names no host"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https:///api'}}]\n",
	     "names no host"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://:6443'}}]\n",
	     "names no host"},
	    {"current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	     "clusters: [{name: c, cluster: {server: 'https://admin:pw@h:6443'}}]\n",
	     "user information"},
	};
	make_tmp();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_kube_config *c = NULL;
		int rc = from_text(&c, bad[i].yaml, NULL);
		SG_CHECK(rc < 0 && c == NULL);
		SG_CHECK_MSG(bad[i].msg);
	}
}

static void t_kubeconfig_billion_laughs(void)
{
	const char *bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	                   "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
	                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
	                   "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
	                   "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
	                   "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
	sg_kube_config *c = NULL;
	SG_CHECK_RC(sg_kube_config_from_bytes(&c, bomb, strlen(bomb), NULL, NULL), SG_EINVAL);
	SG_CHECK_MSG("too large or too deep");
	char deep[4096] = "";
	for (int i = 0; i < 200; i++)
		strcat(deep, "[");
	SG_CHECK_RC(sg_kube_config_from_bytes(&c, deep, strlen(deep), NULL, NULL), SG_EINVAL);
}

/* Whether the last error's message is printable ASCII. */
static bool message_printable(void)
{
	for (const char *p = sg_error_last()->msg; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			return false;
	return true;
}

/* Names and paths a message quotes come from the file: a terminal escape
 * in them is not passed on (found by fuzz_kubeconfig); a FIFO named as a
 * file is refused at once rather than hanging the open until a writer
 * comes. */
static void t_kubeconfig_hostile_names(void)
{
	static const char *const bad[] = {
	    "current-context: \"a\\e[31m\"\ncontexts: [{name: x, context: {cluster: c}}]\n",
	    "current-context: \"x\\e]0;t\\a\"\ncontexts: [{name: \"x\\e]0;t\\a\", context: {user: u}}]\n",
	    "current-context: x\ncontexts: [{name: x, context: {cluster: \"c\\r\\n\"}}]\n",
	    "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	    "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: \"/nonexistent/\\e[2J\"}}]\n",
	    "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
	    "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
	    "users: [{name: u, user: {tokenFile: \"/nonexistent/\\t\\x7f\"}}]\n",
	};
	make_tmp();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_kube_config *c = NULL;
		int rc = from_text(&c, bad[i], NULL);
		SG_CHECK(rc < 0 && c == NULL);
		SG_CHECK(message_printable());
		if (!message_printable())
			fprintf(stderr, "  case %zu: %s\n", i, sg_error_last()->msg);
	}
	char fifo[600];
	snprintf(fifo, sizeof(fifo), "%s/ca-fifo", tmpdir);
	SG_CHECK(mkfifo(fifo, 0600) == 0);
	char text[1024];
	snprintf(text, sizeof(text),
	         "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	         "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: '%s'}}]\n",
	         fifo);
	sg_kube_config *c = NULL;
	SG_CHECK_RC(from_text(&c, text, NULL), SG_EINVAL);
	SG_CHECK_MSG("is not a regular file");
	unlink(fifo);
}

static void t_in_cluster(void)
{
	char tok[600], ca[600], ns[600];
	write_file("sa-token", "eyJhbGciOi.x.y\n", tok, sizeof(tok));
	write_file("sa-ca.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", ca, sizeof(ca));
	write_file("sa-namespace", "signet-system", ns, sizeof(ns));
	sg_kube_incluster p = {tok, ca, ns, "10.96.0.1", "443"};
	sg_kube_config *c = NULL;
	SG_CHECK_OK(sg_kube_config_in_cluster(&c, &p));
	if (c) {
		SG_CHECK(strcmp(sg_kube_config_server(c), "https://10.96.0.1:443") == 0);
		SG_CHECK(strcmp(sg_kube_config_namespace(c), "signet-system") == 0);
	}
	sg_kube_config_free(c);
	p.host = "fd00::1";
	SG_CHECK_OK(sg_kube_config_in_cluster(&c, &p));
	if (c)
		SG_CHECK(strcmp(sg_kube_config_server(c), "https://[fd00::1]:443") == 0);
	sg_kube_config_free(c);
	p.host = "evil/host";
	SG_CHECK_RC(sg_kube_config_in_cluster(&c, &p), SG_EINVAL);
	char empty[600];
	write_file("sa-empty", "\n", empty, sizeof(empty));
	p = (sg_kube_incluster){empty, ca, ns, "10.96.0.1", "443"};
	SG_CHECK_RC(sg_kube_config_in_cluster(&c, &p), SG_EINVAL);
	unsetenv("KUBERNETES_SERVICE_HOST");
	p = (sg_kube_incluster){tok, ca, ns, NULL, NULL};
	SG_CHECK_RC(sg_kube_config_in_cluster(&c, &p), SG_ENOTFOUND);
}

/* ---- watch parser ---- */

struct seen {
	int n;
	sg_kube_event_type types[16];
	char names[16][32];
	int stop_at; /* return 1 at this event (1-based), 0: never */
};

static int record(sg_kube_event_type t, json_t *obj, void *arg)
{
	struct seen *s = arg;
	if (s->n < 16) {
		s->types[s->n] = t;
		const char *name = sg_kube_meta_str(obj, "name");
		snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name ? name : "");
	}
	s->n++;
	return s->stop_at && s->n == s->stop_at ? 1 : 0;
}

static const char stream[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"}}}\n"
    "\r\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\",\"resourceVersion\":\"2\"}}}\r\n"
    "   \n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"3\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"c\",\"resourceVersion\":\"4\"}}}\n";

static void t_watch_parser_chunks(void)
{
	for (size_t step = 1; step <= sizeof(stream); step += 7) {
		struct seen s = {0};
		sg_kube_watch_parser *p = NULL;
		SG_CHECK_OK(sg_kube_watch_parser_new(&p, 0, record, &s));
		int rc = 0;
		for (size_t off = 0; off < sizeof(stream) - 1 && rc == 0; off += step) {
			size_t n = sizeof(stream) - 1 - off < step ? sizeof(stream) - 1 - off : step;
			rc = sg_kube_watch_parser_feed(p, stream + off, n);
		}
		SG_CHECK_OK(rc);
		SG_CHECK_OK(sg_kube_watch_parser_finish(p));
		SG_CHECK(s.n == 4);
		SG_CHECK(s.types[0] == SG_KUBE_ADDED && strcmp(s.names[0], "a") == 0);
		SG_CHECK(s.types[1] == SG_KUBE_MODIFIED && strcmp(s.names[1], "b") == 0);
		SG_CHECK(s.types[2] == SG_KUBE_BOOKMARK);
		SG_CHECK(s.types[3] == SG_KUBE_DELETED && strcmp(s.names[3], "c") == 0);
		sg_kube_watch_parser_free(p);
	}
}

static int feed_all(const char *text, size_t max_line, struct seen *s)
{
	sg_kube_watch_parser *p = NULL;
	if (sg_kube_watch_parser_new(&p, max_line, record, s) != 0)
		return -100;
	int rc = sg_kube_watch_parser_feed(p, text, strlen(text));
	if (rc == 0)
		rc = sg_kube_watch_parser_finish(p);
	sg_kube_watch_parser_free(p);
	return rc;
}

static void t_watch_parser_hostile(void)
{
	struct seen s = {0};
	SG_CHECK_RC(feed_all("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\","
	                     "\"message\":\"too old resource version: 1 (200)\",\"reason\":\"Expired\",\"code\":410}}\n",
	                     0, &s),
	            SG_EBUSY);
	SG_CHECK(sg_kube_last_status()->code == 410);
	SG_CHECK(strcmp(sg_kube_last_status()->reason, "Expired") == 0);
	SG_CHECK_MSG("too old resource version");
	SG_CHECK_RC(feed_all("{\"type\":\"ERROR\",\"object\":{\"code\":403,\"reason\":\"Forbidden\"}}\n", 0, &s),
	            SG_EAUTH);
	SG_CHECK_RC(feed_all("{\"type\":\"ERROR\",\"object\":{}}\n", 0, &s), SG_EBUSY); /* 500 */
	SG_CHECK_RC(feed_all("{\"type\":\"NOPE\",\"object\":{}}\n", 0, &s), SG_EPROTO);
	SG_CHECK_MSG("unknown");
	SG_CHECK_RC(feed_all("{\"type\":\"ADDED\",\"object\":[]}\n", 0, &s), SG_EPROTO);
	SG_CHECK_RC(feed_all("{\"type\":7,\"object\":{}}\n", 0, &s), SG_EPROTO);
	SG_CHECK_RC(feed_all("[1,2]\n", 0, &s), SG_EPROTO);
	SG_CHECK_RC(feed_all("{\"type\":\"ADDED\",\"object\":{}\n", 0, &s), SG_EPROTO); /* bad JSON */
	SG_CHECK_RC(feed_all("{\"type\":\"ADDED\",\"object\":{},\"type\":\"DELETED\"}\n", 0, &s), SG_EPROTO);
	SG_CHECK_RC(feed_all("{\"type\":\"ADDED\",\"object\":{}}\n{\"type\":\"ADD", 0, &s), SG_EPROTO);
	SG_CHECK_MSG("truncated");
	SG_CHECK_RC(feed_all("{\"type\":\"ADDED\",\"object\":{\"x\":1e999999}}\n", 0, &s), SG_EPROTO);

	/* A line over the bound fails, whether it arrives whole or in pieces. */
	char big[300];
	memset(big, 'x', sizeof(big) - 2);
	big[sizeof(big) - 2] = '\n';
	big[sizeof(big) - 1] = 0;
	SG_CHECK_RC(feed_all(big, 128, &s), SG_EPROTO);
	SG_CHECK_MSG("longer than 128");
	sg_kube_watch_parser *p = NULL;
	SG_CHECK_OK(sg_kube_watch_parser_new(&p, 128, record, &s));
	int rc = 0;
	for (int i = 0; i < 1000 && rc == 0; i++)
		rc = sg_kube_watch_parser_feed(p, "xxxxxxxx", 8);
	SG_CHECK(rc == SG_EPROTO);
	SG_CHECK_RC(sg_kube_watch_parser_feed(p, "\n", 1), SG_EPROTO); /* stays failed */
	sg_kube_watch_parser_free(p);

	/* The callback's stop value ends the feed; nothing after it is seen. */
	struct seen st = {.stop_at = 2};
	SG_CHECK(feed_all(stream, 0, &st) == 1);
	SG_CHECK(st.n == 2);
}

static void t_status_parse(void)
{
	sg_kube_status st;
	const char *conflict = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
	                       "\"message\":\"Operation cannot be fulfilled on configmaps \\\"x\\\": the object has "
	                       "been modified\\n\\u001b[31m\",\"reason\":\"Conflict\",\"code\":409}";
	SG_CHECK_OK(sg_kube_status_parse(&st, conflict, strlen(conflict)));
	SG_CHECK(st.code == 409 && strcmp(st.reason, "Conflict") == 0);
	SG_CHECK(strstr(st.message, "the object has been modified??[31m") != NULL); /* controls replaced */
	const char *odd = "{\"kind\":\"Status\",\"code\":\"409\",\"reason\":[1],\"message\":7}";
	SG_CHECK_OK(sg_kube_status_parse(&st, odd, strlen(odd)));
	SG_CHECK(st.code == 0 && st.reason[0] == 0 && st.message[0] == 0 && st.retry_after == 0);
	/* apimachinery's NewTooManyRequests: details.retryAfterSeconds, bounded to a day. */
	const char *busy = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"TooManyRequests\","
	                   "\"details\":{\"retryAfterSeconds\":3},\"code\":429}";
	SG_CHECK_OK(sg_kube_status_parse(&st, busy, strlen(busy)));
	SG_CHECK(st.code == 429 && st.retry_after == 3);
	const char *forever = "{\"code\":429,\"details\":{\"retryAfterSeconds\":9999999999}}";
	SG_CHECK_OK(sg_kube_status_parse(&st, forever, strlen(forever)));
	SG_CHECK(st.retry_after == 86400);
	const char *bad_ra = "{\"code\":429,\"details\":{\"retryAfterSeconds\":-5}}";
	SG_CHECK_OK(sg_kube_status_parse(&st, bad_ra, strlen(bad_ra)));
	SG_CHECK(st.retry_after == 0);
	const char *huge = "{\"code\":99999999999999}";
	SG_CHECK_OK(sg_kube_status_parse(&st, huge, strlen(huge)));
	SG_CHECK(st.code == 0);
	SG_CHECK_RC(sg_kube_status_parse(&st, "{\"kind\":\"Pod\"}", 14), SG_EINVAL);
	SG_CHECK_RC(sg_kube_status_parse(&st, "<html>", 6), SG_EINVAL);
	SG_CHECK_RC(sg_kube_status_parse(&st, "", 0), SG_EINVAL);
	char longmsg[2000];
	snprintf(longmsg, sizeof(longmsg), "{\"code\":500,\"message\":\"%01500d\"}", 0);
	SG_CHECK_OK(sg_kube_status_parse(&st, longmsg, strlen(longmsg)));
	SG_CHECK(strlen(st.message) == SG_KUBE_STATUS_MESSAGE_MAX - 1);
}

static void t_error_table(void)
{
	SG_CHECK(sg_kube_error_of_http(200) == SG_OK);
	SG_CHECK(sg_kube_error_of_http(201) == SG_OK);
	SG_CHECK(sg_kube_error_of_http(400) == SG_EINVAL);
	SG_CHECK(sg_kube_error_of_http(422) == SG_EINVAL);
	SG_CHECK(sg_kube_error_of_http(401) == SG_EAUTH);
	SG_CHECK(sg_kube_error_of_http(403) == SG_EAUTH);
	SG_CHECK(sg_kube_error_of_http(404) == SG_ENOTFOUND);
	SG_CHECK(sg_kube_error_of_http(409) == SG_EBUSY);
	SG_CHECK(sg_kube_error_of_http(410) == SG_EBUSY);
	SG_CHECK(sg_kube_error_of_http(429) == SG_EBUSY);
	SG_CHECK(sg_kube_error_of_http(503) == SG_EBUSY);
	SG_CHECK(sg_kube_error_of_http(504) == SG_ETIMEOUT);
	SG_CHECK(sg_kube_error_of_http(302) == SG_EPROTO);
}

static sg_kube *offline_client(void)
{
	const char *text = "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	                   "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n";
	sg_kube_config *c = NULL;
	sg_kube *k = NULL;
	if (sg_kube_config_from_bytes(&c, text, strlen(text), NULL, NULL) != 0 || sg_kube_new(&k, &c, NULL) != 0)
		abort();
	return k;
}

/* sg_kube_adopt_fields merges copies: the object it was given (a
 * shared informer copy, in the operator) is the same after it, whatever
 * the request's fate, with three entries merged (the third merge
 * descends into what the second attached). */
static void t_adopt_leaves_live(void)
{
	sg_kube *k = offline_client();
	json_t *live = json_loads(
	    "{\"metadata\": {\"name\": \"s\", \"resourceVersion\": \"7\", \"managedFields\": ["
	    "{\"manager\": \"signet\", \"operation\": \"Update\", \"apiVersion\": \"v1\", \"fieldsType\": \"FieldsV1\","
	    " \"fieldsV1\": {\"f:metadata\": {\"f:labels\": {\"f:a\": {}}}}},"
	    "{\"manager\": \"signet-operator\", \"operation\": \"Update\", \"apiVersion\": \"v1\","
	    " \"fieldsType\": \"FieldsV1\", \"fieldsV1\": {\"f:data\": {\"f:tls.crt\": {}}}},"
	    "{\"manager\": \"signet-operator\", \"operation\": \"Apply\", \"apiVersion\": \"v1\","
	    " \"fieldsType\": \"FieldsV1\", \"fieldsV1\": {\"f:data\": {\"f:ca.crt\": {}}}},"
	    "{\"manager\": \"x\", \"operation\": \"Update\", \"apiVersion\": \"v1beta1\", \"fieldsType\": \"FieldsV1\","
	    " \"fieldsV1\": {\"f:data\": {\"f:other\": {}}}}]}}",
	    0, NULL);
	json_t *before = json_deep_copy(live);
	SG_CHECK(live && before);
	sg_kube_ref r = {.version = "v1", .resource = "secrets", .ns = "default", .name = "s"};
	const char *from[] = {"signet", "signet-operator"};
	/* Nothing listens on port 1: the request fails after the merge. */
	SG_CHECK_RC(sg_kube_adopt_fields(k, &r, live, from, 2, "signet-operator", NULL), SG_EBUSY);
	SG_CHECK(json_equal(live, before));
	/* Nothing of from's: no request, no error. */
	const char *none[] = {"nobody"};
	SG_CHECK_OK(sg_kube_adopt_fields(k, &r, live, none, 1, "signet-operator", NULL));
	/* Entries of the wrong shape are nobody's to adopt (no request: the
	 * offline client would fail one): managedFields not an array, a
	 * manager not a string, fieldsV1 not an object, a subresource's
	 * update, no apiVersion. */
	static const char *const odd[] = {
	    "\"managedFields\": {\"manager\": \"signet\"}",
	    "\"managedFields\": [{\"manager\": 7, \"operation\": \"Update\", \"apiVersion\": \"v1\", \"fieldsV1\": "
	    "{}}]",
	    "\"managedFields\": [{\"manager\": \"signet\", \"operation\": \"Update\", \"apiVersion\": \"v1\", "
	    "\"fieldsV1\": \"f:data\"}]",
	    "\"managedFields\": [{\"manager\": \"signet\", \"operation\": \"Update\", \"apiVersion\": \"v1\", "
	    "\"subresource\": \"status\", \"fieldsV1\": {}}]",
	    "\"managedFields\": [{\"manager\": \"signet\", \"operation\": \"Update\", \"fieldsV1\": {}}]",
	    "\"managedFields\": [null, 3, \"x\"]",
	};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		char text[512];
		snprintf(text, sizeof(text), "{\"metadata\": {\"name\": \"s\", \"resourceVersion\": \"7\", %s}}",
		         odd[i]);
		json_t *o = json_loads(text, 0, NULL);
		SG_CHECK(o != NULL);
		SG_CHECK_OK(sg_kube_adopt_fields(k, &r, o, from, 2, "signet-operator", NULL));
		json_decref(o);
	}
	json_decref(live);
	json_decref(before);
	sg_kube_free(k);
}

static void t_refs_checked(void)
{
	sg_kube *k = offline_client();
	json_t *o = NULL;
	sg_kube_ref r = {.version = "v1", .resource = "configmaps", .ns = "default", .name = "../secrets/x"};
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	SG_CHECK_MSG("forbidden byte");
	r.name = "..";
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	r.name = "x";
	r.ns = "a/b";
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	r.ns = "default";
	r.resource = "ConfigMaps";
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	r.resource = "configmaps";
	r.group = "apps/../..";
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	r.group = NULL;
	r.version = NULL;
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	r.version = "v1";
	char longname[400];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	r.name = longname;
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EINVAL);
	r.name = "x";
	json_t *body = json_object();
	SG_CHECK_RC(sg_kube_apply(k, &r, body, "", false, NULL), SG_EINVAL);
	SG_CHECK_RC(sg_kube_apply(k, &r, body, "bad\nmanager", false, NULL), SG_EINVAL);
	SG_CHECK_RC(sg_kube_create(k, &r, body, NULL), SG_EINVAL); /* create takes no name */
	json_decref(body);
	/* Nothing listens on port 1: a retryable transport error, no crash. */
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EBUSY);
	SG_CHECK(o == NULL);
	SG_CHECK(sg_kube_last_status()->code == 0);
	sg_kube_free(k);

	/* The idle-handle pool: its bound, and a client at it. */
	const char *text = "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
	                   "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n";
	sg_kube_config *c = NULL;
	SG_CHECK_OK(sg_kube_config_from_bytes(&c, text, strlen(text), NULL, NULL));
	SG_CHECK_RC(sg_kube_new(&k, &c, &(sg_kube_options){.idle_handles = SG_KUBE_IDLE_HANDLES_MAX + 1}), SG_EINVAL);
	SG_CHECK_MSG("idle_handles is above 256");
	SG_CHECK(c == NULL && k == NULL); /* consumed all the same */
	SG_CHECK_OK(sg_kube_config_from_bytes(&c, text, strlen(text), NULL, NULL));
	SG_CHECK_OK(sg_kube_new(&k, &c, &(sg_kube_options){.idle_handles = SG_KUBE_IDLE_HANDLES_MAX}));
	SG_CHECK_RC(sg_kube_get(k, &r, &o), SG_EBUSY);
	sg_kube_free(k);
}

static void t_ratelimit(void)
{
	sg_kube_ratelimit *r = NULL;
	SG_CHECK_OK(sg_kube_ratelimit_new(&r, 0, 0));
	SG_CHECK(r == NULL); /* disabled */
	sg_kube_ratelimit_wait(r);
	SG_CHECK_RC(sg_kube_ratelimit_new(&r, 10, 0), SG_EINVAL);

	/* Burst 10: ten at once, then 40 more at 100/s = 0.4 s. */
	SG_CHECK_OK(sg_kube_ratelimit_new(&r, 100, 10));
	uint64_t t0 = sg_now_ns();
	for (int i = 0; i < 10; i++)
		sg_kube_ratelimit_wait(r);
	uint64_t t1 = sg_now_ns();
	for (int i = 0; i < 40; i++)
		sg_kube_ratelimit_wait(r);
	uint64_t t2 = sg_now_ns();
	double burst_s = (double)(t1 - t0) / 1e9, rest_s = (double)(t2 - t1) / 1e9;
	printf("ratelimit: burst %.3f s, 40 at 100 qps %.3f s\n", burst_s, rest_s);
	SG_CHECK(burst_s < 0.05);
	/* Not faster than 100/s; a thread woken late (a loaded machine under
	 * TSan) adds its lateness at the last wait, which no earlier slack
	 * absorbs: 2 s still tells 100/s from a pace ten times slower. */
	SG_CHECK(rest_s > 0.37 && rest_s < 2.0);
	sg_kube_ratelimit_free(r);
}

/* Every string under a Secret's data and stringData is zeroed in place,
 * its length kept; the rest of it, and any other kind, untouched. */
static bool streq(const char *a, const char *b)
{
	return a && strcmp(a, b) == 0;
}

static bool zeroed(const json_t *s)
{
	const char *v = json_string_value(s);
	for (size_t i = 0; v && i < json_string_length(s); i++)
		if (v[i])
			return false;
	return v != NULL;
}

static void t_secret_wipe(void)
{
	const char *text = "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"k\"},"
	                   "\"type\":\"kubernetes.io/tls\",\"data\":{\"tls.key\":\"c2VjcmV0\",\"tls.crt\":\"Y3J0\","
	                   "\"n\":7},\"stringData\":{\"token\":\"a\\u0000b\"}}";
	json_t *sec = json_loads(text, JSON_ALLOW_NUL, NULL);
	SG_CHECK(sec != NULL);
	json_t *data = json_object_get(sec, "data"), *sd = json_object_get(sec, "stringData");
	json_t *key = json_incref(json_object_get(data, "tls.key")), *tok = json_incref(json_object_get(sd, "token"));
	sg_kube_secret_wipe(sec);
	SG_CHECK(zeroed(key) && json_string_length(key) == 8);
	SG_CHECK(zeroed(json_object_get(data, "tls.crt")));
	SG_CHECK(zeroed(tok) && json_string_length(tok) == 3); /* past the NUL too */
	SG_CHECK(json_integer_value(json_object_get(data, "n")) == 7);
	SG_CHECK(streq(json_string_value(json_object_get(sec, "type")), "kubernetes.io/tls"));
	SG_CHECK(streq(sg_kube_meta_str(sec, "name"), "k"));
	json_decref(key);
	json_decref(tok);
	json_decref(sec);

	/* A LIST's item has no kind or apiVersion: wiped too, kubectl's
	 * record of the applied object (which repeats the data) with it. */
	const char *listed = "{\"metadata\":{\"name\":\"k\",\"annotations\":{\"kubectl.kubernetes.io/"
	                     "last-applied-configuration\":\"{\\\"data\\\":{\\\"tls.key\\\":\\\"c2Vj\\\"}}\","
	                     "\"other\":\"kept\"}},\"type\":\"kubernetes.io/tls\",\"data\":{\"tls.key\":\"c2VjcmV0\"}}";
	sec = json_loads(listed, 0, NULL);
	SG_CHECK(sec != NULL);
	json_t *ann = json_object_get(json_object_get(sec, "metadata"), "annotations");
	sg_kube_secret_wipe(sec);
	SG_CHECK(zeroed(json_object_get(json_object_get(sec, "data"), "tls.key")));
	SG_CHECK(zeroed(json_object_get(ann, "kubectl.kubernetes.io/last-applied-configuration")));
	SG_CHECK(streq(json_string_value(json_object_get(ann, "other")), "kept"));
	json_decref(sec);

	/* Not a Secret: a ConfigMap, a Secret of another apiVersion, a kind
	 * that is not a string; data that is not an object. */
	const char *others[] = {
	    "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"data\":{\"a\":\"b\"}}",
	    "{\"kind\":\"ConfigMap\",\"data\":{\"a\":\"b\"}}",
	    "{\"apiVersion\":\"example.com/v1\",\"kind\":\"Secret\",\"data\":{\"a\":\"b\"}}",
	    "{\"kind\":7,\"data\":{\"a\":\"b\"}}",
	    "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"data\":[\"b\"]}",
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		json_t *o = json_loads(others[i], 0, NULL);
		SG_CHECK(o != NULL);
		sg_kube_secret_wipe(o);
		json_t *d = json_object_get(o, "data");
		SG_CHECK(
		    streq(json_string_value(json_is_array(d) ? json_array_get(d, 0) : json_object_get(d, "a")), "b"));
		json_decref(o);
	}
	sg_kube_secret_wipe(NULL);
}

static void cleanup(void)
{
	if (tmpdir[0]) {
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", tmpdir);
	}
}

static void t_zz_cleanup(void)
{
	cleanup();
}

SG_TEST_MAIN(SG_TEST(t_kubeconfig_yaml), SG_TEST(t_kubeconfig_base64_lines), SG_TEST(t_kubeconfig_json_and_files),
             SG_TEST(t_kubeconfig_refused), SG_TEST(t_kubeconfig_billion_laughs), SG_TEST(t_kubeconfig_hostile_names),
             SG_TEST(t_in_cluster), SG_TEST(t_watch_parser_chunks), SG_TEST(t_watch_parser_hostile),
             SG_TEST(t_status_parse), SG_TEST(t_error_table), SG_TEST(t_refs_checked), SG_TEST(t_ratelimit),
             SG_TEST(t_secret_wipe), SG_TEST(t_adopt_leaves_live), SG_TEST(t_zz_cleanup))
