/* SPDX-License-Identifier: Apache-2.0 */
/* pathsafe: validate peer-supplied names and paths, and open them beneath a
 * root directory without letting ".." or a symlink lead outside it. */
#include "wire/pathsafe.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "sys/err.h"
#include "wire/proto.h"

/* openat2 may fail with EAGAIN when a concurrent rename makes it unable to
 * prove the lookup stayed beneath the root; it is worth a few retries. */
#define PATHSAFE_OPENAT2_TRIES 8

/* One component of len bytes at s (not NUL-terminated). */
static bool pathsafe_component_ok(const char *s, size_t len)
{
	if (len == 0 || len > NAME_MAX)
		return false;
	if (s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')))
		return false;
	return memchr(s, '/', len) == NULL;
}

int pathsafe_check_name(const char *name)
{
	if (name == NULL)
		return -PC_E_PROTO;
	if (!pathsafe_component_ok(name, strnlen(name, NAME_MAX + 1)))
		return -PC_E_PROTO;
	return 0;
}

int pathsafe_check_rel(const char *path)
{
	size_t total;

	if (path == NULL)
		return -PC_E_PROTO;
	total = strnlen(path, PROTO_MAX_PATH + 1);
	if (total == 0 || total > PROTO_MAX_PATH || path[0] == '/')
		return -PC_E_PROTO;
	if (strcmp(path, ".") == 0)
		return 0;
	for (;;) {
		size_t len = strcspn(path, "/");

		if (!pathsafe_component_ok(path, len))
			return -PC_E_PROTO;
		if (path[len] == '\0')
			return 0;
		path += len + 1;
	}
}

int pathsafe_split(const char *path, char *dir, char *base)
{
	const char *slash = strrchr(path, '/');
	const char *last = slash != NULL ? slash + 1 : path;
	size_t dirlen;

	if (last[0] == '\0' || strcmp(last, ".") == 0 || strcmp(last, "..") == 0)
		return -PC_E_PROTO;
	strcpy(base, last);
	if (slash == NULL) {
		strcpy(dir, ".");
		return 0;
	}
	dirlen = (size_t)(slash - path);
	while (dirlen > 0 && path[dirlen - 1] == '/')
		dirlen--;
	if (dirlen == 0) {
		strcpy(dir, "/");
		return 0;
	}
	memcpy(dir, path, dirlen);
	dir[dirlen] = '\0';
	return 0;
}

/* The error for a failed O_NOFOLLOW open of name in dirfd. With O_DIRECTORY
 * (or O_PATH) a symlink gives ENOTDIR rather than ELOOP; report it as the
 * refused symlink it is. */
static int pathsafe_walk_error(int dirfd, const char *name, int err)
{
	struct stat st;

	if (err == ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISLNK(st.st_mode))
		return -ELOOP;
	return -err;
}

/* The fallback for kernels without openat2 (before 5.6) or sandboxes that
 * block it: open each directory component with O_NOFOLLOW, so that every
 * symlink is refused, even one that would stay inside. path has passed
 * pathsafe_check_rel. Returns an fd or -errno. */
static int pathsafe_open_walk(int rootfd, const char *path, int flags, mode_t mode)
{
	char name[NAME_MAX + 1];
	int dirfd = rootfd;
	int ret = -EINVAL;

	for (;;) {
		size_t len = strcspn(path, "/");
		int fd;

		if (len > NAME_MAX) {
			ret = -ENAMETOOLONG;
			break;
		}
		memcpy(name, path, len);
		name[len] = '\0';
		if (strcmp(name, "..") == 0) {
			ret = -EXDEV;
			break;
		}
		if (path[len] == '\0') {
			fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
			ret = fd >= 0 ? fd : pathsafe_walk_error(dirfd, name, errno);
			break;
		}
		fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			ret = pathsafe_walk_error(dirfd, name, errno);
			break;
		}
		if (dirfd != rootfd)
			close(dirfd);
		dirfd = fd;
		path += len + 1;
	}
	if (dirfd != rootfd)
		close(dirfd);
	return ret;
}

/* openat2 beneath rootfd with the RESOLVE_* bits resolve. Returns an fd, or
 * -errno; -ENOSYS (or -EPERM from a seccomp filter that predates openat2)
 * means "use the fallback". */
static int pathsafe_openat2(int rootfd, const char *path, int flags, mode_t mode,
			    uint64_t resolve)
{
#ifdef SYS_openat2
	struct open_how how;
	long fd = -1;

	memset(&how, 0, sizeof how);
	how.flags = (uint64_t)(unsigned int)(flags | O_CLOEXEC);
	/* openat2 rejects a mode unless the call can create a file. O_TMPFILE
	 * contains O_DIRECTORY, so test all of its bits. */
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
		how.mode = mode;
	how.resolve = resolve;
	for (int i = 0; i < PATHSAFE_OPENAT2_TRIES; i++) {
		fd = syscall(SYS_openat2, rootfd, path, &how, sizeof how);
		if (fd >= 0 || errno != EAGAIN)
			break;
	}
	return fd >= 0 ? (int)fd : -errno;
#else
	(void)rootfd;
	(void)path;
	(void)flags;
	(void)mode;
	(void)resolve;
	return -ENOSYS;
#endif
}

/* path (checked) beneath rootfd: openat2 with resolve, else the walk, which
 * refuses every symlink and so is at least as strict as any resolve. */
static int pathsafe_open_beneath(int rootfd, const char *path, int flags, mode_t mode,
				 uint64_t resolve)
{
	int fd = pathsafe_openat2(rootfd, path, flags, mode, resolve);

	if (fd == -ENOSYS || fd == -EPERM)
		fd = pathsafe_open_walk(rootfd, path, flags, mode);
	return fd;
}

int pathsafe_open(int rootfd, const char *path, int flags, mode_t mode, bool beneath)
{
	int fd;

	if (!beneath) {
		fd = openat(rootfd, path, flags | O_CLOEXEC, mode);
		return fd >= 0 ? fd : -errno;
	}
	if (pathsafe_check_rel(path) != 0)
		return -EINVAL;
	return pathsafe_open_beneath(rootfd, path, flags, mode,
				     RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
}

int pathsafe_open_nolinks(int rootfd, const char *path, int flags, mode_t mode)
{
	if (pathsafe_check_rel(path) != 0)
		return -EINVAL;
	return pathsafe_open_beneath(rootfd, path, flags, mode,
				     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}
