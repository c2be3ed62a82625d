/*
 * sg_crypto_impl: what signer/'s OpenSSL files share and nobody else may
 * use (the layers above see OpenSSL through signer's APIs only). Unlike the
 * public headers, this one exposes OpenSSL types.
 */
#ifndef SG_CRYPTO_IMPL_H
#define SG_CRYPTO_IMPL_H

#include "sg_key.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

/* The process-wide digest for h, fetched once on first use (thread-safe);
 * borrowed for the life of the process. NULL when the provider lacks it. */
const EVP_MD *sg_crypto_shared_md(sg_hash h);

/* Scope-bound cleanup of OpenSSL handles (sg_guard.h's SG_CLEANUP):
 * `BIO *b SG_CLEANUP(sg_ossl_bio_freep) = BIO_new(...)`. Each accepts a
 * NULL handle, as the OpenSSL free functions do. */
#define SG_OSSL_FREEP(name, type, free_fn) \
	static inline void name(type **p)  \
	{                                  \
		free_fn(*p);               \
	}
SG_OSSL_FREEP(sg_ossl_bio_freep, BIO, BIO_free)
SG_OSSL_FREEP(sg_ossl_bn_freep, BIGNUM, BN_free)
SG_OSSL_FREEP(sg_ossl_pkey_freep, EVP_PKEY, EVP_PKEY_free)
SG_OSSL_FREEP(sg_ossl_pkey_ctx_freep, EVP_PKEY_CTX, EVP_PKEY_CTX_free)
SG_OSSL_FREEP(sg_ossl_md_ctx_freep, EVP_MD_CTX, EVP_MD_CTX_free)
SG_OSSL_FREEP(sg_ossl_param_bld_freep, OSSL_PARAM_BLD, OSSL_PARAM_BLD_free)
SG_OSSL_FREEP(sg_ossl_params_freep, OSSL_PARAM, OSSL_PARAM_free)

#endif
