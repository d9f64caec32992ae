/* SPDX-License-Identifier: Apache-2.0 */
/* plan: hands out the source's work to reader threads, one claim at a
 * time, in announcement order. The control thread adds the records of the
 * files it has announced; readers claim either one block of a file (a
 * regular file is split into block_size pieces that any reader may read in
 * parallel; a stream is read by one reader at a time, which reports how
 * much it got), or a pack: a run of consecutive small files that travel
 * whole inside one PACK block. All functions are thread-safe. */
#ifndef PCOPY_PLAN_H
#define PCOPY_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "pipeline/srcrec.h"

/* Most files one pack claim carries. */
#define PLAN_PACK_MAX_RECS 4096u

struct plan;

enum plan_kind { PLAN_BLOCK = 1, PLAN_STREAM, PLAN_PACK };

struct plan_claim {
	enum plan_kind kind;
	struct src_rec *f;   /* BLOCK, STREAM: the file; the claim holds a reference */
	uint64_t offset;     /* BLOCK, STREAM */
	uint32_t len;        /* BLOCK: bytes to read; STREAM: at most this many;
	                        PACK: the raw bytes of the block (statuses and contents) */
	uint64_t seq;        /* session-wide block number */
	/* PACK: the files, in id order; the claim holds a reference to each.
	 * recs points at the caller's array of PLAN_PACK_MAX_RECS. */
	struct src_rec **recs;
	unsigned nrecs;
	uint32_t first_id;   /* PACK: the range of ids the block covers */
	uint32_t span;
};

/* A plan for blocks of block_size bytes. With pack false no pack is ever
 * formed (ordered transfers). NULL on ENOMEM. */
struct plan *plan_new(uint32_t block_size, bool pack);
/* Frees the plan and drops its references to records still queued. */
void plan_free(struct plan *p);

/* Whether a file of this size travels in a PACK (small) or in DATA blocks. */
bool plan_packable(const struct plan *p, uint64_t size);

/* Appends an announced file; takes over one reference (the plan's). Files
 * must come in id order. Sets f->packed and f->reads_left. */
void plan_add(struct plan *p, struct src_rec *f);

/* No more files will be added. */
void plan_finish(struct plan *p);

/* Blocks until something can be claimed. c->recs must point at an array
 * of PLAN_PACK_MAX_RECS. Returns 1 with *c filled, 0 when the plan is
 * finished and everything was claimed, or -PC_E_ABORTED. Files marked
 * failed are skipped (their unread blocks are counted off reads_left). */
int plan_next(struct plan *p, struct plan_claim *c);

/* After reading the stream claim c: got bytes arrived; eof says the stream
 * ended. Releases the stream for the next claim (the caller still drops
 * the claim's reference). */
void plan_stream_done(struct plan *p, const struct plan_claim *c, uint32_t got, bool eof);

/* A block of f was read or given up: counts it off f->reads_left and closes
 * an owned fd once none is left. Thread-safe. */
void plan_read_done(struct src_rec *f, uint64_t nblocks);

/* Wakes every waiter; plan_next returns -PC_E_ABORTED from now on. */
void plan_abort(struct plan *p);

#endif
