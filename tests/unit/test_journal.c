/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for journal: the format, every check journal_parse and
 * journal_load make (a stale journal told from a damaged one), the bound
 * on its bitmap, marks that reach the disk, and the names beside a file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/journal.h"

/* 10 blocks of 64 KiB and a short one: 11 bits, 2 bytes of bitmap. */
static const struct journal_id id = { 65536, 10 * 65536 + 100, 1700000000, 123456789 };

/* A journal for id in a fresh unlinked file, blocks 0, 3 and 10 marked;
 * returns its fd (the journal is freed, the fd left open for reading). */
static int make_journal(uint8_t *bytes, size_t *len)
{
	char path[] = "/tmp/pcopy-test-journal-XXXXXX";
	int fd = mkstemp(path);
	struct journal *j;

	assert_true(fd >= 0);
	assert_int_equal(unlink(path), 0);
	int keep = dup(fd);
	assert_int_equal(journal_create(fd, &id, &j), 0);
	assert_int_equal(j->nblocks, 11);
	assert_int_equal(journal_mark(j, 0), 0);
	assert_int_equal(journal_mark(j, 3), 0);
	assert_int_equal(journal_mark(j, 10), 0);
	assert_int_equal(journal_mark(j, 3), 0); /* twice: once counted */
	assert_int_equal(j->ndone, 3);
	assert_true(journal_has(j, 3));
	assert_false(journal_has(j, 4));
	assert_false(journal_has(j, 11)); /* past the end */
	journal_free(j);
	*len = (size_t)pread(keep, bytes, 4096, 0);
	return keep;
}

static void test_format(void **state)
{
	uint8_t b[4096];
	size_t len;
	int fd = make_journal(b, &len);

	(void)state;
	close(fd);
	assert_int_equal(len, JOURNAL_HDR_LEN + 2);
	assert_int_equal(journal_len(&id), JOURNAL_HDR_LEN + 2);
	assert_memory_equal(b, "PCOPYJRN\0\0\0\x01\0\x01\0\0", 16);
	assert_memory_equal(b + 16, "\0\0\0\0\0\x0a\0\x64", 8);
	assert_memory_equal(b + 24, "\0\0\0\0\x65\x53\xf1\x00" "\x07\x5b\xcd\x15" "\0\0\0\0", 16);
	assert_int_equal(b[48], 0x09); /* blocks 0 and 3 */
	assert_int_equal(b[49], 0x04); /* block 10 */
}

static void test_parse(void **state)
{
	uint8_t b[4096], c[4096], bits[2];
	uint64_t ndone;
	const char *why = NULL;
	size_t len;
	int fd = make_journal(b, &len);

	(void)state;
	close(fd);
	assert_int_equal(journal_parse(b, len, &id, bits, &ndone, &why), JOURNAL_OK);
	assert_int_equal(ndone, 3);
	assert_int_equal(bits[0], 0x09);

	/* Another version of the source, or another block size: stale. */
	struct journal_id other[] = { id, id, id, id };
	other[0].size++;
	other[1].mtime_s++;
	other[2].mtime_ns++;
	other[3].block = 131072;
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(journal_parse(b, len, &other[i], bits, &ndone, &why),
				 JOURNAL_STALE);

	/* Damaged or planted: bad. Each header byte matters. */
	for (size_t i = 0; i < JOURNAL_HDR_LEN; i++) {
		memcpy(c, b, len);
		c[i] ^= 0x40;
		why = NULL;
		assert_int_not_equal(journal_parse(c, len, &id, bits, &ndone, &why), JOURNAL_OK);
		assert_non_null(why);
	}
	memcpy(c, b, len);
	c[0] = 'X';
	assert_int_equal(journal_parse(c, len, &id, bits, &ndone, &why), JOURNAL_BAD);
	assert_string_equal(why, "is not a pcopy journal");
	assert_int_equal(journal_parse(b, JOURNAL_HDR_LEN - 1, &id, bits, &ndone, &why),
			 JOURNAL_BAD);
	assert_int_equal(journal_parse(b, len - 1, &id, bits, &ndone, &why), JOURNAL_BAD);
	assert_string_equal(why, "has the wrong length");
	memcpy(c, b, len);
	c[len] = 0;
	assert_int_equal(journal_parse(c, len + 1, &id, bits, &ndone, &why), JOURNAL_BAD);
	/* Bits 11..15 of the last byte name blocks past the end. */
	memcpy(c, b, len);
	c[49] |= 0x08;
	assert_int_equal(journal_parse(c, len, &id, bits, &ndone, &why), JOURNAL_BAD);
	assert_string_equal(why, "names blocks past the end of the file");
	c[49] = 0xff & 0x07;
	assert_int_equal(journal_parse(c, len, &id, bits, &ndone, &why), JOURNAL_OK);
	assert_int_equal(ndone, 5);
}

/* journal_load on files: as parse, with the length from the file, and
 * the fd always taken over. */
static void test_load(void **state)
{
	uint8_t b[4096];
	size_t len;
	const char *why = NULL;
	struct journal *j = NULL;
	int fd = make_journal(b, &len);

	(void)state;
	assert_int_equal(journal_load(dup(fd), &id, &j, &why), JOURNAL_OK);
	assert_non_null(j);
	assert_int_equal(j->ndone, 3);
	assert_true(journal_has(j, 10));
	journal_free(j);

	struct journal_id changed = id;
	changed.size += 65536; /* a longer journal would be due: the header says stale */
	assert_int_equal(journal_load(dup(fd), &changed, &j, &why), JOURNAL_STALE);
	assert_null(j);

	assert_int_equal(ftruncate(fd, 20), 0);
	assert_int_equal(journal_load(dup(fd), &id, &j, &why), JOURNAL_BAD);
	assert_string_equal(why, "is cut short");
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(pwrite(fd, b, len, 0), (ssize_t)len);
	assert_int_equal(pwrite(fd, "x", 1, len), 1);
	assert_int_equal(journal_load(dup(fd), &id, &j, &why), JOURNAL_BAD);
	assert_string_equal(why, "has the wrong length");
	close(fd);
	/* A closed fd: the error, and nothing leaks. */
	assert_int_equal(journal_load(fd, &id, &j, &why), -EBADF);
}

/* The bitmap's bound: 128 Mi blocks, and one more does not fit. */
static void test_fits(void **state)
{
	struct journal_id big = { 1, (uint64_t)JOURNAL_MAX_BITMAP * 8, 0, 0 };

	(void)state;
	assert_true(journal_fits(&big));
	assert_int_equal(journal_len(&big), JOURNAL_HDR_LEN + JOURNAL_MAX_BITMAP);
	big.size++;
	assert_false(journal_fits(&big));
	big.block = 0;
	assert_false(journal_fits(&big));
	big = (struct journal_id){ 1048576, UINT64_MAX, 0, 0 };
	assert_false(journal_fits(&big));
}

static void test_names(void **state)
{
	char part[TMPFILE_NAME_CAP], jrnl[TMPFILE_NAME_CAP], name[256], part2[TMPFILE_NAME_CAP];

	(void)state;
	journal_names("data.bin", part, jrnl);
	assert_string_equal(part, ".data.bin.pcopy-part");
	assert_string_equal(jrnl, ".data.bin.pcopy-jrnl");
	/* The longest name: cut, with a hash of the whole, within NAME_MAX. */
	memset(name, 'a', 255);
	name[255] = '\0';
	journal_names(name, part, jrnl);
	assert_true(strlen(part) <= 255 && strlen(jrnl) <= 255);
	assert_int_equal(strlen(part), 1 + 180 + 17 + 11);
	name[254] = 'b';
	journal_names(name, part2, jrnl);
	assert_string_not_equal(part, part2); /* same first 180 bytes, other names */
	/* Every name it gives has the reserved form, and only those have. */
	assert_true(journal_name_reserved(part) && journal_name_reserved(part2));
	assert_true(journal_name_reserved(jrnl) && journal_name_reserved(".x.pcopy-part"));
	assert_false(journal_name_reserved("x.pcopy-part"));  /* not hidden */
	assert_false(journal_name_reserved(".pcopy-part"));   /* no name in it */
	assert_false(journal_name_reserved(".x.pcopy-parts"));
	assert_false(journal_name_reserved(".x.pcopy-AbCdEf")); /* a temporary name */
	assert_false(journal_name_reserved(""));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_fits),
		cmocka_unit_test(test_names),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
