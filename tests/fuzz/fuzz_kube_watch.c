/*
 * Fuzz target for the Kubernetes watch-stream parser and the Status parser
 * (kube/sg_kube_watch.c, kube/sg_kube.c): the input is a watch stream cut
 * into chunks at positions taken from its first byte, fed to a parser with
 * a small line bound, then the whole input parsed as a Status document.
 * Oracles: every result is one of the documented codes; the callback only
 * sees the four event types with an object; once failed, the parser stays
 * failed; a stream fed whole and fed in chunks gives the same events; the
 * Status fields are NUL-terminated printable ASCII.
 */
#include "sg_kube.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

struct tally {
	unsigned events;
	unsigned long sum; /* event types and object sizes, order-sensitive */
};

static int on_event(sg_kube_event_type t, json_t *obj, void *arg)
{
	struct tally *ta = arg;
	check(t >= SG_KUBE_ADDED && t <= SG_KUBE_BOOKMARK);
	check(json_is_object(obj));
	ta->events++;
	ta->sum = ta->sum * 31 + (unsigned)t * 7 + json_object_size(obj);
	return 0;
}

static int code_ok(int rc)
{
	return rc == 0 || rc == SG_EPROTO || rc == SG_EBUSY || rc == SG_EINVAL || rc == SG_EAUTH ||
	       rc == SG_ENOTFOUND || rc == SG_ETIMEOUT || rc == SG_EINTERNAL;
}

static int run(const uint8_t *d, size_t n, size_t step, struct tally *t)
{
	sg_kube_watch_parser *p = NULL;
	check(sg_kube_watch_parser_new(&p, 1024, on_event, t) == 0);
	int rc = 0;
	for (size_t off = 0; off < n && rc == 0; off += step) {
		size_t len = n - off < step ? n - off : step;
		rc = sg_kube_watch_parser_feed(p, d + off, len);
		check(code_ok(rc));
	}
	if (rc == 0)
		rc = sg_kube_watch_parser_finish(p);
	else
		check(sg_kube_watch_parser_feed(p, "\n", 1) < 0); /* stays failed */
	check(code_ok(rc));
	sg_kube_watch_parser_free(p);
	return rc;
}

static void check_text(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	check(n < cap);
	for (size_t i = 0; i < n; i++)
		check(s[i] >= 0x20 && s[i] < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	size_t step = (size_t)(data[0] % 13) + 1;
	struct tally whole = {0}, chunked = {0};
	int a = run(data + 1, size - 1, size, &whole);
	int b = run(data + 1, size - 1, step, &chunked);
	check(a == b);
	check(whole.events == chunked.events && whole.sum == chunked.sum);

	sg_kube_status st;
	int rc = sg_kube_status_parse(&st, data, size);
	check(rc == 0 || rc == SG_EINVAL);
	check_text(st.reason, sizeof(st.reason));
	check_text(st.message, sizeof(st.message));
	check(st.code >= 0 && st.code <= 999);
	return 0;
}
