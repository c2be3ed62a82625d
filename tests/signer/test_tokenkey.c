/*
 * Tests for sg_tokenkey, the development token issuer's key: signatures
 * checked by our own verifier (sg_crypto_verify on the key rebuilt from the
 * JWK's x and y, the raw r||s turned back into DER), the kid against an
 * SPKI we encode ourselves, save (mode 0600, atomic) and load round trips,
 * and files that are not what they should be: missing, empty, too large,
 * garbage, an RSA key, a key on another curve, an encrypted key.
 */
#include "sg_base64.h"
#include "sg_crypto.h"
#include "sg_key.h"
#include "sg_test.h"
#include "sg_tokenkey.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[512];

static void setup(void)
{
	if (*dir)
		return;
	const char *t = getenv("SIGNET_TEST_TMP");
	snprintf(dir, sizeof(dir), "%s/tokenkey-%d", t && *t ? t : "/tmp", (int)getpid());
	mkdir(dir, 0700);
}

static const char *path_in(const char *name)
{
	static char path[600];
	setup();
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

static void write_text(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "w");
	SG_CHECK(f != NULL);
	if (!f)
		return;
	SG_CHECK(fwrite(data, 1, n, f) == n);
	fclose(f);
}

static void write_pkey(const char *path, EVP_PKEY *k)
{
	FILE *f = fopen(path, "w");
	SG_CHECK(f && PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1);
	if (f)
		fclose(f);
	EVP_PKEY_free(k);
}

/* The public key of the JWK as an sg_pubkey; point is its storage. */
static void pubkey_of(const sg_tokenkey_jwk *j, uint8_t point[65], sg_pubkey *pk)
{
	size_t n = 0;
	point[0] = 0x04;
	SG_CHECK(strlen(j->x) == SG_TOKENKEY_B64_LEN && strlen(j->y) == SG_TOKENKEY_B64_LEN);
	SG_CHECK_OK(sg_b64url_decode(j->x, strlen(j->x), point + 1, 32, &n));
	SG_CHECK(n == 32);
	SG_CHECK_OK(sg_b64url_decode(j->y, strlen(j->y), point + 33, 32, &n));
	SG_CHECK(n == 32);
	memset(pk, 0, sizeof(*pk));
	pk->kind = SG_PUBKEY_EC;
	pk->curve = SG_CURVE_P256;
	pk->point = (sg_slice){point, 65};
	pk->bits = 256;
}

/* Verifies an ES256 r||s over msg with our own code. */
static int verify(const sg_pubkey *pk, const void *msg, size_t n, const uint8_t rs[SG_TOKENKEY_SIG_LEN])
{
	uint8_t der[80];
	sg_der_writer w;
	sg_der_writer_init(&w, der, sizeof(der));
	int rc = sg_ecdsa_raw_to_der(&w, rs, SG_TOKENKEY_SIG_LEN);
	if (rc != SG_OK)
		return rc;
	sg_crypto *c = NULL;
	SG_CHECK_OK(sg_crypto_new(&c));
	rc = sg_crypto_verify(c, pk, SG_SIG_ECDSA_SHA256, msg, n, der, w.len);
	sg_crypto_free(c);
	return rc;
}

static void t_sign_verify(void)
{
	sg_tokenkey *k = NULL;
	SG_CHECK_OK(sg_tokenkey_generate(&k));
	sg_tokenkey_jwk j;
	SG_CHECK_OK(sg_tokenkey_jwk_of(k, &j));
	uint8_t point[65];
	sg_pubkey pk;
	pubkey_of(&j, point, &pk);

	static const char msg[] = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0";
	uint8_t rs[SG_TOKENKEY_SIG_LEN], rs2[SG_TOKENKEY_SIG_LEN];
	SG_CHECK_OK(sg_tokenkey_sign(k, msg, strlen(msg), rs));
	SG_CHECK_OK(verify(&pk, msg, strlen(msg), rs));
	/* ECDSA is randomised: two signatures differ, both verify. */
	SG_CHECK_OK(sg_tokenkey_sign(k, msg, strlen(msg), rs2));
	SG_CHECK(memcmp(rs, rs2, sizeof(rs)) != 0);
	SG_CHECK_OK(verify(&pk, msg, strlen(msg), rs2));
	/* Another message, or a flipped bit of s, does not. */
	SG_CHECK_RC(verify(&pk, msg, strlen(msg) - 1, rs), SG_EAUTH);
	rs[63] ^= 1;
	SG_CHECK_RC(verify(&pk, msg, strlen(msg), rs), SG_EAUTH);
	/* An empty message is a message. */
	SG_CHECK_OK(sg_tokenkey_sign(k, "", 0, rs));
	SG_CHECK_OK(verify(&pk, "", 0, rs));

	/* kid = base64url(SHA-256(SPKI DER)), the SPKI written by our encoder. */
	uint8_t spki[128], h[32];
	sg_der_writer w;
	sg_der_writer_init(&w, spki, sizeof(spki));
	sg_pubkey_encode(&w, &pk);
	SG_CHECK_OK(sg_der_writer_status(&w));
	SG_CHECK_OK(sg_sha256(spki, w.len, h));
	char kid[SG_TOKENKEY_B64_LEN + 1];
	SG_CHECK_OK(sg_b64url_encode(h, sizeof(h), kid, sizeof(kid)));
	SG_CHECK(strcmp(kid, j.kid) == 0);

	/* Another key, another public half. */
	sg_tokenkey *k2 = NULL;
	sg_tokenkey_jwk j2;
	SG_CHECK_OK(sg_tokenkey_generate(&k2));
	SG_CHECK_OK(sg_tokenkey_jwk_of(k2, &j2));
	SG_CHECK(strcmp(j.x, j2.x) != 0 && strcmp(j.kid, j2.kid) != 0);
	SG_CHECK_OK(sg_tokenkey_sign(k2, msg, strlen(msg), rs));
	SG_CHECK_RC(verify(&pk, msg, strlen(msg), rs), SG_EAUTH);
	sg_tokenkey_free(k2);
	sg_tokenkey_free(k);
	sg_tokenkey_free(NULL);
}

static void t_save_load(void)
{
	sg_tokenkey *k = NULL, *back = NULL;
	SG_CHECK_OK(sg_tokenkey_generate(&k));
	const char *path = path_in("dev.key");
	umask(022);
	SG_CHECK_OK(sg_tokenkey_save(k, path));
	struct stat st;
	SG_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	/* No temporary file is left beside it. */
	char tmp[700];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	SG_CHECK(access(tmp, F_OK) != 0);
	/* Saving again replaces it. */
	SG_CHECK_OK(sg_tokenkey_save(k, path));

	SG_CHECK_OK(sg_tokenkey_load(&back, path));
	sg_tokenkey_jwk a, b;
	SG_CHECK_OK(sg_tokenkey_jwk_of(k, &a));
	SG_CHECK_OK(sg_tokenkey_jwk_of(back, &b));
	SG_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	/* What the loaded key signs, the original's public half verifies. */
	uint8_t point[65], rs[SG_TOKENKEY_SIG_LEN];
	sg_pubkey pk;
	pubkey_of(&a, point, &pk);
	SG_CHECK_OK(sg_tokenkey_sign(back, "x", 1, rs));
	SG_CHECK_OK(verify(&pk, "x", 1, rs));
	sg_tokenkey_free(back);

	/* A folder that does not exist: an error, and nothing written. */
	SG_CHECK_RC(sg_tokenkey_save(k, path_in("no-such-dir/dev.key")), SG_EINVAL);
	sg_tokenkey_free(k);

	/* A P-256 key written by OpenSSL in its own form loads too. */
	write_pkey(path_in("ossl.key"), EVP_EC_gen("P-256"));
	SG_CHECK_OK(sg_tokenkey_load(&back, path_in("ossl.key")));
	sg_tokenkey_free(back);
}

static void t_bad_files(void)
{
	sg_tokenkey *k = (sg_tokenkey *)1;
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("missing.key")), SG_ENOTFOUND);
	SG_CHECK(k == NULL);
	SG_CHECK_MSG("cannot read signing key");

	write_text(path_in("empty.key"), "", 0);
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("empty.key")), SG_EINVAL);
	SG_CHECK_MSG("is not a PEM private key");

	static const char garbage[] = "-----BEGIN PRIVATE KEY-----\nTUlJQ0FRVEhJU0lTTk9UQUtFWQ==\n"
	                              "-----END PRIVATE KEY-----\n";
	write_text(path_in("garbage.key"), garbage, strlen(garbage));
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("garbage.key")), SG_EINVAL);
	SG_CHECK_MSG("is not a PEM private key");
	SG_CHECK(!strstr(sg_error_last()->msg, "TUlJ")); /* the file's text is never quoted */
	SG_CHECK(k == NULL);

	/* Random bytes, NULs included. */
	uint8_t noise[512];
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (uint8_t)(i * 37 + 11);
	write_text(path_in("noise.key"), noise, sizeof(noise));
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("noise.key")), SG_EINVAL);

	/* Larger than any key file. */
	static char big[SG_TOKENKEY_FILE_MAX + 1];
	memset(big, 'A', sizeof(big));
	write_text(path_in("big.key"), big, sizeof(big));
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("big.key")), SG_EINVAL);
	SG_CHECK_MSG("larger than");

	/* Private keys of the wrong type or curve. */
	write_pkey(path_in("rsa.key"), EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048));
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("rsa.key")), SG_EINVAL);
	SG_CHECK_MSG("is not an EC P-256 key");
	write_pkey(path_in("p384.key"), EVP_EC_gen("P-384"));
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("p384.key")), SG_EINVAL);
	SG_CHECK_MSG("is not an EC P-256 key");
	write_pkey(path_in("ed25519.key"), EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"));
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("ed25519.key")), SG_EINVAL);
	SG_CHECK_MSG("is not an EC P-256 key");
	SG_CHECK(k == NULL);

	/* An encrypted key is refused without asking for its passphrase. */
	EVP_PKEY *ek = EVP_EC_gen("P-256");
	FILE *f = fopen(path_in("encrypted.key"), "w");
	SG_CHECK(f && PEM_write_PrivateKey(f, ek, EVP_aes_256_cbc(), (const unsigned char *)"pw", 2, NULL, NULL) == 1);
	if (f)
		fclose(f);
	EVP_PKEY_free(ek);
	SG_CHECK_RC(sg_tokenkey_load(&k, path_in("encrypted.key")), SG_EINVAL);
	SG_CHECK_MSG("is encrypted");

	/* A folder is not a key file. */
	setup();
	SG_CHECK(sg_tokenkey_load(&k, dir) < 0);
}

SG_TEST_MAIN(SG_TEST(t_sign_verify), SG_TEST(t_save_load), SG_TEST(t_bad_files))
