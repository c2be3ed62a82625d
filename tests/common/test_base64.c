/*
 * Tests for the base64 decoder's two paths (common/sg_base64.c): the fast
 * one, which takes whole quanta by table, and the careful one, which takes
 * a character at a time and owns every rule. Feeding a decoder one byte
 * per call never gives the fast path a whole quantum, so it is the careful
 * path alone; the same input fed at once goes through both. The two must
 * give the same bytes, the same length, the same return code and the same
 * error, for valid input, for every byte value at every position of a
 * valid text, for padding anywhere, for every output room, and for a
 * quantum split across feeds. RFC 4648 §10's vectors pin the answers.
 */
#include "sg_base64.h"
#include "sg_error.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_MAX 256

typedef struct outcome {
	int rc;
	size_t len;
	uint8_t out[OUT_MAX];
	char msg[512];
} outcome;

/* Decodes in (n bytes) with room for cap bytes, fed in pieces of `piece`
 * bytes (0: all at once), then finished. */
static void decode(sg_b64 a, const char *in, size_t n, size_t cap, size_t piece, outcome *o)
{
	memset(o, 0, sizeof(*o));
	sg_b64_decoder d;
	sg_b64_decoder_init(&d, a, o->out, cap);
	int rc = SG_OK;
	for (size_t i = 0; i < n && rc == SG_OK;) {
		size_t k = piece == 0 || piece > n - i ? n - i : piece;
		rc = sg_b64_decoder_feed(&d, (const uint8_t *)in + i, k);
		i += k;
	}
	if (rc == SG_OK)
		rc = sg_b64_decoder_finish(&d, &o->len);
	o->rc = rc;
	if (rc != SG_OK)
		snprintf(o->msg, sizeof(o->msg), "%s", sg_error_last()->msg);
}

static int mismatches;

/* The careful path alone against both paths (and against pieces of 5,
 * which split quanta), for one input. */
static void agree(sg_b64 a, const char *in, size_t n, size_t cap)
{
	outcome one, all, five;
	decode(a, in, n, cap, 1, &one);
	decode(a, in, n, cap, 0, &all);
	decode(a, in, n, cap, 5, &five);
	const outcome *other[] = {&all, &five};
	for (size_t i = 0; i < 2; i++) {
		const outcome *o = other[i];
		bool same = o->rc == one.rc && strcmp(o->msg, one.msg) == 0 &&
		            (one.rc != SG_OK || (o->len == one.len && memcmp(o->out, one.out, one.len) == 0));
		if (!same && mismatches++ < 5)
			fprintf(stderr,
			        "mismatch on \"%.*s\" (cap %zu): %d \"%s\" against the careful path's %d \"%s\"\n",
			        (int)n, in, cap, o->rc, o->msg, one.rc, one.msg);
	}
}

static void t_rfc4648_vectors(void)
{
	static const struct {
		const char *plain, *std, *url;
	} rows[] = {
	    {"", "", ""},
	    {"f", "Zg==", "Zg"},
	    {"fo", "Zm8=", "Zm8"},
	    {"foo", "Zm9v", "Zm9v"},
	    {"foob", "Zm9vYg==", "Zm9vYg"},
	    {"fooba", "Zm9vYmE=", "Zm9vYmE"},
	    {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		uint8_t out[16];
		size_t len = 99;
		SG_CHECK_OK(sg_b64_decode(SG_B64_STD, rows[i].std, strlen(rows[i].std), out, sizeof(out), &len));
		SG_CHECK(len == strlen(rows[i].plain) && memcmp(out, rows[i].plain, len) == 0);
		len = 99;
		SG_CHECK_OK(sg_b64_decode(SG_B64_URL, rows[i].url, strlen(rows[i].url), out, sizeof(out), &len));
		SG_CHECK(len == strlen(rows[i].plain) && memcmp(out, rows[i].plain, len) == 0);
	}
	/* The two characters where the alphabets differ, in a whole quantum
	 * (the fast path's case): 0xfb 0xff 0xbf. */
	uint8_t out[3];
	size_t len = 0;
	SG_CHECK_OK(sg_b64_decode(SG_B64_STD, "+/+/", 4, out, sizeof(out), &len));
	SG_CHECK(len == 3 && out[0] == 0xfb && out[1] == 0xff && out[2] == 0xbf);
	SG_CHECK_OK(sg_b64_decode(SG_B64_URL, "-_-_", 4, out, sizeof(out), &len));
	SG_CHECK(len == 3 && out[0] == 0xfb && out[1] == 0xff && out[2] == 0xbf);
	/* ... and each is refused by the other alphabet, by name. */
	SG_CHECK_RC(sg_b64_decode(SG_B64_STD, "AAAA-_-_", 8, out, sizeof(out), &len), SG_EINVAL);
	SG_CHECK_MSG("base64: '-' is base64url, not base64");
	SG_CHECK_RC(sg_b64_decode(SG_B64_URL, "AAAA+/+/", 8, out, sizeof(out), &len), SG_EINVAL);
	SG_CHECK_MSG("base64url: '+' is base64, not base64url");
}

/* Valid texts of every length up to 96 bytes, both alphabets, with room
 * for every output size from none to enough. */
static void t_valid_texts_and_room(void)
{
	uint8_t plain[96];
	for (size_t i = 0; i < sizeof(plain); i++)
		plain[i] = (uint8_t)(i * 167 + 13);
	for (int a = 0; a < 2; a++) {
		sg_b64 al = a ? SG_B64_URL : SG_B64_STD;
		for (size_t n = 0; n <= sizeof(plain); n++) {
			char text[160];
			SG_CHECK_OK(sg_b64_encode(al, plain, n, text, sizeof(text)));
			size_t tlen = strlen(text);
			outcome o;
			decode(al, text, tlen, n, 0, &o);
			SG_CHECK(o.rc == SG_OK && o.len == n && memcmp(o.out, plain, n) == 0);
			for (size_t cap = 0; cap <= n + 1; cap++)
				agree(al, text, tlen, cap);
		}
	}
	SG_CHECK(mismatches == 0);
}

/* Every byte value at every position of a valid 40-character text, and
 * '=' twice from every position: the fast path must stop wherever the
 * careful path would refuse, and say nothing of its own. */
static void t_every_byte_everywhere(void)
{
	static const uint8_t plain[30] = "signet decodes untrusted text";
	for (int a = 0; a < 2; a++) {
		sg_b64 al = a ? SG_B64_URL : SG_B64_STD;
		char text[48];
		SG_CHECK_OK(sg_b64_encode(al, plain, sizeof(plain), text, sizeof(text)));
		size_t tlen = strlen(text);
		SG_CHECK(tlen == 40);
		for (size_t pos = 0; pos < tlen; pos++) {
			for (int c = 0; c < 256; c++) {
				char t[48];
				memcpy(t, text, tlen);
				t[pos] = (char)c;
				agree(al, t, tlen, OUT_MAX);
			}
			char t[48];
			memcpy(t, text, tlen);
			t[pos] = '=';
			if (pos + 1 < tlen)
				t[pos + 1] = '=';
			agree(al, t, tlen, OUT_MAX);
			agree(al, t, pos + 2 <= tlen ? pos + 2 : tlen, OUT_MAX); /* ends with the padding */
		}
	}
	SG_CHECK(mismatches == 0);
}

/* Texts in pieces: a quantum split across feeds is finished by the
 * careful path, and the fast path takes over again at the next quantum. */
static void t_pieces(void)
{
	static const char text[] = "c2lnbmV0IGRlY29kZXMgdW50cnVzdGVkIHRleHQ=";
	size_t n = strlen(text);
	for (size_t piece = 1; piece <= n; piece++) {
		outcome o;
		decode(SG_B64_STD, text, n, OUT_MAX, piece, &o);
		SG_CHECK(o.rc == SG_OK && o.len == 29 && memcmp(o.out, "signet decodes untrusted text", 29) == 0);
	}
	/* Data after padding is refused however the text is cut. */
	static const char after[] = "Zg==Zm9v";
	for (size_t piece = 1; piece <= 8; piece++) {
		outcome o;
		decode(SG_B64_STD, after, 8, OUT_MAX, piece, &o);
		SG_CHECK(o.rc == SG_EINVAL && strstr(o.msg, "base64: data after padding") != NULL);
	}
}

SG_TEST_MAIN(SG_TEST(t_rfc4648_vectors), SG_TEST(t_valid_texts_and_room), SG_TEST(t_every_byte_everywhere),
             SG_TEST(t_pieces))
