/*
 * p11_fault_control: how a C test steers p11_fault (p11_fault.c, the
 * fault-injection PKCS#11 module in front of SoftHSM2) through its control
 * file. One writer for every program that uses the module: the SG hsm
 * tests through hsm_fixture.h, the signer pool's sizing test directly.
 * Header-only, as each test file is its own program.
 */
#ifndef P11_FAULT_CONTROL_H
#define P11_FAULT_CONTROL_H

#include "sg_clock.h"
#include "sg_test.h"

#include <stdio.h>

/* Replaces the control file at path with text (write, then rename: the
 * module never reads a half-written one) and waits past the module's
 * re-check interval: it stats the file on the first call 10 ms or more
 * after its last look, so after 30 ms the next call reads the new one,
 * however slow the machine (a fixed time is exact here, not a guess at a
 * state). */
static __attribute__((unused)) void p11_fault_control(const char *path, const char *text)
{
	char tmp[1100];
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	FILE *f = fopen(tmp, "w");
	SG_CHECK(f != NULL);
	if (!f)
		return;
	fputs(text, f);
	fclose(f);
	SG_CHECK(rename(tmp, path) == 0);
	sg_sleep_ms(30);
}

#endif
