/*
 * Go durations (contract: sg_goduration.h), as time.ParseDuration reads
 * them (Go's src/time/format.go) and Duration.String() writes them.
 *
 * Design notes. Parsing is done in unsigned nanoseconds, exactly as Go
 * accumulates them, so the int64 bound falls where Go's does; only then is
 * the value cut to whole seconds. Fraction digits past what fits are below
 * a nanosecond of any unit and are read but ignored, as Go does. The input
 * is bounded to 64 bytes: no duration needs more.
 */
#include "sg_goduration.h"

#include "sg_guard.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define NS_PER_S 1000000000ull
#define GO_DURATION_MAX 9223372036854775807ull /* Go's time.Duration is int64 nanoseconds */

/* One unit a line: the table is read more than it is written. */
/* clang-format off */
static const struct {
	const char *name;
	uint64_t ns;
} units[] = {
	{"ns", 1},
	{"us", 1000},
	{"\xc2\xb5s", 1000}, /* U+00B5 micro sign */
	{"\xce\xbcs", 1000}, /* U+03BC Greek mu */
	{"ms", 1000000},
	{"s", NS_PER_S},
	{"m", 60 * NS_PER_S},
	{"h", 3600 * NS_PER_S},
};
/* clang-format on */

int sg_goduration_parse(const char *s, int64_t *seconds)
{
	*seconds = 0;
	SG_ENSURE(s, SG_EINVAL, "duration: missing");
	const char *orig = s;
	size_t len = strnlen(s, 65);
	SG_ENSURE(len > 0 && len <= 64, SG_EINVAL, "duration: %s", len ? "longer than 64 characters" : "empty");
	/* Go accepts a sign on zero ("-0", "-0s"): a '-' is refused below
	 * only when the value is not 0. */
	bool neg = *s == '-';
	if (*s == '+' || *s == '-')
		s++;
	if (strcmp(s, "0") == 0)
		return SG_OK;
	SG_ENSURE(*s, SG_EINVAL, "duration \"%s\" is not a Go duration (like \"2160h\" or \"1h30m\")", orig);
	uint64_t total = 0;
	while (*s) {
		/* [0-9]*(\.[0-9]*)?, at least one digit */
		uint64_t whole = 0, frac = 0, scale = 1;
		bool digits = false, overflow = false;
		for (; *s >= '0' && *s <= '9'; s++) {
			digits = true;
			uint64_t d = (uint64_t)(*s - '0');
			if (whole > (GO_DURATION_MAX - d) / 10) /* up to the int64 maximum itself, as Go */
				overflow = true;
			else
				whole = whole * 10 + d;
		}
		if (*s == '.') {
			s++;
			for (; *s >= '0' && *s <= '9'; s++) {
				digits = true;
				if (scale <= UINT64_MAX / 100) { /* further digits are below a nanosecond of any unit */
					frac = frac * 10 + (uint64_t)(*s - '0');
					scale *= 10;
				}
			}
		}
		SG_ENSURE(digits, SG_EINVAL, "duration \"%s\" is not a Go duration (like \"2160h\" or \"1h30m\")",
		          orig);
		SG_ENSURE(!overflow, SG_EINVAL, "duration \"%s\" is too large", orig);
		const char *u = s;
		while (*s && *s != '.' && (*s < '0' || *s > '9'))
			s++;
		size_t ulen = (size_t)(s - u);
		SG_ENSURE(ulen > 0, SG_EINVAL, "duration \"%s\" lacks a unit (ns, us, ms, s, m or h)", orig);
		uint64_t unit = 0;
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (strlen(units[i].name) == ulen && memcmp(units[i].name, u, ulen) == 0)
				unit = units[i].ns;
		SG_ENSURE(unit, SG_EINVAL, "duration \"%s\" has an unknown unit (ns, us, ms, s, m or h)", orig);
		SG_ENSURE(whole <= GO_DURATION_MAX / unit, SG_EINVAL, "duration \"%s\" is too large", orig);
		uint64_t v = whole * unit;
		/* frac / scale of a unit, in ns: unit <= 3.6e12 and frac < scale
		 * <= 1e18 stay inside 128 bits. */
		v += (uint64_t)((unsigned __int128)frac * unit / scale);
		SG_ENSURE(v <= GO_DURATION_MAX - total, SG_EINVAL, "duration \"%s\" is too large", orig);
		total += v;
	}
	SG_ENSURE(!neg || total == 0, SG_EINVAL, "duration \"%s\" is negative", orig);
	*seconds = (int64_t)(total / NS_PER_S);
	return SG_OK;
}

void sg_goduration_format(int64_t seconds, char *out, size_t cap)
{
	if (seconds <= 0) {
		snprintf(out, cap, "0s");
		return;
	}
	long long h = seconds / 3600, m = seconds / 60 % 60, sec = seconds % 60;
	if (h)
		snprintf(out, cap, "%lldh%lldm%llds", h, m, sec);
	else if (m)
		snprintf(out, cap, "%lldm%llds", m, sec);
	else
		snprintf(out, cap, "%llds", sec);
}
