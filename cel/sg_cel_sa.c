/*
 * sg_cel_sa: approver-policy's ServiceAccount library
 * (pkg/internal/approver/validation/serviceaccount.go): serviceAccount(s)
 * makes an abstract value of type
 * cm.io.policy.pkg.internal.approver.validation.ServiceAccount from a
 * username, isServiceAccount(s) tells whether one would, and getName() and
 * getNamespace() read it. The username rule is k8s.io/apiserver's
 * serviceaccount.SplitUsername: "system:serviceaccount:", a namespace that
 * is a DNS-1123 label, ':', a name that is a DNS-1123 subdomain, and no
 * other ':'. A value compares equal to another with the same name and
 * namespace; it has no fields to select.
 */
#include "sg_cel_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- approver-policy's ServiceAccount library ---- */

/* k8s.io/apiserver's serviceaccount.SplitUsername: the prefix, exactly
 * two ':'-separated parts, a DNS label namespace and a DNS subdomain name. */
static bool dns_label(const char *s, size_t n, size_t max)
{
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
		if (!alnum && !(ch == '-' && i > 0 && i + 1 < n))
			return false;
	}
	return true;
}

static bool dns_subdomain(const char *s, size_t n)
{
	if (n == 0 || n > 253)
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++)
		if (i == n || s[i] == '.') {
			if (!dns_label(s + start, i - start, 253))
				return false;
			start = i + 1;
		}
	return true;
}

static bool split_username(cval s, size_t *ns_len, const char **name, size_t *name_len)
{
	static const char prefix[] = "system:serviceaccount:";
	size_t pl = sizeof(prefix) - 1;
	if (s->s.n < pl || memcmp(s->s.p, prefix, pl) != 0)
		return false;
	const char *rest = s->s.p + pl;
	size_t rn = s->s.n - pl;
	const char *colon = memchr(rest, ':', rn);
	if (!colon || memchr(colon + 1, ':', rn - (size_t)(colon + 1 - rest)))
		return false;
	*ns_len = (size_t)(colon - rest);
	*name = colon + 1;
	*name_len = rn - *ns_len - 1;
	return dns_label(rest, *ns_len, 63) && dns_subdomain(*name, *name_len);
}

cval sg_cel_fn_service_account(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	size_t nsl, namel;
	const char *name;
	if (!split_username(a[0], &nsl, &name, &namel))
		return sg_cel_err(c,
		                  "Unable to convert to serviceaccount: err: Username must be in the form "
		                  "system:serviceaccount:namespace:name, username: %.300s",
		                  a[0]->s.p);
	const sg_cel_value **k = sg_cel_new_items(c, 2), **v = sg_cel_new_items(c, 2);
	sg_cel_value *o = sg_cel_new_value(c->a, SG_CEL_OBJECT);
	if (!k || !v || !o) {
		c->stop = true;
		return NULL;
	}
	k[0] = sg_cel_mk_str(c, SG_CEL_STRING, "name", 4);
	v[0] = sg_cel_mk_str(c, SG_CEL_STRING, name, namel);
	k[1] = sg_cel_mk_str(c, SG_CEL_STRING, "namespace", 9);
	v[1] = sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p + 22, nsl);
	o->map.k = k;
	o->map.v = v;
	o->map.n = 2;
	o->map.type = SG_CEL_SA_TYPE;
	return o;
}

cval sg_cel_fn_is_service_account(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	size_t nsl, namel;
	const char *name;
	return sg_cel_mk_bool(c, split_username(a[0], &nsl, &name, &namel));
}

static cval sa_field(sg_cel_ctx *c, cval *a, size_t n, const sg_cel_node *call, const char *field)
{
	if (n != 1 || a[0]->kind != SG_CEL_OBJECT || strcmp(a[0]->map.type, SG_CEL_SA_TYPE) != 0)
		return sg_cel_fn_no_overload(c, call, a, n);
	cval v = sg_cel_map_find_str(a[0], field, strlen(field));
	return v ? v : sg_cel_err(c, "no such field: %s", field);
}

cval sg_cel_fn_sa_name(SG_CEL_ARGS)
{
	return sa_field(c, a, n, call, "name");
}

cval sg_cel_fn_sa_namespace(SG_CEL_ARGS)
{
	return sa_field(c, a, n, call, "namespace");
}
