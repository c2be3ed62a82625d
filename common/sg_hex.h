/*
 * sg_hex: lower-case hexadecimal text of bytes (serial numbers, digests
 * shown or used as names). One definition, so a digest printed by one
 * module reads the same as the one another module compares it with.
 *
 * A pure function over caller-owned memory; nothing allocates or fails.
 */
#ifndef SG_HEX_H
#define SG_HEX_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

/* Writes the 2 * n lower-case hex digits of p[0..n) and a NUL to out,
 * which must hold 2 * n + 1 bytes (n == 0 writes the NUL alone). p may be
 * NULL when n is 0. */
SG_API void sg_hex_encode(char *out, const uint8_t *p, size_t n);

#endif
