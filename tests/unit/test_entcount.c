/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for entcount: a tree's entries as announced on the wire (a
 * DIR_END after each directory's contents) counted as the user counts
 * them, done marks that move by ranges or one by one, and ids that wrap
 * around the window. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "pipeline/entcount.h"

/* t/ (a/, b/ (c/ (f)), g): DIR t, DIR a, END a, DIR b, DIR c, REG f,
 * END c, END b, REG g, END t: 10 ids, 6 entries. */
static const uint8_t tree[] = {
	PROTO_ENT_DIR, PROTO_ENT_DIR, PROTO_ENT_DIR_END, PROTO_ENT_DIR, PROTO_ENT_DIR,
	PROTO_ENT_REG, PROTO_ENT_DIR_END, PROTO_ENT_DIR_END, PROTO_ENT_REG, PROTO_ENT_DIR_END,
};

static void test_tree(void **state)
{
	static struct entcount c;

	(void)state;
	entcount_init(&c);
	for (uint32_t id = 0; id < 10; id++)
		entcount_announce(&c, id, tree[id]);
	assert_int_equal(entcount_shown_total(&c, 10), 6);
	assert_int_equal(entcount_shown_done(&c, 0), 0);
	entcount_done(&c, 0, 3);   /* t, a and a's end */
	assert_int_equal(entcount_shown_done(&c, 3), 2);
	entcount_done(&c, 3, 4);
	assert_int_equal(entcount_shown_done(&c, 4), 3);
	entcount_done(&c, 4, 10);
	assert_int_equal(entcount_shown_done(&c, 10), 6);
}

/* Ids far past the window: a slot reused by an entry of another type
 * counts as that type. */
static void test_wrap(void **state)
{
	static struct entcount c;
	uint32_t base = 3 * PROTO_MAX_INFLIGHT - 5, n = 0;

	(void)state;
	entcount_init(&c);
	/* Counted from base on, as if the ids before had been no DIR_ENDs
	 * (only the counts of DIR_ENDs are kept). */
	for (uint32_t i = 0; i < 10; i++)
		entcount_announce(&c, base + i, tree[i]);
	entcount_done(&c, base, base + 10);
	for (uint32_t i = 0; i < 10; i++)
		n += tree[i] != PROTO_ENT_DIR_END;
	assert_int_equal(entcount_shown_done(&c, base + 10) - base, n);
	/* The same slots again, now all files. */
	for (uint32_t i = 0; i < 10; i++)
		entcount_announce(&c, base + PROTO_MAX_INFLIGHT + i, PROTO_ENT_REG);
	uint64_t before = c.ends_done;
	entcount_done(&c, base + PROTO_MAX_INFLIGHT, base + PROTO_MAX_INFLIGHT + 10);
	assert_int_equal(c.ends_done, before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tree),
		cmocka_unit_test(test_wrap),
	};

	return testutil_status(cmocka_run_group_tests_name("entcount", tests, NULL, NULL));
}
