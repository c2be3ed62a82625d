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
 * Errors inside an evaluation are values (kind SG_CEL_ERR, the message in
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
#include <string.h>

/* ---- arena ---- */

typedef struct sg_cel_block sg_cel_block;
typedef struct sg_cel_arena {
	sg_cel_block *head;
	size_t used;  /* bytes taken (from malloc and the first buffer) */
	size_t limit; /* 0: no limit but memory */
	bool failed;  /* a request was refused (limit or memory) */
	bool over;    /* ... because of the limit */
	/* An optional first buffer that is not the arena's (an evaluation's
	 * stack buffer): small evaluations then call malloc not at all. */
	unsigned char *inl;
	size_t inl_cap, inl_off;
} sg_cel_arena;

void *sg_cel_alloc(sg_cel_arena *a, size_t n);
char *sg_cel_strndup(sg_cel_arena *a, const char *s, size_t n);
void sg_cel_arena_free(sg_cel_arena *a);

/* ---- values ---- */

#define SG_CEL_ERR 100 /* an evaluation error, carried as a value */

struct sg_cel_value {
	uint8_t kind; /* sg_cel_kind or SG_CEL_ERR */
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

enum sg_cel_tkind {
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

typedef struct sg_cel_objtype sg_cel_objtype;
typedef struct sg_cel_type {
	uint8_t k;
	const struct sg_cel_type *p[2]; /* list elem; map key, value; type's param */
	const char *name;               /* T_OBJ, T_PARAM */
	const sg_cel_objtype *obj;
} sg_cel_type;

struct sg_cel_objtype {
	const char *name;
	const char **fields;
	const sg_cel_type **types;
	size_t n;
};

extern const sg_cel_type sg_cel_t_dyn, sg_cel_t_null, sg_cel_t_bool, sg_cel_t_int, sg_cel_t_uint, sg_cel_t_double,
    sg_cel_t_string, sg_cel_t_bytes, sg_cel_t_type;

/* Parses a type in the header's notation ("list(string)", ...); NULL when
 * it is not one. Objects are looked up in env. */
const sg_cel_type *sg_cel_type_parse(sg_cel_arena *a, const sg_cel_env *env, const char *s, size_t *used);
/* Writes t's name ("map(string, dyn)") to buf; returns buf. */
char *sg_cel_type_str(const sg_cel_type *t, char *buf, size_t cap);

/* ---- environments ---- */

#define SG_CEL_VARS_MAX 64
#define SG_CEL_OBJTYPES_MAX 16

struct sg_cel_env {
	sg_cel_arena a;
	const char *var_names[SG_CEL_VARS_MAX];
	const sg_cel_type *var_types[SG_CEL_VARS_MAX];
	size_t nvars;
	sg_cel_objtype *objs[SG_CEL_OBJTYPES_MAX];
	size_t nobjs;
	bool unchecked;
	unsigned ext;
	bool sa_lib; /* approver-policy's ServiceAccount functions */
};

int sg_cel_env_var(const sg_cel_env *env, const char *name, size_t n);
const sg_cel_objtype *sg_cel_env_obj(const sg_cel_env *env, const char *name, size_t n);

#define SG_CEL_SA_TYPE "cm.io.policy.pkg.internal.approver.validation.ServiceAccount"
#define SG_CEL_CR_TYPE "cm.io.policy.pkg.internal.approver.validation.CertificateRequest"

/* ---- syntax tree ---- */

enum sg_cel_nkind {
	N_LIT,
	N_IDENT,
	N_SELECT,
	N_CALL,
	N_LIST,
	N_MAP,
	N_COMP,
};

enum sg_cel_idkind { ID_GLOBAL, ID_LOCAL, ID_TYPE };

enum sg_cel_macro { M_ALL, M_EXISTS, M_EXISTS_ONE, M_MAP, M_MAP_FILTER, M_FILTER, M_TLIST, M_TMAP };

typedef struct sg_cel_func sg_cel_func;
typedef struct sg_cel_node sg_cel_node;
struct sg_cel_node {
	uint8_t kind;
	uint32_t pos; /* byte offset in the source */
	const sg_cel_type *type;
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
			sg_cel_node *operand;
			const char *field;
			bool test; /* has() */
		} sel;
		struct {
			const char *name;
			sg_cel_node *target; /* receiver, NULL for a global call */
			sg_cel_node **args;
			size_t nargs;
			const sg_cel_func *fn;
			struct sg_cel_re2 *re; /* matches() with a constant pattern: compiled once */
		} call;
		struct {
			sg_cel_node **items;
			size_t n;
		} list; /* lists, and maps as key, value, key, value ... */
		struct {
			uint8_t macro;
			const char *var;
			const char *var2; /* two-variable forms: index or key, then value */
			const char *name; /* the macro's name, for messages */
			sg_cel_node *range;
			sg_cel_node *pred;
			sg_cel_node *xform;
		} comp;
	};
};

/* Frees what a tree holds outside its arena (compiled patterns). */
void sg_cel_tree_release(sg_cel_node *n);
/* Parses src into a tree in a; SG_EINVAL with a positioned message. */
int sg_cel_parse(sg_cel_node **out, sg_cel_arena *a, const char *src, size_t len) SG_MUST_CHECK;
/* Resolves names and checks types; SG_EINVAL with a positioned message. */
int sg_cel_check(sg_cel_node *root, sg_cel_arena *a, const sg_cel_env *env, const char *src, size_t len) SG_MUST_CHECK;
/* The "ERROR: <input>:L:C: msg" text with the source line and a caret. */
int sg_cel_error_at(const char *src, size_t len, uint32_t pos, const char *fmt, ...) SG_PRINTF(4, 5) SG_MUST_CHECK;

/* ---- evaluation ---- */

typedef struct sg_cel_ctx {
	sg_cel_arena *a;
	uint64_t cost, cost_max;
	bool stop; /* the cost or memory limit: ends the evaluation */
	const char *stop_msg;
	const sg_cel_activation *act;
	cval *locals;
	size_t nlocals, locals_cap;
	const sg_cel_env *env;
} sg_cel_ctx;

struct sg_cel_activation {
	const sg_cel_env *env;
	sg_cel_arena a;
	cval vals[SG_CEL_VARS_MAX];
};

/* Charges cost units; false (and stop set) once past the limit. */
bool sg_cel_charge(sg_cel_ctx *c, uint64_t units);

cval sg_cel_err(sg_cel_ctx *c, const char *fmt, ...) SG_PRINTF(2, 3);
cval sg_cel_no_overload(sg_cel_ctx *c, const char *fn, cval *args, size_t n);
cval sg_cel_mk_bool(sg_cel_ctx *c, bool b);
cval sg_cel_mk_int(sg_cel_ctx *c, int64_t i);
cval sg_cel_mk_uint(sg_cel_ctx *c, uint64_t u);
cval sg_cel_mk_double(sg_cel_ctx *c, double d);
cval sg_cel_mk_str(sg_cel_ctx *c, uint8_t kind, const char *p, size_t n); /* copies */
cval sg_cel_mk_str_owned(sg_cel_ctx *c, uint8_t kind, char *p, size_t n); /* p in the arena, NUL at p[n] */
cval sg_cel_mk_type(sg_cel_ctx *c, const char *name);
cval sg_cel_mk_list(sg_cel_ctx *c, const sg_cel_value **v, size_t n); /* v in the arena */
/* Values allocated straight from an arena (compile time, activations). */
sg_cel_value *sg_cel_new_value(sg_cel_arena *a, uint8_t kind);

const char *sg_cel_kind_name(const sg_cel_value *v); /* the CEL type name: "int", "list", ... */
bool sg_cel_is_num(cval v);
/* CEL equality: true, false, or -1 (no overload: never at runtime now). */
bool sg_cel_equal(cval a, cval b); /* for scalars (map keys); gives up after 10^6 nodes */
/* Equality within a budget of nodes visited: 1, 0, or -1 when it ran out. */
int sg_cel_equal_within(cval a, cval b, uint64_t *budget);
/* Equality charged to the evaluation's cost (a unit per 10 nodes); false
 * with c->stop set past the limit. */
bool sg_cel_eq(sg_cel_ctx *c, cval a, cval b);
/* Ordering: -1, 0, 1, or 2 when unordered (NaN) or not comparable (-2). */
int sg_cel_compare(cval a, cval b);
/* A map or object lookup; NULL when absent. */
cval sg_cel_map_find(cval m, cval key);
/* The same, with *work set to what it cost (entries looked at plus bytes
 * compared), for the caller to charge. */
cval sg_cel_map_find_w(cval m, cval key, uint64_t *work);
cval sg_cel_map_find_str(cval m, const char *k, size_t n);
/* Code points in a UTF-8 string (valid by construction). */
size_t sg_cel_utf8_count(const char *p, size_t n);
bool sg_cel_utf8_valid(const char *p, size_t n);
/* Copies v into a new arena owned by the value (sg_cel_value_free). */
int sg_cel_copy_out(sg_cel_value **out, cval v, size_t limit) SG_MUST_CHECK;

/* ---- functions ---- */

typedef cval (*sg_cel_impl)(sg_cel_ctx *c, cval *args, size_t n, const sg_cel_node *call);

struct sg_cel_func {
	const char *name;
	bool member;      /* receiver style: target.name(args) */
	const char *sigs; /* ';'-separated overloads, receiver first: "string,string->bool" */
	sg_cel_impl impl;
	uint8_t flags;
};
#define SG_CEL_F_SA 1 /* only with the ServiceAccount library */

const sg_cel_func *sg_cel_func_find(const char *name, bool member, bool sa_lib);

/* ---- what the function files share (sg_cel_lib.c, sg_cel_strings.c,
 * sg_cel_sa.c) ---- */

#define SG_CEL_ARGS sg_cel_ctx *c, cval *a, size_t n, const sg_cel_node *call

/* Cost units for x bytes at cel-go's factor of 0.1, rounded up. */
static inline uint64_t sg_cel_tenth(uint64_t x)
{
	return (x + 9) / 10;
}

static inline cval sg_cel_fn_no_overload(sg_cel_ctx *c, const sg_cel_node *call, cval *a, size_t n)
{
	return sg_cel_no_overload(c, call->call.name, a, n);
}

/* Whether the n arguments have exactly the kinds k[0..nk). */
static inline bool sg_cel_kinds(cval *a, size_t n, const uint8_t *k, size_t nk)
{
	if (n != nk)
		return false;
	for (size_t i = 0; i < n; i++)
		if (a[i]->kind != k[i])
			return false;
	return true;
}
/* In an implementation: SG_CEL_IS(SG_CEL_STRING, SG_CEL_INT) */
#define SG_CEL_IS(...) sg_cel_kinds(a, n, (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}))

/* Whether string s holds sub at byte offset at. */
static inline bool sg_cel_has_at(cval s, size_t at, cval sub)
{
	return at + sub->s.n <= s->s.n && memcmp(s->s.p + at, sub->s.p, sub->s.n) == 0;
}

/* A new string of n bytes to fill in (p[n] is NUL), and a new item array:
 * NULL, with the evaluation stopped, past the limits or out of memory. */
char *sg_cel_new_text(sg_cel_ctx *c, size_t n);
const sg_cel_value **sg_cel_new_items(sg_cel_ctx *c, size_t n);
/* Go's strconv.FormatFloat(d, mode, -1, 64), mode 'g' or 'f'. */
void sg_cel_fmt_double(char *out, size_t cap, double d, char mode);

/* sg_cel_strings.c */
cval sg_cel_fn_char_at(SG_CEL_ARGS);
cval sg_cel_fn_index_of(SG_CEL_ARGS);
cval sg_cel_fn_last_index_of(SG_CEL_ARGS);
cval sg_cel_fn_lower(SG_CEL_ARGS);
cval sg_cel_fn_upper(SG_CEL_ARGS);
cval sg_cel_fn_replace(SG_CEL_ARGS);
cval sg_cel_fn_split(SG_CEL_ARGS);
cval sg_cel_fn_substring(SG_CEL_ARGS);
cval sg_cel_fn_trim(SG_CEL_ARGS);
cval sg_cel_fn_reverse(SG_CEL_ARGS);
cval sg_cel_fn_join(SG_CEL_ARGS);
cval sg_cel_fn_quote(SG_CEL_ARGS);
cval sg_cel_fn_format(SG_CEL_ARGS);
/* sg_cel_sa.c */
cval sg_cel_fn_service_account(SG_CEL_ARGS);
cval sg_cel_fn_is_service_account(SG_CEL_ARGS);
cval sg_cel_fn_sa_name(SG_CEL_ARGS);
cval sg_cel_fn_sa_namespace(SG_CEL_ARGS);

/* One overload of a function, its types parsed from the signature text. */
#define SG_CEL_SIG_ARGS_MAX 8
typedef struct sg_cel_sig {
	const sg_cel_type *args[SG_CEL_SIG_ARGS_MAX];
	size_t nargs;
	const sg_cel_type *ret;
} sg_cel_sig;
/* f's overloads, parsed once for the process (thread-safe); NULL when
 * memory ran out. Borrowed for the process's life. */
const sg_cel_sig *sg_cel_func_sigs(const sg_cel_func *f, size_t *n);

/* The RE2 adapter (sg_cel_re2.cc). */
#include "sg_cel_re2.h"

#endif
