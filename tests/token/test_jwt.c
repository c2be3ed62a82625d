/*
 * Tests for token/sg_jwt.h: base64url, JWKS parsing, token verification with
 * real OpenSSL keys (tokens are built by hand here so that every hostile
 * shape can be signed), the verification cache, JWKS reload (also under
 * concurrent readers: run it under TSan), the pushed key source (rotation
 * invalidates the cache; pushes racing readers), and the development issuer.
 */
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_test.h"

#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NOW INT64_C(1700000000)
#define ISS "https://kubernetes.default.svc.cluster.local"

static char dir[64];
static void setup(void);
#define ENSURE_SETUP()                                                                                                 \
	do {                                                                                                           \
		if (!dir[0])                                                                                           \
			setup();                                                                                       \
	} while (0)
static EVP_PKEY *ec_key, *ec_key2, *rsa_key;

/* ---- helpers ---- */

static void b64(const void *p, size_t n, char *out, size_t cap)
{
	if (sg_b64url_encode(p, n, out, cap) != 0)
		abort();
}

static char *path_in(const char *name)
{
	static char buf[4][128];
	static int i;
	char *p = buf[i++ % 4];
	snprintf(p, 128, "%s/%s", dir, name);
	return p;
}

static void write_file(const char *path, const char *data, size_t len)
{
	char tmp[160];
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	FILE *f = fopen(tmp, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		abort();
	if (rename(tmp, path) != 0)
		abort();
}

/* Rewrites in place (same inode), as a careless editor would. */
static void write_in_place(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd) != 0)
		abort();
}

static void jwk_ec(EVP_PKEY *k, const char *kid, char *out, size_t cap)
{
	uint8_t pub[65];
	size_t n;
	if (EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub), &n) != 1 || n != 65)
		abort();
	char x[64], y[64];
	b64(pub + 1, 32, x, sizeof(x));
	b64(pub + 33, 32, y, sizeof(y));
	snprintf(out, cap,
	         "{\"kty\":\"EC\",\"crv\":\"P-256\",\"use\":\"sig\",\"kid\":\"%s\",\"x\":\"%s\",\"y\":\"%s\"}", kid, x,
	         y);
}

static void jwk_rsa(EVP_PKEY *k, const char *kid, char *out, size_t cap)
{
	BIGNUM *n = NULL, *e = NULL;
	if (EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &n) != 1 ||
	    EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &e) != 1)
		abort();
	uint8_t nb[1024], eb[16];
	int nl = BN_bn2bin(n, nb), el = BN_bn2bin(e, eb);
	char ns[1500], es[32];
	b64(nb, (size_t)nl, ns, sizeof(ns));
	b64(eb, (size_t)el, es, sizeof(es));
	snprintf(out, cap,
	         "{\"kty\":\"RSA\",\"alg\":\"RS256\",\"use\":\"sig\",\"kid\":\"%s\",\"n\":\"%s\",\"e\":\"%s\"}", kid,
	         ns, es);
	BN_free(n);
	BN_free(e);
}

/* The standard test key set: EC "ec1", RSA "rsa1". */
static char *std_jwks(void)
{
	static char buf[4096];
	char a[512], b[2048];
	jwk_ec(ec_key, "ec1", a, sizeof(a));
	jwk_rsa(rsa_key, "rsa1", b, sizeof(b));
	snprintf(buf, sizeof(buf), "{\"keys\":[%s,%s]}", a, b);
	return buf;
}

static sg_jwks *std_set(void)
{
	sg_jwks *k = NULL;
	const char *j = std_jwks();
	if (sg_jwks_parse(&k, j, strlen(j)) != 0)
		abort();
	return k;
}

/* Signs the encoded header.payload with k (ES256 raw r||s, RS256, or HS256
 * with secret) and returns the compact token (static buffer). */
static char *sign_raw(const char *alg, EVP_PKEY *k, const char *h64, const char *p64)
{
	static char tok[40000];
	snprintf(tok, sizeof(tok), "%s.%s", h64, p64);
	size_t off = strlen(tok);
	uint8_t sig[1024];
	size_t slen = sizeof(sig);
	if (strcmp(alg, "none") == 0) {
		slen = 0;
	} else if (strncmp(alg, "HS", 2) == 0) {
		/* The confusion attack: the RSA public key (PEM) as HMAC secret. */
		BIO *bio = BIO_new(BIO_s_mem());
		PEM_write_bio_PUBKEY(bio, rsa_key);
		char *pem;
		long pl = BIO_get_mem_data(bio, &pem);
		if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, pem, (size_t)pl, (uint8_t *)tok, off, sig,
		               sizeof(sig), &slen))
			abort();
		BIO_free(bio);
	} else {
		uint8_t der[600];
		size_t dlen = sizeof(der);
		EVP_MD_CTX *c = EVP_MD_CTX_new();
		if (EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, k) != 1 ||
		    EVP_DigestSign(c, der, &dlen, (uint8_t *)tok, off) != 1)
			abort();
		EVP_MD_CTX_free(c);
		if (alg[0] == 'E') {
			const uint8_t *p = der;
			ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)dlen);
			BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, 32);
			BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + 32, 32);
			ECDSA_SIG_free(es);
			slen = 64;
		} else {
			memcpy(sig, der, dlen);
			slen = dlen;
		}
	}
	tok[off++] = '.';
	b64(sig, slen, tok + off, sizeof(tok) - off);
	return tok;
}

static char *sign_json(const char *alg, EVP_PKEY *k, const char *header, const char *payload)
{
	static char h64[4000], p64[30000];
	b64(header, strlen(header), h64, sizeof(h64));
	b64(payload, strlen(payload), p64, sizeof(p64));
	return sign_raw(alg, k, h64, p64);
}

#define K8S                                                                                                            \
	"\"kubernetes.io\":{\"namespace\":\"default\",\"serviceaccount\":{\"name\":\"sleep\",\"uid\":\"u-1\"},"        \
	"\"pod\":{\"name\":\"sleep-7f9\",\"uid\":\"0e1f-22\"}}"

/* A payload with the standard claims; extra is spliced in (may override nothing). */
static char *claims(const char *aud, int64_t exp, const char *extra)
{
	static char buf[20000];
	snprintf(buf, sizeof(buf),
	         "{\"iss\":\"" ISS
	         "\",\"aud\":%s,\"exp\":%lld,\"iat\":%lld,\"sub\":\"system:serviceaccount:default:sleep\"%s%s}",
	         aud, (long long)exp, (long long)NOW - 10, extra ? "," : "", extra ? extra : "");
	return buf;
}

static char *es_token(const char *payload)
{
	return sign_json("ES256", ec_key, "{\"alg\":\"ES256\",\"kid\":\"ec1\",\"typ\":\"JWT\"}", payload);
}

static const sg_jwt_options opts = {.issuer = ISS};

static int verify(const char *tok)
{
	sg_jwks *k = std_set();
	sg_jwt_claims c;
	int rc = sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c);
	sg_jwks_release(k);
	return rc;
}

/* Fails with SG_EAUTH, the message contains want and never the token. */
#define CHECK_REFUSED(tok, want)                                                                                       \
	do {                                                                                                           \
		const char *t_ = (tok);                                                                                \
		char copy_[40200];                                                                                     \
		snprintf(copy_, sizeof(copy_), "%s", t_);                                                              \
		SG_CHECK_RC(verify(copy_), SG_EAUTH);                                                                  \
		SG_CHECK_MSG(want);                                                                                    \
		SG_CHECK(strlen(copy_) < 8 || !strstr(sg_error_last()->msg, copy_));                                   \
	} while (0)

/* ---- base64url ---- */

static void t_b64url(void)
{
	ENSURE_SETUP();
	uint8_t out[16];
	size_t n;
	char enc[32];
	SG_CHECK_OK(sg_b64url_decode("AQID", 4, out, sizeof(out), &n));
	SG_CHECK(n == 3 && out[0] == 1 && out[2] == 3);
	SG_CHECK_OK(sg_b64url_decode("-_8", 3, out, sizeof(out), &n));
	SG_CHECK(n == 2 && out[0] == 0xfb && out[1] == 0xff);
	SG_CHECK_OK(sg_b64url_encode(out, n, enc, sizeof(enc)));
	SG_CHECK(strcmp(enc, "-_8") == 0);
	SG_CHECK_RC(sg_b64url_decode("AQ==", 4, out, sizeof(out), &n), SG_EINVAL);
	SG_CHECK_MSG("padding");
	SG_CHECK_RC(sg_b64url_decode("+_8", 3, out, sizeof(out), &n), SG_EINVAL);
	SG_CHECK_MSG("base64, not base64url");
	SG_CHECK_RC(sg_b64url_decode("/_8", 3, out, sizeof(out), &n), SG_EINVAL);
	SG_CHECK_RC(sg_b64url_decode("AQIDB", 5, out, sizeof(out), &n), SG_EINVAL);
	SG_CHECK_RC(sg_b64url_decode("AR", 2, out, sizeof(out), &n), SG_EINVAL); /* trailing bits */
	SG_CHECK_MSG("trailing bits");
	SG_CHECK_RC(sg_b64url_decode("AQIDAQID", 8, out, 5, &n), SG_EINVAL);
	SG_CHECK_OK(sg_b64url_decode("", 0, out, 0, &n));
	SG_CHECK(n == 0);
	SG_CHECK_RC(sg_b64url_encode(out, 3, enc, 4), SG_EINVAL);
}

/* ---- JWKS ---- */

static int parse(const char *j)
{
	sg_jwks *k = NULL;
	int rc = sg_jwks_parse(&k, j, strlen(j));
	sg_jwks_release(k);
	return rc;
}

/* A signature whose R = u1·G + u2·Q is the point at infinity. With the
 * key's private scalar d, r = -e/d (mod n) makes it (e + r·d)/s·G = O for
 * any s. OpenSSL reports that as a fault; for us it is a signature that
 * does not verify (SG_EAUTH, not SG_EINTERNAL), through a set as parsed
 * and through one prepared for service (sg_jwks_prepare). */
static void t_signature_at_infinity(void)
{
	ENSURE_SETUP();
	const char *header = "{\"alg\":\"ES256\",\"kid\":\"ec1\"}";
	char h64[128], p64[2048], tok[4096];
	b64(header, strlen(header), h64, sizeof(h64));
	const char *payload = claims("[\"istio-ca\"]", NOW + 3600, K8S);
	b64(payload, strlen(payload), p64, sizeof(p64));
	int off = snprintf(tok, sizeof(tok), "%s.%s", h64, p64);
	uint8_t dg[32], sig[64];
	SG_CHECK(EVP_Digest(tok, (size_t)off, dg, NULL, EVP_sha256(), NULL) == 1);
	BIGNUM *d = NULL, *n = NULL, *r = BN_new(), *e = BN_bin2bn(dg, 32, NULL), *s = BN_new();
	BN_CTX *ctx = BN_CTX_new();
	SG_CHECK(EVP_PKEY_get_bn_param(ec_key, OSSL_PKEY_PARAM_PRIV_KEY, &d) == 1);
	SG_CHECK(BN_hex2bn(&n, "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551") > 0);
	SG_CHECK(BN_mod_inverse(r, d, n, ctx) && BN_mod_mul(r, r, e, n, ctx) && BN_sub(r, n, r));
	SG_CHECK(BN_set_word(s, 12345) && !BN_is_zero(r));
	SG_CHECK(BN_bn2binpad(r, sig, 32) == 32 && BN_bn2binpad(s, sig + 32, 32) == 32);
	tok[off++] = '.';
	b64(sig, sizeof(sig), tok + off, sizeof(tok) - (size_t)off);

	sg_jwks *plain = std_set(), *ready = std_set();
	SG_CHECK(sg_jwks_prepare(ready) == 1); /* the EC key; the RSA one needs nothing */
	sg_jwt_claims c;
	SG_CHECK_RC(sg_jwt_verify(plain, &opts, tok, strlen(tok), NOW, &c), SG_EAUTH);
	SG_CHECK_MSG("token signature does not verify");
	SG_CHECK_RC(sg_jwt_verify(ready, &opts, tok, strlen(tok), NOW, &c), SG_EAUTH);
	SG_CHECK_MSG("token signature does not verify");
	/* The prepared set still takes what the key signed. */
	char *good = es_token(claims("[\"istio-ca\"]", NOW + 3600, K8S));
	SG_CHECK_OK(sg_jwt_verify(ready, &opts, good, strlen(good), NOW, &c));
	sg_jwks_release(plain);
	sg_jwks_release(ready);
	BN_free(d);
	BN_free(n);
	BN_free(r);
	BN_free(e);
	BN_free(s);
	BN_CTX_free(ctx);
}

/* Only the first SG_JWKS_PREPARED_MAX P-256 keys of a set are prepared. */
static void t_prepare_bound(void)
{
	ENSURE_SETUP();
	char buf[16384], one[512], rsa[2048];
	jwk_rsa(rsa_key, "r", rsa, sizeof(rsa));
	int off = snprintf(buf, sizeof(buf), "{\"keys\":[%s", rsa);
	for (int i = 0; i < SG_JWKS_PREPARED_MAX + 2; i++) {
		char kid[8];
		snprintf(kid, sizeof(kid), "e%d", i);
		jwk_ec(i % 2 ? ec_key2 : ec_key, kid, one, sizeof(one));
		off += snprintf(buf + off, sizeof(buf) - (size_t)off, ",%s", one);
	}
	snprintf(buf + off, sizeof(buf) - (size_t)off, "]}");
	sg_jwks *k = NULL;
	SG_CHECK_OK(sg_jwks_parse(&k, buf, strlen(buf)));
	SG_CHECK(sg_jwks_prepare(k) == SG_JWKS_PREPARED_MAX);
	/* A key past the bound verifies as before. */
	char *tok = sign_json("ES256", ec_key2, "{\"alg\":\"ES256\",\"kid\":\"e5\"}",
	                      claims("[\"istio-ca\"]", NOW + 3600, K8S));
	sg_jwt_claims c;
	SG_CHECK_OK(sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c));
	sg_jwks_release(k);
}

static void t_jwks(void)
{
	ENSURE_SETUP();
	sg_jwks *k = std_set();
	SG_CHECK(sg_jwks_count(k) == 2 && sg_jwks_ignored(k) == 0);
	sg_jwks_release(k);

	char ec[512], buf[4096];
	jwk_ec(ec_key, "e", ec, sizeof(ec));
	snprintf(buf, sizeof(buf),
	         "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"AA\"},%s,"
	         "{\"kty\":\"EC\",\"use\":\"enc\"}]}",
	         ec);
	SG_CHECK_OK(sg_jwks_parse(&k, buf, strlen(buf)));
	SG_CHECK(sg_jwks_count(k) == 1 && sg_jwks_ignored(k) == 2);
	sg_jwks_release(k);

	SG_CHECK_RC(parse("{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA\"}]}"), SG_EINVAL);
	SG_CHECK_MSG("no usable key");
	SG_CHECK_RC(parse("{\"keys\":[]}"), SG_EINVAL);
	SG_CHECK_RC(parse("{\"keys\":{}}"), SG_EINVAL);
	SG_CHECK_RC(parse("[]"), SG_EINVAL);
	SG_CHECK_RC(parse("{\"keys\":[], \"keys\":[]}"), SG_EINVAL);
	SG_CHECK_MSG("duplicate");
	SG_CHECK_RC(parse("{\"keys\":[1]}"), SG_EINVAL);

	/* RSA below 2048 bits. */
	EVP_PKEY *weak = EVP_RSA_gen(1024);
	char r[2048];
	jwk_rsa(weak, "w", r, sizeof(r));
	snprintf(buf, sizeof(buf), "{\"keys\":[%s]}", r);
	SG_CHECK_RC(parse(buf), SG_EINVAL);
	SG_CHECK_MSG("1024 bits is below 2048");
	EVP_PKEY_free(weak);

	/* A point off the curve (y + 1), short coordinates, private parts. */
	SG_CHECK_RC(
	    parse("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\","
	          "\"y\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE\"}]}"),
	    SG_EINVAL);
	SG_CHECK_RC(parse("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AAAA\",\"y\":\"AAAA\"}]}"), SG_EINVAL);
	SG_CHECK_MSG("coordinates must be 32 bytes");
	SG_CHECK_RC(parse("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-192\",\"x\":\"AAAA\",\"y\":\"AAAA\"}]}"), SG_EINVAL);
	snprintf(buf, sizeof(buf), "{\"keys\":[%.*s,\"d\":\"AAAA\"}]}", (int)strlen(ec) - 1, ec);
	SG_CHECK_RC(parse(buf), SG_EINVAL);
	SG_CHECK_MSG("private key material");
	/* alg that does not fit the key. */
	snprintf(buf, sizeof(buf), "{\"keys\":[%.*s,\"alg\":\"RS256\"}]}", (int)strlen(ec) - 1, ec);
	SG_CHECK_RC(parse(buf), SG_EINVAL);

	/* More than 64 keys; more than 1 MiB. */
	char *big = malloc(SG_JWKS_MAX + 100);
	size_t off = (size_t)sprintf(big, "{\"keys\":[");
	for (int i = 0; i < 65; i++)
		off += (size_t)sprintf(big + off, "%s%s", i ? "," : "", ec);
	sprintf(big + off, "]}");
	SG_CHECK_RC(parse(big), SG_EINVAL);
	SG_CHECK_MSG("more than 64");
	memset(big, ' ', SG_JWKS_MAX + 1);
	big[SG_JWKS_MAX + 1] = '\0';
	SG_CHECK_RC(parse(big), SG_EINVAL);
	SG_CHECK_MSG("more than");
	free(big);
}

/* ---- verification ---- */

static void t_valid(void)
{
	ENSURE_SETUP();
	sg_jwks *k = std_set();
	sg_jwt_claims c;
	char *tok = es_token(claims("[\"istio-ca\"]", NOW + 3600, K8S));
	SG_CHECK_OK(sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c));
	SG_CHECK(strcmp(c.ns, "default") == 0 && strcmp(c.sa, "sleep") == 0);
	SG_CHECK(strcmp(c.pod_name, "sleep-7f9") == 0 && strcmp(c.pod_uid, "0e1f-22") == 0);
	SG_CHECK(c.exp == NOW + 3600 && c.iat == NOW - 10 && c.nbf == INT64_MIN);

	tok =
	    sign_json("RS256", rsa_key, "{\"alg\":\"RS256\",\"kid\":\"rsa1\"}", claims("\"istio-ca\"", NOW + 60, K8S));
	SG_CHECK_OK(sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c));
	SG_CHECK(strcmp(c.sa, "sleep") == 0);

	/* No kid: every key of the alg's type is tried. */
	tok = sign_json("ES256", ec_key, "{\"alg\":\"ES256\"}", claims("[\"x\",\"istio-ca\"]", NOW + 60, K8S));
	SG_CHECK_OK(sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c));

	/* sub fallback when kubernetes.io is absent. */
	tok = es_token(claims("[\"istio-ca\"]", NOW + 60, NULL));
	SG_CHECK_OK(sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c));
	SG_CHECK(strcmp(c.ns, "default") == 0 && strcmp(c.sa, "sleep") == 0 && c.pod_name[0] == '\0');

	/* Configured audiences; leeway. */
	const char *auds[] = {"a", "b"};
	sg_jwt_options o2 = {.issuer = ISS, .audiences = auds, .n_audiences = 2, .leeway = -1};
	tok = es_token(claims("\"b\"", NOW + 1, K8S));
	SG_CHECK_OK(sg_jwt_verify(k, &o2, tok, strlen(tok), NOW, &c));
	SG_CHECK_RC(sg_jwt_verify(k, &o2, tok, strlen(tok), NOW + 1, &c), SG_EAUTH);
	SG_CHECK_MSG("token expired");
	sg_jwt_options o3 = {.issuer = ISS, .audiences = auds, .n_audiences = 2};
	SG_CHECK_OK(sg_jwt_verify(k, &o3, tok, strlen(tok), NOW + 60, &c)); /* default leeway 60 */
	SG_CHECK_RC(sg_jwt_verify(k, &opts, tok, strlen(tok), NOW, &c), SG_EAUTH);
	SG_CHECK_MSG("token audience [b] does not include istio-ca");
	tok = es_token(claims("\"c\"", NOW + 10, K8S));
	SG_CHECK_RC(sg_jwt_verify(k, &o3, tok, strlen(tok), NOW, &c), SG_EAUTH);
	SG_CHECK_MSG("token audience [c] does not include any of [a, b]");
	sg_jwks_release(k);
}

static void t_claims_refused(void)
{
	ENSURE_SETUP();
	const char *aud = "[\"istio-ca\"]";
	CHECK_REFUSED(es_token(claims(aud, NOW - 61, K8S)), "token expired");
	CHECK_REFUSED(es_token(claims(aud, NOW + 600, K8S ",\"nbf\":1700000061")), "token is not yet valid (nbf)");
	CHECK_REFUSED(es_token(claims("[\"other\",\"x\"]", NOW + 60, K8S)),
	              "token audience [other, x] does not include istio-ca");
	CHECK_REFUSED(es_token(claims("\"other\"", NOW + 60, K8S)), "token audience [other] does not include istio-ca");
	CHECK_REFUSED(es_token(claims("7", NOW + 60, K8S)), "neither a string nor an array");
	CHECK_REFUSED(es_token("{\"iss\":\"https://evil\",\"aud\":\"istio-ca\",\"exp\":1700000100}"),
	              "token issuer \"https://evil\" is not \"" ISS "\"");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\"}"), "token has no exp");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":\"1700000100\"}"),
	              "token exp is not a number");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1e300}"),
	              "token exp is out of range");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":-5}"), "token exp is out of range");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":99999999999999999999999}"),
	              "token payload is not valid JSON");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100,\"exp\":1}"),
	              "token payload is not valid JSON: duplicate");
	CHECK_REFUSED(es_token("[1]"), "token payload is not a JSON object");
	/* Kubernetes claims. */
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100}"),
	              "token has no kubernetes.io claims and no service-account subject");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100,"
	                       "\"sub\":\"system:serviceaccount:default\"}"),
	              "token subject is not system:serviceaccount:<namespace>:<name>");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100,"
	                       "\"sub\":\"system:serviceaccount:default:sleep:extra\"}"),
	              "token subject is not system:serviceaccount:<namespace>:<name>");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100,"
	                       "\"sub\":\"system:serviceaccount:Default:sleep\"}"),
	              "namespace is not a DNS-1123 label");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100,"
	                       "\"kubernetes.io\":{\"namespace\":\"default\"}}"),
	              "lack serviceaccount");
	CHECK_REFUSED(
	    es_token(claims(aud, NOW + 60,
	                    "\"kubernetes.io\":{\"namespace\":\"other\",\"serviceaccount\":{\"name\":\"sleep\"}}")),
	    "subject does not match");
	CHECK_REFUSED(es_token("{\"iss\":\"" ISS "\",\"aud\":\"istio-ca\",\"exp\":1700000100,"
	                       "\"kubernetes.io\":{\"namespace\":\"default\",\"serviceaccount\":{\"name\":\"a_b\"}}}"),
	              "service account is not a DNS-1123 subdomain");
}

/* Re-encodes part `which` (0 header, 1 payload, 2 signature) of tok with
 * one bit flipped in decoded byte `at`. */
static char *flip(const char *tok, int which, size_t at, uint8_t bit)
{
	static char out[40000];
	const char *parts[3], *d1 = strchr(tok, '.'), *d2 = strchr(d1 + 1, '.');
	parts[0] = tok;
	parts[1] = d1 + 1;
	parts[2] = d2 + 1;
	size_t lens[3] = {(size_t)(d1 - tok), (size_t)(d2 - d1 - 1), strlen(d2 + 1)};
	out[0] = '\0';
	for (int i = 0; i < 3; i++) {
		if (i == which) {
			uint8_t raw[20000];
			size_t n;
			if (sg_b64url_decode(parts[i], lens[i], raw, sizeof(raw), &n) != 0 || at >= n)
				abort();
			raw[at] ^= bit;
			b64(raw, n, out + strlen(out), sizeof(out) - strlen(out));
		} else {
			strncat(out, parts[i], lens[i]);
		}
		if (i < 2)
			strcat(out, ".");
	}
	return out;
}

static void t_structure_refused(void)
{
	ENSURE_SETUP();
	char tok[40000];
	snprintf(tok, sizeof(tok), "%s", es_token(claims("\"istio-ca\"", NOW + 60, K8S)));
	SG_CHECK_OK(verify(tok));
	/* "JWT" -> "JWU" in the header; one bit of the payload; of r; of s. */
	CHECK_REFUSED(flip(tok, 0, 34, 0x01), "token signature does not verify");
	CHECK_REFUSED(flip(tok, 1, 5, 0x20), "token signature does not verify");
	CHECK_REFUSED(flip(tok, 2, 0, 0x80), "token signature does not verify");
	CHECK_REFUSED(flip(tok, 2, 63, 0x01), "token signature does not verify");
	/* RS256 too. */
	char rs[40000];
	snprintf(
	    rs, sizeof(rs), "%s",
	    sign_json("RS256", rsa_key, "{\"alg\":\"RS256\",\"kid\":\"rsa1\"}", claims("\"istio-ca\"", NOW + 60, K8S)));
	SG_CHECK_OK(verify(rs));
	CHECK_REFUSED(flip(rs, 1, 3, 0x04), "token signature does not verify");
	CHECK_REFUSED(flip(rs, 2, 100, 0x04), "token signature does not verify");

	const char *p = claims("\"istio-ca\"", NOW + 60, K8S);
	CHECK_REFUSED(sign_json("none", NULL, "{\"alg\":\"none\"}", p), "token alg none is not accepted");
	CHECK_REFUSED(sign_json("none", NULL, "{\"alg\":\"NONE\",\"kid\":\"ec1\"}", p),
	              "token alg none is not accepted");
	CHECK_REFUSED(sign_json("HS256", NULL, "{\"alg\":\"HS256\",\"kid\":\"rsa1\"}", p),
	              "token alg HS256 is not accepted (HMAC)");
	CHECK_REFUSED(sign_json("HS256", NULL, "{\"alg\":\"HS256\"}", p), "token alg HS256 is not accepted (HMAC)");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"EdDSA\"}", p), "token alg EdDSA is not supported");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"kid\":\"ec1\"}", p), "token header has no alg");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"ES256\",\"kid\":\"ec1\",\"crit\":[\"exp\"]}", p),
	              "\"crit\"");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"ES256\",\"kid\":\"nope\"}", p),
	              "token kid \"nope\" is not in the JWKS");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"ES256\",\"kid\":\"rsa1\"}", p),
	              "token alg ES256 does not match key \"rsa1\" (RSA, alg RS256)");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"PS256\",\"kid\":\"rsa1\"}", p), "does not match key");
	CHECK_REFUSED(sign_json("ES256", ec_key2, "{\"alg\":\"ES256\",\"kid\":\"ec1\"}", p),
	              "token signature does not verify");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"ES256\",\"kid\":7}", p), "token kid is not");
	CHECK_REFUSED(sign_json("ES256", ec_key, "[\"ES256\"]", p), "token header is not a JSON object");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":\"ES256\",\"alg\":\"none\"}", p),
	              "token header is not valid JSON: duplicate");
	CHECK_REFUSED(sign_json("ES256", ec_key, "{\"alg\":", p), "token header is not valid JSON");

	/* Bad base64url in each part. */
	char *d1 = strchr(tok, '.');
	char bad[40100];
	snprintf(bad, sizeof(bad), "%.*s=%s", (int)(d1 - tok), tok, d1);
	CHECK_REFUSED(bad, "padding is not allowed");
	snprintf(bad, sizeof(bad), "%s", tok);
	bad[3] = '+';
	CHECK_REFUSED(bad, "'+' is base64, not base64url");
	bad[3] = '/';
	CHECK_REFUSED(bad, "'/' is base64, not base64url");
	snprintf(bad, sizeof(bad), "%s", tok);
	bad[strlen(bad) - 2] = '/';
	CHECK_REFUSED(bad, "token signature is not valid base64url");
	snprintf(bad, sizeof(bad), "%s==", tok);
	CHECK_REFUSED(bad, "padding");
	/* Wrong sizes of the ES256 signature. */
	uint8_t zeros[61] = {0};
	snprintf(bad, sizeof(bad), "%s", tok);
	char *d2 = strrchr(bad, '.') + 1;
	b64(zeros, sizeof(zeros), d2, sizeof(bad) - (size_t)(d2 - bad));
	CHECK_REFUSED(bad, "token signature has 61 bytes, ES256 needs 64");

	/* Part counts. */
	CHECK_REFUSED("abc.def", "token has 2 parts, a compact JWS has 3");
	snprintf(bad, sizeof(bad), "%s.", tok);
	CHECK_REFUSED(bad, "token has 4 parts");
	snprintf(bad, sizeof(bad), "%s.x.y", tok);
	CHECK_REFUSED(bad, "token has 5 parts");
	CHECK_REFUSED("..", "token header is not valid JSON");
	SG_CHECK_RC(verify(""), SG_EAUTH);
	SG_CHECK_MSG("token is empty");

	/* Sizes: token, header, payload. */
	char *huge = malloc(SG_JWT_TOKEN_MAX + 2);
	memset(huge, 'A', SG_JWT_TOKEN_MAX + 1);
	huge[SG_JWT_TOKEN_MAX + 1] = '\0';
	huge[10] = huge[20] = '.';
	CHECK_REFUSED(huge, "more than 16384");
	free(huge);
	char hdr[1400];
	snprintf(hdr, sizeof(hdr), "{\"alg\":\"ES256\",\"x\":\"%01100d\"}", 0);
	CHECK_REFUSED(sign_json("ES256", ec_key, hdr, p), "token header is larger than 1024 bytes");
	char *pl = malloc(9000);
	snprintf(pl, 9000, "{\"pad\":\"%08500d\"}", 0);
	CHECK_REFUSED(es_token(pl), "token payload is larger than 8192 bytes");
	free(pl);
}

/* ---- the cache and the file source ---- */

static char *std_jwks_path(void)
{
	char *p = path_in("jwks.json");
	const char *j = std_jwks();
	write_file(p, j, strlen(j));
	return p;
}

static void t_cache(void)
{
	ENSURE_SETUP();
	sg_jwks_file *f = NULL;
	SG_CHECK_OK(sg_jwks_file_new(&f, std_jwks_path()));
	sg_jwt_verifier *v = NULL;
	SG_CHECK_OK(sg_jwt_verifier_new(&v, f, &opts));
	char tok[40000];
	snprintf(tok, sizeof(tok), "%s", es_token(claims("\"istio-ca\"", NOW + 100, K8S)));
	sg_jwt_claims a, b;
	SG_CHECK_OK(sg_jwt_verifier_verify(v, tok, strlen(tok), NOW, &a));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, tok, strlen(tok), NOW + 1, &b));
	SG_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	uint64_t hits, misses;
	sg_jwt_verifier_stats(v, &hits, &misses);
	SG_CHECK(hits == 1 && misses == 1);
	/* Past exp (and the leeway): refused although it was cached. */
	SG_CHECK_RC(sg_jwt_verifier_verify(v, tok, strlen(tok), NOW + 200, &b), SG_EAUTH);
	SG_CHECK_MSG("token expired");
	/* Inside the leeway after exp: a miss, verified again, not cached. */
	SG_CHECK_OK(sg_jwt_verifier_verify(v, tok, strlen(tok), NOW + 120, &b));
	/* A failure is never a hit. */
	char *bad = flip(tok, 2, 5, 1);
	SG_CHECK_RC(sg_jwt_verifier_verify(v, bad, strlen(bad), NOW, &b), SG_EAUTH);
	SG_CHECK_RC(sg_jwt_verifier_verify(v, bad, strlen(bad), NOW, &b), SG_EAUTH);
	SG_CHECK_MSG("does not verify");

	/* A tiny cache evicts but stays correct. */
	sg_jwt_verifier *small = NULL;
	sg_jwt_options so = opts;
	so.cache_entries = 1;
	SG_CHECK_OK(sg_jwt_verifier_new(&small, f, &so));
	for (int i = 0; i < 400; i++) {
		char extra[300];
		snprintf(extra, sizeof(extra), K8S ",\"jti\":\"%d\"", i);
		char *t = es_token(claims("\"istio-ca\"", NOW + 100, extra));
		SG_CHECK_OK(sg_jwt_verifier_verify(small, t, strlen(t), NOW, &b));
		SG_CHECK_OK(sg_jwt_verifier_verify(small, t, strlen(t), NOW, &b));
	}
	sg_jwt_verifier_stats(small, &hits, &misses);
	SG_CHECK(hits == 400 && misses == 400);
	sg_jwt_verifier_free(small);
	sg_jwt_verifier_free(v);
	sg_jwks_file_free(f);
}

static void t_reload(void)
{
	ENSURE_SETUP();
	char *path = std_jwks_path();
	sg_jwks_file *f = NULL;
	SG_CHECK_OK(sg_jwks_file_new(&f, path));
	sg_jwt_verifier *v = NULL;
	SG_CHECK_OK(sg_jwt_verifier_new(&v, f, &opts));
	sg_jwt_claims c;
	char old_tok[40000], new_tok[40000];
	snprintf(old_tok, sizeof(old_tok), "%s", es_token(claims("\"istio-ca\"", NOW + 600, K8S)));
	snprintf(
	    new_tok, sizeof(new_tok), "%s",
	    sign_json("ES256", ec_key2, "{\"alg\":\"ES256\",\"kid\":\"ec2\"}", claims("\"istio-ca\"", NOW + 600, K8S)));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c));
	SG_CHECK_RC(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c), SG_EAUTH);

	/* Rotate: only ec2. The cached old token must not survive. */
	char k2[512], j2[700];
	jwk_ec(ec_key2, "ec2", k2, sizeof(k2));
	snprintf(j2, sizeof(j2), "{\"keys\":[%s]}", k2);
	write_file(path, j2, strlen(j2));
	SG_CHECK_OK(sg_jwks_file_refresh(f));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c));
	SG_CHECK_RC(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c), SG_EAUTH);
	SG_CHECK_MSG("token kid \"ec1\" is not in the JWKS");

	/* A truncated write in place keeps the current keys. */
	sg_log_set_fd(open("/dev/null", O_WRONLY)); /* the expected warning */
	write_in_place(path, j2, strlen(j2) / 2);
	SG_CHECK_RC(sg_jwks_file_refresh(f), SG_EINVAL);
	SG_CHECK_MSG("not valid JSON");
	SG_CHECK_RC(sg_jwks_file_refresh(f), SG_EINVAL); /* same broken file: same answer, no reparse */
	SG_CHECK_OK(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c));
	sg_jwks *cur = sg_jwks_file_get(f);
	SG_CHECK(sg_jwks_count(cur) == 1);
	sg_jwks_release(cur);
	/* An empty key set, a missing file: same. */
	write_in_place(path, "{\"keys\":[]}", 11);
	SG_CHECK_RC(sg_jwks_file_refresh(f), SG_EINVAL);
	unlink(path);
	SG_CHECK_RC(sg_jwks_file_refresh(f), SG_ENOTFOUND);
	SG_CHECK_OK(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c));
	/* Fixed again. */
	write_file(path, std_jwks(), strlen(std_jwks()));
	SG_CHECK_OK(sg_jwks_file_refresh(f));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c));
	sg_log_set_fd(2);

	sg_jwks_file *none = NULL;
	SG_CHECK_RC(sg_jwks_file_new(&none, path_in("missing.json")), SG_ENOTFOUND);
	SG_CHECK(none == NULL);
	sg_jwt_verifier_free(v);
	sg_jwks_file_free(f);
}

/* ---- concurrency (run under TSan) ---- */

struct conc {
	sg_jwt_verifier *v;
	sg_jwks_file *f;
	char toks[8][2048];
	atomic_int stop;
	atomic_int failures;
	atomic_long verified;
};

static void *conc_reader(void *arg)
{
	struct conc *s = arg;
	long n = 0;
	while (!atomic_load(&s->stop)) {
		const char *t = s->toks[n % 8];
		sg_jwt_claims c;
		if (sg_jwt_verifier_verify(s->v, t, strlen(t), NOW, &c) != 0 || strcmp(c.sa, "sleep") != 0)
			atomic_fetch_add(&s->failures, 1);
		sg_jwks *k = sg_jwks_file_get(s->f);
		if (sg_jwks_count(k) == 0)
			atomic_fetch_add(&s->failures, 1);
		sg_jwks_release(k);
		n++;
		atomic_fetch_add(&s->verified, 1); /* counted as it goes: the writer watches it */
	}
	return NULL;
}

static void t_concurrent(void)
{
	ENSURE_SETUP();
	char *path = std_jwks_path();
	const char *good = std_jwks();
	struct conc *s = calloc(1, sizeof(*s));
	SG_CHECK_OK(sg_jwks_file_new(&s->f, path));
	sg_jwt_options o = opts;
	o.cache_entries = 256;
	SG_CHECK_OK(sg_jwt_verifier_new(&s->v, s->f, &o));
	for (int i = 0; i < 8; i++) {
		char extra[300];
		snprintf(extra, sizeof(extra), K8S ",\"jti\":\"%d\"", i);
		snprintf(s->toks[i], sizeof(s->toks[i]), "%s", es_token(claims("\"istio-ca\"", NOW + 600, extra)));
	}
	sg_log_set_fd(open("/dev/null", O_WRONLY));
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, conc_reader, s);
	/* ~2.5 s of rewrites: good by rename, truncated in place, good in
	 * place; the readers' once-per-second checks race with refresh here.
	 * The pauses pace the rewrites; the span is the test. A loaded machine
	 * may starve the readers, so the rewrites go on (for at most a
	 * minute) until the readers have verified enough to have raced them. */
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	int rounds = 0;
	long elapsed_ms = 0;
	do {
		write_file(path, good, strlen(good));
		int rc1 = sg_jwks_file_refresh(s->f);
		write_in_place(path, good, strlen(good) / 3);
		int rc2 = sg_jwks_file_refresh(s->f);
		SG_CHECK(rc1 == 0 && rc2 == SG_EINVAL);
		nanosleep(&(struct timespec){0, 20000000}, NULL);
		write_in_place(path, good, strlen(good));
		rounds++;
		clock_gettime(CLOCK_MONOTONIC, &now);
		elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
	} while (elapsed_ms < 2500 || (atomic_load(&s->verified) <= 100 && elapsed_ms < 60000));
	atomic_store(&s->stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	sg_log_set_fd(2);
	SG_CHECK(atomic_load(&s->failures) == 0);
	SG_CHECK(atomic_load(&s->verified) > 100);
	printf("concurrent: %d rewrites, %ld verifications\n", rounds, atomic_load(&s->verified));
	sg_jwt_verifier_free(s->v);
	sg_jwks_file_free(s->f);
	free(s);
}

/* ---- the pushed source ---- */

static sg_jwks *parse_or_die(const char *j)
{
	sg_jwks *k = NULL;
	if (sg_jwks_parse(&k, j, strlen(j)) != 0)
		abort();
	return k;
}

/* {"keys":[ec2]} and {"keys":[ec1, rsa1, ec2]}. */
static sg_jwks *only_ec2_set(void)
{
	char k2[512], j[700];
	jwk_ec(ec_key2, "ec2", k2, sizeof(k2));
	snprintf(j, sizeof(j), "{\"keys\":[%s]}", k2);
	return parse_or_die(j);
}

static sg_jwks *all_set(void)
{
	char a[512], b[2048], c[512], j[4096];
	jwk_ec(ec_key, "ec1", a, sizeof(a));
	jwk_rsa(rsa_key, "rsa1", b, sizeof(b));
	jwk_ec(ec_key2, "ec2", c, sizeof(c));
	snprintf(j, sizeof(j), "{\"keys\":[%s,%s,%s]}", a, b, c);
	return parse_or_die(j);
}

static void t_pushed(void)
{
	ENSURE_SETUP();
	sg_jwks *std = std_set(), *only2 = only_ec2_set();
	sg_jwks_file *f = NULL;
	SG_CHECK_RC(sg_jwks_file_new_pushed(&f, NULL), SG_EINVAL);
	SG_CHECK(f == NULL);
	SG_CHECK_OK(sg_jwks_file_new_pushed(&f, std));
	SG_CHECK(sg_jwks_file_is_pushed(f));
	SG_CHECK(sg_jwks_file_poll(f) == sg_jwks_generation(std));
	SG_CHECK_OK(sg_jwks_file_refresh(f)); /* nothing to look at */
	SG_CHECK(sg_jwks_file_poll(f) == sg_jwks_generation(std));

	sg_jwt_verifier *v = NULL;
	SG_CHECK_OK(sg_jwt_verifier_new(&v, f, &opts));
	char old_tok[4096], new_tok[4096];
	snprintf(old_tok, sizeof(old_tok), "%s", es_token(claims("\"istio-ca\"", NOW + 600, K8S)));
	snprintf(
	    new_tok, sizeof(new_tok), "%s",
	    sign_json("ES256", ec_key2, "{\"alg\":\"ES256\",\"kid\":\"ec2\"}", claims("\"istio-ca\"", NOW + 600, K8S)));
	sg_jwt_claims c;
	uint64_t hits, misses;
	SG_CHECK_OK(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c));
	SG_CHECK(strcmp(c.sa_uid, "u-1") == 0);
	SG_CHECK_RC(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c), SG_EAUTH);
	sg_jwt_verifier_stats(v, &hits, &misses);
	SG_CHECK(hits == 1 && misses == 2);

	/* Pushing the set in use changes nothing: same generation, still a hit. */
	SG_CHECK_OK(sg_jwks_file_set(f, std));
	SG_CHECK(sg_jwks_file_poll(f) == sg_jwks_generation(std));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c));
	sg_jwt_verifier_stats(v, &hits, &misses);
	SG_CHECK(hits == 2 && misses == 2);

	/* Rotation: only ec2. The cached verification of the ec1 token is a
	 * miss now, and the token is refused: its key was removed. */
	SG_CHECK_OK(sg_jwks_file_set(f, only2));
	SG_CHECK(sg_jwks_file_poll(f) == sg_jwks_generation(only2));
	SG_CHECK_RC(sg_jwt_verifier_verify(v, old_tok, strlen(old_tok), NOW, &c), SG_EAUTH);
	SG_CHECK_MSG("token kid \"ec1\" is not in the JWKS");
	SG_CHECK_OK(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c));
	sg_jwt_verifier_stats(v, &hits, &misses);
	SG_CHECK(hits == 2 && misses == 4);
	sg_jwks *cur = sg_jwks_file_get(f);
	SG_CHECK(cur == only2 && sg_jwks_count(cur) == 1);
	sg_jwks_release(cur);

	/* The source holds its own references: ours can go now. */
	sg_jwks_release(std);
	sg_jwks_release(only2);
	SG_CHECK_OK(sg_jwt_verifier_verify(v, new_tok, strlen(new_tok), NOW, &c));

	/* Refused: a NULL set, and pushes to a file source. */
	SG_CHECK_RC(sg_jwks_file_set(f, NULL), SG_EINVAL);
	sg_jwks_file *file = NULL;
	SG_CHECK_OK(sg_jwks_file_new(&file, std_jwks_path()));
	SG_CHECK(!sg_jwks_file_is_pushed(file));
	sg_jwks *k = std_set();
	SG_CHECK_RC(sg_jwks_file_set(file, k), SG_EINVAL);
	SG_CHECK_MSG("keys cannot be pushed to it");
	sg_jwks_release(k);
	sg_jwks_file_free(file);
	sg_jwt_verifier_free(v);
	sg_jwks_file_free(f);
}

/* Readers verify (mostly through the cache) and take references while a
 * writer rotates between two sets that both hold ec1: every verification
 * must succeed, and TSan must stay quiet. */
struct pconc {
	sg_jwks_file *f;
	sg_jwt_verifier *v;
	char toks[4][2048];
	atomic_int stop;
	atomic_int failures;
	atomic_long verified;
};

static void *pconc_reader(void *arg)
{
	struct pconc *s = arg;
	long n = 0;
	while (!atomic_load(&s->stop)) {
		const char *t = s->toks[n % 4];
		sg_jwt_claims c;
		if (sg_jwt_verifier_verify(s->v, t, strlen(t), NOW, &c) != 0)
			atomic_fetch_add(&s->failures, 1);
		sg_jwks *k = sg_jwks_file_get(s->f);
		if (sg_jwks_count(k) < 2)
			atomic_fetch_add(&s->failures, 1);
		sg_jwks_release(k);
		n++;
		atomic_fetch_add(&s->verified, 1); /* counted as it goes: the pusher watches it */
	}
	return NULL;
}

static void t_pushed_concurrent(void)
{
	ENSURE_SETUP();
	sg_jwks *sets[2] = {std_set(), all_set()};
	struct pconc *s = calloc(1, sizeof(*s));
	SG_CHECK_OK(sg_jwks_file_new_pushed(&s->f, sets[0]));
	sg_jwt_options o = opts;
	o.cache_entries = 256;
	SG_CHECK_OK(sg_jwt_verifier_new(&s->v, s->f, &o));
	for (int i = 0; i < 4; i++) {
		char extra[300];
		snprintf(extra, sizeof(extra), K8S ",\"jti\":\"p%d\"", i);
		snprintf(s->toks[i], sizeof(s->toks[i]), "%s", es_token(claims("\"istio-ca\"", NOW + 600, extra)));
	}
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, pconc_reader, s);
	/* 400 pushes 2 ms apart (the pauses pace them), and more (for at
	 * most a minute) until the readers, whom a loaded machine may starve,
	 * have verified enough to have raced them. */
	int pushes = 0;
	uint64_t until = sg_now_ns() + 60000000000ull;
	for (; pushes < 400 || (atomic_load(&s->verified) <= 100 && sg_now_ns() < until); pushes++) {
		SG_CHECK_OK(sg_jwks_file_set(s->f, sets[pushes % 2]));
		nanosleep(&(struct timespec){0, 2000000}, NULL);
	}
	atomic_store(&s->stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	SG_CHECK(atomic_load(&s->failures) == 0);
	SG_CHECK(atomic_load(&s->verified) > 100);
	printf("pushed concurrent: %d pushes, %ld verifications\n", pushes, atomic_load(&s->verified));
	sg_jwt_verifier_free(s->v);
	sg_jwks_file_free(s->f);
	sg_jwks_release(sets[0]);
	sg_jwks_release(sets[1]);
	free(s);
}

/* ---- development issuer, identity ---- */

static void t_dev_issuer(void)
{
	ENSURE_SETUP();
	char *key = path_in("dev.key"), *jwks = path_in("dev.jwks");
	SG_CHECK_OK(sg_jwt_dev_issuer_create(key, jwks, NULL));
	struct stat st;
	SG_CHECK(stat(key, &st) == 0 && (st.st_mode & 0777) == 0600);
	SG_CHECK(stat(jwks, &st) == 0 && (st.st_mode & 0777) == 0644);
	sg_jwt_mint_options mo = {
	    .issuer = "signet-dev",
	    .ns = "istio-system",
	    .sa = "istio-ingressgateway-service-account",
	    .pod_name = "gw-1",
	    .pod_uid = "1234-abcd",
	    .ttl = 3600,
	    .now = NOW,
	};
	char *tok = NULL;
	SG_CHECK_OK(sg_jwt_mint(key, &mo, &tok));
	sg_jwks_file *f = NULL;
	SG_CHECK_OK(sg_jwks_file_new(&f, jwks));
	sg_jwks *k = sg_jwks_file_get(f);
	sg_jwt_claims c;
	sg_jwt_options o = {.issuer = "signet-dev"};
	SG_CHECK_OK(sg_jwt_verify(k, &o, tok, strlen(tok), NOW + 10, &c));
	SG_CHECK(strcmp(c.ns, "istio-system") == 0 && strcmp(c.sa, mo.sa) == 0);
	SG_CHECK(strcmp(c.pod_name, "gw-1") == 0 && strcmp(c.pod_uid, "1234-abcd") == 0 && c.exp == NOW + 3600);
	SG_CHECK(c.nbf == NOW && c.iat == NOW);
	SG_CHECK_RC(sg_jwt_verify(k, &o, tok, strlen(tok), NOW + 3700, &c), SG_EAUTH);
	/* The kid is base64url(SHA-256(SPKI)): 43 characters. */
	const char *d = strchr(tok, '.');
	uint8_t hj[256];
	size_t hl;
	SG_CHECK_OK(sg_b64url_decode(tok, (size_t)(d - tok), hj, sizeof(hj), &hl));
	hj[hl] = 0;
	SG_CHECK(strstr((char *)hj, "\"alg\":\"ES256\"") && strlen(strstr((char *)hj, "\"kid\":\"")) == 7 + 43 + 2);
	free(tok);
	sg_jwks_release(k);
	sg_jwks_file_free(f);

	mo.sa = "Bad_Name";
	SG_CHECK_RC(sg_jwt_mint(key, &mo, &tok), SG_EINVAL);
	mo.sa = "sa";
	SG_CHECK_RC(sg_jwt_mint(path_in("nope.key"), &mo, &tok), SG_ENOTFOUND);
	/* An RSA key is not a dev issuer key. */
	FILE *fp = fopen(path_in("rsa.key"), "w");
	PEM_write_PrivateKey(fp, rsa_key, NULL, NULL, 0, NULL, NULL);
	fclose(fp);
	SG_CHECK_RC(sg_jwt_mint(path_in("rsa.key"), &mo, &tok), SG_EINVAL);
	SG_CHECK_OK(sg_jwt_dev_issuer_create(key, jwks, "my-kid"));
	mo.kid = "my-kid";
	SG_CHECK_OK(sg_jwt_mint(key, &mo, &tok));
	SG_CHECK_OK(sg_jwks_file_new(&f, jwks));
	k = sg_jwks_file_get(f);
	SG_CHECK_OK(sg_jwt_verify(k, &o, tok, strlen(tok), NOW, &c));
	free(tok);
	sg_jwks_release(k);
	sg_jwks_file_free(f);
}

static void t_identity(void)
{
	ENSURE_SETUP();
	char id[512];
	SG_CHECK_OK(sg_jwt_identity(id, sizeof(id), "cluster.local", "default", "sleep"));
	SG_CHECK(strcmp(id, "spiffe://cluster.local/ns/default/sa/sleep") == 0);
	SG_CHECK_OK(sg_jwt_identity(id, sizeof(id), "corp@example.com", "n", "s"));
	SG_CHECK(strcmp(id, "spiffe://corp.example.com/ns/n/sa/s") == 0);
	SG_CHECK_RC(sg_jwt_identity(id, 20, "cluster.local", "default", "sleep"), SG_EINVAL);
}

/* ---- cost ---- */

static double per_op_us(struct timespec a, struct timespec b, int n)
{
	return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / n;
}

static void t_cost(void)
{
	ENSURE_SETUP();
	sg_jwks *k = std_set();
	sg_jwt_claims c;
	char es[4096], rs[4096];
	snprintf(es, sizeof(es), "%s", es_token(claims("\"istio-ca\"", NOW + 600, K8S)));
	snprintf(rs, sizeof(rs), "%s",
	         sign_json("RS256", rsa_key, "{\"alg\":\"RS256\",\"kid\":\"rsa1\"}",
	                   claims("\"istio-ca\"", NOW + 600, K8S)));
	int n = 300;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		SG_CHECK_OK(sg_jwt_verify(k, &opts, es, strlen(es), NOW, &c));
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ues = per_op_us(a, b, n);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		SG_CHECK_OK(sg_jwt_verify(k, &opts, rs, strlen(rs), NOW, &c));
	clock_gettime(CLOCK_MONOTONIC, &b);
	double urs = per_op_us(a, b, n);
	sg_jwks_release(k);

	sg_jwks_file *f = NULL;
	sg_jwt_verifier *v = NULL;
	SG_CHECK_OK(sg_jwks_file_new(&f, std_jwks_path()));
	SG_CHECK_OK(sg_jwt_verifier_new(&v, f, &opts));
	SG_CHECK_OK(sg_jwt_verifier_verify(v, es, strlen(es), NOW, &c));
	n = 20000;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		SG_CHECK_OK(sg_jwt_verifier_verify(v, es, strlen(es), NOW, &c));
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("cost: ES256 verify %.1f us, RS256 verify %.1f us, cache hit %.2f us\n", ues, urs, per_op_us(a, b, n));
	sg_jwt_verifier_free(v);
	sg_jwks_file_free(f);
}

/* The router's peek: the issuer of a well-formed token, nothing of a
 * malformed one, and no trust in anything (the signature is garbage). */
static void t_peek_issuer(void)
{
	char tok[512], h[64], p[256], iss[64];
	b64("{\"alg\":\"RS256\"}", 15, h, sizeof(h));
	b64("{\"iss\":\"kubernetes/serviceaccount\"}", 35, p, sizeof(p));
	snprintf(tok, sizeof(tok), "%s.%s.AAAA", h, p);
	SG_CHECK_OK(sg_jwt_peek_issuer(tok, strlen(tok), iss, sizeof(iss), NULL));
	SG_CHECK(strcmp(iss, "kubernetes/serviceaccount") == 0);
	bool sb = true;
	SG_CHECK_OK(sg_jwt_peek_issuer(tok, strlen(tok), iss, sizeof(iss), &sb));
	SG_CHECK(!sb);
	static const char secret[] = "{\"iss\":\"x\",\"kubernetes.io\":{\"secret\":{\"name\":\"s\",\"uid\":\"u\"}}}";
	b64(secret, strlen(secret), p, sizeof(p));
	char bound[512];
	snprintf(bound, sizeof(bound), "%s.%s.AAAA", h, p);
	SG_CHECK_OK(sg_jwt_peek_issuer(bound, strlen(bound), iss, sizeof(iss), &sb));
	SG_CHECK(sb && strcmp(iss, "x") == 0);
	/* an issuer that does not fit is refused, not cut */
	SG_CHECK_RC(sg_jwt_peek_issuer(tok, strlen(tok), iss, 8, NULL), SG_EAUTH);
	SG_CHECK(iss[0] == 0);
	static const char *const bad[] = {"", "abc", "a.b", "..", "%%%.%%%.x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		SG_CHECK_RC(sg_jwt_peek_issuer(bad[i], strlen(bad[i]), iss, sizeof(iss), NULL), SG_EAUTH);
	b64("[1]", 3, p, sizeof(p)); /* not an object */
	snprintf(tok, sizeof(tok), "%s.%s.x", h, p);
	SG_CHECK_RC(sg_jwt_peek_issuer(tok, strlen(tok), iss, sizeof(iss), NULL), SG_EAUTH);
	b64("{\"iss\":7}", 9, p, sizeof(p)); /* not a string */
	snprintf(tok, sizeof(tok), "%s.%s.x", h, p);
	SG_CHECK_RC(sg_jwt_peek_issuer(tok, strlen(tok), iss, sizeof(iss), NULL), SG_EAUTH);
	b64("{\"sub\":\"x\"}", 11, p, sizeof(p)); /* no issuer */
	snprintf(tok, sizeof(tok), "%s.%s.x", h, p);
	SG_CHECK_RC(sg_jwt_peek_issuer(tok, strlen(tok), iss, sizeof(iss), NULL), SG_EAUTH);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/sg_jwt_test.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	ec_key = EVP_EC_gen("P-256");
	ec_key2 = EVP_EC_gen("P-256");
	rsa_key = EVP_RSA_gen(2048);
	if (!ec_key || !ec_key2 || !rsa_key)
		abort();
}

static void t_teardown(void)
{
	ENSURE_SETUP();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	SG_CHECK(system(cmd) == 0);
	EVP_PKEY_free(ec_key);
	EVP_PKEY_free(ec_key2);
	EVP_PKEY_free(rsa_key);
}

SG_TEST_MAIN(SG_TEST(t_b64url), SG_TEST(t_jwks), SG_TEST(t_signature_at_infinity), SG_TEST(t_prepare_bound),
             SG_TEST(t_valid), SG_TEST(t_claims_refused), SG_TEST(t_structure_refused), SG_TEST(t_cache),
             SG_TEST(t_reload), SG_TEST(t_concurrent), SG_TEST(t_pushed), SG_TEST(t_pushed_concurrent),
             SG_TEST(t_dev_issuer), SG_TEST(t_identity), SG_TEST(t_peek_issuer), SG_TEST(t_cost), SG_TEST(t_teardown))
