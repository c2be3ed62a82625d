/*
 * OpenSSL's error queue into the thread's error detail (sg_ossl.h). The
 * message is composed in a local buffer and recorded with one
 * sg_error_set_at, so the record stays sg_error.c's alone; this file is why
 * common/ needs no OpenSSL.
 */
#include "sg_ossl.h"

#include <openssl/err.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sg_error_set_ossl_at(const char *file, int line, int code, const char *fmt, ...)
{
	char msg[SG_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	size_t used = strlen(msg);
	const char *sep = ": ";
	unsigned long e;
	while ((e = ERR_get_error()) != 0) {
		char buf[256];
		ERR_error_string_n(e, buf, sizeof(buf));
		if (used + strlen(sep) + strlen(buf) + 1 < sizeof(msg)) {
			used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%s%s", sep, buf);
			sep = "; ";
		}
	}
	return sg_error_set_at(file, line, code, "%s", msg);
}
