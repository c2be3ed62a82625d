/* The out-of-line parts of sg_clock: sleeping, calendar arithmetic and
 * RFC 3339 text. */
#include "sg_clock.h"

#include <errno.h>
#include <stdio.h>

void sg_sleep_ms(unsigned ms)
{
	struct timespec req = {ms / 1000, (long)(ms % 1000) * 1000000L}, rem;
	while (nanosleep(&req, &rem) != 0 && errno == EINTR)
		req = rem;
}

int64_t sg_days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void sg_civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

bool sg_clock_rfc3339(char *out, size_t cap, int64_t t)
{
	if (cap > 0)
		out[0] = '\0';
	if (cap < SG_CLOCK_RFC3339_LEN)
		return false;
	/* Floor division: a time before 1970 is the day before plus a positive
	 * remainder, as gmtime_r reads it. */
	int64_t days = t / 86400, secs = t % 86400;
	if (secs < 0) {
		secs += 86400;
		days--;
	}
	int64_t y;
	int m, d;
	sg_civil_from_days(days, &y, &m, &d);
	if (y < 0 || y > 9999)
		return false;
	snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02dZ", (int)y, m, d, (int)(secs / 3600), (int)(secs / 60 % 60),
	         (int)(secs % 60));
	return true;
}
