/*
 * sg_ossl: OpenSSL's error queue turned into signet's error detail, and the
 * guard for OpenSSL's "1 is success" calls. For the OpenSSL adapter
 * (signer/) only: every other layer reaches OpenSSL through signer's APIs
 * and never sees its error queue.
 *
 *   SG_OSSL(expr, code, ...)  fail with code and a message unless expr is 1;
 *                             the message ends with OpenSSL's queued errors
 *
 * The queue is drained into the message here and nowhere else, so a stale
 * error never leaks into the next, unrelated failure; where a failure is an
 * answer rather than a fault (a signature that does not verify), the
 * adapter clears the queue itself and sets a plain sg_error_set.
 *
 * This header includes no OpenSSL header: what it declares takes plain C
 * types, so including it brings no OpenSSL into the includer.
 */
#ifndef SG_OSSL_H
#define SG_OSSL_H

#include "sg_error.h"

/* Like sg_error_set, then appends ": " and every queued OpenSSL error,
 * "; "-separated, as much as fits in SG_ERROR_MSG_MAX (the queue is drained
 * either way). Returns code. Use the macro. */
SG_API int sg_error_set_ossl_at(const char *file, int line, int code, const char *fmt, ...) SG_PRINTF(4, 5);
#define sg_error_set_ossl(code, ...) sg_error_set_ossl_at(__FILE__, __LINE__, (code), __VA_ARGS__)

#define SG_OSSL(expr, code, ...)                                       \
	do {                                                           \
		if ((expr) != 1)                                       \
			return sg_error_set_ossl((code), __VA_ARGS__); \
	} while (0)

#endif
