/*
 * vector_fixture: reading the published test vectors under data/ (Project
 * Wycheproof's, converted to one test a line with hex fields; each file's
 * header says which and from where). Header-only: each test file is its
 * own program.
 */
#ifndef VECTOR_FIXTURE_H
#define VECTOR_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes the hex field h into out and returns its length; "-" is an
 * empty field. A malformed field, or one longer than cap, aborts: the
 * data files are ours, so that is a broken file, not a test result. */
static inline size_t vector_unhex(const char *h, uint8_t *out, size_t cap)
{
	if (strcmp(h, "-") == 0)
		return 0;
	size_t n = strlen(h) / 2;
	if (strlen(h) % 2 || n > cap)
		abort();
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			abort();
		out[i] = (uint8_t)v;
	}
	return n;
}

#endif
