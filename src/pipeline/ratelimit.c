/* SPDX-License-Identifier: Apache-2.0 */
/* ratelimit: a virtual clock of the bytes allowed so far. */
#include "pipeline/ratelimit.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "sys/err.h"
#include "sys/platform.h"
#include "sys/sync.h"

#define RATELIMIT_MIN_QUANTUM 1024u
#define RATELIMIT_MAX_QUANTUM (64u * 1024u)

struct ratelimit {
	pthread_mutex_t lock;
	pthread_cond_t wake;   /* broadcast by ratelimit_abort; waited on with a deadline */
	uint64_t rate;         /* bytes per second; fixed after _new */
	size_t quantum;        /* fixed after _new */
	uint64_t next_ns;      /* CLOCK_MONOTONIC time at which the bytes given out so far
	                          have all gone at the rate; guarded by lock */
	bool aborted;          /* guarded by lock */
};

struct ratelimit *ratelimit_new(uint64_t rate)
{
	struct ratelimit *rl;
	pthread_condattr_t ca;
	int rc;

	if (rate == 0)
		return NULL;
	rl = calloc(1, sizeof(*rl));
	if (rl == NULL)
		return NULL;
	rl->rate = rate;
	rl->quantum = rate / 64 < RATELIMIT_MIN_QUANTUM   ? RATELIMIT_MIN_QUANTUM
		      : rate / 64 > RATELIMIT_MAX_QUANTUM ? RATELIMIT_MAX_QUANTUM
							  : (size_t)(rate / 64);
	if (pthread_condattr_init(&ca) != 0) {
		free(rl);
		return NULL;
	}
	/* The deadlines are monotonic: a clock step must not stall a copy. */
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(&rl->wake, &ca);
	sync_check("pthread_condattr_destroy", pthread_condattr_destroy(&ca));
	if (rc != 0) {
		free(rl);
		return NULL;
	}
	if (pthread_mutex_init(&rl->lock, NULL) != 0) {
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&rl->wake));
		free(rl);
		return NULL;
	}
	return rl;
}

void ratelimit_free(struct ratelimit *rl)
{
	if (rl == NULL)
		return;
	sync_check("pthread_cond_destroy", pthread_cond_destroy(&rl->wake));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&rl->lock));
	free(rl);
}

size_t ratelimit_quantum(const struct ratelimit *rl)
{
	return rl->quantum;
}

/* n bytes at the limiter's rate, in nanoseconds (n <= SIZE_MAX, rate >= 1:
 * the product fits 128 bits). */
static uint64_t ratelimit_span_ns(const struct ratelimit *rl, size_t n)
{
	return (uint64_t)((unsigned __int128)n * 1000000000u / rl->rate);
}

int ratelimit_take(struct ratelimit *rl, size_t n)
{
	uint64_t now = platform_now_ns(), start, until;
	int ret = 0;

	sync_lock(&rl->lock);
	/* The piece may go once the pieces before it have gone, and no
	 * earlier than now: an idle limiter saves up no credit beyond the
	 * piece itself, so a pause is never followed by a burst. */
	start = rl->next_ns > now ? rl->next_ns : now;
	rl->next_ns = start + ratelimit_span_ns(rl, n);
	/* It goes at the start of its slot and takes the slot to drain. */
	until = start;
	while (!rl->aborted && platform_now_ns() < until) {
		struct timespec ts = { .tv_sec = (time_t)(until / 1000000000u),
				       .tv_nsec = (long)(until % 1000000000u) };
		int rc = pthread_cond_timedwait(&rl->wake, &rl->lock, &ts);
		if (rc != 0 && rc != ETIMEDOUT)
			sync_die("pthread_cond_timedwait", rc);
	}
	if (rl->aborted)
		ret = -PC_E_ABORTED;
	sync_unlock(&rl->lock);
	return ret;
}

void ratelimit_abort(void *arg)
{
	struct ratelimit *rl = arg;

	sync_lock(&rl->lock);
	rl->aborted = true;
	sync_broadcast(&rl->wake);
	sync_unlock(&rl->lock);
}
