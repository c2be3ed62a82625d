/*
 * sg_kube: the Kubernetes REST client over libcurl, with jansson documents.
 *
 * A call is: check and escape the resource reference into a URL (bounded,
 * no caller byte reaches the URL unescaped), wait for the rate limiter,
 * borrow an easy handle from the pool (a handle keeps its connection and
 * TLS session, so a busy client reuses connections; HTTP/2 is negotiated by
 * ALPN when the server offers it), perform, and turn the answer into either
 * a document or an error. Failed answers carry a Status object
 * (k8s.io/apimachinery/pkg/apis/meta/v1 Status): its reason and message go
 * into the error detail and into the thread's sg_kube_status, so callers
 * can tell 409 Conflict from AlreadyExists without parsing text.
 *
 * TLS: the peer is always verified (host name and chain) against the
 * cluster CA when the configuration has one, and then against it alone;
 * otherwise against the system roots. Client certificates and keys go to
 * curl as in-memory blobs that we keep (CURL_BLOB_NOCOPY) so that curl
 * holds no copy of the key of its own.
 *
 * The bearer token: static, or read from a file re-read whenever the
 * file's identity (inode, size, mtime) changes, looked at at most once a
 * second (projected service-account tokens rotate). The header line we
 * build for curl is wiped after each call.
 *
 * Watches share this file because they share the handle pool, the URL
 * builder and the authentication; the stream parser is sg_kube_watch.c.
 * The thread's last Status (and the Status object's parser) is
 * sg_kube_status.c, and the rate limiter sg_kube_ratelimit.c: both are
 * below this file and the watch parser, which call them.
 */
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_kube_impl.h"
#include "sg_log.h"
#include "sg_strbuf.h"

#include <curl/curl.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define POOL_IDLE_DEFAULT 8
#define RETRY_AFTER_MAX 86400 /* a day: more is not a wait anyone means */
#define FIELD_MANAGER_MAX 128
#define EVENT_MESSAGE_MAX 1024
#define WATCH_TIMEOUT_DEFAULT 290
#define WATCH_SILENCE_GRACE 30

struct sg_kube {
	sg_kube_config *cfg;
	sg_kube_options opt;
	char user_agent[128];
	sg_kube_ratelimit *rl;

	pthread_mutex_t pool_mu;
	CURL **idle; /* opt.idle_handles slots */
	size_t n_idle;

	pthread_mutex_t token_mu;
	sg_secret *token;     /* the current token from token_file */
	struct stat token_id; /* its identity when read */
	uint64_t token_checked_ns;
};

/* ---- small helpers ---- */

const char *sg_kube_meta_str(const json_t *obj, const char *field)
{
	json_t *v = json_object_get(json_object_get(obj, "metadata"), field);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static void wipe_string(json_t *v)
{
	if (json_is_string(v)) /* jansson's own buffer, ours to clear before the decref */
		sg_wipe((char *)json_string_value(v), json_string_length(v));
}

void sg_kube_secret_wipe(json_t *obj)
{
	/* The items of a LIST carry no kind or apiVersion (only watch events
	 * and single objects do), and an informer keeps them so: only an
	 * object that names another kind is left alone. */
	json_t *kind = json_object_get(obj, "kind"), *api = json_object_get(obj, "apiVersion");
	if (!json_is_object(obj) ||
	    (kind && (!json_is_string(kind) || strcmp(json_string_value(kind), "Secret") != 0)) ||
	    (api && (!json_is_string(api) || strcmp(json_string_value(api), "v1") != 0)))
		return;
	static const char *const maps[] = {"data", "stringData"};
	for (size_t m = 0; m < sizeof(maps) / sizeof(maps[0]); m++) {
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(obj, maps[m]), k, v) wipe_string(v);
	}
	/* kubectl apply's record of the object repeats its data. */
	wipe_string(json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"),
	                            "kubectl.kubernetes.io/last-applied-configuration"));
}

static void wiping_free(void *p)
{
	if (!p)
		return;
	sg_wipe(p, malloc_usable_size(p));
	free(p);
}

void sg_kube_json_wipe_frees(void)
{
	json_set_alloc_funcs(malloc, wiping_free);
}

void sg_kube_secret_release(json_t **obj)
{
	if (!*obj)
		return;
	sg_kube_secret_wipe(*obj);
	json_decref(*obj);
	*obj = NULL;
}

void sg_kube_microtime_now(char *out, size_t cap)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char base[32];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, cap, "%s.%06ldZ", base, ts.tv_nsec / 1000);
}

static void rfc3339_now(char *out, size_t cap)
{
	(void)sg_clock_rfc3339(out, cap, (int64_t)time(NULL));
}

/* ---- URL building ---- */

struct url {
	char s[SG_KUBE_URL_MAX];
	size_t n;
	bool overflow;
};

static void url_put(struct url *u, const char *s, size_t n)
{
	if (u->overflow || n >= sizeof(u->s) - u->n) {
		u->overflow = true;
		return;
	}
	memcpy(u->s + u->n, s, n);
	u->n += n;
	u->s[u->n] = 0;
}

static void url_str(struct url *u, const char *s)
{
	url_put(u, s, strlen(s));
}

/* RFC 3986 §2.3 unreserved bytes pass; everything else is %XX. */
static void url_escape(struct url *u, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~') {
			url_put(u, (const char *)&c, 1);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};
			url_put(u, e, 3);
		}
	}
}

static void url_param(struct url *u, const char *k, const char *v)
{
	url_str(u, strchr(u->s, '?') ? "&" : "?");
	url_str(u, k);
	url_str(u, "=");
	url_escape(u, v);
}

/* group/version/resource/subresource: lower-case DNS-ish tokens. */
static int check_token(const char *what, const char *s, bool required)
{
	if (!s || !*s) {
		SG_ENSURE(!required, SG_EINVAL, "kube: resource %s is missing", what);
		return SG_OK;
	}
	size_t n = strlen(s);
	SG_ENSURE(n <= SG_KUBE_NAME_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n, SG_EINVAL,
	          "kube: resource %s is not a lower-case token", what);
	return SG_OK;
}

/* Names and namespaces: printable, no '/' or '%', not "." or "..". */
static int check_name(const char *what, const char *s)
{
	if (!s)
		return SG_OK;
	size_t n = strlen(s);
	SG_ENSURE(n > 0 && n <= SG_KUBE_NAME_MAX, SG_EINVAL, "kube: %s is empty or longer than %d bytes", what,
	          SG_KUBE_NAME_MAX);
	SG_ENSURE(strcmp(s, ".") != 0 && strcmp(s, "..") != 0, SG_EINVAL, "kube: %s may not be \".\" or \"..\"", what);
	for (size_t i = 0; i < n; i++)
		SG_ENSURE(s[i] > 0x20 && s[i] < 0x7f && s[i] != '/' && s[i] != '%', SG_EINVAL,
		          "kube: %s holds a forbidden byte", what);
	return SG_OK;
}

static int build_url(const sg_kube *k, const sg_kube_ref *r, struct url *u)
{
	SG_ENSURE(r, SG_EINVAL, "kube: no resource");
	SG_TRY(check_token("group", r->group, false));
	SG_TRY(check_token("version", r->version, true));
	SG_TRY(check_token("resource", r->resource, true));
	SG_TRY(check_token("subresource", r->subresource, false));
	SG_TRY(check_name("namespace", r->ns));
	SG_TRY(check_name("name", r->name));
	SG_ENSURE(!r->subresource || r->name, SG_EINVAL, "kube: a subresource needs a name");
	u->n = 0;
	u->s[0] = 0;
	u->overflow = false;
	url_str(u, k->cfg->server);
	if (r->group && *r->group) {
		url_str(u, "/apis/");
		url_str(u, r->group);
		url_str(u, "/");
	} else {
		url_str(u, "/api/");
	}
	url_str(u, r->version);
	if (r->ns) {
		url_str(u, "/namespaces/");
		url_escape(u, r->ns);
	}
	url_str(u, "/");
	url_str(u, r->resource);
	if (r->name) {
		url_str(u, "/");
		url_escape(u, r->name);
	}
	if (r->subresource && *r->subresource) {
		url_str(u, "/");
		url_str(u, r->subresource);
	}
	SG_ENSURE(!u->overflow, SG_EINVAL, "kube: URL longer than %d bytes", SG_KUBE_URL_MAX);
	return SG_OK;
}

/* "configmaps default/x", "leases/status x", "configmaps in default". For
 * messages; the parts were checked by build_url (printable). */
static void describe(const sg_kube_ref *r, char *out, size_t cap)
{
	const char *sub = r->subresource && *r->subresource ? r->subresource : NULL;
	if (r->name)
		snprintf(out, cap, "%.64s%s%.32s %.64s%s%.128s", r->resource, sub ? "/" : "", sub ? sub : "",
		         r->ns ? r->ns : "", r->ns ? "/" : "", r->name);
	else
		snprintf(out, cap, "%.64s%s%.64s", r->resource, r->ns ? " in " : "", r->ns ? r->ns : "");
}

/* ---- the handle pool ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static CURL *pool_get(sg_kube *k)
{
	CURL *h = NULL;
	pthread_mutex_lock(&k->pool_mu);
	if (k->n_idle)
		h = k->idle[--k->n_idle];
	pthread_mutex_unlock(&k->pool_mu);
	if (h)
		curl_easy_reset(h); /* options only: the connection and TLS session stay */
	else
		h = curl_easy_init();
	return h;
}

static void pool_put(sg_kube *k, CURL *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&k->pool_mu);
	if (k->n_idle < k->opt.idle_handles) {
		k->idle[k->n_idle++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&k->pool_mu);
	curl_easy_cleanup(h);
}

/* ---- authentication ---- */

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Appends "Authorization: Bearer <token>" to *hdrs when there is a token.
 * The slist node is wiped by free_headers. */
static int add_auth(sg_kube *k, struct curl_slist **hdrs)
{
	const sg_kube_config *c = k->cfg;
	if (!c->token && !c->token_file)
		return SG_OK;
	int rc = SG_OK;
	pthread_mutex_lock(&k->token_mu);
	if (c->token_file) {
		uint64_t now = sg_now_ns();
		if (!k->token || now - k->token_checked_ns >= 1000000000u) {
			k->token_checked_ns = now;
			struct stat st;
			if (stat(c->token_file, &st) == 0 && (!k->token || !same_file(&st, &k->token_id))) {
				sg_secret *fresh = NULL;
				if (sg_kube_read_token(c->token_file, &fresh) == SG_OK) {
					sg_secret_free(k->token);
					k->token = fresh;
					k->token_id = st;
				} else if (!k->token) {
					rc = SG_EAUTH;
				}
				/* else: keep the old token; the file may be mid-rotation */
			}
		}
	}
	const sg_secret *tok = c->token ? c->token : k->token;
	if (rc == SG_OK && !tok)
		rc = SG_EAUTH;
	if (rc == SG_OK) {
		static const char prefix[] = "Authorization: Bearer ";
		size_t n = sizeof(prefix) + sg_secret_len(tok);
		char *line = malloc(n);
		if (!line) {
			rc = SG_EINTERNAL;
		} else {
			memcpy(line, prefix, sizeof(prefix) - 1);
			memcpy(line + sizeof(prefix) - 1, sg_secret_data(tok), sg_secret_len(tok) + 1);
			struct curl_slist *l = curl_slist_append(*hdrs, line);
			sg_wipe(line, n);
			free(line);
			if (l)
				*hdrs = l;
			else
				rc = SG_EINTERNAL;
		}
	}
	pthread_mutex_unlock(&k->token_mu);
	if (rc == SG_EAUTH)
		return sg_error_set(SG_EAUTH, "kube: cannot read the token file %s", c->token_file);
	SG_ENSURE(rc == SG_OK, SG_EINTERNAL, "kube: out of memory");
	return SG_OK;
}

static void free_headers(struct curl_slist *h)
{
	for (struct curl_slist *p = h; p; p = p->next)
		sg_wipe(p->data, strlen(p->data));
	curl_slist_free_all(h);
}

static void free_headersp(struct curl_slist **h)
{
	free_headers(*h);
}

/* ---- performing a request ---- */

/* A response body: common/sg_strbuf bounded by the caller's max (overflow
 * tells a body too large from memory running out). A chunk that does not
 * fit is refused whole and the builder stays usable, so an error body can
 * drop what does not fit and keep going. */
#define RBUF_FIRST 4096

static size_t write_body(char *data, size_t size, size_t nmemb, void *arg)
{
	return sg_strbuf_add(arg, data, size * nmemb) ? size * nmemb : 0;
}

/* Options common to every request. The caller adds method and body.
 * accept NULL is "application/json". */
static int setup(sg_kube *k, CURL *h, const char *url, struct curl_slist **hdrs, const char *ctype, const char *accept,
                 char *errbuf)
{
	const sg_kube_config *c = k->cfg;
	SG_TRY(add_auth(k, hdrs));
	char accept_line[96];
	snprintf(accept_line, sizeof(accept_line), "Accept: %s", accept ? accept : "application/json");
	*hdrs = curl_slist_append(*hdrs, accept_line);
	if (*hdrs && ctype) {
		char line[96];
		snprintf(line, sizeof(line), "Content-Type: %s", ctype);
		*hdrs = curl_slist_append(*hdrs, line);
	}
	if (*hdrs)
		*hdrs = curl_slist_append(*hdrs, "Expect:");
	SG_ENSURE(*hdrs, SG_EINTERNAL, "kube: out of memory");
	int bad = 0;
	bad |= curl_easy_setopt(h, CURLOPT_URL, url);
	bad |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
	bad |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
	bad |= curl_easy_setopt(h, CURLOPT_USERAGENT, k->user_agent);
	bad |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	bad |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	bad |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, k->opt.connect_timeout_ms);
	bad |= curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
	                        k->opt.http1 ? (long)CURL_HTTP_VERSION_1_1 : (long)CURL_HTTP_VERSION_2TLS);
	bad |= curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	if (c->ca) {
		struct curl_blob ca = {c->ca, c->ca_len, CURL_BLOB_NOCOPY};
		bad |= curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
		/* The cluster CA alone: not the system roots as well. */
		bad |= curl_easy_setopt(h, CURLOPT_CAINFO, NULL);
		bad |= curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
	}
	if (c->cert) {
		struct curl_blob cert = {c->cert, c->cert_len, CURL_BLOB_NOCOPY};
		struct curl_blob key = {(void *)sg_secret_data(c->key), sg_secret_len(c->key), CURL_BLOB_NOCOPY};
		bad |= curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
		bad |= curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
		bad |= curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
		bad |= curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	}
	SG_ENSURE(!bad, SG_EINTERNAL, "kube: libcurl refused an option (built without TLS or HTTP/2?)");
	return SG_OK;
}

static int curl_error(CURLcode cc, const char *method, const char *what, const char *errbuf)
{
	char why[CURL_ERROR_SIZE];
	const char *e = errbuf && *errbuf ? errbuf : curl_easy_strerror(cc);
	sg_log_printable(why, sizeof(why), e, strlen(e));
	int code;
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
		code = SG_ETIMEOUT;
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		code = SG_EAUTH;
		break;
	case CURLE_OUT_OF_MEMORY:
		code = SG_EINTERNAL;
		break;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		code = SG_EINVAL;
		break;
	default:
		code = SG_EBUSY; /* connect, send, receive, TLS handshake, HTTP/2 framing: retry */
	}
	return sg_error_set(code, "kube: %s %s: %s", method, what, why);
}

/* A non-2xx answer: the Status into the thread's record and the detail.
 * retry_after is the Retry-After header's delay in seconds (0: none). */
static int http_error(long http, long retry_after, const char *body, size_t len, const char *method, const char *what)
{
	sg_kube_status st;
	if (!body || sg_kube_status_parse(&st, body, len) != SG_OK)
		memset(&st, 0, sizeof(st));
	st.code = http; /* the HTTP code rules over a Status that disagrees */
	if (retry_after > 0) /* and the header over details.retryAfterSeconds (APF's 429 has no Status) */
		st.retry_after = retry_after < RETRY_AFTER_MAX ? retry_after : RETRY_AFTER_MAX;
	if (!st.reason[0])
		snprintf(st.reason, sizeof(st.reason), "%s", sg_kube_http_phrase(http));
	sg_kube_status_set(&st);
	int code = sg_kube_error_of_http(http);
	if (code == SG_OK)
		code = SG_EPROTO;
	if (st.message[0])
		return sg_error_set(code, "kube: %s %s: %ld %s: %s", method, what, http, st.reason, st.message);
	return sg_error_set(code, "kube: %s %s: %ld %s", method, what, http, st.reason);
}

/* Request and response bodies are wiped before they are freed: a
 * TokenReview carries a workload's bearer token both ways, and a Secret's
 * GET, LIST or watch its data. Response buffers are sg_strbufs with wipe
 * set, which also clears each block a growth leaves behind. */

static void payload_free(char **p)
{
	if (*p) {
		sg_wipe(*p, strlen(*p));
		free(*p);
	}
}

/* One request on a pooled easy handle: prepared, performed (here or by a
 * loop, sg_kube_loop.c), finished into an answer or an error, released. */
struct sg_kube_xfer {
	sg_kube *k;
	CURL *h;
	struct curl_slist *hdrs;
	sg_strbuf rb;
	char *payload;
	const char *method;
	char what[320];
	char errbuf[CURL_ERROR_SIZE];
};

static void xfer_release(struct sg_kube_xfer *x)
{
	pool_put(x->k, x->h);
	x->h = NULL;
	free_headersp(&x->hdrs);
	sg_strbuf_free(&x->rb);
	payload_free(&x->payload);
}

/* Everything up to the perform; on failure x holds nothing. body may be
 * NULL. */
static int xfer_prepare(struct sg_kube_xfer *x, sg_kube *k, const char *method, const sg_kube_ref *ref, struct url *u,
                        const char *ctype, const json_t *body)
{
	*x = (struct sg_kube_xfer){
	    .k = k, .method = method, .rb = {.max = SG_KUBE_RESPONSE_MAX, .first = RBUF_FIRST, .wipe = true}};
	sg_kube_status_reset();
	describe(ref, x->what, sizeof(x->what));
	SG_ENSURE(!u->overflow, SG_EINVAL, "kube: %s %s: URL longer than %d bytes", method, x->what, SG_KUBE_URL_MAX);
	if (body) {
		x->payload = json_dumps(body, JSON_COMPACT);
		SG_ENSURE(x->payload, SG_EINVAL, "kube: %s %s: the body cannot be encoded", method, x->what);
	}
	sg_kube_ratelimit_wait(k->rl);
	x->h = pool_get(k);
	int rc = x->h ? setup(k, x->h, u->s, &x->hdrs, ctype, NULL, x->errbuf)
	              : sg_error_set(SG_EINTERNAL, "kube: out of memory");
	if (rc < 0) {
		xfer_release(x);
		return rc;
	}
	CURL *h = x->h;
	int bad = 0;
	bad |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, k->opt.request_timeout_ms);
	bad |= curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
	bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, &x->rb);
	if (x->payload) {
		bad |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->payload);
		bad |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(x->payload));
	}
	if (strcmp(method, "GET") == 0)
		bad |= curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	else
		bad |= curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (bad) {
		xfer_release(x);
		SG_BAIL(SG_EINTERNAL, "kube: libcurl refused an option");
	}
	return SG_OK;
}

/* The transfer ended with cc: the answer (out may be NULL), or the error
 * and this thread's Status. */
static int xfer_finish(struct sg_kube_xfer *x, CURLcode cc, json_t **out)
{
	if (out)
		*out = NULL;
	sg_kube_status_reset();
	long http = 0;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &http);
	if (cc == CURLE_WRITE_ERROR && x->rb.overflow)
		SG_BAIL(SG_EPROTO, "kube: %s %s: response larger than %u bytes", x->method, x->what,
		        SG_KUBE_RESPONSE_MAX);
	if (cc != CURLE_OK)
		return curl_error(cc, x->method, x->what, x->errbuf);
	if (http < 200 || http > 299) {
		curl_off_t ra = 0; /* delta-seconds or an HTTP-date, as curl reads it */
		if (curl_easy_getinfo(x->h, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK || ra < 0)
			ra = 0;
		return http_error(http, ra > RETRY_AFTER_MAX ? RETRY_AFTER_MAX : (long)ra, x->rb.p, x->rb.len, x->method,
		                  x->what);
	}
	sg_kube_tl_status.code = http;
	if (out) {
		json_error_t jerr;
		json_t *j = x->rb.len ? json_loadb(x->rb.p, x->rb.len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
		if (!json_is_object(j)) {
			json_decref(j);
			SG_BAIL(SG_EPROTO, "kube: %s %s: the answer is not a JSON object", x->method, x->what);
		}
		*out = j;
	}
	return SG_OK;
}

/* One request/response. body may be NULL; out may be NULL. */
static int call(sg_kube *k, const char *method, const sg_kube_ref *ref, struct url *u, const char *ctype,
                const json_t *body, json_t **out)
{
	if (out)
		*out = NULL;
	struct sg_kube_xfer x;
	SG_TRY(xfer_prepare(&x, k, method, ref, u, ctype, body));
	int rc = xfer_finish(&x, curl_easy_perform(x.h), out);
	xfer_release(&x);
	return rc;
}

static int create_url(sg_kube *k, const sg_kube_ref *ref, const json_t *body, struct url *u)
{
	SG_TRY(build_url(k, ref, u));
	/* A name only with a subresource: POST to serviceaccounts/<name>/token
	 * (TokenRequest) or pods/<name>/eviction creates something under an
	 * existing object. A new object's own name is in its body. */
	SG_ENSURE(!ref->name || (ref->subresource && *ref->subresource), SG_EINVAL,
	          "kube: create takes no name (it is in the body) unless it posts to a subresource");
	SG_ENSURE(json_is_object(body), SG_EINVAL, "kube: create needs an object");
	return SG_OK;
}

/* ---- transfers for a loop (sg_kube_impl.h) ---- */

int sg_kube_xfer_create(sg_kube *k, const sg_kube_ref *ref, const json_t *body, sg_kube_xfer **out)
{
	*out = NULL;
	struct url u;
	SG_TRY(create_url(k, ref, body, &u));
	struct sg_kube_xfer *x = malloc(sizeof(*x));
	SG_ENSURE(x, SG_EINTERNAL, "kube: out of memory");
	int rc = xfer_prepare(x, k, "POST", ref, &u, "application/json", body);
	/* Many at once on one connection: wait for HTTP/2 to multiplex
	 * rather than open a connection per transfer while the first is
	 * still being set up. */
	if (rc == SG_OK && curl_easy_setopt(x->h, CURLOPT_PIPEWAIT, 1L) != CURLE_OK) {
		xfer_release(x);
		rc = sg_error_set(SG_EINTERNAL, "kube: libcurl refused an option");
	}
	if (rc < 0) {
		free(x);
		return rc;
	}
	*out = x;
	return SG_OK;
}

void *sg_kube_xfer_handle(sg_kube_xfer *x)
{
	return x->h;
}

int sg_kube_xfer_end(sg_kube_xfer *x, int curl_code, json_t **out)
{
	int rc = xfer_finish(x, (CURLcode)curl_code, out);
	xfer_release(x);
	free(x);
	return rc;
}

/* ---- the verbs ---- */

int sg_kube_get(sg_kube *k, const sg_kube_ref *ref, json_t **out)
{
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: get needs a name");
	return call(k, "GET", ref, &u, NULL, NULL, out);
}

static void list_params(struct url *u, const sg_kube_list_opts *o)
{
	if (!o)
		return;
	if (o->label_selector && *o->label_selector)
		url_param(u, "labelSelector", o->label_selector);
	if (o->field_selector && *o->field_selector)
		url_param(u, "fieldSelector", o->field_selector);
	if (o->limit > 0) {
		char n[24];
		snprintf(n, sizeof(n), "%ld", o->limit);
		url_param(u, "limit", n);
	}
	if (o->cont && *o->cont)
		url_param(u, "continue", o->cont);
}

int sg_kube_list(sg_kube *k, const sg_kube_ref *ref, const sg_kube_list_opts *opt, json_t **out)
{
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(!ref->name, SG_EINVAL, "kube: list takes no name");
	list_params(&u, opt);
	json_t *page = NULL;
	SG_TRY(call(k, "GET", ref, &u, NULL, NULL, &page));
	json_t *items = json_object_get(page, "items");
	if (!json_is_array(items) && !json_is_null(items) && items) {
		json_decref(page);
		SG_BAIL(SG_EPROTO, "kube: list %s: \"items\" is not an array", ref->resource);
	}
	if (out)
		*out = page;
	else
		json_decref(page);
	return SG_OK;
}

int sg_kube_list_all(sg_kube *k, const sg_kube_ref *ref, const sg_kube_list_opts *opt, json_t **out)
{
	*out = NULL;
	sg_kube_list_opts o = opt ? *opt : (sg_kube_list_opts){0};
	if (o.limit <= 0)
		o.limit = 500;
	json_t *all SG_CLEANUP(json_decrefp) = NULL;
	json_t *items = json_array();
	SG_ENSURE(items, SG_EINTERNAL, "kube: out of memory");
	char *cont SG_AUTOFREE = NULL;
	for (;;) {
		json_t *page SG_CLEANUP(json_decrefp) = NULL;
		o.cont = cont;
		int rc = sg_kube_list(k, ref, &o, &page);
		if (rc < 0) {
			json_decref(items);
			return rc;
		}
		json_t *pi = json_object_get(page, "items");
		if (json_is_array(pi) && json_array_extend(items, pi) != 0) {
			json_decref(items);
			SG_BAIL(SG_EINTERNAL, "kube: out of memory");
		}
		const char *next = sg_kube_meta_str(page, "continue");
		free(cont);
		cont = next && *next ? strdup(next) : NULL;
		if (!cont) {
			/* The last page: its kind and resourceVersion describe the
			 * whole snapshot. */
			json_object_set_new(page, "items", items);
			all = json_incref(page);
			break;
		}
	}
	*out = SG_MOVE(all);
	return SG_OK;
}

int sg_kube_create(sg_kube *k, const sg_kube_ref *ref, const json_t *body, json_t **out)
{
	struct url u;
	SG_TRY(create_url(k, ref, body, &u));
	return call(k, "POST", ref, &u, "application/json", body, out);
}

int sg_kube_update(sg_kube *k, const sg_kube_ref *ref, const json_t *body, json_t **out)
{
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: update needs a name");
	SG_ENSURE(json_is_object(body), SG_EINVAL, "kube: update needs an object");
	return call(k, "PUT", ref, &u, "application/json", body, out);
}

int sg_kube_delete(sg_kube *k, const sg_kube_ref *ref, json_t **out)
{
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: delete needs a name");
	return call(k, "DELETE", ref, &u, NULL, NULL, out);
}

/* DELETE with DeleteOptions.preconditions: uid, and resourceVersion when
 * rv is not NULL. */
static int delete_if(sg_kube *k, const sg_kube_ref *ref, const char *uid, const char *rv, json_t **out)
{
	if (out)
		*out = NULL;
	SG_ENSURE(uid && *uid, SG_EINVAL, "kube: delete with a precondition needs a uid");
	SG_ENSURE(!rv || *rv, SG_EINVAL, "kube: delete with a version precondition needs a resourceVersion");
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: delete needs a name");
	json_t *opts =
	    json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "DeleteOptions", "preconditions", "uid", uid);
	if (opts && rv &&
	    json_object_set_new(json_object_get(opts, "preconditions"), "resourceVersion", json_string(rv)) != 0) {
		json_decref(opts);
		opts = NULL;
	}
	SG_ENSURE(opts, SG_EINTERNAL, "kube: out of memory");
	int rc = call(k, "DELETE", ref, &u, "application/json", opts, out);
	json_decref(opts);
	return rc;
}

int sg_kube_delete_uid(sg_kube *k, const sg_kube_ref *ref, const char *uid, json_t **out)
{
	return delete_if(k, ref, uid, NULL, out);
}

int sg_kube_delete_version(sg_kube *k, const sg_kube_ref *ref, const char *uid, const char *resource_version,
                           json_t **out)
{
	/* "" for NULL: delete_if refuses both alike. */
	return delete_if(k, ref, uid, resource_version ? resource_version : "", out);
}

int sg_kube_delete_seen(sg_kube *k, const sg_kube_ref *ref, const char *uid, json_t **out)
{
	return uid && *uid ? sg_kube_delete_uid(k, ref, uid, out) : sg_kube_delete(k, ref, out);
}

int sg_kube_merge_patch(sg_kube *k, const sg_kube_ref *ref, const json_t *patch, json_t **out)
{
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: patch needs a name");
	SG_ENSURE(json_is_object(patch), SG_EINVAL, "kube: a merge patch is an object");
	return call(k, "PATCH", ref, &u, "application/merge-patch+json", patch, out);
}

static int check_field_manager(const char *verb, const char *field_manager)
{
	SG_ENSURE(field_manager && *field_manager && strlen(field_manager) <= FIELD_MANAGER_MAX, SG_EINVAL,
	          "kube: %s needs a field manager of 1..%d bytes", verb, FIELD_MANAGER_MAX);
	for (const char *p = field_manager; *p; p++)
		SG_ENSURE(*p >= 0x20 && *p < 0x7f, SG_EINVAL, "kube: the field manager must be printable");
	return SG_OK;
}

int sg_kube_apply(sg_kube *k, const sg_kube_ref *ref, const json_t *body, const char *field_manager, bool force,
                  json_t **out)
{
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: apply needs a name");
	SG_ENSURE(json_is_object(body), SG_EINVAL, "kube: apply needs an object");
	SG_TRY(check_field_manager("apply", field_manager));
	url_param(&u, "fieldManager", field_manager);
	url_param(&u, "force", force ? "true" : "false");
	/* Exactly one Content-Type (kubernetes-client/c#52). */
	return call(k, "PATCH", ref, &u, "application/apply-patch+yaml", body, out);
}

int sg_kube_json_patch(sg_kube *k, const sg_kube_ref *ref, const json_t *ops, json_t **out)
{
	if (out)
		*out = NULL;
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(ref->name, SG_EINVAL, "kube: patch needs a name");
	SG_ENSURE(json_is_array(ops) && json_array_size(ops) > 0, SG_EINVAL,
	          "kube: a JSON patch is a non-empty array of operations");
	return call(k, "PATCH", ref, &u, "application/json-patch+json", ops, out);
}

/* Whether managedFields entry m, of the object itself (no subresource),
 * is by manager who with operation op, and has its fields. */
static bool entry_is(const json_t *m, const char *who, const char *op)
{
	const char *w = json_string_value(json_object_get(m, "manager"));
	const char *o = json_string_value(json_object_get(m, "operation"));
	const char *sub = json_string_value(json_object_get(m, "subresource"));
	return w && o && strcmp(w, who) == 0 && strcmp(o, op) == 0 && (!sub || !*sub) &&
	       json_is_object(json_object_get(m, "fieldsV1"));
}

/* Whether m is an update by one of from[0..n). */
static bool adoptable(const json_t *m, const char *const *from, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (from[i] && entry_is(m, from[i], "Update"))
			return true;
	return false;
}

/* The apiVersion the merged entry speaks: its fields are paths in that
 * version's schema, so only entries of the same version are merged (the
 * own Apply entry's when there is one, else the first adoptable one's). */
static const char *adopt_version(const json_t *mf, const char *const *from, size_t n, const char *field_manager)
{
	const char *first = NULL;
	size_t i;
	const json_t *m;
	json_array_foreach(mf, i, m)
	{
		const char *v = json_string_value(json_object_get(m, "apiVersion"));
		if (v && entry_is(m, field_manager, "Apply"))
			return v;
		if (v && !first && adoptable(m, from, n))
			first = v;
	}
	return first;
}

/* Whether obj's managedFields hold an update of from[0..n) to adopt: one
 * of the version adopt_version picks. */
static bool anything_to_adopt(const json_t *obj, const char *const *from, size_t n, const char *field_manager)
{
	const json_t *mf = json_object_get(json_object_get(obj, "metadata"), "managedFields");
	const char *version = adopt_version(mf, from, n, field_manager);
	size_t i;
	const json_t *m;
	json_array_foreach(mf, i, m)
	{
		const char *v = json_string_value(json_object_get(m, "apiVersion"));
		if (version && v && strcmp(v, version) == 0 && adoptable(m, from, n))
			return true;
	}
	return false;
}

/* live's managedFields (anything_to_adopt true) with the adoptable entries
 * and field_manager's own apply entry, those of one apiVersion, merged into
 * one apply entry whose fieldsV1 is the union: FieldsV1 is a tree of
 * objects ("f:", "k:", "v:" and "." keys, every value an object), so a
 * recursive object update is the union of two sets. live is not modified:
 * what is merged in is a copy (json_object_update_recursive attaches the
 * subtrees it does not find, which a later merge would then write into).
 * NULL: out of memory. */
static json_t *adopted_fields(const json_t *live, const char *const *from, size_t n, const char *field_manager)
{
	const json_t *mf = json_object_get(json_object_get(live, "metadata"), "managedFields");
	const char *version = adopt_version(mf, from, n, field_manager);
	char now[40];
	rfc3339_now(now, sizeof(now));
	json_t *keep = json_array(), *merged = NULL;
	if (!keep || !version)
		goto oom;
	size_t i;
	const json_t *m;
	json_array_foreach(mf, i, m)
	{
		const char *v = json_string_value(json_object_get(m, "apiVersion"));
		bool same = v && strcmp(v, version) == 0;
		if (!same || (!adoptable(m, from, n) && !entry_is(m, field_manager, "Apply"))) {
			if (json_array_append(keep, (json_t *)m) != 0)
				goto oom;
			continue;
		}
		json_t *fields = json_deep_copy(json_object_get(m, "fieldsV1"));
		if (!fields)
			goto oom;
		if (!merged) {
			merged =
			    json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "manager", field_manager, "operation", "Apply",
			              "apiVersion", version, "time", now, "fieldsType", "FieldsV1", "fieldsV1", fields);
			if (!merged)
				goto oom;
		} else {
			int rc = json_object_update_recursive(json_object_get(merged, "fieldsV1"), fields);
			json_decref(fields);
			if (rc != 0)
				goto oom;
		}
	}
	if (json_array_append_new(keep, merged) != 0) {
		merged = NULL;
		goto oom;
	}
	return keep;
oom:
	json_decref(keep);
	json_decref(merged);
	return NULL;
}

int sg_kube_adopt_fields(sg_kube *k, const sg_kube_ref *ref, const json_t *live, const char *const *from, size_t n,
                         const char *field_manager, json_t **out)
{
	if (out)
		*out = NULL;
	SG_TRY(check_field_manager("adopt_fields", field_manager));
	SG_ENSURE(ref->name && (!ref->subresource || !*ref->subresource), SG_EINVAL,
	          "kube: adopt_fields needs an object's name and no subresource");
	const char *rv = sg_kube_meta_str(live, "resourceVersion"), *name = sg_kube_meta_str(live, "name");
	SG_ENSURE(rv && *rv && name && strcmp(name, ref->name) == 0, SG_EINVAL,
	          "kube: adopt_fields needs the object as read (its name and resourceVersion)");
	if (!anything_to_adopt(live, from, n, field_manager))
		return SG_OK;
	json_t *fields = adopted_fields(live, from, n, field_manager);
	SG_ENSURE(fields, SG_EINTERNAL, "kube: out of memory");
	/* The resourceVersion written back is the one read: the API server
	 * refuses the patch with 409 Conflict when the object changed since,
	 * as for any update that names its version. */
	json_t *ops =
	    json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:o}]", "op", "replace", "path", "/metadata/resourceVersion",
	              "value", rv, "op", "replace", "path", "/metadata/managedFields", "value", fields);
	SG_ENSURE(ops, SG_EINTERNAL, "kube: out of memory");
	json_t *answer = NULL;
	int rc = sg_kube_json_patch(k, ref, ops, &answer);
	json_decref(ops);
	if (rc < 0)
		return rc;
	/* An API server that cannot read the entries keeps its own and
	 * answers 200: said, so that a caller does not write again and again. */
	if (anything_to_adopt(answer, from, n, field_manager)) {
		sg_kube_secret_release(&answer);
		SG_BAIL(SG_EPROTO, "kube: PATCH %s %s: the API server kept the updates' managedFields entries",
		        ref->resource, ref->name);
	}
	if (out)
		*out = answer;
	else
		sg_kube_secret_release(&answer);
	return SG_OK;
}

int sg_kube_create_applied(sg_kube *k, const sg_kube_ref *ref, const json_t *body, const char *field_manager,
                           json_t **out)
{
	if (out)
		*out = NULL;
	SG_ENSURE(!ref->name && (!ref->subresource || !*ref->subresource), SG_EINVAL,
	          "kube: create_applied names a collection: the object's name is in its body");
	SG_TRY(check_field_manager("create_applied", field_manager));
	struct url u;
	SG_TRY(create_url(k, ref, body, &u));
	url_param(&u, "fieldManager", field_manager);
	json_t *made = NULL;
	SG_TRY(call(k, "POST", ref, &u, "application/json", body, &made));

	/* The object exists from here on: whatever the second request meets,
	 * the create succeeded, and the caller must hear so, with the POST's
	 * own status. */
	sg_kube_status posted = *sg_kube_last_status();
	sg_kube_ref one = *ref;
	one.name = sg_kube_meta_str(made, "name");
	const char *from[] = {field_manager};
	json_t *adopted = NULL;
	int rc = one.name ? sg_kube_adopt_fields(k, &one, made, from, 1, field_manager, &adopted) : SG_OK;
	if (rc < 0)
		sg_log(SG_LOG_WARN,
		       "kube: created, but its fields stay owned by an update until adopted: a later apply that "
		       "leaves one out will not remove it",
		       SG_F_STR("resource", ref->resource), SG_F_STR("namespace", ref->ns ? ref->ns : ""),
		       SG_F_STR("name", one.name), SG_F_STR("manager", field_manager),
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
	if (adopted) {
		sg_kube_secret_release(&made); /* a Secret's answer echoes its data */
		made = adopted;
	}
	sg_kube_status_set(&posted);
	sg_error_clear();
	if (out)
		*out = made;
	else
		sg_kube_secret_release(&made);
	return SG_OK;
}

int sg_kube_event(sg_kube *k, const json_t *obj, const char *type, const char *reason, const char *message,
                  const char *component, json_t **out)
{
	if (out)
		*out = NULL;
	json_t *av = json_object_get(obj, "apiVersion"), *kind = json_object_get(obj, "kind");
	const char *name = sg_kube_meta_str(obj, "name");
	SG_ENSURE(json_is_string(av) && json_is_string(kind) && name, SG_EINVAL,
	          "kube: an event needs an object with apiVersion, kind and metadata.name");
	SG_ENSURE(type && (strcmp(type, "Normal") == 0 || strcmp(type, "Warning") == 0), SG_EINVAL,
	          "kube: event type must be Normal or Warning");
	SG_ENSURE(reason && *reason && strlen(reason) <= 128, SG_EINVAL, "kube: event reason must be 1..128 bytes");
	SG_ENSURE(component && *component && strlen(component) <= 128, SG_EINVAL, "kube: event component is required");
	const char *ns = sg_kube_meta_str(obj, "namespace");
	const char *ev_ns = ns && *ns ? ns : "default";

	/* client-go's recorder names events "<object>.<unix nanoseconds in hex>". */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char ev_name[SG_KUBE_NAME_MAX + 1];
	snprintf(ev_name, sizeof(ev_name), "%.*s.%llx", SG_KUBE_NAME_MAX - 20, name,
	         (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	char now[40];
	rfc3339_now(now, sizeof(now));
	char msg[EVENT_MESSAGE_MAX + 1];
	snprintf(msg, sizeof(msg), "%s", message ? message : "");

	json_t *involved = json_pack("{s:O, s:O, s:s}", "apiVersion", av, "kind", kind, "name", name);
	json_t *ev SG_CLEANUP(json_decrefp) = json_pack("{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:i, s:s}",
	                       "apiVersion", "v1", "kind", "Event", "metadata", "name", ev_name, "namespace", ev_ns,
	                       "involvedObject", involved, "reason", reason, "message", msg, "type", type, "source",
	                       "component", component, "firstTimestamp", now, "lastTimestamp", now, "count", 1,
	                       "reportingComponent", component);
	SG_ENSURE(ev && involved, SG_EINTERNAL, "kube: event: out of memory (or a non-UTF-8 string)");
	if (ns && *ns)
		json_object_set_new(involved, "namespace", json_string(ns));
	static const char *const copy[] = {"uid", "resourceVersion"};
	for (size_t i = 0; i < 2; i++) {
		const char *v = sg_kube_meta_str(obj, copy[i]);
		if (v)
			json_object_set_new(involved, copy[i], json_string(v));
	}
	sg_kube_ref ref = {.version = "v1", .resource = "events", .ns = ev_ns};
	return sg_kube_create(k, &ref, ev, out);
}

/* ---- non-resource paths ---- */

/* RFC 3986 §3.3 pchar without '%' (the path goes into the URL as given, so
 * no byte may need escaping and none may pretend to be an escape), plus the
 * '/' separator. '?' and '#' are not pchar: no query, no fragment. */
static bool path_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("-._~!$&'()*+,;=:@/", c) != NULL);
}

static int check_path(const char *path)
{
	SG_ENSURE(path && path[0] == '/', SG_EINVAL, "kube: a path must start with '/'");
	size_t n = strnlen(path, SG_KUBE_PATH_MAX + 1);
	SG_ENSURE(n <= SG_KUBE_PATH_MAX, SG_EINVAL, "kube: path longer than %d bytes", SG_KUBE_PATH_MAX);
	for (size_t i = 0; i < n; i++)
		SG_ENSURE(path_byte((unsigned char)path[i]), SG_EINVAL,
		          "kube: path byte %zu (0x%02x) is not allowed (no escapes, spaces, query or fragment)", i,
		          (unsigned char)path[i]);
	/* Segments: none empty, none "." or "..". The server would normalise
	 * them into another path than the one the caller reviewed. "/" alone
	 * is the one path with an empty segment. */
	if (n == 1)
		return SG_OK;
	size_t start = 1;
	for (size_t i = 1; i <= n; i++) {
		if (i < n && path[i] != '/')
			continue;
		size_t len = i - start;
		SG_ENSURE(len > 0, SG_EINVAL, "kube: path has an empty segment");
		SG_ENSURE(!(len == 1 && path[start] == '.') &&
		              !(len == 2 && path[start] == '.' && path[start + 1] == '.'),
		          SG_EINVAL, "kube: path has a \".\" or \"..\" segment");
		start = i + 1;
	}
	return SG_OK;
}

/* application/json, or application/<type>+json (the +json structured
 * syntax suffix, RFC 6839 §3.1, e.g. application/jwk-set+json of RFC 7517
 * §8.5); parameters such as charset are allowed. */
static bool json_media_type(const char *ct)
{
	static const char app[] = "application/";
	const size_t an = sizeof(app) - 1;
	if (!ct)
		return false;
	size_t n = strcspn(ct, "; \t");
	if (n <= an || strncasecmp(ct, app, an) != 0)
		return false;
	const char *sub = ct + an;
	size_t sn = n - an;
	if (sn == 4 && strncasecmp(sub, "json", 4) == 0)
		return true;
	return sn > 5 && strncasecmp(sub + sn - 5, "+json", 5) == 0;
}

struct pstate {
	CURL *h;
	long http;
	sg_strbuf body; /* a 2xx answer, bounded by the caller's max */
	sg_strbuf err;  /* a failed answer's Status, bounded by ERRBODY_MAX */
	const atomic_bool *stop;
	bool stopped;
};

static size_t write_path(char *data, size_t size, size_t nmemb, void *arg)
{
	struct pstate *p = arg;
	size_t n = size * nmemb;
	if (p->http == 0)
		curl_easy_getinfo(p->h, CURLINFO_RESPONSE_CODE, &p->http);
	if (p->http < 200 || p->http > 299) {
		(void)sg_strbuf_add(&p->err, data, n); /* excess is dropped: the Status is short */
		return n;
	}
	return sg_strbuf_add(&p->body, data, n) ? n : 0;
}

static int progress_path(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	struct pstate *p = arg;
	if (p->stop && atomic_load(p->stop)) {
		p->stopped = true;
		return 1;
	}
	return 0;
}

static void pstate_free(struct pstate *p)
{
	sg_strbuf_free(&p->body);
	sg_strbuf_free(&p->err);
}

int sg_kube_get_path(sg_kube *k, const char *path, const sg_kube_path_opts *opt, uint8_t **out, size_t *len)
{
	if (out)
		*out = NULL;
	if (len)
		*len = 0;
	sg_kube_status_reset();
	SG_TRY(check_path(path));
	size_t max = opt && opt->max ? opt->max : SG_KUBE_RESPONSE_MAX;
	if (max > SG_KUBE_RESPONSE_MAX)
		max = SG_KUBE_RESPONSE_MAX;
	struct url u = {.n = 0};
	url_str(&u, k->cfg->server);
	url_str(&u, path);
	SG_ENSURE(!u.overflow, SG_EINVAL, "kube: GET %.200s: URL longer than %d bytes", path, SG_KUBE_URL_MAX);

	sg_kube_ratelimit_wait(k->rl);
	CURL *h = pool_get(k);
	SG_ENSURE(h, SG_EINTERNAL, "kube: out of memory");
	struct curl_slist *hdrs SG_CLEANUP(free_headersp) = NULL;
	struct pstate p SG_CLEANUP(pstate_free) = {.h = h,
	                                           .body = {.max = max, .first = RBUF_FIRST, .wipe = true},
	                                           .err = {.max = ERRBODY_MAX, .first = RBUF_FIRST, .wipe = true},
	                                           .stop = opt ? opt->stop : NULL};
	char errbuf[CURL_ERROR_SIZE] = "";
	int rc = setup(k, h, u.s, &hdrs, NULL, "application/json, application/jwk-set+json", errbuf);
	if (rc < 0)
		goto done;
	int bad = 0;
	bad |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, k->opt.request_timeout_ms);
	bad |= curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
	/* A declared length over the limit fails before any body byte; the
	 * write callback bounds what arrives without one (and decompressed). */
	bad |= curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max);
	bad |= curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_path);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, &p);
	if (p.stop) {
		bad |= curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		bad |= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_path);
		bad |= curl_easy_setopt(h, CURLOPT_XFERINFODATA, &p);
	}
	SG_ENSURE_GOTO(rc, !bad, done, SG_EINTERNAL, "kube: libcurl refused an option");

	CURLcode cc = curl_easy_perform(h);
	if (p.http == 0)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &p.http);
	if (p.stopped) {
		rc = sg_error_set(SG_EBUSY, "kube: GET %.200s: stopped", path);
	} else if (p.http != 0 && (p.http < 200 || p.http > 299)) {
		rc = http_error(p.http, 0, p.err.p, p.err.len, "GET", path);
	} else if (cc == CURLE_FILESIZE_EXCEEDED || (cc == CURLE_WRITE_ERROR && p.body.overflow)) {
		rc = sg_error_set(SG_EPROTO, "kube: GET %.200s: response larger than %zu bytes", path, max);
	} else if (cc == CURLE_WRITE_ERROR) {
		rc = sg_error_set(SG_EINTERNAL, "kube: GET %.200s: out of memory", path);
	} else if (cc != CURLE_OK) {
		rc = curl_error(cc, "GET", path, errbuf);
	} else {
		char *ct = NULL;
		curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
		if (!json_media_type(ct)) {
			char shown[64];
			sg_log_printable(shown, sizeof(shown), ct ? ct : "none", strlen(ct ? ct : "none"));
			rc = sg_error_set(SG_EPROTO, "kube: GET %.200s: the answer is %s, not JSON", path, shown);
		} else {
			rc = SG_OK;
		}
	}
	if (rc == SG_OK) {
		sg_kube_tl_status.code = p.http;
		if (!p.body.p) { /* an empty body: still a NUL-terminated buffer */
			p.body.p = calloc(1, 1);
			SG_ENSURE_GOTO(rc, p.body.p, done, SG_EINTERNAL, "kube: out of memory");
		}
		if (len)
			*len = p.body.len;
		if (out)
			*out = (uint8_t *)SG_MOVE(p.body.p);
	}
done:
	pool_put(k, h);
	return rc;
}

/* ---- watch ---- */

struct wstate {
	sg_kube_watch_parser *parser;
	CURL *h;
	long http;
	sg_strbuf err; /* the body of a non-2xx answer */
	int prc;       /* the parser's verdict */
	const atomic_bool *stop;
	bool stopped;
};

static size_t write_watch(char *data, size_t size, size_t nmemb, void *arg)
{
	struct wstate *w = arg;
	size_t n = size * nmemb;
	if (w->http == 0)
		curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->http);
	if (w->http < 200 || w->http > 299) {
		(void)sg_strbuf_add(&w->err, data, n); /* excess is dropped: the Status is short */
		return n;
	}
	w->prc = sg_kube_watch_parser_feed(w->parser, data, n);
	return w->prc == 0 ? n : 0;
}

static int progress_watch(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt, (void)dn, (void)ut, (void)un;
	struct wstate *w = arg;
	if (w->stop && atomic_load(w->stop)) {
		w->stopped = true;
		return 1;
	}
	return 0;
}

static void parser_freep(sg_kube_watch_parser **p)
{
	sg_kube_watch_parser_free(*p);
}

int sg_kube_watch(sg_kube *k, const sg_kube_ref *ref, const sg_kube_watch_opts *opt, sg_kube_watch_fn fn, void *arg)
{
	sg_kube_status_reset();
	sg_kube_watch_opts o = opt ? *opt : (sg_kube_watch_opts){0};
	if (o.timeout_seconds <= 0)
		o.timeout_seconds = WATCH_TIMEOUT_DEFAULT;
	struct url u;
	SG_TRY(build_url(k, ref, &u));
	SG_ENSURE(!ref->name && !ref->subresource, SG_EINVAL, "kube: watch a collection (select one name with a "
	                                                      "field selector)");
	char what[320];
	describe(ref, what, sizeof(what));
	char tmo[16];
	snprintf(tmo, sizeof(tmo), "%d", o.timeout_seconds);
	url_param(&u, "watch", "1");
	if (o.resource_version && *o.resource_version)
		url_param(&u, "resourceVersion", o.resource_version);
	if (!o.no_bookmarks)
		url_param(&u, "allowWatchBookmarks", "true");
	url_param(&u, "timeoutSeconds", tmo);
	if (o.label_selector && *o.label_selector)
		url_param(&u, "labelSelector", o.label_selector);
	if (o.field_selector && *o.field_selector)
		url_param(&u, "fieldSelector", o.field_selector);
	SG_ENSURE(!u.overflow, SG_EINVAL, "kube: WATCH %s: URL longer than %d bytes", what, SG_KUBE_URL_MAX);

	sg_kube_watch_parser *parser SG_CLEANUP(parser_freep) = NULL;
	SG_TRY(sg_kube_watch_parser_new(&parser, k->opt.watch_line_max, fn, arg));
	sg_kube_ratelimit_wait(k->rl);
	CURL *h = pool_get(k);
	SG_ENSURE(h, SG_EINTERNAL, "kube: out of memory");
	struct curl_slist *hdrs SG_CLEANUP(free_headersp) = NULL;
	struct wstate w = {
	    .parser = parser, .h = h, .err = {.max = ERRBODY_MAX, .first = RBUF_FIRST, .wipe = true}, .stop = o.stop};
	char errbuf[CURL_ERROR_SIZE] = "";
	int rc = setup(k, h, u.s, &hdrs, NULL, NULL, errbuf);
	if (rc < 0)
		goto done;
	int bad = 0;
	/* No total timeout: the server ends the watch after timeoutSeconds; a
	 * silent stream (dead peer) is given up after that plus a grace. */
	bad |= curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)o.timeout_seconds + WATCH_SILENCE_GRACE);
	bad |= curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_watch);
	bad |= curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
	bad |= curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	bad |= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_watch);
	bad |= curl_easy_setopt(h, CURLOPT_XFERINFODATA, &w);
	SG_ENSURE_GOTO(rc, !bad, done, SG_EINTERNAL, "kube: libcurl refused an option");

	CURLcode cc = curl_easy_perform(h);
	if (w.http == 0)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &w.http);
	if (w.stopped) {
		rc = SG_OK;
	} else if (w.prc != 0) {
		rc = w.prc; /* the callback's stop value, or the parser's error (detail set) */
		if (rc < 0) {
			char why[SG_ERROR_MSG_MAX];
			snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
			rc = sg_error_set(rc, "kube: WATCH %s: %s", what, why);
		}
	} else if (w.http != 0 && (w.http < 200 || w.http > 299)) {
		rc = http_error(w.http, 0, w.err.p, w.err.len, "WATCH", what);
	} else if (cc != CURLE_OK) {
		rc = curl_error(cc, "WATCH", what, errbuf);
	} else {
		rc = sg_kube_watch_parser_finish(parser);
		if (rc < 0) {
			char why[SG_ERROR_MSG_MAX];
			snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
			rc = sg_error_set(rc, "kube: WATCH %s: %s", what, why);
		}
	}
	if (rc >= 0 && sg_kube_tl_status.code == 0)
		sg_kube_tl_status.code = w.http;
done:
	sg_strbuf_free(&w.err);
	pool_put(k, h);
	return rc;
}

/* ---- life cycle ---- */

int sg_kube_new(sg_kube **out, sg_kube_config **cfg, const sg_kube_options *opt)
{
	*out = NULL;
	sg_kube_config *c = *cfg;
	*cfg = NULL;
	if (!c)
		SG_BAIL(SG_EINVAL, "kube: no configuration");
	if (opt && opt->idle_handles > SG_KUBE_IDLE_HANDLES_MAX) {
		sg_kube_config_free(c);
		SG_BAIL(SG_EINVAL, "kube: idle_handles is above %d", SG_KUBE_IDLE_HANDLES_MAX);
	}
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		sg_kube_config_free(c);
		SG_BAIL(SG_EINTERNAL, "kube: curl_global_init failed");
	}
	sg_kube *k = calloc(1, sizeof(*k));
	if (!k) {
		sg_kube_config_free(c);
		SG_BAIL(SG_EINTERNAL, "kube: out of memory");
	}
	k->cfg = c;
	if (opt)
		k->opt = *opt;
	if (k->opt.qps == 0)
		k->opt.qps = 20;
	if (k->opt.burst <= 0)
		k->opt.burst = 50;
	if (k->opt.connect_timeout_ms <= 0)
		k->opt.connect_timeout_ms = 5000;
	if (k->opt.request_timeout_ms <= 0)
		k->opt.request_timeout_ms = 30000;
	if (k->opt.watch_line_max == 0 || k->opt.watch_line_max > SG_KUBE_WATCH_LINE_MAX)
		k->opt.watch_line_max = SG_KUBE_WATCH_LINE_MAX;
	if (k->opt.idle_handles == 0)
		k->opt.idle_handles = POOL_IDLE_DEFAULT;
	snprintf(k->user_agent, sizeof(k->user_agent), "%s",
	         opt && opt->user_agent ? opt->user_agent : "signet/0.1 (kube)");
	k->opt.user_agent = NULL;
	pthread_mutex_init(&k->pool_mu, NULL);
	pthread_mutex_init(&k->token_mu, NULL);
	k->idle = calloc(k->opt.idle_handles, sizeof(CURL *));
	int rc = k->idle ? sg_kube_ratelimit_new(&k->rl, k->opt.qps, k->opt.burst)
	                 : sg_error_set(SG_EINTERNAL, "kube: out of memory");
	if (rc < 0) {
		sg_kube_free(k);
		return rc;
	}
	*out = k;
	return SG_OK;
}

void sg_kube_free(sg_kube *k)
{
	if (!k)
		return;
	for (size_t i = 0; i < k->n_idle; i++)
		curl_easy_cleanup(k->idle[i]);
	free(k->idle);
	sg_kube_ratelimit_free(k->rl);
	sg_secret_free(k->token);
	sg_kube_config_free(k->cfg);
	pthread_mutex_destroy(&k->pool_mu);
	pthread_mutex_destroy(&k->token_mu);
	free(k);
}

const char *sg_kube_namespace(const sg_kube *k)
{
	return sg_kube_config_namespace(k->cfg);
}

const uint8_t *sg_kube_ca_pem(const sg_kube *k, size_t *len)
{
	*len = k->cfg->ca ? k->cfg->ca_len : 0;
	return k->cfg->ca;
}
