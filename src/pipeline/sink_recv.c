/* SPDX-License-Identifier: Apache-2.0 */
/* sink_recv: the receiver threads (read and verify blocks) and the writer
 * threads (hand them to sink_write). */
#include "pipeline/sink_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/decoder.h"
#include "pipeline/encoder.h"
#include "pipeline/dest.h"
#include "pipeline/sink_ent.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "sys/platform.h"
#include "wire/pathsafe.h"
#include "sys/sync.h"
#include "transport/chan.h"

/* ---- Threads ---------------------------------------------------------- */

void sink_wake(void *arg)
{
	struct sink *s = arg;

	sync_lock(&s->lock);
	sync_broadcast(&s->cond);
	sync_unlock(&s->lock);
}

/* chan_recv for a receiver, accounted: on a TLS channel the thread's CPU
 * time in the call is the receive stage's work (decryption), the rest
 * waiting for the network; in clear the whole call is waiting. For the
 * decode stage it is all waiting for its input. */
static int sink_recv_timed(struct receiver *r, struct chan *ch, void *buf, size_t len)
{
	bool tls = chan_encrypted(ch);
	uint64_t t0 = platform_now_ns();
	uint64_t c0 = tls ? platform_thread_cpu_ns() : 0;
	int ret = chan_recv(ch, buf, len, NULL);
	uint64_t wall = platform_now_ns() - t0;
	uint64_t cpu = tls ? platform_thread_cpu_ns() - c0 : 0;

	cpu = cpu < wall ? cpu : wall;
	r->recv.busy_ns += cpu;
	r->recv.in_ns += wall - cpu;
	r->decode.in_ns += wall;
	return ret;
}

/* What a receiver's stretch of time was spent on. */
enum recv_lap {
	RLAP_ENTRY,    /* waiting for input: the entry of a block to be announced */
	RLAP_DECODE,   /* decoding and verifying */
	RLAP_HANDOFF,  /* waiting for a buffer or room in a writer's queue */
};

/* Adds the time since *t0 to a receiver's stages as what, and moves *t0
 * to now. */
static void sink_recv_lap(struct receiver *r, uint64_t *t0, enum recv_lap what)
{
	uint64_t now = platform_now_ns();
	uint64_t d = now - *t0;

	*t0 = now;
	if (what == RLAP_ENTRY) {
		r->recv.in_ns += d;
		r->decode.in_ns += d;
	} else if (what == RLAP_DECODE) {
		r->decode.busy_ns += d;
		r->recv.out_ns += d;
	} else {
		r->recv.out_ns += d;
		r->decode.out_ns += d;
	}
}

/* Reads exactly the block's enc_len bytes of payload into b->data.
 * Returns 0 or chan_recv's negative code. */
static int sink_read_payload(struct receiver *r, struct chan *ch, struct buf *b)
{
	int ret = sink_recv_timed(r, ch, b->data, b->hdr.enc_len);

	if (ret == 0)
		atomic_fetch_add(&r->s->x->wire_bytes, b->hdr.enc_len);
	return ret;
}

/* Which entry a block belongs to, once announced: *out gets a reference
 * to it (DATA), or stays NULL for a PACK and for a block of an entry that
 * is finished already (one the sink gave up on: its late blocks are
 * dropped). Returns 1, 0 on abort, or -PC_E_PROTO. */
static int sink_block_owner(struct sink *s, const struct proto_block *h, struct sink_ent **out)
{
	uint32_t last = h->type == PROTO_BLK_PACK ? h->file_id + (uint32_t)h->offset - 1
						  : h->file_id;
	int ret = sink_await(s, last);

	*out = NULL;
	if (ret <= 0 || h->type == PROTO_BLK_PACK)
		return ret;
	*out = sink_ref(s, h->file_id);
	if (*out != NULL && !(*out)->data) {
		sink_ent_put(*out);
		*out = NULL;
		return -PC_E_PROTO;
	}
	return 1;
}

/* Reading from data connection rc failed with ret: a TLS record that
 * failed its integrity check (altered on the way) is that, with what TLS
 * said; anything else is a lost connection. Returns the code. */
static int sink_chan_failed(struct receiver *rc, struct chan *ch, int ret)
{
	struct xfer *x = rc->s->x;

	if (ret == -PC_E_INTEGRITY)
		return xfer_fail(x, ret, "data connection %u from %s: %s", rc->idx, x->peer,
				 chan_error(ch)[0] ? chan_error(ch) : pc_strerror(ret));
	if (ret == -PC_E_TIMEOUT) /* nothing lost: the other end went quiet */
		return xfer_fail(x, ret, "nothing came on data connection %u from %s for %u s "
				 "(--timeout %u)", rc->idx, x->peer, x->timeout_s, x->timeout_s);
	return xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
			 "lost data connection %u from %s: %s", rc->idx, x->peer,
			 ret == -PC_E_NET ? "connection closed" : pc_strerror(ret));
}

static int sink_receive_one(struct receiver *rc, struct chan *ch)
{
	struct sink *s = rc->s;
	struct xfer *x = s->x;
	uint8_t raw[PROTO_BLOCK_HDR_LEN];
	struct proto_block h;
	struct sink_ent *r;
	struct buf *b;
	uint64_t t;
	int ret;

	ret = sink_recv_timed(rc, ch, raw, sizeof(raw));
	t = platform_now_ns();
	if (ret < 0)
		return sink_chan_failed(rc, ch, ret);
	atomic_fetch_add(&x->wire_bytes, sizeof(raw));
	if (proto_block_decode(raw, x->block_size, &h) < 0)
		return xfer_fail(x, -PC_E_PROTO, "malformed block header from %s", x->peer);
	if (h.type == PROTO_BLK_END)
		return 1;
	rc->carried = true;
	if (h.type == PROTO_BLK_PACK && (x->ordered || s->t->to_stdout))
		return xfer_fail(x, -PC_E_PROTO, "%s sent a pack of files to a stream", x->peer);
	ret = sink_block_owner(s, &h, &r);
	sink_recv_lap(rc, &t, RLAP_ENTRY);
	if (ret < 0)
		return xfer_fail(x, ret, "%s sent a block for entry %u, which %s", x->peer,
				 (unsigned)h.file_id, s->end ? "it never announced"
							  : "has no contents");
	b = ret > 0 ? bufpool_acquire(s->pool) : NULL;
	sink_recv_lap(rc, &t, RLAP_HANDOFF);
	if (b == NULL) {
		if (r != NULL)
			sink_ent_put(r);
		return -PC_E_ABORTED;
	}
	b->hdr = h;
	b->ctx = r;
	ret = (h.flags & PROTO_BLK_HOLE) || h.type == PROTO_BLK_SAME ? 0
								  : sink_read_payload(rc, ch, b);
	t = platform_now_ns();
	if (ret < 0) {
		bufpool_release(s->pool, b);
		if (r != NULL)
			sink_ent_put(r);
		return sink_chan_failed(rc, ch, ret);
	}
	if (h.type != PROTO_BLK_PACK && r == NULL) {
		bufpool_release(s->pool, b); /* an entry already given up: drop it */
		return 0;
	}
	if (h.type == PROTO_BLK_SAME)
		sink_same_fetch(s, r, b); /* its bytes, or why not: for the writer */
	ret = h.type == PROTO_BLK_SAME ? 0 : decoder_verify(rc->dec, b);
	sink_recv_lap(rc, &t, RLAP_DECODE);
	if (ret < 0) {
		bufpool_release(s->pool, b);
		if (ret == -PC_E_INTEGRITY && r != NULL) {
			char name[PROTO_MAX_PATH + 64];
			sink_display(s, r, name, sizeof(name));
			sink_ent_put(r);
			return xfer_fail(x, ret, "block at offset %llu of '%s' failed its checksum "
					 "or did not decode: data corrupted in transit from %s",
					 (unsigned long long)h.offset, name, x->peer);
		}
		if (r != NULL)
			sink_ent_put(r);
		if (ret == -PC_E_INTEGRITY)
			return xfer_fail(x, ret, "a block of %u small files from entry %u failed its "
					 "checksum or did not decode: data corrupted in transit "
					 "from %s", (unsigned)h.offset, (unsigned)h.file_id, x->peer);
		if (ret == -PC_E_PROTO)
			return xfer_fail(x, ret, "malformed block from %s", x->peer);
		return xfer_fail(x, ret, "cannot decode a block from %s: %s", x->peer,
				 pc_strerror(ret));
	}
	unsigned qi = x->ordered ? rc->idx : h.file_id % s->nq;
	ret = queue_push(s->wq[qi], b);
	sink_recv_lap(rc, &t, RLAP_HANDOFF);
	if (ret < 0) {
		bufpool_release(s->pool, b);
		if (r != NULL)
			sink_ent_put(r);
		return -PC_E_ABORTED;
	}
	return 0;
}

void *sink_receiver(void *arg)
{
	struct receiver *r = arg;
	struct sink *s = r->s;
	struct chan *ch = s->x->data[r->idx];

	stage_acc_begin(&r->recv, platform_now_ns());
	stage_acc_begin(&r->decode, r->recv.start_ns);
	while (!xfer_aborted(s->x) && sink_receive_one(r, ch) == 0)
		;
	stage_acc_end(&r->recv, platform_now_ns());
	r->decode.span_ns = r->recv.span_ns;
	if (s->x->ordered)
		queue_close(s->wq[r->idx]);
	else
		for (unsigned i = 0; i < s->nq; i++)
			queue_close(s->wq[i]);
	return NULL;
}

/* Lets go of a buffer and the reference its block held. */
void sink_release(struct sink *s, struct buf *b)
{
	struct sink_ent *r = b->ctx != &s->meta_tag ? b->ctx : NULL;

	bufpool_release(s->pool, b);
	if (r != NULL)
		sink_ent_put(r);
}

static void sink_handle(struct sink *s, struct writer *w, struct buf *b)
{
	if (b->ctx == &s->meta_tag)
		sink_run_job(s, w, b);
	else if (b->hdr.type == PROTO_BLK_PACK)
		sink_write_pack(s, w, b);
	else
		sink_write(s, w, b);
	sink_release(s, b);
}

/* Takes the next buffer from q for writer w, accounting the wait as the
 * write stage's waiting for input. */
static struct buf *sink_writer_pop(struct writer *w, struct queue *q)
{
	uint64_t t0 = platform_now_ns();
	struct buf *b = queue_pop(q);

	w->write.in_ns += platform_now_ns() - t0;
	return b;
}

/* sink_handle, accounted as the write stage's work. */
static void sink_writer_handle(struct sink *s, struct writer *w, struct buf *b)
{
	uint64_t t0 = platform_now_ns();

	sink_handle(s, w, b);
	w->write.busy_ns += platform_now_ns() - t0;
}

void *sink_writer(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	stage_acc_begin(&w->write, platform_now_ns());
	while ((b = sink_writer_pop(w, s->wq[w->idx])) != NULL) {
		if (xfer_aborted(s->x))
			sink_release(s, b);
		else
			sink_writer_handle(s, w, b);
	}
	stage_acc_end(&w->write, platform_now_ns());
	return NULL;
}

/* Ordered mode: block k comes from stream k % N, in sequence. */
void *sink_writer_ordered(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	stage_acc_begin(&w->write, platform_now_ns());
	for (uint64_t k = 0; (b = sink_writer_pop(w, s->wq[k % s->nq])) != NULL; k++) {
		if (b->hdr.seq != k) {
			sink_release(s, b);
			xfer_fail(s->x, -PC_E_PROTO, "%s sent block %llu out of order", s->x->peer,
				  (unsigned long long)b->hdr.seq);
			break;
		}
		sink_writer_handle(s, w, b);
	}
	stage_acc_end(&w->write, platform_now_ns());
	return NULL;
}
