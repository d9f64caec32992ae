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

/* ---- Sources of the same name ------------------------------------------ */

/* One source's name at the destination, for the check below. */
struct srclist_name {
	const char *name;   /* its last component, inside the path */
	size_t len;         /* without trailing slashes */
	unsigned idx;       /* its place among the sources */
	bool dir;
	dev_t dev;          /* what it is (0, 0: unknown): one file named twice */
	ino_t ino;
};

static int srclist_name_cmp(const void *a, const void *b)
{
	const struct srclist_name *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->name, y->name, n);

	if (c != 0)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Sets *out to path's last component (len bytes, trailing slashes aside);
 * false for a source whose copy is named otherwise ("-", ".", "..", "/"). */
static bool srclist_last(const char *path, struct srclist_name *out)
{
	size_t len = strlen(path);

	while (len > 1 && path[len - 1] == '/')
		len--;
	size_t start = len;
	while (start > 0 && path[start - 1] != '/')
		start--;
	out->name = path + start;
	out->len = len - start;
	return out->len > 0 && !(out->len == 1 && (out->name[0] == '.' || out->name[0] == '-')) &&
	       !(out->len == 2 && memcmp(out->name, "..", 2) == 0) && out->name[0] != '/';
}

/* As cp: a source whose copy would take the name of an earlier source's
 * copy is not copied (it would replace a file just made), unless both are
 * directories, which merge; the same file or directory named twice (in
 * any spelling) is copied once. Each left out is kept with its error, to
 * be reported in its turn. Directories count only with -r (recursive):
 * without it they are not copied. follow: a source that is a symlink is
 * taken for what it leads to (without -r, or with -L), as the walk does.
 * Returns 0 or -ENOMEM. */
static int srclist_same_names(struct srclist *l, int dirfd, bool beneath, bool recursive,
			      bool follow)
{
	struct srclist_name *v = calloc(l->n ? l->n : 1, sizeof(*v));
	unsigned m = 0;

	if (v == NULL)
		return -ENOMEM;
	for (unsigned i = 0; i < l->n; i++) {
		const struct source_path *p = &l->paths[i];
		if (p->code < 0 || p->stream != NULL || !srclist_last(p->path, &v[m]))
			continue;
		struct stat st;
		int fd = pathsafe_open(dirfd, p->path, O_PATH | (follow ? 0 : O_NOFOLLOW), 0,
				       beneath);
		bool known = fd >= 0 && fstat(fd, &st) == 0;
		if (fd >= 0)
			close(fd);
		v[m].dir = known && S_ISDIR(st.st_mode);
		if (v[m].dir && !recursive)
			continue; /* not copied: "omitting directory" in its turn */
		v[m].dev = known ? st.st_dev : 0;
		v[m].ino = known ? st.st_ino : 0;
		v[m++].idx = i;
	}
	qsort(v, m, sizeof(*v), srclist_name_cmp);
	for (unsigned a = 0, b; a < m; a = b) {
		for (b = a + 1; b < m && v[b].len == v[a].len &&
				memcmp(v[b].name, v[a].name, v[a].len) == 0; b++) {
			bool same = v[b].ino != 0 && v[b].dev == v[a].dev && v[b].ino == v[a].ino;
			if (v[a].dir && v[b].dir && !same)
				continue;
			struct source_path *p = &l->paths[v[b].idx];
			const char *first = l->paths[v[a].idx].path;
			if (same)
				snprintf(l->msgs[v[b].idx], sizeof(l->msgs[0]), "source '%s' is named "
					 "more than once: it is copied once", p->path);
			else
				snprintf(l->msgs[v[b].idx], sizeof(l->msgs[0]), "source '%s' is not "
					 "copied: it would replace the copy of '%s', which has the "
					 "same name", p->path, first);
			p->code = -EEXIST;
			p->msg = l->msgs[v[b].idx];
			l->unusable++;
		}
	}
	free(v);
	return 0;
}

int srclist_build(struct srclist *l, int dirfd, bool beneath, const char *const *paths,
		  unsigned n, bool recursive, bool follow, bool allow_stdin,
		  const struct ctl *watch, struct pc_err *e)
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
	if (srclist_same_names(l, dirfd, beneath, recursive, !recursive || follow) < 0)
		return pc_err_set(e, -ENOMEM, "out of memory");
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
