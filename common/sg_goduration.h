/*
 * sg_goduration: Go's time.Duration text ("2160h0m0s", "1h30m", "1.5s"),
 * the form Kubernetes APIs use for durations (cert-manager's
 * spec.duration, approver-policy's maxDuration, issuers' bounds), read
 * into whole seconds and written back as Go's Duration.String() writes it.
 *
 * Pure functions over caller-owned memory: no allocation, no state.
 */
#ifndef SG_GODURATION_H
#define SG_GODURATION_H

#include "sg_error.h"

#include <stddef.h>
#include <stdint.h>

/* Parses a Go time.Duration string into whole seconds (fractions of a
 * second are dropped). Accepts what Go's time.ParseDuration accepts for a
 * duration >= 0: "0", or a sequence of decimal numbers, each with an
 * optional fraction and a unit ns, us, µs, ms, s, m, h, with an optional
 * leading '+'. Refuses negatives, values above about 292 years (Go's
 * int64 nanoseconds), strings longer than 64 bytes, unknown units and
 * anything else with SG_EINVAL. */
SG_API int sg_goduration_parse(const char *s, int64_t *seconds) SG_MUST_CHECK;

/* Writes seconds as Go prints a time.Duration ("2160h0m0s", "10m0s",
 * "0s"; 0 or less is "0s") into out (cap >= 32 is always enough). */
SG_API void sg_goduration_format(int64_t seconds, char *out, size_t cap);

#endif
