/* SPDX-License-Identifier: Apache-2.0 */
/* sink_int: the sink's insides, shared by its modules: sink.c (the control
 * loop, the table of entries and its watermark, start and stop),
 * sink_recv.c (receiver and writer threads), sink_write.c (what writers do
 * with blocks and entries) and sink_target.c (the destination). Not for use
 * outside the sink. */
#ifndef PCOPY_SINK_INT_H
#define PCOPY_SINK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline/bufpool.h"
#include "pipeline/decoder.h"
#include "pipeline/entcount.h"
#include "pipeline/sink.h"
#include "pipeline/sink_ent.h"
#include "pipeline/stage.h"
#include "pipeline/xfer.h"

/* Writers work on different files at once: file creation, the cost of a
 * tree of small files, waits in the kernel, so there are more of them than
 * cores. Blocks of one file all go to one writer (writes to one inode
 * serialise on its lock). */
#define SINK_WRITERS 4u
/* How far past the bytes already written a block may land. Blocks of one
 * file overtake each other only by what is in flight (pools and socket
 * buffers), far less than this; a peer that claims more is lying, and the
 * bound keeps the seen-bitmap proportional to the data really received. */
#define SINK_MAX_AHEAD (16ull << 30)
/* Entries without contents handed to a writer in one job. */
#define SINK_JOB_IDS 64u
#define SINK_TABLE PROTO_MAX_INFLIGHT
/* Finished entries an ACK waits for while the sink is busy. */
#define SINK_ACK_EVERY 1024u

struct sink;
struct sumpool;

struct receiver {
	struct sink *s;
	unsigned idx;                  /* stream index; immutable */
	struct decoder *dec;           /* this thread only */
	pthread_t tid;
	bool started;
	/* This thread only; read after join: */
	struct stage_acc recv;         /* busy decrypting; waiting for bytes or the entry;
	                                  decoding or handing on */
	struct stage_acc decode;       /* busy decoding; waiting for the block; handing on */
	bool carried;                  /* a block other than END came (the stage table
	                                  counts only streams that carried data) */
};

struct writer {
	struct sink *s;
	unsigned idx;                  /* writer index: its queue; immutable */
	pthread_t tid;
	struct proto_entry e;          /* this thread's scratch */
	struct stage_acc write;        /* this thread only; read after join */
};

/* A LINKED file that arrived well: what a later HARDLINK may name. */
struct sink_link {
	uint32_t id;
	char *path;
};

struct sink {
	struct xfer *x;
	struct sink_target *t;
	struct dest *dest;             /* NULL when writing to stdout */
	struct bufpool *pool;
	struct queue *wq[PROTO_MAX_STREAMS]; /* one per writer, or one per stream if ordered */
	unsigned nq;
	struct receiver recv[PROTO_MAX_STREAMS];
	struct writer *writers;        /* [nwriters] */
	unsigned nwriters;
	int efd;                       /* eventfd: an entry finished */
	pthread_t ctl_tid;             /* the control thread, which needs no wake-up */
	int meta_tag;                  /* its address marks a buffer as a job of entry ids */

	pthread_mutex_t lock;          /* guards table, announced, low, end */
	pthread_cond_t cond;           /* entries announced, END, or abort */
	struct sink_ent **table;       /* [SINK_TABLE], by id % SINK_TABLE */
	uint32_t announced;            /* ids announced so far */
	struct entcount ents;          /* the entries shown in progress; control thread */
	uint32_t low;                  /* lowest id not yet passed by the watermark */
	bool end;                      /* END received */
	uint64_t acked_ns;             /* control thread: when our last ACK went (or END
	                                  came): see sink_alive */
	atomic_uint_least64_t *done;   /* [SINK_TABLE / 64] bits, by id % SINK_TABLE */

	atomic_uint failed;            /* entries that failed */
	atomic_uint unverified;        /* -e: of those, files read back other than received */
	atomic_uint_least64_t nfiles, ndirs, nlinks; /* entries finished well, by kind */
	/* control thread only: */
	uint64_t unchanged, unchanged_bytes; /* -u: files kept as they were (of nfiles) */
	struct proto_have *have;       /* -u: the answer to the ENTRIES being read */
	struct prune *prune;           /* --delete: the names each directory keeps */
	uint64_t deleted;              /* --delete: entries removed */
	uint64_t zeros_sum;            /* -e: the checksum of a whole block of zeros (a hole's);
	                                  set before the threads start */
	/* --checksum: */
	atomic_uint_least64_t same_bytes; /* bytes of SAME blocks, taken from the old files */
	atomic_uint_least64_t resumed; /* -a: files finished from an earlier run's partial file */
	atomic_uint_least64_t kept_same; /* --checksum: files whose every block matched, left
	                                    as they were (sink_keep_same) */
	atomic_uint_least64_t kept_same_bytes; /* ... and their bytes */
	struct sumpool *sums_pool;     /* control thread: hashes old files; made at the first */
	uint64_t sums_inflight;        /* control thread: hash bytes sent for entries our
	                                  last ACK does not cover (PROTO_MAX_INFLIGHT_SUMS) */
	uint64_t sums_retired;         /* ...of which, of entries behind the watermark */
	/* control thread only: */
	unsigned skipped;              /* SKIPs received */
	uint32_t next_skip;            /* lowest index the next SKIP may have */
	uint32_t tops;                 /* entries and SKIPs counted against skip_paths (flat) */
	uint32_t acked;                /* our last ACK */
	uint64_t inflight_bytes;       /* string bytes of the entries in the table */
	struct proto_entry *scratch;
	struct buf *job;               /* entries without contents, not yet handed out */
	unsigned next_writer;
	struct sink_link *linked;      /* sorted by id (they arrive in order) */
	size_t nlinked, linked_cap;
	uint64_t codec_cpu_ns;         /* summed from the receivers after join */
	struct stage_sum stage[PROTO_STAGES]; /* summed from the threads after join */
};

/* For a receiver: waits until entry `last` is announced. Returns 1, 0 when
 * the transfer aborted, or -PC_E_PROTO when END came and it never was. */
int sink_await(struct sink *s, uint32_t last);

/* True once bytes, coverage and size agree (r->lock held). */
bool sink_complete_locked(const struct sink *s, const struct sink_ent *r);

/* Every block arrived: gives the file its size, attributes and final
 * name. Called once (the caller won r->finishing). */
void sink_data_commit(struct sink *s, struct proto_entry *scratch, struct sink_ent *r);

/* Closes and removes what was written of r and reports why. Called once
 * (the caller won r->finishing) with no block of r being written. */
void sink_data_fail(struct sink *s, struct sink_ent *r, int code, const char *what);

/* "DST/path" for messages. */
void sink_display(const struct sink *s, const struct sink_ent *r, char *out, size_t cap);
/* The same for an entry's wire path p. */
void sink_display_path(const struct sink *s, const char *p, char *out, size_t cap);

/* r is finished: well (code 0), or not (the source is told with
 * FILE_DONE, and we report it if we are the client). Sets its done bit
 * and wakes the control thread, which may then free r: the caller must
 * hold its own reference if it still needs r. Any thread. */
void sink_finished(struct sink *s, struct sink_ent *r, int code, const char *msg);

bool sink_is_done(struct sink *s, uint32_t id);

/* Finishes r with the outcome of a destination call: ret 0, or the error
 * with its message in e. A fatal one ends the session. */
void sink_outcome(struct sink *s, struct sink_ent *r, int ret, struct pc_err *e);

/* The record of an announced, unfinished entry, with a reference for the
 * caller; NULL if id is below the watermark (finished) or not announced. */
struct sink_ent *sink_ref(struct sink *s, uint32_t id);

/* A job: the ids of entries without contents, in b->data. */
void sink_run_job(struct sink *s, struct writer *w, struct buf *b);

/* Writes one verified DATA block and finishes its file if it was the
 * last. */
void sink_write(struct sink *s, struct writer *w, struct buf *b);

/* Unpacks a verified PACK block into its files, once the whole pack has
 * been checked against the entries: a malformed pack writes nothing. */
void sink_write_pack(struct sink *s, struct writer *w, const struct buf *b);

void *sink_receiver(void *arg);

/* --checksum, for a REG entry r (e) with contents, not kept: if it is
 * more than a quarter block and the destination has a regular file at its
 * path, hashes that file's blocks and sends them (SUMS), and sets
 * r->nsums. With --inplace, where that file can be written in place (a
 * regular file with one link), it becomes r's file (SINK_HELD_INPLACE)
 * first; else, but with -a, r's new file is made now and each block
 * hashed is written into it as well (SINK_HELD_COPY): the old file is
 * read once, and a SAME block is in the new one already.
 * Nothing there, or the budget of hashes in flight spent: no SUMS (or
 * fewer), and the file travels whole. Control thread. Returns 0, or a
 * negative code when the session must end. */
int sink_sums_send(struct sink *s, struct sink_ent *r, const struct proto_entry *e);

/* -a: whether r is written to a named partial file with a journal, which
 * an interrupted run leaves for the next (a REG of known size, of more
 * than a quarter block, whose bitmap fits). Any thread. */
bool sink_resumable(const struct sink *s, const struct sink_ent *r);

/* -a, for a resumable REG entry r (e) with contents, not kept: if an
 * interrupted run left a partial file and a journal of this version of
 * the source, r is written into that file from now on (SINK_HELD_PARTIAL), and
 * the hashes of the blocks it has are sent (SUMS), of blocks not written
 * PROTO_SUM_NONE. Else nothing is sent, and what was there goes. Control
 * thread. Returns 0, or a negative code when the session must end. */
int sink_resume(struct sink *s, struct sink_ent *r, const struct proto_entry *e);

/* A SAME block b of r, on its receiver (so that reading and checking old
 * bytes runs on as many threads as there are streams): reads its raw_len
 * bytes from r's old file, opened again at its name at the first, into
 * b->data and checks them against the block's checksum. b->err: 0, or why
 * not (-PC_E_FILEIO: the file changed or went since it was hashed;
 * -PC_E_INTEGRITY: -e, a block of r's copy read back other than the
 * bytes hashed into it; -PC_E_ABORTED: r is finished already; -errno),
 * for its writer, which claims the block as any other and fails r then.
 * Without -e, a block r's file holds already (sink_holds_locked) is not
 * read again (b->len 0): this run hashed it there, and the source matched
 * that hash; with -e it is read from r's file itself, not the old one. */
void sink_same_fetch(struct sink *s, struct sink_ent *r, struct buf *b);

/* Whether block k of r came (r->lock held). */
static inline bool sink_seen_locked(const struct sink_ent *r, uint64_t k)
{
	return k / 8 < r->seen_bytes && (r->seen[k / 8] & (1u << (k % 8)));
}

/* Whether block k is in r's file already (r->held; r->lock held): a file
 * that held bytes before its first block has it, but a copy only the
 * blocks it was given as they were hashed (r->copy_from .. r->copied - 1). */
static inline bool sink_holds_locked(const struct sink_ent *r, uint64_t k)
{
	return r->held != SINK_HELD_NONE &&
	       (r->held != SINK_HELD_COPY || (k >= r->copy_from && k < r->copied));
}

/* --checksum: writes into r's copy the SAME blocks it owes (r->owed), each
 * read from the old file, opened again at its name if it is not open, and
 * checked against the checksum its SAME block came with, as
 * sink_same_fetch checks one; the list is emptied, whatever the outcome.
 * r's writer, or its finisher, with no block of r being written. Returns 0,
 * or a negative code with the message in e: -PC_E_FILEIO, the old file
 * changed or went since it was hashed; a write's -errno. */
int sink_owed_fill(struct sink *s, struct sink_ent *r, struct pc_err *e);

/* For the message of a write of r that failed with err: where err is a
 * full disk (or quota) and r's new copy is made beside an old file
 * (--checksum without --inplace), words that say --inplace needs no room
 * for it; else "". Takes r->lock. */
const char *sink_room_hint(const struct sink *s, struct sink_ent *r, int err);

/* The message for a SAME block whose bytes could not be taken (b->err),
 * in e; returns b->err. */
int sink_same_error(struct sink *s, const struct sink_ent *r, const struct buf *b,
		    struct pc_err *e);

/* Closes r's old file and copy_fd, if open and no receiver reads them
 * (r->lock held); else the last reference to r does. */
void sink_base_close(struct sink_ent *r);

/* Lets go of a buffer and the reference its block held. */
void sink_release(struct sink *s, struct buf *b);

void sink_wake(void *arg);

void *sink_writer(void *arg);

/* Ordered mode: block k comes from stream k % N, in sequence. */
void *sink_writer_ordered(void *arg);

#endif
