/*
 * signetctl init: a new CA in a new folder.
 *
 * Without --hsm-module the folder gets its own SoftHSM2 token (config, token
 * store and the user PIN file, all private to the folder); with one, the
 * key goes into the named token of that module. Either way the CA key is
 * generated inside the token (never extractable), a self-signed root is made
 * by signing our own TBS through the same HSM path the signer uses, and
 * signet.conf records where everything is.
 *
 * The folder is what signetd reads, so it holds only what signetd needs.
 * The new token's SO PIN (which can re-initialise the token, destroying the
 * CA key, or reset the user PIN) is not among that: it goes to
 * --so-pin-file, by default DIR.so-pin beside the folder, mode 0400, and
 * signet.conf never names it, so the operator can move it offline and
 * nothing breaks. A path inside the folder is refused.
 *
 * Refusal is the first step: an existing non-empty folder, an SO PIN file
 * that already exists (it may belong to a live token) or one that could not
 * be written are refused before anything is created. When a later step
 * fails, what init made is removed again (the folder's contents, the folder
 * if init created it), so a retry starts clean; the SO PIN file is written
 * last, after everything else succeeded, so a failed init never leaves one.
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
	char *key_label;
	char *pin_file;
	char *so_pin_file;
	char *ca_name;
	int64_t ca_ttl;
	int log_level;
} init_args;

static const char *const key_types[] = {"ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096", NULL};

static const sg_opt init_opts[] = {
	{"dir", SG_OPT_PATH, offsetof(init_args, dir), NULL, 0, 0, NULL, "folder for the new CA (must not exist or be empty)", true},
	{"key-type", SG_OPT_ENUM, offsetof(init_args, key_type), "ecdsa-p256", 0, 0, key_types, "CA key type", true},
	{"trust-domain", SG_OPT_STRING, offsetof(init_args, trust_domain), "cluster.local", 0, 253, NULL,
	 "SPIFFE trust domain (also the root's O=)", true},
	{"hsm-module", SG_OPT_PATH, offsetof(init_args, hsm_module), NULL, 0, 0, NULL,
	 "PKCS#11 module of an existing token (default: a new SoftHSM2 token inside --dir)", true},
	{"token-label", SG_OPT_STRING, offsetof(init_args, token_label), "signet-ca", 0, 32, NULL, "token label", true},
	{"key-label", SG_OPT_STRING, offsetof(init_args, key_label), "signet-ca-key", 0, 32, NULL,
	 "label of the new key (another CA in the same token needs a label of its own)", true},
	{"pin-file", SG_OPT_PATH, offsetof(init_args, pin_file), NULL, 0, 0, NULL,
	 "user PIN file of the existing token (with --hsm-module)", true},
	{"so-pin-file", SG_OPT_PATH, offsetof(init_args, so_pin_file), NULL, 0, 0, NULL,
	 "where the new SoftHSM2 token's SO PIN is written, mode 0400; must not exist and must be outside --dir "
	 "(default: DIR.so-pin, beside DIR; signetd never needs it: keep it offline)",
	 true},
	{"ca-name", SG_OPT_STRING, offsetof(init_args, ca_name), "signet root CA", 0, 64, NULL, "root CN", true},
	{"ca-ttl", SG_OPT_DURATION, offsetof(init_args, ca_ttl), "87600h", 3600, 100LL * 365 * 86400, NULL,
	 "root validity", true},
	{"log-level", SG_OPT_LOG_LEVEL, offsetof(init_args, log_level), "info", 0, 0, NULL,
	 "log level (or a verbosity: 0-1 info, 2-10 debug)", true},
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

/* Refuses a folder that exists and is not empty; *exists says whether it
 * exists (empty). Creates nothing. */
static int check_dir(const char *dir, bool *exists)
{
	*exists = false;
	DIR *d = opendir(dir);
	if (!d) {
		SG_ENSURE(errno == ENOENT, SG_EINVAL, "cannot use %s: %s", dir, strerror(errno));
		return SG_OK;
	}
	*exists = true;
	struct dirent *e;
	bool empty = true;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = false;
	closedir(d);
	SG_ENSURE(empty, SG_EINVAL, "%s exists and is not empty; refusing to touch it", dir);
	return SG_OK;
}

static int write_secret(const char *path, const sg_secret *s, unsigned mode)
{
	return ctl_write_file(path, sg_secret_data(s), sg_secret_len(s), mode, 1);
}

/* The embedded default: a SoftHSM2 token private to the folder. The user
 * PIN is written into the folder (signetd logs in with it); the SO PIN is
 * handed back to the caller, which writes it outside the folder last. */
static int make_softhsm(const init_args *a, const char *abs_dir, sg_secret **pin, sg_secret **so)
{
	char *tokens SG_AUTOFREE = ctl_join(abs_dir, "tokens");
	char *conf SG_AUTOFREE = ctl_join(abs_dir, "softhsm2.conf");
	char *pin_path SG_AUTOFREE = ctl_join(abs_dir, "pin");
	SG_ENSURE(tokens && conf && pin_path, SG_EINTERNAL, "out of memory");
	SG_ENSURE(mkdir(tokens, 0700) == 0, SG_EINVAL, "cannot create %s: %s", tokens, strerror(errno));
	char text[PATH_MAX + 256];
	int n = snprintf(text, sizeof(text),
			 "# SoftHSM2 token store of this signet CA (written by signetctl init).\n"
			 "directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n"
			 "slots.removable = false\n",
			 tokens);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "folder path too long");
	SG_TRY(ctl_write_file(conf, text, (size_t)n, 0600, 1));

	SG_TRY(sg_secret_random_hex(pin, 16));
	SG_TRY(sg_secret_random_hex(so, 16));
	SG_TRY(write_secret(pin_path, *pin, 0600));
	return sg_hsm_init_token(NULL, conf, NULL, a->token_label, *so, *pin);
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
	sg_der_writer_init(&tw, tbs, sizeof(tbs));
	SG_TRY_GOTO(rc, sg_cert_encode_tbs(&tw, &spec, &self, sg_issuer_crypto(is)), out);
	SG_TRY_GOTO(rc, sg_cert_lint_tbs(tw.buf, tw.len, &self, SG_LINT_CA), out);
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

/* The absolute, symlink-free form of a path whose last component need not
 * exist yet; its folder must. out holds PATH_MAX bytes. */
static int absolute_leaf(const char *path, char *out)
{
	char parent[PATH_MAX];
	int n = snprintf(parent, sizeof(parent), "%s", path);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(parent), SG_EINVAL, "path too long: %s", path);
	while (n > 1 && parent[n - 1] == '/')
		parent[--n] = 0;
	/* Split "a/b/leaf" into "a/b" and "leaf"; "leaf" alone is in ".". */
	char *slash = strrchr(parent, '/');
	char leaf[NAME_MAX + 1];
	n = snprintf(leaf, sizeof(leaf), "%s", slash ? slash + 1 : parent);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(leaf) && strcmp(leaf, ".") != 0 && strcmp(leaf, "..") != 0, SG_EINVAL,
		  "%s does not name a file or folder", path);
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else if (slash == parent)
		parent[1] = 0; /* "/leaf" */
	else
		*slash = 0;
	char abs_parent[PATH_MAX];
	SG_TRY(absolute(parent, abs_parent));
	n = snprintf(out, PATH_MAX, "%s%s%s", abs_parent, strcmp(abs_parent, "/") == 0 ? "" : "/", leaf);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "path too long: %s", path);
	return SG_OK;
}

/*
 * Where the SO PIN goes: --so-pin-file, or DIR.so-pin beside the folder.
 * Refused, before anything is created: a path inside the folder (signetd
 * reads the folder), a path that exists (an SO PIN of a live token must not
 * be overwritten; lstat, so a dangling symlink counts), and a folder we
 * cannot write to (found now, not after the token is made).
 */
static int plan_so_pin(const init_args *a, const char *abs_dir, char *out)
{
	if (a->so_pin_file) {
		SG_TRY(absolute_leaf(a->so_pin_file, out));
	} else {
		int n = snprintf(out, PATH_MAX, "%s.so-pin", abs_dir);
		SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "folder path too long");
	}
	size_t dl = strlen(abs_dir);
	SG_ENSURE(strncmp(out, abs_dir, dl) != 0 || (out[dl] != '/' && out[dl] != 0), SG_EINVAL,
		  "the SO PIN file %s is inside %s, which signetd reads; choose a --so-pin-file outside it", out,
		  abs_dir);
	struct stat st;
	SG_ENSURE(lstat(out, &st) != 0, SG_EINVAL,
		  "the SO PIN file %s already exists (it may belong to another token); move it away or choose "
		  "another --so-pin-file",
		  out);
	SG_ENSURE(errno == ENOENT, SG_EINVAL, "cannot use %s for the SO PIN: %s", out, strerror(errno));
	char folder[PATH_MAX];
	snprintf(folder, sizeof(folder), "%s", out);
	*strrchr(folder, '/') = 0;
	SG_ENSURE(access(*folder ? folder : "/", W_OK | X_OK) == 0, SG_EINVAL,
		  "cannot write the SO PIN file %s: %s; choose another --so-pin-file", out, strerror(errno));
	return SG_OK;
}

/* so_path: where the SO PIN goes (a new SoftHSM2 token), else NULL. */
static int run_init(const init_args *a, const char *abs_dir, const char *so_path)
{
	sg_key_type type = (sg_key_type)a->key_type;
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	sg_secret *so SG_CLEANUP(sg_secret_freep) = NULL;
	char module[PATH_MAX], pin_path[PATH_MAX];
	if (a->hsm_module) {
		SG_TRY(absolute(a->hsm_module, module));
		SG_TRY(absolute(a->pin_file, pin_path));
		SG_TRY(sg_secret_from_file(&pin, pin_path));
	} else {
		SG_TRY(make_softhsm(a, abs_dir, &pin, &so));
		snprintf(pin_path, sizeof(pin_path), "pin");
	}

	/* A fresh random CKA_ID names this CA's key; the label says what it is. */
	uint8_t id[8];
	SG_TRY(sg_crypto_random(id, sizeof(id)));
	char token_uri[128], key_uri[160], idhex[3 * sizeof(id) + 1];
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(idhex + 3 * i, 4, "%%%02x", id[i]);
	snprintf(token_uri, sizeof(token_uri), "pkcs11:token=%s", a->token_label);
	snprintf(key_uri, sizeof(key_uri), "pkcs11:object=%s;id=%s", a->key_label, idhex);

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
	/* Last: nothing can fail after it, so a failed init never leaves an SO
	 * PIN behind for a token that was removed again. */
	if (so)
		SG_TRY_GOTO(rc, write_secret(so_path, so, 0400), out);
	sg_log(SG_LOG_INFO, "CA created", SG_F_STR("dir", abs_dir), SG_F_STR("key", sg_key_type_name(type)),
	       SG_F_STR("token", a->token_label), SG_F_STR("trust_domain", a->trust_domain), SG_F_END);
	printf("created %s/signet.conf (CA key %s in token \"%s\", root %s/root-cert.pem)\n", abs_dir,
	       sg_key_type_name(type), a->token_label, abs_dir);
	if (so)
		printf("the token's SO PIN is in %s (mode 0400); signetd never needs it: keep it offline\n", so_path);
out:
	free(pem);
	sg_hsm_free(hsm);
	return rc;
}

/* Every refusal, then the one thing made before run_init: the folder, when
 * it does not exist yet (*created). so_path is NULL with --hsm-module. */
static int prepare(const init_args *a, char *abs_dir, char *so_path, bool *created)
{
	bool exists;
	*created = false;
	SG_TRY(check_dir(a->dir, &exists));
	SG_TRY(exists ? absolute(a->dir, abs_dir) : absolute_leaf(a->dir, abs_dir));
	SG_ENSURE(strcmp(abs_dir, "/") != 0, SG_EINVAL, "refusing to use / as the CA folder");
	if (so_path)
		SG_TRY(plan_so_pin(a, abs_dir, so_path));
	if (!exists) {
		SG_ENSURE(mkdir(abs_dir, 0700) == 0, SG_EINVAL, "cannot create %s: %s", abs_dir, strerror(errno));
		*created = true;
	}
	return SG_OK;
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
		       "Creates a CA: a key generated inside a PKCS#11 token and a self-signed root.\n\n"
		       "Without --hsm-module, DIR gets its own SoftHSM2 token. DIR is what signetd\n"
		       "reads: signet.conf, the token, and the user PIN in DIR/pin (mode 0600).\n"
		       "The token's SO PIN, which can re-initialise the token (destroying the CA\n"
		       "key) or reset the user PIN, is written outside DIR: to --so-pin-file,\n"
		       "by default DIR.so-pin beside DIR, with mode 0400. signet.conf does not\n"
		       "name it and signetd never needs it; move it offline. init refuses a\n"
		       "non-empty DIR and an SO PIN file that already exists, and a failed init\n"
		       "leaves neither behind.\n\n");
		sg_opt_usage(init_opts, N_INIT_OPTS, stdout);
		sg_opt_free(init_opts, N_INIT_OPTS, &a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK && !a.dir)
		rc = sg_error_set(SG_EINVAL, "--dir is required");
	/* Both go into pkcs11: URIs as they are: PKCS#11 URI characters that
	 * need no escaping only. */
	for (const char *const *l = (const char *const[]){a.token_label, a.key_label, NULL}; rc == SG_OK && *l; l++)
		for (const char *p = *l; rc == SG_OK && *p; p++)
			if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			      *p == '-' || *p == '_' || *p == '.'))
				rc = sg_error_set(SG_EINVAL, "labels may hold only letters, digits, '-', '_' and '.' (\"%s\")",
						  *l);
	if (rc == SG_OK && (!*a.token_label || !*a.key_label))
		rc = sg_error_set(SG_EINVAL, "the token and key labels must not be empty");
	if (rc == SG_OK && a.hsm_module && !a.pin_file)
		rc = sg_error_set(SG_EINVAL, "--hsm-module needs --pin-file with the token's user PIN");
	if (rc == SG_OK && a.hsm_module && a.so_pin_file)
		rc = sg_error_set(SG_EINVAL, "--so-pin-file is for a new SoftHSM2 token; with --hsm-module the token "
					     "and its SO PIN are already yours");
	if (rc < 0) {
		fprintf(stderr, "signetctl init: %s\n", sg_error_last()->msg);
		sg_opt_free(init_opts, N_INIT_OPTS, &a);
		return 2;
	}
	sg_log_configure((sg_log_level)a.log_level, SG_LOG_TEXT);

	bool created = false;
	char abs_dir[PATH_MAX], so_path[PATH_MAX];
	rc = prepare(&a, abs_dir, a.hsm_module ? NULL : so_path, &created);
	if (rc == SG_OK) {
		rc = run_init(&a, abs_dir, a.hsm_module ? NULL : so_path);
		if (rc < 0) {
			/* Leave the folder as we found it: absent, or empty. */
			sg_error e;
			sg_error_save(&e);
			nftw(abs_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
			if (created)
				rmdir(abs_dir);
			sg_error_restore(&e);
		}
	}
	if (rc < 0)
		fprintf(stderr, "signetctl init: %s\n", sg_error_last()->msg);
	sg_opt_free(init_opts, N_INIT_OPTS, &a);
	return rc < 0 ? 1 : 0;
}
