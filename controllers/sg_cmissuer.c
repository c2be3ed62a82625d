/*
 * sg_cmissuer: the cert-manager CertificateRequest controller (contract:
 * sg_cmissuer.h).
 *
 * Design notes.
 *
 * Keys. A request is "ns/name" (the runtime's default key). An issuer's
 * change is queued as a key of its own, "\002<kind>/<ns>/<name>" (no
 * Kubernetes name starts with a control byte): its reconcile, on a worker,
 * queues the requests that name that issuer. Doing it there rather than in
 * the issuer informer's handler keeps the request informer out of other
 * informers' threads (it exists only from start to stop, and stop frees
 * informers one after another).
 *
 * The state machine is cert-manager's (reference: its external-issuer
 * contract and issuer-lib): each reconcile reads the request from the
 * informer, decides, and makes at most one status write. The decision never
 * depends on anything but the request, its issuer and the CA. Every status
 * write, Pending, Failed and Denied as much as Issued, carries the
 * resourceVersion of the object decided on: a cache may still show a
 * request as it was before the previous leader's Issued write, and an
 * apply from that copy would turn it back to Ready=False and, from the
 * same field manager, take its certificate away. The API server refuses
 * it instead (409), and the retry decides on what the request says then.
 *
 * Exactly once, in two halves.
 *   - Signed, not written: the result is kept (sg_kubekeep.h) by the
 *     request's UID from the signature until its write succeeds, so a
 *     write that fails (refused, timed out, a conflict) is retried with the
 *     same certificate, never with a second signature. The Issued write
 *     carries the resourceVersion the decision was made on: if the request
 *     changed meanwhile (a Denied added, say) the write is refused with a
 *     conflict and the next pass decides again on what the request says
 *     now. A request found done or gone drops what is kept for it; a stop
 *     drops everything (a new leader signs for itself).
 *   - Written, not yet seen: between our status write and the watch event
 *     that brings it back, the informer still holds the unsigned request;
 *     another event in that window (an issuer change, say) would queue it
 *     again. The uids of requests this process wrote are remembered (a
 *     small ring): such a request is read live before anything is done
 *     with it.
 *
 * Nothing taken from the cached object outlives it: the issuer's name is
 * copied out (issuer_ref), because the cached object is released when the
 * live one replaces it.
 */
#include "sg_cmissuer.h"

#include "sg_clock.h"
#include "sg_goduration.h"
#include "sg_guard.h"
#include "sg_kube_informer.h"
#include "sg_kubekeep.h"
#include "sg_log.h"
#include "sg_signetissuer.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CR_WATCH 0
#define ISSUER_WATCH 1
#define CLUSTER_ISSUER_WATCH 2
#define CR_GROUP "cert-manager.io"
#define CR_VERSION "v1"
#define CR_RESOURCE "certificaterequests"
#define CR_KIND "CertificateRequest"
#define GROUP_SELECTOR "spec.issuerRef.group=" SG_SIGNETISSUER_GROUP
#define ISSUER_KEY_PREFIX '\002'
#define SIGNED_RING 4096
#define UID_MAX 64
#define MSG_MAX 1536

enum { R_ISSUED, R_FAILED, R_DENIED, R_PENDING, R_IGNORED, R_ERROR, R_COUNT };
static const char *const result_names[R_COUNT] = {"issued", "failed", "denied", "pending", "ignored", "error"};

struct sg_cmissuer {
	sg_kube *kube;
	sg_ctrl *ctrl;
	const sg_kubesign_ca *cas;
	size_t ncas;
	sg_kubekeep *keep; /* signed, not yet written (its own lock) */

	pthread_mutex_t mu; /* everything below */
	sg_cmissuer_stats stats;
	sg_series *results[R_COUNT];
	char signed_uids[SIGNED_RING][UID_MAX];
	size_t signed_next;
};

/* ---- small helpers ---- */

static void rfc3339_now(char out[32])
{
	(void)sg_clock_rfc3339(out, 32, sg_wall_seconds());
}

static bool cond_true(const json_t *obj, const char *type)
{
	const char *s = json_string_value(json_object_get(sg_ctrl_condition_find(obj, type), "status"));
	return s && strcmp(s, "True") == 0;
}

static const char *ready_reason(const json_t *obj)
{
	return json_string_value(json_object_get(sg_ctrl_condition_find(obj, "Ready"), "reason"));
}

static void count(sg_cmissuer *m, int result)
{
	pthread_mutex_lock(&m->mu);
	switch (result) {
	case R_ISSUED:
		m->stats.issued++;
		break;
	case R_FAILED:
		m->stats.failed++;
		break;
	case R_DENIED:
		m->stats.denied++;
		break;
	case R_PENDING:
		m->stats.pending++;
		break;
	case R_IGNORED:
		m->stats.ignored++;
		break;
	default:
		break;
	}
	sg_series *s = m->results[result];
	pthread_mutex_unlock(&m->mu);
	if (s)
		sg_series_inc(s);
}

static void remember_signed(sg_cmissuer *m, const char *uid)
{
	if (!uid)
		return;
	pthread_mutex_lock(&m->mu);
	snprintf(m->signed_uids[m->signed_next], UID_MAX, "%s", uid);
	m->signed_next = (m->signed_next + 1) % SIGNED_RING;
	pthread_mutex_unlock(&m->mu);
}

static bool signed_before(sg_cmissuer *m, const char *uid)
{
	if (!uid || !*uid)
		return false;
	bool found = false;
	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < SIGNED_RING && !found; i++)
		found = strcmp(m->signed_uids[i], uid) == 0;
	pthread_mutex_unlock(&m->mu);
	return found;
}

/* ---- what is ours ---- */

typedef struct issuer_ref {
	bool cluster;
	char name[SG_KUBE_NAME_MAX + 1]; /* a copy: the object it came from may be released */
} issuer_ref;

/* Whether cr names one of our issuers (group exactly ours, kind ours or
 * empty for the namespaced kind). */
static bool ours(const json_t *cr, issuer_ref *out)
{
	const json_t *ref = json_object_get(json_object_get(cr, "spec"), "issuerRef");
	const char *group = json_string_value(json_object_get(ref, "group"));
	const char *kind = json_string_value(json_object_get(ref, "kind"));
	const char *name = json_string_value(json_object_get(ref, "name"));
	if (!group || strcmp(group, SG_SIGNETISSUER_GROUP) != 0 || !name || !*name || strlen(name) > SG_KUBE_NAME_MAX)
		return false;
	if (!kind || !*kind || strcmp(kind, SG_SIGNETISSUER_KIND) == 0)
		out->cluster = false;
	else if (strcmp(kind, SG_SIGNETISSUER_CLUSTER_KIND) == 0)
		out->cluster = true;
	else
		return false;
	memcpy(out->name, name, strlen(name) + 1);
	return true;
}

/* ---- status writes ---- */

typedef struct outcome {
	const char *status; /* Ready's */
	const char *reason;
	char message[MSG_MAX];
	bool failure_time; /* set status.failureTime (kept when already set) */
} outcome;

/* A status write refused because the request changed after it was read
 * (a resourceVersion that is no longer current): counted, and returned
 * as the error it is, so the runtime tries again and the next pass
 * decides on what the request says then. */
static int note_conflict(sg_cmissuer *m, int rc)
{
	if (sg_kube_conflict(rc)) {
		pthread_mutex_lock(&m->mu);
		m->stats.conflicts++;
		pthread_mutex_unlock(&m->mu);
	}
	return rc;
}

/* Ready=False with o, as a server-side apply of the status carrying the
 * resourceVersion of cr: cr may come from a cache behind the API server,
 * and an apply made from it without that precondition would turn an
 * Issued request (written meanwhile by the leader before us) back to
 * Ready=False and, from the same field manager, remove its certificate. */
static int write_status(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const char *ns, const char *name,
                        const outcome *o)
{
	json_t *st = json_pack("{s:[{s:s, s:s, s:s, s:s, s:n}]}", "conditions", "type", "Ready", "status", o->status,
			       "reason", o->reason, "message", o->message, "observedGeneration");
	SG_ENSURE(st, SG_EINTERNAL, "out of memory");
	int rc = SG_OK;
	if (o->failure_time) {
		const json_t *have = json_object_get(json_object_get(cr, "status"), "failureTime");
		char now[32];
		rfc3339_now(now);
		if (json_object_set_new(st, "failureTime", json_is_string(have) ? json_incref((json_t *)have)
										  : json_string(now)) != 0)
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
	}
	sg_kube_ref ref = {.group = CR_GROUP, .version = CR_VERSION, .resource = CR_RESOURCE, .ns = ns, .name = name};
	/* a stopping controller writes nothing: leadership may be passing on */
	if (rc == SG_OK)
		rc = sg_ctrl_stopping(c) ? sg_error_set(SG_EBUSY, "stopping")
		                         : note_conflict(m, sg_ctrl_apply_status_exact(c, &ref, CR_KIND, cr, st, NULL));
	json_decref(st);
	return rc;
}

/* Ready=False/Pending, with an Event when the request turns Pending. */
static int pending(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const char *ns, const char *name,
		   const char *event_reason, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int pending(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const char *ns, const char *name,
		   const char *event_reason, const char *fmt, ...)
{
	outcome o = {.status = "False", .reason = "Pending"};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(o.message, sizeof(o.message), fmt, ap);
	va_end(ap);
	const char *was = ready_reason(cr);
	sg_error saved;
	sg_error_save(&saved);
	int rc = write_status(m, c, cr, ns, name, &o);
	if (rc == SG_OK) {
		count(m, R_PENDING);
		if (!was || strcmp(was, "Pending") != 0)
			sg_ctrl_event(c, cr, "Normal", event_reason, "%s", o.message);
		sg_error_restore(&saved);
	}
	return rc;
}

static int failed(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const char *ns, const char *name, const char *why)
{
	outcome o = {.status = "False", .reason = "Failed", .failure_time = true};
	snprintf(o.message, sizeof(o.message), "Failed to sign CertificateRequest: %s", why);
	int rc = write_status(m, c, cr, ns, name, &o);
	if (rc == SG_OK) {
		count(m, R_FAILED);
		sg_ctrl_event(c, cr, "Warning", "Failed", "%s", o.message);
		sg_log(SG_LOG_WARN, "certificate request failed", SG_F_STR("namespace", ns), SG_F_STR("name", name),
		       SG_F_STR("reason", why), SG_F_END);
	}
	return rc;
}

/* ---- signing ---- */

typedef struct prepared {
	const sg_kubesign_ca *ca;
	sg_signetissuer_spec spec;
	char *csr;
	size_t csr_len;
	int64_t asked;    /* spec.duration in seconds; 0: none */
	int64_t duration; /* what is issued: asked, or the default, brought into the issuer's range */
	bool is_ca;
	uint32_t ku, eku;
} prepared;

/* Reads what the request asks for against the issuer: SG_OK, or an error
 * whose detail says why (permanent unless sg_kubesign_permanent says
 * otherwise). */
static int prepare(sg_cmissuer *m, const json_t *cr, const json_t *issuer, prepared *p)
{
	memset(p, 0, sizeof(*p));
	SG_TRY(sg_signetissuer_spec_parse(issuer, &p->spec));
	p->ca = sg_kubesign_ca_find(m->cas, m->ncas, p->spec.ca_name);
	SG_ENSURE(p->ca, SG_EBUSY, "signetd has no CA named \"%s\"", p->spec.ca_name);
	const json_t *s = json_object_get(cr, "spec");
	const json_t *d = json_object_get(s, "duration");
	if (d && !json_is_null(d)) {
		SG_ENSURE(json_is_string(d), SG_EINVAL, "spec.duration is not a string");
		if (sg_goduration_parse(json_string_value(d), &p->asked) != SG_OK)
			SG_BAIL(SG_EINVAL, "spec.duration: %s", sg_error_last()->msg);
		SG_ENSURE(p->asked > 0, SG_EINVAL, "spec.duration is zero");
	}
	/* An issuer may shorten (or lengthen) what is asked: refusing a
	 * duration out of range would only make cert-manager ask again. */
	p->duration = sg_signetissuer_duration(&p->spec, p->asked);
	const json_t *isca = json_object_get(s, "isCA");
	SG_ENSURE(!isca || json_is_null(isca) || json_is_boolean(isca), SG_EINVAL, "spec.isCA is not a boolean");
	p->is_ca = json_is_true(isca);
	SG_ENSURE(!p->is_ca || p->spec.allow_ca, SG_EDENIED,
	          "the issuer does not issue CA certificates (spec.allowCA is false)");
	/* cert-manager's default usages: digital signature, key encipherment */
	SG_TRY(sg_kubesign_usages(json_object_get(s, "usages"), p->is_ca,
				  SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT, 0, &p->ku, &p->eku));
	SG_TRY(sg_kubesign_bytes_field(s, "request", SG_KUBESIGN_REQUEST_MAX, &p->csr, &p->csr_len));
	return SG_OK;
}

/* The failure of a signature: Failed when permanent, Pending "will retry"
 * and the runtime's backoff otherwise. */
static int sign_failed(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const char *ns, const char *name, int rc)
{
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	if (sg_kubesign_permanent(rc))
		return failed(m, c, cr, ns, name, why);
	sg_error e;
	sg_error_save(&e);
	/* the retry is the runtime's backoff; the status says why it waits */
	if (pending(m, c, cr, ns, name, "RetryableError", "Failed to sign CertificateRequest, will retry: %s", why) ==
	    SG_OK)
		sg_error_restore(&e);
	return rc;
}

/* The apply body of the Issued write: Ready=True/Issued, the chain and the
 * root bundle (base64 of PEM), and the resourceVersion decided on. */
static json_t *issued_body(const char *ns, const char *name, const char *rv, const char *cert_b64, const char *ca_b64)
{
	char now[32];
	rfc3339_now(now);
	json_t *ready = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "Ready", "status", "True", "reason", "Issued",
	                          "message", "Certificate fetched from issuer successfully", "lastTransitionTime", now);
	/* "o" consumes ready, also when json_pack fails */
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:[o], s:s, s:s}}", "apiVersion", CR_GROUP "/" CR_VERSION,
	                 "kind", CR_KIND, "metadata", "name", name, "namespace", ns, "resourceVersion", rv, "status",
	                 "conditions", ready, "certificate", cert_b64, "ca", ca_b64);
}

/* Ready=True/Issued with the certificate, as one server-side apply of the
 * status carrying the resourceVersion of cr (the object the decision was
 * made on): a request changed since is refused with a conflict, and the
 * retry decides again on what it says now. */
static int write_issued(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const char *ns, const char *name,
                        const sg_kubesign_result *res)
{
	SG_ENSURE(!sg_ctrl_stopping(c), SG_EBUSY, "stopping"); /* leadership may be passing on */
	const char *rv = sg_kube_meta_str(cr, "resourceVersion");
	SG_ENSURE(rv && *rv, SG_EINTERNAL, "the request has no resourceVersion");
	char *cert_b64 = NULL, *ca_b64 = NULL;
	json_t *body = NULL;
	int rc = sg_kubesign_base64(res->chain, strlen(res->chain), &cert_b64);
	if (rc == SG_OK)
		rc = sg_kubesign_base64(res->ca, strlen(res->ca), &ca_b64);
	if (rc == SG_OK && !(body = issued_body(ns, name, rv, cert_b64, ca_b64)))
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	sg_kube_ref ref = {.group = CR_GROUP, .version = CR_VERSION, .resource = CR_RESOURCE, .ns = ns, .name = name};
	ref.subresource = "status";
	if (rc == SG_OK)
		rc = note_conflict(m, sg_ctrl_apply(c, &ref, body, NULL));
	json_decref(body);
	free(cert_b64);
	free(ca_b64);
	return rc;
}

/* The Issued Event: the certificate's real lifetime, and how it relates to
 * the duration asked. */
static void issued_event(sg_ctrl *c, const json_t *cr, const prepared *p, const sg_kubesign_result *res)
{
	char until[32], life[32], note[160];
	if (!sg_clock_rfc3339(until, sizeof(until), res->not_after))
		snprintf(until, sizeof(until), "?");
	sg_goduration_format(res->not_after - res->not_before, life, sizeof(life));
	sg_signetissuer_duration_note(&p->spec, p->asked, p->duration, note, sizeof(note));
	sg_ctrl_event(c, cr, "Normal", "CertificateIssued",
	              "Certificate fetched from issuer successfully: serial %s, valid until %s (lifetime %s)%s%s",
	              res->serial, until, life, note,
	              res->not_after - res->not_before < p->duration ? ", cut at the CA's own end" : "");
}

/* Signs cr, or takes what was signed for it before and not written, then
 * writes it. */
static int sign(sg_cmissuer *m, sg_ctrl *c, const json_t *cr, const json_t *issuer, const char *ns,
		const char *name)
{
	/* nothing is signed that a stopping controller could not deliver */
	SG_ENSURE(!sg_ctrl_stopping(c), SG_EBUSY, "stopping");
	const char *uid = sg_kube_meta_str(cr, "uid");
	json_int_t gen = json_integer_value(json_object_get(json_object_get(cr, "metadata"), "generation"));
	prepared p;
	int rc = prepare(m, cr, issuer, &p);
	sg_kubesign_result res = {0};
	bool reused = rc == SG_OK && uid && sg_kubekeep_get(m->keep, uid, gen, &res);
	if (rc == SG_OK && !reused) {
		sg_kubesign_request kr = {
			.csr_pem = p.csr,
			.csr_len = p.csr_len,
			.duration = p.duration,
			.is_ca = p.is_ca,
			.key_usage = p.ku,
			.ext_key_usage = p.eku,
			.csr_must_match = true,
			.deadline_ns = sg_now_ns() + (uint64_t)SG_CMISSUER_SIGN_TIMEOUT_MS * 1000000u,
		};
		rc = sg_kubesign_issue(p.ca, &kr, &res);
		if (rc == SG_OK) {
			pthread_mutex_lock(&m->mu);
			m->stats.signatures++;
			pthread_mutex_unlock(&m->mu);
			char key[SG_CTRL_KEY_MAX];
			snprintf(key, sizeof(key), "%s/%s", ns, name);
			/* not kept (out of memory, no uid): a failed write signs again */
			if (sg_kubekeep_put(m->keep, key, uid, gen, &res) != SG_OK)
				sg_log(SG_LOG_WARN, "certificaterequests: a signed certificate is not kept for a retry",
				       SG_F_STR("namespace", ns), SG_F_STR("name", name),
				       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		}
	}
	free(p.csr);
	if (rc < 0)
		return sign_failed(m, c, cr, ns, name, rc);
	rc = write_issued(m, c, cr, ns, name, &res);
	if (rc == SG_OK) {
		sg_kubekeep_drop(m->keep, uid);
		remember_signed(m, uid);
		count(m, R_ISSUED);
		pthread_mutex_lock(&m->mu);
		m->stats.reused += reused;
		pthread_mutex_unlock(&m->mu);
		issued_event(c, cr, &p, &res);
		sg_log(SG_LOG_INFO, "certificate request issued", SG_F_STR("namespace", ns), SG_F_STR("name", name),
		       SG_F_STR("serial", res.serial), SG_F_INT("not_after", res.not_after),
		       SG_F_STR("from", reused ? "kept" : "signed"), SG_F_END);
	}
	sg_kubesign_result_clear(&res);
	return rc;
}

/* ---- reconcile ---- */

static int reconcile_cr(sg_cmissuer *m, sg_ctrl *c, const char *ns, const char *name)
{
	json_t *cr = sg_kube_informer_get(sg_ctrl_informer(c, CR_WATCH), ns, name);
	if (!cr) {
		/* gone: nothing kept for it is ever written */
		char key[SG_CTRL_KEY_MAX];
		snprintf(key, sizeof(key), "%s/%s", ns, name);
		sg_kubekeep_drop_key(m->keep, key);
		return SG_OK;
	}
	int rc = SG_OK;
	issuer_ref ir;
	bool terminal = false;
	if (!ours(cr, &ir)) {
		count(m, R_IGNORED);
		goto out;
	}
	if (signed_before(m, sg_kube_meta_str(cr, "uid")) &&
	    !json_object_get(json_object_get(cr, "status"), "certificate")) {
		/* our own write may not be in the cache yet: ask the server */
		sg_kube_ref ref = {.group = CR_GROUP, .version = CR_VERSION, .resource = CR_RESOURCE, .ns = ns,
				   .name = name};
		json_t *live = NULL;
		rc = sg_kube_get(m->kube, &ref, &live);
		pthread_mutex_lock(&m->mu);
		m->stats.rereads++;
		pthread_mutex_unlock(&m->mu);
		if (rc == SG_ENOTFOUND) {
			rc = SG_OK;
			goto out;
		}
		if (rc < 0)
			goto out;
		/* ir holds copies: nothing points into the object released here */
		json_decref(cr);
		cr = live;
		/* The live request may be another one made since under the same
		 * name: the issuer it names is taken from it. */
		if (!ours(cr, &ir)) {
			count(m, R_IGNORED);
			goto out;
		}
	}
	const char *reason = ready_reason(cr);
	if (cond_true(cr, "Denied")) {
		sg_kubekeep_drop(m->keep, sg_kube_meta_str(cr, "uid")); /* never written */
		if (reason && strcmp(reason, "Denied") == 0) {
			count(m, R_IGNORED);
			goto out;
		}
		outcome o = {.status = "False", .reason = "Denied", .failure_time = true};
		snprintf(o.message, sizeof(o.message), "The CertificateRequest was denied by an approval controller");
		rc = write_status(m, c, cr, ns, name, &o);
		if (rc == SG_OK)
			count(m, R_DENIED);
		goto out;
	}
	terminal = cond_true(cr, "Ready") || (reason && (strcmp(reason, "Failed") == 0 || strcmp(reason, "Denied") == 0)) ||
		   cond_true(cr, "InvalidRequest") ||
		   json_string_length(json_object_get(json_object_get(cr, "status"), "certificate")) > 0;
	if (terminal)
		sg_kubekeep_drop(m->keep, sg_kube_meta_str(cr, "uid")); /* done: what is kept is never written */
	if (!cond_true(cr, "Approved") || terminal) {
		count(m, R_IGNORED);
		goto out;
	}
	const char *kind = ir.cluster ? SG_SIGNETISSUER_CLUSTER_KIND : SG_SIGNETISSUER_KIND;
	json_t *issuer = sg_kube_informer_get(sg_ctrl_informer(c, ir.cluster ? CLUSTER_ISSUER_WATCH : ISSUER_WATCH),
					      ir.cluster ? NULL : ns, ir.name);
	char why[SG_ERROR_MSG_MAX];
	if (!issuer) {
		rc = pending(m, c, cr, ns, name, "IssuerNotFound", "Referenced \"%s\" not found: %s%s%s. Waiting for it to be created.",
			     kind, ir.cluster ? "" : ns, ir.cluster ? "" : "/", ir.name);
	} else if (!sg_signetissuer_ready(issuer, why, sizeof(why))) {
		rc = pending(m, c, cr, ns, name, "IssuerNotReady", "%s", why);
	} else {
		rc = sign(m, c, cr, issuer, ns, name);
	}
	json_decref(issuer);
out:
	json_decref(cr);
	if (rc < 0)
		count(m, R_ERROR);
	return rc;
}

/* An issuer changed: queue every request of ours that names it and is not
 * finished. */
static void requeue_for_issuer(sg_ctrl *c, const char *spec)
{
	bool cluster = strncmp(spec, SG_SIGNETISSUER_CLUSTER_KIND "/", strlen(SG_SIGNETISSUER_CLUSTER_KIND) + 1) == 0;
	const char *rest = strchr(spec, '/');
	if (!rest)
		return;
	rest++;
	char ns[64] = "";
	const char *name = rest;
	if (!cluster) {
		const char *slash = strchr(rest, '/');
		if (!slash || (size_t)(slash - rest) >= sizeof(ns))
			return;
		memcpy(ns, rest, (size_t)(slash - rest));
		ns[slash - rest] = 0;
		name = slash + 1;
	}
	json_t *all = sg_kube_informer_list(sg_ctrl_informer(c, CR_WATCH));
	size_t i;
	json_t *cr;
	json_array_foreach(all, i, cr)
	{
		issuer_ref ir;
		if (!ours(cr, &ir) || ir.cluster != cluster || strcmp(ir.name, name) != 0)
			continue;
		if (!cluster && strcmp(sg_kube_meta_str(cr, "namespace") ? sg_kube_meta_str(cr, "namespace") : "", ns) != 0)
			continue;
		if (cond_true(cr, "Ready"))
			continue;
		char key[SG_CTRL_KEY_MAX];
		if (sg_ctrl_key_of(cr, key))
			sg_ctrl_add(c, key);
	}
	json_decref(all);
}

static int reconcile(sg_ctrl *c, const char *key, sg_ctrl_result *res, void *arg)
{
	(void)res;
	sg_cmissuer *m = arg;
	if (key[0] == ISSUER_KEY_PREFIX) {
		requeue_for_issuer(c, key + 1);
		return SG_OK;
	}
	char ns[64], name[SG_KUBE_NAME_MAX + 1];
	if (!sg_ctrl_key_split(key, ns, name) || !ns[0])
		return SG_OK;
	return reconcile_cr(m, c, ns, name);
}

/* Requests of other issuers are not even queued. */
static void map_cr(sg_ctrl *c, const json_t *cr, void *arg)
{
	(void)arg;
	issuer_ref ir;
	char key[SG_CTRL_KEY_MAX];
	if (ours(cr, &ir) && sg_ctrl_key_of(cr, key))
		sg_ctrl_add(c, key);
}

static void map_issuer(sg_ctrl *c, const json_t *issuer, void *arg)
{
	(void)arg;
	const char *ns = sg_kube_meta_str(issuer, "namespace");
	const char *name = sg_kube_meta_str(issuer, "name");
	if (!name)
		return;
	char key[SG_CTRL_KEY_MAX];
	int n = ns ? snprintf(key, sizeof(key), "%c%s/%s/%s", ISSUER_KEY_PREFIX, SG_SIGNETISSUER_KIND, ns, name)
		   : snprintf(key, sizeof(key), "%c%s/%s", ISSUER_KEY_PREFIX, SG_SIGNETISSUER_CLUSTER_KIND, name);
	if (n > 0 && (size_t)n < sizeof(key))
		sg_ctrl_add(c, key);
}

/* ---- lifecycle ---- */

/* Whether the API server filters requests by issuer group: a LIST with the
 * selector answers 200 where the CRD declares it selectable, 400 where it
 * does not. Anything else (no CRD yet, no answer) leaves the filtering to
 * us for this start. */
static bool probe_field_selector(sg_cmissuer *m)
{
	sg_kube_ref ref = {.group = CR_GROUP, .version = CR_VERSION, .resource = CR_RESOURCE};
	sg_kube_list_opts lo = {.field_selector = GROUP_SELECTOR, .limit = 1};
	json_t *list = NULL;
	int rc = sg_kube_list(m->kube, &ref, &lo, &list);
	json_decref(list);
	if (rc != SG_OK && sg_kube_last_status()->code != 400)
		sg_log(SG_LOG_WARN, "certificaterequests: cannot tell whether the API server filters by issuer group",
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
	return rc == SG_OK;
}

/* Each start asks the API server again whether it filters by group: the
 * CRD may have been upgraded meanwhile. */
static int starting(sg_ctrl *c, void *arg)
{
	sg_cmissuer *m = arg;
	bool sel = probe_field_selector(m);
	SG_TRY(sg_ctrl_set_field_selector(c, CR_WATCH, sel ? GROUP_SELECTOR : NULL));
	pthread_mutex_lock(&m->mu);
	m->stats.field_selector = sel;
	pthread_mutex_unlock(&m->mu);
	sg_log(SG_LOG_INFO, "certificaterequests: starting",
	       SG_F_STR("filter", sel ? "field selector " GROUP_SELECTOR : "client side"), SG_F_END);
	return SG_OK;
}

/* A new leader signs for itself: what this run kept is dropped. */
static void stopped(sg_ctrl *c, void *arg)
{
	(void)c;
	sg_cmissuer *m = arg;
	sg_kubekeep_clear(m->keep);
}

/* signet_certificaterequests_total{result}, bound to this module's
 * counters. */
static int metrics(sg_ctrl *c, sg_metrics *reg, void *arg)
{
	(void)c;
	sg_cmissuer *m = arg;
	static const char *const labels[] = {"result"};
	sg_metric *f = NULL;
	SG_TRY(sg_metrics_counter(&f, reg, "signet_certificaterequests_total",
	                          "cert-manager CertificateRequests handled, by result (issued, failed, denied, "
	                          "pending, ignored, error).",
	                          labels, 1));
	for (int i = 0; i < R_COUNT; i++) {
		const char *v[] = {result_names[i]};
		sg_series *s = NULL;
		SG_TRY(sg_metric_series(&s, f, v));
		pthread_mutex_lock(&m->mu);
		m->results[i] = s;
		pthread_mutex_unlock(&m->mu);
	}
	return SG_OK;
}

int sg_cmissuer_new(sg_cmissuer **out, const sg_cmissuer_options *o)
{
	*out = NULL;
	SG_ENSURE(o && o->kube && o->cas && o->ncas > 0, SG_EINVAL,
		  "certificaterequests: needs a Kubernetes client and a CA");
	sg_cmissuer *m = calloc(1, sizeof(*m));
	SG_ENSURE(m, SG_EINTERNAL, "certificaterequests: out of memory");
	pthread_mutex_init(&m->mu, NULL);
	m->kube = o->kube;
	m->cas = o->cas;
	m->ncas = o->ncas;
	int rc = sg_kubekeep_new(&m->keep, 0);
	if (rc < 0) {
		sg_cmissuer_free(m);
		return rc;
	}
	const sg_ctrl_watch watches[] = {
		{.ref = {.group = CR_GROUP, .version = CR_VERSION, .resource = CR_RESOURCE}, .map = map_cr},
		{.ref = {.group = SG_SIGNETISSUER_GROUP, .version = SG_SIGNETISSUER_VERSION,
			 .resource = SG_SIGNETISSUER_RESOURCE},
		 .map = map_issuer},
		{.ref = {.group = SG_SIGNETISSUER_GROUP, .version = SG_SIGNETISSUER_VERSION,
			 .resource = SG_SIGNETISSUER_CLUSTER_RESOURCE},
		 .map = map_issuer},
	};
	sg_ctrl_def def = {
	    .name = "certificaterequests",
	    .kube = o->kube,
	    .watches = watches,
	    .nwatches = 3,
	    .reconcile = reconcile,
	    .starting = starting,
	    .stopped = stopped,
	    .metrics = metrics,
	    .arg = m,
	    .workers = o->workers ? o->workers : SG_CMISSUER_WORKERS,
	};
	rc = sg_ctrl_new(&m->ctrl, &def);
	if (rc < 0) {
		sg_cmissuer_free(m);
		return rc;
	}
	*out = m;
	return SG_OK;
}

sg_ctrl *sg_cmissuer_controller(sg_cmissuer *m)
{
	return m->ctrl;
}

void sg_cmissuer_stats_get(sg_cmissuer *m, sg_cmissuer_stats *out)
{
	pthread_mutex_lock(&m->mu);
	*out = m->stats;
	pthread_mutex_unlock(&m->mu);
	sg_kubekeep_stats ks;
	sg_kubekeep_stats_get(m->keep, &ks);
	out->kept = ks.entries;
}

void sg_cmissuer_free(sg_cmissuer *m)
{
	if (!m)
		return;
	sg_ctrl_free(m->ctrl);
	sg_kubekeep_free(m->keep);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
