/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for ctl: every message type across a socketpair, concurrent
 * senders never interleaving frames, EOF and malformed frames, ctl_expect's
 * and error reporting. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testchan.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "wire/ctl.h"
#include "pipeline/xfer.h"
#include "sys/err.h"
#include "sys/platform.h"
#include "wire/proto.h"

/* A connected pair with a generous receive timeout, so that a broken test
 * fails instead of hanging. The timeout never decides a passing run. */
static void make_pair(int sv[2])
{
	struct timeval tv = { .tv_sec = 20, .tv_usec = 0 };

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
}

static void fill(uint8_t *p, size_t len, uint8_t start)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(start + i * 3);
}

static void stats_fill(struct proto_stats *s, uint64_t base)
{
	s->bytes = base + 1;
	s->wire_bytes = base + 2;
	s->files = base + 3;
	s->cpu_user_us = base + 4;
	s->cpu_sys_us = base + 5;
	s->maxrss_kb = base + 6;
	s->wall_us = UINT64_MAX - base;
	s->codec_cpu_us = base + 8;
	s->dirs = base + 9;
	s->links = UINT64_MAX - base - 10;
	s->unchanged = base + 11;
	s->unchanged_bytes = UINT64_MAX - base - 12;
}

/* A batch with one entry of every type, the strings at their limits in
 * places, starting at first_id. */
static void batch_every_type(struct proto_batch *b, uint32_t first_id)
{
	static struct proto_entry e;

	proto_batch_init(b, first_id);
	for (unsigned t = PROTO_ENT_REG; t < PROTO_ENT_TYPE_MAX; t++) {
		memset(&e, 0, sizeof(e));
		e.type = (uint8_t)t;
		e.mode = t == PROTO_ENT_DIR ? 0700 : 07777;
		e.uid = 1000 + t;
		e.gid = UINT32_MAX - t;
		e.mtime_s = -86400;
		e.mtime_ns = 999999999;
		e.atime_s = INT64_MAX;
		e.atime_ns = t;
		snprintf(e.path, sizeof(e.path), "top/sub dir/entry-%u", t);
		if (t == PROTO_ENT_REG) {
			e.flags = PROTO_ENT_LINKED;
			e.size = UINT64_MAX;
		}
		if (t == PROTO_ENT_HARDLINK)
			e.link_id = first_id;
		if (t == PROTO_ENT_CHR || t == PROTO_ENT_BLK)
			e.rdev = 0x0000000800000011ull;
		if (t == PROTO_ENT_SYMLINK)
			memset(e.target, 't', PROTO_MAX_PATH);
		if (t == PROTO_ENT_DIR || t == PROTO_ENT_DIR_END)
			strcpy(e.path, "top/sub dir");
		memset(e.user, 'u', t == PROTO_ENT_SOCK ? PROTO_MAX_NAME : 4);
		strcpy(e.group, t == PROTO_ENT_FIFO ? "" : "staff");
		assert_int_equal(proto_batch_add(b, &e), 0);
	}
}

/* proto.h is moving from one REQUEST path to a list of them
 * (PROTO_REQ_PATHS_BYTES); these two helpers build against either. */
static void request_set_path(struct proto_request *q, const char *path)
{
#ifdef PROTO_REQ_PATHS_BYTES
	assert_int_equal(proto_request_add_path(q, path), 0);
#else
	snprintf(q->path, sizeof(q->path), "%s", path);
#endif
}

static void request_paths_equal(const struct proto_request *a, const struct proto_request *b)
{
#ifdef PROTO_REQ_PATHS_BYTES
	assert_int_equal(a->npaths, b->npaths);
	for (unsigned i = 0; i < a->npaths; i++)
		assert_string_equal(proto_request_path(a, i), proto_request_path(b, i));
#else
	assert_string_equal(a->path, b->path);
#endif
}

/* One message of each type (and a few variants), all valid. */
static unsigned sample_msgs(struct proto_msg *out, unsigned cap)
{
	static char longpath[PROTO_MAX_PATH + 1];
	static struct proto_request reqs[2];
	static struct proto_batch batches[2];
	static struct proto_entry stream;
	unsigned n = 0;
	struct proto_msg *m;

	assert_true(cap >= 20);
	memset(out, 0, sizeof(*out) * cap);
	memset(reqs, 0, sizeof(reqs));

	m = &out[n++];
	m->type = PROTO_HELLO;
	m->u.hello.magic = PROTO_MAGIC;
	m->u.hello.version = 3;
	m->u.hello.min_version = 1;
	m->u.hello.caps = 0x80000001u;
	fill(m->u.hello.nonce, PROTO_NONCE_LEN, 1);

	m = &out[n++];
	m->type = PROTO_AUTH;
	fill(m->u.auth.mac, PROTO_MAC_LEN, 2);

	m = &out[n++];
	m->type = PROTO_KEY;
	fill(m->u.key.key, PROTO_KEY_LEN, 3);

	m = &out[n++];
	m->type = PROTO_REQUEST;
	m->u.request = &reqs[0];
	m->u.request->role = PROTO_ROLE_SOURCE;
	m->u.request->flags = PROTO_REQ_ORDERED | PROTO_REQ_DEST_STDOUT | PROTO_REQ_RECURSIVE |
			      PROTO_REQ_HARDLINKS;
	m->u.request->streams = PROTO_MAX_STREAMS;
	m->u.request->block_size = PROTO_MAX_BLOCK;
	m->u.request->window = 4u << 20;
	m->u.request->timeout_s = 30;
	m->u.request->nsources = 123456;
	request_set_path(m->u.request, "dir/with space/\xc3\xbc.txt");
	snprintf(m->u.request->codec, sizeof(m->u.request->codec), "zlib:1,lz4,bz2:9");

	/* The largest strings a REQUEST can carry. */
	m = &out[n++];
	m->type = PROTO_REQUEST;
	m->u.request = &reqs[1];
	m->u.request->role = PROTO_ROLE_SINK;
	m->u.request->streams = 1;
	m->u.request->block_size = PROTO_MIN_BLOCK;
	memset(longpath, 'p', PROTO_MAX_PATH);
	request_set_path(m->u.request, longpath);
	memset(m->u.request->codec, 'c', PROTO_MAX_CODEC_SPEC);

	m = &out[n++];
	m->type = PROTO_READY;
	m->u.ready.data_port = 65535;

	m = &out[n++];
	batch_every_type(&batches[0], 7);
	proto_batch_msg(&batches[0], m);

	/* The last id there is, a stream. */
	m = &out[n++];
	memset(&stream, 0, sizeof(stream));
	stream.type = PROTO_ENT_REG;
	stream.flags = PROTO_ENT_SIZE_UNKNOWN;
	stream.mode = 0644;
	stream.mtime_s = INT64_MAX;
	strcpy(stream.path, "stdin");
	proto_batch_init(&batches[1], UINT32_MAX);
	assert_int_equal(proto_batch_add(&batches[1], &stream), 0);
	proto_batch_msg(&batches[1], m);

	m = &out[n++];
	m->type = PROTO_FILE_END;
	m->u.file_end.id = 7;
	m->u.file_end.size = 1ull << 40;

	m = &out[n++];
	m->type = PROTO_FILE_DONE;
	m->u.file_done.id = 7;
	m->u.file_done.status = INT32_MIN;
	m->u.file_done.bytes = 12345;

	m = &out[n++];
	m->type = PROTO_FILE_DONE;
	m->u.file_done.id = 8;
	m->u.file_done.status = -PC_E_FILEIO;
	m->u.file_done.bytes = 0;
	memset(m->u.file_done.msg, 'm', PROTO_MAX_MSG);

	m = &out[n++];
	m->type = PROTO_END;
	stats_fill(&m->u.stats, 100);

	m = &out[n++];
	m->type = PROTO_DONE;
	stats_fill(&m->u.stats, 200);

	m = &out[n++];
	m->type = PROTO_ERROR;
	m->u.error.code = -PC_E_AUTH;
	snprintf(m->u.error.msg, sizeof(m->u.error.msg), "key mismatch");

	m = &out[n++];
	m->type = PROTO_SKIP;
	m->u.skip.index = PROTO_MAX_PATHS - 1;
	m->u.skip.status = -PC_E_FILEIO;
	memset(m->u.skip.msg, 's', PROTO_MAX_MSG);

	m = &out[n++];
	m->type = PROTO_FILE_FAIL;
	m->u.file_fail.id = 9;
	m->u.file_fail.status = -PC_E_FILEIO;
	memset(m->u.file_fail.msg, 'f', PROTO_MAX_MSG);

	m = &out[n++];
	m->type = PROTO_ACK;
	m->u.ack.upto = UINT32_MAX;

	m = &out[n++];
	m->type = PROTO_HAVE;
	m->u.have.first_id = UINT32_MAX - PROTO_MAX_BATCH;
	m->u.have.count = PROTO_MAX_BATCH;
	memset(m->u.have.bits, 0xa5, sizeof(m->u.have.bits));

	m = &out[n++];
	m->type = PROTO_LIST;
	m->u.list.what = PROTO_LIST_GONE;
	memset(m->u.list.path, 'g', PROTO_MAX_MSG);

	static uint8_t hashes[PROTO_MAX_SUMS * PROTO_SUM_LEN]; /* SUMS at its largest */
	for (size_t i = 0; i < sizeof(hashes); i++)
		hashes[i] = (uint8_t)(i * 7);
	m = &out[n++];
	m->type = PROTO_SUMS;
	m->u.sums.id = UINT32_MAX;
	m->u.sums.first = UINT64_MAX - PROTO_MAX_SUMS;
	m->u.sums.count = PROTO_MAX_SUMS;
	m->u.sums.hashes = hashes;

	m = &out[n++];
	m->type = PROTO_PROBE;
	m->u.probe.op = PROTO_PROBE_MARK;

	m = &out[n++];
	m->type = PROTO_PROBE_FIG;
	m->u.probe_fig.op = PROTO_PROBE_SIDE;
	m->u.probe_fig.ncodecs = PROTO_PROBE_MAX_CODECS;
	m->u.probe_fig.disk_bytes = UINT64_MAX;
	for (unsigned i = 0; i < PROTO_PROBE_MAX_CODECS; i++)
		m->u.probe_fig.codec[i] = (struct proto_probe_codec){
			PROTO_CODEC_LZ4, (uint8_t)(i + 1), PROTO_MAX_BLOCK, i, UINT64_MAX, i };
	return n;
}

static void stats_equal(const struct proto_stats *a, const struct proto_stats *b)
{
	assert_int_equal(a->bytes, b->bytes);
	assert_int_equal(a->wire_bytes, b->wire_bytes);
	assert_int_equal(a->files, b->files);
	assert_int_equal(a->cpu_user_us, b->cpu_user_us);
	assert_int_equal(a->cpu_sys_us, b->cpu_sys_us);
	assert_int_equal(a->maxrss_kb, b->maxrss_kb);
	assert_int_equal(a->wall_us, b->wall_us);
	assert_int_equal(a->codec_cpu_us, b->codec_cpu_us);
	assert_int_equal(a->dirs, b->dirs);
	assert_int_equal(a->links, b->links);
	assert_int_equal(a->unchanged, b->unchanged);
	assert_int_equal(a->unchanged_bytes, b->unchanged_bytes);
}

static void msg_equal(const struct proto_msg *a, const struct proto_msg *b)
{
	assert_int_equal(a->type, b->type);
	switch (a->type) {
	case PROTO_HELLO:
		assert_int_equal(a->u.hello.magic, b->u.hello.magic);
		assert_int_equal(a->u.hello.version, b->u.hello.version);
		assert_int_equal(a->u.hello.min_version, b->u.hello.min_version);
		assert_int_equal(a->u.hello.caps, b->u.hello.caps);
		assert_memory_equal(a->u.hello.nonce, b->u.hello.nonce, PROTO_NONCE_LEN);
		break;
	case PROTO_AUTH:
		assert_memory_equal(a->u.auth.mac, b->u.auth.mac, PROTO_MAC_LEN);
		break;
	case PROTO_KEY:
		assert_memory_equal(a->u.key.key, b->u.key.key, PROTO_KEY_LEN);
		break;
	case PROTO_REQUEST:
		assert_non_null(b->u.request);
		assert_int_equal(a->u.request->role, b->u.request->role);
		assert_int_equal(a->u.request->flags, b->u.request->flags);
		assert_int_equal(a->u.request->streams, b->u.request->streams);
		assert_int_equal(a->u.request->block_size, b->u.request->block_size);
		assert_int_equal(a->u.request->window, b->u.request->window);
		assert_int_equal(a->u.request->timeout_s, b->u.request->timeout_s);
		assert_int_equal(a->u.request->nsources, b->u.request->nsources);
		request_paths_equal(a->u.request, b->u.request);
		assert_string_equal(a->u.request->codec, b->u.request->codec);
		break;
	case PROTO_READY:
		assert_int_equal(a->u.ready.data_port, b->u.ready.data_port);
		break;
	case PROTO_ENTRIES:
		/* Checked entries, borrowed as they came: the bytes must match. */
		assert_int_equal(a->u.entries.first_id, b->u.entries.first_id);
		assert_int_equal(a->u.entries.count, b->u.entries.count);
		assert_int_equal(a->u.entries.body_len, b->u.entries.body_len);
		assert_memory_equal(a->u.entries.body, b->u.entries.body, a->u.entries.body_len);
		break;
	case PROTO_FILE_FAIL:
		assert_int_equal(a->u.file_fail.id, b->u.file_fail.id);
		assert_int_equal(a->u.file_fail.status, b->u.file_fail.status);
		assert_string_equal(a->u.file_fail.msg, b->u.file_fail.msg);
		break;
	case PROTO_ACK:
		assert_int_equal(a->u.ack.upto, b->u.ack.upto);
		break;
	case PROTO_PROBE:
	case PROTO_PROBE_FIG:
	case PROTO_HAVE:
		assert_memory_equal(&a->u, &b->u, sizeof(a->u));
		break;
	case PROTO_SUMS:
		assert_int_equal(a->u.sums.id, b->u.sums.id);
		assert_true(a->u.sums.first == b->u.sums.first);
		assert_int_equal(a->u.sums.count, b->u.sums.count);
		assert_memory_equal(a->u.sums.hashes, b->u.sums.hashes,
				    (size_t)a->u.sums.count * PROTO_SUM_LEN);
		break;
	case PROTO_LIST:
		assert_int_equal(a->u.list.what, b->u.list.what);
		assert_string_equal(a->u.list.path, b->u.list.path);
		break;
	case PROTO_FILE_END:
		assert_int_equal(a->u.file_end.id, b->u.file_end.id);
		assert_int_equal(a->u.file_end.size, b->u.file_end.size);
		break;
	case PROTO_FILE_DONE:
		assert_int_equal(a->u.file_done.id, b->u.file_done.id);
		assert_int_equal(a->u.file_done.status, b->u.file_done.status);
		assert_int_equal(a->u.file_done.bytes, b->u.file_done.bytes);
		assert_string_equal(a->u.file_done.msg, b->u.file_done.msg);
		break;
	case PROTO_END:
	case PROTO_DONE:
		stats_equal(&a->u.stats, &b->u.stats);
		break;
	case PROTO_ERROR:
		assert_int_equal(a->u.error.code, b->u.error.code);
		assert_string_equal(a->u.error.msg, b->u.error.msg);
		break;
	case PROTO_SKIP:
		assert_int_equal(a->u.skip.index, b->u.skip.index);
		assert_int_equal(a->u.skip.status, b->u.skip.status);
		assert_string_equal(a->u.skip.msg, b->u.skip.msg);
		break;
	default:
		fail_msg("unexpected type %u", a->type);
	}
}

static void test_free_null(void **state)
{
	(void)state;
	ctl_free(NULL);
}

static void test_every_type_both_ways(void **state)
{
	struct proto_msg msgs[32], got;
	struct ctl *a, *b;
	bool seen[PROTO_TYPE_MAX] = { false };
	unsigned n;
	int sv[2];

	(void)state;
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "server:7000", false);
	b = testchan_ctl(sv[1], sv[1], "client", false);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(ctl_rfd(a), sv[0]);
	assert_string_equal(ctl_peer(a), "server:7000");
	assert_string_equal(ctl_peer(b), "client");

	n = sample_msgs(msgs, 32);
	for (unsigned i = 0; i < n; i++) {
		seen[msgs[i].type] = true;
		assert_int_equal(ctl_send(a, &msgs[i]), 0);
		assert_int_equal(ctl_recv(b, &got), 0);
		msg_equal(&msgs[i], &got);
		assert_int_equal(ctl_send(b, &msgs[i]), 0);
		assert_int_equal(ctl_recv(a, &got), 0);
		msg_equal(&msgs[i], &got);
	}
	for (unsigned t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++)
		if (!seen[t])
			fail_msg("type %u not exercised", t);

	/* Several frames queued before the first is read. */
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(ctl_send(a, &msgs[i]), 0);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(ctl_recv(b, &got), 0);
		msg_equal(&msgs[i], &got);
	}
	ctl_free(a);
	ctl_free(b);
}

/* A REQUEST lands in storage the ctl owns: the same for every REQUEST it
 * receives, never the sender's, and good to forward as it is. */
static void test_request_storage(void **state)
{
	static struct proto_request q1, q2;
	struct proto_msg m = { .type = PROTO_REQUEST }, got, again;
	struct proto_request *first;
	struct ctl *a, *b;
	int sv[2];

	(void)state;
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "a", false);
	b = testchan_ctl(sv[1], sv[1], "b", false);
	assert_non_null(a);
	assert_non_null(b);
	q1 = (struct proto_request){ .role = PROTO_ROLE_SINK, .streams = 2, .block_size = 65536,
				     .flags = PROTO_REQ_PRESERVE | PROTO_REQ_DEREF };
	request_set_path(&q1, "one");
	q2 = q1;
	q2.flags = PROTO_REQ_NUMERIC_IDS;
	q2.npaths = 0;
	request_set_path(&q2, "two");
	request_set_path(&q2, "three");

	m.u.request = &q1;
	assert_int_equal(ctl_send(a, &m), 0);
	memset(&got, 0, sizeof(got));
	assert_int_equal(ctl_recv(b, &got), 0);
	first = got.u.request;
	assert_non_null(first);
	assert_ptr_not_equal(first, &q1);
	msg_equal(&m, &got);

	m.u.request = &q2;
	assert_int_equal(ctl_send(a, &m), 0);
	assert_int_equal(ctl_recv(b, &got), 0);
	assert_ptr_equal(got.u.request, first);
	msg_equal(&m, &got);
	assert_null(proto_request_path(got.u.request, 2));

	/* Forwarded from the ctl's storage, then put back and read again. */
	assert_int_equal(ctl_send(b, &got), 0);
	assert_int_equal(ctl_recv(a, &again), 0);
	msg_equal(&m, &again);
	ctl_unread(a, &again);
	assert_true(ctl_pending(a));
	assert_int_equal(ctl_recv(a, &again), 0);
	msg_equal(&m, &again);

	/* Sending a REQUEST without storage fails before the wire. */
	m.u.request = NULL;
	assert_int_equal(ctl_send(a, &m), -PC_E_PROTO);
	ctl_free(a);
	ctl_free(b);
}

/* A received ENTRIES borrows the receive buffer: it reads back whole, also
 * after ctl_unread, and forwards byte for byte (what a relay does). */
static void test_entries_borrowed(void **state)
{
	static struct proto_batch batch;
	static struct proto_entry e;
	struct proto_msg m, got, fwd;
	struct ctl *a, *b, *c, *d;
	unsigned seen = 0;
	size_t pos = 0;
	int sv[2], sv2[2], ret;

	(void)state;
	make_pair(sv);
	make_pair(sv2);
	a = testchan_ctl(sv[0], sv[0], "source", false);
	b = testchan_ctl(sv[1], sv[1], "relay", false);
	c = testchan_ctl(sv2[0], sv2[0], "relay", false);
	d = testchan_ctl(sv2[1], sv2[1], "sink", false);
	assert_true(a && b && c && d);
	batch_every_type(&batch, 40);
	proto_batch_msg(&batch, &m);
	assert_int_equal(ctl_send(a, &m), 0);
	assert_int_equal(ctl_recv(b, &got), 0);
	ctl_unread(b, &got);
	memset(&got, 0, sizeof(got));
	assert_int_equal(ctl_recv(b, &got), 0);
	msg_equal(&m, &got);
	assert_int_equal(ctl_send(c, &got), 0);
	assert_int_equal(ctl_recv(d, &fwd), 0);
	msg_equal(&m, &fwd);
	while ((ret = proto_entries_next(&fwd.u.entries, &pos, &e)) == 1) {
		assert_int_equal(e.id, 40 + seen);
		assert_int_equal(e.type, PROTO_ENT_REG + seen);
		seen++;
	}
	assert_int_equal(ret, 0);
	assert_int_equal(seen, PROTO_ENT_TYPE_MAX - PROTO_ENT_REG);
	ctl_free(a);
	ctl_free(b);
	ctl_free(c);
	ctl_free(d);
}

/* Separate fds for reading and writing, as with a child's pipes. */
static void test_pipes(void **state)
{
	int p1[2], p2[2];
	struct proto_msg m, got;
	struct ctl *a, *b;

	(void)state;
	assert_int_equal(pipe2(p1, O_CLOEXEC), 0);
	assert_int_equal(pipe2(p2, O_CLOEXEC), 0);
	a = testchan_ctl(p1[0], p2[1], "child", true);
	b = testchan_ctl(p2[0], p1[1], "parent", false);
	assert_non_null(a);
	assert_non_null(b);
	memset(&m, 0, sizeof(m));
	m.type = PROTO_FILE_END;
	m.u.file_end.id = 3;
	m.u.file_end.size = 99;
	assert_int_equal(ctl_send(a, &m), 0);
	assert_int_equal(ctl_recv(b, &got), 0);
	msg_equal(&m, &got);
	assert_int_equal(ctl_send(b, &m), 0);
	assert_int_equal(ctl_recv(a, &got), 0);
	msg_equal(&m, &got);
	/* ctl_free closes all four fds: the peer then sees EOF. */
	ctl_free(a);
	assert_int_equal(ctl_recv(b, &got), -PC_E_NET);
	ctl_free(b);
}

static void test_send_invalid(void **state)
{
	struct proto_msg m;
	struct ctl *a;
	int sv[2];

	(void)state;
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "peer", false);
	assert_non_null(a);
	memset(&m, 0, sizeof(m));
	m.type = 0;
	assert_int_equal(ctl_send(a, &m), -PC_E_PROTO);
	/* A HELLO without the magic fails its range check. */
	m.type = PROTO_HELLO;
	m.u.hello.version = 1;
	m.u.hello.min_version = 1;
	assert_int_equal(ctl_send(a, &m), -PC_E_PROTO);
	/* Nothing reached the wire. */
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(read(sv[1], &m, 1), -1);
	assert_int_equal(errno, EAGAIN);
	ctl_free(a);
	close(sv[1]);
}

/* ---- Concurrent senders ------------------------------------------------ */

#define SENDERS 4
#define PER_SENDER 400u

/* Message i of sender s: a FILE_DONE whose message length and bytes
 * depend on both, so that any interleaving breaks the framing or the
 * content. */
static void concurrent_msg(unsigned s, unsigned i, struct proto_msg *m)
{
	size_t len = 1 + (i * 997u + s * 131u) % PROTO_MAX_MSG;

	memset(m, 0, sizeof(*m));
	m->type = PROTO_FILE_DONE;
	m->u.file_done.id = s << 16 | i;
	m->u.file_done.status = -(int32_t)(1 + s);
	m->u.file_done.bytes = (uint64_t)i * s;
	memset(m->u.file_done.msg, 'a' + (int)s, len);
	m->u.file_done.msg[0] = (char)('0' + i % 10);
}

struct sender {
	struct ctl *c;
	unsigned id;
	int ret;              /* written by the thread, read after join */
};

static void *sender_main(void *arg)
{
	struct sender *sd = arg;
	struct proto_msg m;

	sd->ret = 0;
	for (unsigned i = 0; i < PER_SENDER && sd->ret == 0; i++) {
		concurrent_msg(sd->id, i, &m);
		sd->ret = ctl_send(sd->c, &m);
	}
	return NULL;
}

static void test_concurrent_send(void **state)
{
	struct sender sd[SENDERS];
	pthread_t th[SENDERS];
	unsigned next[SENDERS] = { 0 };
	struct proto_msg got, want;
	struct ctl *a, *b;
	int sv[2], small = 4096;

	(void)state;
	make_pair(sv);
	/* A small send buffer: big frames go out in several pieces. */
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	a = testchan_ctl(sv[0], sv[0], "receiver", false);
	b = testchan_ctl(sv[1], sv[1], "senders", false);
	assert_non_null(a);
	assert_non_null(b);
	for (unsigned s = 0; s < SENDERS; s++) {
		sd[s].c = a;
		sd[s].id = s;
		sd[s].ret = 99;
		assert_int_equal(pthread_create(&th[s], NULL, sender_main, &sd[s]), 0);
	}
	for (unsigned k = 0; k < SENDERS * PER_SENDER; k++) {
		int ret = ctl_recv(b, &got);

		if (ret != 0)
			fail_msg("message %u: %s", k, pc_strerror(ret));
		assert_int_equal(got.type, PROTO_FILE_DONE);
		unsigned s = got.u.file_done.id >> 16;

		assert_true(s < SENDERS);
		/* Each sender's messages arrive whole and in its order. */
		assert_int_equal(got.u.file_done.id & 0xffff, next[s]);
		concurrent_msg(s, next[s], &want);
		msg_equal(&want, &got);
		next[s]++;
	}
	for (unsigned s = 0; s < SENDERS; s++) {
		assert_int_equal(pthread_join(th[s], NULL), 0);
		assert_int_equal(sd[s].ret, 0);
		assert_int_equal(next[s], PER_SENDER);
	}
	ctl_free(a);
	ctl_free(b);
}

/* ---- EOF and malformed frames ------------------------------------------ */

static void frame_hdr(uint8_t hdr[PROTO_FRAME_HDR_LEN], uint8_t type, uint8_t flags,
		      uint16_t reserved, uint32_t len)
{
	hdr[0] = type;
	hdr[1] = flags;
	hdr[2] = (uint8_t)(reserved >> 8);
	hdr[3] = (uint8_t)reserved;
	hdr[4] = (uint8_t)(len >> 24);
	hdr[5] = (uint8_t)(len >> 16);
	hdr[6] = (uint8_t)(len >> 8);
	hdr[7] = (uint8_t)len;
}

/* Writes bytes to a raw fd (optionally closing it) and returns what the
 * ctl on the other end makes of them. */
static int recv_after(const void *bytes, size_t len, bool close_after)
{
	struct proto_msg m;
	struct ctl *c;
	int sv[2], ret;

	make_pair(sv);
	c = testchan_ctl(sv[0], sv[0], "peer", false);
	assert_non_null(c);
	if (len > 0)
		assert_int_equal(platform_write_full(sv[1], bytes, len), 0);
	if (close_after)
		close(sv[1]);
	ret = ctl_recv(c, &m);
	ctl_free(c);
	if (!close_after)
		close(sv[1]);
	return ret;
}

static void test_eof(void **state)
{
	uint8_t frame[64];
	struct proto_msg m, got;
	struct ctl *a;
	int sv[2], n;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_FILE_END;
	m.u.file_end.id = 1;
	m.u.file_end.size = 2;
	n = proto_encode(&m, frame, sizeof(frame));
	assert_true(n > (int)PROTO_FRAME_HDR_LEN);

	/* At a boundary: nothing at all. */
	assert_int_equal(recv_after(NULL, 0, true), -PC_E_NET);
	/* Inside the header. */
	assert_int_equal(recv_after(frame, 3, true), -PC_E_NET);
	/* After the header, inside the payload. */
	assert_int_equal(recv_after(frame, PROTO_FRAME_HDR_LEN, true), -PC_E_NET);
	assert_int_equal(recv_after(frame, (size_t)n - 1, true), -PC_E_NET);
	/* A whole frame then EOF: the frame, then -PC_E_NET. */
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "peer", false);
	assert_non_null(a);
	assert_int_equal(platform_write_full(sv[1], frame, (size_t)n), 0);
	close(sv[1]);
	assert_int_equal(ctl_recv(a, &got), 0);
	msg_equal(&m, &got);
	assert_int_equal(ctl_recv(a, &got), -PC_E_NET);
	assert_int_equal(ctl_recv(a, &got), -PC_E_NET);
	ctl_free(a);
}

static void test_malformed(void **state)
{
	uint8_t buf[PROTO_FRAME_HDR_LEN + 16], hello[PROTO_FRAME_HDR_LEN + 44];

	(void)state;
	memset(buf, 0, sizeof(buf));
	/* Unknown types. */
	frame_hdr(buf, 0, 0, 0, 0);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN, false), -PC_E_PROTO);
	frame_hdr(buf, PROTO_TYPE_MAX, 0, 0, 0);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN, false), -PC_E_PROTO);
	frame_hdr(buf, 0xff, 0, 0, 0);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN, false), -PC_E_PROTO);
	/* Flags and reserved bits. */
	frame_hdr(buf, PROTO_FILE_END, 1, 0, 12);
	assert_int_equal(recv_after(buf, sizeof(buf), false), -PC_E_PROTO);
	frame_hdr(buf, PROTO_FILE_END, 0, 0x8000, 12);
	assert_int_equal(recv_after(buf, sizeof(buf), false), -PC_E_PROTO);
	/* A length over the limit is refused from the header alone. */
	frame_hdr(buf, PROTO_FILE_END, 0, 0, PROTO_MAX_PAYLOAD + 1);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN, false), -PC_E_PROTO);
	frame_hdr(buf, PROTO_FILE_END, 0, 0, UINT32_MAX);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN, false), -PC_E_PROTO);
	/* FILE_END is 12 bytes: shorter and longer payloads are refused. */
	frame_hdr(buf, PROTO_FILE_END, 0, 0, 11);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN + 11, false), -PC_E_PROTO);
	frame_hdr(buf, PROTO_FILE_END, 0, 0, 13);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN + 13, false), -PC_E_PROTO);
	frame_hdr(buf, PROTO_FILE_END, 0, 0, 12);
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN + 12, false), 0);
	/* A HELLO of the right length but without the magic. */
	memset(hello, 0, sizeof(hello));
	frame_hdr(hello, PROTO_HELLO, 0, 0, 44);
	hello[PROTO_FRAME_HDR_LEN + 5] = 1;   /* version 1 */
	hello[PROTO_FRAME_HDR_LEN + 7] = 1;   /* min_version 1 */
	assert_int_equal(recv_after(hello, sizeof(hello), false), -PC_E_PROTO);
	/* An ERROR with a positive code. */
	frame_hdr(buf, PROTO_ERROR, 0, 0, 6);
	buf[8] = 0;
	buf[9] = 0;
	buf[10] = 0;
	buf[11] = 5;
	buf[12] = 0;
	buf[13] = 0;
	assert_int_equal(recv_after(buf, PROTO_FRAME_HDR_LEN + 6, false), -PC_E_PROTO);
}

/* ---- ctl_expect --------------------------------------------------------- */

struct expect_result {
	int ret;
	int code;
	char msg[1024];
	struct proto_msg m;
};

/* Has the peer send m (or an ERROR via ctl_send_error when m is NULL) and
 * runs ctl_expect(want) on a ctl named "srv:7000" with the given local. */
static void expect_after(const struct proto_msg *m, int err_code, const char *err_msg,
			 bool local, uint8_t want, struct expect_result *r)
{
	struct pc_err e;
	struct ctl *a, *b;
	int sv[2];

	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "srv:7000", local);
	b = testchan_ctl(sv[1], sv[1], "client", false);
	assert_non_null(a);
	assert_non_null(b);
	if (m != NULL)
		assert_int_equal(ctl_send(b, m), 0);
	else
		assert_int_equal(ctl_send_error(b, err_code, err_msg), 0);
	pc_err_init(&e);
	r->ret = ctl_expect(a, want, &r->m, &e);
	r->code = pc_err_get(&e, r->msg, sizeof(r->msg));
	pc_err_destroy(&e);
	ctl_free(a);
	ctl_free(b);
}

static void test_expect_ok(void **state)
{
	struct expect_result r;
	struct proto_msg m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_READY;
	m.u.ready.data_port = 4242;
	expect_after(&m, 0, NULL, false, PROTO_READY, &r);
	assert_int_equal(r.ret, 0);
	assert_int_equal(r.code, 0);
	msg_equal(&m, &r.m);
}

static void test_expect_peer_error(void **state)
{
	struct expect_result r;

	(void)state;
	expect_after(NULL, -PC_E_FILEIO, "no space left on /data", false, PROTO_READY, &r);
	assert_int_equal(r.ret, -PC_E_FILEIO);
	assert_int_equal(r.code, -PC_E_FILEIO);
	assert_string_equal(r.msg, "srv:7000: no space left on /data");
	assert_int_equal(r.m.type, PROTO_ERROR);

	/* Our own child: its message as it is. */
	expect_after(NULL, -PC_E_FILEIO, "no space left on /data", true, PROTO_READY, &r);
	assert_int_equal(r.ret, -PC_E_FILEIO);
	assert_string_equal(r.msg, "no space left on /data");

	/* ctl_send_error makes a positive code negative. */
	expect_after(NULL, PC_E_AUTH, "wrong key", false, PROTO_HELLO, &r);
	assert_int_equal(r.ret, -PC_E_AUTH);
	assert_string_equal(r.msg, "srv:7000: wrong key");

	/* An errno code travels too. */
	expect_after(NULL, -EACCES, "cannot write", true, PROTO_DONE, &r);
	assert_int_equal(r.ret, -EACCES);

	/* An ERROR with code 0 must not read as success. */
	expect_after(NULL, 0, "odd", false, PROTO_DONE, &r);
	assert_int_equal(r.ret, -PC_E_PROTO);
	assert_int_equal(r.code, -PC_E_PROTO);
	assert_non_null(strstr(r.msg, "odd"));

	/* Expecting an ERROR is allowed and still reports it. */
	expect_after(NULL, -PC_E_NET, "bye", true, PROTO_ERROR, &r);
	assert_int_equal(r.ret, -PC_E_NET);
	assert_string_equal(r.msg, "bye");
}

static void test_expect_unexpected_type(void **state)
{
	struct expect_result r;
	struct proto_msg m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_READY;
	m.u.ready.data_port = 1;
	expect_after(&m, 0, NULL, false, PROTO_ENTRIES, &r);
	assert_int_equal(r.ret, -PC_E_PROTO);
	assert_int_equal(r.code, -PC_E_PROTO);
	assert_non_null(strstr(r.msg, "srv:7000"));
	assert_non_null(strstr(r.msg, "READY"));
	assert_non_null(strstr(r.msg, "ENTRIES"));
}

static void test_expect_eof(void **state)
{
	struct proto_msg m;
	struct pc_err e;
	struct ctl *a;
	char msg[1024];
	int sv[2];

	(void)state;
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "srv:7000", false);
	assert_non_null(a);
	close(sv[1]);
	pc_err_init(&e);
	assert_int_equal(ctl_expect(a, PROTO_HELLO, &m, &e), -PC_E_NET);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_NET);
	assert_non_null(strstr(msg, "srv:7000"));
	pc_err_destroy(&e);
	ctl_free(a);
}

/* A peer that trickles a frame, a byte every 200 ms, cannot hold a
 * receiver with a deadline past it; without one, the frame arrives. Also a
 * message put back with ctl_unread comes first. */
struct trickle {
	int fd;
	unsigned bytes;            /* how many of the frame to send */
	unsigned gap_ms;           /* between two bytes */
};

static void *trickle_main(void *arg)
{
	const struct trickle *t = arg;
	uint8_t frame[64];
	struct proto_msg m = { .type = PROTO_AUTH };
	int len;

	fill(m.u.auth.mac, sizeof(m.u.auth.mac), 5);
	len = proto_encode(&m, frame, sizeof(frame));
	for (unsigned i = 0; i < t->bytes && (int)i < len; i++) {
		if (write(t->fd, frame + i, 1) != 1)
			break;
		usleep(t->gap_ms * 1000);
	}
	return NULL;
}

static void test_deadline(void **state)
{
	struct trickle t;
	struct proto_msg m, back = { .type = PROTO_END };
	struct ctl *a;
	pthread_t th;
	int sv[2];

	(void)state;
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "srv:7000", false);
	assert_non_null(a);
	t = (struct trickle){ .fd = sv[1], .bytes = 8, .gap_ms = 200 };
	assert_int_equal(pthread_create(&th, NULL, trickle_main, &t), 0);
	uint64_t t0 = platform_now_ns();
	ctl_set_deadline(a, 1);
	assert_int_equal(ctl_recv(a, &m), -PC_E_TIMEOUT);
	uint64_t took = platform_now_ns() - t0;
	assert_true(took >= 900000000u && took < 3000000000u);
	assert_int_equal(pthread_join(th, NULL), 0);
	ctl_free(a);
	close(sv[1]);

	/* No deadline: the slow frame is read whole, after what was put back. */
	make_pair(sv);
	a = testchan_ctl(sv[0], sv[0], "srv:7000", false);
	assert_non_null(a);
	t = (struct trickle){ .fd = sv[1], .bytes = 64, .gap_ms = 10 };
	assert_int_equal(pthread_create(&th, NULL, trickle_main, &t), 0);
	ctl_set_deadline(a, 1);
	ctl_set_deadline(a, 0);
	ctl_unread(a, &back);
	assert_true(ctl_pending(a));
	assert_int_equal(ctl_recv(a, &m), 0);
	assert_int_equal(m.type, PROTO_END);
	assert_false(ctl_pending(a));
	assert_int_equal(ctl_recv(a, &m), 0);
	assert_int_equal(m.type, PROTO_AUTH);
	assert_int_equal(pthread_join(th, NULL), 0);
	ctl_free(a);
	close(sv[1]);
}

/* Bytes a chan already holds (TLS keeps what it has decrypted) are not
 * seen by poll on its fd: ctl_pending must say so, and a loop that waits
 * with poll must take them rather than sleep. Here the fake chan of
 * testchan.h holds an ERROR and a DONE frame, and its socket stays silent. */
static struct ctl *held_ctl(int sv[2])
{
	struct proto_msg m = { .type = PROTO_ERROR };
	uint8_t frames[2 * 512];
	int n1, n2;

	m.u.error.code = -PC_E_FILEIO;
	strcpy(m.u.error.msg, "disk on fire");
	n1 = proto_encode(&m, frames, sizeof(frames));
	assert_true(n1 > 0);
	m = (struct proto_msg){ .type = PROTO_DONE };
	n2 = proto_encode(&m, frames + n1, sizeof(frames) - (size_t)n1);
	assert_true(n2 > 0);
	make_pair(sv);
	struct ctl *c = ctl_new(testchan_held_new(sv[0], sv[0], frames, (size_t)(n1 + n2)),
				"srv:7000", false);
	assert_non_null(c);
	return c;
}

static void test_pending_inside_chan(void **state)
{
	struct pollfd p;
	struct proto_msg m;
	int sv[2];
	struct ctl *c = held_ctl(sv);

	(void)state;
	p = (struct pollfd){ .fd = ctl_rfd(c), .events = POLLIN };
	assert_int_equal(poll(&p, 1, 0), 0);  /* the socket has nothing */
	assert_true(ctl_pending(c));
	assert_int_equal(ctl_recv(c, &m), 0);
	assert_int_equal(m.type, PROTO_ERROR);
	assert_true(ctl_pending(c));          /* the DONE is still inside */
	assert_int_equal(ctl_recv(c, &m), 0);
	assert_int_equal(m.type, PROTO_DONE);
	assert_false(ctl_pending(c));
	ctl_free(c);
	close(sv[1]);
}

/* xfer_await polls the control channel: with the messages inside the chan
 * it must return them at once, not time out after x->timeout_s. */
static void test_await_pending_inside_chan(void **state)
{
	struct pc_err e;
	struct proto_msg m;
	char msg[256];
	int sv[2];
	struct ctl *c = held_ctl(sv);
	struct xfer x = { .streams = 1, .timeout_s = 1, .peer = "srv:7000", .ctl = c,
			  .sigfd = -1, .err = &e };

	(void)state;
	pc_err_init(&e);
	assert_int_equal(xfer_init(&x), 0);
	/* The peer's ERROR comes back as its code, with its words. */
	assert_int_equal(xfer_await(&x, PROTO_DONE, &m), -PC_E_FILEIO);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_FILEIO);
	assert_non_null(strstr(msg, "disk on fire"));
	pc_err_destroy(&e);
	pc_err_init(&e);
	assert_int_equal(xfer_await(&x, PROTO_DONE, &m), 0);
	assert_int_equal(m.type, PROTO_DONE);
	xfer_destroy(&x);
	pc_err_destroy(&e);
	ctl_free(c);
	close(sv[1]);
}

/* After a broken connection, xfer_await_peer_error lets the peer's ERROR
 * replace the network error: also one already inside the chan. */
static void test_peer_error_inside_chan(void **state)
{
	struct pc_err e;
	char msg[256];
	int sv[2];
	struct ctl *c = held_ctl(sv);
	struct xfer x = { .streams = 1, .peer = "srv:7000", .ctl = c, .sigfd = -1, .err = &e };

	(void)state;
	pc_err_init(&e);
	assert_int_equal(xfer_init(&x), 0);
	pc_err_set(&e, -PC_E_NET, "lost data connection 0 from srv:7000");
	xfer_await_peer_error(&x);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_FILEIO);
	assert_non_null(strstr(msg, "disk on fire"));
	xfer_destroy(&x);
	pc_err_destroy(&e);
	ctl_free(c);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_null),
		cmocka_unit_test(test_every_type_both_ways),
		cmocka_unit_test(test_pipes),
		cmocka_unit_test(test_request_storage),
		cmocka_unit_test(test_entries_borrowed),
		cmocka_unit_test(test_send_invalid),
		cmocka_unit_test(test_concurrent_send),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_expect_ok),
		cmocka_unit_test(test_expect_peer_error),
		cmocka_unit_test(test_expect_unexpected_type),
		cmocka_unit_test(test_expect_eof),
		cmocka_unit_test(test_pending_inside_chan),
		cmocka_unit_test(test_await_pending_inside_chan),
		cmocka_unit_test(test_peer_error_inside_chan),
		cmocka_unit_test(test_deadline),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
