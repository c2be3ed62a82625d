/*
 * sg_forward: RA mode. Instead of signing with the HSM, each workload CSR
 * that passed authentication and policy becomes a cert-manager
 * CertificateRequest for a cert-manager issuer named by the settings (any
 * issuer: Vault, a CA issuer, another external issuer), and the call is
 * answered with the certificate that issuer writes back. This is
 * istio-csr's behaviour, so an istio-csr deployment can switch to signet
 * and keep its CA.
 *
 * The request (cert-manager.io/v1, in the certificate namespace):
 *   metadata.name         "signet-<32 hex>", chosen here (so the answer can
 *                         be matched before the create returns)
 *   metadata.labels       signet.dev/forwarded-by: <this replica's id>
 *   metadata.annotations  istio.cert-manager.io/identities: <identity>, then
 *                         the additional annotations of the options (which,
 *                         as istio-csr's, replace one of the same key)
 *   spec                  {request: base64(CSR PEM), duration: "<ttl>s",
 *                         isCA: false, usages: [client auth, server auth],
 *                         issuerRef: {name, kind, group}}
 *
 * Waiting is one informer (list + watch) of this replica's requests (label
 * selector on the replica's id), never a poll per request. A request is
 * answered when its status.certificate appears (leaf first; it must chain
 * to the mesh roots given at creation, and the answer is leaf +
 * intermediates, to which the caller appends its root bundle); refused
 * when it turns Denied, Ready reason Failed, InvalidRequest, or is deleted
 * by someone else.
 *
 * Flow control: at most max_in_flight requests wait at once (more is
 * SG_EBUSY at once: the caller answers UNAVAILABLE); creates and deletes
 * run on a few worker threads of their own, so no caller thread waits on
 * the API server, and go through the client's QPS/burst limit. A request
 * ends with SG_ETIMEOUT at its deadline (the caller's, or timeout_ms when
 * the caller gave none): nothing waits forever for an issuer that never
 * answers. A request whose caller went away (cancelled) is dropped at the
 * next check (at most every 100 ms).
 *
 * Every request created is deleted once it is answered, refused or timed
 * out, unless preserve is set (a debugging aid: requests then pile up).
 * What a crash leaves behind is swept (unless preserve): shortly after
 * start and then every sweep_interval_ms, requests labelled with this
 * replica's id created before this forwarder (an earlier run with the same
 * id; creation seconds count, so one made in the same second as the
 * forwarder waits for the next run) and other replicas' requests older
 * than orphan_age_s are deleted.
 *
 * Threads and ownership: submit may be called from any thread; done is
 * called exactly once per accepted submit, on one of the module's threads,
 * never from inside submit. The request's bytes are copied. sg_forward_free
 * fails every waiting request with SG_EBUSY ("shutting down"), calls their
 * done, and joins its threads.
 *
 * Kubernetes RBAC: cert-manager.io certificaterequests create, get, list,
 * watch, delete in the certificate namespace.
 */
#ifndef SG_FORWARD_H
#define SG_FORWARD_H

#include "sg_error.h"
#include "sg_kube.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_FORWARD_MAX_IN_FLIGHT 1000
#define SG_FORWARD_TIMEOUT_MS 30000
#define SG_FORWARD_WORKERS 4
#define SG_FORWARD_IDENTITY_ANNOTATION "istio.cert-manager.io/identities"
#define SG_FORWARD_LABEL "signet.dev/forwarded-by"
#define SG_FORWARD_ORPHAN_AGE 3600      /* seconds */
#define SG_FORWARD_SWEEP_MS (300u * 1000u)

typedef struct sg_forward sg_forward;

typedef struct sg_forward_options {
	sg_kube *kube;            /* borrowed; its QPS/burst limit all calls */
	const char *ns;           /* where requests are created */
	const char *issuer_name;  /* issuerRef */
	const char *issuer_kind;  /* "Issuer" (also for NULL or ""), "ClusterIssuer", or an external kind */
	const char *issuer_group; /* "cert-manager.io" (also for NULL or ""), or an external issuer's group */
	const char *roots_pem;    /* the mesh roots every answer must chain to (copied) */
	size_t roots_len;
	bool preserve;            /* keep requests after they are answered */
	unsigned max_in_flight;   /* 0: SG_FORWARD_MAX_IN_FLIGHT */
	unsigned timeout_ms;      /* for requests without a deadline; 0: SG_FORWARD_TIMEOUT_MS */
	unsigned workers;         /* create/delete threads; 0: SG_FORWARD_WORKERS */
	const char *replica_id;   /* the label value; NULL: random. A stable one (the pod's
	                           * name) lets a restarted replica remove what it left */
	/* Requests of other replicas older than this are removed as left
	 * behind (their replica crashed before deleting them); 0:
	 * SG_FORWARD_ORPHAN_AGE. Must exceed the longest wait of any replica. */
	unsigned orphan_age_s;
	unsigned sweep_interval_ms; /* how often to look for them; 0: SG_FORWARD_SWEEP_MS */
	/* istio-csr's --certificate-request-additional-annotations, as its
	 * text: "key=value[,key=value...]" (sg_forward_annotations_check);
	 * NULL or "": none. */
	const char *additional_annotations;
} sg_forward_options;

typedef struct sg_forward_request {
	const char *csr_pem; /* copied */
	size_t csr_len;
	const char *identity; /* the annotation's value, e.g. the SPIFFE URI (copied) */
	int64_t ttl;          /* seconds; becomes spec.duration */
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: now + timeout_ms */
	/* Asked now and then while waiting: true ends the request (SG_ETIMEOUT,
	 * "the call ended") and deletes it. NULL: never. Quick, any thread. */
	bool (*cancelled)(void *arg);
	void *cancel_arg;
} sg_forward_request;

/* On success chain_pem (len bytes, NUL-terminated) is the leaf and its
 * intermediates as PEM, valid during the call (each certificate re-armoured
 * from the DER the issuer wrote; a self-signed root after the leaf is left
 * out), and err is NULL; the leaf's serial and validity are for the caller
 * to read (sg_x509_bundle_parse, sg_x509_get_facts) if it logs them. On
 * failure chain_pem is NULL, len 0, and err (valid during the call, also
 * this thread's sg_error_last) says why: SG_EDENIED (denied, failed,
 * invalid: the issuer's message; deleted by someone else), SG_ETIMEOUT
 * (deadline, cancelled), SG_EBUSY (API server unreachable or refusing,
 * shutting down), SG_EPROTO (the certificate does not parse, chain to the
 * mesh roots, or hold the CSR's key). */
typedef void (*sg_forward_done_fn)(int rc, const char *chain_pem, size_t len, const sg_error *err, void *arg);

/* Checks the options and starts the informer and workers (it does not wait
 * for the first list). SG_EINVAL for a missing client, namespace or
 * issuer name, names that are not valid Kubernetes names, a replica id
 * that is not a label value, roots that do not parse (sg_x509_bundle_parse),
 * additional annotations sg_forward_annotations_check refuses, or limits
 * out of range. Caller frees with sg_forward_free. */
SG_API int sg_forward_new(sg_forward **out, const sg_forward_options *o) SG_MUST_CHECK;

/* Whether text is a valid additional-annotations setting, read as
 * istio-csr reads its flag (pflag's StringToString: with one '=' a single
 * pair, else one CSV record of key=value fields; apimachinery's annotation
 * validation: keys qualified names, keys and values at most 256 KiB).
 * NULL or "" is valid (none). SG_EINVAL naming the setting and the fault. */
SG_API int sg_forward_annotations_check(const char *text) SG_MUST_CHECK;

/* Queues one request. SG_OK: done will be called exactly once, later, on
 * another thread. SG_EBUSY: max_in_flight requests wait already, or the
 * module is shutting down. SG_EINVAL: the CSR does not decode or parse
 * (sg_csr_decode, sg_csr_parse; its signature is not checked here), the
 * identity is missing, longer than 4096 bytes or not printable ASCII, or
 * ttl is not positive. done is not called on any error. */
SG_API int sg_forward_submit(sg_forward *f, const sg_forward_request *r, sg_forward_done_fn done, void *arg)
	SG_MUST_CHECK;

/* Replaces the mesh roots answers must chain to (copied). Any thread. */
SG_API int sg_forward_set_roots(sg_forward *f, const char *pem, size_t len) SG_MUST_CHECK;

typedef struct sg_forward_stats {
	uint64_t submitted;  /* accepted */
	uint64_t rejected;   /* refused: too many in flight */
	uint64_t issued;     /* answered with a certificate */
	uint64_t refused;    /* denied, failed, invalid or deleted by someone else */
	uint64_t timeouts;   /* deadline passed or caller gone */
	uint64_t errors;     /* API errors, bad certificates, shutting down */
	uint64_t in_flight;  /* waiting now */
	uint64_t creates, deletes, api_errors; /* API calls made, and those that failed */
	uint64_t swept;                        /* requests left behind (by a crash) and removed */
	uint64_t api_calls;                    /* creates + deletes */
} sg_forward_stats;

SG_API void sg_forward_stats_get(sg_forward *f, sg_forward_stats *out);

/* Whether the informer has listed once (readiness). */
SG_API bool sg_forward_ready(sg_forward *f);

/* Fails what waits (each done called once, SG_EBUSY "shutting down"),
 * deletes their requests best-effort (about 5 s at most, plus one call in
 * flight), joins the threads and frees. No submit may run concurrently or
 * after. Accepts NULL. */
SG_API void sg_forward_free(sg_forward *f);

#endif
