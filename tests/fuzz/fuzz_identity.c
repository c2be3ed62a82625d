/*
 * Fuzz target for the SPIFFE IDs a gRPC peer hands the request path: the
 * ImpersonatedIdentity a trusted node agent asks for (ra/sg_grant.c) and
 * the URI SAN of a client certificate (ra/sg_authn_mtls.c). Both are read
 * before any signing work and decide whose certificate is made.
 *
 * The input, cut at its first NUL and at IDENTITY_INPUT_MAX bytes, is the
 * identity; the trust domain is cluster.local. Oracles, each against a
 * reading of the rules written here apart from the code under test:
 *   - mTLS accepts exactly a SPIFFE ID of the trust domain shorter than
 *     SG_ID_MAX whose path is SPIFFE-ID §2.2's (non-empty segments of
 *     [A-Za-z0-9._-], none "." or ".."), and the caller it gives holds the
 *     identity as it came;
 *   - a trusted node account without node authorization may have any
 *     identity of the trust domain that is printable ASCII without spaces,
 *     has a path and is shorter than SG_ID_MAX, and the decision certifies
 *     exactly it;
 *   - with node authorization the identity must moreover be exactly
 *     spiffe://cluster.local/ns/<ns>/sa/<sa> with both segments as above
 *     and under 254 bytes, and the hook is asked about exactly those two;
 *   - a caller that is not a trusted node account is always refused, and
 *     nothing is asked of the hook;
 *   - every refusal is SG_EDENIED or SG_EAUTH with a message.
 */
#include "sg_authn.h"
#include "sg_authn_impl.h"
#include "sg_grant.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define IDENTITY_INPUT_MAX (SG_ID_MAX + 16) /* past the bound, to reach that refusal */
#define PREFIX "spiffe://cluster.local/"
#define SEGMENT_MAX 253 /* the hook's ns and sa buffers hold 253 and a NUL */

static void check(int cond)
{
	if (!cond)
		abort();
}

static bool seg_char(char c)
{
	return strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", c) != NULL && c != 0;
}

/* A segment of n bytes at s, as SPIFFE-ID §2.2 allows. */
static bool segment_ok(const char *s, size_t n)
{
	if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!seg_char(s[i]))
			return false;
	return true;
}

/* A whole path: segments split at '/', each one allowed. */
static bool path_ok(const char *p)
{
	const char *start = p;
	for (const char *q = p;; q++) {
		if (*q == '/' || *q == 0) {
			if (!segment_ok(start, (size_t)(q - start)))
				return false;
			if (*q == 0)
				return true;
			start = q + 1;
		}
	}
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* ---- mTLS ---- */

struct done_box {
	int calls, rc;
	sg_caller caller;
};

static void done(int rc, const sg_caller *caller, const sg_error *err, void *arg)
{
	(void)err;
	struct done_box *b = arg;
	b->calls++;
	b->rc = rc;
	if (caller)
		b->caller = *caller;
}

static void fuzz_mtls(const sg_authenticator *a, const char *id, size_t n)
{
	struct done_box b = {0};
	sg_authn_request req = {.peer_identity = id, .now = 1700000000};
	int rc = a->start(a->self, &req, done, &b);
	bool want = n < SG_ID_MAX && strncmp(id, PREFIX, strlen(PREFIX)) == 0 && path_ok(id + strlen(PREFIX));
	if (rc == SG_OK) {
		check(want && b.calls == 1 && b.rc == SG_OK);
		check(strcmp(b.caller.identity, id) == 0 && strcmp(b.caller.method, "mtls") == 0);
	} else {
		check(!want && b.calls == 0 && rc == SG_EAUTH && sg_error_last()->msg[0]);
	}
}

/* ---- impersonation ---- */

struct hook_box {
	int calls;
	char ns[300], sa[300];
};

static int hook(void *arg, const sg_caller *caller, const char *ns, const char *sa)
{
	(void)caller;
	struct hook_box *h = arg;
	h->calls++;
	check(strlen(ns) < sizeof(h->ns) && strlen(sa) < sizeof(h->sa));
	strcpy(h->ns, ns);
	strcpy(h->sa, sa);
	return SG_OK;
}

/* Whether id is exactly PREFIX ns/<ns>/sa/<sa> with allowed segments;
 * their bounds into *ns and *sa. */
static bool workload_id(const char *id, const char **ns, size_t *nsn, const char **sa, size_t *san)
{
	size_t pl = strlen(PREFIX);
	if (strncmp(id, PREFIX "ns/", pl + 3) != 0)
		return false;
	*ns = id + pl + 3;
	const char *slash = strchr(*ns, '/');
	if (!slash || strncmp(slash, "/sa/", 4) != 0)
		return false;
	*nsn = (size_t)(slash - *ns);
	*sa = slash + 4;
	*san = strlen(*sa);
	return segment_ok(*ns, *nsn) && segment_ok(*sa, *san) && *nsn <= SEGMENT_MAX && *san <= SEGMENT_MAX;
}

static void fuzz_grant(const char *id, size_t n, bool with_hook, bool trusted_caller)
{
	struct hook_box h = {0};
	sg_grant_options o = {.mode = SG_GRANT_ISTIO_CSR,
	                      .max_ttl = 86400,
	                      .cluster_id = "Kubernetes",
	                      .trust_domain = "cluster.local",
	                      .trusted_node_accounts = "istio-system/node-agent",
	                      .authorize_impersonation = with_hook ? hook : NULL,
	                      .authorize_arg = &h};
	sg_grant *g = NULL;
	check(sg_grant_new(&g, &o) == SG_OK && g);
	sg_caller c;
	memset(&c, 0, sizeof(c));
	strcpy(c.identity, "spiffe://cluster.local/ns/istio-system/sa/node-agent");
	strcpy(c.ns, trusted_caller ? "istio-system" : "default");
	strcpy(c.sa, "node-agent");
	c.method = "jwt";
	sg_grant_input in = {
	    .caller = &c, .cluster_id = "Kubernetes", .requested_ttl = 3600, .impersonated_identity = id};
	sg_grant_decision d;
	int rc = sg_grant_decide(g, &in, &d);

	size_t pl = strlen(PREFIX);
	bool want = trusted_caller && n < SG_ID_MAX && printable(id) && n > pl && strncmp(id, PREFIX, pl) == 0;
	const char *ns = NULL, *sa = NULL;
	size_t nsn = 0, san = 0;
	if (with_hook)
		want = want && workload_id(id, &ns, &nsn, &sa, &san);
	if (rc == SG_OK) {
		check(want && d.impersonated && strcmp(d.identity, id) == 0 && d.ttl == 3600);
		if (with_hook)
			check(h.calls == 1 && strlen(h.ns) == nsn && memcmp(h.ns, ns, nsn) == 0 &&
			      strlen(h.sa) == san && memcmp(h.sa, sa, san) == 0);
		else
			check(h.calls == 0);
	} else {
		check(!want && h.calls == 0 && (rc == SG_EDENIED || rc == SG_EAUTH) && sg_error_last()->msg[0]);
	}
	sg_grant_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sg_authenticator mtls;
	static bool ready;
	if (!ready) {
		check(sg_authn_mtls_new(&mtls, "cluster.local") == SG_OK);
		ready = true;
	}
	char id[IDENTITY_INPUT_MAX + 1];
	size_t n = size < IDENTITY_INPUT_MAX ? size : IDENTITY_INPUT_MAX;
	memcpy(id, data, n);
	id[n] = 0;
	n = strlen(id);

	fuzz_mtls(&mtls, id, n);
	fuzz_grant(id, n, false, true);
	fuzz_grant(id, n, true, true);
	fuzz_grant(id, n, true, false);
	return 0;
}
