/* SPDX-License-Identifier: Apache-2.0 */
/* crypto: with transport/tls.c, the only file that includes OpenSSL.
 * Randomness, HMAC-SHA256, HKDF-SHA256, constant-time comparison and
 * wiping. All functions are thread-safe. */
#ifndef PCOPY_CRYPTO_H
#define PCOPY_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define CRYPTO_MAC_LEN 32u

/* Fills buf with len cryptographically random bytes. Returns 0 or -PC_E_FILEIO
 * style negative code if the RNG fails (never silently). */
int crypto_random(void *buf, size_t len);

/* HMAC-SHA256 over the concatenation of iov[0..n-1], keyed by key[keylen].
 * Returns 0 or a negative code. */
int crypto_hmac(const uint8_t *key, size_t keylen, const struct iovec *iov, int n,
		uint8_t out[CRYPTO_MAC_LEN]);

/* HKDF-SHA256 (RFC 5869): extract from ikm[ikmlen] (ikmlen >= 1) with
 * salt[saltlen] (NULL/0: no salt, i.e. 32 zero bytes), then expand with
 * info[infolen] (may be NULL/0) into out[outlen], 1 <= outlen <= 255 * 32.
 * Returns 0, -EINVAL for bad lengths, or -PC_E_FILEIO if OpenSSL fails. */
int crypto_hkdf(const uint8_t *ikm, size_t ikmlen, const uint8_t *salt, size_t saltlen,
		const uint8_t *info, size_t infolen, uint8_t *out, size_t outlen);

/* Constant-time equality of two len-byte strings (CRYPTO_memcmp). */
bool crypto_equal(const void *a, const void *b, size_t len);

/* Overwrites len bytes at p with zeros in a way the compiler keeps. */
void crypto_wipe(void *p, size_t len);

#endif
