/*
 * sg_cel_re2: the C face of the RE2 adapter (sg_cel_re2.cc), the one place
 * sg_cel touches C++. CEL's matches() is RE2 syntax with substring
 * semantics (spec: "Regular Expressions"); RE2 runs in time linear in the
 * text and never backtracks. Patterns and texts are UTF-8.
 */
#ifndef SG_CEL_RE2_H
#define SG_CEL_RE2_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pattern size bound: RE2's compiled program is bounded by max_mem too. */
#define SG_CEL_RE2_PATTERN_MAX 4096

/* 1 when text matches pattern somewhere, 0 when not, -1 when the pattern
 * does not compile (err, err_cap bytes, gets RE2's reason). */
int sg_cel_re2_search(const char *pattern, size_t plen, const char *text, size_t tlen, char *err, size_t err_cap);

/* A compiled pattern, for a program's constant patterns: compiled once,
 * then matched from any number of threads at once (RE2 objects are
 * thread-safe for matching). NULL when the pattern does not compile (err
 * gets the reason) or memory ran out. Freed with sg_cel_re2_free. */
typedef struct sg_cel_re2 sg_cel_re2;
sg_cel_re2 *sg_cel_re2_new(const char *pattern, size_t plen, char *err, size_t err_cap);
/* 1 when text matches somewhere, 0 when not. */
int sg_cel_re2_match(const sg_cel_re2 *re, const char *text, size_t tlen);
void sg_cel_re2_free(sg_cel_re2 *re);

#ifdef __cplusplus
}
#endif

#endif
