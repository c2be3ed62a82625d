/*
 * sg_kube_yaml: YAML (and so JSON) documents into jansson trees, the
 * Kubernetes layer's libyaml adapter. Its callers: the kubeconfig reader
 * (kube/sg_kube_config.c, every scalar a string, as client-go's types want)
 * and `signetctl policy check` (a manifest as kubectl would apply it:
 * plain scalars resolved to null, booleans and numbers).
 *
 * A target of its own (sg_kube_yaml), not a file of sg_kube, so that a
 * program can read manifests without linking the Kubernetes client and
 * libcurl.
 *
 * Hostile input: the text, the nesting depth and the number of nodes
 * visited are bounded by the caller's options (aliases are followed each
 * time they are used, so a "billion laughs" document runs out of visits,
 * not memory); duplicate keys are refused.
 */
#ifndef SG_KUBE_YAML_H
#define SG_KUBE_YAML_H

#include "sg_error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sg_kube_yaml_options {
	const char *what;   /* names the document in error details ("kubeconfig", a path) */
	size_t max_bytes;   /* larger text is refused */
	unsigned max_depth; /* nesting of sequences and mappings (the root is 0) */
	size_t max_nodes;   /* nodes visited, an alias's target each time it is used */
	/* false: every scalar is a string (kubeconfig). true: as kubectl
	 * reads a manifest (sigs.k8s.io/yaml, go-yaml v2's resolution of plain
	 * scalars): null (~, null, empty), booleans (true/false, yes/no, on/off,
	 * y/n, in their three cases), integers (decimal, 0x, 0o, 0b, leading-0
	 * octal, '_' ignored) and floats become JSON's; quoted scalars stay
	 * strings. What JSON cannot hold (.inf, .nan, integers beyond int64),
	 * explicit tags (a plain value that begins with '!' is one) and merge
	 * keys (<<) are refused rather than guessed at. */
	bool typed;
	bool single; /* a second document in the stream is an error */
} sg_kube_yaml_options;

/* Parses data (len bytes, YAML 1.1 as libyaml reads it; JSON is YAML) into
 * *out, whose root must be a mapping. SG_EINVAL with a detail that begins
 * with o->what and names the line where it can. Caller owns *out
 * (json_decref). */
SG_API int sg_kube_yaml_to_json(json_t **out, const void *data, size_t len,
                                const sg_kube_yaml_options *o) SG_MUST_CHECK;

#endif
