/* SPDX-License-Identifier: Apache-2.0 */
/* tmpfile: the temporary files and names a received entry lives under
 * until it is complete, shared by the sink and the tree destination.
 *
 * A file is received into an unnamed O_TMPFILE inode in its directory
 * where the file system can (if we die, even by SIGKILL, the kernel frees
 * it), elsewhere (NFS) into ".NAME.pcopy-XXXXXX" next to its final name.
 * Every function works relative to a directory fd and never follows a
 * symlink in the name it creates. All are thread-safe. */
#ifndef PCOPY_TMPFILE_H
#define PCOPY_TMPFILE_H

#include <limits.h>
#include <stddef.h>

/* Room for a temporary name, NUL included. */
#define TMPFILE_NAME_CAP (NAME_MAX + 1)

/* Writes a fresh ".NAME.pcopy-XXXXXX" (NAME cut to 200 bytes, six random
 * characters) into out[TMPFILE_NAME_CAP]. Returns 0 or a negative code
 * (the random source failed). */
int tmpfile_name(const char *name, char *out);

/* Opens a new file for writing and reading (-e reads it back), mode 0600,
 * that will be named name in
 * dirfd: an unnamed O_TMPFILE (tmp[0] = '\0') or, where unsupported, a
 * fresh temporary name created O_EXCL|O_NOFOLLOW (in tmp, TMPFILE_NAME_CAP
 * bytes). Returns the fd (O_CLOEXEC) or -errno. */
int tmpfile_open(int dirfd, const char *name, char *tmp);

/* Gives the unnamed file fd (from tmpfile_open with tmp[0] == '\0') the
 * name link in dirfd: linkat AT_EMPTY_PATH, or through /proc/self/fd where
 * that needs a capability we lack (remembered, so later calls go straight
 * there). Returns 0 or -errno: -EEXIST when link is taken. */
int tmpfile_link(int fd, int dirfd, const char *link);

/* Gives the unnamed file fd a fresh temporary name for name (in tmp,
 * TMPFILE_NAME_CAP bytes), retrying names that are taken, so that it can
 * then be renamed over name atomically. Returns 0 or -errno; tmp is ""
 * on failure. */
int tmpfile_link_tmp(int fd, int dirfd, const char *name, char *tmp);

#endif
