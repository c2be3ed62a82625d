/*
 * Tests for sg_der: the reader against hostile encodings (truncation,
 * non-minimal and long-form lengths, multi-byte tags, sizes at and past
 * SG_DER_MAX_LEN), the typed readers (INTEGER, BIT STRING, BOOLEAN, times)
 * and the writer (poisoning, length fix-up across every length-form
 * boundary, round trips through the reader).
 */
#include "sg_der.h"
#include "sg_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define B(...) ((sg_slice){(const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})})

static sg_slice str(const char *s)
{
	return (sg_slice){(const uint8_t *)s, strlen(s)};
}

/* Reads one TLV of any tag from s; checks the reader is then exhausted. */
static int read_one(sg_slice s, uint8_t *tag, sg_slice *content)
{
	sg_reader r = sg_reader_of(s);
	int rc = sg_der_read_any(&r, tag, content, NULL);
	if (rc == 0 && !sg_reader_done(&r))
		return 1;
	return rc;
}

static void t_read_basic(void)
{
	sg_slice in = B(0x30, 0x06, 0x02, 0x01, 0x05, 0x04, 0x01, 0xaa, 0x05, 0x00);
	sg_reader r = sg_reader_of(in);
	sg_slice c, whole, v;
	uint8_t tag;
	SG_CHECK_OK(sg_der_peek(&r, &tag));
	SG_CHECK(tag == SG_DER_SEQUENCE);
	SG_CHECK_OK(sg_der_read(&r, SG_DER_SEQUENCE, &c, &whole));
	SG_CHECK(whole.p == in.p && whole.len == 8 && c.p == in.p + 2 && c.len == 6);
	SG_CHECK(!sg_reader_done(&r) && sg_reader_left(&r) == 2);
	sg_reader sub = sg_reader_of(c);
	uint64_t u;
	SG_CHECK_OK(sg_der_read_uint(&sub, &u));
	SG_CHECK(u == 5);
	SG_CHECK_OK(sg_der_read(&sub, SG_DER_OCTET_STRING, &v, NULL));
	SG_CHECK(sg_slice_eq(v, "\xaa", 1));
	SG_CHECK(sg_reader_done(&sub));
	/* Wrong tag: error, nothing consumed. */
	size_t off = r.off;
	SG_CHECK_RC(sg_der_read(&r, SG_DER_INTEGER, &v, NULL), SG_EINVAL);
	SG_CHECK_MSG("expected tag 0x02, found 0x05");
	SG_CHECK(r.off == off);
	SG_CHECK_OK(sg_der_read(&r, SG_DER_NULL, &v, NULL));
	SG_CHECK(v.len == 0 && sg_reader_done(&r));
	SG_CHECK_RC(sg_der_peek(&r, &tag), SG_EINVAL);
	SG_CHECK_RC(sg_der_read_any(&r, &tag, &v, NULL), SG_EINVAL);

	sg_slice empty = {NULL, 0};
	r = sg_reader_of(empty);
	SG_CHECK(sg_reader_done(&r));
	SG_CHECK_RC(sg_der_peek(&r, &tag), SG_EINVAL);
	SG_CHECK_OK(sg_reader_bytes(&r, 0, &v));
	SG_CHECK_RC(sg_reader_bytes(&r, 1, &v), SG_EINVAL);

	r = sg_reader_of(B(1, 2, 3));
	SG_CHECK_RC(sg_reader_bytes(&r, 4, &v), SG_EINVAL);
	SG_CHECK(r.off == 0);
	SG_CHECK_RC(sg_reader_bytes(&r, SIZE_MAX, &v), SG_EINVAL);
	SG_CHECK_OK(sg_reader_bytes(&r, 3, &v));
	SG_CHECK(sg_reader_done(&r));

	SG_CHECK(sg_slice_eq(str("ab"), "ab", 2) && !sg_slice_eq(str("ab"), "ac", 2) &&
		 !sg_slice_eq(str("ab"), "a", 1) && sg_slice_eq(empty, "", 0));
}

static void t_read_hostile(void)
{
	uint8_t tag;
	sg_slice c;
	/* Truncated: tag only, length only, content short, length bytes short. */
	SG_CHECK_RC(read_one(B(0x04), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x05, 'a', 'b', 'c'), &tag, &c), SG_EINVAL);
	SG_CHECK_MSG("truncated");
	SG_CHECK_RC(read_one(B(0x04, 0x82, 0x01), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x81), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x30, 0x10, 0x02, 0x01), &tag, &c), SG_EINVAL);
	/* Long form for short lengths and leading zero length octets. */
	SG_CHECK_RC(read_one(B(0x04, 0x81, 0x05, 'h', 'e', 'l', 'l', 'o'), &tag, &c), SG_EINVAL);
	SG_CHECK_MSG("not minimal");
	SG_CHECK_RC(read_one(B(0x04, 0x81, 0x7f), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x82, 0x00, 0x80), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x82, 0x00, 0xff), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x83, 0x00, 0x01, 0x00), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x81, 0x00), &tag, &c), SG_EINVAL);
	/* Indefinite length, reserved 0xff, more than three length octets. */
	SG_CHECK_RC(read_one(B(0x30, 0x80, 0x00, 0x00), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0xff), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x84, 0x00, 0x00, 0x00, 0x01, 0x00), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x84, 0x01, 0x00, 0x00, 0x00), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0x04, 0x88, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), &tag, &c), SG_EINVAL);
	/* Multi-byte (high) tag numbers, primitive and constructed. */
	SG_CHECK_RC(read_one(B(0x1f, 0x81, 0x00, 0x00), &tag, &c), SG_EINVAL);
	SG_CHECK_MSG("multi-byte tags");
	SG_CHECK_RC(read_one(B(0x3f, 0x22, 0x00), &tag, &c), SG_EINVAL);
	SG_CHECK_RC(read_one(B(0xbf, 0x01, 0x00), &tag, &c), SG_EINVAL);
	/* Trailing garbage is left for the caller to refuse. */
	SG_CHECK(read_one(B(0x05, 0x00, 0x00), &tag, &c) == 1);
}

static void t_read_lengths(void)
{
	/* Minimal lengths at each form boundary read back exactly. */
	static const size_t sizes[] = {0, 1, 127, 128, 255, 256, 65535, 65536, SG_DER_MAX_LEN};
	uint8_t *buf = calloc(1, SG_DER_MAX_LEN + 16);
	SG_CHECK(buf != NULL);
	if (!buf)
		return;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i], h = 0;
		buf[h++] = SG_DER_OCTET_STRING;
		if (n < 0x80) {
			buf[h++] = (uint8_t)n;
		} else if (n < 0x100) {
			buf[h++] = 0x81;
			buf[h++] = (uint8_t)n;
		} else if (n < 0x10000) {
			buf[h++] = 0x82;
			buf[h++] = (uint8_t)(n >> 8);
			buf[h++] = (uint8_t)n;
		} else {
			buf[h++] = 0x83;
			buf[h++] = (uint8_t)(n >> 16);
			buf[h++] = (uint8_t)(n >> 8);
			buf[h++] = (uint8_t)n;
		}
		uint8_t tag;
		sg_slice c;
		SG_CHECK_OK(read_one((sg_slice){buf, h + n}, &tag, &c));
		SG_CHECK(c.len == n && c.p == buf + h);
		/* One byte short is truncated. */
		if (n > 0)
			SG_CHECK_RC(read_one((sg_slice){buf, h + n - 1}, &tag, &c), SG_EINVAL);
	}
	/* One past the limit is refused even when the bytes are there. */
	size_t n = SG_DER_MAX_LEN + 1;
	uint8_t *big = calloc(1, n + 5);
	SG_CHECK(big != NULL);
	if (big) {
		big[0] = 0x04;
		big[1] = 0x83;
		big[2] = (uint8_t)(n >> 16);
		big[3] = (uint8_t)(n >> 8);
		big[4] = (uint8_t)n;
		uint8_t tag;
		sg_slice c;
		SG_CHECK_RC(read_one((sg_slice){big, n + 5}, &tag, &c), SG_EINVAL);
		SG_CHECK_MSG("too large");
		/* And without the bytes: refused before looking for them. */
		SG_CHECK_RC(read_one((sg_slice){big, 5}, &tag, &c), SG_EINVAL);
		SG_CHECK_MSG("too large");
		free(big);
	}
	free(buf);
}

static void t_integers(void)
{
	const struct {
		sg_slice in;
		int rc;
		uint64_t v;
	} cases[] = {
		{B(0x02, 0x01, 0x00), 0, 0},
		{B(0x02, 0x01, 0x7f), 0, 127},
		{B(0x02, 0x02, 0x00, 0x80), 0, 128},
		{B(0x02, 0x02, 0x01, 0x00), 0, 256},
		{B(0x02, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 0, UINT64_MAX},
		{B(0x02, 0x09, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0), 0, (uint64_t)1 << 63},
		{B(0x02, 0x08, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 0, INT64_MAX},
		{B(0x02, 0x09, 0x01, 0, 0, 0, 0, 0, 0, 0, 0), SG_EINVAL, 0},    /* 2^64: too large */
		{B(0x02, 0x00), SG_EINVAL, 0},                                 /* empty */
		{B(0x02, 0x02, 0x00, 0x7f), SG_EINVAL, 0},                     /* non-minimal */
		{B(0x02, 0x02, 0x00, 0x00), SG_EINVAL, 0},                     /* non-minimal zero */
		{B(0x02, 0x01, 0x80), SG_EINVAL, 0},                           /* -128 */
		{B(0x02, 0x01, 0xff), SG_EINVAL, 0},                           /* -1 */
		{B(0x02, 0x02, 0xff, 0x80), SG_EINVAL, 0},                     /* non-minimal negative */
		{B(0x02, 0x02, 0xff, 0x7f), SG_EINVAL, 0},                     /* minimal negative */
		{B(0x04, 0x01, 0x01), SG_EINVAL, 0},                           /* wrong tag */
		{B(0x02, 0x81, 0x01, 0x01), SG_EINVAL, 0},                     /* long-form length */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sg_reader r = sg_reader_of(cases[i].in);
		uint64_t v = 42;
		int rc = sg_der_read_uint(&r, &v);
		if (rc != cases[i].rc)
			fprintf(stderr, "integer case %zu: rc %d\n", i, rc);
		SG_CHECK(rc == cases[i].rc);
		if (rc == 0)
			SG_CHECK(v == cases[i].v && sg_reader_done(&r));
	}
	sg_slice mag;
	sg_reader r = sg_reader_of(B(0x02, 0x03, 0x00, 0x80, 0x01));
	SG_CHECK_OK(sg_der_read_unsigned_bytes(&r, &mag));
	SG_CHECK(sg_slice_eq(mag, "\x80\x01", 2));
	r = sg_reader_of(B(0x02, 0x01, 0x00));
	SG_CHECK_OK(sg_der_read_unsigned_bytes(&r, &mag));
	SG_CHECK(sg_slice_eq(mag, "\x00", 1));
	/* A 20-byte serial is fine for unsigned_bytes, too big for uint. */
	r = sg_reader_of(B(0x02, 0x14, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19));
	SG_CHECK_OK(sg_der_read_unsigned_bytes(&r, &mag));
	SG_CHECK(mag.len == 20);
	r = sg_reader_of(B(0x02, 0x02, 0x80, 0x00));
	SG_CHECK_RC(sg_der_read_unsigned_bytes(&r, &mag), SG_EINVAL);
	SG_CHECK_MSG("negative");
	r = sg_reader_of(B(0x02, 0x02, 0x00, 0x01));
	SG_CHECK_RC(sg_der_read_unsigned_bytes(&r, &mag), SG_EINVAL);
	SG_CHECK_MSG("not minimal");
}

static void t_bits_bool(void)
{
	sg_slice bits;
	sg_reader r = sg_reader_of(B(0x03, 0x03, 0x00, 0xde, 0xad));
	SG_CHECK_OK(sg_der_read_bits(&r, &bits));
	SG_CHECK(sg_slice_eq(bits, "\xde\xad", 2));
	r = sg_reader_of(B(0x03, 0x01, 0x00));
	SG_CHECK_OK(sg_der_read_bits(&r, &bits));
	SG_CHECK(bits.len == 0);
	r = sg_reader_of(B(0x03, 0x02, 0x07, 0x80));
	SG_CHECK_RC(sg_der_read_bits(&r, &bits), SG_EINVAL);
	SG_CHECK_MSG("unused bits");
	r = sg_reader_of(B(0x03, 0x02, 0x01, 0xfe));
	SG_CHECK_RC(sg_der_read_bits(&r, &bits), SG_EINVAL);
	r = sg_reader_of(B(0x03, 0x01, 0x08));
	SG_CHECK_RC(sg_der_read_bits(&r, &bits), SG_EINVAL);
	r = sg_reader_of(B(0x03, 0x00));
	SG_CHECK_RC(sg_der_read_bits(&r, &bits), SG_EINVAL);
	SG_CHECK_MSG("empty BIT STRING");

	bool b = false;
	r = sg_reader_of(B(0x01, 0x01, 0xff));
	SG_CHECK_OK(sg_der_read_bool(&r, &b));
	SG_CHECK(b);
	r = sg_reader_of(B(0x01, 0x01, 0x00));
	SG_CHECK_OK(sg_der_read_bool(&r, &b));
	SG_CHECK(!b);
	r = sg_reader_of(B(0x01, 0x01, 0x01));
	SG_CHECK_RC(sg_der_read_bool(&r, &b), SG_EINVAL);
	r = sg_reader_of(B(0x01, 0x02, 0xff, 0xff));
	SG_CHECK_RC(sg_der_read_bool(&r, &b), SG_EINVAL);
	r = sg_reader_of(B(0x01, 0x00));
	SG_CHECK_RC(sg_der_read_bool(&r, &b), SG_EINVAL);
}

static void t_times(void)
{
	static const struct {
		uint8_t tag;
		const char *s;
		int rc;
		int64_t t;
	} cases[] = {
		{SG_DER_UTCTIME, "700101000000Z", 0, 0},
		{SG_DER_UTCTIME, "491231235959Z", 0, 2524607999LL},
		{SG_DER_UTCTIME, "500101000000Z", 0, -631152000LL},
		{SG_DER_UTCTIME, "000229000000Z", 0, 951782400LL},      /* 2000: leap */
		{SG_DER_UTCTIME, "230229000000Z", SG_EINVAL, 0},        /* 2023: common */
		{SG_DER_UTCTIME, "240229120000Z", 0, 1709208000LL},
		{SG_DER_UTCTIME, "4912312359590", SG_EINVAL, 0},        /* no Z */
		{SG_DER_UTCTIME, "491231235959", SG_EINVAL, 0},         /* short */
		{SG_DER_UTCTIME, "4912312359Z", SG_EINVAL, 0},          /* no seconds */
		{SG_DER_UTCTIME, "491231235959+0000", SG_EINVAL, 0},    /* offset */
		{SG_DER_UTCTIME, "491331235959Z", SG_EINVAL, 0},        /* month 13 */
		{SG_DER_UTCTIME, "490001000000Z", SG_EINVAL, 0},        /* month 0 */
		{SG_DER_UTCTIME, "490100000000Z", SG_EINVAL, 0},        /* day 0 */
		{SG_DER_UTCTIME, "490132000000Z", SG_EINVAL, 0},        /* day 32 */
		{SG_DER_UTCTIME, "490431000000Z", SG_EINVAL, 0},        /* April 31 */
		{SG_DER_UTCTIME, "490101240000Z", SG_EINVAL, 0},        /* hour 24 */
		{SG_DER_UTCTIME, "490101006000Z", SG_EINVAL, 0},        /* minute 60 */
		{SG_DER_UTCTIME, "490101000060Z", SG_EINVAL, 0},        /* leap second */
		{SG_DER_UTCTIME, "4a0101000000Z", SG_EINVAL, 0},
		{SG_DER_UTCTIME, "49-101000000Z", SG_EINVAL, 0},
		{SG_DER_UTCTIME, "49 101000000Z", SG_EINVAL, 0},
		{SG_DER_UTCTIME, "20240229000000Z", SG_EINVAL, 0},      /* generalized form */
		{SG_DER_GENERALIZEDTIME, "20240229000000Z", 0, 1709164800LL},
		{SG_DER_GENERALIZEDTIME, "19000229000000Z", SG_EINVAL, 0}, /* 1900: common */
		{SG_DER_GENERALIZEDTIME, "20000229000000Z", 0, 951782400LL},
		{SG_DER_GENERALIZEDTIME, "99991231235959Z", 0, 253402300799LL},
		{SG_DER_GENERALIZEDTIME, "19491231235959Z", 0, -631152001LL},
		{SG_DER_GENERALIZEDTIME, "00000101000000Z", 0, -62167219200LL},
		{SG_DER_GENERALIZEDTIME, "20241301000000Z", SG_EINVAL, 0},
		{SG_DER_GENERALIZEDTIME, "20240101000000.5Z", SG_EINVAL, 0},
		{SG_DER_GENERALIZEDTIME, "20240101000000", SG_EINVAL, 0},
		{SG_DER_GENERALIZEDTIME, "202401010000000", SG_EINVAL, 0},
		{SG_DER_GENERALIZEDTIME, "491231235959Z", SG_EINVAL, 0},
		{SG_DER_OCTET_STRING, "491231235959Z", SG_EINVAL, 0},
		{SG_DER_UTCTIME, "", SG_EINVAL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t t = 7;
		int rc = sg_der_parse_time(cases[i].tag, str(cases[i].s), &t);
		if (rc != cases[i].rc || (rc == 0 && t != cases[i].t))
			fprintf(stderr, "time %s: rc %d t %lld\n", cases[i].s, rc, (long long)t);
		SG_CHECK(rc == cases[i].rc);
		if (rc == 0)
			SG_CHECK(t == cases[i].t);
		else
			SG_CHECK(t == 7);
	}
	sg_slice empty = {NULL, 0};
	int64_t t;
	SG_CHECK_RC(sg_der_parse_time(SG_DER_GENERALIZEDTIME, empty, &t), SG_EINVAL);
}

static void t_time_roundtrip(void)
{
	static const struct {
		int64_t t;
		uint8_t tag;
	} cases[] = {
		{0, SG_DER_UTCTIME},
		{-631152000LL, SG_DER_UTCTIME},          /* 1950-01-01 */
		{-631152001LL, SG_DER_GENERALIZEDTIME},  /* 1949-12-31T23:59:59 */
		{2524607999LL, SG_DER_UTCTIME},          /* 2049-12-31T23:59:59 */
		{2524608000LL, SG_DER_GENERALIZEDTIME},  /* 2050-01-01 */
		{951782400LL, SG_DER_UTCTIME},
		{253402300799LL, SG_DER_GENERALIZEDTIME}, /* 9999-12-31T23:59:59 */
		{-62167219200LL, SG_DER_GENERALIZEDTIME}, /* 0000-01-01 */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t buf[32];
		sg_der_writer w;
		sg_der_writer_init(&w, buf, sizeof(buf));
		sg_der_time(&w, cases[i].t);
		SG_CHECK_OK(sg_der_writer_status(&w));
		sg_reader r = sg_reader_of((sg_slice){buf, w.len});
		uint8_t tag;
		sg_slice c;
		SG_CHECK_OK(sg_der_read_any(&r, &tag, &c, NULL));
		SG_CHECK(tag == cases[i].tag);
		int64_t back = 0;
		SG_CHECK_OK(sg_der_parse_time(tag, c, &back));
		SG_CHECK(back == cases[i].t);
	}
	/* Years that four digits cannot hold poison the writer. */
	static const int64_t bad[] = {253402300800LL, -62167219201LL, INT64_MAX / 2, INT64_MIN / 2};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint8_t buf[32];
		sg_der_writer w;
		sg_der_writer_init(&w, buf, sizeof(buf));
		sg_der_time(&w, bad[i]);
		SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	}
}

/* The encoder's own calendar arithmetic against the C library's, over
 * pseudo-random instants from year 0 to 9999 (a fixed seed: repeatable). */
static void t_time_matches_gmtime(void)
{
	uint64_t x = 0x9e3779b97f4a7c15u;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t t = (int64_t)(x % 315569519999u) - 62167219200LL; /* 0000-01-01 .. 9999-12-31 */
		time_t tt = (time_t)t;
		struct tm tm;
		if (!gmtime_r(&tt, &tm))
			continue;
		int year = tm.tm_year + 1900;
		char want[80]; /* ints may be wide as far as the compiler knows */
		if (year >= 1950 && year < 2050)
			snprintf(want, sizeof(want), "%02d%02d%02d%02d%02d%02dZ", year % 100, tm.tm_mon + 1, tm.tm_mday,
				 tm.tm_hour, tm.tm_min, tm.tm_sec);
		else
			snprintf(want, sizeof(want), "%04d%02d%02d%02d%02d%02dZ", year, tm.tm_mon + 1, tm.tm_mday,
				 tm.tm_hour, tm.tm_min, tm.tm_sec);
		uint8_t buf[32];
		sg_der_writer w;
		sg_der_writer_init(&w, buf, sizeof(buf));
		sg_der_time(&w, t);
		SG_CHECK(sg_der_writer_status(&w) == 0 && w.len == 2 + strlen(want) &&
			 memcmp(buf + 2, want, strlen(want)) == 0);
	}
}

static void t_writer_poison(void)
{
	uint8_t buf[4];
	sg_der_writer w;
	sg_der_writer_init(&w, buf, sizeof(buf));
	sg_der_prim(&w, SG_DER_OCTET_STRING, "abc", 3); /* needs 5 */
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	SG_CHECK_MSG("exceeds 4 bytes");
	sg_der_raw(&w, "a", 1); /* would fit, but the writer is poisoned */
	SG_CHECK(w.failed);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);

	/* Exact fit succeeds; nothing is written past cap. */
	uint8_t big[8];
	memset(big, 0xee, sizeof(big));
	sg_der_writer_init(&w, big, 5);
	sg_der_prim(&w, SG_DER_OCTET_STRING, "abc", 3);
	SG_CHECK_OK(sg_der_writer_status(&w));
	SG_CHECK(w.len == 5 && memcmp(big, "\x04\x03" "abc", 5) == 0);
	sg_der_raw(&w, "", 0);
	SG_CHECK_OK(sg_der_writer_status(&w));
	sg_der_raw(&w, "x", 1);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	SG_CHECK(big[5] == 0xee);

	/* A header that fits but content that does not. */
	sg_der_writer_init(&w, big, 3);
	sg_der_bits(&w, "ab", 2);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	/* Zero capacity. */
	sg_der_writer_init(&w, NULL, 0);
	sg_der_bool(&w, true);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	sg_der_writer_init(&w, NULL, 0);
	size_t mark = sg_der_begin(&w, SG_DER_SEQUENCE);
	sg_der_end(&w, mark);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	/* A bogus mark (caller bug) poisons instead of underflowing. */
	sg_der_writer_init(&w, big, sizeof(big));
	sg_der_end(&w, 5);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
	/* A primitive longer than SG_DER_MAX_LEN is not written. */
	uint8_t *huge = malloc(SG_DER_MAX_LEN + 16);
	SG_CHECK(huge != NULL);
	if (huge) {
		sg_der_writer_init(&w, huge, SG_DER_MAX_LEN + 16);
		sg_der_prim(&w, SG_DER_OCTET_STRING, huge, SG_DER_MAX_LEN + 1);
		SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
		free(huge);
	}
}

static void t_writer_end_boundaries(void)
{
	static const struct {
		size_t n, hdr;
		int rc;
	} cases[] = {
		{0, 2, 0},     {1, 2, 0},     {127, 2, 0},   {128, 3, 0},
		{255, 3, 0},   {256, 4, 0},   {65535, 4, 0}, {65536, 5, 0},
		{SG_DER_MAX_LEN, 5, 0},       {SG_DER_MAX_LEN + 1, 5, SG_EINVAL},
	};
	size_t cap = SG_DER_MAX_LEN + 16;
	uint8_t *buf = malloc(cap);
	uint8_t *content = malloc(cap);
	SG_CHECK(buf && content);
	if (!buf || !content) {
		free(buf);
		free(content);
		return;
	}
	for (size_t i = 0; i < cap; i++)
		content[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = cases[i].n;
		sg_der_writer w;
		sg_der_writer_init(&w, buf, cap);
		size_t mark = sg_der_begin(&w, SG_DER_SEQUENCE);
		sg_der_raw(&w, content, n);
		sg_der_end(&w, mark);
		SG_CHECK_RC(sg_der_writer_status(&w), cases[i].rc);
		if (cases[i].rc)
			continue;
		SG_CHECK(w.len == cases[i].hdr + n);
		sg_reader r = sg_reader_of((sg_slice){buf, w.len});
		sg_slice c;
		SG_CHECK_OK(sg_der_read(&r, SG_DER_SEQUENCE, &c, NULL));
		SG_CHECK(sg_reader_done(&r));
		SG_CHECK(c.len == n && (n == 0 || memcmp(c.p, content, n) == 0));

		/* Exactly enough room, and one byte less (the widening fails). */
		sg_der_writer_init(&w, buf, cases[i].hdr + n);
		mark = sg_der_begin(&w, SG_DER_SEQUENCE);
		sg_der_raw(&w, content, n);
		sg_der_end(&w, mark);
		SG_CHECK_OK(sg_der_writer_status(&w));
		sg_der_writer_init(&w, buf, cases[i].hdr + n - 1);
		mark = sg_der_begin(&w, SG_DER_SEQUENCE);
		sg_der_raw(&w, content, n);
		sg_der_end(&w, mark);
		SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);

		/* sg_der_prim agrees with begin/end. */
		sg_der_writer_init(&w, buf, cap);
		sg_der_prim(&w, SG_DER_OCTET_STRING, content, n);
		SG_CHECK_OK(sg_der_writer_status(&w));
		SG_CHECK(w.len == cases[i].hdr + n);
	}
	free(buf);
	free(content);
}

static void t_writer_nested(void)
{
	uint8_t buf[512];
	uint8_t blob[200];
	memset(blob, 0x5a, sizeof(blob));
	sg_der_writer w;
	sg_der_writer_init(&w, buf, sizeof(buf));
	size_t seq = sg_der_begin(&w, SG_DER_SEQUENCE);
	size_t set = sg_der_begin(&w, SG_DER_SET);
	sg_der_uint(&w, 5);
	sg_der_end(&w, set);
	size_t ctx = sg_der_begin(&w, SG_DER_CTX0);
	sg_der_prim(&w, SG_DER_OCTET_STRING, blob, sizeof(blob)); /* inner length crosses 127 */
	sg_der_end(&w, ctx);
	sg_der_bool(&w, true);
	sg_der_end(&w, seq);
	SG_CHECK_OK(sg_der_writer_status(&w));
	/* 30 81 d6 | 31 03 02 01 05 | a0 81 cb 04 81 c8 <200> | 01 01 ff */
	SG_CHECK(w.len == 3 + 5 + 3 + 3 + 200 + 3);
	static const uint8_t head[] = {0x30, 0x81, 0xd6, 0x31, 0x03, 0x02, 0x01, 0x05,
				       0xa0, 0x81, 0xcb, 0x04, 0x81, 0xc8};
	SG_CHECK(memcmp(buf, head, sizeof(head)) == 0);
	sg_reader r = sg_reader_of((sg_slice){buf, w.len});
	sg_slice c, s, v;
	SG_CHECK_OK(sg_der_read(&r, SG_DER_SEQUENCE, &c, NULL));
	SG_CHECK(sg_reader_done(&r));
	sg_reader in = sg_reader_of(c);
	SG_CHECK_OK(sg_der_read(&in, SG_DER_SET, &s, NULL));
	sg_reader sr = sg_reader_of(s);
	uint64_t u;
	SG_CHECK_OK(sg_der_read_uint(&sr, &u));
	SG_CHECK(u == 5 && sg_reader_done(&sr));
	SG_CHECK_OK(sg_der_read(&in, SG_DER_CTX0, &s, NULL));
	sr = sg_reader_of(s);
	SG_CHECK_OK(sg_der_read(&sr, SG_DER_OCTET_STRING, &v, NULL));
	SG_CHECK(sg_slice_eq(v, blob, sizeof(blob)));
	bool b;
	SG_CHECK_OK(sg_der_read_bool(&in, &b));
	SG_CHECK(b && sg_reader_done(&in));
}

static void t_writer_ints(void)
{
	static const struct {
		uint64_t v;
		const char *enc;
		size_t len;
	} cases[] = {
		{0, "\x02\x01\x00", 3},
		{1, "\x02\x01\x01", 3},
		{127, "\x02\x01\x7f", 3},
		{128, "\x02\x02\x00\x80", 4},
		{255, "\x02\x02\x00\xff", 4},
		{256, "\x02\x02\x01\x00", 4},
		{0x7fffffffffffffffULL, "\x02\x08\x7f\xff\xff\xff\xff\xff\xff\xff", 10},
		{UINT64_MAX, "\x02\x09\x00\xff\xff\xff\xff\xff\xff\xff\xff", 11},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t buf[16];
		sg_der_writer w;
		sg_der_writer_init(&w, buf, sizeof(buf));
		sg_der_uint(&w, cases[i].v);
		SG_CHECK_OK(sg_der_writer_status(&w));
		SG_CHECK(w.len == cases[i].len && memcmp(buf, cases[i].enc, w.len) == 0);
		sg_reader r = sg_reader_of((sg_slice){buf, w.len});
		uint64_t back = 1;
		SG_CHECK_OK(sg_der_read_uint(&r, &back));
		SG_CHECK(back == cases[i].v);
	}
	uint8_t buf[32];
	sg_der_writer w;
	sg_der_writer_init(&w, buf, sizeof(buf));
	sg_der_uint_bytes(&w, (const uint8_t *)"\x00\x00\x01", 3);
	sg_der_uint_bytes(&w, (const uint8_t *)"\x80", 1);
	sg_der_uint_bytes(&w, NULL, 0);
	sg_der_uint_bytes(&w, (const uint8_t *)"\x00\x00", 2);
	sg_der_bits(&w, "\xff", 1);
	sg_der_bits(&w, NULL, 0);
	sg_der_bool(&w, false);
	SG_CHECK_OK(sg_der_writer_status(&w));
	static const uint8_t want[] = {0x02, 0x01, 0x01, 0x02, 0x02, 0x00, 0x80, 0x02, 0x01, 0x00, 0x02, 0x01, 0x00,
				       0x03, 0x02, 0x00, 0xff, 0x03, 0x01, 0x00, 0x01, 0x01, 0x00};
	SG_CHECK(w.len == sizeof(want) && memcmp(buf, want, sizeof(want)) == 0);
	/* INTEGER header fits, pad byte does not. */
	sg_der_writer_init(&w, buf, 3);
	sg_der_uint_bytes(&w, (const uint8_t *)"\x80", 1);
	SG_CHECK_RC(sg_der_writer_status(&w), SG_EINVAL);
}

SG_TEST_MAIN(SG_TEST(t_read_basic), SG_TEST(t_read_hostile), SG_TEST(t_read_lengths), SG_TEST(t_integers),
	     SG_TEST(t_bits_bool), SG_TEST(t_times), SG_TEST(t_time_roundtrip), SG_TEST(t_time_matches_gmtime), SG_TEST(t_writer_poison),
	     SG_TEST(t_writer_end_boundaries), SG_TEST(t_writer_nested), SG_TEST(t_writer_ints))
