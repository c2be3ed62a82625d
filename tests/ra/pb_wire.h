/*
 * pb_wire: a tiny protobuf wire writer for the tests' hostile inputs
 * (truncated fields, wrong wire types, oversized lengths) that an encoder
 * generated from a .proto would never produce. Header-only: each test is
 * its own program. Out of memory aborts the test.
 */
#ifndef PB_WIRE_H
#define PB_WIRE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct wbuf {
	uint8_t *p;
	size_t n, cap;
} wbuf;

static inline void w_byte(wbuf *w, uint8_t b)
{
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 256;
		w->p = realloc(w->p, w->cap);
		if (!w->p)
			abort();
	}
	w->p[w->n++] = b;
}

static inline void w_raw(wbuf *w, const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		w_byte(w, ((const uint8_t *)p)[i]);
}

static inline void w_varint(wbuf *w, uint64_t v)
{
	while (v >= 0x80) {
		w_byte(w, (uint8_t)(v | 0x80));
		v >>= 7;
	}
	w_byte(w, (uint8_t)v);
}

static inline void w_key(wbuf *w, unsigned field, unsigned wt)
{
	w_varint(w, ((uint64_t)field << 3) | wt);
}

static inline void w_len(wbuf *w, unsigned field, const void *p, size_t n)
{
	w_key(w, field, 2);
	w_varint(w, n);
	w_raw(w, p, n);
}

static inline void w_str(wbuf *w, unsigned field, const char *s)
{
	w_len(w, field, s, strlen(s));
}

static inline void w_free(wbuf *w)
{
	free(w->p);
	memset(w, 0, sizeof(*w));
}

#endif
