/*
 * sg_trust_package: the default CA package (sg_trust.h): a JSON file
 * {name, version, bundle} whose bundle Bundles take with useDefaultCAs,
 * read and checked at start (strict PEM through sg_certset, at least one
 * certificate; the id that status.defaultCAVersion reports is name,
 * version and a hash of the bundle), and written by signet-trust's package
 * command from a PEM file. Apart from the controller because it is a file
 * format with its own users (signet-trust, signet-operator's default
 * package) and nothing of the runtime; the controller sees only its
 * accessors.
 */
#include "sg_trust_impl.h"

#include "sg_crypto.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_hex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_MAX 300
#define PKG_STR_MAX 128

/* ---- the default package ---- */

struct sg_trust_package {
	char *bundle;
	size_t len;
	char id[ID_MAX];
};

static bool printable(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/* Messages quote what users wrote (JSON keys and values, a JSON parser's
 * view of broken input); they go to logs, Events and conditions, so
 * anything outside printable ASCII becomes '?'. */
void trust_printable_only(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			*s = '?';
}

static bool ends_with_json(const char *path)
{
	size_t n = strlen(path);
	return n > 5 && strcmp(path + n - 5, ".json") == 0;
}

int sg_trust_package_load(sg_trust_package **out, const char *path)
{
	*out = NULL;
	SG_ENSURE(path && ends_with_json(path), SG_EINVAL, "default package %s: the file name must end in .json",
	          path ? path : "(none)");
	uint8_t *raw SG_AUTOFREE = NULL;
	size_t len = 0;
	SG_TRY(sg_file_read(path, SG_TRUST_PACKAGE_MAX, &raw, &len));
	return sg_trust_package_parse(out, raw, len, path);
}

int sg_trust_package_parse(sg_trust_package **out, const void *data, size_t len, const char *what)
{
	*out = NULL;
	SG_ENSURE(len <= SG_TRUST_PACKAGE_MAX, SG_EINVAL, "default package %s: larger than %u bytes", what,
	          SG_TRUST_PACKAGE_MAX);
	json_error_t jerr;
	json_t *doc = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
	trust_printable_only(jerr.text);
	SG_ENSURE(doc, SG_EINVAL, "default package %s: not JSON: %s (line %d)", what, jerr.text, jerr.line);
	const json_t *jb = json_object_get(doc, "bundle");
	const char *name = json_string_value(json_object_get(doc, "name"));
	const char *version = json_string_value(json_object_get(doc, "version"));
	const char *bundle = json_string_value(jb);
	size_t blen = bundle ? json_string_length(jb) : 0;
	int rc = SG_OK;
	if (!json_is_object(doc) || !name || !version || !bundle)
		rc = sg_error_set(SG_EINVAL, "default package %s: needs the strings name, version and bundle", what);
	else if (!printable(name, PKG_STR_MAX) || !printable(version, PKG_STR_MAX))
		rc = sg_error_set(SG_EINVAL, "default package %s: name and version must be 1..%d printable bytes", what,
		                  PKG_STR_MAX);
	sg_certset *set = NULL;
	if (rc == SG_OK)
		rc = sg_certset_new(&set, NULL);
	if (rc == SG_OK && (rc = sg_certset_add_pem(set, bundle, blen)) < 0)
		rc = sg_error_set(rc, "default package %s: %s", what, sg_error_last()->msg);
	if (rc == SG_OK && sg_certset_count(set) == 0)
		rc = sg_error_set(SG_EINVAL, "default package %s: the bundle holds no certificate", what);
	sg_certset_free(set);
	sg_trust_package *p = NULL;
	if (rc == SG_OK) {
		p = calloc(1, sizeof(*p));
		if (p)
			p->bundle = malloc(blen + 1);
		if (!p || !p->bundle) {
			rc = sg_error_set(SG_EINTERNAL, "default package: out of memory");
		} else {
			memcpy(p->bundle, bundle, blen);
			p->bundle[blen] = '\0';
			p->len = blen;
			uint8_t d[32];
			char h[17];
			rc = sg_sha256(bundle, blen, d);
			sg_hex_encode(h, d, 8);
			snprintf(p->id, sizeof(p->id), "%s-%s-%s", name, version, h);
		}
	}
	json_decref(doc);
	if (rc < 0) {
		sg_trust_package_free(p);
		return rc;
	}
	*out = p;
	return SG_OK;
}

void sg_trust_package_free(sg_trust_package *p)
{
	if (!p)
		return;
	free(p->bundle);
	free(p);
}

const char *sg_trust_package_id(const sg_trust_package *p)
{
	return p->id;
}

const char *sg_trust_package_bundle(const sg_trust_package *p, size_t *len)
{
	if (len)
		*len = p->len;
	return p->bundle;
}

int sg_trust_package_normalize_pem(const char *text, size_t len, const char *what, char **pem_out, size_t *len_out)
{
	*pem_out = NULL;
	*len_out = 0;
	SG_ENSURE(len <= SG_CERTSET_PEM_MAX, SG_EINVAL, "package: %s: more than %u bytes of PEM", what,
	          SG_CERTSET_PEM_MAX);
	sg_certset *set = NULL;
	SG_TRY(sg_certset_new(&set, NULL));
	int rc = sg_certset_add_pem(set, text, len);
	if (rc < 0)
		rc = sg_error_set(rc, "package: %s: %s", what, sg_error_last()->msg);
	if (rc == SG_OK && sg_certset_count(set) == 0)
		rc = sg_error_set(SG_EINVAL, "package: %s holds no certificate", what);
	if (rc == SG_OK)
		rc = sg_certset_pem(set, pem_out, len_out);
	sg_certset_free(set);
	return rc;
}

int sg_trust_package_normalize(const char *pem_path, char **pem_out, size_t *len_out)
{
	*pem_out = NULL;
	*len_out = 0;
	uint8_t *raw SG_AUTOFREE = NULL;
	size_t len = 0;
	SG_TRY(sg_file_read(pem_path, SG_CERTSET_PEM_MAX, &raw, &len));
	return sg_trust_package_normalize_pem((const char *)raw, len, pem_path, pem_out, len_out);
}

int sg_trust_package_json(const char *pem, size_t len, const char *name, const char *version, char **out)
{
	*out = NULL;
	SG_ENSURE(name && printable(name, PKG_STR_MAX) && version && printable(version, PKG_STR_MAX), SG_EINVAL,
	          "package: name and version must be 1..%d printable bytes", PKG_STR_MAX);
	json_t *doc = json_pack("{s:s, s:s%, s:s}", "name", name, "bundle", pem, len, "version", version);
	SG_ENSURE(doc, SG_EINTERNAL, "package: out of memory");
	*out = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(doc);
	SG_ENSURE(*out, SG_EINTERNAL, "package: out of memory");
	return SG_OK;
}

int sg_trust_package_write(const char *pem_path, const char *name, const char *version, const char *out_path)
{
	SG_ENSURE(out_path && ends_with_json(out_path), SG_EINVAL, "package: the output file name must end in .json");
	SG_ENSURE(name && printable(name, PKG_STR_MAX) && version && printable(version, PKG_STR_MAX), SG_EINVAL,
	          "package: name and version must be 1..%d printable bytes", PKG_STR_MAX);
	char *pem = NULL, *text = NULL;
	size_t plen = 0;
	SG_TRY(sg_trust_package_normalize(pem_path, &pem, &plen));
	int rc = sg_trust_package_json(pem, plen, name, version, &text);
	free(pem);
	if (rc == SG_OK)
		rc = sg_file_write_atomic(out_path, text, strlen(text), 0644);
	free(text);
	return rc;
}
