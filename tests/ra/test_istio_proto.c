/*
 * Tests for proto/sg_istio.c: round trips, golden bytes from another
 * implementation, and hostile requests (each refused with a specific
 * SG_EINVAL, none crashing).
 *
 * The golden bytes were produced once by Python's protobuf 4.21 (Debian
 * python3-protobuf) from proto/ca.proto compiled with grpc_tools.protoc,
 * serialized with deterministic=True (map keys sorted):
 *
 *   r = ca_pb2.IstioCertificateRequest(csr=CSR, validity_duration=86400)
 *   r.metadata.update({"CertSigner": ""})
 */
#include "sg_istio.h"

#include "ca.pb-c.h"
#include "pb_wire.h"
#include "sg_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char CSR[] = "-----BEGIN CERTIFICATE REQUEST-----\nMIIBAzCBqwIBADAAMFkw\n"
			  "-----END CERTIFICATE REQUEST-----\n";

/* Python: the bytes after the csr field (0x0a 0x5b CSR). */
static const uint8_t agent_tail[] = {0x18, 0x80, 0xa3, 0x05, 0x22, 0x12, 0x0a, 0x10, 0x0a, 0x0a,
				     'C',  'e',	 'r',  't',  'S',  'i',	 'g',  'n',  'e',  'r',
				     0x12, 0x02, 0x1a, 0x00};
static const char ZT_ID[] = "spiffe://cluster.local/ns/default/sa/bookinfo";
/* validity -1 (ten-byte varint), {"CertSigner": "", "ImpersonatedIdentity": ZT_ID} */
static const uint8_t ztunnel_tail_head[] = {
	0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x22, 0x5b, 0x0a, 0x10, 0x0a,
	0x0a, 'C',  'e',  'r',	't',  'S',  'i',  'g',	'n',  'e',  'r',  0x12, 0x02, 0x1a, 0x00, 0x0a,
	0x47, 0x0a, 0x14, 'I',	'm',  'p',  'e',  'r',	's',  'o',  'n',  'a',	't',  'e',  'd',  'I',
	'd',  'e',  'n',  't',	'i',  't',  'y',  0x12, 0x2f, 0x1a, 0x2d};

/* ---- hostile inputs: pb_wire.h writes them ------------------------------ */

/* A request: the csr, then metadata = the Struct in md (if any). */
static wbuf request_with(const wbuf *md)
{
	wbuf w = {0};
	w_str(&w, 1, CSR);
	if (md)
		w_len(&w, 4, md->p, md->n);
	return w;
}

/* Struct { key: Value(value bytes) } */
static wbuf struct_entry(const char *key, const wbuf *value)
{
	wbuf e = {0}, s = {0};
	w_str(&e, 1, key);
	w_len(&e, 2, value->p, value->n);
	w_len(&s, 1, e.p, e.n);
	w_free(&e);
	return s;
}

static sg_istio_arena *arena;

static int decode(const wbuf *w, sg_istio_request *r)
{
	sg_istio_arena_reset(arena);
	return sg_istio_request_decode(arena, w->p, w->n, r);
}

/* Decoding must fail with SG_EINVAL and a detail containing msg. */
static void refused(const wbuf *w, const char *msg)
{
	sg_istio_request r;
	SG_CHECK_RC(decode(w, &r), SG_EINVAL);
	SG_CHECK_MSG(msg);
	SG_CHECK(r.csr == NULL);
}

/* ---- round trips and golden bytes -------------------------------------- */

static void t_golden_agent(void)
{
	uint8_t *buf;
	size_t len;
	SG_CHECK_OK(sg_istio_request_encode_ex(CSR, strlen(CSR), 86400, NULL, "", &buf, &len));
	wbuf want = {0};
	w_str(&want, 1, CSR);
	w_raw(&want, agent_tail, sizeof(agent_tail));
	SG_CHECK(len == want.n && memcmp(buf, want.p, len) == 0);

	sg_istio_request r;
	SG_CHECK_OK(decode(&want, &r));
	SG_CHECK(r.csr_len == strlen(CSR) && strcmp(r.csr, CSR) == 0);
	SG_CHECK(r.validity_seconds == 86400);
	SG_CHECK(r.cert_signer && strcmp(r.cert_signer, "") == 0);
	SG_CHECK(r.impersonated_identity == NULL);
	free(buf);
	w_free(&want);
}

static void t_golden_ztunnel(void)
{
	uint8_t *buf;
	size_t len;
	SG_CHECK_OK(sg_istio_request_encode_ex(CSR, strlen(CSR), -1, ZT_ID, "", &buf, &len));
	wbuf want = {0};
	w_str(&want, 1, CSR);
	w_raw(&want, ztunnel_tail_head, sizeof(ztunnel_tail_head));
	w_raw(&want, ZT_ID, strlen(ZT_ID));
	SG_CHECK(len == want.n && memcmp(buf, want.p, len) == 0);

	sg_istio_request r;
	SG_CHECK_OK(decode(&want, &r));
	SG_CHECK(r.validity_seconds == -1); /* passed through: policy decides */
	SG_CHECK(r.impersonated_identity && strcmp(r.impersonated_identity, ZT_ID) == 0);
	SG_CHECK(r.cert_signer && r.cert_signer[0] == '\0');
	free(buf);
	w_free(&want);
}

static void t_plain_request(void)
{
	uint8_t *buf;
	size_t len;
	SG_CHECK_OK(sg_istio_request_encode(CSR, strlen(CSR), 0, NULL, &buf, &len));
	SG_CHECK(len == 2 + strlen(CSR) && buf[0] == 0x0a && buf[1] == 0x5b);
	sg_istio_arena_reset(arena);
	sg_istio_request r;
	SG_CHECK_OK(sg_istio_request_decode(arena, buf, len, &r));
	SG_CHECK(r.validity_seconds == 0 && !r.cert_signer && !r.impersonated_identity);
	free(buf);
}

static void t_response(void)
{
	const char *elems[] = {"-----BEGIN CERTIFICATE-----\nleaf\n-----END CERTIFICATE-----\n",
			       "-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n"};
	size_t lens[] = {strlen(elems[0]), strlen(elems[1])};
	uint8_t *buf;
	size_t len;
	SG_CHECK_OK(sg_istio_response_encode(elems, lens, 2, &buf, &len));
	/* Python: 0x0a 0x3b elem0 0x0a 0x3b elem1 */
	SG_CHECK(len == 4 + lens[0] + lens[1]);
	SG_CHECK(buf[0] == 0x0a && buf[1] == 0x3b && buf[2 + lens[0]] == 0x0a && buf[3 + lens[0]] == 0x3b);
	SG_CHECK(memcmp(buf + 2, elems[0], lens[0]) == 0 && memcmp(buf + 4 + lens[0], elems[1], lens[1]) == 0);

	/* protobuf-c reads what we wrote */
	Istio__V1__Auth__IstioCertificateResponse *m =
		istio__v1__auth__istio_certificate_response__unpack(NULL, len, buf);
	SG_CHECK(m && m->n_cert_chain == 2 && strcmp(m->cert_chain[1], elems[1]) == 0);
	istio__v1__auth__istio_certificate_response__free_unpacked(m, NULL);

	sg_istio_chain ch;
	sg_istio_arena_reset(arena);
	SG_CHECK_OK(sg_istio_response_decode(arena, buf, len, &ch));
	SG_CHECK(ch.n == 2 && ch.lens[0] == lens[0] && strcmp(ch.elems[0], elems[0]) == 0);
	free(buf);

	/* a large element: two-byte lengths */
	char *big = malloc(20000);
	memset(big, 'A', 20000);
	const char *one[] = {big};
	size_t onel[] = {20000};
	SG_CHECK_OK(sg_istio_response_encode(one, onel, 1, &buf, &len));
	SG_CHECK(len == 20000 + 1 + 3);
	sg_istio_arena_reset(arena);
	SG_CHECK_OK(sg_istio_response_decode(arena, buf, len, &ch));
	SG_CHECK(ch.n == 1 && ch.lens[0] == 20000);
	free(buf);
	free(big);

	SG_CHECK_RC(sg_istio_response_encode(NULL, NULL, 0, &buf, &len), SG_EINVAL);
	uint8_t bad[] = {0x0a, 0x05, 'a'};
	SG_CHECK_RC(sg_istio_response_decode(arena, bad, sizeof(bad), &ch), SG_EINVAL);
}

/* protobuf-c's own encoding of a rich request decodes to the same values. */
static void t_cross_protobuf_c(void)
{
	Google__Protobuf__Value v[3];
	Google__Protobuf__Struct__FieldsEntry e[3];
	Google__Protobuf__Struct__FieldsEntry *ep[3] = {&e[0], &e[1], &e[2]};
	for (int i = 0; i < 3; i++) {
		google__protobuf__value__init(&v[i]);
		google__protobuf__struct__fields_entry__init(&e[i]);
		e[i].value = &v[i];
	}
	e[0].key = "WorkloadName";
	v[0].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
	v[0].number_value = 3.5;
	e[1].key = "ImpersonatedIdentity";
	v[1].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
	v[1].string_value = "spiffe://td/ns/a/sa/b";
	e[2].key = "CertSigner";
	v[2].kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
	v[2].string_value = "signer-\xc3\xa9"; /* UTF-8 */
	Google__Protobuf__Struct md;
	google__protobuf__struct__init(&md);
	md.n_fields = 3;
	md.fields = ep;
	Istio__V1__Auth__IstioCertificateRequest m;
	istio__v1__auth__istio_certificate_request__init(&m);
	m.csr = (char *)CSR;
	m.validity_duration = 3600;
	m.metadata = &md;
	size_t n = istio__v1__auth__istio_certificate_request__get_packed_size(&m);
	uint8_t *buf = malloc(n);
	istio__v1__auth__istio_certificate_request__pack(&m, buf);
	sg_istio_request r;
	sg_istio_arena_reset(arena);
	SG_CHECK_OK(sg_istio_request_decode(arena, buf, n, &r));
	SG_CHECK(r.validity_seconds == 3600);
	SG_CHECK(r.impersonated_identity && strcmp(r.impersonated_identity, "spiffe://td/ns/a/sa/b") == 0);
	SG_CHECK(r.cert_signer && strcmp(r.cert_signer, "signer-\xc3\xa9") == 0);
	free(buf);
}

static void t_unknown_fields_skipped(void)
{
	wbuf w = request_with(NULL);
	w_str(&w, 2, "ignored");	  /* the unused field 2 */
	w_key(&w, 7, 5);		  /* fixed32 */
	w_raw(&w, "\1\2\3\4", 4);
	w_key(&w, 99, 1);		  /* fixed64 */
	w_raw(&w, "\1\2\3\4\5\6\7\x8", 8);
	w_key(&w, 536870911, 0);	  /* the largest field number */
	w_varint(&w, 12345);
	w_key(&w, 3, 0);
	w_varint(&w, 60);
	sg_istio_request r;
	SG_CHECK_OK(decode(&w, &r));
	SG_CHECK(r.validity_seconds == 60 && strcmp(r.csr, CSR) == 0);
	w_free(&w);
}

static void t_duplicates_last_wins(void)
{
	wbuf v1 = {0}, v2 = {0}, e = {0}, md = {0};
	w_str(&v1, 3, "first");
	w_str(&v2, 3, "second");
	wbuf s1 = struct_entry("CertSigner", &v1), s2 = struct_entry("CertSigner", &v2);
	w_raw(&md, s1.p, s1.n);
	w_raw(&md, s2.p, s2.n);
	wbuf w = request_with(&md);
	sg_istio_request r;
	SG_CHECK_OK(decode(&w, &r));
	SG_CHECK(r.cert_signer && strcmp(r.cert_signer, "second") == 0);
	w_free(&v1), w_free(&v2), w_free(&e), w_free(&md), w_free(&s1), w_free(&s2), w_free(&w);
}

static void t_arena_reuse(void)
{
	/* Many entries (protobuf-c allocates several objects per entry), decoded
	 * again and again from one arena. */
	wbuf md = {0}, v = {0};
	w_str(&v, 3, "value");
	for (int i = 0; i < 200; i++) { /* 4 fields each, below the cap */
		char key[16];
		snprintf(key, sizeof(key), "k%d", i);
		wbuf s = struct_entry(key, &v);
		w_raw(&md, s.p, s.n);
		w_free(&s);
	}
	wbuf w = request_with(&md);
	for (int i = 0; i < 50; i++) {
		sg_istio_request r;
		SG_CHECK_OK(decode(&w, &r));
	}
	w_free(&md), w_free(&v), w_free(&w);
}

/* ---- hostile input ------------------------------------------------------ */

static void t_oversize(void)
{
	uint8_t *big = calloc(1, SG_ISTIO_MAX_MESSAGE + 1);
	sg_istio_request r;
	SG_CHECK_RC(sg_istio_request_decode(arena, big, SG_ISTIO_MAX_MESSAGE + 1, &r), SG_EINVAL);
	SG_CHECK_MSG("request of 65537 bytes exceeds 65536");
	free(big);

	wbuf w = {0};
	char *csr = malloc(SG_ISTIO_MAX_CSR + 2);
	memset(csr, 'A', SG_ISTIO_MAX_CSR + 1);
	csr[SG_ISTIO_MAX_CSR + 1] = '\0';
	w_str(&w, 1, csr);
	refused(&w, "csr of 16385 bytes exceeds 16384");
	w_free(&w);
	free(csr);
}

static void t_truncated(void)
{
	wbuf w = {0};
	w_str(&w, 1, CSR);
	w_raw(&w, agent_tail, sizeof(agent_tail) - 1);
	refused(&w, "request: field 4 at offset 98 claims 18 bytes, 17 left");
	w_free(&w);

	uint8_t cut_varint[] = {0x0a, 0x02, 'a', 'b', 0x18, 0x80};
	wbuf c = {cut_varint, sizeof(cut_varint), 0};
	refused(&c, "truncated varint");

	uint8_t cut_key[] = {0x0a, 0x02, 'a', 'b', 0x80};
	wbuf k = {cut_key, sizeof(cut_key), 0};
	refused(&k, "truncated varint");

	uint8_t cut_fixed[] = {0x0a, 0x02, 'a', 'b', 0x39, 1, 2, 3};
	wbuf f = {cut_fixed, sizeof(cut_fixed), 0};
	refused(&f, "truncated 64-bit");

	sg_istio_request r;
	SG_CHECK_RC(sg_istio_request_decode(arena, NULL, 0, &r), SG_EINVAL);
	SG_CHECK_MSG("no csr");
}

static void t_varint_overflow(void)
{
	uint8_t ten[] = {0x0a, 0x01, 'a', 0x18, 0xff, 0xff, 0xff, 0xff, 0xff,
			 0xff, 0xff, 0xff, 0xff, 0x02};
	wbuf w = {ten, sizeof(ten), 0};
	refused(&w, "overflows 64 bits");
	uint8_t eleven[] = {0x0a, 0x01, 'a', 0x18, 0xff, 0xff, 0xff, 0xff, 0xff,
			    0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
	wbuf e = {eleven, sizeof(eleven), 0};
	refused(&e, "overflows 64 bits");
	/* a length that does not fit in size_t arithmetic */
	uint8_t huge_len[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
	wbuf h = {huge_len, sizeof(huge_len), 0};
	refused(&h, "claims 18446744073709551615 bytes");
}

static void t_length_beyond_end(void)
{
	uint8_t b[] = {0x0a, 0x05, 'a'};
	wbuf w = {b, sizeof(b), 0};
	refused(&w, "claims 5 bytes, 1 left");
	uint8_t m[] = {0x0a, 0x01, 'a', 0x22, 0x04, 0x0a, 0x09, 0x0a, 0x00};
	wbuf x = {m, sizeof(m), 0};
	refused(&x, "metadata Struct: field 1 at offset 6 claims 9 bytes, 2 left");
}

/* Value{list_value: ListValue{values: Value{...}}} nested depth times. */
static wbuf deep_lists(int depth)
{
	wbuf inner = {0};
	for (int i = 0; i < depth; i++) {
		wbuf list = {0}, value = {0};
		w_len(&list, 1, inner.p, inner.n);
		w_len(&value, 6, list.p, list.n);
		w_free(&inner);
		w_free(&list);
		inner = value;
	}
	wbuf md = struct_entry("k", &inner);
	w_free(&inner);
	return md;
}

/* Struct{"a": Value{struct_value: Struct{...}}} nested depth times. */
static wbuf deep_structs(int depth)
{
	wbuf s = {0};
	for (int i = 0; i < depth; i++) {
		wbuf value = {0};
		w_len(&value, 5, s.p, s.n);
		wbuf outer = struct_entry("a", &value);
		w_free(&value);
		w_free(&s);
		s = outer;
	}
	return s;
}

static void t_deep_nesting(void)
{
	/* 10,000 levels do not fit in 64 KiB and are refused unread... */
	wbuf md = deep_lists(10000);
	wbuf w = request_with(&md);
	refused(&w, "exceeds 65536");
	w_free(&md), w_free(&w);

	/* ...8,000 levels of ListValue do: refused by the scan before protobuf-c
	 * (whose recursion would otherwise run that deep). */
	md = deep_lists(8000);
	w = request_with(&md);
	SG_CHECK(w.n <= SG_ISTIO_MAX_MESSAGE);
	refused(&w, "metadata nests deeper than 8");
	w_free(&md), w_free(&w);

	md = deep_structs(4000);
	w = request_with(&md);
	SG_CHECK(w.n <= SG_ISTIO_MAX_MESSAGE);
	refused(&w, "metadata nests deeper than 8");
	w_free(&md), w_free(&w);

	/* the limit itself: metadata Struct (1) + 7 levels = 8 is fine, 9 not */
	md = deep_structs(7);
	wbuf ok = request_with(&md);
	sg_istio_request r;
	SG_CHECK_OK(decode(&ok, &r));
	w_free(&md), w_free(&ok);
	md = deep_structs(8);
	w = request_with(&md);
	refused(&w, "deeper than 8");
	w_free(&md), w_free(&w);
}

static void t_field_count(void)
{
	wbuf w = request_with(NULL);
	for (int i = 0; i < 2000; i++) {
		w_key(&w, 5, 0);
		w_varint(&w, 0);
	}
	refused(&w, "more than 1024 fields");
	w_free(&w);

	/* many empty metadata entries count too */
	wbuf md = {0};
	for (int i = 0; i < 1500; i++)
		w_len(&md, 1, "", 0);
	w = request_with(&md);
	refused(&w, "more than 1024 fields");
	w_free(&md), w_free(&w);
}

static void t_wire_types(void)
{
	uint8_t csr_varint[] = {0x08, 0x01};
	wbuf a = {csr_varint, sizeof(csr_varint), 0};
	refused(&a, "field 1 (csr) has wire type varint, want length-delimited");

	uint8_t validity_len[] = {0x0a, 0x01, 'a', 0x1a, 0x00};
	wbuf b = {validity_len, sizeof(validity_len), 0};
	refused(&b, "field 3 (validity_duration) has wire type length-delimited, want varint");

	uint8_t md_fixed[] = {0x0a, 0x01, 'a', 0x25, 0, 0, 0, 0};
	wbuf c = {md_fixed, sizeof(md_fixed), 0};
	refused(&c, "field 4 (metadata)");

	uint8_t group[] = {0x0a, 0x01, 'a', 0x2b, 0x2c};
	wbuf d = {group, sizeof(group), 0};
	refused(&d, "unsupported wire type start-group");

	uint8_t wt7[] = {0x0a, 0x01, 'a', 0x2f};
	wbuf e = {wt7, sizeof(wt7), 0};
	refused(&e, "unsupported wire type invalid (7)");

	uint8_t field0[] = {0x02, 0x00};
	wbuf f = {field0, sizeof(field0), 0};
	refused(&f, "invalid field number 0");

	wbuf v = {0};
	w_key(&v, 2, 2); /* number_value as bytes */
	w_varint(&v, 0);
	wbuf md = struct_entry("x", &v);
	wbuf w = request_with(&md);
	refused(&w, "field 2 (number_value) has wire type length-delimited, want 64-bit");
	w_free(&v), w_free(&md), w_free(&w);
}

static void t_strings(void)
{
	wbuf w = {0};
	w_str(&w, 1, "-----BEGIN\x80");
	refused(&w, "csr: byte 0x80 at offset 12 is not printable ASCII");
	w_free(&w);

	w_len(&w, 1, "ab\0cd", 5);
	refused(&w, "csr: byte 0x00");
	w_free(&w);

	const char *bad[] = {"\xff", "\xc0\x80" /* overlong NUL */, "\xed\xa0\x80" /* surrogate */,
			     "\xf4\x90\x80\x80" /* > U+10FFFF */, "\xe2\x82" /* truncated */, "a\0b"};
	const size_t badlen[] = {1, 2, 3, 4, 2, 3};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wbuf v = {0};
		w_len(&v, 3, bad[i], badlen[i]);
		wbuf md = struct_entry("CertSigner", &v);
		wbuf r = request_with(&md);
		refused(&r, "metadata string_value");
		w_free(&v), w_free(&md), w_free(&r);

		wbuf v2 = {0};
		w_str(&v2, 3, "ok");
		wbuf e = {0}, s = {0};
		w_len(&e, 1, bad[i], badlen[i]);
		w_len(&e, 2, v2.p, v2.n);
		w_len(&s, 1, e.p, e.n);
		r = request_with(&s);
		refused(&r, "metadata key");
		w_free(&v2), w_free(&e), w_free(&s), w_free(&r);
	}

	/* valid multi-byte UTF-8 everywhere is fine */
	wbuf v = {0};
	w_str(&v, 3, "\xf0\x9f\x94\x91 \xe2\x82\xac \xc3\xa9");
	wbuf md = struct_entry("\xc3\xa9t\xc3\xa9", &v);
	wbuf r = request_with(&md);
	sg_istio_request out;
	SG_CHECK_OK(decode(&r, &out));
	w_free(&v), w_free(&md), w_free(&r);
}

static void t_metadata_types(void)
{
	static const struct {
		const char *key;
		uint8_t value[12];
		size_t len;
		const char *msg;
	} cases[] = {
		{"ImpersonatedIdentity", {0x11, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, 9,
		 "metadata ImpersonatedIdentity is number, want a string"},
		{"ImpersonatedIdentity", {0x20, 0x01}, 2, "metadata ImpersonatedIdentity is bool"},
		{"ImpersonatedIdentity", {0x08, 0x00}, 2, "metadata ImpersonatedIdentity is null"},
		{"CertSigner", {0x2a, 0x00}, 2, "metadata CertSigner is struct"},
		{"CertSigner", {0x32, 0x00}, 2, "metadata CertSigner is list"},
		{"CertSigner", {0}, 0, "metadata CertSigner is unset"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		wbuf v = {0};
		w_raw(&v, cases[i].value, cases[i].len);
		wbuf md = struct_entry(cases[i].key, &v);
		wbuf w = request_with(&md);
		refused(&w, cases[i].msg);
		w_free(&v), w_free(&md), w_free(&w);
	}
	/* an entry without a value at all */
	wbuf e = {0}, s = {0};
	w_str(&e, 1, "ImpersonatedIdentity");
	w_len(&s, 1, e.p, e.n);
	wbuf w = request_with(&s);
	refused(&w, "metadata ImpersonatedIdentity is unset");
	w_free(&e), w_free(&s), w_free(&w);

	/* other keys may hold anything */
	wbuf v = {0};
	w_raw(&v, "\x11\0\0\0\0\0\0\xf0\x3f", 9);
	wbuf md = struct_entry("WorkloadIP", &v);
	w = request_with(&md);
	sg_istio_request r;
	SG_CHECK_OK(decode(&w, &r));
	w_free(&v), w_free(&md), w_free(&w);
}

static void t_error_quotes_no_bytes(void)
{
	/* a hostile key must not be echoed in the detail */
	wbuf v = {0};
	w_raw(&v, "\x11\0\0\0\0\0\0\xf0\x3f", 9);
	wbuf md = struct_entry("CertSigner", &v);
	wbuf w = request_with(&md);
	w_str(&w, 2, "SECRET-TOKEN-VALUE");
	refused(&w, "CertSigner");
	SG_CHECK(!strstr(sg_error_last()->msg, "SECRET"));
	w_free(&v), w_free(&md), w_free(&w);
}

static void setup(void)
{
	SG_CHECK_OK(sg_istio_arena_new(&arena));
}

static void teardown(void)
{
	sg_istio_arena_free(arena);
	arena = NULL;
}

SG_TEST_MAIN(SG_TEST(setup), SG_TEST(t_golden_agent), SG_TEST(t_golden_ztunnel),
	     SG_TEST(t_plain_request), SG_TEST(t_response), SG_TEST(t_cross_protobuf_c),
	     SG_TEST(t_unknown_fields_skipped), SG_TEST(t_duplicates_last_wins),
	     SG_TEST(t_arena_reuse), SG_TEST(t_oversize), SG_TEST(t_truncated),
	     SG_TEST(t_varint_overflow), SG_TEST(t_length_beyond_end), SG_TEST(t_deep_nesting),
	     SG_TEST(t_field_count), SG_TEST(t_wire_types), SG_TEST(t_strings),
	     SG_TEST(t_metadata_types), SG_TEST(t_error_quotes_no_bytes), SG_TEST(teardown))
