// SPDX-License-Identifier: Apache-2.0
/* Unit tests for walk, the streaming tree walker: odd trees built in a
 * mkdtemp directory (empty directories, 60 and 1030 levels deep, names with
 * spaces, newlines, a leading dash, invalid UTF-8 or 255 bytes, symlinks
 * dangling, to a directory and in a loop with -L, hard links with and
 * without -H, FIFOs, sockets and devices with and without -p, directories
 * that cannot be opened or read (through the walk_opendir and walk_readdir
 * fault sites, and for real in a child that drops root, which ignores mode
 * bits), entries that vanish during the walk, daemon-style walks beneath a root, and 20,000 files with the
 * walker's own accounting of open directories and memory).
 *
 * Every walk goes through run_walk, which checks what holds for any walk:
 * ids 0, 1, 2... with no gap, DIR before and DIR_END after everything
 * inside it, each entry inside the DIR on top, the wire rules of each
 * field, and that every REG opens from its base_fd and open_path as the
 * same file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/fault.h"
#include "pipeline/walk.h"
#include "wire/pathsafe.h"

/* What one walk_next gave: an item (kind 1) or a skip (kind 2). */
struct rec {
	int kind;
	uint32_t id, src_index, link_id, mode, uid, gid, mtime_ns;
	uint8_t type, flags;
	uint64_t size, rdev;
	int64_t mtime_s;
	bool sparse;
	int code;
	char *path, *target, *open_path, *display, *msg, *user, *group;
};

struct run {
	struct rec *r;
	size_t n, cap;
	struct walk_stats stats;  /* at the end of the walk, before walk_free */
};

struct fixture {
	char dir[64];   /* the mkdtemp directory: base */
	int dfd;        /* base, O_DIRECTORY */
	struct run run;
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (fx == NULL)
		return -1;
	/* tmpfs when there is one: test_many_files creates 20,000 files, which
	 * on a busy disk's journal alone can take seconds. */
	snprintf(fx->dir, sizeof(fx->dir), "%s/pcopy-test-walk-XXXXXX",
		 access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp");
	if (mkdtemp(fx->dir) == NULL) {
		free(fx);
		return -1;
	}
	fx->dfd = open(fx->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fx->dfd < 0)
		return -1;
	*state = fx;
	return 0;
}

static void run_clear(struct run *run)
{
	for (size_t i = 0; i < run->n; i++) {
		struct rec *r = &run->r[i];
		free(r->path);
		free(r->target);
		free(r->open_path);
		free(r->display);
		free(r->msg);
		free(r->user);
		free(r->group);
	}
	free(run->r);
	memset(run, 0, sizeof(*run));
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	fault_arm(FAULT_WALK_OPENDIR, 0);
	fault_arm(FAULT_WALK_READDIR, 0);
	run_clear(&fx->run);
	close(fx->dfd);
	/* Nothing may stay behind, the 60-level tree included. */
	int ret = testutil_rm_rf(fx->dir) == 0 && access(fx->dir, F_OK) != 0 ? 0 : -1;
	free(fx);
	return ret;
}

static char *xstrdup(const char *s)
{
	char *p = strdup(s);

	assert_non_null(p);
	return p;
}

static struct rec *run_add(struct run *run)
{
	if (run->n == run->cap) {
		run->cap = run->cap == 0 ? 64 : run->cap * 2;
		run->r = realloc(run->r, run->cap * sizeof(*run->r));
		assert_non_null(run->r);
	}
	memset(&run->r[run->n], 0, sizeof(run->r[0]));
	return &run->r[run->n++];
}

/* The parent of path ("" for a single component) into out. */
static void parent_of(const char *path, char *out, size_t cap)
{
	const char *slash = strrchr(path, '/');

	snprintf(out, cap, "%.*s", slash == NULL ? 0 : (int)(slash - path), path);
}

/* The checks every item must pass (see the top of the file). stack holds
 * the paths of the DIRs not yet ended; deref: the REG may be opened
 * through symlinks. */
static void check_item(const struct walk_item *it, char **stack, unsigned *depth, bool deref)
{
	const struct proto_entry *pe = &it->e;
	char parent[PROTO_MAX_PATH + 1];

	assert_int_equal(pe->id, it->id);
	assert_int_equal(pathsafe_check_rel(pe->path), 0);
	assert_string_not_equal(pe->path, ".");
	assert_true(pe->mode <= 07777);
	assert_true(pe->mtime_ns < 1000000000u && pe->atime_ns < 1000000000u);
	assert_true(pe->type >= PROTO_ENT_REG && pe->type <= PROTO_ENT_DIR_END);
	assert_true(strlen(pe->user) <= PROTO_MAX_NAME && strlen(pe->group) <= PROTO_MAX_NAME);
	if (pe->type != PROTO_ENT_REG)
		assert_int_equal(pe->size, 0);
	if (pe->type != PROTO_ENT_REG && pe->type != PROTO_ENT_DIR_END)
		assert_int_equal(pe->flags, 0);
	assert_int_equal(pe->flags & ~(pe->type == PROTO_ENT_REG ? PROTO_ENT_LINKED
							       : PROTO_ENT_INCOMPLETE), 0);
	if (pe->type != PROTO_ENT_CHR && pe->type != PROTO_ENT_BLK)
		assert_int_equal(pe->rdev, 0);
	if (pe->type != PROTO_ENT_SYMLINK)
		assert_string_equal(pe->target, "");
	else
		assert_true(pe->target[0] != '\0');
	if (pe->type == PROTO_ENT_HARDLINK)
		assert_true(pe->link_id < pe->id);
	else
		assert_int_equal(pe->link_id, 0);

	/* Nesting: DIR_END closes the DIR on top; anything else is inside it. */
	if (pe->type == PROTO_ENT_DIR_END) {
		assert_true(*depth > 0);
		assert_string_equal(pe->path, stack[*depth - 1]);
		free(stack[--*depth]);
		return;
	}
	parent_of(pe->path, parent, sizeof(parent));
	if (*depth == 0)
		assert_string_equal(parent, "");
	else
		assert_string_equal(parent, stack[*depth - 1]);
	if (pe->type == PROTO_ENT_DIR) {
		assert_true(*depth < WALK_MAX_DEPTH);
		stack[(*depth)++] = xstrdup(pe->path);
	}

	/* A REG opens from base_fd and open_path as the file it describes. */
	if (pe->type == PROTO_ENT_REG) {
		struct stat st;
		int fd = deref ? openat(it->base_fd, it->open_path, O_RDONLY | O_CLOEXEC) :
			pathsafe_open(it->base_fd, it->open_path, O_RDONLY | O_NOFOLLOW, 0, true);
		assert_true(fd >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal((uint64_t)st.st_size, pe->size);
		assert_int_equal(st.st_mode & 07777, pe->mode);
		assert_int_equal(close(fd), 0);
	} else {
		assert_string_equal(it->open_path, "");
		assert_int_equal(it->base_fd, -1);
	}
}

/* Walks paths to the end (no fatal error allowed), recording every step in
 * fx->run (cleared first) and checking every item. */
static void run_walk(struct fixture *fx, const struct walk_opts *o, int dirfd, bool beneath,
		     const char *const *paths, unsigned npaths)
{
	static struct walk_item it;
	static struct walk_skip sk;
	static char *stack[WALK_MAX_DEPTH];
	unsigned depth = 0;
	uint32_t next_id = 0;
	struct pc_err e;
	struct walk *w;
	int ret;

	run_clear(&fx->run);
	pc_err_init(&e);
	w = walk_new(o, dirfd, beneath, paths, npaths);
	assert_non_null(w);
	while ((ret = walk_next(w, &it, &sk, &e)) > 0) {
		struct rec *r = run_add(&fx->run);
		r->kind = ret;
		if (ret == 2) {
			assert_true(sk.code < 0);
			assert_true(sk.src_index < npaths);
			r->src_index = sk.src_index;
			r->code = sk.code;
			r->msg = xstrdup(sk.msg);
			continue;
		}
		assert_int_equal(ret, 1);
		assert_int_equal(it.id, next_id);
		next_id++;
		assert_true(it.src_index < npaths);
		check_item(&it, stack, &depth, o->deref);
		r->id = it.id;
		r->src_index = it.src_index;
		r->type = it.e.type;
		r->flags = it.e.flags;
		r->mode = it.e.mode;
		r->uid = it.e.uid;
		r->gid = it.e.gid;
		r->mtime_s = it.e.mtime_s;
		r->mtime_ns = it.e.mtime_ns;
		r->size = it.e.size;
		r->rdev = it.e.rdev;
		r->link_id = it.e.link_id;
		r->sparse = it.sparse;
		r->path = xstrdup(it.e.path);
		r->target = xstrdup(it.e.target);
		r->open_path = xstrdup(it.open_path);
		r->display = xstrdup(it.display);
		r->user = xstrdup(it.e.user);
		r->group = xstrdup(it.e.group);
	}
	assert_int_equal(ret, 0);
	assert_int_equal(depth, 0);
	/* Done is done. */
	assert_int_equal(walk_next(w, &it, &sk, &e), 0);
	assert_int_equal(pc_err_get(&e, NULL, 0), 0);
	walk_stats(w, &fx->run.stats);
	assert_int_equal(fx->run.stats.open_dirs, 0);
	walk_free(w);
	pc_err_destroy(&e);
}

/* The item with this path and type (0: any), or NULL. */
static const struct rec *find(const struct fixture *fx, const char *path, int type)
{
	for (size_t i = 0; i < fx->run.n; i++) {
		const struct rec *r = &fx->run.r[i];
		if (r->kind == 1 && strcmp(r->path, path) == 0 && (type == 0 || r->type == type))
			return r;
	}
	return NULL;
}

static const struct rec *find_skip(const struct fixture *fx, const char *msg)
{
	for (size_t i = 0; i < fx->run.n; i++)
		if (fx->run.r[i].kind == 2 && strcmp(fx->run.r[i].msg, msg) == 0)
			return &fx->run.r[i];
	return NULL;
}

static size_t count(const struct fixture *fx, int kind, int type)
{
	size_t n = 0;

	for (size_t i = 0; i < fx->run.n; i++)
		if (fx->run.r[i].kind == kind && (type == 0 || fx->run.r[i].type == type))
			n++;
	return n;
}

static void mkfile(int dfd, const char *path, size_t size, mode_t mode)
{
	int fd = openat(dfd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	if (size > 0)
		assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static void mkdir_at(int dfd, const char *path)
{
	assert_int_equal(mkdirat(dfd, path, 0755), 0);
}

static const struct walk_opts OPT_R = { .recursive = true };

/* ---- single sources ------------------------------------------------------ */

static void test_file_source(void **state)
{
	struct fixture *fx = *state;
	struct timespec ts[2] = { { 1000000001, 123456789 }, { 1600000000, 987654321 } };
	const char *paths[] = { "f", "sp" };
	const struct rec *r;
	int fd;

	fd = openat(fx->dfd, "f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "0123456789", 10), 10);
	assert_int_equal(fchmod(fd, 0640), 0);
	assert_int_equal(close(fd), 0);
	assert_int_equal(utimensat(fx->dfd, "f", ts, 0), 0);
	mkfile(fx->dfd, "sp", 1 << 20, 0600);

	run_walk(fx, &(struct walk_opts){ 0 }, fx->dfd, false, paths, 2);
	assert_int_equal(fx->run.n, 2);
	r = &fx->run.r[0];
	assert_int_equal(r->kind, 1);
	assert_int_equal(r->id, 0);
	assert_int_equal(r->src_index, 0);
	assert_int_equal(r->type, PROTO_ENT_REG);
	assert_string_equal(r->path, "f");
	assert_string_equal(r->display, "f");
	assert_string_equal(r->open_path, "f");
	assert_int_equal(r->size, 10);
	assert_int_equal(r->mode, 0640);
	assert_int_equal(r->flags, 0);
	assert_false(r->sparse);
	assert_true(r->mtime_s == 1600000000);
	assert_int_equal(r->mtime_ns, 987654321);
	assert_int_equal(r->uid, getuid());
	struct passwd *pw = getpwuid(getuid());
	assert_string_equal(r->user, pw != NULL ? pw->pw_name : "");
	r = &fx->run.r[1];
	assert_int_equal(r->id, 1);
	assert_int_equal(r->src_index, 1);
	assert_int_equal(r->size, 1 << 20);
	assert_true(r->sparse);
	/* Both sources live in one directory: one base fd for both. */
	assert_int_equal(fx->run.stats.base_fds, 1);
}

static void test_tree_order(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	const struct rec *r;

	mkdir_at(fx->dfd, "src");
	mkfile(fx->dfd, "src/a", 5, 0644);
	mkdir_at(fx->dfd, "src/d");
	mkfile(fx->dfd, "src/d/x", 7, 0000);  /* unreadable: still an entry */
	mkdir_at(fx->dfd, "src/e");           /* empty */
	assert_int_equal(fchmodat(fx->dfd, "src/e", 0705, 0), 0);

	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_int_equal(fx->run.n, 8);
	/* Pre-order: the source's DIR first, its DIR_END last. */
	assert_int_equal(fx->run.r[0].type, PROTO_ENT_DIR);
	assert_string_equal(fx->run.r[0].path, "src");
	assert_int_equal(fx->run.r[7].type, PROTO_ENT_DIR_END);
	assert_string_equal(fx->run.r[7].path, "src");
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR), 3);
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR_END), 3);
	assert_non_null(r = find(fx, "src/a", PROTO_ENT_REG));
	assert_int_equal(r->size, 5);
	assert_string_equal(r->open_path, "src/a");
	assert_non_null(r = find(fx, "src/d/x", PROTO_ENT_REG));
	assert_int_equal(r->mode, 0);
	assert_string_equal(r->display, "src/d/x");
	/* An empty directory: DIR right before its DIR_END, both with its mode. */
	assert_non_null(r = find(fx, "src/e", PROTO_ENT_DIR));
	assert_int_equal(r[1].type, PROTO_ENT_DIR_END);
	assert_string_equal(r[1].path, "src/e");
	assert_int_equal(r->mode, 0705);
	assert_int_equal(r[1].mode, 0705);
	assert_int_equal(fx->run.stats.max_open_dirs, 2);

	/* An absolute argument, as a local client gives it. */
	char abs[128];
	const char *absp[] = { abs };
	snprintf(abs, sizeof(abs), "%s/src", fx->dir);
	run_walk(fx, &OPT_R, AT_FDCWD, false, absp, 1);
	assert_int_equal(fx->run.n, 8);
	assert_string_equal(fx->run.r[0].path, "src");
	assert_string_equal(fx->run.r[0].display, abs);
	assert_non_null(r = find(fx, "src/a", PROTO_ENT_REG));
	assert_string_equal(r->open_path, "src/a");
	assert_string_equal(r->display + strlen(abs), "/a");

	/* A trailing '/' changes nothing but the display. */
	const char *slash[] = { "src//" };
	run_walk(fx, &OPT_R, fx->dfd, false, slash, 1);
	assert_int_equal(fx->run.n, 8);
	assert_non_null(r = find(fx, "src/d/x", PROTO_ENT_REG));
	assert_string_equal(r->display, "src/d/x");
}

static void test_no_recursive(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src/", "f" };
	const struct rec *r;

	mkdir_at(fx->dfd, "src");
	mkfile(fx->dfd, "f", 1, 0644);
	run_walk(fx, &(struct walk_opts){ 0 }, fx->dfd, false, paths, 2);
	assert_int_equal(fx->run.n, 2);
	assert_non_null(r = find_skip(fx, "omitting directory 'src/' (use -r to copy it)"));
	assert_int_equal(r->code, -EISDIR);
	assert_int_equal(r->src_index, 0);
	/* The walk went on, and the skip took no id. */
	assert_non_null(r = find(fx, "f", PROTO_ENT_REG));
	assert_int_equal(r->id, 0);
	assert_int_equal(r->src_index, 1);
}

static void test_missing_source(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "nope", "no/such/dir/x", "f" };
	const struct rec *r;

	mkfile(fx->dfd, "f", 1, 0644);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 3);
	assert_int_equal(fx->run.n, 3);
	assert_non_null(r = find_skip(fx, "cannot access source 'nope': No such file or directory"));
	assert_int_equal(r->code, -ENOENT);
	assert_int_equal(r->src_index, 0);
	assert_non_null(r = find_skip(fx, "cannot access source 'no/such/dir/x': No such file "
				      "or directory"));
	assert_int_equal(r->src_index, 1);
	assert_non_null(r = find(fx, "f", PROTO_ENT_REG));
	assert_int_equal(r->src_index, 2);
}

static void test_root_and_dots(void **state)
{
	struct fixture *fx = *state;
	const char *root[] = { "/", "///" };
	const char *dot[] = { "." }, *dotdot[] = { ".." }, *subdot[] = { "sub/.." };
	const struct rec *r;
	int src, sub, slash;

	run_walk(fx, &OPT_R, AT_FDCWD, false, root, 2);
	assert_int_equal(fx->run.n, 2);
	assert_non_null(r = find_skip(fx, "cannot copy the root directory '/'; name what is in it"));
	assert_int_equal(r->code, -EINVAL);
	assert_non_null(find_skip(fx, "cannot copy the root directory '///'; name what is in it"));

	mkdir_at(fx->dfd, "src");
	mkdir_at(fx->dfd, "src/sub");
	mkfile(fx->dfd, "src/a", 3, 0644);
	src = openat(fx->dfd, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	sub = openat(fx->dfd, "src/sub", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(src >= 0 && sub >= 0);
	/* ".", ".." and "sub/.." are named after the directory they are. */
	run_walk(fx, &OPT_R, src, false, dot, 1);
	assert_int_equal(fx->run.n, 5);
	assert_string_equal(fx->run.r[0].path, "src");
	assert_non_null(r = find(fx, "src/a", PROTO_ENT_REG));
	assert_string_equal(r->display, "./a");
	assert_string_equal(r->open_path, "a");
	assert_non_null(find(fx, "src/sub", PROTO_ENT_DIR));
	run_walk(fx, &OPT_R, sub, false, dotdot, 1);
	assert_int_equal(fx->run.n, 5);
	assert_non_null(find(fx, "src/a", PROTO_ENT_REG));
	run_walk(fx, &OPT_R, src, false, subdot, 1);
	assert_int_equal(fx->run.n, 5);
	assert_non_null(r = find(fx, "src/a", PROTO_ENT_REG));
	assert_string_equal(r->display, "sub/../a");
	/* "." that is "/" is the root too. */
	slash = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(slash >= 0);
	run_walk(fx, &OPT_R, slash, false, dot, 1);
	assert_int_equal(fx->run.n, 1);
	assert_non_null(r = find_skip(fx, "cannot copy the root directory '.'; name what is in it"));
	assert_int_equal(r->code, -EINVAL);
	close(slash);
	close(sub);
	close(src);
}

/* ---- names and paths ------------------------------------------------------- */

static void test_odd_names(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	char long_name[256], p[600];
	static const char *const names[] = { "with space", "new\nline", "-dash", "--", "\xff\xfe\x80",
					      " ", "tab\tand\\back" };

	memset(long_name, 'n', 255);
	long_name[255] = '\0';
	mkdir_at(fx->dfd, "src");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "src/%s", names[i]);
		mkfile(fx->dfd, p, i, 0644);
	}
	snprintf(p, sizeof(p), "src/%s", long_name);
	mkdir_at(fx->dfd, p);
	snprintf(p, sizeof(p), "src/%s/%s", long_name, long_name);
	mkfile(fx->dfd, p, 1, 0644);

	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 2, 0), 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct rec *r;
		snprintf(p, sizeof(p), "src/%s", names[i]);
		assert_non_null(r = find(fx, p, PROTO_ENT_REG));
		assert_int_equal(r->size, i);
		assert_string_equal(r->display, p);
	}
	snprintf(p, sizeof(p), "src/%s/%s", long_name, long_name);
	assert_non_null(find(fx, p, PROTO_ENT_REG));
}

/* A path past PROTO_MAX_PATH bytes: the directory whose path is too long
 * is a skip, and nothing below it comes. */
static void test_path_too_long(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	char name[251], expect[128];
	int fd, next;
	size_t len = 3;
	unsigned levels = 0;

	memset(name, 'x', 250);
	name[250] = '\0';
	mkdir_at(fx->dfd, "src");
	fd = openat(fx->dfd, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	while (len <= PROTO_MAX_PATH + 300) {
		assert_int_equal(mkdirat(fd, name, 0755), 0);
		next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(next >= 0);
		close(fd);
		fd = next;
		len += 251;
		levels++;
	}
	mkfile(fd, "bottom", 1, 0644);
	close(fd);

	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	/* src/ + 16 names of 250 bytes = 4019 bytes; the 17th would be 4270. */
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR), 17);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 0);
	assert_int_equal(count(fx, 2, 0), 1);
	for (size_t i = 0; i < fx->run.n; i++) {
		if (fx->run.r[i].kind != 2)
			continue;
		assert_int_equal(fx->run.r[i].code, -ENAMETOOLONG);
		snprintf(expect, sizeof(expect), "xxx': its path is longer than 4096 bytes");
		assert_non_null(strstr(fx->run.r[i].msg, expect));
		/* The message keeps the tail of the path, not all 4000 bytes. */
		assert_true(strncmp(fx->run.r[i].msg, "'...", 4) == 0);
	}
	assert_true(levels > 17);
}

/* ---- symlinks ---------------------------------------------------------------- */

static void make_links(struct fixture *fx)
{
	mkdir_at(fx->dfd, "src");
	mkdir_at(fx->dfd, "src/d");
	mkfile(fx->dfd, "src/d/x", 3, 0644);
	mkfile(fx->dfd, "src/a", 4, 0644);
	assert_int_equal(symlinkat("nowhere", fx->dfd, "src/dangling"), 0);
	assert_int_equal(symlinkat("d", fx->dfd, "src/todir"), 0);
	assert_int_equal(symlinkat("a", fx->dfd, "src/tofile"), 0);
	assert_int_equal(symlinkat("..", fx->dfd, "src/d/up"), 0);
	assert_int_equal(symlinkat("self", fx->dfd, "src/self"), 0);
	assert_int_equal(symlinkat("src", fx->dfd, "ln"), 0);
}

static void test_symlinks(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src", "ln" };
	const struct rec *r;

	make_links(fx);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 2);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_int_equal(find(fx, "src", PROTO_ENT_DIR_END)->flags, 0); /* nothing skipped */
	assert_non_null(r = find(fx, "src/dangling", PROTO_ENT_SYMLINK));
	assert_string_equal(r->target, "nowhere");
	assert_non_null(r = find(fx, "src/todir", PROTO_ENT_SYMLINK));
	assert_string_equal(r->target, "d");
	assert_non_null(r = find(fx, "src/tofile", PROTO_ENT_SYMLINK));
	assert_string_equal(r->target, "a");
	assert_non_null(r = find(fx, "src/d/up", PROTO_ENT_SYMLINK));
	assert_string_equal(r->target, "..");
	assert_non_null(find(fx, "src/self", PROTO_ENT_SYMLINK));
	/* Not followed: nothing under the links. */
	assert_null(find(fx, "src/todir/x", 0));
	/* A top-level symlink is a symlink entry too (cp -rP). */
	assert_non_null(r = find(fx, "ln", PROTO_ENT_SYMLINK));
	assert_string_equal(r->target, "src");
	assert_int_equal(r->src_index, 1);
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR), 2);

	/* "ln/" names the directory the link points to (path resolution
	 * follows a symlink before a trailing '/'), even without -L; its
	 * items open from the directory itself, through no symlink. "a/"
	 * is not a directory. */
	const char *slash[] = { "ln/", "src/a/", "src/dangling/" };
	run_walk(fx, &OPT_R, fx->dfd, false, slash, 3);
	assert_non_null(r = find(fx, "ln", PROTO_ENT_DIR));
	assert_string_equal(r->display, "ln/");
	assert_non_null(r = find(fx, "ln/d/x", PROTO_ENT_REG));
	assert_string_equal(r->open_path, "d/x");
	assert_string_equal(r->display, "ln/d/x");
	assert_non_null(find(fx, "ln/todir", PROTO_ENT_SYMLINK));
	assert_non_null(r = find_skip(fx, "cannot access source 'src/a/': Not a directory"));
	assert_int_equal(r->code, -ENOTDIR);
	assert_int_equal(r->src_index, 1);
	assert_non_null(r = find_skip(fx, "cannot follow symlink 'src/dangling/': No such file or "
				      "directory"));
	assert_int_equal(r->src_index, 2);
	assert_int_equal(count(fx, 2, 0), 2);
	assert_int_equal(fx->run.stats.base_fds, 1);
}

static void test_deref(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src", "ln" };
	const struct rec *r;

	make_links(fx);
	run_walk(fx, &(struct walk_opts){ .recursive = true, .deref = true }, fx->dfd, false,
		 paths, 2);
	/* Followed: a directory and a file. */
	assert_non_null(find(fx, "src/todir", PROTO_ENT_DIR));
	assert_non_null(r = find(fx, "src/todir/x", PROTO_ENT_REG));
	assert_string_equal(r->open_path, "src/todir/x");
	assert_non_null(r = find(fx, "src/tofile", PROTO_ENT_REG));
	assert_int_equal(r->size, 4);
	assert_int_equal(count(fx, 1, PROTO_ENT_SYMLINK), 0);
	/* Dangling, a loop of symlinks, and a loop back to an ancestor: skips. */
	assert_non_null(r = find_skip(fx, "cannot follow symlink 'src/dangling': No such file or "
				      "directory"));
	assert_int_equal(r->code, -ENOENT);
	assert_non_null(r = find_skip(fx, "cannot follow symlink 'src/self': Too many levels of "
				      "symbolic links"));
	assert_int_equal(r->code, -ELOOP);
	assert_non_null(r = find_skip(fx, "'src/d/up' is a loop back to 'src'"));
	assert_int_equal(r->code, -ELOOP);
	assert_non_null(find_skip(fx, "'src/todir/up' is a loop back to 'src'"));
	/* The top-level link to a directory is followed, under its own name. */
	assert_non_null(r = find(fx, "ln", PROTO_ENT_DIR));
	assert_int_equal(r->src_index, 1);
	assert_non_null(find(fx, "ln/d/x", PROTO_ENT_REG));
	assert_non_null(find_skip(fx, "'ln/d/up' is a loop back to 'ln'"));
	assert_int_equal(count(fx, 2, 0), 8);
	/* The directories that lost an entry to a skip say so at their end
	 * (--delete then removes nothing from them): every one here (the
	 * walk without skips, test_symlinks, flags none). */
	static const char *const lost[] = { "src", "src/d", "src/todir", "ln", "ln/d" };
	for (size_t i = 0; i < sizeof(lost) / sizeof(lost[0]); i++)
		assert_int_equal(find(fx, lost[i], PROTO_ENT_DIR_END)->flags, PROTO_ENT_INCOMPLETE);
}

/* ---- hard links ------------------------------------------------------------------ */

static void test_hardlinks(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" }, *both[] = { "src", "out/h4" };
	const struct rec *first = NULL;
	const char *names[] = { "src/h1", "src/h2", "src/h3" };

	mkdir_at(fx->dfd, "src");
	mkdir_at(fx->dfd, "out");
	mkfile(fx->dfd, "src/h1", 9, 0644);
	assert_int_equal(linkat(fx->dfd, "src/h1", fx->dfd, "src/h2", 0), 0);
	assert_int_equal(linkat(fx->dfd, "src/h1", fx->dfd, "src/h3", 0), 0);
	assert_int_equal(linkat(fx->dfd, "src/h1", fx->dfd, "out/h4", 0), 0);
	mkfile(fx->dfd, "src/solo", 2, 0644);

	/* Without -H: separate files. */
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 4);
	assert_int_equal(count(fx, 1, PROTO_ENT_HARDLINK), 0);
	for (size_t i = 0; i < fx->run.n; i++)
		assert_int_equal(fx->run.r[i].flags, 0);
	assert_int_equal(fx->run.stats.links, 0);

	/* With -H: the first one met is LINKED, the others name it. */
	struct walk_opts h = { .recursive = true, .hardlinks = true };
	run_walk(fx, &h, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 2);
	assert_int_equal(count(fx, 1, PROTO_ENT_HARDLINK), 2);
	for (size_t i = 0; i < fx->run.n && first == NULL; i++)
		if (fx->run.r[i].type == PROTO_ENT_REG && strcmp(fx->run.r[i].path, "src/solo") != 0)
			first = &fx->run.r[i];
	assert_non_null(first);
	assert_int_equal(first->flags, PROTO_ENT_LINKED);
	assert_int_equal(first->size, 9);
	for (size_t i = 0; i < 3; i++) {
		const struct rec *r = find(fx, names[i], 0);
		assert_non_null(r);
		if (r == first)
			continue;
		assert_int_equal(r->type, PROTO_ENT_HARDLINK);
		assert_int_equal(r->link_id, first->id);
		assert_string_equal(r->open_path, "");
	}
	assert_int_equal(find(fx, "src/solo", PROTO_ENT_REG)->flags, 0);
	/* One link of four not seen: the map keeps that one file. */
	assert_int_equal(fx->run.stats.links, 1);

	/* Across sources: the fourth link is found too, and the map empties. */
	run_walk(fx, &h, fx->dfd, false, both, 2);
	assert_int_equal(count(fx, 1, PROTO_ENT_HARDLINK), 3);
	assert_int_equal(find(fx, "h4", PROTO_ENT_HARDLINK)->src_index, 1);
	assert_int_equal(fx->run.stats.links, 0);
}

/* Many link groups: the map grows, and removals keep every entry findable
 * (the probing must survive deletions). */
static void test_hardlink_map(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "a", "b" };
	char p[64], q[64];

	mkdir_at(fx->dfd, "a");
	mkdir_at(fx->dfd, "b");
	for (int i = 0; i < 300; i++) {
		snprintf(p, sizeof(p), "a/%d", i);
		snprintf(q, sizeof(q), "b/%d", i);
		mkfile(fx->dfd, p, (size_t)i, 0644);
		assert_int_equal(linkat(fx->dfd, p, fx->dfd, q, 0), 0);
	}
	run_walk(fx, &(struct walk_opts){ .recursive = true, .hardlinks = true }, fx->dfd, false,
		 paths, 2);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 300);
	assert_int_equal(count(fx, 1, PROTO_ENT_HARDLINK), 300);
	for (int i = 0; i < 300; i++) {
		const struct rec *r, *l;
		snprintf(p, sizeof(p), "a/%d", i);
		snprintf(q, sizeof(q), "b/%d", i);
		assert_non_null(r = find(fx, p, PROTO_ENT_REG));
		assert_non_null(l = find(fx, q, PROTO_ENT_HARDLINK));
		assert_int_equal(l->link_id, r->id);
	}
	assert_int_equal(fx->run.stats.links, 0);
}

/* ---- special files ------------------------------------------------------------------ */

static void make_socket(struct fixture *fx, const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(s >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", fx->dir, name);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(s);
}

static void test_specials(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src", "fifo2" };
	const struct rec *r;

	mkdir_at(fx->dfd, "src");
	assert_int_equal(mkfifoat(fx->dfd, "src/fifo", 0640), 0);
	assert_int_equal(mkfifoat(fx->dfd, "fifo2", 0600), 0);
	make_socket(fx, "src/sock");
	/* Opening a FIFO with no writer would block: the walk must not. */
	alarm(30);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 2);
	assert_int_equal(count(fx, 2, 0), 3);
	assert_non_null(r = find_skip(fx, "skipping special file 'src/fifo' (use -p to copy FIFOs, "
				      "sockets and devices)"));
	assert_int_equal(r->code, -EOPNOTSUPP);
	assert_non_null(find_skip(fx, "skipping special file 'src/sock' (use -p to copy FIFOs, "
				  "sockets and devices)"));
	assert_non_null(r = find_skip(fx, "skipping special file 'fifo2' (use -p to copy FIFOs, "
				      "sockets and devices)"));
	assert_int_equal(r->src_index, 1);
	assert_int_equal(fx->run.n, 5);

	run_walk(fx, &(struct walk_opts){ .recursive = true, .specials = true }, fx->dfd, false,
		 paths, 2);
	alarm(0);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_non_null(r = find(fx, "src/fifo", PROTO_ENT_FIFO));
	assert_int_equal(r->mode, 0640);
	assert_non_null(find(fx, "src/sock", PROTO_ENT_SOCK));
	assert_non_null(r = find(fx, "fifo2", PROTO_ENT_FIFO));
	assert_int_equal(r->src_index, 1);
}

static void test_devices(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	const struct rec *r;

	mkdir_at(fx->dfd, "src");
	if (mknodat(fx->dfd, "src/null", S_IFCHR | 0666, makedev(1, 3)) != 0)
		testutil_skip("cannot create a character device here (%s): needs CAP_MKNOD",
			      strerror(errno));
	if (mknodat(fx->dfd, "src/loop", S_IFBLK | 0660, makedev(7, 200)) != 0)
		testutil_skip("cannot create a block device here (%s): needs CAP_MKNOD",
			      strerror(errno));
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 2, 0), 2);
	assert_non_null(find_skip(fx, "skipping special file 'src/null' (use -p to copy FIFOs, "
				  "sockets and devices)"));
	run_walk(fx, &(struct walk_opts){ .recursive = true, .specials = true }, fx->dfd, false,
		 paths, 1);
	assert_non_null(r = find(fx, "src/null", PROTO_ENT_CHR));
	assert_int_equal(r->rdev, makedev(1, 3));
	assert_non_null(r = find(fx, "src/loop", PROTO_ENT_BLK));
	assert_int_equal(r->rdev, makedev(7, 200));
}

/* ---- errors inside a tree ---------------------------------------------------------- */

static void test_opendir_fails(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" }, *two[] = { "src", "f" };
	const struct rec *r;

	mkdir_at(fx->dfd, "src");
	mkdir_at(fx->dfd, "src/sub");
	mkfile(fx->dfd, "src/sub/x", 1, 0644);
	mkfile(fx->dfd, "src/y", 1, 0644);
	mkfile(fx->dfd, "f", 1, 0644);

	/* The second directory opened (src/sub) cannot be: no DIR, nothing in
	 * it, no DIR_END; the rest goes on. */
	fault_arm(FAULT_WALK_OPENDIR, 2);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(atomic_load(&fault_armed), 0);
	assert_non_null(r = find_skip(fx, "cannot open directory 'src/sub': Permission denied"));
	assert_int_equal(r->code, -EACCES);
	assert_int_equal(r->src_index, 0);
	assert_null(find(fx, "src/sub", 0));
	assert_null(find(fx, "src/sub/x", 0));
	assert_non_null(find(fx, "src/y", PROTO_ENT_REG));
	assert_int_equal(fx->run.n, 4);

	/* The source itself: a skip, and the next source still comes, as id 0. */
	fault_arm(FAULT_WALK_OPENDIR, 1);
	run_walk(fx, &OPT_R, fx->dfd, false, two, 2);
	assert_int_equal(fx->run.n, 2);
	assert_non_null(find_skip(fx, "cannot open directory 'src': Permission denied"));
	assert_non_null(r = find(fx, "f", PROTO_ENT_REG));
	assert_int_equal(r->id, 0);
}

static void test_readdir_fails(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	const struct rec *r;

	mkdir_at(fx->dfd, "src");
	mkfile(fx->dfd, "src/a", 1, 0644);
	mkfile(fx->dfd, "src/b", 1, 0644);
	mkfile(fx->dfd, "src/c", 1, 0644);

	/* At once: DIR, the skip, and still its DIR_END. */
	fault_arm(FAULT_WALK_READDIR, 1);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(fx->run.n, 3);
	assert_int_equal(fx->run.r[0].type, PROTO_ENT_DIR);
	assert_non_null(r = find_skip(fx, "cannot read directory 'src': Input/output error"));
	assert_int_equal(r->code, -EIO);
	assert_true(r == &fx->run.r[1]);
	assert_int_equal(fx->run.r[2].type, PROTO_ENT_DIR_END);
	assert_int_equal(fx->run.r[2].id, 1);

	/* Midway (the fourth readdir: two of ".", "..", a, b, c came before):
	 * what came before stays, then the skip and the DIR_END. */
	fault_arm(FAULT_WALK_READDIR, 4);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_true(count(fx, 1, PROTO_ENT_REG) <= 3);
	assert_int_equal(count(fx, 2, 0), 1);
	assert_int_equal(fx->run.r[fx->run.n - 2].kind, 2);
	assert_string_equal(fx->run.r[fx->run.n - 2].msg,
			    "cannot read directory 'src': Input/output error");
	assert_int_equal(fx->run.r[fx->run.n - 1].type, PROTO_ENT_DIR_END);
}

/* Walks "src" in fx->dfd and writes one line per step to fd: "I <type>
 * <path>" or "S <code> <msg>". For a child process. Returns 0 or -1. */
static int walk_to_fd(struct fixture *fx, int fd)
{
	const char *paths[] = { "src" };
	struct walk_item *it = malloc(sizeof(*it));
	struct walk_skip sk;
	struct pc_err e;
	struct walk *w;
	int ret;

	pc_err_init(&e);
	w = walk_new(&OPT_R, fx->dfd, false, paths, 1);
	if (it == NULL || w == NULL)
		return -1;
	while ((ret = walk_next(w, it, &sk, &e)) > 0) {
		if (ret == 1)
			dprintf(fd, "I %u %s\n", it->e.type, it->e.path);
		else
			dprintf(fd, "S %d %s\n", sk.code, sk.msg);
	}
	walk_free(w);
	free(it);
	return ret;
}

/* Real permission errors, not injected: a directory nobody may open (000)
 * and one that may be read but not searched (0444). Root ignores mode
 * bits, so as root the walk runs in a child that became nobody. */
static void test_permissions(void **state)
{
	struct fixture *fx = *state;
	char out[4096] = "";
	int p[2], status;
	ssize_t n, got = 0;
	pid_t pid;

	mkdir_at(fx->dfd, "src");
	mkdir_at(fx->dfd, "src/closed");
	mkfile(fx->dfd, "src/closed/x", 1, 0644);
	mkdir_at(fx->dfd, "src/noexec");
	mkfile(fx->dfd, "src/noexec/y", 1, 0644);
	mkfile(fx->dfd, "src/ok", 1, 0644);
	assert_int_equal(fchmodat(fx->dfd, "src/closed", 0, 0), 0);
	assert_int_equal(fchmodat(fx->dfd, "src/noexec", 0444, 0), 0);
	assert_int_equal(fchmod(fx->dfd, 0755), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
				       setuid(65534) != 0))
			_exit(2);
		_exit(walk_to_fd(fx, p[1]) == 0 ? 0 : 1);
	}
	close(p[1]);
	while ((n = read(p[0], out + got, sizeof(out) - 1 - (size_t)got)) > 0)
		got += n;
	close(p[0]);
	out[got] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* restore, so that teardown can remove them */
	assert_int_equal(fchmodat(fx->dfd, "src/closed", 0755, 0), 0);
	assert_int_equal(fchmodat(fx->dfd, "src/noexec", 0755, 0), 0);

	assert_non_null(strstr(out, "S -13 cannot open directory 'src/closed': Permission "
				    "denied\n"));
	assert_null(strstr(out, "src/closed\n"));
	assert_null(strstr(out, "src/closed/x"));
	assert_non_null(strstr(out, "I 2 src/noexec\n"));
	assert_non_null(strstr(out, "S -13 cannot access 'src/noexec/y': Permission denied\n"));
	assert_non_null(strstr(out, "I 9 src/noexec\n"));
	assert_non_null(strstr(out, "I 1 src/ok\n"));
	assert_non_null(strstr(out, "I 9 src\n"));
}

/* Entries that vanish between readdir and fstatat are dropped silently. */
static void test_vanished(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	struct walk_item *it = calloc(1, sizeof(*it));
	struct walk_skip sk;
	struct pc_err e;
	struct walk *w;
	char p[32];
	int ret, items = 0;

	assert_non_null(it);
	mkdir_at(fx->dfd, "src");
	for (int i = 0; i < 10; i++) {
		snprintf(p, sizeof(p), "src/f%d", i);
		mkfile(fx->dfd, p, 1, 0644);
	}
	mkdir_at(fx->dfd, "src/gone");
	pc_err_init(&e);
	w = walk_new(&OPT_R, fx->dfd, false, paths, 1);
	assert_non_null(w);
	assert_int_equal(walk_next(w, it, &sk, &e), 1);
	assert_int_equal(it->e.type, PROTO_ENT_DIR);
	/* The first entry: readdir has read the whole (small) directory by now. */
	assert_int_equal(walk_next(w, it, &sk, &e), 1);
	for (int i = 0; i < 10; i++) {
		snprintf(p, sizeof(p), "src/f%d", i);
		if (strcmp(p, it->e.path) != 0)
			assert_int_equal(unlinkat(fx->dfd, p, 0), 0);
	}
	bool first_gone = strcmp(it->e.path, "src/gone") == 0;
	if (!first_gone)
		assert_int_equal(unlinkat(fx->dfd, "src/gone", AT_REMOVEDIR), 0);
	while ((ret = walk_next(w, it, &sk, &e)) == 1)
		items++;
	if (ret == 2)
		fail_msg("unexpected skip: %s", sk.msg);
	assert_int_equal(ret, 0);
	/* Only DIR_ENDs: src's, and gone's first if gone came first. */
	assert_int_equal(items, first_gone ? 2 : 1);
	assert_int_equal(it->e.type, PROTO_ENT_DIR_END);
	walk_free(w);
	pc_err_destroy(&e);
	free(it);
}

/* ---- depth and size ---------------------------------------------------------------- */

/* levels directories "d" below base/src, a file "leaf" at the bottom. */
static void make_deep(struct fixture *fx, unsigned levels)
{
	int fd, next;

	mkdir_at(fx->dfd, "src");
	fd = openat(fx->dfd, "src", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (unsigned i = 0; i < levels; i++) {
		assert_int_equal(mkdirat(fd, "d", 0755), 0);
		next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(next >= 0);
		close(fd);
		fd = next;
	}
	mkfile(fd, "leaf", 1, 0644);
	close(fd);
}

static void test_deep_60(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };

	make_deep(fx, 60);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR), 61);
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR_END), 61);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 1);
	/* Pre-order going down, DIR_ENDs coming back up (run_walk checked the
	 * nesting): DIRs first, then the leaf, then the DIR_ENDs. */
	assert_int_equal(fx->run.r[60].type, PROTO_ENT_DIR);
	assert_int_equal(fx->run.r[61].type, PROTO_ENT_REG);
	assert_int_equal(fx->run.r[62].type, PROTO_ENT_DIR_END);
	assert_int_equal(strlen(fx->run.r[61].path), 3 + 60 * 2 + 5);
	/* One open directory per level, no more. */
	assert_int_equal(fx->run.stats.max_open_dirs, 61);
}

static void test_depth_cap(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	struct rlimit rl;

	/* 1024 open directories need more than the usual 1024 fds. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 1200) {
		if (rl.rlim_max < 1200)
			testutil_skip("RLIMIT_NOFILE hard limit %lu < 1200: cannot hold 1024 "
				      "open directories", (unsigned long)rl.rlim_max);
		rl.rlim_cur = 1200;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	make_deep(fx, WALK_MAX_DEPTH + 5);
	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_int_equal(count(fx, 1, PROTO_ENT_DIR), WALK_MAX_DEPTH);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 0);
	assert_int_equal(count(fx, 2, 0), 1);
	for (size_t i = 0; i < fx->run.n; i++) {
		if (fx->run.r[i].kind != 2)
			continue;
		assert_int_equal(fx->run.r[i].code, -ENAMETOOLONG);
		assert_non_null(strstr(fx->run.r[i].msg, "/d/d': more than 1024 directory levels "
						       "deep"));
	}
	assert_int_equal(fx->run.stats.max_open_dirs, WALK_MAX_DEPTH);
}

/* ndirs directories of per files each under base/NAME: NAME/dK/fN with N
 * numbering all files from 0. */
static void make_many(struct fixture *fx, const char *name, unsigned ndirs, unsigned per)
{
	char p[64];
	int top, d;

	mkdir_at(fx->dfd, name);
	top = openat(fx->dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(top >= 0);
	for (unsigned i = 0; i < ndirs; i++) {
		snprintf(p, sizeof(p), "d%u", i);
		assert_int_equal(mkdirat(top, p, 0755), 0);
		d = openat(top, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(d >= 0);
		for (unsigned j = 0; j < per; j++) {
			snprintf(p, sizeof(p), "f%u", i * per + j);
			int fd = openat(d, p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			assert_true(fd >= 0);
			close(fd);
		}
		close(d);
	}
	close(top);
}

/* 20,000 files: each once, ids with no gap, and the walker's memory the
 * same as for 200 files (flat in the number of files). */
static void test_many_files(void **state)
{
	struct fixture *fx = *state;
	const char *small[] = { "small" }, *big[] = { "big" };
	enum { NDIRS = 100, PER = 200, N = NDIRS * PER };
	unsigned char *seen = calloc(N, 1);
	size_t small_heap;

	assert_non_null(seen);
	make_many(fx, "small", 2, 100);
	make_many(fx, "big", NDIRS, PER);

	run_walk(fx, &OPT_R, fx->dfd, false, small, 1);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), 200);
	small_heap = fx->run.stats.max_heap_bytes;
	assert_true(small_heap > 0);
	assert_int_equal(fx->run.stats.max_open_dirs, 2);

	run_walk(fx, &OPT_R, fx->dfd, false, big, 1);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_int_equal(count(fx, 1, PROTO_ENT_REG), N);
	assert_int_equal(fx->run.n, N + 2 * (NDIRS + 1));
	for (size_t i = 0; i < fx->run.n; i++) {
		const struct rec *r = &fx->run.r[i];
		unsigned d, f;
		assert_int_equal(r->id, i);  /* consecutive: run_walk checked no gap too */
		if (r->type != PROTO_ENT_REG)
			continue;
		assert_int_equal(sscanf(r->path, "big/d%u/f%u", &d, &f), 2);
		assert_true(f < N && f / PER == d);
		assert_int_equal(seen[f], 0);
		seen[f] = 1;
	}
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(seen[i], 1);
	assert_int_equal(fx->run.stats.max_open_dirs, 2);
	assert_int_equal(fx->run.stats.base_fds, 1);
	/* 100 times the files, not one byte more of walker memory. */
	assert_int_equal(fx->run.stats.max_heap_bytes, small_heap);
	free(seen);
}

/* ---- beneath a daemon's root -------------------------------------------------------- */

/* base/outside/secret, and the daemon's root base/root: src/{a, in -> a,
 * out -> ../../outside}, esc -> ../outside, lnk -> src. Returns root's fd. */
static int make_root(struct fixture *fx)
{
	int root;

	mkdir_at(fx->dfd, "outside");
	mkfile(fx->dfd, "outside/secret", 6, 0600);
	mkdir_at(fx->dfd, "root");
	mkdir_at(fx->dfd, "root/src");
	mkfile(fx->dfd, "root/src/a", 2, 0644);
	assert_int_equal(symlinkat("a", fx->dfd, "root/src/in"), 0);
	assert_int_equal(symlinkat("../../outside", fx->dfd, "root/src/out"), 0);
	assert_int_equal(symlinkat("../outside", fx->dfd, "root/esc"), 0);
	assert_int_equal(symlinkat("src", fx->dfd, "root/lnk"), 0);
	root = openat(fx->dfd, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(root >= 0);
	return root;
}

/* Beneath a daemon's root: sources that lead outside it are skips. */
static void test_beneath_escapes(void **state)
{
	struct fixture *fx = *state;
	const char *escapes[] = { "../outside", "/etc", "esc/secret", "src/./a", "esc" };
	const char *esc_slash[] = { "esc/" }, *esc[] = { "esc" };
	const struct rec *r;
	int root = make_root(fx);

	/* Sources that lead outside the root, or are not clean relative paths. */
	run_walk(fx, &OPT_R, root, true, escapes, 5);
	assert_int_equal(count(fx, 2, 0), 4);
	assert_non_null(r = find_skip(fx, "source '../outside' leads outside the served directory"));
	assert_int_equal(r->code, -EXDEV);
	assert_non_null(find_skip(fx, "source '/etc' leads outside the served directory"));
	assert_non_null(find_skip(fx, "source 'esc/secret' leads outside the served directory"));
	assert_non_null(find_skip(fx, "source 'src/./a' leads outside the served directory"));
	/* esc itself is a symlink: an entry, not followed. */
	assert_non_null(r = find(fx, "esc", PROTO_ENT_SYMLINK));
	assert_string_equal(r->target, "../outside");

	/* "esc/" would follow esc: outside, so a skip even without -L; so is
	 * esc with -L. */
	run_walk(fx, &OPT_R, root, true, esc_slash, 1);
	assert_int_equal(fx->run.n, 1);
	assert_non_null(find_skip(fx, "cannot follow symlink 'esc/': it leads outside the served "
				  "directory"));
	run_walk(fx, &(struct walk_opts){ .recursive = true, .deref = true }, root, true, esc, 1);
	assert_int_equal(fx->run.n, 1);
	assert_non_null(r = find_skip(fx, "cannot follow symlink 'esc': it leads outside the "
				      "served directory"));
	assert_int_equal(r->code, -EXDEV);
	close(root);
}

/* Beneath a daemon's root: items open beneath it, and -L stays in it. */
static void test_beneath_items(void **state)
{
	struct fixture *fx = *state;
	const char *srcs[] = { "src/", "." }, *lnk[] = { "lnk/" };
	const struct rec *r;
	int root = make_root(fx);

	run_walk(fx, &OPT_R, root, true, srcs, 2);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_non_null(r = find(fx, "src/a", PROTO_ENT_REG));
	assert_string_equal(r->open_path, "src/a");
	assert_non_null(find(fx, "src/out", PROTO_ENT_SYMLINK));
	assert_non_null(r = find(fx, "root/src/a", PROTO_ENT_REG));
	assert_string_equal(r->open_path, "src/a");
	assert_string_equal(r->display, "./src/a");
	assert_int_equal(fx->run.stats.base_fds, 0);

	/* -L follows a symlink only while it stays beneath the root. */
	run_walk(fx, &(struct walk_opts){ .recursive = true, .deref = true }, root, true, srcs, 1);
	assert_non_null(r = find(fx, "src/in", PROTO_ENT_REG));
	assert_int_equal(r->size, 2);
	assert_non_null(r = find_skip(fx, "cannot follow symlink 'src/out': it leads outside the "
				      "served directory"));
	assert_int_equal(r->code, -EXDEV);
	assert_null(find(fx, "src/out/secret", 0));

	/* "lnk/" follows lnk beneath the root; its items open from the
	 * directory itself. */
	run_walk(fx, &OPT_R, root, true, lnk, 1);
	assert_int_equal(count(fx, 2, 0), 0);
	assert_non_null(find(fx, "lnk", PROTO_ENT_DIR));
	assert_non_null(r = find(fx, "lnk/a", PROTO_ENT_REG));
	assert_string_equal(r->open_path, "a");
	assert_int_equal(fx->run.stats.base_fds, 1);
	close(root);
}

/* ---- attributes and names ------------------------------------------------------------- */

static void test_owner_names(void **state)
{
	struct fixture *fx = *state;
	const char *paths[] = { "src" };
	struct passwd *pw;
	struct group *gr;
	const struct rec *r;
	char expect_user[256] = "", expect_group[256] = "";

	if (geteuid() != 0)
		testutil_skip("chown to other owners needs root");
	mkdir_at(fx->dfd, "src");
	mkfile(fx->dfd, "src/nobody", 1, 0644);
	mkfile(fx->dfd, "src/unknown", 1, 0644);
	assert_int_equal(fchownat(fx->dfd, "src/nobody", 65534, 65534, 0), 0);
	assert_int_equal(fchownat(fx->dfd, "src/unknown", 3999999, 3999998, 0), 0);
	if ((pw = getpwuid(65534)) != NULL)
		snprintf(expect_user, sizeof(expect_user), "%s", pw->pw_name);
	if ((gr = getgrgid(65534)) != NULL)
		snprintf(expect_group, sizeof(expect_group), "%s", gr->gr_name);
	assert_null(getpwuid(3999999));

	run_walk(fx, &OPT_R, fx->dfd, false, paths, 1);
	assert_non_null(r = find(fx, "src/nobody", PROTO_ENT_REG));
	assert_int_equal(r->uid, 65534);
	assert_int_equal(r->gid, 65534);
	assert_string_equal(r->user, expect_user);
	assert_string_equal(r->group, expect_group);
	assert_non_null(r = find(fx, "src/unknown", PROTO_ENT_REG));
	assert_int_equal(r->uid, 3999999);
	assert_int_equal(r->gid, 3999998);
	assert_string_equal(r->user, "");
	assert_string_equal(r->group, "");
	assert_non_null(r = find(fx, "src", PROTO_ENT_DIR));
	assert_string_equal(r->user, "root");
}

static void test_empty_and_free(void **state)
{
	(void)state;
	struct walk_item *it = calloc(1, sizeof(*it));
	struct walk_skip sk;
	struct pc_err e;
	struct walk *w;

	assert_non_null(it);
	walk_free(NULL);
	pc_err_init(&e);
	w = walk_new(&OPT_R, AT_FDCWD, false, NULL, 0);
	assert_non_null(w);
	assert_int_equal(walk_next(w, it, &sk, &e), 0);
	assert_int_equal(walk_next(w, it, &sk, &e), 0);
	walk_free(w);
	pc_err_destroy(&e);
	free(it);

	/* The fault sites are armed by name too (PCOPY_TEST_FAULT). */
	assert_int_equal(fault_arm_spec("walk_opendir:3,walk_readdir:1"), 0);
	assert_int_equal(atomic_load(&fault_armed), 2);
	fault_arm(FAULT_WALK_OPENDIR, 0);
	fault_arm(FAULT_WALK_READDIR, 0);
	assert_int_equal(atomic_load(&fault_armed), 0);
}

#define FX_TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		FX_TEST(test_file_source),
		FX_TEST(test_tree_order),
		FX_TEST(test_no_recursive),
		FX_TEST(test_missing_source),
		FX_TEST(test_root_and_dots),
		FX_TEST(test_odd_names),
		FX_TEST(test_path_too_long),
		FX_TEST(test_symlinks),
		FX_TEST(test_deref),
		FX_TEST(test_hardlinks),
		FX_TEST(test_hardlink_map),
		FX_TEST(test_specials),
		FX_TEST(test_devices),
		FX_TEST(test_opendir_fails),
		FX_TEST(test_readdir_fails),
		FX_TEST(test_permissions),
		FX_TEST(test_vanished),
		FX_TEST(test_deep_60),
		FX_TEST(test_depth_cap),
		FX_TEST(test_many_files),
		FX_TEST(test_beneath_escapes),
		FX_TEST(test_beneath_items),
		FX_TEST(test_owner_names),
		FX_TEST(test_empty_and_free),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
