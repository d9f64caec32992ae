/* SPDX-License-Identifier: Apache-2.0 */
/* dest: tree entries created beneath a root, through a directory-fd cache. */
#include "pipeline/dest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/journal.h"
#include "pipeline/tmpfile.h"
#include "sys/closer.h"
#include "sys/platform.h"
#include "sys/sync.h"
#include "wire/pathsafe.h"

#define DEST_BUCKETS 256u  /* hash buckets of the directory table */
#define DEST_IDS 64u       /* slots of each name -> id cache (direct-mapped) */
#define DEST_TRIES 100     /* taken temporary names stepped over */
/* A file at least this big lets the file it replaces go on the closer's
 * thread; below it, freeing that costs less than handing it over. */
#define DEST_RETIRE_MIN (1u << 20)
/* A mapped path: rename_top may be longer than the component it replaces. */
#define DEST_PATH_CAP (PROTO_MAX_PATH + NAME_MAX + 2)

/* One directory dest knows about: an open fd, a pending "created by us", or
 * both. Every field is guarded by d->lock. */
struct dest_dir {
	struct dest_dir *next;             /* hash chain */
	struct dest_dir *older, *newer;    /* idle list links, when fd >= 0 && refs == 0 */
	uint32_t hash;
	int fd;                            /* O_PATH | O_DIRECTORY, or -1 */
	unsigned refs;                     /* callers using fd: never closed while > 0 */
	bool created;                      /* dest_mkdir made it; its dest_dir_end is pending */
	bool opened_up;                    /* dest_open_up gave us write permission on it;
	                                      its dest_dir_end puts was_mode back */
	mode_t was_mode;                   /* its permission bits before, if opened_up */
	bool hashed;                       /* in the table; false once forgotten (gone) */
	char path[];                       /* the mapped path: the key */
};

/* A name -> id cache slot; guarded by d->idlock. */
struct dest_id {
	bool used;
	uint32_t id;
	char name[PROTO_MAX_NAME + 1];
};

struct dest {
	int rootfd;                        /* borrowed; immutable */
	struct dest_opts o;                /* immutable */
	bool as_root;                      /* euid 0 at dest_new; immutable */
	char *top;                         /* rename_top or NULL; immutable */
	char *display;                     /* immutable */
	struct closer *closer;             /* old files replaced; thread-safe */
	pthread_mutex_t lock;              /* guards the table and the idle list */
	struct dest_dir *table[DEST_BUCKETS];
	struct dest_dir *oldest, *newest;  /* the idle list: fd open, no refs */
	unsigned nidle;
	atomic_uint_least64_t replaced;    /* o.replace: entries removed to make room */
	pthread_mutex_t idlock;            /* guards users and groups */
	struct dest_id users[DEST_IDS];
	struct dest_id groups[DEST_IDS];
};

struct dest_file {
	struct dest_dir *dir;              /* reference on the parent; NULL: the root */
	int dirfd;                         /* the parent's fd, kept open by dir */
	int fd;                            /* owned */
	const char *name;                  /* the last component, inside path */
	char tmp[TMPFILE_NAME_CAP];        /* temporary name, or "" (unnamed or none) */
	char jrnl[TMPFILE_NAME_CAP];       /* -a: the journal's name (removed with the file,
	                                      or once it is in place), or "" */
	dev_t pdev, jdev;                  /* -a: the partial file's and the journal's */
	ino_t pino, jino;                  /* identities: a name is removed or renamed
	                                      only while it is still ours */
	bool placed;                       /* --inplace: the file at its final name already */
	bool device;                       /* placed, and a device: written into, never
	                                      truncated, given attributes or replaced */
	bool fresh;                        /* dest_file_open's: it was empty when made */
	int64_t whole;                     /* its size, where dest_file_write_whole wrote it
	                                      all (commit need not truncate); else -1 */
	char path[];                       /* mapped path */
};

/* Where one entry goes: its mapped path, split, and its parent's fd. */
struct dest_loc {
	char path[DEST_PATH_CAP];          /* mapped path */
	size_t parent_len;                 /* bytes of the parent in path; 0: the root */
	const char *name;                  /* the last component, inside path */
	struct dest_dir *dir;              /* reference held on the parent, or NULL */
	int dirfd;
};

/* ---- Paths and messages ----------------------------------------------- */

static uint32_t dest_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

/* The path as the user would see it: "DST/rest" (rename_top: the first
 * component is DST itself), else "DST/path". */
static const char *dest_display(const struct dest *d, const char *mapped, char *buf, size_t cap)
{
	size_t dl = strlen(d->display);
	const char *rest = mapped;
	const char *sep = dl > 0 && d->display[dl - 1] == '/' ? "" : "/";

	if (d->top != NULL) {
		rest = mapped + strcspn(mapped, "/");
		sep = "";
		if (dl > 1 && d->display[dl - 1] == '/' && rest[0] == '/')
			rest++;
	}
	snprintf(buf, cap, "%s%s%s", d->display, sep, rest);
	return buf;
}

/* Records "WHAT 'DST/path': reason" in err. Returns code. */
static int dest_fail(const struct dest *d, const char *mapped, int code, const char *what,
		     struct pc_err *err)
{
	char disp[PROTO_MAX_PATH + 1];

	dest_display(d, mapped, disp, sizeof(disp));
	if (code == -ELOOP || code == -EXDEV)
		return pc_err_set(err, code, "'%s': a path component is a symlink", disp);
	return pc_err_set(err, code, "%s '%s': %s", what, disp, pc_strerror(code));
}

/* Checks wire (a path from the peer) and writes its mapped form into l and
 * splits it. Returns 0 or -PC_E_PROTO. */
static int dest_map(const struct dest *d, const char *wire, struct dest_loc *l, struct pc_err *err)
{
	size_t len = strnlen(wire, PROTO_MAX_PATH + 1);
	const char *slash;

	l->path[0] = '\0';
	l->parent_len = 0;
	l->name = l->path;
	l->dir = NULL;
	l->dirfd = -1;
	if (proto_check_relpath(wire, len) != 0)
		return pc_err_set(err, -PC_E_PROTO, "the source sent an unsafe path '%.*s' for '%s'",
				  (int)(len > 512 ? 512 : len), wire, d->display);
	if (d->top != NULL)
		snprintf(l->path, sizeof(l->path), "%s%s", d->top, wire + strcspn(wire, "/"));
	else
		memcpy(l->path, wire, len + 1);
	slash = strrchr(l->path, '/');
	l->parent_len = slash != NULL ? (size_t)(slash - l->path) : 0;
	l->name = slash != NULL ? slash + 1 : l->path;
	return 0;
}

/* ---- The directory table ---------------------------------------------- */

/* The entry for path[0..n), or NULL. Caller holds d->lock. */
static struct dest_dir *dest_find_locked(struct dest *d, const char *path, size_t n, uint32_t h)
{
	for (struct dest_dir *dd = d->table[h % DEST_BUCKETS]; dd != NULL; dd = dd->next)
		if (dd->hash == h && strncmp(dd->path, path, n) == 0 && dd->path[n] == '\0')
			return dd;
	return NULL;
}

/* A new entry for path[0..n) in the table, fd -1, no refs. NULL on ENOMEM.
 * Caller holds d->lock. */
static struct dest_dir *dest_add_locked(struct dest *d, const char *path, size_t n, uint32_t h)
{
	struct dest_dir *dd = calloc(1, sizeof(*dd) + n + 1);

	if (dd == NULL)
		return NULL;
	memcpy(dd->path, path, n);
	dd->hash = h;
	dd->fd = -1;
	dd->hashed = true;
	dd->next = d->table[h % DEST_BUCKETS];
	d->table[h % DEST_BUCKETS] = dd;
	return dd;
}

/* Takes dd out of the table. Caller holds d->lock; dd->hashed. */
static void dest_unhash_locked(struct dest *d, struct dest_dir *dd)
{
	struct dest_dir **p = &d->table[dd->hash % DEST_BUCKETS];

	while (*p != dd)
		p = &(*p)->next;
	*p = dd->next;
	dd->hashed = false;
}

/* Unlinks dd from the table and frees it. Caller holds d->lock; dd has no
 * fd and no refs. */
static void dest_drop_locked(struct dest *d, struct dest_dir *dd)
{
	dest_unhash_locked(d, dd);
	free(dd);
}

static void dest_idle_unlink_locked(struct dest *d, struct dest_dir *dd)
{
	if (dd->older != NULL)
		dd->older->newer = dd->newer;
	else
		d->oldest = dd->newer;
	if (dd->newer != NULL)
		dd->newer->older = dd->older;
	else
		d->newest = dd->older;
	dd->older = dd->newer = NULL;
	d->nidle--;
}

/* Takes a reference on dd's fd. Caller holds d->lock; dd->fd >= 0. */
static void dest_ref_locked(struct dest *d, struct dest_dir *dd)
{
	if (dd->refs++ == 0)
		dest_idle_unlink_locked(d, dd);
}

/* Gives back a reference from dest_dir_get. NULL is a no-op. The fd goes to
 * the idle list; past DEST_CACHE_IDLE idle fds the oldest is closed. */
static void dest_dir_put(struct dest *d, struct dest_dir *dd)
{
	int victim = -1;

	if (dd == NULL)
		return;
	sync_lock(&d->lock);
	if (--dd->refs == 0 && !dd->hashed) {
		victim = dd->fd;     /* forgotten: its last user closes it */
		free(dd);
	} else if (dd->refs == 0) {
		dd->older = d->newest;
		dd->newer = NULL;
		if (d->newest != NULL)
			d->newest->newer = dd;
		else
			d->oldest = dd;
		d->newest = dd;
		d->nidle++;
		if (d->nidle > DEST_CACHE_IDLE) {
			struct dest_dir *old = d->oldest;

			dest_idle_unlink_locked(d, old);
			victim = old->fd;
			old->fd = -1;
			if (!old->created)
				dest_drop_locked(d, old);
		}
	}
	sync_unlock(&d->lock);
	if (victim >= 0)
		close(victim);
}

/* Fills l->dirfd (and l->dir, holding a reference) with l's parent: the
 * root, a cached fd, or one opened now beneath the root with no symlink
 * allowed on the way. Returns 0 or -errno (message in err). */
static int dest_dir_get(struct dest *d, struct dest_loc *l, const char *what, struct pc_err *err)
{
	size_t n = l->parent_len;
	uint32_t h;
	struct dest_dir *dd;
	int fd, spare = -1;

	l->dir = NULL;
	l->dirfd = d->rootfd;
	if (n == 0)
		return 0;
	h = dest_hash(l->path, n);
	sync_lock(&d->lock);
	dd = dest_find_locked(d, l->path, n, h);
	if (dd != NULL && dd->fd >= 0) {
		dest_ref_locked(d, dd);
		sync_unlock(&d->lock);
		l->dir = dd;
		l->dirfd = dd->fd;
		return 0;
	}
	sync_unlock(&d->lock);

	l->path[n] = '\0';
	fd = pathsafe_open_nolinks(d->rootfd, l->path, O_PATH | O_DIRECTORY, 0);
	l->path[n] = '/';
	if (fd < 0) {
		l->dirfd = -1;
		return dest_fail(d, l->path, fd, what, err);
	}

	sync_lock(&d->lock);
	dd = dest_find_locked(d, l->path, n, h);
	if (dd == NULL)
		dd = dest_add_locked(d, l->path, n, h);
	if (dd != NULL && dd->fd >= 0) {
		spare = fd;          /* another thread opened it meanwhile */
		dest_ref_locked(d, dd);
	} else if (dd != NULL) {
		dd->fd = fd;
		dd->refs = 1;
	}
	sync_unlock(&d->lock);
	if (spare >= 0)
		close(spare);
	if (dd == NULL) {
		close(fd);
		l->dirfd = -1;
		return dest_fail(d, l->path, -ENOMEM, what, err);
	}
	l->dir = dd;
	l->dirfd = dd->fd;
	return 0;
}

/* dd's directory is gone (an operation in it failed with ENOENT): the
 * next lookup of its path opens it anew, beneath the root as always. dd
 * lives on for those who hold it; the last dest_dir_put frees it. */
static void dest_dir_forget(struct dest *d, struct dest_dir *dd)
{
	sync_lock(&d->lock);
	if (dd->hashed)
		dest_unhash_locked(d, dd);
	sync_unlock(&d->lock);
}

/* An operation in l's parent failed with EACCES: if the directory is
 * ours and we may not write in it (a tree's read-only directory, which
 * an earlier copy filled before it gave the directory its mode), we give
 * ourselves write permission, as rsync does, until its DIR_END puts its
 * mode back (dest_dir_end). Returns whether that was done (now or by
 * another thread), so that the operation is worth one more try. */
static bool dest_open_up(struct dest *d, struct dest_dir *dd)
{
	struct stat st;
	bool done = false;
	int fd;

	sync_lock(&d->lock);
	if (dd->opened_up) {
		done = true;
	} else if (dd->fd >= 0 &&
		   (fd = openat(dd->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & S_IWUSR) &&
		    fchmod(fd, (st.st_mode & 07777) | S_IWUSR | S_IXUSR) == 0) {
			dd->was_mode = st.st_mode & 07777;
			dd->opened_up = done = true;
		}
		close(fd);
	}
	sync_unlock(&d->lock);
	return done;
}

/* Whether dest_open_up opened up l's own path (a directory): clears the
 * mark and gives the mode it had in *mode. */
static bool dest_take_opened(struct dest *d, const struct dest_loc *l, mode_t *mode)
{
	size_t n = strlen(l->path);
	struct dest_dir *dd;
	bool was = false;

	sync_lock(&d->lock);
	dd = dest_find_locked(d, l->path, n, dest_hash(l->path, n));
	if (dd != NULL && dd->opened_up) {
		was = true;
		*mode = dd->was_mode;
		dd->opened_up = false;
	}
	sync_unlock(&d->lock);
	return was;
}

/* After an operation in l's parent failed with *ret: if that was ENOENT
 * (or EPERM, which O_TMPFILE gives) from a cached fd, the directory may
 * have been removed behind our back: forget it and open the parent again;
 * if it was EACCES, the directory may be ours and read-only
 * (dest_open_up). Returns true when the operation is worth one more try
 * (first failure only: tries == 0); else *ret stands, or is the new
 * lookup's failure (message in err). */
static bool dest_retry(struct dest *d, struct dest_loc *l, int *ret, int tries,
		       const char *what, struct pc_err *err)
{
	if (*ret == -EACCES && l->dir != NULL && tries == 0)
		return dest_open_up(d, l->dir);
	if ((*ret != -ENOENT && *ret != -EPERM) || l->dir == NULL || tries > 0)
		return false;
	dest_dir_forget(d, l->dir);
	dest_dir_put(d, l->dir);
	*ret = dest_dir_get(d, l, what, err);
	return *ret == 0;
}

/* Marks l's own path (a directory) created by us (on true) or takes that
 * mark away, returning whether it was there (on false). Returns -ENOMEM
 * if the mark cannot be stored. */
static int dest_mark_created(struct dest *d, const struct dest_loc *l, bool on)
{
	size_t n = strlen(l->path);
	uint32_t h = dest_hash(l->path, n);
	struct dest_dir *dd;
	int was = 0;

	sync_lock(&d->lock);
	dd = dest_find_locked(d, l->path, n, h);
	if (on && dd == NULL)
		dd = dest_add_locked(d, l->path, n, h);
	if (dd != NULL) {
		was = dd->created;
		dd->created = on;
		if (!on && dd->fd < 0 && dd->refs == 0)
			dest_drop_locked(d, dd);
	} else if (on) {
		was = -ENOMEM;
	}
	sync_unlock(&d->lock);
	return was;
}

/* ---- Owners, modes, times --------------------------------------------- */

/* The id of user (or group) name through the cache slots; fallback when
 * the name is empty or unknown. */
static uint32_t dest_id(struct dest *d, struct dest_id *slots, const char *name,
			uint32_t fallback, bool group)
{
	struct dest_id *s = &slots[dest_hash(name, strlen(name)) % DEST_IDS];
	uint32_t id = fallback;
	bool found = false;
	size_t cap = 16384;
	char *buf = NULL;
	int rc = ERANGE;

	if (name[0] == '\0')
		return fallback;
	sync_lock(&d->idlock);
	if (s->used && strcmp(s->name, name) == 0) {
		id = s->id;
		found = true;
	}
	sync_unlock(&d->idlock);
	if (found)
		return id;
	while (rc == ERANGE && cap <= (1u << 20)) {
		char *bigger = realloc(buf, cap);
		struct passwd pw, *pwp = NULL;
		struct group gr, *grp = NULL;

		if (bigger == NULL)
			break;
		buf = bigger;
		rc = group ? getgrnam_r(name, &gr, buf, cap, &grp)
			   : getpwnam_r(name, &pw, buf, cap, &pwp);
		if (rc == 0 && (group ? grp != NULL : pwp != NULL)) {
			id = group ? (uint32_t)gr.gr_gid : (uint32_t)pw.pw_uid;
			found = true;
		}
		cap *= 2;
	}
	free(buf);
	if (!found)
		return fallback;   /* unknown (or a lookup that failed): rsync's rule */
	sync_lock(&d->idlock);
	s->used = true;
	s->id = id;
	snprintf(s->name, sizeof(s->name), "%s", name);
	sync_unlock(&d->idlock);
	return id;
}

static bool dest_chowns(const struct dest *d)
{
	return d->o.preserve && d->as_root;
}

static uid_t dest_uid(struct dest *d, const struct proto_entry *e)
{
	return d->o.numeric_ids ? e->uid : dest_id(d, d->users, e->user, e->uid, false);
}

static gid_t dest_gid(struct dest *d, const struct proto_entry *e)
{
	return d->o.numeric_ids ? e->gid : dest_id(d, d->groups, e->group, e->gid, true);
}

/* The mode to give a file, special file or new directory. */
static mode_t dest_mode(const struct dest *d, const struct proto_entry *e)
{
	mode_t m = (mode_t)e->mode & 07777;

	if (!d->o.preserve)
		return m & 0777 & ~d->o.umask;
	if (d->o.strip_setid)
		m &= ~(mode_t)(S_ISUID | S_ISGID);
	return m;
}

/* e's atime and mtime; -PC_E_PROTO if a nanosecond field is out of range
 * (which could also read as UTIME_NOW or UTIME_OMIT). */
static int dest_times(const struct proto_entry *e, struct timespec ts[2])
{
	if (e->atime_ns >= 1000000000u || e->mtime_ns >= 1000000000u)
		return -PC_E_PROTO;
	ts[0].tv_sec = (time_t)e->atime_s;
	ts[0].tv_nsec = (long)e->atime_ns;
	ts[1].tv_sec = (time_t)e->mtime_s;
	ts[1].tv_nsec = (long)e->mtime_ns;
	return 0;
}

static bool dest_ts_equal(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Owner (-p, root), mode, times (-p) on an open fd, in that order (chown
 * clears set-ID bits, so the mode follows a new owner). With have (the
 * file's stat), only what differs from it: the atime only with preserve,
 * for without it the times are set for -u's quick check, which looks at
 * the mtime alone (and a sink that may not set them, not the owner, whose
 * read moved the atime, keeps a file whose mtime is right). Returns 0 or
 * -errno. */
static int dest_attrs_fd(struct dest *d, int fd, const struct proto_entry *e, mode_t mode,
			 const struct stat *have)
{
	struct timespec ts[2];
	int ret;

	bool chown_it = dest_chowns(d) && (have == NULL || have->st_uid != dest_uid(d, e) ||
					   have->st_gid != dest_gid(d, e));
	if (chown_it && fchown(fd, dest_uid(d, e), dest_gid(d, e)) != 0)
		return -errno;
	if ((have == NULL || chown_it || (have->st_mode & 07777) != mode) && fchmod(fd, mode) != 0)
		return -errno;
	if (!d->o.preserve && !d->o.times)
		return 0;
	ret = dest_times(e, ts);
	if (ret == 0 &&
	    (have == NULL || !dest_ts_equal(ts[1], have->st_mtim) ||
	     (d->o.preserve && !dest_ts_equal(ts[0], have->st_atim))) &&
	    futimens(fd, ts) != 0)
		ret = -errno;
	return ret;
}

/* The same on name in dirfd, never following it (a symlink or a special
 * file, which cannot be opened safely). setmode is false for symlinks. */
static int dest_attrs_at(struct dest *d, int dirfd, const char *name,
			 const struct proto_entry *e, bool setmode)
{
	struct timespec ts[2];
	int ret;

	if (dest_chowns(d) &&
	    fchownat(dirfd, name, dest_uid(d, e), dest_gid(d, e), AT_SYMLINK_NOFOLLOW) != 0)
		return -errno;
	if (setmode && fchmodat(dirfd, name, dest_mode(d, e), AT_SYMLINK_NOFOLLOW) != 0)
		return -errno;
	if (!d->o.preserve)
		return 0;
	ret = dest_times(e, ts);
	if (ret == 0 && utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) != 0)
		ret = -errno;
	return ret;
}

/* ---- Entries ---------------------------------------------------------- */

/* Maps e->path into l and gets its parent, after checking e's type is
 * one of a or b. */
static int dest_begin(struct dest *d, const struct proto_entry *e, int a, int b,
		      struct dest_loc *l, const char *what, struct pc_err *err)
{
	int ret = dest_map(d, e->path, l, err);

	if (ret < 0)
		return ret;
	if (e->type != a && e->type != b)
		return dest_fail(d, l->path, -PC_E_PROTO, "wrong entry type for", err);
	return dest_dir_get(d, l, what, err);
}

/* Calls look(d, dirfd, name, e) on e's name, beneath the root and never
 * through a symlink on the way, and returns what it returns; 0 when the
 * name's parent cannot be reached (it is not there either). */
static int dest_look(struct dest *d, const struct proto_entry *e,
		     int (*look)(struct dest *d, int dirfd, const char *name,
				 const struct proto_entry *e))
{
	struct pc_err err;
	struct dest_loc l;
	int ret = 0;

	pc_err_init(&err);
	if (dest_begin(d, e, e->type, e->type, &l, "cannot look at", &err) == 0) {
		ret = look(d, l.dirfd, l.name, e);
		dest_dir_put(d, l.dir);
	}
	pc_err_destroy(&err);
	return ret;
}

/* -p: what is kept as it is (a file of the same size and time, the same
 * symlink or special file) still takes e's owner (as root) and mode, as
 * rsync -a gives them: a `chmod 600` at the source reaches the copy. st
 * is what stands at name. Looked at first, so that an unchanged tree
 * costs no system call more. Returns 1, or 0 when that failed (the entry
 * is then written again, which says why). */
static int dest_keep_attrs(struct dest *d, int dirfd, const char *name,
			   const struct proto_entry *e, const struct stat *st)
{
	bool is_link = S_ISLNK(st->st_mode);

	if (!d->o.preserve || d->o.dry_run)
		return 1;
	if (dest_chowns(d)) {
		uid_t uid = dest_uid(d, e);
		gid_t gid = dest_gid(d, e);
		if ((st->st_uid != uid || st->st_gid != gid) &&
		    fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
			return 0;
		if (st->st_uid != uid || st->st_gid != gid)
			st = NULL; /* chown cleared the set-ID bits: the mode again */
	}
	mode_t mode = dest_mode(d, e);
	if (!is_link && (st == NULL || (st->st_mode & 07777) != mode) &&
	    fchmodat(dirfd, name, mode, AT_SYMLINK_NOFOLLOW) != 0)
		return 0;
	return 1;
}

/* A regular file of e's size and mtime. A filesystem without nanoseconds
 * stores 0: then seconds decide, as rsync's quick check does. */
static int dest_look_same(struct dest *d, int dirfd, const char *name,
			  const struct proto_entry *e)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != e->size || (int64_t)st.st_mtim.tv_sec != e->mtime_s ||
	    !((uint32_t)st.st_mtim.tv_nsec == e->mtime_ns || st.st_mtim.tv_nsec == 0 ||
	      e->mtime_ns == 0))
		return 0;
	return dest_keep_attrs(d, dirfd, name, e, &st);
}

int dest_unchanged(struct dest *d, const struct proto_entry *e)
{
	if (e->type != PROTO_ENT_REG || (e->flags & PROTO_ENT_SIZE_UNKNOWN))
		return 0;
	return dest_look(d, e, dest_look_same);
}

/* Opens name in dirfd (flags: O_RDONLY or O_RDWR) only if it is a regular
 * file, looked at first, so that a device is never opened (an open alone
 * may act: a tape rewinds, a watchdog starts), never following a symlink
 * and, O_NONBLOCK, never waiting on a FIFO put there meanwhile; *st
 * receives its attributes. Returns the fd, -ENOENT, -EPERM (something
 * other than a regular file), or -errno. */
static int dest_open_regular(int dirfd, const char *name, int flags, struct stat *st)
{
	struct stat was;
	int fd;

	if (fstatat(dirfd, name, &was, AT_SYMLINK_NOFOLLOW) != 0)
		return -errno;
	if (!S_ISREG(was.st_mode))
		return -EPERM;
	fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	/* O_NOATIME is the owner's (or root's) to ask for: anyone else reads
	 * as always. */
	if (fd < 0 && errno == EPERM && (flags & O_NOATIME))
		fd = openat(dirfd, name, (flags & ~O_NOATIME) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP || errno == ENXIO || errno == EISDIR ? -EPERM : -errno;
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_ino != was.st_ino ||
	    st->st_dev != was.st_dev) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* What stands at the destination the user named for a file (`pcopy f
 * NAME`, not a name inside a directory or tree) that pcopy must not
 * replace: DEST_NODE_DEVICE, a character or block device, is written into
 * (as cp and scp do: `pcopy host:f /dev/null`, an image onto a disk);
 * DEST_NODE_STREAM, a FIFO or a socket, is refused, for pcopy writes at
 * any offset (copying to '-' and redirecting does it); DEST_NODE_LINKED, a
 * symbolic link to any of those (/dev/stdout), is refused too: a symlink
 * at a destination name is replaced, never written through, and replacing
 * that one would break it for everyone. At a name pcopy made up (the
 * source's name, in a directory), whatever stands there is replaced, as
 * rsync does and as -u promises: the old copy of a tree that held device
 * nodes must not send a file's bytes to a disk (dest_node_at). */
enum { DEST_NODE_NONE, DEST_NODE_DEVICE, DEST_NODE_STREAM, DEST_NODE_LINKED };

static bool dest_node_special(mode_t m)
{
	return S_ISCHR(m) || S_ISBLK(m) || S_ISFIFO(m) || S_ISSOCK(m);
}

/* What stands at name in dirfd, mapped being its mapped path: always
 * DEST_NODE_NONE unless that is the destination the user named (the one
 * entry, renamed to it). */
static int dest_node_at(const struct dest *d, int dirfd, const char *name, const char *mapped)
{
	struct stat st;

	if (d->top == NULL || strchr(mapped, '/') != NULL)
		return DEST_NODE_NONE;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return DEST_NODE_NONE;
	if (S_ISLNK(st.st_mode))
		return fstatat(dirfd, name, &st, 0) == 0 && dest_node_special(st.st_mode)
			       ? DEST_NODE_LINKED : DEST_NODE_NONE;
	if (!dest_node_special(st.st_mode))
		return DEST_NODE_NONE;
	return S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? DEST_NODE_DEVICE : DEST_NODE_STREAM;
}

/* The error for a destination name pcopy will not write, by what is there
 * (node: a DEST_NODE_*; DEST_NODE_DEVICE: one it cannot write at any
 * offset, such as a terminal). */
static int dest_node_refused(struct dest *d, const char *mapped, int node, struct pc_err *err)
{
	char disp[PROTO_MAX_PATH + 1];

	dest_display(d, mapped, disp, sizeof(disp));
	if (node == DEST_NODE_LINKED)
		return pc_err_set(err, -ESPIPE, "cannot write '%s': it is a symbolic link to a "
				  "device, FIFO or socket, which pcopy neither replaces nor writes "
				  "through; copy to '-' and redirect into it", disp);
	return pc_err_set(err, -ESPIPE, "cannot write '%s': it is a %s, which pcopy neither "
			  "replaces nor writes at any offset; copy to '-' and redirect into it",
			  disp, node == DEST_NODE_DEVICE ? "device that cannot seek" : "FIFO or socket");
}

/* The error for a directory at mapped, whose name st (not a directory)
 * holds. */
static int dest_dir_in_the_way(struct dest *d, const char *mapped, const struct stat *st,
			       struct pc_err *err)
{
	char disp[PROTO_MAX_PATH + 1];

	return pc_err_set(err, -EEXIST, "cannot create directory '%s': %s is in the way",
			  dest_display(d, mapped, disp, sizeof(disp)),
			  S_ISLNK(st->st_mode) ? "a symlink" : "a file that is not a directory");
}

/* Opens the device at l's name for writing into f (placed). Returns 0 or
 * a negative code with the detail in err. */
static int dest_device_open(struct dest *d, const struct dest_loc *l, struct dest_file *f,
			    struct pc_err *err)
{
	const int how = O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC;
	struct stat st;
	int fd, flags;

	/* A daemon writes files only: a device node in its tree (a served
	 * root file system, a backup of /dev) is not a way onto the host's
	 * disks for its clients. */
	if (d->o.strip_setid) {
		char disp[PROTO_MAX_PATH + 1];
		dest_display(d, l->path, disp, sizeof(disp));
		return pc_err_set(err, -EPERM, "cannot write '%s': it is a device, which a daemon "
				  "neither replaces nor writes into", disp);
	}
	/* Read and write, for -e to read it back; write only where that is all
	 * we may. Not blocking in the open (a FIFO swapped in since the look, a
	 * terminal waiting for its carrier); blocking again once we know. */
	fd = openat(l->dirfd, l->name, O_RDWR | how);
	if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS))
		fd = openat(l->dirfd, l->name, O_WRONLY | how);
	if (fd < 0)
		return dest_fail(d, l->path, -errno, "cannot open", err);
	if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) ||
	    (flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
		close(fd);
		return dest_node_refused(d, l->path, DEST_NODE_STREAM, err);
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return dest_node_refused(d, l->path, DEST_NODE_DEVICE, err);
	}
	f->fd = fd;
	f->placed = true;
	f->device = true;
	f->tmp[0] = '\0';
	f->jrnl[0] = '\0';
	return 0;
}

static void dest_ident_set(struct dest_ident *id, const struct stat *st)
{
	*id = (struct dest_ident){ .dev = st->st_dev, .ino = st->st_ino, .size = st->st_size,
				   .mtime = st->st_mtim, .ctime = st->st_ctim };
}

int dest_open_old(struct dest *d, const struct proto_entry *e, int *fd, uint64_t *size,
		  struct dest_ident *id)
{
	struct pc_err err;
	struct dest_loc l;
	struct stat st;
	int ret = 0;

	*fd = -1;
	*size = 0;
	if (e->type != PROTO_ENT_REG || (e->flags & PROTO_ENT_SIZE_UNKNOWN))
		return 0;
	pc_err_init(&err);
	if (dest_begin(d, e, PROTO_ENT_REG, PROTO_ENT_REG, &l, "cannot look at", &err) == 0) {
		/* Hashing it is no access of the user's: its atime stays, and
		 * a file kept as it was (dest_open_same) is not touched. */
		int f = dest_open_regular(l.dirfd, l.name, O_RDONLY | O_NOATIME, &st);
		if (f < 0) {
			ret = f == -ENOENT || f == -EPERM ? 0 : f;
		} else {
			*fd = f;
			*size = (uint64_t)st.st_size;
			if (id != NULL)
				dest_ident_set(id, &st);
			ret = 1;
		}
		dest_dir_put(d, l.dir);
	}
	pc_err_destroy(&err);
	return ret;
}

int dest_mkdir(struct dest *d, const struct proto_entry *e, struct pc_err *err)
{
	struct dest_loc l;
	struct stat st;
	int ret = dest_begin(d, e, PROTO_ENT_DIR, PROTO_ENT_DIR, &l, "cannot create directory",
			     err);

	for (int tries = 0; ret == 0; tries++) {
		ret = mkdirat(l.dirfd, l.name, 0700) == 0 ? 0 : -errno;
		if (!dest_retry(d, &l, &ret, tries, "cannot create directory", err))
			break;
	}
	if (ret == 0) {
		int mark = dest_mark_created(d, &l, true);

		if (mark < 0)
			ret = dest_fail(d, l.path, mark, "cannot create directory", err);
	} else if (ret != -EEXIST) {
		/* (a lookup that failed has already said why: the first
		 * message stays) */
		dest_fail(d, l.path, ret, "cannot create directory", err);
	} else if (fstatat(l.dirfd, l.name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		ret = dest_fail(d, l.path, -errno, "cannot create directory", err);
	} else if (S_ISDIR(st.st_mode)) {
		ret = 0;
	} else if (d->o.replace && unlinkat(l.dirfd, l.name, 0) == 0) {
		/* --delete: a file or symlink in the way goes (never followed) */
		atomic_fetch_add(&d->replaced, 1);
		ret = mkdirat(l.dirfd, l.name, 0700) == 0 ? dest_mark_created(d, &l, true) : -errno;
		if (ret < 0)
			dest_fail(d, l.path, ret, "cannot create directory", err);
	} else {
		ret = dest_dir_in_the_way(d, l.path, &st, err);
	}
	dest_dir_put(d, l.dir);
	return ret;
}

int dest_dir_blocked(struct dest *d, const struct proto_entry *e, struct pc_err *err)
{
	struct dest_loc l;
	struct stat st;
	int ret = dest_begin(d, e, PROTO_ENT_DIR, PROTO_ENT_DIR, &l, "cannot create directory",
			     err);

	if (ret == 0 && !d->o.replace && fstatat(l.dirfd, l.name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISDIR(st.st_mode))
		ret = dest_dir_in_the_way(d, l.path, &st, err);
	dest_dir_put(d, l.dir);
	return ret;
}

int dest_nondir_blocked(struct dest *d, const struct proto_entry *e, struct pc_err *err)
{
	const char *what = e->type == PROTO_ENT_REG ? "cannot finish"
			 : e->type == PROTO_ENT_SYMLINK ? "cannot create symlink"
			 : e->type == PROTO_ENT_HARDLINK ? "cannot create hard link"
			 : "cannot create special file";
	struct dest_loc l;
	struct stat st;
	int ret = dest_begin(d, e, e->type, e->type, &l, what, err);

	if (ret == 0 && e->type != PROTO_ENT_DIR && !d->o.replace &&
	    fstatat(l.dirfd, l.name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
		ret = dest_fail(d, l.path, -EISDIR, what, err);
	dest_dir_put(d, l.dir);
	return ret;
}

int dest_dir_end(struct dest *d, const struct proto_entry *e, struct pc_err *err)
{
	struct dest_loc l;
	struct stat st;
	mode_t mode = 0;
	bool created;
	int fd = -1;
	int ret = dest_begin(d, e, PROTO_ENT_DIR_END, PROTO_ENT_DIR, &l,
			     "cannot set the attributes of directory", err);

	if (ret < 0)
		goto out;
	created = dest_mark_created(d, &l, false) > 0;
	mode_t was;
	bool opened = dest_take_opened(d, &l, &was);
	if (!created && !d->o.preserve) {
		/* An existing directory keeps what it has: the mode it had
		 * before dest_open_up too. */
		if (opened && (fd = openat(l.dirfd, l.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					   O_CLOEXEC)) >= 0 && fchmod(fd, was) != 0)
			ret = dest_fail(d, l.path, -errno, "cannot set the attributes of directory",
					err);
		goto out;
	}
	fd = openat(l.dirfd, l.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* Not a directory there, and not ours: its DIR failed, and said so
	 * (a symlink or a file in the way); once is enough. */
	if (fd < 0 && !created && (errno == ENOTDIR || errno == ELOOP))
		goto out;
	if (fd < 0) {
		ret = dest_fail(d, l.path, -errno, "cannot set the attributes of directory",
				err);
		goto out;
	}
	mode = dest_mode(d, e);
	/* Without -p, a new directory keeps the set-group-ID bit it inherited,
	 * as mkdir gives it. */
	if (!d->o.preserve && fstat(fd, &st) == 0)
		mode |= st.st_mode & S_ISGID;
	ret = dest_attrs_fd(d, fd, e, mode, NULL);
	if (ret < 0)
		dest_fail(d, l.path, ret, "cannot set the attributes of directory", err);
out:
	if (fd >= 0)
		close(fd);
	dest_dir_put(d, l.dir);
	return ret;
}

/* What dest_prune carries down the tree it removes. */
struct dest_rm {
	const struct dest_prune_ops *ops;
	uint64_t *deleted;
	char at[PATH_MAX];    /* the display path of what is being removed */
	char bad[PATH_MAX];   /* the first one that could not be */
};

/* Removes name in dirfd, and all inside it if it is a directory (see
 * dest_prune); at[0..len) is dirfd's display path. Returns 0 or the first
 * -errno (and its path in rm->bad). */
static int dest_remove(struct dest_rm *rm, int dirfd, const char *name, unsigned depth,
		       size_t len)
{
	struct stat st;
	int ret = 0;
	size_t n = strlen(name);

	if (len + 1 + n < sizeof(rm->at)) {
		rm->at[len] = '/';
		memcpy(rm->at + len + 1, name, n + 1);
		len += 1 + n;
	}
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		ret = errno == ENOENT ? 0 : -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		int fd = depth < DEST_PRUNE_DEPTH ?
			 openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
		if (dir == NULL) {
			ret = depth < DEST_PRUNE_DEPTH ? -errno : -ENAMETOOLONG;
			if (fd >= 0)
				close(fd);
			goto out;
		}
		for (struct dirent *de; (errno = 0, de = readdir(dir)) != NULL;) {
			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			int r = dest_remove(rm, fd, de->d_name, depth + 1, len);
			if (r < 0 && ret == 0)
				ret = r;
			rm->at[len] = '\0';
		}
		if (errno != 0 && ret == 0)
			ret = -errno;
		closedir(dir);
		if (ret == 0 && !rm->ops->dry && unlinkat(dirfd, name, AT_REMOVEDIR) != 0)
			ret = errno == ENOENT ? 0 : -errno;
	} else if (!rm->ops->dry && unlinkat(dirfd, name, 0) != 0) {
		ret = errno == ENOENT ? 0 : -errno;
	}
	if (ret == 0) {
		(*rm->deleted)++;
		if (rm->ops->gone != NULL)
			rm->ops->gone(rm->ops->arg, rm->at);
	}
out:
	if (ret < 0 && rm->bad[0] == '\0')
		snprintf(rm->bad, sizeof(rm->bad), "%s", rm->at);
	return ret;
}

int dest_prune(struct dest *d, const struct proto_entry *e, const struct dest_prune_ops *ops,
	       uint64_t *deleted, struct pc_err *err)
{
	static const char what[] = "cannot delete what the source does not have in";
	struct dest_loc l;
	struct dest_rm *rm = NULL;
	DIR *dir = NULL;
	int fd = -1, first = 0;
	int ret = dest_begin(d, e, PROTO_ENT_DIR_END, PROTO_ENT_DIR, &l, what, err);

	if (ret < 0)
		goto out;
	rm = malloc(sizeof(*rm));
	if (rm == NULL) {
		ret = pc_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	rm->ops = ops;
	rm->deleted = deleted;
	rm->bad[0] = '\0';
	fd = openat(l.dirfd, l.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	dir = fd >= 0 ? fdopendir(fd) : NULL;
	if (dir == NULL) {
		ret = dest_fail(d, l.path, -errno, what, err);
		if (fd >= 0)
			close(fd);
		goto out;
	}
	dest_display(d, l.path, rm->at, sizeof(rm->at));
	size_t len = strlen(rm->at);
	for (struct dirent *de; (errno = 0, de = readdir(dir)) != NULL;) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		bool is_dir = de->d_type == DT_DIR;
		struct stat st;
		if (de->d_type == DT_UNKNOWN &&
		    fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			is_dir = S_ISDIR(st.st_mode);
		if (ops->keep(ops->arg, de->d_name, is_dir))
			continue;
		ret = dest_remove(rm, fd, de->d_name, 0, len);
		rm->at[len] = '\0';
		if (ret < 0 && first == 0)
			first = ret;
	}
	ret = first != 0 ? first : errno != 0 ? -errno : 0;
	if (ret < 0)
		pc_err_set(err, ret, "cannot delete '%s' (not in the source): %s",
			   rm->bad[0] != '\0' ? rm->bad : rm->at, pc_strerror(ret));
	closedir(dir);
out:
	free(rm);
	dest_dir_put(d, l.dir);
	return ret;
}

/* A symlink whose text is e's target (-p: with e's owner). */
static int dest_look_link(struct dest *d, int dirfd, const char *name,
			  const struct proto_entry *e)
{
	char text[PROTO_MAX_PATH + 1];
	struct stat st;
	ssize_t n = readlinkat(dirfd, name, text, sizeof(text));

	if (n < 0 || (size_t)n != strlen(e->target) || memcmp(text, e->target, (size_t)n) != 0)
		return 0;
	if (!dest_chowns(d))
		return 1;
	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode) &&
	       dest_keep_attrs(d, dirfd, name, e, &st);
}

int dest_same_symlink(struct dest *d, const struct proto_entry *e)
{
	return e->type == PROTO_ENT_SYMLINK ? dest_look(d, e, dest_look_link) : 0;
}

/* A FIFO, socket or device of e's kind (and device number), with e's
 * attributes given (-p). */
static int dest_look_special(struct dest *d, int dirfd, const char *name,
			     const struct proto_entry *e)
{
	static const mode_t kinds[] = {
		[PROTO_ENT_FIFO] = S_IFIFO, [PROTO_ENT_SOCK] = S_IFSOCK,
		[PROTO_ENT_CHR] = S_IFCHR, [PROTO_ENT_BLK] = S_IFBLK,
	};
	bool device = e->type == PROTO_ENT_CHR || e->type == PROTO_ENT_BLK;
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
	    (st.st_mode & S_IFMT) != kinds[e->type] || (device && st.st_rdev != (dev_t)e->rdev))
		return 0;
	return dest_keep_attrs(d, dirfd, name, e, &st);
}

int dest_same_special(struct dest *d, const struct proto_entry *e)
{
	switch (e->type) {
	case PROTO_ENT_FIFO:
	case PROTO_ENT_SOCK:
	case PROTO_ENT_CHR:
	case PROTO_ENT_BLK:
		return dest_look(d, e, dest_look_special);
	default:
		return 0;
	}
}

/* 1 a directory, 2 anything else, 0 nothing. */
static int dest_look_any(struct dest *d, int dirfd, const char *name,
			 const struct proto_entry *e)
{
	struct stat st;

	(void)d;
	(void)e;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return 0;
	return S_ISDIR(st.st_mode) ? 1 : 2;
}

int dest_exists(struct dest *d, const struct proto_entry *e)
{
	return dest_look(d, e, dest_look_any);
}

/* o.replace (--delete): removes the directory at name in dirfd, with all
 * in it, never following a symlink, to make room for an entry of another
 * kind at that name, as rsync replaces one; mapped is its mapped path.
 * What goes counts as deleted. Returns 0 or -errno. */
static int dest_make_room(struct dest *d, int dirfd, const char *name, const char *mapped)
{
	static const struct dest_prune_ops ops = { .keep = NULL };
	struct dest_rm *rm = malloc(sizeof(*rm));
	uint64_t n = 0;
	size_t len, nl = strlen(name);
	int ret;

	if (rm == NULL)
		return -ENOMEM;
	rm->ops = &ops;
	rm->deleted = &n;
	rm->bad[0] = '\0';
	dest_display(d, mapped, rm->at, sizeof(rm->at));
	len = strlen(rm->at);
	len = len > nl ? len - nl - 1 : 0; /* its parent's display path */
	rm->at[len] = '\0';
	ret = dest_remove(rm, dirfd, name, 0, len);
	atomic_fetch_add(&d->replaced, n);
	free(rm);
	return ret;
}

/* Renames tmp over l's final name (mapped: its mapped path), and removes
 * tmp if that fails. A directory at the name is made room for, with
 * o.replace. */
static int dest_rename_tmp(struct dest *d, const struct dest_loc *l, const char *tmp,
			   const char *mapped)
{
	struct stat st;
	int ret = 0;

	if (renameat(l->dirfd, tmp, l->dirfd, l->name) == 0)
		return 0;
	ret = -errno;
	if (ret == -EISDIR && d->o.replace &&
	    fstatat(l->dirfd, l->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	    (ret = dest_make_room(d, l->dirfd, l->name, mapped)) == 0 &&
	    renameat(l->dirfd, tmp, l->dirfd, l->name) != 0)
		ret = -errno;
	if (ret < 0)
		(void)unlinkat(l->dirfd, tmp, 0);
	return ret;
}

/* Makes a symlink to target (not NULL) or a special file (mode, dev) under
 * a fresh temporary name in l's parent, sets its attributes, and renames
 * it over l's name; nothing is left under the temporary name on failure.
 * Returns 0 or -errno, with the message in err. */
static int dest_node(struct dest *d, struct dest_loc *l, const struct proto_entry *e,
		     const char *target, mode_t mode, dev_t dev, const char *what,
		     struct pc_err *err)
{
	char tmp[TMPFILE_NAME_CAP];
	int ret = -EEXIST;

	for (int i = 0, tries = 0; i < DEST_TRIES && ret == -EEXIST; i++) {
		ret = tmpfile_name(l->name, tmp);
		if (ret < 0)
			break;
		if (target != NULL ? symlinkat(target, l->dirfd, tmp)
				   : mknodat(l->dirfd, tmp, mode, dev))
			ret = -errno;
		if (dest_retry(d, l, &ret, tries++, what, err))
			ret = -EEXIST;   /* go round again in the directory opened anew */
	}
	if (ret == 0) {
		ret = dest_attrs_at(d, l->dirfd, tmp, e, target == NULL);
		if (ret < 0)
			(void)unlinkat(l->dirfd, tmp, 0);
		else
			ret = dest_rename_tmp(d, l, tmp, l->path);
	}
	return ret < 0 ? dest_fail(d, l->path, ret, what, err) : 0;
}

int dest_symlink(struct dest *d, const struct proto_entry *e, struct pc_err *err)
{
	struct dest_loc l;
	size_t tlen = strnlen(e->target, PROTO_MAX_PATH + 1);
	int ret = dest_begin(d, e, PROTO_ENT_SYMLINK, PROTO_ENT_SYMLINK, &l,
			     "cannot create symlink", err);

	if (ret == 0 && (tlen == 0 || tlen > PROTO_MAX_PATH))
		ret = dest_fail(d, l.path, -PC_E_PROTO, "bad target for symlink", err);
	if (ret == 0)
		ret = dest_node(d, &l, e, e->target, 0, 0, "cannot create symlink", err);
	dest_dir_put(d, l.dir);
	return ret;
}

int dest_special(struct dest *d, const struct proto_entry *e, struct pc_err *err)
{
	static const mode_t kinds[] = {
		[PROTO_ENT_FIFO] = S_IFIFO, [PROTO_ENT_CHR] = S_IFCHR,
		[PROTO_ENT_BLK] = S_IFBLK, [PROTO_ENT_SOCK] = S_IFSOCK,
	};
	bool device = e->type == PROTO_ENT_CHR || e->type == PROTO_ENT_BLK;
	char disp[PROTO_MAX_PATH + 1];
	struct dest_loc l;
	int ret = dest_map(d, e->path, &l, err);

	if (ret < 0)
		return ret;
	if (e->type >= sizeof(kinds) / sizeof(kinds[0]) || kinds[e->type] == 0)
		return dest_fail(d, l.path, -PC_E_PROTO, "wrong entry type for", err);
	if (device && (!d->as_root || d->o.strip_setid))
		return pc_err_set(err, -EPERM, "cannot create device '%s': %s",
				  dest_display(d, l.path, disp, sizeof(disp)),
				  d->as_root ? "this server never creates devices"
					     : "only root can create devices");
	ret = dest_dir_get(d, &l, "cannot create special file", err);
	if (ret == 0)
		ret = dest_node(d, &l, e, NULL, kinds[e->type] | 0600,
				device ? (dev_t)e->rdev : 0, "cannot create special file", err);
	dest_dir_put(d, l.dir);
	return ret;
}

/* Whether dd (NULL: the root) is a directory this copy made and has not
 * finished yet (dest_mkdir; its dest_dir_end is still to come). */
static bool dest_dir_made(struct dest *d, struct dest_dir *dd)
{
	bool made = false;

	if (dd != NULL) {
		sync_lock(&d->lock);
		made = dd->created;
		sync_unlock(&d->lock);
	}
	return made;
}

int dest_hardlink(struct dest *d, const char *target_path, const struct proto_entry *e,
		  struct pc_err *err)
{
	struct dest_loc l, t;
	char tmp[TMPFILE_NAME_CAP];
	int ret = dest_begin(d, e, PROTO_ENT_HARDLINK, PROTO_ENT_HARDLINK, &l,
			     "cannot create hard link", err);

	t.dir = NULL;
	if (ret == 0)
		ret = dest_map(d, target_path, &t, err);
	if (ret == 0)
		ret = dest_dir_get(d, &t, "cannot create hard link to", err);
	if (ret < 0)
		goto out;
	/* A device (or FIFO, socket, a symlink to one) at the destination
	 * the user named is not replaced, by a link no more than by a file.
	 * Its target is never such a device: every other name lies beneath
	 * the named destination, which is then no device but a directory. */
	int node = dest_node_at(d, l.dirfd, l.name, l.path);
	if (node != DEST_NODE_NONE) {
		char disp[PROTO_MAX_PATH + 1];
		dest_display(d, l.path, disp, sizeof(disp));
		ret = pc_err_set(err, -ESPIPE, "cannot create hard link '%s': a device, FIFO or "
				 "socket (or a symlink to one) is at its name, and pcopy does not "
				 "replace one", disp);
		goto out;
	}
	/* Straight to the final name when nothing is there. Else a temporary
	 * name renamed over it; if the final name already was this same
	 * file, rename does nothing and the temporary name must go. */
	if (linkat(t.dirfd, t.name, l.dirfd, l.name, 0) == 0)
		goto out;
	ret = -errno;
	for (int i = 0; i < DEST_TRIES && ret == -EEXIST; i++) {
		ret = tmpfile_name(l.name, tmp);
		if (ret == 0 && linkat(t.dirfd, t.name, l.dirfd, tmp, 0) != 0)
			ret = -errno;
		if (ret == 0) {
			ret = dest_rename_tmp(d, &l, tmp, l.path);
			(void)unlinkat(l.dirfd, tmp, 0);
			break;
		}
	}
	if (ret < 0)
		dest_fail(d, l.path, ret, "cannot create hard link", err);
out:
	dest_dir_put(d, t.dir);
	dest_dir_put(d, l.dir);
	return ret;
}

/* ---- Regular files ---------------------------------------------------- */

int dest_file_open(struct dest *d, const char *path, struct dest_file **out, struct pc_err *err)
{
	struct dest_loc l;
	struct dest_file *f = NULL;
	size_t n;
	int ret = dest_map(d, path, &l, err);

	*out = NULL;
	if (ret == 0)
		ret = dest_dir_get(d, &l, "cannot create", err);
	if (ret < 0)
		return ret;
	n = strlen(l.path);
	f = calloc(1, sizeof(*f) + n + 1); /* placed false, and every other field set below */
	if (f == NULL) {
		dest_dir_put(d, l.dir);
		return dest_fail(d, l.path, -ENOMEM, "cannot create", err);
	}
	memcpy(f->path, l.path, n + 1);
	f->name = f->path + (size_t)(l.name - l.path);
	f->jrnl[0] = '\0';
	f->fresh = true;
	f->whole = -1;
	f->fd = -1;
	/* In a directory this copy made (mode 0700 until its end) nothing
	 * else can stand: no look needed for the many files of a new tree. */
	int node = dest_dir_made(d, l.dir) ? DEST_NODE_NONE
					    : dest_node_at(d, l.dirfd, l.name, l.path);
	if (node != DEST_NODE_NONE) {
		ret = node == DEST_NODE_DEVICE ? dest_device_open(d, &l, f, err)
					       : dest_node_refused(d, l.path, node, err);
		f->fresh = false;
		f->dir = l.dir;
		f->dirfd = l.dirfd;
		if (ret < 0) {
			dest_file_abort(d, f);
			return ret;
		}
		*out = f;
		return 0;
	}
	for (int tries = 0;; tries++) {
		f->fd = tmpfile_open(l.dirfd, f->name, f->tmp);
		if (f->fd >= 0 || !dest_retry(d, &l, &f->fd, tries, "cannot create", err))
			break;
	}
	f->dir = l.dir;
	f->dirfd = l.dirfd;
	if (f->fd < 0) {
		ret = dest_fail(d, f->path, f->fd, "cannot create", err);
		dest_dir_put(d, f->dir);
		free(f);
		return ret;
	}
	*out = f;
	return 0;
}

int dest_file_fd(const struct dest_file *f)
{
	return f->fd;
}

bool dest_file_device(const struct dest_file *f)
{
	return f->device;
}

int dest_file_write_whole(struct dest_file *f, const void *p, uint64_t size)
{
	int ret = platform_pwrite_full(f->fd, p, size, 0);

	if (ret == 0 && f->fresh && size <= (uint64_t)INT64_MAX)
		f->whole = (int64_t)size;
	return ret;
}

/* Whether name in dirfd is still the file (dev, ino), not followed. */
static bool dest_name_is(int dirfd, const char *name, dev_t dev, ino_t ino)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev &&
	       st.st_ino == ino;
}

/* -a: removes f's partial file and journal by name, each only while the
 * name is still f's (another run may have made its own there since). */
static void dest_part_unlink(struct dest_file *f)
{
	if (f->tmp[0] != '\0' && dest_name_is(f->dirfd, f->tmp, f->pdev, f->pino))
		(void)unlinkat(f->dirfd, f->tmp, 0);
	if (f->jrnl[0] != '\0' && dest_name_is(f->dirfd, f->jrnl, f->jdev, f->jino))
		(void)unlinkat(f->dirfd, f->jrnl, 0);
	f->tmp[0] = '\0';
	f->jrnl[0] = '\0';
}

/* Gives f (attributes set, size bytes) its final name. Returns 0 or
 * -errno (-EBUSY: the partial file's name is another run's now); on
 * failure f->tmp may still name it. A big file keeps hold of what it
 * replaces across the rename, for d's closer to let go of. */
static int dest_file_name(struct dest *d, struct dest_file *f, uint64_t size)
{
	const struct dest_loc l = { .dirfd = f->dirfd, .name = f->name };
	int ret, old = -1;

	/* -a: the partial file is renamed by its name, which must still be
	 * ours: never another run's file in its place. */
	if (f->jrnl[0] != '\0' && !dest_name_is(f->dirfd, f->tmp, f->pdev, f->pino)) {
		f->tmp[0] = '\0';
		return -EBUSY;
	}
	if (f->tmp[0] == '\0') {
		ret = tmpfile_link(f->fd, f->dirfd, f->name);
		if (ret != -EEXIST)
			return ret;
		ret = tmpfile_link_tmp(f->fd, f->dirfd, f->name, f->tmp);
		if (ret < 0)
			return ret;
	}
	if (size >= DEST_RETIRE_MIN)
		old = openat(f->dirfd, f->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	ret = dest_rename_tmp(d, &l, f->tmp, f->path);
	f->tmp[0] = '\0';   /* renamed, or removed by dest_rename_tmp */
	if (old >= 0)
		closer_put(d->closer, old);
	return ret;
}

int dest_file_commit(struct dest *d, struct dest_file *f, const struct proto_entry *e,
		     uint64_t size, struct pc_err *err)
{
	const char *what = "cannot finish";
	int ret = 0;

	if (e->type != PROTO_ENT_REG)
		ret = -PC_E_PROTO;
	else if (size > (uint64_t)INT64_MAX)
		ret = -EFBIG;
	else if (!f->device && (size > 0 || f->placed) && f->whole != (int64_t)size &&
		 ftruncate(f->fd, (off_t)size) != 0)
		ret = -errno;
	if (ret == 0 && !f->device) {
		ret = dest_attrs_fd(d, f->fd, e, dest_mode(d, e), NULL);
		what = "cannot set the attributes of";
	}
	if (ret == 0 && !f->placed) {
		ret = dest_file_name(d, f, size);
		what = "cannot finish";
	}
	if (ret == 0 && f->jrnl[0] != '\0')
		dest_part_unlink(f); /* in place: nothing left to resume */
	if (close(f->fd) != 0 && ret == 0)
		ret = -errno;
	f->fd = -1;
	if (ret == -EBUSY) {
		char disp[PROTO_MAX_PATH + 1];
		dest_display(d, f->path, disp, sizeof(disp));
		pc_err_set(err, ret, "cannot finish '%s': another pcopy -a took its partial file "
			   "over", disp);
	} else if (ret < 0) {
		dest_fail(d, f->path, ret, what, err);
	}
	dest_file_abort(d, f);
	return ret;
}

void dest_file_abort(struct dest *d, struct dest_file *f)
{
	if (f == NULL)
		return;
	if (f->fd >= 0)
		close(f->fd);
	if (f->jrnl[0] != '\0')
		dest_part_unlink(f);
	if (f->tmp[0] != '\0')
		(void)unlinkat(f->dirfd, f->tmp, 0);
	dest_dir_put(d, f->dir);
	free(f);
}

void dest_file_drop(struct dest *d, struct dest_file *f)
{
	struct stat st;

	if (f != NULL && f->fd >= 0 && !f->placed && f->jrnl[0] == '\0' &&
	    fstat(f->fd, &st) == 0 && st.st_size >= (off_t)DEST_RETIRE_MIN) {
		if (f->tmp[0] != '\0')
			(void)unlinkat(f->dirfd, f->tmp, 0);
		f->tmp[0] = '\0';
		closer_put(d->closer, f->fd);
		f->fd = -1;
	}
	dest_file_abort(d, f);
}

void dest_file_keep(struct dest *d, struct dest_file *f)
{
	if (f == NULL)
		return;
	f->tmp[0] = '\0';
	f->jrnl[0] = '\0';
	dest_file_abort(d, f);
}

/* ---- Partial files (-a) ------------------------------------------------ */

/* A dest_file for l (whose parent reference it takes over) without a
 * file yet, or NULL (ENOMEM: l's reference is dropped). */
static struct dest_file *dest_file_new(struct dest *d, struct dest_loc *l)
{
	size_t n = strlen(l->path);
	struct dest_file *f = calloc(1, sizeof(*f) + n + 1); /* not fresh, not placed */

	if (f == NULL) {
		dest_dir_put(d, l->dir);
		return NULL;
	}
	memcpy(f->path, l->path, n + 1);
	f->name = f->path + (size_t)(l->name - l->path);
	f->dir = l->dir;
	f->dirfd = l->dirfd;
	f->fd = -1;
	f->whole = -1;
	journal_names(f->name, f->tmp, f->jrnl);
	return f;
}

/* Opens name in dirfd for reading and writing if it is a regular file of
 * ours with one link, never following a symlink. Returns the fd, or
 * -ENOENT, or -EPERM (something else is there), or -errno. */
static int dest_part_openat(int dirfd, const char *name)
{
	struct stat st;
	int fd = dest_open_regular(dirfd, name, O_RDWR, &st);

	if (fd >= 0 && (st.st_nlink != 1 || st.st_uid != geteuid())) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* -a: takes the lock of a journal (jfd) that a run holds as long as its
 * journal is open, so that two runs never share a partial file. Returns 0,
 * or -EBUSY when another run holds it. */
static int dest_jrnl_lock(int jfd)
{
	if (flock(jfd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	/* A file system without locks: the names' identities still guard. */
	return errno == EWOULDBLOCK ? -EBUSY : 0;
}

/* -a: whether another run holds the journal named jrnl in dirfd. */
static bool dest_jrnl_busy(int dirfd, const char *jrnl)
{
	int fd = dest_part_openat(dirfd, jrnl);
	bool busy = fd >= 0 && dest_jrnl_lock(fd) == -EBUSY;

	if (fd >= 0)
		close(fd);
	return busy;
}

/* -a: records the identities of f's partial file (f->fd) and journal
 * (jfd). Returns 0 or -errno. */
static int dest_part_ids(struct dest_file *f, int jfd)
{
	struct stat ps, js;

	if (fstat(f->fd, &ps) != 0 || fstat(jfd, &js) != 0)
		return -errno;
	f->pdev = ps.st_dev;
	f->pino = ps.st_ino;
	f->jdev = js.st_dev;
	f->jino = js.st_ino;
	return 0;
}

/* -a: the error for a file another run is writing. */
static int dest_part_busy(struct dest *d, const struct dest_file *f, struct pc_err *err)
{
	char disp[PROTO_MAX_PATH + 1];

	dest_display(d, f->path, disp, sizeof(disp));
	return pc_err_set(err, -EBUSY, "cannot write '%s': another pcopy -a is writing it (its "
			  "journal %s is locked)", disp, f->jrnl);
}

/* A dest_file for e's name, without a file yet, in *f. Returns 1, 0 when
 * its parent cannot be reached (writing it will say why), or -ENOMEM. */
static int dest_file_for(struct dest *d, const struct proto_entry *e, struct dest_file **f)
{
	struct dest_loc l;
	struct pc_err err;
	int ret;

	pc_err_init(&err);
	ret = dest_begin(d, e, PROTO_ENT_REG, PROTO_ENT_REG, &l, "cannot look at", &err);
	pc_err_destroy(&err);
	if (ret < 0)
		return 0;
	*f = dest_file_new(d, &l);
	return *f != NULL ? 1 : -ENOMEM;
}

/* The regular file with one link at e's path (a REG entry of known size),
 * opened with flags as a dest_file at its final name: 1 with *out and
 * *st, 0 when there is none such, or -ENOMEM. One link only: a file
 * written in place, or given attributes, through a hard link would change
 * another name too, perhaps one outside the destination. */
static int dest_open_placed(struct dest *d, const struct proto_entry *e, int flags,
			    struct dest_file **out, struct stat *st)
{
	struct dest_file *f;
	int ret;

	*out = NULL;
	if (e->type != PROTO_ENT_REG || (e->flags & PROTO_ENT_SIZE_UNKNOWN))
		return 0;
	if ((ret = dest_file_for(d, e, &f)) <= 0)
		return ret;
	f->tmp[0] = '\0';
	f->jrnl[0] = '\0';
	f->placed = true;
	f->fd = dest_open_regular(f->dirfd, f->name, flags, st);
	if (f->fd >= 0 && st->st_nlink == 1) {
		*out = f;
		return 1;
	}
	dest_file_abort(d, f); /* closes it; no name of it goes */
	return 0;
}

int dest_open_inplace(struct dest *d, const struct proto_entry *e, struct dest_file **out,
		      uint64_t *size)
{
	struct stat st;
	int ret = dest_open_placed(d, e, O_RDWR | O_NOATIME, out, &st); /* hashed: dest_open_old */

	*size = ret == 1 ? (uint64_t)st.st_size : 0;
	return ret;
}

int dest_open_same(struct dest *d, const struct proto_entry *e, const struct dest_ident *id,
		   struct dest_file **out)
{
	struct stat st;
	int ret = dest_open_placed(d, e, O_RDONLY | O_NOATIME, out, &st);

	if (ret == 1 && !(st.st_dev == id->dev && st.st_ino == id->ino && st.st_size == id->size &&
			  dest_ts_equal(st.st_mtim, id->mtime) &&
			  dest_ts_equal(st.st_ctim, id->ctime))) {
		dest_file_abort(d, *out);
		*out = NULL;
		ret = 0;
	}
	return ret;
}

int dest_same_settle(struct dest *d, struct dest_file *f, const struct proto_entry *e,
		     struct pc_err *err)
{
	struct stat st;
	int ret = fstat(f->fd, &st) == 0 ? 0 : -errno;

	if (ret == 0)
		ret = dest_attrs_fd(d, f->fd, e, dest_mode(d, e), &st);
	if (ret < 0)
		dest_fail(d, f->path, ret, "cannot set the attributes of", err);
	dest_file_abort(d, f); /* closes it; it stays where it is */
	return ret;
}

int dest_part_find(struct dest *d, const struct proto_entry *e, const struct journal_id *id,
		   struct dest_file **out, struct journal **j, char *note, size_t cap)
{
	const char *why = NULL;
	struct dest_file *f;
	int ret, jfd;

	*out = NULL;
	*j = NULL;
	note[0] = '\0';
	if ((ret = dest_file_for(d, e, &f)) <= 0)
		return ret;
	/* A device or FIFO at the name: no partial file is ever renamed over
	 * it (dest_part_create says what becomes of the file). */
	if (dest_node_at(d, f->dirfd, f->name, f->path) != DEST_NODE_NONE) {
		dest_file_keep(d, f);
		return 0;
	}
	jfd = dest_part_openat(f->dirfd, f->jrnl);
	if (jfd == -EPERM)
		why = "is not a file of ours";
	/* Another run's, under way: nothing of it is ours to take or remove
	 * (writing the file says so). */
	if (jfd >= 0 && dest_jrnl_lock(jfd) == -EBUSY) {
		close(jfd);
		dest_file_keep(d, f);
		return -EBUSY;
	}
	/* The lock is held until what it guards is decided: a second fd of
	 * the same open file keeps it when journal_load closes jfd. */
	int lockfd = jfd >= 0 ? fcntl(jfd, F_DUPFD_CLOEXEC, 0) : -1;
	if (jfd >= 0)
		ret = journal_load(jfd, id, j, &why);
	else
		ret = jfd == -ENOENT || jfd == -EPERM ? JOURNAL_BAD : jfd;
	if (ret == JOURNAL_OK) {
		f->fd = dest_part_openat(f->dirfd, f->tmp);
		if (f->fd >= 0 && dest_part_ids(f, (*j)->fd) == 0) {
			if (lockfd >= 0)
				close(lockfd); /* the journal's fd holds the lock */
			*out = f;
			return 1;
		}
		why = f->fd == -ENOENT ? NULL : "has a partial file that is not a file of ours";
		journal_free(*j);
		*j = NULL;
		ret = JOURNAL_BAD;
	}
	if (ret < 0) {
		if (lockfd >= 0)
			close(lockfd);
		dest_file_keep(d, f);
		return ret;
	}
	if (why != NULL && ret == JOURNAL_BAD) {
		char disp[PROTO_MAX_PATH + 1];
		dest_display(d, f->path, disp, sizeof(disp));
		snprintf(note, cap, "the journal of '%s' (%s) %s: it is removed and the file "
			 "copied afresh", disp, f->jrnl, why);
	}
	/* Nothing to resume from: what an earlier run left goes, the journal
	 * last and still locked, so that no other run makes its own files
	 * under these names meanwhile. */
	(void)unlinkat(f->dirfd, f->tmp, 0);
	(void)unlinkat(f->dirfd, f->jrnl, 0);
	if (lockfd >= 0)
		close(lockfd);
	dest_file_keep(d, f);
	return 0;
}

int dest_part_create(struct dest *d, const char *path, const struct journal_id *id,
		     struct dest_file **out, struct journal **j, struct pc_err *err)
{
	struct dest_file *f;
	struct dest_loc l;
	int ret = dest_map(d, path, &l, err), jfd;

	*out = NULL;
	*j = NULL;
	if (ret == 0)
		ret = dest_dir_get(d, &l, "cannot create", err);
	if (ret < 0)
		return ret;
	f = dest_file_new(d, &l);
	if (f == NULL)
		return dest_fail(d, l.path, -ENOMEM, "cannot create", err);
	int node = dest_node_at(d, f->dirfd, f->name, f->path);
	if (node != DEST_NODE_NONE) {
		/* Nothing to resume into a device: written as without -a. */
		ret = node == DEST_NODE_DEVICE ? dest_device_open(d, &l, f, err)
					       : dest_node_refused(d, l.path, node, err);
		if (ret < 0) {
			dest_file_keep(d, f);
			return ret;
		}
		*out = f;
		return 0;
	}
	if (dest_jrnl_busy(f->dirfd, f->jrnl)) {
		ret = dest_part_busy(d, f, err);
		dest_file_keep(d, f);
		return ret;
	}
	for (int tries = 0; tries < 2; tries++) {
		(void)unlinkat(f->dirfd, f->jrnl, 0);
		(void)unlinkat(f->dirfd, f->tmp, 0);
		f->fd = openat(f->dirfd, f->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
			       O_CLOEXEC, 0600);
		ret = f->fd >= 0 ? 0 : -errno;
		/* A read-only directory of ours: see dest_retry. */
		if (ret != -EACCES || tries > 0 || f->dir == NULL || !dest_open_up(d, f->dir))
			break;
	}
	jfd = ret == 0 ? openat(f->dirfd, f->jrnl, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
				O_CLOEXEC, 0600) : -1;
	if (ret == 0 && jfd < 0)
		ret = -errno;
	/* Only what this call made is removed on failure: a name that was
	 * there and could not go, or that another run took meanwhile, is not
	 * ours. */
	bool made_part = f->fd >= 0, made_jrnl = jfd >= 0;
	if (ret == 0)
		ret = dest_jrnl_lock(jfd);
	if (ret == 0)
		ret = dest_part_ids(f, jfd);
	if (ret == 0) {
		ret = journal_create(jfd, id, j); /* takes jfd, or closes it */
		jfd = -1;
	}
	if (ret < 0) {
		if (jfd >= 0)
			close(jfd);
		if (made_jrnl)
			(void)unlinkat(f->dirfd, f->jrnl, 0);
		if (made_part)
			(void)unlinkat(f->dirfd, f->tmp, 0);
		if (ret == -EEXIST) {
			/* Something there that could not go (a directory, another
			 * user's file in a sticky directory): name it. */
			char disp[PROTO_MAX_PATH + 1];
			dest_display(d, f->path, disp, sizeof(disp));
			pc_err_set(err, ret, "cannot write '%s': -a keeps its partial file as %s, and "
				   "something that cannot be removed is there", disp,
				   made_part ? f->jrnl : f->tmp);
		} else {
			dest_fail(d, f->path, ret, "cannot create", err);
		}
		f->tmp[0] = '\0';
		f->jrnl[0] = '\0';
		dest_file_abort(d, f);
		return ret;
	}
	*out = f;
	return 0;
}

/* ---- Life ------------------------------------------------------------- */

struct dest *dest_new(int rootfd, const char *rename_top, const struct dest_opts *o,
		      const char *display)
{
	struct dest *d;

	if (rename_top != NULL && pathsafe_check_name(rename_top) != 0) {
		errno = EINVAL;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return NULL;
	d->rootfd = rootfd;
	d->o = *o;
	d->as_root = geteuid() == 0;
	d->display = strdup(display);
	d->top = rename_top != NULL ? strdup(rename_top) : NULL;
	d->closer = closer_new();
	if (d->display == NULL || (rename_top != NULL && d->top == NULL) || d->closer == NULL ||
	    pthread_mutex_init(&d->lock, NULL) != 0) {
		closer_free(d->closer);
		free(d->display);
		free(d->top);
		free(d);
		errno = ENOMEM;
		return NULL;
	}
	if (pthread_mutex_init(&d->idlock, NULL) != 0) {
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&d->lock));
		closer_free(d->closer);
		free(d->display);
		free(d->top);
		free(d);
		errno = ENOMEM;
		return NULL;
	}
	return d;
}

void dest_free(struct dest *d)
{
	if (d == NULL)
		return;
	closer_free(d->closer); /* the old files it holds go now */
	for (unsigned i = 0; i < DEST_BUCKETS; i++) {
		while (d->table[i] != NULL) {
			struct dest_dir *dd = d->table[i];

			d->table[i] = dd->next;
			if (dd->fd >= 0)
				close(dd->fd);
			free(dd);
		}
	}
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&d->lock));
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&d->idlock));
	free(d->display);
	free(d->top);
	free(d);
}

uint64_t dest_replaced(struct dest *d)
{
	return atomic_load(&d->replaced);
}
