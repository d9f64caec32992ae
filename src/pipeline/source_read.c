/* SPDX-License-Identifier: Apache-2.0 */
/* source_read: the reader threads (claim, open, read, checksum and encode
 * blocks and packs) and the sender threads (write them to the data
 * streams). */
#include "pipeline/source_int.h"

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
#include <sys/stat.h>

#include "wire/auth.h"
#include "wire/pathsafe.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "transport/chan.h"
#include "sys/sync.h"
#include "pipeline/plan.h"
#include "pipeline/srcrec.h"
#include "sys/platform.h"

/* What a reader's stretch of time was spent on (struct reader). */
enum reader_lap { LAP_CLAIM, LAP_READ, LAP_ENCODE, LAP_HANDOFF };

/* Accounts the time since the last lap to what the reader was doing: its
 * read stage is busy reading and waits on the claim before and on the
 * encoding and handing on after; its encode stage is busy encoding and
 * waits on the claim and the read before and on the handing on after. */
static void reader_lap(struct reader *r, enum reader_lap what)
{
	uint64_t now = platform_now_ns();
	uint64_t d = now - r->lap_ns;

	r->lap_ns = now;
	switch (what) {
	case LAP_CLAIM:
		r->read.in_ns += d;
		r->encode.in_ns += d;
		break;
	case LAP_READ:
		r->read.busy_ns += d;
		r->encode.in_ns += d;
		break;
	case LAP_ENCODE:
		r->encode.busy_ns += d;
		r->read.out_ns += d;
		break;
	case LAP_HANDOFF:
		r->read.out_ns += d;
		r->encode.out_ns += d;
		break;
	}
}

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
	if (s->x->report) {
		log_error("%s", m.u.file_fail.msg);
		xfer_failed(s->x, f->display, m.u.file_fail.msg, false);
	}
	if (tell && ctl_send(s->x->ctl, &m) < 0)
		xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
}

/* Opens a file for reading, beneath its source's directory. The tree may
 * change while we copy it, so without -L no symlink is followed anywhere
 * on the way (one put in place of a directory since the walk could lead a
 * root's copy to files its owner may not read); on a daemon the open path
 * starts at its root and holds the path the client named, through which
 * symlinks that stay beneath the root are followed, as the walk followed
 * them (nothing outside the root is reachable, and the daemon serves all
 * of it). What opens must still be a regular file: O_NONBLOCK, so that a
 * FIFO put in its place is refused here, not waited on for a writer
 * forever. Returns an fd or
 * -errno: -ELOOP for a symlink on the way; *not_reg is set for something
 * other than a regular file (-EINVAL then). */
static int source_open_path(struct source *s, const struct src_rec *f, bool *not_reg)
{
	struct stat st;
	int fd;

	*not_reg = false;
	if (fault_fire(FAULT_SOURCE_OPEN))
		return -EACCES;
	/* -L, or a source symlink followed without -r: through symlinks,
	 * still beneath a daemon's root. */
	if (s->in->walk.deref || !s->in->walk.recursive)
		fd = pathsafe_open(f->base_fd, f->open_path, O_RDONLY | O_NONBLOCK, 0,
				   s->in->beneath);
	else if (s->in->beneath)
		fd = pathsafe_open(f->base_fd, f->open_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0,
				   true);
	else
		fd = pathsafe_open_nolinks(f->base_fd, f->open_path, O_RDONLY | O_NONBLOCK, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) != 0) {
		int err = errno;
		close(fd);
		return -err;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		*not_reg = true;
		return -EINVAL;
	}
	return fd;
}

/* Gives f up after source_open_path failed with fd (not_reg as it said),
 * saying why; tell as in source_give_up. */
static void source_open_failed(struct source *s, struct src_rec *f, bool tell, int fd,
			       bool not_reg)
{
	if (fd == -ENOENT)
		source_give_up(s, f, tell, fd, "'%s' vanished before it could be copied", f->display);
	else if (not_reg)
		source_give_up(s, f, tell, fd, "'%s' is no longer a regular file; not copied",
			       f->display);
	else if (fd == -ELOOP)
		source_give_up(s, f, tell, fd, "'%s' now lies beyond a symbolic link, which is not "
			       "followed; not copied", f->display);
	else
		source_give_up(s, f, tell, fd, "cannot open '%s': %s", f->display, pc_strerror(fd));
}

/* The first reader of a DATA file opens it. Returns 0 or a negative code
 * (the file has been given up). */
static int source_ensure_open(struct source *s, struct src_rec *f)
{
	bool first = false, not_reg = false;
	int fd = 0;

	sync_lock(&s->open_lock);
	if (f->fd < 0 && !f->open_failed) {
		first = true;
		fd = source_open_path(s, f, &not_reg);
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
	if (first && fd < 0)
		source_open_failed(s, f, true, fd, not_reg);
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
	got = platform_pread_full(f->fd, b->data, c->len, c->offset);
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
		atomic_fetch_add(&s->x->total, m.u.file_end.size);
		atomic_fetch_sub(&s->x->unsized, 1);
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
	bool not_reg;
	int fd = source_open_path(s, f, &not_reg);
	ssize_t got;

	if (fd < 0) {
		source_open_failed(s, f, false, fd, not_reg);
		return fd;
	}
	got = platform_pread_full(fd, p, f->size, 0);
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

/* --checksum, -a: the hash the sink sent for block idx of f, into want, if
 * it has that block (true): a file is read while its hashes still come, so
 * this waits for the block's, until the file's are complete (or the copy
 * aborts). */
static bool source_sum_wanted(struct source *s, const struct src_rec *f, uint64_t idx,
			      uint8_t want[PROTO_SUM_LEN])
{
	bool known;

	if (!xfer_sums(s->x))
		return false;
	sync_lock(&s->sums_lock);
	while (idx >= f->nsums && !f->sums_done && !xfer_aborted(s->x))
		sync_wait(&s->sums_cond, &s->sums_lock);
	known = idx < f->nsums;
	if (known)
		memcpy(want, f->sums + idx * PROTO_SUM_LEN, PROTO_SUM_LEN);
	known = known && !proto_sum_none(want); /* -a: a block the sink never wrote */
	sync_unlock(&s->sums_lock);
	return known;
}

/* Makes b a SAME block of bytes whose hash is sum (its checksum is that
 * hash's low half: one pass over the bytes, not two). */
static void source_make_same(struct buf *b, const uint8_t sum[PROTO_SUM_LEN])
{
	b->hdr.checksum = proto_sum_low(sum);
	b->hdr.type = PROTO_BLK_SAME;
	b->hdr.codec = PROTO_CODEC_NONE;
	b->hdr.flags &= (uint16_t)~PROTO_BLK_HOLE;
	b->hdr.enc_len = 0;
	b->len = 0;
}

/* --checksum, -a: true, with b made a SAME block, if the sink has the block
 * already: its hash is the one SUMS gave for that index. */
static bool source_same(struct source *s, const struct src_rec *f, struct buf *b)
{
	uint8_t sum[PROTO_SUM_LEN], want[PROTO_SUM_LEN];

	if (!source_sum_wanted(s, f, b->hdr.offset / s->x->block_size, want))
		return false;
	proto_block_sum(b->data, b->len, sum);
	if (memcmp(sum, want, PROTO_SUM_LEN) != 0)
		return false;
	source_make_same(b, sum);
	return true;
}

/* --checksum, -a: true, with b made a SAME block, where a hole of the
 * source's file (b, not read) is a block the sink hashed as zeros, so that
 * a sparse file that matches is one every block of which came as SAME,
 * which the sink keeps as it is; else b stays the hole it was. A whole
 * block's zeros were hashed once (source_zeros_hash). */
static bool source_same_hole(struct source *s, const struct src_rec *f, struct buf *b)
{
	uint8_t sum[PROTO_SUM_LEN], want[PROTO_SUM_LEN];

	/* (--inplace: a hole makes the file's zeros a hole there too) */
	if (!s->zeros_hashed || s->x->inplace ||
	    !source_sum_wanted(s, f, b->hdr.offset / s->x->block_size, want))
		return false;
	if (b->hdr.raw_len == s->x->block_size) {
		memcpy(sum, s->zeros_sum, PROTO_SUM_LEN);
	} else { /* a file's last block */
		memset(b->data, 0, b->hdr.raw_len);
		proto_block_sum(b->data, b->hdr.raw_len, sum);
	}
	if (memcmp(sum, want, PROTO_SUM_LEN) != 0)
		return false;
	source_make_same(b, sum);
	return true;
}

void source_zeros_hash(struct source *s)
{
	uint8_t *zeros = calloc(1, s->x->block_size);

	if (zeros == NULL)
		return; /* holes are sent as holes */
	proto_block_sum(zeros, s->x->block_size, s->zeros_sum);
	s->zeros_hashed = true;
	free(zeros);
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
	reader_lap(r, LAP_READ);
	if (ret > 0 && (b->hdr.flags & PROTO_BLK_HOLE) && c->kind == PLAN_BLOCK &&
	    source_same_hole(s, c->f, b)) {
		reader_lap(r, LAP_ENCODE);
		b->untried = false;
		return 1;
	}
	if (ret <= 0 || (b->hdr.flags & PROTO_BLK_HOLE))
		return ret;
	if (c->kind == PLAN_BLOCK && source_same(s, c->f, b)) {
		reader_lap(r, LAP_ENCODE);
		b->untried = false;
		return 1;
	}
	b->hdr.checksum = proto_checksum(b->data, b->len);
	ret = source_encode(s, r->enc, b, choice);
	reader_lap(r, LAP_ENCODE);
	b->untried = choice->id == CODEC_NONE && !(b->hdr.flags & PROTO_BLK_HOLE);
	if (ret < 0)
		return ret;
	if (b->hdr.flags & PROTO_BLK_HOLE)
		b->hdr.checksum = 0;
	return 1;
}

/* Lets go of a buffer and the reference its block held. */
void source_release(struct source *s, struct buf *b)
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
	reader_lap(r, LAP_READ); /* opening the file */
	struct buf *b = bufpool_acquire(s->pool);
	reader_lap(r, LAP_HANDOFF);
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
	reader_lap(r, LAP_HANDOFF);
	if (ret < 0)
		source_release(s, b);
	return ret;
}

void *source_reader(void *arg)
{
	struct reader *r = arg;
	struct source *s = r->s;
	struct plan_claim c = { .recs = r->recs };

	r->lap_ns = platform_now_ns();
	stage_acc_begin(&r->read, r->lap_ns);
	stage_acc_begin(&r->encode, r->lap_ns);
	while (!xfer_aborted(s->x) && plan_next(s->plan, &c) == 1) {
		reader_lap(r, LAP_CLAIM);
		if (source_claim(r, &c) < 0)
			break;
	}
	stage_acc_end(&r->read, platform_now_ns());
	r->encode.span_ns = r->read.span_ns;
	for (unsigned i = 0; i < s->nq; i++)
		queue_close(s->q[i]);
	return NULL;
}

/* Sends one block (its header, then len bytes of data) on ch. Returns 0
 * or chan_send's negative code. */
static int source_send(struct chan *ch, const struct proto_block *h, const void *data,
		       size_t len)
{
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];
	const struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)(uintptr_t)data, len } };

	proto_block_encode(h, hdr);
	return chan_send(ch, iov, len ? 2 : 1);
}

/* source_send under --bwlimit: the block goes in pieces of at most the
 * limiter's quantum, each once the limiter lets it, so that the socket is
 * fed at the rate and never gets the whole block at once. */
static int source_send_paced(struct ratelimit *rl, struct chan *ch, const struct proto_block *h,
			     const uint8_t *data, size_t len)
{
	size_t q = ratelimit_quantum(rl), first = len < q ? len : q;
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)(uintptr_t)data, first } };
	int ret = ratelimit_take(rl, sizeof(hdr) + first);

	proto_block_encode(h, hdr);
	if (ret == 0)
		ret = chan_send(ch, iov, first ? 2 : 1);
	for (size_t off = first; ret == 0 && off < len; off += q) {
		size_t n = len - off < q ? len - off : q;
		iov[0] = (struct iovec){ (void *)(uintptr_t)(data + off), n };
		ret = ratelimit_take(rl, n);
		if (ret == 0)
			ret = chan_send(ch, iov, 1);
	}
	return ret;
}

/* source_send for a sender, accounted: on a TLS channel the thread's CPU
 * time in the call is the stage's work (encryption), the rest waiting for
 * room in the socket; in clear the whole call is waiting for the network
 * (copying into the socket is the network stack's work). What the sender
 * did since its wait for the block ended at since_ns (a late compression)
 * is work too. */
static int source_send_timed(struct sender *w, struct chan *ch, bool tls, struct buf *b,
			     uint64_t since_ns)
{
	struct ratelimit *rl = w->s->rl;
	uint64_t t0 = platform_now_ns();
	uint64_t c0 = tls ? platform_thread_cpu_ns() : 0;
	int ret = rl == NULL ? source_send(ch, &b->hdr, b->data, b->len)
			     : source_send_paced(rl, ch, &b->hdr, b->data, b->len);
	uint64_t wall = platform_now_ns() - t0;
	uint64_t cpu = tls ? platform_thread_cpu_ns() - c0 : 0;

	/* Waiting for --bwlimit is waiting to hand on, as for the socket. */
	cpu = cpu < wall ? cpu : wall;
	w->send.busy_ns += t0 - since_ns + cpu;
	w->send.out_ns += wall - cpu;
	return ret;
}

void *source_sender(void *arg)
{
	struct sender *w = arg;
	struct source *s = w->s;
	struct xfer *x = s->x;
	struct queue *q = s->q[s->per_stream ? w->idx : 0];
	struct chan *ch = x->data[w->idx];
	bool tls = chan_encrypted(ch);
	int ret = 0;
	struct buf *b;

	stage_acc_begin(&w->send, platform_now_ns());
	for (;;) {
		uint64_t t0 = platform_now_ns();
		b = queue_pop(q);
		uint64_t t1 = platform_now_ns();
		atomic_fetch_add_explicit(&s->send_idle_ns, t1 - t0, memory_order_relaxed);
		w->send.in_ns += t1 - t0;
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
		ret = source_send_timed(w, ch, tls, b, t1);
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
		/* Behind the last blocks: with a slow sink or network, it waits
		 * for room as long as they took to drain from the socket. */
		struct proto_block end = { .type = PROTO_BLK_END };
		uint64_t t0 = platform_now_ns();
		ret = source_send(ch, &end, NULL, 0);
		w->send.out_ns += platform_now_ns() - t0;
	}
	stage_acc_end(&w->send, platform_now_ns()); /* before senders_left publishes it */
	/* The listener's proof has waited in the channel since the first
	 * round trip; the stream is not done until it is checked. */
	if (ret == 0 && !xfer_aborted(x) && x->data_confirm != NULL) {
		ret = auth_data_confirm(ch, x->data_confirm[w->idx]);
		if (ret == -PC_E_AUTH) {
			xfer_fail(x, ret, "data connection %u to %s: the listener could not prove it "
				  "knows the session key", w->idx, x->peer);
			return NULL;
		}
	}
	if (ret == -PC_E_TIMEOUT) {
		xfer_fail(x, ret, "%s took nothing on data connection %u for %u s (--timeout %u)",
			  x->peer, w->idx, x->timeout_s, x->timeout_s);
	} else if (ret < 0) {
		xfer_fail(x, -PC_E_NET, "lost data connection %u to %s: %s", w->idx, x->peer,
			  pc_strerror(ret));
	} else if (!xfer_aborted(x) && atomic_fetch_sub(&s->senders_left, 1) == 1) {
		ret = platform_event_signal(s->efd);
		if (ret < 0)
			xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
	}
	return NULL;
}
