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
 * a truncated message).
 *
 * Oracles besides the sanitizers: the check answers SG_OK, SG_EINVAL or
 * SG_EINTERNAL; on SG_OK the certificate has a non-empty chain and root
 * (each holding a PEM certificate), the key given, a serial, and
 * not_before < not_after; on failure nothing is returned.
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

static void check(int cond)
{
	if (!cond)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_wlcert *c = NULL;
	int rc = sg_caclient_check(data, size, ID, key_pem, (int64_t)time(NULL), &c);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc != SG_OK) {
		check(c == NULL);
		return 0;
	}
	check(c != NULL);
	check(c->chain_pem && strstr(c->chain_pem, "-----BEGIN CERTIFICATE-----") == c->chain_pem);
	check(c->root_pem && strstr(c->root_pem, "-----BEGIN CERTIFICATE-----") == c->root_pem);
	check(c->key_pem && strcmp(c->key_pem, key_pem) == 0 && c->key_pem != key_pem);
	check(c->serial[0] != '\0' && c->serial[0] != '-');
	check(c->not_before < c->not_after);
	sg_wlcert_release(c);
	return 0;
}
