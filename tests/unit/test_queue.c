/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for queue: FIFO order, blocking, close, abort, and a
 * many-producer many-consumer stress run. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "sys/err.h"
#include "pipeline/queue.h"

/* Items are small integers disguised as non-NULL pointers. */
#define ITEM(n) ((void *)(uintptr_t)(n))
#define ITEM_N(p) ((uintptr_t)(p))

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
	assert_null(queue_new(0, 1));
	assert_null(queue_new(4, 0));
	queue_free(NULL);
}

static void test_fifo_order(void **state)
{
	struct queue *q;
	uintptr_t i;

	(void)state;
	q = queue_new(4, 1);
	assert_non_null(q);
	assert_null(queue_trypop(q));
	for (i = 1; i <= 4; i++)
		assert_int_equal(queue_push(q, ITEM(i)), 0);
	assert_ptr_equal(queue_pop(q), ITEM(1));
	assert_ptr_equal(queue_pop(q), ITEM(2));
	/* These two wrap around the end of the ring. */
	assert_int_equal(queue_push(q, ITEM(5)), 0);
	assert_int_equal(queue_push(q, ITEM(6)), 0);
	for (i = 3; i <= 5; i++)
		assert_ptr_equal(queue_pop(q), ITEM(i));
	assert_ptr_equal(queue_trypop(q), ITEM(6));
	assert_null(queue_trypop(q));
	assert_false(queue_aborted(q));
	queue_free(q);
}

struct pusher {
	struct queue *q;
	void *item;
	int ret;              /* written by the thread, read after join */
	atomic_bool done;
};

static void *pusher_main(void *arg)
{
	struct pusher *p = arg;

	p->ret = queue_push(p->q, p->item);
	atomic_store(&p->done, true);
	return NULL;
}

struct popper {
	struct queue *q;
	void *got;            /* written by the thread, read after join */
	atomic_bool done;
};

static void *popper_main(void *arg)
{
	struct popper *p = arg;

	p->got = queue_pop(p->q);
	atomic_store(&p->done, true);
	return NULL;
}

static void test_push_blocks_when_full(void **state)
{
	struct pusher p;
	pthread_t th;

	(void)state;
	p.q = queue_new(2, 1);
	assert_non_null(p.q);
	p.item = ITEM(3);
	p.ret = -1;
	atomic_init(&p.done, false);
	assert_int_equal(queue_push(p.q, ITEM(1)), 0);
	assert_int_equal(queue_push(p.q, ITEM(2)), 0);

	assert_int_equal(pthread_create(&th, NULL, pusher_main, &p), 0);
	settle();
	assert_false(atomic_load(&p.done));
	assert_ptr_equal(queue_pop(p.q), ITEM(1));
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.ret, 0);
	assert_ptr_equal(queue_pop(p.q), ITEM(2));
	assert_ptr_equal(queue_pop(p.q), ITEM(3));
	assert_null(queue_trypop(p.q));
	queue_free(p.q);
}

static void test_close_drains_then_null(void **state)
{
	struct queue *q;

	(void)state;
	q = queue_new(8, 3);
	assert_non_null(q);
	assert_int_equal(queue_push(q, ITEM(1)), 0);
	queue_close(q);
	assert_int_equal(queue_push(q, ITEM(2)), 0);
	queue_close(q);
	assert_int_equal(queue_push(q, ITEM(3)), 0);
	queue_close(q);
	assert_ptr_equal(queue_pop(q), ITEM(1));
	assert_ptr_equal(queue_pop(q), ITEM(2));
	assert_ptr_equal(queue_pop(q), ITEM(3));
	assert_null(queue_pop(q));
	assert_null(queue_pop(q));
	queue_free(q);
}

struct drainer {
	struct queue *q;
	atomic_uint received;
	atomic_bool got_null;
	uintptr_t order[8];   /* written by the thread, read after join */
};

static void *drainer_main(void *arg)
{
	struct drainer *d = arg;
	unsigned n;
	void *item;

	while ((item = queue_pop(d->q)) != NULL) {
		n = atomic_load(&d->received);
		if (n < 8)
			d->order[n] = ITEM_N(item);
		atomic_store(&d->received, n + 1);
	}
	atomic_store(&d->got_null, true);
	return NULL;
}

/* A consumer blocked on an empty queue must not see NULL while any of the
 * three producers is still open, and must see it once the last closes. */
static void test_close_three_producers(void **state)
{
	struct drainer d;
	pthread_t th;

	(void)state;
	d.q = queue_new(8, 3);
	assert_non_null(d.q);
	atomic_init(&d.received, 0);
	atomic_init(&d.got_null, false);
	assert_int_equal(pthread_create(&th, NULL, drainer_main, &d), 0);

	assert_int_equal(queue_push(d.q, ITEM(10)), 0);
	queue_close(d.q);
	assert_int_equal(queue_push(d.q, ITEM(20)), 0);
	queue_close(d.q);
	settle();
	assert_false(atomic_load(&d.got_null));

	assert_int_equal(queue_push(d.q, ITEM(30)), 0);
	settle();
	assert_false(atomic_load(&d.got_null));
	queue_close(d.q);

	assert_int_equal(pthread_join(th, NULL), 0);
	assert_true(atomic_load(&d.got_null));
	assert_int_equal(atomic_load(&d.received), 3);
	assert_int_equal(d.order[0], 10);
	assert_int_equal(d.order[1], 20);
	assert_int_equal(d.order[2], 30);
	queue_free(d.q);
}

static void test_abort_wakes_push(void **state)
{
	struct pusher p;
	pthread_t th;

	(void)state;
	p.q = queue_new(1, 1);
	assert_non_null(p.q);
	p.item = ITEM(2);
	p.ret = 0;
	atomic_init(&p.done, false);
	assert_int_equal(queue_push(p.q, ITEM(1)), 0);

	assert_int_equal(pthread_create(&th, NULL, pusher_main, &p), 0);
	settle();
	assert_false(atomic_load(&p.done));
	queue_abort(p.q);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(p.ret, -PC_E_ABORTED);
	assert_true(queue_aborted(p.q));

	/* After abort: pushes fail at once, pop says NULL, trypop drains. */
	assert_int_equal(queue_push(p.q, ITEM(3)), -PC_E_ABORTED);
	assert_null(queue_pop(p.q));
	assert_ptr_equal(queue_trypop(p.q), ITEM(1));
	assert_null(queue_trypop(p.q));
	queue_abort(p.q);
	queue_free(p.q);
}

static void test_abort_wakes_pop(void **state)
{
	struct popper p[2];
	pthread_t th[2];
	struct queue *q;
	int i;

	(void)state;
	q = queue_new(4, 1);
	assert_non_null(q);
	for (i = 0; i < 2; i++) {
		p[i].q = q;
		p[i].got = ITEM(1);
		atomic_init(&p[i].done, false);
		assert_int_equal(pthread_create(&th[i], NULL, popper_main, &p[i]), 0);
	}
	settle();
	assert_false(atomic_load(&p[0].done));
	assert_false(atomic_load(&p[1].done));
	queue_abort(q);
	for (i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_null(p[i].got);
	}
	queue_free(q);
}

#define STRESS_PRODUCERS 4
#define STRESS_CONSUMERS 4
#define STRESS_ITEMS 200000u
#define STRESS_CAP 8

static atomic_uint stress_seen[STRESS_ITEMS];

struct stress_producer {
	struct queue *q;
	unsigned id;
	bool ok;              /* written by the thread, read after join */
};

struct stress_consumer {
	struct queue *q;
	bool ok;              /* written by the thread, read after join */
};

/* Producer id pushes the items n with n % STRESS_PRODUCERS == id, rising. */
static void *stress_producer_main(void *arg)
{
	struct stress_producer *p = arg;
	uintptr_t n;

	p->ok = true;
	for (n = p->id; n < STRESS_ITEMS; n += STRESS_PRODUCERS) {
		if (queue_push(p->q, ITEM(n + 1)) != 0)
			p->ok = false;
	}
	queue_close(p->q);
	return NULL;
}

static void *stress_consumer_main(void *arg)
{
	struct stress_consumer *c = arg;
	uintptr_t last[STRESS_PRODUCERS] = { 0 };
	uintptr_t n;
	void *item;

	c->ok = true;
	while ((item = queue_pop(c->q)) != NULL) {
		n = ITEM_N(item) - 1;
		if (n >= STRESS_ITEMS) {
			c->ok = false;
			continue;
		}
		atomic_fetch_add(&stress_seen[n], 1);
		/* FIFO: one producer's items arrive in the order pushed. */
		if (last[n % STRESS_PRODUCERS] > n + 1)
			c->ok = false;
		last[n % STRESS_PRODUCERS] = n + 1;
	}
	return NULL;
}

static void test_stress(void **state)
{
	struct stress_producer prod[STRESS_PRODUCERS];
	struct stress_consumer cons[STRESS_CONSUMERS];
	pthread_t pth[STRESS_PRODUCERS];
	pthread_t cth[STRESS_CONSUMERS];
	struct queue *q;
	unsigned i, bad = 0;

	(void)state;
	for (i = 0; i < STRESS_ITEMS; i++)
		atomic_init(&stress_seen[i], 0);
	q = queue_new(STRESS_CAP, STRESS_PRODUCERS);
	assert_non_null(q);
	for (i = 0; i < STRESS_CONSUMERS; i++) {
		cons[i].q = q;
		cons[i].ok = false;
		assert_int_equal(pthread_create(&cth[i], NULL, stress_consumer_main, &cons[i]), 0);
	}
	for (i = 0; i < STRESS_PRODUCERS; i++) {
		prod[i].q = q;
		prod[i].id = i;
		prod[i].ok = false;
		assert_int_equal(pthread_create(&pth[i], NULL, stress_producer_main, &prod[i]), 0);
	}
	for (i = 0; i < STRESS_PRODUCERS; i++) {
		assert_int_equal(pthread_join(pth[i], NULL), 0);
		assert_true(prod[i].ok);
	}
	for (i = 0; i < STRESS_CONSUMERS; i++) {
		assert_int_equal(pthread_join(cth[i], NULL), 0);
		assert_true(cons[i].ok);
	}
	for (i = 0; i < STRESS_ITEMS; i++) {
		if (atomic_load(&stress_seen[i]) != 1)
			bad++;
	}
	assert_int_equal(bad, 0);
	assert_null(queue_trypop(q));
	queue_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_rejects),
		cmocka_unit_test(test_fifo_order),
		cmocka_unit_test(test_push_blocks_when_full),
		cmocka_unit_test(test_close_drains_then_null),
		cmocka_unit_test(test_close_three_producers),
		cmocka_unit_test(test_abort_wakes_push),
		cmocka_unit_test(test_abort_wakes_pop),
		cmocka_unit_test(test_stress),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
