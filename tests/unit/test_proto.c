/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for proto: round trips, exact layouts, and every rejection rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "sys/err.h"
#include "wire/proto.h"

#define FRAME_CAP (PROTO_FRAME_HDR_LEN + PROTO_MAX_PAYLOAD)

static uint8_t frame[FRAME_CAP];

/* Where sample() builds a REQUEST and an ENTRIES, and where decode() puts
 * a REQUEST: a message holds the first by pointer and borrows the second. */
static struct proto_request req_in, req_out;
static struct proto_batch batch_in;
static struct proto_entry ent_in, ent_out;

/* The sample ENTRIES' one entry: a regular file. */
#define ENT_PATH "r\xc3\xa9sum\xc3\xa9.txt"
#define ENT_FIXED 58u  /* bytes of an entry before its strings */
/* Offsets in the sample ENTRIES payload. */
#define ENT_OFF 6u                       /* the entry, after first_id and count */
#define ENT_PATH_OFF (ENT_OFF + ENT_FIXED) /* the path's length prefix */

/* proto_decode into *out, with out's REQUEST storage set up first. */
static int decode(uint8_t type, const uint8_t *p, size_t len, struct proto_msg *out)
{
	memset(out, 0, sizeof(*out));
	out->u.request = &req_out;
	return proto_decode(type, p, len, out);
}

/* Whether two messages say the same: what a REQUEST points at, what an
 * ENTRIES borrows, every other message byte for byte. */
static void msg_same(const struct proto_msg *a, const struct proto_msg *b)
{
	assert_int_equal(a->type, b->type);
	if (a->type == PROTO_REQUEST) {
		assert_memory_equal(a->u.request, b->u.request, sizeof(*a->u.request));
	} else if (a->type == PROTO_SUMS) {
		assert_int_equal(a->u.sums.id, b->u.sums.id);
		assert_true(a->u.sums.first == b->u.sums.first);
		assert_int_equal(a->u.sums.count, b->u.sums.count);
		assert_memory_equal(a->u.sums.hashes, b->u.sums.hashes,
				    (size_t)a->u.sums.count * PROTO_SUM_LEN);
	} else if (a->type == PROTO_ENTRIES) {
		assert_int_equal(a->u.entries.first_id, b->u.entries.first_id);
		assert_int_equal(a->u.entries.count, b->u.entries.count);
		assert_int_equal(a->u.entries.body_len, b->u.entries.body_len);
		assert_memory_equal(a->u.entries.body, b->u.entries.body, a->u.entries.body_len);
	} else {
		assert_memory_equal(a, b, sizeof(*a));
	}
}

static void fill_pattern(uint8_t *p, size_t n, uint8_t start)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(start + 37 * i);
}

/* The sample REQUEST connects through ssh (version 6), so that every
 * string field is there. */
#define SAMPLE_SSH (PROTO_REQ_CONNECT | PROTO_REQ_CONNECT_SSH)
#define SAMPLE_SSH_DEST "alice@h2.example"
#define SAMPLE_PCOPY "/opt/pcopy/bin/pcopy"
/* Bytes of the REQUEST's ssh strings, length prefixes included. */
#define SAMPLE_SSH_BYTES (2 + strlen(SAMPLE_SSH_DEST) + 2 + strlen(SAMPLE_PCOPY))
/* The REQUEST's fixed fields: up to connect_port (60 bytes), attach_id,
 * bwlimit (version 8). */
#define REQ_BWLIMIT_OFF (60 + PROTO_ATTACH_ID_LEN)
#define REQ_SYNC_OFF (REQ_BWLIMIT_OFF + 8)
#define REQ_FIXED (REQ_SYNC_OFF + 4)

/* A valid message of each type, with values that exercise every byte.
 * Fields are set one by one so that padding stays zero for memcmp. */
#define STAGE_LEN 36u  /* threads u32, span, busy, in, out u64 */
#define STAGE_OFF(i) (80u + (i) * STAGE_LEN)
#define SAMPLE_WALL 987654321ull

/* A stage whose times fill its span exactly, and the span its threads'
 * share of the wall time exactly: every bound at its limit. */
static void sample_stage(struct proto_stage *g, uint32_t threads, uint64_t wall_us)
{
	g->threads = threads;
	g->span_us = wall_us * threads;
	g->busy_us = g->span_us / 2;
	g->in_us = g->span_us / 4;
	g->out_us = g->span_us - g->busy_us - g->in_us;
}

#define PROBE_FIG_FIXED 72u  /* PROBE_FIG before its codec records */
#define PROBE_FIG_CODEC 28u  /* one codec record */

/* A SIDE answer with two codecs; every field distinct. */
static void probe_fig_sample(struct proto_probe_fig *f)
{
	f->op = PROTO_PROBE_SIDE;
	f->ncodecs = 2;
	f->cpus = 0x1234;
	f->disk_status = 0;
	f->rx_bytes = 0x0102030405060708ull;
	f->t_us = 0x1112131415161718ull;
	f->disk_bytes = 256ull << 20;
	f->disk_us = 987654;
	f->rmem_max = 212992;
	f->wmem_max = 8u << 20;
	f->tcp_rmem_max = 6u << 20;
	f->tcp_wmem_max = 4u << 20;
	f->codec[0] = (struct proto_probe_codec){ PROTO_CODEC_LZ4, 1, 2u << 20, 1600000,
						  2800000, 900000 };
	f->codec[1] = (struct proto_probe_codec){ PROTO_CODEC_ZLIB, 6, PROTO_MAX_BLOCK, 0xffffffff,
						  0xfedcba9876543210ull, 1 };
}

static void sample(uint8_t type, struct proto_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	switch (type) {
	case PROTO_HELLO:
		m->u.hello.magic = PROTO_MAGIC;
		m->u.hello.version = 7;
		m->u.hello.min_version = 3;
		m->u.hello.caps = 0xdeadbeef;
		fill_pattern(m->u.hello.nonce, PROTO_NONCE_LEN, 1);
		break;
	case PROTO_AUTH:
		fill_pattern(m->u.auth.mac, PROTO_MAC_LEN, 2);
		break;
	case PROTO_KEY:
		fill_pattern(m->u.key.key, PROTO_KEY_LEN, 3);
		break;
	case PROTO_REQUEST:
		memset(&req_in, 0, sizeof(req_in));
		m->u.request = &req_in;
		m->u.request->role = PROTO_ROLE_SOURCE;
		m->u.request->flags = PROTO_REQ_ORDERED | PROTO_REQ_HARDLINKS | SAMPLE_SSH;
		m->u.request->streams = 17;
		m->u.request->block_size = 1u << 20;
		m->u.request->window = 0x01020304;
		m->u.request->timeout_s = 0x8000000f;
		m->u.request->nsources = 123456;
		m->u.request->port_lo = 5000;
		m->u.request->port_hi = 5010;
		m->u.request->family = 6;
		fill_pattern(m->u.request->data_key, PROTO_KEY_LEN, 9);
		m->u.request->connect_port = 0xbeef;
		strcpy(m->u.request->connect_host, "h1.example");
		fill_pattern(m->u.request->attach_id, PROTO_ATTACH_ID_LEN, 11);
		m->u.request->bwlimit = 0x123456789aull; /* below PROTO_MAX_BWLIMIT */
		m->u.request->sync = PROTO_SYNC_UPDATE;
		strcpy(m->u.request->connect_ssh, SAMPLE_SSH_DEST);
		strcpy(m->u.request->connect_pcopy, SAMPLE_PCOPY);
		strcpy(m->u.request->codec, "zlib:1,lz4");
		m->u.request->npaths = 1;
		strcpy(m->u.request->paths, "dir/sub dir/file.bin");
		break;
	case PROTO_READY:
		m->u.ready.data_port = 0xfedc;
		strcpy(m->u.ready.host, "10.1.2.3");
		break;
	case PROTO_ENTRIES:
		memset(&ent_in, 0, sizeof(ent_in));
		ent_in.type = PROTO_ENT_REG;
		ent_in.size = 0x0123456789abcdefull;
		ent_in.mode = 04755;
		ent_in.uid = 0x01020304;
		ent_in.gid = 0xfffffffe;
		ent_in.mtime_s = -1234567890123ll;
		ent_in.mtime_ns = 999999999;
		ent_in.atime_s = 0x0a0b0c0d0e0f1011ll;
		ent_in.atime_ns = 1;
		strcpy(ent_in.path, ENT_PATH);
		strcpy(ent_in.user, "alice");
		strcpy(ent_in.group, "staff");
		proto_batch_init(&batch_in, 0x89abcdef);
		assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
		proto_batch_msg(&batch_in, m);
		break;
	case PROTO_FILE_END:
		m->u.file_end.id = 0xfffffffe;
		m->u.file_end.size = 0xfedcba9876543210ull;
		break;
	case PROTO_FILE_DONE:
		m->u.file_done.id = 42;
		m->u.file_done.status = -PC_E_INTEGRITY;
		m->u.file_done.bytes = 0x1122334455667788ull;
		strcpy(m->u.file_done.msg, "checksum mismatch at offset 1048576");
		break;
	case PROTO_END:
	case PROTO_DONE:
		m->u.stats.bytes = 1ull << 40;
		m->u.stats.wire_bytes = (1ull << 40) + 7;
		m->u.stats.files = 20000u + type; /* END and DONE differ */
		m->u.stats.cpu_user_us = 0x7fffffffffffffffull;
		m->u.stats.cpu_sys_us = 0x8000000000000001ull;
		m->u.stats.maxrss_kb = 65536;
		m->u.stats.wall_us = SAMPLE_WALL;
		m->u.stats.codec_cpu_us = 0x0102030405060708ull;
		m->u.stats.dirs = 0x1112131415161718ull;
		m->u.stats.links = 0xf1f2f3f4f5f6f7f8ull;
		/* Version 7: the sender's three stages, each at its bounds:
		 * a span of threads * wall, filled exactly. */
		for (unsigned i = 0; i < 3; i++)
			sample_stage(&m->u.stats.stage[type == PROTO_END ? i : 3 + i], 2 + i,
				     m->u.stats.wall_us);
		m->u.stats.unchanged = 0x2122232425262728ull; /* version 8 */
		m->u.stats.unchanged_bytes = 0xa1a2a3a4a5a6a7a8ull;
		m->u.stats.deleted = 0xb1b2b3b4b5b6b7b8ull; /* version 9 */
		m->u.stats.resumed = 0x4e1fu; /* version 11: at most files */
		break;
	case PROTO_HAVE:
		/* 13 entries: bits 0, 2, 4, 6, 9 and 11 */
		m->u.have.first_id = 0x89abcdef;
		m->u.have.count = 13;
		m->u.have.bits[0] = 0x55;
		m->u.have.bits[1] = 0x0a;
		break;
	case PROTO_LIST: /* version 9 */
		m->u.list.what = PROTO_LIST_CHANGED;
		strcpy(m->u.list.path, "top/a b/c");
		break;
	case PROTO_SUMS: { /* version 10: two hashes */
		static uint8_t hashes[2 * PROTO_SUM_LEN];
		fill_pattern(hashes, sizeof(hashes), 0x40);
		m->u.sums.id = 0x01020304;
		m->u.sums.first = 0x1122334455667788ull;
		m->u.sums.count = 2;
		m->u.sums.hashes = hashes;
		break;
	}
	case PROTO_ERROR:
		m->u.error.code = -PC_E_VERSION;
		strcpy(m->u.error.msg, "peer speaks protocol versions 2..3; we speak 1..1");
		break;
	case PROTO_SKIP:
		m->u.skip.index = 0x01020304;
		m->u.skip.status = -2; /* ENOENT */
		strcpy(m->u.skip.msg, "cannot open source 'a/b': No such file or directory");
		break;
	case PROTO_FILE_FAIL:
		m->u.file_fail.id = 0xfedcba98;
		m->u.file_fail.status = -PC_E_FILEIO;
		strcpy(m->u.file_fail.msg, "'a/b' shrank while it was being copied");
		break;
	case PROTO_ACK:
		m->u.ack.upto = 0x80000001;
		break;
	case PROTO_PROBE:
		m->u.probe.op = PROTO_PROBE_SIDE;
		m->u.probe.arg = PROTO_PROBE_MAX_WRITE_MIB;
		break;
	case PROTO_PROBE_FIG:
		probe_fig_sample(&m->u.probe_fig);
		break;
	default:
		fail_msg("no sample for type %u", type);
	}
}

/* Payload length of sample(type). */
static size_t sample_payload_len(uint8_t type)
{
	switch (type) {
	case PROTO_HELLO: return 44;
	case PROTO_AUTH: return 32;
	case PROTO_KEY: return 32;
	case PROTO_REQUEST:
		return REQ_FIXED + 2 + strlen("h1.example") + SAMPLE_SSH_BYTES + 2 +
		       strlen("zlib:1,lz4") + 2 + 2 + strlen("dir/sub dir/file.bin") + 2;
	case PROTO_READY: return 4 + strlen("10.1.2.3");
	case PROTO_ENTRIES:
		return ENT_OFF + ENT_FIXED + 2 + strlen(ENT_PATH) + 2 + 2 + 5 + 2 + 5;
	case PROTO_FILE_END: return 12;
	case PROTO_FILE_DONE: return 18 + strlen("checksum mismatch at offset 1048576");
	case PROTO_END:
	case PROTO_DONE: return 80 + PROTO_STAGES * STAGE_LEN + 32;
	case PROTO_HAVE: return 6 + 2;
	case PROTO_LIST: return 3 + strlen("top/a b/c");
	case PROTO_SUMS: return 14 + 2 * PROTO_SUM_LEN;
	case PROTO_ERROR: return 6 + strlen("peer speaks protocol versions 2..3; we speak 1..1");
	case PROTO_SKIP: return 10 + strlen("cannot open source 'a/b': No such file or directory");
	case PROTO_FILE_FAIL: return 10 + strlen("'a/b' shrank while it was being copied");
	case PROTO_ACK: return 4;
	case PROTO_PROBE: return 8;
	case PROTO_PROBE_FIG: return PROBE_FIG_FIXED + 2 * PROBE_FIG_CODEC;
	default: return 0;
	}
}

/* Encodes m into the shared frame buffer; returns the payload length. */
static size_t encode_ok(const struct proto_msg *m)
{
	int n = proto_encode(m, frame, sizeof(frame));

	assert_true(n >= (int)PROTO_FRAME_HDR_LEN);
	return (size_t)n - PROTO_FRAME_HDR_LEN;
}

static uint8_t *payload(void)
{
	return frame + PROTO_FRAME_HDR_LEN;
}

static void put_be(uint8_t *p, uint64_t v, size_t width)
{
	for (size_t i = 0; i < width; i++)
		p[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
}

static void test_roundtrip_all(void **state)
{
	(void)state;
	for (uint8_t t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++) {
		struct proto_msg in, out;
		uint8_t type = 0;
		uint32_t len = 0;

		sample(t, &in);
		size_t plen = encode_ok(&in);
		assert_int_equal(plen, sample_payload_len(t));
		assert_int_equal(proto_frame_decode(frame, &type, &len), 0);
		assert_int_equal(type, t);
		assert_int_equal(len, plen);
		assert_int_equal(decode(t, payload(), plen, &out), 0);
		msg_same(&in, &out);
		/* Canonical: what decodes encodes back to the same bytes. */
		uint8_t again[FRAME_CAP];
		assert_int_equal(proto_encode(&out, again, sizeof(again)), (int)(8 + plen));
		assert_memory_equal(again, frame, 8 + plen);
	}
}

/* A PROBE_FIG with n codec records, each valid, as raw payload bytes. */
static size_t probe_fig_raw(uint8_t *p, unsigned n)
{
	memset(p, 0, PROBE_FIG_FIXED + n * PROBE_FIG_CODEC);
	p[0] = PROTO_PROBE_SIDE;
	p[1] = (uint8_t)n;
	for (unsigned i = 0; i < n; i++) {
		uint8_t *c = p + PROBE_FIG_FIXED + i * PROBE_FIG_CODEC;
		c[0] = PROTO_CODEC_ZLIB;
		c[1] = 1;
		put_be(c + 4, 4096, 4);
	}
	return PROBE_FIG_FIXED + n * PROBE_FIG_CODEC;
}

/* The codec count's bound, both ways: 8 records decode, 9 do not even
 * when the bytes are there, and the encoder refuses 9 too. */
static void test_probe_fig_bounds(void **state)
{
	uint8_t raw[PROBE_FIG_FIXED + (PROTO_PROBE_MAX_CODECS + 1) * PROBE_FIG_CODEC];
	struct proto_msg m, out;

	(void)state;
	size_t len = probe_fig_raw(raw, PROTO_PROBE_MAX_CODECS);
	assert_int_equal(decode(PROTO_PROBE_FIG, raw, len, &out), 0);
	assert_int_equal(out.u.probe_fig.ncodecs, PROTO_PROBE_MAX_CODECS);
	len = probe_fig_raw(raw, PROTO_PROBE_MAX_CODECS + 1);
	assert_int_equal(decode(PROTO_PROBE_FIG, raw, len, &out), -PC_E_PROTO);
	/* Refused before a record is read: a 9th would land past the array. */
	const uint8_t *past = (const uint8_t *)&out.u.probe_fig + sizeof(out.u.probe_fig);
	_Static_assert(sizeof(out.u) >= sizeof(out.u.probe_fig) + PROBE_FIG_CODEC,
		       "a 9th record would stay inside the message");
	for (size_t i = 0; i < sizeof(out.u) - sizeof(out.u.probe_fig); i++)
		assert_int_equal(past[i], 0);
	/* Short by a byte, and a byte too many. */
	len = probe_fig_raw(raw, 1);
	assert_int_equal(decode(PROTO_PROBE_FIG, raw, len - 1, &out), -PC_E_PROTO);
	assert_int_equal(decode(PROTO_PROBE_FIG, raw, len + 1, &out), -PC_E_PROTO);
	assert_int_equal(decode(PROTO_PROBE_FIG, raw, 0, &out), -PC_E_PROTO);

	memset(&m, 0, sizeof(m));
	m.type = PROTO_PROBE_FIG;
	probe_fig_sample(&m.u.probe_fig);
	m.u.probe_fig.ncodecs = PROTO_PROBE_MAX_CODECS + 1;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	/* A failed disk test carries no figures; without them it is fine. */
	probe_fig_sample(&m.u.probe_fig);
	m.u.probe_fig.disk_status = -28;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	m.u.probe_fig.disk_bytes = m.u.probe_fig.disk_us = 0;
	int n = proto_encode(&m, frame, sizeof(frame));
	assert_true(n > 0);
	assert_int_equal(decode(PROTO_PROBE_FIG, payload(), (size_t)n - 8, &out), 0);
	assert_int_equal(out.u.probe_fig.disk_status, -28);
}

/* PROBE's layout, byte by byte (docs/PROTOCOL.md 4.14), and a probe
 * REQUEST names exactly one directory. */
static void test_layout_probe(void **state)
{
	static const uint8_t want[] = { 15, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0, 0, 0, 0, 64 };
	struct proto_msg m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_PROBE;
	m.u.probe.op = PROTO_PROBE_SIDE;
	m.u.probe.arg = 64;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), sizeof(want));
	assert_memory_equal(frame, want, sizeof(want));
	assert_string_equal(proto_type_name(PROTO_PROBE), "PROBE");
	assert_string_equal(proto_type_name(PROTO_PROBE_FIG), "PROBE_FIG");

	sample(PROTO_REQUEST, &m);
	m.u.request->role = PROTO_ROLE_PROBE;
	assert_true(proto_encode(&m, frame, sizeof(frame)) > 0);
	assert_int_equal(proto_request_add_path(m.u.request, "second"), 0);
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
}

static void test_layout_ready(void **state)
{
	static const uint8_t want[] = { 5, 0, 0, 0, 0, 0, 0, 4, 0x1f, 0x90, 0, 0 };
	struct proto_msg m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_READY;
	m.u.ready.data_port = 8080;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), sizeof(want));
	assert_memory_equal(frame, want, sizeof(want));
}

static void test_layout_error(void **state)
{
	static const uint8_t want[] = { 11, 0, 0, 0, 0, 0, 0, 8,
					0xff, 0xff, 0xfc, 0x15, 0, 2, 'n', 'o' };
	struct proto_msg m;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_ERROR;
	m.u.error.code = -1003;
	strcpy(m.u.error.msg, "no");
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), sizeof(want));
	assert_memory_equal(frame, want, sizeof(want));
}

static void test_layout_skip(void **state)
{
	static const uint8_t want[] = { 12, 0, 0, 0, 0, 0, 0, 12,
					0, 0, 0, 2, 0xff, 0xff, 0xff, 0xfe, 0, 2, 'n', 'o' };
	struct proto_msg m, out;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = PROTO_SKIP;
	m.u.skip.index = 2;
	m.u.skip.status = -2;
	strcpy(m.u.skip.msg, "no");
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), sizeof(want));
	assert_memory_equal(frame, want, sizeof(want));
	assert_int_equal(decode(PROTO_SKIP, payload(), sizeof(want) - 8, &out), 0);
	assert_memory_equal(&m, &out, sizeof(m));
	/* The smallest SKIP: index, status and an empty message. */
	m.u.skip.msg[0] = '\0';
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), 8 + 10);
	/* A SKIP that reports success is refused both ways. */
	m.u.skip.status = 0;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
}

/* SKIPs name the REQUEST's paths in order, the same one several times if
 * need be (entries inside one tree), and none past them. */
static void test_skip_in_order(void **state)
{
	struct proto_skip k = { .status = -2 };
	uint32_t next = 0;

	(void)state;
	k.index = 3;
	assert_false(proto_skip_in_order(&k, 3, &next)); /* past the last path */
	assert_int_equal(next, 0);
	k.index = 0;
	assert_true(proto_skip_in_order(&k, 3, &next));
	assert_int_equal(next, 0);
	assert_true(proto_skip_in_order(&k, 3, &next)); /* the same path again */
	assert_int_equal(next, 0);
	k.index = 2;
	assert_true(proto_skip_in_order(&k, 3, &next));
	assert_int_equal(next, 2);
	assert_true(proto_skip_in_order(&k, 3, &next));
	k.index = 1;
	assert_false(proto_skip_in_order(&k, 3, &next)); /* going back */
	assert_int_equal(next, 2);
	/* No paths: no SKIP at all; the largest index stays in range. */
	next = 0;
	k.index = 0;
	assert_false(proto_skip_in_order(&k, 0, &next));
	k.index = UINT32_MAX - 1;
	assert_true(proto_skip_in_order(&k, UINT32_MAX, &next));
	assert_int_equal(next, UINT32_MAX - 1);
	k.index = UINT32_MAX;
	assert_false(proto_skip_in_order(&k, UINT32_MAX, &next));
}

static void test_layout_entries(void **state)
{
	struct proto_msg m;
	const uint8_t *p = payload();

	(void)state;
	sample(PROTO_ENTRIES, &m);
	encode_ok(&m);
	assert_memory_equal(p + 0, "\x89\xab\xcd\xef\x00\x01", 6); /* first_id, count */
	assert_memory_equal(p + 6, "\x01\x00", 2);                   /* REG, no flags */
	assert_memory_equal(p + 8, "\x00\x00\x09\xed", 4);           /* mode */
	assert_memory_equal(p + 12, "\x01\x02\x03\x04\xff\xff\xff\xfe", 8); /* uid, gid */
	assert_memory_equal(p + 20, "\xff\xff\xfe\xe0\x8e\x04\xfb\x35", 8);
	assert_memory_equal(p + 28, "\x3b\x9a\xc9\xff", 4);
	assert_memory_equal(p + 32, "\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x00\x00\x00\x01", 12);
	assert_memory_equal(p + 44, "\x01\x23\x45\x67\x89\xab\xcd\xef", 8); /* size */
	assert_memory_equal(p + 52, "\0\0\0\0\0\0\0\0\0\0\0\0", 12);   /* rdev, link_id */
	assert_memory_equal(p + 64, "\x00\x0c", 2);
	assert_memory_equal(p + 66, ENT_PATH, 12);
	assert_memory_equal(p + 78, "\x00\x00\x00\x05" "alice\x00\x05" "staff", 16);
}

/* END/DONE: the two version 3 fields, then the six stages of version 7,
 * each threads, span, busy, in, out; END fills the first three, DONE the
 * last three. */
static void test_layout_stats(void **state)
{
	struct proto_msg m;

	(void)state;
	sample(PROTO_END, &m);
	m.u.stats.stage[PROTO_STAGE_SEND] = (struct proto_stage){ 0xfe, 0x7071727374757677ull,
		0x1011121314151617ull, 0x2021222324252627ull, 0x3031323334353637ull };
	m.u.stats.wall_us = UINT64_MAX;
	assert_int_equal(encode_ok(&m), 80 + 6 * 36 + 32);
	/* Version 8: unchanged and unchanged_bytes after the stages; version 9:
	 * deleted; version 11: resumed. */
	assert_memory_equal(payload() + 296, "\x21\x22\x23\x24\x25\x26\x27\x28"
			    "\xa1\xa2\xa3\xa4\xa5\xa6\xa7\xa8"
			    "\xb1\xb2\xb3\xb4\xb5\xb6\xb7\xb8"
			    "\0\0\0\0\0\0\x4e\x1f", 32);
	assert_memory_equal(payload() + 64, "\x11\x12\x13\x14\x15\x16\x17\x18", 8);
	assert_memory_equal(payload() + 72, "\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8", 8);
	assert_memory_equal(payload() + 80, "\0\0\0\x02" "\0\0\0\0\x75\xbc\xd1\x62", 12);
	assert_memory_equal(payload() + 80 + 2 * 36,
			    "\0\0\0\xfe" "\x70\x71\x72\x73\x74\x75\x76\x77"
			    "\x10\x11\x12\x13\x14\x15\x16\x17" "\x20\x21\x22\x23\x24\x25\x26\x27"
			    "\x30\x31\x32\x33\x34\x35\x36\x37", 36);
	for (size_t i = 80 + 3 * 36; i < 80 + 6 * 36; i++)
		assert_int_equal(payload()[i], 0); /* the sink's stages */
	sample(PROTO_DONE, &m);
	assert_int_equal(encode_ok(&m), 80 + 6 * 36 + 32);
	for (size_t i = 80; i < 80 + 3 * 36; i++)
		assert_int_equal(payload()[i], 0); /* the source's stages */
	assert_memory_equal(payload() + 80 + 3 * 36, "\0\0\0\x02", 4);
}

static void test_truncation_rejected(void **state)
{
	(void)state;
	for (uint8_t t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++) {
		struct proto_msg in, out;

		sample(t, &in);
		size_t plen = encode_ok(&in);
		for (size_t n = 0; n < plen; n++)
			assert_int_equal(decode(t, payload(), n, &out), -PC_E_PROTO);
	}
}

static void test_trailing_byte_rejected(void **state)
{
	(void)state;
	for (uint8_t t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++) {
		struct proto_msg in, out;

		sample(t, &in);
		size_t plen = encode_ok(&in);
		payload()[plen] = 0;
		assert_int_equal(decode(t, payload(), plen + 1, &out), -PC_E_PROTO);
	}
}

static void test_decode_unknown_type(void **state)
{
	struct proto_msg out;

	(void)state;
	assert_int_equal(decode(0, frame, 0, &out), -PC_E_PROTO);
	assert_int_equal(decode(PROTO_TYPE_MAX, frame, 0, &out), -PC_E_PROTO);
	assert_int_equal(decode(255, frame, 0, &out), -PC_E_PROTO);
}

/* A string field: its length prefix sits at len_off in the payload, and
 * tail bytes follow it. */
struct str_case {
	uint8_t type;
	size_t len_off;
	size_t max;
	size_t tail;
};

static const struct str_case str_cases[] = {
	/* REQUEST's last string: its only path, after the fixed fields, the
	 * connect host, the ssh strings, the codec spec and the path count. */
	{ PROTO_REQUEST, REQ_FIXED + 12 + 2 + 16 + 2 + 20 + 12 + 2, PROTO_MAX_PATH,
	  2 /* nfilters 0, version 9 */ },
	{ PROTO_FILE_DONE, 16, PROTO_MAX_MSG, 0 },
	{ PROTO_FILE_FAIL, 8, PROTO_MAX_MSG, 0 },
	{ PROTO_ERROR, 4, PROTO_MAX_MSG, 0 },
	{ PROTO_SKIP, 8, PROTO_MAX_MSG, 0 },
	{ PROTO_LIST, 1, PROTO_MAX_MSG, 0 },
};

/* Returns the string field of m for a str_case type. */
static char *str_field(struct proto_msg *m)
{
	switch (m->type) {
	case PROTO_REQUEST: return m->u.request->paths;
	case PROTO_FILE_DONE: return m->u.file_done.msg;
	case PROTO_FILE_FAIL: return m->u.file_fail.msg;
	case PROTO_SKIP: return m->u.skip.msg;
	case PROTO_LIST: return m->u.list.path;
	default: return m->u.error.msg;
	}
}

static void test_string_limits(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(str_cases) / sizeof(str_cases[0]); i++) {
		const struct str_case *c = &str_cases[i];
		struct proto_msg m, out;
		char *s;

		/* Exactly max bytes: accepted both ways. */
		sample(c->type, &m);
		s = str_field(&m);
		memset(s, 'a', c->max);
		s[c->max] = '\0';
		size_t plen = encode_ok(&m);
		assert_int_equal(plen, c->len_off + 2 + c->max + c->tail);
		assert_int_equal(decode(c->type, payload(), plen, &out), 0);
		msg_same(&m, &out);

		/* A length prefix of max + 1 with max + 1 bytes present (the
		 * tail moved up by one). */
		uint8_t *end = payload() + c->len_off + 2 + c->max;
		memmove(end + 1, end, c->tail);
		*end = 'a';
		put_be(payload() + c->len_off, c->max + 1, 2);
		assert_int_equal(decode(c->type, payload(), plen + 1, &out), -PC_E_PROTO);

		/* A length prefix of 0xffff. */
		put_be(payload() + c->len_off, 0xffff, 2);
		assert_int_equal(decode(c->type, payload(), plen + 1, &out), -PC_E_PROTO);

		/* Unterminated within the field: the encoder refuses. */
		s[c->max] = 'a';
		assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	}
}

static void test_request_paths(void **state)
{
	struct proto_msg m, out;
	size_t plen;

	(void)state;
	sample(PROTO_REQUEST, &m);
	memset(m.u.request->paths, 0, sizeof(m.u.request->paths));
	m.u.request->npaths = 0;
	assert_int_equal(proto_request_add_path(m.u.request, "a"), 0);
	assert_int_equal(proto_request_add_path(m.u.request, "b/c"), 0);
	assert_int_equal(proto_request_add_path(m.u.request, ""), -PC_E_PROTO);
	assert_int_equal(m.u.request->npaths, 2);
	assert_string_equal(proto_request_path(m.u.request, 0), "a");
	assert_string_equal(proto_request_path(m.u.request, 1), "b/c");
	assert_null(proto_request_path(m.u.request, 2));
	plen = encode_ok(&m);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	assert_int_equal(out.u.request->npaths, 2);
	assert_string_equal(proto_request_path(out.u.request, 1), "b/c");
	/* No paths at all is refused both ways. */
	m.u.request->npaths = 0;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	/* A path list that overflows PROTO_REQ_PATHS_BYTES is refused. */
	memset(m.u.request->paths, 0, sizeof(m.u.request->paths));
	char big[PROTO_MAX_PATH + 1];
	memset(big, 'x', PROTO_MAX_PATH);
	big[PROTO_MAX_PATH] = '\0';
	unsigned added = 0;
	while (proto_request_add_path(m.u.request, big) == 0)
		added++;
	assert_int_equal(added, PROTO_REQ_PATHS_BYTES / (PROTO_MAX_PATH + 1));
	/* A port range upside down, and a family that is not 0, 4 or 6. */
	sample(PROTO_REQUEST, &m);
	m.u.request->port_lo = 10;
	m.u.request->port_hi = 9;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_REQUEST, &m);
	m.u.request->family = 5;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
}

/* Offset of REQUEST.npaths in sample(PROTO_REQUEST)'s payload: after the
 * fixed fields, the connect host and the codec spec. */
#define REQ_NPATHS_OFF (REQ_FIXED + 2 + strlen("h1.example") + SAMPLE_SSH_BYTES + 2 + \
			strlen("zlib:1,lz4"))

/* Builds in the frame buffer a REQUEST payload that claims npaths paths and
 * holds npaths paths of len bytes each ('p'...), as a hostile peer may send
 * it, then no filter rule; returns its length. */
static size_t request_with_paths(unsigned npaths, size_t len)
{
	struct proto_msg m;
	size_t at;

	sample(PROTO_REQUEST, &m);
	encode_ok(&m);
	at = REQ_NPATHS_OFF;
	put_be(payload() + at, npaths, 2);
	at += 2;
	for (unsigned i = 0; i < npaths; i++) {
		assert_true(at + 2 + len <= PROTO_MAX_PAYLOAD);
		put_be(payload() + at, len, 2);
		memset(payload() + at + 2, 'p', len);
		at += 2 + len;
	}
	put_be(payload() + at, 0, 2); /* nfilters */
	return at + 2;
}

/* REQUEST.npaths is bounded by PROTO_MAX_PATHS, even when every path is
 * short enough for all of them to fit in REQUEST.paths. */
static void test_request_too_many_paths(void **state)
{
	struct proto_msg out;
	size_t plen;

	(void)state;
	/* The bound itself: PROTO_MAX_PATHS one-byte paths are fine. */
	plen = request_with_paths(PROTO_MAX_PATHS, 1);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	assert_int_equal(out.u.request->npaths, PROTO_MAX_PATHS);
	assert_string_equal(proto_request_path(out.u.request, PROTO_MAX_PATHS - 1), "p");
	/* One more, 2 * (PROTO_MAX_PATHS + 1) bytes of paths: refused. */
	assert_true(2 * (PROTO_MAX_PATHS + 1) <= PROTO_REQ_PATHS_BYTES);
	plen = request_with_paths(PROTO_MAX_PATHS + 1, 1);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	/* Twice as many: refused too. */
	plen = request_with_paths(2 * PROTO_MAX_PATHS, 1);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);

	/* The encoder refuses to write such a request: PROTO_MAX_PATHS + 1
	 * one-byte paths, all in REQUEST.paths. */
	struct proto_msg m;
	uint8_t buf[PROTO_FRAME_HDR_LEN + PROTO_MAX_PAYLOAD];
	sample(PROTO_REQUEST, &m);
	memset(m.u.request->paths, 0, sizeof(m.u.request->paths));
	for (unsigned i = 0; i <= PROTO_MAX_PATHS; i++)
		m.u.request->paths[2 * i] = 'p';
	m.u.request->npaths = PROTO_MAX_PATHS;
	assert_true(proto_encode(&m, buf, sizeof(buf)) > 0);
	m.u.request->npaths = PROTO_MAX_PATHS + 1;
	assert_int_equal(proto_encode(&m, buf, sizeof(buf)), -PC_E_PROTO);
}

/* Decoding refuses a request with no path, an empty path, and paths that
 * together overflow REQUEST.paths (PROTO_REQ_PATHS_BYTES, NULs included). */
static void test_request_paths_decode_bounds(void **state)
{
	unsigned fit = PROTO_REQ_PATHS_BYTES / (PROTO_MAX_PATH + 1);
	struct proto_msg out;
	size_t plen;

	(void)state;
	plen = request_with_paths(0, 0);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	plen = request_with_paths(1, 0);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	plen = request_with_paths(3, 1);
	put_be(payload() + REQ_NPATHS_OFF + 2 + 3, 0, 2); /* the second one empty */
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen - 1, &out), -PC_E_PROTO);

	/* As many longest paths as fit, then one byte more. */
	plen = request_with_paths(fit, PROTO_MAX_PATH);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	assert_int_equal(out.u.request->npaths, fit);
	size_t left = PROTO_REQ_PATHS_BYTES - fit * (PROTO_MAX_PATH + 1);
	plen = request_with_paths(fit + 1, PROTO_MAX_PATH);
	size_t last = REQ_NPATHS_OFF + 2 + fit * (2 + PROTO_MAX_PATH);
	put_be(payload() + last, left, 2);
	put_be(payload() + last + 2 + left, 0, 2); /* nfilters */
	plen = last + 2 + left + 2;
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	put_be(payload() + last, left - 1, 2);
	put_be(payload() + last + 2 + left - 1, 0, 2);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen - 1, &out), 0);
	assert_int_equal(out.u.request->npaths, fit + 1);
}

/* Builds in the frame buffer a REQUEST payload with the sample's one path
 * and n filter rules of len bytes each, "- aaa...", as a peer may send it;
 * returns its length. */
static size_t request_with_filters(unsigned n, size_t len)
{
	size_t at = request_with_paths(1, 1) - 2;

	put_be(payload() + at, n, 2);
	at += 2;
	for (unsigned i = 0; i < n; i++) {
		assert_true(at + 2 + len <= PROTO_MAX_PAYLOAD);
		put_be(payload() + at, len, 2);
		memset(payload() + at + 2, 'a', len);
		memcpy(payload() + at + 2, "- ", len < 2 ? len : 2);
		at += 2 + len;
	}
	return at;
}

/* REQUEST.filters (version 9): what proto_request_add_filter takes and the
 * decoder accepts, and each bound both enforce: the rule's shape, its
 * length (PROTO_MAX_FILTER), the count (PROTO_MAX_FILTERS) and the bytes
 * (PROTO_REQ_FILTER_BYTES). */
static void test_request_filters(void **state)
{
	static const char *const bad[] = { "", "-", "- ", "+ ", "x a", "-a", "+\ta", " - a" };
	char rule[PROTO_MAX_FILTER + 2];
	struct proto_msg m, out;
	size_t plen;

	(void)state;
	sample(PROTO_REQUEST, &m);
	assert_int_equal(proto_request_add_filter(m.u.request, "- *.o"), 0);
	assert_int_equal(proto_request_add_filter(m.u.request, "+ keep/"), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(proto_request_add_filter(m.u.request, bad[i]), -PC_E_PROTO);
	memset(rule, 'a', sizeof(rule));
	memcpy(rule, "- ", 2);
	rule[PROTO_MAX_FILTER + 1] = '\0';
	assert_int_equal(proto_request_add_filter(m.u.request, rule), -PC_E_PROTO);
	assert_int_equal(m.u.request->nfilters, 2);
	plen = encode_ok(&m);
	assert_int_equal(plen, sample_payload_len(PROTO_REQUEST) + 2 + 5 + 2 + 7);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	assert_int_equal(out.u.request->nfilters, 2);
	assert_string_equal(proto_request_filter(out.u.request, 0), "- *.o");
	assert_string_equal(proto_request_filter(out.u.request, 1), "+ keep/");
	assert_null(proto_request_filter(out.u.request, 2));
	/* The encoder checks each rule's shape too. */
	m.u.request->filters[0] = 'x';
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);

	/* PROTO_MAX_FILTERS rules, not one more; by the adder and the decoder. */
	sample(PROTO_REQUEST, &m);
	for (unsigned i = 0; i < PROTO_MAX_FILTERS; i++)
		assert_int_equal(proto_request_add_filter(m.u.request, "- a"), 0);
	assert_int_equal(proto_request_add_filter(m.u.request, "- a"), -PC_E_PROTO);
	assert_true(encode_ok(&m) > 0);
	plen = request_with_filters(PROTO_MAX_FILTERS, 3);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	assert_int_equal(out.u.request->nfilters, PROTO_MAX_FILTERS);
	plen = request_with_filters(PROTO_MAX_FILTERS + 1, 3);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	m.u.request->nfilters = PROTO_MAX_FILTERS + 1;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);

	/* A rule of PROTO_MAX_FILTER bytes, not one more. */
	plen = request_with_filters(1, PROTO_MAX_FILTER);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	plen = request_with_filters(1, PROTO_MAX_FILTER + 1);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	/* Empty, and of the wrong shape, on the wire. */
	plen = request_with_filters(1, 0);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	plen = request_with_filters(1, 2);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	plen = request_with_filters(1, 3);
	payload()[plen - 3] = '*';
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	payload()[plen - 3] = '+';
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);

	/* PROTO_REQ_FILTER_BYTES, NULs counted: as many longest rules as fit,
	 * then one more. */
	unsigned fit = PROTO_REQ_FILTER_BYTES / (PROTO_MAX_FILTER + 1);
	plen = request_with_filters(fit, PROTO_MAX_FILTER);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), 0);
	plen = request_with_filters(fit + 1, PROTO_MAX_FILTER);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	sample(PROTO_REQUEST, &m);
	rule[PROTO_MAX_FILTER] = '\0';
	for (unsigned i = 0; i < fit; i++)
		assert_int_equal(proto_request_add_filter(m.u.request, rule), 0);
	assert_int_equal(proto_request_add_filter(m.u.request, rule), -PC_E_PROTO);

	/* The largest REQUEST, rules included, fits a control payload. */
	assert_true(39073 + 2 + PROTO_REQ_FILTER_BYTES + PROTO_MAX_FILTERS <= PROTO_MAX_PAYLOAD);
}

/* SUMS carries at most PROTO_MAX_SUMS hashes: that many decode, one more
 * does not even when its bytes are there, and the encoder refuses it. */
static void test_sums_bound(void **state)
{
	static uint8_t hashes[(PROTO_MAX_SUMS + 1) * PROTO_SUM_LEN];
	struct proto_msg m = { .type = PROTO_SUMS }, out;
	int n;

	(void)state;
	fill_pattern(hashes, sizeof(hashes), 3);
	m.u.sums.id = 7;
	m.u.sums.hashes = hashes;
	m.u.sums.count = PROTO_MAX_SUMS;
	n = proto_encode(&m, frame, sizeof(frame));
	assert_int_equal(n, (int)(PROTO_FRAME_HDR_LEN + 14 + PROTO_MAX_SUMS * PROTO_SUM_LEN));
	assert_true((size_t)n - PROTO_FRAME_HDR_LEN <= PROTO_MAX_PAYLOAD);
	assert_int_equal(decode(PROTO_SUMS, payload(), (size_t)n - PROTO_FRAME_HDR_LEN, &out), 0);
	msg_same(&m, &out);
	m.u.sums.count = PROTO_MAX_SUMS + 1;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	uint8_t *p = payload();
	put_be(p, 7, 4);
	put_be(p + 4, 0, 8);
	put_be(p + 12, PROTO_MAX_SUMS + 1, 2);
	memcpy(p + 14, hashes, (PROTO_MAX_SUMS + 1) * PROTO_SUM_LEN);
	assert_int_equal(decode(PROTO_SUMS, p, 14 + (PROTO_MAX_SUMS + 1) * PROTO_SUM_LEN, &out),
			 -PC_E_PROTO);
	/* The hash is XXH3-128, high half first. */
	uint8_t sum[PROTO_SUM_LEN], want[PROTO_SUM_LEN];
	XXH128_hash_t h = XXH3_128bits("pcopy", 5);
	put_be(want, h.high64, 8);
	put_be(want + 8, h.low64, 8);
	proto_block_sum("pcopy", 5, sum);
	assert_memory_equal(sum, want, sizeof(sum));
}

/* REQUEST.sync CHECKSUM (version 10) and RESUME (version 11) go only with
 * UPDATE, and INPLACE (version 12) only with CHECKSUM, both ways. */
static void test_request_checksum(void **state)
{
	static const uint32_t bits[] = { PROTO_SYNC_CHECKSUM, PROTO_SYNC_RESUME };
	struct proto_msg m, out;
	int n;

	(void)state;
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
		sample(PROTO_REQUEST, &m);
		m.u.request->sync = bits[i] | PROTO_SYNC_UPDATE;
		n = proto_encode(&m, frame, sizeof(frame));
		assert_true(n > 0);
		assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n - PROTO_FRAME_HDR_LEN,
					&out), 0);
		assert_int_equal(out.u.request->sync, bits[i] | PROTO_SYNC_UPDATE);
		m.u.request->sync = bits[i];
		assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
		m.u.request->sync = PROTO_SYNC_UPDATE;
		n = proto_encode(&m, frame, sizeof(frame));
		put_be(payload() + REQ_SYNC_OFF, bits[i] | PROTO_SYNC_VERIFY, 4);
		assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n - PROTO_FRAME_HDR_LEN,
					&out), -PC_E_PROTO);
		put_be(payload() + REQ_SYNC_OFF, PROTO_SYNC_KNOWN << 1, 4);
		assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n - PROTO_FRAME_HDR_LEN,
					&out), -PC_E_PROTO);
	}
	/* INPLACE (version 12) goes only with CHECKSUM, and never with RESUME. */
	static const struct { uint32_t sync; int want; } inplace[] = {
		{ PROTO_SYNC_UPDATE | PROTO_SYNC_CHECKSUM | PROTO_SYNC_INPLACE, 0 },
		{ PROTO_SYNC_UPDATE | PROTO_SYNC_CHECKSUM | PROTO_SYNC_INPLACE | PROTO_SYNC_VERIFY, 0 },
		{ PROTO_SYNC_UPDATE | PROTO_SYNC_INPLACE, -PC_E_PROTO },
		{ PROTO_SYNC_UPDATE | PROTO_SYNC_RESUME | PROTO_SYNC_INPLACE, -PC_E_PROTO },
		{ PROTO_SYNC_UPDATE | PROTO_SYNC_CHECKSUM | PROTO_SYNC_RESUME | PROTO_SYNC_INPLACE,
		  -PC_E_PROTO },
	};
	for (size_t i = 0; i < sizeof(inplace) / sizeof(inplace[0]); i++) {
		sample(PROTO_REQUEST, &m);
		m.u.request->sync = PROTO_SYNC_UPDATE;
		n = proto_encode(&m, frame, sizeof(frame));
		assert_true(n > 0);
		put_be(payload() + REQ_SYNC_OFF, inplace[i].sync, 4);
		assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n - PROTO_FRAME_HDR_LEN,
					&out), inplace[i].want);
		m.u.request->sync = inplace[i].sync;
		assert_int_equal(proto_encode(&m, frame, sizeof(frame)) > 0 ? 0 : -PC_E_PROTO,
				 inplace[i].want);
	}
	/* PROTO_SUM_NONE: all zeros and nothing else. */
	uint8_t sum[PROTO_SUM_LEN] = { 0 };
	assert_true(proto_sum_none(sum));
	for (unsigned k = 0; k < PROTO_SUM_LEN; k++) {
		sum[k] = 1;
		assert_false(proto_sum_none(sum));
		sum[k] = 0;
	}
}

/* REQUEST.sync DELETE (version 9) goes only with UPDATE and RECURSIVE,
 * both ways. */
static void test_request_delete(void **state)
{
	static const struct { uint16_t flags; uint32_t sync; int want; } cases[] = {
		{ PROTO_REQ_RECURSIVE, PROTO_SYNC_DELETE | PROTO_SYNC_UPDATE, 0 },
		{ PROTO_REQ_RECURSIVE, PROTO_SYNC_KNOWN & ~PROTO_SYNC_INPLACE, 0 },
		{ PROTO_REQ_RECURSIVE, PROTO_SYNC_KNOWN, -PC_E_PROTO },
		{ PROTO_REQ_RECURSIVE, PROTO_SYNC_DELETE, -PC_E_PROTO },
		{ PROTO_REQ_RECURSIVE, PROTO_SYNC_DELETE | PROTO_SYNC_VERIFY, -PC_E_PROTO },
		{ 0, PROTO_SYNC_DELETE | PROTO_SYNC_UPDATE, -PC_E_PROTO },
		{ 0, PROTO_SYNC_UPDATE, 0 },
	};
	struct proto_msg m, out;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sample(PROTO_REQUEST, &m);
		m.u.request->flags = (uint16_t)((m.u.request->flags & ~PROTO_REQ_RECURSIVE) |
						cases[i].flags);
		m.u.request->sync = cases[i].sync;
		int n = proto_encode(&m, frame, sizeof(frame));
		if (cases[i].want == 0) {
			assert_true(n > 0);
			assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n -
						PROTO_FRAME_HDR_LEN, &out), 0);
			continue;
		}
		assert_int_equal(n, -PC_E_PROTO);
		/* The same bytes from a peer: encode it allowed, then patch. */
		m.u.request->sync = PROTO_SYNC_UPDATE;
		n = proto_encode(&m, frame, sizeof(frame));
		assert_true(n > 0);
		put_be(payload() + REQ_SYNC_OFF, cases[i].sync, 4);
		assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n - PROTO_FRAME_HDR_LEN,
					&out), -PC_E_PROTO);
	}
}

static void test_string_empty(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(str_cases) / sizeof(str_cases[0]); i++) {
		const struct str_case *c = &str_cases[i];
		struct proto_msg m, out;

		sample(c->type, &m);
		memset(str_field(&m), 0, c->max + 1);
		if (c->type == PROTO_REQUEST || c->type == PROTO_LIST) {
			/* A request's paths, and a listed path, may not be empty. */
			assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
			continue;
		}
		size_t plen = encode_ok(&m);
		assert_int_equal(plen, c->len_off + 2);
		assert_int_equal(decode(c->type, payload(), plen, &out), 0);
		msg_same(&m, &out);
	}
}

static void test_string_nul_rejected(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(str_cases) / sizeof(str_cases[0]); i++) {
		const struct str_case *c = &str_cases[i];
		struct proto_msg m, out;

		sample(c->type, &m);
		size_t plen = encode_ok(&m);
		size_t slen = plen - c->len_off - 2 - c->tail;
		size_t where[] = { 0, slen / 2, slen - 1 };

		for (size_t k = 0; k < 3; k++) {
			size_t at = c->len_off + 2 + where[k];
			uint8_t save = payload()[at];

			payload()[at] = 0;
			assert_int_equal(decode(c->type, payload(), plen, &out), -PC_E_PROTO);
			payload()[at] = save;
		}
		assert_int_equal(decode(c->type, payload(), plen, &out), 0);
	}
}

/* One numeric field of a sample payload overwritten with value. */
struct range_case {
	uint8_t type;
	size_t off;
	size_t width;
	uint64_t value;
	int want;
};

static const struct range_case range_cases[] = {
	{ PROTO_HELLO, 0, 4, PROTO_MAGIC + 1, -PC_E_PROTO },
	{ PROTO_HELLO, 0, 4, 0, -PC_E_PROTO },
	{ PROTO_HELLO, 4, 2, 2, -PC_E_PROTO },       /* version < min_version 3 */
	{ PROTO_HELLO, 4, 2, 3, 0 },
	{ PROTO_HELLO, 6, 2, 0, -PC_E_PROTO },       /* version 0 does not exist */
	{ PROTO_HELLO, 6, 2, 7, 0 },
	{ PROTO_HELLO, 6, 2, 8, -PC_E_PROTO },
	{ PROTO_HELLO, 8, 4, 0xffffffff, 0 },        /* unknown caps are ignored */
	{ PROTO_REQUEST, 0, 1, 0, -PC_E_PROTO },
	{ PROTO_REQUEST, 0, 1, PROTO_ROLE_SINK, 0 },
	{ PROTO_REQUEST, 0, 1, PROTO_ROLE_SOURCE, 0 },
	{ PROTO_REQUEST, 0, 1, PROTO_ROLE_PROBE, 0 }, /* version 7, with its one path */
	{ PROTO_REQUEST, 0, 1, 4, -PC_E_PROTO },
	{ PROTO_REQUEST, 0, 1, 255, -PC_E_PROTO },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_KNOWN & ~PROTO_REQ_CIPHER_CHACHA, 0 }, /* flags: u16 */
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_KNOWN, -PC_E_PROTO }, /* both cipher bits */
	{ PROTO_REQUEST, 1, 2, 0x3ff | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_RECURSIVE | PROTO_REQ_PRESERVE | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_NUMERIC_IDS | PROTO_REQ_DEREF | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_ENCRYPT | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_ENCRYPT | PROTO_REQ_CIPHER_AES | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_ENCRYPT | PROTO_REQ_CIPHER_CHACHA | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_CIPHER_AES | SAMPLE_SSH, -PC_E_PROTO }, /* a cipher in clear */
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_CIPHER_CHACHA | SAMPLE_SSH, -PC_E_PROTO },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_SSH_DATA | SAMPLE_SSH, 0 },
	/* The ssh strings need CONNECT_SSH, and CONNECT_SSH needs CONNECT. */
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_CONNECT, -PC_E_PROTO },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_CONNECT_SSH, -PC_E_PROTO },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_SSH_DATA, -PC_E_PROTO },
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_SSH_ONLY | SAMPLE_SSH, -PC_E_PROTO }, /* no SSH_DATA */
	{ PROTO_REQUEST, 1, 2, PROTO_REQ_SSH_ONLY | PROTO_REQ_SSH_DATA | SAMPLE_SSH, 0 },
	{ PROTO_REQUEST, 1, 2, 0xffff, -PC_E_PROTO }, /* both cipher bits */
	{ PROTO_REQUEST, 3, 2, 0, -PC_E_PROTO },
	{ PROTO_REQUEST, 3, 2, 1, 0 },
	{ PROTO_REQUEST, 3, 2, PROTO_MAX_STREAMS, 0 },
	{ PROTO_REQUEST, 3, 2, PROTO_MAX_STREAMS + 1, -PC_E_PROTO },
	{ PROTO_REQUEST, 3, 2, 0xffff, -PC_E_PROTO },
	{ PROTO_REQUEST, 5, 4, 0, -PC_E_PROTO },
	{ PROTO_REQUEST, 5, 4, PROTO_MIN_BLOCK - 1, -PC_E_PROTO },
	{ PROTO_REQUEST, 5, 4, PROTO_MIN_BLOCK, 0 },
	{ PROTO_REQUEST, 5, 4, PROTO_MAX_BLOCK, 0 },
	{ PROTO_REQUEST, 5, 4, PROTO_MAX_BLOCK + 1, -PC_E_PROTO },
	{ PROTO_REQUEST, 5, 4, 0xffffffff, -PC_E_PROTO },
	{ PROTO_REQUEST, 9, 4, 0xffffffff, 0 },       /* window: any */
	{ PROTO_REQUEST, 21, 2, 5011, -PC_E_PROTO },  /* port_lo > port_hi 5010 */
	{ PROTO_REQUEST, 21, 2, 5010, 0 },
	{ PROTO_REQUEST, 21, 2, 0, -PC_E_PROTO },     /* no low end, but a high one */
	{ PROTO_REQUEST, 23, 2, 4999, -PC_E_PROTO },  /* port_hi < port_lo 5000 */
	{ PROTO_REQUEST, 23, 2, 0xffff, 0 },
	{ PROTO_REQUEST, 25, 1, 0, 0 },               /* family: any, 4 or 6 */
	{ PROTO_REQUEST, 25, 1, 4, 0 },
	{ PROTO_REQUEST, 25, 1, 5, -PC_E_PROTO },
	{ PROTO_REQUEST, 25, 1, 255, -PC_E_PROTO },
	/* bwlimit (version 8): 0 (none), or PROTO_MIN_BWLIMIT..PROTO_MAX_BWLIMIT */
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, 0, 0 },
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, 1, -PC_E_PROTO },
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, PROTO_MIN_BWLIMIT - 1, -PC_E_PROTO },
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, PROTO_MIN_BWLIMIT, 0 },
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, PROTO_MAX_BWLIMIT, 0 },
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, PROTO_MAX_BWLIMIT + 1, -PC_E_PROTO },
	{ PROTO_REQUEST, REQ_BWLIMIT_OFF, 8, UINT64_MAX, -PC_E_PROTO },
	/* sync (version 8): only the known bits */
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, 0, 0 },
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, PROTO_SYNC_UPDATE, 0 },
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, PROTO_SYNC_VERIFY, 0 },
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, PROTO_SYNC_UPDATE | PROTO_SYNC_VERIFY, 0 },
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, PROTO_SYNC_KNOWN << 1, -PC_E_PROTO },
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, 0x80000000, -PC_E_PROTO },
	{ PROTO_REQUEST, REQ_SYNC_OFF, 4, 0xffffffff, -PC_E_PROTO },
	/* HAVE (version 8): first_id any; count 1..4096, with (count + 7) / 8
	 * bytes of bits (the sample: 2) and no bit at or past count (the
	 * sample's highest is 11) */
	{ PROTO_HAVE, 0, 4, 0, 0 },
	{ PROTO_HAVE, 0, 4, 0xffffffff, 0 },
	{ PROTO_HAVE, 4, 2, 0, -PC_E_PROTO },
	{ PROTO_HAVE, 4, 2, 8, -PC_E_PROTO },          /* 1 byte of bits, 2 came */
	{ PROTO_HAVE, 4, 2, 11, -PC_E_PROTO },         /* bit 11 is past count */
	{ PROTO_HAVE, 4, 2, 12, 0 },
	{ PROTO_HAVE, 4, 2, 16, 0 },
	{ PROTO_HAVE, 4, 2, 17, -PC_E_PROTO },         /* 3 bytes of bits, 2 came */
	{ PROTO_HAVE, 4, 2, PROTO_MAX_BATCH + 1, -PC_E_PROTO },
	{ PROTO_HAVE, 4, 2, 0xffff, -PC_E_PROTO },
	/* LIST (version 9): what is NEW, CHANGED or GONE, nothing else */
	{ PROTO_LIST, 0, 1, 0, -PC_E_PROTO },
	{ PROTO_LIST, 0, 1, PROTO_LIST_NEW, 0 },
	{ PROTO_LIST, 0, 1, PROTO_LIST_GONE, 0 },
	{ PROTO_LIST, 0, 1, PROTO_LIST_GONE + 1, -PC_E_PROTO },
	{ PROTO_LIST, 0, 1, 0xff, -PC_E_PROTO },
	/* END, DONE (version 8): unchanged and its bytes, any value */
	{ PROTO_END, 296, 8, 0, 0 },
	{ PROTO_DONE, 296, 8, UINT64_MAX, 0 },
	{ PROTO_DONE, 304, 8, UINT64_MAX, 0 },
	/* END, DONE (version 9): deleted, any value */
	{ PROTO_DONE, 312, 8, UINT64_MAX, 0 },
	{ PROTO_END, 312, 8, 0, 0 },
	/* END, DONE (version 11): resumed, at most files (20000 + type) */
	{ PROTO_DONE, 320, 8, 20000u + PROTO_DONE, 0 },
	{ PROTO_DONE, 320, 8, 20001u + PROTO_DONE, -PC_E_PROTO },
	{ PROTO_END, 320, 8, 0, 0 },
	{ PROTO_END, 320, 8, UINT64_MAX, -PC_E_PROTO },
	/* SUMS (version 10): a count of 1..PROTO_MAX_SUMS that the bytes
	 * match, a range that does not wrap; id and first are the source's
	 * to check */
	{ PROTO_SUMS, 0, 4, UINT32_MAX, 0 },
	{ PROTO_SUMS, 4, 8, 0, 0 },
	{ PROTO_SUMS, 4, 8, UINT64_MAX - 2, 0 },
	{ PROTO_SUMS, 4, 8, UINT64_MAX - 1, -PC_E_PROTO },
	{ PROTO_SUMS, 4, 8, UINT64_MAX, -PC_E_PROTO },
	{ PROTO_SUMS, 12, 2, 0, -PC_E_PROTO },
	{ PROTO_SUMS, 12, 2, 1, -PC_E_PROTO },        /* a hash too many */
	{ PROTO_SUMS, 12, 2, 3, -PC_E_PROTO },        /* a hash too few */
	{ PROTO_SUMS, 12, 2, PROTO_MAX_SUMS + 1, -PC_E_PROTO },
	{ PROTO_READY, 0, 2, 0, 0 }, /* port 0: the server connects instead */
	{ PROTO_READY, 0, 2, 1, 0 },
	/* ENTRIES: the batch header, then the sample's one REG entry. */
	{ PROTO_ENTRIES, 0, 4, 0, 0 },
	{ PROTO_ENTRIES, 0, 4, 0xffffffff, 0 },       /* the last id there is */
	{ PROTO_ENTRIES, 4, 2, 0, -PC_E_PROTO },      /* count 0 */
	{ PROTO_ENTRIES, 4, 2, 2, -PC_E_PROTO },      /* fewer entries than counted */
	{ PROTO_ENTRIES, 4, 2, PROTO_MAX_BATCH + 1, -PC_E_PROTO },
	{ PROTO_ENTRIES, 4, 2, 0xffff, -PC_E_PROTO },
	{ PROTO_ENTRIES, 6, 1, 0, -PC_E_PROTO },      /* type */
	{ PROTO_ENTRIES, 6, 1, PROTO_ENT_DIR, -PC_E_PROTO }, /* a DIR with a size */
	{ PROTO_ENTRIES, 6, 1, PROTO_ENT_TYPE_MAX, -PC_E_PROTO },
	{ PROTO_ENTRIES, 6, 1, 0xff, -PC_E_PROTO },
	{ PROTO_ENTRIES, 7, 1, PROTO_ENT_LINKED, 0 }, /* flags */
	{ PROTO_ENTRIES, 7, 1, PROTO_ENT_SIZE_UNKNOWN, -PC_E_PROTO }, /* size is not 0 */
	{ PROTO_ENTRIES, 7, 1, 0x4, -PC_E_PROTO },
	{ PROTO_ENTRIES, 7, 1, 0x80, -PC_E_PROTO },
	{ PROTO_ENTRIES, 8, 4, 07777, 0 },            /* mode */
	{ PROTO_ENTRIES, 8, 4, 010000, -PC_E_PROTO },
	{ PROTO_ENTRIES, 8, 4, 0100644, -PC_E_PROTO },
	{ PROTO_ENTRIES, 8, 4, 0xffffffff, -PC_E_PROTO },
	{ PROTO_ENTRIES, 12, 4, 0xffffffff, 0 },      /* uid, gid: any */
	{ PROTO_ENTRIES, 16, 4, 0, 0 },
	{ PROTO_ENTRIES, 20, 8, 0x8000000000000000ull, 0 }, /* mtime_s: any */
	{ PROTO_ENTRIES, 28, 4, 0, 0 },               /* mtime_ns */
	{ PROTO_ENTRIES, 28, 4, 999999999, 0 },
	{ PROTO_ENTRIES, 28, 4, 1000000000, -PC_E_PROTO },
	{ PROTO_ENTRIES, 28, 4, 0xffffffff, -PC_E_PROTO },
	{ PROTO_ENTRIES, 32, 8, 0xffffffffffffffffull, 0 }, /* atime_s: any */
	{ PROTO_ENTRIES, 40, 4, 999999999, 0 },       /* atime_ns */
	{ PROTO_ENTRIES, 40, 4, 1000000000, -PC_E_PROTO },
	{ PROTO_ENTRIES, 44, 8, 0, 0 },               /* size: any for a REG */
	{ PROTO_ENTRIES, 44, 8, UINT64_MAX, 0 },
	{ PROTO_ENTRIES, 52, 8, 1, -PC_E_PROTO },     /* rdev on a REG */
	{ PROTO_ENTRIES, 60, 4, 1, -PC_E_PROTO },     /* link_id on a REG */
	{ PROTO_FILE_END, 0, 4, 0xffffffff, 0 },
	{ PROTO_FILE_END, 4, 8, 0, 0 },
	{ PROTO_FILE_DONE, 4, 4, 0, -PC_E_PROTO },    /* success is an ACK's business */
	{ PROTO_FILE_DONE, 4, 4, 1, -PC_E_PROTO },
	{ PROTO_FILE_DONE, 4, 4, 0x7fffffff, -PC_E_PROTO },
	{ PROTO_FILE_DONE, 4, 4, 0x80000000, 0 },
	{ PROTO_FILE_DONE, 4, 4, 0xffffffff, 0 },
	{ PROTO_FILE_FAIL, 0, 4, 0, 0 },              /* id: any; the sink checks it */
	{ PROTO_FILE_FAIL, 4, 4, 0, -PC_E_PROTO },    /* giving up is a failure */
	{ PROTO_FILE_FAIL, 4, 4, 1, -PC_E_PROTO },
	{ PROTO_FILE_FAIL, 4, 4, 0x7fffffff, -PC_E_PROTO },
	{ PROTO_FILE_FAIL, 4, 4, 0x80000000, 0 },
	{ PROTO_FILE_FAIL, 4, 4, 0xffffffff, 0 },
	{ PROTO_ACK, 0, 4, 0, 0 },                    /* upto: the receiver checks it */
	{ PROTO_ACK, 0, 4, 0xffffffff, 0 },
	{ PROTO_ERROR, 0, 4, 0, 0 },
	{ PROTO_ERROR, 0, 4, 1, -PC_E_PROTO },
	{ PROTO_ERROR, 0, 4, 0x7fffffff, -PC_E_PROTO },
	{ PROTO_ERROR, 0, 4, 0xffffffff, 0 },
	{ PROTO_SKIP, 0, 4, 0, 0 },                  /* index: any; the client checks it */
	{ PROTO_SKIP, 0, 4, 0xffffffff, 0 },
	{ PROTO_SKIP, 4, 4, 0, -PC_E_PROTO },        /* a skipped source failed */
	{ PROTO_SKIP, 4, 4, 1, -PC_E_PROTO },
	{ PROTO_SKIP, 4, 4, 0x7fffffff, -PC_E_PROTO },
	{ PROTO_SKIP, 4, 4, 0x80000000, 0 },
	{ PROTO_SKIP, 4, 4, 0xffffffff, 0 },
	/* END, DONE (version 7): the stage times. The sample's READ stage has
	 * 2 threads, a span of 2 * wall_us, busy + in + out == span. */
	{ PROTO_END, 48, 8, 0, -PC_E_PROTO },                  /* wall 0, stages not */
	{ PROTO_END, 48, 8, SAMPLE_WALL * 2, 0 },
	{ PROTO_END, STAGE_OFF(0), 4, 0, -PC_E_PROTO },        /* no thread, some time */
	{ PROTO_END, STAGE_OFF(0), 4, 1, -PC_E_PROTO },        /* span > 1 * wall */
	{ PROTO_END, STAGE_OFF(0), 4, PROTO_STAGE_MAX_THREADS, 0 },
	{ PROTO_END, STAGE_OFF(0), 4, PROTO_STAGE_MAX_THREADS + 1, -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(0), 4, 0xffffffff, -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(0) + 4, 8, SAMPLE_WALL * 2 + 1, 0 }, /* span / threads <= wall */
	{ PROTO_END, STAGE_OFF(0) + 4, 8, SAMPLE_WALL * 2 + 2, -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(0) + 4, 8, SAMPLE_WALL * 2 - 1, -PC_E_PROTO }, /* parts > span */
	{ PROTO_END, STAGE_OFF(0) + 4, 8, UINT64_MAX, -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(0) + 12, 8, SAMPLE_WALL - 1, 0 }, /* busy: less is fine */
	{ PROTO_END, STAGE_OFF(0) + 12, 8, SAMPLE_WALL + 1, -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(0) + 12, 8, UINT64_MAX, -PC_E_PROTO }, /* no wrap of the sum */
	{ PROTO_END, STAGE_OFF(0) + 20, 8, SAMPLE_WALL / 2 + 1, -PC_E_PROTO }, /* in */
	{ PROTO_END, STAGE_OFF(0) + 20, 8, 0x8000000000000000ull, -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(0) + 28, 8, 0, 0 },             /* out */
	{ PROTO_END, STAGE_OFF(0) + 28, 8, SAMPLE_WALL * 2 - SAMPLE_WALL - SAMPLE_WALL / 2 + 1,
	  -PC_E_PROTO },
	{ PROTO_END, STAGE_OFF(2), 4, 0, -PC_E_PROTO },        /* SEND: 4 threads */
	{ PROTO_END, STAGE_OFF(3), 4, 1, -PC_E_PROTO },        /* a sink stage in END */
	{ PROTO_END, STAGE_OFF(5) + 28, 8, 1, -PC_E_PROTO },
	{ PROTO_DONE, STAGE_OFF(0), 4, 1, -PC_E_PROTO },       /* a source stage in DONE */
	{ PROTO_DONE, STAGE_OFF(2) + 4, 8, 1, -PC_E_PROTO },
	{ PROTO_DONE, STAGE_OFF(3), 4, 1, -PC_E_PROTO },       /* RECV: span > 1 * wall */
	{ PROTO_DONE, STAGE_OFF(3), 4, 3, 0 },
	{ PROTO_DONE, STAGE_OFF(5) + 28, 8, SAMPLE_WALL + 1, -PC_E_PROTO }, /* WRITE: out */
	/* PROBE: op, two zero fields, arg (the sample: SIDE, 256 MiB) */
	{ PROTO_PROBE, 0, 1, 0, -PC_E_PROTO },
	{ PROTO_PROBE, 0, 1, PROTO_PROBE_MARK, -PC_E_PROTO },  /* a MARK has no arg */
	{ PROTO_PROBE, 0, 1, PROTO_PROBE_END, -PC_E_PROTO },   /* nor an END */
	{ PROTO_PROBE, 0, 1, PROTO_PROBE_OP_MAX, -PC_E_PROTO },
	{ PROTO_PROBE, 0, 1, 0xff, -PC_E_PROTO },
	{ PROTO_PROBE, 1, 1, 1, -PC_E_PROTO },
	{ PROTO_PROBE, 2, 2, 0x8000, -PC_E_PROTO },
	{ PROTO_PROBE, 4, 4, 0, -PC_E_PROTO },                /* a SIDE writes 1..256 MiB */
	{ PROTO_PROBE, 4, 4, 1, 0 },
	{ PROTO_PROBE, 4, 4, PROTO_PROBE_MAX_WRITE_MIB, 0 },
	{ PROTO_PROBE, 4, 4, PROTO_PROBE_MAX_WRITE_MIB + 1, -PC_E_PROTO },
	{ PROTO_PROBE, 4, 4, 0xffffffff, -PC_E_PROTO },
	/* PROBE_FIG (the sample: SIDE, 2 codecs, disk status 0 with figures) */
	{ PROTO_PROBE_FIG, 0, 1, 0, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 0, 1, PROTO_PROBE_MARK, 0 },
	{ PROTO_PROBE_FIG, 0, 1, PROTO_PROBE_END, 0 },
	{ PROTO_PROBE_FIG, 0, 1, PROTO_PROBE_OP_MAX, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 1, 1, 0, -PC_E_PROTO },            /* the records must match the count */
	{ PROTO_PROBE_FIG, 1, 1, 1, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 1, 1, 3, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 1, 1, PROTO_PROBE_MAX_CODECS + 1, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 1, 1, 0xff, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 2, 2, 0, 0 },                      /* cpus: any */
	{ PROTO_PROBE_FIG, 4, 4, 1, -PC_E_PROTO },            /* a status is 0 or negative */
	{ PROTO_PROBE_FIG, 4, 4, 0x7fffffff, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, 4, 4, 0xffffffe4, -PC_E_PROTO },   /* failed, yet with figures */
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED, 1, PROTO_CODEC_NONE, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED, 1, PROTO_CODEC_BZ2, 0 },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED, 1, PROTO_CODEC_MAX, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 1, 1, 0, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 1, 1, PROTO_PROBE_MAX_LEVEL, 0 },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 1, 1, PROTO_PROBE_MAX_LEVEL + 1, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 2, 2, 1, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 4, 4, 0, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 4, 4, PROTO_MAX_BLOCK, 0 },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + 4, 4, PROTO_MAX_BLOCK + 1, -PC_E_PROTO },
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + PROBE_FIG_CODEC, 1, 0, -PC_E_PROTO }, /* the 2nd */
	{ PROTO_PROBE_FIG, PROBE_FIG_FIXED + PROBE_FIG_CODEC + 1, 1, 13, -PC_E_PROTO },
};

static void test_range_checks(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(range_cases) / sizeof(range_cases[0]); i++) {
		const struct range_case *c = &range_cases[i];
		struct proto_msg m, out;

		sample(c->type, &m);
		size_t plen = encode_ok(&m);
		put_be(payload() + c->off, c->value, c->width);
		int ret = decode(c->type, payload(), plen, &out);

		if (ret != c->want)
			fail_msg("case %zu: type %s offset %zu value %#llx: got %d, want %d", i,
				 proto_type_name(c->type), c->off, (unsigned long long)c->value,
				 ret, c->want);
		if (ret == 0) {
			/* What decodes must encode back to the same bytes. */
			uint8_t again[FRAME_CAP];

			assert_int_equal(proto_encode(&out, again, sizeof(again)),
					 PROTO_FRAME_HDR_LEN + plen);
			assert_memory_equal(again + PROTO_FRAME_HDR_LEN, payload(), plen);
		}
	}
}

static void test_file_size_unknown(void **state)
{
	struct proto_msg m, out;
	size_t pos = 0;

	(void)state;
	sample(PROTO_ENTRIES, &m);
	ent_in.flags = PROTO_ENT_SIZE_UNKNOWN;
	proto_batch_init(&batch_in, 0);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	assert_int_equal(batch_in.count, 0);
	ent_in.size = 0;
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
	proto_batch_msg(&batch_in, &m);
	size_t plen = encode_ok(&m);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	assert_int_equal(proto_entries_next(&out.u.entries, &pos, &ent_out), 1);
	assert_int_equal(ent_out.flags, PROTO_ENT_SIZE_UNKNOWN);
	assert_int_equal(ent_out.size, 0);
}

/* The encoder refuses what the decoder would refuse. */
static void test_encode_rejects_invalid(void **state)
{
	struct proto_msg m;

	(void)state;
	sample(PROTO_HELLO, &m);
	m.u.hello.magic = PROTO_DATA_MAGIC;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_HELLO, &m);
	m.u.hello.min_version = 8;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_REQUEST, &m);
	m.u.request->streams = PROTO_MAX_STREAMS + 1;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_REQUEST, &m);
	m.u.request->role = 0;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_REQUEST, &m);
	m.u.request = NULL;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_ENTRIES, &m);
	m.u.entries.count = 0;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_ENTRIES, &m);
	m.u.entries.count = 2; /* one entry in the body */
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_ENTRIES, &m);
	m.u.entries.body_len--; /* the last entry cut short */
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_ENTRIES, &m);
	ent_in.mode = 0100644;
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	sample(PROTO_FILE_DONE, &m);
	m.u.file_done.status = 0;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_FILE_FAIL, &m);
	m.u.file_fail.status = 0;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_ERROR, &m);
	m.u.error.code = PC_E_PROTO;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_END, &m); /* stage times that do not fit the wall time */
	m.u.stats.wall_us--;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_DONE, &m);
	m.u.stats.stage[PROTO_STAGE_WRITE].busy_us++;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	sample(PROTO_SKIP, &m);
	m.u.skip.status = PC_E_PARTIAL;
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	memset(&m, 0, sizeof(m));
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO); /* type 0 */
	for (unsigned t = PROTO_TYPE_MAX; t < 256; t++) {
		m.type = (uint8_t)t;
		assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	}
}

static void test_encode_small_buffer(void **state)
{
	(void)state;
	for (uint8_t t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++) {
		struct proto_msg m;
		uint8_t buf[512];

		sample(t, &m);
		size_t n = PROTO_FRAME_HDR_LEN + sample_payload_len(t);
		assert_true(n <= sizeof(buf));
		for (size_t cap = 0; cap < n; cap++) {
			memset(buf, 0xa5, sizeof(buf));
			assert_int_equal(proto_encode(&m, buf, cap), -PC_E_PROTO);
			for (size_t i = cap; i < sizeof(buf); i++)
				assert_int_equal(buf[i], 0xa5); /* nothing written past cap */
		}
		assert_int_equal(proto_encode(&m, buf, n), (int)n);
	}
}

static void test_frame_header(void **state)
{
	uint8_t hdr[PROTO_FRAME_HDR_LEN];
	uint8_t type = 0;
	uint32_t len = 0;

	(void)state;
	memcpy(hdr, "\x06\x00\x00\x00\x00\x01\x00\x00", 8);
	assert_int_equal(proto_frame_decode(hdr, &type, &len), 0);
	assert_int_equal(type, PROTO_ENTRIES);
	assert_int_equal(len, PROTO_MAX_PAYLOAD);

	hdr[7] = 1; /* 65537 */
	assert_int_equal(proto_frame_decode(hdr, &type, &len), -PC_E_PROTO);
	memcpy(hdr, "\x06\x00\x00\x00\xff\xff\xff\xff", 8);
	assert_int_equal(proto_frame_decode(hdr, &type, &len), -PC_E_PROTO);

	static const uint8_t bad_types[] = { 0, PROTO_TYPE_MAX, 0x80, 0xff };
	for (size_t i = 0; i < sizeof(bad_types); i++) {
		memcpy(hdr, "\x01\x00\x00\x00\x00\x00\x00\x2c", 8);
		hdr[0] = bad_types[i];
		assert_int_equal(proto_frame_decode(hdr, &type, &len), -PC_E_PROTO);
	}
	for (size_t byte = 1; byte <= 3; byte++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			memcpy(hdr, "\x01\x00\x00\x00\x00\x00\x00\x2c", 8);
			hdr[byte] = (uint8_t)(1u << bit);
			assert_int_equal(proto_frame_decode(hdr, &type, &len), -PC_E_PROTO);
		}
	}
	for (uint8_t t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++) {
		memcpy(hdr, "\x01\x00\x00\x00\x00\x00\x00\x00", 8);
		hdr[0] = t;
		assert_int_equal(proto_frame_decode(hdr, &type, &len), 0);
		assert_int_equal(type, t);
		assert_int_equal(len, 0);
	}
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(proto_type_name(PROTO_HELLO), "HELLO");
	assert_string_equal(proto_type_name(PROTO_FILE_DONE), "FILE_DONE");
	assert_string_equal(proto_type_name(PROTO_ERROR), "ERROR");
	assert_string_equal(proto_type_name(PROTO_SKIP), "SKIP");
	assert_string_equal(proto_type_name(PROTO_ENTRIES), "ENTRIES");
	assert_string_equal(proto_type_name(PROTO_FILE_FAIL), "FILE_FAIL");
	assert_string_equal(proto_type_name(PROTO_ACK), "ACK");
	assert_string_equal(proto_type_name(PROTO_HAVE), "HAVE");
	assert_string_equal(proto_type_name(PROTO_LIST), "LIST");
	assert_string_equal(proto_type_name(PROTO_SUMS), "SUMS");
	assert_string_equal(proto_type_name(0), "?");
	assert_string_equal(proto_type_name(PROTO_TYPE_MAX), "?");
	assert_string_equal(proto_type_name(255), "?");
	for (uint8_t t = PROTO_HELLO; t < PROTO_TYPE_MAX; t++)
		assert_string_not_equal(proto_type_name(t), "?");
}

/* ---- Tree entries -------------------------------------------------------- */

/* A valid entry of type t with every field set where t allows it; id is
 * the id it will get (a HARDLINK names the entry before it). */
static void entry_of(uint8_t t, uint32_t id, struct proto_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->type = t;
	e->mode = 0755;
	e->uid = 1000;
	e->gid = 100 + t;
	e->mtime_s = 1700000000 + t;
	e->mtime_ns = 123456789;
	e->atime_s = -5;
	e->atime_ns = 999999999;
	snprintf(e->path, sizeof(e->path), "top/dir/n%u", (unsigned)t);
	strcpy(e->user, "user");
	strcpy(e->group, "gr oup");
	switch (t) {
	case PROTO_ENT_REG:
		e->flags = PROTO_ENT_LINKED;
		e->size = 1234567;
		break;
	case PROTO_ENT_SYMLINK:
		strcpy(e->target, "../../etc/passwd");
		break;
	case PROTO_ENT_HARDLINK:
		e->link_id = id - 1;
		break;
	case PROTO_ENT_CHR:
	case PROTO_ENT_BLK:
		e->rdev = 0x0000010300000004ull;
		break;
	case PROTO_ENT_DIR:
	case PROTO_ENT_DIR_END:
		strcpy(e->path, "top/dir");
		break;
	default:
		break;
	}
}

static void entry_equal(const struct proto_entry *a, const struct proto_entry *b)
{
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->mode, b->mode);
	assert_int_equal(a->uid, b->uid);
	assert_int_equal(a->gid, b->gid);
	assert_true(a->mtime_s == b->mtime_s);
	assert_int_equal(a->mtime_ns, b->mtime_ns);
	assert_true(a->atime_s == b->atime_s);
	assert_int_equal(a->atime_ns, b->atime_ns);
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->rdev, b->rdev);
	assert_int_equal(a->link_id, b->link_id);
	assert_string_equal(a->path, b->path);
	assert_string_equal(a->target, b->target);
	assert_string_equal(a->user, b->user);
	assert_string_equal(a->group, b->group);
}

/* Every entry type, one after another: built, encoded, decoded, read back
 * with its id, and encoded again to the same bytes. */
static void test_entries_roundtrip(void **state)
{
	static struct proto_entry want[PROTO_ENT_TYPE_MAX];
	struct proto_msg m, out;
	uint8_t again[FRAME_CAP];
	size_t pos = 0, plen;
	unsigned n = 0;
	int ret;

	(void)state;
	proto_batch_init(&batch_in, 1000);
	for (uint8_t t = PROTO_ENT_REG; t < PROTO_ENT_TYPE_MAX; t++) {
		entry_of(t, 1000 + n, &want[n]);
		assert_int_equal(proto_batch_add(&batch_in, &want[n]), 0);
		n++;
	}
	assert_int_equal(batch_in.count, n);
	proto_batch_msg(&batch_in, &m);
	plen = encode_ok(&m);
	assert_int_equal(plen, 6 + batch_in.len);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	assert_ptr_equal(out.u.entries.body, payload() + 6); /* borrowed, not copied */
	for (unsigned i = 0; (ret = proto_entries_next(&out.u.entries, &pos, &ent_out)) == 1; i++) {
		assert_true(i < n);
		assert_int_equal(ent_out.id, 1000 + i);
		entry_equal(&want[i], &ent_out);
	}
	assert_int_equal(ret, 0);
	assert_int_equal(proto_entries_next(&out.u.entries, &pos, &ent_out), 0); /* stays done */
	assert_int_equal(proto_encode(&out, again, sizeof(again)), (int)(8 + plen));
	assert_memory_equal(again, frame, 8 + plen);
	/* The builder's own message reads back the same way. */
	pos = 0;
	assert_int_equal(proto_entries_next(&m.u.entries, &pos, &ent_out), 1);
	entry_equal(&want[0], &ent_out);
}

static void test_relpath(void **state)
{
	static const char *const good[] = { "a", "...", ".a", "a.", "..a", "a..", "a/b/c",
					    "a b/\n/\xff\xfe", "-x", "a/.../b" };
	static const char *const bad[] = { "/a", "/", "a//b", "a/", "a/b/", ".", "..", "./a",
					   "../a", "a/.", "a/..", "a/./b", "a/../b", "//" };
	char p[PROTO_MAX_PATH + 2];

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (proto_check_relpath(good[i], strlen(good[i])) != 0)
			fail_msg("'%s' refused", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (proto_check_relpath(bad[i], strlen(bad[i])) != -PC_E_PROTO)
			fail_msg("'%s' accepted", bad[i]);
	assert_int_equal(proto_check_relpath("", 0), -PC_E_PROTO);
	assert_int_equal(proto_check_relpath("a\0b", 3), -PC_E_PROTO); /* a NUL inside */
	/* A component of 255 bytes, not 256 (and "x/" and 255 bytes below). */
	memset(p, 'c', PROTO_MAX_NAME + 2);
	assert_int_equal(proto_check_relpath(p, PROTO_MAX_NAME), 0);
	assert_int_equal(proto_check_relpath(p, PROTO_MAX_NAME + 1), -PC_E_PROTO);
	p[0] = 'x';
	p[1] = '/';
	assert_int_equal(proto_check_relpath(p, PROTO_MAX_NAME + 2), 0);
	/* 4096 bytes in all, not 4097 (components of 15 bytes and a '/'). */
	for (size_t i = 0; i < sizeof(p); i++)
		p[i] = i % 16 == 14 ? '/' : 'd';
	assert_int_equal(proto_check_relpath(p, PROTO_MAX_PATH), 0);
	assert_int_equal(proto_check_relpath(p, PROTO_MAX_PATH + 1), -PC_E_PROTO);
}

/* Encodes a one-entry ENTRIES of e (which must be valid), then lets the
 * caller break it in place: returns the payload length. */
static size_t entries_encoded(const struct proto_entry *e)
{
	struct proto_msg m;

	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, e), 0);
	proto_batch_msg(&batch_in, &m);
	return encode_ok(&m);
}

/* Each path rule, refused by the builder and by the decoder (the decoder
 * sees the bad path spliced into a good payload of the same length). */
/* A visitor for proto_pack_walk: ids divisible by 3 have no contents;
 * the others take id % 5 bytes when their status is 0. Counts visits. */
static int pack_visits;

static int pack_visit(void *arg, uint32_t id, int32_t st, const uint8_t *p, uint64_t avail,
		      uint64_t *took)
{
	(void)p;
	(void)avail;
	pack_visits++;
	*took = st == 0 && id % 3 != 0 ? id % 5 : 0;
	return arg != NULL && id == *(const uint32_t *)arg ? -ENOSPC : 0;
}

static void put_status(uint8_t *p, int32_t st)
{
	uint32_t v = (uint32_t)st;

	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Every bound of a PACK's layout (PROTOCOL.md 6.3): statuses, contents
 * that add up exactly, a visitor's stop. */
static void test_pack_walk(void **state)
{
	uint8_t raw[64] = { 0 };
	uint32_t stop = 11;

	(void)state;
	/* ids 10..13: 10 has 0 bytes, 11 takes 1, 12 none (div by 3), 13 takes 3 */
	put_status(raw + 4, 1);       /* 11: carried in DATA blocks instead */
	put_status(raw + 8, -13);     /* 12: failed at the source */
	pack_visits = 0;
	assert_int_equal(proto_pack_walk(raw, 16 + 3, 10, 4, pack_visit, NULL), 0);
	assert_int_equal(pack_visits, 4);
	/* A byte too many, a byte too few. */
	assert_int_equal(proto_pack_walk(raw, 16 + 4, 10, 4, pack_visit, NULL), -PC_E_PROTO);
	assert_int_equal(proto_pack_walk(raw, 16 + 2, 10, 4, pack_visit, NULL), -PC_E_PROTO);
	/* Shorter than its statuses; no id; too many ids. */
	assert_int_equal(proto_pack_walk(raw, 15, 10, 4, pack_visit, NULL), -PC_E_PROTO);
	assert_int_equal(proto_pack_walk(raw, 16, 10, 0, pack_visit, NULL), -PC_E_PROTO);
	assert_int_equal(proto_pack_walk(raw, sizeof(raw), 10, PROTO_MAX_PACK + 1, pack_visit,
					 NULL), -PC_E_PROTO);
	/* A status above 1. */
	put_status(raw + 4, 2);
	assert_int_equal(proto_pack_walk(raw, 16 + 3, 10, 4, pack_visit, NULL), -PC_E_PROTO);
	/* The visitor's code stops the walk. */
	put_status(raw + 4, 0);
	pack_visits = 0;
	assert_int_equal(proto_pack_walk(raw, 16 + 4, 10, 4, pack_visit, &stop), -ENOSPC);
	assert_int_equal(pack_visits, 2);
}

/* What is wrong with a refused ENTRIES, for the message: the entry, its
 * path (control bytes quoted) and the rule. */
static void test_entries_explain(void **state)
{
	struct proto_msg out;
	char why[PROTO_MAX_MSG + 1];

	(void)state;
	entry_of(PROTO_ENT_FIFO, 7, &ent_in);
	strcpy(ent_in.path, "a/gg/b\x01");
	size_t plen = entries_encoded(&ent_in);
	memcpy(payload() + ENT_PATH_OFF + 2, "a/../b", 6);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	proto_entries_explain(payload(), plen, why, sizeof(why));
	assert_non_null(strstr(why, "entry 7 ('a/../b\\x01')"));
	assert_non_null(strstr(why, "unsafe path"));
	/* Cut short: the entry is named, with no path. */
	proto_entries_explain(payload(), plen - 3, why, sizeof(why));
	assert_non_null(strstr(why, "entry 7"));
	assert_non_null(strstr(why, "cut short"));
	/* A header that does not hold. */
	proto_entries_explain(payload(), 3, why, sizeof(why));
	assert_string_equal(why, "a malformed batch header");
	/* A tiny buffer is never overrun. */
	proto_entries_explain(payload(), plen, why, 5);
	assert_true(strlen(why) < 5);
}

static void test_entry_path_rules(void **state)
{
	static const char *const bad[] = { "/abc", "a//b", "abc/", "./ab", "../a", "a/./b",
					   "a/../b", "ab/..", "x/.", ".", ".." };
	struct proto_msg out;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t n = strlen(bad[i]), plen;

		entry_of(PROTO_ENT_FIFO, 7, &ent_in);
		strcpy(ent_in.path, bad[i]);
		proto_batch_init(&batch_in, 7);
		if (proto_batch_add(&batch_in, &ent_in) != -PC_E_PROTO)
			fail_msg("builder took '%s'", bad[i]);
		memset(ent_in.path, 'g', n);
		ent_in.path[n] = '\0';
		plen = entries_encoded(&ent_in);
		assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
		memcpy(payload() + ENT_PATH_OFF + 2, bad[i], n);
		if (decode(PROTO_ENTRIES, payload(), plen, &out) != -PC_E_PROTO)
			fail_msg("decoder took '%s'", bad[i]);
	}
	/* A NUL in the path, and an empty path. */
	entry_of(PROTO_ENT_FIFO, 7, &ent_in);
	strcpy(ent_in.path, "abc");
	size_t plen = entries_encoded(&ent_in);
	payload()[ENT_PATH_OFF + 3] = '\0';
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	ent_in.path[0] = '\0';
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	plen = entries_encoded(&(struct proto_entry){ .type = PROTO_ENT_FIFO, .path = "a" });
	/* The one-byte path "a" cut out: a length prefix of 0, the rest intact. */
	memmove(payload() + ENT_PATH_OFF + 2, payload() + ENT_PATH_OFF + 3, plen - ENT_PATH_OFF - 3);
	put_be(payload() + ENT_PATH_OFF, 0, 2);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen - 1, &out), -PC_E_PROTO);
}

/* The longest path (4096 bytes) passes; 4097 does not, either way. */
static void test_entry_path_length(void **state)
{
	struct proto_msg out;
	size_t plen, pos = 0;

	(void)state;
	entry_of(PROTO_ENT_DIR, 7, &ent_in);
	for (size_t i = 0; i < PROTO_MAX_PATH; i++)
		ent_in.path[i] = i % 200 == 199 ? '/' : 'p';
	ent_in.path[PROTO_MAX_PATH] = '\0';
	plen = entries_encoded(&ent_in);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	assert_int_equal(proto_entries_next(&out.u.entries, &pos, &ent_out), 1);
	assert_int_equal(strlen(ent_out.path), PROTO_MAX_PATH);
	/* One byte more: 4097 bytes claimed and present. */
	memmove(payload() + ENT_PATH_OFF + 3, payload() + ENT_PATH_OFF + 2, plen - ENT_PATH_OFF - 2);
	payload()[ENT_PATH_OFF + 2] = 'p';
	put_be(payload() + ENT_PATH_OFF, PROTO_MAX_PATH + 1, 2);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen + 1, &out), -PC_E_PROTO);
	/* The builder: an unterminated path array. */
	memset(ent_in.path, 'p', sizeof(ent_in.path));
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
}

/* Rules between fields, refused by the builder and by the decoder. */
static void test_entry_field_rules(void **state)
{
	struct proto_msg out;
	size_t plen, tgt;

	(void)state;
	/* A target on anything but a SYMLINK. */
	entry_of(PROTO_ENT_SYMLINK, 7, &ent_in);
	plen = entries_encoded(&ent_in);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	payload()[ENT_OFF] = PROTO_ENT_FIFO;
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	ent_in.type = PROTO_ENT_DIR;
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	/* A SYMLINK without one. */
	entry_of(PROTO_ENT_FIFO, 7, &ent_in);
	plen = entries_encoded(&ent_in);
	payload()[ENT_OFF] = PROTO_ENT_SYMLINK;
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	ent_in.type = PROTO_ENT_SYMLINK;
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	/* The longest target passes. */
	memset(ent_in.target, 't', PROTO_MAX_PATH);
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
	/* A NUL inside a target. */
	entry_of(PROTO_ENT_SYMLINK, 7, &ent_in);
	plen = entries_encoded(&ent_in);
	tgt = ENT_PATH_OFF + 2 + strlen(ent_in.path) + 2;
	payload()[tgt + 3] = '\0';
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);

	/* A size on anything but a REG; flags on anything but a REG. */
	for (uint8_t t = PROTO_ENT_DIR; t < PROTO_ENT_TYPE_MAX; t++) {
		entry_of(t, 7, &ent_in);
		ent_in.size = 1;
		proto_batch_init(&batch_in, 7);
		assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
		entry_of(t, 7, &ent_in);
		plen = entries_encoded(&ent_in);
		put_be(payload() + ENT_OFF + 38, 1, 8);
		assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
		put_be(payload() + ENT_OFF + 38, 0, 8);
		payload()[ENT_OFF + 1] = PROTO_ENT_LINKED;
		assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
		/* INCOMPLETE (version 13) on a DIR_END only. */
		payload()[ENT_OFF + 1] = PROTO_ENT_INCOMPLETE;
		assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out),
				 t == PROTO_ENT_DIR_END ? 0 : -PC_E_PROTO);
		if (t == PROTO_ENT_DIR_END) {
			size_t pos = 0;
			struct proto_entry got;
			assert_int_equal(proto_entries_next(&out.u.entries, &pos, &got), 1);
			assert_int_equal(got.flags, PROTO_ENT_INCOMPLETE);
			ent_in.flags = PROTO_ENT_INCOMPLETE;
			proto_batch_init(&batch_in, 7);
			assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
			ent_in.flags = PROTO_ENT_INCOMPLETE | PROTO_ENT_LINKED;
			proto_batch_init(&batch_in, 7);
			assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
		}
	}
	/* Nor on a REG. */
	entry_of(PROTO_ENT_REG, 7, &ent_in);
	plen = entries_encoded(&ent_in);
	payload()[ENT_OFF + 1] = PROTO_ENT_INCOMPLETE;
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	/* rdev only on CHR and BLK. */
	entry_of(PROTO_ENT_FIFO, 7, &ent_in);
	ent_in.rdev = 5;
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);

	/* link_id: below the entry's own id, and only on a HARDLINK. */
	entry_of(PROTO_ENT_HARDLINK, 7, &ent_in);
	plen = entries_encoded(&ent_in); /* link_id 6 */
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	put_be(payload() + ENT_OFF + 54, 7, 4); /* itself */
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	put_be(payload() + ENT_OFF + 54, 8, 4); /* a later one */
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);
	put_be(payload() + ENT_OFF + 54, 0, 4);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	ent_in.link_id = 7;
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	ent_in.link_id = 0;
	proto_batch_init(&batch_in, 0); /* id 0: no earlier entry to name */
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);

	/* mode and nanoseconds. */
	entry_of(PROTO_ENT_DIR, 7, &ent_in);
	ent_in.mode = 010000;
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	entry_of(PROTO_ENT_DIR, 7, &ent_in);
	ent_in.mtime_ns = 1000000000;
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
	entry_of(PROTO_ENT_DIR, 7, &ent_in);
	ent_in.atime_ns = 1000000000;
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);

	/* user and group: 255 bytes, not 256. */
	entry_of(PROTO_ENT_SOCK, 7, &ent_in);
	memset(ent_in.user, 'u', PROTO_MAX_NAME);
	memset(ent_in.group, 'g', PROTO_MAX_NAME);
	plen = entries_encoded(&ent_in);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	payload()[plen] = 'g';
	put_be(payload() + plen - PROTO_MAX_NAME - 2, PROTO_MAX_NAME + 1, 2);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen + 1, &out), -PC_E_PROTO);
	ent_in.group[PROTO_MAX_NAME] = 'g'; /* unterminated */
	proto_batch_init(&batch_in, 7);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO);
}

/* count: 1..PROTO_MAX_BATCH; ids must not pass UINT32_MAX; the body ends
 * exactly after the last entry. */
static void test_entries_batch_rules(void **state)
{
	struct proto_msg m, out;
	size_t plen, one;

	(void)state;
	entry_of(PROTO_ENT_FIFO, 0, &ent_in);
	proto_batch_init(&batch_in, UINT32_MAX - 1);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0); /* id UINT32_MAX */
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -PC_E_PROTO); /* no id left */
	assert_int_equal(batch_in.count, 2);
	proto_batch_msg(&batch_in, &m);
	plen = encode_ok(&m);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	put_be(payload(), UINT32_MAX, 4); /* the second id would wrap to 0 */
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), -PC_E_PROTO);

	/* count 0 with no body, count 4097 with 4097 entries' worth of count. */
	put_be(payload(), 0, 4);
	put_be(payload() + 4, 0, 2);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), 6, &out), -PC_E_PROTO);
	proto_batch_init(&batch_in, 0);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
	one = batch_in.len;
	put_be(payload() + 4, PROTO_MAX_BATCH + 1, 2);
	for (size_t i = 0; 6 + (i + 1) * one <= PROTO_MAX_PAYLOAD; i++)
		memcpy(payload() + 6 + i * one, batch_in.body, one);
	size_t fit = (PROTO_MAX_PAYLOAD - 6) / one;
	assert_int_equal(decode(PROTO_ENTRIES, payload(), 6 + fit * one, &out), -PC_E_PROTO);
	put_be(payload() + 4, fit, 2); /* the same bytes with the right count: fine */
	assert_int_equal(decode(PROTO_ENTRIES, payload(), 6 + fit * one, &out), 0);
	assert_int_equal(out.u.entries.count, fit);
	put_be(payload() + 4, fit - 1, 2); /* one entry left over */
	assert_int_equal(decode(PROTO_ENTRIES, payload(), 6 + fit * one, &out), -PC_E_PROTO);
	assert_true(fit < PROTO_MAX_BATCH); /* bytes, not the count, bound a real batch */
}

/* A full batch says -ENOSPC and is left as it was; the largest entries
 * still fit a payload one by one. */
static void test_batch_full(void **state)
{
	struct proto_msg m, out;
	size_t len, plen, pos = 0;
	unsigned n = 0;
	int ret;

	(void)state;
	entry_of(PROTO_ENT_SYMLINK, 0, &ent_in);
	for (size_t i = 0; i < PROTO_MAX_PATH; i++)
		ent_in.path[i] = i % 100 == 99 ? '/' : 'p';
	memset(ent_in.target, 't', PROTO_MAX_PATH);
	memset(ent_in.user, 'u', PROTO_MAX_NAME);
	memset(ent_in.group, 'g', PROTO_MAX_NAME);
	proto_batch_init(&batch_in, 0);
	while ((ret = proto_batch_add(&batch_in, &ent_in)) == 0)
		n++;
	assert_int_equal(ret, -ENOSPC);
	assert_int_equal(batch_in.count, n);
	len = batch_in.len;
	assert_int_equal(len, n * (ENT_FIXED + 4 * 2 + 2 * PROTO_MAX_PATH + 2 * PROTO_MAX_NAME));
	assert_true(6 + len + len / n > PROTO_MAX_PAYLOAD);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), -ENOSPC);
	assert_int_equal(batch_in.len, len);
	proto_batch_msg(&batch_in, &m);
	plen = encode_ok(&m);
	assert_true(plen <= PROTO_MAX_PAYLOAD);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	while ((ret = proto_entries_next(&out.u.entries, &pos, &ent_out)) == 1)
		assert_string_equal(ent_out.target, ent_in.target);
	assert_int_equal(ret, 0);
	/* The message stays small whatever it carries. */
	assert_true(sizeof(struct proto_msg) < 2048);
}

/* proto_entries_next on a batch nobody checked. */
static void test_entries_next_unchecked(void **state)
{
	struct proto_entries es = { 0 };
	size_t pos = 0;

	(void)state;
	assert_int_equal(proto_entries_next(&es, &pos, &ent_out), -PC_E_PROTO); /* count 0 */
	entry_of(PROTO_ENT_FIFO, 0, &ent_in);
	proto_batch_init(&batch_in, 3);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
	es = (struct proto_entries){ 3, 1, batch_in.body, batch_in.len + 1, false }; /* a byte
										 too many */
	assert_int_equal(proto_entries_next(&es, &pos, &ent_out), 1);
	assert_int_equal(ent_out.id, 3);
	assert_int_equal(proto_entries_next(&es, &pos, &ent_out), -PC_E_PROTO);
	es.body_len = batch_in.len - 1; /* a byte short */
	pos = 0;
	assert_int_equal(proto_entries_next(&es, &pos, &ent_out), -PC_E_PROTO);
	es.body_len = batch_in.len;
	pos = (size_t)5 << 16; /* a cursor past the count */
	assert_int_equal(proto_entries_next(&es, &pos, &ent_out), -PC_E_PROTO);
}

/* proto_entries.checked: set by the decoder, which checked every entry,
 * so that proto_entries_next does not check them twice; any other batch is
 * checked by proto_entries_next, and the encoder checks every batch. */
static void test_entries_checked(void **state)
{
	struct proto_msg m, out;
	size_t pos = 0, plen;

	(void)state;
	entry_of(PROTO_ENT_REG, 0, &ent_in);
	snprintf(ent_in.path, sizeof(ent_in.path), "dir/abc");
	proto_batch_init(&batch_in, 0);
	assert_int_equal(proto_batch_add(&batch_in, &ent_in), 0);
	proto_batch_msg(&batch_in, &m);
	assert_false(m.u.entries.checked);
	plen = encode_ok(&m);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), plen, &out), 0);
	assert_true(out.u.entries.checked);
	assert_int_equal(proto_entries_next(&out.u.entries, &pos, &ent_out), 1);
	assert_string_equal(ent_out.path, "dir/abc");

	/* The same bytes with "dir/abc" made "dir/../": unchecked, refused by
	 * both; a decode of them fails. */
	uint8_t *at = memmem(batch_in.body, batch_in.len, "dir/abc", 7);
	assert_non_null(at);
	memcpy(at, "dir/../", 7);
	memset(&m, 0, sizeof(m));
	m.type = PROTO_ENTRIES;
	m.u.entries = (struct proto_entries){ 0, 1, batch_in.body, batch_in.len, false };
	pos = 0;
	assert_int_equal(proto_entries_next(&m.u.entries, &pos, &ent_out), -PC_E_PROTO);
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	m.u.entries.checked = true; /* a lie: the encoder checks anyway */
	assert_int_equal(proto_encode(&m, frame, sizeof(frame)), -PC_E_PROTO);
	put_be(payload(), 0, 4);     /* first_id */
	put_be(payload() + 4, 1, 2); /* count */
	memcpy(payload() + ENT_OFF, batch_in.body, batch_in.len);
	assert_int_equal(decode(PROTO_ENTRIES, payload(), ENT_OFF + batch_in.len, &out),
			 -PC_E_PROTO);
}

/* REQUEST goes through the caller's storage both ways. */
static void test_request_pointer(void **state)
{
	struct proto_msg m, out;
	size_t plen;

	(void)state;
	sample(PROTO_REQUEST, &m);
	plen = encode_ok(&m);
	memset(&out, 0, sizeof(out)); /* u.request NULL: nowhere to put it */
	assert_int_equal(proto_decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	memset(&req_out, 0xa5, sizeof(req_out));
	out.u.request = &req_out;
	assert_int_equal(proto_decode(PROTO_REQUEST, payload(), plen, &out), 0);
	assert_ptr_equal(out.u.request, &req_out);
	assert_memory_equal(&req_in, &req_out, sizeof(req_in)); /* all of it rewritten */
	assert_int_equal(req_out.flags, PROTO_REQ_ORDERED | PROTO_REQ_HARDLINKS | SAMPLE_SSH);
	/* The flags are a u16 right after the role. */
	assert_memory_equal(payload(), "\x02\x42\x09", 3);
}

/* ---- Data channels ----------------------------------------------------- */

static const struct proto_block sample_block = {
	PROTO_BLK_DATA, PROTO_CODEC_NONE, 0, 0x01020304, 0x1122334455667788ull,
	1u << 20, 1u << 20, 0x8877665544332211ull, 0xcafebabedeadbeefull
};

static void test_block_roundtrip(void **state)
{
	static const uint8_t want[PROTO_BLOCK_HDR_LEN] = {
		1, 0, 0, 0, 0x01, 0x02, 0x03, 0x04,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
		0x00, 0x10, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		0xca, 0xfe, 0xba, 0xbe, 0xde, 0xad, 0xbe, 0xef,
	};
	uint8_t buf[PROTO_BLOCK_HDR_LEN];
	struct proto_block b;

	(void)state;
	proto_block_encode(&sample_block, buf);
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(proto_block_decode(buf, 1u << 20, &b), 0);
	assert_memory_equal(&b, &sample_block, sizeof(b));

	struct proto_block hole = sample_block;
	hole.flags = PROTO_BLK_HOLE;
	hole.enc_len = 0;
	proto_block_encode(&hole, buf);
	assert_int_equal(proto_block_decode(buf, 1u << 20, &b), 0);
	assert_memory_equal(&b, &hole, sizeof(b));

	struct proto_block end;
	memset(&end, 0, sizeof(end));
	end.type = PROTO_BLK_END;
	proto_block_encode(&end, buf);
	assert_int_equal(proto_block_decode(buf, PROTO_MIN_BLOCK, &b), 0);
	assert_memory_equal(&b, &end, sizeof(b));
}

/* Decodes b after encoding it, against max_block 1 MiB. */
static int block_check(const struct proto_block *b)
{
	uint8_t buf[PROTO_BLOCK_HDR_LEN];
	struct proto_block out;

	proto_block_encode(b, buf);
	return proto_block_decode(buf, 1u << 20, &out);
}

static void test_block_validation(void **state)
{
	struct proto_block b;

	(void)state;
	b = sample_block; b.type = 0;                 assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.type = 5;                 assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.flags = 0x2;              assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.flags = 0x8000;           assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.codec = 1;                assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.codec = PROTO_CODEC_ZLIB; b.enc_len = b.raw_len - 1;
	assert_int_equal(block_check(&b), 0);
	b = sample_block; b.codec = PROTO_CODEC_BZ2; b.enc_len = 1;
	assert_int_equal(block_check(&b), 0);
	b = sample_block; b.codec = PROTO_CODEC_LZ4; b.enc_len = 0;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.codec = PROTO_CODEC_MAX; b.enc_len = 1;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.codec = PROTO_CODEC_LZ4; b.flags = PROTO_BLK_HOLE; b.enc_len = 0;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.raw_len = b.enc_len = (1u << 20) + 1;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.enc_len = (1u << 20) + 1; assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.enc_len = 100;            assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = sample_block; b.raw_len = b.enc_len = 1;  assert_int_equal(block_check(&b), 0);
	b = sample_block; b.flags = PROTO_BLK_HOLE;   assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.enc_len = 0;                                assert_int_equal(block_check(&b), 0);
	b.raw_len = (1u << 20) + 1;                   assert_int_equal(block_check(&b), -PC_E_PROTO);

	/* SAME (version 10): a place and a checksum, no payload, no codec, no
	 * flag, 1..max_block bytes. */
	b = sample_block; b.type = PROTO_BLK_SAME; b.enc_len = 0;
	assert_int_equal(block_check(&b), 0);
	b.raw_len = 1u << 20;                         assert_int_equal(block_check(&b), 0);
	b.raw_len = (1u << 20) + 1;                   assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.raw_len = 0;                                assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.raw_len = 100; b.enc_len = 100;             assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.enc_len = 0; b.flags = PROTO_BLK_HOLE;      assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.flags = 0; b.codec = PROTO_CODEC_LZ4;       assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.codec = PROTO_CODEC_NONE; b.offset = UINT64_MAX - 100;
	assert_int_equal(block_check(&b), 0);
	b.offset++;                                   assert_int_equal(block_check(&b), -PC_E_PROTO);

	/* offset + raw_len must not overflow. */
	b = sample_block;
	b.offset = UINT64_MAX - b.raw_len;
	assert_int_equal(block_check(&b), 0);
	b.offset++;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.offset = UINT64_MAX;
	assert_int_equal(block_check(&b), -PC_E_PROTO);

	/* An END block carries nothing else. */
	struct proto_block end;
	memset(&end, 0, sizeof(end));
	end.type = PROTO_BLK_END;
	b = end; b.codec = 1;          assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.flags = 1;          assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.file_id = 1;        assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.offset = 1;         assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.raw_len = 1;        assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.enc_len = 1;        assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.seq = 1;            assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = end; b.checksum = 1;       assert_int_equal(block_check(&b), -PC_E_PROTO);
}

/* PACK: n = offset ids from file_id, raw_len >= 4n, flags 0. */
static void test_block_pack(void **state)
{
	struct proto_block b, base = { PROTO_BLK_PACK, PROTO_CODEC_NONE, 0, 10, 3, 100, 100, 5, 9 };
	uint8_t buf[PROTO_BLOCK_HDR_LEN];
	struct proto_block out;

	(void)state;
	proto_block_encode(&base, buf);
	assert_int_equal(buf[0], 3);
	assert_int_equal(proto_block_decode(buf, 1u << 20, &out), 0);
	assert_memory_equal(&out, &base, sizeof(out));
	b = base; b.offset = 0;                   assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.offset = 1; b.raw_len = b.enc_len = 4;
	assert_int_equal(block_check(&b), 0);     /* one id, its status only */
	b.raw_len = b.enc_len = 3;                assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.raw_len = b.enc_len = 11;     assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.raw_len = b.enc_len = 12;     assert_int_equal(block_check(&b), 0);
	b = base; b.offset = PROTO_MAX_PACK; b.raw_len = b.enc_len = 4 * PROTO_MAX_PACK;
	assert_int_equal(block_check(&b), 0);
	b.offset = PROTO_MAX_PACK + 1;            assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.raw_len = b.enc_len = 4 * (PROTO_MAX_PACK + 1); /* room for every status */
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.offset = PROTO_MAX_PACK;                assert_int_equal(block_check(&b), 0);
	b.offset = 1ull << 62;                    assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.offset = UINT64_MAX;                    assert_int_equal(block_check(&b), -PC_E_PROTO);
	/* file_id + n must not overflow u32. */
	b = base; b.file_id = UINT32_MAX - 3;     assert_int_equal(block_check(&b), 0);
	b.file_id = UINT32_MAX - 2;               assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.file_id = UINT32_MAX;                   assert_int_equal(block_check(&b), -PC_E_PROTO);
	/* No flags (no HOLE), a known codec, DATA's encoding rules. */
	b = base; b.flags = PROTO_BLK_HOLE;       assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.enc_len = 0;                            assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.flags = 0x100;                assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.codec = PROTO_CODEC_LZ4; b.enc_len = 99;
	assert_int_equal(block_check(&b), 0);
	b.enc_len = 100;                          assert_int_equal(block_check(&b), -PC_E_PROTO);
	b.enc_len = 0;                            assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.codec = PROTO_CODEC_MAX; b.enc_len = 1;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.enc_len = 99;                 assert_int_equal(block_check(&b), -PC_E_PROTO);
	b = base; b.raw_len = b.enc_len = (1u << 20) + 1;
	assert_int_equal(block_check(&b), -PC_E_PROTO);
}

static void test_block_max_block(void **state)
{
	uint8_t buf[PROTO_BLOCK_HDR_LEN];
	struct proto_block b = sample_block, out;

	(void)state;
	b.raw_len = b.enc_len = PROTO_MAX_BLOCK;
	proto_block_encode(&b, buf);
	assert_int_equal(proto_block_decode(buf, PROTO_MAX_BLOCK, &out), 0);
	assert_int_equal(proto_block_decode(buf, PROTO_MAX_BLOCK - 1, &out), -PC_E_PROTO);
	assert_int_equal(proto_block_decode(buf, PROTO_MIN_BLOCK, &out), -PC_E_PROTO);
}

static void test_dhello(void **state)
{
	struct proto_dhello h = { PROTO_DATA_MAGIC, 0xabcd, 63, { 0 } }, out;
	uint8_t buf[PROTO_DHELLO_LEN];

	(void)state;
	fill_pattern(h.nonce, PROTO_NONCE_LEN, 9);
	proto_dhello_encode(&h, buf);
	assert_memory_equal(buf, "PCDT\xab\xcd\x00\x3f", 8);
	assert_memory_equal(buf + 8, h.nonce, PROTO_NONCE_LEN);
	memset(&out, 0, sizeof(out));
	assert_int_equal(proto_dhello_decode(buf, &out), 0);
	assert_memory_equal(&out, &h, sizeof(h));

	h.magic = PROTO_MAGIC;
	proto_dhello_encode(&h, buf);
	assert_int_equal(proto_dhello_decode(buf, &out), -PC_E_PROTO);
	buf[0] = 0;
	assert_int_equal(proto_dhello_decode(buf, &out), -PC_E_PROTO);
}

/* The route preamble: exactly PROTO_ROUTE_LEN bytes, magic, our version,
 * a zero field; the first byte unlike a frame and a TLS record. */
static void test_route(void **state)
{
	uint8_t token[PROTO_ROUTE_TOKEN_LEN], out[PROTO_ROUTE_TOKEN_LEN];
	uint8_t buf[PROTO_ROUTE_LEN + 1];

	(void)state;
	for (unsigned i = 0; i < sizeof(token); i++)
		token[i] = (uint8_t)(0xa0 + i);
	proto_route_encode(token, buf);
	assert_memory_equal(buf, "PCRT\x00\x0e\x00\x00", 8);
	assert_memory_equal(buf + 8, token, sizeof(token));
	assert_true(proto_starts_route(buf[0]));
	assert_false(proto_starts_tls(buf[0]));
	assert_true(buf[0] >= PROTO_TYPE_MAX);
	memset(out, 0, sizeof(out));
	assert_int_equal(proto_route_decode(buf, PROTO_ROUTE_LEN, out), 0);
	assert_memory_equal(out, token, sizeof(token));
	/* Exactly 24 bytes, and not NULL. */
	assert_int_equal(proto_route_decode(buf, PROTO_ROUTE_LEN + 1, out), -PC_E_PROTO);
	assert_int_equal(proto_route_decode(buf, PROTO_ROUTE_LEN - 1, out), -PC_E_PROTO);
	assert_int_equal(proto_route_decode(NULL, PROTO_ROUTE_LEN, out), -PC_E_PROTO);
	/* Magic, version, zero field: each checked. */
	for (unsigned at = 0; at < 8; at++) {
		uint8_t bad[PROTO_ROUTE_LEN];
		memcpy(bad, buf, sizeof(bad));
		bad[at] ^= 0x01;
		assert_int_equal(proto_route_decode(bad, sizeof(bad), out), -PC_E_PROTO);
	}
}

/* Encodes sample(PROTO_REQUEST) with its ssh destination replaced (NULL:
 * kept) and flags changed; returns proto_encode's result, and on success
 * checks that the frame decodes back. */
static int request_with_ssh(const char *dest, uint16_t clear, uint16_t set, bool zero_id)
{
	struct proto_msg m, out;
	int n;

	sample(PROTO_REQUEST, &m);
	if (dest != NULL)
		snprintf(m.u.request->connect_ssh, sizeof(m.u.request->connect_ssh), "%s", dest);
	m.u.request->flags = (uint16_t)((m.u.request->flags & ~clear) | set);
	if (zero_id)
		memset(m.u.request->attach_id, 0, PROTO_ATTACH_ID_LEN);
	if (!(m.u.request->flags & PROTO_REQ_CONNECT_SSH)) {
		m.u.request->connect_ssh[0] = '\0';
		m.u.request->connect_pcopy[0] = '\0';
	}
	n = proto_encode(&m, frame, sizeof(frame));
	if (n > 0)
		assert_int_equal(decode(PROTO_REQUEST, payload(), (size_t)n - PROTO_FRAME_HDR_LEN,
					&out), 0);
	return n;
}

/* Version 6's ssh fields (docs/PROTOCOL.md 4.4): an attach id exactly
 * with SSH_DATA or CONNECT_SSH, a destination that ssh cannot take for an
 * option nor split; refused both ways. */
static void test_request_connect_ssh(void **state)
{
	struct proto_msg out;
	size_t plen, at;

	(void)state;
	assert_true(request_with_ssh("h2", 0, 0, false) > 0);
	assert_true(request_with_ssh("bob@[::1]", 0, 0, false) > 0);
	assert_int_equal(request_with_ssh("", 0, 0, false), -PC_E_PROTO);
	assert_int_equal(request_with_ssh("-oProxyCommand=x", 0, 0, false), -PC_E_PROTO);
	assert_int_equal(request_with_ssh("h2 -v", 0, 0, false), -PC_E_PROTO);
	assert_int_equal(request_with_ssh("h2\t", 0, 0, false), -PC_E_PROTO);
	assert_int_equal(request_with_ssh("h\x1b[2J", 0, 0, false), -PC_E_PROTO);
	assert_int_equal(request_with_ssh("h\x7f", 0, 0, false), -PC_E_PROTO);
	/* The id: with either flag, never without one. */
	assert_int_equal(request_with_ssh(NULL, 0, 0, true), -PC_E_PROTO);
	assert_true(request_with_ssh(NULL, PROTO_REQ_CONNECT | PROTO_REQ_CONNECT_SSH,
				     PROTO_REQ_SSH_DATA, false) > 0);
	assert_int_equal(request_with_ssh(NULL, PROTO_REQ_CONNECT | PROTO_REQ_CONNECT_SSH,
					  PROTO_REQ_SSH_DATA, true), -PC_E_PROTO);
	assert_int_equal(request_with_ssh(NULL, PROTO_REQ_CONNECT | PROTO_REQ_CONNECT_SSH, 0,
					  false), -PC_E_PROTO);
	assert_true(request_with_ssh(NULL, PROTO_REQ_CONNECT | PROTO_REQ_CONNECT_SSH, 0, true) > 0);
	/* A destination patched into an option on the wire is refused too. */
	sample(PROTO_REQUEST, &out);
	plen = encode_ok(&out);
	at = REQ_FIXED + 2 + strlen("h1.example");
	assert_int_equal(payload()[at + 2], 'a');
	payload()[at + 2] = '-';
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
	/* And so is an id zeroed on the wire under CONNECT_SSH. */
	sample(PROTO_REQUEST, &out);
	plen = encode_ok(&out);
	memset(payload() + 60, 0, PROTO_ATTACH_ID_LEN);
	assert_int_equal(decode(PROTO_REQUEST, payload(), plen, &out), -PC_E_PROTO);
}

static void test_psk_id(void **state)
{
	struct proto_psk_id id = { PROTO_DATA_MAGIC, PROTO_VERSION, 63 }, out;
	uint8_t buf[PROTO_PSK_ID_LEN + 1];

	(void)state;
	proto_psk_id_encode(&id, buf);
	assert_memory_equal(buf, "PCDT\x00\x0e\x00\x3f", PROTO_PSK_ID_LEN);
	memset(&out, 0, sizeof(out));
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), 0);
	assert_memory_equal(&out, &id, sizeof(id));
	/* Exactly 8 bytes: no more, no fewer, and not NULL. */
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN + 1, &out), -PC_E_PROTO);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN - 1, &out), -PC_E_PROTO);
	assert_int_equal(proto_psk_id_decode(buf, 0, &out), -PC_E_PROTO);
	assert_int_equal(proto_psk_id_decode(NULL, PROTO_PSK_ID_LEN, &out), -PC_E_PROTO);
	/* Every stream index decodes; the caller checks it against its count. */
	id.stream = 0xffff;
	proto_psk_id_encode(&id, buf);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), 0);
	assert_int_equal(out.stream, 0xffff);
	/* Another version, before or after ours. */
	id.version = PROTO_VERSION - 1;
	proto_psk_id_encode(&id, buf);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), -PC_E_PROTO);
	id.version = PROTO_VERSION + 1;
	proto_psk_id_encode(&id, buf);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), -PC_E_PROTO);
	/* The control channel's identity has stream 0 and nothing else. */
	id = (struct proto_psk_id){ PROTO_MAGIC, PROTO_VERSION, 0 };
	proto_psk_id_encode(&id, buf);
	assert_memory_equal(buf, "PCPY\x00\x0e\x00\x00", PROTO_PSK_ID_LEN);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), 0);
	id.stream = 1;
	proto_psk_id_encode(&id, buf);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), -PC_E_PROTO);
	/* Any other magic. */
	id = (struct proto_psk_id){ PROTO_DATA_MAGIC + 1, PROTO_VERSION, 0 };
	proto_psk_id_encode(&id, buf);
	assert_int_equal(proto_psk_id_decode(buf, PROTO_PSK_ID_LEN, &out), -PC_E_PROTO);
	/* A daemon tells TLS from a control frame by the first byte. */
	assert_true(proto_starts_tls(0x16));
	for (unsigned t = 0; t < PROTO_TYPE_MAX; t++)
		assert_false(proto_starts_tls((uint8_t)t));
}

static void test_checksum(void **state)
{
	static const char text[] = "pcopy block checksum";
	uint8_t big[3 * 4096 + 17];

	(void)state;
	fill_pattern(big, sizeof(big), 5);
	assert_int_equal(proto_checksum(text, sizeof(text) - 1), XXH3_64bits(text, sizeof(text) - 1));
	assert_int_equal(proto_checksum(big, sizeof(big)), XXH3_64bits(big, sizeof(big)));
	/* XXH3-64 with seed 0 is a fixed function: pin one value. */
	assert_int_equal(proto_checksum("", 0), 0x2d06800538d394c2ull);
	assert_int_not_equal(proto_checksum(big, sizeof(big)), proto_checksum(big, sizeof(big) - 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_all),
		cmocka_unit_test(test_layout_ready),
		cmocka_unit_test(test_layout_error),
		cmocka_unit_test(test_layout_skip),
		cmocka_unit_test(test_skip_in_order),
		cmocka_unit_test(test_layout_entries),
		cmocka_unit_test(test_layout_stats),
		cmocka_unit_test(test_truncation_rejected),
		cmocka_unit_test(test_trailing_byte_rejected),
		cmocka_unit_test(test_decode_unknown_type),
		cmocka_unit_test(test_string_limits),
		cmocka_unit_test(test_string_empty),
		cmocka_unit_test(test_request_paths),
		cmocka_unit_test(test_request_too_many_paths),
		cmocka_unit_test(test_request_paths_decode_bounds),
		cmocka_unit_test(test_request_filters),
		cmocka_unit_test(test_request_delete),
		cmocka_unit_test(test_request_checksum),
		cmocka_unit_test(test_sums_bound),
		cmocka_unit_test(test_string_nul_rejected),
		cmocka_unit_test(test_range_checks),
		cmocka_unit_test(test_file_size_unknown),
		cmocka_unit_test(test_encode_rejects_invalid),
		cmocka_unit_test(test_encode_small_buffer),
		cmocka_unit_test(test_frame_header),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_entries_roundtrip),
		cmocka_unit_test(test_relpath),
		cmocka_unit_test(test_entry_path_rules),
		cmocka_unit_test(test_entry_path_length),
		cmocka_unit_test(test_entry_field_rules),
		cmocka_unit_test(test_entries_batch_rules),
		cmocka_unit_test(test_batch_full),
		cmocka_unit_test(test_entries_next_unchecked),
		cmocka_unit_test(test_entries_checked),
		cmocka_unit_test(test_request_pointer),
		cmocka_unit_test(test_block_roundtrip),
		cmocka_unit_test(test_block_validation),
		cmocka_unit_test(test_block_pack),
		cmocka_unit_test(test_block_max_block),
		cmocka_unit_test(test_dhello),
		cmocka_unit_test(test_request_connect_ssh),
		cmocka_unit_test(test_psk_id),
		cmocka_unit_test(test_route),
		cmocka_unit_test(test_checksum),
		cmocka_unit_test(test_entries_explain),
		cmocka_unit_test(test_pack_walk),
		cmocka_unit_test(test_probe_fig_bounds),
		cmocka_unit_test(test_layout_probe),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
