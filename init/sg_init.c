/*
 * sg_init: a new CA in a new folder (see sg_init.h for the contract).
 * This is `signetctl init` without its command line, moved here so that
 * signetd's embedded default (sg_init_state.c) makes exactly the same CA.
 *
 * Without an HSM module the folder gets its own SoftHSM2 token (config,
 * token store and the user PIN file, all private to the folder); with one,
 * the key goes into the named token of that module. Either way the CA key
 * is generated inside the token (never extractable), a self-signed root is
 * made by signing our own TBS through the same HSM path the signer uses,
 * and signet.conf records where everything is.
 *
 * The folder is what signetd reads, so it holds only what signetd needs.
 * The new token's SO PIN (which can re-initialise the token, destroying the
 * CA key, or reset the user PIN) is not among that: it goes to
 * so_pin_file, by default DIR.so-pin beside the folder, mode 0400, and
 * signet.conf never names it, so the operator can move it offline and
 * nothing breaks. A path inside the folder is refused.
 *
 * Refusal is the first step: an existing non-empty folder, an SO PIN file
 * that already exists (it may belong to a live token) or one that could not
 * be written are refused before anything is created. When a later step
 * fails, what init made is removed again (the folder's contents, the folder
 * if init created it), so a retry starts clean; the SO PIN file is written
 * last, after everything else succeeded, so a failed init never leaves one.
 * signet.conf is written just before it, by rename: its presence means the
 * CA is whole (sg_init_state.c relies on that).
 */
#define _XOPEN_SOURCE 700 /* nftw, realpath */
#include "sg_init.h"
#include "sg_cert.h"
#include "sg_clock.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_issuer.h"
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_secret.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The development issuer's name: .invalid never resolves (RFC 2606). */
#define DEV_ISSUER "https://signet.invalid/dev-issuer"

/* The options with every default filled in. */
typedef struct plan {
	const char *dir;
	sg_key_type key_type;
	const char *trust_domain;
	const char *hsm_module;
	const char *token_label;
	const char *key_label;
	const char *pin_file;
	const char *so_pin_file;
	const char *ca_name;
	int64_t ca_ttl;
	const char *program;
} plan;

static plan plan_of(const sg_init_options *o)
{
	return (plan){
		.dir = o->dir,
		.key_type = o->key_type,
		.trust_domain = o->trust_domain ? o->trust_domain : SG_INIT_DEFAULT_TRUST_DOMAIN,
		.hsm_module = o->hsm_module,
		.token_label = o->token_label ? o->token_label : SG_INIT_DEFAULT_TOKEN_LABEL,
		.key_label = o->key_label ? o->key_label : SG_INIT_DEFAULT_KEY_LABEL,
		.pin_file = o->pin_file,
		.so_pin_file = o->so_pin_file,
		.ca_name = o->ca_name ? o->ca_name : SG_INIT_DEFAULT_CA_NAME,
		.ca_ttl = o->ca_ttl ? o->ca_ttl : SG_INIT_DEFAULT_CA_TTL_S,
		.program = o->program ? o->program : "signetctl init",
	};
}

/* Both labels go into pkcs11: URIs as they are: PKCS#11 URI characters that
 * need no escaping only. */
static bool label_ok(const char *l)
{
	for (const char *p = l; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		      *p == '_' || *p == '.'))
			return false;
	return true;
}

int sg_init_check_options(const sg_init_options *o)
{
	/* An empty dir is not "missing": it is refused later as a path, as it
	 * always was. */
	SG_ENSURE(o && o->dir, SG_EINVAL, "--dir is required");
	plan p = plan_of(o);
	/* In signetctl init's order, so that its messages stay what they were. */
	for (const char *const *l = (const char *const[]){p.token_label, p.key_label, NULL}; *l; l++)
		SG_ENSURE(label_ok(*l), SG_EINVAL, "labels may hold only letters, digits, '-', '_' and '.' (\"%s\")", *l);
	SG_ENSURE(*p.token_label && *p.key_label, SG_EINVAL, "the token and key labels must not be empty");
	SG_ENSURE(!p.hsm_module || p.pin_file, SG_EINVAL, "--hsm-module needs --pin-file with the token's user PIN");
	SG_ENSURE(!p.hsm_module || !p.so_pin_file, SG_EINVAL,
		  "--so-pin-file is for a new SoftHSM2 token; with --hsm-module the token and its SO PIN are already "
		  "yours");
	/* signetctl's flag table bounds these already; other callers are held
	 * to the same bounds here. */
	SG_ENSURE(strlen(p.token_label) <= SG_INIT_LABEL_MAX && strlen(p.key_label) <= SG_INIT_LABEL_MAX, SG_EINVAL,
		  "labels are at most %d bytes", SG_INIT_LABEL_MAX);
	SG_ENSURE(strlen(p.trust_domain) <= SG_INIT_TRUST_DOMAIN_MAX, SG_EINVAL,
		  "the trust domain is longer than %d bytes", SG_INIT_TRUST_DOMAIN_MAX);
	SG_ENSURE(strlen(p.ca_name) <= SG_INIT_CA_NAME_MAX, SG_EINVAL, "the CA name is longer than %d bytes",
		  SG_INIT_CA_NAME_MAX);
	SG_ENSURE(p.ca_ttl >= SG_INIT_CA_TTL_MIN_S && p.ca_ttl <= SG_INIT_CA_TTL_MAX_S, SG_EINVAL,
		  "the CA validity must be between %lld and %lld seconds", SG_INIT_CA_TTL_MIN_S, SG_INIT_CA_TTL_MAX_S);
	SG_ENSURE((unsigned)p.key_type < SG_KEY_TYPE_COUNT, SG_EINVAL, "unknown key type %d", (int)p.key_type);
	return SG_OK;
}

/* path joined to dir; caller frees. NULL when out of memory. */
static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s/%s", dir, name);
	return s;
}

static int write_secret(const char *path, const sg_secret *s, unsigned mode)
{
	return sg_file_write_new(path, sg_secret_data(s), sg_secret_len(s), mode);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	/* The folder itself stays unless init created it (see sg_init_ca). */
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

/* The embedded default: a SoftHSM2 token private to the folder. The user
 * PIN is written into the folder (signetd logs in with it); the SO PIN is
 * handed back to the caller, which writes it outside the folder last. */
static int make_softhsm(const plan *a, const char *abs_dir, sg_secret **pin, sg_secret **so)
{
	char *tokens SG_AUTOFREE = join(abs_dir, "tokens");
	char *conf SG_AUTOFREE = join(abs_dir, "softhsm2.conf");
	char *pin_path SG_AUTOFREE = join(abs_dir, "pin");
	SG_ENSURE(tokens && conf && pin_path, SG_EINTERNAL, "out of memory");
	SG_ENSURE(mkdir(tokens, 0700) == 0, SG_EINVAL, "cannot create %s: %s", tokens, strerror(errno));
	char text[PATH_MAX + 256];
	int n = snprintf(text, sizeof(text),
			 "# SoftHSM2 token store of this signet CA (written by %s).\n"
			 "directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n"
			 "slots.removable = false\n",
			 a->program, tokens);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "folder path too long");
	SG_TRY(sg_file_write_new(conf, text, (size_t)n, 0600));

	SG_TRY(sg_secret_random_hex(pin, 16));
	SG_TRY(sg_secret_random_hex(so, 16));
	SG_TRY(write_secret(pin_path, *pin, 0600));
	return sg_hsm_init_token(NULL, conf, NULL, a->token_label, *so, *pin);
}

static int make_root(const plan *a, sg_hsm *hsm, sg_key_type type, char **pem, size_t *pem_len)
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
	SG_TRY_GOTO(rc, sg_issuer_sign_tbs(is, self.sigalg, tw.buf, tw.len, sg_now_ns() + 30ull * 1000000000u, &cw), out);
	rc = sg_pem_encode("CERTIFICATE", cw.buf, cw.len, pem, pem_len);
out:
	sg_issuer_free(is);
	return rc;
}

static int write_config(const plan *a, const char *abs_dir, const char *token_uri, const char *key_uri,
			const char *module, const char *pin_file)
{
	char *path SG_AUTOFREE = join(abs_dir, "signet.conf");
	SG_ENSURE(path, SG_EINTERNAL, "out of memory");
	char text[4 * PATH_MAX + 1024];
	time_t t = time(NULL);
	struct tm tm;
	char when[32];
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	int n = snprintf(text, sizeof(text),
			 "# signet configuration, written by %s at %s.\n"
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
			 a->program, when, module ? "hsm-module = " : "", module ? module : "", module ? "\n" : "",
			 token_uri, key_uri, pin_file, module ? "" : "softhsm2-conf = softhsm2.conf\n", a->trust_domain,
			 DEV_ISSUER);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "configuration too long");
	return sg_file_write_new(path, text, (size_t)n, 0644);
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
 * Where the SO PIN goes: so_pin_file, or DIR.so-pin beside the folder.
 * Refused, before anything is created: a path inside the folder (signetd
 * reads the folder), a path that exists (an SO PIN of a live token must not
 * be overwritten; lstat, so a dangling symlink counts), and a folder we
 * cannot write to (found now, not after the token is made).
 */
static int plan_so_pin(const plan *a, const char *abs_dir, char *out)
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
static int run_init(const plan *a, const char *abs_dir, const char *so_path)
{
	sg_key_type type = a->key_type;
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

	char *conf SG_AUTOFREE = join(abs_dir, "softhsm2.conf");
	SG_ENSURE(conf, SG_EINTERNAL, "out of memory");
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
	char *root_path SG_AUTOFREE = join(abs_dir, "root-cert.pem");
	char *jwt_key SG_AUTOFREE = join(abs_dir, "jwt-signing-key.pem");
	char *jwks SG_AUTOFREE = join(abs_dir, "jwks.json");
	SG_ENSURE_GOTO(rc, root_path && jwt_key && jwks, out, SG_EINTERNAL, "out of memory");
	SG_TRY_GOTO(rc, sg_hsm_generate_key(hsm, type), out);
	SG_TRY_GOTO(rc, make_root(a, hsm, type, &pem, &pem_len), out);
	SG_TRY_GOTO(rc, sg_file_write_new(root_path, pem, pem_len, 0644), out);
	SG_TRY_GOTO(rc, sg_jwt_dev_issuer_create(jwt_key, jwks, NULL), out);
	SG_TRY_GOTO(rc, write_config(a, abs_dir, token_uri, key_uri, a->hsm_module ? module : NULL, pin_path), out);
	/* Last: nothing can fail after it, so a failed init never leaves an SO
	 * PIN behind for a token that was removed again. */
	if (so)
		SG_TRY_GOTO(rc, write_secret(so_path, so, 0400), out);
	sg_log(SG_LOG_INFO, "CA created", SG_F_STR("dir", abs_dir), SG_F_STR("key", sg_key_type_name(type)),
	       SG_F_STR("token", a->token_label), SG_F_STR("trust_domain", a->trust_domain), SG_F_END);
out:
	free(pem);
	sg_hsm_free(hsm);
	return rc;
}

/* Every refusal, then the one thing made before run_init: the folder, when
 * it does not exist yet (*created). so_path is NULL with an HSM module;
 * config receives the path of signet.conf (PATH_MAX bytes). */
static int prepare(const plan *a, char *abs_dir, char *so_path, char *config, bool *created)
{
	bool exists;
	*created = false;
	SG_TRY(check_dir(a->dir, &exists));
	SG_TRY(exists ? absolute(a->dir, abs_dir) : absolute_leaf(a->dir, abs_dir));
	SG_ENSURE(strcmp(abs_dir, "/") != 0, SG_EINVAL, "refusing to use / as the CA folder");
	int n = snprintf(config, PATH_MAX, "%s/signet.conf", abs_dir);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "folder path too long");
	if (so_path)
		SG_TRY(plan_so_pin(a, abs_dir, so_path));
	if (!exists) {
		SG_ENSURE(mkdir(abs_dir, 0700) == 0, SG_EINVAL, "cannot create %s: %s", abs_dir, strerror(errno));
		*created = true;
	}
	return SG_OK;
}

int sg_init_ca(const sg_init_options *o, sg_init_result *out)
{
	SG_TRY(sg_init_check_options(o));
	plan a = plan_of(o);
	bool created = false;
	char abs_dir[PATH_MAX], so_path[PATH_MAX] = "", config[PATH_MAX];
	int rc = prepare(&a, abs_dir, a.hsm_module ? NULL : so_path, config, &created);
	if (rc < 0)
		return rc;
	rc = run_init(&a, abs_dir, a.hsm_module ? NULL : so_path);
	if (rc < 0) {
		/* Leave the folder as we found it: absent, or empty. */
		sg_error e;
		sg_error_save(&e);
		nftw(abs_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
		if (created)
			rmdir(abs_dir);
		sg_error_restore(&e);
		return rc;
	}
	if (out) {
		/* Same sizes: nothing is cut. */
		memcpy(out->dir, abs_dir, strlen(abs_dir) + 1);
		memcpy(out->config, config, strlen(config) + 1);
		memcpy(out->so_pin_file, so_path, strlen(so_path) + 1);
	}
	return SG_OK;
}
