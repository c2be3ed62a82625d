/*
 * sg_kube_selector: Kubernetes label selectors (the string form of
 * apimachinery's labels.Parse), checked and matched locally.
 *
 * Why locally when the API server filters LISTs and WATCHes itself: a typo
 * in a flag should fail at start-up with the offset of the mistake, not as
 * a LIST answered 400 forever; and a controller that holds a selector in a
 * custom resource (a namespace selector of a trust bundle, of a policy)
 * matches the objects of an informer it shares with other selectors.
 *
 * Grammar: requirements separated by ',' (all must hold):
 *   key            the label exists          !key         it does not
 *   key=v, key==v  it exists and equals v    key!=v       absent or not v
 *   key in (a,b)   it exists and is a or b   key notin (a,b)  absent or neither
 *   key>n, key<n   it exists and, read as an integer (as Go's
 *                  strconv.ParseInt reads it), is greater / less; n is
 *                  digits only (it is also a label value) within int64
 * key is [prefix/]name (prefix a DNS subdomain, name at most 63 bytes of
 * [A-Za-z0-9-_.] with alphanumeric ends); a value is such a name or empty;
 * "in ()" is the set of the empty value, as apimachinery reads it.
 * Whitespace between tokens is ignored. At most SG_KUBE_SELECTOR_MAX bytes
 * and SG_KUBE_SELECTOR_REQS requirements, checked before anything is kept.
 *
 * A parsed selector is immutable: any number of threads may match with it.
 */
#ifndef SG_KUBE_SELECTOR_H
#define SG_KUBE_SELECTOR_H

#include "sg_error.h"

#include <jansson.h>
#include <stdbool.h>

#define SG_KUBE_SELECTOR_MAX 4096
#define SG_KUBE_SELECTOR_REQS 64     /* requirements */
#define SG_KUBE_SELECTOR_VALUES 256  /* values of one in/notin set */

typedef struct sg_kube_selector sg_kube_selector;

/* Parses s (NULL, "" or blanks: the selector that selects everything).
 * SG_EINVAL names the mistake and its byte offset; what names the selector
 * in that message ("namespace selector"; NULL: "label selector"). Caller
 * frees with sg_kube_selector_free. */
SG_API int sg_kube_selector_parse(sg_kube_selector **out, const char *s, const char *what) SG_MUST_CHECK;
SG_API void sg_kube_selector_free(sg_kube_selector *sel);

/* Whether the selector selects everything (no requirement). */
SG_API bool sg_kube_selector_everything(const sg_kube_selector *sel);

/* The selector as given, without leading and trailing blanks ("" for
 * everything); borrowed for the selector's life. This is what a LIST or
 * WATCH sends. */
SG_API const char *sg_kube_selector_string(const sg_kube_selector *sel);

/* Whether labels (a JSON object of string values, as metadata.labels;
 * NULL or not an object: no labels) satisfy every requirement. */
SG_API bool sg_kube_selector_matches(const sg_kube_selector *sel, const json_t *labels);

#endif
