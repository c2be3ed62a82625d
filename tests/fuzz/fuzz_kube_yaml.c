/*
 * Fuzz target for the YAML adapter (kube/yaml/sg_kube_yaml.c): the input is
 * read typed (as signetctl policy check reads a manifest, one document) and
 * untyped (as the kubeconfig reader does), under small bounds so that the
 * bounds themselves are reached. Oracles: SG_OK with an object, or
 * SG_EINVAL (SG_EINTERNAL only for out of memory) without one and a
 * printable message that names the document; an accepted tree is no
 * deeper than max_depth; and the typed reading accepts only where the
 * untyped one does, except for a second document (untyped readers stop
 * after the first). Nothing may crash, leak or run long (the nesting bound
 * stops libyaml's scanner early).
 */
#include "sg_kube_yaml.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DEPTH 8

static void check(int cond)
{
	if (!cond)
		abort();
}

static size_t depth_of(const json_t *v)
{
	size_t d = 0, i;
	const char *k;
	json_t *m;
	if (json_is_object(v)) {
		json_object_foreach((json_t *)v, k, m)
		{
			size_t c = depth_of(m);
			d = c > d ? c : d;
		}
		return d + 1;
	}
	if (json_is_array(v)) {
		json_array_foreach(v, i, m)
		{
			size_t c = depth_of(m);
			d = c > d ? c : d;
		}
		return d + 1;
	}
	return 0;
}

static int read_as(const uint8_t *data, size_t size, bool typed)
{
	sg_kube_yaml_options o = {.what = "fuzz",
	                          .max_bytes = 64 * 1024,
	                          .max_depth = DEPTH,
	                          .max_nodes = 2000,
	                          .typed = typed,
	                          .single = typed};
	json_t *j = NULL;
	int rc = sg_kube_yaml_to_json(&j, data, size, &o);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc == SG_OK) {
		check(json_is_object(j));
		check(depth_of(j) <= DEPTH + 1); /* the root is depth 0, its members 1 ... */
	} else {
		check(j == NULL);
		const char *msg = sg_error_last()->msg;
		check(strncmp(msg, "fuzz: ", 6) == 0);
		for (const char *p = msg; *p; p++)
			check(*p >= 0x20 && *p < 0x7f);
	}
	json_decref(j);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int typed = read_as(data, size, true);
	int untyped = read_as(data, size, false);
	if (typed == SG_OK)
		check(untyped == SG_OK);
	return 0;
}
