/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for net, over loopback: listen on an ephemeral port, connect,
 * accept with a peer name and a deadline, refused connections and their
 * messages, connects started without waiting (net_connect_start/done),
 * receive timeouts, vectored sends, fds passed over Unix sockets (one or
 * two), and IPv6 where ::1 exists. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/net.h"
#include "sys/platform.h"

/* The two calls whose signatures are still moving (port ranges and address
 * families): every test goes through these. */
static int listen_on(const char *host, uint16_t port, uint32_t window, struct pc_err *e)
{
	return net_listen(host, port, port, 0, window, e);
}

static int connect_to(const char *host, uint16_t port, uint32_t window, unsigned timeout_s,
		      struct pc_err *e)
{
	return net_connect(host, port, 0, window, timeout_s, e);
}

/* A connected loopback pair made through net_listen/connect/accept. */
struct pair {
	int lfd, cfd, afd;
	uint16_t port;
	char peer[NET_MAX_ADDR];
};

static void pair_open(struct pair *p, const char *host)
{
	struct pc_err e;

	pc_err_init(&e);
	p->lfd = listen_on(host, 0, 0, &e);
	assert_true(p->lfd >= 0);
	p->port = net_local_port(p->lfd);
	assert_true(p->port != 0);
	p->cfd = connect_to(host, p->port, 0, 5, &e);
	assert_true(p->cfd >= 0);
	/* The connection is already queued, so the deadline is never hit. */
	p->afd = net_accept(p->lfd, 5000, p->peer, sizeof(p->peer));
	assert_true(p->afd >= 0);
	assert_int_equal(pc_err_get(&e, NULL, 0), 0);
	pc_err_destroy(&e);
}

static void pair_close(struct pair *p)
{
	close(p->afd);
	close(p->cfd);
	close(p->lfd);
}

static void test_listen_connect_accept(void **state)
{
	char want[NET_MAX_ADDR + 8], host[NET_MAX_ADDR];
	struct pair p;
	char buf[6];

	(void)state;
	pair_open(&p, "127.0.0.1");
	snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)net_local_port(p.cfd));
	assert_string_equal(p.peer, want);
	assert_int_equal(net_local_port(p.afd), p.port);
	assert_int_equal(net_local_host(p.cfd, host, sizeof(host)), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(net_peer_host(p.afd, host, sizeof(host)), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(net_set_nodelay(p.cfd), 0);

	/* Bytes flow both ways. */
	assert_int_equal(platform_write_full(p.cfd, "hello", 5), 0);
	assert_int_equal(platform_read_full(p.afd, buf, 5, NULL), 0);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(platform_write_full(p.afd, "world", 5), 0);
	assert_int_equal(platform_read_full(p.cfd, buf, 5, NULL), 0);
	assert_memory_equal(buf, "world", 5);
	pair_close(&p);
}

/* Without a timeout, and with a NULL peer buffer. */
static void test_connect_no_timeout(void **state)
{
	struct pc_err e;
	int lfd, cfd, afd;
	uint16_t port;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	port = net_local_port(lfd);
	cfd = connect_to("127.0.0.1", port, 0, 0, &e);
	assert_true(cfd >= 0);
	afd = net_accept(lfd, -1, NULL, 0);
	assert_true(afd >= 0);
	close(afd);
	close(cfd);
	close(lfd);
	pc_err_destroy(&e);
}

/* A host name goes through the lookup thread (net_getaddrinfo). */
static void test_connect_by_name(void **state)
{
	struct pc_err e;
	int lfd, cfd, afd;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	cfd = connect_to("localhost", net_local_port(lfd), 0, 5, &e);
	/* localhost may resolve to ::1 first, where nothing listens: the
	 * next address is tried. */
	assert_true(cfd >= 0);
	afd = net_accept(lfd, 5000, NULL, 0);
	assert_true(afd >= 0);
	assert_int_equal(pc_err_get(&e, NULL, 0), 0);
	close(afd);
	close(cfd);
	close(lfd);
	pc_err_destroy(&e);
}

/* A listener whose accept queue fills (backlog 0) as held[]'s handshakes
 * complete: the kernel then drops new SYNs, so a connect to it waits.
 * Returns the listener. */
static int full_listener(uint16_t *port, int held[3])
{
	struct pc_err e;
	int lfd;

	pc_err_init(&e);
	lfd = net_listen("127.0.0.1", 0, 0, 0, 0, &e);
	assert_true(lfd >= 0);
	assert_int_equal(listen(lfd, 0), 0);
	*port = net_local_port(lfd);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(*port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	for (int i = 0; i < 3; i++) {
		held[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		assert_true(held[i] >= 0);
		assert_true(connect(held[i], (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
			    errno == EINPROGRESS);
	}
	pc_err_destroy(&e);
	return lfd;
}

/* The stop signals' signalfd: main sets them up before any thread exists,
 * as pcopy_init does, so no thread can take a signal meant to wait. */
static int g_sigfd = -1;

/* A pending stop signal ends a name lookup and a connect that would
 * otherwise wait (platform_poll). */
static void test_connect_interrupted(void **state)
{
	struct signalfd_siginfo si;
	struct pc_err e;
	char msg[256];
	uint16_t port;
	int held[3], lfd;

	(void)state;
	lfd = full_listener(&port, held);
	assert_true(g_sigfd >= 0);
	assert_int_equal(kill(getpid(), SIGINT), 0);

	pc_err_init(&e);
	assert_int_equal(connect_to("127.0.0.1", port, 0, 30, &e), -PC_E_INTERRUPTED);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_INTERRUPTED);
	snprintf(msg + 128, 64, "interrupted while connecting to 127.0.0.1 port %u",
		 (unsigned)port);
	assert_non_null(strstr(msg, msg + 128));
	pc_err_destroy(&e);

	/* The lookup of a name is interrupted too; its thread ends alone. */
	pc_err_init(&e);
	assert_int_equal(connect_to("localhost", port, 0, 30, &e), -PC_E_INTERRUPTED);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_INTERRUPTED);
	assert_string_equal(msg, "interrupted while resolving host 'localhost'");
	pc_err_destroy(&e);

	assert_int_equal(read(g_sigfd, &si, sizeof(si)), (ssize_t)sizeof(si));
	assert_int_equal(si.ssi_signo, SIGINT);
	for (int i = 0; i < 3; i++)
		if (held[i] >= 0)
			close(held[i]);
	close(lfd);
}

static void *close_later(void *arg)
{
	usleep(100 * 1000);
	close(*(int *)arg);
	return NULL;
}

/* net_connect_watch: a connect that gets no answer (a full backlog drops
 * the SYN) ends with -ECANCELED once the watch's peer goes (ssh stopped
 * while `pcopy --ssh-dial` connects for it), long before its limit, but not
 * when the peer only half-closes; with the watch still there, a connect
 * that works is not disturbed. */
static void test_connect_watch(void **state)
{
	struct pc_err e;
	char msg[256];
	uint16_t port;
	int held[3], lfd, sp[2], fd;
	pthread_t th;

	(void)state;
	lfd = full_listener(&port, held);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	assert_int_equal(pthread_create(&th, NULL, close_later, &sp[1]), 0);
	uint64_t t0 = platform_now_ns();
	pc_err_init(&e);
	assert_int_equal(net_connect_watch("127.0.0.1", port, 0, 0, 30000, sp[0], &e),
			 -ECANCELED);
	assert_true(platform_now_ns() - t0 < 5000000000ull);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -ECANCELED);
	assert_non_null(strstr(msg, "went away"));
	pc_err_destroy(&e);
	assert_int_equal(pthread_join(th, NULL), 0);
	close(sp[0]);
	/* A peer that only stopped sending is still there: the connect runs
	 * to its own limit. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	assert_int_equal(shutdown(sp[1], SHUT_WR), 0);
	pc_err_init(&e);
	assert_int_equal(net_connect_watch("127.0.0.1", port, 0, 0, 300, sp[0], &e), -ETIMEDOUT);
	pc_err_destroy(&e);
	close(sp[0]);
	close(sp[1]);
	for (int i = 0; i < 3; i++)
		if (held[i] >= 0)
			close(held[i]);
	close(lfd);

	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	fd = net_connect_watch("127.0.0.1", net_local_port(lfd), 0, 0, 5000, sp[0], &e);
	assert_true(fd >= 0);
	close(fd);
	close(sp[0]);
	close(sp[1]);
	close(lfd);
	pc_err_destroy(&e);
}

static void test_window(void **state)
{
	struct pc_err e;
	int lfd, cfd, afd;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 256u << 10, &e);
	assert_true(lfd >= 0);
	cfd = connect_to("127.0.0.1", net_local_port(lfd), 256u << 10, 5, &e);
	assert_true(cfd >= 0);
	afd = net_accept(lfd, 5000, NULL, 0);
	assert_true(afd >= 0);
	/* The kernel may clamp, but something was granted on both ends. */
	assert_true(net_granted_window(afd) > 0);
	assert_true(net_granted_window(cfd) > 0);
	close(afd);
	close(cfd);
	close(lfd);
	pc_err_destroy(&e);
}

static void test_accept_timeout(void **state)
{
	struct pc_err e;
	char peer[NET_MAX_ADDR] = "unchanged";
	int lfd;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	/* Nobody connects, so this is -PC_E_TIMEOUT however long it takes. */
	assert_int_equal(net_accept(lfd, 50, peer, sizeof(peer)), -PC_E_TIMEOUT);
	assert_int_equal(net_accept(lfd, 0, peer, sizeof(peer)), -PC_E_TIMEOUT);
	assert_string_equal(peer, "unchanged");
	close(lfd);
	pc_err_destroy(&e);
}

/* A port on which nothing listens: bind one, then close it. */
static uint16_t closed_port(void)
{
	struct pc_err e;
	uint16_t port;
	int lfd;

	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	port = net_local_port(lfd);
	close(lfd);
	pc_err_destroy(&e);
	return port;
}

static void test_connect_refused(void **state)
{
	char msg[1024], portstr[16];
	unsigned timeouts[] = { 0, 5 };
	struct pc_err e;

	(void)state;
	for (size_t i = 0; i < sizeof(timeouts) / sizeof(timeouts[0]); i++) {
		uint16_t port = closed_port();

		pc_err_init(&e);
		assert_int_equal(connect_to("127.0.0.1", port, 0, timeouts[i], &e),
				 -ECONNREFUSED);
		assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -ECONNREFUSED);
		snprintf(portstr, sizeof(portstr), "%u", (unsigned)port);
		if (strstr(msg, "127.0.0.1") == NULL || strstr(msg, portstr) == NULL)
			fail_msg("message does not name host and port %s: '%s'", portstr, msg);
		pc_err_destroy(&e);
	}
}

static void test_listen_in_use(void **state)
{
	char msg[1024], portstr[16];
	struct pc_err e;
	int lfd, ret;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	ret = listen_on("127.0.0.1", net_local_port(lfd), 0, &e);
	assert_int_equal(ret, -EADDRINUSE);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -EADDRINUSE);
	snprintf(portstr, sizeof(portstr), "%u", (unsigned)net_local_port(lfd));
	assert_non_null(strstr(msg, portstr));
	close(lfd);
	pc_err_destroy(&e);
}

static void test_read_timeout(void **state)
{
	struct pair p;
	size_t got = 99;
	char buf[4];

	(void)state;
	pair_open(&p, "127.0.0.1");
	assert_int_equal(net_set_timeout(p.afd, 1), 0);
	/* The peer never sends: the read can only time out. */
	assert_int_equal(platform_read_full(p.afd, buf, sizeof(buf), &got), -PC_E_TIMEOUT);
	assert_int_equal(got, 0);
	/* 0 clears the timeout; data still arrives afterwards. */
	assert_int_equal(net_set_timeout(p.afd, 0), 0);
	assert_int_equal(platform_write_full(p.cfd, "abcd", 4), 0);
	assert_int_equal(platform_read_full(p.afd, buf, 4, NULL), 0);
	assert_memory_equal(buf, "abcd", 4);
	pair_close(&p);
}

/* ---- net_sendv_full ------------------------------------------------------ */

#define SENDV_TOTAL ((3u << 20) + 1234u)

struct drain {
	int fd;
	uint8_t *buf;         /* SENDV_TOTAL bytes; read after join */
	int ret;              /* written by the thread, read after join */
};

static void *drain_main(void *arg)
{
	struct drain *d = arg;

	d->ret = platform_read_full(d->fd, d->buf, SENDV_TOTAL, NULL);
	return NULL;
}

static void test_sendv_full(void **state)
{
	/* Pieces of several sizes, including empty ones; more than the socket
	 * buffers hold, so sendmsg returns short counts on the way. */
	static const size_t sizes[] = { 1, 0, 4096, 1u << 20, 7, 0, (2u << 20) - 4096 - 8 + 1234, 0 };
	struct iovec iov[sizeof(sizes) / sizeof(sizes[0])];
	size_t total = 0, off = 0;
	struct drain d;
	struct pair p;
	pthread_t th;
	uint8_t *src;
	char extra;

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		total += sizes[i];
	assert_int_equal(total, SENDV_TOTAL);
	src = malloc(SENDV_TOTAL);
	d.buf = malloc(SENDV_TOTAL);
	assert_non_null(src);
	assert_non_null(d.buf);
	for (size_t i = 0; i < SENDV_TOTAL; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		iov[i].iov_base = src + off;
		iov[i].iov_len = sizes[i];
		off += sizes[i];
	}

	pair_open(&p, "127.0.0.1");
	d.fd = p.afd;
	d.ret = 99;
	assert_int_equal(pthread_create(&th, NULL, drain_main, &d), 0);
	assert_int_equal(net_sendv_full(p.cfd, iov, (int)(sizeof(sizes) / sizeof(sizes[0]))), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(d.ret, 0);
	assert_memory_equal(d.buf, src, SENDV_TOTAL);
	/* Not a byte more. */
	assert_int_equal(shutdown(p.cfd, SHUT_WR), 0);
	assert_int_equal(read(p.afd, &extra, 1), 0);

	/* Zero iovecs: nothing to do. */
	assert_int_equal(net_sendv_full(p.cfd, iov, 0), 0);
	pair_close(&p);
	free(src);
	free(d.buf);
}

/* A send to a peer that has gone fails with an errno, without SIGPIPE. */
static void test_sendv_peer_gone(void **state)
{
	static uint8_t chunk[64 << 10];
	struct iovec iov;
	struct pair p;
	int ret = 0;

	(void)state;
	pair_open(&p, "127.0.0.1");
	close(p.afd);
	p.afd = -1;
	/* The first sends may still succeed; a reset soon follows. */
	for (int i = 0; i < 1000 && ret == 0; i++) {
		iov.iov_base = chunk;
		iov.iov_len = sizeof(chunk);
		ret = net_sendv_full(p.cfd, &iov, 1);
	}
	assert_true(ret == -EPIPE || ret == -ECONNRESET);
	close(p.cfd);
	close(p.lfd);
}

/* Open fds of this process (/proc/self/fd, with the one that reads it). */
/* Two fds in one message, as `pcopy --attach` passes sshd's pipes: both
 * arrive in order, as working copies, with the text; a message with one fd
 * when two are expected is -EPROTO and leaves nothing open; more than
 * NET_MAX_PASS or none is -EINVAL. */
static void test_pass_two_fds(void **state)
{
	int sp[2], a[2], b[2], fds[2] = { -1, -1 }, three[3] = { 0, 1, 2 };
	char who[NET_MAX_ADDR], c = 0;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	assert_int_equal(pipe(a), 0);
	assert_int_equal(pipe(b), 0);
	int give[2] = { a[0], b[1] };
	assert_int_equal(net_send_fds(sp[0], give, 2, "stream 3"), 0);
	assert_int_equal(net_recv_fds(sp[1], fds, 2, who, sizeof(who)), 0);
	assert_string_equal(who, "stream 3");
	for (int i = 0; i < 2; i++)
		assert_int_equal(fcntl(fds[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(write(a[1], "r", 1), 1);
	assert_int_equal(read(fds[0], &c, 1), 1);
	assert_int_equal(c, 'r');
	assert_int_equal(write(fds[1], "w", 1), 1);
	assert_int_equal(read(b[0], &c, 1), 1);
	assert_int_equal(c, 'w');
	close(fds[0]);
	close(fds[1]);

	/* One fd where two are expected. */
	assert_int_equal(net_send_fds(sp[0], give, 1, "one"), 0);
	unsigned before = testutil_count_fds();
	fds[0] = fds[1] = -1;
	assert_int_equal(net_recv_fds(sp[1], fds, 2, who, sizeof(who)), -EPROTO);
	assert_int_equal(testutil_count_fds(), before);
	/* Two where one is expected: neither kept either. */
	assert_int_equal(net_send_fds(sp[0], give, 2, "two"), 0);
	assert_int_equal(net_recv_fds(sp[1], fds, 1, who, sizeof(who)), -EPROTO);
	assert_int_equal(testutil_count_fds(), before);

	assert_int_equal(net_send_fds(sp[0], three, 3, "x"), -EINVAL);
	assert_int_equal(net_send_fds(sp[0], three, 0, "x"), -EINVAL);
	assert_int_equal(net_recv_fds(sp[1], fds, 3, who, sizeof(who)), -EINVAL);
	assert_int_equal(net_recv_fds(sp[1], fds, 2, who, sizeof(who)), -EAGAIN);
	close(sp[0]);
	close(sp[1]);
	for (int i = 0; i < 2; i++) {
		close(a[i]);
		close(b[i]);
	}
}

/* Waits for POLLOUT on fd (5 s at most) and returns net_connect_done. */
static int connect_settle(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	assert_int_equal(poll(&p, 1, 5000), 1);
	return net_connect_done(fd);
}

/* Connects started together, without waiting: to a listener they all
 * connect (0, blocking again, and they carry data); to a closed port each
 * is refused, at once (a negative fds[i]) or when it settles. */
static void test_connect_start(void **state)
{
	enum { N = 3 };
	int fds[N], lfd;
	struct pc_err e;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("127.0.0.1", 0, 0, &e);
	assert_true(lfd >= 0);
	assert_int_equal(net_connect_start("127.0.0.1", net_local_port(lfd), 4, 0, fds, N, &e),
			 0);
	for (int i = 0; i < N; i++) {
		char c = 0;
		assert_true(fds[i] >= 0);
		assert_int_equal(fcntl(fds[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
		assert_int_equal(connect_settle(fds[i]), 0);
		assert_int_equal(fcntl(fds[i], F_GETFL) & O_NONBLOCK, 0);
		int afd = net_accept(lfd, 5000, NULL, 0);
		assert_true(afd >= 0);
		assert_int_equal(send(fds[i], "k", 1, MSG_NOSIGNAL), 1);
		assert_int_equal(recv(afd, &c, 1, 0), 1);
		assert_int_equal(c, 'k');
		close(afd);
		close(fds[i]);
	}
	close(lfd);

	uint16_t port = closed_port();
	assert_int_equal(net_connect_start("127.0.0.1", port, 4, 0, fds, N, &e), 0);
	for (int i = 0; i < N; i++) {
		if (fds[i] < 0) {
			assert_int_equal(fds[i], -ECONNREFUSED);
			continue;
		}
		assert_int_equal(connect_settle(fds[i]), -ECONNREFUSED);
		close(fds[i]);
	}
	pc_err_destroy(&e);
}

/* ---- IPv6 ----------------------------------------------------------------- */

/* Passing a socket on: the fd arrives (a working copy), with its text;
 * nothing waiting is -EAGAIN; a message without an fd, or with two, is
 * -EPROTO and leaves nothing open; the sender gone is -PC_E_NET. */
static void test_pass_fd(void **state)
{
	int sp[2], pp[2], fd;
	char who[NET_MAX_ADDR], c = 0;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	assert_int_equal(pipe(pp), 0);
	assert_int_equal(net_recv_fd(sp[1], who, sizeof(who)), -EAGAIN);
	assert_int_equal(net_send_fd(sp[0], pp[1], "192.0.2.7:4242"), 0);
	fd = net_recv_fd(sp[1], who, sizeof(who));
	assert_true(fd >= 0);
	assert_string_equal(who, "192.0.2.7:4242");
	assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(read(pp[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	close(fd);
	/* An empty text is sent as "?": a message is never empty. */
	assert_int_equal(net_send_fd(sp[0], pp[1], ""), 0);
	fd = net_recv_fd(sp[1], who, sizeof(who));
	assert_true(fd >= 0);
	assert_string_equal(who, "?");
	close(fd);
	/* No fd. */
	assert_int_equal(send(sp[0], "hello", 5, 0), 5);
	assert_int_equal(net_recv_fd(sp[1], who, sizeof(who)), -EPROTO);
	/* Two fds: neither is kept. */
	{
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(2 * sizeof(int))];
		} u;
		int two[2] = { pp[0], pp[1] };
		char one = '2';
		struct iovec iov = { .iov_base = &one, .iov_len = 1 };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				    .msg_controllen = sizeof(u.buf) };
		memset(&u, 0, sizeof(u));
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(two));
		memcpy(CMSG_DATA(h), two, sizeof(two));
		assert_int_equal(sendmsg(sp[0], &m, 0), 1);
		int before = dup(0);
		close(before);
		assert_int_equal(net_recv_fd(sp[1], who, sizeof(who)), -EPROTO);
		int after = dup(0);
		assert_int_equal(after, before); /* the lowest free fd is free again */
		close(after);
	}
	close(sp[0]);
	assert_int_equal(net_recv_fd(sp[1], who, sizeof(who)), -PC_E_NET);
	close(sp[1]);
	close(pp[0]);
	close(pp[1]);
}

static void test_ipv6_loopback(void **state)
{
	char want[NET_MAX_ADDR + 8], host[NET_MAX_ADDR], msg[1024];
	struct pc_err e;
	struct pair p;
	int lfd;

	(void)state;
	pc_err_init(&e);
	lfd = listen_on("::1", 0, 0, &e);
	if (lfd < 0) {
		pc_err_get(&e, msg, sizeof(msg));
		pc_err_destroy(&e);
		testutil_skip("this machine cannot listen on ::1 (%s); enable IPv6 on loopback "
			      "(sysctl net.ipv6.conf.lo.disable_ipv6=0) to run it", msg);
	}
	close(lfd);
	pc_err_destroy(&e);

	pair_open(&p, "::1");
	snprintf(want, sizeof(want), "[::1]:%u", (unsigned)net_local_port(p.cfd));
	assert_string_equal(p.peer, want);
	assert_int_equal(net_local_host(p.cfd, host, sizeof(host)), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(net_peer_host(p.afd, host, sizeof(host)), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(platform_write_full(p.cfd, "six", 3), 0);
	assert_int_equal(platform_read_full(p.afd, msg, 3, NULL), 0);
	assert_memory_equal(msg, "six", 3);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listen_connect_accept),
		cmocka_unit_test(test_connect_no_timeout),
		cmocka_unit_test(test_connect_by_name),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_accept_timeout),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_listen_in_use),
		cmocka_unit_test(test_read_timeout),
		cmocka_unit_test(test_sendv_full),
		cmocka_unit_test(test_sendv_peer_gone),
		cmocka_unit_test(test_ipv6_loopback),
		cmocka_unit_test(test_pass_fd),
		cmocka_unit_test(test_pass_two_fds),
		cmocka_unit_test(test_connect_start),
		cmocka_unit_test(test_connect_interrupted),
		cmocka_unit_test(test_connect_watch),
	};

	g_sigfd = platform_signals_setup();
	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
