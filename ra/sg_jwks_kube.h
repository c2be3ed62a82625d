/*
 * sg_jwks_kube: the cluster's service-account signing keys, discovered from
 * the Kubernetes API server and kept fresh, so that the jwt authenticator
 * verifies tokens locally without a JWKS file.
 *
 * What it reads (ServiceAccountIssuerDiscovery, Kubernetes >= 1.20):
 *   /.well-known/openid-configuration   once, at new: the "issuer" (OpenID
 *       Connect Discovery 1.0 §3 / RFC 8414 §2), which tokens carry as "iss".
 *   /openid/v1/jwks                     at new, then every refresh_seconds:
 *       the public keys (RFC 7517), parsed by sg_jwks_parse.
 * Both are fetched through the API server with the client's credentials
 * (RBAC: the bootstrap ClusterRole system:service-account-issuer-discovery,
 * bound to every service account by default; anonymous callers get 403).
 * The discovery document's "jwks_uri" is NOT followed: in real clusters it
 * may name an external URL (a bucket or a CDN the cluster publishes to, set
 * by --service-account-jwks-uri), while the API server itself always serves
 * the same keys at /openid/v1/jwks, reachable with the credentials and the
 * CA we already trust. So no second host, CA or network path is involved.
 *
 * The issuer is read once: it is API-server configuration (changing it
 * re-signs nothing and needs an API-server restart), and the verifier
 * copies it. The keys rotate, hence the refresh.
 *
 * Refresh: a background thread fetches the JWKS every refresh_seconds. A
 * byte-identical answer (compared by SHA-256) changes nothing: the key set,
 * its generation and the verifier's cache stay. A changed, valid set is
 * pushed into the key source (sg_jwks_file_set), which invalidates cached
 * verifications. A failed fetch or a broken set keeps the current keys,
 * logs a warning and retries after min_refresh_seconds, doubling per
 * consecutive failure up to refresh_seconds.
 *
 * Thread safety: the key source may be read by any number of threads while
 * the refresher writes it; sg_jwks_kube_refresh and the stats may be called
 * from any thread; free from one, when no other call is in progress.
 */
#ifndef SG_JWKS_KUBE_H
#define SG_JWKS_KUBE_H

#include "sg_error.h"
#include "sg_jwt.h"
#include "sg_kube.h"

#include <stddef.h>
#include <stdint.h>

#define SG_JWKS_KUBE_DISCOVERY_MAX (64u << 10) /* discovery document, bytes */
#define SG_JWKS_KUBE_ISSUER_MAX 1024           /* issuer URL, bytes */
#define SG_JWKS_KUBE_REFRESH_DEFAULT 300
#define SG_JWKS_KUBE_MIN_REFRESH_DEFAULT 10
#define SG_JWKS_KUBE_REFRESH_MAX 86400

/* The two paths, relative to the API server URL. */
#define SG_JWKS_KUBE_DISCOVERY_PATH "/.well-known/openid-configuration"
#define SG_JWKS_KUBE_JWKS_PATH "/openid/v1/jwks"

typedef struct sg_jwks_kube sg_jwks_kube;

typedef struct sg_jwks_kube_options {
	sg_kube *kube;           /* required; borrowed: it must outlive the sg_jwks_kube */
	int refresh_seconds;     /* between fetches; 0: 300; else 1..86400 */
	int min_refresh_seconds; /* first retry after a failure; 0: min(10, refresh); else 1..refresh */
} sg_jwks_kube_options;

/* Fetches the discovery document and the JWKS synchronously (each bounded
 * by the client's request timeout), then starts the refresher thread.
 * Fails when either cannot be had, with the category of the cause and a
 * message that names what failed: the client's errors (SG_EBUSY for a
 * server that cannot be reached, SG_EAUTH for 401/403, SG_ENOTFOUND when
 * discovery is off, SG_ETIMEOUT, SG_EPROTO for an answer that is too large
 * or not JSON), SG_EINVAL for a document or key set that does not parse
 * (sg_jwks_kube_parse_discovery, sg_jwks_parse) or for bad options. Caller
 * frees with sg_jwks_kube_free. */
SG_API int sg_jwks_kube_new(sg_jwks_kube **out, const sg_jwks_kube_options *o) SG_MUST_CHECK;

/* Stops the refresher (an in-flight fetch is abandoned within about a
 * second) and frees everything, the key source included. Accepts NULL. No
 * other call on d, and no reader of its key source, may be in progress. */
SG_API void sg_jwks_kube_free(sg_jwks_kube *d);

/* The issuer from the discovery document: an https URL without query or
 * fragment, at most SG_JWKS_KUBE_ISSUER_MAX bytes. Borrowed for d's life. */
SG_API const char *sg_jwks_kube_issuer(const sg_jwks_kube *d);

/* The key source (a pushed sg_jwks_file) for sg_jwt_verifier_new or
 * sg_authn_jwt_options.jwks_source. Borrowed for d's life: whatever reads
 * it must be freed before d. */
SG_API sg_jwks_file *sg_jwks_kube_source(sg_jwks_kube *d);

/* Fetches the JWKS now, on the calling thread, as one refresh of the
 * refresher would (stats, logging, keep-old-keys-on-failure included); it
 * does not move the refresher's schedule. SG_OK when the keys are current
 * (changed or not); else the failure, the old keys staying in use. */
SG_API int sg_jwks_kube_refresh(sg_jwks_kube *d) SG_MUST_CHECK;

typedef struct sg_jwks_kube_stats {
	uint64_t fetches;              /* JWKS fetches tried, the one at new included */
	uint64_t failures;             /* of which failed: the old keys stayed */
	uint64_t updates;              /* changed key sets pushed after the one at new */
	uint64_t consecutive_failures; /* failures since the last success */
	int64_t last_success;          /* wall-clock seconds of the last successful fetch */
	int64_t last_failure;          /* wall-clock seconds of the last failure; 0: none */
	uint64_t generation;           /* of the key set in use (sg_jwks_generation) */
	size_t keys;                   /* usable keys in it */
} sg_jwks_kube_stats;

/* Each member is read atomically; together they are not one snapshot. */
SG_API void sg_jwks_kube_stats_get(const sg_jwks_kube *d, sg_jwks_kube_stats *out);

/* Parses an OpenID Connect discovery document (at most
 * SG_JWKS_KUBE_DISCOVERY_MAX bytes; a JSON object, duplicate members
 * refused) and copies its "issuer" into issuer (capacity cap, NUL-terminated).
 * The issuer must be a string without NUL bytes of at most
 * SG_JWKS_KUBE_ISSUER_MAX bytes, and an https URL (lower-case "https://")
 * with a host, without userinfo, query or fragment (RFC 8414 §2), of
 * printable ASCII URL characters. Other members, "jwks_uri" included, are
 * not interpreted. SG_EINVAL with a detail that does not quote the input
 * (also when cap is too small); issuer is "" then. */
SG_API int sg_jwks_kube_parse_discovery(const void *doc, size_t len, char *issuer, size_t cap) SG_MUST_CHECK;

#endif
