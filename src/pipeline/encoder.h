/* SPDX-License-Identifier: Apache-2.0 */
/* encoder: turns a block of raw file data into what goes on the wire.
 *
 * For each block: an all-zero block becomes a HOLE (a header, no payload),
 * but never a PACK of small files, whose header may not carry HOLE;
 * otherwise, if compression is asked for, the block is compressed and sent
 * compressed only when that makes it smaller. A file whose blocks keep
 * failing to compress stops being compressed for a while; cheap probes
 * (LZ4 on a 64 KiB sample) decide when to try again. So random data costs
 * almost nothing at any level, and zeros cost almost nothing to send.
 *
 * One encoder per reader thread: not thread-safe itself. The per-file
 * state it updates (struct enc_file) is shared by readers and uses atomics. */
#ifndef PCOPY_ENCODER_H
#define PCOPY_ENCODER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline/bufpool.h"
#include "codec/codec.h"

/* Per-file compressibility memory, shared by the readers of one file. */
struct enc_file {
	atomic_uint skip;      /* blocks to send raw before trying again */
	atomic_uint streak;    /* consecutive blocks that did not compress */
};

void enc_file_init(struct enc_file *f);

/* Statistics of one encoder (its thread only; summed after join). */
struct enc_stats {
	uint64_t holes;        /* zero blocks sent as holes */
	uint64_t compressed;   /* blocks sent compressed */
	uint64_t raw;          /* blocks sent raw although compression was on */
	uint64_t probes;       /* sample probes while skipping */
	uint64_t cpu_ns;       /* thread CPU time spent compressing and probing */
};

struct encoder;

/* An encoder for buffers of buf_cap bytes (the pool's buffer size, which
 * must be >= codec bound of the block size). NULL on ENOMEM. */
struct encoder *encoder_new(size_t buf_cap);
void encoder_free(struct encoder *e);

/* Encodes b in place. On entry b->data holds b->len raw bytes and
 * b->hdr.raw_len == b->len. On return either b->hdr.flags has HOLE and
 * b->len == 0 (never for a PACK), or b->hdr.codec/enc_len describe
 * b->data[0..b->len). The encoder may swap b->data with its own scratch
 * buffer (both come from bufpool_alloc_data), so the caller must not keep
 * pointers into b->data.
 * c is the codec choice (CODEC_NONE: only hole detection). Returns 0 or a
 * negative code (a codec failure). */
int encoder_run(struct encoder *e, struct buf *b, const struct codec_choice *c,
		struct enc_file *f);

/* Its statistics so far. */
const struct enc_stats *encoder_stats(const struct encoder *e);

/* True if len bytes at p are all zero. */
bool encoder_is_zero(const uint8_t *p, size_t len);

#endif
