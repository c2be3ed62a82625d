/*
 * The pure functions of controllers/sg_kubesign.c, which read what users
 * and other controllers put in Kubernetes objects: Go durations (issuer
 * specs, CertificateRequest spec.duration, the CSR duration annotation),
 * usage names, []byte fields. No API server, no HSM.
 *
 * Durations: the header promises Go's time.ParseDuration for every
 * duration >= 0 (in at most 64 characters). The table below is Go's answer,
 * not ours: fixtures/go_durations.go prints it (`go run` it to check a case
 * or to regenerate the rows). Messages are checked loosely, on a key word,
 * since their wording is ours to change.
 */
#include "sg_goduration.h"
#include "sg_kubesign.h"

#include "sg_csr.h"
#include "sg_kubecsr.h"
#include "sg_kubekeep.h"
#include "sg_signetissuer.h"
#include "sg_test.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- durations ---- */

typedef struct {
	const char *in;
	bool ok;
	int64_t seconds;
} go_case;

/* From Go 1.19's time.ParseDuration (fixtures/go_durations.go); ok false
 * also for what Go parses as negative. */
static const go_case go_cases[] = {
    {"0", true, 0},
    {"+0", true, 0},
    {"0s", true, 0},
    {"+1h", true, 3600},
    {"1h", true, 3600},
    {"2160h", true, 7776000},
    {"2160h0m0s", true, 7776000},
    {"1h30m", true, 5400},
    {"1.5h", true, 5400},
    {"90m", true, 5400},
    {"1m1h", true, 3660}, /* any order, as Go */
    {"300ms", true, 0},   /* fractions of a second are dropped */
    {"999ms", true, 0},
    {"1001ms", true, 1},
    {"1h1us", true, 3600},
    {"1h1\xc2\xb5s", true, 3600}, /* U+00B5 micro sign */
    {"1h1\xce\xbcs", true, 3600}, /* U+03BC Greek mu */
    {"2\xc2\xb5s", true, 0},
    {"1ns1ns", true, 0},
    {".5h", true, 1800},
    {"5.h", true, 18000},
    {"3m0.5s", true, 180},
    {"59.999999999s", true, 59},
    {"1.9999999999s", true, 1},
    {"0.0000000001s", true, 0},
    {"00001h", true, 3600},
    {"0000000000000000000000000000000001s", true, 1},
    {"1.0000000000000000000000001h", true, 3600},
    {"2562047h47m16.854775807s", true, 9223372036}, /* Go's largest */
    {"9223372036s", true, 9223372036},
    {"153722867m", true, 9223372020},
    {"2562047h47m16.854775808s", false, 0}, /* one nanosecond more */
    {"2562047h47m17s", false, 0},
    {"2562048h", false, 0},
    {"9223372036854775808ns", false, 0},
    {"9223372037s", false, 0},
    {"1000000000000000000000ns", false, 0},
    {"153722868m", false, 0},
    {"", false, 0},
    {"-1h", false, 0},   /* negative */
    {"-0.5s", false, 0}, /* negative */
    {"1", false, 0},     /* missing unit */
    {"00", false, 0},
    {"h", false, 0},
    {"1d", false, 0}, /* unknown unit "d" */
    {"1H", false, 0},
    {"1hh", false, 0},   /* unknown unit "hh" */
    {"1h-5m", false, 0}, /* unknown unit "h-" */
    {"1h+5m", false, 0},
    {" 1h", false, 0},
    {"1h ", false, 0},
    {"1 h", false, 0},
    {"1.h.5", false, 0},
    {"1..5h", false, 0},
    {"0.", false, 0},
    {".0", false, 0},
    {".", false, 0},
    {"+", false, 0},
    {"-", false, 0},
    {"++1h", false, 0},
    {"+-1h", false, 0},
    {"1e3s", false, 0},
    {"0x10s", false, 0},
    {"1,5h", false, 0},
    {"\xc2\xb5s", false, 0},
};

static void t_duration_go(void)
{
	for (size_t i = 0; i < sizeof(go_cases) / sizeof(go_cases[0]); i++) {
		const go_case *c = &go_cases[i];
		int64_t s = -1;
		int rc = sg_goduration_parse(c->in, &s);
		if (c->ok) {
			SG_CHECK_OK(rc);
			SG_CHECK(s == c->seconds);
		} else {
			SG_CHECK_RC(rc, SG_EINVAL);
			SG_CHECK(s == 0); /* *seconds is never left undefined */
		}
		if ((rc == SG_OK) != c->ok || (c->ok && s != c->seconds))
			fprintf(stderr, "  case \"%s\": got rc %d, %lld s; Go: %s, %lld s\n", c->in, rc, (long long)s,
			        c->ok ? "ok" : "invalid", (long long)c->seconds);
	}
}

/* The edges of Go's grammar where it accepts what a simpler reading would
 * refuse: a minus sign on zero ("-0", "-0s" are durations of 0, which Go
 * returns without error) and whole numbers of nanoseconds up to the int64
 * maximum itself. Kept apart so a failure names the rule. */
static void t_duration_go_edges(void)
{
	static const go_case edges[] = {
	    {"-0", true, 0},
	    {"-0s", true, 0},
	    {"-0.0000000001s", true, 0}, /* Go: a fraction below 1 ns is 0, and -0 is 0 */
	    {"9223372036854775807ns", true, 9223372036},
	    {"9223372036854775800ns", true, 9223372036},
	    {"922337203685477580ns", true, 922337203},
	};
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
		int64_t s = -1;
		int rc = sg_goduration_parse(edges[i].in, &s);
		SG_CHECK_OK(rc);
		SG_CHECK(s == edges[i].seconds);
		if (rc != SG_OK || s != edges[i].seconds)
			fprintf(stderr, "  case \"%s\": got rc %d, %lld s; Go: ok, %lld s\n", edges[i].in, rc,
			        (long long)s, (long long)edges[i].seconds);
	}
}

static void t_duration_messages(void)
{
	int64_t s;
	SG_CHECK_RC(sg_goduration_parse(NULL, &s), SG_EINVAL);
	SG_CHECK_MSG("missing");
	SG_CHECK_RC(sg_goduration_parse("", &s), SG_EINVAL);
	SG_CHECK_MSG("empty");
	SG_CHECK_RC(sg_goduration_parse("-1h", &s), SG_EINVAL);
	SG_CHECK_MSG("negative");
	SG_CHECK_RC(sg_goduration_parse("1d", &s), SG_EINVAL);
	SG_CHECK_MSG("unknown unit");
	SG_CHECK_RC(sg_goduration_parse("1hh", &s), SG_EINVAL);
	SG_CHECK_MSG("unknown unit");
	SG_CHECK_RC(sg_goduration_parse("90", &s), SG_EINVAL);
	SG_CHECK_MSG("unit");
	SG_CHECK_RC(sg_goduration_parse("2562048h", &s), SG_EINVAL);
	SG_CHECK_MSG("too large");
	SG_CHECK_RC(sg_goduration_parse("99999999999999999999h", &s), SG_EINVAL);
	SG_CHECK_MSG("too large");
	SG_CHECK_RC(sg_goduration_parse("h", &s), SG_EINVAL);
	SG_CHECK_MSG("\"h\""); /* the message quotes the input */
}

/* signet's own bound: at most 64 characters (Go has none), checked before
 * anything is parsed, and the refusal does not quote the whole input. */
static void t_duration_length(void)
{
	char s64[65], s65[66];
	memset(s64, '0', 63);
	s64[63] = 'h';
	s64[64] = 0;
	memset(s65, '0', 64);
	s65[64] = 'h';
	s65[65] = 0;
	int64_t s = -1;
	SG_CHECK_OK(sg_goduration_parse(s64, &s));
	SG_CHECK(s == 0);
	s = -1;
	SG_CHECK_RC(sg_goduration_parse(s65, &s), SG_EINVAL);
	SG_CHECK_MSG("64");
	SG_CHECK(s == 0);
	SG_CHECK(strstr(sg_error_last()->msg, s65) == NULL);

	/* A long string is read no further than the bound: a string of a
	 * megabyte without a terminator in its first 65 bytes would be, too. */
	size_t big = 1u << 20;
	char *long_s = malloc(big + 1);
	SG_CHECK(long_s != NULL);
	if (!long_s)
		return;
	memset(long_s, '1', big);
	long_s[big] = 0;
	SG_CHECK_RC(sg_goduration_parse(long_s, &s), SG_EINVAL);
	SG_CHECK_MSG("longer than 64");
	free(long_s);
}

static void t_duration_format(void)
{
	static const struct {
		int64_t s;
		const char *go; /* Go's time.Duration(s * time.Second).String() */
	} cases[] = {
	    {0, "0s"},
	    {1, "1s"},
	    {59, "59s"},
	    {60, "1m0s"},
	    {61, "1m1s"},
	    {3599, "59m59s"},
	    {3600, "1h0m0s"},
	    {86399, "23h59m59s"},
	    {7776000, "2160h0m0s"},
	    {9223372036, "2562047h47m16s"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[32];
		memset(out, 'x', sizeof(out));
		sg_goduration_format(cases[i].s, out, sizeof(out));
		SG_CHECK(strcmp(out, cases[i].go) == 0);
		int64_t back = -1;
		SG_CHECK_OK(sg_goduration_parse(out, &back));
		SG_CHECK(back == cases[i].s);
	}
	/* Negative seconds are no duration we print. */
	char out[32];
	sg_goduration_format(-5, out, sizeof(out));
	SG_CHECK(strcmp(out, "0s") == 0);
	/* A short buffer gets a terminated prefix, never an overrun. */
	char small[5] = {'x', 'x', 'x', 'x', 'Z'};
	sg_goduration_format(7776000, small, 4);
	SG_CHECK(strcmp(small, "216") == 0);
	SG_CHECK(small[4] == 'Z');
	/* cap >= 32 is enough for anything a parse returns (its maximum). */
	char most[32];
	sg_goduration_format(INT64_MAX, most, sizeof(most));
	SG_CHECK(strlen(most) < sizeof(most) - 1);
	SG_CHECK(most[strlen(most) - 1] == 's');
}

/* ---- usages ---- */

/* Parses text as JSON for a test (NULL text: NULL). */
static json_t *j(const char *text)
{
	if (!text)
		return NULL;
	json_error_t e;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
	if (!v)
		fprintf(stderr, "bad test JSON %s: %s\n", text, e.text);
	return v;
}

/* Runs sg_kubesign_usages on JSON text with defaults 0x55/0xAA. */
static int usages(const char *text, bool is_ca, uint32_t *ku, uint32_t *eku)
{
	json_t *v = j(text);
	int rc = sg_kubesign_usages(v, is_ca, 0x55, 0xAA, ku, eku);
	json_decref(v);
	return rc;
}

static void t_usages_defaults(void)
{
	uint32_t ku = 1, eku = 1;
	SG_CHECK_OK(sg_kubesign_usages(NULL, false, 0x55, 0xAA, &ku, &eku));
	SG_CHECK(ku == 0x55 && eku == 0xAA);
	SG_CHECK_OK(usages("[]", false, &ku, &eku));
	SG_CHECK(ku == 0x55 && eku == 0xAA);
	/* isCA adds keyCertSign to the defaults too */
	SG_CHECK_OK(usages("[]", true, &ku, &eku));
	SG_CHECK(ku == (0x55u | SG_KU_KEY_CERT_SIGN) && eku == 0xAA);
	/* a non-empty list replaces the defaults entirely */
	SG_CHECK_OK(usages("[\"server auth\"]", false, &ku, &eku));
	SG_CHECK(ku == 0 && eku == SG_EKU_SERVER_AUTH);
}

static void t_usages_names(void)
{
	/* Every name both APIs define: each can be put in a certificate. */
	static const struct {
		const char *name;
		uint32_t ku, eku;
	} names[] = {
	    {"signing", SG_KU_DIGITAL_SIGNATURE, 0},
	    {"digital signature", SG_KU_DIGITAL_SIGNATURE, 0},
	    {"content commitment", SG_KU_NON_REPUDIATION, 0},
	    {"key encipherment", SG_KU_KEY_ENCIPHERMENT, 0},
	    {"key agreement", SG_KU_KEY_AGREEMENT, 0},
	    {"data encipherment", SG_KU_DATA_ENCIPHERMENT, 0},
	    {"cert sign", SG_KU_KEY_CERT_SIGN, 0},
	    {"crl sign", SG_KU_CRL_SIGN, 0},
	    {"encipher only", SG_KU_ENCIPHER_ONLY, 0},
	    {"decipher only", SG_KU_DECIPHER_ONLY, 0},
	    {"any", 0, SG_EKU_ANY},
	    {"server auth", 0, SG_EKU_SERVER_AUTH},
	    {"client auth", 0, SG_EKU_CLIENT_AUTH},
	    {"code signing", 0, SG_EKU_CODE_SIGNING},
	    {"email protection", 0, SG_EKU_EMAIL_PROTECTION},
	    {"s/mime", 0, SG_EKU_EMAIL_PROTECTION},
	    {"ipsec end system", 0, SG_EKU_IPSEC_END_SYSTEM},
	    {"ipsec tunnel", 0, SG_EKU_IPSEC_TUNNEL},
	    {"ipsec user", 0, SG_EKU_IPSEC_USER},
	    {"timestamping", 0, SG_EKU_TIME_STAMPING},
	    {"ocsp signing", 0, SG_EKU_OCSP_SIGNING},
	    {"microsoft sgc", 0, SG_EKU_MS_SGC},
	    {"netscape sgc", 0, SG_EKU_NS_SGC},
	};
	SG_CHECK(sizeof(names) / sizeof(names[0]) == 23); /* cert-manager's KeyUsage enum, whole */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		json_t *v = json_pack("[s]", names[i].name);
		uint32_t ku = 0xFFFF, eku = 0xFFFF;
		SG_CHECK_OK(sg_kubesign_usages(v, false, 0x55, 0xAA, &ku, &eku));
		SG_CHECK(ku == names[i].ku && eku == names[i].eku);
		if (ku != names[i].ku || eku != names[i].eku)
			fprintf(stderr, "  usage \"%s\": ku 0x%x eku 0x%x\n", names[i].name, ku, eku);
		json_decref(v);
	}
	uint32_t ku, eku;
	/* cert-manager's default pair, plus the EKUs of a TLS server */
	SG_CHECK_OK(usages("[\"digital signature\", \"key encipherment\", \"server auth\", \"client auth\"]", false,
	                   &ku, &eku));
	SG_CHECK(ku == (SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT));
	SG_CHECK(eku == (SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH));
	/* "s/mime" and "email protection" are one purpose; repeats are harmless */
	uint32_t ku2, eku2;
	SG_CHECK_OK(usages("[\"s/mime\"]", false, &ku, &eku));
	SG_CHECK_OK(usages("[\"email protection\", \"s/mime\", \"email protection\"]", false, &ku2, &eku2));
	SG_CHECK(ku == ku2 && eku == eku2 && eku == SG_EKU_EMAIL_PROTECTION);
	/* isCA adds cert sign to what was asked */
	SG_CHECK_OK(usages("[\"digital signature\"]", true, &ku, &eku));
	SG_CHECK(ku == (SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_CERT_SIGN) && eku == 0);
	SG_CHECK_OK(usages("[\"cert sign\", \"crl sign\"]", true, &ku, &eku));
	SG_CHECK(ku == (SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN));
}

static void t_usages_refused(void)
{
	uint32_t ku = 7, eku = 7;
	/* Unknown: names are exact and case-sensitive, as the APIs' enums. */
	static const char *const unknown[] = {
	    "Server Auth", "serverAuth", "server  auth", " server auth", "server auth ", "", "digital_signature",
	};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		json_t *v = json_pack("[s]", unknown[i]);
		ku = eku = 7;
		SG_CHECK_RC(sg_kubesign_usages(v, false, 0x55, 0xAA, &ku, &eku), SG_EINVAL);
		SG_CHECK_MSG("unknown usage");
		char quoted[64];
		snprintf(quoted, sizeof(quoted), "\"%s\"", unknown[i]);
		SG_CHECK_MSG(quoted);
		SG_CHECK(ku == 0 && eku == 0); /* nothing half-filled on failure */
		json_decref(v);
	}
	/* A long unknown name is shown cut, not whole. */
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	json_t *v = json_pack("[s]", longname);
	SG_CHECK_RC(sg_kubesign_usages(v, false, 0, 0, &ku, &eku), SG_EINVAL);
	SG_CHECK_MSG("...");
	SG_CHECK(strlen(sg_error_last()->msg) < 100);
	json_decref(v);

	/* Not a list, or a list of something else than strings. */
	SG_CHECK_RC(usages("{\"usages\": [\"server auth\"]}", false, &ku, &eku), SG_EINVAL);
	SG_CHECK_MSG("not a list");
	SG_CHECK_RC(usages("\"server auth\"", false, &ku, &eku), SG_EINVAL);
	SG_CHECK_MSG("not a list");
	SG_CHECK_RC(usages("null", false, &ku, &eku), SG_EINVAL);
	SG_CHECK_RC(usages("[\"server auth\", 5]", false, &ku, &eku), SG_EINVAL);
	SG_CHECK_MSG("usages[1]");
	SG_CHECK_RC(usages("[null]", false, &ku, &eku), SG_EINVAL);
	SG_CHECK_MSG("usages[0]");
	SG_CHECK_RC(usages("[[\"server auth\"]]", false, &ku, &eku), SG_EINVAL);
	SG_CHECK_RC(usages("[{\"name\": \"server auth\"}]", false, &ku, &eku), SG_EINVAL);
	SG_CHECK(ku == 0 && eku == 0);
}

/* Whether s is well-formed UTF-8 (RFC 3629): what a Kubernetes object's
 * strings must be, and where these messages end up (condition messages,
 * Events). */
static bool utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	while (*p) {
		unsigned n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : 9;
		if (n == 9 || (n == 1 && *p < 0xC2) || (n == 3 && *p > 0xF4))
			return false;
		for (unsigned i = 1; i <= n; i++)
			if ((p[i] & 0xC0) != 0x80)
				return false;
		p += n + 1;
	}
	return true;
}

/* The refusal names the usage but cuts a long one: the cut must not split
 * a multi-byte character, or the message is no longer UTF-8 and cannot be
 * written into a status condition (jansson refuses such a string). */
static void t_usages_message_utf8(void)
{
	for (size_t lead = 35; lead <= 41; lead++) {
		char name[80];
		memset(name, 'a', lead);
		strcpy(name + lead, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9 usage");
		json_t *v = json_pack("[s]", name);
		SG_CHECK(v != NULL);
		uint32_t ku, eku;
		SG_CHECK_RC(sg_kubesign_usages(v, false, 0, 0, &ku, &eku), SG_EINVAL);
		SG_CHECK(utf8_ok(sg_error_last()->msg));
		json_decref(v);
	}
}

/* ---- []byte fields ---- */

static void t_bytes_field(void)
{
	char *out = (char *)&out;
	size_t len = 99;
	json_t *o = j("{\"request\": \"aGVsbG8=\", \"num\": 5, \"null\": null, \"empty\": \"\", \"arr\": [\"aGVsbG8=\"],"
	              "\"bad\": \"aGVsbG8\", \"url\": \"-_-_\", \"space\": \"aGVs bG8=\", \"nl\": \"aGVs\\nbG8=\","
	              "\"bits\": \"aGVsbG9=\", \"after\": \"aGVsbG8=aGVs\", \"pad\": \"YQ==\"}");
	SG_CHECK(o != NULL);

	SG_CHECK_OK(sg_kubesign_bytes_field(o, "request", 100, &out, &len));
	SG_CHECK(len == 5 && out && memcmp(out, "hello", 6) == 0); /* NUL-terminated */
	free(out);
	SG_CHECK_OK(sg_kubesign_bytes_field(o, "pad", 100, &out, &len));
	SG_CHECK(len == 1 && out && strcmp(out, "a") == 0);
	free(out);

	static const struct {
		const char *field, *word;
	} bad[] = {
	    {"missing", "missing"}, {"num", "not a string"},  {"null", "not a string"}, {"arr", "not a string"},
	    {"empty", "empty"},     {"bad", "not base64"},    {"url", "not base64"},    {"space", "not base64"},
	    {"nl", "not base64"},   {"bits", "not base64"},   {"after", "not base64"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		out = (char *)&out;
		len = 99;
		SG_CHECK_RC(sg_kubesign_bytes_field(o, bad[i].field, 100, &out, &len), SG_EINVAL);
		SG_CHECK_MSG(bad[i].word);
		SG_CHECK_MSG(bad[i].field); /* the message names the field */
		SG_CHECK(out == NULL && len == 0);
	}
	/* Not an object at all. */
	json_t *arr = j("[\"aGVsbG8=\"]");
	SG_CHECK_RC(sg_kubesign_bytes_field(arr, "request", 100, &out, &len), SG_EINVAL);
	SG_CHECK_RC(sg_kubesign_bytes_field(NULL, "request", 100, &out, &len), SG_EINVAL);
	json_decref(arr);
	/* An embedded NUL (json_stringn; jansson's parser refuses \u0000
	 * anyway) is not base64. */
	json_object_set_new(o, "nul", json_stringn("YQ==\0YQ==", 9));
	SG_CHECK_RC(sg_kubesign_bytes_field(o, "nul", 100, &out, &len), SG_EINVAL);
	SG_CHECK_MSG("not base64");
	json_decref(o);
}

/* The size is checked on the encoded length before anything is decoded or
 * allocated: a huge value that is not even base64 is refused as too
 * large, not as malformed, so it was never handed to the decoder. */
static void t_bytes_field_size(void)
{
	size_t n = 8u << 20;
	char *junk = malloc(n + 1);
	SG_CHECK(junk != NULL);
	if (!junk)
		return;
	memset(junk, '!', n);
	junk[n] = 0;
	json_t *o = json_pack("{s:s}", "request", junk);
	free(junk);
	char *out = NULL;
	size_t len = 0;
	SG_CHECK_RC(sg_kubesign_bytes_field(o, "request", SG_KUBESIGN_REQUEST_MAX, &out, &len), SG_EINVAL);
	SG_CHECK_MSG("larger than");
	SG_CHECK(out == NULL);
	json_decref(o);

	/* At and just over the limit, with every padding length. */
	for (size_t max = 1; max <= 12; max++) {
		for (size_t size = max > 3 ? max - 3 : 1; size <= max + 3; size++) {
			char data[16];
			for (size_t i = 0; i < size; i++)
				data[i] = (char)('a' + i);
			char *b64 = NULL;
			SG_CHECK_OK(sg_kubesign_base64(data, size, &b64));
			json_t *f = json_pack("{s:s}", "f", b64 ? b64 : "");
			out = NULL;
			int rc = sg_kubesign_bytes_field(f, "f", max, &out, &len);
			if (size <= max) {
				SG_CHECK_OK(rc);
				SG_CHECK(len == size && out && memcmp(out, data, size) == 0);
			} else {
				SG_CHECK_RC(rc, SG_EINVAL);
				SG_CHECK_MSG("larger than");
			}
			if ((rc == SG_OK) != (size <= max))
				fprintf(stderr, "  %zu bytes with max %zu: rc %d\n", size, max, rc);
			free(out);
			free(b64);
			json_decref(f);
		}
	}
}

static void t_base64_round_trip(void)
{
	/* Every byte value and every length mod 3, through both functions. */
	unsigned char data[259];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 + 3);
	for (size_t size = 1; size <= sizeof(data); size += (size < 8 ? 1 : 61)) {
		char *b64 = NULL;
		SG_CHECK_OK(sg_kubesign_base64((const char *)data, size, &b64));
		SG_CHECK(b64 && strlen(b64) == (size + 2) / 3 * 4);
		json_t *o = json_pack("{s:s}", "certificate", b64 ? b64 : "");
		char *out = NULL;
		size_t len = 0;
		SG_CHECK_OK(sg_kubesign_bytes_field(o, "certificate", sizeof(data), &out, &len));
		SG_CHECK(len == size && out && memcmp(out, data, size) == 0);
		SG_CHECK(out && out[len] == 0);
		free(out);
		free(b64);
		json_decref(o);
	}
	char *b64 = NULL;
	SG_CHECK_OK(sg_kubesign_base64("", 0, &b64));
	SG_CHECK(b64 && strcmp(b64, "") == 0);
	free(b64);
	SG_CHECK_OK(sg_kubesign_base64("hello", 5, &b64));
	SG_CHECK(b64 && strcmp(b64, "aGVsbG8=") == 0);
	free(b64);
}

/* ---- errors ---- */

static void t_permanent(void)
{
	/* The request's fault: a retry gives the same answer. */
	SG_CHECK(sg_kubesign_permanent(SG_EINVAL));
	SG_CHECK(sg_kubesign_permanent(SG_EAUTH));
	SG_CHECK(sg_kubesign_permanent(SG_EDENIED));
	SG_CHECK(sg_kubesign_permanent(SG_ELINT));
	/* Ours or the moment's: retried. */
	SG_CHECK(!sg_kubesign_permanent(SG_OK));
	SG_CHECK(!sg_kubesign_permanent(SG_ENOTFOUND));
	SG_CHECK(!sg_kubesign_permanent(SG_EBUSY));
	SG_CHECK(!sg_kubesign_permanent(SG_EHSM));
	SG_CHECK(!sg_kubesign_permanent(SG_EPROTO));
	SG_CHECK(!sg_kubesign_permanent(SG_ETIMEOUT));
	SG_CHECK(!sg_kubesign_permanent(SG_EINTERNAL));
	SG_CHECK(!sg_kubesign_permanent(-100));
}

static void t_ca_find(void)
{
	sg_kubesign_ca cas[] = {{.name = "default"}, {.name = "team-a"}, {.name = NULL}};
	SG_CHECK(sg_kubesign_ca_find(cas, 3, "default") == &cas[0]);
	SG_CHECK(sg_kubesign_ca_find(cas, 3, "team-a") == &cas[1]);
	SG_CHECK(sg_kubesign_ca_find(cas, 3, "team") == NULL);
	SG_CHECK(sg_kubesign_ca_find(cas, 3, "") == NULL);
	SG_CHECK(sg_kubesign_ca_find(cas, 3, NULL) == NULL);
	SG_CHECK(sg_kubesign_ca_find(cas, 1, "team-a") == NULL);
	SG_CHECK(sg_kubesign_ca_find(NULL, 0, "default") == NULL);
}

/* ---- sg_kubekeep: results signed, not yet written ---- */

static sg_kubesign_result result_of(const char *serial)
{
	sg_kubesign_result r = {.chain = strdup("chain"), .ca = strdup("ca"), .not_before = 1, .not_after = 2};
	snprintf(r.serial, sizeof(r.serial), "%s", serial);
	return r;
}

static bool kept_serial(sg_kubekeep *kp, const char *uid, int64_t gen, const char *serial)
{
	sg_kubesign_result r;
	bool found = sg_kubekeep_get(kp, uid, gen, &r);
	bool yes = found && strcmp(r.serial, serial) == 0 && strcmp(r.chain, "chain") == 0 && strcmp(r.ca, "ca") == 0;
	sg_kubesign_result_clear(&r);
	return yes;
}

static void t_kubekeep(void)
{
	sg_kubekeep *kp = NULL;
	SG_CHECK_OK(sg_kubekeep_new(&kp, 2));
	sg_kubesign_result a = result_of("aa"), b = result_of("bb"), c = result_of("cc");
	SG_CHECK_OK(sg_kubekeep_put(kp, "ns/a", "uid-a", 1, &a));
	SG_CHECK_OK(sg_kubekeep_put(kp, "ns/b", "uid-b", 1, &b));
	SG_CHECK(kept_serial(kp, "uid-a", 1, "aa") && kept_serial(kp, "uid-b", 1, "bb"));
	SG_CHECK(!kept_serial(kp, "uid-c", 1, "cc"));
	/* full: the oldest (a) goes */
	SG_CHECK_OK(sg_kubekeep_put(kp, "ns/c", "uid-c", 1, &c));
	sg_kubekeep_stats st;
	sg_kubekeep_stats_get(kp, &st);
	SG_CHECK(st.entries == 2 && st.evicted == 1 && st.kept == 3);
	SG_CHECK(!kept_serial(kp, "uid-a", 1, "aa") && kept_serial(kp, "uid-c", 1, "cc"));
	/* another generation of the same uid: dropped, not handed out */
	SG_CHECK(!kept_serial(kp, "uid-b", 2, "bb"));
	SG_CHECK(!kept_serial(kp, "uid-b", 1, "bb"));
	/* by key (a request gone), by uid (written), everything (a stop) */
	SG_CHECK_OK(sg_kubekeep_put(kp, "ns/b", "uid-b", 1, &b));
	sg_kubekeep_drop_key(kp, "ns/b");
	SG_CHECK(!kept_serial(kp, "uid-b", 1, "bb"));
	sg_kubekeep_drop(kp, "uid-c");
	sg_kubekeep_drop(kp, NULL);
	SG_CHECK(!kept_serial(kp, "uid-c", 1, "cc"));
	SG_CHECK_OK(sg_kubekeep_put(kp, "ns/a", "uid-a", 1, &a));
	sg_kubekeep_clear(kp);
	sg_kubekeep_stats_get(kp, &st);
	SG_CHECK(st.entries == 0);
	/* what cannot be a key */
	SG_CHECK_RC(sg_kubekeep_put(kp, "", "uid-a", 1, &a), SG_EINVAL);
	SG_CHECK_RC(sg_kubekeep_put(kp, "ns/a", NULL, 1, &a), SG_EINVAL);
	sg_kubesign_result_clear(&a);
	sg_kubesign_result_clear(&b);
	sg_kubesign_result_clear(&c);
	sg_kubekeep_free(kp);
	sg_kubekeep_free(NULL);
}

/* sg_signetissuer_duration: the request brought into [min, max]. */
static void t_issuer_duration(void)
{
	sg_signetissuer_spec s = {.default_duration = 7200, .min_duration = 3600, .max_duration = 86400};
	SG_CHECK(sg_signetissuer_duration(&s, 0) == 7200);
	SG_CHECK(sg_signetissuer_duration(&s, 7776000) == 86400);
	SG_CHECK(sg_signetissuer_duration(&s, 60) == 3600);
	SG_CHECK(sg_signetissuer_duration(&s, 5400) == 5400);
	s.max_duration = 0;
	SG_CHECK(sg_signetissuer_duration(&s, 7776000) == 7776000);
	char note[160];
	s.max_duration = 86400;
	sg_signetissuer_duration_note(&s, 7776000, 86400, note, sizeof(note));
	SG_CHECK(strcmp(note, " (2160h0m0s asked; the issuer's maxDuration is 24h0m0s)") == 0);
	sg_signetissuer_duration_note(&s, 60, 3600, note, sizeof(note));
	SG_CHECK(strcmp(note, " (1m0s asked; the issuer's minDuration is 1h0m0s)") == 0);
	sg_signetissuer_duration_note(&s, 0, 7200, note, sizeof(note));
	SG_CHECK(note[0] == 0);
	/* an unset defaultDuration fits the range; a given one outside it does not */
	json_t *o = json_pack("{s:{s:s}}", "spec", "maxDuration", "24h");
	SG_CHECK_OK(sg_signetissuer_spec_parse(o, &s));
	SG_CHECK(s.default_duration == 86400);
	json_decref(o);
	o = json_pack("{s:{s:s}}", "spec", "minDuration", "2400h");
	SG_CHECK_OK(sg_signetissuer_spec_parse(o, &s));
	SG_CHECK(s.default_duration == 2400 * 3600);
	json_decref(o);
	o = json_pack("{s:{s:s, s:s}}", "spec", "maxDuration", "24h", "defaultDuration", "48h");
	SG_CHECK_RC(sg_signetissuer_spec_parse(o, &s), SG_EINVAL);
	json_decref(o);
}

/* Issue 30, item 5: the duration a Kubernetes CSR asks for, in
 * cert-manager's precedence (pki.DurationFromCertificateSigningRequest):
 * the request-duration annotation whenever it is there, even beside
 * spec.expirationSeconds (before: the field won), and a bad or empty
 * annotation is the CSR's fault even then; the field alone; neither.
 * Here and not against the API server: the one the kube tests run (1.20)
 * drops spec.expirationSeconds, which arrived in 1.22. */
static void t_csr_duration(void)
{
	struct {
		const char *json;
		int rc;
		int64_t want;
	} cases[] = {
	    {"{\"metadata\": {\"annotations\": {\"" SG_KUBECSR_ANNOTATION_DURATION "\": \"3h\"}}, "
	     "\"spec\": {\"expirationSeconds\": 7200}}",
	     SG_OK, 3 * 3600},
	    {"{\"metadata\": {\"annotations\": {\"" SG_KUBECSR_ANNOTATION_DURATION "\": \"24h0m0s\"}}, \"spec\": {}}",
	     SG_OK, 24 * 3600},
	    {"{\"metadata\": {}, \"spec\": {\"expirationSeconds\": 86400}}", SG_OK, 86400},
	    {"{\"metadata\": {\"annotations\": {\"other\": \"1h\"}}, \"spec\": {\"expirationSeconds\": 600}}", SG_OK,
	     600},
	    {"{\"metadata\": {}, \"spec\": {}}", SG_OK, 0},
	    {"{\"metadata\": {}, \"spec\": {\"expirationSeconds\": 0}}", SG_OK, 0},
	    {"{}", SG_OK, 0},
	    {"{\"metadata\": {\"annotations\": {\"" SG_KUBECSR_ANNOTATION_DURATION "\": \"3 days\"}}, "
	     "\"spec\": {\"expirationSeconds\": 7200}}",
	     SG_EINVAL, 0},
	    {"{\"metadata\": {\"annotations\": {\"" SG_KUBECSR_ANNOTATION_DURATION "\": \"\"}}, "
	     "\"spec\": {\"expirationSeconds\": 7200}}",
	     SG_EINVAL, 0},
	    {"{\"metadata\": {\"annotations\": {\"" SG_KUBECSR_ANNOTATION_DURATION "\": 5}}}", SG_EINVAL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *csr = json_loads(cases[i].json, 0, NULL);
		SG_CHECK(csr != NULL);
		int64_t got = -1;
		int rc = sg_kubecsr_duration(csr, &got);
		if (rc != cases[i].rc || (rc == SG_OK && got != cases[i].want))
			fprintf(stderr, "case %zu: rc %d, %lld s\n", i, rc, (long long)got);
		SG_CHECK(rc == cases[i].rc);
		SG_CHECK(rc != SG_OK || got == cases[i].want);
		SG_CHECK(rc == SG_OK || strstr(sg_error_last()->msg, SG_KUBECSR_ANNOTATION_DURATION));
		json_decref(csr);
	}
}

SG_TEST_MAIN(SG_TEST(t_duration_go), SG_TEST(t_duration_go_edges), SG_TEST(t_duration_messages),
             SG_TEST(t_duration_length), SG_TEST(t_duration_format), SG_TEST(t_usages_defaults),
             SG_TEST(t_usages_names), SG_TEST(t_usages_refused), SG_TEST(t_usages_message_utf8), SG_TEST(t_bytes_field),
             SG_TEST(t_bytes_field_size), SG_TEST(t_base64_round_trip), SG_TEST(t_permanent), SG_TEST(t_ca_find),
             SG_TEST(t_kubekeep), SG_TEST(t_issuer_duration), SG_TEST(t_csr_duration))
