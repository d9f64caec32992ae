/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for prune: the names each directory of a walk keeps, nested
 * directories closed and taken in order, a DIR_END that closes nothing, an
 * entry out of place, a frame dropped when its DIR_END is passed over, the
 * byte bound (-E2BIG), many names in one directory, and a directory spared
 * by an entry that failed, while its frame is open and once it is closed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/prune.h"

static uint32_t next_id;

/* Notes an entry of the given type and path, with the next id; returns
 * prune_note's result. */
static int note(struct prune *p, uint8_t type, const char *path)
{
	static struct proto_entry e;

	memset(&e, 0, sizeof(e));
	e.type = type;
	e.id = next_id++;
	snprintf(e.path, sizeof(e.path), "%s", path);
	return prune_note(p, &e);
}

#define DIR(p, path) assert_int_equal(note((p), PROTO_ENT_DIR, (path)), 0)
#define REG(p, path) assert_int_equal(note((p), PROTO_ENT_REG, (path)), 0)
#define END(p, path) assert_int_equal(note((p), PROTO_ENT_DIR_END, (path)), 0)

static void test_walk(void **state)
{
	(void)state;
	struct prune *p = prune_new(1u << 20);
	struct prune_dir *d;

	next_id = 0;
	DIR(p, "top");          /* 0 */
	REG(p, "top/a");        /* 1 */
	DIR(p, "top/sub");      /* 2 */
	REG(p, "top/sub/x");    /* 3 */
	note(p, PROTO_ENT_SYMLINK, "top/sub/l"); /* 4 */
	END(p, "top/sub");      /* 5 */
	REG(p, "top/b");        /* 6 */
	END(p, "top");          /* 7 */
	assert_true(prune_bytes(p) > 0);

	d = prune_take(p, 5, "top/sub");
	assert_non_null(d);
	assert_true(prune_dir_has(d, "x"));
	assert_true(prune_dir_has(d, "l"));
	assert_false(prune_dir_has(d, "a"));
	assert_false(prune_dir_has(d, "sub"));
	prune_dir_free(d);
	d = prune_take(p, 7, "top");
	assert_non_null(d);
	assert_true(prune_dir_has(d, "a"));
	assert_true(prune_dir_has(d, "b"));
	assert_true(prune_dir_has(d, "sub"));
	assert_false(prune_dir_has(d, "x"));
	assert_false(prune_dir_has(d, "top"));
	prune_dir_free(d);
	assert_int_equal(prune_bytes(p), 0);
	prune_free(p);
}

/* prune_spare marks the failed entry's directory only, open or closed. */
static void test_spare(void **state)
{
	(void)state;
	struct prune *p = prune_new(1u << 20);
	struct prune_dir *d;

	next_id = 0;
	DIR(p, "top");          /* 0 */
	DIR(p, "top/sub");      /* 1 */
	REG(p, "top/sub/x");    /* 2 */
	END(p, "top/sub");      /* 3 */
	REG(p, "top/a");        /* 4 */
	prune_spare(p, "top/sub/x"); /* closed, queued */
	prune_spare(p, "top/a");     /* open */
	prune_spare(p, "nowhere/y"); /* no frame: nothing */
	prune_spare(p, "top");       /* no parent: nothing */
	END(p, "top");          /* 5 */
	d = prune_take(p, 3, "top/sub");
	assert_non_null(d);
	assert_true(prune_dir_spared(d));
	prune_dir_free(d);
	d = prune_take(p, 5, "top");
	assert_non_null(d);
	assert_true(prune_dir_spared(d));
	prune_dir_free(d);
	DIR(p, "other");        /* 6 */
	REG(p, "other/z");      /* 7 */
	END(p, "other");        /* 8 */
	d = prune_take(p, 8, "other");
	assert_non_null(d);
	assert_false(prune_dir_spared(d));
	prune_dir_free(d);
	prune_free(p);
}

/* An empty directory keeps nothing; a DIR_END with no open frame, and a
 * take for it, give nothing; an entry whose parent has no frame is
 * ignored; a frame whose DIR_END the take passes over is dropped. */
static void test_broken_order(void **state)
{
	(void)state;
	struct prune *p = prune_new(1u << 20);
	struct prune_dir *d;

	next_id = 0;
	DIR(p, "e");            /* 0 */
	END(p, "e");            /* 1 */
	END(p, "nowhere");      /* 2: closes nothing */
	REG(p, "other/x");      /* 3: no frame for "other" */
	DIR(p, "t");            /* 4 */
	DIR(p, "t/u");          /* 5 */
	REG(p, "t/y");          /* 6: its parent is below the top frame */
	END(p, "t/u");          /* 7 */
	END(p, "t");            /* 8 */
	d = prune_take(p, 1, "e");
	assert_non_null(d);
	assert_false(prune_dir_has(d, "anything"));
	prune_dir_free(d);
	assert_null(prune_take(p, 2, "nowhere"));
	/* 7 is passed over: taking 8 drops it and gives 8's frame */
	d = prune_take(p, 8, "t");
	assert_non_null(d);
	assert_true(prune_dir_has(d, "y"));
	assert_true(prune_dir_has(d, "u"));
	prune_dir_free(d);
	/* the path must be the DIR_END's too */
	DIR(p, "v");            /* 9 */
	END(p, "v");            /* 10 */
	assert_null(prune_take(p, 10, "w"));
	assert_int_equal(prune_bytes(p), 0);
	prune_free(p);
}

/* A directory of many names: every one kept, none other. */
static void test_many(void **state)
{
	(void)state;
	struct prune *p = prune_new(64u << 20);
	char path[64];

	next_id = 0;
	DIR(p, "big");
	for (int i = 0; i < 100000; i++) {
		snprintf(path, sizeof(path), "big/file-%d", i);
		REG(p, path);
	}
	REG(p, "big/file-7"); /* twice: still one name */
	END(p, "big");
	struct prune_dir *d = prune_take(p, next_id - 1, "big");
	assert_non_null(d);
	for (int i = 0; i < 100000; i++) {
		snprintf(path, sizeof(path), "file-%d", i);
		if (!prune_dir_has(d, path))
			fail_msg("%s lost", path);
	}
	assert_false(prune_dir_has(d, "file-100000"));
	assert_false(prune_dir_has(d, "file-"));
	prune_dir_free(d);
	prune_free(p);
}

/* The byte bound: names past it fail with -E2BIG. */
static void test_bound(void **state)
{
	(void)state;
	struct prune *p = prune_new(64u << 10);
	char path[300];
	int ret = 0, i;

	next_id = 0;
	DIR(p, "d");
	memset(path, 'n', sizeof(path));
	memcpy(path, "d/", 2);
	for (i = 0; i < 10000 && ret == 0; i++) {
		snprintf(path + 250, 20, "%d", i);
		ret = note(p, PROTO_ENT_REG, path);
	}
	assert_int_equal(ret, -E2BIG);
	assert_true(i > 100); /* 64 KiB holds some hundred 250-byte names */
	prune_free(p);
	prune_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_broken_order),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_bound),
		cmocka_unit_test(test_spare),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
