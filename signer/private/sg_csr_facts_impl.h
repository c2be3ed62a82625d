/*
 * sg_csr_facts_impl: what the files of sg_csr_facts share and nobody else
 * sees: the parse's state (facts_build), the text arena every reported
 * string lives in, and the calls one file makes into another. Not
 * installed, not public: on sg_signer's private include path only. The
 * shared functions carry a csr_facts_ prefix, so that none of them can
 * clash with another symbol of the signer (sg_csr.c has helpers of its
 * own) or of another layer at link time.
 *
 * The files: sg_csr_facts.c, the request, its subject, key and
 * extensions (its design comment explains the whole); sg_csr_facts_san.c,
 * subjectAltName as crypto/x509 and cert-manager read it;
 * sg_csr_facts_goforms.c, net.IP.String() and url.URL.String() of the
 * values a policy compares; sg_csr_facts_text.c, the text arena every
 * reported string lives in and OIDs as Go reads them, which the others
 * call and which calls none of them.
 */
#ifndef SG_CSR_FACTS_IMPL_H
#define SG_CSR_FACTS_IMPL_H

#include "sg_csr_facts.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The parse's state: the facts it fills and the arrays' capacities. */
typedef struct facts_build {
	sg_csr_facts *f;
	size_t attr_cap, san_cap;
	size_t names_seen; /* GeneralNames read, listed or not */
} facts_build;

/* ------------------------------------------------------------------ */
/* The text arena and OIDs (sg_csr_facts_text.c)                      */

/* Reserves room for max bytes plus a NUL; csr_facts_text_commit fixes the
 * length and returns the text. */
int csr_facts_text_reserve(sg_csr_facts *f, size_t max, char **p);
const char *csr_facts_text_commit(sg_csr_facts *f, size_t n);
/* n bytes of src as a text; s in hex as a text (its length in *outlen). */
int csr_facts_text_put(sg_csr_facts *f, const void *src, size_t n, const char **out);
int csr_facts_text_hex(sg_csr_facts *f, sg_slice s, const char **out, size_t *outlen);
/* Appends the UTF-8 form of cp (a valid scalar value) at p; returns bytes. */
size_t csr_facts_utf8_put(char *p, uint32_t cp);
/* Decodes an OID into the arena; the Go error when Go would refuse it. */
int csr_facts_text_oid(sg_csr_facts *f, sg_slice oid, const char **out, const char **goerr);
/* An OID that must be valid: SG_EINVAL with Go's error under what. */
int csr_facts_need_oid(sg_csr_facts *f, sg_slice oid, const char *what, const char **out);
/* Whether oid is the DER content want[0..len). */
bool csr_facts_oid_eq(sg_slice oid, const uint8_t *want, size_t len);

/* ------------------------------------------------------------------ */
/* subjectAltName (sg_csr_facts_san.c)                                */

/* One subjectAltName extension's value: its GeneralNames into b->f. */
int csr_facts_parse_san(facts_build *b, sg_slice value);

/* ------------------------------------------------------------------ */
/* Go's forms (sg_csr_facts_goforms.c)                                */

/* net.IP.String() of n (4 or 16) bytes into out (40 bytes); its length. */
size_t csr_facts_ip_text(const uint8_t *ip, size_t n, char *out);
/* url.Parse then URL.String() of s into out (room for n + 1 bytes): NULL,
 * or why the round trip is not reproduced. */
const char *csr_facts_go_uri(const char *s, size_t n, char *out, size_t *outlen);

#endif
