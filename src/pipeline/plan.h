/* SPDX-License-Identifier: Apache-2.0 */
/* plan: hands out the source's blocks to reader threads, one claim at a
 * time, in announcement order. The control thread adds files as it
 * announces them; readers claim (file, offset, length, seq). A regular file
 * is split into block_size pieces that any reader may read in parallel; a
 * stream is read by one reader at a time, and the reader reports how much
 * it got. All functions are thread-safe. */
#ifndef PCOPY_PLAN_H
#define PCOPY_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/srcfile.h"

struct plan;

struct plan_claim {
	struct src_file *f;
	uint64_t offset;
	uint32_t len;      /* bytes to read (a stream: at most this many) */
	uint64_t seq;      /* session-wide block number */
};

/* A plan for files of at most max_files entries. NULL on ENOMEM. */
struct plan *plan_new(uint32_t block_size, unsigned max_files);
void plan_free(struct plan *p);

/* Appends an announced file (borrowed until the plan is freed). A file of
 * size 0 yields no blocks. */
void plan_add(struct plan *p, struct src_file *f);

/* No more files will be added. */
void plan_finish(struct plan *p);

/* Blocks until a block can be claimed. Returns 1 with *c filled, 0 when the
 * plan is finished and every block was claimed, or -PC_E_ABORTED. Blocks of
 * files marked failed are skipped. */
int plan_next(struct plan *p, struct plan_claim *c);

/* After reading the stream claim c: got bytes arrived; eof says the stream
 * ended. Releases the stream for the next claim. */
void plan_stream_done(struct plan *p, const struct plan_claim *c, uint32_t got, bool eof);

/* Wakes every waiter; plan_next returns -PC_E_ABORTED from now on. */
void plan_abort(struct plan *p);

#endif
