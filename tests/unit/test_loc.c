/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for loc: a table of arguments and what they parse to, and a
 * table of arguments that must be refused with a message naming them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "sys/err.h"
#include "roles/loc.h"

struct good_case {
	const char *arg;
	enum loc_kind kind;
	const char *host;       /* LOC_DAEMON only */
	uint16_t port;          /* LOC_DAEMON only */
	const char *path;
};

static const struct good_case good[] = {
	{ "-", LOC_STDIO, "", 0, "-" },
	{ "file", LOC_LOCAL, "", 0, "file" },
	{ "./a:b", LOC_LOCAL, "", 0, "./a:b" },
	{ "/abs/dir/", LOC_LOCAL, "", 0, "/abs/dir/" },
	{ "host:path", LOC_SSH, "host", 0, "path" },
	{ "host:", LOC_SSH, "host", 0, "." },
	{ "user@host:/abs/p", LOC_SSH, "host", 0, "/abs/p" },
	{ "[::1]:/tmp/x", LOC_SSH, "::1", 0, "/tmp/x" },
	{ "me@[fe80::1]:d", LOC_SSH, "fe80::1", 0, "d" },
	{ "10.0.0.2:a:b", LOC_SSH, "10.0.0.2", 0, "a:b" },
	{ "dir/a:b", LOC_LOCAL, "", 0, "dir/a:b" },
	{ ":path", LOC_LOCAL, "", 0, ":path" },   /* as scp: a leading colon is part of a name */
	{ "[::1:p", LOC_LOCAL, "", 0, "[::1:p" },
	{ "../a:b", LOC_LOCAL, "", 0, "../a:b" },
	{ "--", LOC_LOCAL, "", 0, "--" },
	{ "a/../b", LOC_LOCAL, "", 0, "a/../b" },
	{ "pcopy:/x", LOC_SSH, "pcopy", 0, "/x" },
	{ "pcopy://host:7000/x/y", LOC_DAEMON, "host", 7000, "x/y" },
	{ "pcopy://[::1]:7000/a", LOC_DAEMON, "::1", 7000, "a" },
	{ "pcopy://[fe80::1%eth0]:22/a", LOC_DAEMON, "fe80::1%eth0", 22, "a" },
	{ "pcopy://127.0.0.1:1/", LOC_DAEMON, "127.0.0.1", 1, "." },
	{ "pcopy://h:65535/a", LOC_DAEMON, "h", 65535, "a" },
	{ "pcopy://h:7000//a/./b/", LOC_DAEMON, "h", 7000, "a/b" },
	{ "pcopy://h:7000", LOC_DAEMON, "h", 7000, "." },
	{ "pcopy://h:7000/././/.", LOC_DAEMON, "h", 7000, "." },
	{ "pcopy://h:7000/.a/..b/a..", LOC_DAEMON, "h", 7000, ".a/..b/a.." },
	{ "pcopy://h:7000/a b:c", LOC_DAEMON, "h", 7000, "a b:c" },
};

static const char *const bad[] = {
	"",
	"@host:p",               /* empty user */
	"pcopy://h/x",          /* no port */
	"pcopy://h",
	"pcopy://h:/x",
	"pcopy://h:0/x",
	"pcopy://h:99999/x",
	"pcopy://h:65536/x",
	"pcopy://h:-1/x",
	"pcopy://h:12ab/x",
	"pcopy://h:7000x",
	"pcopy://:1/x",          /* no host */
	"pcopy://",
	"pcopy://[]:1/x",
	"pcopy://[::1/x",        /* unterminated bracket */
	"pcopy://[::1]/x",       /* no port after the bracket */
	"pcopy://::1:7000/x",    /* IPv6 without brackets */
	"pcopy://h]:1/x",
	"pcopy://h:1/../x",
	"pcopy://h:1/a/..",
	"pcopy://h:1/a/../b",
	"pcopy://h:1/..",
};

static void test_good(void **state)
{
	struct pc_err e;

	(void)state;
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		const struct good_case *c = &good[i];
		struct loc l;
		int ret;

		pc_err_init(&e);
		ret = loc_parse(c->arg, &l, &e);
		if (ret != 0)
			fail_msg("'%s': expected success, got %d", c->arg, ret);
		if (l.kind != c->kind)
			fail_msg("'%s': kind %d, expected %d", c->arg, l.kind, c->kind);
		if (strcmp(l.path, c->path) != 0)
			fail_msg("'%s': path '%s', expected '%s'", c->arg, l.path, c->path);
		if (c->kind == LOC_DAEMON) {
			if (strcmp(l.host, c->host) != 0 || l.port != c->port)
				fail_msg("'%s': host '%s' port %u, expected '%s' %u", c->arg,
					 l.host, l.port, c->host, c->port);
		}
		pc_err_destroy(&e);
	}
}

static void test_bad(void **state)
{
	struct pc_err e;
	char msg[1024];

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct loc l;
		int ret;

		pc_err_init(&e);
		ret = loc_parse(bad[i], &l, &e);
		if (ret != -PC_E_USAGE)
			fail_msg("'%s': expected -PC_E_USAGE, got %d", bad[i], ret);
		assert_int_equal(pc_err_get(&e, msg, sizeof msg), -PC_E_USAGE);
		if (bad[i][0] != '\0' && strstr(msg, bad[i]) == NULL)
			fail_msg("'%s': message does not name the argument: %s", bad[i], msg);
		pc_err_destroy(&e);
	}
}

static void test_dotdot_message(void **state)
{
	struct pc_err e;
	struct loc l;
	char msg[1024];

	(void)state;
	pc_err_init(&e);
	assert_int_equal(loc_parse("pcopy://h:1/a/../b", &l, &e), -PC_E_USAGE);
	pc_err_get(&e, msg, sizeof msg);
	assert_string_equal(msg, "pcopy://h:1/a/../b: '..' is not allowed in a daemon path");
	pc_err_destroy(&e);
}

static void test_lengths(void **state)
{
	static char arg[PROTO_MAX_PATH + 64];
	struct pc_err e;
	struct loc l;
	size_t n;

	(void)state;
	/* The longest host fits; one more byte does not. */
	n = (size_t)snprintf(arg, sizeof arg, "pcopy://");
	memset(arg + n, 'h', LOC_MAX_HOST);
	strcpy(arg + n + LOC_MAX_HOST, ":1/x");
	pc_err_init(&e);
	assert_int_equal(loc_parse(arg, &l, &e), 0);
	assert_int_equal(strlen(l.host), LOC_MAX_HOST);
	memset(arg + n, 'h', LOC_MAX_HOST + 1);
	strcpy(arg + n + LOC_MAX_HOST + 1, ":1/x");
	assert_int_equal(loc_parse(arg, &l, &e), -PC_E_USAGE);
	pc_err_destroy(&e);

	/* A local path of exactly PROTO_MAX_PATH bytes fits; one more does not. */
	memset(arg, 'a', PROTO_MAX_PATH);
	arg[PROTO_MAX_PATH] = '\0';
	pc_err_init(&e);
	assert_int_equal(loc_parse(arg, &l, &e), 0);
	assert_int_equal(strlen(l.path), PROTO_MAX_PATH);
	arg[PROTO_MAX_PATH] = 'a';
	arg[PROTO_MAX_PATH + 1] = '\0';
	assert_int_equal(loc_parse(arg, &l, &e), -PC_E_USAGE);
	pc_err_destroy(&e);

	/* A daemon path is measured after normalisation. */
	n = (size_t)snprintf(arg, sizeof arg, "pcopy://h:1///");
	memset(arg + n, 'b', PROTO_MAX_PATH);
	arg[n + PROTO_MAX_PATH] = '\0';
	pc_err_init(&e);
	assert_int_equal(loc_parse(arg, &l, &e), 0);
	assert_int_equal(strlen(l.path), PROTO_MAX_PATH);
	strcpy(arg + n + PROTO_MAX_PATH, "/c");
	assert_int_equal(loc_parse(arg, &l, &e), -PC_E_USAGE);
	pc_err_destroy(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_bad),
		cmocka_unit_test(test_dotdot_message),
		cmocka_unit_test(test_lengths),
	};

	return testutil_status(cmocka_run_group_tests_name("loc", tests, NULL, NULL));
}
