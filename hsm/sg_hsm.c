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
 * attempts as their reopens fail; sg_hsm_stats_get, which readiness polls,
 * makes a due one too, so that the module comes back without traffic.
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
 * No PIN ever reaches a message: errors name the function, token label and
 * CKR code only.
 */
#include "sg_hsm.h"

#include "sg_clock.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <dlfcn.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_RETRIES 5
#define DEFAULT_BACKOFF_MS 20
#define MAX_BACKOFF_MS 2000
#define SPKI_MAX 1200         /* RSA-8192 SPKI is ~1,060 bytes; we accept up to 4096 */
#define MODULUS_MAX 1024      /* bytes read from CKA_MODULUS before deciding */
#define LABEL_LEN 32          /* CK_TOKEN_INFO.label, space padded */
#define REINIT_AFTER 2        /* reopens failing with a module fault, in a row, before a re-init */
#define REINIT_BACKOFF_MS 200 /* wait after a failed re-init; doubles per failure */
#define REINIT_MAX_BACKOFF_MS 10000
#define DRAIN_MS 10000       /* longest wait for calls in flight before a re-init gives up */
#define FAILING_DOWN 3       /* signatures given up in a row on a token before it counts as down */
#define PROBE_EVERY_MS 1000  /* test signatures on a failing token, at most this often */
#define PROBES_BEFORE_REINIT 5 /* failed test signatures in a row before the module is re-initialised */
#define RECHECK_DRAIN_MS 250 /* longest wait for calls in flight before a handle re-check gives up */

/* ------------------------------------------------------------------ */
/* CKR names                                                          */

#define CKR_ENTRY(x)                                                                                                   \
	{                                                                                                              \
		x, #x                                                                                                  \
	}
static const struct {
	CK_RV rv;
	const char *name;
} ckr_names[] = {
    CKR_ENTRY(CKR_OK),
    CKR_ENTRY(CKR_CANCEL),
    CKR_ENTRY(CKR_HOST_MEMORY),
    CKR_ENTRY(CKR_SLOT_ID_INVALID),
    CKR_ENTRY(CKR_GENERAL_ERROR),
    CKR_ENTRY(CKR_FUNCTION_FAILED),
    CKR_ENTRY(CKR_ARGUMENTS_BAD),
    CKR_ENTRY(CKR_ATTRIBUTE_READ_ONLY),
    CKR_ENTRY(CKR_ATTRIBUTE_SENSITIVE),
    CKR_ENTRY(CKR_ATTRIBUTE_TYPE_INVALID),
    CKR_ENTRY(CKR_ATTRIBUTE_VALUE_INVALID),
    CKR_ENTRY(CKR_DATA_INVALID),
    CKR_ENTRY(CKR_DATA_LEN_RANGE),
    CKR_ENTRY(CKR_DEVICE_ERROR),
    CKR_ENTRY(CKR_DEVICE_MEMORY),
    CKR_ENTRY(CKR_DEVICE_REMOVED),
    CKR_ENTRY(CKR_FUNCTION_CANCELED),
    CKR_ENTRY(CKR_FUNCTION_NOT_SUPPORTED),
    CKR_ENTRY(CKR_KEY_HANDLE_INVALID),
    CKR_ENTRY(CKR_KEY_SIZE_RANGE),
    CKR_ENTRY(CKR_KEY_TYPE_INCONSISTENT),
    CKR_ENTRY(CKR_KEY_FUNCTION_NOT_PERMITTED),
    CKR_ENTRY(CKR_MECHANISM_INVALID),
    CKR_ENTRY(CKR_MECHANISM_PARAM_INVALID),
    CKR_ENTRY(CKR_OBJECT_HANDLE_INVALID),
    CKR_ENTRY(CKR_OPERATION_ACTIVE),
    CKR_ENTRY(CKR_OPERATION_NOT_INITIALIZED),
    CKR_ENTRY(CKR_PIN_INCORRECT),
    CKR_ENTRY(CKR_PIN_INVALID),
    CKR_ENTRY(CKR_PIN_LEN_RANGE),
    CKR_ENTRY(CKR_PIN_EXPIRED),
    CKR_ENTRY(CKR_PIN_LOCKED),
    CKR_ENTRY(CKR_SESSION_CLOSED),
    CKR_ENTRY(CKR_SESSION_COUNT),
    CKR_ENTRY(CKR_SESSION_HANDLE_INVALID),
    CKR_ENTRY(CKR_SESSION_PARALLEL_NOT_SUPPORTED),
    CKR_ENTRY(CKR_SESSION_READ_ONLY),
    CKR_ENTRY(CKR_SESSION_EXISTS),
    CKR_ENTRY(CKR_SESSION_READ_ONLY_EXISTS),
    CKR_ENTRY(CKR_SESSION_READ_WRITE_SO_EXISTS),
    CKR_ENTRY(CKR_SIGNATURE_INVALID),
    CKR_ENTRY(CKR_SIGNATURE_LEN_RANGE),
    CKR_ENTRY(CKR_TEMPLATE_INCOMPLETE),
    CKR_ENTRY(CKR_TEMPLATE_INCONSISTENT),
    CKR_ENTRY(CKR_TOKEN_NOT_PRESENT),
    CKR_ENTRY(CKR_TOKEN_NOT_RECOGNIZED),
    CKR_ENTRY(CKR_TOKEN_WRITE_PROTECTED),
    CKR_ENTRY(CKR_USER_ALREADY_LOGGED_IN),
    CKR_ENTRY(CKR_USER_NOT_LOGGED_IN),
    CKR_ENTRY(CKR_USER_PIN_NOT_INITIALIZED),
    CKR_ENTRY(CKR_USER_TYPE_INVALID),
    CKR_ENTRY(CKR_USER_ANOTHER_ALREADY_LOGGED_IN),
    CKR_ENTRY(CKR_USER_TOO_MANY_TYPES),
    CKR_ENTRY(CKR_DOMAIN_PARAMS_INVALID),
    CKR_ENTRY(CKR_CURVE_NOT_SUPPORTED),
    CKR_ENTRY(CKR_BUFFER_TOO_SMALL),
    CKR_ENTRY(CKR_CRYPTOKI_NOT_INITIALIZED),
    CKR_ENTRY(CKR_CRYPTOKI_ALREADY_INITIALIZED),
    CKR_ENTRY(CKR_MUTEX_BAD),
    CKR_ENTRY(CKR_MUTEX_NOT_LOCKED),
    CKR_ENTRY(CKR_NEED_TO_CREATE_THREADS),
    CKR_ENTRY(CKR_CANT_LOCK),
};

typedef struct ckr_buf {
	char s[32];
} ckr_buf;

/* The symbolic name of rv; unknown codes in hex, in *b. */
static const char *ckr_name(CK_RV rv, ckr_buf *b)
{
	for (size_t i = 0; i < sizeof(ckr_names) / sizeof(ckr_names[0]); i++)
		if (ckr_names[i].rv == rv)
			return ckr_names[i].name;
	snprintf(b->s, sizeof(b->s), "CKR_0x%lx", (unsigned long)rv);
	return b->s;
}

/* Session and device faults that a reopened session (and a new login) can
 * cure. The last three are what a foreign C_Logout / C_CloseAllSessions leaves
 * in a live session: a destroyed private session object, and an operation
 * that never finished. */
static bool is_fault(CK_RV rv)
{
	switch (rv) {
	case CKR_SESSION_HANDLE_INVALID:
	case CKR_SESSION_CLOSED:
	case CKR_USER_NOT_LOGGED_IN:
	case CKR_DEVICE_ERROR:
	case CKR_DEVICE_REMOVED:
	case CKR_DEVICE_MEMORY:
	case CKR_TOKEN_NOT_PRESENT:
	case CKR_OBJECT_HANDLE_INVALID:
	case CKR_KEY_HANDLE_INVALID:
	case CKR_OPERATION_ACTIVE:
		return true;
	default:
		return false;
	}
}

static bool is_pin_error(CK_RV rv)
{
	return rv == CKR_PIN_INCORRECT || rv == CKR_PIN_LOCKED || rv == CKR_PIN_EXPIRED || rv == CKR_PIN_INVALID ||
	       rv == CKR_PIN_LEN_RANGE || rv == CKR_USER_PIN_NOT_INITIALIZED;
}

/* Our category for a CKR: faults are transient (SG_EBUSY: retry after
 * recovery), refused PINs SG_EAUTH, bad input SG_EINVAL, the rest SG_EHSM. */
static int ckr_category(CK_RV rv)
{
	if (is_fault(rv))
		return SG_EBUSY;
	if (is_pin_error(rv))
		return SG_EAUTH;
	switch (rv) {
	case CKR_DATA_INVALID:
	case CKR_DATA_LEN_RANGE:
	case CKR_BUFFER_TOO_SMALL:
	case CKR_MECHANISM_INVALID:
	case CKR_KEY_TYPE_INCONSISTENT:
		return SG_EINVAL;
	default:
		return SG_EHSM;
	}
}

/* ------------------------------------------------------------------ */
/* Module registry                                                    */

typedef struct module {
	struct module *next;
	char *path;
	void *dl;
	CK_FUNCTION_LIST_PTR f;
	unsigned refs;
	atomic_bool owner;   /* we called C_Initialize: C_Finalize at refs 0 */
	char *conf;          /* SOFTHSM2_CONF it was initialised with, or NULL */
	char *init_reserved; /* C_Initialize pReserved, kept for a re-init */

	/* Re-initialisation ("Recovery" above). Lock order: reinit_lock,
	 * registry_lock, users_lock, token->lock, open_lock / find_lock. */
	pthread_mutex_t reinit_lock; /* one re-init at a time */
	pthread_mutex_t users_lock;  /* the two lists below */
	struct sg_hsm *handles;      /* open sg_hsm on this module */
	struct sg_hsm_session *sessions;
	atomic_bool closing;     /* a re-init is draining or running: no new calls */
	atomic_bool live;        /* initialised: false from our C_Finalize to a good C_Initialize */
	atomic_bool wanted;      /* faults asked for a re-init that has not succeeded yet */
	atomic_uint gen;         /* bumped at each re-init's C_Finalize: older handles are stale */
	_Atomic uint64_t due_ns; /* no re-init attempt before this (CLOCK_MONOTONIC) */
	unsigned failures;       /* re-inits failed in a row; under reinit_lock */
	char last_error[160];    /* why the last one failed; under reinit_lock */
} module;

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
		SG_BAIL(SG_EHSM, "PKCS#11 C_GetFunctionList of %s: %s", path, ckr_name(rv, &b));
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

/* The CKR of this thread's last C_Initialize that module_acquire saw fail
 * (CKR_OK otherwise): sg_hsm_check tells "needs an init string" from it. */
static _Thread_local CK_RV acquire_ckr;

/* Finds or loads the module at path and makes sure it is initialised. */
static int module_acquire(module **out, const char *path, const char *conf, const char *init_reserved)
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
			acquire_ckr = rv;
			rc = sg_error_set(SG_EHSM, "PKCS#11 C_Initialize of %s: %s", path, ckr_name(rv, &b));
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

static void module_release(module *m)
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

typedef struct token {
	CK_SLOT_ID slot;
	char label[LABEL_LEN + 1]; /* trimmed, for messages */
	pthread_mutex_t lock;      /* login and the admin session */
	bool lock_init;
	CK_SESSION_HANDLE admin; /* RW, kept open; CK_INVALID_HANDLE when none */
	bool has_key;
	atomic_bool auth_failed;       /* the token refused our PIN: never again */
	atomic_bool down;              /* the last recovery on this token failed */
	atomic_uint broken;            /* sessions on this token awaiting recovery */
	atomic_bool lost;              /* not found again after a module re-init */
	atomic_uint failing;           /* signatures given up on in a row ("Failing tokens") */
	_Atomic uint64_t probe_due_ns; /* no test signature before this (CLOCK_MONOTONIC) */
	atomic_uint probes_failed;     /* test signatures failed in a row */
	CK_UTF8CHAR serial[16];        /* CK_TOKEN_INFO.serialNumber: with the label, finds it again */
} token;

struct sg_hsm {
	module *mod;
	sg_hsm *next_on_module; /* mod->handles; under mod->users_lock */
	CK_FUNCTION_LIST_PTR f;
	token *tokens;
	size_t ntokens;
	sg_secret *pin;
	P11KitUri *turi; /* token and key URIs: a re-init finds the tokens again */
	P11KitUri *kuri;

	/* key selectors from the key URI */
	uint8_t *key_id;
	size_t key_id_len;
	char *key_label;

	bool copy_key;
	unsigned max_retries;
	unsigned backoff_ms;

	bool have_key;
	sg_hsm_key_info key_info; /* of the first token's key, read when found or generated */
	sg_key_type type;
	size_t sig_len;
	uint8_t *spki;
	size_t spki_len;

	pthread_mutex_t open_lock;
	pthread_mutex_t find_lock; /* key search + session copy, one session at a time */
	pthread_mutex_t fault_lock;
	char last_fault[sizeof(((sg_hsm_stats *)0)->last_fault)];

	atomic_size_t rr;
	_Atomic uint64_t signatures;
	_Atomic uint64_t faults;
	_Atomic uint64_t recoveries;
	_Atomic uint64_t reinits;
	_Atomic uint64_t sessions;
};

struct sg_hsm_session {
	sg_hsm *h;
	sg_hsm_session *next_on_module; /* mod->sessions; under mod->users_lock */
	atomic_bool in_call;            /* inside a PKCS#11 call: a re-init waits */
	atomic_bool revoked;            /* handles found dead or shared by sessions_recheck */
	unsigned gen;                   /* mod->gen when connected */
	unsigned uncured;               /* reopens failed with a module fault, in a row */
	size_t tok;
	bool connected;
	bool broken; /* counted in token->broken */
	bool uses_copy;
	CK_SESSION_HANDLE sh;
	CK_OBJECT_HANDLE key; /* what C_SignInit uses: the copy or the token key */
	CK_RV copy_rv;        /* why the copy was not made, when it was not */
};

/* ------------------------------------------------------------------ */
/* Faults and errors                                                  */

static void record_fault(sg_hsm *h, const char *fn, CK_RV rv)
{
	ckr_buf b;
	atomic_fetch_add_explicit(&h->faults, 1, memory_order_relaxed);
	pthread_mutex_lock(&h->fault_lock);
	snprintf(h->last_fault, sizeof(h->last_fault), "%s: %s", fn, ckr_name(rv, &b));
	pthread_mutex_unlock(&h->fault_lock);
}

/* The CKR of this thread's last p11_fail, for the re-init decision (the
 * error detail carries only text). */
static _Thread_local CK_RV last_ckr;

/* Records the fault and the error detail; returns the category. */
static int p11_fail(sg_hsm *h, const token *t, const char *fn, CK_RV rv)
{
	ckr_buf b;
	last_ckr = rv;
	if (h)
		record_fault(h, fn, rv);
	return sg_error_set(ckr_category(rv), "PKCS#11 %s on token '%s': %s", fn, t ? t->label : "?", ckr_name(rv, &b));
}

static void trim_label(char out[LABEL_LEN + 1], const CK_UTF8CHAR in[LABEL_LEN])
{
	size_t n = LABEL_LEN;
	while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\0'))
		n--;
	memcpy(out, in, n);
	out[n] = '\0';
}

/* ------------------------------------------------------------------ */
/* URIs                                                               */

static int uri_parse(P11KitUri **out, const char *what, const char *s, P11KitUriType type)
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

static void uri_freep(P11KitUri **u)
{
	if (*u)
		p11_kit_uri_free(*u);
}

/* Takes CKA_ID / CKA_LABEL (object=) from the key URI. */
static int key_selectors(sg_hsm *h, P11KitUri *uri, const char *s)
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
static const char *key_desc(const sg_hsm *h, char *buf, size_t cap)
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
static int find_object(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_CLASS cls, CK_OBJECT_HANDLE *out,
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
		return p11_fail(h, t, "C_FindObjectsInit", rv);
	CK_OBJECT_HANDLE found[2];
	CK_ULONG nfound = 0;
	rv = h->f->C_FindObjects(sh, found, 2, &nfound);
	CK_RV frv = h->f->C_FindObjectsFinal(sh);
	if (rv != CKR_OK)
		return p11_fail(h, t, "C_FindObjects", rv);
	if (frv != CKR_OK)
		return p11_fail(h, t, "C_FindObjectsFinal", frv);
	char d[160];
	const char *what = cls == CKO_PRIVATE_KEY ? "private key" : "public key";
	SG_ENSURE(nfound > 0, notfound_code, "no %s %s on token '%s'", what, key_desc(h, d, sizeof(d)), t->label);
	SG_ENSURE(nfound == 1, SG_EINVAL, "more than one %s %s on token '%s': select by id and object together", what,
	          key_desc(h, d, sizeof(d)), t->label);
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
		return p11_fail(h, t, "C_GetAttributeValue", rv);
	SG_ENSURE(a.ulValueLen != CK_UNAVAILABLE_INFORMATION && a.ulValueLen <= cap, SG_EINVAL,
	          "PKCS#11 attribute 0x%lx on token '%s' is unavailable or larger than %zu bytes", (unsigned long)type,
	          t->label, cap);
	a.pValue = buf;
	rv = h->f->C_GetAttributeValue(sh, obj, &a, 1);
	if (rv != CKR_OK)
		return p11_fail(h, t, "C_GetAttributeValue", rv);
	*len = a.ulValueLen;
	return SG_OK;
}

static const uint8_t oid_ec_public_key[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01};
static const uint8_t oid_rsa_encryption[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01};
/* CKA_EC_PARAMS values: the DER OID of the named curve (RFC 5480 §2.1.1). */
static const uint8_t ec_params_p256[] = {0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
static const uint8_t ec_params_p384[] = {0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22};

static size_t sig_len_of(sg_key_type type)
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

static int spki_ec(sg_key_type type, sg_slice point, uint8_t *buf, size_t cap, size_t *len)
{
	const uint8_t *curve = type == SG_KEY_EC_P256 ? ec_params_p256 : ec_params_p384;
	size_t curve_len = type == SG_KEY_EC_P256 ? sizeof(ec_params_p256) : sizeof(ec_params_p384);
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

/* The private key's uses besides signing, each set FALSE in the generation
 * template and read back after: module defaults differ (SoftHSM2, NSS RSA,
 * tpm2-pkcs11 and openCryptoki add decrypt and unwrap, NSS EC derive). */
static const struct {
	CK_ATTRIBUTE_TYPE type;
	unsigned bit;
} key_uses[] = {
    {CKA_DECRYPT, SG_HSM_USE_DECRYPT},
    {CKA_UNWRAP, SG_HSM_USE_UNWRAP},
    {CKA_DERIVE, SG_HSM_USE_DERIVE},
    {CKA_SIGN_RECOVER, SG_HSM_USE_SIGN_RECOVER},
};
#define N_KEY_USES (sizeof(key_uses) / sizeof(key_uses[0]))

/* One CK_BBOOL attribute: 1 true, 0 false, -1 the module does not say
 * (attribute invalid for the object, or sensitive). Other failures are the
 * module's: SG_EHSM through p11_fail. */
static int get_bool(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, CK_ATTRIBUTE_TYPE type,
                    int *out)
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
		return p11_fail(h, t, "C_GetAttributeValue", rv);
	*out = v ? 1 : 0;
	return SG_OK;
}

/* What the token says of the private key: see sg_hsm_key_info. An
 * attribute the module does not report counts as the unsafe answer for
 * sensitive/extractable and as unknown (not set) for the uses. */
static int read_key_info(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, sg_hsm_key_info *out)
{
	int sensitive = 0, extractable = 1, sign = 0;
	SG_TRY(get_bool(h, t, sh, key, CKA_SENSITIVE, &sensitive));
	SG_TRY(get_bool(h, t, sh, key, CKA_EXTRACTABLE, &extractable));
	SG_TRY(get_bool(h, t, sh, key, CKA_SIGN, &sign));
	*out = (sg_hsm_key_info){.sensitive = sensitive == 1, .extractable = extractable != 0, .sign = sign == 1};
	for (size_t i = 0; i < N_KEY_USES; i++) {
		int v = 0;
		SG_TRY(get_bool(h, t, sh, key, key_uses[i].type, &v));
		if (v == 1)
			out->other_uses |= key_uses[i].bit;
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
static int read_key_pub(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, CK_OBJECT_HANDLE pub,
                        sg_key_type *type, uint8_t *spki, size_t cap, size_t *spki_len)
{
	CK_KEY_TYPE kt = 0;
	size_t len = 0;
	SG_TRY(get_attr(h, t, sh, key, CKA_KEY_TYPE, &kt, sizeof(kt), &len));
	SG_ENSURE(len == sizeof(kt), SG_EINVAL, "bad CKA_KEY_TYPE on token '%s'", t->label);
	if (kt == CKK_EC) {
		uint8_t params[128];
		SG_TRY(get_attr(h, t, sh, key, CKA_EC_PARAMS, params, sizeof(params), &len));
		if (sg_slice_eq((sg_slice){params, len}, ec_params_p256, sizeof(ec_params_p256)))
			*type = SG_KEY_EC_P256;
		else if (sg_slice_eq((sg_slice){params, len}, ec_params_p384, sizeof(ec_params_p384)))
			*type = SG_KEY_EC_P384;
		else
			SG_BAIL(
			    SG_EINVAL,
			    "key on token '%s' is EC on a curve signet does not support (CKA_EC_PARAMS of %zu bytes; "
			    "want prime256v1 or secp384r1)",
			    t->label, len);
		if (pub == CK_INVALID_HANDLE)
			SG_TRY(find_object(h, t, sh, CKO_PUBLIC_KEY, &pub, SG_ENOTFOUND));
		uint8_t raw[160];
		sg_slice point = {NULL, 0};
		SG_TRY(get_attr(h, t, sh, pub, CKA_EC_POINT, raw, sizeof(raw), &len));
		SG_TRY(ec_point(*type, raw, len, &point));
		return spki_ec(*type, point, spki, cap, spki_len);
	}
	SG_ENSURE(kt == CKK_RSA, SG_EINVAL,
	          "key on token '%s' has CKA_KEY_TYPE 0x%lx; signet supports EC and RSA keys only", t->label,
	          (unsigned long)kt);
	uint8_t n[MODULUS_MAX], e[16];
	size_t nlen = 0, elen = 0;
	SG_TRY(get_attr(h, t, sh, key, CKA_MODULUS, n, sizeof(n), &nlen));
	SG_TRY(get_attr(h, t, sh, key, CKA_PUBLIC_EXPONENT, e, sizeof(e), &elen));
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
		SG_BAIL(SG_EINVAL, "RSA key on token '%s' has %zu bits; signet supports 2048, 3072 and 4096", t->label,
		        bits);
	}
	return spki_rsa(n, nlen, e, elen, spki, cap, spki_len);
}

static int read_key(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, sg_key_type *type, uint8_t *spki,
                    size_t cap, size_t *spki_len)
{
	return read_key_pub(h, t, sh, key, CK_INVALID_HANDLE, type, spki, cap, spki_len);
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
		return p11_fail(h, t, "C_GetSessionInfo", rv);
	if (logged_in(si.state) && !force)
		return SG_OK;
	rv = h->f->C_Login(sh, CKU_USER, (CK_UTF8CHAR_PTR)sg_secret_data(h->pin), sg_secret_len(h->pin));
	if (rv == CKR_OK || rv == CKR_USER_ALREADY_LOGGED_IN)
		return SG_OK;
	if (is_pin_error(rv)) {
		/* Tokens lock a PIN after a few failures; one failure is enough
		 * to stop presenting this one. */
		atomic_store(&t->auth_failed, true);
		return p11_fail(h, t, "C_Login", rv); /* SG_EAUTH */
	}
	return p11_fail(h, t, "C_Login", rv);
}

/* Fast check without the lock; the lock only when a login is needed. */
static int ensure_login(sg_hsm *h, token *t, CK_SESSION_HANDLE sh)
{
	if (atomic_load(&t->auth_failed))
		SG_BAIL(SG_EAUTH, "token '%s' refused the PIN before; signet will not present it again", t->label);
	CK_SESSION_INFO si;
	CK_RV rv = h->f->C_GetSessionInfo(sh, &si);
	if (rv != CKR_OK)
		return p11_fail(h, t, "C_GetSessionInfo", rv);
	if (logged_in(si.state))
		return SG_OK;
	pthread_mutex_lock(&t->lock);
	int rc = login_locked(h, t, sh, false);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

static int open_session(sg_hsm *h, token *t, CK_FLAGS flags, CK_SESSION_HANDLE *sh)
{
	pthread_mutex_lock(&h->open_lock);
	CK_RV rv = h->f->C_OpenSession(t->slot, flags | CKF_SERIAL_SESSION, NULL, NULL, sh);
	pthread_mutex_unlock(&h->open_lock);
	if (rv != CKR_OK)
		return p11_fail(h, t, "C_OpenSession", rv);
	return SG_OK;
}

/* Makes sure t->admin is a live, logged-in RW session; t->lock held. */
static int admin_locked(sg_hsm *h, token *t)
{
	CK_SESSION_INFO si;
	if (t->admin != CK_INVALID_HANDLE && h->f->C_GetSessionInfo(t->admin, &si) != CKR_OK) {
		h->f->C_CloseSession(t->admin); /* probably gone already; harmless */
		t->admin = CK_INVALID_HANDLE;
	}
	if (t->admin == CK_INVALID_HANDLE)
		SG_TRY(open_session(h, t, CKF_RW_SESSION, &t->admin));
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
	SG_TRY(open_session(h, t, 0, &sh));
	int rc = ensure_login(h, t, sh);
	CK_OBJECT_HANDLE key = CK_INVALID_HANDLE;
	/* Search and copy as one step: SoftHSM2 lets a search see another
	 * session's half-made copy of the key, which makes the search
	 * ambiguous. Sessions are connected at start-up and on recovery only. */
	pthread_mutex_lock(&h->find_lock);
	if (rc == SG_OK)
		rc = find_object(h, t, sh, CKO_PRIVATE_KEY, &key, SG_EHSM);
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

static int check_mechanisms(sg_hsm *h, token *t, const CK_MECHANISM_TYPE *want, const char *const *names, size_t nwant)
{
	CK_ULONG n = 0;
	CK_RV rv = h->f->C_GetMechanismList(t->slot, NULL, &n);
	if (rv != CKR_OK)
		return p11_fail(h, t, "C_GetMechanismList", rv);
	SG_ENSURE(n > 0 && n < 4096, SG_EHSM, "token '%s' lists %lu mechanisms", t->label, (unsigned long)n);
	/* One spare element: p11-kit's client before 0.24.2 (Debian 12 ships
	 * 0.24.1) reads one past the caller's array when it drops a
	 * mechanism it cannot forward (p11-glue/p11-kit#456). */
	CK_MECHANISM_TYPE *list SG_AUTOFREE = calloc(n + 1, sizeof(*list));
	SG_ENSURE(list, SG_EINTERNAL, "out of memory");
	rv = h->f->C_GetMechanismList(t->slot, list, &n);
	if (rv != CKR_OK)
		return p11_fail(h, t, "C_GetMechanismList", rv);
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
	return check_mechanisms(h, t, &m, &name, 1);
}

/* ------------------------------------------------------------------ */
/* Open and free                                                      */

static int list_slots(CK_FUNCTION_LIST_PTR f, CK_SLOT_ID **out, CK_ULONG *n)
{
	ckr_buf b;
	CK_RV rv = f->C_GetSlotList(CK_TRUE, NULL, n);
	SG_ENSURE(rv == CKR_OK, SG_EHSM, "PKCS#11 C_GetSlotList: %s", ckr_name(rv, &b));
	*out = calloc(*n ? *n : 1, sizeof(**out));
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory");
	rv = f->C_GetSlotList(CK_TRUE, *out, n);
	if (rv != CKR_OK) {
		free(*out);
		*out = NULL;
		SG_BAIL(SG_EHSM, "PKCS#11 C_GetSlotList: %s", ckr_name(rv, &b));
	}
	return SG_OK;
}

/* Fills h->tokens with every initialised token both URIs match. */
static int select_tokens(sg_hsm *h, P11KitUri *turi, P11KitUri *kuri, const char *turi_s)
{
	CK_SLOT_ID *slots SG_AUTOFREE = NULL;
	CK_ULONG nslots = 0;
	SG_TRY(list_slots(h->f, &slots, &nslots));
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
		trim_label(t->label, ti.label);
		memcpy(t->serial, ti.serialNumber, sizeof(t->serial));
		t->admin = CK_INVALID_HANDLE;
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
		       SG_F_STR("token", t->label), SG_F_STR("key", key_desc(h, d, sizeof(d))),
		       SG_F_STR("sensitive", h->key_info.sensitive ? "true" : "false"),
		       SG_F_STR("extractable", h->key_info.extractable ? "true" : "false"),
		       SG_F_END);
	if (h->key_info.other_uses)
		sg_log(SG_LOG_WARN, "CA key allows uses besides signing", SG_F_STR("token", t->label),
		       SG_F_STR("key", key_desc(h, d, sizeof(d))), SG_F_STR("uses", uses), SG_F_END);
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
		SG_TRY(open_session(h, t, CKF_RW_SESSION, &t->admin));
		SG_TRY(login_locked(h, t, t->admin, true)); /* alone in sg_hsm_open */
		CK_OBJECT_HANDLE key;
		int rc = find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_ENOTFOUND);
		if (rc == SG_ENOTFOUND && allow_missing)
			continue;
		SG_TRY(rc);
		sg_key_type type;
		SG_TRY(read_key(h, t, t->admin, key, &type, spki, sizeof(spki), &spki_len));
		if (!h->have_key) {
			SG_TRY(read_key_info(h, t, t->admin, key, &h->key_info));
			warn_key_info(h, t);
			h->spki = malloc(spki_len);
			SG_ENSURE(h->spki, SG_EINTERNAL, "out of memory");
			memcpy(h->spki, spki, spki_len);
			h->spki_len = spki_len;
			h->type = type;
			h->sig_len = sig_len_of(type);
			h->have_key = true;
		} else if (spki_len != h->spki_len || memcmp(spki, h->spki, spki_len) != 0) {
			SG_BAIL(SG_EINVAL,
			        "tokens '%s' and '%s' hold different keys under %s: refusing to balance across them",
			        h->tokens[0].label, t->label, key_desc(h, d, sizeof(d)));
		}
		SG_TRY(check_sign_mechanism(h, t, type));
		t->has_key = true;
	}
	if (!allow_missing) {
		for (size_t i = 0; i < h->ntokens; i++)
			SG_ENSURE(h->tokens[i].has_key, SG_ENOTFOUND, "no private key %s on token '%s'",
			          key_desc(h, d, sizeof(d)), h->tokens[i].label);
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
		trim_label(label, ti.label);
		found = (ti.flags & CKF_TOKEN_INITIALIZED) && p11_kit_uri_match_token_info(h->turi, &ti) &&
		        p11_kit_uri_match_slot_info(h->turi, &si) && p11_kit_uri_match_token_info(h->kuri, &ti) &&
		        strcmp(label, t->label) == 0 && memcmp(ti.serialNumber, t->serial, sizeof(t->serial)) == 0;
		if (found)
			t->slot = slots[i];
	}
	SG_ENSURE(found, SG_ENOTFOUND, "token '%s' not found after re-initialising the module", t->label);
	SG_TRY(open_session(h, t, CKF_RW_SESSION, &t->admin));
	SG_TRY(login_locked(h, t, t->admin, false));
	if (!t->has_key)
		return SG_OK;
	CK_OBJECT_HANDLE key;
	uint8_t spki[SPKI_MAX];
	size_t spki_len = 0;
	sg_key_type type;
	SG_TRY(find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_ENOTFOUND));
	SG_TRY(read_key(h, t, t->admin, key, &type, spki, sizeof(spki), &spki_len));
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
		SG_BAIL(SG_EHSM, "PKCS#11 C_Initialize of %s: %s", m->path, ckr_name(rv, &b));
	}
	m->live = true;
	CK_SLOT_ID *slots SG_AUTOFREE = NULL;
	CK_ULONG nslots = 0;
	int rc = list_slots(m->f, &slots, &nslots);
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

void sg_hsm_free(sg_hsm *h)
{
	if (!h)
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
	module_release(m);
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
	P11KitUri *turi SG_CLEANUP(uri_freep) = NULL;
	P11KitUri *kuri SG_CLEANUP(uri_freep) = NULL;
	/* Object attributes are parsed but unused in the token URI, so the
	 * key URI can double as the token URI. */
	SG_TRY(uri_parse(&turi, "token", opts->token_uri, P11_KIT_URI_FOR_OBJECT_ON_TOKEN | P11_KIT_URI_FOR_SLOT));
	SG_TRY(uri_parse(&kuri, "key", opts->key_uri, P11_KIT_URI_FOR_OBJECT_ON_TOKEN));

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
	SG_TRY(key_selectors(h, kuri, opts->key_uri));
	SG_TRY(sg_secret_new(&h->pin, sg_secret_data(opts->pin), sg_secret_len(opts->pin)));

	const char *path = opts->module_path ? opts->module_path : SIGNET_SOFTHSM_MODULE;
	SG_TRY(module_acquire(&h->mod, path, opts->softhsm_conf, opts->init_reserved));
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

int sg_hsm_session_open(sg_hsm_session **out, sg_hsm *h)
{
	SG_ENSURE(h && h->have_key, SG_ENOTFOUND, "no key: generate one first");
	/* Round robin over the tokens that hold the key and still accept
	 * our PIN. */
	size_t pick = h->ntokens;
	for (size_t i = 0; i < h->ntokens && pick == h->ntokens; i++) {
		size_t k = atomic_fetch_add(&h->rr, 1) % h->ntokens;
		token *t = &h->tokens[k];
		if (t->has_key && !atomic_load(&t->auth_failed))
			pick = k;
	}
	SG_ENSURE(pick < h->ntokens, SG_EAUTH, "no token accepts the PIN any more");
	sg_hsm_session *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	s->h = h;
	s->tok = pick;
	s->sh = CK_INVALID_HANDLE;
	atomic_init(&s->in_call, false);
	atomic_init(&s->revoked, false);
	module *m = h->mod;
	pthread_mutex_lock(&m->users_lock);
	s->next_on_module = m->sessions;
	m->sessions = s;
	pthread_mutex_unlock(&m->users_lock);
	int rc = session_connect(s);
	if (rc < 0) {
		pthread_mutex_lock(&m->users_lock);
		unlink_locked(s);
		pthread_mutex_unlock(&m->users_lock);
		free(s);
		return rc;
	}
	atomic_fetch_add(&h->sessions, 1);
	*out = s;
	return SG_OK;
}

void sg_hsm_session_free(sg_hsm_session *s)
{
	if (!s)
		return;
	/* Under the users lock: a re-init either finished before (the handle
	 * is stale: forget it) or starts after the session has left. */
	module *m = s->h->mod;
	pthread_mutex_lock(&m->users_lock);
	if (s->gen != atomic_load(&m->gen) || !atomic_load(&m->live) || atomic_load(&s->revoked))
		session_forget(s);
	session_disconnect(s);
	unlink_locked(s);
	pthread_mutex_unlock(&m->users_lock);
	session_mark_healthy(s);
	atomic_fetch_sub(&s->h->sessions, 1);
	free(s);
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
	bool recheck_owed = false; /* a lost handle seen, the module's handles not yet checked */
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
			CK_RV rv = sign_once(s, m, in, inlen, sig, siglen, &fn);
			if (rv == CKR_OK) {
				call_leave(s);
				atomic_fetch_add_explicit(&h->signatures, 1, memory_order_relaxed);
				if (s->broken)
					session_mark_healthy(s);
				/* A load first: the token's line is shared by
				 * its sessions; no store on the hot path. */
				if (atomic_load_explicit(&t->failing, memory_order_relaxed))
					atomic_store(&t->failing, 0);
				return SG_OK;
			}
			last = p11_fail(h, t, fn, rv);
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
			bool lost = rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED;
			if (lost)
				session_forget(s); /* the number may be another session's by now */
			else
				session_disconnect(s);
			call_leave(s);
			if (lost)
				recheck_owed = !sessions_recheck(h->mod);
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
		if (recheck_owed && (recheck_owed = !sessions_recheck(h->mod))) {
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

/* One test signature on a failing token's admin session (reopened and
 * logged in as needed), over a fixed input of the key's mechanism: 32 zero
 * bytes for ECDSA, a SHA-256 DigestInfo of them for RSA. Clears the failing
 * count when the token signs. Another thread holding the token lock (a
 * login, a re-init) makes this attempt a no-op; the next poll tries again. */
static void probe_token(sg_hsm *h, token *t)
{
	static const uint8_t digest_info[51] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
	                                        0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};
	uint64_t now = sg_now_ns(), due = atomic_load(&t->probe_due_ns);
	if (now < due || atomic_load(&t->auth_failed) || !h->have_key || !t->has_key ||
	    !atomic_compare_exchange_strong(&t->probe_due_ns, &due, now + PROBE_EVERY_MS * 1000000ull))
		return;
	if (pthread_mutex_trylock(&t->lock) != 0)
		return;
	int rc = SG_EHSM;
	if (atomic_load(&h->mod->live) && !atomic_load(&t->lost) && admin_locked(h, t) == SG_OK) {
		CK_OBJECT_HANDLE key = CK_INVALID_HANDLE;
		pthread_mutex_lock(&h->find_lock);
		rc = find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_EHSM);
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
			rc = rv == CKR_OK ? SG_OK : p11_fail(h, t, fn, rv);
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

void sg_hsm_stats_get(const sg_hsm *h, sg_hsm_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!h) {
		out->state = SG_HSM_DOWN;
		return;
	}
	sg_hsm *mh = (sg_hsm *)h; /* atomics, the fault lock and a due re-init */
	/* Readiness polls this; with no signature asked for, nothing else would
	 * notice that a server is back. Cheap unless a re-init is due, and
	 * bounded by its backoff; the thread that makes the attempt waits for
	 * it, another one does not (module_reinit only tries the lock). */
	if (mh->mod && module_reinit_due(mh->mod)) {
		sg_error saved;
		sg_error_save(&saved);
		(void)module_reinit(mh->mod, NULL);
		sg_error_restore(&saved);
	}
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
	for (size_t i = 0; i < h->ntokens; i++) {
		token *t = &h->tokens[i];
		if (token_failing(t)) {
			sg_error saved;
			sg_error_save(&saved);
			probe_token(mh, t);
			sg_error_restore(&saved);
		}
		bool bad = atomic_load(&t->auth_failed) || atomic_load(&t->down) || token_failing(t);
		usable += !bad;
		degraded |= bad || atomic_load(&t->broken) > 0;
	}
	out->state = usable == 0 ? SG_HSM_DOWN : degraded ? SG_HSM_DEGRADED : SG_HSM_OK;
}

/* ------------------------------------------------------------------ */
/* Provisioning                                                       */

static void pad_label(CK_UTF8CHAR out[LABEL_LEN], const char *label)
{
	size_t n = strlen(label);
	memset(out, ' ', LABEL_LEN);
	memcpy(out, label, n < LABEL_LEN ? n : LABEL_LEN);
}

/* The slot whose initialised token carries label; SG_ENOTFOUND if none. */
static int find_labelled(CK_FUNCTION_LIST_PTR f, const CK_UTF8CHAR padded[LABEL_LEN], CK_SLOT_ID *slot,
                         bool *uninit_found, CK_SLOT_ID *uninit)
{
	CK_SLOT_ID *slots SG_AUTOFREE = NULL;
	CK_ULONG n = 0;
	SG_TRY(list_slots(f, &slots, &n));
	bool found = false;
	*uninit_found = false;
	for (CK_ULONG i = 0; i < n; i++) {
		CK_TOKEN_INFO ti;
		if (f->C_GetTokenInfo(slots[i], &ti) != CKR_OK)
			continue;
		if (!(ti.flags & CKF_TOKEN_INITIALIZED)) {
			if (!*uninit_found) {
				*uninit_found = true;
				*uninit = slots[i];
			}
		} else if (!found && memcmp(ti.label, padded, LABEL_LEN) == 0) {
			found = true;
			*slot = slots[i];
		}
	}
	return found ? SG_OK : SG_ENOTFOUND;
}

static int init_token(CK_FUNCTION_LIST_PTR f, const char *label, const sg_secret *so_pin, const sg_secret *user_pin)
{
	ckr_buf b;
	CK_UTF8CHAR padded[LABEL_LEN];
	pad_label(padded, label);
	CK_SLOT_ID slot = 0, empty = 0;
	bool have_empty = false;
	int rc = find_labelled(f, padded, &slot, &have_empty, &empty);
	if (rc == SG_OK)
		SG_BAIL(SG_EINVAL, "a token labelled '%s' exists already", label);
	if (rc != SG_ENOTFOUND)
		return rc;
	SG_ENSURE(have_empty, SG_ENOTFOUND, "no slot with an uninitialised token to initialise as '%s'", label);
	CK_RV rv = f->C_InitToken(empty, (CK_UTF8CHAR_PTR)sg_secret_data(so_pin), sg_secret_len(so_pin), padded);
	SG_ENSURE(rv == CKR_OK, ckr_category(rv) == SG_EBUSY ? SG_EHSM : ckr_category(rv),
	          "PKCS#11 C_InitToken for '%s': %s", label, ckr_name(rv, &b));
	/* SoftHSM2 moves the new token to a fresh slot id: look it up again. */
	rc = find_labelled(f, padded, &slot, &have_empty, &empty);
	if (rc == SG_ENOTFOUND)
		SG_BAIL(SG_EHSM, "token '%s' not found after C_InitToken", label);
	SG_TRY(rc);
	CK_SESSION_HANDLE sh;
	rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &sh);
	SG_ENSURE(rv == CKR_OK, SG_EHSM, "PKCS#11 C_OpenSession on token '%s': %s", label, ckr_name(rv, &b));
	const char *fn = "C_Login(SO)";
	rv = f->C_Login(sh, CKU_SO, (CK_UTF8CHAR_PTR)sg_secret_data(so_pin), sg_secret_len(so_pin));
	if (rv == CKR_OK) {
		fn = "C_InitPIN";
		rv = f->C_InitPIN(sh, (CK_UTF8CHAR_PTR)sg_secret_data(user_pin), sg_secret_len(user_pin));
		f->C_Logout(sh);
	}
	f->C_CloseSession(sh);
	SG_ENSURE(rv == CKR_OK, ckr_category(rv) == SG_EBUSY ? SG_EHSM : ckr_category(rv),
	          "PKCS#11 %s on token '%s': %s", fn, label, ckr_name(rv, &b));
	return SG_OK;
}

int sg_hsm_init_token(const char *module_path, const char *softhsm_conf, const char *init_reserved, const char *label,
                      const sg_secret *so_pin, const sg_secret *user_pin)
{
	SG_ENSURE(label && *label && strlen(label) <= LABEL_LEN, SG_EINVAL, "token label must have 1 to %d characters",
	          LABEL_LEN);
	SG_ENSURE(so_pin && user_pin && sg_secret_len(so_pin) > 0 && sg_secret_len(user_pin) > 0, SG_EINVAL,
	          "token initialisation needs an SO PIN and a user PIN");
	module *m = NULL;
	SG_TRY(module_acquire(&m, module_path ? module_path : SIGNET_SOFTHSM_MODULE, softhsm_conf, init_reserved));
	int rc = init_token(m->f, label, so_pin, user_pin);
	module_release(m);
	return rc;
}

/* The generation template of a CA key pair, shared by sg_hsm_generate_key
 * (token objects) and sg_hsm_check (session objects: what the template
 * gets, without leaving anything behind). The attributes point into the
 * struct itself, so it must stay where key_template_init filled it. */
typedef struct key_template {
	CK_BBOOL yes, no, on_token;
	CK_ULONG bits;
	CK_BYTE e65537[3];
	CK_MECHANISM_TYPE gen;
	CK_ATTRIBUTE pub[12];
	CK_ATTRIBUTE priv[7 + N_KEY_USES];
	CK_ULONG npub, npub_base, npriv, npriv_base;
} key_template;

static void key_template_init(key_template *k, sg_key_type type, bool on_token, const uint8_t *id, size_t id_len,
                              const char *label)
{
	bool ec = sg_key_type_is_ec(type);
	memset(k, 0, sizeof(*k));
	k->yes = CK_TRUE;
	k->no = CK_FALSE;
	k->on_token = on_token ? CK_TRUE : CK_FALSE;
	k->bits = type == SG_KEY_RSA_2048 ? 2048 : type == SG_KEY_RSA_3072 ? 3072 : 4096;
	k->e65537[0] = 0x01;
	k->e65537[1] = 0x00;
	k->e65537[2] = 0x01;
	k->gen = ec ? CKM_EC_KEY_PAIR_GEN : CKM_RSA_PKCS_KEY_PAIR_GEN;
	/* The public key verifies and does nothing else; the private key signs
	 * and does nothing else. The uses are listed last (after the _base
	 * counts): generate_pair clears them after generation, or puts them in
	 * the template when the module will not clear them; the result is read
	 * back either way. */
	CK_ULONG n = 0;
	k->pub[n++] = (CK_ATTRIBUTE){CKA_TOKEN, &k->on_token, sizeof(k->on_token)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_PRIVATE, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_VERIFY, &k->yes, sizeof(k->yes)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_ID, (void *)id, id_len};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_LABEL, (void *)label, strlen(label)};
	if (ec) {
		const uint8_t *params = type == SG_KEY_EC_P256 ? ec_params_p256 : ec_params_p384;
		size_t plen = type == SG_KEY_EC_P256 ? sizeof(ec_params_p256) : sizeof(ec_params_p384);
		k->pub[n++] = (CK_ATTRIBUTE){CKA_EC_PARAMS, (void *)params, plen};
	} else {
		k->pub[n++] = (CK_ATTRIBUTE){CKA_MODULUS_BITS, &k->bits, sizeof(k->bits)};
		k->pub[n++] = (CK_ATTRIBUTE){CKA_PUBLIC_EXPONENT, k->e65537, sizeof(k->e65537)};
	}
	k->npub_base = n;
	k->pub[n++] = (CK_ATTRIBUTE){CKA_ENCRYPT, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_WRAP, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_VERIFY_RECOVER, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_DERIVE, &k->no, sizeof(k->no)};
	k->npub = n;
	n = 0;
	k->priv[n++] = (CK_ATTRIBUTE){CKA_TOKEN, &k->on_token, sizeof(k->on_token)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_PRIVATE, &k->yes, sizeof(k->yes)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_SENSITIVE, &k->yes, sizeof(k->yes)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_SIGN, &k->yes, sizeof(k->yes)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_EXTRACTABLE, &k->no, sizeof(k->no)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_ID, (void *)id, id_len};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_LABEL, (void *)label, strlen(label)};
	k->npriv_base = n;
	for (size_t i = 0; i < N_KEY_USES; i++)
		k->priv[n++] = (CK_ATTRIBUTE){key_uses[i].type, &k->no, sizeof(k->no)};
	k->npriv = n;
}

/* Sets each attribute of list[0..n) (CK_BBOOLs meant FALSE) that obj has
 * TRUE to FALSE, where the module allows the change: the caller reads back
 * what it kept. */
static void clear_uses(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, const CK_ATTRIBUTE *list,
                       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		if (get_bool(h, t, sh, obj, list[i].type, &v) == SG_OK && v == 1) {
			CK_ATTRIBUTE off = list[i];
			(void)h->f->C_SetAttributeValue(sh, obj, &off, 1);
		}
	}
}

/* Whether any attribute of list[0..n) reads TRUE on obj. */
static bool any_use_on(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, const CK_ATTRIBUTE *list,
                       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		if (get_bool(h, t, sh, obj, list[i].type, &v) == SG_OK && v == 1)
			return true;
	}
	return false;
}

/* C_GenerateKeyPair with template k on session sh: the pair is made with
 * the base templates, then every use but signing and verifying is set
 * FALSE on it (clear_uses). Only when the module keeps a private-key use
 * it will not clear is the pair made again with the uses FALSE in the
 * template (the first pair destroyed; *fell_back set, may be NULL).
 * Why not the template first: a module that misreads a use attribute
 * fails the generation, and tpm2-pkcs11 1.9 does both (CKA_DECRYPT=FALSE
 * on an EC key: CKR_GENERAL_ERROR) and, without a resource manager, leaks
 * the TPM object of the failed attempt, so that the next generation finds
 * the TPM out of object memory. The caller reads the result back
 * (read_key_info). */
static CK_RV generate_pair(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, key_template *k, CK_OBJECT_HANDLE *hpub,
                           CK_OBJECT_HANDLE *hpriv, bool *fell_back)
{
	CK_MECHANISM gen = {k->gen, NULL, 0};
	const CK_ATTRIBUTE *priv_uses = k->priv + k->npriv_base, *pub_uses = k->pub + k->npub_base;
	size_t npriv_uses = k->npriv - k->npriv_base, npub_uses = k->npub - k->npub_base;
	if (fell_back)
		*fell_back = false;
	CK_RV rv = h->f->C_GenerateKeyPair(sh, &gen, k->pub, k->npub_base, k->priv, k->npriv_base, hpub, hpriv);
	if (rv != CKR_OK)
		return rv;
	clear_uses(h, t, sh, *hpriv, priv_uses, npriv_uses);
	clear_uses(h, t, sh, *hpub, pub_uses, npub_uses);
	if (!any_use_on(h, t, sh, *hpriv, priv_uses, npriv_uses))
		return CKR_OK;
	CK_OBJECT_HANDLE pub2, priv2;
	CK_RV rv2 = h->f->C_GenerateKeyPair(sh, &gen, k->pub, k->npub_base, k->priv, k->npriv, &pub2, &priv2);
	ckr_buf rvb;
	sg_log(SG_LOG_INFO, "token kept key uses it would not clear; generated again with them off in the template",
	       SG_F_STR("token", t->label), SG_F_STR("rv", ckr_name(rv2, &rvb)), SG_F_END);
	if (rv2 != CKR_OK)
		return CKR_OK; /* the first pair stands; the caller logs the uses it keeps */
	(void)h->f->C_DestroyObject(sh, *hpriv);
	(void)h->f->C_DestroyObject(sh, *hpub);
	*hpub = pub2;
	*hpriv = priv2;
	clear_uses(h, t, sh, *hpub, pub_uses, npub_uses);
	if (fell_back)
		*fell_back = true;
	return CKR_OK;
}

int sg_hsm_generate_key(sg_hsm *h, sg_key_type type)
{
	SG_ENSURE(h && (unsigned)type < SG_KEY_TYPE_COUNT, SG_EINVAL, "sg_hsm_generate_key: bad arguments");
	SG_ENSURE(h->key_id && h->key_label, SG_EINVAL,
	          "key generation needs both id= and object= in the key URI (the key is selected by both later)");
	SG_ENSURE(!h->have_key, SG_EINVAL, "a key with this id/label exists already");
	token *t = &h->tokens[0];
	bool ec = sg_key_type_is_ec(type);
	CK_MECHANISM_TYPE mechs[2] = {ec ? CKM_EC_KEY_PAIR_GEN : CKM_RSA_PKCS_KEY_PAIR_GEN,
	                              ec ? CKM_ECDSA : CKM_RSA_PKCS};
	const char *names[2] = {ec ? "CKM_EC_KEY_PAIR_GEN" : "CKM_RSA_PKCS_KEY_PAIR_GEN",
	                        ec ? "CKM_ECDSA" : "CKM_RSA_PKCS"};
	SG_TRY(check_mechanisms(h, t, mechs, names, 2));

	int rc = SG_EHSM;
	char d[160];
	pthread_mutex_lock(&t->lock);
	SG_TRY_GOTO(rc, admin_locked(h, t), unlock);
	/* Refuse when either selector is taken, in any object class: a
	 * second key under the same label or id would make selection
	 * ambiguous. */
	for (int pass = 0; pass < 2; pass++) {
		CK_ATTRIBUTE a = pass == 0 ? (CK_ATTRIBUTE){CKA_ID, h->key_id, h->key_id_len}
		                           : (CK_ATTRIBUTE){CKA_LABEL, h->key_label, strlen(h->key_label)};
		CK_OBJECT_HANDLE o;
		CK_ULONG nf = 0;
		CK_RV rv = h->f->C_FindObjectsInit(t->admin, &a, 1);
		if (rv == CKR_OK) {
			rv = h->f->C_FindObjects(t->admin, &o, 1, &nf);
			h->f->C_FindObjectsFinal(t->admin);
		}
		if (rv != CKR_OK) {
			rc = p11_fail(h, t, "C_FindObjects", rv);
			goto unlock;
		}
		SG_ENSURE_GOTO(rc, nf == 0, unlock, SG_EINVAL, "token '%s' already has an object with %s %s", t->label,
		               pass == 0 ? "the id of" : "the label of", key_desc(h, d, sizeof(d)));
	}

	key_template kt;
	key_template_init(&kt, type, true, h->key_id, h->key_id_len, h->key_label);
	CK_OBJECT_HANDLE hpub, hpriv;
	CK_RV rv = generate_pair(h, t, t->admin, &kt, &hpub, &hpriv, NULL);
	if (rv != CKR_OK) {
		rc = p11_fail(h, t, "C_GenerateKeyPair", rv);
		goto unlock;
	}
	/* Read it back the way sessions will find it. */
	CK_OBJECT_HANDLE key;
	SG_TRY_GOTO(rc, find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_EHSM), unlock);
	/* A module that ignored CKA_SENSITIVE or CKA_EXTRACTABLE made a key
	 * that can leave it: not a CA key. Destroyed, so a retry can reuse the
	 * id and label. */
	SG_TRY_GOTO(rc, read_key_info(h, t, t->admin, key, &h->key_info), unlock);
	if (!h->key_info.sensitive || h->key_info.extractable || !h->key_info.sign) {
		(void)h->f->C_DestroyObject(t->admin, hpriv);
		(void)h->f->C_DestroyObject(t->admin, hpub);
		rc = sg_error_set(SG_EHSM, "token '%s' generated a key that %s; this module cannot hold a CA key safely",
		                  t->label,
		                  !h->key_info.sign ? "cannot sign"
		                                    : "can be extracted (CKA_SENSITIVE/CKA_EXTRACTABLE ignored)");
		goto unlock;
	}
	if (h->key_info.other_uses) {
		char uses[64];
		sg_hsm_key_uses_text(h->key_info.other_uses, uses, sizeof(uses));
		sg_log(SG_LOG_WARN, "token kept key uses besides signing that it would not turn off",
		       SG_F_STR("token", t->label), SG_F_STR("uses", uses), SG_F_END);
	}
	uint8_t spki[SPKI_MAX];
	size_t spki_len = 0;
	sg_key_type got;
	SG_TRY_GOTO(rc, read_key(h, t, t->admin, key, &got, spki, sizeof(spki), &spki_len), unlock);
	SG_ENSURE_GOTO(rc, got == type, unlock, SG_EHSM, "token '%s' generated a %s key when asked for %s", t->label,
	               sg_key_type_name(got), sg_key_type_name(type));
	h->spki = malloc(spki_len);
	SG_ENSURE_GOTO(rc, h->spki, unlock, SG_EINTERNAL, "out of memory");
	memcpy(h->spki, spki, spki_len);
	h->spki_len = spki_len;
	h->type = type;
	h->sig_len = sig_len_of(type);
	t->has_key = true;
	h->have_key = true;
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* ------------------------------------------------------------------ */
/* hsm-check                                                          */

/*
 * sg_hsm_check walks a module the way signetd would and writes down what it
 * sees, so that a user with a vendor HSM learns in one command whether signet
 * will work with it, and why not. It goes through module_acquire (the same
 * loading and C_Initialize as sg_hsm_open) and borrows the helpers the real
 * path uses (generate_pair and its template, read_key_info, read_key_pub,
 * p11_fail) through a bare sg_hsm on the stack: one token, no key
 * selectors, never on the module's list of handles, so a re-init never
 * walks it. Everything it makes is a session object, destroyed explicitly and
 * then again implicitly when its sessions close: a check leaves the token as
 * it found it. A step that fails ends the walk (the later steps need what it
 * would have given); the report says which.
 */

#define CHECK_SLOTS_CAP 4096    /* slot IDs asked for at most */
#define CHECK_MECHS_CAP 4096    /* mechanisms asked for at most */
#define CHECK_SIGS 8            /* signatures per thread in the verified round */
#define CHECK_SAMPLES 200000    /* latency samples kept per thread and round */
#define CHECK_SIG_MAX 512       /* RSA-4096 */
#define CHECK_INPUT_MAX 128
#define CHECK_LABEL "signet-hsm-check"

typedef struct check {
	const sg_hsm_check_options *o;
	sg_hsm_check_report *r;
	sg_hsm h; /* bare: f, the locks p11_fail and open_session take */
	token t;  /* the token checked */
	bool locks;
	CK_SESSION_HANDLE sh;
	CK_OBJECT_HANDLE pub, priv, copy;
	CK_OBJECT_HANDLE existing; /* key_uri's key: never destroyed */
	CK_SESSION_HANDLE workers[SG_HSM_CHECK_THREADS_MAX];
	CK_OBJECT_HANDLE worker_keys[SG_HSM_CHECK_THREADS_MAX]; /* per session: what it signs with */
	bool worker_copies[SG_HSM_CHECK_THREADS_MAX];           /* worker_keys[i] is its own copy */
	unsigned nworkers;
	sg_key_type type;
	uint8_t spki[SPKI_MAX];
	size_t spki_len;
} check;

static void note(sg_hsm_check_report *r, sg_hsm_check_step step, sg_hsm_check_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void note(sg_hsm_check_report *r, sg_hsm_check_step step, sg_hsm_check_level level, const char *fmt, ...)
{
	if (level == SG_HSM_CHECK_FAIL)
		r->works = false;
	if (r->nnotes == SG_HSM_CHECK_NOTES_MAX) {
		r->notes_dropped++;
		return;
	}
	sg_hsm_check_note *n = &r->notes[r->nnotes++];
	n->step = step;
	n->level = level;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(n->text, sizeof(n->text), fmt, ap);
	va_end(ap);
}

/* Space-padded PKCS#11 text of n bytes into out (n + 1 bytes), trimmed. */
static void trim_field(char *out, const CK_UTF8CHAR *in, size_t n)
{
	while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\0'))
		n--;
	memcpy(out, in, n);
	out[n] = '\0';
}

static bool check_module(check *c, module **m)
{
	sg_hsm_check_report *r = c->r;
	const char *path = c->o->module_path ? c->o->module_path : SIGNET_SOFTHSM_MODULE;
	acquire_ckr = CKR_OK;
	if (module_acquire(m, path, c->o->softhsm_conf, c->o->init_reserved) != SG_OK) {
		CK_RV rv = acquire_ckr;
		r->loaded = rv != CKR_OK;
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		if (rv == CKR_ARGUMENTS_BAD && !c->o->init_reserved) {
			r->needs_init_reserved = true;
			note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_FAIL,
			     "the module wants a C_Initialize init string: give it with --hsm-init-reserved (NSS softoken: "
			     "configdir='sql:DIR' certPrefix='' keyPrefix='' secmod='secmod.db' flags='')");
		}
		return false;
	}
	r->loaded = r->initialized = true;
	c->h.mod = *m;
	c->h.f = (*m)->f;
	note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_OK, "loaded %s", path);
	if ((*m)->owner)
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_OK, "C_Initialize with CKF_OS_LOCKING_OK%s",
		     c->o->init_reserved ? " and the init string" : "");
	else
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_WARN,
		     "the module was initialised already by someone else in this process");
	CK_INFO info;
	ckr_buf b;
	CK_RV rv = c->h.f->C_GetInfo(&info);
	if (rv != CKR_OK) {
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_WARN, "C_GetInfo: %s", ckr_name(rv, &b));
		return true;
	}
	r->cryptoki_major = info.cryptokiVersion.major;
	r->cryptoki_minor = info.cryptokiVersion.minor;
	r->library_major = info.libraryVersion.major;
	r->library_minor = info.libraryVersion.minor;
	trim_field(r->manufacturer, info.manufacturerID, sizeof(info.manufacturerID));
	trim_field(r->library, info.libraryDescription, sizeof(info.libraryDescription));
	bool old = r->cryptoki_major < 2 || (r->cryptoki_major == 2 && r->cryptoki_minor < 20);
	note(r, SG_HSM_CHECK_MODULE, old ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "Cryptoki %u.%u%s, %s, \"%s\" %u.%u", r->cryptoki_major, r->cryptoki_minor,
	     old ? " (older than 2.20)" : "", r->manufacturer, r->library, r->library_major, r->library_minor);
	return true;
}

/* Describes slot id into s (when s is not NULL) and tells whether its token
 * is initialised and matched by the URI; *ti gets the token info. */
static bool check_describe_slot(check *c, CK_SLOT_ID id, P11KitUri *turi, sg_hsm_check_slot *s, CK_TOKEN_INFO *ti)
{
	CK_SLOT_INFO si;
	sg_hsm_check_slot tmp;
	if (!s)
		s = &tmp;
	memset(s, 0, sizeof(*s));
	s->id = (unsigned long)id;
	if (c->h.f->C_GetSlotInfo(id, &si) != CKR_OK)
		return false;
	trim_field(s->description, si.slotDescription, sizeof(si.slotDescription));
	s->token_present = (si.flags & CKF_TOKEN_PRESENT) && c->h.f->C_GetTokenInfo(id, ti) == CKR_OK;
	if (!s->token_present)
		return false;
	trim_field(s->label, ti->label, sizeof(ti->label));
	trim_field(s->manufacturer, ti->manufacturerID, sizeof(ti->manufacturerID));
	trim_field(s->model, ti->model, sizeof(ti->model));
	trim_field(s->serial, ti->serialNumber, sizeof(ti->serialNumber));
	s->initialized = ti->flags & CKF_TOKEN_INITIALIZED;
	s->login_required = ti->flags & CKF_LOGIN_REQUIRED;
	s->user_pin_initialized = ti->flags & CKF_USER_PIN_INITIALIZED;
	s->user_pin_locked = ti->flags & CKF_USER_PIN_LOCKED;
	s->rng = ti->flags & CKF_RNG;
	s->write_protected = ti->flags & CKF_WRITE_PROTECTED;
	s->max_sessions = ti->ulMaxSessionCount == CK_UNAVAILABLE_INFORMATION ? -1
	                  : ti->ulMaxSessionCount == CK_EFFECTIVELY_INFINITE  ? 0
	                                                                       : (long)ti->ulMaxSessionCount;
	s->selected = s->initialized && (!turi || (p11_kit_uri_match_token_info(turi, ti) &&
	                                           p11_kit_uri_match_slot_info(turi, &si)));
	return s->selected;
}

static void check_note_slot(check *c, const sg_hsm_check_slot *s)
{
	sg_hsm_check_report *r = c->r;
	if (!s->token_present) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "slot %lu \"%s\": no token", s->id, s->description);
		return;
	}
	if (!s->initialized) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "slot %lu \"%s\": token not initialised", s->id,
		     s->description);
		return;
	}
	char sessions[32];
	if (s->max_sessions < 0)
		snprintf(sessions, sizeof(sessions), "not stated");
	else if (s->max_sessions == 0)
		snprintf(sessions, sizeof(sessions), "no limit");
	else
		snprintf(sessions, sizeof(sessions), "%ld", s->max_sessions);
	note(r, SG_HSM_CHECK_SLOTS, s->user_pin_locked ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "slot %lu \"%s\": token \"%s\" (%s %s, serial %s)%s%s%s%s%s, max sessions %s%s", s->id, s->description,
	     s->label,
	     s->manufacturer, s->model, s->serial, s->login_required ? ", login required" : "",
	     s->user_pin_initialized ? ", user PIN set" : ", no user PIN", s->user_pin_locked ? ", user PIN LOCKED" : "",
	     s->rng ? ", RNG" : "", s->write_protected ? ", write-protected" : "", sessions,
	     s->selected ? " [selected]" : "");
}

static bool check_slots(check *c, P11KitUri *turi)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	CK_ULONG n = 0;
	CK_RV rv = c->h.f->C_GetSlotList(CK_FALSE, NULL, &n);
	if (rv != CKR_OK || n > CHECK_SLOTS_CAP) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, rv != CKR_OK ? "C_GetSlotList: %s" : "%s lists too many slots",
		     rv != CKR_OK ? ckr_name(rv, &b) : "the module");
		return false;
	}
	CK_SLOT_ID *slots SG_AUTOFREE = calloc(n + 1, sizeof(*slots));
	if (!slots) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, "out of memory");
		return false;
	}
	rv = c->h.f->C_GetSlotList(CK_FALSE, slots, &n);
	if (rv != CKR_OK) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, "C_GetSlotList: %s", ckr_name(rv, &b));
		return false;
	}
	r->nslots_total = n;
	bool have = false;
	size_t ninit = 0;
	char names[160] = "";
	for (CK_ULONG i = 0; i < n && i <= CHECK_SLOTS_CAP; i++) {
		sg_hsm_check_slot s;
		CK_TOKEN_INFO ti;
		bool sel = check_describe_slot(c, slots[i], turi, &s, &ti);
		if (r->nslots < SG_HSM_CHECK_SLOTS_MAX) {
			r->slots[r->nslots++] = s;
			check_note_slot(c, &s);
		}
		if (s.token_present && s.initialized) {
			size_t used = strlen(names);
			if (used + 4 < sizeof(names))
				snprintf(names + used, sizeof(names) - used, "%s\"%s\"", ninit ? ", " : "", s.label);
			ninit++;
		}
		if (!sel)
			continue;
		r->nselected++;
		if (have)
			continue;
		have = true;
		r->checked = r->nslots > 0 && r->slots[r->nslots - 1].id == s.id ? (int)r->nslots - 1 : -1;
		c->t.slot = slots[i];
		trim_label(c->t.label, ti.label);
		memcpy(c->t.serial, ti.serialNumber, sizeof(c->t.serial));
		if (!s.user_pin_initialized || s.user_pin_locked)
			note(r, SG_HSM_CHECK_SLOTS, c->o->pin ? SG_HSM_CHECK_FAIL : SG_HSM_CHECK_WARN,
			     "token \"%s\": the user PIN is %s", s.label, s.user_pin_locked ? "locked" : "not initialised");
	}
	if (n > SG_HSM_CHECK_SLOTS_MAX)
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "%lu slots; the first %d are described", (unsigned long)n,
		     SG_HSM_CHECK_SLOTS_MAX);
	if (!have) {
		if (c->o->token_uri)
			note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, "no initialised token matches %s; tokens: %s",
			     c->o->token_uri, ninit ? names : "none");
		else
			note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL,
			     "no initialised token: initialise one (signetctl init, or the vendor's tool)");
		return false;
	}
	if (!c->o->token_uri)
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_WARN,
		     "no --hsm-token: %zu initialised token%s (%s); checking \"%s\": choose one with --hsm-token",
		     r->nselected, r->nselected == 1 ? "" : "s", names, c->t.label);
	else if (r->nselected > 1)
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_WARN,
		     "%s matches %zu tokens (%s): signet balances across those holding the same key; checking \"%s\"",
		     c->o->token_uri, r->nselected, names, c->t.label);
	else
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "%s selects token \"%s\"", c->o->token_uri, c->t.label);
	return true;
}

/* Whether bits lies in the range a mechanism states; 0..0 states none. */
static bool mech_fits(const sg_hsm_check_mech *m, unsigned long bits)
{
	return m->min_bits == 0 && m->max_bits == 0 ? true : m->min_bits <= bits && bits <= m->max_bits;
}

static void check_mech(check *c, const CK_MECHANISM_TYPE *list, CK_ULONG n, CK_MECHANISM_TYPE type,
                       const char *name, CK_FLAGS need, sg_hsm_check_mech *out)
{
	memset(out, 0, sizeof(*out));
	for (CK_ULONG i = 0; i < n && !out->present; i++)
		out->present = list[i] == type;
	if (!out->present) {
		note(c->r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_WARN, "%s: missing", name);
		return;
	}
	CK_MECHANISM_INFO mi;
	ckr_buf b;
	CK_RV rv = c->h.f->C_GetMechanismInfo(c->t.slot, type, &mi);
	if (rv != CKR_OK) {
		out->present = false;
		note(c->r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_WARN, "%s: listed, but C_GetMechanismInfo: %s", name,
		     ckr_name(rv, &b));
		return;
	}
	out->min_bits = mi.ulMinKeySize;
	out->max_bits = mi.ulMaxKeySize;
	out->sign = mi.flags & CKF_SIGN;
	out->generate_key_pair = mi.flags & CKF_GENERATE_KEY_PAIR;
	out->hw = mi.flags & CKF_HW;
	bool usable = (mi.flags & need) == need;
	note(c->r, SG_HSM_CHECK_MECHS, usable ? SG_HSM_CHECK_OK : SG_HSM_CHECK_WARN, "%s: %lu..%lu bits%s%s%s%s", name,
	     out->min_bits, out->max_bits, out->sign ? ", sign" : "", out->generate_key_pair ? ", generate key pair" : "",
	     out->hw ? ", hardware" : ", software", usable ? "" : need == CKF_SIGN ? " (no CKF_SIGN: unusable)"
	                                                                          : " (no CKF_GENERATE_KEY_PAIR: unusable)");
	out->present = usable;
}

static bool check_mechanisms_all(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	CK_ULONG n = 0;
	CK_RV rv = c->h.f->C_GetMechanismList(c->t.slot, NULL, &n);
	if (rv != CKR_OK || n == 0 || n > CHECK_MECHS_CAP) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "C_GetMechanismList: %s",
		     rv != CKR_OK ? ckr_name(rv, &b) : n == 0 ? "no mechanisms" : "too many mechanisms");
		return false;
	}
	/* One spare element, as in check_mechanisms: p11-kit's client before
	 * 0.24.2 reads one past the caller's array (p11-glue/p11-kit#456). */
	CK_MECHANISM_TYPE *list SG_AUTOFREE = calloc(n + 1, sizeof(*list));
	if (!list) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "out of memory");
		return false;
	}
	rv = c->h.f->C_GetMechanismList(c->t.slot, list, &n);
	if (rv != CKR_OK) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "C_GetMechanismList: %s", ckr_name(rv, &b));
		return false;
	}
	r->nmechanisms = n;
	note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_OK, "%lu mechanisms", (unsigned long)n);
	check_mech(c, list, n, CKM_EC_KEY_PAIR_GEN, "CKM_EC_KEY_PAIR_GEN", CKF_GENERATE_KEY_PAIR, &r->ec_gen);
	check_mech(c, list, n, CKM_ECDSA, "CKM_ECDSA", CKF_SIGN, &r->ecdsa);
	check_mech(c, list, n, CKM_RSA_PKCS_KEY_PAIR_GEN, "CKM_RSA_PKCS_KEY_PAIR_GEN", CKF_GENERATE_KEY_PAIR,
	           &r->rsa_gen);
	check_mech(c, list, n, CKM_RSA_PKCS, "CKM_RSA_PKCS", CKF_SIGN, &r->rsa_pkcs);
	static const unsigned long bits[SG_KEY_TYPE_COUNT] = {256, 384, 2048, 3072, 4096};
	char names[96] = "";
	size_t used = 0;
	for (int i = 0; i < SG_KEY_TYPE_COUNT; i++) {
		bool ec = sg_key_type_is_ec((sg_key_type)i);
		const sg_hsm_check_mech *g = ec ? &r->ec_gen : &r->rsa_gen, *s = ec ? &r->ecdsa : &r->rsa_pkcs;
		r->key_types[i] = g->present && s->present && mech_fits(g, bits[i]) && mech_fits(s, bits[i]);
		if (r->key_types[i])
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", used ? " " : "",
			                         sg_key_type_name((sg_key_type)i));
	}
	if (!used) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "the token can hold none of signet's key types");
		return false;
	}
	note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_OK, "key types: %s", names);
	if (!r->key_types[c->type]) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "--key-type %s: not supported by this token",
		     sg_key_type_name(c->type));
		return false;
	}
	return true;
}

static bool check_login(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	if (open_session(&c->h, &c->t, CKF_RW_SESSION, &c->sh) != SG_OK) {
		c->sh = CK_INVALID_HANDLE;
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	CK_RV rv = c->h.f->C_Login(c->sh, CKU_USER, (CK_UTF8CHAR_PTR)sg_secret_data(c->o->pin),
	                           sg_secret_len(c->o->pin));
	if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "C_Login: %s%s", ckr_name(rv, &b),
		     is_pin_error(rv) ? ": the token refused the PIN (not tried again)" : "");
		return false;
	}
	r->logged_in = true;
	note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_OK, "login to \"%s\"", c->t.label);
	return true;
}

/* Step 4 after the login: the temporary pair and what its template got.
 * false: stop (FAIL noted) or skip the rest (WARN noted, *skip set). */
static bool check_key(check *c, bool *skip)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	static const uint8_t id[] = CHECK_LABEL;
	key_template kt;
	key_template_init(&kt, c->type, false, id, sizeof(id) - 1, CHECK_LABEL);
	CK_RV rv = generate_pair(&c->h, &c->t, c->sh, &kt, &c->pub, &c->priv, &r->key_fallback);
	if (rv != CKR_OK) {
		c->pub = c->priv = CK_INVALID_HANDLE;
		*skip = true;
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
		     "C_GenerateKeyPair of a %s session-object pair: %s; key template, copy and signing not checked",
		     sg_key_type_name(c->type), ckr_name(rv, &b));
		return false;
	}
	r->key_generated = true;
	note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_OK, "temporary %s key pair generated as session objects (CKA_TOKEN=FALSE)",
	     sg_key_type_name(c->type));
	if (r->key_fallback)
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
		     "the module kept key uses it would not clear after generation: generated again with them off in "
		     "the template");
	int on_token = 0;
	if (get_bool(&c->h, &c->t, c->sh, c->priv, CKA_TOKEN, &on_token) == SG_OK && on_token == 1)
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
		     "the module made a token object despite CKA_TOKEN=FALSE (destroyed at the end)");
	if (read_key_info(&c->h, &c->t, c->sh, c->priv, &r->key) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	/* What sg_hsm_generate_key refuses, FAIL here too. */
	note(r, SG_HSM_CHECK_KEY, r->key.sensitive ? SG_HSM_CHECK_OK : SG_HSM_CHECK_FAIL, "CKA_SENSITIVE: %s",
	     r->key.sensitive ? "true" : "false (the key could leave the token)");
	note(r, SG_HSM_CHECK_KEY, r->key.extractable ? SG_HSM_CHECK_FAIL : SG_HSM_CHECK_OK, "CKA_EXTRACTABLE: %s",
	     r->key.extractable ? "true (the key could leave the token)" : "false");
	note(r, SG_HSM_CHECK_KEY, r->key.sign ? SG_HSM_CHECK_OK : SG_HSM_CHECK_FAIL, "CKA_SIGN: %s",
	     r->key.sign ? "true" : "false");
	char uses[64];
	sg_hsm_key_uses_text(r->key.other_uses, uses, sizeof(uses));
	note(r, SG_HSM_CHECK_KEY, r->key.other_uses ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "other uses (decrypt, unwrap, derive, sign-recover): %s", r->key.other_uses ? uses : "none");
	if (!r->works)
		return false;
	sg_key_type got;
	if (read_key_pub(&c->h, &c->t, c->sh, c->priv, c->pub, &got, c->spki, sizeof(c->spki), &c->spki_len) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	if (got != c->type) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "asked for %s, the token made %s", sg_key_type_name(c->type),
		     sg_key_type_name(got));
		return false;
	}
	return true;
}

/* Step 4 with an existing key (key_uri): found by its selectors, its type
 * and public key read as sg_hsm_open reads them, its attributes reported;
 * nothing made, so nothing to destroy (c->priv stays out of cleanup). */
static bool check_existing_key(check *c)
{
	sg_hsm_check_report *r = c->r;
	char d[160];
	CK_OBJECT_HANDLE key = CK_INVALID_HANDLE;
	if (find_object(&c->h, &c->t, c->sh, CKO_PRIVATE_KEY, &key, SG_ENOTFOUND) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	sg_key_type got;
	if (read_key(&c->h, &c->t, c->sh, key, &got, c->spki, sizeof(c->spki), &c->spki_len) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	if (got != c->type) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "the key %s is %s: give --key-type %s",
		     key_desc(&c->h, d, sizeof(d)), sg_key_type_name(got), sg_key_type_name(got));
		return false;
	}
	if (read_key_info(&c->h, &c->t, c->sh, key, &r->key) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	r->key_existing = true;
	c->existing = key;
	note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_OK, "existing %s key %s found", sg_key_type_name(got),
	     key_desc(&c->h, d, sizeof(d)));
	/* signetd uses such a key as it is and warns; so does the check. */
	note(r, SG_HSM_CHECK_KEY, r->key.sensitive && !r->key.extractable ? SG_HSM_CHECK_OK : SG_HSM_CHECK_WARN,
	     "CKA_SENSITIVE: %s, CKA_EXTRACTABLE: %s", r->key.sensitive ? "true" : "false",
	     r->key.extractable ? "true (the key could leave the token)" : "false");
	char uses[64];
	sg_hsm_key_uses_text(r->key.other_uses, uses, sizeof(uses));
	note(r, SG_HSM_CHECK_KEY, r->key.other_uses ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "other uses (decrypt, unwrap, derive, sign-recover): %s", r->key.other_uses ? uses : "none");
	return true;
}

/* Step 5: signet's session-object copy of the key, as connect_in_call
 * makes it (an explicit CKA_TOKEN=FALSE). */
static void check_copy(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	CK_BBOOL no = CK_FALSE;
	CK_ATTRIBUTE tmpl[] = {{CKA_TOKEN, &no, sizeof(no)}};
	CK_OBJECT_HANDLE copy = CK_INVALID_HANDLE;
	CK_RV rv = c->h.f->C_CopyObject(c->sh, c->priv, tmpl, 1, &copy);
	snprintf(r->copy_rv, sizeof(r->copy_rv), "%s", ckr_name(rv, &b));
	if (rv == CKR_OK && copy != CK_INVALID_HANDLE && copy != c->priv) {
		c->copy = copy;
		r->copy = 1;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_OK, "C_CopyObject to a session object: supported (a new handle)");
	} else if (rv == CKR_OK) {
		r->copy = 3;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_WARN,
		     "C_CopyObject answered the original handle: signet signs with the token key (no copy)");
	} else if (rv == CKR_FUNCTION_NOT_SUPPORTED) {
		r->copy = 2;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_WARN,
		     "C_CopyObject: CKR_FUNCTION_NOT_SUPPORTED: no copy, slower on SoftHSM2-like modules");
	} else {
		r->copy = 4;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_WARN, "C_CopyObject: %s: signet signs with the token key (no copy)",
		     r->copy_rv);
	}
}

/* What each worker session signs with. The temporary key is a session
 * object already. An existing (token) key is copied to a session object
 * per session first, as signetd does with hsm-copy-key (its default):
 * besides being faster on SoftHSM2, it keeps threads off one token object,
 * which openCryptoki 3.8's soft token does not survive (a SEGV in
 * object_mgr_find_in_map1 with eight threads signing one token key). A
 * module without C_CopyObject signs with the token key, as signetd would. */
static void worker_keys(check *c)
{
	unsigned copies = 0;
	for (unsigned i = 0; i < c->nworkers; i++) {
		c->worker_keys[i] = c->existing != CK_INVALID_HANDLE ? c->existing : c->priv;
		c->worker_copies[i] = false;
		if (c->existing == CK_INVALID_HANDLE)
			continue;
		CK_BBOOL no = CK_FALSE;
		CK_ATTRIBUTE tmpl[] = {{CKA_TOKEN, &no, sizeof(no)}};
		CK_OBJECT_HANDLE copy = CK_INVALID_HANDLE;
		if (c->h.f->C_CopyObject(c->workers[i], c->existing, tmpl, 1, &copy) == CKR_OK &&
		    copy != CK_INVALID_HANDLE && copy != c->existing) {
			c->worker_keys[i] = copy;
			c->worker_copies[i] = true;
			copies++;
		}
	}
	if (c->existing == CK_INVALID_HANDLE)
		return;
	const char *how = copies == c->nworkers ? "each session signs with its own session copy of the key, as signetd does"
	                  : copies ? "some sessions sign with a session copy of the key, the others with the token key"
	                           : "sessions sign with the token key itself (C_CopyObject refused), as signetd would";
	note(c->r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_OK, "%s", how);
}

typedef struct check_worker {
	check *c;
	CK_SESSION_HANDLE sh;
	CK_OBJECT_HANDLE key;
	unsigned mode; /* 0: CHECK_SIGS verified signatures; 1: timed */
	uint64_t until_ns;
	uint64_t start_ns, end_ns;
	uint64_t count;
	CK_RV rv; /* first failure */
	const char *fn;
	uint8_t sigs[CHECK_SIGS][CHECK_SIG_MAX];
	size_t siglens[CHECK_SIGS];
	uint32_t *samples; /* ns per signature, CHECK_SAMPLES at most */
	size_t nsamples;
} check_worker;

static bool worker_sign(check_worker *w, uint8_t *sig, size_t *siglen)
{
	check *c = w->c;
	CK_MECHANISM mech = {sg_key_type_is_ec(c->type) ? CKM_ECDSA : CKM_RSA_PKCS, NULL, 0};
	CK_ULONG n = CHECK_SIG_MAX;
	CK_RV rv = c->h.f->C_SignInit(w->sh, &mech, w->key);
	if (rv != CKR_OK) {
		w->rv = rv;
		w->fn = "C_SignInit";
		return false;
	}
	rv = c->h.f->C_Sign(w->sh, (CK_BYTE_PTR)c->o->sign_input, c->o->sign_input_len, sig, &n);
	if (rv != CKR_OK) {
		w->rv = rv;
		w->fn = "C_Sign";
		return false;
	}
	*siglen = n;
	return true;
}

static void *worker_run(void *arg)
{
	check_worker *w = arg;
	w->start_ns = sg_now_ns();
	if (w->mode == 0) {
		for (size_t i = 0; i < CHECK_SIGS; i++)
			if (!worker_sign(w, w->sigs[i], &w->siglens[i]))
				break;
			else
				w->count++;
	} else {
		uint8_t sig[CHECK_SIG_MAX];
		size_t siglen;
		for (uint64_t t0 = w->start_ns; t0 < w->until_ns;) {
			if (!worker_sign(w, sig, &siglen))
				break;
			uint64_t t1 = sg_now_ns();
			w->count++;
			if (w->nsamples < CHECK_SAMPLES)
				w->samples[w->nsamples++] = t1 - t0 > UINT32_MAX ? UINT32_MAX : (uint32_t)(t1 - t0);
			t0 = t1;
		}
	}
	w->end_ns = sg_now_ns();
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Runs nthreads workers in mode; false when a thread could not start. */
static bool run_workers(check *c, check_worker *w, unsigned nthreads, unsigned mode, unsigned ms)
{
	pthread_t th[SG_HSM_CHECK_THREADS_MAX];
	unsigned started = 0;
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u;
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].c = c;
		w[i].sh = c->workers[i];
		w[i].key = c->worker_keys[i];
		w[i].mode = mode;
		w[i].until_ns = until;
		w[i].count = 0;
		w[i].nsamples = 0;
		w[i].rv = CKR_OK;
		w[i].fn = NULL;
		if (pthread_create(&th[i], NULL, worker_run, &w[i]) != 0)
			break;
		started++;
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return started == nthreads;
}

/* Signatures per second and latency percentiles of a timed round. */
static bool timed_round(check *c, check_worker *w, unsigned nthreads, double *rate, uint64_t *count, double *p50,
                        double *p99)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	unsigned ms = c->o->sign_ms ? c->o->sign_ms : 2000;
	if (!run_workers(c, w, nthreads, 1, ms)) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "cannot start threads");
		return false;
	}
	uint64_t first = UINT64_MAX, last = 0, total = 0;
	size_t nsamples = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		if (w[i].fn) {
			note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "%u threads: %s: %s", nthreads, w[i].fn,
			     ckr_name(w[i].rv, &b));
			return false;
		}
		first = w[i].start_ns < first ? w[i].start_ns : first;
		last = w[i].end_ns > last ? w[i].end_ns : last;
		total += w[i].count;
		nsamples += w[i].nsamples;
	}
	uint32_t *all SG_AUTOFREE = malloc((nsamples ? nsamples : 1) * sizeof(*all));
	if (!all) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "out of memory");
		return false;
	}
	size_t k = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		memcpy(all + k, w[i].samples, w[i].nsamples * sizeof(*all));
		k += w[i].nsamples;
	}
	qsort(all, nsamples, sizeof(*all), cmp_u32);
	*count = total;
	*rate = last > first ? (double)total * 1e9 / (double)(last - first) : 0;
	*p50 = nsamples ? all[nsamples / 2] / 1000.0 : 0;
	*p99 = nsamples ? all[nsamples * 99 / 100] / 1000.0 : 0;
	note(r, SG_HSM_CHECK_SIGN, total ? SG_HSM_CHECK_OK : SG_HSM_CHECK_FAIL,
	     "%u thread%s: %.0f signatures/s over %.1f s, C_SignInit+C_Sign p50 %.0f us, p99 %.0f us", nthreads,
	     nthreads == 1 ? "" : "s", *rate, (double)(last - first) / 1e9, *p50, *p99);
	return total > 0;
}

/* Step 6: sessions opened one at a time, then concurrent signatures, each
 * verified, then the timed rounds. */
static void check_sign(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	unsigned want = c->o->threads ? c->o->threads : SG_HSM_CHECK_THREADS_MAX;
	if (want > SG_HSM_CHECK_THREADS_MAX)
		want = SG_HSM_CHECK_THREADS_MAX;
	long max = r->checked >= 0 ? r->slots[r->checked].max_sessions : -1;
	if (max > 0 && (unsigned long)max <= want) /* one of them is ours already */
		want = max > 1 ? (unsigned)max - 1 : 1;
	for (unsigned i = 0; i < want; i++) {
		/* One at a time, as sg_hsm does: C_OpenSession is not
		 * thread-safe on every module (tpm2-pkcs11). */
		if (open_session(&c->h, &c->t, 0, &c->workers[i]) != SG_OK) {
			note(r, SG_HSM_CHECK_SIGN, i ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_FAIL, "session %u of %u: %s", i + 1,
			     want, sg_error_last()->msg);
			break;
		}
		c->nworkers++;
	}
	r->sessions = c->nworkers;
	if (!c->nworkers)
		return;
	note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_OK, "%u sessions opened one at a time", c->nworkers);
	worker_keys(c);
	if (!c->o->sign_input || !c->o->sign_input_len || c->o->sign_input_len > CHECK_INPUT_MAX) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_WARN, "no input to sign given: signing not checked");
		return;
	}
	check_worker *w SG_AUTOFREE = calloc(c->nworkers, sizeof(*w));
	bool oom = !w;
	for (unsigned i = 0; !oom && i < c->nworkers; i++)
		oom = !(w[i].samples = malloc(CHECK_SAMPLES * sizeof(uint32_t)));
	if (oom) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "out of memory");
		goto out;
	}
	if (!run_workers(c, w, c->nworkers, 0, 0)) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "cannot start threads");
		goto out;
	}
	bool failed_call = false;
	for (unsigned i = 0; i < c->nworkers; i++) {
		if (w[i].fn && !failed_call) {
			failed_call = true;
			note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "session %u: %s: %s", i + 1, w[i].fn,
			     ckr_name(w[i].rv, &b));
		}
		for (size_t k = 0; k < w[i].count; k++) {
			bool ok = !c->o->verify ||
			          c->o->verify(c->o->verify_arg, c->spki, c->spki_len, w[i].sigs[k], w[i].siglens[k]) == SG_OK;
			r->verified += ok;
			r->failed += !ok;
		}
	}
	r->concurrency_ok = !failed_call && r->failed == 0 && r->verified == c->nworkers * CHECK_SIGS;
	if (r->concurrency_ok)
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_OK, "%u threads signing at once: %u signatures, all %s",
		     c->nworkers, r->verified, c->o->verify ? "verify" : "made (not verified)");
	else if (!failed_call)
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "%u threads signing at once: %u of %u signatures do not verify",
		     c->nworkers, r->failed, r->verified + r->failed);
	if (!r->concurrency_ok)
		goto out;
	if (timed_round(c, w, 1, &r->rate_single, &r->signatures_single, &r->p50_us_single, &r->p99_us_single))
		(void)timed_round(c, w, c->nworkers, &r->rate_multi, &r->signatures_multi, &r->p50_us_multi,
		                  &r->p99_us_multi);
out:
	for (unsigned i = 0; w && i < c->nworkers; i++)
		free(w[i].samples);
}

/* Destroys what the check made and closes its sessions (which would
 * destroy the session objects anyway; explicit first, for modules that are
 * slow to notice). */
static void check_cleanup(check *c)
{
	for (unsigned i = 0; i < c->nworkers; i++) {
		if (c->worker_copies[i])
			(void)c->h.f->C_DestroyObject(c->workers[i], c->worker_keys[i]);
		c->h.f->C_CloseSession(c->workers[i]);
	}
	c->nworkers = 0;
	if (c->sh != CK_INVALID_HANDLE) {
		CK_OBJECT_HANDLE objs[3] = {c->copy, c->priv, c->pub};
		for (int i = 0; i < 3; i++)
			if (objs[i] != CK_INVALID_HANDLE)
				(void)c->h.f->C_DestroyObject(c->sh, objs[i]);
		c->h.f->C_CloseSession(c->sh);
		c->sh = CK_INVALID_HANDLE;
	}
}

int sg_hsm_check(const sg_hsm_check_options *opts, sg_hsm_check_report *out)
{
	SG_ENSURE(opts && out && (unsigned)opts->key_type < SG_KEY_TYPE_COUNT, SG_EINVAL, "sg_hsm_check: bad arguments");
	P11KitUri *turi SG_CLEANUP(uri_freep) = NULL;
	if (opts->token_uri)
		SG_TRY(uri_parse(&turi, "token", opts->token_uri, P11_KIT_URI_FOR_OBJECT_ON_TOKEN | P11_KIT_URI_FOR_SLOT));
	P11KitUri *kuri SG_CLEANUP(uri_freep) = NULL;
	if (opts->key_uri)
		SG_TRY(uri_parse(&kuri, "key", opts->key_uri, P11_KIT_URI_FOR_OBJECT));
	check *c SG_AUTOFREE = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	if (kuri) {
		int krc = key_selectors(&c->h, kuri, opts->key_uri);
		if (krc < 0) {
			free(c->h.key_id);
			free(c->h.key_label);
			return krc;
		}
	}
	memset(out, 0, sizeof(*out));
	out->works = true;
	out->checked = -1;
	out->pin_given = opts->pin != NULL;
	c->o = opts;
	c->r = out;
	c->type = opts->key_type;
	c->sh = CK_INVALID_HANDLE;
	c->pub = c->priv = c->copy = c->existing = CK_INVALID_HANDLE;
	snprintf(c->t.label, sizeof(c->t.label), "?");
	if (pthread_mutex_init(&c->h.open_lock, NULL) != 0)
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	if (pthread_mutex_init(&c->h.fault_lock, NULL) != 0) {
		pthread_mutex_destroy(&c->h.open_lock);
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	}
	module *m = NULL;
	bool skip = false;
	if (check_module(c, &m) && check_slots(c, turi) && check_mechanisms_all(c)) {
		if (!opts->pin)
			note(out, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
			     "no PIN (--pin-file or --pin-env): login, key template, copy and signing not checked");
		else if (opts->key_uri && check_login(c) && check_existing_key(c))
			check_sign(c);
		else if (!opts->key_uri && check_login(c) && check_key(c, &skip)) {
			check_copy(c);
			check_sign(c);
		}
	}
	if (m)
		check_cleanup(c);
	module_release(m);
	pthread_mutex_destroy(&c->h.open_lock);
	pthread_mutex_destroy(&c->h.fault_lock);
	free(c->h.key_id);
	free(c->h.key_label);
	return SG_OK;
}
