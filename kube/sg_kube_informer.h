/*
 * sg_kube_informer: a local, thread-safe cache of one resource kept in step
 * with the API server by list + watch (client-go's reflector + indexer +
 * shared informer, reduced to what signet needs).
 *
 * One thread per informer: LIST (paged, limit 500) -> WATCH from the list's
 * resourceVersion (bookmarks on, timeoutSeconds 290) -> re-WATCH from the
 * last seen resourceVersion when a stream ends; on 410 (HTTP or in-stream
 * ERROR) it relists and reconciles the store with the new snapshot: objects
 * that vanished during the gap get on_delete, new ones on_add, changed ones
 * (different resourceVersion) on_update. Errors back off with jitter,
 * 800 ms doubling to 30 s, reset after 2 minutes without error (client-go's
 * reflector).
 *
 * Objects are stored as jansson documents shared by reference count: the
 * store, handlers and readers all see the same immutable json_t. NOBODY may
 * modify an object obtained from the informer (json_deep_copy it first);
 * jansson's reference counts are atomic, so a reader may keep a reference
 * for as long as it likes on any thread.
 *
 * Handlers run on the informer's thread, one at a time, after the store has
 * been updated and with no lock held (they may call the getters).
 */
#ifndef SG_KUBE_INFORMER_H
#define SG_KUBE_INFORMER_H

#include "sg_kube.h"

typedef struct sg_kube_informer sg_kube_informer;

typedef struct sg_kube_handlers {
	void (*on_add)(json_t *obj, void *arg);
	void (*on_update)(json_t *old_obj, json_t *new_obj, void *arg);
	/* obj is the last state known (from the DELETED event, or the cached
	 * one when the object vanished during a watch gap). */
	void (*on_delete)(json_t *obj, void *arg);
	void *arg;
} sg_kube_handlers;

/* An index function: writes the object's index key (e.g. "sa/node") into
 * key (cap bytes, NUL-terminated) and returns 1, or returns 0 when the
 * object is not indexed. Called under the store lock: it must be pure. */
typedef int (*sg_kube_index_fn)(const json_t *obj, char *key, size_t cap, void *arg);

typedef struct sg_kube_informer_opts {
	const char *label_selector;
	const char *field_selector;
	long page_size;             /* 0: 500 */
	int watch_timeout_seconds;  /* 0: 290 */
	unsigned backoff_initial_ms; /* 0: 800 */
	unsigned backoff_max_ms;     /* 0: 30000 */
	sg_kube_index_fn index_fn;  /* optional */
	void *index_arg;
	/* Keep only apiVersion, kind and metadata of each object (store and
	 * handlers alike): a cache of who exists and who manages what, for
	 * objects whose contents are large and never read from the cache (the
	 * targets of a trust bundle: hundreds of namespaces times a bundle of
	 * public CAs). The full object is parsed and dropped as it arrives. */
	bool metadata_only;
} sg_kube_informer_opts;

typedef struct sg_kube_informer_stats {
	uint64_t lists;     /* completed LISTs (the first one included) */
	uint64_t relists;   /* LISTs caused by 410 */
	uint64_t watches;   /* WATCH requests started */
	uint64_t events;    /* ADDED/MODIFIED/DELETED applied */
	uint64_t bookmarks;
	uint64_t errors;    /* failed LIST/WATCH attempts */
} sg_kube_informer_stats;

/* Creates a stopped informer for ref (a collection: name NULL; ns NULL for
 * all namespaces). The client must outlive it; ref's strings, opts and
 * handlers are copied. Caller frees with sg_kube_informer_free. */
SG_API int sg_kube_informer_new(sg_kube_informer **out, sg_kube *k, const sg_kube_ref *ref,
                                const sg_kube_informer_opts *opt, const sg_kube_handlers *h) SG_MUST_CHECK;
/* Starts the informer's thread. After a stop it resumes watching from the
 * last resourceVersion with the store intact. */
SG_API int sg_kube_informer_start(sg_kube_informer *inf) SG_MUST_CHECK;
/* Stops the thread and waits for it (at most about a second for a watch to
 * notice). The store is kept. Safe when not running. */
SG_API void sg_kube_informer_stop(sg_kube_informer *inf);
/* Stops and frees; accepts NULL. */
SG_API void sg_kube_informer_free(sg_kube_informer *inf);

/* Whether the first LIST has been applied to the store. */
SG_API bool sg_kube_informer_has_synced(sg_kube_informer *inf);
/* Waits up to timeout_ms for has_synced: 0, or SG_ETIMEOUT. */
SG_API int sg_kube_informer_wait_synced(sg_kube_informer *inf, unsigned timeout_ms) SG_MUST_CHECK;

/* The object ns/name (ns NULL or "" for cluster-scoped), as a new reference
 * (json_decref it; do not modify it), or NULL when absent. */
SG_API json_t *sg_kube_informer_get(sg_kube_informer *inf, const char *ns, const char *name);
/* A new array holding every object (shared references); caller
 * json_decrefs the array. NULL when out of memory. */
SG_API json_t *sg_kube_informer_list(sg_kube_informer *inf);
/* A new array of the objects whose index key equals key. */
SG_API json_t *sg_kube_informer_by_index(sg_kube_informer *inf, const char *key);
SG_API size_t sg_kube_informer_size(sg_kube_informer *inf);

/* The last resourceVersion seen (copied into out, cap bytes; "" if none). */
SG_API void sg_kube_informer_resource_version(sg_kube_informer *inf, char *out, size_t cap);
SG_API void sg_kube_informer_stats_get(sg_kube_informer *inf, sg_kube_informer_stats *out);

#endif
