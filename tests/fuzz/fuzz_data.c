// SPDX-License-Identifier: Apache-2.0
/* libFuzzer target for a data connection's block stream, as a sink's
 * receiver reads it after the handshake: block headers (proto_block_decode
 * against the negotiated block size), then each payload decoded and its
 * checksum checked (decoder_verify, the code the sink runs). A PACK block
 * (several small files) must also hold its n statuses: raw_len >= 4n.
 *
 * Input: one byte choosing the block size (FUZZ_SIZES), then the stream as
 * it comes off the socket: a 40-byte header, enc_len payload bytes (none for
 * a HOLE or a SAME), the next header... It stops at an END block, at the first block
 * the sink would refuse, or where the input ends, as the sink does. A block
 * that verifies must hold exactly raw_len bytes whose XXH3 is the header's
 * checksum; verification may only fail with -PC_E_INTEGRITY or -PC_E_PROTO.
 * Anything else aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/bufpool.h"
#include "pipeline/decoder.h"
#include "sys/err.h"
#include "wire/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The replay driver of ordinary builds (replay.c) runs this many generated
 * inputs rather than its usual 200,000: each input here sets up a decoder
 * and may decompress a whole block, and 200,000 of them took 130 to 185 s
 * under ASan on a busy machine, against ctest's 300 s. libFuzzer (CI's fuzz
 * step) goes further. */
extern const size_t fuzz_replay_runs;
const size_t fuzz_replay_runs = 50000;

/* Block sizes a session may negotiate; small ones keep the fuzzer fast. */
static const uint32_t fuzz_sizes[] = { PROTO_MIN_BLOCK, 64u << 10, 1u << 20 };
#define FUZZ_NSIZES (sizeof(fuzz_sizes) / sizeof(fuzz_sizes[0]))

/* Per block size: a decoder and a pool-sized buffer, kept across inputs as
 * a receiver thread keeps its own. */
static struct decoder *fuzz_dec[FUZZ_NSIZES];
static struct buf fuzz_buf[FUZZ_NSIZES];

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

/* A verified PACK keeps the header rules its reader relies on: n = offset
 * ids from file_id without wrapping, and room for their n statuses. The
 * statuses and the sizes behind them are the sink's to check. */
static void fuzz_pack(const struct proto_block *h)
{
	uint64_t n = h->offset;

	fuzz_require(n >= 1 && n <= PROTO_MAX_PACK && h->flags == 0);
	fuzz_require((uint64_t)h->file_id + n <= UINT32_MAX);
	fuzz_require(h->raw_len >= 4 * n);
}

/* A visitor for proto_pack_walk standing for a sink's entries: the input
 * decides what each id is (no contents, or how many bytes it carries). */
static int fuzz_pack_visit(void *arg, uint32_t id, int32_t st, const uint8_t *p,
			   uint64_t avail, uint64_t *took)
{
	const uint8_t *shape = arg;

	(void)p;
	fuzz_require(st <= 1);
	*took = st == 0 && shape[id % 16] % 4 != 0 ? shape[id % 16] * (uint64_t)(id % 7 + 1) : 0;
	if (*took > avail)
		return -PC_E_PROTO; /* as the sink: the file does not fit */
	return 0;
}

/* One block whose header h is valid and whose payload is src[h->enc_len]
 * (none for a HOLE). Returns what decoder_verify returned. */
static int fuzz_block(struct decoder *d, struct buf *b, const struct proto_block *h,
		      const uint8_t *src)
{
	int ret;

	/* The sink walks a PACK only once verified; walking it raw here too
	 * lets the fuzzer reach the walk without forging checksums. */
	if (h->type == PROTO_BLK_PACK && h->codec == PROTO_CODEC_NONE) {
		uint8_t shape[16] = { 0 };
		memcpy(shape, src, h->enc_len < sizeof(shape) ? h->enc_len : sizeof(shape));
		ret = proto_pack_walk(src, h->enc_len, h->file_id, (uint32_t)h->offset,
				      fuzz_pack_visit, shape);
		fuzz_require(ret == 0 || ret == -PC_E_PROTO);
	}
	/* SAME: nothing to decode here; its writer reads and checks the
	 * bytes the sink has. */
	if (h->type == PROTO_BLK_SAME) {
		fuzz_require(h->flags == 0 && h->codec == PROTO_CODEC_NONE && h->enc_len == 0);
		fuzz_require(h->raw_len > 0 && h->offset <= UINT64_MAX - h->raw_len);
		return 0;
	}
	b->hdr = *h;
	b->len = 0;
	if (!(h->flags & PROTO_BLK_HOLE))
		memcpy(b->data, src, h->enc_len);
	ret = decoder_verify(d, b);
	fuzz_require(ret == 0 || ret == -PC_E_INTEGRITY || ret == -PC_E_PROTO);
	if (ret == 0) {
		fuzz_require(b->len == h->raw_len);
		if (!(h->flags & PROTO_BLK_HOLE))
			fuzz_require(proto_checksum(b->data, b->len) == h->checksum);
	}
	if (ret == 0 && h->type == PROTO_BLK_PACK)
		fuzz_pack(h);
	return ret;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 1, which;
	uint32_t max_block;

	if (size < 1)
		return 0;
	which = data[0] % FUZZ_NSIZES;
	max_block = fuzz_sizes[which];
	if (fuzz_dec[which] == NULL) {
		fuzz_dec[which] = decoder_new(max_block);
		fuzz_buf[which].data = bufpool_alloc_data(max_block);
		fuzz_buf[which].cap = max_block;
		fuzz_require(fuzz_dec[which] != NULL && fuzz_buf[which].data != NULL);
	}
	while (size - pos >= PROTO_BLOCK_HDR_LEN) {
		struct proto_block h;

		memset(&h, 0, sizeof(h));
		if (proto_block_decode(data + pos, max_block, &h) != 0)
			return 0;
		pos += PROTO_BLOCK_HDR_LEN;
		if (h.type == PROTO_BLK_END)
			return 0;
		fuzz_require(h.raw_len <= max_block && h.enc_len <= max_block);
		if (size - pos < h.enc_len)
			return 0;
		if (fuzz_block(fuzz_dec[which], &fuzz_buf[which], &h, data + pos) != 0)
			return 0;
		pos += h.enc_len;
	}
	return 0;
}
