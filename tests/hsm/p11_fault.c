/*
 * p11_fault: a PKCS#11 fault-injection module for daemon-level reliability
 * tests (test_hsm_faults_daemon.py). It is a real shared object that signetd
 * loads through its hsm-module setting; it forwards every call to SoftHSM2
 * (SIGNET_SOFTHSM_MODULE, else Debian's path) and, per PKCS#11 function,
 * injects what a control file asks for. The control file is named by
 * SIGNET_P11FAULT_CONTROL and re-read while the process runs, so that a test
 * switches faults on and off under load without restarting anything:
 *
 *   # comment
 *   <function or *> [error=CKR_NAME|0xHEX] [prob=P | every=N]
 *                   [delay_ms=N] [spike_ms=N spike_prob=P]
 *                   [hang=N] [corrupt=P]
 *   crash <generation>
 *   sessions max=N | sessions unavailable
 *
 *   error     the call answers this code instead of being made; always, with
 *             probability prob, or on every Nth call of that function
 *   delay_ms  fixed latency before the call; spike_ms with probability
 *             spike_prob on top (random spikes). Fractions are kept to the
 *             microsecond (delay_ms=0.02: a thread that sleeps 20 us in
 *             every call, the cost of a blocking call without the wait)
 *   hang      up to N calls of the function at a time block before the call
 *             until a re-read finds the rule's hang gone (or 0): "hung until
 *             released". The hung thread itself polls the file.
 *   corrupt   C_Sign only: a successful signature comes back with one bit
 *             flipped, with probability P (what verify-issued must catch)
 *   sessions  a token session limit: C_GetTokenInfo states ulMaxSessionCount
 *             N, and C_OpenSession answers CKR_SESSION_COUNT while N
 *             sessions are open (counted across slots: the tests use one);
 *             "unavailable" states CK_UNAVAILABLE_INFORMATION instead, and
 *             limits nothing
 *   crash     whenever the generation differs from the last one applied,
 *             the wrapped SoftHSM2 is finalised and initialised again with
 *             the caller's arguments: every session, login and object handle
 *             signet holds is gone, as after a device reset
 *
 * A rule for a named function overrides the "*" rule; "*" covers every
 * wrapped function except C_Initialize, C_Finalize and C_GetInfo. The file is
 * looked at (one stat) at most every RECHECK_MS, and parsed only when its
 * inode, size or mtime changed: a test writes a new file and renames it over.
 *
 * Events (a hang entered or released, a crash, a re-read) are appended, one
 * line each, to SIGNET_P11FAULT_LOG when set, so that a test can tell when a
 * fault took effect. Injected errors are not logged (there may be thousands).
 *
 * For in-process tests, p11_fault_peaks() (found with dlsym) tells the most
 * sessions open and C_Sign calls inside at once, and the opens refused,
 * since its last call (each call starts them afresh from the present).
 *
 * Calls into SoftHSM2 run under a read lock and a crash under the write lock:
 * SoftHSM2 must not be finalised while another thread is inside it (a real
 * device reset is not a use-after-free in the host). Hangs and latency come
 * before the lock, so a hung call does not hold up a crash. A crash waits for
 * the calls already inside to return, then holds new ones off.
 */
#include <dlfcn.h>
#include <errno.h>
#include <p11-kit/pkcs11.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECHECK_MS 10
#define MAX_LINE 512

/* The wrapped functions, in one table: index, name. */
#define P11F_FUNCS(X)                                                                                                  \
	X(GetSlotList)                                                                                                 \
	X(GetSlotInfo)                                                                                                 \
	X(GetTokenInfo)                                                                                                \
	X(GetMechanismList)                                                                                            \
	X(GetMechanismInfo)                                                                                            \
	X(OpenSession)                                                                                                 \
	X(CloseSession)                                                                                                \
	X(CloseAllSessions)                                                                                            \
	X(GetSessionInfo)                                                                                              \
	X(Login)                                                                                                       \
	X(Logout)                                                                                                      \
	X(FindObjectsInit)                                                                                             \
	X(FindObjects)                                                                                                 \
	X(FindObjectsFinal)                                                                                            \
	X(GetAttributeValue)                                                                                           \
	X(CopyObject)                                                                                                  \
	X(DestroyObject)                                                                                               \
	X(SignInit)                                                                                                    \
	X(Sign)                                                                                                        \
	X(GenerateKeyPair)                                                                                             \
	X(InitToken)                                                                                                   \
	X(InitPIN)

#define P11F_ENUM(n) F_##n,
enum { P11F_FUNCS(P11F_ENUM) F_COUNT, F_ANY = F_COUNT };
#define P11F_NAME(n) "C_" #n,
static const char *const func_names[F_COUNT] = {P11F_FUNCS(P11F_NAME)};

typedef struct rule {
	bool set;
	CK_RV error;    /* CKR_OK: none */
	double prob;    /* of the error; 0 with every == 0: always */
	unsigned every; /* error on every Nth call */
	unsigned delay_us;
	unsigned spike_us;
	double spike_prob;
	unsigned hang;  /* calls that may hang at once */
	double corrupt; /* C_Sign: flip a bit with this probability */
} rule;

static CK_FUNCTION_LIST real_copy;
static CK_FUNCTION_LIST_PTR real;
static CK_FUNCTION_LIST shim;

/* Rules, counters and hang bookkeeping, under rules_mu. */
static pthread_mutex_t rules_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rules_cv = PTHREAD_COND_INITIALIZER;
static rule rules[F_COUNT + 1];
static uint64_t calls[F_COUNT];
static unsigned hung[F_COUNT];
static long crash_wanted;  /* generation in the file */
static long crash_applied; /* generation last applied */
static struct stat file_seen;
static bool file_known;
static _Atomic uint64_t next_check_ns;
static atomic_uint sessions_max;         /* "sessions max=N"; 0: no limit */
static atomic_bool sessions_unavailable; /* "sessions unavailable" */

/* Sessions and signatures, for the session limit and p11_fault_peaks. */
static atomic_uint sessions_open, sessions_peak, signs_in, signs_peak, sessions_refused;

__attribute__((visibility("default"))) void p11_fault_peaks(unsigned *sessions, unsigned *signs, unsigned *refused);
__attribute__((visibility("default"))) void p11_fault_peaks(unsigned *sessions, unsigned *signs, unsigned *refused)
{
	*sessions = atomic_exchange(&sessions_peak, atomic_load(&sessions_open));
	*signs = atomic_exchange(&signs_peak, atomic_load(&signs_in));
	*refused = atomic_exchange(&sessions_refused, 0);
}

static void raise_peak(atomic_uint *peak, unsigned v)
{
	unsigned old = atomic_load(peak);
	while (v > old && !atomic_compare_exchange_weak(peak, &old, v))
		;
}

/* The wrapped module's state: calls share it, a crash owns it. */
static pthread_rwlock_t state_lock = PTHREAD_RWLOCK_INITIALIZER;
static atomic_bool crashing;
static CK_C_INITIALIZE_ARGS init_args;
static bool init_args_null;
static bool initialised; /* under state_lock (write) */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* xorshift64*, one state per thread: no lock and no shared line. */
static double uniform(void)
{
	static _Thread_local uint64_t x;
	if (!x)
		x = now_ns() ^ ((uint64_t)(uintptr_t)&x << 16) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	return (double)((x * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* One line "what fn n" in the event log. */
static void event(const char *what, const char *fn, long n)
{
	const char *path = getenv("SIGNET_P11FAULT_LOG");
	if (!path || !*path)
		return;
	char line[128];
	int len = snprintf(line, sizeof(line), "%s %s %ld\n", what, fn, n);
	if (len <= 0 || (size_t)len >= sizeof(line))
		return;
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fputs(line, f);
	fclose(f);
}

static const struct {
	const char *name;
	CK_RV rv;
} ckr_table[] = {
    {"CKR_DEVICE_ERROR", CKR_DEVICE_ERROR},
    {"CKR_DEVICE_REMOVED", CKR_DEVICE_REMOVED},
    {"CKR_DEVICE_MEMORY", CKR_DEVICE_MEMORY},
    {"CKR_TOKEN_NOT_PRESENT", CKR_TOKEN_NOT_PRESENT},
    {"CKR_SESSION_HANDLE_INVALID", CKR_SESSION_HANDLE_INVALID},
    {"CKR_SESSION_CLOSED", CKR_SESSION_CLOSED},
    {"CKR_USER_NOT_LOGGED_IN", CKR_USER_NOT_LOGGED_IN},
    {"CKR_GENERAL_ERROR", CKR_GENERAL_ERROR},
    {"CKR_FUNCTION_FAILED", CKR_FUNCTION_FAILED},
    {"CKR_HOST_MEMORY", CKR_HOST_MEMORY},
    {"CKR_OPERATION_ACTIVE", CKR_OPERATION_ACTIVE},
    {"CKR_KEY_HANDLE_INVALID", CKR_KEY_HANDLE_INVALID},
    {"CKR_PIN_INCORRECT", CKR_PIN_INCORRECT},
};

static bool parse_ckr(const char *s, CK_RV *out)
{
	for (size_t i = 0; i < sizeof(ckr_table) / sizeof(ckr_table[0]); i++)
		if (strcmp(s, ckr_table[i].name) == 0) {
			*out = ckr_table[i].rv;
			return true;
		}
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 0);
	if (errno || end == s || *end)
		return false;
	*out = (CK_RV)v;
	return true;
}

static int func_index(const char *s)
{
	if (strcmp(s, "*") == 0)
		return F_ANY;
	for (int i = 0; i < F_COUNT; i++)
		if (strcmp(s, func_names[i]) == 0)
			return i;
	return -1;
}

/* One "key=value" of a rule; false when it is not understood. */
static bool parse_setting(rule *r, const char *kv)
{
	const char *eq = strchr(kv, '=');
	if (!eq)
		return false;
	char key[32];
	size_t klen = (size_t)(eq - kv);
	if (klen >= sizeof(key))
		return false;
	memcpy(key, kv, klen);
	key[klen] = '\0';
	const char *v = eq + 1;
	if (strcmp(key, "error") == 0)
		return parse_ckr(v, &r->error);
	char *end;
	double d = strtod(v, &end);
	if (end == v || *end || d < 0)
		return false;
	if (strcmp(key, "prob") == 0)
		r->prob = d;
	else if (strcmp(key, "every") == 0)
		r->every = (unsigned)d;
	else if (strcmp(key, "delay_ms") == 0 && d < 1e6)
		r->delay_us = (unsigned)(d * 1000 + 0.5);
	else if (strcmp(key, "spike_ms") == 0 && d < 1e6)
		r->spike_us = (unsigned)(d * 1000 + 0.5);
	else if (strcmp(key, "spike_prob") == 0)
		r->spike_prob = d;
	else if (strcmp(key, "hang") == 0)
		r->hang = (unsigned)d;
	else if (strcmp(key, "corrupt") == 0)
		r->corrupt = d;
	else
		return false;
	return true;
}

/* Parses the file into fresh rules; rules_mu held. A line not understood is
 * reported on stderr and skipped (a test typo must not pass silently). */
static void parse_file(FILE *f)
{
	rule fresh[F_COUNT + 1];
	memset(fresh, 0, sizeof(fresh));
	long crash = crash_wanted;
	unsigned max_sessions = 0;
	bool unavailable = false;
	char line[MAX_LINE];
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *save = NULL;
		char *word = strtok_r(line, " \t\r\n", &save);
		if (!word)
			continue;
		if (strcmp(word, "sessions") == 0) {
			char *kv = strtok_r(NULL, " \t\r\n", &save);
			if (kv && strncmp(kv, "max=", 4) == 0)
				max_sessions = (unsigned)strtoul(kv + 4, NULL, 10);
			else if (kv && strcmp(kv, "unavailable") == 0)
				unavailable = true;
			else
				fprintf(stderr, "p11_fault: bad sessions line\n");
			continue;
		}
		if (strcmp(word, "crash") == 0) {
			char *g = strtok_r(NULL, " \t\r\n", &save);
			if (g)
				crash = strtol(g, NULL, 10);
			continue;
		}
		int fi = func_index(word);
		if (fi < 0) {
			fprintf(stderr, "p11_fault: unknown function %s\n", word);
			continue;
		}
		rule r = {.set = true};
		bool ok = true;
		for (char *kv; ok && (kv = strtok_r(NULL, " \t\r\n", &save));)
			ok = parse_setting(&r, kv);
		if (!ok) {
			fprintf(stderr, "p11_fault: bad rule for %s\n", word);
			continue;
		}
		fresh[fi] = r;
	}
	memcpy(rules, fresh, sizeof(rules));
	crash_wanted = crash;
	atomic_store(&sessions_max, max_sessions);
	atomic_store(&sessions_unavailable, unavailable);
}

static void crash_now(long gen);

/* Re-reads the control file when it changed; cheap otherwise (one clock
 * read, and one stat per RECHECK_MS across all threads). */
static void maybe_reload(void)
{
	uint64_t now = now_ns(), due = atomic_load(&next_check_ns);
	if (now < due || !atomic_compare_exchange_strong(&next_check_ns, &due, now + RECHECK_MS * 1000000ull))
		return;
	const char *path = getenv("SIGNET_P11FAULT_CONTROL");
	if (!path || !*path)
		return;
	struct stat st;
	bool exists = stat(path, &st) == 0;
	long crash_gen = 0;
	bool do_crash = false;
	pthread_mutex_lock(&rules_mu);
	bool changed =
	    exists != file_known || (exists && (st.st_ino != file_seen.st_ino || st.st_size != file_seen.st_size ||
	                                        st.st_mtim.tv_sec != file_seen.st_mtim.tv_sec ||
	                                        st.st_mtim.tv_nsec != file_seen.st_mtim.tv_nsec));
	if (changed) {
		FILE *f = exists ? fopen(path, "r") : NULL;
		if (f) {
			parse_file(f);
			fclose(f);
			file_seen = st;
			file_known = true;
		} else {
			memset(rules, 0, sizeof(rules));
			file_known = false;
		}
		event("reload", "control", (long)st.st_size);
		pthread_cond_broadcast(&rules_cv);
		do_crash = crash_wanted != crash_applied;
		crash_gen = crash_wanted;
		crash_applied = crash_wanted;
	}
	pthread_mutex_unlock(&rules_mu);
	if (do_crash)
		crash_now(crash_gen);
}

/* The wrapped module loses all its state: C_Finalize, then C_Initialize with
 * the arguments signet gave, as a device reset would leave it. */
static void crash_now(long gen)
{
	atomic_store(&crashing, true);
	pthread_rwlock_wrlock(&state_lock);
	if (initialised) {
		real->C_Finalize(NULL);
		atomic_store(&sessions_open, 0);
		CK_RV rv = real->C_Initialize(init_args_null ? NULL : &init_args);
		initialised = rv == CKR_OK;
	}
	pthread_rwlock_unlock(&state_lock);
	atomic_store(&crashing, false);
	event("crash", "generation", gen);
}

/* What the rule for fi asks before the call: hang, latency, then an error
 * (returned in *rv) or none (false). corrupt is the rule's corrupt chance. */
static bool before_call(int fi, CK_RV *rv, double *corrupt)
{
	maybe_reload();
	pthread_mutex_lock(&rules_mu);
	rule r = rules[fi].set ? rules[fi] : rules[F_ANY];
	uint64_t n = ++calls[fi];
	if (r.hang && hung[fi] < r.hang) {
		hung[fi]++;
		pthread_mutex_unlock(&rules_mu);
		event("hang", func_names[fi], (long)n);
		for (;;) {
			sleep_us(RECHECK_MS * 1000u);
			maybe_reload();
			pthread_mutex_lock(&rules_mu);
			rule now = rules[fi].set ? rules[fi] : rules[F_ANY];
			if (!now.hang)
				break;
			pthread_mutex_unlock(&rules_mu);
		}
		hung[fi]--;
		r = rules[fi].set ? rules[fi] : rules[F_ANY];
		event("release", func_names[fi], (long)n);
	}
	pthread_mutex_unlock(&rules_mu);
	unsigned wait = r.delay_us;
	if (r.spike_us && uniform() < r.spike_prob)
		wait += r.spike_us;
	if (wait)
		sleep_us(wait);
	*corrupt = r.corrupt;
	if (r.error == CKR_OK)
		return false;
	bool hit = r.every ? n % r.every == 0 : r.prob > 0 ? uniform() < r.prob : true;
	if (hit)
		*rv = r.error;
	return hit;
}

static void enter_state(void)
{
	while (atomic_load(&crashing))
		sleep_us(1000);
	pthread_rwlock_rdlock(&state_lock);
}

static void leave_state(void)
{
	pthread_rwlock_unlock(&state_lock);
}

/* One wrapper per function of the table: the rule first, then the real call
 * under the state lock. */
#define P11F_WRAP(n, params, args)                                                                                     \
	static CK_RV w_##n params                                                                                      \
	{                                                                                                              \
		CK_RV rv;                                                                                              \
		double corrupt;                                                                                        \
		if (before_call(F_##n, &rv, &corrupt))                                                                 \
			return rv;                                                                                     \
		(void)corrupt;                                                                                         \
		enter_state();                                                                                         \
		rv = real->C_##n args;                                                                                 \
		leave_state();                                                                                         \
		return rv;                                                                                             \
	}

P11F_WRAP(GetSlotList, (CK_BBOOL p, CK_SLOT_ID_PTR l, CK_ULONG_PTR c), (p, l, c))
P11F_WRAP(GetSlotInfo, (CK_SLOT_ID s, CK_SLOT_INFO_PTR i), (s, i))
P11F_WRAP(GetMechanismList, (CK_SLOT_ID s, CK_MECHANISM_TYPE_PTR l, CK_ULONG_PTR c), (s, l, c))
P11F_WRAP(GetMechanismInfo, (CK_SLOT_ID s, CK_MECHANISM_TYPE t, CK_MECHANISM_INFO_PTR i), (s, t, i))
P11F_WRAP(GetSessionInfo, (CK_SESSION_HANDLE h, CK_SESSION_INFO_PTR i), (h, i))
P11F_WRAP(Login, (CK_SESSION_HANDLE h, CK_USER_TYPE u, CK_UTF8CHAR_PTR p, CK_ULONG l), (h, u, p, l))
P11F_WRAP(Logout, (CK_SESSION_HANDLE h), (h))
P11F_WRAP(FindObjectsInit, (CK_SESSION_HANDLE h, CK_ATTRIBUTE_PTR t, CK_ULONG n), (h, t, n))
P11F_WRAP(FindObjects, (CK_SESSION_HANDLE h, CK_OBJECT_HANDLE_PTR o, CK_ULONG m, CK_ULONG_PTR n), (h, o, m, n))
P11F_WRAP(FindObjectsFinal, (CK_SESSION_HANDLE h), (h))
P11F_WRAP(GetAttributeValue, (CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o, CK_ATTRIBUTE_PTR t, CK_ULONG n), (h, o, t, n))
P11F_WRAP(CopyObject, (CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o, CK_ATTRIBUTE_PTR t, CK_ULONG n, CK_OBJECT_HANDLE_PTR c),
          (h, o, t, n, c))
P11F_WRAP(DestroyObject, (CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o), (h, o))
P11F_WRAP(SignInit, (CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE k), (h, m, k))
P11F_WRAP(GenerateKeyPair,
          (CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_ATTRIBUTE_PTR pt, CK_ULONG pn, CK_ATTRIBUTE_PTR vt, CK_ULONG vn,
           CK_OBJECT_HANDLE_PTR pub, CK_OBJECT_HANDLE_PTR priv),
          (h, m, pt, pn, vt, vn, pub, priv))
P11F_WRAP(InitToken, (CK_SLOT_ID s, CK_UTF8CHAR_PTR p, CK_ULONG l, CK_UTF8CHAR_PTR label), (s, p, l, label))
P11F_WRAP(InitPIN, (CK_SESSION_HANDLE h, CK_UTF8CHAR_PTR p, CK_ULONG l), (h, p, l))

/* The session limit ("sessions max=N") by hand: the token states it, an
 * open beyond it is refused, closes count down. */
static CK_RV w_GetTokenInfo(CK_SLOT_ID s, CK_TOKEN_INFO_PTR i)
{
	CK_RV rv;
	double corrupt;
	if (before_call(F_GetTokenInfo, &rv, &corrupt))
		return rv;
	enter_state();
	rv = real->C_GetTokenInfo(s, i);
	leave_state();
	unsigned max = atomic_load(&sessions_max);
	if (rv == CKR_OK && max) {
		i->ulMaxSessionCount = max;
		i->ulSessionCount = atomic_load(&sessions_open);
	} else if (rv == CKR_OK && atomic_load(&sessions_unavailable)) {
		i->ulMaxSessionCount = CK_UNAVAILABLE_INFORMATION;
	}
	return rv;
}

static CK_RV w_OpenSession(CK_SLOT_ID s, CK_FLAGS f, CK_VOID_PTR a, CK_NOTIFY n, CK_SESSION_HANDLE_PTR h)
{
	CK_RV rv;
	double corrupt;
	if (before_call(F_OpenSession, &rv, &corrupt))
		return rv;
	/* A place first, so that concurrent opens cannot pass the limit. */
	unsigned max = atomic_load(&sessions_max), open = atomic_fetch_add(&sessions_open, 1) + 1;
	if (max && open > max) {
		atomic_fetch_sub(&sessions_open, 1);
		atomic_fetch_add(&sessions_refused, 1);
		event("session_count", "C_OpenSession", (long)max);
		return CKR_SESSION_COUNT;
	}
	enter_state();
	rv = real->C_OpenSession(s, f, a, n, h);
	leave_state();
	if (rv == CKR_OK)
		raise_peak(&sessions_peak, open);
	else
		atomic_fetch_sub(&sessions_open, 1);
	return rv;
}

static CK_RV w_CloseSession(CK_SESSION_HANDLE h)
{
	CK_RV rv;
	double corrupt;
	if (before_call(F_CloseSession, &rv, &corrupt))
		return rv;
	enter_state();
	rv = real->C_CloseSession(h);
	leave_state();
	if (rv == CKR_OK)
		atomic_fetch_sub(&sessions_open, 1);
	return rv;
}

static CK_RV w_CloseAllSessions(CK_SLOT_ID s)
{
	CK_RV rv;
	double corrupt;
	if (before_call(F_CloseAllSessions, &rv, &corrupt))
		return rv;
	enter_state();
	rv = real->C_CloseAllSessions(s);
	leave_state();
	if (rv == CKR_OK)
		atomic_store(&sessions_open, 0);
	return rv;
}

/* C_Sign by hand: a corrupt rule flips one bit of a good signature; calls
 * inside at once (the delay included) are counted for p11_fault_peaks. */
static CK_RV w_Sign(CK_SESSION_HANDLE h, CK_BYTE_PTR in, CK_ULONG inlen, CK_BYTE_PTR sig, CK_ULONG_PTR siglen)
{
	CK_RV rv;
	double corrupt;
	raise_peak(&signs_peak, atomic_fetch_add(&signs_in, 1) + 1);
	bool injected = before_call(F_Sign, &rv, &corrupt);
	if (!injected) {
		enter_state();
		rv = real->C_Sign(h, in, inlen, sig, siglen);
		leave_state();
	}
	atomic_fetch_sub(&signs_in, 1);
	if (injected)
		return rv;
	if (rv == CKR_OK && sig && siglen && *siglen > 0 && corrupt > 0 && uniform() < corrupt)
		sig[*siglen / 2] ^= 0x01;
	return rv;
}

static CK_RV w_Initialize(CK_VOID_PTR args)
{
	maybe_reload();
	pthread_rwlock_wrlock(&state_lock);
	CK_RV rv = real->C_Initialize(args);
	if (rv == CKR_OK) {
		init_args_null = !args;
		if (args)
			init_args = *(CK_C_INITIALIZE_ARGS *)args;
		initialised = true;
	}
	pthread_rwlock_unlock(&state_lock);
	return rv;
}

static CK_RV w_Finalize(CK_VOID_PTR r)
{
	pthread_rwlock_wrlock(&state_lock);
	CK_RV rv = real->C_Finalize(r);
	initialised = false;
	atomic_store(&sessions_open, 0); /* C_Finalize closed them all */
	pthread_rwlock_unlock(&state_lock);
	return rv;
}

__attribute__((visibility("default"))) CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR out)
{
	if (!out)
		return CKR_ARGUMENTS_BAD;
	if (!real) {
		const char *path = getenv("SIGNET_SOFTHSM_MODULE");
		void *dl = dlopen(path && *path ? path : "/usr/lib/softhsm/libsofthsm2.so", RTLD_NOW | RTLD_LOCAL);
		CK_C_GetFunctionList gfl = dl ? (CK_C_GetFunctionList)dlsym(dl, "C_GetFunctionList") : NULL;
		CK_FUNCTION_LIST_PTR r = NULL;
		if (!gfl || gfl(&r) != CKR_OK || !r)
			return CKR_GENERAL_ERROR;
		real_copy = *r;
		real = &real_copy;
		shim = *r;
		shim.C_Initialize = w_Initialize;
		shim.C_Finalize = w_Finalize;
#define P11F_SET(n) shim.C_##n = w_##n;
		P11F_FUNCS(P11F_SET)
	}
	*out = &shim;
	return CKR_OK;
}
