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

/* Reads exactly the block's enc_len bytes of payload into b->data.
 * Returns 0 or chan_recv's negative code. */
static int sink_read_payload(struct receiver *r, struct chan *ch, struct buf *b)
{
	int ret = chan_recv(ch, b->data, b->hdr.enc_len, NULL);

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
	int ret;

	ret = chan_recv(ch, raw, sizeof(raw), NULL);
	if (ret < 0)
		return sink_chan_failed(rc, ch, ret);
	atomic_fetch_add(&x->wire_bytes, sizeof(raw));
	if (proto_block_decode(raw, x->block_size, &h) < 0)
		return xfer_fail(x, -PC_E_PROTO, "malformed block header from %s", x->peer);
	if (h.type == PROTO_BLK_END)
		return 1;
	if (h.type == PROTO_BLK_PACK && (x->ordered || s->t->to_stdout))
		return xfer_fail(x, -PC_E_PROTO, "%s sent a pack of files to a stream", x->peer);
	ret = sink_block_owner(s, &h, &r);
	if (ret < 0)
		return xfer_fail(x, ret, "%s sent a block for entry %u, which %s", x->peer,
				 (unsigned)h.file_id, s->end ? "it never announced"
							  : "has no contents");
	b = ret > 0 ? bufpool_acquire(s->pool) : NULL;
	if (b == NULL) {
		if (r != NULL)
			sink_ent_put(r);
		return -PC_E_ABORTED;
	}
	b->hdr = h;
	b->ctx = r;
	ret = h.flags & PROTO_BLK_HOLE ? 0 : sink_read_payload(rc, ch, b);
	if (ret < 0) {
		bufpool_release(s->pool, b);
		if (r != NULL)
			sink_ent_put(r);
		return sink_chan_failed(rc, ch, ret);
	}
	if (h.type == PROTO_BLK_DATA && r == NULL) {
		bufpool_release(s->pool, b); /* an entry already given up: drop it */
		return 0;
	}
	ret = decoder_verify(rc->dec, b);
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
	if (queue_push(s->wq[qi], b) < 0) {
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

	while (!xfer_aborted(s->x) && sink_receive_one(r, ch) == 0)
		;
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

void *sink_writer(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	while ((b = queue_pop(s->wq[w->idx])) != NULL) {
		if (xfer_aborted(s->x))
			sink_release(s, b);
		else
			sink_handle(s, w, b);
	}
	return NULL;
}

/* Ordered mode: block k comes from stream k % N, in sequence. */
void *sink_writer_ordered(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	for (uint64_t k = 0; (b = queue_pop(s->wq[k % s->nq])) != NULL; k++) {
		if (b->hdr.seq != k) {
			sink_release(s, b);
			xfer_fail(s->x, -PC_E_PROTO, "%s sent block %llu out of order", s->x->peer,
				  (unsigned long long)b->hdr.seq);
			break;
		}
		sink_handle(s, w, b);
	}
	return NULL;
}
