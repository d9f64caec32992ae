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
#include "pipeline/sink.h"

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
#include "pipeline/sinkent.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "wire/pathsafe.h"
#include "sys/platform.h"
#include "sys/sync.h"

/* Writers work on different files at once: file creation, the cost of a
 * tree of small files, waits in the kernel, so there are more of them than
 * cores. Blocks of one file all go to one writer (writes to one inode
 * serialise on its lock). */
#define SINK_WRITERS 4u
/* How far past the bytes already written a block may land. Blocks of one
 * file overtake each other only by what is in flight (pools and socket
 * buffers), far less than this; a peer that claims more is lying, and the
 * bound keeps the seen-bitmap proportional to the data really received. */
#define SINK_MAX_AHEAD (16ull << 30)
/* Entries without contents handed to a writer in one job. */
#define SINK_JOB_IDS 64u
#define SINK_TABLE PROTO_MAX_INFLIGHT

struct sink;

struct receiver {
	struct sink *s;
	unsigned idx;                  /* stream index; immutable */
	struct decoder *dec;           /* this thread only */
	pthread_t tid;
	bool started;
};

struct writer {
	struct sink *s;
	unsigned idx;                  /* writer index: its queue; immutable */
	pthread_t tid;
	struct proto_entry e;          /* this thread's scratch */
};

/* A LINKED file that arrived well: what a later HARDLINK may name. */
struct sink_link {
	uint32_t id;
	char *path;
};

struct sink {
	struct xfer *x;
	struct sink_target *t;
	struct dest *dest;             /* NULL when writing to stdout */
	struct bufpool *pool;
	struct queue *wq[PROTO_MAX_STREAMS]; /* one per writer, or one per stream if ordered */
	unsigned nq;
	struct receiver recv[PROTO_MAX_STREAMS];
	struct writer *writers;        /* [nwriters] */
	unsigned nwriters;
	int efd;                       /* eventfd: an entry finished */
	int meta_tag;                  /* its address marks a buffer as a job of entry ids */

	pthread_mutex_t lock;          /* guards table, announced, low, end */
	pthread_cond_t cond;           /* entries announced, END, or abort */
	struct sink_ent **table;       /* [SINK_TABLE], by id % SINK_TABLE */
	uint32_t announced;            /* ids announced so far */
	uint32_t low;                  /* lowest id not yet passed by the watermark */
	bool end;                      /* END received */
	atomic_uint_least64_t *done;   /* [SINK_TABLE / 64] bits, by id % SINK_TABLE */

	atomic_uint failed;            /* entries that failed */
	atomic_uint_least64_t nfiles, ndirs, nlinks; /* entries finished well, by kind */
	/* control thread only: */
	unsigned skipped;              /* SKIPs received */
	uint32_t next_skip;            /* lowest index the next SKIP may have */
	uint32_t acked;                /* our last ACK */
	struct proto_entry *scratch;
	struct buf *job;               /* entries without contents, not yet handed out */
	unsigned next_writer;
	struct sink_link *linked;      /* sorted by id (they arrive in order) */
	size_t nlinked, linked_cap;
	uint64_t codec_cpu_ns;         /* summed from the receivers after join */
};

/* ---- Target ----------------------------------------------------------- */

static int sink_check_writable(int dirfd, const char *display, struct pc_err *e)
{
	if (faccessat(dirfd, ".", W_OK, AT_EACCESS) != 0)
		return pc_err_set(e, -errno, "cannot write to destination directory '%s': %s",
				  display, strerror(errno));
	return 0;
}

int sink_target_open(struct sink_target *t, int rootfd, const char *path, bool beneath,
		     uint32_t nsources, bool to_stdout, const char *display, struct pc_err *e)
{
	char dir[PROTO_MAX_PATH + 2], base[PROTO_MAX_PATH + 2];
	int fd;

	memset(t, 0, sizeof(*t));
	t->dirfd = -1;
	t->to_stdout = to_stdout;
	snprintf(t->display, sizeof(t->display), "%s", display);
	if (to_stdout)
		return nsources == 1 ? 0 : pc_err_set(e, -PC_E_USAGE,
			"only one source can be written to standard output");
	fd = pathsafe_open(rootfd, path, O_RDONLY | O_DIRECTORY, 0, beneath);
	if (fd >= 0) {
		t->dirfd = fd;
		t->is_dir = true;
		return sink_check_writable(fd, display, e);
	}
	if (fd == -EXDEV || fd == -ELOOP || (beneath && fd == -EINVAL))
		return pc_err_set(e, fd, "destination '%s' leads outside the served directory",
				  display);
	if (fd != -ENOENT && fd != -ENOTDIR)
		return pc_err_set(e, fd, "cannot open destination '%s': %s", display, pc_strerror(fd));
	if (nsources != 1)
		return pc_err_set(e, -PC_E_USAGE, "target '%s' is not a directory, and there are "
				  "%u sources", display, (unsigned)nsources);
	if (pathsafe_split(path, dir, base) < 0 || pathsafe_check_name(base) < 0)
		return pc_err_set(e, -EINVAL, "destination '%s' has no file name", display);
	fd = pathsafe_open(rootfd, dir, O_RDONLY | O_DIRECTORY, 0, beneath);
	if (fd == -EXDEV || fd == -ELOOP)
		return pc_err_set(e, fd, "destination '%s' leads outside the served directory",
				  display);
	if (fd < 0)
		return pc_err_set(e, fd, "destination directory of '%s' %s", display,
				  fd == -ENOENT ? "does not exist" : pc_strerror(fd));
	t->dirfd = fd;
	snprintf(t->name, sizeof(t->name), "%.*s", (int)sizeof(t->name) - 1, base);
	return sink_check_writable(fd, display, e);
}

void sink_target_close(struct sink_target *t)
{
	if (t->dirfd >= 0)
		close(t->dirfd);
	t->dirfd = -1;
}

/* ---- Entries ---------------------------------------------------------- */

static void sink_notify(struct sink *s)
{
	int ret = platform_event_signal(s->efd);

	if (ret < 0)
		xfer_fail(s->x, ret, "eventfd: %s", strerror(-ret));
}

static bool sink_is_done(struct sink *s, uint32_t id)
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
static void sink_finished(struct sink *s, struct sink_ent *r, int code, const char *msg)
{
	uint32_t i = r->id % SINK_TABLE;

	if (code < 0) {
		struct proto_msg m = { .type = PROTO_FILE_DONE };
		m.u.file_done.id = r->id;
		m.u.file_done.status = code;
		m.u.file_done.bytes = r->bytes;
		snprintf(m.u.file_done.msg, sizeof(m.u.file_done.msg), "%s", msg);
		if (s->x->report)
			log_error("%s", m.u.file_done.msg);
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
static void sink_outcome(struct sink *s, struct sink_ent *r, int ret, struct pc_err *e)
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
static struct sink_ent *sink_ref(struct sink *s, uint32_t id)
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
static int sink_await(struct sink *s, uint32_t last)
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
static void sink_display(const struct sink *s, const struct sink_ent *r, char *out, size_t cap)
{
	const char *d = s->t->display;
	const char *p = r->path;

	if (s->t->to_stdout) {
		snprintf(out, cap, "standard output");
		return;
	}
	if (!s->t->is_dir) { /* the first component is renamed to the target */
		const char *slash = strchr(p, '/');
		snprintf(out, cap, "%s%s", d, slash ? slash : "");
		return;
	}
	snprintf(out, cap, "%s%s%s", d, d[0] && d[strlen(d) - 1] == '/' ? "" : "/", p);
}

/* ---- Files in DATA blocks --------------------------------------------- */

/* Closes and removes what was written of r and reports why. Called once
 * (the caller won r->finishing) with no block of r being written. */
static void sink_data_fail(struct sink *s, struct sink_ent *r, int code, const char *what)
{
	char msg[PROTO_MAX_MSG + 1], name[PROTO_MAX_PATH + 64];

	if (r->df != NULL)
		dest_file_abort(s->dest, r->df);
	r->df = NULL;
	r->fd = -1;
	if (r->fail_msg[0] != '\0') {
		snprintf(msg, sizeof(msg), "%s", r->fail_msg);
	} else {
		sink_display(s, r, name, sizeof(name));
		snprintf(msg, sizeof(msg), "%s '%.900s': %s", what, name, pc_strerror(code));
	}
	sink_finished(s, r, code, msg);
}

/* Every block arrived: gives the file its size, attributes and final
 * name. Called once (the caller won r->finishing). */
static void sink_data_commit(struct sink *s, struct proto_entry *scratch, struct sink_ent *r)
{
	struct pc_err e;
	int ret = 0;

	if (s->t->to_stdout) {
		sink_finished(s, r, 0, "");
		return;
	}
	pc_err_init(&e);
	sink_ent_entry(r, scratch);
	if (r->df == NULL) /* a stream that turned out empty */
		ret = dest_file_open(s->dest, r->path, &r->df, &e);
	if (ret == 0)
		ret = dest_file_commit(s->dest, r->df, scratch, r->size, &e);
	r->df = NULL;
	r->fd = -1;
	sink_outcome(s, r, ret, &e);
	pc_err_destroy(&e);
}

/* True once bytes, coverage and size agree (r->lock held). */
static bool sink_complete_locked(const struct sink *s, const struct sink_ent *r)
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
	int ret = dest_file_open(s->dest, r->path, &r->df, e);
	if (ret == 0)
		r->fd = dest_file_fd(r->df);
	return ret;
}

/* Before writing: checks a block against its file and marks its index as
 * seen, so a duplicate can never be written. Returns 1 to write it, 0 to
 * drop it (the file failed), or a negative code for a block that cannot be
 * right. */
static int sink_claim(struct sink *s, struct sink_ent *r, const struct proto_block *h)
{
	uint64_t B = s->x->block_size, idx = h->offset / B;
	unsigned want = SINK_CARRY_NONE;
	int ret = 1;

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
	if (r->seen[idx / 8] & (1u << (idx % 8))) {
		ret = -PC_E_INTEGRITY;
		goto out;
	}
	r->seen[idx / 8] |= (uint8_t)(1u << (idx % 8));
	r->writing++;
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

#define SINK_PAGE 4096u

/* True if the page at p (or what is left of it, len bytes) is all zeros. */
static bool sink_zero_page(const uint8_t *p, size_t len)
{
	return encoder_is_zero(p, len < SINK_PAGE ? len : SINK_PAGE);
}

static int sink_pwrite(int fd, const uint8_t *p, size_t len, uint64_t at)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = pwrite(fd, p + off, len - off, (off_t)(at + off));
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			off += (size_t)n;
	}
	return 0;
}

static int sink_write_data(struct sink *s, struct sink_ent *r, const struct buf *b)
{
	const struct proto_block *h = &b->hdr;
	bool hole = h->flags & PROTO_BLK_HOLE;
	int ret = 0;

	if (s->t->to_stdout) {
		static const uint8_t zeros[65536];
		if (!hole) {
			ret = platform_write_full(r->fd, b->data, b->len);
			/* A reader that went away (| head) is our output failing. */
			return ret == -EPIPE ? -PC_E_FILEIO : ret;
		}
		for (size_t off = 0; ret == 0 && off < b->len; off += sizeof(zeros))
			ret = platform_write_full(r->fd, zeros, b->len - off < sizeof(zeros)
								? b->len - off : sizeof(zeros));
		return ret;
	}
	if (!hole && fault_fire(FAULT_SINK_WRITE))
		return -ENOSPC;
	/* Pages of zeros are not written: the new file reads zeros there
	 * anyway, and a sparse source stays sparse finer than a block. */
	for (size_t off = 0; !hole && off < b->len;) {
		size_t run = 0;
		while (off < b->len && sink_zero_page(b->data + off, b->len - off))
			off += SINK_PAGE < b->len - off ? SINK_PAGE : b->len - off;
		while (off + run < b->len && !sink_zero_page(b->data + off + run, b->len - off - run))
			run += SINK_PAGE < b->len - off - run ? SINK_PAGE : b->len - off - run;
		ret = run > 0 ? sink_pwrite(r->fd, b->data + off, run, h->offset + off) : 0;
		if (ret < 0)
			return ret;
		off += run;
	}
	return 0;
}

/* Writes one verified DATA block and finishes its file if it was the
 * last. */
static void sink_write(struct sink *s, struct writer *w, struct buf *b)
{
	struct sink_ent *r = b->ctx;
	const struct proto_block *h = &b->hdr;
	char name[PROTO_MAX_PATH + 64];
	struct pc_err e;
	int ret = sink_claim(s, r, h);

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
	sync_lock(&r->lock);
	ret = sink_data_open_locked(s, r, &e);
	if (ret < 0 && !sink_fatal(ret)) {
		r->failed = true;
		r->fail_code = ret;
		(void)pc_err_get(&e, r->fail_msg, sizeof(r->fail_msg));
	}
	sync_unlock(&r->lock);
	if (ret < 0 && sink_fatal(ret)) {
		char msg[PROTO_MAX_MSG + 1];
		(void)pc_err_get(&e, msg, sizeof(msg));
		xfer_fail(s->x, ret, "%s", msg);
	}
	pc_err_destroy(&e);
	if (ret == 0) {
		ret = sink_write_data(s, r, b);
		if (ret < 0) {
			sink_display(s, r, name, sizeof(name));
			xfer_fail(s->x, ret, "writing '%s': %s", name, pc_strerror(ret));
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
static void sink_run_job(struct sink *s, struct writer *w, struct buf *b)
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

static uint32_t sink_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
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
						   : platform_write_full(dest_file_fd(r->df), p, r->size);
		if (ret < 0) {
			char name[PROTO_MAX_PATH + 64];
			sink_display(s, r, name, sizeof(name));
			pc_err_set(&e, ret, "writing '%s': %s", name, pc_strerror(ret));
			dest_file_abort(s->dest, r->df);
		} else {
			r->bytes = r->size;
			atomic_fetch_add(&s->x->bytes, r->size);
			ret = dest_file_commit(s->dest, r->df, &w->e, r->size, &e);
		}
		r->df = NULL;
	}
	sink_outcome(s, r, ret, &e);
	pc_err_destroy(&e);
}

/* One id of a PACK: checks its status against the entry. With apply,
 * also claims the file for this pack and writes it if its contents are
 * here. *took gets the bytes of contents it stands for. Returns 0 or
 * -PC_E_PROTO. */
static int sink_pack_one(struct sink *s, struct writer *w, uint32_t id, int32_t st,
			 const uint8_t *p, uint64_t left, bool apply, uint64_t *took)
{
	char name[PROTO_MAX_PATH + 64], msg[PROTO_MAX_MSG + 1];
	struct sink_ent *r = sink_ref(s, id);
	unsigned carry = st == 1 ? SINK_CARRY_DATA : SINK_CARRY_PACK, want = SINK_CARRY_NONE;
	int ret = 0;

	*took = 0;
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
	if (st > 1 || !r->size_known || (now != SINK_CARRY_NONE && now != carry) ||
	    (carry == SINK_CARRY_PACK && now == SINK_CARRY_PACK)) {
		sink_ent_put(r);
		return -PC_E_PROTO;
	}
	if (st == 0 && r->size > left)
		ret = -PC_E_PROTO;
	else if (st == 0)
		*took = r->size;
	if (ret < 0 || !apply) {
		sink_ent_put(r);
		return ret;
	}
	if (!atomic_compare_exchange_strong(&r->carry, &want, carry) && want != SINK_CARRY_DATA) {
		ret = -PC_E_PROTO; /* another pack took it meanwhile */
	} else if (st < 0) {
		sink_display(s, r, name, sizeof(name));
		snprintf(msg, sizeof(msg), "cannot copy '%.900s': the source could not read it: %s",
			 name, pc_strerror(st));
		sink_finished(s, r, st, msg);
	} else if (st == 0) {
		sink_pack_file(s, w, r, p);
	}
	sink_ent_put(r);
	return ret;
}

/* Walks a PACK's ids; with apply, writes the files. Returns 0, or
 * -PC_E_PROTO with *bad the id at fault (first + span when only the sizes
 * do not add up). */
static int sink_pack_walk(struct sink *s, struct writer *w, const struct buf *b, bool apply,
			  uint32_t *bad)
{
	uint32_t first = b->hdr.file_id, span = (uint32_t)b->hdr.offset;
	uint64_t off = 4 * (uint64_t)span, len = b->len;

	for (uint32_t i = 0; i < span && !xfer_aborted(s->x); i++) {
		uint64_t took;
		int32_t st = (int32_t)sink_be32(b->data + 4 * (size_t)i);
		*bad = first + i;
		if (sink_pack_one(s, w, first + i, st, b->data + off, len - off, apply, &took) < 0)
			return -PC_E_PROTO;
		off += took;
	}
	*bad = first + span;
	return off == len ? 0 : -PC_E_PROTO;
}

/* Unpacks a verified PACK block into its files, once the whole pack has
 * been checked against the entries: a malformed pack writes nothing. */
static void sink_write_pack(struct sink *s, struct writer *w, const struct buf *b)
{
	uint32_t first = b->hdr.file_id, span = (uint32_t)b->hdr.offset, bad;

	if (sink_pack_walk(s, w, b, false, &bad) < 0 || sink_pack_walk(s, w, b, true, &bad) < 0)
		xfer_fail(s->x, -PC_E_PROTO, "%s sent a malformed pack of entries %u to %u (at "
			  "entry %u, or its sizes do not add up)", s->x->peer, (unsigned)first,
			  (unsigned)(first + span - 1), (unsigned)bad);
}

/* ---- Threads ---------------------------------------------------------- */

static void sink_wake(void *arg)
{
	struct sink *s = arg;

	sync_lock(&s->lock);
	sync_broadcast(&s->cond);
	sync_unlock(&s->lock);
}

/* Reads exactly n bytes of a block's payload into b->data. */
static int sink_read_payload(struct receiver *r, int fd, struct buf *b)
{
	int ret = platform_read_full(fd, b->data, b->hdr.enc_len, NULL);

	if (ret == 0)
		atomic_fetch_add(&r->s->x->wire_bytes, b->hdr.enc_len);
	return ret;
}

/* Which entry a block belongs to, once announced: *out gets a reference
 * to it (DATA), or stays NULL for a PACK and for a block of an entry that
 * is finished already (one the sink gave up on: its late blocks are
 * dropped). Returns 1, 0 on abort, or -PC_E_PROTO. */
static int sink_block_owner(struct sink *s, const struct proto_block *h, struct sink_ent **out)
{
	uint32_t last = h->type == PROTO_BLK_PACK ? h->file_id + (uint32_t)h->offset - 1
						  : h->file_id;
	int ret = sink_await(s, last);

	*out = NULL;
	if (ret <= 0 || h->type == PROTO_BLK_PACK)
		return ret;
	*out = sink_ref(s, h->file_id);
	if (*out != NULL && !(*out)->data) {
		sink_ent_put(*out);
		*out = NULL;
		return -PC_E_PROTO;
	}
	return 1;
}

static int sink_receive_one(struct receiver *rc, int fd)
{
	struct sink *s = rc->s;
	struct xfer *x = s->x;
	uint8_t raw[PROTO_BLOCK_HDR_LEN];
	struct proto_block h;
	struct sink_ent *r;
	struct buf *b;
	int ret;

	ret = platform_read_full(fd, raw, sizeof(raw), NULL);
	if (ret < 0)
		return xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
				 "lost data connection %u from %s: %s", rc->idx, x->peer,
				 ret == -PC_E_NET ? "connection closed" : pc_strerror(ret));
	atomic_fetch_add(&x->wire_bytes, sizeof(raw));
	if (proto_block_decode(raw, x->block_size, &h) < 0)
		return xfer_fail(x, -PC_E_PROTO, "malformed block header from %s", x->peer);
	if (h.type == PROTO_BLK_END)
		return 1;
	if (h.type == PROTO_BLK_PACK && (x->ordered || s->t->to_stdout))
		return xfer_fail(x, -PC_E_PROTO, "%s sent a pack of files to a stream", x->peer);
	ret = sink_block_owner(s, &h, &r);
	if (ret < 0)
		return xfer_fail(x, ret, "%s sent a block for entry %u, which %s", x->peer,
				 (unsigned)h.file_id, s->end ? "it never announced"
							  : "has no contents");
	b = ret > 0 ? bufpool_acquire(s->pool) : NULL;
	if (b == NULL) {
		if (r != NULL)
			sink_ent_put(r);
		return -PC_E_ABORTED;
	}
	b->hdr = h;
	b->ctx = r;
	ret = h.flags & PROTO_BLK_HOLE ? 0 : sink_read_payload(rc, fd, b);
	if (ret == 0 && h.type == PROTO_BLK_DATA && r == NULL) {
		bufpool_release(s->pool, b); /* an entry already given up: drop it */
		return 0;
	}
	if (ret == 0)
		ret = decoder_verify(rc->dec, b);
	if (ret < 0) {
		bufpool_release(s->pool, b);
		if (ret == -PC_E_INTEGRITY && r != NULL) {
			char name[PROTO_MAX_PATH + 64];
			sink_display(s, r, name, sizeof(name));
			sink_ent_put(r);
			return xfer_fail(x, ret, "block at offset %llu of '%s' failed its checksum "
					 "or did not decode: data corrupted in transit from %s",
					 (unsigned long long)h.offset, name, x->peer);
		}
		if (r != NULL)
			sink_ent_put(r);
		if (ret == -PC_E_INTEGRITY)
			return xfer_fail(x, ret, "a block of %u small files from entry %u failed its "
					 "checksum or did not decode: data corrupted in transit "
					 "from %s", (unsigned)h.offset, (unsigned)h.file_id, x->peer);
		if (ret == -PC_E_PROTO)
			return xfer_fail(x, ret, "malformed block from %s", x->peer);
		return xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
				 "lost data connection %u from %s", rc->idx, x->peer);
	}
	unsigned qi = x->ordered ? rc->idx : h.file_id % s->nq;
	if (queue_push(s->wq[qi], b) < 0) {
		bufpool_release(s->pool, b);
		if (r != NULL)
			sink_ent_put(r);
		return -PC_E_ABORTED;
	}
	return 0;
}

static void *sink_receiver(void *arg)
{
	struct receiver *r = arg;
	struct sink *s = r->s;
	int fd = s->x->data_fds[r->idx];

	while (!xfer_aborted(s->x) && sink_receive_one(r, fd) == 0)
		;
	if (s->x->ordered)
		queue_close(s->wq[r->idx]);
	else
		for (unsigned i = 0; i < s->nq; i++)
			queue_close(s->wq[i]);
	return NULL;
}

/* Lets go of a buffer and the reference its block held. */
static void sink_release(struct sink *s, struct buf *b)
{
	struct sink_ent *r = b->ctx != &s->meta_tag ? b->ctx : NULL;

	bufpool_release(s->pool, b);
	if (r != NULL)
		sink_ent_put(r);
}

static void sink_handle(struct sink *s, struct writer *w, struct buf *b)
{
	if (b->ctx == &s->meta_tag)
		sink_run_job(s, w, b);
	else if (b->hdr.type == PROTO_BLK_PACK)
		sink_write_pack(s, w, b);
	else
		sink_write(s, w, b);
	sink_release(s, b);
}

static void *sink_writer(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	while ((b = queue_pop(s->wq[w->idx])) != NULL) {
		if (xfer_aborted(s->x))
			sink_release(s, b);
		else
			sink_handle(s, w, b);
	}
	return NULL;
}

/* Ordered mode: block k comes from stream k % N, in sequence. */
static void *sink_writer_ordered(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	for (uint64_t k = 0; (b = queue_pop(s->wq[k % s->nq])) != NULL; k++) {
		if (b->hdr.seq != k) {
			sink_release(s, b);
			xfer_fail(s->x, -PC_E_PROTO, "%s sent block %llu out of order", s->x->peer,
				  (unsigned long long)b->hdr.seq);
			break;
		}
		sink_handle(s, w, b);
	}
	return NULL;
}

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
	switch (e->type) {
	case PROTO_ENT_DIR:
		pc_err_init(&err);
		ret = dest_mkdir(s->dest, e, &err);
		sink_outcome(s, r, ret, &err);
		pc_err_destroy(&err);
		return 0;
	case PROTO_ENT_DIR_END:
	case PROTO_ENT_HARDLINK:
		return 0; /* when everything before it is done */
	case PROTO_ENT_REG:
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
	while ((ret = proto_entries_next(m, &pos, e)) == 1) {
		if (s->t->to_stdout && (e->id > 0 || e->type != PROTO_ENT_REG))
			return xfer_fail(x, -PC_E_PROTO, "%s sent more than one file for standard "
					 "output", x->peer);
		ret = sink_add(s, e);
		if (ret < 0)
			return ret;
	}
	if (ret < 0)
		return xfer_fail(x, -PC_E_PROTO, "malformed ENTRIES from %s", x->peer);
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
		snprintf(r->fail_msg, sizeof(r->fail_msg), "%s", m->msg[0] ? m->msg
			 : pc_strerror(m->status));
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
	if (x->report)
		log_error("%s%s%s", x->peer_local ? "" : x->peer, x->peer_local ? "" : ": ",
			  k->msg[0] ? k->msg : pc_strerror(k->status));
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

/* The watermark reached r, which waited for everything before it. */
static void sink_apply(struct sink *s, struct sink_ent *r)
{
	struct pc_err e;
	int ret;

	pc_err_init(&e);
	sink_ent_entry(r, s->scratch);
	if (r->type == PROTO_ENT_DIR_END) {
		ret = dest_dir_end(s->dest, s->scratch, &e);
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
 * and acknowledges. Returns 0 or a negative code. */
static int sink_advance(struct sink *s)
{
	for (;;) {
		sync_lock(&s->lock);
		uint32_t id = s->low;
		struct sink_ent *r = id < s->announced ? s->table[id % SINK_TABLE] : NULL;
		sync_unlock(&s->lock);
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
		sync_lock(&s->lock);
		s->table[id % SINK_TABLE] = NULL;
		atomic_fetch_and(&s->done[(id % SINK_TABLE) / 64], ~(1ull << (id % 64)));
		s->low = id + 1;
		sync_unlock(&s->lock);
		sink_ent_put(r);
	}
	if (s->low != s->acked && !xfer_aborted(s->x)) {
		struct proto_msg m = { .type = PROTO_ACK };
		m.u.ack.upto = s->low;
		if (ctl_send(s->x->ctl, &m) < 0)
			return xfer_fail(s->x, -PC_E_NET, "lost control connection to %s",
					 s->x->peer);
		s->acked = s->low;
	}
	return 0;
}

static int sink_on_message(struct sink *s, struct sink_result *res)
{
	struct proto_msg m;
	int ret = ctl_recv(s->x->ctl, &m);

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
		sync_lock(&s->lock);
		s->end = true;
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

	while (!xfer_aborted(x) && !(s->end && s->low == s->announced)) {
		if (ctl_pending(x->ctl)) { /* an ENTRIES that came while we accepted */
			(void)sink_on_message(s, r);
			continue;
		}
		int n = poll(p, x->sigfd >= 0 ? 4 : 3, xfer_poll_timeout(x));
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		if (n > 0 && (p[3].revents & POLLIN)) {
			xfer_on_signal(x);
		} else if (n > 0 && (p[1].revents & POLLIN)) {
			int ret = platform_event_drain(s->efd);
			if (ret < 0)
				xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
		} else if (n > 0 && p[0].revents) {
			(void)sink_on_message(s, r);
		}
		(void)sink_advance(s);
		xfer_progress(x);
	}
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
	if (r->df != NULL)
		dest_file_abort(s->dest, r->df);
	r->df = NULL;
	sink_ent_put(r);
}

static void sink_stop(struct sink *s)
{
	struct buf *b;

	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		if (s->recv[i].started && pthread_join(s->recv[i].tid, NULL) != 0)
			log_error("cannot join receiver thread");
		if (s->recv[i].dec != NULL)
			s->codec_cpu_ns += decoder_cpu_ns(s->recv[i].dec);
		decoder_free(s->recv[i].dec);
	}
	for (unsigned i = 0; i < s->nwriters; i++)
		if (pthread_join(s->writers[i].tid, NULL) != 0)
			log_error("cannot join writer thread");
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

	xfer_stats(s->x, atomic_load(&s->nfiles), &m.u.stats);
	m.u.stats.dirs = atomic_load(&s->ndirs);
	m.u.stats.links = atomic_load(&s->nlinks);
	m.u.stats.codec_cpu_us = s->codec_cpu_ns / 1000u;
	r->self = m.u.stats;
	ret = ctl_send(s->x->ctl, &m);
	if (ret < 0)
		return pc_err_set(s->x->err, -PC_E_NET, "lost control connection to %s",
				  s->x->peer);
	return 0;
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
	mask = umask(022);
	umask(mask);
	atomic_init(&s->failed, 0);
	atomic_init(&s->nfiles, 0);
	atomic_init(&s->ndirs, 0);
	atomic_init(&s->nlinks, 0);
	if (!t->to_stdout) {
		struct dest_opts d = { .preserve = o->preserve, .numeric_ids = o->numeric_ids,
				       .strip_setid = o->strip_setid, .umask = mask };
		s->dest = dest_new(t->dirfd, t->is_dir ? NULL : t->name, &d, t->display);
		if (s->dest == NULL) {
			free(s);
			return xfer_fail(x, -ENOMEM, "out of memory");
		}
	}
	s->efd = platform_event_new();
	int rc = s->efd < 0 ? -s->efd : pthread_mutex_init(&s->lock, NULL);
	if (rc != 0) {
		ret = xfer_fail(x, -rc, "%s: %s", s->efd < 0 ? "eventfd" : "pthread_mutex_init",
				strerror(rc));
		if (s->efd >= 0)
			close(s->efd);
		dest_free(s->dest);
		free(s);
		return ret;
	}
	bool cond = pthread_cond_init(&s->cond, NULL) == 0;
	if (!cond)
		xfer_fail(x, -ENOMEM, "out of memory");
	else if (sink_start(s) == 0)
		sink_control(s, r);
	sink_stop(s);
	if (xfer_aborted(x)) {
		xfer_await_peer_error(x);
		ret = pc_err_get(x->err, NULL, 0);
	} else {
		ret = sink_finish(s, r);
	}
	r->failed = atomic_load(&s->failed) + s->skipped;
	if (cond)
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&s->cond));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&s->lock));
	close(s->efd);
	dest_free(s->dest);
	free(s);
	if (ret == 0 && r->failed > 0)
		ret = -PC_E_PARTIAL;
	return ret;
}
