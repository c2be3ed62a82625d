/*
 * sg_hsm_egress: the HSM Secret's hsm-egress value into NetworkPolicy
 * egress rules. The documented forms (operator/README.md's example, a
 * CloudHSM cluster's three ports, a prefix length), the separators, and a
 * table of hostile values, each refused with the message the IstioCSR's
 * status shows: the refused entry quoted in printable ASCII.
 */
#include "sg_hsm_egress.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *rules(const char *text, size_t len, char *why)
{
	return sg_hsm_egress_rules(text, len, why, 256);
}

static bool rule_is(const json_t *r, const char *cidr, long port)
{
	const char *c = json_string_value(
	    json_object_get(json_object_get(json_array_get(json_object_get(r, "to"), 0), "ipBlock"), "cidr"));
	const json_t *p = json_array_get(json_object_get(r, "ports"), 0);
	const char *proto = json_string_value(json_object_get(p, "protocol"));
	return c && strcmp(c, cidr) == 0 && proto && strcmp(proto, "TCP") == 0 &&
	       json_integer_value(json_object_get(p, "port")) == port;
}

static void t_accepted(void)
{
	char why[256];
	const char *t = "10.0.8.20:1792,[fd00::20]:1792";
	json_t *r = rules(t, strlen(t), why);
	SG_CHECK(r && json_array_size(r) == 2 && why[0] == '\0');
	SG_CHECK(rule_is(json_array_get(r, 0), "10.0.8.20/32", 1792));
	SG_CHECK(rule_is(json_array_get(r, 1), "fd00::20/128", 1792));
	json_decref(r);

	t = " 10.0.9.0/24:2223,\n10.0.9.0/24:2224\t10.0.9.0/24:2225 ,, [fd00::/64]:65535\n";
	r = rules(t, strlen(t), why);
	SG_CHECK(r && json_array_size(r) == 4);
	SG_CHECK(rule_is(json_array_get(r, 0), "10.0.9.0/24", 2223));
	SG_CHECK(rule_is(json_array_get(r, 2), "10.0.9.0/24", 2225));
	SG_CHECK(rule_is(json_array_get(r, 3), "fd00::/64", 65535));
	json_decref(r);

	/* Only len bytes are read: what follows is not the value. */
	t = "10.0.0.1:1,garbage";
	r = rules(t, strlen("10.0.0.1:1"), why);
	SG_CHECK(r && json_array_size(r) == 1 && rule_is(json_array_get(r, 0), "10.0.0.1/32", 1));
	json_decref(r);
	t = "0.0.0.0/0:1";
	r = rules(t, strlen(t), why);
	SG_CHECK(r && rule_is(json_array_get(r, 0), "0.0.0.0/0", 1));
	json_decref(r);
}

static void t_refused(void)
{
	static const struct {
		const char *text;
		size_t len; /* 0: strlen */
		const char *why;
	} cases[] = {
	    {"", 0, "names no address"},
	    {" ,\n\t, ", 0, "names no address"},
	    {"hsm.example.com:1792", 0, "\"hsm.example.com:1792\" is not an address and port"},
	    {"10.0.8.20", 0, "\"10.0.8.20\" is not"},
	    {"10.0.8.20:", 0, "\"10.0.8.20:\" is not"},
	    {"10.0.8.20:0", 0, "\"10.0.8.20:0\" is not"},
	    {"10.0.8.20:65536", 0, "\"10.0.8.20:65536\" is not"},
	    {"10.0.8.20:+1792", 0, "\"10.0.8.20:+1792\" is not"},
	    {"10.0.8.20:-1", 0, "\"10.0.8.20:-1\" is not"},
	    {"10.0.8.20:0x700", 0, "\"10.0.8.20:0x700\" is not"},
	    {"10.0.8.20:000001792", 0, "\"10.0.8.20:000001792\" is not"},
	    {"10.0.8.20/33:1", 0, "\"10.0.8.20/33:1\" is not"},
	    {"10.0.8.20/:1", 0, "\"10.0.8.20/:1\" is not"},
	    {"10.0.8.20/+8:1", 0, "\"10.0.8.20/+8:1\" is not"},
	    {"10.0.8.256:1", 0, "\"10.0.8.256:1\" is not"},
	    {"010.0.8.20:1", 0, "\"010.0.8.20:1\" is not"},
	    {"fd00::20:1792", 0, "\"fd00::20:1792\" is not"},
	    {"[fd00::20]1792", 0, "\"[fd00::20]1792\" is not"},
	    {"[fd00::20:1792", 0, "\"[fd00::20:1792\" is not"},
	    {"[fd00::20/129]:1", 0, "\"[fd00::20/129]:1\" is not"},
	    {"[10.0.8.20]:1", 0, "\"[10.0.8.20]:1\" is not"},
	    {"[fe80::1%eth0]:1", 0, "\"[fe80::1%eth0]:1\" is not"},
	    {"10.0.8.20:1792\x1b[2J\r", 0, "\"10.0.8.20:1792?[2J?\" is not"},
	    {"10.0.8.20:1792\xff\xc3", 0, "\"10.0.8.20:1792??\" is not"},
	    {"10.0.0.1:1\0"
	     "10.0.0.2:2",
	     21, "holds a NUL byte"},
	    {"10.0.0.1:1\0", 11, "holds a NUL byte"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char why[256] = "x";
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
		json_t *r = rules(cases[i].text, len, why);
		if (r || !strstr(why, cases[i].why))
			fprintf(stderr, "case %zu: got %s \"%s\"\n", i, r ? "rules" : "NULL", why);
		SG_CHECK(r == NULL && strstr(why, cases[i].why) != NULL);
		for (const char *c = why; *c; c++)
			SG_CHECK(*c >= 0x20 && *c < 0x7f);
	}

	/* An entry longer than the reader's buffer; a value over the bound. */
	char *big = malloc(SG_HSM_EGRESS_MAX + 2);
	SG_CHECK(big != NULL);
	memset(big, '1', SG_HSM_EGRESS_MAX + 1);
	char why[256];
	SG_CHECK(rules(big, 200, why) == NULL && strstr(why, "is not an address") != NULL);
	SG_CHECK(strlen(why) < 256 && strstr(why, "\"1111") != NULL);
	SG_CHECK(rules(big, SG_HSM_EGRESS_MAX + 1, why) == NULL && strstr(why, "longer than 4096 bytes") != NULL);
	/* At the bound: 4,096 bytes of entries and separators are read whole,
	 * one byte more is refused before any entry is. */
	size_t at = 0;
	while (at + 13 <= SG_HSM_EGRESS_MAX)
		at += (size_t)snprintf(big + at, 14, "10.0.0.1:443,");
	memset(big + at, ' ', SG_HSM_EGRESS_MAX - at);
	json_t *r = rules(big, SG_HSM_EGRESS_MAX, why);
	SG_CHECK(r && json_array_size(r) == SG_HSM_EGRESS_MAX / 13);
	json_decref(r);
	big[SG_HSM_EGRESS_MAX] = ' ';
	SG_CHECK(rules(big, SG_HSM_EGRESS_MAX + 1, why) == NULL && strstr(why, "longer than 4096 bytes") != NULL);
	free(big);
	/* A message cut at a small cap is still a string. */
	char tiny[8];
	SG_CHECK(sg_hsm_egress_rules("h:1", 3, tiny, sizeof(tiny)) == NULL && strlen(tiny) == 7);
}

SG_TEST_MAIN(SG_TEST(t_accepted), SG_TEST(t_refused))
