/* SPDX-License-Identifier: Apache-2.0 */
/* source: readers -> queues -> senders, driven by a control loop. */
#include "pipeline/source.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/auth.h"
#include "sys/log.h"
#include "sys/net.h"
#include "pipeline/plan.h"
#include "sys/platform.h"

#define SOURCE_MAX_INFLIGHT 64u  /* files announced and not yet done */
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
};

struct reader {
	struct source *s;
	struct encoder *enc;       /* this thread only */
	pthread_t tid;
};

/* -c auto climbs and descends this ladder (docs/DESIGN-NOTES.md). */
static const struct codec_choice source_ladder[] = {
	{ CODEC_NONE, 0 }, { CODEC_LZ4, 1 }, { CODEC_ZLIB, 1 }, { CODEC_ZLIB, 3 }, { CODEC_ZLIB, 6 },
};
#define SOURCE_LADDER_LEN (sizeof(source_ladder) / sizeof(source_ladder[0]))

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
	struct src_file *files;    /* [n], borrowed */
	unsigned n;
	const struct source_skip *skips; /* [nskips], borrowed: sent before any ENTRIES */
	unsigned nskips;
	struct plan *plan;
	struct bufpool *pool;
	struct queue *q[PROTO_MAX_STREAMS]; /* [nq]: one shared, or one per stream if ordered */
	unsigned nq;
	unsigned nreaders;
	struct reader readers[SOURCE_MAX_READERS];
	struct sender senders[PROTO_MAX_STREAMS];
	bool per_stream;           /* block k goes to stream k % N (ordered, or per-stream codecs) */
	size_t buf_cap;            /* pool buffer size: the block or its worst encoding */
	atomic_int step;           /* -c auto: index into source_ladder */
	atomic_uint_least64_t send_idle_ns;  /* senders waiting for blocks */
	struct autoctl autoc;
	atomic_uint senders_left;  /* senders that have not yet finished their stream */
	int efd;                   /* eventfd: the last sender finished */
	/* control thread only: */
	bool end_sent;
	unsigned announced, failed;
	unsigned done;             /* the sink's last ACK: ids below it are finished */
	uint64_t codec_cpu_us;     /* summed from the readers after join */
	bool *finished;            /* [n] FILE_DONE (a failure) seen */
	struct proto_entry ent;    /* the entry being announced */
	struct proto_batch batch;  /* its ENTRIES (one entry each, for now) */
};

/* True if [off, off+len) of f holds no data (a hole). */
static bool source_is_hole(const struct src_file *f, uint64_t off, uint32_t len)
{
	off_t d = lseek(f->fd, (off_t)off, SEEK_DATA);

	if (d < 0)
		return errno == ENXIO;
	return (uint64_t)d >= off + len;
}

static int source_read_block(struct source *s, const struct plan_claim *c, struct buf *b)
{
	struct src_file *f = c->f;
	size_t got = 0;

	b->hdr.raw_len = c->len;
	if (f->sparse && source_is_hole(f, c->offset, c->len)) {
		b->hdr.flags = PROTO_BLK_HOLE;
		return 1;
	}
	while (got < c->len) {
		ssize_t r = pread(f->fd, b->data + got, c->len - got, (off_t)(c->offset + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return xfer_fail(s->x, -errno, "reading '%s': %s", f->display, strerror(errno));
		if (r == 0)
			return xfer_fail(s->x, -PC_E_FILEIO, "'%s' shrank while it was being copied",
					 f->display);
		got += (size_t)r;
	}
	b->len = got;
	return 1;
}

/* Reads the next piece of a stream. Returns 1 (a block to send), 0 (the
 * stream ended with nothing more), or a negative code. */
static int source_read_stream(struct source *s, const struct plan_claim *c, struct buf *b)
{
	struct src_file *f = c->f;
	size_t got = 0;
	bool eof = false;

	while (got < c->len) {
		/* A stream can stay silent forever: wait on it and on the
		 * abort switch, so Ctrl-C is not stuck behind a read. */
		struct pollfd p[2] = { { .fd = f->fd, .events = POLLIN },
				       { .fd = s->x->abort_efd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return xfer_fail(s->x, -errno, "poll: %s", strerror(errno));
		if (p[1].revents) {
			plan_stream_done(s->plan, c, 0, true);
			return -PC_E_ABORTED;
		}
		ssize_t r = read(f->fd, b->data + got, c->len - got);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0) {
			int ret = -errno;
			plan_stream_done(s->plan, c, 0, true);
			return xfer_fail(s->x, ret, "reading '%s': %s", f->display, strerror(-ret));
		}
		if (r == 0) {
			eof = true;
			break;
		}
		got += (size_t)r;
	}
	plan_stream_done(s->plan, c, (uint32_t)got, eof);
	if (eof) {
		struct proto_msg m = { .type = PROTO_FILE_END };
		m.u.file_end.id = f->id;
		m.u.file_end.size = c->offset + got;
		int ret = ctl_send(s->x->ctl, &m);
		if (ret < 0)
			return xfer_fail(s->x, ret, "lost control connection to %s", s->x->peer);
	}
	b->len = got;
	b->hdr.raw_len = (uint32_t)got;
	return got > 0 ? 1 : 0;
}

/* Which queue a block goes to, and how it is encoded. */
static const struct codec_choice *source_choice(struct source *s, uint64_t seq, unsigned *qi)
{
	struct xfer *x = s->x;

	if (s->per_stream) {
		*qi = (unsigned)(seq % x->streams);
		return &x->choices[*qi % x->nchoices];
	}
	*qi = 0;
	if (x->codec_auto)
		return &source_ladder[atomic_load_explicit(&s->step, memory_order_relaxed)];
	return &x->choices[0];
}

/* Encodes b with choice (encoder_run). A failure is a local one, of the
 * codec on this machine (out of memory, in practice), not of the network:
 * it is recorded as -PC_E_CODEC, naming the codec and the file, before the
 * caller lets go of anything whose failure would say less. Returns 0 or
 * -PC_E_CODEC (the transfer is aborted then). */
static int source_encode(struct source *s, struct encoder *enc, struct buf *b,
			 const struct codec_choice *choice, struct src_file *f)
{
	char name[32];
	int ret = encoder_run(enc, b, choice, &f->enc);

	if (ret == 0)
		return 0;
	codec_format(choice, name, sizeof(name));
	return xfer_fail(s->x, -PC_E_CODEC, "compressing '%s' with %s failed: %s", f->display,
			 name, pc_strerror(ret));
}

/* Reads, checksums and encodes one claimed block into b. Returns 1 (send
 * it), 0 (nothing to send), or a negative code. */
static int source_fill(struct reader *r, const struct plan_claim *c, struct buf *b,
		       const struct codec_choice *choice)
{
	struct source *s = r->s;
	int ret;

	b->hdr.type = PROTO_BLK_DATA;
	b->hdr.file_id = c->f->id;
	b->hdr.offset = c->offset;
	b->hdr.seq = c->seq;
	b->ctx = c->f;
	ret = c->f->stream ? source_read_stream(s, c, b) : source_read_block(s, c, b);
	if (ret <= 0 || (b->hdr.flags & PROTO_BLK_HOLE))
		return ret;
	b->hdr.checksum = proto_checksum(b->data, b->len);
	ret = source_encode(s, r->enc, b, choice, c->f);
	b->untried = choice->id == CODEC_NONE && !(b->hdr.flags & PROTO_BLK_HOLE);
	if (ret < 0)
		return ret;
	if (b->hdr.flags & PROTO_BLK_HOLE)
		b->hdr.checksum = 0;
	return 1;
}

static void *source_reader(void *arg)
{
	struct reader *r = arg;
	struct source *s = r->s;
	struct xfer *x = s->x;
	struct plan_claim c;

	while (!xfer_aborted(x) && plan_next(s->plan, &c) == 1) {
		struct buf *b = bufpool_acquire(s->pool);
		if (b == NULL) {
			if (c.f->stream)
				plan_stream_done(s->plan, &c, 0, true);
			break;
		}
		unsigned qi;
		const struct codec_choice *choice = source_choice(s, c.seq, &qi);
		int ret = source_fill(r, &c, b, choice);
		if (ret <= 0) {
			bufpool_release(s->pool, b);
			if (ret < 0)
				break;
			continue;
		}
		ret = queue_push(s->q[qi], b);
		if (ret < 0) {
			bufpool_release(s->pool, b);
			break;
		}
	}
	for (unsigned i = 0; i < s->nq; i++)
		queue_close(s->q[i]);
	return NULL;
}

static int source_send(int fd, const struct proto_block *h, const void *data, size_t len)
{
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)(uintptr_t)data, len } };

	proto_block_encode(h, hdr);
	return net_sendv_full(fd, iov, len ? 2 : 1);
}

static void *source_sender(void *arg)
{
	struct sender *w = arg;
	struct source *s = w->s;
	struct xfer *x = s->x;
	struct queue *q = s->q[s->per_stream ? w->idx : 0];
	int fd = x->data_fds[w->idx], ret = 0;
	struct buf *b;

	for (;;) {
		uint64_t t0 = platform_now_ns();
		b = queue_pop(q);
		atomic_fetch_add_explicit(&s->send_idle_ns, platform_now_ns() - t0,
					  memory_order_relaxed);
		if (b == NULL)
			break;
		struct src_file *f = b->ctx;
		/* Blocks of a file the sink gave up on are dropped, except in
		 * ordered mode where every sequence number must arrive. */
		if (!x->ordered && atomic_load(&f->failed)) {
			bufpool_release(s->pool, b);
			continue;
		}
		/* -c auto: a block read before auto chose to compress has waited
		 * in the pipeline meanwhile; compress it now, at today's level. */
		int step = atomic_load_explicit(&s->step, memory_order_relaxed);
		if (b->untried && step > 0 && w->enc != NULL &&
		    source_encode(s, w->enc, b, &source_ladder[step], f) < 0) {
			/* Our codec failed, not the connection: say so. */
			bufpool_release(s->pool, b);
			return NULL;
		}
		ret = source_send(fd, &b->hdr, b->data, b->len);
		uint64_t raw = b->hdr.raw_len, wire = PROTO_BLOCK_HDR_LEN + b->len;
		bufpool_release(s->pool, b);
		if (ret < 0)
			break;
		atomic_fetch_add(&x->bytes, raw);
		atomic_fetch_add(&x->wire_bytes, wire);
		w->raw += raw;
		w->wire += wire;
	}
	if (ret == 0 && !xfer_aborted(x)) {
		struct proto_block end = { .type = PROTO_BLK_END };
		ret = source_send(fd, &end, NULL, 0);
	}
	/* The listener's proof has waited in the socket since the first
	 * round trip; the stream is not done until it is checked. */
	if (ret == 0 && !xfer_aborted(x) && x->data_confirm != NULL) {
		ret = auth_data_confirm(fd, x->data_confirm[w->idx]);
		if (ret == -PC_E_AUTH) {
			xfer_fail(x, ret, "data connection %u to %s: the listener could not prove it "
				  "knows the session key", w->idx, x->peer);
			return NULL;
		}
	}
	if (ret < 0) {
		xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
			  "lost data connection %u to %s: %s", w->idx, x->peer, pc_strerror(ret));
	} else if (!xfer_aborted(x) && atomic_fetch_sub(&s->senders_left, 1) == 1) {
		ret = platform_event_signal(s->efd);
		if (ret < 0)
			xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
	}
	return NULL;
}

static int source_announce(struct source *s)
{
	struct src_file *f = &s->files[s->announced];
	struct proto_entry *e = &s->ent;
	struct proto_msg m;
	int ret;

	f->id = s->announced;
	memset(e, 0, sizeof(*e));
	e->type = PROTO_ENT_REG;
	e->flags = f->stream ? PROTO_ENT_SIZE_UNKNOWN : 0;
	e->size = f->size;
	e->mode = f->mode;
	e->mtime_s = f->mtime_s;
	e->mtime_ns = f->mtime_ns;
	memcpy(e->path, f->name, sizeof(e->path));
	proto_batch_init(&s->batch, f->id);
	ret = proto_batch_add(&s->batch, e);
	if (ret < 0)
		return xfer_fail(s->x, -PC_E_PROTO, "cannot announce '%s': its name or "
				 "attributes cannot be sent", f->display);
	proto_batch_msg(&s->batch, &m);
	ret = ctl_send(s->x->ctl, &m);
	if (ret < 0)
		return xfer_fail(s->x, ret, "lost control connection to %s", s->x->peer);
	atomic_fetch_add(&s->x->total, f->size);
	s->announced++;
	plan_add(s->plan, f);
	return 0;
}

/* A failed file. It comes before the ACK that covers its id. */
static int source_on_file_done(struct source *s, const struct proto_file_done *d)
{
	struct xfer *x = s->x;
	struct src_file *f;

	if (d->id >= s->announced || d->id < s->done || s->finished[d->id])
		return xfer_fail(x, -PC_E_PROTO, "%s reported an unknown file id %u", x->peer,
				 (unsigned)d->id);
	s->finished[d->id] = true;
	f = &s->files[d->id];
	atomic_store(&f->failed, true);
	s->failed++;
	if (x->report)
		log_error("%s", d->msg[0] ? d->msg : pc_strerror(d->status));
	return 0;
}

/* Every file below a->upto is finished: it frees the in-flight window. */
static int source_on_ack(struct source *s, const struct proto_ack *a)
{
	struct xfer *x = s->x;

	if (a->upto < s->done || a->upto > s->announced)
		return xfer_fail(x, -PC_E_PROTO, "%s acknowledged files up to id %u, %s", x->peer,
				 (unsigned)a->upto, a->upto < s->done ? "below its last ACK"
				 : "more than were announced");
	s->done = a->upto;
	return 0;
}

static int source_on_message(struct source *s)
{
	struct proto_msg m;
	int ret = ctl_recv(s->x->ctl, &m);

	if (ret < 0)
		return xfer_fail(s->x, ret == -PC_E_PROTO ? ret : -PC_E_NET,
				 "lost control connection to %s: %s", s->x->peer, pc_strerror(ret));
	switch (m.type) {
	case PROTO_FILE_DONE:
		return source_on_file_done(s, &m.u.file_done);
	case PROTO_ACK:
		return source_on_ack(s, &m.u.ack);
	case PROTO_ERROR:
		return xfer_fail_peer(s->x, m.u.error.code, m.u.error.msg);
	default:
		return xfer_fail(s->x, -PC_E_PROTO, "%s sent %s during the transfer", s->x->peer,
				 proto_type_name(m.type));
	}
}

/* Bytes in the data sockets' send queues (not yet acknowledged), and of
 * those the bytes not even sent: data the network has not taken yet. */
static uint64_t source_queued(const struct xfer *x, uint64_t *unsent)
{
	uint64_t q = 0;

	*unsent = 0;
	for (unsigned i = 0; i < x->streams; i++) {
		q += net_send_queued(x->data_fds[i]);
		*unsent += net_send_unsent(x->data_fds[i]);
	}
	return q;
}

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
static void source_auto_tick(struct source *s, uint64_t now)
{
	struct xfer *x = s->x;
	struct autoctl *a = &s->autoc;
	uint64_t raw = atomic_load(&x->bytes), wire = atomic_load(&x->wire_bytes);
	uint64_t unsent, sidle = atomic_load(&s->send_idle_ns), queued = source_queued(x, &unsent);
	double dt = (double)(now - a->last_ns);
	double dwire = (double)(wire - a->last_wire), draw = (double)(raw - a->last_bytes);
	/* Wire bytes that left the queues, in file bytes at this interval's ratio. */
	double left = dwire - ((double)queued - (double)a->last_queued);
	double rate = (dwire > 0 ? left * draw / dwire : 0) * 1e9 / dt;
	double starve = (double)(sidle - a->last_idle) / (dt * x->streams);
	/* With TCP_NOTSENT_LOWAT, unsent data sits near the mark while the
	 * network cannot keep up, and near zero while it can. */
	bool netbound = unsent > (uint64_t)x->streams * (SOURCE_AUTO_LOWAT / 2);
	int step = atomic_load(&s->step), move = 0;
	uint64_t idle = 0, total = 0;
	double spare = 1.0;

	/* Compressing more only pays if the CPU has room for it: on a busy
	 * machine (loopback, or a loaded host) it slows the whole pipeline. */
	if (platform_cpu_times(&idle, &total) == 0 && total > a->cpu_total)
		spare = (double)(idle - a->cpu_idle) / (double)(total - a->cpu_total);
	a->cpu_idle = idle;
	a->cpu_total = total;
	a->want_up = netbound && starve < 0.10 && spare > 0.25 ? a->want_up + 1 : 0;
	/* While the queues stay full the network is still the bottleneck, and
	 * a step up cannot have cost throughput; the rate (noisy while the
	 * queues fill and drain) only judges moves once they are not. */
	if (a->last_move != 0 && !(a->last_move > 0 && netbound) && rate < 0.9 * a->last_rate) {
		/* The move cost throughput: undo it, and wait longer each time
		 * before trying again, so a losing move is rarely retried. */
		step -= a->last_move;
		log_debug("auto: %.0f MB/s after the last move, %.0f before: undone", rate / 1e6,
			  a->last_rate / 1e6);
		a->hold = a->penalty;
		a->penalty = a->penalty < 64 ? a->penalty * 2 : 64;
	} else if (a->hold > 0) {
		a->hold--;
	} else if (a->want_up >= 1 && step + 1 < (int)SOURCE_LADDER_LEN) {
		move = 1;
		a->want_up = 0;
	} else if (starve > 0.25 && !netbound && step > 0) {
		move = -1;
	}
	if (move != 0 || a->last_move == 0)
		a->last_rate = rate;
	a->last_move = move;
	atomic_store(&s->step, step + move);
	if (move != 0 && log_level() >= LOG_DEBUG) {
		char name[32];
		codec_format(&source_ladder[step + move], name, sizeof(name));
		log_debug("auto: %.0f ms in, %.0f MB/s, %.1f MiB unsent, senders idle %.0f%%, "
			  "cpu idle %.0f%% -> %s", (double)(now - x->start_ns) / 1e6, rate / 1e6,
			  (double)unsent / 1048576.0, starve * 100, spare * 100, name);
	}
	a->last_ns = now;
	a->last_bytes = raw;
	a->last_wire = wire;
	a->last_queued = queued;
	a->last_idle = sidle;
	a->next_ns = now + SOURCE_AUTO_TICK_NS;
}

static int source_poll_timeout(struct source *s)
{
	int t = xfer_poll_timeout(s->x);
	uint64_t now;

	if (!s->x->codec_auto)
		return t;
	now = platform_now_ns();
	int a = now >= s->autoc.next_ns ? 0 : (int)((s->autoc.next_ns - now) / 1000000u) + 1;
	return t < 0 || a < t ? a : t;
}

/* CPU time the encoders spent so far. Their threads have finished, or
 * (after join) are gone: senders_left reaching 0 orders their last
 * writes before this. */
static uint64_t source_codec_cpu_ns(const struct source *s)
{
	uint64_t ns = 0;

	for (unsigned i = 0; i < s->nreaders; i++)
		ns += encoder_stats(s->readers[i].enc)->cpu_ns;
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		if (s->senders[i].enc != NULL)
			ns += encoder_stats(s->senders[i].enc)->cpu_ns;
	return ns;
}

/* Every sender wrote its END block and confirmed its listener: send END
 * now, without waiting for the last ACK, so that the sink's DONE
 * follows its last ACK at once instead of a round trip later. */
static int source_send_end(struct source *s)
{
	struct xfer *x = s->x;
	struct proto_msg m = { .type = PROTO_END };
	int ret = platform_event_drain(s->efd);

	if (ret < 0)
		return xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
	if (s->end_sent || atomic_load(&s->senders_left) != 0)
		return 0;
	xfer_stats(x, s->n - s->failed, &m.u.stats);
	m.u.stats.codec_cpu_us = source_codec_cpu_ns(s) / 1000u;
	if (ctl_send(x->ctl, &m) < 0)
		return xfer_fail(x, -PC_E_NET, "lost control connection to %s", x->peer);
	s->end_sent = true;
	return 0;
}

/* Tells the sink about every source that could not be opened, before the
 * first ENTRIES. Returns 0 or a negative code (the transfer has failed). */
static int source_send_skips(struct source *s)
{
	struct proto_msg m = { .type = PROTO_SKIP };

	for (unsigned i = 0; i < s->nskips; i++) {
		m.u.skip.index = s->skips[i].index;
		m.u.skip.status = s->skips[i].code;
		memcpy(m.u.skip.msg, s->skips[i].msg, sizeof(m.u.skip.msg));
		int ret = ctl_send(s->x->ctl, &m);
		if (ret < 0)
			return xfer_fail(s->x, ret, "lost control connection to %s", s->x->peer);
	}
	return 0;
}

/* Reports the skipped sources, announces files within the in-flight
 * window, sends END once every stream is done, and waits for ACKs and FILE_DONEs
 * until every file is done or the transfer aborts. */
static void source_control(struct source *s)
{
	struct xfer *x = s->x;
	struct pollfd p[3] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = s->efd, .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };

	if (source_send_skips(s) < 0)
		return;
	while (!xfer_aborted(x) && !(s->end_sent && s->done == s->n)) {
		while (s->announced < s->n && s->announced - s->done < SOURCE_MAX_INFLIGHT)
			if (source_announce(s) < 0)
				return;
		if (s->announced == s->n)
			plan_finish(s->plan);
		if (ctl_pending(x->ctl)) { /* only a confused sink speaks first */
			(void)source_on_message(s);
			continue;
		}
		int n = poll(p, x->sigfd >= 0 ? 3 : 2, source_poll_timeout(s));
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		if (n > 0 && (p[2].revents & POLLIN))
			xfer_on_signal(x);
		else if (n > 0 && (p[1].revents & POLLIN))
			(void)source_send_end(s);
		else if (n > 0 && p[0].revents)
			(void)source_on_message(s);
		if (x->codec_auto && platform_now_ns() >= s->autoc.next_ns)
			source_auto_tick(s, platform_now_ns());
		xfer_progress(x);
	}
}

/* Sizes the pipeline: readers, queues, buffers. */
static void source_size(struct source *s, unsigned *nreaders, unsigned *count)
{
	struct xfer *x = s->x;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	bool compress = x->codec_auto;

	s->buf_cap = x->block_size;
	for (unsigned i = 0; i < x->nchoices; i++) {
		const struct codec *c = codec_by_id(x->choices[i].id);
		compress |= x->choices[i].id != CODEC_NONE;
		if (c->bound(x->block_size) > s->buf_cap)
			s->buf_cap = c->bound(x->block_size);
	}
	for (unsigned i = 0; x->codec_auto && i < SOURCE_LADDER_LEN; i++) {
		size_t b = codec_by_id(source_ladder[i].id)->bound(x->block_size);
		s->buf_cap = b > s->buf_cap ? b : s->buf_cap;
	}
	/* Compression is CPU work: one reader per core. Without it, two
	 * readers keep the disk and the checksum busy. */
	*nreaders = compress && cores > 2 ? (unsigned)cores : 2;
	if (*nreaders > SOURCE_MAX_READERS)
		*nreaders = SOURCE_MAX_READERS;
	s->per_stream = x->ordered || x->nchoices > 1;
	for (unsigned i = 0; i < s->n; i++)
		if (s->files[i].stream || x->ordered)
			*nreaders = 1; /* a stream, or an order, wants one reader */
	/* Enough buffers that every queue, sender and reader can hold its
	 * share at once: with per-stream queues that rules out a deadlock. */
	*count = x->streams * 3 + *nreaders * 2 + 2;
	s->nq = s->per_stream ? x->streams : 1;
}

static int source_start(struct source *s)
{
	struct xfer *x = s->x;
	unsigned nreaders, count;
	int rc;

	source_size(s, &nreaders, &count);
	atomic_init(&s->step, 0); /* auto starts uncompressed and climbs if the network is slow */
	s->autoc.penalty = 4;
	(void)platform_cpu_times(&s->autoc.cpu_idle, &s->autoc.cpu_total);
	atomic_init(&s->send_idle_ns, 0);
	s->autoc.last_ns = platform_now_ns();
	s->autoc.next_ns = s->autoc.last_ns + SOURCE_AUTO_TICK_NS;
	atomic_init(&s->senders_left, x->streams);
	s->efd = platform_event_new();
	if (s->efd < 0)
		return xfer_fail(x, s->efd, "eventfd: %s", strerror(-s->efd));
	s->plan = plan_new(x->block_size, s->n);
	s->pool = bufpool_new(count, s->buf_cap);
	s->finished = calloc(s->n ? s->n : 1, sizeof(bool));
	if (s->plan == NULL || s->pool == NULL || s->finished == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory for %u buffers of %zu bytes", count,
				 s->buf_cap);
	for (unsigned i = 0; i < s->nq; i++) {
		s->q[i] = queue_new(s->per_stream ? 2 : count, nreaders);
		if (s->q[i] == NULL || xfer_watch_queue(x, s->q[i]) < 0)
			return xfer_fail(x, -ENOMEM, "out of memory");
	}
	if (xfer_watch_pool(x, s->pool) < 0 || xfer_watch_plan(x, s->plan) < 0)
		return xfer_fail(x, -ENOMEM, "out of memory");
	/* -c auto decides per block: keep the kernel's unsent backlog short,
	 * so that a decision to compress reaches the wire quickly. Best
	 * effort: without it auto still works, only later. */
	for (unsigned i = 0; x->codec_auto && i < x->streams; i++)
		(void)net_set_notsent_lowat(x->data_fds[i], SOURCE_AUTO_LOWAT);
	/* From here a failure aborts the queues and the plan, which is what
	 * releases the threads already started. A sender is joined only if
	 * its thread started (`started`); its encoder may exist without the
	 * thread, and source_stop frees it either way. */
	for (unsigned i = 0; i < x->streams; i++) {
		struct sender *w = &s->senders[i];
		*w = (struct sender){ .s = s, .idx = i };
		if (x->codec_auto && (w->enc = encoder_new(s->buf_cap)) == NULL)
			return xfer_fail(x, -ENOMEM, "out of memory for the compressor of data "
					 "stream %u", i);
		rc = pthread_create(&w->tid, NULL, source_sender, w);
		if (rc != 0)
			return xfer_fail(x, -rc, "cannot start sender thread: %s", strerror(rc));
		w->started = true;
	}
	for (unsigned i = 0; i < nreaders; i++) {
		struct reader *r = &s->readers[i];
		r->s = s;
		r->enc = encoder_new(s->buf_cap);
		if (r->enc == NULL)
			return xfer_fail(x, -ENOMEM, "out of memory for the encoder of reader %u",
					 i);
		rc = pthread_create(&r->tid, NULL, source_reader, r);
		if (rc != 0) {
			encoder_free(r->enc);
			r->enc = NULL;
			return xfer_fail(x, -rc, "cannot start reader thread: %s", strerror(rc));
		}
		s->nreaders++;
	}
	return 0;
}

/* Joins the threads, collects their statistics, frees the pipeline. */
static void source_stop(struct source *s, struct source_result *r)
{
	struct xfer *x = s->x;
	struct buf *b;

	for (unsigned i = 0; i < s->nreaders; i++) {
		struct reader *rd = &s->readers[i];
		if (pthread_join(rd->tid, NULL) != 0)
			log_error("cannot join reader thread");
		const struct enc_stats *st = encoder_stats(rd->enc);
		r->holes += st->holes;
		r->compressed += st->compressed;
		r->raw_blocks += st->raw;
	}
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		if (!s->senders[i].started)
			continue;
		if (pthread_join(s->senders[i].tid, NULL) != 0)
			log_error("cannot join sender thread");
		if (s->senders[i].enc != NULL) {
			const struct enc_stats *st = encoder_stats(s->senders[i].enc);
			r->compressed += st->compressed;
			r->raw_blocks += st->raw;
		}
		r->stream[i].raw = s->senders[i].raw;
		r->stream[i].wire = s->senders[i].wire;
		r->stream[i].choice = x->codec_auto ? source_ladder[atomic_load(&s->step)]
						    : x->choices[s->per_stream ? i % x->nchoices : 0];
	}
	s->codec_cpu_us = source_codec_cpu_ns(s) / 1000u;
	for (unsigned i = 0; i < s->nreaders; i++)
		encoder_free(s->readers[i].enc);
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		encoder_free(s->senders[i].enc);
	log_debug("blocks: %llu compressed, %llu raw, %llu holes", (unsigned long long)r->compressed,
		  (unsigned long long)r->raw_blocks, (unsigned long long)r->holes);
	xfer_unwatch(x);
	for (unsigned i = 0; i < s->nq; i++) {
		while (s->q[i] != NULL && (b = queue_trypop(s->q[i])) != NULL)
			bufpool_release(s->pool, b);
		queue_free(s->q[i]);
	}
	bufpool_free(s->pool);
	plan_free(s->plan);
	free(s->finished);
	if (s->efd >= 0)
		close(s->efd);
}

/* END went out from the control loop; the sink's DONE ends the session. */
static int source_finish(struct source *s, struct source_result *r)
{
	struct xfer *x = s->x;
	struct proto_msg m;
	int ret = xfer_await(x, PROTO_DONE, &m);

	if (ret < 0)
		return ret;
	r->peer = m.u.stats;
	xfer_stats(x, s->done - s->failed, &r->self);
	r->self.codec_cpu_us = s->codec_cpu_us;
	return 0;
}

int source_run(struct xfer *x, struct src_file *files, unsigned n,
	       const struct source_skip *skips, unsigned nskips, struct source_result *r)
{
	struct source *s = calloc(1, sizeof(*s));
	int ret;

	memset(r, 0, sizeof(*r));
	if (s == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->x = x;
	s->files = files;
	s->n = n;
	s->skips = skips;
	s->nskips = nskips;
	s->efd = -1;
	if (source_start(s) == 0)
		source_control(s);
	source_stop(s, r);
	if (xfer_aborted(x)) {
		xfer_await_peer_error(x);
		ret = pc_err_get(x->err, NULL, 0);
	} else {
		ret = source_finish(s, r);
	}
	r->failed = s->failed;
	r->skipped = nskips;
	free(s);
	if (ret == 0 && (r->failed > 0 || r->skipped > 0))
		ret = -PC_E_PARTIAL;
	return ret;
}
