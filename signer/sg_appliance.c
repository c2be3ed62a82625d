/*
 * From settings to a running signer. Start-up order matters: the PIN is read
 * and wiped within sg_appliance_open; the HSM is opened before the CA is
 * loaded so that the CA certificate can be checked against the key the HSM
 * actually holds (fail closed on a mismatch); the pool opens its sessions one
 * at a time.
 *
 * A reload (sg_appliance_reload) makes the same checks on the new key and
 * files before the pool is told; what it replaces is retired, not freed,
 * because answers in flight borrow the old CA's chain and a worker may
 * hold an old session until its next request. Rotations are rare, so the
 * retired list is small and bounded.
 */
#include "sg_appliance.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sg_log_level_names[] = {"debug", "info", "warn", "error", NULL};
const char *const sg_log_format_names[] = {"text", "json", NULL};

typedef struct retired {
	sg_hsm *hsm; /* NULL when a reload kept the HSM handle */
	sg_ca *ca;
} retired;

struct sg_appliance {
	_Atomic(sg_hsm *) hsm;
	_Atomic(sg_ca *) ca;
	sg_pool *pool;
	char *hsm_token, *hsm_key; /* what hsm was opened with, to tell a new key */
	retired old[SG_APPLIANCE_RELOADS];
	size_t nold;
};

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Opens the HSM key of s (the PIN read and wiped here). */
static int open_hsm(const sg_settings *s, sg_hsm **out)
{
	SG_ENSURE(s->hsm_token && s->hsm_key, SG_EINVAL, "hsm-token and hsm-key are required (see signetctl init)");
	SG_ENSURE(s->ca_cert && s->root_cert, SG_EINVAL, "ca-cert and root-cert are required (see signetctl init)");
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_settings_pin(s, &pin));
	sg_hsm_options ho;
	sg_settings_hsm_options(s, pin, &ho);
	return sg_hsm_open(out, &ho);
}

static int load_ca(const sg_settings *s, sg_hsm *hsm, sg_ca **out)
{
	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	SG_TRY(sg_hsm_public_key(hsm, &spki, &spki_len));
	sg_ca_files files = {s->ca_cert, s->ca_chain, s->root_cert};
	return sg_ca_load(out, &files, spki, spki_len, sg_wall_seconds());
}

/* Whether two CAs hand out the same chain and bundle. */
static bool same_chain(const sg_ca *x, const sg_ca *y)
{
	const char *const *ex, *const *ey;
	const size_t *lx, *ly;
	size_t nx, ny;
	sg_ca_chain(x, &ex, &lx, &nx);
	sg_ca_chain(y, &ey, &ly, &ny);
	if (nx != ny)
		return false;
	for (size_t i = 0; i < nx; i++)
		if (lx[i] != ly[i] || memcmp(ex[i], ey[i], lx[i]) != 0)
			return false;
	return true;
}

void sg_settings_apply_log(const sg_settings *s)
{
	sg_log_configure((sg_log_level)s->log_level, (sg_log_format)s->log_format);
	sg_log_mend(); /* a record torn by a kill of the last process stays on its own line */
}

int sg_settings_check(const sg_settings *s)
{
	const char *n = s->pin_credential;
	if (!n)
		return SG_OK;
	/* The name is joined to a directory: one path component, so it cannot
	 * reach outside $CREDENTIALS_DIRECTORY. */
	SG_ENSURE(*n, SG_EINVAL, "pin-credential: the credential name is empty");
	SG_ENSURE(strlen(n) <= SG_SETTINGS_CREDENTIAL_MAX, SG_EINVAL,
	          "pin-credential: a credential name has at most %d bytes", SG_SETTINGS_CREDENTIAL_MAX);
	SG_ENSURE(!strchr(n, '/') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0, SG_EINVAL,
	          "pin-credential: \"%s\" is not a credential name (one file name: no '/', not . or ..)", n);
	return SG_OK;
}

/* $CREDENTIALS_DIRECTORY/NAME. systemd sets the variable (an absolute path)
 * for a unit with LoadCredential= or SetCredential=; anywhere else it is
 * absent, and the error says where it comes from rather than "no such
 * file". */
static int credential_pin(const sg_settings *s, sg_secret **out)
{
	SG_TRY(sg_settings_check(s));
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	SG_ENSURE(dir && *dir, SG_EINVAL,
	          "pin-credential %s: CREDENTIALS_DIRECTORY is not set; LoadCredential= in the unit provides it",
	          s->pin_credential);
	SG_ENSURE(dir[0] == '/', SG_EINVAL, "pin-credential %s: CREDENTIALS_DIRECTORY is not an absolute path",
	          s->pin_credential);
	char path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/%s", dir, s->pin_credential);
	SG_ENSURE(n > 0 && (size_t)n < sizeof(path), SG_EINVAL, "pin-credential %s: the path is too long",
	          s->pin_credential);
	int rc = sg_secret_from_file(out, path);
	if (rc < 0) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(rc, "pin-credential %s: %s", s->pin_credential, why);
	}
	return SG_OK;
}

/* The credential first: a unit passes --pin-credential while the config
 * file that `signetctl init` wrote still says pin-file, and the unit's
 * choice is the one meant. */
int sg_settings_pin(const sg_settings *s, sg_secret **out)
{
	if (s->pin_credential)
		return credential_pin(s, out);
	if (s->pin_file && *s->pin_file)
		return sg_secret_from_file(out, s->pin_file);
	if (s->pin_env && *s->pin_env)
		return sg_secret_from_env(out, s->pin_env);
	SG_BAIL(SG_EINVAL, "no PIN source: set pin-credential, pin-file or pin-env");
}

void sg_settings_hsm_options(const sg_settings *s, const sg_secret *pin, sg_hsm_options *o)
{
	*o = (sg_hsm_options){
		.module_path = s->hsm_module,
		.token_uri = s->hsm_token,
		.key_uri = s->hsm_key,
		.pin = pin,
		.init_reserved = s->hsm_init_reserved,
		.softhsm_conf = s->softhsm2_conf,
		.copy_key = s->hsm_copy_key,
	};
}

static int open_all(sg_appliance *a, const sg_settings *s)
{
	sg_hsm *hsm = NULL;
	sg_ca *ca = NULL;
	SG_TRY(open_hsm(s, &hsm));
	atomic_store(&a->hsm, hsm);
	a->hsm_token = strdup(s->hsm_token);
	a->hsm_key = strdup(s->hsm_key);
	SG_ENSURE(a->hsm_token && a->hsm_key, SG_EINTERNAL, "out of memory");
	SG_TRY(load_ca(s, hsm, &ca));
	atomic_store(&a->ca, ca);

	sg_pool_options po = {
	    .threads = (unsigned)s->signer_threads,
	    .max_threads = (unsigned)s->hsm_max_sessions,
	    .queue_capacity = (unsigned)s->signer_queue,
	    .issuer = {.verify_issued = s->verify_issued},
	};
	SG_TRY(sg_pool_new(&a->pool, ca, hsm, &po));
	sg_pool_stats st;
	sg_pool_stats_get(a->pool, &st);
	sg_log(SG_LOG_INFO, "signer ready", SG_F_STR("ca", sg_ca_subject(ca)),
	       SG_F_STR("key", sg_key_type_name(sg_ca_key_type(ca))), SG_F_INT("threads", st.threads),
	       SG_F_INT("max_sessions", st.threads_max), SG_F_INT("queue", st.queue_capacity),
	       SG_F_INT("tokens", sg_hsm_token_count(hsm)), SG_F_END);
	return SG_OK;
}

int sg_appliance_open(sg_appliance **out, const sg_settings *s)
{
	sg_appliance *a = calloc(1, sizeof(*a));
	SG_ENSURE(a, SG_EINTERNAL, "out of memory");
	sg_settings_apply_log(s);
	int rc = open_all(a, s);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		sg_appliance_free(a);
		sg_error_restore(&e);
		return rc;
	}
	*out = a;
	return SG_OK;
}

void sg_appliance_free(sg_appliance *a)
{
	if (!a)
		return;
	sg_pool_free(a->pool); /* first: its workers hold sessions of every HSM handle below */
	sg_ca_free(atomic_load(&a->ca));
	sg_hsm_free(atomic_load(&a->hsm));
	for (size_t i = 0; i < a->nold; i++) {
		sg_ca_free(a->old[i].ca);
		sg_hsm_free(a->old[i].hsm);
	}
	free(a->hsm_token);
	free(a->hsm_key);
	free(a);
}

int sg_appliance_reload(sg_appliance *a, const sg_settings *s, bool *changed)
{
	*changed = false;
	SG_ENSURE(a->pool, SG_EINVAL, "the appliance has no signer to reload");
	SG_ENSURE(s->hsm_token && s->hsm_key, SG_EINVAL, "hsm-token and hsm-key are required (see signetctl init)");
	bool new_key = !same_str(s->hsm_token, a->hsm_token) || !same_str(s->hsm_key, a->hsm_key);
	sg_hsm *cur_hsm = atomic_load(&a->hsm);
	sg_ca *cur_ca = atomic_load(&a->ca);
	sg_hsm *hsm = cur_hsm;
	if (new_key)
		SG_TRY(open_hsm(s, &hsm));
	sg_ca *ca = NULL;
	char *token = NULL, *key = NULL;
	int rc = load_ca(s, hsm, &ca);
	if (rc == SG_OK && !new_key && same_chain(ca, cur_ca)) {
		sg_ca_free(ca);
		return SG_OK;
	}
	if (rc == SG_OK && a->nold == SG_APPLIANCE_RELOADS)
		rc = sg_error_set(SG_EBUSY, "this process has changed its CA %d times; restart it to change again",
		                  SG_APPLIANCE_RELOADS);
	if (rc == SG_OK && new_key && (!(token = strdup(s->hsm_token)) || !(key = strdup(s->hsm_key))))
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK)
		rc = sg_pool_set_signer(a->pool, ca, hsm);
	if (rc < 0) {
		sg_error e;
		sg_error_save(&e);
		free(token);
		free(key);
		sg_ca_free(ca);
		if (new_key)
			sg_hsm_free(hsm);
		sg_error_restore(&e);
		return rc;
	}
	a->old[a->nold++] = (retired){.hsm = new_key ? cur_hsm : NULL, .ca = cur_ca};
	atomic_store(&a->ca, ca);
	if (new_key) {
		atomic_store(&a->hsm, hsm);
		free(a->hsm_token);
		free(a->hsm_key);
		a->hsm_token = token;
		a->hsm_key = key;
	}
	*changed = true;
	sg_log(SG_LOG_INFO, "signer follows a changed CA", SG_F_STR("ca", sg_ca_subject(ca)),
	       SG_F_STR("key", sg_key_type_name(sg_ca_key_type(ca))), SG_F_INT("new_key", new_key), SG_F_END);
	return SG_OK;
}

sg_hsm *sg_appliance_hsm(sg_appliance *a)
{
	return atomic_load(&a->hsm);
}

const sg_ca *sg_appliance_ca(sg_appliance *a)
{
	return atomic_load(&a->ca);
}

sg_pool *sg_appliance_pool(sg_appliance *a)
{
	return a->pool;
}
