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

#define SG_F_STR(k, v) ((sg_log_field){(k), SG_LOG_F_STR, (v), 0})
#define SG_F_INT(k, v) ((sg_log_field){(k), SG_LOG_F_INT, NULL, (int64_t)(v)})
#define SG_F_END ((sg_log_field){NULL, SG_LOG_F_STR, NULL, 0})

/* Process-wide settings; set them once at start-up, before threads. */
SG_API void sg_log_configure(sg_log_level min, sg_log_format fmt);
/* Redirects output to fd (default 2); for tests. */
SG_API void sg_log_set_fd(int fd);
/* Parses "debug|info|warn|error" and "text|json". */
SG_API int sg_log_level_parse(const char *s, sg_log_level *out) SG_MUST_CHECK;
SG_API int sg_log_format_parse(const char *s, sg_log_format *out) SG_MUST_CHECK;
SG_API int sg_log_enabled(sg_log_level level);

/* Emits one record; the field list ends with SG_F_END. */
SG_API void sg_log_fields(sg_log_level level, const char *msg, const sg_log_field *fields);
#define sg_log(level, msg, ...)                                                \
	do {                                                                       \
		if (sg_log_enabled(level))                                             \
			sg_log_fields((level), (msg), (const sg_log_field[]){__VA_ARGS__}); \
	} while (0)

/* Logs the current thread's last error (code name, message, file:line). */
SG_API void sg_log_error_last(sg_log_level level, const char *msg);

#endif
