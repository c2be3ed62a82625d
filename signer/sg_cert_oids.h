/*
 * The extension OIDs (RFC 5280 §4.2.1, content octets) that the encoder
 * writes and the lint reads back: one list for both. Private to signer/.
 */
#ifndef SG_CERT_OIDS_H
#define SG_CERT_OIDS_H

#include <stdint.h>

static const uint8_t OID_KU[] = {0x55, 0x1d, 0x0f};
static const uint8_t OID_SAN[] = {0x55, 0x1d, 0x11};
static const uint8_t OID_BC[] = {0x55, 0x1d, 0x13};
static const uint8_t OID_EKU[] = {0x55, 0x1d, 0x25};
static const uint8_t OID_SKI[] = {0x55, 0x1d, 0x0e};
static const uint8_t OID_AKI[] = {0x55, 0x1d, 0x23};

#endif
