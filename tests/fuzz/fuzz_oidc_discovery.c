/*
 * Fuzz target for the OIDC discovery document parser (ra/sg_jwks_kube.c,
 * sg_jwks_kube_parse_discovery): arbitrary bytes as the answer of the API
 * server's /.well-known/openid-configuration. Oracles: the result is SG_OK
 * or SG_EINVAL (an allocation failure aside); on failure the issuer buffer
 * is empty; an accepted issuer is an https URL of at most
 * SG_JWKS_KUBE_ISSUER_MAX printable bytes without query, fragment or
 * userinfo; a second parse gives the same answer; and a buffer one byte too
 * small is refused rather than overrun or cut.
 */
#include "sg_jwks_kube.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char iss[SG_JWKS_KUBE_ISSUER_MAX + 1], again[SG_JWKS_KUBE_ISSUER_MAX + 1];
	int rc = sg_jwks_kube_parse_discovery(data, size, iss, sizeof(iss));
	check(rc == 0 || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc != 0) {
		check(iss[0] == '\0');
		return 0;
	}
	size_t n = strlen(iss);
	check(n > 8 && n <= SG_JWKS_KUBE_ISSUER_MAX && memcmp(iss, "https://", 8) == 0);
	check(iss[8] != '/');
	for (size_t i = 0; i < n; i++)
		check(iss[i] > 0x20 && iss[i] < 0x7f && iss[i] != '?' && iss[i] != '#');
	const char *slash = strchr(iss + 8, '/');
	const char *at = strchr(iss + 8, '@');
	check(!at || (slash && at > slash));
	check(sg_jwks_kube_parse_discovery(data, size, again, sizeof(again)) == 0 && strcmp(iss, again) == 0);
	check(sg_jwks_kube_parse_discovery(data, size, again, n) == SG_EINVAL && again[0] == '\0');
	return 0;
}
