/*
 * sg_hsm_provision: what a new CA makes on a token (sg_hsm.h:
 * sg_hsm_init_token, sg_hsm_generate_key; called by init/ for signetctl
 * init and signetd's embedded default). Run once per CA, never on the
 * signing path; apart from the adapter's core (sg_hsm.c) because it only
 * uses that core (module loading, login, key reading) and the core never
 * calls back into it. The key-pair template and its generation
 * (hsm_generate_pair) are shared with sg_hsm_check (sg_hsm_check.c), which
 * makes the same pair as session objects. sg_hsm_destroy_key is the
 * other end of a key's life (a rotation's finish), here for the same
 * reason.
 */
#include "sg_guard.h"
#include "sg_hsm_impl.h"
#include "sg_log.h"

#include <stdlib.h>
#include <string.h>

static void pad_label(CK_UTF8CHAR out[LABEL_LEN], const char *label)
{
	size_t n = strlen(label);
	memset(out, ' ', LABEL_LEN);
	memcpy(out, label, n < LABEL_LEN ? n : LABEL_LEN);
}

/* The slot whose initialised token carries label; SG_ENOTFOUND if none. */
static int find_labelled(CK_FUNCTION_LIST_PTR f, const CK_UTF8CHAR padded[LABEL_LEN], CK_SLOT_ID *slot,
                         bool *uninit_found, CK_SLOT_ID *uninit)
{
	CK_SLOT_ID *slots SG_AUTOFREE = NULL;
	CK_ULONG n = 0;
	SG_TRY(hsm_list_slots(f, &slots, &n));
	bool found = false;
	*uninit_found = false;
	for (CK_ULONG i = 0; i < n; i++) {
		CK_TOKEN_INFO ti;
		if (f->C_GetTokenInfo(slots[i], &ti) != CKR_OK)
			continue;
		if (!(ti.flags & CKF_TOKEN_INITIALIZED)) {
			if (!*uninit_found) {
				*uninit_found = true;
				*uninit = slots[i];
			}
		} else if (!found && memcmp(ti.label, padded, LABEL_LEN) == 0) {
			found = true;
			*slot = slots[i];
		}
	}
	return found ? SG_OK : SG_ENOTFOUND;
}

static int init_token(CK_FUNCTION_LIST_PTR f, const char *label, const sg_secret *so_pin, const sg_secret *user_pin)
{
	ckr_buf b;
	CK_UTF8CHAR padded[LABEL_LEN];
	pad_label(padded, label);
	CK_SLOT_ID slot = 0, empty = 0;
	bool have_empty = false;
	int rc = find_labelled(f, padded, &slot, &have_empty, &empty);
	if (rc == SG_OK)
		SG_BAIL(SG_EINVAL, "a token labelled '%s' exists already", label);
	if (rc != SG_ENOTFOUND)
		return rc;
	SG_ENSURE(have_empty, SG_ENOTFOUND, "no slot with an uninitialised token to initialise as '%s'", label);
	CK_RV rv = f->C_InitToken(empty, (CK_UTF8CHAR_PTR)sg_secret_data(so_pin), sg_secret_len(so_pin), padded);
	SG_ENSURE(rv == CKR_OK, hsm_ckr_category(rv) == SG_EBUSY ? SG_EHSM : hsm_ckr_category(rv),
	          "PKCS#11 C_InitToken for '%s': %s", label, hsm_ckr_name(rv, &b));
	/* SoftHSM2 moves the new token to a fresh slot id: look it up again. */
	rc = find_labelled(f, padded, &slot, &have_empty, &empty);
	if (rc == SG_ENOTFOUND)
		SG_BAIL(SG_EHSM, "token '%s' not found after C_InitToken", label);
	SG_TRY(rc);
	CK_SESSION_HANDLE sh;
	rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &sh);
	SG_ENSURE(rv == CKR_OK, SG_EHSM, "PKCS#11 C_OpenSession on token '%s': %s", label, hsm_ckr_name(rv, &b));
	const char *fn = "C_Login(SO)";
	rv = f->C_Login(sh, CKU_SO, (CK_UTF8CHAR_PTR)sg_secret_data(so_pin), sg_secret_len(so_pin));
	if (rv == CKR_OK) {
		fn = "C_InitPIN";
		rv = f->C_InitPIN(sh, (CK_UTF8CHAR_PTR)sg_secret_data(user_pin), sg_secret_len(user_pin));
		f->C_Logout(sh);
	}
	f->C_CloseSession(sh);
	SG_ENSURE(rv == CKR_OK, hsm_ckr_category(rv) == SG_EBUSY ? SG_EHSM : hsm_ckr_category(rv),
	          "PKCS#11 %s on token '%s': %s", fn, label, hsm_ckr_name(rv, &b));
	return SG_OK;
}

int sg_hsm_init_token(const char *module_path, const char *softhsm_conf, const char *init_reserved, const char *label,
                      const sg_secret *so_pin, const sg_secret *user_pin)
{
	SG_ENSURE(label && *label && strlen(label) <= LABEL_LEN, SG_EINVAL, "token label must have 1 to %d characters",
	          LABEL_LEN);
	SG_ENSURE(so_pin && user_pin && sg_secret_len(so_pin) > 0 && sg_secret_len(user_pin) > 0, SG_EINVAL,
	          "token initialisation needs an SO PIN and a user PIN");
	module *m = NULL;
	SG_TRY(hsm_module_acquire(&m, module_path ? module_path : SIGNET_SOFTHSM_MODULE, softhsm_conf, init_reserved));
	int rc = init_token(m->f, label, so_pin, user_pin);
	hsm_module_release(m);
	return rc;
}

void hsm_key_template_init(key_template *k, sg_key_type type, bool on_token, const uint8_t *id, size_t id_len,
                           const char *label)
{
	bool ec = sg_key_type_is_ec(type);
	memset(k, 0, sizeof(*k));
	k->yes = CK_TRUE;
	k->no = CK_FALSE;
	k->on_token = on_token ? CK_TRUE : CK_FALSE;
	k->bits = type == SG_KEY_RSA_2048 ? 2048 : type == SG_KEY_RSA_3072 ? 3072 : 4096;
	k->e65537[0] = 0x01;
	k->e65537[1] = 0x00;
	k->e65537[2] = 0x01;
	k->gen = ec ? CKM_EC_KEY_PAIR_GEN : CKM_RSA_PKCS_KEY_PAIR_GEN;
	/* The public key verifies and does nothing else; the private key signs
	 * and does nothing else. The uses are listed last (after the _base
	 * counts): hsm_generate_pair clears them after generation, or puts them
	 * in the template when the module will not clear them; the result is
	 * read back either way. */
	CK_ULONG n = 0;
	k->pub[n++] = (CK_ATTRIBUTE){CKA_TOKEN, &k->on_token, sizeof(k->on_token)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_PRIVATE, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_VERIFY, &k->yes, sizeof(k->yes)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_ID, (void *)id, id_len};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_LABEL, (void *)label, strlen(label)};
	if (ec) {
		const uint8_t *params = type == SG_KEY_EC_P256 ? hsm_ec_params_p256 : hsm_ec_params_p384;
		size_t plen = type == SG_KEY_EC_P256 ? sizeof(hsm_ec_params_p256) : sizeof(hsm_ec_params_p384);
		k->pub[n++] = (CK_ATTRIBUTE){CKA_EC_PARAMS, (void *)params, plen};
	} else {
		k->pub[n++] = (CK_ATTRIBUTE){CKA_MODULUS_BITS, &k->bits, sizeof(k->bits)};
		k->pub[n++] = (CK_ATTRIBUTE){CKA_PUBLIC_EXPONENT, k->e65537, sizeof(k->e65537)};
	}
	k->npub_base = n;
	k->pub[n++] = (CK_ATTRIBUTE){CKA_ENCRYPT, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_WRAP, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_VERIFY_RECOVER, &k->no, sizeof(k->no)};
	k->pub[n++] = (CK_ATTRIBUTE){CKA_DERIVE, &k->no, sizeof(k->no)};
	k->npub = n;
	n = 0;
	k->priv[n++] = (CK_ATTRIBUTE){CKA_TOKEN, &k->on_token, sizeof(k->on_token)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_PRIVATE, &k->yes, sizeof(k->yes)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_SENSITIVE, &k->yes, sizeof(k->yes)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_SIGN, &k->yes, sizeof(k->yes)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_EXTRACTABLE, &k->no, sizeof(k->no)};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_ID, (void *)id, id_len};
	k->priv[n++] = (CK_ATTRIBUTE){CKA_LABEL, (void *)label, strlen(label)};
	k->npriv_base = n;
	for (size_t i = 0; i < N_KEY_USES; i++)
		k->priv[n++] = (CK_ATTRIBUTE){hsm_key_uses[i].type, &k->no, sizeof(k->no)};
	k->npriv = n;
}

/* Sets each attribute of list[0..n) (CK_BBOOLs meant FALSE) that obj has
 * TRUE to FALSE, where the module allows the change: the caller reads back
 * what it kept. */
static void clear_uses(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, const CK_ATTRIBUTE *list,
                       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		if (hsm_get_bool(h, t, sh, obj, list[i].type, &v) == SG_OK && v == 1) {
			CK_ATTRIBUTE off = list[i];
			(void)h->f->C_SetAttributeValue(sh, obj, &off, 1);
		}
	}
}

/* Whether any attribute of list[0..n) reads TRUE on obj. */
static bool any_use_on(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, CK_OBJECT_HANDLE obj, const CK_ATTRIBUTE *list,
                       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		if (hsm_get_bool(h, t, sh, obj, list[i].type, &v) == SG_OK && v == 1)
			return true;
	}
	return false;
}

/* C_GenerateKeyPair with template k on session sh: the pair is made with
 * the base templates, then every use but signing and verifying is set
 * FALSE on it (clear_uses). Only when the module keeps a private-key use
 * it will not clear is the pair made again with the uses FALSE in the
 * template (the first pair destroyed; *fell_back set, may be NULL).
 * Why not the template first: a module that misreads a use attribute
 * fails the generation, and tpm2-pkcs11 1.9 does both (CKA_DECRYPT=FALSE
 * on an EC key: CKR_GENERAL_ERROR) and, without a resource manager, leaks
 * the TPM object of the failed attempt, so that the next generation finds
 * the TPM out of object memory. The caller reads the result back
 * (hsm_read_key_info). */
CK_RV hsm_generate_pair(sg_hsm *h, token *t, CK_SESSION_HANDLE sh, key_template *k, CK_OBJECT_HANDLE *hpub,
                        CK_OBJECT_HANDLE *hpriv, bool *fell_back)
{
	CK_MECHANISM gen = {k->gen, NULL, 0};
	const CK_ATTRIBUTE *priv_uses = k->priv + k->npriv_base, *pub_uses = k->pub + k->npub_base;
	size_t npriv_uses = k->npriv - k->npriv_base, npub_uses = k->npub - k->npub_base;
	if (fell_back)
		*fell_back = false;
	CK_RV rv = h->f->C_GenerateKeyPair(sh, &gen, k->pub, k->npub_base, k->priv, k->npriv_base, hpub, hpriv);
	if (rv != CKR_OK)
		return rv;
	clear_uses(h, t, sh, *hpriv, priv_uses, npriv_uses);
	clear_uses(h, t, sh, *hpub, pub_uses, npub_uses);
	if (!any_use_on(h, t, sh, *hpriv, priv_uses, npriv_uses))
		return CKR_OK;
	CK_OBJECT_HANDLE pub2, priv2;
	CK_RV rv2 = h->f->C_GenerateKeyPair(sh, &gen, k->pub, k->npub_base, k->priv, k->npriv, &pub2, &priv2);
	ckr_buf rvb;
	sg_log(SG_LOG_INFO, "token kept key uses it would not clear; generated again with them off in the template",
	       SG_F_STR("token", t->label), SG_F_STR("rv", hsm_ckr_name(rv2, &rvb)), SG_F_END);
	if (rv2 != CKR_OK)
		return CKR_OK; /* the first pair stands; the caller logs the uses it keeps */
	(void)h->f->C_DestroyObject(sh, *hpriv);
	(void)h->f->C_DestroyObject(sh, *hpub);
	*hpub = pub2;
	*hpriv = priv2;
	clear_uses(h, t, sh, *hpub, pub_uses, npub_uses);
	if (fell_back)
		*fell_back = true;
	return CKR_OK;
}

int sg_hsm_generate_key(sg_hsm *h, sg_key_type type)
{
	SG_ENSURE(h && (unsigned)type < SG_KEY_TYPE_COUNT, SG_EINVAL, "sg_hsm_generate_key: bad arguments");
	SG_ENSURE(h->key_id && h->key_label, SG_EINVAL,
	          "key generation needs both id= and object= in the key URI (the key is selected by both later)");
	SG_ENSURE(!h->have_key, SG_EINVAL, "a key with this id/label exists already");
	token *t = &h->tokens[0];
	bool ec = sg_key_type_is_ec(type);
	CK_MECHANISM_TYPE mechs[2] = {ec ? CKM_EC_KEY_PAIR_GEN : CKM_RSA_PKCS_KEY_PAIR_GEN,
	                              ec ? CKM_ECDSA : CKM_RSA_PKCS};
	const char *names[2] = {ec ? "CKM_EC_KEY_PAIR_GEN" : "CKM_RSA_PKCS_KEY_PAIR_GEN",
	                        ec ? "CKM_ECDSA" : "CKM_RSA_PKCS"};
	SG_TRY(hsm_check_mechanisms(h, t, mechs, names, 2));

	int rc = SG_EHSM;
	char d[160];
	pthread_mutex_lock(&t->lock);
	SG_TRY_GOTO(rc, hsm_admin_locked(h, t), unlock);
	/* Refuse when either selector is taken, in any object class: a
	 * second key under the same label or id would make selection
	 * ambiguous. */
	for (int pass = 0; pass < 2; pass++) {
		CK_ATTRIBUTE a = pass == 0 ? (CK_ATTRIBUTE){CKA_ID, h->key_id, h->key_id_len}
		                           : (CK_ATTRIBUTE){CKA_LABEL, h->key_label, strlen(h->key_label)};
		CK_OBJECT_HANDLE o;
		CK_ULONG nf = 0;
		CK_RV rv = h->f->C_FindObjectsInit(t->admin, &a, 1);
		if (rv == CKR_OK) {
			rv = h->f->C_FindObjects(t->admin, &o, 1, &nf);
			h->f->C_FindObjectsFinal(t->admin);
		}
		if (rv != CKR_OK) {
			rc = hsm_p11_fail(h, t, "C_FindObjects", rv);
			goto unlock;
		}
		SG_ENSURE_GOTO(rc, nf == 0, unlock, SG_EINVAL, "token '%s' already has an object with %s %s", t->label,
		               pass == 0 ? "the id of" : "the label of", hsm_key_desc(h, d, sizeof(d)));
	}

	key_template kt;
	hsm_key_template_init(&kt, type, true, h->key_id, h->key_id_len, h->key_label);
	CK_OBJECT_HANDLE hpub, hpriv;
	CK_RV rv = hsm_generate_pair(h, t, t->admin, &kt, &hpub, &hpriv, NULL);
	if (rv != CKR_OK) {
		rc = hsm_p11_fail(h, t, "C_GenerateKeyPair", rv);
		goto unlock;
	}
	/* Read it back the way sessions will find it. */
	CK_OBJECT_HANDLE key;
	SG_TRY_GOTO(rc, hsm_find_object(h, t, t->admin, CKO_PRIVATE_KEY, &key, SG_EHSM), unlock);
	/* A module that ignored CKA_SENSITIVE or CKA_EXTRACTABLE made a key
	 * that can leave it: not a CA key. Destroyed, so a retry can reuse the
	 * id and label. */
	SG_TRY_GOTO(rc, hsm_read_key_info(h, t, t->admin, key, &h->key_info), unlock);
	if (!h->key_info.sensitive || h->key_info.extractable || !h->key_info.sign) {
		(void)h->f->C_DestroyObject(t->admin, hpriv);
		(void)h->f->C_DestroyObject(t->admin, hpub);
		rc = sg_error_set(SG_EHSM, "token '%s' generated a key that %s; this module cannot hold a CA key safely",
		                  t->label,
		                  !h->key_info.sign ? "cannot sign"
		                                    : "can be extracted (CKA_SENSITIVE/CKA_EXTRACTABLE ignored)");
		goto unlock;
	}
	if (h->key_info.other_uses) {
		char uses[64];
		sg_hsm_key_uses_text(h->key_info.other_uses, uses, sizeof(uses));
		sg_log(SG_LOG_WARN, "token kept key uses besides signing that it would not turn off",
		       SG_F_STR("token", t->label), SG_F_STR("uses", uses), SG_F_END);
	}
	uint8_t spki[SPKI_MAX];
	size_t spki_len = 0;
	sg_key_type got;
	SG_TRY_GOTO(rc, hsm_read_key(h, t, t->admin, key, &got, spki, sizeof(spki), &spki_len), unlock);
	SG_ENSURE_GOTO(rc, got == type, unlock, SG_EHSM, "token '%s' generated a %s key when asked for %s", t->label,
	               sg_key_type_name(got), sg_key_type_name(type));
	h->spki = malloc(spki_len);
	SG_ENSURE_GOTO(rc, h->spki, unlock, SG_EINTERNAL, "out of memory");
	memcpy(h->spki, spki, spki_len);
	h->spki_len = spki_len;
	h->type = type;
	h->sig_len = hsm_sig_len_of(type);
	t->has_key = true;
	h->have_key = true;
	rc = SG_OK;
unlock:
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int sg_hsm_destroy_key(sg_hsm *h, unsigned *destroyed)
{
	SG_ENSURE(h && destroyed, SG_EINVAL, "sg_hsm_destroy_key: bad arguments");
	SG_ENSURE(h->key_id || h->key_label, SG_EINVAL, "destroying a key needs id= or object= in the key URI");
	*destroyed = 0;
	for (size_t i = 0; i < h->ntokens; i++) {
		token *t = &h->tokens[i];
		int rc = SG_OK;
		pthread_mutex_lock(&t->lock);
		rc = hsm_admin_locked(h, t);
		/* Private key first: once it is gone nothing can sign, whatever
		 * happens to the public half. */
		static const CK_OBJECT_CLASS classes[2] = {CKO_PRIVATE_KEY, CKO_PUBLIC_KEY};
		for (int c = 0; rc == SG_OK && c < 2; c++) {
			CK_OBJECT_HANDLE o;
			int frc = hsm_find_object(h, t, t->admin, classes[c], &o, SG_ENOTFOUND);
			if (frc == SG_ENOTFOUND) {
				sg_error_clear();
				continue;
			}
			rc = frc;
			if (rc < 0)
				break;
			CK_RV rv = h->f->C_DestroyObject(t->admin, o);
			if (rv != CKR_OK)
				rc = hsm_p11_fail(h, t, "C_DestroyObject", rv);
			else
				(*destroyed)++;
		}
		if (rc == SG_OK) {
			t->has_key = false;
			h->have_key = false;
		}
		pthread_mutex_unlock(&t->lock);
		SG_TRY(rc);
	}
	return SG_OK;
}
