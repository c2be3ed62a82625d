/*
 * signetd_root: root-ca-file, the root bundle clients are given and the
 * mesh trusts. Read at start (bounded, a PEM certificate, checked against
 * the CA), then followed as istio-csr follows it: housekeeping looks at
 * the file's identity once a second and a changed file replaces the
 * bundle returned to clients, trusted for client certificates and
 * distributed to namespaces; a broken new file keeps the old bundle and
 * is reported once per change; SIGHUP reads it whatever its identity.
 * Apart because following a file is a small state machine of its own
 * that start, housekeeping and the reload all call into.
 */
#include "signetd_impl.h"

#include "sg_guard.h"
#include "sg_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROOT_FILE_MAX (1u << 20)

static bool same_file(const struct file_id *a, const struct stat *st)
{
	return a->known && a->dev == st->st_dev && a->ino == st->st_ino && a->size == st->st_size &&
	       a->mtime.tv_sec == st->st_mtim.tv_sec && a->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Reads root-ca-file (bounded; it must hold a PEM certificate) and notes
 * which file it was. */
static int read_root_file(const char *path, char **out, size_t *len, struct file_id *id)
{
	FILE *f = fopen(path, "re");
	SG_ENSURE(f, SG_ENOTFOUND, "cannot open root-ca-file %s", path);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int rc = fstat(fileno(f), &st) == 0 ? SG_OK : sg_error_set(SG_EINVAL, "cannot stat root-ca-file %s", path);
	if (rc == SG_OK && (st.st_size <= 0 || (uint64_t)st.st_size >= ROOT_FILE_MAX))
		rc = sg_error_set(SG_EINVAL, "root-ca-file %s is empty or larger than %u bytes", path, ROOT_FILE_MAX);
	if (rc == SG_OK && !(buf = malloc((size_t)st.st_size + 1)))
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK) {
		got = fread(buf, 1, (size_t)st.st_size, f);
		buf[got] = 0;
		if (got != (size_t)st.st_size)
			rc = sg_error_set(SG_EINVAL, "root-ca-file %s changed while it was read", path);
		else if (!strstr(buf, "-----BEGIN CERTIFICATE-----"))
			rc = sg_error_set(SG_EINVAL, "root-ca-file %s holds no PEM certificate", path);
	}
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*id = (struct file_id){
	    .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .mtime = st.st_mtim, .known = true};
	*out = buf;
	*len = got;
	return SG_OK;
}

/* The root bundle clients are given (and the mesh trusts): root-ca-file
 * when set (checked against the CA), else the CA's own. *own is what the
 * caller frees (NULL when the bundle is the CA's). */
int signetd_load_root(daemon *d, const char **root, size_t *len, char **own)
{
	*own = NULL;
	if (d->a.d.root_ca_file) {
		SG_TRY(read_root_file(d->a.d.root_ca_file, own, len, &d->root_file));
		int rc = sg_ca_check_bundle(d->ca, *own, *len, d->a.d.root_ca_file);
		if (rc < 0) {
			free(*own);
			*own = NULL;
			return rc;
		}
		*root = *own;
		signetd_root_watch(d, *root, *len);
		return SG_OK;
	}
	size_t n;
	const char *const *elems;
	const size_t *lens;
	sg_ca_chain(d->ca, &elems, &lens, &n);
	SG_ENSURE(n > 0, SG_EINVAL, "the CA has no chain");
	*root = elems[n - 1];
	*len = lens[n - 1];
	signetd_root_watch(d, *root, *len);
	return SG_OK;
}

/* root-ca-file is followed like istio-csr follows it: a changed file
 * replaces the bundle returned to clients, trusted for client
 * certificates and distributed to namespaces. A broken new file keeps the
 * old bundle (and is reported once per change). force (SIGHUP) reads the
 * file whether or not it looks changed, and reports a failure as an error
 * (the operator asked for this signetd_reload); the detail stays set for the
 * caller. */
int signetd_reload_root(daemon *d, bool force)
{
	const char *path = d->a.d.root_ca_file;
	struct stat st;
	if (!path)
		return SG_OK;
	if (stat(path, &st) != 0) {
		if (!force)
			return SG_OK; /* a file being replaced; the next tick looks again */
		int rc = sg_error_set(SG_ENOTFOUND, "cannot stat root-ca-file %s", path);
		sg_log_error_last(SG_LOG_ERROR, "root-ca-file cannot be reloaded; keeping the previous roots");
		return rc;
	}
	if (!force && same_file(&d->root_file, &st))
		return SG_OK;
	char *root = NULL;
	size_t len = 0;
	struct file_id id;
	/* A broken file is reported once per change: its identity is noted so
	 * that the next tick does not read it again. */
	int rc = read_root_file(path, &root, &len, &id);
	if (rc == SG_OK)
		rc = sg_ca_check_bundle(d->ca, root, len, path);
	if (rc < 0) {
		free(root);
		d->root_file = (struct file_id){
		    .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .mtime = st.st_mtim, .known = true};
		sg_log_error_last(force ? SG_LOG_ERROR : SG_LOG_WARN,
		                  force ? "root-ca-file cannot be reloaded; keeping the previous roots"
		                        : "root-ca-file changed but cannot be used; keeping the previous roots");
		return rc;
	}
	if (sg_service_root_is(d->svc, root, len)) {
		free(root);
		d->root_file = id;
		return SG_OK;
	}
	rc = sg_service_set_root(d->svc, root, len);
	if (rc < 0) { /* retried on the next tick */
		free(root);
		sg_log_error_last(force ? SG_LOG_ERROR : SG_LOG_WARN, "cannot use the new root bundle");
		return rc;
	}
	d->root_file = id;
	signetd_root_watch(d, root, len);
	if (sg_serving_set_client_ca(d->serving, root) < 0)
		sg_log_error_last(SG_LOG_WARN, "cannot update the client-certificate roots");
	sg_cluster_set_root(d->cluster, root, len);
	free(root);
	sg_log(SG_LOG_INFO, "root bundle reloaded", SG_F_STR("file", path), SG_F_INT("bytes", (int64_t)len), SG_F_END);
	return SG_OK;
}
