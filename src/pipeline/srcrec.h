/* SPDX-License-Identifier: Apache-2.0 */
/* srcrec: a regular file the source has announced and still has data of:
 * the source's whole per-file state, kept only while the file is in flight.
 *
 * Only entries that carry bytes get one (a regular file of size > 0, or a
 * stream); directories, links and empty files are sent and forgotten. A
 * record is reference counted: the control thread's window holds one
 * reference until the sink has acknowledged the file (ACK), the plan one
 * until every block is claimed, and every claimed DATA block one until its
 * buffer is released. Whoever drops the last reference frees it, on any
 * thread.
 *
 * A file is opened lazily, by the first reader that needs it, and closed as
 * soon as its last block has been read (reads_left), so the number of open
 * files is bounded by what the readers are reading, not by the window. */
#ifndef PCOPY_SRCREC_H
#define PCOPY_SRCREC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline/encoder.h"

struct src_rec {
	uint32_t id;             /* the entry id; immutable */
	uint64_t size;           /* announced size (0 for a stream); immutable */
	bool stream;             /* read sequentially, size unknown; immutable */
	bool sparse;             /* may have holes: look with SEEK_DATA; immutable */
	bool packed;             /* small: travels whole inside a PACK block; immutable */
	bool gap_before;         /* -u: a file the sink keeps lies between this one and the
	                            file planned before it, so no PACK may hold both (a
	                            PACK has no status for a kept file); set before
	                            plan_add, immutable after */
	int base_fd;             /* borrowed: open open_path beneath it; immutable */
	/* --checksum: the hashes of blocks 0 .. nsums - 1 as the destination has
	 * them (SUMS), PROTO_SUM_LEN each, owned; and sums_done once no more will
	 * come. The control thread appends; once the file is planned (which may be
	 * before its last hashes come), under the source's sums_lock. */
	uint8_t *sums;
	uint64_t nsums;
	size_t sums_cap;         /* bytes allocated at sums */
	bool sums_done;
	bool planned_early;      /* -a: planned at its first SUMS, ahead of the files before
	                            it, which wait for the HAVE; control thread only */
	const char *open_path;   /* in str; NULL for a pre-opened stream; immutable */
	const char *display;     /* in str: names the file in messages; immutable */
	int fd;                  /* -1 until opened; guarded by the source's open lock
	                            until reads_left reaches 0 */
	bool own_fd;             /* close fd when done (false: a borrowed stream) */
	bool open_failed;        /* the lazy open failed; open lock */
	atomic_bool failed;      /* given up (source or sink side): skip its blocks */
	atomic_uint refs;
	atomic_uint_least64_t reads_left; /* blocks not yet read; the fd closes at 0 */
	struct enc_file enc;     /* how well its blocks compress; shared by readers */
	/* plan only, under the plan lock: */
	uint64_t next_off;       /* next offset to claim */
	bool busy;               /* a reader is reading this stream */
	bool eof;                /* no more blocks to claim */
	struct src_rec *next;    /* the plan's queue */
	/* control thread only: */
	struct src_rec *wnext;   /* the window's queue, in id order */
	char str[];              /* open_path's and display's bytes */
};

/* A new record with one reference (the window's). Strings are copied.
 * NULL on ENOMEM. */
struct src_rec *src_rec_new(uint32_t id, uint64_t size, int base_fd, const char *open_path,
			    const char *display);

void src_rec_get(struct src_rec *r);

/* Drops a reference; the last one closes an owned fd and frees r. */
void src_rec_put(struct src_rec *r);

/* Blocks of DATA a record of this size has at block size B. */
uint64_t src_rec_blocks(uint64_t size, uint32_t B);

#endif
