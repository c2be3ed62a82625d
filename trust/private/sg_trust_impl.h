/*
 * sg_trust_impl: what the files of sg_trust share and nobody else sees:
 * the controller's state (struct sg_trust), a Bundle's spec as read, what
 * a target must hold, and the functions one file of the controller calls
 * in another. Not installed, not public: on sg_trust's private include path
 * only (signet-trust and the webhook see sg_trust.h). The shared functions
 * carry a trust_ prefix, so that none of them can clash with another
 * layer's symbol at link time; the types keep their short names.
 *
 * The files, in the order of a reconcile: sg_trust.c, the controller (its
 * design comment explains the whole): which Bundles an event concerns, the
 * reconcile, start and stop; sg_trust_spec.c, a Bundle's spec read and
 * checked as trust-manager's webhook and CRD check it; sg_trust_sources.c,
 * the bundle built from the sources in the caches; sg_trust_targets.c,
 * what a target must hold and whether a cached one holds it;
 * sg_trust_writes.c, the writes (targets applied, cleaned and deleted, the
 * Bundle's status) and the records of our own writes the caches have not
 * shown yet. sg_trust_package.c, the default CA package, is used by the
 * controller and by signet-trust's package commands alike.
 */
#ifndef SG_TRUST_IMPL_H
#define SG_TRUST_IMPL_H

#include "sg_trust.h"

#include "sg_certset.h"
#include "sg_ctrl.h"
#include "sg_kube.h"
#include "sg_kube_selector.h"
#include "sg_names.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The controller's watches, by index in sg_trust_new's table. */
#define W_BUNDLES 0
#define W_NAMESPACES 1
#define W_SRC_CM 2
#define W_SRC_SECRET 3
#define W_TGT_CM 4
#define W_TGT_SECRET 5 /* only with Secret targets enabled */

#define SOURCES_MAX 100 /* sources of one Bundle */
#define MSG_MAX 2048    /* a condition message, a why */

/* ------------------------------------------------------------------ */
/* The default package (sg_trust_package.c)                           */

/* Messages quote what users wrote (JSON keys and values, a JSON parser's
 * view of broken input); they go to logs, Events and conditions, so
 * anything outside printable ASCII becomes '?'. */
void trust_printable_only(char *s);

/* ------------------------------------------------------------------ */
/* The controller's state (sg_trust.c)                                */

struct sg_trust {
	sg_ctrl *ctrl;
	sg_kube *kube;
	char trust_ns[SG_NAMES_LABEL_MAX + 1];
	const sg_trust_package *package;
	bool secrets, filter_expired, filter_non_ca;
	char **target_ns;
	size_t ntarget_ns;

	/* Bundle name -> {"cm": [names], "secret": [names], "cmsel": bool,
	 * "secretsel": bool}: what each Bundle reads, for the source map. */
	pthread_mutex_t refs_mu;
	json_t *refs;

	/* Our target writes the caches have not shown yet (see "own writes"):
	 * "<c|s>/<namespace>/<name>" -> {"rv": the resourceVersion of the
	 * object acted on, "" when there was none; "at": ms, monotonic}. */
	pthread_mutex_t pending_mu;
	json_t *pending;

	_Atomic uint64_t synced, not_synced, applies, cleanups, cleanup_failures, deletes, status_writes, errors;
};

/* ------------------------------------------------------------------ */
/* The spec (sg_trust_spec.c)                                         */

enum src_kind { SRC_CM, SRC_SECRET, SRC_INLINE, SRC_DEFAULT };

typedef struct src {
	enum src_kind kind;
	const char *name;      /* by name, or NULL */
	sg_kube_selector *sel; /* by selector, or NULL */
	const char *key;       /* NULL: includeAllKeys */
	const char *pem;       /* inLine */
	size_t pem_len;
} src;

typedef struct tgt {
	bool on;
	const char *key;
	const json_t *labels, *annotations; /* borrowed; may be NULL */
} tgt;

typedef struct spec {
	src srcs[SOURCES_MAX];
	size_t nsrcs;
	tgt cm, secret;
	const char *jks_key, *jks_pw;
	const char *p12_key, *p12_pw, *p12_profile;
	sg_certset_p12_profile profile;
	sg_kube_selector *ns_sel; /* NULL: every namespace */
	bool uses_default;
} spec;

void trust_spec_free(spec *s);
/* Reads bundle (named bname) into *s, refusing what trust-manager's
 * webhook and CRD refuse: false with why. *s is freed with
 * trust_spec_free either way. */
bool trust_parse_spec(const json_t *bundle, const char *bname, spec *s, char *why, size_t cap);

/* ------------------------------------------------------------------ */
/* Building the bundle (sg_trust_sources.c)                           */

typedef struct build {
	sg_certset *set;
	char msg[MSG_MAX];
	int rc; /* SG_ENOTFOUND: SourceNotFound; other < 0: SourceBuildError */
} build;

/* qsort's comparison of two C strings (pointers to them). */
int trust_cmp_json_str(const void *a, const void *b);
/* The spec's sources, read from the caches of c, into b->set; on failure
 * b->rc and b->msg say why (SG_ENOTFOUND: SourceNotFound). */
int trust_build_sources(sg_trust *t, sg_ctrl *c, const spec *s, build *b);

/* ------------------------------------------------------------------ */
/* Targets (sg_trust_targets.c)                                       */

/* What a target of one kind must hold. */
typedef struct want {
	const tgt *t;
	bool secret;
	char hash[65];
	const char *pem;
	size_t pem_len;
	/* lazily built, shared by every target written in this reconcile */
	uint8_t *jks, *p12;
	size_t jks_len, p12_len;
} want;

#define OWNED_MAX 8 /* data keys one manager may own in a target */

/* trust.cert-manager.io/hash of target x holding pem (see sg_trust.h). */
int trust_target_hash(const spec *s, const tgt *x, const char *pem, size_t len, char out[65]);
/* The controller ownerReference of obj, or NULL; whether it is the Bundle
 * of uid; whether it is a Bundle named bname (of any uid). */
const json_t *trust_controller_ref(const json_t *obj);
bool trust_controlled_by(const json_t *obj, const char *uid);
bool trust_controlled_by_bundle_named(const json_t *obj, const char *bname);
/* The data keys our field manager owns in obj (false: more than
 * OWNED_MAX); whether anyone else owns one. */
bool trust_owned_keys(const json_t *obj, bool secret, const char *keys[OWNED_MAX], size_t *n);
bool trust_others_own_data(const json_t *obj, bool secret);
/* Whether obj (a cached target, metadata only) is not what we would write:
 * trust-manager's needsUpdate. */
bool trust_needs_update(const json_t *obj, const spec *s, const want *w, const char *bname, const char *uid);
/* The apply intent of a target; empty: only the label and the owner. */
json_t *trust_target_body(const char *bname, const char *uid, const char *ns, const spec *s, want *w, bool empty);
sg_kube_ref trust_target_ref(bool secret, const char *ns, const char *name);
/* The extra formats of w, made once per reconcile (or taken from other). */
int trust_make_formats(const spec *s, sg_certset *set, want *w, want *other);

/* ------------------------------------------------------------------ */
/* Writes and own writes (sg_trust_writes.c)                          */

/* A pass asked for when a write's echo is due (see "own writes"). */
#define PENDING_RECHECK_MS 1000u

/* Forgets records of own writes past their time. */
void trust_pending_prune(sg_trust *t);
/* Whether cached (the cache's target ns/name, NULL: absent) is older than
 * our last write of it; drops the record when it is not. */
bool trust_pending_stale(sg_trust *t, bool secret, const char *ns, const char *name, const json_t *cached);
/* Applies target ns/bname of w when it needs it; *deferred when its cache
 * is behind our last write. */
int trust_sync_target(sg_trust *t, sg_ctrl *c, const char *bname, const char *uid, const char *ns, const spec *s,
                      sg_certset *set, want *w, want *other, bool *deferred);
/* Drops our keys from a target that should not exist; deletes it when
 * nothing is left. *deferred when obj turns out older than the object. */
int trust_cleanup_target(sg_trust *t, sg_ctrl *c, const json_t *obj, bool secret, const char *bname, const char *uid,
                         bool *deferred);
/* Deletes the targets of a Bundle that no longer exists. */
int trust_orphans(sg_trust *t, sg_ctrl *c, const char *bname, bool *deferred);
/* The Synced condition (and defaultCAVersion), written when it differs. */
int trust_set_status(sg_trust *t, sg_ctrl *c, const json_t *bundle, bool ok, const char *reason, const char *msg,
                     const char *default_id);

#endif
