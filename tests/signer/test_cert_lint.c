/*
 * Tests for sg_cert_lint_tbs: a good certificate of each profile passes;
 * a table of deliberately broken specs, each encoded by the real encoder,
 * is refused with SG_ELINT for its own reason; and byte-level damage to a
 * good TBSCertificate (what no spec can express) is refused too.
 */
#include "key_fixture.h"
#include "sg_cert.h"
#include "sg_test.h"

#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <string.h>

#define NOW 1800000000LL /* 2027-01-15 */

static sg_crypto *crypto;
static uint8_t ec_spki[512], rsa_spki[1024];
static sg_pubkey ec_key, rsa_key;
static const uint8_t issuer_name[] = {0x30, 0x12, 0x31, 0x10, 0x30, 0x0e, 0x06, 0x03, 0x55, 0x04, 0x03,
				      0x0c, 0x07, 'r',  'o',  'o',  't',  ' ',  'c',  'a'};
static const uint8_t issuer_kid[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
static sg_cert_issuer iss;

static void load_key(const char *kind, uint8_t *buf, size_t cap, sg_pubkey *out)
{
	uint8_t *p = buf;
	int n = i2d_PUBKEY(key_of(kind), NULL);
	SG_CHECK(n > 0 && (size_t)n <= cap);
	i2d_PUBKEY(key_of(kind), &p);
	SG_CHECK_OK(sg_pubkey_parse(out, buf, (size_t)n));
}

static void t_setup(void)
{
	SG_CHECK_OK(sg_crypto_new(&crypto));
	load_key("P-256", ec_spki, sizeof(ec_spki), &ec_key);
	load_key("rsa2048", rsa_spki, sizeof(rsa_spki), &rsa_key);
	iss = (sg_cert_issuer){
		.name_der = {issuer_name, sizeof(issuer_name)},
		.key_id = {issuer_kid, sizeof(issuer_kid)},
		.sigalg = SG_SIG_ECDSA_SHA256,
		.not_before = NOW - 86400,
		.not_after = NOW + 365 * 86400,
	};
}

#define S(str) {(const uint8_t *)(str), sizeof(str) - 1}
static const sg_san spiffe[] = {{SG_SAN_URI, S("spiffe://cluster.local/ns/default/sa/default")}};
static const sg_san dns[] = {{SG_SAN_DNS, S("web.example.com")}, {SG_SAN_DNS, S("*.example.com")},
			     {SG_SAN_IP, S("\x0a\x00\x00\x01")}, {SG_SAN_EMAIL, S("ops@example.com")}};
static const sg_rdn org[] = {{SG_NAME_O, SG_DER_UTF8STRING, S("example")},
			     {SG_NAME_CN, SG_DER_PRINTABLESTRING, S("issuing CA")}};

static sg_cert_spec istio_spec(void)
{
	sg_cert_spec s = {
		.serial = {0x41, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		.serial_len = 16,
		.not_before = NOW - 120,
		.not_after = NOW + 3600,
		.key = &ec_key,
		.sans = spiffe,
		.san_count = 1,
		.key_usage = SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT,
		.ext_key_usage = SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH,
		.path_len = -1,
	};
	return s;
}

static sg_cert_spec generic_spec(void)
{
	sg_cert_spec s = istio_spec();
	s.subject = org;
	s.subject_len = 1;
	s.sans = dns;
	s.san_count = 4;
	s.key = &rsa_key;
	return s;
}

static sg_cert_spec ca_spec(void)
{
	sg_cert_spec s = istio_spec();
	s.subject = org;
	s.subject_len = 2;
	s.sans = NULL;
	s.san_count = 0;
	s.key_usage = SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN | SG_KU_DIGITAL_SIGNATURE;
	s.ext_key_usage = 0;
	s.is_ca = true;
	s.path_len = 0;
	return s;
}

static uint8_t tbs_buf[SG_CERT_MAX_DER];

/* Encodes spec with the real encoder and lints it. */
static int lint(const sg_cert_spec *s, sg_lint_profile p, size_t *len)
{
	sg_der_writer w;
	sg_der_writer_init(&w, tbs_buf, sizeof(tbs_buf));
	SG_CHECK_OK(sg_cert_encode_tbs(&w, s, &iss, crypto));
	if (len)
		*len = w.len;
	return sg_cert_lint_tbs(w.buf, w.len, &iss, p);
}

static void t_good(void)
{
	sg_cert_spec s = istio_spec();
	SG_CHECK_OK(lint(&s, SG_LINT_ISTIO, NULL));
	s = generic_spec();
	SG_CHECK_OK(lint(&s, SG_LINT_LEAF, NULL));
	s = ca_spec();
	SG_CHECK_OK(lint(&s, SG_LINT_CA, NULL));
	s.path_len = -1;
	SG_CHECK_OK(lint(&s, SG_LINT_CA, NULL));
	/* GeneralizedTime from 2050 on */
	sg_cert_issuer long_iss = iss;
	iss.not_after = 2600000000LL;
	s = ca_spec();
	s.not_after = 2550000000LL;
	SG_CHECK_OK(lint(&s, SG_LINT_CA, NULL));
	iss = long_iss;
}

typedef struct broken {
	const char *what; /* a part of the lint's message */
	sg_lint_profile profile;
	void (*mutate)(sg_cert_spec *s);
	sg_cert_spec (*base)(void);
} broken;

static const sg_san bad_dns_space[] = {{SG_SAN_DNS, S("exa mple.com")}};
static const sg_san bad_dns_hyphen[] = {{SG_SAN_DNS, S("-web.example.com")}};
static const sg_san bad_dns_empty_label[] = {{SG_SAN_DNS, S("web..example.com")}};
static const sg_san bad_dns_wildcard[] = {{SG_SAN_DNS, S("web.*.example.com")}};
static const sg_san bad_dns_only_wildcard[] = {{SG_SAN_DNS, S("*")}};
static const sg_san bad_ip[] = {{SG_SAN_IP, S("\x0a\x00\x00\x01\x02")}};
static const sg_san bad_uri[] = {{SG_SAN_URI, S("cluster.local/ns/default")}};
static const sg_san bad_uri_space[] = {{SG_SAN_URI, S("spiffe://cluster.local/ns/a b")}};
static const sg_san bad_email[] = {{SG_SAN_EMAIL, S("ops.example.com")}};
static const sg_san bad_email_domain[] = {{SG_SAN_EMAIL, S("ops@exa mple")}};
static const sg_san empty_san[] = {{SG_SAN_URI, {(const uint8_t *)"", 0}}};
static const sg_rdn bad_printable[] = {{SG_NAME_CN, SG_DER_PRINTABLESTRING, S("a@b")}};
static const sg_rdn empty_attr[] = {{SG_NAME_CN, SG_DER_UTF8STRING, {(const uint8_t *)"", 0}}};
static const sg_rdn bad_utf8[] = {{SG_NAME_O, SG_DER_UTF8STRING, S("ex\xfb" "mple")}};
static const sg_rdn overlong_utf8[] = {{SG_NAME_O, SG_DER_UTF8STRING, S("\xc0\xaf" "etc")}};

static void m_serial_short(sg_cert_spec *s) { s->serial_len = 4; }
/* 20 octets with the high bit set encode as 21 (a 0x00 keeps it positive) */
static void m_serial_long(sg_cert_spec *s) { s->serial_len = 20; s->serial[0] = 0x80; }
static void m_inverted(sg_cert_spec *s) { s->not_after = s->not_before; }
static void m_outlives_issuer(sg_cert_spec *s) { s->not_after = iss.not_after + 1; }
static void m_before_issuer(sg_cert_spec *s) { s->not_before = iss.not_before - 1; }
static void m_no_san(sg_cert_spec *s) { s->san_count = 0; s->subject = org; s->subject_len = 1; }
static void m_nothing(sg_cert_spec *s) { s->san_count = 0; s->subject_len = 0; }
static void m_ca_flag(sg_cert_spec *s) { s->is_ca = true; }
static void m_no_ca_flag(sg_cert_spec *s) { s->is_ca = false; }
static void m_no_cert_sign(sg_cert_spec *s) { s->key_usage = SG_KU_DIGITAL_SIGNATURE; }
static void m_cert_sign_leaf(sg_cert_spec *s) { s->key_usage |= SG_KU_KEY_CERT_SIGN; }
static void m_crl_sign_leaf(sg_cert_spec *s) { s->key_usage |= SG_KU_CRL_SIGN; }
static void m_data_encipherment_ec(sg_cert_spec *s) { s->key_usage |= SG_KU_DATA_ENCIPHERMENT; }
static void m_key_agreement_rsa(sg_cert_spec *s) { s->key_usage |= SG_KU_KEY_AGREEMENT; }
static void m_no_ku(sg_cert_spec *s) { s->key_usage = 0; }
static void m_encipher_only(sg_cert_spec *s)
{
	s->key_usage = SG_KU_KEY_AGREEMENT | SG_KU_ENCIPHER_ONLY;
}
static void m_decipher_only(sg_cert_spec *s)
{
	s->key_usage = SG_KU_DIGITAL_SIGNATURE | SG_KU_DECIPHER_ONLY;
}
static void m_eku_on_ca(sg_cert_spec *s) { s->ext_key_usage = SG_EKU_SERVER_AUTH; }
static void m_nothing_changed(sg_cert_spec *s) { (void)s; }
static void m_dns_space(sg_cert_spec *s) { s->sans = bad_dns_space; s->san_count = 1; }
static void m_dns_hyphen(sg_cert_spec *s) { s->sans = bad_dns_hyphen; s->san_count = 1; }
static void m_dns_empty_label(sg_cert_spec *s) { s->sans = bad_dns_empty_label; s->san_count = 1; }
static void m_dns_wildcard(sg_cert_spec *s) { s->sans = bad_dns_wildcard; s->san_count = 1; }
static void m_dns_only_wildcard(sg_cert_spec *s) { s->sans = bad_dns_only_wildcard; s->san_count = 1; }
static void m_ip(sg_cert_spec *s) { s->sans = bad_ip; s->san_count = 1; }
static void m_uri(sg_cert_spec *s) { s->sans = bad_uri; s->san_count = 1; }
static void m_uri_space(sg_cert_spec *s) { s->sans = bad_uri_space; s->san_count = 1; }
static void m_email(sg_cert_spec *s) { s->sans = bad_email; s->san_count = 1; }
static void m_email_domain(sg_cert_spec *s) { s->sans = bad_email_domain; s->san_count = 1; }
static void m_empty_san(sg_cert_spec *s) { s->sans = empty_san; s->san_count = 1; }
static void m_printable(sg_cert_spec *s) { s->subject = bad_printable; s->subject_len = 1; }
static void m_empty_attr(sg_cert_spec *s) { s->subject = empty_attr; s->subject_len = 1; }
static void m_bad_utf8(sg_cert_spec *s) { s->subject = bad_utf8; s->subject_len = 1; }
static void m_overlong_utf8(sg_cert_spec *s) { s->subject = overlong_utf8; s->subject_len = 1; }
static void m_path_len_huge(sg_cert_spec *s) { s->path_len = 1000; }

static const broken table[] = {
    {"serial of 4 octets", SG_LINT_ISTIO, m_serial_short, istio_spec},
    {"serial of 21 octets", SG_LINT_ISTIO, m_serial_long, istio_spec},
    {"NotBefore is not before NotAfter", SG_LINT_ISTIO, m_inverted, istio_spec},
    {"outside the issuer's", SG_LINT_ISTIO, m_outlives_issuer, istio_spec},
    {"outside the issuer's", SG_LINT_ISTIO, m_before_issuer, istio_spec},
    {"a leaf without a subjectAltName", SG_LINT_ISTIO, m_no_san, istio_spec},
    {"a leaf without a subjectAltName", SG_LINT_ISTIO, m_nothing, istio_spec},
    {"cA TRUE outside the CA profile", SG_LINT_LEAF, m_ca_flag, generic_spec},
    {"a CA certificate without cA TRUE", SG_LINT_CA, m_no_ca_flag, ca_spec},
    {"a CA without keyCertSign", SG_LINT_CA, m_no_cert_sign, ca_spec},
    {"keyCertSign or cRLSign on a leaf", SG_LINT_LEAF, m_cert_sign_leaf, generic_spec},
    {"keyCertSign or cRLSign on a leaf", SG_LINT_ISTIO, m_crl_sign_leaf, istio_spec},
    {"keyEncipherment on an EC key", SG_LINT_LEAF, m_nothing_changed, istio_spec},
    {"dataEncipherment on an EC key", SG_LINT_ISTIO, m_data_encipherment_ec, istio_spec},
    {"keyAgreement on an RSA key", SG_LINT_LEAF, m_key_agreement_rsa, generic_spec},
    {"no keyUsage", SG_LINT_LEAF, m_no_ku, generic_spec},
    {"no keyUsage", SG_LINT_CA, m_no_ku, ca_spec},
    {"encipherOnly on an EC key", SG_LINT_LEAF, m_encipher_only, istio_spec},
    {"encipherOnly on an EC key", SG_LINT_ISTIO, m_encipher_only, istio_spec},
    {"decipherOnly on an RSA key", SG_LINT_LEAF, m_decipher_only, generic_spec},
    {"keyCertSign or cRLSign on a leaf", SG_LINT_ASKED, m_cert_sign_leaf, generic_spec},
    {"extKeyUsage on a CA certificate", SG_LINT_CA, m_eku_on_ca, ca_spec},
    {"pathLen 1000", SG_LINT_CA, m_path_len_huge, ca_spec},
    {"a dNSName that is not a host name", SG_LINT_LEAF, m_dns_space, generic_spec},
    {"a dNSName that is not a host name", SG_LINT_LEAF, m_dns_hyphen, generic_spec},
    {"a dNSName that is not a host name", SG_LINT_LEAF, m_dns_empty_label, generic_spec},
    {"a dNSName that is not a host name", SG_LINT_LEAF, m_dns_wildcard, generic_spec},
    {"a dNSName that is not a host name", SG_LINT_LEAF, m_dns_only_wildcard, generic_spec},
    {"an iPAddress of 5 octets", SG_LINT_LEAF, m_ip, generic_spec},
    {"a URI without a scheme", SG_LINT_ISTIO, m_uri, istio_spec},
    {"a URI without a scheme", SG_LINT_ISTIO, m_uri_space, istio_spec},
    {"an rfc822Name that is not local@domain", SG_LINT_LEAF, m_email, generic_spec},
    {"an rfc822Name that is not local@domain", SG_LINT_LEAF, m_email_domain, generic_spec},
    {"a URI without a scheme", SG_LINT_ISTIO, m_empty_san, istio_spec},
    {"a PrintableString with a character outside its set", SG_LINT_LEAF, m_printable, generic_spec},
    {"an empty subject attribute", SG_LINT_LEAF, m_empty_attr, generic_spec},
    {"a UTF8String that is not NUL-free UTF-8", SG_LINT_LEAF, m_bad_utf8, generic_spec},
    {"a UTF8String that is not NUL-free UTF-8", SG_LINT_LEAF, m_overlong_utf8, generic_spec},
};

static void t_broken_specs(void)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		sg_cert_spec s = table[i].base();
		table[i].mutate(&s);
		int rc = lint(&s, table[i].profile, NULL);
		if (rc != SG_ELINT || !strstr(sg_error_last()->msg, table[i].what))
			fprintf(stderr, "case %zu (%s): rc %d, %s\n", i, table[i].what, rc, sg_error_last()->msg);
		SG_CHECK(rc == SG_ELINT);
		SG_CHECK(strstr(sg_error_last()->msg, table[i].what) != NULL);
	}
}

/* Damage no spec can express, made to a good TBSCertificate. */
static void t_broken_bytes(void)
{
	sg_cert_spec s = istio_spec();
	size_t len;
	SG_CHECK_OK(lint(&s, SG_LINT_ISTIO, &len));
	static uint8_t copy[SG_CERT_MAX_DER + 1];
	memcpy(copy, tbs_buf, len);

	/* a byte after the TBSCertificate, and one missing */
	copy[len] = 0;
	SG_CHECK_RC(sg_cert_lint_tbs(copy, len + 1, &iss, SG_LINT_ISTIO), SG_ELINT);
	SG_CHECK_MSG("bytes after the TBSCertificate");
	SG_CHECK_RC(sg_cert_lint_tbs(copy, len - 1, &iss, SG_LINT_ISTIO), SG_ELINT);

	/* a negative serial (the encoder cannot write one): version
	 * a0 03 02 01 02, then the serial's INTEGER tag, length, first octet */
	for (size_t i = 0; i + 8 < len; i++) {
		if (!memcmp(copy + i, "\xa0\x03\x02\x01\x02\x02", 6)) {
			uint8_t was = copy[i + 7];
			copy[i + 7] = 0x80;
			SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &iss, SG_LINT_ISTIO), SG_ELINT);
			SG_CHECK_MSG("the serial is negative or not minimal");
			copy[i + 7] = 0x00;
			SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &iss, SG_LINT_ISTIO), SG_ELINT);
			SG_CHECK_MSG("the serial is negative or not minimal");
			copy[i + 7] = was;
			break;
		}
	}

	/* another issuer, another algorithm, another authority key id */
	sg_cert_issuer other = iss;
	static const uint8_t other_name[] = {0x30, 0x00};
	other.name_der = (sg_slice){other_name, sizeof(other_name)};
	SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &other, SG_LINT_ISTIO), SG_ELINT);
	SG_CHECK_MSG("the issuer is not the CA's Name");
	other = iss;
	other.sigalg = SG_SIG_ECDSA_SHA384;
	SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &other, SG_LINT_ISTIO), SG_ELINT);
	SG_CHECK_MSG("the signature algorithm is not the issuer's");
	other = iss;
	other.key_id = (sg_slice){issuer_kid, 19};
	SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &other, SG_LINT_ISTIO), SG_ELINT);
	SG_CHECK_MSG("authorityKeyIdentifier is not the issuer's");

	/* the SAN made non-critical although the subject is empty: find the
	 * SAN extension (OID 55 1d 11 followed by BOOLEAN TRUE) and turn the
	 * flag into a FALSE, which DER forbids too */
	for (size_t i = 0; i + 6 < len; i++) {
		if (copy[i] == 0x55 && copy[i + 1] == 0x1d && copy[i + 2] == 0x11 && copy[i + 3] == 0x01) {
			copy[i + 5] = 0x00;
			SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &iss, SG_LINT_ISTIO), SG_ELINT);
			SG_CHECK_MSG("critical FALSE explicitly");
			copy[i + 5] = 0xff;
		}
	}
	/* keyUsage duplicated: rename the SKI extension's OID to keyUsage */
	for (size_t i = 0; i + 3 < len; i++) {
		if (copy[i] == 0x06 && copy[i + 1] == 0x03 && copy[i + 2] == 0x55 && copy[i + 3] == 0x1d &&
		    copy[i + 4] == 0x0e) {
			copy[i + 4] = 0x0f;
			SG_CHECK_RC(sg_cert_lint_tbs(copy, len, &iss, SG_LINT_ISTIO), SG_ELINT);
			copy[i + 4] = 0x0e;
		}
	}
	SG_CHECK_OK(sg_cert_lint_tbs(copy, len, &iss, SG_LINT_ISTIO));
}

static void t_teardown(void)
{
	sg_crypto_free(crypto);
}

/* SG_LINT_ASKED: a leaf with the usages a request named, issued as asked.
 * Every keyUsage bit a leaf may carry on either key type, keyUsage left
 * out, every extKeyUsage purpose we know; what OpenSSL reads back is what
 * was asked (decipherOnly takes keyUsage's second octet). A purpose we do
 * not write is refused in every profile. */
static void t_asked(void)
{
	static const uint32_t all_ku = SG_KU_DIGITAL_SIGNATURE | SG_KU_NON_REPUDIATION | SG_KU_KEY_ENCIPHERMENT |
	                               SG_KU_DATA_ENCIPHERMENT | SG_KU_KEY_AGREEMENT | SG_KU_ENCIPHER_ONLY |
	                               SG_KU_DECIPHER_ONLY;
	static const uint32_t all_eku = SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH | SG_EKU_CODE_SIGNING |
	                                SG_EKU_EMAIL_PROTECTION | SG_EKU_OCSP_SIGNING | SG_EKU_IPSEC_END_SYSTEM |
	                                SG_EKU_IPSEC_TUNNEL | SG_EKU_IPSEC_USER | SG_EKU_TIME_STAMPING | SG_EKU_ANY |
	                                SG_EKU_MS_SGC | SG_EKU_NS_SGC;
	for (int rsa = 0; rsa < 2; rsa++) {
		sg_cert_spec s = rsa ? generic_spec() : istio_spec();
		s.key_usage = all_ku;
		s.ext_key_usage = all_eku;
		size_t len = 0;
		SG_CHECK_OK(lint(&s, SG_LINT_ASKED, &len));
		/* as OpenSSL reads it (the signature is a dummy) */
		static uint8_t cert[SG_CERT_MAX_DER + 64];
		static const uint8_t sig[] = {0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01};
		sg_der_writer w;
		sg_der_writer_init(&w, cert, sizeof(cert));
		SG_CHECK_OK(sg_cert_encode(&w, tbs_buf, len, SG_SIG_ECDSA_SHA256, sig, sizeof(sig)));
		const uint8_t *p = cert;
		X509 *x = d2i_X509(NULL, &p, (long)w.len);
		SG_CHECK(x != NULL);
		if (x) {
			SG_CHECK(X509_get_key_usage(x) ==
			         (KU_DIGITAL_SIGNATURE | KU_NON_REPUDIATION | KU_KEY_ENCIPHERMENT |
			          KU_DATA_ENCIPHERMENT | KU_KEY_AGREEMENT | KU_ENCIPHER_ONLY | KU_DECIPHER_ONLY));
			EXTENDED_KEY_USAGE *eku = X509_get_ext_d2i(x, NID_ext_key_usage, NULL, NULL);
			SG_CHECK(eku && sk_ASN1_OBJECT_num(eku) == 12);
			uint32_t xku = X509_get_extended_key_usage(x);
			SG_CHECK((xku & (XKU_SSL_SERVER | XKU_SSL_CLIENT | XKU_SMIME | XKU_CODE_SIGN | XKU_SGC |
			                 XKU_OCSP_SIGN | XKU_TIMESTAMP | XKU_ANYEKU)) ==
			         (XKU_SSL_SERVER | XKU_SSL_CLIENT | XKU_SMIME | XKU_CODE_SIGN | XKU_SGC |
			          XKU_OCSP_SIGN | XKU_TIMESTAMP | XKU_ANYEKU));
			EXTENDED_KEY_USAGE_free(eku);
			X509_free(x);
		}
		/* The same certificate is refused where nobody asked for it. */
		SG_CHECK_RC(lint(&s, SG_LINT_LEAF, NULL), SG_ELINT);
		s.key_usage = 0;
		SG_CHECK_OK(lint(&s, SG_LINT_ASKED, NULL));
		s.key_usage = SG_KU_DECIPHER_ONLY;
		SG_CHECK_OK(lint(&s, SG_LINT_ASKED, NULL));
	}
	/* An unknown purpose: id-kp 10 in place of serverAuth's id-kp 1. */
	sg_cert_spec s = generic_spec();
	s.ext_key_usage = SG_EKU_SERVER_AUTH;
	size_t len = 0;
	SG_CHECK_OK(lint(&s, SG_LINT_ASKED, &len));
	static const uint8_t server_auth[] = {0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01};
	uint8_t *at = NULL;
	for (size_t i = 0; !at && i + sizeof(server_auth) <= len; i++)
		if (memcmp(tbs_buf + i, server_auth, sizeof(server_auth)) == 0)
			at = tbs_buf + i;
	SG_CHECK(at != NULL);
	if (at) {
		at[sizeof(server_auth) - 1] = 10;
		SG_CHECK_RC(sg_cert_lint_tbs(tbs_buf, len, &iss, SG_LINT_ASKED), SG_ELINT);
		SG_CHECK_MSG("an extKeyUsage purpose we do not write");
	}
}

SG_TEST_MAIN(SG_TEST(t_setup), SG_TEST(t_good), SG_TEST(t_broken_specs), SG_TEST(t_broken_bytes), SG_TEST(t_asked),
             SG_TEST(t_teardown))
