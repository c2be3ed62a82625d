/*
 * sg_hsm: the PKCS#11 adapter (see sg_hsm.h for the contract).
 *
 * Shape of the thing:
 *
 *   module registry   one entry per module path, process-wide, refcounted:
 *                     two sg_hsm handles on the same library share one
 *                     C_Initialize. A module someone else initialised
 *                     (CKR_CRYPTOKI_ALREADY_INITIALIZED) is never finalised
 *                     by us. Libraries stay mapped after the last release:
 *                     unloading a module that pulled in OpenSSL providers and
 *                     threads is fragile, and a mapping costs nothing.
 *   sg_hsm            the tokens the token URI selects, all holding the same
 *                     key (checked: identical SubjectPublicKeyInfo). Each token
 *                     keeps one RW "admin" session for its whole life: login
 *                     state belongs to the application and ends with its last
 *                     session, so the admin session pins it, and provisioning
 *                     calls use it.
 *   sg_hsm_session    one RO session per signer thread on one token (round
 *                     robin), the key handle found in that session and, with
 *                     copy_key, a session-object copy of the key (SoftHSM2
 *                     re-reads its file store on every C_SignInit for token
 *                     objects; a session copy avoids that).
 *
 * Locks: h->find_lock serialises a session's key search and session copy
 * (SoftHSM2 shows half-made copies to other sessions' searches);
 * h->open_lock serialises C_OpenSession (not thread-safe on
 * tpm2-pkcs11); token->lock serialises (re-)login and admin-session use.
 * Per module, reinit_lock admits one re-init at a time and users_lock guards
 * the lists of handles and sessions a re-init walks. The order is reinit_lock,
 * registry_lock, users_lock, token->lock, open_lock / find_lock, never the
 * reverse. The signing path takes none of them: C_SignInit + C_Sign on the
 * caller's own session, relaxed atomic counters, and the session's in-call
 * flag (below).
 *
 * Recovery: a fault from the list in sg_hsm.h (plus stale object handles and
 * a stuck operation, which is what a foreign C_Logout or C_CloseAllSessions
 * leaves behind) marks the session broken. The session is closed and opened
 * again, logged in when C_GetSessionInfo says the login is gone, the key found
 * again and re-copied; then the signature is retried. Attempts after the
 * first wait backoff_ms, doubling, bounded by max_retries and the deadline;
 * only the broken session waits. A PIN the token refuses marks the token
 * failed for good: signet never presents that PIN again (tokens lock PINs
 * after a few failures).
 *
 * Some modules cannot be cured by a new session: p11-kit's client, once the
 * server process at the other end of its socket is gone, answers
 * CKR_DEVICE_ERROR to everything (C_OpenSession too) until it is finalised
 * and initialised again, which reconnects. So when a session's reopen fails
 * with such a module fault (is_module_fault) REINIT_AFTER times in a row,
 * and signet made the module's C_Initialize itself (owner), the module is
 * re-initialised (module_reinit):
 *   - m->closing is set and every session's in-call flag awaited: each
 *     PKCS#11 call on a session runs between call_enter and call_leave, a
 *     seq_cst store of the session's own flag and a load of m->closing
 *     (Dekker: either the re-init sees the flag or the caller sees closing
 *     and stays out). A per-module counter would do the same with one shared
 *     cache line bouncing between signer cores on every signature, and a
 *     per-module rwlock with two atomic RMWs on one; the flag costs a store
 *     to a line only its thread writes. Admin-session users are kept out by
 *     the token locks, sessions opening or closing by users_lock.
 *   - C_Finalize, C_Initialize with the first call's arguments (and
 *     SOFTHSM2_CONF), m->gen bumped: every session handle from before is
 *     stale and is dropped without C_CloseSession (a module that numbers
 *     afresh may have given that number to another thread's new session).
 *   - each token of each handle found again by its token URI, label and
 *     serial number (slot IDs may change), its admin session reopened and
 *     logged in with the kept PIN, and its key checked to be the same
 *     (SubjectPublicKeyInfo); signing sessions reopen, re-find and re-copy
 *     the key on their next signature.
 * One attempt at a time (a thread finding another one running backs off as
 * for any failed reopen); after a failed one (server still away: p11-kit's
 * client then initialises fine but lists no slot) the next waits
 * REINIT_BACKOFF_MS, doubling up to REINIT_MAX_BACKOFF_MS. Signers trigger
 * attempts as their reopens fail; the health probes (sg_hsm_probe.c), or
 * without them sg_hsm_stats_get, which readiness polls, make a due one too,
 * so that the module comes back without traffic.
 * Every attempt is logged once with its reason and outcome (CKR names and
 * labels, never the PIN) and successes are counted in sg_hsm_stats.reinits.
 * A module someone else initialised (CKR_CRYPTOKI_ALREADY_INITIALIZED) is
 * never finalised by us, so never re-initialised either.
 *
 * Failing tokens: a token whose sessions reopen fine but whose signatures
 * keep failing (a device that answers C_Sign with CKR_DEVICE_ERROR however
 * often it is asked) is as useless as one that cannot be reached. So
 * signatures given up on (recovery exhausted, or a module error that is not
 * the caller's input) count in token->failing, and FAILING_DOWN of them in a
 * row mark the token down for sg_hsm_stats (readiness), whatever a later
 * reopen says; a good signature on it clears the count. With no traffic
 * (readiness sends it elsewhere) nothing would ever clear it, so
 * sg_hsm_stats_get, which readiness polls, makes a test signature over a
 * fixed input on the token's admin session, at most every PROBE_EVERY_MS
 * and only while the token is failing; one that succeeds brings it back.
 * With health probes running (sg_hsm_probe.c) their threads make that test
 * signature instead, on a session of their own, and also notice an idle
 * token that goes silent or fails; sg_hsm_stats_get then only reads.
 *
 * Handles: a module that lost its sessions behind our back (a device reset,
 * C_CloseAllSessions by someone else, SoftHSM2 finalised and initialised
 * again) may number new sessions afresh: SoftHSM2 hands out the lowest free
 * number. Then one thread's stale handle can be another thread's new
 * session, and two threads in one PKCS#11 session crash SoftHSM2 (seen under
 * ASan with p11_fault's crash) or mix their operations. So a handle that a
 * call finds invalid (CKR_SESSION_HANDLE_INVALID / CLOSED) is forgotten, not
 * closed (the number may be someone else's by now), and before its session
 * reopens every handle of the module is checked (sessions_recheck): with
 * m->closing set and every session out of its call, as for a re-init, each
 * signing session's handle that is dead, or held twice (by two sessions, or
 * a session and an admin session), is revoked (forgotten by its owner at
 * its next call, never used again), and a dead admin handle dropped; no
 * session opens meanwhile, so no new session can take a number a stale
 * holder still means to use. When a call in flight does not return within
 * RECHECK_DRAIN_MS (or another check or a re-init holds the module), the
 * check is not made now, and the session that saw the lost handle does not
 * reopen until a later attempt's check succeeds: the risk never returns,
 * at the price of that signature's retries (stress run under ASan: a
 * skipped check let SoftHSM2 crash in C_Sign).
 *
 * Signing load: each signing call (C_SignInit + C_Sign) is timed by the
 * monotonic clock: the token's latency (the per-token histogram,
 * sg_hsm_on_sign). At most one call per token in WAIT_SAMPLE_GAP_NS also
 * reads the calling thread's scheduler times around it (its CPU clock,
 * and its time runnable in a queue from /proc/thread-self/schedstat): the
 * wall time less both is how long the thread slept waiting for the token,
 * which is what tells a latency-bound token (a network HSM: the thread
 * sleeps in a socket read) from a compute-bound one (SoftHSM2 signs on the
 * caller's CPU), whatever the absolute times and however busy the host
 * (the thread CPU clock alone would count preemption by signet's other
 * threads as waiting, and a saturated pool would grow itself further).
 * The signer pool sizes itself from it (sg_pool.c). The sampling is by
 * time, not by count: one call in eight, on a fast token signing 10,000
 * times a second, cost 5 % of the server's CPU per certificate
 * (perf/README.md section 4); a hundred samples a second are more than the
 * pool's estimate needs, and a slow token, with few calls, still has many
 * of them measured.
 *
 * Per token, the signer sessions are capped by what C_GetTokenInfo states
 * (ulMaxSessionCount less two, kept for the admin session and a health
 * probe's; CK_EFFECTIVELY_INFINITE and CK_UNAVAILABLE_INFORMATION state no
 * limit): sg_hsm_session_open skips a token at its cap, and answers
 * SG_EBUSY when every token is.
 *
 * No PIN ever reaches a message: errors name the function, token label and
 * CKR code only.
 *
 * Files: this one is the adapter's core, all of the above. Apart from it,
 * each with its own design note: sg_hsm_probe.c (the health probes'
 * threads; the calls they make are here), sg_hsm_ckr.c (CKR names and categories),
 * sg_hsm_provision.c (token initialisation and key generation, for
 * signetctl init) and sg_hsm_check.c (signetctl hsm-check). What they share
 * with this file (the types, the hsm_ helpers) is in
 * private/sg_hsm_impl.h.
 */
#include "sg_hsm.h"

#include "sg_clock.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_hsm_impl.h"
#include "sg_log.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_RETRIES 5
#define DEFAULT_BACKOFF_MS 20
#define MAX_BACKOFF_MS 2000
#define MODULUS_MAX 1024      /* bytes read from CKA_MODULUS before deciding */
#define REINIT_AFTER 2        /* reopens failing with a module fault, in a row, before a re-init */
#define REINIT_BACKOFF_MS 200 /* wait after a failed re-init; doubles per failure */
#define REINIT_MAX_BACKOFF_MS 10000
#define DRAIN_MS 10000       /* longest wait for calls in flight before a re-init gives up */
#define FAILING_DOWN 3       /* signatures given up in a row on a token before it counts as down */
#define PROBE_EVERY_MS 1000  /* test signatures on a failing token, at most this often */
#define PROBES_BEFORE_REINIT 5 /* failed test signatures in a row before the module is re-initialised */
#define WAIT_SAMPLE_GAP_NS 10000000ull /* at most one signing call per token per 10 ms has its wait measured */
#define SIGNED_STEP_NS 10000000ull     /* token.signed_ns is rewritten at most once per 10 ms */
#define SLEPT_MIN_NS 20000u            /* a measured call that slept this long waited for the token */
#define RESERVED_SESSIONS 2    /* of a token's ulMaxSessionCount: the admin session and a probe's */
#define RECHECK_DRAIN_MS 250 /* longest wait for calls in flight before a handle re-check gives up */

/* ------------------------------------------------------------------ */
/* Module registry                                                    */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static module *registry;

static bool str_eq_opt(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int module_load(module **out, const char *path)
{
	dlerror();
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	SG_ENSURE(dl, SG_ENOTFOUND, "cannot load PKCS#11 module %s: %s", path, dlerror());
	CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(dl, "C_GetFunctionList");
	if (!gfl) {
		dlclose(dl);
		SG_BAIL(SG_EINVAL, "%s is not a PKCS#11 module (no C_GetFunctionList)", path);
	}
	CK_FUNCTION_LIST_PTR f = NULL;
	CK_RV rv = gfl(&f);
	if (rv != CKR_OK || !f) {
		ckr_buf b;
		dlclose(dl);
		SG_BAIL(SG_EHSM, "PKCS#11 C_GetFunctionList of %s: %s", path, hsm_ckr_name(rv, &b));
	}
	module *m = calloc(1, sizeof(*m));
	char *p = strdup(path);
	if (!m || !p) {
		free(m);
		free(p);
		dlclose(dl);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	if (pthread_mutex_init(&m->reinit_lock, NULL) != 0 || pthread_mutex_init(&m->users_lock, NULL) != 0) {
		free(m);
		free(p);
		dlclose(dl);
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	}
	m->path = p;
	m->dl = dl;
	m->f = f;
	atomic_init(&m->owner, false);
	atomic_init(&m->closing, false);
	atomic_init(&m->live, false);
	atomic_init(&m->wanted, false);
	atomic_init(&m->gen, 0);
	atomic_init(&m->due_ns, 0);
	*out = m;
	return SG_OK;
}

/* C_Initialize with the arguments of the first one; registry lock held. The
 * environment is changed (SOFTHSM2_CONF) only under that lock and only right
 * before a C_Initialize of ours. */
static CK_RV module_initialize(module *m, const char *conf, const char *init_reserved)
{
	if (conf && setenv("SOFTHSM2_CONF", conf, 1) != 0)
		return CKR_HOST_MEMORY;
	CK_C_INITIALIZE_ARGS args;
	memset(&args, 0, sizeof(args));
	args.flags = CKF_OS_LOCKING_OK;
	args.pReserved = (void *)init_reserved; /* NSS reads it, never writes */
	return m->f->C_Initialize(&args);
}

/* The CKR of this thread's last C_Initialize that hsm_module_acquire saw fail
 * (CKR_OK otherwise): sg_hsm_check tells "needs an init string" from it. */
_Thread_local CK_RV hsm_acquire_ckr;

/* Finds or loads the module at path and makes sure it is initialised. */
int hsm_module_acquire(module **out, const char *path, const char *conf, const char *init_reserved)
{
	int rc = SG_EHSM;
	pthread_mutex_lock(&registry_lock);
	module *m = registry;
	while (m && strcmp(m->path, path) != 0)
		m = m->next;
	if (!m) {
		SG_TRY_GOTO(rc, module_load(&m, path), unlock);
		m->next = registry;
		registry = m;
	}
	if (m->refs == 0) {
		CK_RV rv = module_initialize(m, conf, init_reserved);
		if (rv != CKR_OK && rv != CKR_CRYPTOKI_ALREADY_INITIALIZED) {
			ckr_buf b;
			hsm_acquire_ckr = rv;
			rc = sg_error_set(SG_EHSM, "PKCS#11 C_Initialize of %s: %s", path, hsm_ckr_name(rv, &b));
			goto unlock;
		}
		m->owner = rv == CKR_OK;
		free(m->conf);
		free(m->init_reserved);
		m->conf = NULL;
		m->init_reserved = NULL;
		if ((conf && !(m->conf = strdup(conf))) ||
		    (init_reserved && !(m->init_reserved = strdup(init_reserved)))) {
			if (m->owner)
				m->f->C_Finalize(NULL);
			m->owner = false;
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
			goto unlock;
		}
		m->live = true;
		m->wanted = false;
		m->due_ns = 0;
	} else if (conf && !str_eq_opt(conf, m->conf)) {
		/* SoftHSM2 reads its config once per C_Initialize: a second
		 * handle cannot see a different token directory. */
		rc = sg_error_set(SG_EINVAL, "PKCS#11 module %s is already initialised with another SOFTHSM2_CONF (%s)",
		                  path, m->conf ? m->conf : "from the environment");
		goto unlock;
	}
	m->refs++;
	*out = m;
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&registry_lock);
	return rc;
}

void hsm_module_release(module *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&registry_lock);
	if (--m->refs == 0 && m->owner) {
		if (m->live) /* not after a re-init that finalised and failed */
			m->f->C_Finalize(NULL);
		m->owner = false;
		m->live = false;
	}
	pthread_mutex_unlock(&registry_lock);
}

/* ------------------------------------------------------------------ */
/* Types                                                              */

/* token, module, struct sg_hsm and struct sg_hsm_session are in
 * private/sg_hsm_impl.h: the other files of hsm/ use them too. */

/* ------------------------------------------------------------------ */
/* Faults and errors                                                  */

static void record_fault(sg_hsm *h, const char *fn, CK_RV rv)
{
	ckr_buf b;
	atomic_fetch_add_explicit(&h->faults, 1, memory_order_relaxed);
	pthread_mutex_lock(&h->fault_lock);
	snprintf(h->last_fault, sizeof(h->last_fault), "%s: %s", fn, hsm_ckr_name(rv, &b));
	pthread_mutex_unlock(&h->fault_lock);
}

/* The CKR of this thread's last hsm_p11_fail, for the re-init decision (the
 * error detail carries only text). */
static _Thread_local CK_RV last_ckr;

/* Records the fault and the error detail; returns the category. */
int hsm_p11_fail(sg_hsm *h, const token *t, const char *fn, CK_RV rv)
{
	ckr_buf b;
	last_ckr = rv;
	if (h)
		record_fault(h, fn, rv);
	return sg_error_set(hsm_ckr_category(rv), "PKCS#11 %s on token '%s': %s", fn, t ? t->label : "?",
	                    hsm_ckr_name(rv, &b));
}

void hsm_trim_label(char out[LABEL_LEN + 1], const CK_UTF8CHAR in[LABEL_LEN])
{
	size_t n = LABEL_LEN;
	while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\0'))
		n--;
	memcpy(out, in, n);
	out[n] = '\0';
}

/* ------------------------------------------------------------------ */
/* URIs                                                               */

int hsm_uri_parse(P11KitUri **out, const char *what, const char *s, P11KitUriType type)
{
	SG_ENSURE(s && *s, SG_EINVAL, "%s URI missing", what);
	P11KitUri *uri = p11_kit_uri_new();
	SG_ENSURE(uri, SG_EINTERNAL, "out of memory");
	int prc = p11_kit_uri_parse(s, type, uri);
	if (prc != P11_KIT_URI_OK) {
		p11_kit_uri_free(uri);
		/* The URI failed to parse, so we cannot tell whether it holds a
		 * PIN: do not echo it. */
		SG_BAIL(SG_EINVAL, "malformed %s URI: %s", what, p11_kit_uri_message(prc));
	}
	if (p11_kit_uri_get_pin_value(uri)) {
		p11_kit_uri_free(uri);
		SG_BAIL(SG_EINVAL,
		        "%s URI carries pin-value: a PIN must not live in a URI (config, argv); give it as a PIN file",
		        what);
	}
	if (p11_kit_uri_get_pin_source(uri)) {
		p11_kit_uri_free(uri);
		SG_BAIL(SG_EINVAL, "%s URI carries pin-source, which signet does not support; give the PIN separately",
		        what);
	}
	if (p11_kit_uri_any_unrecognized(uri)) {
		p11_kit_uri_free(uri);
		SG_BAIL(SG_EINVAL, "%s URI %s has attributes signet does not understand", what, s);
	}
	*out = uri;
	return SG_OK;
}

void hsm_uri_freep(P11KitUri **u)
{
	if (*u)
		p11_kit_uri_free(*u);
}

/* Takes CKA_ID / CKA_LABEL (object=) from the key URI. */
int hsm_key_selectors(sg_hsm *h, P11KitUri *uri, const char *s)
{
	CK_ATTRIBUTE_PTR id = p11_kit_uri_get_attribute(uri, CKA_ID);
	CK_ATTRIBUTE_PTR label = p11_kit_uri_get_attribute(uri, CKA_LABEL);
	CK_ATTRIBUTE_PTR cls = p11_kit_uri_get_attribute(uri, CKA_CLASS);
	SG_ENSURE(id || label, SG_EINVAL, "key URI %s names no key: give id= and/or object=", s);
	if (cls) {
		CK_OBJECT_CLASS c = 0;
		SG_ENSURE(cls->ulValueLen == sizeof(c), SG_EINVAL, "key URI %s: bad type=", s);
		memcpy(&c, cls->pValue, sizeof(c));
		SG_ENSURE(c == CKO_PRIVATE_KEY, SG_EINVAL, "key URI %s: type= must be private", s);
	}
	if (id) {
		SG_ENSURE(id->ulValueLen > 0 && id->ulValueLen <= 256, SG_EINVAL, "key URI %s: id= empty or too long",
		          s);
		h->key_id = malloc(id->ulValueLen);
		SG_ENSURE(h->key_id, SG_EINTERNAL, "out of memory");
		memcpy(h->key_id, id->pValue, id->ulValueLen);
		h->key_id_len = id->ulValueLen;
	}
	if (label) {
		SG_ENSURE(label->ulValueLen > 0 && label->ulValueLen <= 256, SG_EINVAL,
		          "key URI %s: object= empty or too long", s);
		h->key_label = malloc(label->ulValueLen + 1);
		SG_ENSURE(h->key_label, SG_EINTERNAL, "out of memory");
		memcpy(h->key_label, label->pValue, label->ulValueLen);
		h->key_label[label->ulValueLen] = '\0';
	}
	return SG_OK;
}

/* "id=..;object=.." for messages (labels and ids are not secret). */
const char *hsm_key_desc(const sg_hsm *h, char *buf, size_t cap)
{
	size_t off = 0;
	buf[0] = '\0';
	if (h->key_label)
		off += (size_t)snprintf(buf, cap, "object=%.64s", h->key_label);
	if (h->key_id && off < cap) {
		off += (size_t)snprintf(buf + off, cap - off, "%sid=", off ? " " : "");
		for (size_t i = 0; i < h->key_id_len && i < 32 && off + 3 < cap; i++)
			off += (size_t)snprintf(buf + off, cap - off, "%02x", h->key_id[i]);
	}
	return buf;
}

/* ------------------------------------------------------------------ */
/* Objects and attributes                                             */

/* Finds exactly one object of class cls matching the key selectors. */
int hsm_find_object(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_CLASS cls, CK_OBJECT_HANDLE *out,
                    int notfound_code)
{
	/* CKA_TOKEN=TRUE: session objects are visible to every session of
	 * the process, so another session's key copy would match too. */
	CK_BBOOL on_token = CK_TRUE;
	CK_ATTRIBUTE tmpl[4];
	CK_ULONG n = 0;
	tmpl[n++] = (CK_ATTRIBUTE){CKA_CLASS, &cls, sizeof(cls)};
	tmpl[n++] = (CK_ATTRIBUTE){CKA_TOKEN, &on_token, sizeof(on_token)};
	if (h->key_id)
		tmpl[n++] = (CK_ATTRIBUTE){CKA_ID, h->key_id, h->key_id_len};
	if (h->key_label)
		tmpl[n++] = (CK_ATTRIBUTE){CKA_LABEL, h->key_label, strlen(h->key_label)};
	CK_RV rv = h->f->C_FindObjectsInit(sh, tmpl, n);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_FindObjectsInit", rv);
	CK_OBJECT_HANDLE found[2];
	CK_ULONG nfound = 0;
	rv = h->f->C_FindObjects(sh, found, 2, &nfound);
	CK_RV frv = h->f->C_FindObjectsFinal(sh);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_FindObjects", rv);
	if (frv != CKR_OK)
		return hsm_p11_fail(h, t, "C_FindObjectsFinal", frv);
	char d[160];
	const char *what = cls == CKO_PRIVATE_KEY ? "private key" : "public key";
	SG_ENSURE(nfound > 0, notfound_code, "no %s %s on token '%s'", what, hsm_key_desc(h, d, sizeof(d)), t->label);
	SG_ENSURE(nfound == 1, SG_EINVAL, "more than one %s %s on token '%s': select by id and object together", what,
	          hsm_key_desc(h, d, sizeof(d)), t->label);
	*out = found[0];
	return SG_OK;
}

/* Reads one attribute into buf (cap bytes). Too large: SG_EINVAL. */
static int get_attr(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, CK_ATTRIBUTE_TYPE type, void *buf,
                    size_t cap, size_t *len)
{
	CK_ATTRIBUTE a = {type, NULL, 0};
	CK_RV rv = h->f->C_GetAttributeValue(sh, obj, &a, 1);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetAttributeValue", rv);
	SG_ENSURE(a.ulValueLen != CK_UNAVAILABLE_INFORMATION && a.ulValueLen <= cap, SG_EINVAL,
	          "PKCS#11 attribute 0x%lx on token '%s' is unavailable or larger than %zu bytes", (unsigned long)type,
	          t->label, cap);
	a.pValue = buf;
	rv = h->f->C_GetAttributeValue(sh, obj, &a, 1);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetAttributeValue", rv);
	*len = a.ulValueLen;
	return SG_OK;
}

static const uint8_t oid_ec_public_key[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01};
static const uint8_t oid_rsa_encryption[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01};
/* CKA_EC_PARAMS values: the DER OID of the named curve (RFC 5480 §2.1.1). */
const uint8_t hsm_ec_params_p256[] = {0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
const uint8_t hsm_ec_params_p384[] = {0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22};

size_t hsm_sig_len_of(sg_key_type type)
{
	switch (type) {
	case SG_KEY_EC_P256:
		return 64;
	case SG_KEY_EC_P384:
		return 96;
	case SG_KEY_RSA_2048:
		return 256;
	case SG_KEY_RSA_3072:
		return 384;
	case SG_KEY_RSA_4096:
		return 512;
	default:
		return 0;
	}
}

static size_t ec_field_len(sg_key_type type)
{
	return type == SG_KEY_EC_P256 ? 32 : 48;
}

/* The uncompressed point inside CKA_EC_POINT: SoftHSM2 (and the spec) wrap
 * it in a DER OCTET STRING, some modules return it raw. The length tells
 * them apart (raw is exactly 1 + 2 * field length, wrapped is longer). */
static int ec_point(sg_key_type type, const uint8_t *p, size_t n, sg_slice *point)
{
	size_t want = 1 + 2 * ec_field_len(type);
	if (n == want && p[0] == 0x04) {
		*point = (sg_slice){p, n};
		return SG_OK;
	}
	sg_reader r = sg_reader_of((sg_slice){p, n});
	sg_slice inner = {NULL, 0};
	SG_ENSURE(sg_der_read(&r, SG_DER_OCTET_STRING, &inner, NULL) == SG_OK && sg_reader_done(&r) &&
	              inner.len == want && inner.p[0] == 0x04,
	          SG_EINVAL, "CKA_EC_POINT is neither an uncompressed %s point nor one wrapped in an OCTET STRING",
	          sg_key_type_name(type));
	*point = inner;
	return SG_OK;
}

int hsm_spki_of_ec(sg_key_type type, const uint8_t *raw, size_t n, uint8_t *buf, size_t cap, size_t *len)
{
	SG_ENSURE(type == SG_KEY_EC_P256 || type == SG_KEY_EC_P384, SG_EINVAL, "not an EC key type");
	sg_slice point = {NULL, 0};
	SG_TRY(ec_point(type, raw, n, &point));
	const uint8_t *curve = type == SG_KEY_EC_P256 ? hsm_ec_params_p256 : hsm_ec_params_p384;
	size_t curve_len = type == SG_KEY_EC_P256 ? sizeof(hsm_ec_params_p256) : sizeof(hsm_ec_params_p384);
	sg_der_writer w;
	sg_der_writer_init(&w, buf, cap);
	size_t spki = sg_der_begin(&w, SG_DER_SEQUENCE);
	size_t alg = sg_der_begin(&w, SG_DER_SEQUENCE);
	sg_der_prim(&w, SG_DER_OID, oid_ec_public_key, sizeof(oid_ec_public_key));
	sg_der_raw(&w, curve, curve_len); /* already a whole OID TLV */
	sg_der_end(&w, alg);
	sg_der_bits(&w, point.p, point.len);
	sg_der_end(&w, spki);
	SG_TRY(sg_der_writer_status(&w));
	*len = w.len;
	return SG_OK;
}

/* RFC 3279 §2.3.1: BIT STRING holding RSAPublicKey ::= SEQ{n, e}. */
static int spki_rsa(const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen, uint8_t *buf, size_t cap, size_t *len)
{
	uint8_t inner[MODULUS_MAX + 64];
	sg_der_writer iw;
	sg_der_writer_init(&iw, inner, sizeof(inner));
	size_t seq = sg_der_begin(&iw, SG_DER_SEQUENCE);
	sg_der_uint_bytes(&iw, n, nlen);
	sg_der_uint_bytes(&iw, e, elen);
	sg_der_end(&iw, seq);
	SG_TRY(sg_der_writer_status(&iw));

	sg_der_writer w;
	sg_der_writer_init(&w, buf, cap);
	size_t spki = sg_der_begin(&w, SG_DER_SEQUENCE);
	size_t alg = sg_der_begin(&w, SG_DER_SEQUENCE);
	sg_der_prim(&w, SG_DER_OID, oid_rsa_encryption, sizeof(oid_rsa_encryption));
	sg_der_prim(&w, SG_DER_NULL, NULL, 0);
	sg_der_end(&w, alg);
	sg_der_bits(&w, inner, iw.len);
	sg_der_end(&w, spki);
	SG_TRY(sg_der_writer_status(&w));
	*len = w.len;
	return SG_OK;
}

static size_t bit_length(const uint8_t *p, size_t n)
{
	while (n > 0 && p[0] == 0) {
		p++;
		n--;
	}
	if (n == 0)
		return 0;
	size_t bits = n * 8;
	for (uint8_t top = p[0]; !(top & 0x80); top <<= 1)
		bits--;
	return bits;
}

int hsm_spki_of_rsa(const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen, sg_key_type *type, uint8_t *spki,
                    size_t cap, size_t *len)
{
	size_t bits = bit_length(n, nlen);
	switch (bits) {
	case 2048:
		*type = SG_KEY_RSA_2048;
		break;
	case 3072:
		*type = SG_KEY_RSA_3072;
		break;
	case 4096:
		*type = SG_KEY_RSA_4096;
		break;
	default:
		SG_BAIL(SG_EINVAL, "its modulus has %zu bits; signet supports 2048, 3072 and 4096", bits);
	}
	/* An exponent no verifier takes (0, 1, even: RFC 8017 §3.1 wants an
	 * odd e of at least 3) would put a key in the CA certificate that
	 * every peer refuses; and over 64 bits none of them reads it. */
	while (elen > 0 && e[0] == 0) {
		e++;
		elen--;
	}
	SG_ENSURE(elen >= 1 && elen <= 8 && (e[elen - 1] & 1) && !(elen == 1 && e[0] < 3), SG_EINVAL,
	          "the public exponent is not an odd number from 3 to 2^64-1 (%zu significant bytes)", elen);
	return spki_rsa(n, nlen, e, elen, spki, cap, len);
}

/* The private key's uses besides signing, each set FALSE in the generation
 * template and read back after: module defaults differ (SoftHSM2, NSS RSA,
 * tpm2-pkcs11 and openCryptoki add decrypt and unwrap, NSS EC derive). */
const struct key_use hsm_key_uses[] = {
    {CKA_DECRYPT, SG_HSM_USE_DECRYPT},
    {CKA_UNWRAP, SG_HSM_USE_UNWRAP},
    {CKA_DERIVE, SG_HSM_USE_DERIVE},
    {CKA_SIGN_RECOVER, SG_HSM_USE_SIGN_RECOVER},
};

/* One CK_BBOOL attribute: 1 true, 0 false, -1 the module does not say
 * (attribute invalid for the object, or sensitive). Other failures are the
 * module's: SG_EHSM through hsm_p11_fail. */
int hsm_get_bool(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, CK_ATTRIBUTE_TYPE type, int *out)
{
	CK_BBOOL v = CK_FALSE;
	CK_ATTRIBUTE a = {type, &v, sizeof(v)};
	CK_RV rv = h->f->C_GetAttributeValue(sh, obj, &a, 1);
	if (rv == CKR_ATTRIBUTE_TYPE_INVALID || rv == CKR_ATTRIBUTE_SENSITIVE ||
	    (rv == CKR_OK && a.ulValueLen != sizeof(v))) {
		*out = -1;
		return SG_OK;
	}
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetAttributeValue", rv);
	*out = v ? 1 : 0;
	return SG_OK;
}

/* What the token says of the private key: see sg_hsm_key_info. An
 * attribute the module does not report counts as the unsafe answer for
 * sensitive/extractable and as unknown (not set) for the uses. */
int hsm_read_key_info(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, sg_hsm_key_info *out)
{
	int sensitive = 0, extractable = 1, sign = 0;
	SG_TRY(hsm_get_bool(h, t, sh, key, CKA_SENSITIVE, &sensitive));
	SG_TRY(hsm_get_bool(h, t, sh, key, CKA_EXTRACTABLE, &extractable));
	SG_TRY(hsm_get_bool(h, t, sh, key, CKA_SIGN, &sign));
	*out = (sg_hsm_key_info){.sensitive = sensitive == 1, .extractable = extractable != 0, .sign = sign == 1};
	for (size_t i = 0; i < N_KEY_USES; i++) {
		int v = 0;
		SG_TRY(hsm_get_bool(h, t, sh, key, hsm_key_uses[i].type, &v));
		if (v == 1)
			out->other_uses |= hsm_key_uses[i].bit;
	}
	return SG_OK;
}

int sg_hsm_key_info_get(const sg_hsm *h, sg_hsm_key_info *out)
{
	SG_ENSURE(h && out, SG_EINVAL, "sg_hsm_key_info_get: bad arguments");
	SG_ENSURE(h->have_key, SG_ENOTFOUND, "no key: generate one first");
	*out = h->key_info;
	return SG_OK;
}

size_t sg_hsm_key_uses_text(unsigned uses, char *buf, size_t cap)
{
	static const char *const names[] = {"decrypt", "unwrap", "derive", "sign-recover"};
	size_t n = 0;
	if (cap)
		buf[0] = 0;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(uses & (1u << i)))
			continue;
		int w = snprintf(cap > n ? buf + n : NULL, cap > n ? cap - n : 0, "%s%s", n ? ", " : "", names[i]);
		if (w > 0)
			n += (size_t)w;
	}
	return n;
}

/* Reads the key type and builds the SPKI of the private key `key` on t,
 * using the matching public key object where the private key does not carry
 * the public value (EC): pub, or when that is CK_INVALID_HANDLE the token
 * object the key selectors find. */
int hsm_read_key_pub(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, CK_OBJECT_HANDLE pub,
                     sg_key_type *type, uint8_t *spki, size_t cap, size_t *spki_len)
{
	CK_KEY_TYPE kt = 0;
	size_t len = 0;
	SG_TRY(get_attr(h, t, sh, key, CKA_KEY_TYPE, &kt, sizeof(kt), &len));
	SG_ENSURE(len == sizeof(kt), SG_EINVAL, "bad CKA_KEY_TYPE on token '%s'", t->label);
	if (kt == CKK_EC) {
		uint8_t params[128];
		SG_TRY(get_attr(h, t, sh, key, CKA_EC_PARAMS, params, sizeof(params), &len));
		if (sg_slice_eq((sg_slice){params, len}, hsm_ec_params_p256, sizeof(hsm_ec_params_p256)))
			*type = SG_KEY_EC_P256;
		else if (sg_slice_eq((sg_slice){params, len}, hsm_ec_params_p384, sizeof(hsm_ec_params_p384)))
			*type = SG_KEY_EC_P384;
		else
			SG_BAIL(
			    SG_EINVAL,
			    "key on token '%s' is EC on a curve signet does not support (CKA_EC_PARAMS of %zu bytes; "
			    "want prime256v1 or secp384r1)",
			    t->label, len);
		if (pub == CK_INVALID_HANDLE)
			SG_TRY(hsm_find_object(h, t, sh, CKO_PUBLIC_KEY, &pub, SG_ENOTFOUND));
		uint8_t raw[160];
		SG_TRY(get_attr(h, t, sh, pub, CKA_EC_POINT, raw, sizeof(raw), &len));
		return hsm_spki_of_ec(*type, raw, len, spki, cap, spki_len);
	}
	SG_ENSURE(kt == CKK_RSA, SG_EINVAL,
	          "key on token '%s' has CKA_KEY_TYPE 0x%lx; signet supports EC and RSA keys only", t->label,
	          (unsigned long)kt);
	uint8_t n[MODULUS_MAX], e[16];
	size_t nlen = 0, elen = 0;
	SG_TRY(get_attr(h, t, sh, key, CKA_MODULUS, n, sizeof(n), &nlen));
	SG_TRY(get_attr(h, t, sh, key, CKA_PUBLIC_EXPONENT, e, sizeof(e), &elen));
	int rc = hsm_spki_of_rsa(n, nlen, e, elen, type, spki, cap, spki_len);
	if (rc < 0)
		SG_BAIL(rc, "RSA key on token '%s': %s", t->label, sg_error_last()->msg);
	return SG_OK;
}

int hsm_read_key(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, sg_key_type *type, uint8_t *spki,
                 size_t cap, size_t *spki_len)
{
	return hsm_read_key_pub(h, t, sh, key, CK_INVALID_HANDLE, type, spki, cap, spki_len);
}

/* ------------------------------------------------------------------ */
/* Login and sessions                                                 */

static bool logged_in(CK_STATE st)
{
	return st == CKS_RO_USER_FUNCTIONS || st == CKS_RW_USER_FUNCTIONS;
}

/* Logs the user in through session sh unless the token already is (force:
 * present the PIN anyway, so that sg_hsm_open checks it even when another
 * sg_hsm of this process is logged in; modules that check the PIN before
 * answering CKR_USER_ALREADY_LOGGED_IN then refuse a wrong one). Call with
 * t->lock held, so that concurrent recoveries log in once. */
static int login_locked(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, bool force)
{
	if (atomic_load(&t->auth_failed))
		SG_BAIL(SG_EAUTH, "token '%s' refused the PIN before; signet will not present it again", t->label);
	CK_SESSION_INFO si;
	CK_RV rv = h->f->C_GetSessionInfo(sh, &si);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetSessionInfo", rv);
	if (logged_in(si.state) && !force)
		return SG_OK;
	rv = h->f->C_Login(sh, CKU_USER, (CK_UTF8CHAR_PTR)sg_secret_data(h->pin), sg_secret_len(h->pin));
	if (rv == CKR_OK || rv == CKR_USER_ALREADY_LOGGED_IN)
		return SG_OK;
	if (hsm_is_pin_error(rv)) {
		/* Tokens lock a PIN after a few failures; one failure is enough
		 * to stop presenting this one. */
		atomic_store(&t->auth_failed, true);
		return hsm_p11_fail(h, t, "C_Login", rv); /* SG_EAUTH */
	}
	return hsm_p11_fail(h, t, "C_Login", rv);
}

/* Fast check without the lock; the lock only when a login is needed. */
static int ensure_login(sg_hsm *h, token *t, CK_SESSION_HANDLE sh)
{
	if (atomic_load(&t->auth_failed))
		SG_BAIL(SG_EAUTH, "token '%s' refused the PIN before; signet will not present it again", t->label);
	CK_SESSION_INFO si;
	CK_RV rv = h->f->C_GetSessionInfo(sh, &si);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetSessionInfo", rv);
	if (logged_in(si.state))
		return SG_OK;
	pthread_mutex_lock(&t->lock);
	int rc = login_locked(h, t, sh, false);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int hsm_open_session(sg_hsm *h, token *t, CK_FLAGS flags, CK_SESSION_HANDLE *sh)
{
	pthread_mutex_lock(&h->open_lock);
	CK_RV rv = h->f->C_OpenSession(t->slot, flags | CKF_SERIAL_SESSION, NULL, NULL, sh);
	pthread_mutex_unlock(&h->open_lock);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_OpenSession", rv);
	return SG_OK;
}

/* Makes sure t->admin is a live, logged-in RW session; t->lock held. */
int hsm_admin_locked(sg_hsm *h, token *t)
{
	CK_SESSION_INFO si;
	if (t->admin != CK_INVALID_HANDLE && h->f->C_GetSessionInfo(t->admin, &si) != CKR_OK) {
		h->f->C_CloseSession(t->admin); /* probably gone already; harmless */
		t->admin = CK_INVALID_HANDLE;
	}
	if (t->admin == CK_INVALID_HANDLE)
		SG_TRY(hsm_open_session(h, t, CKF_RW_SESSION, &t->admin));
	return login_locked(h, t, t->admin, false);
}

/* Whether session sh is dead or no longer logged in. Modules answer a
 * session that lost its login or objects mid-call with all sorts of codes
 * (SoftHSM2: CKR_GENERAL_ERROR, CKR_KEY_FUNCTION_NOT_PERMITTED while a
 * foreign C_Logout deletes the key copy); asking the session afterwards
 * tells a fault to recover from apart from a genuine refusal. */
static bool session_lost(sg_hsm *h, CK_SESSION_HANDLE sh)
{
	CK_SESSION_INFO si;
	return h->f->C_GetSessionInfo(sh, &si) != CKR_OK || !logged_in(si.state);
}

/* The in-call flag: how a re-init knows that no thread is inside the module.
 * A seq_cst store of the session's own flag, then a load of m->closing; the
 * re-init stores closing, then loads every flag (store-load on both sides,
 * so at least one of them sees the other). The cost on the signing path is
 * one atomic store to a cache line only this thread writes and a load of a
 * line that is only read between re-inits: no shared counter bouncing
 * between signer cores, no lock. False: a re-init is under way; no call. */
static bool call_enter(sg_hsm_session *s)
{
	atomic_store(&s->in_call, true);
	if (!atomic_load(&s->h->mod->closing))
		return true;
	atomic_store_explicit(&s->in_call, false, memory_order_release);
	return false;
}

static void call_leave(sg_hsm_session *s)
{
	atomic_store_explicit(&s->in_call, false, memory_order_release);
}

/* Whether s's handles predate a re-init (call with the flag set). */
static bool session_stale(const sg_hsm_session *s)
{
	return s->connected && (s->gen != atomic_load(&s->h->mod->gen) || atomic_load(&s->revoked));
}

/* Drops handles a C_Finalize already closed, without closing them again: a
 * module that starts numbering afresh (p11-kit's client does) may have given
 * the same numbers to another thread's new session. */
static void session_forget(sg_hsm_session *s)
{
	s->connected = false;
	s->uses_copy = false;
	s->sh = CK_INVALID_HANDLE;
	s->key = CK_INVALID_HANDLE;
}

static void session_disconnect(sg_hsm_session *s)
{
	if (s->connected)
		s->h->f->C_CloseSession(s->sh); /* also destroys the session copy */
	s->connected = false;
	s->uses_copy = false;
	s->sh = CK_INVALID_HANDLE;
	s->key = CK_INVALID_HANDLE;
}

/* Opens the session, logs in if needed, finds the key and copies it; with
 * the in-call flag set. */
static int connect_in_call(sg_hsm_session *s)
{
	sg_hsm *h = s->h;
	token *t = &h->tokens[s->tok];
	CK_SESSION_HANDLE sh;
	SG_TRY(hsm_open_session(h, t, 0, &sh));
	int rc = ensure_login(h, t, sh);
	CK_OBJECT_HANDLE key = CK_INVALID_HANDLE;
	/* Search and copy as one step: SoftHSM2 lets a search see another
	 * session's half-made copy of the key, which makes the search
	 * ambiguous. Sessions are connected at start-up and on recovery only. */
	pthread_mutex_lock(&h->find_lock);
	if (rc == SG_OK)
		rc = hsm_find_object(h, t, sh, CKO_PRIVATE_KEY, &key, SG_EHSM);
	if (rc < 0) {
		pthread_mutex_unlock(&h->find_lock);
		/* Transient too: a session that lost its login meanwhile, and an
		 * ambiguous find. The key was unique at sg_hsm_open, but SoftHSM2
		 * lets a search see another thread's half-made session copy
		 * (seen under concurrent recovery, about once in 3,000). */
		bool transient = rc == SG_EINVAL || (rc != SG_EAUTH && rc != SG_EBUSY && session_lost(h, sh));
		h->f->C_CloseSession(sh);
		if (transient) {
			char msg[SG_ERROR_MSG_MAX];
			snprintf(msg, sizeof(msg), "%s", sg_error_last()->msg);
			return sg_error_set(SG_EBUSY, "%s (transient: will retry)", msg);
		}
		return rc;
	}
	s->sh = sh;
	s->key = key;
	s->connected = true;
	s->uses_copy = false;
	s->copy_rv = CKR_OK;
	if (h->copy_key) {
		/* An explicit CKA_TOKEN=FALSE: NSS answers an empty template with
		 * the original handle, and destroying that would delete the key.
		 * Any failure just means signing with the token object. */
		CK_BBOOL no = CK_FALSE;
		CK_ATTRIBUTE tmpl[] = {{CKA_TOKEN, &no, sizeof(no)}};
		CK_OBJECT_HANDLE copy = CK_INVALID_HANDLE;
		CK_RV rv = h->f->C_CopyObject(sh, key, tmpl, 1, &copy);
		if (rv == CKR_OK && copy != CK_INVALID_HANDLE && copy != key) {
			s->key = copy;
			s->uses_copy = true;
		} else {
			s->copy_rv = rv == CKR_OK ? CKR_GENERAL_ERROR : rv;
		}
	}
	pthread_mutex_unlock(&h->find_lock);
	return SG_OK;
}

/* connect_in_call inside the in-call flag, on the module state of now. A
 * module that a failed re-init left uninitialised, and a token the last
 * re-init did not find, fail as a module fault (last_ckr) so that they count
 * towards the next re-init. */
static int session_connect(sg_hsm_session *s)
{
	sg_hsm *h = s->h;
	module *m = h->mod;
	token *t = &h->tokens[s->tok];
	last_ckr = CKR_OK;
	if (!call_enter(s))
		SG_BAIL(SG_EBUSY, "PKCS#11 module %s is being re-initialised", m->path);
	int rc = SG_EBUSY;
	if (!atomic_load(&m->live)) {
		last_ckr = CKR_CRYPTOKI_NOT_INITIALIZED;
		rc = sg_error_set(SG_EBUSY, "PKCS#11 module %s awaits re-initialisation", m->path);
	} else if (atomic_load(&t->lost)) {
		last_ckr = CKR_TOKEN_NOT_PRESENT;
		rc = sg_error_set(SG_EBUSY, "token '%s' was not found again after the module was re-initialised",
		                  t->label);
	} else {
		s->gen = atomic_load(&m->gen);
		atomic_store(&s->revoked, false);
		rc = connect_in_call(s);
	}
	call_leave(s);
	return rc;
}

static void session_mark_broken(sg_hsm_session *s)
{
	if (!s->broken) {
		s->broken = true;
		atomic_fetch_add(&s->h->tokens[s->tok].broken, 1);
	}
}

static void session_mark_healthy(sg_hsm_session *s)
{
	if (s->broken) {
		s->broken = false;
		atomic_fetch_sub(&s->h->tokens[s->tok].broken, 1);
	}
}

/* ------------------------------------------------------------------ */
/* Mechanisms                                                         */

int hsm_check_mechanisms(sg_hsm *h, token *t, const CK_MECHANISM_TYPE *want, const char *const *names, size_t nwant)
{
	CK_ULONG n = 0;
	CK_RV rv = h->f->C_GetMechanismList(t->slot, NULL, &n);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetMechanismList", rv);
	SG_ENSURE(n > 0 && n < 4096, SG_EHSM, "token '%s' lists %lu mechanisms", t->label, (unsigned long)n);
	/* One spare element: p11-kit's client before 0.24.2 (Debian 12 ships
	 * 0.24.1) reads one past the caller's array when it drops a
	 * mechanism it cannot forward (p11-glue/p11-kit#456). */
	CK_MECHANISM_TYPE *list SG_AUTOFREE = calloc(n + 1, sizeof(*list));
	SG_ENSURE(list, SG_EINTERNAL, "out of memory");
	rv = h->f->C_GetMechanismList(t->slot, list, &n);
	if (rv != CKR_OK)
		return hsm_p11_fail(h, t, "C_GetMechanismList", rv);
	for (size_t i = 0; i < nwant; i++) {
		bool found = false;
		for (CK_ULONG j = 0; j < n && !found; j++)
			found = list[j] == want[i];
		SG_ENSURE(found, SG_EINVAL, "token '%s' does not support %s", t->label, names[i]);
	}
	return SG_OK;
}

static int check_sign_mechanism(sg_hsm *h, token *t, sg_key_type type)
{
	CK_MECHANISM_TYPE m = sg_key_type_is_ec(type) ? CKM_ECDSA : CKM_RSA_PKCS;
	const char *name =
	    sg_key_type_is_ec(type) ? "CKM_ECDSA (needed for an ecdsa key)" : "CKM_RSA_PKCS (needed for an rsa key)";
	return hsm_check_mechanisms(h, t, &m, &name, 1);
}

/* ------------------------------------------------------------------ */
/* Open and free                                                      */

int hsm_list_slots(CK_FUNCTION_LIST_PTR f, CK_SLOT_ID **out, CK_ULONG *n)
{
	ckr_buf b;
	CK_RV rv = f->C_GetSlotList(CK_TRUE, NULL, n);
	SG_ENSURE(rv == CKR_OK, SG_EHSM, "PKCS#11 C_GetSlotList: %s", hsm_ckr_name(rv, &b));
	*out = calloc(*n ? *n : 1, sizeof(**out));
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory");
	rv = f->C_GetSlotList(CK_TRUE, *out, n);
	if (rv != CKR_OK) {
		free(*out);
		*out = NULL;
		SG_BAIL(SG_EHSM, "PKCS#11 C_GetSlotList: %s", hsm_ckr_name(rv, &b));
	}
	return SG_OK;
}

/* t->serial as text: space padded like the label, trimmed the same way. */
static void serial_text(token *t)
{
	size_t n = sizeof(t->serial);
	while (n > 0 && (t->serial[n - 1] == ' ' || t->serial[n - 1] == '\0'))
		n--;
	for (size_t i = 0; i < n; i++)
		t->serial_text[i] = t->serial[i] >= 0x20 && t->serial[i] < 0x7f ? (char)t->serial[i] : '?';
	t->serial_text[n] = '\0';
}

/* Fills h->tokens with every initialised token both URIs match. */
static int select_tokens(sg_hsm *h, P11KitUri *turi, P11KitUri *kuri, const char *turi_s)
{
	CK_SLOT_ID *slots SG_AUTOFREE = NULL;
	CK_ULONG nslots = 0;
	SG_TRY(hsm_list_slots(h->f, &slots, &nslots));
	h->tokens = calloc(nslots ? nslots : 1, sizeof(*h->tokens));
	SG_ENSURE(h->tokens, SG_EINTERNAL, "out of memory");
	for (CK_ULONG i = 0; i < nslots; i++) {
		CK_TOKEN_INFO ti;
		CK_SLOT_INFO si;
		if (h->f->C_GetTokenInfo(slots[i], &ti) != CKR_OK || h->f->C_GetSlotInfo(slots[i], &si) != CKR_OK)
			continue; /* removed meanwhile */
		if (!(ti.flags & CKF_TOKEN_INITIALIZED))
			continue;
		if (!p11_kit_uri_match_token_info(turi, &ti) || !p11_kit_uri_match_slot_info(turi, &si) ||
		    !p11_kit_uri_match_token_info(kuri, &ti))
			continue;
		token *t = &h->tokens[h->ntokens++];
		t->slot = slots[i];
		hsm_trim_label(t->label, ti.label);
		memcpy(t->serial, ti.serialNumber, sizeof(t->serial));
		serial_text(t);
		t->admin = CK_INVALID_HANDLE;
		/* A count of 0 (CK_EFFECTIVELY_INFINITE) or ~0
		 * (CK_UNAVAILABLE_INFORMATION) states no limit. */
		CK_ULONG max = ti.ulMaxSessionCount;
		if (max != CK_EFFECTIVELY_INFINITE && max != CK_UNAVAILABLE_INFORMATION)
			t->max_signing = max > RESERVED_SESSIONS + 1u
			                     ? (unsigned)(max > 65536 ? 65536 : max) - RESERVED_SESSIONS
			                     : 1u;
		atomic_init(&t->signing, 0);
		atomic_init(&t->in_flight, 0);
		atomic_init(&t->sign_calls, 0);
		atomic_init(&t->sign_ns, 0);
		atomic_init(&t->sign_wait_ns, 0);
		atomic_init(&t->wait_samples, 0);
		atomic_init(&t->asleep_samples, 0);
		atomic_init(&t->next_sample_ns, 0);
		atomic_init(&t->signed_ns, 0);
		SG_ENSURE(pthread_mutex_init(&t->lock, NULL) == 0, SG_EINTERNAL, "pthread_mutex_init failed");
		t->lock_init = true;
		atomic_init(&t->auth_failed, false);
		atomic_init(&t->down, false);
		atomic_init(&t->broken, 0);
		atomic_init(&t->lost, false);
	}
	SG_ENSURE(h->ntokens > 0, SG_ENOTFOUND, "no initialised token matches %s", turi_s);
	return SG_OK;
}

/* An existing key is used as it is (it may predate signet), but a key that
 * can leave the token or do more than sign is worth a line in the log. */
static void warn_key_info(const sg_hsm *h, const token *t)
{
	char uses[64], d[160];
	sg_hsm_key_uses_text(h->key_info.other_uses, uses, sizeof(uses));
	if (!h->key_info.sensitive || h->key_info.extractable)
		sg_log(SG_LOG_WARN, "CA key may leave the token (generate keys with signetctl init)",
		       SG_F_STR("token", t->label), SG_F_STR("key", hsm_key_desc(h, d, sizeof(d))),
		       SG_F_STR("sensitive", h->key_info.sensitive ? "true" : "false"),
		       SG_F_STR("extractable", h->key_info.extractable ? "true" : "false"),
		       SG_F_END);
	if (h->key_info.other_uses)
		sg_log(SG_LOG_WARN, "CA key allows uses besides signing", SG_F_STR("token", t->label),
		       SG_F_STR("key", hsm_key_desc(h, d, sizeof(d))), SG_F_STR("uses", uses), SG_F_END);
}

/* Logs in to every token, finds the key on each and checks that they hold
 * the same key. */
static int open_tokens(sg_hsm *h, bool allow_missing)
{
	uint8_t spki[SPKI_MAX];
	size_t spki_len = 0;
	char d[160];
	for (size_t i = 0; i < h->ntokens; i++) {
		token *t = &h->tokens[i];
		SG_TRY(hsm_open_session(h, t, CKF_RW_SESSION, &t->admin));
		SG_TRY(login_locked(h, t, t->admin, true)); /* alone in sg_hsm_open */
		CK_OBJECT_HANDLE key;
		int rc = hsm_find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_ENOTFOUND);
		if (rc == SG_ENOTFOUND && allow_missing)
			continue;
		SG_TRY(rc);
		sg_key_type type;
		SG_TRY(hsm_read_key(h, t, t->admin, key, &type, spki, sizeof(spki), &spki_len));
		if (!h->have_key) {
			SG_TRY(hsm_read_key_info(h, t, t->admin, key, &h->key_info));
			warn_key_info(h, t);
			h->spki = malloc(spki_len);
			SG_ENSURE(h->spki, SG_EINTERNAL, "out of memory");
			memcpy(h->spki, spki, spki_len);
			h->spki_len = spki_len;
			h->type = type;
			h->sig_len = hsm_sig_len_of(type);
			h->have_key = true;
		} else if (spki_len != h->spki_len || memcmp(spki, h->spki, spki_len) != 0) {
			SG_BAIL(SG_EINVAL,
			        "tokens '%s' and '%s' hold different keys under %s: refusing to balance across them",
			        h->tokens[0].label, t->label, hsm_key_desc(h, d, sizeof(d)));
		}
		SG_TRY(check_sign_mechanism(h, t, type));
		t->has_key = true;
	}
	if (!allow_missing) {
		for (size_t i = 0; i < h->ntokens; i++)
			SG_ENSURE(h->tokens[i].has_key, SG_ENOTFOUND, "no private key %s on token '%s'",
			          hsm_key_desc(h, d, sizeof(d)), h->tokens[i].label);
	}
	return SG_OK;
}

/* ------------------------------------------------------------------ */
/* Module re-initialisation                                           */

/* CKRs of a failed reopen that say the module itself (its connection, its
 * device) is gone rather than our session or login: p11-kit's client answers
 * CKR_DEVICE_ERROR to everything once its server is gone. */
static bool is_module_fault(CK_RV rv)
{
	return rv == CKR_DEVICE_ERROR || rv == CKR_DEVICE_REMOVED || rv == CKR_TOKEN_NOT_PRESENT ||
	       rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED || rv == CKR_CRYPTOKI_NOT_INITIALIZED;
}

/* Finds token t again after C_Initialize (slot IDs may change) by the token
 * URI, label and serial number; reopens its admin session, logs in with the
 * kept PIN and, when it held the key, checks that it holds the same key.
 * Registry lock, users lock and t->lock held; no session in a call. */
static int token_rebind(sg_hsm *h, token *t, const CK_SLOT_ID *slots, CK_ULONG nslots)
{
	t->admin = CK_INVALID_HANDLE; /* C_Finalize closed it */
	bool found = false;
	for (CK_ULONG i = 0; i < nslots && !found; i++) {
		CK_TOKEN_INFO ti;
		CK_SLOT_INFO si;
		if (h->f->C_GetTokenInfo(slots[i], &ti) != CKR_OK || h->f->C_GetSlotInfo(slots[i], &si) != CKR_OK)
			continue;
		char label[LABEL_LEN + 1];
		hsm_trim_label(label, ti.label);
		found = (ti.flags & CKF_TOKEN_INITIALIZED) && p11_kit_uri_match_token_info(h->turi, &ti) &&
		        p11_kit_uri_match_slot_info(h->turi, &si) && p11_kit_uri_match_token_info(h->kuri, &ti) &&
		        strcmp(label, t->label) == 0 && memcmp(ti.serialNumber, t->serial, sizeof(t->serial)) == 0;
		if (found)
			t->slot = slots[i];
	}
	SG_ENSURE(found, SG_ENOTFOUND, "token '%s' not found after re-initialising the module", t->label);
	SG_TRY(hsm_open_session(h, t, CKF_RW_SESSION, &t->admin));
	SG_TRY(login_locked(h, t, t->admin, false));
	if (!t->has_key)
		return SG_OK;
	CK_OBJECT_HANDLE key;
	uint8_t spki[SPKI_MAX];
	size_t spki_len = 0;
	sg_key_type type;
	SG_TRY(hsm_find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_ENOTFOUND));
	SG_TRY(hsm_read_key(h, t, t->admin, key, &type, spki, sizeof(spki), &spki_len));
	SG_ENSURE(spki_len == h->spki_len && memcmp(spki, h->spki, spki_len) == 0, SG_EINVAL,
	          "token '%s' holds a different key after re-initialising the module", t->label);
	return SG_OK;
}

/* Waits until no session of m is inside a PKCS#11 call (m->closing set,
 * users lock held, so the list is fixed and no call starts); false after ms
 * (a call the module never returns from). */
static bool drain(module *m, unsigned ms)
{
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u;
	for (sg_hsm_session *s = m->sessions; s; s = s->next_on_module)
		while (atomic_load(&s->in_call)) {
			if (sg_now_ns() >= until)
				return false;
			sg_sleep_ms(1);
		}
	return true;
}

static void lock_tokens(module *m, bool lock)
{
	for (sg_hsm *h = m->handles; h; h = h->next_on_module)
		for (size_t i = 0; i < h->ntokens; i++)
			(lock ? pthread_mutex_lock : pthread_mutex_unlock)(&h->tokens[i].lock);
}

/* C_Finalize (unless a failed attempt left the module finalised already),
 * C_Initialize with the first call's arguments, and every token of every
 * handle found again. Everything but the re-init lock held, nothing in a
 * call. Sets *ntok to the tokens brought back; fails when the module is not
 * initialised or any token is missing. */
static int reinit_locked(module *m, size_t *ntok)
{
	ckr_buf b;
	*ntok = 0;
	if (m->live)
		m->f->C_Finalize(NULL); /* whatever it answers, its sessions are gone */
	m->live = false;
	atomic_fetch_add(&m->gen, 1); /* every session handle from before is stale */
	CK_RV rv = module_initialize(m, m->conf, m->init_reserved);
	if (rv == CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		/* Someone else initialised it in between: theirs now, never
		 * finalised by us again. */
		m->owner = false;
	} else if (rv != CKR_OK) {
		for (sg_hsm *h = m->handles; h; h = h->next_on_module)
			for (size_t i = 0; i < h->ntokens; i++) {
				h->tokens[i].admin = CK_INVALID_HANDLE;
				if (h->tokens[i].has_key)
					atomic_store(&h->tokens[i].down, true);
			}
		SG_BAIL(SG_EHSM, "PKCS#11 C_Initialize of %s: %s", m->path, hsm_ckr_name(rv, &b));
	}
	m->live = true;
	CK_SLOT_ID *slots SG_AUTOFREE = NULL;
	CK_ULONG nslots = 0;
	int rc = hsm_list_slots(m->f, &slots, &nslots);
	char first[SG_ERROR_MSG_MAX] = "";
	for (sg_hsm *h = m->handles; h; h = h->next_on_module) {
		for (size_t i = 0; i < h->ntokens; i++) {
			token *t = &h->tokens[i];
			int trc = rc < 0 ? rc : token_rebind(h, t, slots, nslots);
			bool ok = trc == SG_OK;
			atomic_store(&t->lost, !ok);
			if (t->has_key)
				atomic_store(&t->down, !ok);
			*ntok += ok;
			if (!ok && !first[0])
				snprintf(first, sizeof(first), "%s", sg_error_last()->msg);
		}
	}
	if (first[0])
		SG_BAIL(SG_EHSM, "%s", first);
	return SG_OK;
}

/* One re-init attempt on m, unless another is running (then the caller backs
 * off as for any failed reopen) or signet did not initialise m. reason
 * names the fault that asked for it; it and the outcome are logged once per
 * attempt (CKR names and token labels only, never the PIN). Returns whether
 * the module is back. */
static bool module_reinit(module *m, const char *reason)
{
	if (pthread_mutex_trylock(&m->reinit_lock) != 0)
		return false;
	char why[192];
	snprintf(why, sizeof(why), reason ? "%s" : "retry after: %s", reason ? reason : m->last_error);
	pthread_mutex_lock(&registry_lock);
	pthread_mutex_lock(&m->users_lock);
	if (!m->owner || m->refs == 0 || !m->handles || sg_now_ns() < atomic_load(&m->due_ns)) {
		pthread_mutex_unlock(&m->users_lock);
		pthread_mutex_unlock(&registry_lock);
		pthread_mutex_unlock(&m->reinit_lock);
		return false;
	}
	atomic_store(&m->closing, true);
	int rc = SG_EBUSY;
	size_t ntok = 0;
	if (!drain(m, DRAIN_MS)) {
		rc = sg_error_set(SG_EBUSY, "a PKCS#11 call on %s did not return within %d ms", m->path, DRAIN_MS);
	} else {
		lock_tokens(m, true);
		rc = reinit_locked(m, &ntok);
		lock_tokens(m, false);
		for (sg_hsm *h = m->handles; h && rc == SG_OK; h = h->next_on_module)
			atomic_fetch_add_explicit(&h->reinits, 1, memory_order_relaxed);
	}
	atomic_store(&m->closing, false);
	pthread_mutex_unlock(&m->users_lock);
	pthread_mutex_unlock(&registry_lock);

	unsigned attempt = m->failures + 1;
	bool ok = rc == SG_OK;
	if (ok) {
		m->failures = 0;
		m->last_error[0] = '\0';
		atomic_store(&m->wanted, false);
		atomic_store(&m->due_ns, 0);
		sg_log(SG_LOG_WARN, "PKCS#11 module re-initialised", SG_F_STR("module", m->path),
		       SG_F_STR("reason", why), SG_F_INT("attempt", attempt), SG_F_INT("tokens", ntok), SG_F_END);
	} else {
		unsigned shift = m->failures < 16 ? m->failures : 16;
		uint64_t ms = (uint64_t)REINIT_BACKOFF_MS << shift;
		if (ms > REINIT_MAX_BACKOFF_MS)
			ms = REINIT_MAX_BACKOFF_MS;
		m->failures++;
		snprintf(m->last_error, sizeof(m->last_error), "%.159s", sg_error_last()->msg);
		atomic_store(&m->wanted, true);
		atomic_store(&m->due_ns, sg_now_ns() + ms * 1000000u);
		sg_log(SG_LOG_WARN, "PKCS#11 module re-initialisation failed", SG_F_STR("module", m->path),
		       SG_F_STR("reason", why), SG_F_INT("attempt", attempt), SG_F_STR("error", m->last_error),
		       SG_F_INT("tokens", ntok), SG_F_INT("retry_ms", ms), SG_F_END);
	}
	pthread_mutex_unlock(&m->reinit_lock);
	return ok;
}

/* Whether handle sh is held by a signing session other than self, or is
 * some token's admin session. Users lock and token locks held, nothing in a
 * call. */
static bool handle_shared(module *m, const sg_hsm_session *self, CK_SESSION_HANDLE sh)
{
	for (sg_hsm_session *o = m->sessions; o; o = o->next_on_module)
		if (o != self && o->connected && !atomic_load(&o->revoked) && o->gen == atomic_load(&m->gen) &&
		    o->sh == sh)
			return true;
	for (sg_hsm *h = m->handles; h; h = h->next_on_module)
		for (size_t i = 0; i < h->ntokens; i++)
			if (h->tokens[i].admin == sh)
				return true;
	return false;
}

/* A handle was found invalid: checks every handle of m before the session
 * that found it reopens ("Handles" at the top). The caller is out of its
 * call. Another thread's re-init or check in progress makes this a no-op
 * (theirs covers it; our reopen waits for m->closing to clear). */
static bool sessions_recheck(module *m)
{
	if (pthread_mutex_trylock(&m->reinit_lock) != 0)
		return false; /* a re-init or another check runs: look again later */
	pthread_mutex_lock(&m->users_lock);
	atomic_store(&m->closing, true);
	bool live = atomic_load(&m->live);
	bool drained = live && drain(m, RECHECK_DRAIN_MS);
	if (drained) {
		lock_tokens(m, true);
		for (sg_hsm *h = m->handles; h; h = h->next_on_module)
			for (size_t i = 0; i < h->ntokens; i++) {
				CK_SESSION_INFO si;
				token *t = &h->tokens[i];
				if (t->admin != CK_INVALID_HANDLE && h->f->C_GetSessionInfo(t->admin, &si) != CKR_OK)
					t->admin = CK_INVALID_HANDLE; /* gone: reopened when next needed */
			}
		unsigned revoked = 0;
		for (sg_hsm_session *s = m->sessions; s; s = s->next_on_module) {
			CK_SESSION_INFO si;
			if (!s->connected || atomic_load(&s->revoked) || s->gen != atomic_load(&m->gen))
				continue;
			CK_RV rv = m->f->C_GetSessionInfo(s->sh, &si);
			if (rv != CKR_OK)
				record_fault(s->h, "C_GetSessionInfo", rv); /* a fault seen, as if its owner had */
			if (rv != CKR_OK || handle_shared(m, s, s->sh)) {
				atomic_store(&s->revoked, true);
				revoked++;
			}
		}
		lock_tokens(m, false);
		if (revoked)
			sg_log(SG_LOG_WARN, "PKCS#11 sessions lost behind our back; reopening them",
			       SG_F_STR("module", m->path), SG_F_INT("sessions", revoked), SG_F_END);
	}
	atomic_store(&m->closing, false);
	pthread_mutex_unlock(&m->users_lock);
	pthread_mutex_unlock(&m->reinit_lock);
	return drained || !live; /* a module that is not live renumbers by its re-init (m->gen) */
}

/* Whether m waits for a re-init whose backoff is over (cheap: atomics). */
static bool module_reinit_due(module *m)
{
	return atomic_load(&m->wanted) && atomic_load(&m->owner) && sg_now_ns() >= atomic_load(&m->due_ns);
}

/* Readiness polling (or a health probe) is what brings the module back
 * while no signature is asked for. Bounded by the re-init backoff; the
 * thread that makes the attempt waits for it, another one does not
 * (module_reinit only tries the lock). The thread's error detail is kept. */
void hsm_module_reinit_if_due(module *m)
{
	if (!module_reinit_due(m))
		return;
	sg_error saved;
	sg_error_save(&saved);
	(void)module_reinit(m, NULL);
	sg_error_restore(&saved);
}

void sg_hsm_free(sg_hsm *h)
{
	if (!h)
		return;
	/* A probe thread still inside the module may return into h at any
	 * time: h, its sessions and its module reference are then left as
	 * they are (no C_CloseSession, no C_Finalize with a call inside the
	 * module; sg_hsm_probe.c says why), and the process's exit ends them. */
	if (!hsm_probe_stop(h))
		return;
	module *m = h->mod;
	if (m) { /* no re-init while the handle leaves and its admin sessions close */
		pthread_mutex_lock(&m->reinit_lock);
		pthread_mutex_lock(&m->users_lock);
		for (sg_hsm **p = &m->handles; *p; p = &(*p)->next_on_module)
			if (*p == h) {
				*p = h->next_on_module;
				break;
			}
		pthread_mutex_unlock(&m->users_lock);
	}
	for (size_t i = 0; h->tokens && i < h->ntokens; i++) {
		token *t = &h->tokens[i];
		/* No C_Logout: the login belongs to the whole process and another
		 * sg_hsm may be using the token. Closing our last session ends it;
		 * C_Finalize ends everything. */
		if (t->admin != CK_INVALID_HANDLE && m && atomic_load(&m->live))
			h->f->C_CloseSession(t->admin);
		if (t->lock_init)
			pthread_mutex_destroy(&t->lock);
	}
	if (m)
		pthread_mutex_unlock(&m->reinit_lock);
	hsm_module_release(m);
	if (h->turi)
		p11_kit_uri_free(h->turi);
	if (h->kuri)
		p11_kit_uri_free(h->kuri);
	free(h->tokens);
	sg_secret_free(h->pin);
	free(h->key_id);
	free(h->key_label);
	free(h->spki);
	pthread_mutex_destroy(&h->open_lock);
	pthread_mutex_destroy(&h->find_lock);
	pthread_mutex_destroy(&h->fault_lock);
	free(h);
}

static void hsm_freep(sg_hsm **h)
{
	sg_hsm_free(*h);
}

int sg_hsm_open(sg_hsm **out, const sg_hsm_options *opts)
{
	SG_ENSURE(out && opts, SG_EINVAL, "sg_hsm_open: no options");
	SG_ENSURE(opts->pin, SG_EINVAL, "sg_hsm_open: no PIN given");
	P11KitUri *turi SG_CLEANUP(hsm_uri_freep) = NULL;
	P11KitUri *kuri SG_CLEANUP(hsm_uri_freep) = NULL;
	/* Object attributes are parsed but unused in the token URI, so the
	 * key URI can double as the token URI. */
	SG_TRY(hsm_uri_parse(&turi, "token", opts->token_uri, P11_KIT_URI_FOR_OBJECT_ON_TOKEN | P11_KIT_URI_FOR_SLOT));
	SG_TRY(hsm_uri_parse(&kuri, "key", opts->key_uri, P11_KIT_URI_FOR_OBJECT_ON_TOKEN));

	sg_hsm *h SG_CLEANUP(hsm_freep) = calloc(1, sizeof(*h));
	SG_ENSURE(h, SG_EINTERNAL, "out of memory");
	/* Mutexes first: sg_hsm_free destroys them unconditionally. */
	if (pthread_mutex_init(&h->open_lock, NULL) != 0 || pthread_mutex_init(&h->find_lock, NULL) != 0 ||
	    pthread_mutex_init(&h->fault_lock, NULL) != 0) {
		free(SG_MOVE(h));
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	}
	atomic_init(&h->rr, 0);
	atomic_init(&h->signatures, 0);
	atomic_init(&h->faults, 0);
	atomic_init(&h->recoveries, 0);
	atomic_init(&h->reinits, 0);
	atomic_init(&h->sessions, 0);
	h->copy_key = opts->copy_key;
	h->max_retries = opts->max_retries ? opts->max_retries : DEFAULT_RETRIES;
	h->backoff_ms = opts->backoff_ms ? opts->backoff_ms : DEFAULT_BACKOFF_MS;
	SG_TRY(hsm_key_selectors(h, kuri, opts->key_uri));
	SG_TRY(sg_secret_new(&h->pin, sg_secret_data(opts->pin), sg_secret_len(opts->pin)));

	const char *path = opts->module_path ? opts->module_path : SIGNET_SOFTHSM_MODULE;
	SG_TRY(hsm_module_acquire(&h->mod, path, opts->softhsm_conf, opts->init_reserved));
	h->f = h->mod->f;
	SG_TRY(select_tokens(h, turi, kuri, opts->token_uri));
	SG_TRY(open_tokens(h, opts->allow_missing_key));
	h->turi = SG_MOVE(turi);
	h->kuri = SG_MOVE(kuri);
	pthread_mutex_lock(&h->mod->users_lock);
	h->next_on_module = h->mod->handles;
	h->mod->handles = h;
	pthread_mutex_unlock(&h->mod->users_lock);
	*out = SG_MOVE(h);
	return SG_OK;
}

int sg_hsm_key_type(const sg_hsm *h, sg_key_type *out)
{
	SG_ENSURE(h && h->have_key, SG_ENOTFOUND, "no key: generate one first");
	*out = h->type;
	return SG_OK;
}

int sg_hsm_public_key(const sg_hsm *h, uint8_t **der, size_t *len)
{
	SG_ENSURE(h && h->have_key, SG_ENOTFOUND, "no key: generate one first");
	*der = malloc(h->spki_len);
	SG_ENSURE(*der, SG_EINTERNAL, "out of memory");
	memcpy(*der, h->spki, h->spki_len);
	*len = h->spki_len;
	return SG_OK;
}

size_t sg_hsm_token_count(const sg_hsm *h)
{
	return h ? h->ntokens : 0;
}

/* ------------------------------------------------------------------ */
/* Sessions and signing                                               */

/* Takes s off its module's list; users lock held. */
static void unlink_locked(sg_hsm_session *s)
{
	for (sg_hsm_session **p = &s->h->mod->sessions; *p; p = &(*p)->next_on_module)
		if (*p == s) {
			*p = s->next_on_module;
			break;
		}
}

/* A new session on token tok, on its module's list; not connected. */
static int session_alloc(sg_hsm_session **out, sg_hsm *h, size_t tok, bool probe)
{
	sg_hsm_session *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	s->h = h;
	s->tok = tok;
	s->probe = probe;
	s->sh = CK_INVALID_HANDLE;
	atomic_init(&s->in_call, false);
	atomic_init(&s->revoked, false);
	module *m = h->mod;
	pthread_mutex_lock(&m->users_lock);
	s->next_on_module = m->sessions;
	m->sessions = s;
	pthread_mutex_unlock(&m->users_lock);
	*out = s;
	return SG_OK;
}

static void session_unlink_free(sg_hsm_session *s)
{
	pthread_mutex_lock(&s->h->mod->users_lock);
	unlink_locked(s);
	pthread_mutex_unlock(&s->h->mod->users_lock);
	free(s);
}

int sg_hsm_session_open(sg_hsm_session **out, sg_hsm *h)
{
	SG_ENSURE(h && h->have_key, SG_ENOTFOUND, "no key: generate one first");
	/* Round robin over the tokens that hold the key, still accept our
	 * PIN and are below their session cap (a place taken before the
	 * session opens, so that concurrent opens cannot overshoot it). */
	size_t pick = h->ntokens;
	bool usable = false;
	for (size_t i = 0; i < h->ntokens && pick == h->ntokens; i++) {
		size_t k = atomic_fetch_add(&h->rr, 1) % h->ntokens;
		token *t = &h->tokens[k];
		if (!t->has_key || atomic_load(&t->auth_failed))
			continue;
		usable = true;
		unsigned n = atomic_fetch_add(&t->signing, 1);
		if (t->max_signing && n >= t->max_signing)
			atomic_fetch_sub(&t->signing, 1);
		else
			pick = k;
	}
	SG_ENSURE(usable, SG_EAUTH, "no token accepts the PIN any more");
	SG_ENSURE(pick < h->ntokens, SG_EBUSY, "every token is at its session limit (ulMaxSessionCount)");
	sg_hsm_session *s = NULL;
	int rc = session_alloc(&s, h, pick, false);
	if (rc == SG_OK && (rc = session_connect(s)) < 0)
		session_unlink_free(s);
	if (rc < 0) {
		atomic_fetch_sub(&h->tokens[pick].signing, 1);
		return rc;
	}
	atomic_fetch_add(&h->sessions, 1);
	*out = s;
	return SG_OK;
}

int hsm_session_new(sg_hsm_session **out, sg_hsm *h, size_t tok, bool probe)
{
	SG_ENSURE(h && h->have_key && tok < h->ntokens, SG_ENOTFOUND, "no key: generate one first");
	sg_hsm_session *s = NULL;
	SG_TRY(session_alloc(&s, h, tok, probe));
	s->unplaced = true; /* not one of the token's signer sessions */
	/* A probe's session that cannot connect now is reopened by its
	 * test signature; a signer's fails its open. */
	int rc = session_connect(s);
	if (rc < 0 && !probe) {
		session_unlink_free(s);
		return rc;
	}
	if (!probe)
		atomic_fetch_add(&h->sessions, 1);
	*out = s;
	return SG_OK;
}

void hsm_session_release(sg_hsm_session *s, bool wedged)
{
	if (!s)
		return;
	/* Under the users lock: a re-init either finished before (the handle
	 * is stale: forget it) or starts after the session has left. While a
	 * call is stuck inside the module (wedged), C_CloseSession could wait
	 * behind it for good: the handle is forgotten instead, and ends with
	 * the module's C_Finalize or the process. */
	module *m = s->h->mod;
	pthread_mutex_lock(&m->users_lock);
	if (wedged || s->gen != atomic_load(&m->gen) || !atomic_load(&m->live) || atomic_load(&s->revoked))
		session_forget(s);
	session_disconnect(s);
	unlink_locked(s);
	pthread_mutex_unlock(&m->users_lock);
	session_mark_healthy(s);
	if (!s->probe)
		atomic_fetch_sub(&s->h->sessions, 1);
	if (!s->probe && !s->unplaced)
		atomic_fetch_sub(&s->h->tokens[s->tok].signing, 1);
	free(s);
}

void sg_hsm_session_free(sg_hsm_session *s)
{
	if (s)
		hsm_session_release(s, hsm_probe_wedged(s->h, sg_now_ns()));
}

bool sg_hsm_session_uses_copy(const sg_hsm_session *s)
{
	return s && s->connected && s->uses_copy;
}

size_t sg_hsm_session_token(const sg_hsm_session *s)
{
	return s->tok;
}

static CK_RV sign_once(sg_hsm_session *s, CK_MECHANISM_TYPE m, const uint8_t *in, size_t inlen, uint8_t *sig,
                       size_t *siglen, const char **fn)
{
	CK_MECHANISM mech = {m, NULL, 0};
	CK_RV rv = s->h->f->C_SignInit(s->sh, &mech, s->key);
	if (rv != CKR_OK) {
		*fn = "C_SignInit";
		return rv;
	}
	CK_ULONG n = *siglen;
	/* C_Sign does not write its input; the prototype lacks the const. */
	rv = s->h->f->C_Sign(s->sh, (CK_BYTE_PTR)in, inlen, sig, &n);
	*fn = "C_Sign";
	if (rv == CKR_OK)
		*siglen = n;
	return rv;
}

/* This thread's time on a CPU and runnable in a queue waiting for one, in
 * ns; false when the kernel does not say. The CPU time from the thread's
 * CPU clock, which is exact at any moment; the queue time from
 * /proc/thread-self/schedstat, whose first field (the same CPU time) lags
 * by up to a scheduler tick for a running thread while the second is
 * brought up to date each time the thread gets a CPU, which is what
 * counts here: a thread preempted during the call has been given a CPU
 * again before it reads. The clock is read on the call's side of the file
 * (after it before the call, before it after): the open and read of a
 * proc file cost tens of microseconds on a virtual machine, as much as a
 * fast token's signature, and counted as the call's CPU time they hid a
 * short wait. */
static bool thread_sched_ns(uint64_t *run, uint64_t *queued, bool before_call)
{
	struct timespec ts;
	if (!before_call && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return false;
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[96];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	unsigned long long r, q;
	if (sscanf(buf, "%llu %llu", &r, &q) != 2)
		return false;
	if (before_call && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return false;
	*run = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	*queued = q;
	return true;
}

/* sign_once, counted in t's load and told to the observer ("Signing load"
 * above). The first call on the token WAIT_SAMPLE_GAP_NS or more after the
 * last measured one also reads the thread's scheduler times around the
 * call: its wait for the token is the wall time less the
 * time on a CPU and in a run queue (preempted by other threads of a busy
 * host, which is no sign of a slow token). */
static CK_RV sign_timed(sg_hsm_session *s, token *t, CK_MECHANISM_TYPE m, const uint8_t *in, size_t inlen, uint8_t *sig,
                        size_t *siglen, const char **fn)
{
	atomic_fetch_add_explicit(&t->sign_calls, 1, memory_order_relaxed);
	uint64_t now = sg_now_ns(), next = atomic_load_explicit(&t->next_sample_ns, memory_order_relaxed);
	bool sample = now >= next && atomic_compare_exchange_strong_explicit(&t->next_sample_ns, &next,
	                                                                     now + WAIT_SAMPLE_GAP_NS,
	                                                                     memory_order_relaxed, memory_order_relaxed);
	uint64_t r0 = 0, q0 = 0, r1 = 0, q1 = 0;
	if (sample)
		sample = thread_sched_ns(&r0, &q0, true);
	atomic_fetch_add_explicit(&t->in_flight, 1, memory_order_relaxed);
	/* The clock read above starts the call unless the scheduler's
	 * times were read after it. */
	uint64_t w0 = sample ? sg_now_ns() : now;
	CK_RV rv = sign_once(s, m, in, inlen, sig, siglen, fn);
	uint64_t wall = sg_now_ns() - w0;
	atomic_fetch_sub_explicit(&t->in_flight, 1, memory_order_relaxed);
	if (sample && thread_sched_ns(&r1, &q1, false)) {
		uint64_t run = r1 - r0, busy = run + (q1 - q0), slept = wall > busy ? wall - busy : 0;
		atomic_fetch_add_explicit(&t->wait_samples, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&t->sign_wait_ns, slept, memory_order_relaxed);
		/* Asleep: it slept at all (SLEPT_MIN_NS, above the clocks'
		 * disagreement). Not "asleep for most of its wall time", nor
		 * "longer than it ran": on a busy host a thread woken by a token
		 * that answers in 0.1 ms waits longer than that for a CPU, and
		 * its own time on a CPU (the module's, and these readings')
		 * is of the same order; such a token was taken for a fast one
		 * and the pool stayed at its base (perf/README.md section 13). */
		if (slept >= SLEPT_MIN_NS)
			atomic_fetch_add_explicit(&t->asleep_samples, 1, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&t->sign_ns, wall, memory_order_relaxed);
	if (rv == CKR_OK) {
		/* The token signs: the health probes' verdict yields to it
		 * (hsm_token_signed_at). Rewritten only when SIGNED_STEP_NS
		 * old, so a busy token's signatures mostly only read it. */
		uint64_t end = w0 + wall, last = atomic_load_explicit(&t->signed_ns, memory_order_relaxed);
		while (end > last && end - last >= SIGNED_STEP_NS &&
		       !atomic_compare_exchange_weak_explicit(&t->signed_ns, &last, end, memory_order_relaxed,
		                                              memory_order_relaxed))
			; /* never moved back by a signer that was preempted */
	}
	sg_hsm_sign_fn cb = atomic_load_explicit(&s->h->on_sign, memory_order_acquire);
	if (cb)
		cb(s->tok, (double)wall / 1e9, atomic_load_explicit(&s->h->on_sign_arg, memory_order_relaxed));
	return rv;
}

/* Sleeps before recovery attempt `attempt` (0: none), never past the
 * deadline. Returns false when the deadline is reached. */
static bool backoff(const sg_hsm *h, unsigned attempt, uint64_t deadline_ns)
{
	if (attempt > 0) {
		unsigned shift = attempt - 1 < 16 ? attempt - 1 : 16;
		uint64_t ms = (uint64_t)h->backoff_ms << shift;
		if (ms > MAX_BACKOFF_MS)
			ms = MAX_BACKOFF_MS;
		if (deadline_ns) {
			uint64_t now = sg_now_ns();
			if (now >= deadline_ns)
				return false;
			uint64_t left_ms = (deadline_ns - now) / 1000000u;
			if (ms >= left_ms) {
				sg_sleep_ms((unsigned)left_ms);
				return false;
			}
		}
		sg_sleep_ms((unsigned)ms);
	}
	return !deadline_ns || sg_now_ns() < deadline_ns;
}

/* A signature on t was given up on ("Failing tokens" above); logged once
 * when the token starts counting as down. */
static void note_given_up(token *t)
{
	if (atomic_fetch_add(&t->failing, 1) + 1 == FAILING_DOWN)
		sg_log(SG_LOG_WARN, "PKCS#11 token keeps failing signatures; counted as down until one succeeds",
		       SG_F_STR("token", t->label), SG_F_INT("in_a_row", FAILING_DOWN), SG_F_END);
}

/* A reopen failed with a module fault: after REINIT_AFTER in a row the
 * module is marked as wanting a re-init, and this thread makes the attempt
 * when it is due (the error detail of the reopen is kept for the caller). */
static void reinit_if_uncured(sg_hsm_session *s)
{
	module *m = s->h->mod;
	if (++s->uncured < REINIT_AFTER || !atomic_load(&m->owner))
		return;
	atomic_store(&m->wanted, true);
	if (!module_reinit_due(m))
		return;
	char reason[sizeof(s->h->last_fault) + 64];
	pthread_mutex_lock(&s->h->fault_lock);
	snprintf(reason, sizeof(reason), "%u reopens failed in a row, last %s", s->uncured, s->h->last_fault);
	pthread_mutex_unlock(&s->h->fault_lock);
	sg_error saved;
	sg_error_save(&saved);
	if (module_reinit(m, reason))
		s->uncured = 0;
	sg_error_restore(&saved);
}

/* A call on s (in its call) failed with rv, a session fault: a handle
 * found invalid is forgotten, not closed (the number may be another
 * session's by now), and the module's handles owe a re-check before s
 * reopens ("Handles" at the top); owed by the session, not by one call, so
 * that a later call does not reopen before the check either. Any other
 * fault closes the session. Leaves the call. */
static void session_drop(sg_hsm_session *s, CK_RV rv)
{
	bool lost = rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED;
	if (lost)
		session_forget(s);
	else
		session_disconnect(s);
	call_leave(s);
	if (lost)
		s->recheck_owed = !sessions_recheck(s->h->mod);
}

int sg_hsm_sign(sg_hsm_session *s, sg_hsm_mech mech, const uint8_t *in, size_t inlen, uint8_t *sig, size_t *siglen,
                uint64_t deadline_ns)
{
	SG_ENSURE(s && in && sig && siglen, SG_EINVAL, "sg_hsm_sign: missing argument");
	sg_hsm *h = s->h;
	token *t = &h->tokens[s->tok];
	bool ec = sg_key_type_is_ec(h->type);
	SG_ENSURE((mech == SG_HSM_ECDSA) == ec && (mech == SG_HSM_ECDSA || mech == SG_HSM_RSA_PKCS), SG_EINVAL,
	          "mechanism does not fit the %s key", sg_key_type_name(h->type));
	SG_ENSURE(*siglen >= h->sig_len, SG_EINVAL, "signature buffer of %zu bytes; a %s signature needs %zu", *siglen,
	          sg_key_type_name(h->type), h->sig_len);
	SG_ENSURE(inlen > 0 && inlen <= 1024, SG_EINVAL, "input of %zu bytes to sign", inlen);
	if (deadline_ns && sg_now_ns() >= deadline_ns)
		SG_BAIL(SG_ETIMEOUT, "deadline passed before signing on token '%s'", t->label);
	if (atomic_load_explicit(&t->auth_failed, memory_order_relaxed))
		SG_BAIL(SG_EAUTH, "token '%s' refused the PIN; signing on it stopped", t->label);

	CK_MECHANISM_TYPE m = ec ? CKM_ECDSA : CKM_RSA_PKCS;
	unsigned attempt = 0;
	int last = SG_EBUSY;
	for (;;) {
		if (s->connected && !call_enter(s)) {
			/* A re-init is draining: wait (below) and look again;
			 * the handles stay valid if it gives up. */
		} else if (s->connected && session_stale(s)) {
			session_forget(s);
			session_mark_broken(s);
			call_leave(s);
		} else if (s->connected) {
			const char *fn = "C_Sign";
			CK_RV rv = s->probe ? sign_once(s, m, in, inlen, sig, siglen, &fn)
			                    : sign_timed(s, t, m, in, inlen, sig, siglen, &fn);
			if (rv == CKR_OK) {
				call_leave(s);
				if (!s->probe)
					atomic_fetch_add_explicit(&h->signatures, 1, memory_order_relaxed);
				if (s->broken)
					session_mark_healthy(s);
				/* A load first: the token's line is shared by
				 * its sessions; no store on the hot path. */
				if (atomic_load_explicit(&t->failing, memory_order_relaxed))
					atomic_store(&t->failing, 0);
				return SG_OK;
			}
			last = hsm_p11_fail(h, t, fn, rv);
			if (last != SG_EBUSY && !session_lost(h, s->sh)) {
				/* Not a session fault (bad input, key refused):
				 * no retry. BUFFER_TOO_SMALL would leave the
				 * operation active, so start afresh next time. */
				if (rv == CKR_BUFFER_TOO_SMALL)
					session_disconnect(s);
				call_leave(s);
				if (last == SG_EHSM) /* the module's failure, not the input's */
					note_given_up(t);
				return last;
			}
			session_mark_broken(s);
			session_drop(s, rv);
		}
		if (attempt >= h->max_retries) {
			char fault[sizeof(h->last_fault)];
			pthread_mutex_lock(&h->fault_lock);
			memcpy(fault, h->last_fault, sizeof(fault));
			pthread_mutex_unlock(&h->fault_lock);
			note_given_up(t);
			SG_BAIL(SG_EBUSY, "PKCS#11 token '%s' still failing after %u recovery attempts (last fault %s)",
			        t->label, attempt, fault);
		}
		if (!backoff(h, attempt, deadline_ns)) {
			note_given_up(t);
			SG_BAIL(SG_ETIMEOUT, "deadline passed while recovering the session on token '%s'", t->label);
		}
		attempt++;
		if (s->connected)
			continue; /* waited out a re-init */
		if (s->recheck_owed && (s->recheck_owed = !sessions_recheck(h->mod))) {
			/* Not checked (a call in flight did not leave in time, or
			 * another check or re-init ran): a session opened now could
			 * get the number a stale holder still signs with, and two
			 * threads in one session crash SoftHSM2. Next attempt. */
			last = sg_error_set(SG_EBUSY, "PKCS#11 sessions of token '%s' not yet checked after a lost handle",
			                    t->label);
			continue;
		}
		last = session_connect(s);
		if (last == SG_OK) {
			s->uncured = 0;
			atomic_fetch_add_explicit(&h->recoveries, 1, memory_order_relaxed);
			atomic_store(&t->down, false);
			continue;
		}
		atomic_store(&t->down, true);
		session_mark_broken(s);
		if (last != SG_EBUSY) /* PIN refused, key vanished, module broke */
			return last;
		if (is_module_fault(last_ckr))
			reinit_if_uncured(s);
	}
}

/* ------------------------------------------------------------------ */
/* Health                                                             */

/* Whether t counts as failing ("Failing tokens" above). */
static bool token_failing(token *t)
{
	return atomic_load_explicit(&t->failing, memory_order_relaxed) >= FAILING_DOWN;
}

bool hsm_token_troubled(token *t)
{
	return token_failing(t) || atomic_load(&t->down) || atomic_load(&t->lost);
}

uint64_t hsm_token_signed_at(const token *t)
{
	return atomic_load_explicit(&((token *)t)->signed_ns, memory_order_relaxed);
}

/* The fixed input of test signatures: 32 zero bytes for ECDSA, a SHA-256
 * DigestInfo of them for RSA. */
static const uint8_t test_digest_info[51] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                             0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};

int hsm_session_test_sign(sg_hsm_session *s, uint64_t deadline_ns)
{
	bool ec = sg_key_type_is_ec(s->h->type);
	uint8_t sig[512];
	size_t n = sizeof(sig);
	int rc = sg_hsm_sign(s, ec ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, test_digest_info + (ec ? 19 : 0), ec ? 32 : 51,
	                     sig, &n, deadline_ns);
	/* The token signs: a signer's failed reopen (t->down) is no longer
	 * its state, and with no traffic no signer would reopen to say so. */
	if (rc == SG_OK)
		atomic_store(&s->h->tokens[s->tok].down, false);
	return rc;
}

int hsm_session_check(sg_hsm_session *s, const char **fn)
{
	sg_hsm *h = s->h;
	token *t = &h->tokens[s->tok];
	*fn = "C_OpenSession";
	if (!s->connected)
		SG_BAIL(SG_EBUSY, "the probe's session on token '%s' is not open", t->label);
	if (!call_enter(s))
		SG_BAIL(SG_EBUSY, "PKCS#11 module %s is being re-initialised", h->mod->path);
	if (session_stale(s)) {
		session_forget(s);
		call_leave(s);
		SG_BAIL(SG_EBUSY, "the probe's session on token '%s' predates a re-initialisation", t->label);
	}
	CK_SESSION_INFO si;
	CK_TOKEN_INFO ti;
	*fn = "C_GetSessionInfo";
	CK_RV rv = h->f->C_GetSessionInfo(s->sh, &si);
	if (rv == CKR_OK && !logged_in(si.state)) {
		session_disconnect(s); /* the login is gone: a reopen logs in again */
		call_leave(s);
		SG_BAIL(SG_EBUSY, "the probe's session on token '%s' is no longer logged in", t->label);
	}
	if (rv == CKR_OK) {
		*fn = "C_GetTokenInfo";
		rv = h->f->C_GetTokenInfo(t->slot, &ti);
	}
	if (rv == CKR_OK) {
		call_leave(s);
		return SG_OK;
	}
	int rc = hsm_p11_fail(h, t, *fn, rv);
	session_drop(s, rv);
	return rc;
}

/* One test signature on a failing token's admin session (reopened and
 * logged in as needed), over a fixed input of the key's mechanism: 32 zero
 * bytes for ECDSA, a SHA-256 DigestInfo of them for RSA. Clears the failing
 * count when the token signs. Another thread holding the token lock (a
 * login, a re-init) makes this attempt a no-op; the next poll tries again. */
static void probe_token(sg_hsm *h, token *t)
{
	const uint8_t *digest_info = test_digest_info;
	uint64_t now = sg_now_ns(), due = atomic_load(&t->probe_due_ns);
	if (now < due || atomic_load(&t->auth_failed) || !h->have_key || !t->has_key ||
	    !atomic_compare_exchange_strong(&t->probe_due_ns, &due, now + PROBE_EVERY_MS * 1000000ull))
		return;
	if (pthread_mutex_trylock(&t->lock) != 0)
		return;
	int rc = SG_EHSM;
	if (atomic_load(&h->mod->live) && !atomic_load(&t->lost) && hsm_admin_locked(h, t) == SG_OK) {
		CK_OBJECT_HANDLE key = CK_INVALID_HANDLE;
		pthread_mutex_lock(&h->find_lock);
		rc = hsm_find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_EHSM);
		pthread_mutex_unlock(&h->find_lock);
		if (rc == SG_OK) {
			bool ec = sg_key_type_is_ec(h->type);
			CK_MECHANISM mech = {ec ? CKM_ECDSA : CKM_RSA_PKCS, NULL, 0};
			uint8_t sig[512];
			CK_ULONG n = sizeof(sig);
			const char *fn = "C_SignInit";
			CK_RV rv = h->f->C_SignInit(t->admin, &mech, key);
			if (rv == CKR_OK) {
				fn = "C_Sign";
				rv = h->f->C_Sign(t->admin, (CK_BYTE_PTR)digest_info + (ec ? 19 : 0), ec ? 32 : 51, sig,
				                  &n);
			}
			rc = rv == CKR_OK ? SG_OK : hsm_p11_fail(h, t, fn, rv);
		}
		if (rc != SG_OK) {
			/* Whatever state the failure left the session in
			 * (an operation still active), the next probe starts
			 * on a fresh one; the signer sessions keep the login. */
			h->f->C_CloseSession(t->admin);
			t->admin = CK_INVALID_HANDLE;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (rc == SG_OK) {
		atomic_store(&t->probes_failed, 0);
		if (token_failing(t)) {
			atomic_store(&t->failing, 0);
			sg_log(SG_LOG_WARN, "PKCS#11 token signs again", SG_F_STR("token", t->label), SG_F_END);
		}
		return;
	}
	/* Sessions open and log in, but nothing signs: the module's state
	 * behind its sessions is broken (tpm2-pkcs11 after its resource
	 * manager restarted answers every C_Sign with CKR_GENERAL_ERROR, its
	 * ESYS context out of sequence), and only C_Finalize + C_Initialize
	 * renews it. Asked for once the test signatures have failed for a
	 * while; made by the next stats poll (module_reinit_due). */
	if (atomic_fetch_add(&t->probes_failed, 1) + 1 >= PROBES_BEFORE_REINIT && atomic_load(&h->mod->owner) &&
	    !atomic_exchange(&h->mod->wanted, true)) {
		atomic_store(&t->probes_failed, 0);
		sg_log(SG_LOG_WARN, "PKCS#11 token fails every test signature; re-initialising the module",
		       SG_F_STR("token", t->label), SG_F_INT("in_a_row", PROBES_BEFORE_REINIT), SG_F_END);
	}
}

const char *sg_hsm_token_label(const sg_hsm *h, size_t i)
{
	return h && i < h->ntokens ? h->tokens[i].label : NULL;
}

const char *sg_hsm_token_serial(const sg_hsm *h, size_t i)
{
	return h && i < h->ntokens ? h->tokens[i].serial_text : NULL;
}

void sg_hsm_stats_get(const sg_hsm *h, sg_hsm_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!h) {
		out->state = SG_HSM_DOWN;
		return;
	}
	sg_hsm *mh = (sg_hsm *)h; /* atomics, the fault lock and a due re-init */
	/* Readiness polls this; with no signature asked for, nothing else would
	 * notice that a server is back, so without health probes this read
	 * makes a due re-init attempt and failing tokens' test signatures.
	 * With probes running they make both on their own threads, and this
	 * read makes no PKCS#11 call at all: a module that hangs can then never
	 * hold up the thread that asks for health. */
	bool probed = atomic_load(&mh->probes) != NULL;
	if (!probed && mh->mod)
		hsm_module_reinit_if_due(mh->mod);
	out->reinits = atomic_load(&mh->reinits);
	out->signatures = atomic_load(&mh->signatures);
	out->faults = atomic_load(&mh->faults);
	out->recoveries = atomic_load(&mh->recoveries);
	out->sessions = atomic_load(&mh->sessions);
	pthread_mutex_lock(&mh->fault_lock);
	memcpy(out->last_fault, h->last_fault, sizeof(out->last_fault));
	pthread_mutex_unlock(&mh->fault_lock);
	size_t usable = 0;
	bool degraded = false;
	uint64_t now = sg_now_ns();
	for (size_t i = 0; i < h->ntokens; i++) {
		token *t = &h->tokens[i];
		if (!probed && token_failing(t)) {
			sg_error saved;
			sg_error_save(&saved);
			probe_token(mh, t);
			sg_error_restore(&saved);
		}
		bool bad = atomic_load(&t->auth_failed) || atomic_load(&t->down) || token_failing(t) ||
		           (probed && hsm_probe_token_down(h, i, now));
		usable += !bad;
		degraded |= bad || atomic_load(&t->broken) > 0;
	}
	out->state = usable == 0 ? SG_HSM_DOWN : degraded ? SG_HSM_DEGRADED : SG_HSM_OK;
}

void sg_hsm_token_load(const sg_hsm *h, size_t i, sg_hsm_load *out)
{
	memset(out, 0, sizeof(*out));
	if (!h || i >= h->ntokens)
		return;
	token *t = &h->tokens[i];
	out->calls = atomic_load_explicit(&t->sign_calls, memory_order_relaxed);
	out->call_ns = atomic_load_explicit(&t->sign_ns, memory_order_relaxed);
	out->wait_ns = atomic_load_explicit(&t->sign_wait_ns, memory_order_relaxed);
	out->wait_samples = atomic_load_explicit(&t->wait_samples, memory_order_relaxed);
	out->asleep = atomic_load_explicit(&t->asleep_samples, memory_order_relaxed);
	out->in_flight = atomic_load_explicit(&t->in_flight, memory_order_relaxed);
	out->sessions = atomic_load_explicit(&t->signing, memory_order_relaxed);
	out->max_sessions = t->max_signing;
}

void sg_hsm_load_get(const sg_hsm *h, sg_hsm_load *out)
{
	memset(out, 0, sizeof(*out));
	bool limited = true;
	for (size_t i = 0; h && i < h->ntokens; i++) {
		sg_hsm_load l;
		sg_hsm_token_load(h, i, &l);
		out->calls += l.calls;
		out->call_ns += l.call_ns;
		out->wait_ns += l.wait_ns;
		out->wait_samples += l.wait_samples;
		out->asleep += l.asleep;
		out->in_flight += l.in_flight;
		out->sessions += l.sessions;
		/* Only tokens that can sign take sessions. */
		if (!h->tokens[i].has_key || atomic_load(&h->tokens[i].auth_failed))
			continue;
		if (!l.max_sessions)
			limited = false;
		out->max_sessions += l.max_sessions;
	}
	if (!limited)
		out->max_sessions = 0;
}

void sg_hsm_on_sign(sg_hsm *h, sg_hsm_sign_fn fn, void *arg)
{
	atomic_store_explicit(&h->on_sign_arg, arg, memory_order_relaxed);
	atomic_store_explicit(&h->on_sign, fn, memory_order_release);
}
