/*
 * sg_wlcerts: the node agent's workload certificates (contract in
 * sg_wlcerts.h): a store of identities and their pods, a refresh
 * scheduler, and ordered callbacks.
 *
 * Shape. One mutex guards everything below it:
 *   - an identity index (string -> entry) holding the live entries only;
 *   - a pod index (string -> pod), each pod pointing at its entry and
 *     linked into that entry's list, so pod_set and pod_remove are O(1)
 *     on average whatever the number of pods;
 *   - one min-heap of entries by due time (CLOCK_MONOTONIC ns); an entry
 *     stores its own index, so it is there at most once and can be taken
 *     out in O(log n) the moment its identity is dropped;
 *   - the event FIFO, a linked list.
 * Both indexes are common/sg_strmap, the intrusive string table (sg_cache
 * is a bounded, lossy cache of fixed-size values, not an index).
 *
 * Entries are objects, not names. An entry is in the heap (idle) or held
 * by a worker (fetching), never both. Dropping an idle entry frees it at
 * once; dropping a fetching one marks it dropped and unlinks it from the
 * index, and the worker frees it when the fetch returns, throwing the
 * answer away. A re-added identity therefore gets a new entry, and the old
 * one's late answer can never land on it (Kmesh #1707).
 *
 * The heap never needs to grow after a fetch: its capacity is reserved
 * when an entry is created (the heap holds at most one slot per live
 * entry), so putting an entry back after its fetch cannot fail. The event
 * that goes with a change in pod_set is allocated before anything is
 * changed, so out of memory there leaves the state as it was; elsewhere an
 * event that cannot be allocated is logged and lost (sg_wlcerts_each is
 * the consumer's sweep for that case).
 *
 * Threads: `concurrency` workers wait on one condition variable (on
 * CLOCK_MONOTONIC, so a wall-clock step neither stalls nor hurries a
 * refresh) for the heap's top to come due, and run the fetch with no lock
 * held. One delivery thread pops events and calls on_event with no lock
 * held, one at a time, in the order the events were queued, which is the
 * order the changes were decided under the lock.
 */
#define _DEFAULT_SOURCE /* getrandom(2) */
#include "sg_wlcerts.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"
#include "sg_secret.h"
#include "sg_strmap.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define DEFAULT_CONCURRENCY 8u
#define DEFAULT_FRACTION 0.5
#define DEFAULT_JITTER 0.05
#define DEFAULT_FLOOR_MS 30000u
#define DEFAULT_BACKOFF_INITIAL_MS 1000u
#define DEFAULT_BACKOFF_MAX_MS 300000u
/* The jitter never moves a refresh outside [JITTER_LOW, JITTER_HIGH] of the
 * lifetime (unless the configured fraction itself is outside): near 0 the
 * certificate would be refreshed on arrival, near 1 it would expire first. */
#define JITTER_LOW 0.05
#define JITTER_HIGH 0.95
/* No timer further than a year out: refreshing a longer certificate early is
 * harmless, and it keeps the ns arithmetic far from overflow whatever the
 * CA wrote in not_after. */
#define DELAY_MAX_MS (365ull * 24 * 3600 * 1000)
#define NOT_IN_HEAP SIZE_MAX

/* ---- certificates ---- */

/* The refcount lives beside the public struct: sg_wlcert is what callers
 * see, and they must not touch the count. */
typedef struct cert_box {
	sg_wlcert c; /* first: a sg_wlcert * is a cert_box * */
	atomic_uint refs;
} cert_box;

static void free_pem(char *s, bool secret)
{
	if (s && secret)
		sg_wipe(s, strlen(s));
	free(s);
}

int sg_wlcert_new(sg_wlcert **out, char *key_pem, char *chain_pem, char *root_pem, int64_t not_before,
                  int64_t not_after, const char *serial)
{
	*out = NULL;
	cert_box *b = calloc(1, sizeof(*b));
	if (!b) {
		free_pem(key_pem, true);
		free_pem(chain_pem, false);
		free_pem(root_pem, false);
		SG_BAIL(SG_EINTERNAL, "out of memory for a workload certificate");
	}
	b->c.key_pem = key_pem;
	b->c.chain_pem = chain_pem;
	b->c.root_pem = root_pem;
	b->c.not_before = not_before;
	b->c.not_after = not_after;
	/* A longer serial is cut: it is for logs and file names, not identity. */
	snprintf(b->c.serial, sizeof(b->c.serial), "%s", serial ? serial : "");
	atomic_init(&b->refs, 1);
	*out = &b->c;
	return SG_OK;
}

sg_wlcert *sg_wlcert_ref(sg_wlcert *c)
{
	if (c)
		atomic_fetch_add_explicit(&((cert_box *)c)->refs, 1, memory_order_relaxed);
	return c;
}

void sg_wlcert_release(sg_wlcert *c)
{
	if (!c)
		return;
	cert_box *b = (cert_box *)c;
	/* acq_rel: the last owner must see every write the others made. */
	if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
		return;
	free_pem(c->key_pem, true);
	free_pem(c->chain_pem, false);
	free_pem(c->root_pem, false);
	free(b);
}

/* ---- the manager's types ---- */

/* A node's key points into the object that holds it. */
typedef sg_strmap_node hnode;
typedef sg_strmap table;

struct entry;

typedef struct pod {
	hnode h;                 /* first: in the pod index */
	struct pod *prev, *next; /* the entry's pods */
	struct entry *e;
	char id[];
} pod;

typedef struct entry {
	hnode h; /* first: in the identity index while live */
	pod *pods;
	size_t npods;
	sg_wlcert *cert; /* held, or NULL */
	uint64_t due_ns;
	size_t heap_idx; /* NOT_IN_HEAP while fetching (or when stopping) */
	unsigned failures;
	bool fetching, dropped;
	char identity[];
} entry;

typedef struct event {
	struct event *next;
	sg_wlcerts_event_type type;
	sg_wlcert *cert; /* a reference of the event's own */
	int64_t refresh_at_ms;
	unsigned failures;
	uint64_t retry_ms;
	const char *error; /* into text, after the identity; NULL when none */
	char text[];       /* identity, NUL, error, NUL */
} event;

struct sg_wlcerts {
	sg_wlcerts_options o; /* with the defaults filled in */

	pthread_mutex_t mu;
	pthread_cond_t work_cv;  /* the heap's top changed, or stopping */
	pthread_cond_t event_cv; /* an event was queued, or stopping */
	table ids, pods;
	entry **heap;
	size_t heap_len, heap_cap;
	event *ev_head, *ev_tail;
	uint64_t rng;
	bool stopping, ev_stopping;

	pthread_t workers[SG_WLCERTS_WORKERS_MAX];
	unsigned nworkers; /* started */
	pthread_t delivery;
	bool delivery_started;

	/* Counters, under mu. */
	uint64_t in_flight, fetches, issued, refreshed, failed, discarded, dropped;
};

/* ---- the indexes ---- */

#define TABLE_BUCKETS 64

/* ---- randomness for jitter (not for secrets) ---- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double uniform(sg_wlcerts *m, double lo, double hi)
{
	double u = (double)(splitmix(&m->rng) >> 11) / 9007199254740992.0; /* 2^53 */
	return lo + (hi - lo) * u;
}

static uint64_t seed(void)
{
	uint64_t s;
	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) == (ssize_t)sizeof(s))
		return s;
	/* Jitter only spreads refreshes out; the clock will do. */
	return sg_now_ns() ^ (uint64_t)(uintptr_t)&s;
}

/* ---- the heap ---- */

static void heap_set(sg_wlcerts *m, size_t i, entry *e)
{
	m->heap[i] = e;
	e->heap_idx = i;
}

static void heap_up(sg_wlcerts *m, size_t i)
{
	entry *e = m->heap[i];
	while (i > 0 && m->heap[(i - 1) / 2]->due_ns > e->due_ns) {
		heap_set(m, i, m->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(m, i, e);
}

static void heap_down(sg_wlcerts *m, size_t i)
{
	entry *e = m->heap[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= m->heap_len)
			break;
		if (c + 1 < m->heap_len && m->heap[c + 1]->due_ns < m->heap[c]->due_ns)
			c++;
		if (m->heap[c]->due_ns >= e->due_ns)
			break;
		heap_set(m, i, m->heap[c]);
		i = c;
	}
	heap_set(m, i, e);
}

/* Room for one more entry; called before an entry is created, so that
 * putting one back after its fetch never allocates. */
static bool heap_reserve(sg_wlcerts *m, size_t n)
{
	if (n <= m->heap_cap)
		return true;
	size_t cap = m->heap_cap ? m->heap_cap * 2 : 16;
	while (cap < n)
		cap *= 2;
	entry **h = realloc(m->heap, cap * sizeof(*h));
	if (!h)
		return false;
	m->heap = h;
	m->heap_cap = cap;
	return true;
}

/* Puts e in the heap at due_ns; wakes the workers when it is the new top
 * (a worker may be waiting for a later one). */
static void heap_push(sg_wlcerts *m, entry *e, uint64_t due_ns)
{
	e->due_ns = due_ns;
	heap_set(m, m->heap_len++, e);
	heap_up(m, e->heap_idx);
	if (e->heap_idx == 0)
		pthread_cond_broadcast(&m->work_cv);
}

static void heap_remove(sg_wlcerts *m, entry *e)
{
	size_t i = e->heap_idx;
	e->heap_idx = NOT_IN_HEAP;
	entry *last = m->heap[--m->heap_len];
	if (i == m->heap_len)
		return;
	heap_set(m, i, last);
	heap_up(m, i);
	heap_down(m, last->heap_idx);
}

/* ---- events ---- */

/* A new event for identity (and error, which may be NULL), with its own
 * reference on cert; NULL when out of memory. */
static event *event_new(sg_wlcerts_event_type type, const char *identity, sg_wlcert *cert, const char *error)
{
	size_t il = strlen(identity), el = error ? strlen(error) : 0;
	event *ev = calloc(1, sizeof(*ev) + il + 1 + (error ? el + 1 : 0));
	if (!ev)
		return NULL;
	ev->type = type;
	memcpy(ev->text, identity, il + 1);
	if (error) {
		memcpy(ev->text + il + 1, error, el + 1);
		ev->error = ev->text + il + 1;
	}
	ev->cert = sg_wlcert_ref(cert);
	return ev;
}

static void event_free(event *ev)
{
	if (!ev)
		return;
	sg_wlcert_release(ev->cert);
	free(ev);
}

/* Queues ev (under mu). Without a callback there is no one to tell. */
static void event_push(sg_wlcerts *m, event *ev)
{
	if (!ev)
		return;
	if (!m->o.on_event) {
		event_free(ev);
		return;
	}
	ev->next = NULL;
	if (m->ev_tail)
		m->ev_tail->next = ev;
	else
		m->ev_head = ev;
	m->ev_tail = ev;
	pthread_cond_signal(&m->event_cv);
}

/* Allocates and queues an event where a lost one is only logged (under mu). */
static event *event_make(sg_wlcerts *m, sg_wlcerts_event_type type, const entry *e, const char *error)
{
	if (!m->o.on_event)
		return NULL;
	event *ev = event_new(type, e->identity, e->cert, error);
	if (!ev)
		sg_log(SG_LOG_WARN, "out of memory for a workload certificate event; it is lost",
		       SG_F_STR("identity", e->identity), SG_F_INT("type", type), SG_F_END);
	return ev;
}

static void *delivery_main(void *arg)
{
	sg_wlcerts *m = arg;
	pthread_mutex_lock(&m->mu);
	for (;;) {
		while (!m->ev_head && !m->ev_stopping)
			pthread_cond_wait(&m->event_cv, &m->mu);
		if (m->ev_stopping)
			break;
		event *ev = m->ev_head;
		m->ev_head = ev->next;
		if (!m->ev_head)
			m->ev_tail = NULL;
		pthread_mutex_unlock(&m->mu);
		sg_wlcerts_event pub = {
		    .type = ev->type,
		    .identity = ev->text,
		    .cert = ev->cert,
		    .refresh_at_ms = ev->refresh_at_ms,
		    .failures = ev->failures,
		    .retry_ms = ev->retry_ms,
		    .error = ev->error,
		};
		m->o.on_event(&pub, m->o.event_arg);
		event_free(ev);
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* ---- entries ---- */

static void entry_free(entry *e)
{
	sg_wlcert_release(e->cert);
	free(e);
}

/* The identity's last pod went (under mu): out of the index and the heap
 * at once; a worker holding it frees it when its fetch returns. ev is the
 * DROPPED event, allocated by the caller (NULL: lost). */
static void entry_drop(sg_wlcerts *m, entry *e, event *ev)
{
	(void)sg_strmap_remove(&m->ids, &e->h);
	if (e->heap_idx != NOT_IN_HEAP)
		heap_remove(m, e);
	m->dropped++;
	event_push(m, ev);
	if (e->fetching)
		e->dropped = true;
	else
		entry_free(e);
}

static void pod_unlink(pod *p)
{
	entry *e = p->e;
	if (p->prev)
		p->prev->next = p->next;
	else
		e->pods = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
	p->e = NULL;
	e->npods--;
}

static void pod_link(pod *p, entry *e)
{
	p->e = e;
	p->prev = NULL;
	p->next = e->pods;
	if (e->pods)
		e->pods->prev = p;
	e->pods = p;
	e->npods++;
}

/* ---- the schedule ---- */

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The delay before c's refresh, in ms from now (under mu: uses the rng). */
static uint64_t refresh_delay_ms(sg_wlcerts *m, const sg_wlcert *c, int64_t now_ms)
{
	/* The lifetime counts from when the certificate became usable here: its
	 * not_before, or now when the CA backdated it (signetd and cert-manager
	 * backdate by a minute or so for clock skew, which would otherwise move
	 * the refresh of a short certificate far before its half-life). */
	double start_ms = (double)c->not_before * 1000.0;
	if (start_ms < (double)now_ms)
		start_ms = (double)now_ms;
	double end_ms = (double)c->not_after * 1000.0;
	double lifetime_ms = end_ms > start_ms ? end_ms - start_ms : 0.0;
	double f = m->o.refresh_fraction;
	if (m->o.refresh_jitter > 0) {
		f += uniform(m, -m->o.refresh_jitter, m->o.refresh_jitter);
		double lo = m->o.refresh_fraction < JITTER_LOW ? m->o.refresh_fraction : JITTER_LOW;
		double hi = m->o.refresh_fraction > JITTER_HIGH ? m->o.refresh_fraction : JITTER_HIGH;
		f = f < lo ? lo : f > hi ? hi : f;
	}
	double due_ms = start_ms + lifetime_ms * f;
	double delay = due_ms - (double)now_ms;
	/* The floor, after the jitter: a certificate shorter than the floor (or
	 * already past its refresh time) is refreshed every floor, never in a
	 * loop. */
	if (delay < (double)m->o.refresh_floor_ms)
		delay = (double)m->o.refresh_floor_ms;
	if (delay > (double)DELAY_MAX_MS)
		delay = (double)DELAY_MAX_MS;
	return (uint64_t)delay;
}

/* The delay before retry number `failures` (>= 1), in ms (under mu). */
static uint64_t backoff_ms(sg_wlcerts *m, unsigned failures)
{
	uint64_t d = m->o.backoff_initial_ms;
	for (unsigned i = 1; i < failures && d < m->o.backoff_max_ms; i++)
		d *= 2; /* stops at the cap (at most a year of ms): no overflow */
	if (d > m->o.backoff_max_ms)
		d = m->o.backoff_max_ms;
	/* +-20 %, so that identities that failed together do not retry together. */
	double j = (double)d * uniform(m, 0.8, 1.2);
	return j < 1.0 ? 1u : (uint64_t)j;
}

/* A fetch for e ended (under mu, e not dropped): store or reschedule, and
 * queue the event. */
static void fetch_done(sg_wlcerts *m, entry *e, int rc, sg_wlcert *c, const char *error)
{
	uint64_t now_ns = sg_now_ns();
	if (rc >= 0) {
		bool first = e->cert == NULL;
		sg_wlcert_release(e->cert);
		e->cert = c;
		e->failures = 0;
		int64_t now_ms = wall_ms();
		uint64_t delay = refresh_delay_ms(m, c, now_ms);
		heap_push(m, e, now_ns + delay * 1000000u);
		if (first)
			m->issued++;
		else
			m->refreshed++;
		event *ev = event_make(m, first ? SG_WLCERTS_ISSUED : SG_WLCERTS_REFRESHED, e, NULL);
		if (ev)
			ev->refresh_at_ms = now_ms + (int64_t)delay;
		event_push(m, ev);
		return;
	}
	if (e->failures < UINT_MAX)
		e->failures++;
	m->failed++;
	uint64_t delay = backoff_ms(m, e->failures);
	heap_push(m, e, now_ns + delay * 1000000u);
	event *ev = event_make(m, SG_WLCERTS_FAILED, e, error);
	if (ev) {
		ev->failures = e->failures;
		ev->retry_ms = delay;
	}
	event_push(m, ev);
}

static struct timespec mono_timespec(uint64_t ns)
{
	return (struct timespec){.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
}

static void *worker_main(void *arg)
{
	sg_wlcerts *m = arg;
	pthread_mutex_lock(&m->mu);
	while (!m->stopping) {
		entry *e = m->heap_len ? m->heap[0] : NULL;
		if (!e) {
			pthread_cond_wait(&m->work_cv, &m->mu);
			continue;
		}
		if (e->due_ns > sg_now_ns()) {
			struct timespec ts = mono_timespec(e->due_ns);
			pthread_cond_timedwait(&m->work_cv, &m->mu, &ts);
			continue;
		}
		heap_remove(m, e);
		/* Another worker may be waiting for a later top than the new one. */
		if (m->heap_len)
			pthread_cond_signal(&m->work_cv);
		e->fetching = true;
		m->in_flight++;
		m->fetches++;
		pthread_mutex_unlock(&m->mu);

		/* e stays allocated while fetching (a drop only marks it), and its
		 * identity never changes, so it is read without the lock. */
		sg_wlcert *c = NULL;
		sg_error_clear();
		int rc = m->o.fetch(e->identity, &c, m->o.fetch_arg);
		char error[SG_ERROR_MSG_MAX] = "";
		if (rc >= 0 && !c)
			rc = sg_error_set(SG_EINTERNAL, "the fetch function succeeded without a certificate");
		if (rc < 0) {
			/* Captured here: the detail is this thread's. */
			const sg_error *le = sg_error_last();
			snprintf(error, sizeof(error), "%s", le->msg[0] ? le->msg : sg_error_name(rc));
			sg_wlcert_release(c);
			c = NULL;
		}

		pthread_mutex_lock(&m->mu);
		m->in_flight--;
		e->fetching = false;
		if (e->dropped) {
			/* Its identity went while we asked: nobody wants the answer, and
			 * a re-added identity has an entry of its own. */
			if (rc >= 0)
				m->discarded++;
			sg_wlcert_release(c);
			entry_free(e);
			continue;
		}
		if (m->stopping) {
			/* Stays in the index, out of the heap; freed with the rest. */
			sg_wlcert_release(c);
			continue;
		}
		fetch_done(m, e, rc, c, error);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* ---- public ---- */

static int options_check(sg_wlcerts_options *o)
{
	SG_ENSURE(o->fetch, SG_EINVAL, "wlcerts: fetch is required");
	if (o->concurrency == 0)
		o->concurrency = DEFAULT_CONCURRENCY;
	SG_ENSURE(o->concurrency <= SG_WLCERTS_WORKERS_MAX, SG_EINVAL, "wlcerts: concurrency %u is over %d",
	          o->concurrency, SG_WLCERTS_WORKERS_MAX);
	if (o->refresh_fraction == 0)
		o->refresh_fraction = DEFAULT_FRACTION;
	/* Written so that NaN fails too. */
	SG_ENSURE(o->refresh_fraction > 0 && o->refresh_fraction < 1, SG_EINVAL,
	          "wlcerts: refresh_fraction %g is not in (0, 1)", o->refresh_fraction);
	if (o->refresh_jitter == 0)
		o->refresh_jitter = DEFAULT_JITTER;
	else if (o->refresh_jitter < 0)
		o->refresh_jitter = 0; /* none; never compared as 0 again */
	SG_ENSURE(o->refresh_jitter >= 0 && o->refresh_jitter < 0.5, SG_EINVAL,
	          "wlcerts: refresh_jitter %g is not in [0, 0.5)", o->refresh_jitter);
	if (o->refresh_floor_ms == 0)
		o->refresh_floor_ms = DEFAULT_FLOOR_MS;
	if (o->backoff_initial_ms == 0)
		o->backoff_initial_ms = DEFAULT_BACKOFF_INITIAL_MS;
	if (o->backoff_max_ms == 0)
		o->backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	SG_ENSURE(o->backoff_initial_ms <= o->backoff_max_ms, SG_EINVAL,
	          "wlcerts: backoff_initial_ms %llu is over backoff_max_ms %llu",
	          (unsigned long long)o->backoff_initial_ms, (unsigned long long)o->backoff_max_ms);
	/* Bounds that keep the ms -> ns arithmetic exact. */
	SG_ENSURE(o->backoff_max_ms <= DELAY_MAX_MS, SG_EINVAL, "wlcerts: backoff_max_ms is over a year");
	SG_ENSURE(o->refresh_floor_ms <= DELAY_MAX_MS, SG_EINVAL, "wlcerts: refresh_floor_ms is over a year");
	return SG_OK;
}

/* Stops and frees whatever sg_wlcerts_new got as far as starting. */
static void teardown(sg_wlcerts *m)
{
	pthread_mutex_lock(&m->mu);
	m->stopping = true;
	pthread_cond_broadcast(&m->work_cv);
	pthread_mutex_unlock(&m->mu);
	/* Workers in a fetch finish it first (each fetch ends by its own
	 * timeout); after this, no entry is fetching. */
	for (unsigned i = 0; i < m->nworkers; i++)
		pthread_join(m->workers[i], NULL);

	pthread_mutex_lock(&m->mu);
	m->ev_stopping = true;
	pthread_cond_broadcast(&m->event_cv);
	pthread_mutex_unlock(&m->mu);
	/* A callback running now finishes; none starts after this join. */
	if (m->delivery_started)
		pthread_join(m->delivery, NULL);

	for (event *ev = m->ev_head, *next; ev; ev = next) {
		next = ev->next;
		event_free(ev);
	}
	sg_strmap_iter it;
	sg_strmap_iter_init(&it, &m->pods);
	for (hnode *h; (h = sg_strmap_iter_next(&it));)
		free(h);
	sg_strmap_iter_init(&it, &m->ids);
	for (hnode *h; (h = sg_strmap_iter_next(&it));)
		entry_free((entry *)h);
	sg_strmap_fini(&m->pods);
	sg_strmap_fini(&m->ids);
	free(m->heap);
	pthread_cond_destroy(&m->event_cv);
	pthread_cond_destroy(&m->work_cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

int sg_wlcerts_new(sg_wlcerts **out, const sg_wlcerts_options *o)
{
	*out = NULL;
	SG_ENSURE(o, SG_EINVAL, "wlcerts: no options");
	sg_wlcerts_options opts = *o;
	SG_TRY(options_check(&opts));

	sg_wlcerts *m = calloc(1, sizeof(*m));
	SG_ENSURE(m, SG_EINTERNAL, "out of memory for the workload certificate manager");
	m->o = opts;
	m->rng = seed();
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->work_cv, &ca);
	pthread_cond_init(&m->event_cv, NULL);
	pthread_condattr_destroy(&ca);
	if (sg_strmap_init(&m->ids, TABLE_BUCKETS, NULL) < 0 || sg_strmap_init(&m->pods, TABLE_BUCKETS, NULL) < 0) {
		teardown(m);
		SG_BAIL(SG_EINTERNAL, "out of memory for the workload certificate manager");
	}
	for (; m->nworkers < m->o.concurrency; m->nworkers++)
		if (pthread_create(&m->workers[m->nworkers], NULL, worker_main, m) != 0) {
			teardown(m);
			SG_BAIL(SG_EINTERNAL, "cannot start a workload certificate worker thread");
		}
	if (m->o.on_event) {
		if (pthread_create(&m->delivery, NULL, delivery_main, m) != 0) {
			teardown(m);
			SG_BAIL(SG_EINTERNAL, "cannot start the workload certificate event thread");
		}
		m->delivery_started = true;
	}
	*out = m;
	return SG_OK;
}

void sg_wlcerts_free(sg_wlcerts *m)
{
	if (m)
		teardown(m);
}

static int check_name(const char *s, size_t max, const char *what)
{
	SG_ENSURE(s && *s, SG_EINVAL, "wlcerts: empty %s", what);
	SG_ENSURE(strnlen(s, max + 1) <= max, SG_EINVAL, "wlcerts: %s longer than %zu bytes", what, max);
	return SG_OK;
}

int sg_wlcerts_pod_set(sg_wlcerts *m, const char *pod_id, const char *identity)
{
	SG_TRY(check_name(pod_id, SG_WLCERTS_POD_MAX, "pod id"));
	SG_TRY(check_name(identity, SG_WLCERTS_ID_MAX, "identity"));
	int rc = SG_EINTERNAL;
	entry *fresh = NULL;
	pod *newpod = NULL;
	event *drop_ev = NULL;

	pthread_mutex_lock(&m->mu);
	hnode *ph = sg_strmap_find(&m->pods, pod_id);
	pod *p = (pod *)ph;
	if (p && strcmp(p->e->identity, identity) == 0) {
		rc = SG_OK; /* a set, not a count: nothing changes */
		goto unlock;
	}
	entry *e = (entry *)sg_strmap_find(&m->ids, identity);
	/* Everything that can fail is allocated first, so that out of memory
	 * leaves the store as it was. */
	if (!e) {
		size_t len = strlen(identity);
		fresh = calloc(1, sizeof(*fresh) + len + 1);
		SG_ENSURE_GOTO(rc, fresh && heap_reserve(m, sg_strmap_count(&m->ids) + 1), unlock, SG_EINTERNAL,
		               "out of memory for identity %s", identity);
		memcpy(fresh->identity, identity, len + 1);
		fresh->h.key = fresh->identity;
		fresh->heap_idx = NOT_IN_HEAP;
	}
	if (!p) {
		size_t len = strlen(pod_id);
		newpod = calloc(1, sizeof(*newpod) + len + 1);
		SG_ENSURE_GOTO(rc, newpod, unlock, SG_EINTERNAL, "out of memory for pod %s", pod_id);
		memcpy(newpod->id, pod_id, len + 1);
		newpod->h.key = newpod->id;
	} else if (p->e->npods == 1 && m->o.on_event) {
		drop_ev = event_new(SG_WLCERTS_DROPPED, p->e->identity, p->e->cert, NULL);
		SG_ENSURE_GOTO(rc, drop_ev, unlock, SG_EINTERNAL, "out of memory for pod %s", pod_id);
	}

	/* Nothing fails from here. */
	if (fresh) {
		e = SG_MOVE(fresh);
		sg_strmap_insert(&m->ids, &e->h);
		heap_push(m, e, sg_now_ns()); /* a new identity is fetched at once */
	}
	if (p) {
		entry *old = p->e;
		pod_unlink(p);
		if (old->npods == 0)
			entry_drop(m, old, SG_MOVE(drop_ev));
	} else {
		p = SG_MOVE(newpod);
		sg_strmap_insert(&m->pods, &p->h);
	}
	pod_link(p, e);
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&m->mu);
	free(fresh);
	free(newpod);
	event_free(drop_ev);
	return rc;
}

void sg_wlcerts_pod_remove(sg_wlcerts *m, const char *pod_id)
{
	if (!pod_id)
		return;
	pthread_mutex_lock(&m->mu);
	pod *p = (pod *)sg_strmap_find(&m->pods, pod_id);
	if (p) {
		entry *e = p->e;
		(void)sg_strmap_remove(&m->pods, &p->h);
		pod_unlink(p);
		free(p);
		if (e->npods == 0)
			entry_drop(m, e, event_make(m, SG_WLCERTS_DROPPED, e, NULL));
	}
	pthread_mutex_unlock(&m->mu);
}

sg_wlcert *sg_wlcerts_get(sg_wlcerts *m, const char *identity)
{
	if (!identity)
		return NULL;
	pthread_mutex_lock(&m->mu);
	entry *e = (entry *)sg_strmap_find(&m->ids, identity);
	sg_wlcert *c = e ? sg_wlcert_ref(e->cert) : NULL;
	pthread_mutex_unlock(&m->mu);
	return c;
}

void sg_wlcerts_stats_get(sg_wlcerts *m, sg_wlcerts_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->mu);
	out->identities = sg_strmap_count(&m->ids);
	out->pods = sg_strmap_count(&m->pods);
	/* A walk on demand: stats are read by a metrics scrape, not per pod. */
	sg_strmap_iter it;
	sg_strmap_iter_init(&it, &m->ids);
	for (hnode *h; (h = sg_strmap_iter_next(&it));) {
		const sg_wlcert *c = ((entry *)h)->cert;
		if (!c)
			continue;
		out->held++;
		if (out->soonest_expiry == 0 || c->not_after < out->soonest_expiry)
			out->soonest_expiry = c->not_after;
	}
	out->pending = out->identities - out->held;
	out->in_flight = m->in_flight;
	out->fetches = m->fetches;
	out->issued = m->issued;
	out->refreshed = m->refreshed;
	out->failed = m->failed;
	out->discarded = m->discarded;
	out->dropped = m->dropped;
	pthread_mutex_unlock(&m->mu);
}

void sg_wlcerts_each(sg_wlcerts *m, void (*fn)(const char *identity, void *arg), void *arg)
{
	pthread_mutex_lock(&m->mu);
	sg_strmap_iter it;
	sg_strmap_iter_init(&it, &m->ids);
	for (hnode *h; (h = sg_strmap_iter_next(&it));)
		fn(((entry *)h)->identity, arg);
	pthread_mutex_unlock(&m->mu);
}
