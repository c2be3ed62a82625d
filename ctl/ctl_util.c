/*
 * File and text helpers for signetctl. Files are written to a temporary name
 * in the same folder, fsync'ed and renamed, so a crash never leaves a
 * half-written certificate or config behind. Also the one signing helper
 * the subcommands share (csr signs its request with the HSM key).
 */
#include "ctl.h"
#include "sg_cert.h"
#include "sg_clock.h"
#include "sg_file.h"
#include "sg_guard.h"
#include "sg_issuer.h"
#include "sg_opt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ctl_write_file(const char *path, const void *data, size_t len, unsigned mode, int exclusive)
{
	return exclusive ? sg_file_write_new(path, data, len, mode) : sg_file_write_atomic(path, data, len, mode);
}

int ctl_read_file(const char *path, size_t max, uint8_t **out, size_t *len)
{
	int fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
	SG_ENSURE(fd >= 0, errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "cannot open %s: %s", path, strerror(errno));
	uint8_t *buf = malloc(max + 1);
	size_t got = 0;
	ssize_t n = 0;
	if (buf)
		while (got <= max && (n = read(fd, buf + got, max + 1 - got)) > 0)
			got += (size_t)n;
	int e = errno;
	close(fd);
	if (!buf)
		SG_BAIL(SG_EINTERNAL, "out of memory");
	if (n < 0) {
		free(buf);
		SG_BAIL(SG_EINVAL, "cannot read %s: %s", path, strerror(e));
	}
	if (got > max) {
		free(buf);
		SG_BAIL(SG_EINVAL, "%s is larger than %zu bytes", path, max);
	}
	buf[got] = 0;
	*out = buf;
	*len = got;
	return SG_OK;
}

char *ctl_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s/%s", dir, name);
	return s;
}

static const struct {
	const char *key;
	sg_name_attr attr;
	uint8_t tag;
} subject_keys[] = {
	{"CN", SG_NAME_CN, SG_DER_UTF8STRING},
	{"O", SG_NAME_O, SG_DER_UTF8STRING},
	{"OU", SG_NAME_OU, SG_DER_UTF8STRING},
	{"C", SG_NAME_C, SG_DER_PRINTABLESTRING},
	{"L", SG_NAME_L, SG_DER_UTF8STRING},
	{"ST", SG_NAME_ST, SG_DER_UTF8STRING},
	{"serialNumber", SG_NAME_SERIAL, SG_DER_PRINTABLESTRING},
};

int ctl_parse_subject(char *buf, sg_rdn *rdns, size_t max, size_t *n)
{
	*n = 0;
	char *save = NULL;
	for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
		while (*part == ' ')
			part++;
		char *eq = strchr(part, '=');
		SG_ENSURE(eq && eq != part && eq[1], SG_EINVAL, "subject part \"%s\" is not KEY=value", part);
		*eq = 0;
		SG_ENSURE(*n < max, SG_EINVAL, "subject has more than %zu parts", max);
		size_t i = 0;
		while (i < sizeof(subject_keys) / sizeof(subject_keys[0]) && strcmp(subject_keys[i].key, part) != 0)
			i++;
		SG_ENSURE(i < sizeof(subject_keys) / sizeof(subject_keys[0]), SG_EINVAL,
			  "unsupported subject attribute \"%s\" (CN, O, OU, C, L, ST, serialNumber)", part);
		for (const char *c = eq + 1; *c; c++)
			SG_ENSURE((unsigned char)*c >= 0x20 && *c != 0x7f, SG_EINVAL, "control byte in subject");
		SG_ENSURE(subject_keys[i].attr != SG_NAME_C || strlen(eq + 1) == 2, SG_EINVAL,
			  "C must be a two-letter country code");
		rdns[*n] = (sg_rdn){subject_keys[i].attr, subject_keys[i].tag,
				    {(const uint8_t *)eq + 1, strlen(eq + 1)}};
		(*n)++;
	}
	return SG_OK;
}

int ctl_update_config(const char *path, const char *const *names, const char *const *values, size_t n)
{
	uint8_t *old SG_AUTOFREE = NULL;
	size_t len;
	SG_TRY(ctl_read_file(path, SG_OPT_FILE_MAX, &old, &len));
	size_t cap = len + n * (PATH_MAX + 64) + 1;
	char *text SG_AUTOFREE = malloc(cap);
	SG_ENSURE(text, SG_EINTERNAL, "out of memory");
	size_t used = 0;
	bool done[8] = {false};
	char *save = NULL;
	for (char *line = strtok_r((char *)old, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		size_t i = 0;
		for (; i < n; i++) {
			size_t k = strlen(names[i]);
			if (strncmp(p, names[i], k) == 0 && (p[k] == ' ' || p[k] == '\t' || p[k] == '='))
				break;
		}
		if (i < n) {
			if (!done[i] && values[i])
				used += (size_t)snprintf(text + used, cap - used, "%s = %s\n", names[i], values[i]);
			done[i] = true;
		} else {
			used += (size_t)snprintf(text + used, cap - used, "%s\n", line);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (!done[i] && values[i])
			used += (size_t)snprintf(text + used, cap - used, "%s = %s\n", names[i], values[i]);
	SG_ENSURE(used < cap, SG_EINTERNAL, "config too long");
	return ctl_write_file(path, text, used, 0644, 0);
}

int ctl_ca_csr(sg_hsm *hsm, const char *subject_text, char **pem, size_t *pem_len)
{
	char *subject SG_AUTOFREE = strdup(subject_text);
	SG_ENSURE(subject, SG_EINTERNAL, "out of memory");
	sg_rdn rdns[SG_CSR_MAX_RDNS];
	size_t n;
	SG_TRY(ctl_parse_subject(subject, rdns, SG_CSR_MAX_RDNS, &n));
	SG_ENSURE(n > 0, SG_EINVAL, "--subject is empty");
	uint8_t *spki SG_AUTOFREE = NULL;
	size_t spki_len;
	SG_TRY(sg_hsm_public_key(hsm, &spki, &spki_len));
	sg_pubkey key;
	SG_TRY(sg_pubkey_parse(&key, spki, spki_len));
	sg_key_type type;
	SG_TRY(sg_hsm_key_type(hsm, &type));
	uint8_t *info SG_AUTOFREE = malloc(SG_CSR_MAX_DER);
	uint8_t *out SG_AUTOFREE = malloc(SG_CSR_MAX_DER + 1200);
	SG_ENSURE(info && out, SG_EINTERNAL, "out of memory");
	sg_der_writer iw, ow;
	sg_der_writer_init(&iw, info, SG_CSR_MAX_DER);
	SG_TRY(sg_csr_encode_info(&iw, rdns, n, &key));
	sg_issuer *is = NULL;
	SG_TRY(sg_issuer_new(&is, NULL, hsm, NULL));
	sg_der_writer_init(&ow, out, SG_CSR_MAX_DER + 1200);
	int rc = sg_issuer_sign_tbs(is, sg_sigalg_for_ca(type), iw.buf, iw.len, sg_now_ns() + 30ull * 1000000000u, &ow);
	sg_issuer_free(is);
	SG_TRY(rc);
	return sg_pem_encode("CERTIFICATE REQUEST", ow.buf, ow.len, pem, pem_len);
}
