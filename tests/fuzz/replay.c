/*
 * Corpus replay: a main() for a fuzz target, so that its checked-in corpus
 * runs as an ordinary ctest in every build (gcc, clang, sanitizers) without
 * libFuzzer. Each argument is a file or a directory; every regular file of a
 * directory (not recursive, sorted by name so runs are reproducible) is fed
 * to LLVMFuzzerTestOneInput once, in its own exact-size heap buffer so that
 * ASan sees any read past the end. A crash or sanitizer report fails the
 * test; so does an empty or missing corpus, since a target without one tests
 * nothing.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Largest input replayed; corpus files are small by policy. */
#define REPLAY_MAX (4u << 20)

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	uint8_t *buf = malloc(REPLAY_MAX);
	size_t n = buf ? fread(buf, 1, REPLAY_MAX, f) : 0;
	int err = !buf || ferror(f) || !feof(f);
	fclose(f);
	if (err) {
		fprintf(stderr, "%s: unreadable or larger than %u bytes\n", path, REPLAY_MAX);
		free(buf);
		return -1;
	}
	/* Exact-size copy: one byte past the input is outside the allocation. */
	uint8_t *exact = malloc(n ? n : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file in dir; returns the count, or -1. */
static long run_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		perror(dir);
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			char **grown = realloc(names, cap * sizeof(*names));
			if (!grown)
				abort();
			names = grown;
		}
		names[n] = strdup(e->d_name);
		if (!names[n])
			abort();
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), by_name);
	long count = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(dir) + 1 + strlen(names[i]) + 1;
		char *path = malloc(len);
		if (!path)
			abort();
		snprintf(path, len, "%s/%s", dir, names[i]);
		struct stat st;
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(path) < 0)
				count = -1;
			else if (count >= 0)
				count++;
		}
		free(path);
		free(names[i]);
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	long total = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		long n = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0 ? 1 : -1;
		if (n < 0)
			return 1;
		total += n;
	}
	printf("replayed %ld inputs\n", total);
	if (total == 0) {
		fprintf(stderr, "no inputs: a fuzz target needs a checked-in corpus\n");
		return 1;
	}
	return 0;
}
