/*
 * sg_cel_lib: the functions: CEL's standard definitions (cel-spec
 * doc/langdef.md, "Standard Definitions"), cel-go's strings extension
 * (ext/strings.go and formatting_v2.go: the same signatures, the same
 * results and the same errors), and approver-policy's ServiceAccount
 * library (pkg/internal/approver/validation/serviceaccount.go).
 *
 * One table row per function name and call style: the overloads the type
 * checker knows (a small signature notation, receiver first) and one C
 * implementation that dispatches on the arguments' runtime kinds, so that
 * an unchecked or dyn-typed call meets the same rules as a checked one.
 * An implementation never sees an error argument (the evaluator returns
 * the first one); it answers a value or an error value.
 *
 * Cost (sg_cel_eval.c charges 1 per call): functions whose work grows with
 * their input charge more here, after cel-go's runtime cost model
 * (interpreter/runtimecost.go and the extension's trackers): string and
 * bytes work costs 0.1 per byte (cel-go: per code point or byte, factor
 * 0.1), searching the product of the sizes times 0.1, concatenation and
 * new strings their size times 0.1, list concatenation and in 1 per
 * element. This approximates cel-go's numbers; it is not a copy of them.
 */
#include "sg_cel_int.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARGS sg_cel_ctx *c, cval *a, size_t n, const sg_cel_node *call

static uint64_t tenth(uint64_t x)
{
	return (x + 9) / 10;
}

static cval no_overload(sg_cel_ctx *c, const sg_cel_node *call, cval *a, size_t n)
{
	return sg_cel_no_overload(c, call->call.name, a, n);
}

static bool kinds(cval *a, size_t n, const uint8_t *k, size_t nk)
{
	if (n != nk)
		return false;
	for (size_t i = 0; i < n; i++)
		if (a[i]->kind != k[i])
			return false;
	return true;
}
#define IS(...) kinds(a, n, (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}))

/* A new string value of n bytes to fill in (p[n] is NUL). */
static char *new_text(sg_cel_ctx *c, size_t n)
{
	if (n > SG_CEL_STRING_MAX) {
		c->stop = true;
		c->stop_msg = "string size limit exceeded";
		return NULL;
	}
	char *p = sg_cel_alloc(c->a, n + 1);
	if (!p) {
		c->stop = true;
		if (!c->stop_msg)
			c->stop_msg = c->a->over ? "evaluation memory limit exceeded" : "out of memory";
		return NULL;
	}
	p[n] = 0;
	return p;
}

static const sg_cel_value **new_items(sg_cel_ctx *c, size_t n)
{
	if (n > SG_CEL_LIST_MAX) {
		c->stop = true;
		c->stop_msg = "list size limit exceeded";
		return NULL;
	}
	const sg_cel_value **v = sg_cel_alloc(c->a, (n ? n : 1) * sizeof(*v));
	if (!v) {
		c->stop = true;
		if (!c->stop_msg)
			c->stop_msg = c->a->over ? "evaluation memory limit exceeded" : "out of memory";
	}
	return v;
}

/* ---- arithmetic ---- */

static cval f_add(ARGS)
{
	if (IS(SG_CEL_INT, SG_CEL_INT)) {
		int64_t r;
		if (__builtin_add_overflow(a[0]->i, a[1]->i, &r))
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, r);
	}
	if (IS(SG_CEL_UINT, SG_CEL_UINT)) {
		uint64_t r;
		if (__builtin_add_overflow(a[0]->u, a[1]->u, &r))
			return sg_cel_err(c, "unsigned integer overflow");
		return sg_cel_mk_uint(c, r);
	}
	if (IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d + a[1]->d);
	if (IS(SG_CEL_STRING, SG_CEL_STRING) || IS(SG_CEL_BYTES, SG_CEL_BYTES)) {
		size_t len = a[0]->s.n + a[1]->s.n;
		if (!sg_cel_charge(c, tenth(len)))
			return NULL;
		char *p = new_text(c, len);
		if (!p)
			return NULL;
		memcpy(p, a[0]->s.p, a[0]->s.n);
		memcpy(p + a[0]->s.n, a[1]->s.p, a[1]->s.n);
		return sg_cel_mk_str_owned(c, a[0]->kind, p, len);
	}
	if (IS(SG_CEL_LIST, SG_CEL_LIST)) {
		size_t len = a[0]->list.n + a[1]->list.n;
		if (!sg_cel_charge(c, tenth(len)))
			return NULL;
		const sg_cel_value **v = new_items(c, len);
		if (!v)
			return NULL;
		if (a[0]->list.n)
			memcpy(v, a[0]->list.v, a[0]->list.n * sizeof(*v));
		if (a[1]->list.n)
			memcpy(v + a[0]->list.n, a[1]->list.v, a[1]->list.n * sizeof(*v));
		return sg_cel_mk_list(c, v, len);
	}
	return no_overload(c, call, a, n);
}

static cval f_sub(ARGS)
{
	if (IS(SG_CEL_INT, SG_CEL_INT)) {
		int64_t r;
		if (__builtin_sub_overflow(a[0]->i, a[1]->i, &r))
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, r);
	}
	if (IS(SG_CEL_UINT, SG_CEL_UINT)) {
		uint64_t r;
		if (__builtin_sub_overflow(a[0]->u, a[1]->u, &r))
			return sg_cel_err(c, "unsigned integer overflow");
		return sg_cel_mk_uint(c, r);
	}
	if (IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d - a[1]->d);
	return no_overload(c, call, a, n);
}

static cval f_mul(ARGS)
{
	if (IS(SG_CEL_INT, SG_CEL_INT)) {
		int64_t r;
		if (__builtin_mul_overflow(a[0]->i, a[1]->i, &r))
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, r);
	}
	if (IS(SG_CEL_UINT, SG_CEL_UINT)) {
		uint64_t r;
		if (__builtin_mul_overflow(a[0]->u, a[1]->u, &r))
			return sg_cel_err(c, "unsigned integer overflow");
		return sg_cel_mk_uint(c, r);
	}
	if (IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d * a[1]->d);
	return no_overload(c, call, a, n);
}

static cval f_div(ARGS)
{
	if (IS(SG_CEL_INT, SG_CEL_INT)) {
		if (a[1]->i == 0)
			return sg_cel_err(c, "division by zero");
		if (a[0]->i == INT64_MIN && a[1]->i == -1)
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, a[0]->i / a[1]->i);
	}
	if (IS(SG_CEL_UINT, SG_CEL_UINT)) {
		if (a[1]->u == 0)
			return sg_cel_err(c, "division by zero");
		return sg_cel_mk_uint(c, a[0]->u / a[1]->u);
	}
	if (IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d / a[1]->d);
	return no_overload(c, call, a, n);
}

static cval f_mod(ARGS)
{
	if (IS(SG_CEL_INT, SG_CEL_INT)) {
		if (a[1]->i == 0)
			return sg_cel_err(c, "modulus by zero");
		if (a[0]->i == INT64_MIN && a[1]->i == -1)
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, a[0]->i % a[1]->i);
	}
	if (IS(SG_CEL_UINT, SG_CEL_UINT)) {
		if (a[1]->u == 0)
			return sg_cel_err(c, "modulus by zero");
		return sg_cel_mk_uint(c, a[0]->u % a[1]->u);
	}
	return no_overload(c, call, a, n);
}

static cval f_neg(ARGS)
{
	if (IS(SG_CEL_INT)) {
		if (a[0]->i == INT64_MIN)
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, -a[0]->i);
	}
	if (IS(SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, -a[0]->d);
	return no_overload(c, call, a, n);
}

static cval f_not(ARGS)
{
	if (IS(SG_CEL_BOOL))
		return sg_cel_mk_bool(c, !a[0]->b);
	return no_overload(c, call, a, n);
}

/* ---- comparison ---- */

static cval f_eq(ARGS)
{
	if (n != 2)
		return no_overload(c, call, a, n);
	bool eq = sg_cel_eq(c, a[0], a[1]);
	return c->stop ? NULL : sg_cel_mk_bool(c, eq);
}

static cval f_ne(ARGS)
{
	if (n != 2)
		return no_overload(c, call, a, n);
	bool eq = sg_cel_eq(c, a[0], a[1]);
	return c->stop ? NULL : sg_cel_mk_bool(c, !eq);
}

static cval order(ARGS, int want_lo, int want_hi)
{
	if (n != 2)
		return no_overload(c, call, a, n);
	int r = sg_cel_compare(a[0], a[1]);
	if (r == -2)
		return no_overload(c, call, a, n);
	if (r == 2)
		return sg_cel_mk_bool(c, false);
	return sg_cel_mk_bool(c, r >= want_lo && r <= want_hi);
}

static cval f_lt(ARGS)
{
	return order(c, a, n, call, -1, -1);
}

static cval f_le(ARGS)
{
	return order(c, a, n, call, -1, 0);
}

static cval f_gt(ARGS)
{
	return order(c, a, n, call, 1, 1);
}

static cval f_ge(ARGS)
{
	return order(c, a, n, call, 0, 1);
}

static cval f_in(ARGS)
{
	if (n == 2 && a[1]->kind == SG_CEL_LIST) {
		if (!sg_cel_charge(c, a[1]->list.n))
			return NULL;
		for (size_t i = 0; i < a[1]->list.n; i++)
			if (sg_cel_eq(c, a[0], a[1]->list.v[i]))
				return sg_cel_mk_bool(c, true);
			else if (c->stop)
				return NULL;
		return sg_cel_mk_bool(c, false);
	}
	if (n == 2 && a[1]->kind == SG_CEL_MAP) {
		if (!sg_cel_charge(c, a[1]->map.n / 10))
			return NULL;
		return sg_cel_mk_bool(c, sg_cel_map_find(a[1], a[0]) != NULL);
	}
	return no_overload(c, call, a, n);
}

/* ---- indexing ---- */

/* An integral index from int, uint or a whole double; false otherwise. */
static bool as_index(cval v, int64_t *out)
{
	if (v->kind == SG_CEL_INT) {
		*out = v->i;
		return true;
	}
	if (v->kind == SG_CEL_UINT) {
		*out = v->u > INT64_MAX ? INT64_MAX : (int64_t)v->u;
		return true;
	}
	if (v->kind == SG_CEL_DOUBLE && v->d == floor(v->d) && fabs(v->d) < 9.2e18) {
		*out = (int64_t)v->d;
		return true;
	}
	return false;
}

static cval f_index(ARGS)
{
	if (n == 2 && a[0]->kind == SG_CEL_LIST) {
		int64_t i;
		if (!as_index(a[1], &i))
			return no_overload(c, call, a, n);
		if (i < 0 || (uint64_t)i >= a[0]->list.n)
			return sg_cel_err(c, "index out of bounds: %lld", (long long)i);
		return a[0]->list.v[i];
	}
	if (n == 2 && a[0]->kind == SG_CEL_MAP) {
		if (!sg_cel_charge(c, a[0]->map.n / 10))
			return NULL;
		cval v = sg_cel_map_find(a[0], a[1]);
		if (!v) {
			if (a[1]->kind == SG_CEL_STRING)
				return sg_cel_err(c, "no such key: %.100s", a[1]->s.p);
			return sg_cel_err(c, "no such key");
		}
		return v;
	}
	return no_overload(c, call, a, n);
}

/* ---- size and conversions ---- */

static cval f_size(ARGS)
{
	if (n == 1) {
		switch (a[0]->kind) {
		case SG_CEL_STRING:
			if (!sg_cel_charge(c, tenth(a[0]->s.n)))
				return NULL;
			return sg_cel_mk_int(c, (int64_t)sg_cel_utf8_count(a[0]->s.p, a[0]->s.n));
		case SG_CEL_BYTES:
			return sg_cel_mk_int(c, (int64_t)a[0]->s.n);
		case SG_CEL_LIST:
			return sg_cel_mk_int(c, (int64_t)a[0]->list.n);
		case SG_CEL_MAP:
			return sg_cel_mk_int(c, (int64_t)a[0]->map.n);
		default:
			break;
		}
	}
	return no_overload(c, call, a, n);
}

/* Go's strconv.ParseInt/ParseUint(s, 10, 64): optional sign (int only),
 * decimal digits, nothing else. */
static bool parse_int(const char *s, size_t len, bool is_signed, int64_t *i, uint64_t *u)
{
	if (len == 0 || len > 40)
		return false;
	size_t k = 0;
	bool neg = false;
	if (is_signed && (s[0] == '-' || s[0] == '+')) {
		neg = s[0] == '-';
		k = 1;
	}
	if (k == len)
		return false;
	uint64_t x = 0;
	for (; k < len; k++) {
		if (s[k] < '0' || s[k] > '9')
			return false;
		if (x > (UINT64_MAX - (uint64_t)(s[k] - '0')) / 10)
			return false;
		x = x * 10 + (uint64_t)(s[k] - '0');
	}
	if (!is_signed) {
		*u = x;
		return true;
	}
	if (neg ? x > (uint64_t)INT64_MAX + 1 : x > (uint64_t)INT64_MAX)
		return false;
	*i = neg ? (x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x) : (int64_t)x;
	return true;
}

static cval f_int(ARGS)
{
	if (IS(SG_CEL_INT))
		return a[0];
	if (IS(SG_CEL_UINT)) {
		if (a[0]->u > INT64_MAX)
			return sg_cel_err(c, "range error converting %llu to int", (unsigned long long)a[0]->u);
		return sg_cel_mk_int(c, (int64_t)a[0]->u);
	}
	if (IS(SG_CEL_DOUBLE)) {
		double d = a[0]->d;
		/* (minInt, maxInt), both ends excluded (spec: "Overflow"). */
		if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
			return sg_cel_err(c, "range error converting %g to int", d);
		return sg_cel_mk_int(c, (int64_t)d);
	}
	if (IS(SG_CEL_STRING)) {
		int64_t i;
		if (!parse_int(a[0]->s.p, a[0]->s.n, true, &i, NULL))
			return sg_cel_err(c, "type conversion error from 'string' to 'int'");
		return sg_cel_mk_int(c, i);
	}
	return no_overload(c, call, a, n);
}

static cval f_uint(ARGS)
{
	if (IS(SG_CEL_UINT))
		return a[0];
	if (IS(SG_CEL_INT)) {
		if (a[0]->i < 0)
			return sg_cel_err(c, "range error converting %lld to uint", (long long)a[0]->i);
		return sg_cel_mk_uint(c, (uint64_t)a[0]->i);
	}
	if (IS(SG_CEL_DOUBLE)) {
		double d = a[0]->d;
		/* cel-go: negative (but -0.0), NaN, or 2^64 and past: a range error. */
		if (!(d >= 0 && d < 18446744073709551616.0))
			return sg_cel_err(c, "range error converting %g to uint", d);
		return sg_cel_mk_uint(c, (uint64_t)d);
	}
	if (IS(SG_CEL_STRING)) {
		uint64_t u;
		if (!parse_int(a[0]->s.p, a[0]->s.n, false, NULL, &u))
			return sg_cel_err(c, "type conversion error from 'string' to 'uint'");
		return sg_cel_mk_uint(c, u);
	}
	return no_overload(c, call, a, n);
}

/* Go's strconv.ParseFloat(s, 64), near enough: decimal and hex floats,
 * Inf/Infinity/NaN in any case with an optional sign; nothing around. */
static bool parse_double(const char *s, size_t len, double *out)
{
	if (len == 0 || len > 400)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '(' || s[i] == '\r' || s[i] == '\v' ||
		    s[i] == '\f')
			return false;
	char buf[401];
	memcpy(buf, s, len);
	buf[len] = 0;
	/* Go reads a hex mantissa only with a binary exponent (0x1p-2). */
	if ((strchr(buf, 'x') || strchr(buf, 'X')) && !strchr(buf, 'p') && !strchr(buf, 'P'))
		return false;
	errno = 0;
	char *end;
	double d = strtod(buf, &end);
	if (*end || end == buf)
		return false;
	if (errno == ERANGE && fabs(d) > 1)
		return false; /* Go: out of range is an error; underflow is not */
	*out = d;
	return true;
}

static cval f_double(ARGS)
{
	if (IS(SG_CEL_DOUBLE))
		return a[0];
	if (IS(SG_CEL_INT))
		return sg_cel_mk_double(c, (double)a[0]->i);
	if (IS(SG_CEL_UINT))
		return sg_cel_mk_double(c, (double)a[0]->u);
	if (IS(SG_CEL_STRING)) {
		double d;
		if (!parse_double(a[0]->s.p, a[0]->s.n, &d))
			return sg_cel_err(c, "type conversion error from 'string' to 'double'");
		return sg_cel_mk_double(c, d);
	}
	return no_overload(c, call, a, n);
}

/* The shortest decimal digits that read back as d (d finite, not 0):
 * digits without a point, and the decimal exponent of the first. */
static void shortest(double d, char *digits, int *nd, int *exp10)
{
	char buf[40];
	for (int prec = 0; prec <= 16; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	/* buf: [-]d[.ddd]e[+-]xx */
	const char *p = buf[0] == '-' ? buf + 1 : buf;
	int k = 0;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[k++] = *p;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = 0;
	*nd = k;
	*exp10 = atoi(p + 1);
}

/* Go's strconv.FormatFloat(d, 'g' or 'f', -1, 64): cel-go's string(double) is fmt's %g,
 * which switches to an exponent below 1e-4 and from 1e6 on. */
static void fmt_double(char *out, size_t cap, double d, char mode)
{
	if (isnan(d)) {
		snprintf(out, cap, "NaN");
		return;
	}
	if (isinf(d)) {
		snprintf(out, cap, d > 0 ? "+Inf" : "-Inf");
		return;
	}
	if (d == 0) {
		snprintf(out, cap, "%s0", signbit(d) ? "-" : "");
		return;
	}
	char digits[32];
	int nd, e;
	shortest(d, digits, &nd, &e);
	size_t k = 0;
	if (d < 0)
		out[k++] = '-';
	if (mode == 'g' && (e < -4 || e >= 6)) {
		out[k++] = digits[0];
		if (nd > 1) {
			out[k++] = '.';
			for (int i = 1; i < nd; i++)
				out[k++] = digits[i];
		}
		snprintf(out + k, cap - k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
		return;
	}
	/* Fixed: digits around a point at position e + 1. */
	if (e < 0) {
		out[k++] = '0';
		out[k++] = '.';
		for (int i = -1; i > e; i--)
			out[k++] = '0';
		for (int i = 0; i < nd; i++)
			out[k++] = digits[i];
	} else {
		for (int i = 0; i <= e || i < nd; i++) {
			if (i == e + 1)
				out[k++] = '.';
			out[k++] = i < nd ? digits[i] : '0';
		}
	}
	out[k] = 0;
}

static cval f_string(ARGS)
{
	char buf[400];
	if (IS(SG_CEL_STRING))
		return a[0];
	if (IS(SG_CEL_INT)) {
		snprintf(buf, sizeof(buf), "%lld", (long long)a[0]->i);
		return sg_cel_mk_str(c, SG_CEL_STRING, buf, strlen(buf));
	}
	if (IS(SG_CEL_UINT)) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)a[0]->u);
		return sg_cel_mk_str(c, SG_CEL_STRING, buf, strlen(buf));
	}
	if (IS(SG_CEL_DOUBLE)) {
		fmt_double(buf, sizeof(buf), a[0]->d, 'g');
		return sg_cel_mk_str(c, SG_CEL_STRING, buf, strlen(buf));
	}
	if (IS(SG_CEL_BOOL))
		return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->b ? "true" : "false", a[0]->b ? 4 : 5);
	if (IS(SG_CEL_BYTES)) {
		if (!sg_cel_utf8_valid(a[0]->s.p, a[0]->s.n))
			return sg_cel_err(c, "invalid UTF-8 in bytes, cannot convert to string");
		return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p, a[0]->s.n);
	}
	return no_overload(c, call, a, n);
}

static cval f_bytes(ARGS)
{
	if (IS(SG_CEL_BYTES))
		return a[0];
	if (IS(SG_CEL_STRING))
		return sg_cel_mk_str(c, SG_CEL_BYTES, a[0]->s.p, a[0]->s.n);
	return no_overload(c, call, a, n);
}

static cval f_bool(ARGS)
{
	static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
	static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
	if (IS(SG_CEL_BOOL))
		return a[0];
	if (IS(SG_CEL_STRING)) {
		for (size_t i = 0; i < 6; i++) {
			if (strlen(yes[i]) == a[0]->s.n && memcmp(yes[i], a[0]->s.p, a[0]->s.n) == 0)
				return sg_cel_mk_bool(c, true);
			if (strlen(no[i]) == a[0]->s.n && memcmp(no[i], a[0]->s.p, a[0]->s.n) == 0)
				return sg_cel_mk_bool(c, false);
		}
		return sg_cel_err(c, "type conversion error from 'string' to 'bool'");
	}
	return no_overload(c, call, a, n);
}

static cval f_type(ARGS)
{
	if (n != 1)
		return no_overload(c, call, a, n);
	return sg_cel_mk_type(c, sg_cel_kind_name(a[0]));
}

static cval f_dyn(ARGS)
{
	if (n != 1)
		return no_overload(c, call, a, n);
	return a[0];
}

/* ---- string predicates and RE2 ---- */

static bool has_at(cval s, size_t at, cval sub)
{
	return at + sub->s.n <= s->s.n && memcmp(s->s.p + at, sub->s.p, sub->s.n) == 0;
}

static cval f_contains(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	if (!sg_cel_charge(c, tenth((uint64_t)a[0]->s.n * (a[1]->s.n ? a[1]->s.n : 1))))
		return NULL;
	if (a[1]->s.n == 0)
		return sg_cel_mk_bool(c, true);
	for (size_t i = 0; i + a[1]->s.n <= a[0]->s.n; i++)
		if (has_at(a[0], i, a[1]))
			return sg_cel_mk_bool(c, true);
	return sg_cel_mk_bool(c, false);
}

static cval f_starts(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	return sg_cel_mk_bool(c, has_at(a[0], 0, a[1]));
}

static cval f_ends(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	return sg_cel_mk_bool(c, a[1]->s.n <= a[0]->s.n && has_at(a[0], a[0]->s.n - a[1]->s.n, a[1]));
}

static cval f_matches(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	if (a[1]->s.n > SG_CEL_RE2_PATTERN_MAX)
		return sg_cel_err(c, "regular expression longer than %u bytes", SG_CEL_RE2_PATTERN_MAX);
	if (!sg_cel_charge(c, tenth(a[0]->s.n) + a[1]->s.n))
		return NULL;
	char why[200];
	int r = call->call.re ? sg_cel_re2_match(call->call.re, a[0]->s.p, a[0]->s.n)
	                      : sg_cel_re2_search(a[1]->s.p, a[1]->s.n, a[0]->s.p, a[0]->s.n, why, sizeof(why));
	if (r < 0)
		return sg_cel_err(c, "error parsing regexp: %s", why);
	return sg_cel_mk_bool(c, r == 1);
}

/* ---- the strings extension ---- */

/* Byte offset of code point k (k <= count). */
static size_t cp_offset(const char *p, size_t n, size_t k)
{
	size_t i = 0;
	while (i < n && k > 0) {
		i++;
		while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80)
			i++;
		k--;
	}
	return i;
}

static cval f_char_at(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_INT))
		return no_overload(c, call, a, n);
	if (!sg_cel_charge(c, tenth(a[0]->s.n)))
		return NULL;
	size_t len = sg_cel_utf8_count(a[0]->s.p, a[0]->s.n);
	int64_t i = a[1]->i;
	if (i < 0 || (uint64_t)i > len)
		return sg_cel_err(c, "index out of range: %lld", (long long)i);
	size_t from = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)i);
	size_t to = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)i + ((size_t)i < len));
	return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p + from, to - from);
}

/* Code-point search from code point `from`, forward or backward. */
static int64_t cp_search(cval s, cval sub, int64_t from, bool backward)
{
	size_t len = sg_cel_utf8_count(s->s.p, s->s.n), sublen = sg_cel_utf8_count(sub->s.p, sub->s.n);
	if (sub->s.n == 0)
		return from > (int64_t)len ? (int64_t)len : from;
	if (from >= (int64_t)len)
		return -1;
	if (!backward) {
		size_t off = cp_offset(s->s.p, s->s.n, (size_t)from);
		for (int64_t i = from; off + sub->s.n <= s->s.n; i++) {
			if (has_at(s, off, sub))
				return i;
			off++;
			while (off < s->s.n && ((unsigned char)s->s.p[off] & 0xC0) == 0x80)
				off++;
		}
		return -1;
	}
	if (sublen > len)
		return -1;
	if (from > (int64_t)(len - sublen))
		from = (int64_t)(len - sublen);
	for (int64_t i = from; i >= 0; i--)
		if (has_at(s, cp_offset(s->s.p, s->s.n, (size_t)i), sub))
			return i;
	return -1;
}

static cval index_of(ARGS, bool last)
{
	int64_t from;
	if (IS(SG_CEL_STRING, SG_CEL_STRING)) {
		if (last) {
			size_t len = sg_cel_utf8_count(a[0]->s.p, a[0]->s.n);
			if (a[1]->s.n == 0)
				return sg_cel_mk_int(c, (int64_t)len);
			if (a[0]->s.n < a[1]->s.n)
				return sg_cel_mk_int(c, -1);
			from = (int64_t)len - 1;
		} else {
			from = 0;
		}
	} else if (IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_INT)) {
		from = a[2]->i;
		/* cel-spec's string_ext tests: an offset past the end is an error
		 * (as a negative one is). */
		if (from < 0 || (uint64_t)from > sg_cel_utf8_count(a[0]->s.p, a[0]->s.n))
			return sg_cel_err(c, "index out of range: %lld", (long long)from);
	} else {
		return no_overload(c, call, a, n);
	}
	uint64_t work = (uint64_t)a[0]->s.n * (a[1]->s.n ? a[1]->s.n : 1);
	if (!sg_cel_charge(c, tenth(work)))
		return NULL;
	return sg_cel_mk_int(c, cp_search(a[0], a[1], from, last));
}

static cval f_index_of(ARGS)
{
	return index_of(c, a, n, call, false);
}

static cval f_last_index_of(ARGS)
{
	return index_of(c, a, n, call, true);
}

static cval ascii_case(sg_cel_ctx *c, cval *a, size_t n, const sg_cel_node *call, bool upper)
{
	if (!IS(SG_CEL_STRING))
		return no_overload(c, call, a, n);
	if (!sg_cel_charge(c, tenth(a[0]->s.n) * 2))
		return NULL;
	char *p = new_text(c, a[0]->s.n);
	if (!p)
		return NULL;
	for (size_t i = 0; i < a[0]->s.n; i++) {
		char ch = a[0]->s.p[i];
		if (upper && ch >= 'a' && ch <= 'z')
			ch = (char)(ch - 32);
		else if (!upper && ch >= 'A' && ch <= 'Z')
			ch = (char)(ch + 32);
		p[i] = ch;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, a[0]->s.n);
}

static cval f_lower(ARGS)
{
	return ascii_case(c, a, n, call, false);
}

static cval f_upper(ARGS)
{
	return ascii_case(c, a, n, call, true);
}

/* Go's strings.Replace: an empty `old` matches before every code point
 * and at the end. */
static cval f_replace(ARGS)
{
	int64_t limit = -1;
	if (IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_STRING, SG_CEL_INT))
		limit = a[3]->i;
	else if (!IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	cval s = a[0], old = a[1], rep = a[2];
	uint64_t work = (uint64_t)(s->s.n ? s->s.n : 1) * (old->s.n ? old->s.n : 1);
	if (!sg_cel_charge(c, tenth(work)))
		return NULL;
	/* Count the matches first, to size the result exactly. */
	size_t count = 0;
	for (size_t i = 0; i <= s->s.n && (limit < 0 || (int64_t)count < limit);) {
		if (old->s.n == 0) {
			count++;
			if (i == s->s.n)
				break;
			i++;
			while (i < s->s.n && ((unsigned char)s->s.p[i] & 0xC0) == 0x80)
				i++;
		} else if (has_at(s, i, old)) {
			count++;
			i += old->s.n;
		} else {
			i++;
		}
	}
	size_t len;
	if (__builtin_mul_overflow(count, rep->s.n, &len) || __builtin_add_overflow(len, s->s.n, &len))
		return sg_cel_err(c, "string size limit exceeded");
	len -= count * old->s.n;
	if (!sg_cel_charge(c, tenth(len)))
		return NULL;
	char *p = new_text(c, len);
	if (!p)
		return NULL;
	size_t k = 0, done = 0, i = 0;
	while (i <= s->s.n) {
		bool here = done < count && (old->s.n == 0 || has_at(s, i, old));
		if (here) {
			memcpy(p + k, rep->s.p, rep->s.n);
			k += rep->s.n;
			done++;
			if (old->s.n) {
				i += old->s.n;
				continue;
			}
		}
		if (i == s->s.n)
			break;
		/* Copy one code point (or one byte of a non-match). */
		size_t j = i + 1;
		if (old->s.n == 0)
			while (j < s->s.n && ((unsigned char)s->s.p[j] & 0xC0) == 0x80)
				j++;
		memcpy(p + k, s->s.p + i, j - i);
		k += j - i;
		i = j;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, k);
}

/* Go's strings.SplitN: n < 0 all, 0 none, else at most n parts; an empty
 * separator splits into code points. */
static cval f_split(ARGS)
{
	int64_t limit = -1;
	if (IS(SG_CEL_STRING, SG_CEL_STRING, SG_CEL_INT))
		limit = a[2]->i;
	else if (!IS(SG_CEL_STRING, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	cval s = a[0], sep = a[1];
	if (!sg_cel_charge(c, tenth(s->s.n + 1) + 1))
		return NULL;
	if (limit == 0)
		return sg_cel_mk_list(c, new_items(c, 0), 0);
	size_t max = sep->s.n ? s->s.n / sep->s.n + 1 : sg_cel_utf8_count(s->s.p, s->s.n);
	if (limit > 0 && (uint64_t)limit < max)
		max = (size_t)limit;
	if (!sg_cel_charge(c, max))
		return NULL;
	const sg_cel_value **items = new_items(c, max);
	if (!items)
		return NULL;
	size_t k = 0, start = 0, i = 0;
	while (k + 1 < max) {
		if (sep->s.n == 0) {
			if (i >= s->s.n)
				break;
			size_t j = i + 1;
			while (j < s->s.n && ((unsigned char)s->s.p[j] & 0xC0) == 0x80)
				j++;
			items[k++] = sg_cel_mk_str(c, SG_CEL_STRING, s->s.p + i, j - i);
			i = start = j;
			continue;
		}
		if (i + sep->s.n > s->s.n)
			break;
		if (has_at(s, i, sep)) {
			items[k++] = sg_cel_mk_str(c, SG_CEL_STRING, s->s.p + start, i - start);
			i += sep->s.n;
			start = i;
		} else {
			i++;
		}
		if (c->stop)
			return NULL;
	}
	if (sep->s.n || start < s->s.n)
		items[k++] = sg_cel_mk_str(c, SG_CEL_STRING, s->s.p + start, s->s.n - start);
	return sg_cel_mk_list(c, items, k);
}

static cval f_substring(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_INT) && !IS(SG_CEL_STRING, SG_CEL_INT, SG_CEL_INT))
		return no_overload(c, call, a, n);
	if (!sg_cel_charge(c, tenth(a[0]->s.n)))
		return NULL;
	int64_t len = (int64_t)sg_cel_utf8_count(a[0]->s.p, a[0]->s.n);
	int64_t start = a[1]->i, end = n == 3 ? a[2]->i : len;
	if (start > end)
		return sg_cel_err(c, "invalid substring range. start: %lld, end: %lld", (long long)start,
		                  (long long)end);
	if (start < 0 || start > len)
		return sg_cel_err(c, "index out of range: %lld", (long long)start);
	if (end < 0 || end > len)
		return sg_cel_err(c, "index out of range: %lld", (long long)end);
	size_t from = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)start);
	size_t to = cp_offset(a[0]->s.p, a[0]->s.n, (size_t)end);
	return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p + from, to - from);
}

/* Unicode White_Space (Go's unicode.IsSpace): bytes of the code point at
 * p[i], or 0 when it is not white space. */
static size_t space_at(const char *p, size_t n, size_t i)
{
	static const uint32_t spaces[] = {0x85,   0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003,
	                                  0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
	                                  0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
	unsigned char ch = (unsigned char)p[i];
	if (ch == ' ' || (ch >= '\t' && ch <= '\r'))
		return 1;
	if (ch < 0x80)
		return 0;
	size_t len = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
	if (i + len > n)
		return 0;
	uint32_t cp = ch & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
	for (size_t k = 1; k < len; k++)
		cp = (cp << 6) | ((unsigned char)p[i + k] & 0x3F);
	for (size_t k = 0; k < sizeof(spaces) / sizeof(spaces[0]); k++)
		if (spaces[k] == cp)
			return len;
	return 0;
}

static cval f_trim(ARGS)
{
	if (!IS(SG_CEL_STRING))
		return no_overload(c, call, a, n);
	if (!sg_cel_charge(c, tenth(a[0]->s.n)))
		return NULL;
	const char *p = a[0]->s.p;
	size_t from = 0, to = a[0]->s.n, k;
	while (from < to && (k = space_at(p, to, from)) > 0)
		from += k;
	while (to > from) {
		size_t start = to - 1;
		while (start > from && ((unsigned char)p[start] & 0xC0) == 0x80)
			start--;
		if (space_at(p, to, start) != to - start)
			break;
		to = start;
	}
	return sg_cel_mk_str(c, SG_CEL_STRING, p + from, to - from);
}

static cval f_reverse(ARGS)
{
	if (!IS(SG_CEL_STRING))
		return no_overload(c, call, a, n);
	if (!sg_cel_charge(c, tenth(a[0]->s.n) * 2))
		return NULL;
	size_t len = a[0]->s.n;
	char *p = new_text(c, len);
	if (!p)
		return NULL;
	const char *s = a[0]->s.p;
	for (size_t i = 0; i < len;) {
		size_t j = i + 1;
		while (j < len && ((unsigned char)s[j] & 0xC0) == 0x80)
			j++;
		memcpy(p + len - j, s + i, j - i);
		i = j;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, len);
}

static cval f_join(ARGS)
{
	if (!IS(SG_CEL_LIST) && !IS(SG_CEL_LIST, SG_CEL_STRING))
		return no_overload(c, call, a, n);
	cval l = a[0];
	size_t sep = n == 2 ? a[1]->s.n : 0, len = 0;
	for (size_t i = 0; i < l->list.n; i++) {
		if (l->list.v[i]->kind != SG_CEL_STRING)
			return sg_cel_err(c, "join: invalid input: %s", sg_cel_kind_name(l->list.v[i]));
		if (__builtin_add_overflow(len, l->list.v[i]->s.n + (i ? sep : 0), &len))
			return sg_cel_err(c, "string size limit exceeded");
	}
	if (!sg_cel_charge(c, tenth(len + l->list.n + 1)))
		return NULL;
	char *p = new_text(c, len);
	if (!p)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < l->list.n; i++) {
		if (i && sep) {
			memcpy(p + k, a[1]->s.p, sep);
			k += sep;
		}
		memcpy(p + k, l->list.v[i]->s.p, l->list.v[i]->s.n);
		k += l->list.v[i]->s.n;
	}
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, len);
}

static cval f_quote(ARGS)
{
	if (!IS(SG_CEL_STRING))
		return no_overload(c, call, a, n);
	size_t len = a[0]->s.n;
	if (len > SG_CEL_STRING_MAX / 2)
		return sg_cel_err(c, "string size limit exceeded");
	if (!sg_cel_charge(c, tenth(len) * 2))
		return NULL;
	char *p = new_text(c, 2 * len + 2);
	if (!p)
		return NULL;
	static const char from[] = "\a\b\f\n\r\t\v\\\"";
	static const char to[] = "abfnrtv\\\"";
	size_t k = 0;
	p[k++] = '"';
	for (size_t i = 0; i < len; i++) {
		char ch = a[0]->s.p[i];
		const char *e = ch ? memchr(from, ch, sizeof(from) - 1) : NULL;
		if (e) {
			p[k++] = '\\';
			p[k++] = to[e - from];
		} else {
			p[k++] = ch;
		}
	}
	p[k++] = '"';
	p[k] = 0;
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, p, k);
}

/* ---- format (cel-go's ext.Strings version 4 and later) ---- */

typedef struct fbuf {
	sg_cel_ctx *c;
	char *p;
	size_t n, cap;
	bool failed;
} fbuf;

static void fb_add(fbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->n + n > SG_CEL_STRING_MAX) {
		b->failed = true;
		b->c->stop = true;
		b->c->stop_msg = "string size limit exceeded";
		return;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = sg_cel_alloc(b->c->a, cap);
		if (!q) {
			b->failed = true;
			b->c->stop = true;
			if (!b->c->stop_msg)
				b->c->stop_msg = "evaluation memory limit exceeded";
			return;
		}
		if (b->n)
			memcpy(q, b->p, b->n);
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void fb_puts(fbuf *b, const char *s)
{
	fb_add(b, s, strlen(s));
}

static const char *fmt_string(fbuf *b, cval v, int depth);

typedef struct fentry {
	const char *key, *val;
	size_t klen, vlen;
} fentry;

static int fentry_cmp(const void *x, const void *y)
{
	const fentry *a = x, *b = y;
	size_t n = a->klen < b->klen ? a->klen : b->klen;
	int r = memcmp(a->key, b->key, n);
	if (r)
		return r;
	return a->klen < b->klen ? -1 : a->klen > b->klen;
}

/* %s of a value; NULL, or a message when the value cannot be formatted. */
static const char *fmt_string(fbuf *b, cval v, int depth)
{
	char buf[400];
	if (depth > 100)
		return "value nested too deeply to format";
	if (b->failed) /* past the size limit: stop walking (values may be huge trees) */
		return NULL;
	switch (v->kind) {
	case SG_CEL_BOOL:
		fb_puts(b, v->b ? "true" : "false");
		return NULL;
	case SG_CEL_INT:
		snprintf(buf, sizeof(buf), "%lld", (long long)v->i);
		fb_puts(b, buf);
		return NULL;
	case SG_CEL_UINT:
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v->u);
		fb_puts(b, buf);
		return NULL;
	case SG_CEL_DOUBLE:
		if (isinf(v->d))
			fb_puts(b, v->d > 0 ? "Infinity" : "-Infinity");
		else {
			fmt_double(buf, sizeof(buf), v->d, 'f');
			fb_puts(b, buf);
		}
		return NULL;
	case SG_CEL_STRING:
	case SG_CEL_BYTES:
	case SG_CEL_TYPE:
		fb_add(b, v->s.p, v->s.n);
		return NULL;
	case SG_CEL_NULL:
		fb_puts(b, "null");
		return NULL;
	case SG_CEL_LIST:
		fb_puts(b, "[");
		for (size_t i = 0; i < v->list.n; i++) {
			if (i)
				fb_puts(b, ", ");
			const char *e = fmt_string(b, v->list.v[i], depth + 1);
			if (e || b->failed)
				return e;
		}
		fb_puts(b, "]");
		return NULL;
	case SG_CEL_MAP: {
		size_t total = 0;
		fentry *ents = sg_cel_alloc(b->c->a, (v->map.n ? v->map.n : 1) * sizeof(*ents));
		if (!ents) {
			b->failed = true;
			return NULL;
		}
		for (size_t i = 0; i < v->map.n; i++) {
			fbuf kb = {.c = b->c}, vb = {.c = b->c};
			const char *e = fmt_string(&kb, v->map.k[i], depth + 1);
			if (!e)
				e = fmt_string(&vb, v->map.v[i], depth + 1);
			if (e)
				return e;
			if (kb.failed || vb.failed) {
				b->failed = true;
				return NULL;
			}
			ents[i] = (fentry){kb.p ? kb.p : "", vb.p ? vb.p : "", kb.n, vb.n};
			total += kb.n + vb.n + 4;
			if (b->n + total > SG_CEL_STRING_MAX) {
				b->failed = true;
				b->c->stop = true;
				b->c->stop_msg = "string size limit exceeded";
				return NULL;
			}
		}
		qsort(ents, v->map.n, sizeof(*ents), fentry_cmp);
		fb_puts(b, "{");
		for (size_t i = 0; i < v->map.n; i++) {
			if (i)
				fb_puts(b, ", ");
			fb_add(b, ents[i].key, ents[i].klen);
			fb_puts(b, ": ");
			fb_add(b, ents[i].val, ents[i].vlen);
		}
		fb_puts(b, "}");
		return NULL;
	}
	default:
		return "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
		       "durations, and timestamps";
	}
}

static void put_radix(fbuf *b, uint64_t x, unsigned base, bool neg, bool upper)
{
	char buf[72];
	size_t k = sizeof(buf);
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	buf[--k] = 0;
	do {
		buf[--k] = digits[x % base];
		x /= base;
	} while (x);
	if (neg)
		buf[--k] = '-';
	fb_puts(b, buf + k);
}

/* One clause (the verb after % and an optional precision) of arg. */
static const char *fmt_clause(fbuf *b, char verb, int prec, cval v)
{
	char buf[512];
	bool num = sg_cel_is_num(v);
	switch (verb) {
	case 's':
		return fmt_string(b, v, 0);
	case 'd':
		if (!num)
			return "decimal clause can only be used on ints, uints, and doubles";
		if (v->kind == SG_CEL_DOUBLE) {
			if (isnan(v->d))
				fb_puts(b, "NaN");
			else if (isinf(v->d))
				fb_puts(b, v->d > 0 ? "Infinity" : "-Infinity");
			else {
				fmt_double(buf, sizeof(buf), v->d, 'f');
				fb_puts(b, buf);
			}
			return NULL;
		}
		return fmt_string(b, v, 0);
	case 'f':
	case 'e': {
		if (!num)
			return verb == 'f' ? "fixed-point clause can only be used on ints, uints, and doubles"
			                   : "scientific clause can only be used on ints, uints, and doubles";
		double d = v->kind == SG_CEL_INT ? (double)v->i : v->kind == SG_CEL_UINT ? (double)v->u : v->d;
		if (isnan(d))
			fb_puts(b, "NaN");
		else if (isinf(d))
			fb_puts(b, d > 0 ? "Infinity" : "-Infinity");
		else {
			/* %f of 1e308 at precision 100 is about 410 characters. */
			char *big = sg_cel_alloc(b->c->a, 520);
			if (!big) {
				b->failed = true;
				return NULL;
			}
			snprintf(big, 520, verb == 'f' ? "%.*f" : "%.*e", prec, d);
			fb_puts(b, big);
		}
		return NULL;
	}
	case 'b':
		if (v->kind == SG_CEL_BOOL)
			fb_puts(b, v->b ? "1" : "0");
		else if (v->kind == SG_CEL_INT)
			put_radix(b, v->i < 0 ? -(uint64_t)v->i : (uint64_t)v->i, 2, v->i < 0, false);
		else if (v->kind == SG_CEL_UINT)
			put_radix(b, v->u, 2, false, false);
		else
			return "only ints, uints, and bools can be formatted as binary";
		return NULL;
	case 'o':
		if (v->kind == SG_CEL_INT)
			put_radix(b, v->i < 0 ? -(uint64_t)v->i : (uint64_t)v->i, 8, v->i < 0, false);
		else if (v->kind == SG_CEL_UINT)
			put_radix(b, v->u, 8, false, false);
		else
			return "octal clause can only be used on ints and uints";
		return NULL;
	case 'x':
	case 'X': {
		bool up = verb == 'X';
		if (v->kind == SG_CEL_INT)
			put_radix(b, v->i < 0 ? -(uint64_t)v->i : (uint64_t)v->i, 16, v->i < 0, up);
		else if (v->kind == SG_CEL_UINT)
			put_radix(b, v->u, 16, false, up);
		else if (v->kind == SG_CEL_STRING || v->kind == SG_CEL_BYTES) {
			const char *digits = up ? "0123456789ABCDEF" : "0123456789abcdef";
			for (size_t i = 0; i < v->s.n && !b->failed; i++) {
				char two[2] = {digits[(unsigned char)v->s.p[i] >> 4],
				               digits[(unsigned char)v->s.p[i] & 15]};
				fb_add(b, two, 2);
			}
		} else
			return "only ints, uints, bytes, and strings can be formatted as hex";
		return NULL;
	}
	default:
		return NULL;
	}
}

static cval f_format(ARGS)
{
	if (!IS(SG_CEL_STRING, SG_CEL_LIST))
		return no_overload(c, call, a, n);
	const char *s = a[0]->s.p;
	size_t len = a[0]->s.n, argi = 0;
	cval args = a[1];
	fbuf b = {.c = c};
	fb_add(&b, "", 0);
	for (size_t i = 0; i < len && !b.failed;) {
		if (s[i] != '%') {
			size_t j = i;
			while (j < len && s[j] != '%')
				j++;
			fb_add(&b, s + i, j - i);
			i = j;
			continue;
		}
		if (i + 1 < len && s[i + 1] == '%') {
			fb_add(&b, "%", 1);
			i += 2;
			continue;
		}
		if (i + 1 >= len)
			return sg_cel_err(c, "unexpected end of string");
		if (argi >= args->list.n)
			return sg_cel_err(c, "index %zu out of range", argi);
		i++;
		int prec = 6;
		if (s[i] == '.') {
			i++;
			size_t start = i;
			long p = 0;
			while (i < len && s[i] >= '0' && s[i] <= '9') {
				p = p * 10 + (s[i] - '0');
				if (p > 1000)
					p = 1000;
				i++;
			}
			if (i >= len)
				return sg_cel_err(
				    c, "could not parse formatting clause: error while parsing precision: could "
				       "not find end of precision specifier");
			if (i == start)
				return sg_cel_err(
				    c, "could not parse formatting clause: error while parsing precision: error "
				       "while converting precision to integer");
			if (p > 100)
				return sg_cel_err(c,
				                  "could not parse formatting clause: error while parsing precision: "
				                  "precision %ld exceeds maximum allowed precision 100",
				                  p);
			prec = (int)p;
		}
		char verb = s[i++];
		if (!strchr("sdfebxXo", verb) || !verb)
			return sg_cel_err(c, "could not parse formatting clause: unrecognized formatting clause \"%c\"",
			                  verb);
		const char *e = fmt_clause(&b, verb, prec, args->list.v[argi++]);
		if (e)
			return sg_cel_err(c, "error during formatting: %s, was given %s", e,
			                  sg_cel_kind_name(args->list.v[argi - 1]));
	}
	if (b.failed)
		return NULL;
	if (!sg_cel_charge(c, tenth(b.n) + 1))
		return NULL;
	return sg_cel_mk_str_owned(c, SG_CEL_STRING, b.p, b.n);
}

/* ---- approver-policy's ServiceAccount library ---- */

/* k8s.io/apiserver's serviceaccount.SplitUsername: the prefix, exactly
 * two ':'-separated parts, a DNS label namespace and a DNS subdomain name. */
static bool dns_label(const char *s, size_t n, size_t max)
{
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
		if (!alnum && !(ch == '-' && i > 0 && i + 1 < n))
			return false;
	}
	return true;
}

static bool dns_subdomain(const char *s, size_t n)
{
	if (n == 0 || n > 253)
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++)
		if (i == n || s[i] == '.') {
			if (!dns_label(s + start, i - start, 253))
				return false;
			start = i + 1;
		}
	return true;
}

static bool split_username(cval s, size_t *ns_len, const char **name, size_t *name_len)
{
	static const char prefix[] = "system:serviceaccount:";
	size_t pl = sizeof(prefix) - 1;
	if (s->s.n < pl || memcmp(s->s.p, prefix, pl) != 0)
		return false;
	const char *rest = s->s.p + pl;
	size_t rn = s->s.n - pl;
	const char *colon = memchr(rest, ':', rn);
	if (!colon || memchr(colon + 1, ':', rn - (size_t)(colon + 1 - rest)))
		return false;
	*ns_len = (size_t)(colon - rest);
	*name = colon + 1;
	*name_len = rn - *ns_len - 1;
	return dns_label(rest, *ns_len, 63) && dns_subdomain(*name, *name_len);
}

static cval f_service_account(ARGS)
{
	if (!IS(SG_CEL_STRING))
		return no_overload(c, call, a, n);
	size_t nsl, namel;
	const char *name;
	if (!split_username(a[0], &nsl, &name, &namel))
		return sg_cel_err(c,
		                  "Unable to convert to serviceaccount: err: Username must be in the form "
		                  "system:serviceaccount:namespace:name, username: %.300s",
		                  a[0]->s.p);
	const sg_cel_value **k = new_items(c, 2), **v = new_items(c, 2);
	sg_cel_value *o = sg_cel_new_value(c->a, SG_CEL_OBJECT);
	if (!k || !v || !o) {
		c->stop = true;
		return NULL;
	}
	k[0] = sg_cel_mk_str(c, SG_CEL_STRING, "name", 4);
	v[0] = sg_cel_mk_str(c, SG_CEL_STRING, name, namel);
	k[1] = sg_cel_mk_str(c, SG_CEL_STRING, "namespace", 9);
	v[1] = sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p + 22, nsl);
	o->map.k = k;
	o->map.v = v;
	o->map.n = 2;
	o->map.type = SG_CEL_SA_TYPE;
	return o;
}

static cval f_is_service_account(ARGS)
{
	if (!IS(SG_CEL_STRING))
		return no_overload(c, call, a, n);
	size_t nsl, namel;
	const char *name;
	return sg_cel_mk_bool(c, split_username(a[0], &nsl, &name, &namel));
}

static cval sa_field(sg_cel_ctx *c, cval *a, size_t n, const sg_cel_node *call, const char *field)
{
	if (n != 1 || a[0]->kind != SG_CEL_OBJECT || strcmp(a[0]->map.type, SG_CEL_SA_TYPE) != 0)
		return no_overload(c, call, a, n);
	cval v = sg_cel_map_find_str(a[0], field, strlen(field));
	return v ? v : sg_cel_err(c, "no such field: %s", field);
}

static cval f_sa_name(ARGS)
{
	return sa_field(c, a, n, call, "name");
}

static cval f_sa_namespace(ARGS)
{
	return sa_field(c, a, n, call, "namespace");
}

/* ---- the table ---- */

#define NUM2 "int,int->int;uint,uint->uint;double,double->double"
#define ORD                                                                                                            \
	"bool,bool->bool;int,int->bool;uint,uint->bool;double,double->bool;string,string->bool;bytes,bytes->bool;"     \
	"int,uint->bool;int,double->bool;uint,int->bool;uint,double->bool;double,int->bool;double,uint->bool"
#define SA SG_CEL_SA_TYPE

static const sg_cel_func funcs[] = {
    {"_+_", false, NUM2 ";string,string->string;bytes,bytes->bytes;list(A),list(A)->list(A)", f_add, 0},
    {"_-_", false, NUM2, f_sub, 0},
    {"_*_", false, NUM2, f_mul, 0},
    {"_/_", false, NUM2, f_div, 0},
    {"_%_", false, "int,int->int;uint,uint->uint", f_mod, 0},
    {"-_", false, "int->int;double->double", f_neg, 0},
    {"!_", false, "bool->bool", f_not, 0},
    {"_==_", false, "A,A->bool", f_eq, 0},
    {"_!=_", false, "A,A->bool", f_ne, 0},
    {"_<_", false, ORD, f_lt, 0},
    {"_<=_", false, ORD, f_le, 0},
    {"_>_", false, ORD, f_gt, 0},
    {"_>=_", false, ORD, f_ge, 0},
    {"@in", false, "A,list(A)->bool;A,map(A,B)->bool", f_in, 0},
    {"_[_]", false, "list(A),int->A;map(A,B),A->B", f_index, 0},
    {"_&&_", false, "bool,bool->bool", NULL, 0},
    {"_||_", false, "bool,bool->bool", NULL, 0},
    {"_?_:_", false, "bool,A,A->A", NULL, 0},
    {"size", false, "string->int;bytes->int;list(A)->int;map(A,B)->int", f_size, 0},
    {"size", true, "string->int;bytes->int;list(A)->int;map(A,B)->int", f_size, 0},
    {"int", false, "int->int;uint->int;double->int;string->int", f_int, 0},
    {"uint", false, "uint->uint;int->uint;double->uint;string->uint", f_uint, 0},
    {"double", false, "double->double;int->double;uint->double;string->double", f_double, 0},
    {"string", false, "string->string;int->string;uint->string;double->string;bool->string;bytes->string", f_string, 0},
    {"bytes", false, "bytes->bytes;string->bytes", f_bytes, 0},
    {"bool", false, "bool->bool;string->bool", f_bool, 0},
    {"type", false, "A->type(A)", f_type, 0},
    {"dyn", false, "A->dyn", f_dyn, 0},
    {"contains", true, "string,string->bool", f_contains, 0},
    {"startsWith", true, "string,string->bool", f_starts, 0},
    {"endsWith", true, "string,string->bool", f_ends, 0},
    {"matches", false, "string,string->bool", f_matches, 0},
    {"matches", true, "string,string->bool", f_matches, 0},
    {"charAt", true, "string,int->string", f_char_at, 0},
    {"indexOf", true, "string,string->int;string,string,int->int", f_index_of, 0},
    {"lastIndexOf", true, "string,string->int;string,string,int->int", f_last_index_of, 0},
    {"lowerAscii", true, "string->string", f_lower, 0},
    {"upperAscii", true, "string->string", f_upper, 0},
    {"replace", true, "string,string,string->string;string,string,string,int->string", f_replace, 0},
    {"split", true, "string,string->list(string);string,string,int->list(string)", f_split, 0},
    {"substring", true, "string,int->string;string,int,int->string", f_substring, 0},
    {"trim", true, "string->string", f_trim, 0},
    {"reverse", true, "string->string", f_reverse, 0},
    {"join", true, "list(string)->string;list(string),string->string", f_join, 0},
    {"format", true, "string,list(dyn)->string", f_format, 0},
    {"strings.quote", false, "string->string", f_quote, 0},
    {"serviceAccount", false, "string->" SA, f_service_account, SG_CEL_F_SA},
    {"isServiceAccount", false, "string->bool", f_is_service_account, SG_CEL_F_SA},
    {"getName", true, SA "->string", f_sa_name, SG_CEL_F_SA},
    {"getNamespace", true, SA "->string", f_sa_namespace, SG_CEL_F_SA},
};

const sg_cel_func *sg_cel_func_find(const char *name, bool member, bool sa_lib)
{
	for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
		const sg_cel_func *f = &funcs[i];
		if (f->member == member && strcmp(f->name, name) == 0 && (sa_lib || !(f->flags & SG_CEL_F_SA)))
			return f;
	}
	return NULL;
}

/* ---- the overloads, parsed once ---- */

#define NFUNCS (sizeof(funcs) / sizeof(funcs[0]))

static sg_cel_arena sig_arena; /* lives as long as the process */
static sg_cel_sig *sig_table[NFUNCS];
static size_t sig_count[NFUNCS];
static bool sig_failed;
static pthread_once_t sig_once = PTHREAD_ONCE_INIT;

static bool parse_sigs(size_t fi)
{
	const char *text = funcs[fi].sigs;
	size_t n = 1;
	for (const char *p = text; *p; p++)
		n += *p == ';';
	sg_cel_sig *sigs = sg_cel_alloc(&sig_arena, n * sizeof(*sigs));
	if (!sigs)
		return false;
	memset(sigs, 0, n * sizeof(*sigs));
	const char *p = text;
	for (size_t i = 0; i < n; i++) {
		/* "t1,t2->ret" */
		while (strncmp(p, "->", 2) != 0) {
			size_t used;
			const sg_cel_type *t = sg_cel_type_parse(&sig_arena, NULL, p, &used);
			if (!t || sigs[i].nargs == SG_CEL_SIG_ARGS_MAX)
				return false;
			sigs[i].args[sigs[i].nargs++] = t;
			p += used;
			if (*p == ',')
				p++;
		}
		size_t used;
		sigs[i].ret = sg_cel_type_parse(&sig_arena, NULL, p + 2, &used);
		if (!sigs[i].ret)
			return false;
		p += 2 + used;
		if (*p == ';')
			p++;
	}
	sig_table[fi] = sigs;
	sig_count[fi] = n;
	return true;
}

static void parse_all_sigs(void)
{
	for (size_t i = 0; i < NFUNCS; i++)
		if (!parse_sigs(i))
			sig_failed = true;
}

const sg_cel_sig *sg_cel_func_sigs(const sg_cel_func *f, size_t *n)
{
	pthread_once(&sig_once, parse_all_sigs);
	size_t i = (size_t)(f - funcs);
	if (sig_failed || i >= NFUNCS)
		return NULL;
	*n = sig_count[i];
	return sig_table[i];
}
