/*
 * Thread-local error detail. The record is written only where a failure is
 * detected; propagation never touches it, so the message names the real
 * cause. OpenSSL's error queue is drained into a message by the OpenSSL
 * adapter (signer/sg_ossl.h), which records it through sg_error_set_at
 * like everyone else; common/ itself knows no third-party library.
 */
#include "sg_error.h"
#include "sg_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local sg_error last;

/* The format attribute lets clang check callers (-Wformat-nonliteral). */
static int vset(const char *file, int line, int code, const char *fmt, va_list ap) SG_PRINTF(4, 0);

static int vset(const char *file, int line, int code, const char *fmt, va_list ap)
{
	/* Formatted apart first: callers often wrap the previous detail
	 * ("spec.x: %s", sg_error_last()->msg), which lives in last.msg. */
	char msg[sizeof(last.msg)];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	last.code = code;
	last.file = file;
	last.line = line;
	memcpy(last.msg, msg, sizeof(msg));
	return code;
}

int sg_error_set_at(const char *file, int line, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vset(file, line, code, fmt, ap);
	va_end(ap);
	return code;
}

const sg_error *sg_error_last(void)
{
	return &last;
}

void sg_error_clear(void)
{
	memset(&last, 0, sizeof(last));
}

void sg_error_save(sg_error *out)
{
	*out = last;
}

void sg_error_restore(const sg_error *e)
{
	last = *e;
}

const char *sg_error_name(int code)
{
	switch (code) {
	case SG_OK: return "ok";
	case SG_EINVAL: return "invalid";
	case SG_ENOTFOUND: return "not_found";
	case SG_EBUSY: return "busy";
	case SG_EAUTH: return "auth";
	case SG_EDENIED: return "denied";
	case SG_EHSM: return "hsm";
	case SG_EPROTO: return "protocol";
	case SG_ETIMEOUT: return "timeout";
	case SG_EINTERNAL: return "internal";
	case SG_ELINT: return "lint";
	default: return "unknown";
	}
}

void sg_freep(void *pp)
{
	free(*(void **)pp);
}
