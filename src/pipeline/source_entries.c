/* SPDX-License-Identifier: Apache-2.0 */
/* source_entries: the entries the source announces (walked in
 * order, sent in batches within the window) and what the sink says of them
 * (ACK, FILE_DONE). */
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

/* ---- Producing entries ------------------------------------------------ */

/* Reports a source or an entry that cannot be sent: to our user if we
 * are the client, else to the client with SKIP. Returns 0 or a negative
 * code. */
static int source_skip(struct source *s, const struct walk_skip *k)
{
	struct proto_msg m = { .type = PROTO_SKIP };

	s->skipped++;
	if (s->x->report) {
		log_error("%s", k->msg);
		xfer_failed(s->x, k->path, k->msg, true);
		return 0;
	}
	m.u.skip.index = k->src_index;
	m.u.skip.status = k->code;
	snprintf(m.u.skip.msg, sizeof(m.u.skip.msg), "%s", k->msg);
	if (ctl_send(s->x->ctl, &m) < 0)
		return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	return 0;
}

/* The entry of a stream opened beforehand (stdin, a FIFO, a device). */
static void source_stream_item(struct source *s, const struct src_file *f)
{
	struct walk_item *it = s->item;
	struct proto_entry *e = &it->e;

	memset(e, 0, offsetof(struct proto_entry, path));
	e->type = PROTO_ENT_REG;
	e->flags = PROTO_ENT_SIZE_UNKNOWN;
	e->mode = f->mode & 07777;
	e->mtime_s = f->mtime_s;
	e->mtime_ns = f->mtime_ns;
	e->atime_s = f->mtime_s;
	e->atime_ns = f->mtime_ns;
	snprintf(e->path, sizeof(e->path), "%s", f->name);
	e->target[0] = e->user[0] = e->group[0] = '\0';
	it->base_fd = -1;
	it->open_path[0] = '\0';
	it->sparse = false;
	snprintf(it->display, sizeof(it->display), "%s", f->display);
}

/* The next thing to send, in REQUEST order: 1 an entry in s->item (with
 * its id), 2 a skip in *k, 0 nothing more, or a negative code. */
static int source_produce(struct source *s, struct walk_skip *k)
{
	const struct source_input *in = s->in;

	for (;;) {
		s->item_stream = NULL;
		if (s->walk != NULL) {
			struct pc_err e;
			pc_err_init(&e);
			int ret = walk_next(s->walk, s->item, k, &e);
			if (ret < 0) {
				char msg[sizeof(e.msg)];
				(void)pc_err_get(&e, msg, sizeof(msg));
				xfer_fail(s->x, ret, "%s", msg);
			}
			pc_err_destroy(&e);
			if (ret == 1) {
				struct proto_entry *en = &s->item->e;
				en->id = s->walk_base + s->item->id;
				if (en->type == PROTO_ENT_HARDLINK)
					en->link_id += s->walk_base;
			}
			k->src_index = s->cur;
			k->path = ret == 2 && s->item->display[0] != '\0' ? s->item->display : NULL;
			if (ret != 0)
				return ret;
			s->walked[s->nwalked++] = s->walk;
			s->walk = NULL;
			s->cur++;
			continue;
		}
		if (s->cur >= in->npaths)
			return 0;
		const struct source_path *sp = &in->paths[s->cur];
		if (sp->code < 0) {
			*k = (struct walk_skip){ .src_index = s->cur, .code = sp->code,
						 .path = sp->path };
			snprintf(k->msg, sizeof(k->msg), "%s", sp->msg ? sp->msg : sp->path);
			s->cur++;
			return 2;
		}
		if (sp->stream != NULL) {
			source_stream_item(s, sp->stream);
			s->item->e.id = s->next_id;
			s->item_stream = sp->stream;
			s->cur++;
			return 1;
		}
		s->walk = walk_new(&in->walk, in->dirfd, in->beneath, &sp->path, 1);
		if (s->walk == NULL)
			return xfer_fail(s->x, -ENOMEM, "out of memory");
		s->walk_base = s->next_id;
	}
}

/* True if a message from the sink waits, without blocking. */
static bool source_readable(struct source *s)
{
	struct pollfd p = { .fd = ctl_rfd(s->x->ctl), .events = POLLIN };

	return ctl_pending(s->x->ctl) || poll(&p, 1, 0) > 0;
}

/* -n: f is never read nor sent; its bytes leave the progress total. */
static void source_dry(struct source *s, struct src_rec *f)
{
	atomic_fetch_sub(&s->x->total, f->size);
}

/* Sends the batch of entries, and hands their files to the plan. Returns
 * 0 or a negative code. */
static int source_flush(struct source *s)
{
	struct proto_msg m;

	if (s->batch->count == 0)
		return 0;
	/* Read what the sink said first: a sink blocked writing ACKs to us
	 * would not read the batch, and we would block writing it. */
	while (!xfer_aborted(s->x) && source_readable(s))
		(void)source_on_message(s);
	if (xfer_aborted(s->x))
		return -PC_E_ABORTED;
	proto_batch_msg(s->batch, &m);
	if (ctl_send(s->x->ctl, &m) < 0)
		return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	s->announced += s->batch->count;
	while (s->pend_head != NULL) {
		struct src_rec *f = s->pend_head;
		s->pend_head = f->wnext;
		f->wnext = NULL;
		if (s->win_tail != NULL)
			s->win_tail->wnext = f;
		else
			s->win_head = f;
		s->win_tail = f;
		if (s->x->update) {
			/* Read nothing before the sink says whether it has it. */
			if (s->held == NULL)
				s->held = f;
			continue;
		}
		if (s->x->dry_run) {
			source_dry(s, f);
			continue;
		}
		src_rec_get(f); /* the plan's */
		plan_add(s->plan, f);
	}
	s->pend_tail = NULL;
	proto_batch_init(s->batch, s->announced);
	return 0;
}

/* Adds the entry in s->item to the batch (sending a full one first), and
 * keeps a record of it if it has contents to send. */
static int source_announce(struct source *s)
{
	const struct walk_item *it = s->item;
	const struct proto_entry *e = &it->e;
	size_t at = s->batch->len;
	int ret = proto_batch_add(s->batch, e);

	if (ret == -ENOSPC) {
		ret = source_flush(s);
		if (ret < 0)
			return ret;
		at = s->batch->len;
		ret = proto_batch_add(s->batch, e);
	}
	if (ret < 0)
		return xfer_fail(s->x, ret == -ENOSPC ? -PC_E_PROTO : ret,
				 "cannot announce '%s': %s", it->display, pc_strerror(ret));
	s->next_id = e->id + 1;
	/* Its encoded bytes: its strings (<= 2 * 4096 + 2 * 255) and a few
	 * dozen of fixed fields fit a u16. */
	size_t nb = s->batch->len - at;
	s->win_bytes[e->id % SOURCE_WINDOW] = (uint16_t)nb;
	s->inflight_bytes += nb;
	s->files += e->type == PROTO_ENT_REG;
	s->dirs += e->type == PROTO_ENT_DIR;
	s->links += e->type == PROTO_ENT_SYMLINK || e->type == PROTO_ENT_HARDLINK;
	entcount_announce(&s->ents, e->id, e->type);
	s->x->entries_total = entcount_shown_total(&s->ents, s->next_id);
	if (e->type == PROTO_ENT_REG && (e->flags & PROTO_ENT_SIZE_UNKNOWN))
		atomic_fetch_add(&s->x->unsized, 1);
	if (e->type != PROTO_ENT_REG || (e->size == 0 && !(e->flags & PROTO_ENT_SIZE_UNKNOWN)))
		return 0;
	struct src_rec *f = src_rec_new(e->id, e->size, it->base_fd,
					s->item_stream ? NULL : it->open_path, it->display);
	if (f == NULL)
		return xfer_fail(s->x, -ENOMEM, "out of memory");
	f->sparse = it->sparse;
	if (s->item_stream != NULL) {
		f->stream = true;
		f->fd = s->item_stream->fd; /* borrowed: the caller closes it */
	}
	if (s->pend_tail != NULL)
		s->pend_tail->wnext = f;
	else
		s->pend_head = f;
	s->pend_tail = f;
	atomic_fetch_add(&s->x->total, e->size);
	return 0;
}

/* Produces and announces entries while the window has room; the plan is
 * finished once every source has been produced. Returns 0 or a negative
 * code. */
int source_fill_window(struct source *s)
{
	struct walk_skip k;
	int ret = 0;

	/* --checksum: a batch's answer (its SUMS, then HAVE) may be long, and
	 * the sink writes it before it reads on. The next batch waits until
	 * the answer is read: were we to block writing a batch while the sink
	 * blocked writing hashes, neither would read again. */
	while (!s->walk_done && s->next_id - s->acked < SOURCE_WINDOW &&
	       s->inflight_bytes < SOURCE_WINDOW_BYTES && !xfer_aborted(s->x) &&
	       (!xfer_sums(s->x) || s->have_next == s->announced)) {
		ret = source_produce(s, &k);
		if (ret == 0)
			s->walk_done = true;
		else if (ret == 1)
			ret = source_announce(s);
		else if (ret == 2)
			ret = source_skip(s, &k);
		if (ret < 0)
			return ret;
	}
	ret = source_flush(s);
	s->x->walk_done = s->walk_done;
	/* With -u, the last files reach the plan with the last HAVE. */
	if (ret == 0 && s->walk_done && !s->plan_finished &&
	    (!s->x->update || s->have_next == s->announced)) {
		plan_finish(s->plan);
		s->plan_finished = true;
	}
	return ret;
}

/* ---- Messages from the sink -------------------------------------------- */

static bool source_done_bit(struct source *s, uint32_t id, bool set)
{
	uint32_t i = id % SOURCE_WINDOW;
	bool was = s->done_bits[i / 8] & (1u << (i % 8));

	if (set)
		s->done_bits[i / 8] |= (uint8_t)(1u << (i % 8));
	else
		s->done_bits[i / 8] &= (uint8_t)~(1u << (i % 8));
	return was;
}

static int source_on_ack(struct source *s, uint32_t upto)
{
	struct xfer *x = s->x;

	if (upto < s->acked || upto > s->announced)
		return xfer_fail(x, -PC_E_PROTO, "%s acknowledged entries up to %u, but %u were "
				 "announced and %u acknowledged before", x->peer, (unsigned)upto,
				 (unsigned)s->announced, (unsigned)s->acked);
	/* Under -u the sink answers each batch before it can finish any
	 * file of it: an ACK past its answers is a sink gone wrong. */
	if (x->update && upto > s->have_next)
		return xfer_fail(x, -PC_E_PROTO, "%s acknowledged entries up to %u before it said "
				 "which of them it has (up to %u)", x->peer, (unsigned)upto,
				 (unsigned)s->have_next);
	for (uint32_t id = s->acked; id < upto; id++) {
		(void)source_done_bit(s, id, false);
		s->inflight_bytes -= s->win_bytes[id % SOURCE_WINDOW];
	}
	entcount_done(&s->ents, s->acked, upto);
	s->acked = upto;
	x->entries_done = entcount_shown_done(&s->ents, upto);
	while (s->win_head != NULL && s->win_head->id < upto) {
		struct src_rec *f = s->win_head;
		s->win_head = f->wnext;
		if (s->win_head == NULL)
			s->win_tail = NULL;
		s->sums_bytes -= f->nsums * PROTO_SUM_LEN;
		if (s->sums_at == f)
			s->sums_at = NULL;
		src_rec_put(f);
	}
	return 0;
}

static int source_on_file_done(struct source *s, const struct proto_file_done *d)
{
	struct xfer *x = s->x;
	struct src_rec *f = s->win_head;

	if (d->id < s->acked || d->id >= s->announced || source_done_bit(s, d->id, true))
		return xfer_fail(x, -PC_E_PROTO, "%s reported entry %u failed, which is not in "
				 "flight", x->peer, (unsigned)d->id);
	s->failed++;
	s->unverified += d->status == -PC_E_INTEGRITY;
	while (f != NULL && f->id < d->id)
		f = f->wnext;
	/* A file we gave up on ourselves has been reported already. */
	bool ours = f != NULL && f->id == d->id && atomic_exchange(&f->failed, true);
	if (x->report && !ours) {
		const char *why = d->msg[0] ? d->msg : pc_strerror(d->status);
		log_error("%s", why);
		xfer_failed(x, f != NULL && f->id == d->id ? f->display : NULL, why, false);
	}
	return 0;
}

/* Hands f, answered for, to the readers. */
static void source_plan(struct source *s, struct src_rec *f)
{
	f->gap_before = s->plan_gap;
	s->plan_gap = false;
	src_rec_get(f); /* the plan's */
	plan_add(s->plan, f);
}

/* Appends n bytes of hashes to f's, under the lock the readers of a
 * planned f take. Returns 0 or -ENOMEM. */
static int source_sums_add(struct source *s, struct src_rec *f, const uint8_t *h, size_t n)
{
	size_t used = (size_t)f->nsums * PROTO_SUM_LEN;
	int ret = 0;

	sync_lock(&s->sums_lock);
	if (used + n > f->sums_cap) { /* doubling, within the bound */
		size_t cap = f->sums_cap ? 2 * f->sums_cap : n;
		cap = cap < used + n ? used + n : cap;
		cap = cap > PROTO_MAX_INFLIGHT_SUMS ? PROTO_MAX_INFLIGHT_SUMS : cap;
		uint8_t *p = realloc(f->sums, cap);
		if (p == NULL) {
			ret = -ENOMEM;
		} else {
			f->sums = p;
			f->sums_cap = cap;
		}
	}
	if (ret == 0) {
		memcpy(f->sums + used, h, n);
		f->nsums += n / PROTO_SUM_LEN;
		sync_broadcast(&s->sums_cond);
	}
	sync_unlock(&s->sums_lock);
	return ret;
}

/* No more hashes will come for f: its readers waiting for one go on. */
static void source_sums_done(struct source *s, struct src_rec *f)
{
	sync_lock(&s->sums_lock);
	f->sums_done = true;
	sync_broadcast(&s->sums_cond);
	sync_unlock(&s->sums_lock);
}

void source_sums_wake(void *arg)
{
	struct source *s = arg;

	sync_lock(&s->sums_lock);
	sync_broadcast(&s->sums_cond);
	sync_unlock(&s->sums_lock);
}

/* HAVE: the sink's answer to one ENTRIES under -u. The files it has are
 * done with (their records stay in the window until the ACK); the others
 * go to the plan. The answers come in order, for what was announced, and
 * name only files with contents. */
static int source_on_have(struct source *s, const struct proto_have *h)
{
	struct xfer *x = s->x;
	uint32_t end = h->first_id + h->count, kept = 0, named = 0;

	if (!x->update || h->first_id != s->have_next || end > s->announced ||
	    end < h->first_id)
		return xfer_fail(x, -PC_E_PROTO, "%s answered for entries %u to %u out of turn "
				 "(%u expected next, %u announced)", x->peer, (unsigned)h->first_id,
				 (unsigned)end, (unsigned)s->have_next, (unsigned)s->announced);
	for (uint32_t i = 0; i < h->count; i++)
		named += proto_have_bit(h, i);
	if (s->sums_at != NULL && !s->sums_at->sums_done)
		source_sums_done(s, s->sums_at); /* its last hashes came before this */
	while (s->held != NULL && s->held->id < end) {
		struct src_rec *f = s->held;
		s->held = f->wnext;
		if (f->planned_early) {
			if (proto_have_bit(h, f->id - h->first_id))
				return xfer_fail(x, -PC_E_PROTO, "%s says it has entry %u, which it "
						 "sent hashes for", x->peer, (unsigned)f->id);
			s->plan_gap = true; /* the next file does not follow f in the plan */
			continue;
		}
		if (proto_have_bit(h, f->id - h->first_id) && !f->stream) {
			kept++;
			s->unchanged++;
			s->unchanged_bytes += f->size;
			atomic_fetch_sub(&x->total, f->size);
			s->plan_gap = true;
			continue;
		}
		if (x->dry_run) {
			source_dry(s, f);
			continue;
		}
		f->sums_done = true;
		source_plan(s, f);
	}
	s->have_next = end;
	if (kept != named)
		return xfer_fail(x, -PC_E_PROTO, "%s says it has %u of entries %u to %u, but only "
				 "%u of them are files it could have", x->peer, (unsigned)named,
				 (unsigned)h->first_id, (unsigned)end, (unsigned)kept);
	return 0;
}

/* SUMS (--checksum, -a): hashes of blocks of a file the sink has already,
 * before the HAVE of its batch. They come for files with contents whose
 * batch is not yet answered, in id order, each file's from block 0 on and
 * within its blocks, and within PROTO_MAX_INFLIGHT_SUMS; never in a dry
 * run, where nothing is read. */
static int source_on_sums(struct source *s, const struct proto_sums *k)
{
	struct xfer *x = s->x;
	struct src_rec *f = s->sums_at != NULL ? s->sums_at : s->held;

	if (!xfer_sums(x) || x->dry_run || k->id < s->have_next || k->id >= s->announced ||
	    (s->sums_at != NULL && k->id < s->sums_at->id))
		return xfer_fail(x, -PC_E_PROTO, "%s sent hashes for entry %u out of turn",
				 x->peer, (unsigned)k->id);
	while (f != NULL && f->id < k->id)
		f = f->wnext;
	if (f == NULL || f->id != k->id || f->stream || !proto_sums_wanted(f->size, x->block_size) ||
	    k->first != f->nsums ||
	    k->first + k->count > src_rec_blocks(f->size, x->block_size))
		return xfer_fail(x, -PC_E_PROTO, "%s sent hashes for blocks %llu to %llu of entry "
				 "%u, which has no such blocks or had others named", x->peer,
				 (unsigned long long)k->first,
				 (unsigned long long)(k->first + k->count - 1), (unsigned)k->id);
	size_t add = (size_t)k->count * PROTO_SUM_LEN;
	if (s->sums_bytes + add > PROTO_MAX_INFLIGHT_SUMS)
		return xfer_fail(x, -PC_E_PROTO, "%s sent more than %u MiB of hashes for files "
				 "not yet finished", x->peer, PROTO_MAX_INFLIGHT_SUMS >> 20);
	if (source_sums_add(s, f, k->hashes, add) < 0)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->sums_bytes += add;
	/* The hashes of the file named before are complete, and so are those
	 * (none) of the files between: they go to the readers now, and f
	 * with the hashes it has; its readers wait for the rest. */
	if (s->sums_at != NULL && s->sums_at != f)
		source_sums_done(s, s->sums_at);
	s->sums_at = f;
	while (x->checksum && s->held != NULL && s->held->id <= f->id) {
		struct src_rec *g = s->held;
		s->held = g->wnext;
		g->sums_done = g != f;
		source_plan(s, g);
	}
	/* -a alone: the HAVE may still keep a file before f (by size and
	 * time), so those wait for it; f, which the sink does not keep, goes
	 * now, out of turn, and the HAVE skips it. It is never packed, and
	 * the gap it leaves in the plan is the HAVE's to mark. */
	if (!x->checksum && !f->planned_early) {
		bool gap = s->plan_gap;
		f->planned_early = true;
		source_plan(s, f);
		s->plan_gap = gap;
	}
	return 0;
}

/* LIST: a line of the listing, for our user. Only a sink that is a server
 * sends it to its client, and only in a dry run (-n) or, GONE, with
 * --delete. */
static int source_on_list(struct source *s, const struct proto_list *l)
{
	struct xfer *x = s->x;

	if (!x->report || !(x->dry_run || (x->delete && l->what == PROTO_LIST_GONE)))
		return xfer_fail(x, -PC_E_PROTO, "%s sent LIST in a session that lists nothing",
				 x->peer);
	xfer_listed(x, l->what, l->path);
	return 0;
}

int source_on_message(struct source *s)
{
	struct proto_msg m;
	int ret = ctl_recv(s->x->ctl, &m);

	if (ret < 0)
		return xfer_fail(s->x, ret == -PC_E_PROTO ? ret : -PC_E_NET,
				 "lost control connection to %s: %s", s->x->peer, pc_strerror(ret));
	s->heard_ns = platform_now_ns();
	switch (m.type) {
	case PROTO_ACK:
		return source_on_ack(s, m.u.ack.upto);
	case PROTO_FILE_DONE:
		return source_on_file_done(s, &m.u.file_done);
	case PROTO_HAVE:
		return source_on_have(s, &m.u.have);
	case PROTO_LIST:
		return source_on_list(s, &m.u.list);
	case PROTO_SUMS:
		return source_on_sums(s, &m.u.sums);
	case PROTO_ERROR:
		return xfer_fail_peer(s->x, m.u.error.code, m.u.error.msg);
	default:
		return xfer_fail(s->x, -PC_E_PROTO, "%s sent %s during the transfer", s->x->peer,
				 proto_type_name(m.type));
	}
}
