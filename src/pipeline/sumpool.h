/* SPDX-License-Identifier: Apache-2.0 */
/* sumpool: hashes the blocks a file has at the destination already
 * (--checksum, -a) on a few threads of its own, a chunk of blocks (one
 * SUMS) at a time: chunks are handed out and collected in order, so that
 * the sink's control thread sends each chunk's hashes while the next ones
 * are being hashed. With copy, a chunk's blocks are also written into a
 * new file (through the caller's put, which leaves alone a block that is
 * there already), each before the chunk is collected, so before its hash
 * can be sent (sink_sums.c: SINK_HELD_COPY).
 *
 * One thread, the sink's control thread, submits and collects; the pool's
 * threads only read the file, put blocks into the copy and fill the
 * chunk's hashes. The file and the journal must stay open, and put must
 * stay callable, until every chunk of them is collected. */
#ifndef PCOPY_SUMPOOL_H
#define PCOPY_SUMPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct journal;

/* Chunks submitted and not yet collected, at most. */
#define SUMPOOL_DEPTH 4u
/* Blocks in one chunk, at most (as in one SUMS). */
#define SUMPOOL_CHUNK 64u

/* The file a chunk's blocks come from, set by the caller. */
struct sumpool_file {
	int fd;                        /* the file hashed */
	/* Puts block k's len bytes at buf (at offset off) into the copy, for a
	 * chunk submitted with copy; NULL: no copy. Returns 0 (put, or left
	 * out: the copy has that block already) or -errno. Any pool thread. */
	int (*put)(void *put_arg, uint64_t k, uint64_t off, const uint8_t *buf, size_t len);
	void *put_arg;
	const struct journal *j;       /* -a: only blocks it names are hashed; else NULL */
	uint64_t size;                 /* the source's file: its last block is shorter */
	uint64_t block;                /* the block size */
	/* Polled between blocks: true once the session ends, and the rest of
	 * the chunk is not read. */
	bool (*aborted)(void *arg);
	void *arg;
};

/* A chunk collected: hash k is of block first + k, PROTO_SUM_NONE for a
 * block that lies not wholly in the file, that the journal does not name,
 * that could not be read, or that put failed on (and every later block of
 * the chunk then). */
struct sumpool_chunk {
	uint64_t first;
	unsigned count;
	const uint8_t *hashes;         /* count hashes; valid until the next collect */
	bool copied;                   /* it was submitted with copy: each block of it
	                                  whose hash is not NONE went to put */
	bool copy_failed;              /* writing the copy failed (the caller copies no
	                                  more) */
};

struct sumpool;

/* A pool of threads (1 to 8) with buffers of block bytes each, or NULL
 * (out of memory). Threads that cannot be started leave the work to
 * sumpool_collect, on the caller's thread: slower, not wrong. */
struct sumpool *sumpool_new(unsigned threads, size_t block);

/* Queues blocks first .. first + count - 1 (count 1..SUMPOOL_CHUNK) of f,
 * put into the copy if copy (and f->put). The caller has fewer than SUMPOOL_DEPTH
 * chunks uncollected. */
void sumpool_submit(struct sumpool *p, const struct sumpool_file *f, uint64_t first,
		    unsigned count, bool copy);

/* Waits for the oldest chunk submitted and not collected (there is one),
 * and returns it in *c. */
void sumpool_collect(struct sumpool *p, struct sumpool_chunk *c);

/* Stops and joins the threads; nothing may be uncollected. NULL is a
 * no-op. */
void sumpool_free(struct sumpool *p);

#endif
