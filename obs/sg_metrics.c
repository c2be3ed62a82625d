/*
 * Metrics registry and Prometheus text exposition (format 0.0.4).
 *
 * Hot path. Signer threads update counters and histograms thousands of times
 * a second, so an update must not bounce a cache line between cores. Each
 * counter or histogram series owns SHARDS slot blocks, each a whole number of
 * cache lines; a thread picks its shard once (round-robin, thread-local) and
 * updates it with relaxed atomic read-modify-writes. Threads beyond SHARDS
 * share shards, which stays correct (the updates are atomic) and only costs
 * some contention. A scrape sums the shards. Relaxed ordering is enough:
 * each slot is a monotonic count, and a scrape only needs each slot's own
 * value, not an order between slots.
 *
 * A histogram shard holds one non-cumulative count per bucket (the bounds
 * plus +Inf) and the sum of observations (a double stored as bits, added with
 * a compare-and-swap loop that succeeds at once unless a shard is shared).
 * There is no separate count: _count is rendered as the sum of all buckets,
 * so cumulative buckets are monotonic and +Inf equals _count in every scrape,
 * even while observations are in flight.
 *
 * Gauges are one atomic double (bits in a uint64): set is a store, add a CAS
 * loop. They are not sharded: a gauge is a level, set rarely.
 *
 * Cold path. Families live in a fixed array kept sorted by name under the
 * registry mutex; a family's series live in a fixed array of pointers
 * published with a release store of the count, created under the family's
 * mutex. Nothing is ever removed before sg_metrics_free, so a pointer a
 * caller caches stays valid and the hot path needs no lock at all. Rendering
 * holds the registry mutex (so scrapes are serialized and callbacks never run
 * concurrently with each other) and reads series with acquire loads.
 *
 * Every bound (families, series, label count, string lengths) is fixed, so
 * label values taken from requests cannot grow memory.
 *
 * Numbers are written with the C locale's formatting (signet never calls
 * setlocale); doubles as the shortest decimal that reads back exactly, which
 * gives the usual bucket labels ("0.0005", "1", "2.5", "10").
 */
#include "sg_metrics.h"
#include "sg_guard.h"
#include "sg_strbuf.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHELINE 64
#define SHARDS 32 /* power of two not required; one per expected hot thread */
#define WORDS_PER_LINE (CACHELINE / sizeof(uint64_t))

enum kind { K_COUNTER, K_GAUGE, K_HISTOGRAM, K_COUNTER_FN, K_GAUGE_FN };

static const char *const kind_names[] = {
    [K_COUNTER] = "counter",    [K_GAUGE] = "gauge",    [K_HISTOGRAM] = "histogram",
    [K_COUNTER_FN] = "counter", [K_GAUGE_FN] = "gauge",
};

struct sg_series {
	/* Read-only after creation; the hot path reads only these. */
	enum kind kind;
	size_t stride;           /* slots per shard (a multiple of a cache line) */
	_Atomic uint64_t *slots; /* SHARDS * stride, cache-line aligned; counters and histograms */
	const double *bounds;    /* the family's, histograms only */
	size_t nbounds;
	char *values[SG_METRICS_MAX_LABELS];
	/* Gauges only. */
	_Atomic uint64_t gauge; /* double bits */
};

struct sg_metric {
	enum kind kind;
	char *name;
	char *help;
	size_t nlabels;
	char *labels[SG_METRICS_MAX_LABELS];
	double *bounds;
	char **le; /* bounds formatted once, for the le label */
	size_t nbounds;
	sg_metrics_value_fn fn;
	void *arg;
	/* A stats field (sg_metrics_stats): fn is NULL, the value is the
	 * field at stat_offset of what stat_get fills. */
	sg_metrics_stats_fn stat_get;
	size_t stat_size, stat_offset, stat_field;
	pthread_mutex_t lock; /* serializes series creation */
	sg_series *series[SG_METRICS_MAX_SERIES];
	_Atomic size_t nseries; /* release-published after series[n] is set */
};

struct sg_metrics {
	pthread_mutex_t lock; /* families, and rendering */
	size_t nfamilies;
	sg_metric *families[SG_METRICS_MAX_FAMILIES]; /* sorted by name */
};

/* ---- shards ---------------------------------------------------------- */

static atomic_uint next_shard;
/* shard + 1; 0 until first use. initial-exec: sg_ra is built as PIC and
 * the default model would call __tls_get_addr on every update; the library
 * is linked into programs, never dlopen'ed, so the static TLS block is safe. */
static _Thread_local unsigned my_shard __attribute__((tls_model("initial-exec")));

static inline size_t shard(void)
{
	unsigned s = my_shard;
	if (s == 0) {
		s = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % SHARDS + 1;
		my_shard = s;
	}
	return s - 1;
}

static inline uint64_t dbits(double v)
{
	uint64_t u;
	memcpy(&u, &v, sizeof(u));
	return u;
}

static inline double bitsd(uint64_t u)
{
	double v;
	memcpy(&v, &u, sizeof(v));
	return v;
}

static inline void atomic_add_double(_Atomic uint64_t *a, double v)
{
	uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(a, &old, dbits(bitsd(old) + v), memory_order_relaxed,
	                                              memory_order_relaxed)) {
	}
}

/* ---- updates (hot path) ---------------------------------------------- */

void sg_series_add(sg_series *s, uint64_t n)
{
	if (s->kind == K_COUNTER)
		atomic_fetch_add_explicit(&s->slots[shard() * s->stride], n, memory_order_relaxed);
	else if (s->kind == K_GAUGE)
		atomic_add_double(&s->gauge, (double)n);
}

void sg_series_inc(sg_series *s)
{
	sg_series_add(s, 1);
}

void sg_series_set(sg_series *s, double v)
{
	if (s->kind == K_GAUGE)
		atomic_store_explicit(&s->gauge, dbits(v), memory_order_relaxed);
}

void sg_series_gauge_add(sg_series *s, double v)
{
	if (s->kind == K_GAUGE)
		atomic_add_double(&s->gauge, v);
}

/* Index of the first bound >= v, or nbounds (+Inf). */
static inline size_t bucket_of(const double *bounds, size_t n, double v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v <= bounds[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void sg_series_observe(sg_series *s, double v)
{
	if (s->kind != K_HISTOGRAM || isnan(v))
		return;
	_Atomic uint64_t *sl = &s->slots[shard() * s->stride];
	atomic_fetch_add_explicit(&sl[bucket_of(s->bounds, s->nbounds, v)], 1, memory_order_relaxed);
	atomic_add_double(&sl[s->nbounds + 1], v);
}

/* ---- reading --------------------------------------------------------- */

static uint64_t slot_sum(sg_series *s, size_t i)
{
	uint64_t t = 0;
	for (size_t k = 0; k < SHARDS; k++)
		t += atomic_load_explicit(&s->slots[k * s->stride + i], memory_order_relaxed);
	return t;
}

static double hist_sum(sg_series *s)
{
	double t = 0;
	for (size_t k = 0; k < SHARDS; k++)
		t += bitsd(atomic_load_explicit(&s->slots[k * s->stride + s->nbounds + 1], memory_order_relaxed));
	return t;
}

double sg_series_value(sg_series *s)
{
	switch (s->kind) {
	case K_COUNTER:
		return (double)slot_sum(s, 0);
	case K_GAUGE:
		return bitsd(atomic_load_explicit(&s->gauge, memory_order_relaxed));
	case K_HISTOGRAM: {
		uint64_t n = 0;
		for (size_t i = 0; i <= s->nbounds; i++)
			n += slot_sum(s, i);
		return (double)n;
	}
	default:
		return 0;
	}
}

/* ---- validation ------------------------------------------------------ */

static bool valid_name(const char *s, bool colon)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > SG_METRICS_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
		          (i > 0 && c >= '0' && c <= '9');
		if (!ok)
			return false;
	}
	return true;
}

/* RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool valid_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		size_t len;
		unsigned min;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			len = 2, min = 0x80, c &= 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3, min = 0x800, c &= 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4, min = 0x10000, c &= 0x07;
		} else {
			return false;
		}
		if (len > n - i)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			c = (c << 6) | (s[i + k] & 0x3f);
		}
		if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

/* Whether x is base followed by one of a histogram's sample suffixes. */
static bool is_hist_sample(const char *x, const char *base)
{
	size_t n = strlen(base);
	if (strncmp(x, base, n) != 0)
		return false;
	x += n;
	return strcmp(x, "_bucket") == 0 || strcmp(x, "_sum") == 0 || strcmp(x, "_count") == 0;
}

static bool clashes(const sg_metric *f, const char *name, enum kind kind)
{
	return strcmp(f->name, name) == 0 || (f->kind == K_HISTOGRAM && is_hist_sample(name, f->name)) ||
	       (kind == K_HISTOGRAM && is_hist_sample(f->name, name));
}

/* ---- families -------------------------------------------------------- */

static void series_free(sg_series *s)
{
	if (!s)
		return;
	free(s->slots);
	for (size_t i = 0; i < SG_METRICS_MAX_LABELS; i++)
		free(s->values[i]);
	free(s);
}

static void family_free(sg_metric *f)
{
	if (!f)
		return;
	size_t n = atomic_load_explicit(&f->nseries, memory_order_acquire);
	for (size_t i = 0; i < n; i++)
		series_free(f->series[i]);
	for (size_t i = 0; i < f->nlabels; i++)
		free(f->labels[i]);
	if (f->le) {
		for (size_t i = 0; i < f->nbounds; i++)
			free(f->le[i]);
		free(f->le);
	}
	free(f->bounds);
	free(f->name);
	free(f->help);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* The shortest decimal that reads back as v: positional between 1e-4 and
 * 1e21 ("0.0005", "10", "1700000000"), exponential outside ("1e+21");
 * "+Inf", "-Inf", "NaN" as Prometheus spells them. */
static void format_double(char out[32], double v)
{
	if (isnan(v)) {
		strcpy(out, "NaN");
		return;
	}
	if (isinf(v)) {
		strcpy(out, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	int p = 1;
	for (; p < 17; p++) {
		snprintf(out, 32, "%.*e", p - 1, v);
		if (strtod(out, NULL) == v)
			break;
	}
	snprintf(out, 32, "%.*e", p - 1, v);
	int exp = atoi(strchr(out, 'e') + 1);
	if (exp >= -4 && exp < 21)
		snprintf(out, 32, "%.*f", p - 1 - exp > 0 ? p - 1 - exp : 0, v);
}

static int check_labels(const char *name, const char *const *labels, size_t n, enum kind kind)
{
	SG_ENSURE(n <= SG_METRICS_MAX_LABELS, SG_EINVAL, "metrics: %s: %zu labels, at most %d", name, n,
	          SG_METRICS_MAX_LABELS);
	SG_ENSURE(n == 0 || labels, SG_EINVAL, "metrics: %s: label names missing", name);
	for (size_t i = 0; i < n; i++) {
		SG_ENSURE(valid_name(labels[i], false) && strncmp(labels[i], "__", 2) != 0, SG_EINVAL,
		          "metrics: %s: invalid label name", name);
		SG_ENSURE(kind != K_HISTOGRAM || strcmp(labels[i], "le") != 0, SG_EINVAL,
		          "metrics: %s: a histogram cannot have a label \"le\"", name);
		for (size_t k = 0; k < i; k++)
			SG_ENSURE(strcmp(labels[i], labels[k]) != 0, SG_EINVAL, "metrics: %s: label \"%s\" repeated",
			          name, labels[i]);
	}
	return 0;
}

static int check_bounds(const char *name, const double *bounds, size_t n)
{
	SG_ENSURE(n >= 1 && n <= SG_METRICS_MAX_BUCKETS && bounds, SG_EINVAL,
	          "metrics: %s: a histogram needs 1 to %d bounds", name, SG_METRICS_MAX_BUCKETS);
	for (size_t i = 0; i < n; i++) {
		SG_ENSURE(isfinite(bounds[i]), SG_EINVAL, "metrics: %s: bound %zu is not finite", name, i);
		SG_ENSURE(i == 0 || bounds[i] > bounds[i - 1], SG_EINVAL,
		          "metrics: %s: bounds must be strictly increasing", name);
	}
	return 0;
}

static char *dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

/* What a registration asks for. */
typedef struct spec {
	const char *name;
	const char *help;
	enum kind kind;
	const char *const *labels;
	size_t nlabels;
	const double *bounds;
	size_t nbounds;
	sg_metrics_value_fn fn;
	void *arg;
	sg_metrics_stats_fn stat_get;
	size_t stat_size, stat_offset, stat_field;
} spec;

/* Builds a family (no series yet); not yet visible to anyone. */
static int family_new(sg_metric **out, const spec *sp)
{
	const char *name = sp->name, *help = sp->help;
	const char *const *labels = sp->labels;
	size_t nlabels = sp->nlabels, nbounds = sp->nbounds;
	const double *bounds = sp->bounds;
	enum kind kind = sp->kind;

	sg_metric *f = calloc(1, sizeof(*f));
	SG_ENSURE(f, SG_EINTERNAL, "metrics: out of memory");
	if (pthread_mutex_init(&f->lock, NULL) != 0) {
		free(f);
		SG_BAIL(SG_EINTERNAL, "metrics: cannot create a mutex");
	}
	atomic_init(&f->nseries, 0);
	f->kind = kind;
	f->fn = sp->fn;
	f->arg = sp->arg;
	f->stat_get = sp->stat_get;
	f->stat_size = sp->stat_size;
	f->stat_offset = sp->stat_offset;
	f->stat_field = sp->stat_field;
	f->name = dup_str(name);
	f->help = dup_str(help);
	bool ok = f->name && f->help;
	for (size_t i = 0; ok && i < nlabels; i++, f->nlabels = i)
		ok = (f->labels[i] = dup_str(labels[i])) != NULL;
	if (ok && nbounds) {
		f->bounds = malloc(nbounds * sizeof(*bounds));
		f->le = calloc(nbounds, sizeof(*f->le));
		ok = f->bounds && f->le;
		if (ok) {
			memcpy(f->bounds, bounds, nbounds * sizeof(*bounds));
			f->nbounds = nbounds;
		}
		for (size_t i = 0; ok && i < nbounds; i++) {
			char b[32];
			format_double(b, bounds[i]);
			ok = (f->le[i] = dup_str(b)) != NULL;
		}
	}
	if (!ok) {
		family_free(f);
		SG_BAIL(SG_EINTERNAL, "metrics: out of memory");
	}
	*out = f;
	return 0;
}

static int series_new(sg_series **out, sg_metric *f, const char *const *values)
{
	sg_series *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "metrics: out of memory");
	s->kind = f->kind;
	s->bounds = f->bounds;
	s->nbounds = f->nbounds;
	atomic_init(&s->gauge, dbits(0.0));
	bool ok = true;
	for (size_t i = 0; ok && i < f->nlabels; i++)
		ok = (s->values[i] = dup_str(values[i])) != NULL;
	if (ok && (f->kind == K_COUNTER || f->kind == K_HISTOGRAM)) {
		size_t used = f->kind == K_COUNTER ? 1 : f->nbounds + 2; /* buckets, +Inf, sum */
		s->stride = (used + WORDS_PER_LINE - 1) / WORDS_PER_LINE * WORDS_PER_LINE;
		size_t n = SHARDS * s->stride;
		s->slots = aligned_alloc(CACHELINE, n * sizeof(*s->slots));
		ok = s->slots != NULL;
		for (size_t i = 0; ok && i < n; i++)
			atomic_init(&s->slots[i], 0);
	}
	if (!ok) {
		series_free(s);
		SG_BAIL(SG_EINTERNAL, "metrics: out of memory");
	}
	*out = s;
	return 0;
}

static bool same_values(const sg_series *s, const char *const *values, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s->values[i], values[i]) != 0)
			return false;
	return true;
}

int sg_metric_series(sg_series **out, sg_metric *f, const char *const *values)
{
	SG_ENSURE(f->kind == K_COUNTER || f->kind == K_GAUGE || f->kind == K_HISTOGRAM, SG_EINVAL,
	          "metrics: %s is computed by a callback and has no series", f->name);
	SG_ENSURE(f->nlabels == 0 || values, SG_EINVAL, "metrics: %s: label values missing", f->name);
	for (size_t i = 0; i < f->nlabels; i++) {
		size_t n = values[i] ? strlen(values[i]) : SIZE_MAX;
		SG_ENSURE(n <= SG_METRICS_VALUE_MAX && valid_utf8((const unsigned char *)values[i], n), SG_EINVAL,
		          "metrics: %s: value of label %s is missing, longer than %d bytes or not UTF-8", f->name,
		          f->labels[i], SG_METRICS_VALUE_MAX);
	}

	int rc = SG_EINTERNAL;
	pthread_mutex_lock(&f->lock);
	size_t n = atomic_load_explicit(&f->nseries, memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		if (same_values(f->series[i], values, f->nlabels)) {
			*out = f->series[i];
			rc = 0;
			goto unlock;
		}
	}
	SG_ENSURE_GOTO(rc, n < SG_METRICS_MAX_SERIES, unlock, SG_EINVAL, "metrics: %s: series limit %d reached",
	               f->name, SG_METRICS_MAX_SERIES);
	sg_series *s = NULL;
	SG_TRY_GOTO(rc, series_new(&s, f, values), unlock);
	f->series[n] = s;
	atomic_store_explicit(&f->nseries, n + 1, memory_order_release);
	*out = s;
	rc = 0;
unlock:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/* Validates, builds and inserts a family in name order. */
static int add_family(sg_metric **out, sg_metrics *m, const spec *sp)
{
	const char *name = sp->name;
	enum kind kind = sp->kind;
	SG_ENSURE(valid_name(name, true), SG_EINVAL, "metrics: invalid metric name");
	SG_ENSURE(sp->help && strlen(sp->help) <= SG_METRICS_HELP_MAX, SG_EINVAL,
	          "metrics: %s: help missing or too long", name);
	SG_TRY(check_labels(name, sp->labels, sp->nlabels, kind));
	if (kind == K_HISTOGRAM)
		SG_TRY(check_bounds(name, sp->bounds, sp->nbounds));
	SG_ENSURE(sp->fn || sp->stat_get || (kind != K_COUNTER_FN && kind != K_GAUGE_FN), SG_EINVAL,
	          "metrics: %s: callback missing", name);

	sg_metric *f = NULL;
	SG_TRY(family_new(&f, sp));
	/* An unlabelled family has its one series from the start, so it is
	 * rendered (as 0) before its first update. */
	if (sp->nlabels == 0 && (kind == K_COUNTER || kind == K_GAUGE || kind == K_HISTOGRAM)) {
		sg_series *s = NULL;
		int rc = sg_metric_series(&s, f, NULL);
		if (rc < 0) {
			family_free(f);
			return rc;
		}
	}

	int rc = SG_EINTERNAL;
	pthread_mutex_lock(&m->lock);
	SG_ENSURE_GOTO(rc, m->nfamilies < SG_METRICS_MAX_FAMILIES, unlock, SG_EINVAL,
	               "metrics: %s: registry full (%d families)", name, SG_METRICS_MAX_FAMILIES);
	size_t at = m->nfamilies;
	for (size_t i = 0; i < m->nfamilies; i++) {
		SG_ENSURE_GOTO(rc, !clashes(m->families[i], name, kind), unlock, SG_EINVAL,
		               "metrics: %s: name clashes with family %s", name, m->families[i]->name);
		if (at == m->nfamilies && strcmp(name, m->families[i]->name) < 0)
			at = i;
	}
	memmove(&m->families[at + 1], &m->families[at], (m->nfamilies - at) * sizeof(m->families[0]));
	m->families[at] = f;
	m->nfamilies++;
	if (out)
		*out = f;
	f = NULL;
	rc = 0;
unlock:
	pthread_mutex_unlock(&m->lock);
	family_free(f);
	return rc;
}

int sg_metrics_counter(sg_metric **out, sg_metrics *m, const char *name, const char *help,
                       const char *const *label_names, size_t nlabels)
{
	return add_family(
	    out, m, &(spec){.name = name, .help = help, .kind = K_COUNTER, .labels = label_names, .nlabels = nlabels});
}

int sg_metrics_gauge(sg_metric **out, sg_metrics *m, const char *name, const char *help, const char *const *label_names,
                     size_t nlabels)
{
	return add_family(
	    out, m, &(spec){.name = name, .help = help, .kind = K_GAUGE, .labels = label_names, .nlabels = nlabels});
}

int sg_metrics_histogram(sg_metric **out, sg_metrics *m, const char *name, const char *help, const double *bounds,
                         size_t nbounds, const char *const *label_names, size_t nlabels)
{
	return add_family(out, m,
	                  &(spec){.name = name,
	                          .help = help,
	                          .kind = K_HISTOGRAM,
	                          .labels = label_names,
	                          .nlabels = nlabels,
	                          .bounds = bounds,
	                          .nbounds = nbounds});
}

int sg_metrics_gauge_fn(sg_metrics *m, const char *name, const char *help, sg_metrics_value_fn fn, void *arg)
{
	return add_family(NULL, m, &(spec){.name = name, .help = help, .kind = K_GAUGE_FN, .fn = fn, .arg = arg});
}

int sg_metrics_counter_fn(sg_metrics *m, const char *name, const char *help, sg_metrics_value_fn fn, void *arg)
{
	return add_family(NULL, m, &(spec){.name = name, .help = help, .kind = K_COUNTER_FN, .fn = fn, .arg = arg});
}

int sg_metrics_stats(sg_metrics *m, const sg_metrics_stat *rows, size_t nrows, sg_metrics_stats_fn get, size_t size,
                     void *arg)
{
	SG_ENSURE(get && size >= 1 && size <= SG_METRICS_STATS_MAX, SG_EINVAL,
	          "metrics: a stats table needs a getter and a struct of 1..%d bytes", SG_METRICS_STATS_MAX);
	for (size_t i = 0; i < nrows; i++) {
		const sg_metrics_stat *r = &rows[i];
		SG_ENSURE((r->size == sizeof(uint64_t) || r->size == sizeof(bool)) && r->offset <= size - r->size,
		          SG_EINVAL,
		          "metrics: %s: the field is not a 64-bit counter or a bool inside the %zu-byte struct",
		          r->name ? r->name : "(unnamed)", size);
		spec sp = {.name = r->name,
		           .help = r->help,
		           .kind = r->gauge ? K_GAUGE_FN : K_COUNTER_FN,
		           .arg = arg,
		           .stat_get = get,
		           .stat_size = size,
		           .stat_offset = r->offset,
		           .stat_field = r->size};
		SG_TRY(add_family(NULL, m, &sp));
	}
	return SG_OK;
}

/* The value of a callback family: its function's, or its stats field's. */
static double computed_value(const sg_metric *f)
{
	if (f->fn)
		return f->fn(f->arg);
	_Alignas(max_align_t) unsigned char buf[SG_METRICS_STATS_MAX];
	memset(buf, 0, f->stat_size);
	f->stat_get(f->arg, buf);
	if (f->stat_field == sizeof(bool)) {
		bool b;
		memcpy(&b, buf + f->stat_offset, sizeof(b));
		return b ? 1.0 : 0.0;
	}
	uint64_t v;
	memcpy(&v, buf + f->stat_offset, sizeof(v));
	return (double)v;
}

int sg_metrics_new(sg_metrics **out)
{
	sg_metrics *m = calloc(1, sizeof(*m));
	SG_ENSURE(m, SG_EINTERNAL, "metrics: out of memory");
	if (pthread_mutex_init(&m->lock, NULL) != 0) {
		free(m);
		SG_BAIL(SG_EINTERNAL, "metrics: cannot create a mutex");
	}
	*out = m;
	return 0;
}

void sg_metrics_free(sg_metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfamilies; i++)
		family_free(m->families[i]);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* ---- rendering ------------------------------------------------------- */

/* The exposition text: common/sg_strbuf with no bound but memory, which
 * fails the whole render (sg_metrics_render answers out of memory). */
typedef sg_strbuf buf;

static void put(buf *b, const char *s, size_t n)
{
	(void)sg_strbuf_add(b, s, n);
}

static void puts_(buf *b, const char *s)
{
	(void)sg_strbuf_puts(b, s);
}

/* Label values escape \, " and newline; help text \ and newline. */
static void put_escaped(buf *b, const char *s, bool quote)
{
	size_t run = 0;
	for (size_t i = 0;; i++) {
		char c = s[i];
		const char *esc = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : (quote && c == '"') ? "\\\"" : NULL;
		if (!esc && c != '\0')
			continue;
		put(b, s + run, i - run);
		if (c == '\0')
			return;
		puts_(b, esc);
		run = i + 1;
	}
}

/* name{l1="v1",...[,le="x"]} */
static void put_series_name(buf *b, const sg_metric *f, const char *suffix, const sg_series *s, const char *le)
{
	puts_(b, f->name);
	puts_(b, suffix);
	if (f->nlabels == 0 && !le)
		return;
	puts_(b, "{");
	for (size_t i = 0; i < f->nlabels; i++) {
		if (i)
			puts_(b, ",");
		puts_(b, f->labels[i]);
		puts_(b, "=\"");
		put_escaped(b, s->values[i], true);
		puts_(b, "\"");
	}
	if (le) {
		puts_(b, f->nlabels ? ",le=\"" : "le=\"");
		puts_(b, le);
		puts_(b, "\"");
	}
	puts_(b, "}");
}

static void put_u64_line(buf *b, uint64_t v)
{
	char num[32];
	snprintf(num, sizeof(num), " %" PRIu64 "\n", v);
	puts_(b, num);
}

static void put_double_line(buf *b, double v)
{
	char num[32];
	format_double(num, v);
	puts_(b, " ");
	puts_(b, num);
	puts_(b, "\n");
}

static void put_histogram(buf *b, const sg_metric *f, sg_series *s)
{
	uint64_t cum = 0;
	for (size_t i = 0; i <= f->nbounds; i++) {
		cum += slot_sum(s, i);
		put_series_name(b, f, "_bucket", s, i < f->nbounds ? f->le[i] : "+Inf");
		put_u64_line(b, cum);
	}
	put_series_name(b, f, "_sum", s, NULL);
	put_double_line(b, hist_sum(s));
	put_series_name(b, f, "_count", s, NULL);
	put_u64_line(b, cum);
}

static int cmp_series(const void *a, const void *b)
{
	const sg_series *x = *(sg_series *const *)a, *y = *(sg_series *const *)b;
	for (size_t i = 0; i < SG_METRICS_MAX_LABELS && x->values[i] && y->values[i]; i++) {
		int c = strcmp(x->values[i], y->values[i]);
		if (c)
			return c;
	}
	return 0;
}

static void put_family(buf *b, sg_metric *f)
{
	sg_series *list[SG_METRICS_MAX_SERIES];
	size_t n = atomic_load_explicit(&f->nseries, memory_order_acquire);
	bool computed = f->kind == K_COUNTER_FN || f->kind == K_GAUGE_FN;
	if (n == 0 && !computed)
		return;
	memcpy(list, f->series, n * sizeof(list[0]));
	qsort(list, n, sizeof(list[0]), cmp_series); /* label values are unique: order is total */

	puts_(b, "# HELP ");
	puts_(b, f->name);
	puts_(b, " ");
	put_escaped(b, f->help, false);
	puts_(b, "\n# TYPE ");
	puts_(b, f->name);
	puts_(b, " ");
	puts_(b, kind_names[f->kind]);
	puts_(b, "\n");
	if (computed) {
		puts_(b, f->name);
		put_double_line(b, computed_value(f));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		sg_series *s = list[i];
		if (f->kind == K_HISTOGRAM) {
			put_histogram(b, f, s);
			continue;
		}
		put_series_name(b, f, "", s, NULL);
		if (f->kind == K_COUNTER)
			put_u64_line(b, slot_sum(s, 0));
		else
			put_double_line(b, sg_series_value(s));
	}
}

int sg_metrics_render(sg_metrics *m, char **out, size_t *len)
{
	buf b = {.first = 4096};
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->nfamilies; i++)
		put_family(&b, m->families[i]);
	pthread_mutex_unlock(&m->lock);
	put(&b, "", 0); /* an empty registry still yields "" */
	if (sg_strbuf_failed(&b)) {
		free(b.p);
		SG_BAIL(SG_EINTERNAL, "metrics: out of memory while rendering");
	}
	*out = b.p;
	*len = b.len;
	return 0;
}
