/*
 * sg_opt: one table of settings, read from a config file and a command line.
 *
 * Every program describes its settings once, as an array of sg_opt rows
 * (name, type, bounds, default, help, where the value lands). The same names
 * are used in the config file and as flags:
 *
 *   config file:   name = value        (# starts a comment; blank lines ok)
 *   command line:  --name value | --name=value
 *                  booleans: --name | --name=true | --name=false
 *
 * sg_opt_parse() applies defaults, then the file named by --config (when the
 * table has a "config" row and the flag is given), then the flags, so flags
 * override the file. Unknown names, bad values, values out of bounds and
 * repeated non-list flags are errors that name the setting (and the file and
 * line). Non-flag arguments are returned to the caller in order.
 *
 * Hostile input: the config file is read through a bounded reader (at most
 * SG_OPT_FILE_MAX bytes, lines at most SG_OPT_LINE_MAX); NUL bytes and
 * control characters are rejected.
 *
 * Values of type STRING/PATH (defaults included) land in the target struct
 * as heap copies; a later value frees the earlier one. The target must start
 * zeroed; release every string with sg_opt_free() when done. A value that
 * fails to parse leaves the field as it was.
 *
 * Exact rules:
 *  - Command line (GNU getopt_long, long options only): "--name value"
 *    takes the next argument as the value even if it starts with '-'
 *    (so "--offset -5" works); "--name=value"; a BOOL given bare is true.
 *    "--" ends the options; "-" alone is a positional; "-x" is an error
 *    (there are no short options). "--help" (unless the table has a "help"
 *    row) sets res->help and sg_opt_parse returns 0 at once, after the
 *    defaults, without reading the config file or applying other flags.
 *    A flag given twice is an error.
 *  - Config file: one "name = value" per line; blanks (space, tab) around
 *    name and value are dropped; the value is the rest of the line, taken
 *    literally (no quoting, inner spaces kept). '#' starts a comment only as
 *    the first non-blank character of a line, so values may contain '#'.
 *    Lines end with '\n'; the last may lack it. Any byte below 0x20 other
 *    than tab (CR included: no CRLF files) and 0x7f is refused. A line may
 *    hold at most SG_OPT_LINE_MAX bytes (newline excluded), the file at most
 *    SG_OPT_FILE_MAX bytes. A name set twice in one file is an error (the
 *    message names both lines); flag_only rows are refused in the file.
 *  - BOOL: true|yes|on|1 and false|no|off|0.
 *  - INT: decimal with an optional '-'; no '+', spaces, hex or suffixes.
 *  - INT/DURATION bounds are inclusive; min == max == 0 means unbounded.
 *  - DURATION: see sg_opt_parse_duration.
 *  - STRING: may be empty; when max > 0, at most max bytes.
 *  - PATH: must not be empty, except as a flag: "--name=" (or "--name ''")
 *    unsets the row (NULL), dropping its default and the config file's
 *    value; a relative value from a config file is
 *    resolved as "<folder of the file>/<value>" (a file named without a
 *    folder leaves it relative to the working directory, which is the same
 *    place); from the command line, defaults and sg_opt_set it is kept as
 *    given. max > 0 bounds the resolved length.
 *  - ENUM: exactly one of choices (case-sensitive); stores its index.
 *  - LOG_LEVEL: what sg_log_level_parse takes (debug|info|warn|error, or
 *    a klog verbosity 0..10 as istio-csr's and trust-manager's --log-level:
 *    0 and 1 are info, 2..10 debug); stores the sg_log_level.
 *  - Errors are SG_EINVAL ("--max-ttl: \"5x\" is not a duration ...",
 *    "signet.conf:12: unknown setting \"foo\""); SG_ENOTFOUND when the
 *    --config file does not exist; SG_EINTERNAL when out of memory.
 */
#ifndef SG_OPT_H
#define SG_OPT_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_OPT_FILE_MAX (64 * 1024)
#define SG_OPT_LINE_MAX 4096

typedef enum sg_opt_type {
	SG_OPT_BOOL,      /* bool */
	SG_OPT_INT,       /* int64_t, within [min, max] */
	SG_OPT_DURATION,  /* int64_t seconds: "90s", "15m", "1h30m", "2d"; within [min, max] */
	SG_OPT_STRING,    /* char *, at most max bytes when max > 0 */
	SG_OPT_PATH,      /* char *; relative paths in a config file resolve against its folder */
	SG_OPT_ENUM,      /* int index into choices (a NULL-terminated list) */
	SG_OPT_FOREIGN,   /* another program's setting: accepted (and ignored) in a
	                   * shared config file, unknown as a flag, not in --help */
	SG_OPT_LOG_LEVEL, /* int sg_log_level: a name or a klog verbosity 0..10 */
} sg_opt_type;

typedef struct sg_opt {
	const char *name;   /* without the leading "--" */
	sg_opt_type type;
	size_t offset;      /* offsetof(target struct, field) */
	const char *def;    /* default as text, parsed like any value; NULL: none */
	int64_t min, max;   /* INT/DURATION bounds; STRING max length */
	const char *const *choices; /* ENUM */
	const char *help;   /* one line for --help */
	bool flag_only;     /* not accepted in a config file (e.g. "config") */
} sg_opt;

typedef struct sg_opt_result {
	int argc;          /* positional arguments left, in order */
	char **argv;       /* borrowed from the caller's argv */
	bool help;         /* --help was given: the caller prints sg_opt_usage */
} sg_opt_result;

/* Parses argv[0..argc) (argv[0] is NOT skipped: pass argc - 1, argv + 1 for
 * main's arguments) into the struct at target: defaults, then the --config
 * file, then the flags. Positional arguments are stored in order into
 * res->argv, which the caller either points at an array with room for argc
 * pointers or leaves NULL, in which case positionals are compacted in place
 * into argv itself (the strings are borrowed either way); res->argc is their
 * count. Stops option processing at "--". On failure the target may hold
 * some values already: free it with sg_opt_free and exit. */
SG_API int sg_opt_parse(const sg_opt *table, size_t n, void *target, int argc, char **argv,
			sg_opt_result *res) SG_MUST_CHECK;

/* Applies one "name = value" text (for tests and for programs that read
 * settings from elsewhere). origin names the source in error messages (NULL:
 * "setting"). flag_only rows are accepted; relative paths stay relative. */
SG_API int sg_opt_set(const sg_opt *table, size_t n, void *target, const char *name, const char *value,
		      const char *origin) SG_MUST_CHECK;

/* Parses a config file's bytes (already in memory; bounded by len, need not
 * be NUL-terminated). origin names the file in messages (NULL: "config").
 * base_dir resolves relative PATH values; may be NULL. Stops at the first
 * bad line; the lines before it have been applied. */
SG_API int sg_opt_parse_file_bytes(const sg_opt *table, size_t n, void *target, const char *data,
				   size_t len, const char *origin, const char *base_dir) SG_MUST_CHECK;

/* Parses a duration such as "90s", "15m", "1h30m", "2d", "0s" into seconds:
 * one or more <decimal><unit> groups, units d, h, m, s, strictly largest
 * first and each at most once; a component may exceed its natural range
 * ("90m"); zero components are fine, so Go's time.Duration strings for
 * whole seconds ("1h0m0s", "30m0s") parse. A bare number is rejected
 * (ambiguous) except "0", as are signs, spaces, fractions ("1.5h"),
 * sub-second and other units ("500ms", "1w") and totals above INT64_MAX
 * seconds. */
SG_API int sg_opt_parse_duration(const char *s, int64_t *out) SG_MUST_CHECK;

/* Writes "--name VALUE  help (default: x)" lines for every row to fp (a
 * FILE *), VALUE showing the type, bounds or choices, then --help. */
SG_API void sg_opt_usage(const sg_opt *table, size_t n, void *fp);

/* The command line of a program with one table and no positional
 * arguments (the perf tools), in one call: sg_opt_parse of argv[1..argc),
 * a positional argument refused, then check(target) (may be NULL) for what
 * one row cannot say, such as a required flag; check runs only when
 * parsing succeeded and --help was not given. On --help prints `about`
 * (the program's own usage lines, ending in a blank line) and the table's
 * usage to stdout; on an error "name: message" to stderr. Returns true
 * when the program should go on, with target filled (the caller frees it
 * with sg_opt_free); false when it should exit with *status (0 after
 * --help, 2 after an error), target already freed. */
SG_API bool sg_opt_program(const char *name, const char *about, const sg_opt *table, size_t n, void *target, int argc,
                           char **argv, int (*check)(void *target), int *status);

/* Splits a comma-separated setting ("a, b,,c") in place into at most max
 * items (pointers into list), each without leading spaces; empty items are
 * skipped. SG_EINVAL names `what` when there are more than max, or none. */
SG_API int sg_opt_split_list(char *list, const char **items, size_t max, size_t *n, const char *what) SG_MUST_CHECK;

/* Frees every string the module allocated into target and sets the fields
 * to NULL (so calling it twice is safe). */
SG_API void sg_opt_free(const sg_opt *table, size_t n, void *target);

#endif
