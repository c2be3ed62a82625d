/*
 * lg_common: what the load tools share (loadgen, herd): the loopback-only
 * target, distinct istio-agent-shaped CSRs made before the clock starts,
 * the cheap check of an issued leaf (no X.509 parsing: the client shares
 * the CPUs with the server it measures), and the bearer token read as a
 * secret.
 *
 * Ownership: lg_items_make allocates the array and every body (free both
 * with lg_items_free, also after a failure); lg_read_file's buffer is the
 * caller's to free; lg_bearer's secret is the caller's (sg_secret_free).
 * Errors follow sg_error.h.
 */
#ifndef LG_COMMON_H
#define LG_COMMON_H

#include "sg_error.h"
#include "sg_secret.h"

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

/* One request's material: what is sent, and the SPKI bytes the issued
 * certificate must contain. */
typedef struct lg_item {
	uint8_t *body; /* serialized IstioCertificateRequest, or the JSON text */
	size_t body_len;
	uint8_t spki[128];
	size_t spki_len;
} lg_item;

/* n distinct CSRs (a new P-256 key each; subject O="", one critical URI SAN
 * `identity`, ECDSA-SHA256), made on `threads` threads, as request bodies
 * for `kind` (gRPC: IstioCertificateRequest asking for ttl seconds; HTTP:
 * cfssl's sign JSON). *out is set even on failure (free it). */
int lg_items_make(lg_item **out, size_t n, unsigned threads, lg_kind kind, const char *identity,
                  int64_t ttl) SG_MUST_CHECK;
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

#endif
