// SPDX-License-Identifier: Apache-2.0
/* Unit tests for chan's plain backend, each over a socketpair and over a
 * pair of pipes (the two shapes the control and data channels take): exact
 * sends and receives with the caller's iovec left alone, recv_some, the end
 * of the stream at a boundary and inside a read, timeouts both ways, and
 * chan_abort waking a receiver and a sender blocked in other threads; and
 * chan_pipes_new (data through ssh): writes not cut to PIPE_BUF, its hold
 * fd closed with the channel. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/platform.h"
#include "transport/chan.h"

/* Two connected ends, a and b, in clear. */
struct ends {
	struct chan *a, *b;
};

static void ends_open(struct ends *e, bool pipes)
{
	if (pipes) {
		int ab[2], ba[2];  /* a writes ab[1], b reads ab[0], and back */

		assert_int_equal(pipe(ab), 0);
		assert_int_equal(pipe(ba), 0);
		e->a = chan_plain_new(ba[0], ab[1]);
		e->b = chan_plain_new(ab[0], ba[1]);
	} else {
		int sv[2];

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		e->a = chan_plain_new(sv[0], sv[0]);
		e->b = chan_plain_new(sv[1], sv[1]);
	}
	assert_non_null(e->a);
	assert_non_null(e->b);
}

static void ends_close(struct ends *e)
{
	chan_free(e->a);
	chan_free(e->b);
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((i * 131u + seed) ^ (i >> 9));
}

/* A sender in its own thread, so that a transfer larger than the kernel's
 * buffers can be received on the test's thread. */
struct sender {
	struct chan *c;
	const struct iovec *iov;
	int n;
	int ret;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	s->ret = chan_send(s->c, s->iov, s->n);
	return NULL;
}

static void exact_round_trip(bool pipes)
{
	enum { BIG = 3 << 20 };
	static uint8_t head[7], body[BIG], tail[1000], in[sizeof(head) + BIG + sizeof(tail)];
	struct iovec iov[4] = {
		{ head, sizeof(head) }, { NULL, 0 }, { body, sizeof(body) }, { tail, sizeof(tail) },
	};
	struct iovec copy[4];
	struct sender s;
	struct ends e;
	pthread_t t;
	size_t got = 99;

	fill(head, sizeof(head), 1);
	fill(body, sizeof(body), 2);
	fill(tail, sizeof(tail), 3);
	memcpy(copy, iov, sizeof(iov));
	ends_open(&e, pipes);
	s = (struct sender){ .c = e.a, .iov = iov, .n = 4, .ret = 1 };
	assert_int_equal(pthread_create(&t, NULL, sender_main, &s), 0);
	assert_int_equal(chan_recv(e.b, in, sizeof(in), &got), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(s.ret, 0);
	assert_int_equal(got, sizeof(in));
	assert_memory_equal(in, head, sizeof(head));
	assert_memory_equal(in + sizeof(head), body, sizeof(body));
	assert_memory_equal(in + sizeof(head) + sizeof(body), tail, sizeof(tail));
	assert_memory_equal(iov, copy, sizeof(iov));  /* the caller's array is untouched */
	assert_false(chan_pending(e.b));
	assert_false(chan_encrypted(e.a));
	assert_string_equal(chan_describe(e.a), "clear");
	assert_string_equal(chan_error(e.a), "");
	ends_close(&e);
}

static void test_exact_socket(void **state)
{
	(void)state;
	exact_round_trip(false);
}

static void test_exact_pipe(void **state)
{
	(void)state;
	exact_round_trip(true);
}

/* More vectors than one sendmsg window, many of them empty. */
static void many_iovecs(bool pipes)
{
	enum { N = 300 };
	struct iovec iov[N];
	uint8_t src[N], in[N / 2];
	struct ends e;
	size_t want = 0;

	for (int i = 0; i < N; i++) {
		src[i] = (uint8_t)i;
		iov[i] = (struct iovec){ &src[i], (size_t)(i % 2) };
		if (i % 2)
			in[want++] = 0;
	}
	ends_open(&e, pipes);
	assert_int_equal(chan_send(e.a, iov, N), 0);
	assert_int_equal(chan_recv(e.b, in, want, NULL), 0);
	for (size_t i = 0; i < want; i++)
		assert_int_equal(in[i], (uint8_t)(2 * i + 1));
	ends_close(&e);
}

static void test_many_iovecs(void **state)
{
	(void)state;
	many_iovecs(false);
	many_iovecs(true);
}

static void recv_some_and_eof(bool pipes)
{
	uint8_t out[10], in[64];
	struct iovec iov = { out, sizeof(out) };
	struct ends e;
	size_t got = 99;
	ssize_t r;

	fill(out, sizeof(out), 9);
	ends_open(&e, pipes);
	assert_int_equal(chan_send(e.a, &iov, 1), 0);
	r = chan_recv_some(e.b, in, sizeof(in));
	assert_true(r >= 1 && r <= (ssize_t)sizeof(out));
	assert_memory_equal(in, out, (size_t)r);
	assert_int_equal(chan_recv(e.b, in + r, sizeof(out) - (size_t)r, NULL), 0);
	assert_memory_equal(in, out, sizeof(out));

	/* 3 bytes then the end: inside a read of 10, got says 3. */
	iov.iov_len = 3;
	assert_int_equal(chan_send(e.a, &iov, 1), 0);
	assert_int_equal(chan_close_send(e.a), 0);
	assert_int_equal(chan_recv(e.b, in, 10, &got), -PC_E_NET);
	assert_int_equal(got, 3);
	assert_memory_equal(in, out, 3);
	/* Then at a boundary: got == 0, and recv_some says 0. */
	assert_int_equal(chan_recv(e.b, in, 5, &got), -PC_E_NET);
	assert_int_equal(got, 0);
	assert_int_equal(chan_recv_some(e.b, in, sizeof(in)), 0);
	/* The other direction still works after a's close_send. */
	assert_int_equal(chan_send(e.b, &iov, 1), 0);
	assert_int_equal(chan_recv(e.a, in, 3, NULL), 0);
	ends_close(&e);
}

static void test_recv_some_and_eof_socket(void **state)
{
	(void)state;
	recv_some_and_eof(false);
}

static void test_recv_some_and_eof_pipe(void **state)
{
	(void)state;
	recv_some_and_eof(true);
}

static void recv_timeout(bool pipes)
{
	struct ends e;
	uint8_t b;
	size_t got = 99;
	uint64_t t0;

	ends_open(&e, pipes);
	assert_int_equal(chan_set_timeout(e.b, 1), 0);
	t0 = platform_now_ns();
	assert_int_equal(chan_recv(e.b, &b, 1, &got), -PC_E_TIMEOUT);
	assert_int_equal(got, 0);
	assert_true(platform_now_ns() - t0 >= 900000000u);
	assert_true(platform_now_ns() - t0 < 5000000000u);
	ends_close(&e);
}

static void test_recv_timeout_socket(void **state)
{
	(void)state;
	recv_timeout(false);
}

static void test_recv_timeout_pipe(void **state)
{
	(void)state;
	recv_timeout(true);
}

/* Nobody reads b: a send larger than every buffer gives -PC_E_TIMEOUT. */
static void send_timeout(bool pipes)
{
	enum { BIG = 16 << 20 };
	uint8_t *big = calloc(1, BIG);
	struct iovec iov = { big, BIG };
	struct ends e;

	assert_non_null(big);
	ends_open(&e, pipes);
	assert_int_equal(chan_set_timeout(e.a, 1), 0);
	assert_int_equal(chan_send(e.a, &iov, 1), -PC_E_TIMEOUT);
	ends_close(&e);
	free(big);
}

static void test_send_timeout(void **state)
{
	(void)state;
	send_timeout(false);
	send_timeout(true);
}

struct receiver {
	struct chan *c;
	int ret;
	atomic_bool done;
};

static void *receiver_main(void *arg)
{
	struct receiver *r = arg;
	uint8_t b[16];

	r->ret = chan_recv(r->c, b, sizeof(b), NULL);
	atomic_store(&r->done, true);
	return NULL;
}

static void settle(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 200 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

/* A receiver blocked forever (no timeout) wakes with -PC_E_ABORTED, and so
 * does a sender blocked on full buffers; later calls fail at once. */
static void abort_wakes(bool pipes)
{
	enum { BIG = 16 << 20 };
	uint8_t *big = calloc(1, BIG);
	struct iovec iov = { big, BIG };
	struct receiver r = { .ret = 1 };
	struct sender s;
	struct ends e;
	pthread_t tr, ts;
	uint8_t b;

	assert_non_null(big);
	ends_open(&e, pipes);
	r.c = e.a;
	atomic_init(&r.done, false);
	s = (struct sender){ .c = e.a, .iov = &iov, .n = 1, .ret = 1 };
	assert_int_equal(pthread_create(&tr, NULL, receiver_main, &r), 0);
	assert_int_equal(pthread_create(&ts, NULL, sender_main, &s), 0);
	settle();
	assert_false(atomic_load(&r.done));  /* really blocked */
	chan_abort(e.a);
	chan_abort(e.a);  /* idempotent */
	assert_int_equal(pthread_join(tr, NULL), 0);
	assert_int_equal(pthread_join(ts, NULL), 0);
	assert_int_equal(r.ret, -PC_E_ABORTED);
	assert_int_equal(s.ret, -PC_E_ABORTED);
	assert_int_equal(chan_recv(e.a, &b, 1, NULL), -PC_E_ABORTED);
	assert_int_equal(chan_send(e.a, &iov, 1), -PC_E_ABORTED);
	ends_close(&e);
	free(big);
}

static void test_abort_socket(void **state)
{
	(void)state;
	abort_wakes(false);
}

static void test_abort_pipe(void **state)
{
	(void)state;
	abort_wakes(true);
}

static void test_bad_arguments(void **state)
{
	struct ends e;
	uint8_t b;

	(void)state;
	ends_open(&e, false);
	assert_int_equal(chan_send(NULL, NULL, 0), -EINVAL);
	assert_int_equal(chan_send(e.a, NULL, 1), -EINVAL);
	assert_int_equal(chan_send(e.a, NULL, -1), -EINVAL);
	assert_int_equal(chan_send(e.a, NULL, 0), 0);
	assert_int_equal(chan_recv(e.a, NULL, 1, NULL), -EINVAL);
	assert_int_equal(chan_recv(e.a, &b, 0, NULL), 0);
	assert_int_equal(chan_recv_some(e.a, &b, 0), -EINVAL);
	assert_int_equal(chan_rfd(NULL), -1);
	assert_true(chan_rfd(e.a) >= 0);
	assert_int_equal(chan_rfd(e.a), chan_wfd(e.a));
	assert_false(chan_pending(NULL));
	chan_abort(NULL);
	chan_free(NULL);
	ends_close(&e);
}

/* ---- chan_pipes_new: a data stream through ssh ---------------------------- */

/* Every writev of the process goes through here (the library is linked
 * into this program, so its calls bind to this definition), and those to
 * g_watch_fd are counted: how many writes a send took. The real one (or a
 * sanitizer's interceptor in front of it) is the next in line. */
static atomic_int g_watch_fd = -1;
static atomic_uint g_watch_writes;

ssize_t writev(int fd, const struct iovec *iov, int n)
{
	static ssize_t (*next)(int, const struct iovec *, int);

	if (next == NULL)
		*(void **)&next = dlsym(RTLD_NEXT, "writev");
	if (next == NULL) {
		errno = ENOSYS;
		return -1;
	}
	if (fd == atomic_load(&g_watch_fd))
		atomic_fetch_add(&g_watch_writes, 1);
	return next(fd, iov, n);
}

/* Reads len bytes from fd (blocking) into buf. */
struct drain {
	int fd;
	uint8_t *buf;
	size_t len, got;
};

static void *drain_main(void *arg)
{
	struct drain *d = arg;

	while (d->got < d->len) {
		ssize_t r = read(d->fd, d->buf + d->got, d->len - d->got);
		if (r <= 0)
			break;
		d->got += (size_t)r;
	}
	return NULL;
}

/* 1 MiB through chan_pipes_new, with a reader thread on the other end of
 * the pipe, arrives intact; both fds are made non-blocking. Then into a
 * pipe that holds 1 MiB, nobody reading: a send is one write, not cut into
 * PIPE_BUF pieces (256 of them) as on chan_plain_new's pipes. */
static void test_pipes_bulk(void **state)
{
	enum { MIB = 1 << 20 };
	uint8_t *out = malloc(MIB), *in = malloc(MIB);
	int to[2], back[2];
	struct iovec iov;
	struct drain d;
	struct chan *c;
	pthread_t t;

	(void)state;
	assert_non_null(out);
	assert_non_null(in);
	fill(out, MIB, 7);
	assert_int_equal(pipe2(to, O_CLOEXEC), 0);
	assert_int_equal(pipe2(back, O_CLOEXEC), 0);
	c = chan_pipes_new(back[0], to[1], -1);
	assert_non_null(c);
	assert_true(fcntl(back[0], F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(to[1], F_GETFL) & O_NONBLOCK);
	assert_int_equal(chan_rfd(c), back[0]);
	assert_int_equal(chan_wfd(c), to[1]);

	memset(in, 0, MIB);
	d = (struct drain){ .fd = to[0], .buf = in, .len = MIB };
	assert_int_equal(pthread_create(&t, NULL, drain_main, &d), 0);
	iov = (struct iovec){ .iov_base = out, .iov_len = MIB };
	assert_int_equal(chan_send(c, &iov, 1), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(d.got, MIB);
	assert_memory_equal(in, out, MIB);

	/* A pipe with room for all of it. */
	assert_true(fcntl(to[1], F_SETPIPE_SZ, MIB) >= MIB);
	fill(out, MIB, 8);
	atomic_store(&g_watch_writes, 0);
	atomic_store(&g_watch_fd, to[1]);
	assert_int_equal(chan_send(c, &iov, 1), 0);
	atomic_store(&g_watch_fd, -1);
	unsigned writes = atomic_load(&g_watch_writes);
	if (writes < 1 || writes > 2)
		fail_msg("1 MiB into a pipe of 1 MiB took %u writes, not 1", writes);
	memset(in, 0, MIB);
	d = (struct drain){ .fd = to[0], .buf = in, .len = MIB };
	drain_main(&d);
	assert_int_equal(d.got, MIB);
	assert_memory_equal(in, out, MIB);

	/* The same through chan_plain_new's pipes is cut (the counter sees
	 * the writes it is meant to see). */
	int loop[2];
	assert_int_equal(pipe2(loop, O_CLOEXEC), 0);
	assert_true(fcntl(loop[1], F_SETPIPE_SZ, MIB) >= MIB);
	struct chan *plain = chan_plain_new(loop[0], loop[1]);
	assert_non_null(plain);
	atomic_store(&g_watch_writes, 0);
	atomic_store(&g_watch_fd, loop[1]);
	assert_int_equal(chan_send(plain, &iov, 1), 0);
	atomic_store(&g_watch_fd, -1);
	assert_int_equal(atomic_load(&g_watch_writes), MIB / PIPE_BUF);
	chan_free(plain);

	chan_free(c);
	close(to[0]);
	close(back[1]);
	free(out);
	free(in);
}

/* The hold fd goes with the channel: closed by chan_free (the remote
 * `pcopy --attach` sees its connection end), and not before. A failure
 * leaves all three fds the caller's. */
static void test_pipes_hold(void **state)
{
	int r[2], w[2], sv[2];
	struct chan *c;
	char b;

	(void)state;
	assert_int_equal(pipe2(r, O_CLOEXEC), 0);
	assert_int_equal(pipe2(w, O_CLOEXEC), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	c = chan_pipes_new(r[0], w[1], sv[0]);
	assert_non_null(c);
	assert_true(fcntl(sv[0], F_GETFD) >= 0);
	assert_int_equal(recv(sv[1], &b, 1, MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN); /* still open */
	chan_free(c);
	assert_int_equal(recv(sv[1], &b, 1, MSG_DONTWAIT), 0); /* closed */
	errno = 0;
	assert_int_equal(fcntl(sv[0], F_GETFD), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(fcntl(r[0], F_GETFD), -1);
	assert_int_equal(fcntl(w[1], F_GETFD), -1);
	close(sv[1]);
	close(r[1]);
	close(w[0]);

	/* A bad fd: NULL, errno set, the others left open. */
	assert_int_equal(pipe2(r, O_CLOEXEC), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	int bad = dup(r[1]);
	assert_true(bad >= 0);
	close(bad);
	errno = 0;
	assert_null(chan_pipes_new(r[0], bad, sv[0]));
	assert_int_equal(errno, EBADF);
	assert_true(fcntl(r[0], F_GETFD) >= 0);
	assert_true(fcntl(sv[0], F_GETFD) >= 0);
	close(r[0]);
	close(r[1]);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exact_socket),
		cmocka_unit_test(test_exact_pipe),
		cmocka_unit_test(test_many_iovecs),
		cmocka_unit_test(test_recv_some_and_eof_socket),
		cmocka_unit_test(test_recv_some_and_eof_pipe),
		cmocka_unit_test(test_recv_timeout_socket),
		cmocka_unit_test(test_recv_timeout_pipe),
		cmocka_unit_test(test_send_timeout),
		cmocka_unit_test(test_abort_socket),
		cmocka_unit_test(test_abort_pipe),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_pipes_bulk),
		cmocka_unit_test(test_pipes_hold),
	};
	int failed;

	/* A pipe whose reader is gone raises SIGPIPE; pcopy ignores it. */
	signal(SIGPIPE, SIG_IGN);
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	return testutil_status(failed);
}
