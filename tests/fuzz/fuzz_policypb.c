/*
 * Fuzz target for the external policy server's response decoder
 * (proto/sg_policypb.c: sg_policypb_response_decode) over arbitrary bytes,
 * as a policy server we do not run could send them.
 *
 * Oracles:
 *   - a refusal leaves result ERROR and an empty reason (nothing approves
 *     by accident);
 *   - fail closed on an unset verdict: an empty input is always refused,
 *     and what decodes is APPROVED, DENIED or ERROR — never
 *     RESULT_UNSPECIFIED, the proto3 default an absent field reads as;
 *   - nothing holding field 1 (the design's result, APPROVED = 0)
 *     decodes: protobuf-c keeps the reserved field among its unknown
 *     fields, and none of a message we accepted may have number 1;
 *   - the reason is NUL-terminated at its reported length and within
 *     SG_POLICYPB_MAX_REASON;
 *   - another implementation agrees: protobuf-c's generated unpacker
 *     accepts every message we accept and reads the same verdict and reason
 *     (so the verdict was on the wire, not defaulted); it accepts more —
 *     unknown enum values, an unset verdict, any bytes in strings — which is
 *     why it is not the decoder;
 *   - a round trip through sg_policypb_response_encode decodes to the same.
 */
#include "policy.pb-c.h"
#include "sg_policypb.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void cross_check(const uint8_t *data, size_t size, const sg_policypb_response *r)
{
	Signet__Policy__V1__PolicyResponse *m = signet__policy__v1__policy_response__unpack(NULL, size, data);
	check(m != NULL);
	/* the verdict was on the wire, not protobuf's default */
	check(m->verdict != SIGNET__POLICY__V1__POLICY_RESPONSE__RESULT__RESULT_UNSPECIFIED);
	check((int)m->verdict == (int)r->result);
	for (unsigned i = 0; i < m->base.n_unknown_fields; i++)
		check(m->base.unknown_fields[i].tag != 1);
	const char *reason = m->reason ? m->reason : "";
	check(strlen(reason) == r->reason_len && memcmp(reason, r->reason, r->reason_len) == 0);
	signet__policy__v1__policy_response__free_unpacked(m, NULL);
}

static void round_trip(const sg_policypb_response *r)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	check(sg_policypb_response_encode(r->result, r->reason, &buf, &len) == 0);
	sg_policypb_response again;
	check(sg_policypb_response_decode(buf, len, &again) == 0);
	check(again.result == r->result && again.reason_len == r->reason_len &&
	      memcmp(again.reason, r->reason, r->reason_len + 1) == 0);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_policypb_response r;
	if (sg_policypb_response_decode(data, size, &r) != 0) {
		check(r.result == SG_POLICYPB_ERROR && r.reason_len == 0 && r.reason[0] == '\0');
		return 0;
	}
	check(size > 0);
	check(r.result == SG_POLICYPB_APPROVED || r.result == SG_POLICYPB_DENIED || r.result == SG_POLICYPB_ERROR);
	check(r.reason_len <= SG_POLICYPB_MAX_REASON && strlen(r.reason) == r.reason_len);
	cross_check(data, size, &r);
	round_trip(&r);
	return 0;
}
