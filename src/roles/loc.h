/* SPDX-License-Identifier: Apache-2.0 */
/* loc: what a SRC or DST argument names: a local path, stdin/stdout ("-"),
 * a path on a pcopy daemon (pcopy://HOST:PORT/PATH), or a path on a host
 * reached through ssh ([user@]host:PATH, as scp writes it). Pure parsing. */
#ifndef PCOPY_LOC_H
#define PCOPY_LOC_H

#include <stdint.h>
#include "sys/err.h"
#include "wire/proto.h"

enum loc_kind {
	LOC_LOCAL = 1,   /* a path on this machine, as given */
	LOC_STDIO,       /* "-": stdin as a source, stdout as a destination */
	LOC_DAEMON,      /* pcopy://HOST:PORT/PATH */
	LOC_SSH,         /* [user@]host:PATH, host may be [IPv6] */
};

#define LOC_MAX_HOST 255u
#define LOC_MAX_USER 64u

struct loc {
	enum loc_kind kind;
	char user[LOC_MAX_USER + 1]; /* LOC_SSH: the login name, or "" */
	char host[LOC_MAX_HOST + 1]; /* LOC_DAEMON: name, IPv4, or IPv6 without brackets */
	uint16_t port;               /* LOC_DAEMON: 1..65535 */
	char path[PROTO_MAX_PATH + 1]; /* LOCAL: as given; DAEMON: normalised, relative to the
	                                  daemon's root ("." for the root itself); SSH: as
	                                  given, relative to the remote home ("." for it) */
};

/* Parses arg. For pcopy:// URLs the host may be a bracketed IPv6 literal,
 * the port is required, and the path is normalised: leading and repeated
 * slashes and "." components removed; a ".." component is refused.
 * Otherwise, as scp does: an argument with a ':' before any '/' names a
 * remote path, [user@]host:PATH (host may be [IPv6]; an empty PATH is the
 * remote home); "./a:b" and "/a:b" are local. Returns 0 or -PC_E_USAGE with
 * a message naming arg in e. */
int loc_parse(const char *arg, struct loc *out, struct pc_err *e);

/* "user@host", "host", or "user@::1" for ssh's command line. */
void loc_ssh_target(const struct loc *l, char *buf, size_t cap);

/* "host" or "[::1]" for messages. */
void loc_host_display(const struct loc *l, char *buf, size_t cap);

#endif
