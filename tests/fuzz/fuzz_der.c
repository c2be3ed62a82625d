/*
 * Fuzz target for the DER reader (common/sg_der.c) over arbitrary bytes.
 *
 * The input is walked as a sequence of TLVs, descending into constructed
 * ones (bit 0x20) up to MAX_DEPTH; each primitive is also offered to the
 * typed readers (INTEGER, BIT STRING, BOOLEAN, times). The oracle is the
 * writer: DER has exactly one encoding, so everything the reader accepts
 * must re-encode to the very same bytes, and every typed value must
 * re-encode to its TLV. A mismatch aborts. The raw input is also parsed as
 * the content of a UTCTime and of a GeneralizedTime.
 */
#include "sg_der.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void same(const sg_der_writer *w, size_t from, sg_slice want)
{
	check(sg_der_writer_status(w) == 0);
	check(w->len - from == want.len);
	check(want.len == 0 || memcmp(w->buf + from, want.p, want.len) == 0);
}

/* Offers one primitive TLV (whole) to the typed readers. */
static void typed(uint8_t tag, sg_slice content, sg_slice whole)
{
	uint8_t buf[64];
	sg_der_writer w;
	sg_reader r = sg_reader_of(whole);
	switch (tag) {
	case SG_DER_INTEGER: {
		uint64_t v;
		sg_slice mag;
		if (sg_der_read_uint(&r, &v) == 0) {
			check(sg_reader_done(&r));
			sg_der_writer_init(&w, buf, sizeof(buf));
			sg_der_uint(&w, v);
			same(&w, 0, whole);
		}
		r = sg_reader_of(whole);
		if (sg_der_read_unsigned_bytes(&r, &mag) == 0) {
			check(sg_reader_done(&r));
			check(mag.len >= 1 && (mag.len == 1 || mag.p[0] != 0));
			uint8_t *big = malloc(whole.len + 8);
			check(big != NULL);
			sg_der_writer_init(&w, big, whole.len + 8);
			sg_der_uint_bytes(&w, mag.p, mag.len);
			same(&w, 0, whole);
			free(big);
		}
		break;
	}
	case SG_DER_BIT_STRING: {
		sg_slice bits;
		if (sg_der_read_bits(&r, &bits) == 0) {
			check(bits.len + 1 == content.len);
			uint8_t *big = malloc(whole.len + 8);
			check(big != NULL);
			sg_der_writer_init(&w, big, whole.len + 8);
			sg_der_bits(&w, bits.p, bits.len);
			same(&w, 0, whole);
			free(big);
		}
		break;
	}
	case SG_DER_BOOLEAN: {
		bool b;
		if (sg_der_read_bool(&r, &b) == 0) {
			sg_der_writer_init(&w, buf, sizeof(buf));
			sg_der_bool(&w, b);
			same(&w, 0, whole);
		}
		break;
	}
	case SG_DER_UTCTIME:
	case SG_DER_GENERALIZEDTIME: {
		int64_t t;
		if (sg_der_parse_time(tag, content, &t) == 0) {
			sg_der_writer_init(&w, buf, sizeof(buf));
			sg_der_time(&w, t);
			check(sg_der_writer_status(&w) == 0);
			/* Same canonical form unless the input chose the other
			 * type for its year (GeneralizedTime for 1950..2049). */
			if (w.buf[0] == tag)
				same(&w, 0, whole);
		}
		break;
	}
	default:
		break;
	}
}

/* Walks every TLV of r, re-encoding into w; returns 0 when all parsed. */
static int walk(sg_reader *r, sg_der_writer *w, int depth)
{
	while (!sg_reader_done(r)) {
		uint8_t tag, peeked;
		sg_slice content, whole;
		check(sg_der_peek(r, &peeked) == 0);
		size_t before = r->off;
		if (sg_der_read_any(r, &tag, &content, &whole) != 0) {
			check(r->off >= before && r->off <= r->len);
			return -1;
		}
		check(tag == peeked);
		check(content.len <= SG_DER_MAX_LEN);
		check(whole.p == r->p + before && whole.len == r->off - before);
		check(content.p + content.len == whole.p + whole.len);
		if ((tag & 0x20) && depth < MAX_DEPTH) {
			size_t mark = sg_der_begin(w, tag);
			sg_reader sub = sg_reader_of(content);
			if (walk(&sub, w, depth + 1) != 0)
				return -1;
			sg_der_end(w, mark);
		} else {
			sg_der_prim(w, tag, content.p, content.len);
			typed(tag, content, whole);
		}
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_slice in = {data, size};
	sg_reader r = sg_reader_of(in);
	size_t cap = size + 16;
	uint8_t *out = malloc(cap);
	check(out != NULL);
	sg_der_writer w;
	sg_der_writer_init(&w, out, cap);
	int ok = walk(&r, &w, 0) == 0;
	if (ok)
		same(&w, 0, in);
	free(out);

	/* Re-encoding into a buffer one byte too small (exact-size heap block,
	 * so ASan sees an overrun) must poison the writer. */
	if (ok && size > 0) {
		uint8_t *small = malloc(size - 1 ? size - 1 : 1);
		check(small != NULL);
		sg_der_writer_init(&w, small, size - 1);
		r = sg_reader_of(in);
		check(walk(&r, &w, 0) == 0);
		check(sg_der_writer_status(&w) != 0);
		free(small);
	}

	int64_t t;
	if (sg_der_parse_time(SG_DER_UTCTIME, in, &t) == 0)
		check(size == 13);
	if (sg_der_parse_time(SG_DER_GENERALIZEDTIME, in, &t) == 0)
		check(size == 15);
	return 0;
}
