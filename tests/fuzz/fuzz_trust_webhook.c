/*
 * Fuzz target for signet-trust's admission webhook (trust/sg_trust_webhook.c):
 * what any pod that reaches the webhook port may send. The first byte
 * chooses the Content-Type (0: application/json, 1: none, else another
 * type); the rest is the body. Oracles: the function answers SG_OK (or
 * SG_EINTERNAL for out of memory) with an AdmissionReview that parses: a
 * kind, an apiVersion of admission.k8s.io v1 or v1beta1, a response with a
 * string uid of at most 128 bytes, allowed a boolean, and a status code
 * that agrees with the answer (allowed 200; denied 403 Forbidden; errored
 * 400, 413 or 500 without a reason); only a JSON body can be allowed; the
 * same input gives the same answer. Nothing may crash, hang or leak.
 */
#include "sg_error.h"
#include "sg_trust_webhook.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_answer(const char *out, size_t len, sg_trust_admission result, const char *ct)
{
	json_t *doc = json_loadb(out, len, JSON_REJECT_DUPLICATES, NULL);
	check(json_is_object(doc));
	const char *api = json_string_value(json_object_get(doc, "apiVersion"));
	check(api && (strcmp(api, "admission.k8s.io/v1") == 0 || strcmp(api, "admission.k8s.io/v1beta1") == 0));
	const char *kind = json_string_value(json_object_get(doc, "kind"));
	check(kind && strcmp(kind, "AdmissionReview") == 0);
	json_t *resp = json_object_get(doc, "response");
	const char *uid = json_string_value(json_object_get(resp, "uid"));
	check(uid && strlen(uid) <= SG_TRUST_WEBHOOK_UID_MAX);
	json_t *allowed = json_object_get(resp, "allowed");
	check(json_is_boolean(allowed));
	json_t *status = json_object_get(resp, "status");
	json_int_t code = json_integer_value(json_object_get(status, "code"));
	const char *reason = json_string_value(json_object_get(status, "reason"));
	switch (result) {
	case SG_TRUST_ADMISSION_ALLOWED:
		check(json_is_true(allowed) && code == 200 && !reason);
		check(ct && strcmp(ct, "application/json") == 0);
		break;
	case SG_TRUST_ADMISSION_DENIED:
		check(json_is_false(allowed) && code == 403 && reason && strcmp(reason, "Forbidden") == 0);
		break;
	case SG_TRUST_ADMISSION_ERRORED:
		check(json_is_false(allowed) && (code == 400 || code == 413 || code == 500) && !reason);
		break;
	default:
		check(0);
	}
	json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *ct = data[0] == 0 ? "application/json" : data[0] == 1 ? NULL : "text/plain";
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	char *out = NULL, *again = NULL;
	size_t out_len = 0, again_len = 0;
	sg_trust_admission result = SG_TRUST_ADMISSION_ALLOWED, result2 = SG_TRUST_ADMISSION_ALLOWED;
	int rc = sg_trust_admission_review(body, len, ct, &out, &out_len, &result);
	if (rc != SG_OK) {
		check(rc == SG_EINTERNAL && out == NULL);
		return 0;
	}
	check(out && strlen(out) == out_len);
	check_answer(out, out_len, result, ct);
	if (sg_trust_admission_review(body, len, ct, &again, &again_len, &result2) == SG_OK) {
		check(result2 == result && again_len == out_len && memcmp(again, out, out_len) == 0);
		free(again);
	}
	free(out);
	return 0;
}
