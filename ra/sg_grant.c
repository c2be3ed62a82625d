/*
 * The grant: cluster, impersonation and TTL rules of istio-csr and
 * istiod (see sg_grant.h). The CSR's own content is checked later, by the
 * signer thread that parses it, so the transport thread does no parsing.
 *
 * Trusted node accounts are parsed once into a small array; a lookup is a
 * linear scan, fine for the handful of node agents a mesh trusts.
 *
 * Node authorization of impersonation is not decided here but by an
 * optional hook (the pod index of sg_workload.h), called last among the
 * impersonation checks: the cheap, local refusals (untrusted caller,
 * foreign trust domain, malformed ID) never reach a cache lookup.
 */
#include "sg_grant.h"
#include "sg_guard.h"
#include "sg_spiffe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODE_ACCOUNTS 64

const char *const sg_grant_mode_names[] = {"istio-csr", "istiod", NULL};

typedef struct node_account {
	char ns[254];
	char sa[254];
} node_account;

struct sg_grant {
	sg_grant_options o;
	char cluster_id[256];
	char trust_domain[256];
	node_account trusted[MAX_NODE_ACCOUNTS];
	size_t ntrusted;
};

static int parse_accounts(sg_grant *p, const char *list)
{
	if (!list)
		return SG_OK;
	const char *s = list;
	while (*s) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		while (len && *s == ' ')
			s++, len--;
		while (len && s[len - 1] == ' ')
			len--;
		if (len) {
			const char *slash = memchr(s, '/', len);
			SG_ENSURE(slash && slash != s && slash != s + len - 1 &&
			              !memchr(slash + 1, '/', len - (size_t)(slash - s) - 1),
			          SG_EINVAL, "trusted node account \"%.*s\" is not namespace/serviceaccount", (int)len,
			          s);
			SG_ENSURE(p->ntrusted < MAX_NODE_ACCOUNTS, SG_EINVAL, "more than %d trusted node accounts",
			          MAX_NODE_ACCOUNTS);
			size_t nl = (size_t)(slash - s), sl = len - nl - 1;
			SG_ENSURE(nl < sizeof(p->trusted[0].ns) && sl < sizeof(p->trusted[0].sa), SG_EINVAL,
			          "trusted node account \"%.*s\" is too long", (int)len, s);
			node_account *a = &p->trusted[p->ntrusted++];
			memcpy(a->ns, s, nl);
			a->ns[nl] = 0;
			memcpy(a->sa, slash + 1, sl);
			a->sa[sl] = 0;
		}
		if (!end)
			break;
		s = end + 1;
	}
	return SG_OK;
}

int sg_grant_new(sg_grant **out, const sg_grant_options *o)
{
	SG_ENSURE(o->max_ttl > 0, SG_EINVAL, "the maximum certificate duration must be positive");
	SG_ENSURE(o->mode == SG_GRANT_ISTIO_CSR || o->mode == SG_GRANT_ISTIOD, SG_EINVAL, "unknown --policy mode");
	sg_grant *p = calloc(1, sizeof(*p));
	SG_ENSURE(p, SG_EINTERNAL, "out of memory");
	p->o = *o;
	snprintf(p->cluster_id, sizeof(p->cluster_id), "%s", o->cluster_id ? o->cluster_id : "Kubernetes");
	/* istio-csr writes trust domains with '@' as '.' in SPIFFE IDs. */
	int rc = sg_trust_domain_normalize(o->trust_domain ? o->trust_domain : "cluster.local", p->trust_domain,
	                                   sizeof(p->trust_domain));
	if (rc == SG_OK)
		rc = parse_accounts(p, o->trusted_node_accounts);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->o.cluster_id = p->cluster_id;
	p->o.trust_domain = p->trust_domain;
	p->o.trusted_node_accounts = NULL;
	*out = p;
	return SG_OK;
}

void sg_grant_free(sg_grant *p)
{
	free(p);
}

sg_grant_mode sg_grant_get_mode(const sg_grant *p)
{
	return p->o.mode;
}

static bool trusted(const sg_grant *p, const sg_caller *c)
{
	for (size_t i = 0; i < p->ntrusted; i++)
		if (strcmp(p->trusted[i].ns, c->ns) == 0 && strcmp(p->trusted[i].sa, c->sa) == 0)
			return true;
	return false;
}

/* spiffe://<this trust domain>/<path>, printable, no spaces. */
static int check_spiffe(const sg_grant *p, const char *id)
{
	size_t len = strlen(id), td = strlen(p->trust_domain);
	SG_ENSURE(len < SG_ID_MAX, SG_EDENIED, "impersonated identity is too long");
	for (size_t i = 0; i < len; i++)
		SG_ENSURE(id[i] > 0x20 && id[i] < 0x7f, SG_EDENIED,
		          "impersonated identity has a space or control byte");
	SG_ENSURE(len > 9 + td + 1 && memcmp(id, "spiffe://", 9) == 0 && memcmp(id + 9, p->trust_domain, td) == 0 &&
	              id[9 + td] == '/',
	          SG_EDENIED, "impersonated identity is not a SPIFFE ID of trust domain %s", p->trust_domain);
	return SG_OK;
}

/* The path of an impersonated identity for node authorization: exactly
 * ns/<ns>/sa/<sa> (istiod's spiffe.ParseIdentity), segments as
 * SPIFFE-ID §2.2 allows them ([A-Za-z0-9._-], not "." or ".."). */
static int copy_segment(const char **s, char *out, size_t cap)
{
	size_t n = 0;
	while ((*s)[n] && (*s)[n] != '/') {
		char c = (*s)[n];
		SG_ENSURE((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		              c == '-' || c == '_',
		          SG_EDENIED, "impersonated identity has a malformed SPIFFE path");
		n++;
	}
	SG_ENSURE(n > 0 && n < cap && !(n == 1 && **s == '.') && !(n == 2 && (*s)[0] == '.' && (*s)[1] == '.'),
	          SG_EDENIED, "impersonated identity has a malformed SPIFFE path");
	memcpy(out, *s, n);
	out[n] = 0;
	*s += n;
	return SG_OK;
}

static int parse_workload_id(const sg_grant *p, const char *id, char *ns, size_t ns_cap, char *sa, size_t sa_cap)
{
	const char *s = id + 9 + strlen(p->trust_domain) + 1; /* check_spiffe passed */
	SG_ENSURE(strncmp(s, "ns/", 3) == 0, SG_EDENIED,
	          "impersonated identity is not spiffe://%s/ns/<namespace>/sa/<serviceaccount>", p->trust_domain);
	s += 3;
	SG_TRY(copy_segment(&s, ns, ns_cap));
	SG_ENSURE(strncmp(s, "/sa/", 4) == 0, SG_EDENIED,
	          "impersonated identity is not spiffe://%s/ns/<namespace>/sa/<serviceaccount>", p->trust_domain);
	s += 4;
	SG_TRY(copy_segment(&s, sa, sa_cap));
	SG_ENSURE(*s == 0, SG_EDENIED, "impersonated identity is not spiffe://%s/ns/<namespace>/sa/<serviceaccount>",
	          p->trust_domain);
	return SG_OK;
}

static int decide_ttl(const sg_grant *p, int64_t requested, int64_t *ttl)
{
	int64_t max = p->o.max_ttl;
	if (p->o.mode == SG_GRANT_ISTIO_CSR) {
		/* istio-csr clamps; it never refuses a TTL. */
		*ttl = requested > 0 && requested < max ? requested : max;
		return SG_OK;
	}
	if (requested <= 0) {
		*ttl = p->o.default_ttl > 0 && p->o.default_ttl < max ? p->o.default_ttl : max;
		return SG_OK;
	}
	SG_ENSURE(requested <= max, SG_EINVAL, "requested TTL %llds is greater than the max allowed TTL %llds",
	          (long long)requested, (long long)max);
	*ttl = requested;
	return SG_OK;
}

int sg_grant_decide(const sg_grant *p, const sg_grant_input *in, sg_grant_decision *out)
{
	memset(out, 0, sizeof(*out));
	const sg_caller *c = in->caller;
	if (in->cluster_id && *in->cluster_id)
		SG_ENSURE(strcmp(in->cluster_id, p->cluster_id) == 0, SG_EAUTH,
		          "client claims to be in cluster \"%.64s\", but we only know about local cluster \"%s\"",
		          in->cluster_id, p->cluster_id);
	const char *id = c->identity;
	if (in->impersonated_identity) {
		SG_ENSURE(p->ntrusted > 0, SG_EDENIED,
		          "request impersonation authentication failure: no trusted node accounts are configured");
		SG_ENSURE(*c->ns && trusted(p, c), SG_EDENIED,
		          "request impersonation authentication failure: %s/%s is not a trusted node account",
		          *c->ns ? c->ns : "-", *c->sa ? c->sa : "-");
		SG_TRY(check_spiffe(p, in->impersonated_identity));
		if (p->o.authorize_impersonation) {
			char ns[254], sa[254];
			SG_TRY(parse_workload_id(p, in->impersonated_identity, ns, sizeof(ns), sa, sizeof(sa)));
			int rc = p->o.authorize_impersonation(p->o.authorize_arg, c, ns, sa);
			if (rc != SG_OK) /* fail closed, also on a positive answer */
				return rc < 0 ? rc : sg_error_set(SG_EINTERNAL, "impersonation hook answered %d", rc);
		}
		id = in->impersonated_identity;
		out->impersonated = true;
	}
	SG_ENSURE(strlen(id) < sizeof(out->identity), SG_EDENIED, "identity too long");
	SG_TRY(decide_ttl(p, in->requested_ttl, &out->ttl));
	snprintf(out->identity, sizeof(out->identity), "%s", id);
	out->strict_csr = p->o.mode == SG_GRANT_ISTIO_CSR;
	return SG_OK;
}
