/*
 * sg_log: structured logging to stderr, as text or one JSON object per line.
 *
 * A record is a level, a short message and key/value fields:
 *
 *   sg_log(SG_LOG_INFO, "certificate issued",
 *          SG_F_STR("serial", hex), SG_F_INT("latency_us", us), SG_F_END);
 *
 * Text:  2026-11-22T00:00:00.123Z info certificate issued serial=ab.. latency_us=412
 * JSON:  {"ts":"2026-11-22T00:00:00.123Z","level":"info","msg":"certificate issued","serial":"ab..",...}
 *
 * Values are escaped (JSON string rules; text values with spaces, quotes or
 * control bytes are quoted and escaped), so a hostile string cannot forge a
 * record. Each record is written with one write(2), so lines from threads
 * never interleave. There is deliberately no field type for secrets.
 *
 * Escaping: \" \\ \n \r \t in both formats; other control bytes (and DEL)
 * are \u00XX in JSON and \xHH in text; invalid UTF-8 becomes \ufffd in JSON
 * (the output is always valid JSON) and \xHH in text. Text values are bare
 * only when they are non-empty printable ASCII without space, quote,
 * backslash or '='. The text message is escaped but not quoted. A NULL
 * string value is written as null (JSON) or (null) (text). Keys are
 * restricted to [A-Za-z0-9_.-] (anything else becomes '_', at most 63 bytes).
 *
 * A record longer than SG_LOG_RECORD_MAX bytes is cut at a whole escape
 * unit, an open string is closed and the marker "truncated":true (JSON) or
 * truncated=true (text) ends the line.
 */
#ifndef SG_LOG_H
#define SG_LOG_H

#include "sg_error.h"

#include <stdint.h>

typedef enum sg_log_level {
	SG_LOG_DEBUG = 0,
	SG_LOG_INFO = 1,
	SG_LOG_WARN = 2,
	SG_LOG_ERROR = 3,
} sg_log_level;

typedef enum sg_log_format {
	SG_LOG_TEXT = 0,
	SG_LOG_JSON = 1,
} sg_log_format;

typedef struct sg_log_field {
	const char *key; /* NULL ends the list */
	enum { SG_LOG_F_STR, SG_LOG_F_INT } type;
	const char *s;
	int64_t i;
} sg_log_field;

/* Largest record, newline included: PIPE_BUF, so writes to a pipe are atomic. */
#define SG_LOG_RECORD_MAX 4096

#define SG_F_STR(k, v) ((sg_log_field){(k), SG_LOG_F_STR, (v), 0})
#define SG_F_INT(k, v) ((sg_log_field){(k), SG_LOG_F_INT, NULL, (int64_t)(v)})
#define SG_F_END ((sg_log_field){NULL, SG_LOG_F_STR, NULL, 0})

/* Process-wide settings; set them once at start-up, before threads.
 * Defaults: SG_LOG_INFO, SG_LOG_TEXT, fd 2. */
SG_API void sg_log_configure(sg_log_level min, sg_log_format fmt);
/* Redirects output to fd (default 2); for tests. */
SG_API void sg_log_set_fd(int fd);
/* At start-up, before the first record: when the log fd is a regular file
 * whose last byte is not a newline (a record a killed process left torn),
 * writes one, so the remnant stays on a line of its own and the records
 * after it parse. Anything else (a pipe, a terminal, an unreadable file):
 * nothing. */
SG_API void sg_log_mend(void);
/* Largest klog verbosity sg_log_level_parse takes (klog's -v has no upper
 * bound, but 10 is the highest level Kubernetes components use). */
#define SG_LOG_VERBOSITY_MAX 10

/* Parses a level: a name "debug|info|warn|error" (exact, lower case), or a
 * klog verbosity as istio-csr's and trust-manager's --log-level take it,
 * written as a plain decimal "0".."10" (no sign, spaces, leading zeros,
 * fraction or base prefix):
 *
 *   0, 1   info   (klog V(0)/V(1): the normal operational messages; 1 is the
 *                  anchor operator's default)
 *   2..10  debug  (istio-csr and trust-manager log their debugging at V(2)
 *                  and above)
 *
 * A verbosity never hides warnings or errors (klog cannot either).
 * SG_EINVAL otherwise. */
SG_API int sg_log_level_parse(const char *s, sg_log_level *out) SG_MUST_CHECK;
/* Parses "text|json" (exact, lower case); SG_EINVAL otherwise. */
SG_API int sg_log_format_parse(const char *s, sg_log_format *out) SG_MUST_CHECK;
SG_API int sg_log_enabled(sg_log_level level);

/* Emits one record if level is enabled; the field list ends with SG_F_END
 * (fields may be NULL). Write errors are ignored. */
SG_API void sg_log_fields(sg_log_level level, const char *msg, const sg_log_field *fields);
#define sg_log(level, msg, ...)                                                \
	do {                                                                       \
		if (sg_log_enabled(level))                                             \
			sg_log_fields((level), (msg), (const sg_log_field[]){__VA_ARGS__}); \
	} while (0)

/* Logs the current thread's last error (code name, message, file:line). */
SG_API void sg_log_error_last(sg_log_level level, const char *msg);

/* Copies s[0..n) into out (cap >= 1 bytes, NUL-terminated, cut to fit) as
 * printable ASCII, '?' for any other byte: a user's or a peer's text fit
 * to quote in a message, a log line or a status. out may be s (in place). */
SG_API void sg_log_printable(char *out, size_t cap, const char *s, size_t n);

#endif
