/* SPDX-License-Identifier: Apache-2.0 */
/* net: TCP sockets for the control and data channels. Blocking I/O only;
 * waits with deadlines use poll. Every function returns an fd or 0 on
 * success, or a negative code with the detail (naming host and port) in e.
 * Thread-safe: no shared state. */
#ifndef PCOPY_NET_H
#define PCOPY_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include "sys/err.h"

#define NET_MAX_ADDR 64u  /* "[ipv6]:port" fits */

/* Listens on host at the first free port in [lo, hi] (host NULL or "" =
 * every address; lo == 0: an ephemeral port). family is 0 (any), 4 or 6.
 * If window > 0, SO_RCVBUF and SO_SNDBUF are set before listen() so
 * accepted sockets inherit them and the TCP window scale is negotiated for
 * them. Returns the listening fd (O_CLOEXEC); when every port of the range
 * is taken, -EADDRINUSE with a message that says so. */
int net_listen(const char *host, uint16_t lo, uint16_t hi, int family, uint32_t window,
	       struct pc_err *e);

/* Connects to host:port, trying each address getaddrinfo gives for family
 * (0 any, 4, 6). If window > 0, the buffers are set before connect().
 * Gives up after timeout_s seconds per address (0 = the kernel's default).
 * A stop signal ends the name lookup or the connect with
 * -PC_E_INTERRUPTED (platform_poll), as it ends net_listen's lookup of a
 * host name. Returns the fd. */
int net_connect(const char *host, uint16_t port, int family, uint32_t window,
		unsigned timeout_s, struct pc_err *e);
/* A connect in the background, for a caller that races it against
 * something else (roles/datapath): net_connect_start opens n non-blocking
 * sockets to host:port (the first address getaddrinfo gives for family;
 * window as in net_connect) and starts each one's connect. Returns 0 with
 * fds[0..n-1] set: a socket (the caller's, close-on-exec), or -errno for a
 * connect that failed at once; or a negative code with e set and none left
 * open. Poll each socket for POLLOUT; then net_connect_done says how it
 * went: 0 (connected; the socket is made blocking again), -ENOTCONN (still
 * under way), or the connect's -errno. */
int net_connect_start(const char *host, uint16_t port, int family, uint32_t window, int *fds,
		      unsigned n, struct pc_err *e);
int net_connect_done(int fd);

/* The same with the limit in milliseconds (0 = the kernel's default). */
int net_connect_ms(const char *host, uint16_t port, int family, uint32_t window,
		   unsigned timeout_ms, struct pc_err *e);
/* net_connect_ms that also gives up, with -ECANCELED, once watch (-1: none)
 * hangs up or fails: the one the connection is for went away, and a
 * connect still under way then never reaches the host's server (a socket
 * closed before the handshake completes is refused with a reset). */
int net_connect_watch(const char *host, uint16_t port, int family, uint32_t window,
		      unsigned timeout_ms, int watch, struct pc_err *e);

/* Waits up to timeout_ms (-1 = forever) for a connection on lfd and
 * accepts it. Returns the fd, or -PC_E_TIMEOUT, or -errno. If peer is not
 * NULL it receives "addr:port". */
int net_accept(int lfd, int timeout_ms, char *peer, size_t cap);

/* Sets SO_SNDBUF and SO_RCVBUF to window (0: leaves them alone). On a
 * connected socket this still widens the window (the scale was agreed on
 * from the system's maximum), though not from the first segment on, as
 * net_listen's and net_connect's do. Failures are ignored: the kernel
 * clamps anyway, and net_granted_window says what was granted. */
void net_set_window(int fd, uint32_t window);

/* Passing a connected socket to another process of ours over a Unix
 * socket (SOCK_SEQPACKET, from socketpair): net_send_fd sends fd with the
 * text `who` (naming the peer, at most NET_MAX_ADDR - 1 bytes) as one
 * message, without blocking (-EAGAIN when the receiver's queue is full);
 * the sender still owns fd. net_recv_fd takes one such message without
 * blocking: returns the fd (O_CLOEXEC), now the caller's, with `who` in
 * who[cap]; -EAGAIN if none waits; -PC_E_NET when the sender has closed;
 * -EPROTO for a message without exactly one fd (any fd that came is
 * closed). */
int net_send_fd(int sock, int fd, const char *who);
int net_recv_fd(int sock, char *who, size_t cap);

/* The same for n (1..NET_MAX_PASS) fds in one message: a stream through
 * ssh passes its two pipes. net_recv_fds fills fds[0..n-1] and returns 0,
 * or -EPROTO for a message without exactly n fds (none is kept), or the
 * codes of net_recv_fd. */
#define NET_MAX_PASS 2u
int net_send_fds(int sock, const int *fds, unsigned n, const char *who);
int net_recv_fds(int sock, int *fds, unsigned n, char *who, size_t cap);

/* The local port of a bound socket, or 0 on failure. */
uint16_t net_local_port(int fd);

/* Numeric address of either end of a connected socket ("127.0.0.1",
 * "::1"). Return 0 or -errno. */
int net_local_host(int fd, char *host, size_t cap);
int net_peer_host(int fd, char *host, size_t cap);

/* Sets SO_RCVTIMEO and SO_SNDTIMEO to sec seconds, and TCP_USER_TIMEOUT
 * (how long sent data may stay unacknowledged before the connection is
 * declared dead) likewise; 0 = no timeout. Returns 0 or -errno. */
int net_set_timeout(int fd, unsigned sec);

/* Sets TCP_NODELAY (for the control channel). Returns 0 or -errno. */
int net_set_nodelay(int fd);

/* If window > 0, returns the receive buffer the kernel actually granted
 * (half of what SO_RCVBUF reports, i.e. comparable to window), else 0. */
uint32_t net_granted_window(int fd);

/* Lets send() block while more than bytes are queued and not yet sent
 * (TCP_NOTSENT_LOWAT): data then waits in our pipeline, where it can still
 * be compressed, rather than in the kernel. The window in flight is not
 * limited. Returns 0 or -errno. */
int net_set_notsent_lowat(int fd, uint32_t bytes);

/* Bytes queued in fd's send buffer and not yet acknowledged by the peer
 * (SIOCOUTQ), or 0 if unknown. */
uint64_t net_send_queued(int fd);

/* Of those, the bytes not even sent yet (SIOCOUTQNSD), or 0 if unknown. */
uint64_t net_send_unsent(int fd);

/* Sends every byte of the iovec array (the array is modified), with
 * MSG_NOSIGNAL and EINTR retry. Returns 0, -PC_E_TIMEOUT, or -errno. */
int net_sendv_full(int fd, struct iovec *iov, int n);

#endif
