/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for bufpool: bounds, blocking acquire, abort, outstanding. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "pipeline/bufpool.h"

/* Gives a thread time to reach its blocking call. The tests only use it to
 * check that something did NOT happen yet; correctness never rests on it. */
static void settle(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

static void test_new_rejects(void **state)
{
	(void)state;
	assert_null(bufpool_new(0, 4096));
	assert_null(bufpool_new(4, 0));
	bufpool_free(NULL);
}

static void test_acquire_all(void **state)
{
	struct buf *b[4];
	struct bufpool *p;
	int i, j;

	(void)state;
	p = bufpool_new(4, 10000);
	assert_non_null(p);
	assert_int_equal(bufpool_outstanding(p), 0);
	for (i = 0; i < 4; i++) {
		b[i] = bufpool_acquire(p);
		assert_non_null(b[i]);
		assert_int_equal(b[i]->cap, 10000);
		assert_int_equal((uintptr_t)b[i]->data % 4096, 0);
		memset(b[i]->data, i, b[i]->cap);  /* the whole cap is ours */
		for (j = 0; j < i; j++)
			assert_ptr_not_equal(b[i], b[j]);
		assert_int_equal(bufpool_outstanding(p), (unsigned)i + 1);
	}
	for (i = 0; i < 4; i++) {
		bufpool_release(p, b[i]);
		assert_int_equal(bufpool_outstanding(p), 3 - (unsigned)i);
	}
	bufpool_free(p);
}

static void test_acquire_zeroes_metadata(void **state)
{
	struct bufpool *p;
	struct buf *b;
	int token;

	(void)state;
	p = bufpool_new(1, 64);
	assert_non_null(p);
	b = bufpool_acquire(p);
	assert_non_null(b);
	b->len = 17;
	b->ctx = &token;
	b->hdr.seq = 99;
	b->hdr.file_id = 5;
	bufpool_release(p, b);
	b = bufpool_acquire(p);
	assert_non_null(b);
	assert_int_equal(b->len, 0);
	assert_null(b->ctx);
	assert_int_equal(b->hdr.seq, 0);
	assert_int_equal(b->hdr.file_id, 0);
	assert_int_equal(b->cap, 64);
	bufpool_release(p, b);
	bufpool_free(p);
}

struct acquirer {
	struct bufpool *p;
	struct buf *got;      /* written by the thread, read after join */
	atomic_bool done;
};

static void *acquirer_main(void *arg)
{
	struct acquirer *a = arg;

	a->got = bufpool_acquire(a->p);
	atomic_store(&a->done, true);
	return NULL;
}

static void test_acquire_blocks_until_release(void **state)
{
	struct acquirer a;
	struct buf *b1, *b2;
	pthread_t th;

	(void)state;
	a.p = bufpool_new(2, 512);
	assert_non_null(a.p);
	a.got = NULL;
	atomic_init(&a.done, false);
	b1 = bufpool_acquire(a.p);
	b2 = bufpool_acquire(a.p);
	assert_non_null(b1);
	assert_non_null(b2);

	assert_int_equal(pthread_create(&th, NULL, acquirer_main, &a), 0);
	settle();
	assert_false(atomic_load(&a.done));
	assert_int_equal(bufpool_outstanding(a.p), 2);

	bufpool_release(a.p, b2);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_true(atomic_load(&a.done));
	assert_ptr_equal(a.got, b2);
	assert_int_equal(bufpool_outstanding(a.p), 2);

	bufpool_release(a.p, a.got);
	bufpool_release(a.p, b1);
	assert_int_equal(bufpool_outstanding(a.p), 0);
	bufpool_free(a.p);
}

static void test_abort_wakes_acquirer(void **state)
{
	struct acquirer a;
	struct buf *b;
	pthread_t th;

	(void)state;
	a.p = bufpool_new(1, 512);
	assert_non_null(a.p);
	a.got = NULL;
	atomic_init(&a.done, false);
	b = bufpool_acquire(a.p);
	assert_non_null(b);

	assert_int_equal(pthread_create(&th, NULL, acquirer_main, &a), 0);
	settle();
	assert_false(atomic_load(&a.done));
	bufpool_abort(a.p);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_null(a.got);

	/* Release still works after abort, acquire keeps failing. */
	bufpool_release(a.p, b);
	assert_int_equal(bufpool_outstanding(a.p), 0);
	assert_null(bufpool_acquire(a.p));
	bufpool_abort(a.p);
	assert_null(bufpool_acquire(a.p));
	bufpool_free(a.p);
}

#define CHURN_THREADS 8
#define CHURN_ROUNDS 5000
#define CHURN_BUFS 3

struct churner {
	struct bufpool *p;
	atomic_uint *held;     /* buffers held right now, across threads */
	atomic_uint *max_held;
	unsigned id;
	bool ok;               /* written by the thread, read after join */
};

static void *churner_main(void *arg)
{
	struct churner *c = arg;
	struct buf *b;
	unsigned i, now, max;
	size_t k;

	c->ok = true;
	for (i = 0; i < CHURN_ROUNDS; i++) {
		b = bufpool_acquire(c->p);
		if (b == NULL) {
			c->ok = false;
			return NULL;
		}
		now = atomic_fetch_add(c->held, 1) + 1;
		max = atomic_load(c->max_held);
		while (now > max && !atomic_compare_exchange_weak(c->max_held, &max, now))
			;
		/* Nobody else may touch this buffer while we hold it. */
		memset(b->data, (int)c->id, b->cap);
		for (k = 0; k < b->cap; k++) {
			if (b->data[k] != (uint8_t)c->id)
				c->ok = false;
		}
		atomic_fetch_sub(c->held, 1);
		bufpool_release(c->p, b);
	}
	return NULL;
}

static void test_churn(void **state)
{
	struct churner c[CHURN_THREADS];
	pthread_t th[CHURN_THREADS];
	atomic_uint held, max_held;
	struct bufpool *p;
	unsigned i;

	(void)state;
	p = bufpool_new(CHURN_BUFS, 256);
	assert_non_null(p);
	atomic_init(&held, 0);
	atomic_init(&max_held, 0);
	for (i = 0; i < CHURN_THREADS; i++) {
		c[i].p = p;
		c[i].held = &held;
		c[i].max_held = &max_held;
		c[i].id = i + 1;
		c[i].ok = false;
		assert_int_equal(pthread_create(&th[i], NULL, churner_main, &c[i]), 0);
	}
	for (i = 0; i < CHURN_THREADS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_true(c[i].ok);
	}
	assert_true(atomic_load(&max_held) <= CHURN_BUFS);
	assert_int_equal(bufpool_outstanding(p), 0);
	bufpool_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_rejects),
		cmocka_unit_test(test_acquire_all),
		cmocka_unit_test(test_acquire_zeroes_metadata),
		cmocka_unit_test(test_acquire_blocks_until_release),
		cmocka_unit_test(test_abort_wakes_acquirer),
		cmocka_unit_test(test_churn),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
