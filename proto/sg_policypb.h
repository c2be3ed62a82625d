/*
 * sg_policypb: the external policy server messages (signet.policy.v1,
 * proto/policy.proto) as our types. The one adapter over protobuf-c for
 * them: nothing else includes the generated headers.
 *
 * The client side only: the approver's plugin (daemon/sg_policyserver.h)
 * encodes a PolicyRequest and decodes the server's PolicyResponse.
 *
 * The response is hostile input (a server we do not run, maybe not the one
 * we think). sg_policypb_response_decode reads it with a bounded reader
 * that follows the schema: at most SG_POLICYPB_MAX_RESPONSE bytes and
 * SG_POLICYPB_MAX_FIELDS fields, every varint, length and wire type
 * checked against what remains, a verdict (field 3) that is set and inside
 * the enum (RESULT_UNSPECIFIED — an empty message included — and unknown
 * values are refused, never read as an answer), no field 1 (the design's
 * `result`, numbered APPROVED = 0: a server built to it is refused, see
 * policy.proto), a reason of at most
 * SG_POLICYPB_MAX_REASON bytes of UTF-8 without NUL. It allocates nothing.
 *
 * Errors follow sg_error.h: SG_EINVAL with a detail that quotes no input
 * bytes; SG_EINTERNAL when out of memory.
 */
#ifndef SG_POLICYPB_H
#define SG_POLICYPB_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The method path of PolicyServer.Evaluate. */
#define SG_POLICYPB_METHOD "/signet.policy.v1.PolicyServer/Evaluate"

/* Encoder bounds: beyond them sg_policypb_request_encode refuses (SG_EINVAL),
 * nothing is cut. A CertificateRequest the API server accepted fits: its
 * annotations total at most 256 KiB, the whole object about 1.5 MiB. */
#define SG_POLICYPB_MAX_REQUEST (2u << 20)    /* encoded PolicyRequest */
#define SG_POLICYPB_MAX_CSR (64u * 1024u)     /* the request field (PEM) */
#define SG_POLICYPB_MAX_STRING (256u * 1024u) /* one string, map key or value */
#define SG_POLICYPB_MAX_ITEMS 4096            /* entries of one list or map */

/* Decoder bounds. */
#define SG_POLICYPB_MAX_RESPONSE (16u * 1024u) /* larger responses are refused unread */
#define SG_POLICYPB_MAX_REASON 1024            /* bytes of PolicyResponse.reason */
#define SG_POLICYPB_MAX_FIELDS 64              /* fields in one response, unknown ones included */

/* A map entry; both NUL-terminated (NULL is read as ""). */
typedef struct sg_policypb_kv {
	const char *key;
	const char *value;
} sg_policypb_kv;

/* One entry of the user's extra map: key -> values[0..nvalues). */
typedef struct sg_policypb_extra {
	const char *key;
	const char *const *values;
	size_t nvalues;
} sg_policypb_extra;

/* A PolicyRequest in plain C. Every pointer is borrowed for the call;
 * strings are NUL-terminated UTF-8 (NULL is read as ""); maps must not
 * repeat a key (they are sent sorted by key, so the encoding of a request
 * is deterministic). */
typedef struct sg_policypb_request {
	/* metadata */
	const char *name, *name_space, *uid;
	const sg_policypb_kv *labels;
	size_t nlabels;
	const sg_policypb_kv *annotations;
	size_t nannotations;
	/* spec.request, base64-decoded: the PEM CSR (any bytes) */
	const uint8_t *csr;
	size_t csr_len;
	/* spec.issuerRef as written */
	const char *issuer_name, *issuer_kind, *issuer_group;
	bool is_ca;
	const char *duration; /* spec.duration as written; NULL or "" when unset */
	const char *const *usages;
	size_t nusages;
	/* user info */
	const char *username, *user_uid;
	const char *const *groups;
	size_t ngroups;
	const sg_policypb_extra *extra;
	size_t nextra;
	/* the CertificateRequestPolicy that asks, and its plugin values */
	const char *policy_name;
	const sg_policypb_kv *plugin_values;
	size_t nplugin_values;
} sg_policypb_request;

/* Encodes r as a serialized PolicyRequest; *out allocated with malloc
 * (caller frees), *out_len set. SG_EINVAL (naming the field) for a string
 * that is not UTF-8, a string, list or map beyond the bounds above, a
 * repeated map key, or a result beyond SG_POLICYPB_MAX_REQUEST;
 * SG_EINTERNAL when out of memory. */
SG_API int sg_policypb_request_encode(const sg_policypb_request *r, uint8_t **out, size_t *out_len) SG_MUST_CHECK;

/* PolicyResponse.Result, the verdict's enum; the values are the wire
 * contract. Zero is
 * "unset" (proto3 omits a zero enum and reads an absent one as zero), so
 * neither a zeroed struct nor an empty message means APPROVED; the decoder
 * refuses SG_POLICYPB_UNSPECIFIED and never returns it on success. */
typedef enum sg_policypb_result {
	SG_POLICYPB_UNSPECIFIED = 0,
	SG_POLICYPB_APPROVED = 1,
	SG_POLICYPB_DENIED = 2,
	SG_POLICYPB_ERROR = 3,
} sg_policypb_result;

/* "RESULT_UNSPECIFIED", "APPROVED", "DENIED", "ERROR"; "UNKNOWN" otherwise. */
SG_API const char *sg_policypb_result_name(sg_policypb_result r);

/* A decoded PolicyResponse (no pointers: copy it freely). */
typedef struct sg_policypb_response {
	sg_policypb_result result; /* PolicyResponse.verdict */
	size_t reason_len;
	char reason[SG_POLICYPB_MAX_REASON + 1]; /* NUL-terminated UTF-8, "" when absent */
} sg_policypb_response;

/* Decodes a serialized PolicyResponse of len bytes (proto3: an absent field
 * is its default, the last occurrence of a field wins, unknown fields are
 * skipped). On SG_OK result is APPROVED, DENIED or ERROR. SG_EINVAL for
 * more than SG_POLICYPB_MAX_RESPONSE bytes or SG_POLICYPB_MAX_FIELDS
 * fields, a malformed or truncated field, a wire type that does not match
 * the schema, a group, any occurrence of field 1 (the design's result), any
 * occurrence of a verdict outside the enum, a final verdict of
 * RESULT_UNSPECIFIED (absent, as in an empty message, or 0: not an answer),
 * or a reason that is too long, not UTF-8 or holds a NUL. On
 * failure *out is zeroed except that result is SG_POLICYPB_ERROR: nothing
 * is approved by accident. */
SG_API int sg_policypb_response_decode(const uint8_t *buf, size_t len, sg_policypb_response *out) SG_MUST_CHECK;

/* Encodes a PolicyResponse (tests and test servers): verdict result
 * (APPROVED, DENIED or ERROR: what the decoder accepts; SG_EINVAL
 * otherwise) and reason (UTF-8, at most SG_POLICYPB_MAX_REASON bytes; NULL
 * is ""), an empty reason omitted, fields in number order, as proto3
 * serializers write them. *out allocated with malloc (caller frees). */
SG_API int sg_policypb_response_encode(sg_policypb_result result, const char *reason, uint8_t **out,
                                       size_t *out_len) SG_MUST_CHECK;

#endif
