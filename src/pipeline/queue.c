/* SPDX-License-Identifier: Apache-2.0 */
/* queue: a bounded ring of pointers with blocking push and pop. */
#include "pipeline/queue.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

#include "sys/err.h"
#include "sys/sync.h"

struct queue {
	pthread_mutex_t lock;
	pthread_cond_t not_empty;  /* waited on by pop; guarded by lock */
	pthread_cond_t not_full;   /* waited on by push; guarded by lock */
	void **items;              /* cap slots; guarded by lock */
	unsigned cap;              /* fixed after queue_new */
	unsigned head;             /* index of the oldest item; guarded by lock */
	unsigned count;            /* items in the ring; guarded by lock */
	unsigned open;             /* producers not yet closed; guarded by lock */
	bool aborted;              /* guarded by lock */
};

struct queue *queue_new(unsigned cap, unsigned nproducers)
{
	struct queue *q = NULL;
	struct queue *ret = NULL;
	int nsync = 0;  /* sync objects initialised so far */

	if (cap == 0 || nproducers == 0)
		goto out;
	q = calloc(1, sizeof(*q));
	if (q == NULL)
		goto out;
	q->items = calloc(cap, sizeof(*q->items));
	if (q->items == NULL)
		goto out;
	q->cap = cap;
	q->open = nproducers;
	if (pthread_mutex_init(&q->lock, NULL) != 0)
		goto out;
	nsync = 1;
	if (pthread_cond_init(&q->not_empty, NULL) != 0)
		goto out;
	nsync = 2;
	if (pthread_cond_init(&q->not_full, NULL) != 0)
		goto out;
	ret = q;
	q = NULL;
out:
	if (q != NULL) {
		if (nsync >= 2)
			sync_check("pthread_cond_destroy", pthread_cond_destroy(&q->not_empty));
		if (nsync >= 1)
			sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&q->lock));
		free(q->items);
		free(q);
	}
	return ret;
}

void queue_free(struct queue *q)
{
	if (q == NULL)
		return;
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&q->not_full));
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&q->not_empty));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&q->lock));
	free(q->items);
	free(q);
}

/* Takes the oldest item; the queue must not be empty. */
static void *queue_take_locked(struct queue *q)
{
	void *item = q->items[q->head];

	q->items[q->head] = NULL;
	q->head = (q->head + 1) % q->cap;
	q->count--;
	sync_signal(&q->not_full);
	return item;
}

int queue_push(struct queue *q, void *item)
{
	int ret = -PC_E_ABORTED;

	assert(item != NULL);
	sync_lock(&q->lock);
	assert(q->open > 0 && "queue_push after every producer closed");
	while (!q->aborted && q->count == q->cap)
		sync_wait(&q->not_full, &q->lock);
	if (q->aborted)
		goto out;
	q->items[((size_t)q->head + q->count) % q->cap] = item;
	q->count++;
	sync_signal(&q->not_empty);
	ret = 0;
out:
	sync_unlock(&q->lock);
	return ret;
}

void *queue_pop(struct queue *q)
{
	void *item = NULL;

	sync_lock(&q->lock);
	while (!q->aborted && q->count == 0 && q->open > 0)
		sync_wait(&q->not_empty, &q->lock);
	if (!q->aborted && q->count > 0)
		item = queue_take_locked(q);
	sync_unlock(&q->lock);
	return item;
}

void *queue_trypop(struct queue *q)
{
	void *item = NULL;

	sync_lock(&q->lock);
	if (q->count > 0)
		item = queue_take_locked(q);
	sync_unlock(&q->lock);
	return item;
}

void queue_close(struct queue *q)
{
	sync_lock(&q->lock);
	assert(q->open > 0 && "queue_close called more often than producers");
	if (q->open > 0)
		q->open--;
	if (q->open == 0)
		sync_broadcast(&q->not_empty);
	sync_unlock(&q->lock);
}

void queue_abort(struct queue *q)
{
	sync_lock(&q->lock);
	q->aborted = true;
	sync_broadcast(&q->not_empty);
	sync_broadcast(&q->not_full);
	sync_unlock(&q->lock);
}

bool queue_aborted(struct queue *q)
{
	bool aborted;

	sync_lock(&q->lock);
	aborted = q->aborted;
	sync_unlock(&q->lock);
	return aborted;
}
