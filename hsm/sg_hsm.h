/*
 * sg_hsm: the only code in signet that speaks PKCS#11.
 *
 * An sg_hsm is one loaded module, the tokens selected by a pkcs11: URI
 * (RFC 7512) that all hold the same CA key, and the login state of each.
 * Signing happens through sg_hsm_session handles, one per signer thread:
 * each owns one PKCS#11 session on one token (sessions are spread across
 * tokens round-robin), the cached key handle, and optionally a session-object
 * copy of the key (faster on SoftHSM2; skipped where C_CopyObject is not
 * supported). The hot path is a single-part C_SignInit + C_Sign over a
 * digest (ECDSA) or a DigestInfo (RSA PKCS#1 v1.5).
 *
 * Threading: sg_hsm_open and sg_hsm_free run alone. Sessions are opened and
 * reopened one at a time under an internal lock (some modules' C_OpenSession
 * is not thread-safe); a session handle is then used by one thread at a time
 * and different sessions sign concurrently. Health may be read from any
 * thread. With sg_hsm_probe_start, threads of the sg_hsm's own probe each
 * token while it is idle, so that health notices a token that went silent
 * without a signature failing on it (sg_hsm_probe.c).
 *
 * Faults: CKR_SESSION_HANDLE_INVALID/CLOSED, CKR_USER_NOT_LOGGED_IN,
 * CKR_DEVICE_ERROR/REMOVED/MEMORY and CKR_TOKEN_NOT_PRESENT make sg_hsm_sign
 * reopen the session (and log in again) with exponential backoff, and retry
 * the signature, within the caller's deadline. A wrong or locked PIN is never
 * retried: the token is marked failed and SG_EAUTH returned.
 *
 * When reopened sessions keep failing with module faults (device error,
 * device removed, token not present, a fresh session invalid: what p11-kit's
 * client answers once its server is gone) and signet initialised the module
 * itself, the module is re-initialised: every PKCS#11 call on it drained,
 * C_Finalize, C_Initialize with the same arguments, each token found again by
 * its URI, label and serial number, its admin session reopened, logged in and
 * its key checked; sessions then reopen on the new state. At most one
 * re-init per module at a time, with backoff after a failed one (200 ms,
 * doubling, at most 10 s); counted in sg_hsm_stats.reinits and logged once per
 * attempt. A module someone else initialised is never re-initialised.
 *
 * Keys: CA keys are generated inside the token with CKA_SENSITIVE=TRUE and
 * CKA_EXTRACTABLE=FALSE and never leave it. The PIN is borrowed only for the
 * duration of sg_hsm_open (a copy is kept in a wiped buffer for re-login).
 */
#ifndef SG_HSM_H
#define SG_HSM_H

#include "sg_error.h"
#include "sg_secret.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sg_key_type {
	SG_KEY_EC_P256 = 0,
	SG_KEY_EC_P384,
	SG_KEY_RSA_2048,
	SG_KEY_RSA_3072,
	SG_KEY_RSA_4096,
	SG_KEY_TYPE_COUNT
} sg_key_type;

/* "ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096". */
SG_API const char *sg_key_type_name(sg_key_type t);
SG_API int sg_key_type_parse(const char *s, sg_key_type *out) SG_MUST_CHECK;
SG_API bool sg_key_type_is_ec(sg_key_type t);

/* What sg_hsm_sign computes over its input. */
typedef enum sg_hsm_mech {
	SG_HSM_ECDSA,       /* CKM_ECDSA over a digest; output raw r||s */
	SG_HSM_RSA_PKCS,    /* CKM_RSA_PKCS over a DER DigestInfo */
} sg_hsm_mech;

typedef struct sg_hsm sg_hsm;
typedef struct sg_hsm_session sg_hsm_session;

typedef struct sg_hsm_options {
	const char *module_path;   /* NULL: SoftHSM2 */
	const char *token_uri;     /* "pkcs11:token=..." selects one or more tokens */
	const char *key_uri;       /* "pkcs11:id=%01;object=signet-ca": CKA_ID and/or label */
	const sg_secret *pin;      /* user PIN, borrowed for the call */
	const char *init_reserved; /* C_Initialize pReserved string (NSS softoken); NULL: none */
	const char *softhsm_conf;  /* sets SOFTHSM2_CONF before loading; NULL: leave as is */
	bool copy_key;             /* copy the key to a session object per session */
	bool allow_missing_key;    /* open even when no key matches (to generate one) */
	unsigned max_retries;      /* recovery attempts per signature; 0: default (5) */
	unsigned backoff_ms;       /* first backoff; doubles per attempt; 0: default (20) */
} sg_hsm_options;

/* Loads the module, initialises it with CKF_OS_LOCKING_OK, finds every
 * token the URI matches, logs in to each, finds the key by id/label and
 * checks that the token supports its mechanism. Caller frees with
 * sg_hsm_free. Errors: SG_ENOTFOUND (module, token or key missing), SG_EAUTH
 * (PIN wrong or locked), SG_EINVAL (bad URI, a URI carrying pin-value,
 * unsupported key/mechanism, tokens holding different keys), SG_EHSM (the
 * module failed). Login is process-wide: while another sg_hsm of this
 * process is logged in to a token, modules like SoftHSM2 accept any PIN. */
SG_API int sg_hsm_open(sg_hsm **out, const sg_hsm_options *opts) SG_MUST_CHECK;
/* Stops the health probes, closes every session (closing the process's last
 * session on a token ends its login; no explicit C_Logout, which would also
 * log out another sg_hsm on the same token) and finalizes the module when
 * the last sg_hsm of that module goes and signet was the one to initialise
 * it. A probe still inside the module at its timeout is left there, and h
 * with it: nothing is closed or finalized under it (sg_hsm_threads_left).
 * Accepts NULL. Sessions must be freed first. */
SG_API void sg_hsm_free(sg_hsm *h);

/* Type of the key found (or generated). */
SG_API int sg_hsm_key_type(const sg_hsm *h, sg_key_type *out) SG_MUST_CHECK;
/* The key's SubjectPublicKeyInfo DER, read from the token when the key was
 * found or generated (EC: the public key object's CKA_EC_POINT; RSA: the
 * private key's CKA_MODULUS and CKA_PUBLIC_EXPONENT). Caller frees *der with
 * free(). */
SG_API int sg_hsm_public_key(const sg_hsm *h, uint8_t **der, size_t *len) SG_MUST_CHECK;
/* How many tokens are in use. */
SG_API size_t sg_hsm_token_count(const sg_hsm *h);

/* Opens a session for one signer thread, on the next token (round robin)
 * below its session cap (sg_hsm_load.max_sessions). Caller frees with
 * sg_hsm_session_free. SG_EBUSY: every token is at its cap. */
SG_API int sg_hsm_session_open(sg_hsm_session **out, sg_hsm *h) SG_MUST_CHECK;
/* Closes the session; while a health probe is stuck inside the module it
 * is forgotten without a call instead (the call could wait behind the stuck
 * one for good). */
SG_API void sg_hsm_session_free(sg_hsm_session *s);
/* Whether this session signs with a session-object copy of the key. */
SG_API bool sg_hsm_session_uses_copy(const sg_hsm_session *s);
/* Index (0 .. sg_hsm_token_count() - 1) of the token this session signs on,
 * for metrics and tests. */
SG_API size_t sg_hsm_session_token(const sg_hsm_session *s);

/* Signs in (a digest or DigestInfo) into sig (capacity *siglen; on return the
 * length). Recovers from session and login faults as described above while
 * now < deadline_ns (CLOCK_MONOTONIC; 0: no deadline). Errors: SG_EBUSY (a
 * transient fault outlasted the retries), SG_ETIMEOUT, SG_EAUTH, SG_EHSM,
 * SG_EINVAL (buffer too small). */
SG_API int sg_hsm_sign(sg_hsm_session *s, sg_hsm_mech mech, const uint8_t *in, size_t inlen,
		       uint8_t *sig, size_t *siglen, uint64_t deadline_ns) SG_MUST_CHECK;

typedef enum sg_hsm_state {
	SG_HSM_OK = 0,       /* every token usable */
	SG_HSM_DEGRADED = 1, /* some token failing, or recovering */
	SG_HSM_DOWN = 2,     /* no token usable */
} sg_hsm_state;

typedef struct sg_hsm_stats {
	sg_hsm_state state;
	uint64_t signatures;  /* successful C_Sign calls */
	uint64_t faults;      /* faults seen (any CKR other than OK) */
	uint64_t recoveries;  /* successful session reopen/re-login */
	uint64_t reinits;     /* successful re-initialisations of the module (C_Finalize + C_Initialize) */
	uint64_t sessions;    /* sessions open now */
	char last_fault[128]; /* "C_Sign: CKR_SESSION_HANDLE_INVALID", or "" */
} sg_hsm_stats;

/* Snapshot of health and counters; safe from any thread. With health
 * probes running (sg_hsm_probe_start) it only reads state and makes no
 * PKCS#11 call; what follows is its behaviour without them. When a module
 * re-initialisation is due (see Faults above) the calling thread makes the
 * attempt first: readiness polling is what brings the module back while no
 * signature is asked for. Bounded by the re-init backoff; another caller
 * does not wait for an attempt in flight. A token on which 3 signatures in a
 * row were given up (recovery exhausted, or a module error) counts as down
 * even though its sessions reopen; while it does, the calling thread makes
 * a test signature on it at most once a second (another caller does not
 * wait for one in flight), and a good one brings it back. The thread's
 * error detail is kept. */
SG_API void sg_hsm_stats_get(const sg_hsm *h, sg_hsm_stats *out);

/* --- signing load (for the signer pool's sizing and for metrics) --- */

typedef struct sg_hsm_load {
	uint64_t calls;        /* signing calls (C_SignInit + C_Sign) made on signer sessions, failed ones too */
	uint64_t call_ns;      /* their wall time, summed */
	uint64_t wait_samples; /* calls whose wait was measured (one in a few) */
	uint64_t asleep;       /* of those, calls that slept 20 us or more (a slow token makes every call
	                        * one; contention inside the module, a few) */
	uint64_t wait_ns;      /* their time asleep in the module (wall time less on a CPU and runnable): waiting
	                        * for the token */
	unsigned in_flight;    /* signing calls inside the module now */
	unsigned sessions;     /* signer sessions open (or opening) */
	unsigned max_sessions; /* signer sessions allowed: the token's ulMaxSessionCount less 2 (its admin
	                        * session and a health probe's); 0: the token states no limit */
} sg_hsm_load;

/* Token i's load (zeros when i is out of range); lock-free, makes no
 * PKCS#11 call, safe from any thread. */
SG_API void sg_hsm_token_load(const sg_hsm *h, size_t i, sg_hsm_load *out);
/* Summed over the tokens; max_sessions over those that can sign, 0 when
 * any of them states no limit. */
SG_API void sg_hsm_load_get(const sg_hsm *h, sg_hsm_load *out);

/* Told the wall time of each signing call on a signer session, on the
 * signing thread, right after the call: token is the index
 * (sg_hsm_token_label). Must be quick, lock-free and must not call into h.
 * Set once (before signatures start, or later: a call already under way
 * may miss it); fn NULL stops it. */
typedef void (*sg_hsm_sign_fn)(size_t token, double seconds, void *arg);
SG_API void sg_hsm_on_sign(sg_hsm *h, sg_hsm_sign_fn fn, void *arg);

/* --- health probes (sg_hsm_probe.c) --- */

/* What one health probe of a token found. */
typedef enum sg_hsm_probe_result {
	SG_HSM_PROBE_OK = 0, /* the token answered within the timeout */
	SG_HSM_PROBE_FAILED, /* it answered with an error, and a test signature failed too */
	SG_HSM_PROBE_LATE,   /* it answered, but after the timeout (counted as down) */
	SG_HSM_PROBE_STUCK,  /* the probe has been inside the module for the timeout and has not returned */
} sg_hsm_probe_result;

/* Told each probe's result: token is the index (sg_hsm_token_label),
 * seconds how long the probe took (STUCK: how long it has been inside).
 * A STUCK probe is told once when it passes its timeout, and again with
 * its result (LATE or FAILED) if it ever returns. Called on the probes'
 * own threads, one call at a time per sg_hsm, never after sg_hsm_free has
 * returned; it must be quick and must not call into h. */
typedef void (*sg_hsm_probe_fn)(size_t token, sg_hsm_probe_result result, double seconds, void *arg);

typedef struct sg_hsm_probe_options {
	unsigned interval_ms;     /* between the end of one probe and the next; > 0 */
	unsigned timeout_ms;      /* a probe not answered by then counts as down; > 0 */
	sg_hsm_probe_fn on_probe; /* NULL: not told */
	void *arg;
} sg_hsm_probe_options;

/* Starts a health probe per token of h, so that an idle token that goes
 * silent or fails is noticed without a signature being asked for: every
 * interval_ms, on a session of its own, a cheap call (C_GetSessionInfo,
 * C_GetTokenInfo); while the token is failing (its last probe failed, or
 * signatures or reopens on it fail) a test signature instead, made with
 * sg_hsm_sign's recovery. The probe's verdict joins sg_hsm_stats_get's
 * state: a token whose last probe failed or came late, or whose probe has
 * been inside the module for timeout_ms, is down until a probe answers in
 * time again (after a late answer the next probe is made at once), unless
 * a signature for a caller succeeded on it within interval_ms + timeout_ms
 * (a busy token's probe may wait behind its signatures). A token that
 * signed for a caller since its last probe, and is not failing, is not
 * probed when the next one is due (on_probe is not told). Once
 * probes run, sg_hsm_stats_get makes no PKCS#11 call (the probes make the
 * due re-init attempts and test signatures), so a hung module cannot hold
 * up its caller. Call once. Other threads may be reading h's health
 * meanwhile (signetd starts probes on the handle a rotation moved to while
 * its metrics are read): a read that found no probes yet makes its calls
 * as without them (on the token's admin session, under its lock), beside
 * the probes' calls on their own sessions.
 * Errors: SG_EINVAL (bad options, started twice, no key), SG_EINTERNAL (no
 * memory or thread). Stopped by sg_hsm_free, which waits for a probe under
 * way at most until its timeout. */
SG_API int sg_hsm_probe_start(sg_hsm *h, const sg_hsm_probe_options *o) SG_MUST_CHECK;

/* Stops h's health probes before sg_hsm_free (a handle a CA rotation has
 * retired: its probes would go on testing a key that may be destroyed, and
 * telling on_probe about it). Waits like sg_hsm_free, at most until each
 * probe under way reaches its timeout; on_probe is not called once this
 * returns. h's health then stays as the last probes left it, without
 * PKCS#11 calls. True when every probe thread has ended, false when one
 * was left inside the module (logged; sg_hsm_free will then leave h as
 * it is). Nothing to stop (no probes, or stopped already): true, or the
 * first stop's answer. Not concurrently with sg_hsm_probe_start or
 * sg_hsm_free on h. */
SG_API bool sg_hsm_probe_stop(sg_hsm *h);

/* Token i's label and serial number (trimmed), for logs and metric labels;
 * NULL when i is out of range. Borrowed until sg_hsm_free. */
SG_API const char *sg_hsm_token_label(const sg_hsm *h, size_t i);
SG_API const char *sg_hsm_token_serial(const sg_hsm *h, size_t i);

/* Probe threads sg_hsm_free left behind in this process because their call
 * was still inside a PKCS#11 module (each logged once). A process with any
 * should end with _exit rather than exit: a module's destructors would run
 * under a call still inside it, and could wait for it for good. */
SG_API unsigned sg_hsm_threads_left(void);

/* What the token says of the CA key (the private key on the first token),
 * read when the key was found or generated. A CA key signet generates is
 * sensitive, not extractable, and has every use below turned off where the
 * module lets it (sg_hsm_generate_key); an existing key is used as it is,
 * with a warning logged when it is extractable or has other uses. */
enum {
	SG_HSM_USE_DECRYPT = 1u << 0,      /* CKA_DECRYPT */
	SG_HSM_USE_UNWRAP = 1u << 1,       /* CKA_UNWRAP */
	SG_HSM_USE_DERIVE = 1u << 2,       /* CKA_DERIVE */
	SG_HSM_USE_SIGN_RECOVER = 1u << 3, /* CKA_SIGN_RECOVER */
};
typedef struct sg_hsm_key_info {
	bool sensitive;      /* CKA_SENSITIVE (false when the module does not say) */
	bool extractable;    /* CKA_EXTRACTABLE (true when the module does not say) */
	bool sign;           /* CKA_SIGN */
	unsigned other_uses; /* SG_HSM_USE_* that read TRUE */
} sg_hsm_key_info;
/* SG_ENOTFOUND before a key was found or generated. */
SG_API int sg_hsm_key_info_get(const sg_hsm *h, sg_hsm_key_info *out) SG_MUST_CHECK;
/* "decrypt, unwrap" for SG_HSM_USE_DECRYPT | SG_HSM_USE_UNWRAP ("" for 0),
 * truncated to cap; returns the length it needed. */
SG_API size_t sg_hsm_key_uses_text(unsigned uses, char *buf, size_t cap);

/* --- provisioning (signetctl init; not for the hot path) --- */

/* Initialises the first token-less or uninitialised slot with label, sets the
 * SO PIN and the user PIN (C_InitToken, C_InitPIN). Nothing is exec'd and no
 * PIN appears in argv. */
SG_API int sg_hsm_init_token(const char *module_path, const char *softhsm_conf, const char *init_reserved,
			     const char *label, const sg_secret *so_pin, const sg_secret *user_pin) SG_MUST_CHECK;

/* Generates a key pair on the first token of h with the label and id of the
 * key URI given to sg_hsm_open: private key CKA_TOKEN, CKA_PRIVATE,
 * CKA_SENSITIVE, CKA_SIGN true and CKA_EXTRACTABLE, CKA_DECRYPT, CKA_UNWRAP,
 * CKA_DERIVE, CKA_SIGN_RECOVER false; public key CKA_VERIFY true and
 * CKA_ENCRYPT, CKA_WRAP, CKA_VERIFY_RECOVER, CKA_DERIVE false. The uses are
 * set FALSE on the new pair (C_SetAttributeValue); a module that keeps a
 * private-key use it will not clear gets the pair made again with the uses
 * FALSE in the template (some modules fail a generation over a use
 * attribute they misread, so the template is the second way, not the
 * first). Uses it keeps anyway are logged (sg_hsm_key_info_get tells them). Fails with SG_EINVAL
 * when a key with that id/label exists, and with SG_EHSM (the pair
 * destroyed) when the key reads back extractable, not sensitive or unable
 * to sign. */
SG_API int sg_hsm_generate_key(sg_hsm *h, sg_key_type type) SG_MUST_CHECK;

/* Destroys the key pair of the key URI given to sg_hsm_open (private and
 * public key objects, on every token of h): the end of a CA rotation
 * (signetctl rotate finish), once nothing signs with it. Sessions of h must
 * be freed first (a session's copy of the key would outlive it until the
 * session closes). An object already gone is not an error, so a rerun
 * after a kill completes; *destroyed counts the objects destroyed now.
 * SG_EHSM when the module refuses (the key stays). */
SG_API int sg_hsm_destroy_key(sg_hsm *h, unsigned *destroyed) SG_MUST_CHECK;

/* --- hsm-check (signetctl hsm-check; not for the hot path) --- */

/* sg_hsm_check answers "will signet work with this module and token?" by
 * walking the module the way signetd would, step by step, and recording
 * what it found: facts for a script (the report fields) and one note per
 * finding (a level and a short reason) for a person. It never prints. */
typedef enum sg_hsm_check_step {
	SG_HSM_CHECK_MODULE = 0, /* load, C_GetInfo, C_Initialize */
	SG_HSM_CHECK_SLOTS,      /* slots, tokens, which the URI selects */
	SG_HSM_CHECK_MECHS,      /* mechanisms of the selected token, key types */
	SG_HSM_CHECK_KEY,        /* login, a temporary key with signet's template */
	SG_HSM_CHECK_COPY,       /* C_CopyObject to a session object */
	SG_HSM_CHECK_SIGN,       /* concurrent sessions, verified signatures, rates */
	SG_HSM_CHECK_STEP_COUNT
} sg_hsm_check_step;

typedef enum sg_hsm_check_level {
	SG_HSM_CHECK_OK = 0,
	SG_HSM_CHECK_WARN,
	SG_HSM_CHECK_FAIL, /* signet will not work */
} sg_hsm_check_level;

#define SG_HSM_CHECK_SLOTS_MAX 32  /* slots described (more are counted) */
#define SG_HSM_CHECK_NOTES_MAX 128 /* notes kept (more are dropped, counted) */
#define SG_HSM_CHECK_THREADS_MAX 8

typedef struct sg_hsm_check_note {
	sg_hsm_check_step step;
	sg_hsm_check_level level;
	char text[200];
} sg_hsm_check_note;

typedef struct sg_hsm_check_slot {
	unsigned long id;
	char description[65];  /* CK_SLOT_INFO.slotDescription, trimmed */
	bool token_present;
	/* The rest only with a token present. */
	char label[33];        /* CK_TOKEN_INFO, trimmed */
	char manufacturer[33];
	char model[17];
	char serial[17];
	bool initialized, login_required, user_pin_initialized, user_pin_locked, rng, write_protected;
	long max_sessions;     /* ulMaxSessionCount; 0: no limit; -1: the token does not say */
	bool selected;         /* the token URI matches it (an initialised token) */
} sg_hsm_check_slot;

typedef struct sg_hsm_check_mech {
	bool present;
	unsigned long min_bits, max_bits; /* CK_MECHANISM_INFO key sizes as the module states them */
	bool sign, generate_key_pair, hw; /* CKF_SIGN, CKF_GENERATE_KEY_PAIR, CKF_HW */
} sg_hsm_check_mech;

typedef struct sg_hsm_check_report {
	/* 1. module */
	bool loaded, initialized;
	bool needs_init_reserved;           /* C_Initialize refused without an init string */
	unsigned cryptoki_major, cryptoki_minor;
	char manufacturer[33], library[33]; /* CK_INFO, trimmed */
	unsigned library_major, library_minor;
	/* 2. slots */
	sg_hsm_check_slot slots[SG_HSM_CHECK_SLOTS_MAX];
	size_t nslots;                      /* described */
	size_t nslots_total;                /* the module's count */
	size_t nselected;                   /* initialised tokens the URI matches */
	int checked;                        /* index into slots of the token checked below, or -1 */
	/* 3. mechanisms of the checked token */
	sg_hsm_check_mech ec_gen, ecdsa, rsa_gen, rsa_pkcs;
	size_t nmechanisms;
	bool key_types[SG_KEY_TYPE_COUNT];  /* signet's key types the token can hold */
	/* 4. with a PIN */
	bool pin_given, logged_in;
	bool key_generated;                 /* temporary session-object pair made */
	bool key_existing;                  /* signing with the key of key_uri instead (found on the token) */
	bool key_fallback;                  /* the module refused the use attributes (sg_hsm_generate_key's fallback) */
	sg_hsm_key_info key;                /* read back from the temporary private key */
	/* 5. copy: 0 not tried, 1 a new session object, 2 not supported, 3 same handle, 4 another error */
	int copy;
	char copy_rv[32];
	/* 6. concurrency */
	unsigned sessions;                  /* sessions opened one at a time */
	bool concurrency_ok;                /* every signature of the concurrent round verified */
	unsigned verified, failed;          /* signatures checked in that round */
	double rate_single, rate_multi;     /* signatures per second, 1 thread and `sessions` threads */
	uint64_t signatures_single, signatures_multi;
	double p50_us_single, p99_us_single, p50_us_multi, p99_us_multi; /* C_SignInit + C_Sign */
	/* 7. verdict */
	bool works;                         /* no FAIL note */
	sg_hsm_check_note notes[SG_HSM_CHECK_NOTES_MAX];
	size_t nnotes, notes_dropped;
} sg_hsm_check_report;

/* Verifies sig (as sg_hsm_sign returns it: raw r||s, or PKCS#1 v1.5) made
 * over the caller's sign_input with the key whose SubjectPublicKeyInfo is
 * spki; SG_OK when it verifies. Called from the checking thread only. */
typedef int (*sg_hsm_check_verify_fn)(void *arg, const uint8_t *spki, size_t spki_len, const uint8_t *sig,
				      size_t siglen);

typedef struct sg_hsm_check_options {
	const char *module_path;   /* NULL: SoftHSM2 */
	const char *init_reserved; /* C_Initialize pReserved string; NULL: none */
	const char *softhsm_conf;  /* as sg_hsm_options */
	const char *token_uri;     /* NULL: every initialised token, the first one checked */
	const sg_secret *pin;      /* NULL: only what needs no login (steps 1-3) */
	const char *key_uri;       /* sign with this existing private key (id=/object=; CA keys are used as
				    * they are: its attributes are read, nothing is generated, copied or
				    * destroyed); NULL: a temporary pair. The key must be key_type. */
	sg_key_type key_type;      /* of the temporary key */
	/* What each test signature is made over: a digest (ECDSA) or a
	 * DigestInfo (RSA) for key_type, at most 128 bytes. */
	const uint8_t *sign_input;
	size_t sign_input_len;
	unsigned sign_ms;          /* length of each timed round; 0: 2000 */
	unsigned threads;          /* sessions and threads; 0: 8; at most SG_HSM_CHECK_THREADS_MAX */
	sg_hsm_check_verify_fn verify; /* NULL: signatures are not verified */
	void *verify_arg;
} sg_hsm_check_options;

/* Runs the steps above on the module through the same loading path as
 * sg_hsm_open, stopping where a step fails, and fills *out (which may be
 * large: allocate it). With a PIN it logs in once (a refused PIN is never
 * presented again) and makes a key pair of key_type with sg_hsm_generate_key's
 * template as session objects (CKA_TOKEN=FALSE); every object it makes is
 * destroyed and every session closed before it returns, on every path, so the
 * token is left as it was. The PIN is never copied into the report.
 * With key_uri the temporary pair is not made: the key the URI names is
 * found, its attributes read and reported, and the timed rounds sign with
 * it (the raw C_Sign rate of the key signetd would use); the key is left
 * as it was. Returns SG_OK when the check ran to its end or stopped at a
 * finding (then
 * out->works tells the answer); SG_EINVAL for bad options (a malformed URI,
 * or one carrying a PIN) and SG_EINTERNAL when out of memory, with nothing
 * touched. */
SG_API int sg_hsm_check(const sg_hsm_check_options *opts, sg_hsm_check_report *out) SG_MUST_CHECK;

#endif
