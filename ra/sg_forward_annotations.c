/*
 * sg_forward_annotations: istio-csr's
 * --certificate-request-additional-annotations, the annotations put on
 * every CertificateRequest the forwarder creates (approver-policy rules
 * and other admission can match on them). Contract: sg_forward.h.
 *
 * The text is read exactly as istio-csr's flag reads it (spf13/pflag's
 * StringToString): a value with no '=' is an error; with exactly one '='
 * it is a single key=value pair, surrounding '"' trimmed, and the value
 * may hold commas ("team=a,b" is key team, value "a,b"); with more, it is
 * one record of comma-separated values (Go's encoding/csv: a field may be
 * quoted, "" inside a quoted field is one '"', a '"' inside an unquoted
 * field is an error), each field split at its first '='. A later key
 * replaces an earlier one. Then apimachinery's ValidateAnnotations, as
 * istio-csr calls it at start: every key, lowercased, a qualified name,
 * and keys plus values at most 256 KiB.
 *
 * Differences, each refused rather than guessed at: control characters
 * (a newline would end Go's CSV record and silently drop the rest), and
 * the empty text means no annotations (signetd's default; pflag refuses an
 * explicit empty value, signet's settings cannot tell the two apart).
 *
 * Reserved keys are handled as istio-csr handles them: not at all. Keys of
 * cert-manager's own groups (cert-manager.io/..., whose webhook forbids
 * only changing them after creation) are passed as given, and the
 * identity annotation (istio.cert-manager.io/identities) is replaced by a
 * configured value of the same key, since istio-csr copies the map over
 * the annotations it set.
 */
#include "sg_forward_impl.h"

#include "sg_guard.h"
#include "sg_names.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETTING "certificate-request-additional-annotations"
#define TOTAL_MAX (256u * 1024u) /* apimachinery's TotalAnnotationSizeLimitB */
#define SHOWN 64                 /* bytes of a bad field quoted in a message */

/* One key=value field: split at its first '=', the key checked as
 * ValidateAnnotations checks it, added (replacing) to obj. */
static int add_pair(json_t *obj, const char *f, size_t n, size_t *total)
{
	const char *eq = memchr(f, '=', n);
	SG_ENSURE(eq, SG_EINVAL, SETTING ": \"%.*s\" must be formatted as key=value", (int)(n < SHOWN ? n : SHOWN), f);
	size_t klen = (size_t)(eq - f);
	char *key SG_AUTOFREE = strndup(f, klen);
	char *lower SG_AUTOFREE = strndup(f, klen);
	char *val SG_AUTOFREE = strndup(eq + 1, n - klen - 1);
	SG_ENSURE(key && lower && val, SG_EINTERNAL, "out of memory");
	for (char *c = lower; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	SG_ENSURE(sg_names_qualified(lower, klen), SG_EINVAL,
	          SETTING ": key \"%.*s\" is not a qualified name (an optional DNS subdomain and '/', then 1 to 63 "
	                  "of [A-Za-z0-9._-], alphanumeric at both ends)",
	          (int)(klen < SHOWN ? klen : SHOWN), key);
	json_t *old = json_object_get(obj, key);
	if (old)
		*total -= strlen(key) + strlen(json_string_value(old));
	*total += klen + strlen(val);
	SG_ENSURE(json_object_set_new(obj, key, json_string(val)) == 0, SG_EINVAL,
	          SETTING ": the value of \"%s\" is not UTF-8", key);
	return SG_OK;
}

/* Go's encoding/csv, one record, default settings: fields separated by
 * ','; a field that starts with '"' is quoted up to a lone '"', which must
 * end the record or be followed by ','. */
static int add_csv(json_t *obj, const char *s, size_t *total)
{
	size_t len = strlen(s), i = 0, col;
	char *field SG_AUTOFREE = malloc(len + 1);
	SG_ENSURE(field, SG_EINTERNAL, "out of memory");
	for (;;) {
		size_t n = 0;
		col = i + 1;
		if (s[i] == '"') {
			for (i++;; i++) {
				SG_ENSURE(i < len, SG_EINVAL, SETTING ": column %zu: a quoted field is not closed",
				          col);
				if (s[i] != '"') {
					field[n++] = s[i];
				} else if (s[i + 1] == '"') {
					field[n++] = '"';
					i++;
				} else {
					i++;
					break;
				}
			}
			SG_ENSURE(i == len || s[i] == ',', SG_EINVAL,
			          SETTING ": column %zu: extraneous or missing \" in a quoted field", i + 1);
		} else {
			for (; i < len && s[i] != ','; i++) {
				SG_ENSURE(s[i] != '"', SG_EINVAL,
				          SETTING ": column %zu: bare \" in a field that is not quoted", i + 1);
				field[n++] = s[i];
			}
		}
		SG_TRY(add_pair(obj, field, n, total));
		if (i == len)
			return SG_OK;
		i++; /* the ',' */
	}
}

int forward_annotations_parse(const char *text, json_t **out)
{
	*out = NULL;
	json_t *obj SG_CLEANUP(json_decrefp) = json_object();
	SG_ENSURE(obj, SG_EINTERNAL, "out of memory");
	if (!text || !*text) {
		*out = SG_MOVE(obj);
		return SG_OK;
	}
	size_t len = strlen(text), eqs = 0;
	for (size_t i = 0; i < len; i++) {
		SG_ENSURE((unsigned char)text[i] >= 0x20 && text[i] != 0x7f, SG_EINVAL,
		          SETTING ": control character at column %zu", i + 1);
		eqs += text[i] == '=';
	}
	size_t total = 0;
	if (eqs == 1) {
		/* one pair, as given (commas included), '"' trimmed at both ends */
		size_t b = 0, e = len;
		while (b < e && text[b] == '"')
			b++;
		while (e > b && text[e - 1] == '"')
			e--;
		SG_TRY(add_pair(obj, text + b, e - b, &total));
	} else {
		SG_ENSURE(eqs > 1, SG_EINVAL, SETTING ": \"%.*s\" must be formatted as key=value",
		          (int)(len < SHOWN ? len : SHOWN), text);
		SG_TRY(add_csv(obj, text, &total));
	}
	SG_ENSURE(total <= TOTAL_MAX, SG_EINVAL, SETTING ": keys and values take %zu bytes, more than %u", total,
	          TOTAL_MAX);
	*out = SG_MOVE(obj);
	return SG_OK;
}

int sg_forward_annotations_check(const char *text)
{
	json_t *obj = NULL;
	int rc = forward_annotations_parse(text, &obj);
	json_decref(obj);
	return rc;
}
