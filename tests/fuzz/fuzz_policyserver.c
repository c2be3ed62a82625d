/*
 * Fuzz target for the external policy servers' readers
 * (daemon/sg_policyserver.c): the --external-policy-servers value
 * (sg_policyserver_new), an ExternalPolicyServer's endpoint
 * (sg_policyserver_resource_set) and a policy's plugin values
 * (sg_policyserver_check, sg_policyserver_check_values).
 *
 * Input: the flag's value up to the first newline, the endpoint up to the
 * second, and the rest as the values' JSON. When the flag's value is
 * refused, the endpoint and the values go to a fixed configuration of two
 * servers, "a" and "b" (made once), so that every input reaches all three
 * readers.
 * Channels are made (no connection: gRPC connects on the first call); a
 * ca= path opens only regular files (sg_file_read).
 *
 * Oracles: sg_policyserver_new answers SG_OK with at most
 * SG_POLICYSERVER_MAX servers, each a DNS-label name and a printable
 * target, or SG_EINVAL, SG_ENOTFOUND or SG_EINTERNAL with a non-empty
 * detail in printable ASCII (it quotes the flag as written). The endpoint
 * is SG_OK or SG_EINVAL. check() and check_values() agree, and a refusal's
 * reason, which goes into a policy's condition, is valid UTF-8 without
 * C0 controls or DEL. Nothing may crash, leak or run long.
 */
#include "sg_der.h"
#include "sg_names.h"
#include "sg_policyserver.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_printable(const char *s)
{
	check(s && *s);
	for (; *s; s++)
		check(*s >= 0x20 && *s < 0x7f);
}

static void check_reason(const char *s)
{
	check(s != NULL);
	sg_slice sl = {(const uint8_t *)s, strlen(s)};
	size_t i = 0;
	uint32_t cp;
	while (i < sl.len) {
		check(sg_der_utf8_next(sl, &i, &cp));
		check(cp >= 0x20 && cp != 0x7f);
	}
}

/* The next line of data as a new string (NUL bytes end it early). */
static char *line(const uint8_t **data, size_t *size)
{
	const uint8_t *nl = memchr(*data, '\n', *size);
	size_t n = nl ? (size_t)(nl - *data) : *size;
	char *s = strndup((const char *)*data, n);
	check(s != NULL);
	*data += nl ? n + 1 : n;
	*size -= nl ? n + 1 : n;
	return s;
}

static sg_policyserver *configured(const char *servers)
{
	sg_policyserver *ps = NULL;
	sg_policyserver_options o = {.servers = servers};
	int rc = sg_policyserver_new(&ps, &o);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_ENOTFOUND || rc == SG_EINTERNAL);
	if (rc < 0) {
		check(ps == NULL);
		check_printable(sg_error_last()->msg);
		return NULL;
	}
	size_t n = sg_policyserver_count(ps);
	check(n >= 1 && n <= SG_POLICYSERVER_MAX);
	for (size_t i = 0; i < n; i++) {
		sg_policyserver_stats st;
		check(sg_policyserver_stats_get(ps, i, &st) == SG_OK);
		check(sg_names_dns_label(st.name, strlen(st.name), SG_NAMES_LABEL_MAX));
		check_printable(st.target);
	}
	return ps;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *servers = line(&data, &size);
	char *endpoint = line(&data, &size);
	/* The fixed one lives for the whole run: it keeps gRPC initialised,
	 * which each channel's creation would otherwise do again. */
	static sg_policyserver *fixed;
	if (!fixed)
		check((fixed = configured("a=127.0.0.1:1,b=policy.example.svc:443")) != NULL);
	sg_policyserver *mine = configured(servers), *ps = mine ? mine : fixed;

	bool changed = false;
	int rc = sg_policyserver_resource_set(ps, "fuzz", endpoint, NULL, 0, &changed);
	check(rc == SG_OK || rc == SG_EINVAL);
	check(sg_policyserver_resource_count(ps) == 1);
	sg_policyserver_resource_remove(ps, "fuzz");

	json_t *values = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	char *why = NULL;
	bool ok = sg_policyserver_check(ps, values, &why);
	int vrc = sg_policyserver_check_values(ps, values);
	check(ok == (vrc == SG_OK));
	if (ok) {
		check(why == NULL);
	} else {
		check_reason(why);
		check(vrc == SG_EINVAL);
		check_reason(sg_error_last()->msg);
	}
	free(why);
	json_decref(values);
	sg_policyserver_free(mine);
	free(servers);
	free(endpoint);
	return 0;
}
