/* SPDX-License-Identifier: Apache-2.0 */
/* attach: where data streams that travel through ssh meet their session
 * (docs/PROTOCOL.md 6.5). Each such stream is its own
 * `ssh HOST pcopy --attach ID`; the remote pcopy connects to a Unix
 * socket that the session listens on, named by the REQUEST's attach id
 * in a directory private to the user, and hands over its standard input
 * and output, the pipes from sshd (SCM_RIGHTS). The session then reads and
 * writes those pipes itself, so nothing is copied twice. The remote pcopy
 * stays until the session closes the connection: sshd closes the
 * command's input as soon as the command exits.
 *
 * Nothing listens on a network address. The directory is
 * $XDG_RUNTIME_DIR/pcopy, or ${TMPDIR:-/tmp}/pcopy-UID, mode 0700 and
 * owned by us; both ends also check that the other runs as the same user
 * (SO_PEERCRED). Whoever gets a stream in still has to pass the data
 * handshake (docs/PROTOCOL.md 6.1, in clear: ssh encrypts it). */
#ifndef PCOPY_ATTACH_H
#define PCOPY_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sys/err.h"
#include "wire/proto.h"

#define ATTACH_ID_HEX (2 * PROTO_ATTACH_ID_LEN) /* characters of an id on a command line */
#define ATTACH_WAIT_S 30u  /* how long `pcopy --attach` waits for its session */

/* The id as lowercase hex (ATTACH_ID_HEX characters and a NUL), and back:
 * exactly ATTACH_ID_HEX hex digits, not all zero (-PC_E_USAGE). */
void attach_id_format(const uint8_t id[PROTO_ATTACH_ID_LEN], char hex[ATTACH_ID_HEX + 1]);
int attach_id_parse(const char *hex, uint8_t id[PROTO_ATTACH_ID_LEN]);

/* A session's socket: makes the private directory if it is missing
 * (refusing one that is not a directory of ours with mode 0700), binds
 * the socket of id there and listens. Returns the listening socket
 * (non-blocking, close-on-exec) with its path in path[cap], or a negative
 * code with the detail in e. Remove it with attach_close. */
int attach_listen(const uint8_t id[PROTO_ATTACH_ID_LEN], char *path, size_t cap,
		  struct pc_err *e);

/* Closes a listening socket of attach_listen and removes its path. Either
 * may be absent (-1, ""). */
void attach_close(int lfd, const char *path);

/* In the session, for a connection accepted on the socket: waits until
 * deadline_ns (platform_now_ns) for the stream's two fds, checks that the
 * peer runs as our user, and sets fds[0] (read: the remote's input) and
 * fds[1] (write: its output), now the caller's, with what it says of
 * itself in who[cap]. Returns 0, -PC_E_TIMEOUT, -EPERM (another user),
 * -EPROTO (not two fds) or another negative code. */
int attach_take(int conn, uint64_t deadline_ns, int fds[2], char *who, size_t cap);

/* In `pcopy --attach`: waits up to wait_s for the session's socket of id
 * (the data ssh's start with the control ssh, before the session has
 * listened), connects, checks that the session runs as our user, and
 * passes in_fd and out_fd with the text who. Returns the connection (the
 * caller's: the session closes it when the stream is over), or a negative
 * code with the detail in e (-PC_E_LAUNCH: no such session; -PC_E_NET:
 * in_fd hung up meanwhile, its client gone). */
int attach_offer(const uint8_t id[PROTO_ATTACH_ID_LEN], unsigned wait_s, int in_fd, int out_fd,
		 const char *who, struct pc_err *e);

#endif
