/*
 * Tests for sg_metrics: registration rules, the exposition text parsed back
 * line by line (types, help, hostile label values), histograms, exact totals
 * under concurrent updates, the series bound, callbacks, and a printed
 * micro-measurement of the hot path.
 */
#include "sg_metrics.h"
#include "sg_test.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* ---- a strict parser for the exposition text ------------------------- */

#define MAXL 8

typedef struct sample {
	char name[160];
	size_t nlabels;
	char label[MAXL][64];
	char value[MAXL][512]; /* unescaped */
	double v;
} sample;

/* Parses one sample line (without the newline); false if it breaks the
 * format 0.0.4 grammar. */
static bool parse_sample(const char *line, sample *s)
{
	memset(s, 0, sizeof(*s));
	size_t i = 0, n = 0;
	while (line[i] && line[i] != '{' && line[i] != ' ') {
		if (n + 1 >= sizeof(s->name))
			return false;
		s->name[n++] = line[i++];
	}
	if (n == 0)
		return false;
	if (line[i] == '{') {
		i++;
		while (line[i] != '}') {
			if (s->nlabels == MAXL)
				return false;
			size_t k = 0;
			while (line[i] && line[i] != '=') {
				if (k + 1 >= sizeof(s->label[0]))
					return false;
				s->label[s->nlabels][k++] = line[i++];
			}
			if (line[i++] != '=' || line[i++] != '"')
				return false;
			k = 0;
			for (;;) {
				char c = line[i++];
				if (c == '\0' || c == '\n')
					return false;
				if (c == '"')
					break;
				if (c == '\\') {
					char e = line[i++];
					c = e == 'n' ? '\n' : e == '\\' ? '\\' : e == '"' ? '"' : 0;
					if (!c)
						return false;
				}
				if (k + 1 >= sizeof(s->value[0]))
					return false;
				s->value[s->nlabels][k++] = c;
			}
			s->nlabels++;
			if (line[i] == ',')
				i++;
			else if (line[i] != '}')
				return false;
		}
		i++;
	}
	if (line[i++] != ' ')
		return false;
	const char *num = line + i;
	if (strcmp(num, "+Inf") == 0) {
		s->v = INFINITY;
		return true;
	}
	char *end;
	s->v = strtod(num, &end);
	return end != num && *end == '\0';
}

/* Splits text into lines in place; every line must end with \n. */
static size_t split_lines(char *text, char **lines, size_t max)
{
	size_t n = 0;
	char *p = text;
	while (*p && n < max) {
		char *nl = strchr(p, '\n');
		if (!nl)
			return (size_t)-1;
		*nl = '\0';
		lines[n++] = p;
		p = nl + 1;
	}
	return n;
}

static char *render(sg_metrics *m)
{
	char *out = NULL;
	size_t len = 0;
	SG_CHECK_OK(sg_metrics_render(m, &out, &len));
	SG_CHECK(out && strlen(out) == len);
	return out;
}

/* Finds the sample with this name whose labels match "k=v" pairs given as
 * a NULL-ended list; returns its value or NAN. */
static double value_of(const char *text, const char *name, const char *const *kv)
{
	char *copy = strdup(text);
	char *lines[4096];
	size_t n = split_lines(copy, lines, 4096);
	double v = NAN;
	for (size_t i = 0; i < n && isnan(v); i++) {
		sample s;
		if (lines[i][0] == '#' || !parse_sample(lines[i], &s) || strcmp(s.name, name) != 0)
			continue;
		bool all = true;
		for (size_t k = 0; kv && kv[k]; k += 2) {
			bool found = false;
			for (size_t j = 0; j < s.nlabels; j++)
				found |= strcmp(s.label[j], kv[k]) == 0 && strcmp(s.value[j], kv[k + 1]) == 0;
			all &= found;
		}
		if (all)
			v = s.v;
	}
	free(copy);
	return v;
}

/* ---- registration ---------------------------------------------------- */

static double cb_value(void *arg)
{
	return *(double *)arg;
}

static void t_names(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *f = NULL;
	const char *one[] = {"a"};
	const char *two_same[] = {"a", "a"};
	const char *colon[] = {"a:b"};
	const char *reserved[] = {"__name"};
	const char *le[] = {"le"};
	const char *five[] = {"a", "b", "c", "d", "e"};
	double b[] = {1, 2};
	double bad_b[] = {2, 1};
	double inf_b[] = {1, INFINITY};

	SG_CHECK_OK(sg_metrics_counter(&f, m, "signet_ok:total_1", "ok", NULL, 0));
	SG_CHECK_RC(sg_metrics_counter(&f, m, "signet_ok:total_1", "dup", NULL, 0), SG_EINVAL);
	SG_CHECK_MSG("clashes");
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "1abc", "h", NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "a-b", "h", NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "", "h", NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, NULL, "h", NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "x", NULL, NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "x", "h", two_same, 2), SG_EINVAL);
	SG_CHECK_MSG("repeated");
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "x", "h", colon, 1), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "x", "h", reserved, 1), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "x", "h", five, 5), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_histogram(&f, m, "x", "h", b, 2, le, 1), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_histogram(&f, m, "x", "h", bad_b, 2, NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_histogram(&f, m, "x", "h", inf_b, 2, NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_histogram(&f, m, "x", "h", b, 0, NULL, 0), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_gauge_fn(m, "x", "h", NULL, NULL), SG_EINVAL);
	SG_CHECK_OK(sg_metrics_gauge(&f, m, "x", "h", one, 1));
	/* A histogram exposes name_bucket/_sum/_count: both directions clash. */
	SG_CHECK_OK(sg_metrics_histogram(&f, m, "lat", "h", b, 2, NULL, 0));
	SG_CHECK_RC(sg_metrics_counter(&f, m, "lat_count", "h", NULL, 0), SG_EINVAL);
	SG_CHECK_OK(sg_metrics_counter(&f, m, "req_sum", "h", NULL, 0));
	SG_CHECK_RC(sg_metrics_histogram(&f, m, "req", "h", b, 2, NULL, 0), SG_EINVAL);
	SG_CHECK_OK(sg_metrics_gauge_fn(m, "cb", "h", cb_value, NULL));
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "cb", "h", NULL, 0), SG_EINVAL);
	sg_metrics_free(m);
	sg_metrics_free(NULL);
}

static void t_too_many_families(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *f = NULL;
	char name[32];
	for (int i = 0; i < SG_METRICS_MAX_FAMILIES; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		SG_CHECK_OK(sg_metrics_gauge(&f, m, name, "h", NULL, 0));
	}
	SG_CHECK_RC(sg_metrics_gauge(&f, m, "one_more", "h", NULL, 0), SG_EINVAL);
	SG_CHECK_MSG("registry full");
	sg_metrics_free(m);
}

/* ---- rendering ------------------------------------------------------- */

static void t_render_exact(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *csr = NULL, *err = NULL, *g = NULL, *unused = NULL;
	const char *lab[] = {"error"};
	SG_CHECK_OK(sg_metrics_counter(&csr, m, "citadel_server_csr_count", "The number of CSRs received.", NULL, 0));
	SG_CHECK_OK(sg_metrics_counter(&err, m, "citadel_server_csr_sign_err_count", "Errors signing.", lab, 1));
	SG_CHECK_OK(sg_metrics_gauge(&g, m, "a_gauge", "Help with \\ and\nnewline.", NULL, 0));
	SG_CHECK_OK(sg_metrics_gauge(&unused, m, "b_never_used", "No series.", lab, 1));

	sg_series *s = NULL, *e1 = NULL, *e2 = NULL, *gs = NULL;
	SG_CHECK_OK(sg_metric_series(&s, csr, NULL));
	SG_CHECK_OK(sg_metric_series(&e1, err, (const char *[]){"TTL_ERROR"}));
	SG_CHECK_OK(sg_metric_series(&e2, err, (const char *[]){"CA_NOT_READY"}));
	SG_CHECK_OK(sg_metric_series(&gs, g, NULL));
	sg_series *again = NULL;
	SG_CHECK_OK(sg_metric_series(&again, err, (const char *[]){"TTL_ERROR"}));
	SG_CHECK(again == e1);

	sg_series_inc(s);
	sg_series_add(s, 41);
	sg_series_inc(e1);
	sg_series_add(e2, 3);
	sg_series_set(gs, 2.5);
	sg_series_gauge_add(gs, -4);
	/* Mismatched updates are ignored. */
	sg_series_observe(s, 1);
	sg_series_set(s, 100);
	sg_series_gauge_add(s, 100);
	sg_series_observe(gs, 1);

	char *out = render(m);
	const char *want = "# HELP a_gauge Help with \\\\ and\\nnewline.\n"
	                   "# TYPE a_gauge gauge\n"
	                   "a_gauge -1.5\n"
	                   "# HELP citadel_server_csr_count The number of CSRs received.\n"
	                   "# TYPE citadel_server_csr_count counter\n"
	                   "citadel_server_csr_count 42\n"
	                   "# HELP citadel_server_csr_sign_err_count Errors signing.\n"
	                   "# TYPE citadel_server_csr_sign_err_count counter\n"
	                   "citadel_server_csr_sign_err_count{error=\"CA_NOT_READY\"} 3\n"
	                   "citadel_server_csr_sign_err_count{error=\"TTL_ERROR\"} 1\n";
	SG_CHECK(strcmp(out, want) == 0);
	if (strcmp(out, want) != 0)
		fprintf(stderr, "got:\n%s", out);
	SG_CHECK(sg_series_value(s) == 42);
	SG_CHECK(sg_series_value(gs) == -1.5);
	free(out);

	/* An empty registry renders as "". */
	sg_metrics *empty = NULL;
	SG_CHECK_OK(sg_metrics_new(&empty));
	out = render(empty);
	SG_CHECK(out && out[0] == '\0');
	free(out);
	sg_metrics_free(empty);
	sg_metrics_free(m);
}

static void t_hostile_label_values(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *f = NULL;
	const char *labels[] = {"method", "peer"};
	SG_CHECK_OK(sg_metrics_counter(&f, m, "requests_total", "Requests.", labels, 2));

	const char *hostile[] = {
	    "a\"b",
	    "back\\slash",
	    "line\nbreak} 9999\nrequests_total{method=\"x\",peer=\"y\"} 1",
	    "\\\"\n\\n",
	    "",
	    "utf8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x94\x92",
	    "{}=,# HELP x",
	};
	size_t nh = sizeof(hostile) / sizeof(hostile[0]);
	for (size_t i = 0; i < nh; i++) {
		sg_series *s = NULL;
		SG_CHECK_OK(sg_metric_series(&s, f, (const char *[]){hostile[i], "p"}));
		sg_series_add(s, i + 1);
	}
	/* Invalid UTF-8, overlong forms, surrogates, too long, NULL: refused. */
	char longv[SG_METRICS_VALUE_MAX + 2];
	memset(longv, 'x', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	const char *bad[] = {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", longv};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_series *s = NULL;
		SG_CHECK_RC(sg_metric_series(&s, f, (const char *[]){bad[i], "p"}), SG_EINVAL);
	}
	sg_series *s = NULL;
	SG_CHECK_RC(sg_metric_series(&s, f, (const char *[]){NULL, "p"}), SG_EINVAL);
	SG_CHECK_RC(sg_metric_series(&s, f, NULL), SG_EINVAL);
	longv[SG_METRICS_VALUE_MAX] = '\0';
	SG_CHECK_OK(sg_metric_series(&s, f, (const char *[]){longv, "p"}));

	char *out = render(m);
	char *lines[64];
	size_t n = split_lines(out, lines, 64);
	/* HELP, TYPE, then one line per series: nothing leaked a newline. */
	SG_CHECK(n == 2 + nh + 1);
	SG_CHECK(strcmp(lines[0], "# HELP requests_total Requests.") == 0);
	SG_CHECK(strcmp(lines[1], "# TYPE requests_total counter") == 0);
	bool seen[16] = {false};
	for (size_t i = 2; i < n && n < 64; i++) {
		sample smp;
		SG_CHECK(parse_sample(lines[i], &smp));
		SG_CHECK(strcmp(smp.name, "requests_total") == 0);
		SG_CHECK(smp.nlabels == 2 && strcmp(smp.label[0], "method") == 0 && strcmp(smp.label[1], "peer") == 0);
		for (size_t k = 0; k < nh; k++) {
			if (strcmp(smp.value[0], hostile[k]) == 0) {
				SG_CHECK(smp.v == (double)(k + 1));
				seen[k] = true;
			}
		}
		/* Sorted by label value. */
		if (i > 2) {
			sample prev;
			SG_CHECK(parse_sample(lines[i - 1], &prev));
			SG_CHECK(strcmp(prev.value[0], smp.value[0]) < 0);
		}
	}
	for (size_t k = 0; k < nh; k++)
		SG_CHECK(seen[k]);
	SG_CHECK(strstr(lines[2], "method=\"\"") != NULL); /* "" sorts first */
	free(out);
	sg_metrics_free(m);
}

static void t_histogram(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *f = NULL;
	const char *lab[] = {"method"};
	SG_CHECK_OK(sg_metrics_histogram(&f, m, "signet_sign_seconds", "Latency.", SG_METRICS_LATENCY_BOUNDS,
	                                 SG_METRICS_LATENCY_NBOUNDS, lab, 1));
	sg_series *s = NULL;
	SG_CHECK_OK(sg_metric_series(&s, f, (const char *[]){"CreateCertificate"}));
	double obs[] = {0.0001, 0.0005, 0.0007, 0.003, 0.003, 0.2, 1, 9.99, 10, 11, 1e9, -1, NAN, INFINITY};
	for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++)
		sg_series_observe(s, obs[i]);
	sg_series_inc(s);                   /* ignored on a histogram */
	SG_CHECK(sg_series_value(s) == 13); /* NaN dropped */

	char *out = render(m);
	char *copy = strdup(out);
	char *lines[64];
	size_t n = split_lines(copy, lines, 64);
	SG_CHECK(n == 2 + 15 + 2);
	SG_CHECK(strcmp(lines[1], "# TYPE signet_sign_seconds histogram") == 0);
	double prev = -1, inf = -1, count = -2;
	const char *want_le[] = {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
	                         "0.25",   "0.5",   "1",      "2.5",   "5",    "10",    "+Inf"};
	for (size_t i = 2; i < n; i++) {
		sample smp;
		SG_CHECK(parse_sample(lines[i], &smp));
		SG_CHECK(strcmp(smp.value[0], "CreateCertificate") == 0);
		if (strcmp(smp.name, "signet_sign_seconds_bucket") == 0) {
			SG_CHECK(smp.nlabels == 2 && strcmp(smp.label[1], "le") == 0);
			SG_CHECK(strcmp(smp.value[1], want_le[i - 2]) == 0);
			SG_CHECK(smp.v >= prev);
			prev = smp.v;
			if (strcmp(smp.value[1], "+Inf") == 0)
				inf = smp.v;
		} else if (strcmp(smp.name, "signet_sign_seconds_count") == 0) {
			count = smp.v;
		} else {
			SG_CHECK(strcmp(smp.name, "signet_sign_seconds_sum") == 0);
			SG_CHECK(isinf(smp.v)); /* +Inf was observed */
		}
	}
	SG_CHECK(inf == count && count == 13);
	/* le is inclusive: 0.0005 lands in le="0.0005" with 0.0001 and -1. */
	SG_CHECK(value_of(out, "signet_sign_seconds_bucket", (const char *[]){"le", "0.0005", NULL}) == 3);
	SG_CHECK(value_of(out, "signet_sign_seconds_bucket", (const char *[]){"le", "0.001", NULL}) == 4);
	SG_CHECK(value_of(out, "signet_sign_seconds_bucket", (const char *[]){"le", "0.005", NULL}) == 6);
	SG_CHECK(value_of(out, "signet_sign_seconds_bucket", (const char *[]){"le", "1", NULL}) == 8);
	SG_CHECK(value_of(out, "signet_sign_seconds_bucket", (const char *[]){"le", "10", NULL}) == 10);
	free(copy);
	free(out);

	/* A finite sum, exactly. */
	sg_metric *h2 = NULL;
	sg_series *s2 = NULL;
	SG_CHECK_OK(sg_metrics_histogram(&h2, m, "h2", "h", (const double[]){1, 2}, 2, NULL, 0));
	SG_CHECK_OK(sg_metric_series(&s2, h2, NULL));
	sg_series_observe(s2, 0.5);
	sg_series_observe(s2, 1.5);
	sg_series_observe(s2, 4);
	out = render(m);
	SG_CHECK(strstr(out, "h2_bucket{le=\"1\"} 1\nh2_bucket{le=\"2\"} 2\nh2_bucket{le=\"+Inf\"} 3\n"
	                     "h2_sum 6\nh2_count 3\n") != NULL);
	free(out);
	sg_metrics_free(m);
}

static void t_series_bound(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *f = NULL;
	const char *lab[] = {"peer"};
	SG_CHECK_OK(sg_metrics_counter(&f, m, "c", "h", lab, 1));
	sg_series *first = NULL;
	char v[32];
	for (int i = 0; i < SG_METRICS_MAX_SERIES; i++) {
		sg_series *s = NULL;
		snprintf(v, sizeof(v), "peer-%02d", i);
		SG_CHECK_OK(sg_metric_series(&s, f, (const char *[]){v}));
		if (i == 0)
			first = s;
	}
	sg_series *s = NULL;
	SG_CHECK_RC(sg_metric_series(&s, f, (const char *[]){"one-too-many"}), SG_EINVAL);
	SG_CHECK_MSG("series limit");
	SG_CHECK_OK(sg_metric_series(&s, f, (const char *[]){"peer-00"}));
	SG_CHECK(s == first);
	char *out = render(m);
	char *lines[128];
	SG_CHECK(split_lines(out, lines, 128) == 2 + SG_METRICS_MAX_SERIES);
	free(out);
	sg_metrics_free(m);
}

static void t_callbacks(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	double expiry = 1.7e9, issued = 12;
	SG_CHECK_OK(
	    sg_metrics_gauge_fn(m, "citadel_server_root_cert_expiry_timestamp", "Root expiry.", cb_value, &expiry));
	SG_CHECK_OK(sg_metrics_counter_fn(m, "pool_issued_total", "Issued.", cb_value, &issued));
	SG_CHECK_RC(sg_metrics_counter_fn(m, "pool_issued_total", "Again.", cb_value, &issued), SG_EINVAL);
	char *out = render(m);
	SG_CHECK(strstr(out, "# TYPE citadel_server_root_cert_expiry_timestamp gauge\n"
	                     "citadel_server_root_cert_expiry_timestamp 1700000000\n") != NULL);
	SG_CHECK(strstr(out, "# TYPE pool_issued_total counter\npool_issued_total 12\n") != NULL);
	free(out);
	expiry = NAN;
	issued = 0.1;
	out = render(m);
	SG_CHECK(strstr(out, "citadel_server_root_cert_expiry_timestamp NaN\n") != NULL);
	SG_CHECK(strstr(out, "pool_issued_total 0.1\n") != NULL);
	free(out);
	expiry = -INFINITY;
	out = render(m);
	SG_CHECK(strstr(out, "citadel_server_root_cert_expiry_timestamp -Inf\n") != NULL);
	free(out);
	sg_metrics_free(m);
}

/* A module's stats struct through a table: each row reads its field from
 * a fresh snapshot; bad rows are refused by name. */
typedef struct stats_fixture {
	uint64_t done;
	uint32_t narrow; /* neither 64 bits nor a bool: refused */
	bool up;
	size_t depth;
} stats_fixture;

static int stats_calls;

static void stats_get(void *arg, void *out)
{
	stats_calls++;
	stats_fixture *o = out;
	SG_CHECK(o->done == 0 && !o->up); /* the registry hands a zeroed struct */
	*o = *(const stats_fixture *)arg;
}

static void t_stats_table(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	stats_fixture live = {.done = 41, .up = true, .depth = 3};
	static const sg_metrics_stat rows[] = {
		SG_METRICS_STAT_COUNTER(stats_fixture, done, "mod_done_total", "Done."),
		SG_METRICS_STAT_GAUGE(stats_fixture, up, "mod_up", "Up."),
		SG_METRICS_STAT_GAUGE(stats_fixture, depth, "mod_depth", "Depth."),
	};
	SG_CHECK_OK(sg_metrics_stats(m, rows, 3, stats_get, sizeof(stats_fixture), &live));
	live.done++;
	char *out = render(m);
	SG_CHECK(strstr(out, "# TYPE mod_done_total counter\nmod_done_total 42\n") != NULL);
	SG_CHECK(strstr(out, "# TYPE mod_up gauge\nmod_up 1\n") != NULL);
	SG_CHECK(strstr(out, "# TYPE mod_depth gauge\nmod_depth 3\n") != NULL);
	SG_CHECK(stats_calls == 3); /* one snapshot per family and scrape */
	free(out);
	live.up = false;
	out = render(m);
	SG_CHECK(strstr(out, "mod_up 0\n") != NULL);
	free(out);

	/* Hostile tables: a field of another width, a field past the struct,
	 * no getter, a struct too large, a clash with a family already there. */
	sg_metrics_stat bad = SG_METRICS_STAT_COUNTER(stats_fixture, narrow, "mod_narrow_total", "Narrow.");
	SG_CHECK_RC(sg_metrics_stats(m, &bad, 1, stats_get, sizeof(stats_fixture), &live), SG_EINVAL);
	SG_CHECK_MSG("mod_narrow_total");
	bad = (sg_metrics_stat){"mod_far_total", "Far.", false, sizeof(stats_fixture), sizeof(uint64_t)};
	SG_CHECK_RC(sg_metrics_stats(m, &bad, 1, stats_get, sizeof(stats_fixture), &live), SG_EINVAL);
	bad.offset = sizeof(stats_fixture) - 4; /* straddles the end */
	SG_CHECK_RC(sg_metrics_stats(m, &bad, 1, stats_get, sizeof(stats_fixture), &live), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_stats(m, rows, 1, NULL, sizeof(stats_fixture), &live), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_stats(m, rows, 1, stats_get, SG_METRICS_STATS_MAX + 1, &live), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_stats(m, rows, 1, stats_get, 0, &live), SG_EINVAL);
	SG_CHECK_RC(sg_metrics_stats(m, rows, 1, stats_get, sizeof(stats_fixture), &live), SG_EINVAL); /* clash */
	sg_metrics_stat unnamed = {NULL, "No name.", false, 0, sizeof(uint64_t)};
	SG_CHECK_RC(sg_metrics_stats(m, &unnamed, 1, stats_get, sizeof(stats_fixture), &live), SG_EINVAL);
	out = render(m);
	SG_CHECK(strstr(out, "mod_narrow") == NULL && strstr(out, "mod_far") == NULL);
	free(out);
	sg_metrics_free(m);
}

/* ---- concurrency ----------------------------------------------------- */

#define THREADS 8
#define PER_THREAD 100000

typedef struct hammer {
	sg_series *counter, *hist, *gauge;
	sg_metric *fam;
	int id;
} hammer;

static void *hammer_run(void *arg)
{
	hammer *h = arg;
	sg_series *mine = NULL;
	char v[16];
	snprintf(v, sizeof(v), "t%d", h->id % 4);
	if (sg_metric_series(&mine, h->fam, (const char *[]){v}) != 0)
		return NULL;
	for (int i = 0; i < PER_THREAD; i++) {
		sg_series_inc(h->counter);
		sg_series_inc(mine);
		sg_series_observe(h->hist, (double)(i % 4)); /* 0,1,2,3: exact sums */
		sg_series_gauge_add(h->gauge, 1);
	}
	return NULL;
}

typedef struct scraper {
	sg_metrics *m;
	atomic_bool stop;
	int scrapes;
	bool monotonic;
} scraper;

static void *scrape_run(void *arg)
{
	scraper *sc = arg;
	double last = 0;
	while (!atomic_load(&sc->stop)) {
		char *out = NULL;
		size_t len;
		if (sg_metrics_render(sc->m, &out, &len) != 0)
			continue;
		double c = value_of(out, "hits_total", NULL);
		double inf = value_of(out, "work_seconds_bucket", (const char *[]){"le", "+Inf", NULL});
		double cnt = value_of(out, "work_seconds_count", NULL);
		if (c < last || inf != cnt)
			sc->monotonic = false;
		last = c;
		sc->scrapes++;
		free(out);
	}
	return NULL;
}

static void t_threads_exact(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *c = NULL, *h = NULL, *g = NULL, *fam = NULL;
	SG_CHECK_OK(sg_metrics_counter(&c, m, "hits_total", "h", NULL, 0));
	SG_CHECK_OK(sg_metrics_histogram(&h, m, "work_seconds", "h", (const double[]){0.5, 1.5, 2.5}, 3, NULL, 0));
	SG_CHECK_OK(sg_metrics_gauge(&g, m, "level", "h", NULL, 0));
	SG_CHECK_OK(sg_metrics_counter(&fam, m, "per_thread_total", "h", (const char *[]){"t"}, 1));
	sg_series *cs = NULL, *hs = NULL, *gs = NULL;
	SG_CHECK_OK(sg_metric_series(&cs, c, NULL));
	SG_CHECK_OK(sg_metric_series(&hs, h, NULL));
	SG_CHECK_OK(sg_metric_series(&gs, g, NULL));

	scraper sc = {.m = m, .monotonic = true};
	atomic_init(&sc.stop, false);
	pthread_t st;
	SG_CHECK(pthread_create(&st, NULL, scrape_run, &sc) == 0);
	pthread_t th[THREADS];
	hammer hm[THREADS];
	for (int i = 0; i < THREADS; i++) {
		hm[i] = (hammer){cs, hs, gs, fam, i};
		SG_CHECK(pthread_create(&th[i], NULL, hammer_run, &hm[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&sc.stop, true);
	pthread_join(st, NULL);
	SG_CHECK(sc.monotonic);
	printf("  %d concurrent scrapes\n", sc.scrapes);

	const double total = (double)THREADS * PER_THREAD;
	char *out = render(m);
	SG_CHECK(value_of(out, "hits_total", NULL) == total);
	SG_CHECK(value_of(out, "work_seconds_count", NULL) == total);
	SG_CHECK(value_of(out, "work_seconds_bucket", (const char *[]){"le", "+Inf", NULL}) == total);
	SG_CHECK(value_of(out, "work_seconds_bucket", (const char *[]){"le", "0.5", NULL}) == total / 4);
	SG_CHECK(value_of(out, "work_seconds_bucket", (const char *[]){"le", "1.5", NULL}) == total / 2);
	SG_CHECK(value_of(out, "work_seconds_sum", NULL) == total / 4 * (0 + 1 + 2 + 3));
	SG_CHECK(value_of(out, "level", NULL) == total);
	for (int i = 0; i < 4; i++) {
		char v[16];
		snprintf(v, sizeof(v), "t%d", i);
		SG_CHECK(value_of(out, "per_thread_total", (const char *[]){"t", v, NULL}) == 2 * PER_THREAD);
	}
	free(out);
	sg_metrics_free(m);
}

/* ---- micro-measurement (printed, not asserted) ------------------------ */

#define BENCH_OPS 5000000

typedef struct bench {
	sg_series *s;
	int observe;
	double ns;
} bench;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *bench_run(void *arg)
{
	bench *b = arg;
	double t0 = now_ns();
	if (b->observe) {
		for (int i = 0; i < BENCH_OPS; i++)
			sg_series_observe(b->s, (double)(i & 1023) * 1e-4);
	} else {
		for (int i = 0; i < BENCH_OPS; i++)
			sg_series_inc(b->s);
	}
	b->ns = (now_ns() - t0) / BENCH_OPS;
	return NULL;
}

static void bench_threads(sg_series *s, int observe, int nthreads)
{
	pthread_t th[2];
	bench b[2];
	for (int i = 0; i < nthreads; i++) {
		b[i] = (bench){s, observe, 0};
		if (pthread_create(&th[i], NULL, bench_run, &b[i]) != 0)
			return;
	}
	double worst = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		worst = b[i].ns > worst ? b[i].ns : worst;
	}
	printf("  %-9s %d thread%s: %.1f ns/op\n", observe ? "observe" : "increment", nthreads,
	       nthreads > 1 ? "s" : " ", worst);
}

static void t_bench(void)
{
	sg_metrics *m = NULL;
	SG_CHECK_OK(sg_metrics_new(&m));
	sg_metric *c = NULL, *h = NULL;
	sg_series *cs = NULL, *hs = NULL;
	SG_CHECK_OK(sg_metrics_counter(&c, m, "bench_total", "h", NULL, 0));
	SG_CHECK_OK(sg_metrics_histogram(&h, m, "bench_seconds", "h", SG_METRICS_LATENCY_BOUNDS,
	                                 SG_METRICS_LATENCY_NBOUNDS, NULL, 0));
	SG_CHECK_OK(sg_metric_series(&cs, c, NULL));
	SG_CHECK_OK(sg_metric_series(&hs, h, NULL));
	for (int t = 1; t <= 2; t++) {
		bench_threads(cs, 0, t);
		bench_threads(hs, 1, t);
	}
	sg_metrics_free(m);
}

SG_TEST_MAIN(SG_TEST(t_names), SG_TEST(t_too_many_families), SG_TEST(t_render_exact), SG_TEST(t_hostile_label_values),
             SG_TEST(t_histogram), SG_TEST(t_series_bound), SG_TEST(t_callbacks), SG_TEST(t_stats_table),
             SG_TEST(t_threads_exact),
             SG_TEST(t_bench))
