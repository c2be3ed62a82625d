/*
 * Fuzz target for signetctl rotate's record reader (ctl/ctl_record.c,
 * ctl_record_parse): the bytes are a rotation.state file.
 *
 * Oracles: a refusal is SG_EINVAL with a non-empty message in printable
 * ASCII (signetctl prints it, naming the file). An accepted record has a
 * known phase, a generation of at least 2 and both keys and the old root;
 * ctl_record_format writes it back, and that text reads as the same
 * record, field for field (the round trip signetctl's next command relies
 * on). Nothing may crash, leak or read past the input.
 */
#include "ctl_record.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
	if (!cond)
		abort();
}

static char text[4 * PATH_MAX + 2 * CTL_RECORD_URI_MAX + 2048];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ctl_record r, again;
	char *copy = malloc(size + 1); /* the reader cuts lines in place, as in sg_file_read's buffer */
	check(copy != NULL);
	memcpy(copy, data, size);
	copy[size] = 0;
	int rc = ctl_record_parse(&r, copy, size);
	free(copy);
	if (rc != SG_OK) {
		check(rc == SG_EINVAL);
		const char *msg = sg_error_last()->msg;
		check(*msg != '\0');
		for (const char *p = msg; *p; p++)
			check(*p >= 0x20 && *p < 0x7f);
		return 0;
	}
	check(r.gen >= 2 && r.old_key[0] && r.new_key[0] && r.old_cert[0] && r.phase[0]);
	size_t len = 0;
	check(ctl_record_format(&r, text, sizeof(text), &len) == SG_OK);
	check(len == strlen(text));
	check(ctl_record_parse(&again, text, len) == SG_OK);
	check(memcmp(&r, &again, sizeof(r)) == 0);
	return 0;
}
