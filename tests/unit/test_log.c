/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for log: what log_escape lets through and what it escapes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* log_escape_name escapes a backslash too, so that a name written with
 * one and a name with the control byte it spells list differently;
 * log_escape leaves it. */
static void test_escape_name(void **state)
{
	char out[64];

	(void)state;
	log_escape_name(out, sizeof(out), "a\\x0ab");
	assert_string_equal(out, "a\\x5cx0ab");
	log_escape_name(out, sizeof(out), "a\nb");
	assert_string_equal(out, "a\\x0ab");
	log_escape(out, sizeof(out), "a\\b");
	assert_string_equal(out, "a\\b");
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

/* Runs log_setup(LOG_DEBUG, "pcopy") and one message of each level with
 * stderr sent to a fresh file, JOURNAL_STREAM set to that file's DEV:INO
 * when journal is true (as systemd sets it for a service whose stderr is
 * the journal), or to another file's (a stderr the service redirected);
 * copies what was written to out[cap]. */
static void log_capture(bool journal, char *out, size_t cap)
{
	char path[] = "/tmp/pcopy-test-log.XXXXXX", other[] = "/tmp/pcopy-test-log.XXXXXX";
	char env[64];
	struct stat st;
	int fd, ofd, saved;
	ssize_t n;

	fd = mkstemp(path);
	assert_true(fd >= 0);
	ofd = mkstemp(other);
	assert_true(ofd >= 0);
	assert_int_equal(fstat(journal ? fd : ofd, &st), 0);
	snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	assert_int_equal(setenv("JOURNAL_STREAM", env, 1), 0);
	saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fd, STDERR_FILENO) >= 0);

	log_setup(LOG_DEBUG, "pcopy");
	log_error("error %d", 1);
	log_warn("warning");
	log_notice("notice");
	log_info("info\n");
	log_debug("debug");
	/* The final error line: escaped already, it is not escaped again. */
	log_escaped(LOG_ERROR, "gone: \\x07 x");

	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	assert_int_equal(unsetenv("JOURNAL_STREAM"), 0);
	log_setup(LOG_WARN, "pcopy");
	n = pread(fd, out, cap - 1, 0);
	assert_true(n >= 0);
	out[n] = '\0';
	close(fd);
	close(ofd);
	unlink(path);
	unlink(other);
}

/* Under systemd with stderr connected to the journal, each line starts
 * with its syslog priority, <3> for an error to <7> for debugging, which
 * journald reads as the entry's priority, and carries neither our prefix
 * (the journal names the unit and the process) nor a time stamp. */
static void test_journal_priorities(void **state)
{
	char out[512];

	(void)state;
	log_capture(true, out, sizeof(out));
	assert_string_equal(out, "<3>error 1\n<4>warning\n<5>notice\n<6>info\n<7>debug\n"
				 "<3>gone: \\x07 x\n");
}

/* JOURNAL_STREAM names another file than stderr (the service sent stderr
 * elsewhere): plain lines, as on a terminal. */
static void test_journal_stream_elsewhere(void **state)
{
	char out[512];

	(void)state;
	log_capture(false, out, sizeof(out));
	assert_string_equal(out, "pcopy: error 1\npcopy: warning\npcopy: notice\npcopy: info\n"
				 "pcopy: debug\npcopy: gone: \\x07 x\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_and_utf8),
		cmocka_unit_test(test_controls),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_escape_name),
		cmocka_unit_test(test_journal_priorities),
		cmocka_unit_test(test_journal_stream_elsewhere),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
