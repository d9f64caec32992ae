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
#include "pipeline/walk.h"
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
	unsigned failed;          /* entries that failed (the sink's FILE_DONE) */
	unsigned unverified;      /* of those, files -e read back other than sent (FILE_DONE
	                             with -PC_E_INTEGRITY) */
	unsigned skipped;         /* sources and entries that could not be read (SKIP) */
	uint64_t files, dirs, links; /* entries sent, by kind (regular files; directories;
	                                symbolic and hard links) */
	struct source_stream_stats stream[PROTO_MAX_STREAMS];
	uint64_t holes, compressed, raw_blocks; /* blocks by how they were sent */
	struct proto_stats self;  /* this side's totals */
	struct proto_stats peer;  /* the sink's totals (from DONE) */
};

/* One source as the user (or the REQUEST) named it. */
struct source_path {
	const char *path;            /* borrowed; resolved against source_input.dirfd */
	struct src_file *stream;     /* borrowed: opened beforehand because it is a stream
	                                (stdin, a FIFO, a device without -r); NULL: walk it */
	int code;                    /* < 0: it could not even be opened beforehand */
	const char *msg;             /* with code < 0: names it and says why; borrowed */
};

/* What a source sends. */
struct source_input {
	int dirfd;                   /* paths resolve against it (AT_FDCWD, a daemon's root) */
	bool beneath;                /* a daemon: paths may not lead outside dirfd */
	const struct source_path *paths; /* [npaths], in REQUEST order */
	unsigned npaths;
	struct walk_opts walk;       /* -r, -L, -H, -p */
};

/* Sends every source of in over x, whose data channels are connected and
 * authenticated: walks each one (a tree with -r), announces the entries in
 * batches (ENTRIES) within a bounded window of entries the sink has not
 * acknowledged yet, and sends the contents (small files packed together,
 * big ones in blocks over every stream). A source or entry that cannot be
 * read is reported (logged when x->report, else sent as SKIP) and the rest
 * goes on. Returns 0 when everything arrived and was verified,
 * -PC_E_PARTIAL when something was skipped or failed (the messages were
 * logged if x->report), or the first fatal error (detail in x->err). */
int source_run(struct xfer *x, const struct source_input *in, struct source_result *r);

#endif
