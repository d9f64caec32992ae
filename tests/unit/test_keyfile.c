/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for keyfile: generate/load round trip, permissions, and the
 * files load must refuse. Each test works in its own mkdtemp directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/err.h"
#include "wire/keyfile.h"

#define KEY_HEX "00112233445566778899aabbccddeeff0123456789ABCDEFfedcba9876543210"

struct fixture {
	char dir[64];           /* the temporary directory */
	char path[128];         /* dir/key */
	struct pc_err err;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof f->dir, "/tmp/pcopy-test-keyfile-XXXXXX");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof f->path, "%s/key", f->dir);
	pc_err_init(&f->err);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	pc_err_destroy(&f->err);
	testutil_rm_rf(f->dir);
	free(f);
	return 0;
}

/* Creates f->path with the given content and mode (exactly, whatever the umask). */
static void write_file(const struct fixture *f, const char *content, mode_t mode)
{
	int fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

/* Loads f->path and expects code; on failure the message must name the file. */
static void expect_load(struct fixture *f, int code)
{
	uint8_t key[PROTO_KEY_LEN];
	char msg[1024];

	assert_int_equal(keyfile_load(f->path, key, &f->err), code);
	if (code == 0)
		return;
	assert_int_equal(pc_err_get(&f->err, msg, sizeof msg), code);
	if (strstr(msg, f->path) == NULL)
		fail_msg("message does not name the file: %s", msg);
}

static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	uint8_t k1[PROTO_KEY_LEN], k2[PROTO_KEY_LEN];
	char text[200];
	struct stat st;
	ssize_t n;
	int fd;

	assert_int_equal(keyfile_generate(f->path, &f->err), 0);
	assert_int_equal(stat(f->path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);

	fd = open(f->path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, text, sizeof text);
	close(fd);
	assert_int_equal(n, 65);
	assert_int_equal(text[64], '\n');
	for (int i = 0; i < 64; i++)
		assert_non_null(strchr("0123456789abcdef", text[i]));

	assert_int_equal(keyfile_load(f->path, k1, &f->err), 0);
	assert_int_equal(keyfile_load(f->path, k2, &f->err), 0);
	assert_memory_equal(k1, k2, sizeof k1);
	assert_int_equal(pc_err_get(&f->err, text, sizeof text), 0);
}

static void test_generate_ignores_umask(void **state)
{
	struct fixture *f = *state;
	mode_t old = umask(0277);   /* would leave 0400 without the fchmod */
	struct stat st;

	assert_int_equal(keyfile_generate(f->path, &f->err), 0);
	umask(old);
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
}

static void test_two_keys_differ(void **state)
{
	struct fixture *f = *state;
	uint8_t k1[PROTO_KEY_LEN], k2[PROTO_KEY_LEN];

	assert_int_equal(keyfile_generate(f->path, &f->err), 0);
	assert_int_equal(keyfile_load(f->path, k1, &f->err), 0);
	assert_int_equal(unlink(f->path), 0);
	assert_int_equal(keyfile_generate(f->path, &f->err), 0);
	assert_int_equal(keyfile_load(f->path, k2, &f->err), 0);
	assert_memory_not_equal(k1, k2, sizeof k1);
}

static void test_generate_refuses_existing(void **state)
{
	struct fixture *f = *state;
	char msg[1024];
	struct stat st;

	write_file(f, "keep me\n", 0644);
	assert_int_equal(keyfile_generate(f->path, &f->err), -PC_E_USAGE);
	assert_int_equal(pc_err_get(&f->err, msg, sizeof msg), -PC_E_USAGE);
	assert_non_null(strstr(msg, f->path));
	assert_non_null(strstr(msg, "already exists"));
	/* The existing file is left alone. */
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_size, 8);
	assert_int_equal(st.st_mode & 07777, 0644);
}

static void test_generate_refuses_symlink(void **state)
{
	struct fixture *f = *state;
	char target[160];
	struct stat st;

	snprintf(target, sizeof target, "%s/target", f->dir);
	assert_int_equal(symlink(target, f->path), 0);
	assert_true(keyfile_generate(f->path, &f->err) < 0);
	assert_int_equal(lstat(target, &st), -1);
	assert_int_equal(errno, ENOENT);
}

static void test_generate_bad_dir(void **state)
{
	struct fixture *f = *state;
	char path[160];
	char msg[1024];

	snprintf(path, sizeof path, "%s/missing/key", f->dir);
	assert_int_equal(keyfile_generate(path, &f->err), -ENOENT);
	assert_int_equal(pc_err_get(&f->err, msg, sizeof msg), -ENOENT);
	assert_non_null(strstr(msg, path));
}

static void test_load_good_variants(void **state)
{
	struct fixture *f = *state;
	uint8_t key[PROTO_KEY_LEN];

	write_file(f, KEY_HEX, 0600);
	expect_load(f, 0);
	write_file(f, KEY_HEX "\r\n  \n", 0400);
	expect_load(f, 0);
	assert_int_equal(keyfile_load(f->path, key, &f->err), 0);
	assert_int_equal(key[0], 0x00);
	assert_int_equal(key[1], 0x11);
	assert_int_equal(key[15], 0xff);
	assert_int_equal(key[16], 0x01);
	assert_int_equal(key[23], 0xef);
	assert_int_equal(key[24], 0xfe);
	assert_int_equal(key[31], 0x10);
}

static void test_load_refuses_group_or_other(void **state)
{
	static const mode_t modes[] = { 0644, 0640, 0604, 0620, 0602, 0610, 0601, 0660 };
	struct fixture *f = *state;
	char msg[1024];

	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		pc_err_destroy(&f->err);
		pc_err_init(&f->err);
		write_file(f, KEY_HEX "\n", modes[i]);
		expect_load(f, -PC_E_USAGE);
		pc_err_get(&f->err, msg, sizeof msg);
		assert_non_null(strstr(msg, "chmod 600"));
	}
	pc_err_destroy(&f->err);
	pc_err_init(&f->err);
	write_file(f, KEY_HEX "\n", 0644);
	expect_load(f, -PC_E_USAGE);
	pc_err_get(&f->err, msg, sizeof msg);
	assert_non_null(strstr(msg, "readable by group or others (mode 0644)"));
}

static void test_load_refuses_directory(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(mkdir(f->path, 0700), 0);
	expect_load(f, -PC_E_USAGE);
}

static void test_load_refuses_fifo(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(mkfifo(f->path, 0600), 0);
	expect_load(f, -PC_E_USAGE);    /* and does not block waiting for a writer */
}

static void test_load_refuses_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"\n",
		"0011223344556677",
		/* 63 digits */
		"00112233445566778899aabbccddeeff0123456789abcdeffedcba987654321",
		/* 65 digits */
		"00112233445566778899aabbccddeeff0123456789abcdeffedcba98765432100",
		/* a non-hex digit */
		"00112233445566778899aabbccddeeff0123456789abcdeffedcba987654321g",
		/* leading whitespace */
		" 00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210",
		/* a second line */
		KEY_HEX "\n" KEY_HEX "\n",
		KEY_HEX " x",
	};
	struct fixture *f = *state;
	char msg[1024];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		pc_err_destroy(&f->err);
		pc_err_init(&f->err);
		write_file(f, bad[i], 0600);
		expect_load(f, -PC_E_USAGE);
		pc_err_get(&f->err, msg, sizeof msg);
		assert_non_null(strstr(msg, "not a pcopy key"));
	}
}

static void test_load_refuses_oversized(void **state)
{
	struct fixture *f = *state;
	char text[300];

	/* 64 digits then whitespace past the 200-byte limit. */
	memset(text, ' ', sizeof text);
	memcpy(text, KEY_HEX, 64);
	text[sizeof text - 1] = '\0';
	write_file(f, text, 0600);
	expect_load(f, -PC_E_USAGE);
	/* Exactly 200 bytes is still fine. */
	text[200] = '\0';
	write_file(f, text, 0600);
	expect_load(f, 0);
}

/* A key file that cannot be opened is the user's to fix (exit 1), and the
 * message says why and how to make one. */
static void test_load_missing(void **state)
{
	struct fixture *f = *state;
	char msg[1024];

	expect_load(f, -PC_E_USAGE);
	(void)pc_err_get(&f->err, msg, sizeof msg);
	assert_non_null(strstr(msg, "No such file or directory"));
	assert_non_null(strstr(msg, "pcopy --gen-key"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_ignores_umask, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_keys_differ, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_refuses_existing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_refuses_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_bad_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_good_variants, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refuses_group_or_other, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refuses_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refuses_fifo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refuses_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_refuses_oversized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_missing, setup, teardown),
	};

	return testutil_status(cmocka_run_group_tests_name("keyfile", tests, NULL, NULL));
}
