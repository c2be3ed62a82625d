/*
 * sg_spiffe: the SPIFFE naming rules signet applies, in one place. A trust
 * domain is what follows "spiffe://" up to the first '/': 1 to 255 bytes of
 * printable ASCII without '/' (istio-csr also turns '@' into '.', which the
 * mTLS authenticator does where it builds its prefix).
 */
#ifndef SG_SPIFFE_H
#define SG_SPIFFE_H

#include "sg_error.h"

#include <stdbool.h>

#define SG_TRUST_DOMAIN_MAX 255

/* True when td (NUL-terminated) is a trust domain by the rule above. */
SG_API bool sg_trust_domain_valid(const char *td);

#endif
