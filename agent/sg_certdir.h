/*
 * sg_certdir: workload certificates published as files, one folder per
 * service account: DIR/<namespace>/<service-account>/ holding
 * cert-chain.pem (the leaf and any intermediates), key.pem (mode 0600) and
 * root-cert.pem, the names istio-agent writes with --output-certs.
 *
 * Atomicity: a reader must never see a new certificate beside an old key.
 * So the three files of one version are written (and fsync'ed) into a new
 * hidden folder "..<serial>.<random>" inside the account's folder, a
 * symbolic link "..data" is switched to it by rename(2), and each file name
 * is a symbolic link "cert-chain.pem -> ..data/cert-chain.pem" made once.
 * The previous version's folder is removed after the switch. This is the
 * layout Kubernetes uses for projected volumes, so readers that watch
 * Secrets mounted as files (Envoy's SDS file watcher, ztunnel) follow it.
 *
 * Names come from the cluster and are checked before any path is made: a
 * namespace and a service account must be DNS labels/subdomains as
 * Kubernetes requires (no "/", no "..", no leading dot), so a hostile
 * object cannot write outside DIR.
 *
 * Errors: SG_EINVAL for names, SG_EINTERNAL for file system failures (the
 * detail names the path and errno). Threads: calls for different accounts
 * may run at once; one account's calls must not overlap.
 */
#ifndef SG_CERTDIR_H
#define SG_CERTDIR_H

#include "sg_error.h"
#include "sg_wlcerts.h"

#include <stdbool.h>
#include <stddef.h>

/* Splits "spiffe://<td>/ns/<ns>/sa/<sa>" into ns and sa (checked as
 * Kubernetes names). false when it is not such an identity. */
SG_API bool sg_certdir_identity_split(const char *identity, char ns[64], char sa[254]);

/* Writes cert's files for ns/sa under dir (created, 0755, when missing). */
SG_API int sg_certdir_write(const char *dir, const char *ns, const char *sa, const sg_wlcert *cert) SG_MUST_CHECK;

/* Removes dir/ns/sa and everything in it, then dir/ns when it is empty.
 * An absent folder is not an error. */
SG_API int sg_certdir_remove(const char *dir, const char *ns, const char *sa) SG_MUST_CHECK;

/* Calls fn(ns, sa, arg) for every account folder under dir (folders two
 * levels down with a "..data" link; others are left alone). SG_OK when dir
 * does not exist. */
SG_API int sg_certdir_list(const char *dir, void (*fn)(const char *ns, const char *sa, void *arg),
                           void *arg) SG_MUST_CHECK;

#endif
