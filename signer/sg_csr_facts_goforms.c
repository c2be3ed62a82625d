/*
 * sg_csr_facts_goforms: the text Go prints for the SAN values a policy
 * compares: net.IP.String() (dotted IPv4, RFC 5952 IPv6) and the round
 * trip of url.Parse and URL.String(), reproduced exactly for the URIs it
 * accepts and refused, with the reason, for the rest (a policy must not
 * compare a string Go would not produce). Pure functions of bytes, with
 * no state and no allocation: sg_csr_facts_san.c writes their results
 * into the arena. Apart so that Go's url grammar, which has nothing of
 * DER in it, reads alone.
 */
#include "sg_csr_facts_impl.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/*
 * net.IP.String(): dotted IPv4 for 4 bytes and for IPv4-mapped IPv6
 * (::ffff:a.b.c.d); otherwise netip's RFC 5952 form: lowercase hex groups
 * without leading zeros, the longest run of two or more zero groups (the
 * first of equal runs) as "::". out holds at least 40 bytes.
 */
size_t csr_facts_ip_text(const uint8_t *ip, size_t n, char *out)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (n == 16 && memcmp(ip, mapped, 12) == 0) {
		ip += 12;
		n = 4;
	}
	if (n == 4)
		return (size_t)snprintf(out, 40, "%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
	unsigned g[8];
	for (int i = 0; i < 8; i++)
		g[i] = (unsigned)ip[2 * i] << 8 | ip[2 * i + 1];
	int zs = -1, ze = -1;
	for (int i = 0; i < 8; i++) {
		int j = i;
		while (j < 8 && g[j] == 0)
			j++;
		if (j - i >= 2 && j - i > ze - zs) {
			zs = i;
			ze = j;
		}
	}
	size_t used = 0;
	for (int i = 0; i < 8; i++) {
		if (i == zs) {
			out[used++] = ':';
			out[used++] = ':';
			i = ze - 1;
			continue;
		}
		if (i > 0 && i != ze)
			out[used++] = ':';
		used += (size_t)snprintf(out + used, 40 - used, "%x", g[i]);
	}
	out[used] = '\0';
	return used;
}

static bool alnum(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool hexdig(uint8_t c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Characters Go's url package keeps as they are in a path (validEncoded,
 * encodePath) and in a fragment (validEncoded, encodeFragment); '%' is
 * checked apart. */
static bool path_char(uint8_t c)
{
	return alnum(c) || (c && strchr("-._~!$&'()*+,;=:@[]/", c));
}

static bool frag_char(uint8_t c)
{
	return path_char(c) || c == '?';
}

/* A path or fragment whose escapes are all %XX. */
static bool encoded_ok(const char *s, size_t n, bool (*ok)(uint8_t))
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%') {
			if (i + 2 >= n || !hexdig((uint8_t)s[i + 1]) || !hexdig((uint8_t)s[i + 2]))
				return false;
			i += 2;
		} else if (!ok((uint8_t)s[i])) {
			return false;
		}
	}
	return true;
}

/* crypto/x509's domainToReverseLabels check on a URI's host: no empty
 * label (so no leading, trailing or doubled dot). */
static bool x509_uri_host(const char *h, size_t n)
{
	if (n == 0)
		return true;
	if (h[0] == '.' || h[n - 1] == '.')
		return false;
	for (size_t i = 1; i < n; i++)
		if (h[i] == '.' && h[i - 1] == '.')
			return false;
	return true;
}

static bool port_ok(const char *p, size_t n)
{
	if (n == 0)
		return true;
	if (p[0] != ':')
		return false;
	for (size_t i = 1; i < n; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	return true;
}

/* The authority of a hierarchical URI, without userinfo. */
static const char *uri_host_problem(const char *h, size_t n)
{
	if (memchr(h, '@', n))
		return "a userinfo part";
	if (n > 0 && h[0] == '[') {
		const char *end = NULL;
		for (size_t i = n; i-- > 0;)
			if (h[i] == ']') {
				end = h + i;
				break;
			}
		if (!end)
			return "a '[' without ']' in the host";
		size_t in = (size_t)(end - h) - 1;
		char addr[64];
		unsigned char bin[16];
		if (in == 0 || in >= sizeof(addr))
			return "an IP literal that is not an IPv6 address";
		for (size_t i = 1; i <= in; i++)
			if (!hexdig((uint8_t)h[i]) && h[i] != ':' && h[i] != '.')
				return "an IP literal that is not an IPv6 address";
		memcpy(addr, h + 1, in);
		addr[in] = '\0';
		if (inet_pton(AF_INET6, addr, bin) != 1)
			return "an IP literal that is not an IPv6 address";
		if (!port_ok(end + 1, n - in - 2))
			return "an invalid port";
	} else {
		size_t colon = n;
		for (size_t i = n; i-- > 0;)
			if (h[i] == ':') {
				colon = i;
				break;
			}
		if (!port_ok(h + colon, n - colon))
			return "an invalid port";
		for (size_t i = 0; i < colon; i++)
			if (!alnum((uint8_t)h[i]) && !strchr("-._~!$&'()*+,;=:", h[i]))
				return "a host character Go would refuse or escape";
	}
	if (!x509_uri_host(h, n))
		return "an invalid domain (crypto/x509 refuses empty labels)";
	return NULL;
}

/*
 * A URI as Go's url.Parse followed by URL.String() gives it back, for the
 * URIs whose round trip this reproduces exactly. Go's grammar, in its
 * order: a scheme ([A-Za-z][A-Za-z0-9+.-]* before the first ':', printed
 * in lower case; a ':' first is an error; anything else is a reference
 * without scheme, whose first path segment may then hold no ':'); the
 * fragment after the first '#' (an empty one is dropped); the query after
 * the first '?' (kept verbatim); then an opaque part (a scheme and no
 * leading '/': verbatim), or "//" authority (not "///" without a scheme)
 * and a path. An empty host prints no "//" unless a scheme and a path
 * follow ("s://" prints "s:"). Paths and fragments must hold only what Go
 * leaves unescaped, and %XX escapes; a host only unreserved characters and
 * sub-delims, a port, or a bracketed IPv6 address. Anything else -- a
 * userinfo part, a '%' in the host, a character Go would re-escape -- is
 * refused: its Go rendering is not reproduced here, and a policy must not
 * compare a string Go would not produce. out has room for n + 1 bytes
 * (the result is never longer).
 */
const char *csr_facts_go_uri(const char *s, size_t n, char *out, size_t *outlen)
{
	for (size_t i = 0; i < n; i++)
		if ((uint8_t)s[i] <= 0x20 || (uint8_t)s[i] >= 0x7f)
			return (uint8_t)s[i] == ' ' ? "a space" : "net/url: invalid control character in URL";
	size_t sl = 0; /* scheme length, 0 for none (getScheme) */
	for (size_t i = 0; i < n; i++) {
		uint8_t c = (uint8_t)s[i];
		if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
			continue;
		if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.') {
			if (i == 0)
				break;
			continue;
		}
		if (c == ':') {
			if (i == 0)
				return "missing protocol scheme";
			sl = i;
		}
		break;
	}
	bool scheme = sl > 0;
	const char *rest = scheme ? s + sl + 1 : s;
	size_t rn = scheme ? n - sl - 1 : n;
	const char *hash = memchr(rest, '#', rn);
	size_t hn = hash ? (size_t)(hash - rest) : rn; /* before '#' */
	const char *frag = hash ? hash + 1 : NULL;
	size_t fn = hash ? rn - hn - 1 : 0;
	if (fn > 0 && !encoded_ok(frag, fn, frag_char))
		return "a fragment Go would re-escape";
	const char *q = memchr(rest, '?', hn);
	size_t pn = q ? (size_t)(q - rest) : hn; /* the hierarchical part */

	size_t used = 0;
	for (size_t i = 0; i < sl; i++)
		out[used++] = (char)((s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 32 : s[i]);
	if (scheme)
		out[used++] = ':';
	if (!scheme && (pn == 0 || rest[0] != '/')) {
		const char *slash = memchr(rest, '/', pn);
		if (memchr(rest, ':', slash ? (size_t)(slash - rest) : pn))
			return "first path segment in URL cannot contain colon";
	}
	bool authority = pn >= 2 && rest[0] == '/' && rest[1] == '/' && (scheme || pn == 2 || rest[2] != '/');
	if (authority) {
		const char *auth = rest + 2;
		const char *slash = memchr(auth, '/', pn - 2);
		size_t an = slash ? (size_t)(slash - auth) : pn - 2;
		const char *path = auth + an;
		size_t pathn = pn - 2 - an;
		const char *why = uri_host_problem(auth, an);
		if (why)
			return why;
		if (!encoded_ok(path, pathn, path_char))
			return "a path Go would re-escape";
		if (an > 0 || (scheme && pathn > 0)) {
			memcpy(out + used, rest, pn);
			used += pn;
		}
	} else {
		if (pn > 0 && (!scheme || rest[0] == '/') && !encoded_ok(rest, pn, path_char))
			return "a path Go would re-escape";
		memcpy(out + used, rest, pn); /* a path, or an opaque part (verbatim in Go) */
		used += pn;
	}
	memcpy(out + used, rest + pn, hn - pn); /* "?query", verbatim */
	used += hn - pn;
	if (fn > 0) {
		out[used++] = '#';
		memcpy(out + used, frag, fn);
		used += fn;
	}
	*outlen = used;
	return NULL;
}
