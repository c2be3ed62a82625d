/*
 * sg_x509: certificates that signet reads rather than issues: PEM bundles
 * (a serving chain from files, the chain and key in istiod's Secret, a
 * root bundle), the facts about one certificate that callers act on, and
 * the checks they need (names, chain to roots, private key). The layers
 * above see our types only; OpenSSL stays in here.
 *
 * Everything read here is untrusted: a file an operator wrote, a Secret
 * anyone with access to the namespace may have edited. Input is bounded
 * before anything is allocated, NUL bytes are refused (a C string would
 * stop at one, a PEM reader would not), and a PEM block that claims to be
 * a certificate must decode as one DER certificate with nothing after it.
 * Answers about names and chains are plain yes/no: a surprise is a "no",
 * never a crash or a partial "yes".
 *
 * Errors follow sg_error.h: SG_EINVAL for input that is not what it should
 * be (the message says what), SG_EINTERNAL for out of memory. OpenSSL's
 * error queue is drained on every return, so no stale error reaches a later
 * message.
 *
 * Ownership and threads: a bundle belongs to the caller (sg_x509_bundle_free)
 * and is immutable once parsed; the functions below only read it, so
 * threads may share one (OpenSSL computes a certificate's cached extension
 * data under the certificate's own lock).
 */
#ifndef SG_X509_H
#define SG_X509_H

#include "sg_error.h"
#include "sg_key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of PEM text a bundle or a key may have (a Kubernetes Secret or
 * ConfigMap holds at most 1 MiB). */
#define SG_X509_PEM_MAX (1u << 20)
/* PEM blocks of any kind in one bundle, counted before parsing. */
#define SG_X509_BUNDLE_MAX 256
/* Hex digits of a serial number: RFC 5280 §4.1.2.2 allows 20 octets. */
#define SG_X509_SERIAL_HEX_MAX (2 * 20)

typedef struct sg_x509_bundle sg_x509_bundle;

/*
 * Parses every CERTIFICATE block of len bytes of PEM text (RFC 7468), in
 * order; text between blocks and blocks of other kinds are skipped, as
 * RFC 7468 §5.2 allows. SG_EINVAL when the text is longer than
 * SG_X509_PEM_MAX, holds a NUL byte or more than SG_X509_BUNDLE_MAX blocks
 * ("-----BEGIN " lines), when a CERTIFICATE block is malformed or is not
 * exactly one DER certificate, and ("holds no PEM certificate") when there
 * is none. Caller frees with sg_x509_bundle_free.
 */
SG_API int sg_x509_bundle_parse(sg_x509_bundle **out, const char *pem, size_t len) SG_MUST_CHECK;
/* At least 1. */
SG_API size_t sg_x509_bundle_count(const sg_x509_bundle *b);
/* Accepts NULL. */
SG_API void sg_x509_bundle_free(sg_x509_bundle *b);

typedef struct sg_x509_facts {
	int64_t not_before, not_after; /* Unix seconds */
	/* The serial as BN_bn2hex writes it, in lower case: whole bytes, no
	 * leading zero byte, "0" for zero, '-' first when negative (which RFC
	 * 5280 forbids and OpenSSL parses). */
	char serial[1 + SG_X509_SERIAL_HEX_MAX + 1];
	bool is_ca; /* basicConstraints present with cA TRUE */
} sg_x509_facts;

/* The facts of certificate i (0 is the first in the text). SG_EINVAL for
 * i out of range, a validity time that does not decode, a serial longer
 * than 20 octets, or a malformed or repeated basicConstraints. */
SG_API int sg_x509_get_facts(const sg_x509_bundle *b, size_t i, sg_x509_facts *out) SG_MUST_CHECK;

/*
 * Whether certificate i carries exactly these names: (cn NULL, or the
 * subject's first commonName is byte for byte cn) and the subjectAltName
 * holds the ndns DNS names in any order, each as often as dns lists it (so
 * each exactly once for a list without repeats), exactly one URI equal to
 * uri (uri NULL: no URI), and no name of another type. No subjectAltName
 * counts as no names; a malformed or repeated one, or i out of range, is
 * false. Comparisons are exact (no case folding).
 */
SG_API bool sg_x509_names_are(const sg_x509_bundle *b, size_t i, const char *cn, const char *const *dns,
			      size_t ndns, const char *uri);

/*
 * Whether chain verifies against roots now (X509_verify_cert with the
 * default flags and purpose): chain's first certificate is the leaf, the
 * rest untrusted intermediates in any order; every certificate of roots is
 * a trust anchor. False on any failure.
 */
SG_API bool sg_x509_chains_to(const sg_x509_bundle *chain, const sg_x509_bundle *roots);
/* The same check at the time at (Unix seconds) instead of now: a client
 * that allows for clock skew verifies at the moment it accepts. */
SG_API bool sg_x509_chains_to_at(const sg_x509_bundle *chain, const sg_x509_bundle *roots, int64_t at);
/*
 * sg_x509_chains_to_at where a certificate of anchors need not be a
 * self-signed root: each is trusted as it stands (OpenSSL's partial
 * chains), as Go's certificate pools trust whatever they hold. For an
 * answer that names an intermediate as its root (istiod's per-signer
 * mode); the caller decides first whether that intermediate is to be
 * trusted. A leaf that is itself one of the anchors does not count.
 */
SG_API bool sg_x509_chains_to_anchors_at(const sg_x509_bundle *chain, const sg_x509_bundle *anchors, int64_t at);
/* Whether set holds certificate i of b: the same DER. False for i out of
 * range or a NULL set. */
SG_API bool sg_x509_holds(const sg_x509_bundle *set, const sg_x509_bundle *b, size_t i);

/*
 * Whether certificate i holds the public key k: the same kind and the same
 * curve and point (EC) or modulus and exponent (RSA), compared from the
 * parsed parts (sg_pubkey_parse of the certificate's SubjectPublicKeyInfo),
 * as cert-manager compares an issued certificate with its CSR. False for i
 * out of range and for a key sg_pubkey_parse refuses. The thread's error
 * detail is left as it was.
 */
SG_API bool sg_x509_key_is(const sg_x509_bundle *b, size_t i, const sg_pubkey *k);

/*
 * Whether certificate i is self-signed: its issuer name is its subject name
 * and its own key verifies its signature (a root, not merely a certificate
 * that names itself). False for i out of range.
 */
SG_API bool sg_x509_self_signed(const sg_x509_bundle *b, size_t i);

/*
 * Certificate i as PEM text (RFC 7468: 64-character base64 lines, a final
 * newline) written from the DER that was read, byte for byte: text around
 * the block and the line layout of the input are not kept. *out is a new
 * NUL-terminated string of *len bytes (len may be NULL); caller frees it
 * with free(). SG_EINVAL for i out of range, SG_EINTERNAL out of memory.
 */
SG_API int sg_x509_pem(const sg_x509_bundle *b, size_t i, char **out, size_t *len) SG_MUST_CHECK;

typedef struct sg_x509_keyinfo {
	sg_pubkey_kind kind; /* SG_PUBKEY_RSA or SG_PUBKEY_EC */
	unsigned bits;	     /* RSA modulus bits, or the EC curve's (256, 384, ...) */
} sg_x509_keyinfo;

/*
 * Checks that len bytes of PEM text (at most SG_X509_PEM_MAX, no NUL)
 * hold an unencrypted private key (PKCS#8 or the traditional RSA/EC forms;
 * a passphrase is never asked for) that is the private key of certificate
 * i, and that it is RSA or EC; reports its kind and size. SG_EINVAL with a
 * message naming which check failed. The key is neither logged nor copied
 * into memory of ours; the text stays the caller's to wipe.
 */
SG_API int sg_x509_key_check(const sg_x509_bundle *b, size_t i, const char *key_pem, size_t len,
			     sg_x509_keyinfo *out) SG_MUST_CHECK;

#endif
