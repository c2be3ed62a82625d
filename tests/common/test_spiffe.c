/* Tests for common/sg_spiffe.h: the trust-domain rule. */
#include "sg_spiffe.h"
#include "sg_test.h"

static void t_trust_domain(void)
{
	static const char *const ok[] = {"cluster.local", "a", "example.com", "td_with-mixed.chars", "x@y"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		SG_CHECK(sg_trust_domain_valid(ok[i]));
	static const char *const bad[] = {"", "a/b", "has space", "tab\there", "nl\n", "\x7f", "caf\xc3\xa9", "Cluster.Local",
					  "a:b", "a%2f"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		SG_CHECK(!sg_trust_domain_valid(bad[i]));
	SG_CHECK(!sg_trust_domain_valid(NULL));
	char longest[SG_TRUST_DOMAIN_MAX + 2];
	memset(longest, 'a', sizeof(longest));
	longest[SG_TRUST_DOMAIN_MAX] = '\0';
	SG_CHECK(sg_trust_domain_valid(longest));
	longest[SG_TRUST_DOMAIN_MAX] = 'a';
	longest[SG_TRUST_DOMAIN_MAX + 1] = '\0';
	SG_CHECK(!sg_trust_domain_valid(longest));
}

static void t_normalize(void)
{
	char out[16];
	SG_CHECK_OK(sg_trust_domain_normalize("corp@example", out, sizeof(out)));
	SG_CHECK(strcmp(out, "corp.example") == 0);
	SG_CHECK_RC(sg_trust_domain_normalize("a/b", out, sizeof(out)), SG_EINVAL);
	SG_CHECK_RC(sg_trust_domain_normalize("a-very-long-trust.domain", out, sizeof(out)), SG_EINVAL);
}

SG_TEST_MAIN(SG_TEST(t_trust_domain), SG_TEST(t_normalize))
