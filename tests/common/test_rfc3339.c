/*
 * Tests for sg_clock_rfc3339: the text gmtime_r + strftime("%Y-%m-%dT
 * %H:%M:%SZ") gives, for the epoch, leap days, times before 1970, the ends
 * of the 4-digit years and a sweep of seconds, days and years; refusals
 * past year 9999 and before year 0; and the buffer's bounds (too small:
 * false and an empty string; cap 0: nothing written).
 *
 * And for sg_clock_parse_rfc3339, the reader of the API server's
 * timestamps (a pod's deletionTimestamp decides whether its token is
 * refused): what it reads back from sg_clock_rfc3339 across the same
 * sweep; fractions and offsets as RFC 3339 §5.6 and Go's RFC3339Nano
 * write them; and the refusals, one per rule: a field's digits short or
 * long, a space or a sign where a digit is, a day past its month's end (a
 * leap year's February 29 read, any other's refused), hours, minutes,
 * seconds and offsets out of range, an empty or a ten-digit fraction, a
 * missing or trailing zone, an embedded NUL, NULL, and the length bound.
 */
#include "sg_clock.h"
#include "sg_test.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static bool same_as_libc(int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;
	char want[64], got[SG_CLOCK_RFC3339_LEN];
	if (!gmtime_r(&tt, &tm) || strftime(want, sizeof(want), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		return false;
	if (!sg_clock_rfc3339(got, sizeof(got), t))
		return false;
	if (strcmp(want, got) != 0) {
		fprintf(stderr, "t=%lld: libc %s, ours %s\n", (long long)t, want, got);
		return false;
	}
	return true;
}

static void t_known(void)
{
	char out[32];
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), 0) && strcmp(out, "1970-01-01T00:00:00Z") == 0);
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), 951782400) && strcmp(out, "2000-02-29T00:00:00Z") == 0);
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), 1700000000) && strcmp(out, "2023-11-14T22:13:20Z") == 0);
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), -1) && strcmp(out, "1969-12-31T23:59:59Z") == 0);
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), -86400) && strcmp(out, "1969-12-31T00:00:00Z") == 0);
	/* X.509's last moment, 99991231235959Z, and the first of year 0. */
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), 253402300799) && strcmp(out, "9999-12-31T23:59:59Z") == 0);
	SG_CHECK(sg_clock_rfc3339(out, sizeof(out), -62167219200) && strcmp(out, "0000-01-01T00:00:00Z") == 0);
	SG_CHECK(strlen(out) == SG_CLOCK_RFC3339_LEN - 1);
}

static void t_like_libc(void)
{
	/* Every hour boundary's neighbours over two days, then a day a week
	 * from 1900 to 2200 at an odd second, then leap days. */
	for (int64_t t = -3600; t < 2 * 86400; t += 599)
		SG_CHECK(same_as_libc(t));
	for (int64_t t = -2208988800 + 3723; t < 7258118400; t += 7 * 86400 + 1)
		if (!same_as_libc(t)) {
			SG_CHECK(false);
			break;
		}
	for (int y = 1972; y <= 2400; y += 4) {
		int64_t t = sg_days_from_civil(y, 2, 29) * 86400 + 86399;
		if (y % 100 != 0 || y % 400 == 0)
			SG_CHECK(same_as_libc(t));
	}
}

static void t_out_of_range(void)
{
	char out[32] = "junk";
	SG_CHECK(!sg_clock_rfc3339(out, sizeof(out), 253402300800)); /* 10000-01-01 */
	SG_CHECK(out[0] == '\0');
	strcpy(out, "junk");
	SG_CHECK(!sg_clock_rfc3339(out, sizeof(out), -62167219201)); /* year -1 */
	SG_CHECK(out[0] == '\0');
	SG_CHECK(!sg_clock_rfc3339(out, sizeof(out), INT64_MAX));
	SG_CHECK(!sg_clock_rfc3339(out, sizeof(out), INT64_MIN));
}

static void t_bounds(void)
{
	char out[SG_CLOCK_RFC3339_LEN + 1];
	memset(out, 'X', sizeof(out));
	SG_CHECK(sg_clock_rfc3339(out, SG_CLOCK_RFC3339_LEN, 0));
	SG_CHECK(strcmp(out, "1970-01-01T00:00:00Z") == 0 && out[SG_CLOCK_RFC3339_LEN] == 'X');
	memset(out, 'X', sizeof(out));
	SG_CHECK(!sg_clock_rfc3339(out, SG_CLOCK_RFC3339_LEN - 1, 0)); /* no room for the NUL */
	SG_CHECK(out[0] == '\0' && out[1] == 'X');
	memset(out, 'X', sizeof(out));
	SG_CHECK(!sg_clock_rfc3339(out, 0, 0));
	SG_CHECK(out[0] == 'X'); /* cap 0: nothing written */
}

/* ---- reading ---- */

static bool reads_as(const char *s, int64_t want)
{
	int64_t got = 12345;
	if (!sg_clock_parse_rfc3339(s, &got) || got != want) {
		fprintf(stderr, "\"%s\": got %lld, want %lld\n", s, (long long)got, (long long)want);
		return false;
	}
	return true;
}

static bool refused(const char *s)
{
	int64_t got = 12345;
	bool ok = !sg_clock_parse_rfc3339(s, &got) && got == 12345;
	if (!ok)
		fprintf(stderr, "\"%s\" was read as %lld\n", s ? s : "(null)", (long long)got);
	return ok;
}

static void t_parse_known(void)
{
	SG_CHECK(reads_as("1970-01-01T00:00:00Z", 0));
	SG_CHECK(reads_as("2023-11-14T22:13:20Z", 1700000000));
	SG_CHECK(reads_as("2000-02-29T00:00:00Z", 951782400));
	SG_CHECK(reads_as("1969-12-31T23:59:59Z", -1));
	SG_CHECK(reads_as("9999-12-31T23:59:59Z", 253402300799));
	SG_CHECK(reads_as("0000-01-01T00:00:00Z", -62167219200));
	/* lower case, as RFC 3339 allows */
	SG_CHECK(reads_as("2023-11-14t22:13:20z", 1700000000));
	/* fractions (MicroTime, RFC3339Nano) are dropped */
	SG_CHECK(reads_as("2023-11-14T22:13:20.5Z", 1700000000));
	SG_CHECK(reads_as("2023-11-14T22:13:20.123456Z", 1700000000));
	SG_CHECK(reads_as("2023-11-14T22:13:20.999999999Z", 1700000000));
	/* offsets: the same instant written elsewhere */
	SG_CHECK(reads_as("2023-11-15T00:13:20+02:00", 1700000000));
	SG_CHECK(reads_as("2023-11-14T17:43:20-04:30", 1700000000));
	SG_CHECK(reads_as("2023-11-14T22:13:20.25+00:00", 1700000000));
	SG_CHECK(reads_as("2023-11-14T22:13:20-00:00", 1700000000));
	/* RFC 3339's leap second: the next minute's first second */
	SG_CHECK(reads_as("2016-12-31T23:59:60Z", 1483228800));
	/* the longest form, at the bound's side */
	SG_CHECK(reads_as("2023-11-14T22:13:20.000000001+23:59", 1700000000 - 23 * 3600 - 59 * 60));
}

static void t_parse_round_trip(void)
{
	char out[SG_CLOCK_RFC3339_LEN];
	for (int64_t t = -2208988800 + 3723; t < 7258118400; t += 7 * 86400 + 1) {
		if (!sg_clock_rfc3339(out, sizeof(out), t) || !reads_as(out, t)) {
			SG_CHECK(false);
			break;
		}
	}
	for (int64_t t = -3600; t < 2 * 86400; t += 599)
		SG_CHECK(sg_clock_rfc3339(out, sizeof(out), t) && reads_as(out, t));
}

static void t_parse_refused(void)
{
	static const char *const bad[] = {
	    "",
	    "2023",
	    "2023-11-14",
	    "2023-11-14T22:13:20",   /* no zone */
	    "2023-11-14T22:13Z",     /* no seconds */
	    "2023-11-14 22:13:20Z",  /* a space for the T */
	    " 2023-11-14T22:13:20Z", /* a leading space */
	    "2023-11-14T22:13:20Z ", /* a trailing one */
	    "+2023-11-14T22:13:20Z", /* a sign where a digit is */
	    "-023-11-14T22:13:20Z",
	    "2023-+1-14T22:13:20Z",
	    "2023-11- 4T22:13:20Z",
	    "20231-11-14T22:13:20Z", /* five year digits */
	    "223-11-14T22:13:20Z",
	    "2023-1-14T22:13:20Z",
	    "2023-11-14T2:13:20Z",
	    "2023-11-14T22:13:2Z",
	    "2023-00-14T22:13:20Z", /* month 0, 13 */
	    "2023-13-14T22:13:20Z",
	    "2023-11-00T22:13:20Z", /* day 0, past the month's end */
	    "2023-11-31T22:13:20Z",
	    "2023-02-29T22:13:20Z", /* not a leap year */
	    "1900-02-29T22:13:20Z", /* a century that is not one */
	    "2023-04-31T00:00:00Z",
	    "2023-11-14T24:00:00Z", /* hours, minutes, seconds */
	    "2023-11-14T22:60:00Z",
	    "2023-11-14T22:13:61Z",
	    "2023-11-14T22:13:20.Z",           /* an empty fraction */
	    "2023-11-14T22:13:20.1234567890Z", /* past nanoseconds */
	    "2023-11-14T22:13:20,5Z",          /* a comma */
	    "2023-11-14T22:13:20+2:00",        /* offsets */
	    "2023-11-14T22:13:20+02",
	    "2023-11-14T22:13:20+0200",
	    "2023-11-14T22:13:20+24:00",
	    "2023-11-14T22:13:20+02:60",
	    "2023-11-14T22:13:20+02:00Z",
	    "2023-11-14T22:13:20ZZ",
	    "2023-11-14T22:13:20UTC",
	    "2023-11-14T22:13:20+",
	    "2023-11-14T22:13:20-02:0",
	    "\357\274\222023-11-14T22:13:20Z", /* a full-width digit (an octal escape ends at 3 digits) */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		SG_CHECK(refused(bad[i]));
	SG_CHECK(refused(NULL));
	/* an embedded NUL ends the string: what is before it is too short */
	static const char nul[] = "2023-11-14T22:1\0:20Z";
	SG_CHECK(refused(nul));
	/* the bound: nothing longer than SG_CLOCK_PARSE_MAX is read */
	char longer[SG_CLOCK_PARSE_MAX + 16];
	memset(longer, '0', sizeof(longer));
	longer[sizeof(longer) - 1] = 0;
	SG_CHECK(refused(longer));
}

SG_TEST_MAIN(SG_TEST(t_known), SG_TEST(t_like_libc), SG_TEST(t_out_of_range), SG_TEST(t_bounds), SG_TEST(t_parse_known),
             SG_TEST(t_parse_round_trip), SG_TEST(t_parse_refused))
