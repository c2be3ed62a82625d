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
 * late, after everything else succeeded, and removed again if signet.conf
 * cannot be written, so a failed init never leaves one.
 *
 * A killed init cannot clean up, and a folder it left was refused by every
 * later run as "not empty", leaving the operator to guess what was safe to
 * delete (a token store, the user PIN, perhaps a temporary holding the SO
 * PIN). So the folder carries a record, SG_INIT_PARTIAL_NAME, from before
 * its first file (fsync'ed, with the folder) until after its last: a rerun
 * that finds it knows the folder for a remnant of its own and starts over,
 * removing the SO PIN file and temporary the record names. The order of
 * the last steps is what makes that safe: the SO PIN file, then
 * signet.conf (by rename: its presence means the CA is whole, SO PIN
 * included; sg_init_state.c and signetd rely on that), then the record.
 * A lock on the folder (flock, held for the whole call) keeps a second
 * init from taking a first one's folder, mid-way, for a remnant.
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
#include <sys/file.h>
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
	const char *hsm_init_reserved;
	const char *token_label;
	const char *key_label; /* NULL: SG_INIT_DEFAULT_KEY_LABEL-<the CKA_ID in hex> */
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
		.hsm_init_reserved = o->hsm_init_reserved,
		.token_label = o->token_label ? o->token_label : SG_INIT_DEFAULT_TOKEN_LABEL,
		.key_label = o->key_label,
		.pin_file = o->pin_file,
		.so_pin_file = o->so_pin_file,
		.ca_name = o->ca_name ? o->ca_name : SG_INIT_DEFAULT_CA_NAME,
		.ca_ttl = o->ca_ttl ? o->ca_ttl : SG_INIT_DEFAULT_CA_TTL_S,
		.program = o->program ? o->program : "signetctl init",
	};
}

/* A PKCS#11 label is 32 bytes of UTF-8 padded with spaces, so a label that
 * begins or ends with a space cannot be told from its padding; control
 * characters have no place in a label or a config line. Anything else goes
 * (NSS names its token "NSS Certificate DB"): uri_encode escapes it. */
static bool label_ok(const char *l)
{
	size_t n = strlen(l);
	if (n && (l[0] == ' ' || l[n - 1] == ' '))
		return false;
	for (const unsigned char *p = (const unsigned char *)l; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

/* RFC 7512 path attribute value: unreserved characters as they are, every
 * other byte as %XX (p11-kit decodes both). out holds 3 * strlen(v) + 1. */
static void uri_encode(const char *v, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		    *p == '.' || *p == '_' || *p == '~') {
			*out++ = (char)*p;
		} else {
			*out++ = '%';
			*out++ = hex[*p >> 4];
			*out++ = hex[*p & 15];
		}
	}
	*out = 0;
}

int sg_init_check_options(const sg_init_options *o)
{
	/* An empty dir is not "missing": it is refused later as a path, as it
	 * always was. */
	SG_ENSURE(o && o->dir, SG_EINVAL, "--dir is required");
	plan p = plan_of(o);
	/* In signetctl init's order, so that its messages stay what they were. */
	const char *key_label = p.key_label ? p.key_label : SG_INIT_DEFAULT_KEY_LABEL;
	for (const char *const *l = (const char *const[]){p.token_label, key_label, NULL}; *l; l++)
		SG_ENSURE(label_ok(*l), SG_EINVAL,
			  "a label may not hold control characters or begin or end with a space (\"%s\")", *l);
	SG_ENSURE(*p.token_label && *key_label, SG_EINVAL, "the token and key labels must not be empty");
	SG_ENSURE(!p.hsm_module || p.pin_file, SG_EINVAL, "--hsm-module needs --pin-file with the token's user PIN");
	SG_ENSURE(!p.hsm_module || !p.so_pin_file, SG_EINVAL,
		  "--so-pin-file is for a new SoftHSM2 token; with --hsm-module the token and its SO PIN are already "
		  "yours");
	/* signetctl's flag table bounds these already; other callers are held
	 * to the same bounds here. */
	SG_ENSURE(!p.hsm_init_reserved || p.hsm_module, SG_EINVAL,
		  "--hsm-init-reserved is for the module given with --hsm-module");
	if (p.hsm_init_reserved) {
		/* It goes into signet.conf as one line. */
		size_t n = strlen(p.hsm_init_reserved);
		SG_ENSURE(n > 0 && n <= SG_INIT_INIT_RESERVED_MAX, SG_EINVAL,
			  "--hsm-init-reserved must hold 1 to %d bytes", SG_INIT_INIT_RESERVED_MAX);
		for (const unsigned char *c = (const unsigned char *)p.hsm_init_reserved; *c; c++)
			SG_ENSURE(*c >= 0x20 && *c != 0x7f, SG_EINVAL, "--hsm-init-reserved may not hold control characters");
		SG_ENSURE(p.hsm_init_reserved[0] != ' ' && p.hsm_init_reserved[n - 1] != ' ', SG_EINVAL,
			  "--hsm-init-reserved may not begin or end with a space (signet.conf would drop it)");
	}
	SG_ENSURE(strlen(p.token_label) <= SG_INIT_LABEL_MAX && strlen(key_label) <= SG_INIT_LABEL_MAX, SG_EINVAL,
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

/* Removes the folder's contents but the record, which goes last (see
 * empty_folder): a process killed half-way leaves a remnant a rerun still
 * knows for one. The folder itself stays unless init created it. */
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	if (ftw->level == 0 || (ftw->level == 1 && strcmp(path + ftw->base, SG_INIT_PARTIAL_NAME) == 0))
		return 0;
	return remove(path);
}

/* Empties dir, the record last. */
static int empty_folder(const char *dir)
{
	int rc = nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	char *rec = join(dir, SG_INIT_PARTIAL_NAME);
	if (rc == 0 && (!rec || (unlink(rec) != 0 && errno != ENOENT)))
		rc = -1;
	free(rec);
	return rc;
}

/* What sg_init_ca writes into its folder. */
static const char *const made_names[] = {
	"signet.conf", "softhsm2.conf", "tokens", "pin", "root-cert.pem", "jwt-signing-key.pem", "jwks.json",
	SG_INIT_PARTIAL_NAME,
};
#define N_MADE_NAMES (sizeof(made_names) / sizeof(made_names[0]))

bool sg_init_made_name(const char *name)
{
	for (size_t i = 0; i < N_MADE_NAMES; i++) {
		size_t n = strlen(made_names[i]);
		if (strncmp(name, made_names[i], n) != 0)
			continue;
		const char *rest = name + n;
		/* sg_file_write_new's temporary and sg_file_write_atomic's. */
		if (!*rest || strcmp(rest, ".new") == 0)
			return true;
		if (strncmp(rest, ".tmp.", 5) == 0 && rest[5]) {
			const char *d = rest + 5;
			while (*d >= '0' && *d <= '9')
				d++;
			if (!*d)
				return true;
		}
	}
	return false;
}

/* The folder of path (PATH_MAX bytes), for sg_file_sync_dir. */
static void folder_of(const char *path, char *out)
{
	snprintf(out, PATH_MAX, "%s", path);
	char *slash = strrchr(out, '/');
	if (slash == out)
		out[1] = 0;
	else if (slash)
		*slash = 0;
	else
		snprintf(out, PATH_MAX, ".");
}

/* What an existing folder holds, as far as init is concerned. */
typedef enum found {
	FOUND_EMPTY,    /* nothing: made here */
	FOUND_REMNANT,  /* the record without signet.conf: a killed attempt, removed and made again */
	FOUND_FINISHED, /* the record with signet.conf: a killed attempt that had made the CA whole */
} found;

/* Reads an existing folder (under its lock) and says what it is, or
 * refuses it, saying what to do. */
static int inspect(const char *dir, found *what)
{
	DIR *d = opendir(dir);
	SG_ENSURE(d, SG_EINVAL, "cannot read %s: %s", dir, strerror(errno));
	bool any = false, conf = false, record = false;
	char foreign[NAME_MAX + 1] = "";
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		any = true;
		conf |= strcmp(e->d_name, "signet.conf") == 0;
		record |= strcmp(e->d_name, SG_INIT_PARTIAL_NAME) == 0;
		if (!*foreign && !sg_init_made_name(e->d_name))
			snprintf(foreign, sizeof(foreign), "%s", e->d_name);
	}
	closedir(d);
	*what = FOUND_EMPTY;
	if (!any)
		return SG_OK;
	if (record) {
		SG_ENSURE(!*foreign, SG_EINVAL,
			  "%s is the remnant of an interrupted init but holds %s, which init never writes; refusing "
			  "to remove it: move %s away and run init again, or remove the folder",
			  dir, foreign, foreign);
		*what = conf ? FOUND_FINISHED : FOUND_REMNANT;
		return SG_OK;
	}
	SG_ENSURE(!conf, SG_EINVAL,
		  "%s exists and is not empty: it already holds a CA; refusing to touch it (use it with --config "
		  "%s/signet.conf, or choose another --dir)",
		  dir, dir);
	SG_BAIL(SG_EINVAL,
		"%s exists and is not empty, and no interrupted init left it; refusing to touch it (choose another "
		"--dir, or empty it)",
		dir);
}

/* The SO PIN path an attempt recorded (PATH_MAX bytes; "" when it wrote
 * none: an HSM module, or killed before it wrote the path). */
static void read_record(const char *dir, char *so)
{
	*so = 0;
	char *path SG_AUTOFREE = join(dir, SG_INIT_PARTIAL_NAME);
	uint8_t *text SG_AUTOFREE = NULL;
	size_t len;
	if (!path || sg_file_read(path, PATH_MAX + 64, &text, &len) < 0)
		return;
	static const char key[] = "so-pin-file = ";
	const char *line = strstr((const char *)text, key);
	const char *end = line ? strchr(line, '\n') : NULL;
	/* Only a whole line counts: a record cut by the kill names nothing. */
	if (end && line[sizeof(key) - 1] == '/' && (size_t)(end - line) - (sizeof(key) - 1) < PATH_MAX)
		snprintf(so, PATH_MAX, "%.*s", (int)(end - line - (sizeof(key) - 1)), line + sizeof(key) - 1);
}

/* Writes the record, durably, into the empty folder dir. */
static int write_record(const char *dir, const char *so_path)
{
	char *path SG_AUTOFREE = join(dir, SG_INIT_PARTIAL_NAME);
	SG_ENSURE(path, SG_EINTERNAL, "out of memory");
	char text[PATH_MAX + 256];
	int n = snprintf(text, sizeof(text),
			 "# An init is making a CA here; if this file outlives it, running init again on this\n"
			 "# folder removes what it made (and the SO PIN file below) and starts over.\n"
			 "%s%s%s",
			 *so_path ? "so-pin-file = " : "", so_path, *so_path ? "\n" : "");
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "path too long: %s", so_path);
	/* Written in place, not by rename: a temporary left by a kill would be
	 * a name without the record, which a rerun must refuse. */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	SG_ENSURE(fd >= 0, SG_EINVAL, "cannot create %s: %s", path, strerror(errno));
	ssize_t w = write(fd, text, (size_t)n);
	if (w >= 0 && w != n)
		errno = ENOSPC; /* a short write to a regular file: the disk is full */
	bool ok = w == n && fsync(fd) == 0;
	int e = errno;
	if (close(fd) != 0 && ok) {
		ok = false;
		e = errno;
	}
	SG_ENSURE(ok, SG_EINVAL, "cannot write %s: %s", path, strerror(e));
	return sg_file_sync_dir(dir);
}

/* The attempt is whole: what it wrote is made durable, then the record
 * goes. so_path: the SO PIN file written, or "". */
static int end_record(const char *dir, const char *so_path)
{
	char folder[PATH_MAX];
	SG_TRY(sg_file_sync_dir(dir));
	if (*so_path) {
		folder_of(so_path, folder);
		SG_TRY(sg_file_sync_dir(folder));
	}
	char *path SG_AUTOFREE = join(dir, SG_INIT_PARTIAL_NAME);
	SG_ENSURE(path, SG_EINTERNAL, "out of memory");
	SG_ENSURE(unlink(path) == 0 || errno == ENOENT, SG_EINVAL,
		  "cannot remove %s: %s (the CA is whole: run init again to finish)", path, strerror(errno));
	return sg_file_sync_dir(dir);
}

/* Removes a file init wrote outside the folder (the SO PIN file, its
 * temporary) if it looks like one: a plain file of mode 0400 holding at
 * most an SO PIN's 32 bytes. The path comes from the record, so whatever
 * else it may name is left alone (and then refused by plan_so_pin). */
static bool so_pin_like(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0400 && st.st_size <= 32;
}

static void remove_file(const char *path)
{
	if (so_pin_like(path) && unlink(path) != 0)
		sg_log(SG_LOG_WARN, "cannot remove a file of an interrupted init", SG_F_STR("path", path),
		       SG_F_STR("error", strerror(errno)), SG_F_END);
}

/* Removes a killed attempt's remnant: the SO PIN file it recorded and its
 * temporary, then the folder's contents. */
static int remove_remnant(const char *dir, const char *recorded_so)
{
	sg_log(SG_LOG_WARN, "removing the remnant of an interrupted init", SG_F_STR("dir", dir), SG_F_END);
	if (*recorded_so) {
		char tmp[PATH_MAX + 8];
		snprintf(tmp, sizeof(tmp), "%s.new", recorded_so);
		remove_file(tmp);
		remove_file(recorded_so);
	}
	int rc = empty_folder(dir);
	SG_ENSURE(rc == 0, SG_EINVAL, "cannot remove the remnant of an interrupted init in %s: %s", dir,
		  strerror(errno));
	return sg_file_sync_dir(dir);
}

/*
 * SoftHSM2's token.object. SoftHSM2 (file back end, the only one Debian
 * builds) rewrites it in place, ftruncate then write, on every C_Login (it
 * resets the PIN flags whether they changed or not). A process killed
 * between the two leaves it empty: the token is then "not initialised",
 * and since token.object holds the token key that wraps every private
 * object, the CA key is lost with it. Its contents never change after
 * init (signet changes no PIN or label), so init keeps a copy beside it,
 * TOKEN_BACKUP (a name SoftHSM2 does not read: it looks at "*.object"),
 * and sg_init_softhsm_repair puts the copy back over an empty one before
 * the module is loaded.
 */
#define TOKEN_BACKUP "token.object.signet-bak"
#define TOKEN_OBJECT_MAX (64 * 1024)

/* Calls fn(token folder) for every folder in the token store. */
static int each_token(const char *tokens, int (*fn)(const char *dir))
{
	DIR *d = opendir(tokens);
	SG_ENSURE(d, SG_EINVAL, "cannot read %s: %s", tokens, strerror(errno));
	int rc = SG_OK;
	struct dirent *e;
	while (rc == SG_OK && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char *sub = join(tokens, e->d_name);
		struct stat st;
		if (!sub)
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
		else if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
			rc = fn(sub);
		free(sub);
	}
	closedir(d);
	return rc;
}

static int backup_token(const char *dir)
{
	char *obj SG_AUTOFREE = join(dir, "token.object");
	char *bak SG_AUTOFREE = join(dir, TOKEN_BACKUP);
	SG_ENSURE(obj && bak, SG_EINTERNAL, "out of memory");
	uint8_t *data SG_AUTOFREE = NULL;
	size_t len;
	SG_TRY(sg_file_read(obj, TOKEN_OBJECT_MAX, &data, &len));
	SG_ENSURE(len > 0, SG_EINVAL, "%s is empty", obj);
	return sg_file_write_new(bak, data, len, 0600);
}

static int repair_token(const char *dir)
{
	char *obj SG_AUTOFREE = join(dir, "token.object");
	char *bak SG_AUTOFREE = join(dir, TOKEN_BACKUP);
	SG_ENSURE(obj && bak, SG_EINTERNAL, "out of memory");
	struct stat st;
	/* Only the state a kill leaves: present and empty. */
	if (lstat(obj, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 0 || lstat(bak, &st) != 0)
		return SG_OK;
	uint8_t *data SG_AUTOFREE = NULL;
	size_t len;
	SG_TRY(sg_file_read(bak, TOKEN_OBJECT_MAX, &data, &len));
	SG_ENSURE(len > 0, SG_EINVAL, "%s is empty", bak);
	SG_TRY(sg_file_write_atomic(obj, data, len, 0600));
	SG_TRY(sg_file_sync_dir(dir));
	sg_log(SG_LOG_WARN, "restored a SoftHSM2 token.object emptied by a process killed while logging in",
	       SG_F_STR("path", obj), SG_F_END);
	return SG_OK;
}

int sg_init_softhsm_repair(const char *softhsm_conf)
{
	if (!softhsm_conf)
		return SG_OK;
	uint8_t *text SG_AUTOFREE = NULL;
	size_t len;
	/* No file: the HSM layer reports it, with its own words. */
	if (sg_file_read(softhsm_conf, 64 * 1024, &text, &len) < 0)
		return SG_OK;
	static const char key[] = "\ndirectories.tokendir = ";
	const char *at = strstr((const char *)text, key);
	if (!at)
		return SG_OK;
	at += sizeof(key) - 1;
	const char *end = strchr(at, '\n');
	size_t n = end ? (size_t)(end - at) : strlen(at);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "bad directories.tokendir in %s", softhsm_conf);
	char tokens[PATH_MAX];
	snprintf(tokens, sizeof(tokens), "%.*s", (int)n, at);
	struct stat st;
	if (stat(tokens, &st) != 0 || !S_ISDIR(st.st_mode))
		return SG_OK;
	return each_token(tokens, repair_token);
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

int sg_init_ca_cert(sg_hsm *subject, sg_hsm *signer, const sg_cert_issuer *issuer, const char *trust_domain,
                    const char *ca_name, int64_t ttl, char **pem, size_t *pem_len)
{
	SG_ENSURE(subject && (!issuer || signer) && trust_domain && ca_name && ttl > 0, SG_EINVAL,
	          "sg_init_ca_cert: bad arguments");
	if (!issuer)
		signer = subject;
	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	SG_TRY(sg_hsm_public_key(subject, &spki, &spki_len));
	sg_pubkey key;
	SG_TRY(sg_pubkey_parse(&key, spki, spki_len));
	sg_key_type type;
	SG_TRY(sg_hsm_key_type(signer, &type));

	sg_issuer *is = NULL;
	SG_TRY(sg_issuer_new(&is, NULL, signer, NULL));
	int rc;
	sg_rdn rdns[2] = {
	    {SG_NAME_O, SG_DER_UTF8STRING, {(const uint8_t *)trust_domain, strlen(trust_domain)}},
	    {SG_NAME_CN, SG_DER_UTF8STRING, {(const uint8_t *)ca_name, strlen(ca_name)}},
	};
	uint8_t name[1024], key_id[20], tbs[SG_CERT_MAX_DER], cert[SG_CERT_MAX_DER + 1200];
	sg_der_writer nw, tw, cw;
	sg_der_writer_init(&nw, name, sizeof(name));
	sg_name_encode(&nw, rdns, 2);
	SG_TRY_GOTO(rc, sg_der_writer_status(&nw), out);
	SG_TRY_GOTO(rc, sg_key_id(sg_issuer_crypto(is), &key, key_id), out);

	int64_t now = sg_wall_seconds();
	/* Backdated a little so that clients with a slow clock accept it. */
	sg_cert_issuer self = {{name, nw.len}, {key_id, 20}, sg_sigalg_for_ca(type), now - 300, now + ttl};
	sg_cert_issuer by = issuer ? *issuer : self;
	sg_cert_spec spec = {
	    .not_before = self.not_before,
	    .not_after = self.not_after,
	    .subject = rdns,
	    .subject_len = 2,
	    .key = &key,
	    .key_usage = SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN | SG_KU_DIGITAL_SIGNATURE,
	    .is_ca = true,
	    .path_len = -1,
	};
	/* A certificate lies within its issuer's validity: it does not outlive
	 * it, and the backdating above stops at its start (an external root
	 * made moments ago, whose notBefore is later than now - 300). */
	if (issuer && spec.not_after > issuer->not_after)
		spec.not_after = issuer->not_after;
	if (issuer && spec.not_before < issuer->not_before)
		spec.not_before = issuer->not_before;
	SG_ENSURE_GOTO(rc, spec.not_after > now, out, SG_EINVAL, "the issuing CA has expired");
	SG_ENSURE_GOTO(rc, !issuer || issuer->not_before <= now, out, SG_EINVAL, "the issuing CA is not valid yet");
	SG_TRY_GOTO(rc, sg_cert_serial(&spec), out);
	sg_der_writer_init(&tw, tbs, sizeof(tbs));
	SG_TRY_GOTO(rc, sg_cert_encode_tbs(&tw, &spec, &by, sg_issuer_crypto(is)), out);
	SG_TRY_GOTO(rc, sg_cert_lint_tbs(tw.buf, tw.len, &by, SG_LINT_CA), out);
	sg_der_writer_init(&cw, cert, sizeof(cert));
	SG_TRY_GOTO(rc, sg_issuer_sign_tbs(is, by.sigalg, tw.buf, tw.len, sg_now_ns() + 30ull * 1000000000u, &cw), out);
	rc = sg_pem_encode("CERTIFICATE", cw.buf, cw.len, pem, pem_len);
out:
	sg_issuer_free(is);
	return rc;
}

static int make_root(const plan *a, sg_hsm *hsm, char **pem, size_t *pem_len)
{
	return sg_init_ca_cert(hsm, NULL, NULL, a->trust_domain, a->ca_name, a->ca_ttl, pem, pem_len);
}

static int write_config(const plan *a, const char *abs_dir, const char *token_uri, const char *key_uri,
			const char *module, const char *pin_file)
{
	char *path SG_AUTOFREE = join(abs_dir, "signet.conf");
	SG_ENSURE(path, SG_EINTERNAL, "out of memory");
	char text[4 * PATH_MAX + SG_INIT_INIT_RESERVED_MAX + 1024];
	char when[32];
	(void)sg_clock_rfc3339(when, sizeof(when), (int64_t)time(NULL));
	int n = snprintf(text, sizeof(text),
			 "# signet configuration, written by %s at %s.\n"
			 "# signetctl and signetd read it with --config; their flags use the same\n"
			 "# names and override these values. Relative paths are relative to this file.\n"
			 "%s%s%s"
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
			 a->hsm_init_reserved ? "hsm-init-reserved = " : "", a->hsm_init_reserved ? a->hsm_init_reserved : "",
			 a->hsm_init_reserved ? "\n" : "", token_uri, key_uri, pin_file, module ? "" : "softhsm2-conf = softhsm2.conf\n", a->trust_domain,
			 DEV_ISSUER);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(text), SG_EINVAL, "configuration too long");
	return sg_file_write_new(path, text, (size_t)n, 0644);
}

static int absolute(const char *path, char *out)
{
	SG_ENSURE(realpath(path, out), SG_EINVAL, "cannot resolve %s: %s", path, strerror(errno));
	return SG_OK;
}

/* The module as the user named it, made absolute but with its symlinks
 * kept: packages install a module as a versioned file behind a stable
 * link (libtpm2_pkcs11.so -> libtpm2_pkcs11.so.1.9.0), and the next
 * upgrade removes the file that realpath would have recorded. */
static int module_path(const char *path, char *out)
{
	struct stat st;
	SG_ENSURE(stat(path, &st) == 0, SG_EINVAL, "--hsm-module %s: %s", path, strerror(errno));
	SG_ENSURE(S_ISREG(st.st_mode), SG_EINVAL, "--hsm-module %s is not a file", path);
	if (path[0] == '/') {
		SG_ENSURE(strlen(path) < PATH_MAX, SG_EINVAL, "path too long: %s", path);
		snprintf(out, PATH_MAX, "%s", path);
		return SG_OK;
	}
	char cwd[PATH_MAX];
	SG_ENSURE(getcwd(cwd, sizeof(cwd)), SG_EINVAL, "cannot resolve %s: %s", path, strerror(errno));
	const char *rel = path;
	while (rel[0] == '.' && rel[1] == '/')
		rel += 2;
	int n = snprintf(out, PATH_MAX, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, rel);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "path too long: %s", path);
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
 * be overwritten; lstat, so a dangling symlink counts), its temporary
 * path.new (sg_file_write_new would refuse it at the very end), and a
 * folder we cannot write to (found now, not after the token is made).
 * mine: the SO PIN file a remnant's record names ("" if none), which is
 * removed with the remnant and so not refused.
 */
static int plan_so_pin(const plan *a, const char *abs_dir, const char *mine, char *out)
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
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.new", out);
	/* The remnant's own files, which remove_remnant will remove. */
	bool ours = strcmp(out, mine) == 0, ours_tmp = ours && so_pin_like(tmp);
	ours = ours && so_pin_like(out);
	SG_ENSURE(ours || lstat(out, &st) != 0, SG_EINVAL,
		  "the SO PIN file %s already exists (it may belong to another token); move it away or choose "
		  "another --so-pin-file",
		  out);
	SG_ENSURE(ours || errno == ENOENT, SG_EINVAL, "cannot use %s for the SO PIN: %s", out, strerror(errno));
	SG_ENSURE(ours_tmp || lstat(tmp, &st) != 0, SG_EINVAL,
		  "%s exists (an unfinished SO PIN file, perhaps another token's); move it away or choose another "
		  "--so-pin-file",
		  tmp);
	char folder[PATH_MAX];
	snprintf(folder, sizeof(folder), "%s", out);
	*strrchr(folder, '/') = 0;
	SG_ENSURE(access(*folder ? folder : "/", W_OK | X_OK) == 0, SG_EINVAL,
		  "cannot write the SO PIN file %s: %s; choose another --so-pin-file", out, strerror(errno));
	return SG_OK;
}

/* so_path: where the SO PIN goes (a new SoftHSM2 token), else NULL.
 * *so_written: the SO PIN file was written (the caller removes it if this
 * fails after). */
static int run_init(const plan *a, const char *abs_dir, const char *so_path, bool *so_written)
{
	sg_key_type type = a->key_type;
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	sg_secret *so SG_CLEANUP(sg_secret_freep) = NULL;
	char module[PATH_MAX], pin_path[PATH_MAX];
	if (a->hsm_module) {
		SG_TRY(module_path(a->hsm_module, module));
		SG_TRY(absolute(a->pin_file, pin_path));
		SG_TRY(sg_secret_from_file(&pin, pin_path));
	} else {
		SG_TRY(make_softhsm(a, abs_dir, &pin, &so));
		snprintf(pin_path, sizeof(pin_path), "pin");
	}

	/* A fresh random CKA_ID names this CA's key; the label says what it is. */
	uint8_t id[8];
	SG_TRY(sg_crypto_random(id, sizeof(id)));
	char token_uri[16 + 3 * SG_INIT_LABEL_MAX], key_uri[32 + 3 * SG_INIT_LABEL_MAX + 3 * sizeof(id)];
	char idhex[3 * sizeof(id) + 1], label[SG_INIT_LABEL_MAX + 1], enc[3 * SG_INIT_LABEL_MAX + 1];
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(idhex + 3 * i, 4, "%%%02x", id[i]);
	/* Without a label of the user's, the id names the key too, so that a
	 * second CA in the same token never collides with the first. */
	if (a->key_label)
		snprintf(label, sizeof(label), "%s", a->key_label);
	else
		snprintf(label, sizeof(label), "%s-%02x%02x%02x%02x", SG_INIT_DEFAULT_KEY_LABEL, id[0], id[1], id[2],
			 id[3]);
	uri_encode(a->token_label, enc);
	snprintf(token_uri, sizeof(token_uri), "pkcs11:token=%s", enc);
	uri_encode(label, enc);
	snprintf(key_uri, sizeof(key_uri), "pkcs11:object=%s;id=%s", enc, idhex);

	char *conf SG_AUTOFREE = join(abs_dir, "softhsm2.conf");
	SG_ENSURE(conf, SG_EINTERNAL, "out of memory");
	sg_hsm_options ho = {
		.module_path = a->hsm_module ? module : NULL,
		.token_uri = token_uri,
		.key_uri = key_uri,
		.pin = pin,
		.softhsm_conf = a->hsm_module ? NULL : conf,
		.init_reserved = a->hsm_init_reserved,
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
	SG_TRY_GOTO(rc, make_root(a, hsm, &pem, &pem_len), out);
	SG_TRY_GOTO(rc, sg_file_write_new(root_path, pem, pem_len, 0644), out);
	SG_TRY_GOTO(rc, sg_jwt_dev_issuer_create(jwt_key, jwks, NULL), out);
	if (!a->hsm_module) {
		/* Closed first: SoftHSM2 rewrites token.object until logout. */
		sg_hsm_free(hsm);
		hsm = NULL;
		char *tokens SG_AUTOFREE = join(abs_dir, "tokens");
		SG_ENSURE_GOTO(rc, tokens, out, SG_EINTERNAL, "out of memory");
		SG_TRY_GOTO(rc, each_token(tokens, backup_token), out);
	}
	/* The SO PIN file before signet.conf, so that signet.conf means "whole,
	 * SO PIN included"; a failure of signet.conf has the caller remove it. */
	if (so) {
		SG_TRY_GOTO(rc, write_secret(so_path, so, 0400), out);
		*so_written = true;
	}
	SG_TRY_GOTO(rc, write_config(a, abs_dir, token_uri, key_uri, a->hsm_module ? module : NULL, pin_path), out);
	sg_log(SG_LOG_INFO, "CA created", SG_F_STR("dir", abs_dir), SG_F_STR("key", sg_key_type_name(type)),
	       SG_F_STR("token", a->token_label), SG_F_STR("key_label", label), SG_F_STR("trust_domain", a->trust_domain), SG_F_END);
out:
	free(pem);
	sg_hsm_free(hsm);
	return rc;
}

/* Where sg_init_ca stands before run_init. */
typedef struct setup {
	char dir[PATH_MAX];    /* absolute */
	char so[PATH_MAX];     /* where the SO PIN goes; "" with an HSM module */
	char config[PATH_MAX]; /* dir/signet.conf */
	char mine[PATH_MAX];   /* a remnant's recorded SO PIN file, or "" */
	bool created;          /* this call made dir */
	bool began;            /* past every refusal: from here on a failure cleans up */
	found what;
	int lock;              /* dir, flock'ed; -1 before it exists */
} setup;

/* Takes the folder's lock; st->lock stays -1 unless it is held, so that
 * nothing is cleaned up in a folder another init holds. */
static int lock_dir(setup *st)
{
	int fd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	SG_ENSURE(fd >= 0, SG_EINVAL, "cannot use %s: %s", st->dir, strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		close(fd);
		SG_ENSURE(e != EWOULDBLOCK, SG_EBUSY, "cannot lock %s: another init is making a CA there now; wait "
			  "for it to end", st->dir);
		SG_BAIL(SG_EINVAL, "cannot lock %s: %s", st->dir, strerror(e));
	}
	st->lock = fd;
	return SG_OK;
}

/* Every refusal, then what is made before run_init: the folder when it
 * does not exist yet, or a remnant removed; then the record. */
static int prepare(const plan *a, bool softhsm, setup *st)
{
	struct stat sb;
	bool exists = stat(a->dir, &sb) == 0;
	SG_ENSURE(exists || errno == ENOENT, SG_EINVAL, "cannot use %s: %s", a->dir, strerror(errno));
	SG_ENSURE(!exists || S_ISDIR(sb.st_mode), SG_EINVAL, "%s exists and is not a folder; choose another --dir",
		  a->dir);
	SG_TRY(exists ? absolute(a->dir, st->dir) : absolute_leaf(a->dir, st->dir));
	SG_ENSURE(strcmp(st->dir, "/") != 0, SG_EINVAL, "refusing to use / as the CA folder");
	int n = snprintf(st->config, PATH_MAX, "%s/signet.conf", st->dir);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "folder path too long");
	if (exists) {
		SG_TRY(lock_dir(st));
		SG_TRY(inspect(st->dir, &st->what));
		if (st->what != FOUND_EMPTY)
			read_record(st->dir, st->mine);
		if (st->what == FOUND_FINISHED) {
			/* Whole: the SO PIN file is the one it wrote. */
			memcpy(st->so, st->mine, strlen(st->mine) + 1);
			return SG_OK;
		}
	}
	if (softhsm)
		SG_TRY(plan_so_pin(a, st->dir, st->mine, st->so));
	st->began = true;
	if (st->what == FOUND_REMNANT)
		SG_TRY(remove_remnant(st->dir, st->mine));
	if (!exists) {
		SG_ENSURE(mkdir(st->dir, 0700) == 0, SG_EINVAL, "cannot create %s: %s", st->dir, strerror(errno));
		st->created = true;
		SG_TRY(lock_dir(st));
		char parent[PATH_MAX];
		folder_of(st->dir, parent);
		SG_TRY(sg_file_sync_dir(parent));
	}
	return write_record(st->dir, st->so);
}

int sg_init_ca(const sg_init_options *o, sg_init_result *out)
{
	SG_TRY(sg_init_check_options(o));
	plan a = plan_of(o);
	setup *st SG_AUTOFREE = calloc(1, sizeof(*st)); /* 4 * PATH_MAX: not for the stack */
	SG_ENSURE(st, SG_EINTERNAL, "out of memory");
	st->lock = -1;
	int rc = prepare(&a, !a.hsm_module, st);
	bool so_written = false;
	if (rc == SG_OK && st->what != FOUND_FINISHED)
		rc = run_init(&a, st->dir, a.hsm_module ? NULL : st->so, &so_written);
	if (rc < 0 && st->began && st->lock >= 0) {
		/* Leave the folder as we found it: absent, or empty (a remnant's
		 * files are gone either way). Only once it is ours and locked:
		 * before, nothing was made, and it may be someone else's. */
		sg_error e;
		sg_error_save(&e);
		if (so_written)
			unlink(st->so);
		(void)empty_folder(st->dir);
		if (st->created)
			rmdir(st->dir);
		sg_error_restore(&e);
	}
	if (rc == SG_OK)
		rc = end_record(st->dir, st->so);
	if (rc == SG_OK && st->what == FOUND_FINISHED)
		sg_log(SG_LOG_WARN, "an interrupted init had made this CA whole; its record removed",
		       SG_F_STR("dir", st->dir), SG_F_END);
	if (st->lock >= 0)
		close(st->lock); /* releases the lock */
	if (rc < 0)
		return rc;
	if (out) {
		/* Same sizes: nothing is cut. */
		memcpy(out->dir, st->dir, strlen(st->dir) + 1);
		memcpy(out->config, st->config, strlen(st->config) + 1);
		memcpy(out->so_pin_file, st->so, strlen(st->so) + 1);
		out->resumed = st->what == FOUND_REMNANT ? 1 : st->what == FOUND_FINISHED ? 2 : 0;
	}
	return SG_OK;
}
