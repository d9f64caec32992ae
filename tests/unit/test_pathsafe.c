/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for pathsafe: the name and path checks, split, and opening
 * beneath a root. The open tests run twice: once with openat2, and once
 * with openat2 blocked by a seccomp filter (ENOSYS, as on a pre-5.6 kernel)
 * so that the O_NOFOLLOW walk is exercised too. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>

#include "sys/err.h"
#include "wire/pathsafe.h"
#include "wire/proto.h"

/* True while the second group runs with openat2 blocked. The walk refuses
 * every symlink, even those that stay inside the root. */
static bool fallback;

/* ---- check_name, check_rel, split -------------------------------------- */

static void test_check_name(void **state)
{
	static const char *const ok[] = { "a", "file.txt", ".hidden", "..a", "a..", "...",
					  "a b", "a\\b", "-" };
	static const char *const bad[] = { "", ".", "..", "a/b", "/", "/a", "a/" };
	char longname[NAME_MAX + 2];

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (pathsafe_check_name(ok[i]) != 0)
			fail_msg("'%s' should be a valid name", ok[i]);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (pathsafe_check_name(bad[i]) != -PC_E_PROTO)
			fail_msg("'%s' should be refused", bad[i]);
	assert_int_equal(pathsafe_check_name(NULL), -PC_E_PROTO);
	memset(longname, 'x', NAME_MAX);
	longname[NAME_MAX] = '\0';
	assert_int_equal(pathsafe_check_name(longname), 0);
	longname[NAME_MAX] = 'x';
	longname[NAME_MAX + 1] = '\0';
	assert_int_equal(pathsafe_check_name(longname), -PC_E_PROTO);
}

static void test_check_rel(void **state)
{
	static const char *const ok[] = { ".", "a", "a/b", "a/b/c.txt", ".a/..b/c..", "a b/c" };
	static const char *const bad[] = { "", "/", "/a", "a/", "a//b", "./a", "a/.", "a/./b",
					   "..", "../a", "a/..", "a/../b", "//", "./" };
	static char path[PROTO_MAX_PATH + 2];
	char longname[NAME_MAX + 2];

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (pathsafe_check_rel(ok[i]) != 0)
			fail_msg("'%s' should be a valid path", ok[i]);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (pathsafe_check_rel(bad[i]) != -PC_E_PROTO)
			fail_msg("'%s' should be refused", bad[i]);
	assert_int_equal(pathsafe_check_rel(NULL), -PC_E_PROTO);

	/* Components of at most NAME_MAX bytes. */
	memset(longname, 'x', NAME_MAX + 1);
	longname[NAME_MAX + 1] = '\0';
	snprintf(path, sizeof path, "a/%s", longname);
	assert_int_equal(pathsafe_check_rel(path), -PC_E_PROTO);
	path[strlen(path) - 1] = '\0';
	assert_int_equal(pathsafe_check_rel(path), 0);

	/* At most PROTO_MAX_PATH bytes in all: "x/x/x/.../x". */
	for (size_t i = 0; i < PROTO_MAX_PATH + 1; i++)
		path[i] = i % 2 ? '/' : 'x';
	path[PROTO_MAX_PATH - 1] = 'x';
	path[PROTO_MAX_PATH] = '\0';
	assert_int_equal(pathsafe_check_rel(path), 0);
	path[PROTO_MAX_PATH] = 'x';
	path[PROTO_MAX_PATH + 1] = '\0';
	assert_int_equal(pathsafe_check_rel(path), -PC_E_PROTO);
}

static void test_split(void **state)
{
	static const struct {
		const char *path, *dir, *base;
	} ok[] = {
		{ "a/b/c", "a/b", "c" },
		{ "c", ".", "c" },
		{ "a/b", "a", "b" },
		{ "a//b", "a", "b" },
		{ "/c", "/", "c" },
		{ ".c", ".", ".c" },
	};
	static const char *const bad[] = { "", ".", "a/.", "a/", "..", "a/..", "/" };
	char dir[16], base[16];

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		assert_int_equal(pathsafe_split(ok[i].path, dir, base), 0);
		assert_string_equal(dir, ok[i].dir);
		assert_string_equal(base, ok[i].base);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (pathsafe_split(bad[i], dir, base) != -PC_E_PROTO)
			fail_msg("split('%s') should fail", bad[i]);
}

/* ---- opening beneath a root ------------------------------------------- */

struct tree {
	char base[64];          /* the mkdtemp directory */
	int rootfd;             /* base/root, O_DIRECTORY */
};

static void make_file(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	assert_int_equal(close(fd), 0);
}

/* base/root/{a/f, a/up -> ../a, in -> a, lnk -> a/f, esc -> ../outside,
 * escf -> ../outside/f, dang -> ../outside/new, abs -> /tmp} and
 * base/outside/f. */
static int tree_setup(void **state)
{
	struct tree *t = calloc(1, sizeof *t);
	char p[128];

	assert_non_null(t);
	snprintf(t->base, sizeof t->base, "/tmp/pcopy-test-pathsafe-XXXXXX");
	assert_non_null(mkdtemp(t->base));
	assert_int_equal(chdir(t->base), 0);
	assert_int_equal(mkdir("root", 0755), 0);
	assert_int_equal(mkdir("root/a", 0755), 0);
	assert_int_equal(mkdir("outside", 0755), 0);
	make_file("root/a/f", "inside");
	make_file("outside/f", "outside");
	assert_int_equal(symlink("../a", "root/a/up"), 0);
	assert_int_equal(symlink("a", "root/in"), 0);
	assert_int_equal(symlink("a/f", "root/lnk"), 0);
	assert_int_equal(symlink("../outside", "root/esc"), 0);
	assert_int_equal(symlink("../outside/f", "root/escf"), 0);
	assert_int_equal(symlink("../outside/new", "root/dang"), 0);
	assert_int_equal(symlink("/tmp", "root/abs"), 0);
	snprintf(p, sizeof p, "%s/root", t->base);
	t->rootfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(t->rootfd >= 0);
	*state = t;
	return 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;

	close(t->rootfd);
	assert_int_equal(chdir("/"), 0);
	testutil_rm_rf(t->base);
	free(t);
	return 0;
}

/* Opens path beneath the root for reading and checks its content. */
static void expect_content(struct tree *t, const char *path, bool beneath, const char *want)
{
	char buf[32];
	ssize_t n;
	int fd = pathsafe_open(t->rootfd, path, O_RDONLY, 0, beneath);

	if (fd < 0)
		fail_msg("open '%s' (beneath=%d): %s", path, beneath, strerror(-fd));
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static void expect_escape(int ret, const char *what)
{
	if (ret >= 0) {
		close(ret);
		fail_msg("%s: opened, but it leads outside the root", what);
	}
	if (ret != -EXDEV && ret != -ELOOP)
		fail_msg("%s: expected -EXDEV or -ELOOP, got %s", what, strerror(-ret));
}

static void test_open_inside(void **state)
{
	struct tree *t = *state;
	int fd;

	expect_content(t, "a/f", true, "inside");
	fd = pathsafe_open(t->rootfd, ".", O_RDONLY | O_DIRECTORY, 0, true);
	assert_true(fd >= 0);
	close(fd);
	/* A mode without O_CREAT is ignored, not an error (openat2 would
	 * reject it if it were passed through). */
	fd = pathsafe_open(t->rootfd, "a", O_RDONLY | O_DIRECTORY, 0755, true);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(pathsafe_open(t->rootfd, "a/nope", O_RDONLY, 0, true), -ENOENT);
	assert_int_equal(pathsafe_open(t->rootfd, "a/f/x", O_RDONLY, 0, true), -ENOTDIR);
}

static void test_open_cloexec(void **state)
{
	struct tree *t = *state;
	int fd;

	fd = pathsafe_open(t->rootfd, "a/f", O_RDONLY, 0, true);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	fd = pathsafe_open(t->rootfd, "a/f", O_RDONLY, 0, false);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
}

static void test_open_dotdot(void **state)
{
	struct tree *t = *state;

	assert_true(pathsafe_open(t->rootfd, "../outside/f", O_RDONLY, 0, true) < 0);
	assert_true(pathsafe_open(t->rootfd, "a/../../outside/f", O_RDONLY, 0, true) < 0);
	assert_true(pathsafe_open(t->rootfd, "a/../a/f", O_RDONLY, 0, true) < 0);
	assert_true(pathsafe_open(t->rootfd, "/etc/passwd", O_RDONLY, 0, true) < 0);
}

static void test_open_symlink_escape(void **state)
{
	struct tree *t = *state;
	struct stat st;

	expect_escape(pathsafe_open(t->rootfd, "esc/f", O_RDONLY, 0, true), "esc/f");
	expect_escape(pathsafe_open(t->rootfd, "escf", O_RDONLY, 0, true), "escf");
	expect_escape(pathsafe_open(t->rootfd, "esc", O_RDONLY | O_DIRECTORY, 0, true), "esc");
	expect_escape(pathsafe_open(t->rootfd, "esc/new", O_WRONLY | O_CREAT, 0600, true),
		      "esc/new");
	expect_escape(pathsafe_open(t->rootfd, "dang", O_WRONLY | O_CREAT, 0600, true), "dang");
	expect_escape(pathsafe_open(t->rootfd, "escf", O_WRONLY | O_TRUNC, 0, true), "escf");
	/* Nothing was created or truncated outside. */
	assert_int_equal(lstat("outside/new", &st), -1);
	assert_int_equal(stat("outside/f", &st), 0);
	assert_int_equal(st.st_size, 7);
}

static void test_open_symlink_absolute(void **state)
{
	struct tree *t = *state;

	expect_escape(pathsafe_open(t->rootfd, "abs", O_RDONLY | O_DIRECTORY, 0, true), "abs");
	expect_escape(pathsafe_open(t->rootfd, "abs/x", O_WRONLY | O_CREAT, 0600, true),
		      "abs/x");
}

static void test_open_symlink_inside(void **state)
{
	struct tree *t = *state;

	if (fallback) {
		/* The walk is stricter than openat2: no symlinks at all. */
		expect_escape(pathsafe_open(t->rootfd, "in/f", O_RDONLY, 0, true), "in/f");
		expect_escape(pathsafe_open(t->rootfd, "lnk", O_RDONLY, 0, true), "lnk");
		expect_escape(pathsafe_open(t->rootfd, "a/up/f", O_RDONLY, 0, true), "a/up/f");
		return;
	}
	expect_content(t, "in/f", true, "inside");
	expect_content(t, "lnk", true, "inside");
	expect_content(t, "a/up/f", true, "inside");
	expect_content(t, "a/up/up/up/f", true, "inside");
}

/* pathsafe_open_nolinks refuses every symlink, also those that stay inside
 * and the last component, with openat2 as with the walk. */
static void test_open_nolinks(void **state)
{
	struct tree *t = *state;
	static const char *const refused[] = { "in/f", "lnk", "a/up/f", "in", "esc", "esc/f",
						"escf", "abs", "dang" };
	char buf[16];
	int fd = pathsafe_open_nolinks(t->rootfd, "a/f", O_RDONLY, 0);

	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof buf), 6);
	close(fd);
	fd = pathsafe_open_nolinks(t->rootfd, "a", O_PATH | O_DIRECTORY, 0);
	assert_true(fd >= 0);
	close(fd);
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		fd = pathsafe_open_nolinks(t->rootfd, refused[i], O_RDONLY, 0);
		if (fd != -ELOOP)
			fail_msg("'%s': expected -ELOOP, got %d", refused[i], fd);
		fd = pathsafe_open_nolinks(t->rootfd, refused[i], O_PATH | O_DIRECTORY, 0);
		if (fd != -ELOOP)
			fail_msg("'%s' as a directory: expected -ELOOP, got %d", refused[i], fd);
	}
	assert_int_equal(pathsafe_open_nolinks(t->rootfd, "../outside", O_RDONLY, 0), -EINVAL);
	assert_int_equal(pathsafe_open_nolinks(t->rootfd, "/tmp", O_RDONLY, 0), -EINVAL);
	assert_int_equal(pathsafe_open_nolinks(t->rootfd, "a/none", O_RDONLY, 0), -ENOENT);
}

/* /proc/self/cwd is a magic link: it must not be followed beneath a root. */
static void test_open_magic_link(void **state)
{
	int procfd = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int fd;

	(void)state;
	if (procfd < 0)
		testutil_skip("cannot open /proc/self (%s): is /proc mounted?", strerror(errno));
	expect_escape(pathsafe_open(procfd, "cwd", O_RDONLY | O_DIRECTORY, 0, true), "cwd");
	fd = pathsafe_open(procfd, "cwd", O_RDONLY | O_DIRECTORY, 0, false);
	assert_true(fd >= 0);
	close(fd);
	close(procfd);
}

static void test_open_create(void **state)
{
	struct tree *t = *state;
	mode_t old = umask(022);
	struct stat st;
	int fd;

	fd = pathsafe_open(t->rootfd, "a/new", O_WRONLY | O_CREAT | O_EXCL, 0640, true);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	assert_int_equal(stat("root/a/new", &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(pathsafe_open(t->rootfd, "a/new", O_WRONLY | O_CREAT | O_EXCL, 0640,
				       true), -EEXIST);
	fd = pathsafe_open(t->rootfd, "top", O_WRONLY | O_CREAT, 0600, true);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(stat("root/top", &st), 0);
	umask(old);

	/* O_TMPFILE contains O_DIRECTORY's bit; the mode must still pass. */
	fd = pathsafe_open(t->rootfd, "a", O_TMPFILE | O_WRONLY, 0600, true);
	if (fd == -EOPNOTSUPP || fd == -EISDIR)
		testutil_skip("the file system of %s has no O_TMPFILE (%s)", t->base,
			      strerror(-fd));
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	close(fd);
}

static void test_open_not_beneath(void **state)
{
	struct tree *t = *state;

	expect_content(t, "../outside/f", false, "outside");
	expect_content(t, "esc/f", false, "outside");
	expect_content(t, "escf", false, "outside");
	expect_content(t, "a/f", false, "inside");
}

/* In the fallback group, check that the filter really hides openat2. */
static void test_openat2_blocked(void **state)
{
	struct open_how how;
	long ret;

	(void)state;
	memset(&how, 0, sizeof how);
	how.flags = O_RDONLY;
	ret = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how);
	assert_int_equal(ret, -1);
	assert_int_equal(errno, ENOSYS);
}

/* Makes openat2 fail with ENOSYS in this process from now on. Returns 0, or
 * -errno if seccomp is unavailable. */
static int block_openat2(void)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof code / sizeof code[0], code };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return -errno;
	return 0;
}

#define TREE_TEST(f) cmocka_unit_test_setup_teardown(f, tree_setup, tree_teardown)

/* Why block_openat2 failed (an errno), for test_no_seccomp. */
static int no_seccomp_errno;

/* Stands in for each fallback test when seccomp is unavailable. */
static void test_no_seccomp(void **state)
{
	(void)state;
	testutil_skip("cannot install a seccomp filter that hides openat2 (%s), so the "
		      "fallback walk is not tested; run where seccomp is allowed",
		      strerror(no_seccomp_errno));
}

/* Fills out[0..n) with tests[0..n)'s names, each running only
 * test_no_seccomp (no setup or teardown). */
static void no_seccomp_group(struct CMUnitTest *out, const struct CMUnitTest *tests, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		out[i] = (struct CMUnitTest){ .name = tests[i].name,
					      .test_func = test_no_seccomp };
	}
}

int main(void)
{
	const struct CMUnitTest pure[] = {
		cmocka_unit_test(test_check_name),
		cmocka_unit_test(test_check_rel),
		cmocka_unit_test(test_split),
	};
	const struct CMUnitTest open_tests[] = {
		TREE_TEST(test_open_inside),
		TREE_TEST(test_open_cloexec),
		TREE_TEST(test_open_dotdot),
		TREE_TEST(test_open_symlink_escape),
		TREE_TEST(test_open_symlink_absolute),
		TREE_TEST(test_open_symlink_inside),
		TREE_TEST(test_open_nolinks),
		TREE_TEST(test_open_magic_link),
		TREE_TEST(test_open_create),
		TREE_TEST(test_open_not_beneath),
	};
	const struct CMUnitTest blocked[] = {
		cmocka_unit_test(test_openat2_blocked),
	};
	/* The two fallback groups, when seccomp is unavailable: the same
	 * names, each only skipping (filled in below). */
	struct CMUnitTest blocked_skipped[sizeof blocked / sizeof blocked[0]];
	struct CMUnitTest open_skipped[sizeof open_tests / sizeof open_tests[0]];
	int failed = 0;
	int ret;

	failed += cmocka_run_group_tests_name("pathsafe", pure, NULL, NULL);
	failed += cmocka_run_group_tests_name("pathsafe_openat2", open_tests, NULL, NULL);
	ret = block_openat2();
	if (ret != 0) {
		/* Without seccomp the fallback walk cannot be reached: report
		 * each of its tests as skipped, with the reason. */
		no_seccomp_errno = -ret;
		no_seccomp_group(blocked_skipped, blocked, sizeof blocked / sizeof blocked[0]);
		no_seccomp_group(open_skipped, open_tests, sizeof open_tests / sizeof open_tests[0]);
		failed += cmocka_run_group_tests_name("pathsafe_fallback_check", blocked_skipped,
						      NULL, NULL);
		failed += cmocka_run_group_tests_name("pathsafe_fallback", open_skipped, NULL,
						      NULL);
		return testutil_status(failed);
	}
	fallback = true;
	failed += cmocka_run_group_tests_name("pathsafe_fallback_check", blocked, NULL, NULL);
	failed += cmocka_run_group_tests_name("pathsafe_fallback", open_tests, NULL, NULL);
	return testutil_status(failed);
}
