/* The SPIFFE naming rules (sg_spiffe.h). */
#include "sg_spiffe.h"

#include <string.h>

bool sg_trust_domain_valid(const char *td)
{
	if (!td)
		return false;
	size_t n = strnlen(td, SG_TRUST_DOMAIN_MAX + 1);
	if (n == 0 || n > SG_TRUST_DOMAIN_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (td[i] <= 0x20 || td[i] >= 0x7f || td[i] == '/')
			return false;
	return true;
}
