/*
 * sg_appliance: the settings shared by signetctl and signetd, and the one
 * place that turns them into a running signer (HSM + CA + pool).
 *
 * Both programs read the same config file (written by `signetctl init`) and
 * accept the same names as flags; SG_SETTINGS_ROWS expands to the sg_opt rows
 * for these settings inside a program's own table; log_default is the
 * program's default log level ("info" for the daemon, "warn" for the CLI,
 * whose only stderr output on failure should be the one error line).
 */
#ifndef SG_APPLIANCE_H
#define SG_APPLIANCE_H

#include "sg_ca.h"
#include "sg_error.h"
#include "sg_hsm.h"
#include "sg_opt.h"
#include "sg_pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sg_settings {
	char *config;
	char *hsm_module;
	char *hsm_token;
	char *hsm_key;
	char *pin_file;
	char *pin_env;
	char *pin_credential; /* systemd credential (LoadCredential=) holding the PIN */
	char *hsm_init_reserved;
	char *softhsm2_conf;
	bool hsm_copy_key;
	char *ca_cert;
	char *ca_chain;
	char *root_cert;
	char *trust_domain;
	int64_t signer_threads;
	int64_t hsm_max_sessions;
	int64_t signer_queue;
	bool verify_issued;
	char *jwt_issuer;      /* iss of accepted service-account tokens */
	char *jwt_jwks_file;   /* JWKS (RFC 7517) to verify them with */
	char *jwt_signing_key; /* development issuer's key (signetctl token) */
	char *token_audiences; /* comma-separated aud values accepted */
	int log_level;  /* index into sg_log_level_names */
	int log_format; /* index into sg_log_format_names */
} sg_settings;

/* A credential name is one file name in $CREDENTIALS_DIRECTORY (systemd
 * limits it to NAME_MAX too). */
#define SG_SETTINGS_CREDENTIAL_MAX 255

extern const char *const sg_log_level_names[];
extern const char *const sg_log_format_names[];

#define SG_SETTINGS_ROWS(T, m, log_default)                                                                                   \
	{"config", SG_OPT_PATH, offsetof(T, m.config), NULL, 0, 0, NULL,                                           \
	 "config file (name = value lines, same names as the flags)", true},                                       \
	{"hsm-module", SG_OPT_PATH, offsetof(T, m.hsm_module), NULL, 0, 0, NULL,                                   \
	 "PKCS#11 module (default: SoftHSM2)", false},                                                             \
	{"hsm-token", SG_OPT_STRING, offsetof(T, m.hsm_token), NULL, 0, 4096, NULL,                                \
	 "pkcs11: URI of the token(s) holding the CA key", false},                                                 \
	{"hsm-key", SG_OPT_STRING, offsetof(T, m.hsm_key), NULL, 0, 4096, NULL,                                    \
	 "pkcs11: URI of the CA key (id and/or object label)", false},                                             \
	{"pin-file", SG_OPT_PATH, offsetof(T, m.pin_file), NULL, 0, 0, NULL,                                       \
	 "file holding the token user PIN (mode 0600); wins over pin-env (--pin-file= drops the file's)", false}, \
	{"pin-env", SG_OPT_STRING, offsetof(T, m.pin_env), NULL, 0, 256, NULL,                                     \
	 "environment variable holding the token user PIN", false},                                                \
	{"pin-credential", SG_OPT_STRING, offsetof(T, m.pin_credential), NULL, 0, SG_SETTINGS_CREDENTIAL_MAX, NULL,   \
	 "systemd credential holding the token user PIN: $CREDENTIALS_DIRECTORY/NAME (LoadCredential=NAME:PATH); "  \
	 "takes precedence over pin-file and pin-env", false},                                                      \
	{"hsm-init-reserved", SG_OPT_STRING, offsetof(T, m.hsm_init_reserved), NULL, 0, 4096, NULL,                \
	 "C_Initialize pReserved string (NSS softoken)", false},                                                   \
	{"softhsm2-conf", SG_OPT_PATH, offsetof(T, m.softhsm2_conf), NULL, 0, 0, NULL,                             \
	 "SoftHSM2 configuration file (sets SOFTHSM2_CONF)", false},                                               \
	{"hsm-copy-key", SG_OPT_BOOL, offsetof(T, m.hsm_copy_key), "true", 0, 0, NULL,                             \
	 "sign with a per-session copy of the key where the module allows (faster on SoftHSM2)", false},          \
	{"ca-cert", SG_OPT_PATH, offsetof(T, m.ca_cert), NULL, 0, 0, NULL,                                         \
	 "PEM certificate of the HSM key (root or intermediate)", false},                                          \
	{"ca-chain", SG_OPT_PATH, offsetof(T, m.ca_chain), NULL, 0, 0, NULL,                                       \
	 "PEM certificates between the CA certificate and the root", false},                                       \
	{"root-cert", SG_OPT_PATH, offsetof(T, m.root_cert), NULL, 0, 0, NULL, "PEM root bundle given to clients", \
	 false},                                                                                                    \
	{"trust-domain", SG_OPT_STRING, offsetof(T, m.trust_domain), "cluster.local", 0, 253, NULL,               \
	 "SPIFFE trust domain", false},                                                                             \
	{"signer-threads", SG_OPT_INT, offsetof(T, m.signer_threads), "0", 0, SG_POOL_MAX_THREADS, NULL,          \
	 "signer threads always running (0: one per CPU); more are started, one HSM session each, while the "     \
	 "token is slow to answer and requests wait (see hsm-max-sessions)", false},                               \
	{"hsm-max-sessions", SG_OPT_INT, offsetof(T, m.hsm_max_sessions), "0", 0, SG_POOL_MAX_THREADS, NULL,      \
	 "HSM signing sessions (signer threads) at most, when the token's latency asks for more than signer-"     \
	 "threads (0: the token's own limit, ulMaxSessionCount, at most 256)", false},                             \
	{"signer-queue", SG_OPT_INT, offsetof(T, m.signer_queue), "0", 0, SG_POOL_MAX_QUEUE, NULL,                \
	 "signer queue capacity (0: 1024 per thread, at most 16384); a request that would wait past its deadline is refused at once", false},                                                        \
	{"verify-issued", SG_OPT_BOOL, offsetof(T, m.verify_issued), "false", 0, 0, NULL,                         \
	 "verify every HSM signature in software before returning it", false},                                     \
	{"jwt-issuer", SG_OPT_STRING, offsetof(T, m.jwt_issuer), NULL, 0, 1024, NULL,                             \
	 "issuer (iss) of accepted service-account tokens", false},                                                \
	{"jwt-jwks-file", SG_OPT_PATH, offsetof(T, m.jwt_jwks_file), NULL, 0, 0, NULL,                            \
	 "JWKS file to verify tokens with (reloaded when it changes)", false},                                    \
	{"jwt-signing-key", SG_OPT_PATH, offsetof(T, m.jwt_signing_key), NULL, 0, 0, NULL,                        \
	 "development token issuer's private key (signetctl token)", false},                                      \
	{"token-audiences", SG_OPT_STRING, offsetof(T, m.token_audiences), "istio-ca", 0, 1024, NULL,            \
	 "comma-separated audiences a token must carry one of", false},                                           \
	{"log-level", SG_OPT_LOG_LEVEL, offsetof(T, m.log_level), log_default, 0, 0, NULL,                        \
	 "log level, or a klog verbosity as istio-csr's: 0-1 info, 2-10 debug", false},                            \
	{"log-format", SG_OPT_ENUM, offsetof(T, m.log_format), "text", 0, 0, sg_log_format_names,                \
	 "log format", false}

typedef struct sg_appliance sg_appliance;

/* Applies log settings, reads the PIN (wiped after login), opens the HSM,
 * loads and checks the CA against the HSM key and starts the signer pool.
 * Caller frees with sg_appliance_free. */
SG_API int sg_appliance_open(sg_appliance **out, const sg_settings *s) SG_MUST_CHECK;
SG_API void sg_appliance_free(sg_appliance *a);

/* Follows changed CA settings without a restart (a CA rotation's steps,
 * signetd's reload): opens the key s names (a new HSM handle when hsm-key
 * or hsm-token changed, else the current one), loads and checks s's CA
 * files against it, and when the key or the chain or root bundle differ
 * from the current ones moves the pool's signing to them
 * (sg_pool_set_signer). *changed says whether anything moved. On any
 * failure the appliance signs as before (fail closed: a CA that does not
 * match its key is never used). The previous HSM handle and CA stay
 * alive until sg_appliance_free (in-flight answers borrow the CA's
 * chain); at most SG_APPLIANCE_RELOADS changes per process, then SG_EBUSY
 * (restart to go on). Called from one thread at a time; sg_appliance_ca
 * and sg_appliance_hsm may be read meanwhile from any thread. */
#define SG_APPLIANCE_RELOADS 32
SG_API int sg_appliance_reload(sg_appliance *a, const sg_settings *s, bool *changed) SG_MUST_CHECK;

/* Borrowed until sg_appliance_free; the current ones (after a reload, the
 * new ones). */
SG_API sg_hsm *sg_appliance_hsm(sg_appliance *a);
SG_API const sg_ca *sg_appliance_ca(sg_appliance *a);
SG_API sg_pool *sg_appliance_pool(sg_appliance *a);

/* Reads the PIN named by the settings, the first that is set of:
 * pin-credential ($CREDENTIALS_DIRECTORY/NAME, which systemd's
 * LoadCredential= provides), pin-file, pin-env. A credential and a file are
 * read with sg_secret_from_file (same checks). SG_EINVAL when none is set,
 * when the credential name is bad (see sg_settings_check) or when
 * CREDENTIALS_DIRECTORY is not set (or not absolute). Caller frees *out with
 * sg_secret_free. */
SG_API int sg_settings_pin(const sg_settings *s, sg_secret **out) SG_MUST_CHECK;
/* What the table's bounds cannot say about the settings, checked without
 * touching the HSM or the environment, so that a program can refuse a bad
 * value before it starts anything: a pin-credential name must be one file
 * name (non-empty, no '/', not "." or "..", at most
 * SG_SETTINGS_CREDENTIAL_MAX bytes). SG_EINVAL naming the setting. */
SG_API int sg_settings_check(const sg_settings *s) SG_MUST_CHECK;
/* Fills HSM options from settings; pin is borrowed. */
SG_API void sg_settings_hsm_options(const sg_settings *s, const sg_secret *pin, sg_hsm_options *o);
/* Applies log-level and log-format. */
SG_API void sg_settings_apply_log(const sg_settings *s);

#endif
