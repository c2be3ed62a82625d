/*
 * Test fixture: a real CA made by the real signetctl in a temporary folder
 * (SoftHSM2 token, key generated in it, self-signed root), plus the CSR
 * maker and chain verifier of openssl_fixture.h. Header-only: each test
 * file is its own program.
 */
#ifndef CA_FIXTURE_H
#define CA_FIXTURE_H

#include "openssl_fixture.h"
#include "sg_appliance.h"
#include "sg_opt.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fixture_args {
	sg_settings s;
} fixture_args;

typedef struct fixture {
	char dir[512];
	char conf[600];
	char root[600];
	fixture_args args;
} fixture;

static const sg_opt fixture_opts[] = {SG_SETTINGS_ROWS(fixture_args, s, "warn")};

/* Creates a CA of key_type in a fresh folder and reads its settings. */
static int fixture_ca(fixture *f, const char *key_type)
{
	memset(f, 0, sizeof(*f));
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(f->dir, sizeof(f->dir), "%s/caXXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(f->dir))
		return -1;
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "'%s' init --dir '%s/ca' --key-type %s --log-level warn >/dev/null", SIGNETCTL,
		 f->dir, key_type);
	if (system(cmd) != 0)
		return -1;
	snprintf(f->conf, sizeof(f->conf), "%s/ca/signet.conf", f->dir);
	snprintf(f->root, sizeof(f->root), "%s/ca/root-cert.pem", f->dir);
	char *argv[] = {"--config", f->conf, "--log-level", "warn"};
	char *pos[4];
	sg_opt_result res = {.argv = pos};
	return sg_opt_parse(fixture_opts, sizeof(fixture_opts) / sizeof(fixture_opts[0]), &f->args, 4, argv, &res);
}

static void fixture_free(fixture *f)
{
	sg_opt_free(fixture_opts, sizeof(fixture_opts) / sizeof(fixture_opts[0]), &f->args);
}

#endif
