/*
 * sg_kube_watch: the parser of a Kubernetes watch stream (the
 * client-side rate limiter, once here, is sg_kube_ratelimit.c).
 *
 * Wire format (Kubernetes API concepts, "Efficient detection of changes";
 * k8s.io/apimachinery/pkg/apis/meta/v1 WatchEvent): one JSON object per
 * line, {"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR",
 * "object": {...}}, over a chunked HTTP/1.1 body or an HTTP/2 stream.
 * Chunk boundaries have nothing to do with line boundaries, so bytes are
 * kept until the newline arrives; only the current line is buffered, and
 * never more than max_line bytes (the buffer grows by doubling up to that
 * bound, so an idle watch holds a few KiB). Unlike kubernetes-client/c's
 * helper, a line is dispatched as soon as it is complete and a bad line
 * fails the stream instead of growing the buffer forever.
 *
 * An ERROR event carries a Status: 410 Expired/Gone means the requested
 * resourceVersion left the server's window and the caller must relist.
 *
 * A line may be a Secret's event: the buffer is cleared once the line is
 * dispatched, a growth copies into a new block and clears the old one
 * (realloc would free it as it is), and the free clears it all.
 */
#include "sg_guard.h"
#include "sg_kube_impl.h"
#include "sg_log.h"
#include "sg_secret.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_INITIAL 4096

struct sg_kube_watch_parser {
	char *buf;
	size_t n, cap, max;
	sg_kube_watch_fn fn;
	void *arg;
	int failed; /* a negative code once the stream is broken */
};

static const char *const type_names[] = {
    [SG_KUBE_ADDED] = "ADDED",
    [SG_KUBE_MODIFIED] = "MODIFIED",
    [SG_KUBE_DELETED] = "DELETED",
    [SG_KUBE_BOOKMARK] = "BOOKMARK",
};

const char *sg_kube_event_name(sg_kube_event_type t)
{
	return (unsigned)t < sizeof(type_names) / sizeof(type_names[0]) ? type_names[t] : "?";
}

int sg_kube_watch_parser_new(sg_kube_watch_parser **out, size_t max_line, sg_kube_watch_fn fn, void *arg)
{
	*out = NULL;
	SG_ENSURE(fn, SG_EINVAL, "kube: watch parser needs a callback");
	sg_kube_watch_parser *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "kube: out of memory");
	p->max = max_line ? max_line : SG_KUBE_WATCH_LINE_MAX;
	p->fn = fn;
	p->arg = arg;
	*out = p;
	return SG_OK;
}

void sg_kube_watch_parser_free(sg_kube_watch_parser *p)
{
	if (!p)
		return;
	if (p->buf)
		sg_wipe(p->buf, p->cap);
	free(p->buf);
	free(p);
}

/* An ERROR event: record its Status and fail with its category. */
static int error_event(json_t *obj)
{
	sg_kube_status st;
	if (sg_kube_status_from_json(&st, obj) != SG_OK || st.code == 0) {
		memset(&st, 0, sizeof(st));
		st.code = 500;
		snprintf(st.reason, sizeof(st.reason), "InternalError");
		snprintf(st.message, sizeof(st.message), "ERROR event without a Status");
	}
	sg_kube_status_set(&st);
	int code = sg_kube_error_of_http(st.code);
	if (code == SG_OK)
		code = SG_EPROTO;
	if (st.code == 410)
		return sg_error_set(SG_EBUSY, "watch expired: 410 %s: %s (relist)", st.reason[0] ? st.reason : "Gone",
		                    st.message);
	return sg_error_set(code, "ERROR event: %ld %s: %s", st.code, st.reason, st.message);
}

/* One complete line (without its newline). */
static int dispatch(sg_kube_watch_parser *p, const char *line, size_t n)
{
	if (n && line[n - 1] == '\r')
		n--;
	size_t b = 0;
	while (b < n && (line[b] == ' ' || line[b] == '\t'))
		b++;
	if (b == n)
		return SG_OK; /* blank line */
	json_error_t jerr;
	json_t *ev SG_CLEANUP(json_decrefp) = json_loadb(line + b, n - b, JSON_REJECT_DUPLICATES, &jerr);
	SG_ENSURE(ev, SG_EPROTO, "event is not valid JSON (column %d)", jerr.column);
	SG_ENSURE(json_is_object(ev), SG_EPROTO, "event is not a JSON object");
	json_t *type = json_object_get(ev, "type");
	json_t *obj = json_object_get(ev, "object");
	SG_ENSURE(json_is_string(type), SG_EPROTO, "event has no string \"type\"");
	SG_ENSURE(json_is_object(obj), SG_EPROTO, "event has no \"object\" object");
	const char *t = json_string_value(type);
	if (strcmp(t, "ERROR") == 0)
		return error_event(obj);
	for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
		if (strcmp(t, type_names[i]) == 0)
			return p->fn((sg_kube_event_type)i, obj, p->arg);
	char shown[24];
	sg_log_printable(shown, sizeof(shown), t, json_string_length(type));
	SG_BAIL(SG_EPROTO, "event type \"%s\" is unknown", shown);
}

static int grow(sg_kube_watch_parser *p, size_t need)
{
	SG_ENSURE(need <= p->max, SG_EPROTO, "event line longer than %zu bytes", p->max);
	if (need <= p->cap)
		return SG_OK;
	size_t cap = p->cap ? p->cap : (LINE_INITIAL < p->max ? LINE_INITIAL : p->max);
	while (cap < need)
		cap = cap > p->max / 2 ? p->max : cap * 2;
	char *b = sg_wipe_realloc(p->buf, p->cap, p->n, cap); /* the line so far */
	SG_ENSURE(b, SG_EINTERNAL, "kube: out of memory");
	p->buf = b;
	p->cap = cap;
	return SG_OK;
}

int sg_kube_watch_parser_feed(sg_kube_watch_parser *p, const void *data, size_t len)
{
	if (p->failed)
		return sg_error_set(p->failed, "watch stream already failed");
	const char *d = data;
	size_t off = 0;
	while (off < len) {
		const char *nl = memchr(d + off, '\n', len - off);
		size_t take = nl ? (size_t)(nl - (d + off)) : len - off;
		int rc;
		if (p->n == 0 && nl) {
			/* The whole line is in this chunk: no copy. */
			rc = take <= p->max ? dispatch(p, d + off, take)
			                    : sg_error_set(SG_EPROTO, "event line longer than %zu bytes", p->max);
		} else {
			rc = grow(p, p->n + take);
			if (rc == SG_OK) {
				if (take)
					memcpy(p->buf + p->n, d + off, take);
				p->n += take;
				if (nl) {
					rc = dispatch(p, p->buf, p->n);
					if (p->n)
						sg_wipe(p->buf, p->n);
					p->n = 0;
				}
			}
		}
		if (rc < 0)
			p->failed = rc;
		if (rc != 0)
			return rc;
		off += take + (nl ? 1 : 0);
	}
	return SG_OK;
}

int sg_kube_watch_parser_finish(sg_kube_watch_parser *p)
{
	if (p->failed)
		return sg_error_set(p->failed, "watch stream already failed");
	for (size_t i = 0; i < p->n; i++)
		if (p->buf[i] != ' ' && p->buf[i] != '\t' && p->buf[i] != '\r')
			SG_BAIL(SG_EPROTO, "watch stream truncated inside an event (%zu bytes)", p->n);
	if (p->n)
		sg_wipe(p->buf, p->n);
	p->n = 0;
	return SG_OK;
}
