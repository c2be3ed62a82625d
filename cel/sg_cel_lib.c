/*
 * sg_cel_lib: the function table and CEL's standard definitions (cel-spec
 * doc/langdef.md, "Standard Definitions"). The table also lists cel-go's
 * strings extension (sg_cel_strings.c) and approver-policy's
 * ServiceAccount library (sg_cel_sa.c), whose implementations live in
 * their own files.
 *
 * One table row per function name and call style: the overloads the type
 * checker knows (a small signature notation, receiver first) and one C
 * implementation that dispatches on the arguments' runtime kinds, so that
 * an unchecked or dyn-typed call meets the same rules as a checked one.
 * An implementation never sees an error argument (the evaluator returns
 * the first one); it answers a value or an error value.
 *
 * Cost (sg_cel.c charges 1 per call): functions whose work grows with
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

/* A new string value of n bytes to fill in (p[n] is NUL). */
char *sg_cel_new_text(sg_cel_ctx *c, size_t n)
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

const sg_cel_value **sg_cel_new_items(sg_cel_ctx *c, size_t n)
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

static cval f_add(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT, SG_CEL_INT)) {
		int64_t r;
		if (__builtin_add_overflow(a[0]->i, a[1]->i, &r))
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, r);
	}
	if (SG_CEL_IS(SG_CEL_UINT, SG_CEL_UINT)) {
		uint64_t r;
		if (__builtin_add_overflow(a[0]->u, a[1]->u, &r))
			return sg_cel_err(c, "unsigned integer overflow");
		return sg_cel_mk_uint(c, r);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d + a[1]->d);
	if (SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING) || SG_CEL_IS(SG_CEL_BYTES, SG_CEL_BYTES)) {
		size_t len = a[0]->s.n + a[1]->s.n;
		if (!sg_cel_charge(c, sg_cel_tenth(len)))
			return NULL;
		char *p = sg_cel_new_text(c, len);
		if (!p)
			return NULL;
		memcpy(p, a[0]->s.p, a[0]->s.n);
		memcpy(p + a[0]->s.n, a[1]->s.p, a[1]->s.n);
		return sg_cel_mk_str_owned(c, a[0]->kind, p, len);
	}
	if (SG_CEL_IS(SG_CEL_LIST, SG_CEL_LIST)) {
		size_t len = a[0]->list.n + a[1]->list.n;
		if (!sg_cel_charge(c, sg_cel_tenth(len)))
			return NULL;
		const sg_cel_value **v = sg_cel_new_items(c, len);
		if (!v)
			return NULL;
		if (a[0]->list.n)
			memcpy(v, a[0]->list.v, a[0]->list.n * sizeof(*v));
		if (a[1]->list.n)
			memcpy(v + a[0]->list.n, a[1]->list.v, a[1]->list.n * sizeof(*v));
		return sg_cel_mk_list(c, v, len);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_sub(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT, SG_CEL_INT)) {
		int64_t r;
		if (__builtin_sub_overflow(a[0]->i, a[1]->i, &r))
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, r);
	}
	if (SG_CEL_IS(SG_CEL_UINT, SG_CEL_UINT)) {
		uint64_t r;
		if (__builtin_sub_overflow(a[0]->u, a[1]->u, &r))
			return sg_cel_err(c, "unsigned integer overflow");
		return sg_cel_mk_uint(c, r);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d - a[1]->d);
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_mul(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT, SG_CEL_INT)) {
		int64_t r;
		if (__builtin_mul_overflow(a[0]->i, a[1]->i, &r))
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, r);
	}
	if (SG_CEL_IS(SG_CEL_UINT, SG_CEL_UINT)) {
		uint64_t r;
		if (__builtin_mul_overflow(a[0]->u, a[1]->u, &r))
			return sg_cel_err(c, "unsigned integer overflow");
		return sg_cel_mk_uint(c, r);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d * a[1]->d);
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_div(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT, SG_CEL_INT)) {
		if (a[1]->i == 0)
			return sg_cel_err(c, "division by zero");
		if (a[0]->i == INT64_MIN && a[1]->i == -1)
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, a[0]->i / a[1]->i);
	}
	if (SG_CEL_IS(SG_CEL_UINT, SG_CEL_UINT)) {
		if (a[1]->u == 0)
			return sg_cel_err(c, "division by zero");
		return sg_cel_mk_uint(c, a[0]->u / a[1]->u);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE, SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, a[0]->d / a[1]->d);
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_mod(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT, SG_CEL_INT)) {
		if (a[1]->i == 0)
			return sg_cel_err(c, "modulus by zero");
		if (a[0]->i == INT64_MIN && a[1]->i == -1)
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, a[0]->i % a[1]->i);
	}
	if (SG_CEL_IS(SG_CEL_UINT, SG_CEL_UINT)) {
		if (a[1]->u == 0)
			return sg_cel_err(c, "modulus by zero");
		return sg_cel_mk_uint(c, a[0]->u % a[1]->u);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_neg(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT)) {
		if (a[0]->i == INT64_MIN)
			return sg_cel_err(c, "integer overflow");
		return sg_cel_mk_int(c, -a[0]->i);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE))
		return sg_cel_mk_double(c, -a[0]->d);
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_not(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_BOOL))
		return sg_cel_mk_bool(c, !a[0]->b);
	return sg_cel_fn_no_overload(c, call, a, n);
}

/* ---- comparison ---- */

static cval f_eq(SG_CEL_ARGS)
{
	if (n != 2)
		return sg_cel_fn_no_overload(c, call, a, n);
	bool eq = sg_cel_eq(c, a[0], a[1]);
	return c->stop ? NULL : sg_cel_mk_bool(c, eq);
}

static cval f_ne(SG_CEL_ARGS)
{
	if (n != 2)
		return sg_cel_fn_no_overload(c, call, a, n);
	bool eq = sg_cel_eq(c, a[0], a[1]);
	return c->stop ? NULL : sg_cel_mk_bool(c, !eq);
}

static cval order(SG_CEL_ARGS, int want_lo, int want_hi)
{
	if (n != 2)
		return sg_cel_fn_no_overload(c, call, a, n);
	int r = sg_cel_compare(a[0], a[1]);
	if (r == -2)
		return sg_cel_fn_no_overload(c, call, a, n);
	/* Strings and bytes compare in time linear in the shorter. */
	if (a[0]->kind == SG_CEL_STRING || a[0]->kind == SG_CEL_BYTES) {
		size_t len = a[0]->s.n < a[1]->s.n ? a[0]->s.n : a[1]->s.n;
		if (!sg_cel_charge(c, sg_cel_tenth(len)))
			return NULL;
	}
	if (r == 2)
		return sg_cel_mk_bool(c, false);
	return sg_cel_mk_bool(c, r >= want_lo && r <= want_hi);
}

static cval f_lt(SG_CEL_ARGS)
{
	return order(c, a, n, call, -1, -1);
}

static cval f_le(SG_CEL_ARGS)
{
	return order(c, a, n, call, -1, 0);
}

static cval f_gt(SG_CEL_ARGS)
{
	return order(c, a, n, call, 1, 1);
}

static cval f_ge(SG_CEL_ARGS)
{
	return order(c, a, n, call, 0, 1);
}

static cval f_in(SG_CEL_ARGS)
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
		uint64_t work;
		bool found = sg_cel_map_find_w(a[1], a[0], &work) != NULL;
		if (!sg_cel_charge(c, sg_cel_tenth(work)))
			return NULL;
		return sg_cel_mk_bool(c, found);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
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

static cval f_index(SG_CEL_ARGS)
{
	if (n == 2 && a[0]->kind == SG_CEL_LIST) {
		int64_t i;
		if (!as_index(a[1], &i))
			return sg_cel_fn_no_overload(c, call, a, n);
		if (i < 0 || (uint64_t)i >= a[0]->list.n)
			return sg_cel_err(c, "index out of bounds: %lld", (long long)i);
		return a[0]->list.v[i];
	}
	if (n == 2 && a[0]->kind == SG_CEL_MAP) {
		uint64_t work;
		cval v = sg_cel_map_find_w(a[0], a[1], &work);
		if (!sg_cel_charge(c, sg_cel_tenth(work)))
			return NULL;
		if (!v) {
			if (a[1]->kind == SG_CEL_STRING)
				return sg_cel_err(c, "no such key: %.100s", a[1]->s.p);
			return sg_cel_err(c, "no such key");
		}
		return v;
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

/* ---- size and conversions ---- */

static cval f_size(SG_CEL_ARGS)
{
	if (n == 1) {
		switch (a[0]->kind) {
		case SG_CEL_STRING:
			if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n)))
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
	return sg_cel_fn_no_overload(c, call, a, n);
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

static cval f_int(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_INT))
		return a[0];
	if (SG_CEL_IS(SG_CEL_UINT)) {
		if (a[0]->u > INT64_MAX)
			return sg_cel_err(c, "range error converting %llu to int", (unsigned long long)a[0]->u);
		return sg_cel_mk_int(c, (int64_t)a[0]->u);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE)) {
		double d = a[0]->d;
		/* (minInt, maxInt), both ends excluded (spec: "Overflow"). */
		if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
			return sg_cel_err(c, "range error converting %g to int", d);
		return sg_cel_mk_int(c, (int64_t)d);
	}
	if (SG_CEL_IS(SG_CEL_STRING)) {
		int64_t i;
		if (!parse_int(a[0]->s.p, a[0]->s.n, true, &i, NULL))
			return sg_cel_err(c, "type conversion error from 'string' to 'int'");
		return sg_cel_mk_int(c, i);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_uint(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_UINT))
		return a[0];
	if (SG_CEL_IS(SG_CEL_INT)) {
		if (a[0]->i < 0)
			return sg_cel_err(c, "range error converting %lld to uint", (long long)a[0]->i);
		return sg_cel_mk_uint(c, (uint64_t)a[0]->i);
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE)) {
		double d = a[0]->d;
		/* cel-go: negative (but -0.0), NaN, or 2^64 and past: a range error. */
		if (!(d >= 0 && d < 18446744073709551616.0))
			return sg_cel_err(c, "range error converting %g to uint", d);
		return sg_cel_mk_uint(c, (uint64_t)d);
	}
	if (SG_CEL_IS(SG_CEL_STRING)) {
		uint64_t u;
		if (!parse_int(a[0]->s.p, a[0]->s.n, false, NULL, &u))
			return sg_cel_err(c, "type conversion error from 'string' to 'uint'");
		return sg_cel_mk_uint(c, u);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
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

static cval f_double(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_DOUBLE))
		return a[0];
	if (SG_CEL_IS(SG_CEL_INT))
		return sg_cel_mk_double(c, (double)a[0]->i);
	if (SG_CEL_IS(SG_CEL_UINT))
		return sg_cel_mk_double(c, (double)a[0]->u);
	if (SG_CEL_IS(SG_CEL_STRING)) {
		double d;
		if (!parse_double(a[0]->s.p, a[0]->s.n, &d))
			return sg_cel_err(c, "type conversion error from 'string' to 'double'");
		return sg_cel_mk_double(c, d);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
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
void sg_cel_fmt_double(char *out, size_t cap, double d, char mode)
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

static cval f_string(SG_CEL_ARGS)
{
	char buf[400];
	if (SG_CEL_IS(SG_CEL_STRING))
		return a[0];
	if (SG_CEL_IS(SG_CEL_INT)) {
		snprintf(buf, sizeof(buf), "%lld", (long long)a[0]->i);
		return sg_cel_mk_str(c, SG_CEL_STRING, buf, strlen(buf));
	}
	if (SG_CEL_IS(SG_CEL_UINT)) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)a[0]->u);
		return sg_cel_mk_str(c, SG_CEL_STRING, buf, strlen(buf));
	}
	if (SG_CEL_IS(SG_CEL_DOUBLE)) {
		sg_cel_fmt_double(buf, sizeof(buf), a[0]->d, 'g');
		return sg_cel_mk_str(c, SG_CEL_STRING, buf, strlen(buf));
	}
	if (SG_CEL_IS(SG_CEL_BOOL))
		return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->b ? "true" : "false", a[0]->b ? 4 : 5);
	if (SG_CEL_IS(SG_CEL_BYTES)) {
		/* Charged before validating: an error here can be absorbed by
		 * || or exists, and the loop go on. */
		if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n)))
			return NULL;
		if (!sg_cel_utf8_valid(a[0]->s.p, a[0]->s.n))
			return sg_cel_err(c, "invalid UTF-8 in bytes, cannot convert to string");
		return sg_cel_mk_str(c, SG_CEL_STRING, a[0]->s.p, a[0]->s.n);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_bytes(SG_CEL_ARGS)
{
	if (SG_CEL_IS(SG_CEL_BYTES))
		return a[0];
	if (SG_CEL_IS(SG_CEL_STRING)) {
		if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n)))
			return NULL;
		return sg_cel_mk_str(c, SG_CEL_BYTES, a[0]->s.p, a[0]->s.n);
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_bool(SG_CEL_ARGS)
{
	static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
	static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
	if (SG_CEL_IS(SG_CEL_BOOL))
		return a[0];
	if (SG_CEL_IS(SG_CEL_STRING)) {
		for (size_t i = 0; i < 6; i++) {
			if (strlen(yes[i]) == a[0]->s.n && memcmp(yes[i], a[0]->s.p, a[0]->s.n) == 0)
				return sg_cel_mk_bool(c, true);
			if (strlen(no[i]) == a[0]->s.n && memcmp(no[i], a[0]->s.p, a[0]->s.n) == 0)
				return sg_cel_mk_bool(c, false);
		}
		return sg_cel_err(c, "type conversion error from 'string' to 'bool'");
	}
	return sg_cel_fn_no_overload(c, call, a, n);
}

static cval f_type(SG_CEL_ARGS)
{
	if (n != 1)
		return sg_cel_fn_no_overload(c, call, a, n);
	return sg_cel_mk_type(c, sg_cel_kind_name(a[0]));
}

static cval f_dyn(SG_CEL_ARGS)
{
	if (n != 1)
		return sg_cel_fn_no_overload(c, call, a, n);
	return a[0];
}

/* ---- string predicates and RE2 ---- */

static cval f_contains(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth((uint64_t)a[0]->s.n * (a[1]->s.n ? a[1]->s.n : 1))))
		return NULL;
	if (a[1]->s.n == 0)
		return sg_cel_mk_bool(c, true);
	for (size_t i = 0; i + a[1]->s.n <= a[0]->s.n; i++)
		if (sg_cel_has_at(a[0], i, a[1]))
			return sg_cel_mk_bool(c, true);
	return sg_cel_mk_bool(c, false);
}

static cval f_starts(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[1]->s.n)))
		return NULL;
	return sg_cel_mk_bool(c, sg_cel_has_at(a[0], 0, a[1]));
}

static cval f_ends(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (!sg_cel_charge(c, sg_cel_tenth(a[1]->s.n)))
		return NULL;
	return sg_cel_mk_bool(c, a[1]->s.n <= a[0]->s.n && sg_cel_has_at(a[0], a[0]->s.n - a[1]->s.n, a[1]));
}

static cval f_matches(SG_CEL_ARGS)
{
	if (!SG_CEL_IS(SG_CEL_STRING, SG_CEL_STRING))
		return sg_cel_fn_no_overload(c, call, a, n);
	if (a[1]->s.n > SG_CEL_RE2_PATTERN_MAX)
		return sg_cel_err(c, "regular expression longer than %u bytes", SG_CEL_RE2_PATTERN_MAX);
	if (!sg_cel_charge(c, sg_cel_tenth(a[0]->s.n) + a[1]->s.n))
		return NULL;
	char why[200];
	int r = call->call.re ? sg_cel_re2_match(call->call.re, a[0]->s.p, a[0]->s.n)
	                      : sg_cel_re2_search(a[1]->s.p, a[1]->s.n, a[0]->s.p, a[0]->s.n, why, sizeof(why));
	if (r < 0)
		return sg_cel_err(c, "error parsing regexp: %s", why);
	return sg_cel_mk_bool(c, r == 1);
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
    {"charAt", true, "string,int->string", sg_cel_fn_char_at, 0},
    {"indexOf", true, "string,string->int;string,string,int->int", sg_cel_fn_index_of, 0},
    {"lastIndexOf", true, "string,string->int;string,string,int->int", sg_cel_fn_last_index_of, 0},
    {"lowerAscii", true, "string->string", sg_cel_fn_lower, 0},
    {"upperAscii", true, "string->string", sg_cel_fn_upper, 0},
    {"replace", true, "string,string,string->string;string,string,string,int->string", sg_cel_fn_replace, 0},
    {"split", true, "string,string->list(string);string,string,int->list(string)", sg_cel_fn_split, 0},
    {"substring", true, "string,int->string;string,int,int->string", sg_cel_fn_substring, 0},
    {"trim", true, "string->string", sg_cel_fn_trim, 0},
    {"reverse", true, "string->string", sg_cel_fn_reverse, 0},
    {"join", true, "list(string)->string;list(string),string->string", sg_cel_fn_join, 0},
    {"format", true, "string,list(dyn)->string", sg_cel_fn_format, 0},
    {"strings.quote", false, "string->string", sg_cel_fn_quote, 0},
    {"serviceAccount", false, "string->" SA, sg_cel_fn_service_account, SG_CEL_F_SA},
    {"isServiceAccount", false, "string->bool", sg_cel_fn_is_service_account, SG_CEL_F_SA},
    {"getName", true, SA "->string", sg_cel_fn_sa_name, SG_CEL_F_SA},
    {"getNamespace", true, SA "->string", sg_cel_fn_sa_namespace, SG_CEL_F_SA},
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
