/*
 * sg_der: bounded reading and exact writing of DER (X.690 §8, §10).
 *
 * Reading: an sg_slice is a borrowed (pointer, length) view; an sg_reader
 * walks one slice and every read fails with SG_EINVAL instead of overrunning.
 * Only definite lengths in minimal form, single-byte tags and lengths below
 * SG_DER_MAX_LEN are accepted: anything else is not DER. Callers check that
 * a reader is exhausted (sg_reader_done) so that every byte is accounted for.
 *
 * Writing: an sg_der_writer appends into a buffer of fixed capacity owned by
 * the caller; a write that does not fit fails with SG_EINVAL and poisons the
 * writer (later writes fail too, so one check at the end suffices).
 * Constructed values are written as sg_der_begin(), contents, sg_der_end():
 * the length is fixed up in place.
 */
#ifndef SG_DER_H
#define SG_DER_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SG_DER_MAX_LEN (1u << 20) /* no single TLV of ours is larger */

/* Universal tags and the context tags we use. */
enum {
	SG_DER_BOOLEAN = 0x01,
	SG_DER_INTEGER = 0x02,
	SG_DER_BIT_STRING = 0x03,
	SG_DER_OCTET_STRING = 0x04,
	SG_DER_NULL = 0x05,
	SG_DER_OID = 0x06,
	SG_DER_UTF8STRING = 0x0c,
	SG_DER_PRINTABLESTRING = 0x13,
	SG_DER_IA5STRING = 0x16,
	SG_DER_UTCTIME = 0x17,
	SG_DER_GENERALIZEDTIME = 0x18,
	SG_DER_SEQUENCE = 0x30,
	SG_DER_SET = 0x31,
	SG_DER_CTX0 = 0xa0, /* [0] constructed */
	SG_DER_CTX1 = 0xa1,
	SG_DER_CTX3 = 0xa3,
};

typedef struct sg_slice {
	const uint8_t *p;
	size_t len;
} sg_slice;

typedef struct sg_reader {
	const uint8_t *p;
	size_t len;
	size_t off;
} sg_reader;

static inline sg_reader sg_reader_of(sg_slice s)
{
	sg_reader r = {s.p, s.len, 0};
	return r;
}
static inline bool sg_reader_done(const sg_reader *r)
{
	return r->off == r->len;
}
static inline size_t sg_reader_left(const sg_reader *r)
{
	return r->len - r->off;
}
static inline bool sg_slice_eq(sg_slice a, const void *b, size_t blen)
{
	return a.len == blen && (blen == 0 || memcmp(a.p, b, blen) == 0);
}

/* Reads n raw bytes. */
SG_API int sg_reader_bytes(sg_reader *r, size_t n, sg_slice *out) SG_MUST_CHECK;

/* Reads up to (not including) the first byte equal to delim, or to the end
 * of input; the delimiter stays unread. Never fails. */
SG_API void sg_reader_until(sg_reader *r, uint8_t delim, sg_slice *out);

/* Peeks at the next tag without consuming; fails at the end of input. */
SG_API int sg_der_peek(const sg_reader *r, uint8_t *tag) SG_MUST_CHECK;

/* Reads one TLV whose tag must equal `tag`; *content is its value and, when
 * whole is non-NULL, *whole spans tag, length and value. */
SG_API int sg_der_read(sg_reader *r, uint8_t tag, sg_slice *content, sg_slice *whole) SG_MUST_CHECK;

/* Reads any TLV. */
SG_API int sg_der_read_any(sg_reader *r, uint8_t *tag, sg_slice *content, sg_slice *whole) SG_MUST_CHECK;

/* INTEGER checks: minimal encoding; non-negative value that fits a uint64. */
SG_API int sg_der_read_uint(sg_reader *r, uint64_t *out) SG_MUST_CHECK;
/* An INTEGER's content as a minimal big-endian unsigned magnitude: fails for
 * negatives and non-minimal encodings; the leading 0x00 is stripped. */
SG_API int sg_der_read_unsigned_bytes(sg_reader *r, sg_slice *mag) SG_MUST_CHECK;
/* BIT STRING with zero unused bits; *bits is the octets after that byte. */
SG_API int sg_der_read_bits(sg_reader *r, sg_slice *bits) SG_MUST_CHECK;
/* BOOLEAN in DER form (0x00 or 0xff). */
SG_API int sg_der_read_bool(sg_reader *r, bool *out) SG_MUST_CHECK;

/* Parses a UTCTime or GeneralizedTime value (RFC 5280 §4.1.2.5 forms, 'Z'
 * only) into seconds since the epoch. */
SG_API int sg_der_parse_time(uint8_t tag, sg_slice content, int64_t *out) SG_MUST_CHECK;

typedef struct sg_der_writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
	bool failed;
} sg_der_writer;

static inline void sg_der_writer_init(sg_der_writer *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = cap;
	w->len = 0;
	w->failed = false;
}
/* SG_OK, or SG_EINVAL (with a detail) when any write did not fit. */
SG_API int sg_der_writer_status(const sg_der_writer *w) SG_MUST_CHECK;

/* Appends raw bytes (already encoded DER). */
SG_API void sg_der_raw(sg_der_writer *w, const void *p, size_t n);
/* Appends a whole primitive TLV. */
SG_API void sg_der_prim(sg_der_writer *w, uint8_t tag, const void *p, size_t n);
/* Opens a constructed TLV; returns a mark for sg_der_end. */
SG_API size_t sg_der_begin(sg_der_writer *w, uint8_t tag);
/* Closes the TLV opened at mark, moving its content to fit the length. */
SG_API void sg_der_end(sg_der_writer *w, size_t mark);
/* INTEGER from an unsigned big-endian magnitude (leading zeros stripped, a
 * 0x00 prefixed when the high bit is set). */
SG_API void sg_der_uint_bytes(sg_der_writer *w, const uint8_t *mag, size_t n);
SG_API void sg_der_uint(sg_der_writer *w, uint64_t v);
/* BIT STRING with zero unused bits. */
SG_API void sg_der_bits(sg_der_writer *w, const void *p, size_t n);
SG_API void sg_der_bool(sg_der_writer *w, bool v);
/* UTCTime for years 1950..2049, GeneralizedTime otherwise (RFC 5280). */
SG_API void sg_der_time(sg_der_writer *w, int64_t unix_seconds);

/* PrintableString's character set (X.680 §41.4 Table 10: A-Z a-z 0-9
 * space ' ( ) + , - . / : = ?). */
SG_API bool sg_der_printable_char(uint8_t c);
/* Decodes one UTF-8 sequence at s.p[*i] into *cp and advances *i; false for
 * anything RFC 3629 §4 forbids (overlong forms, surrogates, beyond
 * U+10FFFF, truncated sequences). */
SG_API bool sg_der_utf8_next(sg_slice s, size_t *i, uint32_t *cp);

/* Shared read-only byte strings of the OIDs we use (content octets only). */
typedef struct sg_oid {
	const uint8_t *p;
	size_t len;
} sg_oid;
#define SG_OID(...) ((sg_oid){(const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})})

#endif
