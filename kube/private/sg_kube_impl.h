/*
 * sg_kube_impl: what the files of kube/ share and nobody else sees (the
 * parsed configuration, the thread's last Status and small helpers). Not
 * installed, not public.
 */
#ifndef SG_KUBE_IMPL_H
#define SG_KUBE_IMPL_H

#include "sg_kube.h"
#include "sg_secret.h"

#include <stdint.h>

struct sg_kube_config {
	char *server;      /* "https://host:port", no trailing slash */
	char *ns;          /* never NULL once parsed */
	uint8_t *ca;       /* PEM bundle; NULL: the system roots */
	size_t ca_len;
	uint8_t *cert;     /* client certificate PEM, or NULL */
	size_t cert_len;
	sg_secret *key;    /* client key PEM, or NULL */
	sg_secret *token;  /* static bearer token, or NULL */
	char *token_file;  /* bearer token file re-read on change, or NULL */
};

/* Reads a whole regular file of at most max bytes into a fresh buffer (one
 * spare NUL byte after the data). SG_ENOTFOUND when missing. */
int sg_kube_read_file(const char *path, size_t max, uint8_t **out, size_t *len) SG_MUST_CHECK;
/* Reads a token file (at most SG_SECRET_MAX bytes, surrounding whitespace
 * dropped, must not be empty) into a secret; the scratch copy is wiped. */
int sg_kube_read_token(const char *path, sg_secret **out) SG_MUST_CHECK;

/* Records a Status (or only an HTTP code) as this thread's last status. */
void sg_kube_status_set(const sg_kube_status *st);
void sg_kube_status_reset(void);

/* The thread's last status (sg_kube_status.c), which sg_kube_last_status
 * returns; the REST client sets its code in place. */
extern _Thread_local sg_kube_status sg_kube_tl_status;
/* The reason phrase of an HTTP code, for a Status the server did not send
 * ("Error" for codes without one). */
const char *sg_kube_http_phrase(long code);
/* A POST to create (sg_kube_create's checks and request), prepared on one
 * of k's pooled easy handles but not performed: for a loop that performs
 * many at once (sg_kube_loop.c). sg_kube_xfer_handle is the CURL easy
 * handle to add to a multi handle; once libcurl says it is done (or it was
 * never added: pass CURLE_ABORTED_BY_CALLBACK), sg_kube_xfer_end gives what
 * sg_kube_create would return, leaves the same error detail and Status on
 * the calling thread, and frees x. */
typedef struct sg_kube_xfer sg_kube_xfer;
int sg_kube_xfer_create(sg_kube *k, const sg_kube_ref *ref, const json_t *body, sg_kube_xfer **out) SG_MUST_CHECK;
void *sg_kube_xfer_handle(sg_kube_xfer *x);
int sg_kube_xfer_end(sg_kube_xfer *x, int curl_code, json_t **out);

/* A failed answer's body is read as a Status up to this many bytes. */
#define ERRBODY_MAX (64u << 10)

#endif
