/*
 * Structured logging: one record per line, as text or JSON.
 *
 * A record is assembled in a fixed stack buffer and handed to the kernel
 * with one write(2). The buffer is SG_LOG_RECORD_MAX (= PIPE_BUF on Linux)
 * bytes, so a record written to a pipe or a socket pair is atomic and lines
 * from different threads never interleave; there is no lock and no heap.
 *
 * Everything that comes from outside the code (field values, error details)
 * is escaped unit by unit: a unit is a literal byte, an escape sequence or a
 * whole UTF-8 sequence, and the buffer only ever receives whole units. When
 * the next unit does not fit, the record is cut there, a string in progress
 * is closed and a marker is appended from a reserved tail, so a truncated
 * record is still one well-formed line (valid JSON in JSON mode). Invalid
 * UTF-8 becomes U+FFFD in JSON (so the output is always valid JSON) and
 * \xHH in text.
 *
 * A record is whole once write(2) returns, but a regular file can still end
 * in a torn one: write copies page by page and a SIGKILL between two pages
 * ends it short. sg_log_mend, at start-up, puts a newline after such a
 * remnant so that it stays on a line of its own and the next process's
 * records parse (a pipe, atomic up to PIPE_BUF, cannot tear).
 *
 * The settings (minimum level, format, fd) are process-wide atomics with
 * relaxed ordering: they are meant to be set once at start-up, and atomics
 * keep a late change (tests) free of data races without a lock.
 */
#include "sg_log.h"
#include "sg_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static atomic_int min_level = SG_LOG_INFO;
static atomic_int log_format = SG_LOG_TEXT;
static atomic_int log_fd = 2;

/* The tail reserve holds the closing quote, the truncation marker, the
 * closing brace and the newline. */
#define TAIL_RESERVE 32

typedef struct rec {
	char buf[SG_LOG_RECORD_MAX];
	size_t len;
	bool full;   /* a unit did not fit: everything after it is dropped */
	bool in_str; /* a quoted string is open and must be closed on truncation */
} rec;

static bool put(rec *r, const char *s, size_t n)
{
	if (r->full || n > sizeof(r->buf) - TAIL_RESERVE - r->len) {
		r->full = true;
		return false;
	}
	memcpy(r->buf + r->len, s, n);
	r->len += n;
	return true;
}

static bool put_cstr(rec *r, const char *s)
{
	return put(r, s, strlen(s));
}

/* Appends into the reserved tail; only the finishing code uses this. */
static void put_tail(rec *r, const char *s)
{
	size_t n = strlen(s);
	if (n > sizeof(r->buf) - r->len)
		n = sizeof(r->buf) - r->len;
	memcpy(r->buf + r->len, s, n);
	r->len += n;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not valid
 * (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		if (c == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	if (len > n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* Appends s escaped, unit by unit. JSON: the JSON string rules. Text: the
 * same backslash escapes, \xHH for other control bytes and invalid UTF-8. */
static void put_escaped(rec *r, const char *str, bool json)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str);
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		char e[8];
		size_t elen;
		size_t adv = 1;
		if (c == '"' || c == '\\') {
			e[0] = '\\';
			e[1] = (char)c;
			elen = 2;
		} else if (c == '\n' || c == '\r' || c == '\t') {
			e[0] = '\\';
			e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
			elen = 2;
		} else if (c < 0x20 || c == 0x7f) {
			elen = (size_t)snprintf(e, sizeof(e), json ? "\\u%04x" : "\\x%02x", c);
		} else if (c < 0x80) {
			e[0] = (char)c;
			elen = 1;
		} else if ((adv = utf8_seq(s + i, n - i)) > 0) {
			memcpy(e, s + i, adv);
			elen = adv;
		} else {
			adv = 1;
			if (json)
				elen = (size_t)snprintf(e, sizeof(e), "\\ufffd");
			else
				elen = (size_t)snprintf(e, sizeof(e), "\\x%02x", c);
		}
		if (!put(r, e, elen))
			return;
		i += adv;
	}
}

/* Text values go bare when that cannot be misread: non-empty printable
 * ASCII without quotes, backslashes, '=' or spaces. Anything else is quoted. */
static bool text_needs_quotes(const char *s)
{
	if (!*s)
		return true;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f || *p == '"' || *p == '\\' || *p == '=')
			return true;
	return false;
}

/* Keys come from code, but a key is never allowed to carry syntax: k gets
 * at most 63 bytes of [A-Za-z0-9_.-], anything else as '_'. */
static void clean_key(const char *key, char k[64])
{
	size_t i = 0;
	for (; key[i] && i < 63; i++) {
		char c = key[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '_' || c == '-' || c == '.';
		k[i] = ok ? c : '_';
	}
	k[i] = 0;
}

static void put_str_value(rec *r, const char *s, bool json)
{
	if (!s) {
		put_cstr(r, json ? "null" : "(null)");
		return;
	}
	bool quote = json || text_needs_quotes(s);
	if (quote) {
		if (!put(r, "\"", 1))
			return;
		r->in_str = true;
	}
	put_escaped(r, s, json);
	if (quote && put(r, "\"", 1))
		r->in_str = false;
}

static void put_field(rec *r, const sg_log_field *f, bool json)
{
	char k[64];
	clean_key(f->key, k);
	/* The key, its separator and an integer value are one unit, so a cut
	 * never leaves a dangling "key": or half a number. */
	char head[112];
	if (f->type == SG_LOG_F_INT)
		snprintf(head, sizeof(head), json ? ",\"%s\":%lld" : " %s=%lld", k, (long long)f->i);
	else
		snprintf(head, sizeof(head), json ? ",\"%s\":" : " %s=", k);
	if (put_cstr(r, head) && f->type != SG_LOG_F_INT)
		put_str_value(r, f->s, json);
}

static const char *level_name(sg_log_level level)
{
	switch (level) {
	case SG_LOG_DEBUG: return "debug";
	case SG_LOG_INFO: return "info";
	case SG_LOG_WARN: return "warn";
	default: return "error";
	}
}

static void timestamp(char *out, size_t cap)
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (!gmtime_r(&ts.tv_sec, &tm)) {
		snprintf(out, cap, "0000-00-00T00:00:00.000Z");
		return;
	}
	snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
}

static void emit(const char *buf, size_t len)
{
	int fd = atomic_load_explicit(&log_fd, memory_order_relaxed);
	/* One write(2); the loop only finishes a write cut short by a signal
	 * or a full regular file, which a pipe (atomic up to PIPE_BUF) never
	 * does. Logging failures are dropped: there is nowhere to report them. */
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, buf + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		off += (size_t)n;
	}
}

void sg_log_configure(sg_log_level min, sg_log_format fmt)
{
	atomic_store_explicit(&min_level, (int)min, memory_order_relaxed);
	atomic_store_explicit(&log_format, (int)fmt, memory_order_relaxed);
}

void sg_log_set_fd(int fd)
{
	atomic_store_explicit(&log_fd, fd, memory_order_relaxed);
}

/* The byte before where the next write to fd lands, read through fd or,
 * when fd is write-only (a shell's 2>>file), through a read-only reopen of
 * the same file; -1 when there is none or it cannot be read. */
static int byte_before_end(int fd, const struct stat *st)
{
	int fl = fcntl(fd, F_GETFL);
	off_t end = (fl >= 0 && (fl & O_APPEND)) ? st->st_size : lseek(fd, 0, SEEK_CUR);
	if (fl < 0 || end <= 0)
		return -1;
	unsigned char c;
	if ((fl & O_ACCMODE) != O_WRONLY)
		return pread(fd, &c, 1, end - 1) == 1 ? c : -1;
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	int rfd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (rfd < 0)
		return -1;
	struct stat rst;
	ssize_t n = fstat(rfd, &rst) == 0 && rst.st_dev == st->st_dev && rst.st_ino == st->st_ino
	                    ? pread(rfd, &c, 1, end - 1)
	                    : -1;
	close(rfd);
	return n == 1 ? c : -1;
}

void sg_log_mend(void)
{
	int fd = atomic_load_explicit(&log_fd, memory_order_relaxed);
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return;
	int last = byte_before_end(fd, &st);
	if (last >= 0 && last != '\n')
		emit("\n", 1);
}

/* A klog verbosity "0".."10" in its one canonical spelling, or -1. */
static int verbosity(const char *s)
{
	if (s[0] >= '0' && s[0] <= '9' && s[1] == '\0')
		return s[0] - '0';
	return strcmp(s, "10") == 0 ? 10 : -1;
}

/* Numbers are what istio-csr and trust-manager take (klog verbosity; the
 * anchor operator writes its CR's logLevel, 1..5, default 1). klog has no
 * levels below info to hide, so a number only chooses between info and
 * debug. The split is at 2 because V(0) and V(1) are klog's operational
 * messages and both programs put their debugging at V(2) and V(3): a user
 * who raises the CR's logLevel above its default asks for more, and debug
 * is the only "more" signet has. */
int sg_log_level_parse(const char *s, sg_log_level *out)
{
	static const char *const names[] = {"debug", "info", "warn", "error"};
	for (int i = 0; s && i < 4; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (sg_log_level)i;
			return SG_OK;
		}
	}
	int v = s ? verbosity(s) : -1;
	if (v >= 0 && v <= SG_LOG_VERBOSITY_MAX) {
		*out = v >= 2 ? SG_LOG_DEBUG : SG_LOG_INFO;
		return SG_OK;
	}
	SG_BAIL(SG_EINVAL, "unknown log level \"%.64s\" (want debug, info, warn, error, or a verbosity 0..%d)",
	        s ? s : "", SG_LOG_VERBOSITY_MAX);
}

int sg_log_format_parse(const char *s, sg_log_format *out)
{
	if (s && strcmp(s, "text") == 0) {
		*out = SG_LOG_TEXT;
		return SG_OK;
	}
	if (s && strcmp(s, "json") == 0) {
		*out = SG_LOG_JSON;
		return SG_OK;
	}
	SG_BAIL(SG_EINVAL, "unknown log format \"%s\" (want text or json)", s ? s : "");
}

int sg_log_enabled(sg_log_level level)
{
	return (int)level >= atomic_load_explicit(&min_level, memory_order_relaxed);
}

void sg_log_fields(sg_log_level level, const char *msg, const sg_log_field *fields)
{
	if (!sg_log_enabled(level))
		return;
	bool json = atomic_load_explicit(&log_format, memory_order_relaxed) == SG_LOG_JSON;
	rec r;
	r.len = 0;
	r.full = false;
	r.in_str = false;
	char ts[128]; /* 24 used; sized for any int fields (-Wformat-truncation) */
	timestamp(ts, sizeof(ts));
	if (json) {
		put_cstr(&r, "{\"ts\":\"");
		put_cstr(&r, ts);
		put_cstr(&r, "\",\"level\":\"");
		put_cstr(&r, level_name(level));
		put_cstr(&r, "\",\"msg\":");
		put_str_value(&r, msg ? msg : "", true);
	} else {
		put_cstr(&r, ts);
		put_cstr(&r, " ");
		put_cstr(&r, level_name(level));
		put_cstr(&r, " ");
		/* The message is written bare (it is a constant from code) but
		 * escaped, so it can never end the line. */
		put_escaped(&r, msg ? msg : "", false);
	}
	for (const sg_log_field *f = fields; f && f->key && !r.full; f++)
		put_field(&r, f, json);
	if (r.full) {
		if (r.in_str)
			put_tail(&r, "\"");
		put_tail(&r, json ? ",\"truncated\":true" : " truncated=true");
	}
	put_tail(&r, json ? "}\n" : "\n");
	emit(r.buf, r.len);
}

void sg_log_printable(char *out, size_t cap, const char *s, size_t n)
{
	size_t o = 0;
	for (; o < n && o + 1 < cap; o++) /* one byte out per byte in: in place works */
		out[o] = (unsigned char)s[o] >= 0x20 && (unsigned char)s[o] < 0x7f ? s[o] : '?';
	out[o] = '\0';
}

void sg_log_error_last(sg_log_level level, const char *msg)
{
	if (!sg_log_enabled(level))
		return;
	const sg_error *e = sg_error_last();
	char at[256];
	snprintf(at, sizeof(at), "%s:%d", e->file ? e->file : "?", e->line);
	sg_log_fields(level, msg,
		      (const sg_log_field[]){SG_F_STR("error", sg_error_name(e->code)),
					     SG_F_STR("detail", e->msg), SG_F_STR("at", at), SG_F_END});
}
