/*
 * A client of Istio's CreateCertificate for node agents (sg_caclient.h).
 *
 * Design. A fetch is: read the token (projected tokens rotate, so every
 * call reads the file again), make a key and a CSR in software
 * (sg_softkey_csr, the signer's OpenSSL adapter), one blocking unary call
 * (grpc/), and sg_caclient_check on the answer, which treats it as hostile
 * bytes until every check has passed: a CA that is compromised, confused
 * or merely misconfigured must not get a certificate for another identity,
 * for another key or off another root into a workload's files.
 *
 * The channel. gRPC takes its roots when a channel is made, so a rotated
 * root needs a new channel. Each fetch stats the root file under the
 * client's lock; when its identity (device, inode, size, mtime) changed,
 * the file is read and checked again and a new channel replaces the
 * current one. Calls in flight keep the channel they started on: a holder
 * counts its users (the client's current pointer is one), and the last one
 * out frees the channel, so a rotation never pulls a channel from under a
 * call and never leaks the old one. A root file that no longer holds a
 * certificate fails the fetch (SG_EINVAL naming the file) rather than
 * quietly keeping the old root: the operator learns at once, and the next
 * fetch looks again.
 *
 * The same roots judge the answer: a holder carries the roots its channel
 * was made with, parsed once, so the intermediate an answer may name as
 * its root (istiod's per-signer mode) is checked against the roots that
 * authenticated the CA on that very call, not a newer file.
 *
 * Reconnects: gRPC backs off up to 120 s between attempts to reach a CA
 * that was down; a node agent that retries on its own schedule wants the
 * CA reached within seconds of its return, so the channel's backoff cap
 * is reconnect_backoff_max_ms (10 s by default).
 */
#include "sg_caclient.h"

#include "sg_file.h"
#include "sg_grpc.h"
#include "sg_guard.h"
#include "sg_istio.h"
#include "sg_secret.h"
#include "sg_softkey.h"
#include "sg_strbuf.h"
#include "sg_x509.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_TIMEOUT_MS 30000u
#define DEFAULT_BACKOFF_MS 10000u
#define DEFAULT_RSA_BITS 2048u
#define MAX_RSA_BITS 8192u    /* key generation time grows with the cube of the size */
#define MAX_CHAIN_ELEMENTS 16 /* leaf, intermediates, root: a deep PKI has 4 */
#define CLOCK_SKEW_S 300      /* a leaf may start up to 5 minutes in our future */
#define HOST_MAX 256

/* A channel, the roots it was made with and the number of its users. */
typedef struct chan_holder {
	sg_grpc_channel *ch;
	sg_x509_bundle *trust; /* NULL when insecure */
	unsigned refs;         /* under the client's lock */
} chan_holder;

/* What identifies one version of the root file. */
typedef struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
} file_id;

struct sg_caclient {
	char *address, *server_name, *root_file, *token_file, *cluster_id;
	bool impersonate, pkcs8, insecure;
	int64_t ttl;
	sg_caclient_key key_type;
	unsigned rsa_bits;
	uint64_t timeout_ms;
	unsigned backoff_ms;

	pthread_mutex_t mu;
	chan_holder *cur; /* NULL until the first fetch (connect lazily) or after a failed reload */
	char *root_pem;   /* the root text the next channel is made with */
	file_id root_id;

	atomic_uint_fast64_t calls, ok, failed, root_reloads;
};

/* ---- options --------------------------------------------------------------- */

static void holder_free(chan_holder *h);

static char *dup_opt(const char *s)
{
	return s && s[0] ? strdup(s) : NULL;
}

/* The host of "host:port", "[v6]:port" or "scheme:///host:port", as TLS
 * verifies it. */
static int address_host(const char *address, char *host, size_t cap)
{
	const char *a = address;
	const char *sep = strstr(a, ":///");
	if (sep)
		a = sep + 4;
	const char *end;
	if (a[0] == '[') {
		a++;
		end = strchr(a, ']');
		SG_ENSURE(end && end[1] == ':' && end[2], SG_EINVAL, "caclient: address %s is not [host]:port",
		          address);
	} else {
		end = strrchr(a, ':');
		SG_ENSURE(end && end[1], SG_EINVAL, "caclient: address %s is not host:port", address);
	}
	size_t n = (size_t)(end - a);
	SG_ENSURE(n > 0 && n < cap, SG_EINVAL, "caclient: address %s has no host or too long a one", address);
	memcpy(host, a, n);
	host[n] = '\0';
	return SG_OK;
}

static int file_stat(const char *path, file_id *out)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return sg_error_set(errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "caclient: root file %s: %s", path,
		                    strerror(errno));
	*out = (file_id){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
	return SG_OK;
}

static bool file_id_eq(const file_id *a, const file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
	       a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Reads the root file: bounded, and it must hold at least one certificate
 * (gRPC would otherwise take garbage and fail every handshake, later and
 * less clearly). */
static int root_read(const char *path, char **out)
{
	*out = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;
	SG_TRY(sg_file_read(path, SG_CACLIENT_FILE_MAX, &buf, &len));
	sg_x509_bundle *b = NULL;
	int rc = sg_x509_bundle_parse(&b, (const char *)buf, len);
	sg_x509_bundle_free(b);
	if (rc < 0) {
		free(buf);
		SG_BAIL(SG_EINVAL, "caclient: root file %s holds no usable PEM certificate", path);
	}
	*out = (char *)buf;
	return SG_OK;
}

/* 1..max bytes of visible ASCII: what a header value (and a URI SAN we
 * ask for) may carry without gRPC refusing it or a reader splitting it. */
static bool header_value_ok(const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return true;
}

static int check_options(const sg_caclient_options *o)
{
	SG_ENSURE(o, SG_EINVAL, "caclient: no options");
	SG_ENSURE(o->address && o->address[0], SG_EINVAL, "caclient: no address");
	SG_ENSURE(o->insecure || (o->root_ca_file && o->root_ca_file[0]), SG_EINVAL,
	          "caclient: no root_ca_file (required unless insecure)");
	SG_ENSURE(o->ttl_seconds >= 0, SG_EINVAL, "caclient: negative ttl_seconds");
	SG_ENSURE(o->key_type == SG_CACLIENT_KEY_EC_P256 || o->key_type == SG_CACLIENT_KEY_RSA, SG_EINVAL,
	          "caclient: unknown key_type %d", (int)o->key_type);
	SG_ENSURE(o->key_type != SG_CACLIENT_KEY_RSA || o->rsa_bits == 0 ||
	              (o->rsa_bits >= 2048 && o->rsa_bits <= MAX_RSA_BITS),
	          SG_EINVAL, "caclient: rsa_bits %u outside 2048..%u", o->rsa_bits, MAX_RSA_BITS);
	SG_ENSURE(o->timeout_ms <= 3600u * 1000u, SG_EINVAL, "caclient: timeout_ms above an hour");
	SG_ENSURE(o->reconnect_backoff_max_ms <= 3600u * 1000u, SG_EINVAL,
	          "caclient: reconnect_backoff_max_ms above an hour");
	SG_ENSURE(!o->cluster_id || header_value_ok(o->cluster_id, 255), SG_EINVAL,
	          "caclient: cluster_id is not printable ASCII of at most 255 bytes");
	return SG_OK;
}

int sg_caclient_new(sg_caclient **out, const sg_caclient_options *o)
{
	*out = NULL;
	SG_TRY(check_options(o));
	char host[HOST_MAX];
	SG_TRY(address_host(o->address, host, sizeof(host)));
	sg_caclient *c = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	c->address = strdup(o->address);
	c->server_name = strdup(o->server_name && o->server_name[0] ? o->server_name : host);
	c->root_file = dup_opt(o->root_ca_file);
	c->token_file = dup_opt(o->token_file);
	c->cluster_id = dup_opt(o->cluster_id);
	c->impersonate = o->impersonate;
	c->pkcs8 = o->pkcs8;
	c->insecure = o->insecure;
	c->ttl = o->ttl_seconds;
	c->key_type = o->key_type;
	c->rsa_bits = o->rsa_bits ? o->rsa_bits : DEFAULT_RSA_BITS;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
	c->backoff_ms = o->reconnect_backoff_max_ms ? (unsigned)o->reconnect_backoff_max_ms : DEFAULT_BACKOFF_MS;
	pthread_mutex_init(&c->mu, NULL);
	int rc = SG_OK;
	if (!c->address || !c->server_name || (o->root_ca_file && o->root_ca_file[0] && !c->root_file) ||
	    (o->token_file && o->token_file[0] && !c->token_file) ||
	    (o->cluster_id && o->cluster_id[0] && !c->cluster_id))
		rc = sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK && !c->insecure) {
		rc = file_stat(c->root_file, &c->root_id);
		if (rc == SG_OK)
			rc = root_read(c->root_file, &c->root_pem);
	}
	if (rc < 0) {
		sg_caclient_free(c);
		return rc;
	}
	*out = c;
	return SG_OK;
}

void sg_caclient_free(sg_caclient *c)
{
	if (!c)
		return;
	/* No call is in flight (the contract), so this is the last user. */
	holder_free(c->cur);
	pthread_mutex_destroy(&c->mu);
	free(c->address);
	free(c->server_name);
	free(c->root_file);
	free(c->token_file);
	free(c->cluster_id);
	free(c->root_pem);
	free(c);
}

void sg_caclient_stats_get(sg_caclient *c, sg_caclient_stats *out)
{
	out->calls = atomic_load(&c->calls);
	out->ok = atomic_load(&c->ok);
	out->failed = atomic_load(&c->failed);
	out->root_reloads = atomic_load(&c->root_reloads);
}

/* ---- the channel ------------------------------------------------------------ */

/* Drops one use of h; the last frees the channel. Call with the lock held
 * only when h is not the last (the client drops its own use under the lock
 * and frees after unlocking). */
static bool holder_drop(chan_holder *h)
{
	return --h->refs == 0;
}

static void holder_free(chan_holder *h)
{
	if (h) {
		sg_grpc_channel_free(h->ch);
		sg_x509_bundle_free(h->trust);
		free(h);
	}
}

static int holder_new(sg_caclient *c, chan_holder **out)
{
	chan_holder *h = calloc(1, sizeof(*h));
	SG_ENSURE(h, SG_EINTERNAL, "out of memory");
	sg_grpc_channel_options co = {
	    .target = c->address,
	    .root_pem = c->insecure ? NULL : c->root_pem,
	    .server_name = c->insecure ? NULL : c->server_name,
	    .reconnect_backoff_max_ms = c->backoff_ms,
	};
	int rc = c->insecure ? SG_OK : sg_x509_bundle_parse(&h->trust, c->root_pem, strlen(c->root_pem));
	if (rc == SG_OK)
		rc = sg_grpc_channel_new(&h->ch, &co);
	if (rc < 0) {
		holder_free(h);
		return rc;
	}
	h->refs = 1; /* the client's */
	*out = h;
	return SG_OK;
}

/* The channel for one call (a new use of the holder), made or remade when
 * the root file changed. */
static int channel_get(sg_caclient *c, chan_holder **out)
{
	*out = NULL;
	chan_holder *old = NULL;
	int rc = SG_OK;
	pthread_mutex_lock(&c->mu);
	if (!c->insecure) {
		file_id id;
		SG_TRY_GOTO(rc, file_stat(c->root_file, &id), unlock);
		if (!file_id_eq(&id, &c->root_id)) {
			char *pem = NULL;
			/* root_id stays the old one on failure, so the next fetch
			 * reads the file again. */
			SG_TRY_GOTO(rc, root_read(c->root_file, &pem), unlock);
			free(c->root_pem);
			c->root_pem = pem;
			c->root_id = id;
			atomic_fetch_add(&c->root_reloads, 1);
			if (c->cur && holder_drop(c->cur))
				old = c->cur; /* freed below, outside the lock */
			c->cur = NULL;
		}
	}
	if (!c->cur)
		SG_TRY_GOTO(rc, holder_new(c, &c->cur), unlock);
	c->cur->refs++;
	*out = c->cur;
unlock:
	pthread_mutex_unlock(&c->mu);
	holder_free(old);
	return rc;
}

/* Hands h back; retire (after UNAVAILABLE) also takes it out of use, so
 * the next fetch connects on a new channel. Why: a gRPC channel that has
 * failed to connect answers every call at once with its last error until
 * its own reconnect backoff lets it try again, and with the attempts it
 * makes then it could miss a CA that is back (seen: a restarted signetd
 * never reached in 25 s). The agent retries on its own schedule, with its
 * own backoff, so each retry gets a fresh connection attempt. */
static void channel_put(sg_caclient *c, chan_holder *h, bool retire)
{
	chan_holder *old = NULL;
	pthread_mutex_lock(&c->mu);
	if (retire && c->cur == h) {
		c->cur = NULL;
		if (holder_drop(h))
			old = h; /* cannot be: this call still holds a use */
	}
	bool last = holder_drop(h);
	pthread_mutex_unlock(&c->mu);
	if (last)
		holder_free(h);
	holder_free(old);
}

/* ---- one fetch --------------------------------------------------------------- */

static int check_response(const uint8_t *resp, size_t len, const char *identity, const char *key_pem,
                          const sg_x509_bundle *trust, int64_t now, sg_wlcert **out);

/* "Bearer <token>" from the token file, trailing whitespace dropped; NULL
 * when no token file is configured. The caller wipes and frees it. */
static int bearer_read(const char *path, char **out)
{
	*out = NULL;
	if (!path)
		return SG_OK;
	uint8_t *buf = NULL;
	size_t len = 0;
	SG_TRY(sg_file_read(path, SG_CACLIENT_FILE_MAX, &buf, &len));
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' || buf[len - 1] == '\t'))
		len--;
	int rc = SG_OK;
	if (len == 0)
		rc = sg_error_set(SG_ENOTFOUND, "caclient: token file %s is empty", path);
	/* A header value is visible ASCII; anything else would be refused by
	 * gRPC, or worse, split. */
	for (size_t i = 0; rc == SG_OK && i < len; i++)
		if (buf[i] < 0x21 || buf[i] > 0x7e)
			rc =
			    sg_error_set(SG_EINVAL, "caclient: token file %s holds a byte a header cannot carry", path);
	char *s = NULL;
	if (rc == SG_OK) {
		s = malloc(len + sizeof("Bearer "));
		if (!s)
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
	}
	if (s) {
		memcpy(s, "Bearer ", 7);
		memcpy(s + 7, buf, len);
		s[7 + len] = '\0';
	}
	sg_wipe(buf, len);
	free(buf);
	*out = s;
	return rc;
}

static void wipe_free(char *s)
{
	if (s) {
		sg_wipe(s, strlen(s));
		free(s);
	}
}

/* The status of a finished call as our error, with the status's name and
 * the CA's message (made printable: it is the peer's text). */
static int status_error(const sg_caclient *c, int status, char *msg)
{
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '?';
	int code;
	switch (status) {
	case SG_GRPC_UNAUTHENTICATED:
	case SG_GRPC_PERMISSION_DENIED:
		code = SG_EAUTH;
		break;
	case SG_GRPC_UNAVAILABLE:
	case SG_GRPC_RESOURCE_EXHAUSTED:
	case SG_GRPC_DEADLINE_EXCEEDED:
		code = SG_EBUSY;
		break;
	default:
		code = SG_EPROTO;
		break;
	}
	return sg_error_set(code, "caclient: CA %s answered %s: %s", c->address, sg_grpc_status_name(status),
	                    msg[0] ? msg : "(no message)");
}

static int do_fetch(sg_caclient *c, const char *identity, sg_wlcert **out)
{
	SG_ENSURE(identity && header_value_ok(identity, SG_WLCERTS_ID_MAX), SG_EINVAL,
	          "caclient: the identity is empty, too long or not printable");
	const char *uris[1] = {identity};
	sg_softkey_request kr = {
	    .type = c->key_type == SG_CACLIENT_KEY_RSA ? SG_SOFTKEY_RSA : SG_SOFTKEY_EC_P256,
	    .rsa_bits = c->rsa_bits,
	    .uris = uris,
	    .nuris = 1,
	};
	char *auth = NULL, *key = NULL, *csr = NULL;
	uint8_t *req = NULL, *resp = NULL;
	size_t req_len = 0, resp_len = 0;
	chan_holder *h = NULL;
	int rc;
	SG_TRY_GOTO(rc, bearer_read(c->token_file, &auth), done);
	SG_TRY_GOTO(rc, sg_softkey_csr(&kr, c->pkcs8, &key, &csr), done);
	SG_TRY_GOTO(rc,
	            sg_istio_request_encode(csr, strlen(csr), c->ttl, c->impersonate ? identity : NULL, &req, &req_len),
	            done);
	SG_TRY_GOTO(rc, channel_get(c, &h), done);

	sg_grpc_md md[2];
	size_t nmd = 0;
	if (auth)
		md[nmd++] = (sg_grpc_md){"authorization", auth};
	if (c->cluster_id)
		md[nmd++] = (sg_grpc_md){"clusterid", c->cluster_id};
	int status = SG_GRPC_UNKNOWN;
	char msg[256];
	rc = sg_grpc_unary(h->ch, SG_ISTIO_METHOD, md, nmd, req, req_len, c->timeout_ms * 1000000u, &resp, &resp_len,
	                   &status, msg, sizeof(msg));
	bool unavailable = rc == SG_OK && status == SG_GRPC_UNAVAILABLE;
	/* The token is needed no longer than the call. */
	wipe_free(auth);
	auth = NULL;
	if (rc == SG_OK && status != SG_GRPC_OK)
		rc = status_error(c, status, msg);
	else if (rc == SG_OK) /* with the roots this call's TLS trusted */
		rc = check_response(resp, resp_len, identity, key, h->trust, (int64_t)time(NULL), out);
	channel_put(c, h, unavailable);
done:
	wipe_free(auth);
	wipe_free(key);
	free(csr);
	free(req);
	free(resp);
	return rc;
}

int sg_caclient_fetch(sg_caclient *c, const char *identity, sg_wlcert **out)
{
	*out = NULL;
	atomic_fetch_add(&c->calls, 1);
	int rc = do_fetch(c, identity, out);
	atomic_fetch_add(rc == SG_OK ? &c->ok : &c->failed, 1);
	return rc;
}

int sg_caclient_fetch_fn(const char *identity, sg_wlcert **out, void *arg)
{
	return sg_caclient_fetch(arg, identity, out);
}

/* ---- the answer's checks ------------------------------------------------------ */

/* Everything the checks hold, freed at once. */
typedef struct answer {
	sg_istio_arena *arena;
	sg_istio_chain chain;
	sg_x509_bundle *certs[MAX_CHAIN_ELEMENTS]; /* one certificate each, but the last: the roots */
	sg_x509_bundle *path; /* the leaf and the intermediates, for the chain check */
	char *chain_pem, *root_pem;
} answer;

static void answer_clear(answer *a)
{
	for (size_t i = 0; i < MAX_CHAIN_ELEMENTS; i++)
		sg_x509_bundle_free(a->certs[i]);
	sg_x509_bundle_free(a->path);
	sg_istio_arena_free(a->arena);
	free(a->chain_pem);
	free(a->root_pem);
}

/* The certificates of elements first..end-1 re-encoded as PEM (each ends
 * in a newline) and joined: what was read, byte for byte as DER, without
 * the text around the blocks. */
static int join_pem(answer *a, size_t first, size_t end, char **out)
{
	*out = NULL;
	sg_strbuf sb = {0};
	int rc = SG_OK;
	for (size_t i = first; rc == SG_OK && i < end; i++)
		for (size_t j = 0; rc == SG_OK && j < sg_x509_bundle_count(a->certs[i]); j++) {
			char *pem = NULL;
			size_t n = 0;
			rc = sg_x509_pem(a->certs[i], j, &pem, &n);
			if (rc == SG_OK)
				sg_strbuf_add(&sb, pem, n);
			free(pem);
		}
	char *s = sg_strbuf_take(&sb); /* NULL (and freed) after a refused add */
	if (rc < 0) {
		free(s);
		return rc;
	}
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	*out = s;
	return SG_OK;
}

/* Certificate i of b alone, as the leaf of a chain check. */
static int single(const sg_x509_bundle *b, size_t i, sg_x509_bundle **out)
{
	char *pem = NULL;
	size_t n = 0;
	SG_TRY(sg_x509_pem(b, i, &pem, &n));
	int rc = sg_x509_bundle_parse(out, pem, n);
	free(pem);
	return rc;
}

/* The roots of the last element (sg_caclient.h): each a self-signed root,
 * or a CA certificate that chains to the configured roots (or is one of
 * them) at the time at. A self-signed root needs no more: the CA whose
 * TLS the configured roots authenticated is the authority on its roots,
 * as it is for istio-agent. */
static int check_roots(const sg_x509_bundle *roots, const sg_x509_bundle *trust, int64_t at)
{
	for (size_t i = 0; i < sg_x509_bundle_count(roots); i++) {
		if (sg_x509_self_signed(roots, i))
			continue;
		sg_x509_facts f;
		SG_ENSURE(sg_x509_get_facts(roots, i, &f) == SG_OK && f.is_ca, SG_EINVAL,
		          "CA answer: root %zu of the last element is neither a self-signed root nor a CA certificate",
		          i);
		SG_ENSURE(trust, SG_EINVAL,
		          "CA answer: root %zu of the last element is not a self-signed root, and no roots are "
		          "configured to chain it to",
		          i);
		sg_x509_bundle *one = NULL;
		SG_TRY(single(roots, i, &one));
		bool ok = sg_x509_holds(trust, one, 0) || sg_x509_chains_to_anchors_at(one, trust, at);
		sg_x509_bundle_free(one);
		SG_ENSURE(ok, SG_EINVAL,
		          "CA answer: root %zu of the last element is not a self-signed root and does not chain to the "
		          "configured roots",
		          i);
	}
	return SG_OK;
}

/* The checks, in the order of the header; each failure names the check
 * and never quotes the answer. */
static int check_answer(answer *a, const uint8_t *resp, size_t len, const char *identity, const char *key_pem,
                        const sg_x509_bundle *trust, int64_t now, sg_x509_facts *leaf)
{
	SG_TRY(sg_istio_arena_new(&a->arena));
	int rc = sg_istio_response_decode(a->arena, resp, len, &a->chain);
	if (rc == SG_EINTERNAL)
		return rc;
	SG_ENSURE(rc == SG_OK, SG_EINVAL, "CA answer: not an IstioCertificateResponse");
	size_t n = a->chain.n;
	SG_ENSURE(n >= 2, SG_EINVAL, "CA answer: %zu certificate chain element(s), want the leaf and at least the root",
	          n);
	SG_ENSURE(n <= MAX_CHAIN_ELEMENTS, SG_EINVAL, "CA answer: %zu certificate chain elements, at most %d", n,
	          MAX_CHAIN_ELEMENTS);
	for (size_t i = 0; i < n; i++) {
		rc = sg_x509_bundle_parse(&a->certs[i], a->chain.elems[i], a->chain.lens[i]);
		if (rc == SG_EINTERNAL)
			return rc;
		SG_ENSURE(rc == SG_OK, SG_EINVAL, "CA answer: element %zu is not a PEM certificate", i);
		size_t k = sg_x509_bundle_count(a->certs[i]);
		SG_ENSURE(i == n - 1 || k == 1, SG_EINVAL,
		          "CA answer: element %zu holds %zu certificates, want exactly one", i, k);
		SG_ENSURE(k <= SG_CACLIENT_ROOTS_MAX, SG_EINVAL,
		          "CA answer: the last element holds %zu roots, at most %d", k, SG_CACLIENT_ROOTS_MAX);
	}
	SG_ENSURE(sg_x509_names_are(a->certs[0], 0, NULL, NULL, 0, identity), SG_EINVAL,
	          "CA answer: the leaf's subjectAltName is not exactly the identity as its one URI");
	sg_x509_keyinfo ki;
	SG_ENSURE(sg_x509_key_check(a->certs[0], 0, key_pem, strlen(key_pem), &ki) == SG_OK, SG_EINVAL,
	          "CA answer: the leaf does not hold the key that was made");
	SG_ENSURE(sg_x509_get_facts(a->certs[0], 0, leaf) == SG_OK, SG_EINVAL,
	          "CA answer: the leaf's validity or serial does not decode");
	SG_ENSURE(leaf->serial[0] != '-', SG_EINVAL, "CA answer: the leaf's serial is negative");
	SG_ENSURE(leaf->not_before < leaf->not_after, SG_EINVAL, "CA answer: the leaf's validity is empty");
	SG_ENSURE(now < leaf->not_after, SG_EINVAL, "CA answer: the leaf has expired");
	/* A CA whose clock runs a little ahead of ours (and that does not
	 * backdate) issues a leaf that starts in our future: accepted within
	 * the skew, and the chain verified at the leaf's start then. */
	SG_ENSURE(leaf->not_before - CLOCK_SKEW_S <= now, SG_EINVAL, "CA answer: the leaf is not valid yet");
	int64_t at = leaf->not_before > now ? leaf->not_before : now;
	SG_TRY(check_roots(a->certs[n - 1], trust, at));
	SG_TRY(join_pem(a, 0, n - 1, &a->chain_pem));
	SG_TRY(join_pem(a, n - 1, n, &a->root_pem));
	rc = sg_x509_bundle_parse(&a->path, a->chain_pem, strlen(a->chain_pem));
	if (rc < 0)
		return rc == SG_EINTERNAL ? rc : sg_error_set(SG_EINVAL, "CA answer: the chain does not re-read");
	/* Any one root will do: during an overlap the leaf chains to the new
	 * root or the old, and each of them was checked above. */
	SG_ENSURE(sg_x509_chains_to_anchors_at(a->path, a->certs[n - 1], at), SG_EINVAL,
	          "CA answer: the chain does not verify up to a root of the last element");
	return SG_OK;
}

static int check_response(const uint8_t *resp, size_t len, const char *identity, const char *key_pem,
                          const sg_x509_bundle *trust, int64_t now, sg_wlcert **out)
{
	*out = NULL;
	SG_ENSURE(identity && identity[0] && key_pem && key_pem[0], SG_EINVAL, "CA answer: no identity or no key");
	SG_ENSURE(resp || len == 0, SG_EINVAL, "CA answer: no bytes");
	answer a = {0};
	sg_x509_facts leaf;
	int rc = check_answer(&a, resp ? resp : (const uint8_t *)"", len, identity, key_pem, trust, now, &leaf);
	if (rc == SG_OK) {
		char *key = strdup(key_pem);
		if (!key)
			rc = sg_error_set(SG_EINTERNAL, "out of memory");
		else /* sg_wlcert_new takes the three over, also on failure */
			rc = sg_wlcert_new(out, key, SG_MOVE(a.chain_pem), SG_MOVE(a.root_pem), leaf.not_before,
			                   leaf.not_after, leaf.serial);
	}
	answer_clear(&a);
	return rc;
}

int sg_caclient_check(const uint8_t *resp, size_t len, const char *identity, const char *key_pem, const char *trust_pem,
                      size_t trust_len, int64_t now, sg_wlcert **out)
{
	*out = NULL;
	sg_x509_bundle *trust = NULL;
	if (trust_pem) {
		int rc = sg_x509_bundle_parse(&trust, trust_pem, trust_len);
		if (rc == SG_EINTERNAL)
			return rc;
		SG_ENSURE(rc == SG_OK, SG_EINVAL, "caclient: the configured roots hold no usable PEM certificate");
	}
	int rc = check_response(resp, len, identity, key_pem, trust, now, out);
	sg_x509_bundle_free(trust);
	return rc;
}
