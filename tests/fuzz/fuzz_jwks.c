/*
 * Fuzz target for JWKS parsing (token/sg_jwks.c): arbitrary bytes as a JWKS
 * document. Oracles: the result is SG_OK or SG_EINVAL (an allocation
 * failure aside); an accepted set has 1..64 keys, and every key can be
 * asked to verify a (wrong) signature for every algorithm without crashing
 * and without ever succeeding.
 */
#include "sg_jwt.h"

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
	sg_jwks *k = NULL;
	int rc = sg_jwks_parse(&k, data, size);
	check(rc == 0 || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc != 0) {
		check(k == NULL);
		return 0;
	}
	check(sg_jwks_count(k) >= 1 && sg_jwks_count(k) <= SG_JWKS_KEYS_MAX);
	static const uint8_t msg[] = "eyJhbGciOiJFUzI1NiJ9.e30";
	static uint8_t sig[512];
	for (int a = 0; a < SG_JWS_ALG_COUNT; a++) {
		size_t len = a >= SG_JWS_ES256 ? (a == SG_JWS_ES256 ? 64 : a == SG_JWS_ES384 ? 96 : 132) : 256;
		int v = sg_jwks_verify(k, (sg_jws_alg)a, NULL, msg, sizeof(msg) - 1, sig, len);
		check(v == SG_EAUTH);
	}
	check(sg_jwks_verify(k, SG_JWS_ES256, "no-such-kid", msg, sizeof(msg) - 1, sig, 64) == SG_EAUTH);
	sg_jwks_release(k);
	return 0;
}
