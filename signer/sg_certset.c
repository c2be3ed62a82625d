/*
 * Trust bundles (sg_certset.h): certificates gathered from untrusted PEM
 * sources, kept once each, and written as PEM, PKCS#12 or JKS the way
 * trust-manager writes a Bundle's targets.
 *
 * Reading. The PEM scanner is ours rather than OpenSSL's PEM reader, for
 * two reasons: PEM_read_bio skips what it does not understand (a block of
 * another type, a broken block) where a bundle must refuse it, and its
 * block boundaries are not Go's, whose pem.Decode defines what
 * trust-manager accepts. The text is walked a line at a time (LF, with a
 * CR and other trailing blanks dropped as Go's getLine does):
 *   - a line that starts with "-----BEGIN " opens a block; it must read
 *     "-----BEGIN <type>-----", the type printable ASCII (it is repeated in
 *     messages);
 *   - the block ends at the first line that starts with "-----END ", which
 *     must read "-----END <same type>-----"; the end of the text or another
 *     BEGIN line first is an error (Go would skip the block);
 *   - RFC 1421 headers are the lines right after BEGIN that hold a ':', as
 *     in pem.Decode;
 *   - the body is base64 (RFC 4648 §4) with spaces, tabs, CR and LF
 *     anywhere, as Go allows; it is decoded by common/sg_base64, strictly:
 *     padding only where it belongs and zero pad bits, so each DER has one
 *     accepted text;
 *   - every other line (comments, a stray END line) is text and dropped.
 * The checks run in trust-manager's order where both apply: the type, then
 * headers, then the certificate. A CERTIFICATE body must be one DER
 * certificate that d2i_X509 consumes exactly and that OpenSSL encodes back
 * to the same bytes: the PEM and JKS outputs carry the bytes that were
 * read, the PKCS#12 output carries OpenSSL's encoding of them, and this
 * check makes the two the same (it also refuses BER, as Go's parser does).
 *
 * Limits come first: the length and NUL bytes of the text, then its
 * BEGIN lines are counted, which bounds the entries of the one array an add
 * allocates for its blocks. The set changes only after every block has
 * parsed and the merged size is known to fit: an add builds a sorted batch,
 * then merges it into the set's sorted array in a new array, so a failure
 * at any point leaves the set as it was.
 *
 * Writing. PEM is written here (not by sg_pem_encode, which bounds its
 * input to what the issuance path needs): Go's pem.Encode layout, which is
 * also RFC 7468's strict form. PKCS#12 is assembled from OpenSSL's safe-bag
 * API rather than PKCS12_create, because each certificate bag needs Java's
 * trusted-certificate attribute (Oracle's OID 2.16.840.1.113894.746875.1.1,
 * without a NID before OpenSSL 3.2; Java ignores certificate bags without
 * it). Both stores are trust-manager's to the byte where they can be
 * (its go-pkcs12 and keystore-go encoders; tests/signer/data/trust-manager
 * holds what they wrote): its aliases (sg_certset_alias.c), an empty
 * password as go-pkcs12's Passwordless (one plain safe, no MAC: a function
 * of the set, and no legacy algorithm), its MAC iterations and salt
 * lengths otherwise. RC2-40, the LegacyRC2 profile with a password, lives
 * in OpenSSL 3's legacy provider; it is loaded into a library context of
 * our own, made once per process, so that nothing else in the process
 * starts using legacy algorithms. JKS is written by hand: it is a flat
 * big-endian format (magic 0xFEEDFEED, version 2), entries in the order of
 * their aliases and dated by notBefore as keystore-go writes them for
 * trust-manager, closed by a SHA-1 over the password as UTF-16BE (Java's
 * reading; keystore-go differs for non-ASCII passwords), the words
 * "Mighty Aphrodite" and everything before the digest.
 */
#include "sg_certset.h"
#include "sg_certset_impl.h"

#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_crypto_impl.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_hex.h"
#include "sg_ossl.h"

#include <limits.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/pkcs12.h>
#include <openssl/provider.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HASH_LEN 32
#define TYPE_MAX 64 /* characters of a PEM type: RFC 7468's labels are far shorter */

#define BAD_BLOCK "invalid PEM block in bundle"
#define BAD_CERT BAD_BLOCK "; invalid PEM certificate: "
#define MALFORMED BAD_BLOCK "; malformed PEM block: "

static const char begin_lead[] = "-----BEGIN ";
static const char end_lead[] = "-----END ";
static const char dashes[] = "-----";

typedef struct cert {
	uint8_t hash[HASH_LEN]; /* SHA-256 of der: identity and order */
	int64_t not_before;     /* Unix seconds: the JKS entry's creation time */
	int64_t not_after;      /* Unix seconds */
	bool is_ca;             /* basicConstraints with cA TRUE */
	size_t len;
	uint8_t *der; /* owned */
} cert;

struct sg_certset {
	sg_certset_opts opts;
	cert *certs; /* n of them, distinct, sorted by hash */
	size_t n;
	sg_certset_stats stats;
};

/* The certificates of one add before they join the set. */
typedef struct batch {
	cert *certs; /* room for cap; n filled */
	size_t n, cap;
} batch;

static void batch_free(batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->certs[i].der);
	free(b->certs);
}

int sg_certset_new(sg_certset **out, const sg_certset_opts *opts)
{
	*out = NULL;
	sg_certset *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	if (opts)
		s->opts = *opts;
	*out = s;
	return SG_OK;
}

void sg_certset_free(sg_certset *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->certs[i].der);
	free(s->certs);
	free(s);
}

size_t sg_certset_count(const sg_certset *s)
{
	return s ? s->n : 0;
}

void sg_certset_stats_get(const sg_certset *s, sg_certset_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (s)
		*out = s->stats;
}

/* ---- the PEM scanner ---- */

typedef struct scanner {
	sg_reader r;
	size_t line; /* number of the last line read, from 1 */
} scanner;

static bool is_blank(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* The next line without its LF and trailing blanks (Go's getLine); false
 * at the end of the text. */
static bool next_line(scanner *sc, sg_slice *line)
{
	if (sg_reader_done(&sc->r))
		return false;
	sg_reader_until(&sc->r, '\n', line);
	sg_slice lf;
	if (!sg_reader_done(&sc->r) && sg_reader_bytes(&sc->r, 1, &lf) != SG_OK)
		return false; /* cannot happen: the LF is there */
	sc->line++;
	while (line->len > 0 && is_blank(line->p[line->len - 1]))
		line->len--;
	return true;
}

static bool has_prefix(sg_slice s, const char *lit)
{
	size_t n = strlen(lit);
	return s.len >= n && memcmp(s.p, lit, n) == 0;
}

/* BEGIN lines: an upper bound on the blocks of a text, before parsing. */
static size_t count_begins(sg_slice text)
{
	scanner sc = {sg_reader_of(text), 0};
	sg_slice line;
	size_t n = 0;
	while (next_line(&sc, &line))
		n += has_prefix(line, begin_lead);
	return n;
}

/* The <type> of "<lead><type>-----"; false when the line is not so. */
static bool armour_type(sg_slice line, const char *lead, sg_slice *type)
{
	sg_reader r = sg_reader_of(line);
	sg_slice skip, tail;
	size_t dlen = strlen(dashes);
	if (sg_reader_bytes(&r, strlen(lead), &skip) != SG_OK || sg_reader_left(&r) < dlen ||
	    sg_reader_bytes(&r, sg_reader_left(&r) - dlen, type) != SG_OK || sg_reader_bytes(&r, dlen, &tail) != SG_OK)
		return false;
	return memcmp(tail.p, dashes, dlen) == 0;
}

static bool printable(sg_slice s)
{
	for (size_t i = 0; i < s.len; i++)
		if (s.p[i] < 0x20 || s.p[i] > 0x7e)
			return false;
	return true;
}

/* One block, located: from its BEGIN line (already read) through its END
 * line. */
typedef struct block {
	sg_slice type;
	sg_slice body; /* the text between the BEGIN and END lines */
	bool headers;  /* RFC 1421 header lines after BEGIN */
	size_t line;   /* of the BEGIN line */
} block;

static int locate_block(scanner *sc, sg_slice begin, block *b)
{
	b->line = sc->line;
	b->headers = false;
	SG_ENSURE(armour_type(begin, begin_lead, &b->type), SG_EINVAL,
	          MALFORMED "the BEGIN line at line %zu does not end with \"-----\"", b->line);
	SG_ENSURE(b->type.len <= TYPE_MAX && printable(b->type), SG_EINVAL,
	          MALFORMED "the type on the BEGIN line at line %zu is not printable ASCII of at most %d characters",
	          b->line, TYPE_MAX);

	sg_reader at_body = sc->r;
	bool in_headers = true;
	sg_slice line;
	for (;;) {
		size_t line_off = sc->r.off;
		SG_ENSURE(next_line(sc, &line), SG_EINVAL,
		          MALFORMED "no END line for \"-----BEGIN %.*s-----\" at line %zu", (int)b->type.len,
		          (const char *)b->type.p, b->line);
		SG_ENSURE(!has_prefix(line, begin_lead), SG_EINVAL,
		          MALFORMED
		          "no END line for \"-----BEGIN %.*s-----\" at line %zu before the BEGIN line at line %zu",
		          (int)b->type.len, (const char *)b->type.p, b->line, sc->line);
		if (has_prefix(line, end_lead)) {
			sg_slice end_type;
			bool same =
			    armour_type(line, end_lead, &end_type) && sg_slice_eq(end_type, b->type.p, b->type.len);
			SG_ENSURE(same, SG_EINVAL,
			          MALFORMED
			          "the END line at line %zu does not match \"-----BEGIN %.*s-----\" at line %zu",
			          sc->line, (int)b->type.len, (const char *)b->type.p, b->line);
			return sg_reader_bytes(&at_body, line_off - at_body.off, &b->body);
		}
		/* pem.Decode's header loop: the lines after BEGIN that hold a ':'. */
		in_headers = in_headers && memchr(line.p, ':', line.len) != NULL;
		b->headers = b->headers || in_headers;
	}
}

/* The body's base64 into a new buffer; whitespace anywhere is skipped. */
static int decode_body(const block *b, uint8_t **der, size_t *len)
{
	*der = NULL;
	size_t cap = b->body.len / 4 * 3 + 3; /* body.len is at most SG_CERTSET_PEM_MAX */
	uint8_t *out SG_AUTOFREE = malloc(cap);
	SG_ENSURE(out, SG_EINTERNAL, "out of memory");
	sg_b64_decoder d;
	sg_b64_decoder_init(&d, SG_B64_STD, out, cap);
	int rc = SG_OK;
	for (size_t i = 0; i < b->body.len && rc == SG_OK; i++) {
		uint8_t c = b->body.p[i];
		if (!is_blank(c) && c != '\n')
			rc = sg_b64_decoder_feed(&d, &b->body.p[i], 1);
	}
	if (rc == SG_OK)
		rc = sg_b64_decoder_finish(&d, len);
	if (rc != SG_OK) {
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(SG_EINVAL, MALFORMED "the block at line %zu: %s", b->line, why);
	}
	*der = SG_MOVE(out);
	return SG_OK;
}

static void x509_freep(X509 **x)
{
	X509_free(*x);
}

static int seconds_of(const ASN1_TIME *t, int64_t *out)
{
	struct tm tm;
	if (!t || ASN1_TIME_to_tm(t, &tm) != 1)
		return -1;
	int64_t days = sg_days_from_civil((int64_t)tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
	*out = days * 86400 + tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec;
	return 0;
}

/* c->der (c->len bytes) as one DER certificate, and its facts. */
static int parse_cert(cert *c, size_t line)
{
	ERR_clear_error();
	const unsigned char *p = c->der;
	X509 *x SG_CLEANUP(x509_freep) = d2i_X509(NULL, &p, (long)c->len);
	if (!x)
		return sg_error_set_ossl(SG_EINVAL, BAD_CERT "the block at line %zu is not a DER certificate", line);
	size_t used = (size_t)(p - c->der);
	SG_ENSURE(used == c->len, SG_EINVAL, BAD_CERT "the block at line %zu has %zu bytes after its certificate", line,
	          c->len - used);
	unsigned char *enc = NULL;
	int n = i2d_X509(x, &enc);
	bool same = n > 0 && (size_t)n == c->len && memcmp(enc, c->der, c->len) == 0;
	OPENSSL_free(enc);
	if (n <= 0)
		return sg_error_set_ossl(SG_EINVAL, BAD_CERT "the certificate at line %zu does not encode", line);
	SG_ENSURE(same, SG_EINVAL, BAD_CERT "the certificate at line %zu is not in DER form", line);
	if (seconds_of(X509_get0_notAfter(x), &c->not_after) != 0 ||
	    seconds_of(X509_get0_notBefore(x), &c->not_before) != 0)
		return sg_error_set_ossl(SG_EINVAL,
		                         BAD_CERT "the validity of the certificate at line %zu does not decode", line);
	int crit = -1;
	BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(x, NID_basic_constraints, &crit, NULL);
	if (!bc && crit != -1) /* -1 is "absent"; otherwise undecodable or repeated */
		return sg_error_set_ossl(
		    SG_EINVAL, BAD_CERT "the certificate at line %zu has a malformed or repeated basicConstraints",
		    line);
	c->is_ca = bc && bc->ca;
	BASIC_CONSTRAINTS_free(bc);
	ERR_clear_error();
	return sg_sha256(c->der, c->len, c->hash);
}

/* One block, from its BEGIN line on, into the next free entry of b. */
static int read_block(scanner *sc, sg_slice begin, batch *b)
{
	block blk;
	SG_TRY(locate_block(sc, begin, &blk));
	if (!sg_slice_eq(blk.type, "CERTIFICATE", strlen("CERTIFICATE")))
		SG_BAIL(SG_EINVAL, BAD_BLOCK ": only CERTIFICATE blocks are permitted but found '%.*s'",
		        (int)blk.type.len, (const char *)blk.type.p);
	SG_ENSURE(!blk.headers, SG_EINVAL, BAD_BLOCK "; blocks are not permitted to have PEM headers");
	SG_ENSURE(b->n < b->cap, SG_EINTERNAL, "more blocks than BEGIN lines"); /* cannot happen */
	cert *c = &b->certs[b->n];
	memset(c, 0, sizeof(*c));
	SG_TRY(decode_body(&blk, &c->der, &c->len));
	b->n++; /* the batch owns c->der from here */
	return parse_cert(c, blk.line);
}

static int parse_text(sg_slice text, batch *b)
{
	scanner sc = {sg_reader_of(text), 0};
	sg_slice line;
	while (next_line(&sc, &line))
		if (has_prefix(line, begin_lead))
			SG_TRY(read_block(&sc, line, b));
	return SG_OK;
}

/* ---- merging ---- */

static int by_hash(const void *a, const void *b)
{
	return memcmp(((const cert *)a)->hash, ((const cert *)b)->hash, HASH_LEN);
}

/* Applies the filters to b (dropped entries are freed and counted),
 * sorts what is left and counts duplicates, within b and against s. */
static void filter_and_sort(const sg_certset *s, batch *b, sg_certset_stats *st, size_t *fresh)
{
	int64_t now = s->opts.now ? s->opts.now : (int64_t)time(NULL);
	size_t kept = 0;
	for (size_t i = 0; i < b->n; i++) {
		cert *c = &b->certs[i];
		st->blocks++;
		bool expired = s->opts.filter_expired && now > c->not_after;
		bool non_ca = !expired && s->opts.filter_non_ca && !c->is_ca;
		st->expired += expired;
		st->non_ca += non_ca;
		if (expired || non_ca)
			free(c->der);
		else
			b->certs[kept++] = *c;
	}
	b->n = kept;
	if (b->n > 1)
		qsort(b->certs, b->n, sizeof(cert), by_hash);
	*fresh = 0;
	size_t j = 0;
	for (size_t i = 0; i < b->n; i++) {
		while (j < s->n && memcmp(s->certs[j].hash, b->certs[i].hash, HASH_LEN) < 0)
			j++;
		bool dup = (i > 0 && by_hash(&b->certs[i - 1], &b->certs[i]) == 0) ||
		           (j < s->n && by_hash(&s->certs[j], &b->certs[i]) == 0);
		st->duplicates += dup;
		*fresh += !dup;
	}
}

/* The union of s and the sorted batch b, into a new array of n entries;
 * the DER buffers move, duplicates stay in b to be freed with it. */
static void merge_into(sg_certset *s, batch *b, cert *merged)
{
	size_t i = 0, j = 0, k = 0;
	while (i < s->n || j < b->n) {
		int cmp = i == s->n ? 1 : j == b->n ? -1 : by_hash(&s->certs[i], &b->certs[j]);
		if (cmp < 0) {
			merged[k++] = s->certs[i++];
		} else if (cmp == 0 || (k > 0 && by_hash(&merged[k - 1], &b->certs[j]) == 0)) {
			j++; /* already held */
		} else {
			merged[k++] = b->certs[j];
			b->certs[j++].der = NULL;
		}
	}
}

static int check_text(const char *pem, size_t len)
{
	SG_ENSURE(pem || len == 0, SG_EINVAL, "invalid PEM bundle: no text");
	SG_ENSURE(len <= SG_CERTSET_PEM_MAX, SG_EINVAL, "invalid PEM bundle: %zu bytes, more than %u", len,
	          SG_CERTSET_PEM_MAX);
	SG_ENSURE(len == 0 || !memchr(pem, 0, len), SG_EINVAL, "invalid PEM bundle: the text holds a NUL byte");
	return SG_OK;
}

int sg_certset_add_pem(sg_certset *s, const char *pem, size_t len)
{
	SG_ENSURE(s, SG_EINVAL, "no certificate set");
	SG_TRY(check_text(pem, len));
	sg_slice text = {(const uint8_t *)pem, len};
	size_t blocks = count_begins(text);
	SG_ENSURE(blocks <= SG_CERTSET_MAX, SG_EINVAL, "invalid PEM bundle: %zu PEM blocks, more than %d", blocks,
	          SG_CERTSET_MAX);
	if (blocks == 0)
		return SG_OK; /* only text: nothing to add */

	batch b SG_CLEANUP(batch_free) = {calloc(blocks, sizeof(cert)), 0, blocks};
	SG_ENSURE(b.certs, SG_EINTERNAL, "out of memory");
	SG_TRY(parse_text(text, &b));

	sg_certset_stats st = {0};
	size_t fresh;
	filter_and_sort(s, &b, &st, &fresh);
	SG_ENSURE(fresh <= (size_t)SG_CERTSET_MAX - s->n, SG_EINVAL,
	          "invalid PEM bundle: the set would hold %zu certificates, more than %d", s->n + fresh,
	          SG_CERTSET_MAX);
	if (fresh > 0) {
		cert *merged = calloc(s->n + fresh, sizeof(cert));
		SG_ENSURE(merged, SG_EINTERNAL, "out of memory");
		merge_into(s, &b, merged);
		free(s->certs);
		s->certs = merged;
		s->n += fresh;
	}
	s->stats.blocks += st.blocks;
	s->stats.duplicates += st.duplicates;
	s->stats.expired += st.expired;
	s->stats.non_ca += st.non_ca;
	return SG_OK;
}

/* ---- PEM ---- */

static const char pem_begin[] = "-----BEGIN CERTIFICATE-----\n";
static const char pem_end[] = "-----END CERTIFICATE-----\n";
#define PEM_LINE_BYTES 48 /* bytes of DER per 64-character line */

/* Characters of one block, final newline included. */
static size_t pem_block_len(size_t der_len)
{
	size_t chars = sg_b64_encoded_len(SG_B64_STD, der_len);
	return strlen(pem_begin) + chars + (chars + 63) / 64 + strlen(pem_end);
}

int sg_certset_pem(const sg_certset *s, char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	SG_ENSURE(s, SG_EINVAL, "no certificate set");
	size_t total = 1; /* the NUL */
	for (size_t i = 0; i < s->n; i++) {
		size_t n = pem_block_len(s->certs[i].len); /* DER of at most SG_CERTSET_PEM_MAX bytes */
		SG_ENSURE(n <= SIZE_MAX - total, SG_EINVAL, "the PEM text does not fit in memory");
		total += n;
	}
	char *p SG_AUTOFREE = malloc(total);
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	size_t n = 0;
	for (size_t i = 0; i < s->n; i++) {
		const cert *c = &s->certs[i];
		memcpy(p + n, pem_begin, strlen(pem_begin));
		n += strlen(pem_begin);
		for (size_t off = 0; off < c->len; off += PEM_LINE_BYTES) {
			size_t chunk = c->len - off < PEM_LINE_BYTES ? c->len - off : PEM_LINE_BYTES;
			SG_TRY(sg_b64_encode(SG_B64_STD, c->der + off, chunk, p + n, total - n));
			n += sg_b64_encoded_len(SG_B64_STD, chunk);
			p[n++] = '\n';
		}
		memcpy(p + n, pem_end, strlen(pem_end));
		n += strlen(pem_end);
	}
	if (n > 0)
		n--; /* Go's TrimSpace: no final newline */
	p[n] = '\0';
	SG_ENSURE(n == (s->n ? total - 2 : 0), SG_EINTERNAL, "PEM length mismatch");
	*out = SG_MOVE(p);
	*len = n;
	return SG_OK;
}

/* ---- shared by PKCS#12 and JKS ---- */

static int check_store(const sg_certset *s, const char *password, const char *what)
{
	SG_ENSURE(s, SG_EINVAL, "no certificate set");
	SG_ENSURE(s->n > 0, SG_EINVAL, "an empty certificate set makes no %s", what);
	SG_ENSURE(password, SG_EINVAL, "no %s password (use \"\" for none)", what);
	sg_slice pw = {(const uint8_t *)password, strlen(password)};
	SG_ENSURE(pw.len <= INT_MAX, SG_EINVAL, "the %s password is too long", what);
	uint32_t cp;
	for (size_t i = 0; i < pw.len;)
		SG_ENSURE(sg_der_utf8_next(pw, &i, &cp), SG_EINVAL, "the %s password is not UTF-8", what);
	return SG_OK;
}

/* c as OpenSSL's X509; NULL with the error set. */
static X509 *x509_of(const cert *c)
{
	const unsigned char *p = c->der;
	X509 *x = d2i_X509(NULL, &p, (long)c->len);
	if (!x)
		(void)sg_error_set_ossl(SG_EINTERNAL, "a certificate of the set does not decode");
	return x;
}

/* ---- PKCS#12 ---- */

#define P12_ENC_ITER 2048 /* PBE iterations, every profile */
#define OID_JDK_TRUSTED_KEY_USAGE "2.16.840.1.113894.746875.1.1"

/* go-pkcs12's encoders (trust-manager's profiles): the MAC's iterations
 * and the salts' lengths are theirs too. */
static const struct p12_profile {
	const char *name;
	int cert_pbe; /* NID of the certificates' safe encryption */
	int mac_md;   /* NID of the MAC's digest */
	int mac_iter; /* iterations of the MAC's key derivation */
	int salt_len; /* bytes of each salt (encryption and MAC) */
	bool legacy;  /* needs the legacy provider */
} p12_profiles[] = {
    [SG_CERTSET_P12_LEGACY_RC2] = {"LegacyRC2", NID_pbe_WithSHA1And40BitRC2_CBC, NID_sha1, 1, 8, true},
    [SG_CERTSET_P12_LEGACY_DES] = {"LegacyDES", NID_pbe_WithSHA1And3_Key_TripleDES_CBC, NID_sha1, 1, 8, false},
    /* A cipher's NID means PBES2 with PBKDF2; OpenSSL 3.0's default PRF
     * there is HMAC-SHA256. */
    [SG_CERTSET_P12_MODERN_2023] = {"Modern2023", NID_aes_256_cbc, NID_sha256, 2048, 16, false},
};
#define P12_PROFILES (sizeof(p12_profiles) / sizeof(p12_profiles[0]))

int sg_certset_p12_profile_parse(const char *name, sg_certset_p12_profile *out)
{
	SG_ENSURE(name, SG_EINVAL, "no PKCS#12 profile name");
	if (name[0] == '\0') {
		*out = SG_CERTSET_P12_LEGACY_RC2;
		return SG_OK;
	}
	for (size_t i = 0; i < P12_PROFILES; i++) {
		if (strcmp(name, p12_profiles[i].name) == 0) {
			*out = (sg_certset_p12_profile)i;
			return SG_OK;
		}
	}
	SG_BAIL(SG_EINVAL, "unknown PKCS#12 profile \"%.64s\": want LegacyRC2, LegacyDES or Modern2023", name);
}

/* The library context of PKCS#12 output: the default provider and, when
 * it loads, the legacy one. Made once; lives as long as the process. */
static pthread_once_t p12_once = PTHREAD_ONCE_INIT;
static OSSL_LIB_CTX *p12_ctx;
static OSSL_PROVIDER *p12_default, *p12_legacy;
static char p12_legacy_why[384]; /* why the legacy provider did not load */

static void p12_init(void)
{
	p12_ctx = OSSL_LIB_CTX_new();
	if (p12_ctx)
		p12_default = OSSL_PROVIDER_load(p12_ctx, "default");
	if (p12_default)
		p12_legacy = OSSL_PROVIDER_load(p12_ctx, "legacy");
	/* OpenSSL's reasons (with the file name it tried), "; "-separated, a
	 * repeat skipped, as far as they fit. */
	size_t used = 0;
	unsigned long e, last = 0;
	const char *data;
	int flags;
	while (!p12_legacy && (e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0) {
		if (e == last)
			continue;
		last = e;
		char one[160];
		ERR_error_string_n(e, one, sizeof(one));
		bool text = (flags & ERR_TXT_STRING) && data && data[0];
		int n = snprintf(p12_legacy_why + used, sizeof(p12_legacy_why) - used, "%s%s%s%s%s", used ? "; " : "",
		                 one, text ? " (" : "", text ? data : "", text ? ")" : "");
		if (n < 0 || (size_t)n >= sizeof(p12_legacy_why) - used)
			break;
		used += (size_t)n;
	}
	ERR_clear_error();
}

static void bags_freep(STACK_OF(PKCS12_SAFEBAG) * *p)
{
	sk_PKCS12_SAFEBAG_pop_free(*p, PKCS12_SAFEBAG_free);
}

static void safes_freep(STACK_OF(PKCS7) * *p)
{
	sk_PKCS7_pop_free(*p, PKCS7_free);
}

static void p12_freep(PKCS12 **p)
{
	PKCS12_free(*p);
}

static void bag_freep(PKCS12_SAFEBAG **p)
{
	PKCS12_SAFEBAG_free(*p);
}

/* A certificate bag for c: friendlyName = its alias as a BMPString, and
 * the attribute that makes Java treat it as a trusted certificate for any
 * purpose. */
static int cert_bag(const cert *c, STACK_OF(PKCS12_SAFEBAG) * bags)
{
	X509 *x SG_CLEANUP(x509_freep) = x509_of(c);
	if (!x)
		return sg_error_last()->code;
	char *alias SG_AUTOFREE = NULL;
	SG_TRY(sg_certset_alias(x, c->hash, &alias));
	uint8_t *bmp SG_AUTOFREE = NULL;
	size_t bmp_len = 0;
	SG_TRY(sg_certset_alias_bmp(alias, &bmp, &bmp_len));
	SG_ENSURE(bmp_len <= INT_MAX, SG_EINVAL, "a certificate's alias is too long");
	PKCS12_SAFEBAG *bag SG_CLEANUP(bag_freep) = PKCS12_SAFEBAG_create_cert(x);
	if (!bag)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot make a PKCS#12 certificate bag");
	SG_OSSL(PKCS12_add1_attr_by_NID(bag, NID_friendlyName, V_ASN1_BMPSTRING, bmp, (int)bmp_len), SG_EINTERNAL,
	        "cannot name a PKCS#12 certificate bag");
	/* len -1: bytes is an object for the attribute's value, copied. */
	const ASN1_OBJECT *any_eku = OBJ_nid2obj(NID_anyExtendedKeyUsage);
	SG_OSSL(
	    PKCS12_add1_attr_by_txt(bag, OID_JDK_TRUSTED_KEY_USAGE, V_ASN1_OBJECT, (const unsigned char *)any_eku, -1),
	    SG_EINTERNAL, "cannot mark a PKCS#12 certificate bag as trusted");
	if (sk_PKCS12_SAFEBAG_push(bags, bag) <= 0)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	bag = NULL; /* the stack owns it */
	return SG_OK;
}

int sg_certset_pkcs12(const sg_certset *s, const char *password, sg_certset_p12_profile profile, uint8_t **out,
                      size_t *len)
{
	*out = NULL;
	*len = 0;
	SG_TRY(check_store(s, password, "PKCS#12 store"));
	SG_ENSURE((unsigned)profile < P12_PROFILES, SG_EINVAL, "unknown PKCS#12 profile %d", (int)profile);
	const struct p12_profile *pr = &p12_profiles[profile];
	/* An empty password is go-pkcs12's Passwordless, whatever the profile
	 * (trust-manager's choice): no encryption and no MAC, so the bytes are
	 * a function of the set, and no legacy algorithm is needed. */
	bool passwordless = password && password[0] == '\0';
	ERR_clear_error(); /* the first call's p12_init reads the queue */
	pthread_once(&p12_once, p12_init);
	SG_ENSURE(p12_ctx && p12_default, SG_EINTERNAL, "OpenSSL's default provider does not load");
	SG_ENSURE(passwordless || !pr->legacy || p12_legacy, SG_EINVAL,
	          "PKCS#12 profile %s needs RC2 from OpenSSL's legacy provider, which does not load (%s); "
	          "use LegacyDES or Modern2023",
	          pr->name, p12_legacy_why[0] ? p12_legacy_why : "no detail");

	STACK_OF(PKCS12_SAFEBAG) * bags SG_CLEANUP(bags_freep) = sk_PKCS12_SAFEBAG_new_null();
	if (!bags)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	for (size_t i = 0; i < s->n; i++)
		SG_TRY(cert_bag(&s->certs[i], bags));
	STACK_OF(PKCS7) * safes SG_CLEANUP(safes_freep) = sk_PKCS7_new_null();
	if (!safes)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	PKCS7 *safe = passwordless ? PKCS12_pack_p7data(bags)
	                           : PKCS12_pack_p7encdata_ex(pr->cert_pbe, password, -1, NULL, pr->salt_len,
	                                                      P12_ENC_ITER, bags, p12_ctx, NULL);
	if (!safe)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot pack the PKCS#12 certificates (%s)",
		                         passwordless ? "no password" : pr->name);
	if (sk_PKCS7_push(safes, safe) <= 0) {
		PKCS7_free(safe);
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	}
	PKCS12 *p12 SG_CLEANUP(p12_freep) = PKCS12_add_safes_ex(safes, NID_pkcs7_data, p12_ctx, NULL);
	if (!p12)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot assemble the PKCS#12 store");
	if (!passwordless) {
		const EVP_MD *md = EVP_get_digestbynid(pr->mac_md);
		SG_ENSURE(md, SG_EINTERNAL, "no digest for the PKCS#12 MAC");
		SG_OSSL(PKCS12_set_mac(p12, password, (int)strlen(password), NULL, pr->salt_len, pr->mac_iter, md),
		        SG_EINTERNAL, "cannot compute the PKCS#12 MAC (%s)", pr->name);
	}
	int n = i2d_PKCS12(p12, NULL);
	if (n <= 0)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot encode the PKCS#12 store");
	uint8_t *buf SG_AUTOFREE = malloc((size_t)n);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory");
	unsigned char *w = buf;
	if (i2d_PKCS12(p12, &w) != n)
		return sg_error_set_ossl(SG_EINTERNAL, "cannot encode the PKCS#12 store");
	*out = SG_MOVE(buf);
	*len = (size_t)n;
	return SG_OK;
}

/* ---- JKS ---- */

#define JKS_MAGIC 0xfeedfeedu
#define JKS_VERSION 2
#define JKS_TRUSTED_CERT 2
#define JKS_CERT_TYPE "X509"            /* keystore-go's as trust-manager sets it; Java reads it as X.509 */
#define JKS_WHITENER "Mighty Aphrodite" /* the JDK's constant, hashed after the password */
#define JKS_DIGEST_LEN 20               /* SHA-1 */

typedef struct writer {
	uint8_t *p;
	size_t cap, len;
} writer;

/* Callers size the buffer first; a write that would not fit is dropped
 * and the length check at the end fails. */
static void put(writer *w, const void *p, size_t n)
{
	if (n > w->cap - w->len) {
		w->len = w->cap + 1;
		return;
	}
	memcpy(w->p + w->len, p, n);
	w->len += n;
}

static void put_be(writer *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];
	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
	put(w, b, bytes);
}

/* A string as keystore-go writes it: a 16-bit length and the UTF-8
 * bytes (Java's modified UTF-8 for everything but NUL and characters
 * beyond the BMP, which no alias written here holds but the latter).
 * Callers check the length fits. */
static void put_utf(writer *w, const char *s)
{
	put_be(w, strlen(s), 2);
	put(w, s, strlen(s));
}

/* One entry of the store: a certificate and its lower-cased alias. */
typedef struct jks_entry {
	const cert *c;
	char *alias;
	size_t order; /* the certificate's place in the set */
} jks_entry;

static size_t jks_entry_len(const jks_entry *e)
{
	return 4 + (2 + strlen(e->alias)) + 8 + (2 + strlen(JKS_CERT_TYPE)) + 4 + e->c->len;
}

/* keystore-go's WithOrderedAliases: sort.Strings over the aliases; equal
 * aliases (a map key in keystore-go) keep the later certificate. */
static int by_alias(const void *a, const void *b)
{
	const jks_entry *x = a, *y = b;
	int c = strcmp(x->alias, y->alias);
	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static void entries_free(jks_entry *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++)
		free(e[i].alias);
	free(e);
}

/* The store's entries, sorted and without repeated aliases: *out (n of
 * them; free with entries_free(*out, all)). */
static int jks_entries(const sg_certset *s, jks_entry **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	jks_entry *e = calloc(s->n, sizeof(*e));
	SG_ENSURE(e, SG_EINTERNAL, "out of memory");
	int rc = SG_OK;
	for (size_t i = 0; i < s->n && rc == SG_OK; i++) {
		X509 *x = x509_of(&s->certs[i]);
		char *alias = NULL;
		rc = x ? sg_certset_alias(x, s->certs[i].hash, &alias) : sg_error_last()->code;
		X509_free(x);
		if (rc == SG_OK) {
			rc = sg_certset_alias_lower(alias, &e[i].alias);
			free(alias);
		}
		e[i].c = &s->certs[i];
		e[i].order = i;
	}
	if (rc != SG_OK) {
		entries_free(e, s->n);
		return rc;
	}
	qsort(e, s->n, sizeof(*e), by_alias);
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (i + 1 < s->n && strcmp(e[i].alias, e[i + 1].alias) == 0) {
			free(e[i].alias); /* the later one of the same alias wins */
			e[i].alias = NULL;
			continue;
		}
		e[k++] = e[i];
	}
	for (size_t i = k; i < s->n; i++)
		e[i].alias = NULL;
	*out = e;
	*n = k;
	return SG_OK;
}

/* The password as the JDK hashes it: each UTF-16 code unit, big-endian. */
static int digest_password(EVP_MD_CTX *md, const char *password)
{
	sg_slice pw = {(const uint8_t *)password, strlen(password)};
	uint32_t cp;
	for (size_t i = 0; i < pw.len;) {
		if (!sg_der_utf8_next(pw, &i, &cp)) /* checked by check_store */
			SG_BAIL(SG_EINVAL, "the JKS password is not UTF-8");
		uint16_t units[2] = {(uint16_t)cp, 0};
		size_t nunits = 1;
		if (cp >= 0x10000) {
			units[0] = (uint16_t)(0xd800 + ((cp - 0x10000) >> 10));
			units[1] = (uint16_t)(0xdc00 + ((cp - 0x10000) & 0x3ff));
			nunits = 2;
		}
		for (size_t k = 0; k < nunits; k++) {
			uint8_t be[2] = {(uint8_t)(units[k] >> 8), (uint8_t)units[k]};
			SG_OSSL(EVP_DigestUpdate(md, be, 2), SG_EINTERNAL, "SHA-1 failed");
		}
	}
	return SG_OK;
}

static void jks_freep(jks_entry **e)
{
	free(*e);
}

int sg_certset_jks(const sg_certset *s, const char *password, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	SG_TRY(check_store(s, password, "JKS store"));
	jks_entry *e SG_CLEANUP(jks_freep) = NULL;
	size_t ne = 0;
	SG_TRY(jks_entries(s, &e, &ne));
	int rc = SG_OK;
	size_t total = 4 + 4 + 4 + JKS_DIGEST_LEN;
	for (size_t i = 0; i < ne && rc == SG_OK; i++) {
		size_t n = jks_entry_len(&e[i]);
		if (strlen(e[i].alias) > UINT16_MAX)
			rc = sg_error_set(SG_EINVAL, "a certificate's JKS alias is longer than %u bytes", UINT16_MAX);
		else if (e[i].c->len > UINT32_MAX || n > SIZE_MAX - total)
			rc = sg_error_set(SG_EINVAL, "the JKS store does not fit in memory");
		total += n;
	}
	uint8_t *buf SG_AUTOFREE = rc == SG_OK ? malloc(total) : NULL;
	if (rc == SG_OK && !buf)
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	writer w = {buf, total, 0};
	if (rc == SG_OK) {
		put_be(&w, JKS_MAGIC, 4);
		put_be(&w, JKS_VERSION, 4);
		put_be(&w, ne, 4); /* at most SG_CERTSET_MAX */
	}
	for (size_t i = 0; i < ne && rc == SG_OK; i++) {
		const cert *c = e[i].c;
		put_be(&w, JKS_TRUSTED_CERT, 4);
		put_utf(&w, e[i].alias);
		/* trust-manager's creation time: the certificate's notBefore
		 * (time.Time.UnixMilli), so the store is a function of the set. */
		put_be(&w, (uint64_t)c->not_before * 1000u, 8);
		put_utf(&w, JKS_CERT_TYPE);
		put_be(&w, c->len, 4);
		put(&w, c->der, c->len);
	}
	for (size_t i = 0; i < ne; i++)
		free(e[i].alias);
	SG_TRY(rc);
	SG_ENSURE(w.len == total - JKS_DIGEST_LEN, SG_EINTERNAL, "JKS length mismatch");

	const EVP_MD *sha1 = sg_crypto_shared_md(SG_HASH_SHA1);
	SG_ENSURE(sha1, SG_EINTERNAL, "SHA-1 is not available");
	ERR_clear_error();
	EVP_MD_CTX *md SG_CLEANUP(sg_ossl_md_ctx_freep) = EVP_MD_CTX_new();
	if (!md)
		return sg_error_set_ossl(SG_EINTERNAL, "out of memory");
	SG_OSSL(EVP_DigestInit_ex(md, sha1, NULL), SG_EINTERNAL, "SHA-1 failed");
	SG_TRY(digest_password(md, password));
	SG_OSSL(EVP_DigestUpdate(md, JKS_WHITENER, strlen(JKS_WHITENER)), SG_EINTERNAL, "SHA-1 failed");
	SG_OSSL(EVP_DigestUpdate(md, buf, w.len), SG_EINTERNAL, "SHA-1 failed");
	unsigned int dlen = 0;
	SG_OSSL(EVP_DigestFinal_ex(md, buf + w.len, &dlen), SG_EINTERNAL, "SHA-1 failed");
	SG_ENSURE(dlen == JKS_DIGEST_LEN, SG_EINTERNAL, "SHA-1 gave %u bytes", dlen);
	*out = SG_MOVE(buf);
	*len = total;
	return SG_OK;
}
