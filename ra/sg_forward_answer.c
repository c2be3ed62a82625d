/*
 * sg_forward_answer: the checks of what a CertificateRequest says about
 * its request, made on the informer's thread with no lock held. A
 * terminal condition in cert-manager's order (Denied, InvalidRequest,
 * Ready False) is a refusal; status.certificate is an answer, checked as
 * cert-manager and istio-csr check it: base64 of PEM that parses as
 * certificates, the leaf's key the CSR's, the chain verifying against
 * the mesh roots now (any of them, an intermediate among them trusted
 * as it stands; held here, by reference count); what is handed on
 * is leaf and intermediates re-written as PEM, without a self-signed
 * certificate after the leaf. examine, in sg_forward.c, acts on what
 * these say and ends the request. Apart because these checks are the
 * forwarder's trust boundary, and read best in one sitting; they call
 * nothing of the forwarder.
 */
#include "sg_forward_impl.h"

#include "sg_base64.h"
#include "sg_clock.h"
#include "sg_csr.h"
#include "sg_guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the answer ---- */

static const char *str_of(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static struct roots *roots_get(sg_forward *f)
{
	pthread_mutex_lock(&f->roots_mu);
	struct roots *r = f->roots;
	if (r)
		atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
	pthread_mutex_unlock(&f->roots_mu);
	return r;
}

void forward_roots_put(struct roots *r)
{
	if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
		sg_x509_bundle_free(r->b);
		free(r);
	}
}

static void bundle_freep(sg_x509_bundle **b)
{
	sg_x509_bundle_free(*b);
}

/* The certificates of an answer, without self-signed ones after the leaf,
 * as one PEM text. */
static int chain_text(const sg_x509_bundle *b, char **out, size_t *out_len)
{
	*out = NULL;
	char *text = NULL;
	size_t len = 0;
	int rc = SG_OK;
	for (size_t i = 0; rc == SG_OK && i < sg_x509_bundle_count(b); i++) {
		if (i > 0 && sg_x509_self_signed(b, i))
			continue;
		char *pem = NULL;
		size_t n = 0;
		rc = sg_x509_pem(b, i, &pem, &n);
		if (rc != SG_OK)
			break;
		char *grown = realloc(text, len + n + 1);
		if (!grown) {
			free(pem);
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
			break;
		}
		text = grown;
		memcpy(text + len, pem, n + 1);
		len += n;
		free(pem);
	}
	if (rc != SG_OK) {
		free(text);
		return rc;
	}
	*out = text;
	*out_len = len;
	return SG_OK;
}

/* status.certificate checked as cert-manager and istio-csr check it;
 * SG_EPROTO with the reason. On success *chain is the answer (free()). */
int forward_check_answer(sg_forward *f, const struct req *e, const char *b64, size_t n, char **chain, size_t *len)
{
	*chain = NULL;
	size_t cap = n / 4 * 3 + 3;
	SG_ENSURE(n <= sg_b64_encoded_len(SG_B64_STD, SG_X509_PEM_MAX), SG_EPROTO,
	          "status.certificate is %zu characters, more than %u bytes of PEM", n, SG_X509_PEM_MAX);
	char *pem SG_AUTOFREE = malloc(cap + 1);
	SG_ENSURE(pem, SG_EINTERNAL, "out of memory");
	size_t pem_len = 0;
	char why[SG_ERROR_MSG_MAX]; /* a copy: the detail is rewritten from it */
	if (sg_b64_decode(SG_B64_STD, b64, n, (uint8_t *)pem, cap, &pem_len) != SG_OK) {
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(SG_EPROTO, "status.certificate is not base64: %s", why);
	}
	pem[pem_len] = '\0';

	sg_x509_bundle *b SG_CLEANUP(bundle_freep) = NULL;
	if (sg_x509_bundle_parse(&b, pem, pem_len) != SG_OK) {
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(SG_EPROTO, "status.certificate does not parse: %s", why);
	}
	sg_csr csr;
	SG_ENSURE(sg_csr_parse(&csr, e->csr, e->csr_len) == SG_OK, SG_EINTERNAL,
	          "the CSR no longer parses"); /* it parsed in submit: cannot happen */
	SG_ENSURE(sg_x509_key_is(b, 0, &csr.key), SG_EPROTO,
	          "the issuer returned a certificate with a public key that does not match the CSR");
	/* Any root of the bundle will do (a rotation overlaps two), and one
	 * that is an intermediate is trusted as it stands: istio-csr's Go
	 * pool does so, and mesh roots may be a signer's intermediate. */
	struct roots *r = roots_get(f);
	bool chains = r && sg_x509_chains_to_anchors_at(b, r->b, sg_wall_seconds());
	forward_roots_put(r);
	SG_ENSURE(chains, SG_EPROTO, "the issued certificate chain does not verify against the mesh roots");
	return chain_text(b, chain, len);
}

/* The forward_terminal condition of a CertificateRequest, in cert-manager's order
 * (Denied wins over everything, then InvalidRequest, then Ready Failed or
 * Denied): true with *what and *why set, or false. */
bool forward_terminal(const json_t *status, const char **what, const char **why)
{
	const json_t *conds = json_object_get(status, "conditions");
	static const struct {
		const char *type, *status, *reason, *what;
	} rules[] = {
	    {"Denied", "True", NULL, "denied"},
	    {"InvalidRequest", "True", NULL, "invalid"},
	    {"Ready", "False", "Failed", "failed"},
	    {"Ready", "False", "Denied", "denied"},
	};
	for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
		size_t i;
		const json_t *c;
		json_array_foreach(conds, i, c)
		{
			const char *type = str_of(c, "type"), *st = str_of(c, "status"), *reason = str_of(c, "reason");
			if (!type || !st || strcmp(type, rules[r].type) != 0 || strcmp(st, rules[r].status) != 0)
				continue;
			if (rules[r].reason && (!reason || strcmp(reason, rules[r].reason) != 0))
				continue;
			*what = rules[r].what;
			*why = str_of(c, "message");
			if (!*why || !**why)
				*why = reason && *reason ? reason : "no message";
			return true;
		}
	}
	return false;
}
