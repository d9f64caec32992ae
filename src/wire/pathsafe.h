/* SPDX-License-Identifier: Apache-2.0 */
/* pathsafe: the sink never trusts the wire. Checks on names and relative
 * paths that come from a peer, and opening them beneath a root directory so
 * that neither ".." nor a symlink can lead outside it. */
#ifndef PCOPY_PATHSAFE_H
#define PCOPY_PATHSAFE_H

#include <stdbool.h>
#include <sys/types.h>

/* A single path component: non-empty, no '/', not "." or "..", at most
 * NAME_MAX bytes. Returns 0 or -PC_E_PROTO. */
int pathsafe_check_name(const char *name);

/* A relative path: non-empty, not starting with '/', every component valid
 * by pathsafe_check_name, or the whole path exactly ".". At most
 * PROTO_MAX_PATH bytes. Returns 0 or -PC_E_PROTO. */
int pathsafe_check_rel(const char *path);

/* openat(rootfd, path, flags, mode), but when beneath is true resolution
 * may not leave rootfd: no "..", no absolute symlinks, no symlink that
 * points outside (openat2 RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, with an
 * O_NOFOLLOW component walk where openat2 is missing). path must pass
 * pathsafe_check_rel when beneath is true. Returns an fd (O_CLOEXEC is
 * always added) or -errno (-EXDEV or -ELOOP for an escape). */
int pathsafe_open(int rootfd, const char *path, int flags, mode_t mode, bool beneath);

/* Like pathsafe_open(rootfd, path, flags, mode, true), but no symlink at
 * all may be met, not even one that stays beneath rootfd, nor as the last
 * component (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS, or the same O_NOFOLLOW walk): for creating
 * entries that a peer names, where a symlink the peer itself created must
 * not redirect a later path. Returns an fd (O_CLOEXEC added) or -errno:
 * -ELOOP for a symlink, -EXDEV for an escape, -EINVAL if path fails
 * pathsafe_check_rel. */
int pathsafe_open_nolinks(int rootfd, const char *path, int flags, mode_t mode);

/* Splits path into its parent directory and last component: "a/b/c" ->
 * "a/b" and "c"; "c" -> "." and "c". dir and base must have room for
 * strlen(path) + 2 bytes. Returns 0 or -PC_E_PROTO if path has no last
 * component ("", ".", "a/."). Pure. */
int pathsafe_split(const char *path, char *dir, char *base);

#endif
