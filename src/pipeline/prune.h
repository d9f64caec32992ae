// SPDX-License-Identifier: Apache-2.0
/* prune: what --delete keeps, one directory at a time (issue #13).
 *
 * The sink's control thread notes every entry the source announces. A DIR
 * opens a frame for its path; every later entry adds its last component to
 * the frame of its parent; the DIR_END with the same path closes the frame,
 * which then waits, in order, until the sink applies that DIR_END (once
 * everything before it is finished). Then the destination directory is
 * listed, and every name not in the frame, and not spared by the filter, is
 * removed (dest_prune), before the directory gets its final attributes.
 *
 * Order. A source walks in pre-order, so a well-formed session has the
 * parent frame on top of the stack; prune looks further down when it is
 * not, and ignores an entry whose parent has no open frame and a DIR_END
 * that closes no frame (a broken or hostile source can then only make a
 * directory keep more, or lose names it left out, which it could as well
 * have overwritten). Closed frames are taken in the order of their DIR_END
 * ids, which is the order the sink applies them in.
 *
 * Memory. The names of every open or waiting frame: a directory's names
 * until its DIR_END is applied, so O(entries of the directories on the
 * current path). At most PRUNE_MAX_BYTES in all (names, one NUL each, and
 * their table slots): past it prune_note fails with -E2BIG and the session
 * ends with a message that says so.
 *
 * One thread: the sink's control thread. */
#ifndef PCOPY_PRUNE_H
#define PCOPY_PRUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/proto.h"

#define PRUNE_MAX_BYTES (512u << 20)

struct prune;
struct prune_dir; /* a closed frame: the names a directory keeps */

/* Holds at most max_bytes. Returns NULL on ENOMEM. */
struct prune *prune_new(size_t max_bytes);

/* Notes announced entry e (in id order). Returns 0, -ENOMEM, or -E2BIG
 * past PRUNE_MAX_BYTES. */
int prune_note(struct prune *p, const struct proto_entry *e);

/* The closed frame of the DIR_END with this id and path, taken from the
 * queue (the caller frees it with prune_dir_free), or NULL when there is
 * none (a DIR_END that closed no frame). Frames queued before it whose
 * DIR_END never reached the sink are dropped. */
struct prune_dir *prune_take(struct prune *p, uint32_t id, const char *path);

/* The entry at path failed (it could not be read or written, and was
 * reported): its directory's frame, open or closed, is spared, as one the
 * source could not read whole. Nothing if that frame is gone or was never
 * opened. */
void prune_spare(struct prune *p, const char *path);

/* Whether prune_spare spared the closed frame d. */
bool prune_dir_spared(const struct prune_dir *d);

/* Whether the closed frame d holds name. */
bool prune_dir_has(const struct prune_dir *d, const char *name);

void prune_dir_free(struct prune_dir *d);

/* Bytes held now, for tests. */
size_t prune_bytes(const struct prune *p);

/* Frees p and every frame. prune_free(NULL) is a no-op. */
void prune_free(struct prune *p);

#endif
