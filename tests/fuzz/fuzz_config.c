/*
 * Fuzz target for the settings parser (common/sg_opt.c).
 *
 * The input is (1) a config file's bytes, parsed against a table that has
 * one row of every type (bounded INT and DURATION, a length-capped STRING, a
 * PATH resolved against a base folder, an ENUM, a BOOL, a LOG_LEVEL and a
 * flag_only row),
 * and (2) split at NUL bytes into an argument vector for sg_opt_parse with
 * the same table minus the "config" row (so no file is ever opened). After
 * a successful parse every value must be within its row's bounds; sg_opt_free
 * must release everything (LeakSanitizer checks).
 */
#include "sg_opt.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct settings {
	char *config;
	char *name;
	char *key_path;
	int64_t workers;
	int64_t max_ttl;
	bool verbose;
	int mode;
	int log_level;
} settings;

static const char *const modes[] = {"ca", "ra", "offline", NULL};

#define ROWS                                                                                              \
	{"name", SG_OPT_STRING, offsetof(settings, name), "signet", 0, 64, NULL, "instance name", false},     \
	{"key-path", SG_OPT_PATH, offsetof(settings, key_path), NULL, 0, 0, NULL, "key file", false},        \
	{"workers", SG_OPT_INT, offsetof(settings, workers), "4", 1, 256, NULL, "worker threads", false},    \
	{"max-ttl", SG_OPT_DURATION, offsetof(settings, max_ttl), "90d", 60, 3650LL * 86400, NULL,         \
	 "longest validity", false},                                                                    \
	{"verbose", SG_OPT_BOOL, offsetof(settings, verbose), "false", 0, 0, NULL, "chatty", false},         \
	{"mode", SG_OPT_ENUM, offsetof(settings, mode), "ca", 0, 0, modes, "role", false},                   \
	{"log-level", SG_OPT_LOG_LEVEL, offsetof(settings, log_level), "info", 0, 0, NULL, "log level", false}

static const sg_opt file_table[] = {
	{"config", SG_OPT_PATH, offsetof(settings, config), NULL, 0, 0, NULL, "config file", true},
	ROWS,
};
static const sg_opt flag_table[] = {ROWS};

#define N(t) (sizeof(t) / sizeof((t)[0]))

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_bounds(const settings *s)
{
	check(s->workers >= 1 && s->workers <= 256);
	check(s->max_ttl >= 60 && s->max_ttl <= 3650LL * 86400);
	check(s->mode >= 0 && s->mode <= 2);
	check(s->log_level >= 0 && s->log_level <= 3); /* an sg_log_level */
	check(s->name && strlen(s->name) <= 64);
	check(!s->key_path || s->key_path[0] == '/');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	settings s;
	memset(&s, 0, sizeof(s));
	if (sg_opt_set(file_table, N(file_table), &s, "name", "x", "fuzz") != 0)
		abort();
	/* Defaults first, as sg_opt_parse would; then the file. */
	sg_opt_result res = {0};
	if (sg_opt_parse(file_table, N(file_table), &s, 0, NULL, &res) != 0)
		abort();
	if (sg_opt_parse_file_bytes(file_table, N(file_table), &s, (const char *)data, size, "fuzz.conf",
				    "/etc/signet") == 0)
		check_bounds(&s);
	check(s.config == NULL);
	sg_opt_free(file_table, N(file_table), &s);

	/* The same bytes as an argument vector (NUL-separated, at most 32). */
	char *copy = malloc(size + 1);
	check(copy != NULL);
	if (size)
		memcpy(copy, data, size);
	copy[size] = 0;
	char *argv[33];
	char *pos[33];
	int argc = 0;
	for (size_t i = 0; i <= size && argc < 32;) {
		argv[argc++] = copy + i;
		i += strlen(copy + i) + 1;
	}
	memset(&s, 0, sizeof(s));
	res.argv = pos;
	if (sg_opt_parse(flag_table, N(flag_table), &s, argc, argv, &res) == 0) {
		check(res.argc >= 0 && res.argc <= argc);
		if (!res.help) {
			check(s.workers >= 1 && s.workers <= 256);
			check(s.max_ttl >= 60 && s.max_ttl <= 3650LL * 86400);
			check(s.name && strlen(s.name) <= 64);
			check(s.log_level >= 0 && s.log_level <= 3);
		}
	}
	sg_opt_free(flag_table, N(flag_table), &s);
	free(copy);
	return 0;
}
