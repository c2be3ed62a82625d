/*
 * loadgen's pause watcher: merging what the per-CPU threads saw, the
 * overlap test behind "requests no pause touched", and a short live run.
 */
#include "lg_pause.h"
#include "sg_test.h"

#include <time.h>

static void t_merge(void)
{
	SG_CHECK(lg_pause_merge(NULL, 0) == 0);
	/* Two CPUs paused together (overlapping), one pause touching the next,
	 * one on its own, given out of order. */
	lg_pause v[] = {{300, 400}, {100, 150}, {120, 180}, {180, 200}, {500, 501}};
	size_t n = lg_pause_merge(v, 5);
	SG_CHECK(n == 3);
	SG_CHECK(v[0].start_ns == 100 && v[0].end_ns == 200);
	SG_CHECK(v[1].start_ns == 300 && v[1].end_ns == 400);
	SG_CHECK(v[2].start_ns == 500 && v[2].end_ns == 501);
	/* One pause inside another. */
	lg_pause w[] = {{10, 100}, {20, 30}};
	SG_CHECK(lg_pause_merge(w, 2) == 1 && w[0].start_ns == 10 && w[0].end_ns == 100);
}

static void t_overlaps(void)
{
	const lg_pause v[] = {{100, 200}, {300, 400}, {1000, 2000}};
	SG_CHECK(!lg_pause_overlaps(v, 0, 0, 5000));
	SG_CHECK(!lg_pause_overlaps(v, 3, 0, 100));     /* ends as the first begins */
	SG_CHECK(lg_pause_overlaps(v, 3, 0, 101));
	SG_CHECK(!lg_pause_overlaps(v, 3, 200, 300));   /* between two pauses, touching both */
	SG_CHECK(lg_pause_overlaps(v, 3, 199, 300));
	SG_CHECK(lg_pause_overlaps(v, 3, 350, 360));    /* inside one */
	SG_CHECK(lg_pause_overlaps(v, 3, 50, 5000));    /* spanning all */
	SG_CHECK(lg_pause_overlaps(v, 3, 1999, 2001));
	SG_CHECK(!lg_pause_overlaps(v, 3, 2000, 9000)); /* after the last */
	SG_CHECK(!lg_pause_overlaps(v, 3, 500, 999));
}

static void t_summarize(void)
{
	const lg_pause v[] = {{100, 2000100}, {5000000, 12000000}, {20000000, 21000000}};
	lg_pause_sum all = lg_pause_summarize(v, 3, 0, 30000000);
	SG_CHECK(all.n == 3 && all.n_over_5ms == 1);
	SG_CHECK(all.total_ms > 10.0 - 1e-9 && all.total_ms < 10.0 + 1e-9); /* 2 + 7 + 1 ms */
	SG_CHECK(all.max_ms > 7.0 - 1e-9 && all.max_ms < 7.0 + 1e-9);
	/* Only what overlaps the window counts; touching an end is outside. */
	lg_pause_sum mid = lg_pause_summarize(v, 3, 2000100, 20000000);
	SG_CHECK(mid.n == 1 && mid.n_over_5ms == 1);
	lg_pause_sum none = lg_pause_summarize(v, 3, 12000000, 20000000);
	SG_CHECK(none.n == 0 && none.total_ms == 0 && none.max_ms == 0);
	SG_CHECK(lg_pause_summarize(NULL, 0, 0, 1).n == 0);
}

static void t_live(void)
{
	lg_pause_watch *w = NULL;
	uint64_t t0 = sg_now_ns();
	SG_CHECK_RC(lg_pause_start(&w, LG_PAUSE_TICK_NS, LG_PAUSE_MIN_NS), SG_OK);
	if (!w)
		return;
	/* Watching for 100 ms is the test, not a wait for a state. A loaded
	 * machine may stretch the watch and pause it more: the bound below
	 * is on the time actually watched. */
	struct timespec d = {0, 100000000}; /* 100 ms */
	nanosleep(&d, NULL);
	lg_pause_stop(w);
	uint64_t watched_ms = (sg_now_ns() - t0) / 1000000u;
	size_t n = 99;
	const lg_pause *p = lg_pause_list(w, &n);
	SG_CHECK(n <= watched_ms / 2 + 1); /* at most one pause per 2 ms of watching */
	SG_CHECK(lg_pause_dropped(w) == 0);
	for (size_t i = 0; i < n; i++) {
		SG_CHECK(p[i].end_ns - p[i].start_ns >= 2000000u);
		SG_CHECK(i == 0 || p[i].start_ns > p[i - 1].end_ns); /* sorted and merged */
	}
	printf("live: %zu pauses in 100 ms, real-time priority: %s\n", n, lg_pause_realtime(w) ? "yes" : "no");
	lg_pause_stop(w); /* stopping twice is harmless */
	lg_pause_free(w);
}

SG_TEST_MAIN(SG_TEST(t_merge), SG_TEST(t_overlaps), SG_TEST(t_summarize), SG_TEST(t_live))
