/*
 * Kubernetes naming rules (contract: sg_names.h), shared by everything that
 * checks names coming from tokens, TokenReview answers or objects: one
 * definition, so a namespace or uid accepted in one place is accepted in
 * all of them. The rules are apimachinery's validation package. They live
 * in common/ rather than in the Kubernetes client because the JWT verifier
 * needs them and has no reason to see the client.
 */
#include "sg_names.h"

#include <string.h>

static bool lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool sg_names_dns_label(const char *s, size_t n, size_t max)
{
	if (n == 0 || n > max || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!lower_alnum(s[i]) && s[i] != '-')
			return false;
	return true;
}

bool sg_names_dns_subdomain_max(const char *s, size_t n, size_t max)
{
	if (n == 0 || n > max)
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || s[i] == '.') {
			if (!sg_names_dns_label(s + start, i - start, max))
				return false;
			start = i + 1;
		}
	}
	return true;
}

bool sg_names_dns_subdomain(const char *s, size_t n)
{
	return sg_names_dns_subdomain_max(s, n, SG_NAMES_SUBDOMAIN_MAX);
}

bool sg_names_uid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > SG_NAMES_UID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!lower_alnum(s[i]) && !(s[i] >= 'A' && s[i] <= 'Z') && s[i] != '-')
			return false;
	return true;
}

bool sg_names_label_name(const char *s, size_t n, size_t max)
{
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || i == n - 1 || (c != '-' && c != '_' && c != '.')))
			return false;
	}
	return true;
}

bool sg_names_label_value(const char *s)
{
	return sg_names_label_name(s, strlen(s), SG_NAMES_LABEL_MAX);
}

bool sg_names_qualified(const char *s, size_t n)
{
	const char *slash = memchr(s, '/', n);
	if (!slash)
		return sg_names_label_name(s, n, SG_NAMES_LABEL_MAX);
	size_t pn = (size_t)(slash - s);
	/* A second '/' is refused by the name part's pattern. */
	return sg_names_dns_subdomain(s, pn) && sg_names_label_name(slash + 1, n - pn - 1, SG_NAMES_LABEL_MAX);
}
