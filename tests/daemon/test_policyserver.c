/*
 * Tests for daemon/sg_policyserver.c, the "external-policy-servers"
 * approver plugin, against real gRPC servers signet did not write:
 * policy_server.py beside this file, on Debian's python3-grpcio (run with
 * /usr/bin/python3, whatever python3 comes first on PATH), which parses
 * our PolicyRequest with Python's protobuf and answers APPROVED, DENIED,
 * ERROR, a response without result, a failed status, raw bytes, or
 * nothing before the deadline, as the CertificateRequest's name asks;
 * plaintext and TLS.
 *
 * Also: the configuration parser (every refusal names its entry), a
 * policy's values (the plugin's check(): the reason a policy is NotReady),
 * the policy's name sent along, a server that is down (connection
 * refused), concurrent evaluations from several threads on the shared
 * channels (the approver has several workers), and the counters and
 * metrics.
 *
 * The invariant under every case: nothing but a clean, explicit APPROVED
 * from every listed server evaluates to "not denied" with SG_OK; an empty
 * response (proto3: result unset) is no answer.
 */
#include "sg_policyserver.h"

#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_file.h"
#include "sg_metrics.h"
#include "sg_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "policy_server_fx.h"

/* A port nothing listens on: bound and never listening, so a connection
 * is refused; *fd holds it until the caller closes it (closed, the port
 * could become any listener's, the test's own policy servers included). */
static int dead_port(int *fd)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int port = 0;
	if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	*fd = s;
	return port;
}

/* ---- fixtures --------------------------------------------------------------- */

static const char CSR_TEXT[] = "-----BEGIN CERTIFICATE REQUEST-----\nMIIBAzCBqwIBADAAMFkw\n"
                               "-----END CERTIFICATE REQUEST-----\n";

static json_t *b64_csr(void)
{
	char buf[256];
	if (sg_b64_encode(SG_B64_STD, (const uint8_t *)CSR_TEXT, strlen(CSR_TEXT), buf, sizeof(buf)) != 0)
		abort();
	return json_string(buf);
}

/* A CertificateRequest named name (its name picks the servers' answer). */
static json_t *cr_named(const char *name)
{
	return json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:o, s:{s:s}}}", "apiVersion", "cert-manager.io/v1", "kind",
	                 "CertificateRequest", "metadata", "name", name, "namespace", "default", "spec", "request",
	                 b64_csr(), "issuerRef", "name", "ca");
}

/* What policy_server.py's EXPECTED holds (keep the two in sync). */
static json_t *cr_full(void)
{
	return json_pack("{s:s, s:s,"
	                 " s:{s:s, s:s, s:s, s:{s:s, s:s}, s:{s:s}},"
	                 " s:{s:o, s:{s:s, s:s, s:s}, s:b, s:s, s:[s,s], s:s, s:s, s:[s,s], s:{s:[s,s], s:[]}}}",
	                 "apiVersion", "cert-manager.io/v1", "kind", "CertificateRequest", "metadata", "name",
	                 "check-fields", "namespace", "shop", "uid", "3f1c9a52-8f7e-4c55-9c55-1d2e3f4a5b6c", "labels",
	                 "tier", "web", "app", "shop", "annotations", "note", "h\xc3\xa9llo \xe2\x9c\x93", "spec",
	                 "request", b64_csr(), "issuerRef", "name", "mesh-ca", "kind", "ClusterIssuer", "group",
	                 "cert-manager.io", "isCA", 1, "duration", "2160h0m0s", "usages", "digital signature",
	                 "server auth", "username", "system:serviceaccount:shop:web", "uid", "u-42", "groups",
	                 "system:authenticated", "system:serviceaccounts", "extra", "scopes", "read", "write", "empty");
}

static json_t *values_of(const char *servers)
{
	return json_pack("{s:s}", "servers", servers);
}

static sg_policyserver *ps_new(const char *spec, uint64_t timeout_ms)
{
	sg_policyserver *ps = NULL;
	sg_policyserver_options o = {.servers = spec, .timeout_ms = timeout_ms};
	SG_CHECK_OK(sg_policyserver_new(&ps, &o));
	return ps;
}

/* The servers a and b of policy_server.py, plaintext. */
static sg_policyserver *ps_ab(uint64_t timeout_ms)
{
	char spec[128];
	snprintf(spec, sizeof(spec), "a=127.0.0.1:%d,b=127.0.0.1:%d", srv.a, srv.b);
	return ps_new(spec, timeout_ms);
}

typedef struct outcome {
	int rc;
	bool denied;
	char *message;
	char detail[SG_ERROR_MSG_MAX];
	uint64_t ms;
} outcome;

static outcome eval(sg_policyserver *ps, const char *servers, const char *name)
{
	json_t *v = values_of(servers), *cr = cr_named(name);
	outcome o = {0};
	sg_error_clear();
	uint64_t t0 = sg_now_ns();
	o.rc = sg_policyserver_evaluate(ps, "test-policy", v, NULL, cr, &o.denied, &o.message);
	o.ms = (sg_now_ns() - t0) / 1000000u;
	snprintf(o.detail, sizeof(o.detail), "%s", sg_error_last()->msg);
	json_decref(v);
	json_decref(cr);
	return o;
}

/* An evaluation that must fail with code and a detail holding msg: never
 * an approval, never a denial. */
static void want_error(outcome o, int code, const char *msg)
{
	SG_CHECK(o.rc == code);
	SG_CHECK(!o.denied && o.message == NULL);
	if (o.rc != code || !strstr(o.detail, msg))
		fprintf(stderr, "  got rc %d (%s) \"%s\", want %d with \"%s\"\n", o.rc, sg_error_name(o.rc), o.detail,
		        code, msg);
	SG_CHECK(strstr(o.detail, msg) != NULL);
	free(o.message);
}

static void want_denied(outcome o, const char *message)
{
	SG_CHECK_RC(o.rc, SG_OK);
	SG_CHECK(o.denied);
	SG_CHECK(o.message && strcmp(o.message, message) == 0);
	if (!o.message || strcmp(o.message, message) != 0)
		fprintf(stderr, "  got %s, want %s (%s)\n", o.message ? o.message : "(null)", message, o.detail);
	free(o.message);
}

static void want_approved(outcome o)
{
	SG_CHECK_RC(o.rc, SG_OK);
	SG_CHECK(!o.denied && o.message == NULL);
	if (o.rc != SG_OK || o.denied)
		fprintf(stderr, "  got rc %d \"%s\" denied %d %s\n", o.rc, o.detail, o.denied,
		        o.message ? o.message : "");
	free(o.message);
}

static sg_policyserver_stats stats(sg_policyserver *ps, size_t i)
{
	sg_policyserver_stats s;
	SG_CHECK_OK(sg_policyserver_stats_get(ps, i, &s));
	return s;
}

/* ---- configuration ---------------------------------------------------------- */

static void t_config_good(void)
{
	sg_policyserver *ps = ps_new("a=127.0.0.1:1,b-2=[::1]:65535,c=policy.policy-system.svc:8080", 0);
	SG_CHECK(ps && sg_policyserver_count(ps) == 3);
	if (ps) {
		sg_policyserver_stats s = stats(ps, 1);
		SG_CHECK(strcmp(s.name, "b-2") == 0 && strcmp(s.target, "[::1]:65535") == 0 && !s.tls);
		s = stats(ps, 2);
		SG_CHECK(strcmp(s.target, "policy.policy-system.svc:8080") == 0);
		SG_CHECK_RC(sg_policyserver_stats_get(ps, 3, &s), SG_EINVAL);
		sg_approver_plugin p = sg_policyserver_plugin(ps);
		SG_CHECK(strcmp(p.name, SG_POLICYSERVER_PLUGIN) == 0 && p.check == sg_policyserver_check &&
		         p.evaluate == sg_policyserver_evaluate && p.arg == ps);
	}
	sg_policyserver_free(ps);
	sg_policyserver_free(NULL);

	if (!server())
		return;
	char spec[1200];
	snprintf(spec, sizeof(spec), "t=127.0.0.1:%d;ca=%s;server-name=policy.test", srv.tls, srv.ca);
	ps = ps_new(spec, 0);
	SG_CHECK(ps && stats(ps, 0).tls);
	sg_policyserver_free(ps);
	/* options in either order */
	snprintf(spec, sizeof(spec), "t=127.0.0.1:%d;server-name=policy.test;ca=%s", srv.tls, srv.ca);
	ps = ps_new(spec, 0);
	sg_policyserver_free(ps);

	/* 16 servers: the limit */
	char many[1024] = "";
	for (int i = 0; i < SG_POLICYSERVER_MAX; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%ss%d=127.0.0.1:%d", i ? "," : "", i,
		         1000 + i);
	ps = ps_new(many, 0);
	SG_CHECK(ps && sg_policyserver_count(ps) == SG_POLICYSERVER_MAX);
	sg_policyserver_free(ps);
}

static void refused_config(const char *spec, uint64_t timeout_ms, int code, const char *msg)
{
	sg_policyserver *ps = (sg_policyserver *)&srv; /* must be reset */
	sg_policyserver_options o = {.servers = spec, .timeout_ms = timeout_ms};
	int rc = sg_policyserver_new(&ps, &o);
	SG_CHECK(rc == code && ps == NULL);
	SG_CHECK(strstr(sg_error_last()->msg, msg) != NULL);
	if (rc != code || !strstr(sg_error_last()->msg, msg))
		fprintf(stderr, "  spec \"%.80s\": rc %d \"%s\", want %d with \"%s\"\n", spec ? spec : "(null)", rc,
		        sg_error_last()->msg, code, msg);
	if (rc == SG_OK)
		sg_policyserver_free(ps);
}

static void t_config_bad(void)
{
	static const struct {
		const char *spec;
		const char *msg;
	} cases[] = {
	    {"", "external-policy-servers: no servers"},
	    {"a", "entry 1 (\"a\"): want name=host:port"},
	    {"A=h:1", "entry 1 (\"A=h:1\"): the name is not a DNS label"},
	    {"-a=h:1", "the name is not a DNS label"},
	    {"=h:1", "the name is not a DNS label"},
	    {"a=h:1,a=h:2", "entry 2 (a): the name is used by entry 1 too"},
	    {"a=h:0", "entry 1 (a): port must be 1..65535"},
	    {"a=h:65536", "port must be 1..65535"},
	    {"a=h:080", "port must be 1..65535"},
	    {"a=h:123456", "port must be 1..65535"},
	    {"a=h:+80", "port is not a decimal number"},
	    {"a=h:", "port must be 1..65535"},
	    {"a=h", "want host:port"},
	    {"a=:80", "no host"},
	    {"a=Host:80", "host is not a lower-case DNS name"},
	    {"a=h_x:80", "host is not a lower-case DNS name"},
	    {"a=::1:80", "an IPv6 address goes in brackets"},
	    {"a=[::1:80", "'[' without ']'"},
	    {"a=[::1]80", "want [IPv6]:port"},
	    {"a=[zz]:80", "bad IPv6 address"},
	    {"a=[]:80", "bad IPv6 address"},
	    {"a=300.1.1.1:80", "bad IPv4 address"},
	    {"a=h:1,", "entry 2 (\"\"): empty entry"},
	    {",a=h:1", "entry 1 (\"\"): empty entry"},
	    {"a=h:1,,b=h:2", "entry 2 (\"\"): empty entry"},
	    {"a=h:1;", "entry 1 (a): option \"\": want key=value"},
	    {"a=h:1;ca=", "option \"ca\": want key=value"},
	    {"a=h:1;ca", "option \"ca\": want key=value"},
	    {"a=h:1;tls=on", "unknown option \"tls\" (want ca= or server-name=)"},
	    {"a=h:1;server-name=x.test", "server-name= needs ca= (TLS)"},
	    {"a=h:1 ", "port is not a decimal number"},
	    {" a=h:1", "the name is not a DNS label"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		refused_config(cases[i].spec, 0, SG_EINVAL, cases[i].msg);
	refused_config("a=h:1", SG_POLICYSERVER_TIMEOUT_MAX_MS + 1, SG_EINVAL, "a timeout of 300001 ms");

	char many[1024] = "";
	for (int i = 0; i <= SG_POLICYSERVER_MAX; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%ss%d=h:1", i ? "," : "", i);
	refused_config(many, 0, SG_EINVAL, "more than 16 servers");

	refused_config("a=h:1;ca=/nonexistent/roots.pem", 0, SG_ENOTFOUND, "entry 1 (a): ");
	if (!server())
		return;
	char path[600], spec[1400];
	snprintf(path, sizeof(path), "%s/not-pem.txt", srv.dir);
	FILE *f = fopen(path, "w");
	SG_CHECK(f != NULL);
	if (f) {
		fputs("this is not a certificate\n", f);
		fclose(f);
	}
	snprintf(spec, sizeof(spec), "a=h:1;ca=%s", path);
	refused_config(spec, 0, SG_EINVAL, "entry 1 (a): ");
	refused_config(spec, 0, SG_EINVAL, "holds no PEM certificate");
	snprintf(spec, sizeof(spec), "a=h:1;ca=%s;ca=%s", srv.ca, srv.ca);
	refused_config(spec, 0, SG_EINVAL, "ca= given twice");
	snprintf(spec, sizeof(spec), "a=h:1;ca=%s;server-name=Bad", srv.ca);
	refused_config(spec, 0, SG_EINVAL, "server-name is not a lower-case DNS name");
	snprintf(spec, sizeof(spec), "a=h:1;ca=%s;server-name=x.test;server-name=y.test", srv.ca);
	refused_config(spec, 0, SG_EINVAL, "server-name= given twice");
}

/* ---- a policy's values ------------------------------------------------------ */

/* A condition message must be UTF-8 without control characters. */
static bool clean_text(const char *s)
{
	json_t *j = json_string(s); /* NULL unless UTF-8 */
	json_decref(j);
	for (const char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return false;
	return j != NULL;
}

static void values_refused(sg_policyserver *ps, json_t *v, const char *msg)
{
	/* the plugin's check(): false, the reason for the NotReady condition,
	 * the thread's detail untouched */
	sg_approver_plugin p = sg_policyserver_plugin(ps);
	sg_error_set(SG_EBUSY, "sentinel");
	char *why = (char *)"x";
	SG_CHECK(!p.check(p.arg, v, &why));
	SG_CHECK(why && strstr(why, msg) && strncmp(why, "values.", 7) == 0 && clean_text(why));
	if (!why || !strstr(why, msg))
		fprintf(stderr, "  check: \"%s\", want \"%s\"\n", why ? why : "(null)", msg);
	SG_CHECK(sg_error_last()->code == SG_EBUSY && strcmp(sg_error_last()->msg, "sentinel") == 0);
	free(why);

	SG_CHECK_RC(sg_policyserver_check_values(ps, v), SG_EINVAL);
	SG_CHECK_MSG("plugin external-policy-servers: values.");
	SG_CHECK_MSG(msg);
	/* and evaluation refuses the same, without calling anyone */
	json_t *cr = cr_named("approve-values");
	bool denied = true;
	char *m = (char *)"x";
	SG_CHECK_RC(sg_policyserver_evaluate(ps, "p", v, NULL, cr, &denied, &m), SG_EINVAL);
	SG_CHECK(!denied && m == NULL);
	SG_CHECK_MSG("plugin external-policy-servers: values.");
	SG_CHECK_MSG(msg);
	json_decref(cr);
	json_decref(v);
}

static void t_values(void)
{
	sg_policyserver *ps = ps_new("a=127.0.0.1:1,b=127.0.0.1:2", 0);
	if (!ps)
		return;
	values_refused(ps, NULL, "values.servers is required (no values)");
	values_refused(ps, json_object(), "values.servers is required");
	values_refused(ps, json_pack("{s:i}", "servers", 1), "values.servers is not a string");
	values_refused(ps, json_pack("{s:s, s:b}", "servers", "a", "strict", 1), "values.strict is not a string");
	values_refused(ps, json_pack("{s:s}", "servers", ""), "values.servers lists no server");
	values_refused(ps, json_pack("{s:s}", "servers", "  "), "values.servers lists no server");
	values_refused(ps, json_pack("{s:s}", "servers", "a,,b"), "values.servers: item 2 is empty");
	values_refused(ps, json_pack("{s:s}", "servers", "a,"), "values.servers: item 2 is empty");
	values_refused(ps, json_pack("{s:s}", "servers", "c"), "values.servers: \"c\" is not a configured server");
	values_refused(ps, json_pack("{s:s}", "servers", "A"), "\"A\" is not a configured server");
	values_refused(ps, json_pack("{s:s}", "servers", "a, b ,a"), "values.servers: a is listed twice");
	/* the policy's text in a reason: controls blanked, cut at a character */
	values_refused(ps, json_pack("{s:s}", "servers", "a,b\nc"),
	               "values.servers: \"b c\" is not a configured server");
	char name[2 * 40 + 1] = "";
	for (int i = 0; i < 40; i++)
		strcat(name, "\xc3\xa9"); /* 80 bytes of U+00E9; the excerpt is 63 */
	values_refused(ps, json_pack("{s:s}", "servers", name), "is not a configured server");
	char key[2 * 40 + 1];
	snprintf(key, sizeof(key), "%s", name);
	values_refused(ps, json_pack("{s:s, s:i}", "servers", "a", key, 1), "is not a string");
	json_t *ok = json_pack("{s:s, s:s}", "servers", " b , a ", "team", "payments");
	SG_CHECK_OK(sg_policyserver_check_values(ps, ok));
	sg_approver_plugin p = sg_policyserver_plugin(ps);
	char *why = (char *)"x";
	SG_CHECK(p.check(p.arg, ok, &why) && why == NULL);
	json_decref(ok);
	SG_CHECK(stats(ps, 0).unavailable == 0 && stats(ps, 1).unavailable == 0); /* nobody was called */
	sg_policyserver_free(ps);
}

/* ---- answers ---------------------------------------------------------------- */

static void t_approved(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_approved(eval(ps, "a", "approve-1"));
	want_approved(eval(ps, "a,b", "approve-2"));
	want_approved(eval(ps, "b, a", "approve-3"));
	SG_CHECK(stats(ps, 0).approved == 3 && stats(ps, 1).approved == 2);
	/* through the approver's plugin row */
	sg_approver_plugin p = sg_policyserver_plugin(ps);
	json_t *v = values_of("a"), *cr = cr_named("approve-row");
	bool denied = true;
	char *m = NULL;
	SG_CHECK_OK(p.evaluate(p.arg, "row-policy", v, NULL, cr, &denied, &m));
	SG_CHECK(!denied && !m);
	json_decref(v);
	json_decref(cr);
	sg_policyserver_free(ps);
}

static void t_denied(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_denied(eval(ps, "a", "deny-1"), "external policy server a: A says no to deny-1");
	want_denied(eval(ps, "b", "deny-2"), "external policy server b: B says no to deny-2");
	/* control characters of a reason are shown as spaces */
	want_denied(eval(ps, "a", "ctrl-1"), "external policy server a: line one line two [31m red");
	SG_CHECK(stats(ps, 0).denied == 2 && stats(ps, 1).denied == 1);
	sg_policyserver_free(ps);
}

/* In the listed order; the first denial ends the evaluation. */
static void t_order(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_denied(eval(ps, "a,b", "a-deny-1"), "external policy server a: A denies");
	SG_CHECK(stats(ps, 0).denied == 1);
	SG_CHECK(stats(ps, 1).approved == 0 && stats(ps, 1).denied == 0); /* b was not asked */
	want_denied(eval(ps, "a,b", "b-deny-1"), "external policy server b: B denies");
	SG_CHECK(stats(ps, 0).approved == 1 && stats(ps, 1).denied == 1);
	want_denied(eval(ps, "b,a", "a-deny-2"), "external policy server a: A denies");
	SG_CHECK(stats(ps, 1).approved == 1 && stats(ps, 0).denied == 2);
	/* an error after an approval: still no approval */
	want_error(eval(ps, "a,b", "error-1"), SG_EBUSY, "external policy server a: backend down");
	SG_CHECK(stats(ps, 0).errors == 1 && stats(ps, 1).errors == 0);
	sg_policyserver_free(ps);
}

static void t_error(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_error(eval(ps, "b", "error-1"), SG_EBUSY, "external policy server b: backend down");
	want_error(eval(ps, "a", "status-1"), SG_EPROTO, "external policy server a: PERMISSION_DENIED: not for you");
	want_error(eval(ps, "a", "unknown-1"), SG_EBUSY, "external policy server a: no behaviour for 'unknown-1'");
	SG_CHECK(stats(ps, 1).errors == 1 && stats(ps, 0).invalid == 1 && stats(ps, 0).errors == 1);
	sg_policyserver_free(ps);
}

/* Responses a misbehaving server sends, bytes chosen by the test. */
static void t_hostile_responses(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_error(eval(ps, "a", "raw-1804"), SG_EPROTO,
	           "external policy server a: policy response: verdict 4 is outside the enum");
	want_error(eval(ps, "a", "raw-18ffffffffffffffffff01"), SG_EPROTO, "verdict -1 is outside the enum");
	/* odd hex: the handler raises, grpcio answers UNKNOWN */
	want_error(eval(ps, "a", "raw-1801120561626"), SG_EPROTO, "external policy server a: UNKNOWN");
	want_error(eval(ps, "a", "raw-18011205616263"), SG_EPROTO, "claims 5 bytes, 3 left");
	want_error(eval(ps, "a", "raw-1801120361ff63"), SG_EPROTO, "reason is not UTF-8");
	want_error(eval(ps, "a", "raw-1b"), SG_EPROTO, "unsupported wire type start-group");
	/* a reason of 1025 bytes */
	char name[4 + 2 * 1100] = "raw-1801128108";
	for (int i = 0; i < 1025; i++)
		strcat(name, "72");
	want_error(eval(ps, "a", name), SG_EPROTO, "reason of 1025 bytes, at most 1024");
	/* proto3 leaves a zero enum off the wire: an empty response, or one
	 * whose verdict is 0, has no answer — not an approval */
	want_error(eval(ps, "a", "raw-"), SG_EPROTO,
	           "external policy server a: policy response: no verdict (RESULT_UNSPECIFIED, an empty message)");
	want_error(eval(ps, "a", "raw-1800"), SG_EPROTO, "no verdict (RESULT_UNSPECIFIED): not an answer");
	want_error(eval(ps, "a", "raw-18011800"), SG_EPROTO, "no verdict (RESULT_UNSPECIFIED)");
	/* Python's protobuf, a handler that set a reason and forgot the verdict */
	want_error(eval(ps, "a", "unset-1"), SG_EPROTO, "external policy server a: policy response: no verdict");
	SG_CHECK(stats(ps, 0).invalid == 11 && stats(ps, 0).approved == 0);
	sg_policyserver_free(ps);
}

/* A server built to the design's numbering (design_policy.proto: APPROVED
 * = 0 in field 1), written with Python's protobuf: none of its answers is
 * read as one. Its DENIED (1) would be APPROVED (1) in a shared field; its
 * APPROVED is nothing on the wire. */
static void t_design_numbering(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_error(eval(ps, "a", "design-approve-1"), SG_EPROTO,
	           "external policy server a: policy response: no verdict (RESULT_UNSPECIFIED): not an answer");
	want_error(eval(ps, "a", "design-deny-1"), SG_EPROTO,
	           "external policy server a: policy response: field 1 is the design's result (APPROVED = 0)");
	want_error(eval(ps, "a", "design-error-1"), SG_EPROTO, "field 1 is the design's result");
	SG_CHECK(stats(ps, 0).invalid == 3 && stats(ps, 0).approved == 0 && stats(ps, 0).denied == 0);
	sg_policyserver_free(ps);
}

/* A server that does not answer: the deadline, then an error. */
static void t_deadline(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(400);
	outcome o = eval(ps, "a", "hang-1");
	SG_CHECK(o.ms >= 350 && o.ms < 3000);
	want_error(o, SG_ETIMEOUT, "external policy server a: DEADLINE_EXCEEDED");
	/* the channel is fine afterwards */
	want_approved(eval(ps, "a", "approve-after-hang"));
	/* an approval before the hang does not count */
	o = eval(ps, "b,a", "hang-2");
	want_error(o, SG_ETIMEOUT, "external policy server b: DEADLINE_EXCEEDED");
	SG_CHECK(stats(ps, 0).timeouts == 1 && stats(ps, 1).timeouts == 1);
	sg_policyserver_free(ps);
}

/* A server that is down: connection refused, an error at once. */
static void t_down(void)
{
	char spec[64];
	int port_fd = -1;
	int port = dead_port(&port_fd);
	SG_CHECK(port > 0);
	snprintf(spec, sizeof(spec), "down=127.0.0.1:%d", port);
	sg_policyserver *ps = ps_new(spec, 5000);
	if (!ps) {
		close(port_fd);
		return;
	}
	for (int i = 0; i < 3; i++) {
		outcome o = eval(ps, "down", "approve-1");
		SG_CHECK(o.ms < 4000);
		want_error(o, SG_EBUSY, "external policy server down: UNAVAILABLE");
	}
	SG_CHECK(stats(ps, 0).unavailable == 3 && stats(ps, 0).approved == 0);
	sg_policyserver_free(ps);
	/* and a listed server that is down spoils the approval of one that is up */
	if (!server()) {
		close(port_fd);
		return;
	}
	snprintf(spec, sizeof(spec), "a=127.0.0.1:%d,down=127.0.0.1:%d", srv.a, port);
	ps = ps_new(spec, 5000);
	want_error(eval(ps, "a,down", "approve-2"), SG_EBUSY, "external policy server down: UNAVAILABLE");
	SG_CHECK(stats(ps, 0).approved == 1);
	sg_policyserver_free(ps);
	close(port_fd);
}

/* TLS handshakes with Python's grpcio take longest under load (ASan with
 * full unwinding, see CMakeLists.txt): a deadline that only a hang meets. */
#define TLS_DEADLINE_MS 15000

static void t_tls(void)
{
	if (!server())
		return;
	char spec[1400];
	sg_policyserver *ps;
	/* the host is checked against the certificate (IP SAN 127.0.0.1) */
	snprintf(spec, sizeof(spec), "t=127.0.0.1:%d;ca=%s", srv.tls, srv.ca);
	ps = ps_new(spec, TLS_DEADLINE_MS);
	want_approved(eval(ps, "t", "approve-tls"));
	want_denied(eval(ps, "t", "deny-tls"), "external policy server t: A says no to deny-tls");
	sg_policyserver_free(ps);
	/* server-name instead of the host */
	snprintf(spec, sizeof(spec), "t=127.0.0.1:%d;ca=%s;server-name=policy.test", srv.tls, srv.ca);
	ps = ps_new(spec, TLS_DEADLINE_MS);
	want_approved(eval(ps, "t", "approve-tls-name"));
	sg_policyserver_free(ps);
	/* the wrong roots */
	snprintf(spec, sizeof(spec), "t=127.0.0.1:%d;ca=%s", srv.tls, srv.other_ca);
	ps = ps_new(spec, TLS_DEADLINE_MS);
	want_error(eval(ps, "t", "approve-wrong-ca"), SG_EBUSY, "external policy server t: UNAVAILABLE");
	sg_policyserver_free(ps);
	/* a name the certificate does not hold */
	snprintf(spec, sizeof(spec), "t=127.0.0.1:%d;ca=%s;server-name=other.test", srv.tls, srv.ca);
	ps = ps_new(spec, TLS_DEADLINE_MS);
	want_error(eval(ps, "t", "approve-wrong-name"), SG_EBUSY, "external policy server t: UNAVAILABLE");
	sg_policyserver_free(ps);
	/* plaintext to the TLS port, TLS to a plaintext port */
	snprintf(spec, sizeof(spec), "p=127.0.0.1:%d,q=127.0.0.1:%d;ca=%s", srv.tls, srv.a, srv.ca);
	ps = ps_new(spec, TLS_DEADLINE_MS);
	outcome o = eval(ps, "p", "approve-plain-to-tls");
	SG_CHECK(o.rc < 0 && !o.denied);
	free(o.message);
	want_error(eval(ps, "q", "approve-tls-to-plain"), SG_EBUSY, "external policy server q: UNAVAILABLE");
	sg_policyserver_free(ps);
}

/* Every field reaches Python's protobuf as the object holds it. */
static void t_fields(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	json_t *cr = cr_full();
	json_t *v = json_pack("{s:s, s:s}", "servers", "a", "team", "payments");
	SG_CHECK(cr && v);
	bool denied = true;
	char *m = NULL;
	/* through the plugin row, as the approver calls it with the policy's name */
	sg_approver_plugin p = sg_policyserver_plugin(ps);
	SG_CHECK_OK(p.evaluate(p.arg, "shop-policy", v, NULL, cr, &denied, &m));
	SG_CHECK(!denied && m == NULL);
	if (denied)
		fprintf(stderr, "  %s\n", m ? m : "(no message)");
	free(m);
	/* the name is what the server sees: another one, or none, differs */
	SG_CHECK_OK(sg_policyserver_evaluate(ps, "other-policy", v, NULL, cr, &denied, &m));
	SG_CHECK(denied && m && strstr(m, "policy_name='other-policy'"));
	free(m);
	SG_CHECK_OK(sg_policyserver_evaluate(ps, NULL, v, NULL, cr, &denied, &m));
	SG_CHECK(denied && m && strstr(m, "policy_name=''"));
	free(m);
	json_decref(v);
	json_decref(cr);
	sg_policyserver_free(ps);
}

/* Objects that cannot make a PolicyRequest: an error, nobody called. */
static void t_bad_objects(void)
{
	sg_policyserver *ps = ps_new("a=127.0.0.1:1", 0);
	if (!ps)
		return;
	json_t *v = values_of("a");
	struct {
		json_t *cr;
		const char *msg;
	} cases[] = {
	    {NULL, "no CertificateRequest object"},
	    {json_pack("{s:{s:s}}", "metadata", "name", "x"), "the CertificateRequest has no spec"},
	    {json_pack("{s:{s:s}, s:{}}", "metadata", "name", "x", "spec"), "request is missing"},
	    {json_pack("{s:{s:s}, s:{s:s}}", "metadata", "name", "x", "spec", "request", "%%%"), "not base64"},
	    {json_pack("{s:{s:s, s:[]}, s:{s:o}}", "metadata", "name", "x", "labels", "spec", "request", b64_csr()),
	     "metadata.labels is not an object"},
	    {json_pack("{s:{s:s, s:{s:i}}, s:{s:o}}", "metadata", "name", "x", "annotations", "k", 1, "spec", "request",
	               b64_csr()),
	     "metadata.annotations.k is not a string"},
	    {json_pack("{s:{s:i}, s:{s:o}}", "metadata", "name", 7, "spec", "request", b64_csr()),
	     "metadata.name is not a string"},
	    {json_pack("{s:{s:s}, s:{s:o, s:s}}", "metadata", "name", "x", "spec", "request", b64_csr(), "isCA", "yes"),
	     "spec.isCA is not a boolean"},
	    {json_pack("{s:{s:s}, s:{s:o, s:[s,i]}}", "metadata", "name", "x", "spec", "request", b64_csr(), "usages",
	               "a", 1),
	     "spec.usages[1] is not a string"},
	    {json_pack("{s:{s:s}, s:{s:o, s:{s:s}}}", "metadata", "name", "x", "spec", "request", b64_csr(), "extra",
	               "k", "v"),
	     "spec.extra.k is not an array"},
	    {json_pack("{s:{s:s}, s:{s:o, s:s#}}", "metadata", "name", "x", "spec", "request", b64_csr(), "username",
	               "a\0b", (size_t)3),
	     "spec.username is not a string"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool denied = true;
		char *m = (char *)"x";
		SG_CHECK_RC(sg_policyserver_evaluate(ps, "p", v, NULL, cases[i].cr, &denied, &m), SG_EINVAL);
		SG_CHECK(!denied && m == NULL);
		SG_CHECK_MSG("plugin external-policy-servers: ");
		SG_CHECK_MSG(cases[i].msg);
		json_decref(cases[i].cr);
	}
	sg_policyserver_stats s = stats(ps, 0);
	SG_CHECK(s.approved + s.denied + s.errors + s.timeouts + s.unavailable + s.invalid == 0);
	json_decref(v);
	sg_policyserver_free(ps);
}

/* ---- threads ------------------------------------------------------------------ */

#define THREADS 8
#define CALLS 25

typedef struct worker {
	sg_policyserver *ps;
	int id;
	int wrong;
} worker;

static void *work(void *p)
{
	worker *w = p;
	for (int i = 0; i < CALLS; i++) {
		char name[64];
		bool deny = (i + w->id) % 2 == 0;
		snprintf(name, sizeof(name), "%s-%d-%d", deny ? "b-deny" : "approve", w->id, i);
		json_t *v = values_of("a,b"), *cr = cr_named(name);
		bool denied = !deny;
		char *m = NULL;
		int rc = sg_policyserver_evaluate(w->ps, "p", v, NULL, cr, &denied, &m);
		if (rc != SG_OK || denied != deny || (deny && (!m || strcmp(m, "external policy server b: B denies"))))
			w->wrong++;
		free(m);
		json_decref(v);
		json_decref(cr);
	}
	return NULL;
}

static void t_concurrent(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(10000);
	pthread_t th[THREADS];
	worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (worker){ps, i, 0};
		SG_CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
	}
	int wrong = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		wrong += w[i].wrong;
	}
	SG_CHECK(wrong == 0);
	sg_policyserver_stats a = stats(ps, 0), b = stats(ps, 1);
	SG_CHECK(a.approved == THREADS * CALLS); /* a approves all */
	SG_CHECK(b.approved == THREADS * CALLS / 2 && b.denied == THREADS * CALLS / 2);
	sg_policyserver_free(ps);
}

/* ---- ExternalPolicyServer objects ------------------------------------------------ */

static char *read_pem(const char *path, size_t *len)
{
	uint8_t *pem = NULL;
	SG_CHECK_OK(sg_file_read(path, 1u << 20, &pem, len));
	return (char *)pem;
}

static outcome eval_objects(sg_policyserver *ps, const char *const *names, size_t n, const char *crname)
{
	json_t *cr = cr_named(crname);
	outcome o = {0};
	sg_error_clear();
	o.rc = sg_policyserver_evaluate_servers(ps, "test-policy", names, n, NULL, cr, &o.denied, &o.message);
	snprintf(o.detail, sizeof(o.detail), "%s", sg_error_last()->msg);
	json_decref(cr);
	return o;
}

/* An object's server: TLS to its endpoint with its bundle, answers as the
 * flag's servers; unknown, waiting (no bundle) and refused objects are
 * retried with their reason, never approved; an unchanged object keeps its
 * channel. */
static void t_objects(void)
{
	if (!server())
		return;
	sg_policyserver *ps = NULL;
	sg_policyserver_options po = {.servers = NULL, .timeout_ms = TLS_DEADLINE_MS};
	SG_CHECK_OK(sg_policyserver_new(&ps, &po)); /* objects only */
	if (!ps)
		return;
	SG_CHECK(sg_policyserver_count(ps) == 0 && sg_policyserver_resource_count(ps) == 0);
	size_t ca_len = 0, other_len = 0;
	char *ca = read_pem(srv.ca, &ca_len), *other = read_pem(srv.other_ca, &other_len);
	char ep[64];
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", srv.tls);
	const char *one[] = {"policy.example"};
	bool changed = false;

	want_error(eval_objects(ps, one, 1, "approve-unknown"), SG_EBUSY,
	           "ExternalPolicyServer policy.example does not exist");
	/* no bundle yet: known, waits */
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "policy.example", ep, NULL, 0, &changed));
	SG_CHECK(changed && sg_policyserver_resource_count(ps) == 1);
	want_error(eval_objects(ps, one, 1, "approve-waiting"), SG_EBUSY,
	           "ExternalPolicyServer policy.example has no CA bundle");
	/* the bundle: calls are made */
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "policy.example", ep, ca, ca_len, &changed));
	SG_CHECK(changed);
	want_approved(eval_objects(ps, one, 1, "approve-object"));
	want_denied(eval_objects(ps, one, 1, "deny-object"),
	            "external policy server policy.example: A says no to deny-object");
	want_error(eval_objects(ps, one, 1, "error-object"), SG_EBUSY, "backend down");
	/* a server built to the design's numbering (APPROVED = 0 in field 1) is
	 * refused, never read as approving */
	want_error(eval_objects(ps, one, 1, "design-approve-object"), SG_EPROTO, "policy.example");
	/* the same again: nothing changes */
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "policy.example", ep, ca, ca_len, &changed));
	SG_CHECK(!changed);
	/* the wrong roots: no handshake, no approval */
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "policy.example", ep, other, other_len, &changed));
	SG_CHECK(changed);
	want_error(eval_objects(ps, one, 1, "approve-wrong-roots"), SG_EBUSY, "UNAVAILABLE");
	/* refused: a bundle that is no PEM, an endpoint that is no address */
	SG_CHECK_RC(sg_policyserver_resource_set(ps, "policy.example", ep, "not a pem", 9, &changed), SG_EINVAL);
	SG_CHECK(strstr(sg_error_last()->msg, "caBundle") != NULL);
	want_error(eval_objects(ps, one, 1, "approve-bad-ca"), SG_EBUSY,
	           "ExternalPolicyServer policy.example is not Ready: caBundle");
	SG_CHECK_RC(sg_policyserver_resource_set(ps, "policy.example", "Bad_Host:1", ca, ca_len, &changed), SG_EINVAL);
	SG_CHECK(strstr(sg_error_last()->msg, "not a lower-case DNS name") != NULL);
	SG_CHECK_RC(sg_policyserver_resource_set(ps, "policy.example", "h:99999", ca, ca_len, &changed), SG_EINVAL);
	SG_CHECK_RC(sg_policyserver_resource_set(ps, "Not_A_Name", ep, ca, ca_len, &changed), SG_EINVAL);
	/* no port: 443 (nothing listens there: no answer, no approval) */
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "policy.example", "127.0.0.1", ca, ca_len, &changed));
	want_error(eval_objects(ps, one, 1, "approve-443"), SG_EBUSY, "UNAVAILABLE");

	/* two objects in order: the second asked only while the first approves */
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "policy.example", ep, ca, ca_len, &changed));
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "second", ep, ca, ca_len, &changed));
	const char *two[] = {"policy.example", "second"};
	want_approved(eval_objects(ps, two, 2, "approve-two"));
	want_denied(eval_objects(ps, two, 2, "deny-two"),
	            "external policy server policy.example: A says no to deny-two");
	/* removed, cleared: unknown again */
	sg_policyserver_resource_remove(ps, "second");
	want_error(eval_objects(ps, two, 2, "approve-removed"), SG_EBUSY, "ExternalPolicyServer second does not exist");
	sg_policyserver_resource_clear(ps);
	SG_CHECK(sg_policyserver_resource_count(ps) == 0);
	want_error(eval_objects(ps, one, 1, "approve-cleared"), SG_EBUSY, "does not exist");
	/* SG_POLICYSERVER_RESOURCES_MAX objects at once, and not one more; a
	 * known one may still change */
	for (int i = 0; i < SG_POLICYSERVER_RESOURCES_MAX; i++) {
		char n[32];
		snprintf(n, sizeof(n), "eps-%d", i);
		if (sg_policyserver_resource_set(ps, n, "policy.example", NULL, 0, &changed) != SG_OK)
			SG_CHECK(!"an object up to the limit refused");
	}
	SG_CHECK(sg_policyserver_resource_count(ps) == SG_POLICYSERVER_RESOURCES_MAX);
	SG_CHECK_RC(sg_policyserver_resource_set(ps, "one-more", "policy.example", NULL, 0, &changed), SG_EINVAL);
	SG_CHECK(strstr(sg_error_last()->msg, "more than 1024 ExternalPolicyServers") != NULL);
	SG_CHECK(sg_policyserver_resource_count(ps) == SG_POLICYSERVER_RESOURCES_MAX);
	SG_CHECK_OK(sg_policyserver_resource_set(ps, "eps-7", ep, ca, ca_len, &changed));
	SG_CHECK(changed);
	const char *seventh[] = {"eps-7"};
	want_approved(eval_objects(ps, seventh, 1, "approve-at-limit"));
	sg_policyserver_resource_clear(ps);
	free(ca);
	free(other);
	sg_policyserver_free(ps);
}

typedef struct churn {
	sg_policyserver *ps;
	const char *ep, *ca;
	size_t ca_len;
	atomic_int stop;
	int wrong;
} churn;

/* Replaces and removes the object while other threads call it. */
static void *churn_main(void *arg)
{
	churn *c = arg;
	for (int i = 0; !atomic_load(&c->stop); i++) {
		bool changed;
		const char *ep = i % 3 == 2 ? "127.0.0.1:1" : c->ep;
		if (i % 5 == 4)
			sg_policyserver_resource_remove(c->ps, "churn");
		else if (sg_policyserver_resource_set(c->ps, "churn", ep, c->ca, c->ca_len, &changed) != SG_OK)
			c->wrong++;
		sg_sleep_ms(2);
	}
	return NULL;
}

static void *churn_caller(void *arg)
{
	churn *c = arg;
	const char *one[] = {"churn"};
	for (int i = 0; i < 40; i++) {
		char name[32];
		snprintf(name, sizeof(name), "%s-%d", i % 2 ? "deny" : "approve", i);
		outcome o = eval_objects(c->ps, one, 1, name);
		/* an answer is the server's own; anything else is an error, never
		 * an approval of a "deny-" request */
		if ((o.rc == SG_OK && (i % 2) != o.denied) || (o.rc != SG_OK && (o.denied || o.message)))
			c->wrong++;
		free(o.message);
	}
	return NULL;
}

static void t_objects_concurrent(void)
{
	if (!server())
		return;
	sg_policyserver *ps = NULL;
	sg_policyserver_options po = {.timeout_ms = TLS_DEADLINE_MS};
	SG_CHECK_OK(sg_policyserver_new(&ps, &po));
	if (!ps)
		return;
	size_t ca_len = 0;
	char *ca = read_pem(srv.ca, &ca_len);
	char ep[64];
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", srv.tls);
	churn c = {.ps = ps, .ep = ep, .ca = ca, .ca_len = ca_len};
	pthread_t writer, callers[4];
	SG_CHECK(pthread_create(&writer, NULL, churn_main, &c) == 0);
	for (int i = 0; i < 4; i++)
		SG_CHECK(pthread_create(&callers[i], NULL, churn_caller, &c) == 0);
	for (int i = 0; i < 4; i++)
		pthread_join(callers[i], NULL);
	atomic_store(&c.stop, 1);
	pthread_join(writer, NULL);
	SG_CHECK(c.wrong == 0);
	free(ca);
	sg_policyserver_free(ps);
}

/* ---- metrics -------------------------------------------------------------------- */

static void t_metrics(void)
{
	if (!server())
		return;
	sg_policyserver *ps = ps_ab(0);
	want_approved(eval(ps, "a", "approve-before")); /* before registration: stats only */
	sg_metrics *reg = NULL;
	SG_CHECK_OK(sg_metrics_new(&reg));
	SG_CHECK_OK(sg_policyserver_metrics(ps, reg));
	want_approved(eval(ps, "a,b", "approve-m"));
	want_denied(eval(ps, "a", "deny-m"), "external policy server a: A says no to deny-m");
	want_error(eval(ps, "b", "error-m"), SG_EBUSY, "backend down");
	want_error(eval(ps, "a", "raw-1804"), SG_EPROTO, "verdict 4");
	char *text = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_metrics_render(reg, &text, &len));
	static const char *const want[] = {
	    "signet_policyserver_calls_total{server=\"a\",result=\"approved\"} 1",
	    "signet_policyserver_calls_total{server=\"a\",result=\"denied\"} 1",
	    "signet_policyserver_calls_total{server=\"a\",result=\"failed\"} 1",
	    "signet_policyserver_calls_total{server=\"a\",result=\"error\"} 0",
	    "signet_policyserver_calls_total{server=\"b\",result=\"approved\"} 1",
	    "signet_policyserver_calls_total{server=\"b\",result=\"error\"} 1",
	};
	for (size_t i = 0; text && i < sizeof(want) / sizeof(want[0]); i++) {
		SG_CHECK(strstr(text, want[i]) != NULL);
		if (!strstr(text, want[i]))
			fprintf(stderr, "  metrics lack %s:\n%s\n", want[i], text);
	}
	SG_CHECK(stats(ps, 0).approved == 2);
	free(text);
	sg_policyserver_free(ps);
	sg_metrics_free(reg);
}

SG_TEST_MAIN(SG_TEST(t_config_good), SG_TEST(t_config_bad), SG_TEST(t_values), SG_TEST(t_approved), SG_TEST(t_denied),
             SG_TEST(t_order), SG_TEST(t_error), SG_TEST(t_hostile_responses), SG_TEST(t_design_numbering),
             SG_TEST(t_deadline), SG_TEST(t_down), SG_TEST(t_tls), SG_TEST(t_fields), SG_TEST(t_bad_objects),
             SG_TEST(t_concurrent), SG_TEST(t_objects), SG_TEST(t_objects_concurrent), SG_TEST(t_metrics))
