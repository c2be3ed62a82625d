/*
 * Tests for sg_p256_inv_mod_n (signer/private/sg_crypto_impl.h), the
 * inverse modulo P-256's order that a prepared key's ECDSA verification
 * uses: against OpenSSL's BN_mod_inverse and against its own definition
 * (a·w ≡ 1 mod n), on the values where limb arithmetic goes wrong first
 * (1 and n - 1, every power of two and its neighbours, limbs all ones or
 * all zeros, n's halves) and on random values of every length from a
 * fixed seed; 0 and values from n up are refused. The
 * verification around it is tested through Wycheproof's vectors
 * (test_jwk.c) and fuzz_ecdsa.
 */
#include "sg_crypto_impl.h"
#include "sg_test.h"

#include <openssl/bn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static BIGNUM *order;
static BN_CTX *ctx;
static unsigned checked, wrong;

static void setup(void)
{
	if (order)
		return;
	ctx = BN_CTX_new();
	if (!ctx || !BN_hex2bn(&order, "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551"))
		abort();
}

/* One value: skipped unless 0 < a < n, as the caller guarantees. */
static void check_inverse(const BIGNUM *a)
{
	if (BN_is_zero(a) || BN_is_negative(a) || BN_cmp(a, order) >= 0)
		return;
	uint8_t ab[32], wb[32];
	BIGNUM *want = BN_new(), *got = BN_new(), *prod = BN_new();
	if (!want || !got || !prod || BN_bn2binpad(a, ab, 32) != 32 || !BN_mod_inverse(want, a, order, ctx))
		abort();
	bool done = sg_p256_inv_mod_n(wb, ab);
	if (!BN_bin2bn(wb, 32, got) || !BN_mod_mul(prod, a, got, order, ctx))
		abort();
	checked++;
	if (!done || BN_cmp(got, want) != 0 || !BN_is_one(prod)) {
		if (wrong++ < 5) {
			char *h = BN_bn2hex(a);
			fprintf(stderr, "inverse of %s is wrong\n", h);
			OPENSSL_free(h);
		}
	}
	BN_free(want);
	BN_free(got);
	BN_free(prod);
}

static void t_edges(void)
{
	setup();
	BIGNUM *a = BN_new(), *b = BN_new();
	SG_CHECK(a && b);
	unsigned before = checked, wrong_before = wrong;
	for (int k = 0; k < 256; k++) {
		for (int d = -2; d <= 2; d++) { /* 2^k + d and n - 2^k + d */
			BN_zero(a);
			SG_CHECK(BN_set_bit(a, k) == 1);
			SG_CHECK(d < 0 ? BN_sub_word(a, (BN_ULONG)-d) == 1 : BN_add_word(a, (BN_ULONG)d) == 1);
			check_inverse(a);
			SG_CHECK(BN_sub(b, order, a) == 1);
			check_inverse(b);
		}
	}
	/* Each limb 0 or all ones (those with the top limb all ones are over
	 * n, and skipped). */
	for (unsigned mask = 1; mask < 16; mask++) {
		uint8_t be[32] = {0};
		for (int limb = 0; limb < 4; limb++)
			if (mask & 1u << limb)
				memset(be + 32 - 8 * (limb + 1), 0xff, 8);
		SG_CHECK(BN_bin2bn(be, 32, a) != NULL);
		check_inverse(a);
	}
	SG_CHECK(BN_rshift1(a, order) == 1); /* (n - 1) / 2, and the next */
	check_inverse(a);
	SG_CHECK(BN_add_word(a, 1) == 1);
	check_inverse(a);
	SG_CHECK(checked - before > 2500);
	SG_CHECK(wrong == wrong_before);
	BN_free(a);
	BN_free(b);
}

/* 0 and values from n up are refused, w zeroed, not looped on. */
static void t_out_of_range(void)
{
	setup();
	static const char *const bad[] = {
	    "00",
	    "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", /* n */
	    "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632552",
	    "FFFFFFFF00000000FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF",
	    "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		BIGNUM *a = NULL;
		uint8_t ab[32], wb[32];
		SG_CHECK(BN_hex2bn(&a, bad[i]) > 0 && BN_bn2binpad(a, ab, 32) == 32);
		memset(wb, 0xa5, sizeof(wb));
		SG_CHECK(!sg_p256_inv_mod_n(wb, ab));
		uint8_t zero[32] = {0};
		SG_CHECK(memcmp(wb, zero, 32) == 0);
		BN_free(a);
	}
}

static void t_random(void)
{
	setup();
	BIGNUM *a = BN_new();
	SG_CHECK(a != NULL);
	unsigned before = checked, wrong_before = wrong;
	srand(20261206);
	for (int i = 0; i < 20000; i++) {
		uint8_t be[32];
		for (size_t j = 0; j < sizeof(be); j++)
			be[j] = (uint8_t)(rand() >> 7);
		SG_CHECK(BN_bin2bn(be, 32, a) != NULL);
		SG_CHECK(BN_rshift(a, a, i % 256) == 1); /* every length */
		check_inverse(a);
	}
	SG_CHECK(checked - before > 19000);
	SG_CHECK(wrong == wrong_before);
	BN_free(a);
}

SG_TEST_MAIN(SG_TEST(t_edges), SG_TEST(t_out_of_range), SG_TEST(t_random))
