/*
 * The protobuf-c adapter for the external policy server API
 * (proto/policy.proto, signet.policy.v1).
 *
 * Request: built as protobuf-c structures that point at the caller's
 * strings (nothing is copied but the scaffolding: entry structures and
 * pointer arrays, from a scratch list freed at the end), packed by
 * protobuf-c. Before that every string is checked to be UTF-8 within
 * SG_POLICYPB_MAX_STRING (proto3 requires UTF-8 in string fields, and
 * protobuf's other implementations refuse a message that breaks it, so a
 * bad string would surface as the server's parse error instead of ours),
 * every list and map against SG_POLICYPB_MAX_ITEMS, and maps are sorted by
 * key with repeats refused (the receiver would keep only the last entry;
 * sorted, the same request always encodes to the same bytes).
 *
 * Response: read by hand with the bounded reader of common/sg_der.h, in
 * the shape of the schema (protobuf encoding guide, "Message Structure"):
 *   PolicyResponse { reserved 1; string reason = 2 (len);
 *                    Result verdict = 3 (varint) }
 * protobuf-c is not used here because it does not refuse an enum value
 * outside the enum (proto3 enums are open), and the value outside is
 * exactly what must never be read as a decision; two fields are also
 * shorter to read than to scan and then unpack. The verdict must end up
 * set: zero is RESULT_UNSPECIFIED (policy.proto says why APPROVED is not
 * zero), which is what an absent field reads as, so an empty message or
 * one without a verdict is refused like a malformed one — no answer. Field
 * 1 is refused wherever it appears: it is where a server built to the
 * design's numbering (APPROVED = 0, DENIED = 1) puts its answer. The
 * encoder beside it is the reader's mirror, for tests and the fuzz
 * target's round trip.
 */
#include "sg_policypb.h"

#include "policy.pb-c.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_varint.h"

#include <stdlib.h>
#include <string.h>

/* ---- scratch memory for the encoder ------------------------------------ */

#define SCRATCH_MAX 32 /* allocations one request needs: 2 per map and list, a few more */

typedef struct scratch {
	void *p[SCRATCH_MAX];
	size_t n;
} scratch;

static void scratch_free(scratch *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->p[i]);
	s->n = 0;
}

/* Zeroed memory for n elements of size bytes (n may be 0), freed with s;
 * NULL (the detail set) when out of memory. */
static void *scratch_alloc(scratch *s, size_t n, size_t size)
{
	if (s->n == SCRATCH_MAX) {
		sg_error_set(SG_EINTERNAL, "policy request: scratch list full (a bug)");
		return NULL;
	}
	void *p = calloc(n ? n : 1, size);
	if (!p) {
		sg_error_set(SG_EINTERNAL, "policy request: out of memory");
		return NULL;
	}
	s->p[s->n++] = p;
	return p;
}

/* ---- request ------------------------------------------------------------ */

/* A string field: NULL is "", at most SG_POLICYPB_MAX_STRING bytes of
 * UTF-8 (RFC 3629). The result is what protobuf-c's structures hold. */
static int str_check(const char *s, const char *field, size_t index, char **out)
{
	*out = (char *)"";
	if (!s)
		return SG_OK;
	size_t n = strnlen(s, SG_POLICYPB_MAX_STRING + 1);
	SG_ENSURE(n <= SG_POLICYPB_MAX_STRING, SG_EINVAL, "policy request: %s[%zu]: longer than %u bytes", field, index,
	          SG_POLICYPB_MAX_STRING);
	sg_slice sl = {(const uint8_t *)s, n};
	size_t i = 0;
	uint32_t cp;
	while (i < n)
		SG_ENSURE(sg_der_utf8_next(sl, &i, &cp), SG_EINVAL, "policy request: %s[%zu]: not UTF-8 at byte %zu",
		          field, index, i);
	*out = (char *)s;
	return SG_OK;
}

static int count_check(size_t n, const char *field)
{
	SG_ENSURE(n <= SG_POLICYPB_MAX_ITEMS, SG_EINVAL, "policy request: %s: %zu entries, at most %d", field, n,
	          SG_POLICYPB_MAX_ITEMS);
	return SG_OK;
}

/* A repeated string field. */
static int list_build(scratch *s, const char *const *in, size_t n, const char *field, char ***out)
{
	SG_TRY(count_check(n, field));
	SG_ENSURE(in || n == 0, SG_EINVAL, "policy request: %s: %zu entries and no array", field, n);
	if (!(*out = scratch_alloc(s, n, sizeof(char *))))
		return SG_EINTERNAL;
	for (size_t i = 0; i < n; i++)
		SG_TRY(str_check(in[i], field, i, &(*out)[i]));
	return SG_OK;
}

/* A map entry as the encoder sorts it: key and the caller's index. */
typedef struct keyed {
	char *key;
	size_t at;
} keyed;

static int keyed_cmp(const void *a, const void *b)
{
	return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key);
}

/* Checks the keys of a map of n entries (key_of(i) is entry i's key) and
 * returns them sorted, each with its index; a repeated key is refused. */
static int keys_sorted(scratch *s, size_t n, const char *field, const char *(*key_of)(const void *, size_t),
                       const void *entries, keyed **out)
{
	SG_TRY(count_check(n, field));
	SG_ENSURE(entries || n == 0, SG_EINVAL, "policy request: %s: %zu entries and no array", field, n);
	keyed *k = scratch_alloc(s, n, sizeof(*k));
	if (!k)
		return SG_EINTERNAL;
	for (size_t i = 0; i < n; i++) {
		SG_TRY(str_check(key_of(entries, i), field, i, &k[i].key));
		k[i].at = i;
	}
	if (n > 1)
		qsort(k, n, sizeof(*k), keyed_cmp);
	for (size_t i = 1; i < n; i++)
		SG_ENSURE(strcmp(k[i - 1].key, k[i].key) != 0, SG_EINVAL,
		          "policy request: %s: entries %zu and %zu have the same key", field, k[i - 1].at, k[i].at);
	*out = k;
	return SG_OK;
}

static const char *kv_key(const void *entries, size_t i)
{
	return ((const sg_policypb_kv *)entries)[i].key;
}

static const char *extra_key(const void *entries, size_t i)
{
	return ((const sg_policypb_extra *)entries)[i].key;
}

/* The three map<string, string> fields have entry types of their own with
 * the same members; one macro fills any of them. */
#define KV_MAP_BUILD(s, in, n, field, type, init, out_n, out_p)                                                        \
	do {                                                                                                           \
		keyed *k_ = NULL;                                                                                      \
		type *e_ = NULL;                                                                                       \
		type **p_ = NULL;                                                                                      \
		SG_TRY(keys_sorted((s), (n), (field), kv_key, (in), &k_));                                             \
		if (!(e_ = scratch_alloc((s), (n), sizeof(type))) || !(p_ = scratch_alloc((s), (n), sizeof(type *))))  \
			return SG_EINTERNAL;                                                                           \
		for (size_t i_ = 0; i_ < (n); i_++) {                                                                  \
			init(&e_[i_]);                                                                                 \
			e_[i_].key = k_[i_].key;                                                                       \
			SG_TRY(str_check((in)[k_[i_].at].value, field, k_[i_].at, &e_[i_].value));                     \
			p_[i_] = &e_[i_];                                                                              \
		}                                                                                                      \
		(out_n) = (n);                                                                                         \
		(out_p) = p_;                                                                                          \
	} while (0)

static int extra_build(scratch *s, const sg_policypb_extra *in, size_t n, Signet__Policy__V1__UserInfo *u)
{
	static const char field[] = "user_info.extra";
	keyed *k = NULL;
	Signet__Policy__V1__UserInfo__ExtraEntry *e = NULL, **p = NULL;
	Signet__Policy__V1__ExtraValue *v = NULL;
	SG_TRY(keys_sorted(s, n, field, extra_key, in, &k));
	if (!(e = scratch_alloc(s, n, sizeof(*e))) || !(p = scratch_alloc(s, n, sizeof(*p))) ||
	    !(v = scratch_alloc(s, n, sizeof(*v))))
		return SG_EINTERNAL;
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += in[i].nvalues <= SG_POLICYPB_MAX_ITEMS ? in[i].nvalues : SG_POLICYPB_MAX_ITEMS + 1;
	SG_TRY(count_check(total, "user_info.extra values"));
	char **vals = scratch_alloc(s, total, sizeof(char *));
	if (!vals)
		return SG_EINTERNAL;
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		const sg_policypb_extra *x = &in[k[i].at];
		SG_ENSURE(x->values || x->nvalues == 0, SG_EINVAL, "policy request: %s[%zu]: %zu values and no array",
		          field, k[i].at, x->nvalues);
		signet__policy__v1__extra_value__init(&v[i]);
		v[i].n_values = x->nvalues;
		v[i].values = vals + used;
		for (size_t j = 0; j < x->nvalues; j++)
			SG_TRY(str_check(x->values[j], "user_info.extra values", j, &vals[used + j]));
		used += x->nvalues;
		signet__policy__v1__user_info__extra_entry__init(&e[i]);
		e[i].key = k[i].key;
		e[i].value = &v[i];
		p[i] = &e[i];
	}
	u->n_extra = n;
	u->extra = p;
	return SG_OK;
}

static int request_build(scratch *s, const sg_policypb_request *r, Signet__Policy__V1__PolicyRequest *m,
                         Signet__Policy__V1__ObjectMeta *md, Signet__Policy__V1__IssuerRef *ir,
                         Signet__Policy__V1__UserInfo *u)
{
	signet__policy__v1__object_meta__init(md);
	SG_TRY(str_check(r->name, "metadata.name", 0, &md->name));
	SG_TRY(str_check(r->name_space, "metadata.namespace", 0, &md->namespace_));
	SG_TRY(str_check(r->uid, "metadata.uid", 0, &md->uid));
	KV_MAP_BUILD(s, r->labels, r->nlabels, "metadata.labels", Signet__Policy__V1__ObjectMeta__LabelsEntry,
	             signet__policy__v1__object_meta__labels_entry__init, md->n_labels, md->labels);
	KV_MAP_BUILD(s, r->annotations, r->nannotations, "metadata.annotations",
	             Signet__Policy__V1__ObjectMeta__AnnotationsEntry,
	             signet__policy__v1__object_meta__annotations_entry__init, md->n_annotations, md->annotations);

	signet__policy__v1__issuer_ref__init(ir);
	SG_TRY(str_check(r->issuer_name, "issuer_ref.name", 0, &ir->name));
	SG_TRY(str_check(r->issuer_kind, "issuer_ref.kind", 0, &ir->kind));
	SG_TRY(str_check(r->issuer_group, "issuer_ref.group", 0, &ir->group));

	signet__policy__v1__user_info__init(u);
	SG_TRY(str_check(r->username, "user_info.username", 0, &u->username));
	SG_TRY(str_check(r->user_uid, "user_info.uid", 0, &u->uid));
	SG_TRY(list_build(s, r->groups, r->ngroups, "user_info.groups", &u->groups));
	u->n_groups = r->ngroups;
	SG_TRY(extra_build(s, r->extra, r->nextra, u));

	signet__policy__v1__policy_request__init(m);
	m->metadata = md;
	SG_ENSURE(r->csr_len <= SG_POLICYPB_MAX_CSR, SG_EINVAL, "policy request: request: %zu bytes, at most %u",
	          r->csr_len, SG_POLICYPB_MAX_CSR);
	SG_ENSURE(r->csr || r->csr_len == 0, SG_EINVAL, "policy request: request: %zu bytes and no buffer", r->csr_len);
	m->request.data = (uint8_t *)r->csr;
	m->request.len = r->csr_len;
	m->issuer_ref = ir;
	m->is_ca = r->is_ca;
	SG_TRY(str_check(r->duration, "duration", 0, &m->duration));
	SG_TRY(list_build(s, r->usages, r->nusages, "usages", &m->usages));
	m->n_usages = r->nusages;
	m->user_info = u;
	SG_TRY(str_check(r->policy_name, "policy_name", 0, &m->policy_name));
	KV_MAP_BUILD(s, r->plugin_values, r->nplugin_values, "plugin_values",
	             Signet__Policy__V1__PolicyRequest__PluginValuesEntry,
	             signet__policy__v1__policy_request__plugin_values_entry__init, m->n_plugin_values,
	             m->plugin_values);
	return SG_OK;
}

int sg_policypb_request_encode(const sg_policypb_request *r, uint8_t **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	scratch s = {0};
	Signet__Policy__V1__PolicyRequest m;
	Signet__Policy__V1__ObjectMeta md;
	Signet__Policy__V1__IssuerRef ir;
	Signet__Policy__V1__UserInfo u;
	int rc = request_build(&s, r, &m, &md, &ir, &u);
	size_t n = 0;
	uint8_t *buf = NULL;
	if (rc == SG_OK) {
		n = signet__policy__v1__policy_request__get_packed_size(&m);
		if (n > SG_POLICYPB_MAX_REQUEST)
			rc = sg_error_set(SG_EINVAL, "policy request: %zu bytes encoded, at most %u", n,
			                  SG_POLICYPB_MAX_REQUEST);
	}
	if (rc == SG_OK && !(buf = malloc(n ? n : 1)))
		rc = sg_error_set(SG_EINTERNAL, "policy request: out of memory for %zu bytes", n);
	if (rc == SG_OK) {
		size_t packed = signet__policy__v1__policy_request__pack(&m, buf);
		if (packed != n)
			rc = sg_error_set(SG_EINTERNAL, "protobuf-c packed %zu bytes, expected %zu", packed, n);
	}
	scratch_free(&s);
	if (rc != SG_OK) {
		free(buf);
		return rc;
	}
	*out = buf;
	*out_len = n;
	return SG_OK;
}

/* ---- response ----------------------------------------------------------- */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

static const char *const wt_names[8] = {"varint",    "64-bit", "length-delimited", "start-group",
                                        "end-group", "32-bit", "invalid (6)",      "invalid (7)"};

/* A base-128 varint: at most 10 bytes, no bits beyond 64. */
static int read_varint(sg_reader *r, uint64_t *out)
{
	size_t at = r->off;
	uint64_t v = 0;
	for (unsigned i = 0; i < 10; i++) {
		sg_slice b;
		SG_ENSURE(sg_reader_bytes(r, 1, &b) == 0, SG_EINVAL, "policy response: truncated varint at offset %zu",
		          at);
		uint8_t c = b.p[0];
		SG_ENSURE(i < 9 || c <= 1, SG_EINVAL, "policy response: varint at offset %zu overflows 64 bits", at);
		v |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*out = v;
			return SG_OK;
		}
	}
	SG_BAIL(SG_EINVAL, "policy response: varint at offset %zu overflows 64 bits", at);
}

/* A length-delimited payload, as a slice of what remains. */
static int read_len(sg_reader *r, uint32_t field, sg_slice *out)
{
	size_t at = r->off;
	uint64_t n = 0;
	SG_TRY(read_varint(r, &n));
	/* A length is a 32-bit varint: 5 bytes at most, as for a key. protobuf-c
	 * refuses a longer one however small its value (the fuzzer found
	 * 80 80 80 80 80 00, a 6-byte 0), so accepting it would read a message
	 * the reference parser calls malformed. */
	SG_ENSURE(r->off - at <= 5, SG_EINVAL, "policy response: field %u: length at offset %zu is longer than 5 bytes",
	          field, at);
	SG_ENSURE(n <= sg_reader_left(r), SG_EINVAL,
	          "policy response: field %u at offset %zu claims %llu bytes, %zu left", field, at,
	          (unsigned long long)n, sg_reader_left(r));
	return sg_reader_bytes(r, (size_t)n, out);
}

static int skip_field(sg_reader *r, uint32_t field, unsigned wt)
{
	uint64_t v;
	sg_slice b;
	switch (wt) {
	case WT_VARINT:
		return read_varint(r, &v);
	case WT_I64:
		SG_ENSURE(sg_reader_bytes(r, 8, &b) == 0, SG_EINVAL,
		          "policy response: field %u: truncated 64-bit value", field);
		return SG_OK;
	case WT_I32:
		SG_ENSURE(sg_reader_bytes(r, 4, &b) == 0, SG_EINVAL,
		          "policy response: field %u: truncated 32-bit value", field);
		return SG_OK;
	default: /* WT_LEN; read_key refused the rest */
		return read_len(r, field, &b);
	}
}

static int read_key(sg_reader *r, size_t *fields, uint32_t *field, unsigned *wt)
{
	size_t at = r->off;
	uint64_t key = 0;
	SG_TRY(read_varint(r, &key));
	/* A key is a uint32 varint: 5 bytes at most, as protobuf's own parsers
	 * read it (an overlong key is refused there too). */
	SG_ENSURE(r->off - at <= 5, SG_EINVAL, "policy response: field key at offset %zu is longer than 5 bytes", at);
	SG_ENSURE(key <= UINT32_MAX, SG_EINVAL, "policy response: field key at offset %zu exceeds 32 bits", at);
	SG_ENSURE(++*fields <= SG_POLICYPB_MAX_FIELDS, SG_EINVAL, "policy response: more than %d fields",
	          SG_POLICYPB_MAX_FIELDS);
	uint64_t num = key >> 3;
	*wt = (unsigned)(key & 7);
	SG_ENSURE(num >= 1 && num <= 536870911u, SG_EINVAL, "policy response: invalid field number %llu at offset %zu",
	          (unsigned long long)num, at);
	SG_ENSURE(*wt == WT_VARINT || *wt == WT_I64 || *wt == WT_LEN || *wt == WT_I32, SG_EINVAL,
	          "policy response: field %llu at offset %zu has unsupported wire type %s", (unsigned long long)num, at,
	          wt_names[*wt]);
	*field = (uint32_t)num;
	return SG_OK;
}

static int want_wt(uint32_t field, const char *name, unsigned wt, unsigned want)
{
	SG_ENSURE(wt == want, SG_EINVAL, "policy response: field %u (%s) has wire type %s, want %s", field, name,
	          wt_names[wt], wt_names[want]);
	return SG_OK;
}

/* RFC 3629 UTF-8 without NUL. */
static int check_reason(sg_slice s)
{
	SG_ENSURE(s.len <= SG_POLICYPB_MAX_REASON, SG_EINVAL, "policy response: reason of %zu bytes, at most %d", s.len,
	          SG_POLICYPB_MAX_REASON);
	size_t i = 0;
	uint32_t cp;
	while (i < s.len) {
		size_t at = i;
		SG_ENSURE(sg_der_utf8_next(s, &i, &cp), SG_EINVAL, "policy response: reason is not UTF-8 at byte %zu",
		          at);
		SG_ENSURE(cp != 0, SG_EINVAL, "policy response: reason holds a NUL at byte %zu", at);
	}
	return SG_OK;
}

static int response_read(sg_reader *r, sg_policypb_response *out)
{
	size_t fields = 0;
	uint64_t verdict = SG_POLICYPB_UNSPECIFIED; /* proto3: absent is the default */
	sg_slice reason = {NULL, 0};
	while (!sg_reader_done(r)) {
		uint32_t f = 0;
		unsigned wt = 0;
		SG_TRY(read_key(r, &fields, &f, &wt));
		switch (f) {
		case 1:
			/* Whatever it holds: the design's DENIED (1) would be our
			 * APPROVED (1) if this were read as a verdict. */
			SG_BAIL(SG_EINVAL,
			        "policy response: field 1 is the design's result (APPROVED = 0), which policy.proto "
			        "reserves: a server built to that numbering is not an answer; generate it from "
			        "signet's policy.proto");
		case 3:
			SG_TRY(want_wt(f, "verdict", wt, WT_VARINT));
			SG_TRY(read_varint(r, &verdict));
			/* An int32 enum: a negative value is a 10-byte varint, far
			 * outside. Every occurrence must be known, not only the last. */
			SG_ENSURE(verdict <= SG_POLICYPB_ERROR, SG_EINVAL,
			          "policy response: verdict %lld is outside the enum", (long long)(int64_t)verdict);
			break;
		case 2:
			SG_TRY(want_wt(f, "reason", wt, WT_LEN));
			SG_TRY(read_len(r, f, &reason));
			SG_TRY(check_reason(reason));
			break;
		default:
			SG_TRY(skip_field(r, f, wt));
		}
	}
	/* Fail closed: an unset verdict is not an answer (absent, or 0 last). */
	SG_ENSURE(verdict != SG_POLICYPB_UNSPECIFIED, SG_EINVAL,
	          "policy response: no verdict (RESULT_UNSPECIFIED%s): not an answer",
	          r->len == 0 ? ", an empty message" : "");
	out->result = (sg_policypb_result)verdict;
	if (reason.len)
		memcpy(out->reason, reason.p, reason.len);
	out->reason[reason.len] = '\0';
	out->reason_len = reason.len;
	return SG_OK;
}

int sg_policypb_response_decode(const uint8_t *buf, size_t len, sg_policypb_response *out)
{
	memset(out, 0, sizeof(*out));
	out->result = SG_POLICYPB_ERROR; /* until the whole message has been read */
	SG_ENSURE(len <= SG_POLICYPB_MAX_RESPONSE, SG_EINVAL, "policy response of %zu bytes exceeds %u", len,
	          SG_POLICYPB_MAX_RESPONSE);
	SG_ENSURE(buf || len == 0, SG_EINVAL, "policy response: %zu bytes and no buffer", len);
	sg_reader r = sg_reader_of((sg_slice){buf, len});
	sg_policypb_response tmp;
	memset(&tmp, 0, sizeof(tmp));
	SG_TRY(response_read(&r, &tmp));
	*out = tmp;
	return SG_OK;
}

const char *sg_policypb_result_name(sg_policypb_result r)
{
	switch (r) {
	case SG_POLICYPB_UNSPECIFIED:
		return "RESULT_UNSPECIFIED";
	case SG_POLICYPB_APPROVED:
		return "APPROVED";
	case SG_POLICYPB_DENIED:
		return "DENIED";
	case SG_POLICYPB_ERROR:
		return "ERROR";
	}
	return "UNKNOWN";
}

int sg_policypb_response_encode(sg_policypb_result result, const char *reason, uint8_t **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	SG_ENSURE(result == SG_POLICYPB_APPROVED || result == SG_POLICYPB_DENIED || result == SG_POLICYPB_ERROR,
	          SG_EINVAL, "policy response: result %d is not APPROVED, DENIED or ERROR", (int)result);
	size_t n = reason ? strnlen(reason, SG_POLICYPB_MAX_REASON + 1) : 0;
	SG_TRY(check_reason((sg_slice){(const uint8_t *)reason, n}));
	/* key + varint (<= 1024: 2 bytes) + reason, key + 1-byte varint (1..3) */
	uint8_t *buf = malloc(3 + n + 2);
	SG_ENSURE(buf, SG_EINTERNAL, "policy response: out of memory");
	size_t off = 0;
	if (n) {
		buf[off++] = 0x12; /* field 2, length-delimited */
		off += sg_varint_put(buf + off, n);
		memcpy(buf + off, reason, n);
		off += n;
	}
	buf[off++] = 0x18; /* field 3, varint: never zero, so always written */
	off += sg_varint_put(buf + off, (uint64_t)result);
	*out = buf;
	*out_len = off;
	return SG_OK;
}
