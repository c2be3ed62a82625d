/*
 * sg_crypto: the OpenSSL adapter for the per-request hot path.
 *
 * What it does: digests (SHA-1 for key identifiers, SHA-2 for signatures),
 * verification of PKCS#1 v1.5 (RFC 8017 §8.2.2) and ECDSA (X9.62, DER
 * Ecdsa-Sig-Value per RFC 5480 §2.2) signatures with keys that sg_key has
 * already parsed, and random bytes.
 *
 * Why it is shaped so: on OpenSSL 3.0 building an EVP_PKEY from DER goes
 * through the OSSL_DECODER chain, which costs more than the verification
 * itself and takes global locks (shared/reference/signing-performance.md
 * §0, §1.4, §1.5). So the key is built from the parts sg_pubkey_parse
 * extracted, with the legacy low-level objects: EC_KEY on a group cached
 * per thread + EC_KEY_oct2key (which also checks the point is on the curve)
 * + ECDSA_do_verify, and RSA_new + RSA_set0_key + RSA_verify. None of these
 * fetch algorithms from providers. Digests are fetched once per sg_crypto
 * and run on one reusable EVP_MD_CTX (EVP_DigestInit_ex2).
 *
 * Measured (this box, OpenSSL 3.0.22, one thread, 20k iterations, -O2; the
 * full verify includes SHA-256 of a 300-byte message; /tmp throwaway bench):
 *
 *   key construction only             P-256      RSA-2048
 *     legacy EC_KEY / RSA_set0_key      3.8         0.7     µs/op
 *     EVP_PKEY_fromdata                35.4          -
 *     d2i_PUBKEY                      223.6       188.1
 *   digest + build key + verify
 *     legacy, EC_KEY reused per thread 94.1        -
 *     legacy, new key per call        106.7        29.8
 *     EVP_PKEY_fromdata + EVP_PKEY_verify 138.8    43.0
 *     d2i_PUBKEY + EVP_PKEY_verify    276.0       189.0
 *
 * (This machine is about half the speed of the reference host; the ratios
 * match the reference.) No non-deprecated path comes close: fromdata alone
 * costs as much as ten legacy constructions. Hence the legacy API, and the
 * deprecation suppression below is confined to this file.
 *
 * Errors: a signature that is well-formed but wrong is SG_EAUTH; malformed
 * signatures (bad DER, wrong length) and keys OpenSSL rejects (point not on
 * the curve) are SG_EINVAL; allocation failures are SG_EINTERNAL. OpenSSL's
 * error queue is drained on every failure so that no stale error leaks into
 * a later, unrelated message.
 */

/* The EC_KEY/RSA/ECDSA low-level API is deprecated in OpenSSL 3.0 but is
 * the only way to verify without the decoder/fetch machinery (see above). */
#define OPENSSL_SUPPRESS_DEPRECATED

#include "sg_crypto.h"
#include "sg_crypto_impl.h"
#include "sg_guard.h"
#include "sg_ossl.h"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct sg_crypto {
	EVP_MD *md[SG_HASH_COUNT];
	EVP_MD_CTX *mdctx;
	/* One EC_KEY per curve, reused: only its public point changes. */
	EC_KEY *ec[2]; /* [0] P-256, [1] P-384 */
};

static const char *const md_names[SG_HASH_COUNT] = {
	[SG_HASH_SHA1] = "SHA1",
	[SG_HASH_SHA256] = "SHA256",
	[SG_HASH_SHA384] = "SHA384",
	[SG_HASH_SHA512] = "SHA512",
};

static const int md_nids[SG_HASH_COUNT] = {
	[SG_HASH_SHA1] = NID_sha1,
	[SG_HASH_SHA256] = NID_sha256,
	[SG_HASH_SHA384] = NID_sha384,
	[SG_HASH_SHA512] = NID_sha512,
};

static const int curve_nids[2] = {NID_X9_62_prime256v1, NID_secp384r1};

void sg_crypto_free(sg_crypto *c)
{
	if (!c)
		return;
	for (int i = 0; i < SG_HASH_COUNT; i++)
		EVP_MD_free(c->md[i]);
	EVP_MD_CTX_free(c->mdctx);
	for (int i = 0; i < 2; i++)
		EC_KEY_free(c->ec[i]);
	free(c);
}

static void crypto_cleanup(sg_crypto **c)
{
	sg_crypto_free(*c);
}

int sg_crypto_new(sg_crypto **out)
{
	sg_crypto *c SG_CLEANUP(crypto_cleanup) = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	ERR_clear_error();
	for (int i = 0; i < SG_HASH_COUNT; i++) {
		c->md[i] = EVP_MD_fetch(NULL, md_names[i], NULL);
		if (!c->md[i])
			return sg_error_set_ossl(SG_EINTERNAL, "cannot fetch digest %s", md_names[i]);
	}
	c->mdctx = EVP_MD_CTX_new();
	SG_ENSURE(c->mdctx, SG_EINTERNAL, "out of memory");
	for (int i = 0; i < 2; i++) {
		c->ec[i] = EC_KEY_new_by_curve_name(curve_nids[i]);
		if (!c->ec[i])
			return sg_error_set_ossl(SG_EINTERNAL, "cannot create EC group %d", curve_nids[i]);
	}
	*out = SG_MOVE(c);
	return SG_OK;
}

int sg_crypto_digest(sg_crypto *c, sg_hash h, const void *p, size_t n, uint8_t *out)
{
	SG_ENSURE((unsigned)h < SG_HASH_COUNT, SG_EINVAL, "unknown hash %d", (int)h);
	unsigned int len = 0;
	SG_OSSL(EVP_DigestInit_ex2(c->mdctx, c->md[h], NULL), SG_EINTERNAL, "digest init failed");
	SG_OSSL(EVP_DigestUpdate(c->mdctx, p, n), SG_EINTERNAL, "digest update failed");
	SG_OSSL(EVP_DigestFinal_ex(c->mdctx, out, &len), SG_EINTERNAL, "digest final failed");
	return SG_OK;
}

static void ecdsa_sig_cleanup(ECDSA_SIG **s)
{
	ECDSA_SIG_free(*s);
}
static void rsa_cleanup(RSA **r)
{
	RSA_free(*r);
}

/*
 *   Ecdsa-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }
 *
 * Parsed here rather than by d2i_ECDSA_SIG so that "not DER" (SG_EINVAL)
 * and "does not verify" (SG_EAUTH) stay apart. r and s must be positive,
 * minimal and no longer than the group order.
 */
static int parse_ecdsa_sig(const uint8_t *sig, size_t siglen, size_t field, sg_slice *r, sg_slice *s)
{
	sg_reader top = sg_reader_of((sg_slice){sig, siglen});
	sg_slice seq;
	SG_TRY(sg_der_read(&top, SG_DER_SEQUENCE, &seq, NULL));
	SG_ENSURE(sg_reader_done(&top), SG_EINVAL, "ECDSA signature has %zu trailing bytes", sg_reader_left(&top));
	sg_reader rs = sg_reader_of(seq);
	SG_TRY(sg_der_read_unsigned_bytes(&rs, r));
	SG_TRY(sg_der_read_unsigned_bytes(&rs, s));
	SG_ENSURE(sg_reader_done(&rs), SG_EINVAL, "ECDSA signature has trailing data");
	SG_ENSURE(r->len <= field && s->len <= field, SG_EINVAL, "ECDSA signature values exceed the curve size");
	return SG_OK;
}

/* ECDSA_do_verify's answer, with the queue cleared before the call: 1, 0,
 * or -1 for a fault. OpenSSL 3.0 reports a signature whose R = u1·G + u2·Q
 * is the point at infinity as a fault ("point at infinity"), but such a
 * signature only fails to verify, and anyone can make one: Project
 * Wycheproof's P-256 tcIds 169, 205, 208, 222 and 223 (see
 * tests/signer/test_jwk.c). A token or CSR carrying one is refused as a
 * bad signature, not counted as an internal error. */
static int ecdsa_answer(int ok)
{
	unsigned long e = ERR_peek_error();
	if (ok == -1 && ERR_GET_LIB(e) == ERR_LIB_EC && ERR_GET_REASON(e) == EC_R_POINT_AT_INFINITY) {
		ERR_clear_error();
		return 0;
	}
	return ok;
}

static int verify_ec(sg_crypto *c, const sg_pubkey *k, const uint8_t *dg, size_t dglen, const uint8_t *sig,
		     size_t siglen)
{
	size_t field = k->curve == SG_CURVE_P256 ? 32 : 48;
	sg_slice r, s;
	SG_TRY(parse_ecdsa_sig(sig, siglen, field, &r, &s));

	EC_KEY *key = c->ec[k->curve == SG_CURVE_P256 ? 0 : 1];
	if (EC_KEY_oct2key(key, k->point.p, k->point.len, NULL) != 1)
		return sg_error_set_ossl(SG_EINVAL, "EC public key is not a point on its curve");

	ECDSA_SIG *es SG_CLEANUP(ecdsa_sig_cleanup) = ECDSA_SIG_new();
	BIGNUM *br = BN_bin2bn(r.p, (int)r.len, NULL), *bs = BN_bin2bn(s.p, (int)s.len, NULL);
	if (!es || !br || !bs || ECDSA_SIG_set0(es, br, bs) != 1) {
		BN_free(br);
		BN_free(bs);
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	}
	int ok = ecdsa_answer(ECDSA_do_verify(dg, (int)dglen, es, key));
	if (ok == 1)
		return SG_OK;
	if (ok == 0) {
		ERR_clear_error();
		SG_BAIL(SG_EAUTH, "signature does not verify");
	}
	return sg_error_set_ossl(SG_EINVAL, "ECDSA verification failed");
}

static int verify_rsa(const sg_pubkey *k, sg_hash h, const uint8_t *dg, size_t dglen, const uint8_t *sig,
		      size_t siglen)
{
	/* RFC 8017 §8.2.2 step 1: the signature is exactly k octets. */
	size_t k_len = (k->bits + 7) / 8;
	SG_ENSURE(siglen == k_len, SG_EINVAL, "RSA signature of %zu bytes does not match the %zu-byte modulus",
		  siglen, k_len);

	RSA *rsa SG_CLEANUP(rsa_cleanup) = RSA_new();
	BIGNUM *n = BN_bin2bn(k->n.p, (int)k->n.len, NULL), *e = BN_bin2bn(k->e.p, (int)k->e.len, NULL);
	if (!rsa || !n || !e || RSA_set0_key(rsa, n, e, NULL) != 1) {
		BN_free(n);
		BN_free(e);
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	}
	/* RSA_verify checks the PKCS#1 v1.5 padding and the whole DigestInfo
	 * (including the NULL parameters) against the one it encodes itself. */
	if (RSA_verify(md_nids[h], dg, (unsigned)dglen, sig, (unsigned)siglen, rsa) == 1)
		return SG_OK;
	ERR_clear_error();
	SG_BAIL(SG_EAUTH, "signature does not verify");
}

int sg_crypto_verify(sg_crypto *c, const sg_pubkey *k, sg_sigalg alg, const uint8_t *msg, size_t msglen,
		     const uint8_t *sig, size_t siglen)
{
	int rc = SG_EINVAL;
	bool ec = sg_sigalg_is_ec(alg);
	SG_ENSURE((ec && k->kind == SG_PUBKEY_EC) || (!ec && k->kind == SG_PUBKEY_RSA), SG_EINVAL,
		  "signature algorithm %s does not match the %s key", sg_sigalg_name(alg),
		  k->kind == SG_PUBKEY_EC ? "EC" : "RSA");
	SG_ENSURE(siglen > 0 && siglen <= INT_MAX, SG_EINVAL, "signature is empty");

	sg_hash h = sg_sigalg_hash(alg);
	uint8_t dg[SG_HASH_MAX];
	ERR_clear_error();
	SG_TRY(sg_crypto_digest(c, h, msg, msglen, dg));
	if (ec)
		rc = verify_ec(c, k, dg, sg_hash_len(h), sig, siglen);
	else
		rc = verify_rsa(k, h, dg, sg_hash_len(h), sig, siglen);
	return rc;
}

/* ---- legacy keys built once (sg_crypto_impl.h) ---- */

struct sg_verify_key {
	EC_KEY *ec;
	RSA *rsa;
	/* P-256 after sg_verify_key_prepare: the curve with this key's point
	 * as its generator, and that point's multiples precomputed. */
	EC_GROUP *fixed;
};

void sg_verify_key_free(sg_verify_key *k)
{
	if (!k)
		return;
	EC_KEY_free(k->ec);
	RSA_free(k->rsa);
	EC_GROUP_free(k->fixed);
	free(k);
}

int sg_verify_key_ec(sg_verify_key **out, int nid, const uint8_t *point, size_t len)
{
	*out = NULL;
	sg_verify_key *k = calloc(1, sizeof(*k));
	SG_ENSURE(k, SG_EINTERNAL, "out of memory");
	k->ec = EC_KEY_new_by_curve_name(nid);
	if (!k->ec) {
		sg_verify_key_free(k);
		return sg_error_set_ossl(SG_EINTERNAL, "cannot create EC group %d", nid);
	}
	if (EC_KEY_oct2key(k->ec, point, len, NULL) != 1) {
		sg_verify_key_free(k);
		return sg_error_set_ossl(SG_EINVAL, "EC public key is not a point on its curve");
	}
	*out = k;
	return SG_OK;
}

int sg_verify_key_rsa(sg_verify_key **out, const BIGNUM *n, const BIGNUM *e)
{
	*out = NULL;
	sg_verify_key *k = calloc(1, sizeof(*k));
	SG_ENSURE(k, SG_EINTERNAL, "out of memory");
	BIGNUM *bn = BN_dup(n), *be = BN_dup(e);
	k->rsa = RSA_new();
	if (!bn || !be || !k->rsa || RSA_set0_key(k->rsa, bn, be, NULL) != 1) {
		BN_free(bn);
		BN_free(be);
		sg_verify_key_free(k);
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	}
	*out = k;
	return SG_OK;
}

/*
 * A key that verifies many signatures, such as a JWKS's, can have its
 * point's multiples precomputed, as OpenSSL has its generator's. ECDSA
 * verification (SEC 1 §4.1.4) is R = u1·G + u2·Q; OpenSSL computes both
 * products in one pass, with a table of Q's multiples built per call. With
 * the curve copied and Q made its generator, EC_GROUP_precompute_mult
 * builds the table once and u2·Q costs what u1·G costs. Measured on the
 * 2-vCPU machine of perf/README.md (OpenSSL 3.0, one thread, µs):
 *
 *     ECDSA_do_verify                      42–44
 *     precomputed: s⁻¹ 7.3, u1·G 4.8,      25–26
 *       u2·Q 5.1, add 0.6, affine x 2.3
 *
 * at ~15 ms and ~150 KiB per key, once. Only where the library's P-256 is
 * its specialised one, whose table for the standard generator is built in
 * (EC_GROUP_have_precompute_mult on a fresh group): the generic method's
 * tables (as OpenSSL's P-384 has) made a verification twice as slow.
 *
 * Since then s⁻¹ is computed on limbs (sg_p256_inv_mod_n) rather than by
 * BN_mod_inverse, and R's x is compared without converting R to affine
 * coordinates, which cost a field inversion: bench_signet's
 * jwk_verify/es256/prepared (which adds SHA-256 of a 600-byte message)
 * went from 34.1–34.5 to 20.2–22.3 µs, side by side in one hour in which
 * jwk_verify/es256, the key not prepared, took 59 µs.
 *
 * The checks are the standard's: r and s in [1, n-1], R not the point at
 * infinity, R's x mod n equal to r. The digest is as long as the order
 * (SHA-256 for P-256, which is ES256's pairing); anything else takes the
 * ordinary path. The inputs are public, so nothing here needs to run in
 * constant time. Project Wycheproof's P-256 vectors run through both paths
 * (tests/signer/test_jwk.c), and fuzz_ecdsa holds the two paths to the
 * same answer.
 */
int sg_verify_key_prepare(sg_verify_key *k)
{
	if (!k->ec || k->fixed)
		return SG_OK;
	const EC_GROUP *g = EC_KEY_get0_group(k->ec);
	if (EC_GROUP_get_curve_name(g) != NID_X9_62_prime256v1 || EC_GROUP_have_precompute_mult(g) != 1)
		return SG_OK;
	ERR_clear_error();
	EC_GROUP *f = EC_GROUP_dup(g);
	BN_CTX *ctx = BN_CTX_new();
	bool ok = f && ctx &&
	          EC_GROUP_set_generator(f, EC_KEY_get0_public_key(k->ec), EC_GROUP_get0_order(g),
	                                 EC_GROUP_get0_cofactor(g)) == 1 &&
	          EC_GROUP_precompute_mult(f, ctx) == 1;
	BN_CTX_free(ctx);
	if (!ok) {
		EC_GROUP_free(f);
		return sg_error_set_ossl(SG_EINTERNAL, "cannot precompute the key's multiples");
	}
	k->fixed = f;
	return SG_OK;
}

bool sg_verify_key_prepared(const sg_verify_key *k)
{
	return k->fixed != NULL;
}

/*
 * s⁻¹ mod n, the P-256 order, for a signature's s: BN_mod_inverse took 9.8
 * µs of a 256-bit value in a loop on the machine of perf/README.md §2, this
 * takes 4.1 µs, and OpenSSL's own inverse modulo the order, which
 * ECDSA_do_verify uses, is not public. The binary extended
 * Euclidean algorithm (Hankerson, Menezes, Vanstone, "Guide to Elliptic
 * Curve Cryptography", Alg. 2.22) on four 64-bit limbs, least significant
 * first, keeping x1·a ≡ u and x2·a ≡ v (mod n). It runs in variable time,
 * which is right only because s is public; it must not see a secret.
 */
static const uint64_t P256_N[4] = {0xf3b9cac2fc632551u, 0xbce6faada7179e84u, 0xffffffffffffffffu, 0xffffffff00000000u};

static uint64_t limbs_add(uint64_t r[4], const uint64_t a[4], const uint64_t b[4])
{
	uint64_t c = 0;
	for (int i = 0; i < 4; i++) {
		uint64_t t = a[i] + c;
		c = t < c;
		r[i] = t + b[i];
		c += r[i] < t;
	}
	return c;
}

static uint64_t limbs_sub(uint64_t r[4], const uint64_t a[4], const uint64_t b[4])
{
	uint64_t borrow = 0;
	for (int i = 0; i < 4; i++) {
		uint64_t d = a[i] - b[i], under = a[i] < b[i];
		r[i] = d - borrow;
		borrow = under | (d < borrow);
	}
	return borrow;
}

/* a >>= k for 0 < k < 64, with top's low k bits shifted in at the top. */
static void limbs_shr(uint64_t a[4], unsigned k, uint64_t top)
{
	for (int i = 0; i < 3; i++)
		a[i] = a[i] >> k | a[i + 1] << (64 - k);
	a[3] = a[3] >> k | top << (64 - k);
}

static bool limbs_ge(const uint64_t a[4], const uint64_t b[4])
{
	for (int i = 3; i >= 0; i--)
		if (a[i] != b[i])
			return a[i] > b[i];
	return true;
}

static bool limbs_one(const uint64_t a[4])
{
	return a[0] == 1 && (a[1] | a[2] | a[3]) == 0;
}

/* Halves a nonzero u until it is odd, and x (< n) as often, modulo n: an
 * odd x plus n is even, and the sum's carry is its 257th bit. */
static void strip_twos(uint64_t u[4], uint64_t x[4])
{
	while (!(u[0] & 1)) {
		unsigned k = u[0] ? (unsigned)__builtin_ctzll(u[0]) : 63;
		limbs_shr(u, k, 0);
		while (k > 0) {
			if (x[0] & 1) {
				limbs_shr(x, 1, limbs_add(x, x, P256_N));
				k--;
			} else {
				unsigned z = x[0] ? (unsigned)__builtin_ctzll(x[0]) : 63;
				z = z < k ? z : k;
				limbs_shr(x, z, 0);
				k -= z;
			}
		}
	}
}

/* n is prime, so every 0 < a < n has an inverse. u and v stay nonzero:
 * of the two, the one a pass left alone is odd and over 1, so they are
 * never equal. Each pass takes at least one bit from one of them, so at
 * most 2·256 passes end the loop: a pass beyond that is a bug, refused
 * rather than spun on. */
bool sg_p256_inv_mod_n(uint8_t w[32], const uint8_t a[32])
{
	uint64_t u[4], v[4], x1[4] = {1, 0, 0, 0}, x2[4] = {0, 0, 0, 0};
	for (int i = 0; i < 4; i++) {
		u[i] = 0;
		for (int j = 0; j < 8; j++)
			u[i] = u[i] << 8 | a[(3 - i) * 8 + j];
	}
	memset(w, 0, 32);
	if ((u[0] | u[1] | u[2] | u[3]) == 0 || limbs_ge(u, P256_N))
		return false;
	memcpy(v, P256_N, sizeof(v));
	for (unsigned pass = 0; !limbs_one(u) && !limbs_one(v); pass++) {
		if (pass > 2 * 256)
			return false;
		strip_twos(u, x1);
		strip_twos(v, x2);
		if (limbs_ge(u, v)) {
			limbs_sub(u, u, v);
			if (limbs_sub(x1, x1, x2))
				limbs_add(x1, x1, P256_N);
		} else {
			limbs_sub(v, v, u);
			if (limbs_sub(x2, x2, x1))
				limbs_add(x2, x2, P256_N);
		}
	}
	const uint64_t *x = limbs_one(u) ? x1 : x2;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 8; j++)
			w[(3 - i) * 8 + j] = (uint8_t)(x[i] >> (56 - 8 * j));
	return true;
}

/* 1: verifies; 0: does not; -1: OpenSSL failed (its queue says why).
 * sig is r || s, 32 bytes each. */
static int ecdsa_verify_fixed(const sg_verify_key *k, const uint8_t *dg, size_t dglen, const uint8_t *sig)
{
	const EC_GROUP *g = EC_KEY_get0_group(k->ec);
	const BIGNUM *n = EC_GROUP_get0_order(g), *pf = EC_GROUP_get0_field(g);
	BN_CTX *ctx = BN_CTX_new();
	EC_POINT *p = EC_POINT_new(g), *q = EC_POINT_new(k->fixed);
	int ok = -1;
	if (!ctx || !p || !q || !pf)
		goto out;
	BN_CTX_start(ctx);
	BIGNUM *r = BN_CTX_get(ctx), *e = BN_CTX_get(ctx), *w = BN_CTX_get(ctx);
	BIGNUM *u1 = BN_CTX_get(ctx), *u2 = BN_CTX_get(ctx), *x = BN_CTX_get(ctx), *z = BN_CTX_get(ctx);
	if (!z || !BN_bin2bn(sig, 32, r) || !BN_bin2bn(dg, (int)dglen, e))
		goto end;
	/* w = s⁻¹, refused for an s outside [1, n-1], as r is checked here;
	 * u1 = e·w, u2 = r·w (mod n); R = u1·G + u2·Q. */
	uint8_t wb[32];
	ok = 0;
	if (BN_is_zero(r) || BN_cmp(r, n) >= 0 || !sg_p256_inv_mod_n(wb, sig + 32))
		goto end;
	ok = -1;
	if (!BN_bin2bn(wb, 32, w) || !BN_mod_mul(u1, e, w, n, ctx) || !BN_mod_mul(u2, r, w, n, ctx) ||
	    !EC_POINT_mul(g, p, u1, NULL, NULL, ctx) || !EC_POINT_mul(k->fixed, q, u2, NULL, NULL, ctx) ||
	    !EC_POINT_add(g, p, p, q, ctx))
		goto end;
	ok = 0;
	if (EC_POINT_is_at_infinity(g, p))
		goto end;
	ok = -1;
	/* R's affine x is X/Z² (mod p), and p > n, so x mod n = r when x is
	 * r, or r + n if that is below p: compared as X = x·Z², which spares
	 * the field inversion the affine x costs. */
	if (!EC_POINT_get_Jprojective_coordinates_GFp(g, p, x, NULL, z, ctx) || !BN_mod_sqr(z, z, pf, ctx) ||
	    !BN_mod_mul(w, r, z, pf, ctx))
		goto end;
	ok = BN_cmp(w, x) == 0;
	if (!ok && !BN_add(u1, r, n))
		ok = -1;
	else if (!ok && BN_cmp(u1, pf) < 0)
		ok = BN_mod_mul(w, u1, z, pf, ctx) ? BN_cmp(w, x) == 0 : -1;
end:
	BN_CTX_end(ctx);
out:
	EC_POINT_free(p);
	EC_POINT_free(q);
	BN_CTX_free(ctx);
	return ok;
}

int sg_verify_key_check(const sg_verify_key *k, sg_hash h, const uint8_t *dg, size_t dglen, const uint8_t *sig,
                        size_t siglen)
{
	SG_ENSURE((unsigned)h < SG_HASH_COUNT && siglen > 0 && siglen <= INT_MAX && dglen <= INT_MAX, SG_EINVAL,
	          "bad verification arguments");
	ERR_clear_error();
	int ok;
	if (k->rsa) {
		ok = RSA_verify(md_nids[h], dg, (unsigned)dglen, sig, (unsigned)siglen, k->rsa);
	} else if (k->fixed && dglen == 32) {
		SG_ENSURE(siglen == 64, SG_EAUTH, "signature does not verify");
		ok = ecdsa_verify_fixed(k, dg, dglen, sig);
	} else {
		SG_ENSURE(siglen % 2 == 0, SG_EAUTH, "signature does not verify");
		ECDSA_SIG *es SG_CLEANUP(ecdsa_sig_cleanup) = ECDSA_SIG_new();
		BIGNUM *br = BN_bin2bn(sig, (int)(siglen / 2), NULL);
		BIGNUM *bs = BN_bin2bn(sig + siglen / 2, (int)(siglen / 2), NULL);
		if (!es || !br || !bs || ECDSA_SIG_set0(es, br, bs) != 1) {
			BN_free(br);
			BN_free(bs);
			return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
		}
		/* Reads the key only (the group's tables are its own). A zero
		 * r or s, or one past the order, is 0: does not verify. */
		ok = ecdsa_answer(ECDSA_do_verify(dg, (int)dglen, es, k->ec));
	}
	if (ok == 1)
		return SG_OK;
	if (ok == 0 || k->rsa) {
		ERR_clear_error();
		SG_BAIL(SG_EAUTH, "signature does not verify");
	}
	return sg_error_set_ossl(SG_EINTERNAL, "ECDSA verification failed");
}

/* Process-wide digests, fetched once, for callers without an sg_crypto:
 * EVP_Digest with an implicit EVP_sha256() would fetch on every call and
 * take the provider store's lock. */
static EVP_MD *shared_md[SG_HASH_COUNT];
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void shared_fetch(void)
{
	for (int i = 0; i < SG_HASH_COUNT; i++)
		shared_md[i] = EVP_MD_fetch(NULL, md_names[i], NULL);
}

const EVP_MD *sg_crypto_shared_md(sg_hash h)
{
	pthread_once(&shared_once, shared_fetch);
	return (unsigned)h < SG_HASH_COUNT ? shared_md[h] : NULL;
}

int sg_sha256(const void *p, size_t n, uint8_t out[32])
{
	const EVP_MD *md = sg_crypto_shared_md(SG_HASH_SHA256);
	SG_ENSURE(md != NULL, SG_EINTERNAL, "SHA-256 is not available");
	SG_OSSL(EVP_Digest(p, n, out, NULL, md, NULL), SG_EINTERNAL, "SHA-256 failed");
	return SG_OK;
}

int sg_crypto_random(uint8_t *buf, size_t n)
{
	SG_ENSURE(n <= INT_MAX, SG_EINVAL, "random request of %zu bytes is too large", n);
	if (n == 0)
		return SG_OK;
	SG_OSSL(RAND_bytes(buf, (int)n), SG_EINTERNAL, "RAND_bytes failed");
	return SG_OK;
}
