// SPDX-License-Identifier: Apache-2.0
/* Unit tests for relay: the SKIPs of a third-party source stop at the
 * client, which counts them and checks them (docs/PROTOCOL.md, sections
 * 4.11 and 5.8). Both servers are played over socketpairs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "roles/relay.h"
#include "sys/err.h"
#include "wire/ctl.h"
#include "wire/proto.h"
#include "testutil.h"
#include "testchan.h"
#include "testentries.h"

struct fixture {
	struct ctl *h1, *h2;        /* our ends: we play the source h1 and the sink h2 */
	struct ctl *to_h1, *to_h2;  /* the relay's ends */
	struct pc_err e;
	struct relay_result r;
};

/* No progress lines, no hooks. */
static const struct relay_report quiet;

static struct ctl *pair(const char *peer, struct ctl **relay_end)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	*relay_end = testchan_ctl(sv[1], sv[1], peer, false);
	assert_non_null(*relay_end);
	struct ctl *c = testchan_ctl(sv[0], sv[0], "client", false);
	assert_non_null(c);
	return c;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->h1 = pair("h1", &f->to_h1);
	f->h2 = pair("h2", &f->to_h2);
	pc_err_init(&f->e);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	ctl_free(f->h1);
	ctl_free(f->h2);
	ctl_free(f->to_h1);
	ctl_free(f->to_h2);
	pc_err_destroy(&f->e);
	free(f);
	return 0;
}

static void send_skip(struct ctl *c, uint32_t index)
{
	struct proto_msg m = { .type = PROTO_SKIP };

	m.u.skip.index = index;
	m.u.skip.status = -ENOENT;
	snprintf(m.u.skip.msg, sizeof(m.u.skip.msg), "cannot open source 'p%u'", (unsigned)index);
	assert_int_equal(ctl_send(c, &m), 0);
}

static void send_type(struct ctl *c, uint8_t type)
{
	struct proto_msg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	assert_int_equal(ctl_send(c, &m), 0);
}

/* ENTRIES announcing the one regular file "b" as id `id`. */
static void send_entries(struct ctl *c, uint32_t id)
{
	static struct proto_batch b;
	struct proto_msg m;

	assert_int_equal(testentries_one(&b, &m, id, "b", 1000, 0644, 0), 0);
	assert_int_equal(ctl_send(c, &m), 0);
}

static void send_ack(struct ctl *c, uint32_t upto)
{
	struct proto_msg m = { .type = PROTO_ACK };

	m.u.ack.upto = upto;
	assert_int_equal(ctl_send(c, &m), 0);
}

static void send_file_done(struct ctl *c, uint32_t id)
{
	struct proto_msg m = { .type = PROTO_FILE_DONE };

	m.u.file_done.id = id;
	m.u.file_done.status = -PC_E_FILEIO;
	snprintf(m.u.file_done.msg, sizeof(m.u.file_done.msg), "cannot write 'b'");
	assert_int_equal(ctl_send(c, &m), 0);
}

/* The sink h2: takes what the relay forwards up to END, then finishes
 * its one file (ACK 1) and sends DONE. got[] records the types it
 * received. */
struct sink_play {
	struct ctl *c;
	uint8_t got[8];
	unsigned n;
};

static void *sink_thread(void *arg)
{
	struct sink_play *p = arg;
	struct proto_msg m;

	while (p->n < 8 && ctl_recv(p->c, &m) == 0) {
		p->got[p->n++] = m.type;
		if (m.type == PROTO_END)
			break;
	}
	memset(&m, 0, sizeof(m));
	m.type = PROTO_ACK;
	m.u.ack.upto = 1;
	(void)ctl_send(p->c, &m);
	m.type = PROTO_DONE;
	(void)ctl_send(p->c, &m);
	return NULL;
}

static void test_skips_reported_not_forwarded(void **state)
{
	struct fixture *f = *state;
	struct sink_play play = { .c = f->h2 };
	struct proto_msg m;
	pthread_t tid;

	send_skip(f->h1, 0);
	send_entries(f->h1, 0);
	send_skip(f->h1, 2);
	send_skip(f->h1, 2); /* a tree may have several entries that cannot be read */
	send_type(f->h1, PROTO_END);
	assert_int_equal(pthread_create(&tid, NULL, sink_thread, &play), 0);
	assert_int_equal(relay_run(f->to_h1, f->to_h2, -1, &quiet, 3, &f->r, &f->e), -PC_E_PARTIAL);
	assert_int_equal(pthread_join(tid, NULL), 0);
	assert_int_equal(f->r.failed, 3);
	/* The sink saw ENTRIES and END, and no SKIP. */
	assert_int_equal(play.n, 2);
	assert_int_equal(play.got[0], PROTO_ENTRIES);
	assert_int_equal(play.got[1], PROTO_END);
	/* The source got the sink's answers. */
	assert_int_equal(ctl_recv(f->h1, &m), 0);
	assert_int_equal(m.type, PROTO_ACK);
	assert_int_equal(m.u.ack.upto, 1);
	assert_int_equal(ctl_recv(f->h1, &m), 0);
	assert_int_equal(m.type, PROTO_DONE);
}

/* The relay refuses what `from` (h1 or h2) has sent: -PC_E_PROTO, with
 * what in the message, and both servers are told with ERROR(-1002). from
 * says no more, so a relay that took it all waits for nothing: it sees the
 * channel close (-PC_E_NET) and the test fails instead of hanging. */
static void expect_refused(struct fixture *f, struct ctl *from, uint32_t npaths,
			   const char *what)
{
	char msg[sizeof(f->e.msg)];
	struct ctl *ends[2] = { f->h1, f->h2 };
	struct proto_msg m;

	assert_int_equal(shutdown(ctl_rfd(from), SHUT_WR), 0);
	assert_int_equal(relay_run(f->to_h1, f->to_h2, -1, &quiet, npaths, &f->r, &f->e), -PC_E_PROTO);
	assert_int_equal(pc_err_get(&f->e, msg, sizeof(msg)), -PC_E_PROTO);
	if (strstr(msg, what) == NULL)
		fail_msg("the error '%s' does not say '%s'", msg, what);
	for (unsigned i = 0; i < 2; i++) {
		/* h2 may first get what was forwarded before the failure. */
		do
			assert_int_equal(ctl_recv(ends[i], &m), 0);
		while (m.type != PROTO_ERROR);
		assert_int_equal(m.u.error.code, -PC_E_PROTO);
	}
}

/* The same index again is fine (a tree's unreadable entries); an earlier
 * one is not. */
static void test_skip_going_back(void **state)
{
	struct fixture *f = *state;

	send_skip(f->h1, 1);
	send_skip(f->h1, 1);
	send_skip(f->h1, 0);
	expect_refused(f, f->h1, 3, "out of order");
}

/* Entry ids follow on from 0 without a gap. */
static void test_entries_gap(void **state)
{
	struct fixture *f = *state;

	send_entries(f->h1, 0);
	send_entries(f->h1, 2);
	expect_refused(f, f->h1, 1, "out of order");
}

/* An ACK covers only what was announced, and never goes back. */
static void test_ack_beyond_announced(void **state)
{
	struct fixture *f = *state;

	send_entries(f->h1, 0);
	send_ack(f->h2, 2);
	expect_refused(f, f->h2, 1, "up to id 2");
}

static void test_ack_going_back(void **state)
{
	struct fixture *f = *state;

	send_entries(f->h1, 0);
	send_entries(f->h1, 1);
	send_ack(f->h2, 1);
	send_ack(f->h2, 0);
	expect_refused(f, f->h2, 1, "up to id 0");
}

/* What the hooks were told. */
struct told {
	unsigned failed, skipped;
	char reasons[2][128];
};

static void told_failed(void *arg, const char *path, const char *reason, bool skipped)
{
	struct told *t = arg;

	assert_null(path); /* the relay keeps no names: the reason gives it */
	if (t->failed < 2)
		snprintf(t->reasons[t->failed], sizeof(t->reasons[0]), "%s", reason);
	t->failed++;
	t->skipped += skipped;
}

/* The client's hooks hear of each entry not copied, the source's SKIP
 * (skipped) and the sink's FILE_DONE (failed), with the host's name. */
static void test_hooks_told(void **state)
{
	struct fixture *f = *state;
	struct told t = { 0 };
	struct pcopy_hooks h = { .failed = told_failed, .arg = &t };
	struct relay_report rep = { .hooks = &h };

	/* ENTRIES first: the relay takes one message from each side per round,
	 * and the sink's FILE_DONE must find its entry announced. */
	send_entries(f->h1, 0);
	send_skip(f->h1, 0);
	send_type(f->h1, PROTO_END);
	send_file_done(f->h2, 0);
	send_ack(f->h2, 1);
	send_type(f->h2, PROTO_DONE);
	assert_int_equal(relay_run(f->to_h1, f->to_h2, -1, &rep, 2, &f->r, &f->e), -PC_E_PARTIAL);
	assert_int_equal(f->r.failed, 2);
	assert_int_equal(t.failed, 2);
	assert_int_equal(t.skipped, 1);
	/* In the order the relay read them: FILE_DONE in the first round. */
	assert_non_null(strstr(t.reasons[0], "cannot write 'b'"));
	assert_non_null(strstr(t.reasons[1], "cannot open source 'p0'"));
}

/* A FILE_DONE must name an entry announced and not yet acknowledged. */
static void test_file_done_unknown(void **state)
{
	struct fixture *f = *state;

	send_entries(f->h1, 0);
	send_ack(f->h2, 1);
	send_file_done(f->h2, 0);
	expect_refused(f, f->h2, 1, "unknown file id");
}

/* FILE_FAIL goes to the sink, a failed file's FILE_DONE and the ACK to the
 * source; each type only in its own direction. */
static void test_fail_and_ack_forwarded(void **state)
{
	struct fixture *f = *state;
	struct proto_msg m = { .type = PROTO_FILE_FAIL };

	send_entries(f->h1, 0);
	m.u.file_fail.id = 0;
	m.u.file_fail.status = -PC_E_FILEIO;
	strcpy(m.u.file_fail.msg, "'b' vanished");
	assert_int_equal(ctl_send(f->h1, &m), 0);
	send_type(f->h1, PROTO_END);
	send_file_done(f->h2, 0);
	send_ack(f->h2, 1);
	send_type(f->h2, PROTO_DONE);
	assert_int_equal(relay_run(f->to_h1, f->to_h2, -1, &quiet, 1, &f->r, &f->e), -PC_E_PARTIAL);
	assert_int_equal(f->r.failed, 1);
	assert_int_equal(ctl_recv(f->h2, &m), 0);
	assert_int_equal(m.type, PROTO_ENTRIES);
	assert_int_equal(ctl_recv(f->h2, &m), 0);
	assert_int_equal(m.type, PROTO_FILE_FAIL);
	assert_string_equal(m.u.file_fail.msg, "'b' vanished");
	assert_int_equal(ctl_recv(f->h2, &m), 0);
	assert_int_equal(m.type, PROTO_END);
	assert_int_equal(ctl_recv(f->h1, &m), 0);
	assert_int_equal(m.type, PROTO_FILE_DONE);
	assert_int_equal(ctl_recv(f->h1, &m), 0);
	assert_int_equal(m.type, PROTO_ACK);
	assert_int_equal(ctl_recv(f->h1, &m), 0);
	assert_int_equal(m.type, PROTO_DONE);
}

/* Plays the source for test_inflight_bound: batches of empty regular
 * files, ids from 0, until the relay stops taking them. */
struct flood {
	struct ctl *c;
	uint32_t sent;        /* entries sent; read after join */
};

static void *flood_thread(void *arg)
{
	static struct proto_batch b;
	static struct proto_entry e;
	struct flood *fl = arg;
	struct proto_msg m;

	testentries_reg(&e, "f", 0, 0644, 0);
	while (fl->sent <= PROTO_MAX_INFLIGHT) {
		proto_batch_init(&b, fl->sent);
		while (proto_batch_add(&b, &e) == 0)
			;
		proto_batch_msg(&b, &m);
		if (ctl_send(fl->c, &m) < 0)
			break;
		fl->sent += b.count;
	}
	(void)shutdown(ctl_rfd(fl->c), SHUT_WR);
	return NULL;
}

/* Plays the sink: reads what the relay forwards, acknowledges nothing, and
 * records the ERROR that ends it. */
struct drain {
	struct ctl *c;
	int error;            /* the ERROR's code, or 0; read after join */
};

static void *drain_thread(void *arg)
{
	struct drain *d = arg;
	struct proto_msg m;

	while (ctl_recv(d->c, &m) == 0)
		if (m.type == PROTO_ERROR) {
			d->error = m.u.error.code;
			break;
		}
	return NULL;
}

/* More than PROTO_MAX_INFLIGHT entries announced and none acknowledged:
 * the relay stops the session before it forwards the batch that crosses
 * the bound. */
static void test_inflight_bound(void **state)
{
	struct fixture *f = *state;
	struct flood fl = { .c = f->h1 };
	struct drain dr = { .c = f->h2 };
	char msg[sizeof(f->e.msg)];
	pthread_t t1, t2;

	assert_int_equal(pthread_create(&t1, NULL, flood_thread, &fl), 0);
	assert_int_equal(pthread_create(&t2, NULL, drain_thread, &dr), 0);
	assert_int_equal(relay_run(f->to_h1, f->to_h2, -1, &quiet, 1, &f->r, &f->e), -PC_E_PROTO);
	assert_int_equal(pthread_join(t2, NULL), 0);
	/* The relay's end closes: the flood's last send fails or ends. */
	ctl_free(f->to_h1);
	f->to_h1 = NULL;
	assert_int_equal(pthread_join(t1, NULL), 0);
	assert_true(fl.sent > PROTO_MAX_INFLIGHT);
	assert_int_equal(dr.error, -PC_E_PROTO);
	assert_int_equal(pc_err_get(&f->e, msg, sizeof(msg)), -PC_E_PROTO);
	assert_non_null(strstr(msg, "too far ahead"));
}

static void test_ack_from_source(void **state)
{
	struct fixture *f = *state;

	send_ack(f->h1, 0);
	expect_refused(f, f->h1, 1, "h1 sent ACK out of place");
}

static void test_entries_from_sink(void **state)
{
	struct fixture *f = *state;

	send_entries(f->h2, 0);
	expect_refused(f, f->h2, 1, "h2 sent ENTRIES out of place");
}

static void test_skip_out_of_range(void **state)
{
	struct fixture *f = *state;

	send_skip(f->h1, 3);
	expect_refused(f, f->h1, 3, "out of range");
}

static void test_skip_after_end(void **state)
{
	struct fixture *f = *state;

	send_type(f->h1, PROTO_END);
	send_skip(f->h1, 0);
	expect_refused(f, f->h1, 3, "after END");
}

static void test_skip_from_sink(void **state)
{
	struct fixture *f = *state;

	send_skip(f->h2, 0);
	expect_refused(f, f->h2, 3, "h2 sent SKIP out of place");
}

/* A message already inside a ctl's chan (TLS holds what it decrypted;
 * poll on the socket shows nothing) is relayed like one on the wire: here
 * h2's out-of-place ENTRIES is refused. Without the ctl_pending check the
 * relay would wait forever; the alarm turns that into a failure. */
static void test_message_inside_chan(void **state)
{
	struct fixture *f = *state;
	static struct proto_batch b;
	struct proto_msg m;
	char msg[sizeof(f->e.msg)];
	int sv[2], ret;

	ctl_free(f->to_h2);
	ctl_free(f->h2);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(testentries_one(&b, &m, 0, "b", 1000, 0644, 0), 0);
	f->to_h2 = testchan_held_ctl(sv[1], &m, "h2");
	f->h2 = testchan_ctl(sv[0], sv[0], "client", false);
	alarm(10);
	ret = relay_run(f->to_h1, f->to_h2, -1, &quiet, 1, &f->r, &f->e);
	alarm(0);
	assert_int_equal(ret, -PC_E_PROTO);
	assert_int_equal(pc_err_get(&f->e, msg, sizeof(msg)), -PC_E_PROTO);
	assert_non_null(strstr(msg, "h2 sent ENTRIES out of place"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_skips_reported_not_forwarded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_going_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entries_gap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ack_beyond_announced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ack_going_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_done_unknown, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fail_and_ack_forwarded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hooks_told, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inflight_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ack_from_source, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entries_from_sink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_after_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_from_sink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_message_inside_chan, setup, teardown),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
