/* SPDX-License-Identifier: Apache-2.0 */
/* decoder: turns a received payload back into the block's raw bytes. One
 * per receiver thread; not thread-safe itself. */
#ifndef PCOPY_DECODER_H
#define PCOPY_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/bufpool.h"

struct decoder;

/* A decoder for buffers of buf_cap bytes (the pool's buffer size). NULL on
 * ENOMEM. */
struct decoder *decoder_new(size_t buf_cap);
void decoder_free(struct decoder *d);

/* Decodes b in place: on entry b->data holds b->hdr.enc_len payload bytes
 * in b->hdr.codec; on return it holds b->hdr.raw_len raw bytes (b->len set).
 * May swap b->data with the decoder's scratch (bufpool_alloc_data areas).
 * Returns 0, -PC_E_INTEGRITY if the payload does not decode to exactly
 * raw_len bytes, or another negative code. */
int decoder_run(struct decoder *d, struct buf *b);

/* What a receiver does with a block whose payload it has read (none for a
 * HOLE) into b->data: decodes it (decoder_run) and checks the raw bytes
 * against b->hdr.checksum; a HOLE only gets b->len = raw_len. b->hdr comes
 * from proto_block_decode with a max_block no larger than the decoder's
 * buf_cap. Returns 0, -PC_E_INTEGRITY for a payload that does not decode
 * or a checksum that does not match, -PC_E_PROTO, or another negative
 * code. */
int decoder_verify(struct decoder *d, struct buf *b);

/* Thread CPU nanoseconds spent decoding so far. */
uint64_t decoder_cpu_ns(const struct decoder *d);

#endif
