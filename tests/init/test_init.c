/*
 * sg_init: the embedded default CA of a state folder (sg_init_default_dir)
 * and the library form of signetctl init (sg_init_ca), on real SoftHSM2
 * tokens. What signetd's --init-dir relies on: a first start makes a CA
 * that really signs (opened through sg_appliance as signetd opens it, and
 * a certificate it issues verified by OpenSSL); a restart changes nothing;
 * two processes starting at once make one CA; the remnant of a killed
 * first start is replaced, someone else's folder is refused untouched; a
 * missing or unwritable state folder is a clear error.
 *
 * sg_init_ca killed mid-way (its record, SG_INIT_PARTIAL_NAME): a rerun
 * removes the remnant and the SO PIN file it recorded, or finishes a CA
 * that was whole; someone else's files are refused; a second init on the
 * same folder is refused while the first runs. test_init_crash.py kills
 * the real programs at every step; these are the states it finds, made by
 * hand so that each is checked exactly.
 *
 * signetctl init's own behaviour (flags, refusals, cleanup, the SO PIN)
 * is tested end to end by tests/ctl/test_signetctl.sh on the same code.
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "sg_appliance.h"
#include "sg_ca.h"
#include "sg_init.h"
#include "sg_opt.h"
#include "sg_test.h"
#include "signer/openssl_fixture.h"

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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ID "spiffe://cluster.local/ns/default/sa/default"

/* ---- helpers -------------------------------------------------------- */

/* A new folder in the one the environment variable names (/tmp when it is
 * unset or empty). */
static char *new_state_in(char *buf, size_t cap, const char *var)
{
	const char *tmp = getenv(var);
	snprintf(buf, cap, "%s/initXXXXXX", tmp && *tmp ? tmp : "/tmp");
	return mkdtemp(buf);
}

static char *new_state(char *buf, size_t cap)
{
	return new_state_in(buf, cap, "SIGNET_TEST_TMP");
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static void path_of(char *out, size_t cap, const char *dir, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = calloc(1, 1 << 16);
	if (buf)
		(void)fread(buf, 1, (1 << 16) - 1, f);
	fclose(f);
	return buf;
}

/* A fingerprint of every name, type, inode, size, mode, mtime and ctime
 * under a folder (ctime moves on any write, chmod or rename). */
static unsigned long long fp_acc;
static int fp_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	unsigned long long h = fp_acc ^ 1469598103934665603ull;
	for (const char *p = path; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	unsigned long long v[] = {(unsigned long long)st->st_ino, (unsigned long long)st->st_size,
				  (unsigned long long)st->st_mode, (unsigned long long)st->st_mtim.tv_sec,
				  (unsigned long long)st->st_mtim.tv_nsec, (unsigned long long)st->st_ctim.tv_sec,
				  (unsigned long long)st->st_ctim.tv_nsec};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		h = (h ^ v[i]) * 1099511628211ull;
	fp_acc += h; /* order-independent */
	return 0;
}

static unsigned long long fingerprint(const char *dir)
{
	fp_acc = 0;
	if (nftw(dir, fp_entry, 16, FTW_PHYS) != 0)
		return 0;
	return fp_acc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_tree(const char *dir)
{
	chmod(dir, 0700);
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

typedef struct conf_args {
	sg_settings s;
} conf_args;
static const sg_opt conf_opts[] = {SG_SETTINGS_ROWS(conf_args, s, "warn")};
#define N_CONF_OPTS (sizeof(conf_opts) / sizeof(conf_opts[0]))

/* Opens the configuration as signetd does; NULL (a failed check) when it
 * does not open. The caller frees the appliance, then a's options. */
static sg_appliance *open_conf(const char *conf, conf_args *a)
{
	char *argv[] = {"--config", (char *)conf};
	char *pos[2];
	sg_opt_result res = {.argv = pos};
	SG_CHECK_OK(sg_opt_parse(conf_opts, N_CONF_OPTS, a, 2, argv, &res));
	sg_appliance *app = NULL;
	SG_CHECK_OK(sg_appliance_open(&app, &a->s));
	return app;
}

/* Opens the configuration as signetd does, issues one certificate through
 * the pool and has OpenSSL verify it against the configured root. */
static void check_signs(const char *conf)
{
	conf_args a = {0};
	sg_appliance *app = open_conf(conf, &a);
	if (app) {
		sg_hsm_stats st;
		sg_hsm_stats_get(sg_appliance_hsm(app), &st);
		SG_CHECK(st.state == SG_HSM_OK);
		size_t len;
		csr_opts co = {.alg = "EC", .param = "P-256", .san = "critical,URI:" ID};
		char *csr = make_csr(&co, &len);
		sg_issue_request req = {.csr = (const uint8_t *)csr, .csr_len = len, .profile = SG_PROFILE_ISTIO,
					.identity = ID, .ttl = 3600, .path_len = -1};
		sg_issue_result r = {0};
		SG_CHECK_OK(sg_pool_issue(sg_appliance_pool(app), &req, &r));
		X509 *leaf = verify_chain(&r, a.s.root_cert);
		SG_CHECK(leaf != NULL);
		X509_free(leaf);
		SG_CHECK(strcmp(r.identity, ID) == 0);
		sg_issue_result_clear(&r);
		free(csr);
	}
	sg_appliance_free(app);
	sg_opt_free(conf_opts, N_CONF_OPTS, &a);
}

/* ---- tests ---------------------------------------------------------- */

/* First start: STATE/ca made as `signetctl init --dir STATE/ca --so-pin-file
 * STATE/so-pin` makes it, and it signs. Second start: the same path back,
 * and not one file under STATE/ca (the token store among them) touched. */
static void t_first_and_second_start(void)
{
	char state[512], real[PATH_MAX], want[PATH_MAX + 32], p[PATH_MAX + 32];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	char conf[PATH_MAX];
	SG_CHECK_OK(sg_init_default_dir(state, conf, sizeof(conf)));
	SG_CHECK(realpath(state, real) != NULL);
	snprintf(want, sizeof(want), "%s/ca/signet.conf", real);
	SG_CHECK(strcmp(conf, want) == 0);

	struct stat st;
	path_of(p, sizeof(p), state, "so-pin");
	SG_CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0400 && st.st_size == 32);
	path_of(p, sizeof(p), state, "ca");
	SG_CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0700);
	path_of(p, sizeof(p), state, "ca/pin");
	SG_CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), state, "ca/so-pin");
	SG_CHECK(!exists(p));
	char *text = slurp(conf);
	SG_CHECK(text && strstr(text, "written by signetd --init-dir") && strstr(text, "softhsm2-conf = softhsm2.conf") &&
		 strstr(text, "pkcs11:token=" SG_INIT_DEFAULT_TOKEN_LABEL) && !strstr(text, "so-pin"));
	free(text);
	check_signs(conf);

	path_of(p, sizeof(p), state, "ca");
	unsigned long long before = fingerprint(p);
	SG_CHECK(before != 0);
	char again[PATH_MAX];
	SG_CHECK_OK(sg_init_default_dir(state, again, sizeof(again)));
	SG_CHECK(strcmp(again, conf) == 0);
	SG_CHECK(fingerprint(p) == before);
	/* A relative spelling of STATE finds the same CA. */
	char cwd[PATH_MAX];
	SG_CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	SG_CHECK(chdir(state) == 0);
	SG_CHECK_OK(sg_init_default_dir(".", again, sizeof(again)));
	SG_CHECK(chdir(cwd) == 0);
	SG_CHECK(strcmp(again, conf) == 0);
	SG_CHECK(fingerprint(p) == before);
	/* No room for the path: an error, not a cut path. */
	char tiny[8];
	SG_CHECK_RC(sg_init_default_dir(state, tiny, sizeof(tiny)), SG_EINVAL);
	check_signs(conf);
	rm_tree(state);
}

/* Two processes (two replicas on one volume) start at once on an empty
 * STATE: one makes the CA, the other waits for it and uses it. */
static void t_two_at_once(void)
{
	char state[512];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	int fds[2][2];
	pid_t pid[2];
	for (int i = 0; i < 2; i++) {
		SG_CHECK(pipe(fds[i]) == 0);
		pid[i] = fork();
		if (pid[i] == 0) {
			char conf[PATH_MAX];
			int rc = sg_init_default_dir(state, conf, sizeof(conf));
			if (rc < 0)
				fprintf(stderr, "child %d: %s\n", i, sg_error_last()->msg);
			else if (write(fds[i][1], conf, strlen(conf)) < 0)
				rc = -1;
			_exit(rc < 0 ? 1 : 0);
		}
		close(fds[i][1]);
	}
	char got[2][PATH_MAX] = {{0}};
	for (int i = 0; i < 2; i++) {
		int status = -1;
		ssize_t n = read(fds[i][0], got[i], sizeof(got[i]) - 1);
		SG_CHECK(n > 0);
		close(fds[i][0]);
		SG_CHECK(waitpid(pid[i], &status, 0) == pid[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	SG_CHECK(strcmp(got[0], got[1]) == 0);
	char p[PATH_MAX + 32];
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(!exists(p));
	/* One token in the store: nobody made a second CA over the first. */
	path_of(p, sizeof(p), state, "ca/tokens");
	int tokens = 0;
	DIR *d = opendir(p);
	for (struct dirent *e; d && (e = readdir(d)) != NULL;)
		tokens += e->d_name[0] != '.';
	if (d)
		closedir(d);
	SG_CHECK(tokens == 1);
	check_signs(got[0]);
	rm_tree(state);
}

/* The remnants a killed first start leaves (STATE/ca.partial recorded):
 * replaced by a new CA. */
static void t_interrupted_first_start(void)
{
	char state[512], p[PATH_MAX + 32], conf[PATH_MAX];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	/* Killed mid-way: a token store, a PIN and an unfinished temporary. */
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca");
	SG_CHECK(mkdir(p, 0700) == 0);
	path_of(p, sizeof(p), state, "ca/tokens");
	SG_CHECK(mkdir(p, 0700) == 0);
	path_of(p, sizeof(p), state, "ca/tokens/0123-abcd");
	SG_CHECK(mkdir(p, 0700) == 0);
	path_of(p, sizeof(p), state, "ca/tokens/0123-abcd/token.object");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca/pin");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca/root-cert.pem.new");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca/jwks.json.tmp.4242");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	SG_CHECK_OK(sg_init_default_dir(state, conf, sizeof(conf)));
	path_of(p, sizeof(p), state, "ca/tokens/0123-abcd");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), state, "ca/root-cert.pem.new");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), state, "so-pin");
	SG_CHECK(exists(p));
	check_signs(conf);

	/* Killed after signet.conf, before the SO PIN: a CA nobody used and
	 * whose token cannot be recovered; made again. */
	path_of(p, sizeof(p), state, "ca/root-cert.pem");
	char *old_root = slurp(p);
	path_of(p, sizeof(p), state, "so-pin");
	SG_CHECK(unlink(p) == 0);
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	SG_CHECK_OK(sg_init_default_dir(state, conf, sizeof(conf)));
	path_of(p, sizeof(p), state, "ca/root-cert.pem");
	char *new_root = slurp(p);
	SG_CHECK(old_root && new_root && strcmp(old_root, new_root) != 0);
	free(old_root);
	free(new_root);
	path_of(p, sizeof(p), state, "so-pin");
	SG_CHECK(exists(p));
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(!exists(p));

	/* Killed after the SO PIN, before the record went: whole, kept. */
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca");
	unsigned long long before = fingerprint(p);
	SG_CHECK_OK(sg_init_default_dir(state, conf, sizeof(conf)));
	SG_CHECK(fingerprint(p) == before);
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(!exists(p));
	check_signs(conf);
	rm_tree(state);
}

/* What no interrupted first start made is refused, and left as it was. */
static void t_refusals(void)
{
	char state[512], p[PATH_MAX + 32], conf[PATH_MAX];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	/* A non-empty STATE/ca without signet.conf and without the record. */
	path_of(p, sizeof(p), state, "ca");
	SG_CHECK(mkdir(p, 0700) == 0);
	path_of(p, sizeof(p), state, "ca/pin");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca");
	unsigned long long before = fingerprint(p);
	SG_CHECK_RC(sg_init_default_dir(state, conf, sizeof(conf)), SG_EINVAL);
	SG_CHECK_MSG("no interrupted first start");
	SG_CHECK(fingerprint(p) == before);
	path_of(p, sizeof(p), state, "so-pin");
	SG_CHECK(!exists(p));

	/* With the record, but holding a name init never writes. */
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca/backup.tar");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca");
	before = fingerprint(p);
	SG_CHECK_RC(sg_init_default_dir(state, conf, sizeof(conf)), SG_EINVAL);
	SG_CHECK_MSG("backup.tar");
	SG_CHECK(fingerprint(p) == before);

	/* With the record, but an SO PIN file that is not this attempt's. */
	path_of(p, sizeof(p), state, "ca/backup.tar");
	SG_CHECK(unlink(p) == 0);
	path_of(p, sizeof(p), state, "so-pin");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0400)) == 0);
	path_of(p, sizeof(p), state, "ca");
	before = fingerprint(p);
	SG_CHECK_RC(sg_init_default_dir(state, conf, sizeof(conf)), SG_EINVAL);
	SG_CHECK_MSG("SO PIN");
	SG_CHECK(fingerprint(p) == before);

	/* STATE/ca is a symlink: never removed through (the target holds only
	 * names init writes, so only the symlink check stands in the way). */
	rm_tree(state);
	SG_CHECK(mkdir(state, 0700) == 0);
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "elsewhere");
	SG_CHECK(mkdir(p, 0700) == 0);
	path_of(p, sizeof(p), state, "elsewhere/pin");
	SG_CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	path_of(p, sizeof(p), state, "ca");
	SG_CHECK(symlink("elsewhere", p) == 0);
	SG_CHECK_RC(sg_init_default_dir(state, conf, sizeof(conf)), SG_EINVAL);
	SG_CHECK_MSG("not a folder");
	SG_CHECK(exists(p));
	path_of(p, sizeof(p), state, "elsewhere/pin");
	SG_CHECK(exists(p));

	/* A missing state folder is not made: a missing volume is no empty one. */
	path_of(p, sizeof(p), state, "missing");
	SG_CHECK_RC(sg_init_default_dir(p, conf, sizeof(conf)), SG_EINVAL);
	SG_CHECK_MSG("cannot use the state folder");
	SG_CHECK(!exists(p));
	/* A file is no state folder. */
	path_of(p, sizeof(p), state, "ca.partial");
	SG_CHECK_RC(sg_init_default_dir(p, conf, sizeof(conf)), SG_EINVAL);
	SG_CHECK_MSG("not a folder");
	SG_CHECK_RC(sg_init_default_dir(NULL, conf, sizeof(conf)), SG_EINVAL);
	rm_tree(state);
}

/* A state folder the process cannot write: a clear error, nothing made.
 * root writes anywhere, so as root the call runs in a child that has
 * become nobody. */
static void t_unwritable(void)
{
	/* In the system's temporary folder, not SIGNET_TEST_TMP: the child
	 * runs as nobody, and the build folder may be one only root can enter
	 * (a checkout under /root). */
	char state[512];
	if (!new_state_in(state, sizeof(state), "TMPDIR")) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	SG_CHECK(chmod(state, 0555) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
			_exit(3);
		if (access(state, X_OK) != 0) {
			fprintf(stderr, "unwritable: uid %u cannot reach %s: set TMPDIR to a folder every user can traverse\n",
				(unsigned)geteuid(), state);
			_exit(4);
		}
		char conf[PATH_MAX];
		int rc = sg_init_default_dir(state, conf, sizeof(conf));
		bool clear = rc == SG_EINVAL && strstr(sg_error_last()->msg, "must be writable");
		if (!clear)
			fprintf(stderr, "unwritable: rc %d: %s\n", rc, sg_error_last()->msg);
		_exit(clear ? 0 : 1);
	}
	int status = -1;
	SG_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char p[PATH_MAX + 32];
	path_of(p, sizeof(p), state, "ca");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), state, "init.lock");
	SG_CHECK(!exists(p));
	rm_tree(state);
}

/* sg_init_ca as a library: the usage checks signetctl reports with exit 2,
 * applied to every caller, and the result's paths. */
static void t_init_ca(void)
{
	sg_init_options o = {0};
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("--dir is required");
	o.dir = "x";
	SG_CHECK_OK(sg_init_check_options(&o));
	o.key_label = "a;id=%01 ok"; /* percent-encoded in the URI */
	SG_CHECK_OK(sg_init_check_options(&o));
	o.key_label = " padded";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("begin or end with a space");
	o.key_label = "padded ";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	o.key_label = "new\nline";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("control characters");
	o.key_label = NULL;
	o.hsm_init_reserved = "configdir='sql:/x'";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("--hsm-init-reserved is for the module given with --hsm-module");
	o.hsm_module = "/m.so";
	o.pin_file = "/p";
	SG_CHECK_OK(sg_init_check_options(&o));
	o.hsm_init_reserved = "two\nlines";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("control characters");
	o.hsm_init_reserved = "trailing ";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	o.hsm_init_reserved = "";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	char longest[SG_INIT_INIT_RESERVED_MAX + 2];
	memset(longest, 'x', sizeof(longest) - 1);
	longest[SG_INIT_INIT_RESERVED_MAX] = 0; /* at the limit */
	o.hsm_init_reserved = longest;
	SG_CHECK_OK(sg_init_check_options(&o));
	longest[SG_INIT_INIT_RESERVED_MAX] = 'x'; /* one past */
	longest[SG_INIT_INIT_RESERVED_MAX + 1] = 0;
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("1 to 1024 bytes");
	o.hsm_init_reserved = NULL;
	o.hsm_module = NULL;
	o.pin_file = NULL;
	o.key_label = "";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	o.key_label = "0123456789012345678901234567890123";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	o.key_label = NULL;
	o.ca_ttl = 60;
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	o.ca_ttl = 0;
	o.key_type = SG_KEY_TYPE_COUNT;
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	o.key_type = SG_KEY_EC_P256;
	o.hsm_module = "/nonexistent.so";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("--pin-file");
	o.pin_file = "pin";
	o.so_pin_file = "so";
	SG_CHECK_RC(sg_init_check_options(&o), SG_EINVAL);
	SG_CHECK_MSG("--so-pin-file");

	char state[512], dir[PATH_MAX + 32], so[PATH_MAX + 32];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	path_of(dir, sizeof(dir), state, "ca");
	path_of(so, sizeof(so), state, "ca.so-pin");
	sg_init_options ok = {.dir = dir, .key_type = SG_KEY_EC_P384, .trust_domain = "example.org"};
	sg_init_result *r = calloc(1, sizeof(*r));
	SG_CHECK(r != NULL);
	if (r) {
		SG_CHECK_OK(sg_init_ca(&ok, r));
		char real[PATH_MAX];
		SG_CHECK(realpath(dir, real) && strcmp(r->dir, real) == 0);
		SG_CHECK(strstr(r->config, "/ca/signet.conf") && exists(r->config));
		SG_CHECK(realpath(so, real) && strcmp(r->so_pin_file, real) == 0);
		char *text = slurp(r->config);
		SG_CHECK(text && strstr(text, "written by signetctl init") && strstr(text, "trust-domain = example.org"));
		free(text);
		/* A second init into the same folder: refused, nothing changed. */
		unsigned long long before = fingerprint(dir);
		SG_CHECK_RC(sg_init_ca(&ok, r), SG_EINVAL);
		SG_CHECK_MSG("not empty");
		SG_CHECK(fingerprint(dir) == before);
		check_signs(r->config);
		free(r);
	}
	rm_tree(state);
}

/* More CAs in the token of a first one, through --hsm-module: the module
 * path recorded as given (a symlink stays a symlink), a key label with
 * spaces and URI delimiters percent-encoded, and the default key label
 * unique per CA; every CA signs afterwards. */
static void t_same_token(void)
{
	char state[512], dir[PATH_MAX + 32], link[PATH_MAX + 32], pin[PATH_MAX + 40];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	path_of(dir, sizeof(dir), state, "ca");
	path_of(link, sizeof(link), state, "module.so");
	path_of(pin, sizeof(pin), dir, "pin");
	SG_CHECK(symlink(SIGNET_SOFTHSM_MODULE, link) == 0);
	sg_init_options first = {.dir = dir};
	sg_init_result *r = calloc(1, sizeof(*r));
	SG_CHECK(r != NULL);
	if (!r)
		return;
	SG_CHECK_OK(sg_init_ca(&first, r));
	char first_conf[PATH_MAX];
	snprintf(first_conf, sizeof(first_conf), "%s", r->config);
	/* The first init pointed SOFTHSM2_CONF at its token store; the next
	 * ones use that store through the module alone. */
	static const char *const labels[] = {"second key; 2/3 ?", NULL, NULL};
	char confs[3][PATH_MAX];
	for (int i = 0; i < 3; i++) {
		char d[1024], name[16];
		snprintf(name, sizeof(name), "ca%d", i + 2);
		path_of(d, sizeof(d), state, name);
		sg_init_options o = {.dir = d, .hsm_module = link, .pin_file = pin, .key_label = labels[i]};
		SG_CHECK_OK(sg_init_ca(&o, r));
		snprintf(confs[i], sizeof(confs[i]), "%s", r->config);
		char *text = slurp(r->config);
		SG_CHECK(text != NULL);
		if (!text)
			continue;
		char want[2 * PATH_MAX];
		snprintf(want, sizeof(want), "hsm-module = %s\n", link);
		SG_CHECK(strstr(text, want) != NULL);
		SG_CHECK(strstr(text, "hsm-token = pkcs11:token=signet-ca\n") != NULL);
		if (labels[i])
			SG_CHECK(strstr(text, "hsm-key = pkcs11:object=second%20key%3B%202%2F3%20%3F;id=%") != NULL);
		else
			SG_CHECK(strstr(text, "hsm-key = pkcs11:object=" SG_INIT_DEFAULT_KEY_LABEL "-") != NULL);
		free(text);
	}
	/* Two CAs with the default label: different labels. */
	char *t3 = slurp(confs[1]), *t4 = slurp(confs[2]);
	SG_CHECK(t3 && t4);
	if (t3 && t4) {
		char *k3 = strstr(t3, "hsm-key = "), *k4 = strstr(t4, "hsm-key = ");
		SG_CHECK(k3 && k4 && strncmp(k3, k4, strcspn(k3, "\n")) != 0);
	}
	free(t3);
	free(t4);
	check_signs(first_conf);
	for (int i = 0; i < 3; i++)
		check_signs(confs[i]);
	free(r);
	rm_tree(state);
}

/* The seconds since the epoch of a certificate's notBefore (which 0) or
 * notAfter (1), read by OpenSSL; -1 when it cannot be read. */
static int64_t cert_time(const char *pem, size_t len, int which)
{
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	BIO_free(b);
	ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
	int day = 0, sec = 0;
	int64_t t = -1;
	if (x && epoch &&
	    ASN1_TIME_diff(&day, &sec, epoch, which ? X509_get0_notAfter(x) : X509_get0_notBefore(x)) == 1)
		t = (int64_t)day * 86400 + sec;
	ASN1_TIME_free(epoch);
	X509_free(x);
	return t;
}

/* A certificate signed under another CA (a rotation's cross-signature)
 * lies within that CA's validity at both ends: under an issuer made this
 * second (an external root, not backdated as signet's are) it starts when
 * the issuer does instead of 5 minutes before, which the lint refused;
 * under an issuer that ends within the TTL it ends with it. Under an old
 * issuer it is backdated as a root is; under one not valid yet, refused. */
static void t_cross_within_issuer(void)
{
	char state[512], dir[PATH_MAX + 32];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	path_of(dir, sizeof(dir), state, "ca");
	sg_init_options o = {.dir = dir};
	sg_init_result *r = calloc(1, sizeof(*r));
	SG_CHECK(r != NULL);
	if (r)
		SG_CHECK_OK(sg_init_ca(&o, r));
	conf_args a = {0};
	sg_appliance *app = r ? open_conf(r->config, &a) : NULL;
	if (app) {
		sg_hsm *hsm = sg_appliance_hsm(app);
		sg_cert_issuer young = *sg_ca_issuer(sg_appliance_ca(app));
		int64_t now = (int64_t)time(NULL);
		young.not_before = now;
		young.not_after = now + 3600;
		char *pem = NULL;
		size_t len = 0;
		SG_CHECK_OK(sg_init_ca_cert(hsm, hsm, &young, "example.org", "cross", 86400, &pem, &len));
		SG_CHECK(pem && cert_time(pem, len, 0) == now);
		SG_CHECK(pem && cert_time(pem, len, 1) == now + 3600);
		free(pem);
		pem = NULL;

		sg_cert_issuer old = young;
		old.not_before = now - 86400;
		old.not_after = now + 10 * 86400;
		int64_t t0 = (int64_t)time(NULL);
		SG_CHECK_OK(sg_init_ca_cert(hsm, hsm, &old, "example.org", "cross", 86400, &pem, &len));
		int64_t t1 = (int64_t)time(NULL), nb = pem ? cert_time(pem, len, 0) : -1;
		SG_CHECK(nb >= t0 - 300 && nb <= t1 + 1 - 300); /* time(2) trails the wall clock by milliseconds */
		SG_CHECK(pem && cert_time(pem, len, 1) - nb == 86400 + 300);
		free(pem);
		pem = NULL;

		sg_cert_issuer early = young; /* dated ahead of this clock: refused, not certified ahead */
		early.not_before = now + 3600;
		early.not_after = now + 7200;
		SG_CHECK_RC(sg_init_ca_cert(hsm, hsm, &early, "example.org", "cross", 86400, &pem, &len), SG_EINVAL);
		SG_CHECK_MSG("the issuing CA is not valid yet");
		SG_CHECK(pem == NULL);
	}
	sg_appliance_free(app);
	sg_opt_free(conf_opts, N_CONF_OPTS, &a);
	free(r);
	rm_tree(state);
}

static void touch(const char *dir, const char *name, const char *text, unsigned mode)
{
	char p[PATH_MAX + 64];
	path_of(p, sizeof(p), dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	SG_CHECK(fd >= 0);
	if (fd >= 0) {
		SG_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
		close(fd);
	}
}

/* A killed sg_init_ca's remnant: the record naming the SO PIN file, which
 * was written, with a temporary of it beside; a token store, the PIN, a
 * temporary inside. The rerun removes them all and makes a new CA. */
static void t_ca_remnant(void)
{
	char state[512], dir[PATH_MAX + 32], so[PATH_MAX + 32], p[PATH_MAX + 64], rec[PATH_MAX + 64];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	char real[PATH_MAX];
	SG_CHECK(realpath(state, real) != NULL);
	path_of(dir, sizeof(dir), real, "ca");
	path_of(so, sizeof(so), real, "ca.so-pin");
	SG_CHECK(mkdir(dir, 0700) == 0);
	snprintf(rec, sizeof(rec), "# killed\nso-pin-file = %s\n", so);
	touch(dir, SG_INIT_PARTIAL_NAME, rec, 0600);
	path_of(p, sizeof(p), dir, "tokens");
	SG_CHECK(mkdir(p, 0700) == 0);
	touch(dir, "tokens/token.object", "x", 0600);
	touch(dir, "pin", "0123", 0600);
	touch(dir, "signet.conf.new", "half", 0644);
	touch(real, "ca.so-pin", "old-so-pin", 0400);
	touch(real, "ca.so-pin.new", "old", 0400);
	sg_init_options o = {.dir = dir};
	sg_init_result *r = calloc(1, sizeof(*r));
	SG_CHECK(r != NULL);
	if (!r)
		return;
	SG_CHECK_OK(sg_init_ca(&o, r));
	SG_CHECK(r->resumed == 1);
	path_of(p, sizeof(p), dir, SG_INIT_PARTIAL_NAME);
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), dir, "signet.conf.new");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), dir, "tokens/token.object");
	SG_CHECK(!exists(p));
	path_of(p, sizeof(p), real, "ca.so-pin.new");
	SG_CHECK(!exists(p));
	char *pin = slurp(so);
	SG_CHECK(pin && strlen(pin) == 32); /* the new token's, not the old file */
	free(pin);
	check_signs(r->config);

	/* Killed after signet.conf, before the record went: whole, and the
	 * rerun only removes the record. */
	touch(dir, SG_INIT_PARTIAL_NAME, rec, 0600);
	path_of(p, sizeof(p), dir, "root-cert.pem");
	char *root = slurp(p);
	SG_CHECK_OK(sg_init_ca(&o, r));
	SG_CHECK(r->resumed == 2 && strcmp(r->so_pin_file, so) == 0);
	char *again = slurp(p);
	SG_CHECK(root && again && strcmp(root, again) == 0);
	free(root);
	free(again);
	path_of(p, sizeof(p), dir, SG_INIT_PARTIAL_NAME);
	SG_CHECK(!exists(p));
	/* Without the record, a whole CA is refused, saying how to use it. */
	SG_CHECK_RC(sg_init_ca(&o, r), SG_EINVAL);
	SG_CHECK_MSG("already holds a CA");
	SG_CHECK_MSG("--config");
	check_signs(r->config);
	free(r);
	rm_tree(state);
}

/* What no killed init leaves, and an init under way, are refused with
 * nothing touched. */
static void t_ca_refusals(void)
{
	char state[512], dir[PATH_MAX + 32], p[PATH_MAX + 64];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	path_of(dir, sizeof(dir), state, "ca");
	sg_init_options o = {.dir = dir};
	/* A leftover SO PIN temporary (someone else's): refused before the
	 * folder is made, not after the token is. */
	touch(state, "ca.so-pin.new", "x", 0400);
	SG_CHECK_RC(sg_init_ca(&o, NULL), SG_EINVAL);
	SG_CHECK_MSG("ca.so-pin.new exists");
	SG_CHECK(!exists(dir));
	path_of(p, sizeof(p), state, "ca.so-pin.new");
	SG_CHECK(unlink(p) == 0);
	/* Someone else's folder. */
	SG_CHECK(mkdir(dir, 0700) == 0);
	touch(dir, "notes.txt", "mine", 0600);
	unsigned long long before = fingerprint(dir);
	SG_CHECK_RC(sg_init_ca(&o, NULL), SG_EINVAL);
	SG_CHECK_MSG("choose another --dir");
	SG_CHECK(fingerprint(dir) == before);
	/* A record, and a name init never writes: refused, untouched. */
	touch(dir, SG_INIT_PARTIAL_NAME, "", 0600);
	touch(dir, "pin", "0123", 0600);
	before = fingerprint(dir);
	SG_CHECK_RC(sg_init_ca(&o, NULL), SG_EINVAL);
	SG_CHECK_MSG("notes.txt");
	SG_CHECK(fingerprint(dir) == before);
	/* Another init holds the folder: busy, untouched (a remnant it is
	 * still making must not be taken for a dead one's). */
	path_of(p, sizeof(p), dir, "notes.txt");
	SG_CHECK(unlink(p) == 0);
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	SG_CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
	before = fingerprint(dir);
	SG_CHECK_RC(sg_init_ca(&o, NULL), SG_EBUSY);
	SG_CHECK_MSG("another init");
	SG_CHECK(fingerprint(dir) == before);
	close(fd);
	/* Released: the remnant (record, PIN) is removed and a CA made. */
	SG_CHECK_OK(sg_init_ca(&o, NULL));
	path_of(p, sizeof(p), dir, "signet.conf");
	check_signs(p);
	rm_tree(state);
}

/* signetd --init-dir killed while sg_init_ca wrote STATE/so-pin: before,
 * every later start failed on STATE/so-pin.new ("File exists"), or refused
 * STATE/so-pin as someone else's. sg_init_ca's record names it: the next
 * start removes both and makes the CA. */
static void t_interrupted_at_so_pin(void)
{
	char state[512], real[PATH_MAX], p[PATH_MAX + 64], conf[PATH_MAX], rec[PATH_MAX + 64];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	SG_CHECK(realpath(state, real) != NULL);
	for (int written = 0; written < 2; written++) {
		touch(real, "ca.partial", "", 0600);
		path_of(p, sizeof(p), real, "ca");
		SG_CHECK(mkdir(p, 0700) == 0);
		snprintf(rec, sizeof(rec), "so-pin-file = %s/so-pin\n", real);
		touch(p, SG_INIT_PARTIAL_NAME, rec, 0600);
		touch(p, "pin", "0123", 0600);
		touch(p, "root-cert.pem", "x", 0644);
		touch(real, written ? "so-pin" : "so-pin.new", "0123", 0400);
		SG_CHECK_OK(sg_init_default_dir(state, conf, sizeof(conf)));
		path_of(p, sizeof(p), real, "so-pin.new");
		SG_CHECK(!exists(p));
		char *pin = slurp(conf);
		SG_CHECK(pin != NULL);
		free(pin);
		path_of(p, sizeof(p), real, "so-pin");
		pin = slurp(p);
		SG_CHECK(pin && strlen(pin) == 32);
		free(pin);
		path_of(p, sizeof(p), real, "ca.partial");
		SG_CHECK(!exists(p));
		path_of(p, sizeof(p), real, "ca/" SG_INIT_PARTIAL_NAME);
		SG_CHECK(!exists(p));
		check_signs(conf);
		rm_tree(state);
		SG_CHECK(mkdir(state, 0700) == 0);
	}
	rm_tree(state);
}

/* SoftHSM2 empties token.object for a moment at every login; a process
 * killed then lost the CA. sg_init_softhsm_repair puts back init's copy
 * (test_init_crash.py kills the real programs there). */
static void t_softhsm_repair(void)
{
	char state[512], dir[PATH_MAX + 32], p[PATH_MAX + 64], obj[PATH_MAX + 400];
	if (!new_state(state, sizeof(state))) {
		SG_CHECK(!"mkdtemp");
		return;
	}
	path_of(dir, sizeof(dir), state, "ca");
	sg_init_options o = {.dir = dir};
	SG_CHECK_OK(sg_init_ca(&o, NULL));
	path_of(p, sizeof(p), dir, "tokens");
	DIR *d = opendir(p);
	struct dirent *e = NULL;
	while (d && (e = readdir(d)) != NULL && e->d_name[0] == '.')
		;
	SG_CHECK(e != NULL);
	if (!e) {
		if (d)
			closedir(d);
		return;
	}
	snprintf(obj, sizeof(obj), "%s/%s/token.object", p, e->d_name);
	closedir(d);
	struct stat st;
	SG_CHECK(stat(obj, &st) == 0 && st.st_size > 0);
	off_t size = st.st_size;
	SG_CHECK(truncate(obj, 0) == 0);
	path_of(p, sizeof(p), dir, "softhsm2.conf");
	SG_CHECK_OK(sg_init_softhsm_repair(p));
	SG_CHECK(stat(obj, &st) == 0 && st.st_size == size);
	path_of(p, sizeof(p), dir, "signet.conf");
	check_signs(p);
	/* Nothing to do: a whole token, no file, no conf. */
	path_of(p, sizeof(p), dir, "softhsm2.conf");
	SG_CHECK_OK(sg_init_softhsm_repair(p));
	SG_CHECK_OK(sg_init_softhsm_repair(NULL));
	path_of(p, sizeof(p), dir, "missing.conf");
	SG_CHECK_OK(sg_init_softhsm_repair(p));
	rm_tree(state);
}

SG_TEST_MAIN(SG_TEST(t_two_at_once), SG_TEST(t_unwritable), SG_TEST(t_first_and_second_start),
	     SG_TEST(t_interrupted_first_start), SG_TEST(t_refusals), SG_TEST(t_init_ca), SG_TEST(t_same_token),
	     SG_TEST(t_cross_within_issuer), SG_TEST(t_ca_remnant), SG_TEST(t_ca_refusals),
	     SG_TEST(t_interrupted_at_so_pin), SG_TEST(t_softhsm_repair))
