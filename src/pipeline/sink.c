/* SPDX-License-Identifier: Apache-2.0 */
/* sink: receivers -> queues -> writers, driven by a control loop. */
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

#include "sys/crypto.h"
#include "pipeline/decoder.h"
#include "sys/log.h"
#include "wire/pathsafe.h"
#include "sys/platform.h"
#include "sys/sync.h"

/* Writers are sharded by file id: a file's blocks all go to one writer,
 * because writes to one inode serialise on its lock in the kernel (two
 * writers on one file only spin), while different files proceed in
 * parallel. */
#define SINK_WRITERS 2u
/* How far past the bytes already written a block may land. Blocks of one
 * file overtake each other only by what is in flight (pools and socket
 * buffers), far less than this; a peer that claims more is lying, and the
 * bound keeps the seen-bitmap proportional to the data really received. */
#define SINK_MAX_AHEAD (16ull << 30)

struct sink_file {
	uint32_t id;                   /* immutable */
	char name[NAME_MAX + 1];       /* final name in the target dir; immutable */
	char tmp[NAME_MAX + 1];        /* temporary name; immutable once created */
	char display[PROTO_MAX_PATH + 1]; /* for messages; immutable */
	int fd;                        /* owned; writers pwrite concurrently */
	uint32_t mode;                 /* immutable */
	pthread_mutex_t lock;          /* guards everything below */
	bool size_known;
	uint64_t size;
	uint64_t bytes;                /* raw bytes accounted, holes included */
	uint64_t max_end;              /* highest offset + length seen */
	uint64_t nblocks;              /* blocks accounted */
	unsigned writing;              /* blocks claimed and still being written */
	uint8_t *seen;                 /* bitmap of block indexes received */
	size_t seen_bytes;
	bool finishing;                /* claimed by whoever finishes it */
	bool failed;
	bool renamed;
	atomic_bool finished;          /* set once, after its FILE_DONE if it failed */
};

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
};

struct sink {
	struct xfer *x;
	struct sink_target *t;
	mode_t umask;                  /* immutable */
	struct bufpool *pool;
	struct queue *wq[PROTO_MAX_STREAMS]; /* one per writer, or one per stream if ordered */
	unsigned nq;
	struct receiver recv[PROTO_MAX_STREAMS];
	struct writer writers[SINK_WRITERS];
	unsigned nwriters;
	int efd;                       /* eventfd: a writer finished a file */

	pthread_mutex_t lock;          /* guards files and nfiles */
	pthread_cond_t announced;      /* a file was announced, or abort */
	struct sink_file **files;
	unsigned nfiles, cap;
	atomic_uint done;              /* files finished, well or not */
	atomic_uint failed;            /* files that failed */
	bool end;                      /* control thread: END received */
	uint32_t acked;                /* control thread: the last ACK sent (ids below are done) */
	struct proto_entry ent;        /* control thread: the entry being handled */
	unsigned skipped;              /* control thread: SKIPs received */
	uint32_t next_skip;            /* control thread: lowest index the next SKIP may have */
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
		return pc_err_set(e, -ENOTDIR, "target '%s' is not a directory", display);
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

/* ---- Files ------------------------------------------------------------ */

/* A fresh ".NAME.pcopy-XXXXXX" in f->tmp. Returns 0 or a negative code. */
static int sink_tmp_name(struct sink_file *f)
{
	static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
	uint8_t rnd[6];
	char sfx[7];
	int ret = crypto_random(rnd, sizeof(rnd));

	if (ret < 0)
		return ret;
	for (int i = 0; i < 6; i++)
		sfx[i] = digits[rnd[i] % 36];
	sfx[6] = '\0';
	snprintf(f->tmp, sizeof(f->tmp), ".%.200s.pcopy-%s", f->name, sfx);
	return 0;
}

/* Opens the file being received. Where the file system can, it is an
 * unnamed O_TMPFILE inode: if we die, even by SIGKILL, the kernel frees it
 * and nothing is left behind; it gets a name only when complete and
 * verified (sink_link_tmp). Elsewhere (NFS) it is ".NAME.pcopy-XXXXXX"
 * next to the final name, removed on any failure we live through. */
static int sink_create_tmp(struct sink *s, struct sink_file *f)
{
	f->fd = openat(s->t->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (f->fd >= 0) {
		f->tmp[0] = '\0';
		return 0;
	}
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	for (int attempt = 0; attempt < 100; attempt++) {
		int ret = sink_tmp_name(f);
		if (ret < 0)
			return ret;
		f->fd = openat(s->t->dirfd, f->tmp,
			       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (f->fd >= 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* Gives an unnamed (O_TMPFILE) file its temporary name, so that it can be
 * renamed over the final name atomically. Returns 0 or -errno. */
static int sink_link_tmp(struct sink *s, struct sink_file *f)
{
	char proc[64];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
	for (int attempt = 0; attempt < 100; attempt++) {
		int ret = sink_tmp_name(f);
		if (ret < 0)
			return ret;
		/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc does not. */
		if (linkat(f->fd, "", s->t->dirfd, f->tmp, AT_EMPTY_PATH) == 0 ||
		    (errno != EEXIST &&
		     linkat(AT_FDCWD, proc, s->t->dirfd, f->tmp, AT_SYMLINK_FOLLOW) == 0))
			return 0;
		f->tmp[0] = '\0';
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static void sink_file_free(struct sink *s, struct sink_file *f)
{
	if (f->fd >= 0 && f->fd != STDOUT_FILENO)
		close(f->fd);
	if (f->tmp[0] != '\0' && !f->renamed && s->t->dirfd >= 0)
		(void)unlinkat(s->t->dirfd, f->tmp, 0);
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&f->lock));
	free(f->seen);
	free(f);
}

static void sink_notify(struct sink *s)
{
	int ret = platform_event_signal(s->efd);

	if (ret < 0)
		xfer_fail(s->x, ret, "eventfd: %s", strerror(-ret));
}

/* Reports a failed file (status < 0): success is reported by ACK alone. */
static void sink_send_done(struct sink *s, struct sink_file *f, int status, const char *msg)
{
	struct proto_msg m = { .type = PROTO_FILE_DONE };

	m.u.file_done.id = f->id;
	m.u.file_done.status = status;
	m.u.file_done.bytes = f->bytes;
	snprintf(m.u.file_done.msg, sizeof(m.u.file_done.msg), "%s", msg);
	if (ctl_send(s->x->ctl, &m) < 0)
		xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
}

/* The file could not be written: drop it, tell the source, carry on. */
static void sink_file_fail(struct sink *s, struct sink_file *f, int code, const char *what)
{
	char msg[PROTO_MAX_MSG + 1];

	snprintf(msg, sizeof(msg), "%s '%.*s': %s", what, 900, f->display, pc_strerror(code));
	sync_lock(&f->lock);
	f->failed = true;
	sync_unlock(&f->lock);
	if (f->fd >= 0 && f->fd != STDOUT_FILENO)
		close(f->fd);
	f->fd = -1;
	if (f->tmp[0] != '\0')
		(void)unlinkat(s->t->dirfd, f->tmp, 0);
	f->tmp[0] = '\0';
	if (s->x->report)
		log_error("%s", msg);
	atomic_fetch_add(&s->failed, 1);
	sink_send_done(s, f, code, msg);
	atomic_store(&f->finished, true); /* after its FILE_DONE: the ACK comes later */
	atomic_fetch_add(&s->done, 1);
	sink_notify(s);
}

/* Every block arrived: set the size and mode, rename into place. Called
 * once per file (the caller won f->finishing). */
static void sink_file_finish(struct sink *s, struct sink_file *f)
{
	int ret = 0;

	if (!s->t->to_stdout) {
		if (ftruncate(f->fd, (off_t)f->size) != 0 ||
		    fchmod(f->fd, (f->mode & 0777) & ~s->umask) != 0)
			ret = -errno;
		if (ret == 0 && f->tmp[0] == '\0')
			ret = sink_link_tmp(s, f);
		if (close(f->fd) != 0 && ret == 0)
			ret = -errno;
		f->fd = -1;
		if (ret == 0 && renameat(s->t->dirfd, f->tmp, s->t->dirfd, f->name) != 0)
			ret = -errno;
		if (ret < 0) {
			sink_file_fail(s, f, ret, "cannot finish");
			return;
		}
		f->renamed = true;
	}
	atomic_store(&f->finished, true);
	atomic_fetch_add(&s->done, 1);
	sink_notify(s);
}

/* True once bytes, coverage and size agree (f->lock held). */
static bool sink_complete_locked(const struct sink *s, const struct sink_file *f)
{
	uint64_t B = s->x->block_size;

	return f->size_known && f->bytes == f->size && f->max_end == f->size &&
	       f->nblocks == (f->size + B - 1) / B;
}

/* Before writing: checks a block against its file and marks its index as
 * seen, so a duplicate can never be written. Returns 1 to write it, 0 to
 * drop it (the file already failed), or a negative code for a block that
 * cannot be right. */
static int sink_claim(struct sink *s, struct sink_file *f, const struct proto_block *h)
{
	uint64_t B = s->x->block_size, idx = h->offset / B;
	int ret = 1;

	sync_lock(&f->lock);
	if (f->failed || f->finishing) {
		ret = f->failed ? 0 : -PC_E_INTEGRITY;
		goto out;
	}
	if (h->offset % B != 0 || h->raw_len == 0 || h->offset > f->bytes + SINK_MAX_AHEAD ||
	    (f->size_known && (h->offset + h->raw_len > f->size ||
			       (h->raw_len != B && h->offset + h->raw_len != f->size)))) {
		ret = -PC_E_PROTO;
		goto out;
	}
	if (idx / 8 >= f->seen_bytes) {
		size_t n = (size_t)(idx / 8 + 1) * 2;
		uint8_t *p = realloc(f->seen, n);
		if (p == NULL) {
			ret = -ENOMEM;
			goto out;
		}
		memset(p + f->seen_bytes, 0, n - f->seen_bytes);
		f->seen = p;
		f->seen_bytes = n;
	}
	if (f->seen[idx / 8] & (1u << (idx % 8))) {
		ret = -PC_E_INTEGRITY;
		goto out;
	}
	f->seen[idx / 8] |= (uint8_t)(1u << (idx % 8));
	f->writing++;
out:
	sync_unlock(&f->lock);
	return ret;
}

/* After writing a claimed block: counts it. Returns true if the file is
 * now complete and the caller must finish it. */
static bool sink_settle(struct sink *s, struct sink_file *f, const struct proto_block *h)
{
	bool finish = false;

	sync_lock(&f->lock);
	f->writing--;
	f->bytes += h->raw_len;
	f->nblocks++;
	if (h->offset + h->raw_len > f->max_end)
		f->max_end = h->offset + h->raw_len;
	if (!f->finishing && !f->failed && f->writing == 0 && sink_complete_locked(s, f)) {
		f->finishing = true;
		finish = true;
	}
	sync_unlock(&f->lock);
	return finish;
}

/* ---- Threads ---------------------------------------------------------- */

static void sink_wake(void *arg)
{
	struct sink *s = arg;

	sync_lock(&s->lock);
	sync_broadcast(&s->announced);
	sync_unlock(&s->lock);
}

/* The file with this id, waiting for its FILE message if the block
 * overtook it. NULL on abort. */
static struct sink_file *sink_lookup(struct sink *s, uint32_t id)
{
	struct sink_file *f = NULL;

	sync_lock(&s->lock);
	while (id >= s->nfiles && !xfer_aborted(s->x))
		sync_wait(&s->announced, &s->lock);
	if (id < s->nfiles)
		f = s->files[id];
	sync_unlock(&s->lock);
	return f;
}

static int sink_read_block(struct receiver *r, int fd, struct buf *b)
{
	const struct proto_block *h = &b->hdr;
	int ret;

	if (!(h->flags & PROTO_BLK_HOLE)) {
		ret = platform_read_full(fd, b->data, h->enc_len, NULL);
		if (ret < 0)
			return ret;
		atomic_fetch_add(&r->s->x->wire_bytes, h->enc_len);
	}
	return decoder_verify(r->dec, b);
}

static int sink_receive_one(struct receiver *r, int fd)
{
	struct sink *s = r->s;
	struct xfer *x = s->x;
	uint8_t raw[PROTO_BLOCK_HDR_LEN];
	struct proto_block h;
	struct sink_file *f;
	struct buf *b;
	int ret;

	ret = platform_read_full(fd, raw, sizeof(raw), NULL);
	if (ret < 0)
		return xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
				 "lost data connection %u from %s: %s", r->idx, x->peer,
				 ret == -PC_E_NET ? "connection closed" : pc_strerror(ret));
	atomic_fetch_add(&x->wire_bytes, sizeof(raw));
	if (proto_block_decode(raw, x->block_size, &h) < 0)
		return xfer_fail(x, -PC_E_PROTO, "malformed block header from %s", x->peer);
	if (h.type == PROTO_BLK_END)
		return 1;
	if (h.type != PROTO_BLK_DATA) /* PACK: read as DATA, its id count would be an offset */
		return xfer_fail(x, -PC_E_PROTO, "%s sent a PACK block: not supported yet",
				 x->peer);
	f = sink_lookup(s, h.file_id);
	b = f ? bufpool_acquire(s->pool) : NULL;
	if (b == NULL)
		return -PC_E_ABORTED;
	b->hdr = h;
	b->ctx = f;
	ret = sink_read_block(r, fd, b);
	if (ret < 0) {
		bufpool_release(s->pool, b);
		if (ret == -PC_E_INTEGRITY)
			return xfer_fail(x, ret, "block at offset %llu of '%s' failed its checksum "
					 "or did not decode: data corrupted in transit from %s",
					 (unsigned long long)h.offset, f->display, x->peer);
		if (ret == -PC_E_PROTO)
			return xfer_fail(x, ret, "malformed block from %s", x->peer);
		return xfer_fail(x, ret == -PC_E_TIMEOUT ? ret : -PC_E_NET,
				 "lost data connection %u from %s", r->idx, x->peer);
	}
	if (queue_push(s->wq[x->ordered ? r->idx : f->id % s->nq], b) < 0) {
		bufpool_release(s->pool, b);
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

static int sink_write_data(struct sink *s, struct sink_file *f, const struct buf *b)
{
	const struct proto_block *h = &b->hdr;
	bool hole = h->flags & PROTO_BLK_HOLE;
	int ret = 0;

	if (s->t->to_stdout) {
		static const uint8_t zeros[65536];
		if (!hole) {
			ret = platform_write_full(f->fd, b->data, b->len);
			/* A reader that went away (| head) is our output failing. */
			return ret == -EPIPE ? -PC_E_FILEIO : ret;
		}
		for (size_t off = 0; ret == 0 && off < b->len; off += sizeof(zeros))
			ret = platform_write_full(f->fd, zeros, b->len - off < sizeof(zeros)
								? b->len - off : sizeof(zeros));
		return ret;
	}
	for (size_t off = 0; !hole && off < b->len;) {
		ssize_t w = pwrite(f->fd, b->data + off, b->len - off, (off_t)(h->offset + off));
		if (w < 0 && errno != EINTR)
			return -errno;
		if (w > 0)
			off += (size_t)w;
	}
	return 0;
}

/* Writes one verified block and finishes its file if it was the last. */
static void sink_write(struct sink *s, struct buf *b)
{
	struct sink_file *f = b->ctx;
	const struct proto_block *h = &b->hdr;
	int ret = sink_claim(s, f, h);

	if (ret == 0)
		return;
	if (ret < 0) {
		xfer_fail(s->x, ret, "%s sent a %s block for '%s' at offset %llu", s->x->peer,
			  ret == -PC_E_INTEGRITY ? "duplicate" : "misplaced", f->display,
			  (unsigned long long)h->offset);
		return;
	}
	ret = sink_write_data(s, f, b);
	if (ret < 0) {
		xfer_fail(s->x, ret, "writing '%s': %s", f->display, pc_strerror(ret));
		return;
	}
	atomic_fetch_add(&s->x->bytes, h->raw_len);
	if (sink_settle(s, f, h))
		sink_file_finish(s, f);
}

static void *sink_writer(void *arg)
{
	struct writer *w = arg;
	struct sink *s = w->s;
	struct buf *b;

	while ((b = queue_pop(s->wq[w->idx])) != NULL) {
		sink_write(s, b);
		bufpool_release(s->pool, b);
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
			bufpool_release(s->pool, b);
			xfer_fail(s->x, -PC_E_PROTO, "%s sent block %llu out of order", s->x->peer,
				  (unsigned long long)b->hdr.seq);
			break;
		}
		sink_write(s, b);
		bufpool_release(s->pool, b);
	}
	return NULL;
}

/* ---- Control loop ----------------------------------------------------- */

/* Sends ACK once the lowest unfinished id has moved up. Control thread. */
static void sink_ack(struct sink *s)
{
	struct proto_msg m = { .type = PROTO_ACK };
	uint32_t upto = s->acked;

	while (upto < s->nfiles && atomic_load(&s->files[upto]->finished))
		upto++;
	if (upto == s->acked || xfer_aborted(s->x))
		return;
	m.u.ack.upto = upto;
	if (ctl_send(s->x->ctl, &m) < 0) {
		xfer_fail(s->x, -PC_E_NET, "lost control connection to %s", s->x->peer);
		return;
	}
	s->acked = upto;
}

/* One regular file with a one-component name: all this sink takes yet. */
static int sink_on_file(struct sink *s, const struct proto_entry *m)
{
	struct xfer *x = s->x;
	struct sink_file *f;
	const char *name;
	int ret;

	if (m->type != PROTO_ENT_REG || strchr(m->path, '/') != NULL)
		return xfer_fail(x, -PC_E_PROTO, "%s sent a tree entry (type %u, '%.200s'): "
				 "not supported yet", x->peer, (unsigned)m->type, m->path);
	if (pathsafe_check_name(m->path) < 0)
		return xfer_fail(x, -PC_E_PROTO, "%s sent an unsafe file name", x->peer);
	if (!s->t->is_dir && s->nfiles > 0)
		return xfer_fail(x, -PC_E_PROTO, "%s sent more files than announced", x->peer);
	name = s->t->is_dir ? m->path : s->t->name;
	f = calloc(1, sizeof(*f));
	if (f == NULL || pthread_mutex_init(&f->lock, NULL) != 0) {
		free(f);
		return xfer_fail(x, -ENOMEM, "out of memory");
	}
	f->id = m->id;
	f->fd = -1;
	f->mode = m->mode;
	f->size_known = !(m->flags & PROTO_ENT_SIZE_UNKNOWN);
	atomic_init(&f->finished, false);
	f->size = m->size;
	snprintf(f->name, sizeof(f->name), "%.*s", NAME_MAX, name);
	if (s->t->to_stdout)
		snprintf(f->display, sizeof(f->display), "standard output");
	else if (s->t->is_dir)
		snprintf(f->display, sizeof(f->display), "%.*s%s%s", 3800, s->t->display,
			 s->t->display[strlen(s->t->display) - 1] == '/' ? "" : "/", f->name);
	else
		snprintf(f->display, sizeof(f->display), "%s", s->t->display);

	ret = s->t->to_stdout ? 0 : sink_create_tmp(s, f);
	if (s->t->to_stdout)
		f->fd = STDOUT_FILENO;
	atomic_fetch_add(&x->total, f->size);
	sync_lock(&s->lock);
	if (s->nfiles == s->cap) {
		unsigned cap = s->cap ? s->cap * 2 : 64;
		struct sink_file **p = realloc(s->files, cap * sizeof(*p));
		if (p == NULL) {
			sync_unlock(&s->lock);
			sink_file_free(s, f);
			return xfer_fail(x, -ENOMEM, "out of memory");
		}
		s->files = p;
		s->cap = cap;
	}
	s->files[s->nfiles++] = f;
	sync_broadcast(&s->announced);
	sync_unlock(&s->lock);
	if (ret < 0) {
		sink_file_fail(s, f, ret, "cannot create");
	} else if (f->size_known && f->size == 0) {
		sync_lock(&f->lock);
		f->finishing = true;
		sync_unlock(&f->lock);
		sink_file_finish(s, f);
	}
	return 0;
}

/* A batch of entries: ids must follow on, and the batch must not leave more
 * than PROTO_MAX_INFLIGHT entries announced and not acknowledged. */
static int sink_on_entries(struct sink *s, const struct proto_entries *es)
{
	struct xfer *x = s->x;
	size_t pos = 0;
	int ret;

	if (es->first_id != s->nfiles)
		return xfer_fail(x, -PC_E_PROTO, "%s announced entry id %u out of order (%u expected)",
				 x->peer, (unsigned)es->first_id, s->nfiles);
	if ((uint64_t)s->nfiles + es->count - s->acked > PROTO_MAX_INFLIGHT)
		return xfer_fail(x, -PC_E_PROTO, "%s announced more than %u entries ahead of the "
				 "last ACK", x->peer, PROTO_MAX_INFLIGHT);
	while ((ret = proto_entries_next(es, &pos, &s->ent)) == 1)
		if (sink_on_file(s, &s->ent) < 0)
			return -PC_E_PROTO;
	if (ret < 0)
		return xfer_fail(x, ret, "%s sent a malformed ENTRIES", x->peer);
	return 0;
}

static int sink_on_file_end(struct sink *s, const struct proto_file_end *m)
{
	struct sink_file *f;
	bool finish = false;

	if (m->id >= s->nfiles)
		return xfer_fail(s->x, -PC_E_PROTO, "%s ended an unknown file", s->x->peer);
	f = s->files[m->id];
	sync_lock(&f->lock);
	if (f->size_known) {
		sync_unlock(&f->lock);
		return xfer_fail(s->x, -PC_E_PROTO, "%s ended a file of known size", s->x->peer);
	}
	f->size_known = true;
	f->size = m->size;
	if (!f->failed && !f->finishing && f->writing == 0 && sink_complete_locked(s, f)) {
		f->finishing = true;
		finish = true;
	}
	sync_unlock(&f->lock);
	atomic_fetch_add(&s->x->total, m->size);
	if (finish)
		sink_file_finish(s, f);
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

static int sink_on_message(struct sink *s, struct sink_result *r)
{
	struct proto_msg m;
	int ret = ctl_recv(s->x->ctl, &m);

	if (ret < 0)
		return xfer_fail(s->x, ret == -PC_E_PROTO ? ret : -PC_E_NET,
				 "lost control connection to %s: %s", s->x->peer, pc_strerror(ret));
	switch (m.type) {
	case PROTO_ENTRIES:
		return s->end ? xfer_fail(s->x, -PC_E_PROTO, "%s sent ENTRIES after END", s->x->peer)
			      : sink_on_entries(s, &m.u.entries);
	case PROTO_FILE_END:
		return sink_on_file_end(s, &m.u.file_end);
	case PROTO_FILE_FAIL:
		return xfer_fail(s->x, -PC_E_PROTO, "%s sent FILE_FAIL: not supported yet",
				 s->x->peer);
	case PROTO_SKIP:
		return sink_on_skip(s, &m.u.skip);
	case PROTO_END:
		s->end = true;
		r->peer = m.u.stats;
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
	/* abort_efd: a receiver or writer failed; the loop must not wait for
	 * the peer to answer our ERROR before it notices. */
	struct pollfd p[4] = { { .fd = ctl_rfd(x->ctl), .events = POLLIN },
			       { .fd = s->efd, .events = POLLIN },
			       { .fd = x->abort_efd, .events = POLLIN },
			       { .fd = x->sigfd, .events = POLLIN } };

	while (!xfer_aborted(x) && !(s->end && atomic_load(&s->done) == s->nfiles)) {
		if (ctl_pending(x->ctl)) { /* an ENTRIES that came while we accepted */
			(void)sink_on_message(s, r);
			sink_ack(s);
			continue;
		}
		int n = poll(p, x->sigfd >= 0 ? 4 : 3, xfer_poll_timeout(x));
		if (n < 0 && errno != EINTR) {
			xfer_fail(x, -errno, "poll: %s", strerror(errno));
			return;
		}
		if (n > 0 && (p[2].revents & POLLIN))
			continue; /* aborted: the loop condition ends it */
		if (n > 0 && (p[3].revents & POLLIN)) {
			xfer_on_signal(x);
		} else if (n > 0 && (p[1].revents & POLLIN)) {
			int ret = platform_event_drain(s->efd);
			if (ret < 0)
				xfer_fail(x, ret, "eventfd: %s", strerror(-ret));
		} else if (n > 0 && p[0].revents) {
			(void)sink_on_message(s, r);
		}
		sink_ack(s);
		xfer_progress(x);
	}
	sink_ack(s); /* every file finished: this ACK covers them all, before DONE */
}

static int sink_start(struct sink *s)
{
	struct xfer *x = s->x;
	unsigned count = x->streams * 3 + SINK_WRITERS + 2;
	unsigned nwriters = x->ordered ? 1 : SINK_WRITERS;
	int rc;

	s->nq = x->ordered ? x->streams : nwriters;
	s->pool = bufpool_new(count, x->block_size);
	if (s->pool == NULL || xfer_watch_pool(x, s->pool) < 0 ||
	    xfer_on_abort(x, sink_wake, s) < 0)
		return xfer_fail(x, -ENOMEM, "out of memory for %u buffers of %u bytes", count,
				 (unsigned)x->block_size);
	for (unsigned i = 0; i < s->nq; i++) {
		/* Ordered: each stream's queue holds at most 2, so the pool
		 * (3 per stream) always has a buffer for the stream the
		 * writer waits on. */
		s->wq[i] = queue_new(x->ordered ? 2 : count, x->ordered ? 1 : x->streams);
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
		s->writers[i] = (struct writer){ .s = s, .idx = i };
		rc = pthread_create(&s->writers[i].tid, NULL,
				    x->ordered ? sink_writer_ordered : sink_writer, &s->writers[i]);
		if (rc != 0)
			return xfer_fail(x, -rc, "cannot start writer thread: %s", strerror(rc));
		s->nwriters++;
	}
	return 0;
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
	for (unsigned i = 0; i < s->nq; i++) {
		while (s->wq[i] != NULL && (b = queue_trypop(s->wq[i])) != NULL)
			bufpool_release(s->pool, b);
		queue_free(s->wq[i]);
	}
	bufpool_free(s->pool);
	for (unsigned i = 0; i < s->nfiles; i++)
		sink_file_free(s, s->files[i]);
	free(s->files);
}

static int sink_finish(struct sink *s, struct sink_result *r)
{
	struct proto_msg m = { .type = PROTO_DONE };
	int ret;

	xfer_stats(s->x, s->nfiles - atomic_load(&s->failed), &m.u.stats);
	m.u.stats.codec_cpu_us = s->codec_cpu_ns / 1000u;
	r->self = m.u.stats;
	ret = ctl_send(s->x->ctl, &m);
	if (ret < 0)
		return pc_err_set(s->x->err, -PC_E_NET, "lost control connection to %s",
				  s->x->peer);
	return 0;
}

int sink_run(struct xfer *x, struct sink_target *t, struct sink_result *r)
{
	struct sink *s = calloc(1, sizeof(*s));
	int ret;

	memset(r, 0, sizeof(*r));
	if (s == NULL)
		return xfer_fail(x, -ENOMEM, "out of memory");
	s->x = x;
	s->t = t;
	s->umask = umask(022);
	umask(s->umask);
	atomic_init(&s->done, 0);
	atomic_init(&s->failed, 0);
	s->efd = platform_event_new();
	int rc = s->efd < 0 ? -s->efd : pthread_mutex_init(&s->lock, NULL);
	if (rc != 0) {
		ret = xfer_fail(x, -rc, "%s: %s", s->efd < 0 ? "eventfd" : "pthread_mutex_init",
				strerror(rc));
		if (s->efd >= 0)
			close(s->efd);
		free(s);
		return ret;
	}
	bool cond = pthread_cond_init(&s->announced, NULL) == 0;
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
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&s->announced));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&s->lock));
	close(s->efd);
	free(s);
	if (ret == 0 && r->failed > 0)
		ret = -PC_E_PARTIAL;
	return ret;
}
