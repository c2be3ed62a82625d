/*
 * Label selectors (contract: sg_kube_selector.h), after apimachinery's
 * pkg/labels/selector.go: a lexer of identifiers and operator tokens, a
 * recursive-descent parser of requirements, and a matcher.
 *
 * The parser works on the caller's string in place and copies only what a
 * requirement keeps (its key and values), each bounded by the grammar
 * (keys 253 + 1 + 63 bytes, values 63), so a hostile selector costs at most
 * SG_KUBE_SELECTOR_MAX bytes of copies. Integers of '<' and '>' are parsed
 * with overflow checks; a label value that is not an integer never matches
 * them, as in apimachinery.
 */
#include "sg_kube_selector.h"
#include "sg_guard.h"
#include "sg_kube.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX (SG_KUBE_NAME_MAX + 1 + 63) /* the longest valid key */

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
		if (b < 0x21 || b > 0x7e || n + 1 >= sizeof(l->tok))
			return T_BAD;
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

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label value or the name part of a key. */
static bool name_ok(const char *s, size_t n, bool empty_ok)
{
	if (n == 0)
		return empty_ok;
	if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

static bool key_ok(const char *k)
{
	const char *slash = strchr(k, '/');
	if (!slash)
		return name_ok(k, strlen(k), false);
	return sg_kube_dns_subdomain(k, (size_t)(slash - k)) && name_ok(slash + 1, strlen(slash + 1), false);
}

/* An optional '-' and 1..18 digits (no overflow of long long). */
static bool integer(const char *s, long long *out)
{
	const char *d = *s == '-' ? s + 1 : s;
	size_t n = strlen(d);
	if (n == 0 || n > 18 || strspn(d, "0123456789") != n)
		return false;
	*out = strtoll(s, NULL, 10);
	return true;
}

static int fail(const lexer *l, const char *why)
{
	return sg_error_set(SG_EINVAL, "%s \"%.200s\": %s at offset %zu", l->what, l->s, why, l->i);
}

static int keep(char **out, const char *s)
{
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "label selector: out of memory");
	return SG_OK;
}

static int add_value(req *r, const char *v)
{
	SG_ENSURE(r->nvalues < SG_KUBE_SELECTOR_VALUES, SG_EINVAL, "label selector: more than %d values in a set",
	          SG_KUBE_SELECTOR_VALUES);
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
		if (t == T_CLOSE && r->nvalues == 0)
			return fail(l, "the value set of in/notin is empty");
		if (t == T_IDENT || t == T_IN || t == T_NOTIN) {
			if (!name_ok(l->tok, strlen(l->tok), true))
				return fail(l, "invalid label value");
			SG_TRY(add_value(r, l->tok));
			t = next(l);
		} else if (t == T_COMMA || t == T_CLOSE) {
			SG_TRY(add_value(r, "")); /* an empty value, as in "(a,)" */
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
	if (negated)
		return fail(l, "'!key' takes no operator");
	o = next(l);
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
		if (r->op == OP_GT || r->op == OP_LT)
			return fail(l, "'<' and '>' need an integer");
		return add_value(r, ""); /* key= (empty value) */
	}
	v = next(l);
	if (v != T_IDENT && v != T_IN && v != T_NOTIN)
		return fail(l, "expected a value");
	if (r->op == OP_GT || r->op == OP_LT)
		return integer(l->tok, &r->num) ? SG_OK : fail(l, "'<' and '>' need an integer");
	if (!name_ok(l->tok, strlen(l->tok), true))
		return fail(l, "invalid label value");
	return add_value(r, l->tok);
}

static int parse(sg_kube_selector *sel, lexer *l)
{
	if (peek(l) == T_END)
		return SG_OK;
	for (;;) {
		SG_ENSURE(sel->nreqs < SG_KUBE_SELECTOR_REQS, SG_EINVAL, "%s: more than %d requirements", l->what,
		          SG_KUBE_SELECTOR_REQS);
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

static bool in_set(const req *r, const char *v)
{
	for (size_t i = 0; i < r->nvalues; i++)
		if (strcmp(r->values[i], v) == 0)
			return true;
	return false;
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
