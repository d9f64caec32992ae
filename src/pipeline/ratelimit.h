/* SPDX-License-Identifier: Apache-2.0 */
/* ratelimit: one cap on the bytes per second of every data stream together
 * (--bwlimit), shared by the source's sender threads.
 *
 * A sender asks for each piece of a block before it writes it; pieces are
 * at most ratelimit_quantum() bytes, so the socket is fed smoothly and never
 * gets a whole block (or window) at once. The limiter hands out time slots
 * in the order they are asked for (a virtual clock: each piece moves it on
 * by its bytes / rate), so the streams share the rate and the total never
 * runs ahead of it by more than one quantum, however many streams there
 * are. Waiting is on a condition variable with a deadline, which
 * ratelimit_abort() cuts short. All functions are thread-safe. */
#ifndef PCOPY_RATELIMIT_H
#define PCOPY_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

struct ratelimit;

/* A limiter of rate bytes per second (> 0). NULL on ENOMEM or rate == 0. */
struct ratelimit *ratelimit_new(uint64_t rate);

/* Frees it; nobody may be waiting in it. NULL is a no-op. */
void ratelimit_free(struct ratelimit *rl);

/* The largest piece to ask for at once: about 1/64 s of the rate, between
 * 1 KiB and 64 KiB. */
size_t ratelimit_quantum(const struct ratelimit *rl);

/* Waits until n more bytes may go, then returns 0; -PC_E_ABORTED once
 * ratelimit_abort was called (at once, or waking from the wait). */
int ratelimit_take(struct ratelimit *rl, size_t n);

/* Wakes every waiter, and makes every later take fail. Idempotent; an
 * xfer waker (xfer_watch). */
void ratelimit_abort(void *rl);

#endif
