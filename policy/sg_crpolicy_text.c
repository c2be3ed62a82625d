/*
 * sg_crpolicy_text: the text forms a CertificateRequestPolicy's messages
 * are made of, as Go and apimachinery write them, and approver-policy's
 * wildcards. Go's %q (strconv.Quote), encoding/json's strings and lists
 * and time.Duration's String(); field.ErrorList, whose errors every
 * other file of sg_crpolicy appends to and whose aggregate is the message
 * a condition or a verdict carries; util/wildcard.go's matcher, on Go
 * runes (utf8.DecodeRune here decodes for the quoting and the matching
 * alike). Apart so that the compiler and the evaluators read as the
 * policy's schema and approver-policy's evaluators read, with the
 * byte-exact rendering they share in one place (the differences from Go
 * are listed atop sg_crpolicy.c). The contract is in
 * private/sg_crpolicy_impl.h.
 */
#include "sg_crpolicy_impl.h"
#include "sg_goduration.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Go's text forms ------------------------------------------------------ */

/* utf8.DecodeRune: a valid sequence, or (U+FFFD, 1) for anything else. */
static uint32_t go_rune(const char *str, size_t n, size_t i, size_t *w)
{
	const uint8_t *s = (const uint8_t *)str;
	uint8_t c = s[i];
	size_t need;
	uint32_t cp;
	uint8_t lo = 0x80, hi = 0xbf;
	if (c < 0x80) {
		*w = 1;
		return c;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		need = 1;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2;
		cp = c & 0x0f;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3;
		cp = c & 0x07;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		goto bad;
	}
	if (n - i <= need)
		goto bad;
	for (size_t k = 1; k <= need; k++) {
		uint8_t d = s[i + k];
		if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xbf))
			goto bad;
		cp = cp << 6 | (d & 0x3f);
	}
	*w = need + 1;
	return cp;
bad:
	*w = 1;
	return 0xfffd;
}

/* unicode.IsPrint for runes >= 0x80, approximately (see the header):
 * false for C1 controls, format characters, separators other than the
 * ASCII space, private use, noncharacters and the large unassigned blocks. */
static bool go_isprint(uint32_t r)
{
	static const struct {
		uint32_t lo, hi;
	} np[] = {
	    {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},     {0x6dd, 0x6dd},
	    {0x70f, 0x70f},     {0x890, 0x891},     {0x8e2, 0x8e2},     {0x1680, 0x1680},   {0x180e, 0x180e},
	    {0x2000, 0x200f},   {0x2028, 0x202f},   {0x205f, 0x206f},   {0x3000, 0x3000},   {0xd800, 0xf8ff},
	    {0xfdd0, 0xfdef},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
	    {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0x323b0, 0xe00ff}, {0xe01f0, 0x10ffff},
	};
	if ((r & 0xfffe) == 0xfffe)
		return false;
	for (size_t i = 0; i < sizeof(np) / sizeof(np[0]); i++)
		if (r >= np[i].lo && r <= np[i].hi)
			return false;
	return true;
}

/* strconv.Quote (fmt's %q on a string). */
void crpolicy_sb_go_quote(sb *b, sstr s)
{
	static const char hex[] = "0123456789abcdef";
	sg_strbuf_putc(b, '"');
	for (size_t i = 0; i < s.len && !sg_strbuf_failed(b);) {
		uint8_t c = (uint8_t)s.p[i];
		if (c < 0x80) {
			i++;
			if (c == '"' || c == '\\') {
				sg_strbuf_putc(b, '\\');
				sg_strbuf_putc(b, (char)c);
			} else if (c >= 0x20 && c < 0x7f) {
				sg_strbuf_putc(b, (char)c);
			} else {
				static const char esc[] = "abtnvfr"; /* \a..\r are 7..13 */
				if (c >= 7 && c <= 13) {
					sg_strbuf_putc(b, '\\');
					sg_strbuf_putc(b, esc[c - 7]);
				} else {
					char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
					sg_strbuf_add(b, x, 4);
				}
			}
			continue;
		}
		size_t w;
		uint32_t r = go_rune(s.p, s.len, i, &w);
		if (r == 0xfffd && w == 1) {
			char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
			sg_strbuf_add(b, x, 4);
		} else if (go_isprint(r)) {
			sg_strbuf_add(b, s.p + i, w);
		} else if (r < 0x10000) {
			sg_strbuf_printf(b, "\\u%04x", (unsigned)r);
		} else {
			sg_strbuf_printf(b, "\\U%08x", (unsigned)r);
		}
		i += w;
	}
	sg_strbuf_putc(b, '"');
}

/* encoding/json's string form (HTML-safe, as json.Marshal writes it). */
void crpolicy_sb_json_quote(sb *b, sstr s)
{
	static const char hex[] = "0123456789abcdef";
	sg_strbuf_putc(b, '"');
	size_t start = 0;
	for (size_t i = 0; i < s.len && !sg_strbuf_failed(b);) {
		uint8_t c = (uint8_t)s.p[i];
		if (c < 0x80) {
			if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
				i++;
				continue;
			}
			sg_strbuf_add(b, s.p + start, i - start);
			switch (c) {
			case '"':
			case '\\': {
				char e[2] = {'\\', (char)c};
				sg_strbuf_add(b, e, 2);
				break;
			}
			case '\b':
				sg_strbuf_puts(b, "\\b");
				break;
			case '\f':
				sg_strbuf_puts(b, "\\f");
				break;
			case '\n':
				sg_strbuf_puts(b, "\\n");
				break;
			case '\r':
				sg_strbuf_puts(b, "\\r");
				break;
			case '\t':
				sg_strbuf_puts(b, "\\t");
				break;
			default: {
				char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
				sg_strbuf_add(b, e, 6);
			}
			}
			start = ++i;
			continue;
		}
		size_t w;
		uint32_t r = go_rune(s.p, s.len, i, &w);
		if ((r == 0xfffd && w == 1) || r == 0x2028 || r == 0x2029) {
			sg_strbuf_add(b, s.p + start, i - start);
			sg_strbuf_puts(b, r == 0x2028 ? "\\u2028" : r == 0x2029 ? "\\u2029" : "\\ufffd");
			start = i + w;
		}
		i += w;
	}
	sg_strbuf_add(b, s.p + start, s.len - start);
	sg_strbuf_putc(b, '"');
}

static void sb_json_list(sb *b, const sstr *v, size_t n)
{
	sg_strbuf_putc(b, '[');
	for (size_t i = 0; i < n; i++) {
		if (i)
			sg_strbuf_putc(b, ',');
		crpolicy_sb_json_quote(b, v[i]);
	}
	sg_strbuf_putc(b, ']');
}

/* time.Duration.String() of whole seconds. */
void crpolicy_sb_duration(sb *b, int64_t seconds)
{
	char buf[48];
	if (seconds < 0) {
		sg_strbuf_putc(b, '-');
		seconds = seconds == INT64_MIN ? INT64_MAX : -seconds;
	}
	sg_goduration_format(seconds, buf, sizeof(buf));
	sg_strbuf_puts(b, buf);
}

/* ---- field.ErrorList ------------------------------------------------------- */

/* Takes the message built in m; drops it when an identical one is there
 * (ErrorList.ToAggregate). */
void crpolicy_ferrs_push(ferrs *l, sb *m)
{
	char *s = sg_strbuf_take(m);
	if (!s || l->failed) {
		free(s);
		l->failed = true;
		return;
	}
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0) {
			free(s);
			return;
		}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		char **n = realloc(l->v, cap * sizeof(*n));
		if (!n) {
			free(s);
			l->failed = true;
			return;
		}
		l->v = n;
		l->cap = cap;
	}
	l->v[l->n++] = s;
}

void crpolicy_ferrs_free(ferrs *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* The aggregate's Error(): nothing for an empty list. */
void crpolicy_sb_aggregate(sb *b, const ferrs *l)
{
	if (l->n == 1) {
		sg_strbuf_puts(b, l->v[0]);
		return;
	}
	if (l->n == 0)
		return;
	sg_strbuf_putc(b, '[');
	for (size_t i = 0; i < l->n; i++) {
		if (i)
			sg_strbuf_puts(b, ", ");
		sg_strbuf_puts(b, l->v[i]);
	}
	sg_strbuf_putc(b, ']');
}

/* One error: "<path>: <type>", the caller appends ": <value>", then
 * crpolicy_fe_end adds ": <detail>" when there is one. */
void crpolicy_fe_begin(sb *m, const char *path, const char *type)
{
	sg_strbuf_puts(m, path);
	sg_strbuf_puts(m, ": ");
	sg_strbuf_puts(m, type);
}

void crpolicy_fe_end(ferrs *l, sb *m, sstr detail)
{
	if (detail.len) {
		sg_strbuf_puts(m, ": ");
		sb_put(m, detail);
	}
	crpolicy_ferrs_push(l, m);
}

void crpolicy_fe_invalid_str(ferrs *l, const char *path, sstr value, sstr detail)
{
	sb m = SB_INIT;
	crpolicy_fe_begin(&m, path, "Invalid value: ");
	crpolicy_sb_go_quote(&m, value);
	crpolicy_fe_end(l, &m, detail);
}

void crpolicy_fe_invalid_list(ferrs *l, const char *path, const sstr *v, size_t n, sstr detail)
{
	sb m = SB_INIT;
	crpolicy_fe_begin(&m, path, "Invalid value: ");
	sb_json_list(&m, v, n);
	crpolicy_fe_end(l, &m, detail);
}

void crpolicy_fe_invalid_int(ferrs *l, const char *path, long long v, const char *detail)
{
	sb m = SB_INIT;
	crpolicy_fe_begin(&m, path, "Invalid value: ");
	sg_strbuf_printf(&m, "%lld", v);
	crpolicy_fe_end(l, &m, cstr(detail));
}

void crpolicy_fe_required(ferrs *l, const char *path, const char *detail)
{
	sb m = SB_INIT;
	crpolicy_fe_begin(&m, path, "Required value");
	crpolicy_fe_end(l, &m, cstr(detail));
}

/* Joins strings with ", " (strings.Join) into a new builder. */
void crpolicy_sb_join(sb *b, const sstr *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (i)
			sg_strbuf_puts(b, ", ");
		sb_put(b, v[i]);
	}
}

/* ---- wildcards ------------------------------------------------------------ */

bool crpolicy_wild(sstr pat, sstr s)
{
	if (pat.len == 0)
		return s.len == 0;
	if (pat.len == 1 && pat.p[0] == '*')
		return true;
	size_t px = 0, sx = 0, star_p = SIZE_MAX, star_s = 0;
	while (sx < s.len) {
		size_t pw, sw;
		if (px < pat.len && pat.p[px] == '*') {
			star_p = px++;
			star_s = sx;
			continue;
		}
		uint32_t sr = go_rune(s.p, s.len, sx, &sw);
		if (px < pat.len && go_rune(pat.p, pat.len, px, &pw) == sr) {
			px += pw;
			sx += sw;
			continue;
		}
		if (star_p == SIZE_MAX)
			return false;
		go_rune(s.p, s.len, star_s, &sw);
		star_s += sw;
		sx = star_s;
		px = star_p + 1;
	}
	while (px < pat.len && pat.p[px] == '*')
		px++;
	return px == pat.len;
}

bool crpolicy_wild_any(const sstr *pats, size_t n, sstr s)
{
	for (size_t i = 0; i < n; i++)
		if (crpolicy_wild(pats[i], s))
			return true;
	return false;
}

bool crpolicy_wild_subset(const sstr *pats, size_t np, const sstr *members, size_t nm)
{
	for (size_t i = 0; i < nm; i++)
		if (!crpolicy_wild_any(pats, np, members[i]))
			return false;
	return true;
}

bool sg_crpolicy_wildcard_matches(const char *pattern, const char *s)
{
	return crpolicy_wild(cstr(pattern), cstr(s));
}

bool sg_crpolicy_wildcard_subset(const char *const *patterns, size_t npatterns, const char *const *members,
                                 size_t nmembers)
{
	for (size_t i = 0; i < nmembers; i++) {
		bool ok = false;
		for (size_t j = 0; j < npatterns && !ok; j++)
			ok = crpolicy_wild(cstr(patterns[j]), cstr(members[i]));
		if (!ok)
			return false;
	}
	return true;
}
