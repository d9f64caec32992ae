/* SPDX-License-Identifier: Apache-2.0 */
/* plan: the order in which the source reads its blocks. */
#include "pipeline/plan.h"

#include <pthread.h>
#include <stdlib.h>

#include "sys/err.h"
#include "sys/sync.h"

struct plan {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* files added, streams released, finish, abort */
	uint32_t block_size;       /* immutable */
	struct src_file **files;   /* [max_files]; guarded by lock */
	unsigned max_files;        /* immutable */
	unsigned nfiles;           /* guarded by lock */
	unsigned cur;              /* first file that may still have blocks; lock */
	uint64_t seq;              /* next block number; lock */
	bool finished;             /* lock */
	bool aborted;              /* lock */
};

struct plan *plan_new(uint32_t block_size, unsigned max_files)
{
	struct plan *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	p->files = calloc(max_files ? max_files : 1, sizeof(*p->files));
	if (p->files == NULL || pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p->files);
		free(p);
		return NULL;
	}
	if (pthread_cond_init(&p->cond, NULL) != 0) {
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
		free(p->files);
		free(p);
		return NULL;
	}
	p->block_size = block_size;
	p->max_files = max_files;
	return p;
}

void plan_free(struct plan *p)
{
	if (p == NULL)
		return;
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&p->cond));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
	free(p->files);
	free(p);
}

void plan_add(struct plan *p, struct src_file *f)
{
	sync_lock(&p->lock);
	if (p->nfiles < p->max_files) {
		f->next_off = 0;
		f->busy = false;
		f->eof = !f->stream && f->size == 0;
		p->files[p->nfiles++] = f;
	}
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

/* Tries to claim from the current file; advances p->cur past finished
 * files. Returns 1 (claimed), 0 (nothing now: wait) . Lock held. */
static int plan_try_locked(struct plan *p, struct plan_claim *c)
{
	while (p->cur < p->nfiles) {
		struct src_file *f = p->files[p->cur];

		if (f->eof || atomic_load(&f->failed)) {
			if (f->busy)
				return 0; /* a reader still holds the stream */
			p->cur++;
			continue;
		}
		if (f->stream) {
			if (f->busy)
				return 0;
			f->busy = true;
			*c = (struct plan_claim){ f, f->next_off, p->block_size, p->seq++ };
			return 1;
		}
		uint64_t left = f->size - f->next_off;
		uint32_t len = left < p->block_size ? (uint32_t)left : p->block_size;
		*c = (struct plan_claim){ f, f->next_off, len, p->seq++ };
		f->next_off += len;
		if (f->next_off == f->size)
			f->eof = true;
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
		if (p->finished && p->cur == p->nfiles)
			break;
		sync_wait(&p->cond, &p->lock);
	}
	sync_unlock(&p->lock);
	return ret;
}

void plan_stream_done(struct plan *p, const struct plan_claim *c, uint32_t got, bool eof)
{
	struct src_file *f = c->f;

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
