/* SPDX-License-Identifier: Apache-2.0 */
/* bufpool: a bounded pool of equal-sized block buffers, allocated up front.
 *
 * A buffer's life is acquire -> fill -> hand on (queue) -> release. The pool
 * never grows, so memory is count * size no matter how much data flows.
 * All functions are thread-safe. */
#ifndef PCOPY_BUFPOOL_H
#define PCOPY_BUFPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "wire/proto.h"

struct buf {
	uint8_t *data;            /* cap bytes, owned by the pool */
	size_t cap;               /* fixed at pool creation */
	size_t len;               /* valid bytes; set by whoever fills it */
	struct proto_block hdr;   /* block metadata travelling with the bytes */
	void *ctx;                /* owner's per-buffer pointer (e.g. a file) */
	bool untried;             /* source: raw only because no compression was asked yet */
	int err;                  /* sink: why a SAME block's bytes could not be taken (0: they
	                             are in data) */
};

struct bufpool;

/* Allocates count buffers of size bytes each. Returns NULL on ENOMEM or
 * count == 0. */
struct bufpool *bufpool_new(unsigned count, size_t size);

/* Frees the pool. Every acquired buffer must have been released (asserted).
 * NULL is a no-op. */
void bufpool_free(struct bufpool *p);

/* Takes a free buffer, blocking until one is released. Returns NULL once the
 * pool is aborted (also if the caller was waiting). The caller owns the
 * returned buffer until it releases it or passes it on. len, hdr, ctx,
 * untried and err are zeroed. */
struct buf *bufpool_acquire(struct bufpool *p);

/* Returns b to the pool and wakes one waiter. Allowed after abort. */
void bufpool_release(struct bufpool *p, struct buf *b);

/* Wakes every waiter; later acquires return NULL. Idempotent. */
void bufpool_abort(struct bufpool *p);

/* Allocates a data area interchangeable with a pool buffer's: a stage may
 * swap b->data with such an area of the same size (to compress or decode
 * without a copy); the pool frees whatever pointer it holds at the end.
 * NULL on ENOMEM. */
void *bufpool_alloc_data(size_t size);
/* Frees an area from bufpool_alloc_data. NULL is a no-op. */
void bufpool_free_data(void *data);

/* Buffers currently acquired and not released. */
unsigned bufpool_outstanding(struct bufpool *p);

#endif
