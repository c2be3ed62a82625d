/*
 * sg_crpolicy: the evaluation core of a cert-manager approver-policy
 * compatible CertificateRequest approver (contract in sg_crpolicy.h).
 *
 * Sources reproduced (approver-policy v0.27.0, apimachinery v0.36.3, the
 * versions approver-policy v0.27.0 builds with; facts only, no code):
 *   pkg/internal/approver/allowed/evaluator.go     spec.allowed
 *   pkg/internal/approver/allowed/validation.go    its admission checks
 *   pkg/internal/approver/constraints/evaluator.go spec.constraints (and
 *                                  validation.go, its admission checks)
 *   pkg/internal/approver/manager/predicate/predicate.go  spec.selector
 *   pkg/internal/approver/manager/review.go        the messages
 *   pkg/internal/webhook/validator.go              plugins, selector
 *   pkg/internal/util/wildcard.go                  wildcards
 *   k8s.io/apimachinery pkg/util/validation/field  Error.Error(), Path,
 *                                                  ErrorList.ToAggregate
 *
 * How the pieces fit. A policy is read once into plain C (owned copies of
 * its strings: the JSON is not kept) and checked the way the API server's
 * schema and approver-policy's webhook check it; what they would refuse
 * makes the policy NotReady with their messages, so a policy admitted
 * without the webhook is never half-applied. Evaluation then walks the
 * request's facts (sg_csr_facts) in approver-policy's evaluator order,
 * appending field errors to a list whose rendering is apimachinery's:
 *
 *   <path>: <Type>[: <bad value>][: <detail>]
 *   bad value: a string with Go's %q; bool and int with %v; anything else
 *              (here: []string, map[string]string) with encoding/json,
 *              which since apimachinery v0.34 replaces %#v;
 *   the list:  identical messages dropped; one -> itself; more ->
 *              "[" + joined with ", " + "]".
 *
 * Everything that can grow is bounded: policy lists (SG_CRPOLICY_MAX_*,
 * NotReady beyond), the facts (sg_csr_facts.h), and every message
 * (SG_CRPOLICY_MAX_MESSAGE, SG_EINTERNAL beyond). Wildcard matching is
 * the iterative O(n*m) matcher, on Go runes (an invalid UTF-8 byte is one
 * U+FFFD rune, as in Go's []rune conversion).
 *
 * Known differences from approver-policy (all fail closed):
 *   - CEL validations: the policy is NotReady (no CEL here).
 *   - Durations in whole seconds (sg_kubesign_duration_parse): a dropped
 *     fraction of a second is tracked (sg_crpolicy_duration_parse), so a
 *     bound is never passed that Go would enforce; when both the request
 *     and the bound have a fraction and the whole seconds are equal the
 *     request is denied; messages and the webhook's min <= max check use
 *     the whole seconds ("1s" where Go prints "1.5s").
 *   - allowed.usages outside cert-manager's KeyUsage enum make the policy
 *     NotReady, as the CRD's schema refuses them; so wildcards in usages,
 *     which approver-policy's evaluator would honour, never get there.
 *   - Go's strconv.Quote escapes runes unicode.IsPrint rejects; here the
 *     non-printable set is control, format, separator, private-use,
 *     noncharacter and the large unassigned blocks, not every unassigned
 *     code point (a CN holding an unassigned code point may print raw
 *     where Go prints \uXXXX).
 *   - A policy the webhook would refuse (approver-policy evaluates it
 *     anyway if the webhook was bypassed) is NotReady here; with invalid
 *     matchLabels approver-policy fails every evaluation instead, and
 *     reports the first bad label in Go's random map order where this
 *     reports the first in key order.
 *   - The SAN differences of sg_csr_facts.h (stricter decoding; an RFC
 *     ediPartyName is "not permitted" here where cert-manager's decoder
 *     fails on it with a Go-internal message).
 *   - A request with more than one subjectAltName extension: crypto/x509
 *     (Go >= 1.21) already refuses duplicate extensions, so approver-
 *     policy reports an evaluation error where its code means to deny
 *     with "CSR contains multiple SAN extensions; at most one is
 *     permitted"; this denies with that message.
 */
#include "sg_crpolicy.h"
#include "sg_guard.h"
#include "sg_kubesign.h"
#include "sg_names.h"
#include "sg_strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sstr {
	const char *p;
	size_t len;
} sstr;

static sstr cstr(const char *s)
{
	return (sstr){s ? s : "", s ? strlen(s) : 0};
}

static bool sstr_eq(sstr a, sstr b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static bool sstr_is(sstr a, const char *s)
{
	return sstr_eq(a, cstr(s));
}

/* ---- string builder ------------------------------------------------------- */

/* Every message is built by common/sg_strbuf, bounded by
 * SG_CRPOLICY_MAX_MESSAGE: a message that would pass it, like one out of
 * memory, fails as a whole (sg_strbuf_take answers NULL). */
typedef sg_strbuf sb;
static const sb SB_INIT = {.max = SG_CRPOLICY_MAX_MESSAGE};

static void sb_put(sb *b, sstr s)
{
	sg_strbuf_add(b, s.p, s.len);
}

/* ---- Go's text forms ------------------------------------------------------ */

/* utf8.DecodeRune: a valid sequence, or (U+FFFD, 1) for anything else. */
static uint32_t go_rune(const char *str, size_t n, size_t i, size_t *w)
{
	const uint8_t *s = (const uint8_t *)str;
	uint8_t c = s[i];
	size_t need;
	uint32_t cp;
	uint8_t lo = 0x80, hi = 0xbf;
	if (c < 0x80) {
		*w = 1;
		return c;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		need = 1;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2;
		cp = c & 0x0f;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3;
		cp = c & 0x07;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		goto bad;
	}
	if (n - i <= need)
		goto bad;
	for (size_t k = 1; k <= need; k++) {
		uint8_t d = s[i + k];
		if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xbf))
			goto bad;
		cp = cp << 6 | (d & 0x3f);
	}
	*w = need + 1;
	return cp;
bad:
	*w = 1;
	return 0xfffd;
}

/* unicode.IsPrint for runes >= 0x80, approximately (see the header):
 * false for C1 controls, format characters, separators other than the
 * ASCII space, private use, noncharacters and the large unassigned blocks. */
static bool go_isprint(uint32_t r)
{
	static const struct {
		uint32_t lo, hi;
	} np[] = {
	    {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},     {0x6dd, 0x6dd},
	    {0x70f, 0x70f},     {0x890, 0x891},     {0x8e2, 0x8e2},     {0x1680, 0x1680},   {0x180e, 0x180e},
	    {0x2000, 0x200f},   {0x2028, 0x202f},   {0x205f, 0x206f},   {0x3000, 0x3000},   {0xd800, 0xf8ff},
	    {0xfdd0, 0xfdef},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
	    {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0x323b0, 0xe00ff}, {0xe01f0, 0x10ffff},
	};
	if ((r & 0xfffe) == 0xfffe)
		return false;
	for (size_t i = 0; i < sizeof(np) / sizeof(np[0]); i++)
		if (r >= np[i].lo && r <= np[i].hi)
			return false;
	return true;
}

/* strconv.Quote (fmt's %q on a string). */
static void sb_go_quote(sb *b, sstr s)
{
	static const char hex[] = "0123456789abcdef";
	sg_strbuf_putc(b, '"');
	for (size_t i = 0; i < s.len && !sg_strbuf_failed(b);) {
		uint8_t c = (uint8_t)s.p[i];
		if (c < 0x80) {
			i++;
			if (c == '"' || c == '\\') {
				sg_strbuf_putc(b, '\\');
				sg_strbuf_putc(b, (char)c);
			} else if (c >= 0x20 && c < 0x7f) {
				sg_strbuf_putc(b, (char)c);
			} else {
				static const char esc[] = "abtnvfr"; /* \a..\r are 7..13 */
				if (c >= 7 && c <= 13) {
					sg_strbuf_putc(b, '\\');
					sg_strbuf_putc(b, esc[c - 7]);
				} else {
					char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
					sg_strbuf_add(b, x, 4);
				}
			}
			continue;
		}
		size_t w;
		uint32_t r = go_rune(s.p, s.len, i, &w);
		if (r == 0xfffd && w == 1) {
			char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
			sg_strbuf_add(b, x, 4);
		} else if (go_isprint(r)) {
			sg_strbuf_add(b, s.p + i, w);
		} else if (r < 0x10000) {
			sg_strbuf_printf(b, "\\u%04x", (unsigned)r);
		} else {
			sg_strbuf_printf(b, "\\U%08x", (unsigned)r);
		}
		i += w;
	}
	sg_strbuf_putc(b, '"');
}

/* encoding/json's string form (HTML-safe, as json.Marshal writes it). */
static void sb_json_quote(sb *b, sstr s)
{
	static const char hex[] = "0123456789abcdef";
	sg_strbuf_putc(b, '"');
	size_t start = 0;
	for (size_t i = 0; i < s.len && !sg_strbuf_failed(b);) {
		uint8_t c = (uint8_t)s.p[i];
		if (c < 0x80) {
			if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
				i++;
				continue;
			}
			sg_strbuf_add(b, s.p + start, i - start);
			switch (c) {
			case '"':
			case '\\': {
				char e[2] = {'\\', (char)c};
				sg_strbuf_add(b, e, 2);
				break;
			}
			case '\b':
				sg_strbuf_puts(b, "\\b");
				break;
			case '\f':
				sg_strbuf_puts(b, "\\f");
				break;
			case '\n':
				sg_strbuf_puts(b, "\\n");
				break;
			case '\r':
				sg_strbuf_puts(b, "\\r");
				break;
			case '\t':
				sg_strbuf_puts(b, "\\t");
				break;
			default: {
				char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
				sg_strbuf_add(b, e, 6);
			}
			}
			start = ++i;
			continue;
		}
		size_t w;
		uint32_t r = go_rune(s.p, s.len, i, &w);
		if ((r == 0xfffd && w == 1) || r == 0x2028 || r == 0x2029) {
			sg_strbuf_add(b, s.p + start, i - start);
			sg_strbuf_puts(b, r == 0x2028 ? "\\u2028" : r == 0x2029 ? "\\u2029" : "\\ufffd");
			start = i + w;
		}
		i += w;
	}
	sg_strbuf_add(b, s.p + start, s.len - start);
	sg_strbuf_putc(b, '"');
}

static void sb_json_list(sb *b, const sstr *v, size_t n)
{
	sg_strbuf_putc(b, '[');
	for (size_t i = 0; i < n; i++) {
		if (i)
			sg_strbuf_putc(b, ',');
		sb_json_quote(b, v[i]);
	}
	sg_strbuf_putc(b, ']');
}

/* time.Duration.String() of whole seconds. */
static void sb_duration(sb *b, int64_t seconds)
{
	char buf[48];
	if (seconds < 0) {
		sg_strbuf_putc(b, '-');
		seconds = seconds == INT64_MIN ? INT64_MAX : -seconds;
	}
	sg_kubesign_duration_format(seconds, buf, sizeof(buf));
	sg_strbuf_puts(b, buf);
}

/* ---- field.ErrorList ------------------------------------------------------- */

typedef struct ferrs {
	char **v;
	size_t n, cap;
	bool failed;
} ferrs;

/* Takes the message built in m; drops it when an identical one is there
 * (ErrorList.ToAggregate). */
static void ferrs_push(ferrs *l, sb *m)
{
	char *s = sg_strbuf_take(m);
	if (!s || l->failed) {
		free(s);
		l->failed = true;
		return;
	}
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0) {
			free(s);
			return;
		}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		char **n = realloc(l->v, cap * sizeof(*n));
		if (!n) {
			free(s);
			l->failed = true;
			return;
		}
		l->v = n;
		l->cap = cap;
	}
	l->v[l->n++] = s;
}

static void ferrs_free(ferrs *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/* The aggregate's Error(): nothing for an empty list. */
static void sb_aggregate(sb *b, const ferrs *l)
{
	if (l->n == 1) {
		sg_strbuf_puts(b, l->v[0]);
		return;
	}
	if (l->n == 0)
		return;
	sg_strbuf_putc(b, '[');
	for (size_t i = 0; i < l->n; i++) {
		if (i)
			sg_strbuf_puts(b, ", ");
		sg_strbuf_puts(b, l->v[i]);
	}
	sg_strbuf_putc(b, ']');
}

/* One error: "<path>: <type>", the caller appends ": <value>", then
 * fe_end adds ": <detail>" when there is one. */
static void fe_begin(sb *m, const char *path, const char *type)
{
	sg_strbuf_puts(m, path);
	sg_strbuf_puts(m, ": ");
	sg_strbuf_puts(m, type);
}

static void fe_end(ferrs *l, sb *m, sstr detail)
{
	if (detail.len) {
		sg_strbuf_puts(m, ": ");
		sb_put(m, detail);
	}
	ferrs_push(l, m);
}

static void fe_invalid_str(ferrs *l, const char *path, sstr value, sstr detail)
{
	sb m = SB_INIT;
	fe_begin(&m, path, "Invalid value: ");
	sb_go_quote(&m, value);
	fe_end(l, &m, detail);
}

static void fe_invalid_list(ferrs *l, const char *path, const sstr *v, size_t n, sstr detail)
{
	sb m = SB_INIT;
	fe_begin(&m, path, "Invalid value: ");
	sb_json_list(&m, v, n);
	fe_end(l, &m, detail);
}

static void fe_invalid_int(ferrs *l, const char *path, long long v, const char *detail)
{
	sb m = SB_INIT;
	fe_begin(&m, path, "Invalid value: ");
	sg_strbuf_printf(&m, "%lld", v);
	fe_end(l, &m, cstr(detail));
}

static void fe_required(ferrs *l, const char *path, const char *detail)
{
	sb m = SB_INIT;
	fe_begin(&m, path, "Required value");
	fe_end(l, &m, cstr(detail));
}

/* Joins strings with ", " (strings.Join) into a new builder. */
static void sb_join(sb *b, const sstr *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (i)
			sg_strbuf_puts(b, ", ");
		sb_put(b, v[i]);
	}
}

/* ---- wildcards ------------------------------------------------------------ */

static bool wild(sstr pat, sstr s)
{
	if (pat.len == 0)
		return s.len == 0;
	if (pat.len == 1 && pat.p[0] == '*')
		return true;
	size_t px = 0, sx = 0, star_p = SIZE_MAX, star_s = 0;
	while (sx < s.len) {
		size_t pw, sw;
		if (px < pat.len && pat.p[px] == '*') {
			star_p = px++;
			star_s = sx;
			continue;
		}
		uint32_t sr = go_rune(s.p, s.len, sx, &sw);
		if (px < pat.len && go_rune(pat.p, pat.len, px, &pw) == sr) {
			px += pw;
			sx += sw;
			continue;
		}
		if (star_p == SIZE_MAX)
			return false;
		go_rune(s.p, s.len, star_s, &sw);
		star_s += sw;
		sx = star_s;
		px = star_p + 1;
	}
	while (px < pat.len && pat.p[px] == '*')
		px++;
	return px == pat.len;
}

static bool wild_any(const sstr *pats, size_t n, sstr s)
{
	for (size_t i = 0; i < n; i++)
		if (wild(pats[i], s))
			return true;
	return false;
}

static bool wild_subset(const sstr *pats, size_t np, const sstr *members, size_t nm)
{
	for (size_t i = 0; i < nm; i++)
		if (!wild_any(pats, np, members[i]))
			return false;
	return true;
}

bool sg_crpolicy_wildcard_matches(const char *pattern, const char *s)
{
	return wild(cstr(pattern), cstr(s));
}

bool sg_crpolicy_wildcard_subset(const char *const *patterns, size_t npatterns, const char *const *members,
                                 size_t nmembers)
{
	for (size_t i = 0; i < nmembers; i++) {
		bool ok = false;
		for (size_t j = 0; j < npatterns && !ok; j++)
			ok = wild(cstr(patterns[j]), cstr(members[i]));
		if (!ok)
			return false;
	}
	return true;
}

/* ---- the compiled policy -------------------------------------------------- */

typedef struct slist {
	sstr *v;
	size_t n;
} slist;

/* CertificateRequestPolicyAllowedString / ...StringSlice: value(s),
 * required, and the CEL rules (kept only to name them in NotReady). */
typedef struct allowed_field {
	bool present;
	bool has_value; /* value / values set (values may be an empty list) */
	sstr value;
	slist values;
	bool required;
	slist rules;
} allowed_field;

typedef struct other_entry {
	sstr oid;
	allowed_field f;
} other_entry;

enum { SUBJ_O, SUBJ_C, SUBJ_OU, SUBJ_L, SUBJ_ST, SUBJ_STREET, SUBJ_POSTAL, SUBJ_COUNT };

static const struct {
	const char *oid;
	const char *field; /* allowed.subject.<field> */
} subject_slots[SUBJ_COUNT] = {
    {"2.5.4.10", "organizations"}, {"2.5.4.6", "countries"}, {"2.5.4.11", "organizationalUnits"},
    {"2.5.4.7", "localities"},     {"2.5.4.8", "provinces"}, {"2.5.4.9", "streetAddresses"},
    {"2.5.4.17", "postalCodes"},
};
#define OID_CN "2.5.4.3"
#define OID_SERIAL "2.5.4.5"

enum { SAN_DNS, SAN_IP, SAN_URI, SAN_EMAIL, SAN_FIELDS };
static const char *const san_fields[SAN_FIELDS] = {"dnsNames", "ipAddresses", "uris", "emailAddresses"};
static const sg_csr_facts_san_type san_types[SAN_FIELDS] = {SG_CSR_FACTS_SAN_DNS, SG_CSR_FACTS_SAN_IP,
                                                            SG_CSR_FACTS_SAN_URI, SG_CSR_FACTS_SAN_EMAIL};

struct sg_crpolicy {
	char *name;
	char *condition;
	bool ready;

	bool has_allowed;
	allowed_field cn, serial, san[SAN_FIELDS], subj[SUBJ_COUNT];
	bool has_subject;
	bool has_is_ca, is_ca;
	bool has_usages;
	slist usages;
	other_entry *other_names, *other_attrs;
	size_t n_other_names, n_other_attrs;

	bool has_constraints;
	bool has_min, has_max;
	int64_t min_s, max_s;
	bool min_frac, max_frac; /* a fraction of a second was dropped (max's: informative only) */
	bool has_pk, has_alg, has_min_size, has_max_size;
	sstr alg;
	long long min_size, max_size;

	bool has_issuer_sel, has_sel_name, has_sel_kind, has_sel_group;
	sstr sel_name, sel_kind, sel_group;
	bool has_ns_sel, has_match_labels;
	slist match_names;
	sstr *label_keys, *label_values;
	size_t n_labels;

	size_t n_plugins;
	sstr *plugin_names;
	json_t **plugin_values;
	bool *plugin_known;

	void **allocs; /* everything above that is owned, freed together */
	size_t n_allocs, cap_allocs;
};

/* ---- compiling --------------------------------------------------------------- */

typedef struct cc {
	sg_crpolicy *p;
	ferrs schema;  /* what the API server's schema (and our bounds) refuse */
	ferrs webhook; /* what approver-policy's admission webhook refuses */
	bool oom;
	const sg_crpolicy_options *opts;
} cc;

static void *cc_alloc(cc *c, size_t n)
{
	sg_crpolicy *p = c->p;
	if (c->oom)
		return NULL;
	if (p->n_allocs == p->cap_allocs) {
		size_t cap = p->cap_allocs ? 2 * p->cap_allocs : 32;
		void **a = realloc(p->allocs, cap * sizeof(*a));
		if (!a) {
			c->oom = true;
			return NULL;
		}
		p->allocs = a;
		p->cap_allocs = cap;
	}
	void *m = calloc(1, n ? n : 1);
	if (!m) {
		c->oom = true;
		return NULL;
	}
	p->allocs[p->n_allocs++] = m;
	return m;
}

static const char *json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "object";
	case JSON_ARRAY:
		return "array";
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
		return "integer";
	case JSON_REAL:
		return "number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "boolean";
	default:
		return "null";
	}
}

/* A member of obj, or NULL when absent or null (the API server drops nulls
 * of fields that are not nullable). */
static const json_t *member(const json_t *obj, const char *key)
{
	const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
	return json_is_null(v) ? NULL : v;
}

/* The API server's schema error for a value of the wrong type. */
static bool typed(cc *c, const char *path, const json_t *v, json_type want, const char *wantname)
{
	if (json_typeof(v) == want || (want == JSON_TRUE && json_is_boolean(v)))
		return true;
	sb m = SB_INIT;
	const char *got = json_type_name(v);
	fe_begin(&m, path, "Invalid value: ");
	sb_go_quote(&m, cstr(got));
	sg_strbuf_printf(&m, ": %s in body must be of type %s: \"%s\"", path, wantname, got);
	ferrs_push(&c->schema, &m);
	return false;
}

/* A field error "Too long" when n > SG_CRPOLICY_MAX_STRING; whether so. */
static bool too_long(cc *c, const char *path, size_t n)
{
	if (n <= SG_CRPOLICY_MAX_STRING)
		return false;
	sb m = SB_INIT;
	fe_begin(&m, path, "Too long");
	sg_strbuf_printf(&m, ": may not be more than %d bytes", SG_CRPOLICY_MAX_STRING);
	ferrs_push(&c->schema, &m);
	return true;
}

static bool read_string(cc *c, const char *path, const json_t *v, sstr *out)
{
	if (!typed(c, path, v, JSON_STRING, "string"))
		return false;
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);
	if (too_long(c, path, n))
		return false;
	if (memchr(s, '\0', n)) {
		fe_invalid_str(&c->schema, path, (sstr){s, n}, cstr("must not contain a NUL character"));
		return false;
	}
	char *d = cc_alloc(c, n + 1);
	if (!d)
		return false;
	memcpy(d, s, n);
	*out = (sstr){d, n};
	return true;
}

static bool too_many(cc *c, const char *path, size_t n, size_t max)
{
	if (n <= max)
		return false;
	sb m = SB_INIT;
	fe_begin(&m, path, "Too many: ");
	sg_strbuf_printf(&m, "%zu: must have at most %zu items", n, max);
	ferrs_push(&c->schema, &m);
	return true;
}

static bool read_strings(cc *c, const char *path, const json_t *v, slist *out)
{
	if (!typed(c, path, v, JSON_ARRAY, "array") || too_many(c, path, json_array_size(v), SG_CRPOLICY_MAX_VALUES))
		return false;
	size_t n = json_array_size(v);
	out->v = cc_alloc(c, n * sizeof(sstr));
	if (!out->v)
		return false;
	bool ok = true;
	for (size_t i = 0; i < n; i++) {
		char ipath[256];
		snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
		ok = read_string(c, ipath, json_array_get(v, i), &out->v[out->n]) && ok;
		if (ok)
			out->n++;
	}
	return ok;
}

static bool read_bool(cc *c, const char *path, const json_t *v, bool *out)
{
	if (!typed(c, path, v, JSON_TRUE, "boolean"))
		return false;
	*out = json_is_true(v);
	return true;
}

/* validations: [{rule, message}]: the rules are kept to be named. */
static void read_rules(cc *c, const char *path, const json_t *v, slist *out)
{
	if (!typed(c, path, v, JSON_ARRAY, "array") || too_many(c, path, json_array_size(v), SG_CRPOLICY_MAX_ENTRIES))
		return;
	size_t n = json_array_size(v);
	out->v = cc_alloc(c, n * sizeof(sstr));
	if (!out->v)
		return;
	for (size_t i = 0; i < n; i++) {
		char ipath[256];
		const json_t *e = json_array_get(v, i);
		/* Field paths are short (our own names and an index); a cut one
		 * would only shorten a message, but say so rather than hide it. */
		int w = snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (!typed(c, ipath, e, JSON_OBJECT, "object"))
			continue;
		sstr rule = {"", 0};
		const json_t *r = member(e, "rule");
		w = snprintf(ipath, sizeof(ipath), "%s[%zu].rule", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (r && !read_string(c, ipath, r, &rule))
			continue;
		out->v[out->n++] = rule;
	}
}

/* allowed.<field>: {value|values, required, validations}. */
static void read_allowed(cc *c, const char *path, const json_t *v, bool slice, allowed_field *out)
{
	char sub[256];
	if (!v || !typed(c, path, v, JSON_OBJECT, "object"))
		return;
	out->present = true;
	const json_t *val = member(v, slice ? "values" : "value");
	snprintf(sub, sizeof(sub), "%s.%s", path, slice ? "values" : "value");
	if (val)
		out->has_value =
		    slice ? read_strings(c, sub, val, &out->values) : read_string(c, sub, val, &out->value);
	const json_t *req = member(v, "required");
	snprintf(sub, sizeof(sub), "%s.required", path);
	if (req)
		read_bool(c, sub, req, &out->required);
	const json_t *rules = member(v, "validations");
	snprintf(sub, sizeof(sub), "%s.validations", path);
	if (rules)
		read_rules(c, sub, rules, &out->rules);
}

static void read_others(cc *c, const char *path, const json_t *v, other_entry **out, size_t *count)
{
	if (!typed(c, path, v, JSON_ARRAY, "array") || too_many(c, path, json_array_size(v), SG_CRPOLICY_MAX_ENTRIES))
		return;
	size_t n = json_array_size(v);
	*out = cc_alloc(c, n * sizeof(other_entry));
	if (!*out)
		return;
	for (size_t i = 0; i < n; i++) {
		char ipath[256], sub[300];
		const json_t *e = json_array_get(v, i);
		/* Field paths are short (our own names and an index); a cut one
		 * would only shorten a message, but say so rather than hide it. */
		int w = snprintf(ipath, sizeof(ipath), "%s[%zu]", path, i);
		if (w < 0 || (size_t)w >= sizeof(ipath))
			memcpy(ipath + sizeof(ipath) - 4, "...", 4);
		if (!typed(c, ipath, e, JSON_OBJECT, "object"))
			continue;
		other_entry *o = &(*out)[*count];
		const json_t *oid = member(e, "oid");
		snprintf(sub, sizeof(sub), "%s.oid", ipath);
		if (!oid) {
			fe_required(&c->schema, sub, ""); /* the schema requires it */
			continue;
		}
		if (!read_string(c, sub, oid, &o->oid))
			continue;
		read_allowed(c, ipath, e, true, &o->f);
		(*count)++;
	}
}

static void read_subject(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	char path[128];
	if (!typed(c, "spec.allowed.subject", v, JSON_OBJECT, "object"))
		return;
	p->has_subject = true;
	for (int i = 0; i < SUBJ_COUNT; i++) {
		snprintf(path, sizeof(path), "spec.allowed.subject.%s", subject_slots[i].field);
		read_allowed(c, path, member(v, subject_slots[i].field), true, &p->subj[i]);
	}
	read_allowed(c, "spec.allowed.subject.serialNumber", member(v, "serialNumber"), false, &p->serial);
	const json_t *o = member(v, "otherAttributes");
	if (o)
		read_others(c, "spec.allowed.subject.otherAttributes", o, &p->other_attrs, &p->n_other_attrs);
}

/* cert-manager's KeyUsage enum, which the CRD's schema enforces on
 * allowed.usages (so a wildcard never reaches the evaluator there). */
static const char *const key_usages[] = {
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
};

static void check_usage(cc *c, size_t i, sstr u)
{
	for (size_t k = 0; k < sizeof(key_usages) / sizeof(key_usages[0]); k++)
		if (sstr_is(u, key_usages[k]))
			return;
	sb m = SB_INIT;
	sg_strbuf_printf(&m, "spec.allowed.usages[%zu]: Unsupported value: ", i);
	sb_go_quote(&m, u);
	for (size_t k = 0; k < sizeof(key_usages) / sizeof(key_usages[0]); k++) {
		sg_strbuf_puts(&m, k ? ", " : ": supported values: ");
		sb_go_quote(&m, cstr(key_usages[k]));
	}
	ferrs_push(&c->schema, &m);
}

static void read_allowed_spec(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.allowed", v, JSON_OBJECT, "object"))
		return;
	p->has_allowed = true;
	read_allowed(c, "spec.allowed.commonName", member(v, "commonName"), false, &p->cn);
	for (int i = 0; i < SAN_FIELDS; i++) {
		char path[64];
		snprintf(path, sizeof(path), "spec.allowed.%s", san_fields[i]);
		read_allowed(c, path, member(v, san_fields[i]), true, &p->san[i]);
	}
	const json_t *isca = member(v, "isCA");
	if (isca)
		p->has_is_ca = read_bool(c, "spec.allowed.isCA", isca, &p->is_ca);
	const json_t *usages = member(v, "usages");
	if (usages)
		p->has_usages = read_strings(c, "spec.allowed.usages", usages, &p->usages);
	for (size_t i = 0; i < p->usages.n; i++)
		check_usage(c, i, p->usages.v[i]);
	const json_t *subject = member(v, "subject");
	if (subject)
		read_subject(c, subject);
	const json_t *others = member(v, "otherNames");
	if (others)
		read_others(c, "spec.allowed.otherNames", others, &p->other_names, &p->n_other_names);
}

int sg_crpolicy_duration_parse(const char *s, int64_t *seconds, bool *fraction)
{
	*seconds = 0;
	*fraction = false;
	SG_ENSURE(s, SG_EINVAL, "duration: missing");
	bool neg = s[0] == '-' && s[1] != '+' && s[1] != '-';
	const char *t = neg ? s + 1 : s;
	int64_t sec = 0, up = 0;
	SG_TRY(sg_kubesign_duration_parse(t, &sec));
	/* The parser truncates to seconds: with 999999999ns more it gives the
	 * value rounded up instead, so the two differ exactly when a fraction
	 * was dropped. Where the longer string cannot be parsed (the 64-byte
	 * bound, the int64 bound) a fraction cannot be ruled out. */
	char more[96];
	int n = snprintf(more, sizeof(more), "%s999999999ns", t);
	if (n < 0 || (size_t)n >= sizeof(more) || sg_kubesign_duration_parse(more, &up) != SG_OK) {
		sg_error_clear();
		*fraction = true;
	} else {
		*fraction = up != sec;
	}
	*seconds = neg ? -sec : sec;
	return SG_OK;
}

/* A Go duration in a policy. */
static bool read_duration(cc *c, const char *path, const json_t *v, int64_t *out, bool *fraction)
{
	sstr s;
	if (!read_string(c, path, v, &s))
		return false;
	if (sg_crpolicy_duration_parse(s.p, out, fraction) != SG_OK) {
		fe_invalid_str(&c->schema, path, s, cstr(sg_error_last()->msg));
		sg_error_clear();
		return false;
	}
	return true;
}

static bool read_int(cc *c, const char *path, const json_t *v, long long *out)
{
	if (!typed(c, path, v, JSON_INTEGER, "integer"))
		return false;
	*out = (long long)json_integer_value(v);
	return true;
}

static void read_constraints(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.constraints", v, JSON_OBJECT, "object"))
		return;
	p->has_constraints = true;
	const json_t *d;
	if ((d = member(v, "minDuration")))
		p->has_min = read_duration(c, "spec.constraints.minDuration", d, &p->min_s, &p->min_frac);
	if ((d = member(v, "maxDuration")))
		p->has_max = read_duration(c, "spec.constraints.maxDuration", d, &p->max_s, &p->max_frac);
	const json_t *pk = member(v, "privateKey");
	if (!pk || !typed(c, "spec.constraints.privateKey", pk, JSON_OBJECT, "object"))
		return;
	p->has_pk = true;
	if ((d = member(pk, "algorithm")))
		p->has_alg = read_string(c, "spec.constraints.privateKey.algorithm", d, &p->alg);
	if ((d = member(pk, "minSize")))
		p->has_min_size = read_int(c, "spec.constraints.privateKey.minSize", d, &p->min_size);
	if ((d = member(pk, "maxSize")))
		p->has_max_size = read_int(c, "spec.constraints.privateKey.maxSize", d, &p->max_size);
}

static void read_selector(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.selector", v, JSON_OBJECT, "object"))
		return;
	const json_t *ir = member(v, "issuerRef"), *ns = member(v, "namespace"), *d;
	if (ir && typed(c, "spec.selector.issuerRef", ir, JSON_OBJECT, "object")) {
		p->has_issuer_sel = true;
		if ((d = member(ir, "name")))
			p->has_sel_name = read_string(c, "spec.selector.issuerRef.name", d, &p->sel_name);
		if ((d = member(ir, "kind")))
			p->has_sel_kind = read_string(c, "spec.selector.issuerRef.kind", d, &p->sel_kind);
		if ((d = member(ir, "group")))
			p->has_sel_group = read_string(c, "spec.selector.issuerRef.group", d, &p->sel_group);
	}
	if (ns && typed(c, "spec.selector.namespace", ns, JSON_OBJECT, "object")) {
		p->has_ns_sel = true;
		if ((d = member(ns, "matchNames")))
			read_strings(c, "spec.selector.namespace.matchNames", d, &p->match_names);
		if ((d = member(ns, "matchLabels")) &&
		    typed(c, "spec.selector.namespace.matchLabels", d, JSON_OBJECT, "object") &&
		    !too_many(c, "spec.selector.namespace.matchLabels", json_object_size(d), SG_CRPOLICY_MAX_ENTRIES)) {
			size_t n = json_object_size(d);
			p->has_match_labels = true;
			p->label_keys = cc_alloc(c, n * sizeof(sstr));
			p->label_values = cc_alloc(c, n * sizeof(sstr));
			if (!p->label_keys || !p->label_values)
				return;
			const char *k;
			const json_t *lv;
			json_object_foreach((json_t *)d, k, lv)
			{
				size_t kn = strlen(k);
				sstr value;
				if (too_long(c, "spec.selector.namespace.matchLabels", kn))
					continue;
				sb path = SB_INIT;
				sg_strbuf_puts(&path, "spec.selector.namespace.matchLabels.");
				sg_strbuf_puts(&path, k);
				char *ps = sg_strbuf_take(&path);
				if (!ps) {
					c->oom = true;
					return;
				}
				bool ok = read_string(c, ps, lv, &value);
				free(ps);
				char *kd = ok ? cc_alloc(c, kn + 1) : NULL;
				if (!kd)
					continue;
				memcpy(kd, k, kn);
				/* kept sorted by key, as Go's encoding/json prints a map */
				size_t at = p->n_labels;
				while (at > 0 && strcmp(p->label_keys[at - 1].p, kd) > 0) {
					p->label_keys[at] = p->label_keys[at - 1];
					p->label_values[at] = p->label_values[at - 1];
					at--;
				}
				p->label_keys[at] = (sstr){kd, kn};
				p->label_values[at] = value;
				p->n_labels++;
			}
		}
	}
}

static void read_plugins(cc *c, const json_t *v)
{
	sg_crpolicy *p = c->p;
	if (!typed(c, "spec.plugins", v, JSON_OBJECT, "object") ||
	    too_many(c, "spec.plugins", json_object_size(v), SG_CRPOLICY_MAX_ENTRIES))
		return;
	size_t n = json_object_size(v);
	p->plugin_names = cc_alloc(c, n * sizeof(sstr));
	p->plugin_values = cc_alloc(c, n * sizeof(json_t *));
	p->plugin_known = cc_alloc(c, n * sizeof(bool));
	if (!p->plugin_names || !p->plugin_values || !p->plugin_known)
		return;
	const char *name;
	const json_t *pv;
	json_object_foreach((json_t *)v, name, pv)
	{
		size_t nn = strlen(name);
		if (too_long(c, "spec.plugins", nn))
			continue;
		sb path = SB_INIT;
		sg_strbuf_puts(&path, "spec.plugins.");
		sg_strbuf_puts(&path, name);
		char *ps = sg_strbuf_take(&path);
		if (!ps) {
			c->oom = true;
			return;
		}
		bool ok = typed(c, ps, pv, JSON_OBJECT, "object");
		const json_t *values = ok ? member(pv, "values") : NULL;
		if (values) {
			sb vp = SB_INIT;
			sg_strbuf_puts(&vp, ps);
			sg_strbuf_puts(&vp, ".values");
			char *vps = sg_strbuf_take(&vp);
			ok = vps && typed(c, vps, values, JSON_OBJECT, "object");
			const char *k;
			const json_t *s;
			if (ok) {
				json_object_foreach((json_t *)values, k, s)
				{
					if (json_is_string(s))
						continue;
					sb kp = SB_INIT;
					sg_strbuf_puts(&kp, vps);
					sg_strbuf_putc(&kp, '.');
					sg_strbuf_puts(&kp, k);
					char *kps = sg_strbuf_take(&kp);
					if (kps)
						typed(c, kps, s, JSON_STRING, "string");
					else
						c->oom = true;
					free(kps);
					ok = false;
				}
			}
			free(vps);
		}
		free(ps);
		char *nd = cc_alloc(c, nn + 1);
		if (!ok || !nd)
			continue;
		memcpy(nd, name, nn);
		json_t *copy = values ? json_deep_copy(values) : NULL;
		if (values && !copy) {
			c->oom = true;
			return;
		}
		size_t at = p->n_plugins; /* kept sorted by name */
		while (at > 0 && strcmp(p->plugin_names[at - 1].p, nd) > 0) {
			p->plugin_names[at] = p->plugin_names[at - 1];
			p->plugin_values[at] = p->plugin_values[at - 1];
			at--;
		}
		p->plugin_names[at] = (sstr){nd, nn};
		p->plugin_values[at] = copy;
		p->n_plugins++;
	}
	for (size_t i = 0; i < p->n_plugins; i++)
		for (size_t j = 0; c->opts && j < c->opts->plugin_count; j++)
			if (c->opts->plugins[j] && sstr_is(p->plugin_names[i], c->opts->plugins[j]))
				p->plugin_known[i] = true;
}

/* ---- the admission webhook's checks ---------------------------------------- */

#define CEL_UNSUPPORTED "CEL validations are not supported by this approver (signet); the policy cannot be evaluated"
#define NEED_VALUES "at least one of 'values' or 'validations' must be defined if field is 'required'"
#define NEED_VALUE "at least one of 'value' or 'validations' must be defined if field is 'required'"

static void check_field(cc *c, const char *path, const allowed_field *f, bool slice)
{
	char sub[300];
	if (!f->present)
		return;
	if (f->required && !f->has_value && f->rules.n == 0) {
		snprintf(sub, sizeof(sub), "%s.%s", path, slice ? "values" : "value");
		fe_required(&c->webhook, sub, slice ? NEED_VALUES : NEED_VALUE);
	}
	for (size_t i = 0; i < f->rules.n; i++) {
		snprintf(sub, sizeof(sub), "%s.validations[%zu]", path, i);
		fe_invalid_str(&c->webhook, sub, f->rules.v[i], cstr(CEL_UNSUPPORTED));
	}
}

/* cert-manager's ParseObjectIdentifier (strconv.Atoi per arc) and the
 * round trip through ObjectIdentifier.String() approver-policy requires. */
static const char *oid_problem(sstr oid)
{
	static const char canonical[] = "must be a valid, canonical dotted ASN.1 object identifier (e.g. "
	                                "\"1.3.6.1.4.1.311.20.2.3\")";
	if (oid.len == 0)
		return canonical;
	bool negative = false;
	for (size_t i = 0; i <= oid.len;) {
		size_t j = i;
		while (j < oid.len && oid.p[j] != '.')
			j++;
		size_t k = i;
		if (k < j && oid.p[k] == '-') {
			negative = true;
			k++;
		}
		if (k == j || (oid.p[k] == '0' && j - k > 1) || (oid.p[k] == '0' && k > i))
			return canonical; /* empty, leading zero, "-0" */
		if (j - k > 19 ||
		    (j - k == 19 && memcmp(oid.p + k, k > i ? "9223372036854775808" : "9223372036854775807", 19) > 0))
			return canonical; /* beyond int64: Atoi fails */
		for (size_t d = k; d < j; d++)
			if (oid.p[d] < '0' || oid.p[d] > '9')
				return canonical;
		i = j + 1;
	}
	return negative ? "OID arcs must be non-negative" : NULL;
}

static bool named_subject_oid(sstr oid)
{
	if (sstr_is(oid, OID_CN) || sstr_is(oid, OID_SERIAL))
		return true;
	for (int i = 0; i < SUBJ_COUNT; i++)
		if (sstr_is(oid, subject_slots[i].oid))
			return true;
	return false;
}

static void check_others(cc *c, const char *base, const other_entry *e, size_t n, bool attributes)
{
	for (size_t i = 0; i < n; i++) {
		char path[128], sub[300];
		snprintf(path, sizeof(path), "%s[%zu]", base, i);
		snprintf(sub, sizeof(sub), "%s.oid", path);
		const char *why = oid_problem(e[i].oid);
		if (why)
			fe_invalid_str(&c->webhook, sub, e[i].oid, cstr(why));
		else if (attributes && named_subject_oid(e[i].oid))
			fe_invalid_str(&c->webhook, sub, e[i].oid,
			               cstr("this OID is covered by a dedicated allowed.commonName / allowed.subject.* "
			                    "field; configure it there instead of otherAttributes"));
		check_field(c, path, &e[i].f, true);
	}
}

/* apimachinery's label key and value checks (content.IsLabelKey,
 * IsLabelValue), joined with "; " as NewRequirement joins them. */
#define LABEL_FMT "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
#define LABEL_KEY_MSG                                                                                                  \
	"must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "       \
	"character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '" LABEL_FMT "')"
#define DNS1123_SUBDOMAIN_MSG                                                                                          \
	"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "     \
	"start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "              \
	"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
#define LABEL_VALUE_MSG                                                                                                \
	"a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "      \
	"start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "       \
	"for validation is '(" LABEL_FMT ")?')"

/* apimachinery reports a length and a pattern apart, so these check the
 * pattern alone (sg_names with no length bound); the lengths are tested
 * where the messages are written. */
static bool label_name_ok(const char *s, size_t n)
{
	return sg_names_label_name(s, n, SIZE_MAX);
}

static bool dns1123_subdomain_ok(const char *s, size_t n)
{
	return sg_names_dns_subdomain_max(s, n, SIZE_MAX);
}

static void label_key_errors(sb *m, sstr k)
{
	const char *slash = memchr(k.p, '/', k.len);
	const char *name = k.p;
	size_t nn = k.len;
	bool any = false;
	if (slash) {
		if (memchr(slash + 1, '/', k.len - (size_t)(slash - k.p) - 1)) {
			sg_strbuf_puts(m, "a valid label key " LABEL_KEY_MSG
			                  " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
			return;
		}
		size_t pn = (size_t)(slash - k.p);
		name = slash + 1;
		nn = k.len - pn - 1;
		if (pn == 0) {
			sg_strbuf_puts(m, "prefix part must be non-empty");
			any = true;
		} else {
			if (pn > 253) {
				sg_strbuf_puts(m, "prefix part must be no more than 253 bytes");
				any = true;
			}
			if (!dns1123_subdomain_ok(k.p, pn)) {
				sg_strbuf_puts(m, any ? "; prefix part " DNS1123_SUBDOMAIN_MSG
				                      : "prefix part " DNS1123_SUBDOMAIN_MSG);
				any = true;
			}
		}
	}
	if (nn == 0 || nn > 63) {
		sg_strbuf_puts(m, any ? "; " : "");
		sg_strbuf_puts(m, nn == 0 ? "name part must be non-empty" : "name part must be no more than 63 bytes");
		any = true;
	}
	if (!label_name_ok(name, nn)) {
		sg_strbuf_puts(m, any ? "; " : "");
		sg_strbuf_puts(m, "name part " LABEL_KEY_MSG);
	}
}

static bool label_key_ok(sstr k)
{
	sb m = SB_INIT;
	label_key_errors(&m, k);
	bool ok = m.len == 0 && !sg_strbuf_failed(&m);
	sg_strbuf_free(&m);
	return ok;
}

static void check_match_labels(cc *c)
{
	const sg_crpolicy *p = c->p;
	for (size_t i = 0; i < p->n_labels; i++) {
		sstr k = p->label_keys[i], v = p->label_values[i];
		bool key_ok = label_key_ok(k);
		bool value_ok = v.len <= 63 && (v.len == 0 || label_name_ok(v.p, v.len));
		if (key_ok && value_ok)
			continue;
		/* NewRequirement's aggregate: "key: ...", "values[0][<key>]: ..." */
		ferrs req = {0};
		if (!key_ok) {
			sb m = SB_INIT;
			fe_begin(&m, "key", "Invalid value: ");
			sb_go_quote(&m, k);
			sg_strbuf_puts(&m, ": ");
			label_key_errors(&m, k);
			ferrs_push(&req, &m);
		}
		if (!value_ok) {
			sb m = SB_INIT;
			sg_strbuf_puts(&m, "values[0][");
			sb_put(&m, k);
			sg_strbuf_puts(&m, "]: Invalid value: ");
			sb_go_quote(&m, v);
			sg_strbuf_puts(&m, ": ");
			if (v.len > 63)
				sg_strbuf_puts(&m, "must be no more than 63 bytes");
			if (v.len > 0 && !label_name_ok(v.p, v.len)) {
				sg_strbuf_puts(&m, v.len > 63 ? "; " : "");
				sg_strbuf_puts(&m, LABEL_VALUE_MSG);
			}
			ferrs_push(&req, &m);
		}
		sb m = SB_INIT;
		fe_begin(&m, "spec.selector.namespace.matchLabels", "Invalid value: {");
		for (size_t j = 0; j < p->n_labels; j++) {
			if (j)
				sg_strbuf_putc(&m, ',');
			sb_json_quote(&m, p->label_keys[j]);
			sg_strbuf_putc(&m, ':');
			sb_json_quote(&m, p->label_values[j]);
		}
		sg_strbuf_puts(&m, "}: ");
		sb_aggregate(&m, &req);
		if (req.failed)
			m.oom = true; /* the list could not be built: the message fails */
		ferrs_free(&req);
		ferrs_push(&c->webhook, &m);
		return; /* LabelSelectorAsSelector stops at the first bad label */
	}
}

static void check_constraints(cc *c)
{
	const sg_crpolicy *p = c->p;
	if (p->has_pk) {
		const char *pk = "spec.constraints.privateKey";
		char path[64];
		if (p->has_alg) {
			if (!sstr_is(p->alg, "RSA") && !sstr_is(p->alg, "ECDSA") && !sstr_is(p->alg, "Ed25519")) {
				sb m = SB_INIT;
				fe_begin(&m, "spec.constraints.privateKey.algorithm", "Unsupported value: ");
				sb_go_quote(&m, p->alg);
				sg_strbuf_puts(&m, ": supported values: \"RSA\", \"ECDSA\", \"Ed25519\"");
				ferrs_push(&c->webhook, &m);
			}
			if (sstr_is(p->alg, "Ed25519")) {
				snprintf(path, sizeof(path), "%s.maxSize", pk);
				if (p->has_max_size)
					fe_invalid_int(&c->webhook, path, p->max_size,
					               "maxSize cannot be defined with algorithm constraint Ed25519");
				snprintf(path, sizeof(path), "%s.minSize", pk);
				if (p->has_min_size)
					fe_invalid_int(&c->webhook, path, p->min_size,
					               "minSize cannot be defined with algorithm constraint Ed25519");
			}
		}
		snprintf(path, sizeof(path), "%s.maxSize", pk);
		if (p->has_max_size && (p->max_size < 0 || p->max_size > 8192))
			fe_invalid_int(&c->webhook, path, p->max_size, "must be between 0 and 8192 inclusive");
		snprintf(path, sizeof(path), "%s.minSize", pk);
		if (p->has_min_size && (p->min_size < 0 || p->min_size > 8192))
			fe_invalid_int(&c->webhook, path, p->min_size, "must be between 0 and 8192 inclusive");
		snprintf(path, sizeof(path), "%s.maxSize", pk);
		if (p->has_max_size && p->has_min_size && p->max_size < p->min_size)
			fe_invalid_int(&c->webhook, path, p->max_size,
			               "maxSize must be the same value as minSize or larger");
	}
	struct {
		bool when;
		const char *path;
		int64_t v;
		const char *detail;
	} d[] = {
	    {p->has_max && p->has_min && p->max_s < p->min_s, "spec.constraints.maxDuration", p->max_s,
	     "maxDuration must be the same value as minDuration or larger"},
	    {p->has_max && p->max_s < 0, "spec.constraints.maxDuration", p->max_s,
	     "maxDuration must be a value greater or equal to 0"},
	    {p->has_min && p->min_s < 0, "spec.constraints.minDuration", p->min_s,
	     "minDuration must be a value greater or equal to 0"},
	};
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
		if (!d[i].when)
			continue;
		sb v = SB_INIT;
		sb_duration(&v, d[i].v);
		char *vs = sg_strbuf_take(&v);
		if (!vs) {
			c->oom = true;
			return;
		}
		fe_invalid_str(&c->webhook, d[i].path, cstr(vs), cstr(d[i].detail));
		free(vs);
	}
}

/* validator.go, then allowed's and constraints' Validate, in that order. */
static void webhook_checks(cc *c)
{
	const sg_crpolicy *p = c->p;
	for (size_t i = 0; i < p->n_plugins; i++) {
		if (p->plugin_known[i])
			continue;
		sb m = SB_INIT;
		fe_begin(&m, "spec.plugins", "Unsupported value: ");
		sb_go_quote(&m, p->plugin_names[i]);
		for (size_t j = 0; c->opts && j < c->opts->plugin_count; j++) {
			sg_strbuf_puts(&m, j ? ", " : ": supported values: ");
			sb_go_quote(&m, cstr(c->opts->plugins[j]));
		}
		ferrs_push(&c->webhook, &m);
	}
	if (!p->has_issuer_sel && !p->has_ns_sel)
		fe_required(&c->webhook, "spec.selector",
		            "one of issuerRef or namespace must be defined, hint: `{}` on either matches everything");
	check_match_labels(c);

	if (p->has_allowed) {
		for (int i = 0; i < SAN_FIELDS; i++) {
			char path[64];
			snprintf(path, sizeof(path), "spec.allowed.%s", san_fields[i]);
			check_field(c, path, &p->san[i], true);
		}
		if (p->has_subject)
			for (int i = 0; i < SUBJ_COUNT; i++) {
				char path[64];
				snprintf(path, sizeof(path), "spec.allowed.subject.%s", subject_slots[i].field);
				check_field(c, path, &p->subj[i], true);
			}
		check_field(c, "spec.allowed.commonName", &p->cn, false);
		if (p->has_subject)
			check_field(c, "spec.allowed.subject.serialNumber", &p->serial, false);
		check_others(c, "spec.allowed.otherNames", p->other_names, p->n_other_names, false);
		if (p->has_subject)
			check_others(c, "spec.allowed.subject.otherAttributes", p->other_attrs, p->n_other_attrs, true);
	}
	if (p->has_constraints)
		check_constraints(c);
}

/* ---- compile, free, accessors ---------------------------------------------------- */

void sg_crpolicy_free(sg_crpolicy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_plugins; i++)
		json_decref(p->plugin_values[i]);
	for (size_t i = 0; i < p->n_allocs; i++)
		free(p->allocs[i]);
	free(p->allocs);
	free(p->condition);
	free(p);
}

int sg_crpolicy_compile(sg_crpolicy **out, const json_t *policy, const sg_crpolicy_options *opts)
{
	*out = NULL;
	SG_ENSURE(json_is_object(policy), SG_EINVAL, "CertificateRequestPolicy: not a JSON object");
	const json_t *name = member(member(policy, "metadata"), "name");
	SG_ENSURE(json_is_string(name) && json_string_length(name) > 0 &&
	              json_string_length(name) <= SG_CRPOLICY_MAX_STRING &&
	              strlen(json_string_value(name)) == json_string_length(name),
	          SG_EINVAL, "CertificateRequestPolicy: metadata.name is missing or not a name");

	sg_crpolicy *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "CertificateRequestPolicy: out of memory");
	cc c = {.p = p, .opts = opts};
	sstr n;
	if (read_string(&c, "metadata.name", name, &n))
		p->name = (char *)n.p;
	const json_t *spec = member(policy, "spec"), *v;
	if (spec && typed(&c, "spec", spec, JSON_OBJECT, "object")) {
		if ((v = member(spec, "allowed")))
			read_allowed_spec(&c, v);
		if ((v = member(spec, "constraints")))
			read_constraints(&c, v);
		if ((v = member(spec, "selector")))
			read_selector(&c, v);
		if ((v = member(spec, "plugins")))
			read_plugins(&c, v);
	}
	webhook_checks(&c);

	/* The condition: what the schema refused, then what the webhook did. */
	for (size_t i = 0; i < c.webhook.n; i++) {
		sb m = SB_INIT;
		sg_strbuf_puts(&m, c.webhook.v[i]);
		ferrs_push(&c.schema, &m);
	}
	sb msg = SB_INIT;
	p->ready = c.schema.n == 0;
	if (p->ready) {
		sg_strbuf_puts(&msg, SG_CRPOLICY_READY_MESSAGE);
	} else {
		sg_strbuf_puts(&msg, SG_CRPOLICY_NOT_READY_PREFIX);
		sb_aggregate(&msg, &c.schema);
	}
	bool failed = c.oom || c.schema.failed || c.webhook.failed || !p->name;
	ferrs_free(&c.schema);
	ferrs_free(&c.webhook);
	p->condition = sg_strbuf_take(&msg);
	if (failed || !p->condition) {
		sg_crpolicy_free(p);
		SG_BAIL(SG_EINTERNAL, "CertificateRequestPolicy: out of memory (or a condition message over %u bytes)",
		        SG_CRPOLICY_MAX_MESSAGE);
	}
	*out = p;
	return SG_OK;
}

const char *sg_crpolicy_name(const sg_crpolicy *p)
{
	return p->name;
}

bool sg_crpolicy_ready(const sg_crpolicy *p)
{
	return p->ready;
}

const char *sg_crpolicy_condition_reason(const sg_crpolicy *p)
{
	return p->ready ? SG_CRPOLICY_READY_REASON : SG_CRPOLICY_NOT_READY_REASON;
}

const char *sg_crpolicy_condition_message(const sg_crpolicy *p)
{
	return p->condition;
}

size_t sg_crpolicy_plugin_count(const sg_crpolicy *p)
{
	return p->n_plugins;
}

const char *sg_crpolicy_plugin_name(const sg_crpolicy *p, size_t i)
{
	return i < p->n_plugins ? p->plugin_names[i].p : NULL;
}

const json_t *sg_crpolicy_plugin_values(const sg_crpolicy *p, size_t i)
{
	return i < p->n_plugins ? p->plugin_values[i] : NULL;
}

/* ---- selectors --------------------------------------------------------------- */

bool sg_crpolicy_selects_issuer(const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	if (!p->has_issuer_sel)
		return true;
	sstr kind = cstr(r->issuer_kind), group = cstr(r->issuer_group);
	if (kind.len == 0)
		kind = cstr("Issuer");
	if (group.len == 0)
		group = cstr("cert-manager.io");
	if (p->has_sel_name && !wild(p->sel_name, cstr(r->issuer_name)))
		return false;
	if (p->has_sel_kind && !wild(p->sel_kind, kind))
		return false;
	return !p->has_sel_group || wild(p->sel_group, group);
}

bool sg_crpolicy_needs_namespace_labels(const sg_crpolicy *p)
{
	return p->has_ns_sel && p->n_labels > 0;
}

int sg_crpolicy_selects_namespace(const sg_crpolicy *p, const char *ns, const json_t *labels, bool *match)
{
	*match = false;
	if (!p->has_ns_sel) {
		*match = true;
		return SG_OK;
	}
	bool named = p->match_names.n == 0 || wild_any(p->match_names.v, p->match_names.n, cstr(ns));
	if (!named || p->n_labels == 0) {
		*match = named;
		return SG_OK;
	}
	SG_ENSURE(labels, SG_EINVAL, "CertificateRequestPolicy %s: the namespace's labels are needed for matchLabels",
	          p->name);
	for (size_t i = 0; i < p->n_labels; i++) {
		const json_t *v = json_is_object(labels) ? json_object_get(labels, p->label_keys[i].p) : NULL;
		if (!json_is_string(v) ||
		    !sstr_eq((sstr){json_string_value(v), json_string_length(v)}, p->label_values[i]))
			return SG_OK;
	}
	*match = true;
	return SG_OK;
}

int sg_crpolicy_selects(const sg_crpolicy *p, const sg_crpolicy_request *r, const json_t *ns_labels, bool *match)
{
	*match = false;
	if (!sg_crpolicy_selects_issuer(p, r))
		return SG_OK;
	return sg_crpolicy_selects_namespace(p, r->name_space, ns_labels, match);
}

/* ---- evaluation ------------------------------------------------------------ */

#define NON_STRING "<non-string value>"
#define NON_STRING_DETAIL                                                                                              \
	"uses an unsupported ASN.1 type or string encoding; re-issue the certificate with a UTF8String or "            \
	"PrintableString subject"

/* A value Go's encoding/asn1 decodes to a string (UniversalString is not). */
static bool go_string(const sg_csr_facts_attr *a)
{
	return a->is_string && a->tag != SG_CSR_FACTS_UNIVERSALSTRING;
}

static sstr attr_text(const sg_csr_facts_attr *a)
{
	return (sstr){a->value, a->value_len};
}

/* "<path>[.<child>]" as a new string; NULL (and l marked failed) when out
 * of memory. key, when given, is appended as "[<key>]" before the child. */
static char *path_of(ferrs *l, const char *path, const sstr *key, const char *child)
{
	sb m = SB_INIT;
	sg_strbuf_puts(&m, path);
	if (key) {
		sg_strbuf_putc(&m, '[');
		sb_put(&m, *key);
		sg_strbuf_putc(&m, ']');
	}
	if (child) {
		sg_strbuf_putc(&m, '.');
		sg_strbuf_puts(&m, child);
	}
	char *s = sg_strbuf_take(&m);
	if (!s)
		l->failed = true;
	return s;
}

static void fe_required_true(ferrs *l, const char *path, const sstr *key)
{
	char *p = path_of(l, path, key, "required");
	if (p)
		fe_required(l, p, "true");
	free(p);
}

/* evaluateString: one subject string against allowed.<field>. */
static void eval_string(ferrs *l, sstr s, const allowed_field *f, const char *path)
{
	if (s.len == 0) {
		if (f->required)
			fe_required_true(l, path, NULL);
		return;
	}
	if (!f->has_value) {
		fe_invalid_str(l, path, s, cstr("no allowed value"));
		return;
	}
	if (wild(f->value, s))
		return;
	char *p = path_of(l, path, NULL, "value");
	if (p)
		fe_invalid_str(l, p, s, f->value);
	free(p);
}

/* evaluateSlice: a list of values against allowed.<field> (or an
 * otherNames / otherAttributes entry, path then carrying its key). */
static void eval_slice(ferrs *l, const sstr *v, size_t n, const allowed_field *f, const char *path, const sstr *key)
{
	if (n == 0) {
		if (f && f->required)
			fe_required_true(l, path, key);
		return;
	}
	char *at = path_of(l, path, key, NULL);
	if (!at)
		return;
	if (!f || !f->has_value) {
		fe_invalid_list(l, at, v, n, cstr("no allowed values"));
	} else if (!wild_subset(f->values.v, f->values.n, v, n)) {
		sb d = SB_INIT;
		sb_join(&d, f->values.v, f->values.n);
		char *ds = sg_strbuf_take(&d);
		char *vp = path_of(l, path, key, "values");
		if (ds && vp)
			fe_invalid_list(l, vp, v, n, cstr(ds));
		else
			l->failed = true;
		free(ds);
		free(vp);
	}
	free(at);
}

/* CommonName / SerialNumber: every RDN value of oid, each judged alone
 * when there are several (a duplicate-CN request cannot hide one). */
static void eval_subject_string(ferrs *l, const sg_csr_facts *f, const char *oid, const allowed_field *field,
                                const char *path)
{
	sstr v[SG_CSR_FACTS_MAX_ATTRS];
	size_t n = 0;
	for (size_t i = 0; i < f->attr_count; i++) {
		const sg_csr_facts_attr *a = &f->attrs[i];
		if (strcmp(a->oid, oid) != 0)
			continue;
		if (!go_string(a)) {
			sb d = SB_INIT;
			sg_strbuf_printf(&d, "subject attribute %s ", oid);
			sg_strbuf_puts(&d, NON_STRING_DETAIL);
			char *ds = sg_strbuf_take(&d);
			if (ds)
				fe_invalid_str(l, path, cstr(NON_STRING), cstr(ds));
			else
				l->failed = true;
			free(ds);
			return;
		}
		v[n++] = attr_text(a);
	}
	if (n <= 1) {
		eval_string(l, n ? v[0] : cstr(""), field, path);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char ip[96];
		snprintf(ip, sizeof(ip), "%s[%zu]", path, i);
		eval_string(l, v[i], field, ip);
	}
}

static void eval_sans(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f)
{
	for (int k = 0; k < SAN_FIELDS; k++) {
		sstr v[SG_CSR_FACTS_MAX_SANS];
		size_t n = 0;
		for (size_t i = 0; i < f->san_count; i++)
			if (f->sans[i].type == san_types[k])
				v[n++] = (sstr){f->sans[i].value, f->sans[i].value_len};
		char path[64];
		snprintf(path, sizeof(path), "spec.allowed.%s", san_fields[k]);
		eval_slice(l, v, n, &p->san[k], path, NULL);
	}
}

static void eval_usages(ferrs *l, const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	if (r->usage_count == 0)
		return;
	sstr v[SG_CRPOLICY_MAX_VALUES];
	size_t n = r->usage_count < SG_CRPOLICY_MAX_VALUES ? r->usage_count : SG_CRPOLICY_MAX_VALUES;
	for (size_t i = 0; i < n; i++)
		v[i] = cstr(r->usages[i]);
	if (!p->has_usages) {
		fe_invalid_list(l, "spec.allowed.usages", v, n, cstr("nil"));
		return;
	}
	if (wild_subset(p->usages.v, p->usages.n, v, n))
		return;
	sb d = SB_INIT;
	sb_join(&d, p->usages.v, p->usages.n);
	char *ds = sg_strbuf_take(&d);
	if (ds)
		fe_invalid_list(l, "spec.allowed.usages", v, n, cstr(ds));
	else
		l->failed = true;
	free(ds);
}

/* The last entry for oid (Go indexes them in a map: the last one wins). */
static const other_entry *entry_for(const other_entry *e, size_t n, sstr oid)
{
	const other_entry *found = NULL;
	for (size_t i = 0; i < n; i++)
		if (sstr_eq(e[i].oid, oid))
			found = &e[i];
	return found;
}

static const char *const denied_types[] = {"directoryName", "x400Address", "ediPartyName", "registeredID"};
static const sg_csr_facts_san_type denied_type_ids[] = {SG_CSR_FACTS_SAN_DIRECTORY, SG_CSR_FACTS_SAN_X400,
                                                        SG_CSR_FACTS_SAN_EDI_PARTY, SG_CSR_FACTS_SAN_REGISTERED_ID};

/* OtherNames: the GeneralName types without an opt-in, then otherName
 * values grouped by type-id in order of first appearance. */
static void eval_other_names(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f)
{
	for (size_t t = 0; t < 4; t++)
		for (size_t i = 0; i < f->san_count; i++)
			if (f->sans[i].type == denied_type_ids[t]) {
				char path[64], detail[64];
				snprintf(path, sizeof(path), "spec.allowed.subjectAltName.%s", denied_types[t]);
				snprintf(detail, sizeof(detail), "%s SAN entries are not permitted", denied_types[t]);
				fe_invalid_str(l, path, cstr(denied_types[t]), cstr(detail));
			}
	for (size_t i = 0; i < f->san_count; i++) {
		const sg_csr_facts_san *s = &f->sans[i];
		if (s->type != SG_CSR_FACTS_SAN_OTHER_NAME)
			continue;
		sstr oid = cstr(s->oid);
		bool first = true;
		for (size_t j = 0; j < i && first; j++)
			first =
			    !(f->sans[j].type == SG_CSR_FACTS_SAN_OTHER_NAME && strcmp(f->sans[j].oid, s->oid) == 0);
		if (!first)
			continue;
		sstr v[SG_CSR_FACTS_MAX_SANS];
		size_t n = 0;
		for (size_t j = i; j < f->san_count; j++)
			if (f->sans[j].type == SG_CSR_FACTS_SAN_OTHER_NAME && strcmp(f->sans[j].oid, s->oid) == 0)
				v[n++] = (sstr){f->sans[j].value, f->sans[j].value_len};
		const other_entry *e = entry_for(p->other_names, p->n_other_names, oid);
		eval_slice(l, v, n, e ? &e->f : NULL, "spec.allowed.otherNames", &oid);
	}
	for (size_t k = 0; k < p->n_other_names; k++) {
		if (!p->other_names[k].f.required)
			continue;
		bool seen = false;
		for (size_t i = 0; i < f->san_count && !seen; i++)
			seen = f->sans[i].type == SG_CSR_FACTS_SAN_OTHER_NAME &&
			       sstr_eq(cstr(f->sans[i].oid), p->other_names[k].oid);
		if (!seen)
			fe_required_true(l, "spec.allowed.otherNames", &p->other_names[k].oid);
	}
}

static void eval_subject_slices(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f)
{
	for (int k = 0; k < SUBJ_COUNT; k++) {
		sstr v[SG_CSR_FACTS_MAX_ATTRS];
		size_t n = 0;
		for (size_t i = 0; i < f->attr_count; i++)
			if (go_string(&f->attrs[i]) && strcmp(f->attrs[i].oid, subject_slots[k].oid) == 0)
				v[n++] = attr_text(&f->attrs[i]);
		char path[64];
		snprintf(path, sizeof(path), "spec.allowed.subject.%s", subject_slots[k].field);
		eval_slice(l, v, n, &p->subj[k], path, NULL);
	}
}

/* OtherAttributes: non-string values under the named fields, then every
 * attribute outside them, which needs an otherAttributes entry. */
static void eval_other_attributes(ferrs *l, const sg_crpolicy *p, const sg_csr_facts *f)
{
	static const char generic[] = "subject attribute " NON_STRING_DETAIL;
	for (size_t i = 0; i < f->attr_count; i++) {
		const sg_csr_facts_attr *a = &f->attrs[i];
		sstr oid = cstr(a->oid);
		if (named_subject_oid(oid)) {
			if (sstr_is(oid, OID_CN) || sstr_is(oid, OID_SERIAL) || go_string(a))
				continue;
			for (int k = 0; k < SUBJ_COUNT; k++)
				if (sstr_is(oid, subject_slots[k].oid)) {
					char path[64];
					snprintf(path, sizeof(path), "spec.allowed.subject.%s", subject_slots[k].field);
					fe_invalid_str(l, path, cstr(NON_STRING), cstr(generic));
				}
			continue;
		}
		if (!go_string(a)) {
			char *path = path_of(l, "spec.allowed.subject.otherAttributes", &oid, NULL);
			if (path)
				fe_invalid_str(l, path, cstr(NON_STRING), cstr(generic));
			free(path);
		}
	}
	for (size_t i = 0; i < f->attr_count; i++) {
		const sg_csr_facts_attr *a = &f->attrs[i];
		sstr oid = cstr(a->oid);
		if (named_subject_oid(oid) || !go_string(a))
			continue;
		bool first = true;
		for (size_t j = 0; j < i && first; j++)
			first = !(go_string(&f->attrs[j]) && strcmp(f->attrs[j].oid, a->oid) == 0);
		if (!first)
			continue;
		sstr v[SG_CSR_FACTS_MAX_ATTRS];
		size_t n = 0;
		for (size_t j = i; j < f->attr_count; j++)
			if (go_string(&f->attrs[j]) && strcmp(f->attrs[j].oid, a->oid) == 0)
				v[n++] = attr_text(&f->attrs[j]);
		const other_entry *e = entry_for(p->other_attrs, p->n_other_attrs, oid);
		eval_slice(l, v, n, e ? &e->f : NULL, "spec.allowed.subject.otherAttributes", &oid);
	}
	for (size_t k = 0; k < p->n_other_attrs; k++) {
		if (!p->other_attrs[k].f.required)
			continue;
		bool seen = false;
		for (size_t i = 0; i < f->attr_count && !seen; i++)
			seen = sstr_eq(cstr(f->attrs[i].oid), p->other_attrs[k].oid);
		if (!seen)
			fe_required_true(l, "spec.allowed.subject.otherAttributes", &p->other_attrs[k].oid);
	}
}

/* The allowed evaluator: its message (empty when it does not deny). */
static void eval_allowed(sb *out, bool *denied, const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	const sg_csr_facts *f = r->csr;
	if (f->san_decode_error) {
		sg_strbuf_puts(out, "subjectAltName (SAN) extension could not be decoded: ");
		sg_strbuf_puts(out, f->san_decode_error);
		*denied = true;
		return;
	}
	if (f->san_extensions > 1) {
		sg_strbuf_puts(out, "CSR contains multiple SAN extensions; at most one is permitted");
		*denied = true;
		return;
	}
	ferrs l = {0};
	eval_subject_string(&l, f, OID_CN, &p->cn, "spec.allowed.commonName");
	eval_sans(&l, p, f);
	if (r->is_ca && (!p->has_is_ca || !p->is_ca)) {
		sb m = SB_INIT;
		fe_begin(&m, "spec.allowed.isCA", "Invalid value: true");
		fe_end(&l, &m, cstr(p->has_is_ca ? "false" : "nil"));
	}
	eval_usages(&l, p, r);
	eval_other_names(&l, p, f);
	eval_subject_slices(&l, p, f);
	eval_subject_string(&l, f, OID_SERIAL, &p->serial, "spec.allowed.subject.serialNumber");
	eval_other_attributes(&l, p, f);
	if (l.failed)
		out->oom = true; /* a message of the list could not be built */
	if (l.n) {
		*denied = true;
		sb_aggregate(out, &l);
	}
	ferrs_free(&l);
}

static const char *const key_alg_names[] = {"", "RSA", "ECDSA", "Ed25519"};

/* The constraints evaluator; SG_EINVAL when the key cannot be sized. */
static int eval_constraints(sb *out, bool *denied, const sg_crpolicy *p, const sg_crpolicy_request *r)
{
	if (!p->has_constraints)
		return SG_OK;
	const sg_csr_facts *f = r->csr;
	ferrs l = {0};
	struct {
		bool has;
		int64_t bound;
		bool bad;
		const char *path;
	} d[] = {
	    /* Whole seconds R (request) and M (bound), each maybe with a
	     * dropped fraction: r > m is R > M, or R == M and the request's
	     * fraction is larger, which is unknown when both have one (then
	     * deny); r < m is R < M, or R == M and the bound's fraction is
	     * larger. */
	    {p->has_max, p->max_s,
	     r->duration_seconds > p->max_s || (r->duration_seconds == p->max_s && r->duration_fraction),
	     "spec.constraints.maxDuration"},
	    {p->has_min, p->min_s, r->duration_seconds < p->min_s || (r->duration_seconds == p->min_s && p->min_frac),
	     "spec.constraints.minDuration"},
	};
	for (size_t i = 0; i < 2; i++) {
		if (!d[i].has || (r->has_duration && !d[i].bad))
			continue;
		sb v = SB_INIT, b = SB_INIT;
		if (r->has_duration)
			sb_duration(&v, r->duration_seconds);
		else
			sg_strbuf_puts(&v, "nil"); /* metav1.Duration's String() of a nil pointer */
		sb_duration(&b, d[i].bound);
		char *vs = sg_strbuf_take(&v), *bs = sg_strbuf_take(&b);
		if (vs && bs)
			fe_invalid_str(&l, d[i].path, cstr(vs), cstr(bs));
		else
			l.failed = true;
		free(vs);
		free(bs);
	}
	if (p->has_pk) {
		if (f->key_alg == SG_CSR_FACTS_KEY_OTHER) {
			ferrs_free(&l);
			SG_BAIL(SG_EINVAL, "CertificateRequestPolicy %s: unrecognised public key type (algorithm %s)",
			        p->name, f->key_oid ? f->key_oid : "?");
		}
		const char *alg = key_alg_names[f->key_alg];
		char size[24], bound[24];
		snprintf(size, sizeof(size), "%d", f->key_size);
		if (p->has_alg && !sstr_is(p->alg, alg))
			fe_invalid_str(&l, "spec.constraints.privateKey.algorithm", cstr(alg), p->alg);
		if (p->has_max_size && p->max_size < f->key_size) {
			snprintf(bound, sizeof(bound), "%lld", p->max_size);
			fe_invalid_str(&l, "spec.constraints.privateKey.maxSize", cstr(size), cstr(bound));
		}
		if (p->has_min_size && p->min_size > f->key_size) {
			snprintf(bound, sizeof(bound), "%lld", p->min_size);
			fe_invalid_str(&l, "spec.constraints.privateKey.minSize", cstr(size), cstr(bound));
		}
	}
	if (l.failed)
		out->oom = true; /* a message of the list could not be built */
	if (l.n) {
		*denied = true;
		sb_aggregate(out, &l);
	}
	ferrs_free(&l);
	return SG_OK;
}

void sg_crpolicy_verdict_clear(sg_crpolicy_verdict *v)
{
	if (!v)
		return;
	free(v->message);
	memset(v, 0, sizeof(*v));
}

int sg_crpolicy_evaluate(const sg_crpolicy *p, const sg_crpolicy_request *r, sg_crpolicy_verdict *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(p->ready, SG_EINVAL, "CertificateRequestPolicy %s is not ready for approval evaluation", p->name);
	SG_ENSURE(r && r->csr, SG_EINVAL, "CertificateRequestPolicy %s: the request has no parsed CSR", p->name);
	SG_ENSURE(r->csr->attr_count <= SG_CSR_FACTS_MAX_ATTRS && r->csr->san_count <= SG_CSR_FACTS_MAX_SANS, SG_EINVAL,
	          "CertificateRequestPolicy %s: the CSR facts are over their bounds", p->name);
	SG_ENSURE(r->usage_count <= SG_CRPOLICY_MAX_VALUES, SG_EINVAL,
	          "CertificateRequestPolicy %s: the request has more than %d usages", p->name, SG_CRPOLICY_MAX_VALUES);
	sb a = SB_INIT, c = SB_INIT, msg = SB_INIT;
	bool denied = false;
	eval_allowed(&a, &denied, p, r);
	int rc = eval_constraints(&c, &denied, p, r);
	if (rc < 0) {
		sg_strbuf_free(&a);
		sg_strbuf_free(&c);
		return rc;
	}
	sb_put(&msg, (sstr){a.p ? a.p : "", a.len});
	if (a.len && c.len)
		sg_strbuf_puts(&msg, ", ");
	sb_put(&msg, (sstr){c.p ? c.p : "", c.len});
	bool failed = sg_strbuf_failed(&a) || sg_strbuf_failed(&c);
	sg_strbuf_free(&a);
	sg_strbuf_free(&c);
	out->message = failed ? NULL : sg_strbuf_take(&msg);
	sg_strbuf_free(&msg);
	SG_ENSURE(out->message, SG_EINTERNAL,
	          "CertificateRequestPolicy %s: out of memory (or a message over %u bytes) evaluating a request",
	          p->name, SG_CRPOLICY_MAX_MESSAGE);
	out->denied = denied;
	return SG_OK;
}

int sg_crpolicy_verdict_add(sg_crpolicy_verdict *v, bool denied, const char *message)
{
	v->denied = v->denied || denied;
	if (!message || !*message)
		return SG_OK;
	sb m = SB_INIT;
	sg_strbuf_puts(&m, v->message ? v->message : "");
	if (v->message && *v->message)
		sg_strbuf_puts(&m, ", ");
	sg_strbuf_puts(&m, message);
	char *s = sg_strbuf_take(&m);
	SG_ENSURE(s, SG_EINTERNAL, "CertificateRequestPolicy verdict: out of memory (or over %u bytes)",
	          SG_CRPOLICY_MAX_MESSAGE);
	free(v->message);
	v->message = s;
	return SG_OK;
}

/* ---- the CertificateRequest's condition messages ------------------------------ */

typedef struct order {
	const sg_crpolicy_denial *d;
	size_t i;
} order;

static int by_name(const void *a, const void *b)
{
	const order *x = a, *y = b;
	int c = strcmp(x->d->policy ? x->d->policy : "", y->d->policy ? y->d->policy : "");
	return c ? c : (x->i > y->i) - (x->i < y->i); /* stable, as sort.SliceStable */
}

static int policies_message(const char *prefix, const sg_crpolicy_denial *d, size_t n, char **out)
{
	*out = NULL;
	order *o = n ? calloc(n, sizeof(*o)) : NULL;
	SG_ENSURE(o || n == 0, SG_EINTERNAL, "CertificateRequestPolicy message: out of memory");
	for (size_t i = 0; i < n; i++)
		o[i] = (order){&d[i], i};
	if (n > 1)
		qsort(o, n, sizeof(*o), by_name);
	sb m = SB_INIT;
	sg_strbuf_puts(&m, prefix);
	for (size_t i = 0; i < n; i++) {
		if (i)
			sg_strbuf_putc(&m, ' ');
		sg_strbuf_putc(&m, '[');
		sg_strbuf_puts(&m, o[i].d->policy ? o[i].d->policy : "");
		sg_strbuf_puts(&m, ": ");
		sg_strbuf_puts(&m, o[i].d->message ? o[i].d->message : "");
		sg_strbuf_putc(&m, ']');
	}
	free(o);
	*out = sg_strbuf_take(&m);
	SG_ENSURE(*out, SG_EINTERNAL, "CertificateRequestPolicy message: out of memory (or over %u bytes)",
	          SG_CRPOLICY_MAX_MESSAGE);
	return SG_OK;
}

int sg_crpolicy_denied_message(const sg_crpolicy_denial *d, size_t n, char **out)
{
	return policies_message("No policy approved this request: ", d, n, out);
}

int sg_crpolicy_deferred_message(const sg_crpolicy_denial *d, size_t n, char **out)
{
	return policies_message(
	    "Not all policies are ready for evaluation; refusing to deny pending policy readiness: ", d, n, out);
}

int sg_crpolicy_approved_message(const char *policy, char **out)
{
	sb m = SB_INIT;
	sg_strbuf_puts(&m, "Approved by CertificateRequestPolicy: ");
	sb_go_quote(&m, cstr(policy));
	*out = sg_strbuf_take(&m);
	SG_ENSURE(*out, SG_EINTERNAL, "CertificateRequestPolicy message: out of memory");
	return SG_OK;
}
