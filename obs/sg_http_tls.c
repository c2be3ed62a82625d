/*
 * The TLS policy of an HTTPS server (sg_http.h, sg_http_tls_policy): the
 * names Kubernetes programs take for --tls-min-version and
 * --tls-cipher-suites (k8s.io/component-base/cli/flag, which reads them
 * from Go's crypto/tls), and the GnuTLS priority string that serves them.
 *
 * Go lets a server list its TLS 1.2 suites one by one; GnuTLS's priority
 * strings cannot: they name key exchanges, ciphers and MACs, and every
 * suite made of named parts is on. So the string is built from the parts
 * of the suites asked for, and GnuTLS itself is then asked which suites
 * that string enables (gnutls_priority_get_cipher_suite_index): if it
 * enables one that was not asked for, or cannot enable one that was, the
 * policy is refused with the suites named. A server never offers more
 * than its flags say. TLS 1.3 differs from Go's in one way, towards less:
 * Go keeps TLS 1.3's three suites whatever the list, but GnuTLS's cipher
 * set is one for all versions, so with a list TLS 1.3 uses the AEAD
 * ciphers the list's suites use (none: no TLS 1.3, the client falls back
 * to TLS 1.2), since adding the other two would enable TLS 1.2 suites not
 * asked for. TLS 1.3 names in the list change nothing, as in Go. Apart
 * from sg_http.c because it is the one place that speaks GnuTLS's
 * vocabulary rather than libmicrohttpd's.
 */
#include "sg_http_impl.h"

#include "sg_guard.h"

#include <gnutls/gnutls.h>
#include <stdio.h>
#include <string.h>

/* ---- the names ---- */

static const struct suite {
	const char *name;              /* Go's (crypto/tls) */
	uint16_t id;                   /* IANA */
	bool insecure;                 /* in tls.InsecureCipherSuites(): for the reader; accepted alike */
	const char *kx, *cipher, *mac; /* GnuTLS's names; NULL kx: TLS 1.3 */
} suites[] = {
    {"TLS_RSA_WITH_AES_128_CBC_SHA", 0x002f, false, "RSA", "AES-128-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", 0x0035, false, "RSA", "AES-256-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", 0x009c, false, "RSA", "AES-128-GCM", "AEAD"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", 0x009d, false, "RSA", "AES-256-GCM", "AEAD"},
    {"TLS_AES_128_GCM_SHA256", 0x1301, false, NULL, "AES-128-GCM", "AEAD"},
    {"TLS_AES_256_GCM_SHA384", 0x1302, false, NULL, "AES-256-GCM", "AEAD"},
    {"TLS_CHACHA20_POLY1305_SHA256", 0x1303, false, NULL, "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", 0xc009, false, "ECDHE-ECDSA", "AES-128-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", 0xc00a, false, "ECDHE-ECDSA", "AES-256-CBC", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0xc013, false, "ECDHE-RSA", "AES-128-CBC", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0xc014, false, "ECDHE-RSA", "AES-256-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", 0xc02b, false, "ECDHE-ECDSA", "AES-128-GCM", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", 0xc02c, false, "ECDHE-ECDSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xc02f, false, "ECDHE-RSA", "AES-128-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 0xc030, false, "ECDHE-RSA", "AES-256-GCM", "AEAD"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", 0xcca8, false, "ECDHE-RSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", 0xcca9, false, "ECDHE-ECDSA", "CHACHA20-POLY1305", "AEAD"},
    /* component-base keeps these older names of the two above */
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", 0xcca8, false, "ECDHE-RSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", 0xcca9, false, "ECDHE-ECDSA", "CHACHA20-POLY1305", "AEAD"},
    {"TLS_RSA_WITH_RC4_128_SHA", 0x0005, true, "RSA", "ARCFOUR-128", "SHA1"},
    {"TLS_RSA_WITH_3DES_EDE_CBC_SHA", 0x000a, true, "RSA", "3DES-CBC", "SHA1"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA256", 0x003c, true, "RSA", "AES-128-CBC", "SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", 0xc007, true, "ECDHE-ECDSA", "ARCFOUR-128", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_RC4_128_SHA", 0xc011, true, "ECDHE-RSA", "ARCFOUR-128", "SHA1"},
    {"TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", 0xc012, true, "ECDHE-RSA", "3DES-CBC", "SHA1"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", 0xc023, true, "ECDHE-ECDSA", "AES-128-CBC", "SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 0xc027, true, "ECDHE-RSA", "AES-128-CBC", "SHA256"},
};
#define NSUITES (sizeof(suites) / sizeof(suites[0]))

static const struct version {
	const char *name;
	uint16_t id;
	const char *gnutls; /* the priority string's name */
} versions[] = {
    {"VersionTLS10", 0x0301, "VERS-TLS1.0"},
    {"VersionTLS11", 0x0302, "VERS-TLS1.1"},
    {"VersionTLS12", 0x0303, "VERS-TLS1.2"},
    {"VersionTLS13", 0x0304, "VERS-TLS1.3"},
};
#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))
#define TLS12 0x0303
#define TLS13 0x0304

int sg_http_tls_version_parse(const char *name, uint16_t *out)
{
	*out = 0;
	SG_ENSURE(name, SG_EINVAL, "no TLS version");
	if (!*name)
		return SG_OK;
	for (size_t i = 0; i < NVERSIONS; i++)
		if (strcmp(name, versions[i].name) == 0) {
			*out = versions[i].id;
			return SG_OK;
		}
	SG_BAIL(SG_EINVAL,
	        "unknown tls version \"%.64s\" (possible values: VersionTLS10, VersionTLS11, VersionTLS12, "
	        "VersionTLS13)",
	        name);
}

static const struct suite *suite_of(uint16_t id)
{
	for (size_t i = 0; i < NSUITES; i++)
		if (suites[i].id == id)
			return &suites[i];
	return NULL;
}

int sg_http_tls_suites_parse(const char *list, uint16_t *out, size_t cap, size_t *n)
{
	*n = 0;
	SG_ENSURE(list, SG_EINVAL, "no cipher suites");
	const char *p = list;
	while (*p) {
		while (*p == ' ')
			p++;
		size_t len = strcspn(p, ",");
		size_t end = len;
		while (end > 0 && p[end - 1] == ' ')
			end--;
		if (end > 0 || p[len] == ',') {
			const struct suite *hit = NULL;
			for (size_t i = 0; i < NSUITES && !hit; i++)
				if (strlen(suites[i].name) == end && memcmp(p, suites[i].name, end) == 0)
					hit = &suites[i];
			SG_ENSURE(hit, SG_EINVAL, "Cipher suite %.*s not supported or doesn't exist",
			          (int)(end > 96 ? 96 : end), p);
			SG_ENSURE(*n < cap, SG_EINVAL, "more than %zu cipher suites", cap);
			out[(*n)++] = hit->id;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return SG_OK;
}

/* ---- the priority string ---- */

/* Appends ":+<name>" unless the string already holds it. */
static void add_part(char *out, size_t cap, const char *name)
{
	char part[64];
	snprintf(part, sizeof(part), ":+%s", name);
	size_t n = strlen(part);
	for (const char *at = out; (at = strstr(at, part)) != NULL; at += n)
		if (at[n] == ':' || at[n] == '\0')
			return;
	size_t len = strlen(out);
	if (len + n < cap)
		memcpy(out + len, part, n + 1);
}

int sg_http_tls_priorities(const sg_http_tls_policy *p, char *out, size_t cap)
{
	uint16_t min = p && p->min_version ? p->min_version : TLS12;
	SG_ENSURE(min >= 0x0301 && min <= TLS13, SG_EINVAL, "TLS version 0x%04x is not one of TLS 1.0..1.3", min);
	SG_ENSURE(!p || p->ncipher_suites <= SG_HTTP_TLS_SUITES_MAX, SG_EINVAL, "more than %d cipher suites",
	          SG_HTTP_TLS_SUITES_MAX);
	bool pick = p && p->ncipher_suites > 0 && min < TLS13;
	snprintf(out, cap, "NORMAL:-VERS-ALL");
	for (size_t i = NVERSIONS; i-- > 0;)
		if (versions[i].id >= min)
			add_part(out, cap, versions[i].gnutls);
	if (!pick)
		return SG_OK;
	strncat(out, ":-KX-ALL:-CIPHER-ALL:-MAC-ALL", cap - strlen(out) - 1);
	for (size_t i = 0; i < p->ncipher_suites; i++) {
		const struct suite *s = suite_of(p->cipher_suites[i]);
		SG_ENSURE(s, SG_EINVAL, "cipher suite 0x%04x is not one of Go's", p->cipher_suites[i]);
		if (!s->kx)
			continue; /* TLS 1.3's: they change nothing, as in Go */
		add_part(out, cap, s->kx);
		add_part(out, cap, s->cipher);
		add_part(out, cap, s->mac);
	}
	SG_ENSURE(strlen(out) + 1 < cap, SG_EINTERNAL, "the TLS priority string is too long");
	return SG_OK;
}

static bool asked(const sg_http_tls_policy *p, uint16_t id)
{
	for (size_t i = 0; i < p->ncipher_suites; i++)
		if (p->cipher_suites[i] == id)
			return true;
	return false;
}

static const char *name_of(uint16_t id, const char *gnutls_name)
{
	const struct suite *s = suite_of(id);
	return s ? s->name : gnutls_name;
}

int sg_http_tls_policy_check(const sg_http_tls_policy *p)
{
	char prio[SG_HTTP_TLS_PRIORITIES_MAX];
	SG_TRY(sg_http_tls_priorities(p, prio, sizeof(prio)));
	gnutls_priority_t pc;
	const char *err = NULL;
	int rc = gnutls_priority_init(&pc, prio, &err);
	SG_ENSURE(rc == GNUTLS_E_SUCCESS, SG_EINVAL, "GnuTLS refuses the TLS policy \"%s\" at \"%.40s\": %s", prio,
	          err ? err : "", gnutls_strerror(rc));
	bool pick = p && p->ncipher_suites > 0 && (p->min_version ? p->min_version : TLS12) < TLS13;
	char extra[512] = "";
	bool on[NSUITES] = {false};
	for (unsigned i = 0; pick; i++) {
		unsigned idx;
		int r = gnutls_priority_get_cipher_suite_index(pc, i, &idx);
		if (r == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
			break;
		if (r != GNUTLS_E_SUCCESS)
			continue;
		unsigned char id[2];
		gnutls_protocol_t minv;
		const char *gname = gnutls_cipher_suite_info(idx, id, NULL, NULL, NULL, &minv);
		if (!gname || minv == GNUTLS_TLS1_3)
			continue;
		uint16_t sid = (uint16_t)(id[0] << 8 | id[1]);
		if (asked(p, sid)) {
			for (size_t k = 0; k < NSUITES; k++)
				on[k] = on[k] || suites[k].id == sid;
		} else if (strlen(extra) + 64 < sizeof(extra)) {
			snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), "%s%s", extra[0] ? ", " : "",
			         name_of(sid, gname));
		}
	}
	gnutls_priority_deinit(pc);
	SG_ENSURE(!extra[0], SG_EINVAL,
	          "GnuTLS enables TLS suites by key exchange, cipher and MAC: these --tls-cipher-suites would also "
	          "enable %s; add them, or leave out the suites whose parts make them",
	          extra);
	for (size_t i = 0; pick && i < p->ncipher_suites; i++) {
		const struct suite *s = suite_of(p->cipher_suites[i]);
		bool served = !s->kx;
		for (size_t k = 0; k < NSUITES && !served; k++)
			served = on[k] && suites[k].id == s->id;
		SG_ENSURE(served, SG_EINVAL, "cipher suite %s cannot be served by this GnuTLS with TLS from %s",
		          s->name,
		          p->min_version == 0x0301   ? "1.0"
		          : p->min_version == 0x0302 ? "1.1"
		                                     : "1.2");
	}
	return SG_OK;
}
