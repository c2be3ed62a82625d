/*
 * Tests of sg_crpolicy, the approver-policy compatible evaluation core.
 *
 * Policies are approver-policy's own: docs/examples (allow-all.yaml,
 * default-deny-all, example.com, all-options, plugin) as JSON, and the
 * policies of its evaluator tests (allowed, constraints, the v0.27 raw-SAN
 * and raw-subject bypass tests). Every expected message is the string
 * approver-policy v0.27 (apimachinery v0.36) produces for the same case,
 * written out in full: field paths, "Invalid value" with %q strings and
 * JSON lists, details, the aggregate's brackets, and the condition
 * messages. Requests are mostly facts built here (sg_csr_facts is a plain
 * struct), so each case states exactly what the CSR holds; t_end_to_end
 * runs real OpenSSL CSRs through sg_csr_facts_parse as well.
 *
 * In the JSON below ` stands for " (so the policies stay readable).
 */
#include "sg_crpolicy.h"
#include "sg_test.h"

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <time.h>

static const char *const known_plugins[] = {"external-policy"};
static const sg_crpolicy_options opts = {known_plugins, 1, false};

static json_t *json_of(const char *text)
{
	char *t = strdup(text);
	for (char *c = t; *c; c++)
		if (*c == '`')
			*c = '"';
	json_error_t err;
	json_t *j = json_loads(t, JSON_REJECT_DUPLICATES, &err);
	if (!j) {
		fprintf(stderr, "bad test JSON: %s: %s\n", err.text, t);
		abort();
	}
	free(t);
	return j;
}

static sg_crpolicy *load_with(const char *text, const sg_crpolicy_options *o)
{
	json_t *j = json_of(text);
	sg_crpolicy *p = NULL;
	int rc = sg_crpolicy_compile(&p, j, o);
	json_decref(j);
	if (rc != SG_OK) {
		fprintf(stderr, "compile failed: %s\n", sg_error_last()->msg);
		abort();
	}
	return p;
}

static sg_crpolicy *load(const char *text)
{
	return load_with(text, &opts);
}

#define CHECK_STR(got, want)                                                                                           \
	do {                                                                                                           \
		const char *g_ = (got), *w_ = (want);                                                                  \
		sg_test_checks++;                                                                                      \
		if (!g_ || strcmp(g_, w_) != 0) {                                                                      \
			sg_test_failures++;                                                                            \
			fprintf(stderr, "%s:%d: got  %s\n%*s want %s\n", __FILE__, __LINE__, g_ ? g_ : "(null)",       \
			        (int)strlen(__FILE__) + 8, "", w_);                                                    \
		}                                                                                                      \
	} while (0)

/* ---- requests: facts built by hand ------------------------------------------ */

typedef struct fake {
	sg_csr_facts f;
	sg_csr_facts_attr attrs[SG_CSR_FACTS_MAX_ATTRS];
	sg_csr_facts_san sans[SG_CSR_FACTS_MAX_SANS];
	const char *usages[16];
	sg_crpolicy_request r;
} fake;

static void fake_init(fake *x)
{
	memset(x, 0, sizeof(*x));
	x->f.attrs = x->attrs;
	x->f.sans = x->sans;
	x->f.key_alg = SG_CSR_FACTS_KEY_RSA;
	x->f.key_size = 2048;
	x->f.key_oid = "1.2.840.113549.1.1.1";
	x->r.name_space = "default";
	x->r.issuer_name = "my-ca";
	x->r.usages = x->usages;
	x->r.csr = &x->f;
}

static void attr_n(fake *x, const char *oid, uint8_t tag, const char *v, size_t len)
{
	sg_csr_facts_attr *a = &x->attrs[x->f.attr_count++];
	a->oid = oid;
	a->tag = tag;
	a->is_string = tag == SG_DER_UTF8STRING || tag == SG_DER_PRINTABLESTRING || tag == SG_DER_IA5STRING ||
	               tag == SG_CSR_FACTS_TELETEXSTRING || tag == SG_CSR_FACTS_BMPSTRING ||
	               tag == SG_CSR_FACTS_UNIVERSALSTRING || tag == SG_CSR_FACTS_NUMERICSTRING;
	a->value = v;
	a->value_len = len;
	a->rdn = x->f.rdn_count++;
}

static void attr(fake *x, const char *oid, const char *v)
{
	attr_n(x, oid, SG_DER_UTF8STRING, v, strlen(v));
}

static void san(fake *x, sg_csr_facts_san_type t, const char *v)
{
	sg_csr_facts_san *s = &x->sans[x->f.san_count++];
	s->type = t;
	s->value = v;
	s->value_len = strlen(v);
	if (x->f.san_extensions == 0)
		x->f.san_extensions = 1;
}

static void other_name(fake *x, const char *oid, const char *v)
{
	san(x, SG_CSR_FACTS_SAN_OTHER_NAME, v);
	x->sans[x->f.san_count - 1].oid = oid;
}

static void usage(fake *x, const char *u)
{
	x->usages[x->r.usage_count++] = u;
}

#define CN "2.5.4.3"
#define SERIAL "2.5.4.5"
#define C "2.5.4.6"
#define L "2.5.4.7"
#define ST "2.5.4.8"
#define STREET "2.5.4.9"
#define O "2.5.4.10"
#define OU "2.5.4.11"
#define POSTAL "2.5.4.17"
#define EMAIL_OID "1.2.840.113549.1.9.1"
#define UPN "1.3.6.1.4.1.311.20.2.3"

/* Evaluates and checks the verdict: want NULL means approved (not denied). */
static void expect_at(int line, const sg_crpolicy *p, const sg_crpolicy_request *r, const char *want)
{
	sg_crpolicy_verdict v;
	int rc = sg_crpolicy_evaluate(p, r, &v);
	sg_test_checks++;
	if (rc != SG_OK) {
		sg_test_failures++;
		fprintf(stderr, "%s:%d: evaluate failed: %s\n", __FILE__, line, sg_error_last()->msg);
	} else if (want == NULL ? v.denied || v.message[0] : !v.denied || strcmp(v.message, want) != 0) {
		sg_test_failures++;
		fprintf(stderr, "%s:%d: %s: %s\n%*s want %s\n", __FILE__, line, v.denied ? "denied" : "approved",
		        v.message, (int)strlen(__FILE__) + 8, "", want ? want : "(approved)");
	}
	sg_crpolicy_verdict_clear(&v);
}
#define EXPECT(p, r, want) expect_at(__LINE__, (p), (r), (want))

/* ---- wildcards ------------------------------------------------------------------ */

static void t_wildcards(void)
{
	static const struct {
		const char *pattern, *s;
		bool want;
	} m[] = {
	    /* approver-policy's wildcard_test.go */
	    {"*", "cert-manager", true},
	    {"", "cert-manager", false},
	    {"", "", true},
	    {"cert-*", "cert-manager.io", true},
	    {"cert-manager-foo", "cert-manager", false},
	    {"cert-manager", "cert-manager", true},
	    {"cert-manager.io*", "cert-manager.io", true},
	    {"*cert-manager.io", "cert-manager.io", true},
	    {"cert-*manager.io", "cert-manager.io", true},
	    {"cert-foo*", "cert-manager.io", false},
	    {"ce*t-*ger*io", "cert-manager.io", true},
	    {"ce*t-*ger*.", "cert-manager.io", false},
	    /* §4.3: '*' crosses dots and matches itself */
	    {"*.example.com", "*.example.com", true},
	    {"*.example.com", "a.b.example.com", true},
	    {"*.example.com", "example.com", false},
	    {"*.example.com", ".example.com", true},
	    {"*", "", true},
	    {"**", "", true},
	    {"a*", "", false},
	    {"a", "", false},
	    {"a?c", "abc", false}, /* no '?' */
	    {"a.c", "abc", false}, /* no regex */
	    {"[ab]", "a", false},
	    {"*a*a*a*a*a*a*a*a*!", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
	    /* runes, not bytes; an invalid byte is U+FFFD as in Go's []rune */
	    {"\xc3\xa9*", "\xc3\xa9t\xc3\xa9", true},
	    {"*\xc3\xa9", "caf\xc3\xa9", true},
	    {"\xff", "\xfe", true},
	    {"\xff", "\xef\xbf\xbd", true},
	    {"a\xc3", "a\xc3", true},
	};
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		bool got = sg_crpolicy_wildcard_matches(m[i].pattern, m[i].s);
		SG_CHECK(got == m[i].want);
		if (got != m[i].want)
			fprintf(stderr, "  wildcard %zu (%s, %s): got %d\n", i, m[i].pattern, m[i].s, got);
	}
	SG_CHECK(sg_crpolicy_wildcard_matches(NULL, NULL));

	const char *none[] = {NULL};
	const char *cm[] = {"cert-manager"}, *cm_foo[] = {"cert-manager", "foo"}, *fcb[] = {"foo", "cert-*", "bar"};
	const char *star[] = {"*"}, *foo_dot[] = {"foo.*"}, *t1[] = {"cert-manager", "foo."},
	           *t2[] = {"foo.cert-manager", "foo."};
	SG_CHECK(sg_crpolicy_wildcard_subset(none, 0, none, 0));
	SG_CHECK(sg_crpolicy_wildcard_subset(cm, 1, cm, 1));
	SG_CHECK(sg_crpolicy_wildcard_subset(cm_foo, 2, cm, 1));
	SG_CHECK(!sg_crpolicy_wildcard_subset(cm, 1, cm_foo, 2));
	SG_CHECK(sg_crpolicy_wildcard_subset(fcb, 3, cm_foo, 2));
	SG_CHECK(sg_crpolicy_wildcard_subset(star, 1, cm_foo, 2));
	SG_CHECK(!sg_crpolicy_wildcard_subset(foo_dot, 1, t1, 2));
	SG_CHECK(sg_crpolicy_wildcard_subset(foo_dot, 1, t2, 2));
	SG_CHECK(!sg_crpolicy_wildcard_subset(none, 0, cm, 1));

	/* O(n*m), no blow-up: 4 KiB of "*a" against 4 KiB of 'a' without a match. */
	static char pat[4098], str[4097];
	for (int i = 0; i < 2048; i++)
		pat[2 * i] = '*', pat[2 * i + 1] = 'a';
	pat[4096] = '!';
	memset(str, 'a', 4096);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	SG_CHECK(!sg_crpolicy_wildcard_matches(pat, str));
	clock_gettime(CLOCK_MONOTONIC, &b);
	double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	SG_CHECK(secs < 2.0);
}

/* ---- compiling: Ready and NotReady ------------------------------------------------ */

#define NR "CertificateRequestPolicy is not ready for approval evaluation: "

/* docs/examples/all-options.yaml */
static const char all_options[] =
    "{`metadata`:{`name`:`all-options`},`spec`:{`allowed`:{"
    "`commonName`:{`required`:true,`value`:`example.com`,"
    "  `validations`:[{`rule`:`self.endsWith('.com')`,`message`:`CommonName must end with '.com'`}]},"
    "`dnsNames`:{`required`:false,`values`:[`example.com`,`*.example.com`],"
    "  `validations`:[{`rule`:`self.size() <= 24`,`message`:`DNSName must be no more than 24 characters`}]},"
    "`ipAddresses`:{`required`:false,`values`:[`*`],"
    "  `validations`:[{`rule`:`self.matches('\\\\d+\\\\.\\\\d+\\\\.\\\\d+\\\\.\\\\d+')`,"
    "  `message`:`IPAddress must be a valid IPv4 address`}]},"
    "`uris`:{`required`:false,`values`:[`spiffe://example.org/ns/*/sa/*`],"
    "  `validations`:[{`rule`:`self.startsWith('spiffe://%s/ns/%s/sa/'.format(['example.org',cr.namespace]))`,"
    "  `message`:`URI must be a valid SPIFFE ID in trust domain bound to request namespace`}]},"
    "`emailAddresses`:{`required`:false,`values`:[`*@example.com`],"
    "  `validations`:[{`rule`:`self.size() <= 24`,`message`:`EmailAddress must be no more than 24 characters`}]},"
    "`isCA`:false,`usages`:[`server auth`,`client auth`],"
    "`subject`:{`organizations`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `countries`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `organizationalUnits`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `localities`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `provinces`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `streetAddresses`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `postalCodes`:{`required`:false,`values`:[`*`],`validations`:[]},"
    "  `serialNumber`:{`required`:false,`value`:`*`,`validations`:[]},"
    "  `otherAttributes`:[{`oid`:`1.2.840.113549.1.9.1`,`required`:false,`values`:[`*@example.com`],"
    "  `validations`:[]}]},"
    "`otherNames`:[{`oid`:`1.3.6.1.4.1.311.20.2.3`,`required`:false,`values`:[`*@example.com`],`validations`:[]}]},"
    "`constraints`:{`minDuration`:`1h`,`maxDuration`:`24h`,"
    "  `privateKey`:{`algorithm`:`RSA`,`minSize`:2048,`maxSize`:4096}},"
    "`plugins`:{`rego`:{`values`:{`my-ref`:`hello-world`}}},"
    "`selector`:{`issuerRef`:{`name`:`my-ca-*`,`kind`:`*Issuer`,`group`:`cert-manager.io`}}}}";

/* docs/examples/allow-all.yaml */
static const char allow_all[] =
    "{`metadata`:{`name`:`allow-all`},`spec`:{`allowed`:{"
    "`commonName`:{`value`:`*`},`dnsNames`:{`values`:[`*`]},`ipAddresses`:{`values`:[`*`]},"
    "`uris`:{`values`:[`*`]},`emailAddresses`:{`values`:[`*`]},`isCA`:true,"
    "`usages`:[`signing`,`digital signature`,`content commitment`,`key encipherment`,`key agreement`,"
    "  `data encipherment`,`cert sign`,`crl sign`,`encipher only`,`decipher only`,`any`,`server auth`,"
    "  `client auth`,`code signing`,`email protection`,`s/mime`,`ipsec end system`,`ipsec tunnel`,"
    "  `ipsec user`,`timestamping`,`ocsp signing`,`microsoft sgc`,`netscape sgc`],"
    "`subject`:{`organizations`:{`values`:[`*`]},`countries`:{`values`:[`*`]},"
    "  `organizationalUnits`:{`values`:[`*`]},`localities`:{`values`:[`*`]},`provinces`:{`values`:[`*`]},"
    "  `streetAddresses`:{`values`:[`*`]},`postalCodes`:{`values`:[`*`]},`serialNumber`:{`value`:`*`}}},"
    "`selector`:{`issuerRef`:{}}}}";

/* docs/examples/default-deny-all.yaml */
static const char default_deny_all[] = "{`metadata`:{`name`:`default-deny-all`},`spec`:{"
                                       "`allowed`:{`dnsNames`:{`values`:[],`required`:true}},"
                                       "`selector`:{`issuerRef`:{}}}}";

/* docs/examples/example.com.yaml, as written (with its CEL rule) */
static const char example_com[] =
    "{`metadata`:{`name`:`example-com`},`spec`:{`allowed`:{`commonName`:{`value`:`example.com`},"
    "`dnsNames`:{`values`:[`example.com`,`*.example.com`],"
    "  `validations`:[{`rule`:`!self.contains('*')`,`message`:`Wildcard certificates are not allowed`}]},"
    "`usages`:[`server auth`]},"
    "`constraints`:{`privateKey`:{`algorithm`:`RSA`,`minSize`:2048}},"
    "`selector`:{`issuerRef`:{`name`:`letsencrypt-prod`,`kind`:`Issuer`,`group`:`cert-manager.io`}}}}";

/* The same without the CEL rule, so that it can be evaluated. */
static const char example_com_no_cel[] =
    "{`metadata`:{`name`:`example-com`},`spec`:{`allowed`:{`commonName`:{`value`:`example.com`},"
    "`dnsNames`:{`values`:[`example.com`,`*.example.com`]},`usages`:[`server auth`]},"
    "`constraints`:{`privateKey`:{`algorithm`:`RSA`,`minSize`:2048}},"
    "`selector`:{`issuerRef`:{`name`:`letsencrypt-prod`,`kind`:`Issuer`,`group`:`cert-manager.io`}}}}";

/* docs/examples/plugin.yaml */
static const char plugin_rego[] =
    "{`metadata`:{`name`:`plugin-some-example`},`spec`:{"
    "`allowed`:{`commonName`:{`value`:`example.com`}},"
    "`plugins`:{`rego`:{`values`:{`my-ref`:`hello-world`}}},"
    "`selector`:{`issuerRef`:{`name`:`my-ca`,`kind`:`Issuer`,`group`:`cert-manager.io`}}}}";

static void expect_condition(int line, const char *policy, const sg_crpolicy_options *o, bool ready, const char *msg)
{
	sg_crpolicy *p = load_with(policy, o);
	sg_test_checks++;
	if (sg_crpolicy_ready(p) != ready || strcmp(sg_crpolicy_condition_message(p), msg) != 0) {
		sg_test_failures++;
		fprintf(stderr, "%s:%d: ready=%d %s\n%*s want %s\n", __FILE__, line, sg_crpolicy_ready(p),
		        sg_crpolicy_condition_message(p), (int)strlen(__FILE__) + 8, "", msg);
	}
	CHECK_STR(sg_crpolicy_condition_reason(p), ready ? "Ready" : "NotReady");
	sg_crpolicy_free(p);
}
#define CONDITION(policy, o, ready, msg) expect_condition(__LINE__, (policy), (o), (ready), (msg))

static void t_documented_policies(void)
{
	CONDITION(allow_all, &opts, true, "CertificateRequestPolicy is ready for approval evaluation");
	CONDITION(default_deny_all, &opts, true, SG_CRPOLICY_READY_MESSAGE);
	CONDITION(example_com_no_cel, &opts, true, SG_CRPOLICY_READY_MESSAGE);
	/* Its CEL rule compiles: Ready, as approver-policy has it. */
	CONDITION(example_com, &opts, true, SG_CRPOLICY_READY_MESSAGE);
	/* all-options.yaml: its plugin is unknown here, and one of its rules
	 * does not compile in cel-go either: '\d' is no CEL escape sequence
	 * (the YAML gives the rule a single backslash); the others do. */
	sg_crpolicy *ao = load_with(all_options, &opts);
	SG_CHECK(!sg_crpolicy_ready(ao));
	static const char ao_want[] =
	    NR "[spec.plugins: Unsupported value: \"rego\": supported values: \"external-policy\", "
	       "spec.allowed.ipAddresses.validations[0]: Invalid value: "
	       "\"self.matches('\\\\d+\\\\.\\\\d+\\\\.\\\\d+\\\\.\\\\d+')\": ERROR: <input>:1:15: Syntax error: "
	       "invalid escape sequence"; /* then cel-go's source line and caret, as cel-go prints them */
	SG_CHECK(strncmp(sg_crpolicy_condition_message(ao), ao_want, sizeof(ao_want) - 1) == 0);
	sg_crpolicy_free(ao);
	/* plugin.yaml: NotReady unless the plugin is known. */
	CONDITION(plugin_rego, NULL, false, NR "spec.plugins: Unsupported value: \"rego\"");
	CONDITION(plugin_rego, &opts, false,
	          NR "spec.plugins: Unsupported value: \"rego\": supported values: \"external-policy\"");
	const char *const rego[] = {"external-policy", "rego"};
	sg_crpolicy_options with_rego = {rego, 2, false};
	sg_crpolicy *p = load_with(plugin_rego, &with_rego);
	SG_CHECK(sg_crpolicy_ready(p));
	SG_CHECK(sg_crpolicy_plugin_count(p) == 1);
	CHECK_STR(sg_crpolicy_plugin_name(p, 0), "rego");
	const json_t *values = sg_crpolicy_plugin_values(p, 0);
	SG_CHECK(values && json_is_string(json_object_get(values, "my-ref")));
	CHECK_STR(json_string_value(json_object_get(values, "my-ref")), "hello-world");
	SG_CHECK(sg_crpolicy_plugin_name(p, 1) == NULL && sg_crpolicy_plugin_values(p, 1) == NULL);
	CHECK_STR(sg_crpolicy_name(p), "plugin-some-example");
	sg_crpolicy_free(p);
}

/* spec.externalPolicyServers, the CertificateRequest Policy design's field:
 * names kept in order for a caller that calls them, refused when it does
 * not; bad names, duplicates and too many make the policy NotReady. */
static void t_external_servers(void)
{
	static const char with_servers[] =
	    "{`metadata`:{`name`:`with-servers`},`spec`:{`selector`:{`issuerRef`:{}},"
	    "`allowed`:{`dnsNames`:{`values`:[`*`]}},`externalPolicyServers`:[`istio-csr`,`spiffe.policy`]}}";
	sg_crpolicy_options eps = {known_plugins, 1, true};
	CONDITION(with_servers, &opts, false,
	          NR "spec.externalPolicyServers: Forbidden: this approver does not call external policy servers");
	CONDITION(with_servers, &eps, true, SG_CRPOLICY_READY_MESSAGE);
	sg_crpolicy *p = load_with(with_servers, &eps);
	SG_CHECK(sg_crpolicy_external_count(p) == 2);
	CHECK_STR(sg_crpolicy_external_name(p, 0), "istio-csr");
	CHECK_STR(sg_crpolicy_external_name(p, 1), "spiffe.policy");
	SG_CHECK(sg_crpolicy_external_name(p, 2) == NULL);
	sg_crpolicy_free(p);
	p = load_with("{`metadata`:{`name`:`none`},`spec`:{`selector`:{`issuerRef`:{}}}}", &eps);
	SG_CHECK(sg_crpolicy_external_count(p) == 0 && sg_crpolicy_external_name(p, 0) == NULL);
	sg_crpolicy_free(p);

	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},"
	          "`externalPolicyServers`:[`a`,`Bad_Name`,`a`]}}",
	          &eps, false,
	          NR "[spec.externalPolicyServers[1]: Invalid value: \"Bad_Name\": not the name of an "
	             "ExternalPolicyServer (a lower-case RFC 1123 subdomain of at most 253 characters), "
	             "spec.externalPolicyServers[2]: Duplicate value: \"a\"]");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`externalPolicyServers`:`a`}}", &eps,
	          false,
	          NR "spec.externalPolicyServers: Invalid value: \"string\": spec.externalPolicyServers in body "
	             "must be of type array: \"string\"");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`externalPolicyServers`:[1]}}", &eps,
	          false,
	          NR "spec.externalPolicyServers[0]: Invalid value: \"integer\": spec.externalPolicyServers[0] in "
	             "body must be of type string: \"integer\"");
	char many[2048] = "{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`externalPolicyServers`:[";
	for (int i = 0; i <= SG_CRPOLICY_MAX_ENTRIES; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s`s%d`", i ? "," : "", i);
	strcat(many, "]}}");
	CONDITION(many, &eps, false, NR "spec.externalPolicyServers: Too many: 65: must have at most 64 items");
}

/* What approver-policy's webhook refuses, with its messages. */
static void t_webhook_checks(void)
{
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{}}", &opts, false,
	          NR "spec.selector: Required value: one of issuerRef or namespace must be defined, hint: `{}` on "
	             "either matches everything");
	CONDITION("{`metadata`:{`name`:`x`}}", &opts, false,
	          NR "spec.selector: Required value: one of issuerRef or namespace must be defined, hint: `{}` on "
	             "either matches everything");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`namespace`:{}}}}", &opts, true,
	          SG_CRPOLICY_READY_MESSAGE);
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	          "`dnsNames`:{`required`:true},`commonName`:{`required`:true},"
	          "`subject`:{`serialNumber`:{`required`:true},`countries`:{`required`:true,`values`:[]}}}}}",
	          &opts, false,
	          NR "[spec.allowed.dnsNames.values: Required value: at least one of 'values' or 'validations' must be "
	             "defined if field is 'required', spec.allowed.commonName.value: Required value: at least one of "
	             "'value' or 'validations' must be defined if field is 'required', "
	             "spec.allowed.subject.serialNumber.value: Required value: at least one of 'value' or "
	             "'validations' must be defined if field is 'required']");
	/* OIDs of otherNames and otherAttributes. */
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	          "`otherNames`:[{`oid`:`1.02.3`},{`oid`:`-1.2`},{`oid`:`1.2.3`,`required`:true}],"
	          "`subject`:{`otherAttributes`:[{`oid`:`2.5.4.3`},{`oid`:`1.2.840.113549.1.9.1`},{`oid`:`+1`}]}}}}",
	          &opts, false,
	          NR
	          "[spec.allowed.otherNames[0].oid: Invalid value: \"1.02.3\": must be a valid, canonical dotted "
	          "ASN.1 object identifier (e.g. \"1.3.6.1.4.1.311.20.2.3\"), "
	          "spec.allowed.otherNames[1].oid: Invalid value: \"-1.2\": OID arcs must be non-negative, "
	          "spec.allowed.otherNames[2].values: Required value: at least one of 'values' or 'validations' must "
	          "be defined if field is 'required', "
	          "spec.allowed.subject.otherAttributes[0].oid: Invalid value: \"2.5.4.3\": this OID is covered by a "
	          "dedicated allowed.commonName / allowed.subject.* field; configure it there instead of "
	          "otherAttributes, "
	          "spec.allowed.subject.otherAttributes[2].oid: Invalid value: \"+1\": must be a valid, canonical "
	          "dotted ASN.1 object identifier (e.g. \"1.3.6.1.4.1.311.20.2.3\")]");
	/* Constraints. */
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{"
	          "`privateKey`:{`algorithm`:`Ed25519`,`minSize`:0,`maxSize`:9000}}}}",
	          &opts, false,
	          NR
	          "[spec.constraints.privateKey.maxSize: Invalid value: 9000: maxSize cannot be defined with "
	          "algorithm constraint Ed25519, spec.constraints.privateKey.minSize: Invalid value: 0: minSize "
	          "cannot be defined with algorithm constraint Ed25519, spec.constraints.privateKey.maxSize: Invalid "
	          "value: 9000: must be between 0 and 8192 inclusive]");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{"
	          "`privateKey`:{`algorithm`:`DSA`,`minSize`:4096,`maxSize`:2048},"
	          "`minDuration`:`24h`,`maxDuration`:`1h`}}}",
	          &opts, false,
	          NR
	          "[spec.constraints.privateKey.algorithm: Unsupported value: \"DSA\": supported values: \"RSA\", "
	          "\"ECDSA\", \"Ed25519\", spec.constraints.privateKey.maxSize: Invalid value: 2048: maxSize must be "
	          "the same value as minSize or larger, spec.constraints.maxDuration: Invalid value: \"1h0m0s\": "
	          "maxDuration must be the same value as minDuration or larger]");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{"
	          "`minDuration`:`-1h30m`,`maxDuration`:`-90s`}}}",
	          &opts, false,
	          NR "[spec.constraints.maxDuration: Invalid value: \"-1m30s\": maxDuration must be a value greater or "
	             "equal to 0, spec.constraints.minDuration: Invalid value: \"-1h30m0s\": minDuration must be a "
	             "value greater or equal to 0]");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{"
	          "`minDuration`:`1h`,`maxDuration`:`1h`,`privateKey`:{`minSize`:2048,`maxSize`:2048}}}}",
	          &opts, true, SG_CRPOLICY_READY_MESSAGE);
	/* Label selectors (apimachinery's messages). */
	CONDITION(
	    "{`metadata`:{`name`:`x`},`spec`:{`selector`:{`namespace`:{`matchLabels`:{`bad key`:`v`,`ok`:`1`}}}}}",
	    &opts, false,
	    NR "spec.selector.namespace.matchLabels: Invalid value: {\"bad key\":\"v\",\"ok\":\"1\"}: key: "
	       "Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', "
	       "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
	       "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
	CONDITION(
	    "{`metadata`:{`name`:`x`},`spec`:{`selector`:{`namespace`:{`matchLabels`:{`team`:`a b`}}}}}", &opts, false,
	    NR "spec.selector.namespace.matchLabels: Invalid value: {\"team\":\"a b\"}: values[0][team]: Invalid "
	       "value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', "
	       "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
	       "'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
	       "[A-Za-z0-9])?')");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`namespace`:{`matchLabels`:{`Example.com/x`:``}}}}}",
	          &opts, false,
	          NR "spec.selector.namespace.matchLabels: Invalid value: {\"Example.com/x\":\"\"}: key: Invalid "
	             "value: \"Example.com/x\": prefix part a lowercase RFC 1123 subdomain must consist of lower case "
	             "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
	             "'example.com', regex used for validation is "
	             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`namespace`:{`matchLabels`:"
	          "{`example.com/app`:`web`,`tier`:``}}}}}",
	          &opts, true, SG_CRPOLICY_READY_MESSAGE);
}

/* What the API server's schema (or our bounds) refuses. */
static void t_schema_and_bounds(void)
{
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`dnsNames`:{`values`:`x`},"
	          "`isCA`:`yes`}}}",
	          &opts, false,
	          NR "[spec.allowed.dnsNames.values: Invalid value: \"string\": spec.allowed.dnsNames.values in body "
	             "must be of type array: \"string\", spec.allowed.isCA: Invalid value: \"string\": "
	             "spec.allowed.isCA in body must be of type boolean: \"string\"]");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{`maxDuration`:`1d`}}}",
	          &opts, false,
	          NR
	          "spec.constraints.maxDuration: Invalid value: \"1d\": duration \"1d\" has an unknown unit (ns, us, "
	          "ms, s, m or h)");
	CONDITION("{`metadata`:{`name`:`x`},`spec`:{`selector`:{`issuerRef`:{}},"
	          "`constraints`:{`privateKey`:{`minSize`:2048.5}}}}",
	          &opts, false,
	          NR "spec.constraints.privateKey.minSize: Invalid value: \"number\": "
	             "spec.constraints.privateKey.minSize in body must be of type integer: \"number\"");
	/* SG_CRPOLICY_MAX_VALUES + 1 values. */
	json_t *j =
	    json_of("{`metadata`:{`name`:`big`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`dnsNames`:{}}}}");
	json_t *values = json_array();
	for (int i = 0; i <= SG_CRPOLICY_MAX_VALUES; i++)
		json_array_append_new(values, json_string("a.example.com"));
	json_object_set_new(json_object_get(json_object_get(json_object_get(j, "spec"), "allowed"), "dnsNames"),
	                    "values", values);
	sg_crpolicy *p = NULL;
	SG_CHECK_OK(sg_crpolicy_compile(&p, j, &opts));
	SG_CHECK(p && !sg_crpolicy_ready(p));
	if (p)
		CHECK_STR(sg_crpolicy_condition_message(p),
		          NR "spec.allowed.dnsNames.values: Too many: 1025: must have at most 1024 items");
	sg_crpolicy_free(p);
	json_decref(j);
	/* A string over SG_CRPOLICY_MAX_STRING. */
	j = json_of("{`metadata`:{`name`:`long`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`commonName`:{}}}}");
	char *longv = malloc(SG_CRPOLICY_MAX_STRING + 2);
	memset(longv, 'a', SG_CRPOLICY_MAX_STRING + 1);
	longv[SG_CRPOLICY_MAX_STRING + 1] = 0;
	json_object_set_new(json_object_get(json_object_get(json_object_get(j, "spec"), "allowed"), "commonName"),
	                    "value", json_string(longv));
	free(longv);
	SG_CHECK_OK(sg_crpolicy_compile(&p, j, &opts));
	if (p)
		CHECK_STR(sg_crpolicy_condition_message(p),
		          NR "spec.allowed.commonName.value: Too long: may not be more than 4096 bytes");
	sg_crpolicy_free(p);
	json_decref(j);
	/* Not a policy at all. */
	j = json_of("[1]");
	SG_CHECK_RC(sg_crpolicy_compile(&p, j, &opts), SG_EINVAL);
	SG_CHECK(p == NULL);
	json_decref(j);
	j = json_of("{`metadata`:{},`spec`:{}}");
	SG_CHECK_RC(sg_crpolicy_compile(&p, j, &opts), SG_EINVAL);
	SG_CHECK_MSG("metadata.name");
	json_decref(j);
	sg_crpolicy_free(NULL);
}

/* ---- allowed ------------------------------------------------------------------------ */

/* The request of approver-policy's "all attributes set" evaluator tests. */
static void full_request(fake *x)
{
	fake_init(x);
	attr(x, CN, "hello-world");
	san(x, SG_CSR_FACTS_SAN_DNS, "example.com");
	san(x, SG_CSR_FACTS_SAN_DNS, "foo.bar");
	san(x, SG_CSR_FACTS_SAN_IP, "1.1.1.1");
	san(x, SG_CSR_FACTS_SAN_IP, "2.3.4.5");
	san(x, SG_CSR_FACTS_SAN_URI, "spiffe://cluster.local/ns/foo/sa/bar");
	san(x, SG_CSR_FACTS_SAN_URI, "foo.bar.com");
	san(x, SG_CSR_FACTS_SAN_EMAIL, "foo@example.com");
	san(x, SG_CSR_FACTS_SAN_EMAIL, "bar@example.com");
	attr(x, O, "company-1");
	attr(x, O, "company-2");
	attr(x, C, "country-1");
	attr(x, C, "country-2");
	attr(x, OU, "org-1");
	attr(x, OU, "org-2");
	attr(x, L, "loc-1");
	attr(x, L, "loc-2");
	attr(x, ST, "prov-1");
	attr(x, ST, "prov-2");
	attr(x, STREET, "street-1");
	attr(x, STREET, "street-2");
	attr(x, POSTAL, "post-1");
	attr(x, POSTAL, "post-2");
	attr(x, SERIAL, "serial-1");
	x->r.is_ca = true;
	usage(x, "crl sign");
	usage(x, "client auth");
}

static void t_allowed(void)
{
	fake x;
	full_request(&x);

	sg_crpolicy *nil = load("{`metadata`:{`name`:`nil`},`spec`:{`selector`:{`issuerRef`:{}}}}");
	EXPECT(nil, &x.r,
	       "[spec.allowed.commonName: Invalid value: \"hello-world\": no allowed value, "
	       "spec.allowed.dnsNames: Invalid value: [\"example.com\",\"foo.bar\"]: no allowed values, "
	       "spec.allowed.ipAddresses: Invalid value: [\"1.1.1.1\",\"2.3.4.5\"]: no allowed values, "
	       "spec.allowed.uris: Invalid value: [\"spiffe://cluster.local/ns/foo/sa/bar\",\"foo.bar.com\"]: no "
	       "allowed values, "
	       "spec.allowed.emailAddresses: Invalid value: [\"foo@example.com\",\"bar@example.com\"]: no allowed "
	       "values, "
	       "spec.allowed.isCA: Invalid value: true: nil, "
	       "spec.allowed.usages: Invalid value: [\"crl sign\",\"client auth\"]: nil, "
	       "spec.allowed.subject.organizations: Invalid value: [\"company-1\",\"company-2\"]: no allowed values, "
	       "spec.allowed.subject.countries: Invalid value: [\"country-1\",\"country-2\"]: no allowed values, "
	       "spec.allowed.subject.organizationalUnits: Invalid value: [\"org-1\",\"org-2\"]: no allowed values, "
	       "spec.allowed.subject.localities: Invalid value: [\"loc-1\",\"loc-2\"]: no allowed values, "
	       "spec.allowed.subject.provinces: Invalid value: [\"prov-1\",\"prov-2\"]: no allowed values, "
	       "spec.allowed.subject.streetAddresses: Invalid value: [\"street-1\",\"street-2\"]: no allowed values, "
	       "spec.allowed.subject.postalCodes: Invalid value: [\"post-1\",\"post-2\"]: no allowed values, "
	       "spec.allowed.subject.serialNumber: Invalid value: \"serial-1\": no allowed value]");
	fake empty;
	fake_init(&empty);
	EXPECT(nil, &empty.r, NULL);
	sg_crpolicy_free(nil);

	sg_crpolicy *other = load(
	    "{`metadata`:{`name`:`different`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	    "`commonName`:{`value`:`hello-world2`},`dnsNames`:{`values`:[`example.com2`,`foo.bar2`]},"
	    "`ipAddresses`:{`values`:[`1.1.1.12`,`2.3.4.52`]},"
	    "`uris`:{`values`:[`spiffe://cluster.local/ns/foo/sa/bar2`,`foo.bar.com2`]},"
	    "`emailAddresses`:{`values`:[`foo@example.com2`,`bar@example.com2`]},`isCA`:false,"
	    "`usages`:[`crl sign`,`server auth`],`subject`:{"
	    "`organizations`:{`values`:[`company-3`,`company-4`]},`countries`:{`values`:[`country-3`,`country-4`]},"
	    "`organizationalUnits`:{`values`:[`org-3`,`org-4`]},`localities`:{`values`:[`loc-3`,`loc-4`]},"
	    "`provinces`:{`values`:[`prov-3`,`prov-4`]},`streetAddresses`:{`values`:[`street-3`,`street-4`]},"
	    "`postalCodes`:{`values`:[`post-3`,`post-4`]},`serialNumber`:{`value`:`serial-2`}}}}}");
	EXPECT(other, &x.r,
	       "[spec.allowed.commonName.value: Invalid value: \"hello-world\": hello-world2, "
	       "spec.allowed.dnsNames.values: Invalid value: [\"example.com\",\"foo.bar\"]: example.com2, foo.bar2, "
	       "spec.allowed.ipAddresses.values: Invalid value: [\"1.1.1.1\",\"2.3.4.5\"]: 1.1.1.12, 2.3.4.52, "
	       "spec.allowed.uris.values: Invalid value: [\"spiffe://cluster.local/ns/foo/sa/bar\",\"foo.bar.com\"]: "
	       "spiffe://cluster.local/ns/foo/sa/bar2, foo.bar.com2, "
	       "spec.allowed.emailAddresses.values: Invalid value: [\"foo@example.com\",\"bar@example.com\"]: "
	       "foo@example.com2, bar@example.com2, "
	       "spec.allowed.isCA: Invalid value: true: false, "
	       "spec.allowed.usages: Invalid value: [\"crl sign\",\"client auth\"]: crl sign, server auth, "
	       "spec.allowed.subject.organizations.values: Invalid value: [\"company-1\",\"company-2\"]: company-3, "
	       "company-4, "
	       "spec.allowed.subject.countries.values: Invalid value: [\"country-1\",\"country-2\"]: country-3, "
	       "country-4, "
	       "spec.allowed.subject.organizationalUnits.values: Invalid value: [\"org-1\",\"org-2\"]: org-3, org-4, "
	       "spec.allowed.subject.localities.values: Invalid value: [\"loc-1\",\"loc-2\"]: loc-3, loc-4, "
	       "spec.allowed.subject.provinces.values: Invalid value: [\"prov-1\",\"prov-2\"]: prov-3, prov-4, "
	       "spec.allowed.subject.streetAddresses.values: Invalid value: [\"street-1\",\"street-2\"]: street-3, "
	       "street-4, "
	       "spec.allowed.subject.postalCodes.values: Invalid value: [\"post-1\",\"post-2\"]: post-3, post-4, "
	       "spec.allowed.subject.serialNumber.value: Invalid value: \"serial-1\": serial-2]");
	sg_crpolicy_free(other);

	sg_crpolicy *all = load(allow_all);
	EXPECT(all, &x.r, NULL);
	EXPECT(all, &empty.r, NULL);
	sg_crpolicy_free(all);

	/* Every field required, nothing requested. */
	sg_crpolicy *req =
	    load("{`metadata`:{`name`:`required`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	         "`commonName`:{`value`:`*`,`required`:true},`dnsNames`:{`values`:[`*`],`required`:true},"
	         "`ipAddresses`:{`values`:[`*`],`required`:true},`uris`:{`values`:[`*`],`required`:true},"
	         "`emailAddresses`:{`values`:[`*`],`required`:true},`subject`:{"
	         "`organizations`:{`values`:[`*`],`required`:true},`countries`:{`values`:[`*`],`required`:true},"
	         "`organizationalUnits`:{`values`:[`*`],`required`:true},`localities`:{`values`:[`*`],`required`:true},"
	         "`provinces`:{`values`:[`*`],`required`:true},`streetAddresses`:{`values`:[`*`],`required`:true},"
	         "`postalCodes`:{`values`:[`*`],`required`:true},`serialNumber`:{`value`:`*`,`required`:true}}}}}");
	EXPECT(req, &empty.r,
	       "[spec.allowed.commonName.required: Required value: true, "
	       "spec.allowed.dnsNames.required: Required value: true, "
	       "spec.allowed.ipAddresses.required: Required value: true, "
	       "spec.allowed.uris.required: Required value: true, "
	       "spec.allowed.emailAddresses.required: Required value: true, "
	       "spec.allowed.subject.organizations.required: Required value: true, "
	       "spec.allowed.subject.countries.required: Required value: true, "
	       "spec.allowed.subject.organizationalUnits.required: Required value: true, "
	       "spec.allowed.subject.localities.required: Required value: true, "
	       "spec.allowed.subject.provinces.required: Required value: true, "
	       "spec.allowed.subject.streetAddresses.required: Required value: true, "
	       "spec.allowed.subject.postalCodes.required: Required value: true, "
	       "spec.allowed.subject.serialNumber.required: Required value: true]");
	x.r.is_ca = false;
	x.r.usage_count = 0;
	EXPECT(req, &x.r, NULL);
	sg_crpolicy_free(req);
}

/* §4 of the contract, and docs/examples/default-deny-all.yaml. */
static void t_dns_and_default_deny(void)
{
	sg_crpolicy *p = load("{`metadata`:{`name`:`two`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                      "`dnsNames`:{`values`:[`example.com`,`foo.example.com`]}}}}");
	fake x;
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_DNS, "bar.example.com");
	EXPECT(p, &x.r,
	       "spec.allowed.dnsNames.values: Invalid value: [\"bar.example.com\"]: example.com, foo.example.com");
	sg_crpolicy_free(p);

	p = load(default_deny_all);
	EXPECT(p, &x.r, "spec.allowed.dnsNames.values: Invalid value: [\"bar.example.com\"]"); /* empty detail */
	fake empty;
	fake_init(&empty);
	EXPECT(p, &empty.r, "spec.allowed.dnsNames.required: Required value: true");
	sg_crpolicy_free(p);
}

/* example.com.yaml (without its CEL rule): wildcard semantics of §4.3. */
/* CEL validations as approver-policy's runValidations applies them:
 * after the values check, each rule on each value in order; false denies
 * with the rule's message or "failed rule: <rule>"; an evaluation error
 * is an InternalError at that index (it denies too); a rule that does not
 * compile, or is not a bool, makes the policy NotReady naming it. */
static void t_cel(void)
{
	/* docs/examples/example.com.yaml with its rule */
	sg_crpolicy *p = load(example_com);
	SG_CHECK(sg_crpolicy_ready(p));
	fake x;
	fake_init(&x);
	attr(&x, CN, "example.com");
	san(&x, SG_CSR_FACTS_SAN_DNS, "www.example.com");
	usage(&x, "server auth");
	EXPECT(p, &x.r, NULL);
	san(&x, SG_CSR_FACTS_SAN_DNS, "*.example.com");
	EXPECT(p, &x.r,
	       "spec.allowed.dnsNames.validations[0]: Invalid value: \"*.example.com\": Wildcard certificates are not "
	       "allowed");
	sg_crpolicy_free(p);

	/* A SPIFFE ID bound to the request's namespace (cr.namespace). */
	p = load("{`metadata`:{`name`:`spiffe`},`spec`:{`allowed`:{`uris`:{`validations`:[{`rule`:"
	         "`self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')`}]}},"
	         "`selector`:{`issuerRef`:{}}}}");
	SG_CHECK(sg_crpolicy_ready(p));
	fake_init(&x);
	x.r.name_space = "team-a";
	san(&x, SG_CSR_FACTS_SAN_URI, "spiffe://cluster.local/ns/team-a/sa/web");
	EXPECT(p, &x.r, NULL);
	x.r.name_space = "team-b";
	EXPECT(p, &x.r,
	       "spec.allowed.uris.validations[0]: Invalid value: \"spiffe://cluster.local/ns/team-a/sa/web\": failed "
	       "rule: self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')");
	sg_crpolicy_free(p);

	/* cr's other fields; every value is judged (the second fails). */
	p = load("{`metadata`:{`name`:`who`},`spec`:{`allowed`:{`dnsNames`:{`validations`:["
	         "{`rule`:`self.startsWith(cr.name + '.') && cr.username == 'alice' && 'devs' in cr.groups`,"
	         "`message`:`not alice's`}]}},`selector`:{`issuerRef`:{}}}}");
	fake_init(&x);
	const char *groups[] = {"system:authenticated", "devs"};
	x.r.name = "web";
	x.r.username = "alice";
	x.r.groups = groups;
	x.r.group_count = 2;
	san(&x, SG_CSR_FACTS_SAN_DNS, "web.example");
	san(&x, SG_CSR_FACTS_SAN_DNS, "api.example");
	EXPECT(p, &x.r, "spec.allowed.dnsNames.validations[0]: Invalid value: \"api.example\": not alice's");
	x.r.group_count = 1;
	EXPECT(p, &x.r,
	       "[spec.allowed.dnsNames.validations[0]: Invalid value: \"web.example\": not alice's, "
	       "spec.allowed.dnsNames.validations[0]: Invalid value: \"api.example\": not alice's]");
	sg_crpolicy_free(p);

	/* An evaluation error: an InternalError at the rule's index. */
	p = load("{`metadata`:{`name`:`err`},`spec`:{`allowed`:{`commonName`:{`value`:`*`,`validations`:["
	         "{`rule`:`int(self) > 0`}]}},`selector`:{`issuerRef`:{}}}}");
	SG_CHECK(sg_crpolicy_ready(p));
	fake_init(&x);
	attr(&x, CN, "not-a-number");
	sg_crpolicy_verdict v;
	SG_CHECK_OK(sg_crpolicy_evaluate(p, &x.r, &v));
	SG_CHECK(v.denied && v.message &&
	         strncmp(v.message, "spec.allowed.commonName.validations[0]: Internal error: ", 56) == 0);
	sg_crpolicy_verdict_clear(&v);
	attr(&x, CN, "12"); /* a second CN: each judged alone */
	x.f.attr_count = 0;
	x.f.rdn_count = 0;
	attr(&x, CN, "12");
	EXPECT(p, &x.r, NULL);
	sg_crpolicy_free(p);

	/* Compile errors: NotReady, naming the field, the rule and why. */
	p = load("{`metadata`:{`name`:`c1`},`spec`:{`allowed`:{`dnsNames`:{`values`:[`*`],`validations`:["
	         "{`rule`:`self.size()`},{`rule`:`self +`},{`rule`:`nope(self)`},{`rule`:`self != ''`}]}},"
	         "`selector`:{`issuerRef`:{}}}}");
	SG_CHECK(!sg_crpolicy_ready(p));
	const char *m = sg_crpolicy_condition_message(p);
	SG_CHECK(strstr(m, "spec.allowed.dnsNames.validations[0]: Invalid value: \"self.size()\": got int, wanted bool "
	                   "result type") != NULL);
	SG_CHECK(strstr(m, "spec.allowed.dnsNames.validations[1]: Invalid value: \"self +\": ") != NULL);
	SG_CHECK(strstr(m, "spec.allowed.dnsNames.validations[2]: Invalid value: \"nope(self)\": ") != NULL);
	SG_CHECK(strstr(m, "validations[3]") == NULL);
	sg_crpolicy_free(p);

	/* Rules are shared by text: many policies, one compile each rule. */
	for (int i = 0; i < 50; i++) {
		sg_crpolicy *a = load(example_com), *b = load(example_com);
		SG_CHECK(sg_crpolicy_ready(a) && sg_crpolicy_ready(b));
		sg_crpolicy_free(a);
		sg_crpolicy_free(b);
	}
}

/* The shared rules at and past their table's 4,096 entries: 4,200
 * policies held at once, each with a rule of its own (the last ones are
 * compiled uncached and freed with their policy), evaluate right; then a
 * second round, which drops the first round's unheld entries. ASan checks
 * that nothing is freed twice or leaked. */
static void t_cel_cache_limit(void)
{
	enum { N = 4200 };
	static sg_crpolicy *held[N];
	fake x;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			char text[256];
			snprintf(text, sizeof(text),
			         "{`metadata`:{`name`:`r%d`},`spec`:{`allowed`:{`dnsNames`:{`validations`:"
			         "[{`rule`:`self != 'x%d-%d.example'`}]}},`selector`:{`issuerRef`:{}}}}",
			         i, round, i);
			held[i] = load(text);
		}
		bool all_ready = true;
		for (int i = 0; i < N; i++)
			all_ready = all_ready && sg_crpolicy_ready(held[i]);
		SG_CHECK(all_ready);
		for (int k = 0; k < 2; k++) {
			int i = k ? N - 1 : 0; /* one cached, one past the table */
			char dns[64];
			snprintf(dns, sizeof(dns), "x%d-%d.example", round, i);
			fake_init(&x);
			san(&x, SG_CSR_FACTS_SAN_DNS, dns);
			sg_crpolicy_verdict v;
			SG_CHECK_OK(sg_crpolicy_evaluate(held[i], &x.r, &v));
			SG_CHECK(v.denied && v.message && strstr(v.message, "failed rule: self != ") != NULL);
			sg_crpolicy_verdict_clear(&v);
			SG_CHECK_OK(sg_crpolicy_evaluate(held[(i + 1) % N], &x.r, &v));
			SG_CHECK(!v.denied);
			sg_crpolicy_verdict_clear(&v);
		}
		for (int i = 0; i < N; i++)
			sg_crpolicy_free(held[i]);
	}
}

static void t_example_com(void)
{
	sg_crpolicy *p = load(example_com_no_cel);
	fake x;
	fake_init(&x);
	attr(&x, CN, "example.com");
	san(&x, SG_CSR_FACTS_SAN_DNS, "www.example.com");
	san(&x, SG_CSR_FACTS_SAN_DNS, "a.b.example.com");
	san(&x, SG_CSR_FACTS_SAN_DNS, "*.example.com"); /* the literal wildcard is allowed too (#149) */
	usage(&x, "server auth");
	EXPECT(p, &x.r, NULL);

	san(&x, SG_CSR_FACTS_SAN_DNS, "bar.com");
	usage(&x, "client auth");
	x.f.key_alg = SG_CSR_FACTS_KEY_ECDSA;
	x.f.key_size = 256;
	EXPECT(p, &x.r,
	       "[spec.allowed.dnsNames.values: Invalid value: "
	       "[\"www.example.com\",\"a.b.example.com\",\"*.example.com\",\"bar.com\"]: example.com, *.example.com, "
	       "spec.allowed.usages: Invalid value: [\"server auth\",\"client auth\"]: server auth], "
	       "[spec.constraints.privateKey.algorithm: Invalid value: \"ECDSA\": RSA, "
	       "spec.constraints.privateKey.minSize: Invalid value: \"256\": 2048]");
	sg_crpolicy_free(p);
}

static void t_is_ca_and_usages(void)
{
	fake x;
	fake_init(&x);
	x.r.is_ca = true;
	sg_crpolicy *no =
	    load("{`metadata`:{`name`:`n`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`isCA`:false}}}");
	sg_crpolicy *yes =
	    load("{`metadata`:{`name`:`y`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`isCA`:true}}}");
	EXPECT(no, &x.r, "spec.allowed.isCA: Invalid value: true: false");
	EXPECT(yes, &x.r, NULL);
	x.r.is_ca = false;
	EXPECT(no, &x.r, NULL);
	EXPECT(yes, &x.r, NULL);
	sg_crpolicy_free(no);
	sg_crpolicy_free(yes);

	sg_crpolicy *none =
	    load("{`metadata`:{`name`:`u`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`usages`:[]}}}");
	sg_crpolicy *two = load("{`metadata`:{`name`:`w`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                        "`usages`:[`server auth`,`digital signature`]}}}");
	EXPECT(none, &x.r, NULL); /* no usages requested: nothing to check */
	usage(&x, "server auth");
	usage(&x, "digital signature");
	EXPECT(none, &x.r, "spec.allowed.usages: Invalid value: [\"server auth\",\"digital signature\"]");
	EXPECT(two, &x.r, NULL);
	usage(&x, "key encipherment");
	EXPECT(two, &x.r,
	       "spec.allowed.usages: Invalid value: [\"server auth\",\"digital signature\",\"key encipherment\"]: "
	       "server auth, digital signature");
	sg_crpolicy_free(none);
	sg_crpolicy_free(two);
	/* The CRD's enum keeps wildcards out of allowed.usages. */
	CONDITION("{`metadata`:{`name`:`w`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{`usages`:[`server auth`,"
	          "`* auth`]}}}",
	          &opts, false,
	          NR "spec.allowed.usages[1]: Unsupported value: \"* auth\": supported values: \"signing\", \"digital "
	             "signature\", \"content commitment\", \"key encipherment\", \"key agreement\", \"data "
	             "encipherment\", \"cert sign\", \"crl sign\", \"encipher only\", \"decipher only\", \"any\", "
	             "\"server auth\", \"client auth\", \"code signing\", \"email protection\", \"s/mime\", \"ipsec "
	             "end system\", \"ipsec tunnel\", \"ipsec user\", \"timestamping\", \"ocsp signing\", "
	             "\"microsoft sgc\", \"netscape sgc\"");
}

/* v0.27's raw-SAN checks (evaluator_rawbypass_test.go). */
static void t_sans_raw(void)
{
	sg_crpolicy *dns = load("{`metadata`:{`name`:`dns`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                        "`dnsNames`:{`values`:[`allowed.example.com`]}}}}");
	fake x;
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_DNS, "allowed.example.com");
	other_name(&x, UPN, "administrator@victim.corp");
	EXPECT(dns, &x.r,
	       "spec.allowed.otherNames[1.3.6.1.4.1.311.20.2.3]: Invalid value: [\"administrator@victim.corp\"]: no "
	       "allowed values");

	static const struct {
		sg_csr_facts_san_type t;
		const char *name;
	} denied[] = {
	    {SG_CSR_FACTS_SAN_X400, "x400Address"},
	    {SG_CSR_FACTS_SAN_DIRECTORY, "directoryName"},
	    {SG_CSR_FACTS_SAN_EDI_PARTY, "ediPartyName"},
	    {SG_CSR_FACTS_SAN_REGISTERED_ID, "registeredID"},
	};
	for (size_t i = 0; i < 4; i++) {
		fake_init(&x);
		san(&x, SG_CSR_FACTS_SAN_DNS, "allowed.example.com");
		san(&x, denied[i].t, "3000");
		san(&x, denied[i].t, "3100"); /* twice: one message (ToAggregate drops duplicates) */
		char want[160];
		snprintf(want, sizeof(want),
		         "spec.allowed.subjectAltName.%s: Invalid value: \"%s\": %s SAN entries are not "
		         "permitted",
		         denied[i].name, denied[i].name, denied[i].name);
		EXPECT(dns, &x.r, want);
	}
	/* All four: in approver-policy's order, not the request's. */
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_REGISTERED_ID, "1.2.3.4.5");
	san(&x, SG_CSR_FACTS_SAN_X400, "3000");
	san(&x, SG_CSR_FACTS_SAN_EDI_PARTY, "810178");
	san(&x, SG_CSR_FACTS_SAN_DIRECTORY, "3000");
	EXPECT(
	    dns, &x.r,
	    "[spec.allowed.subjectAltName.directoryName: Invalid value: \"directoryName\": directoryName SAN "
	    "entries are not permitted, spec.allowed.subjectAltName.x400Address: Invalid value: \"x400Address\": "
	    "x400Address SAN entries are not permitted, spec.allowed.subjectAltName.ediPartyName: Invalid value: "
	    "\"ediPartyName\": ediPartyName SAN entries are not permitted, spec.allowed.subjectAltName.registeredID: "
	    "Invalid value: \"registeredID\": registeredID SAN entries are not permitted]");
	sg_crpolicy_free(dns);

	sg_crpolicy *upn = load("{`metadata`:{`name`:`upn`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                        "`dnsNames`:{`values`:[`allowed.example.com`]},"
	                        "`otherNames`:[{`oid`:`1.3.6.1.4.1.311.20.2.3`,`values`:[`*@tenant.example.com`]}]}}}");
	sg_crpolicy *upn_required = load(
	    "{`metadata`:{`name`:`upn-required`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	    "`dnsNames`:{`values`:[`allowed.example.com`]},"
	    "`otherNames`:[{`oid`:`1.3.6.1.4.1.311.20.2.3`,`values`:[`*@tenant.example.com`],`required`:true}]}}}");
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_DNS, "allowed.example.com");
	other_name(&x, UPN, "user@tenant.example.com");
	EXPECT(upn, &x.r, NULL);
	EXPECT(upn_required, &x.r, NULL);
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_DNS, "allowed.example.com");
	other_name(&x, UPN, "administrator@victim.corp");
	other_name(&x, "1.2.3.4", "020107");
	other_name(&x, UPN, "user@tenant.example.com");
	EXPECT(upn, &x.r,
	       "[spec.allowed.otherNames[1.3.6.1.4.1.311.20.2.3].values: Invalid value: "
	       "[\"administrator@victim.corp\",\"user@tenant.example.com\"]: *@tenant.example.com, "
	       "spec.allowed.otherNames[1.2.3.4]: Invalid value: [\"020107\"]: no allowed values]");
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_DNS, "allowed.example.com");
	EXPECT(upn, &x.r, NULL);
	EXPECT(upn_required, &x.r, "spec.allowed.otherNames[1.3.6.1.4.1.311.20.2.3].required: Required value: true");
	sg_crpolicy_free(upn);
	sg_crpolicy_free(upn_required);

	/* What cert-manager's SAN decoder refuses, and two SAN extensions;
	 * the constraints evaluator still speaks after the allowed one. */
	sg_crpolicy *p = load("{`metadata`:{`name`:`san`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                      "`dnsNames`:{`values`:[`*`]}},`constraints`:{`privateKey`:{`minSize`:4096}}}}");
	fake_init(&x);
	san(&x, SG_CSR_FACTS_SAN_DNS, "a.example.com");
	x.f.san_decode_error = "asn1: structure error: sequence tag mismatch";
	EXPECT(p, &x.r,
	       "subjectAltName (SAN) extension could not be decoded: asn1: structure error: sequence tag mismatch, "
	       "spec.constraints.privateKey.minSize: Invalid value: \"2048\": 4096");
	x.f.san_decode_error = NULL;
	x.f.san_extensions = 2;
	EXPECT(p, &x.r,
	       "CSR contains multiple SAN extensions; at most one is permitted, "
	       "spec.constraints.privateKey.minSize: Invalid value: \"2048\": 4096");
	sg_crpolicy_free(p);
}

/* v0.27's raw-subject checks. */
static void t_subject_raw(void)
{
	sg_crpolicy *tenant = load("{`metadata`:{`name`:`tenant`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                           "`commonName`:{`value`:`*.tenant.example.com`},"
	                           "`subject`:{`serialNumber`:{`value`:`legit-*`}}}}}");
	fake x;
	fake_init(&x);
	attr(&x, CN, "kubernetes-admin");
	attr(&x, CN, "app.tenant.example.com");
	EXPECT(tenant, &x.r,
	       "spec.allowed.commonName[0].value: Invalid value: \"kubernetes-admin\": *.tenant.example.com");
	fake_init(&x);
	attr(&x, CN, "a.tenant.example.com");
	attr(&x, CN, "b.tenant.example.com");
	EXPECT(tenant, &x.r, NULL);
	fake_init(&x);
	attr(&x, CN, "app.tenant.example.com");
	attr(&x, SERIAL, "legit-001");
	attr(&x, SERIAL, "smuggled-002");
	EXPECT(tenant, &x.r, "spec.allowed.subject.serialNumber[1].value: Invalid value: \"smuggled-002\": legit-*");
	/* An empty CN among several is "not set" for that index. */
	sg_crpolicy *cn_req = load("{`metadata`:{`name`:`cnreq`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                           "`commonName`:{`value`:`*`,`required`:true}}}}");
	fake_init(&x);
	attr(&x, CN, "");
	attr(&x, CN, "b");
	EXPECT(cn_req, &x.r, "spec.allowed.commonName[0].required: Required value: true");
	fake_init(&x);
	attr(&x, CN, "");
	EXPECT(cn_req, &x.r, "spec.allowed.commonName.required: Required value: true");
	sg_crpolicy_free(cn_req);

	/* Attributes outside the named fields need otherAttributes. */
	fake_init(&x);
	attr(&x, CN, "app.tenant.example.com");
	attr_n(&x, EMAIL_OID, SG_DER_IA5STRING, "root@victim.corp", 16);
	EXPECT(tenant, &x.r,
	       "spec.allowed.subject.otherAttributes[1.2.840.113549.1.9.1]: Invalid value: [\"root@victim.corp\"]: no "
	       "allowed values");
	sg_crpolicy *email =
	    load("{`metadata`:{`name`:`email`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	         "`commonName`:{`value`:`*.tenant.example.com`},`subject`:{`otherAttributes`:["
	         "{`oid`:`1.2.840.113549.1.9.1`,`values`:[`*@tenant.example.com`],`required`:true}]}}}}");
	EXPECT(email, &x.r,
	       "spec.allowed.subject.otherAttributes[1.2.840.113549.1.9.1].values: Invalid value: "
	       "[\"root@victim.corp\"]: *@tenant.example.com");
	fake_init(&x);
	attr(&x, CN, "app.tenant.example.com");
	attr_n(&x, EMAIL_OID, SG_DER_IA5STRING, "ops@tenant.example.com", 22);
	EXPECT(email, &x.r, NULL);
	fake_init(&x);
	attr(&x, CN, "app.tenant.example.com");
	EXPECT(email, &x.r,
	       "spec.allowed.subject.otherAttributes[1.2.840.113549.1.9.1].required: Required value: true");

	/* Non-string values: under a named field, under CN, under another OID
	 * (which still counts as present for `required`), and UniversalString,
	 * which Go does not read as a string. */
	fake_init(&x);
	attr(&x, CN, "app.tenant.example.com");
	attr_n(&x, O, SG_DER_OCTET_STRING, "0409", 4);
	attr_n(&x, OU, SG_CSR_FACTS_UNIVERSALSTRING, "U", 1);
	attr_n(&x, EMAIL_OID, SG_DER_INTEGER, "020101", 6);
	EXPECT(email, &x.r,
	       "[spec.allowed.subject.organizations: Invalid value: \"<non-string value>\": subject attribute uses an "
	       "unsupported ASN.1 type or string encoding; re-issue the certificate with a UTF8String or "
	       "PrintableString subject, spec.allowed.subject.organizationalUnits: Invalid value: \"<non-string "
	       "value>\": subject attribute uses an unsupported ASN.1 type or string encoding; re-issue the "
	       "certificate with a UTF8String or PrintableString subject, "
	       "spec.allowed.subject.otherAttributes[1.2.840.113549.1.9.1]: Invalid value: \"<non-string value>\": "
	       "subject attribute uses an unsupported ASN.1 type or string encoding; re-issue the certificate with a "
	       "UTF8String or PrintableString subject]");
	fake_init(&x);
	attr_n(&x, CN, SG_DER_INTEGER, "02012a", 6);
	attr(&x, CN, "app.tenant.example.com");
	attr_n(&x, SERIAL, SG_DER_BIT_STRING, "030100", 6);
	EXPECT(tenant, &x.r,
	       "[spec.allowed.commonName: Invalid value: \"<non-string value>\": subject attribute 2.5.4.3 uses an "
	       "unsupported ASN.1 type or string encoding; re-issue the certificate with a UTF8String or "
	       "PrintableString subject, spec.allowed.subject.serialNumber: Invalid value: \"<non-string value>\": "
	       "subject attribute 2.5.4.5 uses an unsupported ASN.1 type or string encoding; re-issue the certificate "
	       "with a UTF8String or PrintableString subject]");
	/* Multi-valued O strings are fine when allowed. */
	sg_crpolicy *orgs = load("{`metadata`:{`name`:`orgs`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                         "`commonName`:{`value`:`*.tenant.example.com`},"
	                         "`subject`:{`organizations`:{`values`:[`tenant-a`,`tenant-platform`]}}}}}");
	fake_init(&x);
	attr(&x, CN, "app.tenant.example.com");
	attr(&x, O, "tenant-a");
	attr(&x, O, "tenant-platform");
	EXPECT(orgs, &x.r, NULL);
	sg_crpolicy_free(orgs);
	sg_crpolicy_free(email);
	sg_crpolicy_free(tenant);
}

/* How values reach messages: Go's %q for one string, encoding/json for a list. */
static void t_quoting(void)
{
	sg_crpolicy *p = load("{`metadata`:{`name`:`q`},`spec`:{`selector`:{`issuerRef`:{}},`allowed`:{"
	                      "`commonName`:{`value`:`x`},`dnsNames`:{`values`:[`x`]}}}}");
	fake x;
	fake_init(&x);
	static const char cn[] = "a\"b\\c\n\t\x01\x7f\xff \xc3\xa9 \xc2\xa0\xe2\x80\x8b\xf0\x9f\x98\x80\xc2\x85";
	attr_n(&x, CN, SG_CSR_FACTS_TELETEXSTRING, cn, sizeof(cn) - 1);
	static const char dns[] = "<a>&\"\\\n\b\f\x01\x7f\xff\xe2\x80\xa8\xc3\xa9\0z";
	sg_csr_facts_san *s = &x.sans[x.f.san_count++];
	s->type = SG_CSR_FACTS_SAN_DNS;
	s->value = dns;
	s->value_len = sizeof(dns) - 1;
	EXPECT(p, &x.r,
	       "[spec.allowed.commonName.value: Invalid value: "
	       "\"a\\\"b\\\\c\\n\\t\\x01\\x7f\\xff \xc3\xa9 \\u00a0\\u200b\xf0\x9f\x98\x80\\u0085\": x, "
	       "spec.allowed.dnsNames.values: Invalid value: "
	       "[\"\\u003ca\\u003e\\u0026\\\"\\\\\\n\\b\\f\\u0001\x7f\\ufffd\\u2028\xc3\xa9\\u0000z\"]: x]");
	sg_crpolicy_free(p);

	char *m = NULL;
	SG_CHECK_OK(sg_crpolicy_approved_message("team-a-web", &m));
	CHECK_STR(m, "Approved by CertificateRequestPolicy: \"team-a-web\"");
	free(m);
}

/* ---- constraints ------------------------------------------------------------------- */

static void t_constraints(void)
{
	sg_crpolicy *d = load("{`metadata`:{`name`:`d`},`spec`:{`selector`:{`issuerRef`:{}},"
	                      "`constraints`:{`minDuration`:`1h`,`maxDuration`:`24h`}}}");
	fake x;
	fake_init(&x);
	EXPECT(d, &x.r,
	       "[spec.constraints.maxDuration: Invalid value: \"nil\": 24h0m0s, "
	       "spec.constraints.minDuration: Invalid value: \"nil\": 1h0m0s]");
	x.r.has_duration = true;
	x.r.duration_seconds = 60;
	EXPECT(d, &x.r, "spec.constraints.minDuration: Invalid value: \"1m0s\": 1h0m0s");
	x.r.duration_seconds = 48 * 3600;
	EXPECT(d, &x.r, "spec.constraints.maxDuration: Invalid value: \"48h0m0s\": 24h0m0s");
	/* Both bounds are inclusive. */
	x.r.duration_seconds = 3600;
	EXPECT(d, &x.r, NULL);
	x.r.duration_seconds = 24 * 3600;
	EXPECT(d, &x.r, NULL);
	x.r.duration_seconds = 3599;
	EXPECT(d, &x.r, "spec.constraints.minDuration: Invalid value: \"59m59s\": 1h0m0s");
	x.r.duration_seconds = 24 * 3600 + 1;
	EXPECT(d, &x.r, "spec.constraints.maxDuration: Invalid value: \"24h0m1s\": 24h0m0s");
	x.r.duration_seconds = 0;
	EXPECT(d, &x.r, "spec.constraints.minDuration: Invalid value: \"0s\": 1h0m0s");
	sg_crpolicy_free(d);

	/* Fractions of a second: the parser keeps whole seconds and says
	 * when it dropped a fraction, so 24h0.5s exceeds 24h as in Go. */
	int64_t sec;
	bool frac;
	SG_CHECK_OK(sg_crpolicy_duration_parse("24h0.5s", &sec, &frac));
	SG_CHECK(sec == 86400 && frac);
	SG_CHECK_OK(sg_crpolicy_duration_parse("1.5h", &sec, &frac));
	SG_CHECK(sec == 5400 && !frac);
	SG_CHECK_OK(sg_crpolicy_duration_parse("1500ms", &sec, &frac));
	SG_CHECK(sec == 1 && frac);
	SG_CHECK_OK(sg_crpolicy_duration_parse("0", &sec, &frac));
	SG_CHECK(sec == 0 && !frac);
	SG_CHECK_OK(sg_crpolicy_duration_parse("-90s", &sec, &frac));
	SG_CHECK(sec == -90 && !frac);
	SG_CHECK_OK(sg_crpolicy_duration_parse("2562047h47m16.854775807s", &sec, &frac)); /* Go's maximum */
	SG_CHECK(sec == 9223372036 && frac);
	SG_CHECK_RC(sg_crpolicy_duration_parse("1d", &sec, &frac), SG_EINVAL);
	SG_CHECK_RC(sg_crpolicy_duration_parse("-+1h", &sec, &frac), SG_EINVAL);
	x.r.has_duration = true;
	x.r.duration_seconds = 86400;
	x.r.duration_fraction = true;
	d = load("{`metadata`:{`name`:`d`},`spec`:{`selector`:{`issuerRef`:{}},"
		 "`constraints`:{`minDuration`:`1h0.5s`,`maxDuration`:`24h`}}}");
	EXPECT(d, &x.r, "spec.constraints.maxDuration: Invalid value: \"24h0m0s\": 24h0m0s"); /* Go: "24h0m0.5s" */
	x.r.duration_seconds = 3600;
	x.r.duration_fraction = false;
	EXPECT(d, &x.r, "spec.constraints.minDuration: Invalid value: \"1h0m0s\": 1h0m0s"); /* Go: ...: 1h0m0.5s */
	x.r.duration_seconds = 3601;
	EXPECT(d, &x.r, NULL);
	sg_crpolicy_free(d);
	x.r.duration_fraction = false;

	sg_crpolicy *only_max = load(
	    "{`metadata`:{`name`:`m`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{`maxDuration`:`2160h`}}}");
	x.r.has_duration = false;
	EXPECT(only_max, &x.r, "spec.constraints.maxDuration: Invalid value: \"nil\": 2160h0m0s");
	sg_crpolicy_free(only_max);
	sg_crpolicy *empty = load("{`metadata`:{`name`:`e`},`spec`:{`selector`:{`issuerRef`:{}},`constraints`:{}}}");
	EXPECT(empty, &x.r, NULL);
	sg_crpolicy_free(empty);

	/* constraints/evaluator_test.go */
	sg_crpolicy *ec4000 = load("{`metadata`:{`name`:`k1`},`spec`:{`selector`:{`issuerRef`:{}},"
	                           "`constraints`:{`privateKey`:{`algorithm`:`ECDSA`,`minSize`:4000}}}}");
	sg_crpolicy *rsa200 = load("{`metadata`:{`name`:`k2`},`spec`:{`selector`:{`issuerRef`:{}},"
	                           "`constraints`:{`privateKey`:{`algorithm`:`RSA`,`maxSize`:200}}}}");
	sg_crpolicy *ed = load("{`metadata`:{`name`:`k3`},`spec`:{`selector`:{`issuerRef`:{}},"
	                       "`constraints`:{`privateKey`:{`algorithm`:`Ed25519`}}}}");
	sg_crpolicy *sizes = load("{`metadata`:{`name`:`k4`},`spec`:{`selector`:{`issuerRef`:{}},"
	                          "`constraints`:{`privateKey`:{`minSize`:2048,`maxSize`:3072}}}}");
	fake_init(&x); /* RSA 2048 */
	EXPECT(ec4000, &x.r,
	       "[spec.constraints.privateKey.algorithm: Invalid value: \"RSA\": ECDSA, "
	       "spec.constraints.privateKey.minSize: Invalid value: \"2048\": 4000]");
	EXPECT(sizes, &x.r, NULL);
	x.f.key_size = 3072;
	EXPECT(sizes, &x.r, NULL);
	x.f.key_size = 3073;
	EXPECT(sizes, &x.r, "spec.constraints.privateKey.maxSize: Invalid value: \"3073\": 3072");
	x.f.key_size = 2047;
	EXPECT(sizes, &x.r, "spec.constraints.privateKey.minSize: Invalid value: \"2047\": 2048");
	x.f.key_alg = SG_CSR_FACTS_KEY_ECDSA;
	x.f.key_size = 256;
	EXPECT(rsa200, &x.r,
	       "[spec.constraints.privateKey.algorithm: Invalid value: \"ECDSA\": RSA, "
	       "spec.constraints.privateKey.maxSize: Invalid value: \"256\": 200]");
	x.f.key_alg = SG_CSR_FACTS_KEY_ED25519;
	x.f.key_size = -1;
	EXPECT(ed, &x.r, NULL);
	EXPECT(sizes, &x.r, "spec.constraints.privateKey.minSize: Invalid value: \"-1\": 2048");
	/* A key approver-policy cannot size: an evaluation error, no verdict. */
	x.f.key_alg = SG_CSR_FACTS_KEY_OTHER;
	x.f.key_size = 0;
	x.f.key_oid = "1.3.101.110";
	sg_crpolicy_verdict v;
	SG_CHECK_RC(sg_crpolicy_evaluate(ed, &x.r, &v), SG_EINVAL);
	SG_CHECK_MSG("unrecognised public key type");
	sg_crpolicy_verdict_clear(&v);
	sg_crpolicy *nokey = load("{`metadata`:{`name`:`nk`},`spec`:{`selector`:{`issuerRef`:{}}}}");
	EXPECT(nokey, &x.r, NULL); /* no privateKey constraint: the key is not looked at */
	sg_crpolicy_free(nokey);
	sg_crpolicy_free(ec4000);
	sg_crpolicy_free(rsa200);
	sg_crpolicy_free(ed);
	sg_crpolicy_free(sizes);
}

/* ---- selectors --------------------------------------------------------------------- */

static void t_selectors(void)
{
	fake x;
	fake_init(&x);
	bool m;
	sg_crpolicy *ns_only = load("{`metadata`:{`name`:`a`},`spec`:{`selector`:{`namespace`:{}}}}");
	x.r.issuer_name = "anything";
	SG_CHECK(sg_crpolicy_selects_issuer(ns_only, &x.r));
	SG_CHECK(!sg_crpolicy_needs_namespace_labels(ns_only));
	SG_CHECK_OK(sg_crpolicy_selects(ns_only, &x.r, NULL, &m));
	SG_CHECK(m);
	sg_crpolicy_free(ns_only);

	/* all-options' issuerRef, without the rest of the policy. */
	sg_crpolicy *ir = load("{`metadata`:{`name`:`b`},`spec`:{`selector`:{`issuerRef`:"
	                       "{`name`:`my-ca-*`,`kind`:`*Issuer`,`group`:`cert-manager.io`}}}}");
	x.r.issuer_name = "my-ca-1";
	x.r.issuer_kind = "";
	x.r.issuer_group = NULL;
	SG_CHECK(sg_crpolicy_selects_issuer(ir, &x.r)); /* kind Issuer, group cert-manager.io by default */
	x.r.issuer_kind = "ClusterIssuer";
	SG_CHECK(sg_crpolicy_selects_issuer(ir, &x.r));
	x.r.issuer_group = "signet.dev";
	SG_CHECK(!sg_crpolicy_selects_issuer(ir, &x.r));
	x.r.issuer_group = "cert-manager.io";
	x.r.issuer_name = "other-ca";
	SG_CHECK(!sg_crpolicy_selects_issuer(ir, &x.r));
	x.r.issuer_name = "my-ca-";
	SG_CHECK(sg_crpolicy_selects_issuer(ir, &x.r));
	x.r.issuer_kind = "SignetIssuerX";
	SG_CHECK(!sg_crpolicy_selects_issuer(ir, &x.r));
	sg_crpolicy_free(ir);

	sg_crpolicy *kind = load("{`metadata`:{`name`:`c`},`spec`:{`selector`:{`issuerRef`:{`kind`:`Issuer`}}}}");
	sg_crpolicy *empty_group = load("{`metadata`:{`name`:`d`},`spec`:{`selector`:{`issuerRef`:{`group`:``}}}}");
	x.r.issuer_kind = "";
	x.r.issuer_group = "";
	SG_CHECK(sg_crpolicy_selects_issuer(kind, &x.r));
	SG_CHECK(!sg_crpolicy_selects_issuer(empty_group, &x.r)); /* "" matches only "", and the group is defaulted */
	sg_crpolicy_free(kind);
	sg_crpolicy_free(empty_group);

	/* Namespaces: names (wildcards), then labels; both selectors at once. */
	sg_crpolicy *ns =
	    load("{`metadata`:{`name`:`e`},`spec`:{`selector`:{`issuerRef`:{`name`:`my-ca`},"
	         "`namespace`:{`matchNames`:[`team-*`,`default`],`matchLabels`:{`env`:`prod`,`tier`:``}}}}}");
	SG_CHECK(sg_crpolicy_needs_namespace_labels(ns));
	json_t *prod = json_of("{`env`:`prod`,`tier`:``,`other`:`x`}");
	json_t *dev = json_of("{`env`:`dev`,`tier`:``}");
	json_t *no_tier = json_of("{`env`:`prod`}");
	json_t *bad = json_of("{`env`:1,`tier`:``}");
	x.r.issuer_name = "my-ca";
	x.r.name_space = "team-a";
	SG_CHECK_OK(sg_crpolicy_selects(ns, &x.r, prod, &m));
	SG_CHECK(m);
	SG_CHECK_OK(sg_crpolicy_selects(ns, &x.r, dev, &m));
	SG_CHECK(!m);
	SG_CHECK_OK(sg_crpolicy_selects(ns, &x.r, no_tier, &m));
	SG_CHECK(!m);
	SG_CHECK_OK(sg_crpolicy_selects(ns, &x.r, bad, &m));
	SG_CHECK(!m);
	SG_CHECK_RC(sg_crpolicy_selects(ns, &x.r, NULL, &m), SG_EINVAL);
	SG_CHECK_MSG("labels are needed");
	x.r.name_space = "kube-system"; /* the names do not match: labels are not needed */
	SG_CHECK_OK(sg_crpolicy_selects_namespace(ns, x.r.name_space, NULL, &m));
	SG_CHECK(!m);
	x.r.name_space = "default";
	x.r.issuer_name = "other";
	SG_CHECK_OK(sg_crpolicy_selects(ns, &x.r, prod, &m));
	SG_CHECK(!m); /* every defined selector must match */
	sg_crpolicy_free(ns);
	json_decref(prod);
	json_decref(dev);
	json_decref(no_tier);
	json_decref(bad);

	sg_crpolicy *any_labels =
	    load("{`metadata`:{`name`:`f`},`spec`:{`selector`:{`namespace`:{`matchLabels`:{}}}}}");
	SG_CHECK(!sg_crpolicy_needs_namespace_labels(any_labels));
	SG_CHECK_OK(sg_crpolicy_selects_namespace(any_labels, "x", NULL, &m));
	SG_CHECK(m);
	sg_crpolicy_free(any_labels);
	sg_crpolicy *empty_names =
	    load("{`metadata`:{`name`:`g`},`spec`:{`selector`:{`namespace`:{`matchNames`:[]}}}}");
	SG_CHECK_OK(sg_crpolicy_selects_namespace(empty_names, "x", NULL, &m));
	SG_CHECK(m);
	sg_crpolicy_free(empty_names);
}

/* ---- verdicts and condition messages ------------------------------------------------ */

static void t_messages(void)
{
	sg_crpolicy_denial d[] = {
	    {"team-b", "spec.allowed.isCA: Invalid value: true: nil"},
	    {"team-a", "first"},
	    {"Team-z", "upper case sorts first"},
	    {"team-a", "second (stable)"},
	};
	char *m = NULL;
	SG_CHECK_OK(sg_crpolicy_denied_message(d, 4, &m));
	CHECK_STR(m, "No policy approved this request: [Team-z: upper case sorts first] [team-a: first] "
	             "[team-a: second (stable)] [team-b: spec.allowed.isCA: Invalid value: true: nil]");
	free(m);
	SG_CHECK_OK(sg_crpolicy_deferred_message(d, 1, &m));
	CHECK_STR(m, "Not all policies are ready for evaluation; refusing to deny pending policy readiness: "
	             "[team-b: spec.allowed.isCA: Invalid value: true: nil]");
	free(m);
	SG_CHECK_OK(sg_crpolicy_denied_message(d, 0, &m));
	CHECK_STR(m, "No policy approved this request: ");
	free(m);

	/* A plugin's answer is folded in after the built-in evaluators'. */
	sg_crpolicy *p = load("{`metadata`:{`name`:`p`},`spec`:{`selector`:{`issuerRef`:{}},"
	                      "`plugins`:{`external-policy`:{`values`:{`url`:`https://policy.example`}}}}}");
	SG_CHECK(sg_crpolicy_ready(p) && sg_crpolicy_plugin_count(p) == 1);
	fake x;
	fake_init(&x);
	sg_crpolicy_verdict v;
	SG_CHECK_OK(sg_crpolicy_evaluate(p, &x.r, &v));
	SG_CHECK(!v.denied && strcmp(v.message, "") == 0);
	SG_CHECK_OK(sg_crpolicy_verdict_add(&v, false, ""));
	SG_CHECK(!v.denied && strcmp(v.message, "") == 0);
	SG_CHECK_OK(sg_crpolicy_verdict_add(&v, true, "external policy said no"));
	SG_CHECK(v.denied);
	CHECK_STR(v.message, "external policy said no");
	sg_crpolicy_verdict_clear(&v);
	x.r.is_ca = true;
	SG_CHECK_OK(sg_crpolicy_evaluate(p, &x.r, &v));
	SG_CHECK_OK(sg_crpolicy_verdict_add(&v, false, "a note"));
	SG_CHECK(v.denied);
	CHECK_STR(v.message, "spec.allowed.isCA: Invalid value: true: nil, a note");
	sg_crpolicy_verdict_clear(&v);
	sg_crpolicy_verdict_clear(NULL);
	sg_crpolicy_free(p);

	/* A NotReady policy never evaluates. */
	p = load("{`metadata`:{`name`:`bad-rule`},`spec`:{`allowed`:{`dnsNames`:{`values`:[`*`],"
	         "`validations`:[{`rule`:`self.size()`}]}},`selector`:{`issuerRef`:{}}}}");
	SG_CHECK_RC(sg_crpolicy_evaluate(p, &x.r, &v), SG_EINVAL);
	SG_CHECK_MSG("not ready");
	SG_CHECK(v.message == NULL);
	sg_crpolicy_free(p);
}

/* ---- real CSRs through sg_csr_facts ---------------------------------------------------- */

static size_t real_csr(EVP_PKEY *k, uint8_t *out)
{
	X509_REQ *req = X509_REQ_new();
	X509_REQ_set_pubkey(req, k);
	X509_NAME *n = X509_REQ_get_subject_name(req);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"example.com", -1, -1, 0);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	sk_X509_EXTENSION_push(
	    exts, X509V3_EXT_nconf_nid(NULL, NULL, NID_subject_alt_name, "DNS:www.example.com,DNS:*.example.com"));
	X509_REQ_add_extensions(req, exts);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	if (X509_REQ_sign(req, k, EVP_sha256()) <= 0)
		abort();
	uint8_t *p = out;
	int len = i2d_X509_REQ(req, &p);
	X509_REQ_free(req);
	return len > 0 ? (size_t)len : 0;
}

static void t_end_to_end(void)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	SG_CHECK(k != NULL);
	if (!k)
		return;
	static uint8_t der[8192];
	size_t n = real_csr(k, der);
	sg_csr_facts f;
	SG_CHECK_OK(sg_csr_facts_parse(&f, der, n));
	const char *usages[] = {"server auth"};
	sg_crpolicy_request r = {
	    .name_space = "default", .issuer_name = "letsencrypt-prod", .usages = usages, .usage_count = 1, .csr = &f};
	sg_crpolicy *p = load(example_com_no_cel);
	bool m;
	SG_CHECK_OK(sg_crpolicy_selects(p, &r, NULL, &m));
	SG_CHECK(m);
	EXPECT(p, &r, NULL);
	sg_csr_facts_clear(&f);

	/* A directoryName: OpenSSL writes the RFC 5280 form, which
	 * cert-manager's decoder refuses. */
	X509_REQ *req = X509_REQ_new();
	X509_REQ_set_pubkey(req, k);
	X509_NAME_add_entry_by_txt(X509_REQ_get_subject_name(req), "CN", MBSTRING_ASC,
	                           (const unsigned char *)"example.com", -1, -1, 0);
	GENERAL_NAMES *gns = sk_GENERAL_NAME_new_null();
	GENERAL_NAME *gn = GENERAL_NAME_new();
	ASN1_IA5STRING *dns = ASN1_IA5STRING_new();
	ASN1_STRING_set(dns, "www.example.com", -1);
	GENERAL_NAME_set0_value(gn, GEN_DNS, dns);
	sk_GENERAL_NAME_push(gns, gn);
	X509_NAME *dn = X509_NAME_new();
	X509_NAME_add_entry_by_txt(dn, "CN", MBSTRING_ASC, (const unsigned char *)"root", -1, -1, 0);
	gn = GENERAL_NAME_new();
	GENERAL_NAME_set0_value(gn, GEN_DIRNAME, dn);
	sk_GENERAL_NAME_push(gns, gn);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	sk_X509_EXTENSION_push(exts, X509V3_EXT_i2d(NID_subject_alt_name, 0, gns));
	GENERAL_NAMES_free(gns);
	X509_REQ_add_extensions(req, exts);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_REQ_sign(req, k, EVP_sha256());
	uint8_t *pp = der;
	int len = i2d_X509_REQ(req, &pp);
	X509_REQ_free(req);
	SG_CHECK(len > 0);
	SG_CHECK_OK(sg_csr_facts_parse(&f, der, (size_t)len));
	EXPECT(p, &r,
	       "subjectAltName (SAN) extension could not be decoded: asn1: structure error: sequence tag mismatch");
	sg_csr_facts_clear(&f);
	sg_crpolicy_free(p);
	EVP_PKEY_free(k);
}

/* ---- one compiled policy, many threads (the TSan build watches) ---------------------- */

static sg_crpolicy *shared_policy;

static void *evaluate_many(void *arg)
{
	(void)arg;
	fake x;
	full_request(&x);
	x.r.issuer_name = "letsencrypt-prod";
	for (int i = 0; i < 200; i++) {
		sg_crpolicy_verdict v;
		if (sg_crpolicy_evaluate(shared_policy, &x.r, &v) != SG_OK || !v.denied)
			return (void *)1;
		sg_crpolicy_verdict_clear(&v);
		bool m;
		if (sg_crpolicy_selects(shared_policy, &x.r, NULL, &m) != SG_OK || !m)
			return (void *)1;
	}
	return NULL;
}

static void t_threads(void)
{
	shared_policy = load(example_com_no_cel);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		SG_CHECK(pthread_create(&t[i], NULL, evaluate_many, NULL) == 0);
	for (int i = 0; i < 4; i++) {
		void *rv = (void *)1;
		pthread_join(t[i], &rv);
		SG_CHECK(rv == NULL);
	}
	sg_crpolicy_free(shared_policy);
}

SG_TEST_MAIN(SG_TEST(t_wildcards), SG_TEST(t_documented_policies), SG_TEST(t_webhook_checks),
             SG_TEST(t_external_servers), SG_TEST(t_schema_and_bounds), SG_TEST(t_allowed),
             SG_TEST(t_dns_and_default_deny), SG_TEST(t_example_com), SG_TEST(t_cel), SG_TEST(t_cel_cache_limit),
             SG_TEST(t_is_ca_and_usages), SG_TEST(t_sans_raw), SG_TEST(t_subject_raw), SG_TEST(t_quoting),
             SG_TEST(t_constraints), SG_TEST(t_selectors), SG_TEST(t_messages), SG_TEST(t_end_to_end),
             SG_TEST(t_threads))
