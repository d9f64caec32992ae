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
};

/* The common part; a backend embeds it first in its own struct. */
struct chan {
	const struct chan_ops *ops;
	int rfd, wfd;                 /* owned */
	unsigned timeout_s;           /* owner: 0 = none */
	atomic_bool aborted;          /* set by chan_abort */
	char describe[96];            /* immutable after creation */
	char error[128];              /* owner: detail of the last failure */
};

/* Fills the common part (ops, fds, "clear" or the backend's description). */
void chan_init(struct chan *c, const struct chan_ops *ops, int rfd, int wfd, const char *describe);

#endif
