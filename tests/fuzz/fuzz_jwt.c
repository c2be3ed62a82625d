/*
 * Fuzz target for JWT verification (token/sg_jwt.c, token/sg_jwks.c) against a
 * fixed JWKS: one EC P-256 key "fz-ec" and one RSA-2048 key "fz-rsa".
 *
 * The first input byte picks the mode:
 *   even: the rest is a compact token, verified as it comes. This covers
 *         splitting, base64url, the header, key selection and signatures;
 *         mutations rarely keep a signature valid, so
 *   odd:  the rest is "<header JSON>\n<payload JSON>": both are encoded and
 *         signed here with the private half of "fz-ec" (a test key, checked
 *         in on purpose), so the claims checks see arbitrary JSON.
 *
 * Oracles: the result is SG_OK or SG_EAUTH (never anything else); an error
 * message never contains the token; accepted claims are well-formed.
 */
#include "sg_jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW INT64_C(1700000000)

static const char jwks_json[] =
    "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"use\":\"sig\",\"kid\":\"fz-ec\","
    "\"x\":\"KeYe5N4zKe4aEAg5zr5B-zz5Q15CKG0RA-HPJ71QYds\",\"y\":\"VLNXnpHpwcFD92ujfCFruI9r6_9Bw_PMCpyah6uXUoM\"},"
    "{\"kty\":\"RSA\",\"alg\":\"RS256\",\"use\":\"sig\",\"kid\":\"fz-rsa\",\"e\":\"AQAB\",\"n\":\""
    "sg0WZ0O_gaM_BTQcHC6y-A2ayLMmtX7n4H6pO7L7CLWzreVZN4fhJzVrvfpibpnoeD5ethwFoIpGdE7HJFaW4V5HUDmPr7sUd-ChQLfQPHZAE8f5"
    "kDrDUHJEih0Qhu_gBX8fmqX1e5hNd9LLeXLAQ9RLV5Com736154EC1QY_M-fHqqKQ8OsJoSVNXDn8uqVG-S19Qh_Hv43Z-1ZYSHgWCpg8jeWI0iQ"
    "Ltp0o0j-uqyV0sPAg7dsoZ_CDHbxh2Lk7sGMMWFjMIH734xbAy34L8huCSucD7fDSMJz81z_XcLveHnCZSQFKOWjLFqUmvv7VwSmrRr7iqIxuRax"
    "rqpR2Q\"}]}";

/* Test-only key: the private half of "fz-ec" above. */
static const char ec_pem[] = "-----BEGIN PRIVATE KEY-----\n"
                             "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgM+m68fWxZu8bF6lW\n"
                             "5W4cFV8vCThq1Z1f1RIRxzQ8dmOhRANCAAQp5h7k3jMp7hoQCDnOvkH7PPlDXkIo\n"
                             "bRED4c8nvVBh21SzV56R6cHBQ/dro3wha7iPa+v/QcPzzAqcmoerl1KD\n"
                             "-----END PRIVATE KEY-----\n";

static sg_jwks *keys;
static EVP_PKEY *signer;

static void check(int cond)
{
	if (!cond)
		abort();
}

static void init(void)
{
	if (keys)
		return;
	check(sg_jwks_parse(&keys, jwks_json, sizeof(jwks_json) - 1) == 0);
	BIO *b = BIO_new_mem_buf(ec_pem, -1);
	signer = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	BIO_free(b);
	check(signer != NULL);
}

static void verify(const char *tok, size_t len)
{
	static const char *const auds[] = {"istio-ca", "other"};
	sg_jwt_options o = {.issuer = "https://kubernetes.default.svc", .audiences = auds, .n_audiences = 2};
	sg_jwt_claims c;
	int rc = sg_jwt_verify(keys, &o, tok, len, NOW, &c);
	check(rc == 0 || rc == SG_EAUTH);
	/* auto's router reads the same bytes unverified: it fails only as
	 * SG_EAUTH, leaves a NUL-terminated issuer, and agrees with a
	 * successful verification. */
	char iss[64];
	bool secret_bound;
	int prc = sg_jwt_peek_issuer(tok, len, iss, sizeof(iss), &secret_bound);
	check(prc == 0 || prc == SG_EAUTH);
	check(memchr(iss, 0, sizeof(iss)) != NULL && (prc == 0 || (!iss[0] && !secret_bound)));
	check(rc != 0 || (prc == 0 && strcmp(iss, o.issuer) == 0));
	if (rc != 0) {
		/* The token never appears in the message (short ones may by chance). */
		if (len >= 12 && memchr(tok, 0, len) == NULL) {
			char *t = strndup(tok, len);
			check(t && !strstr(sg_error_last()->msg, t));
			free(t);
		}
		return;
	}
	check(c.ns[0] && c.sa[0] && c.exp > NOW - 61);
	check(strlen(c.ns) <= 63 && strlen(c.sa) <= 253);
}

static void sign_and_verify(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	if (!nl)
		return;
	size_t hl = (size_t)(nl - data), pl = size - hl - 1;
	size_t cap = (hl + pl) * 4 / 3 + 100;
	char *tok = malloc(cap);
	check(tok != NULL);
	check(sg_b64url_encode(data, hl, tok, cap) == 0);
	size_t off = strlen(tok);
	tok[off++] = '.';
	check(sg_b64url_encode(nl + 1, pl, tok + off, cap - off) == 0);
	off += strlen(tok + off);

	uint8_t der[80], rs[64];
	size_t dlen = sizeof(der);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	check(ctx && EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, signer) == 1 &&
	      EVP_DigestSign(ctx, der, &dlen, (uint8_t *)tok, off) == 1);
	EVP_MD_CTX_free(ctx);
	const uint8_t *p = der;
	ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &p, (long)dlen);
	check(sig && BN_bn2binpad(ECDSA_SIG_get0_r(sig), rs, 32) == 32 &&
	      BN_bn2binpad(ECDSA_SIG_get0_s(sig), rs + 32, 32) == 32);
	ECDSA_SIG_free(sig);
	tok[off++] = '.';
	check(sg_b64url_encode(rs, sizeof(rs), tok + off, cap - off) == 0);
	verify(tok, strlen(tok));
	free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init();
	if (size == 0)
		return 0;
	if (data[0] & 1)
		sign_and_verify(data + 1, size - 1);
	else
		verify((const char *)data + 1, size - 1);
	return 0;
}
