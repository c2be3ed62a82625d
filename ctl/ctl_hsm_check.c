/*
 * signetctl hsm-check: will signet work with this PKCS#11 module and token?
 *
 * The probing is sg_hsm_check's (hsm/, the only code that speaks PKCS#11);
 * this file is the command line around it and the two ways of printing what
 * it found: a report for a person (one section per step, one line per
 * finding, ok / warn / FAIL, then the signet.conf lines to use) and, with
 * --json, the same as one JSON object for scripts. The one thing it adds is
 * what hsm/ cannot do: verifying the test signatures with OpenSSL, through
 * the signer's adapter (sg_crypto), against the public key the token gave.
 *
 * Flags are the appliance settings (so --config signet.conf works and a
 * setting means what it means to signetd) plus --key-type, --sign-seconds
 * and --json. The PIN comes through sg_settings_pin, as everywhere: never
 * from argv, never printed.
 *
 * Exit status: 0 when signet will work (warnings allowed), 1 when not (or
 * the check itself could not run), 2 for a usage error.
 *
 * JSON: no JSON library reaches signetctl (jansson sits behind token/ and
 * ra/, neither of which exports a writer), and the report is flat, so it is
 * written here by hand with one escaping function. Strings from the token
 * (labels, descriptions) are the module's bytes: they are escaped per RFC
 * 8259 and invalid UTF-8 becomes U+FFFD, so the output always parses.
 */
#include "ctl.h"
#include "sg_appliance.h"
#include "sg_crypto.h"
#include "sg_daemon_settings.h"
#include "sg_der.h"
#include "sg_guard.h"
#include "sg_hsm.h"
#include "sg_key.h"
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_secret.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hc_args {
	sg_settings s;
	int key_type;
	char *sign_seconds;
	bool json;
} hc_args;

/* In sg_key_type's order: the parsed index is the key type. */
static const char *const key_types[] = {"ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096", NULL};

static const sg_opt hc_opts[] = {
	SG_SETTINGS_ROWS(hc_args, s, "warn"),
	SG_DAEMON_FOREIGN_ROWS
	{"key-type", SG_OPT_ENUM, offsetof(hc_args, key_type), "ecdsa-p256", 0, 0, key_types,
	 "key type of the temporary test key (with a PIN)", true},
	{"sign-seconds", SG_OPT_STRING, offsetof(hc_args, sign_seconds), "2", 0, 16, NULL,
	 "length of each timed signing round, 0.2 to 60 seconds", true},
	{"json", SG_OPT_BOOL, offsetof(hc_args, json), "false", 0, 0, NULL, "print the report as one JSON object",
	 true},
};
#define N_HC_OPTS (sizeof(hc_opts) / sizeof(hc_opts[0]))

static const char *const step_titles[SG_HSM_CHECK_STEP_COUNT] = {
	"module", "slots and tokens", "mechanisms", "login and key template", "session copy of the key",
	"concurrent signing",
};
static const char *const step_keys[SG_HSM_CHECK_STEP_COUNT] = {"module", "slots", "mechanisms",
								 "key",    "copy",  "signing"};
static const char *const level_names[] = {"ok", "warn", "FAIL"};
static const char *const copy_results[] = {"not tested", "supported", "not supported", "same handle", "error"};

/* --- signatures: what is signed, and the check of what came back ------- */

static const char check_message[] = "signet hsm-check test message";

typedef struct verifier {
	sg_crypto *crypto;
	sg_sigalg alg;
} verifier;

/* The digest (ECDSA) or DigestInfo (RSA) of check_message for type. */
static int sign_input(verifier *v, sg_key_type type, uint8_t *buf, size_t cap, size_t *len)
{
	v->alg = sg_sigalg_for_ca(type);
	sg_hash hash = sg_sigalg_hash(v->alg);
	size_t dlen = sg_hash_len(hash), plen = 0;
	const uint8_t *prefix = NULL;
	if (!sg_sigalg_is_ec(v->alg))
		sg_digestinfo_prefix(hash, &prefix, &plen);
	SG_ENSURE(plen + dlen <= cap, SG_EINTERNAL, "digest too long");
	if (plen)
		memcpy(buf, prefix, plen);
	SG_TRY(sg_crypto_digest(v->crypto, hash, check_message, sizeof(check_message) - 1, buf + plen));
	*len = plen + dlen;
	return SG_OK;
}

/* sg_hsm_check_verify_fn: verifies with OpenSSL, as a relying party would
 * (an ECDSA signature as the DER Ecdsa-Sig-Value a certificate carries). */
static int verify_sig(void *arg, const uint8_t *spki, size_t spki_len, const uint8_t *sig, size_t siglen)
{
	verifier *v = arg;
	sg_pubkey key;
	SG_TRY(sg_pubkey_parse(&key, spki, spki_len));
	uint8_t der[160];
	if (sg_sigalg_is_ec(v->alg)) {
		sg_der_writer w;
		sg_der_writer_init(&w, der, sizeof(der));
		SG_TRY(sg_ecdsa_raw_to_der(&w, sig, siglen));
		SG_TRY(sg_der_writer_status(&w));
		sig = der;
		siglen = w.len;
	}
	return sg_crypto_verify(v->crypto, &key, v->alg, (const uint8_t *)check_message, sizeof(check_message) - 1,
				sig, siglen);
}

/* --- settings lines ----------------------------------------------------- */

/* RFC 7512 §2.3: a label in a pkcs11: URI path, every byte but the
 * unreserved ones percent-encoded (labels have at most 32 bytes). */
static void uri_label(const char *label, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)label; *p && n + 4 <= cap; p++) {
		bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
			     *p == '-' || *p == '.' || *p == '_' || *p == '~';
		if (plain) {
			out[n++] = (char)*p;
		} else {
			out[n++] = '%';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 15];
		}
	}
	out[n] = '\0';
}

static const char *checked_label(const sg_hsm_check_report *r)
{
	return r->checked >= 0 ? r->slots[r->checked].label : NULL;
}

/* --- text --------------------------------------------------------------- */

static void print_text(const hc_args *a, const char *module, const sg_hsm_check_report *r)
{
	printf("signet hsm-check: %s\n", module);
	for (int s = 0; s < SG_HSM_CHECK_STEP_COUNT; s++) {
		printf("\n%d. %s\n", s + 1, step_titles[s]);
		bool any = false;
		for (size_t i = 0; i < r->nnotes; i++)
			if ((int)r->notes[i].step == s) {
				printf("  %-4s  %s\n", level_names[r->notes[i].level], r->notes[i].text);
				any = true;
			}
		if (!any)
			printf("  -     not checked\n");
	}
	if (r->notes_dropped)
		printf("\n(%zu more findings not shown)\n", r->notes_dropped);
	printf("\n7. summary\n  signet will work with this token: %s%s\n", r->works ? "yes" : "no",
	       r->works && !r->pin_given ? " (as far as can be told without a PIN)" : "");
	printf("  key types it can use:");
	int n = 0;
	for (int i = 0; i < SG_KEY_TYPE_COUNT; i++)
		if (r->key_types[i])
			printf(" %s", key_types[i]), n++;
	printf("%s\n", n ? "" : " none");
	if (!r->works)
		return;
	printf("  settings for signet.conf:\n    hsm-module = %s\n", module);
	if (a->s.hsm_init_reserved)
		printf("    hsm-init-reserved = %s\n", a->s.hsm_init_reserved);
	char enc[3 * 32 + 1];
	uri_label(checked_label(r) ? checked_label(r) : "", enc, sizeof(enc));
	printf("    hsm-token = pkcs11:token=%s\n", enc);
}

/* --- JSON --------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at p (RFC 3629), 0 if none. */
static size_t utf8_len(const unsigned char *p)
{
	unsigned c = p[0];
	size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
	if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4))
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if (n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))) /* overlong, surrogates */
		return 0;
	if (n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)))
		return 0;
	return n;
}

static void json_str(const char *s)
{
	if (!s) {
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t n = utf8_len(p);
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			printf("\\u%04x", *p);
		else if (n)
			fwrite(p, 1, n, stdout);
		else
			fputs("\\ufffd", stdout);
		p += n ? n : 1;
	}
	putchar('"');
}

static void json_key(const char *k, bool *first)
{
	printf("%s\"%s\":", *first ? "" : ",", k);
	*first = false;
}

static void json_kv_str(const char *k, const char *v, bool *first)
{
	json_key(k, first);
	json_str(v);
}

static void json_kv_bool(const char *k, bool v, bool *first)
{
	json_key(k, first);
	fputs(v ? "true" : "false", stdout);
}

static void json_kv_num(const char *k, double v, bool *first)
{
	json_key(k, first);
	printf(isfinite(v) ? "%.6g" : "null", v);
}

static void json_kv_int(const char *k, long long v, bool *first)
{
	json_key(k, first);
	printf("%lld", v);
}

static void json_mech(const char *name, const sg_hsm_check_mech *m, bool *first)
{
	json_key(name, first);
	bool f = true;
	putchar('{');
	json_kv_bool("present", m->present, &f);
	json_kv_int("min_bits", (long long)m->min_bits, &f);
	json_kv_int("max_bits", (long long)m->max_bits, &f);
	json_kv_bool("sign", m->sign, &f);
	json_kv_bool("generate_key_pair", m->generate_key_pair, &f);
	json_kv_bool("hw", m->hw, &f);
	putchar('}');
}

static void json_slot(const sg_hsm_check_slot *s)
{
	bool f = true;
	putchar('{');
	json_kv_int("id", (long long)s->id, &f);
	json_kv_str("description", s->description, &f);
	json_kv_bool("token_present", s->token_present, &f);
	if (s->token_present) {
		json_kv_str("label", s->label, &f);
		json_kv_str("manufacturer", s->manufacturer, &f);
		json_kv_str("model", s->model, &f);
		json_kv_str("serial", s->serial, &f);
		json_kv_bool("initialized", s->initialized, &f);
		json_kv_bool("login_required", s->login_required, &f);
		json_kv_bool("user_pin_initialized", s->user_pin_initialized, &f);
		json_kv_bool("user_pin_locked", s->user_pin_locked, &f);
		json_kv_bool("rng", s->rng, &f);
		json_kv_bool("write_protected", s->write_protected, &f);
		json_kv_int("max_sessions", (long long)s->max_sessions, &f);
	}
	json_kv_bool("selected", s->selected, &f);
	putchar('}');
}

static void json_round(const char *k, unsigned threads, double rate, uint64_t n, double p50, double p99, bool *first)
{
	json_key(k, first);
	bool f = true;
	putchar('{');
	json_kv_int("threads", (long long)threads, &f);
	json_kv_int("signatures", (long long)n, &f);
	json_kv_num("per_second", rate, &f);
	json_kv_num("p50_us", p50, &f);
	json_kv_num("p99_us", p99, &f);
	putchar('}');
}

static void print_json(const hc_args *a, const char *module, const sg_hsm_check_report *r)
{
	char ver[32];
	bool f = true, g;
	putchar('{');
	json_key("module", &f);
	g = true;
	putchar('{');
	json_kv_str("path", module, &g);
	json_kv_bool("loaded", r->loaded, &g);
	json_kv_bool("initialized", r->initialized, &g);
	json_kv_bool("needs_init_reserved", r->needs_init_reserved, &g);
	snprintf(ver, sizeof(ver), "%u.%u", r->cryptoki_major, r->cryptoki_minor);
	json_kv_str("cryptoki_version", ver, &g);
	json_kv_str("manufacturer", r->manufacturer, &g);
	json_kv_str("library", r->library, &g);
	snprintf(ver, sizeof(ver), "%u.%u", r->library_major, r->library_minor);
	json_kv_str("library_version", ver, &g);
	putchar('}');

	json_key("slots", &f);
	putchar('[');
	for (size_t i = 0; i < r->nslots; i++) {
		if (i)
			putchar(',');
		json_slot(&r->slots[i]);
	}
	putchar(']');
	json_kv_int("slots_total", (long long)r->nslots_total, &f);
	json_kv_int("tokens_selected", (long long)r->nselected, &f);
	json_kv_str("token", checked_label(r), &f);

	json_key("mechanisms", &f);
	g = true;
	putchar('{');
	json_kv_int("count", (long long)r->nmechanisms, &g);
	json_mech("CKM_EC_KEY_PAIR_GEN", &r->ec_gen, &g);
	json_mech("CKM_ECDSA", &r->ecdsa, &g);
	json_mech("CKM_RSA_PKCS_KEY_PAIR_GEN", &r->rsa_gen, &g);
	json_mech("CKM_RSA_PKCS", &r->rsa_pkcs, &g);
	putchar('}');
	json_key("key_types", &f);
	putchar('[');
	for (int i = 0, n = 0; i < SG_KEY_TYPE_COUNT; i++)
		if (r->key_types[i]) {
			printf("%s\"%s\"", n++ ? "," : "", key_types[i]);
		}
	putchar(']');

	json_kv_bool("pin_given", r->pin_given, &f);
	json_kv_bool("logged_in", r->logged_in, &f);
	json_key("key_template", &f);
	g = true;
	putchar('{');
	json_kv_str("key_type", key_types[a->key_type], &g);
	json_kv_bool("generated", r->key_generated, &g);
	json_kv_bool("existing", r->key_existing, &g);
	if (r->key_generated || r->key_existing) {
		json_kv_bool("fallback", r->key_fallback, &g);
		json_kv_bool("sensitive", r->key.sensitive, &g);
		json_kv_bool("extractable", r->key.extractable, &g);
		json_kv_bool("sign", r->key.sign, &g);
		static const char *const uses[] = {"decrypt", "unwrap", "derive", "sign-recover"};
		json_key("other_uses", &g);
		putchar('[');
		for (unsigned i = 0, n = 0; i < 4; i++)
			if (r->key.other_uses & (1u << i))
				printf("%s\"%s\"", n++ ? "," : "", uses[i]);
		putchar(']');
	}
	putchar('}');

	json_key("copy", &f);
	g = true;
	putchar('{');
	json_kv_bool("tested", r->copy != 0, &g);
	json_kv_bool("supported", r->copy == 1, &g);
	json_kv_str("result", copy_results[r->copy >= 0 && r->copy <= 4 ? r->copy : 0], &g);
	json_kv_str("rv", r->copy ? r->copy_rv : NULL, &g);
	putchar('}');

	json_key("concurrency", &f);
	g = true;
	putchar('{');
	json_kv_int("sessions", (long long)r->sessions, &g);
	json_kv_bool("works", r->concurrency_ok, &g);
	json_kv_int("verified", (long long)r->verified, &g);
	json_kv_int("failed", (long long)r->failed, &g);
	json_round("single", 1, r->rate_single, r->signatures_single, r->p50_us_single, r->p99_us_single, &g);
	json_round("multi", r->sessions, r->rate_multi, r->signatures_multi, r->p50_us_multi, r->p99_us_multi, &g);
	putchar('}');

	json_kv_bool("works", r->works, &f);
	json_key("settings", &f);
	g = true;
	putchar('{');
	if (r->works) {
		char enc[3 * 32 + 1], uri[sizeof(enc) + 16];
		uri_label(checked_label(r) ? checked_label(r) : "", enc, sizeof(enc));
		snprintf(uri, sizeof(uri), "pkcs11:token=%s", enc);
		json_kv_str("hsm-module", module, &g);
		if (a->s.hsm_init_reserved)
			json_kv_str("hsm-init-reserved", a->s.hsm_init_reserved, &g);
		json_kv_str("hsm-token", uri, &g);
	}
	putchar('}');

	json_key("notes", &f);
	putchar('[');
	for (size_t i = 0; i < r->nnotes; i++) {
		g = true;
		printf("%s{", i ? "," : "");
		json_kv_str("step", step_keys[r->notes[i].step], &g);
		json_kv_str("level", r->notes[i].level == SG_HSM_CHECK_FAIL ? "fail" : level_names[r->notes[i].level],
			    &g);
		json_kv_str("text", r->notes[i].text, &g);
		putchar('}');
	}
	putchar(']');
	json_kv_int("notes_dropped", (long long)r->notes_dropped, &f);
	puts("}");
}

/* --- the command -------------------------------------------------------- */

static void usage(void)
{
	printf("usage: signetctl hsm-check --hsm-module PATH [--hsm-token URI] [--pin-file F | --pin-env NAME]\n"
	       "                          [--hsm-init-reserved STR] [--hsm-key URI] [--key-type T] [--sign-seconds S]\n"
	       "                          [--json]\n\n"
	       "Tells whether signet will work with a PKCS#11 module and token, step by step:\n"
	       "the module (C_GetInfo, C_Initialize), its slots and tokens, the mechanisms of\n"
	       "the token --hsm-token selects, and with a PIN: login, a temporary key pair made\n"
	       "with signet's key template as session objects (nothing is left in the token),\n"
	       "C_CopyObject, and signing from several sessions at once, verified, with rates.\n"
	       "With --hsm-key (or --config of a CA's signet.conf) the existing key is used\n"
	       "instead of a temporary one: its attributes are shown and the signing rounds\n"
	       "use it (the raw C_Sign rate of the key signetd signs with); it is left as it\n"
	       "was. Ends with the signet.conf lines to use. Exit status: 0 signet will work\n"
	       "(warnings allowed), 1 it will not, 2 usage error.\n\n");
	sg_opt_usage(hc_opts, N_HC_OPTS, stdout);
}

/* --sign-seconds: a decimal number of seconds, 0.2 to 60. */
static int parse_seconds(const char *s, unsigned *ms)
{
	char *end = NULL;
	double v = strtod(s, &end);
	SG_ENSURE(end != s && *end == '\0' && isfinite(v) && v >= 0.2 && v <= 60, SG_EINVAL,
		  "--sign-seconds: \"%s\" is not a number of seconds from 0.2 to 60", s);
	*ms = (unsigned)(v * 1000 + 0.5);
	return SG_OK;
}

/* Returns the exit status (the error detail printed for 1 and 2). */
static int run(hc_args *a, unsigned ms)
{
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	int rc = SG_OK;
	if (a->s.pin_credential || (a->s.pin_file && *a->s.pin_file) || (a->s.pin_env && *a->s.pin_env))
		rc = sg_settings_pin(&a->s, &pin);
	verifier v = {0};
	if (rc == SG_OK)
		rc = sg_crypto_new(&v.crypto);
	uint8_t input[128];
	size_t input_len = 0;
	if (rc == SG_OK)
		rc = sign_input(&v, (sg_key_type)a->key_type, input, sizeof(input), &input_len);
	sg_hsm_check_report *r SG_AUTOFREE = calloc(1, sizeof(*r)); /* ~30 KB: not for the stack */
	if (rc == SG_OK && !r)
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc < 0) {
		sg_crypto_free(v.crypto);
		fprintf(stderr, "signetctl hsm-check: %s\n", sg_error_last()->msg);
		return 1;
	}
	sg_hsm_check_options o = {
		.module_path = a->s.hsm_module,
		.init_reserved = a->s.hsm_init_reserved,
		.softhsm_conf = a->s.softhsm2_conf,
		.token_uri = a->s.hsm_token,
		.pin = pin,
		.key_uri = a->s.hsm_key,
		.key_type = (sg_key_type)a->key_type,
		.sign_input = input,
		.sign_input_len = input_len,
		.sign_ms = ms,
		.verify = verify_sig,
		.verify_arg = &v,
	};
	rc = sg_hsm_check(&o, r);
	sg_crypto_free(v.crypto);
	if (rc < 0) {
		/* Refused before anything was touched: a bad token URI is a
		 * usage error. */
		fprintf(stderr, "signetctl hsm-check: %s\n", sg_error_last()->msg);
		return rc == SG_EINVAL ? 2 : 1;
	}
	const char *module = a->s.hsm_module ? a->s.hsm_module : SIGNET_SOFTHSM_MODULE;
	if (a->json)
		print_json(a, module, r);
	else
		print_text(a, module, r);
	fflush(stdout);
	if (r->works)
		return 0;
	fprintf(stderr, "signetctl hsm-check: signet will not work with this module/token (see the FAIL lines)\n");
	return 1;
}

int ctl_hsm_check(int argc, char **argv)
{
	hc_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(hc_opts, N_HC_OPTS, &a, argc, argv, &res);
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(hc_opts, N_HC_OPTS, &a);
		return 0;
	}
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	unsigned ms = 0;
	if (rc == SG_OK)
		rc = parse_seconds(a.sign_seconds, &ms);
	if (rc == SG_OK)
		rc = sg_settings_check(&a.s);
	if (rc < 0) {
		fprintf(stderr, "signetctl hsm-check: %s\n", sg_error_last()->msg);
		sg_opt_free(hc_opts, N_HC_OPTS, &a);
		return 2;
	}
	sg_settings_apply_log(&a.s);
	int status = run(&a, ms);
	sg_opt_free(hc_opts, N_HC_OPTS, &a);
	return status;
}
