/*
 * sg_crpolicy_impl: what the files of sg_crpolicy share and nobody else
 * sees: the string types and the bounded message builder, Go's text forms
 * and apimachinery's field.ErrorList, the wildcards, the compiled policy
 * (struct sg_crpolicy and its tables) and the compiler's state. Not
 * installed, not public: on sg_controllers' private include path only.
 * The shared functions and tables carry a crpolicy_ prefix, so that none of
 * them can clash with another layer's symbol at link time; the types keep
 * their short names, which no linker sees.
 *
 * The files: sg_crpolicy.c, selectors and the CertificateRequest's
 * condition messages (its design comment explains the whole);
 * sg_crpolicy_text.c, Go's text forms, field.ErrorList and the wildcards;
 * sg_crpolicy_compile.c, a policy read into plain C as the API server's
 * schema reads it, and its accessors; sg_crpolicy_webhook.c, what
 * approver-policy's admission webhook would refuse; sg_crpolicy_eval.c,
 * the allowed and constraints evaluators and the verdict.
 */
#ifndef SG_CRPOLICY_IMPL_H
#define SG_CRPOLICY_IMPL_H

#include "sg_crpolicy.h"
#include "sg_strbuf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A string with its length; not NUL-terminated unless it came from one. */
typedef struct sstr {
	const char *p;
	size_t len;
} sstr;

static inline sstr cstr(const char *s)
{
	return (sstr){s ? s : "", s ? strlen(s) : 0};
}

static inline bool sstr_eq(sstr a, sstr b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static inline bool sstr_is(sstr a, const char *s)
{
	return sstr_eq(a, cstr(s));
}

/* ------------------------------------------------------------------ */
/* The string builder                                                 */

/* Every message is built by common/sg_strbuf, bounded by
 * SG_CRPOLICY_MAX_MESSAGE: a message that would pass it, like one out of
 * memory, fails as a whole (sg_strbuf_take answers NULL). */
typedef sg_strbuf sb;
static const sb SB_INIT = {.max = SG_CRPOLICY_MAX_MESSAGE};

static inline void sb_put(sb *b, sstr s)
{
	sg_strbuf_add(b, s.p, s.len);
}

/* ------------------------------------------------------------------ */
/* Go's text forms (sg_crpolicy_text.c)                               */

/* strconv.Quote (fmt's %q on a string). */
void crpolicy_sb_go_quote(sb *b, sstr s);
/* encoding/json's string form (HTML-safe, as json.Marshal writes it). */
void crpolicy_sb_json_quote(sb *b, sstr s);
/* time.Duration.String() of whole seconds. */
void crpolicy_sb_duration(sb *b, int64_t seconds);
/* Joins strings with ", " (strings.Join) into a new builder. */
void crpolicy_sb_join(sb *b, const sstr *v, size_t n);

/* ------------------------------------------------------------------ */
/* field.ErrorList (sg_crpolicy_text.c)                               */

typedef struct ferrs {
	char **v;
	size_t n, cap;
	bool failed;
} ferrs;

/* Takes the message built in m; drops it when an identical one is there
 * (ErrorList.ToAggregate). */
void crpolicy_ferrs_push(ferrs *l, sb *m);
void crpolicy_ferrs_free(ferrs *l);
/* The aggregate's Error(): nothing for an empty list. */
void crpolicy_sb_aggregate(sb *b, const ferrs *l);
/* One error: "<path>: <type>", the caller appends ": <value>", then
 * crpolicy_fe_end adds ": <detail>" when there is one. */
void crpolicy_fe_begin(sb *m, const char *path, const char *type);
void crpolicy_fe_end(ferrs *l, sb *m, sstr detail);
/* Whole errors: an invalid string (Go's %q), list (encoding/json) or
 * integer, and a required value. */
void crpolicy_fe_invalid_str(ferrs *l, const char *path, sstr value, sstr detail);
void crpolicy_fe_invalid_list(ferrs *l, const char *path, const sstr *v, size_t n, sstr detail);
void crpolicy_fe_invalid_int(ferrs *l, const char *path, long long v, const char *detail);
void crpolicy_fe_required(ferrs *l, const char *path, const char *detail);

/* ------------------------------------------------------------------ */
/* Wildcards (sg_crpolicy_text.c)                                     */

/* util/wildcard.go on Go runes: pat matches s; some of pats matches s;
 * every member is matched by some pattern. */
bool crpolicy_wild(sstr pat, sstr s);
bool crpolicy_wild_any(const sstr *pats, size_t n, sstr s);
bool crpolicy_wild_subset(const sstr *pats, size_t np, const sstr *members, size_t nm);

/* ------------------------------------------------------------------ */
/* The compiled policy (tables in sg_crpolicy_compile.c)              */

typedef struct slist {
	sstr *v;
	size_t n;
} slist;

/* A CEL rule compiled once per text and shared (sg_crpolicy_cel.c). */
typedef struct crpolicy_rule crpolicy_rule;

/* CertificateRequestPolicyAllowedString / ...StringSlice: value(s),
 * required, and the CEL rules: their text, message (NULL p: none) and
 * compiled form (held by the policy, see sg_crpolicy.held). */
typedef struct allowed_field {
	bool present;
	bool has_value; /* value / values set (values may be an empty list) */
	sstr value;
	slist values;
	bool required;
	slist rules;
	sstr *messages;        /* rules.n of them */
	crpolicy_rule **progs; /* rules.n of them; NULL where none could be had */
} allowed_field;

/* The rule of text, compiled or taken from the cache, held once more
 * (crpolicy_rule_put releases it). SG_EINTERNAL when out of memory; a rule
 * that does not compile is returned too, crpolicy_rule_error saying why. */
int crpolicy_rule_get(sstr text, crpolicy_rule **out);
void crpolicy_rule_put(crpolicy_rule *r);
/* Why the rule does not compile, or NULL when it does. */
const char *crpolicy_rule_error(const crpolicy_rule *r);
/* approver-policy's Validate: self, and cr from req (name, namespace,
 * username, groups). *valid on SG_OK; an evaluation error (its detail set)
 * otherwise. */
int crpolicy_rule_eval(const crpolicy_rule *r, sstr self, const sg_crpolicy_request *req, bool *valid);

typedef struct other_entry {
	sstr oid;
	allowed_field f;
} other_entry;

enum { SUBJ_O, SUBJ_C, SUBJ_OU, SUBJ_L, SUBJ_ST, SUBJ_STREET, SUBJ_POSTAL, SUBJ_COUNT };

extern const struct subject_slot {
	const char *oid;
	const char *field; /* allowed.subject.<field> */
} crpolicy_subject_slots[SUBJ_COUNT];
#define OID_CN "2.5.4.3"
#define OID_SERIAL "2.5.4.5"

enum { SAN_DNS, SAN_IP, SAN_URI, SAN_EMAIL, SAN_FIELDS };
extern const char *const crpolicy_san_fields[SAN_FIELDS];
extern const sg_csr_facts_san_type crpolicy_san_types[SAN_FIELDS];

struct sg_crpolicy {
	char *name;
	char *condition;
	bool ready;

	bool has_allowed;
	allowed_field cn, serial, san[SAN_FIELDS], subj[SUBJ_COUNT];
	bool has_subject;
	bool has_is_ca, is_ca;
	bool has_usages;
	slist usages;
	other_entry *other_names, *other_attrs;
	size_t n_other_names, n_other_attrs;

	bool has_constraints;
	bool has_min, has_max;
	int64_t min_s, max_s;
	bool min_frac, max_frac; /* a fraction of a second was dropped (max's: informative only) */
	bool has_pk, has_alg, has_min_size, has_max_size;
	sstr alg;
	long long min_size, max_size;

	bool has_issuer_sel, has_sel_name, has_sel_kind, has_sel_group;
	sstr sel_name, sel_kind, sel_group;
	bool has_ns_sel, has_match_labels;
	slist match_names;
	sstr *label_keys, *label_values;
	size_t n_labels;

	size_t n_plugins;
	sstr *plugin_names;
	json_t **plugin_values;
	bool *plugin_known;

	/* spec.externalPolicyServers: names of ExternalPolicyServer objects
	 * (the CertificateRequest Policy design's), in the policy's order. */
	bool has_external;
	slist external;

	void **allocs; /* everything above that is owned, freed together */
	size_t n_allocs, cap_allocs;
	crpolicy_rule **held; /* every CEL rule the fields hold, released together */
	size_t n_held, cap_held;
};

/* ------------------------------------------------------------------ */
/* Compiling (sg_crpolicy_compile.c) and the webhook's checks         */
/* (sg_crpolicy_webhook.c)                                            */

typedef struct cc {
	sg_crpolicy *p;
	ferrs schema;  /* what the API server's schema (and our bounds) refuse */
	ferrs webhook; /* what approver-policy's admission webhook refuses */
	bool oom;
	const sg_crpolicy_options *opts;
} cc;

/* validator.go, then allowed's and constraints' Validate, in that order:
 * what approver-policy's webhook refuses, into c->webhook. */
void crpolicy_webhook_checks(cc *c);
/* Whether oid is one of the subject's named fields (commonName,
 * serialNumber, allowed.subject.*). */
bool crpolicy_named_subject_oid(sstr oid);

#endif
