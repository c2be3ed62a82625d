/*
 * sg_spiffe: the SPIFFE naming rules signet applies, in one place. A trust
 * domain is what follows "spiffe://" up to the first '/': 1 to 255 bytes of
 * lower-case letters, digits, '.', '-' and '_' (the SPIFFE ID standard),
 * and '@', which istio-csr accepts and reads as '.' (every SPIFFE ID signet
 * writes or compares has it replaced: sg_trust_domain_normalize).
 */
#ifndef SG_SPIFFE_H
#define SG_SPIFFE_H

#include "sg_error.h"

#include <stdbool.h>

#define SG_TRUST_DOMAIN_MAX 255

/* True when td (NUL-terminated) is a trust domain by the rule above. */
SG_API bool sg_trust_domain_valid(const char *td);
/* Copies a valid td into out (cap bytes) with '@' replaced by '.'. SG_EINVAL
 * when td is not valid or does not fit. */
SG_API int sg_trust_domain_normalize(const char *td, char *out, size_t cap) SG_MUST_CHECK;

#endif
