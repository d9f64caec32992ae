/* SPDX-License-Identifier: Apache-2.0 */
/* queue: a bounded blocking FIFO of pointers between pipeline stages.
 *
 * Many producers, many consumers. Producers block while it is full,
 * consumers while it is empty; nobody polls. The queue knows how many
 * producers it has: each calls queue_close() when done, and once all have,
 * consumers drain what is left and then get NULL. queue_abort() is the
 * error path: everybody wakes up and stops. All functions are thread-safe. */
#ifndef PCOPY_QUEUE_H
#define PCOPY_QUEUE_H

#include <stdbool.h>

struct queue;

/* A queue of at most cap items fed by nproducers producers. NULL on ENOMEM
 * or cap == 0 or nproducers == 0. */
struct queue *queue_new(unsigned cap, unsigned nproducers);

/* Frees the queue; items still in it are not touched (drain them first
 * with queue_trypop). NULL is a no-op. */
void queue_free(struct queue *q);

/* Appends item (non-NULL), blocking while the queue is full. Returns 0, or
 * -PC_E_ABORTED if the queue was aborted; then the caller still owns item.
 * Pushing after all producers closed is a programming error (asserted). */
int queue_push(struct queue *q, void *item);

/* Removes the oldest item, blocking while the queue is empty and open.
 * Returns NULL when every producer has closed and the queue is empty, or
 * when the queue was aborted. */
void *queue_pop(struct queue *q);

/* Removes the oldest item without blocking, even after abort; NULL if
 * empty. For draining at teardown. */
void *queue_trypop(struct queue *q);

/* One producer is done. When the last producer closes, waiting consumers
 * wake up and drain. */
void queue_close(struct queue *q);

/* Wakes everybody: pushes fail, pops return NULL. Idempotent. */
void queue_abort(struct queue *q);

bool queue_aborted(struct queue *q);

#endif
