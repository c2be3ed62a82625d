/*
 * sg_certset: a set of trust anchors built from untrusted PEM sources, and
 * the files a trust bundle is written as (PEM, PKCS#12, JKS). This is what
 * trust-manager's Bundle builds, with its rules, so that Bundles written for
 * it give the same bytes here:
 *
 *  - certificates are keyed by the SHA-256 of their DER: the same
 *    certificate from two sources is kept once;
 *  - the PEM output is sorted by that hash (not by source order), each
 *    certificate re-encoded as a clean CERTIFICATE block (64-column base64)
 *    from the DER that was read, blocks joined by their final newline, and
 *    the whole without a trailing newline (Go's TrimSpace);
 *  - strict input: every PEM block of a source must be a CERTIFICATE without
 *    headers holding exactly one DER certificate; anything else fails the
 *    whole source (a private key pasted into a bundle source must never be
 *    distributed). Text outside blocks (comments) is allowed and dropped.
 *    Blocks are found as Go's pem.Decode finds them (a line that starts
 *    with "-----BEGIN "), but a broken block (bad base64, no END line, an
 *    END line of another type) is an error, not silently skipped, and
 *    base64 is strict (no non-zero pad bits);
 *  - optional filters: expired certificates (now > notAfter) and
 *    certificates that are not CAs (no basicConstraints with cA TRUE) are
 *    dropped and counted, not errors.
 *
 * Error messages (SG_EINVAL) are trust-manager's where it has one, since
 * users search for them:
 *   "invalid PEM block in bundle: only CERTIFICATE blocks are permitted but found '<type>'"
 *   "invalid PEM block in bundle; blocks are not permitted to have PEM headers"
 *   "invalid PEM block in bundle; invalid PEM certificate: <why>"
 * and for what Go would have skipped:
 *   "invalid PEM block in bundle; malformed PEM block: <why>"
 * Limits (SG_EINVAL, checked before anything is allocated for the input):
 * one source at most SG_CERTSET_PEM_MAX bytes, no NUL byte; a set at most
 * SG_CERTSET_MAX certificates.
 *
 * Ownership and threads: a set belongs to its caller; one thread at a time.
 * Outputs are new heap buffers the caller frees with free().
 */
#ifndef SG_CERTSET_H
#define SG_CERTSET_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_CERTSET_PEM_MAX (4u << 20) /* bytes of one source's PEM text */
#define SG_CERTSET_MAX 8192           /* distinct certificates in one set */

typedef struct sg_certset sg_certset;

typedef struct sg_certset_opts {
	bool filter_expired;   /* drop certificates with now > notAfter */
	bool filter_non_ca;    /* drop certificates that are not CAs */
	int64_t now;           /* Unix seconds for filter_expired; 0: time(NULL) */
} sg_certset_opts;

/* An empty set. opts may be NULL (no filters). Caller frees with
 * sg_certset_free. */
SG_API int sg_certset_new(sg_certset **out, const sg_certset_opts *opts) SG_MUST_CHECK;
SG_API void sg_certset_free(sg_certset *s); /* accepts NULL */

/* Adds every certificate of len bytes of PEM text, strictly (above). On
 * error the set is left as it was before the call (all or nothing). */
SG_API int sg_certset_add_pem(sg_certset *s, const char *pem, size_t len) SG_MUST_CHECK;

/* Distinct certificates held (after filters). */
SG_API size_t sg_certset_count(const sg_certset *s);

typedef struct sg_certset_stats {
	uint64_t blocks;          /* certificate blocks read by successful adds */
	uint64_t duplicates;      /* of those, already in the set */
	uint64_t expired;         /* dropped by filter_expired */
	uint64_t non_ca;          /* dropped by filter_non_ca */
} sg_certset_stats;
SG_API void sg_certset_stats_get(const sg_certset *s, sg_certset_stats *out);

/* The set as PEM text, sorted by SHA-256 of the DER as described above;
 * "" (len 0) for an empty set. *out is NUL-terminated. */
SG_API int sg_certset_pem(const sg_certset *s, char **out, size_t *len) SG_MUST_CHECK;

/* PKCS#12 profiles of trust-manager's Bundle (additionalFormats.pkcs12). */
typedef enum sg_certset_p12_profile {
	SG_CERTSET_P12_LEGACY_RC2,  /* "LegacyRC2": RC2-40 / SHA-1 MAC (the v1alpha1 default) */
	SG_CERTSET_P12_LEGACY_DES,  /* "LegacyDES": 3DES / SHA-1 MAC */
	SG_CERTSET_P12_MODERN_2023, /* "Modern2023": PBES2 AES-256-CBC / SHA-256 MAC */
} sg_certset_p12_profile;

/* Parses a profile name as the Bundle spells it; "" means the default
 * (LegacyRC2). SG_EINVAL names the accepted values. */
SG_API int sg_certset_p12_profile_parse(const char *name, sg_certset_p12_profile *out) SG_MUST_CHECK;

/* The set as a PKCS#12 trust store as trust-manager writes it with
 * go-pkcs12: one certificate bag per certificate, in the PEM order, in one
 * safe, each marked as a trusted certificate for Java (Oracle's
 * trusted-key-usage attribute, anyExtendedKeyUsage) and named
 * (friendlyName, a BMPString) by trust-manager's alias: the first 8 hex
 * digits of the SHA-256 of its DER, "|", and its subject as Go prints it;
 * no key.
 * With password "" the store is go-pkcs12's Passwordless whatever the
 * profile: the safe is not encrypted and there is no MAC (nothing needs
 * OpenSSL's legacy provider), and the bytes are a function of the set
 * alone. Otherwise the profile's encryption (2048 iterations) and MAC
 * (LegacyRC2 and LegacyDES: SHA-1, 1 iteration, 8-byte salts; Modern2023:
 * SHA-256, 2048 iterations, 16-byte salts), and the output is not
 * deterministic (salts), so callers compare inputs, not outputs.
 * SG_EINVAL for an empty set, a password that is not UTF-8, a subject
 * with a character beyond the BMP (go-pkcs12 refuses it too), and
 * LegacyRC2 with a password when OpenSSL's legacy provider (RC2) cannot be
 * loaded (the message says so). */
SG_API int sg_certset_pkcs12(const sg_certset *s, const char *password, sg_certset_p12_profile profile,
                             uint8_t **out, size_t *len) SG_MUST_CHECK;

/* The set as a Java KeyStore (JKS, version 2) as trust-manager writes it
 * with keystore-go: one trusted-certificate entry (type "X509") per
 * certificate, aliased by trust-manager's alias (as for PKCS#12) in lower
 * case, in the order of the aliases (a repeated alias keeps the later
 * certificate), stamped with the certificate's notBefore, and the keyed
 * SHA-1 integrity digest over password (UTF-16BE of its UTF-8 text, as
 * Java checks it; keystore-go differs for a password that is not ASCII).
 * The output is a function of the set and password. An empty set is
 * SG_EINVAL; a password that is not UTF-8 is SG_EINVAL. */
SG_API int sg_certset_jks(const sg_certset *s, const char *password, uint8_t **out, size_t *len) SG_MUST_CHECK;

#endif
