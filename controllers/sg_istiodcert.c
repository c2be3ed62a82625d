/*
 * istiod's serving certificate in a Secret (see sg_istiodcert.h for the
 * contract).
 *
 * Shape: a controller on the runtime (sg_ctrl.h) with one key, the
 * Secret's. Its reconcile owns the current certificate ("material":
 * chain, key, validity) and makes the Secret say exactly that. The key is
 * queued by an event of the Secret informer (the Secret changed or went
 * away), a root bundle change, and the next deadline (the renewal time,
 * as the reconcile's requeue-after, or the runtime's retry after a
 * failure). Each pass runs one sync:
 *
 *   root changed and the certificate no longer chains to it -> drop it
 *   no certificate, or it is due                            -> issue one
 *   the Secret (from the informer's cache) differs          -> write it
 *
 * The write decision reads the informer's cache, and every replace carries
 * the resourceVersion it was decided on: a cache that is behind costs a
 * 409 and a live GET, never a blind overwrite, and a Secret that matches
 * costs nothing, which is why our own writes (they come back as watch
 * events) cannot loop. A drift repair writes the current certificate back;
 * only the clock, a root change or a failed issuance leads to a new one,
 * and never twice within SG_ISTIODCERT_MIN_REISSUE seconds.
 *
 * Key and CSR are made by the signer's software-key helper (sg_softkey.h),
 * as for signetd's own certificate: this runs about once an hour, and the
 * key must end up in a Secret anyway, so it is a software key. The
 * certificate itself is built by our issuer from the CSR under the generic
 * profile, like every other certificate. What the Secret holds is read back
 * through sg_x509.h; this file includes no OpenSSL.
 *
 * Adoption: the certificate lives in memory and in the Secret; a new
 * leader (or a restarted process) would otherwise issue one on every
 * start. So each start first looks at the Secret and takes its
 * certificate over when it is one we would have issued and is not due.
 *
 * Secrets: the key PEM and its base64 are wiped when replaced or freed, and
 * so is every JSON copy of the Secret we build, read or are answered with
 * (sg_kube_secret_release); sg_kube wipes the bytes it sends and receives.
 * The one copy left is the informer's, which lives as long as the Secret
 * does and is shared with the threads that read it.
 */
#include "sg_istiodcert.h"
#include "sg_ctrl.h"
#include "sg_softkey.h"
#include "sg_spiffe.h"

#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_issuer.h"
#include "sg_kube_informer.h"
#include "sg_log.h"
#include "sg_names.h"
#include "sg_secret.h"
#include "sg_x509.h"
#include "sg_base64.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 30000u
#define SYNC_POLL_MS 200u
#define WAKE_MAX_MS 60000u /* re-read the wall clock at least this often */
#define WRITE_ATTEMPTS 5
#define ISSUE_TIMEOUT_NS (30ull * 1000000000u)
#define DATA_MAX (1u << 20) /* a Secret holds at most 1 MiB */
#define MAX_DNS (SG_CSR_MAX_SANS - 1)
#define CN_MAX 64 /* ub-common-name (RFC 5280 appendix A) */
#define TLS_TYPE "kubernetes.io/tls"
#define KEY_CRT "tls.crt"
#define KEY_KEY "tls.key"
#define KEY_CA "ca.crt"

/* The current certificate. The controller thread's alone while running;
 * start and stop hand it over between runs. */
typedef struct material {
	char *chain;     /* PEM: leaf + intermediates */
	char *key;       /* PEM; wiped */
	char *chain_b64; /* the Secret's data values */
	char *key_b64;   /* wiped */
	int64_t not_before, not_after;
	int64_t obtained; /* when we issued or adopted it (wall seconds) */
	char serial[2 * 20 + 1];
} material;

struct sg_istiodcert {
	sg_kube *kube;
	sg_pool *pool;
	char *ns, *name, *cn, *uri, *field_selector;
	char *dns[MAX_DNS];
	size_t ndns;
	char *dns_list; /* for logs */
	int64_t duration, renew_before;
	sg_istiodcert_key_algorithm alg;
	unsigned bits;

	sg_ctrl *ctrl;
	char key[SG_CTRL_KEY_MAX]; /* "<ns>/<name>": the one key */

	pthread_mutex_t mu; /* the fields below up to cur */
	json_t *root;       /* string; replaced whole, never modified */
	bool root_changed;
	sg_istiodcert_stats stats;

	/* The reconcile's alone while running (one worker); start and stop
	 * hand it over between runs. */
	material cur;
	bool announce; /* cur is new: say so with an Event once it is written */
};

static bool stopping(const sg_istiodcert *c)
{
	return sg_ctrl_stopping(c->ctrl);
}

/* ---- small helpers ---- */

static void wipe_free(char *s)
{
	if (s) {
		sg_wipe(s, strlen(s));
		free(s);
	}
}

static void material_free(material *m)
{
	free(m->chain);
	wipe_free(m->key);
	free(m->chain_b64);
	wipe_free(m->key_b64);
	memset(m, 0, sizeof(*m));
}

static int b64_encode(const void *p, size_t n, char **out)
{
	SG_ENSURE(n <= DATA_MAX, SG_EINVAL, "istiodcert: %zu bytes are too many for a Secret", n);
	size_t cap = sg_b64_encoded_len(SG_B64_STD, n) + 1;
	*out = malloc(cap);
	SG_ENSURE(*out, SG_EINTERNAL, "istiodcert: out of memory");
	int rc = sg_b64_encode(SG_B64_STD, p, n, *out, cap);
	if (rc < 0) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

/* Strict base64 (RFC 4648 §4, padded, no whitespace: what the API server
 * sends) into a NUL-terminated buffer; false for anything else. */
static bool b64_decode(const char *s, size_t n, uint8_t **out, size_t *len)
{
	*out = NULL;
	if (n == 0 || n / 4 * 3 > DATA_MAX)
		return false;
	uint8_t *b = malloc(n / 4 * 3 + 3);
	if (!b)
		return false;
	if (sg_b64_decode(SG_B64_STD, s, n, b, n / 4 * 3 + 2, len) < 0) {
		sg_wipe(b, n / 4 * 3 + 3);
		free(b);
		return false;
	}
	b[*len] = 0;
	*out = b;
	return true;
}

/* When m is due: renew_before before its end, or at 2/3 of its life
 * (also when the CA cut the life to renew_before or less), and never
 * within SG_ISTIODCERT_MIN_REISSUE of when we got it. */
static int64_t due_at(const sg_istiodcert *c, const material *m, bool with_floor)
{
	int64_t life = m->not_after - m->not_before;
	int64_t at = c->renew_before > 0 && c->renew_before < life ? m->not_after - c->renew_before
	                                                           : m->not_before + life * 2 / 3;
	if (with_floor && at < m->obtained + SG_ISTIODCERT_MIN_REISSUE)
		at = m->obtained + SG_ISTIODCERT_MIN_REISSUE;
	return at;
}

/* ---- certificates (sg_x509.h) ---- */

/* Whether the chain (leaf first) verifies against the root bundle. */
static bool chains_to(const char *chain, size_t len, const json_t *root)
{
	sg_x509_bundle *certs = NULL, *roots = NULL;
	bool ok = sg_x509_bundle_parse(&certs, chain, len) == SG_OK &&
	          sg_x509_bundle_parse(&roots, json_string_value(root), json_string_length(root)) == SG_OK &&
	          sg_x509_chains_to(certs, roots);
	sg_x509_bundle_free(certs);
	sg_x509_bundle_free(roots);
	return ok;
}

/* Whether the key is ours: the private key of the leaf, of our algorithm
 * and size. */
static bool key_matches(const sg_istiodcert *c, const sg_x509_bundle *certs, const char *key, size_t len)
{
	sg_x509_keyinfo ki;
	if (sg_x509_key_check(certs, 0, key, len, &ki) < 0)
		return false;
	sg_pubkey_kind want = c->alg == SG_ISTIODCERT_RSA ? SG_PUBKEY_RSA : SG_PUBKEY_EC;
	return ki.kind == want && ki.bits == c->bits;
}

/* The string value of data[key] when it is a non-empty string. */
static const char *data_str(const json_t *secret, const char *key, size_t *len)
{
	json_t *v = json_object_get(json_object_get(secret, "data"), key);
	if (!json_is_string(v) || json_string_length(v) == 0)
		return NULL;
	*len = json_string_length(v);
	return json_string_value(v);
}

/* Fills *m from secret when it holds a certificate we would have issued,
 * chaining to root and not due at now. Nothing in it is trusted: any
 * surprise is a plain "no". */
static bool adoptable(const sg_istiodcert *c, const json_t *secret, const json_t *root, int64_t now, material *m)
{
	memset(m, 0, sizeof(*m));
	const char *type = json_string_value(json_object_get(secret, "type"));
	size_t crt_len = 0, key_len = 0;
	const char *crt64 = data_str(secret, KEY_CRT, &crt_len), *key64 = data_str(secret, KEY_KEY, &key_len);
	if (!type || strcmp(type, TLS_TYPE) != 0 || !crt64 || !key64)
		return false;
	uint8_t *crt = NULL, *key = NULL;
	size_t crt_n = 0, key_n = 0;
	bool ok = b64_decode(crt64, crt_len, &crt, &crt_n) && b64_decode(key64, key_len, &key, &key_n) &&
	          !memchr(crt, 0, crt_n) && !memchr(key, 0, key_n);
	sg_x509_bundle *certs = NULL;
	sg_x509_facts f;
	ok = ok && sg_x509_bundle_parse(&certs, (const char *)crt, crt_n) == SG_OK &&
	     key_matches(c, certs, (const char *)key, key_n) &&
	     sg_x509_names_are(certs, 0, c->cn, (const char *const *)c->dns, c->ndns, c->uri) &&
	     chains_to((const char *)crt, crt_n, root) && sg_x509_get_facts(certs, 0, &f) == SG_OK;
	if (ok) {
		m->not_before = f.not_before;
		m->not_after = f.not_after;
		m->obtained = now;
		snprintf(m->serial, sizeof(m->serial), "%.*s", (int)sizeof(m->serial) - 1, f.serial);
		ok = m->not_after > m->not_before && now < due_at(c, m, false);
	}
	if (ok) {
		m->chain = (char *)crt;
		m->key = (char *)key;
		crt = key = NULL;
		m->chain_b64 = strndup(crt64, crt_len);
		m->key_b64 = strndup(key64, key_len);
		ok = m->chain_b64 && m->key_b64;
	}
	sg_x509_bundle_free(certs);
	free(crt);
	if (key) {
		sg_wipe(key, key_n);
		free(key);
	}
	if (!ok)
		material_free(m);
	return ok;
}

/* ---- issuing ---- */

/* Makes m from the issued result, taking over its key and chain (on
 * success and failure). */
static int material_make(material *m, sg_softkey_result *res, int64_t now)
{
	memset(m, 0, sizeof(*m));
	m->key = res->key_pem;
	m->chain = res->chain_pem;
	res->key_pem = res->chain_pem = NULL;
	int rc = b64_encode(m->chain, strlen(m->chain), &m->chain_b64);
	if (rc == SG_OK)
		rc = b64_encode(m->key, strlen(m->key), &m->key_b64);
	if (rc < 0) {
		material_free(m);
		return rc;
	}
	m->not_before = res->not_before;
	m->not_after = res->not_after;
	m->obtained = now;
	snprintf(m->serial, sizeof(m->serial), "%s", res->serial_hex);
	return SG_OK;
}

static void publish(sg_istiodcert *c)
{
	pthread_mutex_lock(&c->mu);
	c->stats.not_before = c->cur.not_before;
	c->stats.not_after = c->cur.not_after;
	c->stats.renew_at = c->cur.chain ? due_at(c, &c->cur, true) : 0;
	snprintf(c->stats.serial, sizeof(c->stats.serial), "%s", c->cur.serial);
	pthread_mutex_unlock(&c->mu);
}

static int issue(sg_istiodcert *c, int64_t now)
{
	const char *uris[] = {c->uri};
	sg_softkey_request req = {
		.type = c->alg == SG_ISTIODCERT_RSA ? SG_SOFTKEY_RSA
			: c->bits == 384	    ? SG_SOFTKEY_EC_P384
						    : SG_SOFTKEY_EC_P256,
		.rsa_bits = (unsigned)c->bits,
		.cn = c->cn,
		.dns = (const char *const *)c->dns,
		.ndns = c->ndns,
		.uris = uris,
		.nuris = 1,
		.ttl = c->duration,
		.ext_key_usage = SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH,
		.timeout_ns = ISSUE_TIMEOUT_NS,
	};
	sg_softkey_result res;
	int rc = sg_softkey_issue(c->pool, &req, &res);
	if (rc < 0)
		return rc;
	material m;
	rc = material_make(&m, &res, now);
	sg_softkey_result_clear(&res);
	SG_TRY(rc);
	material_free(&c->cur);
	c->cur = m;
	c->announce = true;
	pthread_mutex_lock(&c->mu);
	c->stats.issued++;
	pthread_mutex_unlock(&c->mu);
	publish(c);
	sg_log(SG_LOG_INFO, "istiodcert: certificate issued", SG_F_STR("namespace", c->ns), SG_F_STR("secret", c->name),
	       SG_F_STR("serial", c->cur.serial), SG_F_STR("dns", c->dns_list), SG_F_INT("not_after", c->cur.not_after),
	       SG_F_INT("renew_at", due_at(c, &c->cur, true)), SG_F_END);
	return SG_OK;
}

/* ---- the Secret ---- */

static bool str_is(const json_t *v, const char *want, size_t len, bool secret)
{
	if (!json_is_string(v) || json_string_length(v) != len)
		return false;
	if (secret)
		return sg_equal_ct(json_string_value(v), want, len);
	return memcmp(json_string_value(v), want, len) == 0;
}

static bool matches(const sg_istiodcert *c, const json_t *secret, const char *ca_b64)
{
	json_t *data = json_object_get(secret, "data");
	const char *type = json_string_value(json_object_get(secret, "type"));
	return type && strcmp(type, TLS_TYPE) == 0 &&
	       str_is(json_object_get(data, KEY_CRT), c->cur.chain_b64, strlen(c->cur.chain_b64), false) &&
	       str_is(json_object_get(data, KEY_KEY), c->cur.key_b64, strlen(c->cur.key_b64), true) &&
	       str_is(json_object_get(data, KEY_CA), ca_b64, strlen(ca_b64), false);
}

/* Sets our three keys in data (an object). */
static bool set_data(const sg_istiodcert *c, json_t *data, const char *ca_b64)
{
	return json_object_set_new(data, KEY_CRT, json_string(c->cur.chain_b64)) == 0 &&
	       json_object_set_new(data, KEY_KEY, json_string(c->cur.key_b64)) == 0 &&
	       json_object_set_new(data, KEY_CA, json_string(ca_b64)) == 0;
}

static json_t *desired_new(const sg_istiodcert *c, const char *ca_b64)
{
	json_t *s = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:{}}", "apiVersion", "v1", "kind", "Secret", "metadata",
	                      "name", c->name, "namespace", c->ns, "type", TLS_TYPE, "data");
	if (s && !set_data(c, json_object_get(s, "data"), ca_b64)) {
		json_decref(s);
		s = NULL;
	}
	return s;
}

/* secret corrected: type and our keys; other data keys, labels,
 * annotations and the resourceVersion (the PUT's precondition) kept. */
static json_t *desired_update(const sg_istiodcert *c, const json_t *secret, const char *ca_b64)
{
	json_t *s = json_deep_copy(secret);
	json_t *meta = json_object_get(s, "metadata");
	if (!s || !json_is_object(meta) || !json_is_string(json_object_get(meta, "resourceVersion"))) {
		json_decref(s);
		return NULL;
	}
	json_t *data = json_object_get(s, "data");
	if (!json_is_object(data)) {
		data = json_object();
		if (json_object_set_new(s, "data", data) != 0)
			data = NULL;
	}
	json_object_del(s, "stringData");
	if (!data || json_object_set_new(s, "type", json_string(TLS_TYPE)) != 0 || !set_data(c, data, ca_b64)) {
		json_decref(s);
		return NULL;
	}
	return s;
}

typedef enum outcome {
	OUT_NONE,
	OUT_CREATED,
	OUT_UPDATED,
	OUT_UNCHANGED,
} outcome;

/* After a 409 or a vanished object: the live Secret, or NULL when gone. */
static int reread(sg_istiodcert *c, const sg_kube_ref *ref, json_t **secret)
{
	sg_kube_secret_release(secret);
	int rc = sg_kube_get(c->kube, ref, secret);
	return rc == SG_ENOTFOUND ? SG_OK : rc;
}

/* Best effort: an Event on the Secret when a new certificate is in it. */
static void announce(sg_istiodcert *c, const json_t *written)
{
	const char *uid = sg_kube_meta_str(written, "uid");
	json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s, s:s*}}", "apiVersion", "v1", "kind", "Secret", "metadata",
	                        "name", c->name, "namespace", c->ns, "uid", uid);
	char until[32];
	if (!sg_clock_rfc3339(until, sizeof(until), c->cur.not_after))
		snprintf(until, sizeof(until), "?");
	char msg[256];
	snprintf(msg, sizeof(msg), "Issued certificate %s for %s, valid until %s", c->cur.serial, c->dns_list, until);
	if (!obj || sg_kube_event(c->kube, obj, "Normal", "CertificateIssued", msg, "signet", NULL) < 0)
		sg_log(SG_LOG_DEBUG, "istiodcert: cannot record an Event", SG_F_STR("error", sg_error_last()->msg),
		       SG_F_END);
	json_decref(obj);
}

static int write_once(sg_istiodcert *c, const sg_kube_ref *ref, json_t **secret, const char *ca_b64, outcome *out)
{
	/* The answer echoes the key: ask for it only when the Event needs its uid. */
	json_t *written = NULL, **answer = c->announce ? &written : NULL;
	int rc;
	if (!*secret) {
		sg_kube_ref coll = *ref;
		coll.name = NULL;
		json_t *body = desired_new(c, ca_b64);
		SG_ENSURE(body, SG_EINTERNAL, "istiodcert: out of memory");
		rc = sg_kube_create(c->kube, &coll, body, answer);
		sg_kube_secret_release(&body);
		if (rc == SG_OK)
			*out = OUT_CREATED;
		else if (sg_kube_conflict(rc))
			rc = reread(c, ref, secret); /* AlreadyExists: the cache is behind */
	} else {
		const char *type = json_string_value(json_object_get(*secret, "type"));
		if (!type || strcmp(type, TLS_TYPE) != 0 || json_is_true(json_object_get(*secret, "immutable"))) {
			/* type is immutable, and so is the data of an immutable Secret */
			sg_log(SG_LOG_WARN, "istiodcert: replacing a Secret of the wrong type or immutable",
			       SG_F_STR("namespace", c->ns), SG_F_STR("secret", c->name), SG_F_STR("type", type),
			       SG_F_END);
			/* Only the object seen, by its uid: the informer's copy can
			 * be behind our own replacement (a second pass 24 ms after
			 * the first saw the old Opaque Secret again, and a delete by
			 * name removed the new one and recreated it). A newer
			 * object of the name answers 409: look at it instead. */
			rc = sg_kube_delete_seen(c->kube, ref, sg_kube_meta_str(*secret, "uid"), NULL);
			if (rc == SG_OK) {
				pthread_mutex_lock(&c->mu);
				c->stats.recreates++;
				pthread_mutex_unlock(&c->mu);
			}
			if (rc == SG_OK || rc == SG_ENOTFOUND) {
				sg_kube_secret_release(secret);
				rc = SG_OK;
			} else if (sg_kube_conflict(rc)) {
				rc = reread(c, ref, secret);
			}
			return rc;
		}
		json_t *body = desired_update(c, *secret, ca_b64);
		if (!body)
			return reread(c, ref, secret);
		rc = sg_kube_update(c->kube, ref, body, answer);
		sg_kube_secret_release(&body);
		if (rc == SG_OK)
			*out = OUT_UPDATED;
		else if (sg_kube_conflict(rc) || rc == SG_ENOTFOUND)
			rc = reread(c, ref, secret);
	}
	if (rc == SG_OK && *out != OUT_NONE && c->announce) {
		c->announce = false;
		announce(c, written);
	}
	sg_kube_secret_release(&written);
	return rc;
}

static int write_secret(sg_istiodcert *c, const json_t *root)
{
	char *ca_b64 = NULL;
	SG_TRY(b64_encode(json_string_value(root), json_string_length(root), &ca_b64));
	sg_kube_ref ref = {.version = "v1", .resource = "secrets", .ns = c->ns, .name = c->name};
	/* Our own copy, so that every copy of the key this function lets go
	 * of (the cache's, the server's answers) can be wiped: the informer's
	 * is shared with other threads. */
	json_t *cached = sg_kube_informer_get(sg_ctrl_informer(c->ctrl, 0), c->ns, c->name);
	json_t *secret = cached ? json_deep_copy(cached) : NULL;
	json_decref(cached);
	if (cached && !secret) {
		free(ca_b64);
		return sg_error_set(SG_EINTERNAL, "istiodcert: out of memory");
	}
	outcome out = OUT_NONE;
	int rc = SG_OK;
	for (int attempt = 0; attempt < WRITE_ATTEMPTS && out == OUT_NONE; attempt++) {
		if (secret && matches(c, secret, ca_b64)) {
			out = OUT_UNCHANGED;
			break;
		}
		if (stopping(c))
			break;
		rc = write_once(c, &ref, &secret, ca_b64, &out);
		if (rc < 0)
			break;
	}
	sg_kube_secret_release(&secret);
	free(ca_b64);
	if (rc == SG_OK && out == OUT_NONE && !stopping(c))
		rc = sg_error_set(SG_EBUSY, "istiodcert: %s/%s kept changing under us (%d attempts)", c->ns, c->name,
		                  WRITE_ATTEMPTS);
	if (rc < 0 || out == OUT_NONE)
		return rc;
	pthread_mutex_lock(&c->mu);
	uint64_t *n = out == OUT_CREATED   ? &c->stats.creates
	              : out == OUT_UPDATED ? &c->stats.updates
	                                   : &c->stats.unchanged;
	(*n)++;
	pthread_mutex_unlock(&c->mu);
	if (out != OUT_UNCHANGED)
		sg_log(SG_LOG_INFO, out == OUT_CREATED ? "istiodcert: Secret created" : "istiodcert: Secret updated",
		       SG_F_STR("namespace", c->ns), SG_F_STR("secret", c->name), SG_F_STR("serial", c->cur.serial),
		       SG_F_END);
	return SG_OK;
}

/* ---- the controller thread ---- */

static int sync_once(sg_istiodcert *c, const json_t *root, bool root_changed)
{
	if (stopping(c))
		return SG_OK;
	int64_t now = sg_wall_seconds();
	if (root_changed && c->cur.chain && !chains_to(c->cur.chain, strlen(c->cur.chain), root)) {
		sg_log(SG_LOG_INFO, "istiodcert: the certificate does not chain to the new root bundle; re-issuing",
		       SG_F_STR("serial", c->cur.serial), SG_F_END);
		material_free(&c->cur);
		publish(c);
	}
	int issued = SG_OK;
	sg_error issue_err = {0};
	if (!c->cur.chain || now >= due_at(c, &c->cur, true)) {
		issued = issue(c, now);
		if (issued < 0 && (!c->cur.chain || now >= c->cur.not_after))
			return issued; /* nothing valid to write */
		if (issued < 0)
			sg_error_save(&issue_err); /* keep the still-valid one in place; retry soon */
	}
	int rc = write_secret(c, root);
	if (issued < 0 && rc == SG_OK) {
		sg_error_restore(&issue_err);
		return issued;
	}
	return rc;
}

/* Adopts the Secret's certificate when it is one we would have issued. */
static void adopt(sg_istiodcert *c)
{
	pthread_mutex_lock(&c->mu);
	json_t *root = json_incref(c->root);
	pthread_mutex_unlock(&c->mu);
	json_t *secret = sg_kube_informer_get(sg_ctrl_informer(c->ctrl, 0), c->ns, c->name);
	material m;
	if (secret && adoptable(c, secret, root, sg_wall_seconds(), &m)) {
		if (c->cur.chain_b64 && strcmp(c->cur.chain_b64, m.chain_b64) == 0) {
			material_free(&m); /* what we wrote last time we led */
		} else {
			material_free(&c->cur);
			c->cur = m;
			c->announce = false;
			pthread_mutex_lock(&c->mu);
			c->stats.adopted++;
			pthread_mutex_unlock(&c->mu);
			publish(c);
			sg_log(SG_LOG_INFO, "istiodcert: adopted the certificate in the Secret",
			       SG_F_STR("namespace", c->ns), SG_F_STR("secret", c->name),
			       SG_F_STR("serial", c->cur.serial), SG_F_INT("not_after", c->cur.not_after), SG_F_END);
		}
	}
	json_decref(secret);
	json_decref(root);
}

/* When to look again after a success: at the renewal time, but at least
 * every WAKE_MAX_MS (the wall clock may jump). */
static uint64_t next_wake_ms(const sg_istiodcert *c)
{
	int64_t left = c->cur.chain ? due_at(c, &c->cur, true) - sg_wall_seconds() : 0;
	uint64_t ms = left <= 0 ? 1 : (uint64_t)left * 1000u;
	return ms > WAKE_MAX_MS ? WAKE_MAX_MS : ms;
}

/* ---- the controller's callbacks ---- */

/* The runtime's hooks. The bundle may have changed while we were stopped:
 * the first pass of each run checks the chain once. */
static int starting(sg_ctrl *ctrl, void *arg)
{
	(void)ctrl;
	sg_istiodcert *c = arg;
	pthread_mutex_lock(&c->mu);
	c->root_changed = true;
	pthread_mutex_unlock(&c->mu);
	sg_log(SG_LOG_INFO, "istiodcert: starting", SG_F_STR("namespace", c->ns), SG_F_STR("secret", c->name),
	       SG_F_STR("dns", c->dns_list), SG_F_STR("uri", c->uri), SG_F_END);
	return SG_OK;
}

static int reconcile(sg_ctrl *ctrl, const char *key, sg_ctrl_result *res, void *arg)
{
	(void)ctrl, (void)key;
	sg_istiodcert *c = arg;
	pthread_mutex_lock(&c->mu);
	bool root_changed = c->root_changed;
	c->root_changed = false;
	json_t *root = json_incref(c->root);
	pthread_mutex_unlock(&c->mu);
	int rc = sync_once(c, root, root_changed);
	json_decref(root);
	if (rc == SG_OK)
		res->requeue_after_ms = next_wake_ms(c);
	return rc;
}

static void synced(sg_ctrl *ctrl, void *arg)
{
	(void)ctrl;
	adopt(arg);
}

/* There is one key, whether the Secret exists or not. */
static void resync(sg_ctrl *ctrl, void *arg)
{
	sg_istiodcert *c = arg;
	sg_ctrl_add(ctrl, c->key);
}

/* Every event of the Secret informer is about our Secret (the field
 * selector names it). */
static void map_secret(sg_ctrl *ctrl, const json_t *obj, void *arg)
{
	(void)obj;
	sg_istiodcert *c = arg;
	sg_ctrl_add(ctrl, c->key);
}

/* ---- options ---- */

/* A DNS name of DNS-1123 labels of 1..63 bytes, at most 253 bytes in all:
 * a Kubernetes object name (a DNS-1123 subdomain, labels capped as DNS
 * caps them), or with fold (DNS ignores case) and wildcard ("*." in
 * front) a certificate's DNS name. */
static bool dns_name_ok(const char *s, bool fold, bool wildcard)
{
	if (wildcard && strncmp(s, "*.", 2) == 0)
		s += 2;
	size_t n = strlen(s);
	if (n == 0 || n > 253)
		return false;
	char low[254];
	for (size_t i = 0; i <= n; i++)
		low[i] = (char)(fold && s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
	for (const char *p = low; *p;) {
		const char *dot = strchr(p, '.');
		size_t len = dot ? (size_t)(dot - p) : strlen(p);
		if (!sg_names_dns_label(p, len, SG_NAMES_LABEL_MAX))
			return false;
		p += len;
		if (*p == '.' && !*++p)
			return false; /* no trailing dot */
	}
	return true;
}

static int add_dns(sg_istiodcert *c, const char *name)
{
	for (size_t i = 0; i < c->ndns; i++)
		if (strcmp(c->dns[i], name) == 0)
			return SG_OK;
	SG_ENSURE(c->ndns < MAX_DNS, SG_EINVAL, "istiodcert: more than %d DNS names", MAX_DNS);
	c->dns[c->ndns] = strdup(name);
	SG_ENSURE(c->dns[c->ndns], SG_EINTERNAL, "istiodcert: out of memory");
	c->ndns++;
	return SG_OK;
}

typedef int (*item_fn)(sg_istiodcert *c, const char *item);

/* Calls fn for each non-empty, space-trimmed item of a comma-separated
 * list. */
static int each_item(sg_istiodcert *c, const char *csv, const char *what, item_fn fn)
{
	for (const char *p = csv ? csv : ""; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *q = p;
		size_t n = len;
		while (n && (*q == ' ' || *q == '\t'))
			q++, n--;
		while (n && (q[n - 1] == ' ' || q[n - 1] == '\t'))
			n--;
		char item[256];
		SG_ENSURE(n < sizeof(item), SG_EINVAL, "istiodcert: %s: an item is longer than 253 bytes", what);
		memcpy(item, q, n);
		item[n] = 0;
		if (n)
			SG_TRY(fn(c, item));
		p += len;
		if (*p == ',')
			p++;
	}
	return SG_OK;
}

static int add_revision(sg_istiodcert *c, const char *rev)
{
	if (strcmp(rev, "default") == 0)
		return SG_OK;
	char name[320];
	snprintf(name, sizeof(name), "istiod-%s.%s.svc", rev, c->ns);
	SG_ENSURE(sg_names_dns_label(rev, strlen(rev), SG_NAMES_LABEL_MAX) && strlen(rev) <= 63 - strlen("istiod-") &&
	              dns_name_ok(name, false, false),
	          SG_EINVAL, "istiodcert: revision \"%.64s\" does not make a DNS name (istiod-<rev>.<ns>.svc)", rev);
	return add_dns(c, name);
}

static int add_additional(sg_istiodcert *c, const char *name)
{
	SG_ENSURE(dns_name_ok(name, true, true), SG_EINVAL, "istiodcert: \"%.253s\" is not a DNS name", name);
	return add_dns(c, name);
}

static int copy_str(const char *s, char **out)
{
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "istiodcert: out of memory");
	return SG_OK;
}

static int check_key(sg_istiodcert *c, const sg_istiodcert_options *o)
{
	c->alg = o->key_algorithm;
	switch (o->key_algorithm) {
	case SG_ISTIODCERT_RSA:
		c->bits = o->key_size ? o->key_size : 2048;
		SG_ENSURE(c->bits >= 2048 && c->bits <= 8192, SG_EINVAL,
		          "istiodcert: RSA key size %u out of range (2048..8192)", c->bits);
		return SG_OK;
	case SG_ISTIODCERT_ECDSA:
		c->bits = o->key_size ? o->key_size : 256;
		SG_ENSURE(c->bits == 256 || c->bits == 384, SG_EINVAL, "istiodcert: ECDSA key size %u (256 or 384)",
		          c->bits);
		return SG_OK;
	}
	SG_BAIL(SG_EINVAL, "istiodcert: unknown key algorithm %d", (int)o->key_algorithm);
}

static int check_root(const char *pem, size_t len, json_t **out)
{
	SG_ENSURE(pem && len > 0 && len <= SG_ISTIODCERT_ROOT_MAX, SG_EINVAL,
	          "istiodcert: the root bundle must be 1..%u bytes", SG_ISTIODCERT_ROOT_MAX);
	SG_ENSURE(!memchr(pem, 0, len), SG_EINVAL, "istiodcert: the root bundle holds a NUL byte");
	sg_x509_bundle *b = NULL;
	bool ok = sg_x509_bundle_parse(&b, pem, len) == SG_OK;
	sg_x509_bundle_free(b);
	SG_ENSURE(ok, SG_EINVAL, "istiodcert: the root bundle holds no PEM certificate");
	*out = json_stringn(pem, len);
	SG_ENSURE(*out, SG_EINVAL, "istiodcert: the root bundle is not UTF-8 text");
	return SG_OK;
}

static int init(sg_istiodcert *c, const sg_istiodcert_options *o, const char *root_pem, size_t len)
{
	SG_ENSURE(o->kube && o->pool, SG_EINVAL, "istiodcert: needs a Kubernetes client and a signer pool");
	c->kube = o->kube;
	c->pool = o->pool;
	const char *ns = o->ns ? o->ns : SG_ISTIODCERT_NAMESPACE;
	const char *name = o->secret_name ? o->secret_name : SG_ISTIODCERT_SECRET;
	const char *td = o->trust_domain ? o->trust_domain : SG_ISTIODCERT_TRUST_DOMAIN;
	SG_ENSURE(sg_names_dns_label(ns, strlen(ns), SG_NAMES_LABEL_MAX), SG_EINVAL,
	          "istiodcert: invalid namespace \"%.64s\"", ns);
	SG_ENSURE(dns_name_ok(name, false, false), SG_EINVAL, "istiodcert: invalid Secret name \"%.253s\"", name);
	SG_ENSURE(sg_trust_domain_valid(td), SG_EINVAL, "istiodcert: invalid trust domain \"%.255s\"", td);
	c->duration = o->duration ? o->duration : SG_ISTIODCERT_DURATION;
	SG_ENSURE(c->duration >= SG_ISTIODCERT_DURATION_MIN && c->duration <= SG_ISTIODCERT_DURATION_MAX, SG_EINVAL,
	          "istiodcert: duration %lld s out of range (%d..%lld)", (long long)c->duration,
	          SG_ISTIODCERT_DURATION_MIN, (long long)SG_ISTIODCERT_DURATION_MAX);
	c->renew_before = o->renew_before;
	SG_ENSURE(c->renew_before >= 0 && c->duration - c->renew_before >= SG_ISTIODCERT_MIN_REISSUE, SG_EINVAL,
	          "istiodcert: renew-before %lld s must be less than the duration %lld s by %d s at least",
	          (long long)c->renew_before, (long long)c->duration, SG_ISTIODCERT_MIN_REISSUE);
	SG_TRY(check_key(c, o));
	SG_TRY(check_root(root_pem, len, &c->root));
	SG_TRY(copy_str(ns, &c->ns));
	SG_TRY(copy_str(name, &c->name));

	char buf[600];
	snprintf(buf, sizeof(buf), "istiod.%s.svc", ns);
	SG_TRY(add_dns(c, buf));
	if (strlen(buf) <= CN_MAX) /* longer names live in the SAN only */
		SG_TRY(copy_str(buf, &c->cn));
	SG_TRY(each_item(c, o->revisions, "revisions", add_revision));
	SG_TRY(each_item(c, o->additional_dns_names, "additional DNS names", add_additional));
	char tdn[SG_TRUST_DOMAIN_MAX + 1];
	SG_TRY(sg_trust_domain_normalize(td, tdn, sizeof(tdn)));
	snprintf(buf, sizeof(buf), "spiffe://%s/ns/%s/sa/%s", tdn, ns, SG_ISTIODCERT_SERVICE_ACCOUNT);
	SG_TRY(copy_str(buf, &c->uri));
	snprintf(buf, sizeof(buf), "metadata.name=%s", name);
	SG_TRY(copy_str(buf, &c->field_selector));
	size_t total = 1;
	for (size_t i = 0; i < c->ndns; i++)
		total += strlen(c->dns[i]) + 1;
	c->dns_list = calloc(1, total);
	SG_ENSURE(c->dns_list, SG_EINTERNAL, "istiodcert: out of memory");
	for (size_t i = 0; i < c->ndns; i++) {
		if (i)
			strcat(c->dns_list, ",");
		strcat(c->dns_list, c->dns[i]);
	}
	return SG_OK;
}

/* ---- life cycle ---- */

int sg_istiodcert_new(sg_istiodcert **out, const sg_istiodcert_options *o, const char *root_pem, size_t len)
{
	*out = NULL;
	SG_ENSURE(o, SG_EINVAL, "istiodcert: no options");
	sg_istiodcert *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "istiodcert: out of memory");
	pthread_mutex_init(&c->mu, NULL);
	int rc = init(c, o, root_pem, len);
	if (rc == SG_OK) {
		snprintf(c->key, sizeof(c->key), "%s/%s", c->ns, c->name);
		sg_ctrl_watch secrets = {
			.ref = {.version = "v1", .resource = "secrets", .ns = c->ns},
			.field_selector = c->field_selector,
			.map = map_secret,
		};
		sg_ctrl_def def = {
		    .name = "istiodcert",
		    .kube = c->kube,
		    .watches = &secrets,
		    .nwatches = 1,
		    .reconcile = reconcile,
		    .synced = synced,
		    .resync = resync,
		    .starting = starting,
		    .arg = c,
		};
		rc = sg_ctrl_new(&c->ctrl, &def);
	}
	if (rc < 0) {
		sg_istiodcert_free(c);
		return rc;
	}
	*out = c;
	return SG_OK;
}

sg_ctrl *sg_istiodcert_controller(sg_istiodcert *c)
{
	return c->ctrl;
}

int sg_istiodcert_set_root(sg_istiodcert *c, const char *root_pem, size_t len)
{
	json_t *root = NULL;
	SG_TRY(check_root(root_pem, len, &root));
	pthread_mutex_lock(&c->mu);
	bool changed = !json_equal(root, c->root);
	if (changed) {
		json_decref(c->root);
		c->root = root;
		root = NULL;
		c->root_changed = true;
	}
	pthread_mutex_unlock(&c->mu);
	json_decref(root);
	if (changed) {
		sg_ctrl_add(c->ctrl, c->key);
		sg_log(SG_LOG_INFO, "istiodcert: root bundle changed", SG_F_STR("namespace", c->ns),
		       SG_F_STR("secret", c->name), SG_F_END);
	}
	return SG_OK;
}

void sg_istiodcert_stats_get(sg_istiodcert *c, sg_istiodcert_stats *out)
{
	sg_ctrl_stats cs;
	sg_ctrl_stats_get(c->ctrl, &cs);
	pthread_mutex_lock(&c->mu);
	*out = c->stats;
	pthread_mutex_unlock(&c->mu);
	out->errors = cs.errors;
}

void sg_istiodcert_free(sg_istiodcert *c)
{
	if (!c)
		return;
	sg_ctrl_free(c->ctrl); /* stops first: nothing of ours writes once it returns */
	material_free(&c->cur);
	json_decref(c->root);
	free(c->ns);
	free(c->name);
	free(c->cn);
	free(c->uri);
	free(c->field_selector);
	free(c->dns_list);
	for (size_t i = 0; i < c->ndns; i++)
		free(c->dns[i]);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
