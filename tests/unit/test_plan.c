/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for plan: block order, offsets and lengths of regular files,
 * sequence numbers, finish and abort, streams claimed one reader at a time,
 * failed files, and two readers claiming from one big file at once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sys/err.h"
#include "pipeline/plan.h"
#include "pipeline/srcfile.h"

#define B 4096u

/* Gives a thread time to reach its blocking call. Only used to check that
 * something did NOT happen yet; no outcome rests on it. */
static void settle(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

/* A src_file as the session would hand it over, without an fd. */
static struct src_file *file_new(uint64_t size, bool stream)
{
	struct src_file *f = malloc(sizeof(*f));

	assert_non_null(f);
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->size = size;
	f->stream = stream;
	atomic_init(&f->failed, false);
	enc_file_init(&f->enc);
	return f;
}

static void expect_claim(struct plan *p, const struct src_file *f, uint64_t offset,
			 uint32_t len, uint64_t seq)
{
	struct plan_claim c;

	assert_int_equal(plan_next(p, &c), 1);
	assert_ptr_equal(c.f, f);
	assert_int_equal(c.offset, offset);
	assert_int_equal(c.len, len);
	assert_int_equal(c.seq, seq);
}

static void test_free_null(void **state)
{
	(void)state;
	plan_free(NULL);
}

static void test_regular_blocks(void **state)
{
	struct src_file *empty = file_new(0, false);
	struct src_file *odd = file_new(B + 1, false);
	struct src_file *exact = file_new(3 * B, false);
	struct src_file *tiny = file_new(1, false);
	struct plan *p = plan_new(B, 8);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	plan_add(p, empty);
	plan_add(p, odd);
	plan_add(p, exact);
	plan_add(p, tiny);
	plan_finish(p);

	/* The empty file yields nothing; seq runs on across files. */
	expect_claim(p, odd, 0, B, 0);
	expect_claim(p, odd, B, 1, 1);
	expect_claim(p, exact, 0, B, 2);
	expect_claim(p, exact, B, B, 3);
	expect_claim(p, exact, 2 * B, B, 4);
	expect_claim(p, tiny, 0, 1, 5);
	assert_int_equal(plan_next(p, &c), 0);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);
	free(empty);
	free(odd);
	free(exact);
	free(tiny);
}

static void test_finish_empty(void **state)
{
	struct plan *p = plan_new(B, 4);
	struct src_file *empty = file_new(0, false);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	plan_finish(p);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);

	/* Only empty files: still finished at once. */
	p = plan_new(B, 4);
	assert_non_null(p);
	plan_add(p, empty);
	plan_finish(p);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);
	free(empty);
}

struct claimer {
	struct plan *p;
	struct plan_claim c;  /* written by the thread, read after join */
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
	cl->p = p;
	cl->ret = 99;
	atomic_init(&cl->done, false);
	assert_int_equal(pthread_create(th, NULL, claimer_main, cl), 0);
}

/* A reader waiting for more files is woken by plan_add. */
static void test_add_wakes_waiter(void **state)
{
	struct src_file *f = file_new(10, false);
	struct plan *p = plan_new(B, 4);
	struct claimer cl;
	pthread_t th;

	(void)state;
	assert_non_null(p);
	claimer_start(&cl, p, &th);
	settle();
	assert_false(atomic_load(&cl.done));
	plan_add(p, f);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(cl.ret, 1);
	assert_ptr_equal(cl.c.f, f);
	assert_int_equal(cl.c.offset, 0);
	assert_int_equal(cl.c.len, 10);
	assert_int_equal(cl.c.seq, 0);

	/* And a reader waiting on a drained plan is released by finish. */
	claimer_start(&cl, p, &th);
	settle();
	assert_false(atomic_load(&cl.done));
	plan_finish(p);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(cl.ret, 0);
	plan_free(p);
	free(f);
}

static void test_abort_wakes_waiter(void **state)
{
	struct src_file *f = file_new(4 * B, false);
	struct plan *p = plan_new(B, 4);
	struct claimer cl[2];
	pthread_t th[2];
	struct plan_claim c;
	int i;

	(void)state;
	assert_non_null(p);
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
	/* From now on, even with blocks left and the plan finished. */
	plan_add(p, f);
	plan_finish(p);
	assert_int_equal(plan_next(p, &c), -PC_E_ABORTED);
	plan_abort(p);
	assert_int_equal(plan_next(p, &c), -PC_E_ABORTED);
	plan_free(p);
	free(f);
}

/* A stream is claimed by one reader at a time; the next claim starts where
 * the last read ended. */
static void test_stream_one_at_a_time(void **state)
{
	struct src_file *s = file_new(0, true);
	struct src_file *after = file_new(5, false);
	struct plan *p = plan_new(B, 4);
	struct plan_claim c1, c3;
	struct claimer cl;
	pthread_t th;

	(void)state;
	assert_non_null(p);
	plan_add(p, s);
	plan_add(p, after);
	plan_finish(p);

	assert_int_equal(plan_next(p, &c1), 1);
	assert_ptr_equal(c1.f, s);
	assert_int_equal(c1.offset, 0);
	assert_int_equal(c1.len, B);
	assert_int_equal(c1.seq, 0);

	/* While the stream is held, a second reader waits. */
	claimer_start(&cl, p, &th);
	settle();
	assert_false(atomic_load(&cl.done));
	plan_stream_done(p, &c1, 100, false);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(cl.ret, 1);
	assert_ptr_equal(cl.c.f, s);
	assert_int_equal(cl.c.offset, 100);
	assert_int_equal(cl.c.len, B);
	assert_int_equal(cl.c.seq, 1);

	/* A full read, then the stream ends with a short one. */
	plan_stream_done(p, &cl.c, B, false);
	assert_int_equal(plan_next(p, &c3), 1);
	assert_ptr_equal(c3.f, s);
	assert_int_equal(c3.offset, 100 + B);
	assert_int_equal(c3.seq, 2);
	plan_stream_done(p, &c3, 7, true);

	/* The next file follows; its first block has the next number. */
	expect_claim(p, after, 0, 5, 3);
	assert_int_equal(plan_next(p, &c1), 0);
	plan_free(p);
	free(s);
	free(after);
}

/* An empty read at the end gives its number back: no gap in seq. */
static void test_stream_empty_last_read(void **state)
{
	struct src_file *s = file_new(0, true);
	struct src_file *s2 = file_new(0, true);
	struct src_file *after = file_new(2 * B, false);
	struct plan *p = plan_new(B, 4);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	plan_add(p, s);
	plan_add(p, s2);
	plan_add(p, after);
	plan_finish(p);

	assert_int_equal(plan_next(p, &c), 1);
	assert_int_equal(c.seq, 0);
	plan_stream_done(p, &c, 10, false);
	assert_int_equal(plan_next(p, &c), 1);
	assert_int_equal(c.seq, 1);
	assert_int_equal(c.offset, 10);
	plan_stream_done(p, &c, 0, true);

	/* An empty stream: its only claim's number is reused too. */
	assert_int_equal(plan_next(p, &c), 1);
	assert_ptr_equal(c.f, s2);
	assert_int_equal(c.seq, 1);
	assert_int_equal(c.offset, 0);
	plan_stream_done(p, &c, 0, true);

	expect_claim(p, after, 0, B, 1);
	expect_claim(p, after, B, B, 2);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);
	free(s);
	free(s2);
	free(after);
}

static void test_failed_file_skipped(void **state)
{
	struct src_file *f = file_new(10 * B, false);
	struct src_file *g = file_new(B, false);
	struct plan *p = plan_new(B, 4);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	plan_add(p, f);
	plan_add(p, g);
	plan_finish(p);
	expect_claim(p, f, 0, B, 0);
	expect_claim(p, f, B, B, 1);
	atomic_store(&f->failed, true);
	expect_claim(p, g, 0, B, 2);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);
	free(f);
	free(g);
}

/* A failed file before any claim yields nothing at all. */
static void test_failed_before_claim(void **state)
{
	struct src_file *f = file_new(3 * B, false);
	struct plan *p = plan_new(B, 4);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	atomic_store(&f->failed, true);
	plan_add(p, f);
	plan_finish(p);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);
	free(f);
}

/* A stream that fails while a reader holds it: no further claims once the
 * reader hands it back. */
static void test_failed_stream(void **state)
{
	struct src_file *s = file_new(0, true);
	struct src_file *g = file_new(1, false);
	struct plan *p = plan_new(B, 4);
	struct plan_claim c;

	(void)state;
	assert_non_null(p);
	plan_add(p, s);
	plan_add(p, g);
	plan_finish(p);
	assert_int_equal(plan_next(p, &c), 1);
	assert_ptr_equal(c.f, s);
	atomic_store(&s->failed, true);
	plan_stream_done(p, &c, B, false);
	expect_claim(p, g, 0, 1, 1);
	assert_int_equal(plan_next(p, &c), 0);
	plan_free(p);
	free(s);
	free(g);
}

/* ---- Two readers, one big file ---------------------------------------- */

#define BIG_BLOCKS 50000u
#define BIG_TAIL 123u
#define BIG_TOTAL (BIG_BLOCKS + 1u)   /* the tail is one more block */
#define NCLAIMERS 2

static atomic_uint big_seen[BIG_TOTAL];

struct big_claimer {
	struct plan *p;
	const struct src_file *f;
	unsigned claims;      /* written by the thread, read after join */
	bool ok;              /* written by the thread, read after join */
};

static void *big_claimer_main(void *arg)
{
	struct big_claimer *bc = arg;
	uint64_t last_seq = 0;
	struct plan_claim c;
	int ret;

	bc->ok = true;
	while ((ret = plan_next(bc->p, &c)) == 1) {
		uint64_t idx = c.offset / B;
		uint32_t want = idx == BIG_BLOCKS ? BIG_TAIL : B;

		if (c.f != bc->f || c.offset % B != 0 || idx >= BIG_TOTAL || c.len != want ||
		    c.seq != idx || (bc->claims > 0 && c.seq <= last_seq)) {
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
	struct src_file *f = file_new((uint64_t)BIG_BLOCKS * B + BIG_TAIL, false);
	struct big_claimer bc[NCLAIMERS];
	pthread_t th[NCLAIMERS];
	struct plan *p = plan_new(B, 4);
	unsigned i, bad = 0, total = 0;

	(void)state;
	assert_non_null(p);
	for (i = 0; i < BIG_TOTAL; i++)
		atomic_init(&big_seen[i], 0);
	/* The readers start before the file is announced, as in a session. */
	for (i = 0; i < NCLAIMERS; i++) {
		bc[i].p = p;
		bc[i].f = f;
		bc[i].claims = 0;
		bc[i].ok = false;
		assert_int_equal(pthread_create(&th[i], NULL, big_claimer_main, &bc[i]), 0);
	}
	plan_add(p, f);
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
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_null),
		cmocka_unit_test(test_regular_blocks),
		cmocka_unit_test(test_finish_empty),
		cmocka_unit_test(test_add_wakes_waiter),
		cmocka_unit_test(test_abort_wakes_waiter),
		cmocka_unit_test(test_stream_one_at_a_time),
		cmocka_unit_test(test_stream_empty_last_read),
		cmocka_unit_test(test_failed_file_skipped),
		cmocka_unit_test(test_failed_before_claim),
		cmocka_unit_test(test_failed_stream),
		cmocka_unit_test(test_concurrent_claims),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
