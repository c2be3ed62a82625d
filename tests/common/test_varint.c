/*
 * Tests for sg_varint: the protobuf encoding guide's examples, every size
 * boundary (2^(7k) - 1 and 2^(7k)), the 10-byte maximum, and that the
 * size function agrees with what the writer writes.
 */
#include "sg_test.h"
#include "sg_varint.h"

#include <string.h>

static void t_examples(void)
{
	uint8_t b[SG_VARINT_MAX + 1];
	SG_CHECK(sg_varint_put(b, 0) == 1 && b[0] == 0x00);
	SG_CHECK(sg_varint_put(b, 1) == 1 && b[0] == 0x01);
	SG_CHECK(sg_varint_put(b, 127) == 1 && b[0] == 0x7f);
	SG_CHECK(sg_varint_put(b, 128) == 2 && b[0] == 0x80 && b[1] == 0x01);
	SG_CHECK(sg_varint_put(b, 150) == 2 && b[0] == 0x96 && b[1] == 0x01); /* the guide's example */
	SG_CHECK(sg_varint_put(b, 300) == 2 && b[0] == 0xac && b[1] == 0x02);
	memset(b, 0xee, sizeof(b));
	SG_CHECK(sg_varint_put(b, UINT64_MAX) == SG_VARINT_MAX);
	for (int i = 0; i < 9; i++)
		SG_CHECK(b[i] == 0xff);
	SG_CHECK(b[9] == 0x01 && b[10] == 0xee); /* nothing past the tenth byte */
	/* An int32 enum's -1, as protobuf writes it: ten bytes. */
	SG_CHECK(sg_varint_size((uint64_t)(int64_t)-1) == 10);
}

static uint64_t decode(const uint8_t *b, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)(b[i] & 0x7f) << (7 * i);
	return v;
}

static void t_boundaries(void)
{
	uint8_t b[SG_VARINT_MAX];
	for (unsigned k = 1; k < 10; k++) {
		uint64_t edge = (uint64_t)1 << (7 * k);
		SG_CHECK(sg_varint_size(edge - 1) == k);
		SG_CHECK(sg_varint_size(edge) == k + 1);
		size_t n = sg_varint_put(b, edge - 1);
		SG_CHECK(n == k && decode(b, n) == edge - 1 && (b[n - 1] & 0x80) == 0);
		n = sg_varint_put(b, edge);
		SG_CHECK(n == k + 1 && decode(b, n) == edge && (b[n - 1] & 0x80) == 0);
		for (size_t i = 0; i + 1 < n; i++)
			SG_CHECK(b[i] & 0x80); /* the continuation bit on all but the last */
	}
	SG_CHECK(sg_varint_size(0) == 1);
}

SG_TEST_MAIN(SG_TEST(t_examples), SG_TEST(t_boundaries))
