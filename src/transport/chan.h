/* SPDX-License-Identifier: Apache-2.0 */
/* chan: one byte stream to the peer, in clear or in TLS 1.3: a data
 * connection, or the control channel. The seam between the pipeline and
 * the wire: senders, receivers, the control code and the abort path hold a
 * struct chan and do not know which backend it is (chan_plain_new here,
 * tls_connect/tls_accept in transport/tls.h).
 *
 * Thread-safety: one thread may send (callers serialise their sends) while
 * one other thread receives, as on a socket; chan_abort may be called from
 * any thread at any time. Everything else belongs to the owner.
 *
 * Errors are negative codes: -PC_E_TIMEOUT (no progress within the chan's
 * timeout), -PC_E_NET (the peer closed or reset), -PC_E_INTEGRITY (a TLS
 * record failed its integrity check: altered on the way), -PC_E_PROTO (the
 * peer does not speak what we expect), or another -errno. chan_error says
 * more about the last TLS failure. */
#ifndef PCOPY_CHAN_H
#define PCOPY_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct chan;

/* A channel in clear over rfd and wfd, which may be one socket or two ends
 * of pipes (the control channel to a process we started; a write to a pipe
 * whose reader is gone raises SIGPIPE, which pcopy ignores). Takes ownership
 * of both. NULL with errno set on failure: ENOMEM, or for pipes no eventfd
 * to wake them with (EMFILE); the fds are then still the caller's. Pipes
 * are waited on with poll, so their fds may stay blocking. */
struct chan *chan_plain_new(int rfd, int wfd);

/* A channel in clear over two pipes of its own: a data stream through ssh
 * (the pipes to the ssh child, or those sshd gave the remote command). Both
 * are made non-blocking, so that a send writes as much as the pipe takes
 * at once. hold_fd (-1: none) is closed with the channel: the connection
 * whose close tells the remote `pcopy --attach` the stream is over. Takes
 * ownership of all three on success; NULL with errno set on failure, the
 * fds then still the caller's. */
struct chan *chan_pipes_new(int rfd, int wfd, int hold_fd);

/* Sends every byte of iov[0..n-1]; iov itself is not modified. */
int chan_send(struct chan *c, const struct iovec *iov, int n);

/* Receives exactly len bytes into buf. *got (may be NULL) is set to the
 * bytes that arrived, also on failure: the peer closing at a boundary is
 * -PC_E_NET with *got == 0. */
int chan_recv(struct chan *c, void *buf, size_t len, size_t *got);

/* Receives between 1 and len bytes, as many as are available, blocking
 * until there is at least one. Returns the count, 0 at the end of the
 * stream, or a negative code. */
ssize_t chan_recv_some(struct chan *c, void *buf, size_t len);

/* True when bytes wait inside the chan (TLS keeps decrypted and read-ahead
 * bytes), so that a receive would not block although poll on chan_rfd may
 * show nothing. A receive loop that polls checks this first. Receiving
 * thread only; always false in clear. */
bool chan_pending(struct chan *c);

/* The fd to poll for readability, and the fd that is written (the same
 * socket, or the two pipes); for socket options and SIOCOUTQ. */
int chan_rfd(const struct chan *c);
int chan_wfd(const struct chan *c);

/* From now on a send or receive that makes no progress for sec seconds
 * fails with -PC_E_TIMEOUT; 0: wait forever (the default). On a socket
 * this also sets TCP_USER_TIMEOUT (net_set_timeout). Returns 0 or -errno. */
int chan_set_timeout(struct chan *c, unsigned sec);

/* Makes every send and receive blocked on c return promptly with
 * -PC_E_ABORTED, and every later one fail at once with it. Thread-safe,
 * async, idempotent, does not free: the abort path of a transfer. Sockets
 * are shut down (SHUT_RDWR), pipes are woken through an eventfd. */
void chan_abort(struct chan *c);

/* Ends our sending direction in order (TLS: close_notify, then for sockets
 * shutdown(SHUT_WR)). Returns 0 or a negative code. */
int chan_close_send(struct chan *c);

/* Whether the bytes are encrypted, and how, for -v and the summary:
 * "clear", or "TLS 1.3, TLS_AES_128_GCM_SHA256" (", kernel TLS" when the
 * kernel does the record layer). The string lives as long as c. */
bool chan_encrypted(const struct chan *c);
const char *chan_describe(const struct chan *c);

/* What the TLS library said about the last failure on c ("bad record
 * mac", "alert decrypt error"), or "". Owner only. */
const char *chan_error(const struct chan *c);

/* Closes the fds and frees. NULL is a no-op. */
void chan_free(struct chan *c);

#endif
