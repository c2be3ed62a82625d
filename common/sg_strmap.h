/*
 * sg_strmap: an intrusive chained hash table keyed by strings, for the
 * indexes that must never lose an entry (the agent's identities and pods,
 * the controllers' work queue, RA mode's pending requests). sg_cache is
 * the other kind: bounded, lossy, fixed-size values.
 *
 * Intrusive: a caller's object embeds an sg_strmap_node whose key points
 * into the object; the table links nodes and never allocates, copies or
 * frees them, so inserting cannot fail and an object can sit in several
 * tables at once. SG_STRMAP_ENTRY gets the object back from its node.
 * Not thread-safe: callers hold their own lock.
 *
 * Buckets are a power of two; the table doubles when it holds as many
 * nodes as buckets, and if that allocation fails it keeps its buckets
 * (longer chains, still correct). The hash is FNV-1a unless the caller
 * gives its own (RA mode's names carry random digits that are a hash
 * already).
 */
#ifndef SG_STRMAP_H
#define SG_STRMAP_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sg_strmap_node {
	struct sg_strmap_node *next;
	const char *key; /* NUL-terminated; unchanged while the node is in a table */
} sg_strmap_node;

typedef size_t (*sg_strmap_hash_fn)(const char *key);

typedef struct sg_strmap {
	sg_strmap_node **b;
	size_t nb, n; /* buckets (a power of two), nodes */
	sg_strmap_hash_fn hash;
} sg_strmap;

/* The object of type `type` whose member `member` is the node n. */
#define SG_STRMAP_ENTRY(n, type, member) ((type *)(void *)((char *)(n)-offsetof(type, member)))

/* Makes an empty table of at least `buckets` buckets (rounded up to a
 * power of two; 0 counts as 1) hashing with hash (NULL: FNV-1a).
 * SG_EINTERNAL when out of memory (*m is then empty, and sg_strmap_fini
 * may still be called on it). */
SG_API SG_MUST_CHECK int sg_strmap_init(sg_strmap *m, size_t buckets, sg_strmap_hash_fn hash);
/* Frees the buckets; the nodes are the caller's, and it frees them first
 * if it owns them (sg_strmap_iter). NULL and an empty *m are accepted. */
SG_API void sg_strmap_fini(sg_strmap *m);

/* The node whose key equals key, or NULL (the newest when a key was
 * inserted twice, which callers avoid by finding first). */
SG_API sg_strmap_node *sg_strmap_find(const sg_strmap *m, const char *key);
/* Links node, whose key the caller has set; never fails. */
SG_API void sg_strmap_insert(sg_strmap *m, sg_strmap_node *node);
/* Unlinks node (its next is cleared); false, and nothing changed, when it
 * is not in m. */
SG_API bool sg_strmap_remove(sg_strmap *m, sg_strmap_node *node);
/* Forgets every node at once (none is freed; the buckets are kept). */
SG_API void sg_strmap_clear(sg_strmap *m);
/* How many nodes m holds. */
SG_API size_t sg_strmap_count(const sg_strmap *m);

/* A walk over every node, in no particular order. The node it returns
 * may be removed or freed before the next call; nothing else may be
 * inserted or removed during the walk. */
typedef struct sg_strmap_iter {
	const sg_strmap *m;
	size_t i;            /* the next bucket to look in */
	sg_strmap_node *nxt; /* the next node to return, or NULL */
} sg_strmap_iter;

SG_API void sg_strmap_iter_init(sg_strmap_iter *it, const sg_strmap *m);
/* The next node, or NULL at the end. */
SG_API sg_strmap_node *sg_strmap_iter_next(sg_strmap_iter *it);

#endif
