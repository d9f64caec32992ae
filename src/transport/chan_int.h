/* SPDX-License-Identifier: Apache-2.0 */
/* chan_int: what a chan backend provides. Private to src/transport. */
#ifndef PCOPY_CHAN_INT_H
#define PCOPY_CHAN_INT_H

#include <stdatomic.h>

#include "transport/chan.h"

struct chan_ops {
	/* Each has the contract of the chan_* function of the same name;
	 * chan.c does the argument checks and the bookkeeping common to all. */
	int (*send)(struct chan *c, const struct iovec *iov, int n);
	ssize_t (*recv_some)(struct chan *c, void *buf, size_t len);
	bool (*pending)(struct chan *c);
	int (*close_send)(struct chan *c);
	void (*destroy)(struct chan *c);  /* frees the backend's state, not the fds */
	/* Optional: called by chan_abort after it set the flag and shut the
	 * sockets down, to wake waits that shutdown does not (pipes). Must be
	 * async-safe with respect to every other op. */
	void (*wake)(struct chan *c);
};

/* The common part; a backend embeds it first in its own struct. */
struct chan {
	const struct chan_ops *ops;
	int rfd, wfd;                 /* owned; wfd -1 once a pipe's close_send closed it */
	bool rsock, wsock;            /* immutable: whether rfd / wfd are sockets */
	unsigned timeout_s;           /* owner: 0 = none */
	atomic_bool aborted;          /* set by chan_abort */
	char describe[96];            /* immutable after creation */
	char error[256];              /* owner: detail of the last failure */
};

/* Fills the common part (ops, fds, whether each is a socket (fstat),
 * "clear" or the backend's description). */
void chan_init(struct chan *c, const struct chan_ops *ops, int rfd, int wfd, const char *describe);

#endif
