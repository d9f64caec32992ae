// SPDX-License-Identifier: Apache-2.0
/* chan: the functions common to every backend (argument checks, abort,
 * timeout, free) and the plain backend, which moves the bytes in clear.
 *
 * Plain over a socket: blocking sendmsg/read, SO_RCVTIMEO/SO_SNDTIMEO for
 * the timeout (EAGAIN is then -PC_E_TIMEOUT), shutdown(SHUT_RDWR) to wake a
 * blocked call. Plain over a pipe (the control channel of a process we
 * started): the fd is left as it is (it may be shared), every wait is a
 * poll on the fd and on an eventfd that chan_abort signals, and a write is
 * at most PIPE_BUF bytes after POLLOUT, which never blocks on Linux (POLLOUT
 * means a free pipe buffer, and PIPE_BUF bytes fit in one). Plain over
 * pipes of its own (chan_pipes_new: a data stream through ssh): the fds are
 * made non-blocking, and a write takes as much as the pipe does. */
#include "transport/chan_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/net.h"
#include "sys/platform.h"

/* Vectors handed to one sendmsg/writev: a window of the caller's array,
 * copied so that it can be advanced without touching the caller's. */
#define CHAN_IOV_WINDOW 64

static bool chan_fd_is_sock(int fd)
{
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

void chan_init(struct chan *c, const struct chan_ops *ops, int rfd, int wfd, const char *describe)
{
	c->ops = ops;
	c->rfd = rfd;
	c->wfd = wfd;
	c->rsock = chan_fd_is_sock(rfd);
	c->wsock = wfd == rfd ? c->rsock : chan_fd_is_sock(wfd);
	c->timeout_s = 0;
	atomic_init(&c->aborted, false);
	snprintf(c->describe, sizeof(c->describe), "%s", describe);
	c->error[0] = '\0';
}

/* ---- the common entry points ------------------------------------------- */

/* A failure seen after chan_abort is the abort's doing: say so. */
static int chan_result(struct chan *c, int r)
{
	if (r < 0 && atomic_load(&c->aborted))
		return -PC_E_ABORTED;
	/* With a timeout, the kernel ends a connection whose data (or, with a
	 * peer that stopped reading, whose window probes) went unanswered
	 * that long (TCP_USER_TIMEOUT): the peer stalled, as when a read
	 * waits past SO_RCVTIMEO. */
	if (r == -ETIMEDOUT && c->timeout_s > 0)
		return -PC_E_TIMEOUT;
	return r;
}

int chan_send(struct chan *c, const struct iovec *iov, int n)
{
	if (c == NULL || n < 0 || (n > 0 && iov == NULL))
		return -EINVAL;
	if (atomic_load(&c->aborted))
		return -PC_E_ABORTED;
	if (n == 0)
		return 0;
	return chan_result(c, c->ops->send(c, iov, n));
}

ssize_t chan_recv_some(struct chan *c, void *buf, size_t len)
{
	ssize_t r;

	if (c == NULL || buf == NULL || len == 0)
		return -EINVAL;
	if (atomic_load(&c->aborted))
		return -PC_E_ABORTED;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	r = c->ops->recv_some(c, buf, len);
	if (r <= 0 && atomic_load(&c->aborted))
		return -PC_E_ABORTED;  /* also the EOF that shutdown makes */
	return r < 0 ? chan_result(c, (int)r) : r;
}

int chan_recv(struct chan *c, void *buf, size_t len, size_t *got)
{
	uint8_t *p = buf;
	size_t done = 0;
	int ret = 0;

	if (c == NULL || (buf == NULL && len > 0)) {
		ret = -EINVAL;
		goto out;
	}
	while (done < len) {
		ssize_t r = chan_recv_some(c, p + done, len - done);

		if (r < 0) {
			ret = (int)r;
			goto out;
		}
		if (r == 0) {
			ret = -PC_E_NET;  /* the peer ended the stream; got says where */
			goto out;
		}
		done += (size_t)r;
	}
out:
	if (got != NULL)
		*got = done;
	return ret;
}

bool chan_pending(struct chan *c)
{
	if (c == NULL || c->ops->pending == NULL)
		return false;
	return c->ops->pending(c);
}

int chan_rfd(const struct chan *c)
{
	return c != NULL ? c->rfd : -1;
}

int chan_wfd(const struct chan *c)
{
	return c != NULL ? c->wfd : -1;
}

int chan_set_timeout(struct chan *c, unsigned sec)
{
	int fds[2], r;

	if (c == NULL)
		return -EINVAL;
	fds[0] = c->rsock ? c->rfd : -1;
	fds[1] = c->wsock && c->wfd != c->rfd ? c->wfd : -1;
	for (int i = 0; i < 2; i++) {
		if (fds[i] < 0)
			continue;
		r = net_set_timeout(fds[i], sec);
		/* A socket that is not TCP (a socketpair, sshd's stdio) has no
		 * TCP_USER_TIMEOUT; net_set_timeout set the other two first. */
		if (r < 0 && r != -EOPNOTSUPP && r != -ENOPROTOOPT)
			return r;
	}
	c->timeout_s = sec;
	return 0;
}

void chan_abort(struct chan *c)
{
	if (c == NULL)
		return;
	atomic_store(&c->aborted, true);
	/* shutdown wakes every call blocked on the socket, in this process
	 * and in any that shares it; the fds stay open until chan_free. An
	 * ENOTSOCK (a pipe) or ENOTCONN (never connected) is not a failure:
	 * the flag and wake() do the rest. */
	if (c->rsock)
		(void)shutdown(c->rfd, SHUT_RDWR);
	if (c->wsock && c->wfd != c->rfd && c->wfd >= 0)
		(void)shutdown(c->wfd, SHUT_RDWR);
	if (c->ops->wake != NULL)
		c->ops->wake(c);
}

int chan_close_send(struct chan *c)
{
	if (c == NULL)
		return -EINVAL;
	if (atomic_load(&c->aborted))
		return -PC_E_ABORTED;
	return chan_result(c, c->ops->close_send(c));
}

bool chan_encrypted(const struct chan *c)
{
	return c != NULL && strcmp(c->describe, "clear") != 0;
}

const char *chan_describe(const struct chan *c)
{
	return c != NULL ? c->describe : "clear";
}

const char *chan_error(const struct chan *c)
{
	return c != NULL ? c->error : "";
}

void chan_free(struct chan *c)
{
	int rfd, wfd;

	if (c == NULL)
		return;
	rfd = c->rfd;
	wfd = c->wfd;
	c->ops->destroy(c);  /* frees c */
	if (rfd >= 0)
		close(rfd);
	if (wfd >= 0 && wfd != rfd)
		close(wfd);
}

/* ---- the plain backend --------------------------------------------------- */

struct chan_plain {
	struct chan c;  /* first: the common part */
	int efd;        /* eventfd chan_abort signals; -1 when both fds are sockets */
	bool bulk;      /* pipes of our own, non-blocking: writes are not cut to PIPE_BUF */
	int hold_fd;    /* closed with the chan (chan_pipes_new); -1: none */
};

/* Waits until fd is ready for events (POLLIN or POLLOUT), the chan is
 * aborted, or its timeout passes. Returns 0 (ready, or hung up: the read or
 * write then says what happened), -PC_E_ABORTED, -PC_E_TIMEOUT or -errno. */
static int plain_wait(struct chan_plain *pc, int fd, short events)
{
	struct pollfd p[2] = {
		{ .fd = fd, .events = events },
		{ .fd = pc->efd, .events = POLLIN },
	};
	int timeout_ms = pc->c.timeout_s > 0 ? (int)(pc->c.timeout_s * 1000u) : -1;
	int r;

	if (pc->c.timeout_s > INT_MAX / 1000)
		timeout_ms = INT_MAX;
	do
		r = poll(p, 2, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (atomic_load(&pc->c.aborted) || (p[1].revents & POLLIN))
		return -PC_E_ABORTED;
	if (r == 0)
		return -PC_E_TIMEOUT;
	return 0;
}

/* Drops the first w bytes from the window iov[0..*n-1] (advancing *iov). */
static void plain_advance(struct iovec **iov, int *n, size_t w)
{
	while (*n > 0 && w >= (*iov)->iov_len) {
		w -= (*iov)->iov_len;
		(*iov)++;
		(*n)--;
	}
	if (*n > 0) {
		(*iov)->iov_base = (uint8_t *)(*iov)->iov_base + w;
		(*iov)->iov_len -= w;
	}
}

/* One write to a pipe of at most PIPE_BUF bytes from the window, after
 * POLLOUT. Returns the bytes written or a negative code. */
static ssize_t plain_write_pipe(struct chan_plain *pc, const struct iovec *iov, int n)
{
	struct iovec part[CHAN_IOV_WINDOW];
	size_t room = pc->bulk ? SIZE_MAX : PIPE_BUF;
	int k = 0, r;
	ssize_t w;

	r = plain_wait(pc, pc->c.wfd, POLLOUT);
	if (r < 0)
		return r;
	for (; k < n && room > 0; k++) {
		part[k] = iov[k];
		if (part[k].iov_len > room)
			part[k].iov_len = room;
		room -= part[k].iov_len;
	}
	do
		w = writev(pc->c.wfd, part, k);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return errno == EAGAIN ? 0 : -errno;  /* EAGAIN: a non-blocking fd, poll again */
	return w;
}

/* Sends every byte of the window iov[0..n-1] (modified). */
static int plain_send_window(struct chan_plain *pc, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w;

		if (iov->iov_len == 0) {
			iov++;
			n--;
			continue;
		}
		if (pc->c.wsock) {
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };

			w = sendmsg(pc->c.wfd, &mh, MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return -PC_E_TIMEOUT;  /* SO_SNDTIMEO passed */
				return -errno;
			}
		} else {
			w = plain_write_pipe(pc, iov, n);
			if (w < 0)
				return (int)w;
		}
		plain_advance(&iov, &n, (size_t)w);
	}
	return 0;
}

static int plain_send(struct chan *c, const struct iovec *iov, int n)
{
	struct chan_plain *pc = (struct chan_plain *)c;
	struct iovec win[CHAN_IOV_WINDOW];

	for (int i = 0; i < n; i += CHAN_IOV_WINDOW) {
		int k = n - i < CHAN_IOV_WINDOW ? n - i : CHAN_IOV_WINDOW;
		int r;

		memcpy(win, iov + i, (size_t)k * sizeof(*win));
		r = plain_send_window(pc, win, k);
		if (r < 0)
			return r;
	}
	return 0;
}

static ssize_t plain_recv_some(struct chan *c, void *buf, size_t len)
{
	struct chan_plain *pc = (struct chan_plain *)c;
	ssize_t r;

	for (;;) {
		if (!c->rsock) {
			int w = plain_wait(pc, c->rfd, POLLIN);

			if (w < 0)
				return w;
		}
		r = read(c->rfd, buf, len);
		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (c->rsock)
				return -PC_E_TIMEOUT;  /* SO_RCVTIMEO passed */
			continue;  /* a non-blocking pipe that poll woke too early */
		}
		return -errno;
	}
}

static int plain_close_send(struct chan *c)
{
	if (c->wsock)
		return shutdown(c->wfd, SHUT_WR) == 0 ? 0 : -errno;
	if (c->wfd >= 0 && c->wfd != c->rfd) {
		/* A pipe ends by closing it; chan_free then skips it. */
		int fd = c->wfd;

		c->wfd = -1;
		return close(fd) == 0 ? 0 : -errno;
	}
	return 0;
}

static void plain_wake(struct chan *c)
{
	struct chan_plain *pc = (struct chan_plain *)c;

	if (pc->efd >= 0)
		(void)platform_event_signal(pc->efd);
}

static void plain_destroy(struct chan *c)
{
	struct chan_plain *pc = (struct chan_plain *)c;

	if (pc->efd >= 0)
		close(pc->efd);
	if (pc->hold_fd >= 0)
		close(pc->hold_fd);
	free(pc);
}

static const struct chan_ops chan_plain_ops = {
	.send = plain_send,
	.recv_some = plain_recv_some,
	.pending = NULL,
	.close_send = plain_close_send,
	.destroy = plain_destroy,
	.wake = plain_wake,
};

struct chan *chan_plain_new(int rfd, int wfd)
{
	struct chan_plain *pc = calloc(1, sizeof(*pc));

	if (pc == NULL)
		return NULL;
	chan_init(&pc->c, &chan_plain_ops, rfd, wfd, "clear");
	pc->efd = -1;
	pc->hold_fd = -1;
	if (!pc->c.rsock || !pc->c.wsock) {
		int efd = platform_event_new();

		if (efd < 0) {
			free(pc);
			errno = -efd;
			return NULL;
		}
		pc->efd = efd;
	}
	return &pc->c;
}

struct chan *chan_pipes_new(int rfd, int wfd, int hold_fd)
{
	struct chan_plain *pc;
	int fl;

	for (int i = 0; i < 2; i++) {
		int fd = i == 0 ? rfd : wfd;
		if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
			return NULL;
	}
	pc = (struct chan_plain *)chan_plain_new(rfd, wfd);
	if (pc == NULL)
		return NULL;
	pc->bulk = true;
	pc->hold_fd = hold_fd;
	return &pc->c;
}
