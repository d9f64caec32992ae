// SPDX-License-Identifier: Apache-2.0
/* Unit tests for attach (data streams through ssh meeting their session):
 * the id's hex form, the private directory and its checks, fds passed over
 * the socket that really are the other ends of the pipes, the waits and
 * their limits, and a peer of another user refused at both ends. Each test
 * points TMPDIR (and XDG_RUNTIME_DIR) into a fresh directory of its own. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "wire/attach.h"

/* The test's directory: TMPDIR points here. */
static char g_dir[64];

static int dir_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/t_attach.XXXXXX");
	if (mkdtemp(g_dir) == NULL || setenv("TMPDIR", g_dir, 1) != 0 ||
	    unsetenv("XDG_RUNTIME_DIR") != 0)
		return -1;
	return 0;
}

static int dir_teardown(void **state)
{
	(void)state;
	return testutil_rm_rf(g_dir);
}

static void some_id(uint8_t id[PROTO_ATTACH_ID_LEN], uint8_t seed)
{
	for (unsigned i = 0; i < PROTO_ATTACH_ID_LEN; i++)
		id[i] = (uint8_t)(seed + i * 17u);
}

static void test_id_round_trip(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN], back[PROTO_ATTACH_ID_LEN];
	char hex[ATTACH_ID_HEX + 1], bad[ATTACH_ID_HEX + 2];

	(void)state;
	for (unsigned i = 0; i < PROTO_ATTACH_ID_LEN; i++)
		id[i] = (uint8_t)(i == 0 ? 0x0f : 0xf0 + i);
	attach_id_format(id, hex);
	assert_int_equal(strlen(hex), ATTACH_ID_HEX);
	assert_memory_equal(hex, "0ff1f2f3", 8);
	memset(back, 0, sizeof(back));
	assert_int_equal(attach_id_parse(hex, back), 0);
	assert_memory_equal(back, id, sizeof(id));

	/* Upper case is read too. */
	strcpy(bad, hex);
	bad[1] = 'F';
	assert_int_equal(attach_id_parse(bad, back), 0);
	assert_int_equal(back[0], 0x0f);

	/* Too short, too long, empty. */
	bad[ATTACH_ID_HEX - 1] = '\0';
	assert_int_equal(attach_id_parse(bad, back), -PC_E_USAGE);
	snprintf(bad, sizeof(bad), "%s0", hex);
	assert_int_equal(attach_id_parse(bad, back), -PC_E_USAGE);
	assert_int_equal(attach_id_parse("", back), -PC_E_USAGE);
	/* Not hex, in either nibble and at the end. */
	const char *not_hex = "gxz: /";
	for (const char *c = not_hex; *c != '\0'; c++) {
		for (unsigned at = 0; at < ATTACH_ID_HEX; at += ATTACH_ID_HEX - 1) {
			strcpy(bad, hex);
			bad[at] = *c;
			assert_int_equal(attach_id_parse(bad, back), -PC_E_USAGE);
		}
	}
	/* All zero names no session. */
	memset(bad, '0', ATTACH_ID_HEX);
	bad[ATTACH_ID_HEX] = '\0';
	assert_int_equal(attach_id_parse(bad, back), -PC_E_USAGE);
	bad[ATTACH_ID_HEX - 1] = '1';
	assert_int_equal(attach_id_parse(bad, back), 0);
	assert_int_equal(back[PROTO_ATTACH_ID_LEN - 1], 1);
}

/* Listens for id, offers two pipes' ends on the same thread (connect
 * completes against the backlog), and takes them: they must be the very
 * other ends. expect_dir is where the socket must be. */
static void offer_and_take(const uint8_t id[PROTO_ATTACH_ID_LEN], const char *expect_dir)
{
	char path[256], who[64], hex[ATTACH_ID_HEX + 1], want[256];
	int in[2], out[2], fds[2] = { -1, -1 }, lfd, conn, sess;
	struct pc_err e;
	struct stat st;
	uint8_t b;

	pc_err_init(&e);
	lfd = attach_listen(id, path, sizeof(path), &e);
	assert_true(lfd >= 0);
	attach_id_format(id, hex);
	snprintf(want, sizeof(want), "%s/%s", expect_dir, hex);
	assert_string_equal(path, want);
	assert_int_equal(lstat(expect_dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_true(fcntl(lfd, F_GETFL) & O_NONBLOCK);

	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	/* Passes in[0] (the remote's input) and out[1] (its output). */
	conn = attach_offer(id, 1, in[0], out[1], "sshd 10.1.2.3", &e);
	assert_true(conn >= 0);
	sess = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(sess >= 0);
	assert_int_equal(attach_take(sess, platform_now_ns() + 2000000000ull, fds, who,
				     sizeof(who)), 0);
	assert_string_equal(who, "sshd 10.1.2.3");
	assert_true(fds[0] >= 0 && fds[0] != in[0]);
	assert_true(fds[1] >= 0 && fds[1] != out[1]);
	/* The originals go: only the passed copies are left. */
	close(in[0]);
	close(out[1]);
	b = 'i';
	assert_int_equal(write(in[1], &b, 1), 1);
	b = 0;
	assert_int_equal(read(fds[0], &b, 1), 1);
	assert_int_equal(b, 'i');
	b = 'o';
	assert_int_equal(write(fds[1], &b, 1), 1);
	b = 0;
	assert_int_equal(read(out[0], &b, 1), 1);
	assert_int_equal(b, 'o');
	/* Closing the session's copy of the write end is the end of output. */
	close(fds[1]);
	assert_int_equal(read(out[0], &b, 1), 0);
	/* Closing the session's end of the connection ends the offerer's wait. */
	close(sess);
	assert_int_equal(read(conn, &b, 1), 0);

	close(fds[0]);
	close(in[1]);
	close(out[0]);
	close(conn);
	attach_close(lfd, path);
	assert_int_equal(lstat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
	pc_err_destroy(&e);
}

static void test_offer_take_tmpdir(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	char dir[128];

	(void)state;
	some_id(id, 1);
	snprintf(dir, sizeof(dir), "%s/pcopy-%u", g_dir, (unsigned)geteuid());
	offer_and_take(id, dir);
	/* Again, with the directory already there. */
	some_id(id, 2);
	offer_and_take(id, dir);
}

static void test_offer_take_xdg(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	char xdg[128], dir[160];

	(void)state;
	snprintf(xdg, sizeof(xdg), "%s/run", g_dir);
	assert_int_equal(mkdir(xdg, 0700), 0);
	assert_int_equal(setenv("XDG_RUNTIME_DIR", xdg, 1), 0);
	snprintf(dir, sizeof(dir), "%s/pcopy", xdg);
	some_id(id, 3);
	offer_and_take(id, dir);
	/* XDG_RUNTIME_DIR wins: nothing under TMPDIR. */
	snprintf(dir, sizeof(dir), "%s/pcopy-%u", g_dir, (unsigned)geteuid());
	assert_int_equal(access(dir, F_OK), -1);
	assert_int_equal(unsetenv("XDG_RUNTIME_DIR"), 0);
}

/* attach_listen on a directory that is not ours and private must fail
 * with -EPERM and name it, leaving no socket there. */
static void expect_refused(const char *dir)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	char path[256] = "", msg[512];
	struct pc_err e;

	some_id(id, 4);
	pc_err_init(&e);
	assert_int_equal(attach_listen(id, path, sizeof(path), &e), -EPERM);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -EPERM);
	assert_non_null(strstr(msg, dir));
	assert_non_null(strstr(msg, "0700"));
	pc_err_destroy(&e);
	/* attach_offer refuses it the same way, without waiting. */
	pc_err_init(&e);
	uint64_t t0 = platform_now_ns();
	assert_int_equal(attach_offer(id, 5, 0, 1, "x", &e), -EPERM);
	assert_true(platform_now_ns() - t0 < 1000000000ull);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -EPERM);
	assert_non_null(strstr(msg, dir));
	pc_err_destroy(&e);
}

static void test_dir_checks(void **state)
{
	char dir[128], real[128];
	struct stat st;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/pcopy-%u", g_dir, (unsigned)geteuid());
	/* Open to others. */
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	expect_refused(dir);
	assert_int_equal(lstat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755); /* left alone */
	assert_int_equal(rmdir(dir), 0);
	/* A symlink to a private directory of ours. */
	snprintf(real, sizeof(real), "%s/elsewhere", g_dir);
	assert_int_equal(mkdir(real, 0700), 0);
	assert_int_equal(symlink(real, dir), 0);
	expect_refused(dir);
	assert_int_equal(unlink(dir), 0);
	/* A file. */
	int fd = open(dir, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	expect_refused(dir);
	assert_int_equal(unlink(dir), 0);
}

/* No session: attach_offer waits wait_s for it, then gives up with
 * -PC_E_LAUNCH and the id in its message; also when the directory is there
 * but the socket is not. It stops waiting at once when the stream's input
 * hangs up. */
static void test_offer_no_session(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	char hex[ATTACH_ID_HEX + 1], msg[512], dir[128];
	struct pc_err e;
	int p[2];

	(void)state;
	some_id(id, 5);
	attach_id_format(id, hex);
	/* The stream's input, its writer still there. */
	assert_int_equal(pipe(p), 0);
	for (int round = 0; round < 2; round++) {
		pc_err_init(&e);
		uint64_t t0 = platform_now_ns();
		assert_int_equal(attach_offer(id, 1, p[0], 1, "x", &e), -PC_E_LAUNCH);
		uint64_t took = platform_now_ns() - t0;
		assert_true(took >= 900000000ull);
		assert_true(took < 2500000000ull);
		assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_LAUNCH);
		assert_non_null(strstr(msg, hex));
		assert_non_null(strstr(msg, "no pcopy session"));
		pc_err_destroy(&e);
		snprintf(dir, sizeof(dir), "%s/pcopy-%u", g_dir, (unsigned)geteuid());
		if (round == 0)
			assert_int_equal(mkdir(dir, 0700), 0);
		else
			assert_non_null(strstr(msg, dir));
	}
	/* Its writer gone (the client stopped the stream): no wait for the
	 * session to the end. */
	close(p[1]);
	pc_err_init(&e);
	uint64_t t0 = platform_now_ns();
	assert_int_equal(attach_offer(id, 5, p[0], 1, "x", &e), -PC_E_NET);
	assert_true(platform_now_ns() - t0 < 1000000000ull);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_NET);
	assert_non_null(strstr(msg, "input closed"));
	pc_err_destroy(&e);
	close(p[0]);
}

/* A session that starts listening while attach_offer already waits. */
struct late {
	const uint8_t *id;
	int lfd;
	char path[256];
};

static void *late_main(void *arg)
{
	struct late *l = arg;
	struct pc_err e;

	usleep(300 * 1000);
	pc_err_init(&e);
	l->lfd = attach_listen(l->id, l->path, sizeof(l->path), &e);
	pc_err_destroy(&e);
	return NULL;
}

static void test_offer_waits_for_session(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	struct late l = { .lfd = -1 };
	struct pc_err e;
	pthread_t t;
	int p[2], conn;

	(void)state;
	some_id(id, 6);
	l.id = id;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pthread_create(&t, NULL, late_main, &l), 0);
	pc_err_init(&e);
	conn = attach_offer(id, 5, p[0], p[1], "x", &e);
	pc_err_destroy(&e);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(l.lfd >= 0);
	assert_true(conn >= 0);
	close(conn);
	close(p[0]);
	close(p[1]);
	attach_close(l.lfd, l.path);
}

/* A raw connection to the socket of a listening attach_listen. */
static int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		close(fd);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A peer that connects and says nothing is given up at the deadline; one
 * that passes one fd instead of two is refused, keeping none. */
static void test_take_timeout_and_one_fd(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	int lfd, peer, sess, fds[2] = { -1, -1 }, p[2];
	char path[256], who[64];
	struct pc_err e;

	(void)state;
	some_id(id, 7);
	pc_err_init(&e);
	lfd = attach_listen(id, path, sizeof(path), &e);
	pc_err_destroy(&e);
	assert_true(lfd >= 0);

	peer = raw_connect(path);
	assert_true(peer >= 0);
	sess = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(sess >= 0);
	uint64_t t0 = platform_now_ns();
	assert_int_equal(attach_take(sess, t0 + 300000000ull, fds, who, sizeof(who)),
			 -PC_E_TIMEOUT);
	uint64_t took = platform_now_ns() - t0;
	assert_true(took >= 300000000ull);
	assert_true(took < 1500000000ull);
	close(sess);
	close(peer);

	peer = raw_connect(path);
	assert_true(peer >= 0);
	sess = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(sess >= 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(net_send_fds(peer, p, 1, "one"), 0);
	unsigned before = testutil_count_fds();
	assert_int_equal(attach_take(sess, platform_now_ns() + 2000000000ull, fds, who,
				     sizeof(who)), -EPROTO);
	assert_int_equal(testutil_count_fds(), before);
	/* The pipe's only read end left is ours: nothing kept a copy. */
	close(p[0]);
	assert_int_equal(write(p[1], "x", 1), -1);
	assert_int_equal(errno, EPIPE);
	close(p[1]);
	close(sess);
	close(peer);
	attach_close(lfd, path);
}

/* Exit codes of the child that runs as another user. */
enum { CHILD_OK = 0, CHILD_SETUID = 10, CHILD_CONNECT, CHILD_SEND, CHILD_OFFER, CHILD_MSG };

#define NOBODY 65534u

/* In a child: becomes NOBODY, then with path connects to a socket and
 * passes two fds, or (path NULL) runs attach_offer for id and expects
 * -EPERM naming another user. Returns the exit code. */
static int child_as_nobody(const char *path, const uint8_t *id)
{
	int p[2];

	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		return CHILD_SETUID;
	if (pipe(p) != 0)
		return CHILD_SETUID;
	if (path != NULL) {
		int fd = raw_connect(path);
		if (fd < 0)
			return CHILD_CONNECT;
		if (net_send_fds(fd, p, 2, "nobody") != 0)
			return CHILD_SEND;
		char b;
		(void)read(fd, &b, 1); /* until the session hangs up */
		return CHILD_OK;
	}
	struct pc_err e;
	char msg[512];
	pc_err_init(&e);
	if (attach_offer(id, 1, p[0], p[1], "nobody", &e) != -EPERM)
		return CHILD_OFFER;
	if (pc_err_get(&e, msg, sizeof(msg)) != -EPERM || strstr(msg, "another user") == NULL)
		return CHILD_MSG;
	return CHILD_OK;
}

static int wait_child(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* A process of another user that reaches the session's socket (here the
 * test opens the directory to it) gets -EPERM from attach_take; and
 * attach_offer refuses a listener of another user in its directory. */
static void test_other_user(void **state)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	char path[256], who[64], dir[128];
	int lfd, sess, fds[2] = { -1, -1 };
	struct pc_err e;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		testutil_skip("test_other_user: needs root to run a peer as uid %u", NOBODY);
	some_id(id, 8);
	pc_err_init(&e);
	lfd = attach_listen(id, path, sizeof(path), &e);
	pc_err_destroy(&e);
	assert_true(lfd >= 0);
	snprintf(dir, sizeof(dir), "%s/pcopy-0", g_dir);
	assert_int_equal(chmod(g_dir, 0711), 0);
	assert_int_equal(chmod(dir, 0711), 0);
	assert_int_equal(chmod(path, 0777), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_as_nobody(path, NULL));
	sess = net_accept(lfd, 5000, NULL, 0);
	assert_true(sess >= 0);
	assert_int_equal(attach_take(sess, platform_now_ns() + 5000000000ull, fds, who,
				     sizeof(who)), -EPERM);
	assert_int_equal(fds[0], -1);
	assert_int_equal(fds[1], -1);
	close(sess);
	assert_int_equal(wait_child(pid), CHILD_OK);
	attach_close(lfd, path);

	/* nobody's own directory, with root's listener in it. */
	snprintf(dir, sizeof(dir), "%s/pcopy-%u", g_dir, NOBODY);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(chown(dir, NOBODY, NOBODY), 0);
	char hex[ATTACH_ID_HEX + 1];
	attach_id_format(id, hex);
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	assert_true(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	assert_int_equal(chmod(path, 0777), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_as_nobody(NULL, id));
	assert_int_equal(wait_child(pid), CHILD_OK);
	attach_close(lfd, path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_id_round_trip),
		cmocka_unit_test_setup_teardown(test_offer_take_tmpdir, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_offer_take_xdg, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_dir_checks, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_offer_no_session, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_offer_waits_for_session, dir_setup,
						dir_teardown),
		cmocka_unit_test_setup_teardown(test_take_timeout_and_one_fd, dir_setup,
						dir_teardown),
		cmocka_unit_test_setup_teardown(test_other_user, dir_setup, dir_teardown),
	};

	/* A write to a pipe without a reader must fail with EPIPE here. */
	signal(SIGPIPE, SIG_IGN);
	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
