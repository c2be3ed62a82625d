/*
 * Serving certificate lifecycle (see sg_serving.h).
 *
 * The self-issued certificate goes through the same signer pool as every
 * other certificate (profile generic, serverAuth), so it is linted, signed
 * in the HSM and audited like the rest. Key and CSR are made by the
 * signer (sg_softkey.h); served files are checked by it too (sg_x509.h),
 * so no OpenSSL is called from here.
 *
 * Without a pool (an RA without an HSM) the CSR goes to the forwarder
 * instead. One request at most is out at a time (pending), its key kept
 * here until the answer: the answer comes on the forwarder's thread and is
 * installed under the lock, so renewal costs the housekeeping thread one
 * submit. Only the first certificate is waited for (cond), since nothing
 * can be served without one.
 */
#include "sg_serving.h"
#include "sg_clock.h"
#include "sg_forward.h"
#include "sg_guard.h"
#include "sg_issuer.h"
#include "sg_log.h"
#include "sg_opt.h"
#include "sg_secret.h"
#include "sg_softkey.h"
#include "sg_x509.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE (1 << 20)
/* A forwarded request that failed is asked again this much later. */
#define FORWARD_RETRY_S 10

struct sg_serving {
	sg_serving_options o;
	char *dns_names;
	char *client_ca;
	pthread_mutex_t lock;
	char *chain; /* current material, replaced whole under lock */
	char *key;
	uint64_t version;
	int64_t not_before, not_after;
	struct timespec cert_mtime, key_mtime;
	/* Forwarded issuance (under lock): the key of the request that is out,
	 * whether one is, when a failed one may be asked again, and the
	 * first answer's outcome for sg_serving_new. */
	pthread_cond_t answered;
	char *pending_key;
	bool pending;
	int64_t retry_at;
	bool first_wait; /* sg_serving_new waits for the first answer */
	int first_rc;
	char first_err[SG_ERROR_MSG_MAX];
};

void sg_serving_wipe_free(char *pem)
{
	if (pem) {
		sg_wipe(pem, strlen(pem));
		free(pem);
	}
}

/* Makes chain and key (both taken over) the current material. */
static void install(sg_serving *s, char *chain, char *key, int64_t not_before, int64_t not_after)
{
	pthread_mutex_lock(&s->lock);
	free(s->chain);
	sg_serving_wipe_free(s->key);
	s->chain = chain;
	s->key = key;
	s->version++;
	s->not_before = not_before;
	s->not_after = not_after;
	pthread_mutex_unlock(&s->lock);
}

static const char *key_name(sg_softkey_type t)
{
	return t == SG_SOFTKEY_RSA ? "RSA" : "ECDSA";
}

static unsigned key_bits(const sg_serving_options *o)
{
	switch (o->key_type) {
	case SG_SOFTKEY_RSA: return o->rsa_bits;
	case SG_SOFTKEY_EC_P384: return 384;
	case SG_SOFTKEY_EC_P256: return 256;
	}
	return 0;
}

/* A key of the configured type and a serverAuth certificate for the DNS
 * names ("a,b"), issued through the pool; the chain served is the leaf and
 * the intermediates. An RSA key is made on the housekeeping thread too:
 * 2048 bits take milliseconds, 8192 can take seconds, during which only
 * housekeeping waits (the gRPC threads keep serving the current
 * certificate). */
static int issue(sg_serving *s)
{
	char *list SG_AUTOFREE = strdup(s->dns_names);
	SG_ENSURE(list, SG_EINTERNAL, "out of memory");
	const char *dns[SG_SOFTKEY_MAX_NAMES];
	size_t ndns = 0;
	SG_TRY(sg_opt_split_list(list, dns, SG_SOFTKEY_MAX_NAMES, &ndns, "serving certificate DNS names"));
	sg_softkey_request req = {
		.type = s->o.key_type,
		.rsa_bits = s->o.rsa_bits,
		.dns = dns,
		.ndns = ndns,
		.ttl = s->o.duration,
		.ext_key_usage = SG_EKU_SERVER_AUTH,
	};
	sg_softkey_result res;
	SG_TRY(sg_softkey_issue(s->o.pool, &req, &res));
	install(s, res.chain_pem, res.key_pem, res.not_before, res.not_after); /* takes both */
	sg_log(SG_LOG_INFO, "serving certificate issued", SG_F_STR("serial", res.serial_hex),
	       SG_F_STR("dns", s->dns_names), SG_F_STR("key", key_name(s->o.key_type)),
	       SG_F_INT("key_bits", key_bits(&s->o)), SG_F_INT("not_after", res.not_after), SG_F_END);
	res.chain_pem = res.key_pem = NULL;
	sg_softkey_result_clear(&res);
	return SG_OK;
}

/* The chain's first certificate and the key belong together; its facts. */
static int check_pair(const char *chain, const char *key, sg_x509_facts *facts);

/* The issuer's answer to the request that is out (the forwarder's thread):
 * installed when its leaf holds our key, else a failure retried later. */
static void on_forwarded(int rc, const char *chain_pem, size_t len, const sg_error *err, void *arg)
{
	(void)len;
	sg_serving *s = arg;
	pthread_mutex_lock(&s->lock);
	char *key = s->pending_key;
	s->pending_key = NULL;
	pthread_mutex_unlock(&s->lock);
	char why[SG_ERROR_MSG_MAX] = "";
	sg_x509_facts facts = {0};
	char *chain = NULL;
	if (rc == SG_OK) {
		chain = strdup(chain_pem);
		rc = chain ? check_pair(chain, key, &facts) : sg_error_set(SG_EINTERNAL, "out of memory");
		if (rc < 0)
			snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	} else {
		snprintf(why, sizeof(why), "%s", err ? err->msg : "unknown");
	}
	if (rc == SG_OK) {
		install(s, chain, key, facts.not_before, facts.not_after); /* takes both */
		sg_log(SG_LOG_INFO, "serving certificate issued", SG_F_STR("serial", facts.serial),
		       SG_F_STR("dns", s->dns_names), SG_F_STR("by", "cert-manager issuer"),
		       SG_F_STR("key", key_name(s->o.key_type)), SG_F_INT("key_bits", key_bits(&s->o)),
		       SG_F_INT("not_after", facts.not_after), SG_F_END);
	} else {
		free(chain);
		sg_serving_wipe_free(key);
		sg_log(SG_LOG_WARN, "the issuer did not issue the serving certificate; asking again later",
		       SG_F_STR("reason", why), SG_F_INT("retry_s", FORWARD_RETRY_S), SG_F_END);
	}
	pthread_mutex_lock(&s->lock);
	if (s->first_wait) {
		s->first_wait = false;
		s->first_rc = rc;
		snprintf(s->first_err, sizeof(s->first_err), "%s", why);
	}
	s->retry_at = rc == SG_OK ? 0 : sg_wall_seconds() + FORWARD_RETRY_S;
	s->pending = false;
	pthread_cond_broadcast(&s->answered);
	pthread_mutex_unlock(&s->lock);
}

/* A key and CSR for the DNS names, sent to the issuer; the answer comes to
 * on_forwarded. Nothing is sent while a request is out. */
static int ask_issuer(sg_serving *s)
{
	char *list SG_AUTOFREE = strdup(s->dns_names);
	SG_ENSURE(list, SG_EINTERNAL, "out of memory");
	const char *dns[SG_SOFTKEY_MAX_NAMES];
	size_t ndns = 0;
	SG_TRY(sg_opt_split_list(list, dns, SG_SOFTKEY_MAX_NAMES, &ndns, "serving certificate DNS names"));
	sg_softkey_request req = {.type = s->o.key_type, .rsa_bits = s->o.rsa_bits, .dns = dns, .ndns = ndns};
	char *key = NULL, *csr SG_AUTOFREE = NULL;
	SG_TRY(sg_softkey_csr(&req, true, &key, &csr));
	pthread_mutex_lock(&s->lock);
	bool busy = s->pending;
	if (!busy) {
		s->pending = true;
		s->pending_key = key;
	}
	pthread_mutex_unlock(&s->lock);
	if (busy) {
		sg_serving_wipe_free(key);
		return SG_OK;
	}
	/* The identity annotation says what is asked for: the DNS names, as
	 * an approver reading istio.cert-manager.io/identities sees them. */
	sg_forward_request fr = {
	    .csr_pem = csr, .csr_len = strlen(csr), .identity = s->dns_names, .ttl = s->o.duration};
	int rc = sg_forward_submit(s->o.forward, &fr, on_forwarded, s);
	if (rc < 0) {
		pthread_mutex_lock(&s->lock);
		s->pending = false;
		s->pending_key = NULL;
		s->retry_at = sg_wall_seconds() + FORWARD_RETRY_S;
		pthread_mutex_unlock(&s->lock);
		sg_serving_wipe_free(key);
	}
	return rc;
}

/* The first certificate through the forwarder: asked, then waited for (the
 * forwarder answers every request by its deadline). */
static int first_from_issuer(sg_serving *s)
{
	pthread_mutex_lock(&s->lock);
	s->first_wait = true;
	pthread_mutex_unlock(&s->lock);
	SG_TRY(ask_issuer(s));
	pthread_mutex_lock(&s->lock);
	while (s->first_wait)
		pthread_cond_wait(&s->answered, &s->lock);
	int rc = s->first_rc;
	pthread_mutex_unlock(&s->lock);
	SG_ENSURE(rc == SG_OK, rc, "the issuer did not issue the serving certificate (%s): %s", s->dns_names,
	          s->first_err);
	return SG_OK;
}

static int read_text(const char *path, char **out)
{
	FILE *f = fopen(path, "re");
	SG_ENSURE(f, SG_ENOTFOUND, "cannot open %s", path);
	char *buf = malloc(MAX_FILE + 1);
	size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
	fclose(f);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory");
	if (n == 0 || n > MAX_FILE) {
		free(buf);
		SG_BAIL(SG_EINVAL, "%s is empty or larger than %d bytes", path, MAX_FILE);
	}
	buf[n] = 0;
	*out = buf;
	return SG_OK;
}

static bool same_time(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static int check_pair(const char *chain, const char *key, sg_x509_facts *facts)
{
	sg_x509_bundle *b = NULL;
	SG_TRY(sg_x509_bundle_parse(&b, chain, strlen(chain)));
	sg_x509_keyinfo ki;
	int rc = sg_x509_key_check(b, 0, key, strlen(key), &ki);
	if (rc == SG_OK)
		rc = sg_x509_get_facts(b, 0, facts);
	sg_x509_bundle_free(b);
	return rc;
}

/* Loads the files when either changed; checks the key matches. */
static int load_files(sg_serving *s, bool force)
{
	struct stat cs, ks;
	SG_ENSURE(stat(s->o.cert_file, &cs) == 0 && stat(s->o.key_file, &ks) == 0, SG_ENOTFOUND,
		  "cannot stat %s or %s", s->o.cert_file, s->o.key_file);
	if (!force && same_time(cs.st_mtim, s->cert_mtime) && same_time(ks.st_mtim, s->key_mtime))
		return SG_OK;
	char *chain = NULL, *key = NULL;
	SG_TRY(read_text(s->o.cert_file, &chain));
	int rc = read_text(s->o.key_file, &key);
	if (rc < 0) {
		free(chain);
		return rc;
	}
	sg_x509_facts facts;
	rc = check_pair(chain, key, &facts);
	if (rc < 0) {
		free(chain);
		sg_serving_wipe_free(key);
		char why[SG_ERROR_MSG_MAX];
		snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
		SG_BAIL(rc, "%s and %s are not a matching PEM certificate and key: %s", s->o.cert_file, s->o.key_file,
			why);
	}
	install(s, chain, key, facts.not_before, facts.not_after);
	s->cert_mtime = cs.st_mtim; /* only tick() reads these, on one thread */
	s->key_mtime = ks.st_mtim;
	sg_log(SG_LOG_INFO, "serving certificate loaded", SG_F_STR("file", s->o.cert_file), SG_F_END);
	return SG_OK;
}

int sg_serving_new(sg_serving **out, const sg_serving_options *o)
{
	SG_ENSURE(!o->cert_file == !o->key_file, SG_EINVAL,
		  "serving-certificate-file and serving-key-file go together");
	SG_ENSURE(o->cert_file || o->pool || o->forward, SG_EINVAL,
	          "the serving certificate needs a signer pool, an issuer to forward to, or files");
	sg_serving *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->answered, NULL);
	s->o = *o;
	s->dns_names = strdup(o->dns_names ? o->dns_names : "");
	s->client_ca = strdup(o->client_ca_pem ? o->client_ca_pem : "");
	int rc = s->dns_names && s->client_ca ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK)
		rc = o->cert_file ? load_files(s, true) : o->pool ? issue(s) : first_from_issuer(s);
	if (rc < 0) {
		sg_serving_free(s);
		return rc;
	}
	*out = s;
	return SG_OK;
}

void sg_serving_free(sg_serving *s)
{
	if (!s)
		return;
	free(s->chain);
	sg_serving_wipe_free(s->key);
	free(s->dns_names);
	free(s->client_ca);
	sg_serving_wipe_free(s->pending_key);
	pthread_cond_destroy(&s->answered);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int sg_serving_tick(sg_serving *s, int64_t now)
{
	if (s->o.cert_file)
		return load_files(s, false);
	pthread_mutex_lock(&s->lock);
	int64_t renew_at = s->not_before + (s->not_after - s->not_before) * 2 / 3;
	bool wait = s->pending || now < s->retry_at;
	pthread_mutex_unlock(&s->lock);
	if (now < renew_at || (!s->o.pool && wait))
		return SG_OK;
	return s->o.pool ? issue(s) : ask_issuer(s);
}

int sg_serving_renew(sg_serving *s)
{
	return s->o.cert_file ? SG_OK : issue(s);
}

int sg_serving_reload(sg_serving *s, bool *reread)
{
	*reread = s->o.cert_file != NULL;
	return *reread ? load_files(s, true) : SG_OK;
}

int sg_serving_get(sg_serving *s, char **chain, char **key, char **client_ca, uint64_t *version)
{
	pthread_mutex_lock(&s->lock);
	*chain = strdup(s->chain);
	*key = strdup(s->key);
	*client_ca = strdup(s->client_ca);
	*version = s->version;
	pthread_mutex_unlock(&s->lock);
	if (!*chain || !*key || !*client_ca) {
		free(*chain);
		sg_serving_wipe_free(*key);
		free(*client_ca);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	return SG_OK;
}

int64_t sg_serving_not_after(sg_serving *s)
{
	pthread_mutex_lock(&s->lock);
	int64_t na = s->not_after;
	pthread_mutex_unlock(&s->lock);
	return na;
}

int sg_serving_set_client_ca(sg_serving *s, const char *pem)
{
	char *copy = strdup(pem ? pem : "");
	SG_ENSURE(copy, SG_EINTERNAL, "out of memory");
	pthread_mutex_lock(&s->lock);
	bool same = strcmp(copy, s->client_ca) == 0;
	char *old = same ? copy : s->client_ca;
	if (!same) {
		s->client_ca = copy;
		s->version++; /* the next handshake picks it up */
	}
	pthread_mutex_unlock(&s->lock);
	free(old);
	return SG_OK;
}
