/*
 * sg_error: the one error convention of signet.
 *
 * Every fallible function returns int: 0 on success or one of the negative
 * categories below. Where the failure is detected, the code records a detail
 * (message, file, line) in a thread-local record with sg_error_set(); callers
 * pass the code up unchanged and never overwrite the detail. Front ends map
 * categories to their own status codes in one table (sg_error_name() gives a
 * stable token for logs and metrics).
 *
 * Out of memory is reported as SG_EINTERNAL with a detail; the process keeps
 * running and the one request fails.
 */
#ifndef SG_ERROR_H
#define SG_ERROR_H

#include <stddef.h>

#define SG_MUST_CHECK __attribute__((warn_unused_result))
#define SG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define SG_API __attribute__((visibility("default")))

enum sg_error_code {
	SG_OK = 0,
	SG_EINVAL = -1,    /* invalid input: malformed, too large, unsupported */
	SG_ENOTFOUND = -2, /* a named thing (file, token, key) does not exist */
	SG_EBUSY = -3,     /* overloaded or transient fault: retry later */
	SG_EAUTH = -4,     /* authentication failed (PIN, token, signature) */
	SG_EDENIED = -5,   /* well-formed but refused by policy */
	SG_EHSM = -6,      /* the HSM failed and did not recover */
	SG_EPROTO = -7,    /* a peer broke its protocol */
	SG_ETIMEOUT = -8,  /* the request's deadline passed */
	SG_EINTERNAL = -9, /* a bug or resource exhaustion on our side */
	SG_ELINT = -10,    /* a certificate about to be signed broke a rule (a bug in policy or encoder) */
};

#define SG_ERROR_MSG_MAX 512

typedef struct sg_error {
	int code;
	const char *file;
	int line;
	char msg[SG_ERROR_MSG_MAX];
} sg_error;

/* Records code and a printf-style message for this thread; returns code so
 * that `return sg_error_set(...)` reads naturally. Use the macro. */
SG_API int sg_error_set_at(const char *file, int line, int code, const char *fmt, ...)
	SG_PRINTF(4, 5);
#define sg_error_set(code, ...) sg_error_set_at(__FILE__, __LINE__, (code), __VA_ARGS__)

/* The OpenSSL adapter's variant, which appends OpenSSL's queued errors,
 * is sg_error_set_ossl in signer/sg_ossl.h. */

/* The last error recorded on this thread; borrowed, valid until the next
 * sg_error_set on this thread. code is 0 and msg empty when none. */
SG_API const sg_error *sg_error_last(void);
SG_API void sg_error_clear(void);

/* Copies the last error of this thread into *out (for handing a failure to
 * another thread, e.g. from a signer worker to a completion callback). */
SG_API void sg_error_save(sg_error *out);
/* Makes *e the current error of this thread. */
SG_API void sg_error_restore(const sg_error *e);

/* Stable lower-case token for a code: "invalid", "not_found", "busy", ... */
SG_API const char *sg_error_name(int code);

#endif
