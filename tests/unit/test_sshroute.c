// SPDX-License-Identifier: Apache-2.0
/* Unit tests for sshroute: what `ssh -G` says decides whether a data
 * stream through ssh goes through a proxy, and whether pcopy may open
 * ssh's TCP connection itself (only where that changes nothing else of the
 * user's setup), with ssh's own host, port, family and connect timeout;
 * and `ssh -G` runs in the background, reaped at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "roles/sshroute.h"

/* The lines of a plain `ssh -G host` (an excerpt, in ssh's order). */
#define PLAIN "user alice\nhostname far.example.org\nport 22\naddressfamily any\n" \
	      "batchmode no\nconnecttimeout none\nproxyusefdpass no\n"

static void test_plain_host_is_dialed(void **state)
{
	struct sshroute r;
	(void)state;

	sshroute_parse(PLAIN, &r);
	assert_true(r.dial);
	assert_null(r.proxied);
	assert_string_equal(r.host, "far.example.org");
	assert_int_equal(r.port, 22);
	assert_int_equal(r.family, 0);
	assert_int_equal(r.connect_timeout_s, 0);
}

static void test_port_family_timeout(void **state)
{
	struct sshroute r;
	(void)state;

	sshroute_parse("hostname 10.1.2.3\nport 2222\naddressfamily inet6\nconnecttimeout 7\n", &r);
	assert_true(r.dial);
	assert_string_equal(r.host, "10.1.2.3");
	assert_int_equal(r.port, 2222);
	assert_int_equal(r.family, 6);
	assert_int_equal(r.connect_timeout_s, 7);
	sshroute_parse("hostname fe80::1\nport 22\naddressfamily inet\n", &r);
	assert_true(r.dial);
	assert_string_equal(r.host, "fe80::1");
	assert_int_equal(r.family, 4);
	/* No trailing newline: the last line still counts. */
	sshroute_parse("hostname h\nport 22", &r);
	assert_true(r.dial);
	assert_int_equal(r.port, 22);
}

static void test_proxies_are_not_dialed(void **state)
{
	struct sshroute r;
	(void)state;

	sshroute_parse(PLAIN "proxyjump bastion\n", &r);
	assert_false(r.dial);
	assert_string_equal(r.proxied, "ProxyJump");
	assert_string_equal(r.host, "");
	sshroute_parse(PLAIN "proxycommand nc %h %p\n", &r);
	assert_false(r.dial);
	assert_string_equal(r.proxied, "ProxyCommand");
	/* "none" is no proxy. */
	sshroute_parse(PLAIN "proxycommand none\nproxyjump none\n", &r);
	assert_true(r.dial);
	assert_null(r.proxied);
}

static void test_bound_connects_are_left_to_ssh(void **state)
{
	struct sshroute r;
	(void)state;

	sshroute_parse(PLAIN "bindaddress 192.0.2.1\n", &r);
	assert_false(r.dial);
	assert_null(r.proxied);
	sshroute_parse(PLAIN "bindinterface eth1\n", &r);
	assert_false(r.dial);
}

static void test_unusable_values_are_not_dialed(void **state)
{
	static const char *const bad[] = {
		"hostname far;reboot\nport 22\n",           /* a shell metacharacter */
		"hostname far host\nport 22\n",             /* a space */
		"hostname -oProxyCommand=x\nport 22\n",     /* an option */
		"hostname far%h\nport 22\n",                /* an ssh token */
		"hostname \nport 22\n",                     /* empty */
		"hostname far\nport 0\n",
		"hostname far\nport 65536\n",
		"hostname far\nport 22x\n",
		"hostname far\n",                           /* no port */
		"port 22\n",                                /* no host */
		"",
	};
	struct sshroute r;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sshroute_parse(bad[i], &r);
		assert_false(r.dial);
		assert_string_equal(r.host, "");
		assert_int_equal(r.port, 0);
	}
}

static void test_bounds(void **state)
{
	char text[2048];
	struct sshroute r;
	(void)state;

	/* The longest host name taken, and one byte more. */
	memset(text, 'a', sizeof(text));
	memcpy(text, "hostname ", 9);
	memcpy(text + 9 + SSHROUTE_MAX_HOST, "\nport 22\n", 10);
	sshroute_parse(text, &r);
	assert_true(r.dial);
	assert_int_equal(strlen(r.host), SSHROUTE_MAX_HOST);
	memset(text, 'a', sizeof(text));
	memcpy(text, "hostname ", 9);
	memcpy(text + 9 + SSHROUTE_MAX_HOST + 1, "\nport 22\n", 10);
	sshroute_parse(text, &r);
	assert_false(r.dial);
	/* A line longer than the parser's buffer still counts: a long
	 * ProxyCommand is a proxy, and a long host name is not dialed. */
	memset(text, 'b', sizeof(text));
	memcpy(text, "proxycommand ", 13);
	memcpy(text + 1500, "\nhostname h\nport 22\n", 21);
	sshroute_parse(text, &r);
	assert_false(r.dial);
	assert_string_equal(r.proxied, "ProxyCommand");
	memset(text, 'c', sizeof(text));
	memcpy(text, "hostname ", 9);
	memcpy(text + 1500, "\nport 22\n", 10);
	sshroute_parse(text, &r);
	assert_false(r.dial);
	/* connecttimeout past a week is no limit of ours. */
	sshroute_parse("hostname h\nport 22\nconnecttimeout 9999999\n", &r);
	assert_int_equal(r.connect_timeout_s, 0);
}

#define DEFAULT_CIPHERS "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr," \
			"aes128-gcm@openssh.com,aes256-gcm@openssh.com"

static void test_aes_first(void **state)
{
	static const struct {
		const char *ciphers, *want;
	} cases[] = {
		/* OpenSSH's default order: AES-GCM moves to the front, the
		 * set stays the same. */
		{ DEFAULT_CIPHERS, "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,"
				   "aes128-ctr,aes192-ctr,aes256-ctr,aes256-gcm@openssh.com" },
		{ "chacha20-poly1305@openssh.com,aes128-gcm@openssh.com",
		  "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com" },
		/* The user's own order or set stands. */
		{ "aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-gcm@openssh.com", "" },
		{ "chacha20-poly1305@openssh.com,aes256-gcm@openssh.com", "" },
		{ "chacha20-poly1305@openssh.com", "" },
		/* Only a whole item counts. */
		{ "chacha20-poly1305@openssh.com,xaes128-gcm@openssh.com", "" },
		{ "chacha20-poly1305@openssh.com,aes128-gcm@openssh.comx", "" },
		{ "chacha20-poly1305@openssh.com,aes128-gcm@openssh.comx,aes128-gcm@openssh.com",
		  "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,"
		  "aes128-gcm@openssh.comx" },
		{ "", "" },
	};
	struct sshroute r;
	char out[SSHROUTE_MAX_CIPHERS + 16];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&r, 0, sizeof(r));
		strcpy(r.ciphers, cases[i].ciphers);
		assert_string_equal(sshroute_aes_first(&r, out, sizeof(out)), cases[i].want);
	}
	/* Too small a buffer gives nothing rather than a cut list. */
	strcpy(r.ciphers, DEFAULT_CIPHERS);
	assert_string_equal(sshroute_aes_first(&r, out, 40), "");
}

static void test_ciphers_parsed(void **state)
{
	char text[2048];
	struct sshroute r;
	(void)state;

	sshroute_parse(PLAIN "ciphers " DEFAULT_CIPHERS "\n", &r);
	assert_string_equal(r.ciphers, DEFAULT_CIPHERS);
	/* A list longer than the bound is not kept (nothing is reordered). */
	memset(text, 'x', sizeof(text));
	memcpy(text, "ciphers chacha20-poly1305@openssh.com,", 38);
	memcpy(text + 8 + SSHROUTE_MAX_CIPHERS + 1, "\n", 2);
	sshroute_parse(text, &r);
	assert_string_equal(r.ciphers, "");
	memcpy(text + 8 + SSHROUTE_MAX_CIPHERS, "\n", 2);
	sshroute_parse(text, &r);
	assert_int_equal(strlen(r.ciphers), SSHROUTE_MAX_CIPHERS);
}

/* Writes an executable script named ssh in dir that runs body. */
static void fake_ssh(const char *dir, const char *body, char *path, size_t cap)
{
	FILE *f;

	snprintf(path, cap, "%s/ssh", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, 0755), 0);
}

/* ssh -G in the background: its answer is read at sshroute_finish, the
 * child is reaped and its pipes closed; an ssh that fails, or a --rsh that
 * is not ssh, gives the empty route; a finish with nothing started is a
 * no-op. */
static void test_start_finish(void **state)
{
	char dir[] = "/tmp/pcopy-sshroute.XXXXXX", ssh[256], rsh[300];
	struct sshroute_run run;
	struct sshroute r;
	unsigned fds = testutil_count_fds();

	(void)state;
	assert_non_null(mkdtemp(dir));
	/* It must answer for the host it was asked about. */
	fake_ssh(dir, "[ \"$1 $2 $3\" = \"-x -G far\" ] || exit 9\n"
		 "printf 'hostname 10.9.8.7\\nport 2200\\nproxyjump none\\n'", ssh, sizeof(ssh));
	snprintf(rsh, sizeof(rsh), "%s -x", ssh);
	sshroute_start(rsh, "far", &run);
	assert_true(run.pid > 0);
	sshroute_finish(&run, &r);
	assert_int_equal(run.pid, -1);
	assert_true(r.dial);
	assert_string_equal(r.host, "10.9.8.7");
	assert_int_equal(r.port, 2200);
	assert_null(r.proxied);

	/* A failed ssh: nothing it printed counts. */
	fake_ssh(dir, "printf 'hostname h\\nport 22\\nproxyjump b\\n'; exit 1", ssh, sizeof(ssh));
	sshroute_probe(ssh, "far", &r);
	assert_false(r.dial);
	assert_null(r.proxied);

	/* Not ssh: nothing starts. */
	sshroute_start("/bin/true", "far", &run);
	assert_int_equal(run.pid, -1);
	sshroute_finish(&run, &r);
	assert_false(r.dial);
	sshroute_finish(&run, &r);

	assert_int_equal(testutil_count_fds(), fds);
	assert_int_equal(unlink(ssh), 0);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_host_is_dialed),
		cmocka_unit_test(test_port_family_timeout),
		cmocka_unit_test(test_proxies_are_not_dialed),
		cmocka_unit_test(test_bound_connects_are_left_to_ssh),
		cmocka_unit_test(test_unusable_values_are_not_dialed),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_aes_first),
		cmocka_unit_test(test_ciphers_parsed),
		cmocka_unit_test(test_start_finish),
	};
	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
