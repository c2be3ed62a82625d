/*
 * Fuzz target for the certificate lint: the input is turned into a spec
 * (serial, validity, subject attributes, SANs of any type and bytes, key
 * usages, CA flag, path length, key type, profile), encoded by the real
 * encoder and linted. Whatever the lint accepts is what would be signed, so
 * it is "signed" here: wrapped with a dummy signature and handed to
 * OpenSSL, which must parse it and agree with the rules (v3, a positive
 * serial, cA exactly in the CA profile, keyCertSign exactly on CAs, a SAN
 * on every leaf, no keyEncipherment on an EC key outside the Istio
 * profile). A certificate the lint refused is never built.
 */
#include "sg_cert.h"

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct input {
	const uint8_t *p;
	size_t n;
} input;

static uint8_t take(input *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static sg_slice take_bytes(input *in, size_t max)
{
	size_t n = take(in) % (max + 1);
	if (n > in->n)
		n = in->n;
	sg_slice s = {in->p, n};
	in->p += n;
	in->n -= n;
	return s;
}

static sg_crypto *crypto;
static sg_pubkey keys[2];
static uint8_t spki[2][1024];

static void init(void)
{
	if (crypto)
		return;
	if (sg_crypto_new(&crypto) != SG_OK)
		abort();
	EVP_PKEY *k[2] = {EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256"), EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048)};
	for (int i = 0; i < 2; i++) {
		uint8_t *p = spki[i];
		int n = k[i] ? i2d_PUBKEY(k[i], NULL) : -1;
		if (n <= 0 || n > (int)sizeof(spki[i]) || i2d_PUBKEY(k[i], &p) != n ||
		    sg_pubkey_parse(&keys[i], spki[i], (size_t)n) != SG_OK)
			abort();
		EVP_PKEY_free(k[i]);
	}
}

/* The certificate the lint accepted, checked by an independent parser. */
/* ec: 1 or 0 for the key type, -1 when not known. */
static void sign_and_check(const uint8_t *tbs, size_t len, sg_lint_profile profile, int ec)
{
	static uint8_t cert[SG_CERT_MAX_DER + 64];
	static const uint8_t sig[] = {0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01};
	sg_der_writer w;
	sg_der_writer_init(&w, cert, sizeof(cert));
	if (sg_cert_encode(&w, tbs, len, SG_SIG_ECDSA_SHA256, sig, sizeof(sig)) != SG_OK)
		abort();
	const uint8_t *p = cert;
	X509 *x = d2i_X509(NULL, &p, (long)w.len);
	if (!x || p != cert + w.len || X509_get_version(x) != X509_VERSION_3)
		abort();
	const ASN1_INTEGER *serial = X509_get0_serialNumber(x);
	if (ASN1_STRING_type(serial) == V_ASN1_NEG_INTEGER)
		abort();
	/* keyUsage may be absent (SG_LINT_ASKED): then no bit at all */
	uint32_t ku = (X509_get_extension_flags(x) & EXFLAG_KUSAGE) ? X509_get_key_usage(x) : 0;
	bool ca = X509_check_ca(x) == 1;
	if (ca != (profile == SG_LINT_CA) || ((ku & KU_KEY_CERT_SIGN) != 0) != ca)
		abort();
	int crit = -1;
	GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
	if (profile != SG_LINT_CA && !sans)
		abort();
	if (ec == 1 && profile != SG_LINT_ISTIO && profile != SG_LINT_ASKED &&
	    (ku & (KU_KEY_ENCIPHERMENT | KU_DATA_ENCIPHERMENT)))
		abort();
	if (profile != SG_LINT_ASKED && (ku & (KU_ENCIPHER_ONLY | KU_DECIPHER_ONLY)))
		abort();
	if (profile != SG_LINT_ASKED && !(X509_get_extension_flags(x) & EXFLAG_KUSAGE))
		abort();
	GENERAL_NAMES_free(sans);
	X509_free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init();
	input in = {data, size};
	sg_lint_profile profile = (sg_lint_profile)(take(&in) % 4);
	bool ec = !(take(&in) & 1);
	sg_cert_spec s = {.key = &keys[ec ? 0 : 1], .path_len = -1};
	sg_slice serial = take_bytes(&in, 20);
	memcpy(s.serial, serial.p, serial.len);
	s.serial_len = serial.len;
	int64_t now = 1800000000LL;
	s.not_before = now + (int8_t)take(&in) * 3600LL;
	uint8_t hi = take(&in), lo = take(&in);
	s.not_after = s.not_before + (int16_t)(hi << 8 | lo) * 3600LL;

	sg_rdn rdns[4];
	static const uint8_t tags[] = {SG_DER_UTF8STRING, SG_DER_PRINTABLESTRING, SG_DER_IA5STRING, SG_DER_OCTET_STRING};
	s.subject_len = take(&in) % 4;
	for (size_t i = 0; i < s.subject_len; i++) {
		rdns[i].attr = (sg_name_attr)(take(&in) % 10);
		rdns[i].string_tag = tags[take(&in) % 4];
		rdns[i].value = take_bytes(&in, 40);
	}
	s.subject = rdns;

	sg_san sans[5];
	static const sg_san_type types[] = {SG_SAN_EMAIL, SG_SAN_DNS, SG_SAN_URI, SG_SAN_IP};
	s.san_count = take(&in) % 5;
	for (size_t i = 0; i < s.san_count; i++) {
		sans[i].type = types[take(&in) % 4];
		sans[i].value = take_bytes(&in, 64);
	}
	s.sans = sans;
	s.key_usage = take(&in);
	s.key_usage |= (take(&in) & 1u) << 8; /* decipherOnly */
	s.ext_key_usage = take(&in);
	s.ext_key_usage |= (take(&in) & 0xfu) << 8;
	s.is_ca = take(&in) & 1;
	if (s.is_ca && (take(&in) & 1))
		s.path_len = take(&in) % 20;

	static const uint8_t name[] = {0x30, 0x0d, 0x31, 0x0b, 0x30, 0x09, 0x06, 0x03, 0x55, 0x04, 0x03,
				       0x0c, 0x02, 'c',  'a'};
	static const uint8_t kid[20] = {1};
	sg_cert_issuer iss = {
		.name_der = {name, sizeof(name)},
		.key_id = {kid, (take(&in) & 1) ? sizeof(kid) : 0},
		.sigalg = SG_SIG_ECDSA_SHA256,
		.not_before = now - 86400 * 30,
		.not_after = now + 86400 * 3650,
	};

	static uint8_t tbs[SG_CERT_MAX_DER];
	sg_der_writer w;
	sg_der_writer_init(&w, tbs, sizeof(tbs));
	if (sg_cert_encode_tbs(&w, &s, &iss, crypto) != SG_OK)
		return 0;
	if (sg_cert_lint_tbs(w.buf, w.len, &iss, profile) == SG_OK)
		sign_and_check(w.buf, w.len, profile, ec ? 1 : 0);
	/* The raw input linted as a TBS too: the reader must hold, and what it
	 * accepts must parse. */
	if (size <= SG_CERT_MAX_DER && sg_cert_lint_tbs(data, size, &iss, profile) == SG_OK)
		sign_and_check(data, size, profile, -1);
	return 0;
}
