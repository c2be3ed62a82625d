/*
 * The development issuer's signing key (contract: sg_tokenkey.h): the
 * OpenSSL calls that used to sit in token/sg_jwt.c, moved to the signer layer
 * so that the token code above needs no OpenSSL.
 *
 * The key file is read into our own buffer (sg_file_read) and parsed from
 * memory rather than through a stdio BIO, so the one plaintext copy we make
 * is wiped; the PEM we write is built in a secure-heap BIO (its memory is
 * cleared when freed) and wiped again after the write. OpenSSL signs in DER
 * (Ecdsa-Sig-Value, RFC 3279 §2.2.3); JOSE wants r and s as two 32-byte
 * big-endian numbers, so the DER is read back with our reader, exactly.
 */
#include "sg_tokenkey.h"

#include "sg_base64.h"
#include "sg_crypto.h"
#include "sg_der.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_ossl.h"
#include "sg_secret.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct sg_tokenkey {
	EVP_PKEY *pkey; /* EC P-256 with its private key; EVP_PKEY_free clears it */
};

static void bio_freep(BIO **b)
{
	BIO_free(*b);
}

static void mdctx_freep(EVP_MD_CTX **c)
{
	EVP_MD_CTX_free(*c);
}

/* Takes ownership of pkey (also on failure). */
static int wrap(EVP_PKEY *pkey, sg_tokenkey **out)
{
	sg_tokenkey *k = malloc(sizeof(*k));
	if (!k) {
		EVP_PKEY_free(pkey);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	k->pkey = pkey;
	*out = k;
	return SG_OK;
}

void sg_tokenkey_free(sg_tokenkey *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pkey);
	free(k);
}

int sg_tokenkey_generate(sg_tokenkey **out)
{
	*out = NULL;
	ERR_clear_error();
	EVP_PKEY *pkey = EVP_EC_gen("P-256");
	if (!pkey)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot generate a P-256 key");
	return wrap(pkey, out);
}

static bool is_p256(EVP_PKEY *pkey)
{
	char group[32] = "";
	return EVP_PKEY_is_a(pkey, "EC") &&
	       EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), NULL) == 1 &&
	       strcmp(group, "prime256v1") == 0;
}

/* An encrypted key is refused, never opened: without this callback OpenSSL
 * would ask for the passphrase on the terminal. u records that it asked. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	*(bool *)u = true;
	return -1;
}

int sg_tokenkey_load(sg_tokenkey **out, const char *path)
{
	*out = NULL;
	uint8_t *pem = NULL;
	size_t len = 0;
	int rc = sg_file_read(path, SG_TOKENKEY_FILE_MAX, &pem, &len);
	if (rc == SG_ENOTFOUND) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(SG_ENOTFOUND, "cannot read signing key: %s", why);
	}
	SG_TRY(rc);
	ERR_clear_error();
	bool encrypted = false;
	BIO *bio = BIO_new_mem_buf(pem, (int)len); /* len <= SG_TOKENKEY_FILE_MAX */
	EVP_PKEY *pkey = bio ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, &encrypted) : NULL;
	BIO_free(bio);
	sg_wipe(pem, len);
	free(pem);
	ERR_clear_error(); /* a parse failure's queue says nothing the message does not */
	SG_ENSURE(pkey || !encrypted, SG_EINVAL, "signing key %s is encrypted; no passphrase is asked for", path);
	SG_ENSURE(pkey, SG_EINVAL, "signing key %s is not a PEM private key", path);
	if (!is_p256(pkey)) {
		EVP_PKEY_free(pkey);
		ERR_clear_error();
		SG_BAIL(SG_EINVAL, "signing key %s is not an EC P-256 key", path);
	}
	return wrap(pkey, out);
}

int sg_tokenkey_save(const sg_tokenkey *k, const char *path)
{
	ERR_clear_error();
	BIO *bio SG_CLEANUP(bio_freep) = BIO_new(BIO_s_secmem());
	SG_ENSURE(bio, SG_EINTERNAL, "out of memory");
	SG_OSSL(PEM_write_bio_PrivateKey(bio, k->pkey, NULL, NULL, 0, NULL, NULL), SG_EINTERNAL,
	        "cannot encode the signing key");
	char *pem = NULL;
	long len = BIO_get_mem_data(bio, &pem);
	SG_ENSURE(len > 0 && pem, SG_EINTERNAL, "cannot encode the signing key");
	int rc = sg_file_write_atomic(path, pem, (size_t)len, 0600);
	sg_wipe(pem, (size_t)len);
	return rc;
}

/* Signs msg with ES256 and returns the raw r||s of RFC 7518 §3.4. */
int sg_tokenkey_sign(const sg_tokenkey *k, const void *msg, size_t n, uint8_t sig[SG_TOKENKEY_SIG_LEN])
{
	ERR_clear_error();
	EVP_MD_CTX *ctx SG_CLEANUP(mdctx_freep) = EVP_MD_CTX_new();
	SG_ENSURE(ctx, SG_EINTERNAL, "out of memory");
	uint8_t der[80];
	size_t dlen = sizeof(der);
	SG_OSSL(EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, k->pkey), SG_EINTERNAL, "sign init");
	SG_OSSL(EVP_DigestSign(ctx, der, &dlen, msg, n), SG_EINTERNAL, "sign");
	sg_reader r = sg_reader_of((sg_slice){der, dlen}), seq;
	sg_slice body, mag[2];
	SG_TRY(sg_der_read(&r, SG_DER_SEQUENCE, &body, NULL));
	seq = sg_reader_of(body);
	SG_TRY(sg_der_read_unsigned_bytes(&seq, &mag[0]));
	SG_TRY(sg_der_read_unsigned_bytes(&seq, &mag[1]));
	SG_ENSURE(sg_reader_done(&r) && sg_reader_done(&seq) && mag[0].len <= 32 && mag[1].len <= 32, SG_EINTERNAL,
	          "bad ECDSA signature");
	memset(sig, 0, SG_TOKENKEY_SIG_LEN);
	memcpy(sig + 32 - mag[0].len, mag[0].p, mag[0].len);
	memcpy(sig + 64 - mag[1].len, mag[1].p, mag[1].len);
	return SG_OK;
}

/* Kubernetes' kid: base64url(SHA-256(SubjectPublicKeyInfo DER)). */
static int derive_kid(EVP_PKEY *pkey, char *out, size_t cap)
{
	unsigned char *der = NULL;
	int n = i2d_PUBKEY(pkey, &der);
	SG_ENSURE(n > 0, SG_EINTERNAL, "cannot encode the public key");
	uint8_t h[32];
	int rc = sg_sha256(der, (size_t)n, h);
	OPENSSL_free(der);
	SG_TRY(rc);
	return sg_b64url_encode(h, sizeof(h), out, cap);
}

/* One affine coordinate as 32 big-endian bytes, whatever point form the
 * key was stored in (a loaded key may carry a compressed point). */
static int coordinate(EVP_PKEY *pkey, const char *name, char *out, size_t cap)
{
	BIGNUM *bn = NULL;
	uint8_t raw[32];
	SG_OSSL(EVP_PKEY_get_bn_param(pkey, name, &bn), SG_EINTERNAL, "public key coordinate %s", name);
	int n = BN_bn2binpad(bn, raw, sizeof(raw));
	BN_free(bn);
	SG_ENSURE(n == (int)sizeof(raw), SG_EINTERNAL, "public key coordinate %s is out of range", name);
	return sg_b64url_encode(raw, sizeof(raw), out, cap);
}

int sg_tokenkey_jwk_of(const sg_tokenkey *k, sg_tokenkey_jwk *out)
{
	memset(out, 0, sizeof(*out));
	ERR_clear_error();
	SG_TRY(coordinate(k->pkey, OSSL_PKEY_PARAM_EC_PUB_X, out->x, sizeof(out->x)));
	SG_TRY(coordinate(k->pkey, OSSL_PKEY_PARAM_EC_PUB_Y, out->y, sizeof(out->y)));
	return derive_kid(k->pkey, out->kid, sizeof(out->kid));
}
