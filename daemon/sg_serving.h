/*
 * sg_serving: the daemon's own TLS serving certificate.
 *
 * By default signet issues it to itself: a fresh key (P-256 unless the
 * options say otherwise; in memory, not in the HSM: it protects transport,
 * not the CA) and a certificate from the
 * CA with the configured DNS names, serverAuth, renewed at 2/3 of its life,
 * so clients that trust the mesh root (istio-ca-root-cert) trust signet.
 *
 * An RA without an HSM (signetd --hsm=false) has no CA to issue it: the
 * same key and CSR go to the RA's issuer through the forwarder, as a
 * workload's CSR does (a CertificateRequest; the identity annotation is
 * the DNS names), which is how istio-csr gets its own serving certificate.
 * The answer is checked as any forwarded answer (the CSR's key, a chain to
 * the mesh roots), so clients that trust the issuer's CA trust signet.
 * The first certificate is waited for; a renewal is asked for at 2/3 of
 * the life and answered on the forwarder's thread, so the housekeeping
 * thread never waits on the issuer; a failed one is asked again 10 s
 * later while the current certificate serves.
 *
 * Alternatively a certificate and key are read from files and reloaded when
 * they change. Either way the gRPC layer fetches the current material by
 * version number and picks a change up on the next handshake.
 *
 * Thread-safe: tick() runs on the daemon's housekeeping thread, get() on
 * gRPC's handshake path, a forwarded answer on the forwarder's thread.
 */
#ifndef SG_SERVING_H
#define SG_SERVING_H

#include "sg_ca.h"
#include "sg_error.h"
#include "sg_forward.h"
#include "sg_pool.h"
#include "sg_softkey.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sg_serving sg_serving;

typedef struct sg_serving_options {
	sg_pool *pool;             /* issues the self-issued certificate */
	/* With no pool: the RA's issuer issues it (borrowed; it must outlive
	 * every request, so free the serving certificate after it: its
	 * shutdown answers what waits). */
	sg_forward *forward;
	const char *dns_names;     /* comma-separated */
	int64_t duration;          /* seconds */
	sg_softkey_type key_type;  /* of the self-issued key (0: P-256) */
	unsigned rsa_bits;         /* SG_SOFTKEY_RSA: 2048..8192 */
	const char *cert_file;     /* both set: serve these instead */
	const char *key_file;
	const char *client_ca_pem; /* roots trusted for client certificates */
} sg_serving_options;

/* Obtains the first certificate (issues or reads it; through the forwarder
 * it waits for the issuer's answer, which the forwarder bounds by its own
 * timeout). SG_EINVAL without a pool, a forwarder or files. Caller frees
 * with sg_serving_free. */
SG_API int sg_serving_new(sg_serving **out, const sg_serving_options *o) SG_MUST_CHECK;
SG_API void sg_serving_free(sg_serving *s);

/* Renews when 2/3 of the lifetime has passed (or reloads changed files).
 * A failure keeps the current certificate and is retried on the next tick
 * (a forwarded request that failed: 10 s later). Through the
 * forwarder this only asks: the answer is installed when it comes. */
SG_API int sg_serving_tick(sg_serving *s, int64_t now) SG_MUST_CHECK;

/* Re-reads the certificate and key files now, changed or not (SIGHUP:
 * a file rewritten within the same mtime tick is picked up too); *reread
 * says whether there were files to read (false for a self-issued
 * certificate, which is left alone). A failure keeps the current material
 * and sets the detail. */
SG_API int sg_serving_reload(sg_serving *s, bool *reread) SG_MUST_CHECK;

/* A self-issued certificate is issued again now (the CA it came from was
 * rotated: the next one is signed by the current key and carries the
 * current chain, which peers that know either root verify); files are
 * left alone. A failure keeps the current certificate (the tick renews it
 * later anyway) and sets the detail. */
SG_API int sg_serving_renew(sg_serving *s) SG_MUST_CHECK;

/* Copies of the current chain, key and client CA PEM (caller frees each;
 * the key copy should be wiped: use sg_serving_wipe_free) and its version. */
SG_API int sg_serving_get(sg_serving *s, char **chain, char **key, char **client_ca, uint64_t *version) SG_MUST_CHECK;
SG_API void sg_serving_wipe_free(char *pem);
SG_API int64_t sg_serving_not_after(sg_serving *s);

/* Replaces the roots trusted for client certificates (the root bundle was
 * reloaded); a change bumps the version. pem is copied. */
SG_API int sg_serving_set_client_ca(sg_serving *s, const char *pem) SG_MUST_CHECK;

#endif
