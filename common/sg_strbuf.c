/*
 * The string builder (contract: sg_strbuf.h). Capacity doubles from the
 * first allocation and is clamped to max + 1, so a bounded builder never
 * holds more than its bound; every size is checked before it is added, so
 * nothing here can wrap. A refused add changes nothing but a flag, which
 * is what lets a caller drop one piece and go on.
 */
#include "sg_strbuf.h"

#include "sg_secret.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_DEFAULT 64

/* The most bytes b may hold: its max, or what a size_t can count with
 * room for the NUL. */
static size_t limit(const sg_strbuf *b)
{
	return b->max ? b->max : SIZE_MAX - 1;
}

/* Room for n more bytes and the NUL. */
static bool reserve(sg_strbuf *b, size_t n)
{
	size_t lim = limit(b);
	if (n > lim - b->len) {
		if (b->max)
			b->overflow = true;
		else
			b->oom = true;
		return false;
	}
	size_t need = b->len + n + 1; /* <= lim + 1: no wrap */
	if (need <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : (b->first ? b->first : FIRST_DEFAULT);
	while (cap < need)
		cap = cap > lim / 2 ? lim + 1 : cap * 2;
	if (cap > lim + 1)
		cap = lim + 1;
	/* with wipe: the bytes and their NUL moved, the old block cleared */
	char *p = b->wipe ? sg_wipe_realloc(b->p, b->cap, b->p ? b->len + 1 : 0, cap) : realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

bool sg_strbuf_add(sg_strbuf *b, const void *s, size_t n)
{
	if (!reserve(b, n))
		return false;
	if (n)
		memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return true;
}

bool sg_strbuf_puts(sg_strbuf *b, const char *s)
{
	return sg_strbuf_add(b, s, strlen(s));
}

bool sg_strbuf_putc(sg_strbuf *b, char c)
{
	return sg_strbuf_add(b, &c, 1);
}

bool sg_strbuf_printf(sg_strbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true; /* glibc fails a format only for memory or a too-wide field */
		return false;
	}
	if (!reserve(b, (size_t)n))
		return false;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return true;
}

bool sg_strbuf_failed(const sg_strbuf *b)
{
	return b->overflow || b->oom;
}

char *sg_strbuf_take(sg_strbuf *b)
{
	(void)sg_strbuf_add(b, NULL, 0); /* an empty text is still a string */
	char *p = NULL;
	if (!sg_strbuf_failed(b)) {
		p = b->p;
		b->p = NULL;
	}
	sg_strbuf_free(b);
	return p;
}

void sg_strbuf_free(sg_strbuf *b)
{
	if (b->wipe && b->p)
		sg_wipe(b->p, b->cap);
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->overflow = b->oom = false;
}
