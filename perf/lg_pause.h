/*
 * lg_pause: a watcher for the machine's own pauses, for loadgen.
 *
 * On a virtual machine the host can stop a virtual CPU for milliseconds at
 * a time; such a pause delays every request in flight on it, whatever the
 * server does, and on a shared host it is frequent enough to decide a p99.
 * The watcher runs one thread per online CPU, pinned to it, at real-time
 * priority (SCHED_FIFO) where the process may, sleeping `tick_ns` at a
 * time. Inside the guest nothing but an interrupt can keep such a thread
 * from running when its sleep ends, so a sleep that overruns by
 * `min_ns` or more is a pause of the CPU itself, not scheduling by the guest
 * (without real-time priority it may be either: lg_pause_realtime says
 * which). Its cost is one wake-up per tick per CPU.
 *
 * Ownership: the watch owns its threads and its list; lg_pause_stop joins
 * the threads and lg_pause_free releases the rest. The list is read only
 * after lg_pause_stop.
 */
#ifndef LG_PAUSE_H
#define LG_PAUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lg_pause {
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC, as sg_now_ns */
} lg_pause;

typedef struct lg_pause_watch lg_pause_watch;

/* What loadgen watches with: 1 ms sleeps, a pause is an overrun of 2 ms or
 * more. */
#define LG_PAUSE_TICK_NS 1000000u
#define LG_PAUSE_MIN_NS 2000000u

/* The pauses of a merged list that overlap [from, to): how many, how many of
 * 5 ms or more, their total and the longest (ms). */
typedef struct lg_pause_sum {
	size_t n, n_over_5ms;
	double total_ms, max_ms;
} lg_pause_sum;
lg_pause_sum lg_pause_summarize(const lg_pause *v, size_t n, uint64_t from, uint64_t to);

/* Starts the watcher threads. Fails (SG_EINTERNAL) only when a thread
 * cannot be created. */
int lg_pause_start(lg_pause_watch **out, uint64_t tick_ns, uint64_t min_ns);

/* Stops and joins the threads; then merges what they saw into one list of
 * pauses in time order, overlapping ones (several CPUs at once) made one. */
void lg_pause_stop(lg_pause_watch *w);

/* After lg_pause_stop: the merged pauses; *n is their count. */
const lg_pause *lg_pause_list(const lg_pause_watch *w, size_t *n);

/* Whether every watcher thread got real-time priority. */
bool lg_pause_realtime(const lg_pause_watch *w);

/* Pauses beyond the list's capacity (then the list is incomplete). */
uint64_t lg_pause_dropped(const lg_pause_watch *w);

void lg_pause_free(lg_pause_watch *w);

/* The two steps behind the report, exposed for tests. lg_pause_merge sorts
 * v[0..n) by start and merges overlapping or touching pauses in place;
 * returns the new count. lg_pause_overlaps says whether any pause of a
 * merged list overlaps the open interval (from, to); O(log n). */
size_t lg_pause_merge(lg_pause *v, size_t n);
bool lg_pause_overlaps(const lg_pause *v, size_t n, uint64_t from, uint64_t to);

#endif
