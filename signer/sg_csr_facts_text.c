/*
 * sg_csr_facts_text: where every string a CSR's facts report lives, and
 * OIDs as Go reads them. The arena is allocated once per parse (its size
 * bound is argued atop sg_csr_facts.c); texts are reserved, written and
 * committed with their NUL, copied or in hex, and UTF-8 is written for
 * the string types Go converts. OIDs are decoded as encoding/asn1's
 * parseObjectIdentifier and printed as ObjectIdentifier.String(), with
 * Go's error when Go would refuse one. Apart so that the request's reader
 * (sg_csr_facts.c) and subjectAltName (sg_csr_facts_san.c) both stand on
 * it and it on neither.
 */
#include "sg_csr_facts_impl.h"
#include "sg_guard.h"
#include "sg_hex.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- text arena -------------------------------------------------------- */

/* Reserves room for max bytes plus a NUL; csr_facts_text_commit fixes the length. */
int csr_facts_text_reserve(sg_csr_facts *f, size_t max, char **p)
{
	SG_ENSURE(max < f->arena_cap - f->arena_len, SG_EINTERNAL, "CSR facts: text arena exhausted (a bug)");
	*p = f->arena + f->arena_len;
	return SG_OK;
}

const char *csr_facts_text_commit(sg_csr_facts *f, size_t n)
{
	char *p = f->arena + f->arena_len;
	p[n] = '\0';
	f->arena_len += n + 1;
	return p;
}

int csr_facts_text_put(sg_csr_facts *f, const void *src, size_t n, const char **out)
{
	char *p = NULL;
	SG_TRY(csr_facts_text_reserve(f, n, &p));
	if (n)
		memcpy(p, src, n);
	*out = csr_facts_text_commit(f, n);
	return SG_OK;
}

int csr_facts_text_hex(sg_csr_facts *f, sg_slice s, const char **out, size_t *outlen)
{
	char *p = NULL;
	SG_TRY(csr_facts_text_reserve(f, 2 * s.len, &p));
	sg_hex_encode(p, s.p, s.len); /* its NUL is where csr_facts_text_commit puts one */
	*out = csr_facts_text_commit(f, 2 * s.len);
	if (outlen)
		*outlen = 2 * s.len;
	return SG_OK;
}

/* Appends the UTF-8 form of cp (a valid scalar value) at p; returns bytes. */
size_t csr_facts_utf8_put(char *p, uint32_t cp)
{
	if (cp < 0x80) {
		p[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		p[0] = (char)(0xc0 | (cp >> 6));
		p[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		p[0] = (char)(0xe0 | (cp >> 12));
		p[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		p[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | (cp >> 18));
	p[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	p[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	p[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* ---- OIDs as Go reads them ---------------------------------------------- */

/*
 * encoding/asn1's parseObjectIdentifier and ObjectIdentifier.String():
 * base-128 subidentifiers of at most 31 bits, minimally encoded, the first
 * one split into two arcs. Writes the dotted form into out (cap >= 4 *
 * oid.len + 2 always suffices) and returns NULL, or returns Go's error.
 */
static const char *oid_text(sg_slice oid, char *out, size_t cap, size_t *outlen)
{
	if (oid.len == 0)
		return "asn1: syntax error: zero length OBJECT IDENTIFIER";
	size_t i = 0, used = 0;
	bool first = true;
	while (i < oid.len) {
		uint64_t v = 0;
		for (int shifted = 0;; shifted++) {
			if (i >= oid.len)
				return "asn1: syntax error: truncated base 128 integer";
			if (shifted == 5)
				return "asn1: structure error: base 128 integer too large";
			uint8_t b = oid.p[i++];
			if (shifted == 0 && b == 0x80)
				return "asn1: syntax error: integer is not minimally encoded";
			v = (v << 7) | (b & 0x7f);
			if (!(b & 0x80))
				break;
		}
		if (v > INT32_MAX)
			return "asn1: structure error: base 128 integer too large";
		int n;
		if (first) {
			uint64_t a = v < 80 ? v / 40 : 2, b = v < 80 ? v % 40 : v - 80;
			n = snprintf(out + used, cap - used, "%" PRIu64 ".%" PRIu64, a, b);
			first = false;
		} else {
			n = snprintf(out + used, cap - used, ".%" PRIu64, v);
		}
		if (n < 0 || (size_t)n >= cap - used)
			return "OID text does not fit (a bug)";
		used += (size_t)n;
	}
	*outlen = used;
	return NULL;
}

/* Decodes an OID into the arena; the Go error when Go would refuse it. */
int csr_facts_text_oid(sg_csr_facts *f, sg_slice oid, const char **out, const char **goerr)
{
	char *p = NULL;
	size_t n = 0;
	SG_TRY(csr_facts_text_reserve(f, 4 * oid.len + 2, &p));
	*goerr = oid_text(oid, p, 4 * oid.len + 3, &n);
	if (!*goerr)
		*out = csr_facts_text_commit(f, n);
	return SG_OK;
}

/* An OID that must be valid: SG_EINVAL with Go's error under what. */
int csr_facts_need_oid(sg_csr_facts *f, sg_slice oid, const char *what, const char **out)
{
	const char *goerr;
	SG_TRY(csr_facts_text_oid(f, oid, out, &goerr));
	SG_ENSURE(!goerr, SG_EINVAL, "CSR %s: %s", what, goerr);
	return SG_OK;
}

bool csr_facts_oid_eq(sg_slice oid, const uint8_t *want, size_t len)
{
	return sg_slice_eq(oid, want, len);
}
