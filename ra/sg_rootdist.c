/*
 * Root-bundle distribution (see sg_rootdist.h for the contract).
 *
 * Shape: client-go's controller pattern, reduced. Two informers feed a
 * queue of namespace names; one worker takes a name and reconciles that one
 * namespace. Each key is at most once in the queue, so a burst of events
 * (a relist, a root change, our own writes echoing back) costs one
 * reconcile per namespace, and the single worker means one namespace is
 * never reconciled twice at the same time.
 *
 * Namespace selection is done by the API server: the namespace informer
 * carries the selector, so its store holds exactly the selected
 * namespaces, and a namespace that gains the label arrives as ADDED (and
 * one that loses it as DELETED), which is what makes "labelled later"
 * work without our own selector matcher. We still parse the selector
 * locally (same grammar as apimachinery's labels.Parse) so a typo fails at
 * start-up instead of as a LIST that 400s forever.
 *
 * The write decision reads the informer's cache, not a live GET: at start
 * (and after every root change) every selected namespace is reconciled, and
 * with thousands of namespaces that already match a live GET each would
 * be thousands of requests for nothing. The cache can be behind the
 * server; that is safe because every replace carries the resourceVersion
 * we decided on, so a stale decision ends in 409 Conflict, and only then
 * do we GET the live object and decide again. A create answered by 409
 * AlreadyExists is the same case. So a stale cache costs one refused
 * request, never a blind overwrite, and a matching object costs no request
 * at all, which is also why our own writes cannot loop: their watch events
 * arrive after the store holds the object we wrote, and it matches.
 *
 * Leadership: the informers and the worker exist only between start and
 * stop, and each start lists afresh, so a new leader never acts on what it
 * saw the last time it led. The worker checks the stop flag before every
 * write; stop joins it, so no write of ours happens after stop returns.
 *
 * Events (core/v1 Event objects) are not written: a root rotation would
 * write one per namespace, and the log says the same.
 */
#include "sg_rootdist.h"

#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_kube_informer.h"
#include "sg_log.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_FIRST_MS 1000u
#define BACKOFF_MAX_MS 30000u
#define SYNC_POLL_MS 200u
#define WRITE_ATTEMPTS 5 /* conflicts answered by re-reading before we back off */
#define NAME_MAX_LEN SG_KUBE_NAME_MAX

/* ---- the work queue ----
 *
 * Ready names wait in a FIFO; names that failed wait in a min-heap by due
 * time. `queued` maps each name to its state (0: in the FIFO, else its due
 * time), which is what deduplicates. A name moved from the heap to the
 * FIFO by a fresh event leaves a stale heap entry behind; it is recognised
 * (its due time no longer matches the map) and dropped when it surfaces.
 */

typedef struct qnode {
	struct qnode *next;
	char name[];
} qnode;

typedef struct delayed {
	uint64_t due_ns;
	char *name;
} delayed;

typedef struct queue {
	qnode *head, *tail;
	delayed *heap;
	size_t heap_len, heap_cap;
	json_t *queued;   /* name -> integer: 0 ready, else due time (ns) */
	json_t *failures; /* name -> integer: consecutive failures */
} queue;

static int queue_init(queue *q)
{
	memset(q, 0, sizeof(*q));
	q->queued = json_object();
	q->failures = json_object();
	SG_ENSURE(q->queued && q->failures, SG_EINTERNAL, "rootdist: out of memory");
	return SG_OK;
}

static void queue_clear(queue *q)
{
	while (q->head) {
		qnode *n = q->head;
		q->head = n->next;
		free(n);
	}
	q->tail = NULL;
	for (size_t i = 0; i < q->heap_len; i++)
		free(q->heap[i].name);
	q->heap_len = 0;
	json_object_clear(q->queued);
	json_object_clear(q->failures);
}

static void queue_free(queue *q)
{
	queue_clear(q);
	free(q->heap);
	json_decref(q->queued);
	json_decref(q->failures);
}

static bool fifo_push(queue *q, const char *name)
{
	size_t len = strlen(name);
	qnode *n = malloc(sizeof(*n) + len + 1);
	if (!n)
		return false;
	n->next = NULL;
	memcpy(n->name, name, len + 1);
	if (q->tail)
		q->tail->next = n;
	else
		q->head = n;
	q->tail = n;
	return true;
}

static bool heap_push(queue *q, const char *name, uint64_t due)
{
	if (q->heap_len == q->heap_cap) {
		size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
		delayed *h = realloc(q->heap, cap * sizeof(*h));
		if (!h)
			return false;
		q->heap = h;
		q->heap_cap = cap;
	}
	char *copy = strdup(name);
	if (!copy)
		return false;
	size_t i = q->heap_len++;
	q->heap[i] = (delayed){due, copy};
	while (i > 0 && q->heap[(i - 1) / 2].due_ns > q->heap[i].due_ns) {
		delayed t = q->heap[i];
		q->heap[i] = q->heap[(i - 1) / 2];
		q->heap[(i - 1) / 2] = t;
		i = (i - 1) / 2;
	}
	return true;
}

/* Removes the heap's top into *out (the caller owns out->name). */
static void heap_pop(queue *q, delayed *out)
{
	*out = q->heap[0];
	q->heap[0] = q->heap[--q->heap_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < q->heap_len && q->heap[l].due_ns < q->heap[m].due_ns)
			m = l;
		if (r < q->heap_len && q->heap[r].due_ns < q->heap[m].due_ns)
			m = r;
		if (m == i)
			break;
		delayed t = q->heap[i];
		q->heap[i] = q->heap[m];
		q->heap[m] = t;
		i = m;
	}
}

/* Queues name now (delay_ns 0) or later; an earlier time wins over a
 * later one. Out of memory drops the name with a log line: the next event
 * or resync brings it back. */
static void queue_add(queue *q, const char *name, uint64_t delay_ns)
{
	uint64_t due = delay_ns ? sg_now_ns() + delay_ns : 0;
	json_t *cur = json_object_get(q->queued, name);
	if (cur) {
		uint64_t was = (uint64_t)json_integer_value(cur);
		if (was == 0 || (due != 0 && due >= was))
			return; /* already ready, or due sooner */
	}
	bool ok = json_object_set_new(q->queued, name, json_integer((json_int_t)due)) == 0 &&
	          (due == 0 ? fifo_push(q, name) : heap_push(q, name, due));
	if (!ok) {
		json_object_del(q->queued, name);
		sg_log(SG_LOG_WARN, "rootdist: cannot queue a namespace (out of memory)", SG_F_STR("namespace", name),
		       SG_F_END);
	}
}

/* Moves every heap entry that is due into the FIFO. */
static void queue_promote(queue *q, uint64_t now)
{
	while (q->heap_len && q->heap[0].due_ns <= now) {
		delayed d;
		heap_pop(q, &d);
		json_t *cur = json_object_get(q->queued, d.name);
		if (cur && (uint64_t)json_integer_value(cur) == d.due_ns) {
			if (json_object_set_new(q->queued, d.name, json_integer(0)) != 0 || !fifo_push(q, d.name))
				json_object_del(q->queued, d.name);
		}
		free(d.name);
	}
}

/* The first ready entry (caller frees it), or NULL. */
static qnode *queue_take(queue *q)
{
	qnode *n = q->head;
	if (!n)
		return NULL;
	q->head = n->next;
	if (!q->head)
		q->tail = NULL;
	n->next = NULL;
	json_object_del(q->queued, n->name);
	return n;
}

/* The retry delay after one more failure of name. */
static uint64_t queue_fail(queue *q, const char *name)
{
	json_int_t n = json_integer_value(json_object_get(q->failures, name)) + 1;
	json_object_set_new(q->failures, name, json_integer(n));
	uint64_t ms = BACKOFF_FIRST_MS;
	for (json_int_t i = 1; i < n && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	if (ms > BACKOFF_MAX_MS)
		ms = BACKOFF_MAX_MS;
	return ms * 1000000ull;
}

static void queue_forget(queue *q, const char *name)
{
	json_object_del(q->failures, name);
}

/* ---- the distributor ---- */

struct sg_rootdist {
	sg_kube *kube;
	char *selector; /* NULL: every namespace */
	char *name;
	char *key;
	char *field_selector; /* metadata.name=<name> */

	pthread_mutex_t mu; /* everything below up to `life` */
	pthread_cond_t cv;  /* CLOCK_MONOTONIC: queue, resync, stop */
	json_t *root;       /* string; replaced whole, never modified */
	queue q;
	bool resync_all;
	atomic_bool stop;
	sg_rootdist_stats stats;
	uint64_t last_warn_ns; /* failure warnings: at most one a second */
	uint64_t quiet_failures;

	pthread_mutex_t life; /* start/stop; the fields below */
	bool running;
	pthread_t worker;
	sg_kube_informer *ns_inf; /* set before and cleared after their threads */
	sg_kube_informer *cm_inf;
};

typedef enum outcome {
	OUT_CREATED,
	OUT_UPDATED,
	OUT_UNCHANGED,
	OUT_SKIPPED,
	OUT_STOPPED,
} outcome;

/* ---- label selectors (k8s.io/apimachinery/pkg/labels/selector.go) ---- */

typedef struct sel {
	const char *s;
	size_t i;
	char tok[NAME_MAX_LEN + 70]; /* an identifier token */
} sel;

enum sel_tok { T_END, T_IDENT, T_COMMA, T_OPEN, T_CLOSE, T_NOT, T_EQ, T_DEQ, T_NEQ, T_GT, T_LT, T_IN, T_NOTIN };

static bool sel_special(char c)
{
	return c == '!' || c == '=' || c == ',' || c == '(' || c == ')' || c == '<' || c == '>' || c == ' ' ||
	       c == '\t' || c == '\n' || c == '\r';
}

/* Reads the next token; an identifier is copied into p->tok. A byte that
 * is neither special nor printable ASCII is an error (-1). */
static int sel_next(sel *p)
{
	while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')
		p->i++;
	char c = p->s[p->i];
	if (!c)
		return T_END;
	p->i++;
	switch (c) {
	case ',':
		return T_COMMA;
	case '(':
		return T_OPEN;
	case ')':
		return T_CLOSE;
	case '<':
		return T_LT;
	case '>':
		return T_GT;
	case '!':
		if (p->s[p->i] == '=') {
			p->i++;
			return T_NEQ;
		}
		return T_NOT;
	case '=':
		if (p->s[p->i] == '=') {
			p->i++;
			return T_DEQ;
		}
		return T_EQ;
	}
	size_t start = p->i - 1, n = 0;
	p->i = start;
	while (p->s[p->i] && !sel_special(p->s[p->i])) {
		unsigned char b = (unsigned char)p->s[p->i];
		if (b < 0x21 || b > 0x7e || n + 1 >= sizeof(p->tok))
			return -1;
		p->tok[n++] = (char)b;
		p->i++;
	}
	p->tok[n] = 0;
	if (strcmp(p->tok, "in") == 0)
		return T_IN;
	if (strcmp(p->tok, "notin") == 0)
		return T_NOTIN;
	return T_IDENT;
}

static int sel_peek(sel *p)
{
	size_t save = p->i;
	char tok[sizeof(p->tok)];
	memcpy(tok, p->tok, sizeof(tok));
	int t = sel_next(p);
	p->i = save;
	memcpy(p->tok, tok, sizeof(tok));
	return t;
}

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label value or the name part of a key: at most 63 bytes of
 * [A-Za-z0-9] with '-', '_', '.' inside (empty only where allowed). */
static bool label_name_ok(const char *s, size_t n, bool empty_ok)
{
	if (n == 0)
		return empty_ok;
	if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

/* A qualified key: [prefix/]name. */
static bool label_key_ok(const char *k)
{
	const char *slash = strchr(k, '/');
	if (!slash)
		return label_name_ok(k, strlen(k), false);
	return sg_kube_dns_subdomain(k, (size_t)(slash - k)) && label_name_ok(slash + 1, strlen(slash + 1), false);
}

static int sel_fail(const sel *p, const char *what)
{
	return sg_error_set(SG_EINVAL, "rootdist: namespace selector \"%.200s\": %s at offset %zu", p->s, what, p->i);
}

static int sel_values(sel *p)
{
	if (sel_next(p) != T_OPEN)
		return sel_fail(p, "expected '(' after in/notin");
	size_t n = 0;
	for (;;) {
		int t = sel_next(p);
		if (t == T_CLOSE && n == 0)
			return sel_fail(p, "the value set of in/notin is empty");
		if (t == T_IDENT || t == T_IN || t == T_NOTIN) {
			if (!label_name_ok(p->tok, strlen(p->tok), true))
				return sel_fail(p, "invalid label value");
			n++;
			t = sel_next(p);
		} else if (t == T_COMMA || t == T_CLOSE) {
			n++; /* an empty value, as in "(a,)" */
		} else {
			return sel_fail(p, "expected a value");
		}
		if (t == T_CLOSE)
			return SG_OK;
		if (t != T_COMMA)
			return sel_fail(p, "expected ',' or ')'");
	}
}

static bool all_digits(const char *s)
{
	if (*s == '-')
		s++;
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

static int sel_requirement(sel *p)
{
	int t = sel_next(p);
	bool negated = t == T_NOT;
	if (negated)
		t = sel_next(p);
	if (t != T_IDENT && t != T_IN && t != T_NOTIN)
		return sel_fail(p, "expected a label key");
	if (!label_key_ok(p->tok))
		return sel_fail(p, "invalid label key");
	int op = sel_peek(p);
	if (op == T_END || op == T_COMMA)
		return SG_OK; /* key, !key */
	if (negated)
		return sel_fail(p, "'!key' takes no operator");
	op = sel_next(p);
	switch (op) {
	case T_IN:
	case T_NOTIN:
		return sel_values(p);
	case T_EQ:
	case T_DEQ:
	case T_NEQ:
	case T_GT:
	case T_LT: {
		int v = sel_peek(p);
		if (v == T_END || v == T_COMMA) {
			if (op == T_GT || op == T_LT)
				return sel_fail(p, "'<' and '>' need an integer");
			return SG_OK; /* key= (empty value) */
		}
		v = sel_next(p);
		if (v != T_IDENT && v != T_IN && v != T_NOTIN)
			return sel_fail(p, "expected a value");
		if ((op == T_GT || op == T_LT) ? !all_digits(p->tok) : !label_name_ok(p->tok, strlen(p->tok), true))
			return sel_fail(p, "invalid label value");
		return SG_OK;
	}
	default:
		return sel_fail(p, "expected an operator (=, ==, !=, in, notin, <, >)");
	}
}

/* Checks s; *blank tells whether it selects everything (empty or spaces). */
static int selector_check(const char *s, bool *blank)
{
	SG_ENSURE(strlen(s) <= SG_ROOTDIST_SELECTOR_MAX, SG_EINVAL, "rootdist: namespace selector longer than %d bytes",
	          SG_ROOTDIST_SELECTOR_MAX);
	sel p = {.s = s};
	*blank = sel_peek(&p) == T_END;
	if (*blank)
		return SG_OK;
	for (;;) {
		SG_TRY(sel_requirement(&p));
		int t = sel_next(&p);
		if (t == T_END)
			return SG_OK;
		if (t != T_COMMA)
			return sel_fail(&p, "expected ','");
	}
}

/* ---- the root bundle ---- */

static int pem_noprompt(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return -1;
}

/* PEM text holding at least one certificate, as a JSON string. */
static int root_string(const char *pem, size_t len, json_t **out)
{
	SG_ENSURE(pem && len > 0 && len <= SG_ROOTDIST_ROOT_MAX, SG_EINVAL,
	          "rootdist: the root bundle must be 1..%u bytes", SG_ROOTDIST_ROOT_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)pem[i];
		SG_ENSURE(c >= 0x20 ? c < 0x7f : (c == '\n' || c == '\r' || c == '\t'), SG_EINVAL,
		          "rootdist: the root bundle is not PEM text (byte %zu)", i);
	}
	ERR_clear_error();
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	X509 *x = b ? PEM_read_bio_X509(b, NULL, pem_noprompt, NULL) : NULL;
	BIO_free(b);
	bool ok = x != NULL;
	X509_free(x);
	if (!ok)
		return sg_error_set_ossl(SG_EINVAL, "rootdist: the root bundle holds no PEM certificate");
	*out = json_stringn(pem, len);
	SG_ENSURE(*out, SG_EINTERNAL, "rootdist: out of memory");
	return SG_OK;
}

/* ---- reconciling one namespace ---- */

static bool stopping(const sg_rootdist *r)
{
	return atomic_load(&r->stop);
}

static void count(sg_rootdist *r, uint64_t *counter)
{
	pthread_mutex_lock(&r->mu);
	(*counter)++;
	pthread_mutex_unlock(&r->mu);
}

static bool terminating(const json_t *ns)
{
	const char *phase = json_string_value(json_object_get(json_object_get(ns, "status"), "phase"));
	return sg_kube_meta_str(ns, "deletionTimestamp") || (phase && strcmp(phase, "Terminating") == 0);
}

/* Whether cm is exactly what we want: data = {key: root}, no binaryData,
 * our label. Anything unexpected in the payload is simply "no". */
static bool matches(const sg_rootdist *r, const json_t *cm, const json_t *root)
{
	json_t *data = json_object_get(cm, "data");
	json_t *v = json_object_get(data, r->key);
	if (!json_is_object(data) || json_object_size(data) != 1 || !json_is_string(v) ||
	    json_string_length(v) != json_string_length(root) ||
	    memcmp(json_string_value(v), json_string_value(root), json_string_length(root)) != 0)
		return false;
	json_t *bin = json_object_get(cm, "binaryData");
	if (bin && !json_is_null(bin) && !(json_is_object(bin) && json_object_size(bin) == 0))
		return false;
	json_t *labels = json_object_get(json_object_get(cm, "metadata"), "labels");
	const char *mine = json_string_value(json_object_get(labels, SG_ROOTDIST_LABEL));
	return mine && strcmp(mine, "true") == 0;
}

static json_t *desired_new(const sg_rootdist *r, const char *ns, json_t *root)
{
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:O}}", "apiVersion", "v1", "kind", "ConfigMap",
	                 "metadata", "name", r->name, "namespace", ns, "labels", SG_ROOTDIST_LABEL, "true", "data",
	                 r->key, root);
}

/* cm corrected: our data and label, everything else as it was (the
 * resourceVersion too, which makes the PUT conditional). */
static json_t *desired_update(const sg_rootdist *r, const json_t *cm, json_t *root)
{
	json_t *c = json_deep_copy(cm);
	json_t *meta = json_object_get(c, "metadata");
	if (!c || !json_is_object(meta) || !json_is_string(json_object_get(meta, "resourceVersion"))) {
		json_decref(c);
		return NULL;
	}
	json_t *labels = json_object_get(meta, "labels");
	if (!json_is_object(labels)) {
		labels = json_object();
		if (json_object_set_new(meta, "labels", labels) != 0)
			labels = NULL;
	}
	json_t *data = json_pack("{s:O}", r->key, root);
	bool ok = labels && data && json_object_set_new(labels, SG_ROOTDIST_LABEL, json_string("true")) == 0 &&
	          json_object_set_new(c, "data", data) == 0;
	json_object_del(c, "binaryData");
	if (!ok) {
		json_decref(c);
		return NULL;
	}
	return c;
}

/* A write refused because the namespace is gone or being deleted: the
 * namespace's own events will tell us if that changes. */
static bool namespace_refused(void)
{
	const sg_kube_status *st = sg_kube_last_status();
	return (st->code == 404 && strstr(st->message, "namespaces")) ||
	       (st->code == 403 && strstr(st->message, "being terminated"));
}

/* Re-reads the live object after a conflict: *cm becomes it, or NULL when
 * it is gone. */
static int reread(sg_rootdist *r, const sg_kube_ref *ref, json_t **cm)
{
	json_decref(*cm);
	*cm = NULL;
	count(r, &r->stats.rereads);
	int rc = sg_kube_get(r->kube, ref, cm);
	if (rc == SG_ENOTFOUND)
		return SG_OK;
	return rc;
}

static int create(sg_rootdist *r, const sg_kube_ref *ref, json_t *root, json_t **cm, outcome *out)
{
	sg_kube_ref coll = *ref;
	coll.name = NULL;
	json_t *body = desired_new(r, ref->ns, root);
	SG_ENSURE(body, SG_EINTERNAL, "rootdist: out of memory");
	int rc = sg_kube_create(r->kube, &coll, body, NULL);
	json_decref(body);
	if (rc == SG_OK) {
		*out = OUT_CREATED;
		return SG_OK;
	}
	if (rc == SG_EBUSY && sg_kube_last_status()->code == 409)
		return reread(r, ref, cm); /* AlreadyExists: our cache is behind */
	if (namespace_refused()) {
		*out = OUT_SKIPPED;
		return SG_OK;
	}
	return rc;
}

/* An immutable ConfigMap cannot have its data replaced: delete it, so the
 * next attempt creates it. */
static int recreate(sg_rootdist *r, const sg_kube_ref *ref, json_t **cm)
{
	sg_log(SG_LOG_WARN, "rootdist: replacing an immutable ConfigMap with the wrong data",
	       SG_F_STR("namespace", ref->ns), SG_F_STR("name", ref->name), SG_F_END);
	int rc = sg_kube_delete(r->kube, ref, NULL);
	if (rc < 0 && rc != SG_ENOTFOUND)
		return rc;
	json_decref(*cm);
	*cm = NULL;
	return SG_OK;
}

static int update(sg_rootdist *r, const sg_kube_ref *ref, json_t *root, json_t **cm, outcome *out)
{
	if (json_is_true(json_object_get(*cm, "immutable")))
		return recreate(r, ref, cm);
	json_t *body = desired_update(r, *cm, root);
	if (!body)
		return reread(r, ref, cm); /* no usable metadata in what we had */
	int rc = sg_kube_update(r->kube, ref, body, NULL);
	json_decref(body);
	if (rc == SG_OK) {
		*out = OUT_UPDATED;
		return SG_OK;
	}
	if ((rc == SG_EBUSY && sg_kube_last_status()->code == 409) || rc == SG_ENOTFOUND)
		return reread(r, ref, cm); /* stale resourceVersion, or deleted meanwhile */
	return rc;
}

static int reconcile(sg_rootdist *r, const char *ns_name, outcome *out)
{
	json_t *ns = sg_kube_informer_get(r->ns_inf, NULL, ns_name);
	bool skip = !ns || terminating(ns);
	json_decref(ns);
	if (skip) {
		*out = OUT_SKIPPED;
		return SG_OK;
	}
	pthread_mutex_lock(&r->mu);
	json_t *root = json_incref(r->root);
	pthread_mutex_unlock(&r->mu);
	sg_kube_ref ref = {.version = "v1", .resource = "configmaps", .ns = ns_name, .name = r->name};
	json_t *cm = sg_kube_informer_get(r->cm_inf, ns_name, r->name);
	int rc = SG_OK;
	*out = OUT_STOPPED;
	for (int attempt = 0; attempt < WRITE_ATTEMPTS && *out == OUT_STOPPED; attempt++) {
		if (cm && matches(r, cm, root)) {
			*out = OUT_UNCHANGED;
			break;
		}
		if (stopping(r))
			break;
		rc = cm ? update(r, &ref, root, &cm, out) : create(r, &ref, root, &cm, out);
		if (rc < 0)
			break;
	}
	if (rc == SG_OK && *out == OUT_STOPPED && !stopping(r))
		rc = sg_error_set(SG_EBUSY, "rootdist: %s/%s kept changing under us (%d attempts)", ns_name, r->name,
		                  WRITE_ATTEMPTS);
	json_decref(cm);
	json_decref(root);
	return rc;
}

/* ---- the worker ---- */

static void enqueue(sg_rootdist *r, const char *ns)
{
	if (!ns || !*ns || strlen(ns) > NAME_MAX_LEN)
		return;
	pthread_mutex_lock(&r->mu);
	queue_add(&r->q, ns, 0);
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* Queues every selected namespace the informer holds. */
static void enqueue_all(sg_rootdist *r)
{
	json_t *all = sg_kube_informer_list(r->ns_inf);
	size_t i;
	json_t *ns;
	json_array_foreach(all, i, ns)
	{
		enqueue(r, sg_kube_meta_str(ns, "name"));
	}
	json_decref(all);
}

static bool wait_until(sg_rootdist *r, uint64_t deadline_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
	                      .tv_nsec = (long)(deadline_ns % 1000000000u)};
	return pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0;
}

/* The next namespace to reconcile (caller frees), or NULL once stopping. */
static qnode *next_name(sg_rootdist *r)
{
	pthread_mutex_lock(&r->mu);
	qnode *name = NULL;
	while (!stopping(r)) {
		if (r->resync_all) {
			r->resync_all = false;
			pthread_mutex_unlock(&r->mu);
			enqueue_all(r);
			pthread_mutex_lock(&r->mu);
			continue;
		}
		queue_promote(&r->q, sg_now_ns());
		name = queue_take(&r->q);
		if (name)
			break;
		if (r->q.heap_len)
			wait_until(r, r->q.heap[0].due_ns);
		else
			pthread_cond_wait(&r->cv, &r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return name;
}

static void finish(sg_rootdist *r, const char *ns, int rc, outcome out)
{
	pthread_mutex_lock(&r->mu);
	if (rc < 0) {
		uint64_t delay = queue_fail(&r->q, ns);
		queue_add(&r->q, ns, delay);
		r->stats.errors++;
		/* One line a second at most: when the API server is away every
		 * namespace fails the same way. */
		uint64_t now = sg_now_ns(), quiet = r->quiet_failures;
		bool loud = now - r->last_warn_ns >= 1000000000u || r->last_warn_ns == 0;
		if (loud) {
			r->last_warn_ns = now;
			r->quiet_failures = 0;
		} else {
			r->quiet_failures++;
		}
		pthread_mutex_unlock(&r->mu);
		sg_log(loud ? SG_LOG_WARN : SG_LOG_DEBUG, "rootdist: reconcile failed; retrying",
		       SG_F_STR("namespace", ns), SG_F_STR("error", sg_error_last()->msg),
		       SG_F_INT("retry_ms", delay / 1000000u), SG_F_INT("failures_not_shown", loud ? quiet : 0),
		       SG_F_END);
		return;
	}
	queue_forget(&r->q, ns);
	switch (out) {
	case OUT_CREATED:
		r->stats.creates++;
		break;
	case OUT_UPDATED:
		r->stats.updates++;
		break;
	case OUT_UNCHANGED:
		r->stats.unchanged++;
		break;
	case OUT_SKIPPED:
		r->stats.skipped++;
		break;
	case OUT_STOPPED:
		break;
	}
	pthread_mutex_unlock(&r->mu);
	if (out == OUT_CREATED || out == OUT_UPDATED)
		sg_log(SG_LOG_INFO, out == OUT_CREATED ? "rootdist: ConfigMap created" : "rootdist: ConfigMap updated",
		       SG_F_STR("namespace", ns), SG_F_STR("name", r->name), SG_F_END);
	else if (out == OUT_SKIPPED)
		sg_log(SG_LOG_DEBUG, "rootdist: namespace skipped (not selected, gone or terminating)",
		       SG_F_STR("namespace", ns), SG_F_END);
}

/* Waits until both caches hold a first LIST; false when stopped first.
 * Deciding "absent, create it" from an empty cache would only cost
 * AlreadyExists round trips, but there is no reason to pay them. */
static bool wait_synced(sg_rootdist *r)
{
	while (!stopping(r)) {
		if (sg_kube_informer_wait_synced(r->ns_inf, SYNC_POLL_MS) == SG_OK &&
		    sg_kube_informer_wait_synced(r->cm_inf, SYNC_POLL_MS) == SG_OK)
			return true;
	}
	return false;
}

/* Sleeps until deadline (monotonic ns) unless stopped first. */
static void pause_until(sg_rootdist *r, uint64_t deadline)
{
	pthread_mutex_lock(&r->mu);
	while (!stopping(r) && sg_now_ns() < deadline)
		wait_until(r, deadline);
	pthread_mutex_unlock(&r->mu);
}

/* A failure without any HTTP answer: the API server is unreachable, and
 * the next namespace would fail the same way. */
static bool unreachable(int rc)
{
	return (rc == SG_EBUSY || rc == SG_ETIMEOUT) && sg_kube_last_status()->code == 0;
}

static void *work(void *arg)
{
	sg_rootdist *r = arg;
	if (!wait_synced(r))
		return NULL;
	enqueue_all(r);
	qnode *ns;
	unsigned down = 0; /* consecutive reconciles that found the server unreachable */
	while ((ns = next_name(r)) != NULL) {
		outcome out = OUT_STOPPED;
		int rc = reconcile(r, ns->name, &out);
		bool away = rc < 0 && unreachable(rc);
		if (!stopping(r))
			finish(r, ns->name, rc, out);
		free(ns);
		/* Per-namespace backoff alone would still send one request per
		 * namespace while the server is away; pause the whole worker
		 * instead (1 s doubling to 30 s) until something answers. */
		if (away) {
			uint64_t ms = BACKOFF_FIRST_MS;
			for (unsigned i = 0; i < down && ms < BACKOFF_MAX_MS; i++)
				ms *= 2;
			down++;
			pause_until(r, sg_now_ns() + (ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS) * 1000000ull);
		} else {
			down = 0;
		}
	}
	return NULL;
}

/* ---- informer handlers (on the informers' threads) ---- */

static void ns_changed(sg_rootdist *r, const json_t *ns)
{
	enqueue(r, sg_kube_meta_str(ns, "name"));
	size_t n = sg_kube_informer_size(r->ns_inf);
	pthread_mutex_lock(&r->mu);
	r->stats.namespaces = n;
	pthread_mutex_unlock(&r->mu);
}

static void ns_add(json_t *obj, void *arg)
{
	ns_changed(arg, obj);
}

static void ns_update(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj;
	ns_changed(arg, new_obj);
}

static void ns_delete(json_t *obj, void *arg)
{
	ns_changed(arg, obj);
}

static void cm_add(json_t *obj, void *arg)
{
	enqueue(arg, sg_kube_meta_str(obj, "namespace"));
}

static void cm_update(json_t *old_obj, json_t *new_obj, void *arg)
{
	(void)old_obj;
	enqueue(arg, sg_kube_meta_str(new_obj, "namespace"));
}

static void cm_delete(json_t *obj, void *arg)
{
	enqueue(arg, sg_kube_meta_str(obj, "namespace"));
}

/* ---- life cycle ---- */

static bool configmap_key_ok(const char *k)
{
	size_t n = strlen(k);
	if (n == 0 || n > 253 || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(k[i]) && k[i] != '-' && k[i] != '_' && k[i] != '.')
			return false;
	return true;
}

static int copy_str(const char *s, char **out)
{
	*out = strdup(s);
	SG_ENSURE(*out, SG_EINTERNAL, "rootdist: out of memory");
	return SG_OK;
}

static int init(sg_rootdist *r, const sg_rootdist_options *o, const char *root_pem, size_t len)
{
	const char *name = o->name ? o->name : SG_ROOTDIST_NAME;
	const char *key = o->key ? o->key : SG_ROOTDIST_KEY;
	SG_ENSURE(o->kube, SG_EINVAL, "rootdist: no Kubernetes client");
	SG_ENSURE(sg_kube_dns_subdomain(name, strlen(name)), SG_EINVAL, "rootdist: invalid ConfigMap name \"%.260s\"",
	          name);
	SG_ENSURE(configmap_key_ok(key), SG_EINVAL, "rootdist: invalid ConfigMap key \"%.260s\"", key);
	const char *selector = o->namespace_selector ? o->namespace_selector : "";
	bool every = true;
	SG_TRY(selector_check(selector, &every));
	SG_TRY(root_string(root_pem, len, &r->root));
	r->kube = o->kube;
	if (!every)
		SG_TRY(copy_str(selector, &r->selector));
	SG_TRY(copy_str(name, &r->name));
	SG_TRY(copy_str(key, &r->key));
	size_t n = strlen("metadata.name=") + strlen(name) + 1;
	r->field_selector = malloc(n);
	SG_ENSURE(r->field_selector, SG_EINTERNAL, "rootdist: out of memory");
	snprintf(r->field_selector, n, "metadata.name=%s", name);
	return queue_init(&r->q);
}

int sg_rootdist_new(sg_rootdist **out, const sg_rootdist_options *o, const char *root_pem, size_t len)
{
	*out = NULL;
	SG_ENSURE(o, SG_EINVAL, "rootdist: no options");
	sg_rootdist *r = calloc(1, sizeof(*r));
	SG_ENSURE(r, SG_EINTERNAL, "rootdist: out of memory");
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->life, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cv, &ca);
	pthread_condattr_destroy(&ca);
	int rc = init(r, o, root_pem, len);
	if (rc < 0) {
		sg_rootdist_free(r);
		return rc;
	}
	*out = r;
	return SG_OK;
}

/* Frees the informers of a stopped distributor. */
static void drop_informers(sg_rootdist *r)
{
	sg_kube_informer_free(r->ns_inf);
	sg_kube_informer_free(r->cm_inf);
	r->ns_inf = NULL;
	r->cm_inf = NULL;
}

static int make_informers(sg_rootdist *r)
{
	sg_kube_ref namespaces = {.version = "v1", .resource = "namespaces"};
	sg_kube_ref configmaps = {.version = "v1", .resource = "configmaps"};
	sg_kube_informer_opts nso = {.label_selector = r->selector};
	sg_kube_informer_opts cmo = {.field_selector = r->field_selector};
	sg_kube_handlers nsh = {ns_add, ns_update, ns_delete, r};
	sg_kube_handlers cmh = {cm_add, cm_update, cm_delete, r};
	SG_TRY(sg_kube_informer_new(&r->ns_inf, r->kube, &namespaces, &nso, &nsh));
	return sg_kube_informer_new(&r->cm_inf, r->kube, &configmaps, &cmo, &cmh);
}

int sg_rootdist_start(sg_rootdist *r)
{
	pthread_mutex_lock(&r->life);
	int rc = SG_OK;
	if (r->running)
		goto unlock;
	atomic_store(&r->stop, false);
	pthread_mutex_lock(&r->mu);
	r->resync_all = false;
	queue_clear(&r->q);
	pthread_mutex_unlock(&r->mu);
	SG_TRY_GOTO(rc, make_informers(r), fail);
	SG_TRY_GOTO(rc, sg_kube_informer_start(r->ns_inf), fail);
	SG_TRY_GOTO(rc, sg_kube_informer_start(r->cm_inf), fail);
	SG_ENSURE_GOTO(rc, pthread_create(&r->worker, NULL, work, r) == 0, fail, SG_EINTERNAL,
	               "rootdist: cannot start the worker thread");
	r->running = true;
	sg_log(SG_LOG_INFO, "rootdist: started", SG_F_STR("name", r->name),
	       SG_F_STR("selector", r->selector ? r->selector : ""), SG_F_END);
	goto unlock;
fail:
	atomic_store(&r->stop, true);
	drop_informers(r);
unlock:
	pthread_mutex_unlock(&r->life);
	return rc;
}

void sg_rootdist_stop(sg_rootdist *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->life);
	if (!r->running)
		goto unlock;
	pthread_mutex_lock(&r->mu);
	atomic_store(&r->stop, true);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	/* The worker first: once it is joined, nothing of ours writes. */
	pthread_join(r->worker, NULL);
	drop_informers(r);
	pthread_mutex_lock(&r->mu);
	queue_clear(&r->q);
	r->resync_all = false;
	r->stats.namespaces = 0;
	pthread_mutex_unlock(&r->mu);
	r->running = false;
	sg_log(SG_LOG_INFO, "rootdist: stopped", SG_F_STR("name", r->name), SG_F_END);
unlock:
	pthread_mutex_unlock(&r->life);
}

int sg_rootdist_set_root(sg_rootdist *r, const char *root_pem, size_t len)
{
	json_t *root = NULL;
	SG_TRY(root_string(root_pem, len, &root));
	pthread_mutex_lock(&r->mu);
	bool changed = !json_equal(root, r->root);
	if (changed) {
		json_decref(r->root);
		r->root = root;
		root = NULL;
		r->resync_all = true; /* the worker lists the namespaces (only it may touch the informer) */
		pthread_cond_broadcast(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	json_decref(root);
	if (changed)
		sg_log(SG_LOG_INFO, "rootdist: root bundle changed; reconciling every selected namespace",
		       SG_F_STR("name", r->name), SG_F_END);
	return SG_OK;
}

void sg_rootdist_stats_get(sg_rootdist *r, sg_rootdist_stats *out)
{
	pthread_mutex_lock(&r->mu);
	*out = r->stats;
	out->queued = json_object_size(r->q.queued);
	pthread_mutex_unlock(&r->mu);
}

void sg_rootdist_free(sg_rootdist *r)
{
	if (!r)
		return;
	sg_rootdist_stop(r);
	drop_informers(r);
	queue_free(&r->q);
	json_decref(r->root);
	free(r->selector);
	free(r->name);
	free(r->key);
	free(r->field_selector);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->life);
	free(r);
}
