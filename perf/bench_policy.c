/*
 * bench_policy: what CEL validations add to the approver's decision, in
 * process (no API server: perf/approverbench.sh measures the whole
 * approver against one). Not a test: it asserts no time.
 *
 *   bench_policy [Google Benchmark flags]   (SIGNET_BENCH_CSRS: distinct CSRs, default 256)
 *
 * decision/10_policies and decision/10_policies_cel do one decision the
 * way sg_approver's pass does it: compile 10 CertificateRequestPolicies
 * from their JSON (the approver compiles every policy on every pass),
 * parse the request's CSR (a distinct P-256 CSR each time, made before the
 * clock), select, and evaluate in name order until one approves: teams 0
 * to 8 deny (their DNS names do not match), team 9 approves, so every
 * policy is evaluated. The _cel variant is the same policies with two
 * validations rules each, as mesh operators write them: the dnsNames
 * example of approver-policy's documentation (!self.contains('*')) and a
 * SPIFFE ID bound to the request's namespace. The rules' compiled forms
 * are shared by text (sg_crpolicy_cel.c), so from the second decision on a
 * compile finds them: that is the approver's steady state. The ratio of
 * the two is the number perf/README.md reports.
 *
 * cel/compile and cel/eval: one rule's own costs, compiled afresh (no
 * cache) and evaluated with a fresh activation.
 */
#include "bench_shim.h"
#include "sg_cel.h"
#include "sg_crpolicy.h"
#include "sg_csr.h"
#include "sg_csr_facts.h"
#include "sg_error.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPOL 10
#define SPIFFE_RULE "self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')"

typedef struct csr_der {
	uint8_t *der;
	size_t len;
} csr_der;

static struct {
	json_t *plain[NPOL], *cel[NPOL];
	csr_der *csrs;
	size_t ncsrs;
} g;

static void die(const char *what)
{
	fprintf(stderr, "bench_policy: %s: %s\n", what, sg_error_last()->msg);
	exit(1);
}

static json_t *policy(int team, bool cel)
{
	char text[2048];
	const char *rules_dns = cel ? ",\"validations\":[{\"rule\":\"!self.contains('*')\",\"message\":\"Wildcard "
	                              "certificates are not allowed\"}]"
	                            : "";
	const char *rules_uri = cel ? ",\"validations\":[{\"rule\":\"" SPIFFE_RULE "\"}]" : "";
	snprintf(text, sizeof(text),
	         "{\"metadata\":{\"name\":\"team-%d\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*.t%d."
	         "example.com\"},"
	         "\"dnsNames\":{\"values\":[\"*.t%d.example.com\"]%s},\"uris\":{\"values\":[\"spiffe://cluster.local/"
	         "*\"]%s},"
	         "\"usages\":[\"digital signature\",\"server auth\",\"client auth\"]},"
	         "\"constraints\":{\"maxDuration\":\"720h\",\"privateKey\":{\"algorithm\":\"ECDSA\"}},"
	         "\"selector\":{\"issuerRef\":{}}}}",
	         team, team, team, rules_dns, rules_uri);
	json_t *o = json_loads(text, 0, NULL);
	if (!o) {
		fprintf(stderr, "bench_policy: bad policy JSON\n");
		exit(1);
	}
	return o;
}

/* A P-256 CSR for w<i>.t9.example.com and a SPIFFE ID in namespace team-9. */
static csr_der make_csr(size_t i)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509_REQ *r = X509_REQ_new();
	X509_NAME *n = X509_NAME_new();
	char cn[64], san[256];
	snprintf(cn, sizeof(cn), "w%zu.t9.example.com", i);
	snprintf(san, sizeof(san), "DNS:%s,URI:spiffe://cluster.local/ns/team-9/sa/w%zu", cn, i);
	X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0);
	X509_REQ_set_subject_name(r, n);
	X509_REQ_set_pubkey(r, k);
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san));
	X509_REQ_add_extensions(r, exts);
	if (!k || !X509_REQ_sign(r, k, EVP_sha256())) {
		fprintf(stderr, "bench_policy: cannot make a CSR\n");
		exit(1);
	}
	csr_der d = {NULL, 0};
	int len = i2d_X509_REQ(r, &d.der);
	d.len = len > 0 ? (size_t)len : 0;
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_NAME_free(n);
	X509_REQ_free(r);
	EVP_PKEY_free(k);
	return d;
}

static void bm_decision(sg_bench_state *st, void *arg)
{
	json_t **pols = arg;
	static const char *const usages[] = {"digital signature", "server auth", "client auth"};
	size_t i = 0;
	while (sg_bench_next(st)) {
		const csr_der *c = &g.csrs[i++ % g.ncsrs];
		sg_csr_facts facts;
		if (sg_csr_facts_parse(&facts, c->der, c->len) < 0)
			return sg_bench_fail(st, sg_error_last()->msg);
		sg_crpolicy_request r = {.name = "w",
		                         .name_space = "team-9",
		                         .issuer_name = "ca",
		                         .username = "u",
		                         .usages = usages,
		                         .usage_count = 3,
		                         .has_duration = true,
		                         .duration_seconds = 86400,
		                         .csr = &facts};
		const char *approved = NULL;
		for (int p = 0; p < NPOL && !approved; p++) {
			sg_crpolicy *pol = NULL;
			if (sg_crpolicy_compile(&pol, pols[p], NULL) < 0 || !sg_crpolicy_ready(pol))
				return sg_bench_fail(st, "a policy did not compile Ready");
			bool match = false;
			sg_crpolicy_verdict v;
			if (sg_crpolicy_selects(pol, &r, NULL, &match) < 0 || !match ||
			    sg_crpolicy_evaluate(pol, &r, &v) < 0)
				return sg_bench_fail(st, sg_error_last()->msg);
			if (!v.denied)
				approved = p == NPOL - 1 ? "team-9" : "another";
			sg_crpolicy_verdict_clear(&v);
			sg_crpolicy_free(pol);
		}
		sg_csr_facts_clear(&facts);
		if (!approved || strcmp(approved, "team-9") != 0)
			return sg_bench_fail(st, "not approved by team-9 alone");
	}
	sg_bench_items(st, sg_bench_iterations(st));
}

static void bm_cel_compile(sg_bench_state *st, void *arg)
{
	sg_cel_env *env = arg;
	while (sg_bench_next(st)) {
		sg_cel_program *p = NULL;
		if (sg_cel_compile_bool(&p, env, SPIFFE_RULE, strlen(SPIFFE_RULE)) < 0)
			return sg_bench_fail(st, sg_error_last()->msg);
		sg_cel_program_free(p);
	}
	sg_bench_items(st, sg_bench_iterations(st));
}

static void bm_cel_eval(sg_bench_state *st, void *arg)
{
	sg_cel_env *env = arg;
	sg_cel_program *p = NULL;
	if (sg_cel_compile_bool(&p, env, SPIFFE_RULE, strlen(SPIFFE_RULE)) < 0)
		return sg_bench_fail(st, sg_error_last()->msg);
	static const char self[] = "spiffe://cluster.local/ns/team-9/sa/web";
	while (sg_bench_next(st)) {
		sg_cel_activation *a = NULL;
		bool ok = false;
		if (sg_cel_activation_new(&a, env) < 0 || sg_cel_bind_string(a, "self", self, strlen(self)) < 0 ||
		    sg_cel_bind_object_string(a, "cr", "namespace", "team-9", 6) < 0 ||
		    sg_cel_eval_bool(&ok, p, a, NULL) < 0 || !ok) {
			sg_cel_activation_free(a);
			sg_cel_program_free(p);
			return sg_bench_fail(st, "the rule did not hold");
		}
		sg_cel_activation_free(a);
	}
	sg_cel_program_free(p);
	sg_bench_items(st, sg_bench_iterations(st));
}

int main(int argc, char **argv)
{
	const char *n = getenv("SIGNET_BENCH_CSRS");
	g.ncsrs = n ? strtoul(n, NULL, 10) : 256;
	if (g.ncsrs == 0)
		g.ncsrs = 1;
	g.csrs = calloc(g.ncsrs, sizeof(*g.csrs));
	if (!g.csrs)
		return 1;
	for (size_t i = 0; i < g.ncsrs; i++)
		g.csrs[i] = make_csr(i);
	for (int t = 0; t < NPOL; t++) {
		g.plain[t] = policy(t, false);
		g.cel[t] = policy(t, true);
	}
	sg_cel_env *env = NULL;
	if (sg_cel_env_new_approver(&env) < 0)
		die("CEL environment");
	static const int one[] = {1};
	sg_bench_register("decision/10_policies", bm_decision, g.plain, one, 1, false);
	sg_bench_register("decision/10_policies_cel", bm_decision, g.cel, one, 1, false);
	sg_bench_register("cel/compile", bm_cel_compile, env, one, 1, false);
	sg_bench_register("cel/eval", bm_cel_eval, env, one, 1, false);
	int rc = sg_bench_main(argc, argv);
	sg_cel_env_free(env);
	return rc;
}
