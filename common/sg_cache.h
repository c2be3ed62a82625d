/*
 * sg_cache: a bounded, sharded, set-associative cache of fixed-size values
 * under 32-byte keys, each value live for a window of wall-clock seconds and
 * tagged with a generation. It is what both token authenticators keep their
 * answers in (the JWT verifier, token/sg_jwt.c; the TokenReview authenticator,
 * ra/sg_authn_tokenreview.c): a pod presents the same token for up to an
 * hour, and the answer is worth keeping for minutes.
 *
 * Shape: 64 shards, each a mutex over sets of 4 ways with least-recently-
 * used replacement. The key picks the shard (its first byte) and the set
 * (bytes 8..15), so keys must already be uniformly distributed: hashes
 * (callers use SHA-256 of the token, never the token). Capacity is fixed at
 * creation; nothing allocates after sg_cache_new, and the memory is resident
 * from then on (every page is written once at creation: the default 16,384
 * JWT answers take 12.5 MiB), so a full cache costs what an empty one does
 * and no request pays a page fault for it.
 *
 * An entry is returned only while from <= now < until and only to a lookup
 * that names the generation it was stored under: a caller whose source of
 * truth changes (a JWKS reload) bumps its generation and every older entry
 * becomes a miss without the cache being touched. A lookup that finds its
 * key no longer live drops the entry. Callers with nothing to invalidate
 * use generation 0 and from = SG_CACHE_FROM_ANY.
 *
 * Values are copied in and out under the shard lock, so a caller never
 * holds a pointer into the cache. They are wiped when an entry is dropped
 * and when the cache is freed (an evicted entry's value is overwritten in
 * full by its successor): the values are identities derived from secrets.
 *
 * Locking: a call takes exactly one shard mutex, never calls out and never
 * takes another lock, so a caller may hold its own lock across a call (lock
 * order: the caller's lock, then the shard's). Counters are atomics, read
 * without a lock.
 *
 * Thread safety: every call but sg_cache_free may run in any number of
 * threads at once.
 */
#ifndef SG_CACHE_H
#define SG_CACHE_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_CACHE_KEY_LEN 32
#define SG_CACHE_SHARDS 64
#define SG_CACHE_WAYS 4
#define SG_CACHE_ENTRIES_MIN (SG_CACHE_SHARDS * SG_CACHE_WAYS) /* one set per shard */
#define SG_CACHE_ENTRIES_MAX (1u << 22)
#define SG_CACHE_VALUE_MAX 4096 /* bytes of one value */
#define SG_CACHE_FROM_ANY INT64_MIN

typedef struct sg_cache sg_cache;

typedef struct sg_cache_stats {
	uint64_t hits;   /* lookups that returned a value */
	uint64_t misses; /* lookups that did not (absent, expired, not yet valid, other generation) */
	size_t entries;  /* entries held: a stale one counts until it is looked up or replaced */
	size_t capacity; /* fixed at creation */
} sg_cache_stats;

/* A cache of `entries` values of value_size bytes each. entries is rounded
 * down to a multiple of SG_CACHE_ENTRIES_MIN (256) and up to at least that;
 * both limits are checked before anything is allocated: SG_EINVAL when
 * entries is 0 or above SG_CACHE_ENTRIES_MAX or value_size is 0 or above
 * SG_CACHE_VALUE_MAX; SG_EINTERNAL when out of memory. Caller frees with
 * sg_cache_free. */
SG_API int sg_cache_new(sg_cache **out, size_t entries, size_t value_size) SG_MUST_CHECK;
/* Wipes every entry and frees; accepts NULL. No other thread may be using c. */
SG_API void sg_cache_free(sg_cache *c);

/* Copies the value stored under key into value (value_size bytes) and
 * returns true when the entry is live at now (from <= now < until) and was
 * stored under generation gen; it then becomes the most recently used of
 * its set. An entry under key that is not live is dropped (and wiped) and
 * the lookup is a miss. value is untouched on a miss. */
SG_API bool sg_cache_get(sg_cache *c, const uint8_t key[SG_CACHE_KEY_LEN], uint64_t gen, int64_t now, void *value);

/* Stores a copy of value (value_size bytes) under key and generation gen,
 * live while from <= now < until. The slot is the key's own entry if it has
 * one (whatever its generation: one entry per key), else a free one or one
 * that is stale at now (expired, or of another generation than gen), else
 * the set's least recently used, which is evicted. Nothing is stored, and
 * false is returned, when until <= now. */
SG_API bool sg_cache_put(sg_cache *c, const uint8_t key[SG_CACHE_KEY_LEN], uint64_t gen, int64_t now, int64_t from,
                         int64_t until, const void *value);

/* Counters and sizes, read without a lock (each one is exact; together
 * they are a snapshot only when no other thread is using c). */
SG_API void sg_cache_stats_get(const sg_cache *c, sg_cache_stats *out);

/* For tests of the wiping: true when the value of any slot, used or free,
 * holds the n bytes of p anywhere. Takes every shard lock in turn. */
SG_API bool sg_cache_holds_bytes(sg_cache *c, const void *p, size_t n);

#endif
