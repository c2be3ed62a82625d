/*
 * sg_hsm_impl: what the files of hsm/ share and nobody else sees: the
 * adapter's types (module, token, struct sg_hsm, struct sg_hsm_session),
 * the key-pair template, and the helpers more than one file calls. Not
 * installed, not public; unlike sg_hsm.h it exposes PKCS#11 and p11-kit
 * types. The shared helpers carry an hsm_ prefix, so that none of them can
 * clash with another layer's symbol at link time.
 *
 * The files: sg_hsm.c, the adapter's core (module registry, URIs, objects
 * and attributes, login and sessions, open and free, module re-init,
 * signing, health; its design comment explains the whole); sg_hsm_ckr.c,
 * CKR names and categories; sg_hsm_provision.c, token initialisation and
 * key generation; sg_hsm_check.c, signetctl hsm-check; sg_hsm_probe.c, the
 * health probes' threads.
 */
#ifndef SG_HSM_IMPL_H
#define SG_HSM_IMPL_H

#include "sg_hsm.h"

#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPKI_MAX 1200 /* RSA-8192 SPKI is ~1,060 bytes; we accept up to 4096 */
#define LABEL_LEN 32  /* CK_TOKEN_INFO.label, space padded */

/* ------------------------------------------------------------------ */
/* CKR names (sg_hsm_ckr.c)                                           */

typedef struct ckr_buf {
	char s[32];
} ckr_buf;

/* The symbolic name of rv; unknown codes in hex, in *b. */
const char *hsm_ckr_name(CK_RV rv, ckr_buf *b);
/* Whether the token refused the PIN (never present it again). */
bool hsm_is_pin_error(CK_RV rv);
/* Our category for a CKR: SG_EBUSY (a fault recovery may cure), SG_EAUTH,
 * SG_EINVAL or SG_EHSM. */
int hsm_ckr_category(CK_RV rv);

/* ------------------------------------------------------------------ */
/* Types (sg_hsm.c)                                                   */

typedef struct module {
	struct module *next;
	char *path;
	void *dl;
	CK_FUNCTION_LIST_PTR f;
	unsigned refs;
	atomic_bool owner;   /* we called C_Initialize: C_Finalize at refs 0 */
	char *conf;          /* SOFTHSM2_CONF it was initialised with, or NULL */
	char *init_reserved; /* C_Initialize pReserved, kept for a re-init */

	/* Re-initialisation ("Recovery" atop sg_hsm.c). Lock order: reinit_lock,
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
	char serial_text[17];          /* the same, trimmed, for messages and metric labels */
	/* Signing load (sg_hsm_load): written by the signing threads with
	 * relaxed atomics, read by the signer pool's sizing and by metrics. */
	unsigned max_signing;  /* signer sessions allowed (from ulMaxSessionCount); 0: no limit stated */
	atomic_uint signing;   /* signer sessions open or being opened */
	atomic_uint in_flight; /* signing calls inside the module now */
	_Atomic uint64_t sign_calls, sign_ns, sign_wait_ns, wait_samples, asleep_samples;
	_Atomic uint64_t next_sample_ns; /* the next call at or after it has its wait measured */
	_Atomic uint64_t signed_ns;      /* end of a recent signature for a caller (CLOCK_MONOTONIC); 0: none */
} token;

typedef struct hsm_probes hsm_probes; /* sg_hsm_probe.c */

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

	_Atomic(hsm_probes *) probes; /* the health probes (sg_hsm_probe_start); NULL: none */

	/* sg_hsm_on_sign: arg is stored before fn, read after it. */
	_Atomic(sg_hsm_sign_fn) on_sign;
	_Atomic(void *) on_sign_arg;
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
	bool probe;        /* a health probe's own session: not counted in sessions or signatures */
	bool unplaced;     /* not counted in its token's signer sessions (hsm_session_new) */
	bool recheck_owed; /* a lost handle seen, the module's handles not yet checked */
	CK_SESSION_HANDLE sh;
	CK_OBJECT_HANDLE key; /* what C_SignInit uses: the copy or the token key */
	CK_RV copy_rv;        /* why the copy was not made, when it was not */
};

/* ------------------------------------------------------------------ */
/* Module registry, faults, URIs (sg_hsm.c)                           */

/* The CKR of this thread's last C_Initialize that hsm_module_acquire saw
 * fail (CKR_OK otherwise). */
extern _Thread_local CK_RV hsm_acquire_ckr;

/* Finds or loads the module at path and makes sure it is initialised;
 * hsm_module_release gives it back (NULL is fine). */
int hsm_module_acquire(module **out, const char *path, const char *conf, const char *init_reserved);
void hsm_module_release(module *m);

/* Records the fault (h may be NULL) and the error detail; returns the
 * category. */
int hsm_p11_fail(sg_hsm *h, const token *t, const char *fn, CK_RV rv);
/* A space-padded CK_TOKEN_INFO label, trimmed. */
void hsm_trim_label(char out[LABEL_LEN + 1], const CK_UTF8CHAR in[LABEL_LEN]);

/* Parses a token or key URI; one that carries a PIN is refused. */
int hsm_uri_parse(P11KitUri **out, const char *what, const char *s, P11KitUriType type);
void hsm_uri_freep(P11KitUri **u); /* for SG_CLEANUP */
/* Takes CKA_ID / CKA_LABEL (object=) from the key URI into h. */
int hsm_key_selectors(sg_hsm *h, P11KitUri *uri, const char *s);
/* "id=..;object=.." for messages (labels and ids are not secret). */
const char *hsm_key_desc(const sg_hsm *h, char *buf, size_t cap);

/* ------------------------------------------------------------------ */
/* Objects and attributes (sg_hsm.c)                                  */

/* CKA_EC_PARAMS values: the DER OID of the named curve. */
extern const uint8_t hsm_ec_params_p256[10];
extern const uint8_t hsm_ec_params_p384[7];

/* The private key's uses besides signing (sg_hsm_key_info.other_uses). */
struct key_use {
	CK_ATTRIBUTE_TYPE type;
	unsigned bit;
};
extern const struct key_use hsm_key_uses[4];
#define N_KEY_USES (sizeof(hsm_key_uses) / sizeof(hsm_key_uses[0]))

/* Finds exactly one object of class cls matching h's key selectors; none:
 * notfound_code. */
int hsm_find_object(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_CLASS cls, CK_OBJECT_HANDLE *out,
                    int notfound_code);
/* One CK_BBOOL attribute: 1 true, 0 false, -1 the module does not say. */
int hsm_get_bool(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, CK_ATTRIBUTE_TYPE type, int *out);
/* What the token says of the private key (sg_hsm_key_info). */
int hsm_read_key_info(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, sg_hsm_key_info *out);
/* The key type and SPKI of private key `key`, its public value read from
 * pub, or when that is CK_INVALID_HANDLE from the public key object the
 * selectors find (hsm_read_key). */
int hsm_read_key_pub(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, CK_OBJECT_HANDLE pub,
                     sg_key_type *type, uint8_t *spki, size_t cap, size_t *spki_len);
int hsm_read_key(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE key, sg_key_type *type, uint8_t *spki,
                 size_t cap, size_t *spki_len);
/* The length of a signature by a key of type. */
size_t hsm_sig_len_of(sg_key_type type);
/* The SubjectPublicKeyInfo of an EC key of type (P-256 or P-384) from the
 * bytes of its CKA_EC_POINT: the uncompressed point, raw or wrapped in a
 * DER OCTET STRING as the specification has it. Those bytes are the
 * module's: anything else is SG_EINVAL. The point is not checked to be on
 * the curve here (this layer has no EC arithmetic); OpenSSL refuses such a
 * key wherever it decodes it, as in the CA certificate's checks. */
int hsm_spki_of_ec(sg_key_type type, const uint8_t *raw, size_t n, uint8_t *spki, size_t cap, size_t *len);
/* The type (RSA 2048, 3072 or 4096 bits, from the modulus' bit length,
 * leading zero bytes aside) and SubjectPublicKeyInfo of an RSA key from its
 * CKA_MODULUS and CKA_PUBLIC_EXPONENT bytes (big-endian); another size, or
 * an exponent that is even, below 3 or over 64 bits, is SG_EINVAL. */
int hsm_spki_of_rsa(const uint8_t *n, size_t nlen, const uint8_t *e, size_t elen, sg_key_type *type, uint8_t *spki,
                    size_t cap, size_t *len);

/* ------------------------------------------------------------------ */
/* Sessions, mechanisms, slots (sg_hsm.c)                             */

/* C_OpenSession under h->open_lock (not thread-safe on every module). */
int hsm_open_session(sg_hsm *h, token *t, CK_FLAGS flags, CK_SESSION_HANDLE *sh);
/* Makes sure t->admin is a live, logged-in RW session; t->lock held. */
int hsm_admin_locked(sg_hsm *h, token *t);
/* SG_EINVAL naming the first of want[0..nwant) that t does not support. */
int hsm_check_mechanisms(sg_hsm *h, token *t, const CK_MECHANISM_TYPE *want, const char *const *names, size_t nwant);
/* The slots with a token present, in a fresh array. */
int hsm_list_slots(CK_FUNCTION_LIST_PTR f, CK_SLOT_ID **out, CK_ULONG *n);

/* ------------------------------------------------------------------ */
/* For the health probes (sg_hsm.c, used by sg_hsm_probe.c)           */

/* A session of h pinned to token tok, registered with its module (re-inits
 * and handle re-checks see it) and connected when the token lets it; a
 * probe session (probe) is not counted in sg_hsm_stats.sessions nor its
 * signatures in .signatures. Caller frees with hsm_session_release. */
int hsm_session_new(sg_hsm_session **out, sg_hsm *h, size_t tok, bool probe);
/* Closes s (forgets it without a call when wedged: a call is stuck in the
 * module) and frees it. */
void hsm_session_release(sg_hsm_session *s, bool wedged);
/* The cheap probe on s: C_GetSessionInfo (alive, logged in) and
 * C_GetTokenInfo (the device answers). A session that is not connected,
 * stale, lost or logged out fails with SG_EBUSY (the caller's test
 * signature then reopens it); a lost handle is forgotten and the module's
 * handles re-checked as sg_hsm_sign does. *fn: the call that failed. */
int hsm_session_check(sg_hsm_session *s, const char **fn);
/* A fixed test signature on s through sg_hsm_sign (its recovery
 * included) before deadline_ns. */
int hsm_session_test_sign(sg_hsm_session *s, uint64_t deadline_ns);
/* Whether t counts as failing or down from signing and reopening alone
 * (without the probes' verdict). */
bool hsm_token_troubled(token *t);
/* When the last signature for a caller (not a probe's) succeeded on t,
 * give or take SIGNED_STEP_NS (CLOCK_MONOTONIC; 0: none yet; sg_hsm.c). */
uint64_t hsm_token_signed_at(const token *t);
/* Makes a module re-init that is due (backoff over); what sg_hsm_stats_get
 * does when no probe runs. */
void hsm_module_reinit_if_due(module *m);

/* sg_hsm_probe.c: whether token i counts as down by its probe (the last
 * probe failed, or one has been inside the module past the timeout, and
 * no signature for a caller succeeded within interval + timeout), and
 * whether any probe of h is stuck in the module now. Pure reads. */
bool hsm_probe_token_down(const sg_hsm *h, size_t i, uint64_t now_ns);
bool hsm_probe_wedged(const sg_hsm *h, uint64_t now_ns);
/* Stops h's probes, waiting at most until each probe under way reaches its
 * timeout. True when every probe thread has ended (and its session is
 * freed); false when one is still inside the module: then h must be left
 * as it is (the thread may return into it at any time). */
bool hsm_probe_stop(sg_hsm *h);

/* ------------------------------------------------------------------ */
/* Key generation (sg_hsm_provision.c)                                */

/* The generation template of a CA key pair, shared by sg_hsm_generate_key
 * (token objects) and sg_hsm_check (session objects: what the template
 * gets, without leaving anything behind). The attributes point into the
 * struct itself, so it must stay where hsm_key_template_init filled it. */
typedef struct key_template {
	CK_BBOOL yes, no, on_token;
	CK_ULONG bits;
	CK_BYTE e65537[3];
	CK_MECHANISM_TYPE gen;
	CK_ATTRIBUTE pub[12];
	CK_ATTRIBUTE priv[7 + N_KEY_USES];
	CK_ULONG npub, npub_base, npriv, npriv_base;
} key_template;
/* Fills k for a pair of type (token or session objects) with id and label. */
void hsm_key_template_init(key_template *k, sg_key_type type, bool on_token, const uint8_t *id, size_t id_len,
                           const char *label);
/* C_GenerateKeyPair with k on sh, every use but signing and verifying then
 * cleared; *fell_back (may be NULL) says the pair was made again with them
 * off in the template. The caller reads the result back. */
CK_RV hsm_generate_pair(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, key_template *k, CK_OBJECT_HANDLE *hpub,
                        CK_OBJECT_HANDLE *hpriv, bool *fell_back);

#endif
