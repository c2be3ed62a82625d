/*
 * Protobuf varints (contract: sg_varint.h). Only the writer is here: each
 * reader in proto/ checks its input with its own message context (which
 * field, which offset), and those checks are the reader's business.
 */
#include "sg_varint.h"

size_t sg_varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

size_t sg_varint_put(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}
