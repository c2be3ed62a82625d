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
/* The same pattern with 1..max bytes in all (a label may be as long as
 * the whole): sg_names_dns_subdomain is max SG_NAMES_SUBDOMAIN_MAX; SIZE_MAX
 * checks the pattern alone, for a caller that reports the length apart, as
 * apimachinery's error lists do. */
SG_API bool sg_names_dns_subdomain_max(const char *s, size_t n, size_t max);
/* The name part of a qualified name, and a non-empty label value:
 * 1..max bytes of [A-Za-z0-9._-], alphanumeric at both ends (max
 * SG_NAMES_LABEL_MAX; SIZE_MAX checks the pattern alone). s need not be
 * NUL-terminated. */
SG_API bool sg_names_label_name(const char *s, size_t n, size_t max);
/* A label value (NUL-terminated, non-empty): sg_names_label_name with
 * SG_NAMES_LABEL_MAX. (The empty value Kubernetes also allows is refused:
 * nothing here labels with one; a caller that accepts it tests for it.) */
SG_API bool sg_names_label_value(const char *s);
/* A qualified name (apimachinery's IsQualifiedName: label and annotation
 * keys): "[prefix/]name", the prefix a DNS subdomain, the name as
 * sg_names_label_name with SG_NAMES_LABEL_MAX; one '/' at most. s need not
 * be NUL-terminated. */
SG_API bool sg_names_qualified(const char *s, size_t n);
/* A uid (NUL-terminated): a UUID in practice; [A-Za-z0-9-]{1,63} is
 * accepted. */
SG_API bool sg_names_uid(const char *s);

#endif
