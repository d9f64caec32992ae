/* loc: what a SRC or DST argument names: a local path, stdin/stdout ("-"),
 * or a path on a pcopy daemon (pcopy://HOST:PORT/PATH). Pure parsing. */
#ifndef PCOPY_LOC_H
#define PCOPY_LOC_H

#include <stdint.h>
#include "err.h"
#include "proto.h"

enum loc_kind {
	LOC_LOCAL = 1,   /* a path on this machine, as given */
	LOC_STDIO,       /* "-": stdin as a source, stdout as a destination */
	LOC_DAEMON,      /* pcopy://HOST:PORT/PATH */
};

#define LOC_MAX_HOST 255u

struct loc {
	enum loc_kind kind;
	char host[LOC_MAX_HOST + 1]; /* LOC_DAEMON: name, IPv4, or IPv6 without brackets */
	uint16_t port;               /* LOC_DAEMON: 1..65535 */
	char path[PROTO_MAX_PATH + 1]; /* LOCAL: as given; DAEMON: normalised, relative to the
	                                  daemon's root ("." for the root itself) */
};

/* Parses arg. For pcopy:// URLs the host may be a bracketed IPv6 literal,
 * the port is required, and the path is normalised: leading and repeated
 * slashes and "." components removed; a ".." component is refused.
 * Returns 0 or -PC_E_USAGE with a message naming arg in e. */
int loc_parse(const char *arg, struct loc *out, struct pc_err *e);

#endif
