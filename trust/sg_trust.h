/*
 * sg_trust: trust bundles. A controller for trust-manager's Bundle
 * (trust.cert-manager.io/v1alpha1, cluster-scoped) with its semantics, so
 * the Bundles a cluster already has keep working when signet-trust replaces
 * trust-manager, and without the defects its users hit.
 *
 * A Bundle names sources and a target:
 *   sources[]  each exactly one of: configMap / secret {name | selector,
 *              key | includeAllKeys} read from the trust namespace only;
 *              inLine (PEM text); useDefaultCAs (the default package).
 *   target     configMap and/or secret {key, metadata{labels,
 *              annotations}}, additionalFormats {jks, pkcs12}, and a
 *              namespaceSelector (absent: every namespace).
 * The bundle is the union of the sources' certificates, deduplicated by
 * SHA-256 of the DER, sorted by it, strict PEM (sg_certset.h), optionally
 * without expired and non-CA certificates. It is written to a ConfigMap
 * and/or Secret named after the Bundle in every namespace the selector
 * picks (never a Terminating one; only those of --target-namespaces when
 * set), by server-side apply with field manager "trust-manager", labelled
 * trust.cert-manager.io/bundle=<bundle>, annotated with
 * trust.cert-manager.io/hash (SHA-256 over the PEM, the JKS and PKCS#12
 * passwords and profile, and the target's annotations and labels in sorted
 * order: trust-manager#971 rewrote targets forever by hashing Go maps in
 * random order), controlled by the Bundle (ownerReference).
 *
 * A target is rewritten only when it needs it: not controlled by this
 * Bundle, wrong label or hash, or the set of data keys the "trust-manager"
 * manager owns (metadata.managedFields) differs from the expected one. An
 * edit by anyone else moves ownership of the edited key away, so content
 * drift is seen without caching any content: the target caches hold
 * metadata only. Deleted targets come back; targets in namespaces that stop
 * matching, or of a kind the Bundle no longer targets, lose the keys we
 * wrote (an apply of the label and owner only) and are deleted when nothing
 * else is left in them.
 *
 * Status: condition Synced with trust-manager's reasons and messages
 *   True  Synced                "Successfully synced Bundle to all namespaces" (or "... to
 *                               namespaces that match this label selector: <sel>", the
 *                               selector as Go prints it: requirements sorted by key;
 *                               with --target-namespaces "all allowed namespaces" and
 *                               "allowed namespaces that match ...")
 *   False SourceNotFound        "Bundle source was not found: ..." (no retry: a change of a
 *                               source or of the Bundle brings it back)
 *   False SourceBuildError      "Failed to build bundle sources: ..." (retried with backoff)
 *   False SecretTargetsDisabled "Bundle has Secret targets but the feature is disabled"
 *                               (judged after the sources, as trust-manager does)
 *   False InvalidSpec           what trust-manager's webhook refuses, found here since the
 *                               1.20 API server cannot run its CEL rules; nothing is written
 *   False SyncConfigMapTargetFailed, SyncSecretTargetFailed
 *                               "Failed to sync bundle <ConfigMap|Secret> to namespace \"<ns>\": ..."
 * with observedGeneration and status.defaultCAVersion (the default
 * package's id when used). A failure never touches existing targets. A
 * target no longer wanted that cannot be cleaned does not fail the Bundle
 * (trust-manager logs it and goes on; so does this, and counts it).
 * Status is written only when it changes, targets only when they need it,
 * Events only on a change of reason or message: a quiet cluster sees no
 * writes at all.
 *
 * It is a controller on the runtime (sg_ctrl.h) named "bundles", whose
 * field manager is "trust-manager". Watches: Bundles; Namespaces; the trust
 * namespace's ConfigMaps and Secrets (sources); ConfigMaps and (with Secret
 * targets enabled) Secrets labelled trust.cert-manager.io/bundle in every
 * namespace (targets, metadata only). Leader-only.
 *
 * Kubernetes RBAC: bundles get/list/watch, bundles/status patch,
 * bundles/finalizers update (blockOwnerDeletion); namespaces list/watch;
 * configmaps get/list/watch/create/patch/delete everywhere; secrets
 * get/list/watch in the trust namespace, and everywhere with
 * create/patch/delete when Secret targets are enabled; events create.
 */
#ifndef SG_TRUST_H
#define SG_TRUST_H

#include "sg_ctrl.h"
#include "sg_error.h"
#include "sg_kube.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_TRUST_GROUP "trust.cert-manager.io"
#define SG_TRUST_VERSION "v1alpha1"
#define SG_TRUST_RESOURCE "bundles"
#define SG_TRUST_KIND "Bundle"
#define SG_TRUST_LABEL "trust.cert-manager.io/bundle"
#define SG_TRUST_HASH "trust.cert-manager.io/hash"
#define SG_TRUST_FIELD_MANAGER "trust-manager"
#define SG_TRUST_TARGET_NAMESPACES_MAX 256
#define SG_TRUST_PACKAGE_MAX (4u << 20) /* bytes of a default package file */

/* ---- the default CA package ---- */

/* trust-manager's package file: a JSON object {"name", "bundle" (PEM),
 * "version"} in a file whose name ends in ".json". */
typedef struct sg_trust_package sg_trust_package;

/* Reads and checks a package: the file name, the JSON (at most
 * SG_TRUST_PACKAGE_MAX bytes), the three strings (name and version 1..128
 * printable bytes), and the bundle as strict PEM with at least one
 * certificate. SG_ENOTFOUND without the file, SG_EINVAL naming what is
 * wrong. Caller frees with sg_trust_package_free. */
SG_API int sg_trust_package_load(sg_trust_package **out, const char *path) SG_MUST_CHECK;
/* The same checks on len bytes already read; what names them in messages. */
SG_API int sg_trust_package_parse(sg_trust_package **out, const void *data, size_t len,
                                  const char *what) SG_MUST_CHECK;
SG_API void sg_trust_package_free(sg_trust_package *p);
/* "<name>-<version>-<hex of the first 8 bytes of SHA-256(bundle)>", as
 * trust-manager reports it in status.defaultCAVersion (borrowed). */
SG_API const char *sg_trust_package_id(const sg_trust_package *p);
/* The PEM bundle (borrowed) and its length. */
SG_API const char *sg_trust_package_bundle(const sg_trust_package *p, size_t *len);

/* The certificates of a PEM file of CAs, checked and normalized (strict
 * PEM, sorted, deduplicated) into *pem (caller frees) of *len bytes: a
 * package's bundle. SG_EINVAL names the file and what is wrong. */
SG_API int sg_trust_package_normalize(const char *pem_path, char **pem, size_t *len) SG_MUST_CHECK;
/* The same for len bytes of PEM text already read (at most
 * SG_CERTSET_PEM_MAX; need not be NUL-terminated), such as a ConfigMap's
 * value; what names them in messages. */
SG_API int sg_trust_package_normalize_pem(const char *text, size_t len, const char *what, char **pem,
                                          size_t *pem_len) SG_MUST_CHECK;
/* The package document {name, bundle, version} for a normalized bundle,
 * as text (caller frees). */
SG_API int sg_trust_package_json(const char *pem, size_t len, const char *name, const char *version,
                                 char **out) SG_MUST_CHECK;

/* Writes a package file from a PEM file of CAs (Debian's
 * /etc/ssl/certs/ca-certificates.crt): the certificates are checked and
 * normalized (sorted, deduplicated, strict PEM), then written atomically
 * to out_path (which must end in ".json"). */
SG_API int sg_trust_package_write(const char *pem_path, const char *name, const char *version,
                                  const char *out_path) SG_MUST_CHECK;

/* ---- the Bundle spec ---- */

/* Checks a Bundle (a JSON object as the API server returns it) as the
 * controller does before it reads any source: what trust-manager's CRD
 * and webhook refuse (the InvalidSpec condition). SG_OK, or SG_EINVAL with
 * the condition's message after its "Bundle is invalid: " prefix. */
SG_API int sg_trust_spec_check(const json_t *bundle) SG_MUST_CHECK;

/* ---- the controller ---- */

typedef struct sg_trust sg_trust;

typedef struct sg_trust_options {
	sg_kube *kube;                  /* borrowed; must outlive the controller */
	const char *trust_namespace;    /* NULL: "cert-manager" */
	const sg_trust_package *package; /* borrowed; NULL: useDefaultCAs fails (SourceNotFound) */
	bool secret_targets_enabled;
	bool filter_expired;
	bool filter_non_ca;
	/* Namespaces that may get targets (NULL/0: any); at most
	 * SG_TRUST_TARGET_NAMESPACES_MAX, names checked. */
	const char *const *target_namespaces;
	size_t ntarget_namespaces;
	unsigned workers; /* 0: 1 */
} sg_trust_options;

typedef struct sg_trust_stats {
	uint64_t synced;         /* reconciles that ended Synced=True */
	uint64_t not_synced;     /* reconciles that ended Synced=False (any reason) */
	uint64_t applies;        /* target writes (create or repair) */
	uint64_t cleanups;       /* targets stripped of our keys */
	uint64_t cleanup_failures; /* targets no longer wanted that could not be cleaned (logged) */
	uint64_t deletes;        /* targets deleted */
	uint64_t status_writes;  /* Bundle status writes */
	uint64_t errors;         /* failed reconciles (retried) */
	uint64_t bundles;        /* Bundles known now */
} sg_trust_stats;

/* Checks the options and creates the stopped controller. Caller frees with
 * sg_trust_free. */
SG_API int sg_trust_new(sg_trust **out, const sg_trust_options *o) SG_MUST_CHECK;
/* The runtime's controller (borrowed), for a table row or start/stop; its
 * metrics (sg_ctrl_metrics) are signet_trust_*, from the stats above. */
SG_API sg_ctrl *sg_trust_controller(sg_trust *t);
SG_API void sg_trust_stats_get(sg_trust *t, sg_trust_stats *out);
/* Stops and frees; accepts NULL. */
SG_API void sg_trust_free(sg_trust *t);

#endif
