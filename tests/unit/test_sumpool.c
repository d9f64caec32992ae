/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for sumpool: chunks come back in the order they were handed
 * out, each hash that of its block's bytes (NONE for a block the file does
 * not hold whole, the journal does not name, or after the session ended);
 * with copy, the blocks hashed are in the copy, zero pages left as holes;
 * the holes of a sparse file hash as zeros, unread and not copied;
 * a copy that cannot be written gives NONE from the failing block on; and
 * the caller's thread does the work when no thread could be had. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/journal.h"
#include "pipeline/sparse.h"
#include "pipeline/sumpool.h"
#include "wire/proto.h"

#define B 4096u
#define NBLOCKS 300u /* almost 5 chunks */
#define SIZE ((uint64_t)NBLOCKS * B - 1000u) /* the last block short */

struct fixture {
	char dir[64];
	char path[96], copy[96];
	uint8_t *data;  /* SIZE bytes: the file's */
	int fd;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_sumpool.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/old", f->dir);
	snprintf(f->copy, sizeof(f->copy), "%s/copy", f->dir);
	f->data = malloc(SIZE);
	assert_non_null(f->data);
	for (uint64_t i = 0; i < SIZE; i++)
		f->data[i] = (uint8_t)(i * 131u + i / 4093u);
	memset(f->data + 7 * B, 0, B); /* a block of zeros: a hole in the copy */
	int w = open(f->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(w >= 0);
	assert_int_equal(write(w, f->data, SIZE), (ssize_t)SIZE);
	assert_int_equal(close(w), 0);
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	assert_true(f->fd >= 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	close(f->fd);
	free(f->data);
	assert_int_equal(testutil_rm_rf(f->dir), 0);
	free(f);
	return 0;
}

static bool stop_now;

/* A put into the fd at arg (an int), holes left, but block 3, which is
 * there already (as a hole that came before the hashes). */
static int put(void *arg, uint64_t k, uint64_t off, const uint8_t *buf, size_t len)
{
	return k == 3 ? 0 : sparse_pwrite(*(const int *)arg, buf, len, off, false);
}

static bool aborted(void *arg)
{
	(void)arg;
	return stop_now;
}

/* Runs f's blocks through p as the sink does (at most SUMPOOL_DEPTH
 * chunks out), copy on for the chunks below copy_chunks, and checks each
 * chunk's place and hashes: block k's are want(k) ? its bytes' : NONE. */
static void run(struct sumpool *p, const struct fixture *fx, const struct sumpool_file *f,
		unsigned copy_chunks, bool (*want)(uint64_t k), struct sumpool_chunk *last)
{
	uint64_t next = 0, expect = 0;
	unsigned pending = 0, handed = 0;
	uint8_t sum[PROTO_SUM_LEN], none[PROTO_SUM_LEN] = { 0 };

	while (next < NBLOCKS || pending > 0) {
		if (next < NBLOCKS && pending < SUMPOOL_DEPTH) {
			unsigned n = NBLOCKS - next < SUMPOOL_CHUNK ? (unsigned)(NBLOCKS - next)
								    : SUMPOOL_CHUNK;
			sumpool_submit(p, f, next, n, handed++ < copy_chunks);
			next += n;
			pending++;
			continue;
		}
		struct sumpool_chunk c;
		sumpool_collect(p, &c);
		pending--;
		assert_true(c.first == expect);
		assert_true(c.count >= 1 && c.count <= SUMPOOL_CHUNK);
		assert_int_equal(c.copied, f->put != NULL && c.first / SUMPOOL_CHUNK < copy_chunks);
		for (unsigned i = 0; i < c.count; i++) {
			uint64_t k = c.first + i, len = SIZE - k * B < B ? SIZE - k * B : B;
			proto_block_sum(fx->data + k * B, (size_t)len, sum);
			assert_memory_equal(c.hashes + (size_t)i * PROTO_SUM_LEN,
					    want(k) ? sum : none, PROTO_SUM_LEN);
		}
		expect += c.count;
		*last = c;
	}
	assert_true(expect == NBLOCKS);
}

static bool every(uint64_t k)
{
	(void)k;
	return true;
}

static bool odd(uint64_t k)
{
	return k % 2 == 1;
}

static bool nothing(uint64_t k)
{
	(void)k;
	return false;
}

/* In order, every hash right, and the copy holds the blocks of the chunks
 * copied, its block of zeros a hole, nothing of the chunks after, nor the
 * block put left out. */
static void test_hashes_and_copy(void **state)
{
	struct fixture *fx = *state;
	int copy = open(fx->copy, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	struct sumpool_file f = { .fd = fx->fd, .put = put, .put_arg = &copy, .size = SIZE,
				  .block = B };
	struct sumpool *p = sumpool_new(2, B);
	struct sumpool_chunk last;
	struct stat st;

	assert_true(copy >= 0);
	assert_non_null(p);
	run(p, fx, &f, 2, every, &last);
	assert_false(last.copy_failed);
	sumpool_free(p);
	uint64_t copied = 2 * SUMPOOL_CHUNK * B;
	uint8_t *got = malloc(copied);
	assert_non_null(got);
	assert_int_equal(pread(copy, got, copied, 0), (ssize_t)copied);
	memset(fx->data + 3 * B, 0, B); /* left out */
	assert_memory_equal(got, fx->data, copied);
	assert_int_equal(fstat(copy, &st), 0);
	assert_true((uint64_t)st.st_size == copied);
	assert_true((uint64_t)st.st_blocks * 512 < copied); /* the hole */
	free(got);
	close(copy);
}

static atomic_bool put_hole; /* a put came for a block that is a hole in the file */

/* put, but a block of the file's holes (10 to 12, and the last) must not
 * come: it is not read, and the copy's hole is its zeros already. */
static int put_data(void *arg, uint64_t k, uint64_t off, const uint8_t *buf, size_t len)
{
	if ((k >= 10 && k <= 12) || k == NBLOCKS - 1) /* (on the pool's threads) */
		atomic_store(&put_hole, true);
	return put(arg, k, off, buf, len);
}

/* A sparse old file: its holes hash as the zeros they stand for, a whole
 * block's and the short last one's, unread and not put into the copy. */
static void test_holes(void **state)
{
	struct fixture *fx = *state;
	int copy = open(fx->copy, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int w = open(fx->path, O_WRONLY | O_CLOEXEC);
	struct sumpool_file f = { .fd = fx->fd, .put = put_data, .put_arg = &copy,
				  .size = SIZE, .block = B };
	uint64_t last = (NBLOCKS - 1) * (uint64_t)B;

	assert_true(copy >= 0 && w >= 0);
	if (fallocate(w, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 10 * B, 3 * B) != 0)
		fail_msg("this file system cannot punch holes (tmpfs and ext4 can)");
	/* the short last block a hole: cut at a page and grown again */
	assert_int_equal(ftruncate(w, (off_t)last), 0);
	assert_int_equal(ftruncate(w, (off_t)SIZE), 0);
	close(w);
	memset(fx->data + 10 * B, 0, 3 * B);
	memset(fx->data + last, 0, SIZE - last);
	struct sumpool *p = sumpool_new(2, B);
	struct sumpool_chunk c;
	assert_non_null(p);
	atomic_store(&put_hole, false);
	run(p, fx, &f, NBLOCKS, every, &c);
	assert_false(atomic_load(&put_hole));
	sumpool_free(p);
	close(copy);
}

/* A file shorter than the source's: its blocks past the end are NONE. A
 * journal: only the blocks it names are hashed. */
static void test_short_and_journal(void **state)
{
	struct fixture *fx = *state;
	struct sumpool_file f = { .fd = fx->fd, .size = SIZE, .block = B };
	struct sumpool *p = sumpool_new(3, B);
	struct sumpool_chunk last;
	struct journal_id id = { B, SIZE, 1, 0 };
	struct journal *j;
	char jp[128];

	assert_non_null(p);
	run(p, fx, &f, 0, every, &last);
	int w = open(fx->path, O_WRONLY | O_CLOEXEC);
	assert_true(w >= 0);
	assert_int_equal(ftruncate(w, (off_t)(SIZE - B)), 0);
	close(w);
	snprintf(jp, sizeof(jp), "%s/jrnl", fx->dir);
	int jfd = open(jp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(jfd >= 0);
	assert_int_equal(journal_create(jfd, &id, &j), 0);
	for (uint64_t k = 1; k < NBLOCKS; k += 2)
		assert_int_equal(journal_mark(j, k), 0);
	f.j = j;
	/* The last two blocks are no longer there whole: odd() but those. */
	uint64_t nb = 0;
	struct sumpool_chunk c;
	for (uint64_t next = 0; next < NBLOCKS; next += c.count) {
		unsigned n = NBLOCKS - next < SUMPOOL_CHUNK ? (unsigned)(NBLOCKS - next)
							    : SUMPOOL_CHUNK;
		sumpool_submit(p, &f, next, n, false);
		sumpool_collect(p, &c);
		for (unsigned i = 0; i < c.count; i++) {
			uint64_t k = c.first + i;
			bool none = proto_sum_none(c.hashes + (size_t)i * PROTO_SUM_LEN);
			assert_int_equal(none, !odd(k) || k >= NBLOCKS - 2);
			nb += !none;
		}
	}
	assert_true(nb == NBLOCKS / 2 - 1);
	journal_free(j);
	sumpool_free(p);
}

/* A copy that cannot be written: NONE from the first block on, and the
 * chunk says so; a session that ended: NONE for every block after. */
static void test_copy_fails_and_abort(void **state)
{
	struct fixture *fx = *state;
	int ro = open(fx->path, O_RDONLY | O_CLOEXEC);
	struct sumpool_file f = { .fd = fx->fd, .put = put, .put_arg = &ro, .size = SIZE,
				  .block = B };
	struct sumpool *p = sumpool_new(2, B);
	struct sumpool_chunk c;

	assert_true(ro >= 0);
	assert_non_null(p);
	sumpool_submit(p, &f, 0, SUMPOOL_CHUNK, true);
	sumpool_collect(p, &c);
	assert_true(c.copied && c.copy_failed);
	for (unsigned i = 0; i < c.count; i++)
		assert_true(proto_sum_none(c.hashes + (size_t)i * PROTO_SUM_LEN));
	close(ro);
	f.put = NULL;
	f.aborted = aborted;
	stop_now = true;
	struct sumpool_chunk last;
	run(p, fx, &f, 0, nothing, &last);
	stop_now = false;
	sumpool_free(p);
}

/* No thread: sumpool_collect does each chunk on the caller's thread. */
static void test_no_threads(void **state)
{
	struct fixture *fx = *state;
	struct sumpool_file f = { .fd = fx->fd, .size = SIZE, .block = B };
	struct sumpool *p = sumpool_new(0, B);
	struct sumpool_chunk last;

	assert_non_null(p);
	run(p, fx, &f, 0, every, &last);
	sumpool_free(p);
	sumpool_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hashes_and_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_short_and_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_holes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_fails_and_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_threads, setup, teardown),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
