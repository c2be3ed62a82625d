/*
 * Internals shared by signetctl's subcommands (not a public module header):
 * file helpers and the subcommand entry points.
 */
#ifndef CTL_H
#define CTL_H

#include "sg_csr.h"
#include "sg_error.h"
#include "sg_hsm.h"

#include <stddef.h>
#include <stdint.h>

/* Writes data to path atomically (temporary file + rename) with mode. With
 * exclusive, fails if path exists. */
int ctl_write_file(const char *path, const void *data, size_t len, unsigned mode, int exclusive) SG_MUST_CHECK;
/* Reads a whole file of at most max bytes (NUL-terminated); "-" reads stdin.
 * Caller frees *out. */
int ctl_read_file(const char *path, size_t max, uint8_t **out, size_t *len) SG_MUST_CHECK;
/* Rewrites the config file at path (atomically) with names[i] = values[i]:
 * a line setting names[i] is replaced (the first; later ones dropped), a
 * NULL value drops it, a name without a line is appended. Comments and
 * other lines stay as they are. */
int ctl_update_config(const char *path, const char *const *names, const char *const *values, size_t n) SG_MUST_CHECK;
/* path joined to dir; caller frees. */
char *ctl_join(const char *dir, const char *name);
/* Parses "CN=x,O=y" (attributes CN, O, OU, C, L, ST, serialNumber) into rdns
 * that borrow buf, which is modified. */
int ctl_parse_subject(char *buf, sg_rdn *rdns, size_t max, size_t *n) SG_MUST_CHECK;
/* A CSR for the CA key in hsm, subject from "O=...,CN=..." text
 * (ctl_parse_subject), signed in the HSM with the CA's signature
 * algorithm: signetctl csr's, and rotate begin --subject's for the next
 * intermediate. PEM into *pem (caller frees). */
int ctl_ca_csr(sg_hsm *hsm, const char *subject, char **pem, size_t *pem_len) SG_MUST_CHECK;

/* signetctl init (ctl_init.c): the command line of sg_init_ca. Returns the
 * exit status. */
int ctl_init(int argc, char **argv);
/* signetctl hsm-check (ctl_hsm_check.c): whether signet will work with a
 * PKCS#11 module and token, as a report. Returns the exit status: 0 yes, 1
 * no, 2 usage error. */
int ctl_hsm_check(int argc, char **argv);
/* signetctl cel (ctl_cel.c): one CEL expression in the policy approver's
 * environment, as JSON. Returns the exit status: 0 a value, 1 an
 * evaluation error, 2 it does not compile or a usage error. */
int ctl_cel(int argc, char **argv);
/* signetctl policy check (ctl_policy.c): one CertificateRequestPolicy's
 * verdict on one CertificateRequest, offline, with the approver's message.
 * Returns the exit status: 0 Approved, 1 Denied, 2 a usage or input
 * error, 3 not applicable (not selected, or NotReady), 4 no verdict
 * offline (plugins, an evaluation error). */
int ctl_policy(int argc, char **argv);
/* signetctl rotate (ctl_rotate.c): begin, activate, finish, status of a CA
 * rotation. Returns the exit status: 0 done, 1 failed or refused (with
 * what to do), 2 a usage error. */
int ctl_rotate(int argc, char **argv);

#endif
