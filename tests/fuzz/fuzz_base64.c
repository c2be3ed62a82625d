/*
 * Fuzz target for the base64 decoder (common/sg_base64.c), which reads
 * CSRs' PEM, tokens' parts and Kubernetes objects' data fields.
 *
 * The first byte chooses the alphabet (low bit), the output room (the
 * next bits, up to the input's decoded size and one past it) and the piece
 * size of a third run; the rest is the text. Oracle: the decoder has a fast
 * path (whole quanta by table) and a careful one (a character at a time),
 * and feeding one byte per call is the careful path alone. The text fed at
 * once and fed in pieces must give exactly what it gives: the same return
 * code, the same message, the same bytes. Accepted text decodes to at most
 * the room, and encoding the bytes again gives back the text (base64 has
 * one encoding of any bytes once the trailing bits are checked zero).
 */
#include "sg_base64.h"
#include "sg_error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_MAX 4096

typedef struct run {
	int rc;
	size_t len;
	char msg[512];
} run;

static void decode(sg_b64 a, const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t piece, run *r)
{
	sg_b64_decoder d;
	sg_b64_decoder_init(&d, a, out, cap);
	int rc = SG_OK;
	for (size_t i = 0; i < n && rc == SG_OK;) {
		size_t k = piece == 0 || piece > n - i ? n - i : piece;
		rc = sg_b64_decoder_feed(&d, in + i, k);
		i += k;
	}
	r->len = 0;
	if (rc == SG_OK)
		rc = sg_b64_decoder_finish(&d, &r->len);
	r->rc = rc;
	r->msg[0] = 0;
	if (rc != SG_OK)
		snprintf(r->msg, sizeof(r->msg), "%s", sg_error_last()->msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size - 1 > TEXT_MAX)
		return 0;
	sg_b64 a = data[0] & 1 ? SG_B64_URL : SG_B64_STD;
	const uint8_t *text = data + 1;
	size_t n = size - 1;
	size_t most = n / 4 * 3 + 2;
	size_t cap = (data[0] >> 1 & 7) == 7 ? most : most * (data[0] >> 1 & 7) / 7 + (data[0] >> 4 & 1);
	size_t piece = (size_t)(data[0] >> 5) + 1;

	uint8_t *one = malloc(most + 1), *all = malloc(most + 1), *pieces = malloc(most + 1);
	if (!one || !all || !pieces)
		abort();
	run r1, ra, rp;
	decode(a, text, n, one, cap, 1, &r1);
	decode(a, text, n, all, cap, 0, &ra);
	decode(a, text, n, pieces, cap, piece, &rp);
	const run *other[] = {&ra, &rp};
	const uint8_t *bytes[] = {all, pieces};
	for (int i = 0; i < 2; i++) {
		if (other[i]->rc != r1.rc || strcmp(other[i]->msg, r1.msg) != 0)
			abort();
		if (r1.rc == SG_OK && (other[i]->len != r1.len || memcmp(bytes[i], one, r1.len) != 0))
			abort();
	}
	if (r1.rc == SG_OK) {
		if (r1.len > cap)
			abort();
		size_t elen = sg_b64_encoded_len(a, r1.len);
		char *again = malloc(elen + 1);
		if (!again || sg_b64_encode(a, one, r1.len, again, elen + 1) != SG_OK)
			abort();
		if (elen != n || memcmp(again, text, n) != 0)
			abort();
		free(again);
	} else if (r1.rc != SG_EINVAL || r1.msg[0] == 0) {
		abort();
	}
	free(one);
	free(all);
	free(pieces);
	return 0;
}
