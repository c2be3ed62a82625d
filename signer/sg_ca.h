/*
 * sg_ca: the CA material a signer issues from, loaded once and then shared
 * read-only by every signer thread.
 *
 * Files (PEM):
 *   cert   the certificate of the key held in the HSM (the self-signed root,
 *          or an intermediate signed by an offline root)
 *   chain  optional: the certificates between cert and the root, nearest
 *          first (the root itself may be included; it is then dropped)
 *   root   the trust bundle clients are given (one or more roots)
 *
 * sg_ca_load checks that cert is a CA certificate whose public key is the
 * HSM key, that it is inside its validity window, and that cert + chain
 * verify to a root of the bundle; any failure refuses to load. The root
 * that verification ends at is the CA's root (sg_ca_root_not_after); the
 * bundle's other roots are handed out with it, whatever their expiry.
 *
 * The chain returned with every leaf is [cert (if it is not a root), each
 * chain certificate, root bundle]: istiod's order, root bundle last and
 * unsplit. Each element is PEM ending in a newline.
 */
#ifndef SG_CA_H
#define SG_CA_H

#include "sg_cert.h"
#include "sg_error.h"
#include "sg_hsm.h"
#include "sg_key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_ca sg_ca;

typedef struct sg_ca_files {
	const char *cert;  /* required */
	const char *chain; /* may be NULL */
	const char *root;  /* required */
} sg_ca_files;

/* Loads and checks the CA; hsm_spki is the HSM key's SPKI DER (borrowed for
 * the call). now is wall-clock seconds. Caller frees with sg_ca_free. */
SG_API int sg_ca_load(sg_ca **out, const sg_ca_files *files, const uint8_t *hsm_spki, size_t spki_len,
		      int64_t now) SG_MUST_CHECK;
SG_API void sg_ca_free(sg_ca *ca);

/* Borrowed views, valid until sg_ca_free. */
SG_API const sg_cert_issuer *sg_ca_issuer(const sg_ca *ca);
SG_API const sg_pubkey *sg_ca_pubkey(const sg_ca *ca);
SG_API sg_key_type sg_ca_key_type(const sg_ca *ca);
SG_API void sg_ca_chain(const sg_ca *ca, const char *const **elems, const size_t **lens, size_t *n);
SG_API const char *sg_ca_root_pem(const sg_ca *ca);
/* The CA's root: the root of the bundle that the CA's own chain ends at
 * (the anchor sg_ca_load's verification found), its validity and subject.
 * Its expiry is the one that ends the CA: every chain handed out ends
 * there. Another root of the bundle (the other half of a rotation's
 * overlap) may expire earlier without making a certificate unverifiable;
 * sg_ca_bundle_roots describes those. */
SG_API int64_t sg_ca_root_not_after(const sg_ca *ca);
SG_API int64_t sg_ca_root_not_before(const sg_ca *ca);
SG_API const char *sg_ca_root_subject(const sg_ca *ca);
/* The earliest NotAfter of the chain: the CA certificate, the
 * intermediates handed out, and the CA's root. */
SG_API int64_t sg_ca_chain_not_after(const sg_ca *ca);
/* Checks a candidate root bundle (len bytes of PEM; what names it in
 * messages): every block must be a certificate, and the CA certificate
 * with its intermediates must verify to one of them (ca NULL: a daemon
 * with no CA of its own, an RA without an HSM; only the first part).
 * SG_EINVAL with the reason otherwise. For a reloaded bundle before it is
 * handed out. */
SG_API int sg_ca_check_bundle(const sg_ca *ca, const char *pem, size_t len, const char *what) SG_MUST_CHECK;

/* Most certificates a root bundle may hold (as sg_ca_load and
 * sg_ca_check_bundle accept). */
#define SG_CA_BUNDLE_MAX 8

typedef struct sg_ca_root_info {
	int64_t not_before, not_after;
	bool is_ca_root; /* the CA's root (sg_ca_root_not_after) */
	char subject[256];
} sg_ca_root_info;

/* Describes the certificates of a root bundle (len bytes of PEM), in file
 * order, at most cap of them (*n how many; with ca NULL none is the CA's
 * root). SG_EINVAL when the bundle holds no certificate, a broken one or
 * more than SG_CA_BUNDLE_MAX. */
SG_API int sg_ca_bundle_roots(const sg_ca *ca, const char *pem, size_t len, sg_ca_root_info *out, size_t cap,
                              size_t *n) SG_MUST_CHECK;

/* Subject of the CA certificate as a one-line string ("CN=...,O=..."). */
SG_API const char *sg_ca_subject(const sg_ca *ca);

#endif
