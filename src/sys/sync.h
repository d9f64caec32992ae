/* SPDX-License-Identifier: Apache-2.0 */
/* sync: checked mutex and condition variable calls.
 *
 * On a valid, initialised default mutex these calls cannot fail; if one
 * does, memory is corrupt and carrying on would risk writing wrong data, so
 * we stop the process loudly. Every pthread_* result is checked (!= 0). */
#ifndef PCOPY_SYNC_H
#define PCOPY_SYNC_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void sync_die(const char *what, int rc)
{
	fprintf(stderr, "pcopy: fatal: %s failed: %s\n", what, strerror(rc));
	abort();
}

/* For any other pthread call whose failure can only be a bug. */
static inline void sync_check(const char *what, int rc)
{
	if (rc != 0)
		sync_die(what, rc);
}

static inline void sync_lock(pthread_mutex_t *m)
{
	int rc = pthread_mutex_lock(m);
	if (rc != 0)
		sync_die("pthread_mutex_lock", rc);
}

static inline void sync_unlock(pthread_mutex_t *m)
{
	int rc = pthread_mutex_unlock(m);
	if (rc != 0)
		sync_die("pthread_mutex_unlock", rc);
}

static inline void sync_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	int rc = pthread_cond_wait(c, m);
	if (rc != 0)
		sync_die("pthread_cond_wait", rc);
}

static inline void sync_broadcast(pthread_cond_t *c)
{
	int rc = pthread_cond_broadcast(c);
	if (rc != 0)
		sync_die("pthread_cond_broadcast", rc);
}

static inline void sync_signal(pthread_cond_t *c)
{
	int rc = pthread_cond_signal(c);
	if (rc != 0)
		sync_die("pthread_cond_signal", rc);
}

#endif
