/* SPDX-License-Identifier: Apache-2.0 */
/* xfer: shared state of one transfer and its abort switch. */
#include "pipeline/xfer.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "sys/log.h"
#include "pipeline/plan.h"
#include "sys/sync.h"
#include "sys/platform.h"

/* The hooks' progress interval, at least 50 ms; 0 without a callback. */
static uint64_t xfer_hook_interval_ns(const struct xfer *x)
{
	if (!x->report || x->hooks == NULL || x->hooks->progress == NULL)
		return 0;
	return (uint64_t)(x->hooks->interval_ms < 50 ? 50 : x->hooks->interval_ms) * 1000000u;
}

int xfer_init(struct xfer *x)
{
	if (pthread_mutex_init(&x->lock, NULL) != 0)
		return -ENOMEM;
	atomic_init(&x->aborted, false);
	atomic_init(&x->bytes, 0);
	atomic_init(&x->wire_bytes, 0);
	atomic_init(&x->total, 0);
	atomic_init(&x->unsized, 0);
	x->entries_total = x->entries_done = 0;
	x->walk_done = false;
	x->nwakers = 0;
	x->abort_efd = platform_event_new();
	if (x->abort_efd < 0) {
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&x->lock));
		return x->abort_efd;
	}
	x->start_ns = platform_now_ns();
	x->next_progress_ns = x->start_ns + (uint64_t)x->progress_s * 1000000000u;
	x->next_hook_ns = x->start_ns + xfer_hook_interval_ns(x);
	return 0;
}

void xfer_destroy(struct xfer *x)
{
	if (x->abort_efd >= 0)
		close(x->abort_efd);
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&x->lock));
}

int xfer_on_abort(struct xfer *x, void (*fn)(void *arg), void *arg)
{
	int ret = -ENOMEM;

	sync_lock(&x->lock);
	if (x->nwakers < XFER_MAX_WAKERS) {
		x->wakers[x->nwakers++] = (struct xfer_waker){ fn, arg };
		ret = 0;
	}
	/* Registered after the abort: wake it now, nobody else will. */
	if (xfer_aborted(x))
		fn(arg);
	sync_unlock(&x->lock);
	return ret;
}

static void xfer_wake_pool(void *arg)
{
	bufpool_abort(arg);
}

static void xfer_wake_queue(void *arg)
{
	queue_abort(arg);
}

static void xfer_wake_plan(void *arg)
{
	plan_abort(arg);
}

int xfer_watch_pool(struct xfer *x, struct bufpool *p)
{
	return xfer_on_abort(x, xfer_wake_pool, p);
}

int xfer_watch_queue(struct xfer *x, struct queue *q)
{
	return xfer_on_abort(x, xfer_wake_queue, q);
}

int xfer_watch_plan(struct xfer *x, struct plan *p)
{
	return xfer_on_abort(x, xfer_wake_plan, p);
}

void xfer_unwatch(struct xfer *x)
{
	sync_lock(&x->lock);
	x->nwakers = 0;
	sync_unlock(&x->lock);
}

/* Wakes every thread of the transfer. Called once, by whoever aborted. */
static void xfer_wake_all(struct xfer *x)
{
	int ret;

	sync_lock(&x->lock);
	for (unsigned i = 0; i < x->nwakers; i++)
		x->wakers[i].fn(x->wakers[i].arg);
	sync_unlock(&x->lock);
	/* For threads blocked in poll on something else (a slow stdin). */
	ret = platform_event_signal(x->abort_efd);
	if (ret < 0)
		log_debug("abort eventfd: %s", strerror(-ret));
	for (unsigned i = 0; x->data != NULL && i < x->streams; i++)
		chan_abort(x->data[i]); /* NULL is a no-op */
}

int xfer_fail(struct xfer *x, int code, const char *fmt, ...)
{
	char msg[PROTO_MAX_MSG + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pc_err_set(x->err, code, "%s", msg);
	if (atomic_exchange(&x->aborted, true))
		return code;
	/* Tell the peer before its data connections break, so it can show
	 * the reason rather than "connection reset". Best effort. */
	if (x->ctl != NULL && code != -PC_E_ABORTED)
		(void)ctl_send_error(x->ctl, code, msg);
	xfer_wake_all(x);
	return code;
}

/* Records the peer's ERROR(code, msg), prefixed with the peer's name
 * unless it is our own child. Returns the code, made valid. */
static int xfer_record_peer(struct xfer *x, bool replace, int code, const char *msg)
{
	if (code >= 0 || code <= -PC_E_MAX)
		code = -PC_E_PROTO;
	/* The peer was interrupted, not us: for us the peer went away. */
	if (code == -PC_E_INTERRUPTED)
		code = -PC_E_NET;
	if (replace)
		pc_err_replace(x->err, code, "%s%s%s", x->peer_local ? "" : x->peer,
			       x->peer_local ? "" : ": ", msg);
	else
		pc_err_set(x->err, code, "%s%s%s", x->peer_local ? "" : x->peer,
			   x->peer_local ? "" : ": ", msg);
	return code;
}

static bool xfer_is_net_error(int code);

int xfer_fail_peer(struct xfer *x, int code, const char *msg)
{
	/* The peer's own reason beats the broken connection it caused. */
	code = xfer_record_peer(x, xfer_is_net_error(pc_err_get(x->err, NULL, 0)), code, msg);
	if (!atomic_exchange(&x->aborted, true))
		xfer_wake_all(x);
	return code;
}

static bool xfer_is_net_error(int code)
{
	return code == -PC_E_NET || code == -ECONNRESET || code == -EPIPE ||
	       code == -PC_E_ABORTED || code == -ECONNABORTED;
}

void xfer_await_peer_error(struct xfer *x)
{
	struct pollfd p = { .fd = ctl_rfd(x->ctl), .events = POLLIN };
	uint64_t deadline = platform_now_ns() + 1000000000u;
	struct proto_msg m;

	if (!xfer_is_net_error(pc_err_get(x->err, NULL, 0)))
		return;
	while (platform_now_ns() < deadline) {
		int left = (int)((deadline - platform_now_ns()) / 1000000u) + 1;
		/* A message already inside the ctl is not seen by poll. */
		if (!ctl_pending(x->ctl) && poll(&p, 1, left) <= 0)
			return;
		if (ctl_recv(x->ctl, &m) < 0)
			return;
		if (m.type != PROTO_ERROR)
			continue;
		xfer_record_peer(x, true, m.u.error.code, m.u.error.msg);
		return;
	}
}

/* Milliseconds from now to due (0 if past). */
static int xfer_ms_until(uint64_t now, uint64_t due)
{
	return now >= due ? 0 : (int)((due - now) / 1000000u) + 1;
}

int xfer_poll_timeout(struct xfer *x)
{
	uint64_t now = platform_now_ns();
	int t = -1;

	if (x->report && x->progress_s > 0)
		t = xfer_ms_until(now, x->next_progress_ns);
	if (xfer_hook_interval_ns(x) > 0) {
		int h = xfer_ms_until(now, x->next_hook_ns);
		t = t < 0 || h < t ? h : t;
	}
	return t;
}

/* The hooks' snapshot. */
static void xfer_hook(struct xfer *x, uint64_t now)
{
	char cur[PROTO_MAX_PATH + 64] = "";
	struct pcopy_progress p = {
		.elapsed_s = (double)(now - x->start_ns) / 1e9,
		.bytes = atomic_load(&x->bytes),
		.total = atomic_load(&x->total),
		.total_final = x->walk_done && atomic_load(&x->unsized) == 0,
		.entries_done = x->entries_done,
		.entries_total = x->entries_total,
		.streams = x->streams,
	};

	if (x->current != NULL)
		x->current(x->owner, cur, sizeof(cur), &p.current_size);
	p.current = cur[0] != '\0' ? cur : NULL;
	x->hooks->progress(x->hooks->arg, &p);
}

void xfer_progress(struct xfer *x)
{
	uint64_t now = platform_now_ns(), done, total;
	char a[32], b[32];
	double secs, rate;

	if (xfer_hook_interval_ns(x) > 0 && now >= x->next_hook_ns) {
		x->next_hook_ns = now + xfer_hook_interval_ns(x);
		xfer_hook(x, now);
	}
	if (!x->report || x->progress_s == 0 || now < x->next_progress_ns)
		return;
	x->next_progress_ns = now + (uint64_t)x->progress_s * 1000000000u;
	done = atomic_load(&x->bytes);
	total = atomic_load(&x->total);
	secs = (double)(now - x->start_ns) / 1e9;
	rate = secs > 0 ? (double)done / secs : 0;
	platform_fmt_bytes(done, a, sizeof(a));
	if (total > 0 && rate > 0) {
		double eta = (double)(total > done ? total - done : 0) / rate;
		platform_fmt_bytes(total, b, sizeof(b));
		log_msg(LOG_ERROR, "progress: %s of %s (%.0f%%), %.1f MB/s, %u streams, ETA %.0f s",
			a, b, 100.0 * (double)done / (double)total, rate / 1e6, x->streams, eta);
	} else {
		log_msg(LOG_ERROR, "progress: %s, %.1f MB/s, %u streams", a, rate / 1e6,
			x->streams);
	}
}

void xfer_failed(struct xfer *x, const char *path, const char *reason, bool skipped)
{
	if (x->report && x->hooks != NULL && x->hooks->failed != NULL)
		x->hooks->failed(x->hooks->arg, path, reason, skipped);
}

void xfer_listed(struct xfer *x, uint8_t what, const char *path)
{
	if (x->report && x->hooks != NULL && x->hooks->listed != NULL)
		x->hooks->listed(x->hooks->arg, what, path);
}

void xfer_on_signal(struct xfer *x)
{
	struct signalfd_siginfo si;
	ssize_t n = read(x->sigfd, &si, sizeof(si));

	xfer_fail(x, -PC_E_INTERRUPTED, "interrupted by signal %s",
		  n == (ssize_t)sizeof(si) ? strsignal((int)si.ssi_signo) : "?");
}

int xfer_await(struct xfer *x, uint8_t want, struct proto_msg *m)
{
	struct pollfd p[2] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };
	int n;

	/* A message already inside the ctl is not seen by poll: take it. */
	if (ctl_pending(x->ctl))
		return ctl_expect(x->ctl, want, m, x->err);
	do
		n = poll(p, x->sigfd >= 0 ? 2 : 1, x->timeout_s ? (int)x->timeout_s * 1000 : -1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return pc_err_set(x->err, -errno, "poll: %s", strerror(errno));
	if (n == 0)
		return pc_err_set(x->err, -PC_E_TIMEOUT, "no answer from %s within %u s",
				  x->peer, x->timeout_s);
	if (x->sigfd >= 0 && (p[1].revents & POLLIN)) {
		xfer_on_signal(x);
		return pc_err_get(x->err, NULL, 0);
	}
	return ctl_expect(x->ctl, want, m, x->err);
}

void xfer_stats(struct xfer *x, uint64_t files, struct proto_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->bytes = atomic_load(&x->bytes);
	st->wire_bytes = atomic_load(&x->wire_bytes);
	st->files = files;
	platform_rusage(&st->cpu_user_us, &st->cpu_sys_us, &st->maxrss_kb);
	st->wall_us = (platform_now_ns() - x->start_ns) / 1000u;
}
