/*
 * sg_secret: a buffer for PINs and tokens. Its bytes are locked out of core
 * dumps where possible, wiped on free, compared in constant time, and never
 * formatted into a log line (there is no accessor that returns a C string
 * meant for printing; sg_secret_cstr exists only to hand the value to an API
 * that needs it).
 */
#ifndef SG_SECRET_H
#define SG_SECRET_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_SECRET_MAX 4096

typedef struct sg_secret sg_secret;

/* Copies n bytes; caller frees with sg_secret_free. */
SG_API int sg_secret_new(sg_secret **out, const void *p, size_t n) SG_MUST_CHECK;
/* Reads a whole file (at most SG_SECRET_MAX bytes); one trailing newline is
 * dropped. Refuses files readable by group or others. */
SG_API int sg_secret_from_file(sg_secret **out, const char *path) SG_MUST_CHECK;
/* Copies the value of environment variable `name` (not the name itself). */
SG_API int sg_secret_from_env(sg_secret **out, const char *name) SG_MUST_CHECK;
/* Fills n random bytes, hex-encoded (2n characters), from the CSPRNG. */
SG_API int sg_secret_random_hex(sg_secret **out, size_t n) SG_MUST_CHECK;

/* Borrowed views, valid until sg_secret_free. The data is NUL-terminated. */
SG_API const uint8_t *sg_secret_data(const sg_secret *s);
SG_API const char *sg_secret_cstr(const sg_secret *s);
SG_API size_t sg_secret_len(const sg_secret *s);
SG_API bool sg_secret_equal(const sg_secret *a, const void *p, size_t n);

/* Wipes and frees; accepts NULL. */
SG_API void sg_secret_free(sg_secret *s);
static inline void sg_secret_freep(sg_secret **s)
{
	sg_secret_free(*s);
}

/* Wipes memory in a way the compiler cannot elide. */
SG_API void sg_wipe(void *p, size_t n);

#endif
