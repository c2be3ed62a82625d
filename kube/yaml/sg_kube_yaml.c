/*
 * YAML into jansson (contract: sg_kube_yaml.h), from libyaml's event
 * parser.
 *
 * Design notes. Why events and not libyaml's document loader: the loader
 * builds the whole node graph before anything can be checked, and
 * libyaml's scanner walks its stack of possible simple keys, one per open
 * flow collection, at every token, so a text of 200,000 nested '[' takes
 * minutes (quadratic) inside the loader. Built from events, the tree is
 * checked as it grows: nesting past max_depth stops the parse at once,
 * while the scanner's stack is still that small. An alias is the anchored
 * node's tree again (a new reference, not a copy), and it counts as many
 * visits as that tree has nodes, so a "billion laughs" runs out of visits
 * and not memory.
 *
 * The typed reading follows go-yaml v2's resolve(), the parser behind
 * sigs.k8s.io/yaml and so behind kubectl: a plain scalar is null, a
 * boolean, an integer or a float by its text, else a string; a quoted one
 * is always a string. An explicit tag is refused (libyaml reports "!!str"
 * as it does any tag, but go-yaml's reading of tags is not reproduced
 * here), as are the values JSON cannot carry, so that nothing is turned
 * into what kubectl would not have sent.
 */
#include "sg_kube_yaml.h"

#include "sg_guard.h"
#include "sg_log.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* An anchored node: its tree and how many nodes it counts as. */
typedef struct anchor {
	char *name;
	json_t *value;
	size_t nodes;
} anchor;

/* An open sequence or mapping. */
typedef struct frame {
	json_t *node;
	char *anchor;        /* its anchor, or NULL */
	size_t visits_start; /* t->visits when it opened */
	char *key;           /* a mapping's key waiting for its value, or NULL */
	size_t key_len;
} frame;

struct ytree {
	const sg_kube_yaml_options *o;
	size_t visits;
	frame *stack; /* max_depth + 1 frames */
	size_t depth; /* frames open */
	anchor *anchors;
	size_t nanchors, anchors_cap;
	json_t *root;
	bool budget;   /* max_nodes was passed */
	bool generic;  /* a refusal without a reason of its own (kubeconfig's wording) */
	char why[192]; /* the first refusal with a reason of its own, or "" */
};

static bool one_of(const char *s, size_t n, const char *const *list)
{
	for (; *list; list++)
		if (strlen(*list) == n && memcmp(*list, s, n) == 0)
			return true;
	return false;
}

static bool digit(char c)
{
	return c >= '0' && c <= '9';
}

/* go-yaml v2's yamlStyleFloat: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static bool float_form(const char *s)
{
	size_t d = 0;
	if (*s == '+' || *s == '-')
		s++;
	if (*s == '.') {
		for (s++; digit(*s); s++)
			d++;
		if (!d)
			return false;
	} else {
		for (; digit(*s); s++)
			d++;
		if (!d)
			return false;
		if (*s == '.')
			for (s++; digit(*s); s++)
				;
	}
	if (*s == 'e' || *s == 'E') {
		size_t e = 0;
		s++;
		if (*s == '+' || *s == '-')
			s++;
		for (; digit(*s); s++)
			e++;
		if (!e)
			return false;
	}
	return *s == 0;
}

/* Go's strconv.ParseInt(s, 0, 64): sign, then 0x / 0o / 0b / 0 (octal)
 * or decimal. false when s is not such an integer; *range when it is
 * one, beyond int64. */
static bool int_form(const char *s, json_int_t *out, bool *range)
{
	*range = false;
	bool neg = *s == '-';
	if (*s == '+' || *s == '-')
		s++;
	unsigned base = 10;
	if (s[0] == '0' && s[1]) {
		char p = s[1];
		base = (p == 'x' || p == 'X') ? 16 : (p == 'b' || p == 'B') ? 2 : 8;
		s += (p == 'x' || p == 'X' || p == 'b' || p == 'B' || p == 'o' || p == 'O') ? 2 : 1;
	}
	if (!*s)
		return false;
	uint64_t v = 0;
	bool over = false;
	for (; *s; s++) {
		unsigned d = digit(*s)                  ? (unsigned)(*s - '0')
		             : (*s >= 'a' && *s <= 'f') ? (unsigned)(*s - 'a' + 10)
		             : (*s >= 'A' && *s <= 'F') ? (unsigned)(*s - 'A' + 10)
		                                        : 99;
		if (d >= base)
			return false;
		if (v > (UINT64_MAX - d) / base)
			over = true;
		else
			v = v * base + d;
	}
	uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	if (over || v > limit) {
		*range = true;
		return false;
	}
	*out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(json_int_t)v) : (json_int_t)v;
	return true;
}

static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
static const char *const trues[] = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", NULL};
static const char *const falses[] = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", NULL};
static const char *const specials[] = {".inf",  ".Inf",  ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
                                       "-.Inf", "-.INF", ".nan", ".NaN",  ".NAN",  NULL};

/* A plain scalar, as go-yaml v2 resolves it. */
static json_t *typed_scalar(struct ytree *t, const char *s, size_t len, size_t line)
{
	if (one_of(s, len, nulls))
		return json_null();
	if (one_of(s, len, trues))
		return json_true();
	if (one_of(s, len, falses))
		return json_false();
	if (one_of(s, len, specials)) {
		snprintf(t->why, sizeof(t->why), "line %zu: %.8s is not a number JSON can hold (quote it for a string)",
		         line, s);
		return NULL;
	}
	/* Numbers: '_' is ignored (go-yaml v2 drops it before parsing). */
	if (len == 0 || len > 64 || !(digit(s[0]) || s[0] == '+' || s[0] == '-' || s[0] == '.'))
		return json_stringn(s, len);
	if (memchr(s, 0, len))
		return json_stringn(s, len);
	char plain[65];
	size_t k = 0;
	for (size_t i = 0; i < len; i++)
		if (s[i] != '_')
			plain[k++] = s[i];
	plain[k] = 0;
	json_int_t iv = 0;
	bool range = false;
	if (int_form(plain, &iv, &range))
		return json_integer(iv);
	if (range) {
		char shown[72];
		sg_log_printable(shown, sizeof(shown), s, len);
		snprintf(t->why, sizeof(t->why), "line %zu: the integer %s is out of range", line, shown);
		return NULL;
	}
	if (float_form(plain)) {
		errno = 0;
		double d = strtod(plain, NULL);
		if (isinf(d))
			return json_stringn(s, len); /* Go's ParseFloat fails: a string */
		/* JSON has one kind of number: 1e3 reaches the API server as 1000. */
		if (d == floor(d) && fabs(d) < 9007199254740992.0)
			return json_integer((json_int_t)d);
		return json_real(d);
	}
	return json_stringn(s, len);
}

static int load_error(yaml_parser_t *parser, const char *what)
{
	char why[128];
	sg_log_printable(why, sizeof(why), parser->problem ? parser->problem : "?",
	                 parser->problem ? strlen(parser->problem) : 1);
	size_t line = parser->problem_mark.line + 1;
	return sg_error_set(SG_EINVAL, "%s: YAML error at line %zu: %s", what, line, why);
}

/* ---- the tree, event by event ---- */

static bool refuse_tag(struct ytree *t, const yaml_char_t *tag, const yaml_mark_t *m)
{
	if (!t->o->typed || !tag)
		return false;
	char shown[64];
	sg_log_printable(shown, sizeof(shown), (const char *)tag, strlen((const char *)tag));
	snprintf(t->why, sizeof(t->why),
	         "line %zu: the tag %s is not supported (a plain value that begins with '!' is a tag: quote it)",
	         (size_t)m->line + 1, shown);
	return true;
}

/* One more node at the current depth; false past a bound. */
static bool count_node(struct ytree *t, const yaml_mark_t *m, size_t nodes)
{
	if (t->depth > t->o->max_depth) {
		if (t->o->typed)
			snprintf(t->why, sizeof(t->why), "line %zu: nested deeper than %u", (size_t)m->line + 1,
			         t->o->max_depth);
		t->generic = true;
		return false;
	}
	if (nodes > t->o->max_nodes - t->visits || (t->visits += nodes) > t->o->max_nodes) {
		t->budget = true;
		return false;
	}
	return true;
}

static bool remember(struct ytree *t, const yaml_char_t *name, json_t *v, size_t nodes)
{
	if (!name)
		return true;
	if (t->nanchors == t->anchors_cap) {
		size_t cap = t->anchors_cap ? t->anchors_cap * 2 : 16;
		anchor *a = realloc(t->anchors, cap * sizeof(*a));
		if (!a)
			return false;
		t->anchors = a;
		t->anchors_cap = cap;
	}
	char *copy = strdup((const char *)name);
	if (!copy)
		return false;
	t->anchors[t->nanchors++] = (anchor){copy, json_incref(v), nodes};
	return true;
}

/* v (a new reference, taken) into the open collection, or as the root.
 * In a mapping with no key waiting, v is the key: key says whether the
 * event was a scalar fit to be one. */
static bool place(struct ytree *t, json_t *v, bool key, const yaml_mark_t *m)
{
	if (!v)
		return false;
	if (t->depth == 0) {
		t->root = v;
		return true;
	}
	frame *f = &t->stack[t->depth - 1];
	if (json_is_array(f->node))
		return json_array_append_new(f->node, v) == 0;
	if (f->key) {
		int rc = json_object_setn_new(f->node, f->key, f->key_len, v);
		free(f->key);
		f->key = NULL;
		return rc == 0;
	}
	/* A key: a string scalar (anything else is refused). */
	const char *k = json_string_value(v);
	size_t klen = json_string_length(v);
	if (!key || !k) {
		json_decref(v);
		t->generic = true;
		return false;
	}
	if (json_object_getn(f->node, k, klen)) {
		if (t->o->typed) {
			char shown[64];
			sg_log_printable(shown, sizeof(shown), k, klen);
			snprintf(t->why, sizeof(t->why), "line %zu: duplicate key \"%s\"", (size_t)m->line + 1, shown);
		}
		t->generic = true;
		json_decref(v);
		return false;
	}
	f->key = malloc(klen + 1);
	if (f->key) {
		memcpy(f->key, k, klen + 1);
		f->key_len = klen;
	}
	json_decref(v);
	return f->key != NULL;
}

/* Whether the open collection is a mapping waiting for a key. */
static bool at_key(const struct ytree *t)
{
	const frame *f = t->depth ? &t->stack[t->depth - 1] : NULL;
	return f && json_is_object(f->node) && !f->key;
}

static bool on_scalar(struct ytree *t, const yaml_event_t *e)
{
	const char *s = (const char *)e->data.scalar.value;
	size_t len = e->data.scalar.length;
	bool plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	if (refuse_tag(t, e->data.scalar.tag, &e->start_mark) || !count_node(t, &e->start_mark, 1))
		return false;
	bool key = at_key(t);
	if (key && t->o->typed && plain && len == 2 && memcmp(s, "<<", 2) == 0) {
		snprintf(t->why, sizeof(t->why), "line %zu: merge keys (<<) are not supported",
		         (size_t)e->start_mark.line + 1);
		return false;
	}
	/* Keys are text, whatever they look like (JSON's keys are strings). */
	json_t *v = (t->o->typed && plain && !key) ? typed_scalar(t, s, len, (size_t)e->start_mark.line + 1)
	                                           : json_stringn(s, len);
	if (!v || !remember(t, e->data.scalar.anchor, v, 1)) {
		json_decref(v);
		return false;
	}
	return place(t, v, key, &e->start_mark);
}

static bool on_start(struct ytree *t, const yaml_event_t *e, bool mapping)
{
	const yaml_char_t *tag = mapping ? e->data.mapping_start.tag : e->data.sequence_start.tag;
	const yaml_char_t *name = mapping ? e->data.mapping_start.anchor : e->data.sequence_start.anchor;
	if (refuse_tag(t, tag, &e->start_mark) || !count_node(t, &e->start_mark, 1))
		return false;
	if (at_key(t)) {
		t->generic = true; /* a collection as a key */
		return false;
	}
	json_t *node = mapping ? json_object() : json_array();
	char *anchor_name = name ? strdup((const char *)name) : NULL;
	if (!node || (name && !anchor_name)) {
		json_decref(node);
		free(anchor_name);
		return false;
	}
	t->stack[t->depth++] = (frame){.node = node, .anchor = anchor_name, .visits_start = t->visits - 1};
	return true;
}

static bool on_end(struct ytree *t, const yaml_event_t *e)
{
	frame f = t->stack[--t->depth];
	free(f.key);
	bool ok = remember(t, (const yaml_char_t *)f.anchor, f.node, t->visits - f.visits_start);
	free(f.anchor);
	if (!ok) {
		json_decref(f.node);
		return false;
	}
	return place(t, f.node, false, &e->start_mark);
}

static bool on_alias(struct ytree *t, const yaml_event_t *e)
{
	const char *name = (const char *)e->data.alias.anchor;
	const anchor *a = NULL;
	for (size_t i = t->nanchors; i-- > 0 && !a;)
		if (strcmp(t->anchors[i].name, name) == 0)
			a = &t->anchors[i];
	if (!a) {
		if (t->o->typed) {
			char shown[64];
			sg_log_printable(shown, sizeof(shown), name, strlen(name));
			snprintf(t->why, sizeof(t->why), "line %zu: the alias *%s names no anchor before it",
			         (size_t)e->start_mark.line + 1, shown);
		}
		t->generic = true; /* an alias of an unknown (or still open) anchor */
		return false;
	}
	if (at_key(t)) {
		t->generic = true;
		return false;
	}
	if (!count_node(t, &e->start_mark, a->nodes))
		return false;
	return place(t, json_incref(a->value), false, &e->start_mark);
}

static void tree_clear(struct ytree *t)
{
	while (t->depth > 0) {
		frame *f = &t->stack[--t->depth];
		json_decref(f->node);
		free(f->anchor);
		free(f->key);
	}
	for (size_t i = 0; i < t->nanchors; i++) {
		free(t->anchors[i].name);
		json_decref(t->anchors[i].value);
	}
	free(t->anchors);
	free(t->stack);
	json_decref(t->root);
}

/* One event into t; false to stop. *docs counts the documents begun;
 * *second says a later document holds something. */
static bool on_event(struct ytree *t, const yaml_event_t *e, size_t *docs, size_t *second)
{
	if (*docs > 1) {
		/* Past the first document (single): only empty ones are fine. */
		if (e->type == YAML_SCALAR_EVENT && e->data.scalar.length == 0)
			return true;
		if (e->type == YAML_SEQUENCE_START_EVENT || e->type == YAML_MAPPING_START_EVENT ||
		    e->type == YAML_SCALAR_EVENT || e->type == YAML_ALIAS_EVENT) {
			*second = (size_t)e->start_mark.line + 1;
			return false;
		}
		if (e->type == YAML_DOCUMENT_START_EVENT)
			(*docs)++;
		return true;
	}
	switch (e->type) {
	case YAML_DOCUMENT_START_EVENT:
		(*docs)++;
		return true;
	case YAML_SCALAR_EVENT:
		return on_scalar(t, e);
	case YAML_SEQUENCE_START_EVENT:
		return on_start(t, e, false);
	case YAML_MAPPING_START_EVENT:
		return on_start(t, e, true);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		return on_end(t, e);
	case YAML_ALIAS_EVENT:
		return on_alias(t, e);
	default:
		return true;
	}
}

int sg_kube_yaml_to_json(json_t **out, const void *data, size_t len, const sg_kube_yaml_options *o)
{
	*out = NULL;
	const char *what = o->what ? o->what : "YAML";
	SG_ENSURE(len <= o->max_bytes, SG_EINVAL, "%s: larger than %zu bytes", what, o->max_bytes);
	struct ytree t = {.o = o};
	t.stack = calloc((size_t)o->max_depth + 1, sizeof(*t.stack));
	yaml_parser_t parser;
	if (!t.stack || !yaml_parser_initialize(&parser)) {
		free(t.stack);
		SG_BAIL(SG_EINTERNAL, "%s: out of memory", what);
	}
	yaml_parser_set_input_string(&parser, data, len);
	size_t docs = 0, second = 0;
	bool parse_failed = false, stopped = false, done = false;
	while (!done) {
		yaml_event_t e;
		if (!yaml_parser_parse(&parser, &e)) {
			parse_failed = true;
			break;
		}
		bool ok = on_event(&t, &e, &docs, &second);
		/* Without single, the first document is all that is read. */
		done = e.type == YAML_STREAM_END_EVENT || (!o->single && e.type == YAML_DOCUMENT_END_EVENT);
		yaml_event_delete(&e);
		if (!ok) {
			stopped = true;
			break;
		}
	}
	int rc = SG_OK;
	if (parse_failed)
		rc = load_error(&parser, what);
	else if (second)
		rc = sg_error_set(SG_EINVAL, "%s: a second document at line %zu (one object per file)", what, second);
	else if (stopped && t.why[0] && !t.budget)
		rc = sg_error_set(SG_EINVAL, "%s: %s", what, t.why);
	else if (stopped && (t.budget || t.generic))
		rc = sg_error_set(SG_EINVAL, "%s: %s", what,
		                  t.budget ? "document too large or too deep"
		                           : "duplicate or non-scalar key, or too deep");
	else if (stopped)
		rc = sg_error_set(SG_EINTERNAL, "%s: out of memory", what);
	else if (!t.root)
		rc = sg_error_set(SG_EINVAL, "%s: empty document", what);
	else if (!json_is_object(t.root))
		rc = sg_error_set(SG_EINVAL, "%s: the document is not a mapping", what);
	yaml_parser_delete(&parser);
	if (rc == SG_OK)
		*out = SG_MOVE(t.root);
	tree_clear(&t);
	return rc;
}
