/* SPDX-License-Identifier: Apache-2.0 */
/* bufpool: a fixed set of aligned buffers handed out from a free stack. */
#include "pipeline/bufpool.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sys/sync.h"

#define BUFPOOL_ALIGN 4096  /* page-aligned, so O_DIRECT-style I/O works */

struct bufpool {
	pthread_mutex_t lock;
	pthread_cond_t freed;  /* signalled on release and abort */
	struct buf *bufs;      /* count entries; fixed after bufpool_new */
	struct buf **free;     /* stack of free buffers; guarded by lock */
	unsigned nfree;        /* entries in free; guarded by lock */
	unsigned count;        /* fixed after bufpool_new */
	bool aborted;          /* guarded by lock */
};

/* Frees the buffers' memory and the arrays; not the sync objects. */
static void bufpool_free_memory(struct bufpool *p)
{
	unsigned i;

	if (p->bufs != NULL) {
		for (i = 0; i < p->count; i++)
			free(p->bufs[i].data);
	}
	free(p->bufs);
	free(p->free);
	free(p);
}

void *bufpool_alloc_data(size_t size)
{
	void *data = NULL;

	if (posix_memalign(&data, BUFPOOL_ALIGN, size) != 0)
		return NULL;
	return data;
}

void bufpool_free_data(void *data)
{
	free(data);
}

struct bufpool *bufpool_new(unsigned count, size_t size)
{
	struct bufpool *p = NULL;
	struct bufpool *ret = NULL;
	bool lock_ok = false;
	void *data;
	unsigned i;

	if (count == 0 || size == 0)
		goto out;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		goto out;
	p->count = count;
	p->bufs = calloc(count, sizeof(*p->bufs));
	p->free = calloc(count, sizeof(*p->free));
	if (p->bufs == NULL || p->free == NULL)
		goto out;
	for (i = 0; i < count; i++) {
		if (posix_memalign(&data, BUFPOOL_ALIGN, size) != 0)
			goto out;
		p->bufs[i].data = data;
		p->bufs[i].cap = size;
		p->free[i] = &p->bufs[i];
	}
	p->nfree = count;
	if (pthread_mutex_init(&p->lock, NULL) != 0)
		goto out;
	lock_ok = true;
	if (pthread_cond_init(&p->freed, NULL) != 0)
		goto out;
	ret = p;
	p = NULL;
out:
	if (p != NULL) {
		if (lock_ok)
			sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
		bufpool_free_memory(p);
	}
	return ret;
}

void bufpool_free(struct bufpool *p)
{
	if (p == NULL)
		return;
	assert(p->nfree == p->count && "bufpool_free: buffers still acquired");
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&p->freed));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
	bufpool_free_memory(p);
}

struct buf *bufpool_acquire(struct bufpool *p)
{
	struct buf *b = NULL;

	sync_lock(&p->lock);
	while (!p->aborted && p->nfree == 0) {
		sync_wait(&p->freed, &p->lock);
	}
	if (!p->aborted) {
		b = p->free[--p->nfree];
		b->len = 0;
		memset(&b->hdr, 0, sizeof(b->hdr));
		b->ctx = NULL;
		b->untried = false;
		b->err = 0;
	}
	sync_unlock(&p->lock);
	return b;
}

void bufpool_release(struct bufpool *p, struct buf *b)
{
	if (b == NULL)
		return;
	assert(b >= p->bufs && b < p->bufs + p->count);
	sync_lock(&p->lock);
	assert(p->nfree < p->count && "bufpool_release: released twice");
	p->free[p->nfree++] = b;
	sync_signal(&p->freed);
	sync_unlock(&p->lock);
}

void bufpool_abort(struct bufpool *p)
{
	sync_lock(&p->lock);
	p->aborted = true;
	sync_broadcast(&p->freed);
	sync_unlock(&p->lock);
}

unsigned bufpool_outstanding(struct bufpool *p)
{
	unsigned n;

	sync_lock(&p->lock);
	n = p->count - p->nfree;
	sync_unlock(&p->lock);
	return n;
}
