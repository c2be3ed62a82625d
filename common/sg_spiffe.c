/* The SPIFFE naming rules (sg_spiffe.h). */
#include "sg_spiffe.h"

#include "sg_guard.h"

#include <string.h>

bool sg_trust_domain_valid(const char *td)
{
	if (!td)
		return false;
	size_t n = strnlen(td, SG_TRUST_DOMAIN_MAX + 1);
	if (n == 0 || n > SG_TRUST_DOMAIN_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = td[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == '@'))
			return false;
	}
	return true;
}

int sg_trust_domain_normalize(const char *td, char *out, size_t cap)
{
	SG_ENSURE(sg_trust_domain_valid(td), SG_EINVAL, "trust domain is empty, too long or not [a-z0-9._-@]");
	size_t n = strlen(td);
	SG_ENSURE(n < cap, SG_EINVAL, "trust domain does not fit");
	for (size_t i = 0; i <= n; i++)
		out[i] = td[i] == '@' ? '.' : td[i];
	return SG_OK;
}
