/*
 * signetctl rotate: the CA rotation of a CA that `signetctl init` made, as
 * four commands over one state file.
 *
 *   begin     a new key in the same token (generated there, never
 *             exported), a new self-signed root, the new root's name and
 *             key cross-signed by the old key; the served root bundle
 *             becomes old + new. Nothing signs with the new key yet.
 *   activate  signing moves to the new key; the CA certificate becomes the
 *             cross-signed one, so every chain handed out reaches the old
 *             root too (a peer that never learned the new root still
 *             verifies new leaves).
 *   finish    once the longest workload lifetime + skew has passed since
 *             activate (refused before, with the time left): the new root
 *             alone is served and signs; the old key is destroyed in the
 *             token unless --keep-old-key.
 *   status    the phase, both roots, since when, what the next step waits
 *             for.
 *
 * Each step changes what signetd does by rewriting signet.conf (atomically,
 * last, after every file it names is written and synced); signetd follows
 * the file (daemon/signetd_ca.c). New files get new names (root-cert-gN.pem,
 * cross-gN.pem, roots-gN.pem for generation N), so a file signetd reads is
 * never rewritten under it.
 *
 * Crash safety. The state file (rotation.state, beside signet.conf) is
 * written temp + fsync + rename (sg_file_write_atomic) with the folder
 * synced, and records a step as under way ("beginning", "activating",
 * "finishing") before the step touches anything, with every value the
 * step needs (the new key's URI and type, names, times). Every action of
 * a step is idempotent given that record (the key is generated only when
 * the token does not hold it yet; certificates already written for the
 * recorded key are kept; the config rewrite and the key's destruction can
 * be repeated), so running the same command again after a kill at any
 * point completes the step; running another command names the one to run.
 * SIGNET_ROTATE_TEST_KILL=<point> (test only) makes the process SIGKILL
 * itself at a named point, so tests can show that.
 *
 * Audit. Every completed step (and every refusal of finish) is logged
 * ("CA rotation", at info: phase, generation, keys' URIs and roots'
 * fingerprints, never a PIN) and appended to rotation-audit.log beside the
 * config, one fsync'ed line per event.
 *
 * An intermediate under an external root (a CA made with csr and import)
 * rotates the same way, but its next certificate comes from that root's
 * owner: begin makes the key and a CSR (ca-gN.csr, --subject) and stops in
 * phase "awaiting-import"; `rotate import --cert C [--chain CH] [--root R]`
 * checks the signed certificate against the new key and installs it
 * (ca-cert-gN.pem, chain-gN.pem); when R is a new root the bundle becomes
 * old + new (roots-gN.pem; root-cert-gN.pem is R alone, which finish
 * serves). Cross-signing a new external root is its owner's business: a
 * certificate the owner cross-signed comes in through --chain.
 */
#define _XOPEN_SOURCE 700 /* realpath, strtok_r */
#include "ctl.h"
#include "ctl_record.h"
#include "sg_appliance.h"
#include "sg_ca.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_daemon_settings.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_init.h"
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_secret.h"
#include "sg_x509.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_NAME "rotation.state"
#define AUDIT_NAME "rotation-audit.log"
#define URI_MAX CTL_RECORD_URI_MAX
#define DEFAULT_WORKLOAD_LIFETIME "24h" /* signetd's default-certificate-duration; max is 1h by default */
#define DEFAULT_SKEW "5m"

typedef struct rotate_args {
	sg_settings s;
	int key_type; /* 0: the old key's type; else 1 + sg_key_type */
	char *key_label;
	char *ca_name;
	int64_t ca_ttl;
	int64_t workload_lifetime;
	int64_t skew;
	bool keep_old_key;
	char *subject;             /* intermediate begin: the next CSR's subject */
	char *cert, *chain, *root; /* import */
} rotate_args;

static const char *const key_types[] = {"same", "ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096", NULL};

/* The appliance settings, and signetd's as foreign rows: the config file
 * serves both programs. */
static const sg_opt rotate_opts[] = {
    SG_SETTINGS_ROWS(rotate_args, s, "info"),
    SG_DAEMON_FOREIGN_ROWS{"key-type", SG_OPT_ENUM, offsetof(rotate_args, key_type), "same", 0, 0, key_types,
                           "begin: the new key's type (same: the old key's)", true},
    {"key-label", SG_OPT_STRING, offsetof(rotate_args, key_label), NULL, 0, SG_INIT_LABEL_MAX, NULL,
     "begin: the new key's label (default: " SG_INIT_DEFAULT_KEY_LABEL "-<8 hex digits of its random CKA_ID>)", true},
    {"ca-name", SG_OPT_STRING, offsetof(rotate_args, ca_name), NULL, 0, SG_INIT_CA_NAME_MAX, NULL,
     "begin: the new root's CN (default: \"" SG_INIT_DEFAULT_CA_NAME " N\", N the generation)", true},
    {"ca-ttl", SG_OPT_DURATION, offsetof(rotate_args, ca_ttl), SG_INIT_DEFAULT_CA_TTL, SG_INIT_CA_TTL_MIN_S,
     SG_INIT_CA_TTL_MAX_S, NULL, "begin: the new root's validity", true},
    {"workload-lifetime", SG_OPT_DURATION, offsetof(rotate_args, workload_lifetime), DEFAULT_WORKLOAD_LIFETIME, 1,
     SG_INIT_CA_TTL_MAX_S, NULL,
     "activate: the longest lifetime of a certificate the old key signed (signetd's "
     "max-client-certificate-duration, or longer); finish waits this + --skew after activate",
     true},
    {"skew", SG_OPT_DURATION, offsetof(rotate_args, skew), DEFAULT_SKEW, 0, 86400, NULL,
     "activate: clock skew allowed for on top of --workload-lifetime", true},
    {"keep-old-key", SG_OPT_BOOL, offsetof(rotate_args, keep_old_key), "false", 0, 0, NULL,
     "finish: leave the old key in the token (default: destroy it)", true},
    {"subject", SG_OPT_STRING, offsetof(rotate_args, subject), NULL, 0, 1024, NULL,
     "begin, intermediate CA: the subject of the next intermediate's CSR (\"O=example,CN=issuing CA 2\")", true},
    {"cert", SG_OPT_PATH, offsetof(rotate_args, cert), NULL, 0, 0, NULL,
     "import: the next intermediate, signed from the CSR begin wrote", true},
    {"chain", SG_OPT_PATH, offsetof(rotate_args, chain), NULL, 0, 0, NULL,
     "import: the certificates between it and its root, nearest first", true},
    {"root", SG_OPT_PATH, offsetof(rotate_args, root), NULL, 0, 0, NULL,
     "import: its root, when that is a new one (it joins the bundle; finish serves it alone)", true},
};
#define N_ROTATE_OPTS (sizeof(rotate_opts) / sizeof(rotate_opts[0]))

/* The rotation as recorded; "" phase: none ever began. */

typedef struct ctx {
	rotate_args *a;
	char dir[PATH_MAX];    /* the config's folder */
	char config[PATH_MAX]; /* absolute */
	ctl_record st;
} ctx;

/* ---- test hook -------------------------------------------------------------- */

/* Test only: SIGNET_ROTATE_TEST_KILL=<point> kills the process at that
 * point, as a power cut or kill -9 would (tests/ctl/test_rotate.py). */
static void kill_point(const char *point)
{
	const char *want = getenv("SIGNET_ROTATE_TEST_KILL");
	if (want && strcmp(want, point) == 0) {
		fflush(NULL);
		raise(SIGKILL);
	}
}

/* ---- files ------------------------------------------------------------------------ */

static int path_in(const ctx *c, const char *name, char *out)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", c->dir, name);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "path too long: %s/%s", c->dir, name);
	return SG_OK;
}

/* The generation's file names (config values, relative to the folder). */
static void gen_name(char *out, size_t cap, const char *stem, int64_t gen)
{
	snprintf(out, cap, "%s-g%" PRId64 ".pem", stem, gen);
}

static int write_durable(const ctx *c, const char *name, const void *data, size_t len, unsigned mode)
{
	char path[PATH_MAX];
	SG_TRY(path_in(c, name, path));
	SG_TRY(sg_file_write_atomic(path, data, len, mode));
	return sg_file_sync_dir(c->dir);
}

/* The record signetctl wrote (state_write), read strictly (ctl_record.h):
 * one it cannot have written is refused whole rather than acted on in
 * part. A missing file: no rotation yet. */
static int state_read(ctx *c)
{
	memset(&c->st, 0, sizeof(c->st));
	char path[PATH_MAX];
	SG_TRY(path_in(c, STATE_NAME, path));
	uint8_t *text SG_AUTOFREE = NULL;
	size_t len;
	int rc = sg_file_read(path, CTL_RECORD_TEXT_MAX, &text, &len);
	if (rc < 0) {
		if (access(path, F_OK) != 0 && errno == ENOENT) {
			sg_error_clear();
			return SG_OK; /* no rotation yet */
		}
		return rc;
	}
	rc = ctl_record_parse(&c->st, (char *)text, len);
	if (rc < 0) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(SG_EINVAL,
		        "%s is not a rotation record signetctl rotate wrote (%s); restore it or move it away", path,
		        why);
	}
	return SG_OK;
}

static int state_write(ctx *c)
{
	char text[4 * PATH_MAX + 2 * URI_MAX + 2048];
	size_t n = 0;
	SG_TRY(ctl_record_format(&c->st, text, sizeof(text), &n));
	return write_durable(c, STATE_NAME, text, n, 0644);
}

static int set_phase(ctx *c, const char *phase)
{
	snprintf(c->st.phase, sizeof(c->st.phase), "%s", phase);
	c->st.since = sg_wall_seconds();
	return state_write(c);
}

/* ---- certificates ------------------------------------------------------------------ */

/* SHA-256 of the first certificate in pem, as colon-separated hex. */
static int fingerprint(const char *pem, size_t len, char *out, size_t cap)
{
	uint8_t *der SG_AUTOFREE = malloc(SG_CERT_MAX_DER);
	SG_ENSURE(der, SG_EINTERNAL, "out of memory");
	size_t dlen, used;
	SG_TRY(sg_pem_decode((const uint8_t *)pem, len, "CERTIFICATE", der, SG_CERT_MAX_DER, &dlen, &used));
	uint8_t d[32];
	SG_TRY(sg_sha256(der, dlen, d));
	char hex[65];
	sg_hex_encode(hex, d, 32);
	size_t o = 0;
	for (size_t i = 0; i < 32 && o + 3 < cap; i++) {
		out[o++] = hex[2 * i];
		out[o++] = hex[2 * i + 1];
		if (i < 31)
			out[o++] = ':';
	}
	out[o] = 0;
	return SG_OK;
}

typedef struct cert_view {
	char fp[100];
	int64_t not_after;
	bool ok;
} cert_view;

static void view_of(const char *path, cert_view *v)
{
	*v = (cert_view){0};
	uint8_t *pem SG_AUTOFREE = NULL;
	size_t len;
	sg_x509_bundle *b = NULL;
	sg_x509_facts f;
	if (sg_file_read(path, 1 << 20, &pem, &len) < 0 || fingerprint((char *)pem, len, v->fp, sizeof(v->fp)) < 0 ||
	    sg_x509_bundle_parse(&b, (char *)pem, len) < 0 || sg_x509_get_facts(b, 0, &f) < 0) {
		sg_x509_bundle_free(b);
		sg_error_clear();
		return;
	}
	sg_x509_bundle_free(b);
	v->not_after = f.not_after;
	v->ok = true;
}

/* Whether the file holds a certificate for key (a rerun keeps it). */
static bool holds_key(const char *path, const uint8_t *spki, size_t spki_len)
{
	uint8_t *pem SG_AUTOFREE = NULL;
	size_t len;
	sg_x509_bundle *b = NULL;
	sg_pubkey k;
	bool yes = sg_file_read(path, 1 << 20, &pem, &len) == SG_OK && sg_pubkey_parse(&k, spki, spki_len) == SG_OK &&
	           sg_x509_bundle_parse(&b, (char *)pem, len) == SG_OK && sg_x509_key_is(b, 0, &k);
	sg_x509_bundle_free(b);
	sg_error_clear();
	return yes;
}

/* ---- the HSM --------------------------------------------------------------------------- */

static int open_key(const sg_settings *s, const char *key_uri, bool allow_missing, sg_hsm **out)
{
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_settings_pin(s, &pin));
	sg_hsm_options ho;
	sg_settings_hsm_options(s, pin, &ho);
	ho.key_uri = key_uri;
	ho.allow_missing_key = allow_missing;
	ho.copy_key = false; /* one signature or two: no session copy of a CA key */
	return sg_hsm_open(out, &ho);
}

/* Loads files as a CA for the key of hsm: the check that signetd will
 * make, made before signetd is pointed at them. */
static int check_ca_chain(sg_hsm *hsm, const char *cert, const char *chain, const char *root, sg_ca **out)
{
	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	SG_TRY(sg_hsm_public_key(hsm, &spki, &spki_len));
	sg_ca_files files = {cert, chain, root};
	sg_ca *ca = NULL;
	SG_TRY(sg_ca_load(&ca, &files, spki, spki_len, sg_wall_seconds()));
	if (out)
		*out = ca;
	else
		sg_ca_free(ca);
	return SG_OK;
}

static int check_ca(sg_hsm *hsm, const char *cert, const char *root, sg_ca **out)
{
	return check_ca_chain(hsm, cert, NULL, root, out);
}

/* ---- audit ------------------------------------------------------------------------------- */

static void audit(const ctx *c, const char *event, const char *detail)
{
	char root_new[PATH_MAX], name[64];
	gen_name(name, sizeof(name), "root-cert", c->st.gen);
	cert_view old_v, new_v;
	view_of(c->st.old_cert, &old_v);
	if (path_in(c, name, root_new) == SG_OK)
		view_of(root_new, &new_v);
	else
		new_v = (cert_view){0};
	sg_log(SG_LOG_INFO, "CA rotation", SG_F_STR("event", event), SG_F_STR("phase", c->st.phase),
	       SG_F_INT("generation", c->st.gen), SG_F_STR("old_key", c->st.old_key),
	       SG_F_STR("new_key", c->st.new_key), SG_F_STR("old_root_sha256", old_v.fp),
	       SG_F_STR("new_root_sha256", new_v.fp), SG_F_STR("config", c->config), SG_F_STR("detail", detail),
	       SG_F_END);
	char path[PATH_MAX], when[SG_CLOCK_RFC3339_LEN], line[3 * URI_MAX + PATH_MAX];
	(void)sg_clock_rfc3339(when, sizeof(when), sg_wall_seconds());
	int n = snprintf(line, sizeof(line),
	                 "%s event=%s phase=%s generation=%" PRId64 " old_key=%s new_key=%s old_root_sha256=%s "
	                 "new_root_sha256=%s detail=\"%s\"\n",
	                 when, event, c->st.phase, c->st.gen, c->st.old_key, c->st.new_key, old_v.fp, new_v.fp, detail);
	if (n <= 0 || (size_t)n >= sizeof(line) || path_in(c, AUDIT_NAME, path) < 0)
		return;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	bool ok = fd >= 0 && write(fd, line, (size_t)n) == n && fsync(fd) == 0;
	if (fd >= 0)
		close(fd);
	if (!ok)
		sg_log(SG_LOG_WARN, "cannot append to the rotation audit log", SG_F_STR("path", path),
		       SG_F_STR("error", strerror(errno)), SG_F_END);
}

/* ---- the steps --------------------------------------------------------------------------- */

static const char *next_step(const char *phase)
{
	return strcmp(phase, "beginning") == 0         ? "begin"
	       : strcmp(phase, "awaiting-import") == 0 ? "import"
	       : strcmp(phase, "begun") == 0           ? "activate"
	       : strcmp(phase, "activating") == 0      ? "activate"
	       : strcmp(phase, "active") == 0          ? "finish"
	       : strcmp(phase, "finishing") == 0       ? "finish"
	                                               : "begin";
}

/* The files of generation gen, absolute. */
typedef struct gen_files {
	char root[PATH_MAX], cross[PATH_MAX], bundle[PATH_MAX];
	char root_name[64], cross_name[64], bundle_name[64];
	/* an intermediate's: its next certificate, chain and CSR */
	char cert[PATH_MAX], chain[PATH_MAX], csr[PATH_MAX];
	char cert_name[64], chain_name[64], csr_name[64];
} gen_files;

static int files_of(const ctx *c, gen_files *g)
{
	gen_name(g->root_name, sizeof(g->root_name), "root-cert", c->st.gen);
	gen_name(g->cross_name, sizeof(g->cross_name), "cross", c->st.gen);
	gen_name(g->bundle_name, sizeof(g->bundle_name), "roots", c->st.gen);
	gen_name(g->cert_name, sizeof(g->cert_name), "ca-cert", c->st.gen);
	gen_name(g->chain_name, sizeof(g->chain_name), "chain", c->st.gen);
	snprintf(g->csr_name, sizeof(g->csr_name), "ca-g%" PRId64 ".csr", c->st.gen);
	SG_TRY(path_in(c, g->root_name, g->root));
	SG_TRY(path_in(c, g->cross_name, g->cross));
	SG_TRY(path_in(c, g->cert_name, g->cert));
	SG_TRY(path_in(c, g->chain_name, g->chain));
	SG_TRY(path_in(c, g->csr_name, g->csr));
	return path_in(c, g->bundle_name, g->bundle);
}

/* A new rotation's record: everything begin needs, chosen once. */
static int plan_begin(ctx *c)
{
	rotate_args *a = c->a;
	ctl_record prev = c->st;
	SG_ENSURE(a->s.hsm_token && a->s.hsm_key && a->s.ca_cert && a->s.root_cert, SG_EINVAL,
	          "%s does not name hsm-token, hsm-key, ca-cert and root-cert (a CA signetctl init made does)",
	          c->config);
	uint8_t *pem SG_AUTOFREE = NULL;
	size_t len;
	SG_TRY(sg_file_read(a->s.ca_cert, 1 << 20, &pem, &len));
	sg_x509_bundle *b = NULL;
	SG_TRY(sg_x509_bundle_parse(&b, (char *)pem, len));
	bool root = sg_x509_self_signed(b, 0);
	sg_x509_bundle_free(b);
	SG_ENSURE(root || a->subject, SG_EINVAL,
	          "the CA certificate %s is an intermediate under an external root: begin needs --subject for the "
	          "next intermediate's CSR",
	          a->s.ca_cert);
	SG_ENSURE(root || strlen(a->subject) < sizeof(c->st.subject), SG_EINVAL, "--subject is too long");
	SG_ENSURE(strlen(a->s.hsm_key) < URI_MAX && strlen(a->s.ca_cert) < PATH_MAX, SG_EINVAL, "settings too long");

	ctl_record *s = &c->st;
	memset(s, 0, sizeof(*s));
	s->gen = prev.gen ? prev.gen + 1 : 2;
	s->intermediate = !root;
	if (!root)
		snprintf(s->subject, sizeof(s->subject), "%s", a->subject);
	snprintf(s->old_key, sizeof(s->old_key), "%s", a->s.hsm_key);
	/* Absolute: the config's relative paths resolve against its folder,
	 * and the record outlives this working directory. */
	SG_ENSURE(realpath(a->s.ca_cert, s->old_cert), SG_EINVAL, "cannot resolve %s: %s", a->s.ca_cert,
	          strerror(errno));
	SG_ENSURE(realpath(a->s.root_cert, s->old_root_conf), SG_EINVAL, "cannot resolve %s: %s", a->s.root_cert,
	          strerror(errno));
	if (a->key_type > 0) {
		s->key_type = a->key_type - 1;
	} else {
		sg_hsm *old = NULL;
		SG_TRY(open_key(&a->s, s->old_key, false, &old));
		sg_key_type t;
		int rc = sg_hsm_key_type(old, &t);
		sg_hsm_free(old);
		SG_TRY(rc);
		s->key_type = t;
	}
	if (a->ca_name)
		snprintf(s->ca_name, sizeof(s->ca_name), "%s", a->ca_name);
	else
		snprintf(s->ca_name, sizeof(s->ca_name), "%s %" PRId64, SG_INIT_DEFAULT_CA_NAME, s->gen);
	s->ca_ttl = a->ca_ttl;
	/* A fresh random CKA_ID names the key, as init's does. */
	uint8_t id[8];
	SG_TRY(sg_crypto_random(id, sizeof(id)));
	char idhex[3 * sizeof(id) + 1], label[SG_INIT_LABEL_MAX + 1];
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(idhex + 3 * i, 4, "%%%02x", id[i]);
	if (a->key_label)
		snprintf(label, sizeof(label), "%s", a->key_label);
	else
		snprintf(label, sizeof(label), "%s-%02x%02x%02x%02x", SG_INIT_DEFAULT_KEY_LABEL, id[0], id[1], id[2],
		         id[3]);
	for (const unsigned char *p = (const unsigned char *)label; *p; p++)
		SG_ENSURE((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		              *p == '-' || *p == '.' || *p == '_',
		          SG_EINVAL, "--key-label may hold letters, digits, '-', '.' and '_' only");
	snprintf(s->new_key, sizeof(s->new_key), "pkcs11:object=%s;id=%s", label, idhex);
	return set_phase(c, "beginning");
}

/* begin for an intermediate under an external root: the new key and its
 * CSR; the root's owner signs it, import installs it. Nothing signetd
 * reads changes. */
static int begin_intermediate(ctx *c, bool resumed)
{
	ctl_record *s = &c->st;
	gen_files g;
	SG_TRY(files_of(c, &g));
	sg_hsm *nw = NULL;
	SG_TRY(open_key(&c->a->s, s->new_key, true, &nw));
	sg_key_type t;
	int rc = SG_OK;
	if (sg_hsm_key_type(nw, &t) < 0) {
		sg_error_clear();
		rc = sg_hsm_generate_key(nw, (sg_key_type)s->key_type);
		if (rc == SG_OK)
			kill_point("begin-key");
	}
	char *csr = NULL;
	size_t csr_len = 0;
	if (rc == SG_OK)
		rc = ctl_ca_csr(nw, s->subject, &csr, &csr_len);
	if (rc == SG_OK)
		rc = write_durable(c, g.csr_name, csr, csr_len, 0644);
	free(csr);
	sg_hsm_free(nw);
	SG_TRY(rc);
	SG_TRY(set_phase(c, "awaiting-import"));
	audit(c, "begin",
	      resumed ? "intermediate: CSR written; completed an interrupted begin" : "intermediate: CSR written");
	printf("begun rotation to generation %" PRId64 ": new key %s; the CSR for the next intermediate is %s.\n"
	       "Next: have it signed by your root (CA:TRUE, keyCertSign), then signetctl rotate import --cert CERT "
	       "[--chain CHAIN] [--root ROOT, when the root is a new one]\n",
	       s->gen, s->new_key, g.csr);
	return SG_OK;
}

/* Whether the PEM bundle at path holds certificate 0 of b. */
static bool bundle_holds(const char *pem, size_t len, const sg_x509_bundle *b)
{
	sg_x509_bundle *set = NULL;
	bool yes = sg_x509_bundle_parse(&set, pem, len) == SG_OK && sg_x509_holds(set, b, 0);
	sg_x509_bundle_free(set);
	sg_error_clear();
	return yes;
}

static int copy_in(ctx *c, const char *from, const char *name)
{
	uint8_t *data SG_AUTOFREE = NULL;
	size_t len;
	SG_TRY(ctl_read_file(from, 1 << 20, &data, &len));
	return write_durable(c, name, data, len, 0644);
}

/* import: the signed next intermediate, checked against the new key and
 * the bundle it will be served with, then installed; the bundle becomes
 * old + new when it comes with a new root. Every action can be repeated:
 * a killed import is completed by running it again. */
static int do_import(ctx *c)
{
	ctl_record *s = &c->st;
	rotate_args *a = c->a;
	const char *p = s->phase;
	SG_ENSURE(strcmp(p, "awaiting-import") == 0, SG_EINVAL,
	          *p ? "the rotation is in phase %s; run signetctl rotate %s"
	             : "no rotation of an intermediate has begun%s%s; run signetctl rotate begin --subject ...",
	          p, *p ? next_step(p) : "");
	SG_ENSURE(a->cert, SG_EINVAL, "import needs --cert (the next intermediate, signed from the CSR begin wrote)");
	gen_files g;
	SG_TRY(files_of(c, &g));
	uint8_t *bundle SG_AUTOFREE = NULL, *root SG_AUTOFREE = NULL;
	size_t blen, rlen = 0;
	/* The bundle as it was at begin, not as the config names it now: an
	 * import killed after its config rewrite must decide the same way. */
	SG_TRY(sg_file_read(s->old_root_conf, 1 << 20, &bundle, &blen));
	sg_x509_bundle *rb = NULL;
	bool new_root = false;
	if (a->root) {
		SG_TRY(ctl_read_file(a->root, 1 << 20, &root, &rlen));
		SG_TRY(sg_x509_bundle_parse(&rb, (char *)root, rlen));
		SG_ENSURE(sg_x509_self_signed(rb, 0), SG_EINVAL, "--root %s is not a self-signed root", a->root);
		new_root = !bundle_holds((char *)bundle, blen, rb);
		sg_x509_bundle_free(rb);
	}
	/* The files first (new names), checked, then the config. */
	SG_TRY(copy_in(c, a->cert, g.cert_name));
	if (a->chain)
		SG_TRY(copy_in(c, a->chain, g.chain_name));
	if (new_root) {
		SG_TRY(write_durable(c, g.root_name, root, rlen, 0644));
		size_t n = blen + rlen + 2;
		char *both SG_AUTOFREE = malloc(n);
		SG_ENSURE(both, SG_EINTERNAL, "out of memory");
		int m = snprintf(both, n, "%s%s%s", (char *)bundle, blen && bundle[blen - 1] != '\n' ? "\n" : "",
		                 (char *)root);
		SG_TRY(write_durable(c, g.bundle_name, both, (size_t)m, 0644));
	} else {
		SG_TRY(write_durable(c, g.bundle_name, bundle, blen, 0644));
	}
	sg_hsm *nw = NULL;
	SG_TRY(open_key(&a->s, s->new_key, false, &nw));
	int rc = check_ca_chain(nw, g.cert, a->chain ? g.chain : NULL, g.bundle, NULL);
	if (rc == SG_OK && new_root)
		rc = check_ca_chain(nw, g.cert, a->chain ? g.chain : NULL, g.root, NULL);
	sg_hsm_free(nw);
	SG_TRY(rc);
	kill_point("import-certs");
	const char *names[] = {"root-cert"};
	const char *values[] = {g.bundle_name};
	SG_TRY(ctl_update_config(c->config, names, values, 1));
	SG_TRY(sg_file_sync_dir(c->dir));
	kill_point("import-config");
	s->has_chain = a->chain != NULL;
	s->new_root = new_root;
	SG_TRY(set_phase(c, "begun"));
	audit(c, "import", new_root ? "next intermediate under a new root" : "next intermediate");
	printf("imported the next intermediate %s%s; the root bundle %s is served.\nNext, once every consumer "
	       "trusts the bundle: signetctl rotate activate\n",
	       g.cert, new_root ? " under a new root" : "", g.bundle);
	return SG_OK;
}

static int do_begin(ctx *c)
{
	ctl_record *s = &c->st;
	const char *p = s->phase;
	if (strcmp(p, "begun") == 0 || strcmp(p, "awaiting-import") == 0) {
		printf("rotation to generation %" PRId64 " has begun already; next: signetctl rotate %s\n", s->gen,
		       next_step(p));
		return SG_OK;
	}
	SG_ENSURE(!*p || strcmp(p, "finished") == 0 || strcmp(p, "beginning") == 0, SG_EINVAL,
	          "a rotation is under way (phase %s); run signetctl rotate %s", p, next_step(p));
	bool resumed = strcmp(p, "beginning") == 0;
	if (!resumed)
		SG_TRY(plan_begin(c));
	kill_point("begin-planned");
	if (s->intermediate)
		return begin_intermediate(c, resumed);
	gen_files g;
	SG_TRY(files_of(c, &g));
	rotate_args *a = c->a;

	sg_hsm *old = NULL, *nw = NULL;
	sg_ca *old_ca = NULL;
	char *root_pem = NULL, *cross_pem = NULL;
	size_t root_len = 0, cross_len = 0;
	uint8_t *spki = NULL, *old_pem = NULL;
	size_t spki_len = 0, old_len = 0;
	int rc = open_key(&a->s, s->old_key, false, &old);
	if (rc == SG_OK)
		rc = check_ca(old, s->old_cert, s->old_cert, &old_ca);
	/* The new key: generated unless an earlier, killed run made it. */
	if (rc == SG_OK)
		rc = open_key(&a->s, s->new_key, true, &nw);
	sg_key_type t;
	if (rc == SG_OK && sg_hsm_key_type(nw, &t) < 0) {
		sg_error_clear();
		rc = sg_hsm_generate_key(nw, (sg_key_type)s->key_type);
		if (rc == SG_OK)
			kill_point("begin-key");
	}
	if (rc == SG_OK)
		rc = sg_hsm_public_key(nw, &spki, &spki_len);
	/* Certificates a killed run wrote for this key are kept: signetd may
	 * already serve that root. */
	if (rc == SG_OK && !holds_key(g.root, spki, spki_len)) {
		rc = sg_init_ca_cert(nw, NULL, NULL, a->s.trust_domain, s->ca_name, s->ca_ttl, &root_pem, &root_len);
		if (rc == SG_OK)
			rc = write_durable(c, g.root_name, root_pem, root_len, 0644);
	}
	if (rc == SG_OK && !holds_key(g.cross, spki, spki_len)) {
		rc = sg_init_ca_cert(nw, old, sg_ca_issuer(old_ca), a->s.trust_domain, s->ca_name, s->ca_ttl,
		                     &cross_pem, &cross_len);
		if (rc == SG_OK)
			rc = write_durable(c, g.cross_name, cross_pem, cross_len, 0644);
	}
	/* The bundle: the old root, then the new one. */
	if (rc == SG_OK) {
		free(root_pem);
		root_pem = NULL;
		uint8_t *r = NULL;
		rc = sg_file_read(g.root, 1 << 20, &r, &root_len);
		root_pem = (char *)r;
	}
	if (rc == SG_OK)
		rc = sg_file_read(s->old_cert, 1 << 20, &old_pem, &old_len);
	if (rc == SG_OK) {
		size_t n = old_len + root_len + 2;
		char *bundle = malloc(n);
		if (!bundle) {
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
		} else {
			int m = snprintf(bundle, n, "%s%s%s", (char *)old_pem,
			                 old_len && old_pem[old_len - 1] != '\n' ? "\n" : "", root_pem);
			rc = write_durable(c, g.bundle_name, bundle, (size_t)m, 0644);
			free(bundle);
		}
	}
	/* What signetd will load, checked first: the old root as CA, the
	 * bundle; the cross-signed certificate for the new key. */
	if (rc == SG_OK)
		rc = check_ca(old, s->old_cert, g.bundle, NULL);
	if (rc == SG_OK)
		rc = check_ca(nw, g.cross, g.bundle, NULL);
	if (rc == SG_OK)
		kill_point("begin-certs");
	if (rc == SG_OK) {
		/* ca-cert stays the old root: nothing signs with the new key. */
		const char *names[] = {"root-cert"};
		const char *values[] = {g.bundle_name};
		rc = ctl_update_config(c->config, names, values, 1);
	}
	if (rc == SG_OK)
		rc = sg_file_sync_dir(c->dir);
	if (rc == SG_OK)
		kill_point("begin-config");
	if (rc == SG_OK)
		rc = set_phase(c, "begun");
	free(root_pem);
	free(cross_pem);
	free(spki);
	free(old_pem);
	sg_ca_free(old_ca);
	sg_hsm_free(nw);
	sg_hsm_free(old);
	SG_TRY(rc);
	audit(c, "begin", resumed ? "completed an interrupted begin" : "");
	printf("begun rotation to generation %" PRId64 ": new key %s, new root %s, cross-signed %s; the root bundle "
	       "%s (old + new) is served.\nNext, once every consumer trusts the new root (istio-ca-root-cert and "
	       "signet-ca-roots updated, workloads restarted or refreshed): signetctl rotate activate\n",
	       s->gen, s->new_key, g.root, g.cross, g.bundle);
	return SG_OK;
}

static int do_activate(ctx *c)
{
	ctl_record *s = &c->st;
	const char *p = s->phase;
	if (strcmp(p, "active") == 0) {
		printf("generation %" PRId64 " is active already; next: signetctl rotate finish\n", s->gen);
		return SG_OK;
	}
	SG_ENSURE(*p, SG_EINVAL, "no rotation has begun; run signetctl rotate begin");
	SG_ENSURE(strcmp(p, "begun") == 0 || strcmp(p, "activating") == 0, SG_EINVAL,
	          "the rotation is in phase %s; run signetctl rotate %s", p, next_step(p));
	bool resumed = strcmp(p, "activating") == 0;
	/* The wait runs from the latest moment signing can have moved: a
	 * resumed activate starts it again. */
	s->activated_at = sg_wall_seconds();
	s->wait = c->a->workload_lifetime + c->a->skew;
	SG_TRY(set_phase(c, "activating"));
	kill_point("activate-planned");
	gen_files g;
	SG_TRY(files_of(c, &g));
	/* An intermediate signs under the certificate import installed; a
	 * root under its cross-signed certificate. */
	const char *cert = s->intermediate ? g.cert : g.cross, *chain = s->has_chain ? g.chain : NULL;
	sg_hsm *nw = NULL;
	SG_TRY(open_key(&c->a->s, s->new_key, false, &nw));
	int rc = check_ca_chain(nw, cert, chain, g.bundle, NULL);
	sg_hsm_free(nw);
	SG_TRY(rc);
	const char *names[] = {"hsm-key", "ca-cert", "ca-chain", "root-cert"};
	const char *values[] = {s->new_key, s->intermediate ? g.cert_name : g.cross_name,
	                        s->has_chain ? g.chain_name : NULL, g.bundle_name};
	SG_TRY(ctl_update_config(c->config, names, values, 4));
	SG_TRY(sg_file_sync_dir(c->dir));
	kill_point("activate-config");
	SG_TRY(set_phase(c, "active"));
	audit(c, "activate", resumed ? "completed an interrupted activate" : "");
	char when[SG_CLOCK_RFC3339_LEN];
	(void)sg_clock_rfc3339(when, sizeof(when), s->activated_at + s->wait);
	printf("activated generation %" PRId64 ": signing moves to %s, chains carry %s.\nNext, after %s (the longest "
	       "workload lifetime + skew, %" PRId64 " s): signetctl rotate finish\n",
	       s->gen, s->new_key, cert, when, s->wait);
	return SG_OK;
}

static int do_finish(ctx *c)
{
	ctl_record *s = &c->st;
	const char *p = s->phase;
	if (strcmp(p, "finished") == 0) {
		printf("the rotation to generation %" PRId64 " is finished already\n", s->gen);
		return SG_OK;
	}
	SG_ENSURE(*p, SG_EINVAL, "no rotation has begun; run signetctl rotate begin");
	SG_ENSURE(strcmp(p, "active") == 0 || strcmp(p, "finishing") == 0, SG_EINVAL,
	          "the rotation is in phase %s; run signetctl rotate %s", p, next_step(p));
	bool resumed = strcmp(p, "finishing") == 0;
	if (!resumed) {
		int64_t left = s->activated_at + s->wait - sg_wall_seconds();
		if (left > 0) {
			char when[SG_CLOCK_RFC3339_LEN], detail[128];
			(void)sg_clock_rfc3339(when, sizeof(when), s->activated_at + s->wait);
			snprintf(detail, sizeof(detail), "refused: %" PRId64 " s left", left);
			audit(c, "finish-refused", detail);
			SG_BAIL(SG_EBUSY,
			        "too early: a certificate the old key signed may still be valid; %" PRId64
			        " s left (finish at or after %s)",
			        left, when);
		}
		s->keep_old_key = c->a->keep_old_key;
		SG_TRY(set_phase(c, "finishing"));
	} else {
		s->keep_old_key |= c->a->keep_old_key;
	}
	kill_point("finish-planned");
	gen_files g;
	SG_TRY(files_of(c, &g));
	/* A root: the new root alone signs and is served. An intermediate:
	 * its certificate stays; the bundle loses the old root when import
	 * brought a new one. */
	const char *cert = s->intermediate ? g.cert : g.root, *chain = s->has_chain ? g.chain : NULL;
	const char *root = s->intermediate && !s->new_root ? g.bundle : g.root;
	sg_hsm *nw = NULL;
	SG_TRY(open_key(&c->a->s, s->new_key, false, &nw));
	int rc = check_ca_chain(nw, cert, chain, root, NULL);
	sg_hsm_free(nw);
	SG_TRY(rc);
	const char *names[] = {"hsm-key", "ca-cert", "ca-chain", "root-cert"};
	const char *values[] = {s->new_key, s->intermediate ? g.cert_name : g.root_name,
	                        s->has_chain ? g.chain_name : NULL,
	                        s->intermediate && !s->new_root ? g.bundle_name : g.root_name};
	SG_TRY(ctl_update_config(c->config, names, values, 4));
	SG_TRY(sg_file_sync_dir(c->dir));
	kill_point("finish-config");
	unsigned destroyed = 0;
	if (!s->keep_old_key) {
		sg_hsm *old = NULL;
		SG_TRY(open_key(&c->a->s, s->old_key, true, &old));
		rc = sg_hsm_destroy_key(old, &destroyed);
		sg_hsm_free(old);
		SG_TRY(rc);
		kill_point("finish-key");
	}
	SG_TRY(set_phase(c, "finished"));
	char detail[128];
	snprintf(detail, sizeof(detail), "%s%s", s->keep_old_key ? "old key kept" : "old key destroyed",
	         resumed ? "; completed an interrupted finish" : "");
	audit(c, "finish", detail);
	printf("finished: generation %" PRId64 " alone is served (root bundle %s); the old key %s %s\n", s->gen, root,
	       s->old_key, s->keep_old_key ? "is kept in the token (--keep-old-key)" : "is destroyed");
	return SG_OK;
}

static void print_root(const char *label, const char *path)
{
	cert_view v;
	view_of(path, &v);
	if (!v.ok) {
		printf("%-14s %s (unreadable)\n", label, path);
		return;
	}
	char t[SG_CLOCK_RFC3339_LEN];
	(void)sg_clock_rfc3339(t, sizeof(t), v.not_after);
	printf("%-14s %s\n%-14s sha256 %s\n%-14s not after %s\n", label, path, "", v.fp, "", t);
}

static int do_status(ctx *c)
{
	ctl_record *s = &c->st;
	char when[SG_CLOCK_RFC3339_LEN];
	if (!*s->phase) {
		printf("%-14s none (no rotation has begun)\n", "phase");
		if (c->a->s.ca_cert)
			print_root("root", c->a->s.ca_cert);
		printf("%-14s signetctl rotate begin, well before the root expires\n", "next");
		return SG_OK;
	}
	gen_files g;
	SG_TRY(files_of(c, &g));
	(void)sg_clock_rfc3339(when, sizeof(when), s->since);
	printf("%-14s %s\n%-14s %" PRId64 "\n%-14s %s\n", "phase", s->phase, "generation", s->gen, "since", when);
	printf("%-14s %s\n%-14s %s\n", "old key", s->old_key, "new key", s->new_key);
	if (s->intermediate) {
		print_root("old CA", s->old_cert);
		print_root("new CA", g.cert);
		if (s->new_root)
			print_root("new root", g.root);
	} else {
		print_root("old root", s->old_cert);
		print_root("new root", g.root);
	}
	const char *p = s->phase;
	int64_t now = sg_wall_seconds();
	if (strcmp(p, "awaiting-import") == 0) {
		printf("%-14s have %s signed by your root, then signetctl rotate import --cert CERT [--chain CHAIN] "
		       "[--root ROOT]\n",
		       "next", g.csr);
	} else if (strcmp(p, "begun") == 0) {
		printf("%-14s signetctl rotate activate, once every consumer trusts the new root (the bundle old + new "
		       "is served since %s)\n",
		       "next", when);
	} else if (strcmp(p, "active") == 0) {
		int64_t at = s->activated_at + s->wait;
		(void)sg_clock_rfc3339(when, sizeof(when), at);
		if (at > now)
			printf("%-14s signetctl rotate finish, at or after %s (%" PRId64
			       " s left: the longest workload lifetime + skew since activate)\n",
			       "next", when, at - now);
		else
			printf("%-14s signetctl rotate finish (allowed since %s)\n", "next", when);
	} else if (strcmp(p, "finished") == 0) {
		printf("%-14s nothing; a later rotation starts with signetctl rotate begin\n", "next");
	} else {
		printf("%-14s signetctl rotate %s (a %s step was interrupted; running it again completes it)\n", "next",
		       next_step(p), next_step(p));
	}
	return SG_OK;
}

static void usage(void)
{
	printf("usage: signetctl rotate {begin|import|activate|finish|status} --config DIR/signet.conf [options]\n\n"
	       "Rotates the CA that signetctl init made, in steps that a running signetd follows\n"
	       "(within a second, or at once on SIGHUP):\n"
	       "  begin     new key in the same token, new root, the new root cross-signed by\n"
	       "            the old key; the root bundle served becomes old + new\n"
	       "  activate  signing moves to the new key; chains carry the cross-signed certificate\n"
	       "  finish    after the longest workload lifetime + skew since activate: only the new\n"
	       "            root is served; the old key is destroyed unless --keep-old-key\n"
	       "  status    phase, both roots' fingerprints and expiry, what the next step waits for\n"
	       "An intermediate under an external root: begin --subject S writes a CSR for the next\n"
	       "intermediate; import --cert C [--chain CH] [--root R] installs it signed (the bundle\n"
	       "becomes old + new when R is a new root); then activate and finish as above.\n\n"
	       "A step killed at any point is completed by running the same command again.\n"
	       "Every step is logged and appended to rotation-audit.log beside the config.\n\n");
	sg_opt_usage(rotate_opts, N_ROTATE_OPTS, stdout);
}

int ctl_rotate(int argc, char **argv)
{
	rotate_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(rotate_opts, N_ROTATE_OPTS, &a, argc, argv, &res);
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(rotate_opts, N_ROTATE_OPTS, &a);
		return 0;
	}
	int (*step)(ctx *) = NULL;
	const char *name = res.argc > 0 ? res.argv[0] : "";
	if (rc == SG_OK) {
		step = strcmp(name, "begin") == 0      ? do_begin
		       : strcmp(name, "activate") == 0 ? do_activate
		       : strcmp(name, "finish") == 0   ? do_finish
		       : strcmp(name, "status") == 0   ? do_status
		       : strcmp(name, "import") == 0   ? do_import
		                                       : NULL;
		if (!step)
			rc = sg_error_set(SG_EINVAL, "%s: say begin, import, activate, finish or status",
			                  res.argc ? "unknown step" : "no step");
		else if (res.argc > 1)
			rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[1]);
		else if (!a.s.config)
			rc = sg_error_set(SG_EINVAL, "--config is required (the signet.conf signetctl init wrote)");
	}
	if (rc < 0) {
		fprintf(stderr, "signetctl rotate: %s\n", sg_error_last()->msg);
		sg_opt_free(rotate_opts, N_ROTATE_OPTS, &a);
		return 2;
	}
	sg_settings_apply_log(&a.s);
	/* A SoftHSM2 token.object emptied by a process killed while logging
	 * in is put back before the module reads it (sg_init.h). */
	rc = sg_init_softhsm_repair(a.s.softhsm2_conf);
	ctx *c SG_AUTOFREE = calloc(1, sizeof(*c));
	if (rc == SG_OK && !c)
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK) {
		c->a = &a;
		if (!realpath(a.s.config, c->config))
			rc = sg_error_set(SG_EINVAL, "cannot resolve %s: %s", a.s.config, strerror(errno));
	}
	if (rc == SG_OK) {
		memcpy(c->dir, c->config, sizeof(c->dir));
		*strrchr(c->dir, '/') = 0;
		rc = state_read(c);
	}
	if (rc == SG_OK)
		rc = step(c);
	if (rc < 0)
		fprintf(stderr, "signetctl rotate %s: %s\n", name, sg_error_last()->msg);
	sg_opt_free(rotate_opts, N_ROTATE_OPTS, &a);
	return rc < 0 ? 1 : 0;
}
