/* The out-of-line parts of sg_clock: sleeping, calendar arithmetic and
 * RFC 3339 text, written and read. */
#include "sg_clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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

/* n decimal digits at s into *v; false at anything else (a NUL included:
 * the caller's bound keeps the reads inside the string). */
static bool digits(const char *s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		*v = *v * 10 + (s[i] - '0');
	}
	return true;
}

static int days_in_month(int y, int m)
{
	static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return m == 2 && leap ? 29 : days[m - 1];
}

bool sg_clock_parse_rfc3339(const char *s, int64_t *out)
{
	/* The shortest form is "YYYY-MM-DDTHH:MM:SSZ"; every fixed read below
	 * stays within those 20 bytes or stops at the NUL. */
	size_t len = s ? strnlen(s, SG_CLOCK_PARSE_MAX + 1) : 0;
	if (len < SG_CLOCK_RFC3339_LEN - 1 || len > SG_CLOCK_PARSE_MAX)
		return false;
	int y, mo, d, h, mi, sec, oh = 0, om = 0;
	if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' || !digits(s + 8, 2, &d) ||
	    (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) ||
	    s[16] != ':' || !digits(s + 17, 2, &sec))
		return false;
	/* 60: RFC 3339's leap second, read as the next minute's first second */
	if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60)
		return false;
	const char *p = s + 19;
	if (*p == '.') {
		const char *f = ++p;
		while (*p >= '0' && *p <= '9' && p - f < 9)
			p++;
		if (p == f || (*p >= '0' && *p <= '9'))
			return false; /* none, or more than nanoseconds */
	}
	int sign = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p == '+' ? 1 : -1;
		if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
			return false;
		p += 6;
	} else {
		return false;
	}
	if (*p)
		return false;
	*out = sg_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - sign * (oh * 3600 + om * 60);
	return true;
}
