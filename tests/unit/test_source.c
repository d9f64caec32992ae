/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for source: how it reads the sink's ACKs and FILE_DONEs
 * (protocol version 3), and failures while the pipeline starts. The fault
 * hook (sys/fault.h) makes the Nth encoder_new fail under -c auto, where
 * each sender and each reader owns an encoder: the source must join only
 * the threads it started, free every encoder, tell the peer with ERROR
 * (before announcing anything) and return the allocation failure with a
 * message naming the thread. source_run is given a one-file tree, as
 * test_engine's run_both gives it one. Run it under ASan (leaks, bad
 * joins) and TSan. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testchan.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/source.h"
#include "pipeline/xfer.h"
#include "sys/err.h"
#include "sys/fault.h"
#include "transport/chan.h"
#include "wire/ctl.h"

#define STREAMS 2u

struct fixture {
	char dir[64];            /* mkdtemp directory: root/t/f, the source tree */
	int dirfd;               /* root */
	struct pc_err err;
	struct xfer x;
	struct ctl *ctl;         /* ours: the source's control channel */
	struct ctl *peer;        /* the sink's end, read by the test */
	int data[STREAMS][2];    /* [i][0] the source's data socket, [i][1] the sink's */
	struct chan *chans[STREAMS]; /* the source's data channels, owning data[i][0] */
	struct source_path path;
	struct source_input in;  /* "t", walked recursively from dirfd */
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	int sv[2], fd;

	if (fx == NULL)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/pcopy-test-source-XXXXXX");
	fx->dirfd = testutil_root(fx->dir);
	assert_true(fx->dirfd >= 0);
	assert_int_equal(mkdirat(fx->dirfd, "t", 0755), 0);
	fd = openat(fx->dirfd, "t/f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	for (int i = 0; i < 64; i++)
		assert_int_equal(write(fd, "some text that compresses well, again and again\n", 48), 48);
	assert_int_equal(close(fd), 0);

	pc_err_init(&fx->err);
	fx->path = (struct source_path){ .path = "t" };
	fx->in = (struct source_input){ .dirfd = fx->dirfd, .paths = &fx->path, .npaths = 1,
					.walk = { .recursive = true } };
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fx->ctl = testchan_ctl(sv[0], sv[0], "test sink", false);
	fx->peer = testchan_ctl(sv[1], sv[1], "test source", false);
	assert_non_null(fx->ctl);
	assert_non_null(fx->peer);
	for (unsigned i = 0; i < STREAMS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fx->data[i]), 0);
		fx->chans[i] = chan_plain_new(fx->data[i][0], fx->data[i][0]);
		assert_non_null(fx->chans[i]);
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	fault_arm(FAULT_ENCODER_NEW, 0);
	ctl_free(fx->ctl);
	ctl_free(fx->peer);
	for (unsigned i = 0; i < STREAMS; i++) {
		chan_free(fx->chans[i]); /* closes data[i][0] */
		close(fx->data[i][1]);
	}
	pc_err_destroy(&fx->err);
	close(fx->dirfd);
	(void)testutil_rm_rf(fx->dir);
	free(fx);
	return 0;
}

/* Runs source_run under -c auto with the nth encoder_new failing; returns
 * its result and the recorded message in msg. */
static int run_failing_encoder(struct fixture *fx, unsigned nth, char *msg, size_t cap)
{
	struct source_result *r = calloc(1, sizeof(*r));
	int ret;

	assert_non_null(r);
	fx->x = (struct xfer){
		.streams = STREAMS, .block_size = 64u << 10, .timeout_s = 10,
		.peer = "test sink", .ctl = fx->ctl, .sigfd = -1, .err = &fx->err,
		.data = fx->chans, .nchoices = 1, .codec_auto = true,
	};
	fx->x.choices[0] = (struct codec_choice){ CODEC_NONE, 0 };
	assert_int_equal(xfer_init(&fx->x), 0);
	fault_arm(FAULT_ENCODER_NEW, nth);
	/* Whatever the source logs, to be read below. */
	struct testutil_stderr said;
	char logged[4096];
	testutil_stderr_begin(&said);
	ret = source_run(&fx->x, &fx->in, r);
	testutil_stderr_end(&said, logged, sizeof(logged));
	/* Only threads that started are joined: no join fails. */
	if (strstr(logged, "cannot join") != NULL)
		fail_msg("source_run joined a thread it never started: %s", logged);
	/* The fault fired: nothing stays armed for the next test. */
	assert_int_equal(atomic_load(&fault_armed), 0);
	xfer_destroy(&fx->x);
	assert_int_equal(pc_err_get(&fx->err, msg, cap), ret);
	free(r);
	return ret;
}

/* The peer was told, with the same code, and heard nothing before. */
static void assert_peer_told(struct fixture *fx, int code)
{
	struct proto_msg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	assert_int_equal(ctl_recv(fx->peer, m), 0);
	assert_int_equal(m->type, PROTO_ERROR);
	assert_int_equal(m->u.error.code, code);
	free(m);
}

static void test_first_sender_encoder_fails(void **state)
{
	struct fixture *fx = *state;
	char msg[256];

	/* No thread started at all. */
	assert_int_equal(run_failing_encoder(fx, 1, msg, sizeof(msg)), -ENOMEM);
	assert_non_null(strstr(msg, "out of memory for the compressor of data stream 0"));
	assert_int_equal(pc_exit_code(-ENOMEM), 11);
	assert_peer_told(fx, -ENOMEM);
}

static void test_second_sender_encoder_fails(void **state)
{
	struct fixture *fx = *state;
	char msg[256];

	/* Sender 0 runs and must be joined; sender 1 never started and
	 * must not be (it was, and pthread_join crashed on a null id). */
	assert_int_equal(run_failing_encoder(fx, 2, msg, sizeof(msg)), -ENOMEM);
	assert_non_null(strstr(msg, "out of memory for the compressor of data stream 1"));
	assert_peer_told(fx, -ENOMEM);
}

static void test_reader_encoder_fails(void **state)
{
	struct fixture *fx = *state;
	char msg[256];

	/* Both senders run; the first reader's encoder fails. */
	assert_int_equal(run_failing_encoder(fx, STREAMS + 1, msg, sizeof(msg)), -ENOMEM);
	assert_non_null(strstr(msg, "out of memory for the encoder of reader 0"));
	assert_peer_told(fx, -ENOMEM);
}

static void test_second_reader_encoder_fails(void **state)
{
	struct fixture *fx = *state;
	char msg[256];

	/* Reader 0 runs and must be joined, wherever the abort finds it
	 * (before plan_next, or waiting in it); reader 1 never started and
	 * must not be (there are always two readers at least). */
	assert_int_equal(run_failing_encoder(fx, STREAMS + 2, msg, sizeof(msg)), -ENOMEM);
	assert_non_null(strstr(msg, "out of memory for the encoder of reader 1"));
	assert_peer_told(fx, -ENOMEM);
}

/* ---- The sink's answers ---------------------------------------------- */

/* What the fake sink answers once it has read the source's ENTRIES. */
enum answer {
	ANSWER_ACK,            /* ACK(1) (file 0 done), then DONE after END */
	ANSWER_ACK_TOO_FAR,    /* ACK(2): more than announced */
	ANSWER_FAIL_THEN_ACK,  /* FILE_DONE(0, failure), ACK(1), DONE after END */
	ANSWER_ACK_THEN_FAIL,  /* ACK(1), then FILE_DONE(0): an id already covered */
};

struct fake_sink {
	struct ctl *c;
	enum answer a;
	uint32_t first_id, count; /* the ENTRIES it read; read after join */
	char path[64];
};

static void fake_send(struct ctl *c, uint8_t type, uint32_t n)
{
	struct proto_msg m = { .type = type };

	if (type == PROTO_ACK)
		m.u.ack.upto = n;
	if (type == PROTO_FILE_DONE) {
		m.u.file_done.id = n;
		m.u.file_done.status = -PC_E_FILEIO;
		snprintf(m.u.file_done.msg, sizeof(m.u.file_done.msg), "cannot write 'f'");
	}
	(void)ctl_send(c, &m);
}

static void *fake_sink_main(void *arg)
{
	struct fake_sink *k = arg;
	struct proto_entry *e = calloc(1, sizeof(*e));
	struct proto_msg m;
	size_t pos = 0;

	if (e == NULL || ctl_recv(k->c, &m) != 0 || m.type != PROTO_ENTRIES) {
		free(e);
		return NULL;
	}
	k->first_id = m.u.entries.first_id;
	k->count = m.u.entries.count;
	if (proto_entries_next(&m.u.entries, &pos, e) == 1)
		snprintf(k->path, sizeof(k->path), "%.60s", e->path);
	free(e);
	if (k->a == ANSWER_FAIL_THEN_ACK)
		fake_send(k->c, PROTO_FILE_DONE, 0);
	fake_send(k->c, PROTO_ACK, k->a == ANSWER_ACK_TOO_FAR ? 2 : 1);
	if (k->a == ANSWER_ACK_THEN_FAIL)
		fake_send(k->c, PROTO_FILE_DONE, 0);
	/* DONE only after END, as a sink does; stop at the source's ERROR. */
	while (ctl_recv(k->c, &m) == 0 && m.type != PROTO_ERROR)
		if (m.type == PROTO_END) {
			fake_send(k->c, PROTO_DONE, 0);
			break;
		}
	return NULL;
}

/* Runs source_run on the file f, named name, against a fake sink that
 * answers a; returns its result and the message in msg. */
static int run_file_with_sink(struct fixture *fx, const char *name, enum answer a, char *msg,
			      size_t cap)
{
	struct source_result *r = calloc(1, sizeof(*r));
	struct source_path path = { .path = name };
	struct source_input in = { .dirfd = fx->dirfd, .paths = &path, .npaths = 1 };
	struct fake_sink k = { .c = fx->peer, .a = a };
	int ret;
	pthread_t tid;

	assert_non_null(r);
	fx->x = (struct xfer){
		.streams = STREAMS, .block_size = 64u << 10, .timeout_s = 10,
		.peer = "test sink", .ctl = fx->ctl, .sigfd = -1, .err = &fx->err,
		.data = fx->chans, .nchoices = 1,
	};
	fx->x.choices[0] = (struct codec_choice){ CODEC_NONE, 0 };
	assert_int_equal(xfer_init(&fx->x), 0);
	assert_int_equal(pthread_create(&tid, NULL, fake_sink_main, &k), 0);
	ret = source_run(&fx->x, &in, r);
	assert_int_equal(pthread_join(tid, NULL), 0);
	xfer_destroy(&fx->x);
	/* One ENTRIES of the one file, id 0, named as the source was. */
	assert_int_equal(k.first_id, 0);
	assert_int_equal(k.count, 1);
	assert_string_equal(k.path, strrchr(name, '/') ? strrchr(name, '/') + 1 : name);
	(void)pc_err_get(&fx->err, msg, cap);
	free(r);
	return ret;
}

/* The fixture's small file "t/f", named without -r (so "f" on the wire). */
static int run_with_sink(struct fixture *fx, enum answer a, char *msg, size_t cap)
{
	return run_file_with_sink(fx, "t/f", a, msg, cap);
}

/* ACK(1) finishes file 0: the source sends END and takes DONE. */
static void test_ack_finishes(void **state)
{
	char msg[256];

	assert_int_equal(run_with_sink(*state, ANSWER_ACK, msg, sizeof(msg)), 0);
}

/* An ACK past what was announced is a protocol error. */
static void test_ack_too_far(void **state)
{
	char msg[256];

	assert_int_equal(run_with_sink(*state, ANSWER_ACK_TOO_FAR, msg, sizeof(msg)), -PC_E_PROTO);
	assert_non_null(strstr(msg, "acknowledged entries up to 2, but 1 were announced"));
}

/* A FILE_DONE is a failure, counted; the ACK after it still finishes. */
static void test_file_done_then_ack(void **state)
{
	char msg[256];

	assert_int_equal(run_with_sink(*state, ANSWER_FAIL_THEN_ACK, msg, sizeof(msg)),
			 -PC_E_PARTIAL);
}

/* A FILE_DONE for an id an ACK already covered is a protocol error. The
 * file is larger than the data sockets hold and nobody reads them, so the
 * source is still in its transfer loop (no END) when the FILE_DONE comes. */
static void test_file_done_after_ack(void **state)
{
	struct fixture *fx = *state;
	static char chunk[1 << 16];
	char msg[256];
	int fd;

	fd = openat(fx->dirfd, "g", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	memset(chunk, 'g', sizeof(chunk));
	for (int i = 0; i < 64; i++) /* 4 MiB */
		assert_int_equal(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
	assert_int_equal(close(fd), 0);
	assert_int_equal(run_file_with_sink(fx, "g", ANSWER_ACK_THEN_FAIL, msg, sizeof(msg)),
			 -PC_E_PROTO);
	assert_non_null(strstr(msg, "which is not in flight"));
}

static void test_fault_spec(void **state)
{
	(void)state;
	assert_int_equal(fault_arm_spec(NULL), 0);
	assert_int_equal(fault_arm_spec(""), 0);
	assert_int_equal(atomic_load(&fault_armed), 0);
	/* Malformed specs arm nothing. */
	static const char *const bad[] = { "encoder_new", "encoder_new:", "encoder_new:0",
					   "encoder_new:x", "nope:1", "compress:1,", ":1",
					   "compress:-1", "compress:1x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(fault_arm_spec(bad[i]), -PC_E_USAGE);
		assert_int_equal(atomic_load(&fault_armed), 0);
	}
	/* compress:2 fires on the second call only, encoder_new:1 on the first. */
	assert_int_equal(fault_arm_spec("compress:2,encoder_new:1"), 0);
	assert_int_equal(atomic_load(&fault_armed), 2);
	assert_true(fault_fire(FAULT_ENCODER_NEW));
	assert_false(fault_fire(FAULT_ENCODER_NEW));
	assert_false(fault_fire(FAULT_COMPRESS));
	assert_true(fault_fire(FAULT_COMPRESS));
	assert_false(fault_fire(FAULT_COMPRESS));
	assert_int_equal(atomic_load(&fault_armed), 0);
	/* Disarming. */
	fault_arm(FAULT_COMPRESS, 3);
	fault_arm(FAULT_COMPRESS, 0);
	assert_int_equal(atomic_load(&fault_armed), 0);
	assert_false(fault_fire(FAULT_COMPRESS));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_first_sender_encoder_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_sender_encoder_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_encoder_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_reader_encoder_fails, setup, teardown),
		cmocka_unit_test(test_fault_spec),
		cmocka_unit_test_setup_teardown(test_ack_finishes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ack_too_far, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_done_then_ack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_done_after_ack, setup, teardown),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
