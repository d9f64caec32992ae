/* SPDX-License-Identifier: Apache-2.0 */
/* ctl: framed control messages over a channel (transport/chan). */
#include "wire/ctl.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "sys/err.h"
#include "sys/log.h"
#include "sys/platform.h"
#include "sys/sync.h"

struct ctl {
	struct chan *ch;         /* owned; received from by the receiving thread only,
	                            sent on under wlock */
	pthread_mutex_t wlock;   /* serialises frames */
	uint8_t wbuf[PROTO_FRAME_HDR_LEN + PROTO_MAX_PAYLOAD]; /* guarded by wlock */
	uint8_t rbuf[PROTO_MAX_PAYLOAD]; /* receiving thread only; ENTRIES borrow it */
	struct proto_request *req; /* owned; receiving thread: the last REQUEST received */
	char peer[128];          /* immutable */
	bool local;              /* immutable: the peer is our child */
	int intr_fd;             /* receiving thread: signalfd to watch, or -1 */
	uint64_t deadline_ns;    /* receiving thread: platform_now_ns() limit, or 0 */
	bool held;               /* receiving thread: a message was put back */
	struct proto_msg back;   /* receiving thread: that message */
	char why[PROTO_MAX_MSG + 1]; /* receiving thread: what was wrong with the last
	                            frame refused, or "" */
};

struct ctl *ctl_new(struct chan *ch, const char *peer, bool local)
{
	struct ctl *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->req = calloc(1, sizeof(*c->req));
	if (c->req == NULL || pthread_mutex_init(&c->wlock, NULL) != 0) {
		free(c->req);
		free(c);
		return NULL;
	}
	c->ch = ch;
	c->local = local;
	c->intr_fd = -1;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	return c;
}

void ctl_free(struct ctl *c)
{
	if (c == NULL)
		return;
	chan_free(c->ch);
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&c->wlock));
	free(c->req);
	free(c);
}

int ctl_send(struct ctl *c, const struct proto_msg *m)
{
	int ret;

	if (pthread_mutex_lock(&c->wlock) != 0)
		return -PC_E_ABORTED;
	ret = proto_encode(m, c->wbuf, sizeof(c->wbuf));
	if (ret >= 0) {
		/* One frame, one send: the chan never interleaves it. */
		const struct iovec iov = { .iov_base = c->wbuf, .iov_len = (size_t)ret };
		ret = chan_send(c->ch, &iov, 1);
	}
	if (pthread_mutex_unlock(&c->wlock) != 0 && ret == 0)
		ret = -PC_E_ABORTED;
	if (ret == 0)
		log_debug("sent %s to %s", proto_type_name(m->type), c->peer);
	return ret;
}

int ctl_send_error(struct ctl *c, int code, const char *msg)
{
	struct proto_msg m = { .type = PROTO_ERROR };

	m.u.error.code = code < 0 ? code : -code;
	snprintf(m.u.error.msg, sizeof(m.u.error.msg), "%s", msg);
	return ctl_send(c, &m);
}

void ctl_set_intr(struct ctl *c, int intr_fd)
{
	c->intr_fd = intr_fd;
}

void ctl_set_deadline(struct ctl *c, unsigned seconds)
{
	c->deadline_ns = seconds ? platform_now_ns() + (uint64_t)seconds * 1000000000u : 0;
}

/* Waits until the chan's fd is readable (or hung up). Returns 0, -EAGAIN
 * to look again (poll was interrupted, or timed out before the deadline
 * check), -PC_E_TIMEOUT past the deadline, -PC_E_INTERRUPTED when the
 * signalfd is readable, or -errno. */
static int ctl_wait(struct ctl *c)
{
	struct pollfd p[2] = { { .fd = chan_rfd(c->ch), .events = POLLIN },
			       { .fd = c->intr_fd, .events = POLLIN } };
	int timeout = -1;

	if (c->deadline_ns != 0) {
		uint64_t now = platform_now_ns();
		if (now >= c->deadline_ns)
			return -PC_E_TIMEOUT;
		timeout = (int)((c->deadline_ns - now) / 1000000u) + 1;
	}
	int n = poll(p, c->intr_fd >= 0 ? 2 : 1, timeout);
	if (n < 0 && errno == EINTR)
		return -EAGAIN;
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EAGAIN; /* the deadline check above decides */
	if ((p[1].revents & POLLIN) && !(p[0].revents & (POLLIN | POLLHUP)))
		return -PC_E_INTERRUPTED;
	return 0;
}

/* Whether a stop signal waits on the signalfd (left unread for the top). */
static bool ctl_intr_pending(const struct ctl *c)
{
	struct pollfd p = { .fd = c->intr_fd, .events = POLLIN };

	return c->intr_fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Reads exactly len bytes. Each wait is a poll that also watches the
 * signalfd and the deadline, so neither a signal nor a peer that trickles
 * a frame byte by byte can keep us here. Bytes already inside the chan
 * (chan_pending) are taken without a poll, which would not see them. */
static int ctl_read(struct ctl *c, uint8_t *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		if (!chan_pending(c->ch)) {
			int ret = ctl_wait(c);
			if (ret == -EAGAIN)
				continue;
			if (ret < 0)
				return ret;
		}
		ssize_t r = chan_recv_some(c->ch, buf + done, len - done);
		/* A chan timeout is no verdict here: the deadline decides. */
		if (r == -PC_E_TIMEOUT || r == -EAGAIN || r == -EINTR)
			continue;
		if (r <= 0) {
			/* The peer went away as a stop signal came: the signal is
			 * the cause (timeout(1) and a terminal's Ctrl-C stop the
			 * whole process group, ssh with us), not the network. */
			if (ctl_intr_pending(c))
				return -PC_E_INTERRUPTED;
			return r < 0 ? (int)r : -PC_E_NET;
		}
		done += (size_t)r;
	}
	return 0;
}

int ctl_recv(struct ctl *c, struct proto_msg *m)
{
	uint8_t hdr[PROTO_FRAME_HDR_LEN], type;
	uint32_t len;
	int ret;

	if (c->held) {
		*m = c->back;
		c->held = false;
		return 0;
	}
	ret = ctl_read(c, hdr, sizeof(hdr));
	if (ret < 0)
		return ret;
	ret = proto_frame_decode(hdr, &type, &len);
	if (ret < 0)
		return ret;
	ret = ctl_read(c, c->rbuf, len);
	if (ret < 0)
		return ret;
	m->u.request = c->req; /* proto_decode keeps it only for a REQUEST */
	ret = proto_decode(type, c->rbuf, len, m);
	c->why[0] = '\0';
	if (ret == -PC_E_PROTO && type == PROTO_ENTRIES)
		proto_entries_explain(c->rbuf, len, c->why, sizeof(c->why));
	if (ret == 0)
		log_debug("received %s from %s", proto_type_name(type), c->peer);
	return ret;
}

int ctl_expect(struct ctl *c, uint8_t want, struct proto_msg *m, struct pc_err *e)
{
	int ret = ctl_recv(c, m);

	if (ret == -PC_E_NET)
		return pc_err_set(e, ret, "%s closed the control connection", c->peer);
	if (ret == -PC_E_INTERRUPTED)
		return pc_err_set(e, ret, "interrupted while waiting for %s", c->peer);
	if (ret == -PC_E_TIMEOUT)
		return pc_err_set(e, ret, "%s did not answer in time", c->peer);
	if (ret < 0) {
		/* TLS says more than the code: a record altered on the way. */
		const char *why = chan_error(c->ch);
		return pc_err_set(e, ret, "control channel from %s: %s", c->peer,
				  why[0] != '\0' ? why : pc_strerror(ret));
	}
	return ctl_check(c, m, want, e);
}

int ctl_check(const struct ctl *c, const struct proto_msg *m, uint8_t want, struct pc_err *e)
{
	if (m->type == PROTO_ERROR)
		return pc_err_set(e, m->u.error.code < 0 ? m->u.error.code : -PC_E_PROTO, "%s%s%s",
				  c->local ? "" : c->peer, c->local ? "" : ": ", m->u.error.msg);
	if (m->type != want)
		return pc_err_set(e, -PC_E_PROTO, "%s sent %s where %s was expected", c->peer,
				  proto_type_name(m->type), proto_type_name(want));
	return 0;
}

void ctl_unread(struct ctl *c, const struct proto_msg *m)
{
	c->back = *m;
	c->held = true;
}

bool ctl_pending(const struct ctl *c)
{
	return c->held || chan_pending(c->ch);
}

const char *ctl_why(const struct ctl *c)
{
	return c->why;
}

int ctl_rfd(const struct ctl *c)
{
	return chan_rfd(c->ch);
}

struct chan *ctl_chan(struct ctl *c)
{
	return c->ch;
}

const char *ctl_peer(const struct ctl *c)
{
	return c->peer;
}
