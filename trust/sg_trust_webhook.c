/*
 * The Bundle admission webhook (sg_trust_webhook.h): one AdmissionReview
 * in, one out.
 *
 * Shaped like controller-runtime's handler so the API server sees the same
 * answers: checks in the order http.go makes them (empty body, size,
 * Content-Type, decoding), then validator_custom.go's dispatch on the
 * operation. Every answer is built by one function (answer) from a small
 * record that starts as "errored, 400" and becomes "allowed" only at the
 * end of a path that checked everything (fail closed).
 *
 * Untrusted bytes: the scan (bound_values) walks the body once with an
 * index, never past len, and counts what jansson would allocate a node
 * for (a value starts after '[', '{', ',' and ':' outside strings, plus the
 * top one) and the nesting depth, so an oversized or deeply nested
 * document is refused before the parser allocates anything. The scan does
 * not validate JSON (jansson does); it only has to never undercount.
 */
#include "sg_trust_webhook.h"

#include "sg_guard.h"
#include "sg_trust.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_V1 "admission.k8s.io/v1"
#define API_V1BETA1 "admission.k8s.io/v1beta1"
#define MESSAGE_MAX 1024

typedef struct answer {
	const char *api_version; /* of the response */
	char uid[SG_TRUST_WEBHOOK_UID_MAX + 1];
	bool allowed;
	int code;
	const char *reason; /* NULL: none */
	char message[MESSAGE_MAX];
	sg_trust_admission result;
} answer;

static void errored(answer *a, int code, const char *fmt, ...) SG_PRINTF(3, 4);
static void errored(answer *a, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->message, sizeof(a->message), fmt, ap);
	va_end(ap);
	a->allowed = false;
	a->code = code;
	a->reason = NULL;
	a->result = SG_TRUST_ADMISSION_ERRORED;
}

static void allowed(answer *a)
{
	a->allowed = true;
	a->code = 200;
	a->reason = NULL;
	a->message[0] = '\0';
	a->result = SG_TRUST_ADMISSION_ALLOWED;
}

/* controller-runtime's Denied(err.Error()). */
static void denied(answer *a, const char *message)
{
	snprintf(a->message, sizeof(a->message), "%s", message);
	a->allowed = false;
	a->code = 403;
	a->reason = "Forbidden";
	a->result = SG_TRUST_ADMISSION_DENIED;
}

/* Values and depth of the JSON text data[0..len), counted without
 * allocating; false once either passes its maximum. */
static bool bound_values(const char *data, size_t len)
{
	size_t values = 1, depth = 0;
	bool in_string = false;
	for (size_t i = 0; i < len; i++) {
		char c = data[i];
		if (in_string) {
			if (c == '\\')
				i++; /* the escaped byte cannot end the string */
			else if (c == '"')
				in_string = false;
			continue;
		}
		switch (c) {
		case '"':
			in_string = true;
			break;
		case '[':
		case '{':
			if (++depth > SG_TRUST_WEBHOOK_DEPTH_MAX)
				return false;
			values++;
			break;
		case ']':
		case '}':
			if (depth)
				depth--;
			break;
		case ',':
		case ':':
			values++;
			break;
		default:
			break;
		}
		if (values > SG_TRUST_WEBHOOK_VALUES_MAX)
			return false;
	}
	return true;
}

static const char *str(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static bool is(const char *a, const char *b)
{
	return a && strcmp(a, b) == 0;
}

static bool uid_ok(const char *uid)
{
	size_t n = uid ? strlen(uid) : 0;
	if (n == 0 || n > SG_TRUST_WEBHOOK_UID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)uid[i] < 0x20 || (unsigned char)uid[i] > 0x7e)
			return false;
	return true;
}

/* The Bundle an operation carries: a JSON object of our kind. */
static bool bundle_ok(const json_t *obj)
{
	return json_is_object(obj) && is(str(obj, "apiVersion"), SG_TRUST_GROUP "/" SG_TRUST_VERSION) &&
	       is(str(obj, "kind"), SG_TRUST_KIND);
}

/* validator_custom.go: the request's operation decides. */
static void decide(answer *a, const json_t *req)
{
	const json_t *kind = json_object_get(req, "kind");
	if (!is(str(kind, "group"), SG_TRUST_GROUP) || !is(str(kind, "version"), SG_TRUST_VERSION) ||
	    !is(str(kind, "kind"), SG_TRUST_KIND)) {
		errored(a, 400, "this webhook validates %s/%s %s objects only", SG_TRUST_GROUP, SG_TRUST_VERSION,
		        SG_TRUST_KIND);
		return;
	}
	const char *op = str(req, "operation");
	const json_t *obj = json_object_get(req, "object");
	const json_t *old = json_object_get(req, "oldObject");
	if (is(op, "CONNECT")) {
		allowed(a);
		return;
	}
	if (is(op, "DELETE")) {
		if (bundle_ok(old))
			allowed(a); /* trust-manager allows every delete */
		else
			errored(a, 400, "DELETE without the Bundle as oldObject");
		return;
	}
	if (!is(op, "CREATE") && !is(op, "UPDATE")) {
		errored(a, 400, "unknown operation");
		return;
	}
	if (!bundle_ok(obj) || (is(op, "UPDATE") && !bundle_ok(old))) {
		errored(a, 400, "%s without the Bundle as object%s", op, is(op, "UPDATE") ? " and oldObject" : "");
		return;
	}
	int rc = sg_trust_spec_check(obj);
	if (rc == SG_OK)
		allowed(a);
	else if (rc == SG_EINVAL)
		denied(a, sg_error_last()->msg);
	else
		errored(a, 500, "the Bundle could not be checked");
}

/* http.go's checks, then the review's envelope. */
static void review(answer *a, const char *body, size_t len, const char *content_type)
{
	if (len == 0) {
		errored(a, 400, "request body is empty");
		return;
	}
	if (len > SG_TRUST_WEBHOOK_BODY_MAX) {
		errored(a, 413, "request entity is too large; limit is %u bytes", SG_TRUST_WEBHOOK_BODY_MAX);
		return;
	}
	if (!is(content_type, "application/json")) {
		errored(a, 400, "the Content-Type must be application/json");
		return;
	}
	if (!bound_values(body, len)) {
		errored(a, 400, "the AdmissionReview has more than %u JSON values or %u levels of nesting",
		        SG_TRUST_WEBHOOK_VALUES_MAX, SG_TRUST_WEBHOOK_DEPTH_MAX);
		return;
	}
	json_error_t jerr;
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		/* jerr.text may quote the input: only the position is told. */
		errored(a, 400, "the body is not JSON (line %d, column %d)", jerr.line, jerr.column);
		return;
	}
	const char *api = str(doc, "apiVersion");
	const json_t *req = json_object_get(doc, "request");
	if (!json_is_object(doc) || !(is(api, API_V1) || is(api, API_V1BETA1)) ||
	    !is(str(doc, "kind"), "AdmissionReview") || !json_is_object(req)) {
		errored(a, 400, "the body is not an AdmissionReview (%s or %s) with a request", API_V1, API_V1BETA1);
	} else if (!uid_ok(str(req, "uid"))) {
		a->api_version = is(api, API_V1) ? API_V1 : API_V1BETA1;
		errored(a, 400, "the request has no uid of 1..%u printable characters", SG_TRUST_WEBHOOK_UID_MAX);
	} else {
		a->api_version = is(api, API_V1) ? API_V1 : API_V1BETA1;
		snprintf(a->uid, sizeof(a->uid), "%s", str(req, "uid"));
		decide(a, req);
	}
	json_decref(doc);
}

/* The AdmissionReview controller-runtime writes for a. */
static int answer_json(const answer *a, char **out, size_t *out_len)
{
	json_t *status = json_pack("{s:{}, s:i}", "metadata", "code", a->code);
	json_t *resp = json_pack("{s:s, s:b, s:o}", "uid", a->uid, "allowed", a->allowed, "status", status);
	json_t *doc =
	    json_pack("{s:s, s:s, s:o}", "apiVersion", a->api_version, "kind", "AdmissionReview", "response", resp);
	bool ok = doc != NULL;
	if (ok && a->reason)
		ok = json_object_set_new(status, "reason", json_string(a->reason)) == 0;
	/* The check's messages are printable ASCII; json_string refuses
	 * anything that is not UTF-8, so a bad one fails as out of memory
	 * would, never as a malformed answer. */
	if (ok && a->message[0])
		ok = json_object_set_new(status, "message", json_string(a->message)) == 0;
	char *text = ok ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	SG_ENSURE(text, SG_EINTERNAL, "trust webhook: out of memory");
	*out = text;
	*out_len = strlen(text);
	return SG_OK;
}

int sg_trust_admission_review(const char *body, size_t len, const char *content_type, char **out, size_t *out_len,
                              sg_trust_admission *result)
{
	*out = NULL;
	*out_len = 0;
	answer a = {.api_version = API_V1};
	errored(&a, 400, "the request was not read"); /* fail closed */
	review(&a, body ? body : "", body ? len : 0, content_type);
	*result = a.result;
	return answer_json(&a, out, out_len);
}
