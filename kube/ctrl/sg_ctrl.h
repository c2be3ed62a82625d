/*
 * sg_ctrl: the controller runtime. Every cluster controller of signet (root
 * ConfigMaps, istiod's Secret, and those to come: the cert-manager issuer,
 * trust bundles, the policy approver, the operator) is one reconcile
 * function on this runtime plus one row in its daemon's table.
 *
 * The pieces, bottom up:
 *
 *   sg_ctrl_queue    a work queue of string keys (client-go's workqueue):
 *                    a key is at most once in the queue however often it is
 *                    added; a key being reconciled is handed to no other
 *                    worker, and an add meanwhile brings it back once the
 *                    worker is done; delayed adds (the earlier time wins);
 *                    per-key exponential backoff for failures; a pause of
 *                    the whole queue while the API server is unreachable.
 *
 *   sg_ctrl          one controller: the informers it watches (created at
 *                    every start, so a new leader never acts on what it saw
 *                    the last time it led), an event -> key mapping per
 *                    informer, the queue and its workers. A reconcile
 *                    returns SG_OK (done; optionally "again after N ms") or
 *                    an error (retried with the key's backoff). Failure
 *                    warnings are logged at most once a second per
 *                    controller. stop() joins the workers before it returns:
 *                    no reconcile of this controller runs after it.
 *
 *   sg_ctrl_manager  the table: rows of controllers, each leader-only or
 *                    not; with leader election it owns the Lease elector,
 *                    starts the leader-only rows when this replica leads and
 *                    stops them all at once (so leadership ends within one
 *                    request timeout) before the Lease is released. A row
 *                    that fails to start is retried by sg_ctrl_manager_tick.
 *                    It exports the runtime's metrics for every row.
 *
 *   helpers          Events, metav1.Condition maintenance with
 *                    observedGeneration, and server-side apply with the
 *                    controller's field manager, writing status only when it
 *                    changes.
 *
 * Ownership: sg_ctrl_new copies the definition (strings, watches); the
 * client and arg are borrowed and must outlive the controller. The manager
 * borrows its controllers (free the manager first, then them).
 *
 * Threads: informer handlers (map functions) run on the informers' threads
 * and must only add keys; reconcile, synced and resync run on workers. Any
 * thread may call sg_ctrl_add, sg_ctrl_resync and the stats getters.
 */
#ifndef SG_CTRL_H
#define SG_CTRL_H

#include "sg_error.h"
#include "sg_kube.h"
#include "sg_kube_informer.h"
#include "sg_lease.h"
#include "sg_metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_CTRL_KEY_MAX 320 /* "<namespace>/<name>": 63 + 1 + 253, and the NUL */
#define SG_CTRL_NAME_MAX 48 /* controller names: [a-z0-9-], for logs and metric labels */
#define SG_CTRL_WATCH_MAX 16
#define SG_CTRL_WORKERS_MAX 16
#define SG_CTRL_ROWS_MAX 16
#define SG_CTRL_BACKOFF_FIRST_MS 1000u
#define SG_CTRL_BACKOFF_MAX_MS 30000u

/* ---- the work queue ---- */

typedef struct sg_ctrl_queue sg_ctrl_queue;

/* Backoff per key: first_ms after the first failure, doubling up to max_ms
 * (0: the defaults above). Caller frees with sg_ctrl_queue_free. */
SG_API int sg_ctrl_queue_new(sg_ctrl_queue **out, unsigned first_ms, unsigned max_ms) SG_MUST_CHECK;
SG_API void sg_ctrl_queue_free(sg_ctrl_queue *q);

/* Adds key now (a waiting delayed add of it is dropped). Keys are 1..
 * SG_CTRL_KEY_MAX-1 bytes; others, and adds after shutdown, are ignored.
 * Out of memory drops the key with a log line (the next event or resync
 * brings it back). */
SG_API void sg_ctrl_queue_add(sg_ctrl_queue *q, const char *key);
/* Adds key after delay_ms, unless it is due sooner already. */
SG_API void sg_ctrl_queue_add_after(sg_ctrl_queue *q, const char *key, uint64_t delay_ms);
/* Counts one more failure of key and adds it after its backoff; returns
 * that delay in ms. */
SG_API uint64_t sg_ctrl_queue_add_rate_limited(sg_ctrl_queue *q, const char *key);
/* Forgets key's failures (after a success). */
SG_API void sg_ctrl_queue_forget(sg_ctrl_queue *q, const char *key);
SG_API unsigned sg_ctrl_queue_failures(sg_ctrl_queue *q, const char *key);

/* Waits for a ready key, copies it into key (SG_CTRL_KEY_MAX bytes) and
 * marks it in progress: returns true. Returns false once the queue is shut
 * down. Every key obtained must be handed back with sg_ctrl_queue_done. */
SG_API bool sg_ctrl_queue_get(sg_ctrl_queue *q, char key[SG_CTRL_KEY_MAX]);
/* The key is no longer in progress; when it was added meanwhile, it is
 * ready again. */
SG_API void sg_ctrl_queue_done(sg_ctrl_queue *q, const char *key);
/* Holds every get until the monotonic time until_ns (shutdown still ends
 * the wait). */
SG_API void sg_ctrl_queue_pause_until(sg_ctrl_queue *q, uint64_t until_ns);
/* Wakes every get (they return false) and refuses adds. */
SG_API void sg_ctrl_queue_shutdown(sg_ctrl_queue *q);
/* Empties the queue, forgets every failure and undoes a shutdown. No get
 * may be waiting. */
SG_API void sg_ctrl_queue_reset(sg_ctrl_queue *q);
/* Distinct keys waiting: ready, delayed or in backoff (not in progress). */
SG_API size_t sg_ctrl_queue_len(sg_ctrl_queue *q);
/* The length above and the keys in progress (got, not yet done), read
 * together: both 0 means nothing is waiting and no worker is busy. */
SG_API void sg_ctrl_queue_counts(sg_ctrl_queue *q, size_t *waiting, size_t *active);

/* ---- a controller ---- */

typedef struct sg_ctrl sg_ctrl;

/* Turns an informer event's object into keys: calls sg_ctrl_add for each
 * key the object concerns (a ConfigMap -> its namespace, ...). Runs on the
 * informer's thread for adds, updates (the new object) and deletes. */
typedef void (*sg_ctrl_map_fn)(sg_ctrl *c, const json_t *obj, void *arg);

typedef struct sg_ctrl_watch {
	sg_kube_ref ref;            /* a collection: name NULL; ns NULL for all namespaces */
	const char *label_selector; /* optional */
	const char *field_selector; /* optional */
	sg_ctrl_map_fn map;         /* NULL: the object's own key, "ns/name" or "name" */
	bool metadata_only;         /* cache apiVersion, kind and metadata only (sg_kube_informer_opts) */
} sg_ctrl_watch;

typedef struct sg_ctrl_result {
	uint64_t requeue_after_ms; /* on success: reconcile key again after this (0: only on events) */
} sg_ctrl_result;

/* Brings the cluster in line for key. SG_OK: done (res may ask for another
 * pass later); < 0 with an sg_error detail: retried after the key's
 * backoff. A failure without any answer from the API server (SG_EBUSY or
 * SG_ETIMEOUT with no HTTP status) also pauses the whole controller, 1 s
 * doubling to 30 s, so an absent server does not get one request per key;
 * the pause ends with the first reconcile whose last call got an answer.
 * Check sg_ctrl_stopping before each write. */
typedef int (*sg_ctrl_reconcile_fn)(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg);

typedef struct sg_ctrl_def {
	const char *name;                /* [a-z0-9-], 1..SG_CTRL_NAME_MAX-1 bytes */
	sg_kube *kube;                   /* borrowed: the informers' and helpers' client */
	const sg_ctrl_watch *watches;    /* 1..SG_CTRL_WATCH_MAX, copied; watch 0 is the primary */
	size_t nwatches;
	sg_ctrl_reconcile_fn reconcile;
	/* Optional, on a worker once per start, after every informer has
	 * listed and before the first reconcile (adoption of existing state). */
	void (*synced)(sg_ctrl *c, void *arg);
	/* Optional, on a worker after synced and after each sg_ctrl_resync:
	 * queue everything there is to check. NULL: every object of watch 0,
	 * through its map. */
	void (*resync)(sg_ctrl *c, void *arg);
	void *arg;
	unsigned workers;          /* 0: 1; at most SG_CTRL_WORKERS_MAX */
	unsigned backoff_first_ms; /* 0: SG_CTRL_BACKOFF_FIRST_MS */
	unsigned backoff_max_ms;   /* 0: SG_CTRL_BACKOFF_MAX_MS */
	/* The field manager of its writes (apply, apply_status) and the
	 * reporter of its Events. NULL: "signet-<name>". A controller that
	 * takes over another implementation's objects names that one's manager
	 * (trust bundles: "trust-manager"), so the fields it owned stay owned
	 * and nothing is rewritten at the switch. 1..SG_CTRL_NAME_MAX+7 bytes of
	 * [a-z0-9-]. */
	const char *field_manager;
	/* The module's own life around the runtime's, so that a module writes
	 * no start, stop or metrics function of its own (all optional):
	 * starting  in sg_ctrl_start, before the informers are made: per-run
	 *           state, a probe of the API server, sg_ctrl_set_field_selector
	 *           (allowed here); an error fails the start;
	 * stopped   in sg_ctrl_stop, once the workers are joined and the
	 *           informers freed: forget per-run state;
	 * metrics   registers the module's own series, once, from
	 *           sg_ctrl_manager_metrics (after the runtime's). */
	int (*starting)(sg_ctrl *c, void *arg);
	void (*stopped)(sg_ctrl *c, void *arg);
	int (*metrics)(sg_ctrl *c, sg_metrics *reg, void *arg);
} sg_ctrl_def;

typedef struct sg_ctrl_stats {
	uint64_t reconciles; /* reconciles that succeeded */
	uint64_t errors;     /* reconciles that failed (each retried) */
	uint64_t requeues;   /* successes that asked to run again later */
	uint64_t queued;     /* keys waiting now (a pending resync counts as one) */
	uint64_t active;     /* keys being reconciled now; read with queued, so both 0 is
	                        idle, every finished reconcile counted in its module too */
	bool running;
} sg_ctrl_stats;

/* Checks and copies the definition; nothing runs. SG_EINVAL names a bad
 * field. Caller frees with sg_ctrl_free. */
SG_API int sg_ctrl_new(sg_ctrl **out, const sg_ctrl_def *def) SG_MUST_CHECK;

/* Runs the starting hook, creates and starts the informers and the
 * workers. The first worker waits for every informer's first LIST, runs
 * synced and resync, then all serve the queue. Returns at once; SG_OK when
 * already running. */
SG_API int sg_ctrl_start(sg_ctrl *c) SG_MUST_CHECK;

/* Stops: workers see the stop before their next write, are joined (at most
 * the one request each has in flight), then the informers are freed (about
 * a second each), the queue emptied and the stopped hook run. Safe when not
 * running; start may follow. Never from a reconcile, synced, resync, map
 * or lifecycle hook (it joins the thread that runs them). */
SG_API void sg_ctrl_stop(sg_ctrl *c);

/* Stops and frees; accepts NULL. */
SG_API void sg_ctrl_free(sg_ctrl *c);

SG_API const char *sg_ctrl_name(const sg_ctrl *c);
/* The client the controller was made with (borrowed). */
SG_API sg_kube *sg_ctrl_kube(const sg_ctrl *c);
/* Whether it runs (false for NULL). */
SG_API bool sg_ctrl_running(sg_ctrl *c);
/* True once stop has begun: a reconcile makes no further write. */
SG_API bool sg_ctrl_stopping(const sg_ctrl *c);

/* Queues key now (any thread; ignored unless running). */
SG_API void sg_ctrl_add(sg_ctrl *c, const char *key);
/* Queues key after delay_ms. */
SG_API void sg_ctrl_add_after(sg_ctrl *c, const char *key, uint64_t delay_ms);
/* Asks a worker to run the resync hook (any thread; ignored unless
 * running). */
SG_API void sg_ctrl_resync(sg_ctrl *c);

/* Replaces watch i's field selector (NULL: none), for the next start:
 * a controller that learns at start whether the API server supports a
 * selector (CRD selectable fields) sets it before sg_ctrl_start. SG_EINVAL
 * while running. */
SG_API int sg_ctrl_set_field_selector(sg_ctrl *c, size_t i, const char *selector) SG_MUST_CHECK;

/* The informer of watch i: for reconcile, synced and resync only (it exists
 * from start to stop). */
SG_API sg_kube_informer *sg_ctrl_informer(sg_ctrl *c, size_t i);
/* The object's key as the default map makes it: "ns/name", or "name" for a
 * cluster-scoped object. false when it has no usable name or is too long. */
SG_API bool sg_ctrl_key_of(const json_t *obj, char key[SG_CTRL_KEY_MAX]);
/* Splits a key made by sg_ctrl_key_of: ns "" for a cluster-scoped one. */
SG_API bool sg_ctrl_key_split(const char *key, char ns[64], char name[SG_KUBE_NAME_MAX + 1]);

SG_API void sg_ctrl_stats_get(sg_ctrl *c, sg_ctrl_stats *out);

/* Binds the series the runtime keeps up to date for this controller
 * (sg_ctrl_manager_metrics does it; any may be NULL): reconciles that
 * succeeded, failed, asked to run again, and the queue length. */
SG_API void sg_ctrl_bind_metrics(sg_ctrl *c, sg_series *ok, sg_series *failed, sg_series *requeued,
                                 sg_series *queued);
/* Registers the module's own series through its definition's metrics
 * hook (SG_OK when it has none). sg_ctrl_manager_metrics calls it. */
SG_API int sg_ctrl_metrics(sg_ctrl *c, sg_metrics *reg) SG_MUST_CHECK;

/* ---- helpers for reconcile functions ---- */

/* Records a core/v1 Event about obj (best effort: a failure is logged at
 * debug level; the caller's error detail is kept), reported by
 * "signet-<controller>". type "Normal" or "Warning"; reason CamelCase; the
 * message is printf-formatted. An object without apiVersion and kind (as
 * informers hold them) is typed from the watch whose informer holds it,
 * through the API server's discovery once per watch: so call it from
 * reconcile, synced or resync, or pass a typed object. */
SG_API void sg_ctrl_event(sg_ctrl *c, const json_t *obj, const char *type, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* The controller's field manager: "signet-<controller>" unless its
 * definition named another. */
SG_API const char *sg_ctrl_field_manager(const sg_ctrl *c);

/* Server-side apply of body (apiVersion, kind, metadata.name and the
 * fields this controller owns) with the controller's field manager, force
 * on: a controller owns its fields. *out as for sg_kube_apply. */
SG_API int sg_ctrl_apply(sg_ctrl *c, const sg_kube_ref *ref, const json_t *body, json_t **out) SG_MUST_CHECK;

/* Whether live (a cached or fetched object) already holds body, an apply
 * intent of this controller's: every field of body has its value in live
 * (objects member by member, lists item by item with equal lengths, so
 * members the server defaulted or other managers added do not count), and
 * no field our manager applied before (live's managedFields, status
 * aside) is missing from body. apiVersion and kind are not compared
 * (informer objects carry none). */
SG_API bool sg_ctrl_object_holds(sg_ctrl *c, const json_t *body, const json_t *live);

/* sg_ctrl_apply unless live (may be NULL: absent) already holds body:
 * a reconcile that finds its objects as it wants them makes no request.
 * *written (may be NULL) tells whether the apply was made; *out (may be
 * NULL) gets the applied object then, NULL otherwise. A quantity the user
 * wrote in another form than the server's canonical one ("1000m" for
 * "1") reads as a difference; the apply then changes nothing and causes
 * no watch event. */
SG_API int sg_ctrl_apply_owned(sg_ctrl *c, const sg_kube_ref *ref, const json_t *body, const json_t *live,
                               json_t **out, bool *written) SG_MUST_CHECK;

/* A metav1.Condition to set. status "True", "False" or "Unknown"; reason
 * CamelCase (1..1024 bytes); message at most 32768 bytes. */
typedef struct sg_ctrl_condition {
	const char *type;
	const char *status;
	const char *reason;
	const char *message;
	int64_t observed_generation; /* the metadata.generation the condition speaks of */
} sg_ctrl_condition;

/* Sets cond in conditions (a JSON array of metav1.Condition, modified in
 * place): lastTransitionTime (RFC 3339, from now, Unix seconds) changes
 * only when the status does; the other fields are replaced. Returns true
 * when anything changed. SG_EINVAL-free: a malformed cond is refused with
 * false and a log line. */
SG_API bool sg_ctrl_condition_set(json_t *conditions, const sg_ctrl_condition *cond, int64_t now);
/* The condition of that type in obj's status.conditions (borrowed), or
 * NULL. */
SG_API const json_t *sg_ctrl_condition_find(const json_t *obj, const char *type);

/* Writes obj's status by server-side apply on the status subresource
 * when it differs from what obj (the live or cached object) says. status
 * is the controller's intent, the fields it owns; its "conditions" (an
 * array of {type, status, reason, message[, observedGeneration]}) keep
 * obj's lastTransitionTime while their status stays, and get obj's
 * metadata.generation as observedGeneration when they carry none (an
 * "observedGeneration": null asks for none, for kinds whose conditions
 * have no such field, such as cert-manager's CertificateRequest). Nothing
 * is written when every owned field already holds that value (objects are
 * compared field by field, conditions by type, other arrays whole; fields
 * and conditions of other managers beside ours do not count), unless a
 * field this controller's manager applied before (metadata.managedFields)
 * is no longer in the intent: then the apply removes it. So a controller
 * may call this on every reconcile. ref names obj (its group
 * and version make the apiVersion); kind is obj's kind (informer objects
 * carry none). *written (may be NULL) tells whether a request was made. */
SG_API int sg_ctrl_apply_status(sg_ctrl *c, const sg_kube_ref *ref, const char *kind, const json_t *obj,
                                const json_t *status, bool *written) SG_MUST_CHECK;
/* As sg_ctrl_apply_status, for a status decided from obj alone, which a
 * cache behind the API server may show as it was before a write made
 * since (such as one by the replica that led before): the apply carries
 * obj's resourceVersion, so on an object changed since it is refused with
 * 409 Conflict (SG_EBUSY; sg_kube_last_status()->code 409), and the fields
 * our manager applied meanwhile are not removed. As with
 * sg_ctrl_apply_status, nothing is sent (SG_OK, *written false) when obj
 * already holds the intent, however old obj is. SG_EINVAL when obj has no
 * resourceVersion. */
SG_API int sg_ctrl_apply_status_exact(sg_ctrl *c, const sg_kube_ref *ref, const char *kind, const json_t *obj,
                                      const json_t *status, bool *written) SG_MUST_CHECK;

/* ---- the table (leader-gated runner) ---- */

typedef struct sg_ctrl_manager sg_ctrl_manager;

typedef struct sg_ctrl_manager_opts {
	/* Leader election: lease_kube non-NULL elects with lease (its
	 * callbacks are the manager's and ignored here); NULL: this replica
	 * runs every row. The client must outlive the manager. */
	sg_kube *lease_kube;
	sg_lease_opts lease;
} sg_ctrl_manager_opts;

/* A row of the table: the controller (borrowed; the manager starts and
 * stops it with sg_ctrl_start and sg_ctrl_stop, and registers its metrics:
 * the runtime's and its definition's own), and whether it runs only on the
 * leader. */
typedef struct sg_ctrl_row {
	sg_ctrl *ctrl;
	bool leader_only;
} sg_ctrl_row;

SG_API int sg_ctrl_manager_new(sg_ctrl_manager **out, const sg_ctrl_manager_opts *o) SG_MUST_CHECK;
/* Adds a row (before start); at most SG_CTRL_ROWS_MAX. */
SG_API int sg_ctrl_manager_add(sg_ctrl_manager *m, const sg_ctrl_row *row) SG_MUST_CHECK;
/* Starts the rows that run everywhere, then the elector (or, without
 * election, the leader-only rows). A row that fails to start is logged and
 * retried by tick; an elector that cannot start is an error. */
SG_API int sg_ctrl_manager_start(sg_ctrl_manager *m) SG_MUST_CHECK;
/* Once a second: retries rows that should run and do not. */
SG_API void sg_ctrl_manager_tick(sg_ctrl_manager *m);
/* True while this replica leads and every leader-only row runs. Without
 * election the replica leads alone from start. With election but no
 * leader-only row nothing is elected, and this stays false. */
SG_API bool sg_ctrl_manager_leading(sg_ctrl_manager *m);
/* Registers signet_controller_* for every row, and each row's own metrics
 * (its definition's metrics hook). Call once, after the rows are added. */
SG_API int sg_ctrl_manager_metrics(sg_ctrl_manager *m, sg_metrics *reg) SG_MUST_CHECK;
/* Stops leading (every leader-only row stops, at once), releases the
 * Lease, stops the other rows and frees. Accepts NULL. */
SG_API void sg_ctrl_manager_free(sg_ctrl_manager *m);

#endif
