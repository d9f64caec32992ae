/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for closer: descriptors handed over are closed on its thread
 * while the caller goes on, every one of them by closer_free at the
 * latest, and at once when there is no closer. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <unistd.h>

#include "sys/closer.h"

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

/* Whether the write end of the pipe whose read end is rfd has been closed
 * within ms: its reader then sees the end of the file. */
static bool writer_gone(int rfd, int ms)
{
	struct pollfd p = { .fd = rfd, .events = POLLIN };
	char c;

	return poll(&p, 1, ms) == 1 && read(rfd, &c, 1) == 0;
}

/* The thread closes a descriptor while its caller still holds the closer. */
static void test_closed_on_its_thread(void **state)
{
	struct closer *c = closer_new();
	int p[2];

	(void)state;
	assert_non_null(c);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	closer_put(c, p[1]);
	assert_true(writer_gone(p[0], 10000));
	closer_free(c);
	close(p[0]);
}

/* More than the queue holds: the rest are closed at once; closer_free
 * closes what is still queued. */
static void test_all_closed(void **state)
{
	enum { N = 3 * CLOSER_QUEUE };
	struct closer *c = closer_new();
	int r[N], w[N];

	(void)state;
	assert_non_null(c);
	for (unsigned i = 0; i < N; i++) {
		int p[2];
		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
		r[i] = p[0];
		w[i] = p[1];
	}
	for (unsigned i = 0; i < N; i++)
		closer_put(c, w[i]);
	closer_free(c);
	for (unsigned i = 0; i < N; i++) {
		assert_true(writer_gone(r[i], 0));
		close(r[i]);
	}
}

/* Without a closer, or with one never used. */
static void test_no_closer(void **state)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	closer_put(NULL, fd);
	assert_false(is_open(fd));
	closer_free(NULL);
	closer_free(closer_new());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_closed_on_its_thread),
		cmocka_unit_test(test_all_closed),
		cmocka_unit_test(test_no_closer),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
