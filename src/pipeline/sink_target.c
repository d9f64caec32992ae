/* SPDX-License-Identifier: Apache-2.0 */
/* sink_target: where the entries go, resolved from the destination
 * argument by cp's rules. */
#include "pipeline/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wire/pathsafe.h"

/* ---- Target ----------------------------------------------------------- */

/* dirfd is the destination display names (is_dir), or the directory of
 * the file it names. */
static int sink_check_writable(int dirfd, const char *display, bool is_dir, struct pc_err *e)
{
	if (faccessat(dirfd, ".", W_OK, AT_EACCESS) == 0)
		return 0;
	int err = errno;
	if (is_dir)
		return pc_err_set(e, -err, "cannot write to destination directory '%s': %s",
				  display, strerror(err));
	return pc_err_set(e, -err, "cannot write destination '%s': its directory is not "
			  "writable (%s)", display, strerror(err));
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
		return sink_check_writable(fd, display, true, e);
	}
	if (fd == -EXDEV || fd == -ELOOP || (beneath && fd == -EINVAL))
		return pc_err_set(e, fd, "destination '%s' leads outside the served directory",
				  display);
	if (fd != -ENOENT && fd != -ENOTDIR)
		return pc_err_set(e, fd, "cannot open destination '%s': %s", display, pc_strerror(fd));
	size_t len = strlen(path);
	bool slash = len > 0 && path[len - 1] == '/';
	if (slash && fd == -ENOTDIR)
		return pc_err_set(e, fd, "destination '%s' is not a directory", display);
	if (nsources != 1)
		return pc_err_set(e, -PC_E_USAGE, "target '%s' is not a directory, and there are "
				  "%u sources", display, (unsigned)nsources);
	/* "new/": the directory new, which the source becomes. */
	char trimmed[PROTO_MAX_PATH + 2];
	while (len > 1 && path[len - 1] == '/')
		len--;
	snprintf(trimmed, sizeof(trimmed), "%.*s", (int)len, path);
	t->want_dir = slash;
	if (pathsafe_split(trimmed, dir, base) < 0 || pathsafe_check_name(base) < 0)
		return pc_err_set(e, -EINVAL, "destination '%s' has no file name", display);
	fd = pathsafe_open(rootfd, dir, O_RDONLY | O_DIRECTORY, 0, beneath);
	if (fd == -EXDEV || fd == -ELOOP)
		return pc_err_set(e, fd, "destination '%s' leads outside the served directory",
				  display);
	if (fd < 0)
		return pc_err_set(e, fd, "the directory of destination '%s' %s%s", display,
				  fd == -ENOENT ? "does not exist" : "cannot be opened: ",
				  fd == -ENOENT ? "" : pc_strerror(fd));
	t->dirfd = fd;
	snprintf(t->name, sizeof(t->name), "%.*s", (int)sizeof(t->name) - 1, base);
	return sink_check_writable(fd, display, false, e);
}

void sink_target_close(struct sink_target *t)
{
	if (t->dirfd >= 0)
		close(t->dirfd);
	t->dirfd = -1;
}
