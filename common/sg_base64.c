/*
 * The base64 codec (sg_base64.h). One table-free value function serves both
 * alphabets: they differ only in the two characters after the digits. The
 * decoder works a quantum at a time, which is where the padding rules live.
 *
 * The decoder has two paths that must agree. The careful one takes a
 * character at a time and owns every rule and every error message. The
 * fast one takes whole quanta of four alphabet characters by table, while
 * the decoder is between quanta and three more bytes fit; at the first
 * quantum that is anything else ('=', a byte outside the alphabet, a
 * quantum split across feeds, a full buffer) it hands over to the careful
 * path, which therefore sees every input that can fail. Why: every request
 * decodes a CSR's PEM and a token's three parts, some 2-3 KB, and the
 * careful path took 2.2 ns a character there (tests/common/test_base64.c
 * checks that both paths give the same bytes and the same errors).
 */
#include "sg_base64.h"

#include <stdlib.h>

#include "sg_guard.h"

static const char std_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* The fast path's tables: a character's value, or BAD outside the
 * alphabet (and for '=', which only the careful path takes). Bytes from
 * 0x80 are outside both alphabets and never index these. */
#define BAD 0xff
/* sixteen a row, as in an ASCII chart */
// clang-format off
static const uint8_t std_values[128] = {
	BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
	BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
	BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,  62, BAD, BAD, BAD,  63,
	 52,  53,  54,  55,  56,  57,  58,  59,  60,  61, BAD, BAD, BAD, BAD, BAD, BAD,
	BAD,   0,   1,   2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,  13,  14,
	 15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25, BAD, BAD, BAD, BAD, BAD,
	BAD,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,
	 41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51, BAD, BAD, BAD, BAD, BAD,
};
static const uint8_t url_values[128] = {
	BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
	BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,
	BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD, BAD,  62, BAD, BAD,
	 52,  53,  54,  55,  56,  57,  58,  59,  60,  61, BAD, BAD, BAD, BAD, BAD, BAD,
	BAD,   0,   1,   2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,  13,  14,
	 15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25, BAD, BAD, BAD, BAD,  63,
	BAD,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,
	 41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51, BAD, BAD, BAD, BAD, BAD,
};
// clang-format on
#undef BAD

static const char *name_of(sg_b64 a)
{
	return a == SG_B64_URL ? "base64url" : "base64";
}

static int value_of(sg_b64 a, uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	const char *tail = (a == SG_B64_URL ? url_alphabet : std_alphabet) + 62;
	if (c == (uint8_t)tail[0])
		return 62;
	if (c == (uint8_t)tail[1])
		return 63;
	return -1;
}

void sg_b64_decoder_init(sg_b64_decoder *d, sg_b64 alphabet, uint8_t *out, size_t cap)
{
	*d = (sg_b64_decoder){.alphabet = alphabet, .out = out, .cap = cap};
}

/* Writes the bytes of the current quantum (data sextets: 4 -> 3 bytes,
 * 3 -> 2, 2 -> 1) after checking that the bits it drops are zero. */
static int flush(sg_b64_decoder *d)
{
	const char *name = name_of(d->alphabet);
	unsigned bytes = d->data - 1;
	unsigned spare = d->data * 6 - bytes * 8;
	SG_ENSURE((d->acc & ((1u << spare) - 1)) == 0, SG_EINVAL, "%s: non-zero trailing bits", name);
	SG_ENSURE(bytes <= d->cap - d->len, SG_EINVAL, "%s: decoded data exceeds %zu bytes", name, d->cap);
	uint32_t v = d->acc >> spare;
	for (unsigned i = bytes; i > 0; i--)
		d->out[d->len++] = (uint8_t)(v >> (8 * (i - 1)));
	d->done = d->pad > 0;
	d->acc = 0;
	d->data = 0;
	d->pad = 0;
	return SG_OK;
}

/* The careful path: one character, with every check. */
static int feed_one(sg_b64_decoder *d, uint8_t c)
{
	const char *name = name_of(d->alphabet);
	bool url = d->alphabet == SG_B64_URL;
	if (c == '=') {
		SG_ENSURE(!url, SG_EINVAL, "base64url: padding is not allowed");
		SG_ENSURE(d->data + d->pad >= 2, SG_EINVAL, "base64: padding is misplaced");
		d->pad++;
	} else {
		int v = value_of(d->alphabet, c);
		if (v < 0) {
			int other = value_of(url ? SG_B64_STD : SG_B64_URL, c);
			SG_ENSURE(other < 0, SG_EINVAL, "%s: '%c' is %s, not %s", name, (char)c,
			          name_of(url ? SG_B64_STD : SG_B64_URL), name);
			SG_BAIL(SG_EINVAL, "%s: byte 0x%02x is outside the alphabet", name, c);
		}
		SG_ENSURE(!d->done && d->pad == 0, SG_EINVAL, "%s: data after padding", name);
		d->acc = (d->acc << 6) | (uint32_t)v;
		d->data++;
	}
	if (d->data + d->pad == 4)
		SG_TRY(flush(d));
	return SG_OK;
}

/* The fast path: whole quanta of alphabet characters from p (n bytes), as
 * long as the decoder is between quanta, has seen no padding and has room
 * for three more bytes. Returns how many characters it took (a multiple of
 * 4); it never fails, it stops. */
static size_t feed_quanta(sg_b64_decoder *d, const uint8_t *p, size_t n)
{
	if (d->data != 0 || d->pad != 0 || d->done)
		return 0;
	const uint8_t *t = d->alphabet == SG_B64_URL ? url_values : std_values;
	size_t i = 0;
	while (n - i >= 4 && d->cap - d->len >= 3) {
		uint8_t c0 = p[i], c1 = p[i + 1], c2 = p[i + 2], c3 = p[i + 3];
		if ((c0 | c1 | c2 | c3) & 0x80)
			break;
		uint8_t v0 = t[c0], v1 = t[c1], v2 = t[c2], v3 = t[c3];
		if ((v0 | v1 | v2 | v3) & 0x80)
			break;
		uint32_t v = (uint32_t)v0 << 18 | (uint32_t)v1 << 12 | (uint32_t)v2 << 6 | v3;
		d->out[d->len] = (uint8_t)(v >> 16);
		d->out[d->len + 1] = (uint8_t)(v >> 8);
		d->out[d->len + 2] = (uint8_t)v;
		d->len += 3;
		i += 4;
	}
	return i;
}

int sg_b64_decoder_feed(sg_b64_decoder *d, const uint8_t *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		i += feed_quanta(d, p + i, n - i);
		if (i < n)
			SG_TRY(feed_one(d, p[i++]));
	}
	return SG_OK;
}

int sg_b64_decoder_finish(sg_b64_decoder *d, size_t *out_len)
{
	if (d->data + d->pad != 0) {
		SG_ENSURE(d->alphabet == SG_B64_URL, SG_EINVAL,
			  "base64: truncated (not a multiple of 4 characters)");
		SG_ENSURE(d->data >= 2, SG_EINVAL, "base64url: impossible length");
		SG_TRY(flush(d));
	}
	*out_len = d->len;
	return SG_OK;
}

int sg_b64_decode(sg_b64 alphabet, const char *in, size_t n, uint8_t *out, size_t cap, size_t *out_len)
{
	sg_b64_decoder d;
	sg_b64_decoder_init(&d, alphabet, out, cap);
	SG_TRY(sg_b64_decoder_feed(&d, (const uint8_t *)in, n));
	return sg_b64_decoder_finish(&d, out_len);
}

int sg_b64_decode_new(sg_b64 alphabet, const char *what, const char *in, size_t n, size_t max, char **out,
                      size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	/* The largest output n characters can give: whole quanta of 3 bytes,
	 * and for base64url 1 or 2 more from a partial one; '=' decodes to
	 * nothing. The bound is checked before anything is allocated. */
	size_t pad = alphabet == SG_B64_STD ? (n >= 1 && in[n - 1] == '=') + (n >= 2 && in[n - 2] == '=') : 0;
	size_t most = n / 4 * 3 + (n % 4 > 1 ? n % 4 - 1 : 0) - (n % 4 == 0 ? pad : 0);
	SG_ENSURE(most <= max, SG_EINVAL, "%s is larger than %zu bytes", what, max);
	size_t cap = most + 1;
	char *buf = malloc(cap);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory");
	size_t got = 0;
	int rc = sg_b64_decode(alphabet, in, n, (uint8_t *)buf, most, &got);
	if (rc != SG_OK) {
		free(buf);
		SG_BAIL(SG_EINVAL, "%s is not base64: %s", what, sg_error_last()->msg);
	}
	buf[got] = 0;
	*out = buf;
	*out_len = got;
	return SG_OK;
}

size_t sg_b64_encoded_len(sg_b64 alphabet, size_t n)
{
	return alphabet == SG_B64_STD ? (n + 2) / 3 * 4 : n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

int sg_b64_encode(sg_b64 alphabet, const uint8_t *in, size_t n, char *out, size_t cap)
{
	SG_ENSURE(n <= SIZE_MAX / 4 - 3 && sg_b64_encoded_len(alphabet, n) < cap, SG_EINVAL,
		  "%s: output does not fit", name_of(alphabet));
	const char *a = alphabet == SG_B64_URL ? url_alphabet : std_alphabet;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		size_t have = n - i < 3 ? n - i : 3;
		uint32_t v = (uint32_t)in[i] << 16;
		if (have > 1)
			v |= (uint32_t)in[i + 1] << 8;
		if (have > 2)
			v |= in[i + 2];
		for (size_t k = 0; k < 4; k++) {
			if (k <= have)
				out[o++] = a[(v >> (18 - 6 * k)) & 0x3f];
			else if (alphabet == SG_B64_STD)
				out[o++] = '=';
		}
	}
	out[o] = '\0';
	return SG_OK;
}
