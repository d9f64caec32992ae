/* SPDX-License-Identifier: Apache-2.0 */
/* sumpool: the sink's hashing of old files on threads of its own
 * (sumpool.h). */
#include "pipeline/sumpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/journal.h"
#include "pipeline/sparse.h"
#include "sys/platform.h"
#include "sys/sync.h"
#include "wire/proto.h"

#define SUMPOOL_MAX_THREADS 8u

enum sumpool_state { JOB_FREE = 0, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct sumpool_job {
	struct sumpool_file f;
	uint64_t first;
	unsigned count;
	bool copy;
	bool copy_failed;
	enum sumpool_state state;
	uint8_t hashes[SUMPOOL_CHUNK * PROTO_SUM_LEN];
};

struct sumpool_worker {
	struct sumpool *p;
	pthread_t tid;
	uint8_t *buf;                      /* a block: this thread's alone */
};

struct sumpool {
	pthread_mutex_t lock;              /* guards everything below but the buffers */
	pthread_cond_t work;               /* workers wait here for a queued job, or stop */
	pthread_cond_t done;               /* the collector waits here for its job */
	bool stop;                         /* sumpool_free: end */
	unsigned head, n;                  /* the jobs uncollected: n from jobs[head] on */
	struct sumpool_job jobs[SUMPOOL_DEPTH];
	unsigned started;                  /* workers running, w[0 .. started - 1] */
	uint8_t *own;                      /* a block for the collector, when none runs */
	uint8_t zeros[PROTO_SUM_LEN];      /* the hash of a block of zeros */
	struct sumpool_worker w[SUMPOOL_MAX_THREADS];
};

/* Hashes (and copies) job's blocks into job->hashes with buf, a block; a
 * block that is a hole in the file is zeros (zeros: their hash for a whole
 * block), hashed unread, and left out of the copy, whose hole it is too. */
static void sumpool_run(struct sumpool_job *job, uint8_t *buf, const uint8_t *zeros)
{
	const struct sumpool_file *f = &job->f;
	uint64_t B = f->block;
	struct sparse_scan sc = { 0 };
	bool stopped = false;

	for (unsigned i = 0; i < job->count; i++) {
		uint64_t k = job->first + i;
		uint64_t len = f->size - k * B < B ? f->size - k * B : B;
		uint8_t *out = job->hashes + (size_t)i * PROTO_SUM_LEN;
		ssize_t got = -1;

		stopped = stopped || (f->aborted != NULL && f->aborted(f->arg));
		if (!stopped && (f->j == NULL || journal_has(f->j, k)) &&
		    sparse_hole(f->fd, k * B, len, &sc)) {
			if (len == B)
				memcpy(out, zeros, PROTO_SUM_LEN);
			else
				proto_block_sum(memset(buf, 0, (size_t)len), (size_t)len, out);
			continue;
		}
		if (!stopped && (f->j == NULL || journal_has(f->j, k)))
			got = platform_pread_full(f->fd, buf, (size_t)len, k * B);
		/* Before its hash can go: a DATA or SAME block for k comes only
		 * after (a hole may come any time: put leaves what came). */
		if (got == (ssize_t)len && job->copy && !job->copy_failed &&
		    f->put(f->put_arg, k, k * B, buf, (size_t)len) < 0)
			job->copy_failed = true;
		/* Unreadable, shrunk, never written, or not in the copy: the
		 * source sends it. */
		if (got == (ssize_t)len && !job->copy_failed)
			proto_block_sum(buf, (size_t)len, out);
		else
			memset(out, 0, PROTO_SUM_LEN);
	}
}

/* The oldest queued job (p->lock held), or NULL. */
static struct sumpool_job *sumpool_next(struct sumpool *p)
{
	for (unsigned i = 0; i < p->n; i++) {
		struct sumpool_job *job = &p->jobs[(p->head + i) % SUMPOOL_DEPTH];
		if (job->state == JOB_QUEUED)
			return job;
	}
	return NULL;
}

static void *sumpool_worker(void *arg)
{
	struct sumpool_worker *w = arg;
	struct sumpool *p = w->p;

	sync_lock(&p->lock);
	for (;;) {
		struct sumpool_job *job;
		while ((job = sumpool_next(p)) == NULL && !p->stop)
			sync_wait(&p->work, &p->lock);
		if (job == NULL)
			break;
		job->state = JOB_RUNNING;
		sync_unlock(&p->lock);
		sumpool_run(job, w->buf, p->zeros);
		sync_lock(&p->lock);
		job->state = JOB_DONE;
		sync_broadcast(&p->done);
	}
	sync_unlock(&p->lock);
	return NULL;
}

struct sumpool *sumpool_new(unsigned threads, size_t block)
{
	struct sumpool *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	if (threads > SUMPOOL_MAX_THREADS)
		threads = SUMPOOL_MAX_THREADS;
	p->own = calloc(1, block);
	if (p->own != NULL)
		proto_block_sum(p->own, block, p->zeros);
	if (p->own == NULL || pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p->own);
		free(p);
		return NULL;
	}
	if (pthread_cond_init(&p->work, NULL) != 0) {
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
		free(p->own);
		free(p);
		return NULL;
	}
	if (pthread_cond_init(&p->done, NULL) != 0) {
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&p->work));
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
		free(p->own);
		free(p);
		return NULL;
	}
	/* Workers that cannot be had leave their share to the others, or
	 * all of it to sumpool_collect. */
	for (unsigned i = 0; i < threads; i++) {
		struct sumpool_worker *w = &p->w[p->started];
		w->p = p;
		w->buf = malloc(block);
		if (w->buf == NULL)
			break;
		if (pthread_create(&w->tid, NULL, sumpool_worker, w) != 0) {
			free(w->buf);
			w->buf = NULL;
			break;
		}
		p->started++;
	}
	return p;
}

void sumpool_submit(struct sumpool *p, const struct sumpool_file *f, uint64_t first,
		    unsigned count, bool copy)
{
	sync_lock(&p->lock);
	struct sumpool_job *job = &p->jobs[(p->head + p->n) % SUMPOOL_DEPTH];
	job->f = *f;
	job->first = first;
	job->count = count;
	job->copy = copy && f->put != NULL;
	job->copy_failed = false;
	job->state = JOB_QUEUED;
	p->n++;
	sync_signal(&p->work);
	sync_unlock(&p->lock);
}

void sumpool_collect(struct sumpool *p, struct sumpool_chunk *c)
{
	sync_lock(&p->lock);
	struct sumpool_job *job = &p->jobs[p->head];
	if (p->started == 0 && job->state == JOB_QUEUED) {
		job->state = JOB_RUNNING;
		sync_unlock(&p->lock);
		sumpool_run(job, p->own, p->zeros);
		sync_lock(&p->lock);
		job->state = JOB_DONE;
	}
	while (job->state != JOB_DONE)
		sync_wait(&p->done, &p->lock);
	job->state = JOB_FREE;
	p->head = (p->head + 1) % SUMPOOL_DEPTH;
	p->n--;
	sync_unlock(&p->lock);
	/* The job's slot is reused only by a later submit. */
	*c = (struct sumpool_chunk){ .first = job->first, .count = job->count,
				     .hashes = job->hashes, .copied = job->copy,
				     .copy_failed = job->copy_failed };
}

void sumpool_free(struct sumpool *p)
{
	if (p == NULL)
		return;
	sync_lock(&p->lock);
	p->stop = true;
	sync_broadcast(&p->work);
	sync_unlock(&p->lock);
	for (unsigned i = 0; i < p->started; i++) {
		sync_check("pthread_join", pthread_join(p->w[i].tid, NULL));
		free(p->w[i].buf);
	}
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&p->done));
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&p->work));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&p->lock));
	free(p->own);
	free(p);
}
