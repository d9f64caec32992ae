// SPDX-License-Identifier: Apache-2.0
/* Unit tests for the transfer engine: source_run and sink_run against each
 * other in one process, over socketpairs (the sink on a thread of its own),
 * and each of them against a peer this test plays by hand: a reader that
 * fails, a writer that fails, a peer that vanishes, and a lying peer. Run
 * under ASan (leaks, the records' reference counts) and TSan. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testchan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/sink.h"
#include "pipeline/source.h"
#include "pipeline/source_int.h"
#include "pipeline/xfer.h"
#include "sys/err.h"
#include "sys/fault.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/ctl.h"
#include "wire/proto.h"

#define STREAMS 2u
#define BLOCK (64u << 10)

struct side {
	struct xfer x;
	struct pc_err e;
	struct ctl *ctl;
	struct chan *chans[STREAMS]; /* its data channels, each owning its end of data[i] */
	int ret;
};

struct fixture {
	char base[64];            /* mkdtemp: src/, dst/, outside/ */
	char src[96], dst[96], outside[96];
	struct side so, si;       /* the source's and the sink's side */
	int data[STREAMS][2];     /* [i][0] the source's end, [i][1] the sink's */
	struct sink_target t;
	struct sink_opts sopts;
	struct sink_result sr;
	struct source_result rr;
	struct source_path paths[4];
	struct source_input in;
	pthread_t sink_tid;
	bool sink_running;
};

static void write_file(const char *path, size_t len, unsigned seed)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	uint8_t buf[4096];

	assert_true(fd >= 0);
	for (size_t off = 0; off < len;) {
		size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)((off + i) * 31u + seed * 7u + (off + i) / 251u);
		assert_int_equal(write(fd, buf, n), (ssize_t)n);
		off += n;
	}
	assert_int_equal(close(fd), 0);
}

static void side_init(struct side *sd, int ctlfd, const char *peer, int *fds)
{
	pc_err_init(&sd->e);
	sd->ctl = testchan_ctl(ctlfd, ctlfd, peer, false);
	assert_non_null(sd->ctl);
	for (unsigned i = 0; i < STREAMS; i++) {
		sd->chans[i] = chan_plain_new(fds[i], fds[i]);
		assert_non_null(sd->chans[i]);
	}
	sd->x = (struct xfer){ .streams = STREAMS, .block_size = BLOCK, .timeout_s = 10,
			       .peer = peer, .ctl = sd->ctl, .sigfd = -1, .err = &sd->e,
			       .data = sd->chans, .nchoices = 1 };
	sd->x.choices[0] = (struct codec_choice){ CODEC_NONE, 0 };
	assert_int_equal(xfer_init(&sd->x), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int cs[2], sfds[STREAMS], kfds[STREAMS];

	assert_non_null(f);
	snprintf(f->base, sizeof(f->base), "/tmp/pcopy-test-engine.XXXXXX");
	assert_non_null(mkdtemp(f->base));
	snprintf(f->src, sizeof(f->src), "%s/src", f->base);
	snprintf(f->dst, sizeof(f->dst), "%s/dst", f->base);
	snprintf(f->outside, sizeof(f->outside), "%s/outside", f->base);
	assert_int_equal(mkdir(f->src, 0755), 0);
	assert_int_equal(mkdir(f->dst, 0755), 0);
	assert_int_equal(mkdir(f->outside, 0755), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cs), 0);
	for (unsigned i = 0; i < STREAMS; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->data[i]), 0);
		sfds[i] = f->data[i][0];
		kfds[i] = f->data[i][1];
	}
	side_init(&f->so, cs[0], "test sink", sfds);
	side_init(&f->si, cs[1], "test source", kfds);
	f->si.x.skip_paths = 4;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	fault_arm(FAULT_SOURCE_OPEN, 0);
	fault_arm(FAULT_SINK_WRITE, 0);
	for (int i = 0; i < 2; i++) {
		struct side *sd = i ? &f->si : &f->so;
		xfer_destroy(&sd->x);
		ctl_free(sd->ctl);
		for (unsigned j = 0; j < STREAMS; j++)
			chan_free(sd->chans[j]); /* closes data[j][0] or data[j][1] */
		pc_err_destroy(&sd->e);
	}
	sink_target_close(&f->t);
	assert_int_equal(testutil_rm_rf(f->base), 0);
	free(f);
	return 0;
}

static void *sink_thread(void *arg)
{
	struct fixture *f = arg;

	f->si.ret = sink_run(&f->si.x, &f->t, &f->sopts, &f->sr);
	return NULL;
}

/* Starts the sink on a thread, receiving into dst (one source). */
static void start_sink(struct fixture *f)
{
	assert_int_equal(sink_target_open(&f->t, AT_FDCWD, f->dst, false, 1, false, f->dst,
					  &f->si.e), 0);
	assert_int_equal(pthread_create(&f->sink_tid, NULL, sink_thread, f), 0);
	f->sink_running = true;
}

static int join_sink(struct fixture *f)
{
	assert_true(f->sink_running);
	assert_int_equal(pthread_join(f->sink_tid, NULL), 0);
	f->sink_running = false;
	return f->si.ret;
}

/* Runs the source over src/NAME (a tree) against the sink. */
static void run_both(struct fixture *f, const char *name)
{
	f->paths[0] = (struct source_path){ .path = name };
	f->in = (struct source_input){ .dirfd = open(f->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
				       .paths = f->paths, .npaths = 1,
				       .walk = { .recursive = true, .specials = true } };
	assert_true(f->in.dirfd >= 0);
	start_sink(f);
	f->so.ret = source_run(&f->so.x, &f->in, &f->rr);
	(void)join_sink(f);
	close(f->in.dirfd);
}

static void assert_same_file(const char *a, const char *b)
{
	char cmd[2 * 256 + 32]; /* the fixture's paths are char[256] */
	int n = snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);

	assert_true(n > 0 && (size_t)n < sizeof(cmd));
	if (system(cmd) != 0)
		fail_msg("%s and %s differ", a, b);
}

/* Regular files anywhere under dir. */
static unsigned count_files(const char *dir)
{
	char cmd[256], out[32] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "find '%s' -type f | wc -l", dir);
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(out, sizeof(out), p));
	pclose(p);
	return (unsigned)atoi(out);
}

static void make_tree(struct fixture *f)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/t/d", f->src);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/t/d/e", f->src);
	assert_int_equal(mkdir(p, 0555), 0);
	snprintf(p, sizeof(p), "%s/t/void", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	for (unsigned i = 0; i < 50; i++) {
		snprintf(p, sizeof(p), "%s/t/small%u", f->src, i);
		write_file(p, 100 + i, i);
	}
	snprintf(p, sizeof(p), "%s/t/empty", f->src);
	write_file(p, 0, 0);
	snprintf(p, sizeof(p), "%s/t/d/big", f->src);
	write_file(p, 3 * BLOCK + 123, 99);
	snprintf(p, sizeof(p), "%s/t/d/e/inner", f->src);
	write_file(p, 5000, 7);
	snprintf(p, sizeof(p), "%s/t/link", f->src);
	assert_int_equal(symlink("d/e", p), 0);
}

/* A tree of every kind of entry arrives whole, in DATA blocks and packs. */
static void test_tree_roundtrip(void **state)
{
	struct fixture *f = *state;
	char a[256], b[256], target[64] = "";
	struct stat st;

	make_tree(f);
	run_both(f, "t");
	assert_int_equal(f->so.ret, 0);
	assert_int_equal(f->si.ret, 0);
	for (unsigned i = 0; i < 50; i++) {
		snprintf(a, sizeof(a), "%s/t/small%u", f->src, i);
		snprintf(b, sizeof(b), "%s/t/small%u", f->dst, i);
		assert_same_file(a, b);
	}
	snprintf(a, sizeof(a), "%s/t/d/big", f->src);
	snprintf(b, sizeof(b), "%s/t/d/big", f->dst);
	assert_same_file(a, b);
	snprintf(a, sizeof(a), "%s/t/d/e/inner", f->src);
	snprintf(b, sizeof(b), "%s/t/d/e/inner", f->dst);
	assert_same_file(a, b);
	snprintf(b, sizeof(b), "%s/t/empty", f->dst);
	assert_int_equal(stat(b, &st), 0);
	assert_int_equal(st.st_size, 0);
	snprintf(b, sizeof(b), "%s/t/void", f->dst);
	assert_int_equal(stat(b, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	snprintf(b, sizeof(b), "%s/t/link", f->dst);
	assert_int_equal(readlink(b, target, sizeof(target) - 1), 3);
	assert_string_equal(target, "d/e");
	/* The 0555 directory got its mode once filled. */
	snprintf(b, sizeof(b), "%s/t/d/e", f->dst);
	assert_int_equal(stat(b, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0555 & ~(mode_t)022);
	assert_int_equal(f->sr.self.files, 53);
	assert_int_equal(f->sr.self.dirs, 4);
	assert_int_equal(f->sr.self.links, 1);
	assert_int_equal(f->rr.files, 53);
	assert_int_equal(f->rr.dirs, 4);
	assert_int_equal(f->rr.links, 1);
	assert_int_equal(count_files(f->dst), 53);
}

/* A small file the source cannot read (its PACK status), and a big one
 * (FILE_FAIL): each is reported, nothing is left under its name, the rest
 * arrives, and both sides end with -PC_E_PARTIAL. */
static void reader_fails(struct fixture *f, size_t len)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/t/bad", f->src);
	write_file(p, len, 1);
	snprintf(p, sizeof(p), "%s/t/dir", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	fault_arm(FAULT_SOURCE_OPEN, 1);
	run_both(f, "t");
	assert_int_equal(f->so.ret, -PC_E_PARTIAL);
	assert_int_equal(f->si.ret, -PC_E_PARTIAL);
	assert_int_equal(f->rr.failed, 1);
	assert_int_equal(f->sr.failed, 1);
	snprintf(p, sizeof(p), "%s/t/bad", f->dst);
	assert_int_equal(access(p, F_OK), -1);
	snprintf(p, sizeof(p), "%s/t/dir", f->dst);
	assert_int_equal(access(p, F_OK), 0);
	assert_int_equal(count_files(f->dst), 0);
	char msg[PROTO_MAX_MSG + 1];
	(void)pc_err_get(&f->so.e, msg, sizeof(msg));
}

static void test_reader_fails_small(void **state)
{
	reader_fails(*state, 1000);
}

static void test_reader_fails_big(void **state)
{
	reader_fails(*state, 2 * BLOCK + 1);
}

/* The destination fills up: the session fails with the sink's ENOSPC on
 * both sides, and no file is left under a final name. */
static void writer_fails(struct fixture *f, size_t len)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	for (unsigned i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/t/f%u", f->src, i);
		write_file(p, len, i);
	}
	fault_arm(FAULT_SINK_WRITE, 2);
	run_both(f, "t");
	assert_int_equal(f->si.ret, -ENOSPC);
	assert_int_equal(f->so.ret, -ENOSPC);
	assert_true(count_files(f->dst) < 4);
	/* What was finished before the failure is whole; nothing else is there. */
	for (unsigned i = 0; i < 4; i++) {
		char a[256];
		snprintf(p, sizeof(p), "%s/t/f%u", f->dst, i);
		snprintf(a, sizeof(a), "%s/t/f%u", f->src, i);
		if (access(p, F_OK) == 0)
			assert_same_file(a, p);
	}
}

static void test_writer_fails_pack(void **state)
{
	writer_fails(*state, 3000);
}

static void test_writer_fails_data(void **state)
{
	writer_fails(*state, 2 * BLOCK);
}

/* ---- The test plays one side by hand ------------------------------------ */

static void send_entries(struct ctl *c, uint32_t first, const struct proto_entry *e, unsigned n)
{
	struct proto_batch *b = malloc(sizeof(*b));
	struct proto_msg m;

	assert_non_null(b);
	proto_batch_init(b, first);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(proto_batch_add(b, &e[i]), 0);
	proto_batch_msg(b, &m);
	assert_int_equal(ctl_send(c, &m), 0);
	free(b);
}

static struct proto_entry *entry(struct proto_entry *e, uint32_t id, uint8_t type,
				 const char *path, uint64_t size, const char *target)
{
	memset(e, 0, sizeof(*e));
	e->id = id;
	e->type = type;
	e->mode = type == PROTO_ENT_DIR || type == PROTO_ENT_DIR_END ? 0755 : 0644;
	e->size = size;
	snprintf(e->path, sizeof(e->path), "%s", path);
	snprintf(e->target, sizeof(e->target), "%s", target ? target : "");
	return e;
}

/* Writes a block. Errors are ignored: a sink that refused what came
 * before has shut its data channels, and its verdict is what counts. */
static void send_block(int fd, const struct proto_block *h, const void *p)
{
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];

	proto_block_encode(h, hdr);
	if (platform_write_full(fd, hdr, sizeof(hdr)) == 0 && h->enc_len > 0)
		(void)platform_write_full(fd, p, h->enc_len);
}

/* A PACK of the given raw bytes (statuses and contents) covering span ids. */
static void send_pack(struct fixture *f, uint32_t first, uint32_t span, const uint8_t *raw,
		      uint32_t len)
{
	struct proto_block h = { .type = PROTO_BLK_PACK, .file_id = first, .offset = span,
				 .raw_len = len, .enc_len = len,
				 .checksum = proto_checksum(raw, len) };

	send_block(f->data[0][0], &h, raw);
}

static void send_end(struct fixture *f)
{
	struct proto_msg m = { .type = PROTO_END };
	struct proto_block end = { .type = PROTO_BLK_END };

	for (unsigned i = 0; i < STREAMS; i++)
		send_block(f->data[i][0], &end, NULL);
	(void)ctl_send(f->so.ctl, &m); /* see send_block */
}

/* The source vanishes after announcing a file: the sink fails with a
 * network error and leaves nothing behind. */
static void test_source_vanishes(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e;

	start_sink(f);
	send_entries(f->so.ctl, 0, entry(&e, 0, PROTO_ENT_REG, "f", 3 * BLOCK, NULL), 1);
	uint8_t *p = calloc(1, BLOCK);
	assert_non_null(p);
	p[0] = 1;
	struct proto_block h = { .type = PROTO_BLK_DATA, .file_id = 0, .offset = 0,
				 .raw_len = BLOCK, .enc_len = BLOCK,
				 .checksum = proto_checksum(p, BLOCK) };
	send_block(f->data[0][0], &h, p);
	free(p);
	ctl_free(f->so.ctl);
	f->so.ctl = NULL;
	for (unsigned i = 0; i < STREAMS; i++)
		shutdown(f->data[i][0], SHUT_RDWR);
	assert_int_equal(join_sink(f), -PC_E_NET);
	assert_int_equal(count_files(f->dst), 0);
}

/* The sink vanishes after the first ENTRIES: the source fails with a
 * network error. */
static void test_sink_vanishes(void **state)
{
	struct fixture *f = *state;
	char p[256];
	struct proto_msg m;

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/t/f", f->src);
	write_file(p, 5 * BLOCK, 3);
	f->paths[0] = (struct source_path){ .path = "t" };
	f->in = (struct source_input){ .dirfd = open(f->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
				       .paths = f->paths, .npaths = 1,
				       .walk = { .recursive = true } };
	/* Nobody reads the data channels: the sink is gone. */
	for (unsigned i = 0; i < STREAMS; i++)
		shutdown(f->data[i][1], SHUT_RDWR);
	ctl_free(f->si.ctl);
	f->si.ctl = NULL;
	f->so.ret = source_run(&f->so.x, &f->in, &f->rr);
	close(f->in.dirfd);
	assert_int_equal(f->so.ret, -PC_E_NET);
	(void)m;
}

/* Runs the sink against what the caller sends, and expects it to fail
 * with -PC_E_PROTO leaving no file behind. */
static void expect_refused(struct fixture *f)
{
	assert_int_equal(join_sink(f), -PC_E_PROTO);
	assert_int_equal(count_files(f->dst), 0);
	assert_int_equal(count_files(f->outside), 0);
}

/* A pack whose sizes do not add up. */
static void test_lying_pack(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e;
	uint8_t raw[4 + 11] = { 0 };

	start_sink(f);
	send_entries(f->so.ctl, 0, entry(&e, 0, PROTO_ENT_REG, "a", 10, NULL), 1);
	memset(raw + 4, 'x', 11);
	send_pack(f, 0, 1, raw, sizeof(raw));
	send_end(f);
	expect_refused(f);
}

/* A file said to travel in DATA blocks (status 1), then carried by a
 * second pack. */
static void test_pack_twice(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e[2];
	uint8_t raw[8 + 4] = { 0 };
	uint8_t *two = calloc(1, 4 + 5000);

	assert_non_null(two);
	start_sink(f);
	entry(&e[0], 0, PROTO_ENT_REG, "a", 4, NULL);
	entry(&e[1], 1, PROTO_ENT_REG, "b", 5000, NULL);
	send_entries(f->so.ctl, 0, e, 2);
	memcpy(raw + 8, "abcd", 4);
	raw[7] = 1; /* b travels in DATA blocks */
	send_pack(f, 0, 2, raw, sizeof(raw));
	send_pack(f, 1, 1, two, 4 + 5000);
	free(two);
	send_end(f);
	assert_int_equal(join_sink(f), -PC_E_PROTO);
}

/* A DATA block for a directory (still in the table: the file announced
 * before it holds the watermark back). */
static void test_block_for_dir(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e[2];
	uint8_t p[16] = { 0 };

	start_sink(f);
	entry(&e[0], 0, PROTO_ENT_REG, "f", 100, NULL);
	entry(&e[1], 1, PROTO_ENT_DIR, "d", 0, NULL);
	send_entries(f->so.ctl, 0, e, 2);
	struct proto_block h = { .type = PROTO_BLK_DATA, .file_id = 1, .offset = 0,
				 .raw_len = 16, .enc_len = 16, .checksum = proto_checksum(p, 16) };
	send_block(f->data[0][0], &h, p);
	send_end(f);
	expect_refused(f);
}

/* ENTRIES that skip an id. */
static void test_entries_out_of_order(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e;

	start_sink(f);
	send_entries(f->so.ctl, 1, entry(&e, 1, PROTO_ENT_REG, "a", 10, NULL), 1);
	send_end(f);
	expect_refused(f);
}

/* More entries in flight than PROTO_MAX_INFLIGHT: the files never finish
 * (no block comes), so the sink's table would have to grow. */
static void test_inflight_bound(void **state)
{
	struct fixture *f = *state;
	struct proto_batch *b = malloc(sizeof(*b));
	struct proto_entry e;
	struct proto_msg m;
	uint32_t id = 0;

	assert_non_null(b);
	start_sink(f);
	proto_batch_init(b, 0);
	while (id <= PROTO_MAX_INFLIGHT) {
		char name[32];
		snprintf(name, sizeof(name), "f%u", (unsigned)id);
		int ret = proto_batch_add(b, entry(&e, id, PROTO_ENT_REG, name, 1000, NULL));
		if (ret == -ENOSPC) {
			proto_batch_msg(b, &m);
			assert_int_equal(ctl_send(f->so.ctl, &m), 0);
			proto_batch_init(b, id);
			continue;
		}
		assert_int_equal(ret, 0);
		id++;
	}
	proto_batch_msg(b, &m);
	assert_int_equal(ctl_send(f->so.ctl, &m), 0);
	free(b);
	expect_refused(f);
	char msg[PROTO_MAX_MSG + 1];
	(void)pc_err_get(&f->si.e, msg, sizeof(msg));
	assert_non_null(strstr(msg, "ahead of what is finished"));
}

/* Names of more than PROTO_MAX_INFLIGHT_BYTES in flight: long paths of
 * files that never finish. */
static void test_inflight_bytes_bound(void **state)
{
	struct fixture *f = *state;
	struct proto_batch *b = malloc(sizeof(*b));
	struct proto_entry *e = malloc(sizeof(*e));
	struct proto_msg m;
	uint64_t bytes = 0;
	uint32_t id = 0;

	assert_non_null(b);
	assert_non_null(e);
	start_sink(f);
	proto_batch_init(b, 0);
	while (bytes <= PROTO_MAX_INFLIGHT_BYTES) {
		entry(e, id, PROTO_ENT_REG, "", 1000, NULL);
		/* 16 components of 250 bytes: about 4 KB of path */
		size_t n = 0;
		for (unsigned c = 0; c < 16; c++)
			n += (size_t)snprintf(e->path + n, sizeof(e->path) - n, "%s%0250u",
					      c ? "/" : "", id + c);
		int ret = proto_batch_add(b, e);
		if (ret == -ENOSPC) {
			proto_batch_msg(b, &m);
			if (ctl_send(f->so.ctl, &m) < 0)
				break; /* refused already */
			proto_batch_init(b, id);
			continue;
		}
		assert_int_equal(ret, 0);
		bytes += proto_entry_bytes(e);
		id++;
	}
	proto_batch_msg(b, &m);
	(void)ctl_send(f->so.ctl, &m);
	free(b);
	free(e);
	assert_true(id < PROTO_MAX_INFLIGHT); /* the byte bound, not the count */
	expect_refused(f);
	char msg[PROTO_MAX_MSG + 1];
	(void)pc_err_get(&f->si.e, msg, sizeof(msg));
	assert_non_null(strstr(msg, "bytes of names ahead of what is finished"));
}

static void *source_thread(void *arg)
{
	struct fixture *f = arg;

	f->so.ret = source_run(&f->so.x, &f->in, &f->rr);
	return NULL;
}

/* The source's own window: a sink that never acknowledges gets at most
 * SOURCE_WINDOW_BYTES of encoded entries (and the entry that crossed it),
 * not the whole tree. An ssh in between would buffer whatever the source
 * sends ahead (source_int.h). */
static void test_source_window_bytes(void **state)
{
	struct fixture *f = *state;
	const unsigned nfiles = 6000; /* about 150 bytes each: 900 KB of entries */
	char p[256];
	uint64_t got = 0;
	uint32_t entries = 0;
	pthread_t tid;

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	for (unsigned i = 0; i < nfiles; i++) {
		snprintf(p, sizeof(p), "%s/t/%0100u", f->src, i);
		int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		assert_int_equal(close(fd), 0);
	}
	f->paths[0] = (struct source_path){ .path = "t" };
	f->in = (struct source_input){ .dirfd = open(f->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
				       .paths = f->paths, .npaths = 1,
				       .walk = { .recursive = true } };
	assert_true(f->in.dirfd >= 0);
	assert_int_equal(pthread_create(&tid, NULL, source_thread, f), 0);
	/* Read what comes until the source has been quiet for half a second
	 * with its window full, or for 20 s before that (a slow walk under a
	 * sanitizer on a loaded machine must not end the reading early). */
	for (;;) {
		struct pollfd pf = { .fd = ctl_rfd(f->si.ctl), .events = POLLIN };
		struct proto_msg m;
		int quiet_ms = got >= SOURCE_WINDOW_BYTES ? 500 : 20000;

		if (!ctl_pending(f->si.ctl) && poll(&pf, 1, quiet_ms) == 0)
			break;
		if (ctl_recv(f->si.ctl, &m) < 0 || m.type != PROTO_ENTRIES)
			break; /* wrong: the checks below say so, once the source is stopped */
		got += m.u.entries.body_len;
		entries += m.u.entries.count;
	}
	/* The sink goes away; the source stops. */
	ctl_free(f->si.ctl);
	f->si.ctl = NULL;
	assert_int_equal(pthread_join(tid, NULL), 0);
	close(f->in.dirfd);
	assert_int_equal(f->so.ret, -PC_E_NET);
	assert_true(got >= SOURCE_WINDOW_BYTES);
	assert_true(got < SOURCE_WINDOW_BYTES + 512);
	assert_true(entries < nfiles);
}

/* A symlink the tree itself carries, then a file, a directory and a link
 * through it: each fails, nothing is written outside. */
static void test_symlink_escape(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e[6];
	uint8_t raw[4 * 4 + 5] = { 0 };

	start_sink(f);
	entry(&e[0], 0, PROTO_ENT_DIR, "t", 0, NULL);
	entry(&e[1], 1, PROTO_ENT_SYMLINK, "t/a", 0, f->outside);
	entry(&e[2], 2, PROTO_ENT_REG, "t/a/passwd", 5, NULL);
	entry(&e[3], 3, PROTO_ENT_DIR, "t/a/sub", 0, NULL);
	entry(&e[4], 4, PROTO_ENT_SYMLINK, "t/a/l", 0, "/etc");
	entry(&e[5], 5, PROTO_ENT_DIR_END, "t", 0, NULL);
	send_entries(f->so.ctl, 0, e, 6);
	memcpy(raw + 16, "owned", 5);
	send_pack(f, 1, 4, raw, sizeof(raw));
	send_end(f);
	assert_int_equal(join_sink(f), -PC_E_PARTIAL);
	assert_int_equal(f->sr.failed, 3);
	assert_int_equal(count_files(f->outside), 0);
	DIR *d = opendir(f->outside);
	struct dirent *de;
	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			fail_msg("'%s' appeared outside the destination", de->d_name);
	closedir(d);
}

/* ---- -u: the sink keeps what it has ------------------------------------ */

/* Both sides with -u, src/t copied before by hand (cp -a: same sizes and
 * mtimes), except that d/big's copy has another mtime and the copies of
 * small7 and small9 are missing: exactly those three travel (the two
 * small ones in PACKs that span no kept file), the other
 * 50 files are kept (the source leaves out the 49 with contents), and the
 * copies of the three get the source's mtime though -p is not given. */
static void test_update_keeps(void **state)
{
	struct fixture *f = *state;
	char cmd[512], a[256], b[256];
	struct stat sa, sb;

	make_tree(f);
	snprintf(cmd, sizeof(cmd), "cp -a '%s/t' '%s/t'", f->src, f->dst);
	assert_int_equal(system(cmd), 0);
	snprintf(b, sizeof(b), "%s/t/d/big", f->dst);
	snprintf(cmd, sizeof(cmd), "touch -d '2001-02-03' '%s'", b);
	assert_int_equal(system(cmd), 0);
	snprintf(b, sizeof(b), "%s/t/small7", f->dst);
	assert_int_equal(unlink(b), 0);
	snprintf(b, sizeof(b), "%s/t/small9", f->dst);
	assert_int_equal(unlink(b), 0);
	f->so.x.update = f->si.x.update = true;
	run_both(f, "t");
	assert_int_equal(f->so.ret, 0);
	assert_int_equal(f->si.ret, 0);
	assert_int_equal(f->sr.self.files, 3);
	assert_int_equal(f->sr.self.unchanged, 50);
	assert_int_equal(f->rr.self.unchanged, 49); /* the empty file has no bit */
	assert_int_equal(f->sr.self.bytes, 3 * BLOCK + 123 + 107 + 109);
	for (unsigned i = 0; i < 3; i++) {
		static const char *const name[] = { "d/big", "small7", "small9" };
		snprintf(a, sizeof(a), "%s/t/%s", f->src, name[i]);
		snprintf(b, sizeof(b), "%s/t/%s", f->dst, name[i]);
		assert_same_file(a, b);
		assert_int_equal(stat(a, &sa), 0);
		assert_int_equal(stat(b, &sb), 0);
		assert_int_equal(sa.st_mtim.tv_sec, sb.st_mtim.tv_sec);
		assert_int_equal(sa.st_mtim.tv_nsec, sb.st_mtim.tv_nsec);
	}
}

/* The sink's answers, played by hand against a source with -u: each
 * script (one HAVE, or an ACK) must end the source with -PC_E_PROTO. */
struct have_script {
	uint32_t first_id;   /* of the HAVE; the ENTRIES' is 0 */
	uint16_t count;
	uint8_t bits;        /* bits[0] */
	bool ack_first;      /* send ACK(upto count) instead, before any HAVE */
	bool list;           /* send LIST (GONE) instead, to a source ... */
	bool report, dry;    /* ... that is the client (report), in a dry run */
};

static void have_refused(struct fixture *f, const struct have_script *sc)
{
	char p[256];
	struct proto_msg m;
	pthread_t tid;

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/t/f", f->src); /* entries: 0 t, 1 t/f, 2 the end of t */
	write_file(p, 2 * BLOCK, 5);
	f->paths[0] = (struct source_path){ .path = "t" };
	f->in = (struct source_input){ .dirfd = open(f->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
				       .paths = f->paths, .npaths = 1,
				       .walk = { .recursive = true } };
	f->so.x.update = true;
	f->so.x.report = sc->report;
	f->so.x.dry_run = sc->dry;
	assert_int_equal(pthread_create(&tid, NULL, source_thread, f), 0);
	assert_int_equal(ctl_recv(f->si.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_ENTRIES);
	assert_int_equal(m.u.entries.count, 3);
	memset(&m, 0, sizeof(m));
	if (sc->ack_first) {
		m.type = PROTO_ACK;
		m.u.ack.upto = sc->count;
	} else if (sc->list) {
		m.type = PROTO_LIST;
		m.u.list.what = PROTO_LIST_GONE;
		strcpy(m.u.list.path, "t/x");
	} else {
		m.type = PROTO_HAVE;
		m.u.have = (struct proto_have){ .first_id = sc->first_id, .count = sc->count };
		m.u.have.bits[0] = sc->bits;
	}
	assert_int_equal(ctl_send(f->si.ctl, &m), 0);
	assert_int_equal(pthread_join(tid, NULL), 0);
	close(f->in.dirfd);
	assert_int_equal(f->so.ret, -PC_E_PROTO);
}

static void test_have_out_of_turn(void **state)
{
	have_refused(*state, &(struct have_script){ .first_id = 1, .count = 2 });
}

static void test_have_past_announced(void **state)
{
	have_refused(*state, &(struct have_script){ .first_id = 0, .count = 4 });
}

static void test_have_names_a_directory(void **state)
{
	have_refused(*state, &(struct have_script){ .count = 3, .bits = 0x1 });
}

static void test_ack_before_have(void **state)
{
	have_refused(*state, &(struct have_script){ .count = 3, .ack_first = true });
}

/* LIST (version 9) goes only to a client, in a dry run or with --delete:
 * a server acting as source refuses it even in a dry run, and a client
 * refuses it in a session that lists nothing. */
static void test_list_to_a_server(void **state)
{
	have_refused(*state, &(struct have_script){ .list = true, .dry = true });
}

static void test_list_unasked(void **state)
{
	have_refused(*state, &(struct have_script){ .list = true, .report = true });
}

/* A sink with -u keeps f; a DATA block for it then is a protocol error
 * (g, announced before it and never sent, holds the watermark back, so
 * f's record is still there to tell), and the kept file is left as it
 * was. */
static void test_block_for_kept(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e[2];
	struct proto_msg m;
	uint8_t p[16] = { 0 };
	char path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/f", f->dst);
	write_file(path, 16, 9);
	assert_int_equal(stat(path, &st), 0);
	f->si.x.update = true;
	start_sink(f);
	entry(&e[0], 0, PROTO_ENT_REG, "g", 100, NULL);
	entry(&e[1], 1, PROTO_ENT_REG, "f", 16, NULL);
	e[1].mtime_s = st.st_mtim.tv_sec;
	e[1].mtime_ns = (uint32_t)st.st_mtim.tv_nsec;
	send_entries(f->so.ctl, 0, e, 2);
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_HAVE);
	assert_int_equal(m.u.have.count, 2);
	assert_false(proto_have_bit(&m.u.have, 0));
	assert_true(proto_have_bit(&m.u.have, 1));
	struct proto_block h = { .type = PROTO_BLK_DATA, .file_id = 1, .offset = 0,
				 .raw_len = 16, .enc_len = 16, .checksum = proto_checksum(p, 16) };
	send_block(f->data[0][0], &h, p);
	send_end(f);
	assert_int_equal(join_sink(f), -PC_E_PROTO);
	char want[256];
	snprintf(want, sizeof(want), "%s/want", f->base);
	write_file(want, 16, 9);
	assert_same_file(want, path);
}

/* The sink's hashes, played by hand against a source with --checksum over
 * t/f (a file of `size` bytes; entries 0 t, 1 t/f, 2 the end of t): each
 * script must end the source with -PC_E_PROTO. `times` SUMS of `count`
 * hashes go out, each starting where the one before ended. */
struct sums_script {
	bool plain;          /* the source has -u but not --checksum */
	bool resume;         /* ... -a instead of --checksum */
	bool have_it;        /* then a HAVE that says the sink keeps t/f */
	bool dry;            /* ... in a dry run (-n) */
	uint32_t id;
	uint64_t first;
	uint16_t count;
	unsigned times;      /* 0: once */
	uint64_t size;       /* of t/f (made sparse, or cut); 0: 2 blocks */
};

static void sums_refused(struct fixture *f, const struct sums_script *sc)
{
	static uint8_t hashes[PROTO_MAX_SUMS * PROTO_SUM_LEN];
	char p[256];
	struct proto_msg m;
	pthread_t tid;
	int fd;

	snprintf(p, sizeof(p), "%s/t", f->src);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/t/f", f->src);
	write_file(p, 2 * BLOCK, 5);
	if (sc->size != 0) { /* sparse: nothing of it is read */
		fd = open(p, O_WRONLY);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, (off_t)sc->size), 0);
		close(fd);
	}
	f->paths[0] = (struct source_path){ .path = "t" };
	f->in = (struct source_input){ .dirfd = open(f->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
				       .paths = f->paths, .npaths = 1,
				       .walk = { .recursive = true } };
	f->so.x.update = true;
	f->so.x.checksum = !sc->plain && !sc->resume;
	f->so.x.resume = sc->resume;
	f->so.x.dry_run = sc->dry;
	assert_int_equal(pthread_create(&tid, NULL, source_thread, f), 0);
	assert_int_equal(ctl_recv(f->si.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_ENTRIES);
	assert_int_equal(m.u.entries.count, 3);
	for (unsigned i = 0; i < (sc->times ? sc->times : 1); i++) {
		m = (struct proto_msg){ .type = PROTO_SUMS };
		m.u.sums = (struct proto_sums){ .id = sc->id, .first = sc->first + (uint64_t)i * sc->count,
						.count = sc->count, .hashes = hashes };
		assert_int_equal(ctl_send(f->si.ctl, &m), 0);
	}
	if (sc->have_it) {
		m = (struct proto_msg){ .type = PROTO_HAVE };
		m.u.have.first_id = 0;
		m.u.have.count = 3;
		m.u.have.bits[0] = 0x2; /* entry 1, t/f */
		assert_int_equal(ctl_send(f->si.ctl, &m), 0);
	}
	assert_int_equal(pthread_join(tid, NULL), 0);
	close(f->in.dirfd);
	assert_int_equal(f->so.ret, -PC_E_PROTO);
}

static void test_sums_unasked(void **state)
{
	sums_refused(*state, &(struct sums_script){ .plain = true, .id = 1, .count = 1 });
}

/* A dry run reads nothing: hashes would make the source read. */
static void test_sums_in_a_dry_run(void **state)
{
	sums_refused(*state, &(struct sums_script){ .dry = true, .id = 1, .count = 1 });
}

static void test_sums_for_a_directory(void **state)
{
	sums_refused(*state, &(struct sums_script){ .id = 0, .count = 1 });
}

static void test_sums_not_from_block_0(void **state)
{
	sums_refused(*state, &(struct sums_script){ .id = 1, .first = 1, .count = 1 });
}

/* A file of at most a quarter block travels whole: no hash may name it. */
static void test_sums_for_a_small_file(void **state)
{
	sums_refused(*state, &(struct sums_script){ .id = 1, .count = 1, .size = BLOCK / 4 });
}

static void test_sums_past_the_file(void **state)
{
	sums_refused(*state, &(struct sums_script){ .id = 1, .count = 3 });
}

/* -a: the source reads a file at its first SUMS, ahead of its batch's
 * HAVE; a HAVE that then says the sink keeps that file is refused. */
static void test_resume_have_after_sums(void **state)
{
	sums_refused(*state, &(struct sums_script){ .resume = true, .id = 1, .count = 2,
						    .have_it = true });
}

/* PROTO_MAX_INFLIGHT_SUMS: a (sparse) file of more blocks than 64 MiB of
 * hashes cover; the source takes hashes up to the bound, and refuses the
 * SUMS that passes it. */
static void test_sums_bound(void **state)
{
	uint64_t fit = PROTO_MAX_INFLIGHT_SUMS / PROTO_SUM_LEN / PROTO_MAX_SUMS;

	sums_refused(*state, &(struct sums_script){
		.id = 1, .count = PROTO_MAX_SUMS, .times = (unsigned)fit + 1,
		.size = (fit + 1) * PROTO_MAX_SUMS * (uint64_t)BLOCK });
}

/* Starts a sink with --checksum (and -e with verify) and announces f, of 3
 * blocks (with old's mtime, if not NULL), and g, of 100 bytes, in one
 * batch. */
static void start_delta(struct fixture *f, bool verify, const struct stat *old)
{
	struct proto_entry e[2];

	f->si.x.update = f->si.x.checksum = true;
	f->si.x.verify = verify;
	start_sink(f);
	entry(&e[0], 0, PROTO_ENT_REG, "f", 3 * BLOCK, NULL);
	if (old != NULL) {
		e[0].mtime_s = old->st_mtim.tv_sec;
		e[0].mtime_ns = (uint32_t)old->st_mtim.tv_nsec;
	}
	entry(&e[1], 1, PROTO_ENT_REG, "g", 100, NULL);
	send_entries(f->so.ctl, 0, e, 2);
}

/* A sink with --checksum, where f has 2 blocks and 100 bytes of an old
 * version: it sends the hashes of those 2 whole blocks (SUMS) before the
 * HAVE, takes SAME blocks for them from the old file and a DATA block for
 * the third, and the new f is old[0, 2 blocks) + the new block. With
 * changed set, the old f is rewritten once its hashes are sent: the new f
 * holds the bytes hashed all the same, for it was filled with them as
 * they were hashed; with verify (-e) too, which reads them back from the
 * new f, not the old one. */
static void sink_same(struct fixture *f, bool changed, bool verify)
{
	struct proto_msg m;
	uint8_t sum[PROTO_SUM_LEN];
	char path[256], want[256];
	uint8_t *old = malloc(3 * BLOCK), *nb = malloc(BLOCK);
	int fd;

	assert_non_null(old);
	assert_non_null(nb);
	snprintf(path, sizeof(path), "%s/f", f->dst);
	write_file(path, 2 * BLOCK + 100, 9);
	fd = open(path, O_RDONLY);
	assert_int_equal(read(fd, old, 2 * BLOCK), 2 * BLOCK);
	close(fd);
	memset(nb, 0x5a, BLOCK);
	start_delta(f, verify, NULL);
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_SUMS);
	assert_int_equal(m.u.sums.id, 0);
	assert_true(m.u.sums.first == 0);
	assert_int_equal(m.u.sums.count, 2);
	for (unsigned k = 0; k < 2; k++) {
		proto_block_sum(old + (size_t)k * BLOCK, BLOCK, sum);
		assert_memory_equal(m.u.sums.hashes + k * PROTO_SUM_LEN, sum, PROTO_SUM_LEN);
	}
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_HAVE); /* g has no old version: no SUMS */
	assert_int_equal(m.u.have.count, 2);
	assert_int_equal(m.u.have.bits[0], 0);
	if (changed)
		write_file(path, 2 * BLOCK + 100, 10);
	for (unsigned k = 0; k < 2; k++) {
		struct proto_block h = { .type = PROTO_BLK_SAME, .file_id = 0,
					 .offset = (uint64_t)k * BLOCK, .raw_len = BLOCK, .seq = k,
					 .checksum = 0 };
		proto_block_sum(old + (size_t)k * BLOCK, BLOCK, sum);
		h.checksum = proto_sum_low(sum);
		send_block(f->data[0][0], &h, NULL);
	}
	struct proto_block h = { .type = PROTO_BLK_DATA, .file_id = 0, .offset = 2 * BLOCK,
				 .raw_len = BLOCK, .enc_len = BLOCK, .seq = 2,
				 .checksum = proto_checksum(nb, BLOCK) };
	send_block(f->data[0][0], &h, nb);
	h = (struct proto_block){ .type = PROTO_BLK_DATA, .file_id = 1, .raw_len = 100,
				  .enc_len = 100, .seq = 3, .checksum = proto_checksum(nb, 100) };
	send_block(f->data[0][0], &h, nb);
	send_end(f);
	assert_int_equal(join_sink(f), 0);
	assert_int_equal(f->sr.self.unchanged_bytes, 2 * BLOCK);
	snprintf(want, sizeof(want), "%s/want", f->base);
	fd = open(want, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, old, 2 * BLOCK), 2 * BLOCK);
	assert_int_equal(write(fd, nb, BLOCK), BLOCK);
	close(fd);
	assert_same_file(want, path);
	free(old);
	free(nb);
}

static void test_sink_same(void **state)
{
	sink_same(*state, false, false);
}

static void test_sink_same_changed(void **state)
{
	sink_same(*state, true, false);
}

static void test_sink_same_changed_verify(void **state)
{
	sink_same(*state, true, true);
}

/* How sink_owed ends f. */
enum owed_end { OWED_DATA, OWED_CHANGED, OWED_SAME };

/* A sink with --checksum, where f's old version is as big as the source's
 * (3 blocks) and as old: its copy owes the SAME blocks that come before any other
 * (sink_ent.owing), and writes them from the old file, checked against
 * their checksums, when the DATA block for the third comes (OWED_DATA: the
 * new f is old[0, 2 blocks) + the new block). OWED_CHANGED: the old f is
 * rewritten before that block, so the blocks owed no longer read as
 * hashed: f fails, by name, and stays as it is. OWED_SAME: the third comes
 * as SAME as well, and f stays where it is, the same inode. No copy is
 * left behind in any case. */
static void sink_owed(struct fixture *f, enum owed_end how)
{
	struct proto_msg m;
	uint8_t sum[PROTO_SUM_LEN];
	char path[256], want[256];
	uint8_t *old = malloc(3 * BLOCK), *nb = malloc(BLOCK);
	struct stat before, after;
	int fd;

	assert_non_null(old);
	assert_non_null(nb);
	snprintf(path, sizeof(path), "%s/f", f->dst);
	write_file(path, 3 * BLOCK, 9);
	fd = open(path, O_RDONLY);
	assert_int_equal(read(fd, old, 3 * BLOCK), 3 * BLOCK);
	close(fd);
	assert_int_equal(stat(path, &before), 0);
	memset(nb, 0x5a, BLOCK);
	start_delta(f, false, &before); /* owed: it looks unchanged */
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_SUMS);
	assert_int_equal(m.u.sums.count, 3);
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_HAVE);
	unsigned nsame = how == OWED_SAME ? 3 : 2;
	for (unsigned k = 0; k < nsame; k++) {
		struct proto_block h = { .type = PROTO_BLK_SAME, .file_id = 0,
					 .offset = (uint64_t)k * BLOCK, .raw_len = BLOCK, .seq = k };
		proto_block_sum(old + (size_t)k * BLOCK, BLOCK, sum);
		h.checksum = proto_sum_low(sum);
		send_block(f->data[0][0], &h, NULL);
	}
	if (how == OWED_CHANGED) {
		/* after the SAME blocks: the rewrite must not race their receiver,
		 * which owes them without reading; a fresh file, so that the sink's
		 * next open of the name finds it */
		snprintf(want, sizeof(want), "%s/f.new", f->dst);
		write_file(want, 3 * BLOCK, 10);
		assert_int_equal(rename(want, path), 0);
	}
	struct proto_block h = { .type = PROTO_BLK_DATA, .file_id = 0, .offset = 2 * BLOCK,
				 .raw_len = BLOCK, .enc_len = BLOCK, .seq = 2,
				 .checksum = proto_checksum(nb, BLOCK) };
	if (how != OWED_SAME)
		send_block(f->data[0][0], &h, nb);
	h = (struct proto_block){ .type = PROTO_BLK_DATA, .file_id = 1, .raw_len = 100,
				  .enc_len = 100, .seq = nsame + (how != OWED_SAME),
				  .checksum = proto_checksum(nb, 100) };
	send_block(f->data[0][0], &h, nb);
	send_end(f);
	snprintf(want, sizeof(want), "%s/want", f->base);
	fd = open(want, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	switch (how) {
	case OWED_DATA:
		assert_int_equal(join_sink(f), 0);
		assert_int_equal(write(fd, old, 2 * BLOCK), 2 * BLOCK);
		assert_int_equal(write(fd, nb, BLOCK), BLOCK);
		break;
	case OWED_CHANGED:
		assert_int_equal(join_sink(f), -PC_E_PARTIAL);
		assert_int_equal(f->sr.failed, 1);
		close(fd);
		snprintf(want, sizeof(want), "%s/want", f->base);
		write_file(want, 3 * BLOCK, 10);
		fd = -1;
		break;
	case OWED_SAME:
		assert_int_equal(join_sink(f), 0);
		assert_int_equal(f->sr.self.unchanged, 1);
		assert_int_equal(write(fd, old, 3 * BLOCK), 3 * BLOCK);
		assert_int_equal(stat(path, &after), 0);
		assert_int_equal(after.st_ino, before.st_ino); /* (given the entry's mtime) */
		break;
	}
	if (fd >= 0)
		close(fd);
	assert_same_file(want, path);
	assert_int_equal(count_files(f->dst), 2); /* f and g: no copy left behind */
	free(old);
	free(nb);
}

static void test_sink_owed(void **state)
{
	sink_owed(*state, OWED_DATA);
}

static void test_sink_owed_changed(void **state)
{
	sink_owed(*state, OWED_CHANGED);
}

static void test_sink_owed_same(void **state)
{
	sink_owed(*state, OWED_SAME);
}

/* A SAME block for a file the sink sent no hashes of is a protocol error. */
static void test_same_unasked(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e;
	struct proto_msg m;

	f->si.x.update = f->si.x.checksum = true;
	start_sink(f);
	send_entries(f->so.ctl, 0, entry(&e, 0, PROTO_ENT_REG, "g", BLOCK, NULL), 1);
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_HAVE);
	struct proto_block h = { .type = PROTO_BLK_SAME, .file_id = 0, .raw_len = BLOCK };
	send_block(f->data[0][0], &h, NULL);
	send_end(f);
	assert_int_equal(join_sink(f), -PC_E_PROTO);
}

/* Whether this process holds a descriptor of a file below dir (one
 * unlinked or unnamed included). */
static bool fd_open_below(const char *dir)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	bool found = false;

	assert_non_null(d);
	while (!found && (de = readdir(d)) != NULL) {
		char p[300], target[512];
		ssize_t n;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
		n = readlink(p, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		found = strncmp(target, dir, strlen(dir)) == 0 && target[strlen(dir)] == '/';
	}
	closedir(d);
	return found;
}

/* A PACK that carries a file whose old version the sink hashed, and made
 * its file already (--checksum's copy): refused, and nothing of it is
 * left (the old file as it was, no temporary file, no descriptor). */
static void test_pack_over_held(void **state)
{
	struct fixture *f = *state;
	struct proto_entry e;
	struct proto_msg m;
	char path[256], want[256];
	uint8_t *raw = calloc(1, 4 + BLOCK / 2);

	assert_non_null(raw);
	snprintf(path, sizeof(path), "%s/f", f->dst);
	write_file(path, BLOCK / 2, 4);
	f->si.x.update = f->si.x.checksum = true;
	start_sink(f);
	send_entries(f->so.ctl, 0, entry(&e, 0, PROTO_ENT_REG, "f", BLOCK / 2, NULL), 1);
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_SUMS);
	assert_int_equal(ctl_recv(f->so.ctl, &m), 0);
	assert_int_equal(m.type, PROTO_HAVE);
	memset(raw + 4, 'x', BLOCK / 2);
	send_pack(f, 0, 1, raw, 4 + BLOCK / 2);
	send_end(f);
	assert_int_equal(join_sink(f), -PC_E_PROTO);
	snprintf(want, sizeof(want), "%s/want", f->base);
	write_file(want, BLOCK / 2, 4);
	assert_same_file(want, path);
	assert_int_equal(count_files(f->dst), 1);
	assert_false(fd_open_below(f->dst));
	free(raw);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); /* a vanished peer is an error code, not a death */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tree_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_fails_small, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reader_fails_big, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_fails_pack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_writer_fails_data, setup, teardown),
		cmocka_unit_test_setup_teardown(test_source_vanishes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_vanishes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lying_pack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pack_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_block_for_dir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entries_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inflight_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inflight_bytes_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_source_window_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_escape, setup, teardown),
		cmocka_unit_test_setup_teardown(test_update_keeps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_have_out_of_turn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_have_past_announced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_have_names_a_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ack_before_have, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_to_a_server, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_unasked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_block_for_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_unasked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_in_a_dry_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_for_a_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_not_from_block_0, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_for_a_small_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resume_have_after_sums, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_past_the_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sums_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_same, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_owed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_owed_changed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_owed_same, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_same_changed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sink_same_changed_verify, setup, teardown),
		cmocka_unit_test_setup_teardown(test_same_unasked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pack_over_held, setup, teardown),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
