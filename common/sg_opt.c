/*
 * Settings: one table, three sources (defaults, a config file, flags).
 *
 * Every value, whatever its source, goes through one function (apply) that
 * parses the text according to the row's type, checks bounds and stores it
 * at the row's offset; so a default, a config line and a flag are validated
 * identically and a bad default is caught the first time the program runs.
 * Strings are parsed into a new allocation before the old one is freed, so a
 * failed set leaves the previous value in place.
 *
 * The config file is untrusted text: it is read whole (size checked with
 * fstat before reading, then again while reading), and parsed with an
 * index-based line reader over (data, len) that never reads past len and
 * checks each line against SG_OPT_LINE_MAX before looking at it. NUL and
 * other control bytes (tab excepted) are refused anywhere in the file.
 *
 * Command lines follow GNU getopt_long conventions for long options only:
 * "--name value", "--name=value", bare "--name" for booleans, "--" ends the
 * options, and a lone "-" is a positional argument. The argument list is
 * scanned once (recording what each flag sets) before the config file is
 * read, so --config can appear anywhere and flags still override the file.
 * --config alone may be repeated: the files are read in the order given,
 * each overriding the ones before it.
 */
#include "sg_opt.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where a value came from, for error messages: "--max-ttl",
 * "signet.conf:12: max-ttl", "env: max-ttl". */
typedef char where_buf[320];

static void *field(void *target, const sg_opt *o)
{
	return (char *)target + o->offset;
}

static const sg_opt *find(const sg_opt *table, size_t n, const char *name, size_t name_len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(table[i].name) == name_len && memcmp(table[i].name, name, name_len) == 0)
			return &table[i];
	return NULL;
}

static bool unbounded(const sg_opt *o)
{
	return o->min == 0 && o->max == 0;
}

static int parse_bool(const char *v, bool *out, const char *where)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	for (size_t i = 0; i < 4; i++) {
		if (strcmp(v, yes[i]) == 0) {
			*out = true;
			return SG_OK;
		}
		if (strcmp(v, no[i]) == 0) {
			*out = false;
			return SG_OK;
		}
	}
	SG_BAIL(SG_EINVAL, "%s: \"%s\" is not a boolean (want true or false)", where, v);
}

/* Decimal int64 with an optional leading '-'; nothing else. */
static int parse_int(const char *v, int64_t *out, const char *where)
{
	const char *p = v;
	bool neg = *p == '-';
	if (neg)
		p++;
	SG_ENSURE(*p, SG_EINVAL, "%s: \"%s\" is not an integer", where, v);
	uint64_t mag = 0;
	uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; *p; p++) {
		SG_ENSURE(*p >= '0' && *p <= '9', SG_EINVAL, "%s: \"%s\" is not an integer", where, v);
		unsigned d = (unsigned)(*p - '0');
		SG_ENSURE(mag <= (limit - d) / 10, SG_EINVAL, "%s: \"%s\" is out of range", where, v);
		mag = mag * 10 + d;
	}
	*out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
	return SG_OK;
}

/* Durations: <digits><unit> groups, units d, h, m, s in strictly decreasing
 * order, each at most once ("1h30m", not "30m1h" or "1h1h"); no sign, no
 * spaces, no bare number (is "10" seconds or minutes?) except "0", which is
 * zero in any unit. This is a superset of what Go's time.Duration.String
 * writes for whole seconds ("1h0m0s", "30m0s", "0s") and of the whole-
 * second forms of time.ParseDuration, so the arguments Kubernetes
 * operators write for istio-csr and trust-manager ("60m", "15s", "1h0m0s")
 * carry over; "d" is ours. */
static int duration(const char *s, int64_t *out, const char *where)
{
	static const struct {
		char unit;
		int64_t secs;
	} units[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
	const char *p = s;
	int64_t total = 0;
	size_t next_unit = 0; /* index of the largest unit still allowed */
	SG_ENSURE(*s, SG_EINVAL, "%s: empty duration", where);
	if (strcmp(s, "0") == 0) { /* time.ParseDuration("0") */
		*out = 0;
		return SG_OK;
	}
	while (*p) {
		SG_ENSURE(*p >= '0' && *p <= '9', SG_EINVAL,
			  "%s: \"%s\" is not a duration (want e.g. 90s, 15m, 1h30m, 2d)", where, s);
		int64_t v = 0;
		for (; *p >= '0' && *p <= '9'; p++) {
			SG_ENSURE(v <= (INT64_MAX - (*p - '0')) / 10, SG_EINVAL, "%s: duration \"%s\" is too large",
				  where, s);
			v = v * 10 + (*p - '0');
		}
		size_t u = next_unit;
		while (u < 4 && units[u].unit != *p)
			u++;
		SG_ENSURE(*p && u < 4, SG_EINVAL,
			  "%s: \"%s\" is not a duration (want numbers with units d, h, m, s, largest first)",
			  where, s);
		SG_ENSURE(v <= INT64_MAX / units[u].secs && total <= INT64_MAX - v * units[u].secs, SG_EINVAL,
			  "%s: duration \"%s\" is too large", where, s);
		total += v * units[u].secs;
		next_unit = u + 1;
		p++;
	}
	*out = total;
	return SG_OK;
}

int sg_opt_parse_duration(const char *s, int64_t *out)
{
	SG_ENSURE(s, SG_EINVAL, "duration: NULL");
	return duration(s, out, "duration");
}

static int check_range(const sg_opt *o, int64_t v, const char *shown, const char *where)
{
	if (unbounded(o))
		return SG_OK;
	SG_ENSURE(v >= o->min && v <= o->max, SG_EINVAL,
		  "%s: %s is out of range [%" PRId64 ", %" PRId64 "]", where, shown, o->min, o->max);
	return SG_OK;
}

/* A heap copy of value, or of base_dir "/" value for a relative PATH. */
static int copy_value(const sg_opt *o, const char *value, const char *base_dir, const char *where,
		      char **out)
{
	size_t vlen = strlen(value);
	if (o->type == SG_OPT_PATH)
		SG_ENSURE(vlen > 0, SG_EINVAL, "%s: empty path", where);
	bool join = o->type == SG_OPT_PATH && base_dir && *base_dir && value[0] != '/';
	size_t blen = join ? strlen(base_dir) : 0;
	size_t total = vlen + (join ? blen + 1 : 0);
	if (o->max > 0)
		SG_ENSURE(total <= (uint64_t)o->max, SG_EINVAL, "%s: value longer than %" PRId64 " bytes", where,
			  o->max);
	if (o->type == SG_OPT_PATH)
		SG_ENSURE(total < PATH_MAX, SG_EINVAL, "%s: path longer than %d bytes", where, PATH_MAX - 1);
	char *s = malloc(total + 1);
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	if (join) {
		memcpy(s, base_dir, blen);
		s[blen] = '/';
		memcpy(s + blen + 1, value, vlen + 1);
	} else {
		memcpy(s, value, vlen + 1);
	}
	*out = s;
	return SG_OK;
}

/* Parses value per the row's type and stores it; the target is unchanged
 * on failure. */
static int apply(const sg_opt *o, void *target, const char *value, const char *base_dir, const char *where)
{
	switch (o->type) {
	case SG_OPT_BOOL: {
		bool b = false;
		SG_TRY(parse_bool(value, &b, where));
		*(bool *)field(target, o) = b;
		return SG_OK;
	}
	case SG_OPT_INT: {
		int64_t v = 0;
		SG_TRY(parse_int(value, &v, where));
		SG_TRY(check_range(o, v, value, where));
		*(int64_t *)field(target, o) = v;
		return SG_OK;
	}
	case SG_OPT_DURATION: {
		int64_t v = 0;
		SG_TRY(duration(value, &v, where));
		SG_TRY(check_range(o, v, value, where));
		*(int64_t *)field(target, o) = v;
		return SG_OK;
	}
	case SG_OPT_STRING:
	case SG_OPT_PATH: {
		char *s = NULL;
		SG_TRY(copy_value(o, value, base_dir, where, &s));
		char **slot = field(target, o);
		free(*slot);
		*slot = s;
		return SG_OK;
	}
	case SG_OPT_FOREIGN:
		return SG_OK; /* a shared config file may name other programs' settings */
	case SG_OPT_LOG_LEVEL: {
		/* One parser for every program's log-level (sg_log.h has the
		 * number mapping), so flags and config files agree. */
		sg_log_level l = SG_LOG_INFO;
		if (sg_log_level_parse(value, &l) < 0)
			SG_BAIL(SG_EINVAL,
			        "%s: \"%.64s\" is not a log level (want debug, info, warn, error, or a verbosity "
			        "0..%d: 0-1 info, 2 and above debug)",
			        where, value, SG_LOG_VERBOSITY_MAX);
		*(int *)field(target, o) = (int)l;
		return SG_OK;
	}
	case SG_OPT_ENUM:
		SG_ENSURE(o->choices, SG_EINTERNAL, "%s: enum without choices", where);
		for (int i = 0; o->choices[i]; i++) {
			if (strcmp(o->choices[i], value) == 0) {
				*(int *)field(target, o) = i;
				return SG_OK;
			}
		}
		SG_BAIL(SG_EINVAL, "%s: \"%s\" is not one of the choices", where, value);
	}
	SG_BAIL(SG_EINTERNAL, "%s: unknown setting type %d", where, (int)o->type);
}

static int apply_defaults(const sg_opt *table, size_t n, void *target)
{
	for (size_t i = 0; i < n; i++) {
		if (!table[i].def)
			continue;
		where_buf where;
		snprintf(where, sizeof(where), "default of %s", table[i].name);
		SG_TRY(apply(&table[i], target, table[i].def, NULL, where));
	}
	return SG_OK;
}

int sg_opt_set(const sg_opt *table, size_t n, void *target, const char *name, const char *value,
	       const char *origin)
{
	if (!origin)
		origin = "setting";
	const sg_opt *o = find(table, n, name, strlen(name));
	SG_ENSURE(o, SG_EINVAL, "%s: unknown setting \"%s\"", origin, name);
	where_buf where;
	snprintf(where, sizeof(where), "%s: %s", origin, name);
	return apply(o, target, value, NULL, where);
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* One config line data[start, end) (no newline), already checked for
 * control bytes. seen_line[i] is the line that set row i, 0 when none. */
static int parse_line(const sg_opt *table, size_t n, void *target, const char *data, size_t start,
		      size_t end, size_t lineno, const char *origin, const char *base_dir, size_t *seen_line)
{
	while (start < end && is_blank(data[start]))
		start++;
	while (end > start && is_blank(data[end - 1]))
		end--;
	if (start == end || data[start] == '#')
		return SG_OK;
	size_t eq = start;
	while (eq < end && data[eq] != '=')
		eq++;
	SG_ENSURE(eq < end, SG_EINVAL, "%s:%zu: expected \"name = value\"", origin, lineno);
	size_t name_end = eq;
	while (name_end > start && is_blank(data[name_end - 1]))
		name_end--;
	SG_ENSURE(name_end > start, SG_EINVAL, "%s:%zu: missing setting name before '='", origin, lineno);
	size_t vstart = eq + 1;
	while (vstart < end && is_blank(data[vstart]))
		vstart++;
	size_t name_len = name_end - start;
	const sg_opt *o = find(table, n, data + start, name_len);
	SG_ENSURE(o, SG_EINVAL, "%s:%zu: unknown setting \"%.*s\"", origin, lineno, (int)name_len, data + start);
	SG_ENSURE(!o->flag_only, SG_EINVAL, "%s:%zu: \"%s\" can only be given on the command line", origin,
		  lineno, o->name);
	size_t idx = (size_t)(o - table);
	SG_ENSURE(seen_line[idx] == 0, SG_EINVAL, "%s:%zu: \"%s\" is already set on line %zu", origin, lineno,
		  o->name, seen_line[idx]);
	seen_line[idx] = lineno;
	/* The value is copied out (the data is not NUL-terminated); the line
	 * limit bounds the buffer. */
	char value[SG_OPT_LINE_MAX + 1];
	size_t vlen = end - vstart;
	memcpy(value, data + vstart, vlen);
	value[vlen] = 0;
	where_buf where;
	snprintf(where, sizeof(where), "%s:%zu: %s", origin, lineno, o->name);
	return apply(o, target, value, base_dir, where);
}

int sg_opt_parse_file_bytes(const sg_opt *table, size_t n, void *target, const char *data, size_t len,
			    const char *origin, const char *base_dir)
{
	if (!origin)
		origin = "config";
	SG_ENSURE(len <= SG_OPT_FILE_MAX, SG_EINVAL, "%s: larger than %d bytes", origin, SG_OPT_FILE_MAX);
	size_t *seen_line = calloc(n ? n : 1, sizeof(*seen_line));
	SG_ENSURE(seen_line, SG_EINTERNAL, "out of memory");
	int rc = SG_EINVAL;
	size_t lineno = 0;
	size_t pos = 0;
	while (pos < len) {
		lineno++;
		size_t end = pos;
		while (end < len && data[end] != '\n') {
			unsigned char c = (unsigned char)data[end];
			SG_ENSURE_GOTO(rc, end - pos < SG_OPT_LINE_MAX, out, SG_EINVAL,
				       "%s:%zu: line longer than %d bytes", origin, lineno, SG_OPT_LINE_MAX);
			SG_ENSURE_GOTO(rc, (c >= 0x20 && c != 0x7f) || c == '\t', out, SG_EINVAL,
				       "%s:%zu: control character 0x%02x", origin, lineno, c);
			end++;
		}
		SG_TRY_GOTO(rc, parse_line(table, n, target, data, pos, end, lineno, origin, base_dir, seen_line),
			    out);
		pos = end + 1; /* past the newline; equals len + 1 only at the end */
	}
	rc = SG_OK;
out:
	free(seen_line);
	return rc;
}

/* Reads the whole config file; checks the size before reading a byte. */
static int read_file(const char *path, char **out, size_t *out_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	SG_ENSURE(fd >= 0, errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "cannot open config file %s: %s", path,
		  strerror(errno));
	int rc = SG_EINVAL;
	char *buf = NULL;
	struct stat st;
	SG_ENSURE_GOTO(rc, fstat(fd, &st) == 0 && S_ISREG(st.st_mode), out, SG_EINVAL,
		       "config file %s is not a regular file", path);
	SG_ENSURE_GOTO(rc, st.st_size <= SG_OPT_FILE_MAX, out, SG_EINVAL,
		       "config file %s is larger than %d bytes", path, SG_OPT_FILE_MAX);
	/* One spare byte detects a file that grew since fstat. */
	buf = malloc(SG_OPT_FILE_MAX + 1);
	SG_ENSURE_GOTO(rc, buf, out, SG_EINTERNAL, "out of memory");
	size_t got = 0;
	ssize_t r = 0;
	while (got < SG_OPT_FILE_MAX + 1 && (r = read(fd, buf + got, SG_OPT_FILE_MAX + 1 - got)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		SG_ENSURE_GOTO(rc, r > 0, out, SG_EINVAL, "cannot read config file %s: %s", path,
			       strerror(errno));
		got += (size_t)r;
	}
	SG_ENSURE_GOTO(rc, got <= SG_OPT_FILE_MAX, out, SG_EINVAL, "config file %s is larger than %d bytes",
		       path, SG_OPT_FILE_MAX);
	*out = buf;
	*out_len = got;
	buf = NULL;
	rc = SG_OK;
out:
	free(buf);
	close(fd);
	return rc;
}

/* The folder of path, as a heap string; NULL (no error) when path has no
 * folder part, since relative paths then already resolve against ".". */
static int dir_of(const char *path, char **out)
{
	*out = NULL;
	const char *slash = strrchr(path, '/');
	if (!slash)
		return SG_OK;
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	char *d = malloc(n + 1);
	SG_ENSURE(d, SG_EINTERNAL, "out of memory");
	memcpy(d, path, n);
	d[n] = 0;
	*out = d;
	return SG_OK;
}

static int parse_config_file(const sg_opt *table, size_t n, void *target, const char *path)
{
	char *data SG_AUTOFREE = NULL;
	char *dir SG_AUTOFREE = NULL;
	size_t len = 0;
	SG_TRY(read_file(path, &data, &len));
	SG_TRY(dir_of(path, &dir));
	return sg_opt_parse_file_bytes(table, n, target, data, len, path, dir);
}

/* What one flag sets, recorded by the scan and applied after the file. */
typedef struct flag_set {
	const sg_opt *opt;
	const char *value;
} flag_set;

/* Scans argv: records flags into sets (at most argc, count in *nsets),
 * positionals into res->argv; seen[i] marks row i given once already. */
static int scan_args(const sg_opt *table, size_t n, int argc, char **argv, sg_opt_result *res, flag_set *sets,
		     size_t *nsets, bool *seen)
{
	bool options = true;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		SG_ENSURE(a, SG_EINVAL, "argument %d is NULL", i);
		if (!options || a[0] != '-' || strcmp(a, "-") == 0) {
			res->argv[res->argc++] = argv[i];
			continue;
		}
		if (strcmp(a, "--") == 0) {
			options = false;
			continue;
		}
		SG_ENSURE(a[1] == '-', SG_EINVAL, "unknown option %s (options are --name)", a);
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
		if (name_len == 4 && memcmp(name, "help", 4) == 0 && !find(table, n, "help", 4)) {
			SG_ENSURE(!eq, SG_EINVAL, "--help takes no value");
			res->help = true;
			continue;
		}
		const sg_opt *o = find(table, n, name, name_len);
		SG_ENSURE(o && o->type != SG_OPT_FOREIGN, SG_EINVAL, "unknown option --%.*s", (int)name_len, name);
		size_t idx = (size_t)(o - table);
		/* --config is the one list: files read in order, a later one
		 * overriding an earlier one (a package's site settings after the
		 * CA's own file). Any other flag twice is a mistake. */
		SG_ENSURE(!seen[idx] || strcmp(o->name, "config") == 0, SG_EINVAL, "--%s given more than once",
			  o->name);
		seen[idx] = true;
		const char *value;
		if (eq)
			value = eq + 1;
		else if (o->type == SG_OPT_BOOL)
			value = "true";
		else if (i + 1 < argc && argv[i + 1])
			value = argv[++i]; /* taken as is, even if it starts with '-' (GNU) */
		else
			SG_BAIL(SG_EINVAL, "--%s: missing value", o->name);
		sets[*nsets].opt = o;
		sets[*nsets].value = value;
		(*nsets)++;
	}
	return SG_OK;
}

static void unset(const sg_opt *o, void *target)
{
	if (o->type != SG_OPT_STRING && o->type != SG_OPT_PATH)
		return;
	char **slot = field(target, o);
	free(*slot);
	*slot = NULL;
}

int sg_opt_parse(const sg_opt *table, size_t n, void *target, int argc, char **argv, sg_opt_result *res)
{
	SG_ENSURE(argc >= 0 && (argc == 0 || argv), SG_EINVAL, "bad argument vector");
	if (!res->argv)
		res->argv = argv; /* compact positionals in place */
	res->argc = 0;
	res->help = false;
	SG_TRY(apply_defaults(table, n, target));

	size_t cap = argc > 0 ? (size_t)argc : 1;
	flag_set *sets SG_AUTOFREE = calloc(cap, sizeof(*sets));
	bool *seen SG_AUTOFREE = calloc(n ? n : 1, sizeof(*seen));
	SG_ENSURE(sets && seen, SG_EINTERNAL, "out of memory");
	size_t nsets = 0;
	SG_TRY(scan_args(table, n, argc, argv, res, sets, &nsets, seen));
	if (res->help)
		return SG_OK; /* the caller prints usage and exits; nothing else matters */

	for (size_t i = 0; i < nsets; i++) {
		if (strcmp(sets[i].opt->name, "config") != 0)
			continue;
		where_buf where;
		snprintf(where, sizeof(where), "--%s", sets[i].opt->name);
		SG_TRY(apply(sets[i].opt, target, sets[i].value, NULL, where));
		SG_TRY(parse_config_file(table, n, target, sets[i].value));
	}
	for (size_t i = 0; i < nsets; i++) {
		const sg_opt *o = sets[i].opt;
		if (o->type == SG_OPT_PATH && !*sets[i].value) {
			unset(o, target); /* "--pin-file=": drop the file's value */
			continue;
		}
		where_buf where;
		snprintf(where, sizeof(where), "--%s", o->name);
		SG_TRY(apply(o, target, sets[i].value, NULL, where));
	}
	return SG_OK;
}

static void type_hint(const sg_opt *o, char *buf, size_t cap)
{
	switch (o->type) {
	case SG_OPT_BOOL: snprintf(buf, cap, "[=true|false]"); return;
	case SG_OPT_INT:
		if (unbounded(o))
			snprintf(buf, cap, " N");
		else
			snprintf(buf, cap, " N (%" PRId64 "..%" PRId64 ")", o->min, o->max);
		return;
	case SG_OPT_DURATION:
		if (unbounded(o))
			snprintf(buf, cap, " DURATION");
		else
			snprintf(buf, cap, " DURATION (%" PRId64 "s..%" PRId64 "s)", o->min, o->max);
		return;
	case SG_OPT_STRING: snprintf(buf, cap, " STRING"); return;
	case SG_OPT_PATH: snprintf(buf, cap, " PATH"); return;
	case SG_OPT_FOREIGN: snprintf(buf, cap, " (ignored)"); return;
	case SG_OPT_LOG_LEVEL: snprintf(buf, cap, " debug|info|warn|error|0..%d", SG_LOG_VERBOSITY_MAX); return;
	case SG_OPT_ENUM: {
		size_t used = (size_t)snprintf(buf, cap, " ");
		for (int i = 0; o->choices && o->choices[i] && used < cap; i++)
			used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "|" : "", o->choices[i]);
		return;
	}
	}
	snprintf(buf, cap, " ?");
}

void sg_opt_usage(const sg_opt *table, size_t n, void *fp)
{
	FILE *f = fp;
	for (size_t i = 0; i < n; i++) {
		const sg_opt *o = &table[i];
		if (o->type == SG_OPT_FOREIGN)
			continue;
		char hint[256];
		type_hint(o, hint, sizeof(hint));
		fprintf(f, "  --%s%s  %s", o->name, hint, o->help ? o->help : "");
		if (o->def)
			fprintf(f, " (default: %s)", o->def);
		if (o->flag_only)
			fprintf(f, " [command line only]");
		fprintf(f, "\n");
	}
	if (!find(table, n, "help", 4))
		fprintf(f, "  --help  print this help and exit\n");
}

bool sg_opt_program(const char *name, const char *about, const sg_opt *table, size_t n, void *target, int argc,
                    char **argv, int (*check)(void *target), int *status)
{
	sg_opt_result res = {0};
	int rc = sg_opt_parse(table, n, target, argc - 1, argv + 1, &res);
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK && !res.help && check)
		rc = check(target);
	if (rc == SG_OK && !res.help)
		return true;
	if (rc == SG_OK) {
		fputs(about, stdout);
		sg_opt_usage(table, n, stdout);
	} else {
		fprintf(stderr, "%s: %s\n", name, sg_error_last()->msg);
	}
	sg_opt_free(table, n, target);
	*status = rc < 0 ? 2 : 0;
	return false;
}

void sg_opt_free(const sg_opt *table, size_t n, void *target)
{
	for (size_t i = 0; i < n; i++) {
		if (table[i].type != SG_OPT_STRING && table[i].type != SG_OPT_PATH)
			continue;
		char **slot = field(target, &table[i]);
		free(*slot);
		*slot = NULL;
	}
}

int sg_opt_split_list(char *list, const char **items, size_t max, size_t *n, const char *what)
{
	*n = 0;
	char *save = NULL;
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		if (!*t)
			continue;
		SG_ENSURE(*n < max, SG_EINVAL, "more than %zu %s", max, what);
		items[(*n)++] = t;
	}
	SG_ENSURE(*n > 0, SG_EINVAL, "no %s", what);
	return SG_OK;
}
