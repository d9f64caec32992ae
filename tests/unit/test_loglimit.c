/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for loglimit: the first event of a key in its window is
 * logged, the others are counted and reported once when the window ends;
 * the table is bounded. The clock is injected. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "sys/loglimit.h"

#define S 1000000000ull            /* one second in ns */
#define WINDOW (5 * S)

/* What the report callback saw. */
struct seen {
	unsigned calls;
	char key[8][LOGLIMIT_MAX_KEY];
	unsigned long more[8];
};

static void record(void *arg, const char *key, unsigned long more)
{
	struct seen *s = arg;

	assert_true(s->calls < 8);
	snprintf(s->key[s->calls], sizeof(s->key[0]), "%s", key != NULL ? key : "(others)");
	s->more[s->calls] = more;
	s->calls++;
}

static void test_first_logged_rest_summarised(void **state)
{
	struct seen s = { 0 };
	struct loglimit *l = loglimit_new(4, 100, WINDOW, record, &s);
	uint64_t t0 = 1000 * S;

	(void)state;
	assert_non_null(l);
	assert_true(loglimit_admit(l, "10.0.0.1", t0));
	for (unsigned i = 1; i <= 199; i++)
		assert_false(loglimit_admit(l, "10.0.0.1", t0 + i * (S / 100)));
	/* Not yet over: nothing reported, and the next end is 1 s away. */
	assert_int_equal(loglimit_flush(l, t0 + 4 * S), S);
	assert_int_equal(s.calls, 0);
	/* Over: one report of the 199 counted. */
	assert_int_equal(loglimit_flush(l, t0 + WINDOW), UINT64_MAX);
	assert_int_equal(s.calls, 1);
	assert_string_equal(s.key[0], "10.0.0.1");
	assert_int_equal(s.more[0], 199);
	/* Reported once only, and a new window opens with a logged event. */
	assert_int_equal(loglimit_flush(l, t0 + 20 * S), UINT64_MAX);
	assert_int_equal(s.calls, 1);
	assert_true(loglimit_admit(l, "10.0.0.1", t0 + 21 * S));
	loglimit_free(l);
}

static void test_single_event_no_summary(void **state)
{
	struct seen s = { 0 };
	struct loglimit *l = loglimit_new(4, 100, WINDOW, record, &s);

	(void)state;
	assert_true(loglimit_admit(l, "a", 0));
	/* A window ends inside admit too: the next event is logged again. */
	assert_true(loglimit_admit(l, "a", WINDOW));
	assert_int_equal(loglimit_flush(l, 3 * WINDOW), UINT64_MAX);
	assert_int_equal(s.calls, 0);
	loglimit_free(l);
}

static void test_keys_apart(void **state)
{
	struct seen s = { 0 };
	struct loglimit *l = loglimit_new(4, 100, WINDOW, record, &s);

	(void)state;
	assert_true(loglimit_admit(l, "a", 0));
	assert_false(loglimit_admit(l, "a", 1));
	/* Another key is not held back by the first, and has its own window. */
	assert_true(loglimit_admit(l, "b", 2 * S));
	assert_false(loglimit_admit(l, "b", 2 * S + 1));
	assert_false(loglimit_admit(l, "b", 2 * S + 2));
	assert_int_equal(loglimit_flush(l, WINDOW), 2 * S);
	assert_int_equal(s.calls, 1);
	assert_string_equal(s.key[0], "a");
	assert_int_equal(s.more[0], 1);
	assert_int_equal(loglimit_flush(l, WINDOW + 2 * S), UINT64_MAX);
	assert_int_equal(s.calls, 2);
	assert_string_equal(s.key[1], "b");
	assert_int_equal(s.more[1], 2);
	loglimit_free(l);
}

static void test_table_bounded(void **state)
{
	struct seen s = { 0 };
	struct loglimit *l = loglimit_new(2, 100, WINDOW, record, &s);

	(void)state;
	assert_true(loglimit_admit(l, "a", 0));
	assert_false(loglimit_admit(l, "a", 1));
	assert_true(loglimit_admit(l, "b", 2));
	/* Full: "a", whose window opened first, is reported early and goes. */
	assert_true(loglimit_admit(l, "c", 3));
	assert_int_equal(s.calls, 1);
	assert_string_equal(s.key[0], "a");
	assert_int_equal(s.more[0], 1);
	assert_false(loglimit_admit(l, "b", 4));
	assert_false(loglimit_admit(l, "c", 5));
	/* "a" comes back: logged, pushing out "b" (counted 1). */
	assert_true(loglimit_admit(l, "a", 6));
	assert_int_equal(s.calls, 2);
	assert_string_equal(s.key[1], "b");
	assert_int_equal(s.more[1], 1);
	/* At exit everything is reported. */
	assert_int_equal(loglimit_flush(l, UINT64_MAX), UINT64_MAX);
	assert_int_equal(s.calls, 3);
	assert_string_equal(s.key[2], "c");
	assert_int_equal(s.more[2], 1);
	loglimit_free(l);
}

static void test_long_key_and_bad_args(void **state)
{
	struct seen s = { 0 };
	char key[200];
	struct loglimit *l = loglimit_new(1, 100, WINDOW, record, &s);

	(void)state;
	memset(key, 'x', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	assert_true(loglimit_admit(l, key, 0));
	assert_false(loglimit_admit(l, key, 1));
	assert_int_equal(loglimit_flush(l, UINT64_MAX), UINT64_MAX);
	assert_int_equal(s.calls, 1);
	assert_int_equal(strlen(s.key[0]), LOGLIMIT_MAX_KEY - 1);
	loglimit_free(l);
	loglimit_free(NULL);
	assert_null(loglimit_new(0, 100, WINDOW, record, &s));
	assert_null(loglimit_new(1, 100, 0, record, &s));
	assert_null(loglimit_new(1, 100, WINDOW, NULL, &s));
	assert_null(loglimit_new(1, 0, WINDOW, record, &s));
}

/* A flood from ever new keys: only budget of them are logged in a window,
 * the rest are counted together and reported once, with no key; then a
 * new window has its budget again. */
static void test_budget_across_keys(void **state)
{
	struct seen s = { 0 };
	struct loglimit *l = loglimit_new(256, 3, WINDOW, record, &s);
	unsigned logged = 0;
	char key[32];

	(void)state;
	assert_non_null(l);
	for (unsigned i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "10.0.%u.%u", i / 250, i % 250);
		logged += loglimit_admit(l, key, i * (S / 1000));
	}
	assert_int_equal(logged, 3);
	assert_int_equal(s.calls, 0);
	/* A key already in the table is still only counted on its own. */
	assert_false(loglimit_admit(l, "10.0.0.0", 2 * S));
	/* The global window ends 5 s after the first key opened its own. */
	assert_int_equal(loglimit_flush(l, 4 * S), S);
	/* Then 10.0.0.1's, 1 ms later, and 10.0.0.2's, 2 ms later. */
	assert_int_equal(loglimit_flush(l, WINDOW), S / 1000);
	assert_int_equal(s.calls, 2);
	assert_string_equal(s.key[0], "(others)");
	assert_int_equal(s.more[0], 997);
	assert_string_equal(s.key[1], "10.0.0.0");
	assert_int_equal(s.more[1], 1);
	assert_int_equal(loglimit_flush(l, WINDOW + 2 * S / 1000), UINT64_MAX);
	assert_int_equal(s.calls, 2);
	/* A new window: the budget is whole again. */
	assert_true(loglimit_admit(l, "10.9.9.9", WINDOW + S));
	assert_true(loglimit_admit(l, "10.9.9.8", WINDOW + S + 1));
	assert_true(loglimit_admit(l, "10.9.9.7", WINDOW + S + 2));
	assert_false(loglimit_admit(l, "10.9.9.6", WINDOW + S + 3));
	assert_int_equal(loglimit_flush(l, UINT64_MAX), UINT64_MAX);
	assert_int_equal(s.calls, 3);
	assert_string_equal(s.key[2], "(others)");
	assert_int_equal(s.more[2], 1);
	loglimit_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_logged_rest_summarised),
		cmocka_unit_test(test_single_event_no_summary),
		cmocka_unit_test(test_keys_apart),
		cmocka_unit_test(test_table_bounded),
		cmocka_unit_test(test_long_key_and_bad_args),
		cmocka_unit_test(test_budget_across_keys),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
