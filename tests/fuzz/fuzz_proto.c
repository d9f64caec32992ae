/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for proto: control frames, block headers, data hellos,
 * TLS PSK identities, route preambles, and both sides' reading of the clear data handshake
 * (auth_data_accept, auth_data_confirm, over a plain chan).
 *
 * The input is read as a stream of control frames. Every message that
 * decodes must encode back to exactly the bytes it came from and decode
 * again to the same struct; an ENTRIES' entries must read back, keep every
 * entry rule, and build the same bytes again through proto_batch_add;
 * anything else is a bug and aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/auth.h"
#include "pipeline/filter.h"
#include "sys/err.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_FRAME_CAP (PROTO_FRAME_HDR_LEN + PROTO_MAX_PAYLOAD)

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

/* Where the decoded REQUESTs go: the first decode, and the second. */
static struct proto_request fuzz_req[2];

/* Whether a and b (same type) say the same: a REQUEST's storage, an
 * ENTRIES' borrowed bytes, any other message byte for byte. */
static int fuzz_same(const struct proto_msg *a, const struct proto_msg *b)
{
	if (a->type == PROTO_REQUEST)
		return memcmp(a->u.request, b->u.request, sizeof(*a->u.request)) == 0;
	if (a->type == PROTO_ENTRIES)
		return a->u.entries.first_id == b->u.entries.first_id &&
		       a->u.entries.count == b->u.entries.count &&
		       a->u.entries.body_len == b->u.entries.body_len &&
		       memcmp(a->u.entries.body, b->u.entries.body, a->u.entries.body_len) == 0;
	if (a->type == PROTO_SUMS)
		return a->u.sums.id == b->u.sums.id && a->u.sums.first == b->u.sums.first &&
		       a->u.sums.count == b->u.sums.count &&
		       memcmp(a->u.sums.hashes, b->u.sums.hashes,
			      (size_t)a->u.sums.count * PROTO_SUM_LEN) == 0;
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* m decoded from payload[len] as type: re-encode and decode again. */
static void fuzz_roundtrip(uint8_t type, const uint8_t *payload, size_t len,
			   const struct proto_msg *m)
{
	static uint8_t frame[FUZZ_FRAME_CAP];
	static struct proto_msg again;
	uint8_t t = 0;
	uint32_t n = 0;
	int flen = proto_encode(m, frame, sizeof(frame));

	fuzz_require(flen == (int)(PROTO_FRAME_HDR_LEN + len));
	fuzz_require(proto_frame_decode(frame, &t, &n) == 0);
	fuzz_require(t == type && n == len);
	fuzz_require(memcmp(frame + PROTO_FRAME_HDR_LEN, payload, len) == 0);
	again.u.request = &fuzz_req[1];
	fuzz_require(proto_decode(t, frame + PROTO_FRAME_HDR_LEN, n, &again) == 0);
	fuzz_require(fuzz_same(m, &again));
	/* Any smaller buffer must be refused. */
	fuzz_require(proto_encode(m, frame, (size_t)flen - 1) < 0);
}

/* What the decoder lets through keeps the rules of docs/PROTOCOL.md that
 * receivers rely on without checking again. */
/* One entry as docs/PROTOCOL.md 4.6 says a receiver may take it. */
static void fuzz_entry_rules(const struct proto_entry *e)
{
	size_t tlen = strlen(e->target);

	fuzz_require(e->type >= PROTO_ENT_REG && e->type < PROTO_ENT_TYPE_MAX);
	fuzz_require(proto_check_relpath(e->path, strlen(e->path)) == 0);
	fuzz_require(e->type == PROTO_ENT_SYMLINK ? tlen >= 1 && tlen <= PROTO_MAX_PATH
						  : tlen == 0);
	fuzz_require(e->type == PROTO_ENT_REG || e->size == 0);
	fuzz_require((e->flags & ~(e->type == PROTO_ENT_REG ? PROTO_ENT_REG_FLAGS
				  : e->type == PROTO_ENT_DIR_END ? PROTO_ENT_INCOMPLETE : 0u)) == 0);
	fuzz_require(!(e->flags & PROTO_ENT_SIZE_UNKNOWN) || e->size == 0);
	fuzz_require(e->type == PROTO_ENT_CHR || e->type == PROTO_ENT_BLK || e->rdev == 0);
	fuzz_require(e->type == PROTO_ENT_HARDLINK ? e->link_id < e->id : e->link_id == 0);
	fuzz_require(e->mode <= 07777 && e->mtime_ns < 1000000000u && e->atime_ns < 1000000000u);
	fuzz_require(strlen(e->user) <= PROTO_MAX_NAME && strlen(e->group) <= PROTO_MAX_NAME);
}

/* Every entry reads back with consecutive ids and keeps the rules, and
 * the builder makes the same bytes of them. */
static void fuzz_entries(const struct proto_entries *es)
{
	static struct proto_batch b;
	static struct proto_entry e;
	size_t pos = 0;
	unsigned n = 0;
	int ret;

	fuzz_require(es->count >= 1 && es->count <= PROTO_MAX_BATCH);
	proto_batch_init(&b, es->first_id);
	while ((ret = proto_entries_next(es, &pos, &e)) == 1) {
		fuzz_require(e.id == es->first_id + n);
		fuzz_entry_rules(&e);
		fuzz_require(proto_batch_add(&b, &e) == 0);
		n++;
	}
	fuzz_require(ret == 0 && n == es->count);
	fuzz_require(b.len == es->body_len && memcmp(b.body, es->body, b.len) == 0);
}

/* Every filter rule a REQUEST decodes with has the wire's shape, and the
 * source compiles each and matches it against the request's paths, as a
 * daemon does while it walks (version 9). */
static void fuzz_filters(const struct proto_request *q)
{
	struct filter *f = filter_new();

	fuzz_require(q->nfilters <= PROTO_MAX_FILTERS && f != NULL);
	for (unsigned i = 0; i < q->nfilters; i++) {
		const char *rule = proto_request_filter(q, i);
		fuzz_require(rule != NULL && proto_filter_rule_ok(rule));
		fuzz_require(filter_add(f, rule) == 0);
	}
	for (unsigned i = 0; i < q->npaths; i++) {
		const char *path = proto_request_path(q, i);
		fuzz_require(path != NULL);
		(void)filter_excludes(f, path, i % 2 == 0);
	}
	filter_free(f);
}

static void fuzz_rules(const struct proto_msg *m)
{
	switch (m->type) {
	case PROTO_REQUEST:
		fuzz_require(m->u.request == &fuzz_req[0]);
		fuzz_require((m->u.request->flags & ~PROTO_REQ_KNOWN) == 0);
		fuzz_require((m->u.request->sync & ~PROTO_SYNC_KNOWN) == 0);
		fuzz_require(m->u.request->bwlimit == 0 ||
			     (m->u.request->bwlimit >= PROTO_MIN_BWLIMIT &&
			      m->u.request->bwlimit <= PROTO_MAX_BWLIMIT));
		fuzz_filters(m->u.request);
		break;
	case PROTO_LIST:
		/* A listing line: a known kind, a path to show. */
		fuzz_require(m->u.list.what >= PROTO_LIST_NEW && m->u.list.what <= PROTO_LIST_GONE);
		fuzz_require(m->u.list.path[0] != '\0' &&
			     strlen(m->u.list.path) <= PROTO_MAX_MSG);
		break;
	case PROTO_HAVE:
		/* Within a batch, and nothing past its count: the source reads
		 * only bits of entries it announced. */
		fuzz_require(m->u.have.count >= 1 && m->u.have.count <= PROTO_MAX_BATCH);
		for (uint32_t i = m->u.have.count; i < PROTO_MAX_BATCH; i++)
			fuzz_require(!proto_have_bit(&m->u.have, i));
		break;
	case PROTO_SUMS:
		/* Hashes borrowed from the payload, exactly count of them, and
		 * a range of blocks that does not wrap. */
		fuzz_require(m->u.sums.count >= 1 && m->u.sums.count <= PROTO_MAX_SUMS);
		fuzz_require(m->u.sums.first + m->u.sums.count > m->u.sums.first);
		fuzz_require(m->u.sums.hashes != NULL);
		break;
	case PROTO_ENTRIES:
		fuzz_entries(&m->u.entries);
		break;
	case PROTO_FILE_DONE:
		/* Success is an ACK's business: a FILE_DONE is a failure. */
		fuzz_require(m->u.file_done.status < 0);
		fuzz_require(strlen(m->u.file_done.msg) <= PROTO_MAX_MSG);
		break;
	case PROTO_FILE_FAIL:
		fuzz_require(m->u.file_fail.status < 0);
		fuzz_require(strlen(m->u.file_fail.msg) <= PROTO_MAX_MSG);
		break;
	case PROTO_ERROR:
		fuzz_require(m->u.error.code <= 0);
		fuzz_require(strlen(m->u.error.msg) <= PROTO_MAX_MSG);
		break;
	case PROTO_SKIP:
		/* The client counts a SKIP as a failed source: never a success. */
		fuzz_require(m->u.skip.status < 0);
		fuzz_require(strlen(m->u.skip.msg) <= PROTO_MAX_MSG);
		break;
	case PROTO_PROBE:
		/* A SIDE's write is bounded: the far side's disk is not ours to fill. */
		fuzz_require(m->u.probe.op >= PROTO_PROBE_MARK && m->u.probe.op < PROTO_PROBE_OP_MAX);
		fuzz_require(m->u.probe.op == PROTO_PROBE_SIDE
			     ? m->u.probe.arg >= 1 && m->u.probe.arg <= PROTO_PROBE_MAX_WRITE_MIB
			     : m->u.probe.arg == 0);
		break;
	case PROTO_PROBE_FIG:
		fuzz_require(m->u.probe_fig.ncodecs <= PROTO_PROBE_MAX_CODECS);
		fuzz_require(m->u.probe_fig.disk_status <= 0);
		for (unsigned i = 0; i < m->u.probe_fig.ncodecs; i++)
			fuzz_require(m->u.probe_fig.codec[i].codec != PROTO_CODEC_NONE &&
				     m->u.probe_fig.codec[i].codec < PROTO_CODEC_MAX &&
				     m->u.probe_fig.codec[i].raw >= 1 &&
				     m->u.probe_fig.codec[i].raw <= PROTO_MAX_BLOCK);
		/* Records past the count stay zero: nothing decodes there. */
		for (unsigned i = m->u.probe_fig.ncodecs; i < PROTO_PROBE_MAX_CODECS; i++)
			fuzz_require(m->u.probe_fig.codec[i].raw == 0);
		break;
	default:
		break;
	}
}

static void fuzz_payload(uint8_t type, const uint8_t *payload, size_t len)
{
	static struct proto_msg m;

	fuzz_require(proto_type_name(type) != NULL);
	/* A REQUEST needs the caller's storage: without it, nothing decodes. */
	m.u.request = NULL;
	fuzz_require(type != PROTO_REQUEST || proto_decode(type, payload, len, &m) != 0);
	m.u.request = &fuzz_req[0];
	if (proto_decode(type, payload, len, &m) != 0)
		return;
	fuzz_require(m.type == type);
	fuzz_rules(&m);
	fuzz_roundtrip(type, payload, len, &m);
}

static void fuzz_frames(const uint8_t *data, size_t size)
{
	size_t pos = 0;

	while (size - pos >= PROTO_FRAME_HDR_LEN) {
		uint8_t type = 0;
		uint32_t len = 0;

		if (proto_frame_decode(data + pos, &type, &len) != 0)
			return;
		fuzz_require(len <= PROTO_MAX_PAYLOAD);
		pos += PROTO_FRAME_HDR_LEN;
		if (size - pos < len)
			return;
		fuzz_payload(type, data + pos, len);
		pos += len;
	}
}

static void fuzz_block(const uint8_t *in, uint32_t max_block)
{
	struct proto_block b, again;
	uint8_t out[PROTO_BLOCK_HDR_LEN];

	memset(&b, 0, sizeof(b));
	if (proto_block_decode(in, max_block, &b) != 0)
		return;
	fuzz_require(b.type == PROTO_BLK_DATA || b.type == PROTO_BLK_END ||
		     b.type == PROTO_BLK_PACK || b.type == PROTO_BLK_SAME);
	fuzz_require(b.raw_len <= max_block && b.enc_len <= max_block);
	if (b.type == PROTO_BLK_SAME) {
		/* A place and a checksum: no payload, no codec, no flag. */
		fuzz_require(b.enc_len == 0 && b.codec == PROTO_CODEC_NONE && b.flags == 0);
		fuzz_require(b.raw_len > 0 && b.offset + b.raw_len >= b.offset);
	} else if (b.type == PROTO_BLK_PACK) {
		/* n ids from file_id, each with its 4-byte status. */
		fuzz_require(b.offset >= 1 && b.offset <= PROTO_MAX_PACK && b.flags == 0);
		fuzz_require(b.raw_len >= 4 * b.offset);
		fuzz_require((uint64_t)b.file_id + b.offset <= UINT32_MAX);
	} else {
		fuzz_require(b.offset + b.raw_len >= b.offset);
	}
	proto_block_encode(&b, out);
	fuzz_require(memcmp(out, in, PROTO_BLOCK_HDR_LEN) == 0);
	memset(&again, 0, sizeof(again));
	fuzz_require(proto_block_decode(out, max_block, &again) == 0);
	fuzz_require(memcmp(&b, &again, sizeof(b)) == 0);
}

static void fuzz_dhello(const uint8_t *in)
{
	struct proto_dhello h;
	uint8_t out[PROTO_DHELLO_LEN];

	memset(&h, 0, sizeof(h));
	if (proto_dhello_decode(in, &h) != 0)
		return;
	fuzz_require(h.magic == PROTO_DATA_MAGIC);
	proto_dhello_encode(&h, out);
	fuzz_require(memcmp(out, in, PROTO_DHELLO_LEN) == 0);
}

/* A TLS PSK identity as a listener or a daemon reads it from a ClientHello,
 * before any proof: only our 8-byte shape decodes, and it encodes back. */
static void fuzz_psk_id(const uint8_t *in, size_t len)
{
	struct proto_psk_id id;
	uint8_t out[PROTO_PSK_ID_LEN];

	memset(&id, 0, sizeof(id));
	if (proto_psk_id_decode(in, len, &id) != 0)
		return;
	fuzz_require(len == PROTO_PSK_ID_LEN && id.version == PROTO_VERSION);
	fuzz_require(id.magic == PROTO_DATA_MAGIC || (id.magic == PROTO_MAGIC && id.stream == 0));
	proto_psk_id_encode(&id, out);
	fuzz_require(memcmp(out, in, PROTO_PSK_ID_LEN) == 0);
}

/* The listener's handshake on the first DHELLO + proof bytes (fewer if the
 * input is shorter: a peer that hangs up early), with the key of the seed
 * 41-dhello-proof (32 bytes of 0x11) and 8 streams. It accepts only a right
 * proof for an index in range and answers with exactly one MAC; it refuses
 * everything else without a byte in answer. */
static void fuzz_accept(const uint8_t *in, size_t len)
{
	static const uint8_t k[PROTO_KEY_LEN] = {
		0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
		0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
		0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
	};
	uint8_t reply[PROTO_MAC_LEN + 1];
	uint16_t stream = 0xffff;
	struct chan *ch;
	int sv[2], ret;

	fuzz_require(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	if (len > PROTO_DHELLO_LEN + PROTO_MAC_LEN)
		len = PROTO_DHELLO_LEN + PROTO_MAC_LEN;
	fuzz_require(platform_write_full(sv[0], in, len) == 0);
	fuzz_require(shutdown(sv[0], SHUT_WR) == 0);
	ch = chan_plain_new(sv[1], sv[1]);
	fuzz_require(ch != NULL);
	ret = auth_data_accept(ch, k, 8, &stream);
	chan_free(ch); /* closes sv[1] */
	ssize_t n = read(sv[0], reply, sizeof(reply));
	if (ret == 0)
		fuzz_require(stream < 8 && n == PROTO_MAC_LEN);
	else if (len < PROTO_DHELLO_LEN + PROTO_MAC_LEN)
		fuzz_require(ret == -PC_E_NET && n == 0 && stream == 0xffff);
	else
		fuzz_require((ret == -PC_E_PROTO || ret == -PC_E_AUTH) && n == 0 &&
			     stream == 0xffff);
	close(sv[0]);
}

/* The connector's check of the listener's proof: the first PROTO_MAC_LEN
 * input bytes (fewer: the listener hung up) against an expected proof of
 * 32 bytes of 0x33 (the seed 42-confirm). Only exactly that proof passes. */
static void fuzz_confirm(const uint8_t *in, size_t len)
{
	uint8_t expect[PROTO_MAC_LEN];
	struct chan *ch;
	int sv[2], ret;

	memset(expect, 0x33, sizeof(expect));
	if (len > PROTO_MAC_LEN)
		len = PROTO_MAC_LEN;
	fuzz_require(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	fuzz_require(platform_write_full(sv[0], in, len) == 0);
	fuzz_require(shutdown(sv[0], SHUT_WR) == 0);
	ch = chan_plain_new(sv[1], sv[1]);
	fuzz_require(ch != NULL);
	ret = auth_data_confirm(ch, expect);
	if (len < PROTO_MAC_LEN)
		fuzz_require(ret == -PC_E_NET);
	else
		fuzz_require(ret == (memcmp(in, expect, PROTO_MAC_LEN) == 0 ? 0 : -PC_E_AUTH));
	close(sv[0]);
	chan_free(ch); /* closes sv[1] */
}

/* A route preamble, the first bytes a daemon's parent reads from a
 * stranger's data connection: what decodes must encode back to itself. */
static void fuzz_route(const uint8_t *in, size_t len)
{
	uint8_t token[PROTO_ROUTE_TOKEN_LEN], out[PROTO_ROUTE_LEN];

	if (proto_route_decode(in, len, token) != 0)
		return;
	fuzz_require(len == PROTO_ROUTE_LEN && proto_starts_route(in[0]));
	proto_route_encode(token, out);
	fuzz_require(memcmp(out, in, PROTO_ROUTE_LEN) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_frames(data, size);

	/* The first byte picks a type; the rest is its payload, no header. */
	if (size >= 1 && size - 1 <= PROTO_MAX_PAYLOAD)
		fuzz_payload(data[0], data + 1, size - 1);

	if (size >= PROTO_BLOCK_HDR_LEN) {
		fuzz_block(data, PROTO_MIN_BLOCK);
		fuzz_block(data, 1u << 20);
		fuzz_block(data, PROTO_MAX_BLOCK);
		fuzz_block(data, UINT32_MAX);
	}
	if (size >= PROTO_DHELLO_LEN)
		fuzz_dhello(data);
	fuzz_psk_id(data, size);
	if (size > PROTO_PSK_ID_LEN)
		fuzz_psk_id(data, PROTO_PSK_ID_LEN);
	fuzz_route(data, size);
	if (size > PROTO_ROUTE_LEN)
		fuzz_route(data, PROTO_ROUTE_LEN);
	fuzz_accept(data, size);
	fuzz_confirm(data, size);
	fuzz_require(proto_checksum(data, size) == proto_checksum(data, size));
	return 0;
}
