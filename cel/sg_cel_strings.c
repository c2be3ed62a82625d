/*
 * sg_cel_strings: cel-go's strings extension (ext/strings.go, ext.Strings()
 * at its latest version, and formatting_v2.go for format): charAt,
 * indexOf, lastIndexOf, lowerAscii, upperAscii, replace, split, substring,
 * trim, reverse, join, strings.quote and format, with cel-go's results and
 * errors. Indexes count code points, as cel-go's do (it works on runes);
 * replace and split follow Go's strings.Replace and strings.SplitN.
 *
 * Costs, after the extension's trackers: 0.1 per byte scanned or made, the
 * product of the sizes times 0.1 for searching. Sizes are checked against
 * the string and list limits before anything is allocated.
 */
#include "sg_cel_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the strings extension ---- */

/* Byte offset of code point k (k <= count). */
static size_t cp_offset(const char *p, size_t n, size_t k)
{
	size_t i = 0;
	while (i < n && k > 0) {
		i++;
		while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80)
			i++;
		k--;
	}
	return i;
}

cval sg_cel_fn_char_at(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_INT))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n)))
		return NULL;
	size_t len = sg_cel_utf8_count(a[0]->s.p, a[0]->s.n);
	int64_t i = a[1]->i;
	if (i < 0 || (uint64_t)i > len)
		return sg_cel_err(c, "index out of range: %lld", (long long)i);
	size_t from = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)i);
	size_t to = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)i + ((size_t)i < len));
	return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p + from, to - from);
}

/* Code-point search from code point `from`, forward or backward. */
static int64_t cp_search(cval s, cval sub, int64_t from, bool backward)
{
	size_t len = sg_cel_utf8_count(s->s.p, s->s.n), sublen = sg_cel_utf8_count(sub->s.p, sub->s.n);
	if (sub->s.n == 0)
		return from > (int64_t)len ? (int64_t)len : from;
	if (from >= (int64_t)len)
		return -1;
	if (!backward) {
		size_t off = cp_offset(s->s.p, s->s.n, (size_t)from);
		for (int64_t i = from; off + sub->s.n <= s->s.n; i++) {
			if (sg_cel_has_at(s, off, sub))
				return i;
			off++;
			while (off < s->s.n && ((unsigned char)s->s.p[off] & 0xC0) == 0x80)
				off++;
		}
		return -1;
	}
	if (sublen > len)
		return -1;
	if (from > (int64_t)(len - sublen))
		from = (int64_t)(len - sublen);
	/* Backward from code point `from`, one code point start at a time:
	 * O(n m) like the forward search (not a scan from the start per
	 * position, which was quadratic in the string). */
	size_t off = cp_offset(s->s.p, s->s.n, (size_t)from);
	for (int64_t i = from;; i--) {
		if (sg_cel_has_at(s, off, sub))
			return i;
		if (off == 0)
			return -1;
		off--;
		while (off > 0 && ((unsigned char)s->s.p[off] & 0xC0) == 0x80)
			off--;
	}
}

static cval index_of(SG_CEL_ARGS, bool last)
{
	int64_t from;
	if (SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING)) {
		if (last) {
			size_t len = sg_cel_utf8_count(a[0]->s.p, a[0]->s.n);
			if (a[1]->s.n == 0)
				return sg_cel_mk_int(c, (int64_t)len);
			if (a[0]->s.n < a[1]->s.n)
				return sg_cel_mk_int(c, -1);
			from = (int64_t)len - 1;
		} else {
			from = 0;
		}
	} else if (SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_INT)) {
		from = a[2]->i;
		/* cel-spec's string_ext tests: an offset past the end is an error
		 * (as a negative one is). */
		if (from < 0 || (uint64_t)from > sg_cel_utf8_count(a[0]->s.p, a[0]->s.n))
			return sg_cel_err(c, "index out of range: %lld", (long long)from);
	} else {
		return sg_cel_fn_no_overload(c, call, a, n);
	}
	uint64_t work = (uint64_t)a[0]->s.n * (a[1]->s.n ? a[1]->s.n : 1);
	if (!sg_cel_charge(c, sg_cel_tenth(work)))
		return NULL;
	return sg_cel_mk_int(c, cp_search(a[0], a[1], from, last));
}

cval sg_cel_fn_index_of(SG_CEL_ARGS)
{
	return index_of(c, a, n, call, false);
}

cval sg_cel_fn_last_index_of(SG_CEL_ARGS)
{
	return index_of(c, a, n, call, true);
}

static cval ascii_case(sg_cel_ctx *c, cval *a, size_t n, const sg_cel_node *call, bool upper)
{
	if (!SG_CEL_IS(SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n) * 2))
		return NULL;
	char *p = sg_cel_new_text(c, a[0]->s.n);
	if (!p)
		return NULL;
	for (size_t i = 0; i < a[0]->s.n; i++) {
		char ch = a[0]->s.p[i];
		if (upper && ch >= 'a' && ch <= 'z')
			ch = (char)(ch - 32);
		else if (!upper && ch >= 'A' && ch <= 'Z')
			ch = (char)(ch + 32);
		p[i] = ch;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, a[0]->s.n);
}

cval sg_cel_fn_lower(SG_CEL_ARGS)
{
	return ascii_case(c, a, n, call, false);
}

cval sg_cel_fn_upper(SG_CEL_ARGS)
{
	return ascii_case(c, a, n, call, true);
}

/* Go's strings.Replace: an empty `old` matches before every code point
 * and at the end. */
cval sg_cel_fn_replace(SG_CEL_ARGS)
{
	int64_t limit = -1;
	if (SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_STRING, SG_CEL_INT))
		limit = a[3]->i;
	else if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	cval s = a[0], old = a[1], rep = a[2];
	uint64_t work = (uint64_t)(s->s.n ? s->s.n : 1) * (old->s.n ? old->s.n : 1);
	if (!sg_cel_charge(c, sg_cel_tenth(work)))
		return NULL;
	/* Count the matches first, to size the result exactly. */
	size_t count = 0;
	for (size_t i = 0; i <= s->s.n && (limit < 0 || (int64_t)count < limit);) {
		if (old->s.n == 0) {
			count++;
			if (i == s->s.n)
				break;
			i++;
			while (i < s->s.n && ((unsigned char)s->s.p[i] & 0xC0) == 0x80)
				i++;
		} else if (sg_cel_has_at(s, i, old)) {
			count++;
			i += old->s.n;
		} else {
			i++;
		}
	}
	size_t len;
	if (__builtin_mul_overflow(count, rep->s.n, &len) || __builtin_add_overflow(len, s->s.n, &len))
		return sg_cel_err(c, "string size limit exceeded");
	len -= count * old->s.n;
	if (!sg_cel_charge(c, sg_cel_tenth(len)))
		return NULL;
	char *p = sg_cel_new_text(c, len);
	if (!p)
		return NULL;
	size_t k = 0, done = 0, i = 0;
	while (i <= s->s.n) {
		bool here = done < count && (old->s.n == 0 || sg_cel_has_at(s, i, old));
		if (here) {
			memcpy(p + k, rep->s.p, rep->s.n);
			k += rep->s.n;
			done++;
			if (old->s.n) {
				i += old->s.n;
				continue;
			}
		}
		if (i == s->s.n)
			break;
		/* Copy one code point (or one byte of a non-match). */
		size_t j = i + 1;
		if (old->s.n == 0)
			while (j < s->s.n && ((unsigned char)s->s.p[j] & 0xC0) == 0x80)
				j++;
		memcpy(p + k, s->s.p + i, j - i);
		k += j - i;
		i = j;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, k);
}

/* Go's strings.SplitN: n < 0 all, 0 none, else at most n parts; an empty
 * separator splits into code points. */
cval sg_cel_fn_split(SG_CEL_ARGS)
{
	int64_t limit = -1;
	if (SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_INT))
		limit = a[2]->i;
	else if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	cval s = a[0], sep = a[1];
	/* Searching for the separator at every position: n m at worst. */
	if (!sg_cel_charge(c, sg_cel_tenth((uint64_t)(s->s.n + 1) * (sep->s.n ? sep->s.n : 1)) + 1))
		return NULL;
	if (limit == 0)
		return sg_cel_mk_list(c, sg_cel_new_items(c, 0), 0);
	size_t max = sep->s.n ? s->s.n / sep->s.n + 1 : sg_cel_utf8_count(s->s.p, s->s.n);
	if (limit > 0 && (uint64_t)limit < max)
		max = (size_t)limit;
	if (!sg_cel_charge(c, max))
		return NULL;
	const sg_cel_value **items = sg_cel_new_items(c, max);
	if (!items)
		return NULL;
	size_t k = 0, start = 0, i = 0;
	while (k + 1 < max) {
		if (sep->s.n == 0) {
			if (i >= s->s.n)
				break;
			size_t j = i + 1;
			while (j < s->s.n && ((unsigned char)s->s.p[j] & 0xC0) == 0x80)
				j++;
			items[k++] = sg_cel_mk_str(c, SG_CEL_STRING, s->s.p + i, j - i);
			i = start = j;
			continue;
		}
		if (i + sep->s.n > s->s.n)
			break;
		if (sg_cel_has_at(s, i, sep)) {
			items[k++] = sg_cel_mk_str(c, SG_CEL_STRING, s->s.p + start, i - start);
			i += sep->s.n;
			start = i;
		} else {
			i++;
		}
		if (c->stop)
			return NULL;
	}
	if (sep->s.n || start < s->s.n)
		items[k++] = sg_cel_mk_str(c, SG_CEL_STRING, s->s.p + start, s->s.n - start);
	return sg_cel_mk_list(c, items, k);
}

cval sg_cel_fn_substring(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_INT) && !SG_CEL_IS(SG_CEL_STRING, SG_CEL_INT, SG_CEL_INT))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n)))
		return NULL;
	int64_t len = (int64_t)sg_cel_utf8_count(a[0]->s.p, a[0]->s.n);
	int64_t start = a[1]->i, end = n == 3 ? a[2]->i : len;
	if (start > end)
		return sg_cel_err(c, "invalid substring range. start: %lld, end: %lld", (long long)start,
		                  (long long)end);
	if (start < 0 || start > len)
		return sg_cel_err(c, "index out of range: %lld", (long long)start);
	if (end < 0 || end > len)
		return sg_cel_err(c, "index out of range: %lld", (long long)end);
	size_t from = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)start);
	size_t to = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)end);
	return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p + from, to - from);
}

/* Unicode White_Space (Go's unicode.IsSpace): bytes of the code point at
 * p[i], or 0 when it is not white space. */
static size_t space_at(const char *p, size_t n, size_t i)
{
	static const uint32_t spaces[] = {0x85,   0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003,
	                                  0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
	                                  0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
	unsigned char ch = (unsigned char)p[i];
	if (ch == ' ' || (ch >= '\t' && ch <= '\r'))
		return 1;
	if (ch < 0x80)
		return 0;
	size_t len = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
	if (i + len > n)
		return 0;
	uint32_t cp = ch & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
	for (size_t k = 1; k < len; k++)
		cp = (cp << 6) | ((unsigned char)p[i + k] & 0x3F);
	for (size_t k = 0; k < sizeof(spaces) / sizeof(spaces[0]); k++)
		if (spaces[k] == cp)
			return len;
	return 0;
}

cval sg_cel_fn_trim(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n)))
		return NULL;
	const char *p = a[0]->s.p;
	size_t from = 0, to = a[0]->s.n, k;
	while (from < to && (k = space_at(p, to, from)) > 0)
		from += k;
	while (to > from) {
		size_t start = to - 1;
		while (start > from && ((unsigned char)p[start] & 0xC0) == 0x80)
			start--;
		if (space_at(p, to, start) != to - start)
			break;
		to = start;
	}
	return sg_cel_mk_str(c, SG_CEL_STRING, p + from, to - from);
}

cval sg_cel_fn_reverse(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n) * 2))
		return NULL;
	size_t len = a[0]->s.n;
	char *p = sg_cel_new_text(c, len);
	if (!p)
		return NULL;
	const char *s = a[0]->s.p;
	for (size_t i = 0; i < len;) {
		size_t j = i + 1;
		while (j < len && ((unsigned char)s[j] & 0xC0) == 0x80)
			j++;
		memcpy(p + len - j, s + i, j - i);
		i = j;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, len);
}

cval sg_cel_fn_join(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_LIST) && !SG_CEL_IS(SG_CEL_LIST, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	cval l = a[0];
	size_t sep = n == 2 ? a[1]->s.n : 0, len = 0;
	for (size_t i = 0; i < l->list.n; i++) {
		if (l->list.v[i]->kind != SG_CEL_STRING)
			return sg_cel_err(c, "join: invalid input: %s", sg_cel_kind_name(l->list.v[i]));
		if (__builtin_add_overflow(len, l->list.v[i]->s.n + (i ? sep : 0), &len))
			return sg_cel_err(c, "string size limit exceeded");
	}
	if (!sg_cel_charge(c, sg_cel_tenth(len + l->list.n + 1)))
		return NULL;
	char *p = sg_cel_new_text(c, len);
	if (!p)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < l->list.n; i++) {
		if (i && sep) {
			memcpy(p + k, a[1]->s.p, sep);
			k += sep;
		}
		memcpy(p + k, l->list.v[i]->s.p, l->list.v[i]->s.n);
		k += l->list.v[i]->s.n;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, len);
}

cval sg_cel_fn_quote(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	size_t len = a[0]->s.n;
	if (len > SG_CEL_STRING_MAX / 2)
		return sg_cel_err(c, "string size limit exceeded");
	if (!sg_cel_charge(c, sg_cel_tenth(len) * 2))
		return NULL;
	char *p = sg_cel_new_text(c, 2 * len + 2);
	if (!p)
		return NULL;
	static const char from[] = "\a\b\f\n\r\t\v\\\"";
	static const char to[] = "abfnrtv\\\"";
	size_t k = 0;
	p[k++] = '"';
	for (size_t i = 0; i < len; i++) {
		char ch = a[0]->s.p[i];
		const char *e = ch ? memchr(from, ch, sizeof(from) - 1) : NULL;
		if (e) {
			p[k++] = '\\';
			p[k++] = to[e - from];
		} else {
			p[k++] = ch;
		}
	}
	p[k++] = '"';
	p[k] = 0;
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, k);
}

/* ---- format (cel-go's ext.Strings version 4 and later) ---- */

typedef struct fbuf {
	sg_cel_ctx *c;
	char *p;
	size_t n, cap;
	bool failed;
} fbuf;

static void fb_add(fbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->n + n > SG_CEL_STRING_MAX) {
		b->failed = true;
		b->c->stop = true;
		b->c->stop_msg = "string size limit exceeded";
		return;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = sg_cel_alloc(b->c->a, cap);
		if (!q) {
			b->failed = true;
			b->c->stop = true;
			if (!b->c->stop_msg)
				b->c->stop_msg = "evaluation memory limit exceeded";
			return;
		}
		if (b->n)
			memcpy(q, b->p, b->n);
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void fb_puts(fbuf *b, const char *s)
{
	fb_add(b, s, strlen(s));
}

static const char *fmt_string(fbuf *b, cval v, int depth);

typedef struct fentry {
	const char *key, *val;
	size_t klen, vlen;
} fentry;

static int fentry_cmp(const void *x, const void *y)
{
	const fentry *a = x, *b = y;
	size_t n = a->klen < b->klen ? a->klen : b->klen;
	int r = memcmp(a->key, b->key, n);
	if (r)
		return r;
	return a->klen < b->klen ? -1 : a->klen > b->klen;
}

/* %s of a value; NULL, or a message when the value cannot be formatted. */
static const char *fmt_string(fbuf *b, cval v, int depth)
{
	char buf[400];
	if (depth > 100)
		return "value nested too deeply to format";
	if (b->failed) /* past the size limit: stop walking (values may be huge trees) */
		return NULL;
	switch (v->kind) {
	case SG_CEL_BOOL:
		fb_puts(b, v->b ? "true" : "false");
		return NULL;
	case SG_CEL_INT:
		snprintf(buf, sizeof(buf), "%lld", (long long)v->i);
		fb_puts(b, buf);
		return NULL;
	case SG_CEL_UINT:
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v->u);
		fb_puts(b, buf);
		return NULL;
	case SG_CEL_DOUBLE:
		if (isinf(v->d))
			fb_puts(b, v->d > 0 ? "Infinity" : "-Infinity");
		else {
			sg_cel_fmt_double(buf, sizeof(buf), v->d, 'f');
			fb_puts(b, buf);
		}
		return NULL;
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
	case SG_CEL_TYPE:
		fb_add(b, v->s.p, v->s.n);
		return NULL;
	case SG_CEL_NULL:
		fb_puts(b, "null");
		return NULL;
	case SG_CEL_LIST:
		fb_puts(b, "[");
		for (size_t i = 0; i < v->list.n; i++) {
			if (i)
				fb_puts(b, ", ");
			const char *e = fmt_string(b, v->list.v[i], depth + 1);
			if (e || b->failed)
				return e;
		}
		fb_puts(b, "]");
		return NULL;
	case SG_CEL_MAP: {
		size_t total = 0;
		fentry *ents = sg_cel_alloc(b->c->a, (v->map.n ? v->map.n : 1) * sizeof(*ents));
		if (!ents) {
			b->failed = true;
			return NULL;
		}
		for (size_t i = 0; i < v->map.n; i++) {
			fbuf kb = {.c = b->c}, vb = {.c = b->c};
			const char *e = fmt_string(&kb, v->map.k[i], depth + 1);
			if (!e)
				e = fmt_string(&vb, v->map.v[i], depth + 1);
			if (e)
				return e;
			if (kb.failed || vb.failed) {
				b->failed = true;
				return NULL;
			}
			ents[i] = (fentry){kb.p ? kb.p : "", vb.p ? vb.p : "", kb.n, vb.n};
			total += kb.n + vb.n + 4;
			if (b->n + total > SG_CEL_STRING_MAX) {
				b->failed = true;
				b->c->stop = true;
				b->c->stop_msg = "string size limit exceeded";
				return NULL;
			}
		}
		qsort(ents, v->map.n, sizeof(*ents), fentry_cmp);
		fb_puts(b, "{");
		for (size_t i = 0; i < v->map.n; i++) {
			if (i)
				fb_puts(b, ", ");
			fb_add(b, ents[i].key, ents[i].klen);
			fb_puts(b, ": ");
			fb_add(b, ents[i].val, ents[i].vlen);
		}
		fb_puts(b, "}");
		return NULL;
	}
	default:
		return "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
		       "durations, and timestamps";
	}
}

static void put_radix(fbuf *b, uint64_t x, unsigned base, bool neg, bool upper)
{
	char buf[72];
	size_t k = sizeof(buf);
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	buf[--k] = 0;
	do {
		buf[--k] = digits[x % base];
		x /= base;
	} while (x);
	if (neg)
		buf[--k] = '-';
	fb_puts(b, buf + k);
}

/* One clause (the verb after % and an optional precision) of arg. */
static const char *fmt_clause(fbuf *b, char verb, int prec, cval v)
{
	char buf[512];
	bool num = sg_cel_is_num(v);
	switch (verb) {
	case 's':
		return fmt_string(b, v, 0);
	case 'd':
		if (!num)
			return "decimal clause can only be used on ints, uints, and doubles";
		if (v->kind == SG_CEL_DOUBLE) {
			if (isnan(v->d))
				fb_puts(b, "NaN");
			else if (isinf(v->d))
				fb_puts(b, v->d > 0 ? "Infinity" : "-Infinity");
			else {
				sg_cel_fmt_double(buf, sizeof(buf), v->d, 'f');
				fb_puts(b, buf);
			}
			return NULL;
		}
		return fmt_string(b, v, 0);
	case 'f':
	case 'e': {
		if (!num)
			return verb == 'f' ? "fixed-point clause can only be used on ints, uints, and doubles"
			                   : "scientific clause can only be used on ints, uints, and doubles";
		double d = v->kind == SG_CEL_INT ? (double)v->i : v->kind == SG_CEL_UINT ? (double)v->u : v->d;
		if (isnan(d))
			fb_puts(b, "NaN");
		else if (isinf(d))
			fb_puts(b, d > 0 ? "Infinity" : "-Infinity");
		else {
			/* %f of 1e308 at precision 100 is about 410 characters. */
			char *big = sg_cel_alloc(b->c->a, 520);
			if (!big) {
				b->failed = true;
				return NULL;
			}
			snprintf(big, 520, verb == 'f' ? "%.*f" : "%.*e", prec, d);
			fb_puts(b, big);
		}
		return NULL;
	}
	case 'b':
		if (v->kind == SG_CEL_BOOL)
			fb_puts(b, v->b ? "1" : "0");
		else if (v->kind == SG_CEL_INT)
			put_radix(b, v->i < 0 ? -(uint64_t)v->i : (uint64_t)v->i, 2, v->i < 0, false);
		else if (v->kind == SG_CEL_UINT)
			put_radix(b, v->u, 2, false, false);
		else
			return "only ints, uints, and bools can be formatted as binary";
		return NULL;
	case 'o':
		if (v->kind == SG_CEL_INT)
			put_radix(b, v->i < 0 ? -(uint64_t)v->i : (uint64_t)v->i, 8, v->i < 0, false);
		else if (v->kind == SG_CEL_UINT)
			put_radix(b, v->u, 8, false, false);
		else
			return "octal clause can only be used on ints and uints";
		return NULL;
	case 'x':
	case 'X': {
		bool up = verb == 'X';
		if (v->kind == SG_CEL_INT)
			put_radix(b, v->i < 0 ? -(uint64_t)v->i : (uint64_t)v->i, 16, v->i < 0, up);
		else if (v->kind == SG_CEL_UINT)
			put_radix(b, v->u, 16, false, up);
		else if (v->kind == SG_CEL_STRING || v->kind == SG_CEL_BYTES) {
			const char *digits = up ? "0123456789ABCDEF" : "0123456789abcdef";
			for (size_t i = 0; i < v->s.n && !b->failed; i++) {
				char two[2] = {digits[(unsigned char)v->s.p[i] >> 4],
				               digits[(unsigned char)v->s.p[i] & 15]};
				fb_add(b, two, 2);
			}
		} else
			return "only ints, uints, bytes, and strings can be formatted as hex";
		return NULL;
	}
	default:
		return NULL;
	}
}

cval sg_cel_fn_format(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_LIST))
		return sg_cel_fn_no_overload(c, call, a, n);
	const char *s = a[0]->s.p;
	size_t len = a[0]->s.n, argi = 0;
	cval args = a[1];
	fbuf b = {.c = c};
	fb_add(&b, "", 0);
	for (size_t i = 0; i < len && !b.failed;) {
		if (s[i] != '%') {
			size_t j = i;
			while (j < len && s[j] != '%')
				j++;
			fb_add(&b, s + i, j - i);
			i = j;
			continue;
		}
		if (i + 1 < len && s[i + 1] == '%') {
			fb_add(&b, "%", 1);
			i += 2;
			continue;
		}
		if (i + 1 >= len)
			return sg_cel_err(c, "unexpected end of string");
		if (argi >= args->list.n)
			return sg_cel_err(c, "index %zu out of range", argi);
		i++;
		int prec = 6;
		if (s[i] == '.') {
			i++;
			size_t start = i;
			long p = 0;
			while (i < len && s[i] >= '0' && s[i] <= '9') {
				p = p * 10 + (s[i] - '0');
				if (p > 1000)
					p = 1000;
				i++;
			}
			if (i >= len)
				return sg_cel_err(
				    c, "could not parse formatting clause: error while parsing precision: could "
				       "not find end of precision specifier");
			if (i == start)
				return sg_cel_err(
				    c, "could not parse formatting clause: error while parsing precision: error "
				       "while converting precision to integer");
			if (p > 100)
				return sg_cel_err(c,
				                  "could not parse formatting clause: error while parsing precision: "
				                  "precision %ld exceeds maximum allowed precision 100",
				                  p);
			prec = (int)p;
		}
		char verb = s[i++];
		if (!strchr("sdfebxXo", verb) || !verb)
			return sg_cel_err(c, "could not parse formatting clause: unrecognized formatting clause \"%c\"",
			                  verb);
		const char *e = fmt_clause(&b, verb, prec, args->list.v[argi++]);
		if (e)
			return sg_cel_err(c, "error during formatting: %s, was given %s", e,
			                  sg_cel_kind_name(args->list.v[argi - 1]));
	}
	if (b.failed)
		return NULL;
	if (!sg_cel_charge(c, sg_cel_tenth(b.n) + 1))
		return NULL;
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, b.p, b.n);
}
