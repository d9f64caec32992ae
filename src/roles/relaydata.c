// SPDX-License-Identifier: Apache-2.0
/* relaydata: pumps between the two hosts of a -3 copy (relaydata.h). */
#include "roles/relaydata.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sys/sync.h"
#include "wire/proto.h"

#define RELAYDATA_BUF (256u << 10)  /* source to sink: the blocks */
#define RELAYDATA_BACK_BUF (16u << 10) /* sink to source: only the end of TLS */

/* One direction of one stream. */
struct pump {
	struct chan *from, *to;   /* borrowed */
	size_t size;              /* of its buffer */
	int ret;                  /* result: 0, or how it failed */
	pthread_t tid;
	bool started;
};

struct relaydata {
	unsigned n;
	struct pump p[2 * PROTO_MAX_STREAMS];
};

/* Copies from->to until from ends (then ends to's sending side) or either
 * fails (then aborts both, so that the other direction stops too). */
static void *pump_main(void *arg)
{
	struct pump *p = arg;
	uint8_t *buf = malloc(p->size);
	int ret = buf != NULL ? 0 : -ENOMEM;

	while (ret == 0) {
		ssize_t r = chan_recv_some(p->from, buf, p->size);
		if (r == 0) {
			ret = chan_close_send(p->to);
			break;
		}
		if (r < 0) {
			ret = (int)r;
			break;
		}
		struct iovec iov = { .iov_base = buf, .iov_len = (size_t)r };
		ret = chan_send(p->to, &iov, 1);
	}
	if (ret < 0) {
		chan_abort(p->from);
		chan_abort(p->to);
	}
	p->ret = ret;
	free(buf);
	return NULL;
}

int relaydata_start(struct chan **src, struct chan **dst, unsigned n, struct relaydata **out,
		    struct pc_err *e)
{
	struct relaydata *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	r->n = n;
	for (unsigned i = 0; i < 2 * n; i++) {
		struct pump *p = &r->p[i];
		p->from = i < n ? src[i] : dst[i - n];
		p->to = i < n ? dst[i] : src[i - n];
		p->size = i < n ? RELAYDATA_BUF : RELAYDATA_BACK_BUF;
		int rc = pthread_create(&p->tid, NULL, pump_main, p);
		if (rc != 0) {
			(void)relaydata_finish(r, true, e);
			return pc_err_set(e, -rc, "cannot start a relay thread: %s", strerror(rc));
		}
		p->started = true;
	}
	*out = r;
	return 0;
}

int relaydata_finish(struct relaydata *r, bool abort, struct pc_err *e)
{
	int ret = 0;

	if (r == NULL)
		return 0;
	if (abort)
		for (unsigned i = 0; i < 2 * r->n; i++)
			if (r->p[i].started)
				chan_abort(r->p[i].from);
	for (unsigned i = 0; i < 2 * r->n; i++) {
		struct pump *p = &r->p[i];
		if (!p->started)
			continue;
		int rc = pthread_join(p->tid, NULL);
		if (rc != 0 && ret == 0)
			ret = pc_err_set(e, -rc, "cannot join a relay thread: %s", strerror(rc));
		if (p->ret < 0 && p->ret != -PC_E_ABORTED && ret == 0 && !abort)
			ret = pc_err_set(e, p->ret, "relaying data stream %u: %s", i % r->n,
					 pc_strerror(p->ret));
	}
	free(r);
	return ret;
}
