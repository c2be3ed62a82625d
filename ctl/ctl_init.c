/*
 * signetctl init: a new CA in a new folder.
 *
 * Without --hsm-module the folder gets its own SoftHSM2 token (config, token
 * store, user PIN and SO PIN files, all private to the folder); with one, the
 * key goes into the named token of that module. Either way the CA key is
 * generated inside the token (never extractable), a self-signed root is made
 * by signing our own TBS through the same HSM path the signer uses, and
 * signet.conf records where everything is.
 *
 * Refusal is the first step: an existing non-empty folder is left untouched.
 * When a later step fails, a folder that init created is removed again, so a
 * retry starts clean.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "ctl.h"
#include "sg_cert.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_hsm.h"
#include "sg_issuer.h"
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_secret.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The development issuer's name: .invalid never resolves (RFC 2606). */
#define DEV_ISSUER "https://signet.invalid/dev-issuer"

typedef struct init_args {
	char *dir;
	int key_type;
	char *trust_domain;
	char *hsm_module;
	char *token_label;
	char *pin_file;
	char *ca_name;
	int64_t ca_ttl;
	int log_level;
} init_args;

static const char *const key_types[] = {"ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096", NULL};
static const char *const levels[] = {"debug", "info", "warn", "error", NULL};

static const sg_opt init_opts[] = {
	{"dir", SG_OPT_PATH, offsetof(init_args, dir), NULL, 0, 0, NULL, "folder for the new CA (must not exist or be empty)", true},
	{"key-type", SG_OPT_ENUM, offsetof(init_args, key_type), "ecdsa-p256", 0, 0, key_types, "CA key type", true},
	{"trust-domain", SG_OPT_STRING, offsetof(init_args, trust_domain), "cluster.local", 0, 253, NULL,
	 "SPIFFE trust domain (also the root's O=)", true},
	{"hsm-module", SG_OPT_PATH, offsetof(init_args, hsm_module), NULL, 0, 0, NULL,
	 "PKCS#11 module of an existing token (default: a new SoftHSM2 token inside --dir)", true},
	{"token-label", SG_OPT_STRING, offsetof(init_args, token_label), "signet-ca", 0, 32, NULL, "token label", true},
	{"pin-file", SG_OPT_PATH, offsetof(init_args, pin_file), NULL, 0, 0, NULL,
	 "user PIN file of the existing token (with --hsm-module)", true},
	{"ca-name", SG_OPT_STRING, offsetof(init_args, ca_name), "signet root CA", 0, 64, NULL, "root CN", true},
	{"ca-ttl", SG_OPT_DURATION, offsetof(init_args, ca_ttl), "87600h", 3600, 100LL * 365 * 86400, NULL,
	 "root validity", true},
	{"log-level", SG_OPT_ENUM, offsetof(init_args, log_level), "info", 0, 0, levels, "log level", true},
};
#define N_INIT_OPTS (sizeof(init_opts) / sizeof(init_opts[0]))

int ctl_sign_wrap(sg_issuer *is, sg_sigalg alg, const uint8_t *tbs, size_t tbs_len, sg_der_writer *w)
{
	uint8_t sig[1100];
	size_t sig_len = sizeof(sig);
	SG_TRY(sg_issuer_sign_raw(is, alg, tbs, tbs_len, sig, &sig_len, sg_now_ns() + 30ull * 1000000000u));
	return sg_cert_encode(w, tbs, tbs_len, alg, sig, sig_len);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	/* The folder itself stays unless init created it (see ctl_init). */
	return ftw->level == 0 ? 0 : remove(path);
}

static int check_dir(const char *dir, bool *created)
{
	*created = false;
	DIR *d = opendir(dir);
	if (!d) {
		SG_ENSURE(errno == ENOENT, SG_EINVAL, "cannot use %s: %s", dir, strerror(errno));
		SG_ENSURE(mkdir(dir, 0700) == 0, SG_EINVAL, "cannot create %s: %s", dir, strerror(errno));
		*created = true;
		return SG_OK;
	}
	struct dirent *e;
	bool empty = true;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = false;
	closedir(d);
	SG_ENSURE(empty, SG_EINVAL, "%s exists and is not empty; refusing to touch it", dir);
	return SG_OK;
}

static int write_secret(const char *path, const sg_secret *s)
{
	return ctl_write_file(path, sg_secret_data(s), sg_secret_len(s), 0600, 1);
}

/* The embedded default: a SoftHSM2 token private to the folder. */
static int make_softhsm(const init_args *a, const char *abs_dir, sg_secret **pin)
{
	char *tokens SG_AUTOFREE = ctl_join(abs_dir, "tokens");
	char *conf SG_AUTOFREE = ctl_join(abs_dir, "softhsm2.conf");
	char *pin_path SG_AUTOFREE = ctl_join(abs_dir, "pin");
	char *so_path SG_AUTOFREE = ctl_join(abs_dir, "so-pin");
	SG_ENSURE(tokens && conf && pin_path && so_path, SG_EINTERNAL, "out of memory");
	SG_ENSURE(mkdir(tokens, 0700) == 0, SG_EINVAL, "cannot create %s: %s", tokens, strerror(errno));
	char text[PATH_MAX + 256];
	int n = snprintf(text, sizeof(text),
			 "# SoftHSM2 token store of this signet CA (written by signetctl init).\n"
			 "directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n"
			 "slots.removable = false\n",
			 tokens);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "folder path too long");
	SG_TRY(ctl_write_file(conf, text, (size_t)n, 0600, 1));

	sg_secret *so SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_secret_random_hex(pin, 16));
	SG_TRY(sg_secret_random_hex(&so, 16));
	SG_TRY(write_secret(pin_path, *pin));
	SG_TRY(write_secret(so_path, so));
	return sg_hsm_init_token(NULL, conf, NULL, a->token_label, so, *pin);
}

static int make_root(const init_args *a, sg_hsm *hsm, sg_key_type type, char **pem, size_t *pem_len)
{
	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	SG_TRY(sg_hsm_public_key(hsm, &spki, &spki_len));
	sg_pubkey key;
	SG_TRY(sg_pubkey_parse(&key, spki, spki_len));

	sg_issuer *is = NULL;
	SG_TRY(sg_issuer_new(&is, NULL, hsm, NULL));
	int rc;
	sg_rdn subject[2] = {
		{SG_NAME_O, SG_DER_UTF8STRING, {(const uint8_t *)a->trust_domain, strlen(a->trust_domain)}},
		{SG_NAME_CN, SG_DER_UTF8STRING, {(const uint8_t *)a->ca_name, strlen(a->ca_name)}},
	};
	uint8_t name[1024], key_id[20], tbs[SG_CERT_MAX_DER], cert[SG_CERT_MAX_DER + 1200];
	sg_der_writer nw, tw, cw;
	sg_der_writer_init(&nw, name, sizeof(name));
	sg_name_encode(&nw, subject, 2);
	SG_TRY_GOTO(rc, sg_der_writer_status(&nw), out);
	SG_TRY_GOTO(rc, sg_key_id(sg_issuer_crypto(is), &key, key_id), out);

	int64_t now = sg_wall_seconds();
	/* Backdated a little so that clients with a slow clock accept it. */
	sg_cert_issuer self = {{name, nw.len}, {key_id, 20}, sg_sigalg_for_ca(type), now - 300, now + a->ca_ttl};
	sg_cert_spec spec = {
		.not_before = self.not_before,
		.not_after = self.not_after,
		.subject = subject,
		.subject_len = 2,
		.key = &key,
		.key_usage = SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN | SG_KU_DIGITAL_SIGNATURE,
		.is_ca = true,
		.path_len = -1,
	};
	SG_TRY_GOTO(rc, sg_cert_serial(&spec), out);
	SG_TRY_GOTO(rc, sg_cert_lint(&spec, &self, true), out);
	sg_der_writer_init(&tw, tbs, sizeof(tbs));
	SG_TRY_GOTO(rc, sg_cert_encode_tbs(&tw, &spec, &self, sg_issuer_crypto(is)), out);
	sg_der_writer_init(&cw, cert, sizeof(cert));
	SG_TRY_GOTO(rc, ctl_sign_wrap(is, self.sigalg, tw.buf, tw.len, &cw), out);
	rc = sg_pem_encode("CERTIFICATE", cw.buf, cw.len, pem, pem_len);
out:
	sg_issuer_free(is);
	return rc;
}

static int write_config(const init_args *a, const char *abs_dir, const char *token_uri, const char *key_uri,
			const char *module, const char *pin_file)
{
	char *path SG_AUTOFREE = ctl_join(abs_dir, "signet.conf");
	SG_ENSURE(path, SG_EINTERNAL, "out of memory");
	char text[4 * PATH_MAX + 1024];
	time_t t = time(NULL);
	struct tm tm;
	char when[32];
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	int n = snprintf(text, sizeof(text),
			 "# signet configuration, written by signetctl init at %s.\n"
			 "# signetctl and signetd read it with --config; their flags use the same\n"
			 "# names and override these values. Relative paths are relative to this file.\n"
			 "%s%s%s"
			 "hsm-token = %s\n"
			 "hsm-key = %s\n"
			 "pin-file = %s\n"
			 "%s"
			 "ca-cert = root-cert.pem\n"
			 "root-cert = root-cert.pem\n"
			 "trust-domain = %s\n"
			 "# A development token issuer, so that signetd works without Kubernetes\n"
			 "# (signetctl token). In a cluster, set jwt-issuer and jwt-jwks-file to\n"
			 "# the API server's service-account issuer and its /openid/v1/jwks.\n"
			 "jwt-issuer = %s\n"
			 "jwt-jwks-file = jwks.json\n"
			 "jwt-signing-key = jwt-signing-key.pem\n",
			 when, module ? "hsm-module = " : "", module ? module : "", module ? "\n" : "", token_uri,
			 key_uri, pin_file, module ? "" : "softhsm2-conf = softhsm2.conf\n", a->trust_domain,
			 DEV_ISSUER);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "configuration too long");
	return ctl_write_file(path, text, (size_t)n, 0644, 1);
}

static int absolute(const char *path, char *out)
{
	SG_ENSURE(realpath(path, out), SG_EINVAL, "cannot resolve %s: %s", path, strerror(errno));
	return SG_OK;
}

static int run_init(const init_args *a, const char *abs_dir)
{
	sg_key_type type = (sg_key_type)a->key_type;
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	char module[PATH_MAX], pin_path[PATH_MAX];
	if (a->hsm_module) {
		SG_ENSURE(a->pin_file, SG_EINVAL, "--hsm-module needs --pin-file with the token's user PIN");
		SG_TRY(absolute(a->hsm_module, module));
		SG_TRY(absolute(a->pin_file, pin_path));
		SG_TRY(sg_secret_from_file(&pin, pin_path));
	} else {
		SG_TRY(make_softhsm(a, abs_dir, &pin));
		snprintf(pin_path, sizeof(pin_path), "pin");
	}

	/* A fresh random CKA_ID names this CA's key; the label says what it is. */
	uint8_t id[8];
	SG_TRY(sg_crypto_random(id, sizeof(id)));
	char token_uri[128], key_uri[160], idhex[3 * sizeof(id) + 1];
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(idhex + 3 * i, 4, "%%%02x", id[i]);
	snprintf(token_uri, sizeof(token_uri), "pkcs11:token=%s", a->token_label);
	snprintf(key_uri, sizeof(key_uri), "pkcs11:object=signet-ca-key;id=%s", idhex);

	char *conf SG_AUTOFREE = ctl_join(abs_dir, "softhsm2.conf");
	sg_hsm_options ho = {
		.module_path = a->hsm_module ? module : NULL,
		.token_uri = token_uri,
		.key_uri = key_uri,
		.pin = pin,
		.softhsm_conf = a->hsm_module ? NULL : conf,
		.allow_missing_key = true,
	};
	sg_hsm *hsm = NULL;
	SG_TRY(sg_hsm_open(&hsm, &ho));
	int rc;
	char *pem = NULL;
	size_t pem_len = 0;
	char *root_path SG_AUTOFREE = ctl_join(abs_dir, "root-cert.pem");
	char *jwt_key SG_AUTOFREE = ctl_join(abs_dir, "jwt-signing-key.pem");
	char *jwks SG_AUTOFREE = ctl_join(abs_dir, "jwks.json");
	SG_ENSURE_GOTO(rc, root_path && jwt_key && jwks, out, SG_EINTERNAL, "out of memory");
	SG_TRY_GOTO(rc, sg_hsm_generate_key(hsm, type), out);
	SG_TRY_GOTO(rc, make_root(a, hsm, type, &pem, &pem_len), out);
	SG_TRY_GOTO(rc, ctl_write_file(root_path, pem, pem_len, 0644, 1), out);
	SG_TRY_GOTO(rc, sg_jwt_dev_issuer_create(jwt_key, jwks, NULL), out);
	SG_TRY_GOTO(rc, write_config(a, abs_dir, token_uri, key_uri, a->hsm_module ? module : NULL, pin_path), out);
	sg_log(SG_LOG_INFO, "CA created", SG_F_STR("dir", abs_dir), SG_F_STR("key", sg_key_type_name(type)),
	       SG_F_STR("token", a->token_label), SG_F_STR("trust_domain", a->trust_domain), SG_F_END);
	printf("created %s/signet.conf (CA key %s in token \"%s\", root %s/root-cert.pem)\n", abs_dir,
	       sg_key_type_name(type), a->token_label, abs_dir);
out:
	free(pem);
	sg_hsm_free(hsm);
	return rc;
}

int ctl_init(int argc, char **argv)
{
	init_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(init_opts, N_INIT_OPTS, &a, argc, argv, &res);
	if (rc == SG_OK && res.help) {
		printf("usage: signetctl init --dir DIR [options]\n\n"
		       "Creates a CA: a key generated inside a PKCS#11 token and a self-signed root.\n\n");
		sg_opt_usage(init_opts, N_INIT_OPTS, stdout);
		sg_opt_free(init_opts, N_INIT_OPTS, &a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK && !a.dir)
		rc = sg_error_set(SG_EINVAL, "--dir is required");
	if (rc < 0) {
		fprintf(stderr, "signetctl init: %s\n", sg_error_last()->msg);
		sg_opt_free(init_opts, N_INIT_OPTS, &a);
		return 2;
	}
	sg_log_configure((sg_log_level)a.log_level, SG_LOG_TEXT);

	bool created = false;
	char abs_dir[PATH_MAX];
	rc = check_dir(a.dir, &created);
	if (rc == SG_OK) {
		rc = absolute(a.dir, abs_dir);
		if (rc == SG_OK)
			rc = run_init(&a, abs_dir);
		if (rc < 0) {
			/* Leave the folder as we found it: absent, or empty. */
			sg_error e;
			sg_error_save(&e);
			nftw(a.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
			if (created)
				rmdir(a.dir);
			sg_error_restore(&e);
		}
	}
	if (rc < 0)
		fprintf(stderr, "signetctl init: %s\n", sg_error_last()->msg);
	sg_opt_free(init_opts, N_INIT_OPTS, &a);
	return rc < 0 ? 1 : 0;
}
