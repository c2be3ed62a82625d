/*
 * Fuzz target for sg_caclient_check (agent/sg_caclient.c): the input is a
 * CA's answer to CreateCertificate (a serialized IstioCertificateResponse)
 * for a fixed identity and a fixed key, so that every check (decode, one
 * certificate per element, the leaf's names and key, validity, the root
 * and the chain) can be reached: the seeds include answers that pass them
 * all, whose leaf holds the key below.
 *
 * The key is a throwaway test key, fixed here so that checked-in seeds
 * stay valid (a key made at start would match no seed). The seeds were
 * made with Python's cryptography package: a root, an intermediate and
 * leaves for the key with the identity as URI SAN, valid 2025-2125,
 * encoded as field 1 strings (valid-leaf-root, valid-leaf-intermediate-
 * root), and variants (one element, an extra SAN, a missing intermediate,
 * a truncated message). The roots' overlap and istiod's per-signer
 * answers: valid-leaf-root-bundle (a second, unrelated root before the
 * root in the last element), valid-signer-intermediate (the intermediate
 * as the last element) and valid-signer-intermediate-bundle (the second
 * root and the intermediate). The configured roots are the seeds' root,
 * below, so the intermediate is accepted by chaining to it.
 *
 * Oracles besides the sanitizers: the check answers SG_OK, SG_EINVAL or
 * SG_EINTERNAL; on SG_OK the certificate has a non-empty chain and root
 * (each holding a PEM certificate), at most SG_CACLIENT_ROOTS_MAX roots,
 * the key given, a serial, and not_before < not_after; on failure nothing
 * is returned.
 */
#include "sg_caclient.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ID "spiffe://cluster.local/ns/fuzz/sa/fuzz"

static const char key_pem[] = "-----BEGIN PRIVATE KEY-----\n"
                              "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgGQ7k+qQFuZgFdVpe\n"
                              "2gzZ9mv+hzy+OwMNRLDvdjTYsfWhRANCAASTZP/vr60CQb3n3FwRms4VSKEJvhSE\n"
                              "p/2XlsZFJfAiYDjBR5TTQCDoANf2oNcAnpesmPQCvoFfEZyY9ofHLZzA\n"
                              "-----END PRIVATE KEY-----\n";

/* The seeds' root (O=cluster.local), as the configured roots. */
static const char trust_pem[] = "-----BEGIN CERTIFICATE-----\n"
                                "MIIBVzCB/aADAgECAhQdu3/XbsShncOwBqsgiwIay6eVgjAKBggqhkjOPQQDAjAY\n"
                                "MRYwFAYDVQQKDA1jbHVzdGVyLmxvY2FsMCAXDTI1MDEwMTAwMDAwMFoYDzIxMjUw\n"
                                "MTAxMDAwMDAwWjAYMRYwFAYDVQQKDA1jbHVzdGVyLmxvY2FsMFkwEwYHKoZIzj0C\n"
                                "AQYIKoZIzj0DAQcDQgAEWDG6i7VivPqWYFUxpv+uXHdloOt53XR8IV5QJoxxsbrz\n"
                                "Oe/40jxSL7K18VyXmkxNrH/wd7uBSYQ31fDZePyxIKMjMCEwDwYDVR0TAQH/BAUw\n"
                                "AwEB/zAOBgNVHQ8BAf8EBAMCAQYwCgYIKoZIzj0EAwIDSQAwRgIhAIEY7EkfLVXj\n"
                                "XwwuJRhHy529u5/gXNS7Sv1FA0kUte14AiEAiBXRelL/0g4ovEolwNh1hvf3lJmH\n"
                                "HjQuO4kPc8H3RVQ=\n"
                                "-----END CERTIFICATE-----\n";

static size_t blocks(const char *s)
{
	size_t n = 0;
	for (const char *p = s; (p = strstr(p, "-----BEGIN CERTIFICATE-----")) != NULL; p++)
		n++;
	return n;
}

static void check(int cond)
{
	if (!cond)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_wlcert *c = NULL;
	int rc = sg_caclient_check(data, size, ID, key_pem, trust_pem, sizeof(trust_pem) - 1, (int64_t)time(NULL), &c);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc != SG_OK) {
		check(c == NULL);
		return 0;
	}
	check(c != NULL);
	check(c->chain_pem && strstr(c->chain_pem, "-----BEGIN CERTIFICATE-----") == c->chain_pem);
	check(c->root_pem && strstr(c->root_pem, "-----BEGIN CERTIFICATE-----") == c->root_pem);
	check(blocks(c->root_pem) <= SG_CACLIENT_ROOTS_MAX);
	check(c->key_pem && strcmp(c->key_pem, key_pem) == 0 && c->key_pem != key_pem);
	check(c->serial[0] != '\0' && c->serial[0] != '-');
	check(c->not_before < c->not_after);
	sg_wlcert_release(c);
	return 0;
}
