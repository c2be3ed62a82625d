/*
 * sg_kube: a small Kubernetes API client (the libcurl + jansson adapter of
 * the Kubernetes layer). It sits beside ra/ and sees common/ only.
 *
 * Pieces, bottom up:
 *   sg_kube_config     where the API server is and how to authenticate:
 *                      a kubeconfig file (YAML through libyaml, or JSON) or
 *                      the in-cluster service-account files.
 *   sg_kube            the client: a small pool of curl easy handles
 *                      (connection reuse, HTTP/2 over TLS where offered),
 *                      a client-side token-bucket rate limiter, and the
 *                      verbs get / list / create / update / delete / merge
 *                      patch / server-side apply / watch / events, and a
 *                      GET of a non-resource path (discovery documents).
 *   sg_kube_status     the Kubernetes Status object of a failed call, kept
 *                      per thread next to the sg_error detail.
 *   sg_kube_watch_parser  the incremental, bounded parser of a watch stream
 *                      (newline-delimited JSON events).
 * The informer (sg_kube_informer.h) and the Lease elector (sg_lease.h) are
 * built on these.
 *
 * Errors (sg_error.h categories; the detail names the verb, the resource
 * and the Status message, e.g. "kube: PUT configmaps default/x: 409
 * Conflict: the object has been modified; ..."):
 *   400, 422 -> SG_EINVAL      401, 403 -> SG_EAUTH     404 -> SG_ENOTFOUND
 *   409, 410, 429, 5xx -> SG_EBUSY (retryable: re-read, relist or back off)
 *   connection failures -> SG_EBUSY; timeouts -> SG_ETIMEOUT;
 *   TLS verification failures -> SG_EAUTH; malformed answers -> SG_EPROTO.
 * sg_kube_last_status() tells 409 Conflict from 409 AlreadyExists and a 410
 * from a 429: it holds the HTTP code and Status reason of this thread's last
 * call (code 0 when the call never got an HTTP answer).
 *
 * JSON documents: request bodies are borrowed (never modified, never
 * stolen); documents returned through `json_t **out` are new references the
 * caller releases with json_decref. Every out parameter may be NULL when
 * the caller does not want the answer.
 *
 * Secrets: bearer tokens and client keys live in sg_secret buffers, never
 * reach a log line, and the copies we hand to curl are wiped after use.
 *
 * Thread safety: an sg_kube may be used by any number of threads at once;
 * each call borrows one easy handle from the pool for its duration.
 */
#ifndef SG_KUBE_H
#define SG_KUBE_H

#include "sg_error.h"
#include "sg_names.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits ---- */
#define SG_KUBE_CONFIG_MAX (1u << 20)        /* kubeconfig file, bytes */
#define SG_KUBE_RESPONSE_MAX (64u << 20)     /* a non-watch response body */
#define SG_KUBE_WATCH_LINE_MAX (16u << 20)   /* one watch event, bytes */
#define SG_KUBE_URL_MAX 8192
#define SG_KUBE_PATH_MAX 1024                /* a non-resource path (sg_kube_get_path) */
#define SG_KUBE_NAME_MAX SG_NAMES_SUBDOMAIN_MAX /* object names (DNS subdomain) */
#define SG_KUBE_STATUS_REASON_MAX 64
#define SG_KUBE_STATUS_MESSAGE_MAX 320
#define SG_KUBE_IDLE_HANDLES_MAX 256 /* sg_kube_options.idle_handles */

/* ---- configuration ---- */

typedef struct sg_kube_config sg_kube_config;

/* Reads a kubeconfig file: path, else $KUBECONFIG (its first entry when it
 * is a list), else ~/.kube/config. context NULL means current-context.
 * Supported: cluster server (https only), certificate-authority(-data)
 * (insecure-skip-tls-verify must be absent or false); user token,
 * tokenFile, client-certificate(-data) + client-key(-data); the context's
 * namespace. Relative file names resolve against the kubeconfig's folder.
 * Anything else needed to authenticate (exec, auth-provider, basic auth) is
 * refused with SG_EINVAL naming the field. SG_ENOTFOUND when no file.
 * Caller frees with sg_kube_config_free. */
SG_API int sg_kube_config_from_kubeconfig(sg_kube_config **out, const char *path, const char *context) SG_MUST_CHECK;

/* The same from bytes already in memory (YAML or JSON); base_dir resolves
 * relative file names (NULL: the working directory). */
SG_API int sg_kube_config_from_bytes(sg_kube_config **out, const void *data, size_t len, const char *context,
                                     const char *base_dir) SG_MUST_CHECK;

/* In-cluster files; NULL members take the defaults shown. */
typedef struct sg_kube_incluster {
	const char *token_path;     /* /var/run/secrets/kubernetes.io/serviceaccount/token */
	const char *ca_path;        /* .../ca.crt */
	const char *namespace_path; /* .../namespace (optional file) */
	const char *host;           /* NULL: $KUBERNETES_SERVICE_HOST */
	const char *port;           /* NULL: $KUBERNETES_SERVICE_PORT */
} sg_kube_incluster;

/* The in-cluster configuration: https://$KUBERNETES_SERVICE_HOST:PORT with
 * the service-account CA and token. The token file is re-read whenever its
 * identity (inode, size, mtime) changes, checked at most once per second,
 * so rotated projected tokens keep working. SG_ENOTFOUND outside a pod. */
SG_API int sg_kube_config_in_cluster(sg_kube_config **out, const sg_kube_incluster *paths) SG_MUST_CHECK;

/* The usual order of a program: --kubeconfig (kubeconfig, may be NULL),
 * then $KUBECONFIG, then in-cluster, then ~/.kube/config. */
SG_API int sg_kube_config_load(sg_kube_config **out, const char *kubeconfig) SG_MUST_CHECK;

/* Borrowed until sg_kube_config_free. namespace is "default" when unset. */
SG_API const char *sg_kube_config_server(const sg_kube_config *c);
SG_API const char *sg_kube_config_namespace(const sg_kube_config *c);
SG_API void sg_kube_config_free(sg_kube_config *c);

/* ---- the client ---- */

typedef struct sg_kube sg_kube;

typedef struct sg_kube_options {
	double qps;                 /* 0: 20 (cert-manager's default); < 0: no rate limit */
	int burst;                  /* 0: 50 */
	long connect_timeout_ms;    /* 0: 5000 */
	long request_timeout_ms;    /* 0: 30000 (not for watches) */
	const char *user_agent;     /* NULL: "signet/<version>" */
	size_t watch_line_max;      /* 0: SG_KUBE_WATCH_LINE_MAX */
	bool http1;                 /* force HTTP/1.1 (default: HTTP/2 when offered) */
	unsigned idle_handles;      /* easy handles (each with its connection) kept between calls;
	                               0: 8; at most SG_KUBE_IDLE_HANDLES_MAX. A client with more
	                               calls in flight than this reconnects for the excess. */
} sg_kube_options;

/* Creates a client. *cfg is consumed (on success and on failure) and set
 * to NULL. opt may be NULL. Caller frees with sg_kube_free. */
SG_API int sg_kube_new(sg_kube **out, sg_kube_config **cfg, const sg_kube_options *opt) SG_MUST_CHECK;
/* Frees the client; no call may be in progress. Accepts NULL. */
SG_API void sg_kube_free(sg_kube *k);
/* The namespace of the configuration (borrowed for the client's life). */
SG_API const char *sg_kube_namespace(const sg_kube *k);
/* The PEM bundle the client verifies the API server with (*len bytes,
 * borrowed for the client's life), or NULL (*len 0) when it uses the
 * system's roots: what cert-manager's cainjector injects for
 * cert-manager.io/inject-apiserver-ca. */
SG_API const uint8_t *sg_kube_ca_pem(const sg_kube *k, size_t *len);

/* An object or a collection. group NULL or "" is the core group (/api/v1);
 * ns NULL is cluster-scoped (or all namespaces for list/watch); name NULL
 * addresses the collection (list, watch, create); subresource is e.g.
 * "status". Every segment is checked (printable, no '/', not "." or "..")
 * and escaped, and the URL is bounded by SG_KUBE_URL_MAX. */
typedef struct sg_kube_ref {
	const char *group;
	const char *version;
	const char *resource;
	const char *ns;
	const char *name;
	const char *subresource;
} sg_kube_ref;

/* The outcome of this thread's last call (borrowed, thread-local). */
typedef struct sg_kube_status {
	long code;                                   /* HTTP code or Status.code; 0: no answer */
	char reason[SG_KUBE_STATUS_REASON_MAX];      /* "Conflict", "AlreadyExists", "Expired", ... */
	char message[SG_KUBE_STATUS_MESSAGE_MAX];    /* sanitised Status.message */
	long retry_after; /* seconds the server asked us to wait (its Retry-After header, else
	                     Status.details.retryAfterSeconds); 0: it did not say */
} sg_kube_status;
SG_API const sg_kube_status *sg_kube_last_status(void);
/* Whether rc, returned by this thread's last call, is the API server's
 * 409: Conflict (a precondition, a resourceVersion or another field
 * manager that no longer agrees) or AlreadyExists (reason tells which).
 * What a controller answers by looking again, not by failing. */
SG_API bool sg_kube_conflict(int rc);

/* Parses a Kubernetes Status document (kind "Status" or an object with an
 * integer "code"); wrong member types are ignored, strings are cut to the
 * field sizes and control bytes replaced. SG_EINVAL when it is not one. */
SG_API int sg_kube_status_parse(sg_kube_status *out, const void *body, size_t len) SG_MUST_CHECK;
SG_API int sg_kube_status_from_json(sg_kube_status *out, const json_t *status) SG_MUST_CHECK;
/* The sg_error category of an HTTP code (table above). */
SG_API int sg_kube_error_of_http(long code);

/* GET one object. */
SG_API int sg_kube_get(sg_kube *k, const sg_kube_ref *ref, json_t **out) SG_MUST_CHECK;

typedef struct sg_kube_list_opts {
	const char *label_selector;
	const char *field_selector;
	long limit;            /* page size; 0: no limit (list_all: 500) */
	const char *cont;      /* continue token of the previous page */
} sg_kube_list_opts;

/* One page of a list (a *List object: items, metadata.continue). */
SG_API int sg_kube_list(sg_kube *k, const sg_kube_ref *ref, const sg_kube_list_opts *opt, json_t **out) SG_MUST_CHECK;
/* Every page, following continue tokens: a List object whose "items" hold
 * all objects and whose metadata.resourceVersion is the snapshot's. A stale
 * continue token fails with SG_EBUSY and status 410 (relist). */
SG_API int sg_kube_list_all(sg_kube *k, const sg_kube_ref *ref, const sg_kube_list_opts *opt, json_t **out) SG_MUST_CHECK;

/* POST a new object to the collection (ref->name NULL), or to a
 * subresource of a named object (ref->name and ref->subresource, e.g.
 * serviceaccounts/<name>/token for a TokenRequest). */
SG_API int sg_kube_create(sg_kube *k, const sg_kube_ref *ref, const json_t *body, json_t **out) SG_MUST_CHECK;
/* ---- many requests at once, on one thread ----
 *
 * A loop is a thread of its own running libcurl's multi interface over one
 * client: the requests given to it are in flight together, multiplexed on
 * HTTP/2 connections, and a thread that has many calls in flight needs no
 * thread per call (the TokenReview authenticator). The client's options,
 * authentication, rate limit and errors are sg_kube_create's. */
typedef struct sg_kube_loop sg_kube_loop;

/* Called once per request, on the loop's thread, when it ends: rc and
 * *answer as sg_kube_create's (answer is the callee's to json_decref; NULL
 * when rc < 0); on failure sg_error_last() and sg_kube_last_status() hold
 * the detail on that thread for the call. It must not block: every other
 * request of the loop waits for it. */
typedef void (*sg_kube_done_fn)(int rc, json_t *answer, void *arg);

/* k is borrowed and must outlive the loop. */
SG_API int sg_kube_loop_new(sg_kube_loop **out, sg_kube *k) SG_MUST_CHECK;
/* Ends every request still in flight with SG_EBUSY ("stopping"), each
 * callback run before it returns, stops the thread and frees. Accepts
 * NULL. Not from the loop's own thread. */
SG_API void sg_kube_loop_free(sg_kube_loop *l);
/* POSTs body (serialised before it returns; the caller keeps it) as
 * sg_kube_create does. On SG_OK done will be called exactly once; on an
 * error (a bad reference, no memory, the loop stopping) it never is.
 * Thread-safe; waits for the client's rate limiter when it has one. */
SG_API int sg_kube_loop_create(sg_kube_loop *l, const sg_kube_ref *ref, const json_t *body, sg_kube_done_fn done,
                               void *arg) SG_MUST_CHECK;

/* PUT (replace). Optimistic concurrency: a metadata.resourceVersion in the
 * body makes a stale update fail with 409 Conflict. ref->subresource
 * "status" writes the status subresource. */
SG_API int sg_kube_update(sg_kube *k, const sg_kube_ref *ref, const json_t *body, json_t **out) SG_MUST_CHECK;
/* DELETE; *out is the deleted object or a Status. */
SG_API int sg_kube_delete(sg_kube *k, const sg_kube_ref *ref, json_t **out) SG_MUST_CHECK;
/* DELETE of the object named by ref only while its metadata.uid is uid
 * (DeleteOptions preconditions.uid): an object of the same name made
 * since (another owner's) is left alone, and the API server answers 409
 * Conflict (SG_EBUSY; sg_kube_last_status()->code 409), as for any other
 * precondition. SG_EINVAL for an empty uid. */
SG_API int sg_kube_delete_uid(sg_kube *k, const sg_kube_ref *ref, const char *uid, json_t **out) SG_MUST_CHECK;
/* DELETE of the object as the caller last saw it: sg_kube_delete_uid with
 * the uid it was seen with, or by name when it was seen without one (uid
 * NULL or ""). What a controller uses to replace or remove an object it read
 * from a cache that may be behind the API server: a 409 (SG_EBUSY) says the
 * name holds a newer object, to be looked at instead. */
SG_API int sg_kube_delete_seen(sg_kube *k, const sg_kube_ref *ref, const char *uid, json_t **out) SG_MUST_CHECK;
/* DELETE of exactly the version the caller saw: preconditions uid and
 * resourceVersion (both non-empty, else SG_EINVAL). Any write since, a
 * key another manager added included, makes the API server answer 409
 * Conflict (SG_EBUSY): what a controller uses when the delete is right
 * only for the content it read, and a cache that is behind must not
 * decide for it. */
SG_API int sg_kube_delete_version(sg_kube *k, const sg_kube_ref *ref, const char *uid, const char *resource_version,
                                  json_t **out) SG_MUST_CHECK;
/* PATCH with application/merge-patch+json (RFC 7386). */
SG_API int sg_kube_merge_patch(sg_kube *k, const sg_kube_ref *ref, const json_t *patch, json_t **out) SG_MUST_CHECK;
/* Server-side apply: PATCH application/apply-patch+yaml with the JSON body
 * (JSON is YAML), ?fieldManager=<field_manager>&force=<force>. The body is
 * a full intent (apiVersion, kind, metadata.name). field_manager: 1..128
 * printable bytes. A conflict with another manager (force false) is
 * SG_EBUSY with status 409 Conflict. */
SG_API int sg_kube_apply(sg_kube *k, const sg_kube_ref *ref, const json_t *body, const char *field_manager,
                         bool force, json_t **out) SG_MUST_CHECK;
/* PATCH with application/json-patch+json (RFC 6902): ops is a non-empty
 * array of operations, applied by the API server all or none ("test"
 * operations refuse the whole patch with 422 Invalid, SG_EINVAL). */
SG_API int sg_kube_json_patch(sg_kube *k, const sg_kube_ref *ref, const json_t *ops, json_t **out) SG_MUST_CHECK;

/* The field manager the API server names a write by after this client's
 * default User-Agent ("signet/<version> (kube)", when
 * sg_kube_opts.user_agent is not set) when the request names none: every create, update and merge patch signet made
 * without ?fieldManager= is owned by an update of this manager. */
#define SG_KUBE_USER_AGENT_MANAGER "signet"

/* Hands to field_manager's apply the fields that updates by the managers
 * from[0..n) own in live (the object as read, with its resourceVersion
 * and metadata.managedFields): those entries (operation Update, no
 * subresource) and field_manager's own Apply entry, those of one
 * apiVersion (the Apply entry's), become one Apply entry of field_manager
 * owning the union of their fields, so that its next
 * apply that leaves one of them out removes it. An update's fields are
 * otherwise never an apply's to remove: a label dropped from an intent
 * would stay on an object created, or once written, by a plain request.
 * A JSON patch of metadata.managedFields that writes back live's
 * resourceVersion: an object changed since is refused with 409 Conflict
 * (SG_EBUSY), to be read again. Nothing to hand over: SG_OK with no
 * request made and *out NULL; otherwise *out is the patched object. An
 * answer that still lists those updates (a server that could not read
 * the entries keeps its own) is SG_EPROTO. Only ownership changes, never
 * a field's value. live is not modified; ref names it (its name is
 * checked against live's, its namespace is not). */
SG_API int sg_kube_adopt_fields(sg_kube *k, const sg_kube_ref *ref, const json_t *live, const char *const *from,
                                size_t n, const char *field_manager, json_t **out) SG_MUST_CHECK;

/* A create that leaves the object as an apply by field_manager would own
 * it: the fields body sets (and those the server filled in on create, as
 * defaults) belong to (field_manager, Apply), so that a later sg_kube_apply
 * by that manager that leaves one of them out removes it. Unlike an apply
 * it fails when the name is taken (409 AlreadyExists, SG_EBUSY): for an
 * object the caller decided to make only because it was absent. Two
 * requests: the POST (?fieldManager=field_manager), then
 * sg_kube_adopt_fields from that manager's update. Once the POST has
 * succeeded the result is SG_OK, with the POST's status in
 * sg_kube_last_status(): when the second request is refused (the object
 * written in between) the fields stay the update's, logged at warning
 * level, for a later sg_kube_adopt_fields; *out is then the POST's
 * answer. The apply then owns the defaults too: an intent that omits
 * one asks for its removal, which the server answers by defaulting it
 * again (or refuses, for an immutable field such as a Job's selector):
 * meant for kinds with no such defaults (a Secret that sets its type).
 * ref names the collection (no name, no subresource); field_manager as
 * for sg_kube_apply. */
SG_API int sg_kube_create_applied(sg_kube *k, const sg_kube_ref *ref, const json_t *body, const char *field_manager,
                                  json_t **out) SG_MUST_CHECK;

/* Creates a core/v1 Event about obj (which must carry apiVersion, kind and
 * metadata.name; namespace, uid and resourceVersion are copied when
 * present). type "Normal" or "Warning"; reason CamelCase; message is cut
 * at 1024 bytes; component names the reporter. The Event lives in the
 * object's namespace ("default" for cluster-scoped objects). */
SG_API int sg_kube_event(sg_kube *k, const json_t *obj, const char *type, const char *reason, const char *message,
                         const char *component, json_t **out) SG_MUST_CHECK;

/* ---- non-resource paths ---- */

typedef struct sg_kube_path_opts {
	size_t max;              /* body limit, bytes; 0 (and anything larger): SG_KUBE_RESPONSE_MAX */
	const atomic_bool *stop; /* when it turns true the call ends (within ~1 s) with SG_EBUSY */
} sg_kube_path_opts;

/* GET of a path that is not a resource, such as "/openid/v1/jwks" or
 * "/.well-known/openid-configuration", appended as given to the server URL.
 * The path must start with '/' and be at most SG_KUBE_PATH_MAX bytes of
 * RFC 3986 path characters other than '%' (no escapes, spaces, controls,
 * query or fragment), with no empty, "." or ".." segment (SG_EINVAL).
 * Accept: application/json, application/jwk-set+json. The answer must be
 * 2xx with a JSON media type (application/json or application/<x>+json)
 * and at most max bytes after decoding: a larger one fails with SG_EPROTO
 * ("response larger than"), before more than max bytes are buffered, as
 * does another media type. Other errors as for the verbs (table above).
 * The body is not parsed. opt may be NULL. On success *out holds *len
 * bytes plus a NUL that *len does not count; caller frees it with free()
 * (out and len may be NULL, as everywhere in this header). */
SG_API int sg_kube_get_path(sg_kube *k, const char *path, const sg_kube_path_opts *opt, uint8_t **out,
                            size_t *len) SG_MUST_CHECK;

/* ---- watch ---- */

typedef enum sg_kube_event_type {
	SG_KUBE_ADDED,
	SG_KUBE_MODIFIED,
	SG_KUBE_DELETED,
	SG_KUBE_BOOKMARK,
} sg_kube_event_type;

SG_API const char *sg_kube_event_name(sg_kube_event_type t);

/* Called once per event; object is borrowed for the call (json_incref to
 * keep it). Return 0 to go on, > 0 to end the watch cleanly, < 0 (with an
 * sg_error detail) to fail it. */
typedef int (*sg_kube_watch_fn)(sg_kube_event_type type, json_t *object, void *arg);

/* Incremental parser of a watch stream: newline-delimited JSON
 * {"type": ..., "object": {...}} (blank lines and a CR before the LF are
 * allowed). Bytes are buffered only up to the end of the current line,
 * which may be at most max_line bytes (SG_EPROTO beyond). An ERROR event
 * ends the stream: its Status is recorded (sg_kube_last_status) and the
 * feed fails with its category, SG_EBUSY + code 410 for an expired
 * resourceVersion. Unknown types, non-object "object" members and invalid
 * JSON are SG_EPROTO. Caller frees with sg_kube_watch_parser_free. */
typedef struct sg_kube_watch_parser sg_kube_watch_parser;
SG_API int sg_kube_watch_parser_new(sg_kube_watch_parser **out, size_t max_line, sg_kube_watch_fn fn,
                                    void *arg) SG_MUST_CHECK;
/* Feeds len bytes; returns 0, the callback's positive stop value, or a
 * negative error (after which the parser refuses further input). */
SG_API int sg_kube_watch_parser_feed(sg_kube_watch_parser *p, const void *data, size_t len) SG_MUST_CHECK;
/* The end of the stream: SG_EPROTO when it stops inside a line. */
SG_API int sg_kube_watch_parser_finish(sg_kube_watch_parser *p) SG_MUST_CHECK;
SG_API void sg_kube_watch_parser_free(sg_kube_watch_parser *p);

typedef struct sg_kube_watch_opts {
	const char *resource_version; /* NULL/"": from "now" (the server's choice) */
	const char *label_selector;
	const char *field_selector;
	int timeout_seconds;          /* server-side end of the watch; 0: 290 */
	bool no_bookmarks;            /* allowWatchBookmarks is on unless set */
	const atomic_bool *stop;      /* when it turns true the watch ends (within ~1 s) */
} sg_kube_watch_opts;

/* One watch request, streamed to fn until the server ends it (0), fn stops
 * it (its positive value), opt->stop turns true (0), or it fails: an HTTP
 * error or in-stream ERROR (410: SG_EBUSY with sg_kube_last_status()->code
 * 410, meaning "relist"), a broken or truncated stream (SG_EPROTO), a
 * connection failure (SG_EBUSY). There is no total timeout; a stream that
 * stays silent for timeout_seconds + 30 s is abandoned (SG_ETIMEOUT). */
SG_API int sg_kube_watch(sg_kube *k, const sg_kube_ref *ref, const sg_kube_watch_opts *opt, sg_kube_watch_fn fn,
                         void *arg) SG_MUST_CHECK;

/* ---- rate limiter ---- */

/* A token bucket: qps tokens per second, at most burst banked; a waiter
 * reserves the next token and sleeps until it is due (FIFO by arrival).
 * qps <= 0 disables it. Caller frees with sg_kube_ratelimit_free. */
typedef struct sg_kube_ratelimit sg_kube_ratelimit;
SG_API int sg_kube_ratelimit_new(sg_kube_ratelimit **out, double qps, int burst) SG_MUST_CHECK;
SG_API void sg_kube_ratelimit_wait(sg_kube_ratelimit *r);
SG_API void sg_kube_ratelimit_free(sg_kube_ratelimit *r);

/* ---- naming rules ---- */

/* The Kubernetes naming rules are common/sg_names.h (sg_names_dns_label,
 * sg_names_dns_subdomain, sg_names_uid), where code that has no business
 * with the client reaches them too. */

/* ---- small helpers shared by the informer and the elector ---- */

/* metadata.<field> as a string, or NULL (borrowed from obj). */
SG_API const char *sg_kube_meta_str(const json_t *obj, const char *field);
/* Zeroes in place, lengths kept, every string under obj's data and
 * stringData and its kubectl.kubernetes.io/last-applied-configuration
 * annotation (which repeats the data), before the caller releases it: a
 * key pair or a token in a body we built or an answer we parsed is then
 * gone when jansson frees it. obj is a Secret or an object without kind
 * and apiVersion (a LIST's items have none); one that names another kind
 * or version, NULL and non-objects are left alone. Only for an object
 * nobody else reads: never on an informer's copy (sg_kube_informer_get),
 * which other threads share. */
SG_API void sg_kube_secret_wipe(json_t *obj);
/* sg_kube_secret_wipe(*obj), then json_decref; *obj NULL after. As a
 * scope's cleanup: sg_kube_secret_auto_t *s = NULL; (as json_auto_t). */
SG_API void sg_kube_secret_release(json_t **obj);
/* Makes jansson clear every block it frees in this process, from now on
 * (json_set_alloc_funcs; not undone): an informer's copy of a Secret, which
 * threads share and the last reference frees wherever it is, is then
 * cleared like the copies sg_kube_secret_wipe reaches. For the controller
 * programs, which cache Secrets (sg_ctrl_program_main calls it), and for
 * signetd when it reads Secrets that may hold a key
 * (sg_cluster_reads_secrets); otherwise signetd's token parsing keeps the
 * plain free, which is about half a microsecond faster. Call before any
 * other thread uses jansson. Blocks allocated before the call are cleared
 * too when they are freed after it. */
SG_API void sg_kube_json_wipe_frees(void);
#define sg_kube_secret_auto_t json_t __attribute__((cleanup(sg_kube_secret_release)))
/* Formats wall-clock now as a Kubernetes MicroTime (RFC 3339 with
 * microseconds, UTC): cap >= 28. */
SG_API void sg_kube_microtime_now(char *out, size_t cap);

#endif
