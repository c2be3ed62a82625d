/*
 * sg_cel_parse: CEL text to a syntax tree (cel-spec doc/langdef.md,
 * "Syntax": the grammar, the lexis and the escapes of string and bytes
 * literals), with the macros expanded as the spec lists them ("Macros").
 *
 * A hand-written recursive-descent parser: one function per grammar rule,
 * a lexer that reads the source through a position that never passes its
 * end. Bounds: the source length (checked by the caller), the recursion of
 * the parser and the depth of the tree it builds (SG_CEL_DEPTH_MAX), so
 * that neither this parser nor the recursive checker and evaluator can run
 * out of stack on hostile text. The first error ends the parse; its
 * message names the position as cel-go does (line:column, 1-based, columns
 * in code points).
 *
 * Literal values are built here, in the program's arena; a negative
 * number literal is folded into one literal (so -9223372036854775808 is
 * an int).
 */
#include "sg_cel_int.h"
#include "sg_guard.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- positioned errors ---- */

int sg_cel_error_at(const char *src, size_t len, uint32_t pos, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (pos > len)
		pos = (uint32_t)len;
	size_t line = 1, start = 0;
	for (size_t i = 0; i < pos; i++)
		if (src[i] == '\n') {
			line++;
			start = i + 1;
		}
	size_t col = sg_cel_utf8_count(src + start, pos - start) + 1;
	size_t end = start;
	while (end < len && src[end] != '\n' && end - start < 160)
		end++;
	char caret[170];
	size_t k = 0;
	for (size_t i = 1; i < col && k < sizeof(caret) - 2; i++)
		caret[k++] = '.';
	caret[k++] = '^';
	caret[k] = 0;
	char line_text[200];
	size_t ln = 0;
	for (size_t i = start; i < end && ln < sizeof(line_text) - 1; i++)
		line_text[ln++] = (src[i] == '\t' || src[i] == '\r') ? ' ' : src[i];
	line_text[ln] = 0;
	return sg_error_set(SG_EINVAL, "ERROR: <input>:%zu:%zu: %s\n | %s\n | %s", line, col, msg, line_text, caret);
}

/* ---- lexer ---- */

enum tok {
	K_EOF,
	K_INT,
	K_UINT,
	K_DOUBLE,
	K_STRING,
	K_BYTES,
	K_IDENT,
	K_TRUE,
	K_FALSE,
	K_NULL,
	K_IN,
	K_PUNCT, /* text in p->punct */
};

typedef struct parser {
	sg_cel_arena *a;
	const char *src;
	size_t len, off;
	int depth;
	/* the current token */
	enum tok tok;
	uint32_t tpos;
	char punct[3];
	const char *text; /* identifiers */
	size_t tlen;
	cval lit; /* literals */
	bool failed;
} parser;

static const char *const reserved[] = {"as",        "break",  "const",  "continue", "else", "for",
                                       "function",  "if",     "import", "let",      "loop", "package",
                                       "namespace", "return", "var",    "void",     "while"};

static int fail(parser *p, uint32_t pos, const char *fmt, ...) SG_PRINTF(3, 4);
static int fail(parser *p, uint32_t pos, const char *fmt, ...)
{
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p->failed = true;
	return sg_cel_error_at(p->src, p->len, pos, "%s", msg);
}

static int oom(parser *p)
{
	p->failed = true;
	return sg_error_set(SG_EINTERNAL, "out of memory parsing a CEL expression");
}

static int peekc(const parser *p, size_t k)
{
	return p->off + k < p->len ? (unsigned char)p->src[p->off + k] : -1;
}

static bool is_ident_start(int c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static size_t utf8_put(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

static void skip_space(parser *p)
{
	for (;;) {
		int c = peekc(p, 0);
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
			p->off++;
		} else if (c == '/' && peekc(p, 1) == '/') {
			while (p->off < p->len && p->src[p->off] != '\n')
				p->off++;
		} else {
			return;
		}
	}
}

static int lex_number(parser *p)
{
	size_t start = p->off;
	bool is_double = false, hex = false;
	if (peekc(p, 0) == '0' && (peekc(p, 1) == 'x' || peekc(p, 1) == 'X')) {
		hex = true;
		p->off += 2;
		if (hexval(peekc(p, 0)) < 0)
			return fail(p, p->tpos, "Syntax error: invalid hex literal");
		while (hexval(peekc(p, 0)) >= 0)
			p->off++;
	} else {
		while (is_digit(peekc(p, 0)))
			p->off++;
		if (peekc(p, 0) == '.' && is_digit(peekc(p, 1))) {
			is_double = true;
			p->off++;
			while (is_digit(peekc(p, 0)))
				p->off++;
		}
		if (peekc(p, 0) == 'e' || peekc(p, 0) == 'E') {
			size_t k = 1;
			if (peekc(p, 1) == '+' || peekc(p, 1) == '-')
				k = 2;
			if (is_digit(peekc(p, k))) {
				is_double = true;
				p->off += k;
				while (is_digit(peekc(p, 0)))
					p->off++;
			}
		}
	}
	char buf[400];
	size_t n = p->off - start;
	if (n >= sizeof(buf))
		return fail(p, p->tpos, "Syntax error: number literal too long");
	memcpy(buf, p->src + start, n);
	buf[n] = 0;
	sg_cel_value *v = sg_cel_new_value(p->a, SG_CEL_INT);
	if (!v)
		return oom(p);
	p->lit = v;
	if (is_double) {
		v->kind = SG_CEL_DOUBLE;
		errno = 0;
		v->d = strtod(buf, NULL);
		if (errno == ERANGE && isinf(v->d)) /* Go's ParseFloat: out of range */
			return fail(p, p->tpos, "invalid double literal");
		p->tok = K_DOUBLE;
		return 0;
	}
	bool u = peekc(p, 0) == 'u' || peekc(p, 0) == 'U';
	if (u)
		p->off++;
	errno = 0;
	char *end = NULL;
	unsigned long long x = strtoull(hex ? buf + 2 : buf, &end, hex ? 16 : 10);
	if (errno || *end)
		return fail(p, p->tpos, "invalid %s literal", u ? "uint" : "int");
	if (u) {
		v->kind = SG_CEL_UINT;
		v->u = x;
		p->tok = K_UINT;
	} else {
		/* Kept as magnitude; checked against the int range once the sign
		 * is known (the unary minus folds into the literal). */
		v->u = x;
		p->tok = K_INT;
	}
	if (is_ident_start(peekc(p, 0)) || is_digit(peekc(p, 0)))
		return fail(p, (uint32_t)p->off, "Syntax error: unexpected character after a number");
	return 0;
}

/* One escape after the backslash at p->off; appends to out. */
static int lex_escape(parser *p, bool bytes, char *out, size_t *n)
{
	uint32_t at = (uint32_t)p->off;
	p->off++; /* the backslash */
	int c = peekc(p, 0);
	static const char simple_in[] = "abfnrtv\\?\"'`";
	static const char simple_out[] = "\a\b\f\n\r\t\v\\?\"'`";
	const char *s = c > 0 ? strchr(simple_in, c) : NULL;
	if (s) {
		out[(*n)++] = simple_out[s - simple_in];
		p->off++;
		return 0;
	}
	uint32_t cp = 0;
	int digits = 0, base = 16;
	if (c == 'x' || c == 'X') {
		digits = 2;
	} else if (c == 'u') {
		digits = 4;
	} else if (c == 'U') {
		digits = 8;
		if (bytes)
			return fail(p, at, "Syntax error: \\U escape in a bytes literal");
	} else if (c >= '0' && c <= '3') {
		digits = 3;
		base = 8;
	} else {
		return fail(p, at, "Syntax error: invalid escape sequence");
	}
	if (base == 16)
		p->off++;
	for (int i = 0; i < digits; i++) {
		int d = peekc(p, 0);
		int v = base == 16 ? hexval(d) : (d >= '0' && d <= '7' ? d - '0' : -1);
		if (v < 0)
			return fail(p, at, "Syntax error: invalid escape sequence");
		cp = cp * (uint32_t)base + (uint32_t)v;
		p->off++;
	}
	if (bytes && (digits == 2 || base == 8)) {
		out[(*n)++] = (char)cp;
		return 0;
	}
	if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return fail(p, at, "Syntax error: invalid unicode code point in escape");
	*n += utf8_put(out + *n, cp);
	return 0;
}

static int lex_string(parser *p, bool raw, bool bytes)
{
	int q = peekc(p, 0);
	bool triple = peekc(p, 1) == q && peekc(p, 2) == q;
	p->off += triple ? 3 : 1;
	/* The value is never longer than the literal's text, so the literal's
	 * text is measured first (to its closing quote, or to the end of the
	 * source, where the loop below reports it unterminated): sizing by
	 * the rest of the source made a long rule with many literals quadratic
	 * in memory. */
	size_t end = p->off;
	while (end < p->len) {
		unsigned char ch = (unsigned char)p->src[end];
		if (ch == '\\' && !raw) {
			end += 2;
			continue;
		}
		if (ch == q && (!triple || (end + 2 < p->len && p->src[end + 1] == q && p->src[end + 2] == q)))
			break;
		end++;
	}
	char *out = sg_cel_alloc(p->a, (end < p->len ? end : p->len) - p->off + 1);
	if (!out)
		return oom(p);
	size_t n = 0;
	for (;;) {
		int c = peekc(p, 0);
		if (c < 0)
			return fail(p, p->tpos, "Syntax error: unterminated string literal");
		if (c == q && (!triple || (peekc(p, 1) == q && peekc(p, 2) == q))) {
			p->off += triple ? 3 : 1;
			break;
		}
		if (!triple && (c == '\n' || c == '\r'))
			return fail(p, p->tpos, "Syntax error: newline in a string literal");
		if (c == '\\' && !raw) {
			SG_TRY(lex_escape(p, bytes, out, &n));
			continue;
		}
		out[n++] = (char)c;
		p->off++;
	}
	out[n] = 0;
	sg_cel_value *v = sg_cel_new_value(p->a, bytes ? SG_CEL_BYTES : SG_CEL_STRING);
	if (!v)
		return oom(p);
	v->s.p = out;
	v->s.n = n;
	p->lit = v;
	p->tok = bytes ? K_BYTES : K_STRING;
	return 0;
}

static int next(parser *p)
{
	skip_space(p);
	p->tpos = (uint32_t)p->off;
	int c = peekc(p, 0);
	if (c < 0) {
		p->tok = K_EOF;
		return 0;
	}
	if (is_digit(c) || (c == '.' && is_digit(peekc(p, 1))))
		return lex_number(p);
	/* String prefixes: r, b, and both in either order. */
	if (is_ident_start(c)) {
		size_t k = 0;
		bool raw = false, bytes = false;
		while (k < 2) {
			int d = peekc(p, k);
			if ((d == 'r' || d == 'R') && !raw)
				raw = true;
			else if ((d == 'b' || d == 'B') && !bytes)
				bytes = true;
			else
				break;
			k++;
		}
		int q = peekc(p, k);
		if (k > 0 && (q == '"' || q == '\'')) {
			p->off += k;
			return lex_string(p, raw, bytes);
		}
		size_t start = p->off;
		while (is_ident_start(peekc(p, 0)) || is_digit(peekc(p, 0)))
			p->off++;
		p->text = p->src + start;
		p->tlen = p->off - start;
		static const struct {
			const char *w;
			enum tok t;
		} kw[] = {{"true", K_TRUE}, {"false", K_FALSE}, {"null", K_NULL}, {"in", K_IN}};
		p->tok = K_IDENT;
		for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
			if (strlen(kw[i].w) == p->tlen && memcmp(kw[i].w, p->text, p->tlen) == 0)
				p->tok = kw[i].t;
		return 0;
	}
	if (c == '"' || c == '\'')
		return lex_string(p, false, false);
	static const char *const two[] = {"==", "!=", "<=", ">=", "&&", "||"};
	for (size_t i = 0; i < sizeof(two) / sizeof(two[0]); i++)
		if (c == two[i][0] && peekc(p, 1) == two[i][1]) {
			memcpy(p->punct, two[i], 3);
			p->off += 2;
			p->tok = K_PUNCT;
			return 0;
		}
	if (strchr("+-*/%!<>?:.,()[]{}", c) && c) {
		p->punct[0] = (char)c;
		p->punct[1] = 0;
		p->off++;
		p->tok = K_PUNCT;
		return 0;
	}
	if (c >= 0x80)
		return fail(p, p->tpos, "Syntax error: unexpected character outside a string literal");
	if (c < 0x20 || c == 0x7f)
		return fail(p, p->tpos, "Syntax error: token recognition error at: '\\x%02x'", (unsigned)c);
	return fail(p, p->tpos, "Syntax error: token recognition error at: '%c'", c);
}

static bool is_punct(const parser *p, const char *s)
{
	return p->tok == K_PUNCT && strcmp(p->punct, s) == 0;
}

static const char *tok_text(const parser *p, char *buf, size_t cap)
{
	switch (p->tok) {
	case K_EOF:
		return "<EOF>";
	case K_PUNCT:
		return p->punct;
	default: {
		size_t n = p->off - p->tpos;
		if (n > cap - 4)
			n = cap - 4;
		memcpy(buf, p->src + p->tpos, n);
		buf[n] = 0;
		return buf;
	}
	}
}

static int expect(parser *p, const char *s)
{
	if (!is_punct(p, s)) {
		char buf[64];
		return fail(p, p->tpos, "Syntax error: mismatched input '%s' expecting '%s'",
		            tok_text(p, buf, sizeof(buf)), s);
	}
	return next(p);
}

/* ---- tree building ---- */

static sg_cel_node *node(parser *p, uint8_t kind, uint32_t pos)
{
	sg_cel_node *n = sg_cel_alloc(p->a, sizeof(*n));
	if (n) {
		memset(n, 0, sizeof(*n));
		n->kind = kind;
		n->pos = pos;
	}
	return n;
}

static char *dup_text(parser *p, const char *s, size_t n)
{
	return sg_cel_strndup(p->a, s, n);
}

static int enter(parser *p)
{
	if (++p->depth > SG_CEL_DEPTH_MAX)
		return fail(p, p->tpos, "expression recursion limit exceeded (%d)", SG_CEL_DEPTH_MAX);
	return 0;
}

static int parse_expr(parser *p, sg_cel_node **out);

static int mk_call(parser *p, sg_cel_node **out, const char *name, uint32_t pos, sg_cel_node *target,
                   sg_cel_node **args, size_t n)
{
	sg_cel_node *c = node(p, N_CALL, pos);
	if (!c)
		return oom(p);
	c->call.name = name;
	c->call.target = target;
	c->call.args = args;
	c->call.nargs = n;
	*out = c;
	return 0;
}

static int mk_binary(parser *p, sg_cel_node **out, const char *name, uint32_t pos, sg_cel_node *l, sg_cel_node *r)
{
	sg_cel_node **args = sg_cel_alloc(p->a, 2 * sizeof(*args));
	if (!args)
		return oom(p);
	args[0] = l;
	args[1] = r;
	return mk_call(p, out, name, pos, NULL, args, 2);
}

/* Comma-separated expressions up to the closing punctuation `end`. */
static int parse_list(parser *p, const char *end, sg_cel_node ***items, size_t *n, bool trailing_comma)
{
	size_t cap = 4;
	*n = 0;
	*items = sg_cel_alloc(p->a, cap * sizeof(**items));
	if (!*items)
		return oom(p);
	while (!is_punct(p, end)) {
		if (*n == cap) {
			sg_cel_node **bigger = sg_cel_alloc(p->a, 2 * cap * sizeof(*bigger));
			if (!bigger)
				return oom(p);
			memcpy(bigger, *items, cap * sizeof(*bigger));
			*items = bigger;
			cap *= 2;
		}
		SG_TRY(parse_expr(p, &(*items)[(*n)++]));
		if (!is_punct(p, ","))
			break;
		SG_TRY(next(p));
		if (is_punct(p, end) && !trailing_comma) {
			char buf[64];
			return fail(p, p->tpos, "Syntax error: mismatched input '%s'", tok_text(p, buf, sizeof(buf)));
		}
	}
	return expect(p, end);
}

static int parse_map(parser *p, sg_cel_node **out, uint32_t pos)
{
	size_t cap = 8, n = 0;
	sg_cel_node **items = sg_cel_alloc(p->a, cap * sizeof(*items));
	if (!items)
		return oom(p);
	while (!is_punct(p, "}")) {
		if (n + 2 > cap) {
			sg_cel_node **bigger = sg_cel_alloc(p->a, 2 * cap * sizeof(*bigger));
			if (!bigger)
				return oom(p);
			memcpy(bigger, items, cap * sizeof(*bigger));
			items = bigger;
			cap *= 2;
		}
		SG_TRY(parse_expr(p, &items[n++]));
		SG_TRY(expect(p, ":"));
		SG_TRY(parse_expr(p, &items[n++]));
		if (!is_punct(p, ","))
			break;
		SG_TRY(next(p));
	}
	SG_TRY(expect(p, "}"));
	sg_cel_node *m = node(p, N_MAP, pos);
	if (!m)
		return oom(p);
	m->list.items = items;
	m->list.n = n;
	*out = m;
	return 0;
}

static int ident_name(parser *p, const char **name)
{
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		if (strlen(reserved[i]) == p->tlen && memcmp(reserved[i], p->text, p->tlen) == 0)
			return fail(p, p->tpos, "reserved identifier: %.*s", (int)p->tlen, p->text);
	*name = dup_text(p, p->text, p->tlen);
	return *name ? 0 : oom(p);
}

/* has(e.f) and the comprehension macros; *done when it was one. */
static int macro_global(parser *p, sg_cel_node **out, const char *name, uint32_t pos, sg_cel_node **args, size_t n,
                        bool *done)
{
	*done = false;
	if (strcmp(name, "has") != 0 || n != 1)
		return 0;
	*done = true;
	if (args[0]->kind != N_SELECT || args[0]->sel.test)
		return fail(p, args[0]->pos, "invalid argument to has() macro");
	args[0]->sel.test = true;
	args[0]->pos = pos;
	*out = args[0];
	return 0;
}

static int macro_member(parser *p, sg_cel_node **out, const char *name, uint32_t pos, sg_cel_node *target,
                        sg_cel_node **args, size_t n, bool *done)
{
	/* nargs counts the variables; two variables are the two-variable
	 * comprehensions of cel-go's extension (the checker refuses them
	 * unless the environment enables it). pred/xform: which arguments
	 * after the variables are the predicate and the transform. */
	static const struct {
		const char *name;
		size_t nargs;
		uint8_t macro;
		uint8_t nvars;
	} macros[] = {
	    {"all", 2, M_ALL, 1},
	    {"exists", 2, M_EXISTS, 1},
	    {"exists_one", 2, M_EXISTS_ONE, 1},
	    {"map", 2, M_MAP, 1},
	    {"map", 3, M_MAP_FILTER, 1},
	    {"filter", 2, M_FILTER, 1},
	    {"all", 3, M_ALL, 2},
	    {"exists", 3, M_EXISTS, 2},
	    {"existsOne", 3, M_EXISTS_ONE, 2},
	    {"transformList", 3, M_TLIST, 2},
	    {"transformList", 4, M_TLIST, 2},
	    {"transformMap", 3, M_TMAP, 2},
	    {"transformMap", 4, M_TMAP, 2},
	};
	*done = false;
	for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++) {
		if (strcmp(macros[i].name, name) != 0 || macros[i].nargs != n)
			continue;
		*done = true;
		size_t nv = macros[i].nvars;
		for (size_t v = 0; v < nv; v++)
			if (args[v]->kind != N_IDENT || args[v]->id.rooted)
				return fail(p, args[v]->pos, "argument must be a simple name");
		sg_cel_node *c = node(p, N_COMP, pos);
		if (!c)
			return oom(p);
		uint8_t m = macros[i].macro;
		c->comp.macro = m;
		c->comp.name = macros[i].name;
		c->comp.var = args[0]->id.name;
		c->comp.var2 = nv == 2 ? args[1]->id.name : NULL;
		c->comp.range = target;
		bool transform = m == M_MAP || m == M_MAP_FILTER || m == M_TLIST || m == M_TMAP;
		if (transform) {
			c->comp.xform = args[n - 1];
			if (n - nv == 2)
				c->comp.pred = args[nv];
		} else {
			c->comp.pred = args[nv];
		}
		*out = c;
		return 0;
	}
	return 0;
}

static int parse_primary(parser *p, sg_cel_node **out)
{
	uint32_t pos = p->tpos;
	char buf[64];
	switch (p->tok) {
	case K_INT: {
		if (p->lit->u > INT64_MAX)
			return fail(p, pos, "invalid int literal");
		((sg_cel_value *)p->lit)->i = (int64_t)p->lit->u;
	}
		/* fall through */
	case K_UINT:
	case K_DOUBLE:
	case K_STRING:
	case K_BYTES: {
		sg_cel_node *n = node(p, N_LIT, pos);
		if (!n)
			return oom(p);
		n->lit = p->lit;
		*out = n;
		return next(p);
	}
	case K_TRUE:
	case K_FALSE:
	case K_NULL: {
		sg_cel_node *n = node(p, N_LIT, pos);
		sg_cel_value *v = sg_cel_new_value(p->a, p->tok == K_NULL ? SG_CEL_NULL : SG_CEL_BOOL);
		if (!n || !v)
			return oom(p);
		v->b = p->tok == K_TRUE;
		n->lit = v;
		*out = n;
		return next(p);
	}
	case K_PUNCT:
		if (is_punct(p, "(")) {
			SG_TRY(next(p));
			SG_TRY(parse_expr(p, out));
			return expect(p, ")");
		}
		if (is_punct(p, "[")) {
			SG_TRY(next(p));
			sg_cel_node *l = node(p, N_LIST, pos);
			if (!l)
				return oom(p);
			SG_TRY(parse_list(p, "]", &l->list.items, &l->list.n, true));
			*out = l;
			return 0;
		}
		if (is_punct(p, "{")) {
			SG_TRY(next(p));
			return parse_map(p, out, pos);
		}
		if (is_punct(p, ".")) {
			SG_TRY(next(p));
			if (p->tok != K_IDENT)
				return fail(p, p->tpos, "Syntax error: mismatched input '%s' expecting IDENTIFIER",
				            tok_text(p, buf, sizeof(buf)));
			SG_TRY(parse_primary(p, out));
			if ((*out)->kind == N_IDENT)
				(*out)->id.rooted = true;
			return 0;
		}
		break;
	case K_IDENT: {
		const char *name;
		SG_TRY(ident_name(p, &name));
		SG_TRY(next(p));
		if (is_punct(p, "(")) {
			SG_TRY(next(p));
			sg_cel_node **args;
			size_t n;
			SG_TRY(parse_list(p, ")", &args, &n, false));
			bool done;
			SG_TRY(macro_global(p, out, name, pos, args, n, &done));
			if (done)
				return 0;
			return mk_call(p, out, name, pos, NULL, args, n);
		}
		if (is_punct(p, "{"))
			return fail(p, p->tpos, "message construction is not supported");
		sg_cel_node *n = node(p, N_IDENT, pos);
		if (!n)
			return oom(p);
		n->id.name = name;
		*out = n;
		return 0;
	}
	default:
		break;
	}
	return fail(p, pos, "Syntax error: mismatched input '%s' expecting an expression",
	            tok_text(p, buf, sizeof(buf)));
}

static int parse_member(parser *p, sg_cel_node **out)
{
	SG_TRY(parse_primary(p, out));
	int levels = 0;
	for (;;) {
		uint32_t pos = p->tpos;
		if (is_punct(p, ".")) {
			SG_TRY(next(p));
			if (p->tok != K_IDENT) {
				char buf[64];
				return fail(p, p->tpos, "Syntax error: mismatched input '%s' expecting IDENTIFIER",
				            tok_text(p, buf, sizeof(buf)));
			}
			const char *name = dup_text(p, p->text, p->tlen);
			if (!name)
				return oom(p);
			uint32_t npos = p->tpos;
			SG_TRY(next(p));
			if (is_punct(p, "(")) {
				SG_TRY(next(p));
				sg_cel_node **args;
				size_t n;
				SG_TRY(parse_list(p, ")", &args, &n, false));
				bool done;
				SG_TRY(macro_member(p, out, name, npos, *out, args, n, &done));
				if (!done)
					SG_TRY(mk_call(p, out, name, npos, *out, args, n));
			} else {
				sg_cel_node *s = node(p, N_SELECT, pos);
				if (!s)
					return oom(p);
				s->sel.operand = *out;
				s->sel.field = name;
				*out = s;
			}
		} else if (is_punct(p, "[")) {
			SG_TRY(next(p));
			sg_cel_node *idx;
			SG_TRY(enter(p));
			SG_TRY(parse_expr(p, &idx));
			p->depth--;
			SG_TRY(expect(p, "]"));
			SG_TRY(mk_binary(p, out, "_[_]", pos, *out, idx));
		} else if (is_punct(p, "{")) {
			return fail(p, pos, "message construction is not supported");
		} else {
			break;
		}
		/* A chain of selections is a chain of nested nodes. */
		if (++levels > SG_CEL_DEPTH_MAX)
			return fail(p, pos, "expression recursion limit exceeded (%d)", SG_CEL_DEPTH_MAX);
	}
	return 0;
}

/* Folds a sign into a number literal: -9223372036854775808 and -1.5 are
 * literals, as in cel-go. */
static int parse_unary(parser *p, sg_cel_node **out)
{
	uint32_t pos = p->tpos;
	SG_TRY(enter(p));
	if (is_punct(p, "!") || is_punct(p, "-")) {
		bool neg = is_punct(p, "-");
		SG_TRY(next(p));
		if (neg && (p->tok == K_INT || p->tok == K_DOUBLE)) {
			/* -literal, unless a member operation follows it. */
			sg_cel_value *v = (sg_cel_value *)p->lit;
			if (p->tok == K_INT) {
				if (v->u > (uint64_t)INT64_MAX + 1)
					return fail(p, p->tpos, "invalid int literal");
				v->i = v->u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v->u;
			} else {
				v->d = -v->d;
			}
			v->kind = p->tok == K_INT ? SG_CEL_INT : SG_CEL_DOUBLE;
			sg_cel_node *n = node(p, N_LIT, pos);
			if (!n)
				return oom(p);
			n->lit = v;
			*out = n;
			SG_TRY(next(p));
			/* A member operation binds tighter: -1.foo() is -(1.foo()),
			 * which only a receiver function could make sense of. */
			p->depth--;
			return 0;
		}
		sg_cel_node *operand;
		SG_TRY(parse_unary(p, &operand));
		sg_cel_node **args = sg_cel_alloc(p->a, sizeof(*args));
		if (!args)
			return oom(p);
		args[0] = operand;
		SG_TRY(mk_call(p, out, neg ? "-_" : "!_", pos, NULL, args, 1));
		p->depth--;
		return 0;
	}
	SG_TRY(parse_member(p, out));
	p->depth--;
	return 0;
}

typedef int (*level_fn)(parser *p, sg_cel_node **out);

/* One left-associative binary level: ops[i] maps to names[i]. */
static int parse_level(parser *p, sg_cel_node **out, level_fn sub, const char *const *ops, const char *const *names,
                       size_t nops)
{
	SG_TRY(sub(p, out));
	int chain = 0;
	for (;;) {
		size_t i = 0;
		for (; i < nops; i++)
			if ((strcmp(ops[i], "in") == 0 && p->tok == K_IN) || is_punct(p, ops[i]))
				break;
		if (i == nops)
			return 0;
		uint32_t pos = p->tpos;
		SG_TRY(next(p));
		sg_cel_node *r;
		SG_TRY(sub(p, &r));
		SG_TRY(mk_binary(p, out, names[i], pos, *out, r));
		/* The tree grows one level per operator: bound it like nesting. */
		if (++chain > SG_CEL_DEPTH_MAX)
			return fail(p, pos, "expression recursion limit exceeded (%d)", SG_CEL_DEPTH_MAX);
	}
}

static int parse_mul(parser *p, sg_cel_node **out)
{
	static const char *const ops[] = {"*", "/", "%"};
	static const char *const names[] = {"_*_", "_/_", "_%_"};
	return parse_level(p, out, parse_unary, ops, names, 3);
}

static int parse_add(parser *p, sg_cel_node **out)
{
	static const char *const ops[] = {"+", "-"};
	static const char *const names[] = {"_+_", "_-_"};
	return parse_level(p, out, parse_mul, ops, names, 2);
}

static int parse_rel(parser *p, sg_cel_node **out)
{
	static const char *const ops[] = {"<", "<=", ">", ">=", "==", "!=", "in"};
	static const char *const names[] = {"_<_", "_<=_", "_>_", "_>=_", "_==_", "_!=_", "@in"};
	return parse_level(p, out, parse_add, ops, names, 7);
}

static int parse_and(parser *p, sg_cel_node **out)
{
	static const char *const ops[] = {"&&"};
	static const char *const names[] = {"_&&_"};
	return parse_level(p, out, parse_rel, ops, names, 1);
}

static int parse_or(parser *p, sg_cel_node **out)
{
	static const char *const ops[] = {"||"};
	static const char *const names[] = {"_||_"};
	return parse_level(p, out, parse_and, ops, names, 1);
}

static int parse_expr(parser *p, sg_cel_node **out)
{
	SG_TRY(enter(p));
	SG_TRY(parse_or(p, out));
	if (is_punct(p, "?")) {
		uint32_t pos = p->tpos;
		SG_TRY(next(p));
		sg_cel_node **args = sg_cel_alloc(p->a, 3 * sizeof(*args));
		if (!args)
			return oom(p);
		args[0] = *out;
		SG_TRY(parse_or(p, &args[1]));
		SG_TRY(expect(p, ":"));
		SG_TRY(parse_expr(p, &args[2]));
		SG_TRY(mk_call(p, out, "_?_:_", pos, NULL, args, 3));
	}
	p->depth--;
	return 0;
}

/* The depth of the tree, bounded: the checker and evaluator recurse on it. */
static int tree_depth(const sg_cel_node *n, int d, int *max)
{
	if (!n)
		return 0;
	if (d > *max)
		*max = d;
	if (d > SG_CEL_DEPTH_MAX)
		return -1;
	switch (n->kind) {
	case N_SELECT:
		return tree_depth(n->sel.operand, d + 1, max);
	case N_CALL:
		if (tree_depth(n->call.target, d + 1, max) < 0)
			return -1;
		for (size_t i = 0; i < n->call.nargs; i++)
			if (tree_depth(n->call.args[i], d + 1, max) < 0)
				return -1;
		return 0;
	case N_LIST:
	case N_MAP:
		for (size_t i = 0; i < n->list.n; i++)
			if (tree_depth(n->list.items[i], d + 1, max) < 0)
				return -1;
		return 0;
	case N_COMP:
		if (tree_depth(n->comp.range, d + 1, max) < 0 || tree_depth(n->comp.pred, d + 1, max) < 0)
			return -1;
		return tree_depth(n->comp.xform, d + 1, max);
	default:
		return 0;
	}
}

int sg_cel_parse(sg_cel_node **out, sg_cel_arena *a, const char *src, size_t len)
{
	parser p = {.a = a, .src = src, .len = len};
	*out = NULL;
	if (!sg_cel_utf8_valid(src, len))
		return sg_error_set(SG_EINVAL, "ERROR: <input>: the expression is not valid UTF-8");
	SG_TRY(next(&p));
	if (p.tok == K_EOF)
		return fail(&p, 0, "Syntax error: mismatched input '<EOF>' expecting an expression");
	SG_TRY(parse_expr(&p, out));
	if (p.tok != K_EOF) {
		char buf[64];
		return fail(&p, p.tpos, "Syntax error: extraneous input '%s' expecting <EOF>",
		            tok_text(&p, buf, sizeof(buf)));
	}
	int max = 0;
	if (tree_depth(*out, 0, &max) < 0)
		return fail(&p, 0, "expression recursion limit exceeded (%d)", SG_CEL_DEPTH_MAX);
	return 0;
}
