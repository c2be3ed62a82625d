/*
 * sg_metrics: a registry of metric families, rendered in the Prometheus
 * text exposition format 0.0.4.
 *
 * A family has a name, a help text, a type and a fixed list of label names
 * (at most SG_METRICS_MAX_LABELS). A series is one combination of label
 * values; it is created on first use by sg_metric_series() and lives as long
 * as the registry. A family holds at most SG_METRICS_MAX_SERIES series and
 * refuses more, so label values that come from requests can never grow
 * memory without bound. An unlabelled family has exactly one series, created
 * with the family.
 *
 * The hot path is the series, not the family: look a series up once (at
 * start-up, or once per distinct label value) and keep the pointer.
 * sg_series_inc/add/observe are lock-free and never allocate: counters and
 * histograms are sharded over cache-line-padded per-thread slots updated with
 * relaxed atomics and summed at scrape time. Gauges are one atomic double.
 * Callback families (sg_metrics_gauge_fn, sg_metrics_counter_fn) call a
 * function at scrape time instead.
 *
 * Rendering sorts families by name and series by label values, so the output
 * is deterministic. Label values are escaped (\\, \", \n) and so is the help
 * text (\\, \n). A histogram's _count is its +Inf bucket, so the two always
 * agree; its _sum may lag the buckets by observations in flight.
 *
 * Thread safety: every function may be called from any thread, concurrently,
 * except sg_metrics_free. Registration and series creation take a mutex;
 * updates never do.
 *
 * Ownership: families and series are owned by the registry and valid until
 * sg_metrics_free. Names, help texts and label strings are copied.
 */
#ifndef SG_METRICS_H
#define SG_METRICS_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_METRICS_MAX_FAMILIES 256
#define SG_METRICS_MAX_LABELS 4
#define SG_METRICS_MAX_SERIES 64  /* per family */
#define SG_METRICS_MAX_BUCKETS 32 /* finite bounds of a histogram */
#define SG_METRICS_NAME_MAX 128   /* bytes, metric and label names */
#define SG_METRICS_HELP_MAX 1024  /* bytes */
#define SG_METRICS_VALUE_MAX 256  /* bytes, one label value */

/* Content type of the rendered text. */
#define SG_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Latency buckets in seconds, 0.5 ms to 10 s (14 bounds). */
#define SG_METRICS_LATENCY_BOUNDS                                                                                      \
	((const double[]){0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
#define SG_METRICS_LATENCY_NBOUNDS 14

typedef struct sg_metrics sg_metrics;
typedef struct sg_metric sg_metric; /* a family */
typedef struct sg_series sg_series; /* one label-value combination of a family */

/* Creates an empty registry. Caller frees with sg_metrics_free. */
SG_API int sg_metrics_new(sg_metrics **out) SG_MUST_CHECK;

/* Frees the registry with every family and series. No other call on it may
 * run concurrently or follow. Accepts NULL. */
SG_API void sg_metrics_free(sg_metrics *m);

/*
 * Registers a family. name matches [a-zA-Z_:][a-zA-Z0-9_:]*; label names
 * match [a-zA-Z_][a-zA-Z0-9_]* (no colon, as in Prometheus), do not start
 * with "__", are distinct, and a histogram cannot use "le". A name already
 * exposed by another family (including a histogram's _bucket, _sum and
 * _count) is refused. SG_EINVAL on any violation or when the registry is
 * full. *out is owned by the registry.
 *
 * Counters count events (integers); by Prometheus convention their name
 * ends in _total, which is the caller's choice (istiod's names do not).
 */
SG_API int sg_metrics_counter(sg_metric **out, sg_metrics *m, const char *name, const char *help,
                              const char *const *label_names, size_t nlabels) SG_MUST_CHECK;
SG_API int sg_metrics_gauge(sg_metric **out, sg_metrics *m, const char *name, const char *help,
                            const char *const *label_names, size_t nlabels) SG_MUST_CHECK;

/* bounds: 1..SG_METRICS_MAX_BUCKETS finite upper bounds, strictly
 * increasing; the +Inf bucket is implicit. Copied. */
SG_API int sg_metrics_histogram(sg_metric **out, sg_metrics *m, const char *name, const char *help,
                                const double *bounds, size_t nbounds, const char *const *label_names,
                                size_t nlabels) SG_MUST_CHECK;

/*
 * Callback families, unlabelled: fn(arg) is called on the scraping thread
 * each time the registry is rendered, with the registry lock held; it must
 * be quick and must not call into this registry. arg is borrowed until
 * sg_metrics_free. A counter callback must return a non-decreasing value.
 */
typedef double (*sg_metrics_value_fn)(void *arg);
SG_API int sg_metrics_gauge_fn(sg_metrics *m, const char *name, const char *help, sg_metrics_value_fn fn,
                               void *arg) SG_MUST_CHECK;
SG_API int sg_metrics_counter_fn(sg_metrics *m, const char *name, const char *help, sg_metrics_value_fn fn,
                                 void *arg) SG_MUST_CHECK;

/*
 * A module's stats struct as metrics: signet's one way to export the
 * counters a module keeps. rows is a table, one row per field
 * (SG_METRICS_STAT_COUNTER / SG_METRICS_STAT_GAUGE name the field by
 * offsetof); get fills a stats struct of size bytes (at most
 * SG_METRICS_STATS_MAX). Each row is an unlabelled callback family: every
 * scrape calls get(arg, buf) with buf zeroed, on the scraping thread with
 * the registry lock held (the callback families' rules), and reads the
 * row's field, an unsigned 64-bit integer (uint64_t, size_t) or a bool.
 * SG_EINVAL names a bad row; the rows before it stay registered.
 */
#define SG_METRICS_STATS_MAX 1024
typedef struct sg_metrics_stat {
	const char *name, *help;
	bool gauge;          /* false: a counter, whose field never decreases */
	size_t offset, size; /* the field's */
} sg_metrics_stat;
#define SG_METRICS_STAT_COUNTER(type, field, name, help)                                                               \
	{                                                                                                              \
		(name), (help), false, offsetof(type, field), sizeof(((type *)0)->field)                               \
	}
#define SG_METRICS_STAT_GAUGE(type, field, name, help)                                                                 \
	{                                                                                                              \
		(name), (help), true, offsetof(type, field), sizeof(((type *)0)->field)                                \
	}
typedef void (*sg_metrics_stats_fn)(void *arg, void *stats);
SG_API int sg_metrics_stats(sg_metrics *m, const sg_metrics_stat *rows, size_t nrows, sg_metrics_stats_fn get,
                            size_t size, void *arg) SG_MUST_CHECK;

/*
 * Looks up or creates the series of f with these label values (one per
 * label name, in order; NULL when the family has no labels). Values are any
 * valid UTF-8 up to SG_METRICS_VALUE_MAX bytes. SG_EINVAL for a bad value or
 * when the family already holds SG_METRICS_MAX_SERIES series (callers map
 * that to a catch-all value of their own). Takes a mutex: cache *out.
 */
SG_API int sg_metric_series(sg_series **out, sg_metric *f, const char *const *label_values) SG_MUST_CHECK;

/*
 * Updates; lock-free, never fail. An update that does not fit the series'
 * type (observe on a counter, set on a histogram, ...) is ignored.
 *   counter:   inc adds 1, add adds n
 *   gauge:     inc adds 1, add adds n, set stores v, gauge_add adds v (may be negative)
 *   histogram: observe records v (NaN is ignored)
 */
SG_API void sg_series_inc(sg_series *s);
SG_API void sg_series_add(sg_series *s, uint64_t n);
SG_API void sg_series_set(sg_series *s, double v);
SG_API void sg_series_gauge_add(sg_series *s, double v);
SG_API void sg_series_observe(sg_series *s, double v);

/* Reads a series' current value: a counter's total, a gauge's value, a
 * histogram's count. For tests and for callers that derive other values. */
SG_API double sg_series_value(sg_series *s);

/*
 * Renders every family that has at least one series into a new buffer in
 * the text exposition format 0.0.4 (content type SG_METRICS_CONTENT_TYPE).
 * *out is NUL-terminated, *len excludes the NUL; caller frees *out with
 * free(). SG_EINTERNAL when out of memory.
 */
SG_API int sg_metrics_render(sg_metrics *m, char **out, size_t *len) SG_MUST_CHECK;

#endif
