/*
 * hsm_fixture: the SoftHSM2 fixture shared by the sg_hsm test programs
 * (test_hsm.c, test_hsm_faults.c, test_hsm_failing.c, test_hsm_reinit.c,
 * test_hsm_probe.c).
 * Each case gets a private token directory with its own softhsm2.conf, the
 * PINs as sg_secrets, and the module's function list loaded through dlopen,
 * which is the same module instance sg_hsm uses, so a test can inspect or
 * disturb the token directly; a token can also be opened through a shim
 * module in front of SoftHSM2 (p11_fault, fault_module). Also the OpenSSL
 * side: verifying what sg_hsm signed and importing keys with C_CreateObject,
 * and the bookkeeping of signer threads. Kept in one place so the programs
 * test against the same setup. Header-only, as each test file is its own
 * program; every function is static and marked unused, so a program that
 * needs only some of them still builds under -Werror.
 */
#ifndef HSM_FIXTURE_H
#define HSM_FIXTURE_H

#include "p11_fault_control.h"
#include "sg_clock.h"
#include "sg_error.h"
#include "sg_hsm.h"
#include "sg_test.h"

#include <dirent.h>
#include <dlfcn.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <p11-kit/pkcs11.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- fixture: a private SoftHSM2 token directory per test case ---------- */

typedef struct fx {
	char dir[600];
	char conf[700];
	const char *module;
	sg_secret *pin;
	sg_secret *so;
	CK_FUNCTION_LIST_PTR f; /* the same module instance, for direct checks */
} fx;

static __attribute__((unused)) void rm_rf(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			char sub[1200];
			snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
			rm_rf(sub);
		}
		closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

static __attribute__((unused)) void fx_init(fx *x)
{
	memset(x, 0, sizeof(*x));
	const char *tmp = getenv("SIGNET_TEST_TMP");
	snprintf(x->dir, sizeof(x->dir), "%s/hsm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(x->dir)) {
		perror("mkdtemp");
		exit(2);
	}
	char tokens[700];
	snprintf(tokens, sizeof(tokens), "%s/tokens", x->dir);
	mkdir(tokens, 0700);
	snprintf(x->conf, sizeof(x->conf), "%s/softhsm2.conf", x->dir);
	FILE *fp = fopen(x->conf, "w");
	if (!fp) {
		perror("fopen");
		exit(2);
	}
	fprintf(fp, "directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n", tokens);
	fclose(fp);
	const char *m = getenv("SIGNET_SOFTHSM_MODULE");
	x->module = m && *m ? m : "/usr/lib/softhsm/libsofthsm2.so";
	if (sg_secret_new(&x->pin, "1234", 4) || sg_secret_new(&x->so, "5678", 4))
		exit(2);
	void *dl = dlopen(x->module, RTLD_NOW | RTLD_LOCAL);
	CK_C_GetFunctionList gfl = dl ? (CK_C_GetFunctionList)dlsym(dl, "C_GetFunctionList") : NULL;
	if (!gfl || gfl(&x->f) != CKR_OK) {
		fprintf(stderr, "cannot load %s\n", x->module);
		exit(2);
	}
}

static __attribute__((unused)) void fx_free(fx *x)
{
	sg_secret_free(x->pin);
	sg_secret_free(x->so);
	rm_rf(x->dir);
}

static __attribute__((unused)) int fx_token(fx *x, const char *label)
{
	return sg_hsm_init_token(x->module, x->conf, NULL, label, x->so, x->pin);
}

/* sg_hsm_open on x's token directory through module (SoftHSM2 itself or a
 * shim in front of it), with a first backoff of backoff_ms (0: the default). */
static __attribute__((unused)) int fx_open_on(fx *x, sg_hsm **h, const char *module, const char *token_uri,
                                              const char *key_uri, bool copy, bool allow_missing, unsigned backoff_ms)
{
	sg_hsm_options o = {
	    .module_path = module,
	    .token_uri = token_uri,
	    .key_uri = key_uri,
	    .pin = x->pin,
	    .softhsm_conf = x->conf,
	    .copy_key = copy,
	    .allow_missing_key = allow_missing,
	    .backoff_ms = backoff_ms,
	};
	return sg_hsm_open(h, &o);
}

/* sg_hsm_open on x's token directory through SoftHSM2, default backoff. */
static __attribute__((unused)) int fx_open(fx *x, sg_hsm **h, const char *token_uri, const char *key_uri, bool copy,
                                           bool allow_missing)
{
	return fx_open_on(x, h, x->module, token_uri, key_uri, copy, allow_missing, 0);
}

/* A new token labelled label, opened through module (copy and backoff_ms as
 * in fx_open_on) with a fresh EC P-256 key (id 42, object label). */
static __attribute__((unused)) bool fx_open_keyed(fx *x, sg_hsm **h, const char *module, const char *label, bool copy,
                                                  unsigned backoff_ms)
{
	char turi[96], kuri[96];
	snprintf(turi, sizeof(turi), "pkcs11:token=%s", label);
	snprintf(kuri, sizeof(kuri), "pkcs11:id=%%42;object=%s", label);
	if (fx_token(x, label) != 0)
		return false;
	if (fx_open_on(x, h, module, turi, kuri, copy, true, backoff_ms) != 0)
		return false;
	return sg_hsm_generate_key(*h, SG_KEY_EC_P256) == 0;
}

/* p11_fault's control file and event log (SIGNET_P11FAULT_CONTROL,
 * SIGNET_P11FAULT_LOG), in the case's token directory. */
static char fx_control[700];
static char fx_events[700];

/* Replaces the control file (p11_fault_control.h). */
static __attribute__((unused)) void fx_faults(const char *text)
{
	p11_fault_control(fx_control, text);
}

/* Whether the module's event log has a line starting with what. */
static __attribute__((unused)) bool fx_logged(const char *what)
{
	FILE *f = fopen(fx_events, "r");
	char line[256];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strncmp(line, what, strlen(what)) == 0;
	if (f)
		fclose(f);
	return found;
}

/* Points p11_fault at a control file and event log in x's directory, with
 * no fault in force. */
static __attribute__((unused)) void fx_faults_init(fx *x)
{
	snprintf(fx_control, sizeof(fx_control), "%s/faults", x->dir);
	snprintf(fx_events, sizeof(fx_events), "%s/fault-events", x->dir);
	setenv("SIGNET_P11FAULT_CONTROL", fx_control, 1);
	setenv("SIGNET_P11FAULT_LOG", fx_events, 1);
	fx_faults("");
}

/* h's health and counters, by value (to test one field in an expression). */
static __attribute__((unused)) sg_hsm_stats stats(const sg_hsm *h)
{
	sg_hsm_stats st;
	sg_hsm_stats_get(h, &st);
	return st;
}

/* Slot of the initialised token labelled label (module must be live). */
static __attribute__((unused)) CK_SLOT_ID fx_slot(fx *x, const char *label)
{
	CK_SLOT_ID slots[32];
	CK_ULONG n = 32;
	if (x->f->C_GetSlotList(CK_TRUE, slots, &n) != CKR_OK)
		return (CK_SLOT_ID)-1;
	for (CK_ULONG i = 0; i < n; i++) {
		CK_TOKEN_INFO ti;
		if (x->f->C_GetTokenInfo(slots[i], &ti) != CKR_OK || !(ti.flags & CKF_TOKEN_INITIALIZED))
			continue;
		size_t len = strlen(label);
		if (memcmp(ti.label, label, len) == 0 && (len == 32 || ti.label[len] == ' '))
			return slots[i];
	}
	return (CK_SLOT_ID)-1;
}

/* --- signing and verification with OpenSSL ----------------------------- */

static const uint8_t sha256_prefix[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                        0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};

/* Verifies sig (raw r||s for EC, PKCS#1 v1.5 for RSA) over digest. */
static __attribute__((unused)) bool verify(const uint8_t *spki, size_t spki_len, const uint8_t digest[32],
                                           const uint8_t *sig, size_t siglen)
{
	const uint8_t *p = spki;
	EVP_PKEY *pk = d2i_PUBKEY(NULL, &p, (long)spki_len);
	if (!pk || p != spki + spki_len) {
		EVP_PKEY_free(pk);
		return false;
	}
	uint8_t der[256];
	const uint8_t *vs = sig;
	size_t vlen = siglen;
	bool ec = EVP_PKEY_get_base_id(pk) == EVP_PKEY_EC;
	if (ec) {
		ECDSA_SIG *es = ECDSA_SIG_new();
		BIGNUM *r = BN_bin2bn(sig, (int)siglen / 2, NULL);
		BIGNUM *s = BN_bin2bn(sig + siglen / 2, (int)siglen / 2, NULL);
		ECDSA_SIG_set0(es, r, s);
		uint8_t *dp = der;
		int n = i2d_ECDSA_SIG(es, &dp);
		ECDSA_SIG_free(es);
		if (n <= 0) {
			EVP_PKEY_free(pk);
			return false;
		}
		vs = der;
		vlen = (size_t)n;
	}
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new(pk, NULL);
	bool ok = ctx && EVP_PKEY_verify_init(ctx) == 1;
	if (ok && !ec)
		ok = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1 &&
		     EVP_PKEY_CTX_set_signature_md(ctx, EVP_sha256()) == 1;
	ok = ok && EVP_PKEY_verify(ctx, vs, vlen, digest, 32) == 1;
	EVP_PKEY_CTX_free(ctx);
	EVP_PKEY_free(pk);
	return ok;
}

/* Builds the sg_hsm_sign input for digest: the digest (EC) or DigestInfo. */
static __attribute__((unused)) size_t sign_input(bool ec, const uint8_t digest[32], uint8_t *in)
{
	if (ec) {
		memcpy(in, digest, 32);
		return 32;
	}
	memcpy(in, sha256_prefix, sizeof(sha256_prefix));
	memcpy(in + sizeof(sha256_prefix), digest, 32);
	return sizeof(sha256_prefix) + 32;
}

/* Signs a fresh random digest through s; returns the sg_hsm_sign result and
 * sets *verified. */
static __attribute__((unused)) int sign_verify(sg_hsm *h, sg_hsm_session *s, uint64_t deadline, bool *verified)
{
	sg_key_type kt;
	*verified = false;
	if (sg_hsm_key_type(h, &kt))
		return -100;
	bool ec = sg_key_type_is_ec(kt);
	uint8_t digest[32], in[64], sig[512];
	RAND_bytes(digest, sizeof(digest));
	size_t inlen = sign_input(ec, digest, in), siglen = sizeof(sig);
	int rc = sg_hsm_sign(s, ec ? SG_HSM_ECDSA : SG_HSM_RSA_PKCS, in, inlen, sig, &siglen, deadline);
	if (rc == 0) {
		uint8_t *spki = NULL;
		size_t spki_len = 0;
		if (sg_hsm_public_key(h, &spki, &spki_len) == 0)
			*verified = verify(spki, spki_len, digest, sig, siglen);
		free(spki);
	}
	return rc;
}

/* Imports an OpenSSL EC P-256 key as a private and a public token object;
 * CKA_EC_POINT wrapped in an OCTET STRING (as the spec says) or raw (as some
 * modules store it). */
static __attribute__((unused)) CK_RV import_ec(fx *x, CK_SLOT_ID slot, const uint8_t *id, size_t idlen,
                                               const char *label, EVP_PKEY *pk, bool raw_point)
{
	static const uint8_t p256[] = {0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
	uint8_t d[32], pub[65], point[67];
	size_t publen = 0;
	BIGNUM *bn = NULL;
	if (EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_PRIV_KEY, &bn) != 1 || BN_bn2binpad(bn, d, 32) != 32)
		return CKR_GENERAL_ERROR;
	BN_clear_free(bn);
	if (EVP_PKEY_get_octet_string_param(pk, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub), &publen) != 1 ||
	    publen != 65)
		return CKR_GENERAL_ERROR;
	point[0] = 0x04;
	point[1] = 65;
	memcpy(point + 2, pub, 65);
	CK_OBJECT_CLASS cpriv = CKO_PRIVATE_KEY, cpub = CKO_PUBLIC_KEY;
	CK_KEY_TYPE kt = CKK_EC;
	CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
	CK_ATTRIBUTE priv[] = {
	    {CKA_CLASS, &cpriv, sizeof(cpriv)},
	    {CKA_KEY_TYPE, &kt, sizeof(kt)},
	    {CKA_TOKEN, &yes, sizeof(yes)},
	    {CKA_PRIVATE, &yes, sizeof(yes)},
	    {CKA_SENSITIVE, &yes, sizeof(yes)},
	    {CKA_SIGN, &yes, sizeof(yes)},
	    {CKA_EXTRACTABLE, &no, sizeof(no)},
	    {CKA_EC_PARAMS, (void *)p256, sizeof(p256)},
	    {CKA_VALUE, d, sizeof(d)},
	    {CKA_ID, (void *)id, idlen},
	    {CKA_LABEL, (void *)label, strlen(label)},
	};
	CK_ATTRIBUTE pubt[] = {
	    {CKA_CLASS, &cpub, sizeof(cpub)},
	    {CKA_KEY_TYPE, &kt, sizeof(kt)},
	    {CKA_TOKEN, &yes, sizeof(yes)},
	    {CKA_VERIFY, &yes, sizeof(yes)},
	    {CKA_EC_PARAMS, (void *)p256, sizeof(p256)},
	    {CKA_EC_POINT, raw_point ? point + 2 : point, raw_point ? 65 : sizeof(point)},
	    {CKA_ID, (void *)id, idlen},
	    {CKA_LABEL, (void *)label, strlen(label)},
	};
	CK_SESSION_HANDLE sh;
	CK_RV rv = x->f->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &sh);
	if (rv != CKR_OK)
		return rv;
	CK_OBJECT_HANDLE o;
	rv = x->f->C_CreateObject(sh, priv, sizeof(priv) / sizeof(priv[0]), &o);
	if (rv == CKR_OK)
		rv = x->f->C_CreateObject(sh, pubt, sizeof(pubt) / sizeof(pubt[0]), &o);
	x->f->C_CloseSession(sh);
	OPENSSL_cleanse(d, sizeof(d));
	return rv;
}

/* --- signer threads ---------------------------------------------------- */

/* One signing thread's record. Its body (signer_run, or a program's own)
 * signs through h until *stop and counts: ok signatures (ok_now the same,
 * readable while it runs), verified ones, errors, the unclean ones among
 * them (no session at all, a category below SG_EINTERNAL, or no detail)
 * and, where wanted, errors by code. */
typedef struct signer {
	sg_hsm *h;
	atomic_bool *stop;
	int ok, verified, errors, unclean;
	atomic_int ok_now;
	int codes[16]; /* errors by -rc & 15 */
} signer;

/* The sums over a run's signers. */
typedef struct signer_sum {
	int ok, verified, errors;
} signer_sum;

/* The plain signer body: one session, then signatures with a 3 s deadline
 * until *stop, counted in its signer. */
static __attribute__((unused)) void *signer_run(void *arg)
{
	signer *w = arg;
	sg_hsm_session *s = NULL;
	if (sg_hsm_session_open(&s, w->h) != 0) {
		w->errors++;
		w->unclean++;
		return NULL;
	}
	while (!atomic_load(w->stop)) {
		bool ok = false;
		int rc = sign_verify(w->h, s, sg_now_ns() + 3000000000u, &ok);
		if (rc == 0) {
			w->ok++;
			atomic_store(&w->ok_now, w->ok);
			w->verified += ok;
		} else {
			w->errors++;
			if (rc < SG_EINTERNAL || !sg_error_last()->msg[0])
				w->unclean++;
		}
	}
	sg_hsm_session_free(s);
	return NULL;
}

/* Starts n threads running body, each on its zeroed w[i], signing through h
 * until *stop; a check for each thread created. */
static __attribute__((unused)) void signers_start(signer *w, pthread_t *th, int n, sg_hsm *h, atomic_bool *stop,
                                                  void *(*body)(void *))
{
	memset(w, 0, sizeof(*w) * (size_t)n);
	for (int i = 0; i < n; i++) {
		w[i].h = h;
		w[i].stop = stop;
		SG_CHECK(pthread_create(&th[i], NULL, body, &w[i]) == 0);
	}
}

/* The deadline of a signature a case needs to succeed (a session's
 * recovery included): time enough on a loaded sanitizer build, and it
 * costs nothing when signing is fast. Cases that expect a failure keep
 * their own, shorter deadlines. */
#define SIGN_DEADLINE_NS 30000000000u

/* Signatures made so far by the n signers (readable while they run). */
static __attribute__((unused)) int signed_now(signer *w, int n)
{
	int sum = 0;
	for (int i = 0; i < n; i++)
		sum += atomic_load(&w[i].ok_now);
	return sum;
}

/* Sets *stop, joins the n threads and sums their counts; with each_clean,
 * checks that every one signed and had no unclean error. */
static __attribute__((unused)) signer_sum signers_stop(signer *w, pthread_t *th, int n, atomic_bool *stop,
                                                       bool each_clean)
{
	signer_sum sum = {0, 0, 0};
	atomic_store(stop, true);
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		sum.ok += w[i].ok;
		sum.verified += w[i].verified;
		sum.errors += w[i].errors;
		if (each_clean) {
			SG_CHECK(w[i].unclean == 0);
			SG_CHECK(w[i].ok > 0);
		}
	}
	return sum;
}

#endif
