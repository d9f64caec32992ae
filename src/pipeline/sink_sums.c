/* SPDX-License-Identifier: Apache-2.0 */
/* sink_sums: --checksum and -a at the sink. The control thread has the
 * blocks a file has at the destination already hashed (--checksum: the old
 * file; -a: the partial file an interrupted run left, the blocks its
 * journal names) on the sink's sumpool, and sends the hashes (SUMS), a
 * chunk at a time, in order. Those blocks are then in r's file already
 * (-a, --inplace, and --checksum's new file, which the pool fills with the
 * old blocks as it hashes them while that pays); any other SAME block's
 * bytes a receiver takes from the old file, once they prove to be the
 * source's (docs/PROTOCOL.md 4.18). */
#include "pipeline/sink_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/dest.h"
#include "pipeline/journal.h"
#include "pipeline/sparse.h"
#include "pipeline/sumpool.h"
#include "sys/log.h"
#include "sys/fault.h"
#include "sys/platform.h"
#include "sys/sync.h"

/* Hashes in one SUMS: a few, so that the source starts on a big file's
 * first blocks while the rest is hashed. */
#define SINK_SUMS_CHUNK SUMPOOL_CHUNK
/* Threads that hash old files (and write copies of them) at once: the
 * copy, on 2 cores, kept the hashes behind the link on one (bench i). */
#define SINK_HASHERS 2u
/* Blocks hashed whose fate is known before sink_copy_pays judges. */
#define SINK_COPY_SEEN 16u

void sink_base_close(struct sink_ent *r)
{
	if (r->base_users > 0)
		return;
	if (r->base_fd >= 0)
		close(r->base_fd);
	if (r->copy_fd >= 0)
		close(r->copy_fd);
	r->base_fd = r->copy_fd = -1;
}

/* Sends chunk c's hashes, of blocks r->nsums on, once r allows SAME
 * blocks for them (and, if c was copied, holds them: SINK_HELD_COPY).
 * Returns 0 or a negative code. */
static int sink_sums_flush(struct sink *s, struct sink_ent *r, const struct sumpool_chunk *c)
{
	struct proto_msg m = { .type = PROTO_SUMS };

	m.u.sums.id = r->id;
	m.u.sums.first = c->first; /* r->nsums: this thread alone writes it */
	m.u.sums.count = (uint16_t)c->count;
	m.u.sums.hashes = c->hashes;
	sync_lock(&r->lock);
	r->nsums += c->count;
	if (c->copied && r->copied == 0) /* the first chunk copied: copying began */
		r->copy_from = c->first;
	if (c->copied)
		r->copied = r->nsums;
	sync_unlock(&r->lock);
	s->sums_inflight += (uint64_t)c->count * PROTO_SUM_LEN;
	if (ctl_send(s->x->ctl, &m) < 0)
		return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
	return 0;
}

/* Whether writing the old file's blocks into r's new file as they are
 * hashed still pays: not once more of the blocks hashed so far came as
 * DATA than as SAME, at least SINK_COPY_SEEN of them. A copied block that
 * then comes as DATA was written in vain; one not copied that comes as
 * SAME is read and hashed once more on a receiver (sink_same_fetch),
 * which costs about as much. */
static bool sink_copy_pays(struct sink *s, struct sink_ent *r)
{
	sync_lock(&r->lock);
	uint64_t differed = r->differed, matched = r->matched;
	sync_unlock(&r->lock);
	if (differed < SINK_COPY_SEEN || differed <= matched)
		return true;
	char name[PROTO_MAX_PATH + 64];
	sink_display(s, r, name, sizeof(name));
	log_debug("'%s': %llu of the blocks hashed came as DATA, %llu as SAME: the rest of the "
		  "old file is not copied ahead", name, (unsigned long long)differed,
		  (unsigned long long)matched);
	return false;
}

/* The blocks of the source's file (size bytes at block size B) that lie
 * wholly inside an old file of old bytes: those a SAME may stand for. */
static uint64_t sink_sums_blocks(uint64_t size, uint64_t old, uint64_t B)
{
	if (old >= size)
		return (size + B - 1) / B;
	return old / B;
}

static bool sink_sums_aborted(void *arg)
{
	return xfer_aborted(arg);
}

/* sumpool's put for SINK_HELD_COPY (arg: r): writes an old block into
 * r's new file, unless a block of the source came for it already (a hole
 * comes without waiting for hashes; a broken source's block may too) or r
 * is finished, with r->lock held throughout, so that a block claimed
 * meanwhile is written after it. */
static int sink_copy_put(void *arg, uint64_t k, uint64_t off, const uint8_t *buf, size_t len)
{
	struct sink_ent *r = arg;
	int ret = 0;

	sync_lock(&r->lock);
	if (!r->failed && !r->finishing && !sink_seen_locked(r, k))
		ret = sparse_pwrite(r->fd, buf, len, off, false);
	sync_unlock(&r->lock);
	return ret;
}

/* Whether r's copy still owes its SAME blocks, none but SAME having come. */
static bool sink_owing(struct sink_ent *r)
{
	sync_lock(&r->lock);
	bool owing = r->owing;
	sync_unlock(&r->lock);
	return owing;
}

/* Hashes blocks 0 .. n - 1 of the source's file (size bytes) as fd has
 * them and sends them, a chunk (SUMS) at a time, for r: each block that
 * lies wholly in fd and, with a journal j, that j says was written;
 * PROTO_SUM_NONE for the others. The chunks are hashed on the sink's
 * sumpool, a few at once, and sent in order as they are done. With copy
 * (r's file is SINK_HELD_COPY), each block hashed is written there too,
 * at its offset, before its hash goes (sink_copy_put): the bytes a SAME block stands for are
 * then those hashed, read once. While r owes its SAME blocks (r->owing)
 * that waits: the chunks handed out meanwhile are not copied, and it
 * begins with the next once a block other than SAME came. It stops for the
 * chunks not yet handed out once the source has sent more of the blocks
 * hashed as DATA than as SAME (sink_copy_pays), or once writing failed (a
 * block not written is sent PROTO_SUM_NONE, and its DATA meets the same
 * error, and says so). Returns 0 or a negative code. */
static int sink_sums_stream(struct sink *s, struct sink_ent *r, int fd, uint64_t size,
			    uint64_t n, const struct journal *j, bool copy)
{
	struct sumpool_file f = { .fd = fd, .put = copy ? sink_copy_put : NULL, .put_arg = r,
				  .j = j, .size = size, .block = s->x->block_size,
				  .aborted = sink_sums_aborted, .arg = s->x };
	uint64_t next = 0;
	unsigned pending = 0;
	bool may_copy = copy, copying = copy && !sink_owing(r);
	int ret = 0;

	uint64_t room = (PROTO_MAX_INFLIGHT_SUMS - s->sums_inflight) / PROTO_SUM_LEN;
	n = n < room ? n : room;
	if (n > 0 && s->sums_pool == NULL &&
	    (s->sums_pool = sumpool_new(SINK_HASHERS, (size_t)f.block)) == NULL)
		return xfer_fail(s->x, -ENOMEM, "out of memory");
	while (next < n || pending > 0) {
		if (ret == 0 && next < n && pending < SUMPOOL_DEPTH && !xfer_aborted(s->x)) {
			unsigned count = n - next < SINK_SUMS_CHUNK ? (unsigned)(n - next)
								    : SINK_SUMS_CHUNK;
			sumpool_submit(s->sums_pool, &f, next, count, copying);
			next += count;
			pending++;
			continue;
		}
		if (pending == 0)
			break; /* failed or aborted: nothing more handed out */
		struct sumpool_chunk c;
		sumpool_collect(s->sums_pool, &c);
		pending--;
		if (ret == 0)
			ret = sink_sums_flush(s, r, &c);
		if (ret == 0 && fault_fire(FAULT_SUMS_SLOW)) {
			struct timespec slow = { .tv_nsec = 500000000 };
			while (nanosleep(&slow, &slow) != 0 && errno == EINTR)
				;
		}
		if (copying && (c.copy_failed || !sink_copy_pays(s, r)))
			copying = may_copy = false;
		else if (!copying && may_copy && !sink_owing(r))
			copying = may_copy = sink_copy_pays(s, r);
	}
	return ret;
}

/* Gives up f, which r did not take: a new file (SINK_HELD_COPY) goes,
 * any other stays as it is. */
static void sink_drop(struct sink *s, struct dest_file *f, struct journal *j, enum sink_held held)
{
	journal_free(j);
	if (held == SINK_HELD_COPY)
		dest_file_abort(s->dest, f);
	else
		dest_file_keep(s->dest, f);
}

/* Whether no block of r was claimed yet, so that its copy may begin owing
 * (r->lock held): past a block written into the file, nothing may be
 * owed. */
static bool sink_unclaimed_locked(const struct sink_ent *r)
{
	return r->writing == 0 && r->nblocks == 0 && !r->failed;
}

/* Makes f, which holds bytes already (held: -a's partial file, with its
 * journal j; --inplace's file or --checksum's copy, j NULL), r's file from
 * now on, with a second descriptor of it (below); with owe (a copy), one
 * that owes its SAME blocks (r->owing) unless a block of r was claimed
 * already. Returns 1 when it did, 0 when a block of r came before its
 * hashes, or a PACK carries r (a broken source's: f is dropped, and r is
 * written as if there had been nothing), or a negative code (f dropped).
 * what: "resume", "update in place" or "update", for a message. */
static int sink_adopt(struct sink *s, struct sink_ent *r, struct dest_file *f, struct journal *j,
		      enum sink_held held, bool owe, const char *path, const char *what)
{
	int fd = dest_file_fd(f), second = -1;

	/* A second descriptor of f: base_fd for a partial or in-place file,
	 * which SAME blocks are read from; for a copy only with -e, copy_fd,
	 * which the SAME blocks it holds are read back from (those past what
	 * it holds are read from the old file, opened again at its name, as
	 * all of them are where that descriptor cannot be had). */
	if (held == SINK_HELD_COPY && s->x->verify)
		second = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (held != SINK_HELD_COPY && (second = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		int ret = -errno;
		sink_drop(s, f, j, held);
		return xfer_fail(s->x, ret, "cannot %s '%s': %s", what, path, pc_strerror(ret));
	}
	sync_lock(&r->lock);
	/* (a PACK that carries r takes r's bytes: see sink_pack_may) */
	if (r->fd >= 0 || atomic_load(&r->carry) == SINK_CARRY_PACK) {
		sync_unlock(&r->lock);
		if (second >= 0)
			close(second);
		sink_drop(s, f, j, held);
		return 0;
	}
	r->df = f;
	r->fd = fd;
	r->jr = j;
	r->held = held;
	if (held == SINK_HELD_COPY)
		r->copy_fd = second;
	else
		r->base_fd = second;
	/* (a block claimed already, a hole that needs no hashes, found no
	 * file and is being written into this one) */
	r->owing = owe && sink_unclaimed_locked(r);
	sync_unlock(&r->lock);
	return 1;
}

/* --inplace: makes the destination's file r's file, written where it is,
 * and sends its hashes. Returns 1 when it did, 0 when that file cannot be
 * written in place (the caller hashes it for a new file, as without
 * --inplace), or a negative code when the session must end. */
static int sink_inplace(struct sink *s, struct sink_ent *r, const struct proto_entry *e)
{
	struct dest_file *f;
	uint64_t old;
	int ret = dest_open_inplace(s->dest, e, &f, &old);

	if (ret == -ENOMEM)
		return xfer_fail(s->x, ret, "out of memory");
	if (ret <= 0)
		return 0;
	int fd = dest_file_fd(f); /* r's from now on, if adopted */
	if ((ret = sink_adopt(s, r, f, NULL, SINK_HELD_INPLACE, false, e->path,
			      "update in place")) <= 0)
		return ret;
	sync_lock(&r->lock);
	r->old = (struct dest_ident){ .size = (off_t)old }; /* its size is all that counts */
	r->old_known = true;
	sync_unlock(&r->lock);
	ret = sink_sums_stream(s, r, fd, e->size,
			       sink_sums_blocks(e->size, old, s->x->block_size), NULL, false);
	return ret < 0 ? ret : 1;
}

/* Without --inplace (or where it cannot be): makes r's new file now, for
 * the hashing of the old file (old bytes) to fill with the bytes it
 * hashes, or, where the old file has the source's size and mtime and so
 * will likely match it whole, to owe them until a block other than SAME
 * comes (if none does, the copy is dropped as it is, and nothing was
 * written for it; where the copy cannot be made now, the blocks of a file
 * as big are owed whatever its mtime). Returns true when it did (r's file
 * from now on), false where
 * r's file is made at its first block instead, as without --checksum: no
 * block to hash;
 * -a (r's file is a partial one, with a journal); a block of r came
 * first; or the file cannot be made now (the first block's writer meets
 * the same error and reports it, with the file's name; a failure of the
 * session itself is xfer_fail's). */
static bool sink_copy_start(struct sink *s, struct sink_ent *r, const struct proto_entry *e,
			    uint64_t old)
{
	struct dest_file *f;
	struct pc_err err;

	if (sink_sums_blocks(e->size, old, s->x->block_size) == 0 || sink_resumable(s, r))
		return false;
	pc_err_init(&err);
	int ret = dest_file_open(s->dest, e->path, &f, &err);
	pc_err_destroy(&err);
	if (ret < 0) {
		/* (a directory the sink may not write, a read-only file system:)
		 * a file that matches whole needs no copy, so one as big owes its
		 * blocks to the file its first other block makes, which meets the
		 * error then, and reports it */
		sync_lock(&r->lock);
		r->owing = old == e->size && r->fd < 0 && sink_unclaimed_locked(r);
		sync_unlock(&r->lock);
		return false;
	}
	if (dest_file_device(f)) {
		dest_file_keep(s->dest, f);
		return false;
	}
	/* Owed only where the file looks unchanged by its size and mtime too:
	 * a file that did change (its mtime moved, as a rule) is copied as it
	 * is hashed, which is cheaper than taking its blocks again later. */
	sync_lock(&r->lock);
	bool owe = old == e->size && r->old.mtime.tv_sec == e->mtime_s &&
		   r->old.mtime.tv_nsec == (long)e->mtime_ns;
	sync_unlock(&r->lock);
	return sink_adopt(s, r, f, NULL, SINK_HELD_COPY, owe, e->path, "update") == 1;
}

int sink_sums_send(struct sink *s, struct sink_ent *r, const struct proto_entry *e)
{
	uint64_t old;
	int fd, ret;

	if (!proto_sums_wanted(e->size, s->x->block_size))
		return 0;
	if (s->x->inplace && (ret = sink_inplace(s, r, e)) != 0)
		return ret < 0 ? ret : 0;
	struct dest_ident id;
	if (dest_open_old(s->dest, e, &fd, &old, &id) != 1)
		return 0;
	sync_lock(&r->lock);
	r->old = id; /* kept if every block matches (sink_keep_same) */
	r->old_known = true;
	sync_unlock(&r->lock);
	ret = sink_sums_stream(s, r, fd, e->size, sink_sums_blocks(e->size, old, s->x->block_size),
			       NULL, sink_copy_start(s, r, e, old));
	close(fd); /* without a copy, a receiver opens it again at the first SAME block */
	return ret;
}

bool sink_resumable(const struct sink *s, const struct sink_ent *r)
{
	struct journal_id id = { s->x->block_size, r->size, r->mtime_s, r->mtime_ns };

	return s->x->resume && s->dest != NULL && r->type == PROTO_ENT_REG && r->size_known &&
	       proto_sums_wanted(r->size, s->x->block_size) && journal_fits(&id);
}

int sink_resume(struct sink *s, struct sink_ent *r, const struct proto_entry *e)
{
	struct journal_id id = { s->x->block_size, e->size, e->mtime_s, e->mtime_ns };
	char note[PROTO_MAX_MSG + 1];
	struct dest_file *f;
	struct journal *j;
	struct stat st;
	uint64_t n = 0;
	int ret = dest_part_find(s->dest, e, &id, &f, &j, note, sizeof(note));

	if (note[0] != '\0')
		log_notice("%s", note);
	if (ret == -ENOMEM)
		return xfer_fail(s->x, ret, "out of memory");
	if (ret <= 0)
		return 0; /* copied afresh: writing it says what goes wrong */
	int fd = dest_file_fd(f); /* r's from now on, if adopted */
	if (fstat(fd, &st) != 0) {
		ret = -errno;
		journal_free(j);
		dest_file_keep(s->dest, f);
		return xfer_fail(s->x, ret, "cannot resume '%s': %s", e->path, pc_strerror(ret));
	}
	/* Blocks up to the last one written: past it, nothing is there. */
	for (uint64_t k = j->nblocks; k > 0 && n == 0; k--)
		if (journal_has(j, k - 1))
			n = k;
	uint64_t whole = sink_sums_blocks(e->size, (uint64_t)st.st_size, s->x->block_size);
	if ((ret = sink_adopt(s, r, f, j, SINK_HELD_PARTIAL, false, e->path, "resume")) <= 0)
		return ret;
	return sink_sums_stream(s, r, fd, e->size, n < whole ? n : whole, j, false);
}

/* Opens r's old file again at its name, if not open yet (r->lock held).
 * Returns 0, or -PC_E_FILEIO when nothing of the kind is there any more,
 * or -errno. */
static int sink_base_open_locked(struct sink *s, struct sink_ent *r)
{
	struct proto_entry e; /* about 9 KiB, once per file */
	uint64_t old;
	int ret;

	if (r->base_fd >= 0)
		return 0;
	sink_ent_entry(r, &e);
	ret = dest_open_old(s->dest, &e, &r->base_fd, &old, NULL);
	return ret == 1 ? 0 : ret == 0 ? -PC_E_FILEIO : ret;
}

void sink_same_fetch(struct sink *s, struct sink_ent *r, struct buf *b)
{
	const struct proto_block *h = &b->hdr;
	int base = -1;

	sync_lock(&r->lock);
	/* A block of r's file that this run hashed there (or copied there as
	 * it hashed it) and the source matched is in place already; only -e
	 * reads it (for the digest): from r's file itself, where it holds it
	 * (a copy's copy_fd, or base_fd, a second descriptor of the partial
	 * or in-place file), else from the old file. */
	bool held = sink_holds_locked(r, h->offset / s->x->block_size);
	/* A copy that owes its SAME blocks takes this one's bytes later, if
	 * ever (its writer: sink_owed_fill); with -e they are read now, for
	 * the digest, as the old file has them. */
	bool there = (held || r->owing) && !s->x->verify;
	bool from_copy = held && r->copy_fd >= 0;
	b->err = r->failed || r->finishing ? -PC_E_ABORTED
		 : there || from_copy ? 0 : sink_base_open_locked(s, r);
	if (b->err == 0 && !there) {
		base = from_copy ? r->copy_fd : r->base_fd;
		r->base_users++;
	}
	sync_unlock(&r->lock);
	if (b->err == 0 && there) {
		b->len = 0;
		atomic_fetch_add(&s->same_bytes, h->raw_len);
	}
	if (b->err != 0 || there)
		return;
	ssize_t got = platform_pread_full(base, b->data, h->raw_len, h->offset);
	/* The copy is written without its zeros (sparse_pwrite, no fill) and
	 * so is not extended over them: what it lacks past its end, up to a
	 * block it holds, is zeros. */
	if (from_copy && got >= 0 && got < (ssize_t)h->raw_len) {
		memset(b->data + got, 0, h->raw_len - (size_t)got);
		got = (ssize_t)h->raw_len;
	}
	b->len = got > 0 ? (size_t)got : 0;
	if (got > 0 && fault_fire(FAULT_SINK_SAME))
		b->data[0] ^= 0xff;
	uint8_t sum[PROTO_SUM_LEN];
	if (got == (ssize_t)h->raw_len)
		proto_block_sum(b->data, b->len, sum);
	if (got < 0)
		b->err = (int)got;
	else if (got != (ssize_t)h->raw_len || proto_sum_low(sum) != h->checksum)
		b->err = from_copy ? -PC_E_INTEGRITY : -PC_E_FILEIO; /* sink_same_error */
	sync_lock(&r->lock);
	r->base_users--;
	sync_unlock(&r->lock);
	if (b->err == 0)
		atomic_fetch_add(&s->same_bytes, h->raw_len);
}

/* sink_same_error's words for err, of a SAME block at off of r of which
 * nothing (none) or other bytes were read. */
static int sink_same_say(struct sink *s, const struct sink_ent *r, int err, uint64_t off,
			 bool none, struct pc_err *e)
{
	char name[PROTO_MAX_PATH + 64];

	sink_display(s, r, name, sizeof(name));
	if (err == -PC_E_FILEIO && none)
		return pc_err_set(e, err, "'%.900s' went from the destination, or shrank, while "
				  "it was being updated: copy it again", name);
	if (err == -PC_E_FILEIO)
		return pc_err_set(e, err, "'%.900s' changed while it was being updated (its "
				  "bytes at offset %llu are no longer the source's): copy it again",
				  name, (unsigned long long)off);
	if (err == -PC_E_INTEGRITY)
		return pc_err_set(e, err, "'%.900s': its new copy read back other than written "
				  "at offset %llu (--verify): not put in place", name,
				  (unsigned long long)off);
	return pc_err_set(e, err, "cannot read '%.900s' where it already had the source's "
			  "bytes: %s", name, pc_strerror(err));
}

int sink_same_error(struct sink *s, const struct sink_ent *r, const struct buf *b,
		    struct pc_err *e)
{
	return sink_same_say(s, r, b->err, b->hdr.offset, b->len == 0, e);
}

/* One owed block o of r: read from base into buf, checked, written into
 * r's copy; a hole of base (sc) is checked as the zeros it stands for
 * (zsum: their hash for a whole block, once known; NONE before) and left a
 * hole in the copy, where nothing was written. Returns 0 or a negative code with the message in e. */
static int sink_owed_one(struct sink *s, struct sink_ent *r, int base, const struct sink_owed *o,
			 uint8_t *buf, uint8_t *zsum, struct sparse_scan *sc, struct pc_err *e)
{
	uint8_t sum[PROTO_SUM_LEN];
	uint64_t off = (uint64_t)o->k * s->x->block_size;

	if (sparse_hole(base, off, o->len, sc)) {
		/* zsum: a whole block's, hashed at the first hole of the fill */
		bool whole = o->len == s->x->block_size;
		if (!whole || proto_sum_none(zsum))
			proto_block_sum(memset(buf, 0, o->len), o->len, sum);
		if (whole && proto_sum_none(zsum))
			memcpy(zsum, sum, PROTO_SUM_LEN);
		if (whole)
			memcpy(sum, zsum, PROTO_SUM_LEN);
		return proto_sum_low(sum) == o->sum ? 0
						    : sink_same_say(s, r, -PC_E_FILEIO, off, false, e);
	}
	ssize_t got = platform_pread_full(base, buf, o->len, off);
	if (got > 0 && fault_fire(FAULT_SINK_SAME))
		buf[0] ^= 0xff;
	if (got == (ssize_t)o->len)
		proto_block_sum(buf, o->len, sum);
	if (got < 0)
		return sink_same_say(s, r, (int)got, off, false, e);
	if (got != (ssize_t)o->len || proto_sum_low(sum) != o->sum)
		return sink_same_say(s, r, -PC_E_FILEIO, off, got <= 0, e);
	int ret = sparse_pwrite(r->fd, buf, o->len, off, false);
	if (ret < 0) {
		char name[PROTO_MAX_PATH + 64];
		sink_display(s, r, name, sizeof(name));
		return pc_err_set(e, ret, "writing '%s': %s%s", name, pc_strerror(ret),
				  sink_room_hint(s, r, ret));
	}
	return 0;
}

int sink_owed_fill(struct sink *s, struct sink_ent *r, struct pc_err *e)
{
	uint8_t *buf = NULL;
	int base = -1, ret;

	sync_lock(&r->lock);
	struct sink_owed *owed = r->owed;
	size_t n = r->nowed;
	r->owed = NULL;
	r->nowed = r->owed_cap = 0;
	ret = n == 0 ? 0 : sink_base_open_locked(s, r);
	if (n > 0 && ret == 0) {
		base = r->base_fd;
		r->base_users++;
	}
	sync_unlock(&r->lock);
	if (n > 0 && ret < 0)
		ret = sink_same_say(s, r, ret, (uint64_t)owed[0].k * s->x->block_size, true, e);
	if (n > 0 && ret == 0 && (buf = malloc(s->x->block_size)) == NULL)
		ret = pc_err_set(e, -ENOMEM, "out of memory");
	uint8_t zsum[PROTO_SUM_LEN] = { 0 }; /* NONE: not hashed yet */
	struct sparse_scan sc = { 0 };
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = xfer_aborted(s->x) ? pc_err_set(e, -PC_E_ABORTED, "copy aborted")
					 : sink_owed_one(s, r, base, &owed[i], buf, zsum, &sc, e);
	if (base >= 0) {
		sync_lock(&r->lock);
		r->base_users--;
		sync_unlock(&r->lock);
	}
	free(buf);
	free(owed);
	return ret;
}
