/*
 * Fuzz target for the HSM Secret's hsm-egress reader
 * (operator/sg_hsm_egress.c): the bytes are the value as decoded from the
 * Secret.
 *
 * Oracles: rules, one per entry between separators (comma, space, tab,
 * newline), each an ipBlock CIDR whose address inet_pton(3) takes and
 * whose length fits the family, and a TCP port in 1..65535; and only for
 * a value without a NUL byte and at most SG_HSM_EGRESS_MAX bytes. Or no
 * rules and a non-empty reason in printable ASCII (it goes into the
 * IstioCSR's status). Nothing may crash, leak or read past the value.
 */
#include "sg_hsm_egress.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static int is_sep(uint8_t c)
{
	return c == ' ' || c == ',' || c == '\n' || c == '\t';
}

static void check_rule(const json_t *r)
{
	const json_t *to = json_object_get(r, "to"), *ports = json_object_get(r, "ports");
	check(json_array_size(to) == 1 && json_array_size(ports) == 1);
	const char *cidr =
	    json_string_value(json_object_get(json_object_get(json_array_get(to, 0), "ipBlock"), "cidr"));
	check(cidr != NULL);
	const char *slash = strrchr(cidr, '/');
	check(slash && slash > cidr && (size_t)(slash - cidr) < 64);
	char addr[64];
	memcpy(addr, cidr, (size_t)(slash - cidr));
	addr[slash - cidr] = '\0';
	unsigned char raw[16];
	int v6 = strchr(addr, ':') != NULL;
	check(inet_pton(v6 ? AF_INET6 : AF_INET, addr, raw) == 1);
	char *end = NULL;
	long bits = strtol(slash + 1, &end, 10);
	check(end && *end == '\0' && end > slash + 1 && bits >= 0 && bits <= (v6 ? 128 : 32));
	const json_t *p = json_array_get(ports, 0);
	check(strcmp(json_string_value(json_object_get(p, "protocol")), "TCP") == 0);
	json_int_t port = json_integer_value(json_object_get(p, "port"));
	check(port >= 1 && port <= 65535);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	json_t *r = sg_hsm_egress_rules((const char *)data, size, why, sizeof(why));
	if (!r) {
		check(why[0] != '\0');
		for (const char *c = why; *c; c++)
			check(*c >= 0x20 && *c < 0x7f);
		return 0;
	}
	check(size <= SG_HSM_EGRESS_MAX && !memchr(data, '\0', size));
	size_t entries = 0;
	for (size_t i = 0; i < size; i++)
		entries += !is_sep(data[i]) && (i == 0 || is_sep(data[i - 1]));
	check(json_array_size(r) == entries && entries > 0);
	for (size_t i = 0; i < entries; i++)
		check_rule(json_array_get(r, i));
	json_decref(r);
	return 0;
}
