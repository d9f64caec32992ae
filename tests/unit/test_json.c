// SPDX-License-Identifier: Apache-2.0
/* test_json: the JSON writer (src/cli/json.c): structure, numbers, and the
 * escaping of quotes, backslashes, control characters and bytes that are
 * not UTF-8. */
#include "testutil.h"

#include <math.h>

#include "cli/json.h"

/* What f holds, NUL-terminated, in buf[cap]. */
static const char *json_text(FILE *f, char *buf, size_t cap)
{
	long n = ftell(f);
	assert_true(n >= 0 && (size_t)n < cap);
	rewind(f);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	return buf;
}

static const char *escaped(const char *s, char *buf, size_t cap)
{
	FILE *f = tmpfile();
	assert_non_null(f);
	json_write_string(f, s);
	json_text(f, buf, cap);
	fclose(f);
	return buf;
}

static void test_strings(void **state)
{
	char b[256];
	(void)state;
	assert_string_equal(escaped("plain", b, sizeof(b)), "\"plain\"");
	assert_string_equal(escaped("a\"b\\c/d", b, sizeof(b)), "\"a\\\"b\\\\c/d\"");
	assert_string_equal(escaped("\n\t\r\b\f", b, sizeof(b)), "\"\\n\\t\\r\\b\\f\"");
	assert_string_equal(escaped("\x01\x1f\x7f", b, sizeof(b)), "\"\\u0001\\u001f\\u007f\"");
	assert_string_equal(escaped("\033[2J", b, sizeof(b)), "\"\\u001b[2J\"");
	/* valid UTF-8 passes as it is */
	assert_string_equal(escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", b, sizeof(b)),
			    "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
	/* each byte that is not UTF-8 becomes U+FFFD */
	assert_string_equal(escaped("a\xff" "b", b, sizeof(b)), "\"a\\ufffdb\"");
	assert_string_equal(escaped("\xe9t\xe9", b, sizeof(b)), "\"\\ufffdt\\ufffd\"");
	assert_string_equal(escaped("\xc3", b, sizeof(b)), "\"\\ufffd\"");          /* cut short */
	assert_string_equal(escaped("\xc0\xaf", b, sizeof(b)), "\"\\ufffd\\ufffd\""); /* overlong */
	assert_string_equal(escaped("\xed\xa0\x80", b, sizeof(b)),
			    "\"\\ufffd\\ufffd\\ufffd\"");                               /* surrogate */
	assert_string_equal(escaped("\xf4\x90\x80\x80", b, sizeof(b)),
			    "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");                       /* > U+10FFFF */
	assert_string_equal(escaped("", b, sizeof(b)), "\"\"");
}

static void test_structure(void **state)
{
	char b[512];
	struct json j;
	FILE *f = tmpfile();
	(void)state;
	assert_non_null(f);
	json_init(&j, f);
	json_object(&j, NULL);
	json_str(&j, "s", "x");
	json_str(&j, "n", NULL);
	json_u64(&j, "big", UINT64_MAX);
	json_int(&j, "neg", -3);
	json_num(&j, "d", 1.5);
	json_num(&j, "nan", NAN);
	json_num(&j, "inf", INFINITY);
	json_bool(&j, "t", true);
	json_null(&j, "z");
	json_array(&j, "a");
	json_u64(&j, NULL, 1);
	json_object(&j, NULL);
	json_close(&j);
	json_array(&j, NULL);
	json_close(&j);
	json_close(&j);
	json_object(&j, "k\"ey");
	json_close(&j);
	json_close(&j);
	assert_int_equal(json_end(&j), 0);
	assert_string_equal(json_text(f, b, sizeof(b)),
			    "{\"s\":\"x\",\"n\":null,\"big\":18446744073709551615,\"neg\":-3,"
			    "\"d\":1.500,\"nan\":null,\"inf\":null,\"t\":true,\"z\":null,"
			    "\"a\":[1,{},[]],\"k\\\"ey\":{}}\n");
	fclose(f);
}

static void test_misuse(void **state)
{
	struct json j;
	FILE *f = tmpfile();
	(void)state;
	assert_non_null(f);
	json_init(&j, f);
	json_object(&j, NULL);
	assert_int_equal(json_end(&j), -1); /* left open */
	json_init(&j, f);
	json_close(&j);
	assert_int_equal(json_end(&j), -1); /* closed what was not open */
	json_init(&j, f);
	for (int i = 0; i < JSON_MAX_DEPTH + 2; i++)
		json_array(&j, NULL);
	assert_int_equal(json_end(&j), -1); /* too deep */
	fclose(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_structure),
		cmocka_unit_test(test_misuse),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
