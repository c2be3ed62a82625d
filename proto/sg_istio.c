/*
 * The protobuf-c adapter for the Istio CA API (proto/ca.proto).
 *
 * Decoding a request is two passes over the same bytes:
 *
 *  1. scan: a bounded walk of the protobuf wire format (protobuf encoding
 *     guide, "Message Structure") that follows the schema of
 *     IstioCertificateRequest and google.protobuf.Struct/Value/ListValue.
 *     It checks every tag, wire type, varint (at most 10 bytes, no overflow)
 *     and length against the bytes that remain, caps the total number of
 *     fields and the Struct/ListValue nesting depth (the recursion below is
 *     bounded by SG_ISTIO_MAX_DEPTH), and checks the strings: the csr is
 *     printable ASCII (PEM), every metadata key and string value is UTF-8
 *     without NUL (proto3 requires UTF-8; protobuf-c does not check it, and a
 *     NUL would silently shorten the C string we hand on).
 *  2. unpack: protobuf-c, allocating from the request's arena, on input that
 *     the scan accepted, so its unbounded recursion is never reached with
 *     deep input. The typed fields are then read from the unpacked message.
 *
 * The response encoder is written by hand (one length-delimited field per
 * element): it avoids copying each PEM into a NUL-terminated string for
 * protobuf-c, and the tests check its bytes against protobuf-c and Python.
 */
#include "sg_istio.h"

#include "ca.pb-c.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_varint.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ------------------------------------------------------------ */

#define ARENA_BLOCK (32 * 1024)
#define ARENA_MAX (8u << 20) /* protobuf-c needs a small multiple of 64 KiB */
#define ARENA_ALIGN alignof(max_align_t)

typedef struct arena_block {
	struct arena_block *next;
	size_t cap;
	size_t used;
	alignas(max_align_t) unsigned char data[];
} arena_block;

struct sg_istio_arena {
	arena_block *first; /* kept across resets */
	arena_block *cur;   /* the block being filled; chain from first */
	size_t total;       /* bytes in blocks after the first */
	ProtobufCAllocator pa;
};

static arena_block *block_new(size_t cap)
{
	arena_block *b = malloc(sizeof(*b) + cap);
	if (b) {
		b->next = NULL;
		b->cap = cap;
		b->used = 0;
	}
	return b;
}

static void *arena_alloc(sg_istio_arena *a, size_t n)
{
	if (n == 0)
		n = 1;
	if (n > ARENA_MAX)
		return NULL;
	n = (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
	arena_block *b = a->cur;
	if (b->cap - b->used < n) {
		size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
		if (cap > ARENA_MAX - a->total)
			return NULL;
		arena_block *nb = block_new(cap);
		if (!nb)
			return NULL;
		a->total += cap;
		b->next = nb;
		a->cur = b = nb;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

static void *pa_alloc(void *data, size_t n)
{
	return arena_alloc(data, n);
}

static void pa_free(void *data, void *p)
{
	(void)data; /* everything goes at once with the arena */
	(void)p;
}

int sg_istio_arena_new(sg_istio_arena **out)
{
	*out = NULL;
	sg_istio_arena *a = calloc(1, sizeof(*a));
	SG_ENSURE(a, SG_EINTERNAL, "out of memory for an arena");
	a->first = a->cur = block_new(ARENA_BLOCK);
	if (!a->first) {
		free(a);
		SG_BAIL(SG_EINTERNAL, "out of memory for an arena");
	}
	a->pa.alloc = pa_alloc;
	a->pa.free = pa_free;
	a->pa.allocator_data = a;
	*out = a;
	return SG_OK;
}

void sg_istio_arena_reset(sg_istio_arena *a)
{
	if (!a)
		return;
	arena_block *b = a->first->next;
	while (b) {
		arena_block *next = b->next;
		free(b);
		b = next;
	}
	a->first->next = NULL;
	a->first->used = 0;
	a->cur = a->first;
	a->total = 0;
}

void sg_istio_arena_free(sg_istio_arena *a)
{
	if (!a)
		return;
	sg_istio_arena_reset(a);
	free(a->first);
	free(a);
}

/* ---- wire format ------------------------------------------------------- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

static const char *const wt_names[8] = {"varint", "64-bit", "length-delimited", "start-group",
					"end-group",  "32-bit", "invalid (6)",      "invalid (7)"};

typedef struct scan {
	size_t fields; /* fields seen so far, at every level */
} scan;

static int read_varint(sg_reader *r, uint64_t *out, const char *where)
{
	size_t at = r->off;
	uint64_t v = 0;
	for (unsigned i = 0; i < 10; i++) {
		sg_slice b;
		SG_ENSURE(sg_reader_bytes(r, 1, &b) == 0, SG_EINVAL,
			  "%s: truncated varint at offset %zu", where, at);
		uint8_t c = b.p[0];
		SG_ENSURE(i < 9 || c <= 1, SG_EINVAL, "%s: varint at offset %zu overflows 64 bits", where,
			  at);
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*out = v;
			return SG_OK;
		}
	}
	SG_BAIL(SG_EINVAL, "%s: varint at offset %zu overflows 64 bits", where, at);
}

/* Reads one field key; counts it against SG_ISTIO_MAX_FIELDS. */
static int read_key(scan *s, sg_reader *r, const char *where, uint32_t *field, unsigned *wt)
{
	size_t at = r->off;
	uint64_t key = 0;
	SG_TRY(read_varint(r, &key, where));
	SG_ENSURE(++s->fields <= SG_ISTIO_MAX_FIELDS, SG_EINVAL,
		  "request has more than %d fields", SG_ISTIO_MAX_FIELDS);
	*wt = (unsigned)(key & 7);
	uint64_t num = key >> 3;
	SG_ENSURE(num >= 1 && num <= 536870911u, SG_EINVAL,
		  "%s: invalid field number %llu at offset %zu", where, (unsigned long long)num, at);
	SG_ENSURE(*wt != WT_SGROUP && *wt != WT_EGROUP && *wt <= WT_I32, SG_EINVAL,
		  "%s: field %llu at offset %zu has unsupported wire type %s", where,
		  (unsigned long long)num, at, wt_names[*wt]);
	*field = (uint32_t)num;
	return SG_OK;
}

/* Reads a length-delimited payload as a sub-reader over the same buffer, so
 * that offsets in messages stay absolute. */
static int read_len(sg_reader *r, sg_reader *sub, const char *where, uint32_t field)
{
	uint64_t n = 0;
	size_t at = r->off;
	SG_TRY(read_varint(r, &n, where));
	SG_ENSURE(n <= sg_reader_left(r), SG_EINVAL,
		  "%s: field %u at offset %zu claims %llu bytes, %zu left", where, field, at,
		  (unsigned long long)n, sg_reader_left(r));
	sub->p = r->p;
	sub->off = r->off;
	sub->len = r->off + (size_t)n;
	r->off += (size_t)n;
	return SG_OK;
}

static int skip_field(sg_reader *r, unsigned wt, const char *where, uint32_t field)
{
	uint64_t v = 0;
	sg_reader sub = {0};
	sg_slice b;
	switch (wt) {
	case WT_VARINT:
		return read_varint(r, &v, where);
	case WT_I64:
		SG_ENSURE(sg_reader_bytes(r, 8, &b) == 0, SG_EINVAL, "%s: field %u: truncated 64-bit value",
			  where, field);
		return SG_OK;
	case WT_I32:
		SG_ENSURE(sg_reader_bytes(r, 4, &b) == 0, SG_EINVAL, "%s: field %u: truncated 32-bit value",
			  where, field);
		return SG_OK;
	default:
		return read_len(r, &sub, where, field);
	}
}

static int want_wt(const char *where, const char *name, uint32_t field, unsigned wt, unsigned want)
{
	SG_ENSURE(wt == want, SG_EINVAL, "%s: field %u (%s) has wire type %s, want %s", where, field,
		  name, wt_names[wt], wt_names[want]);
	return SG_OK;
}

/* RFC 3629 §4 UTF-8, without NUL. */
static int check_utf8(const sg_reader *s, const char *where)
{
	size_t i = s->off;
	while (i < s->len) {
		uint8_t c = s->p[i];
		size_t n;
		uint32_t cp, min;
		if (c < 0x80) {
			SG_ENSURE(c != 0, SG_EINVAL, "%s: NUL byte at offset %zu", where, i);
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			n = 1, cp = c & 0x1f, min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			n = 2, cp = c & 0x0f, min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			n = 3, cp = c & 0x07, min = 0x10000;
		} else {
			SG_BAIL(SG_EINVAL, "%s: invalid UTF-8 at offset %zu", where, i);
		}
		SG_ENSURE(n < s->len - i, SG_EINVAL, "%s: truncated UTF-8 sequence at offset %zu", where,
			  i);
		for (size_t k = 1; k <= n; k++) {
			uint8_t cc = s->p[i + k];
			SG_ENSURE((cc & 0xc0) == 0x80, SG_EINVAL, "%s: invalid UTF-8 at offset %zu", where,
				  i);
			cp = (cp << 6) | (cc & 0x3f);
		}
		SG_ENSURE(cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff), SG_EINVAL,
			  "%s: invalid UTF-8 (overlong, surrogate or out of range) at offset %zu", where, i);
		i += n + 1;
	}
	return SG_OK;
}

/* PEM is printable ASCII plus tab, CR and LF (RFC 7468 §3). */
static int check_pem_text(const sg_reader *s)
{
	for (size_t i = s->off; i < s->len; i++) {
		uint8_t c = s->p[i];
		SG_ENSURE((c >= 0x20 && c <= 0x7e) || c == '\t' || c == '\r' || c == '\n', SG_EINVAL,
			  "csr: byte 0x%02x at offset %zu is not printable ASCII", c, i);
	}
	return SG_OK;
}

static int scan_struct(scan *s, sg_reader *r, unsigned depth);
static int scan_list(scan *s, sg_reader *r, unsigned depth);

/* google.protobuf.Value: a oneof of null 1, number 2, string 3, bool 4,
 * struct 5, list 6. */
static int scan_value(scan *s, sg_reader *r, unsigned depth)
{
	static const char where[] = "metadata Value";
	while (!sg_reader_done(r)) {
		uint32_t f = 0;
		unsigned wt = 0;
		sg_reader sub = {0};
		SG_TRY(read_key(s, r, where, &f, &wt));
		switch (f) {
		case 1:
		case 4:
			SG_TRY(want_wt(where, f == 1 ? "null_value" : "bool_value", f, wt, WT_VARINT));
			SG_TRY(skip_field(r, wt, where, f));
			break;
		case 2:
			SG_TRY(want_wt(where, "number_value", f, wt, WT_I64));
			SG_TRY(skip_field(r, wt, where, f));
			break;
		case 3:
			SG_TRY(want_wt(where, "string_value", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(check_utf8(&sub, "metadata string_value"));
			break;
		case 5:
			SG_TRY(want_wt(where, "struct_value", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(scan_struct(s, &sub, depth + 1));
			break;
		case 6:
			SG_TRY(want_wt(where, "list_value", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(scan_list(s, &sub, depth + 1));
			break;
		default:
			SG_TRY(skip_field(r, wt, where, f));
		}
	}
	return SG_OK;
}

/* google.protobuf.Struct.FieldsEntry: key 1, value 2. */
static int scan_entry(scan *s, sg_reader *r, unsigned depth)
{
	static const char where[] = "metadata entry";
	while (!sg_reader_done(r)) {
		uint32_t f = 0;
		unsigned wt = 0;
		sg_reader sub = {0};
		SG_TRY(read_key(s, r, where, &f, &wt));
		if (f == 1) {
			SG_TRY(want_wt(where, "key", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(check_utf8(&sub, "metadata key"));
		} else if (f == 2) {
			SG_TRY(want_wt(where, "value", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(scan_value(s, &sub, depth));
		} else {
			SG_TRY(skip_field(r, wt, where, f));
		}
	}
	return SG_OK;
}

static int check_depth(unsigned depth)
{
	SG_ENSURE(depth <= SG_ISTIO_MAX_DEPTH, SG_EINVAL,
		  "metadata nests deeper than %d Struct/ListValue levels", SG_ISTIO_MAX_DEPTH);
	return SG_OK;
}

/* Struct and ListValue have the same shape: one repeated message field 1
 * (Struct's map entries, ListValue's values), each scanned by `each`. */
static int scan_repeated(scan *s, sg_reader *r, unsigned depth, const char *where, const char *field,
			 int (*each)(scan *, sg_reader *, unsigned))
{
	SG_TRY(check_depth(depth));
	while (!sg_reader_done(r)) {
		uint32_t f = 0;
		unsigned wt = 0;
		sg_reader sub = {0};
		SG_TRY(read_key(s, r, where, &f, &wt));
		if (f == 1) {
			SG_TRY(want_wt(where, field, f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(each(s, &sub, depth));
		} else {
			SG_TRY(skip_field(r, wt, where, f));
		}
	}
	return SG_OK;
}

/* google.protobuf.Struct: repeated FieldsEntry fields = 1 (a map). */
static int scan_struct(scan *s, sg_reader *r, unsigned depth)
{
	return scan_repeated(s, r, depth, "metadata Struct", "fields", scan_entry);
}

/* google.protobuf.ListValue: repeated Value values = 1. */
static int scan_list(scan *s, sg_reader *r, unsigned depth)
{
	return scan_repeated(s, r, depth, "metadata ListValue", "values", scan_value);
}

/* IstioCertificateRequest: csr 1, validity_duration 3, metadata 4. */
static int scan_request(sg_reader *r, bool *has_csr)
{
	static const char where[] = "request";
	scan s = {0};
	*has_csr = false;
	while (!sg_reader_done(r)) {
		uint32_t f = 0;
		unsigned wt = 0;
		sg_reader sub = {0};
		SG_TRY(read_key(&s, r, where, &f, &wt));
		switch (f) {
		case 1:
			SG_TRY(want_wt(where, "csr", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_ENSURE(sg_reader_left(&sub) <= SG_ISTIO_MAX_CSR, SG_EINVAL,
				  "csr of %zu bytes exceeds %d", sg_reader_left(&sub), SG_ISTIO_MAX_CSR);
			SG_TRY(check_pem_text(&sub));
			*has_csr = sg_reader_left(&sub) > 0; /* the last occurrence wins */
			break;
		case 3:
			SG_TRY(want_wt(where, "validity_duration", f, wt, WT_VARINT));
			SG_TRY(skip_field(r, wt, where, f));
			break;
		case 4:
			SG_TRY(want_wt(where, "metadata", f, wt, WT_LEN));
			SG_TRY(read_len(r, &sub, where, f));
			SG_TRY(scan_struct(&s, &sub, 1));
			break;
		default:
			SG_TRY(skip_field(r, wt, where, f));
		}
	}
	return SG_OK;
}

/* ---- request ----------------------------------------------------------- */

static const char *const kind_names[] = {"unset", "null", "number", "string", "bool", "struct", "list"};

/* metadata[key] as a string: NULL when absent, SG_EINVAL when not a string.
 * A key sent twice: the last entry wins (proto3 map semantics). */
static int metadata_string(const Google__Protobuf__Struct *md, const char *key, const char **out)
{
	*out = NULL;
	if (!md)
		return SG_OK;
	const Google__Protobuf__Struct__FieldsEntry *hit = NULL;
	for (size_t i = 0; i < md->n_fields; i++)
		if (md->fields[i] && md->fields[i]->key && strcmp(md->fields[i]->key, key) == 0)
			hit = md->fields[i];
	if (!hit)
		return SG_OK;
	const Google__Protobuf__Value *v = hit->value;
	unsigned kind = v ? (unsigned)v->kind_case : 0;
	SG_ENSURE(kind == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE, SG_EINVAL,
		  "metadata %s is %s, want a string", key,
		  kind < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[kind] : "unknown");
	*out = v->string_value ? v->string_value : "";
	return SG_OK;
}

int sg_istio_request_decode(sg_istio_arena *a, const uint8_t *buf, size_t len,
			    sg_istio_request *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(len <= SG_ISTIO_MAX_MESSAGE, SG_EINVAL, "request of %zu bytes exceeds %d", len,
		  SG_ISTIO_MAX_MESSAGE);
	sg_reader r = sg_reader_of((sg_slice){buf, len});
	bool has_csr;
	SG_TRY(scan_request(&r, &has_csr));
	SG_ENSURE(has_csr, SG_EINVAL, "request has no csr");

	Istio__V1__Auth__IstioCertificateRequest *m =
		istio__v1__auth__istio_certificate_request__unpack(&a->pa, len, buf);
	/* The scan accepted the bytes, so a failure here is the arena's cap. */
	SG_ENSURE(m, SG_EINTERNAL, "protobuf-c could not unpack a %zu-byte request (arena exhausted)",
		  len);

	sg_istio_request req = {0};
	req.csr = m->csr;
	req.csr_len = strlen(m->csr);
	req.validity_seconds = m->validity_duration;
	SG_TRY(metadata_string(m->metadata, "ImpersonatedIdentity", &req.impersonated_identity));
	SG_TRY(metadata_string(m->metadata, "CertSigner", &req.cert_signer));
	*out = req;
	return SG_OK;
}

/* ---- encoding ---------------------------------------------------------- */

int sg_istio_response_encode(const char *const *elems, const size_t *lens, size_t n, uint8_t **out,
			     size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	SG_ENSURE(n > 0, SG_EINVAL, "response: empty certificate chain");
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		SG_ENSURE(lens[i] <= SG_ISTIO_MAX_RESPONSE, SG_EINVAL,
			  "response: chain element %zu of %zu bytes is too large", i, lens[i]);
		total += 1 + sg_varint_size(lens[i]) + lens[i];
		SG_ENSURE(total <= SG_ISTIO_MAX_RESPONSE, SG_EINVAL,
			  "response exceeds %u bytes", SG_ISTIO_MAX_RESPONSE);
	}
	uint8_t *buf = malloc(total);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory for a %zu-byte response", total);
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		buf[off++] = 0x0a; /* field 1, length-delimited */
		off += sg_varint_put(buf + off, lens[i]);
		if (lens[i])
			memcpy(buf + off, elems[i], lens[i]);
		off += lens[i];
	}
	*out = buf;
	*out_len = off;
	return SG_OK;
}

int sg_istio_response_decode(sg_istio_arena *a, const uint8_t *buf, size_t len, sg_istio_chain *out)
{
	static const char where[] = "response";
	memset(out, 0, sizeof(*out));
	SG_ENSURE(len <= SG_ISTIO_MAX_RESPONSE, SG_EINVAL, "response of %zu bytes exceeds %u", len,
		  SG_ISTIO_MAX_RESPONSE);
	/* Pass 1 checks and counts; pass 2 copies. */
	scan s = {0};
	size_t n = 0;
	sg_reader r = sg_reader_of((sg_slice){buf, len});
	while (!sg_reader_done(&r)) {
		uint32_t f = 0;
		unsigned wt = 0;
		sg_reader sub = {0};
		SG_TRY(read_key(&s, &r, where, &f, &wt));
		if (f == 1) {
			SG_TRY(want_wt(where, "cert_chain", f, wt, WT_LEN));
			SG_TRY(read_len(&r, &sub, where, f));
			SG_TRY(check_utf8(&sub, "response cert_chain"));
			n++;
		} else {
			SG_TRY(skip_field(&r, wt, where, f));
		}
	}
	const char **elems = arena_alloc(a, (n ? n : 1) * sizeof(*elems));
	size_t *lens = arena_alloc(a, (n ? n : 1) * sizeof(*lens));
	SG_ENSURE(elems && lens, SG_EINTERNAL, "out of memory decoding a response");
	r = sg_reader_of((sg_slice){buf, len});
	s.fields = 0;
	for (size_t i = 0; i < n;) {
		uint32_t f = 0;
		unsigned wt = 0;
		sg_reader sub = {0};
		SG_TRY(read_key(&s, &r, where, &f, &wt));
		if (f != 1) {
			SG_TRY(skip_field(&r, wt, where, f));
			continue;
		}
		SG_TRY(read_len(&r, &sub, where, f));
		size_t m = sg_reader_left(&sub);
		char *e = arena_alloc(a, m + 1);
		SG_ENSURE(e, SG_EINTERNAL, "out of memory decoding a response");
		if (m)
			memcpy(e, sub.p + sub.off, m);
		e[m] = '\0';
		elems[i] = e;
		lens[i] = m;
		i++;
	}
	out->n = n;
	out->elems = elems;
	out->lens = lens;
	return SG_OK;
}

int sg_istio_response_join(const uint8_t *buf, size_t len, char **out)
{
	*out = NULL;
	sg_istio_arena *a;
	SG_TRY(sg_istio_arena_new(&a));
	sg_istio_chain ch;
	int rc = sg_istio_response_decode(a, buf, len, &ch);
	if (rc == 0 && ch.n == 0)
		rc = sg_error_set(SG_EINVAL, "response: empty certificate chain");
	size_t total = 1;
	for (size_t i = 0; rc == 0 && i < ch.n; i++)
		total += ch.lens[i] + 1; /* bounded by SG_ISTIO_MAX_RESPONSE */
	char *s = rc == 0 ? malloc(total) : NULL;
	if (rc == 0 && !s)
		rc = sg_error_set(SG_EINTERNAL, "out of memory joining a response");
	if (rc == 0) {
		size_t off = 0;
		for (size_t i = 0; i < ch.n; i++) {
			memcpy(s + off, ch.elems[i], ch.lens[i]);
			off += ch.lens[i];
			if (ch.lens[i] && ch.elems[i][ch.lens[i] - 1] != '\n')
				s[off++] = '\n';
		}
		s[off] = '\0';
		*out = s;
	}
	sg_istio_arena_free(a);
	return rc;
}

int sg_istio_request_encode_ex(const char *csr, size_t csr_len, int64_t validity,
			       const char *impersonated_identity, const char *cert_signer,
			       uint8_t **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	SG_ENSURE(csr_len <= SG_ISTIO_MAX_CSR, SG_EINVAL, "csr of %zu bytes exceeds %d", csr_len,
		  SG_ISTIO_MAX_CSR);
	SG_ENSURE(!memchr(csr, '\0', csr_len), SG_EINVAL, "csr contains a NUL byte");
	char *csr_z SG_AUTOFREE = malloc(csr_len + 1);
	SG_ENSURE(csr_z, SG_EINTERNAL, "out of memory encoding a request");
	memcpy(csr_z, csr, csr_len);
	csr_z[csr_len] = '\0';

	/* Keys in sorted order, as deterministic serializers write maps. */
	Google__Protobuf__Value vals[2];
	Google__Protobuf__Struct__FieldsEntry ents[2];
	Google__Protobuf__Struct__FieldsEntry *entp[2];
	const char *keys[2] = {"CertSigner", "ImpersonatedIdentity"};
	const char *strs[2] = {cert_signer, impersonated_identity};
	size_t nent = 0;
	for (size_t i = 0; i < 2; i++) {
		if (!strs[i])
			continue;
		google__protobuf__value__init(&vals[nent]);
		vals[nent].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
		vals[nent].string_value = (char *)strs[i];
		google__protobuf__struct__fields_entry__init(&ents[nent]);
		ents[nent].key = (char *)keys[i];
		ents[nent].value = &vals[nent];
		entp[nent] = &ents[nent];
		nent++;
	}
	Google__Protobuf__Struct md;
	google__protobuf__struct__init(&md);
	md.n_fields = nent;
	md.fields = entp;

	Istio__V1__Auth__IstioCertificateRequest m;
	istio__v1__auth__istio_certificate_request__init(&m);
	m.csr = csr_z;
	m.validity_duration = validity;
	m.metadata = nent ? &md : NULL;

	size_t n = istio__v1__auth__istio_certificate_request__get_packed_size(&m);
	uint8_t *buf = malloc(n ? n : 1);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory encoding a request");
	size_t packed = istio__v1__auth__istio_certificate_request__pack(&m, buf);
	if (packed != n) {
		free(buf);
		SG_BAIL(SG_EINTERNAL, "protobuf-c packed %zu bytes, expected %zu", packed, n);
	}
	*out = buf;
	*out_len = n;
	return SG_OK;
}

int sg_istio_request_encode(const char *csr, size_t csr_len, int64_t validity,
			    const char *impersonated_identity, uint8_t **out, size_t *out_len)
{
	return sg_istio_request_encode_ex(csr, csr_len, validity, impersonated_identity, NULL, out,
					  out_len);
}
