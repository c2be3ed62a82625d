/*
 * sg_http_impl: what sg_http.c (the server) takes from sg_http_tls.c (the
 * TLS policy in GnuTLS's words). Private to obs/.
 */
#ifndef SG_HTTP_IMPL_H
#define SG_HTTP_IMPL_H

#include "sg_http.h"

#define SG_HTTP_TLS_PRIORITIES_MAX 512

/* The GnuTLS priority string of policy (NULL: TLS 1.2 and 1.3 with
 * GnuTLS's NORMAL suites) into out (cap bytes). SG_EINVAL for a version or
 * suite out of range; it does not ask GnuTLS (sg_http_tls_policy_check
 * does). */
int sg_http_tls_priorities(const sg_http_tls_policy *policy, char *out, size_t cap) SG_MUST_CHECK;

#endif
