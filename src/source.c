/* source: readers -> queues -> senders, driven by a control loop. */
#include "source.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "net.h"
#include "plan.h"
#include "platform.h"

#define SOURCE_MAX_INFLIGHT 64u  /* files announced and not yet done */
#define SOURCE_MAX_READERS 2u

struct source;

struct sender {
	struct source *s;
	unsigned idx;              /* stream index; immutable */
	pthread_t tid;
};

struct source {
	struct xfer *x;
	struct src_file *files;    /* [n], borrowed */
	unsigned n;
	struct plan *plan;
	struct bufpool *pool;
	struct queue *q[PROTO_MAX_STREAMS]; /* [nq]: one shared, or one per stream if ordered */
	unsigned nq;
	unsigned nreaders;
	pthread_t readers[SOURCE_MAX_READERS];
	struct sender senders[PROTO_MAX_STREAMS];
	/* control thread only: */
	unsigned announced, done, failed;
	bool *finished;            /* [n] FILE_DONE seen */
};

/* True if [off, off+len) of f holds no data (a hole). */
static bool source_is_hole(const struct src_file *f, uint64_t off, uint32_t len)
{
	off_t d = lseek(f->fd, (off_t)off, SEEK_DATA);

	if (d < 0)
		return errno == ENXIO;
	return (uint64_t)d >= off + len;
}

static int source_read_block(struct source *s, const struct plan_claim *c, struct buf *b)
{
	struct src_file *f = c->f;
	size_t got = 0;

	b->hdr.raw_len = c->len;
	if (f->sparse && source_is_hole(f, c->offset, c->len)) {
		b->hdr.flags = PROTO_BLK_HOLE;
		return 1;
	}
	while (got < c->len) {
		ssize_t r = pread(f->fd, b->data + got, c->len - got, (off_t)(c->offset + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return xfer_fail(s->x, -errno, "reading '%s': %s", f->display, strerror(errno));
		if (r == 0)
			return xfer_fail(s->x, -PC_E_FILEIO, "'%s' shrank while it was being copied",
					 f->display);
		got += (size_t)r;
	}
	b->len = got;
	return 1;
}

/* Reads the next piece of a stream. Returns 1 (a block to send), 0 (the
 * stream ended with nothing more), or a negative code. */
static int source_read_stream(struct source *s, const struct plan_claim *c, struct buf *b)
{
	struct src_file *f = c->f;
	size_t got = 0;
	bool eof = false;

	while (got < c->len) {
		ssize_t r = read(f->fd, b->data + got, c->len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int ret = -errno;
			plan_stream_done(s->plan, c, 0, true);
			return xfer_fail(s->x, ret, "reading '%s': %s", f->display, strerror(-ret));
		}
		if (r == 0) {
			eof = true;
			break;
		}
		got += (size_t)r;
	}
	plan_stream_done(s->plan, c, (uint32_t)got, eof);
	if (eof) {
		struct proto_msg m = { .type = PROTO_FILE_END };
		m.u.file_end.id = f->id;
		m.u.file_end.size = c->offset + got;
		int ret = ctl_send(s->x->ctl, &m);
		if (ret < 0)
			return xfer_fail(s->x, ret, "lost control connection to %s", s->x->peer);
	}
	b->len = got;
	b->hdr.raw_len = (uint32_t)got;
	return got > 0 ? 1 : 0;
}

static void *source_reader(void *arg)
{
	struct source *s = arg;
	struct xfer *x = s->x;
	struct plan_claim c;

	while (!xfer_aborted(x) && plan_next(s->plan, &c) == 1) {
		struct buf *b = bufpool_acquire(s->pool);
		if (b == NULL) {
			if (c.f->stream)
				plan_stream_done(s->plan, &c, 0, true);
			break;
		}
		b->hdr.type = PROTO_BLK_DATA;
		b->hdr.codec = PROTO_CODEC_NONE;
		b->hdr.file_id = c.f->id;
		b->hdr.offset = c.offset;
		b->hdr.seq = c.seq;
		b->ctx = c.f;
		int ret = c.f->stream ? source_read_stream(s, &c, b) : source_read_block(s, &c, b);
		if (ret <= 0) {
			bufpool_release(s->pool, b);
			if (ret < 0)
				break;
			continue;
		}
		b->hdr.enc_len = (uint32_t)b->len;
		b->hdr.checksum = b->len ? proto_checksum(b->data, b->len) : 0;
		if (queue_push(s->q[x->ordered ? c.seq % x->streams : 0], b) < 0) {
			bufpool_release(s->pool, b);
			break;
		}
	}
	for (unsigned i = 0; i < s->nq; i++)
		queue_close(s->q[i]);
	return NULL;
}

static int source_send(int fd, const struct proto_block *h, const void *data, size_t len)
{
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)(uintptr_t)data, len } };

	proto_block_encode(h, hdr);
	return net_sendv_full(fd, iov, len ? 2 : 1);
}

static void *source_sender(void *arg)
{
	struct sender *w = arg;
	struct source *s = w->s;
	struct xfer *x = s->x;
	struct queue *q = s->q[x->ordered ? w->idx : 0];
	int fd = x->data_fds[w->idx], ret = 0;
	struct buf *b;

	while ((b = queue_pop(q)) != NULL) {
		struct src_file *f = b->ctx;
		/* Blocks of a file the sink gave up on are dropped, except in
		 * ordered mode where every sequence number must arrive. */
		if (!x->ordered && atomic_load(&f->failed)) {
			bufpool_release(s->pool, b);
			continue;
		}
		ret = source_send(fd, &b->hdr, b->data, b->len);
		uint64_t raw = b->hdr.raw_len, wire = PROTO_BLOCK_HDR_LEN + b->len;
		bufpool_release(s->pool, b);
		if (ret < 0)
			break;
		atomic_fetch_add(&x->bytes, raw);
		atomic_fetch_add(&x->wire_bytes, wire);
	}
	if (ret == 0 && !xfer_aborted(x)) {
		struct proto_block end = { .type = PROTO_BLK_END };
		ret = source_send(fd, &end, NULL, 0);
	}
	if (ret < 0)
		xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
			  "lost data connection %u to %s: %s", w->idx, x->peer, pc_strerror(ret));
	return NULL;
}

static int source_announce(struct source *s)
{
	struct src_file *f = &s->files[s->announced];
	struct proto_msg m = { .type = PROTO_FILE };
	int ret;

	f->id = s->announced;
	m.u.file.id = f->id;
	m.u.file.flags = f->stream ? PROTO_FILE_SIZE_UNKNOWN : 0;
	m.u.file.size = f->size;
	m.u.file.mode = f->mode;
	m.u.file.mtime_s = f->mtime_s;
	m.u.file.mtime_ns = f->mtime_ns;
	memcpy(m.u.file.name, f->name, sizeof(m.u.file.name));
	ret = ctl_send(s->x->ctl, &m);
	if (ret < 0)
		return xfer_fail(s->x, ret, "lost control connection to %s", s->x->peer);
	atomic_fetch_add(&s->x->total, f->size);
	s->announced++;
	plan_add(s->plan, f);
	return 0;
}

static int source_on_file_done(struct source *s, const struct proto_file_done *d)
{
	struct xfer *x = s->x;

	if (d->id >= s->announced || s->finished[d->id])
		return xfer_fail(x, -PC_E_PROTO, "%s reported an unknown file id %u", x->peer,
				 (unsigned)d->id);
	s->finished[d->id] = true;
	s->done++;
	if (d->status < 0) {
		struct src_file *f = &s->files[d->id];
		atomic_store(&f->failed, true);
		s->failed++;
		if (x->report)
			log_error("%s", d->msg[0] ? d->msg : pc_strerror(d->status));
	}
	return 0;
}

static int source_on_message(struct source *s)
{
	struct proto_msg m;
	int ret = ctl_recv(s->x->ctl, &m);

	if (ret < 0)
		return xfer_fail(s->x, ret == -PC_E_PROTO ? ret : -PC_E_NET,
				 "lost control connection to %s: %s", s->x->peer, pc_strerror(ret));
	switch (m.type) {
	case PROTO_FILE_DONE:
		return source_on_file_done(s, &m.u.file_done);
	case PROTO_ERROR:
		return xfer_fail_peer(s->x, m.u.error.code, m.u.error.msg);
	default:
		return xfer_fail(s->x, -PC_E_PROTO, "%s sent %s during the transfer", s->x->peer,
				 proto_type_name(m.type));
	}
}

/* Announces files within the in-flight window and waits for FILE_DONEs
 * until every file is done or the transfer aborts. */
static void source_control(struct source *s)
{
	struct xfer *x = s->x;
	struct pollfd p[2] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };

	while (!xfer_aborted(x) && !(s->announced == s->n && s->done == s->n)) {
		while (s->announced < s->n && s->announced - s->done < SOURCE_MAX_INFLIGHT)
			if (source_announce(s) < 0)
				return;
		if (s->announced == s->n)
			plan_finish(s->plan);
		int n = poll(p, x->sigfd >= 0 ? 2 : 1, xfer_poll_timeout(x));
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		if (n > 0 && (p[1].revents & POLLIN))
			xfer_on_signal(x);
		else if (n > 0 && p[0].revents)
			(void)source_on_message(s);
		xfer_progress(x);
	}
}

static int source_start(struct source *s)
{
	struct xfer *x = s->x;
	unsigned nreaders = x->ordered ? 1 : SOURCE_MAX_READERS, count;
	int rc;

	for (unsigned i = 0; i < s->n; i++)
		if (s->files[i].stream)
			nreaders = 1; /* a stream is read in order by one reader */
	/* Enough buffers that every queue, sender and reader can hold its
	 * share at once: in ordered mode that rules out a deadlock. */
	count = x->streams * 3 + nreaders * 2 + 2;
	s->nq = x->ordered ? x->streams : 1;
	s->plan = plan_new(x->block_size, s->n);
	s->pool = bufpool_new(count, x->block_size);
	s->finished = calloc(s->n ? s->n : 1, sizeof(bool));
	if (s->plan == NULL || s->pool == NULL || s->finished == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory for %u buffers of %u bytes", count,
				 (unsigned)x->block_size);
	for (unsigned i = 0; i < s->nq; i++) {
		s->q[i] = queue_new(x->ordered ? 2 : count, nreaders);
		if (s->q[i] == NULL || xfer_watch_queue(x, s->q[i]) < 0)
			return xfer_fail(x, -ENOMEM, "out of memory");
	}
	if (xfer_watch_pool(x, s->pool) < 0 || xfer_watch_plan(x, s->plan) < 0)
		return xfer_fail(x, -ENOMEM, "out of memory");
	/* From here a failure aborts the queues and the plan, which is what
	 * releases the threads already started. */
	for (unsigned i = 0; i < x->streams; i++) {
		s->senders[i] = (struct sender){ .s = s, .idx = i };
		rc = pthread_create(&s->senders[i].tid, NULL, source_sender, &s->senders[i]);
		if (rc != 0) {
			s->senders[i].s = NULL;
			return xfer_fail(x, -rc, "cannot start sender thread: %s", strerror(rc));
		}
	}
	for (unsigned i = 0; i < nreaders; i++) {
		rc = pthread_create(&s->readers[i], NULL, source_reader, s);
		if (rc != 0)
			return xfer_fail(x, -rc, "cannot start reader thread: %s", strerror(rc));
		s->nreaders++;
	}
	return 0;
}

static void source_stop(struct source *s)
{
	struct buf *b;

	for (unsigned i = 0; i < s->nreaders; i++)
		if (pthread_join(s->readers[i], NULL) != 0)
			log_error("cannot join reader thread");
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		if (s->senders[i].s != NULL && pthread_join(s->senders[i].tid, NULL) != 0)
			log_error("cannot join sender thread");
	xfer_unwatch(s->x);
	for (unsigned i = 0; i < s->nq; i++) {
		while (s->q[i] != NULL && (b = queue_trypop(s->q[i])) != NULL)
			bufpool_release(s->pool, b);
		queue_free(s->q[i]);
	}
	bufpool_free(s->pool);
	plan_free(s->plan);
	free(s->finished);
}

static int source_finish(struct source *s, struct source_result *r)
{
	struct xfer *x = s->x;
	struct proto_msg m = { .type = PROTO_END };
	int ret;

	xfer_stats(x, s->done - s->failed, &m.u.stats);
	r->self = m.u.stats;
	ret = ctl_send(x->ctl, &m);
	if (ret < 0)
		return xfer_fail(x, -PC_E_NET, "lost control connection to %s", x->peer);
	ret = ctl_expect(x->ctl, PROTO_DONE, &m, x->err);
	if (ret < 0)
		return ret;
	r->peer = m.u.stats;
	return 0;
}

int source_run(struct xfer *x, struct src_file *files, unsigned n, struct source_result *r)
{
	struct source *s = calloc(1, sizeof(*s));
	int ret;

	memset(r, 0, sizeof(*r));
	if (s == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->x = x;
	s->files = files;
	s->n = n;
	if (source_start(s) == 0)
		source_control(s);
	source_stop(s);
	if (xfer_aborted(x)) {
		xfer_await_peer_error(x);
		ret = pc_err_get(x->err, NULL, 0);
	} else {
		ret = source_finish(s, r);
	}
	r->failed = s->failed;
	free(s);
	if (ret == 0 && r->failed > 0)
		ret = -PC_E_PARTIAL;
	return ret;
}
