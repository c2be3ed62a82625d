/*
 * sg_forward_sweep: the CertificateRequests a crash left behind. A
 * replica's requests carry its label; the sweeper thread lists them now
 * and then and deletes those nobody waits for any more: one of this
 * replica's that an earlier run left (not pending here, created before
 * this run began), or another replica's once it is older than any wait
 * can be. Not started when requests are preserved. Apart from the
 * forwarder because it is a second, independent pass over the API
 * server's state, with its own clock, that only reads the forwarder's map.
 */
#include "sg_forward_impl.h"

#include "sg_clock.h"

#include <stdio.h>
#include <string.h>

#define SWEEP_FIRST_MS 10000u /* the first look for what a crash left, after start */

/* ---- what a crash left behind ---- */

/* One look: every request of ours that nobody waits for any more. A
 * request of this replica that is not pending here was left by an earlier
 * run with the same id (or its delete failed); another replica's is left
 * only once it is older than any wait can be. */
static void sweep(sg_forward *f)
{
	sg_kube_ref ref = forward_cr_ref(f, NULL);
	sg_kube_list_opts lo = {.label_selector = SG_FORWARD_LABEL};
	json_t *list = NULL;
	if (sg_kube_list_all(f->kube, &ref, &lo, &list) != SG_OK) {
		char why[SG_ERROR_MSG_MAX];
		forward_api_message(why, sizeof(why));
		forward_warn(f, "cannot look for certificate requests left behind", "", why);
		return;
	}
	int64_t now = sg_wall_seconds();
	size_t i, removed = 0;
	json_t *item;
	json_array_foreach(json_object_get(list, "items"), i, item)
	{
		const char *name = sg_kube_meta_str(item, "name");
		const char *owner = json_string_value(
		    json_object_get(json_object_get(json_object_get(item, "metadata"), "labels"), SG_FORWARD_LABEL));
		if (!name || !owner)
			continue;
		bool mine = strcmp(owner, f->replica_id) == 0;
		int64_t born;
		if (!sg_clock_parse_rfc3339(sg_kube_meta_str(item, "creationTimestamp"), &born))
			continue;
		if (mine) {
			/* Only what an earlier run left: one of this run's, answered
			 * and waiting for its worker's delete, is not ours to take
			 * (the timestamp has whole seconds, hence strictly before). */
			if (born >= f->born_s)
				continue;
			pthread_mutex_lock(&f->mu);
			bool waited_for = forward_map_find(f, name) != NULL;
			bool stopping = f->stopping;
			pthread_mutex_unlock(&f->mu);
			if (waited_for || stopping)
				continue;
		} else if (now - born < (int64_t)f->orphan_age_s) {
			continue;
		}
		sg_kube_ref one = forward_cr_ref(f, name);
		int rc = sg_kube_delete(f->kube, &one, NULL);
		count(&f->deletes);
		if (rc == SG_OK) {
			removed++;
			count(&f->swept);
		} else if (rc != SG_ENOTFOUND) {
			count(&f->api_errors);
		}
	}
	json_decref(list);
	if (removed)
		sg_log(SG_LOG_INFO, "removed certificate requests left behind", SG_F_STR("namespace", f->ns),
		       SG_F_INT("removed", (int64_t)removed), SG_F_END);
}

void *forward_sweeper(void *arg)
{
	sg_forward *f = arg;
	unsigned wait_ms = SWEEP_FIRST_MS < f->sweep_ms ? SWEEP_FIRST_MS : f->sweep_ms;
	while (forward_nap(f, wait_ms)) {
		sweep(f);
		wait_ms = f->sweep_ms;
	}
	return NULL;
}
