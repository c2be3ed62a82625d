/*
 * sg_opr: what the operator's two reconcilers (IstioCSR -> signetd,
 * TrustManager -> signet-trust) share. Each reconciler decides *what* the
 * cluster should hold for its custom resource; this module knows *how* an
 * operator holds it:
 *
 *   labels       the anchor's six labels (app, app.kubernetes.io/name,
 *                instance, version, managed-by, part-of) after the user's
 *                own, plus an owner label naming the CR, by which every
 *                object the operator made is found again (deletion, event
 *                mapping);
 *   apply        one managed object: server-side apply with field manager
 *                "signet-operator" only when the live object (from the
 *                reconciler's informer cache) does not already hold it, an
 *                Event for each create ("Created") and each repair of drift
 *                or update ("Applied"), and a count of writes;
 *   finalizer    added with the first reconcile, removed once everything
 *                the operator made is deleted (user Secrets, issuers and
 *                the CA are never touched);
 *   operand      the Deployment's own state turned into the conditions
 *                Ready, Progressing and Degraded: Ready=True only when its
 *                observedGeneration is current and its available replicas
 *                reach the desired count; Degraded carries the operand's
 *                own failure (a container's waiting or terminated reason
 *                and message) from its pods that are not terminating.
 *
 * Ownership: every json_t passed in is borrowed; out parameters are the
 * caller's to decref. Threads: called from the reconcilers' workers; the
 * counters are atomic.
 */
#ifndef SG_OPR_H
#define SG_OPR_H

#include "sg_ctrl.h"
#include "sg_error.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SG_OPR_FIELD_MANAGER "signet-operator"
#define SG_OPR_GROUP "operator.openshift.io"
#define SG_OPR_VERSION "v1alpha1"
/* The label every object made for a CR carries: the namespace of an
 * IstioCSR (its one instance there is "default"; a label value holds 63
 * characters), "cluster" for the cluster-scoped TrustManager. */
#define SG_OPR_OWNER_LABEL "operator.signet.dev/owner"
/* The designs' values (istio-csr-controller.md, trust-manager-
 * controller.md), so selectors users wrote for cert-manager-operator's
 * objects keep matching; SG_OPR_OWNER_LABEL says the object is ours. */
#define SG_OPR_MANAGED_BY "cert-manager-operator"
#define SG_OPR_PART_OF "cert-manager-operator"

/* Counters of one reconciler, exported as metrics by the program. */
typedef struct sg_opr_stats {
	atomic_uint_fast64_t writes;   /* applies, patches and deletes made */
	atomic_uint_fast64_t created;  /* objects that did not exist */
	atomic_uint_fast64_t repaired; /* objects that existed and differed */
	atomic_uint_fast64_t deleted;  /* objects deleted (CR gone, or no longer wanted) */
} sg_opr_stats;

/* The labels of every object made for a CR: user labels (an object, may
 * be NULL) first, then the six defaults for app (e.g.
 * "cert-manager-istio-csr") and version, then the owner label. New
 * reference. */
SG_API json_t *sg_opr_labels(const json_t *user, const char *app, const char *version, const char *owner);

/* A controller ownerReference to cr (apiVersion operator.openshift.io/
 * v1alpha1, kind), for objects in cr's namespace. New reference. */
SG_API json_t *sg_opr_owner_ref(const json_t *cr, const char *kind);

/* Applies body (apiVersion, kind, metadata.name[, namespace] and the
 * fields the operator owns) unless live holds it; counts the write and
 * records an Event about cr. ref names the object. what: its kind for
 * messages ("Deployment"). */
SG_API int sg_opr_apply(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                        const json_t *body, const json_t *live) SG_MUST_CHECK;
/* As sg_opr_apply, for a body decided from one copy of the object, the
 * version rv (NULL: the object was absent), that must not replace anything
 * written since (a new key pair made because the copy's did not fit): a
 * create when rv is NULL (its fields then owned by the controller's
 * apply, as if applied: sg_kube_create_applied), otherwise an apply that
 * carries rv. Always
 * written: body differs from the copy. An object written since (a cache
 * behind the API server) refuses it with 409 Conflict or AlreadyExists:
 * SG_EBUSY, sg_kube_last_status()->code 409, counted as nothing and with
 * no ApplyFailed Event; the watch event of that write brings the next
 * pass, which decides on the newer copy. */
SG_API int sg_opr_apply_exact(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                              const json_t *body, const char *rv) SG_MUST_CHECK;

/* Deletes the object ref names (absent is fine), counting it, only while
 * its uid is uid (NULL or "": any): the copy the caller read and found its
 * own. An object of that name with another uid (made since, by another
 * owner: a handover between two instances) is left alone, logged, and
 * SG_OK returned. */
SG_API int sg_opr_delete_uid(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, const sg_kube_ref *ref, const char *what,
                             const char *uid) SG_MUST_CHECK;

/* Deletes every object of informer inf (a watch of one managed kind,
 * group/version/resource as in ref) that carries owner in the owner label,
 * except those named in keep ("ns/name" or "name" keys, may be NULL),
 * each conditional on the uid of the cached copy that carries the label
 * (sg_opr_delete_uid): a stale cache never deletes what another owner
 * has made under the same name since. Returns how many it deleted through
 * *n (may be NULL; conditional deletes that found another object do not
 * count). */
SG_API int sg_opr_delete_owned(sg_ctrl *c, sg_opr_stats *st, const json_t *cr, sg_kube_informer *inf,
                               const sg_kube_ref *ref, const char *owner, const char *const *keep, size_t nkeep,
                               size_t *n) SG_MUST_CHECK;

/* Whether cr carries finalizer. */
SG_API bool sg_opr_has_finalizer(const json_t *cr, const char *finalizer);
/* Adds (add true) or removes finalizer on cr by a merge patch that names
 * cr's resourceVersion (a concurrent change makes it fail with a
 * conflict, retried by the runtime). extra_annotations (may be NULL) are
 * merged into metadata.annotations in the same write. */
SG_API int sg_opr_set_finalizer(sg_ctrl *c, sg_opr_stats *st, const sg_kube_ref *ref, const json_t *cr,
                                const char *finalizer, bool add, const json_t *extra_annotations) SG_MUST_CHECK;

/* The operand's state from its Deployment (may be NULL: not made yet) and
 * the pods it selects (an array, may be NULL; pods being deleted, with a
 * metadata.deletionTimestamp, are passed over: a rollout's old pod or a
 * drained node's is no failure of the operand). */
typedef enum sg_opr_operand {
	SG_OPR_OPERAND_AVAILABLE,   /* current and every desired replica available */
	SG_OPR_OPERAND_PROGRESSING, /* rolling out, pods starting */
	SG_OPR_OPERAND_FAILING,     /* a pod's container fails (crash, image, config) */
} sg_opr_operand;

/* Decides the operand's state and a message (at most cap bytes) saying
 * why, e.g. "1 of 1 replicas available" or "pod x: container signetd:
 * CrashLoopBackOff: ...". generation-aware: a Deployment whose
 * observedGeneration is behind is still progressing. */
SG_API sg_opr_operand sg_opr_operand_state(const json_t *deployment, const json_t *pods, char *msg, size_t cap);

/* Builds the status conditions array for a reconcile: failed (an error
 * or refusal message, NULL when the objects were applied) or the
 * operand's state. reason_failed names a refusal ("InvalidSpec",
 * "MultipleInstances", "Failed"). New reference; generation goes into
 * observedGeneration of each. */
SG_API json_t *sg_opr_conditions(const char *failed, const char *reason_failed, sg_opr_operand st,
                                 const char *operand_msg, int64_t generation);

/* sg_ctrl_apply_status of cr (kind, ref naming it), counting a write
 * when one is made; *written (may be NULL) tells whether it was. */
SG_API int sg_opr_status(sg_ctrl *c, sg_opr_stats *st, const sg_kube_ref *ref, const char *kind, const json_t *cr,
                         const json_t *status, bool *written) SG_MUST_CHECK;

/* Registers the counters as signet_operator_<name>_{writes,created,
 * repaired,deleted}_total. */
SG_API int sg_opr_metrics(sg_opr_stats *st, const char *name, sg_metrics *reg) SG_MUST_CHECK;

#endif
