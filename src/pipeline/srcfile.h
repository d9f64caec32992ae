/* SPDX-License-Identifier: Apache-2.0 */
/* srcfile: one source opened for reading, with what the sink must know
 * about it. Owned by whoever opened it (the session); the source engine
 * borrows it for the transfer. */
#ifndef PCOPY_SRCFILE_H
#define PCOPY_SRCFILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline/encoder.h"
#include "sys/err.h"
#include "wire/ctl.h"
#include "wire/proto.h"

struct src_file {
	char display[PROTO_MAX_PATH + 1]; /* as the user named it, for messages */
	char name[PROTO_MAX_PATH + 1];    /* the name sent to the sink */
	int fd;                  /* owned; -1 when closed */
	bool stream;             /* stdin, a pipe or a device: read sequentially, size unknown */
	bool sparse;             /* may have holes: look for them with SEEK_DATA */
	uint64_t size;           /* bytes (regular files) */
	uint32_t mode;           /* permission bits */
	int64_t mtime_s;
	uint32_t mtime_ns;
	uint32_t id;             /* assigned by the source when announced */
	atomic_bool failed;      /* the sink gave up on this file: skip its blocks */
	struct enc_file enc;     /* how well its blocks compress; shared by readers */
	uint64_t next_off;       /* plan: next offset to claim; guarded by the plan lock */
	bool busy;               /* plan: a reader is reading this stream; plan lock */
	bool eof;                /* plan: no more blocks; plan lock */
};

/* Opens path (relative to dirfd; beneath as in pathsafe_open) for reading
 * and fills f. display names it in messages. Directories are refused
 * ("omitting directory"); FIFOs and character devices become streams.
 * The open itself never blocks (O_NONBLOCK, cleared afterwards); a FIFO is
 * then waited on until a writer has sent data or come and gone, as a
 * blocking open would have, but a stop signal ends that wait with
 * -PC_E_INTERRUPTED (platform_poll). Returns 0 or a negative code with the
 * detail in e. */
int srcfile_open(struct src_file *f, int dirfd, const char *path, bool beneath,
		 const char *display, struct pc_err *e);

/* srcfile_open that also ends a FIFO's wait when watch (NULL: none; the
 * control channel of a server) has a message or is closed: the peer gave
 * up, or has something to say. Returns -PC_E_ABORTED then, with a message
 * in e. Reads nothing from watch (it polls ctl_rfd, after ctl_pending);
 * call it on watch's receiving thread. */
int srcfile_open_watch(struct src_file *f, int dirfd, const char *path, bool beneath,
		       const char *display, const struct ctl *watch, struct pc_err *e);

/* Fills f for standard input (a stream named "stdin"). The fd is a dup of
 * 0, so closing it leaves fd 0 alone. Returns 0 or -errno. */
int srcfile_open_stdin(struct src_file *f, struct pc_err *e);

/* Closes the fd. Safe to call twice. */
void srcfile_close(struct src_file *f);

#endif
