/*
 * Hex text (contract: sg_hex.h). Written out digit by digit from a table
 * rather than with snprintf("%02x"), which costs a format parse per byte
 * on the issuance path (every certificate's serial goes through here).
 */
#include "sg_hex.h"

void sg_hex_encode(char *out, const uint8_t *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}
