/*
 * The controller runtime's work queue (kube/ctrl/sg_ctrl_queue.c, contract
 * in sg_ctrl.h), without a server: deduplication, a key in progress held
 * back from other workers, delayed adds (the earlier time wins, stale heap
 * items stay silent), per-key backoff, pause, shutdown and reset, the
 * length through every state, bad keys, and a many-thread run that proves
 * no key is ever reconciled twice at once and no add is lost.
 *
 * Timing: a key that must wait is checked by the monotonic clock after the
 * get returns (never "not yet after a sleep"); a key that must not come
 * back is checked by the order of gets against a later sentinel, which
 * holds however loaded the machine is. Every blocking get runs under a
 * deadline so a broken queue fails the test instead of hanging it.
 */
#include "sg_clock.h"
#include "sg_ctrl.h"
#include "sg_test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GET_DEADLINE_MS 10000u

static sg_ctrl_queue *queue(unsigned first_ms, unsigned max_ms)
{
	sg_ctrl_queue *q = NULL;
	if (sg_ctrl_queue_new(&q, first_ms, max_ms) != SG_OK || !q)
		abort();
	return q;
}

static uint64_t ms_since(uint64_t t0_ns)
{
	return (sg_now_ns() - t0_ns) / 1000000u;
}

/* ---- a get on its own thread, so that the test can wait with a deadline ---- */

typedef struct getter {
	sg_ctrl_queue *q;
	pthread_t th;
	atomic_bool finished;
	bool ok;
	char key[SG_CTRL_KEY_MAX];
} getter;

static void *getter_main(void *arg)
{
	getter *g = arg;
	g->ok = sg_ctrl_queue_get(g->q, g->key);
	atomic_store(&g->finished, true);
	return NULL;
}

static void getter_start(getter *g, sg_ctrl_queue *q)
{
	memset(g, 0, sizeof(*g));
	g->q = q;
	atomic_init(&g->finished, false);
	if (pthread_create(&g->th, NULL, getter_main, g) != 0)
		abort();
}

/* Whether the get returned within ms. */
static bool getter_wait(getter *g, unsigned ms)
{
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u;
	while (!atomic_load(&g->finished) && sg_now_ns() < until)
		sg_sleep_ms(1);
	return atomic_load(&g->finished);
}

/* Waits for the get; past the deadline shuts the queue down to free the
 * thread (the test has failed by then). Returns what get returned. */
static bool getter_join(getter *g, unsigned ms)
{
	bool in_time = getter_wait(g, ms);
	if (!in_time) {
		fprintf(stderr, "get blocked for more than %u ms\n", ms);
		sg_ctrl_queue_shutdown(g->q);
	}
	pthread_join(g->th, NULL);
	return in_time && g->ok;
}

/* The next key, or "" when no get returned one in time. */
static void get_within(sg_ctrl_queue *q, char key[SG_CTRL_KEY_MAX], unsigned ms)
{
	getter g;
	getter_start(&g, q);
	bool ok = getter_join(&g, ms);
	memcpy(key, ok ? g.key : "", ok ? strlen(g.key) + 1 : 1);
}

/* Takes the next key, checks it is want, and returns the ms since t0_ns;
 * the key stays in progress (the caller calls done). */
static uint64_t take_at(sg_ctrl_queue *q, const char *want, uint64_t t0_ns, int line)
{
	char key[SG_CTRL_KEY_MAX];
	get_within(q, key, GET_DEADLINE_MS);
	uint64_t ms = ms_since(t0_ns);
	sg_test_checks++;
	if (strcmp(key, want) != 0) {
		sg_test_failures++;
		fprintf(stderr, "%s:%d: got key \"%s\", want \"%s\"\n", __FILE__, line, key, want);
	}
	return ms;
}
#define TAKE(q, want, t0) take_at((q), (want), (t0), __LINE__)

/* Adds the key "sentinel" after delay_ms (0: now), checks that it is the
 * next key out (nothing else is, or becomes, ready before it) and hands it
 * back; returns the ms since t0_ns. */
static uint64_t sentinel_at(sg_ctrl_queue *q, uint64_t delay_ms, uint64_t t0_ns, int line)
{
	sg_ctrl_queue_add_after(q, "sentinel", delay_ms);
	uint64_t ms = take_at(q, "sentinel", t0_ns, line);
	sg_ctrl_queue_done(q, "sentinel");
	return ms;
}
#define SENTINEL(q, delay_ms, t0) sentinel_at((q), (delay_ms), (t0), __LINE__)

/* A get that blocks now (checked for 100 ms) returns false at shutdown. */
static void shutdown_wakes(sg_ctrl_queue *q)
{
	getter g;
	getter_start(&g, q);
	SG_CHECK(!getter_wait(&g, 100));
	sg_ctrl_queue_shutdown(q);
	SG_CHECK(getter_wait(&g, GET_DEADLINE_MS));
	pthread_join(g.th, NULL);
	SG_CHECK(!g.ok);
}

/* ---- single-threaded contract ---- */

static void t_dedupe(void)
{
	sg_ctrl_queue *q = queue(0, 0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	for (int i = 0; i < 100; i++)
		sg_ctrl_queue_add(q, "ns/a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_add(q, "ns/b");
	sg_ctrl_queue_add(q, "ns/a");
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	uint64_t t0 = sg_now_ns();
	TAKE(q, "ns/a", t0); /* FIFO: the order of the first adds */
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "ns/b", t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_done(q, "ns/a");
	sg_ctrl_queue_done(q, "ns/b");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	/* The 100 adds gave one get: the next key out is a new one. */
	SENTINEL(q, 0, t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_free(q);
}

/* The keys a worker holds, read with the length: both 0 is idle. */
static size_t active(sg_ctrl_queue *q)
{
	size_t waiting, held;
	sg_ctrl_queue_counts(q, &waiting, &held);
	SG_CHECK(waiting == sg_ctrl_queue_len(q));
	return held;
}

static void t_in_progress(void)
{
	sg_ctrl_queue *q = queue(0, 0);
	SG_CHECK(active(q) == 0);
	uint64_t t0 = sg_now_ns();
	sg_ctrl_queue_add(q, "a");
	TAKE(q, "a", t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0 && active(q) == 1);
	for (int i = 0; i < 3; i++)
		sg_ctrl_queue_add(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 0); /* in progress, even when added again */

	/* Not handed to another getter while in progress ... */
	sg_ctrl_queue_add(q, "b");
	TAKE(q, "b", t0);
	SG_CHECK(active(q) == 2);
	sg_ctrl_queue_done(q, "b");
	SG_CHECK(active(q) == 1);
	getter g;
	getter_start(&g, q);
	SG_CHECK(!getter_wait(&g, 100)); /* only "a" is wanted, and it is held */
	/* ... and ready again, once, after done: the blocked getter gets it. */
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(getter_join(&g, GET_DEADLINE_MS) && strcmp(g.key, "a") == 0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SG_CHECK(active(q) == 1); /* the getter holds it */
	sg_ctrl_queue_done(q, "a");
	sg_ctrl_queue_done(q, "a"); /* a second done is ignored */
	SG_CHECK(sg_ctrl_queue_len(q) == 0 && active(q) == 0);
	SENTINEL(q, 0, t0); /* no third "a" */

	/* Done without an add meanwhile: the key is gone. */
	sg_ctrl_queue_add(q, "c");
	TAKE(q, "c", t0);
	sg_ctrl_queue_done(q, "c");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SENTINEL(q, 0, t0);
	sg_ctrl_queue_free(q);
}

static void t_add_after(void)
{
	sg_ctrl_queue *q = queue(0, 0);

	/* Not ready before its time, ready after it. */
	uint64_t t0 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "a", 150);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	uint64_t ms = TAKE(q, "a", t0);
	SG_CHECK(ms >= 150);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);

	/* A delayed key waits behind nothing: an immediate key overtakes it. */
	t0 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "a", 200);
	sg_ctrl_queue_add(q, "b");
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	TAKE(q, "b", t0);
	sg_ctrl_queue_done(q, "b");
	ms = TAKE(q, "a", t0);
	SG_CHECK(ms >= 200);
	sg_ctrl_queue_done(q, "a");

	/* The earlier of two delays wins; the later one's heap item, now
	 * stale, brings nothing back: a sentinel due after it comes first. */
	t0 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "a", 300);
	sg_ctrl_queue_add_after(q, "a", 100);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_add_after(q, "sentinel", 500);
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	ms = TAKE(q, "a", t0);
	SG_CHECK(ms >= 100);
	sg_ctrl_queue_done(q, "a");
	ms = TAKE(q, "sentinel", t0);
	SG_CHECK(ms >= 500);
	sg_ctrl_queue_done(q, "sentinel");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);

	/* A later delay does not postpone: the key comes at the first time
	 * (well before the get's deadline), not after a minute. */
	t0 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "a", 100);
	sg_ctrl_queue_add_after(q, "a", 60000);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	ms = TAKE(q, "a", t0);
	SG_CHECK(ms >= 100 && ms < 60000);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 0); /* the minute-long add was dropped, not kept */

	/* An immediate add supersedes a pending delay: ready now, and once
	 * done nothing is left waiting. */
	sg_ctrl_queue_add_after(q, "a", 60000);
	sg_ctrl_queue_add(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);

	/* The superseded delay's heap item surfaces and is dropped: no
	 * second "a" before a sentinel due after it. */
	t0 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "a", 100);
	sg_ctrl_queue_add(q, "a");
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(SENTINEL(q, 300, t0) >= 300);

	/* A delayed add of a key that is ready already is dropped (it is
	 * due sooner): one get, then the sentinel. */
	t0 = sg_now_ns();
	sg_ctrl_queue_add(q, "a");
	sg_ctrl_queue_add_after(q, "a", 50);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SENTINEL(q, 200, t0);

	/* delay 0 is an immediate add. */
	sg_ctrl_queue_add_after(q, "a", 0);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");

	/* A delay of "forever" must not wrap around to the past. */
	t0 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "forever", UINT64_MAX);
	sg_ctrl_queue_add_after(q, "later", UINT64_MAX / 1000u);
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	SENTINEL(q, 100, t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	sg_ctrl_queue_add(q, "forever");
	TAKE(q, "forever", t0);
	sg_ctrl_queue_done(q, "forever");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_free(q); /* with "later" still waiting: nothing leaks */
}

static void t_in_progress_delayed(void)
{
	sg_ctrl_queue *q = queue(0, 0);
	uint64_t t0 = sg_now_ns();
	sg_ctrl_queue_add(q, "a");
	TAKE(q, "a", t0);
	uint64_t t1 = sg_now_ns();
	sg_ctrl_queue_add_after(q, "a", 100); /* a reconcile asking "again in 100 ms" */
	SG_CHECK(sg_ctrl_queue_len(q) == 0);  /* in progress: not counted */
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1); /* now delayed */
	uint64_t ms = TAKE(q, "a", t1);
	SG_CHECK(ms >= 100);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);

	/* Delayed while in progress, and the delay passes before done: ready
	 * at done, once. */
	sg_ctrl_queue_add(q, "a");
	TAKE(q, "a", t0);
	sg_ctrl_queue_add_after(q, "a", 20);
	sg_ctrl_queue_add_after(q, "tick", 50); /* its get proves the 20 ms passed */
	TAKE(q, "tick", t0);
	sg_ctrl_queue_done(q, "tick");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");
	SENTINEL(q, 0, t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_free(q);
}

static void t_rate_limited(void)
{
	sg_ctrl_queue *q = queue(10, 80);
	static const uint64_t want[] = {10, 20, 40, 80, 80, 80};
	uint64_t t0 = sg_now_ns();
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == want[i]);
	SG_CHECK(sg_ctrl_queue_failures(q, "a") == 6);
	SG_CHECK(sg_ctrl_queue_failures(q, "b") == 0);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);                    /* one key, due at its first (earliest) time */
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "b") == 10); /* per key */
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	uint64_t ms = TAKE(q, "a", t0);
	SG_CHECK(ms >= 10);
	ms = TAKE(q, "b", t0);
	SG_CHECK(ms >= 10);
	sg_ctrl_queue_done(q, "a");
	sg_ctrl_queue_done(q, "b");
	SG_CHECK(sg_ctrl_queue_failures(q, "a") == 6); /* done does not forget */
	SG_CHECK(sg_ctrl_queue_len(q) == 0);           /* failures alone are not waiting */
	sg_ctrl_queue_forget(q, "a");
	SG_CHECK(sg_ctrl_queue_failures(q, "a") == 0);
	SG_CHECK(sg_ctrl_queue_failures(q, "b") == 1);
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 10); /* from the start again */
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 20);
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");
	sg_ctrl_queue_forget(q, "a");
	sg_ctrl_queue_forget(q, "b");
	sg_ctrl_queue_forget(q, "never-seen");
	SG_CHECK(sg_ctrl_queue_failures(q, "b") == 0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_free(q);

	/* The delay is honoured: a second failure waits twice as long. */
	q = queue(100, 1000);
	t0 = sg_now_ns();
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 100);
	ms = TAKE(q, "a", t0);
	SG_CHECK(ms >= 100);
	uint64_t t1 = sg_now_ns();
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 200); /* from the worker, in progress */
	sg_ctrl_queue_done(q, "a");
	ms = TAKE(q, "a", t1);
	SG_CHECK(ms >= 200);
	sg_ctrl_queue_done(q, "a");
	sg_ctrl_queue_free(q);

	/* Defaults: 1 s doubling to 30 s. */
	q = queue(0, 0);
	static const uint64_t def[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000};
	for (size_t i = 0; i < sizeof(def) / sizeof(def[0]); i++)
		SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == def[i]);
	for (int i = 0; i < 100; i++) /* many failures: capped, no overflow */
		SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 30000);
	SG_CHECK(sg_ctrl_queue_failures(q, "a") >= 64);
	sg_ctrl_queue_free(q); /* with a delayed key */

	/* A maximum below the first delay is the first delay. */
	q = queue(500, 100);
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 500);
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "a") == 500);
	sg_ctrl_queue_free(q);
}

static void t_pause(void)
{
	sg_ctrl_queue *q = queue(0, 0);
	uint64_t until = sg_now_ns() + 200 * 1000000ull;
	sg_ctrl_queue_pause_until(q, until);
	sg_ctrl_queue_pause_until(q, until - 150 * 1000000ull); /* an earlier end does not shorten it */
	sg_ctrl_queue_add(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "a", until);
	SG_CHECK(sg_now_ns() >= until);
	sg_ctrl_queue_done(q, "a");

	/* A pause that began while a getter slept holds it too. */
	getter g;
	getter_start(&g, q);
	SG_CHECK(!getter_wait(&g, 50));
	until = sg_now_ns() + 200 * 1000000ull;
	sg_ctrl_queue_pause_until(q, until);
	sg_ctrl_queue_add(q, "b");
	SG_CHECK(getter_join(&g, GET_DEADLINE_MS) && strcmp(g.key, "b") == 0);
	SG_CHECK(sg_now_ns() >= until);
	sg_ctrl_queue_done(q, "b");

	/* Shutdown ends a paused get. */
	sg_ctrl_queue_pause_until(q, sg_now_ns() + 3600 * 1000000000ull);
	sg_ctrl_queue_add(q, "c");
	shutdown_wakes(q);

	/* Reset ends the pause. */
	sg_ctrl_queue_reset(q);
	sg_ctrl_queue_add(q, "d");
	uint64_t t0 = sg_now_ns();
	TAKE(q, "d", t0);
	sg_ctrl_queue_done(q, "d");
	sg_ctrl_queue_free(q);
}

static void t_shutdown_reset(void)
{
	sg_ctrl_queue *q = queue(10, 100);

	/* A getter blocked on an empty queue returns false at shutdown. */
	shutdown_wakes(q);

	/* Shut down: adds are refused and get returns at once. */
	sg_ctrl_queue_add(q, "a");
	sg_ctrl_queue_add_after(q, "b", 10);
	sg_ctrl_queue_add_rate_limited(q, "c");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SG_CHECK(sg_ctrl_queue_failures(q, "c") == 0);
	char key[SG_CTRL_KEY_MAX];
	get_within(q, key, GET_DEADLINE_MS);
	SG_CHECK(key[0] == 0);

	/* Reset undoes the shutdown. */
	sg_ctrl_queue_reset(q);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_add(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	uint64_t t0 = sg_now_ns();
	TAKE(q, "a", t0);
	sg_ctrl_queue_done(q, "a");

	/* Reset empties every state: ready, delayed, in backoff. */
	sg_ctrl_queue_add(q, "ready");
	sg_ctrl_queue_add_after(q, "delayed", 60000);
	sg_ctrl_queue_add_rate_limited(q, "failing");
	sg_ctrl_queue_add(q, "held");
	SG_CHECK(sg_ctrl_queue_len(q) == 4);
	TAKE(q, "ready", t0);
	TAKE(q, "held", t0); /* both in progress now */
	sg_ctrl_queue_done(q, "ready");
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	sg_ctrl_queue_shutdown(q);
	sg_ctrl_queue_reset(q);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SG_CHECK(sg_ctrl_queue_failures(q, "failing") == 0);
	sg_ctrl_queue_done(q, "held"); /* a worker finishing after a reset: ignored */
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SENTINEL(q, 50, t0); /* nothing of before the reset comes back */
	SG_CHECK(sg_ctrl_queue_len(q) == 0);

	/* A key in progress at shutdown is simply handed back. */
	sg_ctrl_queue_add(q, "a");
	TAKE(q, "a", t0);
	sg_ctrl_queue_add(q, "a");
	sg_ctrl_queue_shutdown(q);
	sg_ctrl_queue_done(q, "a");
	get_within(q, key, GET_DEADLINE_MS);
	SG_CHECK(key[0] == 0);
	sg_ctrl_queue_shutdown(q); /* twice is fine */
	sg_ctrl_queue_free(q);
}

/* The length through every state and transition, in one sequence. */
static void t_len(void)
{
	sg_ctrl_queue *q = queue(20, 100);
	uint64_t t0 = sg_now_ns();
	sg_ctrl_queue_add(q, "a"); /* a ready */
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_add_after(q, "b", 60000); /* b delayed */
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	sg_ctrl_queue_add_after(q, "a", 60000); /* a ready already */
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "c") == 20); /* c in backoff */
	SG_CHECK(sg_ctrl_queue_len(q) == 3);
	SG_CHECK(sg_ctrl_queue_add_rate_limited(q, "c") == 40); /* still one */
	SG_CHECK(sg_ctrl_queue_len(q) == 3);
	TAKE(q, "a", t0); /* a in progress */
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	sg_ctrl_queue_add_after(q, "a", 60000); /* in progress + delayed */
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	sg_ctrl_queue_done(q, "a"); /* a delayed */
	SG_CHECK(sg_ctrl_queue_len(q) == 3);
	sg_ctrl_queue_add(q, "a"); /* a ready, its delay dropped */
	SG_CHECK(sg_ctrl_queue_len(q) == 3);
	sg_ctrl_queue_forget(q, "c"); /* still waiting */
	SG_CHECK(sg_ctrl_queue_len(q) == 3);
	SG_CHECK(sg_ctrl_queue_failures(q, "c") == 0);
	sg_ctrl_queue_add(q, "c"); /* c ready */
	SG_CHECK(sg_ctrl_queue_len(q) == 3);
	/* a and c, in either order: c may have been promoted from the heap
	 * before a was added again, or not. */
	char k1[SG_CTRL_KEY_MAX], k2[SG_CTRL_KEY_MAX];
	get_within(q, k1, GET_DEADLINE_MS);
	get_within(q, k2, GET_DEADLINE_MS);
	SG_CHECK((strcmp(k1, "a") == 0 && strcmp(k2, "c") == 0) || (strcmp(k1, "c") == 0 && strcmp(k2, "a") == 0));
	SG_CHECK(sg_ctrl_queue_len(q) == 1); /* only b */
	sg_ctrl_queue_add(q, "c");           /* c in progress, added again */
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_done(q, "a");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_done(q, "c"); /* c ready again */
	SG_CHECK(sg_ctrl_queue_len(q) == 2);
	TAKE(q, "c", t0);
	sg_ctrl_queue_done(q, "c");
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	/* The stale delays of a and c surface and add nothing. */
	SENTINEL(q, 150, t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	sg_ctrl_queue_add(q, "b"); /* b ready, its minute dropped */
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	TAKE(q, "b", t0);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_done(q, "b");
	SG_CHECK(sg_ctrl_queue_len(q) == 0);

	/* Many keys: the table grows and every key is still found once. */
	char key[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "ns/k%d", i);
		sg_ctrl_queue_add(q, key);
		sg_ctrl_queue_add(q, key);
	}
	SG_CHECK(sg_ctrl_queue_len(q) == 1000);
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "ns/k%d", i);
		TAKE(q, key, t0);
		sg_ctrl_queue_done(q, key);
	}
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	sg_ctrl_queue_free(q);
}

static void t_bad_keys(void)
{
	sg_ctrl_queue *q = queue(10, 100);
	char longest[SG_CTRL_KEY_MAX], too_long[SG_CTRL_KEY_MAX + 1];
	memset(longest, 'k', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = 0; /* SG_CTRL_KEY_MAX - 1 bytes: the longest key */
	memset(too_long, 'k', sizeof(too_long) - 1);
	too_long[sizeof(too_long) - 1] = 0; /* SG_CTRL_KEY_MAX bytes */

	const char *bad[] = {NULL, "", too_long};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_ctrl_queue_add(q, bad[i]);
		sg_ctrl_queue_add_after(q, bad[i], 10);
		SG_CHECK(sg_ctrl_queue_add_rate_limited(q, bad[i]) == 0);
		SG_CHECK(sg_ctrl_queue_failures(q, bad[i]) == 0);
		sg_ctrl_queue_forget(q, bad[i]);
		sg_ctrl_queue_done(q, bad[i]);
		SG_CHECK(sg_ctrl_queue_len(q) == 0);
	}
	/* The ignored too-long key is not truncated into the longest one. */
	sg_ctrl_queue_add(q, longest);
	SG_CHECK(sg_ctrl_queue_len(q) == 1);
	uint64_t t0 = sg_now_ns();
	TAKE(q, longest, t0);
	sg_ctrl_queue_done(q, longest);
	SG_CHECK(sg_ctrl_queue_len(q) == 0);
	SENTINEL(q, 30, t0); /* no delayed or backoff add of a bad key */
	sg_ctrl_queue_free(q);
	sg_ctrl_queue_free(NULL);
}

/* ---- many threads ---- */

#define NKEYS 50
#define NWORKERS 8
#define NPRODUCERS 4
#define PRODUCE_MS 1000u
#define DRAIN_MS 30000u
#define STABLE_MS 200u

typedef struct stress {
	sg_ctrl_queue *q;
	atomic_bool producing;
	atomic_ullong clock;             /* a logical clock: stamps order adds and starts */
	atomic_ullong last_add[NKEYS];   /* stamp taken before the last add of the key */
	atomic_ullong last_start[NKEYS]; /* stamp taken after the last get of the key */
	atomic_bool busy[NKEYS];
	atomic_uint overlaps;
	atomic_ullong adds, reconciles, failures;
} stress;

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void stamp_max(atomic_ullong *slot, unsigned long long v)
{
	unsigned long long cur = atomic_load(slot);
	while (cur < v && !atomic_compare_exchange_weak(slot, &cur, v))
		;
}

static void add_some(stress *st, int k, uint32_t kind)
{
	char key[16];
	snprintf(key, sizeof(key), "ns/k%02d", k);
	stamp_max(&st->last_add[k], atomic_fetch_add(&st->clock, 1) + 1);
	atomic_fetch_add(&st->adds, 1);
	switch (kind % 3) {
	case 0:
		sg_ctrl_queue_add(st->q, key);
		break;
	case 1:
		sg_ctrl_queue_add_after(st->q, key, kind % 7);
		break;
	default:
		(void)sg_ctrl_queue_add_rate_limited(st->q, key);
		break;
	}
}

static void *producer(void *arg)
{
	stress *st = arg;
	uint32_t seed = (uint32_t)(uintptr_t)&seed | 1u;
	for (unsigned n = 0; atomic_load(&st->producing); n++) {
		uint32_t r = rnd(&seed);
		add_some(st, (int)(r % NKEYS), r >> 8);
		if (n % 16 == 15)
			sched_yield();
	}
	return NULL;
}

static void *worker(void *arg)
{
	stress *st = arg;
	uint32_t seed = (uint32_t)(uintptr_t)&seed | 2u;
	char key[SG_CTRL_KEY_MAX];
	while (sg_ctrl_queue_get(st->q, key)) {
		int k = atoi(key + 4);
		if (k < 0 || k >= NKEYS || strncmp(key, "ns/k", 4) != 0)
			abort();
		if (atomic_exchange(&st->busy[k], true))
			atomic_fetch_add(&st->overlaps, 1);
		stamp_max(&st->last_start[k], atomic_fetch_add(&st->clock, 1) + 1);
		uint32_t r = rnd(&seed);
		for (uint32_t spin = r % 64; spin; spin--)
			sched_yield(); /* a reconcile takes a while */
		if (atomic_load(&st->producing) && r % 4 == 0) {
			/* a failure: retried after the key's backoff */
			atomic_fetch_add(&st->failures, 1);
			add_some(st, k, 2);
		} else {
			char again[16];
			snprintf(again, sizeof(again), "ns/k%02d", k);
			sg_ctrl_queue_forget(st->q, again);
		}
		atomic_store(&st->busy[k], false);
		atomic_fetch_add(&st->reconciles, 1);
		sg_ctrl_queue_done(st->q, key);
	}
	return NULL;
}

/* Every key added was started again after its last add, and nothing waits. */
static bool drained(stress *st)
{
	for (int k = 0; k < NKEYS; k++) {
		unsigned long long a = atomic_load(&st->last_add[k]);
		if (a && atomic_load(&st->last_start[k]) <= a)
			return false;
	}
	return sg_ctrl_queue_len(st->q) == 0;
}

static void t_concurrent(void)
{
	static stress st; /* large: off the stack */
	memset(&st, 0, sizeof(st));
	st.q = queue(1, 16);
	atomic_store(&st.producing, true);
	pthread_t workers[NWORKERS], producers[NPRODUCERS];
	for (int i = 0; i < NWORKERS; i++)
		if (pthread_create(&workers[i], NULL, worker, &st) != 0)
			abort();
	for (int i = 0; i < NPRODUCERS; i++)
		if (pthread_create(&producers[i], NULL, producer, &st) != 0)
			abort();
	sg_sleep_ms(PRODUCE_MS); /* the length of the run, not a wait for a state */
	atomic_store(&st.producing, false);
	for (int i = 0; i < NPRODUCERS; i++)
		pthread_join(producers[i], NULL);

	/* drained() can hold for a moment while a worker still has a key that a
	 * producer re-added during its reconcile: done() puts that key back.
	 * So the queue counts as drained once drained() has held, with no
	 * reconcile ending, for STABLE_MS (a reconcile takes microseconds). */
	uint64_t until = sg_now_ns() + (uint64_t)DRAIN_MS * 1000000u, stable_since = 0;
	unsigned long long seen = (unsigned long long)-1;
	while (sg_now_ns() < until) {
		unsigned long long r = atomic_load(&st.reconciles);
		if (!drained(&st) || r != seen) {
			seen = r;
			stable_since = 0;
		} else if (!stable_since) {
			stable_since = sg_now_ns();
		} else if (sg_now_ns() - stable_since >= (uint64_t)STABLE_MS * 1000000u) {
			break;
		}
		sg_sleep_ms(2);
	}
	SG_CHECK(drained(&st));
	sg_ctrl_queue_shutdown(st.q);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(workers[i], NULL);

	SG_CHECK(atomic_load(&st.overlaps) == 0);
	SG_CHECK(sg_ctrl_queue_len(st.q) == 0);
	int lost = 0, never = 0;
	for (int k = 0; k < NKEYS; k++) {
		unsigned long long a = atomic_load(&st.last_add[k]), s = atomic_load(&st.last_start[k]);
		never += a == 0;
		if (a && s <= a) {
			lost++;
			fprintf(stderr, "key %d: last added at %llu, last started at %llu\n", k, a, s);
		}
		SG_CHECK(!atomic_load(&st.busy[k]));
	}
	SG_CHECK(lost == 0);
	SG_CHECK(never == 0); /* 1 s of adds reached every key */
	SG_CHECK(atomic_load(&st.reconciles) >= NKEYS);
	SG_CHECK(atomic_load(&st.failures) > 0);
	printf("concurrent: %llu adds, %llu reconciles, %llu failures\n", (unsigned long long)atomic_load(&st.adds),
	       (unsigned long long)atomic_load(&st.reconciles), (unsigned long long)atomic_load(&st.failures));
	sg_ctrl_queue_free(st.q);
}

SG_TEST_MAIN(SG_TEST(t_dedupe), SG_TEST(t_in_progress), SG_TEST(t_add_after), SG_TEST(t_in_progress_delayed),
             SG_TEST(t_rate_limited), SG_TEST(t_pause), SG_TEST(t_shutdown_reset), SG_TEST(t_len), SG_TEST(t_bad_keys),
             SG_TEST(t_concurrent))
