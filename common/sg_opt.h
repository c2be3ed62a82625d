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
 * zeroed; release every string with sg_opt_free() when done.
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
	SG_OPT_BOOL,     /* bool */
	SG_OPT_INT,      /* int64_t, within [min, max] */
	SG_OPT_DURATION, /* int64_t seconds: "90s", "15m", "1h30m", "2d"; within [min, max] */
	SG_OPT_STRING,   /* char *, at most max bytes when max > 0 */
	SG_OPT_PATH,     /* char *; relative paths in a config file resolve against its folder */
	SG_OPT_ENUM,     /* int index into choices (a NULL-terminated list) */
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

/* Parses argv[0..argc) (argv[0] is NOT skipped: pass argv + 1 for main's
 * arguments) into the struct at target. Positional arguments are collected
 * into a caller-provided array of argc pointers in *res. Stops option
 * processing at "--". */
SG_API int sg_opt_parse(const sg_opt *table, size_t n, void *target, int argc, char **argv,
			sg_opt_result *res) SG_MUST_CHECK;

/* Applies one "name = value" text (for tests and for programs that read
 * settings from elsewhere). origin names the source in error messages. */
SG_API int sg_opt_set(const sg_opt *table, size_t n, void *target, const char *name, const char *value,
		      const char *origin) SG_MUST_CHECK;

/* Parses a config file's bytes (already in memory; bounded by len). base_dir
 * resolves relative PATH values; may be NULL. */
SG_API int sg_opt_parse_file_bytes(const sg_opt *table, size_t n, void *target, const char *data,
				   size_t len, const char *origin, const char *base_dir) SG_MUST_CHECK;

/* Parses a duration such as "90s", "15m", "1h30m", "2d", "0s" into seconds.
 * A bare number is rejected (ambiguous). */
SG_API int sg_opt_parse_duration(const char *s, int64_t *out) SG_MUST_CHECK;

/* Writes "--name VALUE  help (default: x)" lines for every row to fp. */
SG_API void sg_opt_usage(const sg_opt *table, size_t n, void *fp);

/* Frees every string the module allocated into target. */
SG_API void sg_opt_free(const sg_opt *table, size_t n, void *target);

#endif
