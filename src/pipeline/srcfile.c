/* SPDX-License-Identifier: Apache-2.0 */
/* srcfile: a source opened for reading. */
#include "pipeline/srcfile.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire/pathsafe.h"
#include "sys/platform.h"

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

static int srcfile_peer_gave_up(const char *display, struct pc_err *e)
{
	return pc_err_set(e, -PC_E_ABORTED, "the peer gave up while FIFO '%s' had no writer",
			  display);
}

/* A FIFO opened with O_NONBLOCK: waits until a writer has written or
 * come and gone (Linux reports neither POLLIN nor POLLHUP to a reader
 * before its first writer), a stop signal, or watch. Returns 0 or a
 * negative code with the detail in e. */
static int srcfile_await_writer(int fd, const char *display, const struct ctl *watch,
				struct pc_err *e)
{
	/* A message already inside the ctl is not seen by poll. */
	if (watch != NULL && ctl_pending(watch))
		return srcfile_peer_gave_up(display, e);
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
				       { .fd = watch ? ctl_rfd(watch) : -1, .events = POLLIN } };
		int n = platform_poll(p, 2, -1);
		if (n == -PC_E_INTERRUPTED)
			return pc_err_set(e, n, "interrupted while waiting for a writer to open "
					  "FIFO '%s'", display);
		if (n < 0)
			return pc_err_set(e, n, "waiting for FIFO '%s': %s", display, pc_strerror(n));
		if (p[0].revents != 0)
			return 0;
		if (p[1].revents != 0)
			return srcfile_peer_gave_up(display, e);
	}
}

int srcfile_open(struct src_file *f, int dirfd, const char *path, bool beneath,
		 const char *display, struct pc_err *e)
{
	return srcfile_open_watch(f, dirfd, path, beneath, display, NULL, e);
}

int srcfile_open_watch(struct src_file *f, int dirfd, const char *path, bool beneath,
		       const char *display, const struct ctl *watch, struct pc_err *e)
{
	struct stat st;
	int fd, fl;

	srcfile_init(f, display);
	/* A plain open of a FIFO blocks until a writer comes, with the stop
	 * signals blocked (they are read from a signalfd): only SIGKILL would
	 * end it. O_NONBLOCK never waits; the wait is srcfile_await_writer's,
	 * which watches the signals. */
	fd = pathsafe_open(dirfd, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, beneath);
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
				  "omitting directory '%s' (use -r to copy it)",
				  display);
	}
	if (S_ISFIFO(st.st_mode)) {
		int ret = srcfile_await_writer(fd, display, watch, e);
		if (ret < 0) {
			close(fd);
			return ret;
		}
	}
	/* Reads block from here on, as the readers expect. */
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		int ret = -errno;
		close(fd);
		return pc_err_set(e, ret, "source '%s': %s", display, pc_strerror(ret));
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
