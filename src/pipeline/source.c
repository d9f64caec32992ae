/* SPDX-License-Identifier: Apache-2.0 */
/* source: readers -> queues -> senders, driven by a control loop. */
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

/* -c auto climbs and descends this ladder (docs/DESIGN-NOTES.md). */
const struct codec_choice source_ladder[SOURCE_LADDER_LEN] = {
	{ CODEC_NONE, 0 }, { CODEC_LZ4, 1 }, { CODEC_ZLIB, 1 }, { CODEC_ZLIB, 3 }, { CODEC_ZLIB, 6 },
};

/* CPU time the encoders spent so far. Their threads have finished, or
 * (after join) are gone: senders_left reaching 0 orders their last
 * writes before this. */
static uint64_t source_codec_cpu_ns(const struct source *s)
{
	uint64_t ns = 0;

	for (unsigned i = 0; i < s->nreaders; i++)
		ns += encoder_stats(s->readers[i].enc)->cpu_ns;
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		if (s->senders[i].enc != NULL)
			ns += encoder_stats(s->senders[i].enc)->cpu_ns;
	return ns;
}

/* This side's stage times, into s->stage (wire/proto.h) within wall_us.
 * The readers closed the queues after their last write, and the senders
 * wrote theirs before senders_left reached 0, which the caller saw. */
static void source_stage_rows(struct source *s, uint64_t wall_us)
{
	struct stage_sum read = { 0 }, encode = { 0 }, send = { 0 };

	for (unsigned i = 0; i < s->nreaders; i++) {
		stage_sum_add(&read, &s->readers[i].read);
		stage_sum_add(&encode, &s->readers[i].encode);
	}
	/* Only the streams that carried data (see sink_stop), or all. */
	bool any = false;
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		any |= s->senders[i].started && s->senders[i].raw > 0;
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		if (s->senders[i].started && (s->senders[i].raw > 0 || !any))
			stage_sum_add(&send, &s->senders[i].send);
	stage_sum_row(&read, wall_us, &s->stage[PROTO_STAGE_READ]);
	stage_sum_row(&encode, wall_us, &s->stage[PROTO_STAGE_ENCODE]);
	stage_sum_row(&send, wall_us, &s->stage[PROTO_STAGE_SEND]);
}

/* Every sender wrote its END block and confirmed its listener: send END
 * now, without waiting for the last acknowledgements, so that the sink's
 * DONE follows its last ACK at once instead of a round trip later. */
static int source_send_end(struct source *s)
{
	struct xfer *x = s->x;
	struct proto_msg m = { .type = PROTO_END };
	int ret = platform_event_drain(s->efd);

	if (ret < 0)
		return xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
	if (s->end_sent || atomic_load(&s->senders_left) != 0)
		return 0;
	xfer_stats(x, s->files - atomic_load(&s->local_failed) - s->unchanged, &m.u.stats);
	m.u.stats.dirs = s->dirs;
	m.u.stats.links = s->links;
	m.u.stats.unchanged = s->unchanged;
	m.u.stats.unchanged_bytes = s->unchanged_bytes;
	m.u.stats.codec_cpu_us = source_codec_cpu_ns(s) / 1000u;
	source_stage_rows(s, m.u.stats.wall_us);
	memcpy(m.u.stats.stage, s->stage, sizeof(s->stage));
	if (ctl_send(x->ctl, &m) < 0)
		return xfer_fail(x, -PC_E_NET, "lost control connection to %s", x->peer);
	s->end_sent = true;
	s->heard_ns = platform_now_ns();
	return 0;
}

/* After END: the ms the sink has left to say something (--timeout, see
 * xfer_alive_ns), -1 for no bound; 0 fails the transfer. */
static int source_end_wait(struct source *s)
{
	struct xfer *x = s->x;
	uint64_t limit = (uint64_t)x->timeout_s * 1000000000u, now = platform_now_ns();

	if (!s->end_sent || limit == 0)
		return -1;
	if (now - s->heard_ns < limit)
		return (int)((s->heard_ns + limit - now) / 1000000u) + 1;
	xfer_fail(x, -PC_E_TIMEOUT, "%s said nothing for %u s after the last data went "
		  "(--timeout %u)", x->peer, x->timeout_s, x->timeout_s);
	return 0;
}

/* Announces entries within the window, sends END once every stream is
 * done, and takes the sink's ACKs and FILE_DONEs until every entry is
 * acknowledged or the transfer aborts. */
static void source_control(struct source *s)
{
	struct xfer *x = s->x;
	/* The abort switch too: a thread that fails wakes us at once. */
	struct pollfd p[4] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = s->efd, .events = POLLIN },
			       { .fd = x->abort_efd, .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };

	proto_batch_init(s->batch, 0);
	while (!xfer_aborted(x) && !(s->end_sent && s->acked == s->announced)) {
		if (source_fill_window(s) < 0)
			return;
		if (ctl_pending(x->ctl)) { /* only a confused sink speaks first */
			(void)source_on_message(s);
			continue;
		}
		int t = source_poll_timeout(s), end = source_end_wait(s);
		if (end == 0)
			return;
		int n = poll(p, x->sigfd >= 0 ? 4 : 3, end > 0 && (t < 0 || end < t) ? end : t);
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		if (n > 0 && (p[3].revents & POLLIN))
			xfer_on_signal(x);
		if (n > 0 && (p[1].revents & POLLIN))
			(void)source_send_end(s);
		if (n > 0 && p[0].revents && !xfer_aborted(x))
			(void)source_on_message(s);
		if (x->codec_auto && platform_now_ns() >= s->autoc.next_ns)
			source_auto_tick(s, platform_now_ns());
		xfer_progress(x);
	}
}

/* Sizes the pipeline: readers, queues, buffers. */
static void source_size(struct source *s, unsigned *nreaders, unsigned *count)
{
	struct xfer *x = s->x;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	bool compress = x->codec_auto;

	s->buf_cap = x->block_size;
	for (unsigned i = 0; i < x->nchoices; i++) {
		const struct codec *c = codec_by_id(x->choices[i].id);
		compress |= x->choices[i].id != CODEC_NONE;
		if (c->bound(x->block_size) > s->buf_cap)
			s->buf_cap = c->bound(x->block_size);
	}
	for (unsigned i = 0; x->codec_auto && i < SOURCE_LADDER_LEN; i++) {
		size_t b = codec_by_id(source_ladder[i].id)->bound(x->block_size);
		s->buf_cap = b > s->buf_cap ? b : s->buf_cap;
	}
	/* Compression is CPU work: one reader per core. Without it, two
	 * readers keep the disk and the checksum busy. */
	*nreaders = compress && cores > 2 ? (unsigned)cores : 2;
	if (*nreaders > SOURCE_MAX_READERS)
		*nreaders = SOURCE_MAX_READERS;
	s->per_stream = x->ordered || x->nchoices > 1;
	for (unsigned i = 0; i < s->in->npaths; i++)
		s->has_stream |= s->in->paths[i].stream != NULL;
	if (s->has_stream || x->ordered)
		*nreaders = 1; /* a stream, or an order, wants one reader */
	/* Enough buffers that every queue, sender and reader can hold its
	 * share at once: with per-stream queues that rules out a deadlock. */
	*count = x->streams * 3 + *nreaders * 2 + 2;
	s->nq = s->per_stream ? x->streams : 1;
}

static int source_start(struct source *s)
{
	struct xfer *x = s->x;
	unsigned nreaders, count;
	int rc;

	source_size(s, &nreaders, &count);
	atomic_init(&s->step, 0); /* auto starts uncompressed and climbs if the network is slow */
	s->autoc.penalty = 4;
	(void)platform_cpu_times(&s->autoc.cpu_idle, &s->autoc.cpu_total);
	atomic_init(&s->send_idle_ns, 0);
	s->autoc.last_ns = platform_now_ns();
	s->autoc.next_ns = s->autoc.last_ns + SOURCE_AUTO_TICK_NS;
	atomic_init(&s->senders_left, x->streams);
	s->efd = platform_event_new();
	if (s->efd < 0)
		return xfer_fail(x, s->efd, "eventfd: %s", strerror(-s->efd));
	s->plan = plan_new(x->block_size, !x->ordered);
	s->pool = bufpool_new(count, s->buf_cap);
	s->item = malloc(sizeof(*s->item));
	s->walked = calloc(s->in->npaths ? s->in->npaths : 1, sizeof(*s->walked));
	s->batch = malloc(sizeof(*s->batch));
	if (s->plan == NULL || s->pool == NULL || s->item == NULL || s->batch == NULL ||
	    s->walked == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory for %u buffers of %zu bytes", count,
				 s->buf_cap);
	for (unsigned i = 0; i < s->nq; i++) {
		s->q[i] = queue_new(s->per_stream ? 2 : count, nreaders);
		if (s->q[i] == NULL || xfer_watch_queue(x, s->q[i]) < 0)
			return xfer_fail(x, -ENOMEM, "out of memory");
	}
	if (xfer_watch_pool(x, s->pool) < 0 || xfer_watch_plan(x, s->plan) < 0 ||
	    xfer_on_abort(x, source_sums_wake, s) < 0)
		return xfer_fail(x, -ENOMEM, "out of memory");
	if (x->bwlimit != 0 && ((s->rl = ratelimit_new(x->bwlimit)) == NULL ||
				xfer_on_abort(x, ratelimit_abort, s->rl) < 0))
		return xfer_fail(x, -ENOMEM, "out of memory");
	/* -c auto decides per block: keep the kernel's unsent backlog short,
	 * so that a decision to compress reaches the wire quickly. Best
	 * effort: without it auto still works, only later. */
	for (unsigned i = 0; x->codec_auto && i < x->streams; i++)
		(void)net_set_notsent_lowat(chan_wfd(x->data[i]), SOURCE_AUTO_LOWAT);
	/* From here a failure aborts the queues and the plan, which is what
	 * releases the threads already started. A sender is joined only if
	 * its thread started (`started`); its encoder may exist without the
	 * thread, and source_stop frees it either way. */
	for (unsigned i = 0; i < x->streams; i++) {
		struct sender *w = &s->senders[i];
		*w = (struct sender){ .s = s, .idx = i };
		if (x->codec_auto && (w->enc = encoder_new(s->buf_cap)) == NULL)
			return xfer_fail(x, -ENOMEM, "out of memory for the compressor of data "
					 "stream %u", i);
		rc = pthread_create(&w->tid, NULL, source_sender, w);
		if (rc != 0)
			return xfer_fail(x, -rc, "cannot start sender thread: %s", strerror(rc));
		w->started = true;
	}
	for (unsigned i = 0; i < nreaders; i++) {
		struct reader *r = &s->readers[i];
		r->s = s;
		r->enc = encoder_new(s->buf_cap);
		if (r->enc == NULL)
			return xfer_fail(x, -ENOMEM, "out of memory for the encoder of reader %u",
					 i);
		rc = pthread_create(&r->tid, NULL, source_reader, r);
		if (rc != 0) {
			encoder_free(r->enc);
			r->enc = NULL;
			return xfer_fail(x, -rc, "cannot start reader thread: %s", strerror(rc));
		}
		s->nreaders++;
	}
	return 0;
}

/* Joins the threads, collects their statistics, frees the pipeline. */
static void source_stop(struct source *s, struct source_result *r)
{
	struct xfer *x = s->x;
	struct buf *b;

	for (unsigned i = 0; i < s->nreaders; i++) {
		struct reader *rd = &s->readers[i];
		if (pthread_join(rd->tid, NULL) != 0)
			log_error("cannot join reader thread");
		const struct enc_stats *st = encoder_stats(rd->enc);
		r->holes += st->holes;
		r->compressed += st->compressed;
		r->raw_blocks += st->raw;
	}
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		if (!s->senders[i].started)
			continue;
		if (pthread_join(s->senders[i].tid, NULL) != 0)
			log_error("cannot join sender thread");
		if (s->senders[i].enc != NULL) {
			const struct enc_stats *st = encoder_stats(s->senders[i].enc);
			r->compressed += st->compressed;
			r->raw_blocks += st->raw;
		}
		r->stream[i].raw = s->senders[i].raw;
		r->stream[i].wire = s->senders[i].wire;
		r->stream[i].choice = x->codec_auto ? source_ladder[atomic_load(&s->step)]
						    : x->choices[s->per_stream ? i % x->nchoices : 0];
	}
	s->codec_cpu_us = source_codec_cpu_ns(s) / 1000u;
	for (unsigned i = 0; i < s->nreaders; i++)
		encoder_free(s->readers[i].enc);
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		encoder_free(s->senders[i].enc);
	log_debug("blocks: %llu compressed, %llu raw, %llu holes", (unsigned long long)r->compressed,
		  (unsigned long long)r->raw_blocks, (unsigned long long)r->holes);
	xfer_unwatch(x);
	for (unsigned i = 0; i < s->nq; i++) {
		while (s->q[i] != NULL && (b = queue_trypop(s->q[i])) != NULL)
			source_release(s, b);
		queue_free(s->q[i]);
	}
	bufpool_free(s->pool);
	ratelimit_free(s->rl);
	plan_free(s->plan);
	for (struct src_rec *f = s->pend_head, *n; f != NULL; f = n) {
		n = f->wnext;
		src_rec_put(f);
	}
	for (struct src_rec *f = s->win_head, *n; f != NULL; f = n) {
		n = f->wnext;
		src_rec_put(f);
	}
	walk_free(s->walk);
	for (unsigned i = 0; i < s->nwalked; i++)
		walk_free(s->walked[i]);
	free(s->walked);
	free(s->item);
	free(s->batch);
	if (s->open_lock_ok)
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&s->open_lock));
	if (s->sums_lock_ok)
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&s->sums_lock));
	if (s->sums_cond_ok)
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&s->sums_cond));
	if (s->efd >= 0)
		close(s->efd);
}

/* END went out from the control loop; the sink's DONE ends the session. */
static int source_finish(struct source *s, struct source_result *r)
{
	struct xfer *x = s->x;
	struct proto_msg m;
	int ret = xfer_await(x, PROTO_DONE, &m);

	if (ret < 0)
		return ret;
	r->peer = m.u.stats;
	xfer_stats(x, s->files - s->failed - s->unchanged, &r->self);
	r->self.dirs = s->dirs;
	r->self.links = s->links;
	r->self.unchanged = s->unchanged;
	r->self.unchanged_bytes = s->unchanged_bytes;
	r->self.codec_cpu_us = s->codec_cpu_us;
	memcpy(r->self.stage, s->stage, sizeof(s->stage)); /* as END carried them */
	return 0;
}

/* xfer's current: the oldest file in the window, the one the sink will
 * finish next. Control thread. */
static void source_current(void *owner, char *buf, size_t cap, uint64_t *size)
{
	const struct source *s = owner;
	const struct src_rec *f = s->win_head;

	snprintf(buf, cap, "%s", f != NULL ? f->display : "");
	*size = f != NULL && !f->stream ? f->size : 0;
}

int source_run(struct xfer *x, const struct source_input *in, struct source_result *r)
{
	struct source *s = calloc(1, sizeof(*s));
	int ret;

	memset(r, 0, sizeof(*r));
	if (s == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->x = x;
	x->current = source_current;
	x->owner = s;
	s->in = in;
	s->efd = -1;
	atomic_init(&s->local_failed, 0);
	enc_file_init(&s->pack_enc);
	ret = pthread_mutex_init(&s->open_lock, NULL);
	s->open_lock_ok = ret == 0;
	if (ret == 0) {
		ret = pthread_mutex_init(&s->sums_lock, NULL);
		s->sums_lock_ok = ret == 0;
	}
	if (ret == 0) {
		ret = pthread_cond_init(&s->sums_cond, NULL);
		s->sums_cond_ok = ret == 0;
	}
	if (ret == 0 && xfer_sums(x))
		source_zeros_hash(s);
	if (ret != 0)
		xfer_fail(x, -ret, "cannot make the source's locks: %s", strerror(ret));
	else if (source_start(s) == 0)
		source_control(s);
	source_stop(s, r);
	if (xfer_aborted(x)) {
		xfer_await_peer_error(x);
		ret = pc_err_get(x->err, NULL, 0);
	} else {
		ret = source_finish(s, r);
	}
	r->failed = s->failed;
	r->unverified = s->unverified;
	r->skipped = s->skipped;
	r->files = s->files;
	r->dirs = s->dirs;
	r->links = s->links;
	x->current = NULL;
	free(s);
	if (ret == 0 && (r->failed > 0 || r->skipped > 0))
		ret = -PC_E_PARTIAL;
	return ret;
}
