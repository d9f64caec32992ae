// SPDX-License-Identifier: Apache-2.0
/* Unit tests for stage: which threads count, the sums, and the bounds a
 * row must keep to pass END's and DONE's decoder (wire/proto.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "pipeline/stage.h"

static struct stage_acc acc(uint64_t span, uint64_t busy, uint64_t in, uint64_t out)
{
	struct stage_acc a;

	stage_acc_begin(&a, 1000);
	a.busy_ns = busy;
	a.in_ns = in;
	a.out_ns = out;
	stage_acc_end(&a, 1000 + span);
	return a;
}

static void test_begin_end(void **state)
{
	struct stage_acc a = { .busy_ns = 5, .in_ns = 6, .out_ns = 7 };

	(void)state;
	stage_acc_begin(&a, 123);
	assert_int_equal(a.start_ns, 123);
	assert_int_equal(a.busy_ns + a.in_ns + a.out_ns + a.span_ns, 0);
	stage_acc_end(&a, 1123);
	assert_int_equal(a.span_ns, 1000);
	stage_acc_end(&a, 100); /* a clock before the start: no span, no wrap */
	assert_int_equal(a.span_ns, 0);
}

/* A thread that only waited for input is left out; one that worked, or
 * only waited to hand on, counts. */
static void test_sum_skips_idle(void **state)
{
	struct stage_sum s = { 0 };
	struct stage_acc idle = acc(9000, 0, 9000, 0);
	struct stage_acc busy = acc(9000, 6000, 1000, 2000);
	struct stage_acc stuck = acc(8000, 0, 0, 8000);

	(void)state;
	stage_sum_add(&s, &idle);
	assert_int_equal(s.threads, 0);
	assert_int_equal(s.in_ns, 0);
	stage_sum_add(&s, &busy);
	stage_sum_add(&s, &stuck);
	assert_int_equal(s.threads, 2);
	assert_int_equal(s.span_ns, 17000);
	assert_int_equal(s.busy_ns, 6000);
	assert_int_equal(s.in_ns, 1000);
	assert_int_equal(s.out_ns, 10000);
}

static void test_row_converts(void **state)
{
	struct stage_sum s = { .threads = 2, .span_ns = 4000999, .busy_ns = 1000999,
			       .in_ns = 2000000, .out_ns = 999 };
	struct proto_stage row;

	(void)state;
	stage_sum_row(&s, 2000, &row);
	assert_int_equal(row.threads, 2);
	assert_int_equal(row.span_us, 4000);
	assert_int_equal(row.busy_us, 1000);
	assert_int_equal(row.in_us, 2000);
	assert_int_equal(row.out_us, 0);
	s = (struct stage_sum){ 0 };
	memset(&row, 0xff, sizeof(row));
	stage_sum_row(&s, 2000, &row);
	assert_int_equal(row.threads + row.span_us + row.busy_us + row.in_us + row.out_us, 0);
}

/* The span is cut to threads * wall; the parts to the span, out first. */
static void test_row_clamps(void **state)
{
	struct stage_sum s = { .threads = 3, .span_ns = 3500000, .busy_ns = 2000000,
			       .in_ns = 1000000, .out_ns = 1000000 };
	struct proto_stage row;

	(void)state;
	stage_sum_row(&s, 1000, &row);
	assert_int_equal(row.span_us, 3000);
	assert_int_equal(row.busy_us, 2000);
	assert_int_equal(row.in_us, 1000);
	assert_int_equal(row.out_us, 0);
	s.busy_ns = 5000000;
	stage_sum_row(&s, 1000, &row);
	assert_int_equal(row.busy_us, 3000);
	assert_int_equal(row.in_us + row.out_us, 0);
	s.threads = PROTO_STAGE_MAX_THREADS + 5;
	stage_sum_row(&s, 1000, &row);
	assert_int_equal(row.threads, PROTO_STAGE_MAX_THREADS);
	stage_sum_row(&s, 0, &row); /* no wall time: no time at all */
	assert_int_equal(row.span_us + row.busy_us + row.in_us + row.out_us, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_begin_end),
		cmocka_unit_test(test_sum_skips_idle),
		cmocka_unit_test(test_row_converts),
		cmocka_unit_test(test_row_clamps),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);

	return testutil_status(failed);
}
