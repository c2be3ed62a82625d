/*
 * sg_names: the Kubernetes naming rules (apimachinery's validation
 * package), in the lowest layer so that every module that checks a name
 * coming from a token, a TokenReview answer or an object uses the same
 * definition: a namespace or uid accepted in one place is accepted in all
 * of them. Nothing here needs the Kubernetes client; the JWT verifier,
 * which does not talk to an API server, checks its claims with these too.
 *
 * Pure functions over caller-owned bytes; nothing allocates or fails
 * beyond answering false.
 */
#ifndef SG_NAMES_H
#define SG_NAMES_H

#include "sg_error.h"

#include <stdbool.h>
#include <stddef.h>

#define SG_NAMES_LABEL_MAX 63      /* a DNS-1123 label (namespaces) */
#define SG_NAMES_SUBDOMAIN_MAX 253 /* a DNS-1123 subdomain (object names) */
#define SG_NAMES_UID_MAX 63

/* A DNS-1123 label: [a-z0-9-], alphanumeric at both ends, 1..max bytes of
 * s (namespaces: max SG_NAMES_LABEL_MAX). s need not be NUL-terminated. */
SG_API bool sg_names_dns_label(const char *s, size_t n, size_t max);
/* A DNS-1123 subdomain: such labels joined by '.', 1..253 bytes (object
 * names: service accounts, pods, ConfigMaps). */
SG_API bool sg_names_dns_subdomain(const char *s, size_t n);
/* A label value (NUL-terminated, non-empty): 1..63 of [A-Za-z0-9._-],
 * alphanumeric at both ends. (The empty value Kubernetes also allows is
 * refused: nothing here labels with one.) */
SG_API bool sg_names_label_value(const char *s);
/* A uid (NUL-terminated): a UUID in practice; [A-Za-z0-9-]{1,63} is
 * accepted. */
SG_API bool sg_names_uid(const char *s);

#endif
