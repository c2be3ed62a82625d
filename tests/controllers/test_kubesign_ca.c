/*
 * Which root is the CA's (sg_ca.h) and whether the CA may sign
 * (sg_kubesign_ca_usable), on a real CA: `signetctl init` makes the
 * SoftHSM2 key, `signetctl csr` asks for its certificate, roots made here
 * certify it and `signetctl import` installs it. No API server.
 *
 * The case a rotation's overlap leaves behind: the CA under root B, its
 * bundle A + B with A expired. The CA's root is B: the CA loads, is usable
 * and signs (the chain verifies against B alone, with OpenSSL's verifier),
 * and its root's expiry is B's. Once B itself has expired (asked at a
 * later now), the CA is refused as before; and a CA whose chain ends at
 * the expired root does not load at all.
 */
#include "ca_fixture.h"
#include "self_signed.h"
#include "sg_kubesign.h"

#include "sg_clock.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <string.h>

#define DAY 86400L

static fixture fx;
static sg_appliance *app;
static X509 *root_a, *root_b;
static EVP_PKEY *key_a, *key_b;
static char bundle_path[700];

static int64_t not_after(X509 *x)
{
	int days = 0, secs = 0;
	ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
	ASN1_TIME_diff(&days, &secs, epoch, X509_get0_notAfter(x));
	ASN1_TIME_free(epoch);
	return (int64_t)days * 86400 + secs;
}

static bool write_text(const char *path, const char *a, const char *b)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return false;
	bool ok = fputs(a, f) >= 0 && (!b || fputs(b, f) >= 0);
	return fclose(f) == 0 && ok;
}

static int run(const char *cmd)
{
	int rc = system(cmd);
	if (rc != 0)
		fprintf(stderr, "failed (%d): %s\n", rc, cmd);
	return rc;
}

/* A CA certificate for the HSM key (read from signetctl csr's request in
 * dir/ca.csr), issued by issuer; caller frees. */
static X509 *certify_hsm_key(X509 *issuer, EVP_PKEY *issuer_key)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/ca.csr", fx.dir);
	FILE *f = fopen(path, "r");
	X509_REQ *req = f ? PEM_read_X509_REQ(f, NULL, NULL, NULL) : NULL;
	if (f)
		fclose(f);
	EVP_PKEY *pub = req ? X509_REQ_get0_pubkey(req) : NULL;
	X509 *x = pub ? test_cert_new("issuing CA", true, -3600, 20 * DAY, pub, issuer, issuer_key) : NULL;
	X509_REQ_free(req);
	return x;
}

/* Reads the config signetctl import rewrote and opens the CA from it. */
static int open_app(void)
{
	fixture_free(&fx);
	memset(&fx.args, 0, sizeof(fx.args));
	char *argv[] = {"--config", fx.conf, "--log-level", "warn"};
	char *pos[4];
	sg_opt_result res = {.argv = pos};
	int rc = sg_opt_parse(fixture_opts, sizeof(fixture_opts) / sizeof(fixture_opts[0]), &fx.args, 4, argv, &res);
	if (rc < 0)
		return rc;
	fx.args.s.signer_threads = 1;
	return sg_appliance_open(&app, &fx.args.s);
}

/* The CA re-certified under B, A (expired yesterday) and B in its bundle. */
static void setup(void)
{
	SG_CHECK_OK(fixture_ca(&fx, "ecdsa-p256"));
	key_a = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	key_b = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	root_a = test_cert_new("root A", true, -2 * DAY, -DAY, key_a, NULL, NULL);
	root_b = test_cert_new("root B", true, -3600, 30 * DAY, key_b, NULL, NULL);
	SG_CHECK(root_a && root_b);
	char cmd[2400], ca_path[700];
	snprintf(cmd, sizeof(cmd),
	         "'%s' csr --config '%s' --subject 'CN=issuing CA' --out '%s/ca.csr' --log-level warn", SIGNETCTL,
	         fx.conf, fx.dir);
	SG_CHECK(run(cmd) == 0);
	X509 *ca = certify_hsm_key(root_b, key_b);
	char *ca_pem = test_cert_to_pem(ca), *a_pem = test_cert_to_pem(root_a), *b_pem = test_cert_to_pem(root_b);
	SG_CHECK(ca_pem && a_pem && b_pem);
	snprintf(ca_path, sizeof(ca_path), "%s/under-b.pem", fx.dir);
	snprintf(bundle_path, sizeof(bundle_path), "%s/a-and-b.pem", fx.dir);
	SG_CHECK(ca_pem && write_text(ca_path, ca_pem, NULL));
	SG_CHECK(a_pem && b_pem && write_text(bundle_path, a_pem, b_pem));
	snprintf(cmd, sizeof(cmd), "'%s' import --config '%s' --cert '%s' --root '%s' --log-level warn >/dev/null",
	         SIGNETCTL, fx.conf, ca_path, bundle_path);
	SG_CHECK(run(cmd) == 0);
	SG_CHECK_OK(open_app());
	X509_free(ca);
	free(ca_pem);
	free(a_pem);
	free(b_pem);
}

/* The CA's root is the one its chain ends at: B, not the bundle's
 * earliest-expiring A. */
static void t_the_cas_root_is_its_anchor(void)
{
	const sg_ca *ca = sg_appliance_ca(app);
	SG_CHECK(sg_ca_root_not_after(ca) == not_after(root_b));
	SG_CHECK(strcmp(sg_ca_root_subject(ca), "/CN=root B") == 0);
	SG_CHECK(sg_ca_chain_not_after(ca) == sg_ca_issuer(ca)->not_after); /* the CA certificate: 20 days < B's 30 */
	sg_ca_root_info roots[SG_CA_BUNDLE_MAX];
	size_t n = 0;
	const char *pem = sg_ca_root_pem(ca);
	SG_CHECK_OK(sg_ca_bundle_roots(ca, pem, strlen(pem), roots, SG_CA_BUNDLE_MAX, &n));
	SG_CHECK(n == 2);
	if (n == 2) {
		SG_CHECK(strcmp(roots[0].subject, "/CN=root A") == 0 && !roots[0].is_ca_root);
		SG_CHECK(roots[0].not_after == not_after(root_a) && roots[0].not_after < sg_wall_seconds());
		SG_CHECK(strcmp(roots[1].subject, "/CN=root B") == 0 && roots[1].is_ca_root);
	}
	/* Room for one: the first only. Broken input: refused. */
	SG_CHECK_OK(sg_ca_bundle_roots(ca, pem, strlen(pem), roots, 1, &n));
	SG_CHECK(n == 1 && !roots[0].is_ca_root);
	SG_CHECK_RC(sg_ca_bundle_roots(ca, "no PEM", 6, roots, SG_CA_BUNDLE_MAX, &n), SG_EINVAL);
	SG_CHECK(n == 0);
}

/* Verifies chain (leaf + intermediates, PEM) against root alone. */
static bool verifies_against(const char *chain, X509 *root)
{
	BIO *b = BIO_new_mem_buf(chain, -1);
	X509 *leaf = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	STACK_OF(X509) *untrusted = sk_X509_new_null();
	X509 *x;
	while (b && untrusted && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
		if (!sk_X509_push(untrusted, x))
			X509_free(x);
	ERR_clear_error();
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	bool ok = leaf && store && ctx && X509_STORE_add_cert(store, root) == 1 &&
	          X509_STORE_CTX_init(ctx, store, leaf, untrusted) == 1 && X509_verify_cert(ctx) == 1;
	if (!ok && ctx)
		fprintf(stderr, "verify: %s\n", X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	sk_X509_pop_free(untrusted, X509_free);
	X509_free(leaf);
	BIO_free(b);
	return ok;
}

/* A's expiry does not stop the CA: usable, and what it signs verifies
 * against B. */
static void t_usable_and_signs_through_the_overlap(void)
{
	sg_kubesign_ca kc = {.name = "default", .app = app};
	char why[512] = "";
	SG_CHECK(sg_kubesign_ca_usable(&kc, sg_wall_seconds(), why, sizeof(why)));
	if (why[0])
		fprintf(stderr, "refused: %s\n", why);
	size_t len;
	csr_opts o = {"EC", "P-256", "DNS:svc.example", "svc.example", false, NULL, false};
	char *csr = make_csr(&o, &len);
	sg_kubesign_request r = {.csr_pem = csr,
	                         .csr_len = len,
	                         .duration = 3600,
	                         .key_usage = SG_KU_DIGITAL_SIGNATURE,
	                         .ext_key_usage = SG_EKU_SERVER_AUTH};
	sg_kubesign_result res = {0};
	SG_CHECK_OK(sg_kubesign_issue(&kc, &r, &res));
	SG_CHECK(res.chain && verifies_against(res.chain, root_b));
	SG_CHECK(res.ca && strstr(res.ca, "BEGIN CERTIFICATE")); /* the bundle, A and B, as the file has it */
	sg_kubesign_result_clear(&res);
	free(csr);
}

/* Once the CA's own root has expired, it is refused, naming the root. */
static void t_refused_once_its_root_expired(void)
{
	sg_kubesign_ca kc = {.name = "default", .app = app};
	char why[512] = "";
	SG_CHECK(!sg_kubesign_ca_usable(&kc, not_after(root_b), why, sizeof(why)));
	SG_CHECK(strstr(why, "the root of CA \"default\" (/CN=root B) has expired") != NULL);
	if (!strstr(why, "root"))
		fprintf(stderr, "why: %s\n", why);
	/* Just before: the root still lives, the CA certificate does not. */
	SG_CHECK(!sg_kubesign_ca_usable(&kc, sg_ca_issuer(sg_appliance_ca(app))->not_after, why, sizeof(why)));
	SG_CHECK(strstr(why, "the CA certificate or an intermediate") != NULL);
}

/* A CA whose chain ends at the expired root A: refused at load. */
static void t_a_ca_under_the_expired_root_does_not_load(void)
{
	X509 *under_a = certify_hsm_key(root_a, key_a);
	char *pem = test_cert_to_pem(under_a), path[700];
	snprintf(path, sizeof(path), "%s/under-a.pem", fx.dir);
	SG_CHECK(pem && write_text(path, pem, NULL));
	uint8_t *spki = NULL;
	size_t spki_len = 0;
	SG_CHECK_OK(sg_hsm_public_key(sg_appliance_hsm(app), &spki, &spki_len));
	sg_ca_files files = {path, NULL, bundle_path};
	sg_ca *ca = NULL;
	SG_CHECK_RC(sg_ca_load(&ca, &files, spki, spki_len, sg_wall_seconds()), SG_EINVAL);
	SG_CHECK_MSG("expired");
	sg_ca_free(ca);
	free(spki);
	free(pem);
	X509_free(under_a);
}

static void teardown(void)
{
	sg_appliance_free(app);
	fixture_free(&fx);
	X509_free(root_a);
	X509_free(root_b);
	EVP_PKEY_free(key_a);
	EVP_PKEY_free(key_b);
}

SG_TEST_MAIN(SG_TEST(setup), SG_TEST(t_the_cas_root_is_its_anchor), SG_TEST(t_usable_and_signs_through_the_overlap),
             SG_TEST(t_refused_once_its_root_expired), SG_TEST(t_a_ca_under_the_expired_root_does_not_load),
             SG_TEST(teardown))
