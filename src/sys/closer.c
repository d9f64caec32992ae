/* SPDX-License-Identifier: Apache-2.0 */
/* closer: closes file descriptors on a thread of its own (closer.h). */
#include "sys/closer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "sys/sync.h"

struct closer {
	pthread_mutex_t lock;              /* guards everything below */
	pthread_cond_t cond;               /* the thread waits here for work or stop */
	pthread_t tid;                     /* valid while started */
	bool started;                      /* the thread runs; closer_free joins it */
	bool tried;                        /* pthread_create was called (once) */
	bool stop;                         /* closer_free: drain, then end */
	unsigned head, n;                  /* the queue: n fds from fds[head] on */
	int fds[CLOSER_QUEUE];             /* owned while queued */
};

struct closer *closer_new(void)
{
	struct closer *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		free(c);
		return NULL;
	}
	if (pthread_cond_init(&c->cond, NULL) != 0) {
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&c->lock));
		free(c);
		return NULL;
	}
	return c;
}

static void *closer_run(void *arg)
{
	struct closer *c = arg;

	sync_lock(&c->lock);
	for (;;) {
		while (c->n == 0 && !c->stop)
			sync_wait(&c->cond, &c->lock);
		if (c->n == 0)
			break;
		int fd = c->fds[c->head];
		c->head = (c->head + 1) % CLOSER_QUEUE;
		c->n--;
		sync_unlock(&c->lock);
		(void)close(fd); /* the slow part: outside the lock */
		sync_lock(&c->lock);
	}
	sync_unlock(&c->lock);
	return NULL;
}

void closer_put(struct closer *c, int fd)
{
	bool queued = false;

	if (c != NULL) {
		sync_lock(&c->lock);
		if (!c->tried) { /* without a thread, fds are closed at once: slower, not wrong */
			c->tried = true;
			c->started = pthread_create(&c->tid, NULL, closer_run, c) == 0;
		}
		if (c->started && c->n < CLOSER_QUEUE) {
			c->fds[(c->head + c->n) % CLOSER_QUEUE] = fd;
			c->n++;
			queued = true;
			sync_signal(&c->cond);
		}
		sync_unlock(&c->lock);
	}
	if (!queued)
		(void)close(fd);
}

void closer_free(struct closer *c)
{
	if (c == NULL)
		return;
	sync_lock(&c->lock);
	c->stop = true;
	sync_broadcast(&c->cond);
	sync_unlock(&c->lock);
	if (c->started)
		sync_check("pthread_join", pthread_join(c->tid, NULL));
	/* Without a thread nothing was queued. */
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&c->cond));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&c->lock));
	free(c);
}
