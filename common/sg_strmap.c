/*
 * The intrusive string table (contract: sg_strmap.h). Chains rather than
 * open addressing so that a node's address is stable and removal is an
 * unlink: callers keep pointers to their nodes. Growth is best effort,
 * because an index that could refuse an insert would push an
 * out-of-memory path into every caller for no gain: the chains only get
 * longer.
 */
#include "sg_strmap.h"
#include "sg_guard.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (size_t)h;
}

static size_t slot(const sg_strmap *m, const char *key)
{
	return m->hash(key) & (m->nb - 1);
}

int sg_strmap_init(sg_strmap *m, size_t buckets, sg_strmap_hash_fn hash)
{
	*m = (sg_strmap){.hash = hash ? hash : fnv1a};
	size_t nb = 1;
	while (nb < buckets) {
		SG_ENSURE(nb <= SIZE_MAX / 2 / sizeof(*m->b), SG_EINTERNAL, "strmap: %zu buckets are too many",
		          buckets);
		nb <<= 1;
	}
	m->b = calloc(nb, sizeof(*m->b));
	SG_ENSURE(m->b, SG_EINTERNAL, "strmap: out of memory");
	m->nb = nb;
	return SG_OK;
}

void sg_strmap_fini(sg_strmap *m)
{
	if (!m)
		return;
	free(m->b);
	m->b = NULL;
	m->nb = m->n = 0;
}

sg_strmap_node *sg_strmap_find(const sg_strmap *m, const char *key)
{
	for (sg_strmap_node *h = m->b[slot(m, key)]; h; h = h->next)
		if (strcmp(h->key, key) == 0)
			return h;
	return NULL;
}

static void grow(sg_strmap *m)
{
	if (m->nb > SIZE_MAX / 2 / sizeof(*m->b))
		return;
	size_t nb = m->nb * 2;
	sg_strmap_node **b = calloc(nb, sizeof(*b));
	if (!b)
		return; /* longer chains, still correct: inserting never fails */
	for (size_t i = 0; i < m->nb; i++) {
		sg_strmap_node *h = m->b[i];
		while (h) {
			sg_strmap_node *next = h->next;
			size_t j = m->hash(h->key) & (nb - 1);
			h->next = b[j];
			b[j] = h;
			h = next;
		}
	}
	free(m->b);
	m->b = b;
	m->nb = nb;
}

void sg_strmap_insert(sg_strmap *m, sg_strmap_node *node)
{
	if (m->n >= m->nb)
		grow(m);
	size_t j = slot(m, node->key);
	node->next = m->b[j];
	m->b[j] = node;
	m->n++;
}

bool sg_strmap_remove(sg_strmap *m, sg_strmap_node *node)
{
	for (sg_strmap_node **p = &m->b[slot(m, node->key)]; *p; p = &(*p)->next)
		if (*p == node) {
			*p = node->next;
			node->next = NULL;
			m->n--;
			return true;
		}
	return false;
}

void sg_strmap_clear(sg_strmap *m)
{
	if (m->b)
		memset(m->b, 0, m->nb * sizeof(*m->b));
	m->n = 0;
}

size_t sg_strmap_count(const sg_strmap *m)
{
	return m->n;
}

void sg_strmap_iter_init(sg_strmap_iter *it, const sg_strmap *m)
{
	*it = (sg_strmap_iter){.m = m};
}

sg_strmap_node *sg_strmap_iter_next(sg_strmap_iter *it)
{
	sg_strmap_node *h = it->nxt;
	while (!h && it->m->b && it->i < it->m->nb)
		h = it->m->b[it->i++];
	it->nxt = h ? h->next : NULL;
	return h;
}
