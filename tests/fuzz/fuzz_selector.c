/*
 * Fuzz target for label selectors (kube/sg_kube_selector.c): the input, cut
 * at its first NUL and at a little more than SG_KUBE_SELECTOR_MAX, is
 * parsed as a selector. Oracles: the result is SG_OK with a selector or
 * SG_EINVAL (SG_EINTERNAL only for out of memory) without one; a refusal's
 * message is printable ASCII; an accepted selector's string is a substring
 * of the input, parses again to a selector that matches exactly as it does
 * on a fixed set of label objects, and a selector of everything matches
 * every one of them. Nothing may crash or leak.
 */
#include "sg_kube_selector.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

/* Label sets that make the operators differ: empty, plain, numbers at the
 * int64 edges, empty values, prefixed keys, keys named like keywords, and
 * a value that is not a string. Built once; they stay reachable. */
static const char *const label_texts[] = {
    "{}",
    "{\"a\":\"b\"}",
    "{\"a\":\"1\",\"b\":\"\",\"example.com/app\":\"web\",\"in\":\"notin\",\"x\":\"y\"}",
    "{\"a\":\"-5\",\"b\":\"9223372036854775807\",\"c\":\"-9223372036854775808\",\"d\":\"007\"}",
    "{\"a\":\"9223372036854775808\",\"b\":\"+3\",\"c\":\"1.5\",\"d\":\"v2\"}",
    "{\"a\":5,\"b\":null,\"c\":true,\"d\":[\"x\"]}",
};
#define NLABELS (sizeof(label_texts) / sizeof(label_texts[0]))

static json_t *label_sets[NLABELS + 1]; /* the last: NULL, no labels at all */

static void init_labels(void)
{
	if (label_sets[0])
		return;
	for (size_t i = 0; i < NLABELS; i++) {
		label_sets[i] = json_loads(label_texts[i], 0, NULL);
		check(label_sets[i] != NULL);
	}
}

static void check_message(void)
{
	const char *msg = sg_error_last()->msg;
	check(msg[0] != 0);
	for (const char *p = msg; *p; p++)
		check(*p >= 0x20 && *p < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init_labels();
	size_t n = size < SG_KUBE_SELECTOR_MAX + 8 ? size : SG_KUBE_SELECTOR_MAX + 8;
	char *s = malloc(n + 1);
	check(s != NULL);
	memcpy(s, data, n);
	s[n] = 0;

	sg_kube_selector *sel = (sg_kube_selector *)&sel;
	int rc = sg_kube_selector_parse(&sel, s, NULL);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_EINTERNAL);
	if (rc != SG_OK) {
		check(sel == NULL);
		check_message();
		free(s);
		return 0;
	}
	check(sel != NULL);
	const char *str = sg_kube_selector_string(sel);
	check(str != NULL && strstr(s, str) != NULL);

	sg_kube_selector *again = NULL;
	rc = sg_kube_selector_parse(&again, str, "reparsed selector");
	check(rc == SG_OK || rc == SG_EINTERNAL);
	if (again) {
		check(strcmp(sg_kube_selector_string(again), str) == 0);
		check(sg_kube_selector_everything(again) == sg_kube_selector_everything(sel));
	}
	for (size_t i = 0; i <= NLABELS; i++) {
		bool m = sg_kube_selector_matches(sel, label_sets[i]);
		if (sg_kube_selector_everything(sel))
			check(m);
		if (again)
			check(sg_kube_selector_matches(again, label_sets[i]) == m);
	}
	sg_kube_selector_free(again);
	sg_kube_selector_free(sel);
	free(s);
	return 0;
}
