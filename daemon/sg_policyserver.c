/*
 * The approver plugin "external-policy-servers" (sg_policyserver.h): the
 * configuration parser, the PolicyRequest built from a CertificateRequest
 * object, and one blocking gRPC call per server.
 *
 * Shape. Everything that can be decided once is decided in
 * sg_policyserver_new: the flag is parsed into a fixed table of at most
 * SG_POLICYSERVER_MAX servers, the ca= files are read and parsed as
 * certificates there (a wrong path or file fails signetd's start, not the
 * first request hours later), and each server gets its channel. After that
 * the table is read-only, so the approver's workers share it without a
 * lock; only the counters change, as relaxed atomics.
 *
 * Blocking calls. The approver's workers are ours (not gRPC's or the
 * signer's), so a worker waiting for a policy server holds up only its own
 * request, for at most one deadline per server; sg_grpc_unary gives each
 * call its own completion queue, so workers call concurrently on one
 * channel.
 *
 * Fail closed. Each step that has no positive answer returns an error, and
 * an error never approves: the request is approved by this plugin only when
 * every listed server answered OK with a PolicyResponse that decodes
 * cleanly to APPROVED. The response decoder (proto/sg_policypb.c) refuses
 * an unset verdict (RESULT_UNSPECIFIED, the proto3 default: an empty
 * response), values outside the enum and any response in the design's
 * numbering (field 1) rather than reading them as an answer.
 *
 * Values. A policy's values are checked twice with the same function: by
 * check() when the approver sets the policy's Ready condition (wrong values
 * make it NotReady with the reason, so a typo is seen on the policy and not
 * retried forever on every request), and again by evaluate(), which must
 * not rely on check() having run.
 *
 * Details. Errors here are rewritten once with the server's name in front
 * ("external policy server opa: ..."), keeping the lower layer's detail
 * after it: the approver logs the detail of the first policy that could
 * not be evaluated, and without the name an operator with several servers
 * could not tell which one failed.
 */
#include "sg_policyserver.h"

#include "sg_der.h"
#include "sg_file.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_kubesign.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_policypb.h"
#include "sg_x509.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { R_APPROVED, R_DENIED, R_ERROR, R_FAILED, R_N };
static const char *const result_names[R_N] = {"approved", "denied", "error", "failed"};

#define TARGET_MAX (SG_NAMES_SUBDOMAIN_MAX + 8) /* host (or [IPv6]) + ":65535" */

typedef struct server {
	char name[SG_NAMES_SUBDOMAIN_MAX + 1]; /* a DNS label (configured) or subdomain (an object's name) */
	char target[TARGET_MAX + 1];
	char *server_name; /* NULL unless server-name= */
	char *ca_pem;      /* NULL: plaintext */
	sg_grpc_channel *ch;
	atomic_uint_fast64_t approved, denied, errors, timeouts, unavailable, invalid;
	_Atomic(sg_series *) series[R_N]; /* set by sg_policyserver_metrics */
} server;

/* An ExternalPolicyServer object as the controller last gave it: usable
 * (a TLS channel to its endpoint), waiting for a CA bundle, or not usable
 * (why). Shared by the calls in flight: the table holds one reference, each
 * call one more; the last release frees it. */
typedef struct resource {
	server sv; /* ch NULL unless usable */
	char *why; /* NULL, or why it cannot be called */
	atomic_uint refs;
} resource;

struct sg_policyserver {
	server s[SG_POLICYSERVER_MAX];
	size_t n;
	uint64_t timeout_ns;

	pthread_mutex_t mu; /* guards res and nres */
	resource *res[SG_POLICYSERVER_RESOURCES_MAX];
	size_t nres;
	_Atomic(sg_series *) res_series[R_N];
};

/* ---- configuration ------------------------------------------------------ */

/* A borrowed piece of the flag's text. */
typedef struct span {
	const char *p;
	size_t n;
} span;

/* Cuts s at the first delim: returns what precedes it and leaves s after
 * it; without delim returns all of s and leaves s empty with *found false. */
static span span_cut(span *s, char delim, bool *found)
{
	const char *d = s->n ? memchr(s->p, delim, s->n) : NULL;
	span head = {s->p, d ? (size_t)(d - s->p) : s->n};
	*found = d != NULL;
	s->p += d ? head.n + 1 : head.n;
	s->n -= d ? head.n + 1 : head.n;
	return head;
}

static bool span_is(span s, const char *lit)
{
	return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

static char *span_dup(span s)
{
	char *p = malloc(s.n + 1);
	if (p) {
		memcpy(p, s.p, s.n);
		p[s.n] = '\0';
	}
	return p;
}

/* How an entry is named in messages: by its name once that is known. */
typedef struct where {
	char text[128];
} where;

static void where_set(where *w, size_t index, span raw, const char *name)
{
	if (name)
		snprintf(w->text, sizeof(w->text), "external-policy-servers: entry %zu (%s)", index + 1, name);
	else
		snprintf(w->text, sizeof(w->text), "external-policy-servers: entry %zu (\"%.*s\")", index + 1,
		         raw.n > 40 ? 40 : (int)raw.n, raw.p);
}

/* port: 1..65535, decimal, no sign, no leading zero. */
static int parse_port(const where *w, span p, unsigned *out)
{
	SG_ENSURE(p.n >= 1 && p.n <= 5, SG_EINVAL, "%s: port must be 1..65535", w->text);
	unsigned v = 0;
	for (size_t i = 0; i < p.n; i++) {
		SG_ENSURE(p.p[i] >= '0' && p.p[i] <= '9', SG_EINVAL, "%s: port is not a decimal number", w->text);
		v = v * 10 + (unsigned)(p.p[i] - '0');
	}
	SG_ENSURE(p.p[0] != '0' && v <= 65535, SG_EINVAL, "%s: port must be 1..65535", w->text);
	*out = v;
	return SG_OK;
}

static bool all_digits_and_dots(span s)
{
	for (size_t i = 0; i < s.n; i++)
		if (!((s.p[i] >= '0' && s.p[i] <= '9') || s.p[i] == '.'))
			return false;
	return true;
}

/* host:port, host a DNS name, an IPv4 address or [IPv6]; fills target. */
static int parse_address(const where *w, span a, server *sv)
{
	span host, port;
	char buf[INET6_ADDRSTRLEN + 1];
	unsigned char bin[sizeof(struct in6_addr)];
	if (a.n && a.p[0] == '[') {
		const char *close = memchr(a.p, ']', a.n);
		SG_ENSURE(close, SG_EINVAL, "%s: '[' without ']' in the address", w->text);
		host = (span){a.p + 1, (size_t)(close - a.p - 1)};
		size_t used = (size_t)(close - a.p) + 1;
		SG_ENSURE(used < a.n && a.p[used] == ':', SG_EINVAL, "%s: want [IPv6]:port", w->text);
		port = (span){a.p + used + 1, a.n - used - 1};
		SG_ENSURE(host.n > 0 && host.n < sizeof(buf), SG_EINVAL, "%s: bad IPv6 address", w->text);
		memcpy(buf, host.p, host.n);
		buf[host.n] = '\0';
		SG_ENSURE(inet_pton(AF_INET6, buf, bin) == 1, SG_EINVAL, "%s: bad IPv6 address", w->text);
	} else {
		const char *colon = a.n ? memchr(a.p, ':', a.n) : NULL;
		SG_ENSURE(colon, SG_EINVAL, "%s: want host:port", w->text);
		host = (span){a.p, (size_t)(colon - a.p)};
		port = (span){colon + 1, a.n - host.n - 1};
		SG_ENSURE(!memchr(port.p, ':', port.n), SG_EINVAL, "%s: an IPv6 address goes in brackets", w->text);
		SG_ENSURE(host.n > 0, SG_EINVAL, "%s: no host", w->text);
		if (all_digits_and_dots(host)) {
			SG_ENSURE(host.n < sizeof(buf), SG_EINVAL, "%s: bad IPv4 address", w->text);
			memcpy(buf, host.p, host.n);
			buf[host.n] = '\0';
			SG_ENSURE(inet_pton(AF_INET, buf, bin) == 1, SG_EINVAL, "%s: bad IPv4 address", w->text);
		} else {
			SG_ENSURE(sg_names_dns_subdomain(host.p, host.n), SG_EINVAL,
			          "%s: host is not a lower-case DNS name nor an IP address", w->text);
		}
	}
	unsigned pn = 0;
	SG_TRY(parse_port(w, port, &pn));
	size_t tn = (size_t)(port.p - a.p) + port.n; /* the address as written */
	SG_ENSURE(tn <= TARGET_MAX, SG_EINVAL, "%s: address too long", w->text);
	memcpy(sv->target, a.p, tn);
	sv->target[tn] = '\0';
	return SG_OK;
}

/* Prefixes this thread's detail with what (keeping the code). */
static int with_context(int code, const char *what)
{
	char old[SG_ERROR_MSG_MAX];
	snprintf(old, sizeof(old), "%s", sg_error_last()->msg);
	return sg_error_set(code, "%s: %s", what, old);
}

/* Shows C0 controls and DEL of a server's text as spaces (they would break
 * log lines and condition messages); UTF-8 sequences are left alone. */
static void blank_controls(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = ' ';
}

/* Cuts s (UTF-8) before its first byte that does not start a whole
 * character: a message cut at a byte count (an excerpt, the detail's
 * SG_ERROR_MSG_MAX) may end inside one, and a condition message that is
 * not UTF-8 cannot be written to the API server. */
static void utf8_trim(char *s)
{
	sg_slice sl = {(const uint8_t *)s, strlen(s)};
	size_t i = 0;
	uint32_t cp;
	while (i < sl.len) {
		size_t at = i;
		if (!sg_der_utf8_next(sl, &i, &cp)) {
			s[at] = '\0';
			return;
		}
	}
}

/* Reads and checks a ca= file. */
static int load_ca(const where *w, span path, server *sv)
{
	char *p SG_AUTOFREE = span_dup(path);
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	uint8_t *pem = NULL;
	size_t len = 0;
	int rc = sg_file_read(p, SG_POLICYSERVER_CA_MAX, &pem, &len);
	sg_x509_bundle *b = NULL;
	if (rc == SG_OK)
		rc = sg_x509_bundle_parse(&b, (const char *)pem, len);
	sg_x509_bundle_free(b);
	if (rc < 0) {
		free(pem);
		return with_context(rc, w->text);
	}
	sv->ca_pem = (char *)pem; /* NUL-terminated by sg_file_read */
	return SG_OK;
}

/* ;ca=PATH ;server-name=NAME, each at most once. */
static int parse_options(const where *w, span rest, server *sv)
{
	bool found = true, has_ca = false;
	span sn = {NULL, 0};
	while (found) {
		span opt = span_cut(&rest, ';', &found);
		bool eq;
		span key = span_cut(&opt, '=', &eq);
		SG_ENSURE(eq && opt.n > 0, SG_EINVAL, "%s: option \"%.*s\": want key=value", w->text,
		          key.n > 32 ? 32 : (int)key.n, key.p);
		if (span_is(key, "ca")) {
			SG_ENSURE(!has_ca, SG_EINVAL, "%s: ca= given twice", w->text);
			SG_TRY(load_ca(w, opt, sv));
			has_ca = true;
		} else if (span_is(key, "server-name")) {
			SG_ENSURE(!sn.p, SG_EINVAL, "%s: server-name= given twice", w->text);
			SG_ENSURE(sg_names_dns_subdomain(opt.p, opt.n), SG_EINVAL,
			          "%s: server-name is not a lower-case DNS name", w->text);
			sn = opt;
		} else {
			SG_BAIL(SG_EINVAL, "%s: unknown option \"%.*s\" (want ca= or server-name=)", w->text,
			        key.n > 32 ? 32 : (int)key.n, key.p);
		}
	}
	SG_ENSURE(has_ca || !sn.p, SG_EINVAL, "%s: server-name= needs ca= (TLS)", w->text);
	if (sn.p) {
		sv->server_name = span_dup(sn);
		SG_ENSURE(sv->server_name, SG_EINTERNAL, "out of memory");
	}
	return SG_OK;
}

/* name=host:port[;options] */
static int parse_entry(sg_policyserver *ps, size_t index, span e)
{
	where w;
	where_set(&w, index, e, NULL);
	SG_ENSURE(e.n > 0, SG_EINVAL, "%s: empty entry", w.text);
	SG_ENSURE(ps->n < SG_POLICYSERVER_MAX, SG_EINVAL, "external-policy-servers: more than %d servers",
	          SG_POLICYSERVER_MAX);
	bool eq;
	span name = span_cut(&e, '=', &eq);
	SG_ENSURE(eq, SG_EINVAL, "%s: want name=host:port", w.text);
	SG_ENSURE(sg_names_dns_label(name.p, name.n, SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "%s: the name is not a DNS label (1..63 of [a-z0-9-], alphanumeric at both ends)", w.text);
	server *sv = &ps->s[ps->n];
	memcpy(sv->name, name.p, name.n);
	sv->name[name.n] = '\0';
	where_set(&w, index, e, sv->name);
	for (size_t i = 0; i < ps->n; i++)
		SG_ENSURE(strcmp(ps->s[i].name, sv->name) != 0, SG_EINVAL, "%s: the name is used by entry %zu too",
		          w.text, i + 1);
	ps->n++; /* from here on sg_policyserver_free releases what the entry holds */
	bool more;
	span addr = span_cut(&e, ';', &more);
	SG_TRY(parse_address(&w, addr, sv));
	if (more)
		SG_TRY(parse_options(&w, e, sv));
	return SG_OK;
}

static int parse_servers(sg_policyserver *ps, const char *text)
{
	SG_ENSURE(text && text[0], SG_EINVAL, "external-policy-servers: no servers");
	span all = {text, strlen(text)};
	bool more = true;
	for (size_t i = 0; more; i++)
		SG_TRY(parse_entry(ps, i, span_cut(&all, ',', &more)));
	return SG_OK;
}

static int channels_open(sg_policyserver *ps)
{
	for (size_t i = 0; i < ps->n; i++) {
		server *sv = &ps->s[i];
		sg_grpc_channel_options co = {
		    .target = sv->target,
		    .root_pem = sv->ca_pem,
		    .server_name = sv->server_name,
		};
		int rc = sg_grpc_channel_new(&sv->ch, &co);
		if (rc < 0) {
			char what[sizeof("external policy server ") + sizeof(sv->name)];
			snprintf(what, sizeof(what), "external policy server %s", sv->name);
			return with_context(rc, what);
		}
	}
	return SG_OK;
}

static void resource_put(resource *r)
{
	if (!r || atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	sg_grpc_channel_free(r->sv.ch);
	free(r->sv.ca_pem);
	free(r->why);
	free(r);
}

/* The detail of a refused configuration, which quotes the flag's entry,
 * an option's key and a ca= path as written, made printable ASCII (other
 * bytes shown as '?'): it goes to the log and the terminal. */
static int printable_detail(int code)
{
	sg_error e; /* the detail rewritten in place: its origin (file, line) kept */
	sg_error_save(&e);
	sg_log_printable(e.msg, sizeof(e.msg), e.msg, strlen(e.msg));
	sg_error_restore(&e);
	return code;
}

int sg_policyserver_new(sg_policyserver **out, const sg_policyserver_options *o)
{
	*out = NULL;
	SG_ENSURE(o->timeout_ms <= SG_POLICYSERVER_TIMEOUT_MAX_MS, SG_EINVAL,
	          "external-policy-servers: a timeout of %llu ms is beyond %d", (unsigned long long)o->timeout_ms,
	          SG_POLICYSERVER_TIMEOUT_MAX_MS);
	sg_policyserver *ps = calloc(1, sizeof(*ps));
	SG_ENSURE(ps, SG_EINTERNAL, "out of memory");
	ps->timeout_ns = (o->timeout_ms ? o->timeout_ms : SG_POLICYSERVER_TIMEOUT_DEFAULT_MS) * 1000000u;
	pthread_mutex_init(&ps->mu, NULL);
	int rc = o->servers ? parse_servers(ps, o->servers) : SG_OK; /* NULL: objects only */
	if (rc == SG_OK)
		rc = channels_open(ps);
	if (rc < 0) {
		sg_policyserver_free(ps);
		return printable_detail(rc);
	}
	*out = ps;
	return SG_OK;
}

void sg_policyserver_free(sg_policyserver *ps)
{
	if (!ps)
		return;
	for (size_t i = 0; i < ps->n; i++) {
		sg_grpc_channel_free(ps->s[i].ch);
		free(ps->s[i].server_name);
		free(ps->s[i].ca_pem);
	}
	for (size_t i = 0; i < ps->nres; i++)
		resource_put(ps->res[i]);
	pthread_mutex_destroy(&ps->mu);
	free(ps);
}

sg_approver_plugin sg_policyserver_plugin(sg_policyserver *ps)
{
	return (sg_approver_plugin){SG_POLICYSERVER_PLUGIN, sg_policyserver_check, sg_policyserver_evaluate, ps};
}

/* ---- a policy's values --------------------------------------------------- */

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* At most max bytes of s (UTF-8) that end on a character boundary: an
 * excerpt of a policy's text for a message. */
static int excerpt(const char *s, size_t n, size_t max)
{
	if (n <= max)
		return (int)n;
	n = max;
	while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	return (int)n;
}

#define EXCERPT_MAX 63

/* The servers a policy lists, as indexes into ps->s, in its order. The
 * detail names the value ("values.servers: ...") but not the plugin: the
 * callers put that in front, each in its own words. */
static int servers_of(const sg_policyserver *ps, const json_t *values, size_t *idx, size_t *n)
{
	*n = 0;
	SG_ENSURE(json_is_object(values), SG_EINVAL,
	          "values." SG_POLICYSERVER_VALUES_SERVERS " is required (no values)");
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)values, key, v)
	    SG_ENSURE(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v), SG_EINVAL,
	              "values.%.*s is not a string", excerpt(key, strlen(key), EXCERPT_MAX), key);
	const json_t *list = json_object_get(values, SG_POLICYSERVER_VALUES_SERVERS);
	SG_ENSURE(list, SG_EINVAL, "values." SG_POLICYSERVER_VALUES_SERVERS " is required");
	span all = {json_string_value(list), json_string_length(list)};
	bool more = true;
	for (size_t item = 0; more; item++) {
		span s = span_cut(&all, ',', &more);
		while (s.n && is_space(s.p[0]))
			s.p++, s.n--;
		while (s.n && is_space(s.p[s.n - 1]))
			s.n--;
		if (s.n == 0 && !more && item == 0)
			break; /* "" or "  ": lists none */
		SG_ENSURE(s.n > 0, SG_EINVAL, "values." SG_POLICYSERVER_VALUES_SERVERS ": item %zu is empty", item + 1);
		size_t i = 0;
		while (i < ps->n && !span_is(s, ps->s[i].name))
			i++;
		SG_ENSURE(i < ps->n, SG_EINVAL,
		          "values." SG_POLICYSERVER_VALUES_SERVERS ": \"%.*s\" is not a configured server",
		          excerpt(s.p, s.n, EXCERPT_MAX), s.p);
		for (size_t k = 0; k < *n; k++)
			SG_ENSURE(idx[k] != i, SG_EINVAL,
			          "values." SG_POLICYSERVER_VALUES_SERVERS ": %s is listed twice", ps->s[i].name);
		idx[(*n)++] = i; /* distinct configured servers: at most SG_POLICYSERVER_MAX */
	}
	SG_ENSURE(*n > 0, SG_EINVAL, "values." SG_POLICYSERVER_VALUES_SERVERS " lists no server");
	return SG_OK;
}

/* servers_of's refusal as this module reports it to its callers: the
 * plugin in front, the policy's text shown without control characters and
 * cut to whole characters. */
static int values_refused(int code)
{
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	blank_controls(why);
	utf8_trim(why);
	return sg_error_set(code, "plugin " SG_POLICYSERVER_PLUGIN ": %s", why);
}

int sg_policyserver_check_values(const sg_policyserver *ps, const json_t *values)
{
	size_t idx[SG_POLICYSERVER_MAX], n;
	int rc = servers_of(ps, values, idx, &n);
	return rc < 0 ? values_refused(rc) : SG_OK;
}

bool sg_policyserver_check(void *arg, const json_t *values, char **why)
{
	*why = NULL;
	size_t idx[SG_POLICYSERVER_MAX], n;
	sg_error saved;
	sg_error_save(&saved); /* a bool answer: the thread's detail is left as it was */
	bool ok = servers_of(arg, values, idx, &n) == SG_OK;
	if (!ok) {
		char text[SG_ERROR_MSG_MAX];
		snprintf(text, sizeof(text), "%s", sg_error_last()->msg);
		blank_controls(text);
		utf8_trim(text);
		*why = strdup(text); /* NULL when out of memory: the approver says "values refused" */
	}
	sg_error_restore(&saved);
	return ok;
}

/* ---- the PolicyRequest ----------------------------------------------------- */

/* What the request borrows from the CertificateRequest object, plus the
 * arrays made for it. */
typedef struct built {
	sg_policypb_request r;
	sg_policypb_kv *labels, *annotations, *values;
	const char **usages, **groups, **extra_values;
	sg_policypb_extra *extra;
	char *pem;
} built;

static void built_clear(built *b)
{
	free(b->labels);
	free(b->annotations);
	free(b->values);
	free(b->usages);
	free(b->groups);
	free(b->extra_values);
	free(b->extra);
	free(b->pem);
	memset(b, 0, sizeof(*b));
}

/* A JSON string without NUL (jansson allows one inside), or NULL when the
 * member is absent or null. */
static int str_of(const json_t *obj, const char *key, const char *field, const char **out)
{
	*out = NULL;
	const json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return SG_OK;
	SG_ENSURE(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v), SG_EINVAL,
	          "%s is not a string", field);
	*out = json_string_value(v);
	return SG_OK;
}

/* An object of strings (labels, annotations, plugin values). */
static int kv_of(const json_t *obj, const char *field, sg_policypb_kv **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!obj || json_is_null(obj))
		return SG_OK;
	SG_ENSURE(json_is_object(obj), SG_EINVAL, "%s is not an object", field);
	size_t cnt = json_object_size(obj);
	SG_ENSURE(cnt <= SG_POLICYPB_MAX_ITEMS, SG_EINVAL, "%s: more than %d entries", field, SG_POLICYPB_MAX_ITEMS);
	sg_policypb_kv *kv = calloc(cnt ? cnt : 1, sizeof(*kv));
	SG_ENSURE(kv, SG_EINTERNAL, "out of memory");
	*out = kv; /* freed with the rest by built_clear */
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)obj, key, v)
	{
		SG_ENSURE(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v), SG_EINVAL,
		          "%s.%s is not a string", field, key);
		kv[(*n)++] = (sg_policypb_kv){key, json_string_value(v)};
	}
	return SG_OK;
}

/* An array of strings (usages, groups, an extra value). */
static int list_of(const json_t *arr, const char *field, const char **dst, size_t cap, size_t *n)
{
	*n = 0;
	if (!arr || json_is_null(arr))
		return SG_OK;
	SG_ENSURE(json_is_array(arr), SG_EINVAL, "%s is not an array", field);
	SG_ENSURE(json_array_size(arr) <= cap, SG_EINVAL, "%s: more than %zu entries", field, cap);
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
	{
		SG_ENSURE(json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v), SG_EINVAL,
		          "%s[%zu] is not a string", field, i);
		dst[(*n)++] = json_string_value(v);
	}
	return SG_OK;
}

static int alloc_list(const json_t *arr, const char ***out)
{
	size_t n = json_array_size(arr); /* 0 for a non-array: list_of refuses it */
	if (n > SG_POLICYPB_MAX_ITEMS)
		n = SG_POLICYPB_MAX_ITEMS; /* list_of refuses more */
	*out = calloc(n ? n : 1, sizeof(**out));
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory");
	return SG_OK;
}

/* spec.extra: an object of string arrays (authentication/v1 ExtraValue). */
static int extra_of(const json_t *obj, built *b)
{
	if (!obj || json_is_null(obj))
		return SG_OK;
	SG_ENSURE(json_is_object(obj), SG_EINVAL, "spec.extra is not an object");
	size_t cnt = json_object_size(obj), total = 0;
	SG_ENSURE(cnt <= SG_POLICYPB_MAX_ITEMS, SG_EINVAL, "spec.extra: more than %d entries", SG_POLICYPB_MAX_ITEMS);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)obj, key, v)
	{
		SG_ENSURE(json_is_array(v), SG_EINVAL, "spec.extra.%s is not an array", key);
		total += json_array_size(v);
		SG_ENSURE(total <= SG_POLICYPB_MAX_ITEMS, SG_EINVAL, "spec.extra: more than %d values",
		          SG_POLICYPB_MAX_ITEMS);
	}
	b->extra = calloc(cnt ? cnt : 1, sizeof(*b->extra));
	b->extra_values = calloc(total ? total : 1, sizeof(*b->extra_values));
	SG_ENSURE(b->extra && b->extra_values, SG_EINTERNAL, "out of memory");
	size_t used = 0;
	json_object_foreach((json_t *)obj, key, v)
	{
		sg_policypb_extra *x = &b->extra[b->r.nextra++];
		x->key = key;
		x->values = b->extra_values + used;
		SG_TRY(list_of(v, "spec.extra values", b->extra_values + used, total - used, &x->nvalues));
		used += x->nvalues;
	}
	b->r.extra = b->extra;
	return SG_OK;
}

/* The PolicyRequest for cr (as written: kind and group are not defaulted,
 * duration not normalised), asked by policy with values. */
static int build_request(built *b, const json_t *cr, const char *policy, const json_t *values)
{
	memset(b, 0, sizeof(*b));
	SG_ENSURE(json_is_object(cr), SG_EINVAL, "no CertificateRequest object");
	sg_policypb_request *r = &b->r;
	const json_t *md = json_object_get(cr, "metadata");
	const json_t *spec = json_object_get(cr, "spec");
	SG_ENSURE(json_is_object(spec), SG_EINVAL, "the CertificateRequest has no spec");
	SG_TRY(str_of(md, "name", "metadata.name", &r->name));
	SG_TRY(str_of(md, "namespace", "metadata.namespace", &r->name_space));
	SG_TRY(str_of(md, "uid", "metadata.uid", &r->uid));
	SG_TRY(kv_of(json_object_get(md, "labels"), "metadata.labels", &b->labels, &r->nlabels));
	r->labels = b->labels;
	SG_TRY(kv_of(json_object_get(md, "annotations"), "metadata.annotations", &b->annotations, &r->nannotations));
	r->annotations = b->annotations;

	size_t len = 0;
	SG_TRY(sg_kubesign_bytes_field(spec, "request", SG_POLICYPB_MAX_CSR, &b->pem, &len));
	r->csr = (const uint8_t *)b->pem;
	r->csr_len = len;

	const json_t *ref = json_object_get(spec, "issuerRef");
	SG_TRY(str_of(ref, "name", "spec.issuerRef.name", &r->issuer_name));
	SG_TRY(str_of(ref, "kind", "spec.issuerRef.kind", &r->issuer_kind));
	SG_TRY(str_of(ref, "group", "spec.issuerRef.group", &r->issuer_group));
	const json_t *ca = json_object_get(spec, "isCA");
	SG_ENSURE(!ca || json_is_boolean(ca) || json_is_null(ca), SG_EINVAL, "spec.isCA is not a boolean");
	r->is_ca = json_is_true(ca);
	SG_TRY(str_of(spec, "duration", "spec.duration", &r->duration));

	const json_t *usages = json_object_get(spec, "usages");
	SG_TRY(alloc_list(usages, &b->usages));
	SG_TRY(list_of(usages, "spec.usages", b->usages, SG_POLICYPB_MAX_ITEMS, &r->nusages));
	r->usages = b->usages;

	SG_TRY(str_of(spec, "username", "spec.username", &r->username));
	SG_TRY(str_of(spec, "uid", "spec.uid", &r->user_uid));
	const json_t *groups = json_object_get(spec, "groups");
	SG_TRY(alloc_list(groups, &b->groups));
	SG_TRY(list_of(groups, "spec.groups", b->groups, SG_POLICYPB_MAX_ITEMS, &r->ngroups));
	r->groups = b->groups;
	SG_TRY(extra_of(json_object_get(spec, "extra"), b));

	r->policy_name = policy;
	SG_TRY(kv_of(values, "plugin values", &b->values, &r->nplugin_values));
	r->plugin_values = b->values;
	return SG_OK;
}

/* ---- calls ------------------------------------------------------------------ */

static void count(server *sv, atomic_uint_fast64_t *c, int result)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
	sg_series *s = atomic_load_explicit(&sv->series[result], memory_order_acquire);
	if (s)
		sg_series_inc(s);
}

/* "external policy server <name>: <reason>" for a denial. */
static int denial_message(const server *sv, const sg_policypb_response *resp, char **out)
{
	const char *reason = resp->reason_len ? resp->reason : "denied (no reason given)";
	size_t n = strlen("external policy server : ") + strlen(sv->name) + strlen(reason) + 1;
	char *m = malloc(n);
	SG_ENSURE(m, SG_EINTERNAL, "out of memory");
	snprintf(m, n, "external policy server %s: %s", sv->name, reason);
	blank_controls(m);
	*out = m;
	return SG_OK;
}

/* One call: SG_OK with *resp decoded, or the error with the server's name. */
static int call_server(sg_policyserver *ps, server *sv, const uint8_t *req, size_t len, sg_policypb_response *resp)
{
	uint8_t *body SG_AUTOFREE = NULL;
	size_t body_len = 0;
	int status = SG_GRPC_UNKNOWN;
	char msg[256];
	char what[SG_NAMES_SUBDOMAIN_MAX + 32];
	snprintf(what, sizeof(what), "external policy server %s", sv->name);
	int rc = sg_grpc_unary(sv->ch, SG_POLICYPB_METHOD, NULL, 0, req, len, ps->timeout_ns, &body, &body_len, &status,
	                       msg, sizeof(msg));
	if (rc < 0) {
		count(sv, &sv->unavailable, R_FAILED);
		return with_context(rc, what);
	}
	if (status != SG_GRPC_OK) {
		blank_controls(msg);
		int code = status == SG_GRPC_DEADLINE_EXCEEDED ? SG_ETIMEOUT
		           : status == SG_GRPC_UNAVAILABLE     ? SG_EBUSY
		                                               : SG_EPROTO;
		count(sv,
		      code == SG_ETIMEOUT ? &sv->timeouts
		      : code == SG_EBUSY  ? &sv->unavailable
		                          : &sv->invalid,
		      R_FAILED);
		return sg_error_set(code, "%s: %s%s%s", what, sg_grpc_status_name(status), msg[0] ? ": " : "", msg);
	}
	rc = sg_policypb_response_decode(body, body_len, resp);
	if (rc < 0) {
		count(sv, &sv->invalid, R_FAILED);
		/* the server broke the protocol; out of memory stays internal */
		return with_context(rc == SG_EINVAL ? SG_EPROTO : rc, what);
	}
	return SG_OK;
}

/* One server's answer: SG_OK with *denied (and its message) or not, or
 * the error that retries the request. */
static int ask(sg_policyserver *ps, server *sv, const uint8_t *req, size_t len, bool *denied, char **message)
{
	sg_policypb_response resp;
	SG_TRY(call_server(ps, sv, req, len, &resp));
	switch (resp.result) {
	case SG_POLICYPB_APPROVED:
		count(sv, &sv->approved, R_APPROVED);
		return SG_OK;
	case SG_POLICYPB_DENIED:
		count(sv, &sv->denied, R_DENIED);
		SG_TRY(denial_message(sv, &resp, message));
		*denied = true;
		return SG_OK;
	case SG_POLICYPB_ERROR:
		count(sv, &sv->errors, R_ERROR);
		blank_controls(resp.reason);
		SG_BAIL(SG_EBUSY, "external policy server %s: %s", sv->name,
		        resp.reason_len ? resp.reason : "error (no reason given)");
	case SG_POLICYPB_UNSPECIFIED:
		break; /* the decoder refuses it: below, never an approval */
	}
	/* The decoder returns only the three answers. */
	SG_BAIL(SG_EINTERNAL, "external policy server %s: result %d", sv->name, (int)resp.result);
}

int sg_policyserver_evaluate(void *arg, const char *policy, const json_t *values, const sg_crpolicy_request *r,
                             const json_t *request_obj, bool *denied, char **message)
{
	(void)r; /* the server is sent the object as written, not its parsed form */
	sg_policyserver *ps = arg;
	*denied = false;
	*message = NULL;
	size_t idx[SG_POLICYSERVER_MAX], n = 0;
	int rc = servers_of(ps, values, idx, &n);
	if (rc < 0)
		return values_refused(rc);
	built b;
	uint8_t *req SG_AUTOFREE = NULL;
	size_t len = 0;
	rc = build_request(&b, request_obj, policy, values);
	if (rc == SG_OK)
		rc = sg_policypb_request_encode(&b.r, &req, &len);
	built_clear(&b);
	if (rc < 0)
		return with_context(rc, "plugin " SG_POLICYSERVER_PLUGIN);

	for (size_t k = 0; k < n && !*denied; k++)
		SG_TRY(ask(ps, &ps->s[idx[k]], req, len, denied, message));
	return SG_OK;
}

/* ---- ExternalPolicyServer objects ----------------------------------------- */

/* endpoint: host[:port] (the design's example names a Service as
 * "<name>.<namespace>" without a port: gRPC over TLS, so 443). */
static int parse_endpoint(const where *w, const char *endpoint, server *sv)
{
	size_t n = strlen(endpoint);
	SG_ENSURE(n > 0, SG_EINVAL, "%s: no endpoint", w->text);
	SG_ENSURE(n <= TARGET_MAX, SG_EINVAL, "%s: the endpoint is longer than %d characters", w->text, TARGET_MAX);
	bool has_port = endpoint[0] == '[' ? strstr(endpoint, "]:") != NULL : strchr(endpoint, ':') != NULL;
	char buf[TARGET_MAX + 8];
	snprintf(buf, sizeof(buf), "%s%s", endpoint, has_port ? "" : ":443");
	SG_ENSURE(strlen(buf) <= TARGET_MAX, SG_EINVAL, "%s: the endpoint is longer than %d characters", w->text,
	          TARGET_MAX);
	return parse_address(w, (span){buf, strlen(buf)}, sv);
}

/* A new table entry for name: usable when endpoint and ca check out,
 * waiting for a CA when ca is empty, else unusable with the reason (which
 * is also the thread's detail, and the return value's code). */
static int resource_make(const char *name, const char *endpoint, const char *ca, size_t ca_len, resource **out)
{
	*out = NULL;
	resource *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "out of memory");
	atomic_init(&r->refs, 1);
	snprintf(r->sv.name, sizeof(r->sv.name), "%s", name);
	where w;
	snprintf(w.text, sizeof(w.text), "ExternalPolicyServer %.60s", name);
	int rc = parse_endpoint(&w, endpoint, &r->sv);
	sg_x509_bundle *b = NULL;
	if (rc == SG_OK && ca_len > 0) {
		rc = sg_x509_bundle_parse(&b, ca, ca_len);
		if (rc < 0)
			rc = with_context(SG_EINVAL, "caBundle");
		sg_x509_bundle_free(b);
	}
	if (rc == SG_OK && ca_len > 0) {
		r->sv.ca_pem = strndup(ca, ca_len);
		sg_grpc_channel_options co = {.target = r->sv.target, .root_pem = r->sv.ca_pem};
		rc = r->sv.ca_pem ? sg_grpc_channel_new(&r->sv.ch, &co) : sg_error_set(SG_EINTERNAL, "out of memory");
	}
	if (rc < 0) {
		sg_grpc_channel_free(r->sv.ch);
		r->sv.ch = NULL;
		r->why = strdup(sg_error_last()->msg);
		if (!r->why) {
			resource_put(r);
			return sg_error_set(SG_EINTERNAL, "out of memory");
		}
		blank_controls(r->why);
		utf8_trim(r->why);
	}
	*out = r;
	return rc;
}

/* The entry for name (a new reference), or NULL. */
static resource *resource_get(sg_policyserver *ps, const char *name)
{
	resource *r = NULL;
	pthread_mutex_lock(&ps->mu);
	for (size_t i = 0; i < ps->nres && !r; i++)
		if (strcmp(ps->res[i]->sv.name, name) == 0)
			r = ps->res[i];
	if (r)
		atomic_fetch_add(&r->refs, 1);
	pthread_mutex_unlock(&ps->mu);
	return r;
}

static bool resource_same(const resource *r, const char *target, const char *ca, size_t ca_len)
{
	if (r->why || strcmp(r->sv.target, target) != 0)
		return false;
	if (!r->sv.ca_pem)
		return ca_len == 0;
	return strlen(r->sv.ca_pem) == ca_len && memcmp(r->sv.ca_pem, ca, ca_len) == 0;
}

int sg_policyserver_resource_set(sg_policyserver *ps, const char *name, const char *endpoint, const char *ca,
                                 size_t ca_len, bool *changed)
{
	if (changed)
		*changed = false;
	SG_ENSURE(name && sg_names_dns_subdomain(name, strlen(name)), SG_EINVAL,
	          "ExternalPolicyServer: the name is not a lower-case DNS subdomain");
	SG_ENSURE(endpoint && (ca || ca_len == 0), SG_EINVAL, "ExternalPolicyServer %s: no endpoint", name);
	/* Unchanged: keep the channel (and its connection). */
	resource *old = resource_get(ps, name);
	if (old) {
		server probe = {0};
		where w = {"probe"};
		sg_error saved;
		sg_error_save(&saved);
		bool same =
		    parse_endpoint(&w, endpoint, &probe) == SG_OK && resource_same(old, probe.target, ca, ca_len);
		sg_error_restore(&saved);
		resource_put(old);
		if (same)
			return SG_OK;
	}
	resource *r = NULL;
	int rc = resource_make(name, endpoint, ca, ca_len, &r);
	if (!r)
		return rc;
	if (changed)
		*changed = true;
	sg_error saved;
	sg_error_save(&saved); /* rc's detail, for the caller's condition */
	for (int k = 0; k < R_N; k++)
		atomic_store(&r->sv.series[k], atomic_load(&ps->res_series[k]));
	resource *gone = NULL;
	pthread_mutex_lock(&ps->mu);
	size_t i = 0;
	while (i < ps->nres && strcmp(ps->res[i]->sv.name, name) != 0)
		i++;
	if (i < ps->nres) {
		gone = ps->res[i];
		ps->res[i] = r;
	} else if (ps->nres < SG_POLICYSERVER_RESOURCES_MAX) {
		ps->res[ps->nres++] = r;
	} else {
		gone = r;
		r = NULL;
	}
	pthread_mutex_unlock(&ps->mu);
	resource_put(gone); /* calls in flight keep their own reference */
	SG_ENSURE(r, SG_EINVAL, "ExternalPolicyServer %s: more than %d ExternalPolicyServers", name,
	          SG_POLICYSERVER_RESOURCES_MAX);
	sg_error_restore(&saved);
	return rc;
}

void sg_policyserver_resource_remove(sg_policyserver *ps, const char *name)
{
	resource *gone = NULL;
	pthread_mutex_lock(&ps->mu);
	for (size_t i = 0; i < ps->nres && !gone; i++) {
		if (strcmp(ps->res[i]->sv.name, name) != 0)
			continue;
		gone = ps->res[i];
		ps->res[i] = ps->res[--ps->nres];
	}
	pthread_mutex_unlock(&ps->mu);
	resource_put(gone);
}

int sg_policyserver_evaluate_servers(void *arg, const char *policy, const char *const *servers, size_t nservers,
                                     const sg_crpolicy_request *r, const json_t *request_obj, bool *denied,
                                     char **message)
{
	(void)r; /* the server is sent the object as written */
	sg_policyserver *ps = arg;
	*denied = false;
	*message = NULL;
	built b;
	uint8_t *req SG_AUTOFREE = NULL;
	size_t len = 0;
	int rc = build_request(&b, request_obj, policy, NULL);
	if (rc == SG_OK)
		rc = sg_policypb_request_encode(&b.r, &req, &len);
	built_clear(&b);
	if (rc < 0)
		return with_context(rc, "externalPolicyServers");
	for (size_t k = 0; k < nservers && !*denied; k++) {
		resource *res = resource_get(ps, servers[k]);
		if (!res)
			rc = sg_error_set(SG_EBUSY, "ExternalPolicyServer %s does not exist (or is not known yet)",
			                  servers[k]);
		else if (res->why)
			rc = sg_error_set(SG_EBUSY, "ExternalPolicyServer %s is not Ready: %s", servers[k], res->why);
		else if (!res->sv.ch)
			rc = sg_error_set(
			    SG_EBUSY,
			    "ExternalPolicyServer %s has no CA bundle: the request is evaluated once it has one",
			    servers[k]);
		else
			rc = ask(ps, &res->sv, req, len, denied, message);
		resource_put(res);
		SG_TRY(rc);
	}
	return SG_OK;
}

void sg_policyserver_resource_clear(sg_policyserver *ps)
{
	resource *gone[SG_POLICYSERVER_RESOURCES_MAX];
	pthread_mutex_lock(&ps->mu);
	size_t n = ps->nres;
	memcpy(gone, ps->res, n * sizeof(gone[0]));
	ps->nres = 0;
	pthread_mutex_unlock(&ps->mu);
	for (size_t i = 0; i < n; i++)
		resource_put(gone[i]);
}

size_t sg_policyserver_resource_count(sg_policyserver *ps)
{
	pthread_mutex_lock(&ps->mu);
	size_t n = ps->nres;
	pthread_mutex_unlock(&ps->mu);
	return n;
}

/* ---- introspection ---------------------------------------------------------- */

size_t sg_policyserver_count(const sg_policyserver *ps)
{
	return ps->n;
}

int sg_policyserver_stats_get(const sg_policyserver *ps, size_t i, sg_policyserver_stats *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(i < ps->n, SG_EINVAL, "external-policy-servers: no server %zu", i);
	const server *sv = &ps->s[i];
	out->name = sv->name;
	out->target = sv->target;
	out->tls = sv->ca_pem != NULL;
	out->approved = atomic_load_explicit(&sv->approved, memory_order_relaxed);
	out->denied = atomic_load_explicit(&sv->denied, memory_order_relaxed);
	out->errors = atomic_load_explicit(&sv->errors, memory_order_relaxed);
	out->timeouts = atomic_load_explicit(&sv->timeouts, memory_order_relaxed);
	out->unavailable = atomic_load_explicit(&sv->unavailable, memory_order_relaxed);
	out->invalid = atomic_load_explicit(&sv->invalid, memory_order_relaxed);
	return SG_OK;
}

int sg_policyserver_metrics(sg_policyserver *ps, sg_metrics *reg)
{
	static const char *const labels[] = {"server", "result"};
	sg_metric *f = NULL;
	SG_TRY(sg_metrics_counter(&f, reg, "signet_policyserver_calls_total",
	                          "External policy server calls by server and result (approved, denied, error: the "
	                          "server's answer; failed: no answer: deadline, unavailable, bad response)",
	                          labels, 2));
	for (size_t i = 0; i < ps->n; i++) {
		for (int r = 0; r < R_N; r++) {
			const char *values[] = {ps->s[i].name, result_names[r]};
			sg_series *s = NULL;
			SG_TRY(sg_metric_series(&s, f, values));
			atomic_store_explicit(&ps->s[i].series[r], s, memory_order_release);
		}
	}
	/* ExternalPolicyServer objects come and go: one series per result for
	 * all of them, so the family's size does not follow the cluster's. */
	static const char *const result_label[] = {"result"};
	SG_TRY(sg_metrics_counter(&f, reg, "signet_policyserver_object_calls_total",
	                          "Calls to ExternalPolicyServer objects' servers, all of them together, by result "
	                          "(as signet_policyserver_calls_total)",
	                          result_label, 1));
	for (int r = 0; r < R_N; r++) {
		const char *values[] = {result_names[r]};
		sg_series *s = NULL;
		SG_TRY(sg_metric_series(&s, f, values));
		atomic_store_explicit(&ps->res_series[r], s, memory_order_release);
	}
	pthread_mutex_lock(&ps->mu);
	for (size_t i = 0; i < ps->nres; i++)
		for (int r = 0; r < R_N; r++)
			atomic_store(&ps->res[i]->sv.series[r], atomic_load(&ps->res_series[r]));
	pthread_mutex_unlock(&ps->mu);
	return SG_OK;
}
