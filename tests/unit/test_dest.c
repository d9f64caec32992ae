/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for dest: every entry kind on a temp dir, rename_top, replacing
 * and merging, entries in each other's way, hostile paths and symlinks
 * (nothing may appear outside), modes with and without -p, times with
 * nanoseconds, owners as root (nobody/nogroup, by name and numeric), the
 * bounded directory cache, a directory removed behind the cache's back,
 * and several threads creating files at once (run under TSan by
 * tests/run-all: every unit test carries the "threads" label). Runs as root
 * (the owner tests need it); the non-root rules run in a child that drops
 * to nobody. Then a seccomp filter takes O_TMPFILE and openat2 away and
 * the tests that create files run again: named temporary files, and the
 * O_NOFOLLOW walk instead of openat2. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

#include "sys/err.h"
#include "pipeline/dest.h"
#include "pipeline/journal.h"

struct box {
	char base[64];          /* the sandbox */
	char root[96];          /* base/root: the destination */
	char outside[96];       /* base/outside: must stay empty */
	int rootfd;
	struct pc_err err;
	struct dest_opts o;
};

static int box_setup(void **state)
{
	struct box *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return -1;
	snprintf(b->base, sizeof(b->base), "/tmp/pcopy-test-dest-XXXXXX");
	b->rootfd = testutil_root(b->base);
	if (b->rootfd < 0) {
		free(b);
		return -1;
	}
	snprintf(b->root, sizeof(b->root), "%s/root", b->base);
	snprintf(b->outside, sizeof(b->outside), "%s/outside", b->base);
	if (mkdir(b->outside, 0755) != 0)
		return -1;
	pc_err_init(&b->err);
	b->o.umask = 022;
	*state = b;
	return 0;
}

static int box_teardown(void **state)
{
	struct box *b = *state;

	close(b->rootfd);
	pc_err_destroy(&b->err);
	(void)testutil_rm_rf(b->base);
	free(b);
	return 0;
}

/* A fresh error record (pc_err keeps the first error only). */
static void box_clear(struct box *b)
{
	pc_err_destroy(&b->err);
	pc_err_init(&b->err);
}

static const char *box_msg(struct box *b)
{
	static char msg[1024];

	(void)pc_err_get(&b->err, msg, sizeof(msg));
	return msg;
}

/* Entries are large (two 4 KiB paths); tests fill this one. */
static struct proto_entry ent_buf;

static struct proto_entry *ent(int type, const char *path, uint32_t mode)
{
	memset(&ent_buf, 0, sizeof(ent_buf));
	ent_buf.type = (uint8_t)type;
	ent_buf.mode = mode;
	snprintf(ent_buf.path, sizeof(ent_buf.path), "%s", path);
	return &ent_buf;
}

static struct dest *box_dest(struct box *b, const char *top)
{
	struct dest *d = dest_new(b->rootfd, top, &b->o, "DST");

	assert_non_null(d);
	box_clear(b);
	return d;
}

/* Writes a regular file through dest: open, pwrite, commit. */
static int put_file(struct box *b, struct dest *d, const char *path, const char *text,
		    uint32_t mode)
{
	struct dest_file *f = NULL;
	size_t n = strlen(text);
	int ret = dest_file_open(d, path, &f, &b->err);

	if (ret < 0)
		return ret;
	assert_non_null(f);
	assert_int_equal(pwrite(dest_file_fd(f), text, n, 0), (ssize_t)n);
	return dest_file_commit(d, f, ent(PROTO_ENT_REG, path, mode), n, &b->err);
}

static void expect_text(struct box *b, const char *rel, const char *text)
{
	char buf[256];
	ssize_t n;
	int fd = openat(b->rootfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		fail_msg("cannot open %s/%s: %s", b->root, rel, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, text);
}

/* Writes text as the file rel, made anew. */
static void write_at(struct box *b, const char *rel, const char *text)
{
	int fd = openat(b->rootfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static struct stat lstat_at(struct box *b, const char *rel)
{
	struct stat st;

	if (fstatat(b->rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0)
		fail_msg("cannot stat %s/%s: %s", b->root, rel, strerror(errno));
	return st;
}

static bool exists_at(struct box *b, const char *rel)
{
	struct stat st;

	return fstatat(b->rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Entries in dir (not . and ..) whose name contains part (NULL: all). */
static int count_entries(const char *dir, const char *part)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(dp);
	while ((de = readdir(dp)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (part == NULL || strstr(de->d_name, part) != NULL)
			n++;
	}
	closedir(dp);
	return n;
}

/* Nothing outside, and no temporary name left in dir. */
static void expect_clean(struct box *b, const char *dir)
{
	assert_int_equal(count_entries(b->outside, NULL), 0);
	assert_int_equal(count_entries(dir, ".pcopy-"), 0);
}

static void test_check_relpath(void **state)
{
	static const char *const ok[] = { "a", "a/b", "a b/c\nd", "-x", "...", ".a/..b" };
	static const char *const bad[] = { "", "/a", "a/", "a//b", ".", "..", "a/.", "a/../b",
					   "./a" };
	char longname[300];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(proto_check_relpath(ok[i], strlen(ok[i])), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (proto_check_relpath(bad[i], strlen(bad[i])) != -PC_E_PROTO)
			fail_msg("'%s' passed", bad[i]);
	assert_int_equal(proto_check_relpath("a\0b", 3), -PC_E_PROTO);
	assert_int_equal(proto_check_relpath("ab/", 2), 0);      /* len, not the NUL */
	memset(longname, 'x', sizeof(longname));
	assert_int_equal(proto_check_relpath(longname, 255), 0);
	assert_int_equal(proto_check_relpath(longname, 256), -PC_E_PROTO);
}

static void test_tree_basic(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "top", 0755), &b->err), 0);
	assert_int_equal(lstat_at(b, "top").st_mode & 07777, 0700);   /* while filled */
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "top/sub", 0750), &b->err), 0);
	assert_int_equal(put_file(b, d, "top/sub/f", "hello", 0644), 0);
	assert_int_equal(put_file(b, d, "top/g", "", 0600), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "top/sub", 0750), &b->err), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "top", 0755), &b->err), 0);
	dest_free(d);

	expect_text(b, "top/sub/f", "hello");
	expect_text(b, "top/g", "");
	assert_int_equal(lstat_at(b, "top").st_mode & 07777, 0755);
	assert_int_equal(lstat_at(b, "top/sub").st_mode & 07777, 0750);
	assert_int_equal(lstat_at(b, "top/sub/f").st_mode & 07777, 0644);
	assert_int_equal(pc_err_get(&b->err, NULL, 0), 0);
	expect_clean(b, b->root);
}

static void test_rename_top(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, "newname");

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "X", 0755), &b->err), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "X/a", 0755), &b->err), 0);
	assert_int_equal(put_file(b, d, "X/a/f", "in new", 0644), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "X", 0711), &b->err), 0);
	expect_text(b, "newname/a/f", "in new");
	assert_false(exists_at(b, "X"));
	assert_int_equal(lstat_at(b, "newname").st_mode & 07777, 0711);
	/* Messages name the destination the user wrote: DST is newname. */
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "X/a/f", 0755), &b->err), -EEXIST);
	assert_string_equal(box_msg(b), "cannot create directory 'DST/a/f': "
					"a file that is not a directory is in the way");
	dest_free(d);

	/* A single file renamed: X becomes the file itself. */
	d = box_dest(b, "single");
	assert_int_equal(put_file(b, d, "X", "one", 0644), 0);
	expect_text(b, "single", "one");
	dest_free(d);

	errno = 0;
	assert_null(dest_new(b->rootfd, "a/b", &b->o, "DST"));
	assert_int_equal(errno, EINVAL);
	assert_null(dest_new(b->rootfd, "..", &b->o, "DST"));
	dest_free(NULL);
}

static void test_replace_and_merge(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	char victim[160];

	/* An existing file is replaced, an existing directory merged. */
	assert_int_equal(mkdirat(b->rootfd, "m", 0751), 0);
	assert_int_equal(chmod(b->root, 0755), 0);
	assert_int_equal(put_file(b, d, "old", "before", 0644), 0);
	assert_int_equal(put_file(b, d, "old", "after", 0600), 0);
	expect_text(b, "old", "after");
	assert_int_equal(lstat_at(b, "old").st_mode & 07777, 0600);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "m", 0700), &b->err), 0);
	assert_int_equal(put_file(b, d, "m/new", "merged", 0644), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "m", 0700), &b->err), 0);
	assert_int_equal(lstat_at(b, "m").st_mode & 07777, 0751);   /* kept without -p */
	expect_text(b, "m/new", "merged");

	/* A symlink at the final name is replaced, never followed. */
	snprintf(victim, sizeof(victim), "%s/victim", b->outside);
	assert_int_equal(symlinkat(victim, b->rootfd, "lnk"), 0);
	assert_int_equal(put_file(b, d, "lnk", "replaced", 0644), 0);
	assert_true(S_ISREG(lstat_at(b, "lnk").st_mode));
	expect_text(b, "lnk", "replaced");
	dest_free(d);
	expect_clean(b, b->root);
}

/* Descriptors this process holds of files under dir that have lost their
 * names. */
static int count_held_deleted(const char *dir)
{
	DIR *fds = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(fds);
	while ((de = readdir(fds)) != NULL) {
		char link[300], target[512];
		snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (strncmp(target, dir, strlen(dir)) == 0 && strstr(target, "(deleted)") != NULL)
			n++;
	}
	closedir(fds);
	return n;
}

/* A big file replaced: the new bytes are there at once; the old file,
 * held across the rename for the closer, is let go of by dest_free at the
 * latest. A symlink in the way is replaced, not followed, here too. */
static void test_replace_big(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	size_t n = 3u << 20;
	char *big = malloc(n + 1), victim[160];

	assert_non_null(big);
	for (unsigned round = 0; round < 3; round++) {
		memset(big, 'a' + (int)round, n);
		big[n] = '\0';
		assert_int_equal(put_file(b, d, "big", big, 0644), 0);
		assert_int_equal(lstat_at(b, "big").st_size, (off_t)n);
		char head[4] = { 0 };
		int fd = openat(b->rootfd, "big", O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, head, 3, (off_t)n - 3), 3);
		close(fd);
		assert_int_equal(head[0], 'a' + (int)round);
	}
	snprintf(victim, sizeof(victim), "%s/victim", b->outside);
	assert_int_equal(symlinkat(victim, b->rootfd, "lnk"), 0);
	assert_int_equal(put_file(b, d, "lnk", big, 0644), 0);
	assert_true(S_ISREG(lstat_at(b, "lnk").st_mode));
	assert_int_equal(access(victim, F_OK), -1);
	dest_free(d);
	assert_int_equal(count_held_deleted(b->root), 0);
	free(big);
	expect_clean(b, b->root);
}

static void test_in_the_way(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	struct dest_file *f = NULL;
	char outdir[128];

	/* A file where a directory is expected. */
	assert_int_equal(put_file(b, d, "file", "x", 0644), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "file", 0755), &b->err), -EEXIST);
	assert_string_equal(box_msg(b), "cannot create directory 'DST/file': "
					"a file that is not a directory is in the way");
	box_clear(b);
	assert_int_equal(put_file(b, d, "file/x", "y", 0644), -ENOTDIR);
	assert_non_null(strstr(box_msg(b), "'DST/file/x'"));

	/* A directory where a file is expected: nothing left behind. */
	assert_int_equal(mkdirat(b->rootfd, "dir", 0755), 0);
	box_clear(b);
	assert_int_equal(dest_file_open(d, "dir", &f, &b->err), 0);
	assert_int_equal(pwrite(dest_file_fd(f), "abc", 3, 0), 3);
	assert_true(dest_file_commit(d, f, ent(PROTO_ENT_REG, "dir", 0644), 3, &b->err) < 0);
	assert_non_null(strstr(box_msg(b), "'DST/dir'"));
	assert_true(S_ISDIR(lstat_at(b, "dir").st_mode));
	box_clear(b);
	assert_true(dest_symlink(d, (ent(PROTO_ENT_SYMLINK, "dir", 0777),
				     strcpy(ent_buf.target, "t"), &ent_buf), &b->err) < 0);
	box_clear(b);
	assert_true(dest_special(d, ent(PROTO_ENT_FIFO, "dir", 0644), &b->err) < 0);

	/* A symlink to a directory is not a directory. */
	snprintf(outdir, sizeof(outdir), "%s", b->outside);
	assert_int_equal(symlinkat(outdir, b->rootfd, "todir"), 0);
	box_clear(b);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "todir", 0755), &b->err), -EEXIST);
	assert_string_equal(box_msg(b), "cannot create directory 'DST/todir': "
					"a symlink is in the way");
	dest_free(d);
	expect_clean(b, b->root);
}

static struct proto_entry *symlink_ent(const char *path, const char *target)
{
	ent(PROTO_ENT_SYMLINK, path, 0777);
	snprintf(ent_buf.target, sizeof(ent_buf.target), "%s", target);
	return &ent_buf;
}

/* Every kind of entry below path fails with ELOOP and the symlink message. */
static void expect_refused_below(struct box *b, struct dest *d, const char *dir)
{
	char p[256], msg[400];
	struct dest_file *f = NULL;

	snprintf(p, sizeof(p), "%s/x", dir);
	box_clear(b);
	assert_int_equal(put_file(b, d, p, "pwned", 0644), -ELOOP);
	snprintf(msg, sizeof(msg), "'DST/%s': a path component is a symlink", p);
	assert_string_equal(box_msg(b), msg);
	assert_int_equal(dest_file_open(d, p, &f, &b->err), -ELOOP);
	assert_null(f);
	snprintf(p, sizeof(p), "%s/b", dir);
	box_clear(b);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, p, 0755), &b->err), -ELOOP);
	snprintf(msg, sizeof(msg), "'DST/%s': a path component is a symlink", p);
	assert_string_equal(box_msg(b), msg);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, p, 0755), &b->err), -ELOOP);
	snprintf(p, sizeof(p), "%s/y", dir);
	assert_int_equal(dest_hardlink(d, "top/f", ent(PROTO_ENT_HARDLINK, p, 0), &b->err),
			 -ELOOP);
	/* ... and as the target of a hard link. */
	snprintf(p, sizeof(p), "%s/passwd", dir);
	assert_int_equal(dest_hardlink(d, p, ent(PROTO_ENT_HARDLINK, "top/h", 0), &b->err),
			 -ELOOP);
	snprintf(p, sizeof(p), "%s/z", dir);
	assert_int_equal(dest_symlink(d, symlink_ent(p, "anything"), &b->err), -ELOOP);
	snprintf(p, sizeof(p), "%s/p", dir);
	assert_int_equal(dest_special(d, ent(PROTO_ENT_FIFO, p, 0644), &b->err), -ELOOP);
}

static void test_hostile_symlinks(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	char passwd[160];

	snprintf(passwd, sizeof(passwd), "%s/passwd", b->outside);
	assert_int_equal(close(open(passwd, O_WRONLY | O_CREAT, 0644)), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "top", 0755), &b->err), 0);
	assert_int_equal(put_file(b, d, "top/f", "target", 0644), 0);
	/* This session's own symlinks: absolute, relative, and inside. */
	assert_int_equal(dest_symlink(d, symlink_ent("top/a", b->outside), &b->err), 0);
	assert_int_equal(dest_symlink(d, symlink_ent("top/rel", "../../outside"), &b->err), 0);
	assert_int_equal(dest_symlink(d, symlink_ent("top/in", "."), &b->err), 0);
	expect_refused_below(b, d, "top/a");
	expect_refused_below(b, d, "top/rel");
	expect_refused_below(b, d, "top/in");
	/* The symlink itself is there, verbatim. */
	assert_true(S_ISLNK(lstat_at(b, "top/a").st_mode));
	dest_free(d);

	assert_int_equal(unlink(passwd), 0);
	expect_clean(b, b->root);
	assert_false(exists_at(b, "top/x"));
}

static void test_preexisting_symlink(void **state)
{
	struct box *b = *state;
	struct dest *d;

	/* Symlinks already in the destination, on the path: one leading out,
	 * one to a directory inside. Both refused. */
	assert_int_equal(symlinkat(b->outside, b->rootfd, "pre"), 0);
	assert_int_equal(mkdirat(b->rootfd, "real", 0755), 0);
	assert_int_equal(symlinkat("real", b->rootfd, "inner"), 0);
	d = box_dest(b, NULL);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "top", 0755), &b->err), 0);
	assert_int_equal(put_file(b, d, "top/f", "target", 0644), 0);
	expect_refused_below(b, d, "pre");
	expect_refused_below(b, d, "inner");
	dest_free(d);
	expect_clean(b, b->root);
	assert_int_equal(count_entries(b->root, NULL), 4);
	assert_int_equal(rmdir(b->outside), 0);   /* still empty */
	assert_int_equal(mkdir(b->outside, 0755), 0);
	{
		char real[160];

		snprintf(real, sizeof(real), "%s/real", b->root);
		assert_int_equal(count_entries(real, NULL), 0);
	}
}

static void test_bad_entries(void **state)
{
	static const char *const bad[] = { "../x", "/etc/passwd", "a//b", "a/./b", "", ".",
					   "a/", "..", "x/../../y" };
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	struct dest_file *f = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		box_clear(b);
		if (dest_mkdir(d, ent(PROTO_ENT_DIR, bad[i], 0755), &b->err) != -PC_E_PROTO)
			fail_msg("mkdir '%s' was not refused", bad[i]);
		assert_non_null(strstr(box_msg(b), "unsafe path"));
		assert_int_equal(dest_file_open(d, bad[i], &f, &b->err), -PC_E_PROTO);
		assert_int_equal(dest_symlink(d, symlink_ent(bad[i], "t"), &b->err), -PC_E_PROTO);
		assert_int_equal(dest_hardlink(d, "ok", ent(PROTO_ENT_HARDLINK, bad[i], 0), &b->err),
				 -PC_E_PROTO);
		assert_int_equal(dest_hardlink(d, bad[i], ent(PROTO_ENT_HARDLINK, "ok", 0), &b->err),
				 -PC_E_PROTO);
	}
	/* Wrong types, an empty symlink target, times out of range. */
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_REG, "a", 0755), &b->err), -PC_E_PROTO);
	assert_int_equal(dest_special(d, ent(PROTO_ENT_DIR, "a", 0755), &b->err), -PC_E_PROTO);
	assert_int_equal(dest_special(d, ent(42, "a", 0755), &b->err), -PC_E_PROTO);
	assert_int_equal(dest_symlink(d, symlink_ent("a", ""), &b->err), -PC_E_PROTO);
	assert_int_equal(dest_file_open(d, "f", &f, &b->err), 0);
	assert_int_equal(dest_file_commit(d, f, ent(PROTO_ENT_DIR, "f", 0644), 0, &b->err),
			 -PC_E_PROTO);
	assert_false(exists_at(b, "f"));
	dest_free(d);

	b->o.preserve = true;
	d = box_dest(b, NULL);
	assert_int_equal(dest_file_open(d, "f", &f, &b->err), 0);
	ent(PROTO_ENT_REG, "f", 0644)->mtime_ns = 1000000000u;
	assert_int_equal(dest_file_commit(d, f, &ent_buf, 0, &b->err), -PC_E_PROTO);
	assert_false(exists_at(b, "f"));
	/* An aborted file leaves nothing. */
	assert_int_equal(dest_file_open(d, "g", &f, &b->err), 0);
	assert_int_equal(pwrite(dest_file_fd(f), "x", 1, 0), 1);
	dest_file_abort(d, f);
	dest_file_abort(d, NULL);
	assert_false(exists_at(b, "g"));
	dest_free(d);
	assert_int_equal(count_entries(b->root, NULL), 0);
}

/* dest_file_write_whole: a fresh file written whole is committed without
 * a truncate and reads back exactly; a size that differs from what was
 * written still sets it; a file written in place is still cut to its size,
 * down to 0. */
static void test_write_whole(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	struct dest_file *f = NULL;
	uint64_t size = 0;

	assert_int_equal(dest_file_open(d, "f", &f, &b->err), 0);
	assert_int_equal(dest_file_write_whole(f, "hello", 5), 0);
	assert_int_equal(dest_file_commit(d, f, ent(PROTO_ENT_REG, "f", 0644), 5, &b->err), 0);
	expect_text(b, "f", "hello");
	assert_int_equal(lstat_at(b, "f").st_size, 5);

	assert_int_equal(dest_file_open(d, "g", &f, &b->err), 0);
	assert_int_equal(dest_file_write_whole(f, "hello world", 11), 0);
	assert_int_equal(dest_file_commit(d, f, ent(PROTO_ENT_REG, "g", 0644), 5, &b->err), 0);
	expect_text(b, "g", "hello");

	assert_int_equal(dest_open_inplace(d, ent(PROTO_ENT_REG, "f", 0644), &f, &size), 1);
	assert_int_equal(size, 5);
	assert_int_equal(dest_file_commit(d, f, ent(PROTO_ENT_REG, "f", 0644), 0, &b->err), 0);
	assert_int_equal(lstat_at(b, "f").st_size, 0);
	dest_free(d);
	expect_clean(b, b->root);
}

/* -a: a partial file whose name another run took since (it removed ours
 * and made its own) is never renamed into place, nor is the other run's
 * journal removed; the commit fails with -EBUSY. And a second create of
 * the same file while the first's journal is open finds it locked. */
static void test_part_taken_over(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	struct journal_id id = { 65536, 5, 1, 0 };
	struct dest_file *f = NULL, *g = NULL;
	struct journal *j = NULL, *k = NULL;

	assert_int_equal(dest_part_create(d, "f", &id, &f, &j, &b->err), 0);
	assert_int_equal(dest_file_write_whole(f, "hello", 5), 0);
	/* While this run's journal is open, another create is refused. */
	assert_int_equal(dest_part_create(d, "f", &id, &g, &k, &b->err), -EBUSY);
	assert_null(g);
	/* Another run's files under the same names. */
	assert_int_equal(unlinkat(b->rootfd, ".f.pcopy-part", 0), 0);
	assert_int_equal(unlinkat(b->rootfd, ".f.pcopy-jrnl", 0), 0);
	write_at(b, ".f.pcopy-part", "other");
	write_at(b, ".f.pcopy-jrnl", "journal");
	assert_int_equal(dest_file_commit(d, f, ent(PROTO_ENT_REG, "f", 0644), 5, &b->err),
			 -EBUSY);
	journal_free(j);
	assert_false(exists_at(b, "f"));
	expect_text(b, ".f.pcopy-part", "other");
	expect_text(b, ".f.pcopy-jrnl", "journal");
	dest_free(d);
}

static void test_modes(void **state)
{
	struct box *b = *state;
	struct dest *d;

	/* Without -p: mode & 0777 & ~umask. */
	b->o.umask = 027;
	d = box_dest(b, NULL);
	assert_int_equal(put_file(b, d, "plain", "x", 04777), 0);
	assert_int_equal(dest_special(d, ent(PROTO_ENT_FIFO, "fifo", 0666), &b->err), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "dir", 01777), &b->err), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "dir", 01777), &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "plain").st_mode & 07777, 0750);
	assert_int_equal(lstat_at(b, "fifo").st_mode & 07777, 0640);
	assert_true(S_ISFIFO(lstat_at(b, "fifo").st_mode));
	assert_int_equal(lstat_at(b, "dir").st_mode & 07777, 0750);

	/* With -p: exactly, set-ID bits and sticky included. */
	b->o.preserve = true;
	d = box_dest(b, NULL);
	assert_int_equal(put_file(b, d, "suid", "x", 04755), 0);
	assert_int_equal(put_file(b, d, "ro", "x", 0400), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "sticky", 01777), &b->err), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "sticky", 03777), &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "suid").st_mode & 07777, 04755);
	assert_int_equal(lstat_at(b, "ro").st_mode & 07777, 0400);
	assert_int_equal(lstat_at(b, "sticky").st_mode & 07777, 03777);

	/* A daemon strips set-ID bits even with -p. */
	b->o.strip_setid = true;
	d = box_dest(b, NULL);
	assert_int_equal(put_file(b, d, "suid2", "x", 06755), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "sg", 03755), &b->err), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "sg", 03755), &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "suid2").st_mode & 07777, 0755);
	assert_int_equal(lstat_at(b, "sg").st_mode & 07777, 01755);
	expect_clean(b, b->root);
}

/* Without -p a new directory keeps the set-group-ID bit it inherits from
 * its parent, as mkdir gives it (and cp -r keeps it). */
static void test_setgid_inherited(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);

	assert_int_equal(mkdirat(b->rootfd, "sg", 0755), 0);
	assert_int_equal(fchmodat(b->rootfd, "sg", 02775, 0), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "sg/child", 0700), &b->err), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "sg/child", 0777), &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "sg/child").st_mode & 07777, 02755);
}

/* A 0555 directory is filled, then closed. */
static void test_readonly_dir(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "ro", 0555), &b->err), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "ro/sub", 0555), &b->err), 0);
	assert_int_equal(put_file(b, d, "ro/sub/f", "in", 0444), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "ro/sub", 0555), &b->err), 0);
	assert_int_equal(put_file(b, d, "ro/g", "in", 0444), 0);
	assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, "ro", 0555), &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "ro").st_mode & 07777, 0555);
	assert_int_equal(lstat_at(b, "ro/sub").st_mode & 07777, 0555);
	expect_text(b, "ro/sub/f", "in");
	expect_text(b, "ro/g", "in");
	assert_int_equal(chmod(b->root, 0755), 0);
	{
		char p[160];

		snprintf(p, sizeof(p), "%s/ro/sub", b->root);
		assert_int_equal(chmod(p, 0755), 0);
		snprintf(p, sizeof(p), "%s/ro", b->root);
		assert_int_equal(chmod(p, 0755), 0);
	}
}

static void set_times(struct proto_entry *e)
{
	e->mtime_s = 1234567890;
	e->mtime_ns = 123456789;
	e->atime_s = 1000000000;
	e->atime_ns = 987654321;
}

static void expect_times(struct box *b, const char *rel)
{
	struct stat st = lstat_at(b, rel);

	assert_int_equal(st.st_mtim.tv_sec, 1234567890);
	assert_int_equal(st.st_mtim.tv_nsec, 123456789);
	assert_int_equal(st.st_atim.tv_sec, 1000000000);
	assert_int_equal(st.st_atim.tv_nsec, 987654321);
}

static void test_times(void **state)
{
	struct box *b = *state;
	struct dest *d;
	struct dest_file *f = NULL;

	b->o.preserve = true;
	d = box_dest(b, NULL);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "d", 0755), &b->err), 0);
	assert_int_equal(dest_file_open(d, "d/f", &f, &b->err), 0);
	assert_int_equal(pwrite(dest_file_fd(f), "data", 4, 0), 4);
	set_times(ent(PROTO_ENT_REG, "d/f", 0644));
	/* A size past what was written: a trailing hole. */
	assert_int_equal(dest_file_commit(d, f, &ent_buf, 10, &b->err), 0);
	set_times(symlink_ent("d/l", "f"));
	assert_int_equal(dest_symlink(d, &ent_buf, &b->err), 0);
	set_times(ent(PROTO_ENT_FIFO, "d/p", 0600));
	assert_int_equal(dest_special(d, &ent_buf, &b->err), 0);
	set_times(ent(PROTO_ENT_SOCK, "d/s", 0600));
	assert_int_equal(dest_special(d, &ent_buf, &b->err), 0);
	set_times(ent(PROTO_ENT_DIR_END, "d", 0755));
	assert_int_equal(dest_dir_end(d, &ent_buf, &b->err), 0);
	dest_free(d);
	expect_times(b, "d/f");
	expect_times(b, "d/l");
	expect_times(b, "d/p");
	expect_times(b, "d/s");
	expect_times(b, "d");
	assert_int_equal(lstat_at(b, "d/f").st_size, 10);
	assert_true(S_ISSOCK(lstat_at(b, "d/s").st_mode));
	{
		char t[8];

		assert_int_equal(readlinkat(b->rootfd, "d/l", t, sizeof(t)), 1);
		assert_memory_equal(t, "f", 1);
	}
	expect_clean(b, b->root);
}

static bool ts_equal(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* --checksum's keep: dest_open_same gives the file at a path only while
 * it is the one dest_open_old saw (inode, size, mtime, ctime) and has one
 * link; dest_same_settle sets only the attributes it lacks, so a file that
 * has them all keeps its ctime, and one that lacks them gets them. */
static void test_keep_same(void **state)
{
	struct box *b = *state;
	struct dest_ident id;
	struct dest_file *f = NULL;
	struct timespec pause = { .tv_nsec = 20000000 };
	struct dest *d;
	uint64_t size = 0;
	int fd = -1;

	b->o.preserve = true;
	d = box_dest(b, NULL);
	assert_int_equal(dest_file_open(d, "f", &f, &b->err), 0);
	assert_int_equal(pwrite(dest_file_fd(f), "hello", 5, 0), 5);
	set_times(ent(PROTO_ENT_REG, "f", 0640));
	assert_int_equal(dest_file_commit(d, f, &ent_buf, 5, &b->err), 0);
	ent_buf.size = 5;
	assert_int_equal(dest_open_old(d, &ent_buf, &fd, &size, &id), 1);
	close(fd);
	assert_int_equal(size, 5);

	/* All there: opened, nothing set, the ctime stays. */
	struct stat was = lstat_at(b, "f");
	(void)nanosleep(&pause, NULL);
	assert_int_equal(dest_open_same(d, &ent_buf, &id, &f), 1);
	assert_int_equal(dest_same_settle(d, f, &ent_buf, &b->err), 0);
	struct stat now = lstat_at(b, "f");
	assert_true(ts_equal(now.st_ctim, was.st_ctim));
	assert_int_equal(now.st_ino, was.st_ino);
	expect_times(b, "f");

	/* Another mode wanted: set, and the times stay the source's. */
	ent_buf.mode = 0600;
	assert_int_equal(dest_open_same(d, &ent_buf, &id, &f), 1);
	assert_int_equal(dest_same_settle(d, f, &ent_buf, &b->err), 0);
	assert_int_equal(lstat_at(b, "f").st_mode & 07777, 0600);
	expect_times(b, "f");

	/* Its ctime moved on (the chmod above): no longer the file hashed. */
	assert_int_equal(dest_open_same(d, &ent_buf, &id, &f), 0);
	assert_null(f);

	/* As seen now, but with a second link: attributes would show
	 * through the other name. */
	assert_int_equal(dest_open_old(d, &ent_buf, &fd, &size, &id), 1);
	close(fd);
	assert_int_equal(linkat(b->rootfd, "f", b->rootfd, "g", 0), 0);
	assert_int_equal(dest_open_old(d, &ent_buf, &fd, &size, &id), 1);
	close(fd);
	assert_int_equal(dest_open_same(d, &ent_buf, &id, &f), 0);
	assert_int_equal(unlinkat(b->rootfd, "g", 0), 0);

	/* Replaced by another file of the same size and times. */
	assert_int_equal(dest_open_old(d, &ent_buf, &fd, &size, &id), 1);
	close(fd);
	assert_int_equal(dest_file_open(d, "f", &f, &b->err), 0);
	assert_int_equal(pwrite(dest_file_fd(f), "world", 5, 0), 5);
	assert_int_equal(dest_file_commit(d, f, &ent_buf, 5, &b->err), 0);
	assert_int_equal(dest_open_same(d, &ent_buf, &id, &f), 0);
	expect_text(b, "f", "world");
	dest_free(d);
	expect_clean(b, b->root);
}

static void test_symlink_verbatim(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	char t[64];
	ssize_t n;

	assert_int_equal(put_file(b, d, "l", "a file first", 0644), 0);
	assert_int_equal(dest_symlink(d, symlink_ent("l", "../no/such/../thing"), &b->err), 0);
	n = readlinkat(b->rootfd, "l", t, sizeof(t) - 1);
	assert_true(n > 0);
	t[n] = '\0';
	assert_string_equal(t, "../no/such/../thing");
	/* A symlink replaced by another. */
	assert_int_equal(dest_symlink(d, symlink_ent("l", "/abs"), &b->err), 0);
	n = readlinkat(b->rootfd, "l", t, sizeof(t) - 1);
	assert_int_equal(n, 4);
	dest_free(d);
	expect_clean(b, b->root);
}

static void test_hardlinks(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "t", 0755), &b->err), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "t/o", 0755), &b->err), 0);
	assert_int_equal(put_file(b, d, "t/f", "shared", 0644), 0);
	assert_int_equal(dest_hardlink(d, "t/f", ent(PROTO_ENT_HARDLINK, "t/o/g", 0), &b->err), 0);
	assert_int_equal(lstat_at(b, "t/f").st_ino, lstat_at(b, "t/o/g").st_ino);
	/* Over an existing file, and over itself (same inode). */
	assert_int_equal(put_file(b, d, "t/h", "other", 0644), 0);
	assert_int_equal(dest_hardlink(d, "t/f", ent(PROTO_ENT_HARDLINK, "t/h", 0), &b->err), 0);
	assert_int_equal(lstat_at(b, "t/f").st_ino, lstat_at(b, "t/h").st_ino);
	assert_int_equal(dest_hardlink(d, "t/f", ent(PROTO_ENT_HARDLINK, "t/h", 0), &b->err), 0);
	assert_int_equal(lstat_at(b, "t/f").st_nlink, 3);
	/* A target that is not there. */
	assert_int_equal(dest_hardlink(d, "t/none", ent(PROTO_ENT_HARDLINK, "t/x", 0), &b->err),
			 -ENOENT);
	assert_non_null(strstr(box_msg(b), "'DST/t/x'"));
	dest_free(d);
	{
		char p[160];

		snprintf(p, sizeof(p), "%s/t", b->root);
		expect_clean(b, p);
	}
}

/* Root only: owners by name, numeric, unknown names; devices. */
static void test_owners_root(void **state)
{
	struct box *b = *state;
	struct passwd *pw = getpwnam("nobody");
	struct group *gr = getgrnam("nogroup");
	struct dest *d;
	uid_t nobody;
	gid_t nogroup;

	if (geteuid() != 0)
		testutil_skip("owner mapping needs root (chown); run the unit tests as root");
	assert_non_null(pw);
	assert_non_null(gr);
	nobody = pw->pw_uid;
	nogroup = gr->gr_gid;

	b->o.preserve = true;
	d = box_dest(b, NULL);
	/* By name: the names win over the numbers the source had. */
	{
		struct dest_file *f = NULL;

		assert_int_equal(dest_file_open(d, "byname", &f, &b->err), 0);
		ent(PROTO_ENT_REG, "byname", 0644);
		ent_buf.uid = 4321;
		ent_buf.gid = 4321;
		strcpy(ent_buf.user, "nobody");
		strcpy(ent_buf.group, "nogroup");
		assert_int_equal(dest_file_commit(d, f, &ent_buf, 0, &b->err), 0);
	}
	/* Unknown or empty names: the numbers (rsync's rule). */
	ent(PROTO_ENT_FIFO, "unknown", 0644);
	ent_buf.uid = 4242;
	ent_buf.gid = 4243;
	strcpy(ent_buf.user, "pcopy-no-such-user");
	strcpy(ent_buf.group, "");
	assert_int_equal(dest_special(d, &ent_buf, &b->err), 0);
	/* A symlink's own owner (never its target's). */
	symlink_ent("sym", "byname");
	strcpy(ent_buf.user, "nobody");
	strcpy(ent_buf.group, "nogroup");
	assert_int_equal(dest_symlink(d, &ent_buf, &b->err), 0);
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "dir", 0755), &b->err), 0);
	ent(PROTO_ENT_DIR_END, "dir", 0755);
	strcpy(ent_buf.user, "nobody");
	strcpy(ent_buf.group, "nogroup");
	assert_int_equal(dest_dir_end(d, &ent_buf, &b->err), 0);
	/* A device, as root. */
	ent(PROTO_ENT_CHR, "null", 0666);
	ent_buf.rdev = makedev(1, 3);
	assert_int_equal(dest_special(d, &ent_buf, &b->err), 0);
	dest_free(d);

	assert_int_equal(lstat_at(b, "byname").st_uid, nobody);
	assert_int_equal(lstat_at(b, "byname").st_gid, nogroup);
	assert_int_equal(lstat_at(b, "unknown").st_uid, 4242);
	assert_int_equal(lstat_at(b, "unknown").st_gid, 4243);
	assert_int_equal(lstat_at(b, "sym").st_uid, nobody);
	assert_int_equal(lstat_at(b, "byname").st_uid, nobody);   /* not touched twice */
	assert_int_equal(lstat_at(b, "dir").st_uid, nobody);
	assert_int_equal(lstat_at(b, "dir").st_gid, nogroup);
	assert_true(S_ISCHR(lstat_at(b, "null").st_mode));
	assert_int_equal(lstat_at(b, "null").st_rdev, makedev(1, 3));

	/* --numeric-ids: the numbers, whatever the names say. */
	b->o.numeric_ids = true;
	d = box_dest(b, NULL);
	ent(PROTO_ENT_FIFO, "numeric", 0644);
	ent_buf.uid = 4321;
	ent_buf.gid = 4322;
	strcpy(ent_buf.user, "nobody");
	strcpy(ent_buf.group, "nogroup");
	assert_int_equal(dest_special(d, &ent_buf, &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "numeric").st_uid, 4321);
	assert_int_equal(lstat_at(b, "numeric").st_gid, 4322);

	/* Without -p, root keeps its own ownership. */
	b->o.preserve = false;
	d = box_dest(b, NULL);
	ent(PROTO_ENT_FIFO, "mine", 0644);
	ent_buf.uid = 4321;
	strcpy(ent_buf.user, "nobody");
	assert_int_equal(dest_special(d, &ent_buf, &b->err), 0);
	dest_free(d);
	assert_int_equal(lstat_at(b, "mine").st_uid, 0);

	/* A daemon never creates devices, root or not. */
	b->o.strip_setid = true;
	d = box_dest(b, NULL);
	assert_int_equal(dest_special(d, ent(PROTO_ENT_BLK, "blk", 0600), &b->err), -EPERM);
	assert_string_equal(box_msg(b), "cannot create device 'DST/blk': "
					"this server never creates devices");
	dest_free(d);
	expect_clean(b, b->root);
}

/* The rules for an ordinary user, in a child that becomes nobody: no
 * devices, no chown, and files named through /proc (linkat AT_EMPTY_PATH
 * needs a capability). Exit status: 0, or the number of the failed step. */
static int nonroot_child(struct box *b)
{
	struct pc_err err;
	struct dest *d;
	struct stat st;
	char msg[256];
	int step = 0;

	pc_err_init(&err);
	if (setgid(65534) != 0 || setuid(65534) != 0)
		return 1;
	b->o.preserve = true;
	d = dest_new(b->rootfd, NULL, &b->o, "DST");
	if (d == NULL)
		return 2;
	ent(PROTO_ENT_CHR, "pub/null", 0666);
	ent_buf.rdev = makedev(1, 3);
	if (dest_special(d, &ent_buf, &err) != -EPERM)
		step = 3;
	(void)pc_err_get(&err, msg, sizeof(msg));
	if (step == 0 && strcmp(msg, "cannot create device 'DST/pub/null': "
				     "only root can create devices") != 0)
		step = 4;
	pc_err_destroy(&err);
	pc_err_init(&err);
	ent(PROTO_ENT_REG, "pub/f", 0640);
	ent_buf.uid = 0;
	strcpy(ent_buf.user, "root");
	for (int i = 0; step == 0 && i < 2; i++) {
		struct dest_file *f = NULL;

		if (dest_file_open(d, "pub/f", &f, &err) != 0 ||
		    pwrite(dest_file_fd(f), "mine", 4, 0) != 4 ||
		    dest_file_commit(d, f, &ent_buf, 4, &err) != 0)
			step = 5;
	}
	if (step == 0 && (fstatat(b->rootfd, "pub/f", &st, AT_SYMLINK_NOFOLLOW) != 0 ||
			  st.st_uid != 65534 || (st.st_mode & 07777) != 0640 || st.st_size != 4))
		step = 6;
	dest_free(d);
	pc_err_destroy(&err);
	return step;
}

static void test_nonroot(void **state)
{
	struct box *b = *state;
	int status = 0;
	pid_t pid;

	if (geteuid() != 0)
		testutil_skip("needs root to become nobody in a child; run the unit tests as root");
	assert_int_equal(mkdirat(b->rootfd, "pub", 0777), 0);
	assert_int_equal(fchmodat(b->rootfd, "pub", 0777, 0), 0);
	assert_int_equal(fchmod(b->rootfd, 0755), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(nonroot_child(b));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) != 0)
		fail_msg("the child running as nobody failed at step %d", WEXITSTATUS(status));
	assert_false(exists_at(b, "pub/null"));
	expect_text(b, "pub/f", "mine");
	{
		char p[160];

		snprintf(p, sizeof(p), "%s/pub", b->root);
		expect_clean(b, p);
	}
}

/* Open fds of this process. */
static int count_fds(void)
{
	return count_entries("/proc/self/fd", NULL);
}

/* Files in 3 * DEST_CACHE_IDLE directories: at most DEST_CACHE_IDLE
 * directory fds stay open, and dest_free closes them all. */
static void test_cache_bounded(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	int before = count_fds();
	char p[64];

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "c", 0755), &b->err), 0);
	for (unsigned i = 0; i < 3 * DEST_CACHE_IDLE; i++) {
		snprintf(p, sizeof(p), "c/%u", i);
		assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, p, 0755), &b->err), 0);
		snprintf(p, sizeof(p), "c/%u/f", i);
		assert_int_equal(put_file(b, d, p, "x", 0644), 0);
		assert_true(count_fds() <= before + (int)DEST_CACHE_IDLE);
	}
	assert_int_equal(count_fds(), before + (int)DEST_CACHE_IDLE);
	/* The most recent ones are cached: no new fd for them. */
	snprintf(p, sizeof(p), "c/%u/g", 3 * DEST_CACHE_IDLE - 1);
	assert_int_equal(put_file(b, d, p, "y", 0644), 0);
	assert_int_equal(count_fds(), before + (int)DEST_CACHE_IDLE);
	dest_free(d);
	assert_int_equal(count_fds(), before);
}

/* A cached directory removed behind dest's back: the next entry in it
 * looks it up again beneath the root, and finds the new directory, or a
 * symlink it refuses. */
static void test_dir_replaced(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "r", 0755), &b->err), 0);
	assert_int_equal(put_file(b, d, "r/a", "first", 0644), 0);    /* caches r */
	assert_int_equal(unlinkat(b->rootfd, "r/a", 0), 0);
	assert_int_equal(unlinkat(b->rootfd, "r", AT_REMOVEDIR), 0);
	assert_int_equal(mkdirat(b->rootfd, "r", 0755), 0);
	assert_int_equal(put_file(b, d, "r/b", "second", 0644), 0);
	expect_text(b, "r/b", "second");
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "r/sub", 0755), &b->err), 0);
	assert_int_equal(dest_special(d, ent(PROTO_ENT_FIFO, "r/p", 0644), &b->err), 0);

	assert_int_equal(unlinkat(b->rootfd, "r/b", 0), 0);
	assert_int_equal(unlinkat(b->rootfd, "r/p", 0), 0);
	assert_int_equal(unlinkat(b->rootfd, "r/sub", AT_REMOVEDIR), 0);
	assert_int_equal(unlinkat(b->rootfd, "r", AT_REMOVEDIR), 0);
	assert_int_equal(symlinkat(b->outside, b->rootfd, "r"), 0);
	box_clear(b);
	assert_int_equal(put_file(b, d, "r/c", "escape", 0644), -ELOOP);
	assert_string_equal(box_msg(b), "'DST/r/c': a path component is a symlink");
	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "r/sub", 0755), &b->err), -ELOOP);
	assert_int_equal(dest_symlink(d, symlink_ent("r/l", "x"), &b->err), -ELOOP);
	dest_free(d);
	expect_clean(b, b->root);
}

#define THREADS 8
#define THREAD_DIRS 100     /* more than DEST_CACHE_IDLE: the cache evicts */
#define THREAD_FILES 150

struct worker {
	struct box *b;
	struct dest *d;
	unsigned idx;
	int failed;             /* written by the thread, read after join */
	char msg[1024];
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct proto_entry *e = calloc(1, sizeof(*e));
	struct pc_err err;

	pc_err_init(&err);
	for (unsigned j = 0; e != NULL && j < THREAD_FILES && !w->failed; j++) {
		struct dest_file *f = NULL;
		char text[32];
		int n = snprintf(text, sizeof(text), "%u-%u", w->idx, j);

		e->type = PROTO_ENT_REG;
		e->mode = 0644;
		snprintf(e->path, sizeof(e->path), "w/d%u/f-%u-%u",
			 (w->idx * 37 + j * 7) % THREAD_DIRS, w->idx, j);
		if (dest_file_open(w->d, e->path, &f, &err) != 0 ||
		    pwrite(dest_file_fd(f), text, (size_t)n, 0) != n ||
		    dest_file_commit(w->d, f, e, (uint64_t)n, &err) != 0)
			w->failed = 1;
	}
	if (e == NULL)
		w->failed = 1;
	(void)pc_err_get(&err, w->msg, sizeof(w->msg));
	pc_err_destroy(&err);
	free(e);
	return NULL;
}

/* Several threads create files in many directories at once, sharing the
 * directory cache and evicting from it; every file lands where it should. */
static void test_threads(void **state)
{
	struct box *b = *state;
	struct dest *d = box_dest(b, NULL);
	struct worker w[THREADS];
	pthread_t tid[THREADS];
	char p[64], text[32];
	int before = count_fds();

	assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, "w", 0755), &b->err), 0);
	for (unsigned i = 0; i < THREAD_DIRS; i++) {
		snprintf(p, sizeof(p), "w/d%u", i);
		assert_int_equal(dest_mkdir(d, ent(PROTO_ENT_DIR, p, 0755), &b->err), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .b = b, .d = d, .idx = i };
		assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	for (unsigned i = 0; i < THREADS; i++)
		if (w[i].failed)
			fail_msg("thread %u failed: %s", i, w[i].msg);
	assert_true(count_fds() <= before + (int)DEST_CACHE_IDLE);
	for (unsigned i = 0; i < THREAD_DIRS; i++) {
		snprintf(p, sizeof(p), "w/d%u", i);
		assert_int_equal(dest_dir_end(d, ent(PROTO_ENT_DIR_END, p, 0755), &b->err), 0);
	}
	dest_free(d);
	assert_int_equal(count_fds(), before);
	for (unsigned i = 0; i < THREADS; i++)
		for (unsigned j = 0; j < THREAD_FILES; j++) {
			snprintf(p, sizeof(p), "w/d%u/f-%u-%u", (i * 37 + j * 7) % THREAD_DIRS, i, j);
			snprintf(text, sizeof(text), "%u-%u", i, j);
			expect_text(b, p, text);
		}
	{
		unsigned total = 0;

		for (unsigned i = 0; i < THREAD_DIRS; i++) {
			char dir[160];

			snprintf(dir, sizeof(dir), "%s/w/d%u", b->root, i);
			total += (unsigned)count_entries(dir, NULL);
			assert_int_equal(count_entries(dir, ".pcopy-"), 0);
		}
		assert_int_equal(total, THREADS * THREAD_FILES);
	}
}

/* From now on in this process: openat with O_TMPFILE fails with EOPNOTSUPP
 * (as on NFS), openat2 with ENOSYS (as before Linux 5.6). Returns 0 or
 * -errno if seccomp is unavailable. */
static int block_tmpfile_openat2(void)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* the low word of the flags (little-endian) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, __O_TMPFILE),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __O_TMPFILE, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EOPNOTSUPP & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(code) / sizeof(code[0]), code };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return -errno;
	return 0;
}

/* Why block_tmpfile_openat2 failed (an errno), or 0. */
static int no_seccomp_errno;

/* In the fallback group: the filter is in place, and files really get
 * temporary names while they are written. */
static void test_fallback_active(void **state)
{
	struct box *b = *state;
	struct dest *d;
	struct dest_file *f = NULL;

	if (no_seccomp_errno != 0)
		testutil_skip("cannot install a seccomp filter that hides O_TMPFILE and openat2 "
			      "(%s), so the named temporary files and the walk are not tested "
			      "here; run where seccomp is allowed", strerror(no_seccomp_errno));
	assert_int_equal(openat(b->rootfd, ".", O_TMPFILE | O_WRONLY, 0600), -1);
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_equal(syscall(SYS_openat2, b->rootfd, ".", NULL, 0), -1);
	assert_int_equal(errno, ENOSYS);
	d = box_dest(b, NULL);
	assert_int_equal(dest_file_open(d, "f", &f, &b->err), 0);
	assert_int_equal(count_entries(b->root, ".f.pcopy-"), 1);
	dest_file_abort(d, f);
	assert_int_equal(count_entries(b->root, NULL), 0);
	dest_free(d);
}

#define BOX_TEST(f) cmocka_unit_test_setup_teardown(f, box_setup, box_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_relpath),
		BOX_TEST(test_tree_basic),
		BOX_TEST(test_rename_top),
		BOX_TEST(test_replace_and_merge),
		BOX_TEST(test_replace_big),
		BOX_TEST(test_in_the_way),
		BOX_TEST(test_hostile_symlinks),
		BOX_TEST(test_preexisting_symlink),
		BOX_TEST(test_bad_entries),
		BOX_TEST(test_write_whole),
		BOX_TEST(test_part_taken_over),
		BOX_TEST(test_modes),
		BOX_TEST(test_readonly_dir),
		BOX_TEST(test_setgid_inherited),
		BOX_TEST(test_times),
		BOX_TEST(test_keep_same),
		BOX_TEST(test_symlink_verbatim),
		BOX_TEST(test_hardlinks),
		BOX_TEST(test_owners_root),
		BOX_TEST(test_nonroot),
		BOX_TEST(test_cache_bounded),
		BOX_TEST(test_dir_replaced),
		BOX_TEST(test_threads),
	};

	const struct CMUnitTest fallback[] = {
		BOX_TEST(test_fallback_active),
		BOX_TEST(test_tree_basic),
		BOX_TEST(test_replace_and_merge),
		BOX_TEST(test_in_the_way),
		BOX_TEST(test_hostile_symlinks),
		BOX_TEST(test_preexisting_symlink),
		BOX_TEST(test_bad_entries),
		BOX_TEST(test_times),
		BOX_TEST(test_hardlinks),
		BOX_TEST(test_cache_bounded),
		BOX_TEST(test_dir_replaced),
		BOX_TEST(test_threads),
	};
	int failed;

	umask(022);
	failed = cmocka_run_group_tests_name("dest", tests, NULL, NULL);
	no_seccomp_errno = -block_tmpfile_openat2();
	/* Without the filter only test_fallback_active runs, and skips with
	 * the reason: the others would pass without testing the fallbacks. */
	failed += _cmocka_run_group_tests("dest_fallback", fallback,
					  no_seccomp_errno != 0 ? 1 : sizeof(fallback) /
								       sizeof(fallback[0]),
					  NULL, NULL);
	return testutil_status(failed);
}
