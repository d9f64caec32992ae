/* SPDX-License-Identifier: Apache-2.0 */
/* plan: the order in which the source reads its blocks. */
#include "pipeline/plan.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/sync.h"
#include "wire/proto.h"

struct plan {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* files added, streams released, finish, abort */
	uint32_t block_size;       /* immutable */
	bool pack;                 /* immutable: small files may be packed */
	struct src_rec *head, *tail; /* files with something left to claim; lock */
	uint64_t seq;              /* next block number; lock */
	bool finished;             /* lock */
	bool aborted;              /* lock */
};

struct plan *plan_new(uint32_t block_size, bool pack)
{
	struct plan *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	if (pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p);
		return NULL;
	}
	if (pthread_cond_init(&p->cond, NULL) != 0) {
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
		free(p);
		return NULL;
	}
	p->block_size = block_size;
	p->pack = pack;
	return p;
}

void plan_free(struct plan *p)
{
	if (p == NULL)
		return;
	while (p->head != NULL) {
		struct src_rec *f = p->head;
		p->head = f->next;
		src_rec_put(f);
	}
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&p->cond));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
	free(p);
}

/* Small enough that sharing a block with others saves the per-block costs
 * (a buffer, a header, a checksum, a queue hand-off), and a quarter block
 * at most, so a pack always has room for several. */
bool plan_packable(const struct plan *p, uint64_t size)
{
	return p->pack && size > 0 && size <= p->block_size / 4;
}

void plan_read_done(struct src_rec *f, uint64_t nblocks)
{
	if (nblocks == 0)
		return;
	if (atomic_fetch_sub_explicit(&f->reads_left, nblocks, memory_order_acq_rel) != nblocks)
		return;
	/* The last read: nobody uses the fd any more. */
	if (f->own_fd && f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
}

void plan_add(struct plan *p, struct src_rec *f)
{
	f->packed = !f->stream && plan_packable(p, f->size);
	atomic_store_explicit(&f->reads_left,
			      f->stream || f->packed ? 0 : src_rec_blocks(f->size, p->block_size),
			      memory_order_relaxed);
	f->next_off = 0;
	f->busy = false;
	f->eof = !f->stream && f->size == 0;
	f->next = NULL;
	sync_lock(&p->lock);
	if (p->tail != NULL)
		p->tail->next = f;
	else
		p->head = f;
	p->tail = f;
	sync_broadcast(&p->cond);
	sync_unlock(&p->lock);
}

void plan_finish(struct plan *p)
{
	sync_lock(&p->lock);
	p->finished = true;
	sync_broadcast(&p->cond);
	sync_unlock(&p->lock);
}

void plan_abort(struct plan *p)
{
	sync_lock(&p->lock);
	p->aborted = true;
	sync_broadcast(&p->cond);
	sync_unlock(&p->lock);
}

/* Drops the head (finished or failed). Lock held. */
static void plan_pop_locked(struct plan *p)
{
	struct src_rec *f = p->head;

	p->head = f->next;
	if (p->head == NULL)
		p->tail = NULL;
	if (!f->stream && !f->packed) /* blocks never claimed will never be read */
		plan_read_done(f, src_rec_blocks(f->size - f->next_off, p->block_size));
	src_rec_put(f);
}

/* Gathers consecutive small files from the head into one pack. Lock held;
 * the head is a packable file. */
static void plan_pack_locked(struct plan *p, struct plan_claim *c)
{
	uint64_t bytes = 0;

	c->kind = PLAN_PACK;
	c->nrecs = 0;
	c->first_id = p->head->id;
	while (p->head != NULL && p->head->packed && c->nrecs < PLAN_PACK_MAX_RECS) {
		struct src_rec *f = p->head;
		uint64_t span = (uint64_t)f->id - c->first_id + 1;
		if (span > PROTO_MAX_PACK || (c->nrecs > 0 && f->gap_before) ||
		    (c->nrecs > 0 && 4 * span + bytes + f->size > p->block_size))
			break;
		bytes += f->size;
		c->span = (uint32_t)span;
		p->head = f->next;
		if (p->head == NULL)
			p->tail = NULL;
		f->eof = true;
		c->recs[c->nrecs++] = f; /* the plan's reference goes to the claim */
	}
	c->len = (uint32_t)(4 * (uint64_t)c->span + bytes);
	c->seq = p->seq++;
}

/* Tries to claim from the head; drops finished and failed files. Returns 1
 * (claimed) or 0 (nothing now: wait). Lock held. */
static int plan_try_locked(struct plan *p, struct plan_claim *c)
{
	while (p->head != NULL) {
		struct src_rec *f = p->head;

		if (f->eof || atomic_load(&f->failed)) {
			if (f->busy)
				return 0; /* a reader still holds the stream */
			plan_pop_locked(p);
			continue;
		}
		if (f->packed) {
			plan_pack_locked(p, c);
			return 1;
		}
		src_rec_get(f);
		if (f->stream) {
			if (f->busy) {
				src_rec_put(f);
				return 0;
			}
			f->busy = true;
			*c = (struct plan_claim){ .kind = PLAN_STREAM, .f = f, .offset = f->next_off,
						  .len = p->block_size, .seq = p->seq++,
						  .recs = c->recs };
			return 1;
		}
		uint64_t left = f->size - f->next_off;
		uint32_t len = left < p->block_size ? (uint32_t)left : p->block_size;
		*c = (struct plan_claim){ .kind = PLAN_BLOCK, .f = f, .offset = f->next_off,
					  .len = len, .seq = p->seq++, .recs = c->recs };
		f->next_off += len;
		if (f->next_off == f->size) {
			f->eof = true;
			plan_pop_locked(p);
		}
		return 1;
	}
	return 0;
}

int plan_next(struct plan *p, struct plan_claim *c)
{
	int ret;

	sync_lock(&p->lock);
	for (;;) {
		if (p->aborted) {
			ret = -PC_E_ABORTED;
			break;
		}
		ret = plan_try_locked(p, c);
		if (ret == 1)
			break;
		if (p->finished && p->head == NULL)
			break;
		sync_wait(&p->cond, &p->lock);
	}
	sync_unlock(&p->lock);
	return ret;
}

void plan_stream_done(struct plan *p, const struct plan_claim *c, uint32_t got, bool eof)
{
	struct src_rec *f = c->f;

	sync_lock(&p->lock);
	/* An empty read at the end gives its block number back, so ordered
	 * transfers see no gap in the sequence. */
	if (got == 0 && c->seq + 1 == p->seq)
		p->seq--;
	f->next_off += got;
	f->eof = eof;
	f->busy = false;
	sync_broadcast(&p->cond);
	sync_unlock(&p->lock);
}
