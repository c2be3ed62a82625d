/*
 * sg_rootdist: the root-bundle distributor. Keeps ConfigMap
 * istio-ca-root-cert (data key root-cert.pem, label istio.io/config=true)
 * in every selected namespace equal to the mesh's root bundle, as
 * istio-csr's namespace controller does; sidecars and istiod read it to
 * trust the mesh CA. Leader-only: the daemon starts it when it takes the
 * Lease and stops it when it loses it.
 *
 * What it writes, per selected namespace that exists and is not
 * Terminating:
 *   - no ConfigMap: one is created with {labels: {istio.io/config: "true"},
 *     data: {root-cert.pem: <bundle>}} (or the name, key and label given);
 *   - a ConfigMap that differs: its data is reset to exactly that one key
 *     (extra data and binaryData keys are removed), the label is set, and
 *     it is replaced with a PUT carrying the resourceVersion read; every
 *     other label, annotation and field a user set is kept. An immutable
 *     ConfigMap whose data is wrong is deleted and created again.
 *   - a ConfigMap that already matches: nothing, ever. Our own writes come
 *     back as watch events and find nothing to do, so nothing loops
 *     (istio-csr #161).
 * ConfigMaps in namespaces that stop matching are left alone (not deleted,
 * no longer updated), as istio-csr does.
 *
 * One namespace instead (options.ns): the same ConfigMap kept in that one
 * namespace only, with a label of its own. signetd runs a second instance
 * so (named "rootpub"): ConfigMap signet-ca-roots (key ca.crt, label
 * signet.dev/ca-roots=true) in the trust namespace, which trust-manager
 * Bundles (trust.cert-manager.io/v1alpha1) name as a source
 * (configMap: {name: signet-ca-roots, key: ca.crt}). It holds the bundle
 * signetd serves, every current root (old and new during a rotation), so
 * the Bundles' targets trust the new root before the old one goes. The
 * namespace may come later: its creation is an event like any other.
 *
 * A Secret instead (options.secret): the same rules for a Secret of type
 * Opaque whose data holds the bundle under the key (base64, as Secrets
 * carry it). signetd runs a third instance so (named "istiodraroots",
 * --istiod-ra-root-secret): Secret external-ca-cert (key root-cert.pem) in
 * istiod's namespace, which istiod mounts at /etc/external-ca-cert and
 * reads, as ra.DefaultExtCACertDir + constants.
 * CACertNamespaceConfigMapDataName, when EXTERNAL_CA=
 * ISTIOD_RA_KUBERNETES_API: the roots of the Kubernetes signers its RA
 * forwards to (pilot/pkg/bootstrap/istio_ca.go, createIstioRA). An
 * existing Secret keeps its type (it cannot change); one whose type does
 * not allow the single key is refused by the API server, and retried.
 *
 * It is a controller on the runtime (sg_ctrl.h), named "rootdist" unless
 * options.controller says otherwise (the runtime's metrics and logs tell
 * controllers apart by name, so two instances in one process need two).
 * Threads (between start and stop): two informers (namespaces matching the
 * selector, or the one namespace by field selector metadata.name;
 * ConfigMaps with the name in all namespaces, or in the one), each with
 * its own thread, and one worker that reconciles namespaces from the
 * runtime's de-duplicated queue. Failures are retried per namespace after
 * 1 s, doubling to 30 s; while the API server does not answer at all, the
 * worker also pauses as a whole (same steps), and failure warnings are
 * logged at most once a second.
 *
 * Kubernetes RBAC the client needs: namespaces get/list/watch; configmaps
 * (secrets, with options.secret) get/list/watch/create/update/delete in
 * every namespace (with ns: in that namespace only).
 */
#ifndef SG_ROOTDIST_H
#define SG_ROOTDIST_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"
#include "sg_kube_selector.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_ROOTDIST_NAME "istio-ca-root-cert"
#define SG_ROOTDIST_KEY "root-cert.pem"
#define SG_ROOTDIST_LABEL "istio.io/config"
#define SG_ROOTDIST_LABEL_VALUE "true"
#define SG_ROOTDIST_CONTROLLER "rootdist"
/* signetd's publication of its roots for trust bundles (the name and the
 * namespace are settings: roots-configmap, trust-namespace). */
#define SG_ROOTDIST_ROOTS_KEY "ca.crt"
#define SG_ROOTDIST_ROOTS_LABEL "signet.dev/ca-roots"
#define SG_ROOTDIST_ROOTS_CONTROLLER "rootpub"
/* istiod's RA roots (--istiod-ra-root-secret; the namespace is istiod's,
 * --istiod-cert-namespace) */
#define SG_ROOTDIST_RA_SECRET "external-ca-cert"
#define SG_ROOTDIST_RA_CONTROLLER "istiodraroots"
#define SG_ROOTDIST_ROOT_MAX (512u << 10) /* bundle bytes (a ConfigMap or Secret holds at most 1 MiB; base64 4/3) */
#define SG_ROOTDIST_SELECTOR_MAX SG_KUBE_SELECTOR_MAX

typedef struct sg_rootdist sg_rootdist;

typedef struct sg_rootdist_options {
	sg_kube *kube;                  /* borrowed; must outlive the distributor */
	const char *namespace_selector; /* Kubernetes label selector; NULL or "": every namespace */
	const char *ns;                 /* one namespace only (then no selector); NULL or "": the selected ones */
	const char *name;               /* NULL: SG_ROOTDIST_NAME */
	const char *key;                /* NULL: SG_ROOTDIST_KEY */
	const char *label;              /* the label set on the ConfigMap; NULL: SG_ROOTDIST_LABEL */
	const char *label_value;        /* its value; NULL: SG_ROOTDIST_LABEL_VALUE */
	const char *controller;         /* the runtime's name, [a-z0-9-]; NULL: SG_ROOTDIST_CONTROLLER */
	bool secret;                    /* keep an Opaque Secret instead of a ConfigMap */
} sg_rootdist_options;

typedef struct sg_rootdist_stats {
	uint64_t creates;    /* objects created (an immutable one re-created counts here) */
	uint64_t updates;    /* objects replaced (PUT) */
	uint64_t unchanged;  /* reconciles that found the object correct */
	uint64_t skipped;    /* namespaces not selected, gone or Terminating */
	uint64_t rereads;    /* live GETs after a 409 (stale cache) or a vanished object */
	uint64_t errors;     /* failed reconciles (each retried with backoff) */
	uint64_t namespaces; /* selected namespaces known to the running informer */
	uint64_t queued;     /* namespaces waiting, including those backing off */
	uint64_t writes;     /* creates + updates */
} sg_rootdist_stats;

/* Creates a stopped distributor for the root bundle root_pem (len bytes of
 * PEM holding at least one certificate; copied). The selector is checked
 * against the Kubernetes label-selector grammar (key, !key, key=v, key==v,
 * key!=v, key in (..), key notin (..), key>n, key<n, comma-separated); ns
 * must be a namespace name (a DNS-1123 label) and excludes a selector
 * (one that selects everything, blanks included, counts as none); the
 * label a label key ([prefix/]name) and its value a non-empty label value;
 * the controller name as sg_ctrl_def's. SG_EINVAL names what is wrong.
 * Strings are copied. Caller frees with sg_rootdist_free. */
SG_API int sg_rootdist_new(sg_rootdist **out, const sg_rootdist_options *o, const char *root_pem,
                           size_t len) SG_MUST_CHECK;

/* Replaces the root bundle (copied; same rules as for new). When it
 * differs from the current one and the distributor runs, every selected
 * namespace is reconciled again. Any thread. */
SG_API int sg_rootdist_set_root(sg_rootdist *r, const char *root_pem, size_t len) SG_MUST_CHECK;

/* Counters since sg_rootdist_new (namespaces and queued: now). Any thread. */
SG_API void sg_rootdist_stats_get(sg_rootdist *r, sg_rootdist_stats *out);

/* The runtime's controller (borrowed): the daemon's table row, and how to
 * run the distributor. sg_ctrl_start (call it when this process leads)
 * begins from a fresh LIST, reconciles every selected namespace once and
 * follows events; it returns at once. sg_ctrl_stop (leadership lost, or
 * shutdown) waits for the worker's request in flight (bounded by the
 * client's request timeout) and the informers (about a second each) and
 * drops the queue and the caches: when it returns, this module makes no
 * more API calls; another start may follow. */
SG_API sg_ctrl *sg_rootdist_controller(sg_rootdist *r);

/* Stops and frees; accepts NULL. */
SG_API void sg_rootdist_free(sg_rootdist *r);

#endif
