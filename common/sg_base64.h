/*
 * sg_base64: the one base64 codec, for both alphabets of RFC 4648: base64
 * (§4, padded with '=': PEM bodies) and base64url (§5, unpadded: JWTs,
 * JWKs). Decoding is strict, so every value has exactly one encoding: the
 * bits a final partial quantum leaves over must be zero, padding is allowed
 * only in base64 and only where it belongs, nothing follows it, and a
 * character of the other alphabet is named as such in the error.
 *
 * Ownership: output buffers are the caller's; only sg_b64_decode_new
 * allocates (a buffer the caller frees).
 */
#ifndef SG_BASE64_H
#define SG_BASE64_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sg_b64 {
	SG_B64_STD, /* A-Z a-z 0-9 + /, padded to whole quanta of 4 with '=' */
	SG_B64_URL, /* A-Z a-z 0-9 - _, no padding */
} sg_b64;

/* A decoder fed in pieces (PEM feeds it one line at a time). */
typedef struct sg_b64_decoder {
	sg_b64 alphabet;
	uint8_t *out;
	size_t cap, len;
	uint32_t acc;
	unsigned data; /* sextets of the current quantum */
	unsigned pad;  /* '=' seen in the current quantum */
	bool done;     /* a padded quantum ended the data */
} sg_b64_decoder;

SG_API void sg_b64_decoder_init(sg_b64_decoder *d, sg_b64 alphabet, uint8_t *out, size_t cap);
/* Decodes n characters into the output. SG_EINVAL for a character outside
 * the alphabet, misplaced padding, data after padding, non-zero padding
 * bits, or more than cap bytes of output; the detail says which. */
SG_API int sg_b64_decoder_feed(sg_b64_decoder *d, const uint8_t *p, size_t n) SG_MUST_CHECK;
/* Ends the input and sets *out_len. base64 must end on a whole quantum;
 * base64url may end with 2 or 3 characters of one, never 1. */
SG_API int sg_b64_decoder_finish(sg_b64_decoder *d, size_t *out_len) SG_MUST_CHECK;

/* Decodes a whole string (n characters, no line breaks). */
SG_API int sg_b64_decode(sg_b64 alphabet, const char *in, size_t n, uint8_t *out, size_t cap,
			 size_t *out_len) SG_MUST_CHECK;
/* Decodes a whole string of untrusted size (a []byte field of a
 * Kubernetes object, say) into a new buffer: refused before allocating
 * when n characters could decode to more than max bytes (padding counts
 * for nothing), then decoded strictly and NUL-terminated (not counted in
 * *out_len), so text can be read as a string. what names the value in the
 * errors ("<what> is larger than <max> bytes", "<what> is not base64: ...",
 * SG_EINVAL). On failure *out is NULL and *out_len 0. */
SG_API int sg_b64_decode_new(sg_b64 alphabet, const char *what, const char *in, size_t n, size_t max, char **out,
                             size_t *out_len) SG_MUST_CHECK;
/* Characters sg_b64_encode writes for n bytes (the NUL not counted). */
SG_API size_t sg_b64_encoded_len(sg_b64 alphabet, size_t n);
/* Encodes n bytes and a terminating NUL into out (cap bytes);
 * SG_EINVAL when it does not fit. */
SG_API int sg_b64_encode(sg_b64 alphabet, const uint8_t *in, size_t n, char *out, size_t cap) SG_MUST_CHECK;

/* base64url, as JWTs and JWKs use it. */
static inline int sg_b64url_decode(const char *in, size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
	return sg_b64_decode(SG_B64_URL, in, n, out, cap, out_len);
}
static inline int sg_b64url_encode(const uint8_t *in, size_t n, char *out, size_t cap)
{
	return sg_b64_encode(SG_B64_URL, in, n, out, cap);
}

#endif
