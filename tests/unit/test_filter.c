/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for filter: every pattern form pcopy(1) documents (last
 * component, anchored, tails with '/', "**", directories only, '?', sets,
 * escapes), first match wins, the rule shapes filter_add refuses, and that a
 * pattern built to make a backtracking matcher explode is matched at once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "pipeline/filter.h"
#include "wire/proto.h"

/* A filter of the given rules, NULL-terminated. */
static struct filter *make(const char *rule, ...)
{
	struct filter *f = filter_new();
	va_list ap;

	assert_non_null(f);
	va_start(ap, rule);
	for (const char *r = rule; r != NULL; r = va_arg(ap, const char *))
		assert_int_equal(filter_add(f, r), 0);
	va_end(ap);
	return f;
}

#define EXCL(f, path) assert_true(filter_excludes((f), (path), false))
#define KEEP(f, path) assert_false(filter_excludes((f), (path), false))

static void test_last_component(void **state)
{
	(void)state;
	struct filter *f = make("- *.o", NULL);

	EXCL(f, "a.o");
	EXCL(f, "src/a.o");
	EXCL(f, "src/deep/er/x.o");
	KEEP(f, "src/a.c");
	KEEP(f, "src/a.o/b"); /* the last component is "b" */
	KEEP(f, "a.oo");
	/* '*' matches an empty run, and a dot first */
	EXCL(f, "top/.o");
	filter_free(f);
}

static void test_anchored(void **state)
{
	(void)state;
	struct filter *f = make("- /top/build", NULL);

	EXCL(f, "top/build");
	KEEP(f, "top/src/build"); /* anchored: only from the first component */
	KEEP(f, "other/top/build");
	KEEP(f, "top/build/x"); /* a whole path: "x" below is left to the walk */
	filter_free(f);
}

static void test_tail_with_slash(void **state)
{
	(void)state;
	struct filter *f = make("- cache/*.tmp", NULL);

	EXCL(f, "cache/a.tmp");
	EXCL(f, "top/cache/a.tmp");
	EXCL(f, "top/x/cache/b.tmp");
	KEEP(f, "top/xcache/a.tmp"); /* a tail starts at a component */
	KEEP(f, "top/cache/sub/a.tmp"); /* '*' never crosses '/' */
	filter_free(f);
}

static void test_starstar(void **state)
{
	(void)state;
	struct filter *f = make("- /top/**/*.log", NULL);

	EXCL(f, "top/a/b.log");
	EXCL(f, "top/a/b/c/d.log");
	KEEP(f, "top/d.log"); /* "**" matches "a", "a/b": the '/' around it stay */
	KEEP(f, "other/a/d.log");
	filter_free(f);

	f = make("- **.bak", NULL); /* "**" makes it a whole-path pattern */
	EXCL(f, "top/x.bak");
	EXCL(f, "top/a/b/x.bak");
	KEEP(f, "top/x.bak2");
	filter_free(f);

	f = make("- a***b", NULL); /* "***" is "**" */
	EXCL(f, "a/x/b");
	filter_free(f);

	f = make("- a*b", NULL);
	KEEP(f, "a/x/b");
	EXCL(f, "top/axxb");
	filter_free(f);
}

static void test_dir_only(void **state)
{
	(void)state;
	struct filter *f = make("- build/", NULL);

	assert_true(filter_excludes(f, "top/build", true));
	assert_false(filter_excludes(f, "top/build", false)); /* a file named build */
	assert_false(filter_excludes(f, "top/build/x", false));
	filter_free(f);

	f = make("- /top/", NULL);
	assert_true(filter_excludes(f, "top", true));
	assert_false(filter_excludes(f, "top/x", true));
	filter_free(f);
}

static void test_one_and_sets(void **state)
{
	(void)state;
	struct filter *f = make("- file?.txt", "- [0-9]*", "- x[!a-c]", "- y[^a]z", "- []]",
				"- [ab", NULL);

	EXCL(f, "t/file1.txt");
	KEEP(f, "t/file.txt");
	KEEP(f, "t/file12.txt");
	EXCL(f, "t/9lives");
	KEEP(f, "t/lives9");
	EXCL(f, "t/xd");
	KEEP(f, "t/xb");
	EXCL(f, "t/ybz");
	KEEP(f, "t/yaz");
	EXCL(f, "t/]");      /* a ']' first in a set is a member */
	EXCL(f, "t/[ab");    /* a '[' without its ']' is a byte */
	KEEP(f, "t/a");
	filter_free(f);

	/* '?' and a negated set never match '/' */
	f = make("- /t?u", "- /v[!x]w", NULL);
	KEEP(f, "t/u");
	KEEP(f, "v/w");
	EXCL(f, "tqu");
	filter_free(f);
}

static void test_escape(void **state)
{
	(void)state;
	struct filter *f = make("- a\\*b", "- \\[x]", NULL);

	EXCL(f, "t/a*b");
	KEEP(f, "t/axb");
	EXCL(f, "t/[x]");
	KEEP(f, "t/x");
	filter_free(f);
}

static void test_first_match_wins(void **state)
{
	(void)state;
	struct filter *f = make("+ keep.o", "- *.o", NULL);

	KEEP(f, "t/keep.o");
	EXCL(f, "t/other.o");
	KEEP(f, "t/x.c");
	filter_free(f);

	f = make("- *.o", "+ keep.o", NULL);
	EXCL(f, "t/keep.o"); /* the exclude came first */
	filter_free(f);

	/* include everything that is a directory, and then leave out the rest */
	f = make("+ */", "+ *.c", "- *", NULL);
	assert_false(filter_excludes(f, "t/sub", true));
	KEEP(f, "t/sub/a.c");
	EXCL(f, "t/sub/a.h");
	filter_free(f);
}

static void test_empty_and_null(void **state)
{
	(void)state;
	struct filter *f = filter_new();

	assert_non_null(f);
	assert_int_equal(filter_count(f), 0);
	KEEP(f, "anything");
	filter_free(f);
	assert_false(filter_excludes(NULL, "anything", true));
	assert_int_equal(filter_count(NULL), 0);
	filter_free(NULL);

	/* "- /" is an anchored, directory-only empty pattern: it matches nothing */
	f = make("- /", NULL);
	assert_false(filter_excludes(f, "t", true));
	filter_free(f);
}

/* The shapes the wire refuses, refused here too, and the largest rule
 * taken. */
static void test_bad_rules(void **state)
{
	(void)state;
	static const char *const bad[] = { "", "-", "- ", "+ ", "* x", "-x", "+\tx", " - x" };
	struct filter *f = filter_new();
	char big[PROTO_MAX_FILTER + 2];

	assert_non_null(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(filter_add(f, bad[i]), -EINVAL);
	memset(big, 'a', sizeof(big) - 1);
	big[0] = '-';
	big[1] = ' ';
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(filter_add(f, big), -EINVAL); /* PROTO_MAX_FILTER + 1 bytes */
	big[PROTO_MAX_FILTER] = '\0';
	assert_int_equal(filter_add(f, big), 0);
	assert_int_equal(filter_count(f), 1);
	filter_free(f);
}

/* "*a*a*a...*b" against a long run of 'a': exponential for a backtracking
 * matcher, a few million steps here. Matched (and not) well inside a second
 * even under a sanitizer. */
static void test_no_blowup(void **state)
{
	(void)state;
	char rule[PROTO_MAX_FILTER + 1], path[PROTO_MAX_NAME + 1];
	size_t n = 2;
	struct timespec t0, t1;

	rule[0] = '-';
	rule[1] = ' ';
	while (n + 3 < 200) {
		rule[n++] = '*';
		rule[n++] = 'a';
	}
	rule[n++] = '*';
	rule[n++] = 'b';
	rule[n] = '\0';
	memset(path, 'a', PROTO_MAX_NAME);
	path[PROTO_MAX_NAME] = '\0';
	struct filter *f = make(rule, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 10; i++)
		KEEP(f, path);
	path[PROTO_MAX_NAME - 1] = 'b';
	EXCL(f, path);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (s > 5.0)
		fail_msg("11 matches took %.2f s", s);
	filter_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_last_component),
		cmocka_unit_test(test_anchored),
		cmocka_unit_test(test_tail_with_slash),
		cmocka_unit_test(test_starstar),
		cmocka_unit_test(test_dir_only),
		cmocka_unit_test(test_one_and_sets),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_first_match_wins),
		cmocka_unit_test(test_empty_and_null),
		cmocka_unit_test(test_bad_rules),
		cmocka_unit_test(test_no_blowup),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
