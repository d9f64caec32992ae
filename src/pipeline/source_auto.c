/* SPDX-License-Identifier: Apache-2.0 */
/* source_auto: -c auto, the controller that moves along the ladder of
 * codecs as the network and the CPU allow. */
#include "pipeline/source_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/auth.h"
#include "wire/pathsafe.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "sys/net.h"
#include "sys/sync.h"
#include "pipeline/plan.h"
#include "pipeline/srcrec.h"
#include "sys/platform.h"

/* Bytes in the data sockets' send queues (not yet acknowledged), and of
 * those the bytes not even sent: data the network has not taken yet. */
static uint64_t source_queued(const struct xfer *x, uint64_t *unsent)
{
	uint64_t q = 0;

	*unsent = 0;
	for (unsigned i = 0; i < x->streams; i++) {
		q += net_send_queued(chan_wfd(x->data[i]));
		*unsent += net_send_unsent(chan_wfd(x->data[i]));
	}
	return q;
}

/* -c auto, every SOURCE_AUTO_TICK_NS (docs/DESIGN-NOTES.md has the story).
 * The network is the bottleneck when
 * data waits unsent in the data sockets (over half the low-water mark a
 * stream) and
 * the senders never wait for blocks; compressing more then pays, if the
 * machine has CPU to spare. The senders waiting for blocks means reading
 * or compressing is the bottleneck: compress less. The rate that judges a
 * move is what the network really took (bytes that left the send queues),
 * in file bytes; a move that cost more than 10 % of it is undone (a step
 * up only once the queues are no longer full) and the controller holds
 * still, 4 intervals the first time and twice as long each time after (at
 * most 64). Control thread only. */
void source_auto_tick(struct source *s, uint64_t now)
{
	struct xfer *x = s->x;
	struct autoctl *a = &s->autoc;
	uint64_t raw = atomic_load(&x->bytes), wire = atomic_load(&x->wire_bytes);
	uint64_t unsent, sidle = atomic_load(&s->send_idle_ns), queued = source_queued(x, &unsent);
	double dt = (double)(now - a->last_ns);
	double dwire = (double)(wire - a->last_wire), draw = (double)(raw - a->last_bytes);
	/* Wire bytes that left the queues, in file bytes at this interval's ratio. */
	double left = dwire - ((double)queued - (double)a->last_queued);
	double rate = (dwire > 0 ? left * draw / dwire : 0) * 1e9 / dt;
	double starve = (double)(sidle - a->last_idle) / (dt * x->streams);
	/* With TCP_NOTSENT_LOWAT, unsent data sits near the mark while the
	 * network cannot keep up, and near zero while it can. */
	bool netbound = unsent > (uint64_t)x->streams * (SOURCE_AUTO_LOWAT / 2);
	int step = atomic_load(&s->step), move = 0;
	uint64_t idle = 0, total = 0;
	double spare = 1.0;

	/* Compressing more only pays if the CPU has room for it: on a busy
	 * machine (loopback, or a loaded host) it slows the whole pipeline. */
	if (platform_cpu_times(&idle, &total) == 0 && total > a->cpu_total)
		spare = (double)(idle - a->cpu_idle) / (double)(total - a->cpu_total);
	a->cpu_idle = idle;
	a->cpu_total = total;
	a->want_up = netbound && starve < 0.10 && spare > 0.25 ? a->want_up + 1 : 0;
	/* While the queues stay full the network is still the bottleneck, and
	 * a step up cannot have cost throughput; the rate (noisy while the
	 * queues fill and drain) only judges moves once they are not. */
	if (a->last_move != 0 && !(a->last_move > 0 && netbound) && rate < 0.9 * a->last_rate) {
		/* The move cost throughput: undo it, and wait longer each time
		 * before trying again, so a losing move is rarely retried. */
		step -= a->last_move;
		log_debug("auto: %.0f MB/s after the last move, %.0f before: undone", rate / 1e6,
			  a->last_rate / 1e6);
		a->hold = a->penalty;
		a->penalty = a->penalty < 64 ? a->penalty * 2 : 64;
	} else if (a->hold > 0) {
		a->hold--;
	} else if (a->want_up >= 1 && step + 1 < (int)SOURCE_LADDER_LEN) {
		move = 1;
		a->want_up = 0;
	} else if (starve > 0.25 && !netbound && step > 0) {
		move = -1;
	}
	if (move != 0 || a->last_move == 0)
		a->last_rate = rate;
	a->last_move = move;
	atomic_store(&s->step, step + move);
	if (move != 0 && log_level() >= LOG_DEBUG) {
		char name[32];
		codec_format(&source_ladder[step + move], name, sizeof(name));
		log_debug("auto: %.0f ms in, %.0f MB/s, %.1f MiB unsent, senders idle %.0f%%, "
			  "cpu idle %.0f%% -> %s", (double)(now - x->start_ns) / 1e6, rate / 1e6,
			  (double)unsent / 1048576.0, starve * 100, spare * 100, name);
	}
	a->last_ns = now;
	a->last_bytes = raw;
	a->last_wire = wire;
	a->last_queued = queued;
	a->last_idle = sidle;
	a->next_ns = now + SOURCE_AUTO_TICK_NS;
}

int source_poll_timeout(struct source *s)
{
	int t = xfer_poll_timeout(s->x);
	uint64_t now;

	if (!s->x->codec_auto)
		return t;
	now = platform_now_ns();
	int a = now >= s->autoc.next_ns ? 0 : (int)((s->autoc.next_ns - now) / 1000000u) + 1;
	return t < 0 || a < t ? a : t;
}
