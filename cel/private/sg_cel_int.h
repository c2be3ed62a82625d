/*
 * sg_cel_int: what the files of sg_cel share: the arena, the value
 * representation, the syntax tree, checker types and the function table.
 *
 * Memory: everything a compile builds (tree, types, literal values) lives
 * in the program's arena, freed with the program; everything an evaluation
 * builds lives in that evaluation's arena, which is bounded (limits are
 * checked before a block is taken) and freed at once when the result has
 * been copied out into its own arena (sg_cel_value.c). Values are
 * immutable once built, so sharing sub-values between lists is free.
 *
 * Errors inside an evaluation are values (kind CEL_ERR, the message in
 * s): that is how && and || absorb an error on one side. The cost and
 * memory limits are not: they set a flag in the evaluation context that
 * every step checks, so nothing absorbs them.
 */
#ifndef SG_CEL_INT_H
#define SG_CEL_INT_H

#include "sg_cel.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena ---- */

typedef struct cel_block cel_block;
typedef struct cel_arena {
	cel_block *head;
	size_t used;  /* bytes taken from malloc */
	size_t limit; /* 0: no limit but memory */
	bool failed;  /* a request was refused (limit or memory) */
	bool over;    /* ... because of the limit */
} cel_arena;

void *cel_alloc(cel_arena *a, size_t n);
char *cel_strndup(cel_arena *a, const char *s, size_t n);
void cel_arena_free(cel_arena *a);

/* ---- values ---- */

#define CEL_ERR 100 /* an evaluation error, carried as a value */

struct sg_cel_value {
	uint8_t kind; /* sg_cel_kind or CEL_ERR */
	union {
		bool b;
		int64_t i;
		uint64_t u;
		double d;
		struct {
			const char *p; /* NUL-terminated copy */
			size_t n;
		} s; /* string, bytes, type name, error message */
		struct {
			const sg_cel_value **v;
			size_t n;
		} list;
		struct {
			const sg_cel_value **k;
			const sg_cel_value **v;
			size_t n;
			const char *type; /* objects: the type's name */
		} map;                    /* maps and objects */
	};
};

typedef const sg_cel_value *cval;

/* ---- checker types ---- */

enum cel_tkind {
	T_DYN,
	T_NULL,
	T_BOOL,
	T_INT,
	T_UINT,
	T_DOUBLE,
	T_STRING,
	T_BYTES,
	T_LIST,
	T_MAP,
	T_TYPE,
	T_OBJ,
	T_PARAM, /* a signature's type parameter (A, B) */
};

typedef struct cel_objtype cel_objtype;
typedef struct cel_type {
	uint8_t k;
	const struct cel_type *p[2]; /* list elem; map key, value; type's param */
	const char *name;            /* T_OBJ, T_PARAM */
	const cel_objtype *obj;
} cel_type;

struct cel_objtype {
	const char *name;
	const char **fields;
	const cel_type **types;
	size_t n;
};

extern const cel_type cel_t_dyn, cel_t_null, cel_t_bool, cel_t_int, cel_t_uint, cel_t_double, cel_t_string, cel_t_bytes,
    cel_t_type;

/* Parses a type in the header's notation ("list(string)", ...); NULL when
 * it is not one. Objects are looked up in env. */
const cel_type *cel_type_parse(cel_arena *a, const sg_cel_env *env, const char *s, size_t *used);
/* Writes t's name ("map(string, dyn)") to buf; returns buf. */
char *cel_type_str(const cel_type *t, char *buf, size_t cap);

/* ---- environments ---- */

#define CEL_VARS_MAX 64
#define CEL_OBJTYPES_MAX 16

struct sg_cel_env {
	cel_arena a;
	const char *var_names[CEL_VARS_MAX];
	const cel_type *var_types[CEL_VARS_MAX];
	size_t nvars;
	cel_objtype *objs[CEL_OBJTYPES_MAX];
	size_t nobjs;
	bool unchecked;
	unsigned ext;
	bool sa_lib; /* approver-policy's ServiceAccount functions */
};

int cel_env_var(const sg_cel_env *env, const char *name, size_t n);
const cel_objtype *cel_env_obj(const sg_cel_env *env, const char *name, size_t n);

#define CEL_SA_TYPE "cm.io.policy.pkg.internal.approver.validation.ServiceAccount"
#define CEL_CR_TYPE "cm.io.policy.pkg.internal.approver.validation.CertificateRequest"

/* ---- syntax tree ---- */

enum cel_nkind {
	N_LIT,
	N_IDENT,
	N_SELECT,
	N_CALL,
	N_LIST,
	N_MAP,
	N_COMP,
};

enum cel_idkind { ID_GLOBAL, ID_LOCAL, ID_TYPE };

enum cel_macro { M_ALL, M_EXISTS, M_EXISTS_ONE, M_MAP, M_MAP_FILTER, M_FILTER, M_TLIST, M_TMAP };

typedef struct cel_func cel_func;
typedef struct cel_node cel_node;
struct cel_node {
	uint8_t kind;
	uint32_t pos; /* byte offset in the source */
	const cel_type *type;
	union {
		cval lit;
		struct {
			const char *name;
			uint8_t idk;
			bool rooted;    /* .name: the root scope only */
			uint32_t index; /* ID_GLOBAL: variable; ID_LOCAL: depth from the top */
			cval tval;      /* ID_TYPE */
		} id;
		struct {
			cel_node *operand;
			const char *field;
			bool test; /* has() */
		} sel;
		struct {
			const char *name;
			cel_node *target; /* receiver, NULL for a global call */
			cel_node **args;
			size_t nargs;
			const cel_func *fn;
			struct sg_cel_re2 *re; /* matches() with a constant pattern: compiled once */
		} call;
		struct {
			cel_node **items;
			size_t n;
		} list; /* lists, and maps as key, value, key, value ... */
		struct {
			uint8_t macro;
			const char *var;
			const char *var2; /* two-variable forms: index or key, then value */
			const char *name; /* the macro's name, for messages */
			cel_node *range;
			cel_node *pred;
			cel_node *xform;
		} comp;
	};
};

/* Frees what a tree holds outside its arena (compiled patterns). */
void cel_tree_release(cel_node *n);
/* Parses src into a tree in a; SG_EINVAL with a positioned message. */
int cel_parse(cel_node **out, cel_arena *a, const char *src, size_t len);
/* Resolves names and checks types; SG_EINVAL with a positioned message. */
int cel_check(cel_node *root, cel_arena *a, const sg_cel_env *env, const char *src, size_t len);
/* The "ERROR: <input>:L:C: msg" text with the source line and a caret. */
int cel_error_at(const char *src, size_t len, uint32_t pos, const char *fmt, ...) SG_PRINTF(4, 5);

/* ---- evaluation ---- */

typedef struct cel_ctx {
	cel_arena *a;
	uint64_t cost, cost_max;
	bool stop; /* the cost or memory limit: ends the evaluation */
	const char *stop_msg;
	const sg_cel_activation *act;
	cval *locals;
	size_t nlocals, locals_cap;
	const sg_cel_env *env;
} cel_ctx;

struct sg_cel_activation {
	const sg_cel_env *env;
	cel_arena a;
	cval vals[CEL_VARS_MAX];
};

/* Charges cost units; false (and stop set) once past the limit. */
bool cel_charge(cel_ctx *c, uint64_t units);

cval cel_err(cel_ctx *c, const char *fmt, ...) SG_PRINTF(2, 3);
cval cel_no_overload(cel_ctx *c, const char *fn, cval *args, size_t n);
cval cel_mk_bool(cel_ctx *c, bool b);
cval cel_mk_int(cel_ctx *c, int64_t i);
cval cel_mk_uint(cel_ctx *c, uint64_t u);
cval cel_mk_double(cel_ctx *c, double d);
cval cel_mk_str(cel_ctx *c, uint8_t kind, const char *p, size_t n); /* copies */
cval cel_mk_str_owned(cel_ctx *c, uint8_t kind, char *p, size_t n); /* p in the arena, NUL at p[n] */
cval cel_mk_type(cel_ctx *c, const char *name);
cval cel_mk_list(cel_ctx *c, const sg_cel_value **v, size_t n); /* v in the arena */
/* Values allocated straight from an arena (compile time, activations). */
sg_cel_value *cel_new_value(cel_arena *a, uint8_t kind);

const char *cel_kind_name(const sg_cel_value *v); /* the CEL type name: "int", "list", ... */
bool cel_is_num(cval v);
/* CEL equality: true, false, or -1 (no overload: never at runtime now). */
bool cel_equal(cval a, cval b); /* for scalars (map keys); gives up after 10^6 nodes */
/* Equality within a budget of nodes visited: 1, 0, or -1 when it ran out. */
int cel_equal_within(cval a, cval b, uint64_t *budget);
/* Equality charged to the evaluation's cost (a unit per 10 nodes); false
 * with c->stop set past the limit. */
bool cel_eq(cel_ctx *c, cval a, cval b);
/* Ordering: -1, 0, 1, or 2 when unordered (NaN) or not comparable (-2). */
int cel_compare(cval a, cval b);
/* A map or object lookup; NULL when absent. */
cval cel_map_find(cval m, cval key);
cval cel_map_find_str(cval m, const char *k, size_t n);
/* Code points in a UTF-8 string (valid by construction). */
size_t cel_utf8_count(const char *p, size_t n);
bool cel_utf8_valid(const char *p, size_t n);
/* Copies v into a new arena owned by the value (sg_cel_value_free). */
int cel_copy_out(sg_cel_value **out, cval v, size_t limit);

/* ---- functions ---- */

typedef cval (*cel_impl)(cel_ctx *c, cval *args, size_t n, const cel_node *call);

struct cel_func {
	const char *name;
	bool member;      /* receiver style: target.name(args) */
	const char *sigs; /* ';'-separated overloads, receiver first: "string,string->bool" */
	cel_impl impl;
	uint8_t flags;
};
#define CEL_F_SA 1 /* only with the ServiceAccount library */

const cel_func *cel_func_find(const char *name, bool member, bool sa_lib);

/* One overload of a function, its types parsed from the signature text. */
#define CEL_SIG_ARGS_MAX 8
typedef struct cel_sig {
	const cel_type *args[CEL_SIG_ARGS_MAX];
	size_t nargs;
	const cel_type *ret;
} cel_sig;
/* f's overloads, parsed once for the process (thread-safe); NULL when
 * memory ran out. Borrowed for the process's life. */
const cel_sig *cel_func_sigs(const cel_func *f, size_t *n);

/* The RE2 adapter (sg_cel_re2.cc). */
#include "sg_cel_re2.h"

#endif
