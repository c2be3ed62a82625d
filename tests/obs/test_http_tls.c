/*
 * Tests for the TLS policy of sg_http (sg_http.h, obs/sg_http_tls.c):
 * Kubernetes' names for --tls-min-version and --tls-cipher-suites, with
 * component-base's messages for what it refuses, and the check that GnuTLS
 * serves exactly the suites a list names (refused, naming the extra
 * suites, when its key exchange x cipher x MAC sets would add some). The
 * handshakes themselves are tests/trust/test_webhook.py's.
 *
 * Hostile cases: empty items, spaces, unknown and near-miss names, too
 * many suites, versions out of range, a list that does not combine into
 * itself.
 */
#include "sg_http.h"
#include "sg_test.h"

#include <string.h>

static void t_versions(void)
{
	uint16_t v = 7;
	SG_CHECK_OK(sg_http_tls_version_parse("", &v));
	SG_CHECK(v == 0);
	SG_CHECK_OK(sg_http_tls_version_parse("VersionTLS10", &v));
	SG_CHECK(v == 0x0301);
	SG_CHECK_OK(sg_http_tls_version_parse("VersionTLS13", &v));
	SG_CHECK(v == 0x0304);
	static const char *const bad[] = {"VersionTLS14", "versiontls12",  "1.2",
	                                  "TLS1.2",       "VersionTLS12 ", "VersionSSL30"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		SG_CHECK_RC(sg_http_tls_version_parse(bad[i], &v), SG_EINVAL);
		SG_CHECK_MSG("unknown tls version \"");
	}
	SG_CHECK_RC(sg_http_tls_version_parse(NULL, &v), SG_EINVAL);
}

static void t_suites(void)
{
	uint16_t s[SG_HTTP_TLS_SUITES_MAX];
	size_t n = 9;
	SG_CHECK_OK(sg_http_tls_suites_parse("", s, SG_HTTP_TLS_SUITES_MAX, &n));
	SG_CHECK(n == 0);
	SG_CHECK_OK(sg_http_tls_suites_parse(
	    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_AES_128_GCM_SHA256", s,
	    SG_HTTP_TLS_SUITES_MAX, &n));
	SG_CHECK(n == 3 && s[0] == 0xc02f && s[1] == 0xcca8 && s[2] == 0x1301);
	/* Every name of component-base's two lists. */
	SG_CHECK_OK(sg_http_tls_suites_parse(
	    "TLS_RSA_WITH_AES_128_CBC_SHA,TLS_RSA_WITH_AES_256_CBC_SHA,TLS_RSA_WITH_AES_128_GCM_SHA256,"
	    "TLS_RSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_"
	    "SHA256,"
	    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,TLS_ECDHE_RSA_WITH_AES_128_CBC_"
	    "SHA,"
	    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
	    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,"
	    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,"
	    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,"
	    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_RSA_WITH_RC4_128_SHA,TLS_RSA_WITH_3DES_EDE_CBC_SHA,"
	    "TLS_RSA_WITH_AES_128_CBC_SHA256,TLS_ECDHE_ECDSA_WITH_RC4_128_SHA,TLS_ECDHE_RSA_WITH_RC4_128_SHA,"
	    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,"
	    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
	    s, SG_HTTP_TLS_SUITES_MAX, &n));
	SG_CHECK(n == 27);
	SG_CHECK_RC(sg_http_tls_suites_parse("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_BOGUS", s, 4, &n), SG_EINVAL);
	SG_CHECK_MSG("Cipher suite TLS_BOGUS not supported or doesn't exist");
	SG_CHECK_RC(sg_http_tls_suites_parse("tls_ecdhe_rsa_with_aes_128_gcm_sha256", s, 4, &n), SG_EINVAL);
	SG_CHECK_RC(sg_http_tls_suites_parse("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,,TLS_AES_128_GCM_SHA256", s, 4, &n),
	            SG_EINVAL); /* an empty item is a name Go does not know */
	SG_CHECK_MSG("Cipher suite  not supported");
	SG_CHECK_RC(sg_http_tls_suites_parse("TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384", s, 1, &n), SG_EINVAL);
	SG_CHECK_RC(sg_http_tls_suites_parse(NULL, s, 4, &n), SG_EINVAL);
}

static void t_policy(void)
{
	SG_CHECK_OK(sg_http_tls_policy_check(NULL));
	sg_http_tls_policy p = {.min_version = 0x0304};
	SG_CHECK_OK(sg_http_tls_policy_check(&p));
	p.min_version = 0x0301; /* Go allows TLS 1.0 when asked; so does GnuTLS */
	SG_CHECK_OK(sg_http_tls_policy_check(&p));
	p.min_version = 0x0300;
	SG_CHECK_RC(sg_http_tls_policy_check(&p), SG_EINVAL);
	/* A closed product: ECDHE with ECDSA and RSA x AES-GCM and CHACHA20. */
	static const uint16_t modern[] = {0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8};
	p = (sg_http_tls_policy){.cipher_suites = modern, .ncipher_suites = 6};
	SG_CHECK_OK(sg_http_tls_policy_check(&p));
	/* One suite alone, and TLS 1.3 names beside it (they change nothing). */
	static const uint16_t one[] = {0xc02b, 0x1301, 0x1303};
	p = (sg_http_tls_policy){.cipher_suites = one, .ncipher_suites = 3};
	SG_CHECK_OK(sg_http_tls_policy_check(&p));
	/* Parts that combine into more: ECDHE-RSA x AES-128-GCM and RSA x
	 * AES-256-CBC-SHA1 would add RSA x AES-128-GCM and ECDHE-RSA x
	 * AES-256-CBC-SHA1. */
	static const uint16_t mixed[] = {0xc02f, 0x0035};
	p = (sg_http_tls_policy){.cipher_suites = mixed, .ncipher_suites = 2};
	SG_CHECK_RC(sg_http_tls_policy_check(&p), SG_EINVAL);
	SG_CHECK_MSG("TLS_RSA_WITH_AES_128_GCM_SHA256");
	SG_CHECK_MSG("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA");
	/* With TLS 1.3 as the minimum the list governs nothing (Go's rule). */
	p.min_version = 0x0304;
	SG_CHECK_OK(sg_http_tls_policy_check(&p));
	static const uint16_t unknown[] = {0x1234};
	p = (sg_http_tls_policy){.cipher_suites = unknown, .ncipher_suites = 1};
	SG_CHECK_RC(sg_http_tls_policy_check(&p), SG_EINVAL);
	p.ncipher_suites = SG_HTTP_TLS_SUITES_MAX + 1;
	SG_CHECK_RC(sg_http_tls_policy_check(&p), SG_EINVAL);
}

SG_TEST_MAIN(SG_TEST(t_versions), SG_TEST(t_suites), SG_TEST(t_policy))
