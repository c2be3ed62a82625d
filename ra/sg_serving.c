/*
 * Serving certificate lifecycle (see sg_serving.h).
 *
 * The self-issued certificate goes through the same signer pool as every
 * other certificate (profile generic, serverAuth), so it is linted, signed
 * in the HSM and audited like the rest. Key and CSR are made with OpenSSL
 * here: this runs once an hour, not per request.
 */
#include "sg_serving.h"
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_issuer.h"
#include "sg_log.h"
#include "sg_secret.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE (1 << 20)

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
};

void sg_serving_wipe_free(char *pem)
{
	if (pem) {
		sg_wipe(pem, strlen(pem));
		free(pem);
	}
}

static char *bio_string(BIO *b)
{
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s) {
		memcpy(s, p, (size_t)n);
		s[n] = 0;
	}
	return s;
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

/* A new P-256 key and a CSR for the DNS names, as PEM. */
static int make_key_and_csr(const char *dns_names, char **key_pem, char **csr_pem)
{
	int rc = SG_EINTERNAL;
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509_REQ *req = X509_REQ_new();
	STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
	BIO *kb = BIO_new(BIO_s_secmem()), *cb = BIO_new(BIO_s_mem());
	char *san = malloc(strlen(dns_names) * 5 + 16); /* "a," becomes "DNS:a," */
	SG_ENSURE_GOTO(rc, k && req && exts && kb && cb && san, out, SG_EINTERNAL, "out of memory");
	/* "a,b" -> "DNS:a,DNS:b" */
	size_t o = 0;
	for (const char *p = dns_names; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len && *p == ' ')
			p++, len--;
		if (len) {
			o += (size_t)sprintf(san + o, "%sDNS:", o ? "," : "");
			memcpy(san + o, p, len);
			o += len;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	san[o] = 0;
	SG_ENSURE_GOTO(rc, o > 0, out, SG_EINVAL, "no serving certificate DNS names");
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san);
	SG_ENSURE_GOTO(rc, ext && sk_X509_EXTENSION_push(exts, ext), out, SG_EINVAL,
		       "bad serving certificate DNS names \"%s\"", dns_names);
	if (X509_REQ_set_pubkey(req, k) != 1 || X509_REQ_add_extensions(req, exts) != 1 ||
	    X509_REQ_sign(req, k, EVP_sha256()) <= 0 || PEM_write_bio_X509_REQ(cb, req) != 1 ||
	    PEM_write_bio_PrivateKey(kb, k, NULL, NULL, 0, NULL, NULL) != 1) {
		rc = sg_error_set_ossl(SG_EINTERNAL, "cannot make the serving key and CSR");
		goto out;
	}
	*key_pem = bio_string(kb);
	*csr_pem = bio_string(cb);
	rc = *key_pem && *csr_pem ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
out:
	free(san);
	BIO_free(kb);
	BIO_free(cb);
	sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
	X509_REQ_free(req);
	EVP_PKEY_free(k);
	return rc;
}

/* Issues through the pool; the TLS chain is the leaf and the intermediates
 * (the root bundle, the last chain element, is the client's to have). */
static int issue(sg_serving *s)
{
	char *key = NULL, *csr = NULL;
	SG_TRY(make_key_and_csr(s->dns_names, &key, &csr));
	sg_issue_request req = {
		.csr = (const uint8_t *)csr,
		.csr_len = strlen(csr),
		.profile = SG_PROFILE_GENERIC,
		.ttl = s->o.duration,
		.key_usage = SG_KU_DIGITAL_SIGNATURE | SG_KU_KEY_ENCIPHERMENT,
		.ext_key_usage = SG_EKU_SERVER_AUTH,
		.deadline_ns = sg_now_ns() + 30ull * 1000000000u,
	};
	sg_issue_result res;
	int rc = sg_pool_issue(s->o.pool, &req, &res);
	free(csr);
	if (rc < 0) {
		sg_serving_wipe_free(key);
		return rc;
	}
	size_t total = res.leaf_pem_len;
	for (size_t i = 0; i + 1 < res.chain_len; i++)
		total += res.chain_lens[i];
	char *chain = malloc(total + 1);
	if (!chain) {
		sg_issue_result_clear(&res);
		sg_serving_wipe_free(key);
		SG_BAIL(SG_EINTERNAL, "out of memory");
	}
	memcpy(chain, res.leaf_pem, res.leaf_pem_len);
	size_t off = res.leaf_pem_len;
	for (size_t i = 0; i + 1 < res.chain_len; i++) {
		memcpy(chain + off, res.chain[i], res.chain_lens[i]);
		off += res.chain_lens[i];
	}
	chain[off] = 0;
	install(s, chain, key, res.not_before, res.not_after);
	sg_log(SG_LOG_INFO, "serving certificate issued", SG_F_STR("serial", res.serial_hex),
	       SG_F_STR("dns", s->dns_names), SG_F_INT("not_after", res.not_after), SG_F_END);
	sg_issue_result_clear(&res);
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
	BIO *cb = BIO_new_mem_buf(chain, -1), *kb = BIO_new_mem_buf(key, -1);
	X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
	EVP_PKEY *k = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
	int ok = x && k && X509_check_private_key(x, k) == 1;
	int64_t na = 0;
	if (x) {
		int days = 0, secs = 0;
		ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
		if (epoch && ASN1_TIME_diff(&days, &secs, epoch, X509_get0_notAfter(x)))
			na = (int64_t)days * 86400 + secs;
		ASN1_TIME_free(epoch);
	}
	X509_free(x);
	EVP_PKEY_free(k);
	BIO_free(cb);
	BIO_free(kb);
	if (!ok) {
		free(chain);
		sg_serving_wipe_free(key);
		return sg_error_set_ossl(SG_EINVAL, "%s and %s are not a matching PEM certificate and key", s->o.cert_file,
					 s->o.key_file);
	}
	install(s, chain, key, 0, na);
	s->cert_mtime = cs.st_mtim; /* only tick() reads these, on one thread */
	s->key_mtime = ks.st_mtim;
	sg_log(SG_LOG_INFO, "serving certificate loaded", SG_F_STR("file", s->o.cert_file), SG_F_END);
	return SG_OK;
}

int sg_serving_new(sg_serving **out, const sg_serving_options *o)
{
	SG_ENSURE(!o->cert_file == !o->key_file, SG_EINVAL,
		  "serving-certificate-file and serving-key-file go together");
	sg_serving *s = calloc(1, sizeof(*s));
	SG_ENSURE(s, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&s->lock, NULL);
	s->o = *o;
	s->dns_names = strdup(o->dns_names ? o->dns_names : "");
	s->client_ca = strdup(o->client_ca_pem ? o->client_ca_pem : "");
	int rc = s->dns_names && s->client_ca ? SG_OK : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc == SG_OK)
		rc = o->cert_file ? load_files(s, true) : issue(s);
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
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int sg_serving_tick(sg_serving *s, int64_t now)
{
	if (s->o.cert_file)
		return load_files(s, false);
	pthread_mutex_lock(&s->lock);
	int64_t renew_at = s->not_before + (s->not_after - s->not_before) * 2 / 3;
	pthread_mutex_unlock(&s->lock);
	return now >= renew_at ? issue(s) : SG_OK;
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
