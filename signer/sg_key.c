/*
 * sg_key: SubjectPublicKeyInfo and AlgorithmIdentifier, parsed to policy.
 *
 * Implements, for the keys and algorithms signet accepts:
 *   - SubjectPublicKeyInfo, RFC 5280 §4.1.2.7;
 *   - EC keys, RFC 5480 §2.1.1 (namedCurve only) and §2.2 (the point, which
 *     we accept only uncompressed: SEC 1 §2.3.3 form 0x04 || X || Y);
 *   - RSA keys, RFC 3279 §2.3.1 (rsaEncryption with NULL parameters) and
 *     RFC 8017 Appendix A.1.1 (RSAPublicKey);
 *   - signature AlgorithmIdentifiers, RFC 5758 §3.2 (ecdsa-with-SHA*,
 *     parameters absent) and RFC 4055 §5 (sha*WithRSAEncryption, NULL
 *     parameters);
 *   - DigestInfo prefixes, RFC 8017 §9.2 note 1;
 *   - Ecdsa-Sig-Value, RFC 5480 §2.2 / X9.62.
 *
 * This file does not link OpenSSL: it only reads and writes DER with the
 * bounded reader/writer of sg_der, so it can be fuzzed and reasoned about on
 * its own. Whether an EC point is really on its curve is checked where the
 * key is used (sg_crypto_verify), because that needs field arithmetic.
 *
 * The parse is strict enough that sg_pubkey_encode reproduces the input
 * byte for byte: every field has exactly one DER encoding, and we accept no
 * optional variants (EC parameters must be a namedCurve OID, RSA parameters
 * must be NULL).
 */
#include "sg_key.h"
#include "sg_guard.h"

#include <stdio.h>
#include <string.h>

/* Content octets of the OIDs this file knows. */
static const uint8_t OID_EC_PUBLIC_KEY[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01};
static const uint8_t OID_P256[] = {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
static const uint8_t OID_P384[] = {0x2b, 0x81, 0x04, 0x00, 0x22};
static const uint8_t OID_RSA_ENCRYPTION[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01};

/* Public key algorithms we recognise only to refuse them by name. */
static const struct {
	uint8_t oid[10];
	size_t len;
	const char *name;
} refused_key_algs[] = {
	{{0x2b, 0x65, 0x70}, 3, "Ed25519"},
	{{0x2b, 0x65, 0x71}, 3, "Ed448"},
	{{0x2b, 0x65, 0x6e}, 3, "X25519"},
	{{0x2b, 0x65, 0x6f}, 3, "X448"},
	{{0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01}, 7, "DSA"},
	{{0x2a, 0x86, 0x48, 0xce, 0x3e, 0x02, 0x01}, 7, "Diffie-Hellman"},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a}, 9, "RSASSA-PSS"},
	{{0x2b, 0x81, 0x04, 0x01, 0x0c}, 5, "ECDH-only EC"},
};

/* Signature algorithms: the six we accept, and the ones refused by name. */
typedef enum alg_verdict { ALG_OK, ALG_WEAK, ALG_UNSUPPORTED } alg_verdict;

static const struct sigalg_entry {
	uint8_t oid[10];
	size_t len;
	const char *name;
	alg_verdict verdict;
	sg_sigalg alg; /* when ALG_OK */
} sigalgs[] = {
	{{0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02}, 8, "ecdsa-with-SHA256", ALG_OK, SG_SIG_ECDSA_SHA256},
	{{0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03}, 8, "ecdsa-with-SHA384", ALG_OK, SG_SIG_ECDSA_SHA384},
	{{0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04}, 8, "ecdsa-with-SHA512", ALG_OK, SG_SIG_ECDSA_SHA512},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b}, 9, "sha256WithRSAEncryption", ALG_OK,
	 SG_SIG_RSA_SHA256},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c}, 9, "sha384WithRSAEncryption", ALG_OK,
	 SG_SIG_RSA_SHA384},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d}, 9, "sha512WithRSAEncryption", ALG_OK,
	 SG_SIG_RSA_SHA512},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x02}, 9, "md2WithRSAEncryption", ALG_WEAK, 0},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04}, 9, "md5WithRSAEncryption", ALG_WEAK, 0},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05}, 9, "sha1WithRSAEncryption", ALG_WEAK, 0},
	{{0x2b, 0x0e, 0x03, 0x02, 0x1d}, 5, "sha1WithRSASignature", ALG_WEAK, 0},
	{{0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01}, 7, "ecdsa-with-SHA1", ALG_WEAK, 0},
	{{0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03}, 7, "dsa-with-SHA1", ALG_WEAK, 0},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a}, 9, "RSASSA-PSS", ALG_UNSUPPORTED, 0},
	{{0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0e}, 9, "sha224WithRSAEncryption", ALG_UNSUPPORTED, 0},
	{{0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x01}, 8, "ecdsa-with-SHA224", ALG_UNSUPPORTED, 0},
	{{0x2b, 0x65, 0x70}, 3, "Ed25519", ALG_UNSUPPORTED, 0},
	{{0x2b, 0x65, 0x71}, 3, "Ed448", ALG_UNSUPPORTED, 0},
	{{0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x02}, 9, "dsa-with-SHA256", ALG_UNSUPPORTED, 0},
};

/* DigestInfo prefixes, RFC 8017 §9.2 note 1: DER of
 * SEQUENCE { SEQUENCE { hash OID, NULL }, OCTET STRING (hash length) }
 * up to the hash value itself. Indexed by sg_hash. */
static const struct {
	uint8_t prefix[19];
	size_t len;
	size_t hash_len;
} hashes[SG_HASH_COUNT] = {
	[SG_HASH_SHA1] = {{0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04, 0x14},
			  15, 20},
	[SG_HASH_SHA256] = {{0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
			     0x01, 0x05, 0x00, 0x04, 0x20},
			    19, 32},
	[SG_HASH_SHA384] = {{0x30, 0x41, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
			     0x02, 0x05, 0x00, 0x04, 0x30},
			    19, 48},
	[SG_HASH_SHA512] = {{0x30, 0x51, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02,
			     0x03, 0x05, 0x00, 0x04, 0x40},
			    19, 64},
};

#define RSA_MIN_BITS 2048
#define RSA_MAX_BITS 8192
#define RSA_MAX_EXPONENT_BYTES 8 /* OpenSSL refuses e > 64 bits for large n */

const char *sg_oid_format(sg_slice oid, char *buf, size_t cap)
{
	/* X.690 §8.19: first subidentifier packs the first two arcs; base-128
	 * with continuation bits. Anything malformed prints as "(bad OID)". */
	size_t used = 0;
	uint64_t v = 0;
	bool first = true, ok = oid.len > 0 && cap > 0;
	if (cap > 0)
		buf[0] = '\0';
	for (size_t i = 0; ok && i < oid.len; i++) {
		if (v == 0 && oid.p[i] == 0x80) /* non-minimal subidentifier */
			ok = false;
		if (v > (UINT64_MAX >> 7))
			ok = false;
		v = (v << 7) | (oid.p[i] & 0x7f);
		if (oid.p[i] & 0x80) {
			if (i + 1 == oid.len)
				ok = false;
			continue;
		}
		int n;
		if (first) {
			unsigned a = v < 40 ? 0 : v < 80 ? 1 : 2;
			n = snprintf(buf + used, cap - used, "%u.%llu", a, (unsigned long long)(v - 40u * a));
			first = false;
		} else {
			n = snprintf(buf + used, cap - used, ".%llu", (unsigned long long)v);
		}
		if (n < 0 || (size_t)n >= cap - used)
			ok = false;
		else
			used += (size_t)n;
		v = 0;
	}
	if (!ok && cap > 0)
		snprintf(buf, cap, "(bad OID)");
	return buf;
}

static bool oid_is(sg_slice oid, const uint8_t *want, size_t len)
{
	return sg_slice_eq(oid, want, len);
}

/* Bits in an unsigned big-endian magnitude without leading zero octets. */
static unsigned magnitude_bits(sg_slice m)
{
	if (m.len == 0)
		return 0;
	unsigned bits = (unsigned)(m.len - 1) * 8;
	for (uint8_t top = m.p[0]; top; top >>= 1)
		bits++;
	return bits;
}

/*
 *   ECParameters ::= CHOICE { namedCurve OBJECT IDENTIFIER, ... }   RFC 5480
 *   ECPoint: 0x04 || X || Y                                        SEC 1
 */
static int parse_ec(sg_pubkey *k, sg_reader *params, sg_slice point)
{
	uint8_t tag;
	SG_ENSURE(sg_der_peek(params, &tag) == SG_OK && tag == SG_DER_OID, SG_EINVAL,
		  "EC key parameters must name a curve (implicit or explicit curves are not supported)");
	sg_slice curve;
	SG_TRY(sg_der_read(params, SG_DER_OID, &curve, NULL));
	SG_ENSURE(sg_reader_done(params), SG_EINVAL, "EC key parameters have trailing data");

	size_t field;
	if (oid_is(curve, OID_P256, sizeof(OID_P256))) {
		k->curve = SG_CURVE_P256;
		field = 32;
	} else if (oid_is(curve, OID_P384, sizeof(OID_P384))) {
		k->curve = SG_CURVE_P384;
		field = 48;
	} else {
		char buf[64];
		SG_BAIL(SG_EINVAL, "EC curve %s is not supported (P-256 and P-384 only)",
			sg_oid_format(curve, buf, sizeof(buf)));
	}
	SG_ENSURE(point.len >= 1, SG_EINVAL, "EC public key is empty");
	SG_ENSURE(point.p[0] != 0x02 && point.p[0] != 0x03, SG_EINVAL,
		  "compressed EC points are not supported");
	SG_ENSURE(point.p[0] == 0x04, SG_EINVAL, "EC point form 0x%02x is not supported (uncompressed only)",
		  point.p[0]);
	SG_ENSURE(point.len == 1 + 2 * field, SG_EINVAL, "EC point of %zu bytes does not fit its curve (%zu)",
		  point.len, 1 + 2 * field);
	k->kind = SG_PUBKEY_EC;
	k->point = point;
	k->bits = (unsigned)field * 8;
	return SG_OK;
}

/*
 *   RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }
 */
static int parse_rsa(sg_pubkey *k, sg_reader *params, sg_slice key_bits)
{
	SG_ENSURE(sg_reader_left(params) == 2 && sg_der_read(params, SG_DER_NULL, &(sg_slice){0}, NULL) == SG_OK,
		  SG_EINVAL, "RSA key parameters must be NULL");

	sg_reader bits = sg_reader_of(key_bits);
	sg_slice seq, n, e;
	SG_TRY(sg_der_read(&bits, SG_DER_SEQUENCE, &seq, NULL));
	SG_ENSURE(sg_reader_done(&bits), SG_EINVAL, "RSA public key has trailing data");
	sg_reader rsa = sg_reader_of(seq);
	SG_TRY(sg_der_read_unsigned_bytes(&rsa, &n));
	SG_TRY(sg_der_read_unsigned_bytes(&rsa, &e));
	SG_ENSURE(sg_reader_done(&rsa), SG_EINVAL, "RSA public key has trailing data");

	unsigned nbits = magnitude_bits(n);
	SG_ENSURE(nbits >= RSA_MIN_BITS, SG_EINVAL, "RSA key of %u bits is too weak (minimum %u)", nbits,
		  RSA_MIN_BITS);
	SG_ENSURE(nbits <= RSA_MAX_BITS, SG_EINVAL, "RSA key of %u bits is too large (maximum %u)", nbits,
		  RSA_MAX_BITS);
	SG_ENSURE(n.p[n.len - 1] & 1, SG_EINVAL, "RSA modulus is even");
	SG_ENSURE(e.len <= RSA_MAX_EXPONENT_BYTES, SG_EINVAL, "RSA public exponent is too large");
	SG_ENSURE((e.p[e.len - 1] & 1) && magnitude_bits(e) >= 2, SG_EINVAL,
		  "RSA public exponent must be odd and at least 3");
	k->kind = SG_PUBKEY_RSA;
	k->n = n;
	k->e = e;
	k->bits = nbits;
	return SG_OK;
}

/*
 *   SubjectPublicKeyInfo ::= SEQUENCE {
 *     algorithm         AlgorithmIdentifier,  -- SEQUENCE { OID, params ANY OPTIONAL }
 *     subjectPublicKey  BIT STRING }
 */
int sg_pubkey_parse(sg_pubkey *out, const uint8_t *der, size_t len)
{
	memset(out, 0, sizeof(*out));
	sg_reader top = sg_reader_of((sg_slice){der, len});
	sg_slice spki, alg, oid, key_bits;
	SG_TRY(sg_der_read(&top, SG_DER_SEQUENCE, &spki, NULL));
	SG_ENSURE(sg_reader_done(&top), SG_EINVAL, "public key has %zu trailing bytes", sg_reader_left(&top));

	sg_reader r = sg_reader_of(spki);
	SG_TRY(sg_der_read(&r, SG_DER_SEQUENCE, &alg, NULL));
	SG_TRY(sg_der_read_bits(&r, &key_bits));
	SG_ENSURE(sg_reader_done(&r), SG_EINVAL, "public key has trailing data");

	sg_reader a = sg_reader_of(alg);
	SG_TRY(sg_der_read(&a, SG_DER_OID, &oid, NULL));
	out->key_bits = key_bits;
	if (oid_is(oid, OID_EC_PUBLIC_KEY, sizeof(OID_EC_PUBLIC_KEY)))
		return parse_ec(out, &a, key_bits);
	if (oid_is(oid, OID_RSA_ENCRYPTION, sizeof(OID_RSA_ENCRYPTION)))
		return parse_rsa(out, &a, key_bits);

	for (size_t i = 0; i < sizeof(refused_key_algs) / sizeof(refused_key_algs[0]); i++)
		if (oid_is(oid, refused_key_algs[i].oid, refused_key_algs[i].len))
			SG_BAIL(SG_EINVAL, "%s keys are not supported (EC P-256/P-384 or RSA only)",
				refused_key_algs[i].name);
	char buf[64];
	SG_BAIL(SG_EINVAL, "public key algorithm %s is not supported (EC P-256/P-384 or RSA only)",
		sg_oid_format(oid, buf, sizeof(buf)));
}

void sg_pubkey_encode(sg_der_writer *w, const sg_pubkey *k)
{
	size_t spki = sg_der_begin(w, SG_DER_SEQUENCE);
	size_t alg = sg_der_begin(w, SG_DER_SEQUENCE);
	if (k->kind == SG_PUBKEY_EC) {
		sg_der_prim(w, SG_DER_OID, OID_EC_PUBLIC_KEY, sizeof(OID_EC_PUBLIC_KEY));
		if (k->curve == SG_CURVE_P256)
			sg_der_prim(w, SG_DER_OID, OID_P256, sizeof(OID_P256));
		else
			sg_der_prim(w, SG_DER_OID, OID_P384, sizeof(OID_P384));
		sg_der_end(w, alg);
		sg_der_bits(w, k->point.p, k->point.len);
	} else if (k->kind == SG_PUBKEY_RSA) {
		sg_der_prim(w, SG_DER_OID, OID_RSA_ENCRYPTION, sizeof(OID_RSA_ENCRYPTION));
		sg_der_prim(w, SG_DER_NULL, NULL, 0);
		sg_der_end(w, alg);
		size_t bits = sg_der_begin(w, SG_DER_BIT_STRING);
		sg_der_raw(w, "\0", 1); /* no unused bits */
		size_t rsa = sg_der_begin(w, SG_DER_SEQUENCE);
		sg_der_uint_bytes(w, k->n.p, k->n.len);
		sg_der_uint_bytes(w, k->e.p, k->e.len);
		sg_der_end(w, rsa);
		sg_der_end(w, bits);
	} else {
		w->failed = true; /* not a parsed key: fail the whole encoding */
	}
	sg_der_end(w, spki);
}

int sg_pubkey_ca_type(const sg_pubkey *k, sg_key_type *out)
{
	if (k->kind == SG_PUBKEY_EC) {
		*out = k->curve == SG_CURVE_P256 ? SG_KEY_EC_P256 : SG_KEY_EC_P384;
		return SG_OK;
	}
	SG_ENSURE(k->kind == SG_PUBKEY_RSA, SG_EINVAL, "not a parsed public key");
	switch (k->bits) {
	case 2048: *out = SG_KEY_RSA_2048; return SG_OK;
	case 3072: *out = SG_KEY_RSA_3072; return SG_OK;
	case 4096: *out = SG_KEY_RSA_4096; return SG_OK;
	default: SG_BAIL(SG_EINVAL, "RSA key of %u bits cannot be a CA key (2048, 3072 or 4096 only)", k->bits);
	}
}

/*
 *   AlgorithmIdentifier ::= SEQUENCE { algorithm OID, parameters ANY OPTIONAL }
 *
 * ECDSA: parameters MUST be absent (RFC 5758 §3.2). RSA PKCS#1 v1.5: RFC
 * 4055 §5 says NULL, but some encoders omit it, so both are accepted here;
 * sg_sigalg_encode always writes NULL.
 */
int sg_sigalg_parse(sg_reader *r, sg_sigalg *out)
{
	sg_slice alg, oid;
	SG_TRY(sg_der_read(r, SG_DER_SEQUENCE, &alg, NULL));
	sg_reader a = sg_reader_of(alg);
	SG_TRY(sg_der_read(&a, SG_DER_OID, &oid, NULL));

	const struct sigalg_entry *e = NULL;
	for (size_t i = 0; i < sizeof(sigalgs) / sizeof(sigalgs[0]) && !e; i++)
		if (oid_is(oid, sigalgs[i].oid, sigalgs[i].len))
			e = &sigalgs[i];
	if (!e) {
		char buf[64];
		SG_BAIL(SG_EINVAL, "signature algorithm %s is not supported", sg_oid_format(oid, buf, sizeof(buf)));
	}
	SG_ENSURE(e->verdict != ALG_WEAK, SG_EINVAL, "signature algorithm %s is not accepted (weak)", e->name);
	SG_ENSURE(e->verdict == ALG_OK, SG_EINVAL, "signature algorithm %s is not supported", e->name);

	if (sg_sigalg_is_ec(e->alg)) {
		SG_ENSURE(sg_reader_done(&a), SG_EINVAL, "%s parameters must be absent", e->name);
	} else if (!sg_reader_done(&a)) {
		sg_slice null;
		SG_ENSURE(sg_der_read(&a, SG_DER_NULL, &null, NULL) == SG_OK && null.len == 0 && sg_reader_done(&a),
			  SG_EINVAL, "%s parameters must be NULL", e->name);
	}
	*out = e->alg;
	return SG_OK;
}

void sg_sigalg_encode(sg_der_writer *w, sg_sigalg alg)
{
	const struct sigalg_entry *e = NULL;
	for (size_t i = 0; i < sizeof(sigalgs) / sizeof(sigalgs[0]) && !e; i++)
		if (sigalgs[i].verdict == ALG_OK && sigalgs[i].alg == alg)
			e = &sigalgs[i];
	if (!e) {
		w->failed = true;
		return;
	}
	size_t m = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_prim(w, SG_DER_OID, e->oid, e->len);
	if (!sg_sigalg_is_ec(alg))
		sg_der_prim(w, SG_DER_NULL, NULL, 0);
	sg_der_end(w, m);
}

sg_hash sg_sigalg_hash(sg_sigalg alg)
{
	switch (alg) {
	case SG_SIG_ECDSA_SHA384:
	case SG_SIG_RSA_SHA384: return SG_HASH_SHA384;
	case SG_SIG_ECDSA_SHA512:
	case SG_SIG_RSA_SHA512: return SG_HASH_SHA512;
	case SG_SIG_ECDSA_SHA256:
	case SG_SIG_RSA_SHA256:
	default: return SG_HASH_SHA256;
	}
}

bool sg_sigalg_is_ec(sg_sigalg alg)
{
	return alg == SG_SIG_ECDSA_SHA256 || alg == SG_SIG_ECDSA_SHA384 || alg == SG_SIG_ECDSA_SHA512;
}

sg_sigalg sg_sigalg_for_ca(sg_key_type t)
{
	switch (t) {
	case SG_KEY_EC_P256: return SG_SIG_ECDSA_SHA256;
	case SG_KEY_EC_P384: return SG_SIG_ECDSA_SHA384;
	default: return SG_SIG_RSA_SHA256;
	}
}

size_t sg_hash_len(sg_hash h)
{
	return (unsigned)h < SG_HASH_COUNT ? hashes[h].hash_len : 0;
}

void sg_digestinfo_prefix(sg_hash h, const uint8_t **p, size_t *len)
{
	if ((unsigned)h >= SG_HASH_COUNT) {
		*p = NULL;
		*len = 0;
		return;
	}
	*p = hashes[h].prefix;
	*len = hashes[h].len;
}

/*
 *   Ecdsa-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }
 *
 * PKCS#11 CKM_ECDSA returns r and s as fixed-width big-endian halves
 * (PKCS#11 v2.40 §2.3.1); sg_der_uint_bytes strips leading zeros and adds
 * the sign octet, which is the minimal DER X.690 §8.3.2 requires.
 */
int sg_ecdsa_raw_to_der(sg_der_writer *w, const uint8_t *raw, size_t rawlen)
{
	SG_ENSURE(rawlen >= 2 && rawlen % 2 == 0 && rawlen <= 2 * 66, SG_EINVAL,
		  "raw ECDSA signature of %zu bytes is malformed", rawlen);
	sg_reader r = sg_reader_of((sg_slice){raw, rawlen});
	sg_slice rs, ss;
	SG_TRY(sg_reader_bytes(&r, rawlen / 2, &rs));
	SG_TRY(sg_reader_bytes(&r, rawlen / 2, &ss));
	bool r_zero = true, s_zero = true;
	for (size_t i = 0; i < rs.len; i++) {
		r_zero &= rs.p[i] == 0;
		s_zero &= ss.p[i] == 0;
	}
	SG_ENSURE(!r_zero && !s_zero, SG_EINVAL, "raw ECDSA signature has a zero r or s");
	size_t m = sg_der_begin(w, SG_DER_SEQUENCE);
	sg_der_uint_bytes(w, rs.p, rs.len);
	sg_der_uint_bytes(w, ss.p, ss.len);
	sg_der_end(w, m);
	return sg_der_writer_status(w);
}

const char *sg_sigalg_name(sg_sigalg alg)
{
	for (size_t i = 0; i < sizeof(sigalgs) / sizeof(sigalgs[0]); i++)
		if (sigalgs[i].verdict == ALG_OK && sigalgs[i].alg == alg)
			return sigalgs[i].name;
	return "(unknown signature algorithm)";
}
