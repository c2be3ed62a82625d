/*
 * sg_kubesign: the issuance core of the Kubernetes-facing signers
 * (contract: sg_kubesign.h).
 *
 * Design notes. The CSR is parsed here once before it goes to the pool,
 * only to compare what it asks for with what the request says (cert-manager
 * refuses a CSR whose extensions disagree with spec.isCA and spec.usages);
 * the signer parses and verifies it again on its own thread, so nothing
 * checked here is trusted by the signer. The certificate's content is the
 * signer's generic or intermediate profile, never the CSR's extensions.
 */
#include "sg_kubesign.h"

#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_csr.h"
#include "sg_guard.h"
#include "sg_hsm.h"
#include "sg_issuer.h"
#include "sg_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CAs ---- */

const sg_kubesign_ca *sg_kubesign_ca_find(const sg_kubesign_ca *cas, size_t n, const char *name)
{
	for (size_t i = 0; name && i < n; i++)
		if (cas[i].name && strcmp(cas[i].name, name) == 0)
			return &cas[i];
	return NULL;
}

bool sg_kubesign_ca_usable(const sg_kubesign_ca *ca, int64_t now, char *why, size_t cap)
{
	const sg_ca *c = sg_appliance_ca(ca->app);
	sg_hsm *h = sg_appliance_hsm(ca->app);
	/* The root the CA's own chain ends at, not every root it hands out:
	 * during a rotation's overlap the other root may expire first, and
	 * the CA's certificates still verify (sg_ca.h). Asked first, since
	 * the chain's expiry includes the root's. */
	if (sg_ca_root_not_after(c) <= now) {
		snprintf(why, cap, "the root of CA \"%s\" (%s) has expired", ca->name, sg_ca_root_subject(c));
		return false;
	}
	if (sg_ca_chain_not_after(c) <= now) {
		snprintf(why, cap, "the CA certificate or an intermediate of CA \"%s\" has expired", ca->name);
		return false;
	}
	sg_hsm_stats st;
	sg_hsm_stats_get(h, &st);
	if (st.state == SG_HSM_DOWN) {
		snprintf(why, cap, "the HSM of CA \"%s\" is down (%s)", ca->name,
			 st.last_fault[0] ? st.last_fault : "no token usable");
		return false;
	}
	/* The pool's own sessions would show a dead module only at the next
	 * signature: a session of our own asks the module now. */
	sg_hsm_session *s = NULL;
	if (sg_hsm_session_open(&s, h) != SG_OK) {
		snprintf(why, cap, "the HSM of CA \"%s\" opens no session: %s", ca->name, sg_error_last()->msg);
		return false;
	}
	sg_hsm_session_free(s);
	return true;
}

/* ---- usages ---- */

/* cert-manager's KeyUsage names (pkg/apis/certmanager/v1/types.go; the
 * same strings as certificates.k8s.io's) and the bits they stand for, as
 * cert-manager maps them (pkg/api/util/usages.go): "signing" is
 * digitalSignature, "email protection" and "s/mime" both emailProtection,
 * "any" anyExtendedKeyUsage. Every one of them can be written. */
static const struct {
	const char *name;
	uint32_t ku, eku;
} usage_names[] = {
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

int sg_kubesign_usages(const json_t *usages, bool is_ca, uint32_t dflt_ku, uint32_t dflt_eku, uint32_t *ku,
		       uint32_t *eku)
{
	*ku = 0;
	*eku = 0;
	SG_ENSURE(!usages || json_is_array(usages), SG_EINVAL, "usages is not a list");
	if (!usages || json_array_size(usages) == 0) {
		*ku = dflt_ku;
		*eku = dflt_eku;
	}
	size_t i;
	const json_t *v;
	json_array_foreach(usages, i, v) {
		const char *name = json_string_value(v);
		SG_ENSURE(name, SG_EINVAL, "usages[%zu] is not a string", i);
		size_t k = 0, n = sizeof(usage_names) / sizeof(usage_names[0]);
		while (k < n && strcmp(usage_names[k].name, name) != 0)
			k++;
		/* Cut a long name at 40 bytes, but never inside a UTF-8
		 * character: the message goes into status conditions. */
		size_t cut = strlen(name);
		if (cut > 40) {
			cut = 40;
			while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80)
				cut--;
		}
		char shown[48];
		snprintf(shown, sizeof(shown), "%.*s%s", (int)cut, name, strlen(name) > 40 ? "..." : "");
		SG_ENSURE(k < n, SG_EINVAL, "unknown usage \"%s\"", shown);
		*ku |= usage_names[k].ku;
		*eku |= usage_names[k].eku;
	}
	if (is_ca)
		*ku |= SG_KU_KEY_CERT_SIGN;
	return SG_OK;
}

/* ---- issuance ---- */

static int check_csr(const sg_kubesign_request *r, sg_csr *csr)
{
	if (!r->csr_must_match)
		return SG_OK;
	SG_ENSURE(!csr->has_basic_constraints || csr->is_ca == r->is_ca, SG_EINVAL,
		  "the CSR's basicConstraints say CA:%s but the request's isCA is %s", csr->is_ca ? "TRUE" : "FALSE",
		  r->is_ca ? "true" : "false");
	SG_ENSURE(!csr->has_key_usage || csr->key_usage == r->key_usage, SG_EINVAL,
		  "the CSR's keyUsage (0x%x) differs from the request's usages (0x%x)", csr->key_usage, r->key_usage);
	SG_ENSURE(!csr->has_ext_key_usage || csr->ext_key_usage == r->ext_key_usage, SG_EINVAL,
		  "the CSR's extKeyUsage differs from the request's usages");
	return SG_OK;
}

int sg_kubesign_issue(const sg_kubesign_ca *ca, const sg_kubesign_request *r, sg_kubesign_result *out)
{
	memset(out, 0, sizeof(*out));
	SG_ENSURE(r->csr_pem && r->csr_len, SG_EINVAL, "the request carries no CSR");
	SG_ENSURE(r->duration >= SG_KUBESIGN_MIN_DURATION, SG_EINVAL, "duration %lld s is below the minimum of %lld s",
		  (long long)r->duration, SG_KUBESIGN_MIN_DURATION);
	uint8_t *der = malloc(SG_CSR_MAX_DER);
	SG_ENSURE(der, SG_EINTERNAL, "out of memory");
	size_t der_len = 0;
	sg_csr csr;
	int rc = sg_csr_decode((const uint8_t *)r->csr_pem, r->csr_len, der, SG_CSR_MAX_DER, &der_len);
	if (rc == SG_OK)
		rc = sg_csr_parse(&csr, der, der_len);
	if (rc == SG_OK)
		rc = check_csr(r, &csr);
	int path_len = rc == SG_OK ? csr.path_len : -1;
	free(der);
	SG_TRY(rc);

	sg_issue_request req = {
	    .csr = (const uint8_t *)r->csr_pem,
	    .csr_len = r->csr_len,
	    .profile = r->is_ca ? SG_PROFILE_INTERMEDIATE : SG_PROFILE_GENERIC,
	    .ttl = r->duration,
	    .key_usage = r->key_usage,
	    .ext_key_usage = r->ext_key_usage,
	    .exact_usages = true, /* both APIs name usages one by one: issued as asked */
	    .path_len = path_len,
	    .deadline_ns = r->deadline_ns,
	};
	sg_issue_result res;
	SG_TRY(sg_pool_issue(sg_appliance_pool(ca->app), &req, &res));
	/* chain: [CA cert unless a root, intermediates, root bundle] */
	size_t n = res.chain_len, total = res.leaf_pem_len + 1;
	for (size_t i = 0; i + 1 < n; i++)
		total += res.chain_lens[i];
	out->chain = malloc(total);
	out->ca = n ? strndup(res.chain[n - 1], res.chain_lens[n - 1]) : NULL;
	if (!out->chain || !out->ca) {
		sg_issue_result_clear(&res);
		sg_kubesign_result_clear(out);
		SG_BAIL(SG_EINTERNAL, n ? "out of memory" : "the CA has no root bundle");
	}
	size_t off = 0;
	memcpy(out->chain, res.leaf_pem, res.leaf_pem_len);
	off += res.leaf_pem_len;
	for (size_t i = 0; i + 1 < n; i++) {
		memcpy(out->chain + off, res.chain[i], res.chain_lens[i]);
		off += res.chain_lens[i];
	}
	out->chain[off] = 0;
	memcpy(out->serial, res.serial_hex, sizeof(out->serial));
	out->serial[sizeof(out->serial) - 1] = 0;
	out->not_before = res.not_before;
	out->not_after = res.not_after;
	sg_issue_result_clear(&res);
	return SG_OK;
}

void sg_kubesign_result_clear(sg_kubesign_result *r)
{
	free(r->chain);
	free(r->ca);
	memset(r, 0, sizeof(*r));
}

bool sg_kubesign_permanent(int rc)
{
	/* SG_ELINT is a bug of ours, not the requester's; but signing the same
	 * request again would break the same rule, so it is not retried. */
	return rc == SG_EINVAL || rc == SG_EAUTH || rc == SG_EDENIED || rc == SG_ELINT;
}

/* ---- []byte fields ---- */

int sg_kubesign_bytes_field(const json_t *obj, const char *field, size_t max, char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	const json_t *v = json_object_get(obj, field);
	SG_ENSURE(v, SG_EINVAL, "%s is missing", field);
	const char *s = json_string_value(v);
	SG_ENSURE(s, SG_EINVAL, "%s is not a string", field);
	size_t n = json_string_length(v);
	SG_ENSURE(n > 0, SG_EINVAL, "%s is empty", field);
	return sg_b64_decode_new(SG_B64_STD, field, s, n, max, out, len);
}

int sg_kubesign_base64(const char *data, size_t len, char **out)
{
	size_t n = sg_b64_encoded_len(SG_B64_STD, len) + 1;
	*out = malloc(n);
	SG_ENSURE(*out, SG_EINTERNAL, "out of memory");
	int rc = sg_b64_encode(SG_B64_STD, (const uint8_t *)data, len, *out, n);
	if (rc != SG_OK) {
		free(*out);
		*out = NULL;
	}
	return rc;
}
