/*
 * signetctl: the admin tool of the signet appliance.
 *
 *   init     create a CA: key in a PKCS#11 token, self-signed root, config
 *   issue    issue a certificate for a CSR through the signer pool
 *   csr      make a CSR for the HSM key (to have it signed by an offline root)
 *   import   install a CA certificate and chain for the HSM key
 *   status   show the CA and the HSM's health
 *   rotate   rotate the CA: begin, activate, finish, status (ctl_rotate.c)
 *   token    mint a service-account token from the development issuer
 *   request  call signetd's CreateCertificate and print the chain
 *   hsm-check  tell whether signet will work with a PKCS#11 module and token
 *   cel      evaluate a CEL expression as a policy's validations rule
 *   policy check  a CertificateRequestPolicy's verdict on a CertificateRequest, offline
 *
 * Subcommands are rows of a table; each parses its own flags with sg_opt and
 * shares the appliance settings (SG_SETTINGS_ROWS) with signetd, so a flag
 * and a config line with the same name mean the same thing. Every failure is
 * one line on stderr and a non-zero exit: 2 for usage, 1 for everything else.
 *
 * signetctl holds PINs (init makes them; the others log in to the HSM), so
 * the first thing main does is make the process non-dumpable: no core file,
 * and no debugger or /proc/PID/mem reader of the same user. The PINs
 * themselves live in sg_secret pages, which core dumps leave out anyway.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "ctl.h"
#include "sg_appliance.h"
#include "sg_cert.h"
#include "sg_clock.h"
#include "sg_daemon_settings.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_init.h"
#include "sg_issuer.h"
#include "sg_istio.h"
#include "sg_jwt.h"
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_secret.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ctl_args {
	sg_settings s;
	char *csr;
	int profile;
	char *identity;
	int64_t ttl;
	int64_t path_len;
	int64_t count;
	char *out;
	char *subject;
	char *cert;
	char *chain;
	char *root;
	char *ns;
	char *service_account;
	char *audience;
	char *pod_name;
	char *addr;
	char *token_file;
	char *ca_file;
	char *server_name;
	char *impersonate;
	char *cluster_id;
	int64_t timeout;
} ctl_args;

static const char *const profiles[] = {"istio", "generic", "intermediate", NULL};

#define ROW(name, type, field, def, min, max, choices, help) \
	{name, type, offsetof(ctl_args, field), def, min, max, choices, help, true}

/* Every table: the appliance settings, and signetd's as foreign rows so that
 * one config file can serve both programs. */
#define SETTINGS SG_SETTINGS_ROWS(ctl_args, s, "warn"), SG_DAEMON_FOREIGN_ROWS

static const sg_opt issue_opts[] = {
	SETTINGS
	ROW("csr", SG_OPT_PATH, csr, NULL, 0, 0, NULL, "PKCS#10 request, PEM or DER (- for stdin)"),
	ROW("profile", SG_OPT_ENUM, profile, "istio", 0, 0, profiles, "certificate profile"),
	ROW("identity", SG_OPT_STRING, identity, NULL, 0, SG_IDENTITY_MAX, NULL,
	    "istio profile: SPIFFE ID to stamp (default: the CSR's URI SAN)"),
	ROW("ttl", SG_OPT_DURATION, ttl, "0s", 0, 100LL * 365 * 86400, NULL,
	    "validity (0s: the profile's default: istio 24h, generic 2160h, intermediate 8760h)"),
	ROW("path-len", SG_OPT_INT, path_len, "0", -1, 16, NULL, "intermediate profile: pathLenConstraint (-1: none)"),
	ROW("out", SG_OPT_PATH, out, NULL, 0, 0, NULL, "write the chain here instead of stdout"),
};

static const sg_opt csr_opts[] = {
	SETTINGS
	ROW("subject", SG_OPT_STRING, subject, NULL, 0, 1024, NULL, "subject, e.g. \"O=example,CN=signet issuing CA\""),
	ROW("out", SG_OPT_PATH, out, NULL, 0, 0, NULL, "write the CSR here instead of stdout"),
};

static const sg_opt import_opts[] = {
	SETTINGS
	ROW("cert", SG_OPT_PATH, cert, NULL, 0, 0, NULL, "the signed CA certificate for the HSM key (PEM)"),
	ROW("chain", SG_OPT_PATH, chain, NULL, 0, 0, NULL, "certificates between it and the root (PEM; optional)"),
	ROW("root", SG_OPT_PATH, root, NULL, 0, 0, NULL, "the root bundle (PEM)"),
};

static const sg_opt status_opts[] = {
	SETTINGS
};

static const sg_opt token_opts[] = {
	SETTINGS
	ROW("namespace", SG_OPT_STRING, ns, NULL, 0, 63, NULL, "namespace of the service account"),
	ROW("service-account", SG_OPT_STRING, service_account, NULL, 0, 253, NULL, "service account name"),
	ROW("audience", SG_OPT_STRING, audience, "istio-ca", 0, 256, NULL, "token audience"),
	ROW("pod-name", SG_OPT_STRING, pod_name, NULL, 0, 253, NULL, "pod the token is bound to (optional)"),
	ROW("ttl", SG_OPT_DURATION, ttl, "1h", 60, 48 * 3600, NULL, "token lifetime"),
	ROW("count", SG_OPT_INT, count, "1", 1, 100000, NULL,
	    "tokens to mint, one per line, token i living ttl plus i seconds (distinct, as a load test's pods)"),
};

static const sg_opt request_opts[] = {
	SETTINGS
	ROW("addr", SG_OPT_STRING, addr, "127.0.0.1:6443", 0, 256, NULL, "signetd's gRPC address host:port"),
	ROW("token-file", SG_OPT_PATH, token_file, NULL, 0, 0, NULL,
	    "file holding the bearer token (- for stdin; never pass a token in argv)"),
	ROW("csr", SG_OPT_PATH, csr, NULL, 0, 0, NULL, "PEM CSR to send"),
	ROW("ca-file", SG_OPT_PATH, ca_file, NULL, 0, 0, NULL, "roots to verify signetd with (default: root-cert)"),
	ROW("server-name", SG_OPT_STRING, server_name, "localhost", 0, 253, NULL, "TLS server name to verify"),
	ROW("ttl", SG_OPT_DURATION, ttl, "0s", 0, 100LL * 365 * 86400, NULL, "validity_duration to ask for (0s: none)"),
	ROW("impersonate", SG_OPT_STRING, impersonate, NULL, 0, 1024, NULL, "metadata ImpersonatedIdentity"),
	ROW("cluster-id", SG_OPT_STRING, cluster_id, NULL, 0, 253, NULL, "clusterid header"),
	ROW("timeout", SG_OPT_DURATION, timeout, "10s", 1, 600, NULL, "call deadline"),
	ROW("out", SG_OPT_PATH, out, NULL, 0, 0, NULL, "write the chain here instead of stdout"),
};

#define N(t) (sizeof(t) / sizeof(t[0]))

static int write_out(const char *path, const char *text, size_t len)
{
	if (!path) {
		SG_ENSURE(fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0, SG_EINVAL,
			  "cannot write to standard output");
		return SG_OK;
	}
	return ctl_write_file(path, text, len, 0644, 0);
}

static int do_issue(ctl_args *a)
{
	SG_ENSURE(a->csr, SG_EINVAL, "--csr is required");
	uint8_t *csr SG_AUTOFREE = NULL;
	size_t csr_len;
	SG_TRY(ctl_read_file(a->csr, SG_CSR_MAX_DER * 2, &csr, &csr_len));
	/* One request: one signer thread is plenty unless asked otherwise. */
	if (!a->s.signer_threads)
		a->s.signer_threads = 1;
	sg_appliance *app = NULL;
	SG_TRY(sg_init_softhsm_repair(a->s.softhsm2_conf)); /* see sg_init.h */
	SG_TRY(sg_appliance_open(&app, &a->s));
	sg_issue_request req = {
		.csr = csr,
		.csr_len = csr_len,
		.profile = (sg_profile)a->profile,
		.identity = a->identity,
		.ttl = a->ttl,
		.path_len = (int)a->path_len,
		.deadline_ns = sg_now_ns() + 30ull * 1000000000u,
	};
	sg_issue_result res;
	char *chain = NULL;
	int rc = sg_pool_issue(sg_appliance_pool(app), &req, &res);
	if (rc == SG_OK) {
		sg_log(SG_LOG_INFO, "certificate issued", SG_F_STR("serial", res.serial_hex),
		       SG_F_STR("profile", sg_profile_name(req.profile)), SG_F_STR("identity", res.identity),
		       SG_F_INT("not_after", res.not_after), SG_F_INT("latency_us", res.latency_ns / 1000), SG_F_END);
		rc = sg_issue_result_join(&res, &chain);
		if (rc == SG_OK)
			rc = write_out(a->out, chain, strlen(chain));
	}
	free(chain);
	sg_issue_result_clear(&res);
	sg_error e;
	sg_error_save(&e);
	sg_appliance_free(app);
	sg_error_restore(&e);
	return rc;
}

/* Opens only the HSM (no CA needed: csr runs before a CA certificate
 * exists for an intermediate). */
static int open_hsm(const sg_settings *s, sg_hsm **hsm)
{
	SG_ENSURE(s->hsm_token && s->hsm_key, SG_EINVAL, "hsm-token and hsm-key are required (use --config)");
	sg_settings_apply_log(s);
	sg_secret *pin SG_CLEANUP(sg_secret_freep) = NULL;
	SG_TRY(sg_settings_pin(s, &pin));
	sg_hsm_options ho;
	sg_settings_hsm_options(s, pin, &ho);
	return sg_hsm_open(hsm, &ho);
}

static int make_csr(ctl_args *a, sg_hsm *hsm)
{
	char *pem SG_AUTOFREE = NULL;
	size_t pem_len;
	SG_TRY(ctl_ca_csr(hsm, a->subject, &pem, &pem_len));
	return write_out(a->out, pem, pem_len);
}

static int do_csr(ctl_args *a)
{
	SG_ENSURE(a->subject, SG_EINVAL, "--subject is required");
	sg_hsm *hsm = NULL;
	SG_TRY(open_hsm(&a->s, &hsm));
	int rc = make_csr(a, hsm);
	sg_error e;
	sg_error_save(&e);
	sg_hsm_free(hsm);
	sg_error_restore(&e);
	return rc;
}

/* Replaces (or appends) "name = value" lines of the config file. */
static int do_import(ctl_args *a)
{
	SG_ENSURE(a->s.config, SG_EINVAL, "--config is required");
	SG_ENSURE(a->cert && a->root, SG_EINVAL, "--cert and --root are required");
	sg_hsm *hsm = NULL;
	SG_TRY(open_hsm(&a->s, &hsm));
	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	int rc = sg_hsm_public_key(hsm, &spki, &spki_len);
	sg_hsm_free(hsm);
	SG_TRY(rc);
	/* Everything is checked before anything is written. */
	sg_ca_files files = {a->cert, a->chain, a->root};
	sg_ca *ca = NULL;
	SG_TRY(sg_ca_load(&ca, &files, spki, spki_len, sg_wall_seconds()));
	sg_ca_free(ca);

	char dir[PATH_MAX];
	SG_ENSURE(realpath(a->s.config, dir), SG_EINVAL, "cannot resolve %s", a->s.config);
	*strrchr(dir, '/') = 0;
	const char *src[3] = {a->cert, a->chain, a->root};
	const char *dst[3] = {"ca-cert.pem", "cert-chain.pem", "root-cert.pem"};
	for (int i = 0; i < 3; i++) {
		if (!src[i])
			continue;
		uint8_t *data SG_AUTOFREE = NULL;
		size_t len;
		SG_TRY(ctl_read_file(src[i], 1 << 20, &data, &len));
		char *path SG_AUTOFREE = ctl_join(dir, dst[i]);
		SG_ENSURE(path, SG_EINTERNAL, "out of memory");
		SG_TRY(ctl_write_file(path, data, len, 0644, 0));
	}
	const char *names[] = {"ca-cert", "ca-chain", "root-cert"};
	const char *values[] = {dst[0], a->chain ? dst[1] : NULL, dst[2]};
	SG_TRY(ctl_update_config(a->s.config, names, values, 3));
	printf("imported CA certificate into %s\n", a->s.config);
	return SG_OK;
}

static void print_time(const char *label, int64_t t)
{
	char buf[32];
	(void)sg_clock_rfc3339(buf, sizeof(buf), t);
	printf("%-14s %s\n", label, buf);
}

/* The bundle's roots besides the CA's own (a rotation's overlap): handed
 * out with it, but their expiry does not end the CA (sg_ca.h). */
static void print_other_roots(const sg_ca *ca)
{
	const char *pem = sg_ca_root_pem(ca);
	sg_ca_root_info roots[SG_CA_BUNDLE_MAX];
	size_t n = 0;
	if (sg_ca_bundle_roots(ca, pem, strlen(pem), roots, SG_CA_BUNDLE_MAX, &n) < 0)
		return; /* sg_ca_load parsed this very bundle */
	int64_t now = sg_wall_seconds();
	for (size_t i = 0; i < n; i++) {
		if (roots[i].is_ca_root)
			continue;
		char t[SG_CLOCK_RFC3339_LEN];
		(void)sg_clock_rfc3339(t, sizeof(t), roots[i].not_after);
		printf("%-14s %s not-after %s%s\n", "other-root", roots[i].subject, t,
		       roots[i].not_after <= now ? " (expired)" : "");
	}
}

static int do_status(ctl_args *a)
{
	a->s.signer_threads = 1;
	sg_appliance *app = NULL;
	SG_TRY(sg_init_softhsm_repair(a->s.softhsm2_conf)); /* see sg_init.h */
	SG_TRY(sg_appliance_open(&app, &a->s));
	const sg_ca *ca = sg_appliance_ca(app);
	sg_hsm_stats st;
	sg_hsm_stats_get(sg_appliance_hsm(app), &st);
	static const char *const states[] = {"ok", "degraded", "down"};
	printf("%-14s %s\n", "ca", sg_ca_subject(ca));
	printf("%-14s %s\n", "key", sg_key_type_name(sg_ca_key_type(ca)));
	print_time("ca-not-after", sg_ca_issuer(ca)->not_after);
	printf("%-14s %s\n", "root", sg_ca_root_subject(ca));
	print_time("root-not-after", sg_ca_root_not_after(ca));
	print_other_roots(ca);
	printf("%-14s %zu\n", "tokens", sg_hsm_token_count(sg_appliance_hsm(app)));
	printf("%-14s %s\n", "hsm", states[st.state]);
	sg_appliance_free(app);
	return SG_OK;
}

static int do_token(ctl_args *a)
{
	SG_ENSURE(a->ns && a->service_account, SG_EINVAL, "--namespace and --service-account are required");
	SG_ENSURE(a->s.jwt_signing_key && a->s.jwt_issuer, SG_EINVAL,
		  "jwt-signing-key and jwt-issuer are not set (a CA made by signetctl init has them)");
	SG_ENSURE(a->ttl + a->count - 1 <= 48 * 3600, SG_EINVAL,
		  "--ttl plus --count seconds goes past the 48h a development token may live");
	const char *aud[] = {a->audience};
	sg_jwt_mint_options mo = {
		.issuer = a->s.jwt_issuer,
		.audiences = aud,
		.n_audiences = 1,
		.ns = a->ns,
		.sa = a->service_account,
		.pod_name = a->pod_name,
	};
	/* One process for a pool: a load test's thousands of tokens cost a
	 * signature each, not a program start each. */
	int rc = SG_OK;
	for (int64_t i = 0; i < a->count && rc == SG_OK; i++) {
		mo.ttl = a->ttl + i;
		char *token = NULL;
		SG_TRY(sg_jwt_mint(a->s.jwt_signing_key, &mo, &token));
		rc = write_out(NULL, token, strlen(token));
		if (rc == SG_OK)
			rc = write_out(NULL, "\n", 1);
		sg_wipe(token, strlen(token));
		free(token);
	}
	return rc;
}

static int read_token(const char *path, char **out)
{
	uint8_t *t = NULL;
	size_t len;
	SG_TRY(ctl_read_file(path, 16 * 1024, &t, &len));
	while (len && (t[len - 1] == '\n' || t[len - 1] == '\r' || t[len - 1] == ' '))
		t[--len] = 0;
	if (!len) {
		free(t);
		SG_BAIL(SG_EINVAL, "token file %s is empty", path);
	}
	*out = (char *)t;
	return SG_OK;
}

static const char *const grpc_codes[17] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
					   "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
					   "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
					   "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};

static int call_signetd(ctl_args *a, const char *token, const uint8_t *csr, size_t csr_len, char **chain)
{
	uint8_t *root SG_AUTOFREE = NULL, *req SG_AUTOFREE = NULL, *resp SG_AUTOFREE = NULL;
	size_t root_len, req_len, resp_len = 0;
	const char *ca = a->ca_file ? a->ca_file : a->s.root_cert;
	SG_ENSURE(ca, SG_EINVAL, "--ca-file (or root-cert from --config) is required to verify signetd");
	SG_TRY(ctl_read_file(ca, 1 << 20, &root, &root_len));
	SG_TRY(sg_istio_request_encode((const char *)csr, csr_len, a->ttl, a->impersonate, &req, &req_len));
	char *auth SG_AUTOFREE = malloc(strlen(token) + 8);
	SG_ENSURE(auth, SG_EINTERNAL, "out of memory");
	snprintf(auth, strlen(token) + 8, "Bearer %s", token);
	sg_grpc_md md[2] = {{"authorization", auth}, {"clusterid", a->cluster_id}};
	sg_grpc_channel_options co = {.target = a->addr, .root_pem = (const char *)root, .server_name = a->server_name};
	sg_grpc_channel *ch = NULL;
	SG_TRY(sg_grpc_channel_new(&ch, &co));
	int status = -1;
	char msg[512] = "";
	int rc = sg_grpc_unary(ch, "/istio.v1.auth.IstioCertificateService/CreateCertificate", md, a->cluster_id ? 2 : 1,
			       req, req_len, (uint64_t)a->timeout * 1000000000u, &resp, &resp_len, &status, msg,
			       sizeof(msg));
	sg_grpc_channel_free(ch);
	sg_wipe(auth, strlen(auth));
	SG_TRY(rc);
	SG_ENSURE(status == 0, status == 16 ? SG_EAUTH : SG_EPROTO, "signetd answered %s: %s",
		  status >= 0 && status < 17 ? grpc_codes[status] : "an unknown status", msg);
	return sg_istio_response_join(resp, resp_len, chain);
}

static int do_request(ctl_args *a)
{
	SG_ENSURE(a->token_file && a->csr, SG_EINVAL, "--token-file and --csr are required");
	char *token = NULL;
	SG_TRY(read_token(a->token_file, &token));
	uint8_t *csr SG_AUTOFREE = NULL;
	size_t csr_len;
	int rc = ctl_read_file(a->csr, SG_CSR_MAX_DER * 2, &csr, &csr_len);
	char *chain = NULL;
	if (rc == SG_OK)
		rc = call_signetd(a, token, csr, csr_len, &chain);
	sg_wipe(token, strlen(token));
	free(token);
	if (rc == SG_OK)
		rc = write_out(a->out, chain, strlen(chain));
	free(chain);
	return rc;
}

typedef struct command {
	const char *name;
	const char *summary;
	const sg_opt *opts;
	size_t nopts;
	int (*run)(ctl_args *a);
} command;

static const command commands[] = {
	{"issue", "issue a certificate for a CSR and print the chain, leaf first", issue_opts, N(issue_opts), do_issue},
	{"csr", "make a CSR for the HSM key (intermediate CA path)", csr_opts, N(csr_opts), do_csr},
	{"import", "install a signed CA certificate and chain for the HSM key", import_opts, N(import_opts), do_import},
	{"status", "show the CA and the HSM's health", status_opts, N(status_opts), do_status},
	{"token", "mint a service-account token from the development issuer (init sets one up)", token_opts,
	 N(token_opts), do_token},
	{"request", "call signetd's CreateCertificate and print the chain, leaf first", request_opts,
	 N(request_opts), do_request},
};

static void usage(FILE *fp)
{
	fprintf(fp, "usage: signetctl COMMAND [options]   (signetctl COMMAND --help for its options)\n\n"
	            "  init     create a CA: key generated in a PKCS#11 token, self-signed root, config\n"
	            "  hsm-check  tell whether signet will work with a PKCS#11 module and token\n"
	            "  cel      evaluate a CEL expression as a CertificateRequestPolicy's validations rule\n"
	            "  policy check  a CertificateRequestPolicy's verdict on a CertificateRequest, offline\n"
	            "  rotate   rotate the CA a signetctl init made: begin, activate, finish, status\n");
	for (size_t i = 0; i < N(commands); i++)
		fprintf(fp, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
	if (sg_secret_protect_process() < 0) {
		fprintf(stderr, "signetctl: %s\n", sg_error_last()->msg);
		return 1;
	}
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "init") == 0)
		return ctl_init(argc - 2, argv + 2);
	if (strcmp(argv[1], "hsm-check") == 0)
		return ctl_hsm_check(argc - 2, argv + 2);
	if (strcmp(argv[1], "cel") == 0)
		return ctl_cel(argc - 2, argv + 2);
	if (strcmp(argv[1], "policy") == 0)
		return ctl_policy(argc - 2, argv + 2);
	if (strcmp(argv[1], "rotate") == 0)
		return ctl_rotate(argc - 2, argv + 2);
	const command *cmd = NULL;
	for (size_t i = 0; i < N(commands); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd) {
		fprintf(stderr, "signetctl: unknown command \"%s\"\n", argv[1]);
		usage(stderr);
		return 2;
	}
	ctl_args a = {0};
	char **pos SG_AUTOFREE = calloc((size_t)argc + 1, sizeof(*pos));
	if (!pos)
		return 1;
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(cmd->opts, cmd->nopts, &a, argc - 2, argv + 2, &res);
	if (rc == SG_OK && res.argc > 0)
		rc = sg_error_set(SG_EINVAL, "unexpected argument \"%s\"", res.argv[0]);
	if (rc < 0 || res.help) {
		if (res.help && rc == SG_OK) {
			printf("usage: signetctl %s [options]\n\n%s.\n\n", cmd->name, cmd->summary);
			sg_opt_usage(cmd->opts, cmd->nopts, stdout);
		} else {
			fprintf(stderr, "signetctl %s: %s\n", cmd->name, sg_error_last()->msg);
		}
		sg_opt_free(cmd->opts, cmd->nopts, &a);
		return rc < 0 ? 2 : 0;
	}
	rc = cmd->run(&a);
	if (rc < 0)
		fprintf(stderr, "signetctl %s: %s\n", cmd->name, sg_error_last()->msg);
	sg_opt_free(cmd->opts, cmd->nopts, &a);
	return rc < 0 ? 1 : 0;
}
