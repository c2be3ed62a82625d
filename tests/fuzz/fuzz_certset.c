/*
 * Fuzz target for sg_certset (signer/sg_certset.c): the input as the PEM
 * text of one bundle source, added to a set without filters and to one with
 * both filters (at a fixed time, so runs repeat). The input is also wrapped
 * by us as one CERTIFICATE block (sg_pem_encode), so that byte-level
 * mutations reach the DER checks without having to survive base64.
 *
 * Oracles besides the sanitizers:
 *   - an add answers SG_OK or SG_EINVAL (an allocation failure aside), and
 *     a refused add leaves the set empty with zero counters;
 *   - after one add to an empty set, every block read is accounted for
 *     once: kept, duplicate, expired or non-CA;
 *   - the PEM output is NUL-terminated at its length, starts with a BEGIN
 *     line and has no final newline; read back into a fresh set with the
 *     same options it gives the same text (idempotence), and adding the
 *     input again changes nothing (deduplication);
 *   - a JKS store of the set has at least the length one entry implies,
 *     and its passwordless PKCS#12 store is DER without a MAC: both print
 *     every subject as Go does (trust-manager's aliases), from bytes the
 *     fuzzer controls.
 */
#include "sg_certset.h"
#include "sg_csr.h"

#include <openssl/pkcs12.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static char *pem_of(const sg_certset *s, size_t *len)
{
	char *p = NULL;
	int rc = sg_certset_pem(s, &p, len);
	check(rc == SG_OK || rc == SG_EINTERNAL);
	if (rc != SG_OK)
		return NULL;
	check(p && strlen(p) == *len);
	return p;
}

/* JKS: 12 bytes of header, a 20-byte digest, and at least one entry of
 * the fixed fields (4 + 2 + 8 + 2 + 4 + 4), an alias of at least
 * "hhhhhhhh|" and one byte of DER; fewer entries than certificates only
 * when aliases repeat. A subject the aliases cannot print (an odd
 * BMPString, a length past the bound) is SG_EINVAL. Then the same
 * aliases through the passwordless PKCS#12 store, which OpenSSL must read
 * back without a password. */
static void check_stores(const sg_certset *s)
{
	uint8_t *jks = NULL;
	size_t len = 0;
	int rc = sg_certset_jks(s, "changeit", &jks, &len);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc == SG_OK)
		check(jks && len >= 32 + 24 + 9 + 1 && memcmp(jks, "\xfe\xed\xfe\xed", 4) == 0);
	free(jks);
	uint8_t *p12 = NULL;
	rc = sg_certset_pkcs12(s, "", SG_CERTSET_P12_LEGACY_RC2, &p12, &len);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc == SG_OK) {
		const unsigned char *q = p12;
		PKCS12 *pk = d2i_PKCS12(NULL, &q, (long)len);
		check(pk && q == p12 + len && !PKCS12_mac_present(pk));
		PKCS12_free(pk);
	}
	free(p12);
}

static void run(const char *text, size_t size, const sg_certset_opts *opts)
{
	sg_certset *s = NULL;
	if (sg_certset_new(&s, opts) != SG_OK)
		return;
	int rc = sg_certset_add_pem(s, text, size);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	sg_certset_stats st;
	sg_certset_stats_get(s, &st);
	if (rc != SG_OK) {
		check(sg_certset_count(s) == 0 && st.blocks == 0 && st.duplicates == 0 && st.expired == 0 &&
		      st.non_ca == 0);
		sg_certset_free(s);
		return;
	}
	size_t n = sg_certset_count(s);
	check(n <= SG_CERTSET_MAX);
	check(st.blocks == n + st.duplicates + st.expired + st.non_ca);
	check(opts || (st.expired == 0 && st.non_ca == 0));

	size_t len = 0;
	char *pem = pem_of(s, &len);
	if (pem && n == 0)
		check(len == 0);
	if (pem && n > 0) {
		check(strncmp(pem, "-----BEGIN CERTIFICATE-----\n", 28) == 0 && pem[len - 1] == '-');
		/* Idempotence: our output reads back to itself. */
		sg_certset *again = NULL;
		if (sg_certset_new(&again, opts) == SG_OK) {
			rc = sg_certset_add_pem(again, pem, len);
			check(rc == SG_OK || rc == SG_EINTERNAL);
			size_t len2 = 0;
			char *pem2 = rc == SG_OK ? pem_of(again, &len2) : NULL;
			if (pem2)
				check(sg_certset_count(again) == n && len2 == len && memcmp(pem, pem2, len) == 0);
			free(pem2);
			sg_certset_free(again);
		}
		/* The same source again adds nothing. */
		rc = sg_certset_add_pem(s, text, size);
		check(rc == SG_OK || rc == SG_EINTERNAL);
		size_t len3 = 0;
		char *pem3 = rc == SG_OK ? pem_of(s, &len3) : NULL;
		if (pem3)
			check(sg_certset_count(s) == n && len3 == len && memcmp(pem, pem3, len) == 0);
		free(pem3);
		check_stores(s);
	}
	free(pem);
	sg_certset_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* 2023-11-14: certificates that end before are expired. */
	static const sg_certset_opts filtered = {.filter_expired = true, .filter_non_ca = true, .now = 1700000000};
	run((const char *)data, size, NULL);
	run((const char *)data, size, &filtered);

	/* The input as the DER of one certificate. */
	char *pem = NULL;
	size_t len = 0;
	if (size > 0 && sg_pem_encode("CERTIFICATE", data, size, &pem, &len) == SG_OK) {
		run(pem, len, NULL);
		run(pem, len, &filtered);
	}
	free(pem);
	return 0;
}
