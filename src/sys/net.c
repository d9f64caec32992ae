/* SPDX-License-Identifier: Apache-2.0 */
/* net: TCP sockets for the control and data channels. */
#include "sys/net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sys/platform.h"
#include "sys/sync.h"

void net_set_window(int fd, uint32_t window)
{
	int v = (int)window;

	if (window == 0)
		return;
	/* Failure here is not fatal: the kernel clamps silently anyway, and
	 * net_granted_window() reports what we really got. */
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
}

uint32_t net_granted_window(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) != 0 || v <= 0)
		return 0;
	/* Linux doubles the value to account for its bookkeeping overhead. */
	return (uint32_t)v / 2;
}

/* A name lookup that runs getaddrinfo on a thread of its own, so that
 * its caller can wait for it and for a stop signal at once: getaddrinfo
 * itself cannot be interrupted (glibc's resolver retries its poll on
 * EINTR), and a dead DNS server keeps it for up to attempts x timeout x
 * servers. Shared by the caller and the thread; the last to let go frees it.
 * A caller that was interrupted lets go at once and the thread finishes
 * alone. */
struct net_lookup {
	atomic_int refs;          /* 2 at first: the caller and the thread */
	int efd;                  /* eventfd: the thread is done */
	char host[NI_MAXHOST];    /* immutable once the thread runs */
	char service[8];          /* immutable */
	struct addrinfo hints;    /* immutable */
	int rc;                   /* thread, then the caller once done is set */
	struct addrinfo *res;     /* likewise; owned by the lookup until taken */
	atomic_bool done;         /* release by the thread: rc and res are final */
};

static void net_lookup_put(struct net_lookup *l)
{
	if (atomic_fetch_sub(&l->refs, 1) != 1)
		return;
	if (l->res != NULL)
		freeaddrinfo(l->res);
	close(l->efd);
	free(l);
}

static void *net_lookup_run(void *arg)
{
	struct net_lookup *l = arg;

	l->rc = getaddrinfo(l->host, l->service, &l->hints, &l->res);
	atomic_store_explicit(&l->done, true, memory_order_release);
	(void)platform_event_signal(l->efd); /* cannot fail on a live eventfd */
	net_lookup_put(l);
	return NULL;
}

/* Starts the lookup of host on a detached thread. Returns it, or NULL
 * (out of memory or threads: *err says which, as -errno). */
static struct net_lookup *net_lookup_start(const char *host, const char *service,
					   const struct addrinfo *hints, int *err)
{
	struct net_lookup *l = calloc(1, sizeof(*l));
	pthread_attr_t attr;
	pthread_t tid;
	int rc;

	*err = -ENOMEM;
	if (l == NULL)
		return NULL;
	atomic_init(&l->refs, 2);
	atomic_init(&l->done, false);
	snprintf(l->host, sizeof(l->host), "%s", host);
	snprintf(l->service, sizeof(l->service), "%s", service);
	l->hints = *hints;
	l->efd = platform_event_new();
	if (l->efd < 0) {
		*err = l->efd;
		free(l);
		return NULL;
	}
	rc = pthread_attr_init(&attr);
	if (rc == 0) {
		rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (rc == 0)
			rc = pthread_create(&tid, &attr, net_lookup_run, l);
		/* Cannot fail for an initialised attr short of a bug. */
		sync_check("pthread_attr_destroy", pthread_attr_destroy(&attr));
	}
	if (rc != 0) {
		*err = -rc;
		close(l->efd);
		free(l);
		return NULL;
	}
	return l;
}

/* getaddrinfo that a stop signal interrupts (see struct net_lookup). A
 * numeric address needs no lookup and no thread. Returns 0 (*res set) or
 * the getaddrinfo error in *rc (-PC_E_NET), -PC_E_INTERRUPTED, or -errno. */
static int net_getaddrinfo(const char *host, const char *service,
			   const struct addrinfo *hints, struct addrinfo **res, int *rc)
{
	struct addrinfo numeric = *hints;
	struct net_lookup *l;
	int ret;

	numeric.ai_flags |= AI_NUMERICHOST;
	*rc = getaddrinfo(host, service, &numeric, res);
	if (host == NULL || *rc != EAI_NONAME)
		return *rc == 0 ? 0 : -PC_E_NET;
	l = net_lookup_start(host, service, hints, &ret);
	if (l == NULL)
		return ret;
	/* The thread sets done before it signals efd, so once efd is
	 * readable done is set. A stop signal already pending wins even over
	 * a lookup that has finished. */
	do {
		struct pollfd p = { .fd = l->efd, .events = POLLIN };
		ret = platform_poll(&p, 1, -1);
		if (ret < 0) {
			net_lookup_put(l);
			return ret;
		}
	} while (!atomic_load_explicit(&l->done, memory_order_acquire));
	*rc = l->rc;
	*res = l->res;
	l->res = NULL;
	net_lookup_put(l);
	return *rc == 0 ? 0 : -PC_E_NET;
}

static int net_resolve(const char *host, uint16_t port, int family, bool passive,
		       struct addrinfo **res, struct pc_err *e)
{
	struct addrinfo hints;
	char service[8];
	int rc = 0, ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = family == 4 ? AF_INET : family == 6 ? AF_INET6 : AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	snprintf(service, sizeof(service), "%u", (unsigned)port);
	if (host != NULL && host[0] == '\0')
		host = NULL;
	ret = net_getaddrinfo(host, service, &hints, res, &rc);
	if (ret == -PC_E_INTERRUPTED)
		return pc_err_set(e, ret, "interrupted while resolving host '%s'", host);
	if (ret == -PC_E_NET)
		return pc_err_set(e, ret, "cannot resolve host '%s': %s", host ? host : "*",
				  gai_strerror(rc));
	if (ret < 0)
		return pc_err_set(e, ret, "cannot resolve host '%s': %s", host ? host : "*",
				  pc_strerror(ret));
	return 0;
}

/* Binds and listens on one address at one port. Returns the fd or -errno. */
static int net_listen_one(const struct addrinfo *ai, uint16_t port, uint32_t window)
{
	struct sockaddr_storage ss;
	int one = 1, fd, err;

	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)&ss)->sin_port = htons(port);
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	net_set_window(fd, window);
	if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
		return fd;
	err = errno;
	close(fd);
	return -err;
}

static int net_listen_host(const char *host, uint16_t lo, uint16_t hi, int family,
			   uint32_t window, struct pc_err *e);

int net_listen(const char *host, uint16_t lo, uint16_t hi, int family, uint32_t window,
	       struct pc_err *e)
{
	/* "Every address": the IPv6 wildcard serves both families on a dual
	 * stack host; without IPv6, fall back to the IPv4 wildcard. */
	if ((host == NULL || *host == '\0') && family == 0) {
		struct pc_err e6;
		pc_err_init(&e6);
		int fd = net_listen_host("::", lo, hi, 6, window, &e6);
		pc_err_destroy(&e6);
		if (fd >= 0 || fd == -EADDRINUSE)
			return fd >= 0 ? fd : net_listen_host("::", lo, hi, 6, window, e);
		return net_listen_host("0.0.0.0", lo, hi, 4, window, e);
	}
	return net_listen_host(host, lo, hi, family, window, e);
}

static int net_listen_host(const char *host, uint16_t lo, uint16_t hi, int family,
			   uint32_t window, struct pc_err *e)
{
	struct addrinfo *res = NULL;
	int fd = -EADDRNOTAVAIL;
	unsigned top = lo == 0 ? 0 : hi < lo ? lo : hi;

	int ret = net_resolve(host, 0, family, true, &res, e);
	if (ret < 0)
		return ret;
	/* With no host, getaddrinfo lists the IPv6 wildcard first on a dual
	 * stack system: one socket then serves both families. */
	for (unsigned port = lo; fd < 0 && port <= top; port++) {
		for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
			fd = net_listen_one(ai, (uint16_t)port, window);
			if (fd >= 0 || fd != -EADDRINUSE)
				break;
		}
		if (fd < 0 && fd != -EADDRINUSE)
			break;
	}
	freeaddrinfo(res);
	if (fd == -EADDRINUSE && lo != 0)
		return pc_err_set(e, fd, "every data port from %u to %u is in use on %s; try "
				  "another -Z range", (unsigned)lo, top, host && *host ? host : "this host");
	if (fd < 0)
		return pc_err_set(e, fd, "cannot listen on %s port %u: %s", host && *host ? host : "*",
				  (unsigned)lo, strerror(-fd));
	return fd;
}

/* connect() with a deadline (timeout_ms 0: none but the kernel's):
 * non-blocking connect, a wait that a stop signal also ends, then back to
 * blocking. Returns 0, -PC_E_INTERRUPTED or -errno. */
static int net_connect_one(int fd, const struct addrinfo *ai, unsigned timeout_ms, int watch)
{
	int flags = fcntl(fd, F_GETFL), soerr = 0;
	socklen_t len = sizeof(soerr);
	/* A watch with no events reports only its hang-up and errors: a peer
	 * that merely stopped sending (a half close) is still there. */
	struct pollfd p[2] = { { .fd = fd, .events = POLLOUT },
			       { .fd = watch, .events = 0 } };

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		if (errno != EINPROGRESS)
			return -errno;
		uint64_t deadline = platform_now_ns() + (uint64_t)timeout_ms * 1000000u;
		for (;;) {
			int left = -1;
			if (timeout_ms != 0) {
				uint64_t now = platform_now_ns();
				if (now >= deadline)
					return -ETIMEDOUT;
				left = (int)((deadline - now + 999999u) / 1000000u);
			}
			int n = platform_poll(p, watch >= 0 ? 2 : 1, left);
			if (n < 0)
				return n;
			if (p[0].revents != 0)
				break;
			if (p[1].revents & (POLLHUP | POLLERR))
				return -ECANCELED; /* the watch hung up first */
			p[1].fd = -1; /* not an open fd (POLLNVAL): no watch */
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
			return -errno;
		if (soerr != 0)
			return -soerr;
	}
	return fcntl(fd, F_SETFL, flags) == 0 ? 0 : -errno;
}

int net_connect(const char *host, uint16_t port, int family, uint32_t window,
		unsigned timeout_s, struct pc_err *e)
{
	return net_connect_watch(host, port, family, window, timeout_s * 1000u, -1, e);
}

int net_connect_ms(const char *host, uint16_t port, int family, uint32_t window,
		   unsigned timeout_ms, struct pc_err *e)
{
	return net_connect_watch(host, port, family, window, timeout_ms, -1, e);
}

int net_connect_watch(const char *host, uint16_t port, int family, uint32_t window,
		      unsigned timeout_ms, int watch, struct pc_err *e)
{
	struct addrinfo *res = NULL, *ai;
	int fd = -1, err = ECONNREFUSED;

	int ret = net_resolve(host, port, family, false, &res, e);
	if (ret < 0)
		return ret;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		net_set_window(fd, window);
		ret = net_connect_one(fd, ai, timeout_ms, watch);
		if (ret == 0)
			break;
		close(fd);
		fd = -1;
		if (ret == -PC_E_INTERRUPTED) {
			freeaddrinfo(res);
			return pc_err_set(e, ret, "interrupted while connecting to %s port %u",
					  host, (unsigned)port);
		}
		if (ret == -ECANCELED) {
			freeaddrinfo(res);
			return pc_err_set(e, ret, "gave up connecting to %s port %u: the one "
					  "waiting for the connection went away", host,
					  (unsigned)port);
		}
		err = -ret;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return pc_err_set(e, -err, "cannot connect to %s port %u: %s", host,
				  (unsigned)port, strerror(err));
	return fd;
}

int net_connect_start(const char *host, uint16_t port, int family, uint32_t window, int *fds,
		      unsigned n, struct pc_err *e)
{
	struct addrinfo *res = NULL;
	int ret = net_resolve(host, port, family, false, &res, e);

	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < n; i++)
		fds[i] = -1;
	for (unsigned i = 0; i < n && ret == 0; i++) {
		int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				res->ai_protocol);
		if (fd < 0) {
			ret = pc_err_set(e, -errno, "socket: %s", strerror(errno));
			break;
		}
		net_set_window(fd, window);
		fds[i] = fd;
		if (connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
			fds[i] = -errno; /* refused at once (a local host, say) */
			close(fd);
		}
	}
	freeaddrinfo(res);
	if (ret < 0)
		for (unsigned i = 0; i < n; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	return ret;
}

int net_connect_done(int fd)
{
	int soerr = 0, flags;
	socklen_t len = sizeof(soerr);
	struct sockaddr_storage ss;
	socklen_t slen = sizeof(ss);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
		return -errno;
	if (soerr != 0)
		return -soerr;
	if (getpeername(fd, (struct sockaddr *)&ss, &slen) != 0)
		return -errno; /* ENOTCONN: still under way */
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static void net_fmt_addr(const struct sockaddr_storage *ss, char *host, size_t cap,
			 uint16_t *port)
{
	const void *a;

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
		a = &s6->sin6_addr;
		*port = ntohs(s6->sin6_port);
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
		a = &s4->sin_addr;
		*port = ntohs(s4->sin_port);
	}
	if (inet_ntop(ss->ss_family, a, host, (socklen_t)cap) == NULL)
		snprintf(host, cap, "?");
	/* Show v4-mapped addresses the way users typed them. */
	if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.') != NULL)
		memmove(host, host + 7, strlen(host + 7) + 1);
}

int net_accept(int lfd, int timeout_ms, char *peer, size_t cap)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int n, fd;

	do
		n = poll(&p, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -PC_E_TIMEOUT;
	fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (peer != NULL) {
		char host[NET_MAX_ADDR];
		uint16_t port;
		net_fmt_addr(&ss, host, sizeof(host), &port);
		snprintf(peer, cap, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
	}
	return fd;
}

/* Room for the control message of up to NET_MAX_PASS fds. */
union net_cmsg {
	struct cmsghdr h;
	char buf[CMSG_SPACE(NET_MAX_PASS * sizeof(int))];
};

int net_send_fds(int sock, const int *fds, unsigned n, const char *who)
{
	union net_cmsg u;
	char text[NET_MAX_ADDR];
	int len = snprintf(text, sizeof(text), "%s", who[0] != '\0' ? who : "?");
	struct iovec iov = { .iov_base = text,
			     .iov_len = len < (int)sizeof(text) ? (size_t)len : sizeof(text) - 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = CMSG_SPACE(n * sizeof(int)) };
	struct cmsghdr *c;

	if (n == 0 || n > NET_MAX_PASS)
		return -EINVAL;
	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	if (sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

int net_recv_fds(int sock, int *fds, unsigned n, char *who, size_t cap)
{
	union net_cmsg u;
	char text[NET_MAX_ADDR];
	struct iovec iov = { .iov_base = text, .iov_len = sizeof(text) - 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	unsigned got = 0;
	ssize_t r;

	if (n == 0 || n > NET_MAX_PASS)
		return -EINVAL;
	do
		r = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -PC_E_NET;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (got < n)
				fds[got] = fd;
			else
				close(fd); /* more than asked for: none is kept */
			got++;
		}
	}
	if (got != n || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
		for (unsigned i = 0; i < got && i < n; i++)
			close(fds[i]);
		return -EPROTO;
	}
	text[r] = '\0';
	snprintf(who, cap, "%s", text);
	return 0;
}

int net_send_fd(int sock, int fd, const char *who)
{
	return net_send_fds(sock, &fd, 1, who);
}

int net_recv_fd(int sock, char *who, size_t cap)
{
	int fd = -1;
	int ret = net_recv_fds(sock, &fd, 1, who, cap);

	return ret < 0 ? ret : fd;
}

uint16_t net_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[NET_MAX_ADDR];
	uint16_t port = 0;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return 0;
	net_fmt_addr(&ss, host, sizeof(host), &port);
	return port;
}

static int net_host_of(int fd, bool local, char *host, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint16_t port;
	int rc = local ? getsockname(fd, (struct sockaddr *)&ss, &len)
		       : getpeername(fd, (struct sockaddr *)&ss, &len);

	if (rc != 0)
		return -errno;
	if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	net_fmt_addr(&ss, host, cap, &port);
	return 0;
}

int net_local_host(int fd, char *host, size_t cap)
{
	return net_host_of(fd, true, host, cap);
}

int net_peer_host(int fd, char *host, size_t cap)
{
	return net_host_of(fd, false, host, cap);
}

int net_set_timeout(int fd, unsigned sec)
{
	struct timeval tv = { .tv_sec = (time_t)sec, .tv_usec = 0 };

	unsigned ms = sec * 1000u;

	/* TCP_USER_TIMEOUT: data sent but unacknowledged that long means the
	 * path is dead, even if no reset ever comes. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms)) != 0)
		return -errno;
	return 0;
}

int net_set_nodelay(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0 ? 0 : -errno;
}

int net_set_notsent_lowat(int fd, uint32_t bytes)
{
	int v = (int)bytes;

	return setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)) == 0 ? 0 : -errno;
}

uint64_t net_send_queued(int fd)
{
	int n = 0;

	return ioctl(fd, SIOCOUTQ, &n) == 0 && n > 0 ? (uint64_t)n : 0;
}

uint64_t net_send_unsent(int fd)
{
	int n = 0;

	return ioctl(fd, SIOCOUTQNSD, &n) == 0 && n > 0 ? (uint64_t)n : 0;
}

int net_sendv_full(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return -PC_E_TIMEOUT;
			return -errno;
		}
		size_t left = (size_t)w;
		while (n > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}
