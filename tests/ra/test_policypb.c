/*
 * Tests for proto/sg_policypb.c, the external policy server messages:
 * a PolicyRequest encoded by us and read back by protobuf-c's generated
 * unpacker (every field, maps sorted, deterministic bytes), the encoder's
 * refusals, PolicyResponses packed by protobuf-c and by us and decoded by
 * us, and hostile responses (truncated, huge reason, unknown or negative
 * enum, wrong wire types, groups, too many fields), each refused with a
 * specific SG_EINVAL and the result left at ERROR. Fail closed on an unset
 * verdict: an empty response, or one whose verdict is absent or 0
 * (RESULT_UNSPECIFIED), is refused — never an approval; and so is every
 * answer of a server built to the design's numbering (APPROVED = 0 in
 * field 1), which policy.proto's field 3 keeps from being misread.
 *
 * Next to test_istio_proto.c (the other protobuf adapter's tests). The
 * same messages against Python's protobuf, over gRPC, are in
 * tests/daemon/test_policyserver.c.
 */
#include "sg_policypb.h"

#include "policy.pb-c.h"
#include "pb_wire.h"
#include "sg_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- hostile inputs: pb_wire.h writes them ------------------------------ */

/* ---- requests ----------------------------------------------------------- */

static const char CSR[] = "-----BEGIN CERTIFICATE REQUEST-----\nMIIBAzCBqwIBADAAMFkw\n"
                          "-----END CERTIFICATE REQUEST-----\n";

static const sg_policypb_kv LABELS[] = {{"tier", "web"}, {"app", "shop"}, {"a.b/c", ""}};
static const sg_policypb_kv ANNOTATIONS[] = {{"note", "h\xc3\xa9llo \xe2\x9c\x93"}};
static const char *const USAGES[] = {"digital signature", "server auth"};
static const char *const GROUPS[] = {"system:authenticated", "system:serviceaccounts"};
static const char *const SCOPES[] = {"read", "write"};
static const sg_policypb_extra EXTRA[] = {{"scopes", SCOPES, 2}, {"empty", NULL, 0}};
static const sg_policypb_kv VALUES[] = {{"servers", "opa, audit"}, {"team", "payments"}};

static sg_policypb_request full_request(void)
{
	return (sg_policypb_request){
	    .name = "cr-1",
	    .name_space = "shop",
	    .uid = "3f1c9a52-8f7e-4c55-9c55-1d2e3f4a5b6c",
	    .labels = LABELS,
	    .nlabels = 3,
	    .annotations = ANNOTATIONS,
	    .nannotations = 1,
	    .csr = (const uint8_t *)CSR,
	    .csr_len = strlen(CSR),
	    .issuer_name = "mesh-ca",
	    .issuer_kind = "ClusterIssuer",
	    .issuer_group = "cert-manager.io",
	    .is_ca = true,
	    .duration = "2160h0m0s",
	    .usages = USAGES,
	    .nusages = 2,
	    .username = "system:serviceaccount:shop:web",
	    .user_uid = "u-42",
	    .groups = GROUPS,
	    .ngroups = 2,
	    .extra = EXTRA,
	    .nextra = 2,
	    .policy_name = "shop-policy",
	    .plugin_values = VALUES,
	    .nplugin_values = 2,
	};
}

static void t_request_round_trip(void)
{
	sg_policypb_request r = full_request();
	uint8_t *buf = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_policypb_request_encode(&r, &buf, &len));
	Signet__Policy__V1__PolicyRequest *m = signet__policy__v1__policy_request__unpack(NULL, len, buf);
	SG_CHECK(m != NULL);
	if (!m) {
		free(buf);
		return;
	}
	SG_CHECK(m->metadata && strcmp(m->metadata->name, "cr-1") == 0);
	SG_CHECK(strcmp(m->metadata->namespace_, "shop") == 0);
	SG_CHECK(strcmp(m->metadata->uid, r.uid) == 0);
	/* sorted by key: "a.b/c" < "app" < "tier" */
	SG_CHECK(m->metadata->n_labels == 3);
	SG_CHECK(strcmp(m->metadata->labels[0]->key, "a.b/c") == 0 && strcmp(m->metadata->labels[0]->value, "") == 0);
	SG_CHECK(strcmp(m->metadata->labels[1]->key, "app") == 0 && strcmp(m->metadata->labels[1]->value, "shop") == 0);
	SG_CHECK(strcmp(m->metadata->labels[2]->key, "tier") == 0 && strcmp(m->metadata->labels[2]->value, "web") == 0);
	SG_CHECK(m->metadata->n_annotations == 1 &&
	         strcmp(m->metadata->annotations[0]->value, ANNOTATIONS[0].value) == 0);
	SG_CHECK(m->request.len == strlen(CSR) && memcmp(m->request.data, CSR, strlen(CSR)) == 0);
	SG_CHECK(m->issuer_ref && strcmp(m->issuer_ref->name, "mesh-ca") == 0 &&
	         strcmp(m->issuer_ref->kind, "ClusterIssuer") == 0 &&
	         strcmp(m->issuer_ref->group, "cert-manager.io") == 0);
	SG_CHECK(m->is_ca);
	SG_CHECK(strcmp(m->duration, "2160h0m0s") == 0);
	SG_CHECK(m->n_usages == 2 && strcmp(m->usages[0], "digital signature") == 0 &&
	         strcmp(m->usages[1], "server auth") == 0);
	SG_CHECK(m->user_info && strcmp(m->user_info->username, r.username) == 0 &&
	         strcmp(m->user_info->uid, "u-42") == 0);
	SG_CHECK(m->user_info->n_groups == 2 && strcmp(m->user_info->groups[1], "system:serviceaccounts") == 0);
	SG_CHECK(m->user_info->n_extra == 2);
	SG_CHECK(strcmp(m->user_info->extra[0]->key, "empty") == 0 && m->user_info->extra[0]->value &&
	         m->user_info->extra[0]->value->n_values == 0);
	SG_CHECK(strcmp(m->user_info->extra[1]->key, "scopes") == 0 && m->user_info->extra[1]->value &&
	         m->user_info->extra[1]->value->n_values == 2 &&
	         strcmp(m->user_info->extra[1]->value->values[1], "write") == 0);
	SG_CHECK(strcmp(m->policy_name, "shop-policy") == 0);
	SG_CHECK(m->n_plugin_values == 2 && strcmp(m->plugin_values[0]->key, "servers") == 0 &&
	         strcmp(m->plugin_values[0]->value, "opa, audit") == 0 &&
	         strcmp(m->plugin_values[1]->key, "team") == 0);
	signet__policy__v1__policy_request__free_unpacked(m, NULL);

	/* Deterministic: the same maps in another order give the same bytes. */
	sg_policypb_kv rev[] = {LABELS[2], LABELS[0], LABELS[1]};
	r.labels = rev;
	uint8_t *buf2 = NULL;
	size_t len2 = 0;
	SG_CHECK_OK(sg_policypb_request_encode(&r, &buf2, &len2));
	SG_CHECK(len2 == len && memcmp(buf, buf2, len) == 0);
	free(buf);
	free(buf2);
}

static void t_request_empty(void)
{
	/* Everything unset: an empty-valued request, all defaults. */
	sg_policypb_request r = {0};
	uint8_t *buf = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_policypb_request_encode(&r, &buf, &len));
	Signet__Policy__V1__PolicyRequest *m = signet__policy__v1__policy_request__unpack(NULL, len, buf);
	SG_CHECK(m && m->request.len == 0 && !m->is_ca && strcmp(m->duration, "") == 0 &&
	         strcmp(m->policy_name, "") == 0 && m->n_usages == 0);
	signet__policy__v1__policy_request__free_unpacked(m, NULL);
	free(buf);
}

static void encode_refused(const sg_policypb_request *r, const char *msg)
{
	uint8_t *buf = (uint8_t *)"x";
	size_t len = 7;
	SG_CHECK_RC(sg_policypb_request_encode(r, &buf, &len), SG_EINVAL);
	SG_CHECK_MSG(msg);
	SG_CHECK(buf == NULL && len == 0);
}

static void t_request_refused(void)
{
	sg_policypb_request r = full_request();
	r.name = "bad \xc3\x28";
	encode_refused(&r, "metadata.name[0]: not UTF-8");

	r = full_request();
	r.duration = "\xed\xa0\x80"; /* a surrogate */
	encode_refused(&r, "duration[0]: not UTF-8");

	r = full_request();
	const char *const bad_usages[] = {"ok", "\xff"};
	r.usages = bad_usages;
	encode_refused(&r, "usages[1]: not UTF-8");

	r = full_request();
	sg_policypb_kv dup[] = {{"a", "1"}, {"b", "2"}, {"a", "3"}};
	r.labels = dup;
	r.nlabels = 3;
	encode_refused(&r, "metadata.labels: entries 0 and 2 have the same key");

	r = full_request();
	sg_policypb_extra xdup[] = {{"k", NULL, 0}, {"k", NULL, 0}};
	r.extra = xdup;
	encode_refused(&r, "user_info.extra: entries 0 and 1 have the same key");

	r = full_request();
	r.nusages = SG_POLICYPB_MAX_ITEMS + 1;
	encode_refused(&r, "usages: 4097 entries");

	r = full_request();
	r.ngroups = 3;
	r.groups = NULL;
	encode_refused(&r, "no array");

	r = full_request();
	r.csr_len = SG_POLICYPB_MAX_CSR + 1;
	encode_refused(&r, "request: 65537 bytes");

	r = full_request();
	char *big = malloc(SG_POLICYPB_MAX_STRING + 2);
	memset(big, 'a', SG_POLICYPB_MAX_STRING + 1);
	big[SG_POLICYPB_MAX_STRING + 1] = '\0';
	r.uid = big;
	encode_refused(&r, "metadata.uid[0]: longer than");

	/* Within each bound, but more than SG_POLICYPB_MAX_REQUEST in all. */
	big[SG_POLICYPB_MAX_STRING] = '\0';
	r = full_request();
	sg_policypb_kv *many = calloc(16, sizeof(*many));
	char keys[16][4];
	for (int i = 0; i < 16; i++) {
		keys[i][0] = (char)('a' + i);
		keys[i][1] = '\0';
		many[i] = (sg_policypb_kv){keys[i], big};
	}
	r.annotations = many;
	r.nannotations = 16;
	encode_refused(&r, "bytes encoded, at most");
	free(many);
	free(big);
}

/* ---- responses ---------------------------------------------------------- */

static int decode(const wbuf *w, sg_policypb_response *r)
{
	return sg_policypb_response_decode(w->p, w->n, r);
}

static void refused(const wbuf *w, const char *msg)
{
	sg_policypb_response r;
	SG_CHECK_RC(decode(w, &r), SG_EINVAL);
	SG_CHECK_MSG(msg);
	SG_CHECK(r.result == SG_POLICYPB_ERROR && r.reason_len == 0 && r.reason[0] == '\0');
}

/* protobuf-c packs; we decode. */
static void t_response_from_protobuf_c(void)
{
	static const struct {
		Signet__Policy__V1__PolicyResponse__Result result;
		const char *reason;
		sg_policypb_result want;
	} cases[] = {
	    {SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__APPROVED, "", SG_POLICYPB_APPROVED},
	    {SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__APPROVED, "ok by opa", SG_POLICYPB_APPROVED},
	    {SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__DENIED, "spiffe ID \xe2\x89\xa0 user", SG_POLICYPB_DENIED},
	    {SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__ERROR, "backend down", SG_POLICYPB_ERROR},
	    {SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__ERROR, "", SG_POLICYPB_ERROR},
	};
	/* the generated enum has the numbers our decoder reads */
	SG_CHECK(SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__RESULT_UNSPECIFIED == (int)SG_POLICYPB_UNSPECIFIED &&
	         SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__APPROVED == (int)SG_POLICYPB_APPROVED &&
	         SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__DENIED == (int)SG_POLICYPB_DENIED &&
	         SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__ERROR == (int)SG_POLICYPB_ERROR);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		Signet__Policy__V1__PolicyResponse m;
		signet__policy__v1__policy_response__init(&m);
		m.verdict = cases[i].result;
		m.reason = (char *)cases[i].reason;
		uint8_t buf[256];
		size_t n = signet__policy__v1__policy_response__pack(&m, buf);
		sg_policypb_response r;
		SG_CHECK_OK(sg_policypb_response_decode(buf, n, &r));
		SG_CHECK(r.result == cases[i].want);
		SG_CHECK(r.reason_len == strlen(cases[i].reason) && strcmp(r.reason, cases[i].reason) == 0);

		/* and our encoder writes the same bytes protobuf-c does */
		uint8_t *ours = NULL;
		size_t ours_len = 0;
		SG_CHECK_OK(sg_policypb_response_encode(cases[i].want, cases[i].reason, &ours, &ours_len));
		SG_CHECK(ours_len == n && memcmp(ours, buf, n) == 0);
		free(ours);
	}
	/* Python's PolicyResponse(verdict=DENIED, reason="no").SerializeToString() */
	static const uint8_t py[] = {0x12, 0x02, 'n', 'o', 0x18, 0x02};
	sg_policypb_response r;
	SG_CHECK_OK(sg_policypb_response_decode(py, sizeof(py), &r));
	SG_CHECK(r.result == SG_POLICYPB_DENIED && strcmp(r.reason, "no") == 0);
	SG_CHECK(strcmp(sg_policypb_result_name(r.result), "DENIED") == 0);
	SG_CHECK(strcmp(sg_policypb_result_name(SG_POLICYPB_UNSPECIFIED), "RESULT_UNSPECIFIED") == 0);
	SG_CHECK(strcmp(sg_policypb_result_name((sg_policypb_result)9), "UNKNOWN") == 0);

	/* protobuf-c with the result left unset, as a handler that forgot it
	 * would send: the reason alone, or nothing at all. */
	Signet__Policy__V1__PolicyResponse m;
	signet__policy__v1__policy_response__init(&m);
	SG_CHECK(m.verdict == SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__RESULT_UNSPECIFIED);
	uint8_t buf[64];
	size_t n = signet__policy__v1__policy_response__pack(&m, buf);
	SG_CHECK(n == 0);
	SG_CHECK_RC(sg_policypb_response_decode(buf, n, &r), SG_EINVAL);
	SG_CHECK(r.result == SG_POLICYPB_ERROR);
	m.reason = (char *)"looks fine";
	n = signet__policy__v1__policy_response__pack(&m, buf);
	SG_CHECK_RC(sg_policypb_response_decode(buf, n, &r), SG_EINVAL);
	SG_CHECK_MSG("no verdict (RESULT_UNSPECIFIED): not an answer");
	SG_CHECK(r.result == SG_POLICYPB_ERROR && r.reason_len == 0);
}

/* An unset verdict is not an answer (policy.proto: why APPROVED is not 0). */
static void t_response_unset(void)
{
	sg_policypb_response r;
	/* A zeroed response is not an approval either. */
	memset(&r, 0, sizeof(r));
	SG_CHECK(r.result == SG_POLICYPB_UNSPECIFIED && r.result != SG_POLICYPB_APPROVED);

	/* An empty message: proto3 reads verdict 0, RESULT_UNSPECIFIED. Under
	 * the design's numbering (APPROVED = 0) this approved. */
	memset(&r, 0, sizeof(r));
	SG_CHECK_RC(sg_policypb_response_decode(NULL, 0, &r), SG_EINVAL);
	SG_CHECK_MSG("policy response: no verdict (RESULT_UNSPECIFIED, an empty message): not an answer");
	SG_CHECK(r.result != SG_POLICYPB_APPROVED);
	SG_CHECK(r.result == SG_POLICYPB_ERROR && r.reason_len == 0);
	static const uint8_t none[1] = {0};
	SG_CHECK_RC(sg_policypb_response_decode(none, 0, &r), SG_EINVAL);
	SG_CHECK(r.result == SG_POLICYPB_ERROR);

	wbuf w = {0};
	/* a reason, no verdict */
	w_len(&w, 2, "approved!", 9);
	refused(&w, "no verdict (RESULT_UNSPECIFIED): not an answer");
	w_free(&w);
	/* only unknown fields */
	w_key(&w, 4, 0);
	w_varint(&w, 1);
	refused(&w, "no verdict (RESULT_UNSPECIFIED)");
	w_free(&w);
	/* verdict 0 written out */
	w_key(&w, 3, 0);
	w_varint(&w, 0);
	refused(&w, "no verdict (RESULT_UNSPECIFIED)");
	w_free(&w);
	/* ... last: it wins over an APPROVED before it */
	w_key(&w, 3, 0);
	w_varint(&w, SG_POLICYPB_APPROVED);
	w_key(&w, 3, 0);
	w_varint(&w, 0);
	refused(&w, "no verdict (RESULT_UNSPECIFIED)");
	w_free(&w);
	/* ... first: the answer after it counts, as for any repeated field */
	w_key(&w, 3, 0);
	w_varint(&w, 0);
	w_key(&w, 3, 0);
	w_varint(&w, SG_POLICYPB_DENIED);
	SG_CHECK_OK(decode(&w, &r));
	SG_CHECK(r.result == SG_POLICYPB_DENIED);
	w_free(&w);
}

/* Every answer of a server built to the design's numbering
 * (`enum Result { APPROVED = 0; DENIED = 1; ERROR = 2; } Result result =
 * 1; string reason = 2;`), as a proto3 serializer writes it, is refused:
 * none is read as an approval. */
static void t_response_design_numbering(void)
{
	static const char *const field1 = "field 1 is the design's result (APPROVED = 0)";
	wbuf w = {0};
	/* design APPROVED: 0 is off the wire, so nothing or the reason alone */
	refused(&w, "no verdict (RESULT_UNSPECIFIED, an empty message)");
	w_len(&w, 2, "fine by me", 10);
	refused(&w, "no verdict (RESULT_UNSPECIFIED): not an answer");
	w_free(&w);
	/* design DENIED = 1: with a shared field it would read as APPROVED */
	w_key(&w, 1, 0);
	w_varint(&w, 1);
	w_len(&w, 2, "no", 2);
	refused(&w, field1);
	w_free(&w);
	/* design ERROR = 2 */
	w_key(&w, 1, 0);
	w_varint(&w, 2);
	refused(&w, field1);
	w_free(&w);
	/* design APPROVED written out by a serializer that keeps defaults */
	w_key(&w, 1, 0);
	w_varint(&w, 0);
	refused(&w, field1);
	w_free(&w);
	/* field 1 beside a valid verdict, before or after it: still refused
	 * (a server that speaks both is not one to trust with either) */
	w_key(&w, 3, 0);
	w_varint(&w, SG_POLICYPB_APPROVED);
	w_key(&w, 1, 0);
	w_varint(&w, 1);
	refused(&w, field1);
	w_free(&w);
	w_key(&w, 1, 0);
	w_varint(&w, 1);
	w_key(&w, 3, 0);
	w_varint(&w, SG_POLICYPB_APPROVED);
	refused(&w, field1);
	w_free(&w);
	/* whatever its wire type */
	w_len(&w, 1, "\x01", 1);
	refused(&w, field1);
	w_free(&w);
}

static void t_response_proto3(void)
{
	sg_policypb_response r;
	/* The last occurrence wins; unknown fields of every wire type skipped. */
	wbuf w = {0};
	w_key(&w, 3, 0);
	w_varint(&w, 2);
	w_len(&w, 2, "first", 5);
	w_key(&w, 6, 0);
	w_varint(&w, 123456789);
	w_key(&w, 4, 1);
	w_raw(&w, "\0\0\0\0\0\0\0\0", 8);
	w_key(&w, 5, 5);
	w_raw(&w, "\0\0\0\0", 4);
	w_len(&w, 1000, "xyz", 3);
	w_key(&w, 3, 0);
	w_varint(&w, 3);
	w_len(&w, 2, "second", 6);
	SG_CHECK_OK(decode(&w, &r));
	SG_CHECK(r.result == SG_POLICYPB_ERROR && strcmp(r.reason, "second") == 0);
	w_free(&w);

	/* exactly the reason limit */
	char reason[SG_POLICYPB_MAX_REASON];
	memset(reason, 'r', sizeof(reason));
	w_key(&w, 3, 0);
	w_varint(&w, 2);
	w_len(&w, 2, reason, sizeof(reason));
	SG_CHECK_OK(decode(&w, &r));
	SG_CHECK(r.result == SG_POLICYPB_DENIED && r.reason_len == SG_POLICYPB_MAX_REASON &&
	         strlen(r.reason) == SG_POLICYPB_MAX_REASON);
	w_free(&w);
}

static void t_response_hostile(void)
{
	wbuf w = {0};

	/* unknown enum values: never read as an answer */
	w_key(&w, 3, 0);
	w_varint(&w, 4);
	refused(&w, "verdict 4 is outside the enum");
	w_free(&w);
	w_key(&w, 3, 0);
	w_varint(&w, UINT64_MAX); /* int32 -1: ten bytes */
	refused(&w, "verdict -1 is outside the enum");
	w_free(&w);
	w_key(&w, 3, 0);
	w_varint(&w, 7);
	w_key(&w, 3, 0);
	w_varint(&w, 1); /* a later known value does not excuse an unknown one */
	refused(&w, "verdict 7");
	w_free(&w);

	/* truncation */
	w_key(&w, 3, 0);
	w_byte(&w, 0x81);
	refused(&w, "truncated varint");
	w_free(&w);
	w_key(&w, 2, 2);
	w_varint(&w, 10);
	w_raw(&w, "abc", 3);
	refused(&w, "claims 10 bytes, 3 left");
	w_free(&w);
	w_key(&w, 4, 1);
	w_raw(&w, "\0\0\0", 3);
	refused(&w, "truncated 64-bit value");
	w_free(&w);
	w_key(&w, 5, 5);
	w_raw(&w, "\0", 1);
	refused(&w, "truncated 32-bit value");
	w_free(&w);
	w_key(&w, 3, 0);
	for (int i = 0; i < 10; i++)
		w_byte(&w, 0xff);
	w_byte(&w, 0x01);
	refused(&w, "overflows 64 bits");
	w_free(&w);

	/* a huge reason */
	char reason[SG_POLICYPB_MAX_REASON + 1];
	memset(reason, 'r', sizeof(reason));
	w_key(&w, 3, 0);
	w_varint(&w, 1);
	w_len(&w, 2, reason, sizeof(reason));
	refused(&w, "reason of 1025 bytes, at most 1024");
	w_free(&w);
	/* a length that claims far more than there is */
	w_key(&w, 2, 2);
	w_varint(&w, UINT32_MAX);
	refused(&w, "claims 4294967295 bytes");
	w_free(&w);
	/* a length in more than 5 bytes, however small (found by the fuzzer:
	 * protobuf-c refuses it) */
	w_key(&w, 2, 2);
	w_varint(&w, (uint64_t)1 << 40);
	refused(&w, "field 2: length at offset 1 is longer than 5 bytes");
	w_free(&w);
	w_key(&w, 3, 0);
	w_varint(&w, 1);
	w_raw(&w, "\x12\x80\x80\x80\x80\x80\x00", 7); /* reason "", its length a 6-byte 0 */
	refused(&w, "field 2: length at offset 3 is longer than 5 bytes");
	w_free(&w);
	/* more than the message limit, refused unread */
	uint8_t *huge = calloc(SG_POLICYPB_MAX_RESPONSE + 1, 1);
	sg_policypb_response r;
	SG_CHECK_RC(sg_policypb_response_decode(huge, SG_POLICYPB_MAX_RESPONSE + 1, &r), SG_EINVAL);
	SG_CHECK_MSG("exceeds 16384");
	SG_CHECK(r.result == SG_POLICYPB_ERROR);
	free(huge);

	/* strings */
	w_len(&w, 2, "bad \xc3\x28", 6);
	refused(&w, "reason is not UTF-8 at byte 4");
	w_free(&w);
	w_len(&w, 2, "a\0b", 3);
	refused(&w, "reason holds a NUL at byte 1");
	w_free(&w);

	/* wire types */
	w_len(&w, 3, "\x01", 1);
	refused(&w, "field 3 (verdict) has wire type length-delimited, want varint");
	w_free(&w);
	w_key(&w, 2, 0);
	w_varint(&w, 5);
	refused(&w, "field 2 (reason) has wire type varint, want length-delimited");
	w_free(&w);
	w_key(&w, 6, 3);
	w_key(&w, 6, 4);
	refused(&w, "unsupported wire type start-group");
	w_free(&w);
	w_key(&w, 6, 7);
	refused(&w, "unsupported wire type invalid (7)");
	w_free(&w);
	w_key(&w, 0, 0);
	w_varint(&w, 1);
	refused(&w, "invalid field number 0");
	w_free(&w);
	w_raw(&w, "\x98\x80\x80\x80\x80\x00\x01", 7); /* verdict = 1 behind a 6-byte key */
	refused(&w, "field key at offset 0 is longer than 5 bytes");
	w_free(&w);
	w_varint(&w, (uint64_t)1 << 32); /* field number 2^29, beyond 2^29-1 */
	w_varint(&w, 1);
	refused(&w, "field key at offset 0 exceeds 32 bits");
	w_free(&w);

	/* too many fields, even unknown ones */
	for (int i = 0; i < SG_POLICYPB_MAX_FIELDS + 1; i++) {
		w_key(&w, 9, 0);
		w_varint(&w, 0);
	}
	refused(&w, "more than 64 fields");
	w_free(&w);
}

static void t_response_encode_refused(void)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	SG_CHECK_RC(sg_policypb_response_encode((sg_policypb_result)4, NULL, &buf, &len), SG_EINVAL);
	SG_CHECK(buf == NULL);
	/* an unset result is not something to send */
	SG_CHECK_RC(sg_policypb_response_encode(SG_POLICYPB_UNSPECIFIED, "ok", &buf, &len), SG_EINVAL);
	SG_CHECK_MSG("result 0 is not APPROVED, DENIED or ERROR");
	SG_CHECK(buf == NULL && len == 0);
	char reason[SG_POLICYPB_MAX_REASON + 2];
	memset(reason, 'x', sizeof(reason) - 1);
	reason[sizeof(reason) - 1] = '\0';
	SG_CHECK_RC(sg_policypb_response_encode(SG_POLICYPB_DENIED, reason, &buf, &len), SG_EINVAL);
	SG_CHECK_RC(sg_policypb_response_encode(SG_POLICYPB_DENIED, "\xc3", &buf, &len), SG_EINVAL);
	/* APPROVED is on the wire even without a reason: never an empty message */
	SG_CHECK_OK(sg_policypb_response_encode(SG_POLICYPB_APPROVED, NULL, &buf, &len));
	SG_CHECK(buf != NULL && len == 2 && buf[0] == 0x18 && buf[1] == 0x01);
	free(buf);
}

SG_TEST_MAIN(SG_TEST(t_request_round_trip), SG_TEST(t_request_empty), SG_TEST(t_request_refused),
             SG_TEST(t_response_from_protobuf_c), SG_TEST(t_response_unset), SG_TEST(t_response_design_numbering),
             SG_TEST(t_response_proto3), SG_TEST(t_response_hostile), SG_TEST(t_response_encode_refused))
