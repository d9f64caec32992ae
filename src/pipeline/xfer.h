/* SPDX-License-Identifier: Apache-2.0 */
/* xfer: what the source and the sink share during one transfer: the
 * negotiated parameters, the data channels, the first error, and the abort
 * switch that wakes every thread.
 *
 * Life cycle: the session fills the parameters and data, then hands the
 * xfer to source_run or sink_run, which register their pool and queues with
 * xfer_watch before starting threads. Any thread may call xfer_fail; it
 * records the first error and wakes everybody (pool, queues, data channels),
 * so every blocked thread returns and can be joined. */
#ifndef PCOPY_XFER_H
#define PCOPY_XFER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <pcopy/pcopy.h>

#include "pipeline/bufpool.h"
#include "codec/codec.h"
#include "wire/ctl.h"
#include "sys/err.h"
#include "wire/proto.h"
#include "pipeline/queue.h"
#include "transport/chan.h"

#define XFER_MAX_WAKERS (2 * PROTO_MAX_STREAMS + 8)

struct plan;

/* Something to wake on abort: fn(arg) must make every thread blocked on
 * it return promptly, and must be idempotent. */
struct xfer_waker {
	void (*fn)(void *arg);
	void *arg;
};

struct filter;

struct xfer {
	/* Set before source_run/sink_run; read-only afterwards. */
	unsigned streams;             /* data connections */
	uint32_t block_size;
	bool ordered;                 /* block k travels on stream k % streams */
	bool report;                  /* this side prints progress (the client) */
	unsigned progress_s;          /* 0: no progress lines */
	unsigned timeout_s;           /* how long to wait for the peer; 0: forever */
	uint64_t bwlimit;             /* source: bytes per second over all streams; 0: no cap */
	bool verify;                  /* sink, -e (PROTO_SYNC_VERIFY): files are read back */
	bool update;                  /* -u (PROTO_SYNC_UPDATE): the sink answers each ENTRIES
	                                 with HAVE, and the source waits for it before it reads */
	bool delete;                  /* sink, --delete (PROTO_SYNC_DELETE): each announced
	                                 directory loses what the source did not announce in it */
	bool checksum;                /* --checksum (PROTO_SYNC_CHECKSUM, with update): the sink
	                                 keeps nothing by size and time, and hashes what is
	                                 there (SUMS); the source sends matching blocks as
	                                 SAME */
	bool resume;                  /* -a (PROTO_SYNC_RESUME, with update): the sink keeps a
	                                 partial file and its journal for each big file until
	                                 it is in place, and sends SUMS of what an earlier run
	                                 left there; the source sends matching blocks as SAME */
	bool inplace;                 /* --inplace (PROTO_SYNC_INPLACE, with checksum): the sink
	                                 writes into a file already there, where it can */
	bool dry_run;                 /* -n (PROTO_SYNC_DRY_RUN): the sink changes nothing and
	                                 lists what it would do; the source sends no block */
	const struct filter *filter;  /* the REQUEST's rules, or NULL; borrowed. The sink's
	                                 --delete spares what they exclude */
	const char *peer;             /* the other side, for messages */
	bool peer_local;              /* the peer is our own child: its messages need no prefix */
	struct ctl *ctl;              /* borrowed; ctl_send is thread-safe */
	int sigfd;                    /* borrowed; -1 if signals are not ours */
	struct pc_err *err;           /* borrowed; first error wins */
	struct chan **data;           /* [streams]; borrowed, chan_abort on abort */
	/* source only: the listener's proof each data connection still owes,
	 * checked by its sender after the END block (auth_data_confirm); NULL
	 * when the listeners proved themselves already. Borrowed. */
	const uint8_t (*data_confirm)[PROTO_MAC_LEN];
	struct codec_choice choices[CODEC_MAX_CHOICES]; /* source: -c, one per stream or one */
	unsigned nchoices;            /* source: entries in choices (>= 1) */
	bool codec_auto;              /* source: -c auto */
	const struct pcopy_hooks *hooks; /* the client's display hooks; NULL: none. Borrowed */
	/* the owner (source or sink) names its oldest file in flight into
	 * buf[cap] ("" for none) and its size; control thread. NULL: none */
	void (*current)(void *owner, char *buf, size_t cap, uint64_t *size);
	void *owner;                  /* current's argument */
	uint32_t skip_paths;          /* sink: the peer may SKIP paths 0..skip_paths-1 of
	                                 its REQUEST (we are the client of a pull); 0: none */
	bool flat;                    /* sink, with skip_paths: the REQUEST is not recursive
	                                 (no -r), so each of those paths gives one entry or
	                                 one SKIP, and the walk is known done (the total
	                                 final) once that many came, before END */

	atomic_bool aborted;          /* set once by xfer_fail */
	int abort_efd;                /* eventfd, readable once aborted; owned */
	pthread_mutex_t lock;         /* guards the wakers */
	struct xfer_waker wakers[XFER_MAX_WAKERS]; /* guarded by lock */
	unsigned nwakers;             /* guarded by lock */

	atomic_uint_least64_t bytes;      /* payload bytes done, for progress */
	atomic_uint_least64_t wire_bytes; /* bytes on the data channels */
	atomic_uint_least64_t total;      /* bytes expected (0: unknown) */
	uint64_t start_ns;                /* set by xfer_init */
	uint64_t next_progress_ns;        /* control thread only */
	uint64_t next_hook_ns;            /* control thread only */
	uint64_t entries_total;           /* entries announced; control thread only */
	uint64_t entries_done;            /* entries finished; control thread only */
	bool walk_done;                   /* every entry announced; control thread only */
	atomic_uint unsized;              /* files announced with their size unknown whose
	                                     FILE_END has not come (source: been sent) */
};

/* After END, --timeout bounds the wait for the sink's last word: the
 * sink repeats its last ACK when it has sent none for a third of it (a
 * sign of life while it finishes its last files), and the source gives
 * up once it has heard nothing for all of it (PROTOCOL 4.9). 0: no
 * bound (--timeout 0). */
static inline uint64_t xfer_alive_ns(const struct xfer *x)
{
	return (uint64_t)x->timeout_s * 1000000000u / 3;
}

/* Whether the sink sends SUMS in this session (--checksum or -a) and the
 * source sends SAME blocks. */
static inline bool xfer_sums(const struct xfer *x)
{
	return x->checksum || x->resume;
}

/* Initialises the runtime part (lock, counters, clock, abort eventfd).
 * Return 0 or a negative code. */
int xfer_init(struct xfer *x);
void xfer_destroy(struct xfer *x);

/* Registers something to wake on abort. Call before starting the threads
 * that block on it. Returns 0 or -ENOMEM when the list is full. */
int xfer_on_abort(struct xfer *x, void (*fn)(void *arg), void *arg);
int xfer_watch_pool(struct xfer *x, struct bufpool *p);
int xfer_watch_queue(struct xfer *x, struct queue *q);
int xfer_watch_plan(struct xfer *x, struct plan *p);
/* Forgets every waker (call after joining the threads, before freeing). */
void xfer_unwatch(struct xfer *x);

/* A local failure: records the error (first one wins), tells the peer with
 * ERROR, and aborts: wakes the watched pool, queues and plan and aborts
 * the data channels (chan_abort). Thread-safe. Returns code. */
int xfer_fail(struct xfer *x, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The peer reported a fatal ERROR(code, msg): record it and abort, without
 * echoing it back. Returns the code (a valid negative code). */
int xfer_fail_peer(struct xfer *x, int code, const char *msg);

/* After an abort caused by a broken connection, the peer's own ERROR
 * message (sent just before it closed) usually says more ("No space left
 * on device" beats "connection reset"). Waits briefly for it on the control
 * channel and lets it replace a network-class error. Control thread only. */
void xfer_await_peer_error(struct xfer *x);

static inline bool xfer_aborted(struct xfer *x)
{
	return atomic_load_explicit(&x->aborted, memory_order_acquire);
}

/* Milliseconds the control thread may sleep in poll before the next
 * progress line is due (-1: no progress lines). */
int xfer_poll_timeout(struct xfer *x);

/* Prints a progress line if one is due, and calls the hooks' progress
 * callback if it is due. Control thread only. */
void xfer_progress(struct xfer *x);

/* One entry not copied, reported on this side (x->report): passes path
 * (NULL when not known here), reason and skipped (the source never sent
 * it) to the hooks' failed callback.
 * Any thread. */
void xfer_failed(struct xfer *x, const char *path, const char *reason, bool skipped);

/* One line of the listing, on the client (x->report): passes what
 * (PROTO_LIST_*) and path to the hooks' listed callback. Control thread. */
void xfer_listed(struct xfer *x, uint8_t what, const char *path);

/* Handles a readable signalfd: reads the signal and fails the transfer with
 * -PC_E_INTERRUPTED. Control thread only. */
void xfer_on_signal(struct xfer *x);

/* Waits for the peer's next control message, which must be of type want
 * (an ERROR is the peer's failure), while watching the signalfd and
 * x->timeout_s: a silent peer behind a dead path, or a Ctrl-C, ends the
 * wait. Control thread only. Returns 0 or a negative code (x->err set). */
int xfer_await(struct xfer *x, uint8_t want, struct proto_msg *m);

/* Fills this side's totals (CPU and memory from getrusage). */
void xfer_stats(struct xfer *x, uint64_t files, struct proto_stats *st);

#endif
