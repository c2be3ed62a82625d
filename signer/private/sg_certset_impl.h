/*
 * sg_certset_impl: what sg_certset.c (the set and its stores) shares with
 * sg_certset_alias.c (the names trust-manager gives a certificate in a
 * PKCS#12 or JKS store). Private to signer/.
 */
#ifndef SG_CERTSET_IMPL_H
#define SG_CERTSET_IMPL_H

#include "sg_error.h"

#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>

/* The longest alias made: trust-manager's aliases have no bound of their
 * own, but a JKS alias is a Java UTF string (at most 65535 bytes); a
 * subject this long is refused rather than cut. */
#define SG_CERTSET_ALIAS_MAX 65535u

/* trust-manager's alias of certificate x whose DER has SHA-256 hash: the
 * first 8 lower-case hex digits of the hash, "|", and the subject as Go's
 * pkix.Name.String() prints it. *out is NUL-terminated UTF-8; caller frees
 * with free(). SG_EINVAL when the subject cannot be printed within
 * SG_CERTSET_ALIAS_MAX bytes or holds a BMPString of odd length. */
int sg_certset_alias(X509 *x, const uint8_t hash[32], char **out) SG_MUST_CHECK;

/* alias as keystore-go stores it in a JKS: Go's strings.ToLower (Unicode
 * simple lower-case mapping). *out: caller frees with free(). */
int sg_certset_alias_lower(const char *alias, char **out) SG_MUST_CHECK;

/* alias as go-pkcs12 writes a friendlyName: a BMPString (UCS-2, big
 * endian, no terminator). SG_EINVAL, with go-pkcs12's words, for a
 * character beyond the Basic Multilingual Plane. *out: caller frees with
 * free(); *len is even. */
int sg_certset_alias_bmp(const char *alias, uint8_t **out, size_t *len) SG_MUST_CHECK;

#endif
