/*
 * The PKCS#11 adapter's readers of a module's attribute bytes
 * (hsm/sg_hsm.c: hsm_spki_of_ec, hsm_spki_of_rsa), which turn the
 * CKA_EC_POINT of an EC key, or the CKA_MODULUS and CKA_PUBLIC_EXPONENT of
 * an RSA key, into the SubjectPublicKeyInfo the CA certificate carries.
 * Those bytes come from whatever module the user loads, so they are input.
 *
 * White-box (the adapter's private header): a module that returns hostile
 * attributes cannot be made from SoftHSM2 and the real modules the other
 * tests load. What is shown:
 *  - a real key's attributes (made by OpenSSL) give exactly the
 *    SubjectPublicKeyInfo OpenSSL writes for that key: the EC point raw and
 *    wrapped in an OCTET STRING (SoftHSM2's form), both curves; RSA of the
 *    three sizes, with leading zero bytes in the modulus and exponent;
 *  - refused: points of the wrong length, compressed or hybrid prefixes,
 *    the other curve's point, wrappings that are not minimal DER, lie about
 *    their length or carry trailing bytes; moduli of other sizes; exponents
 *    that are even, below 3, empty or over 64 bits; a key type that is not
 *    EC given as one; an output buffer too small (refused, not overrun).
 */
#include "sg_hsm_impl.h"
#include "sg_test.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <string.h>

/* OpenSSL's encoding of key's SubjectPublicKeyInfo into out (cap bytes);
 * its length, 0 on failure. */
static size_t ossl_spki(EVP_PKEY *key, uint8_t *out, size_t cap)
{
	int n = i2d_PUBKEY(key, NULL);
	if (n <= 0 || (size_t)n > cap)
		return 0;
	uint8_t *p = out;
	return i2d_PUBKEY(key, &p) == n ? (size_t)n : 0;
}

static EVP_PKEY *ec_key(const char *curve, uint8_t *point, size_t cap, size_t *len)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", curve);
	if (!k || EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, point, cap, len) != 1)
		abort();
	return k;
}

static int ec_of(sg_key_type type, const uint8_t *raw, size_t n, uint8_t *spki, size_t *len)
{
	return hsm_spki_of_ec(type, raw, n, spki, SPKI_MAX, len);
}

static void ec_case(sg_key_type type, const char *curve, size_t field)
{
	uint8_t point[128], spki[SPKI_MAX], want[SPKI_MAX], buf[160];
	size_t plen = 0, len = 0;
	EVP_PKEY *k = ec_key(curve, point, sizeof(point), &plen);
	SG_CHECK(plen == 1 + 2 * field && point[0] == 0x04);
	size_t wlen = ossl_spki(k, want, sizeof(want));
	SG_CHECK(wlen > 0);

	/* raw, as some modules answer */
	SG_CHECK_OK(ec_of(type, point, plen, spki, &len));
	SG_CHECK(len == wlen && memcmp(spki, want, wlen) == 0);
	/* wrapped in an OCTET STRING, as the specification and SoftHSM2 have it */
	buf[0] = 0x04;
	buf[1] = (uint8_t)plen;
	memcpy(buf + 2, point, plen);
	len = 0;
	SG_CHECK_OK(ec_of(type, buf, plen + 2, spki, &len));
	SG_CHECK(len == wlen && memcmp(spki, want, wlen) == 0);

	/* hostile */
	SG_CHECK_RC(ec_of(type, point, 0, spki, &len), SG_EINVAL);
	SG_CHECK_RC(ec_of(type, point, 1, spki, &len), SG_EINVAL);            /* the prefix alone */
	SG_CHECK_RC(ec_of(type, point, plen - 1, spki, &len), SG_EINVAL);     /* one byte short */
	SG_CHECK_RC(ec_of(type, point + 1, plen - 1, spki, &len), SG_EINVAL); /* no prefix */
	SG_CHECK_MSG("neither an uncompressed");
	for (uint8_t prefix = 0; prefix < 8; prefix++) { /* 02/03 compressed, 06/07 hybrid */
		if (prefix == 0x04)
			continue;
		memcpy(buf, point, plen);
		buf[0] = prefix;
		SG_CHECK_RC(ec_of(type, buf, plen, spki, &len), SG_EINVAL);
	}
	memcpy(buf, point, plen);
	buf[0] = 0x02; /* a compressed point of the raw length's first half */
	SG_CHECK_RC(ec_of(type, buf, 1 + field, spki, &len), SG_EINVAL);
	/* wrappings: wrong tag, length longer than the bytes, shorter, a
	 * trailing byte, a long-form length where the short one fits, an
	 * indefinite length, the inner point not uncompressed */
	buf[0] = 0x03;
	buf[1] = (uint8_t)plen;
	memcpy(buf + 2, point, plen);
	SG_CHECK_RC(ec_of(type, buf, plen + 2, spki, &len), SG_EINVAL);
	buf[0] = 0x04;
	buf[1] = (uint8_t)(plen + 1);
	SG_CHECK_RC(ec_of(type, buf, plen + 2, spki, &len), SG_EINVAL);
	buf[1] = (uint8_t)(plen - 1);
	SG_CHECK_RC(ec_of(type, buf, plen + 1, spki, &len), SG_EINVAL);
	buf[1] = (uint8_t)plen;
	buf[plen + 2] = 0x00;
	SG_CHECK_RC(ec_of(type, buf, plen + 3, spki, &len), SG_EINVAL);
	buf[0] = 0x04;
	buf[1] = 0x81;
	buf[2] = (uint8_t)plen;
	memcpy(buf + 3, point, plen);
	SG_CHECK_RC(ec_of(type, buf, plen + 3, spki, &len), SG_EINVAL);
	buf[1] = 0x80;
	memcpy(buf + 2, point, plen);
	buf[plen + 2] = 0x00;
	buf[plen + 3] = 0x00;
	SG_CHECK_RC(ec_of(type, buf, plen + 4, spki, &len), SG_EINVAL);
	buf[0] = 0x04;
	buf[1] = (uint8_t)plen;
	memcpy(buf + 2, point, plen);
	buf[2] = 0x03;
	SG_CHECK_RC(ec_of(type, buf, plen + 2, spki, &len), SG_EINVAL);
	/* an RSA type named for EC bytes */
	SG_CHECK_RC(ec_of(SG_KEY_RSA_2048, point, plen, spki, &len), SG_EINVAL);
	/* too small a buffer: refused, nothing written past it */
	uint8_t small[40 + 1];
	small[40] = 0xa5;
	SG_CHECK(hsm_spki_of_ec(type, point, plen, small, 40, &len) < 0);
	SG_CHECK(small[40] == 0xa5);
	EVP_PKEY_free(k);
}

/* The other curve's point, raw and wrapped. */
static void t_ec_cross_curve(void)
{
	uint8_t p256[128], p384[128], spki[SPKI_MAX], buf[160];
	size_t n256 = 0, n384 = 0, len = 0;
	EVP_PKEY *a = ec_key("P-256", p256, sizeof(p256), &n256);
	EVP_PKEY *b = ec_key("P-384", p384, sizeof(p384), &n384);
	SG_CHECK_RC(ec_of(SG_KEY_EC_P256, p384, n384, spki, &len), SG_EINVAL);
	SG_CHECK_RC(ec_of(SG_KEY_EC_P384, p256, n256, spki, &len), SG_EINVAL);
	buf[0] = 0x04;
	buf[1] = (uint8_t)n384;
	memcpy(buf + 2, p384, n384);
	SG_CHECK_RC(ec_of(SG_KEY_EC_P256, buf, n384 + 2, spki, &len), SG_EINVAL);
	buf[1] = (uint8_t)n256;
	memcpy(buf + 2, p256, n256);
	SG_CHECK_RC(ec_of(SG_KEY_EC_P384, buf, n256 + 2, spki, &len), SG_EINVAL);
	EVP_PKEY_free(a);
	EVP_PKEY_free(b);
}

static void t_ec_p256(void)
{
	ec_case(SG_KEY_EC_P256, "P-256", 32);
}

static void t_ec_p384(void)
{
	ec_case(SG_KEY_EC_P384, "P-384", 48);
}

/* n and e of an RSA key as big-endian bytes. */
static void rsa_parts(EVP_PKEY *k, uint8_t *n, size_t *nlen, uint8_t *e, size_t *elen)
{
	BIGNUM *bn = NULL, *be = NULL;
	if (EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &bn) != 1 ||
	    EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &be) != 1)
		abort();
	*nlen = (size_t)BN_bn2bin(bn, n);
	*elen = (size_t)BN_bn2bin(be, e);
	BN_free(bn);
	BN_free(be);
}

static int rsa_of(const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen, sg_key_type *type, uint8_t *spki,
                  size_t *len)
{
	return hsm_spki_of_rsa(n, nlen, e, elen, type, spki, SPKI_MAX, len);
}

static void rsa_case(unsigned bits, sg_key_type want_type)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)bits);
	if (!k)
		abort();
	uint8_t n[600], e[16], spki[SPKI_MAX], want[SPKI_MAX], buf[600];
	size_t nlen = 0, elen = 0, len = 0;
	rsa_parts(k, n, &nlen, e, &elen);
	size_t wlen = ossl_spki(k, want, sizeof(want));
	SG_CHECK(wlen > 0 && nlen == bits / 8);
	sg_key_type type = SG_KEY_EC_P256;
	SG_CHECK_OK(rsa_of(n, nlen, e, elen, &type, spki, &len));
	SG_CHECK(type == want_type && len == wlen && memcmp(spki, want, wlen) == 0);

	/* leading zero bytes, as a module may pad to a fixed width */
	buf[0] = buf[1] = 0;
	memcpy(buf + 2, n, nlen);
	uint8_t e0[8] = {0, 0, 0, 0, 0};
	memcpy(e0 + 5, e, elen);
	len = 0;
	SG_CHECK_OK(rsa_of(buf, nlen + 2, e0, 5 + elen, &type, spki, &len));
	SG_CHECK(type == want_type && len == wlen && memcmp(spki, want, wlen) == 0);

	/* one bit short: the top bit cleared */
	memcpy(buf, n, nlen);
	buf[0] &= 0x7f;
	SG_CHECK_RC(rsa_of(buf, nlen, e, elen, &type, spki, &len), SG_EINVAL);
	SG_CHECK_MSG("bits; signet supports 2048, 3072 and 4096");
	/* a byte short, a byte over, and none */
	SG_CHECK_RC(rsa_of(n, nlen - 1, e, elen, &type, spki, &len), SG_EINVAL);
	memcpy(buf, n, nlen);
	buf[nlen] = 0x01;
	SG_CHECK_RC(rsa_of(buf, nlen + 1, e, elen, &type, spki, &len), SG_EINVAL);
	SG_CHECK_RC(rsa_of(n, 0, e, elen, &type, spki, &len), SG_EINVAL);
	SG_CHECK_RC(rsa_of(buf, 1, e, elen, &type, spki, &len), SG_EINVAL);
	/* exponents: empty, zero, one, two, even, over 64 bits */
	static const struct {
		uint8_t v[10];
		size_t n;
	} bad_e[] = {
	    {{0}, 0},    {{0x00}, 1},       {{0x00, 0x00}, 2},       {{0x01}, 1},
	    {{0x02}, 1}, {{0x00, 0x01}, 2}, {{0x01, 0x00, 0x00}, 3}, {{0x01, 0, 0, 0, 0, 0, 0, 0, 0x01}, 9},
	};
	for (size_t i = 0; i < sizeof(bad_e) / sizeof(bad_e[0]); i++) {
		SG_CHECK_RC(rsa_of(n, nlen, bad_e[i].v, bad_e[i].n, &type, spki, &len), SG_EINVAL);
		SG_CHECK_MSG("public exponent");
	}
	/* 3 and 2^64-1 are taken */
	static const uint8_t three[] = {0x03}, top[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	SG_CHECK_OK(rsa_of(n, nlen, three, sizeof(three), &type, spki, &len));
	SG_CHECK_OK(rsa_of(n, nlen, top, sizeof(top), &type, spki, &len));
	/* too small a buffer */
	uint8_t small[100 + 1];
	small[100] = 0xa5;
	SG_CHECK(hsm_spki_of_rsa(n, nlen, e, elen, &type, small, 100, &len) < 0);
	SG_CHECK(small[100] == 0xa5);
	EVP_PKEY_free(k);
}

static void t_rsa_2048(void)
{
	rsa_case(2048, SG_KEY_RSA_2048);
}

static void t_rsa_3072(void)
{
	rsa_case(3072, SG_KEY_RSA_3072);
}

static void t_rsa_4096(void)
{
	rsa_case(4096, SG_KEY_RSA_4096);
}

SG_TEST_MAIN(SG_TEST(t_ec_p256), SG_TEST(t_ec_p384), SG_TEST(t_ec_cross_curve), SG_TEST(t_rsa_2048),
             SG_TEST(t_rsa_3072), SG_TEST(t_rsa_4096))
