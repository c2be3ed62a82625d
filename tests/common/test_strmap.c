/*
 * Tests for sg_strmap: find, insert and remove with many keys (growth
 * through several doublings), keys that differ in one byte, the empty key,
 * a removal of a node that is not there, a caller's hash (one that puts
 * every key in one bucket), a walk that frees as it goes, and clear.
 */
#include "sg_strmap.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct item {
	int value;
	sg_strmap_node node; /* not first: SG_STRMAP_ENTRY does the arithmetic */
	char key[24];
} item;

static item *item_new(const char *key, int value)
{
	item *it = calloc(1, sizeof(*it));
	snprintf(it->key, sizeof(it->key), "%s", key);
	it->node.key = it->key;
	it->value = value;
	return it;
}

static item *find(const sg_strmap *m, const char *key)
{
	sg_strmap_node *n = sg_strmap_find(m, key);
	return n ? SG_STRMAP_ENTRY(n, item, node) : NULL;
}

#define N 1000

static void t_many(void)
{
	sg_strmap m;
	SG_CHECK_OK(sg_strmap_init(&m, 4, NULL));
	SG_CHECK(m.nb == 4 && sg_strmap_count(&m) == 0);
	SG_CHECK(find(&m, "absent") == NULL);
	static item *items[N];
	char key[24];
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "ns/pod-%d", i);
		items[i] = item_new(key, i);
		sg_strmap_insert(&m, &items[i]->node);
	}
	SG_CHECK(sg_strmap_count(&m) == N);
	SG_CHECK(m.nb >= N && (m.nb & (m.nb - 1)) == 0); /* grew, still a power of two */
	int found = 0;
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "ns/pod-%d", i);
		item *it = find(&m, key);
		found += it && it == items[i] && it->value == i;
	}
	SG_CHECK(found == N);
	SG_CHECK(find(&m, "ns/pod-") == NULL && find(&m, "ns/pod-1000") == NULL && find(&m, "") == NULL);
	/* Remove the even ones; the odd ones stay findable. */
	for (int i = 0; i < N; i += 2)
		SG_CHECK(sg_strmap_remove(&m, &items[i]->node));
	SG_CHECK(sg_strmap_count(&m) == N / 2);
	SG_CHECK(!sg_strmap_remove(&m, &items[0]->node)); /* not there any more */
	SG_CHECK(sg_strmap_count(&m) == N / 2);
	found = 0;
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "ns/pod-%d", i);
		found += (find(&m, key) != NULL) == (i % 2 == 1);
	}
	SG_CHECK(found == N);
	/* A walk sees each remaining node once. */
	sg_strmap_iter it;
	sg_strmap_iter_init(&it, &m);
	int seen = 0, odd = 0;
	for (sg_strmap_node *n; (n = sg_strmap_iter_next(&it));) {
		seen++;
		odd += SG_STRMAP_ENTRY(n, item, node)->value % 2;
	}
	SG_CHECK(seen == N / 2 && odd == N / 2);
	for (int i = 0; i < N; i++)
		free(items[i]);
	sg_strmap_fini(&m);
	SG_CHECK(m.b == NULL && m.nb == 0);
	sg_strmap_fini(&m); /* twice is fine */
	sg_strmap_fini(NULL);
}

static size_t one_bucket(const char *key)
{
	(void)key;
	return 7;
}

static void t_collisions(void)
{
	sg_strmap m;
	SG_CHECK_OK(sg_strmap_init(&m, 0, one_bucket)); /* 0 buckets: one */
	SG_CHECK(m.nb == 1);
	item *a = item_new("a", 1), *b = item_new("b", 2), *ab = item_new("ab", 3), *e = item_new("", 4);
	sg_strmap_insert(&m, &a->node);
	sg_strmap_insert(&m, &b->node);
	sg_strmap_insert(&m, &ab->node);
	sg_strmap_insert(&m, &e->node);
	SG_CHECK(find(&m, "a") == a && find(&m, "b") == b && find(&m, "ab") == ab && find(&m, "") == e);
	SG_CHECK(find(&m, "ba") == NULL && find(&m, "A") == NULL);
	/* Out of the middle of a chain, then the ends. */
	SG_CHECK(sg_strmap_remove(&m, &b->node) && b->node.next == NULL);
	SG_CHECK(find(&m, "b") == NULL && find(&m, "a") == a && find(&m, "ab") == ab);
	SG_CHECK(sg_strmap_remove(&m, &e->node) && sg_strmap_remove(&m, &a->node));
	SG_CHECK(find(&m, "ab") == ab && sg_strmap_count(&m) == 1);
	SG_CHECK(!sg_strmap_remove(&m, &a->node));
	free(a);
	free(b);
	free(ab);
	free(e);
	sg_strmap_fini(&m);
}

static void t_walk_free_clear(void)
{
	sg_strmap m;
	SG_CHECK_OK(sg_strmap_init(&m, 64, NULL));
	sg_strmap_iter it;
	sg_strmap_iter_init(&it, &m);
	SG_CHECK(sg_strmap_iter_next(&it) == NULL); /* empty */
	char key[24];
	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		sg_strmap_insert(&m, &item_new(key, i)->node);
	}
	/* Free every node during the walk (the owner's teardown), then clear. */
	int freed = 0;
	sg_strmap_iter_init(&it, &m);
	for (sg_strmap_node *n; (n = sg_strmap_iter_next(&it));) {
		free(SG_STRMAP_ENTRY(n, item, node));
		freed++;
	}
	SG_CHECK(freed == 200);
	sg_strmap_clear(&m);
	SG_CHECK(sg_strmap_count(&m) == 0 && find(&m, "k1") == NULL);
	/* Usable again after clear. */
	item *x = item_new("k1", 9);
	sg_strmap_insert(&m, &x->node);
	SG_CHECK(find(&m, "k1") == x);
	/* A walk that removes what it returns. */
	sg_strmap_iter_init(&it, &m);
	for (sg_strmap_node *n; (n = sg_strmap_iter_next(&it));)
		SG_CHECK(sg_strmap_remove(&m, n));
	SG_CHECK(sg_strmap_count(&m) == 0);
	free(x);
	sg_strmap_fini(&m);
}

SG_TEST_MAIN(SG_TEST(t_many), SG_TEST(t_collisions), SG_TEST(t_walk_free_clear))
