/*
 * signetd_rootexpiry: the roots' expiry, as an operator needs to hear of
 * it. Two facts, both judged once a second by housekeeping and said once
 * when they become true, never on every scrape:
 *
 *   - the CA's root (the one its own chain ends at, sg_ca.h) is within
 *     root-rotation-lead of its expiry: the reason to rotate, and the
 *     signet_ca_root_rotation_due metric's 1. The default lead, a third of
 *     the root's validity, leaves a rotation's overlap (old + new root
 *     served while workloads pick up the new one) ample room for any root
 *     lifetime, as renewing at two thirds does for leaf certificates.
 *   - a root of the served bundle has expired. It is still served: the
 *     bundle is the operator's file, copied byte for byte by every replica
 *     into ConfigMaps, Secrets and trust bundles, and dropping a root by
 *     this replica's clock would make replicas disagree and rewrite every
 *     namespace's roots at a moment nobody chose. An expired root is inert
 *     to a verifier (no chain through it is accepted, and the live root
 *     beside it is the one a chain reaches), so serving it costs nothing;
 *     removing it is the rotation's last step, which this warning asks for.
 *     When the expired root is the CA's own, its certificates no longer
 *     verify anywhere: that is an error, not a warning.
 *
 * Apart from signetd_root.c, which follows the bundle's file, so that
 * what is judged of the roots reads in one place.
 */
#include "signetd_impl.h"

#include "sg_clock.h"
#include "sg_log.h"

#include <string.h>

int64_t signetd_root_rotation_lead(const daemon *d)
{
	if (d->a.d.root_rotation_lead > 0)
		return d->a.d.root_rotation_lead;
	if (!d->ca)
		return 0;
	int64_t validity = sg_ca_root_not_after(d->ca) - sg_ca_root_not_before(d->ca);
	return validity > 0 ? validity / 3 : 0;
}

bool signetd_root_rotation_due(const daemon *d, int64_t now)
{
	/* An RA without an HSM has no CA to rotate: the issuer's CA is the
	 * issuer's business (its expiry in the served bundle is still watched). */
	if (!d->ca)
		return false;
	return now >= sg_ca_root_not_after(d->ca) - signetd_root_rotation_lead(d);
}

void signetd_root_watch(daemon *d, const char *pem, size_t len)
{
	struct root_watch *w = &d->root_watch;
	memset(w->expired_logged, 0, sizeof(w->expired_logged));
	if (sg_ca_bundle_roots(d->ca, pem, len, w->roots, SG_CA_BUNDLE_MAX, &w->n) < 0) {
		/* Not reached with a bundle signetd_load_root accepted; if it
		 * were, the roots' expiry would go unreported, so say that. */
		w->n = 0;
		sg_log_error_last(SG_LOG_WARN, "cannot read the served roots; their expiry is not watched");
	}
}

static void log_rotation(daemon *d, bool due, int64_t now)
{
	char at[SG_CLOCK_RFC3339_LEN];
	(void)sg_clock_rfc3339(at, sizeof(at), sg_ca_root_not_after(d->ca));
	int64_t left = sg_ca_root_not_after(d->ca) - now;
	if (due)
		sg_log(SG_LOG_WARN, "the CA's root expires within root-rotation-lead: rotate the CA",
		       SG_F_STR("root", sg_ca_root_subject(d->ca)), SG_F_STR("not_after", at),
		       SG_F_INT("seconds_left", left), SG_F_INT("lead_seconds", signetd_root_rotation_lead(d)),
		       SG_F_END);
	else
		sg_log(SG_LOG_INFO, "the CA's root is no longer due for rotation",
		       SG_F_STR("root", sg_ca_root_subject(d->ca)), SG_F_STR("not_after", at), SG_F_END);
}

static void log_expired(const sg_ca_root_info *r)
{
	char at[SG_CLOCK_RFC3339_LEN];
	(void)sg_clock_rfc3339(at, sizeof(at), r->not_after);
	if (r->is_ca_root)
		sg_log(SG_LOG_ERROR, "the CA's root has expired: the certificates it issues no longer verify",
		       SG_F_STR("root", r->subject), SG_F_STR("not_after", at), SG_F_END);
	else
		sg_log(SG_LOG_WARN, "a root of the served bundle has expired; still served, remove it from the bundle",
		       SG_F_STR("root", r->subject), SG_F_STR("not_after", at), SG_F_END);
}

void signetd_root_expiry_tick(daemon *d, int64_t now)
{
	struct root_watch *w = &d->root_watch;
	bool due = signetd_root_rotation_due(d, now);
	if (due != w->rotation_due)
		log_rotation(d, due, now);
	w->rotation_due = due;
	for (size_t i = 0; i < w->n; i++) {
		if (w->expired_logged[i] || now < w->roots[i].not_after)
			continue;
		log_expired(&w->roots[i]);
		w->expired_logged[i] = true;
	}
}
