/*
 * One signer thread's issuance pipeline and the three profiles.
 *
 * Cost model (see perf/README.md): on OpenSSL 3.0 the expensive parts of the
 * textbook pipeline are SPKI decoding (~100 us) and X509_set_pubkey (~160
 * us), both far above an ECDSA signature. This pipeline has neither: the CSR
 * is walked with our DER reader, the key is verified straight from its parsed
 * parts, and the certificate is written by our encoder. What remains is the
 * crypto itself (CSR verify, HSM sign) plus a few microseconds of encoding.
 *
 * All scratch space lives in the sg_issuer, so an issue allocates only the
 * leaf's PEM string that it returns.
 */
#include "sg_issuer.h"
#include "sg_cert.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_guard.h"
#include "sg_hex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIG_MAX 1024 /* RSA-8192 would be 1024 bytes; our CA keys are smaller */

struct sg_issuer {
	const sg_ca *ca;
	sg_hsm_session *session;
	sg_crypto *crypto;
	sg_issuer_options opts;
	uint8_t csr_der[SG_CSR_MAX_DER];
	uint8_t tbs[SG_CERT_MAX_DER];
	uint8_t cert[SG_CERT_MAX_DER + SIG_MAX + 64];
	sg_csr csr;
};

static const char *const profile_names[] = {"istio", "generic", "intermediate"};

int sg_profile_parse(const char *s, sg_profile *out)
{
	for (size_t i = 0; i < sizeof(profile_names) / sizeof(profile_names[0]); i++)
		if (strcmp(s, profile_names[i]) == 0) {
			*out = (sg_profile)i;
			return SG_OK;
		}
	SG_BAIL(SG_EINVAL, "unknown profile \"%s\" (istio, generic or intermediate)", s);
}

const char *sg_profile_name(sg_profile p)
{
	return (unsigned)p < 3 ? profile_names[p] : "unknown";
}

int sg_issuer_new(sg_issuer **out, const sg_ca *ca, sg_hsm *hsm, const sg_issuer_options *opts)
{
	sg_issuer *is = calloc(1, sizeof(*is));
	SG_ENSURE(is, SG_EINTERNAL, "out of memory");
	is->ca = ca;
	if (opts)
		is->opts = *opts;
	int rc = sg_crypto_new(&is->crypto);
	if (rc == SG_OK)
		rc = sg_hsm_session_open(&is->session, hsm);
	if (rc < 0) {
		sg_issuer_free(is);
		return rc;
	}
	*out = is;
	return SG_OK;
}

void sg_issuer_free(sg_issuer *is)
{
	if (!is)
		return;
	sg_hsm_session_free(is->session);
	sg_crypto_free(is->crypto);
	free(is);
}

sg_crypto *sg_issuer_crypto(sg_issuer *is)
{
	return is->crypto;
}

int sg_issuer_sign_raw(sg_issuer *is, sg_sigalg alg, const uint8_t *tbs, size_t tbs_len, uint8_t *sig,
		       size_t *sig_len, uint64_t deadline_ns)
{
	/* RSA signs a DigestInfo (prefix || hash); ECDSA the bare hash. */
	uint8_t in[32 + SG_HASH_MAX];
	size_t in_len = 0;
	sg_hash h = sg_sigalg_hash(alg);
	bool ec = sg_sigalg_is_ec(alg);
	if (!ec) {
		const uint8_t *prefix;
		size_t plen;
		sg_digestinfo_prefix(h, &prefix, &plen);
		memcpy(in, prefix, plen);
		in_len = plen;
	}
	SG_TRY(sg_crypto_digest(is->crypto, h, tbs, tbs_len, in + in_len));
	in_len += sg_hash_len(h);

	uint8_t raw[SIG_MAX];
	size_t raw_len = sizeof(raw);
	SG_TRY(sg_hsm_sign(is->session, ec ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, in, in_len, raw, &raw_len, deadline_ns));
	if (!ec) {
		SG_ENSURE(raw_len <= *sig_len, SG_EINTERNAL, "signature buffer too small");
		memcpy(sig, raw, raw_len);
		*sig_len = raw_len;
		return SG_OK;
	}
	sg_der_writer w;
	sg_der_writer_init(&w, sig, *sig_len);
	SG_TRY(sg_ecdsa_raw_to_der(&w, raw, raw_len));
	SG_TRY(sg_der_writer_status(&w));
	*sig_len = w.len;
	return SG_OK;
}

/* An identity is a URI without spaces or control bytes; the istio profile
 * further requires SPIFFE ("spiffe://trust-domain/path"). */
static int check_identity(const char *id, size_t len, bool spiffe)
{
	SG_ENSURE(len > 0 && len <= SG_IDENTITY_MAX, SG_EINVAL, "identity must be 1..%d bytes", SG_IDENTITY_MAX);
	for (size_t i = 0; i < len; i++)
		SG_ENSURE(id[i] > 0x20 && id[i] < 0x7f, SG_EINVAL, "identity contains a space or control byte");
	if (spiffe) {
		SG_ENSURE(len > 9 && memcmp(id, "spiffe://", 9) == 0, SG_EINVAL,
			  "identity \"%.*s\" is not a SPIFFE ID (spiffe://trust-domain/...)", (int)(len > 80 ? 80 : len),
			  id);
		SG_ENSURE(id[9] != '/', SG_EINVAL, "SPIFFE ID has an empty trust domain");
	}
	return SG_OK;
}

/* istio-csr's CSR policy: the request must ask for exactly the identity the
 * caller proved, and nothing else. */
static int check_strict(const sg_csr *csr, const char *identity)
{
	for (size_t i = 0; i < csr->subject_len; i++)
		SG_ENSURE(csr->subject[i].attr != SG_NAME_CN, SG_EDENIED, "CSR subject must not carry a CommonName");
	size_t uris = 0;
	for (size_t i = 0; i < csr->san_count; i++) {
		const sg_san *s = &csr->sans[i];
		SG_ENSURE(s->type == SG_SAN_URI, SG_EDENIED, "CSR may carry only URI SANs (found a %s)",
			  s->type == SG_SAN_DNS ? "DNS name" : s->type == SG_SAN_IP ? "IP address" : "email address");
		SG_ENSURE(sg_slice_eq(s->value, identity, strlen(identity)), SG_EDENIED,
			  "[%.*s] != [%s]: failed to match URIs with identities", (int)(s->value.len > 256 ? 256 : s->value.len),
			  (const char *)s->value.p, identity);
		uris++;
	}
	SG_ENSURE(uris == 1, SG_EDENIED, "CSR must carry exactly one URI SAN, the identity %s (has %zu)", identity, uris);
	SG_ENSURE(!csr->has_basic_constraints && !csr->is_ca, SG_EDENIED, "forbidden extension: basicConstraints");
	SG_ENSURE(csr->other_extensions == 0, SG_EDENIED, "forbidden extension in CSR (%u not SAN, keyUsage or extKeyUsage)",
		  csr->other_extensions);
	SG_ENSURE(!(csr->key_usage & ~(uint32_t)(SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT)), SG_EDENIED,
		  "forbidden key usage in CSR (only digitalSignature and keyEncipherment)");
	SG_ENSURE(!(csr->ext_key_usage & ~(uint32_t)(SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH)), SG_EDENIED,
		  "forbidden extended key usage in CSR (only serverAuth and clientAuth)");
	return SG_OK;
}

/* What each profile makes of the request; everything lands in spec. */
static int apply_istio(const sg_csr *csr, const sg_issue_request *req, sg_cert_spec *spec, sg_san *san)
{
	if (req->identity) {
		san->value = (sg_slice){(const uint8_t *)req->identity, strlen(req->identity)};
	} else {
		size_t uris = 0;
		for (size_t i = 0; i < csr->san_count; i++)
			if (csr->sans[i].type == SG_SAN_URI) {
				*san = csr->sans[i];
				uris++;
			}
		SG_ENSURE(uris == 1, SG_EINVAL, "CSR must carry exactly one URI SAN when no identity is given (has %zu)",
			  uris);
	}
	SG_TRY(check_identity((const char *)san->value.p, san->value.len, true));
	if (req->strict_csr) {
		SG_ENSURE(req->identity, SG_EINTERNAL, "strict CSR policy needs the caller's identity");
		SG_TRY(check_strict(csr, req->identity));
	}
	san->type = SG_SAN_URI;
	spec->subject_len = 0;
	spec->sans = san;
	spec->san_count = 1;
	spec->key_usage = SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT;
	spec->ext_key_usage = SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH;
	spec->is_ca = false;
	return SG_OK;
}

/* The CSR's subject without its empty attributes, into kept. An empty
 * value says nothing and has no place in a certificate (X.520's
 * DirectoryString is SIZE (1..MAX), which the linter enforces), yet
 * istio-agent's Go code puts one in every CSR ("O=", its empty
 * Organization), and istiod's RA forwards those CSRs unchanged to a
 * Kubernetes signer: cert-manager issues them with the empty O copied;
 * the generic profile leaves it out. */
static size_t subject_without_empty(const sg_csr *csr, sg_rdn kept[SG_CSR_MAX_RDNS])
{
	size_t n = 0;
	for (size_t i = 0; i < csr->subject_len; i++)
		if (csr->subject[i].value.len > 0)
			kept[n++] = csr->subject[i];
	return n;
}

static int apply_generic(const sg_csr *csr, const sg_issue_request *req, sg_cert_spec *spec,
                         sg_rdn kept[SG_CSR_MAX_RDNS])
{
	SG_ENSURE(!csr->is_ca, SG_EDENIED, "CSR asks for a CA certificate; the generic profile issues leaves only");
	SG_ENSURE(csr->san_count > 0, SG_EINVAL, "CSR has no subjectAltName; names belong in SANs");
	SG_ENSURE(!(req->key_usage & (SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN)), SG_EDENIED,
		  "keyCertSign and cRLSign are for CA certificates only");
	SG_ENSURE(!(req->ext_key_usage & SG_EKU_OTHER), SG_EINVAL, "unsupported extended key usage");
	spec->subject_len = subject_without_empty(csr, kept);
	spec->subject = kept;
	spec->sans = csr->sans;
	spec->san_count = csr->san_count;
	if (req->exact_usages) {
		spec->key_usage = req->key_usage;
		spec->ext_key_usage = req->ext_key_usage;
		spec->is_ca = false;
		return SG_OK;
	}
	/* keyEncipherment and dataEncipherment mean nothing for an EC key, nor
	 * keyAgreement for an RSA key: asked for, they are left out, not
	 * refused (exact_usages keeps them). */
	bool ec = csr->key.kind == SG_PUBKEY_EC;
	uint32_t ku = req->key_usage ? req->key_usage
				     : SG_KU_DIGITAL_SIGNATURE | (ec ? 0 : SG_KU_KEY_ENCIPHERMENT);
	ku &= ec ? ~(uint32_t)(SG_KU_KEY_ENCIPHERMENT | SG_KU_DATA_ENCIPHERMENT) : ~(uint32_t)SG_KU_KEY_AGREEMENT;
	SG_ENSURE(ku, SG_EINVAL, "no key usage left that applies to this key type");
	spec->key_usage = ku;
	spec->ext_key_usage = req->ext_key_usage ? req->ext_key_usage : SG_EKU_SERVER_AUTH | SG_EKU_CLIENT_AUTH;
	spec->is_ca = false;
	return SG_OK;
}

static int apply_intermediate(const sg_csr *csr, const sg_issue_request *req, sg_cert_spec *spec)
{
	SG_ENSURE(csr->subject_len > 0, SG_EINVAL, "an intermediate CA needs a subject");
	SG_ENSURE(req->path_len >= -1 && req->path_len <= 16, SG_EINVAL, "path length %d out of range (-1..16)",
		  req->path_len);
	spec->subject = csr->subject;
	spec->subject_len = csr->subject_len;
	spec->san_count = 0;
	spec->key_usage = SG_KU_KEY_CERT_SIGN | SG_KU_CRL_SIGN | SG_KU_DIGITAL_SIGNATURE;
	spec->ext_key_usage = 0;
	spec->is_ca = true;
	spec->path_len = req->path_len;
	return SG_OK;
}

static int validity(const sg_issue_request *req, const sg_cert_issuer *iss, sg_cert_spec *spec)
{
	static const int64_t defaults[] = {SG_TTL_DEFAULT_ISTIO, SG_TTL_DEFAULT_GENERIC, SG_TTL_DEFAULT_INTERMEDIATE};
	SG_ENSURE(req->ttl >= 0 && req->ttl <= 100LL * 365 * 86400, SG_EINVAL, "TTL %lld s is out of range",
		  (long long)req->ttl);
	int64_t ttl = req->ttl ? req->ttl : defaults[req->profile];
	int64_t now = sg_cert_seconds(); /* not sg_wall_seconds: sg_clock.h says why */
	SG_ENSURE(now < iss->not_after, SG_EINTERNAL, "the CA certificate has expired");
	spec->not_before = now - (req->profile == SG_PROFILE_ISTIO ? SG_ISTIO_BACKDATE : 0);
	if (spec->not_before < iss->not_before)
		spec->not_before = iss->not_before;
	spec->not_after = now + ttl < iss->not_after ? now + ttl : iss->not_after;
	return SG_OK;
}

/* The profile's verdict on a CSR, as sg_issuer_issue reaches it; spec
 * may point into stamped and kept, which must live as long as it. */
static int apply_profile(const sg_csr *csr, const sg_issue_request *req, sg_cert_spec *spec, sg_san *stamped,
                         sg_rdn kept[SG_CSR_MAX_RDNS])
{
	switch (req->profile) {
	case SG_PROFILE_ISTIO:
		return apply_istio(csr, req, spec, stamped);
	case SG_PROFILE_GENERIC:
		return apply_generic(csr, req, spec, kept);
	case SG_PROFILE_INTERMEDIATE:
		return apply_intermediate(csr, req, spec);
	}
	SG_BAIL(SG_EINVAL, "unknown profile");
}

int sg_issue_check(const sg_issue_request *req, sg_crypto *c)
{
	SG_ENSURE((unsigned)req->profile <= SG_PROFILE_INTERMEDIATE, SG_EINVAL, "unknown profile");
	uint8_t *der = malloc(SG_CSR_MAX_DER);
	SG_ENSURE(der, SG_EINTERNAL, "out of memory");
	size_t der_len = 0;
	sg_csr csr;
	int rc = sg_csr_decode(req->csr, req->csr_len, der, SG_CSR_MAX_DER, &der_len);
	if (rc == SG_OK)
		rc = sg_csr_parse(&csr, der, der_len);
	if (rc == SG_OK)
		rc = sg_csr_verify(&csr, c);
	sg_cert_spec spec = {.key = &csr.key, .path_len = -1};
	sg_san stamped;
	sg_rdn kept[SG_CSR_MAX_RDNS];
	if (rc == SG_OK)
		rc = apply_profile(&csr, req, &spec, &stamped, kept);
	free(der);
	return rc;
}

int sg_issuer_issue(sg_issuer *is, const sg_issue_request *req, sg_issue_result *res)
{
	uint64_t t0 = sg_now_ns();
	memset(res, 0, sizeof(*res));
	SG_ENSURE(is->ca, SG_EINTERNAL, "issuer has no CA");
	SG_ENSURE((unsigned)req->profile <= SG_PROFILE_INTERMEDIATE, SG_EINVAL, "unknown profile");
	SG_ENSURE(req->deadline_ns == 0 || t0 < req->deadline_ns, SG_ETIMEOUT, "deadline passed before issuing");

	size_t der_len;
	SG_TRY(sg_csr_decode(req->csr, req->csr_len, is->csr_der, sizeof(is->csr_der), &der_len));
	SG_TRY(sg_csr_parse(&is->csr, is->csr_der, der_len));
	SG_TRY(sg_csr_verify(&is->csr, is->crypto));

	const sg_cert_issuer *iss = sg_ca_issuer(is->ca);
	sg_cert_spec spec = {.key = &is->csr.key, .path_len = -1};
	sg_san stamped;
	sg_rdn kept[SG_CSR_MAX_RDNS];
	SG_TRY(apply_profile(&is->csr, req, &spec, &stamped, kept));
	SG_TRY(validity(req, iss, &spec));
	SG_TRY(sg_cert_serial(&spec));

	sg_der_writer tbs;
	sg_der_writer_init(&tbs, is->tbs, sizeof(is->tbs));
	SG_TRY(sg_cert_encode_tbs(&tbs, &spec, iss, is->crypto));
	static const sg_lint_profile lint_of[] = {
		[SG_PROFILE_ISTIO] = SG_LINT_ISTIO,
		[SG_PROFILE_GENERIC] = SG_LINT_LEAF,
		[SG_PROFILE_INTERMEDIATE] = SG_LINT_CA,
	};
	sg_lint_profile lp = lint_of[req->profile];
	if (req->profile == SG_PROFILE_GENERIC && req->exact_usages)
		lp = SG_LINT_ASKED;
	SG_TRY(sg_cert_lint_tbs(tbs.buf, tbs.len, iss, lp));

	/* The last moment a signature can still be saved. */
	SG_ENSURE(!req->cancelled || !req->cancelled(req->cancel_arg), SG_ETIMEOUT,
		  "the request was cancelled before it was signed");
	uint8_t sig[SIG_MAX + 16];
	size_t sig_len = sizeof(sig);
	SG_TRY(sg_issuer_sign_raw(is, iss->sigalg, tbs.buf, tbs.len, sig, &sig_len, req->deadline_ns));
	if (is->opts.verify_issued) {
		/* A signature that does not verify is an HSM fault (a bit flipped
		 * on the way, a wrong key); it is never returned. One fault is
		 * often transient, so the HSM is asked once more within the
		 * deadline; a second bad one fails the request (SG_EHSM: the
		 * client retries, /readyz reflects the token's health). */
		int rc = sg_crypto_verify(is->crypto, sg_ca_pubkey(is->ca), iss->sigalg, tbs.buf, tbs.len, sig, sig_len);
		if (rc != SG_OK) {
			sig_len = sizeof(sig);
			SG_TRY(sg_issuer_sign_raw(is, iss->sigalg, tbs.buf, tbs.len, sig, &sig_len, req->deadline_ns));
			rc = sg_crypto_verify(is->crypto, sg_ca_pubkey(is->ca), iss->sigalg, tbs.buf, tbs.len, sig,
			                      sig_len);
		}
		SG_ENSURE(rc == SG_OK, SG_EHSM, "the HSM returned signatures that do not verify, twice; refusing them");
	}
	sg_der_writer cert;
	sg_der_writer_init(&cert, is->cert, sizeof(is->cert));
	SG_TRY(sg_cert_encode(&cert, tbs.buf, tbs.len, iss->sigalg, sig, sig_len));
	res->latency_ns = sg_now_ns() - t0;

	SG_TRY(sg_pem_encode("CERTIFICATE", cert.buf, cert.len, &res->leaf_pem, &res->leaf_pem_len));
	sg_ca_chain(is->ca, &res->chain, &res->chain_lens, &res->chain_len);
	sg_hex_encode(res->serial_hex, spec.serial, spec.serial_len);
	res->not_before = spec.not_before;
	res->not_after = spec.not_after;
	res->ca_key = sg_ca_key_type(is->ca);
	for (size_t i = 0; i < spec.san_count; i++)
		if (spec.sans[i].type == SG_SAN_URI) {
			size_t n = spec.sans[i].value.len;
			memcpy(res->identity, spec.sans[i].value.p, n);
			res->identity[n] = 0;
			break;
		}
	return SG_OK;
}

void sg_issue_result_clear(sg_issue_result *res)
{
	free(res->leaf_pem);
	memset(res, 0, sizeof(*res));
}

int sg_issue_result_join(const sg_issue_result *res, char **out)
{
	size_t total = res->leaf_pem_len;
	for (size_t i = 0; i < res->chain_len; i++)
		total += res->chain_lens[i];
	char *s = malloc(total + 1);
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	memcpy(s, res->leaf_pem, res->leaf_pem_len);
	size_t off = res->leaf_pem_len;
	for (size_t i = 0; i < res->chain_len; i++) {
		memcpy(s + off, res->chain[i], res->chain_lens[i]);
		off += res->chain_lens[i];
	}
	s[off] = 0;
	*out = s;
	return SG_OK;
}

int sg_issuer_sign_tbs(sg_issuer *is, sg_sigalg alg, const uint8_t *tbs, size_t tbs_len, uint64_t deadline_ns,
		       sg_der_writer *w)
{
	uint8_t sig[1100]; /* an RSA-8192 signature in its BIT STRING, with room */
	size_t sig_len = sizeof(sig);
	SG_TRY(sg_issuer_sign_raw(is, alg, tbs, tbs_len, sig, &sig_len, deadline_ns));
	return sg_cert_encode(w, tbs, tbs_len, alg, sig, sig_len);
}
