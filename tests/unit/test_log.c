/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for log: what log_escape lets through and what it escapes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <string.h>

#include "sys/log.h"

static void expect_escaped(const char *in, const char *want)
{
	char out[256];

	log_escape(out, sizeof(out), in);
	assert_string_equal(out, want);
}

/* Text, and valid UTF-8 however far from ASCII, pass as they are. */
static void test_plain_and_utf8(void **state)
{
	(void)state;
	expect_escaped("", "");
	expect_escaped("pcopy: session from 10.0.0.1 done", "pcopy: session from 10.0.0.1 done");
	expect_escaped("caf\xc3\xa9 \xc4\x80 \xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0",
		       "caf\xc3\xa9 \xc4\x80 \xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0");
}

/* C0 controls and DEL; C1 (U+0080..U+009F) raw or in UTF-8. */
static void test_controls(void **state)
{
	(void)state;
	expect_escaped("a\nb\rc\x1b[2J\x7f", "a\\x0ab\\x0dc\\x1b[2J\\x7f");
	expect_escaped("x\x9b" "31m", "x\\x9b31m");
	expect_escaped("x\xc2\x9b" "31m", "x\\xc2\\x9b31m");
	expect_escaped("\xc2\x80\xc2\x9f", "\\xc2\\x80\\xc2\\x9f");
}

/* Bytes that are not UTF-8: each escaped alone, and what follows is read
 * afresh. */
static void test_invalid_utf8(void **state)
{
	(void)state;
	expect_escaped("\xff\xfe", "\\xff\\xfe");
	expect_escaped("\x80" "a", "\\x80a");                /* stray continuation */
	expect_escaped("\xc3" "a", "\\xc3a");                /* truncated */
	expect_escaped("\xe2\x82", "\\xe2\\x82");            /* truncated at the end */
	expect_escaped("\xc0\xaf", "\\xc0\\xaf");            /* overlong '/' */
	expect_escaped("\xe0\x80\xaf", "\\xe0\\x80\\xaf");   /* overlong */
	expect_escaped("\xed\xa0\x80", "\\xed\\xa0\\x80");   /* a surrogate */
	expect_escaped("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* past U+10FFFF */
}

/* Truncation keeps the output terminated and never splits an escape or
 * a character. */
static void test_truncation(void **state)
{
	char out[6];

	(void)state;
	log_escape(out, sizeof(out), "ab\ncd");
	assert_string_equal(out, "ab");
	log_escape(out, sizeof(out), "abc\xe2\x82\xac");
	assert_string_equal(out, "abc");
	log_escape(out, 1, "abc");
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_and_utf8),
		cmocka_unit_test(test_controls),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_truncation),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
