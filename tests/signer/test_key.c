/*
 * Tests for sg_key (SPKI, AlgorithmIdentifier, DigestInfo, ECDSA DER) and
 * sg_crypto (digest, verify), against keys and signatures made by OpenSSL
 * and against Project Wycheproof's vectors (DER ECDSA on P-256 and P-384,
 * RSA-2048 PKCS#1 v1.5), which is how a CSR's signature is checked.
 */
#include "key_fixture.h"
#include "sg_crypto.h"
#include "sg_key.h"
#include "sg_test.h"
#include "vector_fixture.h"

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdio.h>

static size_t spki_of(EVP_PKEY *k, uint8_t *buf)
{
	uint8_t *p = buf;
	int n = i2d_PUBKEY(k, &p);
	if (n <= 0)
		abort();
	return (size_t)n;
}

/* Parses the SPKI of k and checks the re-encoding is byte-identical. */
static void check_roundtrip(const char *kind, sg_pubkey_kind want_kind, unsigned want_bits)
{
	uint8_t der[2048], out[2048];
	size_t n = spki_of(key_of(kind), der);
	sg_pubkey k;
	SG_CHECK_OK(sg_pubkey_parse(&k, der, n));
	SG_CHECK(k.kind == want_kind);
	SG_CHECK(k.bits == want_bits);
	sg_der_writer w;
	sg_der_writer_init(&w, out, sizeof(out));
	sg_pubkey_encode(&w, &k);
	SG_CHECK_OK(sg_der_writer_status(&w));
	SG_CHECK(w.len == n && memcmp(out, der, n) == 0);
}

static void t_spki_roundtrip(void)
{
	check_roundtrip("P-256", SG_PUBKEY_EC, 256);
	check_roundtrip("P-384", SG_PUBKEY_EC, 384);
	check_roundtrip("rsa2048", SG_PUBKEY_RSA, 2048);
	check_roundtrip("rsa3072", SG_PUBKEY_RSA, 3072);

	uint8_t der[2048];
	size_t n = spki_of(key_of("P-256"), der);
	sg_pubkey k;
	SG_CHECK_OK(sg_pubkey_parse(&k, der, n));
	SG_CHECK(k.curve == SG_CURVE_P256 && k.point.len == 65 && k.point.p[0] == 4);
	SG_CHECK(k.key_bits.len == 65);
	sg_key_type t;
	SG_CHECK_OK(sg_pubkey_ca_type(&k, &t));
	SG_CHECK(t == SG_KEY_EC_P256);
	n = spki_of(key_of("rsa3072"), der);
	SG_CHECK_OK(sg_pubkey_parse(&k, der, n));
	SG_CHECK(k.e.len == 3 && k.e.p[0] == 1 && k.e.p[2] == 1);
	SG_CHECK(k.n.len == 384 && k.n.p[0] != 0);
	SG_CHECK_OK(sg_pubkey_ca_type(&k, &t));
	SG_CHECK(t == SG_KEY_RSA_3072);
}

static void check_reject(const uint8_t *der, size_t n, const char *msg)
{
	sg_pubkey k;
	SG_CHECK_RC(sg_pubkey_parse(&k, der, n), SG_EINVAL);
	SG_CHECK_MSG(msg);
}

static void t_spki_reject(void)
{
	uint8_t der[2048];
	size_t n = spki_of(key_of("rsa1024"), der);
	check_reject(der, n, "RSA key of 1024 bits is too weak (minimum 2048)");
	n = spki_of(key_of("P-521"), der);
	check_reject(der, n, "EC curve 1.3.132.0.35 is not supported (P-256 and P-384 only)");
	n = spki_of(key_of("secp256k1"), der);
	check_reject(der, n, "EC curve 1.3.132.0.10 is not supported (P-256 and P-384 only)");
	n = spki_of(key_of("ed25519"), der);
	check_reject(der, n, "Ed25519 keys are not supported");

	/* Compressed point: the same key with point-format=compressed. */
	EVP_PKEY *c = EVP_PKEY_dup(key_of("P-256"));
	SG_CHECK(EVP_PKEY_set_utf8_string_param(c, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, "compressed") == 1);
	n = spki_of(c, der);
	SG_CHECK(n == 59);
	check_reject(der, n, "compressed EC points are not supported");
	EVP_PKEY_free(c);

	/* Trailing byte after the SPKI. */
	n = spki_of(key_of("P-256"), der);
	der[n] = 0;
	check_reject(der, n + 1, "1 trailing bytes");

	/* DSA (hand-made: algorithm OID only matters). */
	static const uint8_t dsa[] = {0x30, 0x12, 0x30, 0x09, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x38, 0x04,
				      0x01, 0x03, 0x05, 0x00, 0x02, 0x02, 0x01, 0x00};
	check_reject(dsa, sizeof(dsa), "DSA keys are not supported");
	static const uint8_t unknown[] = {0x30, 0x0b, 0x30, 0x04, 0x06, 0x02, 0x2a, 0x03,
					  0x03, 0x03, 0x00, 0x01, 0x02};
	check_reject(unknown, sizeof(unknown), "public key algorithm 1.2.3 is not supported");

	/* EC with NULL parameters instead of a curve. */
	static const uint8_t ec_null[] = {0x30, 0x10, 0x30, 0x0b, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d,
					  0x02, 0x01, 0x05, 0x00, 0x03, 0x01, 0x00};
	check_reject(ec_null, sizeof(ec_null), "EC key parameters must name a curve");

	/* RSA with absent parameters: drop the NULL and fix the lengths. */
	n = spki_of(key_of("rsa2048"), der);
	SG_CHECK(n == 294 && der[1] == 0x82 && der[4] == 0x30 && der[5] == 0x0d && der[17] == 0x05);
	uint8_t noparams[300];
	memcpy(noparams, der, 17);
	memcpy(noparams + 17, der + 19, n - 19);
	noparams[3] -= 2; /* outer length 0x122 -> 0x120 */
	noparams[5] = 0x0b;
	check_reject(noparams, n - 2, "RSA key parameters must be NULL");

	/* RSA with an even exponent and with e = 1. */
	sg_pubkey k;
	SG_CHECK_OK(sg_pubkey_parse(&k, der, n));
	SG_CHECK(der[n - 1] == 0x01 && der[n - 5] == 0x02 && der[n - 4] == 0x03);
	der[n - 1] = 0x02;
	check_reject(der, n, "RSA public exponent must be odd and at least 3");
	static const uint8_t e1[] = {0x01};
	uint8_t buf[400];
	n = spki_of(key_of("rsa2048"), der);
	SG_CHECK_OK(sg_pubkey_parse(&k, der, n));
	k.e = (sg_slice){e1, 1};
	sg_der_writer w;
	sg_der_writer_init(&w, buf, sizeof(buf));
	sg_pubkey_encode(&w, &k);
	SG_CHECK_OK(sg_der_writer_status(&w));
	check_reject(buf, w.len, "RSA public exponent must be odd and at least 3");

	/* Truncated and empty. */
	n = spki_of(key_of("P-256"), der);
	SG_CHECK_RC(sg_pubkey_parse(&k, der, n - 1), SG_EINVAL);
	SG_CHECK_RC(sg_pubkey_parse(&k, der, 0), SG_EINVAL);
}

static void t_ca_type(void)
{
	static const uint8_t n[512] = {0x80};
	static const uint8_t e[] = {1, 0, 1};
	sg_pubkey k = {.kind = SG_PUBKEY_RSA, .n = {n, 256}, .e = {e, 3}, .bits = 2048};
	sg_key_type t;
	SG_CHECK_OK(sg_pubkey_ca_type(&k, &t));
	SG_CHECK(t == SG_KEY_RSA_2048);
	k.bits = 4096;
	SG_CHECK_OK(sg_pubkey_ca_type(&k, &t));
	SG_CHECK(t == SG_KEY_RSA_4096);
	k.bits = 2560;
	SG_CHECK_RC(sg_pubkey_ca_type(&k, &t), SG_EINVAL);
	SG_CHECK_MSG("2560 bits cannot be a CA key");
	k = (sg_pubkey){.kind = SG_PUBKEY_EC, .curve = SG_CURVE_P384, .bits = 384};
	SG_CHECK_OK(sg_pubkey_ca_type(&k, &t));
	SG_CHECK(t == SG_KEY_EC_P384);
	SG_CHECK(sg_sigalg_for_ca(SG_KEY_EC_P256) == SG_SIG_ECDSA_SHA256);
	SG_CHECK(sg_sigalg_for_ca(SG_KEY_EC_P384) == SG_SIG_ECDSA_SHA384);
	SG_CHECK(sg_sigalg_for_ca(SG_KEY_RSA_3072) == SG_SIG_RSA_SHA256);
}

static int parse_alg(const uint8_t *der, size_t n, sg_sigalg *alg)
{
	sg_reader r = sg_reader_of((sg_slice){der, n});
	int rc = sg_sigalg_parse(&r, alg);
	if (rc == 0 && !sg_reader_done(&r))
		return -100;
	return rc;
}

static void t_sigalg(void)
{
	static const sg_sigalg all[] = {SG_SIG_ECDSA_SHA256, SG_SIG_ECDSA_SHA384, SG_SIG_ECDSA_SHA512,
					SG_SIG_RSA_SHA256,   SG_SIG_RSA_SHA384,   SG_SIG_RSA_SHA512};
	static const int nids[] = {NID_ecdsa_with_SHA256,     NID_ecdsa_with_SHA384,     NID_ecdsa_with_SHA512,
				   NID_sha256WithRSAEncryption, NID_sha384WithRSAEncryption, NID_sha512WithRSAEncryption};
	for (size_t i = 0; i < 6; i++) {
		uint8_t buf[64], ref[64];
		sg_der_writer w;
		sg_der_writer_init(&w, buf, sizeof(buf));
		sg_sigalg_encode(&w, all[i]);
		SG_CHECK_OK(sg_der_writer_status(&w));
		/* Compare with OpenSSL's encoding (RFC 5758: ECDSA params absent). */
		X509_ALGOR *a = X509_ALGOR_new();
		X509_ALGOR_set0(a, OBJ_nid2obj(nids[i]), i < 3 ? V_ASN1_UNDEF : V_ASN1_NULL, NULL);
		uint8_t *p = ref;
		int rn = i2d_X509_ALGOR(a, &p);
		X509_ALGOR_free(a);
		SG_CHECK(rn > 0 && (size_t)rn == w.len && memcmp(buf, ref, w.len) == 0);
		sg_sigalg got;
		SG_CHECK_OK(parse_alg(buf, w.len, &got));
		SG_CHECK(got == all[i]);
		SG_CHECK(sg_sigalg_is_ec(all[i]) == (i < 3));
	}
	SG_CHECK(sg_sigalg_hash(SG_SIG_ECDSA_SHA384) == SG_HASH_SHA384);
	SG_CHECK(sg_sigalg_hash(SG_SIG_RSA_SHA512) == SG_HASH_SHA512);
	SG_CHECK(sg_hash_len(SG_HASH_SHA1) == 20 && sg_hash_len(SG_HASH_SHA256) == 32 &&
		 sg_hash_len(SG_HASH_SHA384) == 48 && sg_hash_len(SG_HASH_SHA512) == 64);

	sg_sigalg got;
	/* RSA without the NULL: accepted. */
	static const uint8_t rsa_noparams[] = {0x30, 0x0b, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86,
					       0xf7, 0x0d, 0x01, 0x01, 0x0b};
	SG_CHECK_OK(parse_alg(rsa_noparams, sizeof(rsa_noparams), &got));
	SG_CHECK(got == SG_SIG_RSA_SHA256);
	/* ECDSA with NULL: refused. */
	static const uint8_t ec_null[] = {0x30, 0x0c, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
					  0x3d, 0x04, 0x03, 0x02, 0x05, 0x00};
	SG_CHECK_RC(parse_alg(ec_null, sizeof(ec_null), &got), SG_EINVAL);
	SG_CHECK_MSG("ecdsa-with-SHA256 parameters must be absent");
	/* RSA with a non-NULL parameter. */
	static const uint8_t rsa_int[] = {0x30, 0x0e, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86,
					  0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x02, 0x01, 0x00};
	SG_CHECK_RC(parse_alg(rsa_int, sizeof(rsa_int), &got), SG_EINVAL);
	SG_CHECK_MSG("must be NULL");

	static const struct {
		int nid;
		const char *msg;
	} weak[] = {
		{NID_md5WithRSAEncryption, "md5WithRSAEncryption is not accepted (weak)"},
		{NID_sha1WithRSAEncryption, "sha1WithRSAEncryption is not accepted (weak)"},
		{NID_ecdsa_with_SHA1, "ecdsa-with-SHA1 is not accepted (weak)"},
		{NID_rsassaPss, "RSASSA-PSS is not supported"},
		{NID_ED25519, "Ed25519 is not supported"},
		{NID_sha224WithRSAEncryption, "sha224WithRSAEncryption is not supported"},
		{NID_id_GostR3411_94_with_GostR3410_2001, "signature algorithm 1.2.643.2.2.3 is not supported"},
	};
	for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]); i++) {
		uint8_t ref[64];
		X509_ALGOR *a = X509_ALGOR_new();
		X509_ALGOR_set0(a, OBJ_nid2obj(weak[i].nid), V_ASN1_UNDEF, NULL);
		uint8_t *p = ref;
		int rn = i2d_X509_ALGOR(a, &p);
		X509_ALGOR_free(a);
		SG_CHECK_RC(parse_alg(ref, (size_t)rn, &got), SG_EINVAL);
		SG_CHECK_MSG(weak[i].msg);
	}
}

static void t_digestinfo(void)
{
	static const uint8_t sha256[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
					 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};
	const uint8_t *p;
	size_t n;
	sg_digestinfo_prefix(SG_HASH_SHA256, &p, &n);
	SG_CHECK(n == sizeof(sha256) && memcmp(p, sha256, n) == 0);
	/* Every prefix is a DigestInfo header whose lengths add up. */
	for (int h = 0; h < SG_HASH_COUNT; h++) {
		sg_digestinfo_prefix((sg_hash)h, &p, &n);
		SG_CHECK(n >= 15 && p[0] == 0x30 && p[1] == n - 2 + sg_hash_len((sg_hash)h));
		SG_CHECK(p[n - 2] == 0x04 && p[n - 1] == sg_hash_len((sg_hash)h));
	}
}

static void t_ecdsa_raw_to_der(void)
{
	EVP_PKEY *k = key_of("P-256");
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int padded = 0, short_r = 0;
	for (int i = 0; i < 200; i++) {
		uint8_t sig[80], raw[64], out[80];
		size_t siglen = sizeof(sig);
		SG_CHECK(EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, k) == 1);
		SG_CHECK(EVP_DigestSign(ctx, sig, &siglen, (const uint8_t *)&i, sizeof(i)) == 1);
		const uint8_t *q = sig;
		ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &q, (long)siglen);
		SG_CHECK(es != NULL);
		BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, 32);
		BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + 32, 32);
		padded += raw[0] >= 0x80;
		short_r += raw[0] == 0;
		ECDSA_SIG_free(es);
		sg_der_writer w;
		sg_der_writer_init(&w, out, sizeof(out));
		SG_CHECK_OK(sg_ecdsa_raw_to_der(&w, raw, 64));
		SG_CHECK(w.len == siglen && memcmp(out, sig, siglen) == 0);
	}
	SG_CHECK(padded > 0);
	(void)short_r;
	EVP_MD_CTX_free(ctx);
	uint8_t zero[64] = {0}, out[80];
	sg_der_writer w;
	sg_der_writer_init(&w, out, sizeof(out));
	SG_CHECK_RC(sg_ecdsa_raw_to_der(&w, zero, 64), SG_EINVAL);
	SG_CHECK_RC(sg_ecdsa_raw_to_der(&w, zero, 63), SG_EINVAL);
	/* Leading zero octets are stripped: r = 1, s = 0x80. */
	uint8_t raw[8] = {0, 0, 0, 1, 0, 0, 0, 0x80};
	static const uint8_t want[] = {0x30, 0x07, 0x02, 0x01, 0x01, 0x02, 0x02, 0x00, 0x80};
	sg_der_writer_init(&w, out, sizeof(out));
	SG_CHECK_OK(sg_ecdsa_raw_to_der(&w, raw, 8));
	SG_CHECK(w.len == sizeof(want) && memcmp(out, want, w.len) == 0);
}

static size_t sign(EVP_PKEY *k, const EVP_MD *md, const uint8_t *msg, size_t n, uint8_t *sig, size_t cap)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t len = cap;
	if (EVP_DigestSignInit(ctx, NULL, md, NULL, k) != 1 || EVP_DigestSign(ctx, sig, &len, msg, n) != 1)
		abort();
	EVP_MD_CTX_free(ctx);
	return len;
}

static void check_verify(const char *kind, sg_sigalg alg, const EVP_MD *md)
{
	sg_crypto *c = NULL;
	SG_CHECK_OK(sg_crypto_new(&c));
	uint8_t spki[2048], sig[1024], msg[300];
	memset(msg, 0x5a, sizeof(msg));
	EVP_PKEY *k = key_of(kind);
	size_t n = spki_of(k, spki);
	sg_pubkey pk;
	SG_CHECK_OK(sg_pubkey_parse(&pk, spki, n));
	size_t sl = sign(k, md, msg, sizeof(msg), sig, sizeof(sig));
	SG_CHECK_OK(sg_crypto_verify(c, &pk, alg, msg, sizeof(msg), sig, sl));
	msg[7] ^= 1;
	SG_CHECK_RC(sg_crypto_verify(c, &pk, alg, msg, sizeof(msg), sig, sl), SG_EAUTH);
	msg[7] ^= 1;
	sig[sl - 1] ^= 1;
	SG_CHECK_RC(sg_crypto_verify(c, &pk, alg, msg, sizeof(msg), sig, sl), SG_EAUTH);
	sig[sl - 1] ^= 1;
	/* Malformed: a trailing byte (DER for ECDSA, length for RSA). */
	sig[sl] = 0;
	SG_CHECK_RC(sg_crypto_verify(c, &pk, alg, msg, sizeof(msg), sig, sl + 1), SG_EINVAL);
	SG_CHECK_RC(sg_crypto_verify(c, &pk, alg, msg, sizeof(msg), sig, 0), SG_EINVAL);
	/* Wrong algorithm family for the key. */
	sg_sigalg other = sg_sigalg_is_ec(alg) ? SG_SIG_RSA_SHA256 : SG_SIG_ECDSA_SHA256;
	SG_CHECK_RC(sg_crypto_verify(c, &pk, other, msg, sizeof(msg), sig, sl), SG_EINVAL);
	SG_CHECK_MSG("does not match");
	/* Wrong digest: does not verify. */
	sg_sigalg wrong_hash = alg == SG_SIG_ECDSA_SHA256 ? SG_SIG_ECDSA_SHA384
			       : alg == SG_SIG_RSA_SHA256 ? SG_SIG_RSA_SHA512
							  : alg;
	if (wrong_hash != alg)
		SG_CHECK_RC(sg_crypto_verify(c, &pk, wrong_hash, msg, sizeof(msg), sig, sl), SG_EAUTH);
	/* Works again after failures (reused EC_KEY / digest context). */
	SG_CHECK_OK(sg_crypto_verify(c, &pk, alg, msg, sizeof(msg), sig, sl));
	sg_crypto_free(c);
}

static void t_verify(void)
{
	check_verify("P-256", SG_SIG_ECDSA_SHA256, EVP_sha256());
	check_verify("P-256", SG_SIG_ECDSA_SHA512, EVP_sha512());
	check_verify("P-384", SG_SIG_ECDSA_SHA384, EVP_sha384());
	check_verify("rsa2048", SG_SIG_RSA_SHA256, EVP_sha256());
	check_verify("rsa3072", SG_SIG_RSA_SHA384, EVP_sha384());
	check_verify("rsa2048", SG_SIG_RSA_SHA512, EVP_sha512());
}

static void t_verify_bad_point(void)
{
	sg_crypto *c = NULL;
	SG_CHECK_OK(sg_crypto_new(&c));
	uint8_t spki[256], sig[128], msg[16] = {0};
	size_t n = spki_of(key_of("P-256"), spki);
	size_t sl = sign(key_of("P-256"), EVP_sha256(), msg, sizeof(msg), sig, sizeof(sig));
	spki[n - 1] ^= 1; /* Y no longer matches X: off the curve */
	sg_pubkey pk;
	SG_CHECK_OK(sg_pubkey_parse(&pk, spki, n));
	SG_CHECK_RC(sg_crypto_verify(c, &pk, SG_SIG_ECDSA_SHA256, msg, sizeof(msg), sig, sl), SG_EINVAL);
	SG_CHECK_MSG("not a point on its curve");
	sg_crypto_free(c);
}

/* ---- conformance: Project Wycheproof ---- */

#ifndef SIGNET_TEST_DATA
#error "SIGNET_TEST_DATA (tests/signer/data) must be defined"
#endif

/* Every vector of one file through sg_pubkey_parse and sg_crypto_verify:
 * "valid" verifies; "invalid" is refused as a bad signature (SG_EAUTH) or
 * a malformed one (SG_EINVAL), never a fault; "acceptable" (legacy forms
 * the standard leaves open) may go either way, but not as a fault. The
 * totals are the file header's. */
static void check_vectors(const char *file, sg_sigalg alg, int want_valid, int want_invalid, int want_acceptable)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", SIGNET_TEST_DATA, file);
	FILE *f = fopen(path, "r");
	SG_CHECK(f != NULL);
	if (!f)
		return;
	sg_crypto *c = NULL;
	SG_CHECK_OK(sg_crypto_new(&c));
	static char line[70000];
	static uint8_t spki[2048], msg[16384], sig[8192];
	sg_pubkey pk;
	bool have_key = false;
	int valid = 0, invalid = 0, acceptable = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (line[0] == '#')
			continue;
		if (strncmp(line, "key ", 4) == 0) {
			size_t n = vector_unhex(line + 4, spki, sizeof(spki));
			SG_CHECK_OK(sg_pubkey_parse(&pk, spki, n));
			have_key = true;
			continue;
		}
		SG_CHECK(have_key);
		char *save = NULL, *id = strtok_r(line, " ", &save), *result = strtok_r(NULL, " ", &save);
		char *m = strtok_r(NULL, " ", &save), *sh = strtok_r(NULL, " ", &save);
		if (!id || !result || !m || !sh)
			abort();
		size_t ml = vector_unhex(m, msg, sizeof(msg)), sl = vector_unhex(sh, sig, sizeof(sig));
		/* An empty signature is refused before any parsing. */
		int rc = sl ? sg_crypto_verify(c, &pk, alg, msg, ml, sig, sl) : SG_EINVAL;
		bool ok;
		if (strcmp(result, "valid") == 0) {
			ok = rc == SG_OK;
			valid++;
		} else if (strcmp(result, "invalid") == 0) {
			ok = rc == SG_EAUTH || rc == SG_EINVAL;
			invalid++;
		} else {
			ok = rc == SG_OK || rc == SG_EAUTH || rc == SG_EINVAL;
			acceptable++;
		}
		if (!ok)
			fprintf(stderr, "%s tcId %s (%s): %d %s\n", file, id, result, rc, sg_error_last()->msg);
		SG_CHECK(ok);
		SG_CHECK(ERR_peek_error() == 0);
	}
	fclose(f);
	sg_crypto_free(c);
	SG_CHECK(valid == want_valid && invalid == want_invalid && acceptable == want_acceptable);
}

static void t_wycheproof(void)
{
	check_vectors("ecdsa_p256_sha256_der.txt", SG_SIG_ECDSA_SHA256, 174, 310, 0);
	check_vectors("ecdsa_p384_sha384_der.txt", SG_SIG_ECDSA_SHA384, 194, 310, 0);
	check_vectors("rsa2048_sha256_pkcs1.txt", SG_SIG_RSA_SHA256, 9, 249, 1);
}

static void t_digest_random(void)
{
	sg_crypto *c = NULL;
	SG_CHECK_OK(sg_crypto_new(&c));
	static const char *const names[] = {"SHA1", "SHA256", "SHA384", "SHA512"};
	for (int h = 0; h < SG_HASH_COUNT; h++) {
		uint8_t a[64], b[64];
		unsigned bl = 0;
		SG_CHECK_OK(sg_crypto_digest(c, (sg_hash)h, "abc", 3, a));
		SG_CHECK(EVP_Digest("abc", 3, b, &bl, EVP_get_digestbyname(names[h]), NULL) == 1);
		SG_CHECK(bl == sg_hash_len((sg_hash)h) && memcmp(a, b, bl) == 0);
	}
	uint8_t r1[32] = {0}, r2[32] = {0};
	SG_CHECK_OK(sg_crypto_random(r1, sizeof(r1)));
	SG_CHECK_OK(sg_crypto_random(r2, sizeof(r2)));
	SG_CHECK(memcmp(r1, r2, sizeof(r1)) != 0);
	sg_crypto_free(c);
	sg_crypto_free(NULL);
}

static void t_oid_format(void)
{
	char buf[64];
	static const uint8_t p256[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
	SG_CHECK(!strcmp(sg_oid_format((sg_slice){p256, sizeof(p256)}, buf, sizeof(buf)), "1.2.840.10045.3.1.7"));
	static const uint8_t dc[] = {0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19};
	SG_CHECK(!strcmp(sg_oid_format((sg_slice){dc, sizeof(dc)}, buf, sizeof(buf)),
			 "0.9.2342.19200300.100.1.25"));
	static const uint8_t bad[] = {0x2a, 0x86};
	SG_CHECK(!strcmp(sg_oid_format((sg_slice){bad, sizeof(bad)}, buf, sizeof(buf)), "(bad OID)"));
	SG_CHECK(!strcmp(sg_oid_format((sg_slice){bad, 0}, buf, sizeof(buf)), "(bad OID)"));
}

SG_TEST_MAIN(SG_TEST(t_spki_roundtrip), SG_TEST(t_spki_reject), SG_TEST(t_ca_type), SG_TEST(t_sigalg),
             SG_TEST(t_digestinfo), SG_TEST(t_ecdsa_raw_to_der), SG_TEST(t_verify), SG_TEST(t_verify_bad_point),
             SG_TEST(t_wycheproof), SG_TEST(t_digest_random), SG_TEST(t_oid_format))
