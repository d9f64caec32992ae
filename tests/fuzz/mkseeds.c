// SPDX-License-Identifier: Apache-2.0
/* mkseeds: writes the seeds of fuzz_ctl and fuzz_data, those of
 * fuzz_proto that hold control frames, and those of fuzz_tree (its format:
 * fuzz_tree.h), made with the library's own encoders so that they are real
 * encodings.
 *
 * Usage: fuzz_mkseeds DIR. Writes DIR/fuzz_ctl/NAME, DIR/fuzz_data/NAME,
 * DIR/fuzz_tree/NAME and DIR/fuzz_proto/NAME for NAME 0*-, 1*-, 2*- and 5*-
 * (the directories must exist), overwriting; fuzz_proto's block, data hello
 * and proof seeds (3*-, 4*-) and those of fuzz_codec are hand-made. The
 * output is the same on every run. tools/fuzz seeds runs it into
 * tests/fuzz/seeds/. It also writes DIR/fuzz_tls/6*-: ClientHellos that
 * tls_connect sends, which differ on every run (their random and key
 * share), as TLS requires. Exit status 0, or 1 with a message naming the
 * file that could not be written. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "fuzz_tree.h"
#include "sys/err.h"
#include "sys/platform.h"
#include "transport/tls.h"
#include "wire/auth.h"
#include "wire/proto.h"
#include <sys/socket.h>
#include <unistd.h>

#define SEED_CAP (1u << 20)

/* A seed under construction. */
struct seed {
	uint8_t buf[SEED_CAP];
	size_t len;
};

static const char *out_dir;
static int failed;

static void seed_put(struct seed *s, const void *p, size_t n)
{
	if (n > SEED_CAP - s->len) {
		fprintf(stderr, "fuzz_mkseeds: a seed outgrew %u bytes\n", SEED_CAP);
		exit(1);
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
}

static void seed_write(const struct seed *s, const char *target, const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(s->buf, 1, s->len, f) != s->len || fclose(f) != 0) {
		perror(path);
		failed = 1;
	}
}

/* ---- fuzz_ctl: a mode byte, then frames ------------------------------- */

static void frame(struct seed *s, const struct proto_msg *m)
{
	uint8_t f[PROTO_FRAME_HDR_LEN + PROTO_MAX_PAYLOAD];
	int n = proto_encode(m, f, sizeof(f));

	if (n < 0) {
		fprintf(stderr, "fuzz_mkseeds: cannot encode a %s\n", proto_type_name(m->type));
		exit(1);
	}
	seed_put(s, f, (size_t)n);
}

/* A batch with one entry of every type, under "top/" (a DIR, its
 * contents, its DIR_END), ids from 0: what a tree's walk sends. */
static void batch_every_type(struct proto_batch *b)
{
	static struct proto_entry e;
	static const char *const names[PROTO_ENT_TYPE_MAX] = {
		[PROTO_ENT_REG] = "top/data.bin", [PROTO_ENT_DIR] = "top",
		[PROTO_ENT_SYMLINK] = "top/link", [PROTO_ENT_HARDLINK] = "top/data2.bin",
		[PROTO_ENT_FIFO] = "top/fifo", [PROTO_ENT_CHR] = "top/null",
		[PROTO_ENT_BLK] = "top/sda", [PROTO_ENT_SOCK] = "top/sock",
		[PROTO_ENT_DIR_END] = "top",
	};
	static const uint8_t order[] = { PROTO_ENT_DIR, PROTO_ENT_REG, PROTO_ENT_HARDLINK,
					 PROTO_ENT_SYMLINK, PROTO_ENT_FIFO, PROTO_ENT_CHR,
					 PROTO_ENT_BLK, PROTO_ENT_SOCK, PROTO_ENT_DIR_END };

	proto_batch_init(b, 0);
	for (size_t i = 0; i < sizeof(order); i++) {
		memset(&e, 0, sizeof(e));
		e.type = order[i];
		e.mode = order[i] == PROTO_ENT_DIR || order[i] == PROTO_ENT_DIR_END ? 0755 : 0644;
		e.uid = 1000;
		e.gid = 1000;
		e.mtime_s = 1700000000;
		e.mtime_ns = 5;
		e.atime_s = 1700000001;
		e.atime_ns = 6;
		strcpy(e.path, names[order[i]]);
		strcpy(e.user, "alice");
		strcpy(e.group, "staff");
		if (order[i] == PROTO_ENT_REG) {
			e.flags = PROTO_ENT_LINKED;
			e.size = 123456;
		}
		if (order[i] == PROTO_ENT_HARDLINK)
			e.link_id = 1;
		if (order[i] == PROTO_ENT_DIR_END)
			e.flags = PROTO_ENT_INCOMPLETE; /* version 13 */
		if (order[i] == PROTO_ENT_SYMLINK)
			strcpy(e.target, "data.bin");
		if (order[i] == PROTO_ENT_CHR)
			e.rdev = 0x103;
		if (order[i] == PROTO_ENT_BLK)
			e.rdev = 0x800;
		if (proto_batch_add(b, &e) != 0) {
			fprintf(stderr, "fuzz_mkseeds: cannot add an entry of type %u\n", e.type);
			exit(1);
		}
	}
}

/* A stream's entry ("stdin", size unknown) as id `id`. */
static void batch_stream(struct proto_batch *b, uint32_t id)
{
	static struct proto_entry e;

	memset(&e, 0, sizeof(e));
	e.type = PROTO_ENT_REG;
	e.flags = PROTO_ENT_SIZE_UNKNOWN;
	e.mode = 0644;
	strcpy(e.path, "stdin");
	proto_batch_init(b, id);
	if (proto_batch_add(b, &e) != 0) {
		fprintf(stderr, "fuzz_mkseeds: cannot add a stream entry\n");
		exit(1);
	}
}

/* A SIDE answer with n codec records (n may pass the limit, for a seed
 * the decoder must refuse: then the frame is built by hand). */
static void probe_fig_of(struct proto_probe_fig *f, unsigned n)
{
	static const uint8_t ids[] = { PROTO_CODEC_LZ4, PROTO_CODEC_ZLIB, PROTO_CODEC_BZ2 };

	memset(f, 0, sizeof(*f));
	f->op = PROTO_PROBE_SIDE;
	f->ncodecs = (uint8_t)(n < PROTO_PROBE_MAX_CODECS ? n : PROTO_PROBE_MAX_CODECS);
	f->cpus = 8;
	f->disk_bytes = 200u << 20;
	f->disk_us = 1000000;
	f->rmem_max = f->wmem_max = 212992;
	f->tcp_rmem_max = 6u << 20;
	f->tcp_wmem_max = 4u << 20;
	for (unsigned i = 0; i < f->ncodecs; i++)
		f->codec[i] = (struct proto_probe_codec){ ids[i % 3], (uint8_t)(1 + i % 12),
							  2u << 20, 1u << 20, 3000000, 900000 };
}

/* A valid message of type. A REQUEST points at storage of this function's
 * own, an ENTRIES borrows a batch of it: both stay valid until the next
 * call. */
static void msg_of(uint8_t type, struct proto_msg *m)
{
	static struct proto_request req;
	static struct proto_batch batch;

	memset(m, 0, sizeof(*m));
	m->type = type;
	switch (type) {
	case PROTO_HELLO:
		m->u.hello.magic = PROTO_MAGIC;
		m->u.hello.version = PROTO_VERSION;
		m->u.hello.min_version = PROTO_MIN_VERSION;
		memset(m->u.hello.nonce, 0x5a, PROTO_NONCE_LEN);
		break;
	case PROTO_AUTH:
		memset(m->u.auth.mac, 0x3c, PROTO_MAC_LEN);
		break;
	case PROTO_KEY:
		memset(m->u.key.key, 0x22, PROTO_KEY_LEN);
		break;
	case PROTO_REQUEST:
		memset(&req, 0, sizeof(req));
		m->u.request = &req;
		m->u.request->role = PROTO_ROLE_SINK;
		m->u.request->flags = PROTO_REQ_CONNECT | PROTO_REQ_DATA_KEY | PROTO_REQ_RECURSIVE |
				     PROTO_REQ_PRESERVE | PROTO_REQ_HARDLINKS |
				     PROTO_REQ_CONNECT_SSH | PROTO_REQ_SSH_DATA;
		m->u.request->streams = 4;
		m->u.request->block_size = 1u << 20;
		m->u.request->nsources = 2;
		m->u.request->port_lo = 5000;
		m->u.request->port_hi = 5100;
		m->u.request->family = 4;
		m->u.request->connect_port = 6000;
		strcpy(m->u.request->connect_host, "192.0.2.7");
		memset(m->u.request->attach_id, 0x5a, PROTO_ATTACH_ID_LEN);
		m->u.request->bwlimit = 10u << 20; /* version 8: --bwlimit 10M */
		/* -u --delete -a (version 11) */
		m->u.request->sync = PROTO_SYNC_UPDATE | PROTO_SYNC_DELETE | PROTO_SYNC_RESUME;
		strcpy(m->u.request->connect_ssh, "bob@h2.example");
		strcpy(m->u.request->connect_pcopy, "/usr/bin/pcopy");
		strcpy(m->u.request->codec, "zlib:1,lz4");
		(void)proto_request_add_path(m->u.request, "backup/dir");
		(void)proto_request_add_path(m->u.request, "b");
		/* version 9: --exclude '*.o' --include 'keep/' */
		(void)proto_request_add_filter(m->u.request, "- *.o");
		(void)proto_request_add_filter(m->u.request, "+ keep/");
		break;
	case PROTO_READY:
		m->u.ready.data_port = 40000;
		strcpy(m->u.ready.host, "198.51.100.1");
		break;
	case PROTO_ENTRIES:
		batch_every_type(&batch);
		proto_batch_msg(&batch, m);
		break;
	case PROTO_FILE_END:
		m->u.file_end.id = 1;
		m->u.file_end.size = 77;
		break;
	case PROTO_FILE_FAIL:
		m->u.file_fail.id = 1;
		m->u.file_fail.status = -1003;
		strcpy(m->u.file_fail.msg, "'top/data.bin' shrank while it was being copied");
		break;
	case PROTO_ACK:
		m->u.ack.upto = 9;
		break;
	case PROTO_FILE_DONE:
		m->u.file_done.id = 1;
		m->u.file_done.status = -1003;
		m->u.file_done.bytes = 4096;
		strcpy(m->u.file_done.msg, "cannot write 'data.bin': No space left on device");
		break;
	case PROTO_SKIP:
		m->u.skip.index = 1;
		m->u.skip.status = -1003;
		strcpy(m->u.skip.msg, "cannot open 'b': No such file or directory");
		break;
	case PROTO_PROBE:
		m->u.probe.op = PROTO_PROBE_SIDE;
		m->u.probe.arg = PROTO_PROBE_MAX_WRITE_MIB;
		break;
	case PROTO_PROBE_FIG:
		probe_fig_of(&m->u.probe_fig, 3);
		break;
	case PROTO_HAVE:
		/* An answer for entries 0 to 3: the sink has entry 1. */
		m->u.have.first_id = 0;
		m->u.have.count = 4;
		m->u.have.bits[0] = 0x2;
		break;
	case PROTO_SUMS: { /* version 10: hashes of blocks 0 to 2 of entry 1 */
		static uint8_t hashes[3 * PROTO_SUM_LEN];
		for (unsigned i = 0; i < 3; i++)
			proto_block_sum("pcopy", 5 + i, hashes + i * PROTO_SUM_LEN);
		m->u.sums.id = 1;
		m->u.sums.first = 0;
		m->u.sums.count = 3;
		m->u.sums.hashes = hashes;
		break;
	}
	case PROTO_LIST: /* version 9: --delete removed a file */
		m->u.list.what = PROTO_LIST_GONE;
		strcpy(m->u.list.path, "backup/dir/old.txt");
		break;
	case PROTO_END:
	case PROTO_DONE:
		m->u.stats.bytes = 123456;
		m->u.stats.files = 1;
		m->u.stats.wall_us = 1000;
		m->u.stats.dirs = 1;
		m->u.stats.links = 2;
		m->u.stats.unchanged = 3; /* version 8 */
		m->u.stats.unchanged_bytes = 65536;
		m->u.stats.deleted = 2; /* version 9 */
		/* Version 7: this side's three stages, within the bounds. */
		for (unsigned i = 0; i < 3; i++) {
			struct proto_stage *g = &m->u.stats.stage[type == PROTO_END ? i : 3 + i];
			*g = (struct proto_stage){ .threads = 1 + i, .span_us = 900u * (1 + i),
						   .busy_us = 300, .in_us = 200, .out_us = 100 * i };
		}
		break;
	default:
		m->u.error.code = -1005;
		strcpy(m->u.error.msg, "authentication failed");
		break;
	}
}

/* A ctl seed: mode byte, then the frames of types[n]. */
static void ctl_seed(const char *name, uint8_t mode, const uint8_t *types, size_t n)
{
	static struct seed s;
	static struct proto_msg m;

	s.len = 0;
	seed_put(&s, &mode, 1);
	for (size_t i = 0; i < n; i++) {
		msg_of(types[i], &m);
		frame(&s, &m);
	}
	seed_write(&s, "fuzz_ctl", name);
}

#define CTL_SEED(name, mode, ...)                                                 \
	do {                                                                      \
		static const uint8_t t_[] = { __VA_ARGS__ };                      \
		ctl_seed(name, mode, t_, sizeof(t_));                             \
	} while (0)

/* The modes are fuzz_ctl.c's enum fuzz_mode. */
static void ctl_seeds(void)
{
	CTL_SEED("0-frames-all", 0, PROTO_HELLO, PROTO_AUTH, PROTO_KEY, PROTO_REQUEST,
		 PROTO_READY, PROTO_SKIP, PROTO_ENTRIES, PROTO_FILE_END, PROTO_FILE_FAIL,
		 PROTO_FILE_DONE, PROTO_ACK, PROTO_END, PROTO_DONE, PROTO_ERROR, PROTO_SUMS);
	CTL_SEED("1-expect-order", 1, PROTO_HELLO, PROTO_KEY, PROTO_REQUEST, PROTO_AUTH,
		 PROTO_READY, PROTO_ENTRIES, PROTO_FILE_FAIL, PROTO_FILE_END, PROTO_END,
		 PROTO_FILE_DONE, PROTO_ACK, PROTO_DONE);
	CTL_SEED("1-expect-error", 1, PROTO_HELLO, PROTO_ERROR);
	CTL_SEED("1-expect-wrong-type", 1, PROTO_HELLO, PROTO_READY); /* KEY was expected */
	CTL_SEED("3-server-pipe-wrong-type", 3, PROTO_HELLO, PROTO_KEY, PROTO_ENTRIES);
	CTL_SEED("2-server-daemon", 2, PROTO_HELLO, PROTO_REQUEST, PROTO_AUTH);
	CTL_SEED("2-server-daemon-error", 2, PROTO_HELLO, PROTO_ERROR);
	CTL_SEED("3-server-pipe", 3, PROTO_HELLO, PROTO_KEY, PROTO_REQUEST);
	CTL_SEED("4-client-daemon", 4, PROTO_HELLO, PROTO_AUTH, PROTO_READY);
	CTL_SEED("5-client-pipe", 5, PROTO_HELLO, PROTO_READY);
	CTL_SEED("5-client-pipe-error", 5, PROTO_HELLO, PROTO_ERROR);
}

/* ---- fuzz_proto: frames with every string at its longest ---------------- */

/* Writes s (a frame) as NAME, and as NAME-payload its type byte followed
 * by its payload (fuzz_proto's single-payload mode). */
static void proto_seed_both(struct seed *s, const char *name)
{
	char pname[128];

	seed_write(s, "fuzz_proto", name);
	memmove(s->buf + 1, s->buf + PROTO_FRAME_HDR_LEN, s->len - PROTO_FRAME_HDR_LEN);
	s->len -= PROTO_FRAME_HDR_LEN - 1;
	snprintf(pname, sizeof(pname), "%s-payload", name);
	seed_write(s, "fuzz_proto", pname);
}

/* Big-endian u16/u32 back into a seed. */
static void put_be(uint8_t *p, uint32_t v, size_t width)
{
	for (size_t i = 0; i < width; i++)
		p[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
}

/* Seeds of a message of type whose string field, its last, holds n bytes
 * of 's' (n at most its limit): "NAME-max" and, one byte over the limit
 * (which the decoder must refuse), "NAME-over"; each also as a payload. */
static void proto_max_seed(const char *name, uint8_t type, size_t n)
{
	static struct seed s;
	static struct proto_msg m;
	char sname[128];
	char *str;

	msg_of(type, &m);
	switch (type) {
	case PROTO_READY: str = m.u.ready.host; break;
	case PROTO_FILE_FAIL: str = m.u.file_fail.msg; break;
	case PROTO_FILE_DONE: str = m.u.file_done.msg; break;
	case PROTO_SKIP: str = m.u.skip.msg; break;
	default: str = m.u.error.msg; break;
	}
	memset(str, 's', n);
	str[n] = '\0';
	s.len = 0;
	frame(&s, &m);
	snprintf(sname, sizeof(sname), "%s-max", name);
	proto_seed_both(&s, sname);
	/* One byte more: the frame's length, the string's length, an 's'. */
	s.len = 0;
	frame(&s, &m);
	put_be(s.buf + 4, (uint32_t)(s.len - PROTO_FRAME_HDR_LEN + 1), 4);
	put_be(s.buf + s.len - n - 2, (uint32_t)(n + 1), 2);
	seed_put(&s, "s", 1);
	snprintf(sname, sizeof(sname), "%s-over", name);
	proto_seed_both(&s, sname);
}

/* A REQUEST with its connect host and codec spec at their longest, and
 * PROTO_MAX_PATHS one-byte paths, and no filter rule; one with a path
 * more; and one with its filter rules at their limits too (version 9). */
static void proto_request_max_seed(void)
{
	static struct seed s;
	static struct proto_msg m;
	char rule[PROTO_MAX_FILTER + 1];

	msg_of(PROTO_REQUEST, &m);
	memset(m.u.request->connect_host, 'h', PROTO_MAX_HOST);
	memset(m.u.request->connect_ssh, 'u', PROTO_MAX_SSH_DEST);
	memset(m.u.request->connect_pcopy, 'x', PROTO_MAX_PATH);
	memset(m.u.request->codec, 'c', PROTO_MAX_CODEC_SPEC);
	memset(m.u.request->paths, 0, sizeof(m.u.request->paths));
	m.u.request->npaths = 0;
	while (m.u.request->npaths < PROTO_MAX_PATHS)
		(void)proto_request_add_path(m.u.request, "p");
	m.u.request->nfilters = 0;
	s.len = 0;
	frame(&s, &m);
	/* One path more than PROTO_MAX_PATHS: the count after the fixed
	 * fields (bwlimit's 8 bytes and sync's 4 last), the host and the codec
	 * spec, and a path "p" before the filter count (0). */
	put_be(s.buf + PROTO_FRAME_HDR_LEN + 60 + PROTO_ATTACH_ID_LEN + 8 + 4 + 2 + PROTO_MAX_HOST + 2 +
	       PROTO_MAX_SSH_DEST + 2 + PROTO_MAX_PATH + 2 + PROTO_MAX_CODEC_SPEC,
	       PROTO_MAX_PATHS + 1, 2);
	s.len -= 2;
	seed_put(&s, "\0\1p\0\0", 5);
	put_be(s.buf + 4, (uint32_t)(s.len - PROTO_FRAME_HDR_LEN), 4);
	seed_write(&s, "fuzz_proto", "55-request-over");
	/* Rules of PROTO_MAX_FILTER bytes while they fit, then short ones up
	 * to PROTO_MAX_FILTERS or PROTO_REQ_FILTER_BYTES. */
	memset(rule, '*', sizeof(rule));
	memcpy(rule, "- ", 2);
	rule[PROTO_MAX_FILTER] = '\0';
	while (proto_request_add_filter(m.u.request, rule) == 0)
		;
	while (proto_request_add_filter(m.u.request, "+ a") == 0)
		;
	s.len = 0;
	frame(&s, &m);
	seed_write(&s, "fuzz_proto", "54-request-max");
}

/* Strings at their limits, and one byte past them, are where an
 * off-by-one in a bound shows: a mutation fuzzer seldom makes the two or
 * three matching changes (frame length, string length, one more byte)
 * that lead from a short string to one over the limit. */
/* An ENTRIES of one entry whose path (its first string) is n bytes long,
 * components of 100 'p' and a '/': "NAME-max" at PROTO_MAX_PATH and, one
 * byte longer, "NAME-over"; each also as a payload. */
static void proto_entries_path_seed(const char *name)
{
	static struct seed s;
	static struct proto_batch b;
	static struct proto_entry e;
	static struct proto_msg m;
	size_t at = PROTO_FRAME_HDR_LEN + 6 + 58; /* the path's length prefix */
	char sname[128];

	memset(&e, 0, sizeof(e));
	e.type = PROTO_ENT_DIR;
	e.mode = 0755;
	for (size_t i = 0; i < PROTO_MAX_PATH; i++)
		e.path[i] = i % 101 == 100 ? '/' : 'p';
	proto_batch_init(&b, 0);
	if (proto_batch_add(&b, &e) != 0) {
		fprintf(stderr, "fuzz_mkseeds: cannot add the longest path\n");
		exit(1);
	}
	proto_batch_msg(&b, &m);
	s.len = 0;
	frame(&s, &m);
	snprintf(sname, sizeof(sname), "%s-max", name);
	proto_seed_both(&s, sname);
	/* One 'p' more in the last component: 4097 bytes. */
	s.len = 0;
	frame(&s, &m);
	memmove(s.buf + at + 3, s.buf + at + 2, s.len - at - 2);
	s.buf[at + 2] = 'p';
	s.len++;
	put_be(s.buf + at, PROTO_MAX_PATH + 1, 2);
	put_be(s.buf + 4, (uint32_t)(s.len - PROTO_FRAME_HDR_LEN), 4);
	snprintf(sname, sizeof(sname), "%s-over", name);
	proto_seed_both(&s, sname);
}

/* Offset of the first entry's fields in an ENTRIES frame. */
#define SEED_ENTRY_AT (PROTO_FRAME_HDR_LEN + 6)

/* An ENTRIES holding e (valid) as id first_id, with n bytes at offset `at`
 * of the entry replaced by `bytes` so that exactly one rule breaks:
 * "58-entry-NAME", which the decoder must refuse, also as a payload. A
 * mutation fuzzer seldom hits a rule between two fields (a target on a
 * FIFO, a size on a DIR) or a path rule from a valid entry by chance. */
static void proto_bad_entry_seed(const char *name, const struct proto_entry *e,
				 uint32_t first_id, size_t at, const char *bytes, size_t n)
{
	static struct seed s;
	static struct proto_batch b;
	static struct proto_msg m;
	char sname[128];

	proto_batch_init(&b, first_id);
	if (proto_batch_add(&b, e) != 0) {
		fprintf(stderr, "fuzz_mkseeds: the base of %s is not valid\n", name);
		exit(1);
	}
	proto_batch_msg(&b, &m);
	s.len = 0;
	frame(&s, &m);
	memcpy(s.buf + SEED_ENTRY_AT + at, bytes, n);
	snprintf(sname, sizeof(sname), "58-entry-%s", name);
	proto_seed_both(&s, sname);
}

/* An entry of type t at path, with nothing else set. */
static const struct proto_entry *entry_base(uint8_t t, const char *path)
{
	static struct proto_entry e;

	memset(&e, 0, sizeof(e));
	e.type = t;
	e.mode = 0644;
	snprintf(e.path, sizeof(e.path), "%s", path);
	if (t == PROTO_ENT_REG)
		e.size = 5;
	if (t == PROTO_ENT_SYMLINK)
		strcpy(e.target, "t");
	return &e;
}

/* One seed per rule of an entry (docs/PROTOCOL.md 4.6): offsets are those
 * of the entry table there; a path starts at 60. */
static void proto_bad_entry_seeds(void)
{
	static char longpath[PROTO_MAX_NAME + 3];
	const uint8_t R = PROTO_ENT_REG;

	proto_bad_entry_seed("type-0", entry_base(R, "f"), 0, 0, "\x00", 1);
	proto_bad_entry_seed("type-10", entry_base(R, "f"), 0, 0, "\x0a", 1);
	proto_bad_entry_seed("dir-with-size", entry_base(R, "f"), 0, 0, "\x02", 1);
	proto_bad_entry_seed("flag-4", entry_base(R, "f"), 0, 1, "\x04", 1);
	proto_bad_entry_seed("flag-on-dir", entry_base(PROTO_ENT_DIR, "d"), 0, 1, "\x02", 1);
	proto_bad_entry_seed("stream-with-size", entry_base(R, "f"), 0, 1, "\x01", 1);
	proto_bad_entry_seed("mode-010000", entry_base(R, "f"), 0, 2, "\x00\x00\x10\x00", 4);
	proto_bad_entry_seed("mtime-ns-1e9", entry_base(R, "f"), 0, 22, "\x3b\x9a\xca\x00", 4);
	proto_bad_entry_seed("atime-ns-1e9", entry_base(R, "f"), 0, 34, "\x3b\x9a\xca\x00", 4);
	proto_bad_entry_seed("rdev-on-reg", entry_base(R, "f"), 0, 53, "\x01", 1);
	proto_bad_entry_seed("link-on-reg", entry_base(R, "f"), 0, 57, "\x01", 1);
	proto_bad_entry_seed("link-to-self", entry_base(PROTO_ENT_HARDLINK, "h"), 1, 57, "\x01", 1);
	proto_bad_entry_seed("target-on-fifo", entry_base(PROTO_ENT_SYMLINK, "l"), 0, 0, "\x05", 1);
	proto_bad_entry_seed("symlink-no-target", entry_base(PROTO_ENT_FIFO, "l"), 0, 0, "\x03", 1);
	proto_bad_entry_seed("path-absolute", entry_base(R, "xabc"), 0, 60, "/", 1);
	proto_bad_entry_seed("path-dot", entry_base(R, "a/x/b"), 0, 62, ".", 1);
	proto_bad_entry_seed("path-dotdot", entry_base(R, "xx/ab"), 0, 60, "..", 2);
	proto_bad_entry_seed("path-empty-component", entry_base(R, "a/xb"), 0, 62, "/", 1);
	proto_bad_entry_seed("path-trailing-slash", entry_base(R, "abcd"), 0, 63, "/", 1);
	/* A component of 256 bytes: 255 'c', '/', 'd' with the '/' made a 'c'. */
	memset(longpath, 'c', PROTO_MAX_NAME);
	strcpy(longpath + PROTO_MAX_NAME, "/d");
	proto_bad_entry_seed("path-component-256", entry_base(R, longpath), 0, 60 + PROTO_MAX_NAME,
			     "c", 1);
}

/* One frame of each control message, as NAME (0*-, 1*-). */
static void proto_msg_seed(const char *name, uint8_t type)
{
	static struct seed s;
	static struct proto_msg m;

	msg_of(type, &m);
	s.len = 0;
	frame(&s, &m);
	seed_write(&s, "fuzz_proto", name);
}

/* A session as the sink hears and answers it, frames back to back
 * (20-session); and a server source's, with SKIPs among its entries
 * (21-session-skip). */
static void proto_session_seeds(void)
{
	static const uint8_t sink_view[] = { PROTO_HELLO, PROTO_KEY, PROTO_REQUEST, PROTO_READY,
					     PROTO_ENTRIES, PROTO_SUMS, PROTO_HAVE, PROTO_ENTRIES,
					     PROTO_FILE_END, PROTO_FILE_FAIL, PROTO_FILE_DONE,
					     PROTO_LIST,
					     PROTO_ACK, PROTO_END, PROTO_DONE };
	static struct seed s;
	static struct proto_msg m;
	static struct proto_batch b;

	s.len = 0;
	for (size_t i = 0; i < sizeof(sink_view); i++) {
		msg_of(sink_view[i], &m);
		if (sink_view[i] == PROTO_ENTRIES && i > 5) { /* the second: a stream, id 9 */
			batch_stream(&b, 9);
			proto_batch_msg(&b, &m);
		}
		frame(&s, &m);
	}
	seed_write(&s, "fuzz_proto", "20-session");
	s.len = 0;
	msg_of(PROTO_SKIP, &m);
	frame(&s, &m);
	msg_of(PROTO_ENTRIES, &m);
	frame(&s, &m);
	msg_of(PROTO_SKIP, &m);
	frame(&s, &m); /* the same index again: a second entry of that tree */
	msg_of(PROTO_END, &m);
	frame(&s, &m);
	seed_write(&s, "fuzz_proto", "21-session-skip");
}

/* A probe session as the server hears and answers it (22-session-probe),
 * and PROBE_FIG with the most codec records and one more (59-*). */
static void proto_probe_seeds(void)
{
	static struct seed s;
	static struct proto_msg m;
	static struct proto_request req;
	static const uint8_t ops[] = { PROTO_PROBE_MARK, PROTO_PROBE_SIDE, PROTO_PROBE_MARK,
				       PROTO_PROBE_END };

	s.len = 0;
	msg_of(PROTO_HELLO, &m);
	frame(&s, &m);
	msg_of(PROTO_KEY, &m);
	frame(&s, &m);
	memset(&req, 0, sizeof(req));
	req.role = PROTO_ROLE_PROBE;
	req.streams = 8;
	req.block_size = 1u << 20;
	(void)proto_request_add_path(&req, "incoming");
	memset(&m, 0, sizeof(m));
	m.type = PROTO_REQUEST;
	m.u.request = &req;
	frame(&s, &m);
	msg_of(PROTO_READY, &m);
	frame(&s, &m);
	for (size_t i = 0; i < sizeof(ops); i++) {
		memset(&m, 0, sizeof(m));
		m.type = PROTO_PROBE;
		m.u.probe.op = ops[i];
		m.u.probe.arg = ops[i] == PROTO_PROBE_SIDE ? 64 : 0;
		frame(&s, &m);
		memset(&m, 0, sizeof(m));
		m.type = PROTO_PROBE_FIG;
		if (ops[i] == PROTO_PROBE_SIDE)
			probe_fig_of(&m.u.probe_fig, 2);
		m.u.probe_fig.op = ops[i];
		m.u.probe_fig.rx_bytes = ops[i] == PROTO_PROBE_MARK ? 1000000u * (i + 1) : 0;
		m.u.probe_fig.t_us = ops[i] == PROTO_PROBE_MARK ? 5000000u + 100000u * i : 0;
		frame(&s, &m);
	}
	seed_write(&s, "fuzz_proto", "22-session-probe");

	msg_of(PROTO_PROBE_FIG, &m);
	probe_fig_of(&m.u.probe_fig, PROTO_PROBE_MAX_CODECS);
	s.len = 0;
	frame(&s, &m);
	proto_seed_both(&s, "59-probe_fig-codecs-max");
	/* One more record, and the count that says so: by hand, since the
	 * encoder refuses it. */
	s.len = 0;
	frame(&s, &m);
	size_t rec = 28, at = s.len;
	seed_put(&s, s.buf + at - rec, rec);
	s.buf[PROTO_FRAME_HDR_LEN + 1] = PROTO_PROBE_MAX_CODECS + 1;
	put_be(s.buf + 4, (uint32_t)(s.len - PROTO_FRAME_HDR_LEN), 4);
	proto_seed_both(&s, "59-probe_fig-codecs-over");
}

static void proto_seeds(void)
{
	static struct seed s;
	static struct proto_msg m;
	static struct proto_batch b;

	proto_msg_seed("01-hello", PROTO_HELLO);
	proto_msg_seed("02-auth", PROTO_AUTH);
	proto_msg_seed("03-key", PROTO_KEY);
	proto_msg_seed("04-request", PROTO_REQUEST);
	proto_msg_seed("05-ready", PROTO_READY);
	proto_msg_seed("06-entries", PROTO_ENTRIES);
	batch_stream(&b, UINT32_MAX);
	proto_batch_msg(&b, &m);
	s.len = 0;
	frame(&s, &m);
	seed_write(&s, "fuzz_proto", "06-entries-stdin");
	proto_msg_seed("07-file_end", PROTO_FILE_END);
	proto_msg_seed("08-file_done", PROTO_FILE_DONE);
	proto_msg_seed("09-end", PROTO_END);
	proto_msg_seed("10-done", PROTO_DONE);
	proto_msg_seed("11-error", PROTO_ERROR);
	proto_msg_seed("12-skip", PROTO_SKIP);
	proto_msg_seed("13-file_fail", PROTO_FILE_FAIL);
	proto_msg_seed("14-ack", PROTO_ACK);
	proto_msg_seed("15-probe", PROTO_PROBE);
	proto_msg_seed("16-probe_fig", PROTO_PROBE_FIG);
	proto_msg_seed("17-have", PROTO_HAVE);
	proto_msg_seed("18-list", PROTO_LIST);
	proto_msg_seed("19-sums", PROTO_SUMS);
	proto_probe_seeds();
	proto_session_seeds();
	proto_max_seed("50-ready-host", PROTO_READY, PROTO_MAX_HOST);
	proto_entries_path_seed("51-entries-path");
	proto_max_seed("52-file_done-msg", PROTO_FILE_DONE, PROTO_MAX_MSG);
	proto_max_seed("53-error-msg", PROTO_ERROR, PROTO_MAX_MSG);
	proto_max_seed("56-skip-msg", PROTO_SKIP, PROTO_MAX_MSG);
	proto_max_seed("57-file_fail-msg", PROTO_FILE_FAIL, PROTO_MAX_MSG);
	proto_bad_entry_seeds();
	proto_request_max_seed();
}

/* ---- fuzz_data: a block-size byte, then blocks -------------------------- */

/* Appends a DATA block of raw[len] at offset in codec id (NONE if it does
 * not shrink, as the source does). */
static void data_block(struct seed *s, unsigned id, const uint8_t *raw, uint32_t len,
		       uint64_t offset, uint64_t seq)
{
	static uint8_t enc[SEED_CAP];
	const struct codec *c = codec_by_id(id);
	struct proto_block b = { .type = PROTO_BLK_DATA, .codec = (uint8_t)id, .file_id = 0,
				 .offset = offset, .raw_len = len, .seq = seq };
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];
	void *ctx = c->ctx_new(c->default_level);
	size_t n = 0;

	if (ctx == NULL || id == CODEC_NONE ||
	    c->compress(ctx, raw, len, enc, sizeof(enc), &n) != 0 || n >= len) {
		b.codec = CODEC_NONE;
		memcpy(enc, raw, len);
		n = len;
	}
	if (ctx != NULL)
		c->ctx_free(ctx);
	b.enc_len = (uint32_t)n;
	b.checksum = proto_checksum(raw, len);
	proto_block_encode(&b, hdr);
	seed_put(s, hdr, sizeof(hdr));
	seed_put(s, enc, n);
}

/* Appends a PACK block for ids first..first+n-1: the n statuses, then
 * the contents in raw[len] (those of the ids whose status is 0), encoded
 * in codec id when that shrinks it. */
static void pack_block(struct seed *s, unsigned id, uint32_t first, const int32_t *status,
		       uint32_t n, const uint8_t *raw, uint32_t len, uint64_t seq)
{
	static uint8_t all[SEED_CAP], enc[SEED_CAP];
	const struct codec *c = codec_by_id(id);
	struct proto_block b = { .type = PROTO_BLK_PACK, .codec = (uint8_t)id, .file_id = first,
				 .offset = n, .raw_len = 4 * n + len, .seq = seq };
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];
	void *ctx = c->ctx_new(c->default_level);
	size_t m = 0;

	for (uint32_t i = 0; i < n; i++)
		put_be(all + 4 * i, (uint32_t)status[i], 4);
	memcpy(all + 4 * n, raw, len);
	if (ctx == NULL || id == CODEC_NONE ||
	    c->compress(ctx, all, b.raw_len, enc, sizeof(enc), &m) != 0 || m >= b.raw_len) {
		b.codec = CODEC_NONE;
		memcpy(enc, all, b.raw_len);
		m = b.raw_len;
	}
	if (ctx != NULL)
		c->ctx_free(ctx);
	b.enc_len = (uint32_t)m;
	b.checksum = proto_checksum(all, b.raw_len);
	proto_block_encode(&b, hdr);
	seed_put(s, hdr, sizeof(hdr));
	seed_put(s, enc, m);
}

static void hole_block(struct seed *s, uint32_t len, uint64_t offset, uint64_t seq)
{
	struct proto_block b = { .type = PROTO_BLK_DATA, .flags = PROTO_BLK_HOLE,
				 .offset = offset, .raw_len = len, .seq = seq };
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];

	proto_block_encode(&b, hdr);
	seed_put(s, hdr, sizeof(hdr));
}

/* SAME (version 10): a block the sink has already; sum is the low half of
 * the XXH3-128 of its bytes. */
static void same_block(struct seed *s, uint32_t len, uint64_t offset, uint64_t seq, uint64_t sum)
{
	struct proto_block b = { .type = PROTO_BLK_SAME, .offset = offset, .raw_len = len,
				 .seq = seq, .checksum = sum };
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];

	proto_block_encode(&b, hdr);
	seed_put(s, hdr, sizeof(hdr));
}

static void end_block(struct seed *s)
{
	struct proto_block b = { .type = PROTO_BLK_END };
	uint8_t hdr[PROTO_BLOCK_HDR_LEN];

	proto_block_encode(&b, hdr);
	seed_put(s, hdr, sizeof(hdr));
}

/* Text that compresses, with a little variety. */
static void fill_text(uint8_t *p, size_t n, unsigned salt)
{
	static const char words[] = "pcopy copies files over parallel streams; ";

	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(words[(i + salt) % (sizeof(words) - 1)] ^ ((i / 997) & 7));
}

static void data_seeds(void)
{
	static struct seed s;
	static uint8_t raw[4096];
	static const char *const names[CODEC_COUNT] = { "none", "zlib", "lz4", "bz2" };
	char name[64];

	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		/* Block size 4096 (selector 0): a whole block, a hole, a short
		 * last block, END. */
		s.len = 0;
		seed_put(&s, "\0", 1);
		fill_text(raw, sizeof(raw), id);
		data_block(&s, id, raw, 4096, 0, 0);
		hole_block(&s, 4096, 4096, 1);
		data_block(&s, id, raw, 1000, 8192, 2);
		end_block(&s);
		snprintf(name, sizeof(name), "%u-%s-stream", id, names[id]);
		seed_write(&s, "fuzz_data", name);
	}
	/* Block size 64 KiB (selector 1): small blocks in every codec. */
	s.len = 0;
	seed_put(&s, "\1", 1);
	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		fill_text(raw, 300, 7 * id);
		data_block(&s, id, raw, 300, (uint64_t)id << 16, id);
	}
	end_block(&s);
	seed_write(&s, "fuzz_data", "4-mixed-64k");
	/* Block size 1 MiB (selector 2): one byte. */
	s.len = 0;
	seed_put(&s, "\2", 1);
	data_block(&s, CODEC_NONE, (const uint8_t *)"x", 1, 0, 0);
	end_block(&s);
	seed_write(&s, "fuzz_data", "5-one-byte-1m");
	/* Block size 4096: small files packed, in every codec: ids 0..4 are a
	 * 300-byte file, a directory, a file sent in DATA blocks, one that
	 * could not be read, and a 200-byte file; then a DATA block (the
	 * receiver's stream does not tie blocks to entries). */
	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		static const int32_t status[] = { 0, 0, 1, -1003, 0 };
		s.len = 0;
		seed_put(&s, "\0", 1);
		fill_text(raw, 500, 3 * id);
		pack_block(&s, id, 0, status, 5, raw, 500, 0);
		data_block(&s, id, raw, 4096, 0, 1);
		end_block(&s);
		snprintf(name, sizeof(name), "6-pack-%s", names[id]);
		seed_write(&s, "fuzz_data", name);
	}
	/* Block size 4096: a block the sink has (SAME), a changed one, the
	 * last one the sink has too (--checksum). */
	s.len = 0;
	seed_put(&s, "\0", 1);
	fill_text(raw, 4096, 11);
	uint8_t sum[PROTO_SUM_LEN];
	proto_block_sum(raw, 4096, sum);
	same_block(&s, 4096, 0, 0, proto_sum_low(sum));
	data_block(&s, CODEC_NONE, raw, 4096, 4096, 1);
	proto_block_sum(raw, 100, sum);
	same_block(&s, 100, 8192, 2, proto_sum_low(sum));
	end_block(&s);
	seed_write(&s, "fuzz_data", "7-same");
}

/* ---- fuzz_tree: options, then operations ------------------------------ */

/* Operation op with attribute set attrs on path. */
static void tree_op(struct seed *s, unsigned op, unsigned attrs, const char *path)
{
	uint8_t hdr[2] = { (uint8_t)(op | attrs << 4), (uint8_t)strlen(path) };

	seed_put(s, hdr, 2);
	seed_put(s, path, strlen(path));
}

static void tree_file(struct seed *s, unsigned attrs, const char *path, uint8_t n,
		      uint8_t extra)
{
	uint8_t b[2] = { n, extra };

	tree_op(s, FUZZ_TREE_FILE, attrs, path);
	seed_put(s, b, 2);
}

static void tree_symlink(struct seed *s, const char *path, uint8_t target)
{
	tree_op(s, FUZZ_TREE_SYMLINK, 0, path);
	seed_put(s, &target, 1);
}

static void tree_hardlink(struct seed *s, const char *path, const char *target)
{
	uint8_t n = (uint8_t)strlen(target);

	tree_op(s, FUZZ_TREE_HARDLINK, 0, path);
	seed_put(s, &n, 1);
	seed_put(s, target, n);
}

/* Entries of every kind below dir, each through the symlink dir/l. */
static void tree_through(struct seed *s, const char *dir)
{
	static const unsigned ops[] = { FUZZ_TREE_MKDIR, FUZZ_TREE_DIR_END, FUZZ_TREE_FILE_OPEN,
					FUZZ_TREE_FIFO, FUZZ_TREE_SOCK, FUZZ_TREE_CHR };
	char p[128];

	snprintf(p, sizeof(p), "%s/x", dir);
	tree_file(s, 0, p, 5, 0);
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		snprintf(p, sizeof(p), "%s/e%zu", dir, i);
		tree_op(s, ops[i], 0, p);
	}
	snprintf(p, sizeof(p), "%s/y", dir);
	tree_hardlink(s, p, "top/f");
	snprintf(p, sizeof(p), "%s/z", dir);
	tree_symlink(s, p, 4);
}

static void tree_seeds(void)
{
	static const char *const bad[] = { "../x", "/etc/passwd", "a//b", "a/./b", ".", "..",
					   "a/", "" };
	static struct seed s;
	char p[64];

	/* Every kind of entry, -p, then writes through each kind of symlink. */
	s.len = 0;
	seed_put(&s, "\1", 1);
	tree_op(&s, FUZZ_TREE_MKDIR, 1, "top");
	tree_op(&s, FUZZ_TREE_MKDIR, 3, "top/ro");
	tree_file(&s, 0, "top/ro/f", 12, 3);
	tree_op(&s, FUZZ_TREE_DIR_END, 3, "top/ro");
	tree_file(&s, 6, "top/f", 200, 0);
	tree_hardlink(&s, "top/h", "top/f");
	tree_hardlink(&s, "top/h", "top/f");
	tree_op(&s, FUZZ_TREE_FIFO, 2, "top/fifo");
	tree_op(&s, FUZZ_TREE_SOCK, 4, "top/sock");
	tree_op(&s, FUZZ_TREE_CHR, 5, "top/chr");
	tree_op(&s, FUZZ_TREE_BLK, 12, "top/blk");
	tree_op(&s, FUZZ_TREE_FILE_OPEN, 0, "top/o1");
	tree_op(&s, FUZZ_TREE_FILE_OPEN, 0, "top/o2");
	tree_op(&s, FUZZ_TREE_COMMIT, 7, "top/o1");
	tree_op(&s, FUZZ_TREE_ABORT, 0, "top/o2");
	tree_op(&s, FUZZ_TREE_FILE_OPEN, 0, "top/o3");
	for (uint8_t k = 0; k < FUZZ_TREE_TARGETS; k++) {
		snprintf(p, sizeof(p), "top/l%u", k);
		tree_symlink(&s, p, k);
		tree_through(&s, p);
	}
	tree_op(&s, FUZZ_TREE_DIR_END, 1, "top");
	seed_write(&s, "fuzz_tree", "0-all-kinds");

	/* rename_top, numeric ids, a daemon's strip_setid, umask 077. */
	s.len = 0;
	seed_put(&s, "\x1f", 1);
	tree_op(&s, FUZZ_TREE_MKDIR, 6, "X");
	tree_file(&s, 6, "X/suid", 3, 1);
	tree_op(&s, FUZZ_TREE_CHR, 0, "X/dev");
	tree_symlink(&s, "X/up", 2);
	tree_through(&s, "X/up");
	tree_op(&s, FUZZ_TREE_DIR_END, 7, "X");
	tree_file(&s, 0, "Y", 1, 0);
	seed_write(&s, "fuzz_tree", "1-renamed-daemon");

	/* Paths the checks refuse, and times out of range. */
	s.len = 0;
	seed_put(&s, "\x21", 1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tree_op(&s, FUZZ_TREE_MKDIR, 0, bad[i]);
		tree_file(&s, 15, bad[i], 1, 0);
		tree_hardlink(&s, "ok", bad[i]);
	}
	tree_file(&s, 15, "ns", 1, 0);
	seed_write(&s, "fuzz_tree", "2-bad-paths");

	/* Entries in each other's way. */
	s.len = 0;
	seed_put(&s, "\0", 1);
	tree_file(&s, 0, "a", 1, 0);
	tree_op(&s, FUZZ_TREE_MKDIR, 0, "a");
	tree_file(&s, 0, "a/b", 1, 0);
	tree_op(&s, FUZZ_TREE_MKDIR, 0, "d");
	tree_file(&s, 0, "d", 1, 0);
	tree_symlink(&s, "d", 0);
	tree_op(&s, FUZZ_TREE_FIFO, 0, "d");
	tree_hardlink(&s, "d", "a");
	tree_symlink(&s, "a", 1);
	tree_op(&s, FUZZ_TREE_MKDIR, 0, "a");
	seed_write(&s, "fuzz_tree", "3-in-the-way");
}

/* ---- fuzz_tls: a selector byte, then a client's first flight ----------- */

/* What tls_connect sends first for identity (magic, stream): it gets no
 * answer, gives up after 200 ms, and we keep its ClientHello. */
static void tls_seed(const char *name, uint8_t selector, uint32_t magic, uint16_t stream,
		     enum tls_cipher cipher)
{
	static const uint8_t key[PROTO_KEY_LEN] = { 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
						    0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
						    0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
						    0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
						    0x11, 0x11, 0x11, 0x11 };
	static struct seed s;
	struct chan *ch = NULL;
	struct pc_err e;
	uint8_t buf[16384];
	ssize_t n;
	int sv[2], ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		perror("fuzz_mkseeds: socketpair");
		exit(1);
	}
	pc_err_init(&e);
	uint64_t deadline = platform_now_ns() + 200000000u;
	ret = magic == PROTO_MAGIC ? auth_ctl_tls_connect(sv[0], key, cipher, deadline, &ch, &e)
				   : auth_data_tls_connect(sv[0], key, stream, cipher, deadline, &ch,
							   &e);
	pc_err_destroy(&e);
	if (ret == 0)
		chan_free(ch);
	else
		close(sv[0]);
	(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
	n = recv(sv[1], buf, sizeof(buf), 0);
	close(sv[1]);
	if (ret != -PC_E_TIMEOUT || n <= 0) {
		fprintf(stderr, "fuzz_mkseeds: no ClientHello for %s\n", name);
		exit(1);
	}
	s.len = 0;
	seed_put(&s, &selector, 1);
	seed_put(&s, buf, (size_t)n);
	seed_write(&s, "fuzz_tls", name);
}

static void tls_seeds(void)
{
	tls_seed("60-control", 0, PROTO_MAGIC, 0, TLS_CIPHER_AUTO);
	tls_seed("61-data-0", 1, PROTO_DATA_MAGIC, 0, TLS_CIPHER_AUTO);
	tls_seed("62-data-7-chacha", 1, PROTO_DATA_MAGIC, 7, TLS_CIPHER_CHACHA20);
	tls_seed("63-data-8", 1, PROTO_DATA_MAGIC, 8, TLS_CIPHER_AES128_GCM); /* out of range */
	tls_seed("64-data-as-control", 0, PROTO_DATA_MAGIC, 0, TLS_CIPHER_AUTO);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_mkseeds DIR\n");
		return 1;
	}
	out_dir = argv[1];
	ctl_seeds();
	data_seeds();
	proto_seeds();
	tree_seeds();
	tls_seeds();
	return failed;
}
