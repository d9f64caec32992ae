/* SPDX-License-Identifier: Apache-2.0 */
/* srcfile: a source opened for reading. */
#include "pipeline/srcfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire/pathsafe.h"

static void srcfile_base(const char *path, char *name, size_t cap)
{
	size_t len = strlen(path);
	const char *slash;

	while (len > 1 && path[len - 1] == '/')
		len--;
	slash = memrchr(path, '/', len);
	if (slash != NULL && len > 1) {
		snprintf(name, cap, "%.*s", (int)(len - (size_t)(slash + 1 - path)), slash + 1);
		return;
	}
	snprintf(name, cap, "%.*s", (int)len, path);
}

static void srcfile_init(struct src_file *f, const char *display)
{
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	atomic_init(&f->failed, false);
	enc_file_init(&f->enc);
	snprintf(f->display, sizeof(f->display), "%s", display);
}

int srcfile_open(struct src_file *f, int dirfd, const char *path, bool beneath,
		 const char *display, struct pc_err *e)
{
	struct stat st;
	int fd;

	srcfile_init(f, display);
	fd = pathsafe_open(dirfd, path, O_RDONLY | O_NOCTTY, 0, beneath);
	if (fd < 0 && beneath && (fd == -EXDEV || fd == -ELOOP || fd == -EINVAL))
		return pc_err_set(e, fd, "source '%s' leads outside the served directory", display);
	if (fd < 0)
		return pc_err_set(e, fd, "cannot open source '%s': %s", display, pc_strerror(fd));
	if (fstat(fd, &st) != 0) {
		int ret = -errno;
		close(fd);
		return pc_err_set(e, ret, "cannot stat source '%s': %s", display, pc_strerror(ret));
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return pc_err_set(e, -EISDIR,
				  "omitting directory '%s' (recursive copy is not supported yet)",
				  display);
	}
	f->fd = fd;
	f->stream = !S_ISREG(st.st_mode);
	f->size = f->stream ? 0 : (uint64_t)st.st_size;
	f->sparse = !f->stream && (uint64_t)st.st_blocks * 512u < f->size;
	f->mode = st.st_mode & 07777;
	f->mtime_s = st.st_mtim.tv_sec;
	f->mtime_ns = (uint32_t)st.st_mtim.tv_nsec;
	srcfile_base(path, f->name, sizeof(f->name));
	if (strcmp(f->name, ".") == 0 || strcmp(f->name, "..") == 0 || f->name[0] == '/') {
		srcfile_close(f);
		return pc_err_set(e, -EINVAL, "cannot copy '%s': it has no file name", display);
	}
	return 0;
}

int srcfile_open_stdin(struct src_file *f, struct pc_err *e)
{
	srcfile_init(f, "-");
	f->fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
	if (f->fd < 0)
		return pc_err_set(e, -errno, "cannot read standard input: %s", strerror(errno));
	f->stream = true;
	f->mode = 0644;
	snprintf(f->name, sizeof(f->name), "stdin");
	return 0;
}

void srcfile_close(struct src_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}
