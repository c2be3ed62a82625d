/*
 * sg_csr_facts_san: the subjectAltName of a request (RFC 5280 §4.2.1.6)
 * as the two Go readers approver-policy depends on see it. crypto/x509's
 * failures (a name that is not ASCII, an IP address not of 4 or 16 bytes,
 * a URI url.Parse refuses) make the request unevaluable; cert-manager's
 * UnmarshalSANs, which reads every GeneralName by its tag number, records
 * its first failure in san_decode_error and the request is reported
 * otherwise. Values are kept as Go prints them (sg_csr_facts_goforms.c)
 * in the arena of sg_csr_facts.c, which calls csr_facts_parse_san for
 * each subjectAltName extension. Apart because the GeneralName choice,
 * with its two readers' rules, is the largest and the most intricate part
 * of a request.
 */
#include "sg_csr_facts_impl.h"
#include "sg_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- subjectAltName ------------------------------------------------------- */

static const char *const san_type_names[9] = {
    "otherName", "rfc822Name",   "dNSName", "x400Address", "directoryName", "ediPartyName", "uniformResourceIdentifier",
    "iPAddress", "registeredID",
};

const char *sg_csr_facts_san_type_name(sg_csr_facts_san_type t)
{
	return (unsigned)t < 9 ? san_type_names[t] : "unknown GeneralName";
}

/* Records cert-manager's decoding failure: the first one, and only for the
 * first subjectAltName extension (approver-policy stops at the second). */
static int cm_error(sg_csr_facts *f, const char *fmt, ...) SG_PRINTF(2, 3);
static int cm_error(sg_csr_facts *f, const char *fmt, ...)
{
	if (f->san_decode_error || f->san_extensions != 1)
		return SG_OK;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	size_t len = n < 0 ? 0 : (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1;
	return csr_facts_text_put(f, buf, len, &f->san_decode_error);
}

static int add_san(facts_build *b, sg_csr_facts_san_type type, sg_slice content, sg_csr_facts_san **out)
{
	sg_csr_facts *f = b->f;
	if (f->san_count == b->san_cap) {
		size_t cap = b->san_cap ? 2 * b->san_cap : 8;
		sg_csr_facts_san *n = realloc(f->sans, cap * sizeof(*n));
		SG_ENSURE(n, SG_EINTERNAL, "CSR facts: out of memory");
		f->sans = n;
		b->san_cap = cap;
	}
	*out = &f->sans[f->san_count++];
	memset(*out, 0, sizeof(**out));
	(*out)->type = type;
	(*out)->content = content;
	return SG_OK;
}

/* rfc822Name, dNSName, URI: IA5String, which crypto/x509 checks is ASCII. */
static int ia5_name(facts_build *b, unsigned num, sg_slice v)
{
	sg_csr_facts *f = b->f;
	for (size_t i = 0; i < v.len; i++)
		SG_ENSURE(v.p[i] < 0x80, SG_EINVAL, "CSR subjectAltName: x509: SAN %s is malformed",
		          san_type_names[num]);
	sg_csr_facts_san *s;
	SG_TRY(add_san(b, (sg_csr_facts_san_type)num, v, &s));
	if (num != SG_CSR_FACTS_SAN_URI) {
		s->value_len = v.len;
		return csr_facts_text_put(f, v.p, v.len, &s->value);
	}
	char *p = NULL;
	SG_TRY(csr_facts_text_reserve(f, v.len, &p));
	const char *why = csr_facts_go_uri((const char *)v.p, v.len, p, &s->value_len);
	if (why) {
		char shown[96];
		snprintf(shown, sizeof(shown), "%.*s%s", v.len > 80 ? 80 : (int)v.len, (const char *)v.p,
		         v.len > 80 ? "..." : "");
		for (char *c = shown; *c; c++)
			if ((uint8_t)*c < 0x20 || (uint8_t)*c == 0x7f)
				*c = '?';
		SG_BAIL(SG_EINVAL, "CSR subjectAltName URI \"%s\" cannot be evaluated: %s", shown, why);
	}
	s->value = csr_facts_text_commit(f, s->value_len);
	return SG_OK;
}

/*
 *   OtherName ::= SEQUENCE { type-id OBJECT IDENTIFIER, value [0] EXPLICIT ANY }
 * (with the GeneralName's IMPLICIT [0] in place of the SEQUENCE tag).
 */
static int other_name(facts_build *b, sg_slice v)
{
	sg_csr_facts *f = b->f;
	sg_reader r = sg_reader_of(v);
	sg_slice oid, wrap, inner, inner_tlv;
	uint8_t tag;
	if (sg_der_read(&r, SG_DER_OID, &oid, NULL) != SG_OK)
		return cm_error(f, "otherName does not start with its type-id OID");
	const char *oidtxt, *goerr;
	SG_TRY(csr_facts_text_oid(f, oid, &oidtxt, &goerr));
	if (goerr)
		return cm_error(f, "%s", goerr);
	if (sg_der_read(&r, SG_DER_CTX0, &wrap, NULL) != SG_OK || !sg_reader_done(&r))
		return cm_error(f, "otherName %s has no single [0] EXPLICIT value", oidtxt);
	sg_reader w = sg_reader_of(wrap);
	if (sg_der_read_any(&w, &tag, &inner, &inner_tlv) != SG_OK || !sg_reader_done(&w))
		return cm_error(f, "otherName %s value is not one valid TLV", oidtxt);
	sg_csr_facts_san *s;
	SG_TRY(add_san(b, SG_CSR_FACTS_SAN_OTHER_NAME, v, &s));
	s->oid = oidtxt;
	unsigned num = tag & 0x1f;
	if ((tag & 0xc0) == 0 &&
	    (num == SG_DER_UTF8STRING || num == SG_DER_PRINTABLESTRING || num == SG_DER_IA5STRING || num == 0x14)) {
		s->value_len = inner.len;
		return csr_facts_text_put(f, inner.p, inner.len, &s->value);
	}
	return csr_facts_text_hex(f, inner_tlv, &s->value, &s->value_len);
}

/* cert-manager decodes directoryName as [4] IMPLICIT RDNSequence, so the
 * content must be SETs of SEQUENCEs; an RFC 5280 directoryName ([4]
 * EXPLICIT Name: a SEQUENCE inside) is "sequence tag mismatch" to it. */
static bool cm_reads_directory(sg_slice v)
{
	sg_reader r = sg_reader_of(v);
	while (!sg_reader_done(&r)) {
		sg_slice set;
		if (sg_der_read(&r, SG_DER_SET, &set, NULL) != SG_OK)
			return false;
		sg_reader s = sg_reader_of(set);
		while (!sg_reader_done(&s)) {
			sg_slice atv;
			if (sg_der_read(&s, SG_DER_SEQUENCE, &atv, NULL) != SG_OK)
				return false;
		}
	}
	return true;
}

/*
 *   GeneralName ::= CHOICE {
 *     otherName [0] OtherName, rfc822Name [1] IA5String, dNSName [2] IA5String,
 *     x400Address [3] ORAddress, directoryName [4] Name, ediPartyName [5] EDIPartyName,
 *     uniformResourceIdentifier [6] IA5String, iPAddress [7] OCTET STRING,
 *     registeredID [8] OBJECT IDENTIFIER }
 */
static int general_name(facts_build *b, uint8_t tag, sg_slice v)
{
	sg_csr_facts *f = b->f;
	unsigned num = tag & 0x1f;
	bool constructed = tag & 0x20;
	SG_ENSURE(b->names_seen < SG_CSR_FACTS_MAX_SANS, SG_EINVAL,
	          "CSR requests more than %d subject alternative names", SG_CSR_FACTS_MAX_SANS);
	b->names_seen++;
	SG_ENSURE(v.len <= SG_CSR_FACTS_MAX_VALUE, SG_EINVAL, "CSR subjectAltName has a name longer than %d bytes",
	          SG_CSR_FACTS_MAX_VALUE);
	if (num >= 9)
		return cm_error(f, "asn1: structure error: bad SAN choice");
	if ((tag & 0xc0) != 0x80)
		return cm_error(f, "GeneralName with tag 0x%02x is not context-specific", tag);
	const char *name = san_type_names[num];
	sg_csr_facts_san *s;
	switch (num) {
	case SG_CSR_FACTS_SAN_EMAIL:
	case SG_CSR_FACTS_SAN_DNS:
	case SG_CSR_FACTS_SAN_URI:
		if (constructed)
			return cm_error(f, "%s must be primitive", name);
		return ia5_name(b, num, v);
	case SG_CSR_FACTS_SAN_IP: {
		if (constructed)
			return cm_error(f, "%s must be primitive", name);
		SG_ENSURE(v.len == 4 || v.len == 16, SG_EINVAL,
		          "CSR subjectAltName: x509: cannot parse IP address of length %zu", v.len);
		char *p = NULL;
		SG_TRY(add_san(b, SG_CSR_FACTS_SAN_IP, v, &s));
		SG_TRY(csr_facts_text_reserve(f, 40, &p));
		s->value_len = csr_facts_ip_text(v.p, v.len, p);
		s->value = csr_facts_text_commit(f, s->value_len);
		return SG_OK;
	}
	case SG_CSR_FACTS_SAN_OTHER_NAME:
		if (!constructed)
			return cm_error(f, "%s must be constructed", name);
		return other_name(b, v);
	case SG_CSR_FACTS_SAN_DIRECTORY:
	case SG_CSR_FACTS_SAN_EDI_PARTY:
		if (!constructed)
			return cm_error(f, "%s must be constructed", name);
		if (num == SG_CSR_FACTS_SAN_DIRECTORY && !cm_reads_directory(v))
			SG_TRY(cm_error(f, "asn1: structure error: sequence tag mismatch"));
		/* fall through */
	case SG_CSR_FACTS_SAN_X400:
		SG_TRY(add_san(b, (sg_csr_facts_san_type)num, v, &s));
		return csr_facts_text_hex(f, v, &s->value, &s->value_len);
	case SG_CSR_FACTS_SAN_REGISTERED_ID: {
		if (constructed)
			return cm_error(f, "%s must be primitive", name);
		const char *oidtxt, *goerr;
		SG_TRY(csr_facts_text_oid(f, v, &oidtxt, &goerr));
		if (goerr)
			return cm_error(f, "%s", goerr);
		SG_TRY(add_san(b, SG_CSR_FACTS_SAN_REGISTERED_ID, v, &s));
		s->value = oidtxt;
		s->value_len = strlen(oidtxt);
		return SG_OK;
	}
	default:
		SG_BAIL(SG_EINTERNAL, "CSR facts: unreachable GeneralName %u", num);
	}
}

/*   SubjectAltName ::= GeneralNames ::= SEQUENCE SIZE (1..MAX) OF GeneralName
 * (crypto/x509 accepts an empty SEQUENCE and ignores bytes after it;
 * cert-manager refuses those bytes.) */
int csr_facts_parse_san(facts_build *b, sg_slice value)
{
	sg_csr_facts *f = b->f;
	f->san_extensions++;
	sg_reader r = sg_reader_of(value);
	sg_slice names;
	SG_ENSURE(sg_der_read(&r, SG_DER_SEQUENCE, &names, NULL) == SG_OK, SG_EINVAL,
	          "CSR subjectAltName: x509: invalid subject alternative names");
	if (!sg_reader_done(&r))
		SG_TRY(cm_error(f, "x509: trailing data after X.509 extension"));
	sg_reader g = sg_reader_of(names);
	while (!sg_reader_done(&g)) {
		uint8_t tag;
		sg_slice v;
		SG_ENSURE(sg_der_read_any(&g, &tag, &v, NULL) == SG_OK, SG_EINVAL,
		          "CSR subjectAltName: x509: invalid subject alternative name");
		SG_TRY(general_name(b, tag, v));
	}
	return SG_OK;
}
