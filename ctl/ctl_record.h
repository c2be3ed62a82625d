/*
 * The rotation record (rotation.state, beside signet.conf): what signetctl
 * rotate writes before each step and reads back on the next command
 * (ctl_rotate.c says why a record, and when it is written). Text, one
 * "name = value" line per field, '#' comments; the format is this file's.
 *
 * Reading is strict: a record signetctl cannot have written (an unknown
 * name or one given twice, a value out of range or longer than its field,
 * a control or NUL byte, a phase it has no step for, a missing key, root
 * or generation) is refused whole, never acted on in part. What
 * ctl_record_format writes, ctl_record_parse takes back unchanged.
 *
 * Pure: no I/O, no globals. Not a public module header: signetctl's own
 * (and fuzz_rotate_record's).
 */
#ifndef CTL_RECORD_H
#define CTL_RECORD_H

#include "sg_error.h"
#include "sg_init.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_RECORD_URI_MAX 1024
#define CTL_RECORD_TEXT_MAX (64 * 1024) /* bytes of a record read */

typedef struct ctl_record {
	char phase[16]; /* beginning, begun, awaiting-import, activating, active, finishing, finished */
	int64_t gen;    /* the new root's generation (init's root is 1) */
	char old_key[CTL_RECORD_URI_MAX], new_key[CTL_RECORD_URI_MAX];
	char old_cert[PATH_MAX];      /* the old root (ca-cert at begin), absolute */
	char old_root_conf[PATH_MAX]; /* root-cert at begin, absolute (for status) */
	int64_t key_type;             /* sg_key_type of the new key */
	char ca_name[SG_INIT_CA_NAME_MAX + 1];
	int64_t ca_ttl;
	int64_t since; /* when the phase was entered */
	int64_t activated_at, wait;
	int64_t keep_old_key;
	int64_t intermediate; /* an intermediate under an external root (import brings its next certificate) */
	int64_t has_chain;    /* import brought a chain (chain-gN.pem) */
	int64_t new_root;     /* import brought a new root (root-cert-gN.pem) */
	char subject[1024];   /* an intermediate's next CSR subject */
} ctl_record;

/* Reads len bytes of text into *out (zeroed first); text[len] must be
 * readable and is NUL (sg_file_read's buffers are), and text is cut into
 * lines in place. SG_EINVAL with the reason (printable ASCII: a name from
 * the text is shown with other bytes as '?') when it is not a record
 * ctl_record_format could have written. */
int ctl_record_parse(ctl_record *out, char *text, size_t len) SG_MUST_CHECK;

/* Writes r as a record into out (cap bytes, NUL-terminated); *len its
 * length. SG_EINVAL when a string holds a control byte (the record is
 * line-based and ctl_record_parse would refuse it) or out is too small. */
int ctl_record_format(const ctl_record *r, char *out, size_t cap, size_t *len) SG_MUST_CHECK;

#endif
