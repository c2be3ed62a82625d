/*
 * Tests for sg_b64_decode_new, the allocating decoder of untrusted
 * strings: the size bound holds exactly at max for both alphabets (with
 * and without padding, a partial base64url quantum), is checked before
 * anything is decoded, the output is NUL-terminated, and a refused value
 * leaves *out NULL and names itself in the error.
 */
#include "sg_base64.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

static void t_decodes(void)
{
	char *out = NULL;
	size_t len = 99;
	SG_CHECK_OK(sg_b64_decode_new(SG_B64_STD, "request", "aGVsbG8=", 8, 5, &out, &len));
	SG_CHECK(len == 5 && out && strcmp(out, "hello") == 0);
	free(out);
	SG_CHECK_OK(sg_b64_decode_new(SG_B64_STD, "x", "YQ==", 4, 1, &out, &len));
	SG_CHECK(len == 1 && strcmp(out, "a") == 0);
	free(out);
	SG_CHECK_OK(sg_b64_decode_new(SG_B64_URL, "x", "-_8", 3, 2, &out, &len));
	SG_CHECK(len == 2 && (uint8_t)out[0] == 0xfb && (uint8_t)out[1] == 0xff && out[2] == 0);
	free(out);
	SG_CHECK_OK(sg_b64_decode_new(SG_B64_STD, "x", "", 0, 0, &out, &len));
	SG_CHECK(len == 0 && out && out[0] == 0);
	free(out);
}

/* max is the decoded size, exactly: one byte less is refused. */
static void t_bound(void)
{
	static const struct {
		sg_b64 a;
		const char *in;
		size_t size;
	} rows[] = {
	    {SG_B64_STD, "aGVsbG8=", 5}, {SG_B64_STD, "YQ==", 1}, {SG_B64_STD, "aGVsbG8h", 6},
	    {SG_B64_URL, "aGVsbG8", 5},  {SG_B64_URL, "YQ", 1},   {SG_B64_URL, "aGVsbG8h", 6},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char *out = (char *)&out;
		size_t len = 99;
		SG_CHECK_OK(
		    sg_b64_decode_new(rows[i].a, "v", rows[i].in, strlen(rows[i].in), rows[i].size, &out, &len));
		SG_CHECK(len == rows[i].size);
		free(out);
		out = (char *)&out;
		SG_CHECK_RC(
		    sg_b64_decode_new(rows[i].a, "v", rows[i].in, strlen(rows[i].in), rows[i].size - 1, &out, &len),
		    SG_EINVAL);
		SG_CHECK_MSG("v is larger than");
		SG_CHECK(out == NULL && len == 0);
	}
	/* A long value is refused before anything is decoded or allocated
	 * for it: its characters are never looked at past the padding. */
	size_t n = (size_t)4 << 20;
	char *big = malloc(n);
	SG_CHECK(big != NULL);
	if (!big)
		return;
	memset(big, '*', n); /* not base64 at all: only the size is judged */
	char *out = (char *)&out;
	size_t len = 99;
	SG_CHECK_RC(sg_b64_decode_new(SG_B64_STD, "big", big, n, 1u << 20, &out, &len), SG_EINVAL);
	SG_CHECK_MSG("big is larger than 1048576 bytes");
	SG_CHECK(out == NULL && len == 0);
	free(big);
}

static void t_refused(void)
{
	static const char *const bad[] = {"aGVsbG8", "-_-_", "aGVs bG8=", "aGVsbG9=", "aGVsbG8=aGVs", "@@@@"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *out = (char *)&out;
		size_t len = 99;
		SG_CHECK_RC(sg_b64_decode_new(SG_B64_STD, "field", bad[i], strlen(bad[i]), 100, &out, &len), SG_EINVAL);
		SG_CHECK_MSG("field is not base64: ");
		SG_CHECK(out == NULL && len == 0);
	}
}

SG_TEST_MAIN(SG_TEST(t_decodes), SG_TEST(t_bound), SG_TEST(t_refused))
