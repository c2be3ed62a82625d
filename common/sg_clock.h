/*
 * sg_clock: the clocks signet uses. Deadlines and latencies use the
 * monotonic clock; expiry and validity checks use wall-clock seconds; the
 * dates written into a certificate use time(2)'s seconds
 * (sg_cert_seconds); the benchmarks measure what they spend themselves
 * with the process's CPU clock.
 */
#ifndef SG_CLOCK_H
#define SG_CLOCK_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t sg_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This process's CPU time so far, user and system, all its threads, in ns. */
static inline uint64_t sg_process_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int64_t sg_wall_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}

/* The seconds a certificate is dated from: time(2)'s, not CLOCK_REALTIME's.
 * On Linux time(2) reads the coarse clock, whose second begins a few ms
 * after CLOCK_REALTIME's (up to 4.3 ms measured on the machine of
 * perf/README.md). Relying parties that read it, OpenSSL's verification
 * among them, would find a certificate dated from CLOCK_REALTIME in that
 * window not yet valid until their clock caught up; one dated from time(2)
 * is valid by either clock as soon as it exists. */
static inline int64_t sg_cert_seconds(void)
{
	return (int64_t)time(NULL);
}

/* Calendar arithmetic, proleptic Gregorian, UTC (H. Hinnant's algorithms):
 * days since 1970-01-01 of a civil date, and back. Pure arithmetic, unlike
 * timegm and gmtime_r, which take glibc's time-zone lock (every signer
 * thread would contend on it). */
SG_API int64_t sg_days_from_civil(int64_t y, int m, int d);
SG_API void sg_civil_from_days(int64_t days, int64_t *y, int *m, int *d);

/* "YYYY-MM-DDTHH:MM:SSZ" and its NUL: the size sg_clock_rfc3339 needs. */
#define SG_CLOCK_RFC3339_LEN 21

/* Writes Unix time t (seconds, UTC) as an RFC 3339 date-time in the one
 * form Kubernetes and our logs use, "YYYY-MM-DDTHH:MM:SSZ" (what
 * strftime's "%Y-%m-%dT%H:%M:%SZ" gives after gmtime_r), into out of cap
 * bytes. Returns false, leaving out empty (when cap > 0), when cap is
 * below SG_CLOCK_RFC3339_LEN or the year is outside 0000..9999, which
 * RFC 3339 cannot write; each caller chooses what to show then. Pure
 * arithmetic: no time-zone lock. */
SG_API bool sg_clock_rfc3339(char *out, size_t cap, int64_t t);

/* The longest text sg_clock_parse_rfc3339 reads: the form with nine
 * fraction digits and an offset is 35 bytes. */
#define SG_CLOCK_PARSE_MAX 64

/* Reads an RFC 3339 date-time as the API server writes one: metav1.Time
 * "YYYY-MM-DDTHH:MM:SSZ", with a fraction of 1 to 9 digits (MicroTime),
 * or with a numeric offset "+hh:mm" / "-hh:mm"; 'T' and 'Z' in either
 * case (RFC 3339 §5.6). Into *out, Unix seconds: the fraction dropped,
 * the offset applied, a leap second 60 read as the next minute's first.
 * Strict: exactly the digits each field has (no spaces, no signs), the
 * day within its month (leap years counted), nothing after. false for
 * anything else, or for a NULL or longer than SG_CLOCK_PARSE_MAX bytes,
 * leaving *out as it was. Pure arithmetic: no time-zone lock. */
SG_API bool sg_clock_parse_rfc3339(const char *s, int64_t *out);

/* Sleeps for ms milliseconds (restarting after signals). */
SG_API void sg_sleep_ms(unsigned ms);

#endif
