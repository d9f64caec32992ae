// SPDX-License-Identifier: Apache-2.0
/* walk: the streaming tree walker of the sending side (issue #10, `-r`).
 *
 * It turns the sources the user named into a sequence of tree entries
 * (struct proto_entry, what ENTRIES carries) and of skips (what SKIP
 * carries), one at a time, without ever listing a whole tree in memory.
 *
 * Order. Sources in the order given. Inside a directory: the DIR entry
 * first (pre-order), then its entries in readdir order (no sort), each
 * subdirectory walked completely before the next entry, then a DIR_END with
 * the same path. Every entry yielded, DIR_END included, takes the next id:
 * 0, 1, 2, ... with no gap; skips take none. A DIR_END carries the
 * directory's attributes as read when the walk entered it (fstat of the
 * open directory), the same as its DIR.
 *
 * Memory. One open directory stream (and its fd) per level of the current
 * path and the directory's attributes for its DIR_END, so O(depth), at most
 * WALK_MAX_DEPTH levels; one O_PATH fd per distinct base directory (the
 * items' base_fd: a source's parent, or the source itself, see open_path;
 * at most one per source, shared when equal); the -H map, which holds only regular files
 * with st_nlink > 1 and forgets one once all its links have been seen; and
 * two fixed 64-slot caches of user and group names. Nothing grows with the
 * number of files. walk_stats reports the walker's own accounting.
 *
 * Resolution. Every lookup is relative to a directory fd: fstatat, openat,
 * readlinkat on the parent's fd, never a path from the top (but for a
 * followed symlink beneath a daemon's root, below). Without -L no
 * symlink inside a tree is followed (a symlink is an entry); a symlink that
 * is a top-level source is a SYMLINK entry too (as cp -rP), unless the
 * argument ends in '/': "link/" names the directory link points to, as path
 * resolution has it (and "file/" is a skip, ENOTDIR). With -L every
 * symlink is followed; when `beneath` is set (a daemon), a followed symlink
 * is resolved beneath the daemon's root (pathsafe_open), so it can never
 * lead outside it: one that would is a skip. A FIFO is never opened, so the
 * walk never blocks on one.
 *
 * Skips (walk_next returns 2, the walk goes on), each with a message that
 * names the path as the user would write it (walk_item.display):
 *   - a top-level source that cannot be found or accessed (ENOENT included),
 *     or a non-directory named with a trailing '/';
 *     in beneath mode one that is not a clean relative path or leads outside
 *     the root ("source 'X' leads outside the served directory");
 *   - "/" itself, or a "."/".." source that is "/" ("cannot copy the root
 *     directory '/'; name what is in it", -EINVAL);
 *   - a directory without -r ("omitting directory 'X' (use -r to copy it)",
 *     -EISDIR);
 *   - a FIFO, socket or device without -p ("skipping special file 'X' (use
 *     -p to copy FIFOs, sockets and devices)", -EOPNOTSUPP);
 *   - a directory that cannot be opened: no DIR, no DIR_END, nothing inside;
 *   - a directory whose readdir fails midway: a skip, then its DIR_END
 *     (what was read before the failure has been yielded);
 *   - an entry whose fstatat or readlinkat fails with anything but ENOENT;
 *   - with -L, a symlink that cannot be followed (dangling, a loop of
 *     symlinks: "cannot follow symlink 'X': ...");
 *   - a directory that is its own ancestor (same st_dev/st_ino as a
 *     directory on the current path; with -L through a symlink, or a bind
 *     mount): "'X' is a loop back to 'Y'", -ELOOP;
 *   - a directory deeper than WALK_MAX_DEPTH levels, a path longer than
 *     PROTO_MAX_PATH bytes or a name longer than 255 bytes: -ENAMETOOLONG;
 *   - a symlink whose text is empty or longer than PROTO_MAX_PATH.
 * Silently dropped: an entry inside a tree that vanished (ENOENT) between
 * readdir and its fstatat, readlinkat or open, as rsync drops "vanished"
 * files; it was not there to copy. "." and ".." from readdir.
 *
 * Not the walker's business: opening regular files (the reader opens each
 * REG lazily from base_fd and open_path, and reports one it cannot read with
 * FILE_FAIL), streams ("-", top-level FIFOs and devices the caller opens up
 * front and does not pass here), SIZE_UNKNOWN (never set). */
#ifndef PCOPY_WALK_H
#define PCOPY_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/proto.h"
#include "sys/err.h"
#include "wire/proto.h"

#define WALK_MAX_DEPTH 1024u /* directory levels below a source; deeper: a skip */

struct filter;

struct walk_opts {
	bool recursive; /* -r: descend into directory sources; else a directory source is a
			   skip "omitting directory 'X' (use -r to copy it)" */
	bool deref;     /* -L: follow symlinks (stat, not lstat); loops (an ancestor's
			   dev/ino) are skips */
	bool hardlinks; /* -H: a REG with st_nlink > 1 seen before -> HARDLINK to the first
			   one's id; every REG with st_nlink > 1 gets flags LINKED */
	bool specials;  /* -p: FIFOs, sockets and devices become entries (FIFO/SOCK/CHR/
			   BLK); without it each is a skip */
	bool partials;  /* -a: a name of the form of the sink's partial files and their
			   journals (journal_name_reserved) is a skip: the copy of
			   such a file would take the place of another's partial
			   file, or be taken for one */
	const struct filter *filter; /* borrowed, may be NULL: an entry it excludes
			   (tested on its wire path; a directory as one, whether or
			   not -L led there) is left out with everything beneath
			   it: no entry, no skip, no id (pipeline/filter.h). A
			   top-level source named "." or ".." is never tested */
};

struct walk_item {
	uint32_t id;          /* 0, 1, 2, ... in yield order (every item, DIR_END too) */
	uint32_t src_index;   /* which top-level source (position in the paths given) */
	struct proto_entry e; /* what goes on the wire; e.id == id. user/group: names from
				 the caches (getpwuid_r/getgrgid_r), empty if unknown */
	int base_fd;          /* borrowed, valid until walk_free: a directory fd ... */
	char open_path[PROTO_MAX_PATH + 1]; /* ... and the relative path to open the REG
				 beneath it: pathsafe_open(base_fd, open_path,
				 O_RDONLY | O_NOFOLLOW, 0, true), or openat2 with
				 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS: without -L it
				 goes through no symlink, "." or "..". With -L it may go
				 through symlinks the walk followed: open it then with
				 pathsafe_open(..., O_RDONLY, 0, beneath) (the walk's
				 beneath), without O_NOFOLLOW. base_fd is the source's
				 parent, or the source directory itself when it was named
				 ".", ".." or "link/" (then open_path is "" + below), or a
				 daemon's root (beneath). Empty (base_fd -1) for non-REG. */
	bool sparse;          /* REG: st_blocks * 512 < size */
	char display[PROTO_MAX_PATH + 1]; /* for messages: the source argument as given
				 for the source itself; below it, the argument (trailing
				 '/' stripped) joined with the path below ("src/d/x");
				 cut short if longer */
};

struct walk_skip {
	uint32_t src_index;   /* which top-level source the skipped path belongs to */
	int code;             /* negative: -errno or -PC_E_*; what SKIP.status carries */
	char msg[PROTO_MAX_MSG + 1]; /* names the path and says why */
	const char *path;     /* the path skipped, as the user would write it (the
	                         source's, for --json); NULL: only msg names it. Set
	                         by the walk's caller (walk_item.display), valid until
	                         its next walk_next */
};

/* The walker's own accounting, for tests: what it holds now and at most. */
struct walk_stats {
	unsigned open_dirs;      /* directory streams open now */
	unsigned max_open_dirs;  /* most open at once so far */
	unsigned base_fds;       /* base directory fds held for the items' base_fd */
	size_t heap_bytes;       /* bytes of the walker's own allocations now (the
				    directory streams' libc buffers not included) */
	size_t max_heap_bytes;   /* most at once so far */
	size_t links;            /* regular files in the -H map now */
};

/* Starts a walk of paths[0..npaths) with options o (copied). dirfd/beneath:
 * how to resolve paths: (AT_FDCWD, false) for a local client; (the daemon's
 * root, true) for a daemon, where pathsafe rules apply to each source path
 * itself. paths and dirfd are borrowed for the walk's life. Touches no file
 * yet. Returns NULL on ENOMEM. One thread at a time. */
struct walk *walk_new(const struct walk_opts *o, int dirfd, bool beneath,
		      const char *const *paths, unsigned npaths);

/* The next step of the walk. Returns 1 with *it filled (the next entry), 2
 * with *sk filled (something that cannot be sent; the walk goes on), 0 when
 * the walk is done (and on every later call), or < 0 on a fatal error
 * (-ENOMEM, -EOVERFLOW past UINT32_MAX - 1 entries...) with the message in
 * e; then only walk_free may follow (walk_next returns the same code).
 * Never blocks on a FIFO (fstatat only, never opens one). */
int walk_next(struct walk *w, struct walk_item *it, struct walk_skip *sk, struct pc_err *e);

/* The walker's accounting so far (see struct walk_stats). */
void walk_stats(const struct walk *w, struct walk_stats *out);

/* Closes every fd and stream the walk holds (base_fd of every item given
 * out becomes invalid) and frees it. walk_free(NULL) is a no-op. */
void walk_free(struct walk *w);

#endif
