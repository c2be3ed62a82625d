/*
 * sg_istio: the Istio CA API messages (istio.v1.auth, proto/ca.proto) as
 * our types. The one adapter over protobuf-c: nothing else includes the
 * generated headers.
 *
 * Requests are hostile input. sg_istio_request_decode refuses anything
 * larger than SG_ISTIO_MAX_MESSAGE before reading it, then walks the wire
 * format with a bounded, depth-limited scanner (google.protobuf.Struct nests
 * recursively and protobuf-c has no recursion limit) that also checks wire
 * types, varints, lengths, field counts and string encodings; only input the
 * scanner accepted reaches protobuf__unpack. Every refusal is SG_EINVAL with
 * a specific detail that quotes no request bytes.
 *
 * Memory: one sg_istio_arena per request. The decoder allocates everything
 * it returns (and all of protobuf-c's allocations) from the arena; nothing is
 * freed field by field. Reset the arena to reuse it for the next request.
 */
#ifndef SG_ISTIO_H
#define SG_ISTIO_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

#define SG_ISTIO_MAX_MESSAGE (64 * 1024) /* larger requests are refused unread */
#define SG_ISTIO_MAX_CSR (16 * 1024)     /* largest csr field */
#define SG_ISTIO_MAX_DEPTH 8             /* Struct/ListValue nesting in metadata */
#define SG_ISTIO_MAX_FIELDS 1024         /* fields in one request, at every level */
#define SG_ISTIO_MAX_RESPONSE (1u << 20) /* largest response sg_istio_response_decode reads */

/* The method path of CreateCertificate. */
#define SG_ISTIO_METHOD "/istio.v1.auth.IstioCertificateService/CreateCertificate"

typedef struct sg_istio_request {
	const char *csr; /* PEM text, NUL-terminated, printable ASCII; borrowed from the arena */
	size_t csr_len;
	int64_t validity_seconds;          /* 0 when absent; negative passed through */
	const char *impersonated_identity; /* metadata["ImpersonatedIdentity"] string, or NULL */
	const char *cert_signer;           /* metadata["CertSigner"] string, or NULL */
} sg_istio_request;

/* A decoded IstioCertificateResponse: n elements, each NUL-terminated, all
 * borrowed from the arena. */
typedef struct sg_istio_chain {
	size_t n;
	const char **elems;
	const size_t *lens;
} sg_istio_chain;

typedef struct sg_istio_arena sg_istio_arena; /* per-request memory, freed at once */

/* A new empty arena; free with sg_istio_arena_free. SG_EINTERNAL on OOM. */
SG_API int sg_istio_arena_new(sg_istio_arena **out) SG_MUST_CHECK;
/* Frees the arena and everything decoded into it; accepts NULL. */
SG_API void sg_istio_arena_free(sg_istio_arena *a);
/* Releases everything decoded into the arena (keeping its first block) so it
 * can serve the next request; earlier results become invalid. */
SG_API void sg_istio_arena_reset(sg_istio_arena *a);

/* Decodes a serialized IstioCertificateRequest of len bytes. Everything it
 * returns lives in the arena, valid until the arena is reset or freed.
 * SG_EINVAL for oversized, malformed, too deep, non-UTF-8 input, a missing
 * or empty csr, and a metadata ImpersonatedIdentity/CertSigner that is not
 * a string; SG_EINTERNAL when the arena runs out of memory. Unknown fields
 * are skipped (proto3). */
SG_API int sg_istio_request_decode(sg_istio_arena *a, const uint8_t *buf, size_t len,
				   sg_istio_request *out) SG_MUST_CHECK;

/* Encodes IstioCertificateResponse{cert_chain = elems[0..n)} (elems[i] of
 * lens[i] bytes, need not be NUL-terminated). *out is allocated with malloc
 * (caller frees) and *out_len set. SG_EINVAL when n is 0 or the result would
 * exceed SG_ISTIO_MAX_RESPONSE. */
SG_API int sg_istio_response_encode(const char *const *elems, const size_t *lens, size_t n,
				    uint8_t **out, size_t *out_len) SG_MUST_CHECK;

/* Decodes an IstioCertificateResponse (client side: signetctl, tests) into
 * the arena. SG_EINVAL for malformed input, non-UTF-8 elements or more than
 * SG_ISTIO_MAX_RESPONSE bytes. */
SG_API int sg_istio_response_decode(sg_istio_arena *a, const uint8_t *buf, size_t len,
				    sg_istio_chain *out) SG_MUST_CHECK;

/* Decodes an IstioCertificateResponse and joins its elements, leaf first,
 * into one NUL-terminated PEM text (a newline added after an element that
 * lacks one); *out allocated with malloc, caller frees. SG_EINVAL for a
 * malformed or empty response. */
SG_API int sg_istio_response_join(const uint8_t *buf, size_t len, char **out) SG_MUST_CHECK;

/* Encodes a request (client tools and tests): csr of csr_len bytes,
 * validity_duration = validity (omitted when 0), and metadata
 * {"ImpersonatedIdentity": impersonated_identity} when that is non-NULL.
 * *out is allocated with malloc (caller frees). */
SG_API int sg_istio_request_encode(const char *csr, size_t csr_len, int64_t validity,
				   const char *impersonated_identity, uint8_t **out,
				   size_t *out_len) SG_MUST_CHECK;

/* Like sg_istio_request_encode, also sending metadata "CertSigner" when
 * cert_signer is non-NULL (istio-agent always sends it, "" by default). */
SG_API int sg_istio_request_encode_ex(const char *csr, size_t csr_len, int64_t validity,
				      const char *impersonated_identity, const char *cert_signer,
				      uint8_t **out, size_t *out_len) SG_MUST_CHECK;

#endif
