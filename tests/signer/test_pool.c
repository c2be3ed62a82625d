/*
 * The signer pool against a real SoftHSM2 CA: issuance through every
 * profile checked field by field with OpenSSL's parser and verifier,
 * backpressure, deadlines, drain on shutdown, concurrency and recovery from
 * sessions closed under the signers, and a CA rotation followed by a
 * running pool (last: it rotates the fixture's CA).
 */
#include "ca_fixture.h"
#include "sg_clock.h"
#include "sg_issuer.h"
#include "sg_pool.h"

#include <dlfcn.h>
#include <p11-kit/pkcs11.h>
#include <pthread.h>
#include <stdatomic.h>

static fixture fx;
static sg_appliance *app;

static void open_app(unsigned threads, unsigned queue, bool verify)
{
	fx.args.s.signer_threads = threads;
	fx.args.s.signer_queue = queue;
	fx.args.s.verify_issued = verify;
	SG_CHECK_OK(sg_appliance_open(&app, &fx.args.s));
}

static int issue(sg_profile prof, const char *csr, size_t len, const char *identity, int64_t ttl,
		 sg_issue_result *res)
{
	sg_issue_request req = {.csr = (const uint8_t *)csr, .csr_len = len, .profile = prof,
				.identity = identity, .ttl = ttl, .path_len = -1};
	return sg_pool_issue(sg_appliance_pool(app), &req, res);
}

static int64_t asn1_time(const ASN1_TIME *t)
{
	int days = 0, secs = 0;
	ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
	ASN1_TIME_diff(&days, &secs, epoch, t);
	ASN1_TIME_free(epoch);
	return (int64_t)days * 86400 + secs;
}

static void t_istio_profile(void)
{
	static const char *algs[][2] = {{"EC", "P-256"}, {"RSA", "2048"}, {"EC", "P-384"}};
	for (int i = 0; i < 3; i++) {
		size_t len;
		csr_opts o = {algs[i][0], algs[i][1], "critical,URI:spiffe://cluster.local/ns/default/sa/default", NULL, false, NULL, false};
		char *csr = make_csr(&o, &len);
		sg_issue_result res;
		int64_t now = sg_wall_seconds();
		SG_CHECK_OK(issue(SG_PROFILE_ISTIO, csr, len, NULL, 3600, &res));
		X509 *leaf = verify_chain(&res, fx.root);
		SG_CHECK(leaf != NULL);
		if (leaf) {
			SG_CHECK(X509_NAME_entry_count(X509_get_subject_name(leaf)) == 0);
			int crit = -1;
			GENERAL_NAMES *gens = X509_get_ext_d2i(leaf, NID_subject_alt_name, &crit, NULL);
			SG_CHECK(crit == 1 && gens && sk_GENERAL_NAME_num(gens) == 1);
			if (gens && sk_GENERAL_NAME_num(gens) == 1) {
				GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, 0);
				SG_CHECK(g->type == GEN_URI);
				SG_CHECK(strcmp((const char *)ASN1_STRING_get0_data(g->d.uniformResourceIdentifier),
						"spiffe://cluster.local/ns/default/sa/default") == 0);
			}
			GENERAL_NAMES_free(gens);
			SG_CHECK(X509_get_key_usage(leaf) == (KU_DIGITAL_SIGNATURE | KU_KEY_ENCIPHERMENT));
			SG_CHECK(X509_get_extended_key_usage(leaf) == (XKU_SSL_SERVER | XKU_SSL_CLIENT));
			SG_CHECK(X509_check_ca(leaf) == 0);
			BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(leaf, NID_basic_constraints, &crit, NULL);
			SG_CHECK(bc && !bc->ca && crit == 1);
			BASIC_CONSTRAINTS_free(bc);
			SG_CHECK(X509_get0_subject_key_id(leaf) != NULL);
			SG_CHECK(X509_get0_authority_key_id(leaf) != NULL);
			const ASN1_INTEGER *serial = X509_get0_serialNumber(leaf);
			SG_CHECK(serial->length == 16 && serial->type == V_ASN1_INTEGER);
			int64_t nb = asn1_time(X509_get0_notBefore(leaf)), na = asn1_time(X509_get0_notAfter(leaf));
			SG_CHECK(nb >= now - SG_ISTIO_BACKDATE - 5 && nb <= now - SG_ISTIO_BACKDATE + 5);
			SG_CHECK(na >= now + 3600 - 5 && na <= now + 3600 + 5);
			SG_CHECK(X509_get_version(leaf) == X509_VERSION_3);
			X509_free(leaf);
		}
		SG_CHECK(res.chain_len == 1); /* self-signed root: [leaf, root] */
		SG_CHECK(strcmp(res.identity, "spiffe://cluster.local/ns/default/sa/default") == 0);
		SG_CHECK(strlen(res.serial_hex) == 32);
		sg_issue_result_clear(&res);
		free(csr);
	}
}

static void t_istio_identity_is_stamped(void)
{
	size_t len;
	csr_opts o = {"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/a,DNS:evil.example", NULL, false, NULL, false};
	char *csr = make_csr(&o, &len);
	sg_issue_result res;
	SG_CHECK_OK(issue(SG_PROFILE_ISTIO, csr, len, "spiffe://cluster.local/ns/b/sa/b", 0, &res));
	X509 *leaf = verify_chain(&res, fx.root);
	SG_CHECK(leaf != NULL);
	GENERAL_NAMES *gens = leaf ? X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL) : NULL;
	SG_CHECK(gens && sk_GENERAL_NAME_num(gens) == 1); /* the CSR's DNS name is not copied */
	GENERAL_NAMES_free(gens);
	int64_t now = sg_wall_seconds();
	SG_CHECK(res.not_after >= now + SG_TTL_DEFAULT_ISTIO - 5);
	X509_free(leaf);
	sg_issue_result_clear(&res);
	SG_CHECK_RC(issue(SG_PROFILE_ISTIO, csr, len, "https://not-spiffe", 0, &res), SG_EINVAL);
	SG_CHECK_MSG("not a SPIFFE ID");
	free(csr);

	/* Two URI SANs and no identity: ambiguous, refused. */
	csr_opts two = {"EC", "P-256", "URI:spiffe://a/x,URI:spiffe://a/y", NULL, false, NULL, false};
	csr = make_csr(&two, &len);
	SG_CHECK_RC(issue(SG_PROFILE_ISTIO, csr, len, NULL, 0, &res), SG_EINVAL);
	SG_CHECK_MSG("exactly one URI SAN");
	free(csr);
}

/* istio-csr's policy: the CSR must ask for exactly the caller's identity. */
static void t_istio_strict(void)
{
	static const char *id = "spiffe://cluster.local/ns/a/sa/b";
	static const struct {
		csr_opts o;
		int rc;
		const char *msg;
	} cases[] = {
		{{"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/a/sa/b", NULL, false, NULL, false}, SG_OK, NULL},
		{{"RSA", "2048", "critical,URI:spiffe://cluster.local/ns/a/sa/b", NULL, false,
		  "critical,digitalSignature,keyEncipherment", false},
		 SG_OK, NULL},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/other", NULL, false, NULL, false}, SG_EDENIED,
		 "failed to match URIs with identities"},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/b,DNS:evil.example", NULL, false, NULL, false},
		 SG_EDENIED, "only URI SANs"},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/b,IP:10.1.2.3", NULL, false, NULL, false}, SG_EDENIED,
		 "IP address"},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/b", "b", false, NULL, false}, SG_EDENIED,
		 "CommonName"},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/b", NULL, true, NULL, false}, SG_EDENIED,
		 "basicConstraints"},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/b", NULL, false, "critical,keyCertSign", false},
		 SG_EDENIED, "forbidden key usage"},
		{{"EC", "P-256", "URI:spiffe://cluster.local/ns/a/sa/b", NULL, false, NULL, true}, SG_EDENIED,
		 "forbidden extension"},
		{{"EC", "P-256", NULL, NULL, false, NULL, false}, SG_EDENIED, "exactly one URI SAN"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len;
		char *csr = make_csr(&cases[i].o, &len);
		sg_issue_request req = {.csr = (const uint8_t *)csr, .csr_len = len, .profile = SG_PROFILE_ISTIO,
					.identity = id, .strict_csr = true};
		sg_issue_result res;
		int rc = sg_pool_issue(sg_appliance_pool(app), &req, &res);
		SG_CHECK_RC(rc, cases[i].rc);
		if (cases[i].msg)
			SG_CHECK_MSG(cases[i].msg);
		if (rc == SG_OK)
			sg_issue_result_clear(&res);
		free(csr);
	}
}

/* A certificate is valid by time(2) as soon as it is issued. On Linux that
 * clock's second begins a few ms after CLOCK_REALTIME's, so a notBefore
 * taken from CLOCK_REALTIME (no backdating: the generic and intermediate
 * profiles) was in OpenSSL's future for those ms after each second began.
 * Sleeps to just before a second, waits for it, and issues while time(2)
 * is behind, in up to three seconds. An issue that time(2) was still
 * behind after is one the old clock would have failed; how many there
 * were is printed, and where the host has no such window (a tick too
 * short, another libc), that the case did not test it. */
static void t_valid_at_once(void)
{
	size_t len;
	csr_opts o = {"EC", "P-256", "DNS:svc.example.com", "svc.example.com", false, NULL, false};
	char *csr = make_csr(&o, &len);
	int behind_after = 0;
	for (int second = 0; second < 3; second++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		struct timespec wake = {ts.tv_sec, 998000000}; /* 2 ms before the next second */
		if (ts.tv_nsec < wake.tv_nsec)
			clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &wake, NULL);
		uint64_t give_up = sg_now_ns() + 20000000u; /* this second's window, if any */
		do
			clock_gettime(CLOCK_REALTIME, &ts);
		while (ts.tv_sec == wake.tv_sec && sg_now_ns() < give_up);
		if (time(NULL) >= ts.tv_sec)
			continue; /* no window this second */
		for (int p = 0; p < 2; p++) {
			sg_issue_result res;
			SG_CHECK_OK(
			    issue(p ? SG_PROFILE_INTERMEDIATE : SG_PROFILE_GENERIC, csr, len, NULL, 3600, &res));
			time_t after = time(NULL);
			behind_after += after < ts.tv_sec;
			if (res.not_before > after)
				fprintf(stderr, "notBefore %lld, time() %lld after issuing\n",
				        (long long)res.not_before, (long long)after);
			SG_CHECK(res.not_before <= after);
			sg_issue_result_clear(&res);
		}
	}
	fprintf(stderr, "%d issues ended with time() still behind CLOCK_REALTIME's second%s\n", behind_after,
	        behind_after ? "" : ": not tested on this host");
	free(csr);
}

static void t_generic_and_intermediate(void)
{
	size_t len;
	csr_opts o = {"EC", "P-256", "DNS:svc.example.com,IP:10.0.0.1", "svc.example.com", false, NULL, false};
	char *csr = make_csr(&o, &len);
	sg_issue_result res;
	SG_CHECK_OK(issue(SG_PROFILE_GENERIC, csr, len, NULL, 7200, &res));
	X509 *leaf = verify_chain(&res, fx.root);
	SG_CHECK(leaf != NULL);
	if (leaf) {
		char cn[64] = "";
		X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof(cn));
		SG_CHECK(strcmp(cn, "svc.example.com") == 0);
		SG_CHECK(X509_check_host(leaf, "svc.example.com", 0, 0, NULL) == 1);
		SG_CHECK(X509_check_ip_asc(leaf, "10.0.0.1", 0) == 1);
		int crit = -1;
		GENERAL_NAMES *g = X509_get_ext_d2i(leaf, NID_subject_alt_name, &crit, NULL);
		SG_CHECK(crit == 0); /* subject not empty: SAN not critical */
		GENERAL_NAMES_free(g);
		X509_free(leaf);
	}
	sg_issue_result_clear(&res);
	SG_CHECK_RC(issue(SG_PROFILE_INTERMEDIATE, csr, len, NULL, 0, &res), SG_OK);
	leaf = verify_chain(&res, fx.root);
	SG_CHECK(leaf && X509_check_ca(leaf) >= 1);
	SG_CHECK(leaf && (X509_get_key_usage(leaf) & KU_KEY_CERT_SIGN));
	X509_free(leaf);
	sg_issue_result_clear(&res);
	free(csr);

	csr_opts cn_only = {"EC", "P-256", NULL, "svc.example.com", false, NULL, false};
	csr = make_csr(&cn_only, &len);
	SG_CHECK_RC(issue(SG_PROFILE_GENERIC, csr, len, NULL, 0, &res), SG_EINVAL);
	SG_CHECK_MSG("no subjectAltName");
	free(csr);

	csr_opts ca = {"EC", "P-256", "DNS:x.example", "x", true, NULL, false};
	csr = make_csr(&ca, &len);
	SG_CHECK_RC(issue(SG_PROFILE_GENERIC, csr, len, NULL, 0, &res), SG_EDENIED);
	free(csr);

	/* istio-agent's CSR (empty O=, one URI SAN), as istiod's RA forwards
	 * it to a Kubernetes signer: issued with an empty subject, the empty
	 * attribute left out (before: refused by the linter). */
	csr_opts agent = {"RSA", "2048", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	csr = make_csr(&agent, &len);
	SG_CHECK_OK(issue(SG_PROFILE_GENERIC, csr, len, NULL, 3600, &res));
	leaf = verify_chain(&res, fx.root);
	SG_CHECK(leaf && X509_NAME_entry_count(X509_get_subject_name(leaf)) == 0);
	int crit = -1;
	GENERAL_NAMES *g = leaf ? X509_get_ext_d2i(leaf, NID_subject_alt_name, &crit, NULL) : NULL;
	SG_CHECK(g && crit == 1); /* subject empty: SAN critical */
	GENERAL_NAMES_free(g);
	X509_free(leaf);
	sg_issue_result_clear(&res);
	free(csr);
}

static void t_ttl_rules(void)
{
	size_t len;
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	char *csr = make_csr(&o, &len);
	sg_issue_result res;
	SG_CHECK_RC(issue(SG_PROFILE_ISTIO, csr, len, NULL, -1, &res), SG_EINVAL);
	/* Longer than the CA lives: clamped to the CA's NotAfter. */
	SG_CHECK_OK(issue(SG_PROFILE_ISTIO, csr, len, NULL, 50LL * 365 * 86400, &res));
	SG_CHECK(res.not_after == sg_ca_issuer(sg_appliance_ca(app))->not_after);
	sg_issue_result_clear(&res);
	free(csr);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *buf = calloc(1, 1 << 16);
	*len = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
	fclose(f);
	return buf;
}

/* A reloaded root bundle is checked before it is handed out: only
 * certificates, and the CA must chain to one of them. */
static void t_bundle_check(void)
{
	const sg_ca *ca = sg_appliance_ca(app);
	size_t rlen = 0, olen = 0;
	char *root = slurp(fx.root, &rlen);
	char other_path[700], cmd[1600];
	snprintf(other_path, sizeof(other_path), "%s/other-root.pem", fx.dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null "
		 "-subj /CN=other -days 2 -out '%s' 2>/dev/null",
		 other_path);
	SG_CHECK(system(cmd) == 0);
	char *other = slurp(other_path, &olen);
	SG_CHECK(root && other && rlen > 0 && olen > 0);
	if (!root || !other)
		goto out;
	SG_CHECK_OK(sg_ca_check_bundle(ca, root, rlen, "bundle"));
	/* Rotation: the current root plus the next one. */
	char *both = calloc(1, rlen + olen + 1);
	SG_CHECK(both != NULL);
	if (both) {
		memcpy(both, root, rlen);
		memcpy(both + rlen, other, olen);
		SG_CHECK_OK(sg_ca_check_bundle(ca, both, rlen + olen, "bundle"));
		free(both);
	}
	/* Without our root: the CA would hand out roots it does not chain to. */
	SG_CHECK_RC(sg_ca_check_bundle(ca, other, olen, "bundle"), SG_EINVAL);
	SG_CHECK_MSG("does not chain");
	static const char garbage[] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
	SG_CHECK_RC(sg_ca_check_bundle(ca, garbage, sizeof(garbage) - 1, "bundle"), SG_EINVAL);
	SG_CHECK_RC(sg_ca_check_bundle(ca, "", 0, "bundle"), SG_EINVAL);
	SG_CHECK_RC(sg_ca_check_bundle(ca, "not PEM at all", 14, "bundle"), SG_EINVAL);
out:
	free(root);
	free(other);
}

static void t_bad_csrs(void)
{
	sg_issue_result res;
	SG_CHECK_RC(issue(SG_PROFILE_ISTIO, "garbage", 7, NULL, 0, &res), SG_EINVAL);
	size_t len;
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	char *csr = make_csr(&o, &len);
	SG_CHECK_RC(issue(SG_PROFILE_ISTIO, csr, len / 2, NULL, 0, &res), SG_EINVAL);
	free(csr);
	csr_opts weak = {"RSA", "1024", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	csr = make_csr(&weak, &len);
	SG_CHECK_RC(issue(SG_PROFILE_ISTIO, csr, len, NULL, 0, &res), SG_EINVAL);
	SG_CHECK_MSG("1024");
	free(csr);
}

typedef struct tally {
	atomic_int ok, busy, timeout, other, calls;
} tally;

static void count(int rc, sg_issue_result *res, const sg_error *err, void *arg)
{
	tally *t = arg;
	(void)res;
	(void)err;
	atomic_fetch_add(&t->calls, 1);
	if (rc == SG_OK)
		atomic_fetch_add(&t->ok, 1);
	else if (rc == SG_ETIMEOUT)
		atomic_fetch_add(&t->timeout, 1);
	else
		atomic_fetch_add(&t->other, 1);
}

/* A burst larger than the queue: the excess is refused at once with
 * SG_EBUSY; everything accepted completes exactly once, also across
 * shutdown (drain). */
static void t_backpressure_and_drain(void)
{
	sg_appliance_free(app);
	app = NULL;
	open_app(2, 4, false);
	size_t len;
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	char *csr = make_csr(&o, &len);
	tally t = {0};
	int accepted = 0, refused = 0;
	sg_issue_request req = {.csr = (const uint8_t *)csr, .csr_len = len, .profile = SG_PROFILE_ISTIO};
	for (int i = 0; i < 200; i++) {
		int rc = sg_pool_submit(sg_appliance_pool(app), &req, count, &t);
		if (rc == SG_OK)
			accepted++;
		else if (rc == SG_EBUSY)
			refused++;
	}
	SG_CHECK(accepted + refused == 200);
	SG_CHECK(refused > 0);
	sg_pool_stats st;
	sg_pool_stats_get(sg_appliance_pool(app), &st);
	SG_CHECK(st.rejected == (uint64_t)refused);
	/* Expired deadline: completes with SG_ETIMEOUT, never signs. */
	sg_issue_request late = req;
	late.deadline_ns = sg_now_ns() - 1;
	int lrc = SG_EBUSY;
	SG_WAIT_FOR(30000, (lrc = sg_pool_submit(sg_appliance_pool(app), &late, count, &t)) != SG_EBUSY);
	SG_CHECK_OK(lrc);
	accepted++;
	sg_appliance_free(app); /* drains */
	app = NULL;
	SG_CHECK(atomic_load(&t.calls) == accepted);
	SG_CHECK(atomic_load(&t.ok) == accepted - 1);
	SG_CHECK(atomic_load(&t.timeout) == 1);
	free(csr);
	open_app(4, 0, true);
}

/* Admission by deadline: once the pool knows its signing time, a request
 * that would wait in the queue past its deadline is refused at once
 * (SG_EBUSY, saying how much work is queued), while the queue still has
 * room; one with time to spare, or with no deadline, is queued. Nearly
 * everything admitted is then signed in time rather than expiring queued. */
static void t_admission_by_deadline(void)
{
	sg_appliance_free(app);
	app = NULL;
	open_app(1, 4096, false);
	sg_pool *pool = sg_appliance_pool(app);
	size_t len;
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	char *csr = make_csr(&o, &len);
	sg_issue_request req = {.csr = (const uint8_t *)csr, .csr_len = len, .profile = SG_PROFILE_ISTIO};
	sg_pool_stats st;
	sg_pool_stats_get(pool, &st);
	SG_CHECK(st.service_ns == 0 && st.queue_capacity == 4096);
	for (int i = 0; i < 20; i++) { /* learn the signing time */
		sg_issue_result res;
		SG_CHECK_OK(sg_pool_issue(pool, &req, &res));
		sg_issue_result_clear(&res);
	}
	sg_pool_stats_get(pool, &st);
	SG_CHECK(st.service_ns > 0);
	/* A burst of 2,000 with a deadline worth about 500 signatures. */
	uint64_t budget = 500 * st.service_ns;
	tally t = {0};
	int accepted = 0, refused = 0;
	bool said = false;
	for (int i = 0; i < 2000; i++) {
		req.deadline_ns = sg_now_ns() + budget;
		int rc = sg_pool_submit(pool, &req, count, &t);
		if (rc == SG_OK) {
			accepted++;
		} else {
			SG_CHECK(rc == SG_EBUSY);
			refused++;
			said = said || strstr(sg_error_last()->msg, "ms of work") != NULL;
		}
	}
	printf("admission: signing %.0f us, %d accepted, %d refused of 2000\n", st.service_ns / 1e3, accepted,
	       refused);
	SG_CHECK(accepted > 0 && refused > 0);
	SG_CHECK(said);
	SG_CHECK(accepted < 1000); /* the queue (4096) had room for all */
	/* No deadline: nothing to judge, queued while there is room. */
	req.deadline_ns = 0;
	SG_CHECK_OK(sg_pool_submit(pool, &req, count, &t));
	accepted++;
	SG_WAIT_FOR(60000, atomic_load(&t.calls) == accepted);
	sg_pool_stats_get(pool, &st);
	SG_CHECK(st.rejected_deadline == (uint64_t)refused && st.rejected == (uint64_t)refused);
	/* Every admitted request completes once, signed or, the wait being an
	 * estimate (a loaded machine signs slower than it learned), expired
	 * in the queue; the head of the queue is always in time. */
	SG_CHECK(atomic_load(&t.other) == 0);
	SG_CHECK(atomic_load(&t.ok) + atomic_load(&t.timeout) == accepted);
	SG_CHECK(atomic_load(&t.ok) > 0);
	free(csr);
	sg_appliance_free(app);
	app = NULL;
	open_app(4, 0, true);
}

/* Closes every PKCS#11 session of the process's token from outside the
 * signer (the module is a per-process singleton, so dlopen gives the same
 * instance): the signers must recover and no request may fail. */
typedef enum fault { CLOSE_ALL, LOGOUT } fault;

static void inject(fault what)
{
	const char *module = getenv("SIGNET_SOFTHSM_MODULE");
	void *lib = dlopen(module ? module : "/usr/lib/softhsm/libsofthsm2.so", RTLD_NOW | RTLD_NOLOAD);
	SG_CHECK(lib != NULL);
	if (!lib)
		return;
	CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
	CK_FUNCTION_LIST_PTR f;
	get(&f);
	CK_SLOT_ID slots[16];
	CK_ULONG n = 16;
	if (f->C_GetSlotList(CK_TRUE, slots, &n) == CKR_OK)
		for (CK_ULONG i = 0; i < n; i++) {
			CK_SESSION_HANDLE s;
			if (what == CLOSE_ALL) {
				f->C_CloseAllSessions(slots[i]);
			} else if (f->C_OpenSession(slots[i], CKF_SERIAL_SESSION, NULL, NULL, &s) == CKR_OK) {
				/* Login state is per application: this logs out every
				 * session of the signer too. */
				f->C_Logout(s);
				f->C_CloseSession(s);
			}
		}
	dlclose(lib);
}

/* Clients issue in rounds; between rounds, with every client parked at the
 * barrier and so no signature in flight, the token's sessions are closed
 * from outside. (SoftHSM2 2.6.1 itself crashes when a session is closed
 * while another thread is inside C_Sign on it, softhsm/SoftHSMv2#688, so
 * injecting mid-signature would test SoftHSM, not signet.) The signers see
 * dead sessions on the next request and must recover without failing one. */
#define CLIENTS 4
#define ROUNDS 5
#define PER_ROUND 8

typedef struct load {
	const char *csr;
	size_t len;
	pthread_barrier_t round;
	atomic_int ok, failed;
} load;

static void *client(void *arg)
{
	load *l = arg;
	for (int r = 0; r < ROUNDS; r++) {
		pthread_barrier_wait(&l->round); /* faults injected before this */
		for (int i = 0; i < PER_ROUND; i++) {
			sg_issue_result res;
			sg_issue_request req = {.csr = (const uint8_t *)l->csr, .csr_len = l->len,
						.profile = SG_PROFILE_ISTIO,
						.deadline_ns = sg_now_ns() + 20ull * 1000000000u};
			int rc = sg_pool_issue(sg_appliance_pool(app), &req, &res);
			if (rc == SG_OK) {
				atomic_fetch_add(&l->ok, 1);
				sg_issue_result_clear(&res);
			} else {
				fprintf(stderr, "issue failed: %s\n", sg_error_last()->msg);
				atomic_fetch_add(&l->failed, 1);
			}
		}
		pthread_barrier_wait(&l->round); /* round done */
	}
	return NULL;
}

static void t_concurrent_with_faults(void)
{
	size_t len;
	csr_opts o = {"RSA", "2048", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	load l = {.csr = make_csr(&o, &len)};
	l.len = len;
	pthread_barrier_init(&l.round, NULL, CLIENTS + 1);
	pthread_t th[CLIENTS];
	for (int i = 0; i < CLIENTS; i++)
		pthread_create(&th[i], NULL, client, &l);
	for (int r = 0; r < ROUNDS; r++) {
		if (r > 0)
			inject(r % 2 ? CLOSE_ALL : LOGOUT);
		pthread_barrier_wait(&l.round); /* start the round */
		pthread_barrier_wait(&l.round); /* wait for it to end */
	}
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&l.round);
	SG_CHECK(atomic_load(&l.ok) == CLIENTS * ROUNDS * PER_ROUND);
	SG_CHECK(atomic_load(&l.failed) == 0);
	sg_hsm_stats hs;
	sg_hsm_stats_get(sg_appliance_hsm(app), &hs);
	SG_CHECK(hs.recoveries > 0);
	SG_CHECK(hs.state == SG_HSM_OK);
	free((char *)l.csr);
}

/* A token logged out under the signer: the next signature logs in again. */
static void t_logged_out(void)
{
	size_t len;
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	char *csr = make_csr(&o, &len);
	sg_hsm_stats before, after;
	sg_hsm_stats_get(sg_appliance_hsm(app), &before);
	for (int i = 0; i < 3; i++) {
		inject(LOGOUT);
		sg_issue_result res;
		uint64_t t0 = sg_now_ns();
		SG_CHECK_OK(issue(SG_PROFILE_ISTIO, csr, len, NULL, 0, &res));
		SG_CHECK(sg_now_ns() - t0 < 10ull * 1000000000u);
		sg_issue_result_clear(&res);
	}
	sg_hsm_stats_get(sg_appliance_hsm(app), &after);
	SG_CHECK(after.recoveries > before.recoveries);
	SG_CHECK(after.state == SG_HSM_OK);
	free(csr);
}

/* A CA rotation moves a running pool to the new key (sg_appliance_reload,
 * sg_pool_set_signer): every request made meanwhile succeeds; leaves after
 * activate are signed by the new key and, through the cross-signed
 * certificate in their chain, verify against the old root; files that do
 * not match the key are refused and signing goes on as before. */
typedef struct spin {
	const char *csr;
	size_t len;
	atomic_bool stop;
	atomic_int ok, failed;
} spin;

static void *spinner(void *arg)
{
	spin *sp = arg;
	while (!atomic_load(&sp->stop)) {
		sg_issue_result res;
		if (issue(SG_PROFILE_ISTIO, sp->csr, sp->len, NULL, 0, &res) == SG_OK) {
			atomic_fetch_add(&sp->ok, 1);
			sg_issue_result_clear(&res);
		} else {
			fprintf(stderr, "issue failed: %s\n", sg_error_last()->msg);
			atomic_fetch_add(&sp->failed, 1);
		}
	}
	return NULL;
}

/* Runs a rotate step on the fixture's CA and reloads the appliance from
 * the rewritten config; whether the signer moved. */
static bool rotate_step(const char *step)
{
	char cmd[1400];
	snprintf(cmd, sizeof(cmd),
	         "'%s' rotate %s --config '%s' --workload-lifetime 1s --skew 0s --log-level warn "
	         ">/dev/null",
	         SIGNETCTL, step, fx.conf);
	SG_CHECK(system(cmd) == 0);
	fixture_args next = {0};
	char *argv[] = {"--config", fx.conf, "--log-level", "warn"};
	char *pos[4];
	sg_opt_result r = {.argv = pos};
	SG_CHECK_OK(sg_opt_parse(fixture_opts, sizeof(fixture_opts) / sizeof(fixture_opts[0]), &next, 4, argv, &r));
	bool changed = false;
	SG_CHECK_OK(sg_appliance_reload(app, &next.s, &changed));
	if (changed) {
		/* The same key with files for another: refused, nothing moves. */
		sg_settings bad = next.s;
		bad.ca_cert = fx.root;
		bad.root_cert = fx.root;
		bool moved = true;
		if (strcmp(step, "activate") == 0)
			SG_CHECK(sg_appliance_reload(app, &bad, &moved) < 0 && !moved);
	}
	sg_opt_free(fixture_opts, sizeof(fixture_opts) / sizeof(fixture_opts[0]), &next);
	return changed;
}

static void t_reload_moves_signing(void)
{
	size_t len;
	csr_opts o = {"EC", "P-256", "critical,URI:spiffe://cluster.local/ns/x/sa/y", NULL, false, NULL, false};
	spin sp = {.csr = make_csr(&o, &len)};
	sp.len = len;
	const char *before = sg_ca_subject(sg_appliance_ca(app));
	char was[256];
	snprintf(was, sizeof(was), "%s", before);
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, spinner, &sp);
	SG_CHECK(rotate_step("begin"));    /* the bundle grows */
	SG_CHECK(rotate_step("activate")); /* the key moves */
	atomic_store(&sp.stop, true);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	SG_CHECK(atomic_load(&sp.failed) == 0);
	SG_CHECK(atomic_load(&sp.ok) > 0);
	SG_CHECK(strcmp(was, sg_ca_subject(sg_appliance_ca(app))) != 0);
	sg_issue_result res;
	SG_CHECK_OK(issue(SG_PROFILE_ISTIO, sp.csr, sp.len, NULL, 0, &res));
	SG_CHECK(res.chain_len == 2); /* the cross-signed certificate, the bundle */
	X509 *leaf = verify_chain(&res, fx.root);
	SG_CHECK(leaf != NULL);
	X509_free(leaf);
	sg_issue_result_clear(&res);
	free((char *)sp.csr);
}

static void setup(void)
{
	SG_CHECK_OK(fixture_ca(&fx, "ecdsa-p256"));
	open_app(2, 0, false);
}

static void teardown(void)
{
	sg_appliance_free(app);
	fixture_free(&fx);
}

SG_TEST_MAIN(SG_TEST(setup), SG_TEST(t_istio_profile), SG_TEST(t_istio_identity_is_stamped), SG_TEST(t_istio_strict),
             SG_TEST(t_generic_and_intermediate), SG_TEST(t_valid_at_once), SG_TEST(t_ttl_rules),
             SG_TEST(t_bundle_check), SG_TEST(t_bad_csrs), SG_TEST(t_backpressure_and_drain),
             SG_TEST(t_admission_by_deadline), SG_TEST(t_concurrent_with_faults), SG_TEST(t_logged_out),
             SG_TEST(t_reload_moves_signing), SG_TEST(teardown))
