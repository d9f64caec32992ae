/* SPDX-License-Identifier: Apache-2.0 */
/* closer: closes file descriptors on a thread of its own.
 *
 * The last close of a file that has lost its name (renamed over, or
 * unlinked) frees its blocks and its page cache there and then: a tenth of
 * a second for 1 GiB on tmpfs, a third on ext4 with discard. A copy that
 * replaces a big file keeps a descriptor of the old one across the rename
 * and hands it here, so that the freeing runs beside the rest of the copy
 * (and, for the last file, after the far end has been told it is done)
 * rather than inside the rename; so does a new file thrown away because
 * the old one is kept (dest_file_drop).
 *
 * Thread-safe. The thread starts at the first closer_put and ends in
 * closer_free, which closes whatever is still queued first. */
#ifndef PCOPY_CLOSER_H
#define PCOPY_CLOSER_H

#define CLOSER_QUEUE 8u /* descriptors waiting, at most */

struct closer;

/* An idle closer (no thread yet), or NULL when out of memory. */
struct closer *closer_new(void);

/* Takes fd (>= 0) and closes it soon, on the closer's thread; at once,
 * on the caller's, when c is NULL, when the thread cannot start, or when
 * CLOSER_QUEUE descriptors are waiting already (so at most that many old
 * files are kept alive). The close's result is not looked at: fd is one
 * that was only held, never written, or a file being thrown away. */
void closer_put(struct closer *c, int fd);

/* Closes what is queued, ends the thread, and frees c. NULL is a no-op. */
void closer_free(struct closer *c);

#endif
