/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for dest: a sequence of tree entries (fuzz_tree.h gives
 * the format) applied to a destination in a fresh sandbox,
 *
 *   SANDBOX/root     the destination
 *   SANDBOX/outside  must stay empty
 *
 * with paths exactly as a peer could send them, and symlinks whose targets
 * lead out of the root ("../outside", SANDBOX/outside by its absolute
 * path, "..", "."), so that later entries try to write through them. After
 * each input, whatever dest_* returned: SANDBOX/outside is still empty,
 * SANDBOX holds only root and outside, and no temporary name
 * (".NAME.pcopy-XXXXXX") is left anywhere in root. Anything else aborts.
 * Then the sandbox is removed. As root it also creates devices (always
 * 1:3, /dev/null's numbers) and changes owners, inside the sandbox only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fuzz_tree.h"
#include "pipeline/dest.h"
#include "sys/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The replay driver of ordinary builds (replay.c) runs this many generated
 * inputs rather than its usual 200,000: each input here makes, fills and
 * removes a directory tree, some 100 times slower than a parser (on
 * tmpfs: 50,000 take about 15 s under ASan here). */
extern const size_t fuzz_replay_runs;
const size_t fuzz_replay_runs = 50000;

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

/* The input, read front to back. */
struct input {
	const uint8_t *p;
	size_t left;
};

static bool get_u8(struct input *in, uint8_t *v)
{
	if (in->left < 1)
		return false;
	*v = *in->p++;
	in->left--;
	return true;
}

/* A path: u8 length, then that many bytes, NUL-terminated into out. Every
 * ".pcopy-" in it becomes "_pcopy-": a name the input asks for must never
 * look like the temporary names whose leftovers the check looks for. */
static bool get_path(struct input *in, char *out)
{
	uint8_t n;
	char *tmp;

	if (!get_u8(in, &n) || in->left < n)
		return false;
	memcpy(out, in->p, n);
	out[n] = '\0';
	in->p += n;
	in->left -= n;
	while ((tmp = strstr(out, ".pcopy-")) != NULL)
		*tmp = '_';
	return true;
}

struct tree {
	char base[64];                   /* SANDBOX */
	char outside[96];
	int rootfd;
	struct dest *d;
	struct pc_err err;
	struct dest_file *open[FUZZ_TREE_OPEN];
	unsigned nopen;
	struct proto_entry e;
	char link_target[PROTO_MAX_PATH + 1];
};

/* Attribute set k (0..15) on t->e. */
static void set_attrs(struct tree *t, unsigned k)
{
	static const uint32_t modes[16] = { 0644, 0755, 0600, 0555, 0, 07777, 04755, 02755,
					    01777, 0444, 0700, 0711, 0666, 0750, 0640, 0100644 };

	t->e.mode = modes[k];
	t->e.uid = k & 1 ? 65534 : 1000 + k;
	t->e.gid = k & 2 ? 65534 : 2000 + k;
	snprintf(t->e.user, sizeof(t->e.user), "%s", k & 4 ? "nobody" : k & 8 ? "root" : "");
	snprintf(t->e.group, sizeof(t->e.group), "%s", k & 4 ? "nogroup" : k & 8 ? "x-none" : "");
	t->e.mtime_s = (int64_t)k * 100000000 - 50000000;
	t->e.mtime_ns = k * 61000000u;
	t->e.atime_s = 1000000000;
	t->e.atime_ns = k == 15 ? 1000000000u : 999999999u;  /* 15: out of range */
}

static void symlink_target(struct tree *t, uint8_t k)
{
	static const char *const rel[] = { "a", "a/b", "../a", "x/../../outside" };

	switch (k % FUZZ_TREE_TARGETS) {
	case 0: snprintf(t->e.target, sizeof(t->e.target), "../outside"); break;
	case 1: snprintf(t->e.target, sizeof(t->e.target), "%s", t->outside); break;
	case 2: snprintf(t->e.target, sizeof(t->e.target), ".."); break;
	case 3: snprintf(t->e.target, sizeof(t->e.target), "."); break;
	default: snprintf(t->e.target, sizeof(t->e.target), "%s", rel[k % 4]); break;
	}
}

static void file_once(struct tree *t, struct input *in)
{
	static const char fill[256] = { 'x' };
	struct dest_file *f = NULL;
	uint8_t n, extra;

	if (!get_u8(in, &n) || !get_u8(in, &extra))
		return;
	if (dest_file_open(t->d, t->e.path, &f, &t->err) != 0) {
		fuzz_require(f == NULL);
		return;
	}
	fuzz_require(pwrite(dest_file_fd(f), fill, n, 0) == n);
	(void)dest_file_commit(t->d, f, &t->e, (uint64_t)n + extra % 4, &t->err);
}

/* Takes the oldest file kept open out of the list. */
static struct dest_file *oldest(struct tree *t)
{
	struct dest_file *f = t->open[0];

	memmove(t->open, t->open + 1, (t->nopen - 1) * sizeof(t->open[0]));
	t->nopen--;
	return f;
}

/* Runs one operation; false when the input ran out. */
static bool step(struct tree *t, struct input *in)
{
	static const uint8_t types[FUZZ_TREE_OPS] = {
		[FUZZ_TREE_MKDIR] = PROTO_ENT_DIR, [FUZZ_TREE_DIR_END] = PROTO_ENT_DIR_END,
		[FUZZ_TREE_FILE] = PROTO_ENT_REG, [FUZZ_TREE_FILE_OPEN] = PROTO_ENT_REG,
		[FUZZ_TREE_COMMIT] = PROTO_ENT_REG, [FUZZ_TREE_ABORT] = PROTO_ENT_REG,
		[FUZZ_TREE_SYMLINK] = PROTO_ENT_SYMLINK, [FUZZ_TREE_FIFO] = PROTO_ENT_FIFO,
		[FUZZ_TREE_SOCK] = PROTO_ENT_SOCK, [FUZZ_TREE_CHR] = PROTO_ENT_CHR,
		[FUZZ_TREE_BLK] = PROTO_ENT_BLK, [FUZZ_TREE_HARDLINK] = PROTO_ENT_HARDLINK,
	};
	uint8_t op, k;
	struct dest_file *f = NULL;

	if (!get_u8(in, &op) || !get_path(in, t->e.path))
		return false;
	pc_err_destroy(&t->err);
	pc_err_init(&t->err);
	t->e.type = types[(op & 15) % FUZZ_TREE_OPS];
	t->e.target[0] = '\0';
	t->e.rdev = 0;
	set_attrs(t, op >> 4);
	switch ((op & 15) % FUZZ_TREE_OPS) {
	case FUZZ_TREE_MKDIR: (void)dest_mkdir(t->d, &t->e, &t->err); break;
	case FUZZ_TREE_DIR_END: (void)dest_dir_end(t->d, &t->e, &t->err); break;
	case FUZZ_TREE_FILE: file_once(t, in); break;
	case FUZZ_TREE_FILE_OPEN:
		if (t->nopen < FUZZ_TREE_OPEN && dest_file_open(t->d, t->e.path, &f, &t->err) == 0)
			t->open[t->nopen++] = f;
		break;
	case FUZZ_TREE_COMMIT:
		if (t->nopen > 0)
			(void)dest_file_commit(t->d, oldest(t), &t->e, 0, &t->err);
		break;
	case FUZZ_TREE_ABORT:
		if (t->nopen > 0)
			dest_file_abort(t->d, oldest(t));
		break;
	case FUZZ_TREE_SYMLINK:
		if (!get_u8(in, &k))
			return false;
		symlink_target(t, k);
		(void)dest_symlink(t->d, &t->e, &t->err);
		break;
	case FUZZ_TREE_HARDLINK:
		if (!get_path(in, t->link_target))
			return false;
		(void)dest_hardlink(t->d, t->link_target, &t->e, &t->err);
		break;
	default:
		t->e.rdev = makedev(1, 3);
		(void)dest_special(t->d, &t->e, &t->err);
		break;
	}
	return true;
}

/* ---- The sandbox ------------------------------------------------------ */

static int tmp_names;

static int open_up(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_D || type == FTW_DNR)
		(void)chmod(path, 0700);
	return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	if (strstr(path + ftw->base, ".pcopy-") != NULL)
		tmp_names++;
	return type == FTW_DP ? rmdir(path) : unlink(path);
}

static bool outside_empty(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	int n = 0;

	fuzz_require(dp != NULL);
	while ((de = readdir(dp)) != NULL)
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(dp);
	return n == 0;
}

/* The sandbox holds exactly root and outside, outside is empty; then the
 * sandbox is removed, counting temporary names met on the way. */
static void check_and_remove(struct tree *t)
{
	DIR *dp = opendir(t->base);
	struct dirent *de;
	char root[96];

	fuzz_require(dp != NULL);
	while ((de = readdir(dp)) != NULL)
		fuzz_require(strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			     strcmp(de->d_name, "root") == 0 || strcmp(de->d_name, "outside") == 0);
	closedir(dp);
	fuzz_require(outside_empty(t->outside));
	snprintf(root, sizeof(root), "%s/root", t->base);
	tmp_names = 0;
	fuzz_require(nftw(root, open_up, 16, FTW_PHYS) == 0);
	fuzz_require(nftw(t->base, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0);
	fuzz_require(tmp_names == 0);
}

/* A fresh SANDBOX with root and outside, in $TMPDIR, else /dev/shm (tmpfs:
 * directory operations there are six times faster than on this disk),
 * else /tmp. */
static bool sandbox_new(struct tree *t)
{
	const char *tmp = getenv("TMPDIR");
	char root[96];

	if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > 30)
		tmp = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(t->base, sizeof(t->base), "%s/pcopy-fuzz-tree-XXXXXX", tmp);
	if (mkdtemp(t->base) == NULL)
		return false;
	snprintf(root, sizeof(root), "%s/root", t->base);
	snprintf(t->outside, sizeof(t->outside), "%s/outside", t->base);
	fuzz_require(mkdir(root, 0755) == 0 && mkdir(t->outside, 0755) == 0);
	t->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fuzz_require(t->rootfd >= 0);
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const mode_t umasks[4] = { 022, 077, 0, 027 };
	static struct tree t;
	struct input in = { data, size };
	struct dest_opts o;
	uint8_t opt;

	if (!get_u8(&in, &opt))
		return 0;
	fuzz_require(sandbox_new(&t));
	memset(&o, 0, sizeof(o));
	o.preserve = opt & FUZZ_TREE_OPT_PRESERVE;
	o.numeric_ids = opt & FUZZ_TREE_OPT_NUMERIC;
	o.strip_setid = opt & FUZZ_TREE_OPT_STRIP;
	o.umask = umasks[(opt >> 4) & 3];
	t.d = dest_new(t.rootfd, opt & FUZZ_TREE_OPT_RENAME ? "renamed" : NULL, &o, "DST");
	fuzz_require(t.d != NULL);
	pc_err_init(&t.err);
	t.nopen = 0;
	while (step(&t, &in))
		;
	while (t.nopen > 0)
		dest_file_abort(t.d, oldest(&t));
	dest_free(t.d);
	pc_err_destroy(&t.err);
	close(t.rootfd);
	check_and_remove(&t);
	return 0;
}
