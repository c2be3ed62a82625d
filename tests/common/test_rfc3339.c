/*
 * Tests for sg_clock_rfc3339: the text gmtime_r + strftime("%Y-%m-%dT
 * %H:%M:%SZ") gives, for the epoch, leap days, times before 1970, the ends
 * of the 4-digit years and a sweep of seconds, days and years; refusals
 * past year 9999 and before year 0; and the buffer's bounds (too small:
 * false and an empty string; cap 0: nothing written).
 */
#include "sg_clock.h"
#include "sg_test.h"

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

SG_TEST_MAIN(SG_TEST(t_known), SG_TEST(t_like_libc), SG_TEST(t_out_of_range), SG_TEST(t_bounds))
