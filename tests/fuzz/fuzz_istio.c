/*
 * Fuzz target for the Istio request decoder (proto/sg_istio.c) over
 * arbitrary bytes: the bounded wire scan, then protobuf-c on what the scan
 * accepts. One arena serves every input and is reset each time, as signetd
 * would reuse per-request memory.
 *
 * Oracle: what decodes must make sense and survive a round trip. The csr
 * is printable ASCII of the reported length and within the limit; a request
 * re-encoded with sg_istio_request_encode_ex decodes to the same values.
 * The input is also offered to the response decoder, and a decoded chain
 * must re-encode to a response that decodes to the same elements.
 */
#include "sg_istio.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sg_istio_arena *arena;

static void check(int cond)
{
	if (!cond)
		abort();
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void round_trip_request(const sg_istio_request *r)
{
	check(r->csr && strlen(r->csr) == r->csr_len && r->csr_len > 0 && r->csr_len <= SG_ISTIO_MAX_CSR);
	uint8_t *buf;
	size_t len;
	check(sg_istio_request_encode_ex(r->csr, r->csr_len, r->validity_seconds,
					 r->impersonated_identity, r->cert_signer, &buf, &len) == 0);
	sg_istio_arena *b;
	check(sg_istio_arena_new(&b) == 0);
	sg_istio_request again;
	check(sg_istio_request_decode(b, buf, len, &again) == 0);
	check(again.csr_len == r->csr_len && memcmp(again.csr, r->csr, r->csr_len) == 0);
	check(again.validity_seconds == r->validity_seconds);
	check(same_str(again.impersonated_identity, r->impersonated_identity));
	check(same_str(again.cert_signer, r->cert_signer));
	sg_istio_arena_free(b);
	free(buf);
}

static void round_trip_response(const sg_istio_chain *c)
{
	if (c->n == 0)
		return;
	uint8_t *buf;
	size_t len;
	if (sg_istio_response_encode(c->elems, c->lens, c->n, &buf, &len) != 0)
		return; /* more than the response limit after re-encoding */
	sg_istio_arena *b;
	check(sg_istio_arena_new(&b) == 0);
	sg_istio_chain again;
	check(sg_istio_response_decode(b, buf, len, &again) == 0);
	check(again.n == c->n);
	for (size_t i = 0; i < c->n; i++)
		check(again.lens[i] == c->lens[i] && memcmp(again.elems[i], c->elems[i], c->lens[i]) == 0);
	sg_istio_arena_free(b);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!arena && sg_istio_arena_new(&arena) != 0)
		abort();
	sg_istio_arena_reset(arena);
	sg_istio_request r;
	if (sg_istio_request_decode(arena, data, size, &r) == 0)
		round_trip_request(&r);
	sg_istio_arena_reset(arena);
	sg_istio_chain c;
	if (sg_istio_response_decode(arena, data, size, &c) == 0) {
		round_trip_response(&c);
		char *joined;
		if (sg_istio_response_join(data, size, &joined) == 0) {
			check(c.n > 0 && strlen(joined) >= c.lens[0]);
			free(joined);
		}
	}
	return 0;
}
