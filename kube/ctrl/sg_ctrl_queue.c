/*
 * The controllers' work queue (contract: sg_ctrl.h), after client-go's
 * workqueue with its rate-limiting and delaying layers folded into one.
 *
 * Every key the queue knows has one entry in a hash table (common/sg_strmap),
 * holding all its state at once:
 *   dirty       it must be reconciled (again): in the FIFO, or, while in
 *               progress, due to go back into the FIFO at done();
 *   processing  a worker holds it;
 *   due_ns      a delayed add is pending for that monotonic time (0: none);
 *   failures    consecutive failures, for the backoff.
 * Delayed adds wait in a min-heap of (due, entry). An entry whose delay is
 * replaced (sooner, or by an immediate add) leaves a stale heap item that
 * is recognised by its time no longer matching the entry's and dropped when
 * it surfaces; heap items pin their entry (heap_refs) so it is never freed
 * under them. An entry with no state left is freed at once, so the table
 * holds only keys with something pending.
 *
 * One mutex guards everything; the condition variable runs on
 * CLOCK_MONOTONIC so a wall-clock step cannot stall or hurry a delay.
 */
#include "sg_ctrl.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_strmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct entry {
	sg_strmap_node h;    /* in the table, keyed by key */
	struct entry *fnext; /* FIFO */
	uint64_t due_ns;
	unsigned failures;
	unsigned heap_refs;
	bool dirty, processing, in_fifo;
	char key[];
} entry;

typedef struct delayed {
	uint64_t due_ns;
	entry *e;
} delayed;

struct sg_ctrl_queue {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sg_strmap table;
	entry *head, *tail;
	delayed *heap;
	size_t heap_len, heap_cap;
	size_t waiting; /* keys dirty-and-not-processing or delayed: the length */
	size_t active;  /* keys a worker holds (got, not yet done) */
	uint64_t pause_until_ns;
	unsigned first_ms, max_ms;
	bool shut;
};

/* ---- the table ---- */

#define TABLE_BUCKETS 64

static entry *find(sg_ctrl_queue *q, const char *key)
{
	sg_strmap_node *h = sg_strmap_find(&q->table, key);
	return h ? SG_STRMAP_ENTRY(h, entry, h) : NULL;
}

static entry *find_or_add(sg_ctrl_queue *q, const char *key)
{
	entry *e = find(q, key);
	if (e)
		return e;
	size_t len = strlen(key);
	e = calloc(1, sizeof(*e) + len + 1);
	if (!e)
		return NULL;
	memcpy(e->key, key, len + 1);
	e->h.key = e->key;
	sg_strmap_insert(&q->table, &e->h);
	return e;
}

/* Frees e when nothing refers to it any more. */
static void release(sg_ctrl_queue *q, entry *e)
{
	if (e->dirty || e->processing || e->due_ns || e->failures || e->heap_refs || e->in_fifo)
		return;
	(void)sg_strmap_remove(&q->table, &e->h); /* always there: entries live in it */
	free(e);
}

/* Whether e counts toward the length: ready, or delayed, and not held. */
static bool counted(const entry *e)
{
	return !e->processing && (e->dirty || e->due_ns);
}

/* Keeps the length right across a change of e that began with counted(e)
 * == was. */
static void account(sg_ctrl_queue *q, bool was, const entry *e)
{
	bool now = counted(e);
	if (now && !was)
		q->waiting++;
	else if (was && !now)
		q->waiting--;
}

/* ---- FIFO and heap ---- */

static void fifo_push(sg_ctrl_queue *q, entry *e)
{
	e->fnext = NULL;
	e->in_fifo = true;
	if (q->tail)
		q->tail->fnext = e;
	else
		q->head = e;
	q->tail = e;
}

static entry *fifo_pop(sg_ctrl_queue *q)
{
	entry *e = q->head;
	if (!e)
		return NULL;
	q->head = e->fnext;
	if (!q->head)
		q->tail = NULL;
	e->fnext = NULL;
	e->in_fifo = false;
	return e;
}

static bool heap_push(sg_ctrl_queue *q, entry *e, uint64_t due)
{
	if (q->heap_len == q->heap_cap) {
		size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
		delayed *h = realloc(q->heap, cap * sizeof(*h));
		if (!h)
			return false;
		q->heap = h;
		q->heap_cap = cap;
	}
	size_t i = q->heap_len++;
	q->heap[i] = (delayed){due, e};
	e->heap_refs++;
	while (i > 0 && q->heap[(i - 1) / 2].due_ns > q->heap[i].due_ns) {
		delayed t = q->heap[i];
		q->heap[i] = q->heap[(i - 1) / 2];
		q->heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return true;
}

static delayed heap_pop(sg_ctrl_queue *q)
{
	delayed top = q->heap[0];
	q->heap[0] = q->heap[--q->heap_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < q->heap_len && q->heap[l].due_ns < q->heap[m].due_ns)
			m = l;
		if (r < q->heap_len && q->heap[r].due_ns < q->heap[m].due_ns)
			m = r;
		if (m == i)
			break;
		delayed t = q->heap[i];
		q->heap[i] = q->heap[m];
		q->heap[m] = t;
		i = m;
	}
	top.e->heap_refs--;
	return top;
}

/* ---- state changes (lock held) ---- */

/* Marks e ready now. */
static void make_ready(sg_ctrl_queue *q, entry *e)
{
	bool was = counted(e);
	e->due_ns = 0; /* a pending delay is superseded (its heap item goes stale) */
	if (!e->dirty) {
		e->dirty = true;
		if (!e->processing)
			fifo_push(q, e);
	}
	account(q, was, e);
	pthread_cond_signal(&q->cv);
}

static void promote_due(sg_ctrl_queue *q, uint64_t now)
{
	while (q->heap_len && q->heap[0].due_ns <= now) {
		delayed d = heap_pop(q);
		if (d.e->due_ns == d.due_ns)
			make_ready(q, d.e);
		release(q, d.e);
	}
}

static void drop(const char *key)
{
	sg_log(SG_LOG_WARN, "controller queue: cannot queue a key (out of memory)", SG_F_STR("key", key), SG_F_END);
}

static bool key_ok(const char *key)
{
	return key && key[0] && strnlen(key, SG_CTRL_KEY_MAX) < SG_CTRL_KEY_MAX;
}

/* ---- the contract ---- */

int sg_ctrl_queue_new(sg_ctrl_queue **out, unsigned first_ms, unsigned max_ms)
{
	*out = NULL;
	sg_ctrl_queue *q = calloc(1, sizeof(*q));
	SG_ENSURE(q, SG_EINTERNAL, "controller queue: out of memory");
	if (sg_strmap_init(&q->table, TABLE_BUCKETS, NULL) < 0) {
		free(q);
		SG_BAIL(SG_EINTERNAL, "controller queue: out of memory");
	}
	q->first_ms = first_ms ? first_ms : SG_CTRL_BACKOFF_FIRST_MS;
	q->max_ms = max_ms ? max_ms : SG_CTRL_BACKOFF_MAX_MS;
	if (q->max_ms < q->first_ms)
		q->max_ms = q->first_ms;
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cv, &ca);
	pthread_condattr_destroy(&ca);
	*out = q;
	return SG_OK;
}

static void clear(sg_ctrl_queue *q)
{
	sg_strmap_iter it;
	sg_strmap_iter_init(&it, &q->table);
	for (sg_strmap_node *h; (h = sg_strmap_iter_next(&it));)
		free(SG_STRMAP_ENTRY(h, entry, h));
	sg_strmap_clear(&q->table);
	q->head = q->tail = NULL;
	q->heap_len = 0;
	q->waiting = 0;
	q->active = 0;
	q->pause_until_ns = 0;
}

void sg_ctrl_queue_free(sg_ctrl_queue *q)
{
	if (!q)
		return;
	clear(q);
	sg_strmap_fini(&q->table);
	free(q->heap);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

void sg_ctrl_queue_add(sg_ctrl_queue *q, const char *key)
{
	if (!key_ok(key))
		return;
	pthread_mutex_lock(&q->mu);
	if (!q->shut) {
		entry *e = find_or_add(q, key);
		if (e)
			make_ready(q, e);
		else
			drop(key);
	}
	pthread_mutex_unlock(&q->mu);
}

/* Lock held. */
static void add_after_locked(sg_ctrl_queue *q, const char *key, uint64_t delay_ms)
{
	if (q->shut)
		return;
	entry *e = find_or_add(q, key);
	if (!e) {
		drop(key);
		return;
	}
	if (delay_ms == 0) {
		make_ready(q, e);
		return;
	}
	/* Saturating: a delay of years (UINT64_MAX as "not before the end")
	 * must not wrap around to a time in the past. */
	uint64_t now = sg_now_ns();
	uint64_t due = delay_ms > (UINT64_MAX - now) / 1000000u ? UINT64_MAX : now + delay_ms * 1000000u;
	if ((e->dirty && !e->processing) || (e->due_ns && e->due_ns <= due)) {
		release(q, e);
		return; /* ready already, or due sooner */
	}
	bool was = counted(e);
	if (!heap_push(q, e, due)) {
		release(q, e);
		drop(key);
		return;
	}
	e->due_ns = due;
	account(q, was, e);
	pthread_cond_signal(&q->cv); /* a getter may sleep until a later time */
}

void sg_ctrl_queue_add_after(sg_ctrl_queue *q, const char *key, uint64_t delay_ms)
{
	if (!key_ok(key))
		return;
	pthread_mutex_lock(&q->mu);
	add_after_locked(q, key, delay_ms);
	pthread_mutex_unlock(&q->mu);
}

uint64_t sg_ctrl_queue_add_rate_limited(sg_ctrl_queue *q, const char *key)
{
	if (!key_ok(key))
		return 0;
	pthread_mutex_lock(&q->mu);
	uint64_t ms = q->first_ms;
	entry *e = q->shut ? NULL : find_or_add(q, key);
	if (e) {
		if (e->failures < 64)
			e->failures++;
		for (unsigned i = 1; i < e->failures && ms < q->max_ms; i++)
			ms *= 2;
		if (ms > q->max_ms)
			ms = q->max_ms;
		add_after_locked(q, key, ms);
	}
	pthread_mutex_unlock(&q->mu);
	return ms;
}

void sg_ctrl_queue_forget(sg_ctrl_queue *q, const char *key)
{
	if (!key_ok(key))
		return;
	pthread_mutex_lock(&q->mu);
	entry *e = find(q, key);
	if (e) {
		e->failures = 0;
		release(q, e);
	}
	pthread_mutex_unlock(&q->mu);
}

unsigned sg_ctrl_queue_failures(sg_ctrl_queue *q, const char *key)
{
	if (!key_ok(key))
		return 0;
	pthread_mutex_lock(&q->mu);
	entry *e = find(q, key);
	unsigned n = e ? e->failures : 0;
	pthread_mutex_unlock(&q->mu);
	return n;
}

static void wait_until(sg_ctrl_queue *q, uint64_t deadline_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
	                      .tv_nsec = (long)(deadline_ns % 1000000000u)};
	pthread_cond_timedwait(&q->cv, &q->mu, &ts);
}

bool sg_ctrl_queue_get(sg_ctrl_queue *q, char key[SG_CTRL_KEY_MAX])
{
	pthread_mutex_lock(&q->mu);
	entry *e = NULL;
	while (!q->shut) {
		uint64_t now = sg_now_ns();
		if (now < q->pause_until_ns) {
			wait_until(q, q->pause_until_ns);
			continue;
		}
		promote_due(q, now);
		e = fifo_pop(q);
		if (e)
			break;
		if (q->heap_len)
			wait_until(q, q->heap[0].due_ns);
		else
			pthread_cond_wait(&q->cv, &q->mu);
	}
	if (e) {
		bool was = counted(e);
		e->dirty = false;
		e->processing = true; /* a pending delayed add counts again at done() */
		q->active++;
		account(q, was, e);
		memcpy(key, e->key, strlen(e->key) + 1);
	}
	pthread_mutex_unlock(&q->mu);
	return e != NULL;
}

void sg_ctrl_queue_done(sg_ctrl_queue *q, const char *key)
{
	if (!key_ok(key))
		return;
	pthread_mutex_lock(&q->mu);
	entry *e = find(q, key);
	if (e && e->processing) {
		bool was = counted(e);
		e->processing = false;
		q->active--;
		if (e->dirty && !q->shut)
			fifo_push(q, e);
		else
			e->dirty = e->dirty && !q->shut;
		account(q, was, e);
		if (e->dirty)
			pthread_cond_signal(&q->cv);
		release(q, e);
	}
	pthread_mutex_unlock(&q->mu);
}

void sg_ctrl_queue_pause_until(sg_ctrl_queue *q, uint64_t until_ns)
{
	pthread_mutex_lock(&q->mu);
	if (until_ns > q->pause_until_ns)
		q->pause_until_ns = until_ns;
	pthread_mutex_unlock(&q->mu);
}

void sg_ctrl_queue_shutdown(sg_ctrl_queue *q)
{
	pthread_mutex_lock(&q->mu);
	q->shut = true;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

void sg_ctrl_queue_reset(sg_ctrl_queue *q)
{
	pthread_mutex_lock(&q->mu);
	clear(q);
	q->shut = false;
	pthread_mutex_unlock(&q->mu);
}

size_t sg_ctrl_queue_len(sg_ctrl_queue *q)
{
	size_t waiting, active;
	sg_ctrl_queue_counts(q, &waiting, &active);
	return waiting;
}

void sg_ctrl_queue_counts(sg_ctrl_queue *q, size_t *waiting, size_t *active)
{
	pthread_mutex_lock(&q->mu);
	*waiting = q->waiting;
	*active = q->active;
	pthread_mutex_unlock(&q->mu);
}
