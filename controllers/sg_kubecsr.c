/*
 * The Kubernetes CSR signer (see sg_kubecsr.h for the contract), a
 * controller on the runtime (sg_ctrl.h).
 *
 * Keys. A CSR's key is its name (CSRs are cluster-scoped). An issuer
 * change is queued as "signetclusterissuer/<name>": no object name holds a
 * '/', so the two never meet. The issuer's key is handled on a worker,
 * where both informers surely exist, by queueing every CSR that waits for
 * that issuer (the issuers' informer thread must not read the CSRs'
 * informer, which the runtime frees first at stop). Issuers change
 * rarely; the CSR informer's list is walked then, never per CSR.
 *
 * Filtering. The CSR watch sees every CSR of the cluster (kubelets',
 * other signers'); its map queues only those whose signerName is ours
 * (signet's two prefixes and the aliases) and counts the others, so a foreign CSR costs no reconcile and is never
 * written to: the reconcile looks only at what the map let through, and
 * checks the signerName again itself.
 *
 * One pass over a CSR reads the informer's cache and decides:
 *
 *   gone, not approved, denied, failed, certificate there -> nothing
 *   issuer missing / not Ready / bad spec / unknown CA    -> wait
 *   the request cannot be signed (permanent)              -> Failed condition
 *   otherwise                                             -> sign, write
 *
 * Writes are PUTs of the status subresource of a copy of the object the
 * decision was made on, resourceVersion included: a cache behind the
 * server costs a 409 and one live GET, never a blind overwrite (rootdist's
 * pattern). After a 409 the live object decides again whether anything is
 * wanted; if so, the certificate already signed is written to it (signing
 * again would waste an HSM operation and could hand out two certificates
 * for one CSR). Our own writes come back as watch events and find the CSR
 * done, so nothing loops.
 *
 * Signing waits for the pool on the worker: the runtime's queue is the
 * backlog, the pool's bounded queue the backpressure (a full pool is
 * SG_EBUSY, retried with the key's backoff). The number of workers
 * (SG_KUBECSR_WORKERS unless told) bounds how many signatures this
 * controller has in flight.
 *
 * Events are written with typed copies of the informer's objects (which
 * carry no apiVersion or kind), so no discovery request is needed.
 */
#include "sg_kubecsr.h"

#include "sg_clock.h"
#include "sg_goduration.h"
#include "sg_guard.h"
#include "sg_kube_informer.h"
#include "sg_kubekeep.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_signetissuer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CSR_WATCH 0
#define ISSUER_WATCH 1
#define ISSUER_KEY "signetclusterissuer/" /* + an issuer's name: no object name has a '/' */
#define CSR_GROUP "certificates.k8s.io"
#define CSR_VERSION "v1"
#define CSR_RESOURCE "certificatesigningrequests"
#define CSR_KIND "CertificateSigningRequest"
#define WRITE_ATTEMPTS 5 /* conflicts answered by re-reading before we back off */
#define WHY_MAX 512
#define UID_MAX 64

struct sg_kubecsr {
	sg_kube *kube;
	sg_ctrl *ctrl;
	const sg_kubesign_ca *cas;
	size_t ncas;
	struct alias {
		char *name;   /* a signerName */
		char *issuer; /* the SignetClusterIssuer that serves it */
	} aliases[SG_KUBECSR_ALIASES_MAX];
	size_t naliases;
	sg_kubekeep *keep; /* signed, not yet written (its own lock) */

	pthread_mutex_t mu; /* the fields below */
	sg_kubecsr_stats stats;
	char warned[SG_KUBECSR_WARNED_MAX][UID_MAX]; /* CSRs told IssuerNotReady (a ring) */
	size_t warned_next;
	char written[SG_KUBECSR_WRITTEN_MAX][UID_MAX]; /* CSRs whose certificate we wrote (a ring) */
	size_t written_next;
};

typedef enum outcome {
	OUT_NONE, /* nothing counted: stopping, or the CSR changed under us (its event re-queues it) */
	OUT_ISSUED,
	OUT_FAILED,
	OUT_WAITING,
	OUT_SKIPPED,
	OUT_LOST,
} outcome;

/* ---- reading a CSR ---- */

typedef enum signer_kind {
	SIGNER_FOREIGN,    /* another signer's: never touched */
	SIGNER_CLUSTER,    /* a SignetClusterIssuer signs it (by prefix or alias) */
	SIGNER_NAMESPACED, /* signetissuers.signet.dev/...: Failed once approved */
} signer_kind;

static const char *signer_name(const json_t *csr)
{
	return json_string_value(json_object_get(json_object_get(csr, "spec"), "signerName"));
}

/* Whose csr is, and for SIGNER_CLUSTER the issuer that signs it. */
static signer_kind signer_of(const sg_kubecsr *k, const json_t *csr, char issuer[SG_KUBE_NAME_MAX + 1])
{
	const char *signer = signer_name(csr);
	if (!signer)
		return SIGNER_FOREIGN;
	size_t plen = strlen(SG_KUBECSR_SIGNER_PREFIX);
	if (strncmp(signer, SG_KUBECSR_SIGNER_PREFIX, plen) == 0) {
		const char *name = signer + plen;
		size_t n = strlen(name);
		if (!sg_names_dns_subdomain(name, n))
			return SIGNER_FOREIGN; /* no issuer is called so (the API server refuses such names) */
		memcpy(issuer, name, n + 1);
		return SIGNER_CLUSTER;
	}
	if (strncmp(signer, SG_KUBECSR_NAMESPACED_PREFIX, strlen(SG_KUBECSR_NAMESPACED_PREFIX)) == 0)
		return SIGNER_NAMESPACED;
	for (size_t i = 0; i < k->naliases; i++) {
		if (strcmp(signer, k->aliases[i].name) == 0) {
			snprintf(issuer, SG_KUBE_NAME_MAX + 1, "%s", k->aliases[i].issuer);
			return SIGNER_CLUSTER;
		}
	}
	return SIGNER_FOREIGN;
}

/* Whether csr has a condition of type whose status is "True" (strict:
 * anything else is not an approval) or, with !strict, anything but
 * "False" (a Denied or Failed condition of unclear status counts: fail
 * closed). Every condition of the type is looked at. */
static bool has_condition(const json_t *csr, const char *type, bool strict)
{
	size_t i;
	const json_t *c;
	json_array_foreach(json_object_get(json_object_get(csr, "status"), "conditions"), i, c)
	{
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *s = json_string_value(json_object_get(c, "status"));
		if (!t || strcmp(t, type) != 0)
			continue;
		if (strict ? s && strcmp(s, "True") == 0 : !s || strcmp(s, "False") != 0)
			return true;
	}
	return false;
}

static bool has_certificate(const json_t *csr)
{
	const json_t *v = json_object_get(json_object_get(csr, "status"), "certificate");
	return v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0);
}

/* The one state in which a CSR of ours is signed. */
static bool wants_signature(const json_t *csr)
{
	return has_condition(csr, "Approved", true) && !has_condition(csr, "Denied", false) &&
	       !has_condition(csr, "Failed", false) && !has_certificate(csr);
}

static const char *annotation(const json_t *csr, const char *key)
{
	return json_string_value(
	    json_object_get(json_object_get(json_object_get(csr, "metadata"), "annotations"), key));
}

/* What the request asks for, as far as the issuer lets it. */
typedef struct request {
	char *pem; /* owned: the CSR */
	size_t len;
	int64_t asked;    /* seconds; 0: none */
	int64_t duration; /* asked or the default, brought into the issuer's range */
	bool is_ca;
	uint32_t ku, eku;
} request;

static void request_clear(request *r)
{
	free(r->pem);
	memset(r, 0, sizeof(*r));
}

/* Replaces this thread's error with code and "<prefix><its message>"
 * (the detail is copied first: sg_error_set writes where it reads). */
static int prefixed(int code, const char *prefix)
{
	char msg[SG_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sg_error_last()->msg);
	return sg_error_set(code, "%s%s", prefix, msg);
}

/* cert-manager's precedence: the annotation whenever it is there (its
 * presence, not its value, decides: an empty one is a parse error there
 * too), then the field. An annotation that is there but not a string
 * (the API server never serves one) is treated as a bad value. */
int sg_kubecsr_duration(const json_t *csr, int64_t *out)
{
	*out = 0;
	const json_t *ann = json_object_get(json_object_get(json_object_get(csr, "metadata"), "annotations"),
	                                    SG_KUBECSR_ANNOTATION_DURATION);
	if (ann) {
		const char *d = json_string_value(ann);
		SG_ENSURE(d, SG_EINVAL, "annotation " SG_KUBECSR_ANNOTATION_DURATION ": not a string");
		if (sg_goduration_parse(d, out) != SG_OK)
			return prefixed(SG_EINVAL, "annotation " SG_KUBECSR_ANNOTATION_DURATION ": ");
		return SG_OK;
	}
	const json_t *exp = json_object_get(json_object_get(csr, "spec"), "expirationSeconds");
	if (json_is_integer(exp) && json_integer_value(exp) > 0)
		*out = (int64_t)json_integer_value(exp);
	return SG_OK;
}

/* Reads the request; an error here is the request's fault (permanent). */
static int read_request(const json_t *csr, const char *issuer, const sg_signetissuer_spec *spec, request *r)
{
	memset(r, 0, sizeof(*r));
	const char *ca = annotation(csr, SG_KUBECSR_ANNOTATION_IS_CA);
	r->is_ca = ca && strcmp(ca, "true") == 0;
	SG_ENSURE(!r->is_ca || spec->allow_ca, SG_EDENIED,
	          "the CSR asks for a CA certificate (annotation %s) but SignetClusterIssuer %s does not allow CA "
	          "certificates (spec.allowCA)",
	          SG_KUBECSR_ANNOTATION_IS_CA, issuer);
	/* A Kubernetes signer may issue shorter than asked (and the API has
	 * no way to refuse a duration short of failing the CSR). */
	SG_TRY(sg_kubecsr_duration(csr, &r->asked));
	r->duration = sg_signetissuer_duration(spec, r->asked);
	const json_t *s = json_object_get(csr, "spec");
	if (sg_kubesign_usages(json_object_get(s, "usages"), r->is_ca, 0, 0, &r->ku, &r->eku) != SG_OK)
		return prefixed(SG_EINVAL, "spec.usages: ");
	if (sg_kubesign_bytes_field(s, "request", SG_KUBESIGN_REQUEST_MAX, &r->pem, &r->len) != SG_OK)
		return prefixed(SG_EINVAL, "spec.");
	return SG_OK;
}

/* ---- counters and Events ---- */

static void count(sg_kubecsr *k, uint64_t *counter)
{
	pthread_mutex_lock(&k->mu);
	(*counter)++;
	pthread_mutex_unlock(&k->mu);
}

/* A shallow copy of an informer's object with its apiVersion and kind. */
static json_t *typed(const json_t *csr)
{
	json_t *t = json_copy((json_t *)csr);
	if (t && (json_object_set_new(t, "apiVersion", json_string(CSR_GROUP "/" CSR_VERSION)) != 0 ||
	          json_object_set_new(t, "kind", json_string(CSR_KIND)) != 0)) {
		json_decref(t);
		t = NULL;
	}
	return t;
}

static void event(sg_kubecsr *k, const json_t *csr, const char *type, const char *reason, const char *msg)
{
	if (sg_ctrl_stopping(k->ctrl))
		return;
	json_t *t = typed(csr);
	if (t)
		sg_ctrl_event(k->ctrl, t, type, reason, "%s", msg);
	json_decref(t);
}

/* True the first time (in the remembered window) csr waits for its issuer. */
static bool first_wait(sg_kubecsr *k, const json_t *csr)
{
	const char *uid = sg_kube_meta_str(csr, "uid");
	if (!uid || strlen(uid) >= UID_MAX)
		uid = sg_kube_meta_str(csr, "name");
	if (!uid || strlen(uid) >= UID_MAX)
		return false;
	bool first = true;
	pthread_mutex_lock(&k->mu);
	for (size_t i = 0; i < SG_KUBECSR_WARNED_MAX && first; i++)
		first = strcmp(k->warned[i], uid) != 0;
	if (first) {
		snprintf(k->warned[k->warned_next], UID_MAX, "%s", uid);
		k->warned_next = (k->warned_next + 1) % SG_KUBECSR_WARNED_MAX;
	}
	pthread_mutex_unlock(&k->mu);
	return first;
}

/* ---- our own writes, until the cache shows them ---- */

/* The slot of uid in the ring of written CSRs, or -1. Under k->mu. */
static long written_slot(const sg_kubecsr *k, const char *uid)
{
	for (size_t i = 0; i < SG_KUBECSR_WRITTEN_MAX; i++)
		if (strcmp(k->written[i], uid) == 0)
			return (long)i;
	return -1;
}

static void remember_written(sg_kubecsr *k, const char *uid)
{
	if (!uid || !*uid || strlen(uid) >= UID_MAX)
		return;
	pthread_mutex_lock(&k->mu);
	if (written_slot(k, uid) < 0) {
		snprintf(k->written[k->written_next], UID_MAX, "%s", uid);
		k->written_next = (k->written_next + 1) % SG_KUBECSR_WRITTEN_MAX;
	}
	pthread_mutex_unlock(&k->mu);
}

/* True when we wrote csr's certificate; done: the cache shows it now, so
 * the entry is let go. */
static bool written_by_us(sg_kubecsr *k, const json_t *csr, bool done)
{
	const char *uid = sg_kube_meta_str(csr, "uid");
	if (!uid || !*uid || strlen(uid) >= UID_MAX)
		return false;
	pthread_mutex_lock(&k->mu);
	long i = written_slot(k, uid);
	if (i >= 0 && done)
		k->written[i][0] = '\0';
	pthread_mutex_unlock(&k->mu);
	return i >= 0;
}

/* ---- status writes ---- */

static void rfc3339_now(char out[32])
{
	if (!sg_clock_rfc3339(out, 32, sg_wall_seconds()))
		snprintf(out, 32, "1970-01-01T00:00:00Z");
}

/* What a status write puts in: a certificate, or the Failed condition. */
typedef struct status_write {
	const char *certificate; /* base64; NULL: a failure */
	const char *message;     /* the failure's */
} status_write;

/* csr (from the cache or a live GET) with w applied, for a PUT of its
 * status: its resourceVersion makes the write conditional. */
static json_t *status_body(const json_t *csr, const status_write *w)
{
	json_t *body = json_deep_copy(csr);
	if (!body || json_object_set_new(body, "apiVersion", json_string(CSR_GROUP "/" CSR_VERSION)) != 0 ||
	    json_object_set_new(body, "kind", json_string(CSR_KIND)) != 0)
		goto fail;
	json_t *status = json_object_get(body, "status");
	if (!json_is_object(status)) {
		status = json_object();
		if (json_object_set_new(body, "status", status) != 0)
			goto fail;
	}
	if (w->certificate) {
		if (json_object_set_new(status, "certificate", json_string(w->certificate)) != 0)
			goto fail;
		return body;
	}
	json_t *conds = json_object_get(status, "conditions");
	if (!json_is_array(conds)) {
		conds = json_array();
		if (json_object_set_new(status, "conditions", conds) != 0)
			goto fail;
	}
	char now[32];
	rfc3339_now(now);
	json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "Failed", "status", "True", "reason",
	                      SG_KUBECSR_FAILED_REASON, "message", w->message, "lastUpdateTime", now,
	                      "lastTransitionTime", now);
	if (!c)
		goto fail;
	/* One condition per type: a Failed=False someone left is replaced. */
	size_t i;
	json_t *old;
	json_array_foreach(conds, i, old)
	{
		const char *t = json_string_value(json_object_get(old, "type"));
		if (t && strcmp(t, "Failed") == 0) {
			if (json_array_set_new(conds, i, c) != 0)
				goto fail;
			return body;
		}
	}
	if (json_array_append_new(conds, c) != 0)
		goto fail;
	return body;
fail:
	json_decref(body);
	return NULL;
}

/* Writes w into the CSR's status; *csr is the object the decision was
 * made on, replaced by the live one after a conflict. *out: OUT_NONE when
 * stopping, done_out when written, OUT_SKIPPED when the CSR is gone, and
 * lost_out when it turned out done (or no longer wanting a signature)
 * before our write, or when the name now holds another CSR (deleted and
 * made again since the decision: w was made for the first one, and the
 * new one is decided on its own event). */
static int write_status(sg_kubecsr *k, const char *name, json_t **csr, const status_write *w, outcome done_out,
                        outcome lost_out, outcome *out)
{
	sg_kube_ref ref = {.group = CSR_GROUP,
	                   .version = CSR_VERSION,
	                   .resource = CSR_RESOURCE,
	                   .name = name,
	                   .subresource = "status"};
	*out = OUT_NONE;
	char uid[UID_MAX];
	const char *u = sg_kube_meta_str(*csr, "uid");
	SG_ENSURE(u && strlen(u) < sizeof(uid), SG_EINTERNAL, "kubecsr: CertificateSigningRequest %s has no usable uid",
	          name);
	memcpy(uid, u, strlen(u) + 1);
	for (int attempt = 0; attempt < WRITE_ATTEMPTS; attempt++) {
		if (sg_ctrl_stopping(k->ctrl))
			return SG_OK;
		json_t *body = status_body(*csr, w);
		SG_ENSURE(body, SG_EINTERNAL, "kubecsr: out of memory");
		int rc = sg_kube_update(k->kube, &ref, body, NULL);
		json_decref(body);
		if (rc == SG_OK) {
			*out = done_out;
			return SG_OK;
		}
		if (rc == SG_ENOTFOUND) {
			*out = OUT_SKIPPED;
			return SG_OK;
		}
		if (!sg_kube_conflict(rc))
			return rc;
		/* Our cache is behind: the live object decides. */
		count(k, &k->stats.rereads);
		sg_kube_ref live = ref;
		live.subresource = NULL;
		json_decref(*csr);
		*csr = NULL;
		rc = sg_kube_get(k->kube, &live, csr);
		if (rc == SG_ENOTFOUND) {
			*out = OUT_SKIPPED;
			return SG_OK;
		}
		SG_TRY(rc);
		const char *live_uid = sg_kube_meta_str(*csr, "uid");
		if (!live_uid || strcmp(live_uid, uid) != 0) {
			*out = lost_out;
			return SG_OK;
		}
		if (w->certificate && has_certificate(*csr)) {
			/* Ours, if it is the very chain we sent: the write took and
			 * its answer was lost (a connection cut after the API server
			 * committed it). */
			const char *live_cert =
			    json_string_value(json_object_get(json_object_get(*csr, "status"), "certificate"));
			*out = live_cert && strcmp(live_cert, w->certificate) == 0 ? done_out : lost_out;
			return SG_OK;
		}
		if (!wants_signature(*csr)) {
			*out = lost_out;
			return SG_OK;
		}
	}
	SG_BAIL(SG_EBUSY, "kubecsr: CertificateSigningRequest %s kept changing under us (%d attempts)", name,
	        WRITE_ATTEMPTS);
}

/* ---- one CSR ---- */

static int fail_csr(sg_kubecsr *k, const char *name, json_t **csr, const char *why, outcome *out)
{
	status_write w = {.message = why};
	SG_TRY(write_status(k, name, csr, &w, OUT_FAILED, OUT_SKIPPED, out));
	if (*out == OUT_FAILED) {
		event(k, *csr, "Warning", "Failed", why);
		sg_log(SG_LOG_WARN, "kubecsr: CertificateSigningRequest failed", SG_F_STR("csr", name),
		       SG_F_STR("error", why), SG_F_END);
	}
	return SG_OK;
}

/* Checks the issuer; false with why when the CSR must wait for it. */
static bool issuer_usable(sg_kubecsr *k, const char *issuer, sg_signetissuer_spec *spec, const sg_kubesign_ca **ca,
                          char *why, size_t cap)
{
	json_t *iss = sg_kube_informer_get(sg_ctrl_informer(k->ctrl, ISSUER_WATCH), NULL, issuer);
	bool ok = false;
	char ready[WHY_MAX];
	if (!iss)
		snprintf(why, cap, "SignetClusterIssuer %s not found. Waiting for it to be created.", issuer);
	else if (!sg_signetissuer_ready(iss, ready, sizeof(ready)))
		snprintf(why, cap, "SignetClusterIssuer %.64s: %.400s", issuer, ready);
	else if (sg_signetissuer_spec_parse(iss, spec) != SG_OK)
		snprintf(why, cap, "SignetClusterIssuer %.64s: %.400s", issuer, sg_error_last()->msg);
	else if (!(*ca = sg_kubesign_ca_find(k->cas, k->ncas, spec->ca_name)))
		snprintf(why, cap, "SignetClusterIssuer %s names CA \"%s\", which signetd does not have", issuer,
		         spec->ca_name);
	else
		ok = true;
	json_decref(iss);
	return ok;
}

/* The cache still holds the object the decision was made on. */
static bool unchanged(sg_kubecsr *k, const char *name, const json_t *csr)
{
	json_t *now = sg_kube_informer_get(sg_ctrl_informer(k->ctrl, CSR_WATCH), NULL, name);
	const char *a = sg_kube_meta_str(csr, "resourceVersion"), *b = sg_kube_meta_str(now, "resourceVersion");
	bool same = a && b && strcmp(a, b) == 0;
	json_decref(now);
	return same;
}

static int sign_csr(sg_kubecsr *k, const char *name, const char *issuer, json_t **csr, outcome *out)
{
	sg_signetissuer_spec spec;
	const sg_kubesign_ca *ca = NULL;
	char why[WHY_MAX];
	if (!issuer_usable(k, issuer, &spec, &ca, why, sizeof(why))) {
		*out = OUT_WAITING;
		if (first_wait(k, *csr))
			event(k, *csr, "Warning", "IssuerNotReady", why);
		return SG_OK;
	}
	request r;
	int rc = read_request(*csr, issuer, &spec, &r);
	if (rc < 0) {
		request_clear(&r);
		char msg[SG_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sg_error_last()->msg);
		return fail_csr(k, name, csr, msg, out);
	}
	/* Exactly once: nothing changed since the decision (a change brings
	 * the CSR back through its event). */
	*out = OUT_NONE;
	if (!unchanged(k, name, *csr) || sg_ctrl_stopping(k->ctrl)) {
		request_clear(&r);
		return SG_OK;
	}
	int64_t r_asked = r.asked, r_duration = r.duration; /* for the Event, after r is cleared */
	sg_kubesign_request req = {
	    .csr_pem = r.pem,
	    .csr_len = r.len,
	    .duration = r.duration,
	    .is_ca = r.is_ca,
	    .key_usage = r.ku,
	    .ext_key_usage = r.eku,
	    .csr_must_match = false,
	    .deadline_ns = sg_now_ns() + SG_KUBECSR_SIGN_TIMEOUT_MS * 1000000ull,
	};
	/* Exactly once, the other half: a certificate signed before whose
	 * write failed is written now, not signed again. */
	const char *uid = sg_kube_meta_str(*csr, "uid");
	json_int_t gen = json_integer_value(json_object_get(json_object_get(*csr, "metadata"), "generation"));
	char kept_uid[SG_KUBEKEEP_UID_MAX + 1];
	snprintf(kept_uid, sizeof(kept_uid), "%s", uid ? uid : "");
	sg_kubesign_result res;
	bool reused = uid && sg_kubekeep_get(k->keep, uid, gen, &res);
	rc = reused ? SG_OK : sg_kubesign_issue(ca, &req, &res);
	request_clear(&r);
	if (rc < 0 && sg_kubesign_permanent(rc)) {
		char msg[SG_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sg_error_last()->msg);
		return fail_csr(k, name, csr, msg, out);
	}
	SG_TRY(rc); /* retryable: the key's backoff */
	if (!reused) {
		count(k, &k->stats.signatures);
		if (sg_kubekeep_put(k->keep, name, uid, gen, &res) != SG_OK)
			sg_log(SG_LOG_WARN, "kubecsr: a signed certificate is not kept for a retry",
			       SG_F_STR("csr", name), SG_F_STR("error", sg_error_last()->msg), SG_F_END);
	}
	char *b64 = NULL;
	rc = sg_kubesign_base64(res.chain, strlen(res.chain), &b64);
	status_write w = {.certificate = b64};
	if (rc == SG_OK)
		rc = write_status(k, name, csr, &w, OUT_ISSUED, OUT_LOST, out);
	free(b64);
	/* written, or no longer wanted: nothing to keep (a failed write or a
	 * stop keeps it; *csr may be the live object now, so the uid is ours) */
	if (rc == SG_OK && *out != OUT_NONE)
		sg_kubekeep_drop(k->keep, kept_uid);
	if (rc == SG_OK && *out == OUT_ISSUED) {
		remember_written(k, kept_uid);
		if (reused)
			count(k, &k->stats.reused);
		char until[32], life[32], note[160];
		if (!sg_clock_rfc3339(until, sizeof(until), res.not_after))
			snprintf(until, sizeof(until), "?");
		sg_goduration_format(res.not_after - res.not_before, life, sizeof(life));
		sg_signetissuer_duration_note(&spec, r_asked, r_duration, note, sizeof(note));
		char msg[600];
		snprintf(msg, sizeof(msg),
		         "Certificate issued by SignetClusterIssuer %s (CA %s): serial %s, valid until %s (lifetime "
		         "%s)%s%s",
		         issuer, ca->name, res.serial, until, life, note,
		         res.not_after - res.not_before < r_duration ? ", cut at the CA's own end" : "");
		event(k, *csr, "Normal", "Issued", msg);
		sg_log(SG_LOG_INFO, "kubecsr: certificate issued", SG_F_STR("csr", name), SG_F_STR("issuer", issuer),
		       SG_F_STR("serial", res.serial), SG_F_INT("not_after", res.not_after), SG_F_END);
	} else if (rc == SG_OK && *out == OUT_LOST) {
		sg_log(SG_LOG_INFO,
		       "kubecsr: CertificateSigningRequest done, or made again, by someone else before our write",
		       SG_F_STR("csr", name), SG_F_STR("serial", res.serial), SG_F_END);
	}
	sg_kubesign_result_clear(&res);
	return rc;
}

/* A CSR for a namespaced issuer, approved: it fails, saying why (no
 * signer will ever sign it, and silence would look like one that is
 * down). Nothing was signed, so nothing is kept. */
static int fail_namespaced(sg_kubecsr *k, const char *name, json_t **csr, outcome *out)
{
	char why[WHY_MAX + 100];
	snprintf(why, sizeof(why),
	         "signerName %.400s names a namespaced SignetIssuer, which cannot sign a CertificateSigningRequest (it "
	         "is cluster-scoped): use signerName " SG_KUBECSR_SIGNER_PREFIX "<name> of a SignetClusterIssuer",
	         signer_name(*csr));
	return fail_csr(k, name, csr, why, out);
}

static int reconcile_csr(sg_kubecsr *k, const char *name, sg_ctrl_result *res, outcome *out)
{
	json_t *csr = sg_kube_informer_get(sg_ctrl_informer(k->ctrl, CSR_WATCH), NULL, name);
	char issuer[SG_KUBE_NAME_MAX + 1];
	*out = OUT_SKIPPED;
	if (!csr) {
		sg_kubekeep_drop_key(k->keep, name); /* deleted: what is kept is never written */
		return SG_OK;
	}
	signer_kind kind = signer_of(k, csr, issuer);
	if (kind == SIGNER_FOREIGN) {
		json_decref(csr);
		return SG_OK; /* not ours: the map does not queue these */
	}
	int rc = SG_OK;
	bool wants = wants_signature(csr);
	if (written_by_us(k, csr, !wants) && wants) {
		/* The cache is behind our own write: signing again would only
		 * meet a 409. Its event is on the way. */
		count(k, &k->stats.behind);
		*out = OUT_NONE;
		res->requeue_after_ms = SG_KUBECSR_BEHIND_MS;
		json_decref(csr);
		return SG_OK;
	}
	if (wants_signature(csr) && kind == SIGNER_NAMESPACED)
		rc = fail_namespaced(k, name, &csr, out);
	else if (wants_signature(csr))
		rc = sign_csr(k, name, issuer, &csr, out);
	else
		sg_kubekeep_drop(k->keep, sg_kube_meta_str(csr, "uid")); /* done, denied or not approved */
	if (rc == SG_OK && *out == OUT_WAITING)
		res->requeue_after_ms = SG_KUBECSR_RECHECK_MS;
	json_decref(csr);
	return rc;
}

/* Queues every CSR that waits for issuer (its change may unblock them). */
static void requeue_for_issuer(sg_kubecsr *k, const char *issuer)
{
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(k->ctrl, CSR_WATCH));
	size_t i;
	json_t *csr;
	char name[SG_KUBE_NAME_MAX + 1];
	json_array_foreach(all, i, csr)
	{
		const char *n = sg_kube_meta_str(csr, "name");
		if (n && signer_of(k, csr, name) == SIGNER_CLUSTER && strcmp(name, issuer) == 0 && wants_signature(csr))
			sg_ctrl_add(k->ctrl, n);
	}
	json_decref(all);
}

/* ---- the controller's callbacks ---- */

static void tally(sg_kubecsr *k, outcome out)
{
	pthread_mutex_lock(&k->mu);
	switch (out) {
	case OUT_ISSUED:
		k->stats.issued++;
		break;
	case OUT_FAILED:
		k->stats.failed++;
		break;
	case OUT_WAITING:
		k->stats.waiting++;
		break;
	case OUT_SKIPPED:
		k->stats.skipped++;
		break;
	case OUT_LOST:
		k->stats.lost++;
		break;
	case OUT_NONE:
		break;
	}
	pthread_mutex_unlock(&k->mu);
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	(void)c;
	sg_kubecsr *k = arg;
	size_t plen = strlen(ISSUER_KEY);
	if (strncmp(key, ISSUER_KEY, plen) == 0) {
		requeue_for_issuer(k, key + plen);
		return SG_OK;
	}
	outcome out = OUT_NONE;
	int rc = reconcile_csr(k, key, res, &out);
	if (rc == SG_OK && !sg_ctrl_stopping(k->ctrl))
		tally(k, out);
	return rc;
}

/* A CSR event queues the CSR when it is ours. */
static void map_csr(sg_ctrl *c, const json_t *csr, void *arg)
{
	sg_kubecsr *k = arg;
	char issuer[SG_KUBE_NAME_MAX + 1];
	const char *name = sg_kube_meta_str(csr, "name");
	if (name && *name && strlen(name) <= SG_KUBE_NAME_MAX && signer_of(k, csr, issuer) != SIGNER_FOREIGN)
		sg_ctrl_add(c, name);
	else
		count(k, &k->stats.foreign);
}

/* An issuer event queues the issuer's key (handled on a worker). */
static void map_issuer(sg_ctrl *c, const json_t *iss, void *arg)
{
	(void)arg;
	const char *name = sg_kube_meta_str(iss, "name");
	char key[SG_CTRL_KEY_MAX];
	if (name && *name && strlen(name) <= SG_KUBE_NAME_MAX &&
	    snprintf(key, sizeof(key), "%s%s", ISSUER_KEY, name) < (int)sizeof(key))
		sg_ctrl_add(c, key);
}

/* ---- life cycle ---- */

/* Kubernetes' ValidateSignerName: "<domain>/<path>", the domain a DNS
 * subdomain of at least two labels, the path '.'-separated DNS labels of
 * up to 253 bytes each, 571 bytes in all. */
static bool signer_name_ok(const char *s)
{
	size_t n = strlen(s);
	const char *slash = strchr(s, '/');
	if (!slash || n > SG_KUBECSR_SIGNER_NAME_MAX || strchr(slash + 1, '/'))
		return false;
	size_t dlen = (size_t)(slash - s);
	if (!sg_names_dns_subdomain(s, dlen) || !memchr(s, '.', dlen))
		return false;
	const char *p = slash + 1;
	if (!*p || strlen(p) > SG_NAMES_SUBDOMAIN_MAX + SG_NAMES_LABEL_MAX + 1)
		return false;
	while (*p) {
		size_t l = strcspn(p, ".");
		if (!sg_names_dns_label(p, l, SG_NAMES_SUBDOMAIN_MAX))
			return false;
		p += l;
		if (*p == '.' && !*++p)
			return false;
	}
	return true;
}

static int copy_str(const char *s, size_t n, char **out)
{
	*out = strndup(s, n);
	SG_ENSURE(*out, SG_EINTERNAL, "kubecsr: out of memory");
	return SG_OK;
}

static bool has_prefix(const char *s, size_t n, const char *prefix)
{
	size_t p = strlen(prefix);
	return n >= p && memcmp(s, prefix, p) == 0;
}

/* s (n bytes) without the blanks at its ends. */
static const char *trimmed(const char *s, size_t *n)
{
	while (*n && (*s == ' ' || *s == '\t'))
		s++, (*n)--;
	while (*n && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
		(*n)--;
	return s;
}

/* One item of the aliases option, "<signerName>[=<issuer>]" (n bytes). */
static int add_alias(sg_kubecsr *k, const char *item, size_t n, const char *dflt_issuer)
{
	const char *eq = memchr(item, '=', n);
	size_t nlen = eq ? (size_t)(eq - item) : n;
	size_t ilen = eq ? n - nlen - 1 : strlen(dflt_issuer);
	const char *name = trimmed(item, &nlen);
	const char *iss = eq ? trimmed(eq + 1, &ilen) : dflt_issuer;
	SG_ENSURE(k->naliases < SG_KUBECSR_ALIASES_MAX, SG_EINVAL, "kubecsr: at most %d alias signerNames",
	          SG_KUBECSR_ALIASES_MAX);
	struct alias *a = &k->aliases[k->naliases];
	SG_TRY(copy_str(name, nlen, &a->name));
	k->naliases++;
	SG_ENSURE(signer_name_ok(a->name), SG_EINVAL,
	          "kubecsr: alias signerName \"%.600s\" is not of the form example.com/signer-name", a->name);
	SG_ENSURE(
	    !has_prefix(name, nlen, SG_KUBECSR_SIGNER_PREFIX) && !has_prefix(name, nlen, SG_KUBECSR_NAMESPACED_PREFIX),
	    SG_EINVAL, "kubecsr: alias signerName \"%.600s\" is under signet's own %s", a->name,
	    has_prefix(name, nlen, SG_KUBECSR_SIGNER_PREFIX) ? SG_KUBECSR_SIGNER_PREFIX : SG_KUBECSR_NAMESPACED_PREFIX);
	for (size_t i = 0; i + 1 < k->naliases; i++)
		SG_ENSURE(strcmp(k->aliases[i].name, a->name) != 0, SG_EINVAL,
		          "kubecsr: alias signerName \"%.600s\" twice", a->name);
	SG_TRY(copy_str(iss, ilen, &a->issuer));
	SG_ENSURE(sg_names_dns_subdomain(a->issuer, strlen(a->issuer)), SG_EINVAL,
	          "kubecsr: the issuer of alias %.600s, \"%.260s\", is not an object name", a->name, a->issuer);
	return SG_OK;
}

/* The aliases option: comma-separated items; blank items are refused. */
static int parse_aliases(sg_kubecsr *k, const char *list, const char *dflt_issuer)
{
	size_t all = list ? strlen(list) : 0;
	(void)trimmed(list, &all);
	if (all == 0)
		return SG_OK; /* none */
	for (const char *p = list;;) {
		size_t n = strcspn(p, ",");
		SG_TRY(add_alias(k, p, n, dflt_issuer));
		if (!p[n])
			return SG_OK;
		p += n + 1;
	}
}

/* The runtime's hooks: what this run signs for, and a fresh set of
 * warnings for the next one. */
static int starting(sg_ctrl *c, void *arg)
{
	(void)c;
	sg_kubecsr *k = arg;
	sg_log(SG_LOG_INFO, "kubecsr: starting", SG_F_INT("aliases", (int64_t)k->naliases), SG_F_END);
	for (size_t i = 0; i < k->naliases; i++)
		sg_log(SG_LOG_INFO, "kubecsr: alias", SG_F_STR("signer_name", k->aliases[i].name),
		       SG_F_STR("issuer", k->aliases[i].issuer), SG_F_END);
	return SG_OK;
}

static void stopped(sg_ctrl *c, void *arg)
{
	(void)c;
	sg_kubecsr *k = arg;
	pthread_mutex_lock(&k->mu);
	memset(k->warned, 0, sizeof(k->warned));
	k->warned_next = 0;
	pthread_mutex_unlock(&k->mu);
	sg_kubekeep_clear(k->keep); /* a new leader signs for itself */
}

static int init(sg_kubecsr *k, const sg_kubecsr_options *o)
{
	SG_ENSURE(o->kube, SG_EINVAL, "kubecsr: no Kubernetes client");
	SG_ENSURE(o->cas && o->ncas > 0, SG_EINVAL, "kubecsr: no CA to sign with");
	SG_ENSURE(o->workers <= SG_CTRL_WORKERS_MAX, SG_EINVAL, "kubecsr: at most %d workers", SG_CTRL_WORKERS_MAX);
	k->kube = o->kube;
	k->cas = o->cas;
	k->ncas = o->ncas;
	SG_TRY(sg_kubekeep_new(&k->keep, 0));
	const char *alias_issuer = o->alias_issuer ? o->alias_issuer : SG_KUBECSR_ALIAS_ISSUER;
	SG_ENSURE(sg_names_dns_subdomain(alias_issuer, strlen(alias_issuer)), SG_EINVAL,
	          "kubecsr: alias issuer \"%.260s\" is not an object name", alias_issuer);
	SG_TRY(parse_aliases(k, o->aliases, alias_issuer));
	sg_ctrl_watch watches[] = {
	    [CSR_WATCH] = {.ref = {.group = CSR_GROUP, .version = CSR_VERSION, .resource = CSR_RESOURCE},
	                   .map = map_csr},
	    [ISSUER_WATCH] = {.ref = {.group = SG_SIGNETISSUER_GROUP,
	                              .version = SG_SIGNETISSUER_VERSION,
	                              .resource = SG_SIGNETISSUER_CLUSTER_RESOURCE},
	                      .map = map_issuer},
	};
	sg_ctrl_def def = {
	    .name = "kubecsr",
	    .kube = o->kube,
	    .watches = watches,
	    .nwatches = 2,
	    .reconcile = reconcile,
	    .starting = starting,
	    .stopped = stopped,
	    .arg = k,
	    .workers = o->workers ? o->workers : SG_KUBECSR_WORKERS,
	};
	return sg_ctrl_new(&k->ctrl, &def);
}

int sg_kubecsr_new(sg_kubecsr **out, const sg_kubecsr_options *o)
{
	*out = NULL;
	SG_ENSURE(o, SG_EINVAL, "kubecsr: no options");
	sg_kubecsr *k = calloc(1, sizeof(*k));
	SG_ENSURE(k, SG_EINTERNAL, "kubecsr: out of memory");
	pthread_mutex_init(&k->mu, NULL);
	int rc = init(k, o);
	if (rc < 0) {
		sg_kubecsr_free(k);
		return rc;
	}
	*out = k;
	return SG_OK;
}

sg_ctrl *sg_kubecsr_controller(sg_kubecsr *k)
{
	return k->ctrl;
}

void sg_kubecsr_stats_get(sg_kubecsr *k, sg_kubecsr_stats *out)
{
	sg_ctrl_stats cs;
	sg_ctrl_stats_get(k->ctrl, &cs);
	pthread_mutex_lock(&k->mu);
	*out = k->stats;
	pthread_mutex_unlock(&k->mu);
	sg_kubekeep_stats ks;
	sg_kubekeep_stats_get(k->keep, &ks);
	out->kept = ks.entries;
	out->errors = cs.errors;
	out->queued = cs.queued;
}

void sg_kubecsr_free(sg_kubecsr *k)
{
	if (!k)
		return;
	sg_ctrl_free(k->ctrl); /* stops first */
	sg_kubekeep_free(k->keep);
	for (size_t i = 0; i < k->naliases; i++) {
		free(k->aliases[i].name);
		free(k->aliases[i].issuer);
	}
	pthread_mutex_destroy(&k->mu);
	free(k);
}
