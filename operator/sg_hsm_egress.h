/*
 * sg_hsm_egress: the HSM Secret's hsm-egress value read into
 * NetworkPolicy egress rules (the IstioCSR reconciler's
 * istio-csr-allow-egress-to-hsm, operator/README.md).
 *
 * The value: a network HSM's addresses, entries separated by commas,
 * spaces, tabs or newlines, each "IPv4[/len]:port" or "[IPv6[/len]]:port"
 * (brackets because an IPv6 address holds colons), e.g.
 * "10.0.8.20:1792,[fd00::20]:1792". A host without a length is one
 * address (/32, /128); a port is 1..65535 in plain decimal; an address
 * is what inet_pton(3) takes. A NetworkPolicy can only name addresses
 * (ipBlock), not host names: a host name is refused.
 *
 * Pure: no I/O, no globals; any thread.
 */
#ifndef SG_HSM_EGRESS_H
#define SG_HSM_EGRESS_H

#include "sg_error.h"

#include <jansson.h>
#include <stddef.h>

#define SG_HSM_EGRESS_MAX 4096 /* bytes of the value */

/* The egress rules, one per entry in order: {"to": [{"ipBlock": {"cidr":
 * "<address>/<len>"}}], "ports": [{"protocol": "TCP", "port": <port>}]};
 * a new array the caller releases. NULL with why set (a sentence in
 * printable ASCII, the refused entry quoted with other bytes shown as '?')
 * when text (len bytes) is longer than SG_HSM_EGRESS_MAX, holds a NUL
 * byte, names no address or has an entry of another form; NULL with why
 * empty when out of memory. cap >= 1. */
SG_API json_t *sg_hsm_egress_rules(const char *text, size_t len, char *why, size_t cap);

#endif
