/*
 * From settings to a running signer. Start-up order matters: the PIN is read
 * and wiped within sg_appliance_open; the HSM is opened before the CA is
 * loaded so that the CA certificate can be checked against the key the HSM
 * actually holds (fail closed on a mismatch); the pool opens its sessions one
 * at a time.
 */
#include "sg_appliance.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sg_log_level_names[] = {"debug", "info", "warn", "error", NULL};
const char *const sg_log_format_names[] = {"text", "json", NULL};

struct sg_appliance {
	sg_hsm *hsm;
	sg_ca *ca;
	sg_pool *pool;
};

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
	SG_ENSURE(s->hsm_token && s->hsm_key, SG_EINVAL, "hsm-token and hsm-key are required (see signetctl init)");
	SG_ENSURE(s->ca_cert && s->root_cert, SG_EINVAL, "ca-cert and root-cert are required (see signetctl init)");
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_settings_pin(s, &pin));
	sg_hsm_options ho;
	sg_settings_hsm_options(s, pin, &ho);
	SG_TRY(sg_hsm_open(&a->hsm, &ho));

	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	SG_TRY(sg_hsm_public_key(a->hsm, &spki, &spki_len));
	sg_ca_files files = {s->ca_cert, s->ca_chain, s->root_cert};
	SG_TRY(sg_ca_load(&a->ca, &files, spki, spki_len, sg_wall_seconds()));

	sg_pool_options po = {
	    .threads = (unsigned)s->signer_threads,
	    .max_threads = (unsigned)s->hsm_max_sessions,
	    .queue_capacity = (unsigned)s->signer_queue,
	    .issuer = {.verify_issued = s->verify_issued},
	};
	SG_TRY(sg_pool_new(&a->pool, a->ca, a->hsm, &po));
	sg_pool_stats st;
	sg_pool_stats_get(a->pool, &st);
	sg_log(SG_LOG_INFO, "signer ready", SG_F_STR("ca", sg_ca_subject(a->ca)),
	       SG_F_STR("key", sg_key_type_name(sg_ca_key_type(a->ca))), SG_F_INT("threads", st.threads),
	       SG_F_INT("max_sessions", st.threads_max), SG_F_INT("queue", st.queue_capacity),
	       SG_F_INT("tokens", sg_hsm_token_count(a->hsm)), SG_F_END);
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
	sg_pool_free(a->pool);
	sg_ca_free(a->ca);
	sg_hsm_free(a->hsm);
	free(a);
}

sg_hsm *sg_appliance_hsm(sg_appliance *a)
{
	return a->hsm;
}

const sg_ca *sg_appliance_ca(sg_appliance *a)
{
	return a->ca;
}

sg_pool *sg_appliance_pool(sg_appliance *a)
{
	return a->pool;
}
