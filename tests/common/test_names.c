/*
 * Tests for sg_names: the Kubernetes naming rules (DNS-1123 labels and
 * subdomains, uids, label values and qualified names) at their edges: lengths at and past the limits, every
 * position a '-' or '.' may not take, upper case, bytes outside ASCII, and
 * lengths that stop short of the string (the caller's n is what counts).
 */
#include "sg_names.h"
#include "sg_test.h"

#include <stdint.h>
#include <string.h>

static bool label(const char *s, size_t max)
{
	return sg_names_dns_label(s, strlen(s), max);
}

static bool subdomain(const char *s)
{
	return sg_names_dns_subdomain(s, strlen(s));
}

/* n copies of c, then NUL, in buf. */
static const char *run(char *buf, char c, size_t n)
{
	memset(buf, c, n);
	buf[n] = '\0';
	return buf;
}

static void t_label(void)
{
	SG_CHECK(label("a", 63) && label("0", 63) && label("a-b", 63) && label("a--b", 63) && label("9to5", 63));
	SG_CHECK(label("istio-system", SG_NAMES_LABEL_MAX));
	SG_CHECK(!label("", 63));
	SG_CHECK(!label("-a", 63) && !label("a-", 63) && !label("-", 63));
	SG_CHECK(!label("A", 63) && !label("aB", 63) && !label("a_b", 63) && !label("a.b", 63) && !label("a b", 63));
	SG_CHECK(!label("caf\xc3\xa9", 63));
	char buf[300];
	SG_CHECK(label(run(buf, 'a', 63), SG_NAMES_LABEL_MAX));
	SG_CHECK(!label(run(buf, 'a', 64), SG_NAMES_LABEL_MAX));
	SG_CHECK(label(run(buf, 'a', 64), 64)); /* max is the caller's */
	/* n, not the NUL, ends the name. */
	SG_CHECK(sg_names_dns_label("ab-", 2, 63));
	SG_CHECK(!sg_names_dns_label("ab-", 3, 63));
	SG_CHECK(!sg_names_dns_label("ab", 0, 63));
}

static void t_subdomain(void)
{
	SG_CHECK(subdomain("a") && subdomain("a.b") && subdomain("istio-ingressgateway-service-account"));
	SG_CHECK(subdomain("x-1.y-2.z"));
	SG_CHECK(!subdomain("") && !subdomain(".") && !subdomain(".a") && !subdomain("a.") && !subdomain("a..b"));
	SG_CHECK(!subdomain("a.-b") && !subdomain("a-.b") && !subdomain("Bad_Name") && !subdomain("a/b"));
	char buf[300];
	SG_CHECK(subdomain(run(buf, 'a', SG_NAMES_SUBDOMAIN_MAX))); /* one label of 253: only the total is limited */
	SG_CHECK(!subdomain(run(buf, 'a', SG_NAMES_SUBDOMAIN_MAX + 1)));
	run(buf, 'a', SG_NAMES_SUBDOMAIN_MAX);
	buf[100] = '.';
	SG_CHECK(subdomain(buf));
	buf[252] = '.';
	SG_CHECK(!subdomain(buf)); /* ends with '.' */
	SG_CHECK(sg_names_dns_subdomain("a.b.", 3));
	SG_CHECK(!sg_names_dns_subdomain("a.b", 2));
}

static void t_uid(void)
{
	SG_CHECK(sg_names_uid("3e1c4d0f-8d3c-4a5b-9f2e-0123456789ab"));
	SG_CHECK(sg_names_uid("ABC-def-123") && sg_names_uid("a") && sg_names_uid("-"));
	SG_CHECK(!sg_names_uid("") && !sg_names_uid("a_b") && !sg_names_uid("a.b") && !sg_names_uid("a b"));
	SG_CHECK(!sg_names_uid("\xff"));
	char buf[100];
	SG_CHECK(sg_names_uid(run(buf, 'f', SG_NAMES_UID_MAX)));
	SG_CHECK(!sg_names_uid(run(buf, 'f', SG_NAMES_UID_MAX + 1)));
}

static void t_label_value(void)
{
	SG_CHECK(sg_names_label_value("signetd-7d9f8-abcde") && sg_names_label_value("Issuer"));
	SG_CHECK(sg_names_label_value("a") && sg_names_label_value("a.b_c-d") && sg_names_label_value("0"));
	SG_CHECK(!sg_names_label_value("") && !sg_names_label_value("-a") && !sg_names_label_value("a-"));
	SG_CHECK(!sg_names_label_value(".a") && !sg_names_label_value("a_") && !sg_names_label_value("a/b"));
	SG_CHECK(!sg_names_label_value("a b") && !sg_names_label_value("\xc3\xa9"));
	char buf[100];
	SG_CHECK(sg_names_label_value(run(buf, 'x', SG_NAMES_LABEL_MAX)));
	SG_CHECK(!sg_names_label_value(run(buf, 'x', SG_NAMES_LABEL_MAX + 1)));
}

static void t_subdomain_max(void)
{
	char buf[400];
	/* The plain check is the max form at 253. */
	SG_CHECK(sg_names_dns_subdomain_max("a.b", 3, SG_NAMES_SUBDOMAIN_MAX));
	SG_CHECK(!sg_names_dns_subdomain_max(run(buf, 'a', 254), 254, SG_NAMES_SUBDOMAIN_MAX));
	SG_CHECK(sg_names_dns_subdomain_max(buf, 254, 254));
	SG_CHECK(!sg_names_dns_subdomain_max(buf, 4, 3));
	/* SIZE_MAX: the pattern alone, whatever the length. */
	run(buf, 'a', 300);
	buf[150] = '.';
	SG_CHECK(sg_names_dns_subdomain_max(buf, 300, SIZE_MAX));
	SG_CHECK(!sg_names_dns_subdomain(buf, 300));
	SG_CHECK(!sg_names_dns_subdomain_max("", 0, SIZE_MAX));
	SG_CHECK(!sg_names_dns_subdomain_max("a..b", 4, SIZE_MAX) && !sg_names_dns_subdomain_max("a.", 2, SIZE_MAX));
	SG_CHECK(!sg_names_dns_subdomain_max("A.b", 3, SIZE_MAX) && !sg_names_dns_subdomain_max("a.-b", 4, SIZE_MAX));
}

static void t_label_name(void)
{
	char buf[100];
	SG_CHECK(sg_names_label_name("My_Value.1-x", 12, SG_NAMES_LABEL_MAX));
	SG_CHECK(sg_names_label_name("a", 1, 1) && !sg_names_label_name("ab", 2, 1));
	SG_CHECK(!sg_names_label_name("", 0, SIZE_MAX));
	SG_CHECK(!sg_names_label_name("_a", 2, 63) && !sg_names_label_name("a.", 2, 63));
	SG_CHECK(!sg_names_label_name("a/b", 3, 63) && !sg_names_label_name("a b", 3, 63));
	SG_CHECK(sg_names_label_name(run(buf, 'Z', 63), 63, SG_NAMES_LABEL_MAX));
	SG_CHECK(!sg_names_label_name(run(buf, 'Z', 64), 64, SG_NAMES_LABEL_MAX));
	SG_CHECK(sg_names_label_name(buf, 64, SIZE_MAX)); /* the pattern alone */
	/* n, not the NUL, ends the name. */
	SG_CHECK(sg_names_label_name("ab-", 2, 63) && !sg_names_label_name("ab-", 3, 63));
}

static bool qualified(const char *s)
{
	return sg_names_qualified(s, strlen(s));
}

static void t_qualified(void)
{
	SG_CHECK(qualified("app") && qualified("My.Name_1"));
	SG_CHECK(qualified("trust.cert-manager.io/bundle") && qualified("example.com/MyName"));
	SG_CHECK(!qualified("") && !qualified("/") && !qualified("/name") && !qualified("example.com/"));
	SG_CHECK(!qualified("a/b/c") && !qualified("Example.com/x") && !qualified("a..b/x"));
	SG_CHECK(!qualified("-x") && !qualified("x-") && !qualified("a/-x"));
	char buf[400];
	/* The name part: at most 63 bytes. */
	run(buf, 'n', 63);
	SG_CHECK(qualified(buf));
	SG_CHECK(!qualified(run(buf, 'n', 64)));
	memcpy(buf, "p/", 2);
	run(buf + 2, 'n', 63);
	SG_CHECK(qualified(buf));
	run(buf + 2, 'n', 64);
	SG_CHECK(!qualified(buf));
	/* The prefix: a DNS subdomain of at most 253 bytes. */
	run(buf, 'p', 253);
	memcpy(buf + 253, "/x", 3);
	SG_CHECK(qualified(buf));
	run(buf, 'p', 254);
	memcpy(buf + 254, "/x", 3);
	SG_CHECK(!qualified(buf));
	/* n, not the NUL, ends the name. */
	SG_CHECK(sg_names_qualified("a/bc", 3) && !sg_names_qualified("a/bc", 2));
}

SG_TEST_MAIN(SG_TEST(t_label), SG_TEST(t_subdomain), SG_TEST(t_uid), SG_TEST(t_label_value),
             SG_TEST(t_subdomain_max), SG_TEST(t_label_name), SG_TEST(t_qualified))
