/*
 * lg_common: what the load tools share (loadgen, herd): the loopback-only
 * target, distinct istio-agent-shaped CSRs made before the clock starts,
 * the cheap check of an issued leaf (no X.509 parsing: the client shares
 * the CPUs with the server it measures), the bearer token read as a
 * secret, and a pool of tokens, one per simulated pod.
 *
 * Ownership: lg_items_make allocates the array and every body (free both
 * with lg_items_free, also after a failure); lg_read_file's buffer is the
 * caller's to free; lg_bearer's secret is the caller's (sg_secret_free);
 * lg_tokens_load's pool is the caller's (lg_tokens_free, which wipes it),
 * and every string it hands out is borrowed from it.
 * Errors follow sg_error.h.
 */
#ifndef LG_COMMON_H
#define LG_COMMON_H

#include "sg_error.h"
#include "sg_secret.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lg_kind { LG_GRPC, LG_HTTP } lg_kind;

typedef struct lg_target {
	lg_kind kind;
	char host[64]; /* as it is connected to: "127.0.0.1", "[::1]" */
	unsigned port;
} lg_target;

/* Parses "grpc://HOST:PORT" or "http://HOST:PORT[/]" and refuses (SG_EINVAL)
 * any host that is not loopback: 127.0.0.0/8, ::1, or "localhost" (mapped
 * to 127.0.0.1, never resolved). */
int lg_parse_target(const char *s, lg_target *t) SG_MUST_CHECK;

#define LG_SPKI_MAX 320 /* an RSA-2048 SPKI is 294 bytes, P-256's 91 */

/* One request's material: what is sent, and the SPKI bytes and URI the
 * issued certificate must contain. */
typedef struct lg_item {
	uint8_t *body; /* serialized IstioCertificateRequest, or the JSON text */
	size_t body_len;
	uint8_t spki[LG_SPKI_MAX];
	size_t spki_len;
	const char *identity; /* the CSR's URI SAN; borrowed from the lg_idset */
} lg_item;

/* The identities of a set of CSRs: CSR i carries names[of[i % n_of]], or
 * names[0] when of is NULL. Borrowed: must outlive the items. */
typedef struct lg_idset {
	const char *const *names; /* distinct spiffe:// URIs */
	size_t n_names;
	const uint32_t *of;
	size_t n_of;
} lg_idset;

/* n distinct CSRs (a new P-256 key each; subject O="", one critical URI SAN
 * `identity`, ECDSA-SHA256), made on `threads` threads, as request bodies
 * for `kind` (gRPC: IstioCertificateRequest asking for ttl seconds; HTTP:
 * cfssl's sign JSON). *out is set even on failure (free it). */
int lg_items_make(lg_item **out, size_t n, unsigned threads, lg_kind kind, const char *identity,
                  int64_t ttl) SG_MUST_CHECK;
/* The same with an identity per CSR (a CSR template is made for each
 * distinct name, so names should be few: LG_TOKENS_IDENTITIES_MAX). */
int lg_items_make_ids(lg_item **out, size_t n, unsigned threads, lg_kind kind, const lg_idset *ids,
                      int64_t ttl) SG_MUST_CHECK;
/* The CSRs' keys: a new P-256 key per CSR (the default), or RSA-2048,
 * istio-agent's default, from a set of rsa_keys keys made for the call
 * (a 2048-bit key takes 0.1-0.2 s): the k-th CSR naming an identity uses
 * key k mod rsa_keys, so CSRs stay distinct by their (identity, key) pair,
 * and the call fails (SG_EINVAL) when an identity would get more CSRs than
 * there are keys. */
typedef enum lg_csr_key { LG_CSR_P256 = 0, LG_CSR_RSA2048 } lg_csr_key;
#define LG_RSA_KEYS_MAX 100000
typedef struct lg_csr_opts {
	lg_csr_key key;
	size_t rsa_keys;
} lg_csr_opts;
/* lg_items_make_ids with the CSRs' keys chosen (o NULL: P-256). */
int lg_items_make_opts(lg_item **out, size_t n, unsigned threads, lg_kind kind, const lg_idset *ids, int64_t ttl,
                       const lg_csr_opts *o) SG_MUST_CHECK;
void lg_items_free(lg_item *items, size_t n);

/* The first occurrence of needle in hay, or NULL. */
const uint8_t *lg_find_bytes(const uint8_t *hay, size_t n, const uint8_t *needle, size_t m);

/* NULL when the leaf is one PEM certificate for its CSR's key (its DER
 * holds the SPKI verbatim) naming `identity` (unless NULL); else a failure
 * label. der/cap: scratch for the decoded leaf. */
const char *lg_check_leaf(const char *pem, size_t len, const lg_item *it, const char *identity, uint8_t *der,
                          size_t cap);

/* The whole of a file of at most max bytes, NUL-terminated (malloc'ed). */
int lg_read_file(const char *path, size_t max, char **out) SG_MUST_CHECK;

/* "Bearer <token>" from a token file only its owner may read, as a secret. */
int lg_bearer(const char *path, sg_secret **out) SG_MUST_CHECK;

/* ---- the token pool ----
 *
 * A mesh sends a distinct service-account token per pod, each presented
 * once per certificate lifetime, so a load test that reuses one token
 * measures a verification or review cache, not the per-token cost. The pool
 * is a directory of token files, one token each, every file read as a
 * --token-file is (sg_secret_from_file: owner-only, at most SG_SECRET_MAX
 * bytes). Request i presents token i mod count, so no token is used twice
 * in a run until the pool is exhausted; each use is counted. */

#define LG_TOKENS_MAX 100000            /* files in a pool directory */
#define LG_TOKENS_BYTES_MAX (64u << 20) /* their bytes together */
#define LG_TOKENS_IDENTITIES_MAX 4096   /* distinct service accounts (a CSR template each) */

typedef struct lg_tokens lg_tokens;

/* Reads every entry of dir whose name does not begin with '.', in name
 * order. Each token's identity is spiffe://<trust_domain>/ns/<ns>/sa/<sa>
 * from its own (unverified) claims: kubernetes.io.namespace and
 * kubernetes.io.serviceaccount.name, else sub
 * "system:serviceaccount:<ns>:<sa>"; a token without them is refused
 * (SG_EINVAL, naming the file, never the token). More than LG_TOKENS_MAX
 * files, LG_TOKENS_BYTES_MAX bytes or LG_TOKENS_IDENTITIES_MAX identities
 * is SG_EINVAL before anything is allocated for them. The tokens are kept
 * in one mapping left out of core dumps and wiped by lg_tokens_free. */
int lg_tokens_load(lg_tokens **out, const char *dir, const char *trust_domain) SG_MUST_CHECK;
void lg_tokens_free(lg_tokens *p);
/* Wipes the tokens but keeps the identities (for answers still in flight
 * when the pool cannot be freed); accepts NULL. */
void lg_tokens_wipe(lg_tokens *p);
size_t lg_tokens_count(const lg_tokens *p);
/* "Bearer <token>" for request i (token i mod count), counting the use;
 * any thread. lg_tokens_again: the same without counting, for a retry of
 * request i (a pod that retries presents its token again). */
const char *lg_tokens_take(lg_tokens *p, size_t i);
const char *lg_tokens_again(const lg_tokens *p, size_t i);
/* The identities of the pool's tokens, for lg_items_make_ids: CSR i then
 * names the identity of request i's token. */
void lg_tokens_idset(const lg_tokens *p, lg_idset *out);
/* How many tokens were used at least once, and the most uses of one. */
void lg_tokens_usage(const lg_tokens *p, size_t *distinct, uint64_t *max_uses);

/* Which tokens a run sent: none, one reused (--token-file), or a pool's,
 * with how many of them were used and the most uses of one (1: no token
 * sent twice; k: the pool wrapped k - 1 times). */
typedef struct lg_token_use {
	const char *source; /* "none", "file", "pool" */
	size_t pool, distinct;
	uint64_t max_uses;
} lg_token_use;

lg_token_use lg_token_use_of(const lg_tokens *pool, bool one_token);
/* One report line (nothing for "none"). */
void lg_token_use_print(const lg_token_use *u);
/* {"source", "pool", "distinct", "max_uses", "wraps"}; NULL when out of
 * memory. The caller owns the reference. */
json_t *lg_token_use_json(const lg_token_use *u);

#endif
