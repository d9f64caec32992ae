/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for srcfile: what a source knows about a regular file, sparse
 * files, refusals (directories, missing files, paths leaving the root),
 * FIFOs and devices as streams, standard input, and closing twice. Each
 * test works in its own mkdtemp directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testchan.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/platform.h"
#include "pipeline/srcfile.h"

struct fixture {
	char dir[64];           /* the temporary directory: base */
	int dirfd;              /* base/root, O_DIRECTORY */
	struct pc_err err;
	struct src_file f;
};

/* base/root/{dir/sub/f (1000 bytes, 0640), empty, sparse, esc -> ../x,
 * fifo} and base/x. */
static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	char p[128];
	int fd;

	if (fx == NULL)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/pcopy-test-srcfile-XXXXXX");
	fx->dirfd = testutil_root(fx->dir);
	if (fx->dirfd < 0) {
		free(fx);
		return -1;
	}
	assert_int_equal(mkdirat(fx->dirfd, "dir", 0755), 0);
	assert_int_equal(mkdirat(fx->dirfd, "dir/sub", 0755), 0);

	fd = openat(fx->dirfd, "dir/sub/f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(write(fd, "0123456789abcdefghijklmnopqrstuvwxyz"
					   "0123456789abcdefghijklmnopqrstuvwxyz"
					   "0123456789abcdefghijklmnopqrstuv", 100), 100);
	assert_int_equal(fchmod(fd, 0640), 0);
	assert_int_equal(close(fd), 0);

	fd = openat(fx->dirfd, "empty", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);

	snprintf(p, sizeof(p), "%s/x", fx->dir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);
	assert_int_equal(symlinkat("../x", fx->dirfd, "esc"), 0);

	pc_err_init(&fx->err);
	memset(&fx->f, 0, sizeof(fx->f));
	fx->f.fd = -1;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	srcfile_close(&fx->f);
	pc_err_destroy(&fx->err);
	close(fx->dirfd);
	testutil_rm_rf(fx->dir);
	free(fx);
	return 0;
}

static int err_msg(struct fixture *fx, char *msg, size_t cap)
{
	return pc_err_get(&fx->err, msg, cap);
}

static void test_regular_file(void **state)
{
	struct fixture *fx = *state;
	struct stat st;
	char buf[16];

	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "dir/sub/f", false, "src:dir/sub/f",
				      &fx->err), 0);
	assert_true(fx->f.fd >= 0);
	assert_string_equal(fx->f.name, "f");
	assert_string_equal(fx->f.display, "src:dir/sub/f");
	assert_false(fx->f.stream);
	assert_false(fx->f.sparse);
	assert_int_equal(fx->f.size, 1000);
	assert_int_equal(fx->f.mode, 0640);
	assert_int_equal(fstatat(fx->dirfd, "dir/sub/f", &st, 0), 0);
	assert_true(fx->f.mtime_s == (int64_t)st.st_mtim.tv_sec);
	assert_int_equal(fx->f.mtime_ns, st.st_mtim.tv_nsec);
	assert_false(atomic_load(&fx->f.failed));
	assert_int_equal(atomic_load(&fx->f.enc.skip), 0);
	assert_int_equal(atomic_load(&fx->f.enc.streak), 0);
	/* The fd reads the file. */
	assert_int_equal(pread(fx->f.fd, buf, 4, 10), 4);
	assert_memory_equal(buf, "abcd", 4);
	/* Opened for reading only. */
	assert_int_equal(fcntl(fx->f.fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_true(fcntl(fx->f.fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(err_msg(fx, NULL, 0), 0);
}

static void test_names(void **state)
{
	struct fixture *fx = *state;
	char abs[128];

	/* A bare name, and beneath the root. */
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "empty", true, "empty", &fx->err), 0);
	assert_string_equal(fx->f.name, "empty");
	assert_int_equal(fx->f.size, 0);
	assert_false(fx->f.sparse);
	srcfile_close(&fx->f);

	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "dir/sub/f", true, "f", &fx->err), 0);
	assert_string_equal(fx->f.name, "f");
	srcfile_close(&fx->f);

	/* An absolute path: dirfd does not matter. */
	snprintf(abs, sizeof(abs), "%s/root/dir/sub/f", fx->dir);
	assert_int_equal(srcfile_open(&fx->f, AT_FDCWD, abs, false, abs, &fx->err), 0);
	assert_string_equal(fx->f.name, "f");
	assert_int_equal(fx->f.size, 1000);
	srcfile_close(&fx->f);

	/* Extra slashes in the middle. */
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "dir//sub///f", false, "x", &fx->err),
			 0);
	assert_string_equal(fx->f.name, "f");
	assert_int_equal(err_msg(fx, NULL, 0), 0);
}

/* "f/" names a directory that a regular file is not: refused like cp does
 * (ENOTDIR), with the file named in the message. */
static void test_trailing_slash(void **state)
{
	struct fixture *fx = *state;
	char msg[1024];

	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "dir/sub/f/", false, "dir/sub/f/",
				      &fx->err), -ENOTDIR);
	assert_int_equal(fx->f.fd, -1);
	assert_int_equal(err_msg(fx, msg, sizeof(msg)), -ENOTDIR);
	assert_non_null(strstr(msg, "dir/sub/f/"));
}

static void test_sparse(void **state)
{
	struct fixture *fx = *state;
	int fd;

	fd = openat(fx->dirfd, "sparse", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 64 << 20), 0);
	assert_int_equal(pwrite(fd, "x", 1, 1 << 20), 1);
	assert_int_equal(close(fd), 0);
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "sparse", false, "sparse", &fx->err),
			 0);
	assert_int_equal(fx->f.size, 64 << 20);
	assert_true(fx->f.sparse);
	assert_false(fx->f.stream);
}

static void test_directory_refused(void **state)
{
	struct fixture *fx = *state;
	static const char *const dirs[] = { "dir", "dir/sub/", "dir/sub", "." };
	char msg[1024];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		pc_err_destroy(&fx->err);
		pc_err_init(&fx->err);
		assert_int_equal(srcfile_open(&fx->f, fx->dirfd, dirs[i], false, dirs[i],
					      &fx->err), -EISDIR);
		assert_int_equal(fx->f.fd, -1);
		assert_int_equal(err_msg(fx, msg, sizeof(msg)), -EISDIR);
		if (strstr(msg, "omitting directory") == NULL || strstr(msg, dirs[i]) == NULL)
			fail_msg("'%s': message '%s'", dirs[i], msg);
	}
}

static void test_missing(void **state)
{
	struct fixture *fx = *state;
	char msg[1024];

	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "nope", false, "host:nope", &fx->err),
			 -ENOENT);
	assert_int_equal(fx->f.fd, -1);
	assert_int_equal(err_msg(fx, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "host:nope"));
	assert_non_null(strstr(msg, strerror(ENOENT)));

	pc_err_destroy(&fx->err);
	pc_err_init(&fx->err);
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "dir/nope/f", true, "dir/nope/f",
				      &fx->err), -ENOENT);
	assert_int_equal(err_msg(fx, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "dir/nope/f"));
}

static void test_fifo_is_stream(void **state)
{
	struct fixture *fx = *state;
	char buf[8];
	int wfd;

	assert_int_equal(mkfifoat(fx->dirfd, "fifo", 0600), 0);
	/* Holding the FIFO open read-write means there is always a writer;
	 * srcfile_open waits until it has written. */
	wfd = openat(fx->dirfd, "fifo", O_RDWR | O_CLOEXEC);
	assert_true(wfd >= 0);
	assert_int_equal(write(wfd, "hello", 5), 5);
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "fifo", false, "fifo", &fx->err), 0);
	assert_true(fx->f.stream);
	assert_false(fx->f.sparse);
	assert_int_equal(fx->f.size, 0);
	assert_int_equal(fx->f.mode, 0600);
	assert_string_equal(fx->f.name, "fifo");
	/* Reads block again: the readers expect it. */
	assert_int_equal(fcntl(fx->f.fd, F_GETFL) & O_NONBLOCK, 0);
	assert_int_equal(read(fx->f.fd, buf, 5), 5);
	assert_memory_equal(buf, "hello", 5);
	close(wfd);
}

static void test_fifo_peer_gives_up(void **state)
{
	struct fixture *fx = *state;
	struct ctl *watch;
	char msg[256];
	int sv[2];

	/* No writer ever: the wait ends when the watched control channel (a
	 * server's) becomes readable, here because it closed. */
	assert_int_equal(mkfifoat(fx->dirfd, "fifo", 0600), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(close(sv[1]), 0);
	watch = testchan_ctl(sv[0], sv[0], "host", false);
	assert_int_equal(srcfile_open_watch(&fx->f, fx->dirfd, "fifo", true, "host:fifo", watch,
					    &fx->err), -PC_E_ABORTED);
	assert_int_equal(fx->f.fd, -1);
	assert_int_equal(err_msg(fx, msg, sizeof(msg)), -PC_E_ABORTED);
	assert_non_null(strstr(msg, "'host:fifo'"));
	ctl_free(watch); /* closes sv[0] */
}

/* A message already inside the watched control channel's chan (TLS holds
 * what it decrypted, and poll on the socket shows nothing) ends the wait
 * too. Without that the wait would never end: the alarm turns that hang
 * into a failure. */
static void test_fifo_peer_spoke_inside_chan(void **state)
{
	struct fixture *fx = *state;
	struct proto_msg err = { .type = PROTO_ERROR };
	struct ctl *watch;
	char msg[256];
	int sv[2];

	assert_int_equal(mkfifoat(fx->dirfd, "fifo", 0600), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	err.u.error.code = -PC_E_NET;
	strcpy(err.u.error.msg, "cannot reach you");
	watch = testchan_held_ctl(sv[0], &err, "host");
	alarm(10);
	assert_int_equal(srcfile_open_watch(&fx->f, fx->dirfd, "fifo", true, "host:fifo", watch,
					    &fx->err), -PC_E_ABORTED);
	alarm(0);
	assert_int_equal(fx->f.fd, -1);
	assert_int_equal(err_msg(fx, msg, sizeof(msg)), -PC_E_ABORTED);
	assert_non_null(strstr(msg, "'host:fifo'"));
	ctl_free(watch); /* closes sv[0] */
	close(sv[1]);
}

/* The stop signals' signalfd, set up by main before any test runs, as
 * pcopy_init does. */
static int g_sigfd = -1;

static void test_fifo_interrupted(void **state)
{
	struct fixture *fx = *state;
	struct signalfd_siginfo si;
	char msg[256];

	/* A stop signal pending (blocked, as pcopy blocks it) ends the wait
	 * for a writer that never comes. The signal stays for the caller. */
	assert_true(g_sigfd >= 0);
	assert_int_equal(mkfifoat(fx->dirfd, "fifo", 0600), 0);
	assert_int_equal(kill(getpid(), SIGTERM), 0);
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "fifo", false, "fifo", &fx->err),
			 -PC_E_INTERRUPTED);
	assert_int_equal(fx->f.fd, -1);
	assert_int_equal(err_msg(fx, msg, sizeof(msg)), -PC_E_INTERRUPTED);
	assert_non_null(strstr(msg, "interrupted while waiting for a writer to open FIFO 'fifo'"));
	assert_int_equal(read(g_sigfd, &si, sizeof(si)), (ssize_t)sizeof(si));
	assert_int_equal(si.ssi_signo, SIGTERM);
	/* Consumed: a regular file opens as before. */
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "empty", false, "empty", &fx->err), 0);
}

static void test_char_device_is_stream(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(srcfile_open(&fx->f, AT_FDCWD, "/dev/null", false, "/dev/null",
				      &fx->err), 0);
	assert_true(fx->f.stream);
	assert_int_equal(fx->f.size, 0);
	assert_string_equal(fx->f.name, "null");
}

static void test_beneath_refuses_escape(void **state)
{
	struct fixture *fx = *state;
	static const char *const bad[] = { "../x", "dir/../../x", "esc" };
	char msg[1024];

	/* Without beneath, both reach base/x. */
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "../x", false, "../x", &fx->err), 0);
	assert_string_equal(fx->f.name, "x");
	srcfile_close(&fx->f);
	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "esc", false, "esc", &fx->err), 0);
	srcfile_close(&fx->f);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret;

		pc_err_destroy(&fx->err);
		pc_err_init(&fx->err);
		ret = srcfile_open(&fx->f, fx->dirfd, bad[i], true, bad[i], &fx->err);
		if (ret >= 0)
			fail_msg("'%s' opened beneath the root", bad[i]);
		assert_int_equal(fx->f.fd, -1);
		assert_int_equal(err_msg(fx, msg, sizeof(msg)), ret);
		assert_non_null(strstr(msg, bad[i]));
	}
}

static void test_close_twice(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(srcfile_open(&fx->f, fx->dirfd, "empty", false, "empty", &fx->err), 0);
	srcfile_close(&fx->f);
	assert_int_equal(fx->f.fd, -1);
	srcfile_close(&fx->f);
	assert_int_equal(fx->f.fd, -1);

	/* After a failed open too. */
	assert_true(srcfile_open(&fx->f, fx->dirfd, "nope", false, "nope", &fx->err) < 0);
	srcfile_close(&fx->f);
	srcfile_close(&fx->f);
}

/* Standard input is a dup: closing it leaves fd 0 alone. The test puts a
 * pipe on fd 0 for the duration and restores the original afterwards. */
static void test_stdin(void **state)
{
	struct fixture *fx = *state;
	int saved, pfd[2], ret;
	char buf[4];

	saved = fcntl(0, F_DUPFD_CLOEXEC, 3);
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	assert_int_equal(dup2(pfd[0], 0), 0);
	close(pfd[0]);
	assert_int_equal(write(pfd[1], "in", 2), 2);

	ret = srcfile_open_stdin(&fx->f, &fx->err);
	if (ret == 0) {
		assert_true(fx->f.fd > 2);
		assert_true(fx->f.stream);
		assert_string_equal(fx->f.name, "stdin");
		assert_string_equal(fx->f.display, "-");
		assert_int_equal(read(fx->f.fd, buf, 2), 2);
		assert_memory_equal(buf, "in", 2);
		srcfile_close(&fx->f);
		assert_true(fcntl(0, F_GETFD) >= 0);
	}
	close(pfd[1]);
	if (saved >= 0) {
		assert_int_equal(dup2(saved, 0), 0);
		close(saved);
	} else {
		close(0);
	}
	assert_int_equal(ret, 0);
}

#define FX_TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		FX_TEST(test_regular_file),
		FX_TEST(test_names),
		FX_TEST(test_trailing_slash),
		FX_TEST(test_sparse),
		FX_TEST(test_directory_refused),
		FX_TEST(test_missing),
		FX_TEST(test_fifo_is_stream),
		FX_TEST(test_fifo_peer_gives_up),
		FX_TEST(test_fifo_peer_spoke_inside_chan),
		FX_TEST(test_char_device_is_stream),
		FX_TEST(test_beneath_refuses_escape),
		FX_TEST(test_close_twice),
		FX_TEST(test_stdin),
		FX_TEST(test_fifo_interrupted),
	};

	g_sigfd = platform_signals_setup();
	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
