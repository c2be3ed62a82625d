/*
 * The hsm-egress reader (contract: sg_hsm_egress.h). It was the IstioCSR
 * reconciler's own until it had a fuzz target: the value comes from a
 * Secret anyone who may write it controls, and its refusal goes into the
 * IstioCSR's status, so the reader is tested on its own, by hostile
 * tables (tests/operator/test_hsm_egress.c) and by fuzz_hsm_egress.
 *
 * Every entry is copied into a bounded buffer before it is cut, and the
 * numbers are plain decimals: strtol alone would take "+80" and " 80".
 */
#include "sg_hsm_egress.h"

#include "sg_log.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal number of 1 to 5 digits, no sign or space. */
static bool small_decimal(const char *s, long *out)
{
	size_t n = strspn(s, "0123456789");
	if (n == 0 || n > 5 || s[n])
		return false;
	*out = strtol(s, NULL, 10);
	return true;
}

/* One entry (len bytes at e, no separator in it); the CIDR into cidr. */
static bool entry(const char *e, size_t len, char *cidr, size_t cap, long *port)
{
	char buf[128];
	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, e, len);
	buf[len] = '\0';
	char *addr = buf, *colon;
	bool v6 = buf[0] == '[';
	if (v6) {
		char *close = strchr(buf, ']');
		if (!close || close[1] != ':')
			return false;
		*close = '\0';
		addr = buf + 1;
		colon = close + 1;
	} else {
		colon = strrchr(buf, ':');
		if (!colon)
			return false;
		*colon = '\0';
	}
	if (!small_decimal(colon + 1, port) || *port < 1 || *port > 65535)
		return false;
	long bits = v6 ? 128 : 32;
	char *slash = strchr(addr, '/');
	if (slash) {
		*slash = '\0';
		long l = 0;
		if (!small_decimal(slash + 1, &l) || l > bits)
			return false;
		bits = l;
	}
	unsigned char raw[16];
	if (inet_pton(v6 ? AF_INET6 : AF_INET, addr, raw) != 1)
		return false;
	int w = snprintf(cidr, cap, "%s/%ld", addr, bits);
	return w > 0 && (size_t)w < cap;
}

static bool separator(char c)
{
	return c == ' ' || c == ',' || c == '\n' || c == '\t';
}

json_t *sg_hsm_egress_rules(const char *text, size_t len, char *why, size_t cap)
{
	why[0] = '\0';
	if (len > SG_HSM_EGRESS_MAX) {
		snprintf(why, cap, "longer than %d bytes", SG_HSM_EGRESS_MAX);
		return NULL;
	}
	/* A NUL would end the value for any C reader after us, and what
	 * follows it would be dropped without a word. */
	if (memchr(text, '\0', len)) {
		snprintf(why, cap, "holds a NUL byte");
		return NULL;
	}
	json_t *rules = json_array();
	if (!rules)
		return NULL;
	size_t i = 0;
	while (i < len) {
		while (i < len && separator(text[i]))
			i++;
		size_t n = 0;
		while (i + n < len && !separator(text[i + n]))
			n++;
		if (!n)
			break;
		char cidr[80];
		long port = 0;
		if (!entry(text + i, n, cidr, sizeof(cidr), &port)) {
			/* shown in the status: printable ASCII (a byte over 0x7e,
			 * or a character cut at the bound, is not UTF-8 jansson
			 * takes, and the status write would fail) */
			char shown[101];
			sg_log_printable(shown, sizeof(shown), text + i, n);
			snprintf(why, cap,
			         "\"%s\" is not an address and port (IPv4[/len]:port or [IPv6[/len]]:port; a "
			         "NetworkPolicy names addresses, not host names)",
			         shown);
			json_decref(rules);
			return NULL;
		}
		if (json_array_append_new(rules,
		                          json_pack("{s:[{s:{s:s}}], s:[{s:s, s:I}]}", "to", "ipBlock", "cidr", cidr,
		                                    "ports", "protocol", "TCP", "port", (json_int_t)port)) != 0) {
			json_decref(rules);
			return NULL;
		}
		i += n;
	}
	if (json_array_size(rules) == 0) {
		snprintf(why, cap, "names no address");
		json_decref(rules);
		return NULL;
	}
	return rules;
}
