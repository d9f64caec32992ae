/* SPDX-License-Identifier: Apache-2.0 */
/* crypto: randomness, HMAC-SHA256, HKDF-SHA256, constant-time comparison
 * and wiping. With transport/tls.c, the only file in pcopy that includes
 * OpenSSL headers. */
#include "sys/crypto.h"

#include <errno.h>
#include <limits.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/opensslv.h>
#include <openssl/rand.h>

#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#include <openssl/core_names.h>
#include <openssl/params.h>
#else
#include <openssl/hmac.h>
#endif

#include "sys/err.h"

/* RAND_bytes takes an int; larger requests are served in chunks. */
#define CRYPTO_RAND_CHUNK (1u << 30)

int crypto_random(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		size_t n = len < CRYPTO_RAND_CHUNK ? len : CRYPTO_RAND_CHUNK;

		if (RAND_bytes(p, (int)n) != 1)
			return -PC_E_FILEIO;
		p += n;
		len -= n;
	}
	return 0;
}

#if OPENSSL_VERSION_NUMBER >= 0x30000000L

int crypto_hmac(const uint8_t *key, size_t keylen, const struct iovec *iov, int n,
		uint8_t out[CRYPTO_MAC_LEN])
{
	static const uint8_t no_key;
	char digest[] = "SHA256";
	OSSL_PARAM params[2];
	EVP_MAC *mac = NULL;
	EVP_MAC_CTX *ctx = NULL;
	size_t outlen = 0;
	int ret = -PC_E_FILEIO;

	if (n < 0 || (n > 0 && iov == NULL))
		return -EINVAL;
	mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
	if (mac == NULL)
		goto out;
	ctx = EVP_MAC_CTX_new(mac);
	if (ctx == NULL) {
		ret = -ENOMEM;
		goto out;
	}
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0);
	params[1] = OSSL_PARAM_construct_end();
	/* A NULL key means "reuse the previous key" to OpenSSL; an empty key
	 * must still be a real pointer. */
	if (EVP_MAC_init(ctx, key != NULL ? key : &no_key, keylen, params) != 1)
		goto out;
	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len == 0)
			continue;
		if (EVP_MAC_update(ctx, iov[i].iov_base, iov[i].iov_len) != 1)
			goto out;
	}
	if (EVP_MAC_final(ctx, out, &outlen, CRYPTO_MAC_LEN) != 1 || outlen != CRYPTO_MAC_LEN)
		goto out;
	ret = 0;
out:
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return ret;
}

#else /* OpenSSL 1.1.1: HMAC_CTX is not deprecated there. */

int crypto_hmac(const uint8_t *key, size_t keylen, const struct iovec *iov, int n,
		uint8_t out[CRYPTO_MAC_LEN])
{
	static const uint8_t no_key;
	HMAC_CTX *ctx = NULL;
	unsigned int outlen = 0;
	int ret = -PC_E_FILEIO;

	if (n < 0 || (n > 0 && iov == NULL) || keylen > INT_MAX)
		return -EINVAL;
	ctx = HMAC_CTX_new();
	if (ctx == NULL)
		return -ENOMEM;
	if (HMAC_Init_ex(ctx, key != NULL ? key : &no_key, (int)keylen, EVP_sha256(), NULL) != 1)
		goto out;
	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len == 0)
			continue;
		if (HMAC_Update(ctx, iov[i].iov_base, iov[i].iov_len) != 1)
			goto out;
	}
	if (HMAC_Final(ctx, out, &outlen) != 1 || outlen != CRYPTO_MAC_LEN)
		goto out;
	ret = 0;
out:
	HMAC_CTX_free(ctx);
	return ret;
}

#endif

/* EVP_PKEY_HKDF through EVP_PKEY_CTX: the same calls in OpenSSL 1.1.1 (where
 * the setters are macros) and 3 (functions; the interface is not
 * deprecated). They take int lengths, hence the bounds. */
int crypto_hkdf(const uint8_t *ikm, size_t ikmlen, const uint8_t *salt, size_t saltlen,
		const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen)
{
	EVP_PKEY_CTX *ctx = NULL;
	size_t len = outlen;
	int ret = -PC_E_FILEIO;

	if (ikm == NULL || ikmlen == 0 || ikmlen > INT_MAX || (salt == NULL && saltlen > 0) ||
	    saltlen > INT_MAX || (info == NULL && infolen > 0) || infolen > 1024 ||
	    out == NULL || outlen == 0 || outlen > 255u * CRYPTO_MAC_LEN)
		return -EINVAL;
	ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	if (ctx == NULL)
		return -ENOMEM;
	if (EVP_PKEY_derive_init(ctx) <= 0 ||
	    EVP_PKEY_CTX_hkdf_mode(ctx, EVP_PKEY_HKDEF_MODE_EXTRACT_AND_EXPAND) <= 0 ||
	    EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) <= 0 ||
	    EVP_PKEY_CTX_set1_hkdf_key(ctx, ikm, (int)ikmlen) <= 0)
		goto out;
	/* No salt set: OpenSSL uses HashLen zeros, as RFC 5869 says. */
	if (saltlen > 0 && EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, (int)saltlen) <= 0)
		goto out;
	if (infolen > 0 && EVP_PKEY_CTX_add1_hkdf_info(ctx, info, (int)infolen) <= 0)
		goto out;
	if (EVP_PKEY_derive(ctx, out, &len) <= 0 || len != outlen)
		goto out;
	ret = 0;
out:
	if (ret != 0)
		OPENSSL_cleanse(out, outlen);
	EVP_PKEY_CTX_free(ctx);
	return ret;
}

bool crypto_equal(const void *a, const void *b, size_t len)
{
	if (len == 0)
		return true;
	return CRYPTO_memcmp(a, b, len) == 0;
}

void crypto_wipe(void *p, size_t len)
{
	if (p == NULL || len == 0)
		return;
	OPENSSL_cleanse(p, len);
}
