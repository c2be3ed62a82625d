/*
 * Fuzz target for the kubeconfig reader (kube/sg_kube_config.c,
 * sg_kube_config_from_bytes): the bytes are a kubeconfig, read with the
 * current context and with a context named "fuzz". Relative file names
 * resolve against a folder that does not exist, so only absolute names
 * open anything (the reader takes regular files alone, bounded).
 *
 * Oracles: SG_OK with a configuration, or SG_EINVAL, SG_ENOTFOUND or
 * SG_EINTERNAL (out of memory) without one and with a non-empty printable
 * message (a name or path from the input is made printable before it is
 * quoted: messages reach logs and statuses); an accepted configuration's
 * server is an https:// URL of printable bytes without a query, a
 * fragment or a trailing '/', whose authority has a host and no user
 * information, and its namespace a DNS label, "default" when the context
 * names none. Nothing may crash, leak or run long (the
 * YAML bounds stop aliases and nesting).
 */
#include "sg_kube.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NO_DIR "/nonexistent/signet-fuzz-kubeconfig"

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_server(const char *s)
{
	check(s && strncmp(s, "https://", 8) == 0);
	size_t n = strlen(s);
	check(n > 8 && n < 512 && s[n - 1] != '/');
	for (size_t i = 0; i < n; i++)
		check(s[i] > 0x20 && s[i] < 0x7f && s[i] != '?' && s[i] != '#');
	size_t host = strcspn(s + 8, ":/@");
	check(host > 0 && !memchr(s + 8, '@', strcspn(s + 8, "/")));
}

static void check_namespace(const char *ns)
{
	size_t n = ns ? strlen(ns) : 0;
	check(n >= 1 && n <= 63);
	for (size_t i = 0; i < n; i++)
		check((ns[i] >= 'a' && ns[i] <= 'z') || (ns[i] >= '0' && ns[i] <= '9') || ns[i] == '-');
}

static void read_with(const uint8_t *data, size_t size, const char *context)
{
	sg_kube_config *c = NULL;
	int rc = sg_kube_config_from_bytes(&c, data, size, context, NO_DIR);
	check(rc == SG_OK || rc == SG_EINVAL || rc == SG_ENOTFOUND || rc == SG_EINTERNAL);
	if (rc == SG_OK) {
		check(c != NULL);
		check_server(sg_kube_config_server(c));
		check_namespace(sg_kube_config_namespace(c));
	} else {
		check(c == NULL);
		const char *msg = sg_error_last()->msg;
		check(*msg != '\0');
		for (const char *p = msg; *p; p++)
			check(*p >= 0x20 && *p < 0x7f);
	}
	sg_kube_config_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	read_with(data, size, NULL);
	read_with(data, size, "fuzz");
	return 0;
}
