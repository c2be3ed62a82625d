/*
 * sg_test: the unit-test harness. A test file defines `static void t_x(void)`
 * functions and lists them in SG_TEST_MAIN; each check that fails prints
 * file:line and the expression and marks the run failed, and the process
 * exits non-zero (ctest counts it). SG_CHECK_RC prints the thread's last
 * error detail on mismatch, which is usually the whole diagnosis.
 */
#ifndef SG_TEST_H
#define SG_TEST_H

#include "sg_clock.h"
#include "sg_error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sg_test_failures;
static int sg_test_checks;

#define SG_CHECK(cond)                                                              \
	do {                                                                            \
		sg_test_checks++;                                                           \
		if (!(cond)) {                                                              \
			sg_test_failures++;                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                           \
	} while (0)

#define SG_CHECK_RC(expr, want)                                                          \
	do {                                                                                 \
		sg_test_checks++;                                                                \
		int sg_rc_ = (expr);                                                             \
		if (sg_rc_ != (want)) {                                                          \
			sg_test_failures++;                                                          \
			fprintf(stderr, "%s:%d: %s returned %d (%s), want %d; last error: %s\n",     \
				__FILE__, __LINE__, #expr, sg_rc_, sg_error_name(sg_rc_), (int)(want), \
				sg_error_last()->msg);                                                   \
		}                                                                                \
	} while (0)

#define SG_CHECK_OK(expr) SG_CHECK_RC((expr), 0)

/* Checks that the last error message contains a substring. */
#define SG_CHECK_MSG(substr)                                                               \
	do {                                                                                   \
		sg_test_checks++;                                                                  \
		if (!strstr(sg_error_last()->msg, (substr))) {                                     \
			sg_test_failures++;                                                            \
			fprintf(stderr, "%s:%d: error \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,     \
				sg_error_last()->msg, (substr));                                           \
		}                                                                                  \
	} while (0)

/* Waits for a condition, not for time: evaluates cond every
 * SG_TEST_POLL_MS until it holds, for at most ms milliseconds. A check:
 * past the deadline it fails with the condition's text (and the test goes
 * on, as after any failed check). */
#define SG_TEST_POLL_MS 20u
#define SG_WAIT_FOR(ms, cond)                                                                     \
	do {                                                                                          \
		sg_test_checks++;                                                                         \
		uint64_t sg_until_ = sg_now_ns() + (uint64_t)(ms) * 1000000u;                             \
		while (!(cond)) {                                                                         \
			if (sg_now_ns() > sg_until_) {                                                        \
				sg_test_failures++;                                                               \
				fprintf(stderr, "%s:%d: not within %u ms: %s\n", __FILE__, __LINE__, (unsigned)(ms), \
					#cond);                                                                       \
				break;                                                                            \
			}                                                                                     \
			sg_sleep_ms(SG_TEST_POLL_MS);                                                         \
		}                                                                                         \
	} while (0)

/* Wall-clock upper bounds that are a test's slack, not the product's own
 * bound, are multiplied by SG_TEST_SLOW: 3 in sanitizer builds, which run
 * several times slower and share CI's two vCPUs with other tests, else 1.
 * Release builds keep the tight figure, so the check keeps its power. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SG_TEST_SLOW 3u
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SG_TEST_SLOW 3u
#endif
#endif
#ifndef SG_TEST_SLOW
#define SG_TEST_SLOW 1u
#endif

typedef struct sg_test_case {
	const char *name;
	void (*fn)(void);
} sg_test_case;

#define SG_TEST(fn) {#fn, fn}

#define SG_TEST_MAIN(...)                                                              \
	int main(int argc, char **argv)                                                    \
	{                                                                                  \
		/* Line by line: a test ctest kills at its TIMEOUT still shows               \
		 * which cases passed and what the hung one printed. */                      \
		setvbuf(stdout, NULL, _IOLBF, 0);                                            \
		static const sg_test_case cases[] = {__VA_ARGS__};                           \
		size_t ncases = sizeof(cases) / sizeof(cases[0]);                            \
		for (size_t i = 0; i < ncases; i++) {                                        \
			if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)                       \
				continue;                                                              \
			int before = sg_test_failures;                                             \
			cases[i].fn();                                                             \
			printf("%s %s\n", sg_test_failures == before ? "ok  " : "FAIL", cases[i].name); \
		}                                                                              \
		printf("%d checks, %d failed\n", sg_test_checks, sg_test_failures);           \
		return sg_test_failures ? 1 : 0;                                               \
	}

#endif
