/* SPDX-License-Identifier: Apache-2.0 */
/* source: readers -> queues -> senders, driven by a control loop. */
#include "pipeline/source.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/auth.h"
#include "wire/pathsafe.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "sys/net.h"
#include "sys/sync.h"
#include "pipeline/plan.h"
#include "pipeline/srcrec.h"
#include "sys/platform.h"

/* Entries announced and not yet acknowledged by the sink: enough to fill
 * packs and keep a long fat pipe busy with small files, far below what a
 * sink accepts (PROTO_MAX_INFLIGHT). */
#define SOURCE_WINDOW 16384u
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
	struct src_rec *recs[PLAN_PACK_MAX_RECS]; /* this thread only: a pack claim's files */
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
	const struct source_input *in;
	struct plan *plan;
	struct bufpool *pool;
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
	uint32_t next_id;          /* ids handed out */
	uint32_t announced;        /* ids sent in ENTRIES */
	uint32_t acked;            /* the sink's ACK */
	uint8_t done_bits[SOURCE_WINDOW / 8]; /* FILE_DONE seen, by id % SOURCE_WINDOW */
	bool end_sent, plan_finished;
	unsigned failed, skipped;
	uint64_t files, dirs, links;
	uint64_t codec_cpu_us;     /* summed from the readers after join */
};

/* Gives up on f, once, and reports it here if we are the client. With
 * tell, tells the sink (FILE_FAIL), which drops it and answers with
 * FILE_DONE; without, the caller tells it (a PACK status). The session
 * goes on. Any thread. */
static void source_give_up(struct source *s, struct src_rec *f, bool tell, int code,
			   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void source_give_up(struct source *s, struct src_rec *f, bool tell, int code,
			   const char *fmt, ...)
{
	struct proto_msg m = { .type = PROTO_FILE_FAIL };
	bool was = false;
	va_list ap;

	if (!atomic_compare_exchange_strong(&f->failed, &was, true))
		return;
	atomic_fetch_add(&s->local_failed, 1);
	m.u.file_fail.id = f->id;
	m.u.file_fail.status = code;
	va_start(ap, fmt);
	vsnprintf(m.u.file_fail.msg, sizeof(m.u.file_fail.msg), fmt, ap);
	va_end(ap);
	if (s->x->report)
		log_error("%s", m.u.file_fail.msg);
	if (tell && ctl_send(s->x->ctl, &m) < 0)
		xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
}

/* Opens a file for reading, beneath its source's directory, never
 * following a symlink in its place (unless -L): the tree may change while
 * we copy it. Returns an fd or -errno. */
static int source_open_path(struct source *s, const struct src_rec *f)
{
	if (fault_fire(FAULT_SOURCE_OPEN))
		return -EACCES;
	/* -L, or a source symlink followed without -r: through symlinks,
	 * still beneath a daemon's root. */
	if (s->in->walk.deref || !s->in->walk.recursive)
		return pathsafe_open(f->base_fd, f->open_path, O_RDONLY, 0, s->in->beneath);
	return pathsafe_open(f->base_fd, f->open_path, O_RDONLY | O_NOFOLLOW, 0, true);
}

/* The first reader of a DATA file opens it. Returns 0 or a negative code
 * (the file has been given up). */
static int source_ensure_open(struct source *s, struct src_rec *f)
{
	bool first = false;
	int fd = 0;

	sync_lock(&s->open_lock);
	if (f->fd < 0 && !f->open_failed) {
		first = true;
		fd = source_open_path(s, f);
		if (fd >= 0) {
			f->fd = fd;
			f->own_fd = true;
		} else {
			f->open_failed = true;
		}
	} else if (f->open_failed) {
		fd = -ENOENT; /* reported by the first reader */
	}
	sync_unlock(&s->open_lock);
	if (first && fd == -ENOENT)
		source_give_up(s, f, true, fd, "'%s' vanished before it could be copied", f->display);
	else if (first && fd < 0)
		source_give_up(s, f, true, fd, "cannot open '%s': %s", f->display, pc_strerror(fd));
	return fd < 0 ? fd : 0;
}

/* True if [off, off+len) of fd holds no data (a hole). */
static bool source_is_hole(int fd, uint64_t off, uint32_t len)
{
	off_t d = lseek(fd, (off_t)off, SEEK_DATA);

	if (d < 0)
		return errno == ENXIO;
	return (uint64_t)d >= off + len;
}

/* Reads len bytes at off. Returns the bytes read (fewer only at EOF) or
 * -errno. */
static ssize_t source_pread(int fd, uint8_t *p, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = pread(fd, p + got, len - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Reads a block of a regular file. Returns 1 (send it), 0 (the file was
 * given up: drop the block), or a negative code. */
static int source_read_block(struct source *s, const struct plan_claim *c, struct buf *b)
{
	struct src_rec *f = c->f;
	ssize_t got;

	b->hdr.raw_len = c->len;
	if (f->sparse && source_is_hole(f->fd, c->offset, c->len)) {
		b->hdr.flags = PROTO_BLK_HOLE;
		return 1;
	}
	got = source_pread(f->fd, b->data, c->len, c->offset);
	if (got < 0) {
		source_give_up(s, f, true, (int)got, "reading '%s': %s", f->display,
				pc_strerror((int)got));
		return 0;
	}
	if ((size_t)got < c->len) {
		source_give_up(s, f, true, -PC_E_FILEIO, "'%s' shrank while it was being copied (it "
				"ends before %llu of the %llu bytes announced)", f->display,
				(unsigned long long)(c->offset + c->len), (unsigned long long)f->size);
		return 0;
	}
	b->len = (size_t)got;
	return 1;
}

/* Reads the next piece of a stream. Returns 1 (a block to send), 0 (the
 * stream ended with nothing more), or a negative code. */
static int source_read_stream(struct source *s, const struct plan_claim *c, struct buf *b)
{
	struct src_rec *f = c->f;
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

static void source_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Reads one small file whole into p (f->size bytes). Returns 0, or the
 * negative status to put in the pack for it (it has been reported). */
static int source_read_small(struct source *s, struct src_rec *f, uint8_t *p)
{
	int fd = source_open_path(s, f);
	ssize_t got;

	if (fd < 0) {
		if (fd == -ENOENT)
			source_give_up(s, f, false, fd, "'%s' vanished before it could be copied",
					      f->display);
		else
			source_give_up(s, f, false, fd, "cannot open '%s': %s", f->display,
					      pc_strerror(fd));
		return fd;
	}
	got = source_pread(fd, p, f->size, 0);
	close(fd);
	/* A file that grew is copied as it was announced; one that shrank
	 * has lost bytes we promised: never send a guess. */
	if (got < 0) {
		source_give_up(s, f, false, (int)got, "reading '%s': %s", f->display,
				      pc_strerror((int)got));
		return (int)got;
	}
	if ((uint64_t)got < f->size) {
		source_give_up(s, f, false, -PC_E_FILEIO, "'%s' shrank while it was being copied "
				      "(%lld of %llu bytes)", f->display, (long long)got,
				      (unsigned long long)f->size);
		return -PC_E_FILEIO;
	}
	return 0;
}

/* Fills b with a PACK: a status per id of the range, then the contents of
 * the files that could be read, in id order. Drops the claim's references.
 * Returns 1. */
static int source_read_pack(struct source *s, const struct plan_claim *c, struct buf *b)
{
	size_t head = 4 * (size_t)c->span, len = head;

	memset(b->data, 0, head);
	for (unsigned i = 0; i < c->nrecs; i++) {
		struct src_rec *f = c->recs[i];
		int st = source_read_small(s, f, b->data + len);
		if (st == 0)
			len += f->size;
		else
			source_put_be32(b->data + 4 * (size_t)(f->id - c->first_id), (uint32_t)st);
		src_rec_put(f);
	}
	b->hdr.type = PROTO_BLK_PACK;
	b->hdr.file_id = c->first_id;
	b->hdr.offset = c->span;
	b->hdr.raw_len = (uint32_t)len;
	b->len = len;
	return 1;
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
 * it is recorded as -PC_E_CODEC, naming the codec and what was being
 * compressed, before the caller lets go of anything whose failure would
 * say less. Returns 0 or -PC_E_CODEC (the transfer is aborted then). */
static int source_encode(struct source *s, struct encoder *enc, struct buf *b,
			 const struct codec_choice *choice)
{
	struct src_rec *f = b->ctx;
	char name[32];
	int ret = encoder_run(enc, b, choice, f ? &f->enc : &s->pack_enc);

	if (ret == 0)
		return 0;
	codec_format(choice, name, sizeof(name));
	if (f == NULL)
		return xfer_fail(s->x, -PC_E_CODEC, "compressing a block of %u small files with %s "
				 "failed: %s", (unsigned)b->hdr.offset, name, pc_strerror(ret));
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
	b->hdr.seq = c->seq;
	if (c->kind == PLAN_PACK) {
		ret = source_read_pack(s, c, b);
	} else {
		b->hdr.file_id = c->f->id;
		b->hdr.offset = c->offset;
		b->ctx = c->f;
		ret = c->kind == PLAN_STREAM ? source_read_stream(s, c, b)
					     : source_read_block(s, c, b);
	}
	if (ret <= 0 || (b->hdr.flags & PROTO_BLK_HOLE))
		return ret;
	b->hdr.checksum = proto_checksum(b->data, b->len);
	ret = source_encode(s, r->enc, b, choice);
	b->untried = choice->id == CODEC_NONE && !(b->hdr.flags & PROTO_BLK_HOLE);
	if (ret < 0)
		return ret;
	if (b->hdr.flags & PROTO_BLK_HOLE)
		b->hdr.checksum = 0;
	return 1;
}

/* Lets go of a buffer and the reference its block held. */
static void source_release(struct source *s, struct buf *b)
{
	struct src_rec *f = b->ctx;

	bufpool_release(s->pool, b);
	if (f != NULL)
		src_rec_put(f);
}

/* One claim: reads it into a buffer and queues it for a sender. Returns 0
 * to go on, or a negative code to stop. */
static int source_claim(struct reader *r, struct plan_claim *c)
{
	struct source *s = r->s;
	struct src_rec *f = c->kind == PLAN_PACK ? NULL : c->f;
	unsigned qi;

	if (c->kind == PLAN_BLOCK && (atomic_load(&f->failed) || source_ensure_open(s, f) < 0)) {
		plan_read_done(f, 1);
		src_rec_put(f);
		return 0;
	}
	struct buf *b = bufpool_acquire(s->pool);
	if (b == NULL) {
		if (c->kind == PLAN_STREAM)
			plan_stream_done(s->plan, c, 0, true);
		if (c->kind == PLAN_BLOCK)
			plan_read_done(f, 1);
		for (unsigned i = 0; c->kind == PLAN_PACK && i < c->nrecs; i++)
			src_rec_put(c->recs[i]);
		if (f != NULL)
			src_rec_put(f);
		return -PC_E_ABORTED;
	}
	const struct codec_choice *choice = source_choice(s, c->seq, &qi);
	int ret = source_fill(r, c, b, choice);
	if (c->kind == PLAN_BLOCK)
		plan_read_done(f, 1);
	if (ret <= 0) {
		source_release(s, b); /* drops the claim's reference, which b->ctx holds */
		return ret;
	}
	ret = queue_push(s->q[qi], b);
	if (ret < 0)
		source_release(s, b);
	return ret;
}

static void *source_reader(void *arg)
{
	struct reader *r = arg;
	struct source *s = r->s;
	struct plan_claim c = { .recs = r->recs };

	while (!xfer_aborted(s->x) && plan_next(s->plan, &c) == 1)
		if (source_claim(r, &c) < 0)
			break;
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
		struct src_rec *f = b->ctx; /* NULL for a PACK */
		/* Blocks of a file given up on are dropped, except in ordered
		 * mode where every sequence number must arrive. */
		if (f != NULL && !x->ordered && atomic_load(&f->failed)) {
			source_release(s, b);
			continue;
		}
		/* -c auto: a block read before auto chose to compress has waited
		 * in the pipeline meanwhile; compress it now, at today's level. */
		int step = atomic_load_explicit(&s->step, memory_order_relaxed);
		if (b->untried && step > 0 && w->enc != NULL &&
		    source_encode(s, w->enc, b, &source_ladder[step]) < 0) {
			/* Our codec failed, not the connection: say so. */
			source_release(s, b);
			return NULL;
		}
		ret = source_send(fd, &b->hdr, b->data, b->len);
		uint64_t raw = b->hdr.type == PROTO_BLK_PACK ? b->hdr.raw_len - 4 * b->hdr.offset
							      : b->hdr.raw_len;
		uint64_t wire = PROTO_BLOCK_HDR_LEN + b->len;
		source_release(s, b);
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

/* ---- Producing entries ------------------------------------------------ */

/* Reports a source or an entry that cannot be sent: to our user if we
 * are the client, else to the client with SKIP. Returns 0 or a negative
 * code. */
static int source_skip(struct source *s, const struct walk_skip *k)
{
	struct proto_msg m = { .type = PROTO_SKIP };

	s->skipped++;
	if (s->x->report) {
		log_error("%s", k->msg);
		return 0;
	}
	m.u.skip.index = k->src_index;
	m.u.skip.status = k->code;
	snprintf(m.u.skip.msg, sizeof(m.u.skip.msg), "%s", k->msg);
	if (ctl_send(s->x->ctl, &m) < 0)
		return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	return 0;
}

/* The entry of a stream opened beforehand (stdin, a FIFO, a device). */
static void source_stream_item(struct source *s, const struct src_file *f)
{
	struct walk_item *it = s->item;
	struct proto_entry *e = &it->e;

	memset(e, 0, offsetof(struct proto_entry, path));
	e->type = PROTO_ENT_REG;
	e->flags = PROTO_ENT_SIZE_UNKNOWN;
	e->mode = f->mode & 07777;
	e->mtime_s = f->mtime_s;
	e->mtime_ns = f->mtime_ns;
	e->atime_s = f->mtime_s;
	e->atime_ns = f->mtime_ns;
	snprintf(e->path, sizeof(e->path), "%s", f->name);
	e->target[0] = e->user[0] = e->group[0] = '\0';
	it->base_fd = -1;
	it->open_path[0] = '\0';
	it->sparse = false;
	snprintf(it->display, sizeof(it->display), "%s", f->display);
}

/* The next thing to send, in REQUEST order: 1 an entry in s->item (with
 * its id), 2 a skip in *k, 0 nothing more, or a negative code. */
static int source_produce(struct source *s, struct walk_skip *k)
{
	const struct source_input *in = s->in;

	for (;;) {
		s->item_stream = NULL;
		if (s->walk != NULL) {
			struct pc_err e;
			pc_err_init(&e);
			int ret = walk_next(s->walk, s->item, k, &e);
			if (ret < 0) {
				char msg[sizeof(e.msg)];
				(void)pc_err_get(&e, msg, sizeof(msg));
				xfer_fail(s->x, ret, "%s", msg);
			}
			pc_err_destroy(&e);
			if (ret == 1) {
				struct proto_entry *en = &s->item->e;
				en->id = s->walk_base + s->item->id;
				if (en->type == PROTO_ENT_HARDLINK)
					en->link_id += s->walk_base;
			}
			k->src_index = s->cur;
			if (ret != 0)
				return ret;
			s->walked[s->nwalked++] = s->walk;
			s->walk = NULL;
			s->cur++;
			continue;
		}
		if (s->cur >= in->npaths)
			return 0;
		const struct source_path *sp = &in->paths[s->cur];
		if (sp->code < 0) {
			*k = (struct walk_skip){ .src_index = s->cur, .code = sp->code };
			snprintf(k->msg, sizeof(k->msg), "%s", sp->msg ? sp->msg : sp->path);
			s->cur++;
			return 2;
		}
		if (sp->stream != NULL) {
			source_stream_item(s, sp->stream);
			s->item->e.id = s->next_id;
			s->item_stream = sp->stream;
			s->cur++;
			return 1;
		}
		s->walk = walk_new(&in->walk, in->dirfd, in->beneath, &sp->path, 1);
		if (s->walk == NULL)
			return xfer_fail(s->x, -ENOMEM, "out of memory");
		s->walk_base = s->next_id;
	}
}

/* Sends the batch of entries, and hands their files to the plan. Returns
 * 0 or a negative code. */
static int source_flush(struct source *s)
{
	struct proto_msg m;

	if (s->batch->count == 0)
		return 0;
	proto_batch_msg(s->batch, &m);
	if (ctl_send(s->x->ctl, &m) < 0)
		return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	s->announced += s->batch->count;
	while (s->pend_head != NULL) {
		struct src_rec *f = s->pend_head;
		s->pend_head = f->wnext;
		f->wnext = NULL;
		if (s->win_tail != NULL)
			s->win_tail->wnext = f;
		else
			s->win_head = f;
		s->win_tail = f;
		src_rec_get(f); /* the plan's */
		plan_add(s->plan, f);
	}
	s->pend_tail = NULL;
	proto_batch_init(s->batch, s->announced);
	return 0;
}

/* Adds the entry in s->item to the batch (sending a full one first), and
 * keeps a record of it if it has contents to send. */
static int source_announce(struct source *s)
{
	const struct walk_item *it = s->item;
	const struct proto_entry *e = &it->e;
	int ret = proto_batch_add(s->batch, e);

	if (ret == -ENOSPC) {
		ret = source_flush(s);
		if (ret < 0)
			return ret;
		ret = proto_batch_add(s->batch, e);
	}
	if (ret < 0)
		return xfer_fail(s->x, ret == -ENOSPC ? -PC_E_PROTO : ret,
				 "cannot announce '%s': %s", it->display, pc_strerror(ret));
	s->next_id = e->id + 1;
	s->files += e->type == PROTO_ENT_REG;
	s->dirs += e->type == PROTO_ENT_DIR;
	s->links += e->type == PROTO_ENT_SYMLINK || e->type == PROTO_ENT_HARDLINK;
	if (e->type != PROTO_ENT_REG || (e->size == 0 && !(e->flags & PROTO_ENT_SIZE_UNKNOWN)))
		return 0;
	struct src_rec *f = src_rec_new(e->id, e->size, it->base_fd,
					s->item_stream ? NULL : it->open_path, it->display);
	if (f == NULL)
		return xfer_fail(s->x, -ENOMEM, "out of memory");
	f->sparse = it->sparse;
	if (s->item_stream != NULL) {
		f->stream = true;
		f->fd = s->item_stream->fd; /* borrowed: the caller closes it */
	}
	if (s->pend_tail != NULL)
		s->pend_tail->wnext = f;
	else
		s->pend_head = f;
	s->pend_tail = f;
	atomic_fetch_add(&s->x->total, e->size);
	return 0;
}

/* Produces and announces entries while the window has room; the plan is
 * finished once every source has been produced. Returns 0 or a negative
 * code. */
static int source_fill_window(struct source *s)
{
	struct walk_skip k;
	int ret = 0;

	while (!s->walk_done && s->next_id - s->acked < SOURCE_WINDOW && !xfer_aborted(s->x)) {
		ret = source_produce(s, &k);
		if (ret == 0)
			s->walk_done = true;
		else if (ret == 1)
			ret = source_announce(s);
		else if (ret == 2)
			ret = source_skip(s, &k);
		if (ret < 0)
			return ret;
	}
	ret = source_flush(s);
	if (ret == 0 && s->walk_done && !s->plan_finished) {
		plan_finish(s->plan);
		s->plan_finished = true;
	}
	return ret;
}

/* ---- Messages from the sink -------------------------------------------- */

static bool source_done_bit(struct source *s, uint32_t id, bool set)
{
	uint32_t i = id % SOURCE_WINDOW;
	bool was = s->done_bits[i / 8] & (1u << (i % 8));

	if (set)
		s->done_bits[i / 8] |= (uint8_t)(1u << (i % 8));
	else
		s->done_bits[i / 8] &= (uint8_t)~(1u << (i % 8));
	return was;
}

static int source_on_ack(struct source *s, uint32_t upto)
{
	struct xfer *x = s->x;

	if (upto < s->acked || upto > s->announced)
		return xfer_fail(x, -PC_E_PROTO, "%s acknowledged entries up to %u, but %u were "
				 "announced and %u acknowledged before", x->peer, (unsigned)upto,
				 (unsigned)s->announced, (unsigned)s->acked);
	for (uint32_t id = s->acked; id < upto; id++)
		(void)source_done_bit(s, id, false);
	s->acked = upto;
	while (s->win_head != NULL && s->win_head->id < upto) {
		struct src_rec *f = s->win_head;
		s->win_head = f->wnext;
		if (s->win_head == NULL)
			s->win_tail = NULL;
		src_rec_put(f);
	}
	return 0;
}

static int source_on_file_done(struct source *s, const struct proto_file_done *d)
{
	struct xfer *x = s->x;
	struct src_rec *f = s->win_head;

	if (d->id < s->acked || d->id >= s->announced || source_done_bit(s, d->id, true))
		return xfer_fail(x, -PC_E_PROTO, "%s reported entry %u failed, which is not in "
				 "flight", x->peer, (unsigned)d->id);
	s->failed++;
	while (f != NULL && f->id < d->id)
		f = f->wnext;
	/* A file we gave up on ourselves has been reported already. */
	bool ours = f != NULL && f->id == d->id && atomic_exchange(&f->failed, true);
	if (x->report && !ours)
		log_error("%s", d->msg[0] ? d->msg : pc_strerror(d->status));
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
	case PROTO_ACK:
		return source_on_ack(s, m.u.ack.upto);
	case PROTO_FILE_DONE:
		return source_on_file_done(s, &m.u.file_done);
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
 * now, without waiting for the last acknowledgements, so that the sink's
 * DONE follows its last ACK at once instead of a round trip later. */
static int source_send_end(struct source *s)
{
	struct xfer *x = s->x;
	struct proto_msg m = { .type = PROTO_END };
	int ret = platform_event_drain(s->efd);

	if (ret < 0)
		return xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
	if (s->end_sent || atomic_load(&s->senders_left) != 0)
		return 0;
	xfer_stats(x, s->files - atomic_load(&s->local_failed), &m.u.stats);
	m.u.stats.dirs = s->dirs;
	m.u.stats.links = s->links;
	m.u.stats.codec_cpu_us = source_codec_cpu_ns(s) / 1000u;
	if (ctl_send(x->ctl, &m) < 0)
		return xfer_fail(x, -PC_E_NET, "lost control connection to %s", x->peer);
	s->end_sent = true;
	return 0;
}

/* Announces entries within the window, sends END once every stream is
 * done, and takes the sink's ACKs and FILE_DONEs until every entry is
 * acknowledged or the transfer aborts. */
static void source_control(struct source *s)
{
	struct xfer *x = s->x;
	/* The abort switch too: a thread that fails wakes us at once. */
	struct pollfd p[4] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = s->efd, .events = POLLIN },
			       { .fd = x->abort_efd, .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };

	proto_batch_init(s->batch, 0);
	while (!xfer_aborted(x) && !(s->end_sent && s->acked == s->announced)) {
		if (source_fill_window(s) < 0)
			return;
		if (ctl_pending(x->ctl)) { /* only a confused sink speaks first */
			(void)source_on_message(s);
			continue;
		}
		int n = poll(p, x->sigfd >= 0 ? 4 : 3, source_poll_timeout(s));
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		if (n > 0 && (p[3].revents & POLLIN))
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
	for (unsigned i = 0; i < s->in->npaths; i++)
		s->has_stream |= s->in->paths[i].stream != NULL;
	if (s->has_stream || x->ordered)
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
	s->plan = plan_new(x->block_size, !x->ordered);
	s->pool = bufpool_new(count, s->buf_cap);
	s->item = malloc(sizeof(*s->item));
	s->walked = calloc(s->in->npaths ? s->in->npaths : 1, sizeof(*s->walked));
	s->batch = malloc(sizeof(*s->batch));
	if (s->plan == NULL || s->pool == NULL || s->item == NULL || s->batch == NULL ||
	    s->walked == NULL)
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
			source_release(s, b);
		queue_free(s->q[i]);
	}
	bufpool_free(s->pool);
	plan_free(s->plan);
	for (struct src_rec *f = s->pend_head, *n; f != NULL; f = n) {
		n = f->wnext;
		src_rec_put(f);
	}
	for (struct src_rec *f = s->win_head, *n; f != NULL; f = n) {
		n = f->wnext;
		src_rec_put(f);
	}
	walk_free(s->walk);
	for (unsigned i = 0; i < s->nwalked; i++)
		walk_free(s->walked[i]);
	free(s->walked);
	free(s->item);
	free(s->batch);
	if (s->open_lock_ok)
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&s->open_lock));
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
	xfer_stats(x, s->files - s->failed, &r->self);
	r->self.dirs = s->dirs;
	r->self.links = s->links;
	r->self.codec_cpu_us = s->codec_cpu_us;
	return 0;
}

int source_run(struct xfer *x, const struct source_input *in, struct source_result *r)
{
	struct source *s = calloc(1, sizeof(*s));
	int ret;

	memset(r, 0, sizeof(*r));
	if (s == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->x = x;
	s->in = in;
	s->efd = -1;
	atomic_init(&s->local_failed, 0);
	enc_file_init(&s->pack_enc);
	ret = pthread_mutex_init(&s->open_lock, NULL);
	s->open_lock_ok = ret == 0;
	if (ret != 0)
		xfer_fail(x, -ret, "pthread_mutex_init: %s", strerror(ret));
	else if (source_start(s) == 0)
		source_control(s);
	source_stop(s, r);
	if (xfer_aborted(x)) {
		xfer_await_peer_error(x);
		ret = pc_err_get(x->err, NULL, 0);
	} else {
		ret = source_finish(s, r);
	}
	r->failed = s->failed;
	r->skipped = s->skipped;
	r->files = s->files;
	r->dirs = s->dirs;
	r->links = s->links;
	free(s);
	if (ret == 0 && (r->failed > 0 || r->skipped > 0))
		ret = -PC_E_PARTIAL;
	return ret;
}
