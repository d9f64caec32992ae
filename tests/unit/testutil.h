/* SPDX-License-Identifier: Apache-2.0 */
/* testutil: small helpers shared by the unit tests. */
#ifndef PCOPY_TESTUTIL_H
#define PCOPY_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- what the code under test says on stderr --------------------------------
 * testutil_stderr_begin sends stderr to a memory file; testutil_stderr_end
 * puts it back and reads what came into buf[cap] (NUL-terminated). Between
 * them, cmocka's own messages (on stdout) still show. */
struct testutil_stderr {
	int fd;    /* the memory file */
	int saved; /* the real stderr */
};

static inline void testutil_stderr_begin(struct testutil_stderr *c)
{
	c->fd = memfd_create("pcopy-test-stderr", MFD_CLOEXEC);
	c->saved = dup(STDERR_FILENO);
	assert_true(c->fd >= 0 && c->saved >= 0);
	assert_int_equal(dup2(c->fd, STDERR_FILENO), STDERR_FILENO);
}

static inline void testutil_stderr_end(struct testutil_stderr *c, char *buf, size_t cap)
{
	assert_int_equal(dup2(c->saved, STDERR_FILENO), STDERR_FILENO);
	close(c->saved);
	ssize_t n = pread(c->fd, buf, cap - 1, 0);
	assert_true(n >= 0);
	buf[n] = '\0';
	close(c->fd);
}

/* ---- skips -----------------------------------------------------------------
 * cmocka counts a skipped test as neither passed nor failed, and its group
 * returns 0, so ctest would show a program with skipped tests as "Passed".
 * Every unit test program therefore:
 *   - skips only through testutil_skip(fmt, ...), which says why;
 *   - ends main with `return testutil_status(failed);`, which exits with
 *     TESTUTIL_SKIP_CODE (ctest's SKIP_RETURN_CODE for the unit tests) when
 *     nothing failed but something was skipped.
 * tests/CMakeLists.txt refuses a test_*.c whose main does not. */

/* The exit status ctest reads as "skipped" (SKIP_RETURN_CODE in
 * tests/CMakeLists.txt; 77 as in automake). */
#define TESTUTIL_SKIP_CODE 77

/* Tests skipped so far in this program; main thread only (cmocka runs the
 * tests one after another on it). */
static int testutil_skipped;
/* Whether main has asked testutil_status for the exit status. */
static int testutil_status_taken;

/* At exit: a program that skipped a test but did not end through
 * testutil_status would exit 0 and pass; make it fail instead. */
static inline void testutil_check_status_taken(void)
{
	if (testutil_skipped > 0 && !testutil_status_taken) {
		fprintf(stderr, "testutil: %d test(s) skipped, but main did not return "
				"testutil_status(): failing\n", testutil_skipped);
		fflush(NULL);
		_exit(1);
	}
}

/* Prints "SKIP: <reason>" and skips the running test (does not return).
 * Call only from a test function, never from a setup or teardown (cmocka
 * counts a skip there as an error). */
#define testutil_skip(...)                                                         \
	do {                                                                       \
		printf("SKIP: ");                                                  \
		printf(__VA_ARGS__);                                               \
		printf("\n");                                                      \
		fflush(stdout);                                                    \
		if (testutil_skipped++ == 0 &&                                     \
		    atexit(testutil_check_status_taken) != 0)                      \
			fail_msg("testutil_skip: atexit failed");                  \
		_skip(__FILE__, __LINE__);                                         \
	} while (0)

/* A bare skip() gives no reason: refuse it at compile time. */
#undef skip
#define skip() _Pragma("GCC error \"skip() gives no reason: call testutil_skip(fmt, ...)\"")

/* The exit status of a test program whose groups reported failed failures
 * in all: 1 if any failed, TESTUTIL_SKIP_CODE if none failed but some test
 * was skipped (with a line saying how many), else 0. */
static inline int testutil_status(int failed)
{
	testutil_status_taken = 1;
	if (failed != 0)
		return 1;
	if (testutil_skipped > 0) {
		printf("%d test(s) skipped: exit status %d, so ctest reports this program as "
		       "skipped, not passed\n", testutil_skipped, TESTUTIL_SKIP_CODE);
		return TESTUTIL_SKIP_CODE;
	}
	return 0;
}

/* Empties the directory dfd (closed here) depth first, through directory
 * fds, so that no path grows past PATH_MAX however deep the tree (nftw
 * gives up there, and left test_walk's 60-level trees behind). No
 * symlink is followed. Returns 0 or -1. */
static inline int testutil_rm_below(int dfd)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int ret = 0;

	if (d == NULL) {
		close(dfd);
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			continue;
		int sub = openat(dirfd(d), de->d_name,
				 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0 || testutil_rm_below(sub) != 0 ||
		    unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) != 0)
			ret = -1;
	}
	closedir(d);
	return ret;
}

/* Removes dir and everything below it, like rm -rf (no symlink is
 * followed). Returns 0 or -1. */
static inline int testutil_rm_rf(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return unlink(dir);
	if (testutil_rm_below(fd) != 0)
		return -1;
	return rmdir(dir);
}

/* The open fds of this process (entries of /proc/self/fd, "." and ".."
 * and the directory's own fd included: compare two counts). */
static inline unsigned testutil_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	assert_non_null(d);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

/* Makes a fresh directory from tmpl (a mkdtemp template, rewritten in
 * place), a directory "root" in it, and returns root's O_DIRECTORY fd, or
 * -1 (nothing is left behind). The fixtures that need a served root. */
static inline int testutil_root(char *tmpl)
{
	char p[256];
	int fd = -1;

	if (mkdtemp(tmpl) == NULL)
		return -1;
	snprintf(p, sizeof(p), "%s/root", tmpl);
	if (mkdir(p, 0755) == 0)
		fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		(void)testutil_rm_rf(tmpl);
	return fd;
}

#endif
