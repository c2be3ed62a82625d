/*
 * sg_kubekeep: signed results waiting for their status write (contract:
 * sg_kubekeep.h).
 *
 * Design notes. A flat array of at most max entries, searched linearly:
 * entries exist only between a signature and a successful write, so the
 * array is nearly always empty, and even full (256) a scan costs less than
 * the API request it saves. The oldest entry is the one with the smallest
 * sequence number. Results are deep copies in both directions, so nothing
 * handed out points into the store and the lock is never held across a
 * caller's work.
 */
#include "sg_kubekeep.h"

#include "sg_guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 320 /* "ns/name": 63 + 1 + 253, and room */

typedef struct entry {
	bool used;
	uint64_t seq;
	char key[KEY_MAX];
	char uid[SG_KUBEKEEP_UID_MAX + 1];
	int64_t generation;
	sg_kubesign_result res;
} entry;

struct sg_kubekeep {
	pthread_mutex_t mu;
	size_t max;
	entry *e;
	uint64_t next_seq;
	sg_kubekeep_stats stats;
};

int sg_kubekeep_new(sg_kubekeep **out, size_t max)
{
	*out = NULL;
	sg_kubekeep *kp = calloc(1, sizeof(*kp));
	SG_ENSURE(kp, SG_EINTERNAL, "kubekeep: out of memory");
	kp->max = max ? max : SG_KUBEKEEP_MAX;
	kp->e = calloc(kp->max, sizeof(entry));
	if (!kp->e) {
		free(kp);
		SG_BAIL(SG_EINTERNAL, "kubekeep: out of memory");
	}
	pthread_mutex_init(&kp->mu, NULL);
	*out = kp;
	return SG_OK;
}

static void entry_clear(sg_kubekeep *kp, entry *e)
{
	if (!e->used)
		return;
	sg_kubesign_result_clear(&e->res);
	memset(e, 0, sizeof(*e));
	kp->stats.entries--;
}

void sg_kubekeep_free(sg_kubekeep *kp)
{
	if (!kp)
		return;
	sg_kubekeep_clear(kp);
	pthread_mutex_destroy(&kp->mu);
	free(kp->e);
	free(kp);
}

static int result_copy(const sg_kubesign_result *from, sg_kubesign_result *to)
{
	*to = *from;
	to->chain = from->chain ? strdup(from->chain) : NULL;
	to->ca = from->ca ? strdup(from->ca) : NULL;
	if ((from->chain && !to->chain) || (from->ca && !to->ca)) {
		sg_kubesign_result_clear(to);
		SG_BAIL(SG_EINTERNAL, "kubekeep: out of memory");
	}
	return SG_OK;
}

/* The entry of uid, or NULL. Under the lock. */
static entry *find(sg_kubekeep *kp, const char *uid)
{
	for (size_t i = 0; uid && i < kp->max; i++)
		if (kp->e[i].used && strcmp(kp->e[i].uid, uid) == 0)
			return &kp->e[i];
	return NULL;
}

/* A free slot, making one from the oldest entry when full. Under the lock. */
static entry *slot(sg_kubekeep *kp)
{
	entry *oldest = NULL;
	for (size_t i = 0; i < kp->max; i++) {
		if (!kp->e[i].used)
			return &kp->e[i];
		if (!oldest || kp->e[i].seq < oldest->seq)
			oldest = &kp->e[i];
	}
	entry_clear(kp, oldest);
	kp->stats.evicted++;
	return oldest;
}

int sg_kubekeep_put(sg_kubekeep *kp, const char *key, const char *uid, int64_t generation,
                    const sg_kubesign_result *res)
{
	SG_ENSURE(key && *key && strlen(key) < KEY_MAX, SG_EINVAL, "kubekeep: no usable object key");
	SG_ENSURE(uid && *uid && strlen(uid) <= SG_KUBEKEEP_UID_MAX, SG_EINVAL, "kubekeep: no usable uid");
	sg_kubesign_result copy;
	SG_TRY(result_copy(res, &copy));
	pthread_mutex_lock(&kp->mu);
	entry *e = find(kp, uid);
	if (e)
		entry_clear(kp, e);
	else
		e = slot(kp);
	e->used = true;
	e->seq = kp->next_seq++;
	memcpy(e->key, key, strlen(key) + 1);
	memcpy(e->uid, uid, strlen(uid) + 1);
	e->generation = generation;
	e->res = copy;
	kp->stats.entries++;
	kp->stats.kept++;
	pthread_mutex_unlock(&kp->mu);
	return SG_OK;
}

bool sg_kubekeep_get(sg_kubekeep *kp, const char *uid, int64_t generation, sg_kubesign_result *out)
{
	memset(out, 0, sizeof(*out));
	bool found = false;
	pthread_mutex_lock(&kp->mu);
	entry *e = find(kp, uid);
	if (e && e->generation != generation)
		entry_clear(kp, e);
	else if (e && result_copy(&e->res, out) == SG_OK)
		found = true;
	if (found)
		kp->stats.reused++;
	pthread_mutex_unlock(&kp->mu);
	return found;
}

void sg_kubekeep_drop(sg_kubekeep *kp, const char *uid)
{
	pthread_mutex_lock(&kp->mu);
	entry *e = find(kp, uid);
	if (e)
		entry_clear(kp, e);
	pthread_mutex_unlock(&kp->mu);
}

void sg_kubekeep_drop_key(sg_kubekeep *kp, const char *key)
{
	pthread_mutex_lock(&kp->mu);
	for (size_t i = 0; key && i < kp->max; i++)
		if (kp->e[i].used && strcmp(kp->e[i].key, key) == 0)
			entry_clear(kp, &kp->e[i]);
	pthread_mutex_unlock(&kp->mu);
}

void sg_kubekeep_clear(sg_kubekeep *kp)
{
	pthread_mutex_lock(&kp->mu);
	for (size_t i = 0; i < kp->max; i++)
		entry_clear(kp, &kp->e[i]);
	pthread_mutex_unlock(&kp->mu);
}

void sg_kubekeep_stats_get(sg_kubekeep *kp, sg_kubekeep_stats *out)
{
	pthread_mutex_lock(&kp->mu);
	*out = kp->stats;
	pthread_mutex_unlock(&kp->mu);
}
