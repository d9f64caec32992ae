/* SPDX-License-Identifier: Apache-2.0 */
/* source: reads files and sends them as blocks over the data channels.
 *
 * Threads: the calling thread runs the control loop (announces files with
 * ENTRIES, receives ACK and FILE_DONE, prints progress, watches signals, steers
 * -c auto); R reader threads, as many as the CPU has cores, pread blocks
 * into pool buffers, checksum and encode them (holes, compression); one
 * sender thread per data stream writes them to its socket. Readers hand buffers to
 * senders through bounded queues; the pool bounds memory to
 * O(streams x block size). */
#ifndef PCOPY_SOURCE_H
#define PCOPY_SOURCE_H

#include "pipeline/srcfile.h"
#include "pipeline/xfer.h"

/* A source the server could not open: reported to the client with SKIP
 * instead of an entry (docs/PROTOCOL.md, section 4.11). */
struct source_skip {
	uint32_t index;              /* its position in the REQUEST's paths */
	int code;                    /* why: a negative code */
	char msg[PROTO_MAX_MSG + 1]; /* names the source and says why */
};

/* What one data stream carried. */
struct source_stream_stats {
	struct codec_choice choice;  /* its codec (for auto: where it ended) */
	uint64_t raw;                /* file bytes it carried */
	uint64_t wire;               /* bytes it sent, headers included */
};

struct source_result {
	unsigned failed;          /* files the sink reported as failed */
	unsigned skipped;         /* sources reported with SKIP */
	struct source_stream_stats stream[PROTO_MAX_STREAMS];
	uint64_t holes, compressed, raw_blocks; /* blocks by how they were sent */
	struct proto_stats self;  /* this side's totals */
	struct proto_stats peer;  /* the sink's totals (from DONE) */
};

/* Sends skips[0..nskips-1] (borrowed; index order) as SKIP, then
 * files[0..n-1] (borrowed; their fds stay open) over x, whose data sockets
 * are connected and authenticated. Either list may be empty. Returns 0 when
 * nothing was skipped and every file was verified by the sink,
 * -PC_E_PARTIAL when some source was skipped or some file failed (the
 * sink's messages were logged if x->report), or the first fatal error
 * (detail in x->err). */
int source_run(struct xfer *x, struct src_file *files, unsigned n,
	       const struct source_skip *skips, unsigned nskips, struct source_result *r);

#endif
