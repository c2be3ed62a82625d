/*
 * key_fixture: OpenSSL test keys for the sg_csr and sg_key tests
 * (test_csr.c, test_key.c), generated on first use and cached by name for
 * the life of the program, so that RSA key generation is paid once per kind.
 * A kind is "rsa<bits>", "ed25519" or an EC curve name OpenSSL knows
 * ("P-256", "secp256k1", ...); two names for one curve ("P-256",
 * "prime256v1") give two different keys, which a test can use as a second,
 * unrelated key. Failure to generate aborts. Header-only: each test file is
 * its own program.
 */
#ifndef KEY_FIXTURE_H
#define KEY_FIXTURE_H

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

static EVP_PKEY *keygen(const char *kind)
{
	if (!strncmp(kind, "rsa", 3))
		return EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)atoi(kind + 3));
	if (!strcmp(kind, "ed25519"))
		return EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	return EVP_PKEY_Q_keygen(NULL, NULL, "EC", kind);
}

/* The cached key for kind: borrowed, never freed (it lives as long as the
 * program). The cache keeps the kind pointer, so kind must be a string
 * literal; at most sixteen kinds, a seventeenth aborts. */
static EVP_PKEY *key_of(const char *kind)
{
	static struct {
		const char *kind;
		EVP_PKEY *k;
	} cache[16];
	for (size_t i = 0; i < 16; i++) {
		if (cache[i].kind && !strcmp(cache[i].kind, kind))
			return cache[i].k;
		if (!cache[i].kind) {
			cache[i].kind = kind;
			if (!(cache[i].k = keygen(kind)))
				abort();
			return cache[i].k;
		}
	}
	abort();
}

#endif
