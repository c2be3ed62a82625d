/*
 * sg_jwks_kube: OIDC discovery and JWKS refresh from the Kubernetes API
 * server (contract in sg_jwks_kube.h).
 *
 * Shape: new() does the whole first fetch on the caller's thread, so a
 * daemon that cannot reach its keys fails at start-up with the reason
 * rather than refusing every token later. After that one thread sleeps on
 * a monotonic condition variable between fetches; free() wakes it and
 * raises the atomic flag the in-flight GET polls (sg_kube_path_opts.stop),
 * so shutdown does not wait out a request timeout against a hung server.
 *
 * The keys go into a pushed sg_jwks_file, the source the verifier already
 * reads, so the verifier, its cache and the authenticator are the same
 * code whether keys come from a file or from here. Two properties matter
 * to them and are kept here:
 *   - no churn: the API server serves one pre-serialised document, so an
 *     unchanged key set comes back byte for byte. We compare SHA-256 of the
 *     body with the last accepted one and do not re-parse: re-parsing would
 *     mint a new generation and empty the verification cache every refresh.
 *   - no loss: a failed fetch or a set that does not parse (empty, weak,
 *     truncated) never replaces working keys. It is logged and retried
 *     with exponential backoff (min_refresh_seconds doubling up to
 *     refresh_seconds), so an API-server outage costs one request per
 *     interval, not a storm.
 *
 * Discovery documents are untrusted bytes (a compromised or misconfigured
 * server, a proxy): bounded before parsing (64 KiB at the client, again
 * here), parsed with duplicate members refused, and only "issuer" is read;
 * it must be an https URL without query or fragment (OpenID Connect
 * Discovery 1.0 §3, RFC 8414 §2), since it becomes the "iss" every token
 * is compared with.
 */
#include "sg_jwks_kube.h"
#include "sg_clock.h"
#include "sg_crypto.h"
#include "sg_guard.h"
#include "sg_log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_SHIFT_MAX 20 /* 2^20 x 1 s is past any refresh_seconds */

struct sg_jwks_kube {
	sg_kube *kube;
	int refresh_s;
	int min_refresh_s;
	char issuer[SG_JWKS_KUBE_ISSUER_MAX + 1];
	sg_jwks_file *keys; /* pushed; set at new, written by fetches */

	pthread_mutex_t fetch_mu; /* one fetch at a time; guards digest */
	uint8_t digest[32];       /* SHA-256 of the JWKS body in use */

	pthread_mutex_t mu; /* guards stopping; cv wakes the refresher */
	pthread_cond_t cv;
	bool stopping;
	bool started;
	pthread_t thread;
	atomic_bool stop; /* polled by the in-flight GET */

	atomic_uint_fast64_t fetches, failures, updates, consecutive;
	atomic_int_fast64_t last_success, last_failure;
	atomic_size_t nkeys;
};

/* ---- the discovery document ---- */

/* RFC 3986 characters that may appear in a URL, other than '?' and '#'
 * (no query, no fragment) and '%' outside an escape. */
static bool url_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("-._~:/[]@!$&'()*+,;=%", c) != NULL);
}

static bool hex_digit(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* An issuer the verifier may compare tokens with: https://host[:port][/path]. */
static int check_issuer(const char *s, size_t n)
{
	static const char scheme[] = "https://";
	const size_t sn = sizeof(scheme) - 1;
	SG_ENSURE(n > 0, SG_EINVAL, "OIDC discovery: \"issuer\" is empty");
	SG_ENSURE(n <= SG_JWKS_KUBE_ISSUER_MAX, SG_EINVAL, "OIDC discovery: \"issuer\" is %zu bytes, more than %d", n,
	          SG_JWKS_KUBE_ISSUER_MAX);
	SG_ENSURE(n > sn && memcmp(s, scheme, sn) == 0, SG_EINVAL, "OIDC discovery: \"issuer\" is not an https URL");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		SG_ENSURE(c != '?' && c != '#', SG_EINVAL, "OIDC discovery: \"issuer\" has a query or fragment");
		SG_ENSURE(url_byte(c), SG_EINVAL, "OIDC discovery: \"issuer\" byte %zu (0x%02x) is not a URL character",
		          i, c);
		SG_ENSURE(c != '%' ||
		              (i + 2 < n && hex_digit((unsigned char)s[i + 1]) && hex_digit((unsigned char)s[i + 2])),
		          SG_EINVAL, "OIDC discovery: \"issuer\" has a malformed %%-escape");
	}
	size_t host_end = sn;
	while (host_end < n && s[host_end] != '/')
		host_end++;
	SG_ENSURE(host_end > sn, SG_EINVAL, "OIDC discovery: \"issuer\" has no host");
	for (size_t i = sn; i < host_end; i++)
		SG_ENSURE(s[i] != '@', SG_EINVAL, "OIDC discovery: \"issuer\" carries userinfo");
	return SG_OK;
}

int sg_jwks_kube_parse_discovery(const void *doc, size_t len, char *issuer, size_t cap)
{
	if (cap)
		issuer[0] = '\0';
	SG_ENSURE(len <= SG_JWKS_KUBE_DISCOVERY_MAX, SG_EINVAL, "OIDC discovery document is %zu bytes, more than %u",
	          len, SG_JWKS_KUBE_DISCOVERY_MAX);
	json_error_t jerr;
	json_t *root SG_CLEANUP(json_decrefp) = json_loadb(doc, len, JSON_REJECT_DUPLICATES, &jerr);
	/* Line and column only: jansson's text may quote the input. */
	SG_ENSURE(root, SG_EINVAL, "OIDC discovery document is not valid JSON (line %d, column %d)", jerr.line,
	          jerr.column);
	SG_ENSURE(json_is_object(root), SG_EINVAL, "OIDC discovery document is not a JSON object");
	json_t *iss = json_object_get(root, "issuer");
	SG_ENSURE(iss, SG_EINVAL, "OIDC discovery document has no \"issuer\"");
	SG_ENSURE(json_is_string(iss), SG_EINVAL, "OIDC discovery: \"issuer\" is not a string");
	const char *s = json_string_value(iss);
	size_t n = json_string_length(iss);
	SG_ENSURE(strlen(s) == n, SG_EINVAL, "OIDC discovery: \"issuer\" holds a NUL byte");
	SG_TRY(check_issuer(s, n));
	SG_ENSURE(n < cap, SG_EINVAL, "OIDC discovery: \"issuer\" does not fit in %zu bytes", cap);
	memcpy(issuer, s, n + 1);
	return SG_OK;
}

/* ---- fetching ---- */

/* Prefixes the current error detail, keeping its category. */
static int annotate(int rc, const char *what)
{
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	return sg_error_set(rc, "%s: %s", what, why);
}

static int discover(sg_jwks_kube *d)
{
	uint8_t *doc SG_AUTOFREE = NULL;
	size_t len = 0;
	sg_kube_path_opts po = {.max = SG_JWKS_KUBE_DISCOVERY_MAX, .stop = &d->stop};
	int rc = sg_kube_get_path(d->kube, SG_JWKS_KUBE_DISCOVERY_PATH, &po, &doc, &len);
	if (rc < 0)
		return annotate(rc, "JWKS discovery: cannot fetch the OIDC discovery document from the API server");
	rc = sg_jwks_kube_parse_discovery(doc, len, d->issuer, sizeof(d->issuer));
	if (rc < 0)
		return annotate(rc, "JWKS discovery: the API server's " SG_JWKS_KUBE_DISCOVERY_PATH " is unusable");
	return SG_OK;
}

/* Fetches the JWKS; pushes it when it differs from the set in use (the
 * first one creates the source). Caller holds fetch_mu. */
static int fetch_jwks(sg_jwks_kube *d, bool *changed)
{
	*changed = false;
	uint8_t *body SG_AUTOFREE = NULL;
	size_t len = 0;
	sg_kube_path_opts po = {.max = SG_JWKS_MAX, .stop = &d->stop};
	int rc = sg_kube_get_path(d->kube, SG_JWKS_KUBE_JWKS_PATH, &po, &body, &len);
	if (rc < 0)
		return annotate(rc, "JWKS discovery: cannot fetch the JWKS from the API server");
	uint8_t h[32];
	SG_TRY(sg_sha256(body, len, h));
	if (d->keys && memcmp(h, d->digest, sizeof(h)) == 0)
		return SG_OK; /* byte-identical: keep the set, its generation and the cache */
	sg_jwks *k = NULL;
	rc = sg_jwks_parse(&k, body, len);
	if (rc < 0)
		return annotate(rc, "JWKS discovery: the API server's " SG_JWKS_KUBE_JWKS_PATH " is unusable");
	(void)sg_jwks_prepare(k); /* before the source shares it */
	rc = d->keys ? sg_jwks_file_set(d->keys, k) : sg_jwks_file_new_pushed(&d->keys, k);
	size_t n = sg_jwks_count(k);
	sg_jwks_release(k); /* the source holds its own reference */
	SG_TRY(rc);
	memcpy(d->digest, h, sizeof(h));
	atomic_store(&d->nkeys, n);
	*changed = true;
	return SG_OK;
}

/* One fetch with its bookkeeping: stats, log line, old keys on failure. */
static int refresh_once(sg_jwks_kube *d, bool initial)
{
	pthread_mutex_lock(&d->fetch_mu);
	atomic_fetch_add(&d->fetches, 1);
	bool changed = false;
	int rc = fetch_jwks(d, &changed);
	int64_t now = sg_wall_seconds();
	if (rc == SG_OK) {
		atomic_store(&d->consecutive, 0);
		atomic_store(&d->last_success, now);
		if (changed && !initial) {
			atomic_fetch_add(&d->updates, 1);
			sg_log(SG_LOG_INFO, "JWKS from the API server changed; new keys in use",
			       SG_F_INT("keys", atomic_load(&d->nkeys)), SG_F_END);
		}
	} else if (!initial && !atomic_load(&d->stop)) { /* a fetch cut short by free() is no failure */
		atomic_fetch_add(&d->failures, 1);
		uint64_t n = atomic_fetch_add(&d->consecutive, 1) + 1;
		atomic_store(&d->last_failure, now);
		sg_log(SG_LOG_WARN, "JWKS refresh from the API server failed; keeping the previous keys",
		       SG_F_STR("error", sg_error_last()->msg), SG_F_INT("consecutive_failures", n), SG_F_END);
	}
	pthread_mutex_unlock(&d->fetch_mu);
	return rc;
}

/* ---- the refresher ---- */

static uint64_t delay_ms(const sg_jwks_kube *d, uint64_t failures)
{
	if (failures == 0)
		return (uint64_t)d->refresh_s * 1000u;
	unsigned shift = failures - 1 > BACKOFF_SHIFT_MAX ? BACKOFF_SHIFT_MAX : (unsigned)(failures - 1);
	uint64_t s = (uint64_t)d->min_refresh_s << shift;
	return (s < (uint64_t)d->refresh_s ? s : (uint64_t)d->refresh_s) * 1000u;
}

static struct timespec mono_after(uint64_t ms)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += (time_t)(ms / 1000u);
	t.tv_nsec += (long)(ms % 1000u) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

static void *refresher(void *arg)
{
	sg_jwks_kube *d = arg;
	uint64_t failures = 0;
	pthread_mutex_lock(&d->mu);
	while (!d->stopping) {
		struct timespec until = mono_after(delay_ms(d, failures));
		int w = 0;
		while (!d->stopping && w != ETIMEDOUT)
			w = pthread_cond_timedwait(&d->cv, &d->mu, &until);
		if (d->stopping)
			break;
		pthread_mutex_unlock(&d->mu);
		failures = refresh_once(d, false) == SG_OK ? 0 : failures + 1;
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* ---- life cycle ---- */

static int check_options(const sg_jwks_kube_options *o, int *refresh, int *min_refresh)
{
	SG_ENSURE(o && o->kube, SG_EINVAL, "JWKS discovery needs a Kubernetes client");
	int r = o->refresh_seconds ? o->refresh_seconds : SG_JWKS_KUBE_REFRESH_DEFAULT;
	SG_ENSURE(r >= 1 && r <= SG_JWKS_KUBE_REFRESH_MAX, SG_EINVAL, "JWKS refresh interval must be 1..%d seconds",
	          SG_JWKS_KUBE_REFRESH_MAX);
	int m = o->min_refresh_seconds;
	if (m == 0)
		m = SG_JWKS_KUBE_MIN_REFRESH_DEFAULT < r ? SG_JWKS_KUBE_MIN_REFRESH_DEFAULT : r;
	SG_ENSURE(m >= 1 && m <= r, SG_EINVAL, "JWKS minimum refresh interval must be 1..%d s (the refresh interval)",
	          r);
	*refresh = r;
	*min_refresh = m;
	return SG_OK;
}

int sg_jwks_kube_new(sg_jwks_kube **out, const sg_jwks_kube_options *o)
{
	*out = NULL;
	int refresh = 0, min_refresh = 0; /* set by check_options on success */
	SG_TRY(check_options(o, &refresh, &min_refresh));
	sg_jwks_kube *d = calloc(1, sizeof(*d));
	SG_ENSURE(d, SG_EINTERNAL, "out of memory");
	d->kube = o->kube;
	d->refresh_s = refresh;
	d->min_refresh_s = min_refresh;
	pthread_mutex_init(&d->fetch_mu, NULL);
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cv, &ca);
	pthread_condattr_destroy(&ca);
	atomic_init(&d->stop, false);

	int rc = discover(d);
	if (rc == SG_OK)
		rc = refresh_once(d, true);
	if (rc == SG_OK) {
		int e = pthread_create(&d->thread, NULL, refresher, d);
		if (e == 0)
			d->started = true;
		else
			rc = sg_error_set(SG_EINTERNAL, "JWKS discovery: cannot start the refresher: %s", strerror(e));
	}
	if (rc != SG_OK) {
		sg_jwks_kube_free(d);
		return rc;
	}
	sg_log(SG_LOG_INFO, "JWKS discovered from the API server", SG_F_STR("issuer", d->issuer),
	       SG_F_INT("keys", atomic_load(&d->nkeys)), SG_F_INT("refresh_seconds", d->refresh_s), SG_F_END);
	*out = d;
	return SG_OK;
}

void sg_jwks_kube_free(sg_jwks_kube *d)
{
	if (!d)
		return;
	if (d->started) {
		pthread_mutex_lock(&d->mu);
		d->stopping = true;
		atomic_store(&d->stop, true);
		pthread_cond_signal(&d->cv);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
	}
	sg_jwks_file_free(d->keys);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	pthread_mutex_destroy(&d->fetch_mu);
	free(d);
}

const char *sg_jwks_kube_issuer(const sg_jwks_kube *d)
{
	return d->issuer;
}

sg_jwks_file *sg_jwks_kube_source(sg_jwks_kube *d)
{
	return d->keys;
}

int sg_jwks_kube_refresh(sg_jwks_kube *d)
{
	return refresh_once(d, false);
}

void sg_jwks_kube_stats_get(const sg_jwks_kube *d, sg_jwks_kube_stats *out)
{
	/* const in the contract; the atomics are only read. */
	sg_jwks_kube *m = (sg_jwks_kube *)d;
	memset(out, 0, sizeof(*out));
	out->fetches = atomic_load(&m->fetches);
	out->failures = atomic_load(&m->failures);
	out->updates = atomic_load(&m->updates);
	out->consecutive_failures = atomic_load(&m->consecutive);
	out->last_success = atomic_load(&m->last_success);
	out->last_failure = atomic_load(&m->last_failure);
	out->generation = sg_jwks_file_poll(m->keys);
	out->keys = atomic_load(&m->nkeys);
}
