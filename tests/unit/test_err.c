/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for err: code texts, exit codes, first-error-wins record. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sys/err.h"

static void test_strerror_own_codes(void **state)
{
	int c;

	(void)state;
	for (c = PC_E_BASE + 1; c < PC_E_MAX; c++) {
		const char *neg = pc_strerror(-c);
		const char *pos = pc_strerror(c);

		assert_non_null(neg);
		assert_string_equal(neg, pos);
		assert_string_not_equal(neg, "unknown error");
		assert_true(neg[0] >= 'a' && neg[0] <= 'z');
	}
	assert_string_equal(pc_strerror(-PC_E_PROTO), "protocol error");
	assert_string_equal(pc_strerror(-PC_E_INTEGRITY), "data integrity check failed");
	assert_string_equal(pc_strerror(-PC_E_CODEC), "compression failed");
	assert_int_equal(PC_EXIT_CODEC, 13);
	assert_int_equal(PC_E_BUSY, 1014); /* on the wire: docs/PROTOCOL.md section 8 */
	assert_int_equal(PC_EXIT_BUSY, 14);
}

static void test_strerror_other(void **state)
{
	(void)state;
	assert_string_equal(pc_strerror(-ENOENT), strerror(ENOENT));
	assert_string_equal(pc_strerror(ENOSPC), strerror(ENOSPC));
	assert_string_equal(pc_strerror(0), "success");
	assert_string_equal(pc_strerror(-PC_E_BASE), "unknown error");
	assert_string_equal(pc_strerror(-PC_E_MAX), "unknown error");
	assert_string_equal(pc_strerror(-123456), "unknown error");
	assert_string_equal(pc_strerror(INT_MIN), "unknown error");
}

static void test_exit_own_codes(void **state)
{
	static const struct {
		int code;
		int exit;
	} table[] = {
		{ PC_E_USAGE, PC_EXIT_USAGE },
		{ PC_E_PROTO, PC_EXIT_PROTO },
		{ PC_E_PARTIAL, PC_EXIT_PARTIAL },
		{ PC_E_LAUNCH, PC_EXIT_LAUNCH },
		{ PC_E_AUTH, PC_EXIT_LAUNCH },
		{ PC_E_VERSION, PC_EXIT_PROTO },
		{ PC_E_NET, PC_EXIT_NET },
		{ PC_E_FILEIO, PC_EXIT_FILEIO },
		{ PC_E_INTEGRITY, PC_EXIT_INTEGRITY },
		{ PC_E_INTERRUPTED, PC_EXIT_INTERRUPTED },
		{ PC_E_TIMEOUT, PC_EXIT_TIMEOUT },
		{ PC_E_ABORTED, PC_EXIT_PROTO },
		{ PC_E_CODEC, PC_EXIT_CODEC },
		{ PC_E_BUSY, PC_EXIT_BUSY },
	};
	size_t i;

	(void)state;
	/* The table must cover every code we define. */
	assert_int_equal(sizeof(table) / sizeof(table[0]), PC_E_MAX - PC_E_BASE - 1);
	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		assert_int_equal(pc_exit_code(-table[i].code), table[i].exit);
		assert_int_equal(pc_exit_code(table[i].code), table[i].exit);
	}
	assert_int_equal(pc_exit_code(0), PC_EXIT_OK);
	assert_int_equal(pc_exit_code(INT_MIN), PC_EXIT_PROTO);
}

static void test_exit_errno(void **state)
{
	static const int fileio[] = {
		ENOSPC, EDQUOT, EIO, EACCES, EPERM, ENOENT, ENOTDIR, EISDIR, EROFS,
		EXDEV, ELOOP, EEXIST, EFBIG, ENAMETOOLONG, EBADF, ENOMEM, EINVAL,
	};
	static const int net[] = {
		ECONNRESET, ECONNREFUSED, EPIPE, ENETUNREACH, EHOSTUNREACH,
		ECONNABORTED, ETIMEDOUT, EADDRINUSE, EADDRNOTAVAIL,
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(fileio) / sizeof(fileio[0]); i++) {
		assert_int_equal(pc_exit_code(-fileio[i]), PC_EXIT_FILEIO);
		assert_int_equal(pc_exit_code(fileio[i]), PC_EXIT_FILEIO);
	}
	for (i = 0; i < sizeof(net) / sizeof(net[0]); i++) {
		assert_int_equal(pc_exit_code(-net[i]), PC_EXIT_NET);
		assert_int_equal(pc_exit_code(net[i]), PC_EXIT_NET);
	}
}

static void test_first_error_wins(void **state)
{
	struct pc_err e;
	char msg[128];

	(void)state;
	pc_err_init(&e);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");

	/* Code 0 is not an error and must not block a later one. */
	assert_int_equal(pc_err_set(&e, 0, "nothing"), 0);
	assert_int_equal(pc_err_get(&e, NULL, 0), 0);

	assert_int_equal(pc_err_set(&e, -PC_E_NET, "host %s: %s", "a", "reset"), -PC_E_NET);
	assert_int_equal(pc_err_set(&e, -ENOSPC, "file %s", "b"), -ENOSPC);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_NET);
	assert_string_equal(msg, "host a: reset");

	/* A small caller buffer gets a terminated prefix. */
	assert_int_equal(pc_err_get(&e, msg, 5), -PC_E_NET);
	assert_string_equal(msg, "host");
	pc_err_destroy(&e);
}

static void test_message_truncation(void **state)
{
	struct pc_err e;
	char big[3000];
	char msg[2048];
	size_t len;

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';

	pc_err_init(&e);
	pc_err_set(&e, -PC_E_FILEIO, "%s", big);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_FILEIO);
	len = strlen(msg);
	assert_int_equal(len, sizeof(e.msg) - 1);
	assert_memory_equal(msg + len - 3, "...", 3);
	assert_int_equal(msg[0], 'x');
	pc_err_destroy(&e);

	/* Exactly full is not truncated. */
	big[sizeof(e.msg) - 1] = '\0';
	pc_err_init(&e);
	pc_err_set(&e, -PC_E_FILEIO, "%s", big);
	pc_err_get(&e, msg, sizeof(msg));
	assert_string_equal(msg, big);
	pc_err_destroy(&e);
}

#define RACE_THREADS 8

struct race_arg {
	struct pc_err *e;
	int code;
};

static void *race_main(void *arg)
{
	struct race_arg *a = arg;

	pc_err_set(a->e, a->code, "thread %d", a->code);
	return NULL;
}

static void test_concurrent_set(void **state)
{
	struct race_arg args[RACE_THREADS];
	pthread_t th[RACE_THREADS];
	struct pc_err e;
	char msg[64];
	char want[64];
	int code;
	int i;

	(void)state;
	pc_err_init(&e);
	for (i = 0; i < RACE_THREADS; i++) {
		args[i].e = &e;
		args[i].code = -(PC_E_BASE + 1 + i);
		assert_int_equal(pthread_create(&th[i], NULL, race_main, &args[i]), 0);
	}
	for (i = 0; i < RACE_THREADS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);

	/* Exactly one winner, and its message belongs to its code. */
	code = pc_err_get(&e, msg, sizeof(msg));
	assert_true(code <= -(PC_E_BASE + 1) && code >= -(PC_E_BASE + RACE_THREADS));
	snprintf(want, sizeof(want), "thread %d", code);
	assert_string_equal(msg, want);
	pc_err_destroy(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strerror_own_codes),
		cmocka_unit_test(test_strerror_other),
		cmocka_unit_test(test_exit_own_codes),
		cmocka_unit_test(test_exit_errno),
		cmocka_unit_test(test_first_error_wins),
		cmocka_unit_test(test_message_truncation),
		cmocka_unit_test(test_concurrent_set),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
