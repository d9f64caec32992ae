// SPDX-License-Identifier: Apache-2.0
/* Unit tests for sink: how it takes SKIP, the source's report of a source
 * or an entry of its tree it could not read (docs/PROTOCOL.md, section
 * 4.11): only when the sink's client asked for sources (x->skip_paths),
 * index in range, indexes never decreasing (several SKIPs may share one),
 * at any time before END, interleaved with ENTRIES; and the ACK covering a
 * batch of empty files. The sink runs in this thread against messages and
 * blocks queued in advance on socketpairs. The tree engine itself (source
 * against sink, hostile peers) is test_engine's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pipeline/sink.h"
#include "pipeline/xfer.h"
#include "sys/err.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/ctl.h"
#include "wire/proto.h"
#include "testutil.h"
#include "testchan.h"
#include "testentries.h"

struct fixture {
	char dir[64];               /* the destination directory */
	struct sink_target t;
	struct ctl *src;            /* our end: we play the source */
	struct ctl *snk;            /* the sink's end */
	int data[2];                /* [0] ours, [1] the sink's data socket */
	struct chan *data_ch;       /* the sink's data channel, over data[1] (owns it) */
	struct pc_err e;
	struct xfer x;
	struct sink_opts o;         /* all false: no -p */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int cs[2];

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/pcopy-test-sink.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	pc_err_init(&f->e);
	assert_int_equal(sink_target_open(&f->t, AT_FDCWD, f->dir, false, 3, false, f->dir, &f->e),
			 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cs), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->data), 0);
	f->src = testchan_ctl(cs[0], cs[0], "test sink", false);
	f->snk = testchan_ctl(cs[1], cs[1], "testhost", false);
	assert_non_null(f->src);
	assert_non_null(f->snk);
	f->data_ch = chan_plain_new(f->data[1], f->data[1]);
	assert_non_null(f->data_ch);
	f->x = (struct xfer){ .streams = 1, .block_size = PROTO_MIN_BLOCK, .peer = "testhost",
			      .ctl = f->snk, .sigfd = -1, .err = &f->e,
			      .data = &f->data_ch, .skip_paths = 3 };
	assert_int_equal(xfer_init(&f->x), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	xfer_destroy(&f->x);
	ctl_free(f->src);
	ctl_free(f->snk);
	close(f->data[0]);
	chan_free(f->data_ch);
	sink_target_close(&f->t);
	pc_err_destroy(&f->e);
	assert_int_equal(testutil_rm_rf(f->dir), 0);
	free(f);
	return 0;
}

/* True if dir has no entries: no file, and no temporary file either. */
static bool dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool empty = true;

	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			empty = false;
	closedir(d);
	return empty;
}

static void send_skip(struct fixture *f, uint32_t index)
{
	struct proto_msg m = { .type = PROTO_SKIP };

	m.u.skip.index = index;
	m.u.skip.status = -ENOENT;
	snprintf(m.u.skip.msg, sizeof(m.u.skip.msg), "cannot open source 'p%u'", (unsigned)index);
	assert_int_equal(ctl_send(f->src, &m), 0);
}

/* The source's END on the control channel and on its one data channel. */
static void send_end(struct fixture *f)
{
	struct proto_msg m = { .type = PROTO_END };
	struct proto_block end = { .type = PROTO_BLK_END };
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];

	proto_block_encode(&end, hdr);
	assert_int_equal(platform_write_full(f->data[0], hdr, sizeof(hdr)), 0);
	assert_int_equal(ctl_send(f->src, &m), 0);
}

/* The sink's answer: a message of type want. */
static void expect_answer(struct fixture *f, uint8_t want, struct proto_msg *m)
{
	assert_int_equal(ctl_recv(f->src, m), 0);
	assert_int_equal(m->type, want);
}

static void test_skips_counted(void **state)
{
	struct fixture *f = *state;
	struct sink_result r;
	struct proto_msg m;

	send_skip(f, 0);
	send_skip(f, 2);
	send_end(f);
	assert_int_equal(sink_run(&f->x, &f->t, &f->o, &r), -PC_E_PARTIAL);
	assert_int_equal(r.failed, 2);
	/* The sink finishes normally: DONE, with no file completed. */
	expect_answer(f, PROTO_DONE, &m);
	assert_int_equal(m.u.stats.files, 0);
	assert_true(dir_empty(f->dir));
}

/* Each bad SKIP fails the transfer as a protocol error, and the source
 * is told with ERROR. */
static void expect_refused(struct fixture *f, const char *what)
{
	struct sink_result r;
	struct proto_msg m;
	char msg[sizeof(f->e.msg)];

	assert_int_equal(sink_run(&f->x, &f->t, &f->o, &r), -PC_E_PROTO);
	assert_int_equal(pc_err_get(&f->e, msg, sizeof(msg)), -PC_E_PROTO);
	if (strstr(msg, what) == NULL)
		fail_msg("the error '%s' does not say '%s'", msg, what);
	expect_answer(f, PROTO_ERROR, &m);
	assert_int_equal(m.u.error.code, -PC_E_PROTO);
}

/* Several SKIPs for one source (entries of its tree that could not be
 * read) are each counted. */
static void test_skip_repeated(void **state)
{
	struct fixture *f = *state;
	struct sink_result r;
	struct proto_msg m;

	send_skip(f, 1);
	send_skip(f, 1);
	send_end(f);
	assert_int_equal(sink_run(&f->x, &f->t, &f->o, &r), -PC_E_PARTIAL);
	assert_int_equal(r.failed, 2);
	expect_answer(f, PROTO_DONE, &m);
}

/* Reads the sink's ACKs up to the first other message, into *m: each
 * moves the watermark forward, at most to `announced`, and the last one
 * reaches it (the writers may finish the entries one ACK at a time). */
static void expect_acks(struct fixture *f, uint32_t announced, struct proto_msg *m)
{
	uint32_t upto = 0;

	for (;;) {
		assert_int_equal(ctl_recv(f->src, m), 0);
		if (m->type != PROTO_ACK)
			break;
		assert_true(m->u.ack.upto > upto);
		assert_true(m->u.ack.upto <= announced);
		upto = m->u.ack.upto;
	}
	assert_int_equal(upto, announced);
}

/* A batch of empty files: written at once, no FILE_DONE (none failed), and
 * ACKs covering them before DONE. */
static void test_entries_empty_files(void **state)
{
	static struct proto_batch b;
	static struct proto_entry e;
	struct fixture *f = *state;
	struct sink_result r;
	struct proto_msg m;
	char path[128];
	struct stat st;

	proto_batch_init(&b, 0);
	testentries_reg(&e, "a", 0, 0640, 0);
	assert_int_equal(proto_batch_add(&b, &e), 0);
	testentries_reg(&e, "b c", 0, 0600, 0);
	assert_int_equal(proto_batch_add(&b, &e), 0);
	proto_batch_msg(&b, &m);
	assert_int_equal(ctl_send(f->src, &m), 0);
	send_end(f);
	assert_int_equal(sink_run(&f->x, &f->t, &f->o, &r), 0);
	assert_int_equal(r.failed, 0);
	expect_acks(f, 2, &m);
	assert_int_equal(m.type, PROTO_DONE);
	assert_int_equal(m.u.stats.files, 2);
	assert_int_equal(m.u.stats.dirs, 0);
	assert_int_equal(m.u.stats.links, 0);
	snprintf(path, sizeof(path), "%s/b c", f->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0);
}

/* Sends an ENTRIES of the one empty file path, as id `id`. */
static void send_empty_file(struct fixture *f, uint32_t id, const char *path)
{
	static struct proto_batch b;
	struct proto_msg m;

	assert_int_equal(testentries_one(&b, &m, id, path, 0, 0644, 0), 0);
	assert_int_equal(ctl_send(f->src, &m), 0);
}

/* A tree's walk is streaming: SKIPs come between ENTRIES, several with
 * the same index. Each is counted, and the entries are made. */
static void test_skips_between_entries(void **state)
{
	struct fixture *f = *state;
	struct sink_result r;
	struct proto_msg m;
	char path[128];

	send_empty_file(f, 0, "a");
	send_skip(f, 1);
	send_empty_file(f, 1, "b");
	send_skip(f, 1);
	send_skip(f, 2);
	send_empty_file(f, 2, "c");
	send_end(f);
	assert_int_equal(sink_run(&f->x, &f->t, &f->o, &r), -PC_E_PARTIAL);
	assert_int_equal(r.failed, 3);
	expect_acks(f, 3, &m);
	assert_int_equal(m.type, PROTO_DONE);
	assert_int_equal(m.u.stats.files, 3);
	for (const char *n = "abc"; *n != '\0'; n++) {
		snprintf(path, sizeof(path), "%s/%c", f->dir, *n);
		assert_int_equal(access(path, F_OK), 0);
	}
}

/* Sharing an index does not reset the order: after two SKIPs of 2, a SKIP
 * of 1 is refused. */
static void test_skip_backwards_after_repeat(void **state)
{
	struct fixture *f = *state;

	send_skip(f, 2);
	send_skip(f, 2);
	send_skip(f, 1);
	send_end(f);
	expect_refused(f, "out of order");
}

/* A SKIP after END is refused (the sink still waits for a file announced
 * before it, so it reads the SKIP). */
static void test_skip_after_end(void **state)
{
	static struct proto_batch b;
	struct fixture *f = *state;
	struct proto_msg m;

	assert_int_equal(testentries_one(&b, &m, 0, "a", 10, 0644, 0), 0);
	assert_int_equal(ctl_send(f->src, &m), 0);
	send_end(f);
	send_skip(f, 0);
	expect_refused(f, "after END");
	assert_true(dir_empty(f->dir));
}

static void test_skip_backwards(void **state)
{
	struct fixture *f = *state;

	send_skip(f, 2);
	send_skip(f, 0);
	send_end(f);
	expect_refused(f, "out of order");
}

static void test_skip_out_of_range(void **state)
{
	struct fixture *f = *state;

	send_skip(f, 3); /* the REQUEST had 3 paths: 0..2 */
	send_end(f);
	expect_refused(f, "out of range");
}

static void test_skip_not_allowed(void **state)
{
	struct fixture *f = *state;

	f->x.skip_paths = 0; /* a server's sink: its client sends no SKIP */
	send_skip(f, 0);
	send_end(f);
	expect_refused(f, "out of place");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_skips_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_repeated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entries_empty_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skips_between_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_backwards, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_backwards_after_repeat, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_after_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skip_not_allowed, setup, teardown),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
