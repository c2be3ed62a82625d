/*
 * sg_cel_value: the arena, values (construction, CEL equality and
 * ordering, UTF-8), the copy-out of a result, the public accessors, the
 * JSON renderer and the strict equality tests use.
 *
 * The arena is a list of malloc'ed blocks; a request larger than a block
 * gets a block of its own. The limit is checked before malloc is asked, and
 * a refused request marks the arena failed, so the evaluator can stop.
 */
#include "sg_base64.h"
#include "sg_cel_int.h"
#include "sg_guard.h"
#include "sg_strbuf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */

#define BLOCK_SIZE 16384u

struct sg_cel_block {
	sg_cel_block *next;
	size_t cap, off;
	_Alignas(16) unsigned char data[];
};

void *sg_cel_alloc(sg_cel_arena *a, size_t n)
{
	if (n > SIZE_MAX / 2) {
		a->failed = a->over = true;
		return NULL;
	}
	n = n ? (n + 15u) & ~(size_t)15u : 16;
	if (a->inl && a->inl_cap - a->inl_off >= n) {
		/* Counted against the limit like the heap: the limit is on what
		 * an evaluation builds, wherever it lives. */
		if (a->limit && a->used + n > a->limit) {
			a->failed = a->over = true;
			return NULL;
		}
		void *p = a->inl + a->inl_off;
		a->inl_off += n;
		a->used += n;
		return p;
	}
	if (a->head && a->head->cap - a->head->off >= n) {
		void *p = a->head->data + a->head->off;
		a->head->off += n;
		return p;
	}
	size_t cap = n > BLOCK_SIZE ? n : BLOCK_SIZE;
	if (cap > SIZE_MAX - sizeof(sg_cel_block) || (a->limit && (a->used + cap + sizeof(sg_cel_block) > a->limit))) {
		a->failed = a->over = true;
		return NULL;
	}
	sg_cel_block *b = malloc(sizeof(sg_cel_block) + cap);
	if (!b) {
		a->failed = true;
		return NULL;
	}
	a->used += sizeof(sg_cel_block) + cap;
	b->cap = cap;
	b->off = n;
	/* A big single request goes behind the current block, so the rest of
	 * the current one stays in use. */
	if (a->head && cap == n) {
		b->next = a->head->next;
		a->head->next = b;
	} else {
		b->next = a->head;
		a->head = b;
	}
	return b->data;
}

char *sg_cel_strndup(sg_cel_arena *a, const char *s, size_t n)
{
	if (n == SIZE_MAX)
		return NULL;
	char *p = sg_cel_alloc(a, n + 1);
	if (p) {
		if (n)
			memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

void sg_cel_arena_free(sg_cel_arena *a)
{
	sg_cel_block *b = a->head;
	while (b) {
		sg_cel_block *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->used = 0;
	a->inl = NULL;
	a->inl_cap = a->inl_off = 0;
}

/* ---- constructors ---- */

sg_cel_value *sg_cel_new_value(sg_cel_arena *a, uint8_t kind)
{
	sg_cel_value *v = sg_cel_alloc(a, sizeof(*v));
	if (v) {
		memset(v, 0, sizeof(*v));
		v->kind = kind;
	}
	return v;
}

/* Out of memory or over the limit: the evaluation stops; callers get a
 * shared error value they can pass up. */
static const sg_cel_value oom_value = {.kind = SG_CEL_ERR, .s = {"out of memory", 13}};

static sg_cel_value *mk(sg_cel_ctx *c, uint8_t kind)
{
	sg_cel_value *v = sg_cel_new_value(c->a, kind);
	if (!v) {
		c->stop = true;
		if (!c->stop_msg)
			c->stop_msg = c->a->over ? "evaluation memory limit exceeded" : "out of memory";
	}
	return v;
}

cval sg_cel_err(sg_cel_ctx *c, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return sg_cel_mk_str(c, SG_CEL_ERR, buf, strlen(buf));
}

cval sg_cel_no_overload(sg_cel_ctx *c, const char *fn, cval *args, size_t n)
{
	char types[256] = "";
	size_t off = 0;
	for (size_t i = 0; i < n && off < sizeof(types) - 40; i++)
		off += (size_t)snprintf(types + off, sizeof(types) - off, "%s%s", i ? ", " : "",
		                        sg_cel_kind_name(args[i]));
	return sg_cel_err(c, "no such overload: %s(%s)", fn, types);
}

cval sg_cel_mk_bool(sg_cel_ctx *c, bool b)
{
	static const sg_cel_value t = {.kind = SG_CEL_BOOL, .b = true};
	static const sg_cel_value f = {.kind = SG_CEL_BOOL, .b = false};
	(void)c;
	return b ? &t : &f;
}

cval sg_cel_mk_int(sg_cel_ctx *c, int64_t i)
{
	sg_cel_value *v = mk(c, SG_CEL_INT);
	if (!v)
		return &oom_value;
	v->i = i;
	return v;
}

cval sg_cel_mk_uint(sg_cel_ctx *c, uint64_t u)
{
	sg_cel_value *v = mk(c, SG_CEL_UINT);
	if (!v)
		return &oom_value;
	v->u = u;
	return v;
}

cval sg_cel_mk_double(sg_cel_ctx *c, double d)
{
	sg_cel_value *v = mk(c, SG_CEL_DOUBLE);
	if (!v)
		return &oom_value;
	v->d = d;
	return v;
}

cval sg_cel_mk_str_owned(sg_cel_ctx *c, uint8_t kind, char *p, size_t n)
{
	if (!p)
		return &oom_value;
	sg_cel_value *v = mk(c, kind);
	if (!v)
		return &oom_value;
	v->s.p = p;
	v->s.n = n;
	return v;
}

cval sg_cel_mk_str(sg_cel_ctx *c, uint8_t kind, const char *p, size_t n)
{
	if (kind != SG_CEL_ERR && n > SG_CEL_STRING_MAX) {
		c->stop = true;
		c->stop_msg = "string size limit exceeded";
		return &oom_value;
	}
	char *q = sg_cel_strndup(c->a, p, n);
	if (!q) {
		c->stop = true;
		if (!c->stop_msg)
			c->stop_msg = c->a->over ? "evaluation memory limit exceeded" : "out of memory";
		return &oom_value;
	}
	return sg_cel_mk_str_owned(c, kind, q, n);
}

cval sg_cel_mk_type(sg_cel_ctx *c, const char *name)
{
	sg_cel_value *v = mk(c, SG_CEL_TYPE);
	if (!v)
		return &oom_value;
	v->s.p = name;
	v->s.n = strlen(name);
	return v;
}

cval sg_cel_mk_list(sg_cel_ctx *c, const sg_cel_value **items, size_t n)
{
	sg_cel_value *v = mk(c, SG_CEL_LIST);
	if (!v)
		return &oom_value;
	v->list.v = items;
	v->list.n = n;
	return v;
}

/* ---- kinds, equality, ordering ---- */

static const char *const kind_names[] = {
    [SG_CEL_NULL] = "null_type", [SG_CEL_BOOL] = "bool",     [SG_CEL_INT] = "int",     [SG_CEL_UINT] = "uint",
    [SG_CEL_DOUBLE] = "double",  [SG_CEL_STRING] = "string", [SG_CEL_BYTES] = "bytes", [SG_CEL_LIST] = "list",
    [SG_CEL_MAP] = "map",        [SG_CEL_TYPE] = "type",
};

const char *sg_cel_kind_name(const sg_cel_value *v)
{
	if (v->kind == SG_CEL_OBJECT)
		return v->map.type;
	if (v->kind == SG_CEL_ERR)
		return "error";
	return kind_names[v->kind];
}

bool sg_cel_is_num(cval v)
{
	return v->kind == SG_CEL_INT || v->kind == SG_CEL_UINT || v->kind == SG_CEL_DOUBLE;
}

/* Numbers on one line: -1, 0, 1, or 2 for NaN. */
static int num_cmp(cval a, cval b)
{
	if (a->kind == SG_CEL_DOUBLE || b->kind == SG_CEL_DOUBLE) {
		if (a->kind == SG_CEL_DOUBLE && b->kind == SG_CEL_DOUBLE) {
			if (isnan(a->d) || isnan(b->d))
				return 2;
			return a->d < b->d ? -1 : a->d > b->d ? 1 : 0;
		}
		/* A double against an integer as cel-go compares them (and
		 * cel-spec's tests expect): out of the integer's range it is
		 * greater or smaller; within, the integer is converted to a
		 * double, losing precision near the ends of the range. */
		bool swap = a->kind != SG_CEL_DOUBLE;
		double d = swap ? b->d : a->d;
		cval n = swap ? a : b;
		int r;
		if (isnan(d))
			return 2;
		double x;
		if (n->kind == SG_CEL_INT) {
			if (d < -9223372036854775808.0)
				return swap ? 1 : -1;
			if (d > 9223372036854775808.0)
				return swap ? -1 : 1;
			x = (double)n->i;
		} else {
			if (d < 0)
				return swap ? 1 : -1;
			if (d > 18446744073709551616.0)
				return swap ? -1 : 1;
			x = (double)n->u;
		}
		r = d < x ? -1 : d > x ? 1 : 0;
		return swap ? -r : r;
	}
	if (a->kind == b->kind) {
		if (a->kind == SG_CEL_INT)
			return a->i < b->i ? -1 : a->i > b->i;
		return a->u < b->u ? -1 : a->u > b->u;
	}
	if (a->kind == SG_CEL_INT) { /* int vs uint */
		if (a->i < 0)
			return -1;
		uint64_t x = (uint64_t)a->i;
		return x < b->u ? -1 : x > b->u;
	}
	if (b->i < 0)
		return 1;
	uint64_t y = (uint64_t)b->i;
	return a->u < y ? -1 : a->u > y;
}

static int bytes_cmp(cval a, cval b)
{
	size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
	int r = n ? memcmp(a->s.p, b->s.p, n) : 0;
	if (r)
		return r < 0 ? -1 : 1;
	return a->s.n < b->s.n ? -1 : a->s.n > b->s.n;
}

int sg_cel_compare(cval a, cval b)
{
	if (sg_cel_is_num(a) && sg_cel_is_num(b))
		return num_cmp(a, b);
	if (a->kind != b->kind)
		return -2;
	switch (a->kind) {
	case SG_CEL_BOOL:
		return (int)a->b - (int)b->b;
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
		return bytes_cmp(a, b);
	default:
		return -2;
	}
}

cval sg_cel_map_find(cval m, cval key)
{
	uint64_t work;
	return sg_cel_map_find_w(m, key, &work);
}

cval sg_cel_map_find_w(cval m, cval key, uint64_t *work)
{
	/* Keys are scalars: the work is the entries looked at and the bytes
	 * of the string keys compared (those of the lookup's length). */
	*work = m->map.n;
	for (size_t i = 0; i < m->map.n; i++) {
		cval k = m->map.k[i];
		if (k->kind == SG_CEL_STRING && key->kind == SG_CEL_STRING && k->s.n == key->s.n)
			*work += key->s.n;
		if (sg_cel_equal(k, key))
			return m->map.v[i];
	}
	return NULL;
}

cval sg_cel_map_find_str(cval m, const char *k, size_t n)
{
	for (size_t i = 0; i < m->map.n; i++) {
		cval key = m->map.k[i];
		if (key->kind == SG_CEL_STRING && key->s.n == n && memcmp(key->s.p, k, n) == 0)
			return m->map.v[i];
	}
	return NULL;
}

/* Values are shared, not copied, so a value of a few kilobytes can be a
 * tree of 2^40 nodes (a list holding one list twice, forty times over):
 * equality walks within a budget of nodes and gives up (-1) when it runs
 * out. */
static int equal_b(cval a, cval b, uint64_t *budget)
{
	if (*budget == 0)
		return -1;
	(*budget)--;
	if (sg_cel_is_num(a) && sg_cel_is_num(b))
		return num_cmp(a, b) == 0;
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case SG_CEL_NULL:
		return 1;
	case SG_CEL_BOOL:
		return a->b == b->b;
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
	case SG_CEL_TYPE:
		if (a->s.n != b->s.n)
			return 0;
		/* A node per 16 bytes compared: one 4 MiB string shared a million
		 * times in a list is no cheaper to compare than a million. */
		if (*budget < a->s.n / 16)
			return -1;
		*budget -= a->s.n / 16;
		return memcmp(a->s.p, b->s.p, a->s.n) == 0;
	case SG_CEL_LIST:
		if (a->list.n != b->list.n)
			return 0;
		for (size_t i = 0; i < a->list.n; i++) {
			int r = equal_b(a->list.v[i], b->list.v[i], budget);
			if (r != 1)
				return r;
		}
		return 1;
	case SG_CEL_OBJECT:
		if (strcmp(a->map.type, b->map.type) != 0)
			return 0;
		/* fall through */
	case SG_CEL_MAP:
		if (a->map.n != b->map.n)
			return 0;
		for (size_t i = 0; i < a->map.n; i++) {
			cval v = NULL;
			for (size_t j = 0; j < b->map.n && !v; j++) {
				/* keys are scalars: one node each */
				int r = equal_b(a->map.k[i], b->map.k[j], budget);
				if (r < 0)
					return r;
				if (r)
					v = b->map.v[j];
			}
			if (!v)
				return 0;
			int r = equal_b(a->map.v[i], v, budget);
			if (r != 1)
				return r;
		}
		return 1;
	default:
		return 0;
	}
}

int sg_cel_equal_within(cval a, cval b, uint64_t *budget)
{
	return equal_b(a, b, budget);
}

bool sg_cel_equal(cval a, cval b)
{
	uint64_t budget = 1000000;
	return equal_b(a, b, &budget) == 1;
}

/* ---- UTF-8 ---- */

size_t sg_cel_utf8_count(const char *p, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)p[i] & 0xC0) != 0x80;
	return c;
}

bool sg_cel_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		unsigned char c = p[i];
		size_t len;
		uint32_t cp;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xE0) == 0xC0) {
			len = 2;
			cp = c & 0x1F;
		} else if ((c & 0xF0) == 0xE0) {
			len = 3;
			cp = c & 0x0F;
		} else if ((c & 0xF8) == 0xF0) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i < len)
			return false;
		for (size_t j = 1; j < len; j++) {
			if ((p[i + j] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i + j] & 0x3F);
		}
		static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += len;
	}
	return true;
}

/* ---- copy-out ---- */

typedef struct owned {
	sg_cel_arena a;
	sg_cel_value root;
	_Alignas(16) unsigned char inl[512]; /* small results need no second allocation */
} owned;

static int copy_into(sg_cel_arena *a, sg_cel_value *dst, cval src, int depth)
{
	SG_ENSURE(depth < 1000, SG_EINVAL, "evaluation error: result nested too deeply");
	*dst = *src;
	switch (src->kind) {
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
	case SG_CEL_TYPE:
		dst->s.p = sg_cel_strndup(a, src->s.p, src->s.n);
		SG_ENSURE(dst->s.p, SG_EINTERNAL, "out of memory copying a CEL value");
		return 0;
	case SG_CEL_LIST: {
		const sg_cel_value **items = sg_cel_alloc(a, sizeof(*items) * (src->list.n ? src->list.n : 1));
		SG_ENSURE(items, SG_EINTERNAL, "out of memory copying a CEL value");
		for (size_t i = 0; i < src->list.n; i++) {
			sg_cel_value *v = sg_cel_new_value(a, 0);
			SG_ENSURE(v, SG_EINTERNAL, "out of memory copying a CEL value");
			SG_TRY(copy_into(a, v, src->list.v[i], depth + 1));
			items[i] = v;
		}
		dst->list.v = items;
		return 0;
	}
	case SG_CEL_MAP:
	case SG_CEL_OBJECT: {
		size_t n = src->map.n ? src->map.n : 1;
		const sg_cel_value **k = sg_cel_alloc(a, sizeof(*k) * n), **v = sg_cel_alloc(a, sizeof(*v) * n);
		SG_ENSURE(k && v, SG_EINTERNAL, "out of memory copying a CEL value");
		for (size_t i = 0; i < src->map.n; i++) {
			sg_cel_value *kk = sg_cel_new_value(a, 0), *vv = sg_cel_new_value(a, 0);
			SG_ENSURE(kk && vv, SG_EINTERNAL, "out of memory copying a CEL value");
			SG_TRY(copy_into(a, kk, src->map.k[i], depth + 1));
			SG_TRY(copy_into(a, vv, src->map.v[i], depth + 1));
			k[i] = kk;
			v[i] = vv;
		}
		dst->map.k = k;
		dst->map.v = v;
		if (src->map.type) {
			dst->map.type = sg_cel_strndup(a, src->map.type, strlen(src->map.type));
			SG_ENSURE(dst->map.type, SG_EINTERNAL, "out of memory copying a CEL value");
		}
		return 0;
	}
	default:
		return 0;
	}
}

int sg_cel_copy_out(sg_cel_value **out, cval v, size_t limit)
{
	*out = NULL;
	owned *o = calloc(1, sizeof(*o));
	SG_ENSURE(o, SG_EINTERNAL, "out of memory copying a CEL value");
	/* A shared value is copied as a tree, which may be far larger than
	 * the evaluation's memory: the copy has the same limit. */
	o->a.limit = limit;
	o->a.inl = o->inl;
	o->a.inl_cap = sizeof(o->inl);
	int rc = copy_into(&o->a, &o->root, v, 0);
	if (rc < 0 && o->a.over)
		rc = sg_error_set(SG_EINVAL, "evaluation error: the result is larger than the memory limit");
	if (rc < 0) {
		sg_cel_arena_free(&o->a);
		free(o);
		return rc;
	}
	*out = &o->root;
	return 0;
}

void sg_cel_value_free(sg_cel_value *v)
{
	if (!v)
		return;
	owned *o = (owned *)((char *)v - offsetof(owned, root));
	sg_cel_arena_free(&o->a);
	free(o);
}

/* ---- accessors ---- */

sg_cel_kind sg_cel_value_kind(const sg_cel_value *v)
{
	return (sg_cel_kind)v->kind;
}

bool sg_cel_value_bool(const sg_cel_value *v)
{
	return v->kind == SG_CEL_BOOL && v->b;
}

int64_t sg_cel_value_int(const sg_cel_value *v)
{
	return v->kind == SG_CEL_INT ? v->i : 0;
}

uint64_t sg_cel_value_uint(const sg_cel_value *v)
{
	return v->kind == SG_CEL_UINT ? v->u : 0;
}

double sg_cel_value_double(const sg_cel_value *v)
{
	return v->kind == SG_CEL_DOUBLE ? v->d : 0;
}

const char *sg_cel_value_string(const sg_cel_value *v, size_t *len)
{
	if (v->kind != SG_CEL_STRING && v->kind != SG_CEL_BYTES) {
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = v->s.n;
	return v->s.p;
}

const char *sg_cel_value_type_name(const sg_cel_value *v)
{
	if (v->kind == SG_CEL_TYPE)
		return v->s.p;
	if (v->kind == SG_CEL_OBJECT)
		return v->map.type;
	return NULL;
}

size_t sg_cel_value_size(const sg_cel_value *v)
{
	if (v->kind == SG_CEL_LIST)
		return v->list.n;
	if (v->kind == SG_CEL_MAP || v->kind == SG_CEL_OBJECT)
		return v->map.n;
	return 0;
}

const sg_cel_value *sg_cel_value_item(const sg_cel_value *v, size_t i)
{
	if (i >= sg_cel_value_size(v))
		return NULL;
	return v->kind == SG_CEL_LIST ? v->list.v[i] : v->map.v[i];
}

const sg_cel_value *sg_cel_value_key(const sg_cel_value *v, size_t i)
{
	if (v->kind == SG_CEL_LIST || i >= sg_cel_value_size(v))
		return NULL;
	return v->map.k[i];
}

/* ---- strict equality ---- */

static bool same_double(double a, double b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b && signbit(a) == signbit(b);
}

bool sg_cel_value_identical(const sg_cel_value *a, const sg_cel_value *b)
{
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case SG_CEL_NULL:
		return true;
	case SG_CEL_BOOL:
		return a->b == b->b;
	case SG_CEL_INT:
		return a->i == b->i;
	case SG_CEL_UINT:
		return a->u == b->u;
	case SG_CEL_DOUBLE:
		return same_double(a->d, b->d);
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
	case SG_CEL_TYPE:
		return a->s.n == b->s.n && memcmp(a->s.p, b->s.p, a->s.n) == 0;
	case SG_CEL_LIST:
		if (a->list.n != b->list.n)
			return false;
		for (size_t i = 0; i < a->list.n; i++)
			if (!sg_cel_value_identical(a->list.v[i], b->list.v[i]))
				return false;
		return true;
	case SG_CEL_OBJECT:
		if (strcmp(a->map.type, b->map.type) != 0)
			return false;
		/* fall through */
	case SG_CEL_MAP:
		if (a->map.n != b->map.n)
			return false;
		for (size_t i = 0; i < a->map.n; i++) {
			bool found = false;
			for (size_t j = 0; j < b->map.n && !found; j++)
				if (sg_cel_value_identical(a->map.k[i], b->map.k[j]))
					found = sg_cel_value_identical(a->map.v[i], b->map.v[j]);
			if (!found)
				return false;
		}
		return true;
	default:
		return false;
	}
}

/* ---- JSON ---- */

static void json_string(sg_strbuf *b, const char *p, size_t n)
{
	sg_strbuf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '"' || c == '\\') {
			sg_strbuf_putc(b, '\\');
			sg_strbuf_putc(b, (char)c);
		} else if (c < 0x20 || c == 0x7f) {
			sg_strbuf_printf(b, "\\u%04x", c);
		} else {
			sg_strbuf_putc(b, (char)c);
		}
	}
	sg_strbuf_putc(b, '"');
}

static void json_value(sg_strbuf *b, const sg_cel_value *v, int depth);

static void json_entries(sg_strbuf *b, const sg_cel_value *v, int depth)
{
	sg_strbuf_putc(b, '[');
	for (size_t i = 0; i < v->map.n; i++) {
		sg_strbuf_puts(b, i ? ", {\"key\": " : "{\"key\": ");
		json_value(b, v->map.k[i], depth + 1);
		sg_strbuf_puts(b, ", \"value\": ");
		json_value(b, v->map.v[i], depth + 1);
		sg_strbuf_putc(b, '}');
	}
	sg_strbuf_putc(b, ']');
}

static void json_double(sg_strbuf *b, double d)
{
	if (isnan(d)) {
		sg_strbuf_puts(b, "\"NaN\"");
	} else if (isinf(d)) {
		sg_strbuf_puts(b, d > 0 ? "\"Infinity\"" : "\"-Infinity\"");
	} else {
		char buf[40];
		snprintf(buf, sizeof(buf), "%.17g", d);
		/* The shortest text that reads back as the same double. */
		for (int prec = 1; prec <= 17; prec++) {
			snprintf(buf, sizeof(buf), "%.*g", prec, d);
			if (strtod(buf, NULL) == d)
				break;
		}
		sg_strbuf_puts(b, buf);
	}
}

static void json_value(sg_strbuf *b, const sg_cel_value *v, int depth)
{
	if (depth > 1000) {
		b->overflow = true;
		return;
	}
	switch (v->kind) {
	case SG_CEL_NULL:
		sg_strbuf_puts(b, "{\"type\": \"null\", \"value\": null}");
		return;
	case SG_CEL_BOOL:
		sg_strbuf_printf(b, "{\"type\": \"bool\", \"value\": %s}", v->b ? "true" : "false");
		return;
	case SG_CEL_INT:
		sg_strbuf_printf(b, "{\"type\": \"int\", \"value\": %lld}", (long long)v->i);
		return;
	case SG_CEL_UINT:
		sg_strbuf_printf(b, "{\"type\": \"uint\", \"value\": %llu}", (unsigned long long)v->u);
		return;
	case SG_CEL_DOUBLE:
		sg_strbuf_puts(b, "{\"type\": \"double\", \"value\": ");
		json_double(b, v->d);
		sg_strbuf_putc(b, '}');
		return;
	case SG_CEL_STRING:
	case SG_CEL_TYPE:
		sg_strbuf_printf(b, "{\"type\": \"%s\", \"value\": ", v->kind == SG_CEL_STRING ? "string" : "type");
		json_string(b, v->s.p, v->s.n);
		sg_strbuf_putc(b, '}');
		return;
	case SG_CEL_BYTES: {
		size_t n = sg_b64_encoded_len(SG_B64_STD, v->s.n) + 1;
		char *t = malloc(n);
		if (!t || sg_b64_encode(SG_B64_STD, (const uint8_t *)v->s.p, v->s.n, t, n) < 0) {
			free(t);
			b->oom = true;
			return;
		}
		sg_strbuf_puts(b, "{\"type\": \"bytes\", \"value\": ");
		json_string(b, t, strlen(t));
		sg_strbuf_putc(b, '}');
		free(t);
		return;
	}
	case SG_CEL_LIST:
		sg_strbuf_puts(b, "{\"type\": \"list\", \"value\": [");
		for (size_t i = 0; i < v->list.n; i++) {
			if (i)
				sg_strbuf_puts(b, ", ");
			json_value(b, v->list.v[i], depth + 1);
		}
		sg_strbuf_puts(b, "]}");
		return;
	case SG_CEL_MAP:
		sg_strbuf_puts(b, "{\"type\": \"map\", \"value\": ");
		json_entries(b, v, depth);
		sg_strbuf_putc(b, '}');
		return;
	case SG_CEL_OBJECT:
		sg_strbuf_puts(b, "{\"type\": \"object\", \"value\": {\"name\": ");
		json_string(b, v->map.type, strlen(v->map.type));
		sg_strbuf_puts(b, ", \"fields\": ");
		json_entries(b, v, depth);
		sg_strbuf_puts(b, "}}");
		return;
	default:
		b->overflow = true;
	}
}

int sg_cel_value_json(char **out, const sg_cel_value *v)
{
	sg_strbuf b = {.max = 64u << 20};
	json_value(&b, v, 0);
	if (sg_strbuf_failed(&b)) {
		sg_strbuf_free(&b);
		*out = NULL;
		SG_BAIL(SG_EINTERNAL, "CEL value too large or too deep to render");
	}
	*out = sg_strbuf_take(&b);
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory rendering a CEL value");
	return 0;
}
