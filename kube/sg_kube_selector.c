/*
 * Label selectors (contract: sg_kube_selector.h), after apimachinery's
 * pkg/labels/selector.go: a lexer of identifiers and operator tokens, a
 * recursive-descent parser of requirements, and a matcher.
 *
 * The parser works on the caller's string in place and copies only what a
 * requirement keeps (its key and values), each bounded by the grammar
 * (keys 253 + 1 + 63 bytes, values 63), so a hostile selector costs at most
 * SG_KUBE_SELECTOR_MAX bytes of copies.
 *
 * Where apimachinery's behaviour is subtle, this follows it:
 *   - "in ()" and "notin ()" are the set holding only the empty value;
 *     empty values may appear anywhere in a list ("(a,,b)", "(,)");
 *   - the operand of '<' and '>' must be a valid label value (so no sign:
 *     "a<-5" is refused, as NewRequirement refuses it) that
 *     strconv.ParseInt(v, 10, 64) reads; the label's value is read by
 *     ParseInt too (optional sign, any number of digits within int64), and
 *     one it cannot read never matches;
 *   - the value set is a set: duplicates count once against
 *     SG_KUBE_SELECTOR_VALUES.
 * Error offsets are those of the first byte of the offending token (the
 * end of the string for a missing one), and the selector is quoted in the
 * message with bytes outside printable ASCII escaped, so a hostile
 * selector cannot put raw control or invalid UTF-8 bytes into a log line
 * or a status condition.
 */
#include "sg_kube_selector.h"
#include "sg_guard.h"
#include "sg_kube.h"
#include "sg_names.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX (SG_KUBE_NAME_MAX + 1 + 63) /* the longest valid key */
#define STR_(x) #x
#define STR(x) STR_(x)

typedef enum op { OP_EXISTS, OP_NOT_EXISTS, OP_EQ, OP_NEQ, OP_IN, OP_NOTIN, OP_GT, OP_LT } op;

typedef struct req {
	op op;
	char *key;
	char **values; /* OP_EQ, OP_NEQ (one), OP_IN, OP_NOTIN */
	size_t nvalues;
	long long num; /* OP_GT, OP_LT */
} req;

struct sg_kube_selector {
	char *text;
	req reqs[SG_KUBE_SELECTOR_REQS];
	size_t nreqs;
};

/* ---- lexer ---- */

enum tok { T_END, T_IDENT, T_COMMA, T_OPEN, T_CLOSE, T_NOT, T_EQ, T_DEQ, T_NEQ, T_GT, T_LT, T_IN, T_NOTIN, T_BAD };

typedef struct lexer {
	const char *s;
	const char *what;
	size_t i;
	size_t start;            /* offset of the last token read (of the bad byte for T_BAD) */
	const char *bad;         /* why the last token is T_BAD */
	char tok[TOKEN_MAX + 2]; /* an identifier (one byte more than valid, to tell "too long") */
} lexer;

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool special(char c)
{
	return c == '!' || c == '=' || c == ',' || c == '(' || c == ')' || c == '<' || c == '>' || blank(c);
}

/* Reads the next token; an identifier is copied into l->tok. A byte that
 * is neither special nor printable ASCII, or an identifier longer than any
 * valid one, is T_BAD. */
static int next(lexer *l)
{
	while (blank(l->s[l->i]))
		l->i++;
	l->start = l->i;
	l->bad = NULL;
	char c = l->s[l->i];
	if (!c)
		return T_END;
	l->i++;
	switch (c) {
	case ',':
		return T_COMMA;
	case '(':
		return T_OPEN;
	case ')':
		return T_CLOSE;
	case '<':
		return T_LT;
	case '>':
		return T_GT;
	case '!':
		if (l->s[l->i] == '=') {
			l->i++;
			return T_NEQ;
		}
		return T_NOT;
	case '=':
		if (l->s[l->i] == '=') {
			l->i++;
			return T_DEQ;
		}
		return T_EQ;
	}
	size_t n = 0;
	l->i--;
	while (l->s[l->i] && !special(l->s[l->i])) {
		unsigned char b = (unsigned char)l->s[l->i];
		if (b < 0x21 || b > 0x7e) {
			l->start = l->i;
			l->bad = "a byte that is not printable ASCII";
			return T_BAD;
		}
		if (n + 1 >= sizeof(l->tok)) {
			l->bad = "a name longer than any valid label key";
			return T_BAD;
		}
		l->tok[n++] = (char)b;
		l->i++;
	}
	l->tok[n] = 0;
	if (strcmp(l->tok, "in") == 0)
		return T_IN;
	if (strcmp(l->tok, "notin") == 0)
		return T_NOTIN;
	return T_IDENT;
}

static int peek(lexer *l)
{
	lexer save = *l;
	int t = next(l);
	*l = save;
	return t;
}

/* ---- grammar ---- */

/* A label value (empty where empty_ok) or the name part of a key. */
static bool name_ok(const char *s, size_t n, bool empty_ok)
{
	return n == 0 ? empty_ok : sg_names_label_name(s, n, SG_NAMES_LABEL_MAX);
}

static bool key_ok(const char *k)
{
	return sg_names_qualified(k, strlen(k));
}

/* Go's strconv.ParseInt(s, 10, 64): an optional sign, then one or more
 * decimal digits, the value within int64. */
static bool integer(const char *s, long long *out)
{
	bool neg = *s == '-';
	if (*s == '-' || *s == '+')
		s++;
	if (!*s)
		return false;
	unsigned long long lim = neg ? (unsigned long long)LLONG_MAX + 1u : (unsigned long long)LLONG_MAX;
	unsigned long long v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (lim - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = !neg ? (long long)v : v == lim ? LLONG_MIN : -(long long)v;
	return true;
}

/* The selector for a message: at most 160 bytes of it, bytes outside
 * printable ASCII (and '"', '\\') escaped as \xNN. */
static void quote(char out[200], const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (; *s && o < 160; s++) {
		unsigned char b = (unsigned char)*s;
		if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
			out[o++] = (char)b;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[b >> 4];
			out[o++] = hex[b & 15];
		}
	}
	if (*s) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = 0;
}

/* Fails at the token last read; a T_BAD token gives its own reason. */
static int fail(const lexer *l, const char *why)
{
	char q[200];
	quote(q, l->s);
	return sg_error_set(SG_EINVAL, "%s \"%s\": %s at offset %zu", l->what, q, l->bad ? l->bad : why, l->start);
}

static int keep(char **out, const char *s)
{
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "label selector: out of memory");
	return SG_OK;
}

static bool in_set(const req *r, const char *v)
{
	for (size_t i = 0; i < r->nvalues; i++)
		if (strcmp(r->values[i], v) == 0)
			return true;
	return false;
}

/* Adds v to the set (once); l for the message when the set is full. */
static int add_value(lexer *l, req *r, const char *v)
{
	if (in_set(r, v))
		return SG_OK;
	if (r->nvalues >= SG_KUBE_SELECTOR_VALUES)
		return fail(l, "more than " STR(SG_KUBE_SELECTOR_VALUES) " values in a set");
	if (!r->values) {
		r->values = calloc(SG_KUBE_SELECTOR_VALUES, sizeof(char *));
		SG_ENSURE(r->values, SG_EINTERNAL, "label selector: out of memory");
	}
	SG_TRY(keep(&r->values[r->nvalues], v));
	r->nvalues++;
	return SG_OK;
}

static int values(lexer *l, req *r)
{
	if (next(l) != T_OPEN)
		return fail(l, "expected '(' after in/notin");
	for (;;) {
		int t = next(l);
		if (t == T_IDENT || t == T_IN || t == T_NOTIN) {
			if (!name_ok(l->tok, strlen(l->tok), true))
				return fail(l, "invalid label value");
			SG_TRY(add_value(l, r, l->tok));
			t = next(l);
		} else if (t == T_COMMA || t == T_CLOSE) {
			SG_TRY(add_value(l, r, "")); /* an empty value: "()", "(a,)", "(,a)" */
		} else {
			return fail(l, "expected a value");
		}
		if (t == T_CLOSE)
			return SG_OK;
		if (t != T_COMMA)
			return fail(l, "expected ',' or ')'");
	}
}

static int requirement(lexer *l, req *r)
{
	int t = next(l);
	bool negated = t == T_NOT;
	if (negated)
		t = next(l);
	if (t != T_IDENT && t != T_IN && t != T_NOTIN)
		return fail(l, "expected a label key");
	if (!key_ok(l->tok))
		return fail(l, "invalid label key");
	SG_TRY(keep(&r->key, l->tok));
	int o = peek(l);
	if (o == T_END || o == T_COMMA) {
		r->op = negated ? OP_NOT_EXISTS : OP_EXISTS;
		return SG_OK;
	}
	o = next(l);
	if (negated)
		return fail(l, "'!key' takes no operator");
	switch (o) {
	case T_IN:
	case T_NOTIN:
		r->op = o == T_IN ? OP_IN : OP_NOTIN;
		return values(l, r);
	case T_EQ:
	case T_DEQ:
	case T_NEQ:
		r->op = o == T_NEQ ? OP_NEQ : OP_EQ;
		break;
	case T_GT:
	case T_LT:
		r->op = o == T_GT ? OP_GT : OP_LT;
		break;
	default:
		return fail(l, "expected an operator (=, ==, !=, in, notin, <, >)");
	}
	int v = peek(l);
	if (v == T_END || v == T_COMMA) {
		if (r->op == OP_GT || r->op == OP_LT) {
			next(l);
			return fail(l, "'<' and '>' need an integer");
		}
		return add_value(l, r, ""); /* key= (empty value) */
	}
	v = next(l);
	if (v != T_IDENT && v != T_IN && v != T_NOTIN)
		return fail(l, "expected a value");
	if (r->op == OP_GT || r->op == OP_LT) {
		if (!integer(l->tok, &r->num))
			return fail(l, "'<' and '>' need an integer");
		/* NewRequirement checks it as a label value too: no sign. */
		if (!name_ok(l->tok, strlen(l->tok), false))
			return fail(l, "the integer of '<' and '>' must be a valid label value (no sign)");
		return SG_OK;
	}
	if (!name_ok(l->tok, strlen(l->tok), true))
		return fail(l, "invalid label value");
	return add_value(l, r, l->tok);
}

static int parse(sg_kube_selector *sel, lexer *l)
{
	if (peek(l) == T_END)
		return SG_OK;
	for (;;) {
		if (sel->nreqs == SG_KUBE_SELECTOR_REQS) {
			next(l);
			return fail(l, "more than " STR(SG_KUBE_SELECTOR_REQS) " requirements");
		}
		SG_TRY(requirement(l, &sel->reqs[sel->nreqs++]));
		int t = next(l);
		if (t == T_END)
			return SG_OK;
		if (t != T_COMMA)
			return fail(l, "expected ','");
	}
}

void sg_kube_selector_free(sg_kube_selector *sel)
{
	if (!sel)
		return;
	for (size_t i = 0; i < sel->nreqs; i++) {
		req *r = &sel->reqs[i];
		free(r->key);
		for (size_t v = 0; v < r->nvalues; v++)
			free(r->values[v]);
		free(r->values);
	}
	free(sel->text);
	free(sel);
}

int sg_kube_selector_parse(sg_kube_selector **out, const char *s, const char *what)
{
	*out = NULL;
	what = what ? what : "label selector";
	s = s ? s : "";
	size_t n = strnlen(s, SG_KUBE_SELECTOR_MAX + 1);
	SG_ENSURE(n <= SG_KUBE_SELECTOR_MAX, SG_EINVAL, "%s longer than %d bytes", what, SG_KUBE_SELECTOR_MAX);
	sg_kube_selector *sel = calloc(1, sizeof(*sel));
	SG_ENSURE(sel, SG_EINTERNAL, "label selector: out of memory");
	while (n && blank(s[n - 1]))
		n--;
	size_t lead = 0;
	while (lead < n && blank(s[lead]))
		lead++;
	sel->text = strndup(s + lead, n - lead);
	lexer l = {.s = s, .what = what};
	int rc = sel->text ? parse(sel, &l) : sg_error_set(SG_EINTERNAL, "label selector: out of memory");
	if (rc < 0) {
		sg_kube_selector_free(sel);
		return rc;
	}
	*out = sel;
	return SG_OK;
}

bool sg_kube_selector_everything(const sg_kube_selector *sel)
{
	return sel->nreqs == 0;
}

const char *sg_kube_selector_string(const sg_kube_selector *sel)
{
	return sel->text;
}

static bool holds(const req *r, const json_t *labels)
{
	json_t *lv = json_is_object(labels) ? json_object_get(labels, r->key) : NULL;
	const char *v = json_string_value(lv);
	long long num = 0;
	switch (r->op) {
	case OP_EXISTS:
		return v != NULL;
	case OP_NOT_EXISTS:
		return v == NULL;
	case OP_EQ:
	case OP_IN:
		return v && in_set(r, v);
	case OP_NEQ:
	case OP_NOTIN:
		return !v || !in_set(r, v);
	case OP_GT:
		return v && integer(v, &num) && num > r->num;
	case OP_LT:
		return v && integer(v, &num) && num < r->num;
	}
	return false;
}

bool sg_kube_selector_matches(const sg_kube_selector *sel, const json_t *labels)
{
	for (size_t i = 0; i < sel->nreqs; i++)
		if (!holds(&sel->reqs[i], labels))
			return false;
	return true;
}
