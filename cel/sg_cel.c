/*
 * sg_cel: environments, programs, activations and the evaluator (cel-spec
 * doc/langdef.md, "Evaluation").
 *
 * The evaluator walks the checked tree recursively (its depth is bounded
 * by the parser) with one context per evaluation: the evaluation's arena,
 * the cost so far, and a stack of comprehension variables. Programs are
 * never written to after sg_cel_compile, so any number of threads may
 * evaluate one at once; everything an evaluation makes is in its context.
 *
 * Errors are values (sg_cel_int.h). Function arguments are evaluated
 * first and the first error among them is the call's result, except for
 * && and ||, where a deciding operand on either side absorbs an error on
 * the other (spec: "Logical Operators"), ?: which evaluates one branch,
 * and the macros, whose all/exists absorb like && and ||.
 *
 * Cost, after cel-go's runtime cost model (interpreter/runtimecost.go):
 * 1 per identifier, selection, call (plus what a function charges for
 * its input's size, sg_cel_lib.c), 10 per list literal and 30 per map
 * literal, 0 for a literal; comprehensions pay for every step of their
 * bodies. It approximates cel-go's units: the limit bounds work, it does
 * not reproduce cel-go's count to the unit.
 */
#include "sg_cel_int.h"
#include "sg_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- environments ---- */

int sg_cel_env_var(const sg_cel_env *env, const char *name, size_t n)
{
	for (size_t i = 0; i < env->nvars; i++)
		if (strlen(env->var_names[i]) == n && memcmp(env->var_names[i], name, n) == 0)
			return (int)i;
	return -1;
}

const sg_cel_objtype *sg_cel_env_obj(const sg_cel_env *env, const char *name, size_t n)
{
	for (size_t i = 0; i < env->nobjs; i++)
		if (strlen(env->objs[i]->name) == n && memcmp(env->objs[i]->name, name, n) == 0)
			return env->objs[i];
	return NULL;
}

int sg_cel_env_new(sg_cel_env **out)
{
	*out = calloc(1, sizeof(**out));
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory for a CEL environment");
	return 0;
}

void sg_cel_env_free(sg_cel_env *env)
{
	if (!env)
		return;
	sg_cel_arena_free(&env->a);
	free(env);
}

void sg_cel_env_set_extensions(sg_cel_env *env, unsigned ext)
{
	env->ext = ext;
}

void sg_cel_env_set_unchecked(sg_cel_env *env, bool unchecked)
{
	env->unchecked = unchecked;
}

static bool valid_name(const char *s)
{
	if (!s || !*s || strlen(s) > 200)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == '.' ||
		      (p != s && *p >= '0' && *p <= '9')))
			return false;
	return true;
}

static const sg_cel_type *parse_decl_type(sg_cel_env *env, const char *type)
{
	size_t used = 0;
	const sg_cel_type *t = type ? sg_cel_type_parse(&env->a, env, type, &used) : NULL;
	return t && type[used] == 0 ? t : NULL;
}

int sg_cel_env_add_object(sg_cel_env *env, const char *name, const char *const *field_names,
                          const char *const *field_types, size_t nfields)
{
	SG_ENSURE(valid_name(name), SG_EINVAL, "CEL object type name '%s' is not a name", name ? name : "");
	SG_ENSURE(!sg_cel_env_obj(env, name, strlen(name)), SG_EINVAL, "CEL object type '%s' declared twice", name);
	SG_ENSURE(env->nobjs < SG_CEL_OBJTYPES_MAX && nfields <= 64, SG_EINVAL, "too many CEL object types or fields");
	sg_cel_objtype *o = sg_cel_alloc(&env->a, sizeof(*o));
	const char **names = sg_cel_alloc(&env->a, (nfields + 1) * sizeof(*names));
	const sg_cel_type **types = sg_cel_alloc(&env->a, (nfields + 1) * sizeof(*types));
	const char *oname = sg_cel_strndup(&env->a, name, strlen(name));
	SG_ENSURE(o && names && types && oname, SG_EINTERNAL, "out of memory for a CEL object type");
	for (size_t i = 0; i < nfields; i++) {
		SG_ENSURE(valid_name(field_names[i]) && !strchr(field_names[i], '.'), SG_EINVAL,
		          "CEL field name '%s' is not a name", field_names[i] ? field_names[i] : "");
		types[i] = parse_decl_type(env, field_types[i]);
		SG_ENSURE(types[i], SG_EINVAL, "CEL field %s: '%s' is not a type", field_names[i],
		          field_types[i] ? field_types[i] : "");
		names[i] = sg_cel_strndup(&env->a, field_names[i], strlen(field_names[i]));
		SG_ENSURE(names[i], SG_EINTERNAL, "out of memory for a CEL object type");
	}
	*o = (sg_cel_objtype){.name = oname, .fields = names, .types = types, .n = nfields};
	env->objs[env->nobjs++] = o;
	return 0;
}

int sg_cel_env_add_var(sg_cel_env *env, const char *name, const char *type)
{
	SG_ENSURE(valid_name(name), SG_EINVAL, "CEL variable name '%s' is not a name", name ? name : "");
	SG_ENSURE(sg_cel_env_var(env, name, strlen(name)) < 0, SG_EINVAL, "CEL variable '%s' declared twice", name);
	SG_ENSURE(env->nvars < SG_CEL_VARS_MAX, SG_EINVAL, "too many CEL variables");
	const sg_cel_type *t = parse_decl_type(env, type);
	SG_ENSURE(t, SG_EINVAL, "CEL variable %s: '%s' is not a type", name, type ? type : "");
	const char *n = sg_cel_strndup(&env->a, name, strlen(name));
	SG_ENSURE(n, SG_EINTERNAL, "out of memory for a CEL variable");
	env->var_names[env->nvars] = n;
	env->var_types[env->nvars++] = t;
	return 0;
}

int sg_cel_env_new_approver(sg_cel_env **out)
{
	static const char *const fields[] = {"name", "namespace", "username", "groups"};
	static const char *const types[] = {"string", "string", "string", "list(string)"};
	sg_cel_env *env;
	SG_TRY(sg_cel_env_new(&env));
	env->sa_lib = true;
	int rc = sg_cel_env_add_object(env, SG_CEL_CR_TYPE, fields, types, 4);
	if (rc == 0)
		rc = sg_cel_env_add_var(env, "self", "string");
	if (rc == 0)
		rc = sg_cel_env_add_var(env, "cr", SG_CEL_CR_TYPE);
	if (rc < 0) {
		sg_cel_env_free(env);
		*out = NULL;
		return rc;
	}
	*out = env;
	return 0;
}

/* ---- programs ---- */

struct sg_cel_program {
	sg_cel_arena a;
	const sg_cel_env *env;
	sg_cel_node *root;
	char type[256];
};

int sg_cel_compile(sg_cel_program **out, const sg_cel_env *env, const char *expr, size_t len)
{
	*out = NULL;
	/* The byte bound first, so that counting is bounded too. */
	size_t points = len <= SG_CEL_SOURCE_BYTES_MAX ? sg_cel_utf8_count(expr, len) : len;
	SG_ENSURE(points <= SG_CEL_SOURCE_MAX, SG_EINVAL,
	          "ERROR: <input>: expression code point size exceeds limit: size: %zu, limit %u", points,
	          SG_CEL_SOURCE_MAX);
	sg_cel_program *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "out of memory compiling a CEL expression");
	p->env = env;
	/* The program's memory is bounded by the source's size. */
	p->a.limit = 64 * (size_t)SG_CEL_SOURCE_BYTES_MAX + (8u << 20);
	int rc = sg_cel_parse(&p->root, &p->a, expr, len);
	if (rc < 0)
		p->root = NULL; /* a partial tree: nothing in it to release */
	else
		rc = sg_cel_check(p->root, &p->a, env, expr, len);
	if (rc < 0) {
		sg_cel_program_free(p);
		return rc;
	}
	sg_cel_type_str(p->root->type, p->type, sizeof(p->type));
	*out = p;
	return 0;
}

int sg_cel_compile_bool(sg_cel_program **out, const sg_cel_env *env, const char *expr, size_t len)
{
	SG_TRY(sg_cel_compile(out, env, expr, len));
	if (strcmp((*out)->type, "bool") == 0)
		return 0;
	int rc = sg_error_set(SG_EINVAL, "got %s, wanted bool result type", (*out)->type);
	sg_cel_program_free(*out);
	*out = NULL;
	return rc;
}

void sg_cel_program_free(sg_cel_program *p)
{
	if (!p)
		return;
	sg_cel_tree_release(p->root);
	sg_cel_arena_free(&p->a);
	free(p);
}

const char *sg_cel_program_type(const sg_cel_program *p)
{
	return p->type;
}

/* ---- activations ---- */

int sg_cel_activation_new(sg_cel_activation **out, const sg_cel_env *env)
{
	*out = calloc(1, sizeof(**out));
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory for a CEL activation");
	(*out)->env = env;
	(*out)->a.limit = SG_CEL_MEMORY_MAX;
	/* Object variables start as objects with every field unset. */
	for (size_t i = 0; i < env->nvars; i++) {
		const sg_cel_type *t = env->var_types[i];
		if (t->k != T_OBJ || !t->obj)
			continue;
		sg_cel_value *o = sg_cel_new_value(&(*out)->a, SG_CEL_OBJECT);
		if (!o) {
			sg_cel_activation_free(*out);
			*out = NULL;
			return sg_error_set(SG_EINTERNAL, "out of memory for a CEL activation");
		}
		o->map.type = t->obj->name;
		(*out)->vals[i] = o;
	}
	return 0;
}

void sg_cel_activation_free(sg_cel_activation *a)
{
	if (!a)
		return;
	sg_cel_arena_free(&a->a);
	free(a);
}

static int var_of(const sg_cel_activation *a, const char *name, uint8_t want)
{
	int i = sg_cel_env_var(a->env, name, strlen(name));
	SG_ENSURE(i >= 0, SG_EINVAL, "CEL variable '%s' is not declared", name);
	uint8_t k = a->env->var_types[i]->k;
	SG_ENSURE(k == want || k == T_DYN, SG_EINVAL, "CEL variable '%s' has another type", name);
	return i;
}

static int new_text(sg_cel_activation *a, const char *s, size_t n, cval *out)
{
	SG_ENSURE(n <= SG_CEL_STRING_MAX, SG_EINVAL, "CEL string value longer than %u bytes", SG_CEL_STRING_MAX);
	SG_ENSURE(sg_cel_utf8_valid(s, n), SG_EINVAL, "CEL string value is not valid UTF-8");
	sg_cel_value *v = sg_cel_new_value(&a->a, SG_CEL_STRING);
	char *p = sg_cel_strndup(&a->a, s, n);
	SG_ENSURE(v && p, SG_EINTERNAL, "out of memory for a CEL value");
	v->s.p = p;
	v->s.n = n;
	*out = v;
	return 0;
}

int sg_cel_bind_string(sg_cel_activation *a, const char *name, const char *s, size_t n)
{
	int i;
	SG_TRY(i = var_of(a, name, T_STRING));
	return new_text(a, s, n, &a->vals[i]);
}

int sg_cel_bind_int(sg_cel_activation *a, const char *name, int64_t v)
{
	int i;
	SG_TRY(i = var_of(a, name, T_INT));
	sg_cel_value *x = sg_cel_new_value(&a->a, SG_CEL_INT);
	SG_ENSURE(x, SG_EINTERNAL, "out of memory for a CEL value");
	x->i = v;
	a->vals[i] = x;
	return 0;
}

int sg_cel_bind_bool(sg_cel_activation *a, const char *name, bool v)
{
	int i;
	SG_TRY(i = var_of(a, name, T_BOOL));
	sg_cel_value *x = sg_cel_new_value(&a->a, SG_CEL_BOOL);
	SG_ENSURE(x, SG_EINTERNAL, "out of memory for a CEL value");
	x->b = v;
	a->vals[i] = x;
	return 0;
}

/* The object bound to name, made (empty) on first use; copy-on-write:
 * each field set makes a new entry array, which keeps the code short and
 * is cheap for a handful of fields. */
static int object_field(sg_cel_activation *a, const char *name, const char *field, uint8_t want, cval value)
{
	int i;
	SG_TRY(i = var_of(a, name, T_OBJ));
	const sg_cel_type *t = a->env->var_types[i];
	SG_ENSURE(t->obj, SG_EINVAL, "CEL variable '%s' is not an object with fields", name);
	size_t f = 0;
	for (; f < t->obj->n; f++)
		if (strcmp(t->obj->fields[f], field) == 0)
			break;
	SG_ENSURE(f < t->obj->n, SG_EINVAL, "CEL type %s has no field '%s'", t->obj->name, field);
	SG_ENSURE(t->obj->types[f]->k == want, SG_EINVAL, "CEL field %s.%s has another type", name, field);
	cval old = a->vals[i];
	size_t n = old ? old->map.n : 0;
	sg_cel_value *o = sg_cel_new_value(&a->a, SG_CEL_OBJECT);
	const sg_cel_value **k = sg_cel_alloc(&a->a, (n + 1) * sizeof(*k));
	const sg_cel_value **v = sg_cel_alloc(&a->a, (n + 1) * sizeof(*v));
	sg_cel_value *key = sg_cel_new_value(&a->a, SG_CEL_STRING);
	SG_ENSURE(o && k && v && key, SG_EINTERNAL, "out of memory for a CEL value");
	key->s.p = t->obj->fields[f];
	key->s.n = strlen(key->s.p);
	size_t m = 0;
	for (size_t j = 0; j < n; j++)
		if (strcmp(old->map.k[j]->s.p, field) != 0) {
			k[m] = old->map.k[j];
			v[m++] = old->map.v[j];
		}
	k[m] = key;
	v[m++] = value;
	o->map.k = k;
	o->map.v = v;
	o->map.n = m;
	o->map.type = t->obj->name;
	a->vals[i] = o;
	return 0;
}

int sg_cel_bind_object_string(sg_cel_activation *a, const char *name, const char *field, const char *s, size_t n)
{
	cval v = NULL;
	SG_TRY(new_text(a, s, n, &v));
	return object_field(a, name, field, T_STRING, v);
}

int sg_cel_bind_object_strings(sg_cel_activation *a, const char *name, const char *field, const char *const *items,
                               const size_t *lens, size_t n)
{
	SG_ENSURE(n <= SG_CEL_LIST_MAX, SG_EINVAL, "CEL list value longer than %u items", SG_CEL_LIST_MAX);
	const sg_cel_value **v = sg_cel_alloc(&a->a, (n ? n : 1) * sizeof(*v));
	sg_cel_value *l = sg_cel_new_value(&a->a, SG_CEL_LIST);
	SG_ENSURE(v && l, SG_EINTERNAL, "out of memory for a CEL value");
	for (size_t i = 0; i < n; i++)
		SG_TRY(new_text(a, items[i], lens[i], &v[i]));
	l->list.v = v;
	l->list.n = n;
	return object_field(a, name, field, T_LIST, l);
}

/* ---- evaluation ---- */

bool sg_cel_charge(sg_cel_ctx *c, uint64_t units)
{
	c->cost += units;
	if (c->cost > c->cost_max) {
		c->stop = true;
		if (!c->stop_msg)
			c->stop_msg = "operation cancelled: actual cost limit exceeded";
		return false;
	}
	return true;
}

static cval eval(sg_cel_ctx *c, const sg_cel_node *n);

bool sg_cel_eq(sg_cel_ctx *c, cval a, cval b)
{
	uint64_t left = c->cost < c->cost_max ? c->cost_max - c->cost : 0;
	uint64_t budget = left > UINT64_MAX / 16 ? UINT64_MAX : left * 10 + 10, start = budget;
	int r = sg_cel_equal_within(a, b, &budget);
	if (!sg_cel_charge(c, (start - budget) / 10) || r < 0) {
		sg_cel_charge(c, c->cost_max + 1);
		return false;
	}
	return r == 1;
}

#define STOP(c) ((c)->stop)

/* A field's default: what an unset field of an object reads as. */
static cval field_default(sg_cel_ctx *c, const sg_cel_type *t)
{
	static const sg_cel_value empty_string = {.kind = SG_CEL_STRING, .s = {"", 0}};
	static const sg_cel_value empty_bytes = {.kind = SG_CEL_BYTES, .s = {"", 0}};
	static const sg_cel_value zero = {.kind = SG_CEL_INT};
	static const sg_cel_value uzero = {.kind = SG_CEL_UINT};
	static const sg_cel_value dzero = {.kind = SG_CEL_DOUBLE};
	static const sg_cel_value null = {.kind = SG_CEL_NULL};
	static const sg_cel_value empty_list = {.kind = SG_CEL_LIST};
	static const sg_cel_value empty_map = {.kind = SG_CEL_MAP};
	switch (t->k) {
	case T_STRING:
		return &empty_string;
	case T_BYTES:
		return &empty_bytes;
	case T_INT:
		return &zero;
	case T_UINT:
		return &uzero;
	case T_DOUBLE:
		return &dzero;
	case T_BOOL:
		return sg_cel_mk_bool(c, false);
	case T_LIST:
		return &empty_list;
	case T_MAP:
		return &empty_map;
	default:
		return &null;
	}
}

static bool is_default(cval v)
{
	switch (v->kind) {
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
		return v->s.n == 0;
	case SG_CEL_LIST:
		return v->list.n == 0;
	case SG_CEL_MAP:
		return v->map.n == 0;
	case SG_CEL_INT:
		return v->i == 0;
	case SG_CEL_UINT:
		return v->u == 0;
	case SG_CEL_DOUBLE:
		return v->d == 0;
	case SG_CEL_BOOL:
		return !v->b;
	case SG_CEL_NULL:
		return true;
	default:
		return false;
	}
}

static cval eval_select(sg_cel_ctx *c, const sg_cel_node *n)
{
	cval o = eval(c, n->sel.operand);
	if (STOP(c) || o->kind == SG_CEL_ERR)
		return o;
	const char *f = n->sel.field;
	size_t fl = strlen(f);
	if (o->kind == SG_CEL_MAP) {
		cval v = sg_cel_map_find_str(o, f, fl);
		if (n->sel.test)
			return sg_cel_mk_bool(c, v != NULL);
		return v ? v : sg_cel_err(c, "no such key: %s", f);
	}
	if (o->kind == SG_CEL_OBJECT) {
		const sg_cel_objtype *t = sg_cel_env_obj(c->env, o->map.type, strlen(o->map.type));
		size_t i = 0;
		for (; t && i < t->n; i++)
			if (strcmp(t->fields[i], f) == 0)
				break;
		if (!t || i == t->n)
			return sg_cel_err(c, "no such field: %s", f);
		cval v = sg_cel_map_find_str(o, f, fl);
		if (n->sel.test)
			return sg_cel_mk_bool(c, v && !is_default(v));
		return v ? v : field_default(c, t->types[i]);
	}
	return sg_cel_err(c, "type '%s' does not support field selection", sg_cel_kind_name(o));
}

/* && and ||: the deciding value on either side wins over an error. */
static cval eval_logic(sg_cel_ctx *c, const sg_cel_node *n, bool is_and)
{
	cval l = eval(c, n->call.args[0]);
	if (STOP(c))
		return l;
	if (l->kind == SG_CEL_BOOL && l->b != is_and)
		return l;
	cval r = eval(c, n->call.args[1]);
	if (STOP(c))
		return r;
	if (r->kind == SG_CEL_BOOL && r->b != is_and)
		return r;
	if (l->kind == SG_CEL_ERR)
		return l;
	if (r->kind == SG_CEL_ERR)
		return r;
	if (l->kind == SG_CEL_BOOL && r->kind == SG_CEL_BOOL)
		return r;
	cval args[2] = {l, r};
	return sg_cel_no_overload(c, is_and ? "_&&_" : "_||_", args, 2);
}

static cval eval_cond(sg_cel_ctx *c, const sg_cel_node *n)
{
	cval t = eval(c, n->call.args[0]);
	if (STOP(c) || t->kind == SG_CEL_ERR)
		return t;
	if (t->kind != SG_CEL_BOOL)
		return sg_cel_no_overload(c, "_?_:_", &t, 1);
	return eval(c, n->call.args[t->b ? 1 : 2]);
}

static cval eval_call(sg_cel_ctx *c, const sg_cel_node *n)
{
	const sg_cel_func *f = n->call.fn;
	if (!sg_cel_charge(c, 1))
		return NULL;
	if (!f) /* unchecked: a function no library declares */
		return sg_cel_err(c, "no matching overload for '%s'", n->call.name);
	if (!f->impl) {
		if (n->call.nargs == 3)
			return eval_cond(c, n);
		return eval_logic(c, n, n->call.name[1] == '&');
	}
	cval args[17];
	size_t nargs = 0;
	if (n->call.nargs + (n->call.target != NULL) > 16)
		return sg_cel_err(c, "too many arguments to '%s'", n->call.name);
	if (n->call.target)
		args[nargs++] = eval(c, n->call.target);
	for (size_t i = 0; i < n->call.nargs; i++) {
		if (STOP(c))
			return NULL;
		args[nargs++] = eval(c, n->call.args[i]);
	}
	if (STOP(c))
		return NULL;
	for (size_t i = 0; i < nargs; i++)
		if (args[i]->kind == SG_CEL_ERR)
			return args[i];
	return f->impl(c, args, nargs, n);
}

static cval eval_list(sg_cel_ctx *c, const sg_cel_node *n)
{
	if (!sg_cel_charge(c, 10))
		return NULL;
	const sg_cel_value **items = sg_cel_alloc(c->a, (n->list.n ? n->list.n : 1) * sizeof(*items));
	if (!items) {
		c->stop = true;
		return NULL;
	}
	for (size_t i = 0; i < n->list.n; i++) {
		items[i] = eval(c, n->list.items[i]);
		if (STOP(c) || items[i]->kind == SG_CEL_ERR)
			return items[i];
	}
	return sg_cel_mk_list(c, items, n->list.n);
}

static bool key_kind(cval k)
{
	return k->kind == SG_CEL_INT || k->kind == SG_CEL_UINT || k->kind == SG_CEL_BOOL || k->kind == SG_CEL_STRING;
}

/* Keys in one order: bools, then numbers (int and uint by value, so 1 and
 * 1u are the same key), then strings. */
static int key_order(const void *x, const void *y)
{
	cval a = *(cval const *)x, b = *(cval const *)y;
	int ca = a->kind == SG_CEL_BOOL ? 0 : a->kind == SG_CEL_STRING ? 2 : 1;
	int cb = b->kind == SG_CEL_BOOL ? 0 : b->kind == SG_CEL_STRING ? 2 : 1;
	if (ca != cb)
		return ca - cb;
	return sg_cel_compare(a, b);
}

/* Whether two of the m keys are equal: sorted, in O(m log m), since a map
 * literal of a long rule may have thousands of entries and is built at
 * every evaluation (cel-go hashes). */
static bool has_duplicate(sg_cel_ctx *c, const sg_cel_value **k, size_t m)
{
	if (m < 2)
		return false;
	const sg_cel_value **sorted = sg_cel_alloc(c->a, m * sizeof(*sorted));
	if (!sorted) {
		c->stop = true;
		return true;
	}
	memcpy(sorted, k, m * sizeof(*sorted));
	qsort(sorted, m, sizeof(*sorted), key_order);
	for (size_t i = 1; i < m; i++)
		if (key_order(&sorted[i - 1], &sorted[i]) == 0)
			return true;
	return false;
}

static cval eval_map(sg_cel_ctx *c, const sg_cel_node *n)
{
	size_t m = n->list.n / 2;
	if (!sg_cel_charge(c, 30))
		return NULL;
	const sg_cel_value **k = sg_cel_alloc(c->a, (m ? m : 1) * sizeof(*k));
	const sg_cel_value **v = sg_cel_alloc(c->a, (m ? m : 1) * sizeof(*v));
	sg_cel_value *out = sg_cel_new_value(c->a, SG_CEL_MAP);
	if (!k || !v || !out) {
		c->stop = true;
		return NULL;
	}
	for (size_t i = 0; i < m; i++) {
		k[i] = eval(c, n->list.items[2 * i]);
		if (STOP(c) || k[i]->kind == SG_CEL_ERR)
			return k[i];
		v[i] = eval(c, n->list.items[2 * i + 1]);
		if (STOP(c) || v[i]->kind == SG_CEL_ERR)
			return v[i];
		if (!key_kind(k[i]))
			return sg_cel_err(c, "unsupported key type: %s", sg_cel_kind_name(k[i]));
	}
	/* Sorting compares string keys: charged by their bytes. */
	uint64_t key_bytes = 0;
	for (size_t i = 0; i < m; i++)
		key_bytes += k[i]->kind == SG_CEL_STRING ? k[i]->s.n : 0;
	if (m > 1 && !sg_cel_charge(c, sg_cel_tenth(key_bytes)))
		return NULL;
	if (has_duplicate(c, k, m))
		return STOP(c) ? NULL : sg_cel_err(c, "Failed with repeated key");
	out->map.k = k;
	out->map.v = v;
	out->map.n = m;
	return out;
}

static bool push_local(sg_cel_ctx *c, cval v)
{
	if (c->nlocals == c->locals_cap) {
		size_t cap = c->locals_cap ? 2 * c->locals_cap : 16;
		cval *bigger = sg_cel_alloc(c->a, cap * sizeof(*bigger));
		if (!bigger) {
			c->stop = true;
			return false;
		}
		if (c->nlocals)
			memcpy(bigger, c->locals, c->nlocals * sizeof(*bigger));
		c->locals = bigger;
		c->locals_cap = cap;
	}
	c->locals[c->nlocals++] = v;
	return true;
}

/* One step's outcome for the macro, given the predicate's value p (NULL
 * when the macro has none): sets *result to end the loop early. */
static void comp_step(sg_cel_ctx *c, const sg_cel_node *n, cval p, cval key, cval elem, cval *result, cval *err,
                      size_t *ntrue, const sg_cel_value **out, const sg_cel_value **out_keys, size_t *nout)
{
	uint8_t m = n->comp.macro;
	switch (m) {
	case M_ALL:
	case M_EXISTS:
		if (p->kind == SG_CEL_ERR) {
			if (!*err)
				*err = p;
		} else if (p->b == (m == M_EXISTS)) {
			*result = p;
		}
		return;
	case M_EXISTS_ONE:
		if (p->kind == SG_CEL_ERR)
			*result = p;
		else
			*ntrue += p->b;
		return;
	case M_FILTER:
		if (p->kind == SG_CEL_ERR)
			*result = p;
		else if (p->b)
			out[(*nout)++] = elem;
		return;
	default: /* M_MAP, M_MAP_FILTER, M_TLIST, M_TMAP */
		if (p && p->kind == SG_CEL_ERR) {
			*result = p;
			return;
		}
		if (!p || p->b) {
			cval x = eval(c, n->comp.xform);
			if (STOP(c))
				return;
			if (x->kind == SG_CEL_ERR) {
				*result = x;
				return;
			}
			out_keys[*nout] = key;
			out[(*nout)++] = x;
		}
	}
}

/* The comprehension macros over a list's elements (and indexes) or a
 * map's keys (and values). */
static cval eval_comp(sg_cel_ctx *c, const sg_cel_node *n)
{
	cval r = eval(c, n->comp.range);
	if (STOP(c) || r->kind == SG_CEL_ERR)
		return r;
	bool list = r->kind == SG_CEL_LIST;
	if (!list && r->kind != SG_CEL_MAP)
		return sg_cel_err(c, "expression of type '%s' cannot be range of a comprehension", sg_cel_kind_name(r));
	const sg_cel_value *const *elems = list ? r->list.v : r->map.k;
	size_t count = list ? r->list.n : r->map.n;
	bool two = n->comp.var2 != NULL;
	uint8_t m = n->comp.macro;
	const sg_cel_value **out = NULL, **out_keys = NULL;
	size_t nout = 0, ntrue = 0;
	cval err = NULL, result = NULL;
	if (m >= M_MAP) {
		out = sg_cel_alloc(c->a, (count ? count : 1) * sizeof(*out));
		out_keys = sg_cel_alloc(c->a, (count ? count : 1) * sizeof(*out_keys));
		if (!out || !out_keys) {
			c->stop = true;
			return NULL;
		}
	}
	if (!push_local(c, NULL) || (two && !push_local(c, NULL)))
		return NULL;
	size_t top = c->nlocals;
	for (size_t i = 0; i < count && !result; i++) {
		if (!sg_cel_charge(c, 1))
			break;
		cval key = elems[i], elem = elems[i];
		if (two) {
			key = list ? sg_cel_mk_int(c, (int64_t)i) : r->map.k[i];
			elem = list ? r->list.v[i] : r->map.v[i];
			c->locals[top - 2] = key;
			c->locals[top - 1] = elem;
		} else {
			c->locals[top - 1] = elem;
		}
		cval p = NULL;
		if (n->comp.pred) {
			p = eval(c, n->comp.pred);
			if (STOP(c))
				break;
			if (p->kind != SG_CEL_BOOL && p->kind != SG_CEL_ERR)
				p = sg_cel_no_overload(c, m == M_ALL ? "_&&_" : "_||_", &p, 1);
		}
		comp_step(c, n, p, key, elem, &result, &err, &ntrue, out, out_keys, &nout);
		if (STOP(c))
			break;
	}
	c->nlocals = top - (two ? 2 : 1);
	if (STOP(c))
		return NULL;
	if (result)
		return result;
	switch (m) {
	case M_ALL:
	case M_EXISTS:
		return err ? err : sg_cel_mk_bool(c, m == M_ALL);
	case M_EXISTS_ONE:
		return sg_cel_mk_bool(c, ntrue == 1);
	case M_TMAP: {
		sg_cel_value *map = sg_cel_new_value(c->a, SG_CEL_MAP);
		if (!map) {
			c->stop = true;
			return NULL;
		}
		map->map.k = out_keys;
		map->map.v = out;
		map->map.n = nout;
		return map;
	}
	default:
		return sg_cel_mk_list(c, out, nout);
	}
}

static cval eval(sg_cel_ctx *c, const sg_cel_node *n)
{
	static const sg_cel_value stopped = {.kind = SG_CEL_ERR, .s = {"stopped", 7}};
	cval v;
	if (STOP(c))
		return &stopped;
	switch (n->kind) {
	case N_LIT:
		return n->lit;
	case N_IDENT:
		if (!sg_cel_charge(c, 1))
			return &stopped;
		if (n->id.idk == ID_LOCAL)
			return c->locals[c->nlocals - 1 - n->id.index];
		if (n->id.idk == ID_TYPE)
			return n->id.tval;
		v = c->act && n->id.index < SG_CEL_VARS_MAX ? c->act->vals[n->id.index] : NULL;
		return v ? v : sg_cel_err(c, "no such attribute: %s", n->id.name);
	case N_SELECT:
		if (!sg_cel_charge(c, 1))
			return &stopped;
		v = eval_select(c, n);
		break;
	case N_CALL:
		v = eval_call(c, n);
		break;
	case N_LIST:
		v = eval_list(c, n);
		break;
	case N_MAP:
		v = eval_map(c, n);
		break;
	case N_COMP:
		v = eval_comp(c, n);
		break;
	default:
		v = NULL;
	}
	if (!v || STOP(c)) {
		c->stop = true;
		return &stopped;
	}
	return v;
}

/* Evaluates into *v, a value in arena (the caller frees it); the error
 * already recorded when it fails. */
static int run(sg_cel_value const **v, sg_cel_arena *arena, const sg_cel_program *p, const sg_cel_activation *a,
               const sg_cel_limits *limits)
{
	SG_ENSURE(!a || a->env == p->env, SG_EINVAL, "CEL activation is for another environment");
	sg_cel_ctx c = {
	    .a = arena,
	    .cost_max = limits && limits->cost ? limits->cost : SG_CEL_COST_MAX,
	    .act = a,
	    .env = p->env,
	};
	cval r = eval(&c, p->root);
	if (c.stop) {
		if (!c.stop_msg && arena->failed)
			c.stop_msg = arena->over ? "evaluation memory limit exceeded" : "out of memory";
		bool mem = c.stop_msg && strcmp(c.stop_msg, "out of memory") == 0;
		return sg_error_set(mem ? SG_EINTERNAL : SG_EINVAL, "evaluation error: %s",
		                    c.stop_msg ? c.stop_msg : "stopped");
	}
	if (r->kind == SG_CEL_ERR)
		return sg_error_set(SG_EINVAL, "evaluation error: %s", r->s.p);
	*v = r;
	return 0;
}

/* The first 4 KiB an evaluation takes are on the stack. */
#define EVAL_STACK_BYTES 4096

int sg_cel_eval(sg_cel_value **out, const sg_cel_program *p, const sg_cel_activation *a, const sg_cel_limits *limits)
{
	_Alignas(16) unsigned char first[EVAL_STACK_BYTES];
	sg_cel_arena arena = {.limit = limits && limits->memory ? limits->memory : SG_CEL_MEMORY_MAX,
	                      .inl = first,
	                      .inl_cap = sizeof(first)};
	const sg_cel_value *v = NULL;
	*out = NULL;
	int rc = run(&v, &arena, p, a, limits);
	if (rc == 0)
		rc = sg_cel_copy_out(out, v, arena.limit);
	sg_cel_arena_free(&arena);
	return rc;
}

int sg_cel_eval_bool(bool *out, const sg_cel_program *p, const sg_cel_activation *a, const sg_cel_limits *limits)
{
	_Alignas(16) unsigned char first[EVAL_STACK_BYTES];
	sg_cel_arena arena = {.limit = limits && limits->memory ? limits->memory : SG_CEL_MEMORY_MAX,
	                      .inl = first,
	                      .inl_cap = sizeof(first)};
	const sg_cel_value *v = NULL;
	*out = false;
	int rc = run(&v, &arena, p, a, limits);
	if (rc == 0 && v->kind != SG_CEL_BOOL)
		rc = sg_error_set(SG_EINVAL, "evaluation error: the expression gave a %s, not a bool",
		                  sg_cel_kind_name(v));
	if (rc == 0)
		*out = v->b;
	sg_cel_arena_free(&arena);
	return rc;
}
