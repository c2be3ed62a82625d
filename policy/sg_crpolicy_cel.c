/*
 * sg_crpolicy_cel: a policy's CEL `validations`, compiled once per rule
 * text and shared (approver-policy's validation cache does the same: its
 * validators are keyed by rule text), and evaluated as approver-policy's
 * validator does: `self` the value under test, `cr` the request's name,
 * namespace, username and groups, within cel's cost limit (approver-
 * policy's celCostLimit).
 *
 * Why a cache: the approver compiles every policy on every pass over a
 * request (sg_approver.c says why); CEL parsing and checking cost far more
 * than the rest of a policy, so a rule is compiled the first time any
 * policy names it and reused while one does. Entries are counted by the
 * compiled policies holding them; at CACHE_MAX entries, those no policy
 * holds are dropped, and past that a rule is compiled uncached (freed with
 * its last holder). A rule that does not compile is kept too, with its
 * message, so a broken policy does not cost a compile per pass either.
 *
 * Threads: one mutex around the table; programs and the environment are
 * immutable and evaluated from any number of threads at once.
 */
#include "sg_crpolicy_impl.h"

#include "sg_cel.h"
#include "sg_guard.h"
#include "sg_strmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAX 4096
#define WHY_MAX 1024

struct crpolicy_rule {
	sg_strmap_node node; /* key: text */
	char *text;
	sg_cel_program *prog; /* NULL: did not compile, why says why */
	char why[WHY_MAX];
	size_t refs;
	bool cached;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static sg_strmap table;
static bool table_ok;
static sg_cel_env *env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int env_rc;

static void env_init(void)
{
	env_rc = sg_cel_env_new_approver(&env);
}

static void rule_free(crpolicy_rule *r)
{
	sg_cel_program_free(r->prog);
	free(r->text);
	free(r);
}

/* Drops the entries no policy holds; under mu. */
static void evict_unheld(void)
{
	sg_strmap_iter it;
	sg_strmap_node *n;
	sg_strmap_iter_init(&it, &table);
	while ((n = sg_strmap_iter_next(&it))) {
		crpolicy_rule *r = SG_STRMAP_ENTRY(n, crpolicy_rule, node);
		if (r->refs == 0) { /* the walk allows removing the node it returned */
			(void)sg_strmap_remove(&table, n);
			rule_free(r);
		}
	}
}

static crpolicy_rule *compile_new(sstr text)
{
	crpolicy_rule *r = calloc(1, sizeof(*r));
	char *t = r ? malloc(text.len + 1) : NULL;
	if (!t) {
		free(r);
		return NULL;
	}
	memcpy(t, text.p, text.len);
	t[text.len] = '\0';
	r->text = t;
	r->node.key = t;
	if (sg_cel_compile_bool(&r->prog, env, text.p, text.len) < 0) {
		r->prog = NULL;
		snprintf(r->why, sizeof(r->why), "%s", sg_error_last()->msg);
	}
	return r;
}

int crpolicy_rule_get(sstr text, crpolicy_rule **out)
{
	*out = NULL;
	pthread_once(&env_once, env_init);
	SG_ENSURE(env_rc == SG_OK && env, SG_EINTERNAL, "crpolicy: the CEL environment could not be made");
	/* The text holds no NUL (a JSON string may: such a rule is a new,
	 * uncached one that the compiler refuses). */
	bool plain = memchr(text.p, '\0', text.len) == NULL;
	pthread_mutex_lock(&mu);
	if (!table_ok)
		table_ok = sg_strmap_init(&table, 64, NULL) == SG_OK;
	crpolicy_rule *r = NULL;
	if (table_ok && plain) {
		/* The lookup is on every pass of every policy: short rules
		 * (most) need no allocation for their key. */
		char small[256];
		char *key = text.len < sizeof(small) ? small : malloc(text.len + 1);
		if (key) {
			memcpy(key, text.p, text.len);
			key[text.len] = '\0';
			sg_strmap_node *n = sg_strmap_find(&table, key);
			if (key != small)
				free(key);
			r = n ? SG_STRMAP_ENTRY(n, crpolicy_rule, node) : NULL;
		}
	}
	if (r) {
		r->refs++;
		pthread_mutex_unlock(&mu);
		*out = r;
		return SG_OK;
	}
	pthread_mutex_unlock(&mu);
	/* Compiled outside the lock: a rule of 100,000 code points must not
	 * stall every other policy's. Two threads may compile the same text;
	 * the second finds the first's entry below and drops its own. */
	r = compile_new(text);
	SG_ENSURE(r, SG_EINTERNAL, "crpolicy: out of memory compiling a CEL rule");
	r->refs = 1;
	pthread_mutex_lock(&mu);
	if (table_ok && plain) {
		sg_strmap_node *n = sg_strmap_find(&table, r->text);
		if (n) {
			crpolicy_rule *had = SG_STRMAP_ENTRY(n, crpolicy_rule, node);
			had->refs++;
			pthread_mutex_unlock(&mu);
			rule_free(r);
			*out = had;
			return SG_OK;
		}
		if (sg_strmap_count(&table) >= CACHE_MAX)
			evict_unheld();
		if (sg_strmap_count(&table) < CACHE_MAX) {
			sg_strmap_insert(&table, &r->node);
			r->cached = true;
		}
	}
	pthread_mutex_unlock(&mu);
	*out = r;
	return SG_OK;
}

void crpolicy_rule_put(crpolicy_rule *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&mu);
	bool gone = --r->refs == 0 && !r->cached;
	pthread_mutex_unlock(&mu);
	if (gone)
		rule_free(r);
}

const char *crpolicy_rule_error(const crpolicy_rule *r)
{
	return r->prog ? NULL : r->why;
}

int crpolicy_rule_eval(const crpolicy_rule *r, sstr self, const sg_crpolicy_request *req, bool *valid)
{
	*valid = false;
	SG_ENSURE(r->prog, SG_EINVAL, "%s", r->why);
	sg_cel_activation *a = NULL;
	SG_TRY(sg_cel_activation_new(&a, env));
	const char *ns = req->name_space ? req->name_space : "", *name = req->name ? req->name : "",
	           *user = req->username ? req->username : "";
	size_t lens[SG_CRPOLICY_MAX_GROUPS];
	size_t ng = req->group_count;
	if (ng > SG_CRPOLICY_MAX_GROUPS) {
		sg_cel_activation_free(a);
		SG_BAIL(SG_EINVAL, "the request has more than %d groups", SG_CRPOLICY_MAX_GROUPS);
	}
	for (size_t i = 0; i < ng; i++)
		lens[i] = strlen(req->groups[i]);
	int rc = sg_cel_bind_string(a, "self", self.p, self.len);
	if (rc == SG_OK)
		rc = sg_cel_bind_object_string(a, "cr", "name", name, strlen(name));
	if (rc == SG_OK)
		rc = sg_cel_bind_object_string(a, "cr", "namespace", ns, strlen(ns));
	if (rc == SG_OK)
		rc = sg_cel_bind_object_string(a, "cr", "username", user, strlen(user));
	if (rc == SG_OK)
		rc = sg_cel_bind_object_strings(a, "cr", "groups", (const char *const *)req->groups, lens, ng);
	if (rc == SG_OK)
		rc = sg_cel_eval_bool(valid, r->prog, a, NULL);
	sg_cel_activation_free(a);
	return rc;
}
