/*
 * Fuzz target for the TokenReview answer parser and the unverified exp
 * probe (ra/sg_authn_tokenreview.c, contract in ra/sg_authn_kube.h).
 *
 * The first input byte picks the mode:
 *   even: the rest is a TokenReview answer (JSON), parsed with the
 *         audiences {"istio-ca", "other"} and trust domain cluster.local,
 *         and again through the json_t entry when it is valid JSON (the
 *         two must agree);
 *   odd:  the rest is a bearer token given to sg_tokenreview_token_exp.
 *
 * Oracles: the parser answers SG_OK, SG_EAUTH or SG_EPROTO and nothing
 * else; a refusal leaves the caller zeroed; an accepted caller is
 * well-formed (identity spiffe://cluster.local/ns/<ns>/sa/<sa> matching its
 * ns and sa, method "tokenreview", NUL-terminated fields); a message is
 * printable ASCII. The probe never reports an exp outside 0..9999 AD.
 */
#include "sg_authn_kube.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static int terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

static void check_message(void)
{
	for (const char *p = sg_error_last()->msg; *p; p++)
		check(*p >= 0x20 && *p <= 0x7e);
}

static void check_caller(int rc, const sg_caller *c)
{
	check(rc == SG_OK || rc == SG_EAUTH || rc == SG_EPROTO);
	if (rc != SG_OK) {
		check_message();
		check(c->identity[0] == '\0' && c->ns[0] == '\0' && c->sa[0] == '\0' && c->method == NULL);
		return;
	}
	check(terminated(c->identity, sizeof(c->identity)) && terminated(c->ns, sizeof(c->ns)) &&
	      terminated(c->sa, sizeof(c->sa)) && terminated(c->sa_uid, sizeof(c->sa_uid)) &&
	      terminated(c->pod_name, sizeof(c->pod_name)) && terminated(c->pod_uid, sizeof(c->pod_uid)));
	check(c->ns[0] && c->sa[0] && strlen(c->ns) <= 63 && strlen(c->sa) <= 253);
	char want[SG_ID_MAX + 64];
	snprintf(want, sizeof(want), "spiffe://cluster.local/ns/%s/sa/%s", c->ns, c->sa);
	check(strcmp(want, c->identity) == 0);
	check(c->method && strcmp(c->method, "tokenreview") == 0 && c->expires == 0);
}

static void parse(const uint8_t *data, size_t size)
{
	static const char *const auds[] = {"istio-ca", "other"};
	const sg_tokenreview_expect x = {.audiences = auds, .n_audiences = 2, .trust_domain = "cluster.local"};
	sg_caller c, c2;
	int rc = sg_tokenreview_parse_bytes(data, size, &x, &c);
	check_caller(rc, &c);

	json_error_t jerr;
	json_t *j = size ? json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr) : NULL;
	if (!j) {
		check(rc == SG_EPROTO);
		return;
	}
	int rc2 = sg_tokenreview_parse(j, &x, &c2);
	json_decref(j);
	check_caller(rc2, &c2);
	if (size <= SG_TOKENREVIEW_ANSWER_MAX)
		check(rc2 == rc && strcmp(c.identity, c2.identity) == 0 && strcmp(c.sa_uid, c2.sa_uid) == 0 &&
		      strcmp(c.pod_name, c2.pod_name) == 0 && strcmp(c.pod_uid, c2.pod_uid) == 0);
}

static void probe(const uint8_t *data, size_t size)
{
	int64_t exp = -1;
	if (sg_tokenreview_token_exp((const char *)data, size, &exp))
		check(exp >= 0 && exp <= INT64_C(253402300799));
	else
		check(exp == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		probe(data + 1, size - 1);
	else
		parse(data + 1, size - 1);
	return 0;
}
