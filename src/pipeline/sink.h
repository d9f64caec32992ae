/* SPDX-License-Identifier: Apache-2.0 */
/* sink: receives blocks on the data channels, verifies them and writes the
 * files, each under a temporary name renamed into place only when every
 * block has arrived exactly once with a good checksum and the size is
 * right.
 *
 * Threads: the calling thread runs the control loop (ENTRIES, FILE_END,
 * FILE_FAIL, END; creates directories; sends ACK; progress; signals); one
 * receiver thread per data stream reads and verifies blocks into pool
 * buffers; writer threads pwrite them at their offsets, unpack PACKs,
 * create entries without contents, and finish files (FILE_DONE on
 * failure).
 * In ordered mode (stdout) a single writer takes block k from stream k % N
 * and writes sequentially. */
#ifndef PCOPY_SINK_H
#define PCOPY_SINK_H

#include <stdbool.h>
#include <stdint.h>

#include "sys/err.h"
#include "wire/proto.h"
#include "pipeline/xfer.h"

/* Where the files go, resolved from the destination argument. */
struct sink_target {
	int dirfd;                 /* owned: the directory files are created in; -1 for stdout */
	bool is_dir;               /* the destination is a directory: files keep their names */
	bool to_stdout;            /* write the single file to fd 1, in order */
	char name[PROTO_MAX_PATH + 1];    /* !is_dir: the file's final name in dirfd */
	bool want_dir;             /* !is_dir: the path ended in '/', so name is a directory
	                              to create, and the single source must be one */
	char display[PROTO_MAX_PATH + 1]; /* the destination as the user named it */
};

/* Resolves path (relative to rootfd; beneath as in pathsafe_open) by cp's
 * rules: an existing directory receives the files under their own names;
 * otherwise, with a single source, path names the new file, whose parent
 * directory must exist; a path that ends in '/' and does not exist names
 * a new directory (want_dir), as `cp -r SRC NEW/` and rsync have it: the
 * source must then be a directory. Checks the directory is writable. display names
 * the destination in messages. Returns 0 or a negative code with the
 * detail in e. */
int sink_target_open(struct sink_target *t, int rootfd, const char *path, bool beneath,
		     uint32_t nsources, bool to_stdout, const char *display, struct pc_err *e);
void sink_target_close(struct sink_target *t);

/* How entries are created (docs/PROTOCOL.md, REQUEST flags). */
struct sink_opts {
	bool preserve;             /* -p: modes exactly, times, owners (as root) */
	bool numeric_ids;          /* --numeric-ids */
	bool strip_setid;          /* a daemon: no set-id bits, no devices */
};

struct sink_result {
	unsigned failed;           /* entries that could not be created, and sources or
	                              entries the source skipped (SKIP) */
	unsigned unverified;       /* of those, files -e read back other than received */
	struct proto_stats self;   /* this side's totals */
	struct proto_stats peer;   /* the source's totals (from END) */
};

/* Receives entries into t over x until the source's END and every entry
 * is finished. Returns 0, -PC_E_PARTIAL if some entries failed (their
 * messages were sent in FILE_DONE and logged if x->report) or the source
 * skipped some (SKIP, allowed by x->skip_paths; logged if x->report), or
 * the first fatal error (detail in x->err). Files of unfinished entries
 * are removed before returning. */
int sink_run(struct xfer *x, struct sink_target *t, const struct sink_opts *o,
	     struct sink_result *r);

#endif
