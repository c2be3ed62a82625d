/*
 * cel-spec's conformance cases (tests/cel/conformance/cases.tsv, made by
 * convert.py from cel-spec's tests/simple/testdata) against sg_cel.
 *
 * Each case: compile the expression (type-checked unless the case says
 * unchecked), evaluate it, and compare the result with the expected value,
 * itself a CEL literal expression evaluated by sg_cel, using the strict,
 * type-exact sg_cel_value_identical (every NaN equal to every NaN, -0.0
 * apart from 0.0). An expected "error" passes when the expression fails to
 * compile or to evaluate (cel-spec's runner counts a parse error the same
 * way).
 *
 * The run fails when fewer cases pass than conformance/pass_min records,
 * and prints every failing case's id, expression, what was expected and
 * what came; CEL_CONFORMANCE_VERBOSE=1 prints the passing ones too, and a
 * case id as the first argument runs that one case.
 */
#include "sg_cel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* PostgreSQL COPY text-format unescaping (\\ \t \n \r \xHH), in place;
 * returns the length (a field may hold NUL). */
static size_t unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (*p == '\\' && p[1] == 'x' && hexval(p[2]) >= 0 && hexval(p[3]) >= 0) {
			*o++ = (char)(hexval(p[2]) * 16 + hexval(p[3]));
			p += 3;
		} else if (*p == '\\' && p[1]) {
			p++;
			*o++ = *p == 't' ? '\t' : *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p;
		} else {
			*o++ = *p;
		}
	}
	*o = 0;
	return (size_t)(o - s);
}

static int eval_text(sg_cel_value **out, const sg_cel_env *env, const char *text, size_t len, char *err, size_t cap)
{
	sg_cel_program *p = NULL;
	*out = NULL;
	if (sg_cel_compile(&p, env, text, len) < 0) {
		snprintf(err, cap, "%s", sg_error_last()->msg);
		return -1;
	}
	int rc = sg_cel_eval(out, p, NULL, NULL);
	if (rc < 0)
		snprintf(err, cap, "%s", sg_error_last()->msg);
	sg_cel_program_free(p);
	return rc;
}

static void show(const sg_cel_value *v, char *buf, size_t cap)
{
	char *j = NULL;
	if (sg_cel_value_json(&j, v) < 0) {
		snprintf(buf, cap, "(unrenderable)");
		return;
	}
	snprintf(buf, cap, "%s", j);
	free(j);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

int main(int argc, char **argv)
{
	const char *dir = getenv("CEL_CONFORMANCE_DIR");
	const char *only = argc > 1 ? argv[1] : NULL;
	bool verbose = getenv("CEL_CONFORMANCE_VERBOSE") != NULL;
	char path[4096];
	if (!dir)
		dir = "tests/cel/conformance";
	snprintf(path, sizeof(path), "%s/cases.tsv", dir);
	char *text = read_file(path);
	if (!text) {
		fprintf(stderr, "cannot read %s\n", path);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/pass_min", dir);
	char *min_text = read_file(path);
	long pass_min = min_text ? strtol(min_text, NULL, 10) : 0;
	free(min_text);

	sg_cel_env *checked, *unchecked;
	if (sg_cel_env_new(&checked) < 0 || sg_cel_env_new(&unchecked) < 0)
		return 2;
	sg_cel_env_set_unchecked(unchecked, true);
	sg_cel_env_set_extensions(checked, SG_CEL_EXT_TWO_VAR);
	sg_cel_env_set_extensions(unchecked, SG_CEL_EXT_TWO_VAR);

	long total = 0, passed = 0;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		char *f[4];
		char *p = line;
		for (int i = 0; i < 4; i++) {
			f[i] = p;
			p = i < 3 ? strchr(p, '\t') : NULL;
			if (i < 3 && !p) {
				fprintf(stderr, "bad line: %s\n", line);
				return 2;
			}
			if (p)
				*p++ = 0;
		}
		size_t len[4];
		for (int i = 0; i < 4; i++)
			len[i] = unescape(f[i]);
		if (only && strcmp(only, f[0]) != 0)
			continue;
		total++;
		const sg_cel_env *env = strcmp(f[1], "unchecked") == 0 ? unchecked : checked;
		char err[1024] = "", got[2048] = "", want[2048] = "";
		sg_cel_value *v = NULL, *w = NULL;
		int rc = eval_text(&v, env, f[2], len[2], err, sizeof(err));
		bool ok;
		if (strcmp(f[3], "error") == 0) {
			ok = rc < 0;
			snprintf(want, sizeof(want), "an error");
		} else if (eval_text(&w, checked, f[3], len[3], want, sizeof(want)) < 0) {
			ok = false;
			fprintf(stderr, "%s: the expected value %s does not evaluate: %s\n", f[0], f[3], want);
		} else {
			ok = rc == 0 && sg_cel_value_identical(v, w);
			show(w, want, sizeof(want));
		}
		if (v)
			show(v, got, sizeof(got));
		else
			snprintf(got, sizeof(got), "%s", err);
		passed += ok;
		if (!ok || verbose)
			fprintf(stderr, "%s %s\n  expr: %s\n  want: %s\n  got:  %s\n", ok ? "PASS" : "FAIL", f[0], f[2],
			        want, got);
		sg_cel_value_free(v);
		sg_cel_value_free(w);
	}
	sg_cel_env_free(checked);
	sg_cel_env_free(unchecked);
	free(text);
	printf("cel conformance: %ld of %ld cases passed (%.1f%%); at least %ld must\n", passed, total,
	       total ? 100.0 * (double)passed / (double)total : 0.0, only ? 0 : pass_min);
	if (only)
		return passed == total ? 0 : 1;
	return passed >= pass_min && total > 0 ? 0 : 1;
}
