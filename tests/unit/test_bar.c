// SPDX-License-Identifier: Apache-2.0
/* test_bar: the progress bar's text (src/cli/bar.c): width fitting, the
 * fields dropped as the terminal narrows, name elision, units, ETA and the
 * rate's smoothing. */
#include "testutil.h"

#include <math.h>

#include "cli/bar.h"

static struct bar_state st_half(void)
{
	return (struct bar_state){
		.bytes = 1536ull << 20, .total = 3072ull << 20, .total_final = true,
		.rate = 100e6, .avg = 80e6, .entries_done = 12, .entries_total = 40,
		.show_entries = true,
	};
}

static void test_units(void **state)
{
	char b[32];
	(void)state;
	bar_fmt_bytes(0, b, sizeof(b));
	assert_string_equal(b, "0 B");
	bar_fmt_bytes(1023, b, sizeof(b));
	assert_string_equal(b, "1023 B");
	bar_fmt_bytes(1024, b, sizeof(b));
	assert_string_equal(b, "1.00 KiB");
	bar_fmt_bytes(1536ull << 20, b, sizeof(b));
	assert_string_equal(b, "1.50 GiB");
	bar_fmt_bytes(150ull << 20, b, sizeof(b));
	assert_string_equal(b, "150 MiB");
	bar_fmt_bytes(999ull << 20, b, sizeof(b));
	assert_string_equal(b, "999 MiB");
	bar_fmt_bytes(1000ull << 20, b, sizeof(b));
	assert_string_equal(b, "0.98 GiB"); /* never four digits */
	bar_fmt_bytes(UINT64_MAX, b, sizeof(b));
	assert_string_equal(b, "16.0 EiB");
	bar_fmt_rate(85.34e6, b, sizeof(b));
	assert_string_equal(b, "85.3 MB/s");
	bar_fmt_rate(1.25e9, b, sizeof(b));
	assert_string_equal(b, "1.25 GB/s");
	bar_fmt_rate(-1, b, sizeof(b));
	assert_string_equal(b, "0.0 MB/s");
}

static void test_eta(void **state)
{
	char b[32];
	(void)state;
	bar_fmt_eta(7.4, b, sizeof(b));
	assert_string_equal(b, "0:07");
	bar_fmt_eta(754, b, sizeof(b));
	assert_string_equal(b, "12:34");
	bar_fmt_eta(3 * 3600 + 4 * 60 + 5, b, sizeof(b));
	assert_string_equal(b, "3:04:05");
	bar_fmt_eta(-1, b, sizeof(b));
	assert_string_equal(b, "--:--");
	bar_fmt_eta(NAN, b, sizeof(b));
	assert_string_equal(b, "--:--");
	bar_fmt_eta(100.0 * 3600, b, sizeof(b));
	assert_string_equal(b, "--:--");
}

static void test_full_line(void **state)
{
	struct bar_state st = st_half();
	char out[512];
	(void)state;
	size_t n = bar_format(out, sizeof(out), 120, &st);
	assert_int_equal(n, strlen(out));
	assert_true(n <= 119);
	assert_non_null(strstr(out, " 50%"));
	assert_non_null(strstr(out, "[###"));
	assert_non_null(strstr(out, "1.50 GiB/3.00 GiB"));
	assert_non_null(strstr(out, "100.0 MB/s"));
	assert_non_null(strstr(out, "avg 80.0 MB/s"));
	/* 1.5 GiB left at 100 MB/s: 16.1 s */
	assert_non_null(strstr(out, "ETA 0:16"));
	assert_non_null(strstr(out, "12/40 entries"));
}

/* Every width fits, narrower lines keep the most useful fields. */
static void test_widths(void **state)
{
	struct bar_state st = st_half();
	char out[512];
	(void)state;
	for (unsigned w = 0; w <= 200; w++) {
		size_t n = bar_format(out, sizeof(out), w, &st);
		assert_int_equal(n, strlen(out));
		assert_true(w == 0 ? n == 0 : n <= w - 1);
		for (size_t i = 0; i < n; i++)
			assert_true(out[i] >= 0x20 && out[i] < 0x7f);
		if (w >= 20)
			assert_non_null(strstr(out, "1.50 GiB/3.00 GiB"));
		if (w >= 26)
			assert_non_null(strstr(out, "50%"));
	}
	bar_format(out, sizeof(out), 50, &st);
	assert_non_null(strstr(out, "ETA"));
	assert_null(strstr(out, "avg")); /* the least useful goes first */
	assert_int_equal(bar_format(out, sizeof(out), 7, &st), 0);
	/* a too small buffer still ends in a NUL */
	assert_true(bar_format(out, 10, 200, &st) < 10);
}

static void test_total_not_final(void **state)
{
	struct bar_state st = st_half();
	char out[512];
	(void)state;
	st.total_final = false;
	bar_format(out, sizeof(out), 120, &st);
	assert_null(strstr(out, "%"));
	assert_null(strstr(out, "ETA"));
	assert_null(strstr(out, "["));
	assert_non_null(strstr(out, "1.50 GiB/3.00 GiB+"));
	assert_non_null(strstr(out, "12/40+ entries"));
	/* stdin: nothing known but the bytes */
	st = (struct bar_state){ .bytes = 5000, .rate = 2e6, .avg = 1e6 };
	bar_format(out, sizeof(out), 80, &st);
	assert_string_equal(out, "4.88 KiB  2.0 MB/s  avg 1.0 MB/s");
}

static void test_name(void **state)
{
	struct bar_state st = st_half();
	char out[512], name[300];
	(void)state;
	st.current = "dir/big.iso";
	st.current_size = 10ull << 20; /* too small to name */
	bar_format(out, sizeof(out), 160, &st);
	assert_null(strstr(out, "big.iso"));
	st.current_size = BAR_NAME_MIN_SIZE;
	bar_format(out, sizeof(out), 160, &st);
	assert_non_null(strstr(out, "dir/big.iso"));
	/* long: cut in the middle, the end (the file's name) kept */
	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	memcpy(name + sizeof(name) - 9, "/END.iso", 8);
	st.current = name;
	size_t n = bar_format(out, sizeof(out), 140, &st);
	assert_true(n <= 139);
	assert_non_null(strstr(out, "..."));
	assert_non_null(strstr(out, "/END.iso"));
	assert_int_equal(out[n - 1], 'o');
	/* terminal controls and non-ASCII bytes never reach the screen */
	st.current = "x\033[2Jy\xc3\xa9z";
	bar_format(out, sizeof(out), 160, &st);
	assert_non_null(strstr(out, "x?[2Jy??z"));
}

/* The current rate: unknown while no byte moved (a login), the average
 * since the first bytes for its first time constant (so a steady copy
 * shows its rate at once, where an average from zero took 2-3 time
 * constants), then a moving average: a stall pulls it down, not to zero,
 * and a new rate is reached in time. */
static void test_rate(void **state)
{
	struct bar_rate r;
	double t = 0, v;

	(void)state;
	bar_rate_init(&r);
	assert_true(bar_rate_feed(&r, 0.2, 0) < 0);
	assert_true(bar_rate_feed(&r, 1.0, 0) < 0);
	/* 10 MB/s from 1.0 s on, sampled every 0.2 s. */
	uint64_t b = 0;
	for (t = 1.2; t < 1.25; t += 0.2) {
		b += 2000000;
		v = bar_rate_feed(&r, t, b);
	}
	assert_true(fabs(v - 10e6) < 1e3);
	for (int i = 0; i < 40; i++, t += 0.2) {
		b += 2000000;
		v = bar_rate_feed(&r, t, b);
		assert_true(fabs(v - 10e6) < 1e3);
	}
	v = bar_rate_feed(&r, t, b); /* a stall of 0.2 s */
	assert_true(v < 10e6 && v > 9e6);
	t += 0.2;
	for (int i = 0; i < 150; i++, t += 0.2) { /* 30 s at 1 MB/s: converged */
		b += 200000;
		v = bar_rate_feed(&r, t, b);
	}
	assert_true(fabs(v - 1e6) < 1e4);
	assert_true(bar_rate_feed(&r, t - 0.2, b) == v); /* no time passed */
	/* A first interval with bytes longer than the time constant (a
	 * control thread held up): its average, not a blend with nothing. */
	bar_rate_init(&r);
	assert_true(bar_rate_feed(&r, 0.25, 0) < 0);
	assert_true(fabs(bar_rate_feed(&r, 4.25, 400000000) - 100e6) < 1e3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_units),
		cmocka_unit_test(test_eta),
		cmocka_unit_test(test_full_line),
		cmocka_unit_test(test_widths),
		cmocka_unit_test(test_total_not_final),
		cmocka_unit_test(test_name),
		cmocka_unit_test(test_rate),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
