/*
 * sg_hsm_ckr: the names and categories of PKCS#11 return values (CKR_*).
 * A table and three questions about a code (its name, whether it is a
 * refused PIN, which of our error codes it maps to), asked by every other
 * file of hsm/; apart so that the long table does not sit in the adapter's
 * core. The contract is in private/sg_hsm_impl.h.
 */
#include "sg_hsm_impl.h"

#include <stdio.h>

#define CKR_ENTRY(x)                                                                                                   \
	{                                                                                                              \
		x, #x                                                                                                  \
	}
static const struct {
	CK_RV rv;
	const char *name;
} ckr_names[] = {
    CKR_ENTRY(CKR_OK),
    CKR_ENTRY(CKR_CANCEL),
    CKR_ENTRY(CKR_HOST_MEMORY),
    CKR_ENTRY(CKR_SLOT_ID_INVALID),
    CKR_ENTRY(CKR_GENERAL_ERROR),
    CKR_ENTRY(CKR_FUNCTION_FAILED),
    CKR_ENTRY(CKR_ARGUMENTS_BAD),
    CKR_ENTRY(CKR_ATTRIBUTE_READ_ONLY),
    CKR_ENTRY(CKR_ATTRIBUTE_SENSITIVE),
    CKR_ENTRY(CKR_ATTRIBUTE_TYPE_INVALID),
    CKR_ENTRY(CKR_ATTRIBUTE_VALUE_INVALID),
    CKR_ENTRY(CKR_DATA_INVALID),
    CKR_ENTRY(CKR_DATA_LEN_RANGE),
    CKR_ENTRY(CKR_DEVICE_ERROR),
    CKR_ENTRY(CKR_DEVICE_MEMORY),
    CKR_ENTRY(CKR_DEVICE_REMOVED),
    CKR_ENTRY(CKR_FUNCTION_CANCELED),
    CKR_ENTRY(CKR_FUNCTION_NOT_SUPPORTED),
    CKR_ENTRY(CKR_KEY_HANDLE_INVALID),
    CKR_ENTRY(CKR_KEY_SIZE_RANGE),
    CKR_ENTRY(CKR_KEY_TYPE_INCONSISTENT),
    CKR_ENTRY(CKR_KEY_FUNCTION_NOT_PERMITTED),
    CKR_ENTRY(CKR_MECHANISM_INVALID),
    CKR_ENTRY(CKR_MECHANISM_PARAM_INVALID),
    CKR_ENTRY(CKR_OBJECT_HANDLE_INVALID),
    CKR_ENTRY(CKR_OPERATION_ACTIVE),
    CKR_ENTRY(CKR_OPERATION_NOT_INITIALIZED),
    CKR_ENTRY(CKR_PIN_INCORRECT),
    CKR_ENTRY(CKR_PIN_INVALID),
    CKR_ENTRY(CKR_PIN_LEN_RANGE),
    CKR_ENTRY(CKR_PIN_EXPIRED),
    CKR_ENTRY(CKR_PIN_LOCKED),
    CKR_ENTRY(CKR_SESSION_CLOSED),
    CKR_ENTRY(CKR_SESSION_COUNT),
    CKR_ENTRY(CKR_SESSION_HANDLE_INVALID),
    CKR_ENTRY(CKR_SESSION_PARALLEL_NOT_SUPPORTED),
    CKR_ENTRY(CKR_SESSION_READ_ONLY),
    CKR_ENTRY(CKR_SESSION_EXISTS),
    CKR_ENTRY(CKR_SESSION_READ_ONLY_EXISTS),
    CKR_ENTRY(CKR_SESSION_READ_WRITE_SO_EXISTS),
    CKR_ENTRY(CKR_SIGNATURE_INVALID),
    CKR_ENTRY(CKR_SIGNATURE_LEN_RANGE),
    CKR_ENTRY(CKR_TEMPLATE_INCOMPLETE),
    CKR_ENTRY(CKR_TEMPLATE_INCONSISTENT),
    CKR_ENTRY(CKR_TOKEN_NOT_PRESENT),
    CKR_ENTRY(CKR_TOKEN_NOT_RECOGNIZED),
    CKR_ENTRY(CKR_TOKEN_WRITE_PROTECTED),
    CKR_ENTRY(CKR_USER_ALREADY_LOGGED_IN),
    CKR_ENTRY(CKR_USER_NOT_LOGGED_IN),
    CKR_ENTRY(CKR_USER_PIN_NOT_INITIALIZED),
    CKR_ENTRY(CKR_USER_TYPE_INVALID),
    CKR_ENTRY(CKR_USER_ANOTHER_ALREADY_LOGGED_IN),
    CKR_ENTRY(CKR_USER_TOO_MANY_TYPES),
    CKR_ENTRY(CKR_DOMAIN_PARAMS_INVALID),
    CKR_ENTRY(CKR_CURVE_NOT_SUPPORTED),
    CKR_ENTRY(CKR_BUFFER_TOO_SMALL),
    CKR_ENTRY(CKR_CRYPTOKI_NOT_INITIALIZED),
    CKR_ENTRY(CKR_CRYPTOKI_ALREADY_INITIALIZED),
    CKR_ENTRY(CKR_MUTEX_BAD),
    CKR_ENTRY(CKR_MUTEX_NOT_LOCKED),
    CKR_ENTRY(CKR_NEED_TO_CREATE_THREADS),
    CKR_ENTRY(CKR_CANT_LOCK),
};

/* The symbolic name of rv; unknown codes in hex, in *b. */
const char *hsm_ckr_name(CK_RV rv, ckr_buf *b)
{
	for (size_t i = 0; i < sizeof(ckr_names) / sizeof(ckr_names[0]); i++)
		if (ckr_names[i].rv == rv)
			return ckr_names[i].name;
	snprintf(b->s, sizeof(b->s), "CKR_0x%lx", (unsigned long)rv);
	return b->s;
}

/* Session and device faults that a reopened session (and a new login) can
 * cure. The last three are what a foreign C_Logout / C_CloseAllSessions leaves
 * in a live session: a destroyed private session object, and an operation
 * that never finished. */
static bool is_fault(CK_RV rv)
{
	switch (rv) {
	case CKR_SESSION_HANDLE_INVALID:
	case CKR_SESSION_CLOSED:
	case CKR_USER_NOT_LOGGED_IN:
	case CKR_DEVICE_ERROR:
	case CKR_DEVICE_REMOVED:
	case CKR_DEVICE_MEMORY:
	case CKR_TOKEN_NOT_PRESENT:
	case CKR_OBJECT_HANDLE_INVALID:
	case CKR_KEY_HANDLE_INVALID:
	case CKR_OPERATION_ACTIVE:
		return true;
	default:
		return false;
	}
}

bool hsm_is_pin_error(CK_RV rv)
{
	return rv == CKR_PIN_INCORRECT || rv == CKR_PIN_LOCKED || rv == CKR_PIN_EXPIRED || rv == CKR_PIN_INVALID ||
	       rv == CKR_PIN_LEN_RANGE || rv == CKR_USER_PIN_NOT_INITIALIZED;
}

/* Our category for a CKR: faults are transient (SG_EBUSY: retry after
 * recovery), refused PINs SG_EAUTH, bad input SG_EINVAL, the rest SG_EHSM. */
int hsm_ckr_category(CK_RV rv)
{
	if (is_fault(rv))
		return SG_EBUSY;
	if (hsm_is_pin_error(rv))
		return SG_EAUTH;
	switch (rv) {
	case CKR_DATA_INVALID:
	case CKR_DATA_LEN_RANGE:
	case CKR_BUFFER_TOO_SMALL:
	case CKR_MECHANISM_INVALID:
	case CKR_KEY_TYPE_INCONSISTENT:
		return SG_EINVAL;
	default:
		return SG_EHSM;
	}
}
