/*
 * sg_varint: the protobuf base-128 varint writer (protobuf encoding
 * guide, "Base 128 Varints"), for the hand-written response encoders in
 * proto/ (sg_istio's CreateCertificate answer, sg_policypb's policy
 * answer). It lives in common/ with the other wire encodings (sg_der,
 * sg_base64) because it needs no protobuf library: the two encoders size
 * a buffer with sg_varint_size, then fill it with sg_varint_put.
 *
 * Pure functions over caller-owned memory; nothing allocates or fails.
 */
#ifndef SG_VARINT_H
#define SG_VARINT_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

/* The most bytes a varint of a 64-bit value takes. */
#define SG_VARINT_MAX 10

/* How many bytes sg_varint_put writes for v: 1..SG_VARINT_MAX. */
SG_API size_t sg_varint_size(uint64_t v);
/* Writes v as a varint (seven bits a byte, least significant first, the
 * high bit set on every byte but the last) at p, which must have room for
 * sg_varint_size(v) bytes; returns that count. */
SG_API size_t sg_varint_put(uint8_t *p, uint64_t v);

#endif
