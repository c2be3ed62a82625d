/*
 * Fuzz target for what the Kubernetes-facing signers read from objects:
 * Go duration strings (common/sg_goduration.c) and usage lists
 * (controllers/sg_kubesign.c). Both come from users (issuer specs,
 * CertificateRequests, CSR annotations).
 *
 * Durations: the input, cut at its first NUL and at DURATION_MAX bytes, is
 * parsed. Oracles: SG_OK with seconds in [0, Go's maximum] and an input of
 * at most 64 bytes, or SG_EINVAL with seconds 0 and a message that is
 * UTF-8 when the input is (it ends up in status conditions and Events);
 * formatting the seconds and parsing that gives the same seconds; and two
 * properties of Go's grammar: a leading '+' changes nothing, and neither
 * does a trailing "0s".
 *
 * Usages: the input split at newlines is a JSON array of strings, built as
 * the API server's JSON would give them (valid UTF-8 without NUL; jansson
 * refuses anything else when it loads a document); a line that is not
 * such a string becomes a number, which must be refused. The first byte's
 * low bit is isCA. Oracles: accepted only when every element is one of
 * the supported names of the table below (cert-manager's KeyUsage enum,
 * written here independently of the parser), with exactly the masks that
 * table gives (the defaults for an empty list, plus keyCertSign for isCA);
 * refused with a UTF-8 message otherwise.
 */
#include "sg_csr.h"
#include "sg_goduration.h"
#include "sg_kubesign.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DURATION_MAX 100        /* beyond the parser's 64, to reach that refusal */
#define USAGES_INPUT_MAX 4096   /* bytes of input turned into usage names */
#define GO_MAX_SECONDS 9223372036LL /* int64 nanoseconds, in whole seconds */
#define DFLT_KU (SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT)
#define DFLT_EKU SG_EKU_SERVER_AUTH

static void check(int cond)
{
	if (!cond)
		abort();
}

static bool utf8_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	while (p < end) {
		unsigned k = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : 9;
		if (k == 9 || (k == 1 && *p < 0xC2) || (k == 3 && *p > 0xF4) || (size_t)(end - p) <= k)
			return false;
		for (unsigned i = 1; i <= k; i++)
			if ((p[i] & 0xC0) != 0x80)
				return false;
		/* no overlong 3/4-byte forms, surrogates or code points past U+10FFFF */
		if ((k == 2 && p[0] == 0xE0 && p[1] < 0xA0) || (k == 2 && p[0] == 0xED && p[1] >= 0xA0) ||
		    (k == 3 && p[0] == 0xF0 && p[1] < 0x90) || (k == 3 && p[0] == 0xF4 && p[1] >= 0x90))
			return false;
		p += k + 1;
	}
	return true;
}

static void check_message(bool input_utf8)
{
	const char *msg = sg_error_last()->msg;
	check(msg[0] != 0);
	if (input_utf8)
		check(utf8_ok(msg, strlen(msg)));
}

/* ---- durations ---- */

static int parse(const char *s, int64_t *sec)
{
	*sec = -1;
	int rc = sg_goduration_parse(s, sec);
	check(rc == SG_OK || rc == SG_EINVAL);
	if (rc == SG_OK)
		check(*sec >= 0 && *sec <= GO_MAX_SECONDS && strlen(s) <= 64);
	else
		check(*sec == 0);
	return rc;
}

static void fuzz_duration(const uint8_t *data, size_t size)
{
	size_t n = size < DURATION_MAX ? size : DURATION_MAX;
	char s[DURATION_MAX + 8];
	memcpy(s, data, n);
	s[n] = 0;
	n = strlen(s); /* what a C string of it holds */

	int64_t sec;
	int rc = parse(s, &sec);
	if (rc != SG_OK) {
		check_message(utf8_ok(s, n));
	} else {
		char out[32];
		sg_goduration_format(sec, out, sizeof(out));
		check(strlen(out) < sizeof(out) - 1);
		int64_t again;
		check(parse(out, &again) == SG_OK && again == sec);
	}

	/* "+" in front: the same answer (when it still fits the bound). */
	if (n < 64 && s[0] != '+' && s[0] != '-') {
		char plus[DURATION_MAX + 8];
		plus[0] = '+';
		memcpy(plus + 1, s, n + 1);
		int64_t psec;
		check(parse(plus, &psec) == rc && psec == sec);
	}
	/* "0s" behind a valid duration: the same duration. */
	if (rc == SG_OK && n <= 62) {
		char zero[DURATION_MAX + 8];
		memcpy(zero, s, n);
		memcpy(zero + n, "0s", 3);
		int64_t zsec;
		check(parse(zero, &zsec) == SG_OK && zsec == sec);
	}
}

/* ---- usages ---- */

/* cert-manager's KeyUsage names (reference §1.1), and what this issuer puts
 * in a certificate for each (all of them can be written since issue 30). */
static const struct {
	const char *name;
	bool supported;
	uint32_t ku, eku;
} usage_table[] = {
    {"signing", true, SG_KU_DIGITAL_SIGNATURE, 0},
    {"digital signature", true, SG_KU_DIGITAL_SIGNATURE, 0},
    {"content commitment", true, SG_KU_NON_REPUDIATION, 0},
    {"key encipherment", true, SG_KU_KEY_ENCIPHERMENT, 0},
    {"key agreement", true, SG_KU_KEY_AGREEMENT, 0},
    {"data encipherment", true, SG_KU_DATA_ENCIPHERMENT, 0},
    {"cert sign", true, SG_KU_KEY_CERT_SIGN, 0},
    {"crl sign", true, SG_KU_CRL_SIGN, 0},
    {"encipher only", true, SG_KU_ENCIPHER_ONLY, 0},
    {"decipher only", true, SG_KU_DECIPHER_ONLY, 0},
    {"any", true, 0, SG_EKU_ANY},
    {"server auth", true, 0, SG_EKU_SERVER_AUTH},
    {"client auth", true, 0, SG_EKU_CLIENT_AUTH},
    {"code signing", true, 0, SG_EKU_CODE_SIGNING},
    {"email protection", true, 0, SG_EKU_EMAIL_PROTECTION},
    {"s/mime", true, 0, SG_EKU_EMAIL_PROTECTION},
    {"ipsec end system", true, 0, SG_EKU_IPSEC_END_SYSTEM},
    {"ipsec tunnel", true, 0, SG_EKU_IPSEC_TUNNEL},
    {"ipsec user", true, 0, SG_EKU_IPSEC_USER},
    {"timestamping", true, 0, SG_EKU_TIME_STAMPING},
    {"ocsp signing", true, 0, SG_EKU_OCSP_SIGNING},
    {"microsoft sgc", true, 0, SG_EKU_MS_SGC},
    {"netscape sgc", true, 0, SG_EKU_NS_SGC},
};

/* The table row of a name, or -1. */
static int usage_row(const char *name)
{
	for (size_t i = 0; i < sizeof(usage_table) / sizeof(usage_table[0]); i++)
		if (strcmp(usage_table[i].name, name) == 0)
			return (int)i;
	return -1;
}

static void fuzz_usages(const uint8_t *data, size_t size)
{
	bool is_ca = size > 0 && (data[0] & 1);
	size_t n = size < USAGES_INPUT_MAX ? size : USAGES_INPUT_MAX;
	json_t *arr = json_array();
	check(arr != NULL);
	/* What the oracle expects: all elements supported strings, and their masks. */
	bool all_ok = true;
	uint32_t want_ku = 0, want_eku = 0;
	size_t start = 0;
	while (n > 0 && start <= n) {
		const uint8_t *nl = memchr(data + start, '\n', n - start);
		size_t end = nl ? (size_t)(nl - data) : n;
		const char *line = (const char *)data + start;
		size_t len = end - start;
		json_t *v = NULL;
		if (!memchr(line, 0, len) && utf8_ok(line, len))
			v = json_stringn(line, len);
		if (v) {
			int row = usage_row(json_string_value(v));
			if (row < 0 || !usage_table[row].supported) {
				all_ok = false;
			} else {
				want_ku |= usage_table[row].ku;
				want_eku |= usage_table[row].eku;
			}
		} else {
			v = json_integer((json_int_t)len);
			all_ok = false;
		}
		check(v != NULL && json_array_append_new(arr, v) == 0);
		if (!nl)
			break;
		start = end + 1;
	}
	if (json_array_size(arr) == 0) {
		want_ku = DFLT_KU;
		want_eku = DFLT_EKU;
	}
	if (is_ca)
		want_ku |= SG_KU_KEY_CERT_SIGN;

	uint32_t ku = 0xdead, eku = 0xbeef;
	int rc = sg_kubesign_usages(arr, is_ca, DFLT_KU, DFLT_EKU, &ku, &eku);
	check(rc == SG_OK || rc == SG_EINVAL);
	check((rc == SG_OK) == all_ok);
	if (rc == SG_OK) {
		check(ku == want_ku && eku == want_eku);
	} else {
		check_message(true); /* every string element is UTF-8 */
	}
	json_decref(arr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_duration(data, size);
	fuzz_usages(data, size);
	return 0;
}
