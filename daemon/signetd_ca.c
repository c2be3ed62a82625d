/*
 * signetd_ca: the CA settings of the config file, followed without a
 * restart, so that every step of `signetctl rotate` (which rewrites
 * signet.conf atomically, last, after the files it names) reaches a
 * running signetd: begin changes root-cert (the bundle becomes old +
 * new), activate hsm-key and ca-cert (signing moves to the new key, its
 * cross-signed certificate in every chain), finish ca-cert and root-cert
 * again (only the new root).
 *
 * Housekeeping looks once a second at the identity of the config file and
 * of the CA files it names (ca-cert, ca-chain, root-cert); SIGHUP looks
 * whatever their identity. A change re-reads the config file alone (with
 * signetd's whole table: the file may hold any setting), takes
 * from it the CA settings that no flag overrode (a flag that set one at
 * start keeps it: flags win over the file, as at start), and hands them to
 * sg_appliance_reload, which opens and checks the new key and CA before
 * the pool signs with them. The HSM health probes (and their per-token
 * metrics) move to a new key's handle, the service's chain and root bundle, the
 * serving certificate (issued again) and its client roots, the cluster's
 * root ConfigMaps
 * (hence signet-ca-roots and trust bundles) and the root-expiry watch then
 * follow. A change that cannot be used keeps everything as it was and is
 * reported once per change (the next change, or SIGHUP, tries again).
 *
 * Apart from signetd_root.c (root-ca-file, a daemon flag naming a bundle
 * only) because this follows the signer itself; both end in the same
 * places (service, serving, cluster, root watch).
 */
#include "signetd_impl.h"

#include "sg_guard.h"
#include "sg_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The followed settings, in this order everywhere below. */
enum { F_TOKEN, F_KEY, F_CERT, F_CHAIN, F_ROOT, F_COUNT };

static char **field(sg_settings *s, int i)
{
	switch (i) {
	case F_TOKEN:
		return &s->hsm_token;
	case F_KEY:
		return &s->hsm_key;
	case F_CERT:
		return &s->ca_cert;
	case F_CHAIN:
		return &s->ca_chain;
	default:
		return &s->root_cert;
	}
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void note_id(struct file_id *id, const char *path)
{
	struct stat st;
	if (!path || stat(path, &st) != 0) {
		*id = (struct file_id){0};
		return;
	}
	*id = (struct file_id){
	    .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .mtime = st.st_mtim, .known = true};
}

static bool same_id(const struct file_id *a, const struct file_id *b)
{
	return a->known == b->known &&
	       (!a->known || (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	                      a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec));
}

/* The identities of the config file and of the CA files the settings name. */
static void note_ids(const daemon *d, struct file_id ids[SIGNETD_CA_FILES])
{
	note_id(&ids[0], d->a.s.config);
	note_id(&ids[1], d->a.s.ca_cert);
	note_id(&ids[2], d->a.s.ca_chain);
	note_id(&ids[3], d->a.s.root_cert);
}

int signetd_ca_follow_start(daemon *d)
{
	struct ca_follow *f = &d->ca_follow;
	*f = (struct ca_follow){0};
	if (!d->a.s.config)
		return SG_OK; /* flags only: nothing to follow */
	if (!d->a.d.hsm)
		return SG_OK; /* hsm=false: no CA of ours; the issuer's is root-ca-file's, followed there */
	daemon_args *base SG_AUTOFREE = malloc(sizeof(*base));
	SG_ENSURE(base, SG_EINTERNAL, "out of memory");
	SG_TRY(signetd_parse_config(d->a.s.config, base));
	/* A setting the file gave is followed; one a flag overrode is not. */
	for (int i = 0; i < F_COUNT; i++)
		f->follow[i] = same_str(*field(&d->a.s, i), *field(&base->s, i));
	signetd_free_args(base);
	note_ids(d, f->ids);
	f->on = true;
	return SG_OK;
}

/* The root bundle served with the current CA: root-ca-file's when set
 * (kept; signetd_root.c follows it), else the CA's own. */
static int follow_root(daemon *d)
{
	char *own SG_AUTOFREE = NULL;
	const char *root = NULL;
	size_t len = 0;
	if (d->a.d.root_ca_file) {
		SG_TRY(sg_service_root(d->svc, &own, &len));
		SG_TRY(sg_ca_check_bundle(d->ca, own, len, d->a.d.root_ca_file));
		root = own;
	} else {
		const char *const *elems;
		const size_t *lens;
		size_t n;
		sg_ca_chain(d->ca, &elems, &lens, &n);
		SG_ENSURE(n > 0, SG_EINVAL, "the CA has no chain");
		root = elems[n - 1];
		len = lens[n - 1];
	}
	SG_TRY(sg_service_set_ca(d->svc, d->ca, own, len));
	signetd_root_watch(d, root, len);
	if (sg_serving_set_client_ca(d->serving, root) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot update the client-certificate roots");
	sg_cluster_set_root(d->cluster, root, len);
	/* A self-issued serving certificate moves to the new key too, or a
	 * peer that only knows the new root could not connect after finish. */
	if (sg_serving_renew(d->serving) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot issue the serving certificate again; renewal will retry");
	return SG_OK;
}

int signetd_ca_follow(daemon *d, bool force)
{
	struct ca_follow *f = &d->ca_follow;
	if (!f->on)
		return SG_OK;
	struct file_id now[SIGNETD_CA_FILES];
	note_ids(d, now);
	bool changed = false;
	for (int i = 0; i < SIGNETD_CA_FILES; i++)
		changed |= !same_id(&now[i], &f->ids[i]);
	if (!changed && !force)
		return SG_OK;
	/* Noted before the attempt: a change that cannot be used is reported
	 * once, not every second. */
	memcpy(f->ids, now, sizeof(now));
	daemon_args *fresh SG_AUTOFREE = malloc(sizeof(*fresh));
	int rc = fresh ? signetd_parse_config(d->a.s.config, fresh) : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc < 0) {
		sg_log_error_last(force ? SG_LOG_ERROR : SG_LOG_WARN,
		                  "the config file changed but cannot be read; the CA stays as it was");
		return rc;
	}
	sg_settings next = d->a.s;
	for (int i = 0; i < F_COUNT; i++)
		if (f->follow[i])
			*field(&next, i) = *field(&fresh->s, i);
	bool moved = false;
	sg_hsm *before = sg_appliance_hsm(d->app);
	rc = sg_appliance_reload(d->app, &next, &moved);
	if (rc == SG_OK) {
		/* The followed settings are now the file's (owned by d->a from
		 * here, freed with it). */
		for (int i = 0; i < F_COUNT; i++) {
			if (!f->follow[i])
				continue;
			free(*field(&d->a.s, i));
			*field(&d->a.s, i) = *field(&fresh->s, i);
			*field(&fresh->s, i) = NULL;
		}
		note_ids(d, f->ids); /* the CA files the settings name now */
	}
	signetd_free_args(fresh);
	if (rc < 0) {
		sg_log_error_last(force ? SG_LOG_ERROR : SG_LOG_WARN,
		                  "the CA settings changed but cannot be used; signing stays as it was");
		return rc;
	}
	if (!moved)
		return SG_OK;
	d->ca = sg_appliance_ca(d->app);
	signetd_follow_token_metrics(d);
	/* Probes that stay on the retired handle would report, and judge, a
	 * key nobody signs with (destroyed at finish); the new handle would
	 * be read without them (PKCS#11 calls on the reader's thread). */
	if (signetd_follow_hsm_probes(d, before) < 0)
		sg_log_error_last(SG_LOG_ERROR, "cannot start the HSM health probes of the new key");
	rc = follow_root(d);
	if (rc < 0) {
		sg_log_error_last(SG_LOG_ERROR, "the CA changed but its root bundle cannot be served");
		return rc;
	}
	sg_log(SG_LOG_INFO, "CA reloaded", SG_F_STR("ca", sg_ca_subject(d->ca)),
	       SG_F_STR("root", sg_ca_root_subject(d->ca)), SG_F_STR("config", d->a.s.config), SG_F_END);
	return SG_OK;
}
