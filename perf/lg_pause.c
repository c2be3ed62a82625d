/*
 * lg_pause: one pinned sleeper per CPU that notes every sleep overrunning
 * its tick by min_ns or more (see lg_pause.h for what that measures).
 *
 * Each thread keeps its own bounded list, so the watchers share nothing
 * while they run; lg_pause_stop merges the lists afterwards. Real-time
 * priority is asked for and, if refused (no CAP_SYS_NICE), the watcher
 * runs anyway and says so.
 */
/* The one file of signet that asks for more than POSIX: a watcher must stay
 * on its CPU to watch it, and CPU affinity is Linux's (pthread_setaffinity_np,
 * CPU_SET). loadgen is a Linux benchmark tool; the product does not need it. */
#define _GNU_SOURCE
#include "lg_pause.h"

#include "sg_clock.h"
#include "sg_guard.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PER_CPU 65536 /* a pause per tick for a minute at 1 ms */
#define MAX_CPUS 256

typedef struct watcher {
	lg_pause_watch *w;
	int cpu;
	pthread_t th;
	bool started, realtime;
	lg_pause *seen;
	size_t n;
	uint64_t dropped;
} watcher;

struct lg_pause_watch {
	uint64_t tick_ns, min_ns;
	atomic_bool stop;
	watcher *ws;
	int nws;
	lg_pause *merged;
	size_t nmerged;
};

static void *watch(void *arg)
{
	watcher *t = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(t->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	struct sched_param sp = {.sched_priority = 50};
	t->realtime = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
	struct timespec tick = {(time_t)(t->w->tick_ns / 1000000000u), (long)(t->w->tick_ns % 1000000000u)};
	uint64_t before = sg_now_ns();
	while (!atomic_load_explicit(&t->w->stop, memory_order_relaxed)) {
		nanosleep(&tick, NULL);
		uint64_t after = sg_now_ns();
		uint64_t due = before + t->w->tick_ns;
		if (after > due && after - due >= t->w->min_ns) {
			if (t->n < MAX_PER_CPU)
				t->seen[t->n++] = (lg_pause){due, after};
			else
				t->dropped++;
		}
		before = after;
	}
	return NULL;
}

static int by_start(const void *a, const void *b)
{
	const lg_pause *x = a, *y = b;
	return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

size_t lg_pause_merge(lg_pause *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), by_start);
	size_t k = 1;
	for (size_t i = 1; i < n; i++) {
		if (v[i].start_ns <= v[k - 1].end_ns) {
			if (v[i].end_ns > v[k - 1].end_ns)
				v[k - 1].end_ns = v[i].end_ns;
		} else {
			v[k++] = v[i];
		}
	}
	return k;
}

bool lg_pause_overlaps(const lg_pause *v, size_t n, uint64_t from, uint64_t to)
{
	/* The first pause ending after `from`; merged pauses are disjoint and
	 * sorted, so their ends are sorted too. */
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].end_ns <= from)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && v[lo].start_ns < to;
}

lg_pause_sum lg_pause_summarize(const lg_pause *v, size_t n, uint64_t from, uint64_t to)
{
	lg_pause_sum r = {0};
	for (size_t i = 0; i < n; i++) {
		if (v[i].end_ns <= from || v[i].start_ns >= to)
			continue;
		double ms = (double)(v[i].end_ns - v[i].start_ns) / 1e6;
		r.n++;
		r.n_over_5ms += ms >= 5.0;
		r.total_ms += ms;
		if (ms > r.max_ms)
			r.max_ms = ms;
	}
	return r;
}

int lg_pause_start(lg_pause_watch **out, uint64_t tick_ns, uint64_t min_ns)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int n = ncpu < 1 ? 1 : ncpu > MAX_CPUS ? MAX_CPUS : (int)ncpu;
	lg_pause_watch *w = calloc(1, sizeof(*w));
	SG_ENSURE(w, SG_EINTERNAL, "out of memory");
	w->tick_ns = tick_ns;
	w->min_ns = min_ns;
	w->ws = calloc((size_t)n, sizeof(*w->ws));
	if (!w->ws) {
		free(w);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	for (int i = 0; i < n; i++) {
		watcher *t = &w->ws[i];
		t->w = w;
		t->cpu = i;
		t->seen = malloc(MAX_PER_CPU * sizeof(*t->seen));
		w->nws = i + 1;
		if (!t->seen || pthread_create(&t->th, NULL, watch, t) != 0) {
			lg_pause_stop(w);
			lg_pause_free(w);
			SG_BAIL(SG_EINTERNAL, "cannot start the pause watcher for CPU %d", i);
		}
		t->started = true;
	}
	*out = w;
	return SG_OK;
}

void lg_pause_stop(lg_pause_watch *w)
{
	atomic_store(&w->stop, true);
	size_t total = 0;
	for (int i = 0; i < w->nws; i++) {
		if (w->ws[i].started)
			pthread_join(w->ws[i].th, NULL);
		w->ws[i].started = false;
		total += w->ws[i].n;
	}
	free(w->merged);
	w->merged = malloc((total ? total : 1) * sizeof(*w->merged));
	w->nmerged = 0;
	if (!w->merged)
		return; /* lg_pause_list then reports none; loadgen says so */
	for (int i = 0; i < w->nws; i++) {
		if (w->ws[i].n) /* seen is NULL for a watcher that failed to start */
			memcpy(w->merged + w->nmerged, w->ws[i].seen, w->ws[i].n * sizeof(*w->merged));
		w->nmerged += w->ws[i].n;
	}
	w->nmerged = lg_pause_merge(w->merged, w->nmerged);
}

const lg_pause *lg_pause_list(const lg_pause_watch *w, size_t *n)
{
	*n = w->merged ? w->nmerged : 0;
	return w->merged;
}

bool lg_pause_realtime(const lg_pause_watch *w)
{
	for (int i = 0; i < w->nws; i++)
		if (!w->ws[i].realtime)
			return false;
	return w->nws > 0;
}

uint64_t lg_pause_dropped(const lg_pause_watch *w)
{
	uint64_t d = 0;
	for (int i = 0; i < w->nws; i++)
		d += w->ws[i].dropped;
	return d;
}

void lg_pause_free(lg_pause_watch *w)
{
	if (!w)
		return;
	for (int i = 0; i < w->nws; i++)
		free(w->ws[i].seen);
	free(w->ws);
	free(w->merged);
	free(w);
}
