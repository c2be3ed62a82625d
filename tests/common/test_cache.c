/*
 * Tests for sg_cache: the limits checked before allocating, the capacity
 * they give, least-recently-used eviction within a set (and the preference
 * for free and stale slots over it), the validity window (until, from),
 * generation invalidation, one entry per key, the counters, wiping of
 * dropped and evicted values, the memory resident from creation, and
 * readers and writers in many threads at once (the TSan build runs this
 * too).
 *
 * Keys are built by hand here so that the tests can aim at one set: the
 * first byte picks the shard and bytes 8..15 the set, so keys that share
 * both compete for the same 4 ways.
 */
#include "sg_cache.h"
#include "sg_test.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NOW 1700000000

typedef struct value {
	uint32_t id;
	char text[60];
} value;

/* A key in shard `shard`, set 0 of a one-set-per-shard cache, told apart
 * from its neighbours by `id` (bytes 16..19, which choose nothing). */
static void key_of(uint8_t key[SG_CACHE_KEY_LEN], uint8_t shard, uint32_t id)
{
	memset(key, 0, SG_CACHE_KEY_LEN);
	key[0] = shard;
	memcpy(key + 16, &id, sizeof(id));
}

static value value_of(uint32_t id)
{
	value v;
	memset(&v, 0, sizeof(v));
	v.id = id;
	snprintf(v.text, sizeof(v.text), "value-%u", id);
	return v;
}

static bool put(sg_cache *c, uint32_t id, uint64_t gen, int64_t now, int64_t until)
{
	uint8_t k[SG_CACHE_KEY_LEN];
	key_of(k, 7, id);
	value v = value_of(id);
	return sg_cache_put(c, k, gen, now, SG_CACHE_FROM_ANY, until, &v);
}

/* Whether id is there at now under gen, with its own value. */
static bool has(sg_cache *c, uint32_t id, uint64_t gen, int64_t now)
{
	uint8_t k[SG_CACHE_KEY_LEN];
	key_of(k, 7, id);
	value v;
	memset(&v, 0xee, sizeof(v));
	if (!sg_cache_get(c, k, gen, now, &v))
		return false;
	value want = value_of(id);
	SG_CHECK(memcmp(&v, &want, sizeof(v)) == 0);
	return true;
}

static sg_cache_stats stats(const sg_cache *c)
{
	sg_cache_stats st;
	sg_cache_stats_get(c, &st);
	return st;
}

static void t_limits(void)
{
	sg_cache *c = (sg_cache *)1;
	SG_CHECK_RC(sg_cache_new(&c, 0, 8), SG_EINVAL);
	SG_CHECK(c == NULL);
	SG_CHECK_RC(sg_cache_new(&c, SG_CACHE_ENTRIES_MAX + 1, 8), SG_EINVAL);
	SG_CHECK_RC(sg_cache_new(&c, SIZE_MAX, 8), SG_EINVAL);
	SG_CHECK_RC(sg_cache_new(&c, 256, 0), SG_EINVAL);
	SG_CHECK_RC(sg_cache_new(&c, 256, SG_CACHE_VALUE_MAX + 1), SG_EINVAL);
	SG_CHECK_RC(sg_cache_new(&c, 256, SIZE_MAX), SG_EINVAL);
	static const struct {
		size_t asked, got;
	} sizes[] = {{1, 256}, {255, 256}, {256, 256}, {511, 256}, {512, 512}, {1000, 768}, {16384, 16384}};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		SG_CHECK_OK(sg_cache_new(&c, sizes[i].asked, SG_CACHE_VALUE_MAX));
		sg_cache_stats st = stats(c);
		SG_CHECK(st.capacity == sizes[i].got && st.entries == 0 && st.hits == 0 && st.misses == 0);
		sg_cache_free(c);
	}
	sg_cache_free(NULL);
}

static void t_roundtrip(void)
{
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 256, sizeof(value)));
	SG_CHECK(!has(c, 1, 0, NOW));
	SG_CHECK(put(c, 1, 0, NOW, NOW + 10));
	SG_CHECK(has(c, 1, 0, NOW));
	SG_CHECK(has(c, 1, 0, NOW + 9));
	SG_CHECK(!has(c, 2, 0, NOW));
	/* The value was copied in: changing the caller's copy changes nothing. */
	uint8_t k[SG_CACHE_KEY_LEN];
	key_of(k, 9, 5);
	value v = value_of(5), out;
	SG_CHECK(sg_cache_put(c, k, 0, NOW, SG_CACHE_FROM_ANY, NOW + 10, &v));
	v.id = 99;
	SG_CHECK(sg_cache_get(c, k, 0, NOW, &out) && out.id == 5);
	/* A miss leaves the output alone. */
	key_of(k, 9, 6);
	memset(&out, 0x5a, sizeof(out));
	SG_CHECK(!sg_cache_get(c, k, 0, NOW, &out) && out.id == 0x5a5a5a5a);
	sg_cache_stats st = stats(c);
	SG_CHECK(st.entries == 2 && st.hits == 3 && st.misses == 3);
	sg_cache_free(c);
}

static void t_window(void)
{
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 256, sizeof(value)));
	/* Nothing is kept that is over already. */
	SG_CHECK(!put(c, 1, 0, NOW, NOW));
	SG_CHECK(!put(c, 1, 0, NOW, NOW - 1));
	SG_CHECK(stats(c).entries == 0);
	/* until is exclusive; a lookup past it drops the entry. */
	SG_CHECK(put(c, 1, 0, NOW, NOW + 5));
	SG_CHECK(has(c, 1, 0, NOW + 4));
	SG_CHECK(!has(c, 1, 0, NOW + 5));
	SG_CHECK(stats(c).entries == 0);
	SG_CHECK(!has(c, 1, 0, NOW)); /* dropped, not merely hidden */
	/* from is inclusive; before it the entry is a miss, and dropped. */
	uint8_t k[SG_CACHE_KEY_LEN];
	key_of(k, 7, 2);
	value v = value_of(2), out;
	SG_CHECK(sg_cache_put(c, k, 0, NOW, NOW - 60, NOW + 300, &v));
	SG_CHECK(sg_cache_get(c, k, 0, NOW - 60, &out));
	SG_CHECK(!sg_cache_get(c, k, 0, NOW - 61, &out));
	SG_CHECK(!sg_cache_get(c, k, 0, NOW, &out));
	SG_CHECK(stats(c).entries == 0);
	sg_cache_free(c);
}

static void t_generation(void)
{
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 256, sizeof(value)));
	SG_CHECK(put(c, 1, 1, NOW, NOW + 100));
	SG_CHECK(put(c, 2, 1, NOW, NOW + 100));
	SG_CHECK(has(c, 1, 1, NOW));
	/* A lookup under a newer generation misses and drops the old entry. */
	SG_CHECK(!has(c, 1, 2, NOW));
	SG_CHECK(!has(c, 1, 1, NOW));
	SG_CHECK(stats(c).entries == 1);
	/* One entry per key: storing again under another generation replaces it. */
	SG_CHECK(put(c, 2, 2, NOW, NOW + 100));
	SG_CHECK(stats(c).entries == 1);
	SG_CHECK(has(c, 2, 2, NOW));
	/* An entry of another generation than the one being stored is stale:
	 * its slot is as good as a free one (3 takes slot 0, freed above, and
	 * is the first such slot when 4 is stored, although slots 2 and 3 are
	 * free). */
	SG_CHECK(put(c, 3, 1, NOW, NOW + 100));
	SG_CHECK(has(c, 3, 1, NOW));
	SG_CHECK(stats(c).entries == 2);
	SG_CHECK(put(c, 4, 2, NOW, NOW + 100));
	SG_CHECK(stats(c).entries == 2);
	SG_CHECK(!has(c, 3, 1, NOW));
	SG_CHECK(has(c, 2, 2, NOW) && has(c, 4, 2, NOW));
	sg_cache_free(c);
}

static void t_eviction(void)
{
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 256, sizeof(value))); /* one set of 4 per shard */
	for (uint32_t id = 1; id <= 4; id++)
		SG_CHECK(put(c, id, 0, NOW, NOW + 100));
	SG_CHECK(stats(c).entries == 4);
	/* Use 1 and 2: 3 is now the least recently used. */
	SG_CHECK(has(c, 1, 0, NOW) && has(c, 2, 0, NOW));
	SG_CHECK(put(c, 5, 0, NOW, NOW + 100));
	SG_CHECK(!has(c, 3, 0, NOW));
	SG_CHECK(has(c, 1, 0, NOW) && has(c, 2, 0, NOW) && has(c, 4, 0, NOW) && has(c, 5, 0, NOW));
	SG_CHECK(stats(c).entries == 4);
	/* Order of use now 1, 2, 4, 5: the LRU is 1. */
	SG_CHECK(put(c, 6, 0, NOW, NOW + 100));
	SG_CHECK(!has(c, 1, 0, NOW));
	/* A stale entry goes before the LRU: 7 expires at NOW + 10. */
	SG_CHECK(put(c, 7, 0, NOW, NOW + 10)); /* replaces the LRU, 2 */
	SG_CHECK(!has(c, 2, 0, NOW));
	SG_CHECK(has(c, 4, 0, NOW + 10) && has(c, 5, 0, NOW + 10) && has(c, 6, 0, NOW + 10));
	SG_CHECK(put(c, 8, 0, NOW + 10, NOW + 100)); /* 7 is stale, though the most recently stored */
	SG_CHECK(has(c, 4, 0, NOW + 10) && has(c, 5, 0, NOW + 10) && has(c, 6, 0, NOW + 10) && has(c, 8, 0, NOW + 10));
	/* Storing a key that is there changes its slot, not another one. */
	SG_CHECK(put(c, 4, 0, NOW + 10, NOW + 200));
	SG_CHECK(has(c, 4, 0, NOW + 150) && !has(c, 5, 0, NOW + 150));
	/* Other shards were never touched. */
	uint8_t k[SG_CACHE_KEY_LEN];
	value out;
	key_of(k, 8, 4);
	SG_CHECK(!sg_cache_get(c, k, 0, NOW, &out));
	sg_cache_free(c);

	/* A larger cache spreads one shard's keys over several sets. */
	SG_CHECK_OK(sg_cache_new(&c, 4096, sizeof(value))); /* 16 sets a shard */
	for (uint32_t id = 0; id < 64; id++) {
		key_of(k, 3, id);
		k[8] = (uint8_t)(id % 16); /* the set */
		value v = value_of(id);
		SG_CHECK(sg_cache_put(c, k, 0, NOW, SG_CACHE_FROM_ANY, NOW + 100, &v));
	}
	SG_CHECK(stats(c).entries == 64);
	for (uint32_t id = 0; id < 64; id++) {
		key_of(k, 3, id);
		k[8] = (uint8_t)(id % 16);
		SG_CHECK(sg_cache_get(c, k, 0, NOW, &out) && out.id == id);
	}
	sg_cache_free(c);
}

static void t_wipe(void)
{
	static const char secret[] = "spiffe://cluster.local/ns/secret/sa/wiped";
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 256, sizeof(value)));
	uint8_t k[SG_CACHE_KEY_LEN];
	value v = value_of(1), out;
	snprintf(v.text, sizeof(v.text), "%s", secret);
	key_of(k, 7, 1);
	/* Dropped when found expired. */
	SG_CHECK(sg_cache_put(c, k, 0, NOW, SG_CACHE_FROM_ANY, NOW + 1, &v));
	SG_CHECK(sg_cache_holds_bytes(c, secret, strlen(secret)));
	SG_CHECK(!sg_cache_get(c, k, 0, NOW + 1, &out));
	SG_CHECK(!sg_cache_holds_bytes(c, secret, strlen(secret)));
	/* Dropped when found under an old generation. */
	SG_CHECK(sg_cache_put(c, k, 1, NOW, SG_CACHE_FROM_ANY, NOW + 100, &v));
	SG_CHECK(!sg_cache_get(c, k, 2, NOW, &out));
	SG_CHECK(!sg_cache_holds_bytes(c, secret, strlen(secret)));
	/* Evicted: overwritten by the entry that took its slot. */
	SG_CHECK(sg_cache_put(c, k, 0, NOW, SG_CACHE_FROM_ANY, NOW + 100, &v));
	for (uint32_t id = 2; id <= 5; id++)
		SG_CHECK(put(c, id, 0, NOW, NOW + 100));
	SG_CHECK(!sg_cache_get(c, k, 0, NOW, &out));
	SG_CHECK(!sg_cache_holds_bytes(c, secret, strlen(secret)));
	sg_cache_free(c);
}

/* ---- many threads ---- */

#define THREADS 8
#define ROUNDS 20000
#define KEYS 600 /* more than the 256 slots: evictions all the time */

struct worker {
	sg_cache *c;
	unsigned seed;
	uint64_t gets, bad;
};

/* The key and value of id: the value names its key, so a torn or misfiled
 * copy shows. */
static void pair_of(uint32_t id, uint8_t key[SG_CACHE_KEY_LEN], value *v)
{
	for (size_t i = 0; i < SG_CACHE_KEY_LEN; i++)
		key[i] = (uint8_t)(id * 2654435761u >> (i % 4 * 8)) ^ (uint8_t)i;
	*v = value_of(id);
}

static void *hammer(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < ROUNDS; i++) {
		w->seed = w->seed * 1103515245u + 12345u;
		uint32_t id = (w->seed >> 8) % KEYS;
		uint8_t k[SG_CACHE_KEY_LEN];
		value v, out;
		pair_of(id, k, &v);
		int64_t now = NOW + i / 1000; /* entries expire as the threads go */
		if ((w->seed >> 4) % 3 == 0) {
			(void)sg_cache_put(w->c, k, 0, now, SG_CACHE_FROM_ANY, now + 5, &v);
		} else {
			w->gets++;
			if (sg_cache_get(w->c, k, 0, now, &out) && memcmp(&out, &v, sizeof(v)) != 0)
				w->bad++;
		}
	}
	return NULL;
}

/* This process's resident bytes (/proc/self/statm). */
static size_t resident(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	SG_CHECK(f != NULL);
	unsigned long size = 0, pages = 0;
	SG_CHECK(fscanf(f, "%lu %lu", &size, &pages) == 2);
	fclose(f);
	return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Every page is resident once sg_cache_new returns, before the first put:
 * no request pays the page faults of an empty cache. 32,768 values of
 * 2,000 bytes are 64 MiB and more, far above what the allocator could
 * have had resident and free. */
static void t_resident(void)
{
	size_t before = resident();
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 32768, 2000));
	size_t after = resident();
	SG_CHECK(after > before && after - before >= (size_t)32768 * 2000);
	SG_CHECK(stats(c).entries == 0);
	sg_cache_free(c);
}

static void t_concurrent(void)
{
	sg_cache *c = NULL;
	SG_CHECK_OK(sg_cache_new(&c, 256, sizeof(value)));
	pthread_t t[THREADS];
	struct worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.c = c, .seed = (unsigned)i * 7919u + 1};
		SG_CHECK(pthread_create(&t[i], NULL, hammer, &w[i]) == 0);
	}
	/* Counters are readable while the others run. */
	for (int i = 0; i < 100; i++)
		SG_CHECK(stats(c).entries <= 256);
	uint64_t gets = 0, bad = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		gets += w[i].gets;
		bad += w[i].bad;
	}
	sg_cache_stats st = stats(c);
	SG_CHECK(bad == 0);
	SG_CHECK(st.hits + st.misses == gets);
	SG_CHECK(st.hits > 0 && st.misses > 0);
	SG_CHECK(st.entries > 0 && st.entries <= st.capacity);
	sg_cache_free(c);
}

SG_TEST_MAIN(SG_TEST(t_limits), SG_TEST(t_roundtrip), SG_TEST(t_window), SG_TEST(t_generation), SG_TEST(t_eviction),
             SG_TEST(t_wipe), SG_TEST(t_resident), SG_TEST(t_concurrent))
