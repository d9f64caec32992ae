// SPDX-License-Identifier: Apache-2.0
/* Unit tests for datamemo, the per-user memory of hosts whose direct data
 * connections failed: the file's lines and their checks, the time to live,
 * the bound on entries, a corrupt or hostile file, and that nothing of it
 * fails. Each test points XDG_CACHE_HOME into a fresh directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "roles/datamemo.h"

#define ID_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define NOW 1800000000u

static char dir[64], file[128];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_datamemo.XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(file, sizeof(file), "%s/pcopy/direct-failed", dir);
	return setenv("XDG_CACHE_HOME", dir, 1);
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static unsigned lines_of(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned n = 0;
	int c;

	if (f == NULL)
		return 0;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static void test_find_lines(void **state)
{
	(void)state;
	assert_true(datamemo_find(ID_A " 1800000000\n", ID_A, NOW, NULL));
	assert_true(datamemo_find("junk\n" ID_A " 1800000000", ID_A, NOW, NULL));
	/* The time to live, and a time in the future. */
	assert_true(datamemo_find(ID_A " 1799996401\n", ID_A, NOW, NULL));
	assert_false(datamemo_find(ID_A " 1799996400\n", ID_A, NOW, NULL));
	uint64_t age = 0;
	assert_true(datamemo_find(ID_A " 1799999880\n", ID_A, NOW, &age));
	assert_int_equal(age, 120);
	assert_false(datamemo_find(ID_A " 1800000001\n", ID_A, NOW, NULL));
	/* Malformed lines count for nothing. */
	static const char *const bad[] = {
		ID_A "  1800000000\n",                  /* two spaces */
		ID_A " 18000x0000\n",
		ID_A " \n",                              /* no time */
		"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef 1800000000\n",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde 1800000000\n",
		ID_A " 99999999999999999999999\n",       /* past 64 bits */
		ID_A "\n",
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(datamemo_find(bad[i], ID_A, NOW, NULL));
}

static void test_note_recall_forget(void **state)
{
	struct stat st;
	(void)state;

	assert_false(datamemo_recall("host-a\n10.0.0.1:22", NOW, NULL));
	datamemo_note("host-a\n10.0.0.1:22", true, NOW);
	assert_true(datamemo_recall("host-a\n10.0.0.1:22", NOW + 10, NULL));
	assert_false(datamemo_recall("host-b\n10.0.0.2:22", NOW + 10, NULL));
	assert_false(datamemo_recall("host-a\n10.0.0.1:22", NOW + DATAMEMO_TTL_S, NULL));
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(file + strlen(file) - strlen("/direct-failed"), 16, "%s", "");
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	strcat(file, "/direct-failed");
	datamemo_note("host-b\n10.0.0.2:22", true, NOW + 1);
	assert_int_equal(lines_of(file), 2);
	/* A success forgets only its own host. */
	datamemo_note("host-a\n10.0.0.1:22", false, NOW + 2);
	assert_false(datamemo_recall("host-a\n10.0.0.1:22", NOW + 2, NULL));
	assert_true(datamemo_recall("host-b\n10.0.0.2:22", NOW + 2, NULL));
	assert_int_equal(lines_of(file), 1);
	/* Forgetting a host makes no directory. */
	struct stat st2;
	char other[96];
	snprintf(other, sizeof(other), "%s/elsewhere", dir);
	assert_int_equal(setenv("XDG_CACHE_HOME", other, 1), 0);
	datamemo_note("host-c", false, NOW);
	assert_int_not_equal(stat(other, &st2), 0);
	assert_int_equal(setenv("XDG_CACHE_HOME", dir, 1), 0);
	/* Noting again replaces the line, it does not add one. */
	datamemo_note("host-b\n10.0.0.2:22", true, NOW + 3);
	assert_int_equal(lines_of(file), 1);
}

static void test_bounded_newest_kept(void **state)
{
	char key[32];
	(void)state;

	for (unsigned i = 0; i < DATAMEMO_MAX + 44; i++) {
		snprintf(key, sizeof(key), "host-%u", i);
		datamemo_note(key, true, NOW + i);
	}
	assert_int_equal(lines_of(file), DATAMEMO_MAX);
	assert_false(datamemo_recall("host-0", NOW + DATAMEMO_MAX + 44, NULL));
	assert_false(datamemo_recall("host-43", NOW + DATAMEMO_MAX + 44, NULL));
	assert_true(datamemo_recall("host-44", NOW + DATAMEMO_MAX + 44, NULL));
	assert_true(datamemo_recall("host-299", NOW + DATAMEMO_MAX + 44, NULL));
	/* Expired lines go when the file is written again. */
	datamemo_note("late", true, NOW + DATAMEMO_TTL_S + DATAMEMO_MAX + 44);
	assert_int_equal(lines_of(file), 1);
}

static void test_corrupt_and_hostile_files(void **state)
{
	char path[160];
	FILE *f;
	(void)state;

	datamemo_note("seed", true, NOW);
	/* Garbage, a binary part and an overlong line: not trusted, and
	 * the next note writes a clean file. */
	f = fopen(file, "w");
	assert_non_null(f);
	for (int i = 0; i < 70000; i++)
		fputc(i % 7 == 0 ? '\n' : (char)(i * 31), f);
	fclose(f);
	assert_false(datamemo_recall("seed", NOW, NULL));
	datamemo_note("after", true, NOW);
	assert_int_equal(lines_of(file), 1);
	assert_true(datamemo_recall("after", NOW, NULL));
	/* A symbolic link in the file's place is not followed for reading,
	 * and writing replaces the link, not what it points to. */
	snprintf(path, sizeof(path), "%s/victim", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("precious\n", f);
	fclose(f);
	assert_int_equal(unlink(file), 0);
	assert_int_equal(symlink(path, file), 0);
	assert_false(datamemo_recall("after", NOW, NULL));
	datamemo_note("linked", true, NOW);
	f = fopen(path, "r");
	assert_non_null(f);
	char buf[32] = "";
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "precious\n");
	assert_true(datamemo_recall("linked", NOW, NULL));
}

static void test_no_place_is_no_failure(void **state)
{
	(void)state;
	/* No usable cache directory: it forgets, quietly. */
	assert_int_equal(setenv("XDG_CACHE_HOME", "relative/path", 1), 0);
	assert_int_equal(setenv("HOME", "/proc/nonexistent", 1), 0);
	datamemo_note("x", true, NOW);
	assert_false(datamemo_recall("x", NOW, NULL));
	/* A file where the directory should be. */
	char f[128];
	snprintf(f, sizeof(f), "%s/pcopy", dir);
	assert_int_equal(close(open(f, O_CREAT | O_WRONLY, 0600)), 0);
	assert_int_equal(setenv("XDG_CACHE_HOME", dir, 1), 0);
	datamemo_note("y", true, NOW);
	assert_false(datamemo_recall("y", NOW, NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find_lines),
		cmocka_unit_test_setup_teardown(test_note_recall_forget, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounded_newest_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_and_hostile_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_place_is_no_failure, setup, teardown),
	};
	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
