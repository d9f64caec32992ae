/* SPDX-License-Identifier: Apache-2.0 */
/* source_int: the source's insides, shared by its modules: source.c (start,
 * the control loop, stop), source_entries.c (walking and announcing entries,
 * the sink's acknowledgements), source_read.c (reader and sender threads)
 * and source_auto.c (the -c auto controller). Not for use outside the
 * source. */
#ifndef PCOPY_SOURCE_INT_H
#define PCOPY_SOURCE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline/bufpool.h"
#include "pipeline/encoder.h"
#include "pipeline/entcount.h"
#include "pipeline/plan.h"
#include "pipeline/ratelimit.h"
#include "pipeline/source.h"
#include "pipeline/srcrec.h"
#include "pipeline/stage.h"
#include "pipeline/xfer.h"


/* Entries announced and not yet acknowledged by the sink: enough to fill
 * packs and keep a long fat pipe busy with small files, far below what a
 * sink accepts (PROTO_MAX_INFLIGHT). */
#define SOURCE_WINDOW 16384u
/* ... and their encoded bytes in ENTRIES, which the control channel holds
 * until the sink reads them. An ssh in between buffers all of it, and
 * OpenSSH's cost grows with what it holds: with 1.6 MiB of entries ahead
 * of a sink busy with its stat calls, the far sshd spent most of a CPU in
 * memmove and an unchanged 20,000-file update took 1.5 to 2.5 s instead
 * of 0.46 s (DESIGN-NOTES, "Where an update's time goes"). Encoded bytes
 * exceed the string bytes a sink counts, so its bound holds too. */
#define SOURCE_WINDOW_BYTES (256u << 10)
_Static_assert(SOURCE_WINDOW_BYTES <= PROTO_MAX_INFLIGHT_BYTES / 2, "the sink's bound");
#define SOURCE_MAX_READERS 16u
#define SOURCE_AUTO_TICK_NS 150000000u
#define SOURCE_AUTO_LOWAT (512u << 10) /* unsent bytes a data socket may hold under auto */

struct source;

struct sender {
	struct source *s;
	unsigned idx;              /* stream index; immutable */
	pthread_t tid;             /* valid only if started */
	bool started;              /* control thread: tid is a thread to join */
	uint64_t raw, wire;        /* this thread only; read after join */
	struct encoder *enc;       /* -c auto only: this thread's, for late compression */
	struct stage_acc send;     /* this thread only; read once senders_left is 0 */
};

struct reader {
	struct source *s;
	struct encoder *enc;       /* this thread only */
	pthread_t tid;
	struct src_rec *recs[PLAN_PACK_MAX_RECS]; /* this thread only: a pack claim's files */
	/* This thread only; read once the senders are done (it closed the
	 * queues after its last write): */
	struct stage_acc read;     /* busy reading; waiting for a claim; encoding or handing on */
	struct stage_acc encode;   /* busy encoding; waiting for a claim or the read; handing on */
	uint64_t lap_ns;           /* the clock at the end of the last stretch accounted */
};

/* -c auto climbs and descends this ladder (docs/DESIGN-NOTES.md). */
#define SOURCE_LADDER_LEN 5u
extern const struct codec_choice source_ladder[SOURCE_LADDER_LEN];

/* The -c auto controller's memory; control thread only. */
struct autoctl {
	uint64_t next_ns;          /* next decision */
	uint64_t last_ns, last_bytes, last_wire, last_queued, last_idle;
	double last_rate;          /* bytes/s in the interval before the last move */
	int last_move;             /* +1, -1, or 0 */
	unsigned hold;             /* intervals to wait before moving again */
	unsigned penalty;          /* hold after the next undone move; doubles each time */
	unsigned want_up;          /* consecutive intervals that asked for more compression */
	uint64_t cpu_idle, cpu_total; /* machine CPU ticks at the last decision */
};

struct source {
	struct xfer *x;
	const struct source_input *in;
	struct plan *plan;
	struct bufpool *pool;
	struct ratelimit *rl;      /* --bwlimit over every sender; NULL: no cap */
	struct queue *q[PROTO_MAX_STREAMS]; /* [nq]: one shared, or one per stream if ordered */
	unsigned nq;
	unsigned nreaders;
	struct reader readers[SOURCE_MAX_READERS];
	struct sender senders[PROTO_MAX_STREAMS];
	bool per_stream;           /* block k goes to stream k % N (ordered, or per-stream codecs) */
	bool has_stream;           /* some source is a stream: one reader */
	size_t buf_cap;            /* pool buffer size: the block or its worst encoding */
	atomic_int step;           /* -c auto: index into source_ladder */
	atomic_uint_least64_t send_idle_ns;  /* senders waiting for blocks */
	struct autoctl autoc;
	atomic_uint senders_left;  /* senders that have not yet finished their stream */
	int efd;                   /* eventfd: the last sender finished */
	pthread_mutex_t open_lock; /* guards the lazy open of DATA files */
	bool open_lock_ok;
	struct enc_file pack_enc;  /* compressibility memory of the packs */
	atomic_uint local_failed;  /* files we gave up on ourselves (FILE_FAIL, PACK status) */
	/* control thread only: */
	struct walk *walk;         /* the source being walked, or NULL */
	struct walk **walked;      /* [nwalked] walks done: their base fds serve the readers
	                              until the end */
	unsigned nwalked;
	unsigned cur;              /* index of the source being produced */
	uint32_t walk_base;        /* id of the current walk's first item */
	bool walk_done;            /* every source produced */
	struct walk_item *item;    /* scratch for walk_next */
	struct src_file *item_stream; /* the stream behind s->item, or NULL */
	struct proto_batch *batch; /* entries not yet sent */
	struct src_rec *pend_head, *pend_tail; /* their records, added to the plan once sent */
	struct src_rec *win_head, *win_tail;   /* announced and not yet acknowledged */
	struct src_rec *held;      /* -u: the first record of the window whose HAVE has not
	                              come (none yet in the plan from here on); NULL: none */
	uint32_t have_next;        /* -u: the first id the next HAVE must answer for */
	bool plan_gap;             /* -u: a kept file since the last file planned */
	uint64_t unchanged, unchanged_bytes; /* -u: files the sink had already, their bytes */
	struct src_rec *sums_at;   /* --checksum: the record the last SUMS named, or NULL */
	uint64_t sums_bytes;       /* --checksum: hash bytes of the records not yet acknowledged */
	/* --checksum: readers wait here for a hash that may still come */
	pthread_mutex_t sums_lock; /* guards the hashes of planned records */
	pthread_cond_t sums_cond;  /* hashes came, a file's are complete, or abort */
	bool sums_lock_ok, sums_cond_ok;
	bool zeros_hashed;         /* --checksum, -a: zeros_sum is the hash of a block of zeros */
	uint8_t zeros_sum[PROTO_SUM_LEN];
	uint32_t next_id;          /* ids handed out */
	uint32_t announced;        /* ids sent in ENTRIES */
	uint32_t acked;            /* the sink's ACK */
	struct entcount ents;      /* the entries shown in progress */
	uint16_t win_bytes[SOURCE_WINDOW]; /* encoded bytes of entry id, by id % SOURCE_WINDOW */
	uint64_t inflight_bytes;   /* their sum over the ids announced and not acknowledged */
	uint8_t done_bits[SOURCE_WINDOW / 8]; /* FILE_DONE seen, by id % SOURCE_WINDOW */
	bool end_sent, plan_finished;
	uint64_t heard_ns;         /* control thread: the sink's last message, or END's
	                              going; after END --timeout counts from it */
	unsigned failed, skipped;
	unsigned unverified;       /* FILE_DONEs with -PC_E_INTEGRITY (-e) */
	uint64_t files, dirs, links;
	uint64_t codec_cpu_us;     /* summed from the readers after join */
	struct proto_stage stage[PROTO_STAGES]; /* this side's stage times, as END carried them */
};

void *source_reader(void *arg);

/* Wakes the readers waiting for hashes (on abort). */
void source_sums_wake(void *arg);

/* Lets go of a buffer and the reference its block held. */
void source_release(struct source *s, struct buf *b);

/* --checksum, -a: hashes a block of zeros (s->zeros_sum), against which a
 * hole of a file is compared; out of memory, holes are sent as holes.
 * Before the readers start. */
void source_zeros_hash(struct source *s);

void *source_sender(void *arg);

/* Produces and announces entries while the window has room; the plan is
 * finished once every source has been produced. Returns 0 or a negative
 * code. */
int source_fill_window(struct source *s);

int source_on_message(struct source *s);

/* -c auto, every SOURCE_AUTO_TICK_NS (docs/DESIGN-NOTES.md has the story).
 * The network is the bottleneck when
 * data waits unsent in the data sockets (over half the low-water mark a
 * stream) and
 * the senders never wait for blocks; compressing more then pays, if the
 * machine has CPU to spare. The senders waiting for blocks means reading
 * or compressing is the bottleneck: compress less. The rate that judges a
 * move is what the network really took (bytes that left the send queues),
 * in file bytes; a move that cost more than 10 % of it is undone (a step
 * up only once the queues are no longer full) and the controller holds
 * still, 4 intervals the first time and twice as long each time after (at
 * most 64). Control thread only. */
void source_auto_tick(struct source *s, uint64_t now);

int source_poll_timeout(struct source *s);

#endif
