/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for verify: the mix of a block, the checksum of a hole, and a
 * file read back: its digest is the sum of its blocks' mixes, a changed
 * byte or a file shorter than said changes it, and the fault site inverts
 * a byte as a bad disk would. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/verify.h"
#include "sys/fault.h"
#include "wire/proto.h"

#define BLK 4096u

static void test_mix(void **state)
{
	(void)state;
	assert_int_equal(verify_mix(3, 77), verify_mix(3, 77));
	assert_int_not_equal(verify_mix(3, 77), verify_mix(4, 77)); /* the index counts */
	assert_int_not_equal(verify_mix(3, 77), verify_mix(3, 78));
	/* Swapped blocks give another sum. */
	assert_int_not_equal(verify_mix(0, 1) + verify_mix(1, 2), verify_mix(0, 2) + verify_mix(1, 1));
}

static void test_zeros(void **state)
{
	uint8_t *z = calloc(1, 3 * BLK + 5);

	(void)state;
	assert_non_null(z);
	assert_int_equal(verify_zeros(3 * BLK + 5), proto_checksum(z, 3 * BLK + 5));
	assert_int_equal(verify_zeros(0), proto_checksum(z, 0));
	free(z);
}

/* A file of n bytes, 2.5 blocks of a pattern, in a temporary file; its
 * expected digest in *want. Returns the fd (read-write). */
static int pattern_file(size_t n, uint64_t *want)
{
	char path[] = "/tmp/pcopy-test-verify.XXXXXX";
	uint8_t *p = malloc(n);
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_non_null(p);
	assert_int_equal(unlink(path), 0);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + i / 251);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	*want = 0;
	for (size_t off = 0, idx = 0; off < n; off += BLK, idx++)
		*want += verify_mix(idx, proto_checksum(p + off, n - off < BLK ? n - off : BLK));
	free(p);
	return fd;
}

static void test_read_back(void **state)
{
	uint64_t want, got = 0;
	int fd = pattern_file(2 * BLK + BLK / 2, &want);

	(void)state;
	assert_int_equal(verify_read_back(fd, 2 * BLK + BLK / 2, BLK, &got), 0);
	assert_int_equal(got, want);
	/* One byte changed on the disk: another digest. */
	assert_int_equal(pwrite(fd, "\x01", 1, BLK + 3), 1);
	assert_int_equal(verify_read_back(fd, 2 * BLK + BLK / 2, BLK, &got), 0);
	assert_int_not_equal(got, want);
	close(fd);
}

static void test_short_file(void **state)
{
	uint64_t want, got = 5;
	int fd = pattern_file(BLK, &want);

	(void)state;
	assert_int_equal(verify_read_back(fd, BLK + 1, BLK, &got), -EIO);
	assert_int_equal(got, 5); /* left alone */
	close(fd);
}

static void test_fault_inverts(void **state)
{
	uint64_t want, got = 0;
	int fd = pattern_file(100, &want);

	(void)state;
	fault_arm(FAULT_SINK_VERIFY, 1);
	assert_int_equal(verify_read_back(fd, 100, BLK, &got), 0);
	assert_int_not_equal(got, want);
	assert_int_equal(verify_read_back(fd, 100, BLK, &got), 0); /* fired once */
	assert_int_equal(got, want);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mix),
		cmocka_unit_test(test_zeros),
		cmocka_unit_test(test_read_back),
		cmocka_unit_test(test_short_file),
		cmocka_unit_test(test_fault_inverts),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
