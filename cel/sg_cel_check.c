/*
 * sg_cel_check: name resolution and gradual type checking (cel-spec
 * doc/langdef.md, "Gradual Type Checking" and "Name Resolution").
 *
 * Every identifier is resolved here: a comprehension variable (innermost
 * first), a declared variable, or a type name (int, string, ...). Unknown
 * names and functions are errors in every mode. Types: declared variables
 * and literals have exact types; `dyn` is compatible with everything;
 * list and map literals of mixed element types are list(dyn) and
 * map(K, dyn). A call must match one of its function's overloads (the
 * signatures of sg_cel_lib.c, type parameters A and B unified along the
 * way), field selection must name a declared field of an object, a map's
 * value or a dyn; cel-go's checker rejects the same expressions in these
 * cases, with the same wording where it mattered to users ("undeclared
 * reference", "found no matching overload", "undefined field").
 *
 * Unchecked mode (sg_cel_env_set_unchecked) keeps the resolution and
 * drops the overload and field checks: a mismatch types as dyn and is left
 * to the runtime.
 */
#include "sg_cel_int.h"
#include "sg_guard.h"

#include <stdio.h>
#include <string.h>

const sg_cel_type sg_cel_t_dyn = {.k = T_DYN}, sg_cel_t_null = {.k = T_NULL}, sg_cel_t_bool = {.k = T_BOOL},
                  sg_cel_t_int = {.k = T_INT}, sg_cel_t_uint = {.k = T_UINT}, sg_cel_t_double = {.k = T_DOUBLE},
                  sg_cel_t_string = {.k = T_STRING}, sg_cel_t_bytes = {.k = T_BYTES}, sg_cel_t_type = {.k = T_TYPE};

static const struct {
	const char *name;
	const sg_cel_type *t;
} simple_types[] = {
    {"dyn", &sg_cel_t_dyn},       {"null_type", &sg_cel_t_null}, {"bool", &sg_cel_t_bool},
    {"int", &sg_cel_t_int},       {"uint", &sg_cel_t_uint},      {"double", &sg_cel_t_double},
    {"string", &sg_cel_t_string}, {"bytes", &sg_cel_t_bytes},    {"type", &sg_cel_t_type},
};

static sg_cel_type *new_type(sg_cel_arena *a, uint8_t k)
{
	sg_cel_type *t = sg_cel_alloc(a, sizeof(*t));
	if (t) {
		memset(t, 0, sizeof(*t));
		t->k = k;
	}
	return t;
}

static void skip_ws(const char *s, size_t *i)
{
	while (s[*i] == ' ')
		(*i)++;
}

const sg_cel_type *sg_cel_type_parse(sg_cel_arena *a, const sg_cel_env *env, const char *s, size_t *used)
{
	size_t i = 0;
	skip_ws(s, &i);
	size_t start = i;
	while ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
	       s[i] == '_' || s[i] == '.')
		i++;
	size_t n = i - start;
	if (n == 0)
		return NULL;
	const sg_cel_type *t = NULL;
	if (n == 1 && (s[start] == 'A' || s[start] == 'B')) {
		sg_cel_type *p = new_type(a, T_PARAM);
		if (!p)
			return NULL;
		p->name = s[start] == 'A' ? "A" : "B";
		t = p;
	} else if ((n == 4 && memcmp(s + start, "list", 4) == 0) || (n == 3 && memcmp(s + start, "map", 3) == 0) ||
	           (n == 4 && memcmp(s + start, "type", 4) == 0 && s[i] == '(')) {
		bool list = s[start] == 'l', map = s[start] == 'm';
		if (s[i] != '(')
			return NULL;
		i++;
		sg_cel_type *c = new_type(a, list ? T_LIST : map ? T_MAP : T_TYPE);
		if (!c)
			return NULL;
		size_t k;
		c->p[0] = sg_cel_type_parse(a, env, s + i, &k);
		if (!c->p[0])
			return NULL;
		i += k;
		if (map) {
			skip_ws(s, &i);
			if (s[i] != ',')
				return NULL;
			i++;
			c->p[1] = sg_cel_type_parse(a, env, s + i, &k);
			if (!c->p[1])
				return NULL;
			i += k;
		}
		skip_ws(s, &i);
		if (s[i] != ')')
			return NULL;
		i++;
		t = c;
	} else {
		for (size_t k = 0; k < sizeof(simple_types) / sizeof(simple_types[0]); k++)
			if (strlen(simple_types[k].name) == n && memcmp(simple_types[k].name, s + start, n) == 0)
				t = simple_types[k].t;
		if (!t) {
			const sg_cel_objtype *o = env ? sg_cel_env_obj(env, s + start, n) : NULL;
			sg_cel_type *ot = new_type(a, T_OBJ);
			if (!ot)
				return NULL;
			if (o) {
				ot->name = o->name;
				ot->obj = o;
			} else if (n == strlen(SG_CEL_SA_TYPE) && memcmp(s + start, SG_CEL_SA_TYPE, n) == 0) {
				ot->name = SG_CEL_SA_TYPE; /* abstract: no fields */
			} else {
				return NULL;
			}
			t = ot;
		}
	}
	skip_ws(s, &i);
	if (used)
		*used = i;
	return t;
}

char *sg_cel_type_str(const sg_cel_type *t, char *buf, size_t cap)
{
	static const char *const names[] = {
	    [T_DYN] = "dyn",   [T_NULL] = "null_type", [T_BOOL] = "bool",     [T_INT] = "int",
	    [T_UINT] = "uint", [T_DOUBLE] = "double",  [T_STRING] = "string", [T_BYTES] = "bytes"};
	char a[256], b[256];
	switch (t->k) {
	case T_LIST:
		snprintf(buf, cap, "list(%s)", sg_cel_type_str(t->p[0], a, sizeof(a)));
		break;
	case T_MAP:
		snprintf(buf, cap, "map(%s, %s)", sg_cel_type_str(t->p[0], a, sizeof(a)),
		         sg_cel_type_str(t->p[1], b, sizeof(b)));
		break;
	case T_TYPE:
		if (t->p[0])
			snprintf(buf, cap, "type(%s)", sg_cel_type_str(t->p[0], a, sizeof(a)));
		else
			snprintf(buf, cap, "type");
		break;
	case T_OBJ:
	case T_PARAM:
		snprintf(buf, cap, "%s", t->name);
		break;
	default:
		snprintf(buf, cap, "%s", names[t->k]);
	}
	return buf;
}

/* ---- unification ---- */

static bool same(const sg_cel_type *a, const sg_cel_type *b)
{
	if (a->k != b->k)
		return false;
	switch (a->k) {
	case T_LIST:
		return same(a->p[0], b->p[0]);
	case T_MAP:
		return same(a->p[0], b->p[0]) && same(a->p[1], b->p[1]);
	case T_TYPE:
		return (!a->p[0] || !b->p[0]) || same(a->p[0], b->p[0]);
	case T_OBJ:
		return strcmp(a->name, b->name) == 0;
	default:
		return true;
	}
}

/* Whether a and b can be the same type once dyn is taken for what it may be. */
static bool agree(const sg_cel_type *a, const sg_cel_type *b)
{
	if (a->k == T_DYN || b->k == T_DYN)
		return true;
	/* null is a value of every message type (cel-go: cr == null). */
	if ((a->k == T_NULL && b->k == T_OBJ) || (a->k == T_OBJ && b->k == T_NULL))
		return true;
	if (a->k != b->k)
		return false;
	switch (a->k) {
	case T_LIST:
		return agree(a->p[0], b->p[0]);
	case T_MAP:
		return agree(a->p[0], b->p[0]) && agree(a->p[1], b->p[1]);
	case T_OBJ:
		return strcmp(a->name, b->name) == 0;
	default:
		return true;
	}
}

/* The common type of two: itself when the same, else dyn. */
static const sg_cel_type *join(const sg_cel_type *a, const sg_cel_type *b)
{
	if (!a)
		return b;
	return same(a, b) ? a : &sg_cel_t_dyn;
}

typedef struct binding {
	const sg_cel_type *t[2]; /* A, B */
} binding;

static bool unify(const sg_cel_type *pat, const sg_cel_type *act, binding *bd)
{
	if (pat->k == T_PARAM) {
		int i = pat->name[0] == 'B';
		if (!bd->t[i]) {
			bd->t[i] = act;
			return true;
		}
		if (!agree(bd->t[i], act))
			return false;
		if (bd->t[i]->k == T_DYN || !same(bd->t[i], act))
			bd->t[i] = act->k == T_DYN ? bd->t[i] : join(bd->t[i], act);
		return true;
	}
	if (pat->k == T_DYN || act->k == T_DYN)
		return true;
	if (pat->k != act->k)
		return false;
	switch (pat->k) {
	case T_LIST:
		return unify(pat->p[0], act->p[0], bd);
	case T_MAP:
		return unify(pat->p[0], act->p[0], bd) && unify(pat->p[1], act->p[1], bd);
	case T_OBJ:
		return strcmp(pat->name, act->name) == 0;
	default:
		return true;
	}
}

static const sg_cel_type *subst(sg_cel_arena *a, const sg_cel_type *t, const binding *bd)
{
	if (t->k == T_PARAM) {
		const sg_cel_type *b = bd->t[t->name[0] == 'B'];
		return b ? b : &sg_cel_t_dyn;
	}
	if (t->k != T_LIST && t->k != T_MAP && !(t->k == T_TYPE && t->p[0]))
		return t;
	sg_cel_type *c = new_type(a, t->k);
	if (!c)
		return &sg_cel_t_dyn;
	c->p[0] = subst(a, t->p[0], bd);
	if (t->k == T_MAP)
		c->p[1] = subst(a, t->p[1], bd);
	return c;
}

/* ---- the walk ---- */

typedef struct checker {
	sg_cel_arena *a;
	const sg_cel_env *env;
	const char *src;
	size_t len;
	bool strict;
	const char *local_names[4 * SG_CEL_DEPTH_MAX + 8];
	const sg_cel_type *local_types[4 * SG_CEL_DEPTH_MAX + 8];
	size_t nlocals;
} checker;

static int check(checker *k, sg_cel_node *n);

static int oom(void)
{
	return sg_error_set(SG_EINTERNAL, "out of memory checking a CEL expression");
}

static const char *tstr(const sg_cel_type *t, char *buf, size_t cap)
{
	return sg_cel_type_str(t, buf, cap);
}

static const sg_cel_type *lit_type(cval v)
{
	static const sg_cel_type *const by_kind[] = {
	    [SG_CEL_NULL] = &sg_cel_t_null,   [SG_CEL_BOOL] = &sg_cel_t_bool,     [SG_CEL_INT] = &sg_cel_t_int,
	    [SG_CEL_UINT] = &sg_cel_t_uint,   [SG_CEL_DOUBLE] = &sg_cel_t_double, [SG_CEL_STRING] = &sg_cel_t_string,
	    [SG_CEL_BYTES] = &sg_cel_t_bytes,
	};
	return by_kind[v->kind];
}

static const char *const type_idents[] = {"bool",  "int",       "uint", "double", "string",
                                          "bytes", "null_type", "list", "map",    "type"};

static int check_ident(checker *k, sg_cel_node *n)
{
	const char *name = n->id.name;
	if (!n->id.rooted) {
		for (size_t i = k->nlocals; i-- > 0;) {
			if (strcmp(k->local_names[i], name) == 0) {
				n->id.idk = ID_LOCAL;
				n->id.index = (uint32_t)(k->nlocals - 1 - i);
				n->type = k->local_types[i];
				return 0;
			}
		}
	}
	int v = sg_cel_env_var(k->env, name, strlen(name));
	if (v >= 0) {
		n->id.idk = ID_GLOBAL;
		n->id.index = (uint32_t)v;
		n->type = k->env->var_types[v];
		return 0;
	}
	for (size_t i = 0; i < sizeof(type_idents) / sizeof(type_idents[0]); i++) {
		if (strcmp(type_idents[i], name) == 0) {
			sg_cel_value *t = sg_cel_new_value(k->a, SG_CEL_TYPE);
			sg_cel_type *tt = new_type(k->a, T_TYPE);
			if (!t || !tt)
				return oom();
			t->s.p = type_idents[i];
			t->s.n = strlen(type_idents[i]);
			n->id.idk = ID_TYPE;
			n->id.tval = t;
			size_t used;
			tt->p[0] = strcmp(name, "list") == 0  ? NULL
			           : strcmp(name, "map") == 0 ? NULL
			                                      : sg_cel_type_parse(k->a, k->env, name, &used);
			n->type = tt;
			return 0;
		}
	}
	if (!k->strict) { /* left to the runtime, which finds it unbound */
		n->id.idk = ID_GLOBAL;
		n->id.index = UINT32_MAX;
		n->type = &sg_cel_t_dyn;
		return 0;
	}
	return sg_cel_error_at(k->src, k->len, n->pos, "undeclared reference to '%s' (in container '')", name);
}

static int check_select(checker *k, sg_cel_node *n)
{
	SG_TRY(check(k, n->sel.operand));
	const sg_cel_type *t = n->sel.operand->type;
	const char *f = n->sel.field;
	char buf[256];
	const sg_cel_type *out = &sg_cel_t_dyn;
	if (t->k == T_MAP) {
		if (k->strict && t->p[0]->k != T_STRING && t->p[0]->k != T_DYN)
			return sg_cel_error_at(k->src, k->len, n->pos, "type '%s' does not support field selection",
			                       tstr(t, buf, sizeof(buf)));
		out = t->p[1];
	} else if (t->k == T_OBJ) {
		const sg_cel_objtype *o = t->obj;
		size_t i = 0;
		for (; o && i < o->n; i++)
			if (strcmp(o->fields[i], f) == 0)
				break;
		if (!o || i == o->n) {
			if (k->strict)
				return sg_cel_error_at(k->src, k->len, n->pos, "undefined field '%s'", f);
		} else {
			out = o->types[i];
		}
	} else if (t->k != T_DYN && k->strict) {
		return sg_cel_error_at(k->src, k->len, n->pos, "type '%s' does not support field selection",
		                       tstr(t, buf, sizeof(buf)));
	}
	n->type = n->sel.test ? &sg_cel_t_bool : out;
	return 0;
}

/* A target like `strings` in strings.quote(s): a qualified function name. */
static bool qualify(checker *k, sg_cel_node *n)
{
	sg_cel_node *t = n->call.target;
	if (!t || t->kind != N_IDENT)
		return false;
	for (size_t i = 0; i < k->nlocals; i++)
		if (strcmp(k->local_names[i], t->id.name) == 0)
			return false;
	if (sg_cel_env_var(k->env, t->id.name, strlen(t->id.name)) >= 0)
		return false;
	size_t len = strlen(t->id.name) + 1 + strlen(n->call.name);
	char *q = sg_cel_alloc(k->a, len + 1);
	if (!q)
		return false;
	snprintf(q, len + 1, "%s.%s", t->id.name, n->call.name);
	if (!sg_cel_func_find(q, false, k->env->sa_lib))
		return false;
	n->call.name = q;
	n->call.target = NULL;
	return true;
}

static int no_match(checker *k, sg_cel_node *n, const sg_cel_type **args, size_t nargs)
{
	/* cel-go's wording: '(int, string)', or 'string.(int)' for a receiver. */
	char list[400] = "", buf[200];
	size_t off = 0, first = n->call.target ? 1 : 0;
	for (size_t i = first; i < nargs && off < sizeof(list) - 8; i++) {
		int w = snprintf(list + off, sizeof(list) - off, "%s%s", i > first ? ", " : "",
		                 tstr(args[i], buf, sizeof(buf)));
		off += w > 0 ? (size_t)w : 0;
	}
	const char *name = n->call.name[0] == '@' ? "@in" : n->call.name;
	if (n->call.target)
		return sg_cel_error_at(k->src, k->len, n->pos,
		                       "found no matching overload for '%s' applied to '%s.(%s)'", name,
		                       tstr(args[0], buf, sizeof(buf)), list);
	return sg_cel_error_at(k->src, k->len, n->pos, "found no matching overload for '%s' applied to '(%s)'", name,
	                       list);
}

/* The overloads of f that the arguments' types fit: the result type (the
 * join of all that fit), or no_match. Apart from check_call so that its
 * buffers are not on the recursion's stack. */
static __attribute__((noinline)) int resolve(checker *k, sg_cel_node *n, const sg_cel_func *f)
{
	const sg_cel_type *args[16];
	size_t nargs = 0;
	if (n->call.target)
		args[nargs++] = n->call.target->type;
	for (size_t i = 0; i < n->call.nargs; i++)
		args[nargs++] = n->call.args[i]->type;
	size_t nsigs;
	const sg_cel_sig *sigs = sg_cel_func_sigs(f, &nsigs);
	if (!sigs)
		return oom();
	const sg_cel_type *result = NULL;
	for (size_t i = 0; i < nsigs; i++) {
		const sg_cel_sig *sig = &sigs[i];
		if (sig->nargs != nargs)
			continue;
		binding bd = {{NULL, NULL}};
		bool ok = true;
		for (size_t a = 0; a < nargs && ok; a++)
			ok = unify(sig->args[a], args[a], &bd);
		if (!ok)
			continue;
		const sg_cel_type *rt = subst(k->a, sig->ret, &bd);
		result = result ? join(result, rt) : rt;
	}
	if (!result) {
		if (k->strict)
			return no_match(k, n, args, nargs);
		result = &sg_cel_t_dyn;
	}
	n->type = result;
	return 0;
}

/* matches() with a constant pattern: compiled here, once, so that a bad
 * pattern is a compile error (as in cel-go, which compiles constant
 * patterns when it plans a program) and evaluations share the result. */
static __attribute__((noinline)) int precompile(checker *k, sg_cel_node *n)
{
	sg_cel_node *pat = n->call.target ? (n->call.nargs == 1 ? n->call.args[0] : NULL)
	                                  : (n->call.nargs == 2 ? n->call.args[1] : NULL);
	if (!pat || pat->kind != N_LIT || pat->lit->kind != SG_CEL_STRING)
		return 0;
	if (pat->lit->s.n > SG_CEL_RE2_PATTERN_MAX)
		return sg_cel_error_at(k->src, k->len, pat->pos, "regular expression longer than %u bytes",
		                       SG_CEL_RE2_PATTERN_MAX);
	char why[200] = "";
	n->call.re = sg_cel_re2_new(pat->lit->s.p, pat->lit->s.n, why, sizeof(why));
	if (!n->call.re)
		return sg_cel_error_at(k->src, k->len, pat->pos, "invalid regular expression: %s", why);
	return 0;
}

/* cel-go's string.format validator (ext/formatting_v2.go): a constant
 * format string applied to a list literal is checked at compile time,
 * each clause against its argument's type, and every argument must be
 * used. Type sets per clause, as bits of enum sg_cel_tkind. */
#define TB(k) (1u << (k))
static const struct {
	char verb;
	unsigned types;
	const char *what;
} format_clauses[] = {
    {'s',
     TB(T_LIST) | TB(T_MAP) | TB(T_INT) | TB(T_UINT) | TB(T_DOUBLE) | TB(T_BOOL) | TB(T_STRING) | TB(T_BYTES) |
         TB(T_TYPE) | TB(T_NULL),
     "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and "
     "timestamps"},
    {'d', TB(T_INT) | TB(T_UINT) | TB(T_DOUBLE), "decimal clause can only be used on ints, uints, and doubles"},
    {'f', TB(T_INT) | TB(T_UINT) | TB(T_DOUBLE), "fixed-point clause can only be used on ints, uints, and doubles"},
    {'e', TB(T_INT) | TB(T_UINT) | TB(T_DOUBLE), "scientific clause can only be used on ints, uints, and doubles"},
    {'b', TB(T_BOOL) | TB(T_INT) | TB(T_UINT), "only ints, uints, and bools can be formatted as binary"},
    {'x', TB(T_INT) | TB(T_UINT) | TB(T_STRING) | TB(T_BYTES),
     "only ints, uints, bytes, and strings can be formatted as hex"},
    {'X', TB(T_INT) | TB(T_UINT) | TB(T_STRING) | TB(T_BYTES),
     "only ints, uints, bytes, and strings can be formatted as hex"},
    {'o', TB(T_INT) | TB(T_UINT), "octal clause can only be used on ints and uints"},
};

/* %s of a list or map literal: its elements must be formattable too. */
static const sg_cel_node *bad_for_string(const sg_cel_node *a)
{
	if (a->type->k != T_DYN && !(format_clauses[0].types & TB(a->type->k)))
		return a;
	if (a->kind == N_LIST || a->kind == N_MAP)
		for (size_t i = 0; i < a->list.n; i++) {
			const sg_cel_node *bad = bad_for_string(a->list.items[i]);
			if (bad)
				return bad;
		}
	return NULL;
}

static __attribute__((noinline)) int check_format(checker *k, sg_cel_node *n)
{
	sg_cel_node *t = n->call.target, *l = n->call.nargs == 1 ? n->call.args[0] : NULL;
	if (!t || t->kind != N_LIT || t->lit->kind != SG_CEL_STRING || !l || l->kind != N_LIST)
		return 0;
	const char *f = t->lit->s.p;
	size_t len = t->lit->s.n, used = 0;
	char buf[200];
	for (size_t i = 0; i < len;) {
		if (f[i] != '%') {
			i++;
			continue;
		}
		if (i + 1 < len && f[i + 1] == '%') {
			i += 2;
			continue;
		}
		if (i + 1 >= len)
			return sg_cel_error_at(k->src, k->len, n->pos, "unexpected end of string");
		if (used >= l->list.n)
			return sg_cel_error_at(k->src, k->len, n->pos, "index %zu out of range", used);
		i++;
		if (f[i] == '.') {
			size_t start = ++i;
			long prec = 0;
			while (i < len && f[i] >= '0' && f[i] <= '9')
				prec = prec < 1000 ? prec * 10 + (f[i++] - '0') : (i++, prec);
			if (i >= len || i == start || prec > 100)
				return sg_cel_error_at(
				    k->src, k->len, n->pos,
				    "could not parse formatting clause: error while parsing precision");
		}
		size_t c = 0;
		while (c < sizeof(format_clauses) / sizeof(format_clauses[0]) && format_clauses[c].verb != f[i])
			c++;
		if (c == sizeof(format_clauses) / sizeof(format_clauses[0]))
			return sg_cel_error_at(
			    k->src, k->len, n->pos,
			    "could not parse formatting clause: unrecognized formatting clause \"%c\"", f[i]);
		i++;
		const sg_cel_node *arg = l->list.items[used++];
		const sg_cel_node *bad = NULL;
		if (c == 0)
			bad = bad_for_string(arg);
		else if (arg->type->k != T_DYN && !(format_clauses[c].types & TB(arg->type->k)))
			bad = arg;
		if (bad)
			return sg_cel_error_at(k->src, k->len, bad->pos, "error during formatting: %s, was given %s",
			                       format_clauses[c].what, tstr(bad->type, buf, sizeof(buf)));
	}
	if (l->list.n > used)
		return sg_cel_error_at(k->src, k->len, n->pos,
		                       "too many arguments supplied to string.format (expected %zu, got %zu)", used,
		                       l->list.n);
	return 0;
}

void sg_cel_tree_release(sg_cel_node *n)
{
	if (!n)
		return;
	switch (n->kind) {
	case N_SELECT:
		sg_cel_tree_release(n->sel.operand);
		return;
	case N_CALL:
		sg_cel_re2_free(n->call.re);
		n->call.re = NULL;
		sg_cel_tree_release(n->call.target);
		for (size_t i = 0; i < n->call.nargs; i++)
			sg_cel_tree_release(n->call.args[i]);
		return;
	case N_LIST:
	case N_MAP:
		for (size_t i = 0; i < n->list.n; i++)
			sg_cel_tree_release(n->list.items[i]);
		return;
	case N_COMP:
		sg_cel_tree_release(n->comp.range);
		sg_cel_tree_release(n->comp.pred);
		sg_cel_tree_release(n->comp.xform);
		return;
	default:
		return;
	}
}

static int check_call(checker *k, sg_cel_node *n)
{
	qualify(k, n);
	const sg_cel_func *f = sg_cel_func_find(n->call.name, n->call.target != NULL, k->env->sa_lib);
	if (!f && k->strict)
		return sg_cel_error_at(k->src, k->len, n->pos, "undeclared reference to '%s' (in container '')",
		                       n->call.name);
	n->call.fn = f;
	size_t nargs = n->call.nargs + (n->call.target ? 1 : 0);
	if (nargs > 16 && k->strict)
		return sg_cel_error_at(k->src, k->len, n->pos, "too many arguments to '%s'", n->call.name);
	if (n->call.target)
		SG_TRY(check(k, n->call.target));
	for (size_t i = 0; i < n->call.nargs; i++)
		SG_TRY(check(k, n->call.args[i]));
	if (nargs > 16 || !f) {
		n->type = &sg_cel_t_dyn;
		return 0;
	}
	SG_TRY(resolve(k, n, f));
	if (f->impl && strcmp(f->name, "matches") == 0)
		SG_TRY(precompile(k, n));
	if (f->impl && k->strict && strcmp(f->name, "format") == 0)
		SG_TRY(check_format(k, n));
	return 0;
}

static int check_list(checker *k, sg_cel_node *n)
{
	const sg_cel_type *elem = NULL;
	for (size_t i = 0; i < n->list.n; i++) {
		SG_TRY(check(k, n->list.items[i]));
		elem = join(elem, n->list.items[i]->type);
	}
	sg_cel_type *t = new_type(k->a, T_LIST);
	if (!t)
		return oom();
	t->p[0] = elem ? elem : &sg_cel_t_dyn;
	n->type = t;
	return 0;
}

static int check_map(checker *k, sg_cel_node *n)
{
	const sg_cel_type *kt = NULL, *vt = NULL;
	char buf[200];
	for (size_t i = 0; i < n->list.n; i += 2) {
		sg_cel_node *key = n->list.items[i];
		SG_TRY(check(k, key));
		SG_TRY(check(k, n->list.items[i + 1]));
		uint8_t kk = key->type->k;
		if (k->strict && kk != T_INT && kk != T_UINT && kk != T_BOOL && kk != T_STRING && kk != T_DYN)
			return sg_cel_error_at(k->src, k->len, key->pos, "unsupported map key type: %s",
			                       tstr(key->type, buf, sizeof(buf)));
		kt = join(kt, key->type);
		vt = join(vt, n->list.items[i + 1]->type);
	}
	sg_cel_type *t = new_type(k->a, T_MAP);
	if (!t)
		return oom();
	t->p[0] = kt ? kt : &sg_cel_t_dyn;
	t->p[1] = vt ? vt : &sg_cel_t_dyn;
	n->type = t;
	return 0;
}

static int need_bool(checker *k, const sg_cel_node *n)
{
	char buf[200];
	if (k->strict && n->type->k != T_BOOL && n->type->k != T_DYN)
		return sg_cel_error_at(k->src, k->len, n->pos, "expected type 'bool' but found '%s'",
		                       tstr(n->type, buf, sizeof(buf)));
	return 0;
}

static int push(checker *k, const sg_cel_node *n, const char *name, const sg_cel_type *t)
{
	if (k->nlocals >= sizeof(k->local_names) / sizeof(k->local_names[0]))
		return sg_cel_error_at(k->src, k->len, n->pos, "comprehensions nested too deeply");
	k->local_names[k->nlocals] = name;
	k->local_types[k->nlocals++] = t;
	return 0;
}

static int check_comp(checker *k, sg_cel_node *n)
{
	if (n->comp.var2 && !(k->env->ext & SG_CEL_EXT_TWO_VAR))
		return sg_cel_error_at(k->src, k->len, n->pos, "undeclared reference to '%s' (in container '')",
		                       n->comp.name);
	SG_TRY(check(k, n->comp.range));
	const sg_cel_type *r = n->comp.range->type, *var = &sg_cel_t_dyn, *var2 = &sg_cel_t_dyn;
	char buf[200];
	if (r->k == T_LIST) {
		var = n->comp.var2 ? &sg_cel_t_int : r->p[0];
		var2 = r->p[0];
	} else if (r->k == T_MAP) {
		var = r->p[0];
		var2 = r->p[1];
	} else if (r->k != T_DYN && k->strict) {
		return sg_cel_error_at(
		    k->src, k->len, n->comp.range->pos,
		    "expression of type '%s' cannot be range of a comprehension (must be list, map, or "
		    "dynamic)",
		    tstr(r, buf, sizeof(buf)));
	}
	size_t base = k->nlocals;
	SG_TRY(push(k, n, n->comp.var, var));
	if (n->comp.var2)
		SG_TRY(push(k, n, n->comp.var2, var2));
	if (n->comp.pred) {
		SG_TRY(check(k, n->comp.pred));
		SG_TRY(need_bool(k, n->comp.pred));
	}
	if (n->comp.xform)
		SG_TRY(check(k, n->comp.xform));
	k->nlocals = base;
	uint8_t m = n->comp.macro;
	if (m == M_MAP || m == M_MAP_FILTER || m == M_FILTER || m == M_TLIST) {
		sg_cel_type *t = new_type(k->a, T_LIST);
		if (!t)
			return oom();
		t->p[0] = m == M_FILTER ? var : n->comp.xform->type;
		n->type = t;
	} else if (m == M_TMAP) {
		sg_cel_type *t = new_type(k->a, T_MAP);
		if (!t)
			return oom();
		t->p[0] = var;
		t->p[1] = n->comp.xform->type;
		n->type = t;
	} else {
		n->type = &sg_cel_t_bool;
	}
	return 0;
}

static int check(checker *k, sg_cel_node *n)
{
	switch (n->kind) {
	case N_LIT:
		n->type = lit_type(n->lit);
		return 0;
	case N_IDENT:
		return check_ident(k, n);
	case N_SELECT:
		return check_select(k, n);
	case N_CALL:
		return check_call(k, n);
	case N_LIST:
		return check_list(k, n);
	case N_MAP:
		return check_map(k, n);
	case N_COMP:
		return check_comp(k, n);
	default:
		return sg_error_set(SG_EINTERNAL, "unknown CEL node");
	}
}

int sg_cel_check(sg_cel_node *root, sg_cel_arena *a, const sg_cel_env *env, const char *src, size_t len)
{
	checker *k = sg_cel_alloc(a, sizeof(*k));
	if (!k)
		return oom();
	memset(k, 0, sizeof(*k));
	k->a = a;
	k->env = env;
	k->src = src;
	k->len = len;
	k->strict = !env->unchecked;
	return check(k, root);
}
