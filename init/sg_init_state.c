/*
 * sg_init_state: signetd's embedded default CA, made in a state folder on
 * first start (sg_init_default_dir; the contract is in sg_init.h).
 *
 * A container whose entry point is signetd has no shell to run `signetctl
 * init` in, so signetd does the same thing itself: STATE/ca is made by
 * sg_init_ca exactly as `signetctl init --dir STATE/ca --so-pin-file
 * STATE/so-pin` makes it, and every later start finds STATE/ca/signet.conf
 * and goes straight on.
 *
 * What can go wrong on a first start, and the answer to each:
 *
 *   init fails          sg_init_ca removes what it made; the next start
 *                       tries again from nothing.
 *   the process dies    (OOM kill, node loss, a second SIGKILL) half-way:
 *   mid-init            nobody cleans up. STATE/ca.partial, written and
 *                       fsync'ed before init starts and removed only after
 *                       signet.conf and the SO PIN are both durable, says
 *                       that STATE/ca is such a remnant. Its key was never
 *                       used (no signer runs before this returns), so it is
 *                       removed and made again rather than blocking every
 *                       later start. Without the record, a non-empty
 *                       STATE/ca lacking signet.conf was put there by
 *                       someone else, and is refused untouched.
 *   two processes at    (two replicas on one shared volume) an fcntl lock
 *   once                on STATE/init.lock: the second waits, then finds
 *                       the first one's signet.conf. Without the lock the
 *                       second could take the first one's half-made folder
 *                       for a remnant and remove it.
 *
 * signet.conf is the commit point: sg_init_ca writes it (by rename) after
 * the token, key, root, token issuer and SO PIN file. sg_init_ca keeps a
 * record of its own inside STATE/ca (SG_INIT_PARTIAL_NAME, naming the SO
 * PIN file it writes); once that exists, clearing a remnant is left to
 * sg_init_ca, which knows STATE/so-pin for its own where this file cannot.
 * Removal of a remnant is bounded: STATE/ca must be a plain folder holding
 * only names sg_init_ca writes (and their temporaries), walked without
 * following symlinks or crossing mounts.
 */
#define _XOPEN_SOURCE 700 /* nftw, realpath */
#include "sg_init.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_file.h"
#include "sg_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long a second process waits for the first one's init: SoftHSM2 makes
 * an RSA-4096 key in well under a minute; the defaults make a P-256 one. */
#define LOCK_WAIT_MS 120000u
#define LOCK_POLL_MS 100u

/* The paths of one state folder, each below PATH_MAX. */
typedef struct state_paths {
	char state[PATH_MAX];   /* absolute, symlink-free */
	char ca[PATH_MAX];      /* STATE/ca: the CA folder */
	char config[PATH_MAX];  /* STATE/ca/signet.conf */
	char so_pin[PATH_MAX];  /* STATE/so-pin */
	char partial[PATH_MAX]; /* STATE/ca.partial: an attempt is under way or was interrupted */
	char lock[PATH_MAX];    /* STATE/init.lock */
} state_paths;

static int path_in(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name);
	SG_ENSURE(n > 0 && n < PATH_MAX, SG_EINVAL, "state folder path too long: %s", dir);
	return SG_OK;
}

static int resolve(state_paths *p, const char *state_dir)
{
	SG_ENSURE(realpath(state_dir, p->state), SG_EINVAL, "cannot use the state folder %s: %s", state_dir,
		  strerror(errno));
	struct stat st;
	SG_ENSURE(stat(p->state, &st) == 0 && S_ISDIR(st.st_mode), SG_EINVAL, "the state folder %s is not a folder",
		  p->state);
	SG_TRY(path_in(p->ca, p->state, "ca"));
	SG_TRY(path_in(p->config, p->ca, "signet.conf"));
	SG_TRY(path_in(p->so_pin, p->state, "so-pin"));
	SG_TRY(path_in(p->partial, p->state, "ca.partial"));
	return path_in(p->lock, p->state, "init.lock");
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* Takes the state folder's lock, waiting for another process's init for
 * at most LOCK_WAIT_MS. *fd holds it until closed. */
static int lock_state(const state_paths *p, int *fd)
{
	*fd = open(p->lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	SG_ENSURE(*fd >= 0, SG_EINVAL, "cannot create the lock %s: %s", p->lock, strerror(errno));
	struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	uint64_t until = sg_now_ns() + (uint64_t)LOCK_WAIT_MS * 1000000u;
	while (fcntl(*fd, F_SETLK, &l) != 0) {
		int e = errno;
		if ((e != EACCES && e != EAGAIN) || sg_now_ns() > until) {
			close(*fd);
			*fd = -1;
			SG_ENSURE(e != EACCES && e != EAGAIN, SG_EBUSY,
				  "another process has been making the CA in %s for %u s; giving up", p->state,
				  LOCK_WAIT_MS / 1000);
			SG_BAIL(SG_EINVAL, "cannot lock %s: %s", p->lock, strerror(e));
		}
		sg_sleep_ms(LOCK_POLL_MS);
	}
	return SG_OK;
}

/* Checks that STATE/ca, if it exists, is a plain folder holding only what
 * sg_init_ca writes; *present says whether it exists. */
static int check_remnant(const state_paths *p, bool *present)
{
	struct stat st;
	*present = false;
	if (lstat(p->ca, &st) != 0) {
		SG_ENSURE(errno == ENOENT, SG_EINVAL, "cannot use %s: %s", p->ca, strerror(errno));
		return SG_OK;
	}
	SG_ENSURE(S_ISDIR(st.st_mode), SG_EINVAL, "%s is not a folder (a symlink?); refusing to remove it", p->ca);
	*present = true;
	DIR *d = opendir(p->ca);
	SG_ENSURE(d, SG_EINVAL, "cannot read %s: %s", p->ca, strerror(errno));
	struct dirent *e;
	int rc = SG_OK;
	while (rc == SG_OK && (e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && !sg_init_made_name(e->d_name))
			rc = sg_error_set(SG_EINVAL,
					  "%s holds %s, which an interrupted first start cannot have made; refusing to "
					  "remove it",
					  p->ca, e->d_name);
	closedir(d);
	return rc;
}

static int remove_any(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	/* FTW_NS/FTW_DNR: unreadable; a failed removal of its folder reports it. */
	return flag == FTW_NS || flag == FTW_DNR ? 0 : remove(path);
}

/* Removes an interrupted attempt's STATE/ca, after check_remnant. */
static int remove_remnant(const state_paths *p)
{
	bool present;
	SG_TRY(check_remnant(p, &present));
	if (!present)
		return SG_OK;
	sg_log(SG_LOG_WARN, "removing the remnant of an interrupted first start", SG_F_STR("dir", p->ca), SG_F_END);
	int rc = nftw(p->ca, remove_any, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	SG_ENSURE(rc == 0 && !exists(p->ca), SG_EINVAL, "cannot remove %s, the remnant of an interrupted first start: %s",
		  p->ca, strerror(errno));
	return sg_file_sync_dir(p->state);
}

/* Writes the record that an attempt is under way, durably, before STATE/ca
 * is touched. */
static int record_attempt(const state_paths *p)
{
	static const char text[] = "signetd --init-dir is making ca/ here; if this file outlives it, ca/ is a "
				   "remnant the next start removes.\n";
	int fd = open(p->partial, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	SG_ENSURE(fd >= 0, SG_EINVAL, "cannot create %s: %s", p->partial, strerror(errno));
	ssize_t n = write(fd, text, sizeof(text) - 1);
	if (n >= 0 && n != (ssize_t)(sizeof(text) - 1))
		errno = ENOSPC; /* a short write to a regular file: the disk is full */
	bool ok = n == (ssize_t)(sizeof(text) - 1) && fsync(fd) == 0;
	int e = errno;
	if (close(fd) != 0 && ok) {
		ok = false;
		e = errno;
	}
	SG_ENSURE(ok, SG_EINVAL, "cannot write %s: %s", p->partial, strerror(e));
	return sg_file_sync_dir(p->state);
}

/* The attempt is over (whole, or cleaned up by sg_init_ca): the record goes.
 * For a whole CA, what init wrote is made durable first, so that no crash
 * can leave a STATE/ca without its signet.conf and without the record. */
static int end_attempt(const state_paths *p, bool whole)
{
	if (whole) {
		/* sg_init_ca's own record, if it was killed before removing it. */
		char rec[PATH_MAX + 32];
		snprintf(rec, sizeof(rec), "%s/%s", p->ca, SG_INIT_PARTIAL_NAME);
		SG_ENSURE(unlink(rec) == 0 || errno == ENOENT, SG_EINVAL, "cannot remove %s: %s", rec,
			  strerror(errno));
		SG_TRY(sg_file_sync_dir(p->ca));
		SG_TRY(sg_file_sync_dir(p->state));
	}
	SG_ENSURE(unlink(p->partial) == 0 || errno == ENOENT, SG_EINVAL, "cannot remove %s: %s", p->partial,
		  strerror(errno));
	return sg_file_sync_dir(p->state);
}

/* A folder that does not exist or holds nothing. */
static bool absent_or_empty(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT;
	struct dirent *e;
	bool empty = true;
	while (empty && (e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = false;
	closedir(d);
	return empty;
}

/* STATE/ca is a plain folder holding sg_init_ca's record of an attempt. */
static bool has_record(const state_paths *p)
{
	char rec[PATH_MAX + 32];
	struct stat st;
	snprintf(rec, sizeof(rec), "%s/%s", p->ca, SG_INIT_PARTIAL_NAME);
	return lstat(p->ca, &st) == 0 && S_ISDIR(st.st_mode) && exists(rec);
}

/* Under the lock: use what is there, clear a remnant, or make the CA. */
static int settle(const state_paths *p)
{
	bool partial = exists(p->partial), conf = exists(p->config), so = exists(p->so_pin);
	if (conf && !partial)
		return SG_OK; /* another process made it while we waited */
	if (partial && conf && so) {
		/* Whole: the last attempt died after signet.conf (written after the
		 * SO PIN file), before the record went. */
		return end_attempt(p, true);
	}
	/* sg_init_ca got as far as its own record: it clears its remnant
	 * itself, the SO PIN file it wrote (named in the record) included,
	 * which the check below would take for someone else's. */
	bool init_clears = partial && !conf && has_record(p);
	if (partial && !init_clears) {
		/* Refuse before removing anything: sg_init_ca would refuse this SO
		 * PIN file anyway, and it is not ours to remove. */
		SG_ENSURE(!so, SG_EINVAL,
			  "%s exists but %s does not hold a whole CA: the SO PIN file may belong to another token; "
			  "move it away to let signetd make a new CA",
			  p->so_pin, p->ca);
		SG_TRY(remove_remnant(p));
	} else if (!partial) {
		SG_ENSURE(absent_or_empty(p->ca), SG_EINVAL,
			  "%s is not empty but has no signet.conf, and no interrupted first start of signetd made it; "
			  "refusing to touch it (remove it to have a new CA made, or give signetd a --config)",
			  p->ca);
	}
	SG_TRY(record_attempt(p));
	sg_init_options o = {.dir = p->ca, .so_pin_file = p->so_pin, .program = "signetd --init-dir"};
	int rc = sg_init_ca(&o, NULL);
	if (rc < 0) {
		/* sg_init_ca removed what it made; the record stays only if it
		 * could not (the next start removes the rest). */
		sg_error e;
		sg_error_save(&e);
		if (absent_or_empty(p->ca) && end_attempt(p, false) < 0)
			sg_log(SG_LOG_WARN, "cannot remove the record of a failed first start",
			       SG_F_STR("path", p->partial), SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		sg_error_restore(&e);
		return rc;
	}
	SG_TRY(end_attempt(p, true));
	sg_log(SG_LOG_INFO, "embedded default CA created", SG_F_STR("config", p->config),
	       SG_F_STR("so_pin_file", p->so_pin), SG_F_STR("note", "signetd never needs the SO PIN: keep it offline"),
	       SG_F_END);
	return SG_OK;
}

int sg_init_default_dir(const char *state_dir, char *conf, size_t cap)
{
	SG_ENSURE(state_dir && *state_dir && conf, SG_EINVAL, "no state folder given");
	state_paths *p SG_AUTOFREE = malloc(sizeof(*p)); /* 6 * PATH_MAX: not for the stack */
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	SG_TRY(resolve(p, state_dir));
	SG_ENSURE(strlen(p->config) < cap, SG_EINVAL, "no room for the configuration's path %s", p->config);

	/* The common case, on every start after the first: no lock, no write,
	 * so a read-only STATE is fine. signet.conf without the record means
	 * an attempt finished (the record is made before init starts and goes
	 * last). */
	if (!exists(p->config) || exists(p->partial)) {
		SG_ENSURE(access(p->state, W_OK | X_OK) == 0, SG_EINVAL,
			  "cannot make the embedded default CA in %s: %s (the state folder must be writable on first "
			  "start)",
			  p->state, strerror(errno));
		int fd = -1;
		SG_TRY(lock_state(p, &fd));
		int rc = settle(p);
		close(fd); /* releases the lock */
		if (rc < 0)
			return rc;
	}
	/* Every start: the token store may hold a token.object emptied by a
	 * start killed while logging in (sg_init_softhsm_repair). */
	char hsm_conf[PATH_MAX + 32];
	snprintf(hsm_conf, sizeof(hsm_conf), "%s/softhsm2.conf", p->ca);
	SG_TRY(sg_init_softhsm_repair(hsm_conf));
	memcpy(conf, p->config, strlen(p->config) + 1);
	return SG_OK;
}
