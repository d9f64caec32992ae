/* SPDX-License-Identifier: Apache-2.0 */
/* ctl: the control channel, framed messages (proto) over a chan (in clear
 * or in TLS: the ctl does not know which).
 *
 * One thread receives; any thread may send (sends are serialised by a
 * lock, so a frame is never interleaved with another). The ctl owns its
 * chan and frees it (closing its fds) in ctl_free. */
#ifndef PCOPY_CTL_H
#define PCOPY_CTL_H

#include <stdbool.h>

#include "sys/err.h"
#include "transport/chan.h"
#include "wire/proto.h"

struct ctl;

/* A control channel over ch (chan_plain_new over a socket or a pair of
 * pipes, or a TLS chan). Takes ownership of ch on success; on failure
 * (NULL: ENOMEM) ch is still the caller's. peer names the other side in
 * messages ("localhost:7000", "local sink"); it is copied. local says the
 * peer is our own child process, whose ERROR messages are shown without
 * the peer's name in front. */
struct ctl *ctl_new(struct chan *ch, const char *peer, bool local);

/* While ctl_recv waits for a frame, it also watches intr_fd (the process's
 * signalfd) and gives up with -PC_E_INTERRUPTED when a signal arrives,
 * leaving the signal for the caller to read. -1 (the default): no watch. */
void ctl_set_intr(struct ctl *c, int intr_fd);

/* From now on, ctl_recv gives up with -PC_E_TIMEOUT once `seconds` have
 * passed, however the peer trickles its bytes; 0 removes the deadline.
 * Receiving thread only. A daemon bounds a stranger's handshake with it. */
void ctl_set_deadline(struct ctl *c, unsigned seconds);

/* Frees the chan (closing its fds) and the ctl. NULL is a no-op. */
void ctl_free(struct ctl *c);

/* Encodes and sends m (a REQUEST through m->u.request, an ENTRIES from its
 * borrowed body, so a received ENTRIES can be forwarded as it is).
 * Thread-safe. Returns 0 or a negative code. */
int ctl_send(struct ctl *c, const struct proto_msg *m);

/* Sends ERROR(code, msg). Best effort: errors are returned but callers on
 * an error path usually ignore them. */
int ctl_send_error(struct ctl *c, int code, const char *msg);

/* Receives the next message into *m, blocking. Only one thread may call
 * this. What m borrows stays valid until the next ctl_recv on c (a message
 * put back with ctl_unread keeps it until it has been received again): a
 * REQUEST's m->u.request points at storage c owns, an ENTRIES' body into
 * c's receive buffer. Returns 0, -PC_E_NET when the peer closed the channel (at a frame
 * boundary or inside one), -PC_E_PROTO for a malformed frame,
 * -PC_E_INTERRUPTED (see ctl_set_intr), -PC_E_TIMEOUT (see
 * ctl_set_deadline), or another negative code. */
int ctl_recv(struct ctl *c, struct proto_msg *m);

/* Receives the next message and requires it to be of type `want`. An
 * ERROR from the peer comes back as its code with the peer's message in
 * e; any other type is -PC_E_PROTO. */
int ctl_expect(struct ctl *c, uint8_t want, struct proto_msg *m, struct pc_err *e);

/* What ctl_expect does with a message already received: 0 if m is of type
 * `want`; the peer's code and words for an ERROR; -PC_E_PROTO otherwise. */
int ctl_check(const struct ctl *c, const struct proto_msg *m, uint8_t want, struct pc_err *e);

/* Puts m back: the next ctl_recv returns it without reading. At most one
 * message; receiving thread only. */
void ctl_unread(struct ctl *c, const struct proto_msg *m);

/* True while a message put back by ctl_unread waits, or bytes wait inside
 * the chan (chan_pending: TLS keeps what it decrypted). Polling ctl_rfd
 * shows neither, so every receive loop that polls checks this first.
 * Receiving thread only. */
bool ctl_pending(const struct ctl *c);

/* After ctl_recv refused a frame (-PC_E_PROTO): what was wrong with it,
 * when known (an ENTRIES: the entry and the rule it breaks), else "".
 * Receiving thread only; valid until the next ctl_recv. */
const char *ctl_why(const struct ctl *c);

/* The fd to poll for readability (chan_rfd); check ctl_pending first. */
int ctl_rfd(const struct ctl *c);
const char *ctl_peer(const struct ctl *c);

/* The channel c owns (to ask how it travels, or for TLS keying material);
 * still c's. */
struct chan *ctl_chan(struct ctl *c);

#endif
