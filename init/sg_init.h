/*
 * sg_init: making a new CA, shared by `signetctl init` and signetd's
 * embedded default (--init-dir).
 *
 * sg_init_ca is the whole of `signetctl init` except its command line: a
 * folder that signetd can read (signet.conf, the root, a development token
 * issuer, and without an HSM module a SoftHSM2 token private to the folder
 * with its user PIN), the CA key generated inside the token (never
 * extractable), and the new token's SO PIN written outside the folder.
 * It refuses before it creates anything, and removes what it made when a
 * later step fails, so a retry starts clean. A process killed mid-way
 * cannot clean up, so the folder carries a record of the attempt
 * (SG_INIT_PARTIAL_NAME) from before its first file until after its last:
 * a rerun on the same folder removes such a remnant and starts again, or
 * finishes an attempt that had already made the CA whole.
 *
 * sg_init_default_dir is the rule of a container whose entry point is
 * signetd and which has no shell: a state folder STATE holds STATE/ca (the
 * CA, made on first start exactly as `signetctl init --dir STATE/ca
 * --so-pin-file STATE/so-pin` makes it) and STATE/so-pin; later starts
 * find STATE/ca/signet.conf and use it without opening the token.
 *
 * Both run before the process starts threads: opening the SoftHSM2 module
 * sets SOFTHSM2_CONF in the environment. They never log or print a PIN:
 * they log at info what they made (paths, key type, labels) and warn when
 * they remove the remnant of an interrupted first start. Error
 * details name the settings by signetctl init's flags (--dir,
 * --so-pin-file, ...), which the option fields mirror one to one.
 */
#ifndef SG_INIT_H
#define SG_INIT_H

#include "sg_cert.h"
#include "sg_error.h"
#include "sg_hsm.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The defaults, as signetctl init's flag table spells them (the table
 * uses these, so --help and the library cannot disagree). */
#define SG_INIT_DEFAULT_KEY_TYPE "ecdsa-p256" /* SG_KEY_EC_P256, the zero value */
#define SG_INIT_DEFAULT_TRUST_DOMAIN "cluster.local"
#define SG_INIT_DEFAULT_TOKEN_LABEL "signet-ca"
#define SG_INIT_DEFAULT_KEY_LABEL "signet-ca-key" /* followed by "-" and 8 hex digits of the key's CKA_ID */
#define SG_INIT_DEFAULT_CA_NAME "signet root CA"
#define SG_INIT_DEFAULT_CA_TTL "87600h"
#define SG_INIT_DEFAULT_CA_TTL_S (87600LL * 3600)

/* Bounds (signetctl's table enforces them on flags; sg_init_check_options
 * on every caller). Labels are at most 32 bytes (a PKCS#11 token label's
 * size), without control characters and without a space at either end
 * (PKCS#11 pads labels with spaces); they are percent-encoded in the
 * pkcs11: URIs written to signet.conf ("NSS Certificate DB" becomes
 * token=NSS%20Certificate%20DB). */
#define SG_INIT_LABEL_MAX 32
#define SG_INIT_INIT_RESERVED_MAX 1024
#define SG_INIT_TRUST_DOMAIN_MAX 253
#define SG_INIT_CA_NAME_MAX 64
#define SG_INIT_CA_TTL_MIN_S 3600LL
#define SG_INIT_CA_TTL_MAX_S (100LL * 365 * 86400)

/* The record of an attempt under way, inside the CA folder: written
 * (fsync'ed) before anything else is put there, removed (and the removal
 * made durable) after everything else. It holds the SO PIN file's path, so
 * that a rerun knows that file for its own. signet.conf is written last
 * but for the record's removal, after the SO PIN file: a folder with
 * signet.conf holds a whole CA whose SO PIN file was written. */
#define SG_INIT_PARTIAL_NAME "init.partial"

/* Everything borrowed for the call. NULL or 0 means the default. */
typedef struct sg_init_options {
	const char *dir;          /* required: the CA folder; must not exist (its parent must) or be empty */
	sg_key_type key_type;     /* CA key type; 0 is SG_KEY_EC_P256 */
	const char *trust_domain; /* SPIFFE trust domain, also the root's O= */
	const char *hsm_module;   /* PKCS#11 module of an existing token; NULL: a new SoftHSM2 token in dir.
				   * Recorded in signet.conf as given (made absolute, symlinks kept) */
	const char *hsm_init_reserved; /* C_Initialize pReserved string for hsm_module (NSS softoken's
					* configdir=...); recorded as hsm-init-reserved; NULL: none */
	const char *token_label;  /* label of the new token, or of the existing one */
	const char *key_label;    /* label of the new key; NULL: "signet-ca-key-" and 8 hex digits of its
				   * random CKA_ID, so another CA in the same token never collides */
	const char *pin_file;     /* user PIN file of the existing token: required with hsm_module, else unused */
	const char *so_pin_file;  /* new SoftHSM2 token only: where its SO PIN goes (mode 0400); must not
				   * exist and must be outside dir; NULL: "<dir>.so-pin" beside dir */
	const char *ca_name;      /* the root's CN */
	int64_t ca_ttl;           /* root validity, seconds */
	const char *program;      /* who is named in the comments of the files written; NULL: "signetctl init" */
} sg_init_options;

/* Where sg_init_ca put things (absolute, symlink-free paths). */
typedef struct sg_init_result {
	char dir[PATH_MAX];         /* the CA folder */
	char config[PATH_MAX];      /* dir/signet.conf: the --config of signetctl and signetd */
	char so_pin_file[PATH_MAX]; /* the new token's SO PIN; "" with hsm_module */
	int resumed;                /* 0: made now; 1: an interrupted attempt's remnant was removed first;
				     * 2: an interrupted attempt had made the CA whole, this call only
				     *    removed its record (the CA is the earlier attempt's, options and all) */
} sg_init_result;

/* Checks what needs no file system: dir given, labels non-empty and
 * well-formed, hsm_init_reserved only with hsm_module and on one line, lengths and the TTL within the bounds above, a key type that
 * exists, pin_file with hsm_module, no so_pin_file with hsm_module.
 * SG_EINVAL with the detail; signetctl reports it as a usage error (exit 2).
 * sg_init_ca calls it first too. */
SG_API int sg_init_check_options(const sg_init_options *o) SG_MUST_CHECK;

/* Creates the CA described above (signetctl init). Refused before anything
 * is created (SG_EINVAL): an existing non-empty dir (but see below), / as
 * dir, an SO PIN file that exists (even a dangling symlink) or whose
 * temporary (path.new) does, that lies inside dir or cannot be written.
 * SG_EBUSY while another process is making a CA in dir (a lock on dir,
 * held for the whole call). When a later step fails, dir's contents are
 * removed (and dir itself when this call created it) and no SO PIN file
 * is left; the error is the step's own (SG_EHSM, SG_EINVAL, ...).
 *
 * A non-empty dir holding SG_INIT_PARTIAL_NAME is an attempt that was
 * killed: without signet.conf it is removed (with the SO PIN file and
 * temporary the record names) and the CA made again, unless it holds a
 * name init never writes or is not a plain folder (SG_EINVAL, nothing
 * touched); with signet.conf the CA is whole and only the record goes
 * (out->resumed says which). With hsm_module, a killed attempt's key stays
 * in the token (unused; its label is the new key's, its CKA_ID differs).
 * On success out, if not NULL, says where everything is. */
SG_API int sg_init_ca(const sg_init_options *o, sg_init_result *out) SG_MUST_CHECK;

/* Puts back a SoftHSM2 token.object that a process killed while logging
 * in left empty (SoftHSM2 rewrites it in place on every C_Login; empty, the
 * token and its CA key are lost), from the copy sg_init_ca keeps beside it
 * (tokens/<token>/token.object.signet-bak). softhsm_conf is the CA's
 * softhsm2.conf (the softhsm2-conf setting); NULL, a missing file or one
 * without directories.tokendir: nothing to do. Call it before the module
 * is loaded (sg_appliance_open), in the one process using the token store.
 * Logs a warning for each token it restores. SG_EINVAL when a copy cannot
 * be read or written back. */
SG_API int sg_init_softhsm_repair(const char *softhsm_conf) SG_MUST_CHECK;

/* Whether name is one sg_init_ca writes into its folder (signet.conf, the
 * token store, the PIN, the root, the token issuer's files, the record) or
 * a temporary of one ("<name>.new", "<name>.tmp.<digits>"): what a killed
 * attempt's remnant may hold. */
SG_API bool sg_init_made_name(const char *name);

/* A CA certificate (PEM; caller frees *pem) for the key of subject, with
 * the subject O=trust_domain, CN=ca_name, keyCertSign, no path length
 * limit, valid from 5 minutes ago until ttl seconds from now. issuer
 * NULL: a root, self-signed by subject (init's root, a rotation's new
 * root); else signed by signer's key as issuer (a rotation's cross-signed
 * certificate: the new root's name and key under the old root), its
 * validity cut to lie within the issuer's at both ends (it starts no
 * earlier than the issuer does); SG_EINVAL when the issuer has expired or
 * is not valid yet. Both keys stay in their tokens: only the TBS goes in. */
SG_API int sg_init_ca_cert(sg_hsm *subject, sg_hsm *signer, const sg_cert_issuer *issuer, const char *trust_domain,
                           const char *ca_name, int64_t ttl, char **pem, size_t *pem_len) SG_MUST_CHECK;

/*
 * The embedded default CA of a state folder (signetd --init-dir STATE).
 * STATE must exist and be a folder; it is never created here (a missing
 * volume must not pass for an empty one).
 *
 *   STATE/ca/signet.conf exists (and no interrupted attempt is recorded):
 *     its absolute path is written to conf and nothing is written (the
 *     token store is only read, by sg_init_softhsm_repair, which writes
 *     only to restore an emptied token.object), so a read-only STATE works.
 *   otherwise, under a lock (STATE/init.lock, an fcntl lock: a second
 *   process starting on the same STATE waits up to two minutes for the
 *   first, then fails with SG_EBUSY), the CA is made with sg_init_ca and
 *   the defaults: dir STATE/ca, so_pin_file STATE/so-pin, program "signetd
 *   --init-dir".
 *
 * Interrupted attempts. sg_init_ca cleans up after its own failures, but a
 * process killed mid-way cannot. So before it starts, this records
 * STATE/ca.partial (fsync'ed), and removes it only after signet.conf and
 * the SO PIN file are both written. A STATE/ca found with that record was
 * made by an attempt that never finished, and no signer has ever used its
 * key (signetd uses a CA only after this returns). With the record, a
 * STATE/ca whose signet.conf and STATE/so-pin both exist is complete (the
 * process died just before removing the record): the record goes and the
 * CA is used. Any other STATE/ca with the record is removed and made
 * again, even one whose signet.conf exists but whose SO PIN was never
 * written (a CA nobody used is cheaper to remake than to keep without
 * the PIN that can recover its token).
 * A STATE/ca holding sg_init_ca's own record (SG_INIT_PARTIAL_NAME) and no
 * signet.conf is left to sg_init_ca, which removes it with the SO PIN file
 * (and temporary) the record names.
 * Removal is refused (SG_EINVAL, nothing touched) if STATE/ca holds a name
 * sg_init_ca never writes or is not a plain folder. A non-empty STATE/ca
 * without signet.conf and without the record is not ours: SG_EINVAL,
 * nothing touched; an operator decides. An existing STATE/so-pin is
 * sg_init_ca's refusal (it may belong to a live token), reported before
 * anything is removed.
 *
 * SG_EINVAL when STATE is missing, not a folder or not writable when
 * writing is needed; SG_EINVAL when conf (cap bytes) is too small; else
 * sg_init_ca's errors. conf is the caller's buffer; PATH_MAX is enough.
 */
SG_API int sg_init_default_dir(const char *state_dir, char *conf, size_t cap) SG_MUST_CHECK;

#endif
