/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for sink_target_open/close: resolving the destination by cp's
 * rules (existing directory, new name, several sources), refusals with
 * messages that say why, paths leading outside a served directory, standard
 * output, and a read-only destination. Each test works in its own mkdtemp
 * directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/err.h"
#include "pipeline/sink.h"

struct fixture {
	char base[64];          /* the mkdtemp directory */
	char ro[128];           /* base/root/ro, if a read-only mount was made there */
	bool mounted;
	int rootfd;             /* base/root, O_DIRECTORY */
	struct pc_err err;
	struct sink_target t;
};

/* base/root/{d/, d/file, in -> d, out -> ../outside} and base/outside/. */
static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	char p[128];
	int fd;

	if (fx == NULL)
		return -1;
	snprintf(fx->base, sizeof(fx->base), "/tmp/pcopy-test-sink-target-XXXXXX");
	fx->rootfd = testutil_root(fx->base);
	if (fx->rootfd < 0) {
		free(fx);
		return -1;
	}
	snprintf(p, sizeof(p), "%s/outside", fx->base);
	assert_int_equal(mkdir(p, 0755), 0);
	assert_int_equal(mkdirat(fx->rootfd, "d", 0755), 0);
	fd = openat(fx->rootfd, "d/file", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);
	assert_int_equal(symlinkat("d", fx->rootfd, "in"), 0);
	assert_int_equal(symlinkat("../outside", fx->rootfd, "out"), 0);
	pc_err_init(&fx->err);
	fx->t.dirfd = -1;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	sink_target_close(&fx->t);
	if (fx->mounted && umount2(fx->ro, MNT_DETACH) != 0)
		fprintf(stderr, "cannot unmount %s: %s\n", fx->ro, strerror(errno));
	pc_err_destroy(&fx->err);
	close(fx->rootfd);
	testutil_rm_rf(fx->base);
	free(fx);
	return 0;
}

/* Resets the recorded error between cases of one test. */
static void err_reset(struct fixture *fx)
{
	pc_err_destroy(&fx->err);
	pc_err_init(&fx->err);
}

/* True if fd is the directory at path (relative to the root). */
static bool same_dir(const struct fixture *fx, int fd, const char *path)
{
	struct stat a, b;

	if (fstat(fd, &a) != 0 || fstatat(fx->rootfd, path, &b, 0) != 0)
		return false;
	return S_ISDIR(a.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Opens the target, expecting failure with code want (0: any negative code)
 * and a message containing each of the NULL-terminated list of words. */
static int expect_refused(struct fixture *fx, const char *path, bool beneath,
			  uint32_t nsources, int want, ...)
{
	char msg[1024];
	const char *word;
	va_list ap;
	int ret;

	err_reset(fx);
	ret = sink_target_open(&fx->t, fx->rootfd, path, beneath, nsources, false, path,
			       &fx->err);
	sink_target_close(&fx->t);
	if (ret >= 0)
		fail_msg("'%s' (nsources %u) was accepted", path, nsources);
	if (want != 0 && ret != want)
		fail_msg("'%s': %s, expected %s", path, pc_strerror(ret), pc_strerror(want));
	assert_int_equal(pc_err_get(&fx->err, msg, sizeof(msg)), ret);
	va_start(ap, want);
	while ((word = va_arg(ap, const char *)) != NULL) {
		if (strstr(msg, word) == NULL) {
			va_end(ap);
			fail_msg("'%s': message '%s' lacks '%s'", path, msg, word);
		}
	}
	va_end(ap);
	return ret;
}

static void test_existing_dir(void **state)
{
	struct fixture *fx = *state;
	static const char *const dirs[] = { "d", "d/", ".", "in" };

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		for (uint32_t n = 1; n <= 3; n++) {
			assert_int_equal(sink_target_open(&fx->t, fx->rootfd, dirs[i], false, n,
							  false, "dest", &fx->err), 0);
			assert_true(fx->t.is_dir);
			assert_false(fx->t.to_stdout);
			assert_true(fx->t.dirfd >= 0);
			assert_true(same_dir(fx, fx->t.dirfd, dirs[i]));
			assert_string_equal(fx->t.display, "dest");
			sink_target_close(&fx->t);
			assert_int_equal(fx->t.dirfd, -1);
		}
	}
	assert_int_equal(pc_err_get(&fx->err, NULL, 0), 0);
}

static void test_new_name(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "d/newname", false, 1, false,
					  "d/newname", &fx->err), 0);
	assert_false(fx->t.is_dir);
	assert_string_equal(fx->t.name, "newname");
	assert_true(same_dir(fx, fx->t.dirfd, "d"));
	sink_target_close(&fx->t);

	/* A bare name goes into the root itself. */
	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "newname", true, 1, false,
					  "newname", &fx->err), 0);
	assert_false(fx->t.is_dir);
	assert_string_equal(fx->t.name, "newname");
	assert_true(same_dir(fx, fx->t.dirfd, "."));
	sink_target_close(&fx->t);

	/* An existing file is a target to replace. */
	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "d/file", false, 1, false,
					  "d/file", &fx->err), 0);
	assert_false(fx->t.is_dir);
	assert_string_equal(fx->t.name, "file");
	assert_true(same_dir(fx, fx->t.dirfd, "d"));
	assert_int_equal(pc_err_get(&fx->err, NULL, 0), 0);
}

/* A new name that ends in '/' is a directory to create (want_dir); an
 * existing file so named is not a directory. */
static void test_new_dir_slash(void **state)
{
	struct fixture *fx = *state;
	static const char *const paths[] = { "d/newdir/", "d/newdir//" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		assert_int_equal(sink_target_open(&fx->t, fx->rootfd, paths[i], false, 1, false,
						  paths[i], &fx->err), 0);
		assert_false(fx->t.is_dir);
		assert_true(fx->t.want_dir);
		assert_string_equal(fx->t.name, "newdir");
		assert_true(same_dir(fx, fx->t.dirfd, "d"));
		sink_target_close(&fx->t);
	}
	/* Without the slash, a name that may become a file. */
	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "d/newdir", false, 1, false,
					  "d/newdir", &fx->err), 0);
	assert_false(fx->t.want_dir);
	sink_target_close(&fx->t);
	assert_int_equal(pc_err_get(&fx->err, NULL, 0), 0);
	expect_refused(fx, "d/file/", false, 1, -ENOTDIR, "d/file/", "is not a directory", NULL);
	expect_refused(fx, "d/newdir/", false, 2, -PC_E_USAGE, "d/newdir/", "not a directory",
		       NULL);
}

static void test_several_sources_need_dir(void **state)
{
	struct fixture *fx = *state;

	expect_refused(fx, "d/file", false, 2, -PC_E_USAGE, "d/file", "not a directory", NULL);
	expect_refused(fx, "d/newname", false, 2, -PC_E_USAGE, "d/newname", "not a directory",
		       NULL);
	expect_refused(fx, "newname", true, 5, -PC_E_USAGE, "newname", NULL);
}

static void test_missing_parent(void **state)
{
	struct fixture *fx = *state;

	expect_refused(fx, "nodir/x", false, 1, -ENOENT, "nodir/x", "does not exist", NULL);
	expect_refused(fx, "d/nodir/x", true, 1, -ENOENT, "d/nodir/x", "does not exist", NULL);
	/* A parent that is a file. */
	expect_refused(fx, "d/file/x", false, 1, -ENOTDIR, "d/file/x",
		       "cannot be opened: Not a directory", NULL);
}

static void test_no_file_name(void **state)
{
	struct fixture *fx = *state;

	/* Missing, so not a directory, and no last component to create. */
	expect_refused(fx, "nodir/.", false, 1, 0, "nodir/.", NULL);
	expect_refused(fx, "nodir/..", false, 1, 0, "nodir/..", NULL);
}

static void test_beneath_outside(void **state)
{
	struct fixture *fx = *state;

	/* Without beneath the link is simply followed. */
	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "out", false, 1, false, "out",
					  &fx->err), 0);
	assert_true(fx->t.is_dir);
	sink_target_close(&fx->t);

	expect_refused(fx, "out", true, 1, 0, "out", "outside", NULL);
	expect_refused(fx, "out", true, 2, 0, "out", "outside", NULL);
	expect_refused(fx, "out/newfile", true, 1, 0, "out/newfile", "outside", NULL);
	expect_refused(fx, "../outside", true, 1, 0, "../outside", NULL);
	expect_refused(fx, "../outside/newfile", true, 1, 0, "../outside/newfile", NULL);
}

static void test_stdout(void **state)
{
	struct fixture *fx = *state;
	char msg[1024];

	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "-", false, 1, true, "-",
					  &fx->err), 0);
	assert_true(fx->t.to_stdout);
	assert_false(fx->t.is_dir);
	assert_int_equal(fx->t.dirfd, -1);
	sink_target_close(&fx->t);

	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "-", false, 2, true, "-",
					  &fx->err), -PC_E_USAGE);
	assert_int_equal(pc_err_get(&fx->err, msg, sizeof(msg)), -PC_E_USAGE);
	assert_non_null(strstr(msg, "standard output"));
}

static void test_close_twice(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(sink_target_open(&fx->t, fx->rootfd, "d", false, 1, false, "d",
					  &fx->err), 0);
	sink_target_close(&fx->t);
	sink_target_close(&fx->t);
	assert_int_equal(fx->t.dirfd, -1);
	assert_true(sink_target_open(&fx->t, fx->rootfd, "nodir/x", false, 1, false, "x",
				     &fx->err) < 0);
	sink_target_close(&fx->t);
	sink_target_close(&fx->t);
}

/* Makes base/root/ro a directory the test cannot write to. Root ignores
 * permission bits, so root mounts a read-only tmpfs there (in a private
 * mount namespace when it can get one). Returns false, with the reason in
 * why, if that is impossible. */
static bool make_read_only_dir(struct fixture *fx, char *why, size_t cap)
{
	char path[128];

	assert_int_equal(mkdirat(fx->rootfd, "ro", 0755), 0);
	snprintf(fx->ro, sizeof(fx->ro), "%s/root/ro", fx->base);
	if (geteuid() != 0) {
		assert_int_equal(chmod(fx->ro, 0555), 0);
		return true;
	}
	/* A private namespace keeps the mount out of everyone else's sight
	 * and drops it if the test dies. unshare fails in a process with
	 * threads (the sanitizers may have some); then mount in place. */
	if (unshare(CLONE_NEWNS) == 0)
		(void)mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	if (mount("tmpfs", fx->ro, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=64k") != 0) {
		snprintf(why, cap, "cannot mount a read-only tmpfs on %s: %s", fx->ro,
			 strerror(errno));
		return false;
	}
	fx->mounted = true;
	/* An fd opened before unshare still walks the old namespace's mount
	 * tree, where the new mount is invisible: open the root again. */
	snprintf(path, sizeof(path), "%s/root", fx->base);
	close(fx->rootfd);
	fx->rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fx->rootfd >= 0);
	return true;
}

static void test_read_only(void **state)
{
	struct fixture *fx = *state;
	char why[256];
	int ret;

	if (!make_read_only_dir(fx, why, sizeof(why)))
		testutil_skip("no read-only directory to write to: %s", why);
	ret = expect_refused(fx, "ro", false, 2, 0, "ro", "cannot write", NULL);
	assert_true(ret == -EROFS || ret == -EACCES);
	ret = expect_refused(fx, "ro/newfile", false, 1, 0, "ro/newfile", "cannot write", NULL);
	assert_true(ret == -EROFS || ret == -EACCES);
	if (!fx->mounted)
		assert_int_equal(chmod(fx->ro, 0755), 0);
}

#define FX_TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		FX_TEST(test_existing_dir),
		FX_TEST(test_new_name),
		FX_TEST(test_new_dir_slash),
		FX_TEST(test_several_sources_need_dir),
		FX_TEST(test_missing_parent),
		FX_TEST(test_no_file_name),
		FX_TEST(test_beneath_outside),
		FX_TEST(test_stdout),
		FX_TEST(test_close_twice),
		FX_TEST(test_read_only),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
