/* SPDX-License-Identifier: Apache-2.0 */
/* acceptor: accepts the data connections of a session and authenticates
 * them concurrently, one short-lived thread per connection, so setting up
 * N streams costs one round trip, not N. Strangers, bad proofs, duplicate
 * stream indexes and the slow are dropped and logged; the session goes on
 * waiting for good connections until its deadline. */
#ifndef PCOPY_ACCEPTOR_H
#define PCOPY_ACCEPTOR_H

#include <stdint.h>

#include "wire/ctl.h"
#include "sys/err.h"
#include "transport/chan.h"
#include "wire/proto.h"

#define ACCEPTOR_TIMEOUT_S 30u      /* for all n connections to arrive */
#define ACCEPTOR_AUTH_TIMEOUT_S 10u /* for one connection to prove itself */
/* Handshakes in flight at once. When all are taken and another connection
 * waits, the oldest still running is cut off to make room. */
#define ACCEPTOR_MAX_JOBS (PROTO_MAX_STREAMS + 16)

/* Accepts req->streams authenticated data connections on lfd (-1: none)
 * and, when afd is not -1, streams through ssh on that attach socket
 * (wire/attach.h: their handshake is in clear, whatever req->flags say, for
 * ssh encrypts them), one per
 * stream index, with session key k, secured as req->flags say
 * (auth_data_mode: TLS 1.3, or in clear with the DHELLO proofs), each a
 * channel with a timeout of req->timeout_s (chan_set_timeout). Every
 * handshake has ACCEPTOR_AUTH_TIMEOUT_S from its accept (for connections
 * passed on, from when the session takes them), a deadline that no
 * trickle extends: the connection is cut off then.
 * watch (may be NULL) is the control channel, read while no handshake is in
 * flight: the peer's ERROR or a closed channel means it gave up, and stops
 * the wait with -PC_E_ABORTED and the peer's reason and code in e
 * (pc_err_get). A FILE means a source that has all its connections open
 * started the transfer: it is put back (ctl_unread) and the wait goes on,
 * for ACCEPTOR_AUTH_TIMEOUT_S at most. Any other message is -PC_E_PROTO.
 * A stop signal ends the wait with -PC_E_INTERRUPTED (platform_poll).
 * peer names the other side in messages. On success chans[0..n-1] are
 * the connections (owned by the caller: chan_free); on failure none is
 * left open and every chans[i] is NULL. Returns 0 or a negative code with
 * the detail in e. */
int acceptor_run(int lfd, int afd, struct ctl *watch, const struct proto_request *req,
		 const uint8_t k[PROTO_KEY_LEN], const char *peer, struct chan **chans,
		 struct pc_err *e);

/* The same, for connections a daemon accepted on its own port and passes
 * on to the session (net_send_fd) after reading their route preamble:
 * sock is the session's end of the Unix socket they come through. */
int acceptor_run_passed(int sock, struct ctl *watch, const struct proto_request *req,
			const uint8_t k[PROTO_KEY_LEN], const char *peer, struct chan **chans,
			struct pc_err *e);

#endif
