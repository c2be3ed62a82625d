/*
 * A CertificateRequest object read into an sg_crpolicy_request (contract:
 * sg_crpolicy.h, sg_crpolicy_cr_*).
 *
 * Design notes. This is the one reading of a request both the approver
 * (controllers/sg_approver.c, from its informer's cache) and `signetctl
 * policy check` (from a file) use, so the two cannot disagree on what a
 * request asks for. Nothing is copied: the view borrows the object's
 * strings. The CSR is parsed separately and only on demand, because the
 * approver parses it only once some Ready policy is to evaluate the
 * request (an unparsable request no policy selects stays undecided rather
 * than failing). spec.request is bounded before it is decoded: the length
 * of the base64 text says how many bytes it can hold.
 */
#include "sg_base64.h"
#include "sg_crpolicy_impl.h"
#include "sg_csr.h"
#include "sg_guard.h"

#include <stdlib.h>
#include <string.h>

static const char *str_at(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

int sg_crpolicy_cr_read(sg_crpolicy_cr *q, const json_t *cr)
{
	memset(q, 0, sizeof(*q));
	const json_t *meta = json_object_get(cr, "metadata");
	const json_t *spec = json_object_get(cr, "spec");
	const json_t *ref = json_object_get(spec, "issuerRef");
	q->r.name = json_string_value(json_object_get(meta, "name"));
	q->r.name_space = json_string_value(json_object_get(meta, "namespace"));
	q->r.issuer_name = str_at(ref, "name");
	q->r.issuer_kind = str_at(ref, "kind");
	q->r.issuer_group = str_at(ref, "group");
	q->r.is_ca = json_is_true(json_object_get(spec, "isCA"));
	const char *d = json_string_value(json_object_get(spec, "duration"));
	if (d) {
		SG_TRY(sg_crpolicy_duration_parse(d, &q->r.duration_seconds, &q->r.duration_fraction));
		q->r.has_duration = true;
	}
	size_t i;
	json_t *v;
	const json_t *usages = json_object_get(spec, "usages");
	SG_ENSURE(json_array_size(usages) <= SG_CRPOLICY_MAX_USAGES, SG_EINVAL, "spec.usages: more than %d",
	          SG_CRPOLICY_MAX_USAGES);
	json_array_foreach(usages, i, v)
	{
		SG_ENSURE(json_is_string(v), SG_EINVAL, "spec.usages[%zu] is not a string", i);
		q->usages[q->r.usage_count++] = json_string_value(v);
	}
	q->r.usages = q->usages;
	q->r.username = str_at(spec, "username");
	q->r.uid = str_at(spec, "uid");
	const json_t *groups = json_object_get(spec, "groups");
	SG_ENSURE(json_array_size(groups) <= SG_CRPOLICY_MAX_GROUPS, SG_EINVAL, "spec.groups: more than %d",
	          SG_CRPOLICY_MAX_GROUPS);
	json_array_foreach(groups, i, v)
	{
		SG_ENSURE(json_is_string(v), SG_EINVAL, "spec.groups[%zu] is not a string", i);
		q->groups[q->r.group_count++] = json_string_value(v);
	}
	q->r.groups = q->groups;
	const json_t *extra = json_object_get(spec, "extra");
	q->r.extra = json_is_object(extra) ? extra : NULL;
	return SG_OK;
}

/* A []byte field (standard base64) of obj, decoded into a new
 * NUL-terminated buffer of at most max bytes. */
static int bytes_field(const json_t *obj, const char *field, size_t max, char **out, size_t *len)
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

int sg_crpolicy_cr_csr(sg_crpolicy_cr *q, const json_t *cr)
{
	if (q->r.csr)
		return SG_OK;
	size_t len = 0;
	SG_TRY(bytes_field(json_object_get(cr, "spec"), "request", SG_CRPOLICY_MAX_REQUEST_PEM, &q->pem, &len));
	q->der = malloc(len ? len : 1);
	SG_ENSURE(q->der, SG_EINTERNAL, "out of memory");
	size_t der_len = 0;
	SG_TRY(sg_csr_decode((const uint8_t *)q->pem, len, q->der, len, &der_len));
	SG_TRY(sg_csr_facts_parse(&q->facts, q->der, der_len));
	q->r.csr = &q->facts;
	return SG_OK;
}

void sg_crpolicy_cr_clear(sg_crpolicy_cr *q)
{
	sg_csr_facts_clear(&q->facts);
	free(q->pem);
	free(q->der);
	q->pem = NULL;
	q->der = NULL;
	q->r.csr = NULL;
}
