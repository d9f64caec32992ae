/* SPDX-License-Identifier: Apache-2.0 */
/* sink_write: what the writers do: DATA blocks written at their offsets, PACK
 * blocks unpacked into whole files, entries without contents created; and
 * how an entry is finished. */
#include "pipeline/sink_int.h"

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
#include "pipeline/journal.h"
#include "pipeline/sink_ent.h"
#include "pipeline/sparse.h"
#include "pipeline/verify.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "wire/pathsafe.h"
#include "sys/platform.h"
#include "sys/sync.h"

/* ---- Entries ---------------------------------------------------------- */

/* Wakes the control thread to look at the done bits. Not from the
 * control thread itself (an entry kept by -u, a directory made): it looks
 * at them before it sleeps, and a system call per entry is not free: an
 * unchanged tree of 20,000 files made 20,442 of them. */
static void sink_notify(struct sink *s)
{
	if (pthread_equal(pthread_self(), s->ctl_tid))
		return;
	int ret = platform_event_signal(s->efd);

	if (ret < 0)
		xfer_fail(s->x, ret, "eventfd: %s", strerror(-ret));
}

bool sink_is_done(struct sink *s, uint32_t id)
{
	uint32_t i = id % SINK_TABLE;

	return atomic_load_explicit(&s->done[i / 64], memory_order_acquire) & (1ull << (i % 64));
}

/* Errors of the destination as a whole, where going on entry by entry
 * would only repeat them: they end the session. */
static bool sink_fatal(int code)
{
	return code == -ENOSPC || code == -EDQUOT || code == -EROFS || code == -EIO ||
	       code == -ENOMEM || code == -EMFILE || code == -ENFILE;
}

/* r is finished: well (code 0), or not (the source is told with
 * FILE_DONE, and we report it if we are the client). Sets its done bit
 * and wakes the control thread, which may then free r: the caller must
 * hold its own reference if it still needs r. Any thread. */
void sink_finished(struct sink *s, struct sink_ent *r, int code, const char *msg)
{
	uint32_t i = r->id % SINK_TABLE;

	if (code < 0) {
		struct proto_msg m = { .type = PROTO_FILE_DONE };
		m.u.file_done.id = r->id;
		m.u.file_done.status = code;
		m.u.file_done.bytes = r->bytes;
		snprintf(m.u.file_done.msg, sizeof(m.u.file_done.msg), "%s", msg);
		if (s->x->report) {
			char name[PROTO_MAX_PATH + 64];
			sink_display(s, r, name, sizeof(name));
			log_error("%s", m.u.file_done.msg);
			xfer_failed(s->x, name, m.u.file_done.msg, false);
		}
		atomic_fetch_add(&s->failed, 1);
		if (ctl_send(s->x->ctl, &m) < 0)
			xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	} else {
		r->ok = true;
		if (r->type == PROTO_ENT_REG)
			atomic_fetch_add(&s->nfiles, 1);
		else if (r->type == PROTO_ENT_DIR)
			atomic_fetch_add(&s->ndirs, 1);
		else if (r->type == PROTO_ENT_SYMLINK || r->type == PROTO_ENT_HARDLINK)
			atomic_fetch_add(&s->nlinks, 1);
	}
	atomic_fetch_or_explicit(&s->done[i / 64], 1ull << (i % 64), memory_order_release);
	sink_notify(s);
}

/* Finishes r with the outcome of a destination call: ret 0, or the error
 * with its message in e. A fatal one ends the session. */
void sink_outcome(struct sink *s, struct sink_ent *r, int ret, struct pc_err *e)
{
	char msg[PROTO_MAX_MSG + 1];

	if (ret == 0) {
		sink_finished(s, r, 0, "");
		return;
	}
	(void)pc_err_get(e, msg, sizeof(msg));
	if (sink_fatal(ret))
		xfer_fail(s->x, ret, "%s", msg);
	else
		sink_finished(s, r, ret, msg);
}

/* The record of an announced, unfinished entry, with a reference for the
 * caller; NULL if id is below the watermark (finished) or not announced. */
struct sink_ent *sink_ref(struct sink *s, uint32_t id)
{
	struct sink_ent *r = NULL;

	sync_lock(&s->lock);
	if (id >= s->low && id < s->announced) {
		r = s->table[id % SINK_TABLE];
		sink_ent_get(r);
	}
	sync_unlock(&s->lock);
	return r;
}

/* For a receiver: waits until entry `last` is announced. Returns 1, 0 when
 * the transfer aborted, or -PC_E_PROTO when END came and it never was. */
int sink_await(struct sink *s, uint32_t last)
{
	int ret = 1;

	sync_lock(&s->lock);
	while (last >= s->announced && !s->end && !xfer_aborted(s->x))
		sync_wait(&s->cond, &s->lock);
	if (xfer_aborted(s->x))
		ret = 0;
	else if (last >= s->announced)
		ret = -PC_E_PROTO;
	sync_unlock(&s->lock);
	return ret;
}

/* "DST/path" for messages. */
void sink_display(const struct sink *s, const struct sink_ent *r, char *out, size_t cap)
{
	sink_display_path(s, r->path, out, cap);
}

void sink_display_path(const struct sink *s, const char *p, char *out, size_t cap)
{
	const char *d = s->t->display;

	if (s->t->to_stdout) {
		snprintf(out, cap, "standard output");
		return;
	}
	if (!s->t->is_dir) { /* the first component is renamed to the target */
		const char *slash = strchr(p, '/');
		size_t dl = strlen(d);
		if (slash != NULL && dl > 1 && d[dl - 1] == '/') /* "new/": one slash */
			slash++;
		snprintf(out, cap, "%s%s", d, slash ? slash : "");
		return;
	}
	snprintf(out, cap, "%s%s%s", d, d[0] && d[strlen(d) - 1] == '/' ? "" : "/", p);
}

/* ---- Files in DATA blocks --------------------------------------------- */

const char *sink_room_hint(const struct sink *s, struct sink_ent *r, int err)
{
	if ((err != -ENOSPC && err != -EDQUOT) || !s->x->checksum || !r->lock_ok)
		return "";
	sync_lock(&r->lock);
	bool beside = r->old_known && r->held != SINK_HELD_INPLACE && r->held != SINK_HELD_PARTIAL;
	sync_unlock(&r->lock);
	return beside ? " (its new copy is made beside the old file; --inplace updates that "
			"file itself and needs no room for a second copy)"
		      : "";
}

/* Closes and removes what was written of r and reports why. Called once
 * (the caller won r->finishing) with no block of r being written. */
void sink_data_fail(struct sink *s, struct sink_ent *r, int code, const char *what)
{
	char msg[PROTO_MAX_MSG + 1], name[PROTO_MAX_PATH + 64];

	if (r->df != NULL && r->jr != NULL)
		dest_file_keep(s->dest, r->df); /* -a: the next run resumes it */
	else if (r->df != NULL)
		dest_file_abort(s->dest, r->df);
	r->df = NULL;
	r->fd = -1;
	sync_lock(&r->lock);
	sink_base_close(r);
	journal_free(r->jr);
	r->jr = NULL;
	sync_unlock(&r->lock);
	if (r->fail_msg != NULL) {
		snprintf(msg, sizeof(msg), "%s", r->fail_msg);
	} else {
		sink_display(s, r, name, sizeof(name));
		snprintf(msg, sizeof(msg), "%s '%.900s': %s", what, name, pc_strerror(code));
	}
	sink_finished(s, r, code, msg);
}

/* -e: reads what was written of r (size bytes, fd) back from the disk
 * and checks it against want, the digest of what the source sent.
 * Returns 0, or a negative code with the message in e: -PC_E_INTEGRITY for
 * other bytes. */
static int sink_verify(struct sink *s, const struct sink_ent *r, int fd, uint64_t size,
		       uint64_t want, struct pc_err *e)
{
	char name[PROTO_MAX_PATH + 64];
	uint64_t got = 0;
	struct stat st;
	int ret = 0;

	/* A hole at the end was never written: the size makes it (a device
	 * has none to set, and got its zeros). Only where it is not that size
	 * yet: a truncate moves the mtime and ctime even so, and a file in
	 * place that matched is to be left untouched (sink_data_commit). */
	if (!r->device && fstat(fd, &st) != 0)
		ret = -errno;
	else if (!r->device && st.st_size != (off_t)size && ftruncate(fd, (off_t)size) != 0)
		ret = -errno;
	if (ret == 0)
		ret = verify_read_back(fd, size, s->x->block_size, &got);

	if (ret == 0 && got == want)
		return 0;
	sink_display(s, r, name, sizeof(name));
	if (ret < 0)
		return pc_err_set(e, ret, "cannot read '%s' back to verify it: %s", name,
				  pc_strerror(ret));
	atomic_fetch_add(&s->unverified, 1);
	if (r->held == SINK_HELD_INPLACE)
		return pc_err_set(e, -PC_E_INTEGRITY, "'%s' read back from the disk is not what "
				  "was sent (--verify), and it was written in place (--inplace): "
				  "copy it again", name);
	return pc_err_set(e, -PC_E_INTEGRITY, "'%s' read back from the disk is not what was "
			  "sent: not put in place (--verify)", name);
}

/* --checksum: whether every block of r came as SAME, of a file as big as
 * the old one it was hashed from (then that file holds the source's bytes
 * already). r->lock held. */
static bool sink_all_same_locked(const struct sink *s, const struct sink_ent *r)
{
	uint64_t B = s->x->block_size;

	return r->old_known && r->size > 0 && (uint64_t)r->old.size == r->size &&
	       r->held != SINK_HELD_PARTIAL && r->matched == (r->size + B - 1) / B;
}

/* Every block of r matched the old file it was hashed from (id): that
 * file stays where it is, as it is (with -e, once it reads back right),
 * given only the attributes it lacks, and r's new file is dropped by the
 * caller. Its inode, its blocks, its other data (a snapshot's share of
 * it) are untouched, as rsync --checksum leaves a file it finds the
 * same. Returns 1 when it stayed; 0 when it is no longer there as hashed,
 * reads back other than its blocks did, or cannot be given its attributes
 * (the caller puts the new file, which holds what was hashed, in place as
 * always); or a negative code with the message in e. */
static int sink_keep_same(struct sink *s, struct sink_ent *r, const struct proto_entry *scratch,
			  const struct dest_ident *id, struct pc_err *e)
{
	struct dest_ident was = *id;
	struct dest_file *f;

	if (fault_fire(FAULT_SINK_KEPT))
		was.ctime.tv_nsec = (was.ctime.tv_nsec + 1) % 1000000000;
	int ret = dest_open_same(s->dest, scratch, &was, &f);

	if (ret == -ENOMEM)
		return pc_err_set(e, ret, "out of memory");
	if (ret <= 0)
		return 0;
	uint64_t got = 0;
	if (s->x->verify &&
	    (verify_read_back(dest_file_fd(f), r->size, s->x->block_size, &got) < 0 ||
	     got != r->digest)) {
		char name[PROTO_MAX_PATH + 64];
		sink_display(s, r, name, sizeof(name));
		log_debug("'%s' matched block by block but does not read back so: its new copy "
			  "takes its place", name);
		dest_file_abort(s->dest, f);
		return 0;
	}
	/* Attributes a non-owner may not set, say: the copy, put in place by
	 * a rename as before, gets them. */
	struct pc_err se;
	pc_err_init(&se);
	ret = dest_same_settle(s->dest, f, scratch, &se);
	if (ret < 0) {
		char msg[sizeof(se.msg)];
		pc_err_get(&se, msg, sizeof(msg));
		log_debug("%s: its new copy takes its place", msg);
	}
	pc_err_destroy(&se);
	return ret < 0 ? 0 : 1;
}

/* Every block arrived: gives the file its size, attributes and final
 * name (with -e, once it reads back right), or keeps the old file where
 * every block matched it (sink_keep_same). Called once (the caller won
 * r->finishing). */
void sink_data_commit(struct sink *s, struct proto_entry *scratch, struct sink_ent *r)
{
	struct dest_ident old;
	bool same = false, owes = false;
	struct pc_err e;
	int ret = 0;

	if (s->t->to_stdout) {
		sink_finished(s, r, 0, "");
		return;
	}
	pc_err_init(&e);
	if (r->lock_ok) {
		sync_lock(&r->lock);
		same = sink_all_same_locked(s, r);
		old = r->old;
		owes = r->nowed > 0;
		if (!owes)
			sink_base_close(r);
		sync_unlock(&r->lock);
	}
	sink_ent_entry(r, scratch);
	/* --inplace: nothing was written into the file; it is settled, not
	 * committed, below. */
	bool in_place_same = same && r->held == SINK_HELD_INPLACE;
	int kept = same && !in_place_same ? sink_keep_same(s, r, scratch, &old, &e) : 0;
	if (kept != 0) {
		dest_file_drop(s->dest, r->df); /* the copy made as it hashed, if any */
		r->df = NULL;
		ret = kept < 0 ? kept : 0;
	} else {
		/* a stream that turned out empty, or a file that owed every block
		 * to a copy it could not make then */
		if (r->df == NULL && (ret = dest_file_open(s->dest, r->path, &r->df, &e)) == 0)
			r->fd = dest_file_fd(r->df);
		if (ret == 0 && owes) /* the old file is not kept: the copy takes its bytes now */
			ret = sink_owed_fill(s, r, &e);
		if (ret == 0 && s->x->verify)
			ret = sink_verify(s, r, dest_file_fd(r->df), r->size, r->digest, &e);
		if (ret < 0 && r->df != NULL)
			dest_file_abort(s->dest, r->df);
		else if (ret == 0 && in_place_same)
			ret = dest_same_settle(s->dest, r->df, scratch, &e);
		else if (ret == 0)
			ret = dest_file_commit(s->dest, r->df, scratch, r->size, &e);
		kept = ret == 0 && in_place_same;
	}
	if (owes) {
		sync_lock(&r->lock);
		sink_base_close(r);
		sync_unlock(&r->lock);
	}
	if (kept > 0) {
		atomic_fetch_add(&s->kept_same, 1);
		atomic_fetch_add(&s->kept_same_bytes, r->size);
	}
	r->df = NULL;
	r->fd = -1;
	if (r->lock_ok) {
		sync_lock(&r->lock);
		journal_free(r->jr); /* removed with its file, or gone with it */
		r->jr = NULL;
		sync_unlock(&r->lock);
	}
	if (ret == 0 && r->held == SINK_HELD_PARTIAL) /* -a: a partial file finished */
		atomic_fetch_add(&s->resumed, 1);
	sink_outcome(s, r, ret, &e);
	pc_err_destroy(&e);
}

/* True once bytes, coverage and size agree (r->lock held). */
bool sink_complete_locked(const struct sink *s, const struct sink_ent *r)
{
	uint64_t B = s->x->block_size;

	return r->size_known && r->bytes == r->size && r->max_end == r->size &&
	       r->nblocks == (r->size + B - 1) / B;
}

/* Opens the file a DATA entry is written to, at its first block. r->lock
 * held. Returns 0 or a negative code with the message in e. */
static int sink_data_open_locked(struct sink *s, struct sink_ent *r, struct pc_err *e)
{
	if (r->fd >= 0)
		return 0;
	if (s->t->to_stdout) {
		r->fd = STDOUT_FILENO;
		return 0;
	}
	int ret;
	if (sink_resumable(s, r)) {
		struct journal_id id = { s->x->block_size, r->size, r->mtime_s, r->mtime_ns };
		ret = dest_part_create(s->dest, r->path, &id, &r->df, &r->jr, e);
	} else {
		ret = dest_file_open(s->dest, r->path, &r->df, e);
	}
	if (ret == 0) {
		r->fd = dest_file_fd(r->df);
		r->device = dest_file_device(r->df);
	}
	return ret;
}

/* Adds SAME block b, block k of r, to what r's copy owes (r->lock held).
 * Returns 0 or -ENOMEM. */
static int sink_owe_locked(struct sink_ent *r, const struct buf *b, uint64_t k)
{
	if (r->nowed == r->owed_cap) {
		size_t cap = r->owed_cap ? r->owed_cap * 2 : 16;
		struct sink_owed *p = realloc(r->owed, cap * sizeof(*p));
		if (p == NULL)
			return -ENOMEM;
		r->owed = p;
		r->owed_cap = cap;
	}
	r->owed[r->nowed++] = (struct sink_owed){ .sum = b->hdr.checksum, .k = (uint32_t)k,
						  .len = b->hdr.raw_len };
	return 0;
}

/* Before writing: checks a block against its file and marks its index as
 * seen, so a duplicate can never be written. A SAME block must stand for
 * a block SUMS named; *there: it is in r's file already, or owed to it
 * (r->owing); *fill: the copy owes blocks the caller must write first
 * (sink_owed_fill): this block is the first other than SAME, or a SAME
 * whose receiver found the copy owing, and left its bytes, after the
 * owing ended. Returns 1 to write it (unless there), 0 to drop it (the
 * file failed), or a negative code for a block that cannot be right. */
static int sink_claim(struct sink *s, struct sink_ent *r, const struct buf *b, bool *there,
		      bool *fill)
{
	const struct proto_block *h = &b->hdr;
	uint64_t B = s->x->block_size, idx = h->offset / B;
	unsigned want = SINK_CARRY_NONE;
	int ret = 1;
	/* -e: the block's share of the file's digest; a hole's checksum is
	 * that of its zeros (its header's is not checked: no bytes came), a
	 * SAME's that of the bytes taken (its header's is another hash). */
	uint64_t sum = h->checksum;

	if (s->x->verify && (h->flags & PROTO_BLK_HOLE))
		sum = h->raw_len == B ? s->zeros_sum : verify_zeros(h->raw_len);
	if (s->x->verify && h->type == PROTO_BLK_SAME)
		sum = proto_checksum(b->data, b->len);
	uint64_t mix = s->x->verify ? verify_mix(idx, sum) : 0;

	if (!atomic_compare_exchange_strong(&r->carry, &want, SINK_CARRY_DATA) &&
	    want != SINK_CARRY_DATA)
		return -PC_E_PROTO;
	sync_lock(&r->lock);
	if (r->failed || r->finishing) {
		ret = r->failed ? 0 : -PC_E_INTEGRITY;
		goto out;
	}
	if (h->offset % B != 0 || h->raw_len == 0 || h->offset > r->bytes + SINK_MAX_AHEAD ||
	    (r->size_known && (h->offset + h->raw_len > r->size ||
			       (h->raw_len != B && h->offset + h->raw_len != r->size)))) {
		ret = -PC_E_PROTO;
		goto out;
	}
	if (idx / 8 >= r->seen_bytes) {
		size_t n = (size_t)(idx / 8 + 1) * 2;
		uint8_t *p = realloc(r->seen, n);
		if (p == NULL) {
			ret = -ENOMEM;
			goto out;
		}
		memset(p + r->seen_bytes, 0, n - r->seen_bytes);
		r->seen = p;
		r->seen_bytes = n;
	}
	if (sink_seen_locked(r, idx)) {
		ret = -PC_E_INTEGRITY;
		goto out;
	}
	if (h->type == PROTO_BLK_SAME && idx >= r->nsums) {
		ret = -PC_E_PROTO;
		goto out;
	}
	if (idx < r->nsums) { /* for sink_copy_pays */
		r->matched += h->type == PROTO_BLK_SAME;
		r->differed += h->type != PROTO_BLK_SAME;
	}
	*there = h->type == PROTO_BLK_SAME && sink_holds_locked(r, idx);
	/* b->len 0 without an error: its receiver left the bytes to the copy */
	bool left = h->type == PROTO_BLK_SAME && !*there && b->err == 0 && b->len == 0;
	if (h->type != PROTO_BLK_SAME || left || r->owing) {
		if (h->type == PROTO_BLK_SAME && (ret = sink_owe_locked(r, b, idx)) < 0)
			goto out;
		*there = h->type == PROTO_BLK_SAME;
		if (h->type != PROTO_BLK_SAME)
			r->owing = false;
		*fill = !r->owing && r->nowed > 0;
		ret = 1;
	}
	r->seen[idx / 8] |= (uint8_t)(1u << (idx % 8));
	r->writing++;
	r->digest += mix;
out:
	sync_unlock(&r->lock);
	return ret;
}

/* After writing a claimed block (written: it was): counts it. Returns 1
 * if the file is now complete and the caller must commit it, -1 if it
 * failed meanwhile and the caller must fail it, 0 otherwise. */
static int sink_settle(struct sink *s, struct sink_ent *r, const struct proto_block *h,
		       bool written)
{
	int next = 0;

	sync_lock(&r->lock);
	r->writing--;
	if (written) {
		r->bytes += h->raw_len;
		r->nblocks++;
		if (h->offset + h->raw_len > r->max_end)
			r->max_end = h->offset + h->raw_len;
	}
	if (!r->finishing && r->writing == 0 && (r->failed || sink_complete_locked(s, r))) {
		r->finishing = true;
		next = r->failed ? -1 : 1;
	}
	sync_unlock(&r->lock);
	return next;
}

static int sink_write_data(struct sink *s, struct sink_ent *r, const struct buf *b)
{
	const struct proto_block *h = &b->hdr;
	bool hole = h->flags & PROTO_BLK_HOLE;
	int ret = 0;

	if (s->t->to_stdout) {
		static const uint8_t zeros[65536];
		if (!hole)
			return platform_write_full(r->fd, b->data, b->len);
		for (size_t off = 0; ret == 0 && off < b->len; off += sizeof(zeros))
			ret = platform_write_full(r->fd, zeros, b->len - off < sizeof(zeros)
								? b->len - off : sizeof(zeros));
		return ret;
	}
	if (!hole && fault_fire(FAULT_SINK_WRITE))
		return -ENOSPC;
	/* Zeros are written where the file holds other bytes already: one
	 * written in place, or a device; not a copy's SAME block that is
	 * written (one it holds is not), for nothing was written there. */
	bool fill = (r->held != SINK_HELD_NONE &&
		     !(r->held == SINK_HELD_COPY && h->type == PROTO_BLK_SAME)) || r->device;
	if (hole)
		return fill ? sparse_zero(r->fd, h->offset, h->raw_len) : 0;
	return sparse_pwrite(r->fd, b->data, b->len, h->offset, fill);
}

/* Writes one verified DATA block and finishes its file if it was the
 * last. */
void sink_write(struct sink *s, struct writer *w, struct buf *b)
{
	struct sink_ent *r = b->ctx;
	const struct proto_block *h = &b->hdr;
	char name[PROTO_MAX_PATH + 64];
	struct pc_err e;
	bool there = false, fill = false;
	int ret = sink_claim(s, r, b, &there, &fill);

	if (ret == 0)
		return;
	if (ret < 0) {
		sink_display(s, r, name, sizeof(name));
		xfer_fail(s->x, ret, "%s sent a %s block for '%s' at offset %llu", s->x->peer,
			  ret == -PC_E_INTEGRITY ? "duplicate" : "misplaced", name,
			  (unsigned long long)h->offset);
		return;
	}
	pc_err_init(&e);
	/* SAME: its receiver took the bytes from the old file, if they still
	 * were the source's; if not, this file fails and the rest goes on. */
	ret = h->type == PROTO_BLK_SAME && b->err != 0 ? sink_same_error(s, r, b, &e) : 0;
	if (ret == 0 && (!there || fill)) { /* (a block owed needs no file yet) */
		sync_lock(&r->lock);
		ret = sink_data_open_locked(s, r, &e);
		sync_unlock(&r->lock);
	}
	if (ret == 0 && fill) /* the blocks the file owes, before this one */
		ret = sink_owed_fill(s, r, &e);
	sync_lock(&r->lock);
	if (ret < 0 && !sink_fatal(ret)) {
		r->failed = true;
		r->fail_code = ret;
		char msg[PROTO_MAX_MSG + 1];
		(void)pc_err_get(&e, msg, sizeof(msg));
		sink_ent_fail_msg(r, msg);
	}
	sync_unlock(&r->lock);
	if (ret < 0 && sink_fatal(ret)) {
		char msg[PROTO_MAX_MSG + 1];
		(void)pc_err_get(&e, msg, sizeof(msg));
		xfer_fail(s->x, ret, "%s", msg);
	}
	pc_err_destroy(&e);
	if (ret == 0) {
		ret = there ? 0 : sink_write_data(s, r, b);
		if (ret == 0 && !s->t->to_stdout) {
			sync_lock(&r->lock);
			if (r->jr != NULL) /* -a: written; its bit after its bytes */
				ret = journal_mark(r->jr, h->offset / s->x->block_size);
			sync_unlock(&r->lock);
		}
		if (ret < 0) {
			sink_display(s, r, name, sizeof(name));
			/* A reader of our output that went away (| head) is our
			 * output failing (exit 11), not the network. */
			xfer_fail(s->x, ret == -EPIPE ? -PC_E_FILEIO : ret, "writing '%s': %s%s", name,
				  pc_strerror(ret), sink_room_hint(s, r, ret));
		} else {
			atomic_fetch_add(&s->x->bytes, h->raw_len);
		}
	}
	int next = sink_settle(s, r, h, ret == 0);
	if (next > 0)
		sink_data_commit(s, &w->e, r);
	else if (next < 0)
		sink_data_fail(s, r, r->fail_code, "cannot create");
}

/* ---- Entries without contents, and PACK blocks ------------------------ */

/* Creates an entry that has no contents to wait for: an empty file, a
 * symlink, a special file. */
static void sink_make(struct sink *s, struct writer *w, struct sink_ent *r)
{
	struct dest_file *df = NULL;
	struct pc_err e;
	int ret;

	pc_err_init(&e);
	sink_ent_entry(r, &w->e);
	switch (r->type) {
	case PROTO_ENT_REG:
		ret = dest_file_open(s->dest, r->path, &df, &e);
		if (ret == 0)
			ret = dest_file_commit(s->dest, df, &w->e, 0, &e);
		break;
	case PROTO_ENT_SYMLINK:
		ret = dest_symlink(s->dest, &w->e, &e);
		break;
	default:
		ret = dest_special(s->dest, &w->e, &e);
		break;
	}
	sink_outcome(s, r, ret, &e);
	pc_err_destroy(&e);
}

/* A job: the ids of entries without contents, in b->data. */
void sink_run_job(struct sink *s, struct writer *w, struct buf *b)
{
	const uint32_t *ids = (const uint32_t *)(const void *)b->data;

	for (size_t i = 0; i < b->len / sizeof(uint32_t) && !xfer_aborted(s->x); i++) {
		struct sink_ent *r = sink_ref(s, ids[i]);
		if (r == NULL)
			continue; /* cannot happen: nothing else finishes it */
		sink_make(s, w, r);
		sink_ent_put(r);
	}
}

/* Writes one small file whole from a PACK. */
static void sink_pack_file(struct sink *s, struct writer *w, struct sink_ent *r, const uint8_t *p)
{
	struct pc_err e;
	int ret;

	pc_err_init(&e);
	sink_ent_entry(r, &w->e);
	ret = dest_file_open(s->dest, r->path, &r->df, &e);
	if (ret == 0) {
		ret = fault_fire(FAULT_SINK_WRITE) ? -ENOSPC
						   : dest_file_write_whole(r->df, p, r->size);
		if (ret < 0) {
			char name[PROTO_MAX_PATH + 64];
			sink_display(s, r, name, sizeof(name));
			pc_err_set(&e, ret, "writing '%s': %s", name, pc_strerror(ret));
			dest_file_abort(s->dest, r->df);
		} else {
			r->bytes = r->size;
			atomic_fetch_add(&s->x->bytes, r->size);
			if (s->x->verify)
				ret = sink_verify(s, r, dest_file_fd(r->df), r->size,
						  verify_mix(0, proto_checksum(p, r->size)), &e);
			if (ret < 0)
				dest_file_abort(s->dest, r->df);
			else
				ret = dest_file_commit(s->dest, r->df, &w->e, r->size, &e);
		}
		r->df = NULL;
	}
	sink_outcome(s, r, ret, &e);
	pc_err_destroy(&e);
}

/* How a pack is being walked. */
struct sink_pack_walk {
	struct sink *s;
	struct writer *w;
	bool apply;                /* claim and write the files (else only check) */
	uint32_t bad;              /* the id being looked at */
};

/* One id of a PACK (a proto_pack_visit): checks its status against the
 * entry. With apply, also claims the file for this pack and writes it if
 * its contents are here. *took gets the bytes of contents it stands for.
 * Returns 0 or -PC_E_PROTO. */
/* Whether a PACK may say how r travels (carry), under r's lock: not once
 * another took it, and its contents not into a file the sink holds open
 * for r already (its old version hashed and made r's file: DATA and SAME
 * blocks only). With want, takes it (want: SINK_CARRY_NONE, then what r
 * had). */
static bool sink_pack_may(struct sink_ent *r, unsigned carry, unsigned *want)
{
	bool may;

	sync_lock(&r->lock);
	may = carry != SINK_CARRY_PACK || r->held == SINK_HELD_NONE;
	if (may && want != NULL)
		may = atomic_compare_exchange_strong(&r->carry, want, carry) ||
		      *want == SINK_CARRY_DATA;
	sync_unlock(&r->lock);
	return may;
}

static int sink_pack_one(void *arg, uint32_t id, int32_t st, const uint8_t *p, uint64_t left,
			 uint64_t *took)
{
	struct sink_pack_walk *pw = arg;
	struct sink *s = pw->s;
	char name[PROTO_MAX_PATH + 64], msg[PROTO_MAX_MSG + 1];
	struct sink_ent *r;
	unsigned carry = st == 1 ? SINK_CARRY_DATA : SINK_CARRY_PACK, want = SINK_CARRY_NONE;
	int ret = 0;

	pw->bad = id;
	*took = 0;
	if (xfer_aborted(s->x))
		return -PC_E_ABORTED;
	r = sink_ref(s, id);
	/* Finished already: an entry without contents in the range (a
	 * directory, a link) may be, once the files before it are done. A file
	 * this pack carries cannot be. */
	if (r == NULL)
		return st == 0 ? 0 : -PC_E_PROTO;
	if (!r->data) {
		sink_ent_put(r);
		return st == 0 ? 0 : -PC_E_PROTO;
	}
	unsigned now = atomic_load(&r->carry);
	if (!r->size_known || (now != SINK_CARRY_NONE && now != carry) ||
	    (carry == SINK_CARRY_PACK && now == SINK_CARRY_PACK)) {
		sink_ent_put(r);
		return -PC_E_PROTO;
	}
	if (st == 0 && r->size > left)
		ret = -PC_E_PROTO;
	else if (st == 0)
		*took = r->size;
	if (ret == 0 && !sink_pack_may(r, carry, NULL))
		ret = -PC_E_PROTO;
	if (ret < 0 || !pw->apply) {
		sink_ent_put(r);
		return ret;
	}
	if (!sink_pack_may(r, carry, &want)) {
		ret = -PC_E_PROTO; /* another pack took it meanwhile, or the file did */
	} else if (st < 0) {
		sink_display(s, r, name, sizeof(name));
		snprintf(msg, sizeof(msg), "cannot copy '%.900s': the source could not read it: %s",
			 name, pc_strerror(st));
		sink_finished(s, r, st, msg);
	} else if (st == 0) {
		sink_pack_file(s, pw->w, r, p);
	}
	sink_ent_put(r);
	return ret;
}

/* Unpacks a verified PACK block into its files, once the whole pack has
 * been checked against the entries: a malformed pack writes nothing. */
void sink_write_pack(struct sink *s, struct writer *w, const struct buf *b)
{
	uint32_t first = b->hdr.file_id, span = (uint32_t)b->hdr.offset;
	struct sink_pack_walk pw = { .s = s, .w = w, .bad = first };
	int ret = proto_pack_walk(b->data, b->len, first, span, sink_pack_one, &pw);

	if (ret == 0) {
		pw.apply = true;
		ret = proto_pack_walk(b->data, b->len, first, span, sink_pack_one, &pw);
	}
	if (ret == -PC_E_PROTO)
		xfer_fail(s->x, -PC_E_PROTO, "%s sent a malformed pack of entries %u to %u (at "
			  "entry %u, or its sizes do not add up)", s->x->peer, (unsigned)first,
			  (unsigned)(first + span - 1), (unsigned)pw.bad);
}
