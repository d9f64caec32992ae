/* SPDX-License-Identifier: Apache-2.0 */
/* srclist: the sources a source sends, prepared from the paths the user or
 * the REQUEST named, before the transfer. Standard input ("-") and, without
 * -r, FIFOs and character devices are streams: they are opened now, since a
 * FIFO may have to wait for its writer. Everything else is left to the
 * walk, which opens files lazily during the transfer. A path that cannot
 * even be looked at is kept with its error, to be reported in its turn.
 * Owned by its builder (a client or a server); not thread-safe. */
#ifndef PCOPY_SRCLIST_H
#define PCOPY_SRCLIST_H

#include <stdbool.h>

#include "pipeline/source.h"
#include "pipeline/srcfile.h"

struct srclist {
	struct source_path *paths;   /* [n] */
	struct src_file *streams;    /* [n]; fd -1 where not a stream */
	char (*msgs)[PROTO_MAX_MSG + 1]; /* [n] */
	unsigned n;
	unsigned unusable;           /* paths with an error */
};

/* Prepares paths[0..n-1] (borrowed for the list's life), resolved against
 * dirfd (beneath: a daemon's root). follow: -L, symlinks are followed.
 * allow_stdin: "-" is standard input. A source whose copy would take the
 * name of an earlier one's (as cp refuses) is kept with its error.
 * watch: a message or a hang-up on it also ends a FIFO's wait for its
 * writer (NULL: none; see srcfile_open_watch). Returns 0,
 * or a fatal negative code (out of memory, interrupted, the peer gave up)
 * with the detail in e. Call srclist_free either way. */
int srclist_build(struct srclist *l, int dirfd, bool beneath, const char *const *paths,
		  unsigned n, bool recursive, bool follow, bool allow_stdin,
		  const struct ctl *watch, struct pc_err *e);

/* Closes the streams and frees. Safe on a zeroed or half-built list. */
void srclist_free(struct srclist *l);

#endif
