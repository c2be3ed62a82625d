/*
 * DER reader and writer. The reader accepts only what X.690 DER allows for
 * the structures we parse (short tags, minimal definite lengths); the writer
 * produces the same. Both work on caller-owned memory and never allocate.
 */
#include "sg_der.h"

#include "sg_clock.h"
#include "sg_guard.h"

#include <string.h>

int sg_reader_bytes(sg_reader *r, size_t n, sg_slice *out)
{
	SG_ENSURE(n <= sg_reader_left(r), SG_EINVAL, "truncated input: need %zu bytes, %zu left", n,
		  sg_reader_left(r));
	out->p = r->p ? r->p + r->off : NULL; /* no arithmetic on NULL (C11 6.5.6) */
	out->len = n;
	r->off += n;
	return SG_OK;
}

void sg_reader_until(sg_reader *r, uint8_t delim, sg_slice *out)
{
	size_t left = sg_reader_left(r);
	const uint8_t *start = r->p ? r->p + r->off : NULL;
	const uint8_t *hit = left ? memchr(start, delim, left) : NULL;
	size_t n = hit ? (size_t)(hit - start) : left;
	out->p = start;
	out->len = n;
	r->off += n;
}

int sg_der_peek(const sg_reader *r, uint8_t *tag)
{
	SG_ENSURE(sg_reader_left(r) >= 1, SG_EINVAL, "truncated DER: expected a tag");
	*tag = r->p[r->off];
	return SG_OK;
}

int sg_der_read_any(sg_reader *r, uint8_t *tag, sg_slice *content, sg_slice *whole)
{
	size_t start = r->off;
	sg_slice b;
	SG_TRY(sg_reader_bytes(r, 1, &b));
	SG_ENSURE((b.p[0] & 0x1f) != 0x1f, SG_EINVAL, "DER: multi-byte tags are not supported");
	*tag = b.p[0];
	SG_TRY(sg_reader_bytes(r, 1, &b));
	size_t len = b.p[0];
	if (len & 0x80) {
		size_t nlen = len & 0x7f;
		SG_ENSURE(nlen >= 1 && nlen <= 3, SG_EINVAL, "DER: unsupported length form (0x%02zx)", len);
		SG_TRY(sg_reader_bytes(r, nlen, &b));
		SG_ENSURE(b.p[0] != 0, SG_EINVAL, "DER: length not minimal");
		len = 0;
		for (size_t i = 0; i < nlen; i++)
			len = (len << 8) | b.p[i];
		SG_ENSURE(len >= 0x80, SG_EINVAL, "DER: length not minimal");
	}
	SG_ENSURE(len <= SG_DER_MAX_LEN, SG_EINVAL, "DER: element too large (%zu bytes)", len);
	SG_TRY(sg_reader_bytes(r, len, content));
	if (whole) {
		whole->p = r->p + start;
		whole->len = r->off - start;
	}
	return SG_OK;
}

int sg_der_read(sg_reader *r, uint8_t tag, sg_slice *content, sg_slice *whole)
{
	uint8_t got;
	SG_TRY(sg_der_peek(r, &got));
	SG_ENSURE(got == tag, SG_EINVAL, "DER: expected tag 0x%02x, found 0x%02x", tag, got);
	return sg_der_read_any(r, &got, content, whole);
}

static int integer_content(sg_reader *r, sg_slice *c)
{
	SG_TRY(sg_der_read(r, SG_DER_INTEGER, c, NULL));
	SG_ENSURE(c->len >= 1, SG_EINVAL, "DER: empty INTEGER");
	if (c->len >= 2)
		SG_ENSURE(!(c->p[0] == 0x00 && !(c->p[1] & 0x80)) && !(c->p[0] == 0xff && (c->p[1] & 0x80)),
			  SG_EINVAL, "DER: INTEGER not minimal");
	return SG_OK;
}

int sg_der_read_unsigned_bytes(sg_reader *r, sg_slice *mag)
{
	sg_slice c;
	SG_TRY(integer_content(r, &c));
	SG_ENSURE(!(c.p[0] & 0x80), SG_EINVAL, "DER: negative INTEGER");
	if (c.len > 1 && c.p[0] == 0) {
		c.p++;
		c.len--;
	}
	*mag = c;
	return SG_OK;
}

int sg_der_read_uint(sg_reader *r, uint64_t *out)
{
	sg_slice m;
	SG_TRY(sg_der_read_unsigned_bytes(r, &m));
	SG_ENSURE(m.len <= 8, SG_EINVAL, "DER: INTEGER too large");
	uint64_t v = 0;
	for (size_t i = 0; i < m.len; i++)
		v = (v << 8) | m.p[i];
	*out = v;
	return SG_OK;
}

int sg_der_read_bits(sg_reader *r, sg_slice *bits)
{
	sg_slice c;
	SG_TRY(sg_der_read(r, SG_DER_BIT_STRING, &c, NULL));
	SG_ENSURE(c.len >= 1, SG_EINVAL, "DER: empty BIT STRING");
	SG_ENSURE(c.p[0] == 0, SG_EINVAL, "DER: BIT STRING with unused bits");
	bits->p = c.p + 1;
	bits->len = c.len - 1;
	return SG_OK;
}

int sg_der_read_bool(sg_reader *r, bool *out)
{
	sg_slice c;
	SG_TRY(sg_der_read(r, SG_DER_BOOLEAN, &c, NULL));
	SG_ENSURE(c.len == 1 && (c.p[0] == 0 || c.p[0] == 0xff), SG_EINVAL, "DER: BOOLEAN not DER");
	*out = c.p[0] != 0;
	return SG_OK;
}

static int digits(const uint8_t *p, int n)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	return v;
}

int sg_der_parse_time(uint8_t tag, sg_slice c, int64_t *out)
{
	int year;
	const uint8_t *p = c.p;
	if (tag == SG_DER_UTCTIME) {
		SG_ENSURE(c.len == 13 && p[12] == 'Z', SG_EINVAL, "DER: UTCTime not in YYMMDDHHMMSSZ form");
		int yy = digits(p, 2);
		SG_ENSURE(yy >= 0, SG_EINVAL, "DER: bad UTCTime");
		year = yy >= 50 ? 1900 + yy : 2000 + yy;
		p += 2;
	} else if (tag == SG_DER_GENERALIZEDTIME) {
		SG_ENSURE(c.len == 15 && p[14] == 'Z', SG_EINVAL,
			  "DER: GeneralizedTime not in YYYYMMDDHHMMSSZ form");
		year = digits(p, 4);
		SG_ENSURE(year >= 0, SG_EINVAL, "DER: bad GeneralizedTime");
		p += 4;
	} else {
		SG_BAIL(SG_EINVAL, "DER: expected a time, found tag 0x%02x", tag);
	}
	int mo = digits(p, 2), d = digits(p + 2, 2), h = digits(p + 4, 2), mi = digits(p + 6, 2),
	    s = digits(p + 8, 2);
	static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	SG_ENSURE(mo >= 1 && mo <= 12 && d >= 1 && d <= mdays[mo - 1] && h >= 0 && h <= 23 && mi >= 0 &&
			  mi <= 59 && s >= 0 && s <= 59,
		  SG_EINVAL, "DER: time field out of range");
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	SG_ENSURE(!(mo == 2 && d == 29 && !leap), SG_EINVAL, "DER: February 29 in a common year");
	*out = sg_days_from_civil(year, mo, d) * 86400 + h * 3600 + mi * 60 + s;
	return SG_OK;
}

int sg_der_writer_status(const sg_der_writer *w)
{
	SG_ENSURE(!w->failed, SG_EINVAL, "encoded object exceeds %zu bytes", w->cap);
	return SG_OK;
}

static bool reserve(sg_der_writer *w, size_t n)
{
	if (w->failed || n > w->cap - w->len) {
		w->failed = true;
		return false;
	}
	return true;
}

void sg_der_raw(sg_der_writer *w, const void *p, size_t n)
{
	if (!reserve(w, n))
		return;
	if (n)
		memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static size_t len_octets(size_t n)
{
	return n < 0x80 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 4;
}

static void put_header(sg_der_writer *w, uint8_t tag, size_t n)
{
	/* len_octets stops at three length bytes, and our reader refuses
	 * anything above SG_DER_MAX_LEN: never write what we would not read. */
	if (n > SG_DER_MAX_LEN) {
		w->failed = true;
		return;
	}
	size_t lo = len_octets(n);
	if (!reserve(w, 1 + lo))
		return;
	uint8_t *p = w->buf + w->len;
	*p++ = tag;
	if (lo == 1) {
		*p = (uint8_t)n;
	} else {
		*p++ = (uint8_t)(0x80 | (lo - 1));
		for (size_t i = lo - 1; i > 0; i--)
			*p++ = (uint8_t)(n >> (8 * (i - 1)));
	}
	w->len += 1 + lo;
}

void sg_der_prim(sg_der_writer *w, uint8_t tag, const void *p, size_t n)
{
	put_header(w, tag, n);
	sg_der_raw(w, p, n);
}

size_t sg_der_begin(sg_der_writer *w, uint8_t tag)
{
	/* Reserve the short form; sg_der_end widens it when needed. */
	size_t mark = w->len;
	put_header(w, tag, 0);
	return mark;
}

void sg_der_end(sg_der_writer *w, size_t mark)
{
	/* A mark that is not a short-form header we wrote (caller bug) poisons
	 * the writer instead of underflowing. */
	if (w->failed || mark > w->len || w->len - mark < 2 || w->buf[mark + 1] != 0) {
		w->failed = true;
		return;
	}
	size_t content = w->len - mark - 2;
	if (content > SG_DER_MAX_LEN) {
		w->failed = true;
		return;
	}
	size_t lo = len_octets(content);
	if (lo > 1) {
		if (!reserve(w, lo - 1))
			return;
		memmove(w->buf + mark + 1 + lo, w->buf + mark + 2, content);
	}
	uint8_t tag = w->buf[mark];
	w->len = mark;
	put_header(w, tag, content);
	w->len += content;
}

void sg_der_uint_bytes(sg_der_writer *w, const uint8_t *mag, size_t n)
{
	while (n > 1 && mag[0] == 0) {
		mag++;
		n--;
	}
	if (n == 0) {
		static const uint8_t zero = 0;
		sg_der_prim(w, SG_DER_INTEGER, &zero, 1);
		return;
	}
	bool pad = mag[0] & 0x80;
	put_header(w, SG_DER_INTEGER, n + pad);
	if (pad)
		sg_der_raw(w, "\0", 1);
	sg_der_raw(w, mag, n);
}

void sg_der_uint(sg_der_writer *w, uint64_t v)
{
	uint8_t b[8];
	for (int i = 7; i >= 0; i--, v >>= 8)
		b[i] = (uint8_t)v;
	sg_der_uint_bytes(w, b, sizeof(b));
}

void sg_der_bits(sg_der_writer *w, const void *p, size_t n)
{
	put_header(w, SG_DER_BIT_STRING, n + 1);
	sg_der_raw(w, "\0", 1);
	sg_der_raw(w, p, n);
}

void sg_der_bool(sg_der_writer *w, bool v)
{
	uint8_t b = v ? 0xff : 0x00;
	sg_der_prim(w, SG_DER_BOOLEAN, &b, 1);
}

static void two_digits(char *p, int v)
{
	p[0] = (char)('0' + v / 10);
	p[1] = (char)('0' + v % 10);
}

void sg_der_time(sg_der_writer *w, int64_t t)
{
	int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
	int64_t secs = t - days * 86400;
	int64_t year;
	int mon, mday;
	sg_civil_from_days(days, &year, &mon, &mday);
	/* GeneralizedTime has four year digits (RFC 5280 §4.1.2.5.2); a year
	 * outside 0..9999 cannot be encoded. */
	if (year < 0 || year > 9999) {
		w->failed = true;
		return;
	}
	char s[15], *p = s;
	bool utc = year >= 1950 && year < 2050;
	if (!utc) {
		two_digits(p, (int)(year / 100));
		p += 2;
	}
	two_digits(p, (int)(year % 100));
	two_digits(p + 2, mon);
	two_digits(p + 4, mday);
	two_digits(p + 6, (int)(secs / 3600));
	two_digits(p + 8, (int)(secs / 60 % 60));
	two_digits(p + 10, (int)(secs % 60));
	p[12] = 'Z';
	sg_der_prim(w, utc ? SG_DER_UTCTIME : SG_DER_GENERALIZEDTIME, s, utc ? 13 : 15);
}

/* ---- string contents ---------------------------------------------------- */

bool sg_der_printable_char(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr(" '()+,-./:=?", c) != NULL);
}

bool sg_der_utf8_next(sg_slice s, size_t *i, uint32_t *cp)
{
	uint8_t b = s.p[*i];
	size_t n;
	uint32_t v, min;
	if (b < 0x80) {
		*cp = b;
		(*i)++;
		return true;
	} else if ((b & 0xe0) == 0xc0) {
		n = 1, v = b & 0x1f, min = 0x80;
	} else if ((b & 0xf0) == 0xe0) {
		n = 2, v = b & 0x0f, min = 0x800;
	} else if ((b & 0xf8) == 0xf0) {
		n = 3, v = b & 0x07, min = 0x10000;
	} else {
		return false;
	}
	if (n > s.len - *i - 1)
		return false;
	for (size_t k = 1; k <= n; k++) {
		uint8_t c = s.p[*i + k];
		if ((c & 0xc0) != 0x80)
			return false;
		v = (v << 6) | (c & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return false;
	*cp = v;
	*i += n + 1;
	return true;
}
