/*
 * fault_module: a PKCS#11 module for the sg_hsm re-init tests that forwards
 * to SoftHSM2 (SIGNET_SOFTHSM_MODULE) and can play a forwarded token whose
 * server went away, the way p11-kit's client does: once "cut", every call
 * sg_hsm makes on a session or slot answers CKR_DEVICE_ERROR until the
 * module is finalised and initialised again, which reconnects. While the
 * "server" is also "down", the reconnect finds no slot (p11-kit's client
 * initialises fine and lists nothing). The test drives it through
 * fault_module_set() and reads fault_module_inits(), found with dlsym on the
 * same library (dlopen of one path gives one instance).
 */
#include <dlfcn.h>
#include <p11-kit/pkcs11.h>
#include <stdatomic.h>
#include <stdlib.h>

/* The control interface test_hsm_reinit.c reaches with dlsym. */
__attribute__((visibility("default"))) void fault_module_set(int cut_now, int down_now);
__attribute__((visibility("default"))) int fault_module_inits(void);
__attribute__((visibility("default"))) int fault_module_finals(void);

static CK_FUNCTION_LIST real_copy;
static CK_FUNCTION_LIST_PTR real;
static CK_FUNCTION_LIST shim;
static atomic_bool cut;   /* connection lost: CKR_DEVICE_ERROR until re-init */
static atomic_bool down;  /* server away: a re-init lists no slot and stays cut */
static atomic_int inits;  /* successful C_Initialize calls */
static atomic_int finals; /* C_Finalize calls */

__attribute__((visibility("default"))) void fault_module_set(int cut_now, int down_now)
{
	atomic_store(&down, down_now != 0);
	atomic_store(&cut, cut_now != 0);
}

__attribute__((visibility("default"))) int fault_module_inits(void)
{
	return atomic_load(&inits);
}

__attribute__((visibility("default"))) int fault_module_finals(void)
{
	return atomic_load(&finals);
}

#define CUT_OR(call)                                                                                                   \
	do {                                                                                                           \
		if (atomic_load(&cut))                                                                                 \
			return CKR_DEVICE_ERROR;                                                                       \
		return call;                                                                                           \
	} while (0)

static CK_RV s_initialize(CK_VOID_PTR args)
{
	CK_RV rv = real->C_Initialize(args);
	if (rv == CKR_OK) {
		atomic_fetch_add(&inits, 1);
		atomic_store(&cut, atomic_load(&down));
	}
	return rv;
}

static CK_RV s_finalize(CK_VOID_PTR r)
{
	atomic_fetch_add(&finals, 1);
	return real->C_Finalize(r);
}

static CK_RV s_get_slot_list(CK_BBOOL present, CK_SLOT_ID_PTR list, CK_ULONG_PTR n)
{
	if (atomic_load(&cut)) {
		*n = 0;
		return CKR_OK;
	}
	return real->C_GetSlotList(present, list, n);
}

static CK_RV s_open_session(CK_SLOT_ID slot, CK_FLAGS fl, CK_VOID_PTR app, CK_NOTIFY notify, CK_SESSION_HANDLE_PTR sh)
{
	CUT_OR(real->C_OpenSession(slot, fl, app, notify, sh));
}

static CK_RV s_close_session(CK_SESSION_HANDLE sh)
{
	CUT_OR(real->C_CloseSession(sh));
}

static CK_RV s_get_session_info(CK_SESSION_HANDLE sh, CK_SESSION_INFO_PTR si)
{
	CUT_OR(real->C_GetSessionInfo(sh, si));
}

static CK_RV s_login(CK_SESSION_HANDLE sh, CK_USER_TYPE u, CK_UTF8CHAR_PTR pin, CK_ULONG len)
{
	CUT_OR(real->C_Login(sh, u, pin, len));
}

static CK_RV s_find_init(CK_SESSION_HANDLE sh, CK_ATTRIBUTE_PTR t, CK_ULONG n)
{
	CUT_OR(real->C_FindObjectsInit(sh, t, n));
}

static CK_RV s_sign_init(CK_SESSION_HANDLE sh, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE k)
{
	CUT_OR(real->C_SignInit(sh, m, k));
}

static CK_RV s_sign(CK_SESSION_HANDLE sh, CK_BYTE_PTR in, CK_ULONG inlen, CK_BYTE_PTR sig, CK_ULONG_PTR siglen)
{
	CUT_OR(real->C_Sign(sh, in, inlen, sig, siglen));
}

__attribute__((visibility("default"))) CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR out)
{
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
		shim.C_Initialize = s_initialize;
		shim.C_Finalize = s_finalize;
		shim.C_GetSlotList = s_get_slot_list;
		shim.C_OpenSession = s_open_session;
		shim.C_CloseSession = s_close_session;
		shim.C_GetSessionInfo = s_get_session_info;
		shim.C_Login = s_login;
		shim.C_FindObjectsInit = s_find_init;
		shim.C_SignInit = s_sign_init;
		shim.C_Sign = s_sign;
	}
	*out = &shim;
	return CKR_OK;
}
