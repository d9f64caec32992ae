/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for crypto: HMAC-SHA256 against RFC 4231, HKDF-SHA256 against
 * RFC 5869, iovec splitting,
 * constant-time comparison, randomness and wiping. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <string.h>

#include "sys/crypto.h"

struct hmac_vector {
	const char *name;
	const char *key;  /* NULL: the key is keylen bytes of fill */
	uint8_t fill;
	size_t keylen;
	const char *data;
	uint8_t mac[CRYPTO_MAC_LEN];
};

/* RFC 4231 section 4.2 (test case 1), 4.3 (test case 2) and 4.7 (test case 6). */
static const struct hmac_vector vectors[] = {
	{
		"rfc4231 case 1",
		NULL, 0x0b, 20,
		"Hi There",
		{ 0xb0, 0x34, 0x4c, 0x61, 0xd8, 0xdb, 0x38, 0x53, 0x5c, 0xa8, 0xaf, 0xce,
		  0xaf, 0x0b, 0xf1, 0x2b, 0x88, 0x1d, 0xc2, 0x00, 0xc9, 0x83, 0x3d, 0xa7,
		  0x26, 0xe9, 0x37, 0x6c, 0x2e, 0x32, 0xcf, 0xf7 },
	},
	{
		"rfc4231 case 2",
		"Jefe", 0, 4,
		"what do ya want for nothing?",
		{ 0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26,
		  0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83,
		  0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43 },
	},
	{
		"rfc4231 case 6 (key longer than a block)",
		NULL, 0xaa, 131,
		"Test Using Larger Than Block-Size Key - Hash Key First",
		{ 0x60, 0xe4, 0x31, 0x59, 0x1e, 0xe0, 0xb6, 0x7f, 0x0d, 0x8a, 0x26, 0xaa,
		  0xcb, 0xf5, 0xb7, 0x7f, 0x8e, 0x0b, 0xc6, 0x21, 0x37, 0x28, 0xc5, 0x14,
		  0x05, 0x46, 0x04, 0x0f, 0x0e, 0xe3, 0x7f, 0x54 },
	},
};

#define VECTOR_MAX_KEY 131

static void vector_key(const struct hmac_vector *v, uint8_t key[VECTOR_MAX_KEY])
{
	if (v->key == NULL)
		memset(key, v->fill, v->keylen);
	else
		memcpy(key, v->key, v->keylen);
}

static void test_hmac_rfc4231(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		const struct hmac_vector *v = &vectors[i];
		uint8_t key[VECTOR_MAX_KEY];
		uint8_t mac[CRYPTO_MAC_LEN];
		struct iovec iov = { (void *)(uintptr_t)v->data, strlen(v->data) };

		vector_key(v, key);
		memset(mac, 0, sizeof mac);
		assert_int_equal(crypto_hmac(key, v->keylen, &iov, 1, mac), 0);
		if (memcmp(mac, v->mac, sizeof mac) != 0)
			fail_msg("%s: wrong MAC", v->name);
	}
}

/* Every way of cutting the message into three pieces, including empty
 * pieces, gives the same MAC. */
static void test_hmac_split_anywhere(void **state)
{
	const struct hmac_vector *v = &vectors[1];
	const char *d = v->data;
	size_t len = strlen(d);
	uint8_t key[VECTOR_MAX_KEY];

	(void)state;
	vector_key(v, key);
	for (size_t a = 0; a <= len; a++) {
		for (size_t b = a; b <= len; b++) {
			struct iovec iov[3] = {
				{ (void *)(uintptr_t)d, a },
				{ (void *)(uintptr_t)(d + a), b - a },
				{ (void *)(uintptr_t)(d + b), len - b },
			};
			uint8_t mac[CRYPTO_MAC_LEN];

			assert_int_equal(crypto_hmac(key, v->keylen, iov, 3, mac), 0);
			assert_memory_equal(mac, v->mac, sizeof mac);
		}
	}
}

static void test_hmac_edge_cases(void **state)
{
	static const uint8_t key[4] = { 1, 2, 3, 4 };
	struct iovec empty = { NULL, 0 };
	uint8_t m1[CRYPTO_MAC_LEN], m2[CRYPTO_MAC_LEN], m3[CRYPTO_MAC_LEN];

	(void)state;
	/* No data at all: zero iovecs and one empty iovec agree. */
	assert_int_equal(crypto_hmac(key, sizeof key, NULL, 0, m1), 0);
	assert_int_equal(crypto_hmac(key, sizeof key, &empty, 1, m2), 0);
	assert_memory_equal(m1, m2, sizeof m1);
	/* An empty key works and differs from a non-empty one. */
	assert_int_equal(crypto_hmac(NULL, 0, NULL, 0, m3), 0);
	assert_memory_not_equal(m1, m3, sizeof m1);
	/* A different key gives a different MAC. */
	assert_int_equal(crypto_hmac(key, 3, NULL, 0, m2), 0);
	assert_memory_not_equal(m1, m2, sizeof m1);
	assert_true(crypto_hmac(key, sizeof key, NULL, -1, m1) < 0);
}

static void test_equal(void **state)
{
	uint8_t a[32], b[32];

	(void)state;
	memset(a, 0x5a, sizeof a);
	memcpy(b, a, sizeof b);
	assert_true(crypto_equal(a, b, sizeof a));
	b[0] ^= 1;
	assert_false(crypto_equal(a, b, sizeof a));
	b[0] ^= 1;
	b[31] ^= 0x80;
	assert_false(crypto_equal(a, b, sizeof a));
	assert_true(crypto_equal(a, b, 31));
	assert_true(crypto_equal(a, b, 0));
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != 0)
			return false;
	return true;
}

static void test_random(void **state)
{
	uint8_t a[32], b[32];

	(void)state;
	memset(a, 0, sizeof a);
	memset(b, 0, sizeof b);
	assert_int_equal(crypto_random(a, sizeof a), 0);
	assert_int_equal(crypto_random(b, sizeof b), 0);
	assert_false(all_zero(a, sizeof a));
	assert_false(all_zero(b, sizeof b));
	assert_memory_not_equal(a, b, sizeof a);
	assert_int_equal(crypto_random(a, 0), 0);
}

static void test_wipe(void **state)
{
	uint8_t buf[48];

	(void)state;
	memset(buf, 0xff, sizeof buf);
	crypto_wipe(buf + 8, 32);
	assert_true(all_zero(buf + 8, 32));
	assert_int_equal(buf[7], 0xff);
	assert_int_equal(buf[40], 0xff);
	crypto_wipe(NULL, 0);
}

/* RFC 5869 appendix A.1 (test case 1) and A.3 (test case 3: no salt, no
 * info). */
static void test_hkdf_rfc5869(void **state)
{
	static const uint8_t okm1[42] = {
		0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90, 0x43, 0x4f, 0x64, 0xd0, 0x36,
		0x2f, 0x2a, 0x2d, 0x2d, 0x0a, 0x90, 0xcf, 0x1a, 0x5a, 0x4c, 0x5d, 0xb0, 0x2d, 0x56,
		0xec, 0xc4, 0xc5, 0xbf, 0x34, 0x00, 0x72, 0x08, 0xd5, 0xb8, 0x87, 0x18, 0x58, 0x65,
	};
	static const uint8_t okm3[42] = {
		0x8d, 0xa4, 0xe7, 0x75, 0xa5, 0x63, 0xc1, 0x8f, 0x71, 0x5f, 0x80, 0x2a, 0x06, 0x3c,
		0x5a, 0x31, 0xb8, 0xa1, 0x1f, 0x5c, 0x5e, 0xe1, 0x87, 0x9e, 0xc3, 0x45, 0x4e, 0x5f,
		0x3c, 0x73, 0x8d, 0x2d, 0x9d, 0x20, 0x13, 0x95, 0xfa, 0xa4, 0xb6, 0x1a, 0x96, 0xc8,
	};
	uint8_t ikm[22], salt[13], info[10], out[42];

	(void)state;
	memset(ikm, 0x0b, sizeof ikm);
	for (size_t i = 0; i < sizeof salt; i++)
		salt[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof info; i++)
		info[i] = (uint8_t)(0xf0 + i);
	assert_int_equal(crypto_hkdf(ikm, sizeof ikm, salt, sizeof salt, info, sizeof info,
				     out, sizeof out), 0);
	assert_memory_equal(out, okm1, sizeof out);
	assert_int_equal(crypto_hkdf(ikm, sizeof ikm, NULL, 0, NULL, 0, out, sizeof out), 0);
	assert_memory_equal(out, okm3, sizeof out);
	/* A prefix of the output is the output of a shorter request. */
	memset(out, 0, sizeof out);
	assert_int_equal(crypto_hkdf(ikm, sizeof ikm, salt, sizeof salt, info, sizeof info,
				     out, 16), 0);
	assert_memory_equal(out, okm1, 16);
	/* Bad lengths. */
	assert_int_equal(crypto_hkdf(ikm, 0, NULL, 0, NULL, 0, out, 16), -EINVAL);
	assert_int_equal(crypto_hkdf(ikm, sizeof ikm, NULL, 0, NULL, 0, out, 0), -EINVAL);
	assert_int_equal(crypto_hkdf(ikm, sizeof ikm, NULL, 0, NULL, 0, out, 255 * 32 + 1),
			 -EINVAL);
	assert_int_equal(crypto_hkdf(ikm, sizeof ikm, NULL, 3, NULL, 0, out, 16), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hmac_rfc4231),
		cmocka_unit_test(test_hmac_split_anywhere),
		cmocka_unit_test(test_hmac_edge_cases),
		cmocka_unit_test(test_hkdf_rfc5869),
		cmocka_unit_test(test_equal),
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_wipe),
	};

	return testutil_status(cmocka_run_group_tests_name("crypto", tests, NULL, NULL));
}
