/*
 * sg_jwks: JSON Web Key Sets (RFC 7517) as served by the Kubernetes API
 * server at /openid/v1/jwks, the signature half of JWS (RFC 7515 / RFC 7518
 * §3), base64url, and a JWKS file that reloads itself. Together with
 * sg_jwt.c this is the jansson adapter of signet; the keys and the
 * signature arithmetic are signer's (sg_jwk.h), which is where OpenSSL is.
 *
 * Shape: a key set is parsed once into immutable keys (sg_jwk: ~35 µs per
 * key, paid at load time, never per request) and shared by reference
 * count. A request therefore pays only the verification. A set that goes
 * into service is also prepared (sg_jwks_prepare: a table per P-256 key,
 * ~15 ms each, for cheaper ES256 verifications); sg_jwks_parse alone does
 * not, so that parsing stays cheap for those who only check a document.
 * A set is strict about what it cannot use safely: a malformed or weak key
 * of a type we support fails the whole set (an operator error worth
 * surfacing; on reload the old keys stay), while keys meant for something
 * else (use != "sig", unknown kty/alg) are skipped.
 *
 * The file source answers sg_jwks_file_get with one atomic load of a
 * timestamp; once per second one caller (the one that wins a CAS on the
 * timestamp) stats the file and reloads when its identity (inode, size,
 * mtime) changed. The current set is swapped under a mutex that readers
 * hold only for a pointer load and a reference increment, which is what
 * makes the reference safe to take. A broken file is remembered by identity
 * so that it is parsed and logged once, not every second.
 *
 * The same object is also the pushed source (no path): its keys change only
 * when a writer calls sg_jwks_file_set, e.g. the API-server discovery in
 * sg_jwks_kube.c. Keeping one type rather than a "source" interface keeps
 * the verifier and its callers unchanged, and the swap, the generation and
 * the readers' locking are the file source's, so both kinds behave alike
 * under concurrency: a reader sees the old set or the new one, never
 * neither, and a new generation makes the verifier's cached entries misses.
 */
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_jwk.h"
#include "sg_jwt.h"
#include "sg_log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- algorithms and keys ---- */

/* RFC 7518 §3.1: each JWS algorithm is a key kind, a signature scheme and
 * a hash; an ES algorithm also fixes the curve, by its coordinate size. */
static const struct alg_info {
	const char *name;
	sg_pubkey_kind kind;
	sg_jwk_scheme scheme;
	sg_hash hash;
	size_t ec_bytes;
} algs[SG_JWS_ALG_COUNT] = {
    [SG_JWS_RS256] = {"RS256", SG_PUBKEY_RSA, SG_JWK_RSA_PKCS1, SG_HASH_SHA256, 0},
    [SG_JWS_RS384] = {"RS384", SG_PUBKEY_RSA, SG_JWK_RSA_PKCS1, SG_HASH_SHA384, 0},
    [SG_JWS_RS512] = {"RS512", SG_PUBKEY_RSA, SG_JWK_RSA_PKCS1, SG_HASH_SHA512, 0},
    [SG_JWS_PS256] = {"PS256", SG_PUBKEY_RSA, SG_JWK_RSA_PSS, SG_HASH_SHA256, 0},
    [SG_JWS_PS384] = {"PS384", SG_PUBKEY_RSA, SG_JWK_RSA_PSS, SG_HASH_SHA384, 0},
    [SG_JWS_PS512] = {"PS512", SG_PUBKEY_RSA, SG_JWK_RSA_PSS, SG_HASH_SHA512, 0},
    [SG_JWS_ES256] = {"ES256", SG_PUBKEY_EC, SG_JWK_ECDSA, SG_HASH_SHA256, 32},
    [SG_JWS_ES384] = {"ES384", SG_PUBKEY_EC, SG_JWK_ECDSA, SG_HASH_SHA384, 48},
    [SG_JWS_ES512] = {"ES512", SG_PUBKEY_EC, SG_JWK_ECDSA, SG_HASH_SHA512, 66},
};

#define RSA_MIN_BITS 2048
#define RSA_MAX_BITS 8192
#define EC_COORD_MAX 66 /* P-521 */

bool sg_jws_alg_parse(const char *name, sg_jws_alg *out)
{
	for (int i = 0; i < SG_JWS_ALG_COUNT; i++) {
		if (strcmp(name, algs[i].name) == 0) {
			*out = (sg_jws_alg)i;
			return true;
		}
	}
	return false;
}

const char *sg_jws_alg_name(sg_jws_alg alg)
{
	return (unsigned)alg < SG_JWS_ALG_COUNT ? algs[alg].name : "?";
}

struct jwk {
	char kid[SG_JWT_KID_MAX + 1];
	bool has_kid;
	int alg;                 /* the key's own "alg" (sg_jws_alg), or -1 */
	sg_jwk *key;             /* immutable once parsed */
	const sg_jwk_info *info; /* the key's, borrowed */
};

struct sg_jwks {
	atomic_uint refs;
	uint64_t gen;
	size_t n;
	size_t ignored;
	struct jwk keys[SG_JWKS_KEYS_MAX];
};

static atomic_uint_fast64_t next_generation;

sg_jwks *sg_jwks_retain(sg_jwks *k)
{
	atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed);
	return k;
}

void sg_jwks_release(sg_jwks *k)
{
	if (!k || atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (size_t i = 0; i < k->n; i++)
		sg_jwk_free(k->keys[i].key);
	free(k);
}

size_t sg_jwks_count(const sg_jwks *k)
{
	return k->n;
}
size_t sg_jwks_ignored(const sg_jwks *k)
{
	return k->ignored;
}
uint64_t sg_jwks_generation(const sg_jwks *k)
{
	return k->gen;
}

size_t sg_jwks_prepare(sg_jwks *k)
{
	size_t done = 0, tried = 0;
	for (size_t i = 0; i < k->n && tried < SG_JWKS_PREPARED_MAX; i++) {
		sg_jwk *key = k->keys[i].key;
		const sg_jwk_info *info = k->keys[i].info;
		if (info->kind != SG_PUBKEY_EC || info->bits != 256)
			continue;
		tried++;
		if (sg_jwk_prepare(key) != SG_OK)
			sg_log(SG_LOG_WARN, "JWKS key kept unprepared: ES256 verifications with it cost more",
			       SG_F_STR("kid", k->keys[i].kid), SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		done += sg_jwk_prepared(key);
	}
	return done;
}

/* ---- JWKS parsing (RFC 7517 §4, §5; RFC 7518 §6) ---- */

/* json_decrefp (the cleanup helper) comes with jansson.h. */

/* Puts "JWKS key idx: " before the detail of a failure rc (sg_jwk's
 * messages carry no prefix), keeping rc. */
static int about_key(int rc, size_t idx)
{
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	return sg_error_set(rc, "JWKS key %zu: %s", idx, why);
}

/* A member that must be a string when present; NULL when absent. */
static int opt_string(json_t *obj, const char *name, size_t idx, const char **out)
{
	json_t *v = json_object_get(obj, name);
	*out = NULL;
	if (!v)
		return SG_OK;
	SG_ENSURE(json_is_string(v), SG_EINVAL, "JWKS key %zu: \"%s\" is not a string", idx, name);
	*out = json_string_value(v);
	return SG_OK;
}

/* Decodes a required base64url member into buf. */
static int b64_member(json_t *obj, const char *name, size_t idx, uint8_t *buf, size_t cap, size_t *len)
{
	const char *s;
	SG_TRY(opt_string(obj, name, idx, &s));
	SG_ENSURE(s, SG_EINVAL, "JWKS key %zu: \"%s\" is missing", idx, name);
	if (sg_b64url_decode(s, strlen(s), buf, cap, len) == SG_OK)
		return SG_OK;
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	SG_BAIL(SG_EINVAL, "JWKS key %zu: \"%s\": %s", idx, name, why);
}

static int parse_rsa(json_t *obj, size_t idx, struct jwk *k)
{
	uint8_t n[RSA_MAX_BITS / 8 + 1], e[8];
	size_t nlen, elen;
	SG_TRY(b64_member(obj, "n", idx, n, sizeof(n), &nlen));
	SG_TRY(b64_member(obj, "e", idx, e, sizeof(e), &elen));
	int rc = sg_jwk_new_rsa(&k->key, n, nlen, e, elen, RSA_MIN_BITS, RSA_MAX_BITS);
	return rc == SG_OK ? SG_OK : about_key(rc, idx);
}

static int parse_ec(json_t *obj, size_t idx, struct jwk *k)
{
	const char *crv;
	SG_TRY(opt_string(obj, "crv", idx, &crv));
	SG_ENSURE(crv, SG_EINVAL, "JWKS key %zu: \"crv\" is missing", idx);
	uint8_t x[EC_COORD_MAX], y[EC_COORD_MAX];
	size_t xlen, ylen;
	SG_TRY(b64_member(obj, "x", idx, x, sizeof(x), &xlen));
	SG_TRY(b64_member(obj, "y", idx, y, sizeof(y), &ylen));
	int rc = sg_jwk_new_ec(&k->key, crv, x, xlen, y, ylen);
	return rc == SG_OK ? SG_OK : about_key(rc, idx);
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if (*s < 0x21 || *s > 0x7e)
			return false;
	return true;
}

/* Whether the key's "key_ops" (RFC 7517 §4.3), when present, allows verify. */
static bool ops_allow_verify(json_t *obj)
{
	json_t *ops = json_object_get(obj, "key_ops");
	if (!ops)
		return true;
	size_t i;
	json_t *op;
	json_array_foreach(ops, i,
	                   op) if (json_is_string(op) && strcmp(json_string_value(op), "verify") == 0) return true;
	return false;
}

/* Parses one entry into k->keys[k->n] or counts it as ignored. */
static int parse_key(sg_jwks *set, json_t *obj, size_t idx)
{
	SG_ENSURE(json_is_object(obj), SG_EINVAL, "JWKS key %zu is not an object", idx);
	const char *kty, *use, *alg, *kid;
	SG_TRY(opt_string(obj, "kty", idx, &kty));
	SG_TRY(opt_string(obj, "use", idx, &use));
	SG_TRY(opt_string(obj, "alg", idx, &alg));
	SG_TRY(opt_string(obj, "kid", idx, &kid));
	SG_ENSURE(kty, SG_EINVAL, "JWKS key %zu: \"kty\" is missing", idx);
	sg_pubkey_kind t;
	if (strcmp(kty, "RSA") == 0)
		t = SG_PUBKEY_RSA;
	else if (strcmp(kty, "EC") == 0)
		t = SG_PUBKEY_EC;
	else
		goto ignore;
	if ((use && strcmp(use, "sig") != 0) || !ops_allow_verify(obj))
		goto ignore;
	sg_jws_alg a = SG_JWS_ALG_COUNT;
	if (alg && !sg_jws_alg_parse(alg, &a))
		goto ignore;
	SG_ENSURE(!json_object_get(obj, "d"), SG_EINVAL, "JWKS key %zu carries private key material", idx);
	SG_ENSURE(!kid || (strlen(kid) <= SG_JWT_KID_MAX && printable(kid)), SG_EINVAL,
	          "JWKS key %zu: \"kid\" is longer than %d bytes or not printable", idx, SG_JWT_KID_MAX);

	struct jwk *k = &set->keys[set->n];
	memset(k, 0, sizeof(*k));
	k->alg = alg ? (int)a : -1;
	if (kid) {
		k->has_kid = true;
		memcpy(k->kid, kid, strlen(kid) + 1);
	}
	SG_TRY(t == SG_PUBKEY_RSA ? parse_rsa(obj, idx, k) : parse_ec(obj, idx, k));
	k->info = sg_jwk_get_info(k->key);
	set->n++; /* from here the set owns k->key */
	if (alg) {
		const struct alg_info *ai = &algs[a];
		SG_ENSURE(ai->kind == t && (t == SG_PUBKEY_RSA || ai->ec_bytes == k->info->size), SG_EINVAL,
		          "JWKS key %zu: alg %s does not fit kty %s", idx, ai->name, kty);
	}
	return SG_OK;
ignore:
	set->ignored++;
	return SG_OK;
}

int sg_jwks_parse(sg_jwks **out, const void *json, size_t len)
{
	*out = NULL;
	SG_ENSURE(len <= SG_JWKS_MAX, SG_EINVAL, "JWKS is %zu bytes, more than %u", len, SG_JWKS_MAX);
	json_error_t jerr;
	json_t *root SG_CLEANUP(json_decrefp) = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	SG_ENSURE(root, SG_EINVAL, "JWKS is not valid JSON: %s (line %d)", jerr.text, jerr.line);
	SG_ENSURE(json_is_object(root), SG_EINVAL, "JWKS is not a JSON object");
	json_t *keys = json_object_get(root, "keys");
	SG_ENSURE(json_is_array(keys), SG_EINVAL, "JWKS has no \"keys\" array");
	size_t n = json_array_size(keys);
	SG_ENSURE(n <= SG_JWKS_KEYS_MAX, SG_EINVAL, "JWKS has %zu keys, more than %d", n, SG_JWKS_KEYS_MAX);

	sg_jwks *set = calloc(1, sizeof(*set));
	SG_ENSURE(set, SG_EINTERNAL, "out of memory");
	atomic_init(&set->refs, 1);
	int rc = SG_OK;
	for (size_t i = 0; i < n && rc == SG_OK; i++)
		rc = parse_key(set, json_array_get(keys, i), i);
	if (rc == SG_OK && set->n == 0)
		rc = sg_error_set(SG_EINVAL, "JWKS has no usable key (%zu ignored)", set->ignored);
	if (rc != SG_OK) {
		sg_jwks_release(set);
		return rc;
	}
	set->gen = atomic_fetch_add(&next_generation, 1) + 1;
	*out = set;
	return SG_OK;
}

/* ---- signatures (RFC 7518 §3.3, §3.4, §3.5) ---- */

static bool key_fits(const struct jwk *k, sg_jws_alg alg)
{
	const struct alg_info *a = &algs[alg];
	return k->info->kind == a->kind && (a->kind == SG_PUBKEY_RSA || k->info->size == a->ec_bytes) &&
	       (k->alg < 0 || k->alg == (int)alg);
}

/* The key fits alg (key_fits); the length is checked here, where the
 * algorithm has a name for the message. */
static int verify_one(const struct jwk *k, sg_jws_alg alg, const uint8_t *msg, size_t msg_len, const uint8_t *sig,
                      size_t sig_len)
{
	const struct alg_info *a = &algs[alg];
	if (a->kind == SG_PUBKEY_EC)
		SG_ENSURE(sig_len == 2 * a->ec_bytes, SG_EAUTH, "token signature has %zu bytes, %s needs %zu", sig_len,
		          a->name, 2 * a->ec_bytes);
	else
		SG_ENSURE(sig_len == k->info->size, SG_EAUTH, "token signature has %zu bytes, the key needs %zu",
		          sig_len, k->info->size);
	int rc = sg_jwk_verify(k->key, a->scheme, a->hash, msg, msg_len, sig, sig_len);
	if (rc != SG_EAUTH)
		return rc;
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	SG_BAIL(SG_EAUTH, "token %s", why); /* "token signature does not verify" */
}

static void describe(const struct jwk *k, char *buf, size_t cap)
{
	if (k->info->kind == SG_PUBKEY_EC)
		snprintf(buf, cap, "EC %s%s%s", k->info->crv, k->alg >= 0 ? ", alg " : "",
		         k->alg >= 0 ? algs[k->alg].name : "");
	else
		snprintf(buf, cap, "RSA%s%s", k->alg >= 0 ? ", alg " : "", k->alg >= 0 ? algs[k->alg].name : "");
}

int sg_jwks_verify(const sg_jwks *set, sg_jws_alg alg, const char *kid, const uint8_t *msg, size_t msg_len,
                   const uint8_t *sig, size_t sig_len)
{
	SG_ENSURE((unsigned)alg < SG_JWS_ALG_COUNT, SG_EAUTH, "token alg is not accepted");
	const struct jwk *named = NULL;
	int rc = SG_EAUTH;
	bool tried = false;
	for (size_t i = 0; i < set->n; i++) {
		const struct jwk *k = &set->keys[i];
		if (kid) {
			if (!k->has_kid || strcmp(k->kid, kid) != 0)
				continue;
			named = k;
		}
		if (!key_fits(k, alg))
			continue;
		tried = true;
		rc = verify_one(k, alg, msg, msg_len, sig, sig_len);
		if (rc == SG_OK || rc != SG_EAUTH)
			return rc;
	}
	if (tried)
		return rc; /* the detail of the last key tried */
	if (kid && !named)
		SG_BAIL(SG_EAUTH, "token kid \"%.64s\" is not in the JWKS", kid);
	if (named) {
		char d[48];
		describe(named, d, sizeof(d));
		SG_BAIL(SG_EAUTH, "token alg %s does not match key \"%.64s\" (%s)", algs[alg].name, kid, d);
	}
	SG_BAIL(SG_EAUTH, "the JWKS has no key for token alg %s", algs[alg].name);
}

/* ---- the file source ---- */

/* set: a check happened; exists: the file was there (else only set). */
struct file_id {
	bool set;
	bool exists;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim;
};

struct sg_jwks_file {
	char *path;           /* NULL: a pushed source (sg_jwks_file_set) */
	pthread_mutex_t lock; /* guards cur: readers hold it for a load + retain */
	sg_jwks *cur;
	pthread_mutex_t reload; /* one reloader at a time; guards the fields below */
	struct file_id loaded;
	struct file_id failed;
	sg_error failed_err;
	atomic_uint_fast64_t checked_ms;
	atomic_uint_fast64_t gen;
};

static struct file_id id_of(const struct stat *st)
{
	struct file_id id = {true, true, st->st_dev, st->st_ino, st->st_size, st->st_mtim};
	return id;
}

static bool same_id(const struct file_id *a, const struct file_id *b)
{
	if (!a->set || !b->set || a->exists != b->exists)
		return false;
	return !a->exists || (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	                      a->mtim.tv_sec == b->mtim.tv_sec && a->mtim.tv_nsec == b->mtim.tv_nsec);
}

static uint64_t mono_ms(void)
{
	return sg_now_ns() / 1000000u;
}

static void fd_closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

/* Reads and parses path; *id is the identity of what was read. */
static int load(const char *path, sg_jwks **out, struct file_id *id)
{
	int fd SG_CLEANUP(fd_closep) = open(path, O_RDONLY | O_CLOEXEC);
	SG_ENSURE(fd >= 0, errno == ENOENT ? SG_ENOTFOUND : SG_EINVAL, "cannot open JWKS %s: %s", path,
	          strerror(errno));
	struct stat st;
	SG_ENSURE(fstat(fd, &st) == 0 && S_ISREG(st.st_mode), SG_EINVAL, "JWKS %s is not a regular file", path);
	*id = id_of(&st);
	SG_ENSURE(st.st_size <= (off_t)SG_JWKS_MAX, SG_EINVAL, "JWKS %s is larger than %u bytes", path, SG_JWKS_MAX);
	/* One byte of slack: growth during the read shows up as too large. */
	size_t cap = (size_t)st.st_size + 1, len = 0;
	char *buf SG_AUTOFREE = malloc(cap);
	SG_ENSURE(buf, SG_EINTERNAL, "out of memory");
	for (;;) {
		ssize_t r = read(fd, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		SG_ENSURE(r >= 0, SG_EINVAL, "cannot read JWKS %s: %s", path, strerror(errno));
		if (r == 0)
			break;
		len += (size_t)r;
		SG_ENSURE(len < cap, SG_EINVAL, "JWKS %s grew while being read", path);
	}
	int rc = sg_jwks_parse(out, buf, len);
	if (rc == SG_OK) {
		(void)sg_jwks_prepare(*out);
		return SG_OK;
	}
	char why[SG_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sg_error_last()->msg);
	SG_BAIL(rc, "JWKS %s: %s", path, why);
}

static void swap_in(sg_jwks_file *f, sg_jwks *k)
{
	pthread_mutex_lock(&f->lock);
	sg_jwks *old = f->cur;
	f->cur = k;
	atomic_store_explicit(&f->gen, k->gen, memory_order_release);
	pthread_mutex_unlock(&f->lock);
	sg_jwks_release(old);
}

/* Stats the file and reloads it when it changed. */
static int check(sg_jwks_file *f)
{
	int rc = SG_OK;
	struct stat st;
	struct file_id now_id = {.set = true, .exists = false};
	if (stat(f->path, &st) == 0)
		now_id = id_of(&st);
	pthread_mutex_lock(&f->reload);
	if (same_id(&now_id, &f->loaded))
		goto unlock;
	if (same_id(&now_id, &f->failed)) {
		sg_error_restore(&f->failed_err);
		rc = f->failed_err.code;
		goto unlock;
	}
	sg_jwks *k = NULL;
	struct file_id read_id = now_id;
	rc = load(f->path, &k, &read_id);
	if (rc != SG_OK) {
		/* Keep serving the old keys; remember this file to log it once. */
		f->failed = read_id;
		sg_error_save(&f->failed_err);
		sg_log(SG_LOG_WARN, "JWKS reload failed; keeping the previous keys", SG_F_STR("path", f->path),
		       SG_F_STR("error", sg_error_last()->msg), SG_F_END);
		goto unlock;
	}
	f->loaded = read_id;
	f->failed.set = false;
	sg_log(SG_LOG_INFO, "JWKS reloaded", SG_F_STR("path", f->path), SG_F_INT("keys", k->n),
	       SG_F_INT("ignored", k->ignored), SG_F_END);
	swap_in(f, k);
unlock:
	pthread_mutex_unlock(&f->reload);
	return rc;
}

int sg_jwks_file_new(sg_jwks_file **out, const char *path)
{
	*out = NULL;
	sg_jwks_file *f = calloc(1, sizeof(*f));
	SG_ENSURE(f, SG_EINTERNAL, "out of memory");
	f->path = strdup(path);
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->reload, NULL);
	atomic_init(&f->checked_ms, mono_ms());
	int rc = f->path ? load(path, &f->cur, &f->loaded) : sg_error_set(SG_EINTERNAL, "out of memory");
	if (rc != SG_OK) {
		sg_jwks_file_free(f);
		return rc;
	}
	atomic_init(&f->gen, f->cur->gen);
	*out = f;
	return SG_OK;
}

int sg_jwks_file_new_pushed(sg_jwks_file **out, sg_jwks *initial)
{
	*out = NULL;
	SG_ENSURE(initial, SG_EINVAL, "a pushed JWKS source needs an initial key set");
	sg_jwks_file *f = calloc(1, sizeof(*f));
	SG_ENSURE(f, SG_EINTERNAL, "out of memory");
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->reload, NULL);
	f->cur = sg_jwks_retain(initial);
	atomic_init(&f->checked_ms, mono_ms());
	atomic_init(&f->gen, initial->gen);
	*out = f;
	return SG_OK;
}

int sg_jwks_file_set(sg_jwks_file *f, sg_jwks *keys)
{
	SG_ENSURE(!f->path, SG_EINVAL, "JWKS %s follows its file; keys cannot be pushed to it", f->path);
	SG_ENSURE(keys, SG_EINVAL, "no key set to push");
	/* reload serialises writers; under it, cur changes only here. */
	pthread_mutex_lock(&f->reload);
	if (f->cur != keys)
		swap_in(f, sg_jwks_retain(keys));
	pthread_mutex_unlock(&f->reload);
	return SG_OK;
}

bool sg_jwks_file_is_pushed(const sg_jwks_file *f)
{
	return f->path == NULL;
}

uint64_t sg_jwks_file_poll(sg_jwks_file *f)
{
	if (!f->path) /* pushed: nothing to look at, the writer swaps */
		return atomic_load_explicit(&f->gen, memory_order_acquire);
	uint_fast64_t now = mono_ms();
	uint_fast64_t last = atomic_load_explicit(&f->checked_ms, memory_order_relaxed);
	if (now - last >= 1000 && atomic_compare_exchange_strong(&f->checked_ms, &last, now)) {
		/* A background reload must not clobber the caller's error detail. */
		sg_error saved;
		sg_error_save(&saved);
		(void)check(f);
		sg_error_restore(&saved);
	}
	return atomic_load_explicit(&f->gen, memory_order_acquire);
}

sg_jwks *sg_jwks_file_get(sg_jwks_file *f)
{
	(void)sg_jwks_file_poll(f);
	pthread_mutex_lock(&f->lock);
	sg_jwks *k = sg_jwks_retain(f->cur);
	pthread_mutex_unlock(&f->lock);
	return k;
}

int sg_jwks_file_refresh(sg_jwks_file *f)
{
	if (!f->path)
		return SG_OK;
	atomic_store(&f->checked_ms, mono_ms());
	return check(f);
}

void sg_jwks_file_free(sg_jwks_file *f)
{
	if (!f)
		return;
	sg_jwks_release(f->cur);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->reload);
	free(f->path);
	free(f);
}
