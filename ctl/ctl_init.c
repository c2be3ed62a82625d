/*
 * signetctl init: a new CA in a new folder. The command line only: the
 * flags below map one to one onto sg_init_options, and init/sg_init.c does
 * the work (and states the rules: a non-empty folder refused, the SO PIN
 * outside it, what a failure leaves behind), so that signetd's embedded
 * default (--init-dir) makes exactly the CA this command makes.
 *
 * Exit status: 2 for a usage error (a flag, or options sg_init_check_options
 * refuses, before anything is touched), 1 for a failure of init itself.
 * Rerun on the folder of an init that was killed, it starts over or
 * finishes (sg_init_ca), and says which on stdout.
 */
#include "ctl.h"
#include "sg_guard.h"
#include "sg_init.h"
#include "sg_log.h"
#include "sg_opt.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct init_args {
	char *dir;
	int key_type;
	char *trust_domain;
	char *hsm_module;
	char *hsm_init_reserved;
	char *token_label;
	char *key_label;
	char *pin_file;
	char *so_pin_file;
	char *ca_name;
	int64_t ca_ttl;
	int log_level;
} init_args;

/* In sg_key_type's order: the parsed index is the key type. */
static const char *const key_types[] = {"ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096", NULL};

static const sg_opt init_opts[] = {
	{"dir", SG_OPT_PATH, offsetof(init_args, dir), NULL, 0, 0, NULL, "folder for the new CA (must not exist or be empty)", true},
	{"key-type", SG_OPT_ENUM, offsetof(init_args, key_type), SG_INIT_DEFAULT_KEY_TYPE, 0, 0, key_types, "CA key type",
	 true},
	{"trust-domain", SG_OPT_STRING, offsetof(init_args, trust_domain), SG_INIT_DEFAULT_TRUST_DOMAIN, 0,
	 SG_INIT_TRUST_DOMAIN_MAX, NULL, "SPIFFE trust domain (also the root's O=)", true},
	{"hsm-module", SG_OPT_PATH, offsetof(init_args, hsm_module), NULL, 0, 0, NULL,
	 "PKCS#11 module of an existing token, recorded as given (default: a new SoftHSM2 token inside --dir)",
	 true},
	{"hsm-init-reserved", SG_OPT_STRING, offsetof(init_args, hsm_init_reserved), NULL, 0, SG_INIT_INIT_RESERVED_MAX,
	 NULL, "C_Initialize pReserved string the module needs (NSS softoken: configdir='sql:DB' ...), recorded too",
	 true},
	{"token-label", SG_OPT_STRING, offsetof(init_args, token_label), SG_INIT_DEFAULT_TOKEN_LABEL, 0,
	 SG_INIT_LABEL_MAX, NULL, "token label", true},
	{"key-label", SG_OPT_STRING, offsetof(init_args, key_label), NULL, 0, SG_INIT_LABEL_MAX, NULL,
	 "label of the new key (default: " SG_INIT_DEFAULT_KEY_LABEL "-<8 hex digits of its random CKA_ID>, unique "
	 "per CA in a token)",
	 true},
	{"pin-file", SG_OPT_PATH, offsetof(init_args, pin_file), NULL, 0, 0, NULL,
	 "user PIN file of the existing token (with --hsm-module)", true},
	{"so-pin-file", SG_OPT_PATH, offsetof(init_args, so_pin_file), NULL, 0, 0, NULL,
	 "where the new SoftHSM2 token's SO PIN is written, mode 0400; must not exist and must be outside --dir "
	 "(default: DIR.so-pin, beside DIR; signetd never needs it: keep it offline)",
	 true},
	{"ca-name", SG_OPT_STRING, offsetof(init_args, ca_name), SG_INIT_DEFAULT_CA_NAME, 0, SG_INIT_CA_NAME_MAX, NULL,
	 "root CN", true},
	{"ca-ttl", SG_OPT_DURATION, offsetof(init_args, ca_ttl), SG_INIT_DEFAULT_CA_TTL, SG_INIT_CA_TTL_MIN_S,
	 SG_INIT_CA_TTL_MAX_S, NULL, "root validity", true},
	{"log-level", SG_OPT_LOG_LEVEL, offsetof(init_args, log_level), "info", 0, 0, NULL,
	 "log level (or a verbosity: 0-1 info, 2-10 debug)", true},
};
#define N_INIT_OPTS (sizeof(init_opts) / sizeof(init_opts[0]))

static void usage(void)
{
	printf("usage: signetctl init --dir DIR [options]\n\n"
	       "Creates a CA: a key generated inside a PKCS#11 token and a self-signed root.\n\n"
	       "Without --hsm-module, DIR gets its own SoftHSM2 token. DIR is what signetd\n"
	       "reads: signet.conf, the token, and the user PIN in DIR/pin (mode 0600).\n"
	       "The token's SO PIN, which can re-initialise the token (destroying the CA\n"
	       "key) or reset the user PIN, is written outside DIR: to --so-pin-file,\n"
	       "by default DIR.so-pin beside DIR, with mode 0400. signet.conf does not\n"
	       "name it and signetd never needs it; move it offline. init refuses a\n"
	       "non-empty DIR and an SO PIN file that already exists, and a failed init\n"
	       "leaves neither behind. If init is killed, run it again with the same\n"
	       "arguments: it removes what the killed run made and starts over.\n\n");
	sg_opt_usage(init_opts, N_INIT_OPTS, stdout);
}

int ctl_init(int argc, char **argv)
{
	init_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(init_opts, N_INIT_OPTS, &a, argc, argv, &res);
	if (rc == SG_OK && res.help) {
		usage();
		sg_opt_free(init_opts, N_INIT_OPTS, &a);
		return 0;
	}
	sg_init_options o = {
		.dir = a.dir,
		.key_type = (sg_key_type)a.key_type,
		.trust_domain = a.trust_domain,
		.hsm_module = a.hsm_module,
		.hsm_init_reserved = a.hsm_init_reserved,
		.token_label = a.token_label,
		.key_label = a.key_label,
		.pin_file = a.pin_file,
		.so_pin_file = a.so_pin_file,
		.ca_name = a.ca_name,
		.ca_ttl = a.ca_ttl,
	};
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc == SG_OK)
		rc = sg_init_check_options(&o);
	if (rc < 0) {
		fprintf(stderr, "signetctl init: %s\n", sg_error_last()->msg);
		sg_opt_free(init_opts, N_INIT_OPTS, &a);
		return 2;
	}
	sg_log_configure((sg_log_level)a.log_level, SG_LOG_TEXT);

	sg_init_result *r SG_AUTOFREE = malloc(sizeof(*r)); /* 3 * PATH_MAX: not for the stack */
	rc = r ? sg_init_ca(&o, r) : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK && r->resumed == 2) {
		/* The CA is the earlier run's: its options, not necessarily these. */
		printf("finished %s: an interrupted init had already made this CA (see the file for what it is)\n",
		       r->config);
		if (*r->so_pin_file)
			printf("the token's SO PIN is in %s (mode 0400); signetd never needs it: keep it offline\n",
			       r->so_pin_file);
	} else if (rc == SG_OK) {
		printf("%s %s (CA key %s in token \"%s\", root %s/root-cert.pem)\n",
		       r->resumed ? "removed what an interrupted init had left, and created" : "created", r->config,
		       sg_key_type_name(o.key_type), a.token_label, r->dir);
		if (*r->so_pin_file)
			printf("the token's SO PIN is in %s (mode 0400); signetd never needs it: keep it offline\n",
			       r->so_pin_file);
	} else {
		fprintf(stderr, "signetctl init: %s\n", sg_error_last()->msg);
	}
	sg_opt_free(init_opts, N_INIT_OPTS, &a);
	return rc < 0 ? 1 : 0;
}
