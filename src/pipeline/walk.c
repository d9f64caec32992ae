// SPDX-License-Identifier: Apache-2.0
/* walk: the streaming tree walker (see walk.h for the order, the skips and
 * the memory bound). */
#include "pipeline/walk.h"
#include "pipeline/filter.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/journal.h"
#include "sys/fault.h"
#include "wire/pathsafe.h"

#define WALK_NAME_SLOTS 64u          /* slots in each of the user and group caches */
#define WALK_PWBUF_MIN 4096u         /* getpwuid_r/getgrgid_r buffer, first size */
#define WALK_PWBUF_MAX (1u << 20)    /* ... and the most it grows to on ERANGE */
#define WALK_MSG_PATH 700u           /* longest path put in a message (its tail) */
#define WALK_FRAMES_MIN 16u
#define WALK_LINKS_MIN 64u

/* One directory of the current path. */
struct walk_frame {
	DIR *dir;        /* owned; NULL once closed (read to the end, or failed) */
	dev_t dev;       /* its identity, for the loop check */
	ino_t ino;
	size_t path_len; /* strlen of its wire path (w->path while it is the top) */
	struct stat st;  /* its attributes when opened, for its DIR_END */
	bool incomplete; /* something in it was skipped: its DIR_END says so */
};

/* A directory fd given out as walk_item.base_fd; owned, closed by walk_free. */
struct walk_base {
	int fd;
	dev_t dev;
	ino_t ino;
};

/* -H map entry: a regular file with more links than seen so far. */
struct walk_link {
	dev_t dev;
	ino_t ino;
	uint32_t id;   /* the id of its REG entry (flags LINKED) */
	nlink_t left;  /* links not yet seen; the entry goes when it reaches 0 */
	bool used;
};

/* One slot of a uid or gid -> name cache (direct-mapped by id). */
struct walk_name {
	bool valid;
	uint32_t id;
	char name[PROTO_MAX_NAME + 1]; /* empty: unknown */
};

struct walk {
	struct walk_opts o;
	int dirfd;                     /* borrowed: what paths are relative to */
	bool beneath;                  /* pathsafe rules for paths (a daemon's root) */
	const char *const *paths;      /* borrowed */
	unsigned npaths;
	unsigned next_src;             /* the next top-level source to start */
	uint32_t src;                  /* the source being walked */
	uint32_t next_id;              /* the id of the next item */
	int fatal;                     /* < 0 once walk_next failed fatally */

	/* The source being walked. */
	char arg[PROTO_MAX_PATH + 1];  /* its argument without trailing '/' (for display) */
	int base_fd;                   /* borrowed from bases[] or dirfd: items' base_fd */
	char prefix[PROTO_MAX_PATH + 1]; /* path from base_fd to the source ("" = itself) */
	char rel[PROTO_MAX_PATH + 1];  /* beneath: path from dirfd to the source ("" = it) */
	size_t top_len;                /* length of its wire name, path's first component */
	char path[PROTO_MAX_PATH + 1]; /* wire path of the top frame's directory */

	struct walk_frame *frames;     /* the current path, frames[0] = the source */
	unsigned depth, frames_cap;
	struct walk_base *bases;
	unsigned nbases, bases_cap;
	struct walk_link *links;       /* -H map, open addressing; links_cap a power of 2 */
	size_t nlinks, links_cap;
	char *pwbuf;                   /* for getpwuid_r/getgrgid_r */
	size_t pwbuf_cap;
	struct walk_name users[WALK_NAME_SLOTS];
	struct walk_name groups[WALK_NAME_SLOTS];

	char cut[2][WALK_MSG_PATH + 4]; /* walk_cut's results */
	unsigned open_dirs, max_open_dirs; /* accounting (walk_stats) */
	size_t heap, max_heap;
};

/* ---- accounting allocator ------------------------------------------------ */

static void walk_heap_note(struct walk *w, size_t freed, size_t got)
{
	w->heap = w->heap - freed + got;
	if (w->heap > w->max_heap)
		w->max_heap = w->heap;
}

/* Resizes *p from old_n to new_n elements of size each. Returns 0 or
 * -ENOMEM (*p untouched then). */
static int walk_resize(struct walk *w, void **p, size_t old_n, size_t new_n, size_t size)
{
	void *q = realloc(*p, new_n * size);

	if (q == NULL)
		return -ENOMEM;
	*p = q;
	walk_heap_note(w, old_n * size, new_n * size);
	return 0;
}

/* ---- messages ------------------------------------------------------------ */

/* s, or "..." and its last WALK_MSG_PATH bytes, so that the reason after
 * it still fits a message. The result lives in w->cut[k] when cut. */
static const char *walk_cut(struct walk *w, unsigned k, const char *s)
{
	size_t len = strlen(s);

	if (len <= WALK_MSG_PATH)
		return s;
	snprintf(w->cut[k], sizeof(w->cut[k]), "...%s", s + len - WALK_MSG_PATH);
	return w->cut[k];
}

/* Fills *sk for the current source. Returns 2, walk_next's "skip". */
static int walk_skip_vset(struct walk *w, struct walk_skip *sk, int code, const char *fmt,
			  va_list ap) __attribute__((format(printf, 4, 0)));
static int walk_skip_vset(struct walk *w, struct walk_skip *sk, int code, const char *fmt,
			  va_list ap)
{
	sk->src_index = w->src;
	sk->code = code;
	vsnprintf(sk->msg, sizeof(sk->msg), fmt, ap);
	return 2;
}

/* A skip for an error (what could not be read): the directory being read
 * loses its completeness, since what is skipped in it is not announced
 * and --delete must not take that for gone. */
static int walk_skip_set(struct walk *w, struct walk_skip *sk, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int walk_skip_set(struct walk *w, struct walk_skip *sk, int code, const char *fmt, ...)
{
	va_list ap;

	if (w->depth > 0)
		w->frames[w->depth - 1].incomplete = true;
	va_start(ap, fmt);
	walk_skip_vset(w, sk, code, fmt, ap);
	va_end(ap);
	return 2;
}

/* A skip by the rules (a special file without -p, a directory without -r,
 * a name -a keeps): the source has nothing to send there, as it would
 * have nothing for an excluded name. */
static int walk_skip_rule(struct walk *w, struct walk_skip *sk, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int walk_skip_rule(struct walk *w, struct walk_skip *sk, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	walk_skip_vset(w, sk, code, fmt, ap);
	va_end(ap);
	return 2;
}

/* "cannot <what> '<path>': <strerror(code)>" as a skip. */
static int walk_skip_err(struct walk *w, struct walk_skip *sk, int code, const char *what,
			 const char *path)
{
	return walk_skip_set(w, sk, code, "cannot %s '%s': %s", what, walk_cut(w, 0, path),
			     pc_strerror(code));
}

/* -a: name has the form of the sink's partial files (walk_opts.partials):
 * a skip, filled in *sk (2); else 0. */
static int walk_partial_name(struct walk *w, struct walk_skip *sk, const char *name,
			     const char *display)
{
	if (!w->o.partials || !journal_name_reserved(name))
		return 0;
	return walk_skip_rule(w, sk, -EINVAL, "'%s': not copied with -a, which keeps partial "
			     "files and their journals under names of this form "
			     "(.NAME.pcopy-part, .NAME.pcopy-jrnl)", walk_cut(w, 0, display));
}

/* ---- names ----------------------------------------------------------------- */

/* Looks up id's user (group false) or group name into name (empty when the
 * name service does not know it or fails: the sink then uses the number,
 * rsync's rule). Returns 0 or -ENOMEM. */
static int walk_name_resolve(struct walk *w, bool group, uint32_t id, char *name)
{
	for (;;) {
		const char *found = NULL;
		int rc;

		if (w->pwbuf == NULL) {
			int ret = walk_resize(w, (void **)&w->pwbuf, 0, WALK_PWBUF_MIN, 1);
			if (ret < 0)
				return ret;
			w->pwbuf_cap = WALK_PWBUF_MIN;
		}
		if (group) {
			struct group g, *r = NULL;
			rc = getgrgid_r((gid_t)id, &g, w->pwbuf, w->pwbuf_cap, &r);
			if (rc == 0 && r != NULL)
				found = r->gr_name;
		} else {
			struct passwd pw, *r = NULL;
			rc = getpwuid_r((uid_t)id, &pw, w->pwbuf, w->pwbuf_cap, &r);
			if (rc == 0 && r != NULL)
				found = r->pw_name;
		}
		if (rc == ERANGE && w->pwbuf_cap < WALK_PWBUF_MAX) {
			int ret = walk_resize(w, (void **)&w->pwbuf, w->pwbuf_cap,
					      w->pwbuf_cap * 2, 1);
			if (ret < 0)
				return ret;
			w->pwbuf_cap *= 2;
			continue;
		}
		/* A name too long for the wire is as good as unknown: cutting it
		 * could name someone else. */
		name[0] = '\0';
		if (found != NULL && strlen(found) <= PROTO_MAX_NAME)
			strcpy(name, found);
		return 0;
	}
}

/* id's name from the cache (filled on a miss) into out. Returns 0 or
 * -ENOMEM. */
static int walk_name(struct walk *w, bool group, uint32_t id, char *out)
{
	struct walk_name *slot = &(group ? w->groups : w->users)[id % WALK_NAME_SLOTS];

	if (!slot->valid || slot->id != id) {
		int ret = walk_name_resolve(w, group, id, slot->name);
		if (ret < 0)
			return ret;
		slot->valid = true;
		slot->id = id;
	}
	strcpy(out, slot->name);
	return 0;
}

/* ---- the -H map -------------------------------------------------------------- */

static size_t walk_link_slot(dev_t dev, ino_t ino, size_t cap)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev * 0xc2b2ae3d27d4eb4full;

	return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static struct walk_link *walk_link_find(struct walk *w, dev_t dev, ino_t ino)
{
	if (w->links_cap == 0)
		return NULL;
	for (size_t i = walk_link_slot(dev, ino, w->links_cap);; i = (i + 1) & (w->links_cap - 1)) {
		struct walk_link *l = &w->links[i];
		if (!l->used)
			return NULL;
		if (l->dev == dev && l->ino == ino)
			return l;
	}
}

static void walk_link_put(struct walk_link *tab, size_t cap, const struct walk_link *l)
{
	size_t i = walk_link_slot(l->dev, l->ino, cap);

	while (tab[i].used)
		i = (i + 1) & (cap - 1);
	tab[i] = *l;
}

/* Adds (dev, ino) -> id with left links to come. Returns 0 or -ENOMEM. */
static int walk_link_add(struct walk *w, dev_t dev, ino_t ino, uint32_t id, nlink_t left)
{
	struct walk_link l = { .dev = dev, .ino = ino, .id = id, .left = left, .used = true };

	if ((w->nlinks + 1) * 2 > w->links_cap) {
		size_t cap = w->links_cap == 0 ? WALK_LINKS_MIN : w->links_cap * 2;
		struct walk_link *tab = calloc(cap, sizeof(*tab));
		if (tab == NULL)
			return -ENOMEM;
		walk_heap_note(w, 0, cap * sizeof(*tab));
		for (size_t i = 0; i < w->links_cap; i++)
			if (w->links[i].used)
				walk_link_put(tab, cap, &w->links[i]);
		free(w->links);
		walk_heap_note(w, w->links_cap * sizeof(*tab), 0);
		w->links = tab;
		w->links_cap = cap;
	}
	walk_link_put(w->links, w->links_cap, &l);
	w->nlinks++;
	return 0;
}

/* Removes l from the map, moving later entries of its probe run back so
 * that every lookup still finds them (linear probing, no tombstones). */
static void walk_link_del(struct walk *w, struct walk_link *l)
{
	size_t mask = w->links_cap - 1, i = (size_t)(l - w->links), j = i;

	for (;;) {
		j = (j + 1) & mask;
		if (!w->links[j].used)
			break;
		size_t k = walk_link_slot(w->links[j].dev, w->links[j].ino, w->links_cap);
		/* The entry at j may stay if its home k lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		w->links[i] = w->links[j];
		i = j;
	}
	w->links[i].used = false;
	w->nlinks--;
}

/* ---- items --------------------------------------------------------------------- */

/* Fills the attributes of it->e (its path is set already) from st. Returns
 * 0 or -ENOMEM. */
static int walk_fill(struct walk *w, struct walk_item *it, uint8_t type, const struct stat *st)
{
	struct proto_entry *pe = &it->e;
	int ret;

	memset(pe, 0, offsetof(struct proto_entry, path));
	pe->target[0] = '\0';
	it->open_path[0] = '\0';
	it->base_fd = -1;
	it->sparse = false;
	it->src_index = w->src;
	pe->type = type;
	pe->mode = (uint32_t)st->st_mode & 07777u;
	pe->uid = (uint32_t)st->st_uid;
	pe->gid = (uint32_t)st->st_gid;
	pe->mtime_s = (int64_t)st->st_mtim.tv_sec;
	pe->mtime_ns = (uint32_t)st->st_mtim.tv_nsec;
	pe->atime_s = (int64_t)st->st_atim.tv_sec;
	pe->atime_ns = (uint32_t)st->st_atim.tv_nsec;
	ret = walk_name(w, false, pe->uid, pe->user);
	if (ret == 0)
		ret = walk_name(w, true, pe->gid, pe->group);
	return ret;
}

/* Gives it the next id. Returns 1, walk_next's "item". */
static int walk_yield(struct walk *w, struct walk_item *it)
{
	it->id = w->next_id++;
	it->e.id = it->id;
	return 1;
}

/* out (PROTO_MAX_PATH + 1 bytes) = a, then b's first blen bytes, then "/"
 * and c if c is not NULL; cut short when longer (it is for messages). */
static void walk_join(char *out, const char *a, const char *b, size_t blen, const char *c)
{
	size_t n = strlen(a), room = PROTO_MAX_PATH;
	const char *part[3] = { b, c != NULL ? "/" : "", c != NULL ? c : "" };
	size_t plen[3] = { blen, strlen(part[1]), strlen(part[2]) };

	n = n < room ? n : room;
	memcpy(out, a, n);
	for (int i = 0; i < 3; i++) {
		size_t k = plen[i] < room - n ? plen[i] : room - n;
		memcpy(out + n, part[i], k);
		n += k;
	}
	out[n] = '\0';
}

/* it->display: the argument and the part of it->e.path below the source. */
static void walk_display(struct walk *w, struct walk_item *it)
{
	const char *below = it->e.path + w->top_len;

	walk_join(it->display, w->arg, below, strlen(below), NULL);
}

/* out (PROTO_MAX_PATH + 1 bytes): prefix (w->prefix: from base_fd; w->rel:
 * from dirfd) joined with the part of it->e.path below the source.
 * Returns 0 or -ENAMETOOLONG. */
static int walk_path_from(const char *prefix, const struct walk *w, const struct walk_item *it,
			  char *out)
{
	const char *below = it->e.path + w->top_len;
	size_t plen = strlen(prefix), blen;

	if (plen == 0 && below[0] == '/')
		below++;
	blen = strlen(below);
	if (plen + blen > PROTO_MAX_PATH)
		return -ENAMETOOLONG;
	memcpy(out, prefix, plen);
	memcpy(out + plen, below, blen + 1);
	return 0;
}

/* With -L: st of what the symlink it->e.path (name in fd) points to.
 * Beneath a daemon's root it is resolved from the root, so that it cannot
 * lead outside. Returns 0 or -errno (-EXDEV: it leads outside). */
static int walk_follow(struct walk *w, int fd, const char *name, struct walk_item *it,
		       struct stat *st)
{
	int ret, pfd;

	if (!w->beneath)
		return fstatat(fd, name, st, 0) == 0 ? 0 : -errno;
	ret = walk_path_from(w->rel, w, it, it->open_path);
	if (ret < 0)
		return ret;
	pfd = pathsafe_open(w->dirfd, it->open_path, O_PATH, 0, true);
	if (pfd < 0)
		return pfd == -ELOOP && fstatat(fd, name, st, 0) == 0 ? -EXDEV : pfd;
	ret = fstat(pfd, st) == 0 ? 0 : -errno;
	close(pfd);
	return ret;
}

/* walk_follow, or the skip that says why the link cannot be followed.
 * Returns 0 (followed: *st describes the target) or 2 (*sk filled). */
static int walk_follow_or_skip(struct walk *w, int fd, const char *name, struct walk_item *it,
			       struct stat *st, struct walk_skip *sk)
{
	int ret = walk_follow(w, fd, name, it, st);

	if (ret == -EXDEV)
		return walk_skip_set(w, sk, ret, "cannot follow symlink '%s': it leads outside "
				     "the served directory", walk_cut(w, 0, it->display));
	if (ret < 0)
		return walk_skip_err(w, sk, ret, "follow symlink", it->display);
	return 0;
}

/* A regular file: REG, or HARDLINK with -H to one seen before. */
static int walk_reg(struct walk *w, struct walk_item *it, struct walk_skip *sk,
		    const struct stat *st, struct pc_err *e)
{
	struct walk_link *l;
	int ret = walk_fill(w, it, PROTO_ENT_REG, st);

	if (ret < 0)
		return pc_err_set(e, ret, "walking '%s': out of memory", w->arg);
	if (walk_path_from(w->prefix, w, it, it->open_path) < 0)
		return walk_skip_set(w, sk, -ENAMETOOLONG, "'%s': its path is too long to open",
				     walk_cut(w, 0, it->display));
	if (w->o.hardlinks && st->st_nlink > 1) {
		l = walk_link_find(w, st->st_dev, st->st_ino);
		if (l != NULL) {
			it->e.type = PROTO_ENT_HARDLINK;
			it->e.link_id = l->id;
			it->open_path[0] = '\0';
			if (--l->left == 0)
				walk_link_del(w, l);
			return walk_yield(w, it);
		}
		ret = walk_link_add(w, st->st_dev, st->st_ino, w->next_id, st->st_nlink - 1);
		if (ret < 0)
			return pc_err_set(e, ret, "walking '%s': out of memory", w->arg);
		it->e.flags = PROTO_ENT_LINKED;
	}
	it->e.size = (uint64_t)st->st_size;
	it->sparse = (uint64_t)st->st_blocks * 512u < it->e.size;
	it->base_fd = w->base_fd;
	return walk_yield(w, it);
}

/* A symlink (not followed): its text, read relative to fd. Returns 1, 2, 0
 * (it vanished) or < 0. */
static int walk_symlink(struct walk *w, struct walk_item *it, struct walk_skip *sk, int fd,
			const char *name, const struct stat *st, struct pc_err *e)
{
	int ret = walk_fill(w, it, PROTO_ENT_SYMLINK, st);
	ssize_t n;

	if (ret < 0)
		return pc_err_set(e, ret, "walking '%s': out of memory", w->arg);
	n = readlinkat(fd, name, it->e.target, sizeof(it->e.target));
	if (n < 0 && errno == ENOENT && w->depth > 0)
		return 0;
	if (n < 0)
		return walk_skip_err(w, sk, -errno, "read symlink", it->display);
	if (n == 0 || (size_t)n > PROTO_MAX_PATH)
		return walk_skip_set(w, sk, -ENAMETOOLONG, "'%s': %s", walk_cut(w, 0, it->display),
				     n == 0 ? "the symlink is empty" : "its text is too long");
	it->e.target[n] = '\0';
	return walk_yield(w, it);
}

/* A FIFO, socket or device: an entry with -p, else a skip. */
static int walk_special(struct walk *w, struct walk_item *it, struct walk_skip *sk,
			const struct stat *st, struct pc_err *e)
{
	uint8_t type = S_ISFIFO(st->st_mode) ? PROTO_ENT_FIFO : S_ISSOCK(st->st_mode) ?
		PROTO_ENT_SOCK : S_ISCHR(st->st_mode) ? PROTO_ENT_CHR : PROTO_ENT_BLK;
	int ret;

	if (!w->o.specials)
		return walk_skip_rule(w, sk, -EOPNOTSUPP, "skipping special file '%s' (use -p to "
				     "copy FIFOs, sockets and devices)", walk_cut(w, 0, it->display));
	ret = walk_fill(w, it, type, st);
	if (ret < 0)
		return pc_err_set(e, ret, "walking '%s': out of memory", w->arg);
	if (type == PROTO_ENT_CHR || type == PROTO_ENT_BLK)
		it->e.rdev = (uint64_t)st->st_rdev;
	return walk_yield(w, it);
}

/* ---- directories ----------------------------------------------------------- */

/* Opens a directory: relative to fd without following a symlink, or with
 * -L through a symlink (beneath the root from it->e.path's open path when
 * beneath). Returns an fd or -errno. */
static int walk_opendir(struct walk *w, int fd, const char *name, bool via_link,
			struct walk_item *it)
{
	int dfd, ret;

	if (fault_fire(FAULT_WALK_OPENDIR))
		return -EACCES;
	if (w->beneath && (via_link || w->depth == 0)) {
		ret = walk_path_from(w->rel, w, it, it->open_path);
		if (ret < 0)
			return ret;
		return pathsafe_open(w->dirfd, it->open_path[0] != '\0' ? it->open_path : ".",
				     O_RDONLY | O_DIRECTORY | (via_link ? 0 : O_NOFOLLOW), 0, true);
	}
	dfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (via_link ? 0 : O_NOFOLLOW));
	return dfd >= 0 ? dfd : -errno;
}

/* The directory on the current path with st's identity, or NULL. */
static const struct walk_frame *walk_ancestor(const struct walk *w, const struct stat *st)
{
	for (unsigned i = 0; i < w->depth; i++)
		if (w->frames[i].dev == st->st_dev && w->frames[i].ino == st->st_ino)
			return &w->frames[i];
	return NULL;
}

/* Enters the directory it->e.path, open as dfd (taken: closed on every
 * path): yields its DIR, or a skip for a loop. */
static int walk_enter(struct walk *w, struct walk_item *it, struct walk_skip *sk, int dfd,
		      struct pc_err *e)
{
	const struct walk_frame *a;
	struct walk_frame *f;
	struct stat st;
	DIR *dir;
	int ret;

	if (fstat(dfd, &st) != 0) {
		ret = -errno;
		close(dfd);
		return walk_skip_err(w, sk, ret, "access", it->display);
	}
	a = walk_ancestor(w, &st);
	if (a != NULL) {
		char anc[PROTO_MAX_PATH + 1];
		close(dfd);
		walk_join(anc, w->arg, w->path + w->top_len, a->path_len - w->top_len, NULL);
		return walk_skip_set(w, sk, -ELOOP, "'%s' is a loop back to '%s'",
				     walk_cut(w, 0, it->display), walk_cut(w, 1, anc));
	}
	if (w->depth == w->frames_cap) {
		unsigned cap = w->frames_cap == 0 ? WALK_FRAMES_MIN : w->frames_cap * 2;
		ret = walk_resize(w, (void **)&w->frames, w->frames_cap, cap, sizeof(*w->frames));
		if (ret < 0) {
			close(dfd);
			return pc_err_set(e, ret, "walking '%s': out of memory", w->arg);
		}
		w->frames_cap = cap;
	}
	ret = walk_fill(w, it, PROTO_ENT_DIR, &st);
	dir = ret == 0 ? fdopendir(dfd) : NULL;
	if (dir == NULL) {
		ret = ret < 0 ? ret : -errno;
		close(dfd);
		return pc_err_set(e, ret, "cannot read directory '%s': %s", it->display,
				  pc_strerror(ret));
	}
	f = &w->frames[w->depth++];
	f->dir = dir;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->path_len = strlen(it->e.path);
	f->st = st;
	f->incomplete = false;
	memcpy(w->path, it->e.path, f->path_len + 1);
	if (++w->open_dirs > w->max_open_dirs)
		w->max_open_dirs = w->open_dirs;
	return walk_yield(w, it);
}

static void walk_close_dir(struct walk *w, struct walk_frame *f)
{
	if (f->dir == NULL)
		return;
	closedir(f->dir);
	f->dir = NULL;
	w->open_dirs--;
}

/* The top directory is finished: its DIR_END, and the walk goes back up. */
static int walk_dir_end(struct walk *w, struct walk_item *it, struct pc_err *e)
{
	struct walk_frame *f = &w->frames[w->depth - 1];
	int ret;

	walk_close_dir(w, f);
	memcpy(it->e.path, w->path, f->path_len + 1);
	walk_display(w, it);
	ret = walk_fill(w, it, PROTO_ENT_DIR_END, &f->st);
	if (ret < 0)
		return pc_err_set(e, ret, "walking '%s': out of memory", w->arg);
	if (f->incomplete)
		it->e.flags |= PROTO_ENT_INCOMPLETE;
	w->depth--;
	if (w->depth > 0)
		w->path[w->frames[w->depth - 1].path_len] = '\0';
	return walk_yield(w, it);
}

/* ---- inside a tree ------------------------------------------------------------- */

/* The entry name in the top directory. Returns 1, 2, 0 (nothing to yield:
 * it vanished) or < 0. */
static int walk_child(struct walk *w, const char *name, struct walk_item *it,
		      struct walk_skip *sk, struct pc_err *e)
{
	int fd = dirfd(w->frames[w->depth - 1].dir);
	size_t plen = strlen(w->path), nlen = strlen(name);
	bool via_link = false;
	struct stat st;
	int ret;

	walk_join(it->display, w->arg, w->path + w->top_len, plen - w->top_len, name);
	if (nlen > PROTO_MAX_NAME || plen + 1 + nlen > PROTO_MAX_PATH)
		return walk_skip_set(w, sk, -ENAMETOOLONG, "'%s': %s", walk_cut(w, 0, it->display),
				     nlen > PROTO_MAX_NAME ? "its name is longer than 255 bytes" :
				     "its path is longer than 4096 bytes");
	memcpy(it->e.path, w->path, plen);
	it->e.path[plen] = '/';
	memcpy(it->e.path + plen + 1, name, nlen + 1);
	if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : walk_skip_err(w, sk, -errno, "access", it->display);
	if (S_ISLNK(st.st_mode) && w->o.deref) {
		ret = walk_follow_or_skip(w, fd, name, it, &st, sk);
		if (ret != 0)
			return ret;
		via_link = true;
	}
	if (filter_excludes(w->o.filter, it->e.path, S_ISDIR(st.st_mode)))
		return 0; /* left out, and all beneath it */
	if ((ret = walk_partial_name(w, sk, name, it->display)) != 0)
		return ret;
	if (S_ISDIR(st.st_mode)) {
		if (w->depth >= WALK_MAX_DEPTH)
			return walk_skip_set(w, sk, -ENAMETOOLONG, "'%s': more than %u directory "
					     "levels deep", walk_cut(w, 0, it->display),
					     WALK_MAX_DEPTH);
		int dfd = walk_opendir(w, fd, name, via_link, it);
		if (dfd == -ENOENT)
			return 0;
		if (dfd < 0)
			return walk_skip_err(w, sk, dfd, "open directory", it->display);
		return walk_enter(w, it, sk, dfd, e);
	}
	/* An empty file is never read for its data: it is opened once all the
	 * same, so that one pcopy cannot read is reported (as cp and rsync
	 * report it), not made anew, empty, at the destination. */
	if (S_ISREG(st.st_mode) && st.st_size == 0 && !via_link) {
		int rfd = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (rfd < 0)
			return errno == ENOENT ? 0 : walk_skip_err(w, sk, -errno, "open", it->display);
		close(rfd);
	}
	if (S_ISREG(st.st_mode))
		return walk_reg(w, it, sk, &st, e);
	if (S_ISLNK(st.st_mode))
		return walk_symlink(w, it, sk, fd, name, &st, e);
	return walk_special(w, it, sk, &st, e);
}

/* One step in the top directory: its next entry, or its end. Returns 1, 2,
 * 0 (nothing this time: go on) or < 0. */
static int walk_step(struct walk *w, struct walk_item *it, struct walk_skip *sk,
		     struct pc_err *e)
{
	struct walk_frame *f = &w->frames[w->depth - 1];
	struct dirent *d;
	int err;

	if (f->dir == NULL)
		return walk_dir_end(w, it, e);
	errno = 0;
	if (fault_fire(FAULT_WALK_READDIR)) {
		d = NULL;
		errno = EIO;
	} else {
		d = readdir(f->dir);
	}
	if (d == NULL) {
		err = errno;
		if (err == 0)
			return walk_dir_end(w, it, e);
		/* Its DIR_END still comes, on the next call. */
		walk_close_dir(w, f);
		memcpy(it->e.path, w->path, f->path_len + 1);
		walk_display(w, it);
		return walk_skip_err(w, sk, -err, "read directory", it->display);
	}
	if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
		return 0;
	return walk_child(w, d->d_name, it, sk, e);
}

/* ---- top-level sources ---------------------------------------------------------- */

/* fd (owned, an O_PATH directory) as the base of this source's items:
 * shared with an earlier source's base on the same directory. Returns 0 or
 * -errno (fd closed then). */
static int walk_set_base(struct walk *w, int fd)
{
	struct stat st;
	int ret;

	if (fstat(fd, &st) != 0) {
		ret = -errno;
		close(fd);
		return ret;
	}
	for (unsigned i = 0; i < w->nbases; i++) {
		if (w->bases[i].dev == st.st_dev && w->bases[i].ino == st.st_ino) {
			close(fd);
			w->base_fd = w->bases[i].fd;
			return 0;
		}
	}
	if (w->nbases == w->bases_cap) {
		unsigned cap = w->bases_cap == 0 ? 4 : w->bases_cap * 2;
		ret = walk_resize(w, (void **)&w->bases, w->bases_cap, cap, sizeof(*w->bases));
		if (ret < 0) {
			close(fd);
			return ret;
		}
		w->bases_cap = cap;
	}
	w->bases[w->nbases++] = (struct walk_base){ .fd = fd, .dev = st.st_dev, .ino = st.st_ino };
	w->base_fd = fd;
	return 0;
}

/* The name of the directory open as fd (a "." or ".." source): the last
 * component of its real path, into name (NAME_MAX + 1 bytes). Returns 0,
 * -EINVAL if it is "/", or -errno. */
static int walk_real_name(struct walk *w, int fd, char *name)
{
	char link[64], real[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, real, sizeof(real) - 1);
	if (n > 0 && real[0] == '/') {
		real[n] = '\0';
	} else if (!w->beneath && w->dirfd == AT_FDCWD && realpath(w->arg, real) != NULL) {
		n = (ssize_t)strlen(real);
	} else {
		return n < 0 ? -errno : -ENOENT;
	}
	if (strcmp(real, "/") == 0)
		return -EINVAL;
	const char *last = strrchr(real, '/') + 1;
	if (strlen(last) > PROTO_MAX_NAME)
		return -ENAMETOOLONG;
	strcpy(name, last);
	return 0;
}

/* A directory source (pfd: its parent, owned): opens it and yields its DIR.
 * name: its last component. */
static int walk_source_dir(struct walk *w, struct walk_item *it, struct walk_skip *sk,
			   int pfd, const char *name, bool via_link, struct pc_err *e)
{
	bool dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
	int dfd = walk_opendir(w, pfd, name, via_link, it), ret = 0;

	if (dfd < 0) {
		close(pfd);
		return walk_skip_err(w, sk, dfd, "open directory", it->display);
	}
	if (dots) {
		char real[NAME_MAX + 1];
		ret = walk_real_name(w, dfd, real);
		if (ret == -EINVAL) {
			close(pfd);
			close(dfd);
			return walk_skip_set(w, sk, ret, "cannot copy the root directory '%s'; "
					     "name what is in it", walk_cut(w, 0, it->display));
		}
		if (ret == 0) {
			strcpy(it->e.path, real);
			w->top_len = strlen(real);
		}
	}
	if (ret == 0 && ((dots && !w->beneath) || (via_link && !w->o.deref))) {
		/* The base: the directory itself, so that open paths go through
		 * no symlink (a "link/" source) and no "." or "..". */
		int bfd = openat(dfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		ret = bfd >= 0 ? walk_set_base(w, bfd) : -errno;
		w->prefix[0] = '\0';
	} else if (ret == 0 && !w->beneath) {
		/* The base: the source's parent. */
		ret = walk_set_base(w, pfd);
		pfd = -1;
	}
	if (pfd >= 0)
		close(pfd);
	if (ret < 0) {
		close(dfd);
		return walk_skip_err(w, sk, ret, "access source", it->display);
	}
	return walk_enter(w, it, sk, dfd, e);
}

/* Splits w->arg into the parent to open (into parent) and the last
 * component (returned, inside w->arg). */
static const char *walk_split(struct walk *w, char *parent)
{
	char *slash = strrchr(w->arg, '/');
	size_t plen;

	if (slash == NULL) {
		strcpy(parent, ".");
		return w->arg;
	}
	plen = (size_t)(slash - w->arg);
	while (plen > 0 && w->arg[plen - 1] == '/')
		plen--;
	if (plen == 0)
		strcpy(parent, "/");
	else
		memcpy(parent, w->arg, plen), parent[plen] = '\0';
	return slash + 1;
}

/* Source i's argument: sets w->src and w->arg (trailing '/' stripped:
 * *slash says there was one), opens the directory that holds it as *pfd
 * (O_PATH) and points *name at its last component. Returns 0, or 2 with
 * *sk filled. */
static int walk_source_locate(struct walk *w, unsigned i, struct walk_item *it,
			      struct walk_skip *sk, int *pfd, const char **name, bool *slash)
{
	const char *arg = w->paths[i];
	char parent[PROTO_MAX_PATH + 1];
	size_t len = strlen(arg);
	int ret;

	w->src = i;
	w->top_len = 0;
	w->arg[0] = '\0';
	snprintf(it->display, sizeof(it->display), "%s", arg);
	if (len > PROTO_MAX_PATH)
		return walk_skip_set(w, sk, -ENAMETOOLONG, "source '%s': the path is longer than "
				     "%u bytes", walk_cut(w, 0, it->display), PROTO_MAX_PATH);
	while (len > 1 && arg[len - 1] == '/')
		len--;
	*slash = arg[len] == '/';
	memcpy(w->arg, arg, len);
	w->arg[len] = '\0';
	if (strcmp(w->arg, "/") == 0)
		return walk_skip_set(w, sk, -EINVAL, "cannot copy the root directory '%s'; "
				     "name what is in it", walk_cut(w, 0, it->display));
	if (w->beneath && pathsafe_check_rel(w->arg) != 0)
		return walk_skip_set(w, sk, -EXDEV, "source '%s' leads outside the served "
				     "directory", walk_cut(w, 0, it->display));
	*name = walk_split(w, parent);
	*pfd = w->beneath ? pathsafe_open(w->dirfd, parent, O_PATH | O_DIRECTORY, 0, true) :
		openat(w->dirfd, parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*pfd >= 0)
		return 0;
	ret = w->beneath ? *pfd : -errno;
	if (w->beneath && (ret == -EXDEV || ret == -ELOOP))
		return walk_skip_set(w, sk, -EXDEV, "source '%s' leads outside the served "
				     "directory", walk_cut(w, 0, it->display));
	return walk_skip_err(w, sk, ret, "access source", it->display);
}

/* The checks on a source that pfd/name holds and *st describes (lstat):
 * follows a symlink with -L or without -r, and also when the argument ends in '/' (as
 * path resolution does: "link/" names the directory; *via_link is set
 * then); refuses a non-directory named with a trailing '/' and a directory
 * without -r. Returns 0, or 2 with *sk filled. */
static int walk_source_check(struct walk *w, int pfd, const char *name, bool slash,
			     struct walk_item *it, struct walk_skip *sk, struct stat *st,
			     bool *via_link)
{
	int ret;

	/* Without -r a source symlink is followed, as cp and scp do. */
	if (S_ISLNK(st->st_mode) && (w->o.deref || slash || !w->o.recursive)) {
		ret = walk_follow_or_skip(w, pfd, name, it, st, sk);
		if (ret != 0)
			return ret;
		*via_link = true;
	}
	if (slash && !S_ISDIR(st->st_mode))
		return walk_skip_err(w, sk, -ENOTDIR, "access source", it->display);
	if (S_ISDIR(st->st_mode) && !w->o.recursive)
		return walk_skip_rule(w, sk, -EISDIR, "omitting directory '%s' (use -r to copy "
				     "it)", walk_cut(w, 0, it->display));
	return 0;
}

/* Starts source i: yields its first entry, or a skip. */
static int walk_source(struct walk *w, unsigned i, struct walk_item *it, struct walk_skip *sk,
		       struct pc_err *e)
{
	const char *name = NULL;
	bool via_link = false, slash = false, dots, excluded = false;
	struct stat st;
	int pfd = -1, ret = walk_source_locate(w, i, it, sk, &pfd, &name, &slash);

	if (ret != 0)
		return ret;
	/* The wire path starts as the last component ("." and ".." get their
	 * real name once open); the open path from the base. */
	snprintf(it->e.path, sizeof(it->e.path), "%s", name);
	w->top_len = strlen(name);
	dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
	w->base_fd = w->dirfd;
	snprintf(w->prefix, sizeof(w->prefix), "%s", dots ? "" : w->beneath ? w->arg : name);
	snprintf(w->rel, sizeof(w->rel), "%s", dots ? "" : w->arg);
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		ret = walk_skip_err(w, sk, -errno, "access source", it->display);
	else if (!dots && filter_excludes(w->o.filter, it->e.path, S_ISDIR(st.st_mode) || slash))
		excluded = true; /* left out: no entry and no skip */
	else if ((ret = walk_partial_name(w, sk, name, it->display)) == 0)
		ret = walk_source_check(w, pfd, name, slash, it, sk, &st, &via_link);
	if (ret != 0 || excluded) {
		close(pfd);
		return ret;
	}
	if (S_ISDIR(st.st_mode))
		return walk_source_dir(w, it, sk, pfd, name, via_link, e);
	if (S_ISREG(st.st_mode)) {
		ret = w->beneath ? (close(pfd), 0) : walk_set_base(w, pfd);
		if (ret < 0)
			return walk_skip_err(w, sk, ret, "access source", it->display);
		return walk_reg(w, it, sk, &st, e);
	}
	if (S_ISLNK(st.st_mode))
		ret = walk_symlink(w, it, sk, pfd, name, &st, e);
	else
		ret = walk_special(w, it, sk, &st, e);
	close(pfd);
	return ret;
}

/* ---- the interface ------------------------------------------------------------- */

struct walk *walk_new(const struct walk_opts *o, int dirfd, bool beneath,
		      const char *const *paths, unsigned npaths)
{
	struct walk *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return NULL;
	w->o = *o;
	w->dirfd = dirfd;
	w->beneath = beneath;
	w->paths = paths;
	w->npaths = npaths;
	w->base_fd = -1;
	walk_heap_note(w, 0, sizeof(*w));
	return w;
}

int walk_next(struct walk *w, struct walk_item *it, struct walk_skip *sk, struct pc_err *e)
{
	int ret;

	if (w->fatal < 0)
		return w->fatal;
	/* Ids are u32 on the wire, and each call yields at most one. */
	if (w->next_id == UINT32_MAX)
		return w->fatal = pc_err_set(e, -EOVERFLOW, "walking '%s': more than %u entries; "
					     "copy the tree in parts", w->arg, UINT32_MAX - 1);
	for (;;) {
		if (w->depth > 0)
			ret = walk_step(w, it, sk, e);
		else if (w->next_src < w->npaths)
			ret = walk_source(w, w->next_src++, it, sk, e);
		else
			return 0;
		if (ret < 0)
			w->fatal = ret;
		if (ret != 0)
			return ret;
	}
}

void walk_stats(const struct walk *w, struct walk_stats *out)
{
	out->open_dirs = w->open_dirs;
	out->max_open_dirs = w->max_open_dirs;
	out->base_fds = w->nbases;
	out->heap_bytes = w->heap;
	out->max_heap_bytes = w->max_heap;
	out->links = w->nlinks;
}

void walk_free(struct walk *w)
{
	if (w == NULL)
		return;
	for (unsigned i = 0; i < w->depth; i++)
		if (w->frames[i].dir != NULL)
			closedir(w->frames[i].dir);
	for (unsigned i = 0; i < w->nbases; i++)
		close(w->bases[i].fd);
	free(w->frames);
	free(w->bases);
	free(w->links);
	free(w->pwbuf);
	free(w);
}
