/*
 * sg_pem: PEM armour (RFC 7468) for CSRs and certificates, and the CSR
 * input front door (sg_csr_decode). Contracts are in sg_csr.h.
 *
 * Decoding follows RFC 7468 §3 with these choices:
 *   - leading whitespace before the BEGIN line is skipped; text after the
 *     END line is not looked at (its length is reported as not consumed);
 *   - the body is base64 (RFC 4648 §4) in lines of any length separated by
 *     LF or CRLF; no other whitespace, no RFC 1421 headers, no characters
 *     outside the alphabet;
 *   - padding is strict (§3.3 of RFC 4648): '=' only to complete the last
 *     quantum, the total a multiple of four characters, and the bits that
 *     padding discards must be zero, so each byte string has exactly one
 *     accepted encoding;
 *   - BEGIN and END labels must match each other and the caller's label.
 * The output is bounded by the caller's capacity before a byte is written
 * past it. The parser reads its input through sg_reader, one byte at a
 * time, like the DER parsers.
 *
 * Encoding writes the RFC 7468 §3 "stricttextualmsg" form: 64-column lines,
 * LF line ends, a trailing newline.
 */
#include "sg_base64.h"
#include "sg_csr.h"
#include "sg_guard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEM_MAX_LABEL 64

static bool peek_byte(const sg_reader *r, uint8_t *c)
{
	if (sg_reader_done(r))
		return false;
	sg_reader look = *r;
	sg_slice b;
	if (sg_reader_bytes(&look, 1, &b) != SG_OK)
		return false;
	*c = b.p[0];
	return true;
}

static void skip_byte(sg_reader *r)
{
	sg_slice b;
	if (sg_reader_bytes(r, 1, &b) != SG_OK)
		return; /* only called after peek_byte succeeded */
}

/* Consumes lit if the input continues with it. */
static bool take(sg_reader *r, const char *lit)
{
	size_t n = strlen(lit);
	sg_reader look = *r;
	sg_slice b;
	if (sg_reader_bytes(&look, n, &b) != SG_OK || memcmp(b.p, lit, n) != 0)
		return false;
	*r = look;
	return true;
}

/* End of a BEGIN/END line: optional blanks, then LF, CRLF or end of input. */
static bool take_eol(sg_reader *r)
{
	uint8_t c;
	while (peek_byte(r, &c) && (c == ' ' || c == '\t'))
		skip_byte(r);
	if (!peek_byte(r, &c))
		return true;
	return take(r, "\n") || take(r, "\r\n");
}

/* label = printable ASCII without '-' (RFC 7468 §3, simplified). */
static int read_label(sg_reader *r, sg_slice *label)
{
	sg_reader look = *r;
	size_t n = 0;
	uint8_t c;
	while (peek_byte(&look, &c) && c != '-') {
		SG_ENSURE(c >= 0x20 && c < 0x7f && n < PEM_MAX_LABEL, SG_EINVAL, "PEM label is malformed");
		skip_byte(&look);
		n++;
	}
	SG_TRY(sg_reader_bytes(r, n, label));
	SG_ENSURE(take(r, "-----"), SG_EINVAL, "PEM armour line is malformed");
	return SG_OK;
}

static int pem_decode(const uint8_t *in, size_t inlen, const char *const *labels, size_t nlabels, uint8_t *out,
		      size_t cap, size_t *outlen, size_t *consumed)
{
	sg_reader r = sg_reader_of((sg_slice){in, inlen});
	uint8_t c;
	while (peek_byte(&r, &c) && (c == ' ' || c == '\t' || c == '\r' || c == '\n'))
		skip_byte(&r);
	SG_ENSURE(take(&r, "-----BEGIN "), SG_EINVAL, "PEM: no BEGIN line");
	sg_slice label, end_label;
	SG_TRY(read_label(&r, &label));
	SG_ENSURE(take_eol(&r), SG_EINVAL, "PEM BEGIN line is malformed");
	bool known = false;
	for (size_t i = 0; i < nlabels && !known; i++)
		known = sg_slice_eq(label, labels[i], strlen(labels[i]));
	SG_ENSURE(known, SG_EINVAL, "PEM label \"%.*s\" is not \"%s\"", (int)label.len, (const char *)label.p,
		  labels[0]);

	sg_b64_decoder s;
	sg_b64_decoder_init(&s, SG_B64_STD, out, cap);
	/* The body, a line at a time: LF or CRLF line ends, the END line starts
	 * with '-'. Each line is one bounded slice decoded in a tight loop. */
	for (;;) {
		SG_ENSURE(peek_byte(&r, &c), SG_EINVAL, "PEM has no END line");
		if (c == '-')
			break;
		sg_slice line;
		sg_reader_until(&r, '\n', &line);
		if (!sg_reader_done(&r))
			skip_byte(&r);
		if (line.len && line.p[line.len - 1] == '\r')
			line.len--;
		SG_TRY(sg_b64_decoder_feed(&s, line.p, line.len));
	}
	size_t n;
	SG_TRY(sg_b64_decoder_finish(&s, &n));
	SG_ENSURE(n > 0, SG_EINVAL, "PEM body is empty");
	SG_ENSURE(take(&r, "-----END "), SG_EINVAL, "PEM has no END line");
	SG_TRY(read_label(&r, &end_label));
	SG_ENSURE(sg_slice_eq(end_label, label.p, label.len), SG_EINVAL, "PEM END label does not match BEGIN");
	SG_ENSURE(take_eol(&r), SG_EINVAL, "PEM END line is malformed");
	*outlen = n;
	if (consumed)
		*consumed = r.off;
	return SG_OK;
}

int sg_pem_decode(const uint8_t *in, size_t inlen, const char *label, uint8_t *out, size_t cap, size_t *outlen,
		  size_t *consumed)
{
	const char *labels[] = {label};
	return pem_decode(in, inlen, labels, 1, out, cap, outlen, consumed);
}

int sg_pem_encode(const char *label, const uint8_t *der, size_t len, char **out, size_t *outlen)
{
	size_t llen = strlen(label);
	SG_ENSURE(llen > 0 && llen <= PEM_MAX_LABEL && !strchr(label, '-'), SG_EINVAL, "bad PEM label");
	SG_ENSURE(len > 0, SG_EINVAL, "nothing to encode as PEM");
	SG_ENSURE(len <= SG_DER_MAX_LEN, SG_EINVAL, "object of %zu bytes is too large for PEM", len);
	size_t chars = (len + 2) / 3 * 4;
	size_t lines = (chars + 63) / 64;
	size_t total = 2 * llen + strlen("-----BEGIN -----\n-----END -----\n") + chars + lines;
	char *p SG_AUTOFREE = malloc(total + 1);
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");

	size_t n = (size_t)snprintf(p, total + 1, "-----BEGIN %s-----\n", label);
	/* 48 bytes make one 64-character line. */
	for (size_t i = 0; i < len; i += 48) {
		size_t chunk = len - i < 48 ? len - i : 48;
		SG_TRY(sg_b64_encode(SG_B64_STD, der + i, chunk, p + n, total + 1 - n));
		n += sg_b64_encoded_len(SG_B64_STD, chunk);
		p[n++] = '\n';
	}
	n += (size_t)snprintf(p + n, total + 1 - n, "-----END %s-----\n", label);
	SG_ENSURE(n == total, SG_EINTERNAL, "PEM length mismatch");
	*out = SG_MOVE(p);
	if (outlen)
		*outlen = n;
	return SG_OK;
}

int sg_csr_decode(const uint8_t *in, size_t inlen, uint8_t *out, size_t cap, size_t *outlen)
{
	static const char *const labels[] = {"CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"};
	sg_reader r = sg_reader_of((sg_slice){in, inlen});
	uint8_t c;
	while (peek_byte(&r, &c) && (c == ' ' || c == '\t' || c == '\r' || c == '\n'))
		skip_byte(&r);
	if (take(&r, "-----BEGIN "))
		return pem_decode(in, inlen, labels, 2, out, cap < SG_CSR_MAX_DER ? cap : SG_CSR_MAX_DER, outlen,
				  NULL);

	SG_ENSURE(inlen > 0, SG_EINVAL, "CSR is empty");
	SG_ENSURE(inlen <= SG_CSR_MAX_DER, SG_EINVAL, "CSR of %zu bytes exceeds the maximum of %d bytes", inlen,
		  SG_CSR_MAX_DER);
	SG_ENSURE(inlen <= cap, SG_EINVAL, "CSR of %zu bytes does not fit a %zu-byte buffer", inlen, cap);
	memcpy(out, in, inlen);
	*outlen = inlen;
	return SG_OK;
}
