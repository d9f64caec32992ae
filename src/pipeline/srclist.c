/* SPDX-License-Identifier: Apache-2.0 */
/* srclist: sources prepared before the transfer. */
#include "pipeline/srclist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire/pathsafe.h"

/* Looks at path without opening it: is it a stream to open now? Returns
 * 1 (a stream), 0 (for the walk), or -errno. */
static int srclist_kind(int dirfd, const char *path, bool beneath, bool recursive)
{
	struct stat st;
	int fd;

	if (recursive)
		return 0; /* FIFOs and devices in a tree are entries, never read */
	fd = pathsafe_open(dirfd, path, O_PATH, 0, beneath);
	if (fd < 0)
		return fd;
	int ret = fstat(fd, &st) == 0 ? 0 : -errno;
	close(fd);
	if (ret < 0)
		return ret;
	return S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode);
}

int srclist_build(struct srclist *l, int dirfd, bool beneath, const char *const *paths,
		  unsigned n, bool recursive, bool allow_stdin, const struct ctl *watch,
		  struct pc_err *e)
{
	memset(l, 0, sizeof(*l));
	l->paths = calloc(n ? n : 1, sizeof(*l->paths));
	l->streams = calloc(n ? n : 1, sizeof(*l->streams));
	l->msgs = calloc(n ? n : 1, sizeof(*l->msgs));
	if (l->paths == NULL || l->streams == NULL || l->msgs == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	for (unsigned i = 0; i < n; i++)
		l->streams[i].fd = -1;
	for (unsigned i = 0; i < n; i++, l->n++) {
		struct source_path *p = &l->paths[i];
		struct pc_err fe;
		int ret;

		p->path = paths[i];
		pc_err_init(&fe);
		if (allow_stdin && strcmp(paths[i], "-") == 0) {
			ret = srcfile_open_stdin(&l->streams[i], &fe);
		} else {
			ret = srclist_kind(dirfd, paths[i], beneath, recursive);
			if (ret == 1)
				ret = srcfile_open_watch(&l->streams[i], dirfd, paths[i], beneath,
							 paths[i], watch, &fe);
			else if (ret == -EXDEV || ret == -ELOOP || (beneath && ret == -EINVAL))
				pc_err_set(&fe, ret, "source '%s' leads outside the served "
					   "directory", paths[i]);
			else if (ret < 0)
				pc_err_set(&fe, ret, "cannot open source '%s': %s", paths[i],
					   pc_strerror(ret));
			else
				ret = 1; /* the walk's */
		}
		if (ret == 0)
			p->stream = &l->streams[i];
		bool fatal = ret == -ENOMEM || ret == -PC_E_INTERRUPTED || ret == -PC_E_ABORTED;
		if (ret < 0 && !fatal) {
			p->code = ret;
			(void)pc_err_get(&fe, l->msgs[i], sizeof(l->msgs[i]));
			p->msg = l->msgs[i];
			l->unusable++;
		} else if (fatal) {
			char msg[sizeof(fe.msg)];
			(void)pc_err_get(&fe, msg, sizeof(msg));
			pc_err_set(e, ret, "%s", msg);
		}
		pc_err_destroy(&fe);
		if (fatal)
			return ret;
	}
	return 0;
}

void srclist_free(struct srclist *l)
{
	for (unsigned i = 0; l->streams != NULL && i < l->n; i++)
		srcfile_close(&l->streams[i]);
	free(l->paths);
	free(l->streams);
	free(l->msgs);
	memset(l, 0, sizeof(*l));
}
