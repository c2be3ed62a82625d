/*
 * Fuzz target for the CertificateRequestPolicy core: a policy object and a
 * CSR, both hostile, through sg_crpolicy_compile, sg_csr_facts_parse,
 * selection and sg_crpolicy_evaluate, and the condition messages.
 *
 * Input: the first two bytes are the length (big-endian) of the policy's
 * JSON, which follows; the rest is the CSR's DER. The byte after the JSON
 * length also picks the request's fields (isCA, a duration, usages). When
 * the JSON does not load, one of a few built-in policies is used instead,
 * so that mutations of the CSR keep reaching the evaluator.
 *
 * Oracles besides the sanitizers and a timeout:
 *   - compile answers SG_OK (Ready or NotReady, with the right prefix) or
 *     SG_EINVAL, never anything else, and twice the same message;
 *   - facts answer SG_OK or SG_EINVAL (then the struct is zeroed); parsed
 *     facts keep their bounds, and every text is NUL-terminated at its
 *     length;
 *   - a verdict denies exactly when it has a message; an evaluation error
 *     is SG_EINVAL and only for a privateKey constraint on a key Go
 *     cannot size;
 *   - every message is valid UTF-8 (CSR bytes reach it only escaped) and,
 *     when the policy's JSON holds no escape, has no C0 control character
 *     (a raw DEL can appear: Go's encoding/json keeps it, so we do);
 *   - wildcards: "*" matches every name, a name without '*' matches itself.
 */
#include "sg_crpolicy.h"
#include "sg_names.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool cond)
{
	if (!cond)
		abort();
}

static bool utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned k = *p < 0x80             ? 0
		             : (*p & 0xE0) == 0xC0 ? 1
		             : (*p & 0xF0) == 0xE0 ? 2
		             : (*p & 0xF8) == 0xF0 ? 3
		                                   : 9;
		if (k == 9 || (k == 1 && *p < 0xC2) || (k == 3 && *p > 0xF4))
			return false;
		for (unsigned i = 1; i <= k; i++)
			if ((p[i] & 0xC0) != 0x80)
				return false;
		if ((k == 2 && p[0] == 0xE0 && p[1] < 0xA0) || (k == 2 && p[0] == 0xED && p[1] >= 0xA0) ||
		    (k == 3 && p[0] == 0xF0 && p[1] < 0x90) || (k == 3 && p[0] == 0xF4 && p[1] >= 0x90))
			return false;
		p += k + 1;
	}
	return true;
}

/* A policy whose JSON holds no escape has no control character in its
 * strings, so its messages hold none either, but for the line breaks of
 * a CEL compiler's error (the source line and a caret under the fault, as
 * cel-go prints them, which approver-policy's condition carries too). */
static void check_message(const char *m, bool plain_policy)
{
	check(m != NULL);
	check(utf8_ok(m));
	if (plain_policy)
		for (const unsigned char *p = (const unsigned char *)m; *p; p++)
			check(*p >= 0x20 || *p == '\n');
}

static const char *const builtin[] = {
    "{\"metadata\":{\"name\":\"allow-all\"},\"spec\":{\"allowed\":{\"commonName\":{\"value\":\"*\"},"
    "\"dnsNames\":{\"values\":[\"*\"]},\"ipAddresses\":{\"values\":[\"*\"]},\"uris\":{\"values\":[\"*\"]},"
    "\"emailAddresses\":{\"values\":[\"*\"]},\"isCA\":true,\"usages\":[\"server auth\",\"client auth\",\"digital "
    "signature\",\"cert sign\"],\"otherNames\":[{\"oid\":"
    "\"1.3.6.1.4.1.311.20.2.3\",\"values\":[\"*\"]}],\"subject\":{\"organizations\":{\"values\":[\"*\"]},"
    "\"serialNumber\":{\"value\":\"*\"},\"otherAttributes\":[{\"oid\":\"1.2.840.113549.1.9.1\",\"values\":[\"*\"]}]}},"
    "\"selector\":{\"issuerRef\":{}}}}",
    "{\"metadata\":{\"name\":\"nil\"},\"spec\":{\"selector\":{\"namespace\":{\"matchNames\":[\"team-*\"],"
    "\"matchLabels\":{\"env\":\"prod\"}}}}}",
    "{\"metadata\":{\"name\":\"constraints\"},\"spec\":{\"allowed\":{\"dnsNames\":{\"values\":[\"*.example.com\"],"
    "\"required\":true},\"commonName\":{\"value\":\"*.example.com\",\"required\":true}},\"constraints\":{"
    "\"minDuration\":\"1h\",\"maxDuration\":\"24h\",\"privateKey\":{\"algorithm\":\"ECDSA\",\"minSize\":256}},"
    "\"selector\":{\"issuerRef\":{\"name\":\"*\",\"kind\":\"*Issuer\"}}}}",
};

static const char *const usage_names[] = {"server auth", "client auth", "digital signature", "cert sign"};

static void run(const sg_crpolicy *p, bool plain, const uint8_t *der, size_t len, uint8_t knobs)
{
	sg_csr_facts f;
	int rc = sg_csr_facts_parse(&f, der, len);
	check(rc == SG_OK || rc == SG_EINVAL);
	if (rc != SG_OK) {
		check(f.attrs == NULL && f.sans == NULL && f.arena == NULL && f.attr_count == 0);
		check_message(sg_error_last()->msg, false);
		return;
	}
	check(f.attr_count <= SG_CSR_FACTS_MAX_ATTRS && f.san_count <= SG_CSR_FACTS_MAX_SANS);
	check(f.arena_len <= f.arena_cap && f.key_oid != NULL);
	for (size_t i = 0; i < f.attr_count; i++)
		check(f.attrs[i].oid && f.attrs[i].value && f.attrs[i].value[f.attrs[i].value_len] == '\0');
	for (size_t i = 0; i < f.san_count; i++) {
		const sg_csr_facts_san *s = &f.sans[i];
		check(s->value && s->value[s->value_len] == '\0');
		check((s->type == SG_CSR_FACTS_SAN_OTHER_NAME) == (s->oid != NULL));
		check(s->content.p >= f.der_copy && s->content.p + s->content.len <= f.der_copy + f.der_len);
		if (s->type == SG_CSR_FACTS_SAN_DNS && strlen(s->value) == s->value_len) {
			check(sg_crpolicy_wildcard_matches("*", s->value));
			if (!strchr(s->value, '*'))
				check(sg_crpolicy_wildcard_matches(s->value, s->value));
		}
	}

	const char *usages[4];
	size_t nusages = knobs & 3;
	for (size_t i = 0; i < nusages; i++)
		usages[i] = usage_names[(knobs >> (2 + i)) & 3];
	sg_crpolicy_request r = {
	    .name_space = (knobs & 0x20) ? "team-a" : "default",
	    .issuer_name = "my-ca",
	    .issuer_kind = (knobs & 0x40) ? "ClusterIssuer" : "",
	    .has_duration = knobs & 0x80,
	    .duration_seconds = (knobs & 0x10) ? 3600 : 90 * 86400,
	    .is_ca = knobs & 0x04,
	    .usages = usages,
	    .usage_count = nusages,
	    .csr = &f,
	};
	json_t *labels = json_pack("{s:s}", "env", (knobs & 1) ? "prod" : "dev");
	bool m;
	rc = sg_crpolicy_selects(p, &r, sg_crpolicy_needs_namespace_labels(p) ? labels : NULL, &m);
	check(rc == SG_OK);
	json_decref(labels);

	if (sg_crpolicy_ready(p)) {
		sg_crpolicy_verdict v;
		rc = sg_crpolicy_evaluate(p, &r, &v);
		check(rc == SG_OK || (rc == SG_EINVAL && f.key_alg == SG_CSR_FACTS_KEY_OTHER));
		if (rc == SG_OK) {
			check(v.denied == (v.message[0] != '\0'));
			check_message(v.message, plain);
			sg_crpolicy_denial d = {sg_crpolicy_name(p), v.message};
			char *msg = NULL;
			if (v.denied) {
				check(sg_crpolicy_denied_message(&d, 1, &msg) == SG_OK);
				check(strncmp(msg, "No policy approved this request: [", 34) == 0);
			} else {
				check(sg_crpolicy_approved_message(sg_crpolicy_name(p), &msg) == SG_OK);
			}
			check_message(msg, plain);
			free(msg);
		}
		sg_crpolicy_verdict_clear(&v);
	} else {
		sg_crpolicy_verdict v;
		check(sg_crpolicy_evaluate(p, &r, &v) == SG_EINVAL);
		sg_crpolicy_verdict_clear(&v);
	}
	sg_csr_facts_clear(&f);
}

static sg_crpolicy *compile(const json_t *j)
{
	static const char *const plugins[] = {"external-policy"};
	/* servers on: spec.externalPolicyServers is read and checked */
	sg_crpolicy_options opts = {plugins, 1, true};
	sg_crpolicy *p = NULL;
	int rc = sg_crpolicy_compile(&p, j, &opts);
	check(rc == SG_OK || rc == SG_EINVAL);
	check((rc == SG_OK) == (p != NULL));
	return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	size_t jlen = (size_t)data[0] << 8 | data[1];
	if (jlen > size - 3)
		jlen = size - 3;
	uint8_t knobs = data[2];
	const char *text = (const char *)data + 3;
	const uint8_t *der = data + 3 + jlen;
	size_t dlen = size - 3 - jlen;

	json_t *j = json_loadb(text, jlen, 0, NULL);
	bool plain = j && !memchr(text, '\\', jlen);
	sg_crpolicy *p = j ? compile(j) : NULL;
	if (p) {
		const char *msg = sg_crpolicy_condition_message(p);
		check_message(msg, plain);
		check(sg_crpolicy_ready(p)
		          ? strcmp(msg, SG_CRPOLICY_READY_MESSAGE) == 0
		          : strncmp(msg, SG_CRPOLICY_NOT_READY_PREFIX, strlen(SG_CRPOLICY_NOT_READY_PREFIX)) == 0);
		sg_crpolicy *again = compile(j);
		check(again && strcmp(msg, sg_crpolicy_condition_message(again)) == 0);
		sg_crpolicy_free(again);
		for (size_t i = 0; i < sg_crpolicy_plugin_count(p); i++)
			check(sg_crpolicy_plugin_name(p, i) != NULL);
		/* a Ready policy's servers: at most 64 distinct object names */
		size_t ns = sg_crpolicy_external_count(p);
		check(ns <= SG_CRPOLICY_MAX_ENTRIES && sg_crpolicy_external_name(p, ns) == NULL);
		for (size_t i = 0; sg_crpolicy_ready(p) && i < ns; i++) {
			const char *n = sg_crpolicy_external_name(p, i);
			check(n && sg_names_dns_subdomain(n, strlen(n)));
			for (size_t j2 = 0; j2 < i; j2++)
				check(strcmp(n, sg_crpolicy_external_name(p, j2)) != 0);
		}
	}
	json_decref(j);
	if (!p) {
		json_t *b = json_loads(builtin[knobs % 3], 0, NULL);
		check(b != NULL);
		p = compile(b);
		json_decref(b);
		check(p && sg_crpolicy_ready(p));
		plain = true;
	}
	run(p, plain, der, dlen, knobs);
	sg_crpolicy_free(p);
	return 0;
}
