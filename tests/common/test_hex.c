/*
 * Tests for sg_hex: every nibble value in both positions, the NUL at
 * 2 * n, empty input (the NUL alone) and that nothing past 2 * n + 1 is
 * written.
 */
#include "sg_hex.h"
#include "sg_test.h"

#include <string.h>

static void t_encode(void)
{
	char out[64];
	memset(out, 'X', sizeof(out));
	sg_hex_encode(out, (const uint8_t *)"\x00\x01\x7f\x80\xab\xff", 6);
	SG_CHECK(strcmp(out, "00017f80abff") == 0);
	SG_CHECK(out[13] == 'X'); /* 2 * n + 1 bytes, no more */

	uint8_t all[16];
	for (unsigned i = 0; i < 16; i++)
		all[i] = (uint8_t)(i * 0x11);
	sg_hex_encode(out, all, sizeof(all));
	SG_CHECK(strcmp(out, "00112233445566778899aabbccddeeff") == 0);
	SG_CHECK(strlen(out) == 32);
}

static void t_empty(void)
{
	char out[4] = "XYZ";
	sg_hex_encode(out, NULL, 0);
	SG_CHECK(out[0] == '\0' && out[1] == 'Y');
}

static void t_digest(void)
{
	/* A 32-byte digest gives the 64 characters (and NUL) callers size for. */
	uint8_t d[32];
	for (unsigned i = 0; i < 32; i++)
		d[i] = (uint8_t)(255 - i);
	char out[65 + 1];
	out[65] = 'X';
	sg_hex_encode(out, d, sizeof(d));
	SG_CHECK(strlen(out) == 64 && out[65] == 'X');
	SG_CHECK(strncmp(out, "fffefdfc", 8) == 0 && strcmp(out + 56, "e3e2e1e0") == 0);
}

SG_TEST_MAIN(SG_TEST(t_encode), SG_TEST(t_empty), SG_TEST(t_digest))
