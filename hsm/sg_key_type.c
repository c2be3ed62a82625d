/*
 * sg_key_type: the five CA key types signet supports, by name. One table
 * drives both directions so that a name printed in a log can always be
 * parsed back (signetctl and the config use the same tokens).
 */
#include "sg_guard.h"
#include "sg_hsm.h"

#include <string.h>

static const struct {
	sg_key_type type;
	const char *name;
	bool ec;
} key_types[SG_KEY_TYPE_COUNT] = {
    {SG_KEY_EC_P256, "ecdsa-p256", true}, {SG_KEY_EC_P384, "ecdsa-p384", true}, {SG_KEY_RSA_2048, "rsa-2048", false},
    {SG_KEY_RSA_3072, "rsa-3072", false}, {SG_KEY_RSA_4096, "rsa-4096", false},
};

const char *sg_key_type_name(sg_key_type t)
{
	if ((unsigned)t >= SG_KEY_TYPE_COUNT)
		return "unknown";
	return key_types[t].name;
}

int sg_key_type_parse(const char *s, sg_key_type *out)
{
	SG_ENSURE(s, SG_EINVAL, "key type missing");
	for (size_t i = 0; i < SG_KEY_TYPE_COUNT; i++) {
		if (strcmp(s, key_types[i].name) == 0) {
			*out = key_types[i].type;
			return SG_OK;
		}
	}
	SG_BAIL(SG_EINVAL, "unknown key type '%.64s' (want ecdsa-p256, ecdsa-p384, rsa-2048, rsa-3072 or rsa-4096)", s);
}

bool sg_key_type_is_ec(sg_key_type t)
{
	return (unsigned)t < SG_KEY_TYPE_COUNT && key_types[t].ec;
}
