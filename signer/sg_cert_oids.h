/*
 * The extension OIDs (RFC 5280 §4.2.1, content octets) that the encoder
 * writes and the lint reads back: one list for both. Private to signer/.
 */
#ifndef SG_CERT_OIDS_H
#define SG_CERT_OIDS_H

#include "sg_csr.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const uint8_t OID_KU[] = {0x55, 0x1d, 0x0f};
static const uint8_t OID_SAN[] = {0x55, 0x1d, 0x11};
static const uint8_t OID_BC[] = {0x55, 0x1d, 0x13};
static const uint8_t OID_EKU[] = {0x55, 0x1d, 0x25};
static const uint8_t OID_SKI[] = {0x55, 0x1d, 0x0e};
static const uint8_t OID_AKI[] = {0x55, 0x1d, 0x23};

/* The extKeyUsage purposes we know (sg_csr.h's SG_EKU_* bits), content
 * octets: the id-kp ones of RFC 5280 §4.2.1.12, anyExtendedKeyUsage, and
 * the two server-gated-crypto OIDs that Go and cert-manager name. The
 * encoder writes them in this order, the CSR parser maps them to bits and
 * the lint refuses any other purpose. */
typedef struct sg_eku_oid {
	uint32_t bit;
	uint8_t oid[10];
	uint8_t len;
} sg_eku_oid;

#define SG_ID_KP(n) {0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, (n)}, 8
static const sg_eku_oid SG_EKU_OIDS[] = {
    {SG_EKU_SERVER_AUTH, SG_ID_KP(1)},
    {SG_EKU_CLIENT_AUTH, SG_ID_KP(2)},
    {SG_EKU_CODE_SIGNING, SG_ID_KP(3)},
    {SG_EKU_EMAIL_PROTECTION, SG_ID_KP(4)},
    {SG_EKU_IPSEC_END_SYSTEM, SG_ID_KP(5)},
    {SG_EKU_IPSEC_TUNNEL, SG_ID_KP(6)},
    {SG_EKU_IPSEC_USER, SG_ID_KP(7)},
    {SG_EKU_TIME_STAMPING, SG_ID_KP(8)},
    {SG_EKU_OCSP_SIGNING, SG_ID_KP(9)},
    {SG_EKU_ANY, {0x55, 0x1d, 0x25, 0x00}, 4},
    {SG_EKU_MS_SGC, {0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x0a, 0x03, 0x03}, 10},
    {SG_EKU_NS_SGC, {0x60, 0x86, 0x48, 0x01, 0x86, 0xf8, 0x42, 0x04, 0x01}, 9},
};
#undef SG_ID_KP
#define SG_EKU_OIDS_COUNT (sizeof(SG_EKU_OIDS) / sizeof(SG_EKU_OIDS[0]))

/* The bit of the purpose oid (content octets), or SG_EKU_OTHER. */
static inline uint32_t sg_eku_bit_of(const uint8_t *oid, size_t len)
{
	for (size_t i = 0; i < SG_EKU_OIDS_COUNT; i++)
		if (SG_EKU_OIDS[i].len == len && memcmp(SG_EKU_OIDS[i].oid, oid, len) == 0)
			return SG_EKU_OIDS[i].bit;
	return SG_EKU_OTHER;
}

#endif
