/* SPDX-License-Identifier: Apache-2.0 */
/* sink: receivers -> queues -> writers, driven by a control loop.
 *
 * The control thread takes the source's ENTRIES in order and keeps a
 * record of each entry in a table indexed by id, for the ids between the
 * lowest unfinished one (the watermark, `low`) and the last announced: at
 * most PROTO_MAX_INFLIGHT, which bounds memory whatever the source does.
 * It creates directories itself, at once and in order, so that whatever
 * goes inside finds its parent; it hands entries without contents (empty
 * files, symlinks, special files) to the writers in small jobs; it applies
 * a directory's final attributes (DIR_END) and makes hard links when the
 * watermark reaches them, that is once everything before them is done.
 * Receivers read and verify blocks; writers write DATA blocks at their
 * offsets and finish a file when its last block is in, and unpack PACK
 * blocks into whole files. Each finished entry sets its done bit; the
 * control thread moves the watermark over them and acknowledges (ACK). */
#include "pipeline/sink_int.h"
#include "pipeline/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/decoder.h"
#include "pipeline/encoder.h"
#include "pipeline/dest.h"
#include "pipeline/filter.h"
#include "pipeline/journal.h"
#include "pipeline/prune.h"
#include "pipeline/sink_ent.h"
#include "pipeline/sumpool.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "wire/pathsafe.h"
#include "sys/platform.h"
#include "sys/sync.h"

/* ---- Control loop ----------------------------------------------------- */

/* Hands the pending job of entries without contents to a writer. */
static int sink_flush_job(struct sink *s)
{
	struct buf *b = s->job;

	if (b == NULL)
		return 0;
	s->job = NULL;
	if (queue_push(s->wq[s->next_writer++ % s->nq], b) < 0) {
		bufpool_release(s->pool, b);
		return -PC_E_ABORTED;
	}
	return 0;
}

static int sink_add_job(struct sink *s, uint32_t id)
{
	if (s->job == NULL) {
		s->job = bufpool_acquire(s->pool);
		if (s->job == NULL)
			return -PC_E_ABORTED;
		s->job->ctx = &s->meta_tag;
	}
	memcpy(s->job->data + s->job->len, &id, sizeof(id));
	s->job->len += sizeof(id);
	if (s->job->len / sizeof(id) >= SINK_JOB_IDS)
		return sink_flush_job(s);
	return 0;
}

/* -u: the file is already here, as the source has it. Nothing of it
 * may come (a block or pack of it is a protocol error), and HAVE says so
 * when it has contents. */
static void sink_keep(struct sink *s, struct sink_ent *r, const struct proto_entry *e)
{
	struct proto_have *h = s->have;
	uint32_t i = e->id - h->first_id;

	atomic_store(&r->carry, SINK_CARRY_KEPT);
	if (r->data)
		h->bits[i / 8] |= (uint8_t)(1u << (i % 8));
	s->unchanged++;
	s->unchanged_bytes += e->size;
	atomic_fetch_sub(&s->x->total, e->size);
	sink_finished(s, r, 0, "");
}

static int sink_dry(struct sink *s, struct sink_ent *r, const struct proto_entry *e);

/* -u's quick check: a regular file of e's size and mtime is there. Not
 * with --checksum, which looks at the contents instead. */
static bool sink_quick_keep(struct sink *s, const struct proto_entry *e)
{
	return s->have != NULL && s->dest != NULL && !s->x->checksum && dest_unchanged(s->dest, e);
}

/* One announced entry: its record goes in the table, and what can be
 * done now is done (a directory is created) or handed out (an entry
 * without contents). */
static int sink_add(struct sink *s, const struct proto_entry *e)
{
	struct xfer *x = s->x;
	struct sink_ent *r = sink_ent_new(e);
	struct pc_err err;
	int ret;

	if (r == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	sync_lock(&s->lock);
	s->table[e->id % SINK_TABLE] = r;
	s->announced = e->id + 1;
	sync_broadcast(&s->cond);
	sync_unlock(&s->lock);
	atomic_fetch_add(&x->total, e->size);
	entcount_announce(&s->ents, e->id, e->type);
	x->entries_total = entcount_shown_total(&s->ents, s->announced);
	if (s->prune != NULL && (ret = prune_note(s->prune, e)) < 0)
		return xfer_fail(x, ret, ret == -E2BIG ?
				 "--delete: the directories being copied hold more names than "
				 "%u MiB can track; copy the tree in parts" : "out of memory",
				 PRUNE_MAX_BYTES >> 20);
	/* -u: the same link, FIFO, socket or device is there: left as it is
	 * (with -p given the source's mode and owner). */
	if (s->have != NULL && s->dest != NULL &&
	    (dest_same_symlink(s->dest, e) || dest_same_special(s->dest, e))) {
		sink_finished(s, r, 0, "");
		return 0;
	}
	if (x->dry_run)
		return sink_dry(s, r, e);
	if (e->type == PROTO_ENT_REG && (e->flags & PROTO_ENT_SIZE_UNKNOWN))
		atomic_fetch_add(&x->unsized, 1);
	switch (e->type) {
	case PROTO_ENT_DIR:
		pc_err_init(&err);
		ret = dest_mkdir(s->dest, e, &err);
		/* The one source's directory, as the destination's own name
		 * (a file in the way): nothing of it could be copied, so one
		 * message ends the copy, as cp's refusal does, rather than
		 * one for each entry inside. */
		if (ret < 0 && e->id == 0 && !s->t->is_dir && !s->t->to_stdout) {
			char msg[PROTO_MAX_MSG + 1];
			(void)pc_err_get(&err, msg, sizeof(msg));
			pc_err_destroy(&err);
			return xfer_fail(x, ret, "%s", msg);
		}
		sink_outcome(s, r, ret, &err);
		pc_err_destroy(&err);
		return 0;
	case PROTO_ENT_DIR_END:
	case PROTO_ENT_HARDLINK:
		return 0; /* when everything before it is done */
	case PROTO_ENT_REG:
		if (sink_quick_keep(s, e)) {
			sink_keep(s, r, e);
			return 0;
		}
		if (r->data && sink_resumable(s, r) && (ret = sink_resume(s, r, e)) < 0)
			return ret;
		if (r->data && x->checksum && s->dest != NULL && r->held == SINK_HELD_NONE)
			return sink_sums_send(s, r, e); /* and its blocks come */
		if (r->data)
			return 0; /* when its blocks are in */
		if (s->t->to_stdout) {
			sink_finished(s, r, 0, ""); /* nothing to write */
			return 0;
		}
		/* fall through */
	default:
		return sink_add_job(s, e->id) < 0 ? -PC_E_ABORTED : 0;
	}
}

/* n more entries or SKIPs came. Without -r, once each of our paths has
 * its one, the walk is done: the total is final, for the bar's ETA, long
 * before END (which follows the last file's data). */
static void sink_count_tops(struct sink *s, uint32_t n)
{
	struct xfer *x = s->x;

	if (x->skip_paths == 0 || !x->flat)
		return;
	s->tops += n;
	if (s->tops >= x->skip_paths)
		x->walk_done = true;
}

static int sink_on_entries(struct sink *s, const struct proto_entries *m)
{
	struct xfer *x = s->x;
	struct proto_entry *e = s->scratch;
	size_t pos = 0;
	int ret;

	if (m->first_id != s->announced)
		return xfer_fail(x, -PC_E_PROTO, "%s announced entry %u out of order (%u expected)",
				 x->peer, (unsigned)m->first_id, (unsigned)s->announced);
	if ((uint64_t)s->announced + m->count - s->low > SINK_TABLE)
		return xfer_fail(x, -PC_E_PROTO, "%s announced more than %u entries ahead of what is "
				 "finished", x->peer, SINK_TABLE);
	if (s->have != NULL) {
		memset(s->have, 0, sizeof(*s->have));
		s->have->first_id = m->first_id;
		s->have->count = (uint16_t)m->count;
	}
	while ((ret = proto_entries_next(m, &pos, e)) == 1) {
		s->inflight_bytes += proto_entry_bytes(e);
		if (s->inflight_bytes > PROTO_MAX_INFLIGHT_BYTES)
			return xfer_fail(x, -PC_E_PROTO, "%s announced more than %u bytes of names "
					 "ahead of what is finished", x->peer,
					 PROTO_MAX_INFLIGHT_BYTES);
		/* '-' takes one file: a directory (-r) or a link as the one
		 * source is the user's mistake, more entries after a file the
		 * peer's. */
		if (s->t->to_stdout && e->id == 0 && e->type != PROTO_ENT_REG)
			return xfer_fail(x, -PC_E_USAGE, "cannot write '%s' to standard output: "
					 "it is %s, and '-' takes one file", e->path,
					 e->type == PROTO_ENT_DIR ? "a directory" :
					 e->type == PROTO_ENT_SYMLINK ? "a symbolic link" :
					 "not a regular file");
		if (s->t->to_stdout && e->id > 0)
			return xfer_fail(x, -PC_E_PROTO, "%s sent more than one file for standard "
					 "output", x->peer);
		if (s->t->want_dir && e->id == 0 && e->type != PROTO_ENT_DIR)
			return xfer_fail(x, -ENOTDIR, "cannot copy '%s' to '%s': a destination "
					 "ending in '/' is a directory, and '%s' is not one",
					 e->path, s->t->display, e->path);
		ret = sink_add(s, e);
		if (ret < 0)
			return ret;
	}
	if (ret < 0)
		return xfer_fail(x, -PC_E_PROTO, "malformed ENTRIES from %s", x->peer);
	sink_count_tops(s, m->count);
	if (s->have != NULL) {
		/* Before any ACK of these entries: the source reads their
		 * files only once it knows. */
		struct proto_msg hm = { .type = PROTO_HAVE, .u.have = *s->have };
		if (ctl_send(x->ctl, &hm) < 0)
			return xfer_fail(x, -PC_E_NET, "lost control connection to %s", x->peer);
	}
	return sink_flush_job(s) < 0 ? -PC_E_ABORTED : 0;
}

static int sink_on_file_end(struct sink *s, const struct proto_file_end *m)
{
	struct sink_ent *r = sink_ref(s, m->id);
	int next = 0;

	if (r == NULL || !r->data) {
		if (r != NULL)
			sink_ent_put(r);
		return xfer_fail(s->x, -PC_E_PROTO, "%s ended an unknown file", s->x->peer);
	}
	sync_lock(&r->lock);
	if (r->size_known) {
		sync_unlock(&r->lock);
		sink_ent_put(r);
		return xfer_fail(s->x, -PC_E_PROTO, "%s ended a file of known size", s->x->peer);
	}
	r->size_known = true;
	r->size = m->size;
	if (!r->finishing && r->writing == 0 && (r->failed || sink_complete_locked(s, r))) {
		r->finishing = true;
		next = r->failed ? -1 : 1;
	}
	sync_unlock(&r->lock);
	atomic_fetch_add(&s->x->total, m->size);
	atomic_fetch_sub(&s->x->unsized, 1);
	if (next > 0)
		sink_data_commit(s, s->scratch, r);
	else if (next < 0)
		sink_data_fail(s, r, r->fail_code, "cannot create");
	sink_ent_put(r);
	return 0;
}

/* The source gave up on a file it announced: drop it, answer FILE_DONE. */
static int sink_on_file_fail(struct sink *s, const struct proto_file_fail *m)
{
	struct sink_ent *r = sink_ref(s, m->id);
	unsigned want = SINK_CARRY_NONE;
	bool now = false;

	if (r == NULL || !r->data ||
	    (!atomic_compare_exchange_strong(&r->carry, &want, SINK_CARRY_DATA) &&
	     want != SINK_CARRY_DATA)) {
		if (r != NULL)
			sink_ent_put(r);
		return xfer_fail(s->x, -PC_E_PROTO, "%s gave up on entry %u, which it cannot",
				 s->x->peer, (unsigned)m->id);
	}
	sync_lock(&r->lock);
	if (!r->failed && !r->finishing) {
		r->failed = true;
		r->fail_code = m->status;
		sink_ent_fail_msg(r, m->msg[0] ? m->msg : pc_strerror(m->status));
		now = r->writing == 0;
		r->finishing = now;
	}
	sync_unlock(&r->lock);
	if (now)
		sink_data_fail(s, r, r->fail_code, "cannot copy");
	sink_ent_put(r);
	return 0;
}

/* A source the peer could not open: report it, count it as not copied.
 * Only the client of a server acting as source may be sent one. */
static int sink_on_skip(struct sink *s, const struct proto_skip *k)
{
	struct xfer *x = s->x;

	if (x->skip_paths == 0 || s->end)
		return xfer_fail(x, -PC_E_PROTO, "%s sent SKIP %s", x->peer, s->end ? "after END"
				 : "out of place (it does not send our sources)");
	if (!proto_skip_in_order(k, x->skip_paths, &s->next_skip))
		return xfer_fail(x, -PC_E_PROTO, "%s skipped source %u out of order or out of "
				 "range (%u sources)", x->peer, (unsigned)k->index,
				 (unsigned)x->skip_paths);
	s->skipped++;
	sink_count_tops(s, 1);
	if (x->report) {
		char why[PROTO_MAX_MSG + 300];
		snprintf(why, sizeof(why), "%s%s%s", x->peer_local ? "" : x->peer,
			 x->peer_local ? "" : ": ", k->msg[0] ? k->msg : pc_strerror(k->status));
		log_error("%s", why);
		xfer_failed(x, NULL, why, true); /* the message names the source */
	}
	return 0;
}

/* The path of a LINKED file that arrived well, by id; NULL if none. */
static const char *sink_link_path(const struct sink *s, uint32_t id)
{
	size_t lo = 0, hi = s->nlinked;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->linked[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nlinked && s->linked[lo].id == id ? s->linked[lo].path : NULL;
}

static int sink_keep_link(struct sink *s, const struct sink_ent *r)
{
	if (s->nlinked == s->linked_cap) {
		size_t cap = s->linked_cap ? s->linked_cap * 2 : 64;
		struct sink_link *p = realloc(s->linked, cap * sizeof(*p));
		if (p == NULL)
			return -ENOMEM;
		s->linked = p;
		s->linked_cap = cap;
	}
	char *path = strdup(r->path);
	if (path == NULL)
		return -ENOMEM;
	s->linked[s->nlinked++] = (struct sink_link){ r->id, path };
	return 0;
}

/* One line of the listing (-n, --delete): to our own user when we are the
 * client, else to the client (LIST). */
static void sink_list(struct sink *s, uint8_t what, const char *path)
{
	struct xfer *x = s->x;

	if (x->report) {
		xfer_listed(x, what, path);
		return;
	}
	struct proto_msg m = { .type = PROTO_LIST };
	size_t n = strlen(path);
	m.u.list.what = what;
	if (n <= PROTO_MAX_MSG) {
		memcpy(m.u.list.path, path, n + 1);
	} else { /* cut in the middle, the name kept (PROTOCOL 4.17) */
		size_t tail = PROTO_MAX_MSG - PROTO_LIST_HEAD - 3;
		memcpy(m.u.list.path, path, PROTO_LIST_HEAD);
		memcpy(m.u.list.path + PROTO_LIST_HEAD, "...", 3);
		memcpy(m.u.list.path + PROTO_LIST_HEAD + 3, path + n - tail, tail + 1);
	}
	if (ctl_send(x->ctl, &m) < 0)
		xfer_fail(x, -PC_E_NET, "lost control connection to %s", x->peer);
}

/* What --delete keeps in the directory of a DIR_END: the names the source
 * announced in it, and what the filter rules exclude. */
struct sink_keep_arg {
	struct sink *s;
	const struct prune_dir *names;
	const char *dir;          /* the directory's wire path */
};

static bool sink_keeps(void *arg, const char *name, bool is_dir)
{
	const struct sink_keep_arg *k = arg;
	char path[PROTO_MAX_PATH + PROTO_MAX_NAME + 2];

	if (prune_dir_has(k->names, name))
		return true;
	/* -a: a partial file kept for the next run (its file failed), and
	 * its journal; the source never sends such names (walk_opts). */
	if (k->s->x->resume && journal_name_reserved(name))
		return true;
	if (k->s->x->filter == NULL)
		return false;
	snprintf(path, sizeof(path), "%s/%s", k->dir, name);
	return filter_excludes(k->s->x->filter, path, is_dir);
}

/* After END, a sign of life: our last ACK again, when we have sent none
 * for a third of --timeout (xfer_alive_ns), so that a source waiting for
 * its last acknowledgements does not take us for gone while we finish
 * (a long --delete, a file read back with -e). Control thread. */
static void sink_alive(struct sink *s)
{
	uint64_t every = xfer_alive_ns(s->x), now = platform_now_ns();

	if (!s->end || every == 0 || now - s->acked_ns < every || xfer_aborted(s->x))
		return;
	struct proto_msg m = { .type = PROTO_ACK };
	m.u.ack.upto = s->acked;
	if (ctl_send(s->x->ctl, &m) < 0)
		xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	s->acked_ns = now;
}

/* The ms until sink_alive is due, or -1 (not after END, no --timeout). */
static int sink_alive_wait(const struct sink *s)
{
	uint64_t every = xfer_alive_ns(s->x), now = platform_now_ns();

	if (!s->end || every == 0)
		return -1;
	return now - s->acked_ns >= every ? 0 : (int)((s->acked_ns + every - now) / 1000000u) + 1;
}

static void sink_gone(void *arg, const char *path)
{
	const struct sink_keep_arg *k = arg;

	sink_list(k->s, PROTO_LIST_GONE, path);
	sink_alive(k->s); /* a long removal is no silence */
}

/* --delete, for the DIR_END e the watermark reached: removes from its
 * directory what the source did not announce there (-n: lists it).
 * Returns 0 or the first error (message in err). */
static int sink_prune(struct sink *s, const struct proto_entry *e, struct pc_err *err)
{
	if (s->prune == NULL)
		return 0;
	struct prune_dir *names = prune_take(s->prune, e->id, e->path);
	if (names == NULL)
		return 0; /* a DIR_END that closed no directory of this session */
	if ((e->flags & PROTO_ENT_INCOMPLETE) || prune_dir_spared(names)) {
		/* What the source skipped there (reported) was not announced:
		 * it is not gone. rsync's rule after an I/O error, per
		 * directory; an entry that failed there spares it too. */
		char name[PROTO_MAX_PATH + 64];
		sink_display_path(s, e->path, name, sizeof(name));
		log_notice("--delete: nothing deleted in '%s', %s", name,
			   (e->flags & PROTO_ENT_INCOMPLETE) ? "which the source could not read whole"
			   : "where an entry was not copied");
		prune_dir_free(names);
		return 0;
	}
	if (s->x->dry_run && dest_exists(s->dest, e) != 1) {
		prune_dir_free(names); /* -n: a directory that would be new holds nothing */
		return 0;
	}
	struct sink_keep_arg k = { s, names, e->path };
	struct dest_prune_ops ops = { sink_keeps, sink_gone, &k, s->x->dry_run };
	int ret = dest_prune(s->dest, e, &ops, &s->deleted, err);
	prune_dir_free(names);
	return ret;
}

/* -n: entry r (e) is not made; the listing says what would be, and it is
 * finished at once. A regular file -u keeps is kept, as in a real run. A
 * DIR_END waits for the watermark, to list what --delete would remove. */
static int sink_dry(struct sink *s, struct sink_ent *r, const struct proto_entry *e)
{
	char name[PROTO_MAX_PATH + 64];

	if (e->type == PROTO_ENT_DIR_END)
		return 0;
	if (e->type == PROTO_ENT_REG && sink_quick_keep(s, e)) {
		sink_keep(s, r, e);
		return 0;
	}
	atomic_store(&r->carry, SINK_CARRY_KEPT); /* no block of it may come */
	int there = s->dest != NULL ? dest_exists(s->dest, e) : 0;
	if (e->type == PROTO_ENT_DIR ? there == 2 : there == 1) {
		/* Another kind in the way: the real run refuses it, and so
		 * does its rehearsal (with --delete it is replaced: listed
		 * below). */
		struct pc_err err;
		pc_err_init(&err);
		int ret = e->type == PROTO_ENT_DIR ? dest_dir_blocked(s->dest, e, &err)
						   : dest_nondir_blocked(s->dest, e, &err);
		if (ret < 0)
			sink_outcome(s, r, ret, &err);
		pc_err_destroy(&err);
		if (ret < 0)
			return 0;
	}
	if (!(e->type == PROTO_ENT_DIR && there == 1)) { /* stdout too */
		sink_display(s, r, name, sizeof(name));
		sink_list(s, there != 0 ? PROTO_LIST_CHANGED : PROTO_LIST_NEW, name);
	}
	/* The bytes the copy would write, for the summary: what -n is for. */
	if (e->type == PROTO_ENT_REG)
		atomic_fetch_add(&s->x->bytes, e->size);
	sink_finished(s, r, 0, "");
	return 0;
}

/* The watermark reached r, which waited for everything before it. */
static void sink_apply(struct sink *s, struct sink_ent *r)
{
	struct pc_err e;
	int ret;

	pc_err_init(&e);
	sink_ent_entry(r, s->scratch);
	if (r->type == PROTO_ENT_DIR_END) {
		struct pc_err pe;
		pc_err_init(&pe);
		int pruned = sink_prune(s, s->scratch, &pe);
		ret = s->x->dry_run ? 0 : dest_dir_end(s->dest, s->scratch, &e);
		if (ret == 0 && pruned < 0) {
			char msg[PROTO_MAX_MSG + 1];
			pc_err_get(&pe, msg, sizeof(msg));
			ret = pc_err_set(&e, pruned, "%s", msg);
		}
		pc_err_destroy(&pe);
	} else {
		const char *target = sink_link_path(s, r->link_id);
		char name[PROTO_MAX_PATH + 64];
		sink_display(s, r, name, sizeof(name));
		ret = target != NULL ? dest_hardlink(s->dest, target, s->scratch, &e)
				     : pc_err_set(&e, -ENOENT, "cannot link '%.900s': the file it "
						  "links to was not copied", name);
	}
	sink_outcome(s, r, ret, &e);
	pc_err_destroy(&e);
}

/* Moves the watermark over finished entries, applying what waited for it,
 * and acknowledges: at once with flush, else once SINK_ACK_EVERY entries
 * wait for it (a flood of small ACKs would fill the control channel while
 * the source is busy sending ENTRIES, and both would block writing).
 * Returns 0 or a negative code. */
static int sink_advance(struct sink *s, bool flush)
{
	struct sink_ent *done = NULL; /* the entry moved over last, to put unlocked */

	/* One lock a step: the one that moves the watermark over an entry
	 * also looks at the next. */
	sync_lock(&s->lock);
	for (;;) {
		uint32_t id = s->low;
		struct sink_ent *r = id < s->announced ? s->table[id % SINK_TABLE] : NULL;
		sync_unlock(&s->lock);
		if (done != NULL)
			sink_ent_put(done);
		done = NULL;
		if (r == NULL || xfer_aborted(s->x))
			break;
		if (!sink_is_done(s, id)) {
			if (r->type != PROTO_ENT_DIR_END && r->type != PROTO_ENT_HARDLINK)
				break;
			sink_apply(s, r);
		}
		if (r->ok && r->type == PROTO_ENT_REG && (r->flags & PROTO_ENT_LINKED) &&
		    sink_keep_link(s, r) < 0)
			return xfer_fail(s->x, -ENOMEM, "out of memory");
		/* --delete: a directory with an entry that failed (reported) is
		 * spared, as rsync spares after an I/O error. */
		if (!r->ok && s->prune != NULL)
			prune_spare(s->prune, r->path);
		s->inflight_bytes -= strlen(r->path) + strlen(r->target) + strlen(r->user) +
				     strlen(r->group);
		if (r->lock_ok) { /* --checksum: hashes this ACK will free; a PACK or a
				     failure may have left its old file open */
			sync_lock(&r->lock);
			s->sums_retired += r->nsums * PROTO_SUM_LEN;
			sink_base_close(r);
			sync_unlock(&r->lock);
		}
		entcount_done(&s->ents, id, id + 1);
		s->x->entries_done = entcount_shown_done(&s->ents, id + 1);
		done = r;
		sync_lock(&s->lock);
		s->table[id % SINK_TABLE] = NULL;
		atomic_fetch_and(&s->done[(id % SINK_TABLE) / 64], ~(1ull << (id % 64)));
		s->low = id + 1;
	}
	if (s->low != s->acked && !xfer_aborted(s->x) &&
	    (flush || s->low - s->acked >= SINK_ACK_EVERY)) {
		struct proto_msg m = { .type = PROTO_ACK };
		m.u.ack.upto = s->low;
		if (ctl_send(s->x->ctl, &m) < 0)
			return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s",
					 s->x->peer);
		s->acked = s->low;
		s->acked_ns = platform_now_ns();
		s->sums_inflight -= s->sums_retired;
		s->sums_retired = 0;
	}
	return 0;
}

static int sink_on_message(struct sink *s, struct sink_result *res)
{
	struct proto_msg m;
	int ret = ctl_recv(s->x->ctl, &m);

	if (ret == -PC_E_PROTO && ctl_why(s->x->ctl)[0] != '\0')
		return xfer_fail(s->x, ret, "%s sent a malformed ENTRIES: %s", s->x->peer,
				 ctl_why(s->x->ctl));
	if (ret < 0)
		return xfer_fail(s->x, ret == -PC_E_PROTO ? ret : -PC_E_NET,
				 "lost control connection to %s: %s", s->x->peer, pc_strerror(ret));
	if (s->end && m.type != PROTO_ERROR)
		return xfer_fail(s->x, -PC_E_PROTO, "%s sent %s after END", s->x->peer,
				 proto_type_name(m.type));
	switch (m.type) {
	case PROTO_ENTRIES:
		return sink_on_entries(s, &m.u.entries);
	case PROTO_FILE_END:
		return sink_on_file_end(s, &m.u.file_end);
	case PROTO_FILE_FAIL:
		return sink_on_file_fail(s, &m.u.file_fail);
	case PROTO_SKIP:
		return sink_on_skip(s, &m.u.skip);
	case PROTO_END:
		s->acked_ns = platform_now_ns(); /* sink_alive counts from here */
		sync_lock(&s->lock);
		s->end = true;
		s->x->walk_done = true;
		sync_broadcast(&s->cond);
		sync_unlock(&s->lock);
		res->peer = m.u.stats;
		for (unsigned i = 0; !s->x->ordered && i < s->nq; i++)
			queue_close(s->wq[i]); /* no more jobs */
		return 0;
	case PROTO_ERROR:
		return xfer_fail_peer(s->x, m.u.error.code, m.u.error.msg);
	default:
		return xfer_fail(s->x, -PC_E_PROTO, "%s sent %s during the transfer", s->x->peer,
				 proto_type_name(m.type));
	}
}

static void sink_control(struct sink *s, struct sink_result *r)
{
	struct xfer *x = s->x;
	/* The abort switch too: a thread that fails wakes us at once. */
	struct pollfd p[4] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = s->efd, .events = POLLIN },
			       { .fd = x->abort_efd, .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };
	nfds_t np = x->sigfd >= 0 ? 4 : 3;

	while (!xfer_aborted(x) && !(s->end && s->low == s->announced)) {
		if (ctl_pending(x->ctl)) { /* an ENTRIES that came while we accepted */
			(void)sink_on_message(s, r);
			continue;
		}
		/* Nothing to do right now: acknowledge what is finished before
		 * sleeping. Busy, ACKs wait for SINK_ACK_EVERY entries. */
		int n = poll(p, np, 0);
		if (n == 0) {
			(void)sink_advance(s, true);
			/* What we finished ourselves wakes nobody (sink_notify). */
			if (s->end && s->low == s->announced)
				break;
			int t = xfer_poll_timeout(x), a = sink_alive_wait(s);
			n = poll(p, np, a >= 0 && (t < 0 || a < t) ? a : t);
		}
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		/* Every ready fd, each time: a busy one must not starve the
		 * others (writers finish files all the time). */
		if (n > 0 && (p[3].revents & POLLIN))
			xfer_on_signal(x);
		if (n > 0 && (p[1].revents & POLLIN)) {
			int ret = platform_event_drain(s->efd);
			if (ret < 0)
				xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
		}
		if (n > 0 && p[0].revents && !xfer_aborted(x))
			(void)sink_on_message(s, r);
		(void)sink_advance(s, false);
		sink_alive(s);
		xfer_progress(x);
	}
	if (!xfer_aborted(x))
		(void)sink_advance(s, true);
}

static int sink_start(struct sink *s)
{
	struct xfer *x = s->x;
	unsigned nwriters = x->ordered ? 1 : SINK_WRITERS;
	unsigned count = x->streams * 3 + nwriters * 2 + 2;
	int rc;

	s->nq = x->ordered ? x->streams : nwriters;
	s->pool = bufpool_new(count, x->block_size);
	s->table = calloc(SINK_TABLE, sizeof(*s->table));
	s->done = calloc(SINK_TABLE / 64, sizeof(*s->done));
	s->scratch = malloc(sizeof(*s->scratch));
	s->writers = calloc(nwriters, sizeof(*s->writers));
	if (s->pool == NULL || s->table == NULL || s->done == NULL || s->scratch == NULL ||
	    s->writers == NULL || xfer_watch_pool(x, s->pool) < 0 ||
	    xfer_on_abort(x, sink_wake, s) < 0)
		return xfer_fail(x, -ENOMEM, "out of memory for %u buffers of %u bytes", count,
				 (unsigned)x->block_size);
	for (unsigned i = 0; i < s->nq; i++) {
		/* Ordered: each stream's queue holds at most 2, so the pool
		 * (3 per stream) always has a buffer for the stream the
		 * writer waits on. */
		/* Unordered, the control thread feeds the writers too (jobs of
		 * entries without contents): it closes its share at END. */
		s->wq[i] = queue_new(x->ordered ? 2 : count, x->ordered ? 1 : x->streams + 1);
		if (s->wq[i] == NULL || xfer_watch_queue(x, s->wq[i]) < 0)
			return xfer_fail(x, -ENOMEM, "out of memory");
	}
	for (unsigned i = 0; i < x->streams; i++) {
		s->recv[i] = (struct receiver){ .s = s, .idx = i };
		s->recv[i].dec = decoder_new(x->block_size);
		if (s->recv[i].dec == NULL)
			return xfer_fail(x, -ENOMEM, "out of memory");
		rc = pthread_create(&s->recv[i].tid, NULL, sink_receiver, &s->recv[i]);
		if (rc != 0)
			return xfer_fail(x, -rc, "cannot start receiver thread: %s", strerror(rc));
		s->recv[i].started = true;
	}
	for (unsigned i = 0; i < nwriters; i++) {
		s->writers[i].s = s;
		s->writers[i].idx = i;
		rc = pthread_create(&s->writers[i].tid, NULL,
				    x->ordered ? sink_writer_ordered : sink_writer, &s->writers[i]);
		if (rc != 0)
			return xfer_fail(x, -rc, "cannot start writer thread: %s", strerror(rc));
		s->nwriters++;
	}
	return 0;
}

/* Closes and removes the file of an unfinished entry. */
static void sink_drop(struct sink *s, struct sink_ent *r)
{
	if (r->df != NULL && r->jr != NULL)
		dest_file_keep(s->dest, r->df); /* -a: for the next run */
	else if (r->df != NULL)
		dest_file_abort(s->dest, r->df);
	r->df = NULL;
	sink_ent_put(r);
}

static void sink_stop(struct sink *s)
{
	struct buf *b;
	bool any = false;

	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		if (s->recv[i].started && pthread_join(s->recv[i].tid, NULL) != 0)
			log_error("cannot join receiver thread");
		any |= s->recv[i].started && s->recv[i].carried;
	}
	/* Only the streams that carried data speak for the network: 54
	 * idle ones of 64 would hide that the ten busy ones waited on it.
	 * All of them when none did. */
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		if (s->recv[i].started && (s->recv[i].carried || !any)) {
			stage_sum_add(&s->stage[PROTO_STAGE_RECV], &s->recv[i].recv);
			stage_sum_add(&s->stage[PROTO_STAGE_DECODE], &s->recv[i].decode);
		}
		if (s->recv[i].dec != NULL)
			s->codec_cpu_ns += decoder_cpu_ns(s->recv[i].dec);
		decoder_free(s->recv[i].dec);
	}
	for (unsigned i = 0; i < s->nwriters; i++) {
		if (pthread_join(s->writers[i].tid, NULL) != 0)
			log_error("cannot join writer thread");
		stage_sum_add(&s->stage[PROTO_STAGE_WRITE], &s->writers[i].write);
	}
	xfer_unwatch(s->x);
	if (s->job != NULL)
		bufpool_release(s->pool, s->job);
	for (unsigned i = 0; i < s->nq; i++) {
		while (s->wq[i] != NULL && (b = queue_trypop(s->wq[i])) != NULL)
			sink_release(s, b);
		queue_free(s->wq[i]);
	}
	bufpool_free(s->pool);
	for (uint32_t id = s->low; s->table != NULL && id < s->announced; id++)
		sink_drop(s, s->table[id % SINK_TABLE]);
	for (size_t i = 0; i < s->nlinked; i++)
		free(s->linked[i].path);
	free(s->linked);
	free(s->table);
	free(s->done);
	free(s->scratch);
	free(s->writers);
}

static int sink_finish(struct sink *s, struct sink_result *r)
{
	struct proto_msg m = { .type = PROTO_DONE };
	int ret;

	uint64_t kept = atomic_load(&s->kept_same);
	xfer_stats(s->x, atomic_load(&s->nfiles) - s->unchanged - kept, &m.u.stats);
	m.u.stats.dirs = atomic_load(&s->ndirs);
	m.u.stats.links = atomic_load(&s->nlinks);
	m.u.stats.unchanged = s->unchanged + kept;
	/* Bytes brought into place: a file kept as it was brought none. */
	uint64_t kept_bytes = atomic_load(&s->kept_same_bytes);
	m.u.stats.bytes -= kept_bytes < m.u.stats.bytes ? kept_bytes : m.u.stats.bytes;
	m.u.stats.unchanged_bytes = s->unchanged_bytes + atomic_load(&s->same_bytes);
	m.u.stats.deleted = s->deleted + (s->dest != NULL ? dest_replaced(s->dest) : 0);
	m.u.stats.resumed = atomic_load(&s->resumed);
	m.u.stats.codec_cpu_us = s->codec_cpu_ns / 1000u;
	for (unsigned i = PROTO_STAGE_RECV; i <= PROTO_STAGE_WRITE; i++)
		stage_sum_row(&s->stage[i], m.u.stats.wall_us, &m.u.stats.stage[i]);
	r->self = m.u.stats;
	ret = ctl_send(s->x->ctl, &m);
	if (ret < 0)
		return pc_err_set(s->x->err, -PC_E_NET, "lost control connection to %s",
				  s->x->peer);
	return 0;
}

/* xfer's current: the oldest entry not finished, the one that holds the
 * watermark back, if it has contents. Control thread. */
static void sink_current(void *owner, char *buf, size_t cap, uint64_t *size)
{
	struct sink *s = owner;
	struct sink_ent *r;

	sync_lock(&s->lock);
	r = s->low < s->announced ? s->table[s->low % SINK_TABLE] : NULL;
	sync_unlock(&s->lock);
	buf[0] = '\0';
	*size = 0;
	if (r == NULL || r->type != PROTO_ENT_REG || !r->data)
		return;
	sink_display(s, r, buf, cap);
	*size = r->size_known ? r->size : 0;
}

int sink_run(struct xfer *x, struct sink_target *t, const struct sink_opts *o,
	     struct sink_result *r)
{
	struct sink *s = calloc(1, sizeof(*s));
	mode_t mask;
	int ret;

	memset(r, 0, sizeof(*r));
	if (s == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->x = x;
	s->t = t;
	if (x->verify) /* once, not per hole */
		s->zeros_sum = verify_zeros(x->block_size);
	if (x->update)
		s->have = calloc(1, sizeof(*s->have));
	if (x->delete && !t->to_stdout)
		s->prune = prune_new(PRUNE_MAX_BYTES);
	if ((x->update && s->have == NULL) || (x->delete && !t->to_stdout && s->prune == NULL)) {
		free(s->have);
		prune_free(s->prune);
		free(s);
		return xfer_fail(x, -ENOMEM, "out of memory");
	}
	mask = umask(022);
	umask(mask);
	atomic_init(&s->failed, 0);
	atomic_init(&s->unverified, 0);
	atomic_init(&s->nfiles, 0);
	atomic_init(&s->ndirs, 0);
	atomic_init(&s->nlinks, 0);
	if (!t->to_stdout) {
		struct dest_opts d = { .preserve = o->preserve, .numeric_ids = o->numeric_ids,
				       .strip_setid = o->strip_setid, .umask = mask,
				       .times = x->update, .dry_run = x->dry_run,
				       .replace = x->delete };
		s->dest = dest_new(t->dirfd, t->is_dir ? NULL : t->name, &d, t->display);
		if (s->dest == NULL) {
			free(s->have);
			prune_free(s->prune);
			free(s);
			return xfer_fail(x, -ENOMEM, "out of memory");
		}
	}
	s->efd = platform_event_new();
	s->ctl_tid = pthread_self(); /* before any other thread starts */
	int rc = s->efd < 0 ? -s->efd : pthread_mutex_init(&s->lock, NULL);
	if (rc != 0) {
		ret = xfer_fail(x, -rc, "%s: %s", s->efd < 0 ? "eventfd" : "pthread_mutex_init",
				strerror(rc));
		if (s->efd >= 0)
			close(s->efd);
		dest_free(s->dest);
		free(s->have);
		prune_free(s->prune);
		free(s);
		return ret;
	}
	bool cond = pthread_cond_init(&s->cond, NULL) == 0;
	if (!cond)
		xfer_fail(x, -ENOMEM, "out of memory");
	x->current = sink_current;
	x->owner = s;
	if (cond && sink_start(s) == 0)
		sink_control(s, r);
	sink_stop(s);
	x->current = NULL;
	if (xfer_aborted(x)) {
		xfer_await_peer_error(x);
		ret = pc_err_get(x->err, NULL, 0);
	} else {
		ret = sink_finish(s, r);
	}
	r->failed = atomic_load(&s->failed) + s->skipped;
	r->unverified = atomic_load(&s->unverified);
	if (cond)
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&s->cond));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&s->lock));
	close(s->efd);
	dest_free(s->dest);
	free(s->have);
	sumpool_free(s->sums_pool);
	prune_free(s->prune);
	free(s);
	if (ret == 0 && r->failed > 0)
		ret = -PC_E_PARTIAL;
	return ret;
}
