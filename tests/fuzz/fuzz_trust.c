/*
 * Fuzz target for what signet-trust reads from users: a Bundle as the API
 * server hands it over (trust/sg_trust.c's spec checks: sources, targets,
 * selectors, formats) and a default CA package file. The first byte
 * chooses: even, the rest is a Bundle's JSON; odd, a package's JSON. A
 * Bundle is tried twice, as given and with metadata.name forced to a valid
 * name so that the spec itself is reached. Oracles: SG_OK or SG_EINVAL
 * (SG_EINTERNAL only for out of memory) with a printable message; an
 * accepted package has an id "<name>-<version>-<16 hex>" and a bundle
 * that parses again as a package. Nothing may crash, hang or leak.
 */
#include "sg_error.h"
#include "sg_trust.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_refusal(int rc)
{
	check(rc == SG_EINVAL || rc == SG_EINTERNAL);
	for (const char *m = sg_error_last()->msg; *m; m++)
		check((unsigned char)*m >= 0x20 && (unsigned char)*m < 0x7f);
}

static void bundle(const uint8_t *data, size_t size)
{
	json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (!doc)
		return;
	int rc = sg_trust_spec_check(doc);
	if (rc != SG_OK)
		check_refusal(rc);
	if (json_is_object(doc)) {
		json_t *meta = json_object_get(doc, "metadata");
		if (!json_is_object(meta)) {
			meta = json_object();
			json_object_set_new(doc, "metadata", meta);
		}
		json_object_set_new(meta, "name", json_string("fuzz"));
		rc = sg_trust_spec_check(doc);
		if (rc != SG_OK)
			check_refusal(rc);
	}
	json_decref(doc);
}

static void package(const uint8_t *data, size_t size)
{
	sg_trust_package *p = NULL;
	int rc = sg_trust_package_parse(&p, data, size, "fuzz");
	if (rc != SG_OK) {
		check(p == NULL);
		check_refusal(rc);
		return;
	}
	const char *id = sg_trust_package_id(p);
	size_t n = strlen(id);
	check(n > 17 && id[n - 17] == '-' && strspn(id + n - 16, "0123456789abcdef") == 16);
	size_t len;
	const char *pem = sg_trust_package_bundle(p, &len);
	json_t *again = json_pack("{s:s, s:s%, s:s}", "name", "n", "bundle", pem, len, "version", "v");
	char *text = json_dumps(again, JSON_COMPACT);
	sg_trust_package *q = NULL;
	check(text && sg_trust_package_parse(&q, text, strlen(text), "again") == SG_OK);
	free(text);
	json_decref(again);
	sg_trust_package_free(q);
	sg_trust_package_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		package(data + 1, size - 1);
	else
		bundle(data + 1, size - 1);
	return 0;
}
