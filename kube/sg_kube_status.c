/*
 * sg_kube_status: what a failed call says. The Kubernetes Status object
 * (k8s.io/apimachinery/pkg/apis/meta/v1 Status) of a failed answer or of
 * a watch's ERROR event, parsed (kind "Status" or a code, reason and
 * message made printable), kept as the thread's last status so that
 * callers can tell 409 Conflict from AlreadyExists without parsing text,
 * and an HTTP code's category in our error codes. The REST client
 * (sg_kube.c) and the watch parser (sg_kube_watch.c) both record into it;
 * apart from both so that neither needs the other for it.
 */
#include "sg_guard.h"
#include "sg_kube_impl.h"
#include "sg_log.h"

#include <string.h>

/* ---- thread-local status ---- */

_Thread_local sg_kube_status sg_kube_tl_status;

const sg_kube_status *sg_kube_last_status(void)
{
	return &sg_kube_tl_status;
}

bool sg_kube_conflict(int rc)
{
	return rc == SG_EBUSY && sg_kube_tl_status.code == 409;
}

void sg_kube_status_set(const sg_kube_status *st)
{
	sg_kube_tl_status = *st;
}

void sg_kube_status_reset(void)
{
	memset(&sg_kube_tl_status, 0, sizeof(sg_kube_tl_status));
}

int sg_kube_error_of_http(long code)
{
	if (code >= 200 && code < 300)
		return SG_OK;
	switch (code) {
	case 400:
	case 413:
	case 415:
	case 422:
		return SG_EINVAL;
	case 401:
	case 403:
		return SG_EAUTH;
	case 404:
		return SG_ENOTFOUND;
	case 408:
	case 504:
		return SG_ETIMEOUT;
	case 409:
	case 410:
	case 429:
		return SG_EBUSY;
	default:
		return code >= 500 && code < 600 ? SG_EBUSY : SG_EPROTO;
	}
}

const char *sg_kube_http_phrase(long code)
{
	static const struct {
		long code;
		const char *text;
	} t[] = {
	    {400, "BadRequest"},
	    {401, "Unauthorized"},
	    {403, "Forbidden"},
	    {404, "NotFound"},
	    {405, "MethodNotAllowed"},
	    {406, "NotAcceptable"},
	    {409, "Conflict"},
	    {410, "Gone"},
	    {413, "RequestEntityTooLarge"},
	    {415, "UnsupportedMediaType"},
	    {422, "Invalid"},
	    {429, "TooManyRequests"},
	    {500, "InternalError"},
	    {503, "ServiceUnavailable"},
	    {504, "Timeout"},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i].code == code)
			return t[i].text;
	return "Error";
}

int sg_kube_status_from_json(sg_kube_status *out, const json_t *s)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(json_is_object(s), SG_EINVAL, "kube: Status is not an object");
	json_t *kind = json_object_get(s, "kind");
	json_t *code = json_object_get(s, "code");
	bool is_status = json_is_string(kind) && strcmp(json_string_value(kind), "Status") == 0;
	SG_ENSURE(is_status || json_is_integer(code), SG_EINVAL, "kube: not a Status object");
	if (json_is_integer(code)) {
		json_int_t c = json_integer_value(code);
		out->code = c >= 0 && c <= 999 ? (long)c : 0;
	}
	json_t *reason = json_object_get(s, "reason");
	if (json_is_string(reason))
		sg_log_printable(out->reason, sizeof(out->reason), json_string_value(reason),
		                 json_string_length(reason));
	json_t *msg = json_object_get(s, "message");
	if (json_is_string(msg))
		sg_log_printable(out->message, sizeof(out->message), json_string_value(msg), json_string_length(msg));
	/* apimachinery's NewTooManyRequests and NewServerTimeout say how long
	 * to wait here as well as in the header; a day bounds what we keep. */
	json_t *ra = json_object_get(json_object_get(s, "details"), "retryAfterSeconds");
	if (json_is_integer(ra) && json_integer_value(ra) > 0)
		out->retry_after = json_integer_value(ra) < 86400 ? (long)json_integer_value(ra) : 86400;
	return SG_OK;
}

int sg_kube_status_parse(sg_kube_status *out, const void *body, size_t len)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(len <= ERRBODY_MAX, SG_EINVAL, "kube: Status larger than %u bytes", ERRBODY_MAX);
	json_error_t jerr;
	json_t *j SG_CLEANUP(json_decrefp) = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	SG_ENSURE(j, SG_EINVAL, "kube: Status is not JSON");
	return sg_kube_status_from_json(out, j);
}
