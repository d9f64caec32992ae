/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for ratelimit: the quantum's bounds, the rate one thread and
 * several together get (never faster than asked), no burst after a pause,
 * and abort waking a waiter. Times are checked from below (the cap holds,
 * which no scheduling delay can break) and only loosely from above. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <pthread.h>
#include <time.h>

#include "pipeline/ratelimit.h"
#include "sys/err.h"
#include "sys/platform.h"

static double since_s(uint64_t t0)
{
	return (double)(platform_now_ns() - t0) / 1e9;
}

static void nap_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void test_new_and_quantum(void **state)
{
	struct ratelimit *rl;

	(void)state;
	assert_null(ratelimit_new(0));
	ratelimit_free(NULL);
	rl = ratelimit_new(1);
	assert_non_null(rl);
	assert_int_equal(ratelimit_quantum(rl), 1024); /* the floor */
	ratelimit_free(rl);
	rl = ratelimit_new(1u << 20);
	assert_int_equal(ratelimit_quantum(rl), 16384); /* 1/64 s */
	ratelimit_free(rl);
	rl = ratelimit_new(1ull << 40);
	assert_int_equal(ratelimit_quantum(rl), 65536); /* the ceiling */
	ratelimit_free(rl);
}

/* Takes total bytes in quantum pieces; returns 0 or the first failure. */
static int take_all(struct ratelimit *rl, size_t total)
{
	size_t q = ratelimit_quantum(rl);

	for (size_t done = 0; done < total; done += q) {
		int ret = ratelimit_take(rl, total - done < q ? total - done : q);
		if (ret != 0)
			return ret;
	}
	return 0;
}

static void test_one_taker(void **state)
{
	struct ratelimit *rl = ratelimit_new(4u << 20); /* 4 MiB/s */
	uint64_t t0 = platform_now_ns();

	(void)state;
	/* 1 MiB: the first piece (64 KiB) goes at once, the rest at the
	 * rate: 0.234 s at least. */
	assert_int_equal(take_all(rl, 1u << 20), 0);
	double s = since_s(t0);
	if (s < 0.234 || s > 5)
		fail_msg("1 MiB at 4 MiB/s took %.3f s", s);
	ratelimit_free(rl);
}

struct taker {
	struct ratelimit *rl;
	size_t bytes;
	int ret;
};

static void *taker_main(void *arg)
{
	struct taker *t = arg;

	t->ret = take_all(t->rl, t->bytes);
	return NULL;
}

/* Four threads share one cap: together they get the rate, not four times. */
static void test_shared_by_threads(void **state)
{
	struct ratelimit *rl = ratelimit_new(4u << 20);
	struct taker t[4];
	pthread_t tid[4];
	uint64_t t0 = platform_now_ns();

	(void)state;
	for (int i = 0; i < 4; i++) {
		t[i] = (struct taker){ .rl = rl, .bytes = 256u << 10, .ret = 1 };
		assert_int_equal(pthread_create(&tid[i], NULL, taker_main, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		assert_int_equal(t[i].ret, 0);
	}
	double s = since_s(t0);
	if (s < 0.234 || s > 5) /* as one taker of 1 MiB */
		fail_msg("4 x 256 KiB at 4 MiB/s took %.3f s", s);
	ratelimit_free(rl);
}

/* Idle time saves up no credit: after a pause, the second piece still
 * waits its slot behind the first. */
static void test_no_burst_after_pause(void **state)
{
	struct ratelimit *rl = ratelimit_new(1u << 20); /* quantum 16 KiB: 15.6 ms */
	size_t q = ratelimit_quantum(rl);

	(void)state;
	assert_int_equal(ratelimit_take(rl, q), 0);
	nap_ms(200);
	uint64_t t0 = platform_now_ns();
	for (int i = 0; i < 4; i++)
		assert_int_equal(ratelimit_take(rl, q), 0);
	double s = since_s(t0);
	/* The first of the four goes at once, the other three wait a slot each. */
	if (s < 3 * 0.0156 * 0.95)
		fail_msg("4 pieces after a pause took %.4f s: a burst", s);
	ratelimit_free(rl);
}

/* A waiter far from its slot wakes when aborted, and later takes fail. */
static void test_abort_wakes(void **state)
{
	struct ratelimit *rl = ratelimit_new(1024); /* a quantum a second */
	struct taker t = { .rl = rl, .bytes = 4096, .ret = 1 };
	pthread_t tid;

	(void)state;
	uint64_t t0 = platform_now_ns();
	assert_int_equal(pthread_create(&tid, NULL, taker_main, &t), 0);
	nap_ms(100);
	ratelimit_abort(rl);
	assert_int_equal(pthread_join(tid, NULL), 0);
	assert_int_equal(t.ret, -PC_E_ABORTED);
	double s = since_s(t0);
	if (s > 2.5)
		fail_msg("the aborted waiter returned after %.3f s, not at the abort", s);
	assert_int_equal(ratelimit_take(rl, 1), -PC_E_ABORTED);
	ratelimit_abort(rl); /* idempotent */
	ratelimit_free(rl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_and_quantum),
		cmocka_unit_test(test_one_taker),
		cmocka_unit_test(test_shared_by_threads),
		cmocka_unit_test(test_no_burst_after_pause),
		cmocka_unit_test(test_abort_wakes),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
