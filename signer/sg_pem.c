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
#include "sg_csr.h"
#include "sg_guard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEM_MAX_LABEL 64

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

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

typedef struct b64_state {
	uint8_t *out;
	size_t cap, len;
	uint32_t acc;
	unsigned data; /* sextets of the current quantum */
	unsigned pad;  /* '=' seen in the current quantum */
	bool done;     /* a padded quantum ended the data */
} b64_state;

static int put(b64_state *s, uint8_t byte)
{
	SG_ENSURE(s->len < s->cap, SG_EINVAL, "PEM body exceeds %zu bytes", s->cap);
	s->out[s->len++] = byte;
	return SG_OK;
}

/* One base64 character or '=' (RFC 4648 §4). */
static int b64_feed(b64_state *s, uint8_t c)
{
	if (c == '=') {
		SG_ENSURE(s->data + s->pad >= 2, SG_EINVAL, "PEM base64 padding is misplaced");
		s->pad++;
	} else {
		int v = b64_value(c);
		SG_ENSURE(v >= 0, SG_EINVAL, "PEM body has an invalid base64 character (0x%02x)", c);
		SG_ENSURE(!s->done && s->pad == 0, SG_EINVAL, "PEM base64 has data after padding");
		s->acc = (s->acc << 6) | (uint32_t)v;
		s->data++;
	}
	if (s->data + s->pad < 4)
		return SG_OK;

	/* A whole quantum: 4 sextets -> 3 bytes, 3 -> 2, 2 -> 1. */
	unsigned bytes = s->data - 1;
	unsigned spare = s->data * 6 - bytes * 8; /* bits that padding discards */
	SG_ENSURE((s->acc & ((1u << spare) - 1)) == 0, SG_EINVAL, "PEM base64 has non-zero padding bits");
	uint32_t v = s->acc >> spare;
	for (unsigned i = bytes; i > 0; i--)
		SG_TRY(put(s, (uint8_t)(v >> (8 * (i - 1)))));
	s->done = s->pad > 0;
	s->acc = 0;
	s->data = 0;
	s->pad = 0;
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

	b64_state s = {.out = out, .cap = cap};
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
		for (size_t i = 0; i < line.len; i++)
			SG_TRY(b64_feed(&s, line.p[i]));
	}
	SG_ENSURE(s.data + s.pad == 0, SG_EINVAL, "PEM base64 is truncated (not a multiple of 4 characters)");
	SG_ENSURE(s.len > 0, SG_EINVAL, "PEM body is empty");
	SG_ENSURE(take(&r, "-----END "), SG_EINVAL, "PEM has no END line");
	SG_TRY(read_label(&r, &end_label));
	SG_ENSURE(sg_slice_eq(end_label, label.p, label.len), SG_EINVAL, "PEM END label does not match BEGIN");
	SG_ENSURE(take_eol(&r), SG_EINVAL, "PEM END line is malformed");
	*outlen = s.len;
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

	size_t n = 0, col = 0;
	n += (size_t)snprintf(p, total + 1, "-----BEGIN %s-----\n", label);
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)der[i] << 16;
		size_t have = len - i < 3 ? len - i : 3;
		if (have > 1)
			v |= (uint32_t)der[i + 1] << 8;
		if (have > 2)
			v |= der[i + 2];
		for (size_t k = 0; k < 4; k++) {
			p[n++] = k <= have ? b64[(v >> (18 - 6 * k)) & 0x3f] : '=';
			if (++col == 64) {
				p[n++] = '\n';
				col = 0;
			}
		}
	}
	if (col)
		p[n++] = '\n';
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
