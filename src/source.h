/* source: reads files and sends them as blocks over the data channels.
 *
 * Threads: the calling thread runs the control loop (announces files with
 * FILE, receives FILE_DONE, prints progress, watches signals); R reader
 * threads pread blocks into pool buffers and checksum them; one sender
 * thread per data stream writes them to its socket. Readers hand buffers to
 * senders through bounded queues; the pool bounds memory to
 * O(streams x block size). */
#ifndef PCOPY_SOURCE_H
#define PCOPY_SOURCE_H

#include "srcfile.h"
#include "xfer.h"

struct source_result {
	unsigned failed;          /* files the sink reported as failed */
	struct proto_stats self;  /* this side's totals */
	struct proto_stats peer;  /* the sink's totals (from DONE) */
};

/* Sends files[0..n-1] (borrowed; their fds stay open) over x, whose data
 * sockets are connected and authenticated. Returns 0 when every file was
 * verified by the sink, -PC_E_PARTIAL when some failed (their messages were
 * logged if x->report), or the first fatal error (detail in x->err). */
int source_run(struct xfer *x, struct src_file *files, unsigned n, struct source_result *r);

#endif
