/* SPDX-License-Identifier: Apache-2.0 */
/* testchan: channels for the unit tests. A control channel over plain
 * fds, as the roles build it, and a fake backend that holds bytes inside
 * the chan where poll cannot see them, as TLS does with what it has
 * decrypted. Include after cmocka.h (testutil.h). */
#ifndef PCOPY_TESTCHAN_H
#define PCOPY_TESTCHAN_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/chan_int.h"
#include "wire/ctl.h"
#include "wire/proto.h"

/* A ctl over chan_plain_new(rfd, wfd), owning both; fails the test if it
 * cannot be made. */
static inline struct ctl *testchan_ctl(int rfd, int wfd, const char *peer, bool local)
{
	struct chan *ch = chan_plain_new(rfd, wfd);
	struct ctl *c;

	assert_non_null(ch);
	c = ctl_new(ch, peer, local);
	assert_non_null(c);
	return c;
}

/* ---- the fake: bytes buffered inside the chan ------------------------------
 * Its receives first hand out `held` (the bytes a TLS chan would have
 * decrypted already), then read rfd. chan_pending is true while any of
 * `held` is left. Sends write to wfd. Single-threaded use only. */
struct testchan_held {
	struct chan c;          /* first: the common part */
	uint8_t held[PROTO_FRAME_HDR_LEN + 2 * (PROTO_MAX_MSG + 64)];
	size_t len, pos;        /* held[pos..len) not handed out yet */
};

static inline int testchan_held_send(struct chan *c, const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t done = 0;
		while (done < iov[i].iov_len) {
			ssize_t w = write(c->wfd, p + done, iov[i].iov_len - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return w < 0 ? -errno : -EIO;
			done += (size_t)w;
		}
	}
	return 0;
}

static inline ssize_t testchan_held_recv_some(struct chan *c, void *buf, size_t len)
{
	struct testchan_held *h = (struct testchan_held *)c;
	ssize_t r;

	if (h->pos < h->len) {
		size_t k = h->len - h->pos < len ? h->len - h->pos : len;
		memcpy(buf, h->held + h->pos, k);
		h->pos += k;
		return (ssize_t)k;
	}
	do
		r = read(c->rfd, buf, len);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static inline bool testchan_held_pending(struct chan *c)
{
	struct testchan_held *h = (struct testchan_held *)c;

	return h->pos < h->len;
}

static inline int testchan_held_close_send(struct chan *c)
{
	(void)c;
	return 0;
}

static inline void testchan_held_destroy(struct chan *c)
{
	free(c);
}

static const struct chan_ops testchan_held_ops = {
	.send = testchan_held_send,
	.recv_some = testchan_held_recv_some,
	.pending = testchan_held_pending,
	.close_send = testchan_held_close_send,
	.destroy = testchan_held_destroy,
};

/* A fake chan over rfd and wfd (owned) that already holds held[0..len-1]
 * inside it. */
static inline struct chan *testchan_held_new(int rfd, int wfd, const void *held, size_t len)
{
	struct testchan_held *h = calloc(1, sizeof(*h));

	assert_non_null(h);
	assert_true(len <= sizeof(h->held));
	chan_init(&h->c, &testchan_held_ops, rfd, wfd, "clear");
	memcpy(h->held, held, len);
	h->len = len;
	return &h->c;
}

/* A ctl over a fake chan on fd (owned) that already holds the frame of m
 * inside it, as if decrypted; fd itself stays silent. */
static inline struct ctl *testchan_held_ctl(int fd, const struct proto_msg *m, const char *peer)
{
	uint8_t frame[PROTO_FRAME_HDR_LEN + PROTO_MAX_MSG + 64];
	int n = proto_encode(m, frame, sizeof(frame));
	struct ctl *c;

	assert_true(n > 0);
	c = ctl_new(testchan_held_new(fd, fd, frame, (size_t)n), peer, false);
	assert_non_null(c);
	return c;
}

#endif
