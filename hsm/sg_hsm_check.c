/*
 * sg_hsm_check: signetctl hsm-check's walk over a module (sg_hsm.h:
 * sg_hsm_check), step by step, into a report. A diagnosis tool, not part of
 * signing: apart from the adapter's core (sg_hsm.c) so that its reporting
 * does not crowd the code signetd runs; it reuses that core's helpers
 * through private/sg_hsm_impl.h rather than copies of them. What it does
 * and why it can be trusted to say what signetd would meet: below.
 */
#include "sg_clock.h"
#include "sg_guard.h"
#include "sg_hsm_impl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * sg_hsm_check walks a module the way signetd would and writes down what it
 * sees, so that a user with a vendor HSM learns in one command whether signet
 * will work with it, and why not. It goes through hsm_module_acquire (the
 * same loading and C_Initialize as sg_hsm_open) and borrows the helpers the
 * real path uses (hsm_generate_pair and its template, hsm_read_key_info,
 * hsm_read_key_pub, hsm_p11_fail) through a bare sg_hsm on the stack: one
 * token, no key selectors, never on the module's list of handles, so a
 * re-init never walks it. Everything it makes is a session object,
 * destroyed explicitly and then again implicitly when its sessions close: a
 * check leaves the token as it found it. A step that fails ends the walk
 * (the later steps need what it would have given); the report says which.
 */

#define CHECK_SLOTS_CAP 4096    /* slot IDs asked for at most */
#define CHECK_MECHS_CAP 4096    /* mechanisms asked for at most */
#define CHECK_SIGS 8            /* signatures per thread in the verified round */
#define CHECK_SAMPLES 200000    /* latency samples kept per thread and round */
#define CHECK_SIG_MAX 512       /* RSA-4096 */
#define CHECK_INPUT_MAX 128
#define CHECK_LABEL "signet-hsm-check"

typedef struct check {
	const sg_hsm_check_options *o;
	sg_hsm_check_report *r;
	sg_hsm h; /* bare: f, the locks hsm_p11_fail and hsm_open_session take */
	token t;  /* the token checked */
	bool locks;
	CK_SESSION_HANDLE sh;
	CK_OBJECT_HANDLE pub, priv, copy;
	CK_OBJECT_HANDLE existing; /* key_uri's key: never destroyed */
	CK_SESSION_HANDLE workers[SG_HSM_CHECK_THREADS_MAX];
	CK_OBJECT_HANDLE worker_keys[SG_HSM_CHECK_THREADS_MAX]; /* per session: what it signs with */
	bool worker_copies[SG_HSM_CHECK_THREADS_MAX];           /* worker_keys[i] is its own copy */
	unsigned nworkers;
	sg_key_type type;
	uint8_t spki[SPKI_MAX];
	size_t spki_len;
} check;

static void note(sg_hsm_check_report *r, sg_hsm_check_step step, sg_hsm_check_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void note(sg_hsm_check_report *r, sg_hsm_check_step step, sg_hsm_check_level level, const char *fmt, ...)
{
	if (level == SG_HSM_CHECK_FAIL)
		r->works = false;
	if (r->nnotes == SG_HSM_CHECK_NOTES_MAX) {
		r->notes_dropped++;
		return;
	}
	sg_hsm_check_note *n = &r->notes[r->nnotes++];
	n->step = step;
	n->level = level;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(n->text, sizeof(n->text), fmt, ap);
	va_end(ap);
}

/* Space-padded PKCS#11 text of n bytes into out (n + 1 bytes), trimmed. */
static void trim_field(char *out, const CK_UTF8CHAR *in, size_t n)
{
	while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\0'))
		n--;
	memcpy(out, in, n);
	out[n] = '\0';
}

static bool check_module(check *c, module **m)
{
	sg_hsm_check_report *r = c->r;
	const char *path = c->o->module_path ? c->o->module_path : SIGNET_SOFTHSM_MODULE;
	hsm_acquire_ckr = CKR_OK;
	if (hsm_module_acquire(m, path, c->o->softhsm_conf, c->o->init_reserved) != SG_OK) {
		CK_RV rv = hsm_acquire_ckr;
		r->loaded = rv != CKR_OK;
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		if (rv == CKR_ARGUMENTS_BAD && !c->o->init_reserved) {
			r->needs_init_reserved = true;
			note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_FAIL,
			     "the module wants a C_Initialize init string: give it with --hsm-init-reserved (NSS softoken: "
			     "configdir='sql:DIR' certPrefix='' keyPrefix='' secmod='secmod.db' flags='')");
		}
		return false;
	}
	r->loaded = r->initialized = true;
	c->h.mod = *m;
	c->h.f = (*m)->f;
	note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_OK, "loaded %s", path);
	if ((*m)->owner)
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_OK, "C_Initialize with CKF_OS_LOCKING_OK%s",
		     c->o->init_reserved ? " and the init string" : "");
	else
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_WARN,
		     "the module was initialised already by someone else in this process");
	CK_INFO info;
	ckr_buf b;
	CK_RV rv = c->h.f->C_GetInfo(&info);
	if (rv != CKR_OK) {
		note(r, SG_HSM_CHECK_MODULE, SG_HSM_CHECK_WARN, "C_GetInfo: %s", hsm_ckr_name(rv, &b));
		return true;
	}
	r->cryptoki_major = info.cryptokiVersion.major;
	r->cryptoki_minor = info.cryptokiVersion.minor;
	r->library_major = info.libraryVersion.major;
	r->library_minor = info.libraryVersion.minor;
	trim_field(r->manufacturer, info.manufacturerID, sizeof(info.manufacturerID));
	trim_field(r->library, info.libraryDescription, sizeof(info.libraryDescription));
	bool old = r->cryptoki_major < 2 || (r->cryptoki_major == 2 && r->cryptoki_minor < 20);
	note(r, SG_HSM_CHECK_MODULE, old ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "Cryptoki %u.%u%s, %s, \"%s\" %u.%u", r->cryptoki_major, r->cryptoki_minor,
	     old ? " (older than 2.20)" : "", r->manufacturer, r->library, r->library_major, r->library_minor);
	return true;
}

/* Describes slot id into s (when s is not NULL) and tells whether its token
 * is initialised and matched by the URI; *ti gets the token info. */
static bool check_describe_slot(check *c, CK_SLOT_ID id, P11KitUri *turi, sg_hsm_check_slot *s, CK_TOKEN_INFO *ti)
{
	CK_SLOT_INFO si;
	sg_hsm_check_slot tmp;
	if (!s)
		s = &tmp;
	memset(s, 0, sizeof(*s));
	s->id = (unsigned long)id;
	if (c->h.f->C_GetSlotInfo(id, &si) != CKR_OK)
		return false;
	trim_field(s->description, si.slotDescription, sizeof(si.slotDescription));
	s->token_present = (si.flags & CKF_TOKEN_PRESENT) && c->h.f->C_GetTokenInfo(id, ti) == CKR_OK;
	if (!s->token_present)
		return false;
	trim_field(s->label, ti->label, sizeof(ti->label));
	trim_field(s->manufacturer, ti->manufacturerID, sizeof(ti->manufacturerID));
	trim_field(s->model, ti->model, sizeof(ti->model));
	trim_field(s->serial, ti->serialNumber, sizeof(ti->serialNumber));
	s->initialized = ti->flags & CKF_TOKEN_INITIALIZED;
	s->login_required = ti->flags & CKF_LOGIN_REQUIRED;
	s->user_pin_initialized = ti->flags & CKF_USER_PIN_INITIALIZED;
	s->user_pin_locked = ti->flags & CKF_USER_PIN_LOCKED;
	s->rng = ti->flags & CKF_RNG;
	s->write_protected = ti->flags & CKF_WRITE_PROTECTED;
	s->max_sessions = ti->ulMaxSessionCount == CK_UNAVAILABLE_INFORMATION ? -1
	                  : ti->ulMaxSessionCount == CK_EFFECTIVELY_INFINITE  ? 0
	                                                                       : (long)ti->ulMaxSessionCount;
	s->selected = s->initialized && (!turi || (p11_kit_uri_match_token_info(turi, ti) &&
	                                           p11_kit_uri_match_slot_info(turi, &si)));
	return s->selected;
}

static void check_note_slot(check *c, const sg_hsm_check_slot *s)
{
	sg_hsm_check_report *r = c->r;
	if (!s->token_present) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "slot %lu \"%s\": no token", s->id, s->description);
		return;
	}
	if (!s->initialized) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "slot %lu \"%s\": token not initialised", s->id,
		     s->description);
		return;
	}
	char sessions[32];
	if (s->max_sessions < 0)
		snprintf(sessions, sizeof(sessions), "not stated");
	else if (s->max_sessions == 0)
		snprintf(sessions, sizeof(sessions), "no limit");
	else
		snprintf(sessions, sizeof(sessions), "%ld", s->max_sessions);
	note(r, SG_HSM_CHECK_SLOTS, s->user_pin_locked ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "slot %lu \"%s\": token \"%s\" (%s %s, serial %s)%s%s%s%s%s, max sessions %s%s", s->id, s->description,
	     s->label,
	     s->manufacturer, s->model, s->serial, s->login_required ? ", login required" : "",
	     s->user_pin_initialized ? ", user PIN set" : ", no user PIN", s->user_pin_locked ? ", user PIN LOCKED" : "",
	     s->rng ? ", RNG" : "", s->write_protected ? ", write-protected" : "", sessions,
	     s->selected ? " [selected]" : "");
}

static bool check_slots(check *c, P11KitUri *turi)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	CK_ULONG n = 0;
	CK_RV rv = c->h.f->C_GetSlotList(CK_FALSE, NULL, &n);
	if (rv != CKR_OK || n > CHECK_SLOTS_CAP) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, rv != CKR_OK ? "C_GetSlotList: %s" : "%s lists too many slots",
		     rv != CKR_OK ? hsm_ckr_name(rv, &b) : "the module");
		return false;
	}
	CK_SLOT_ID *slots SG_AUTOFREE = calloc(n + 1, sizeof(*slots));
	if (!slots) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, "out of memory");
		return false;
	}
	rv = c->h.f->C_GetSlotList(CK_FALSE, slots, &n);
	if (rv != CKR_OK) {
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, "C_GetSlotList: %s", hsm_ckr_name(rv, &b));
		return false;
	}
	r->nslots_total = n;
	bool have = false;
	size_t ninit = 0;
	char names[160] = "";
	for (CK_ULONG i = 0; i < n && i <= CHECK_SLOTS_CAP; i++) {
		sg_hsm_check_slot s;
		CK_TOKEN_INFO ti;
		bool sel = check_describe_slot(c, slots[i], turi, &s, &ti);
		if (r->nslots < SG_HSM_CHECK_SLOTS_MAX) {
			r->slots[r->nslots++] = s;
			check_note_slot(c, &s);
		}
		if (s.token_present && s.initialized) {
			size_t used = strlen(names);
			if (used + 4 < sizeof(names))
				snprintf(names + used, sizeof(names) - used, "%s\"%s\"", ninit ? ", " : "", s.label);
			ninit++;
		}
		if (!sel)
			continue;
		r->nselected++;
		if (have)
			continue;
		have = true;
		r->checked = r->nslots > 0 && r->slots[r->nslots - 1].id == s.id ? (int)r->nslots - 1 : -1;
		c->t.slot = slots[i];
		hsm_trim_label(c->t.label, ti.label);
		memcpy(c->t.serial, ti.serialNumber, sizeof(c->t.serial));
		if (!s.user_pin_initialized || s.user_pin_locked)
			note(r, SG_HSM_CHECK_SLOTS, c->o->pin ? SG_HSM_CHECK_FAIL : SG_HSM_CHECK_WARN,
			     "token \"%s\": the user PIN is %s", s.label, s.user_pin_locked ? "locked" : "not initialised");
	}
	if (n > SG_HSM_CHECK_SLOTS_MAX)
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "%lu slots; the first %d are described", (unsigned long)n,
		     SG_HSM_CHECK_SLOTS_MAX);
	if (!have) {
		if (c->o->token_uri)
			note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL, "no initialised token matches %s; tokens: %s",
			     c->o->token_uri, ninit ? names : "none");
		else
			note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_FAIL,
			     "no initialised token: initialise one (signetctl init, or the vendor's tool)");
		return false;
	}
	if (!c->o->token_uri)
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_WARN,
		     "no --hsm-token: %zu initialised token%s (%s); checking \"%s\": choose one with --hsm-token",
		     r->nselected, r->nselected == 1 ? "" : "s", names, c->t.label);
	else if (r->nselected > 1)
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_WARN,
		     "%s matches %zu tokens (%s): signet balances across those holding the same key; checking \"%s\"",
		     c->o->token_uri, r->nselected, names, c->t.label);
	else
		note(r, SG_HSM_CHECK_SLOTS, SG_HSM_CHECK_OK, "%s selects token \"%s\"", c->o->token_uri, c->t.label);
	return true;
}

/* Whether bits lies in the range a mechanism states; 0..0 states none. */
static bool mech_fits(const sg_hsm_check_mech *m, unsigned long bits)
{
	return m->min_bits == 0 && m->max_bits == 0 ? true : m->min_bits <= bits && bits <= m->max_bits;
}

static void check_mech(check *c, const CK_MECHANISM_TYPE *list, CK_ULONG n, CK_MECHANISM_TYPE type,
                       const char *name, CK_FLAGS need, sg_hsm_check_mech *out)
{
	memset(out, 0, sizeof(*out));
	for (CK_ULONG i = 0; i < n && !out->present; i++)
		out->present = list[i] == type;
	if (!out->present) {
		note(c->r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_WARN, "%s: missing", name);
		return;
	}
	CK_MECHANISM_INFO mi;
	ckr_buf b;
	CK_RV rv = c->h.f->C_GetMechanismInfo(c->t.slot, type, &mi);
	if (rv != CKR_OK) {
		out->present = false;
		note(c->r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_WARN, "%s: listed, but C_GetMechanismInfo: %s", name,
		     hsm_ckr_name(rv, &b));
		return;
	}
	out->min_bits = mi.ulMinKeySize;
	out->max_bits = mi.ulMaxKeySize;
	out->sign = mi.flags & CKF_SIGN;
	out->generate_key_pair = mi.flags & CKF_GENERATE_KEY_PAIR;
	out->hw = mi.flags & CKF_HW;
	bool usable = (mi.flags & need) == need;
	note(c->r, SG_HSM_CHECK_MECHS, usable ? SG_HSM_CHECK_OK : SG_HSM_CHECK_WARN, "%s: %lu..%lu bits%s%s%s%s", name,
	     out->min_bits, out->max_bits, out->sign ? ", sign" : "", out->generate_key_pair ? ", generate key pair" : "",
	     out->hw ? ", hardware" : ", software", usable ? "" : need == CKF_SIGN ? " (no CKF_SIGN: unusable)"
	                                                                          : " (no CKF_GENERATE_KEY_PAIR: unusable)");
	out->present = usable;
}

static bool check_mechanisms_all(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	CK_ULONG n = 0;
	CK_RV rv = c->h.f->C_GetMechanismList(c->t.slot, NULL, &n);
	if (rv != CKR_OK || n == 0 || n > CHECK_MECHS_CAP) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "C_GetMechanismList: %s",
		     rv != CKR_OK ? hsm_ckr_name(rv, &b) : n == 0 ? "no mechanisms" : "too many mechanisms");
		return false;
	}
	/* One spare element, as in hsm_check_mechanisms: p11-kit's client
	 * before 0.24.2 reads one past the caller's array (p11-glue/p11-kit#456). */
	CK_MECHANISM_TYPE *list SG_AUTOFREE = calloc(n + 1, sizeof(*list));
	if (!list) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "out of memory");
		return false;
	}
	rv = c->h.f->C_GetMechanismList(c->t.slot, list, &n);
	if (rv != CKR_OK) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "C_GetMechanismList: %s", hsm_ckr_name(rv, &b));
		return false;
	}
	r->nmechanisms = n;
	note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_OK, "%lu mechanisms", (unsigned long)n);
	check_mech(c, list, n, CKM_EC_KEY_PAIR_GEN, "CKM_EC_KEY_PAIR_GEN", CKF_GENERATE_KEY_PAIR, &r->ec_gen);
	check_mech(c, list, n, CKM_ECDSA, "CKM_ECDSA", CKF_SIGN, &r->ecdsa);
	check_mech(c, list, n, CKM_RSA_PKCS_KEY_PAIR_GEN, "CKM_RSA_PKCS_KEY_PAIR_GEN", CKF_GENERATE_KEY_PAIR,
	           &r->rsa_gen);
	check_mech(c, list, n, CKM_RSA_PKCS, "CKM_RSA_PKCS", CKF_SIGN, &r->rsa_pkcs);
	static const unsigned long bits[SG_KEY_TYPE_COUNT] = {256, 384, 2048, 3072, 4096};
	char names[96] = "";
	size_t used = 0;
	for (int i = 0; i < SG_KEY_TYPE_COUNT; i++) {
		bool ec = sg_key_type_is_ec((sg_key_type)i);
		const sg_hsm_check_mech *g = ec ? &r->ec_gen : &r->rsa_gen, *s = ec ? &r->ecdsa : &r->rsa_pkcs;
		r->key_types[i] = g->present && s->present && mech_fits(g, bits[i]) && mech_fits(s, bits[i]);
		if (r->key_types[i])
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", used ? " " : "",
			                         sg_key_type_name((sg_key_type)i));
	}
	if (!used) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "the token can hold none of signet's key types");
		return false;
	}
	note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_OK, "key types: %s", names);
	if (!r->key_types[c->type]) {
		note(r, SG_HSM_CHECK_MECHS, SG_HSM_CHECK_FAIL, "--key-type %s: not supported by this token",
		     sg_key_type_name(c->type));
		return false;
	}
	return true;
}

static bool check_login(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	if (hsm_open_session(&c->h, &c->t, CKF_RW_SESSION, &c->sh) != SG_OK) {
		c->sh = CK_INVALID_HANDLE;
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	CK_RV rv = c->h.f->C_Login(c->sh, CKU_USER, (CK_UTF8CHAR_PTR)sg_secret_data(c->o->pin),
	                           sg_secret_len(c->o->pin));
	if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "C_Login: %s%s", hsm_ckr_name(rv, &b),
		     hsm_is_pin_error(rv) ? ": the token refused the PIN (not tried again)" : "");
		return false;
	}
	r->logged_in = true;
	note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_OK, "login to \"%s\"", c->t.label);
	return true;
}

/* Step 4 after the login: the temporary pair and what its template got.
 * false: stop (FAIL noted) or skip the rest (WARN noted, *skip set). */
static bool check_key(check *c, bool *skip)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	static const uint8_t id[] = CHECK_LABEL;
	key_template kt;
	hsm_key_template_init(&kt, c->type, false, id, sizeof(id) - 1, CHECK_LABEL);
	CK_RV rv = hsm_generate_pair(&c->h, &c->t, c->sh, &kt, &c->pub, &c->priv, &r->key_fallback);
	if (rv != CKR_OK) {
		c->pub = c->priv = CK_INVALID_HANDLE;
		*skip = true;
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
		     "C_GenerateKeyPair of a %s session-object pair: %s; key template, copy and signing not checked",
		     sg_key_type_name(c->type), hsm_ckr_name(rv, &b));
		return false;
	}
	r->key_generated = true;
	note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_OK, "temporary %s key pair generated as session objects (CKA_TOKEN=FALSE)",
	     sg_key_type_name(c->type));
	if (r->key_fallback)
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
		     "the module kept key uses it would not clear after generation: generated again with them off in "
		     "the template");
	int on_token = 0;
	if (hsm_get_bool(&c->h, &c->t, c->sh, c->priv, CKA_TOKEN, &on_token) == SG_OK && on_token == 1)
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
		     "the module made a token object despite CKA_TOKEN=FALSE (destroyed at the end)");
	if (hsm_read_key_info(&c->h, &c->t, c->sh, c->priv, &r->key) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	/* What sg_hsm_generate_key refuses, FAIL here too. */
	note(r, SG_HSM_CHECK_KEY, r->key.sensitive ? SG_HSM_CHECK_OK : SG_HSM_CHECK_FAIL, "CKA_SENSITIVE: %s",
	     r->key.sensitive ? "true" : "false (the key could leave the token)");
	note(r, SG_HSM_CHECK_KEY, r->key.extractable ? SG_HSM_CHECK_FAIL : SG_HSM_CHECK_OK, "CKA_EXTRACTABLE: %s",
	     r->key.extractable ? "true (the key could leave the token)" : "false");
	note(r, SG_HSM_CHECK_KEY, r->key.sign ? SG_HSM_CHECK_OK : SG_HSM_CHECK_FAIL, "CKA_SIGN: %s",
	     r->key.sign ? "true" : "false");
	char uses[64];
	sg_hsm_key_uses_text(r->key.other_uses, uses, sizeof(uses));
	note(r, SG_HSM_CHECK_KEY, r->key.other_uses ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "other uses (decrypt, unwrap, derive, sign-recover): %s", r->key.other_uses ? uses : "none");
	if (!r->works)
		return false;
	sg_key_type got;
	if (hsm_read_key_pub(&c->h, &c->t, c->sh, c->priv, c->pub, &got, c->spki, sizeof(c->spki), &c->spki_len) !=
	    SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	if (got != c->type) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "asked for %s, the token made %s", sg_key_type_name(c->type),
		     sg_key_type_name(got));
		return false;
	}
	return true;
}

/* Step 4 with an existing key (key_uri): found by its selectors, its type
 * and public key read as sg_hsm_open reads them, its attributes reported;
 * nothing made, so nothing to destroy (c->priv stays out of cleanup). */
static bool check_existing_key(check *c)
{
	sg_hsm_check_report *r = c->r;
	char d[160];
	CK_OBJECT_HANDLE key = CK_INVALID_HANDLE;
	if (hsm_find_object(&c->h, &c->t, c->sh, CKO_PRIVATE_KEY, &key, SG_ENOTFOUND) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	sg_key_type got;
	if (hsm_read_key(&c->h, &c->t, c->sh, key, &got, c->spki, sizeof(c->spki), &c->spki_len) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	if (got != c->type) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "the key %s is %s: give --key-type %s",
		     hsm_key_desc(&c->h, d, sizeof(d)), sg_key_type_name(got), sg_key_type_name(got));
		return false;
	}
	if (hsm_read_key_info(&c->h, &c->t, c->sh, key, &r->key) != SG_OK) {
		note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_FAIL, "%s", sg_error_last()->msg);
		return false;
	}
	r->key_existing = true;
	c->existing = key;
	note(r, SG_HSM_CHECK_KEY, SG_HSM_CHECK_OK, "existing %s key %s found", sg_key_type_name(got),
	     hsm_key_desc(&c->h, d, sizeof(d)));
	/* signetd uses such a key as it is and warns; so does the check. */
	note(r, SG_HSM_CHECK_KEY, r->key.sensitive && !r->key.extractable ? SG_HSM_CHECK_OK : SG_HSM_CHECK_WARN,
	     "CKA_SENSITIVE: %s, CKA_EXTRACTABLE: %s", r->key.sensitive ? "true" : "false",
	     r->key.extractable ? "true (the key could leave the token)" : "false");
	char uses[64];
	sg_hsm_key_uses_text(r->key.other_uses, uses, sizeof(uses));
	note(r, SG_HSM_CHECK_KEY, r->key.other_uses ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_OK,
	     "other uses (decrypt, unwrap, derive, sign-recover): %s", r->key.other_uses ? uses : "none");
	return true;
}

/* Step 5: signet's session-object copy of the key, as connect_in_call
 * makes it (an explicit CKA_TOKEN=FALSE). */
static void check_copy(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	CK_BBOOL no = CK_FALSE;
	CK_ATTRIBUTE tmpl[] = {{CKA_TOKEN, &no, sizeof(no)}};
	CK_OBJECT_HANDLE copy = CK_INVALID_HANDLE;
	CK_RV rv = c->h.f->C_CopyObject(c->sh, c->priv, tmpl, 1, &copy);
	snprintf(r->copy_rv, sizeof(r->copy_rv), "%s", hsm_ckr_name(rv, &b));
	if (rv == CKR_OK && copy != CK_INVALID_HANDLE && copy != c->priv) {
		c->copy = copy;
		r->copy = 1;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_OK, "C_CopyObject to a session object: supported (a new handle)");
	} else if (rv == CKR_OK) {
		r->copy = 3;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_WARN,
		     "C_CopyObject answered the original handle: signet signs with the token key (no copy)");
	} else if (rv == CKR_FUNCTION_NOT_SUPPORTED) {
		r->copy = 2;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_WARN,
		     "C_CopyObject: CKR_FUNCTION_NOT_SUPPORTED: no copy, slower on SoftHSM2-like modules");
	} else {
		r->copy = 4;
		note(r, SG_HSM_CHECK_COPY, SG_HSM_CHECK_WARN, "C_CopyObject: %s: signet signs with the token key (no copy)",
		     r->copy_rv);
	}
}

/* What each worker session signs with. The temporary key is a session
 * object already. An existing (token) key is copied to a session object
 * per session first, as signetd does with hsm-copy-key (its default):
 * besides being faster on SoftHSM2, it keeps threads off one token object,
 * which openCryptoki 3.8's soft token does not survive (a SEGV in
 * object_mgr_find_in_map1 with eight threads signing one token key). A
 * module without C_CopyObject signs with the token key, as signetd would. */
static void worker_keys(check *c)
{
	unsigned copies = 0;
	for (unsigned i = 0; i < c->nworkers; i++) {
		c->worker_keys[i] = c->existing != CK_INVALID_HANDLE ? c->existing : c->priv;
		c->worker_copies[i] = false;
		if (c->existing == CK_INVALID_HANDLE)
			continue;
		CK_BBOOL no = CK_FALSE;
		CK_ATTRIBUTE tmpl[] = {{CKA_TOKEN, &no, sizeof(no)}};
		CK_OBJECT_HANDLE copy = CK_INVALID_HANDLE;
		if (c->h.f->C_CopyObject(c->workers[i], c->existing, tmpl, 1, &copy) == CKR_OK &&
		    copy != CK_INVALID_HANDLE && copy != c->existing) {
			c->worker_keys[i] = copy;
			c->worker_copies[i] = true;
			copies++;
		}
	}
	if (c->existing == CK_INVALID_HANDLE)
		return;
	const char *how = copies == c->nworkers ? "each session signs with its own session copy of the key, as signetd does"
	                  : copies ? "some sessions sign with a session copy of the key, the others with the token key"
	                           : "sessions sign with the token key itself (C_CopyObject refused), as signetd would";
	note(c->r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_OK, "%s", how);
}

typedef struct check_worker {
	check *c;
	CK_SESSION_HANDLE sh;
	CK_OBJECT_HANDLE key;
	unsigned mode; /* 0: CHECK_SIGS verified signatures; 1: timed */
	uint64_t until_ns;
	uint64_t start_ns, end_ns;
	uint64_t count;
	CK_RV rv; /* first failure */
	const char *fn;
	uint8_t sigs[CHECK_SIGS][CHECK_SIG_MAX];
	size_t siglens[CHECK_SIGS];
	uint32_t *samples; /* ns per signature, CHECK_SAMPLES at most */
	size_t nsamples;
} check_worker;

static bool worker_sign(check_worker *w, uint8_t *sig, size_t *siglen)
{
	check *c = w->c;
	CK_MECHANISM mech = {sg_key_type_is_ec(c->type) ? CKM_ECDSA : CKM_RSA_PKCS, NULL, 0};
	CK_ULONG n = CHECK_SIG_MAX;
	CK_RV rv = c->h.f->C_SignInit(w->sh, &mech, w->key);
	if (rv != CKR_OK) {
		w->rv = rv;
		w->fn = "C_SignInit";
		return false;
	}
	rv = c->h.f->C_Sign(w->sh, (CK_BYTE_PTR)c->o->sign_input, c->o->sign_input_len, sig, &n);
	if (rv != CKR_OK) {
		w->rv = rv;
		w->fn = "C_Sign";
		return false;
	}
	*siglen = n;
	return true;
}

static void *worker_run(void *arg)
{
	check_worker *w = arg;
	w->start_ns = sg_now_ns();
	if (w->mode == 0) {
		for (size_t i = 0; i < CHECK_SIGS; i++)
			if (!worker_sign(w, w->sigs[i], &w->siglens[i]))
				break;
			else
				w->count++;
	} else {
		uint8_t sig[CHECK_SIG_MAX];
		size_t siglen;
		for (uint64_t t0 = w->start_ns; t0 < w->until_ns;) {
			if (!worker_sign(w, sig, &siglen))
				break;
			uint64_t t1 = sg_now_ns();
			w->count++;
			if (w->nsamples < CHECK_SAMPLES)
				w->samples[w->nsamples++] = t1 - t0 > UINT32_MAX ? UINT32_MAX : (uint32_t)(t1 - t0);
			t0 = t1;
		}
	}
	w->end_ns = sg_now_ns();
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Runs nthreads workers in mode; false when a thread could not start. */
static bool run_workers(check *c, check_worker *w, unsigned nthreads, unsigned mode, unsigned ms)
{
	pthread_t th[SG_HSM_CHECK_THREADS_MAX];
	unsigned started = 0;
	uint64_t until = sg_now_ns() + (uint64_t)ms * 1000000u;
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].c = c;
		w[i].sh = c->workers[i];
		w[i].key = c->worker_keys[i];
		w[i].mode = mode;
		w[i].until_ns = until;
		w[i].count = 0;
		w[i].nsamples = 0;
		w[i].rv = CKR_OK;
		w[i].fn = NULL;
		if (pthread_create(&th[i], NULL, worker_run, &w[i]) != 0)
			break;
		started++;
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return started == nthreads;
}

/* Signatures per second and latency percentiles of a timed round. */
static bool timed_round(check *c, check_worker *w, unsigned nthreads, double *rate, uint64_t *count, double *p50,
                        double *p99)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	unsigned ms = c->o->sign_ms ? c->o->sign_ms : 2000;
	if (!run_workers(c, w, nthreads, 1, ms)) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "cannot start threads");
		return false;
	}
	uint64_t first = UINT64_MAX, last = 0, total = 0;
	size_t nsamples = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		if (w[i].fn) {
			note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "%u threads: %s: %s", nthreads, w[i].fn,
			     hsm_ckr_name(w[i].rv, &b));
			return false;
		}
		first = w[i].start_ns < first ? w[i].start_ns : first;
		last = w[i].end_ns > last ? w[i].end_ns : last;
		total += w[i].count;
		nsamples += w[i].nsamples;
	}
	uint32_t *all SG_AUTOFREE = malloc((nsamples ? nsamples : 1) * sizeof(*all));
	if (!all) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "out of memory");
		return false;
	}
	size_t k = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		memcpy(all + k, w[i].samples, w[i].nsamples * sizeof(*all));
		k += w[i].nsamples;
	}
	qsort(all, nsamples, sizeof(*all), cmp_u32);
	*count = total;
	*rate = last > first ? (double)total * 1e9 / (double)(last - first) : 0;
	*p50 = nsamples ? all[nsamples / 2] / 1000.0 : 0;
	*p99 = nsamples ? all[nsamples * 99 / 100] / 1000.0 : 0;
	note(r, SG_HSM_CHECK_SIGN, total ? SG_HSM_CHECK_OK : SG_HSM_CHECK_FAIL,
	     "%u thread%s: %.0f signatures/s over %.1f s, C_SignInit+C_Sign p50 %.0f us, p99 %.0f us", nthreads,
	     nthreads == 1 ? "" : "s", *rate, (double)(last - first) / 1e9, *p50, *p99);
	return total > 0;
}

/* Step 6: sessions opened one at a time, then concurrent signatures, each
 * verified, then the timed rounds. */
static void check_sign(check *c)
{
	sg_hsm_check_report *r = c->r;
	ckr_buf b;
	unsigned want = c->o->threads ? c->o->threads : SG_HSM_CHECK_THREADS_MAX;
	if (want > SG_HSM_CHECK_THREADS_MAX)
		want = SG_HSM_CHECK_THREADS_MAX;
	long max = r->checked >= 0 ? r->slots[r->checked].max_sessions : -1;
	if (max > 0 && (unsigned long)max <= want) /* one of them is ours already */
		want = max > 1 ? (unsigned)max - 1 : 1;
	for (unsigned i = 0; i < want; i++) {
		/* One at a time, as sg_hsm does: C_OpenSession is not
		 * thread-safe on every module (tpm2-pkcs11). */
		if (hsm_open_session(&c->h, &c->t, 0, &c->workers[i]) != SG_OK) {
			note(r, SG_HSM_CHECK_SIGN, i ? SG_HSM_CHECK_WARN : SG_HSM_CHECK_FAIL, "session %u of %u: %s", i + 1,
			     want, sg_error_last()->msg);
			break;
		}
		c->nworkers++;
	}
	r->sessions = c->nworkers;
	if (!c->nworkers)
		return;
	note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_OK, "%u sessions opened one at a time", c->nworkers);
	worker_keys(c);
	if (!c->o->sign_input || !c->o->sign_input_len || c->o->sign_input_len > CHECK_INPUT_MAX) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_WARN, "no input to sign given: signing not checked");
		return;
	}
	check_worker *w SG_AUTOFREE = calloc(c->nworkers, sizeof(*w));
	bool oom = !w;
	for (unsigned i = 0; !oom && i < c->nworkers; i++)
		oom = !(w[i].samples = malloc(CHECK_SAMPLES * sizeof(uint32_t)));
	if (oom) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "out of memory");
		goto out;
	}
	if (!run_workers(c, w, c->nworkers, 0, 0)) {
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "cannot start threads");
		goto out;
	}
	bool failed_call = false;
	for (unsigned i = 0; i < c->nworkers; i++) {
		if (w[i].fn && !failed_call) {
			failed_call = true;
			note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "session %u: %s: %s", i + 1, w[i].fn,
			     hsm_ckr_name(w[i].rv, &b));
		}
		for (size_t k = 0; k < w[i].count; k++) {
			bool ok = !c->o->verify ||
			          c->o->verify(c->o->verify_arg, c->spki, c->spki_len, w[i].sigs[k], w[i].siglens[k]) == SG_OK;
			r->verified += ok;
			r->failed += !ok;
		}
	}
	r->concurrency_ok = !failed_call && r->failed == 0 && r->verified == c->nworkers * CHECK_SIGS;
	if (r->concurrency_ok)
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_OK, "%u threads signing at once: %u signatures, all %s",
		     c->nworkers, r->verified, c->o->verify ? "verify" : "made (not verified)");
	else if (!failed_call)
		note(r, SG_HSM_CHECK_SIGN, SG_HSM_CHECK_FAIL, "%u threads signing at once: %u of %u signatures do not verify",
		     c->nworkers, r->failed, r->verified + r->failed);
	if (!r->concurrency_ok)
		goto out;
	if (timed_round(c, w, 1, &r->rate_single, &r->signatures_single, &r->p50_us_single, &r->p99_us_single))
		(void)timed_round(c, w, c->nworkers, &r->rate_multi, &r->signatures_multi, &r->p50_us_multi,
		                  &r->p99_us_multi);
out:
	for (unsigned i = 0; w && i < c->nworkers; i++)
		free(w[i].samples);
}

/* Destroys what the check made and closes its sessions (which would
 * destroy the session objects anyway; explicit first, for modules that are
 * slow to notice). */
static void check_cleanup(check *c)
{
	for (unsigned i = 0; i < c->nworkers; i++) {
		if (c->worker_copies[i])
			(void)c->h.f->C_DestroyObject(c->workers[i], c->worker_keys[i]);
		c->h.f->C_CloseSession(c->workers[i]);
	}
	c->nworkers = 0;
	if (c->sh != CK_INVALID_HANDLE) {
		CK_OBJECT_HANDLE objs[3] = {c->copy, c->priv, c->pub};
		for (int i = 0; i < 3; i++)
			if (objs[i] != CK_INVALID_HANDLE)
				(void)c->h.f->C_DestroyObject(c->sh, objs[i]);
		c->h.f->C_CloseSession(c->sh);
		c->sh = CK_INVALID_HANDLE;
	}
}

int sg_hsm_check(const sg_hsm_check_options *opts, sg_hsm_check_report *out)
{
	SG_ENSURE(opts && out && (unsigned)opts->key_type < SG_KEY_TYPE_COUNT, SG_EINVAL, "sg_hsm_check: bad arguments");
	P11KitUri *turi SG_CLEANUP(hsm_uri_freep) = NULL;
	if (opts->token_uri)
		SG_TRY(hsm_uri_parse(&turi, "token", opts->token_uri,
		                     P11_KIT_URI_FOR_OBJECT_ON_TOKEN | P11_KIT_URI_FOR_SLOT));
	P11KitUri *kuri SG_CLEANUP(hsm_uri_freep) = NULL;
	if (opts->key_uri)
		SG_TRY(hsm_uri_parse(&kuri, "key", opts->key_uri, P11_KIT_URI_FOR_OBJECT));
	check *c SG_AUTOFREE = calloc(1, sizeof(*c));
	SG_ENSURE(c, SG_EINTERNAL, "out of memory");
	if (kuri) {
		int krc = hsm_key_selectors(&c->h, kuri, opts->key_uri);
		if (krc < 0) {
			free(c->h.key_id);
			free(c->h.key_label);
			return krc;
		}
	}
	memset(out, 0, sizeof(*out));
	out->works = true;
	out->checked = -1;
	out->pin_given = opts->pin != NULL;
	c->o = opts;
	c->r = out;
	c->type = opts->key_type;
	c->sh = CK_INVALID_HANDLE;
	c->pub = c->priv = c->copy = c->existing = CK_INVALID_HANDLE;
	snprintf(c->t.label, sizeof(c->t.label), "?");
	if (pthread_mutex_init(&c->h.open_lock, NULL) != 0)
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	if (pthread_mutex_init(&c->h.fault_lock, NULL) != 0) {
		pthread_mutex_destroy(&c->h.open_lock);
		SG_BAIL(SG_EINTERNAL, "pthread_mutex_init failed");
	}
	module *m = NULL;
	bool skip = false;
	if (check_module(c, &m) && check_slots(c, turi) && check_mechanisms_all(c)) {
		if (!opts->pin)
			note(out, SG_HSM_CHECK_KEY, SG_HSM_CHECK_WARN,
			     "no PIN (--pin-file or --pin-env): login, key template, copy and signing not checked");
		else if (opts->key_uri && check_login(c) && check_existing_key(c))
			check_sign(c);
		else if (!opts->key_uri && check_login(c) && check_key(c, &skip)) {
			check_copy(c);
			check_sign(c);
		}
	}
	if (m)
		check_cleanup(c);
	hsm_module_release(m);
	pthread_mutex_destroy(&c->h.open_lock);
	pthread_mutex_destroy(&c->h.fault_lock);
	free(c->h.key_id);
	free(c->h.key_label);
	return SG_OK;
}
