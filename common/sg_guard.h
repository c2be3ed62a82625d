/*
 * sg_guard: the small vocabulary of guard macros and scope-bound cleanup.
 *
 *   SG_TRY(expr)                propagate a negative result unchanged
 *   SG_ENSURE(cond, code, ...)  fail with code and a message unless cond
 *   SG_BAIL(code, ...)          fail with code and a message
 *
 * OpenSSL's "1 is success" variant, SG_OSSL, belongs to the OpenSSL adapter
 * and lives with it (signer/sg_ossl.h).
 *
 * The _GOTO forms set `rc` and jump to a label instead of returning, for
 * functions that must unlock or release on the way out.
 *
 * Cleanup: declare with SG_CLEANUP(fn) and the variable is released when it
 * leaves scope; hand ownership on with SG_MOVE(var), which returns the value
 * and leaves NULL behind.
 */
#ifndef SG_GUARD_H
#define SG_GUARD_H

#include "sg_error.h"

#define SG_TRY(expr)                       \
	do {                                   \
		int sg_try_rc_ = (expr);           \
		if (sg_try_rc_ < 0)                \
			return sg_try_rc_;             \
	} while (0)

#define SG_ENSURE(cond, code, ...)                 \
	do {                                           \
		if (!(cond))                               \
			return sg_error_set((code), __VA_ARGS__); \
	} while (0)

#define SG_BAIL(code, ...) return sg_error_set((code), __VA_ARGS__)

#define SG_TRY_GOTO(rc, expr, label) \
	do {                             \
		(rc) = (expr);               \
		if ((rc) < 0)                \
			goto label;              \
	} while (0)

#define SG_ENSURE_GOTO(rc, cond, label, code, ...)       \
	do {                                                 \
		if (!(cond)) {                                   \
			(rc) = sg_error_set((code), __VA_ARGS__);    \
			goto label;                                  \
		}                                                \
	} while (0)

#define SG_CLEANUP(fn) __attribute__((cleanup(fn)))

/* Takes ownership out of a cleanup-bound pointer variable. */
#define SG_MOVE(var)                         \
	__extension__({                          \
		__typeof__(var) sg_move_tmp_ = (var); \
		(var) = NULL;                        \
		sg_move_tmp_;                        \
	})

/* Cleanup helper for plain malloc'ed pointers: `char *p SG_AUTOFREE = ...`. */
void sg_freep(void *pp);
#define SG_AUTOFREE SG_CLEANUP(sg_freep)

#endif
