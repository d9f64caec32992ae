/* SPDX-License-Identifier: Apache-2.0 */
/* dest: the sink's side of a tree (pcopy -r). Creates the entries a source
 * announces (directories, files, symlinks, hard links, special files)
 * beneath a destination directory, safely and with their attributes.
 *
 * The sink never trusts the wire. Every path must pass proto_check_relpath;
 * its parent directory is opened beneath the root with openat2
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS (or an
 * O_NOFOLLOW component walk where openat2 is missing:
 * pathsafe_open_nolinks), so a symlink anywhere on the way, even one this
 * session created, fails the entry with -ELOOP and nothing is written
 * outside. Every final-name operation (mkdirat, symlinkat, mknodat, linkat,
 * renameat) works on the last component relative to that parent fd, so the
 * last component is never followed either. Names appear complete: a file,
 * symlink, special file or hard link is made under an unnamed O_TMPFILE
 * inode or a ".NAME.pcopy-XXXXXX" temporary name first and renamed over
 * the final name (or linked straight to it when nothing is there), and a
 * failure leaves no temporary name behind.
 *
 * Directory fds are kept in a cache keyed by the parent's path (after
 * rename_top): at most DEST_CACHE_IDLE fds not in use stay open (least
 * recently used closed first); an fd in use by any caller is never closed
 * under it, so the cache may hold more while many are in use. A directory
 * removed or replaced behind our back is reached again through openat2 on
 * the next miss; an fd already held keeps pointing at the directory it
 * was opened on, never through a new symlink.
 *
 * Attributes. Without preserve, files and new directories get mode & 0777 &
 * ~umask (cp's rule; a new directory keeps the set-group-ID bit it
 * inherited), existing directories keep their mode, times and owner are
 * not set. With preserve: mode & 07777 (without S_ISUID/S_ISGID if
 * strip_setid), times with nanoseconds, and, when the process runs as root
 * (euid 0 at dest_new), the owner: the user and group names mapped to ids
 * here (getpwnam_r/getgrnam_r, cached), falling back to the numeric id
 * when a name is empty or unknown (rsync's rule), or the numeric ids
 * alone with numeric_ids.
 *
 * Thread safety: after dest_new, every function may be called from any
 * number of threads at once, on different entries. The caller orders what
 * depends on order: a directory's dest_mkdir before anything in it, its
 * dest_dir_end after everything in it is finished, a hard link after its
 * target's dest_file_commit.
 *
 * Assumption: the process umask leaves the owner's bits alone (u=rwx), so
 * that the 0700 directories and 0600 files made here are ours to fill. */
#ifndef PCOPY_DEST_H
#define PCOPY_DEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "sys/err.h"
#include "wire/proto.h"

/* Idle directory fds the cache keeps open. */
#define DEST_CACHE_IDLE 64u

struct dest_opts {
	bool preserve;       /* -p: modes exactly (07777), times, and owner/group when root */
	bool numeric_ids;    /* with preserve as root: use uid/gid, not the names */
	bool times;          /* -u: files get the source's times even without preserve, so
	                        that the next -u finds them unchanged */
	bool strip_setid;    /* daemon: never apply S_ISUID/S_ISGID even with -p, and never
	                        create a device (CHR/BLK), whatever the euid */
	mode_t umask;        /* without -p: new files and dirs get mode & 0777 & ~umask */
	bool dry_run;        /* -n: the looks below change nothing */
	bool replace;        /* --delete: what stands in the way of an entry of another
	                        kind goes first, as rsync makes room: a directory where a
	                        file or link goes, with all in it, and a file or symlink
	                        where a directory goes (never followed) */
};

struct dest;
struct dest_file;

/* rootfd: the directory the top-level names go in (borrowed: it must stay
 * open until dest_free). rename_top: NULL keeps the first path component;
 * else it replaces the first component of every path (the copy of source X
 * becomes DST itself: `cp -r X DST` when DST does not exist); it must be a
 * single name (pathsafe_check_name). display: the destination as the user
 * wrote it, for messages ("DST/..."); copied. Returns NULL with errno
 * ENOMEM, or EINVAL for a bad rename_top. */
struct dest *dest_new(int rootfd, const char *rename_top, const struct dest_opts *o,
		      const char *display);

/* Entries removed so far to make room (dest_opts.replace), for the count
 * of what --delete removed. Thread-safe. */
uint64_t dest_replaced(struct dest *d);

/* Closes the cached fds and frees d. Every dest_file must have been
 * committed or aborted. The big files that commits replaced are let go of
 * on a thread of their own as the copy goes on; those still held go here
 * (freeing them can take a while: call this after the far end has its
 * DONE). dest_free(NULL) is a no-op. */
void dest_free(struct dest *d);

/* Each of the functions below returns 0, or a negative code with a message
 * in err naming the destination path ("'DST/a/x': ..."): -PC_E_PROTO for an
 * entry that breaks the wire's rules (bad path, wrong type, bad times),
 * -ELOOP for a symlink on the path, -EPERM for a device a non-root
 * process cannot create, -errno otherwise. */

/* Whether a regular file of e's size and modification time (to the
 * nanosecond where both sides have them, else to the second) is already
 * at e's path: a REG entry of known size, its path beneath the root with
 * no symlink on the way, and a regular file there, not a link to one.
 * 1 yes, 0 no (anything else, including a path that cannot be looked at:
 * writing it will say why). With preserve (and not dry_run), a file kept
 * takes e's mode, and owner as root, where they differ; 0 if it cannot. */
int dest_unchanged(struct dest *d, const struct proto_entry *e);

/* -u: whether e, a FIFO, SOCK, CHR or BLK entry, is at its name already:
 * a node of its kind (and device number), given e's mode and owner as
 * dest_unchanged does. 1 yes, 0 no (anything else). */
int dest_same_special(struct dest *d, const struct proto_entry *e);

/* Which file a name held, and as it was then: a file whose inode,
 * size, mtime and ctime are all still these has not been written since
 * (a write moves its ctime, which no one but the kernel sets), but for
 * what the times cannot show: a write through a shared mapping that
 * moves neither (tmpfs), or one within the same tick of a file system
 * whose times are coarse. -e reads a kept file back for those. */
struct dest_ident {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

/* --checksum: opens for reading the regular file (not a symlink, nor a
 * link to one) that is already at e's path, a REG entry of known size,
 * beneath the root with no symlink on the way. Returns 1 with *fd (the
 * caller's to close), its *size and, if id is not NULL, its *id; 0 when
 * nothing of the kind is there (or its parent cannot be reached), or
 * -errno. */
int dest_open_old(struct dest *d, const struct proto_entry *e, int *fd, uint64_t *size,
		  struct dest_ident *id);

/* --checksum, once every block of e matched the file that was at its
 * path (id, from dest_open_old): opens that file for reading if it is
 * still there as it was, a regular file with one link (attributes set on
 * one with more would show through its other names). Returns 1 with *out
 * (for dest_same_settle), 0 when it is not (the caller puts its new file
 * in place as always), or -ENOMEM. */
int dest_open_same(struct dest *d, const struct proto_entry *e, const struct dest_ident *id,
		   struct dest_file **out);

/* Gives the file of dest_open_same or dest_open_inplace (f, freed here in
 * any case; read it through dest_file_fd first) e's attributes, as
 * dest_file_commit would a new file, but only those it lacks (its atime
 * only with preserve): a file that has them all is not touched at all.
 * Returns 0, or a negative code with the message, which names the file,
 * in err. */
int dest_same_settle(struct dest *d, struct dest_file *f, const struct proto_entry *e,
		     struct pc_err *err);

/* --inplace: e's regular file at the destination, opened for reading and
 * writing as a dest_file whose commit gives it e's size and attributes
 * where it is (no new file, no rename; an abort only closes it). Returns 1
 * with *out and the file's *size, 0 when there is no such file or it
 * cannot be written in place (anything but a regular file with one link,
 * or one we may not open for writing: the caller writes a new file as
 * always), or -ENOMEM. */
int dest_open_inplace(struct dest *d, const struct proto_entry *e, struct dest_file **out,
		      uint64_t *size);

/* e: a DIR entry. Creates the directory 0700, so that it can be filled
 * whatever its final mode (dest_dir_end sets that). An existing directory
 * (not a symlink to one) is fine: the copy merges into it. Anything else
 * under that name is an error (-EEXIST). */
int dest_mkdir(struct dest *d, const struct proto_entry *e, struct pc_err *err);

/* -n: for an entry other than a directory, the error the real run would
 * give because a directory stands at its name (without replace), else 0
 * (a lookup that fails says so). */
int dest_nondir_blocked(struct dest *d, const struct proto_entry *e, struct pc_err *err);

/* -n: whether making e's directory would fail because something that is
 * not a directory stands at its name (a file, a symlink): -EEXIST with the
 * message dest_mkdir would give, else 0 (a lookup that fails says so). */
int dest_dir_blocked(struct dest *d, const struct proto_entry *e, struct pc_err *err);

/* e: the DIR_END entry of a directory (a DIR entry is taken too). Applies
 * the final mode (new directories: mode & 0777 & ~umask without -p;
 * existing ones keep theirs without -p), owner (-p, root) and times (-p).
 * Call it once everything inside is finished: its times would change
 * otherwise, and a final mode such as 0555 would keep us out. */
int dest_dir_end(struct dest *d, const struct proto_entry *e, struct pc_err *err);

/* How dest_prune treats a directory's names. */
struct dest_prune_ops {
	bool (*keep)(void *arg, const char *name, bool is_dir); /* spare this name */
	void (*gone)(void *arg, const char *path); /* NULL, or told each path removed
	                           (or, dry, that would be), as the user sees it */
	void *arg;
	bool dry;             /* -n: remove nothing, only count and tell */
};

/* --delete. e: a DIR_END entry. Lists its directory (opened beneath the
 * root as every parent is, never through a symlink) and removes each name
 * ops->keep refuses: a file, symlink or special file with unlinkat, a
 * directory with everything in it, depth first, each level opened with
 * O_NOFOLLOW relative to its parent (a symlink is removed, never followed),
 * at most DEST_PRUNE_DEPTH levels deep. Adds to *deleted one per name
 * removed, inside removed directories too, and tells ops->gone. Goes on
 * past a name it cannot remove and returns the first error (message in
 * err, naming it), else 0. Call it before dest_dir_end, from one thread
 * for a given directory, once nothing in it is being written. */
#define DEST_PRUNE_DEPTH 1024u
int dest_prune(struct dest *d, const struct proto_entry *e, const struct dest_prune_ops *ops,
	       uint64_t *deleted, struct pc_err *err);

/* -u: whether e, a SYMLINK entry, is at its name already: a symlink whose
 * text is e->target byte for byte (its times are not compared; with
 * preserve as root it is given e's owner, as dest_unchanged does).
 * Looks beneath the root, never through a symlink on the way. */
int dest_same_symlink(struct dest *d, const struct proto_entry *e);

/* -n: what is at e's name now: 0 nothing (or its parent is not there
 * either), 1 a directory, 2 anything else. Looks beneath the root, never
 * through a symlink. */
int dest_exists(struct dest *d, const struct proto_entry *e);

/* e: a SYMLINK entry. symlinkat(e->target) to a temporary name, attributes
 * (-p: owner as root, times, both without following it), renameat over
 * the final name (replacing a file or symlink there; not a directory).
 * The target is stored verbatim and never followed here. */
int dest_symlink(struct dest *d, const struct proto_entry *e, struct pc_err *err);

/* e: a FIFO, SOCK, CHR or BLK entry. mknodat to a temporary name,
 * attributes, renameat over the final name. FIFO and SOCK for anyone;
 * CHR/BLK only as root (else -EPERM with a message) and never with
 * strip_setid. */
int dest_special(struct dest *d, const struct proto_entry *e, struct pc_err *err);

/* e: a HARDLINK entry; target_path: the wire path of an earlier REG that
 * this session created (mapped like every path, opened beneath the root,
 * never through a symlink). Links it straight to the final name when
 * nothing is there, else to a temporary name renamed over the final name. */
int dest_hardlink(struct dest *d, const char *target_path, const struct proto_entry *e,
		  struct pc_err *err);

/* Opens a new regular file to be named path (a wire path): an unnamed
 * O_TMPFILE in its parent directory (or ".NAME.pcopy-XXXXXX" where that is
 * unsupported), mode 0600. *out is owned by the caller until
 * dest_file_commit or dest_file_abort, which every opened file must reach;
 * it holds its parent's directory fd. */
int dest_file_open(struct dest *d, const char *path, struct dest_file **out, struct pc_err *err);

/* The fd to write the file's contents to (pwrite at any offset, from any
 * thread); owned by f. */
int dest_file_fd(const struct dest_file *f);

/* Whether f is a device written into (a character or block device at the
 * name): its old bytes stay where nothing is written, it has no size to
 * set, and a hole must be written as zeros. */
bool dest_file_device(const struct dest_file *f);

/* Writes a file's whole contents, size bytes, into f (fresh from
 * dest_file_open) at offset 0, so that commit need not set its size.
 * Returns 0 or -errno. */
int dest_file_write_whole(struct dest_file *f, const void *p, uint64_t size);

/* Finishes f: ftruncate to size (skipped when size is 0: nothing may have
 * been written past size; and when dest_file_write_whole wrote size bytes
 * into a fresh f), attributes from e (a REG entry; its path is not
 * used: f's is), then gives it its final name atomically: linkat straight
 * to the final name when nothing is there, else a temporary name renamed
 * over it (a file or symlink there is replaced; a directory is an error).
 * A file from dest_open_inplace is at its name already: it is truncated
 * (or extended) to size whatever size is, and not renamed. Closes and
 * frees f, whatever the outcome; on failure nothing of a new f is left
 * under any name (a file written in place stays as it is). */
int dest_file_commit(struct dest *d, struct dest_file *f, const struct proto_entry *e,
		     uint64_t size, struct pc_err *err);

/* Drops f: closes it, removes its temporary name if it has one (and its
 * journal, -a), frees it. dest_file_abort(d, NULL) is a no-op. */
void dest_file_abort(struct dest *d, struct dest_file *f);

/* dest_file_abort for a new file that is complete but not wanted (the old
 * one stays): a big one's last close, which frees its blocks, goes to d's
 * closer rather than the caller's thread. NULL is a no-op. */
void dest_file_drop(struct dest *d, struct dest_file *f);

/* -a: drops f but keeps its partial file and journal where they are, for
 * a later run to resume. NULL is a no-op. */
void dest_file_keep(struct dest *d, struct dest_file *f);

struct journal;
struct journal_id;

/* -a: what an interrupted run left of e (a REG entry) beside its final
 * name, beneath the root with no symlink on the way: a journal for id and
 * its partial file (journal.h), both regular files of this user with one
 * link each. Returns 1 with *out, the partial file as dest_file_open
 * gives one (dest_file_commit puts it in place and removes the journal),
 * and *j, its journal (the caller's); 0 when there is nothing to resume,
 * after removing whatever an earlier run left under those names, with a
 * message for the user in note (cap bytes) if it was not a journal of
 * ours (else note is ""); or -errno (-EBUSY: another run holds that
 * journal, and nothing of it is touched). The journal stays locked
 * (flock) while *j is open. */
int dest_part_find(struct dest *d, const struct proto_entry *e, const struct journal_id *id,
		   struct dest_file **out, struct journal **j, char *note, size_t cap);

/* -a: as dest_file_open, but the new file is the partial file of path, a
 * wire path, beside a fresh journal for id (*j, the caller's, locked while
 * open): named, so that an interrupted run leaves them for the next.
 * Removes what was there under those names first, unless another run
 * holds that journal (-EBUSY, said in err). dest_file_commit renames the
 * partial file, and it or dest_file_abort removes the journal, only while
 * the names are still this run's. */
int dest_part_create(struct dest *d, const char *path, const struct journal_id *id,
		     struct dest_file **out, struct journal **j, struct pc_err *err);

#endif
