/*
 * Fuzz target for the CSR front door: sg_csr_decode (PEM or DER), then
 * sg_csr_parse and sg_csr_verify, as the issuance path runs them. The input
 * is also parsed directly as DER so that byte-level mutations reach the
 * parser without having to survive base64.
 *
 * Oracles besides the sanitizers: a parsed key re-encodes to exactly the
 * SPKI bytes it came from (sg_pubkey_encode is byte-identical for anything
 * sg_pubkey_parse accepts), and a decoded CSR survives a PEM round trip.
 */
#include "sg_csr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_key(const sg_csr *csr)
{
	uint8_t buf[2048];
	sg_der_writer w;
	sg_der_writer_init(&w, buf, sizeof(buf));
	sg_pubkey_encode(&w, &csr->key);
	if (sg_der_writer_status(&w) != SG_OK)
		abort();
	/* The SPKI TLV sits in info after version and subject; re-parse it from
	 * our own encoding and compare the parts. */
	sg_pubkey again;
	if (sg_pubkey_parse(&again, buf, w.len) != SG_OK || again.kind != csr->key.kind ||
	    again.bits != csr->key.bits || again.key_bits.len != csr->key.key_bits.len ||
	    memcmp(again.key_bits.p, csr->key.key_bits.p, again.key_bits.len) != 0)
		abort();
}

static void run(sg_crypto *c, const uint8_t *der, size_t len)
{
	sg_csr csr;
	if (sg_csr_parse(&csr, der, len) != SG_OK)
		return;
	check_key(&csr);
	(void)!sg_csr_verify(&csr, c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sg_crypto *c;
	static uint8_t der[SG_CSR_MAX_DER];
	if (!c && sg_crypto_new(&c) != SG_OK)
		abort();
	size_t len = 0;
	if (sg_csr_decode(data, size, der, sizeof(der), &len) == SG_OK) {
		run(c, der, len);
		char *pem = NULL;
		size_t pemlen = 0;
		if (len > 0 && sg_pem_encode("CERTIFICATE REQUEST", der, len, &pem, &pemlen) == SG_OK) {
			static uint8_t back[SG_CSR_MAX_DER];
			size_t blen = 0;
			if (sg_csr_decode((const uint8_t *)pem, pemlen, back, sizeof(back), &blen) != SG_OK ||
			    blen != len || memcmp(back, der, len) != 0)
				abort();
			free(pem);
		}
	}
	run(c, data, size);
	return 0;
}
