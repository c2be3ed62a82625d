/*
 * sg_strbuf: a growing, optionally bounded, NUL-terminated byte builder:
 * response bodies (kube/), metrics text (obs/), policy messages
 * (controllers/sg_crpolicy), a hash's input (trust/).
 *
 * Failures are flags, not return paths: every add appends all of its
 * bytes or none, and a refused add sets overflow (the text would pass max)
 * or oom (memory) and returns false. The flags stay set; later adds are
 * still judged on their own, so a caller that drops what does not fit
 * keeps going, and a caller that wants all or nothing tests
 * sg_strbuf_failed once at the end.
 *
 * Set up with a designated initializer, e.g. {.max = 4096}: max 0 is no
 * bound but memory, first 0 a first allocation of 64 bytes; wipe for
 * bytes that may be secret (a response body that may hold a Secret or a
 * token): a growth then copies into a new block and clears the old one
 * instead of realloc (which frees it as it is), and sg_strbuf_free and a
 * refused take clear what they free. Text handed over by sg_strbuf_take is
 * the caller's to clear. The buffer
 * belongs to the builder until sg_strbuf_take hands it over; free it with
 * sg_strbuf_free.
 */
#ifndef SG_STRBUF_H
#define SG_STRBUF_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sg_strbuf {
	char *p;       /* len bytes and a NUL once anything was added; NULL before */
	size_t len;    /* bytes held, the NUL not counted */
	size_t cap;    /* bytes allocated */
	size_t max;    /* the most bytes it may hold; 0: no bound but memory */
	size_t first;  /* the first allocation; 0: 64 */
	bool overflow; /* an add was refused: past max */
	bool oom;      /* an add was refused: out of memory */
	bool wipe;     /* secret bytes: no block is freed uncleared */
} sg_strbuf;

/* Appends n bytes of s (s may be NULL when n is 0); even n == 0 leaves a
 * NUL-terminated buffer. False, with nothing appended, when the text would
 * pass max (overflow) or memory ran out (oom). */
SG_API bool sg_strbuf_add(sg_strbuf *b, const void *s, size_t n);
/* sg_strbuf_add of a NUL-terminated string, and of one byte. */
SG_API bool sg_strbuf_puts(sg_strbuf *b, const char *s);
SG_API bool sg_strbuf_putc(sg_strbuf *b, char c);
/* Appends printf-formatted text, all of it or none, as sg_strbuf_add. */
SG_API bool sg_strbuf_printf(sg_strbuf *b, const char *fmt, ...) SG_PRINTF(2, 3);

/* Whether any add was refused. */
SG_API bool sg_strbuf_failed(const sg_strbuf *b);

/* Hands the text over (never NULL: an empty builder gives ""): the caller
 * frees it with free(). NULL when any add was refused or memory ran out;
 * the text is freed then. Either way the builder is left empty, its max
 * and first kept. */
SG_API char *sg_strbuf_take(sg_strbuf *b);
/* Frees the text (cleared first with wipe) and empties the builder (flags
 * cleared; max, first and wipe kept, so it may be used again). */
SG_API void sg_strbuf_free(sg_strbuf *b);

#endif
