/*
 * Fuzz target for the PKCS#11 adapter's readers of a module's attribute
 * bytes (hsm/sg_hsm.c through its private header): hsm_spki_of_ec on a
 * CKA_EC_POINT for P-256 and for P-384, and hsm_spki_of_rsa on a
 * CKA_MODULUS and CKA_PUBLIC_EXPONENT.
 *
 * Input: byte 0 picks the reader (0: P-256, 1: P-384, 2: RSA); for RSA
 * bytes 1-2 (big-endian) are the modulus' length, the modulus follows and
 * the rest is the exponent. Oracles, each from the specification rather
 * than the code: an accepted EC point is the uncompressed form (0x04 and
 * both coordinates) found raw or in a minimal OCTET STRING, and the
 * SubjectPublicKeyInfo ends with exactly those bytes after a BIT STRING
 * header, at the curve's fixed length (91 bytes for P-256, 120 for
 * P-384); an accepted RSA key has a modulus of 2048, 3072 or 4096 bits and
 * an odd exponent of at least 3 and at most 64 bits, and OpenSSL reads the
 * SubjectPublicKeyInfo back to the same modulus and exponent. A refusal
 * is SG_EINVAL with a printable message. Nothing may crash or leak.
 */
#include "sg_hsm_impl.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_refusal(int rc)
{
	check(rc == SG_EINVAL);
	const char *msg = sg_error_last()->msg;
	check(*msg != '\0');
	for (const char *p = msg; *p; p++)
		check(*p >= 0x20 && *p < 0x7f);
}

static void ec(sg_key_type type, const uint8_t *p, size_t n)
{
	size_t field = type == SG_KEY_EC_P256 ? 32 : 48, want = 1 + 2 * field;
	uint8_t spki[SPKI_MAX];
	size_t len = 0;
	int rc = hsm_spki_of_ec(type, p, n, spki, sizeof(spki), &len);
	if (rc != SG_OK) {
		check_refusal(rc);
		return;
	}
	const uint8_t *point = NULL;
	if (n == want)
		point = p; /* raw */
	else if (n == want + 2 && p[0] == 0x04 && p[1] == want)
		point = p + 2; /* a minimal OCTET STRING (both lengths are below 128) */
	check(point != NULL && point[0] == 0x04);
	check(len == (type == SG_KEY_EC_P256 ? 91u : 120u));
	/* BIT STRING, length, no unused bits, then the point */
	check(spki[len - want - 3] == 0x03 && spki[len - want - 2] == want + 1 && spki[len - want - 1] == 0x00);
	check(memcmp(spki + len - want, point, want) == 0);
}

static size_t bits_of(const uint8_t *p, size_t n)
{
	while (n > 0 && *p == 0) {
		p++;
		n--;
	}
	if (n == 0)
		return 0;
	size_t bits = n * 8;
	for (uint8_t top = p[0]; !(top & 0x80); top <<= 1)
		bits--;
	return bits;
}

static void rsa(const uint8_t *data, size_t size)
{
	if (size < 2)
		return;
	size_t nlen = (size_t)data[0] << 8 | data[1];
	if (nlen > size - 2)
		nlen = size - 2;
	const uint8_t *n = data + 2, *e = n + nlen;
	size_t elen = size - 2 - nlen;
	uint8_t spki[SPKI_MAX];
	size_t len = 0;
	sg_key_type type = SG_KEY_EC_P256;
	int rc = hsm_spki_of_rsa(n, nlen, e, elen, &type, spki, sizeof(spki), &len);
	if (rc != SG_OK) {
		check_refusal(rc);
		return;
	}
	size_t bits = bits_of(n, nlen);
	check((bits == 2048 && type == SG_KEY_RSA_2048) || (bits == 3072 && type == SG_KEY_RSA_3072) ||
	      (bits == 4096 && type == SG_KEY_RSA_4096));
	BIGNUM *want_n = BN_bin2bn(n, (int)nlen, NULL), *want_e = BN_bin2bn(e, (int)elen, NULL);
	check(want_n && want_e);
	check(BN_is_odd(want_e) && BN_num_bits(want_e) >= 2 && BN_num_bits(want_e) <= 64);
	const uint8_t *q = spki;
	EVP_PKEY *k = d2i_PUBKEY(NULL, &q, (long)len);
	check(k != NULL && q == spki + len);
	BIGNUM *got_n = NULL, *got_e = NULL;
	check(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &got_n) == 1 &&
	      EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &got_e) == 1);
	check(BN_cmp(got_n, want_n) == 0 && BN_cmp(got_e, want_e) == 0);
	BN_free(got_n);
	BN_free(got_e);
	BN_free(want_n);
	BN_free(want_e);
	EVP_PKEY_free(k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		ec(SG_KEY_EC_P256, data + 1, size - 1);
		break;
	case 1:
		ec(SG_KEY_EC_P384, data + 1, size - 1);
		break;
	default:
		rsa(data + 1, size - 1);
	}
	return 0;
}
