/*
 * The rotation record's text (contract: ctl_record.h). A table of fields
 * drives the reader, so a name, a bound or a capacity is written once; the
 * writer prints the same fields in the table's order. Moved out of
 * ctl_rotate.c so that fuzz_rotate_record can hold the reader to its
 * contract: what is accepted formats back to text that reads the same.
 */
#include "ctl_record.h"

#include "sg_guard.h"
#include "sg_hsm.h"
#include "sg_log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The record's fields: name, where the value goes, and for a string its
 * capacity (0: an integer, between lo and hi). */
typedef struct field {
	const char *name;
	size_t off, cap;
	int64_t lo, hi;
} field;

#define STR_FIELD(n, m)                                                                                                \
	{                                                                                                              \
		n, offsetof(ctl_record, m), sizeof(((ctl_record *)0)->m), 0, 0                                         \
	}
#define INT_FIELD(n, m, lo, hi)                                                                                        \
	{                                                                                                              \
		n, offsetof(ctl_record, m), 0, lo, hi                                                                  \
	}
static const field fields[] = {
    STR_FIELD("phase", phase),
    INT_FIELD("generation", gen, 2, INT32_MAX),
    STR_FIELD("old-key", old_key),
    STR_FIELD("new-key", new_key),
    STR_FIELD("old-cert", old_cert),
    STR_FIELD("old-root-cert", old_root_conf),
    INT_FIELD("key-type", key_type, 0, SG_KEY_TYPE_COUNT - 1),
    STR_FIELD("ca-name", ca_name),
    INT_FIELD("ca-ttl", ca_ttl, 0, INT64_MAX),
    INT_FIELD("since", since, 0, INT64_MAX),
    INT_FIELD("activated-at", activated_at, 0, INT64_MAX),
    INT_FIELD("wait", wait, 0, INT64_MAX),
    INT_FIELD("keep-old-key", keep_old_key, 0, 1),
    INT_FIELD("intermediate", intermediate, 0, 1),
    INT_FIELD("has-chain", has_chain, 0, 1),
    INT_FIELD("new-root", new_root, 0, 1),
    STR_FIELD("subject", subject),
};
#define N_FIELDS (sizeof(fields) / sizeof(fields[0]))

static const char *const phases[] = {"beginning", "begun",     "awaiting-import", "activating",
                                     "active",    "finishing", "finished"};

/* Whether s holds a byte a line cannot carry (a control byte). */
static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* One "name = value" line into r; seen marks the fields met. */
static int parse_line(ctl_record *r, char *line, unsigned lineno, bool seen[N_FIELDS])
{
	char *eq = strstr(line, " = ");
	SG_ENSURE(eq, SG_EINVAL, "line %u is not \"name = value\"", lineno);
	*eq = 0;
	const char *v = eq + 3;
	size_t vl = strlen(v);
	SG_ENSURE(!has_control(v), SG_EINVAL, "line %u holds a control byte", lineno);
	size_t i = 0;
	while (i < N_FIELDS && strcmp(fields[i].name, line) != 0)
		i++;
	if (i == N_FIELDS) {
		char shown[48];
		sg_log_printable(shown, sizeof(shown), line, strlen(line));
		SG_BAIL(SG_EINVAL, "line %u: unknown name \"%s\" (a newer signetctl's record?)", lineno, shown);
	}
	const field *f = &fields[i];
	SG_ENSURE(!seen[i], SG_EINVAL, "line %u: %s given twice", lineno, f->name);
	seen[i] = true;
	if (f->cap) {
		SG_ENSURE(vl < f->cap, SG_EINVAL, "line %u: %s is longer than %zu bytes", lineno, f->name, f->cap - 1);
		memcpy((char *)r + f->off, v, vl + 1);
		return SG_OK;
	}
	char *end = NULL;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	SG_ENSURE(vl > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) && end && *end == 0 && errno == 0 &&
	              n >= f->lo && n <= f->hi,
	          SG_EINVAL, "line %u: %s is not an integer from %" PRId64 " to %" PRId64, lineno, f->name, f->lo,
	          f->hi);
	*(int64_t *)(void *)((char *)r + f->off) = (int64_t)n;
	return SG_OK;
}

int ctl_record_parse(ctl_record *out, char *text, size_t len)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(len <= CTL_RECORD_TEXT_MAX, SG_EINVAL, "it is longer than %d bytes", CTL_RECORD_TEXT_MAX);
	SG_ENSURE(!memchr(text, 0, len) && text[len] == 0, SG_EINVAL, "it holds a NUL byte");
	bool seen[N_FIELDS] = {false};
	unsigned lineno = 0;
	for (char *line = text, *next; line < text + len; line = next) {
		lineno++;
		next = strchr(line, '\n');
		next = next ? (*next = 0, next + 1) : line + strlen(line);
		if (line[0] != '#' && line[0] != 0)
			SG_TRY(parse_line(out, line, lineno, seen));
	}
	bool known = false;
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
		known = known || strcmp(out->phase, phases[i]) == 0;
	/* An atomic write cannot be torn: a record without these was not
	 * written by us. */
	SG_ENSURE(known, SG_EINVAL, "its phase is not one of signetctl rotate's");
	SG_ENSURE(*out->new_key && *out->old_key && *out->old_cert && out->gen >= 2, SG_EINVAL,
	          "it lacks the phase, generation, keys or old root");
	return SG_OK;
}

int ctl_record_format(const ctl_record *r, char *out, size_t cap, size_t *len)
{
	*len = 0;
	for (size_t i = 0; i < N_FIELDS; i++)
		SG_ENSURE(!fields[i].cap || !has_control((const char *)r + fields[i].off), SG_EINVAL,
		          "the rotation's %s holds a control byte", fields[i].name);
	int n = snprintf(out, cap,
	                 "# signetctl rotate's record of the CA rotation (do not edit; see signetctl rotate "
	                 "status).\n");
	for (size_t i = 0; i < N_FIELDS && n > 0 && (size_t)n < cap; i++) {
		const field *f = &fields[i];
		const char *p = (const char *)r + f->off;
		int w = f->cap ? snprintf(out + n, cap - (size_t)n, "%s = %s\n", f->name, p)
		               : snprintf(out + n, cap - (size_t)n, "%s = %" PRId64 "\n", f->name,
		                          *(const int64_t *)(const void *)p);
		n = w < 0 ? -1 : n + w;
	}
	SG_ENSURE(n > 0 && (size_t)n < cap, SG_EINVAL, "rotation state too long");
	*len = (size_t)n;
	return SG_OK;
}
