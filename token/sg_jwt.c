/*
 * sg_jwt: verification of Kubernetes service-account tokens (RFC 7519 JWTs
 * in RFC 7515 §7.1 compact form), the verification cache, and the
 * development issuer. Key sets and signatures live in sg_jwks.c.
 *
 * A token is untrusted input and is handled in the order that keeps the
 * unauthenticated attack surface small: sizes are checked before anything
 * is decoded (16 KiB token, 1 KiB header, 8 KiB payload); the header (the
 * only JSON parsed before the signature) must name an asymmetric algorithm
 * from a fixed list, which is what defeats "alg":"none" and the HS256
 * key-confusion attack: there is no code path that uses a key as an HMAC
 * secret. The payload is parsed only after the signature verified, and
 * then checked like Kubernetes' own authenticator does (iss, aud, exp, nbf,
 * the kubernetes.io claims or the service-account subject).
 *
 * Every failure is SG_EAUTH with a message that says what was wrong; no
 * message quotes the token, and header values that are quoted (alg, kid)
 * are printable-ASCII-only and length-capped. jansson's parse errors are
 * cut before their "near '...'" part, which would quote the input.
 *
 * The cache: verifying ES256 costs ~100 µs and a pod presents the same
 * token for up to an hour, so verified claims are kept under SHA-256 of the
 * token (never the token) until min(exp, now + 5 min), in the sharded
 * expiring cache the TokenReview authenticator uses too (common/sg_cache.h).
 * The key-set generation is the entry's generation, so a JWKS reload makes
 * every older entry a miss without touching the cache; the entry's window
 * starts at nbf - leeway, so a clock that steps back before the token's nbf
 * does not get it from the cache either. Failures are not cached: a bad
 * token costs a verification every time, which is the price of never
 * caching a negative answer across a key rotation.
 *
 * No OpenSSL here: SHA-256 is sg_sha256, signatures are checked by
 * sg_jwks.c, and the development issuer's key (generation, PEM file, ES256
 * signing, kid) is signer/sg_tokenkey.h; this file builds only the JSON.
 * Names are checked by the Kubernetes naming rules in common/sg_names.h,
 * without the Kubernetes client.
 */
#include "sg_jwt.h"
#include "sg_cache.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_der.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_names.h"
#include "sg_spiffe.h"
#include "sg_tokenkey.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NUMERIC_DATE_MAX INT64_C(253402300799) /* 9999-12-31T23:59:59Z */
#define AUD_MAX 32

static const char *const default_audiences[] = {"istio-ca"};

/* json_decrefp (the cleanup helper) comes with jansson.h. */

/* ---- small validators ---- */

static bool is_printable(const char *s, size_t max)
{
	size_t n = 0;
	for (; *s; s++, n++)
		if (n >= max || *s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
			return false;
	return true;
}

/* Copies jansson's error text without the "near '...'" that quotes input. */
static void json_why(const json_error_t *e, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s", e->text);
	char *near = strstr(buf, " near ");
	if (near)
		*near = '\0';
}

static size_t b64_decoded_len(size_t n)
{
	return n / 4 * 3 + (n % 4 > 1 ? n % 4 - 1 : 0);
}

/* Decodes one part of the token, naming it in the message on failure. */
static int decode_part(const char *what, sg_slice s, uint8_t *buf, size_t cap, size_t *len)
{
	SG_ENSURE(b64_decoded_len(s.len) <= cap, SG_EAUTH, "token %s is larger than %zu bytes", what, cap);
	if (sg_b64url_decode((const char *)s.p, s.len, buf, cap, len) == SG_OK)
		return SG_OK;
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	SG_BAIL(SG_EAUTH, "token %s is not valid %s", what, why);
}

static int parse_object(const char *what, const uint8_t *buf, size_t len, json_t **out)
{
	json_error_t jerr;
	*out = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!*out) {
		char why[160];
		json_why(&jerr, why, sizeof(why));
		SG_BAIL(SG_EAUTH, "token %s is not valid JSON: %s", what, why);
	}
	SG_ENSURE(json_is_object(*out), SG_EAUTH, "token %s is not a JSON object", what);
	return SG_OK;
}

/* ---- header (RFC 7515 §4.1) ---- */

static int check_header(json_t *h, sg_jws_alg *alg, const char **kid)
{
	SG_ENSURE(!json_object_get(h, "crit"), SG_EAUTH, "token header has \"crit\"; no extension is understood");
	json_t *a = json_object_get(h, "alg");
	SG_ENSURE(json_is_string(a), SG_EAUTH, "token header has no alg string");
	const char *name = json_string_value(a);
	bool shown = is_printable(name, 16);
	/* "none" (RFC 7518 §3.6) in any case; HS* would use the key as an HMAC
	 * secret, the classic key-confusion attack. Neither reaches a key. */
	SG_ENSURE(strcasecmp(name, "none") != 0, SG_EAUTH, "token alg none is not accepted");
	SG_ENSURE(strncasecmp(name, "HS", 2) != 0, SG_EAUTH, "token alg %s is not accepted (HMAC)",
	          shown ? name : "HS*");
	SG_ENSURE(sg_jws_alg_parse(name, alg), SG_EAUTH, "token alg %s is not supported",
	          shown ? name : "(unprintable)");
	json_t *k = json_object_get(h, "kid");
	*kid = NULL;
	if (k) {
		SG_ENSURE(json_is_string(k) && is_printable(json_string_value(k), SG_JWT_KID_MAX), SG_EAUTH,
		          "token kid is not a printable string of at most %d bytes", SG_JWT_KID_MAX);
		*kid = json_string_value(k);
	}
	return SG_OK;
}

/* ---- claims (RFC 7519 §4.1) ---- */

/* A NumericDate: an integer, or a finite real (truncated), in 0..9999 AD. */
static int numeric_date(json_t *p, const char *name, bool required, int64_t *out)
{
	json_t *v = json_object_get(p, name);
	*out = INT64_MIN;
	if (!v) {
		SG_ENSURE(!required, SG_EAUTH, "token has no %s", name);
		return SG_OK;
	}
	SG_ENSURE(json_is_number(v), SG_EAUTH, "token %s is not a number", name);
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		SG_ENSURE(i >= 0 && i <= NUMERIC_DATE_MAX, SG_EAUTH, "token %s is out of range", name);
		*out = (int64_t)i;
	} else {
		double d = json_real_value(v);
		SG_ENSURE(isfinite(d) && d >= 0 && d <= (double)NUMERIC_DATE_MAX, SG_EAUTH, "token %s is out of range",
		          name);
		*out = (int64_t)d;
	}
	return SG_OK;
}

static void quote_list(char *buf, size_t cap, const char *const *v, size_t n)
{
	size_t off = 0;
	int w = snprintf(buf, cap, "[");
	off = w > 0 ? (size_t)w : 0;
	for (size_t i = 0; i < n && off < cap; i++) {
		const char *s = is_printable(v[i], 64) ? v[i] : "(unprintable)";
		w = snprintf(buf + off, cap - off, "%s%s", i ? ", " : "", s);
		off += w > 0 ? (size_t)w : 0;
	}
	if (off < cap)
		snprintf(buf + off, cap - off, "]");
}

static int check_audience(json_t *p, const sg_jwt_options *o)
{
	json_t *aud = json_object_get(p, "aud");
	SG_ENSURE(aud, SG_EAUTH, "token has no audience");
	const char *got[AUD_MAX];
	size_t n = 0;
	if (json_is_string(aud)) {
		got[n++] = json_string_value(aud);
	} else {
		SG_ENSURE(json_is_array(aud), SG_EAUTH, "token audience is neither a string nor an array");
		SG_ENSURE(json_array_size(aud) <= AUD_MAX, SG_EAUTH, "token has more than %d audiences", AUD_MAX);
		size_t i;
		json_t *v;
		json_array_foreach(aud, i, v)
		{
			SG_ENSURE(json_is_string(v), SG_EAUTH, "token audience %zu is not a string", i);
			got[n++] = json_string_value(v);
		}
	}
	const char *const *want = o->audiences ? o->audiences : default_audiences;
	size_t nwant = o->audiences ? o->n_audiences : 1;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < nwant; j++)
			if (strcmp(got[i], want[j]) == 0)
				return SG_OK;
	char have[200], need[200];
	quote_list(have, sizeof(have), got, n);
	if (nwant == 1)
		snprintf(need, sizeof(need), "%s", want[0]);
	else
		quote_list(need, sizeof(need), want, nwant);
	SG_BAIL(SG_EAUTH, "token audience %s does not include %s%s", have, nwant == 1 ? "" : "any of ", need);
}

static int string_member(json_t *obj, const char *name, const char **out)
{
	json_t *v = json_object_get(obj, name);
	*out = NULL;
	if (!v)
		return SG_OK;
	SG_ENSURE(json_is_string(v), SG_EAUTH, "token claim %s is not a string", name);
	*out = json_string_value(v);
	return SG_OK;
}

static void copy(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

/* sub = "system:serviceaccount:<ns>:<sa>", exactly four parts. */
static int parse_subject(const char *sub, char *ns, size_t nscap, char *sa, size_t sacap)
{
	static const char prefix[] = "system:serviceaccount:";
	const char *bad = "token subject is not system:serviceaccount:<namespace>:<name>";
	SG_ENSURE(strncmp(sub, prefix, sizeof(prefix) - 1) == 0, SG_EAUTH, "%s", bad);
	const char *rest = sub + sizeof(prefix) - 1;
	const char *colon = strchr(rest, ':');
	SG_ENSURE(colon && !strchr(colon + 1, ':'), SG_EAUTH, "%s", bad);
	size_t nlen = (size_t)(colon - rest);
	SG_ENSURE(nlen < nscap && strlen(colon + 1) < sacap, SG_EAUTH, "%s", bad);
	memcpy(ns, rest, nlen);
	ns[nlen] = '\0';
	copy(sa, sacap, colon + 1);
	return SG_OK;
}

/* kubernetes.io: {"namespace", "serviceaccount": {"name","uid"},
 * "pod": {"name","uid"}} as projected service-account tokens carry it. */
static int kubernetes_claims(json_t *k8s, sg_jwt_claims *c)
{
	SG_ENSURE(json_is_object(k8s), SG_EAUTH, "token kubernetes.io claim is not an object");
	const char *ns, *sa = NULL, *sa_uid = NULL, *pod = NULL, *uid = NULL;
	SG_TRY(string_member(k8s, "namespace", &ns));
	SG_ENSURE(ns, SG_EAUTH, "token kubernetes.io claims lack namespace");
	json_t *sao = json_object_get(k8s, "serviceaccount");
	SG_ENSURE(json_is_object(sao), SG_EAUTH, "token kubernetes.io claims lack serviceaccount");
	SG_TRY(string_member(sao, "name", &sa));
	SG_ENSURE(sa, SG_EAUTH, "token kubernetes.io claims lack serviceaccount.name");
	SG_TRY(string_member(sao, "uid", &sa_uid));
	SG_ENSURE(!sa_uid || sg_names_uid(sa_uid), SG_EAUTH, "token service account uid is malformed");
	json_t *po = json_object_get(k8s, "pod");
	if (po) {
		SG_ENSURE(json_is_object(po), SG_EAUTH, "token kubernetes.io.pod is not an object");
		SG_TRY(string_member(po, "name", &pod));
		SG_TRY(string_member(po, "uid", &uid));
		SG_ENSURE(!pod || sg_names_dns_subdomain(pod, strlen(pod)), SG_EAUTH,
		          "token pod name is not a DNS-1123 subdomain");
		SG_ENSURE(!uid || sg_names_uid(uid), SG_EAUTH, "token pod uid is malformed");
	}
	SG_ENSURE(strlen(ns) < sizeof(c->ns) && strlen(sa) < sizeof(c->sa), SG_EAUTH, "token names are too long");
	copy(c->ns, sizeof(c->ns), ns);
	copy(c->sa, sizeof(c->sa), sa);
	copy(c->sa_uid, sizeof(c->sa_uid), sa_uid);
	copy(c->pod_name, sizeof(c->pod_name), pod);
	copy(c->pod_uid, sizeof(c->pod_uid), uid);
	return SG_OK;
}

static int64_t leeway_of(const sg_jwt_options *o)
{
	return o->leeway == 0 ? SG_JWT_LEEWAY_DEFAULT : o->leeway < 0 ? 0 : o->leeway;
}

static int check_claims(json_t *p, const sg_jwt_options *o, int64_t now, sg_jwt_claims *c)
{
	const char *iss, *sub;
	SG_TRY(string_member(p, "iss", &iss));
	SG_ENSURE(iss, SG_EAUTH, "token has no issuer");
	SG_ENSURE(strcmp(iss, o->issuer) == 0, SG_EAUTH, "token issuer \"%.128s\" is not \"%s\"",
	          is_printable(iss, 128) ? iss : "(unprintable)", o->issuer);
	SG_TRY(check_audience(p, o));

	int64_t leeway = leeway_of(o);
	SG_TRY(numeric_date(p, "exp", true, &c->exp));
	SG_TRY(numeric_date(p, "nbf", false, &c->nbf));
	SG_TRY(numeric_date(p, "iat", false, &c->iat));
	SG_ENSURE(c->exp > now - leeway, SG_EAUTH, "token expired");
	SG_ENSURE(c->nbf == INT64_MIN || c->nbf <= now + leeway, SG_EAUTH, "token is not yet valid (nbf)");

	SG_TRY(string_member(p, "sub", &sub));
	json_t *k8s = json_object_get(p, "kubernetes.io");
	if (k8s) {
		SG_TRY(kubernetes_claims(k8s, c));
		if (sub) {
			char ns[64], sa[254];
			SG_TRY(parse_subject(sub, ns, sizeof(ns), sa, sizeof(sa)));
			SG_ENSURE(strcmp(ns, c->ns) == 0 && strcmp(sa, c->sa) == 0, SG_EAUTH,
			          "token subject does not match its kubernetes.io claims");
		}
	} else {
		SG_ENSURE(sub, SG_EAUTH, "token has no kubernetes.io claims and no service-account subject");
		SG_TRY(parse_subject(sub, c->ns, sizeof(c->ns), c->sa, sizeof(c->sa)));
	}
	SG_ENSURE(sg_names_dns_label(c->ns, strlen(c->ns), SG_NAMES_LABEL_MAX), SG_EAUTH,
	          "token namespace is not a DNS-1123 label");
	SG_ENSURE(sg_names_dns_subdomain(c->sa, strlen(c->sa)), SG_EAUTH,
	          "token service account is not a DNS-1123 subdomain");
	return SG_OK;
}

/* ---- the token (RFC 7515 §7.1, §5.2) ---- */

/* The compact serialization's three parts: exactly two dots, within the
 * token and payload limits (tighter limits before authentication). */
static int split_token(const char *token, size_t len, sg_slice *hs, sg_slice *ps, sg_slice *ss)
{
	SG_ENSURE(token && len > 0, SG_EAUTH, "token is empty");
	SG_ENSURE(len <= SG_JWT_TOKEN_MAX, SG_EAUTH, "token is %zu bytes, more than %d", len, SG_JWT_TOKEN_MAX);
	size_t dots = 0;
	for (size_t i = 0; i < len; i++)
		dots += token[i] == '.';
	SG_ENSURE(dots == 2, SG_EAUTH, "token has %zu parts, a compact JWS has 3", dots + 1);
	sg_reader r = sg_reader_of((sg_slice){(const uint8_t *)token, len});
	sg_slice dot;
	sg_reader_until(&r, '.', hs);
	SG_TRY(sg_reader_bytes(&r, 1, &dot));
	sg_reader_until(&r, '.', ps);
	SG_TRY(sg_reader_bytes(&r, 1, &dot));
	sg_reader_until(&r, '.', ss);
	SG_ENSURE(sg_reader_done(&r), SG_EAUTH, "token has trailing data");
	SG_ENSURE(b64_decoded_len(ps->len) <= SG_JWT_PAYLOAD_MAX, SG_EAUTH, "token payload is larger than %d bytes",
	          SG_JWT_PAYLOAD_MAX);
	return SG_OK;
}

/* The payload part, decoded (at most SG_JWT_PAYLOAD_MAX bytes) and parsed
 * into *out (the caller releases it). */
static int load_payload(sg_slice ps, json_t **out)
{
	uint8_t *pbuf SG_AUTOFREE = malloc(SG_JWT_PAYLOAD_MAX);
	size_t plen;
	SG_ENSURE(pbuf, SG_EINTERNAL, "out of memory");
	SG_TRY(decode_part("payload", ps, pbuf, SG_JWT_PAYLOAD_MAX, &plen));
	return parse_object("payload", pbuf, plen, out);
}

int sg_jwt_verify(const sg_jwks *keys, const sg_jwt_options *o, const char *token, size_t len, int64_t now,
                  sg_jwt_claims *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(o && o->issuer, SG_EINVAL, "no token issuer configured");
	sg_slice hs, ps, ss;
	SG_TRY(split_token(token, len, &hs, &ps, &ss));

	uint8_t hbuf[SG_JWT_HEADER_MAX], sig[SG_JWT_SIG_MAX];
	size_t hlen, siglen;
	SG_TRY(decode_part("header", hs, hbuf, sizeof(hbuf), &hlen));
	json_t *header SG_CLEANUP(json_decrefp) = NULL;
	SG_TRY(parse_object("header", hbuf, hlen, &header));
	sg_jws_alg alg;
	const char *kid;
	SG_TRY(check_header(header, &alg, &kid));
	SG_TRY(decode_part("signature", ss, sig, sizeof(sig), &siglen));
	/* RFC 7515 §5.2: the signing input is the encoded header.payload. */
	SG_TRY(sg_jwks_verify(keys, alg, kid, (const uint8_t *)token, hs.len + 1 + ps.len, sig, siglen));

	json_t *payload SG_CLEANUP(json_decrefp) = NULL;
	SG_TRY(load_payload(ps, &payload));
	sg_jwt_claims c;
	memset(&c, 0, sizeof(c));
	SG_TRY(check_claims(payload, o, now, &c));
	*out = c;
	return SG_OK;
}

/* ---- routing ---- */

/* The payload is decoded and parsed before any signature check here, which
 * sg_jwt_verify never does: that is why the answer may only choose a
 * verifier. The limits are sg_jwt_verify's, so nothing larger is parsed. */
int sg_jwt_peek_issuer(const char *token, size_t len, char *iss, size_t cap, bool *secret_bound)
{
	bool ignored;
	bool *sb = secret_bound ? secret_bound : &ignored;
	*sb = false;
	SG_ENSURE(cap > 0, SG_EINVAL, "no room for the issuer");
	iss[0] = 0;
	sg_slice hs, ps, ss;
	SG_TRY(split_token(token, len, &hs, &ps, &ss));
	json_t *payload SG_CLEANUP(json_decrefp) = NULL;
	SG_TRY(load_payload(ps, &payload));
	const char *v;
	SG_TRY(string_member(payload, "iss", &v));
	SG_ENSURE(v && is_printable(v, cap - 1), SG_EAUTH, "token has no printable issuer of at most %zu bytes",
	          cap - 1);
	snprintf(iss, cap, "%s", v);
	json_t *k8s = json_object_get(payload, "kubernetes.io");
	*sb = json_is_object(k8s) && json_object_get(k8s, "secret");
	return SG_OK;
}

/* ---- identity ---- */

int sg_jwt_identity(char *out, size_t cap, const char *trust_domain, const char *ns, const char *sa)
{
	SG_ENSURE(trust_domain && *trust_domain, SG_EINVAL, "no trust domain");
	char td[SG_TRUST_DOMAIN_MAX + 1]; /* istio-csr: the trust domain's '@' becomes '.' */
	SG_TRY(sg_trust_domain_normalize(trust_domain, td, sizeof(td)));
	int n = snprintf(out, cap, "spiffe://%s/ns/%s/sa/%s", td, ns, sa);
	SG_ENSURE(n > 0 && (size_t)n < cap, SG_EINVAL, "identity does not fit in %zu bytes", cap);
	return SG_OK;
}

/* ---- the verifier and its cache ---- */

_Static_assert(sizeof(sg_jwt_claims) <= SG_CACHE_VALUE_MAX, "verified claims fit in a cache value");

struct sg_jwt_verifier {
	sg_jwks_file *keys;
	sg_jwt_options o;
	int64_t leeway; /* o.leeway resolved */
	char *issuer;
	char **aud;
	sg_cache *cache; /* sg_jwt_claims under SHA-256 of the token */
};

void sg_jwt_verifier_free(sg_jwt_verifier *v)
{
	if (!v)
		return;
	sg_cache_free(v->cache);
	for (size_t i = 0; v->aud && i < v->o.n_audiences; i++)
		free(v->aud[i]);
	free(v->aud);
	free(v->issuer);
	free(v);
}

int sg_jwt_verifier_new(sg_jwt_verifier **out, sg_jwks_file *keys, const sg_jwt_options *o)
{
	*out = NULL;
	SG_ENSURE(keys && o && o->issuer && *o->issuer, SG_EINVAL, "JWT verifier needs a JWKS and an issuer");
	SG_ENSURE(!o->audiences || (o->n_audiences > 0 && o->n_audiences <= AUD_MAX), SG_EINVAL,
	          "JWT verifier needs 1..%d audiences", AUD_MAX);
	SG_ENSURE(o->cache_entries <= SG_CACHE_ENTRIES_MAX, SG_EINVAL, "JWT verifier cache_entries is above %u",
	          SG_CACHE_ENTRIES_MAX);
	sg_jwt_verifier *v = calloc(1, sizeof(*v));
	SG_ENSURE(v, SG_EINTERNAL, "out of memory");
	v->keys = keys;
	v->o = *o;
	v->leeway = leeway_of(o);
	const char *const *aud = o->audiences ? o->audiences : default_audiences;
	v->o.n_audiences = o->audiences ? o->n_audiences : 1;
	v->issuer = strdup(o->issuer);
	v->aud = calloc(v->o.n_audiences, sizeof(char *));
	bool ok = v->issuer && v->aud;
	for (size_t i = 0; ok && i < v->o.n_audiences; i++)
		ok = (v->aud[i] = strdup(aud[i])) != NULL;
	int rc = ok ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK)
		rc = sg_cache_new(&v->cache, o->cache_entries ? o->cache_entries : SG_JWT_CACHE_DEFAULT,
		                  sizeof(sg_jwt_claims));
	if (rc != SG_OK) {
		sg_jwt_verifier_free(v);
		return rc;
	}
	v->o.issuer = v->issuer;
	v->o.audiences = (const char *const *)v->aud;
	*out = v;
	return SG_OK;
}

/* Kept until min(exp, now + 5 min); returned from nbf - leeway on, the
 * same test sg_jwt_verify applies to nbf. */
static void remember(sg_jwt_verifier *v, const uint8_t h[32], uint64_t gen, int64_t now, const sg_jwt_claims *c)
{
	int64_t until = c->exp < now + SG_JWT_CACHE_TTL_MAX ? c->exp : now + SG_JWT_CACHE_TTL_MAX;
	int64_t from = c->nbf == INT64_MIN ? SG_CACHE_FROM_ANY : c->nbf - v->leeway;
	(void)sg_cache_put(v->cache, h, gen, now, from, until, c); /* not kept when until <= now */
}

int sg_jwt_verifier_verify(sg_jwt_verifier *v, const char *token, size_t len, int64_t now, sg_jwt_claims *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(token && len > 0, SG_EAUTH, "token is empty");
	SG_ENSURE(len <= SG_JWT_TOKEN_MAX, SG_EAUTH, "token is %zu bytes, more than %d", len, SG_JWT_TOKEN_MAX);
	uint8_t h[32];
	SG_TRY(sg_sha256(token, len, h));
	if (sg_cache_get(v->cache, h, sg_jwks_file_poll(v->keys), now, out))
		return SG_OK;
	sg_jwks *k = sg_jwks_file_get(v->keys);
	int rc = sg_jwt_verify(k, &v->o, token, len, now, out);
	if (rc == SG_OK)
		remember(v, h, sg_jwks_generation(k), now, out);
	sg_jwks_release(k);
	return rc;
}

void sg_jwt_verifier_stats(const sg_jwt_verifier *v, uint64_t *hits, uint64_t *misses)
{
	sg_cache_stats st;
	sg_cache_stats_get(v->cache, &st);
	*hits = st.hits;
	*misses = st.misses;
}

/* ---- the development issuer ---- */

static void tokenkey_freep(sg_tokenkey **k)
{
	sg_tokenkey_free(*k);
}

int sg_jwt_dev_issuer_create(const char *key_path, const char *jwks_path, const char *kid_hint)
{
	SG_ENSURE(key_path && jwks_path, SG_EINVAL, "dev issuer needs a key path and a JWKS path");
	SG_ENSURE(!kid_hint || (*kid_hint && is_printable(kid_hint, SG_JWT_KID_MAX)), SG_EINVAL,
	          "kid must be printable and at most %d bytes", SG_JWT_KID_MAX);
	sg_tokenkey *k SG_CLEANUP(tokenkey_freep) = NULL;
	SG_TRY(sg_tokenkey_generate(&k));
	sg_tokenkey_jwk pub;
	SG_TRY(sg_tokenkey_jwk_of(k, &pub));
	const char *kid = kid_hint ? kid_hint : pub.kid;
	SG_TRY(sg_tokenkey_save(k, key_path));

	json_t *jwks SG_CLEANUP(json_decrefp) =
	    json_pack("{s:[{s:s, s:s, s:s, s:s, s:s, s:s, s:s}]}", "keys", "use", "sig", "kty", "EC", "kid", kid, "crv",
	              "P-256", "alg", "ES256", "x", pub.x, "y", pub.y);
	SG_ENSURE(jwks, SG_EINTERNAL, "cannot build the JWKS");
	char *text SG_AUTOFREE = json_dumps(jwks, JSON_INDENT(2));
	SG_ENSURE(text, SG_EINTERNAL, "out of memory");
	size_t tlen = strlen(text);
	char *withnl SG_AUTOFREE = malloc(tlen + 2);
	SG_ENSURE(withnl, SG_EINTERNAL, "out of memory");
	memcpy(withnl, text, tlen);
	withnl[tlen] = '\n';
	return sg_file_write_atomic(jwks_path, withnl, tlen + 1, 0644);
}

static json_t *claims_json(const sg_jwt_mint_options *o, int64_t now)
{
	const char *const *aud = o->audiences ? o->audiences : default_audiences;
	size_t naud = o->audiences ? o->n_audiences : 1;
	char sub[600];
	snprintf(sub, sizeof(sub), "system:serviceaccount:%s:%s", o->ns, o->sa);
	json_t *audj = json_array();
	for (size_t i = 0; audj && i < naud; i++)
		json_array_append_new(audj, json_string(aud[i]));
	json_t *sa = json_pack("{s:s}", "name", o->sa);
	if (sa && o->sa_uid)
		json_object_set_new(sa, "uid", json_string(o->sa_uid));
	json_t *k8s = json_pack("{s:s, s:o}", "namespace", o->ns, "serviceaccount", sa);
	if (k8s && o->pod_name) {
		json_t *pod = json_pack("{s:s}", "name", o->pod_name);
		if (pod && o->pod_uid)
			json_object_set_new(pod, "uid", json_string(o->pod_uid));
		json_object_set_new(k8s, "pod", pod);
	}
	return json_pack("{s:s, s:s, s:o, s:I, s:I, s:I, s:o}", "iss", o->issuer, "sub", sub, "aud", audj, "exp",
	                 (json_int_t)(now + o->ttl), "iat", (json_int_t)now, "nbf", (json_int_t)now, "kubernetes.io",
	                 k8s);
}

/* base64url(JSON) appended at out + *off. */
static int append_part(char *out, size_t cap, size_t *off, const char *json)
{
	SG_TRY(sg_b64url_encode((const uint8_t *)json, strlen(json), out + *off, cap - *off));
	*off += strlen(out + *off);
	return SG_OK;
}

int sg_jwt_mint(const char *key_path, const sg_jwt_mint_options *o, char **token)
{
	*token = NULL;
	SG_ENSURE(o && o->issuer && o->ns && o->sa, SG_EINVAL,
	          "mint needs an issuer, a namespace and a service account");
	SG_ENSURE(sg_names_dns_label(o->ns, strlen(o->ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "namespace is not a DNS-1123 label");
	SG_ENSURE(sg_names_dns_subdomain(o->sa, strlen(o->sa)), SG_EINVAL,
	          "service account is not a DNS-1123 subdomain");
	SG_ENSURE(!o->pod_name || sg_names_dns_subdomain(o->pod_name, strlen(o->pod_name)), SG_EINVAL,
	          "pod name is not a DNS-1123 subdomain");
	SG_ENSURE(!o->pod_uid || sg_names_uid(o->pod_uid), SG_EINVAL, "pod uid is malformed");
	SG_ENSURE(!o->sa_uid || sg_names_uid(o->sa_uid), SG_EINVAL, "service account uid is malformed");
	SG_ENSURE(!o->audiences || (o->n_audiences > 0 && o->n_audiences <= AUD_MAX), SG_EINVAL, "1..%d audiences",
	          AUD_MAX);
	SG_ENSURE(o->ttl > 0 && o->ttl <= 366 * 86400, SG_EINVAL, "token ttl must be 1 s .. 1 year");
	SG_ENSURE(!o->kid || is_printable(o->kid, SG_JWT_KID_MAX), SG_EINVAL, "kid is not printable");
	int64_t now = o->now ? o->now : sg_wall_seconds();

	sg_tokenkey *k SG_CLEANUP(tokenkey_freep) = NULL;
	SG_TRY(sg_tokenkey_load(&k, key_path));
	char kid[SG_JWT_KID_MAX + 1];
	if (o->kid) {
		snprintf(kid, sizeof(kid), "%s", o->kid);
	} else {
		sg_tokenkey_jwk pub;
		SG_TRY(sg_tokenkey_jwk_of(k, &pub));
		snprintf(kid, sizeof(kid), "%s", pub.kid);
	}

	json_t *hj SG_CLEANUP(json_decrefp) = json_pack("{s:s, s:s}", "alg", "ES256", "kid", kid);
	json_t *pj SG_CLEANUP(json_decrefp) = claims_json(o, now);
	SG_ENSURE(hj && pj, SG_EINTERNAL, "cannot build the token");
	char *htext SG_AUTOFREE = json_dumps(hj, JSON_COMPACT);
	char *ptext SG_AUTOFREE = json_dumps(pj, JSON_COMPACT);
	SG_ENSURE(htext && ptext, SG_EINTERNAL, "out of memory");
	size_t cap = (strlen(htext) + strlen(ptext)) / 3 * 4 + 8 + 90;
	SG_ENSURE(cap <= SG_JWT_TOKEN_MAX, SG_EINVAL, "token would exceed %d bytes", SG_JWT_TOKEN_MAX);
	char *out SG_AUTOFREE = malloc(cap);
	SG_ENSURE(out, SG_EINTERNAL, "out of memory");
	size_t off = 0;
	SG_TRY(append_part(out, cap, &off, htext));
	out[off++] = '.';
	SG_TRY(append_part(out, cap, &off, ptext));
	uint8_t rs[SG_TOKENKEY_SIG_LEN];
	SG_TRY(sg_tokenkey_sign(k, out, off, rs));
	out[off++] = '.';
	SG_TRY(sg_b64url_encode(rs, sizeof(rs), out + off, cap - off));
	*token = SG_MOVE(out);
	return SG_OK;
}
