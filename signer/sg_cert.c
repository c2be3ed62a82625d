/*
 * Certificate encoder (RFC 5280 §4.1, §4.2); its output is linted by
 * sg_cert_lint.c before anything is signed.
 *
 * The TBSCertificate is written in one pass into a caller-owned buffer with
 * the DER writer; no OpenSSL object is built, so the hot path takes none of
 * OpenSSL 3.0's decoder or fetch locks and allocates nothing. The only crypto
 * here is the SHA-1 of the subject key for its key identifier.
 */
#include "sg_cert.h"
#include "sg_cert_oids.h"
#include "sg_guard.h"

#include <string.h>

static const struct {
	sg_name_attr attr;
	uint8_t oid[10];
	size_t len;
} name_oids[] = {
	{SG_NAME_CN, {0x55, 0x04, 0x03}, 3},
	{SG_NAME_SERIAL, {0x55, 0x04, 0x05}, 3},
	{SG_NAME_C, {0x55, 0x04, 0x06}, 3},
	{SG_NAME_L, {0x55, 0x04, 0x07}, 3},
	{SG_NAME_ST, {0x55, 0x04, 0x08}, 3},
	{SG_NAME_STREET, {0x55, 0x04, 0x09}, 3},
	{SG_NAME_O, {0x55, 0x04, 0x0a}, 3},
	{SG_NAME_OU, {0x55, 0x04, 0x0b}, 3},
	{SG_NAME_DC, {0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19}, 10},
	{SG_NAME_EMAIL, {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01}, 9},
};

int sg_cert_serial(sg_cert_spec *spec)
{
	SG_TRY(sg_crypto_random(spec->serial, SG_SERIAL_LEN));
	/* Clear the sign bit and set the next one: positive, and the first octet
	 * is never zero, so the DER INTEGER is always exactly 16 octets. */
	spec->serial[0] = (uint8_t)((spec->serial[0] & 0x3f) | 0x40);
	spec->serial_len = SG_SERIAL_LEN;
	return SG_OK;
}

void sg_name_encode(sg_der_writer *w, const sg_rdn *rdns, size_t n)
{
	size_t name = sg_der_begin(w, SG_DER_SEQUENCE);
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < sizeof(name_oids) / sizeof(name_oids[0]); j++) {
			if (name_oids[j].attr != rdns[i].attr)
				continue;
			size_t set = sg_der_begin(w, SG_DER_SET);
			size_t atv = sg_der_begin(w, SG_DER_SEQUENCE);
			sg_der_prim(w, SG_DER_OID, name_oids[j].oid, name_oids[j].len);
			sg_der_prim(w, rdns[i].string_tag, rdns[i].value.p, rdns[i].value.len);
			sg_der_end(w, atv);
			sg_der_end(w, set);
		}
	}
	sg_der_end(w, name);
}

/* keyUsage is a named bit list: bit 0 is the most significant bit of the
 * first octet, and DER drops trailing zero bits (X.690 §11.2.2), so
 * decipherOnly (bit 8) takes a second octet and the others one. ku is not
 * 0 (the extension is left out then). */
static void key_usage_bits(sg_der_writer *w, uint32_t ku)
{
	uint8_t body[3] = {0};
	size_t octets = 1;
	for (unsigned bit = 0; bit <= 8; bit++) {
		if (!(ku & (1u << bit)))
			continue;
		body[1 + bit / 8] |= (uint8_t)(0x80u >> (bit % 8));
		octets = bit / 8 + 1;
	}
	uint8_t last = body[octets], unused = 0;
	while (unused < 7 && !(last & (1u << unused)))
		unused++;
	body[0] = unused;
	sg_der_prim(w, SG_DER_BIT_STRING, body, 1 + octets);
}

static size_t ext_begin(sg_der_writer *w, const uint8_t *oid, size_t oid_len, bool critical, size_t *octets)
{
	size_t ext = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_prim(w, SG_DER_OID, oid, oid_len);
	if (critical)
		sg_der_bool(w, true);
	*octets = sg_der_begin(w, SG_DER_OCTET_STRING);
	return ext;
}

static void ext_end(sg_der_writer *w, size_t ext, size_t octets)
{
	sg_der_end(w, octets);
	sg_der_end(w, ext);
}

int sg_key_id(sg_crypto *c, const sg_pubkey *k, uint8_t out[20])
{
	/* Hash the bits as we encode them, not as the requester sent them. */
	uint8_t buf[SG_CERT_MAX_DER / 8];
	sg_der_writer w;
	sg_der_writer_init(&w, buf, sizeof(buf));
	if (k->kind == SG_PUBKEY_EC) {
		sg_der_raw(&w, k->point.p, k->point.len);
	} else {
		size_t seq = sg_der_begin(&w, SG_DER_SEQUENCE);
		sg_der_uint_bytes(&w, k->n.p, k->n.len);
		sg_der_uint_bytes(&w, k->e.p, k->e.len);
		sg_der_end(&w, seq);
	}
	SG_TRY(sg_der_writer_status(&w));
	return sg_crypto_digest(c, SG_HASH_SHA1, w.buf, w.len, out);
}

static void write_extensions(sg_der_writer *w, const sg_cert_spec *s, const sg_cert_issuer *iss,
			     const uint8_t ski[20])
{
	size_t ctx3 = sg_der_begin(w, SG_DER_CTX3);
	size_t exts = sg_der_begin(w, SG_DER_SEQUENCE);
	size_t ext, oct;

	if (s->key_usage) {
		ext = ext_begin(w, OID_KU, sizeof(OID_KU), true, &oct);
		key_usage_bits(w, s->key_usage);
		ext_end(w, ext, oct);
	}
	if (s->ext_key_usage) {
		ext = ext_begin(w, OID_EKU, sizeof(OID_EKU), false, &oct);
		size_t seq = sg_der_begin(w, SG_DER_SEQUENCE);
		for (size_t i = 0; i < SG_EKU_OIDS_COUNT; i++)
			if (s->ext_key_usage & SG_EKU_OIDS[i].bit)
				sg_der_prim(w, SG_DER_OID, SG_EKU_OIDS[i].oid, SG_EKU_OIDS[i].len);
		sg_der_end(w, seq);
		ext_end(w, ext, oct);
	}
	ext = ext_begin(w, OID_BC, sizeof(OID_BC), true, &oct);
	size_t bc = sg_der_begin(w, SG_DER_SEQUENCE);
	if (s->is_ca) {
		sg_der_bool(w, true);
		if (s->path_len >= 0)
			sg_der_uint(w, (uint64_t)s->path_len);
	}
	sg_der_end(w, bc);
	ext_end(w, ext, oct);

	ext = ext_begin(w, OID_SKI, sizeof(OID_SKI), false, &oct);
	sg_der_prim(w, SG_DER_OCTET_STRING, ski, 20);
	ext_end(w, ext, oct);

	if (iss->key_id.len) {
		ext = ext_begin(w, OID_AKI, sizeof(OID_AKI), false, &oct);
		size_t aki = sg_der_begin(w, SG_DER_SEQUENCE);
		sg_der_prim(w, 0x80, iss->key_id.p, iss->key_id.len);
		sg_der_end(w, aki);
		ext_end(w, ext, oct);
	}
	if (s->san_count) {
		ext = ext_begin(w, OID_SAN, sizeof(OID_SAN), s->subject_len == 0, &oct);
		size_t names = sg_der_begin(w, SG_DER_SEQUENCE);
		for (size_t i = 0; i < s->san_count; i++)
			sg_der_prim(w, (uint8_t)(0x80 | s->sans[i].type), s->sans[i].value.p, s->sans[i].value.len);
		sg_der_end(w, names);
		ext_end(w, ext, oct);
	}
	sg_der_end(w, exts);
	sg_der_end(w, ctx3);
}

int sg_cert_encode_tbs(sg_der_writer *w, const sg_cert_spec *s, const sg_cert_issuer *iss, sg_crypto *c)
{
	uint8_t ski[20];
	SG_TRY(sg_key_id(c, s->key, ski));

	size_t tbs = sg_der_begin(w, SG_DER_SEQUENCE);
	size_t ver = sg_der_begin(w, SG_DER_CTX0);
	sg_der_uint(w, 2); /* v3 */
	sg_der_end(w, ver);
	sg_der_uint_bytes(w, s->serial, s->serial_len);
	sg_sigalg_encode(w, iss->sigalg);
	sg_der_raw(w, iss->name_der.p, iss->name_der.len);
	size_t validity = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_time(w, s->not_before);
	sg_der_time(w, s->not_after);
	sg_der_end(w, validity);
	sg_name_encode(w, s->subject, s->subject_len);
	sg_pubkey_encode(w, s->key);
	write_extensions(w, s, iss, ski);
	sg_der_end(w, tbs);
	return sg_der_writer_status(w);
}

int sg_cert_encode(sg_der_writer *w, const uint8_t *tbs, size_t tbs_len, sg_sigalg alg, const uint8_t *sig,
		   size_t sig_len)
{
	size_t cert = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_raw(w, tbs, tbs_len);
	sg_sigalg_encode(w, alg);
	sg_der_bits(w, sig, sig_len);
	sg_der_end(w, cert);
	return sg_der_writer_status(w);
}

int sg_csr_encode_info(sg_der_writer *w, const sg_rdn *rdns, size_t n, const sg_pubkey *key)
{
	size_t info = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_uint(w, 0);
	sg_name_encode(w, rdns, n);
	sg_pubkey_encode(w, key);
	size_t attrs = sg_der_begin(w, SG_DER_CTX0);
	sg_der_end(w, attrs);
	sg_der_end(w, info);
	return sg_der_writer_status(w);
}

