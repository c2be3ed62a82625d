/*
 * sg_caclient: a client of Istio's certificate service
 * (istio.v1.auth.IstioCertificateService/CreateCertificate) for node
 * agents: it makes a key and a CSR for an identity, asks the CA, and checks
 * the answer before anyone uses it. It speaks to any CA of that API:
 * signetd, istiod, istio-csr.
 *
 * The call, as istio-agent and Kmesh make it:
 *   - TLS with the mesh root from root_ca_file (re-read when the file
 *     changes, so a rotated root reaches new connections); the server name
 *     is server_name, or the address's host;
 *   - "authorization: Bearer <token>" with the token re-read from
 *     token_file on every call (projected tokens rotate), wiped after use;
 *   - "clusterid: <cluster_id>" (Kmesh hard-codes "Kubernetes");
 *   - metadata ImpersonatedIdentity = the identity when impersonate is set
 *     (a node agent asks for its pods' service accounts; the CA must list
 *     the agent's account as a trusted node account);
 *   - validity_duration = ttl_seconds.
 *
 * The key is made here, in software, per fetch: P-256 (default) or RSA
 * (istio-agent's default, 2048 bits), as PKCS#8 or as the traditional
 * PKCS#1/SEC1 form. The CSR has no subject and the identity as its one URI
 * SAN.
 *
 * The answer is hostile input until checked (sg_caclient_check): at least
 * two elements, the leaf first and the roots last; every element but the
 * last exactly one certificate; the leaf carries exactly the identity as
 * URI SAN and holds the key that was made, and is valid now.
 *
 * The last element is the CA's root bundle, as istio-agent and ztunnel
 * take it: one root, or several while a rotation overlaps old and new
 * (istiod, istio-csr and signetd send all current roots in that one
 * element), at most SG_CACLIENT_ROOTS_MAX. Each of them is a self-signed
 * root, or a CA certificate that chains to the configured roots (the root
 * file the CA's TLS is verified with): istiod's per-signer mode answers
 * with the signer's intermediate as the root, to be trusted alone. The
 * chain (the leaf and the elements between) must verify up to one of
 * them; all of them are what the workload trusts (root_pem of the
 * certificate, root-cert.pem on disk), in the CA's order.
 *
 * Errors: SG_EINVAL for a bad option or an answer that fails a check,
 * SG_EAUTH for UNAUTHENTICATED/PERMISSION_DENIED, SG_EBUSY for the
 * retryable statuses (UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED)
 * and unreachable CAs, SG_EPROTO for other statuses, SG_ENOTFOUND for a
 * missing token or root file. The detail names the status and the CA's
 * message.
 *
 * Threads: one client serves any number of threads at once.
 */
#ifndef SG_CACLIENT_H
#define SG_CACLIENT_H

#include "sg_error.h"
#include "sg_wlcerts.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_CACLIENT_FILE_MAX (64u * 1024u) /* largest token or root file read */
/* Roots in an answer's last element: a rotation overlaps two, a few
 * signers' roots side by side make some more; past this is a CA gone
 * wrong, not a bundle to write into every workload. */
#define SG_CACLIENT_ROOTS_MAX 16

typedef enum sg_caclient_key {
	SG_CACLIENT_KEY_EC_P256 = 0,
	SG_CACLIENT_KEY_RSA = 1,
} sg_caclient_key;

typedef struct sg_caclient_options {
	const char *address;      /* "host:port" (required) */
	const char *server_name;  /* TLS name to verify; NULL or "": address's host */
	const char *root_ca_file; /* PEM roots of the CA's serving certificate (required unless insecure) */
	const char *token_file;   /* bearer token file; NULL or "": none is sent */
	const char *cluster_id;   /* "clusterid" header; NULL or "": none */
	bool impersonate;         /* send metadata ImpersonatedIdentity */
	int64_t ttl_seconds;      /* validity_duration asked for (0: the CA's default) */
	sg_caclient_key key_type;
	unsigned rsa_bits;        /* SG_CACLIENT_KEY_RSA: 2048 (0) or more */
	bool pkcs8;               /* PKCS#8 key PEM; false: PKCS#1 (RSA) / SEC1 (EC) */
	uint64_t timeout_ms;      /* per call (0: 30 s) */
	uint64_t reconnect_backoff_max_ms; /* gRPC's reconnect backoff cap (0: 10 s) */
	bool insecure;            /* plaintext (tests only) */
} sg_caclient_options;

typedef struct sg_caclient sg_caclient;

/* Checks the options and reads the root file (SG_EINVAL, SG_ENOTFOUND);
 * connects lazily. Caller frees with sg_caclient_free. */
SG_API int sg_caclient_new(sg_caclient **out, const sg_caclient_options *o) SG_MUST_CHECK;
/* Accepts NULL. No call may be in flight. */
SG_API void sg_caclient_free(sg_caclient *c);

/* One fetch: key, CSR, call, checks. *out gets a new certificate (one
 * reference). Blocking, at most timeout_ms in the call. */
SG_API int sg_caclient_fetch(sg_caclient *c, const char *identity, sg_wlcert **out) SG_MUST_CHECK;

/* sg_caclient_fetch as an sg_wlcerts_fetch_fn (arg is the client). */
SG_API int sg_caclient_fetch_fn(const char *identity, sg_wlcert **out, void *arg) SG_MUST_CHECK;

/* The checks of a CA's answer: the serialized IstioCertificateResponse of
 * len bytes, for identity, whose key is key_pem (the caller's, borrowed).
 * trust_pem (trust_len bytes, borrowed) is the configured roots that an
 * intermediate named as the root must chain to; NULL: none, and only
 * self-signed roots are accepted. now is Unix seconds, for the leaf's
 * validity (the chain is verified at now, or at the leaf's start when
 * that is within the skew allowance ahead). On success *out gets a new
 * certificate holding a copy of key_pem. Exposed for tests and the fuzz
 * target. */
SG_API int sg_caclient_check(const uint8_t *resp, size_t len, const char *identity, const char *key_pem,
                             const char *trust_pem, size_t trust_len, int64_t now, sg_wlcert **out) SG_MUST_CHECK;

typedef struct sg_caclient_stats {
	uint64_t calls, ok, failed;
	uint64_t root_reloads; /* the root file changed and was read again */
} sg_caclient_stats;

SG_API void sg_caclient_stats_get(sg_caclient *c, sg_caclient_stats *out);

#endif
