/*
 * sg_cel: the Common Expression Language (github.com/google/cel-spec,
 * doc/langdef.md), for policies whose rules are CEL text from Kubernetes
 * objects (cert-manager approver-policy's `validations`).
 *
 * What it covers: the literals and types int, uint, double, string (UTF-8,
 * code-point semantics), bytes, bool, null, list, map and type; dyn;
 * arithmetic with overflow, division/modulus by zero and range errors;
 * heterogeneous equality and cross-type numeric ordering; `in`, size, the
 * conversions int() uint() double() string() bytes() bool() type() dyn();
 * && || ! ?: with the spec's commutative error absorption; field selection,
 * has(), indexing; the macros all, exists, exists_one, map (2 and 3
 * arguments), filter; contains, startsWith, endsWith, matches (RE2, through
 * libre2: linear time, never backtracking; a constant pattern is compiled,
 * and checked, with the program); cel-go's ext.Strings() (charAt,
 * indexOf, lastIndexOf, join, lowerAscii, upperAscii, replace, split,
 * substring, trim, strings.quote, format, reverse; a constant format
 * applied to a list literal is checked at compile time, as cel-go's
 * validator does); approver-policy's
 * ServiceAccount library (serviceAccount(), getName(), getNamespace(),
 * isServiceAccount()).
 *
 * Out of scope: timestamps, durations, protobuf messages and message
 * literals (M{...}), containers, optional values, the other extensions
 * (but cel-go's two-variable comprehensions, SG_CEL_EXT_TWO_VAR). An
 * expression using them fails to compile (an undeclared reference; a
 * message literal is a syntax error).
 *
 * Flow: an environment declares variables (and the object types they
 * have); sg_cel_compile parses and type-checks an expression into an
 * immutable program whose result type can be asked for; sg_cel_eval runs it
 * against an activation (the variables' values) into an owned value, or
 * fails with an evaluation error.
 *
 * Errors follow sg_error.h: SG_EINVAL for an expression that does not
 * compile (the detail is "ERROR: <input>:LINE:COL: message" and the
 * offending line with a caret under the column, as cel-go prints it), and
 * for an evaluation error ("evaluation error: ..."; the cost limit is
 * "evaluation error: operation cancelled: actual cost limit exceeded");
 * SG_EINTERNAL for memory. Limits (sg_cel_limits) are checked before
 * anything is allocated for them.
 *
 * Thread safety: an environment is immutable once built (build it, then
 * share it); a program is immutable and may be evaluated by any number of
 * threads at once; an activation is only read by evaluations, so once
 * bound it may serve several at once; a value belongs to one thread at a
 * time. Compiling and evaluating recurse on the syntax tree, whose depth
 * is bounded (SG_CEL_DEPTH_MAX): a thread with 1 MiB of stack is enough
 * (tests/cel checks it under ASan).
 *
 * Values handed out: sg_cel_eval's value is the caller's (it owns the
 * memory of everything inside it; sg_cel_value_free frees it all); the
 * nodes reached through the accessors are borrowed from it.
 */
#ifndef SG_CEL_H
#define SG_CEL_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_cel_env sg_cel_env;
typedef struct sg_cel_program sg_cel_program;
typedef struct sg_cel_activation sg_cel_activation;
typedef struct sg_cel_value sg_cel_value;

/* ---- limits ---- */

#define SG_CEL_SOURCE_MAX 100000u                        /* expression text, code points (cel-go's limit) ... */
#define SG_CEL_SOURCE_BYTES_MAX (4u * SG_CEL_SOURCE_MAX) /* ... and so at most this many bytes */
#define SG_CEL_DEPTH_MAX 250          /* parser recursion and tree depth (cel-go's max recursion depth) */
#define SG_CEL_COST_MAX 1000000u      /* runtime cost units (approver-policy's celCostLimit) */
#define SG_CEL_MEMORY_MAX (64u << 20) /* bytes allocated by one evaluation */
#define SG_CEL_STRING_MAX (4u << 20)  /* one string or bytes value, bytes */
#define SG_CEL_LIST_MAX (1u << 20)    /* elements of one list or entries of one map */

typedef struct sg_cel_limits {
	uint64_t cost; /* 0: SG_CEL_COST_MAX */
	size_t memory; /* 0: SG_CEL_MEMORY_MAX */
} sg_cel_limits;

/* ---- environments ---- */

/* An environment with the standard library, the strings extension and no
 * variables. Caller frees with sg_cel_env_free. */
SG_API int sg_cel_env_new(sg_cel_env **out) SG_MUST_CHECK;
/* approver-policy's environment: `self` a string, `cr` a
 * cm.io.policy.pkg.internal.approver.validation.CertificateRequest with
 * string fields name, namespace, username and list(string) groups; the
 * strings extension and the ServiceAccount library. */
SG_API int sg_cel_env_new_approver(sg_cel_env **out) SG_MUST_CHECK;
SG_API void sg_cel_env_free(sg_cel_env *env);

/* Declares an object type: a name and its fields, each with a type in the
 * notation of sg_cel_env_add_var ("string", "list(string)", ...). Fields
 * missing from a value read as their type's default ("" , 0, [], {} ...).
 * SG_EINVAL for a bad type or a duplicate name. */
SG_API int sg_cel_env_add_object(sg_cel_env *env, const char *name, const char *const *field_names,
                                 const char *const *field_types, size_t nfields) SG_MUST_CHECK;
/* Declares a variable: type is "int", "uint", "double", "bool", "string",
 * "bytes", "null_type", "dyn", "type", "list(T)", "map(K, V)" or a
 * declared object type's name. SG_EINVAL for a bad type or a duplicate. */
SG_API int sg_cel_env_add_var(sg_cel_env *env, const char *name, const char *type) SG_MUST_CHECK;
/* Optional extensions, off in both environments above. */
#define SG_CEL_EXT_TWO_VAR                                                                                             \
	1u /* cel-go's ext.TwoVarComprehensions: all, exists, existsOne with (i, v, p),                                \
	    * transformList(i, v, [p,] t), transformMap(k, v, [p,] t) */
SG_API void sg_cel_env_set_extensions(sg_cel_env *env, unsigned ext);
/* Compiles without the type checker's overload and field checks (names
 * are still resolved): for running expressions the checker would refuse,
 * as cel-spec's conformance tests with disable_check do. */
SG_API void sg_cel_env_set_unchecked(sg_cel_env *env, bool unchecked);

/* ---- programs ---- */

/* Parses and checks len bytes of expr (no NUL needed; at most
 * SG_CEL_SOURCE_MAX code points). The program borrows env, which must outlive it.
 * SG_EINVAL with a positioned message for a syntax or type error. Caller
 * frees with sg_cel_program_free. */
SG_API int sg_cel_compile(sg_cel_program **out, const sg_cel_env *env, const char *expr, size_t len) SG_MUST_CHECK;
/* sg_cel_compile, then requires the checked result type to be exactly
 * bool, as approver-policy compiles a validation (dyn is refused too):
 * SG_EINVAL "got int, wanted bool result type" otherwise. */
SG_API int sg_cel_compile_bool(sg_cel_program **out, const sg_cel_env *env, const char *expr, size_t len) SG_MUST_CHECK;
SG_API void sg_cel_program_free(sg_cel_program *p);
/* The checked result type, in the notation of sg_cel_env_add_var ("bool",
 * "list(int)", "dyn", ...); borrowed from the program. */
SG_API const char *sg_cel_program_type(const sg_cel_program *p);

/* ---- activations: the variables' values ---- */

/* An activation for programs of env (borrowed). Values bound with the
 * functions below are copied into it. Caller frees with
 * sg_cel_activation_free. */
SG_API int sg_cel_activation_new(sg_cel_activation **out, const sg_cel_env *env) SG_MUST_CHECK;
SG_API void sg_cel_activation_free(sg_cel_activation *a);
/* Binds a declared variable. SG_EINVAL for an undeclared name or a value
 * of another type than declared (strings must be UTF-8). Only these kinds
 * can be bound for now (what approver-policy passes); a variable left
 * unbound is an evaluation error where it is read. */
SG_API int sg_cel_bind_string(sg_cel_activation *a, const char *name, const char *s, size_t n) SG_MUST_CHECK;
SG_API int sg_cel_bind_int(sg_cel_activation *a, const char *name, int64_t v) SG_MUST_CHECK;
SG_API int sg_cel_bind_bool(sg_cel_activation *a, const char *name, bool v) SG_MUST_CHECK;
/* Binds an object variable field by field: strings, and lists of strings
 * (n items of items[i] with lens[i] bytes). Fields not set read as their
 * default. */
SG_API int sg_cel_bind_object_string(sg_cel_activation *a, const char *name, const char *field, const char *s,
                                     size_t n) SG_MUST_CHECK;
SG_API int sg_cel_bind_object_strings(sg_cel_activation *a, const char *name, const char *field,
                                      const char *const *items, const size_t *lens, size_t n) SG_MUST_CHECK;

/* ---- evaluation ---- */

/* Evaluates p against a (NULL: no variables bound; an unbound variable is
 * an evaluation error) within limits (NULL: the defaults). The result is
 * the caller's (sg_cel_value_free). SG_EINVAL with "evaluation error: ..."
 * when the expression evaluates to an error; SG_EINTERNAL for memory. */
SG_API int sg_cel_eval(sg_cel_value **out, const sg_cel_program *p, const sg_cel_activation *a,
                       const sg_cel_limits *limits) SG_MUST_CHECK;
/* Evaluates and requires a bool (what a policy rule is). */
SG_API int sg_cel_eval_bool(bool *out, const sg_cel_program *p, const sg_cel_activation *a,
                            const sg_cel_limits *limits) SG_MUST_CHECK;

/* ---- values ---- */

typedef enum sg_cel_kind {
	SG_CEL_NULL,
	SG_CEL_BOOL,
	SG_CEL_INT,
	SG_CEL_UINT,
	SG_CEL_DOUBLE,
	SG_CEL_STRING,
	SG_CEL_BYTES,
	SG_CEL_LIST,
	SG_CEL_MAP,
	SG_CEL_TYPE,
	SG_CEL_OBJECT, /* a declared object type or an abstract one (ServiceAccount) */
} sg_cel_kind;

/* Frees a value sg_cel_eval handed out (NULL is fine); never a node
 * reached through the accessors. */
SG_API void sg_cel_value_free(sg_cel_value *v);

SG_API sg_cel_kind sg_cel_value_kind(const sg_cel_value *v);
SG_API bool sg_cel_value_bool(const sg_cel_value *v);
SG_API int64_t sg_cel_value_int(const sg_cel_value *v);
SG_API uint64_t sg_cel_value_uint(const sg_cel_value *v);
SG_API double sg_cel_value_double(const sg_cel_value *v);
/* Strings (UTF-8) and bytes: a pointer to len bytes, NUL-terminated for
 * convenience (bytes may hold NULs too). */
SG_API const char *sg_cel_value_string(const sg_cel_value *v, size_t *len);
/* A type value's name ("int", "list", ...) and an object's type name. */
SG_API const char *sg_cel_value_type_name(const sg_cel_value *v);
/* Lists: elements; maps: entries in insertion order; objects: set fields
 * (keys are strings). */
SG_API size_t sg_cel_value_size(const sg_cel_value *v);
SG_API const sg_cel_value *sg_cel_value_item(const sg_cel_value *v, size_t i);
SG_API const sg_cel_value *sg_cel_value_key(const sg_cel_value *v, size_t i);

/* Renders v as one JSON object {"type": T, "value": V}, T one of bool,
 * int, uint, double, string, bytes, null, list, map, type, object:
 *   bool    true|false             int, uint  a JSON number (exact digits)
 *   double  a number, or "NaN", "Infinity", "-Infinity"
 *   string  a JSON string          bytes      a string: standard base64
 *   null    null                   type       the type's name as a string
 *   list    an array of rendered elements (each {"type":..,"value":..})
 *   map     an array of {"key": rendered, "value": rendered} in insertion
 *           order (keys may be int, uint, bool or string)
 *   object  {"name": type name, "fields": as map}
 * The text (NUL-terminated) is the caller's: free(). */
SG_API int sg_cel_value_json(char **out, const sg_cel_value *v) SG_MUST_CHECK;

/* Strict, type-exact deep equality, for tests: kinds must match (1 and 1u
 * differ), doubles compare bit-for-bit on sign and value with every NaN
 * equal to every NaN, maps compare as sets of entries. */
SG_API bool sg_cel_value_identical(const sg_cel_value *a, const sg_cel_value *b);

#endif
