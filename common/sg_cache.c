/*
 * The sharded expiring cache (contract: sg_cache.h). It was written twice,
 * once in the JWT verifier and once in the TokenReview authenticator, with
 * the same shape; this is that shape, with the value made opaque.
 *
 * Why this shape: a cache hit must cost far less than what it saves (an
 * ES256 verification, ~100 us; a TokenReview, a round trip to the API
 * server) and must not serialise the transport threads. 64 shards keyed by
 * the hash's first byte make two lookups contend only when they hash to the
 * same shard; the shards are cache-line aligned so their mutexes do not
 * share a line. Within a shard a key can live in one set of 4 ways, so a
 * lookup compares at most 4 keys and replacement is a true LRU of 4 by a
 * per-shard clock (compared by signed difference, so its wrap is harmless).
 * The hit and miss counters sit on their own line for the same reason.
 *
 * Memory: one allocation of sets x 4 slots per shard, each slot a header
 * and value_size bytes of value, both rounded to 16 bytes, every page of it
 * written once at creation (commit()). Keys are
 * compared in constant time: they are hashes of credentials, and there is
 * no reason to say how much of one matched.
 */
#include "sg_cache.h"

#include "sg_guard.h"
#include "sg_secret.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE 64

struct slot {
	uint8_t key[SG_CACHE_KEY_LEN];
	uint64_t gen;
	int64_t from, until;
	uint32_t stamp;
	bool used;
	/* value_size bytes of value follow, at HDR_SIZE */
};

#define ROUND16(n) (((n) + 15) & ~(size_t)15)
#define HDR_SIZE ROUND16(sizeof(struct slot))

struct shard {
	alignas(LINE) pthread_mutex_t lock;
	uint32_t clock;
	uint8_t *slots; /* sets * SG_CACHE_WAYS slots of c->stride bytes */
};

struct sg_cache {
	size_t value_size, stride, sets;
	uint8_t *mem;
	struct shard shards[SG_CACHE_SHARDS];
	alignas(LINE) atomic_uint_fast64_t hits;
	atomic_uint_fast64_t misses;
	atomic_size_t entries;
};

static struct slot *slot_at(const sg_cache *c, uint8_t *set, size_t way)
{
	return (struct slot *)(void *)(set + way * c->stride);
}

static uint8_t *value_of(struct slot *s)
{
	return (uint8_t *)s + HDR_SIZE;
}

/* The shard by the key's first byte, the set by bytes 8..15. */
static uint8_t *set_of(sg_cache *c, const uint8_t *key, struct shard **sh)
{
	uint64_t x;
	memcpy(&x, key + 8, sizeof(x));
	*sh = &c->shards[key[0] % SG_CACHE_SHARDS];
	return (*sh)->slots + (x % c->sets) * SG_CACHE_WAYS * c->stride;
}

static bool key_equal(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;
	for (size_t i = 0; i < SG_CACHE_KEY_LEN; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

/* Under the shard lock. */
static void drop(sg_cache *c, struct slot *s)
{
	sg_wipe(s, c->stride);
	s->used = false;
	atomic_fetch_sub_explicit(&c->entries, 1, memory_order_relaxed);
}

void sg_cache_free(sg_cache *c)
{
	if (!c)
		return;
	if (c->mem)
		sg_wipe(c->mem, SG_CACHE_SHARDS * c->sets * SG_CACHE_WAYS * c->stride);
	free(c->mem);
	for (size_t i = 0; i < SG_CACHE_SHARDS; i++)
		pthread_mutex_destroy(&c->shards[i].lock);
	free(c);
}

/* Writes one byte of every page of mem (already zero: a no-op for the
 * contents). Why: calloc's fresh pages are mapped on first touch, and the
 * set a key picks is anywhere in the allocation, so until every page has
 * been touched each new token lands on one it has not: a lookup maps the
 * zero page and the store then replaces it, a second fault that shoots
 * down the TLB of every CPU running the process. With a token per request
 * that cost 9-34 us of a certificate's ~0.2 ms of CPU until the sets had
 * filled, some 40,000 certificates after a start: a mesh's restart
 * (perf/README.md section 2). Here it is one fault per page, once, before
 * any request. */
static void commit(uint8_t *mem, size_t len)
{
	long ps = sysconf(_SC_PAGESIZE);
	size_t step = ps > 0 ? (size_t)ps : 4096;
	volatile uint8_t *v = mem;
	for (size_t off = 0; off < len; off += step)
		v[off] = 0;
}

int sg_cache_new(sg_cache **out, size_t entries, size_t value_size)
{
	*out = NULL;
	SG_ENSURE(entries > 0 && entries <= SG_CACHE_ENTRIES_MAX, SG_EINVAL, "cache entries must be 1..%u",
	          SG_CACHE_ENTRIES_MAX);
	SG_ENSURE(value_size > 0 && value_size <= SG_CACHE_VALUE_MAX, SG_EINVAL, "cache values must be 1..%d bytes",
	          SG_CACHE_VALUE_MAX);
	size_t sets = entries / SG_CACHE_ENTRIES_MIN ? entries / SG_CACHE_ENTRIES_MIN : 1;
	size_t stride = HDR_SIZE + ROUND16(value_size);
	size_t slots = SG_CACHE_SHARDS * sets * SG_CACHE_WAYS; /* <= SG_CACHE_ENTRIES_MAX */
	SG_ENSURE(slots <= SIZE_MAX / stride, SG_EINVAL, "cache of %zu entries of %zu bytes is too large", slots,
	          value_size);
	/* The shards are cache-line aligned, so the struct must be too. */
	size_t size = (sizeof(sg_cache) + LINE - 1) / LINE * LINE;
	sg_cache *c = aligned_alloc(LINE, size);
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	memset(c, 0, size);
	c->value_size = value_size;
	c->stride = stride;
	c->sets = sets;
	c->mem = calloc(slots, stride);
	if (c->mem)
		commit(c->mem, slots * stride);
	for (size_t i = 0; i < SG_CACHE_SHARDS; i++) {
		pthread_mutex_init(&c->shards[i].lock, NULL);
		if (c->mem)
			c->shards[i].slots = c->mem + i * sets * SG_CACHE_WAYS * stride;
	}
	atomic_init(&c->hits, 0);
	atomic_init(&c->misses, 0);
	atomic_init(&c->entries, 0);
	if (!c->mem) {
		sg_cache_free(c);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	*out = c;
	return SG_OK;
}

bool sg_cache_get(sg_cache *c, const uint8_t key[SG_CACHE_KEY_LEN], uint64_t gen, int64_t now, void *value)
{
	struct shard *sh;
	uint8_t *set = set_of(c, key, &sh);
	bool hit = false;
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < SG_CACHE_WAYS; i++) {
		struct slot *s = slot_at(c, set, i);
		if (!s->used || !key_equal(s->key, key))
			continue;
		if (s->gen == gen && s->from <= now && now < s->until) {
			s->stamp = ++sh->clock;
			memcpy(value, value_of(s), c->value_size);
			hit = true;
		} else {
			drop(c, s); /* it cannot become live again: a miss now re-fills it */
		}
		break;
	}
	pthread_mutex_unlock(&sh->lock);
	atomic_fetch_add_explicit(hit ? &c->hits : &c->misses, 1, memory_order_relaxed);
	return hit;
}

/* The slot key goes to: its own, else a free or stale one, else the LRU. */
static struct slot *victim_of(sg_cache *c, uint8_t *set, const uint8_t *key, uint64_t gen, int64_t now)
{
	for (size_t i = 0; i < SG_CACHE_WAYS; i++) {
		struct slot *s = slot_at(c, set, i);
		if (s->used && key_equal(s->key, key))
			return s;
	}
	for (size_t i = 0; i < SG_CACHE_WAYS; i++) {
		struct slot *s = slot_at(c, set, i);
		if (!s->used || s->until <= now || s->gen != gen)
			return s;
	}
	struct slot *lru = slot_at(c, set, 0);
	for (size_t i = 1; i < SG_CACHE_WAYS; i++) {
		struct slot *s = slot_at(c, set, i);
		if ((int32_t)(s->stamp - lru->stamp) < 0)
			lru = s;
	}
	return lru;
}

bool sg_cache_put(sg_cache *c, const uint8_t key[SG_CACHE_KEY_LEN], uint64_t gen, int64_t now, int64_t from,
                  int64_t until, const void *value)
{
	if (until <= now)
		return false;
	struct shard *sh;
	uint8_t *set = set_of(c, key, &sh);
	pthread_mutex_lock(&sh->lock);
	struct slot *s = victim_of(c, set, key, gen, now);
	if (!s->used)
		atomic_fetch_add_explicit(&c->entries, 1, memory_order_relaxed);
	/* Every byte of an evicted value is overwritten: the size is fixed. */
	memcpy(s->key, key, SG_CACHE_KEY_LEN);
	s->gen = gen;
	s->from = from;
	s->until = until;
	s->used = true;
	s->stamp = ++sh->clock;
	memcpy(value_of(s), value, c->value_size);
	pthread_mutex_unlock(&sh->lock);
	return true;
}

void sg_cache_stats_get(const sg_cache *c, sg_cache_stats *out)
{
	out->hits = atomic_load_explicit(&c->hits, memory_order_relaxed);
	out->misses = atomic_load_explicit(&c->misses, memory_order_relaxed);
	out->entries = atomic_load_explicit(&c->entries, memory_order_relaxed);
	out->capacity = SG_CACHE_SHARDS * c->sets * SG_CACHE_WAYS;
}

static bool contains(const uint8_t *hay, size_t len, const uint8_t *p, size_t n)
{
	for (size_t i = 0; n <= len && i <= len - n; i++)
		if (memcmp(hay + i, p, n) == 0)
			return true;
	return false;
}

bool sg_cache_holds_bytes(sg_cache *c, const void *p, size_t n)
{
	bool found = false;
	for (size_t i = 0; i < SG_CACHE_SHARDS && !found; i++) {
		struct shard *sh = &c->shards[i];
		pthread_mutex_lock(&sh->lock);
		for (size_t j = 0; j < c->sets * SG_CACHE_WAYS && !found; j++)
			found = contains(value_of(slot_at(c, sh->slots, j)), c->value_size, p, n);
		pthread_mutex_unlock(&sh->lock);
	}
	return found;
}
