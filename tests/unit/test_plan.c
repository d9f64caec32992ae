/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for plan: block order, offsets and lengths of regular files,
 * sequence numbers, finish and abort, streams claimed one reader at a time,
 * failed files (their unread blocks counted off reads_left, the fd closed
 * at 0), two readers claiming from one big file at once, and packs of
 * small files with their bounds (block size with 4 bytes of status per id,
 * PLAN_PACK_MAX_RECS files, PROTO_MAX_PACK ids). Every record the test
 * makes keeps one reference of its own (the window's, in a session), and
 * each test checks that the counts come back to it and frees the record:
 * run under ASan, a reference too many is a leak. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sys/err.h"
#include "pipeline/plan.h"
#include "pipeline/srcrec.h"
#include "wire/proto.h"

#define B 4096u

/* A pack claim's files; the plan writes up to PLAN_PACK_MAX_RECS. */
static struct src_rec *pack_recs[PLAN_PACK_MAX_RECS];

/* Gives a thread time to reach its blocking call. Only used to check that
 * something did NOT happen yet; no outcome rests on it. */
static void settle(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

/* A record as the control thread makes it (one reference: the test's),
 * without an fd. */
static struct src_rec *rec_new(uint32_t id, uint64_t size, bool stream)
{
	struct src_rec *f = src_rec_new(id, size, -1, stream ? NULL : "f", "f");

	assert_non_null(f);
	f->stream = stream;
	return f;
}

/* Hands f to the plan, which takes a reference of its own. */
static void add(struct plan *p, struct src_rec *f)
{
	src_rec_get(f);
	plan_add(p, f);
}

/* Checks that only the test's reference is left, and drops it. */
static void rec_done(struct src_rec *f)
{
	assert_int_equal(atomic_load(&f->refs), 1);
	src_rec_put(f);
}

static void claim_init(struct plan_claim *c)
{
	memset(c, 0, sizeof(*c));
	c->recs = pack_recs;
}

/* The next claim is block [offset, offset+len) of f, number seq; drops
 * the claim's reference. */
static void expect_claim(struct plan *p, struct src_rec *f, uint64_t offset, uint32_t len,
			 uint64_t seq)
{
	struct plan_claim c;

	claim_init(&c);
	assert_int_equal(plan_next(p, &c), 1);
	assert_int_equal(c.kind, f->stream ? PLAN_STREAM : PLAN_BLOCK);
	assert_ptr_equal(c.f, f);
	assert_int_equal(c.offset, offset);
	assert_int_equal(c.len, len);
	assert_int_equal(c.seq, seq);
	assert_int_equal(atomic_load(&f->refs), 3 - (f->eof && !f->stream)); /* test, claim, plan */
	src_rec_put(c.f);
}

/* The next claim is a pack of recs[0..n-1] covering span ids from
 * first_id, len raw bytes, number seq; drops the claim's references. */
static void expect_pack(struct plan *p, struct src_rec *const *recs, unsigned n,
			uint32_t first_id, uint32_t span, uint32_t len, uint64_t seq)
{
	struct plan_claim c;

	claim_init(&c);
	assert_int_equal(plan_next(p, &c), 1);
	assert_int_equal(c.kind, PLAN_PACK);
	assert_ptr_equal(c.recs, pack_recs);
	assert_int_equal(c.nrecs, n);
	assert_int_equal(c.first_id, first_id);
	assert_int_equal(c.span, span);
	assert_int_equal(c.len, len);
	assert_int_equal(c.seq, seq);
	for (unsigned i = 0; i < n; i++) {
		assert_ptr_equal(c.recs[i], recs[i]);
		assert_int_equal(atomic_load(&recs[i]->refs), 2); /* test, claim */
		src_rec_put(c.recs[i]);
	}
}

static void expect_finished(struct plan *p)
{
	struct plan_claim c;

	claim_init(&c);
	assert_int_equal(plan_next(p, &c), 0);
}

static void test_free_null(void **state)
{
	(void)state;
	plan_free(NULL);
}

static void test_regular_blocks(void **state)
{
	struct src_rec *empty = rec_new(0, 0, false);
	struct src_rec *odd = rec_new(1, B + 1, false);
	struct src_rec *exact = rec_new(2, 3 * B, false);
	struct src_rec *tiny = rec_new(3, 1, false);
	struct plan *p = plan_new(B, false);

	(void)state;
	assert_non_null(p);
	add(p, empty);
	add(p, odd);
	add(p, exact);
	add(p, tiny);
	plan_finish(p);
	assert_int_equal(atomic_load(&odd->reads_left), 2);
	assert_int_equal(atomic_load(&exact->reads_left), 3);
	assert_int_equal(atomic_load(&tiny->reads_left), 1);
	assert_false(tiny->packed); /* no packs without pack */

	/* The empty file yields nothing; seq runs on across files. */
	expect_claim(p, odd, 0, B, 0);
	expect_claim(p, odd, B, 1, 1);
	expect_claim(p, exact, 0, B, 2);
	expect_claim(p, exact, B, B, 3);
	expect_claim(p, exact, 2 * B, B, 4);
	expect_claim(p, tiny, 0, 1, 5);
	expect_finished(p);
	expect_finished(p);
	plan_free(p);
	rec_done(empty);
	rec_done(odd);
	rec_done(exact);
	rec_done(tiny);
}

static void test_finish_empty(void **state)
{
	struct plan *p = plan_new(B, true);
	struct src_rec *empty = rec_new(0, 0, false);

	(void)state;
	assert_non_null(p);
	plan_finish(p);
	expect_finished(p);
	plan_free(p);

	/* Only empty files: still finished at once. */
	p = plan_new(B, true);
	assert_non_null(p);
	add(p, empty);
	assert_false(empty->packed);
	plan_finish(p);
	expect_finished(p);
	plan_free(p);
	rec_done(empty);
}

/* plan_free drops the plan's references to what was never claimed. */
static void test_free_drops_queued(void **state)
{
	struct src_rec *f = rec_new(0, 5 * B, false);
	struct src_rec *s = rec_new(1, 0, true);
	struct src_rec *small = rec_new(2, 10, false);
	struct plan *p = plan_new(B, true);

	(void)state;
	assert_non_null(p);
	add(p, f);
	add(p, s);
	add(p, small);
	assert_int_equal(atomic_load(&f->refs), 2);
	expect_claim(p, f, 0, B, 0);
	plan_free(p);
	rec_done(f);
	rec_done(s);
	rec_done(small);
}

struct claimer {
	struct plan *p;
	struct plan_claim c;  /* written by the thread, read after join */
	struct src_rec *recs[PLAN_PACK_MAX_RECS];
	int ret;              /* written by the thread, read after join */
	atomic_bool done;
};

static void *claimer_main(void *arg)
{
	struct claimer *cl = arg;

	cl->ret = plan_next(cl->p, &cl->c);
	atomic_store(&cl->done, true);
	return NULL;
}

static void claimer_start(struct claimer *cl, struct plan *p, pthread_t *th)
{
	memset(&cl->c, 0, sizeof(cl->c));
	cl->c.recs = cl->recs;
	cl->p = p;
	cl->ret = 99;
	atomic_init(&cl->done, false);
	assert_int_equal(pthread_create(th, NULL, claimer_main, cl), 0);
}

/* A reader waiting for more files is woken by plan_add. */
static void test_add_wakes_waiter(void **state)
{
	struct src_rec *f = rec_new(0, 10, false);
	struct plan *p = plan_new(B, false);
	struct claimer *cl = calloc(1, sizeof(*cl));
	pthread_t th;

	(void)state;
	assert_non_null(p);
	assert_non_null(cl);
	claimer_start(cl, p, &th);
	settle();
	assert_false(atomic_load(&cl->done));
	add(p, f);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(cl->ret, 1);
	assert_int_equal(cl->c.kind, PLAN_BLOCK);
	assert_ptr_equal(cl->c.f, f);
	assert_int_equal(cl->c.offset, 0);
	assert_int_equal(cl->c.len, 10);
	assert_int_equal(cl->c.seq, 0);
	src_rec_put(cl->c.f);

	/* And a reader waiting on a drained plan is released by finish. */
	claimer_start(cl, p, &th);
	settle();
	assert_false(atomic_load(&cl->done));
	plan_finish(p);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(cl->ret, 0);
	plan_free(p);
	rec_done(f);
	free(cl);
}

static void test_abort_wakes_waiter(void **state)
{
	struct src_rec *f = rec_new(0, 4 * B, false);
	struct src_rec *small = rec_new(1, 10, false);
	struct plan *p = plan_new(B, true);
	struct claimer *cl = calloc(2, sizeof(*cl));
	pthread_t th[2];
	struct plan_claim c;
	int i;

	(void)state;
	assert_non_null(p);
	assert_non_null(cl);
	for (i = 0; i < 2; i++)
		claimer_start(&cl[i], p, &th[i]);
	settle();
	assert_false(atomic_load(&cl[0].done));
	assert_false(atomic_load(&cl[1].done));
	plan_abort(p);
	for (i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(cl[i].ret, -PC_E_ABORTED);
	}
	/* From now on, even with blocks and packs left and the plan finished,
	 * and no claim takes a reference. */
	add(p, f);
	add(p, small);
	plan_finish(p);
	claim_init(&c);
	assert_int_equal(plan_next(p, &c), -PC_E_ABORTED);
	plan_abort(p);
	assert_int_equal(plan_next(p, &c), -PC_E_ABORTED);
	assert_int_equal(atomic_load(&f->refs), 2);
	assert_int_equal(atomic_load(&small->refs), 2);
	plan_free(p);
	rec_done(f);
	rec_done(small);
	free(cl);
}

/* A stream is claimed by one reader at a time; the next claim starts where
 * the last read ended. */
static void test_stream_one_at_a_time(void **state)
{
	struct src_rec *s = rec_new(0, 0, true);
	struct src_rec *after = rec_new(1, 5, false);
	struct plan *p = plan_new(B, false);
	struct claimer *cl = calloc(1, sizeof(*cl));
	struct plan_claim c1, c3;
	pthread_t th;

	(void)state;
	assert_non_null(p);
	assert_non_null(cl);
	add(p, s);
	add(p, after);
	plan_finish(p);
	assert_int_equal(atomic_load(&s->reads_left), 0);
	assert_false(s->packed);

	claim_init(&c1);
	assert_int_equal(plan_next(p, &c1), 1);
	assert_int_equal(c1.kind, PLAN_STREAM);
	assert_ptr_equal(c1.f, s);
	assert_int_equal(c1.offset, 0);
	assert_int_equal(c1.len, B);
	assert_int_equal(c1.seq, 0);

	/* While the stream is held, a second reader waits. */
	claimer_start(cl, p, &th);
	settle();
	assert_false(atomic_load(&cl->done));
	plan_stream_done(p, &c1, 100, false);
	src_rec_put(c1.f);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(cl->ret, 1);
	assert_int_equal(cl->c.kind, PLAN_STREAM);
	assert_ptr_equal(cl->c.f, s);
	assert_int_equal(cl->c.offset, 100);
	assert_int_equal(cl->c.len, B);
	assert_int_equal(cl->c.seq, 1);

	/* A full read, then the stream ends with a short one. */
	plan_stream_done(p, &cl->c, B, false);
	src_rec_put(cl->c.f);
	claim_init(&c3);
	assert_int_equal(plan_next(p, &c3), 1);
	assert_ptr_equal(c3.f, s);
	assert_int_equal(c3.offset, 100 + B);
	assert_int_equal(c3.seq, 2);
	plan_stream_done(p, &c3, 7, true);
	src_rec_put(c3.f);

	/* The next file follows; its first block has the next number. */
	expect_claim(p, after, 0, 5, 3);
	expect_finished(p);
	plan_free(p);
	rec_done(s);
	rec_done(after);
	free(cl);
}

/* Claims the next stream read of f at offset and seq, and reports got
 * bytes (eof: the end). */
static void stream_read(struct plan *p, struct src_rec *f, uint64_t offset, uint64_t seq,
			uint32_t got, bool eof)
{
	struct plan_claim c;

	claim_init(&c);
	assert_int_equal(plan_next(p, &c), 1);
	assert_int_equal(c.kind, PLAN_STREAM);
	assert_ptr_equal(c.f, f);
	assert_int_equal(c.offset, offset);
	assert_int_equal(c.seq, seq);
	plan_stream_done(p, &c, got, eof);
	src_rec_put(c.f);
}

/* An empty read at the end gives its number back: no gap in seq. */
static void test_stream_empty_last_read(void **state)
{
	struct src_rec *s = rec_new(0, 0, true);
	struct src_rec *s2 = rec_new(1, 0, true);
	struct src_rec *after = rec_new(2, 2 * B, false);
	struct plan *p = plan_new(B, false);

	(void)state;
	assert_non_null(p);
	add(p, s);
	add(p, s2);
	add(p, after);
	plan_finish(p);

	stream_read(p, s, 0, 0, 10, false);
	stream_read(p, s, 10, 1, 0, true);
	/* An empty stream: its only claim's number is reused too. */
	stream_read(p, s2, 0, 1, 0, true);

	expect_claim(p, after, 0, B, 1);
	expect_claim(p, after, B, B, 2);
	expect_finished(p);
	plan_free(p);
	rec_done(s);
	rec_done(s2);
	rec_done(after);
}

/* A temporary file's fd, owned by f as if a reader had opened it. */
static int give_fd(struct src_rec *f)
{
	char path[] = "/tmp/pcopy-test-plan.XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(unlink(path), 0);
	f->fd = fd;
	f->own_fd = true;
	return fd;
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

/* A file fails after two claims, one of them read: the plan counts off
 * the blocks never claimed, so the fd closes when the claimed one is
 * read; the next file follows. */
static void test_failed_file_skipped(void **state)
{
	struct src_rec *f = rec_new(0, 10 * B, false);
	struct src_rec *g = rec_new(1, B, false);
	struct plan *p = plan_new(B, true);
	int fd = give_fd(f);

	(void)state;
	assert_non_null(p);
	add(p, f);
	add(p, g);
	plan_finish(p);
	assert_false(f->packed);
	assert_int_equal(atomic_load(&f->reads_left), 10);
	expect_claim(p, f, 0, B, 0);
	expect_claim(p, f, B, B, 1);
	plan_read_done(f, 1);
	assert_int_equal(atomic_load(&f->reads_left), 9);
	atomic_store(&f->failed, true);
	expect_claim(p, g, 0, B, 2);
	/* The 8 blocks never claimed are counted off; the second is still out. */
	assert_int_equal(atomic_load(&f->reads_left), 1);
	assert_true(fd_open(fd));
	assert_int_equal(f->fd, fd);
	plan_read_done(f, 1);
	assert_int_equal(atomic_load(&f->reads_left), 0);
	assert_int_equal(f->fd, -1);
	assert_false(fd_open(fd));
	expect_finished(p);
	plan_free(p);
	rec_done(f);
	rec_done(g);
}

/* Every block read: the fd closes at the last one, not before. */
static void test_fd_closes_at_last_read(void **state)
{
	struct src_rec *f = rec_new(0, 2 * B + 1, false);
	struct plan *p = plan_new(B, true);
	int fd = give_fd(f);

	(void)state;
	assert_non_null(p);
	add(p, f);
	plan_finish(p);
	expect_claim(p, f, 0, B, 0);
	expect_claim(p, f, B, B, 1);
	expect_claim(p, f, 2 * B, 1, 2);
	expect_finished(p);
	plan_read_done(f, 0); /* nothing: no change */
	plan_read_done(f, 2);
	assert_int_equal(atomic_load(&f->reads_left), 1);
	assert_true(fd_open(fd));
	plan_read_done(f, 1);
	assert_false(fd_open(fd));
	assert_int_equal(f->fd, -1);
	plan_free(p);
	rec_done(f);
}

/* A failed file before any claim yields nothing at all, and its fd (if a
 * reader had one open) closes as it is dropped. */
static void test_failed_before_claim(void **state)
{
	struct src_rec *f = rec_new(0, 3 * B, false);
	struct plan *p = plan_new(B, true);
	int fd = give_fd(f);

	(void)state;
	assert_non_null(p);
	atomic_store(&f->failed, true);
	add(p, f);
	plan_finish(p);
	expect_finished(p);
	assert_int_equal(atomic_load(&f->reads_left), 0);
	assert_false(fd_open(fd));
	plan_free(p);
	rec_done(f);
}

/* A stream that fails while a reader holds it: no further claims once the
 * reader hands it back. */
static void test_failed_stream(void **state)
{
	struct src_rec *s = rec_new(0, 0, true);
	struct src_rec *g = rec_new(1, 1, false);
	struct plan *p = plan_new(B, false);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	add(p, s);
	add(p, g);
	plan_finish(p);
	claim_init(&c);
	assert_int_equal(plan_next(p, &c), 1);
	assert_ptr_equal(c.f, s);
	atomic_store(&s->failed, true);
	plan_stream_done(p, &c, B, false);
	src_rec_put(c.f);
	expect_claim(p, g, 0, 1, 1);
	expect_finished(p);
	plan_free(p);
	rec_done(s);
	rec_done(g);
}

/* ---- Packs ------------------------------------------------------------- */

static void test_packable(void **state)
{
	struct plan *p = plan_new(B, true);
	struct plan *o = plan_new(B, false);

	(void)state;
	assert_non_null(p);
	assert_non_null(o);
	assert_false(plan_packable(p, 0));
	assert_true(plan_packable(p, 1));
	assert_true(plan_packable(p, B / 4));
	assert_false(plan_packable(p, B / 4 + 1));
	assert_false(plan_packable(p, B));
	/* Ordered: never. */
	assert_false(plan_packable(o, 1));
	assert_false(plan_packable(o, B / 4));
	plan_free(p);
	plan_free(o);
}

/* Makes n records of size each (ids first..), added to p. */
static void add_run(struct plan *p, struct src_rec **r, unsigned n, uint32_t first,
		    uint64_t size)
{
	for (unsigned i = 0; i < n; i++) {
		r[i] = rec_new(first + i, size, false);
		add(p, r[i]);
	}
}

static void done_run(struct src_rec **r, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		rec_done(r[i]);
}

/* Consecutive small files share a block while statuses and contents fit:
 * 4 + 100 bytes each, so 39 in 4096 (4056 bytes), then the rest. */
static void test_pack_fills_block(void **state)
{
	struct src_rec *r[50];
	struct plan *p = plan_new(B, true);

	(void)state;
	assert_non_null(p);
	add_run(p, r, 50, 0, 100);
	plan_finish(p);
	assert_true(r[0]->packed);
	assert_int_equal(atomic_load(&r[0]->reads_left), 0);
	expect_pack(p, r, 39, 0, 39, 39 * 104, 0);
	expect_pack(p, r + 39, 11, 39, 11, 11 * 104, 1);
	expect_finished(p);
	plan_free(p);
	done_run(r, 50);
}

/* The block size is a bound that may be reached exactly: 4 files of 1020
 * bytes and their statuses are 4096 bytes; at 1021 bytes (4100) only 3
 * fit. */
static void test_pack_exact_fit(void **state)
{
	struct src_rec *r[5], *s[6];
	struct plan *p = plan_new(B, true);

	(void)state;
	assert_non_null(p);
	add_run(p, r, 5, 0, 1020);
	add_run(p, s, 6, 5, 1021);
	plan_finish(p);
	expect_pack(p, r, 4, 0, 4, B, 0);
	/* The fifth 1020 and two 1021 (3 * 4 + 1020 + 2042 = 3074; a third
	 * would make 4099). */
	struct src_rec *mix[3] = { r[4], s[0], s[1] };
	expect_pack(p, mix, 3, 4, 3, 12 + 1020 + 2 * 1021, 1);
	expect_pack(p, s + 2, 3, 7, 3, 12 + 3 * 1021, 2);
	expect_pack(p, s + 5, 1, 10, 1, 4 + 1021, 3);
	expect_finished(p);
	plan_free(p);
	done_run(r, 5);
	done_run(s, 6);
}

/* A file of B/4 + 1 bytes travels in a DATA block and ends the pack
 * before it; so does a stream; a pack starts again after them. */
static void test_pack_ended_by_big_file(void **state)
{
	struct src_rec *a[2], *c[1], *d[1];
	struct src_rec *big = rec_new(2, B / 4 + 1, false);
	struct src_rec *s = rec_new(4, 0, true);
	struct plan *p = plan_new(B, true);

	(void)state;
	assert_non_null(p);
	add_run(p, a, 2, 0, 10);
	add(p, big);
	add_run(p, c, 1, 3, 20);
	add(p, s);
	add_run(p, d, 1, 5, 30);
	plan_finish(p);
	assert_false(big->packed);
	assert_int_equal(atomic_load(&big->reads_left), 1);
	expect_pack(p, a, 2, 0, 2, 8 + 20, 0);
	expect_claim(p, big, 0, B / 4 + 1, 1);
	expect_pack(p, c, 1, 3, 1, 4 + 20, 2);
	stream_read(p, s, 0, 3, 0, true); /* an empty stream gives its number back */
	expect_pack(p, d, 1, 5, 1, 4 + 30, 3);
	expect_finished(p);
	plan_free(p);
	done_run(a, 2);
	done_run(c, 1);
	done_run(d, 1);
	rec_done(big);
	rec_done(s);
}

/* Ids without contents between small files (directories, links, empty
 * files: never in the plan) widen the span, and cost 4 bytes each. */
static void test_pack_gaps_widen_span(void **state)
{
	struct src_rec *r[4];
	struct plan *p = plan_new(B, true);

	(void)state;
	assert_non_null(p);
	r[0] = rec_new(3, 100, false);
	r[1] = rec_new(13, 200, false);  /* span 11: 44 + 300 bytes */
	/* 1000 ids on, the statuses alone would fill the block: a new pack. */
	r[2] = rec_new(1013, 100, false);
	r[3] = rec_new(1014, 100, false);
	for (unsigned i = 0; i < 4; i++)
		add(p, r[i]);
	plan_finish(p);
	expect_pack(p, r, 2, 3, 11, 4 * 11 + 300, 0);
	expect_pack(p, r + 2, 2, 1013, 2, 8 + 200, 1);
	expect_finished(p);
	plan_free(p);
	done_run(r, 4);
}

/* -u: a record planned after a kept file (gap_before) starts a new pack,
 * though the block has room: a PACK has no status for a kept file. */
static void test_pack_ends_at_kept_gap(void **state)
{
	struct src_rec *r[3];
	struct plan *p = plan_new(B, true);

	(void)state;
	assert_non_null(p);
	r[0] = rec_new(3, 100, false);
	r[1] = rec_new(5, 100, false);  /* 4 was a kept file */
	r[1]->gap_before = true;
	r[2] = rec_new(7, 100, false);  /* 6 was a directory */
	for (unsigned i = 0; i < 3; i++)
		add(p, r[i]);
	plan_finish(p);
	expect_pack(p, r, 1, 3, 1, 4 + 100, 0);
	expect_pack(p, r + 1, 2, 5, 3, 12 + 200, 1);
	expect_finished(p);
	plan_free(p);
	done_run(r, 3);
}

/* One pack covers at most PROTO_MAX_PACK ids, even when the block has
 * room for more statuses. */
static void test_pack_max_ids(void **state)
{
	const uint32_t big_block = 1u << 20; /* 4 * 65537 + 3 bytes fit easily */
	struct src_rec *r[4];
	struct plan *p = plan_new(big_block, true);

	(void)state;
	assert_non_null(p);
	r[0] = rec_new(0, 1, false);
	r[1] = rec_new(PROTO_MAX_PACK - 1, 1, false); /* the last id one pack may cover */
	r[2] = rec_new(PROTO_MAX_PACK, 1, false);     /* one more: the next pack */
	r[3] = rec_new(2 * PROTO_MAX_PACK, 1, false); /* span 65537 from r[2] */
	for (unsigned i = 0; i < 4; i++)
		add(p, r[i]);
	plan_finish(p);
	expect_pack(p, r, 2, 0, PROTO_MAX_PACK, 4 * PROTO_MAX_PACK + 2, 0);
	expect_pack(p, r + 2, 1, PROTO_MAX_PACK, 1, 4 + 1, 1);
	expect_pack(p, r + 3, 1, 2 * PROTO_MAX_PACK, 1, 4 + 1, 2);
	expect_finished(p);
	plan_free(p);
	done_run(r, 4);
}

/* One pack carries at most PLAN_PACK_MAX_RECS files, even when the block
 * has room for more. */
static void test_pack_max_recs(void **state)
{
	const unsigned n = PLAN_PACK_MAX_RECS + 10;
	struct src_rec **r = calloc(n, sizeof(*r));
	struct plan *p = plan_new(64u << 10, true); /* 5 bytes a file: 13107 would fit */

	(void)state;
	assert_non_null(r);
	assert_non_null(p);
	add_run(p, r, n, 0, 1);
	plan_finish(p);
	expect_pack(p, r, PLAN_PACK_MAX_RECS, 0, PLAN_PACK_MAX_RECS, 5 * PLAN_PACK_MAX_RECS, 0);
	expect_pack(p, r + PLAN_PACK_MAX_RECS, 10, PLAN_PACK_MAX_RECS, 10, 50, 1);
	expect_finished(p);
	plan_free(p);
	done_run(r, n);
	free(r);
}

/* Ordered (pack false): small files go one DATA block each. */
static void test_ordered_never_packs(void **state)
{
	struct src_rec *r[3];
	struct plan *p = plan_new(B, false);

	(void)state;
	assert_non_null(p);
	add_run(p, r, 3, 0, 10);
	plan_finish(p);
	for (unsigned i = 0; i < 3; i++) {
		assert_false(r[i]->packed);
		assert_int_equal(atomic_load(&r[i]->reads_left), 1);
	}
	for (unsigned i = 0; i < 3; i++)
		expect_claim(p, r[i], 0, 10, i);
	expect_finished(p);
	plan_free(p);
	done_run(r, 3);
}

/* ---- Two readers, one big file ---------------------------------------- */

#define BIG_BLOCKS 50000u
#define BIG_TAIL 123u
#define BIG_TOTAL (BIG_BLOCKS + 1u)   /* the tail is one more block */
#define NCLAIMERS 2

static atomic_uint big_seen[BIG_TOTAL];

struct big_claimer {
	struct plan *p;
	const struct src_rec *f;
	struct src_rec *recs[PLAN_PACK_MAX_RECS];
	unsigned claims;      /* written by the thread, read after join */
	bool ok;              /* written by the thread, read after join */
};

static void *big_claimer_main(void *arg)
{
	struct big_claimer *bc = arg;
	uint64_t last_seq = 0;
	struct plan_claim c = { .recs = bc->recs };
	int ret;

	bc->ok = true;
	while ((ret = plan_next(bc->p, &c)) == 1) {
		uint64_t idx = c.offset / B;
		uint32_t want = idx == BIG_BLOCKS ? BIG_TAIL : B;
		bool good = c.kind == PLAN_BLOCK && c.f == bc->f && c.offset % B == 0 &&
			    idx < BIG_TOTAL && c.len == want && c.seq == idx &&
			    (bc->claims == 0 || c.seq > last_seq);

		if (c.kind != PLAN_PACK)
			src_rec_put(c.f);
		if (!good) {
			bc->ok = false;
			continue;
		}
		last_seq = c.seq;
		atomic_fetch_add(&big_seen[idx], 1);
		bc->claims++;
	}
	if (ret != 0)
		bc->ok = false;
	return NULL;
}

static void test_concurrent_claims(void **state)
{
	struct src_rec *f = rec_new(0, (uint64_t)BIG_BLOCKS * B + BIG_TAIL, false);
	struct big_claimer *bc = calloc(NCLAIMERS, sizeof(*bc));
	pthread_t th[NCLAIMERS];
	struct plan *p = plan_new(B, true);
	unsigned i, bad = 0, total = 0;

	(void)state;
	assert_non_null(p);
	assert_non_null(bc);
	for (i = 0; i < BIG_TOTAL; i++)
		atomic_init(&big_seen[i], 0);
	/* The readers start before the file is announced, as in a session. */
	for (i = 0; i < NCLAIMERS; i++) {
		bc[i].p = p;
		bc[i].f = f;
		assert_int_equal(pthread_create(&th[i], NULL, big_claimer_main, &bc[i]), 0);
	}
	add(p, f);
	plan_finish(p);
	for (i = 0; i < NCLAIMERS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_true(bc[i].ok);
		total += bc[i].claims;
	}
	for (i = 0; i < BIG_TOTAL; i++)
		if (atomic_load(&big_seen[i]) != 1)
			bad++;
	assert_int_equal(bad, 0);
	assert_int_equal(total, BIG_TOTAL);
	plan_free(p);
	rec_done(f);
	free(bc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_null),
		cmocka_unit_test(test_regular_blocks),
		cmocka_unit_test(test_finish_empty),
		cmocka_unit_test(test_free_drops_queued),
		cmocka_unit_test(test_add_wakes_waiter),
		cmocka_unit_test(test_abort_wakes_waiter),
		cmocka_unit_test(test_stream_one_at_a_time),
		cmocka_unit_test(test_stream_empty_last_read),
		cmocka_unit_test(test_failed_file_skipped),
		cmocka_unit_test(test_fd_closes_at_last_read),
		cmocka_unit_test(test_failed_before_claim),
		cmocka_unit_test(test_failed_stream),
		cmocka_unit_test(test_packable),
		cmocka_unit_test(test_pack_fills_block),
		cmocka_unit_test(test_pack_exact_fit),
		cmocka_unit_test(test_pack_ended_by_big_file),
		cmocka_unit_test(test_pack_gaps_widen_span),
		cmocka_unit_test(test_pack_ends_at_kept_gap),
		cmocka_unit_test(test_pack_max_ids),
		cmocka_unit_test(test_pack_max_recs),
		cmocka_unit_test(test_ordered_never_packs),
		cmocka_unit_test(test_concurrent_claims),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
