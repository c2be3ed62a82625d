/*
 * Fuzz target for sg_x509 (signer/sg_x509.c): the input as PEM text into
 * sg_x509_bundle_parse, and every certificate parsed through
 * sg_x509_get_facts, sg_x509_names_are and sg_x509_chains_to. The input is
 * also wrapped by us as one CERTIFICATE block (sg_pem_encode), so that
 * byte-level mutations reach the DER decoder without having to survive
 * base64.
 *
 * Oracles besides the sanitizers: parsing answers SG_OK or SG_EINVAL (an
 * allocation failure aside) and leaves no bundle behind on failure; a
 * bundle holds 1..SG_X509_BUNDLE_MAX certificates; facts answer SG_OK or
 * SG_EINVAL, and a serial is lower-case hex, at most 40 digits, with an
 * optional leading '-'; an index past the end is SG_EINVAL / false.
 */
#include "sg_csr.h"
#include "sg_x509.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_serial(const char *s)
{
	size_t n = strlen(s);
	check(n > 0 && n <= SG_X509_SERIAL_HEX_MAX + 1);
	for (size_t i = 0; i < n; i++)
		check((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (i == 0 && s[0] == '-' && n > 1));
}

static void run(const char *pem, size_t len)
{
	sg_x509_bundle *b = NULL;
	int rc = sg_x509_bundle_parse(&b, pem, len);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc != SG_OK) {
		check(b == NULL);
		return;
	}
	size_t n = sg_x509_bundle_count(b);
	check(n >= 1 && n <= SG_X509_BUNDLE_MAX);
	static const char *const dns[] = {"istiod.istio-system.svc", "a.example", "a.example"};
	for (size_t i = 0; i < n; i++) {
		sg_x509_facts f;
		rc = sg_x509_get_facts(b, i, &f);
		check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
		if (rc == SG_OK)
			check_serial(f.serial);
		(void)sg_x509_names_are(b, i, NULL, NULL, 0, NULL);
		(void)sg_x509_names_are(b, i, "istiod", dns, 1, "spiffe://cluster.local/ns/istio-system/sa/istiod");
		(void)sg_x509_names_are(b, i, "", dns + 1, 2, NULL);
	}
	sg_x509_facts f;
	check(sg_x509_get_facts(b, n, &f) == SG_EINVAL);
	check(!sg_x509_names_are(b, n, NULL, NULL, 0, NULL));
	(void)sg_x509_chains_to(b, b);
	sg_x509_bundle_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run((const char *)data, size);

	/* The input as the DER of one certificate. */
	char *pem = NULL;
	size_t len = 0;
	if (size > 0 && sg_pem_encode("CERTIFICATE", data, size, &pem, &len) == SG_OK)
		run(pem, len);
	free(pem);
	return 0;
}
