/*
 * sg_jwt: Kubernetes service-account tokens (RFC 7519 JWTs in RFC 7515
 * compact JWS form) verified against a JSON Web Key Set (RFC 7517), the
 * format the API server serves at /openid/v1/jwks; plus the development
 * issuer that lets the appliance run without Kubernetes.
 *
 * Pieces, bottom up:
 *   base64url     RFC 4648 §5 without padding, strict alphabet, canonical.
 *   sg_jwks       an immutable, refcounted key set; OpenSSL keys are built
 *                 once when it is parsed.
 *   sg_jwks_file  the key source a verifier reads: a JWKS file that
 *                 reloads itself when it changes (checked at most once per
 *                 second; a broken new file keeps the old keys), or a
 *                 pushed source whose keys a writer replaces (the API
 *                 server's JWKS, sg_jwks_kube.h).
 *   sg_jwt_verify the stateless check of one token against one key set.
 *   sg_jwt_verifier  sg_jwt_verify behind a bounded verification cache keyed
 *                 by SHA-256 of the token; a JWKS reload invalidates it.
 *   sg_jwt_mint / sg_jwt_dev_issuer_create   the development issuer.
 *
 * Every token failure is SG_EAUTH with a specific message that never
 * contains the token (nor any part of it other than short, sanitized header
 * values such as alg and kid). Malformed key sets are SG_EINVAL.
 *
 * Thread safety: sg_jwks is immutable and may be shared; sg_jwks_file and
 * sg_jwt_verifier may be used by any number of threads at once.
 */
#ifndef SG_JWT_H
#define SG_JWT_H

#include "sg_base64.h"
#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits (checked before anything is decoded or allocated). */
#define SG_JWT_TOKEN_MAX 16384  /* whole compact token, bytes */
#define SG_JWT_HEADER_MAX 1024  /* decoded header JSON */
#define SG_JWT_PAYLOAD_MAX 8192 /* decoded payload JSON */
#define SG_JWT_SIG_MAX 1024     /* decoded signature (RSA-8192) */
#define SG_JWKS_MAX (1u << 20)  /* JWKS document, bytes */
#define SG_JWKS_KEYS_MAX 64     /* entries in "keys" */
#define SG_JWKS_PREPARED_MAX 4  /* P-256 keys a set in service precomputes for */
#define SG_JWT_KID_MAX 256
#define SG_JWT_LEEWAY_DEFAULT 60
#define SG_JWT_CACHE_DEFAULT 16384
#define SG_JWT_CACHE_TTL_MAX 300 /* a cached verification lives at most 5 min */

/* base64url: sg_b64url_decode and sg_b64url_encode (sg_base64.h). */

/* ---- key sets ---- */

typedef struct sg_jwks sg_jwks;

/* Parses a JWKS document (at most SG_JWKS_MAX bytes, at most
 * SG_JWKS_KEYS_MAX keys, duplicate JSON members refused). Supported: "RSA"
 * keys of at least 2048 bits (RS256/384/512, PS256/384/512) and "EC" keys on
 * P-256/P-384/P-521 (ES256/384/512). Keys whose "use" is not "sig", whose
 * "kty" or "alg" is unknown, or whose "key_ops" lacks "verify" are ignored
 * and counted; a malformed or weak key of a supported type fails the whole
 * set (SG_EINVAL), and so does a set with no usable key. On success *out
 * holds one reference; release it with sg_jwks_release. */
SG_API int sg_jwks_parse(sg_jwks **out, const void *json, size_t len) SG_MUST_CHECK;
/* Adds a reference; returns k. */
SG_API sg_jwks *sg_jwks_retain(sg_jwks *k);
/* Drops a reference; the last one frees. Accepts NULL. */
SG_API void sg_jwks_release(sg_jwks *k);
/* Usable keys, and entries ignored while parsing. */
SG_API size_t sg_jwks_count(const sg_jwks *k);
SG_API size_t sg_jwks_ignored(const sg_jwks *k);
/* A process-unique, increasing number identifying this parsed set. */
SG_API uint64_t sg_jwks_generation(const sg_jwks *k);
/* Readies a set for service: its first SG_JWKS_PREPARED_MAX P-256 keys get
 * their point's multiples computed (sg_jwk_prepare: ~15 ms and ~150 KiB
 * each), which takes about 40 % off each ES256 verification with them.
 * The bound keeps a set of 64 keys from costing a second and 10 MiB; API
 * servers publish one or two. A key that cannot be prepared (OpenSSL out
 * of memory) verifies as before. Returns how many keys are prepared. Call
 * it before the set is shared; the file source does, for every set it
 * loads, and so does the API-server discovery (ra/sg_jwks_kube.c). */
SG_API size_t sg_jwks_prepare(sg_jwks *k);

/* JWS algorithms we accept (RFC 7518 §3.1); everything else is refused. */
typedef enum sg_jws_alg {
	SG_JWS_RS256,
	SG_JWS_RS384,
	SG_JWS_RS512,
	SG_JWS_PS256,
	SG_JWS_PS384,
	SG_JWS_PS512,
	SG_JWS_ES256,
	SG_JWS_ES384,
	SG_JWS_ES512,
	SG_JWS_ALG_COUNT,
} sg_jws_alg;

/* Maps a JOSE "alg" name to the enum; false for anything not accepted. */
SG_API bool sg_jws_alg_parse(const char *name, sg_jws_alg *out);
SG_API const char *sg_jws_alg_name(sg_jws_alg alg);

/* Verifies a JWS signature over msg (the ASCII "header.payload") with the
 * key named kid (NULL: every key usable with alg is tried). The key's type
 * and curve must match alg, and its own "alg", when it has one, must equal
 * alg. ECDSA signatures are the raw r||s of RFC 7518 §3.4. SG_EAUTH with
 * a specific message ("token kid ... is not in the JWKS", "token alg ES256
 * does not match key ...", "token signature does not verify"). */
SG_API int sg_jwks_verify(const sg_jwks *k, sg_jws_alg alg, const char *kid, const uint8_t *msg, size_t msg_len,
                          const uint8_t *sig, size_t sig_len) SG_MUST_CHECK;

/* ---- key sources: a JWKS file that follows its changes, or pushed keys ---- */

typedef struct sg_jwks_file sg_jwks_file;

/* Loads path (which must hold a valid JWKS: SG_ENOTFOUND / SG_EINVAL
 * otherwise). Caller frees with sg_jwks_file_free; the path is copied. */
SG_API int sg_jwks_file_new(sg_jwks_file **out, const char *path) SG_MUST_CHECK;
/* The current key set, with a reference the caller drops with
 * sg_jwks_release. For a file source, at most once per second (a monotonic timestamp checked
 * with one atomic load) it stats the file and, when its inode, size or
 * mtime changed, reloads it; a file that fails to load keeps the previous
 * keys and logs a warning (once per distinct broken file). Never NULL. */
SG_API sg_jwks *sg_jwks_file_get(sg_jwks_file *f);
/* The generation of the current key set after the same once-per-second
 * check as sg_jwks_file_get, without taking a reference: the cheap probe
 * a cache uses to notice a reload (or a push). */
SG_API uint64_t sg_jwks_file_poll(sg_jwks_file *f);
/* Checks the file now, ignoring the once-per-second limit (for SIGHUP and
 * tests). SG_OK when unchanged or reloaded; the load error when the file
 * changed but is broken (the old keys stay in use). */
SG_API int sg_jwks_file_refresh(sg_jwks_file *f) SG_MUST_CHECK;
/* Accepts NULL. No other thread may be using f. */
SG_API void sg_jwks_file_free(sg_jwks_file *f);

/* A pushed source: the same type and the same reader calls (get, poll and
 * the verifier work unchanged), but its keys change only through
 * sg_jwks_file_set; it looks at no file, and sg_jwks_file_refresh is a
 * no-op (SG_OK). The source takes its own reference to initial (the caller
 * keeps and releases its own). SG_EINVAL when initial is NULL. Caller frees
 * with sg_jwks_file_free. */
SG_API int sg_jwks_file_new_pushed(sg_jwks_file **out, sg_jwks *initial) SG_MUST_CHECK;
/* Makes keys the current set of a pushed source (the source takes its own
 * reference). Readers see either the old or the new set; the generation
 * becomes keys' own, so a verifier's cached verifications under the old
 * set become misses. Pushing the set that is already current changes
 * nothing. Writers are serialised; any number of readers may run at once.
 * SG_EINVAL for a file source or a NULL set. */
SG_API int sg_jwks_file_set(sg_jwks_file *f, sg_jwks *keys) SG_MUST_CHECK;
/* Whether f is a pushed source. */
SG_API bool sg_jwks_file_is_pushed(const sg_jwks_file *f);

/* ---- verification ---- */

/* What a verified token says about its caller (all strings NUL-terminated
 * and validated: namespace a DNS-1123 label, names DNS-1123 subdomains). */
typedef struct sg_jwt_claims {
	char ns[64];
	char sa[254];
	char sa_uid[64];    /* "" when absent */
	char pod_name[254]; /* "" when absent */
	char pod_uid[64];   /* "" when absent */
	int64_t exp;
	int64_t nbf; /* INT64_MIN when absent */
	int64_t iat; /* INT64_MIN when absent */
} sg_jwt_claims;

typedef struct sg_jwt_options {
	const char *issuer;           /* required: "iss" must equal it */
	const char *const *audiences; /* "aud" must contain one; NULL: {"istio-ca"} */
	size_t n_audiences;
	int leeway;           /* seconds; 0: SG_JWT_LEEWAY_DEFAULT; < 0: none */
	size_t cache_entries; /* sg_jwt_verifier only; 0: SG_JWT_CACHE_DEFAULT; rounded down to a
	                         multiple of 256, at least 256, at most 1 << 22 (sg_cache.h) */
} sg_jwt_options;

/* Verifies a compact JWS token against keys and the options at wall-clock
 * time now, and extracts the Kubernetes claims into *out. Order: size
 * limits, structure, header (alg allow-list: RS*, PS*, ES*; "none", HS*
 * and "crit" refused), key selection by kid (or every key of the alg's
 * type when there is no kid), signature, then the payload (parsed only
 * after the signature verified): iss, aud, exp, nbf, iat, and
 * kubernetes.io.{namespace,serviceaccount.name,pod} or else
 * sub = system:serviceaccount:<ns>:<sa>. SG_EAUTH on any failure. */
SG_API int sg_jwt_verify(const sg_jwks *keys, const sg_jwt_options *o, const char *token, size_t len, int64_t now,
                         sg_jwt_claims *out) SG_MUST_CHECK;

/* Reads the "iss" of a compact JWS WITHOUT verifying anything, into iss
 * (capacity cap, NUL-terminated), and whether the token is bound to a
 * Secret (a "kubernetes.io" object with a "secret" member) into
 * *secret_bound (when not NULL). For routing only (which authenticator
 * should judge a token), never for an answer: whoever is chosen verifies
 * the whole token. The same structure and size limits as sg_jwt_verify
 * apply. SG_EAUTH when the token is not three parts, its payload is not a
 * JSON object, or it has no printable "iss" string that fits; iss is ""
 * and *secret_bound false then. */
SG_API int sg_jwt_peek_issuer(const char *token, size_t len, char *iss, size_t cap, bool *secret_bound) SG_MUST_CHECK;

typedef struct sg_jwt_verifier sg_jwt_verifier;

/* A verifier over a key source, file or pushed (borrowed: it must outlive
 * the verifier), with a cache of cache_entries verified tokens (SG_EINVAL
 * above 1 << 22). The option strings are copied. Caller frees with
 * sg_jwt_verifier_free. */
SG_API int sg_jwt_verifier_new(sg_jwt_verifier **out, sg_jwks_file *keys, const sg_jwt_options *o) SG_MUST_CHECK;
SG_API void sg_jwt_verifier_free(sg_jwt_verifier *v);
/* sg_jwt_verify with the cache (common/sg_cache.h): a hit (same SHA-256,
 * same key-set generation, nbf - leeway <= now < min(exp, time cached +
 * 5 min)) returns the stored claims at the cost of a hash and a lookup.
 * Failures are not cached. */
SG_API int sg_jwt_verifier_verify(sg_jwt_verifier *v, const char *token, size_t len, int64_t now,
                                  sg_jwt_claims *out) SG_MUST_CHECK;
SG_API void sg_jwt_verifier_stats(const sg_jwt_verifier *v, uint64_t *hits, uint64_t *misses);

/* Writes spiffe://<trust-domain>/ns/<ns>/sa/<sa> into out ('@' in the trust
 * domain becomes '.', as istio-csr does). SG_EINVAL when it does not fit. */
SG_API int sg_jwt_identity(char *out, size_t cap, const char *trust_domain, const char *ns,
                           const char *sa) SG_MUST_CHECK;

/* ---- development issuer ---- */

/* Generates an EC P-256 signing key, written as PKCS#8 PEM to key_path
 * (mode 0600) and the matching one-key JWKS to jwks_path (mode 0644), each
 * written to a temporary file and renamed into place (existing files are
 * replaced). The kid is kid_hint, or when NULL the Kubernetes-style
 * base64url(SHA-256(SPKI DER)), which sg_jwt_mint derives by itself. */
SG_API int sg_jwt_dev_issuer_create(const char *key_path, const char *jwks_path, const char *kid_hint) SG_MUST_CHECK;

typedef struct sg_jwt_mint_options {
	const char *issuer;           /* required */
	const char *const *audiences; /* NULL: {"istio-ca"} */
	size_t n_audiences;
	const char *ns;       /* required */
	const char *sa;       /* required */
	const char *sa_uid;   /* optional */
	const char *pod_name; /* optional */
	const char *pod_uid;  /* optional */
	const char *kid;      /* NULL: derived from the key (see above) */
	int64_t ttl;          /* seconds, > 0 */
	int64_t now;          /* 0: the wall clock */
} sg_jwt_mint_options;

/* Mints an ES256 token with Kubernetes-shaped claims (iss, sub, aud array,
 * exp, iat, nbf, kubernetes.io{namespace, serviceaccount, pod}) signed by
 * the P-256 key in key_path. *token is NUL-terminated; caller frees it with
 * free() (it is a credential: wipe it first if it was kept long). */
SG_API int sg_jwt_mint(const char *key_path, const sg_jwt_mint_options *o, char **token) SG_MUST_CHECK;

#endif
