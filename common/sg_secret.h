/*
 * sg_secret: a buffer for PINs and tokens, and the process hardening that
 * goes with holding them.
 *
 * Every secret lives in its own anonymous mapping of whole pages that the
 * kernel leaves out of core dumps (MADV_DONTDUMP, the "dd" flag in
 * /proc/PID/smaps) and, where RLIMIT_MEMLOCK allows, locks in memory so it
 * is never written to swap. Its bytes are wiped on free, compared in
 * constant time, and never formatted into a log line (there is no accessor
 * that returns a C string meant for printing; sg_secret_cstr exists only to
 * hand the value to an API that needs it).
 *
 * What this does not cover: copies that other code makes (a PKCS#11 module
 * keeps the PIN it was given in its own memory), and the environment block
 * (sg_secret_from_env copies out of it, but the original stays where the
 * kernel put it, in ordinary memory). sg_secret_protect_process covers the
 * whole process, those copies included, against core dumps and same-user
 * debuggers.
 */
#ifndef SG_SECRET_H
#define SG_SECRET_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_SECRET_MAX 4096

typedef struct sg_secret sg_secret;

/*
 * Every constructor below allocates as described above: a private mapping,
 * excluded from core dumps (a failure to mark it is an error, SG_EINTERNAL:
 * the secret is not created), locked with mlock before the secret is copied
 * in. A failure to lock is not an error: RLIMIT_MEMLOCK may be small for an
 * unprivileged process (each secret takes at least one page), so the secret
 * is then created unlocked, and the first such failure in a process is
 * logged once at info level. Out of memory is SG_EINTERNAL.
 */

/* Copies n bytes (at most SG_SECRET_MAX); caller frees with sg_secret_free. */
SG_API int sg_secret_new(sg_secret **out, const void *p, size_t n) SG_MUST_CHECK;
/* Reads a whole regular file (at most SG_SECRET_MAX bytes) with read(2)
 * straight into the secret's pages, so no stdio buffer or stack copy holds
 * it; one trailing newline (LF or CRLF) is dropped. Refuses symlinks other
 * than one resolving beneath the file's own directory (a kubelet Secret
 * volume's ..data layout), files that are not regular, files that belong to
 * a user other than this process's or root, files readable by others or by
 * a group that is root's or not one of this process's, or through an ACL
 * entry by anyone but this process's user and groups (SG_EAUTH, "chmod
 * 600"), empty files and larger ones (SG_EINVAL);
 * SG_ENOTFOUND when absent. */
SG_API int sg_secret_from_file(sg_secret **out, const char *path) SG_MUST_CHECK;
/* Copies the value of environment variable `name` (not the name itself).
 * The copy is protected; the environment itself cannot be: it stays in
 * ordinary memory for the life of the process (prefer a PIN file). */
SG_API int sg_secret_from_env(sg_secret **out, const char *name) SG_MUST_CHECK;
/* Fills n random bytes (n <= 64), hex-encoded (2n characters), from the
 * kernel's CSPRNG (getrandom(2)); the hex is written straight into the
 * secret's pages. SG_EINTERNAL when the kernel cannot supply them. */
SG_API int sg_secret_random_hex(sg_secret **out, size_t n) SG_MUST_CHECK;

/* Borrowed views, valid until sg_secret_free. The data is NUL-terminated. */
SG_API const uint8_t *sg_secret_data(const sg_secret *s);
SG_API const char *sg_secret_cstr(const sg_secret *s);
SG_API size_t sg_secret_len(const sg_secret *s);
SG_API bool sg_secret_equal(const sg_secret *a, const void *p, size_t n);

/* Wipes every byte of the secret's pages, unlocks and unmaps them; accepts
 * NULL. */
SG_API void sg_secret_free(sg_secret *s);
static inline void sg_secret_freep(sg_secret **s)
{
	sg_secret_free(*s);
}

/* Whether n bytes at p and q are equal, in time that depends on n only
 * (for comparing secrets). */
SG_API bool sg_equal_ct(const void *p, const void *q, size_t n);

/* Wipes memory in a way the compiler cannot elide. */
SG_API void sg_wipe(void *p, size_t n);
/* realloc for a buffer that may hold secret bytes: a new block of n bytes
 * gets the first keep bytes of p (keep <= n, keep <= cap), and p, a block
 * of cap bytes (or NULL), is cleared and freed; realloc would free it as
 * it is. NULL when out of memory, p then untouched. */
SG_API void *sg_wipe_realloc(void *p, size_t cap, size_t keep, size_t n);

/*
 * Makes the calling process non-dumpable (prctl PR_SET_DUMPABLE 0): the
 * kernel writes no core dump of it (with fs.suid_dumpable=2 it writes one
 * readable by root only), and processes of the same user without
 * CAP_SYS_PTRACE can neither ptrace it (so no gdb or gcore) nor read its
 * /proc/PID/mem, environ or maps; its /proc/PID entries become root's.
 * Root keeps every power over it. Call it first thing in main, before any
 * secret is read; it applies to every thread. The kernel resets the flag
 * on execve and when the process changes its user or group IDs or
 * capabilities, so call it again after dropping privileges. Idempotent.
 * Returns SG_OK, or SG_EINTERNAL (with the detail) if the flag could not be
 * set or did not stick.
 */
SG_API int sg_secret_protect_process(void) SG_MUST_CHECK;

#endif
