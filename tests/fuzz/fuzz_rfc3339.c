/*
 * Fuzz target for sg_clock_parse_rfc3339, the reader of the API server's
 * timestamps (a pod's or service account's deletionTimestamp decides
 * whether its token is refused; a CertificateRequest's creationTimestamp
 * whether the sweep takes it).
 *
 * The input, cut at its first NUL and at PARSE_INPUT_MAX bytes, is read.
 * Oracles: a refusal leaves the result as it was; an acceptance comes from
 * 20 to SG_CLOCK_PARSE_MAX bytes whose fixed positions hold the form's
 * separators, and gives a time within what four-digit years and a
 * +-23:59 offset can write; writing that time back (sg_clock_rfc3339) and
 * reading it gives the same time; and an input in the short form (20
 * bytes, no leap second) is exactly what writing gives, but for the case
 * of 'T' and 'Z'.
 */
#include "sg_clock.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARSE_INPUT_MAX (SG_CLOCK_PARSE_MAX + 8) /* past the bound, to reach that refusal */
#define EARLIEST (-62167219200LL - 86400)        /* 0000-01-01, less a day of offset */
#define LATEST (253402300799LL + 86400 + 1)      /* 9999-12-31T23:59:60, plus a day */

static void check(int cond)
{
	if (!cond)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char s[PARSE_INPUT_MAX + 1];
	size_t n = size < PARSE_INPUT_MAX ? size : PARSE_INPUT_MAX;
	memcpy(s, data, n);
	s[n] = 0;
	n = strlen(s);

	int64_t t = INT64_MIN;
	if (!sg_clock_parse_rfc3339(s, &t)) {
		check(t == INT64_MIN);
		return 0;
	}
	check(n >= SG_CLOCK_RFC3339_LEN - 1 && n <= SG_CLOCK_PARSE_MAX);
	check(s[4] == '-' && s[7] == '-' && toupper((unsigned char)s[10]) == 'T' && s[13] == ':' && s[16] == ':');
	check(t >= EARLIEST && t <= LATEST);

	char out[SG_CLOCK_RFC3339_LEN];
	if (sg_clock_rfc3339(out, sizeof(out), t)) {
		int64_t again = INT64_MIN;
		check(sg_clock_parse_rfc3339(out, &again) && again == t);
		if (n == SG_CLOCK_RFC3339_LEN - 1 && !(s[17] == '6' && s[18] == '0')) {
			char upper[SG_CLOCK_RFC3339_LEN];
			memcpy(upper, s, sizeof(upper));
			upper[10] = 'T';
			upper[19] = 'Z';
			check(strcmp(upper, out) == 0);
		}
	}
	return 0;
}
